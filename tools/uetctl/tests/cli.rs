//! `uetctl` as a user runs it.

use std::process::Command;

fn uetctl(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(args)
        .output()
        .expect("run uetctl")
}

#[test]
fn demo_runs_four_ranks_and_prints_rank0_av_table() {
    let out = uetctl(&["demo"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("rank 0 NIC AV table: 4 entries valid"),
        "{stdout}"
    );
    assert!(stdout.contains("0 differences"), "{stdout}");
    assert!(stdout.contains("ok: 32 of 32 messages"), "{stdout}");
    for fa in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"] {
        assert!(stdout.contains(fa), "{fa} missing:\n{stdout}");
    }
}

#[test]
fn demo_json_reports_every_rank() {
    let out = uetctl(&["demo", "--ranks", "6", "--messages", "3", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["ok"], true);
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 6);
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(r["rank"], i);
        assert_eq!(r["sent"], 3);
        assert_eq!(r["received"], 3);
        assert_eq!(r["av_size"], 6);
    }
    let entries = v["rank0_av"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 6);
    assert!(entries.iter().all(|e| e["match"] == true));
    // Each NIC entry holds the address the matching rank reported.
    for (e, r) in entries.iter().zip(ranks) {
        assert_eq!(e["nic"]["fabric_addr"], r["fabric_addr"]);
        assert_eq!(e["nic"]["pid_on_fep"], r["pid_on_fep"]);
        assert_eq!(e["nic"]["ri_start"], r["ri_start"]);
    }
}

#[test]
fn av_dump_prints_every_rank_table_and_json() {
    let out = uetctl(&["av", "dump", "--demo", "--ranks", "3", "--messages", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for r in 0..3 {
        assert!(stdout.contains(&format!("rank {r} NIC")), "{stdout}");
    }
    assert!(stdout.contains("INDEX"), "{stdout}");
    assert!(stdout.contains("PIDonFEP"), "{stdout}");
    let out = uetctl(&[
        "av", "dump", "--demo", "--ranks", "3", "--rank", "1", "--json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tables"].as_array().unwrap().len(), 1);
    assert_eq!(v["tables"][0]["rank"], 1);
    assert_eq!(v["differences"], 0);
}

#[test]
fn bad_arguments_get_a_clear_error_and_exit_2() {
    for (args, needle) in [
        (&["demo", "--ranks", "1"][..], "--ranks must be"),
        (&["demo", "--messages", "0"][..], "--messages must be"),
        (&["demo", "--job-id", "0x1000000"][..], "wider than 24 bits"),
        (&["av", "dump"][..], "--demo"),
        (&["av", "dump", "--demo", "--rank", "9"][..], "out of range"),
    ] {
        let out = uetctl(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
