//! `uetctl sim serve`: the simulator as a daemon. NICs on one in-memory fabric, each served
//! as a PCI function on a vfio-user socket of its own, so drivers in other processes attach
//! to them as to functions bound to `vfio-pci`.
//!
//! NIC `i` has fabric address 10.0.0.(1 + i), the address rank `i` of the demo job has, and
//! listens at `DIR/nic<i>.sock` ([`nic_socket`]). Each socket serves one driver at a time and
//! the next one after it; when a driver goes away, its function is released (DMA unmapped,
//! function-level reset). A daemon stopped by a signal ([`STOP_SIGNALS`]) removes its socket
//! files as it goes; a socket file left behind by a daemon that died otherwise is replaced;
//! one that another daemon still serves is an error, and nothing is started.
//!
//! A server holds a descriptor per DMA mapping of its client. The daemon raises its
//! descriptor limit to the hard limit and gives each NIC an equal share of it as the most
//! mappings its client may hold ([`dma_mappings_per_nic`]): one client cannot take the
//! descriptors another NIC's client needs.
//!
//! The host memory of a NIC's AV tables is bounded the same way: each NIC has table memory
//! for `--av-table-entries` entries ([`DEFAULT_AV_TABLE_ENTRIES`] by default, about 370 MiB
//! of the daemon's memory at most), and an `fi_av_open` past it is `FI_ENOSPC` for that
//! client alone, where one client's 64 tables of a million entries would take 5.6 GiB.

use crate::demo::rank_fabric_addr;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uet_sim::vfio_user::VfioUserServer;
use uet_sim::{Fabric, NicConfig};

/// How long `sim serve` waits to learn whether a socket at a NIC's path is served.
const STALE_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Most NICs one daemon serves.
pub const MAX_NICS: usize = 1024;

/// Entries of AV table memory each NIC has unless `--av-table-entries` says otherwise: four
/// tables of the largest size a NIC reports (`CAP_AV_ENTRIES`).
pub const DEFAULT_AV_TABLE_ENTRIES: u64 = 4 << 20;

/// Descriptors the daemon keeps for itself beside its NICs' (standard streams, logs, the
/// threads' own).
pub const RESERVED_DESCRIPTORS: u64 = 32;

/// Descriptors a NIC's server holds beside those of its DMA mappings: its listening socket,
/// its client's connection, and an eventfd per MSI-X vector.
pub const NIC_DESCRIPTORS: u64 = 2 + uet_regs::pci::MSIX_VECTORS as u64;

/// Fewest DMA mappings a NIC is served with: a driver maps a few regions per endpoint (its
/// rings, its buffers), and a process opens several.
pub const MIN_DMA_MAPPINGS: u32 = 64;

/// Raise this process's descriptor limit (`RLIMIT_NOFILE`) to its hard limit, as a daemon
/// whose servers hold a descriptor per DMA mapping of their clients must: at the usual soft
/// limit of 1,024, two clients with a few hundred mappings each would exhaust it, and every
/// NIC's next map or connection would fail with `EMFILE`. The limit in effect after.
fn raise_descriptor_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the `rlimit` it is given, which outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the `rlimit` it is given, which outlives the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    lim.rlim_cur
}

/// The DMA mappings each of `nics` NICs may hold when the daemon has `limit` descriptors:
/// an equal share of what [`RESERVED_DESCRIPTORS`] and each NIC's own ([`NIC_DESCRIPTORS`])
/// leave, at most the simulator's default (`uet_sim::DEFAULT_DMA_MAPPINGS`), so that no
/// client's mappings take the descriptors another NIC needs. An error when the share is
/// below [`MIN_DMA_MAPPINGS`].
pub fn dma_mappings_per_nic(limit: u64, nics: usize) -> Result<u32, ServeError> {
    let nics = u64::try_from(nics.max(1)).unwrap_or(u64::MAX);
    let share = (limit.saturating_sub(RESERVED_DESCRIPTORS) / nics).saturating_sub(NIC_DESCRIPTORS);
    let share = u32::try_from(share)
        .unwrap_or(u32::MAX)
        .min(uet_sim::DEFAULT_DMA_MAPPINGS);
    if share < MIN_DMA_MAPPINGS {
        return Err(ServeError::Config(format!(
            "{nics} NICs need at least {} file descriptors ({MIN_DMA_MAPPINGS} DMA mappings and \
             {NIC_DESCRIPTORS} more each, and {RESERVED_DESCRIPTORS} for the daemon); the \
             limit is {limit}: raise it (ulimit -Hn) or serve fewer NICs",
            nics.saturating_mul(u64::from(MIN_DMA_MAPPINGS) + NIC_DESCRIPTORS)
                .saturating_add(RESERVED_DESCRIPTORS)
        )));
    }
    Ok(share)
}

/// The socket of NIC `nic` in `dir`.
pub fn nic_socket(dir: &Path, nic: usize) -> PathBuf {
    dir.join(format!("nic{nic}.sock"))
}

/// Daemon parameters.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Directory of the sockets (created if missing).
    pub dir: PathBuf,
    /// NICs on the fabric.
    pub nics: usize,
    /// Host interface minor version of every NIC.
    pub interface_minor: u8,
    /// Entries of AV table memory each NIC has (`NicConfig::av_table_memory_entries`).
    pub av_table_entries: u64,
}

/// Why the daemon did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Bad parameters.
    #[error("{0}")]
    Config(String),
    /// A socket is in use, or cannot be made.
    #[error("{path}: {reason}")]
    Socket {
        /// The socket.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The daemon, its sockets bound: [`Daemon::run`] serves them.
#[derive(Debug)]
pub struct Daemon {
    servers: Vec<Arc<VfioUserServer>>,
    nics: Vec<(IpAddr, PathBuf)>,
}

impl Daemon {
    /// Build the fabric and bind every socket; nothing is served yet. On error no socket of
    /// this call is left behind.
    pub fn bind(cfg: &ServeConfig) -> Result<Daemon, ServeError> {
        if cfg.nics == 0 || cfg.nics > MAX_NICS {
            return Err(ServeError::Config(format!(
                "--nics must be 1..={MAX_NICS}, got {}",
                cfg.nics
            )));
        }
        let newest = uet_regs::INTERFACE_MINOR;
        if !(uet_sim::OLDEST_INTERFACE_MINOR..=newest).contains(&cfg.interface_minor) {
            return Err(ServeError::Config(format!(
                "--interface-minor must be {}..={newest}, got {}",
                uet_sim::OLDEST_INTERFACE_MINOR,
                cfg.interface_minor
            )));
        }
        if cfg.av_table_entries == 0 {
            return Err(ServeError::Config(
                "--av-table-entries must be at least 1".to_string(),
            ));
        }
        let socket_error = |path: &Path, reason: String| ServeError::Socket {
            path: path.to_path_buf(),
            reason,
        };
        let dma_mappings = dma_mappings_per_nic(raise_descriptor_limit(), cfg.nics)?;
        std::fs::create_dir_all(&cfg.dir).map_err(|e| socket_error(&cfg.dir, e.to_string()))?;
        let fabric = Fabric::new();
        let mut servers = Vec::with_capacity(cfg.nics);
        let mut nics = Vec::with_capacity(cfg.nics);
        for i in 0..cfg.nics {
            let addr = rank_fabric_addr(i);
            let path = nic_socket(&cfg.dir, i);
            // Only a socket nobody listens on is left over from a daemon that is gone. A
            // daemon that is stuck (its backlog full) is asked with a bounded wait, and any
            // other answer leaves the file to its owner.
            use uet_driver::telemetry::InTheWay;
            uet_driver::telemetry::make_way_for_socket(&path, STALE_CHECK_TIMEOUT).map_err(
                |e| {
                    socket_error(
                        &path,
                        match e {
                            InTheWay::NotASocket => {
                                "not a socket (remove it, or use another --dir)".into()
                            }
                            InTheWay::Served => {
                                "served by another process (stop it, or use another --dir)".into()
                            }
                            InTheWay::Undecided(e) => format!(
                                "a socket this daemon cannot take over ({e}; remove it, or use \
                                 another --dir)"
                            ),
                            InTheWay::CannotRemove(e) => e.to_string(),
                        },
                    )
                },
            )?;
            let mut nic = NicConfig::new(addr);
            nic.interface_minor = cfg.interface_minor;
            nic.dma_mappings = dma_mappings;
            nic.av_table_memory_entries = Some(cfg.av_table_entries);
            let function = fabric
                .add_nic(nic)
                .map_err(|e| ServeError::Config(e.to_string()))?;
            let server = VfioUserServer::bind(function, &path)
                .map_err(|e| socket_error(&path, e.to_string()))?;
            servers.push(Arc::new(server));
            nics.push((addr, path));
        }
        // Each server's function holds the fabric: it lives as long as they do.
        Ok(Daemon { servers, nics })
    }

    /// Each NIC's fabric address and socket.
    pub fn nics(&self) -> &[(IpAddr, PathBuf)] {
        &self.nics
    }

    /// Serve every socket, one thread each, until the process is stopped by one of
    /// [`STOP_SIGNALS`]: its sockets are then removed, as dropping the servers would (the
    /// serving threads hold them to the end), and the process ends by that signal, as it
    /// would have without the removal. Killed otherwise (`SIGKILL`), it leaves them to the
    /// next daemon, which replaces them. `ready` is called with [`Daemon::nics`] once a stop
    /// signal would remove the sockets, before the serving begins: whoever learns from it
    /// that the daemon serves may stop it from then on. When `ready` fails (no one could be
    /// told), nothing is served: the sockets are removed, the signal mask is as it was, and
    /// its error is returned.
    pub fn run(
        self,
        ready: impl FnOnce(&[(IpAddr, PathBuf)]) -> std::io::Result<()>,
    ) -> std::io::Error {
        // The stop signals wait for this thread: blocked here before the serving threads
        // start, they are blocked in those threads too (a thread inherits its creator's mask),
        // and the kernel gives a signal sent to the process to a thread that does not block
        // it, of which there is none.
        let stop = stop_signals();
        // SAFETY: sigset_t is plain data; pthread_sigmask writes the old mask into it.
        let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `stop` is an initialized signal set and `before` a writable one, both
        // outliving the call.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &stop, &mut before) };
        // Each socket file as bound: a file put in its place since is not removed.
        let bound: Vec<(PathBuf, Option<(u64, u64)>)> = self
            .nics
            .iter()
            .map(|(_, path)| (path.clone(), file_id(path)))
            .collect();
        if let Err(e) = ready(&self.nics) {
            // No server runs yet: dropping them removes their sockets, before a stop signal
            // that came meanwhile is let through.
            drop(self);
            // SAFETY: `before` is the mask pthread_sigmask gave above, outliving the call.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
            return e;
        }
        for server in &self.servers {
            let server = server.clone();
            std::thread::spawn(move || server.serve());
        }
        let signal = loop {
            let mut signal = 0;
            // SAFETY: `stop` is an initialized signal set and `signal` a writable int, both
            // outliving the call.
            if unsafe { libc::sigwait(&stop, &mut signal) } == 0 {
                break signal;
            }
        };
        for (path, id) in &bound {
            if id.is_some() && file_id(path) == *id {
                let _ = std::fs::remove_file(path);
            }
        }
        // SAFETY: restoring the default action of a signal the process takes, then unblocking
        // it in this thread and raising it there, ends the process as the signal does; the
        // set outlives the call.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &stop, std::ptr::null_mut());
            libc::raise(signal);
        }
        // Not reached: the signal's default action ends the process.
        std::process::exit(128 + signal)
    }
}

/// The signals that stop `sim serve` with its sockets removed: `SIGTERM` (kill(1), service
/// managers), `SIGINT` (Ctrl-C) and `SIGHUP` (its terminal closed).
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// [`STOP_SIGNALS`] as a signal set, but those the process ignores: a daemon started under
/// `nohup` (`SIGHUP` ignored) or in the background of a script (`SIGINT` ignored) goes on
/// ignoring them, where a blocked signal would be kept for `sigwait` instead.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, and sigemptyset initializes it before any other use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable signal set.
    unsafe { libc::sigemptyset(&mut set) };
    for signal in STOP_SIGNALS {
        // SAFETY: sigaction is plain data; it is only written (by sigaction below).
        let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a valid signal number, no new action, and a writable `sigaction` for the
        // current one, which outlives the call.
        let read = unsafe { libc::sigaction(signal, std::ptr::null(), &mut now) } == 0;
        if read && now.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        // SAFETY: `set` is an initialized signal set; `signal` a valid signal number.
        unsafe { libc::sigaddset(&mut set, signal) };
    }
    set
}

/// The device and inode of the file at `path` (not followed if a link), `None` when there is
/// none.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptors are shared out equally, each NIC's own and the daemon's set aside,
    /// at most the simulator's default; too few for the NICs asked for is an error that
    /// says how many they need.
    #[test]
    fn each_nic_gets_an_equal_share_of_the_descriptors_for_its_dma_mappings() {
        assert_eq!(dma_mappings_per_nic(1024, 2).unwrap(), (1024 - 32) / 2 - 66);
        assert_eq!(
            dma_mappings_per_nic(1 << 20, 1).unwrap(),
            uet_sim::DEFAULT_DMA_MAPPINGS
        );
        assert_eq!(
            dma_mappings_per_nic(u64::MAX, MAX_NICS).unwrap(),
            uet_sim::DEFAULT_DMA_MAPPINGS
        );
        let share = dma_mappings_per_nic(1 << 20, MAX_NICS).unwrap();
        assert!(
            u64::from(share + 66) * MAX_NICS as u64 + 32 <= 1 << 20,
            "{share}"
        );
        let e = dma_mappings_per_nic(1024, 16).unwrap_err().to_string();
        assert!(
            e.contains("2112 file descriptors") && e.contains("1024"),
            "{e}"
        );
    }

    /// A count of NICs whose descriptors exceed any number is refused with an error, as a
    /// count too large for the limit is, instead of overflowing the sum the error gives.
    #[test]
    fn a_count_of_nics_past_any_limit_is_refused_without_overflow() {
        for nics in [usize::MAX, usize::MAX / 2] {
            let e = dma_mappings_per_nic(u64::MAX, nics)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("{} file descriptors", u64::MAX)), "{e}");
        }
    }

    /// Binding raises the process's soft descriptor limit to its hard limit, and every NIC
    /// is served with its share of DMA mappings.
    #[test]
    fn the_daemon_raises_its_descriptor_limit_and_bounds_each_nics_mappings() {
        let dir = std::env::temp_dir().join(format!("uetctl-serve-limit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let daemon = Daemon::bind(&ServeConfig {
            dir: dir.clone(),
            nics: 2,
            interface_minor: uet_regs::INTERFACE_MINOR,
            av_table_entries: 5000,
        })
        .unwrap();
        for server in &daemon.servers {
            let config = server.function().config().unwrap();
            assert_eq!(config.av_table_memory_entries, Some(5000));
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the `rlimit` it is given, which outlives the call.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, lim.rlim_max, "raised to the hard limit");
        let share = dma_mappings_per_nic(lim.rlim_cur, 2).unwrap();
        for server in &daemon.servers {
            let config = server.function().config().unwrap();
            assert_eq!(config.dma_mappings, share);
        }
        drop(daemon);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
