//! The simulator as a daemon and the driver in other processes: `uetctl sim serve` in one
//! process, `uetctl demo --vfio-user` in others, talking vfio-user over Unix sockets.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

fn uetctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(args)
        .output()
        .expect("run uetctl")
}

/// A running `uetctl sim serve`, stopped when dropped.
struct Daemon {
    child: Child,
    lines: Vec<String>,
}

impl Daemon {
    /// Start a daemon of `nics` NICs in `dir` and wait until it says it serves.
    fn start(dir: &Path, nics: usize) -> Daemon {
        Self::start_with(dir, nics, &[])
    }

    /// [`Daemon::start`], with `extra` arguments to `sim serve`.
    fn start_with(dir: &Path, nics: usize, extra: &[&str]) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_uetctl"))
            .args(["sim", "serve", "--nics", &nics.to_string(), "--dir"])
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the daemon");
        let out = child.stdout.take().expect("stdout");
        let mut lines = Vec::new();
        for line in BufReader::new(out).lines() {
            let line = line.expect("daemon output");
            let last = line.starts_with("serving");
            lines.push(line);
            if last {
                return Daemon { child, lines };
            }
        }
        let status = child.wait().expect("daemon status");
        panic!("the daemon stopped before serving ({status}): {lines:?}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn socket_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uetctl-daemon-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `uetctl --json demo --ranks 2 --vfio-user dir`, which must succeed; its JSON.
fn demo_over(dir: &Path) -> serde_json::Value {
    let dir = dir.to_str().expect("UTF-8 path");
    let out = uetctl(&["--json", "demo", "--ranks", "2", "--vfio-user", dir]);
    assert!(
        out.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn a_job_in_another_process_runs_on_the_daemons_nics_again_and_again() {
    let dir = socket_dir("job");
    let daemon = Daemon::start(&dir, 2);
    assert_eq!(daemon.lines.len(), 3, "{:?}", daemon.lines);
    assert!(
        daemon.lines[0].starts_with("nic0 10.0.0.1 "),
        "{:?}",
        daemon.lines
    );
    assert!(daemon.lines[1].ends_with("nic1.sock"), "{:?}", daemon.lines);

    // Each run is a new driver process; the daemon released the NICs after the last one.
    for run in 0..2 {
        let v = demo_over(&dir);
        assert_eq!(v["ok"], true, "run {run}: {v:#}");
        assert_eq!(v["av_differences"], 0, "run {run}");
        assert_eq!(v["interface_minor"], u64::from(uet_regs::INTERFACE_MINOR));
        assert_eq!(v["vfio_user"], dir.display().to_string());
        for (i, r) in v["ranks"].as_array().unwrap().iter().enumerate() {
            assert_eq!(r["received"], 8, "run {run} rank {i}");
            assert_eq!(r["fabric_addr"], format!("10.0.0.{}", i + 1));
            assert_eq!(r["rma"]["write_verified"], true);
        }
    }

    // A second daemon on the same sockets is refused, and the first one keeps serving.
    let out = uetctl(&[
        "sim",
        "serve",
        "--nics",
        "2",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nic0.sock: served by another process"),
        "{err}"
    );
    assert_eq!(demo_over(&dir)["ok"], true);

    // A daemon that dies leaves its socket files; the next one replaces them.
    drop(daemon);
    assert!(dir.join("nic0.sock").exists());
    let out = uetctl(&["demo", "--ranks", "2", "--vfio-user", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rank 0: cannot open device vfio-user:"),
        "{err}"
    );
    let daemon = Daemon::start(&dir, 2);
    assert_eq!(demo_over(&dir)["ok"], true);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_daemon_and_the_job_refuse_what_they_cannot_do() {
    let dir = socket_dir("refusals");
    let d = dir.to_str().unwrap();
    for (args, message) in [
        (
            vec!["sim", "serve", "--nics", "0", "--dir", d],
            "--nics must be 1..=1024, got 0",
        ),
        (
            vec!["sim", "serve", "--interface-minor", "6", "--dir", d],
            "--interface-minor must be 7..=",
        ),
        (
            vec!["sim", "serve", "--av-table-entries", "0", "--dir", d],
            "--av-table-entries must be at least 1",
        ),
    ] {
        let out = uetctl(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(!dir.join("nic0.sock").exists(), "{args:?}: nothing bound");
    }
    // A daemon that serves fewer NICs than the job has ranks: the missing rank is named.
    let daemon = Daemon::start(&dir, 1);
    let out = uetctl(&["demo", "--ranks", "2", "--vfio-user", d]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rank 1: cannot open device vfio-user:"),
        "{err}"
    );
    assert!(err.contains("nic1.sock"), "{err}");
    // The capture and the interface version belong to the daemon's fabric.
    for extra in [["--pcap", "x.pcap"], ["--interface-minor", "8"]] {
        let out = uetctl(&["demo", "--vfio-user", d, extra[0], extra[1]]);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot be used with"), "{extra:?}: {err}");
    }
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each NIC of the daemon has `--av-table-entries` of AV table memory, shared by its
/// tables: a driver's AV past it is `FI_ENOSPC` (the NIC's NoResources), the daemon goes on,
/// and a table closed gives its entries back.
#[test]
fn a_nics_av_tables_share_the_table_memory_the_daemon_gives_it() {
    use uet_driver::backend::vfio_user::VfioUserDevice;
    let dir = socket_dir("av-memory");
    let daemon = Daemon::start_with(&dir, 1, &["--av-table-entries", "3000"]);
    let device = VfioUserDevice::open(dir.join("nic0.sock")).expect("the daemon's NIC");
    let nic = uet_driver::Nic::open(std::sync::Arc::new(device)).expect("open it");
    let attr = |count| uet_av::AvAttr {
        count,
        ..uet_av::AvAttr::default()
    };
    let first = nic.open_av(attr(2048)).expect("2048 of 3000 entries");
    let e = nic.open_av(attr(2048)).expect_err("past the table memory");
    assert_eq!(e.errno, uet_av::FiErrno::FI_ENOSPC, "{e}");
    let small = nic.open_av(attr(900)).expect("what is left");
    drop(first);
    let again = nic
        .open_av(attr(2048))
        .expect("the closed table's entries are back");
    drop((small, again, nic));
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Start `uetctl sim serve --nics 1 --dir DIR` where it should refuse at once: its exit
/// status (`None`: it served instead, and was stopped after 30 s) and its standard error.
fn serve_one_nic_expecting_refusal(dir: &Path) -> (Option<std::process::ExitStatus>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["sim", "serve", "--nics", "1", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the daemon");
    // It refuses at once; one that serves instead is stopped, and the test fails.
    let status = exit_within_30_s(&mut child);
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    (status, stderr)
}

/// A file in the place of a NIC's socket that is not a socket (someone's notes, a file
/// named by mistake) is refused, exit 2, and left as it is; only a socket nobody listens on
/// is replaced.
#[test]
fn a_file_that_is_not_a_socket_is_refused_and_kept() {
    let dir = socket_dir("not-a-socket");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("nic0.sock");
    std::fs::write(&file, b"my notes").unwrap();
    let (status, stderr) = serve_one_nic_expecting_refusal(&dir);
    let kept = std::fs::read(&file).ok();
    let _ = std::fs::remove_dir_all(&dir);
    let status = status.expect("the daemon served in place of a file that is not a socket");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a socket"), "{stderr}");
    assert_eq!(
        kept.as_deref(),
        Some(&b"my notes"[..]),
        "the file was deleted"
    );
}

/// A live socket of another kind at a NIC's path (a datagram socket of some other program)
/// is not taken for a daemon's leftover: refused, exit 2, and left to its owner, which still
/// receives on it.
#[test]
fn a_live_socket_of_another_kind_is_refused_and_kept() {
    use std::os::unix::net::UnixDatagram;
    let dir = socket_dir("datagram");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nic0.sock");
    let owner = UnixDatagram::bind(&path).unwrap();
    let (status, stderr) = serve_one_nic_expecting_refusal(&dir);
    let still_there = UnixDatagram::unbound()
        .and_then(|s| s.send_to(b"still mine", &path))
        .is_ok();
    let mut got = [0u8; 16];
    owner.set_nonblocking(true).unwrap();
    let received = owner.recv(&mut got).ok();
    let _ = std::fs::remove_dir_all(&dir);
    let status = status.expect("the daemon served in place of a live socket");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot take over"), "{stderr}");
    assert!(still_there, "the socket was taken from its owner");
    assert_eq!(received, Some(10));
}

/// A daemon stopped as daemons are stopped (SIGTERM, Ctrl-C's SIGINT, the terminal's
/// SIGHUP) removes its socket files before it goes, and still ends by the signal; the
/// directory is left empty for the next one, not with sockets nobody serves.
#[test]
fn a_daemon_stopped_by_a_signal_removes_its_sockets() {
    use std::os::unix::process::ExitStatusExt;
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let dir = socket_dir(&format!("stopped-{signal}"));
        let mut daemon = Daemon::start(&dir, 2);
        assert!(dir.join("nic0.sock").exists() && dir.join("nic1.sock").exists());
        let pid = i32::try_from(daemon.child.id()).expect("a pid");
        // SAFETY: kill(2) signals the daemon, a child not waited for yet, so its pid is its.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let status = daemon.child.wait().expect("daemon status");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(status.signal(), Some(signal), "{status}");
        assert!(left.is_empty(), "signal {signal}: left behind {left:?}");
    }
}

/// A daemon started with a stop signal ignored (`nohup` ignores SIGHUP) goes on ignoring it
/// and serving; SIGTERM still stops it with its sockets removed.
#[test]
fn a_daemon_keeps_ignoring_a_stop_signal_it_was_started_ignoring() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let dir = socket_dir("nohup");
    let mut command = Command::new(env!("CARGO_BIN_EXE_uetctl"));
    command
        .args(["sim", "serve", "--nics", "1", "--dir"])
        .arg(&dir)
        .stdout(Stdio::piped());
    // SAFETY: between fork and exec the child only calls signal(2), which is
    // async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = command.spawn().expect("start the daemon");
    let out = child.stdout.take().expect("stdout");
    let serving = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("serving"));
    // Stopped when dropped, whatever fails below.
    let mut daemon = Daemon {
        child,
        lines: Vec::new(),
    };
    assert!(serving, "the daemon stopped before serving");
    let pid = i32::try_from(daemon.child.id()).expect("a pid");
    // SAFETY: kill(2) signals the daemon, a child not waited for yet, so its pid is its.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after_hup = daemon.child.try_wait().expect("daemon status");
    // SAFETY: as above; the daemon has not been waited for.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = daemon.child.wait().expect("daemon status");
    let left = dir.join("nic0.sock").exists();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        after_hup.is_none(),
        "stopped by an ignored SIGHUP: {after_hup:?}"
    );
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}");
    assert!(!left, "nic0.sock left behind");
}

/// A daemon whose readiness lines cannot be written has told no one that it serves: it
/// stops, and its socket files go with it; a full disk is a message and exit 1, a reader
/// that has gone (the pipe closed) exit 0, as for every uetctl command.
#[test]
fn a_daemon_that_cannot_say_it_serves_leaves_no_sockets() {
    let dir = socket_dir("stdout-full");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["sim", "serve", "--nics", "2", "--dir"])
        .arg(&dir)
        .stdout(full)
        .output()
        .expect("run the daemon");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("writing standard output"), "{stderr}");
    assert!(left.is_empty(), "left behind {left:?}");

    let dir = socket_dir("stdout-closed");
    // The reader is gone before the daemon starts: whenever it writes its first line, the
    // write fails (EPIPE).
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["sim", "serve", "--nics", "2", "--dir"])
        .arg(&dir)
        .stdout(writer)
        .spawn()
        .expect("start the daemon");
    let status = exit_within_30_s(&mut child);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let status = status.expect("the daemon served with nobody told");
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(left.is_empty(), "left behind {left:?}");
}

/// The exit status of `child` once it ends, within 30 s; `None` when it is still running
/// then, and it is killed.
fn exit_within_30_s(child: &mut Child) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("daemon status") {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
