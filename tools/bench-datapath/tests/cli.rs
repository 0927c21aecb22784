//! `bench-datapath` as a user runs it: what it refuses.

use std::process::Command;

/// An operation the bench does not have, or a size outside 1 byte to 1 MiB, is refused
/// before anything is measured, with exit status 2 (as the argument parser refuses the
/// rest), and no figure is printed: not found when its turn comes, after the operations
/// named before it ran.
#[test]
fn an_unknown_operation_or_size_is_refused_before_anything_runs() {
    for args in [
        &["--ops", "send,bogus", "--sizes", "8"][..],
        &["--ops", "wake_poll", "--sizes", "8"],
        &["--ops", "send", "--sizes", "8,0"],
        &["--ops", "wake", "--sizes", "8,2097152"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bench-datapath"))
            .args(["--volume", "1"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(stderr.starts_with("bench-datapath: "), "{args:?}: {stderr}");
    }
}

/// Standard output a pipe whose reader has gone (`bench-datapath | head -1` once `head` has
/// its line) ends the run quietly with status 0, not in a panic; any other failure to write
/// is a message and status 1.
#[test]
fn a_reader_that_goes_away_ends_the_run_quietly() {
    let args = ["--volume", "1", "--ops", "send", "--sizes", "8,8"];
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_bench-datapath"))
        .args(args)
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "{:?}: {stderr}",
        out.status
    );
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let out = Command::new(env!("CARGO_BIN_EXE_bench-datapath"))
        .args(args)
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("bench-datapath: writing standard output:")
            && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// `--callgrind-sends` posts its sends and measures nothing: the options of a measurement
/// beside it are refused (exit 2, nothing run), not ignored, nor run before the sends.
#[test]
fn callgrind_sends_refuses_the_options_of_a_measurement() {
    for args in [
        &["--ops", "wake"][..],
        &["--ops", "send"],
        &["--sizes", "8"],
        &["--volume", "1"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bench-datapath"))
            .args(["--callgrind-sends", "1"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot be used with"), "{args:?}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_bench-datapath"))
        .args(["--callgrind-sends", "3"])
        .output()
        .unwrap();
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
}
