//! `bench-av` as a user runs it: what it refuses.

use std::process::Command;

/// Every option that names something the bench does not have is refused before anything is
/// measured, with exit status 2 (as the argument parser refuses the rest), and no figure is
/// printed.
#[test]
fn an_unknown_implementation_or_operation_is_refused_before_anything_runs() {
    for args in [
        &["--impl", "uet-hots"][..],
        &["--impl", "uet-host,bogus"],
        &["--ops", "insert,bogus"],
        &["--counts", "0"],
        &["--batch", "0"],
        &["--rounds", "0"],
        &["--rounds", "18446744073709551615"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bench-av"))
            .args(["--counts", "10"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(stderr.starts_with("bench-av: "), "{args:?}: {stderr}");
        assert!(!stderr.contains("warm-up"), "{args:?}: {stderr}");
    }
}
