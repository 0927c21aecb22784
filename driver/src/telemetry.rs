//! The telemetry socket: a running driver answers questions about its NICs on a Unix socket,
//! so `uetctl` can inspect a live process (its registers, counters and NIC AV tables) without
//! stopping it or sharing its device. The shape is DPDK's telemetry: one stream socket per
//! process, named after its PID, JSON in both directions.
//!
//! ## Turning it on
//!
//! A process has one telemetry socket, started by [`enable`] or, for an application that
//! knows nothing of it (a libfabric application), by the first [`Nic::open`] when
//! `UET_NIC_TELEMETRY=1` ([`ENABLE_ENV`]) is set. Every NIC the process opens from then on
//! answers on it, numbered from 0 in the order the NICs were opened; the socket file is
//! removed when the process exits normally. [`Telemetry::bind`] makes a socket of one's own
//! for chosen NICs ([`Telemetry::add_nic`]).
//!
//! ## Protocol (version [`PROTOCOL`])
//!
//! Every message is one line of JSON.
//!
//! 1. On connect the driver sends a greeting:
//!    `{"uet_nic_telemetry": 1, "pid": P, "program": "name", "nics": N}`.
//! 2. The client sends requests, `{"cmd": "...", ...arguments}`, and the driver answers each
//!    with `{"ok": {...}}` or `{"error": {"errno": 22, "name": "FI_EINVAL", "message": "..."}}`
//!    (a fabric errno, positive as in `fi_errno.h`). Requests (see [`COMMANDS`]):
//!    - `help`: the commands and their arguments;
//!    - `info`: the process and each NIC's identity and AV tables;
//!    - `regs {nic}`: every BAR0 register the NIC's interface version has, as
//!      `[offset, value]` pairs (`uet_regs::REGISTERS` names them; reading has no side
//!      effects);
//!    - `counters {nic}`: the NIC's counters (BAR0), as `[name, value]` pairs; `FI_EIO`
//!      when the NIC does not answer (its `ID` register reads all ones: the function is
//!      gone), whose counters would read all ones as well;
//!    - `av_list {nic}`: the AV tables this process holds on the NIC: handle (`table`),
//!      `serial`, capacity, `max_group_id`, and for a named AV's table `named: {name,
//!      generation}`, the AV's name and the generation of the AV the table reflects (`null`
//!      before the process first caught up with it). The NIC gives a destroyed table's
//!      handle to the next table made; `serial` is given to one table only while the
//!      process lives, so it tells a table from one that took its handle since;
//!    - `ep_list {nic}`: the endpoints and contexts this process holds on the NIC: handle,
//!      type, roles, UET address, JobID, the AV table it translates through, the MSI-X
//!      vector its completion ring raises (`msix_vector`, `null` until its first
//!      `cq_sread`, `cq_trywait` or `cq_wait_fd` takes one; a connection's control channel
//!      has its vector from the start, or none when its progress polls), and its counters read with
//!      COUNTERS_READ (hex of the `EndpointCounters` block; when the read
//!      fails, or the endpoint closed during it and its handle may already be another's,
//!      `counters` is `null` and `counters_error` says why);
//!    - `av_dump {nic, table, serial?, first?, max?}`: the valid entries of a NIC AV table
//!      from index `first` (0), read back with AV_READ, as `[index, "hex of the 64-byte
//!      NicAvEntry"]`; at most `max` ([`AV_DUMP_MAX`]) entries and [`AV_DUMP_SCAN`] indices
//!      per answer, and `next` names the index to continue from (`null` at the end). Every
//!      answer carries the table's `serial` (as `av_list`); a request continuing a dump
//!      sends it back, and when the table with handle `table` is no longer the one of that
//!      serial (closed since, its handle perhaps another AV's table's now) the answer is
//!      `FI_ENOENT` rather than a page of another table. Without `serial` the table is the
//!      one that has the handle now (enough for a first page). Every answer carries
//!      `changes`: how many changes (writes and removals of entries, of the table's auth-key
//!      slots and of their grants to endpoints) the process had made to the table when the page was read, or `null` when one
//!      was in progress meanwhile (the page may mix the table before and after it); a dump
//!      whose pages all carry the same number read one table that no change touched between
//!      them. The answer for `first` 0 also carries the auth-key slots the table owns, as `[slot, "hex of the 24-byte
//!      AuthKeyEntry"]`. A named AV's table's answer carries `named: {name, generation,
//!      entry_flags}`: the generation it reflected all the while the page was read (`null`
//!      when it had not caught up yet or caught up in the meantime), and the entry flags the
//!      NIC's interface version defines (what the process's AV builds its entries with).
//! 3. The client closes the connection when done.
//!
//! Entries and slots travel as their firmware-interface bytes (`uet_fwif`), so the one
//! definition of their fields decodes them on both sides.
//!
//! ## What a live dump is
//!
//! The NIC side, read with admin commands between the process's own (the admin queue is
//! shared under its lock). The host mirror belongs to the thread that owns the AV and is not
//! read from here; `uetctl av dump --demo` (its own job) shows both and flags differences,
//! and a process can check its own with `AddressVector::verify_nic`. Records of `FI_MORE`
//! inserts not yet flushed are not on the NIC and so not in the dump.
//!
//! A named AV's table is the exception: the AV itself lives in a shared-memory segment that
//! any process of the user can read (`uet_av::named::segment::Snapshot`). The table's
//! `named.generation` says which generation of the segment the NIC entries reflect, so
//! `uetctl` compares the two when the generations match.
//!
//! ## Robustness
//!
//! Each connection is served on a thread of its own, so a client that keeps its connection
//! does not keep another from being served; at most [`ServeLimits::max_clients`]
//! ([`MAX_CLIENTS`]) at once, one more is answered `FI_EBUSY` and closed. Every read and
//! write waits at most [`IO_TIMEOUT`], so a client that stalls is closed after that long,
//! and a connection is closed, with an `FI_ETIMEDOUT` answer, once it has been open for
//! [`ServeLimits::client_lifetime`] ([`CLIENT_LIFETIME`]) however busy it is. A request line
//! longer than [`MAX_REQUEST`] bytes, or one that is not JSON, is answered with an error and
//! the connection closed. Dropping a [`Telemetry`] shuts its connections down and waits for
//! their threads. Holding the telemetry keeps no NIC or AV table alive: a NIC or table
//! released by the application reads as closed.
//!
//! The socket file is mode 0600 whatever the process's umask: only its user may connect.

use crate::nic::{Nic, NicInner};
use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use uet_av::{FiErrno, FiError};
use uet_fwif::auth_key::AuthKeyEntry;
use uet_fwif::av_entry::entry_flags;
use uet_fwif::NicAvEntry;
use zerocopy::IntoBytes;

/// The protocol version the greeting names.
pub const PROTOCOL: u32 = 1;

/// Environment variable naming the directory of telemetry sockets (both sides).
pub const DIR_ENV: &str = "UET_NIC_TELEMETRY_DIR";

/// Environment variable that starts the process's telemetry socket at the first
/// [`Nic::open`]: `1`, `on`, `yes` or `true`.
pub const ENABLE_ENV: &str = "UET_NIC_TELEMETRY";

/// The process's telemetry socket ([`enable`]), never dropped.
static GLOBAL: Mutex<Option<Telemetry>> = Mutex::new(None);

/// Whether [`ENABLE_ENV`] was looked at (once per process: a failed start is not retried at
/// every open).
static ENV_LOOKED: AtomicBool = AtomicBool::new(false);

/// The socket file of the process's telemetry, removed at exit (if it is still there), and
/// the PID of the process that serves it.
static GLOBAL_PATH: std::sync::OnceLock<(PathBuf, Option<FileId>, u32)> =
    std::sync::OnceLock::new();

extern "C" fn remove_global_socket() {
    // A child forked from the process inherits the handler, not the socket: its exit leaves
    // the socket to the process that serves it.
    if let Some((path, file, pid)) = GLOBAL_PATH.get() {
        if *pid == std::process::id() {
            remove_own_socket(path, *file);
        }
    }
}

/// A file as the filesystem knows it: a socket file bound at a path tells from one another
/// process put at the path since (the first removed by someone meanwhile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The file at `path` (not following a symbolic link), if any.
    fn of(path: &Path) -> Option<FileId> {
        std::fs::symlink_metadata(path).ok().map(|m| FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// Remove the socket file at `path` if it is still `file`, the one bound there; whatever
/// took the path since is another's.
fn remove_own_socket(path: &Path, file: Option<FileId>) {
    if file.is_some() && FileId::of(path) == file {
        let _ = std::fs::remove_file(path);
    }
}

/// Start the process's telemetry socket ([`Telemetry::start`]) unless it runs already; its
/// path. Every NIC opened from now on answers on it (NICs opened before are not added).
pub fn enable() -> Result<PathBuf, TelemetryError> {
    let mut global = lock(&GLOBAL);
    if let Some(t) = global.as_ref() {
        return Ok(t.path.clone());
    }
    let t = Telemetry::start()?;
    let path = t.path.clone();
    if GLOBAL_PATH
        .set((path.clone(), t.file, std::process::id()))
        .is_ok()
    {
        // SAFETY: `remove_global_socket` is an `extern "C" fn()` that neither unwinds (it
        // only compares the PID and removes a file, ignoring errors) nor needs anything atexit
        // tears down.
        unsafe {
            libc::atexit(remove_global_socket);
        }
    }
    *global = Some(t);
    Ok(path)
}

/// The process's telemetry socket, if it runs.
pub fn global_path() -> Option<PathBuf> {
    lock(&GLOBAL).as_ref().map(|t| t.path.clone())
}

/// What [`Nic::open`] does with a NIC it brought up: add it to the process's telemetry,
/// starting it first when [`ENABLE_ENV`] asks for it.
pub(crate) fn nic_opened(nic: &Nic) {
    if !ENV_LOOKED.swap(true, Ordering::AcqRel) {
        let on = std::env::var(ENABLE_ENV)
            .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "on" | "yes" | "true"));
        if on {
            if let Err(e) = enable() {
                tracing::warn!("{ENABLE_ENV}: telemetry not started: {e}");
            }
        }
    }
    if let Some(t) = lock(&GLOBAL).as_ref() {
        let number = t.add_nic(nic);
        tracing::debug!(nic = number, path = %t.path.display(), "NIC answers on the telemetry socket");
    }
}

/// The longest request line accepted, in bytes.
pub const MAX_REQUEST: usize = 4096;

/// Entries an `av_dump` answer carries at most (about 150 bytes each).
pub const AV_DUMP_MAX: u32 = 16_384;

/// Indices an `av_dump` answer scans at most, valid or not: a sparse table of millions of
/// entries is dumped in several answers rather than one long AV_READ sweep under the admin
/// lock.
pub const AV_DUMP_SCAN: u32 = 1 << 18;

/// Entries per AV_READ of a dump.
const READ_CHUNK: usize = 4096;

/// Auth-key slots per AUTH_KEY_READ of a dump.
const KEY_CHUNK: usize = 256;

/// How long a read or write on a client connection may wait.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections served at once by default ([`ServeLimits::max_clients`]): enough for a few
/// `uetctl` runs side by side, few enough that clients cannot take many threads.
pub const MAX_CLIENTS: usize = 4;

/// How long a connection may stay open by default ([`ServeLimits::client_lifetime`]): far
/// longer than any `uetctl` command needs, so that only a client that keeps talking (a
/// monitoring loop) is closed, and it can connect again.
pub const CLIENT_LIFETIME: Duration = Duration::from_secs(60);

/// How many clients a telemetry socket serves at once, and for how long each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// Connections served at once; one more is answered `FI_EBUSY` and closed.
    pub max_clients: usize,
    /// How long a connection may stay open, however busy; it is then answered
    /// `FI_ETIMEDOUT` and closed. A lifetime past what the clock can count (`Duration::MAX`)
    /// is no limit.
    pub client_lifetime: Duration,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            max_clients: MAX_CLIENTS,
            client_lifetime: CLIENT_LIFETIME,
        }
    }
}

/// The requests, with their arguments, as `help` lists them.
pub const COMMANDS: &[(&str, &str)] = &[
    ("help", ""),
    ("info", ""),
    ("regs", "nic"),
    ("counters", "nic"),
    ("av_list", "nic"),
    ("ep_list", "nic"),
    (
        "av_dump",
        "nic, table, serial (none), first (0), max (16384)",
    ),
];

/// The directory of telemetry sockets: `$UET_NIC_TELEMETRY_DIR` when set, else
/// `$XDG_RUNTIME_DIR/uet-nic`, else `/run/uet-nic` for root, else `/tmp/uet-nic-<uid>`.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("uet-nic");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        PathBuf::from("/run/uet-nic")
    } else {
        PathBuf::from(format!("/tmp/uet-nic-{uid}"))
    }
}

/// The socket of process `pid` in `dir`.
pub fn socket_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.sock"))
}

/// Connect to the telemetry socket at `path`, waiting at most `timeout` (at least a
/// microsecond) for a place in its listen backlog: a process that accepts nothing (stopped,
/// or stuck) leaves connections there, and once it is full, `UnixStream::connect` would wait
/// until the process accepts again, perhaps for good. `TimedOut` when the wait runs out.
pub fn connect(path: &Path, timeout: Duration) -> std::io::Result<UnixStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let addr = SockAddr::unix(path)?;
    // Close-on-exec, as socket2 makes every socket.
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    // SO_SNDTIMEO bounds a connect(2) that waits for room in the backlog: it then fails with
    // EAGAIN.
    socket.set_write_timeout(Some(timeout.max(Duration::from_micros(1))))?;
    loop {
        match socket.connect(&addr) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the socket's backlog stayed full for {timeout:?}: the process accepts \
                         no connection (stopped or stuck)"
                    ),
                ))
            }
            Err(e) => return Err(e),
        }
    }
    socket.set_write_timeout(None)?;
    Ok(UnixStream::from(std::os::fd::OwnedFd::from(socket)))
}

/// What stands at the path where a process is about to bind a Unix socket, and stays.
#[derive(Debug)]
pub enum InTheWay {
    /// A file that is not a socket.
    NotASocket,
    /// A socket a process serves.
    Served,
    /// A socket of which it cannot be told whether anyone serves it: of another kind
    /// (a datagram socket), one this user may not connect to, or one whose backlog stayed
    /// full for the whole wait (a process that accepts nothing).
    Undecided(std::io::Error),
    /// A stale socket that could not be removed.
    CannotRemove(std::io::Error),
}

/// Make way at `path` for a socket this process binds: nothing there, or a stale socket
/// (nobody listens on it: left by a process that died), which is removed. Anything else is
/// left alone and named ([`InTheWay`]); whether a socket is served is asked with a
/// [`connect`] that waits at most `timeout`.
pub fn make_way_for_socket(path: &Path, timeout: Duration) -> Result<(), InTheWay> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(InTheWay::NotASocket);
    }
    match connect(path, timeout) {
        Ok(_) => Err(InTheWay::Served),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(InTheWay::CannotRemove(e)),
            }),
        // Removed meanwhile: nothing to replace.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(InTheWay::Undecided(e)),
    }
}

/// Numbers the private directories [`bind_private`] makes, with the PID.
static STAGING: AtomicU64 = AtomicU64::new(0);

/// The size of `sun_path` in `struct sockaddr_un` (108 on Linux): a socket path `bind(2)`
/// takes is at least one byte shorter (the terminating NUL).
const SUN_PATH_LEN: usize =
    core::mem::size_of::<libc::sockaddr_un>() - core::mem::size_of::<libc::sa_family_t>();

/// A listening socket at `path`, mode 0600 from the moment it is there: it is bound in a
/// private directory (0700) made beside `path`, made 0600 there, and then linked into place,
/// so no client can reach it while the umask's mode holds. The link fails, and nothing is left
/// behind, when another process has bound `path` meanwhile. A path too long for `sun_path` is
/// refused, as `bind(2)` refuses it; any shorter one is bound, however long the private
/// directory's name makes the path the socket is bound at first. The error is the reason, for
/// [`TelemetryError::Socket`].
fn bind_private(path: &Path) -> Result<UnixListener, String> {
    if path.as_os_str().len() >= SUN_PATH_LEN {
        return Err(format!(
            "the path is {} bytes long, and a socket's must be shorter than {SUN_PATH_LEN}",
            path.as_os_str().len()
        ));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| "names no file".to_string())?
        .to_string_lossy();
    let mut attempts = 0;
    let staging = loop {
        let staging = dir.join(format!(
            ".{name}.bind-{}-{}",
            std::process::id(),
            STAGING.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&staging) {
            Ok(()) => break staging,
            // One a process of the same PID (PIDs are reused) left when it was killed while
            // binding, or another user's: not ours to remove; take the next name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 64 => {
                attempts += 1;
            }
            Err(e) => return Err(format!("cannot make a private directory to bind in: {e}")),
        }
    };
    let bound = staging.join("socket");
    let result = bind_in(&staging, &bound)
        .map_err(|e| e.to_string())
        .and_then(|listener| {
            std::fs::set_permissions(&bound, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| format!("cannot make the socket private (mode 0600): {e}"))?;
            // link(2) fails when `path` exists: a process that bound it meanwhile keeps it.
            std::fs::hard_link(&bound, path).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => "another process bound it meanwhile".into(),
                _ => format!("cannot put the socket in place: {e}"),
            })?;
            Ok(listener)
        });
    let _ = std::fs::remove_file(&bound);
    let _ = std::fs::remove_dir(&staging);
    result
}

/// A listening socket at `bound`, in directory `staging`: through `/proc/self/fd` when
/// `bound` is too long for `sun_path` (the staging directory's name adds to the length of the
/// path the socket is meant for, which fits).
fn bind_in(staging: &Path, bound: &Path) -> std::io::Result<UnixListener> {
    if bound.as_os_str().len() < SUN_PATH_LEN {
        return UnixListener::bind(bound);
    }
    let dir = std::fs::File::open(staging)?;
    let name = bound.file_name().unwrap_or_default().to_string_lossy();
    UnixListener::bind(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd()))
}

/// Remove the telemetry sockets in `dir` that processes killed by a signal left behind (a
/// normal exit removes its own), so that the directory does not collect one per crash; returns
/// how many. A file is removed only when all of these hold: its name is `<pid>.sock`, it is a
/// socket, connecting to it is refused (nobody listens on it, in any PID namespace that shares
/// the directory), and no process `pid` exists here (so a process between binding its socket
/// and listening on it keeps it). [`Telemetry::start`] sweeps its directory before it binds.
///
/// The private directories a process killed while binding left (`.<name>.bind-<pid>-<n>`, see
/// `bind_private`) go too, with the socket in them, when no process `pid` exists and the
/// directory is this user's; they are not counted.
pub fn remove_stale_sockets(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let pid = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|p| p.parse::<u32>().ok());
        let Some(pid) = pid else {
            remove_stale_staging(&path);
            continue;
        };
        // Cheapest first; a live process's telemetry is never connected to.
        let candidate = !process_exists(pid)
            && std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket());
        let refused = || {
            matches!(
                connect(&path, IO_TIMEOUT),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
            )
        };
        if candidate && refused() && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Remove `path` (and the socket in it) if it is a private bind directory (`bind_private`)
/// of a process that no longer exists, owned by this user.
fn remove_stale_staging(path: &Path) {
    let pid = path
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.starts_with('.'))
        .and_then(|n| n.rsplit_once(".bind-"))
        .and_then(|(_, rest)| rest.split_once('-'))
        .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()));
    let Some(pid) = pid else { return };
    // SAFETY: geteuid has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    let ours = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == euid);
    if ours && !process_exists(pid) {
        let _ = std::fs::remove_file(path.join("socket"));
        let _ = std::fs::remove_dir(path);
    }
}

/// Whether a process `pid` exists (`kill(pid, 0)`: `ESRCH` when none; `EPERM` is another
/// user's, which exists).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        // 0 and negative values name process groups, not a process.
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that `pid` exists and may be
    // signalled. It touches no memory.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Why the telemetry socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The directory or the socket could not be made.
    #[error("telemetry socket {path}: {reason}")]
    Socket {
        /// The path concerned.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// A running telemetry socket. Dropping it stops its threads and removes the socket file.
pub struct Telemetry {
    path: PathBuf,
    /// The socket file bound at `path`, removed by drop if it is still there.
    file: Option<FileId>,
    nics: Arc<Mutex<Vec<Weak<NicInner>>>>,
    stop: Arc<AtomicBool>,
    /// The connections being served, shut down by drop so that no client can hold it.
    clients: Arc<Mutex<Clients>>,
    /// The thread that accepts connections.
    thread: Option<JoinHandle<()>>,
    /// The listening socket the thread accepts on (a second descriptor of it), shut down by
    /// drop to end the accept: the path may no longer lead to it.
    listener: UnixListener,
    /// The process that serves: a child forked from it shares the socket, and its drop of
    /// its copy neither shuts the socket down nor removes its file ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

/// The connections a telemetry socket serves, each on a thread of its own.
#[derive(Default)]
struct Clients {
    /// Given to the next connection, to find its entry in `open` when it ends.
    next_id: u64,
    /// A handle on each connection being served (a clone of its socket), to shut down.
    open: Vec<(u64, UnixStream)>,
    /// The threads of connections, joined by drop; those that ended are joined as new
    /// connections come.
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Serve at `default_dir()/<pid>.sock`, creating the directory (mode 0700) if missing.
    /// The directory must be a real directory owned by this user that no one else may write
    /// to: in a shared place such as `/tmp`, one made by someone else could let them replace
    /// the socket or read the process's tables.
    pub fn start() -> Result<Telemetry, TelemetryError> {
        let dir = default_dir();
        let fail = |reason: String| TelemetryError::Socket {
            path: dir.clone(),
            reason,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| fail(format!("cannot create the directory: {e}")))?;
        let meta = std::fs::symlink_metadata(&dir)
            .map_err(|e| fail(format!("cannot inspect the directory: {e}")))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if !meta.is_dir() {
            return Err(fail(
                "is not a directory (a symbolic link is refused)".into(),
            ));
        }
        if meta.uid() != euid {
            return Err(fail(format!(
                "is owned by uid {}, not by this process's uid {euid}",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(fail(format!(
                "may be written by others (mode {:o}); make it 0700",
                meta.mode() & 0o777
            )));
        }
        let removed = remove_stale_sockets(&dir);
        if removed > 0 {
            tracing::info!(dir = %dir.display(), removed, "removed telemetry sockets of processes that died");
        }
        Telemetry::bind(socket_path(&dir, std::process::id()))
    }

    /// Serve at `path`, with the default [`ServeLimits`]. A socket file there that no process
    /// answers (left by one that died) is replaced; a live one, or any other file, is refused
    /// and left alone. The socket file is made mode 0600 whatever the umask: connecting needs
    /// write permission on it, and no other user may read the process's tables (a libfabric
    /// application may well run with umask 0).
    pub fn bind(path: impl Into<PathBuf>) -> Result<Telemetry, TelemetryError> {
        Telemetry::bind_with_limits(path, ServeLimits::default())
    }

    /// [`Telemetry::bind`], serving clients within `limits`.
    pub fn bind_with_limits(
        path: impl Into<PathBuf>,
        limits: ServeLimits,
    ) -> Result<Telemetry, TelemetryError> {
        let path = path.into();
        let fail = |reason: String| TelemetryError::Socket {
            path: path.clone(),
            reason,
        };
        make_way_for_socket(&path, IO_TIMEOUT).map_err(|e| {
            fail(match e {
                InTheWay::NotASocket => "exists and is not a socket".into(),
                InTheWay::Served => "another process serves it".into(),
                InTheWay::Undecided(e) => {
                    format!("cannot tell whether a process serves it ({e}); it is left alone")
                }
                InTheWay::CannotRemove(e) => format!("cannot replace the stale socket: {e}"),
            })
        })?;
        let listener = bind_private(&path).map_err(fail)?;
        let file = FileId::of(&path);
        let wake = listener.try_clone().map_err(|e| {
            remove_own_socket(&path, file);
            fail(format!("cannot take the socket's descriptor: {e}"))
        })?;
        let nics: Arc<Mutex<Vec<Weak<NicInner>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Arc<Mutex<Clients>> = Arc::default();
        let thread = {
            let (nics, stop, clients) = (nics.clone(), stop.clone(), clients.clone());
            std::thread::Builder::new()
                .name("uet-telemetry".into())
                .spawn(move || serve(&listener, &nics, &stop, &clients, limits))
                .map_err(|e| {
                    remove_own_socket(&path, file);
                    fail(format!("cannot start the thread: {e}"))
                })?
        };
        tracing::info!(path = %path.display(), "telemetry socket serving");
        Ok(Telemetry {
            path,
            file,
            nics,
            stop,
            clients,
            thread: Some(thread),
            listener: wake,
            made_in: crate::fork::MadeIn::here(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answer for `nic` from now on, as NIC number [return value] (numbers count up from 0
    /// in the order NICs are added and are never reused). Telemetry keeps no NIC open.
    pub fn add_nic(&self, nic: &Nic) -> usize {
        let mut nics = self.nics.lock().unwrap_or_else(|p| p.into_inner());
        nics.push(Arc::downgrade(&nic.inner));
        nics.len() - 1
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if self.made_in.in_forked_child() {
            // The parent's socket and threads: its own drop ends them.
            std::mem::forget(self.thread.take());
            return;
        }
        self.stop.store(true, Ordering::Release);
        // End the conversations in progress (their reads and writes return at once), then
        // wake the accept: a listening socket shut down fails it (EINVAL), whatever the path
        // leads to now (the file removed, or another socket in its place).
        for (_, s) in &lock(&self.clients).open {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // SAFETY: shutdown(2) of the listening socket `self.listener` owns, open until it is
        // dropped after this; it touches no memory.
        unsafe {
            libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The accept thread is gone: no conversation starts any more.
        let threads = std::mem::take(&mut lock(&self.clients).threads);
        for t in threads {
            let _ = t.join();
        }
        remove_own_socket(&self.path, self.file);
    }
}

fn serve(
    listener: &UnixListener,
    nics: &Arc<Mutex<Vec<Weak<NicInner>>>>,
    stop: &AtomicBool,
    clients: &Arc<Mutex<Clients>>,
    limits: ServeLimits,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        match conn {
            Ok(stream) => {
                let refusal = {
                    let mut c = lock(clients);
                    // Checked under the lock drop takes: a conversation either starts before
                    // drop looks (and is shut down) or sees the stop.
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let (ended, running) = std::mem::take(&mut c.threads)
                        .into_iter()
                        .partition(JoinHandle::is_finished);
                    c.threads = running;
                    for t in ended {
                        let _ = t.join();
                    }
                    if c.open.len() >= limits.max_clients {
                        Some(FiError::new(
                            FiErrno::FI_EBUSY,
                            format!(
                                "too many telemetry clients ({} served at once); try again \
                                 when one has finished",
                                limits.max_clients
                            ),
                        ))
                    } else {
                        start_conversation(&mut c, &stream, nics, clients, limits).err()
                    }
                };
                if let Some(e) = refusal {
                    tracing::debug!("telemetry client refused: {e}");
                    // A fresh connection's buffer takes the line; the timeout only keeps a
                    // broken one from stalling the accept.
                    let _ = stream.set_write_timeout(Some(REFUSAL_TIMEOUT));
                    let _ = send(&mut NoSignal(&stream), &error_json(&e));
                }
            }
            Err(e) => {
                tracing::warn!("telemetry accept: {e}");
                // A persistent accept failure (out of descriptors) must not spin a core.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// How long the answer refusing a connection may take to write.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// Serve `stream` on a thread of its own, registered in `c` (the lock of `clients`) until it
/// ends; an error when it cannot be.
fn start_conversation(
    c: &mut Clients,
    stream: &UnixStream,
    nics: &Arc<Mutex<Vec<Weak<NicInner>>>>,
    clients: &Arc<Mutex<Clients>>,
    limits: ServeLimits,
) -> Result<(), FiError> {
    let clone = || {
        stream
            .try_clone()
            .map_err(|e| FiError::io(format!("cannot take the connection's socket: {e}")))
    };
    let (stream, handle) = (clone()?, clone()?);
    let id = c.next_id;
    c.next_id += 1;
    // None: a lifetime past what the clock counts, no limit.
    let deadline = std::time::Instant::now().checked_add(limits.client_lifetime);
    let (nics, registry) = (nics.clone(), clients.clone());
    let thread = std::thread::Builder::new()
        .name("uet-telemetry-client".into())
        .spawn(move || {
            // Whatever happens below, the connection stops counting when the thread ends.
            let _registered = Registered {
                id,
                clients: &registry,
            };
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                converse(stream, &nics, deadline)
            }));
            match ended {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!("telemetry client: {e}"),
                Err(_) => tracing::error!("telemetry client: its thread panicked; it is closed"),
            }
        })
        .map_err(|e| {
            FiError::new(
                FiErrno::FI_EAGAIN,
                format!("cannot start a thread for the connection: {e}"),
            )
        })?;
    c.open.push((id, handle));
    c.threads.push(thread);
    Ok(())
}

/// A connection's place in [`Clients::open`], given up when its thread ends (also by a
/// panic).
struct Registered<'a> {
    id: u64,
    clients: &'a Mutex<Clients>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(self.clients).open.retain(|(id, _)| *id != self.id);
    }
}

/// A client's socket whose every read and write waits at most [`IO_TIMEOUT`], and none past
/// `deadline`: a client that trickles bytes, each in time, still cannot keep the connection
/// longer than its lifetime.
struct Timed<'a> {
    stream: &'a UnixStream,
    deadline: Option<std::time::Instant>,
}

impl Timed<'_> {
    /// The wait allowed now; an error once the deadline has passed.
    fn wait(&self) -> std::io::Result<Duration> {
        let Some(deadline) = self.deadline else {
            return Ok(IO_TIMEOUT);
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the connection's lifetime is over",
            ));
        }
        Ok(left.min(IO_TIMEOUT))
    }
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_read_timeout(Some(self.wait()?))?;
        (&mut &*self.stream).read(buf)
    }
}

impl Write for Timed<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.set_write_timeout(Some(self.wait()?))?;
        send_no_signal(self.stream, buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Write `buf` to the client with send(2) and `MSG_NOSIGNAL`: a client gone mid-reply is
/// `EPIPE` here, never a `SIGPIPE`, whose default action would end the program that hosts
/// the driver (a C program keeps it; only a Rust `main` ignores it, and the standard
/// library of older Rust releases writes a `UnixStream` without it). The socket's write
/// timeout applies as to write(2).
fn send_no_signal(stream: &UnixStream, buf: &[u8]) -> std::io::Result<usize> {
    loop {
        // SAFETY: send(2) reads at most `buf.len()` bytes from `buf`, a live slice, through
        // the descriptor `stream` owns, open for the whole call; it keeps no pointer.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if let Ok(n) = usize::try_from(n) {
            return Ok(n);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One client's conversation: the greeting, then a reply per request line, until the client
/// closes, stalls longer than [`IO_TIMEOUT`], or `deadline` passes (then it is told so).
fn converse(
    stream: UnixStream,
    nics: &Mutex<Vec<Weak<NicInner>>>,
    deadline: Option<std::time::Instant>,
) -> std::io::Result<()> {
    let timed = || Timed {
        stream: &stream,
        deadline,
    };
    let mut out = std::io::BufWriter::new(timed());
    let mut input = BufReader::new(timed());
    let result = requests(&mut input, &mut out, nics);
    if result.is_err() && deadline.is_some_and(|d| std::time::Instant::now() >= d) {
        let e = FiError::new(
            FiErrno::FI_ETIMEDOUT,
            "the connection was open longer than a telemetry client may keep it; connect again",
        );
        // Past the deadline: one line more, with one wait of its own.
        stream.set_write_timeout(Some(REFUSAL_TIMEOUT))?;
        return send(&mut NoSignal(&stream), &error_json(&e));
    }
    result
}

/// The greeting, then a reply per request line read from `input`.
fn requests(
    input: &mut impl BufRead,
    out: &mut impl Write,
    nics: &Mutex<Vec<Weak<NicInner>>>,
) -> std::io::Result<()> {
    let count = lock(nics).len();
    send(
        out,
        &json!({
            "uet_nic_telemetry": PROTOCOL,
            "pid": std::process::id(),
            "program": program(),
            "nics": count,
        }),
    )?;
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let n = input
            .by_ref()
            .take(MAX_REQUEST as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && line.len() > MAX_REQUEST {
            let e = FiError::inval(format!("request longer than {MAX_REQUEST} bytes"));
            return send(out, &error_json(&e));
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let reply = match serde_json::from_slice::<Value>(text) {
            Ok(request) => match answer(&request, nics) {
                Ok(v) => json!({ "ok": v }),
                Err(e) => error_json(&e),
            },
            Err(e) => {
                let e = FiError::inval(format!("request is not JSON: {e}"));
                return send(out, &error_json(&e));
            }
        };
        send(out, &reply)?;
    }
}

/// A client's stream written with [`send_no_signal`], under the socket's own write timeout.
struct NoSignal<'a>(&'a UnixStream);

impl Write for NoSignal<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        send_no_signal(self.0, buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn send(out: &mut impl Write, v: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, v)?;
    out.write_all(b"\n")?;
    out.flush()
}

fn error_json(e: &FiError) -> Value {
    json!({ "error": {
        "errno": e.errno.get(),
        "name": e.errno.name(),
        "message": e.message,
    }})
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn program() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// The request's unsigned integer argument `name`; `default` when absent.
fn arg(request: &Value, name: &str, default: Option<u64>) -> Result<u64, FiError> {
    match request.get(name) {
        None | Some(Value::Null) => {
            default.ok_or_else(|| FiError::inval(format!("missing argument {name:?}")))
        }
        Some(v) => v.as_u64().ok_or_else(|| {
            FiError::inval(format!(
                "argument {name:?} must be an unsigned integer, not {v}"
            ))
        }),
    }
}

fn u32_arg(request: &Value, name: &str, default: Option<u32>) -> Result<u32, FiError> {
    let v = arg(request, name, default.map(u64::from))?;
    u32::try_from(v).map_err(|_| FiError::inval(format!("argument {name:?} {v} exceeds 32 bits")))
}

/// The NIC the request names, if the application still has it open.
fn nic_of(request: &Value, nics: &Mutex<Vec<Weak<NicInner>>>) -> Result<Arc<NicInner>, FiError> {
    let i = arg(request, "nic", None)?;
    let nics = lock(nics);
    let weak = usize::try_from(i)
        .ok()
        .and_then(|i| nics.get(i))
        .ok_or_else(|| {
            FiError::inval(format!(
                "no NIC {i}: this process has {} (numbered from 0)",
                nics.len()
            ))
        })?;
    weak.upgrade().ok_or_else(|| {
        FiError::new(
            FiErrno::FI_ENODEV,
            format!("NIC {i} has been closed by the application"),
        )
    })
}

fn answer(request: &Value, nics: &Mutex<Vec<Weak<NicInner>>>) -> Result<Value, FiError> {
    let cmd = request
        .get("cmd")
        .and_then(Value::as_str)
        .ok_or_else(|| FiError::inval("a request is an object with a string \"cmd\""))?;
    match cmd {
        "help" => Ok(json!({
            "protocol": PROTOCOL,
            "commands": COMMANDS.iter().map(|(c, a)| json!({"cmd": c, "args": a})).collect::<Vec<_>>(),
        })),
        "info" => Ok(info(nics)),
        "regs" => {
            let nic = nic_of(request, nics)?;
            let regs: Vec<Value> = uet_regs::read_registers(nic.bar())
                .into_iter()
                .map(|(info, value)| json!([info.offset, value]))
                .collect();
            Ok(json!({ "interface_minor": nic.identity.interface_minor, "regs": regs }))
        }
        "counters" => {
            let nic = nic_of(request, nics)?;
            let counters = nic.counters();
            // Asked after the counters are read: a function gone before or while they were
            // read answers nothing from then on, so its ID reads all ones now.
            if uet_regs::RegisterAccess::read(nic.bar(), uet_regs::ID).into_bits() == u32::MAX {
                return Err(FiError::new(
                    FiErrno::FI_EIO,
                    "the NIC does not answer: its registers read all ones (the function is \
                     gone), and so would its counters",
                ));
            }
            let counters: Vec<Value> = counters
                .into_iter()
                .map(|(name, value)| json!([name, value]))
                .collect();
            Ok(json!({ "counters": counters }))
        }
        "av_list" => {
            let nic = nic_of(request, nics)?;
            Ok(json!({ "tables": tables_json(&nic) }))
        }
        "av_dump" => av_dump(request, nics),
        "ep_list" => {
            let nic = nic_of(request, nics)?;
            Ok(json!({ "endpoints": endpoints_json(&nic) }))
        }
        other => Err(FiError::new(
            FiErrno::FI_ENOSYS,
            format!(
                "unknown command {other:?}; the commands are {}",
                COMMANDS
                    .iter()
                    .map(|(c, _)| *c)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

fn tables_json(nic: &NicInner) -> Vec<Value> {
    nic.av_tables()
        .iter()
        .map(|t| {
            let mut table = json!({
                "table": t.handle,
                "serial": t.serial,
                "capacity": t.capacity,
                "max_group_id": t.max_group_id,
            });
            if let Some(named) = &t.named {
                table["named"] = json!({
                    "name": named.name,
                    "generation": named.generation(),
                });
            }
            table
        })
        .collect()
}

fn endpoints_json(nic: &NicInner) -> Vec<Value> {
    nic.endpoints()
        .iter()
        .map(|e| endpoint_json(nic, e))
        .collect()
}

/// One endpoint of `ep_list`. Its counters are read by handle; an endpoint closed meanwhile
/// may have left its handle to a new one, whose counters those would be, so they are given
/// only when the record is still listed after the read (the record goes before the NIC
/// destroys the endpoint, so a listed record's handle is still its own).
fn endpoint_json(nic: &NicInner, e: &crate::nic::EndpointRecord) -> Value {
    let (counters, error) = match nic.endpoint_counters(e.handle) {
        Ok(_) if !nic.endpoint_open(e) => (
            None,
            Some("the endpoint was closed while its counters were read".to_string()),
        ),
        Ok(block) => (Some(hex::encode(block.as_bytes())), None),
        Err(err) => (None, Some(err.to_string())),
    };
    let a = &e.address;
    json!({
        "endpoint": e.handle,
        "type": format!("{:?}", e.ep_type).to_lowercase(),
        "roles": e.roles,
        "address": a.to_string(),
        "fabric_addr": a.fabric_addr.to_string(),
        "pid_on_fep": a.pid_on_fep,
        "ri_start": a.ri_start,
        "ri_count": a.ri_count,
        "initiator": a.initiator,
        "job_id": e.job_id,
        "av_table": e.av_table,
        "msix_vector": e.msix_vector,
        "counters": counters,
        "counters_error": error,
    })
}

fn info(nics: &Mutex<Vec<Weak<NicInner>>>) -> Value {
    let nics: Vec<Weak<NicInner>> = lock(nics).clone();
    let list: Vec<Value> = nics
        .iter()
        .enumerate()
        .map(|(i, weak)| match weak.upgrade() {
            None => json!({ "nic": i, "open": false }),
            Some(nic) => {
                let id = &nic.identity;
                json!({
                    "nic": i,
                    "open": true,
                    "vendor_id": id.vendor_id,
                    "device_id": id.device_id,
                    "revision": id.revision,
                    "interface_minor": id.interface_minor,
                    "fw_version": id.fw_version,
                    "fabric_addr": id.fabric_addr.to_string(),
                    "mac": id.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"),
                    "serial": id.serial,
                    "model": id.model,
                    "av_tables": tables_json(&nic),
                    "endpoints": nic.endpoints().len(),
                })
            }
        })
        .collect();
    json!({
        "protocol": PROTOCOL,
        "pid": std::process::id(),
        "program": program(),
        "nics": list,
    })
}

fn av_dump(request: &Value, nics: &Mutex<Vec<Weak<NicInner>>>) -> Result<Value, FiError> {
    let nic = nic_of(request, nics)?;
    let handle = u32_arg(request, "table", None)?;
    let first = u32_arg(request, "first", Some(0))?;
    let max = u32_arg(request, "max", Some(AV_DUMP_MAX))?;
    if max == 0 || max > AV_DUMP_MAX {
        return Err(FiError::inval(format!(
            "max {max}: an answer carries from 1 to {AV_DUMP_MAX} entries"
        )));
    }
    // The table a dump began with, when the request continues one: the handle alone may be
    // another table's by now.
    let serial = match request.get("serial") {
        None | Some(Value::Null) => None,
        Some(_) => Some(arg(request, "serial", None)?),
    };
    let now = nic.av_tables().into_iter().find(|t| t.handle == handle);
    let table = match (now, serial) {
        (Some(t), Some(s)) if t.serial != s => {
            return Err(FiError::new(
                FiErrno::FI_ENOENT,
                format!(
                    "AV table {handle} of serial {s} was closed since the dump began; the \
                     handle is now another table's (serial {}): dump it again",
                    t.serial
                ),
            ))
        }
        (Some(t), _) => t,
        (None, Some(s)) => {
            return Err(FiError::new(
                FiErrno::FI_ENOENT,
                format!("AV table {handle} of serial {s} was closed since the dump began"),
            ))
        }
        (None, None) => {
            return Err(FiError::inval(format!(
                "no AV table {handle} of this process on NIC {} (av_list names them)",
                arg(request, "nic", None).unwrap_or_default()
            )))
        }
    };
    if first > table.capacity {
        return Err(FiError::inval(format!(
            "first {first} is past the table's {} entries",
            table.capacity
        )));
    }
    dump_page(&nic, &table, first, max)
}

/// One `av_dump` page of `table`, a record taken from the NIC's list: up to `max` valid
/// entries from index `first`. `FI_ENOENT` when the table was destroyed before the page was
/// complete, even if its handle was reused meanwhile and every read succeeded.
fn dump_page(
    nic: &NicInner,
    table: &crate::nic::AvTableRecord,
    first: u32,
    max: u32,
) -> Result<Value, FiError> {
    let handle = table.handle;
    let gone = |e: &dyn std::fmt::Display| {
        if table.exists() {
            FiError::io(format!("reading AV table {handle}: {e}"))
        } else {
            FiError::new(
                FiErrno::FI_ENOENT,
                format!("AV table {handle} was destroyed during the dump"),
            )
        }
    };
    // The generation a named AV's table reflects while the page is read; a catch-up by the
    // application between the two reads may have changed some of the entries.
    let reflected_before = table.named.as_ref().and_then(|n| n.generation());
    // The changes ended before the first read: the page saw no change when none has begun by
    // the last (`TableChanges`).
    let ended_before = table.changes.ended();
    let mut entries = Vec::new();
    let mut buf = vec![NicAvEntry::INVALID; READ_CHUNK];
    let end = first.saturating_add(AV_DUMP_SCAN).min(table.capacity);
    let mut at = first;
    let mut next = None;
    'scan: while at < end {
        let n = (end - at).min(READ_CHUNK as u32) as usize;
        nic.read_av_entries(handle, at, &mut buf[..n])
            .map_err(|e| gone(&e))?;
        for (i, e) in buf[..n].iter().enumerate() {
            if !e.is_valid() {
                continue;
            }
            if entries.len() == max as usize {
                next = Some(at + i as u32);
                break 'scan;
            }
            entries.push(json!([at + i as u32, hex::encode(e.as_bytes())]));
        }
        at += n as u32;
    }
    if next.is_none() && end < table.capacity {
        next = Some(end);
    }
    let mut reply = Map::new();
    reply.insert("table".into(), json!(handle));
    reply.insert("serial".into(), json!(table.serial));
    reply.insert("capacity".into(), json!(table.capacity));
    reply.insert("first".into(), json!(first));
    reply.insert("entries".into(), Value::Array(entries));
    reply.insert("next".into(), json!(next));
    if let Some(named) = &table.named {
        let steady = reflected_before.filter(|&g| named.generation() == Some(g));
        // The flags the process's AV gives its entries on this NIC (those its interface
        // version defines), so that the client builds the entries the segment implies alike.
        let flags = entry_flags::defined_at(nic.identity.interface_minor);
        reply.insert(
            "named".into(),
            json!({ "name": named.name, "generation": steady, "entry_flags": flags }),
        );
    }
    if first == 0 {
        let slots = nic.caps.auth_key_slots;
        let mut keys = Vec::new();
        let mut buf = [AuthKeyEntry::default(); KEY_CHUNK];
        let mut from = 0u16;
        while from < slots {
            let n = usize::from(slots - from).min(KEY_CHUNK);
            nic.read_auth_keys(from, &mut buf[..n])
                .map_err(|e| gone(&e))?;
            for (i, k) in buf[..n].iter().enumerate() {
                if k.is_valid() && k.av.get() == handle {
                    keys.push(json!([usize::from(from) + i, hex::encode(k.as_bytes())]));
                }
            }
            from += n as u16;
        }
        reply.insert("auth_key_slots".into(), Value::Array(keys));
    }
    // The NIC reuses a destroyed table's handle: reads that succeeded may be of a table the
    // application made since. The record's `Weak` never comes back, so this catches it.
    if !table.exists() {
        return Err(gone(&"the table is gone"));
    }
    let steady = Some(table.changes.begun()).filter(|&begun| begun == ended_before);
    reply.insert("changes".into(), json!(steady));
    Ok(Value::Object(reply))
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use super::*;
    use crate::backend::sim::SimDevice;
    use crate::{Device, EndpointAttr, Nic};
    use std::sync::atomic::AtomicU32;

    /// A device that can be unplugged: from then on every register reads all ones, as a
    /// removed PCI function's do.
    struct Unpluggable {
        inner: SimDevice,
        gone: AtomicBool,
        /// The offset of the register whose next read (which still answers) unplugs it
        /// (`u32::MAX`: none).
        gone_after: AtomicU32,
    }

    impl Unpluggable {
        fn new(inner: SimDevice) -> Unpluggable {
            Unpluggable {
                inner,
                gone: AtomicBool::new(false),
                gone_after: AtomicU32::new(u32::MAX),
            }
        }

        /// After a read at `offset`: unplugged if it was the one to unplug it.
        fn read_at(&self, offset: u32) {
            if self
                .gone_after
                .compare_exchange(offset, u32::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                self.gone.store(true, Ordering::Relaxed);
            }
        }
    }

    impl uet_regs::Mmio for Unpluggable {
        fn read32(&self, offset: u32) -> u32 {
            if self.gone.load(Ordering::Relaxed) {
                return u32::MAX;
            }
            let value = self.inner.bar0().read32(offset);
            self.read_at(offset);
            value
        }
        fn write32(&self, offset: u32, value: u32) {
            self.inner.bar0().write32(offset, value);
        }
        fn read64(&self, offset: u32) -> u64 {
            if self.gone.load(Ordering::Relaxed) {
                return u64::MAX;
            }
            let value = self.inner.bar0().read64(offset);
            self.read_at(offset);
            value
        }
        fn write64(&self, offset: u32, value: u64) {
            self.inner.bar0().write64(offset, value);
        }
    }

    impl crate::Device for Unpluggable {
        fn bar0(&self) -> &dyn uet_regs::Mmio {
            self
        }
        fn dma_map(&self, region: &crate::dma::DmaRegion) -> Result<(), crate::DeviceError> {
            self.inner.dma_map(region)
        }
        fn dma_unmap(&self, region: &crate::dma::DmaRegion) -> Result<(), crate::DeviceError> {
            self.inner.dma_unmap(region)
        }
        fn name(&self) -> String {
            self.inner.name()
        }
    }

    /// The counters of a NIC whose registers read all ones (its function gone) are
    /// `FI_EIO`, not a list of all-ones figures; before that, they are the NIC's.
    #[test]
    fn the_counters_of_a_nic_that_does_not_answer_are_eio() {
        let fabric = uet_sim::Fabric::new();
        let f = fabric
            .add_nic(uet_sim::NicConfig::new("10.65.0.2".parse().unwrap()))
            .unwrap();
        let device = Arc::new(Unpluggable::new(SimDevice::new(f)));
        let nic = Nic::open(device.clone()).unwrap();
        let nics = Mutex::new(vec![Arc::downgrade(&nic.inner)]);
        let request = json!({"cmd": "counters", "nic": 0});
        let answered = answer(&request, &nics).unwrap();
        assert!(
            answered["counters"]
                .as_array()
                .is_some_and(|c| !c.is_empty()),
            "{answered}"
        );
        device.gone.store(true, Ordering::Relaxed);
        let e = answer(&request, &nics).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    }

    /// A NIC whose function goes away while its counters are read (after the first, which
    /// still answered) is `FI_EIO` too, not counters that read all ones.
    #[test]
    fn the_counters_of_a_nic_gone_while_they_are_read_are_eio() {
        let fabric = uet_sim::Fabric::new();
        let f = fabric
            .add_nic(uet_sim::NicConfig::new("10.65.0.3".parse().unwrap()))
            .unwrap();
        let device = Arc::new(Unpluggable::new(SimDevice::new(f)));
        let nic = Nic::open(device.clone()).unwrap();
        let nics = Mutex::new(vec![Arc::downgrade(&nic.inner)]);
        let request = json!({"cmd": "counters", "nic": 0});
        device
            .gone_after
            .store(uet_regs::COUNTERS[0].offset(), Ordering::Relaxed);
        match answer(&request, &nics) {
            Err(e) => assert_eq!(e.errno, FiErrno::FI_EIO, "{e}"),
            Ok(answered) => panic!("counters of a NIC gone while read: {answered}"),
        }
    }

    /// A record listed before its endpoint closed, whose handle a new endpoint took since,
    /// gets no counters: they would be the new endpoint's.
    #[test]
    fn counters_of_an_endpoint_closed_meanwhile_are_not_reported() {
        let fabric = uet_sim::Fabric::new();
        let f = fabric
            .add_nic(uet_sim::NicConfig::new("10.65.0.1".parse().unwrap()))
            .unwrap();
        let nic = Nic::open(Arc::new(SimDevice::new(f))).unwrap();
        let a = nic.endpoint(EndpointAttr::default(), None).unwrap();
        let listed = nic.inner.endpoints();
        drop(a);
        let b = nic.endpoint(EndpointAttr::default(), None).unwrap();
        assert_eq!(listed[0].handle, b.handle(), "the handle is reused");
        let stale = endpoint_json(&nic.inner, &listed[0]);
        assert!(stale["counters"].is_null(), "{stale}");
        assert_eq!(
            stale["counters_error"],
            "the endpoint was closed while its counters were read"
        );
        let now = nic.inner.endpoints();
        let fresh = endpoint_json(&nic.inner, &now[0]);
        assert!(fresh["counters"].is_string(), "{fresh}");
        assert!(fresh["counters_error"].is_null());
    }

    /// A NIC of the simulator at 10.65.0.`host`, on a fabric of its own.
    fn sim_nic(host: u8) -> (uet_sim::Fabric, Nic) {
        let fabric = uet_sim::Fabric::new();
        let f = fabric
            .add_nic(uet_sim::NicConfig::new(
                std::net::Ipv4Addr::new(10, 65, 0, host).into(),
            ))
            .unwrap();
        (fabric, Nic::open(Arc::new(SimDevice::new(f))).unwrap())
    }

    /// The address of peer `n` of subnet 10.65.`subnet`.0/24.
    fn peer_of(subnet: u8, n: u8) -> [u8; 32] {
        uet_fwif::UetAddress {
            caps: uet_fwif::address::caps::AI_BASE,
            mode: uet_fwif::address::AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 1,
            fabric_addr: std::net::Ipv4Addr::new(10, 65, subnet, n).into(),
            ri_start: 1,
            ri_count: 4,
            initiator: u32::from(n),
        }
        .to_bytes()
        .unwrap()
    }

    /// A page of a table destroyed after it was found, whose handle a new AV's table took
    /// since, is `FI_ENOENT`: the reads succeed, but they are of the new table.
    #[test]
    fn a_page_of_a_table_destroyed_meanwhile_is_enoent_even_when_its_handle_is_reused() {
        use uet_av::AvAttr;
        let (_fabric, nic) = sim_nic(2);
        let peer = |n: u8| peer_of(1, n);
        let attr = AvAttr {
            count: 8,
            ..AvAttr::default()
        };
        let mut old = nic.open_av(attr).unwrap();
        old.insert(&peer(1), 1, None, 0).unwrap();
        let listed = nic.inner.av_tables();
        assert_eq!(
            dump_page(&nic.inner, &listed[0], 0, 16).unwrap()["entries"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        drop(old);
        let mut new = nic.open_av(attr).unwrap();
        new.insert(&[peer(2), peer(3)].concat(), 2, None, 0)
            .unwrap();
        assert_eq!(
            new.nic().table().handle(),
            listed[0].handle,
            "the handle is reused"
        );
        let e = dump_page(&nic.inner, &listed[0], 0, 16).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ENOENT, "{e}");
        assert!(e.message.contains("destroyed during the dump"), "{e}");
        let now = nic.inner.av_tables();
        let page = dump_page(&nic.inner, &now[0], 0, 16).unwrap();
        assert_eq!(page["entries"].as_array().unwrap().len(), 2);
    }

    /// Pages of a table read with a change of the application's between them carry different
    /// `changes`, so that a dump read page by page can tell a table that changed under it from
    /// one that did not; pages with nothing changed between them carry the same.
    #[test]
    fn pages_read_across_a_change_of_the_table_say_so() {
        use uet_av::AvAttr;
        let (_fabric, nic) = sim_nic(3);
        let peer = |n: u8| peer_of(2, n);
        let mut av = nic
            .open_av(AvAttr {
                count: 8,
                ..AvAttr::default()
            })
            .unwrap();
        av.insert(&[peer(1), peer(2)].concat(), 2, None, 0).unwrap();
        let listed = nic.inner.av_tables();
        let first = dump_page(&nic.inner, &listed[0], 0, 1).unwrap();
        let second = dump_page(&nic.inner, &listed[0], 1, 1).unwrap();
        assert!(first["changes"].is_u64(), "{first}");
        assert_eq!(second["changes"], first["changes"], "nothing changed");
        av.remove(&[0], 0).unwrap();
        let after = dump_page(&nic.inner, &listed[0], 1, 1).unwrap();
        assert!(after["changes"].is_u64(), "{after}");
        assert_ne!(
            after["changes"], first["changes"],
            "a page read after a removal says the table changed"
        );
    }

    /// The grants of a table's auth-key slots, which its first page shows, change when an
    /// endpoint of its AV is enabled with them, granted one more, or destroyed: pages read
    /// across any of these carry different `changes`.
    #[test]
    fn pages_read_across_a_change_of_the_grants_of_its_keys_say_so() {
        use uet_av::{AvAttr, FI_AV_AUTH_KEY};
        let (_fabric, nic) = sim_nic(3);
        let mut av = nic
            .open_av(AvAttr {
                count: 8,
                job_id: 0x11,
                auth_key_size: FI_AV_AUTH_KEY,
                ..AvAttr::default()
            })
            .unwrap();
        av.insert_auth_key(&uet_av::job_id_to_auth_key(0x77), 0)
            .unwrap();
        let listed = nic.inner.av_tables();
        let changes = || dump_page(&nic.inner, &listed[0], 0, 1).unwrap()["changes"].clone();
        let before = changes();
        assert!(before.is_u64(), "{before}");
        let attr = crate::EndpointAttr {
            job_id: 0x11,
            ..crate::EndpointAttr::default()
        };
        let mut ep = nic.endpoint(attr, Some(&av)).unwrap();
        assert_eq!(ep.auth_key_slots().len(), 1, "granted the AV's key");
        let enabled = changes();
        assert_ne!(enabled, before, "an endpoint enabled with the AV's key");
        let key = av
            .insert_auth_key(&uet_av::job_id_to_auth_key(0x78), 0)
            .unwrap();
        let inserted = changes();
        ep.grant_auth_key(&av, key).unwrap();
        assert_ne!(changes(), inserted, "a key granted to the endpoint");
        let granted = changes();
        drop(ep);
        assert_ne!(
            changes(),
            granted,
            "the endpoint destroyed, its grants given back"
        );
    }
}

#[cfg(test)]
mod bind_tests {
    use super::*;

    #[test]
    fn a_reply_to_a_client_gone_is_an_error_not_a_signal() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        // SIGPIPE's default action, as in a C program that hosts the driver (each test runs
        // in a process of its own under nextest).
        // SAFETY: sets the disposition of SIGPIPE to a value libc defines; no handler.
        let before = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let r = send_no_signal(&ours, b"a reply");
        let r2 = NoSignal(&ours).write(b"one line more");
        // SAFETY: as above, putting back the disposition read there.
        unsafe { libc::signal(libc::SIGPIPE, before) };
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EPIPE));
        assert_eq!(r2.unwrap_err().raw_os_error(), Some(libc::EPIPE));
    }

    /// A client refused at the limit that has already closed its end is `EPIPE` to the
    /// refusal's write, not a `SIGPIPE` on the accepting thread: the program hosting the
    /// driver goes on, and the socket serves the next client.
    #[test]
    fn a_refusal_to_a_client_gone_is_not_a_signal() {
        let dir = fresh_dir("refused-gone");
        let path = dir.join("t.sock");
        let limits = ServeLimits {
            max_clients: 0,
            ..ServeLimits::default()
        };
        let t = Telemetry::bind_with_limits(&path, limits).unwrap();
        // SIGPIPE's default action, as in a C program that hosts the driver (each test runs
        // in a process of its own under nextest).
        // SAFETY: sets the disposition of SIGPIPE to a value libc defines; no handler.
        let before = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        {
            // The refusal is written under this lock: the client is gone by then.
            let _held = lock(&t.clients);
            drop(UnixStream::connect(&path).unwrap());
        }
        // Connections are refused in turn: this one's refusal comes after the first one's.
        let next = UnixStream::connect(&path).unwrap();
        next.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut line = String::new();
        BufReader::new(&next).read_line(&mut line).unwrap();
        // SAFETY: as above, putting back the disposition read there.
        unsafe { libc::signal(libc::SIGPIPE, before) };
        assert!(line.contains("FI_EBUSY"), "{line}");
        drop(t);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn fresh_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("uet-bind-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_socket_is_linked_into_place_private_and_leaves_nothing_else() {
        let dir = fresh_dir("private");
        let path = dir.join("t.sock");
        let listener = bind_private(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(listing(&dir), ["t.sock"], "the private directory is gone");
        let _client = UnixStream::connect(&path).unwrap();
        listener.set_nonblocking(false).unwrap();
        assert!(
            listener.accept().is_ok(),
            "the socket at the path is the listener's"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A path `bind(2)` takes (shorter than `sun_path`) is bound, however much longer the
    /// staging directory's socket path would be.
    #[test]
    fn a_path_that_fits_sun_path_is_bound_whatever_the_staging_name() {
        let dir = fresh_dir("long");
        let room = 107 - dir.as_os_str().len() - 1;
        let path = dir.join(format!("{}.sock", "x".repeat(room - 5)));
        assert_eq!(path.as_os_str().len(), 107);
        let listener = bind_private(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(listing(&dir).len(), 1, "the private directory is gone");
        let _client = UnixStream::connect(&path).unwrap();
        listener.set_nonblocking(false).unwrap();
        assert!(listener.accept().is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A path too long for `sun_path` is refused, as `bind(2)` refuses it, and leaves
    /// nothing behind.
    #[test]
    fn a_path_too_long_for_sun_path_is_refused() {
        let dir = fresh_dir("too-long");
        let room = 108 - dir.as_os_str().len() - 1;
        let path = dir.join(format!("{}.sock", "x".repeat(room - 5)));
        assert!(bind_private(&path).is_err(), "{}", path.display());
        assert!(listing(&dir).is_empty(), "nothing left behind");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A private directory of the name this process would make next (left by a process of
    /// the same PID killed while binding) is left alone, and the socket bound all the same.
    #[test]
    fn a_private_directory_left_behind_is_passed_over() {
        let dir = fresh_dir("left");
        let path = dir.join("t.sock");
        let next = STAGING.load(Ordering::Relaxed);
        let left: Vec<String> = (next..next + 8)
            .map(|n| format!(".t.sock.bind-{}-{n}", std::process::id()))
            .collect();
        for name in &left {
            std::fs::create_dir(dir.join(name)).unwrap();
        }
        let listener = bind_private(&path).unwrap_or_else(|e| panic!("{e}"));
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        let mut want = left.clone();
        want.push("t.sock".into());
        want.sort();
        assert_eq!(listing(&dir), want, "the directories left behind stay");
        let _client = UnixStream::connect(&path).unwrap();
        listener.set_nonblocking(false).unwrap();
        assert!(listener.accept().is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_path_bound_meanwhile_is_left_to_its_owner() {
        let dir = fresh_dir("taken");
        let path = dir.join("t.sock");
        let first = bind_private(&path).unwrap();
        let e = bind_private(&path).unwrap_err();
        assert!(e.contains("another process bound it meanwhile"), "{e}");
        assert_eq!(listing(&dir), ["t.sock"], "nothing left behind");
        let _client = UnixStream::connect(&path).unwrap();
        assert!(
            first.accept().is_ok(),
            "the first owner still serves the path"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_private_directory_of_a_dead_process_is_swept_and_a_live_ones_kept() {
        let dir = fresh_dir("sweep");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dead_dir = dir.join(format!(".7.sock.bind-{dead}-3"));
        let live_dir = dir.join(format!(".7.sock.bind-{}-4", std::process::id()));
        for d in [&dead_dir, &live_dir] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("socket"), b"").unwrap();
        }
        std::fs::write(dir.join(".notes"), b"").unwrap();
        assert_eq!(remove_stale_sockets(&dir), 0, "directories are not counted");
        assert_eq!(
            listing(&dir),
            [
                ".7.sock.bind-".to_string() + &format!("{}-4", std::process::id()),
                ".notes".into()
            ],
            "the dead process's directory is gone, the rest kept"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A socket another program serves at the path that a stream connection cannot reach (a
    /// datagram socket: EPROTOTYPE) is live, not stale: the bind is refused and the socket
    /// stays where its owner bound it.
    #[test]
    fn a_live_socket_of_another_kind_at_the_path_is_refused_and_left_alone() {
        let dir = fresh_dir("dgram");
        let path = dir.join("t.sock");
        let other = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let before = FileId::of(&path);
        let e = Telemetry::bind(&path).map(|t| t.path().to_path_buf());
        assert!(e.is_err(), "bound over a live socket: {e:?}");
        assert_eq!(
            FileId::of(&path),
            before,
            "the other program's socket is left alone"
        );
        let client = std::os::unix::net::UnixDatagram::unbound().unwrap();
        client.send_to(b"still there", &path).unwrap();
        let mut buf = [0u8; 32];
        let n = other.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"still there");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A socket at `path` whose owner accepts nothing, its listen backlog filled: a thread
    /// connects until a connect blocks (the last one, which stays blocked while the listener
    /// lives).
    fn listening_with_a_full_backlog(path: &Path) -> UnixListener {
        let listener = UnixListener::bind(path).unwrap();
        let (progress, filled) = std::sync::mpsc::channel();
        let filling = path.to_path_buf();
        std::thread::spawn(move || loop {
            if progress
                .send(UnixStream::connect(&filling).is_ok())
                .is_err()
            {
                return;
            }
        });
        while filled.recv_timeout(Duration::from_secs(2)) == Ok(true) {}
        listener
    }

    /// A socket whose owner accepts nothing (stopped, or stuck) and whose backlog is full is
    /// refused and left alone, within a wait: the bind does not block for good asking it.
    #[test]
    fn a_socket_whose_backlog_is_full_is_refused_without_blocking() {
        let dir = fresh_dir("full");
        let path = dir.join("t.sock");
        let listener = listening_with_a_full_backlog(&path);
        let before = FileId::of(&path);
        let (done, bound) = std::sync::mpsc::channel();
        let asked = path.clone();
        std::thread::spawn(move || {
            let _ = done.send(Telemetry::bind(&asked).map(|t| t.path().to_path_buf()));
        });
        let r = bound.recv_timeout(Duration::from_secs(30));
        drop(listener);
        let r = r.expect("the bind gave up within its wait");
        assert!(r.is_err(), "bound over a live socket: {r:?}");
        assert_eq!(FileId::of(&path), before, "the socket is left alone");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The sweep asks a `<pid>.sock` of a PID that does not exist here whether anyone listens;
    /// a process of another PID namespace that accepts nothing, its backlog full, keeps its
    /// socket, and the sweep does not block for good asking it.
    #[test]
    fn the_sweep_keeps_a_socket_whose_backlog_is_full_without_blocking() {
        let dir = fresh_dir("sweep-full");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let path = dir.join(format!("{dead}.sock"));
        let listener = listening_with_a_full_backlog(&path);
        let (done, swept) = std::sync::mpsc::channel();
        let asked = dir.clone();
        std::thread::spawn(move || {
            let _ = done.send(remove_stale_sockets(&asked));
        });
        let removed = swept.recv_timeout(Duration::from_secs(30));
        drop(listener);
        assert_eq!(
            removed,
            Ok(0),
            "the sweep gave up within its wait and removed nothing"
        );
        assert!(path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sun_path_is_the_platforms() {
        assert_eq!(SUN_PATH_LEN, 108);
    }
}
