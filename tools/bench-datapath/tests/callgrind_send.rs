//! `tools/callgrind-send` as a user runs it, with stand-ins for cargo and valgrind so that
//! what it does when something fails is seen without a release build.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory of stand-ins: `cargo` that builds nothing, and `valgrind` that runs `valgrind`
/// (a shell body) instead of the program it is given.
fn stand_ins(test: &str, valgrind: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("callgrind-send-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    for (name, body) in [("cargo", "exit 0"), ("valgrind", valgrind)] {
        let path = dir.join("bin").join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// Run the script with `args` and the stand-ins of `dir` first on the PATH: (exit status,
/// standard output, standard error).
fn callgrind_send(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../callgrind-send");
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A run of the benchmark that fails under valgrind (a bad argument, valgrind's own error)
/// ends the script with a non-zero status and what went wrong on standard error, not in
/// silence; a SENDS that is not a positive number is refused before anything runs.
#[test]
fn a_failed_run_says_why() {
    let dir = stand_ins(
        "failed",
        "echo 'valgrind: the program failed to start' >&2; exit 1",
    );
    let (code, stdout, stderr) = callgrind_send(&dir, &["100"]);
    assert_ne!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("valgrind: the program failed to start"),
        "{stderr}"
    );
    for sends in ["abc", "0", "-5"] {
        let (code, stdout, stderr) = callgrind_send(&dir, &[sends]);
        assert_eq!(code, Some(2), "{sends:?}: {stdout}{stderr}");
        assert!(stderr.contains("SENDS"), "{sends:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The run succeeds, but its profile cannot be read (here: valgrind wrote none).
    let dir = stand_ins("unreadable", "echo '==1== Collected : 5000' >&2; exit 0");
    let (code, stdout, stderr) = callgrind_send(&dir, &["100"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("could not read the callgrind totals"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
