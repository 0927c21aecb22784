//! `uetctl sim serve`: the simulator as a daemon. NICs on one in-memory fabric, each served
//! as a PCI function on a vfio-user socket of its own, so drivers in other processes attach
//! to them as to functions bound to `vfio-pci`.
//!
//! NIC `i` has fabric address 10.0.0.(1 + i), the address rank `i` of the demo job has, and
//! listens at `DIR/nic<i>.sock` ([`nic_socket`]). Each socket serves one driver at a time and
//! the next one after it; when a driver goes away, its function is released (DMA unmapped,
//! function-level reset). A socket file left behind by a daemon that died is replaced; one
//! that another daemon still serves is an error, and nothing is started.

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
        let socket_error = |path: &Path, reason: String| ServeError::Socket {
            path: path.to_path_buf(),
            reason,
        };
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

    /// Serve every socket, one thread each, until the process ends.
    pub fn run(self) -> ! {
        for server in &self.servers {
            let server = server.clone();
            std::thread::spawn(move || server.serve());
        }
        loop {
            std::thread::park();
        }
    }
}
