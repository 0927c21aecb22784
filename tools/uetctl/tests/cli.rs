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

/// The largest job the options allow, 32 messages and 32 tagged messages per rank, is more
/// sends than an endpoint's TX ring holds at once: a full ring is drained of completions and
/// the send posted again, as fi_send(3) asks of an application, and every message arrives.
#[test]
fn demo_at_its_largest_message_counts_waits_for_room_in_the_tx_ring() {
    let out = uetctl(&[
        "--json",
        "demo",
        "--ranks",
        "2",
        "--messages",
        "32",
        "--tagged",
        "32",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    for r in v["ranks"].as_array().unwrap() {
        assert_eq!(r["received"], 32, "{r}");
        assert_eq!(r["tagged"]["received"], 32, "{r}");
        assert_eq!(r["tagged"]["unexpected"], 16, "{r}");
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
        (&["demo", "--job-id", "0"][..], "--job-id 0 is no JobID"),
        (
            &["stats", "--demo", "--job-id", "0"][..],
            "--job-id 0 is no JobID",
        ),
        (&["demo", "--tagged", "33"][..], "--tagged must be"),
        (
            &["demo", "--interface-minor", "6"][..],
            "--interface-minor must be 7..=",
        ),
        (
            &["demo", "--interface-minor", "200"][..],
            "--interface-minor must be 7..=",
        ),
        (&["stats"][..], "--demo"),
        (&["av", "dump"][..], "--demo"),
        (&["av", "dump", "--demo", "--rank", "9"][..], "out of range"),
        (&["regs", "--demo", "--rank", "4"][..], "out of range"),
        // A rank is the demo job's: a live process's NIC is --nic.
        (
            &["av", "dump", "--pid", "1", "--rank", "0"][..],
            "cannot be used with '--rank <RANK>'",
        ),
        (
            &["regs", "--socket", "/nonexistent.sock", "--rank", "1"][..],
            "cannot be used with '--rank <RANK>'",
        ),
    ] {
        let out = uetctl(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        // Refused before the job runs: no NIC is ever created.
        assert!(!stderr.contains("frames written"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// (PDS type, SES opcode/return code byte) of a captured UET frame over IPv4.
fn uet_kind(frame: &[u8]) -> (u8, u8) {
    let dg = uet_sim::frame::parse(frame).expect("a well-formed UDP 4793 frame");
    let pds = uet_sim::pds::Prologue::peek(dg.payload).expect("PDS prologue");
    (pds.pkt_type, dg.payload[12])
}

#[test]
fn demo_writes_a_pcap_of_every_frame() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("uetctl-demo.pcap");
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().expect("UTF-8 temp path");
    // Only the untagged messages: no tagged messages, no RMA.
    let out = uetctl(&[
        "demo",
        "--ranks",
        "2",
        "--messages",
        "1",
        "--tagged",
        "0",
        "--no-rma",
        "--pcap",
        p,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("4 frames written to"), "{stderr}");
    let cap = uet_sim::pcap::read_file(&path).expect("a valid capture");
    assert_eq!(cap.linktype, 1);
    assert_eq!(cap.snaplen, 65535);
    // Each rank sends one message to the other: two requests, two responses.
    assert_eq!(cap.records.len(), 4);
    let mut kinds: Vec<u8> = cap.records.iter().map(|r| uet_kind(&r.data).0).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            uet_sim::pds::TYPE_RUD_REQ,
            uet_sim::pds::TYPE_RUD_REQ,
            uet_sim::pds::TYPE_ACK,
            uet_sim::pds::TYPE_ACK
        ]
    );
    // The simulated clock: frame k at k microseconds.
    for (k, r) in cap.records.iter().enumerate() {
        assert_eq!(r.ts_us(), k as u64);
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn av_dump_demo_writes_a_pcap_and_json_reports_it() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("uetctl-dump.pcap");
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().expect("UTF-8 temp path");
    let out = uetctl(&[
        "av",
        "dump",
        "--demo",
        "--ranks",
        "3",
        "--messages",
        "2",
        "--tagged",
        "0",
        "--no-rma",
        "--pcap",
        p,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["pcap"]["frames"], 12);
    assert_eq!(v["pcap"]["write_errors"], 0);
    let cap = uet_sim::pcap::read_file(&path).expect("a valid capture");
    assert_eq!(cap.records.len(), 12);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn pcap_to_a_bad_path_is_a_clear_error_and_exit_2() {
    let dir = env!("CARGO_TARGET_TMPDIR");
    let missing = format!("{dir}/no-such-directory/x.pcap");
    for args in [
        &["demo", "--ranks", "2", "--messages", "1", "--pcap", dir][..],
        &["av", "dump", "--demo", "--ranks", "2", "--pcap", &missing][..],
    ] {
        let out = uetctl(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot write packet capture to"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(out.stdout.is_empty(), "nothing runs: {args:?}");
    }
}

#[test]
fn demo_json_shows_tagged_and_rma_verified() {
    let out = uetctl(&[
        "demo",
        "--ranks",
        "3",
        "--messages",
        "2",
        "--tagged",
        "5",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["ok"], true);
    assert_eq!(v["tagged_per_rank"], 5);
    assert_eq!(v["rma"], true);
    for r in v["ranks"].as_array().unwrap() {
        assert_eq!(r["tagged"]["sent"], 5, "{r}");
        assert_eq!(r["tagged"]["received"], 5, "{r}");
        // Three receives were posted before the messages, two after: those waited.
        assert_eq!(r["tagged"]["unexpected"], 2, "{r}");
        assert_eq!(r["tagged"]["verified"], true, "{r}");
        assert_eq!(r["rma"]["write_verified"], true, "{r}");
        assert_eq!(r["rma"]["read_verified"], true, "{r}");
        assert_eq!(r["rma"]["bytes"], 4097, "MTU + 1: two packets");
        assert_eq!(r["ok"], true);
    }
}

#[test]
fn demo_table_has_tagged_and_rma_columns() {
    let out = uetctl(&["demo", "--ranks", "2", "--messages", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for col in ["TSENT", "TRECV", "UNEXP", "RMA WRITE", "RMA READ"] {
        assert!(stdout.contains(col), "{col} missing:\n{stdout}");
    }
    assert!(stdout.contains("ok: 8 of 8 tagged messages"), "{stdout}");
    assert!(
        stdout.contains("ok: 2 of 2 RMA writes verified"),
        "{stdout}"
    );
}

#[test]
fn stats_prints_nic_and_endpoint_counters_of_every_rank() {
    let out = uetctl(&["stats", "--demo", "--ranks", "3", "--messages", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("NIC counters (BAR0)"), "{stdout}");
    assert!(
        stdout.contains("endpoint counters (COUNTERS_READ)"),
        "{stdout}"
    );
    for needle in [
        "rank 2",
        "RX_PERM_VIOLATION",
        "RX_UNEXPECTED",
        "rx_unexpected",
        "rma_writes",
    ] {
        assert!(stdout.contains(needle), "{needle} missing:\n{stdout}");
    }
    // Aligned: every row of a table is as wide as its header.
    let widths: Vec<usize> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("COUNTER"))
        .take_while(|l| !l.is_empty())
        .map(str::len)
        .collect();
    assert!(
        widths.len() > 10 && widths.iter().all(|&w| w == widths[0]),
        "{stdout}"
    );

    let out = uetctl(&[
        "stats",
        "--demo",
        "--ranks",
        "2",
        "--messages",
        "3",
        "--json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["ok"], true);
    for r in v["ranks"].as_array().unwrap() {
        let ep = &r["endpoint_counters"];
        // 3 messages + 4 tagged each way; 4097-byte RMA write and read.
        assert_eq!(ep["tx_messages"], 7, "{r}");
        assert_eq!(ep["rx_messages"], 7, "{r}");
        assert_eq!(ep["tx_tagged_messages"], 4, "{r}");
        assert_eq!(ep["rx_unexpected"], 2, "{r}");
        assert_eq!(ep["rma_writes"], 1, "{r}");
        assert_eq!(ep["rma_reads"], 1, "{r}");
        assert_eq!(ep["rma_target_write_bytes"], 4097, "{r}");
        assert_eq!(ep["tx_errors"], 0, "{r}");
        assert_eq!(r["nic"]["RX_UNEXPECTED"], 2, "{r}");
        assert_eq!(r["nic"]["RX_PERM_VIOLATION"], 0, "{r}");
    }
}

#[test]
fn regs_prints_every_register_of_the_demo_nics() {
    let out = uetctl(&[
        "regs",
        "--demo",
        "--ranks",
        "2",
        "--messages",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nics = v["nics"].as_array().unwrap();
    assert_eq!(nics.len(), 2);
    let regs = nics[1]["registers"].as_array().unwrap();
    let status = regs.iter().find(|r| r["name"] == "DEV_STATUS").unwrap();
    assert_eq!(status["fields"]["enabled"], 1);
    let out = uetctl(&[
        "regs",
        "--demo",
        "--ranks",
        "2",
        "--messages",
        "1",
        "--rank",
        "0",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rank 0 NIC 10.0.0.1 BAR0"), "{text}");
    assert!(text.contains("TX_PACKETS"), "{text}");
    let out = uetctl(&["regs"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A capture that cannot be written to the end (its reader goes away after the first
/// bytes) fails every command that takes `--pcap`, after saying why.
#[test]
fn a_capture_cut_short_fails_every_command_that_takes_pcap() {
    use std::io::Read;
    let dir = env!("CARGO_TARGET_TMPDIR");
    // About 125 KB of capture: more than a pipe holds, so some write must fail once the
    // reader has gone, however the threads are scheduled.
    let job = [
        "--ranks",
        "16",
        "--messages",
        "32",
        "--tagged",
        "0",
        "--no-rma",
    ];
    let commands: [&[&str]; 4] = [
        &["demo"],
        &["av", "dump", "--demo"],
        &["stats", "--demo"],
        &["regs", "--demo"],
    ];
    for (n, cmd) in commands.into_iter().enumerate() {
        let fifo = format!("{dir}/uetctl-cut-{}-{n}.fifo", std::process::id());
        let _ = std::fs::remove_file(&fifo);
        let made = Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfifo is not available");
            return;
        }
        // The reader takes the file header and a little more, then goes. It opens without
        // waiting for a writer and gives up after a minute, so a uetctl that never opens the
        // capture fails the test instead of hanging it.
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo)
                    .expect("open the fifo");
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                let mut got = 0;
                while got < 64 && std::time::Instant::now() < deadline {
                    let mut buf = [0u8; 64];
                    match f.read(&mut buf[got..]) {
                        Ok(n) if n > 0 => got += n,
                        // No writer yet (0), or no data yet.
                        _ => std::thread::sleep(std::time::Duration::from_millis(1)),
                    }
                }
            })
        };
        let args: Vec<&str> = cmd
            .iter()
            .chain(&job)
            .chain(&["--pcap", fifo.as_str()])
            .copied()
            .collect();
        let out = uetctl(&args);
        reader.join().expect("reader");
        let _ = std::fs::remove_file(&fifo);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("failed after"), "{args:?}: {stderr}");
    }
}

#[test]
fn demo_runs_on_nics_of_the_oldest_interface_the_driver_drives() {
    let out = uetctl(&["demo", "--ranks", "3", "--interface-minor", "7", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["interface_minor"], 7);
    for r in v["ranks"].as_array().unwrap() {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["rma"]["read_verified"], true, "{r}");
    }
    assert!(v["rank0_av"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["match"] == true));
}

/// Run `uetctl args` with standard output a pipe whose reader has already closed, as in
/// `uetctl … | head` once `head` has its lines.
fn uetctl_into_closed_pipe(args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run uetctl")
}

#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    for args in [
        &["demo"][..],
        &["--json", "demo"],
        &["av", "dump", "--demo"],
        &["regs", "--demo"],
        &["stats", "--demo"],
        &["ps", "--dir", "/nonexistent-uet-nic-telemetry"],
    ] {
        let out = uetctl_into_closed_pipe(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "uetctl {args:?} into a closed pipe: {:?}\nstderr:\n{stderr}",
            out.status
        );
    }
}

#[test]
fn an_output_that_fails_otherwise_is_an_error() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let out = Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["regs", "--demo"])
        .stdout(full)
        .output()
        .expect("run uetctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(
        stderr.contains("uetctl: writing standard output:") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// A sysfs and procfs tree with a uet-nic function at 0000:3b:00.0 bound to `driver`.
fn sys_tree(name: &str, driver: Option<&str>) -> std::path::PathBuf {
    use std::os::unix::fs::symlink;
    let root = std::env::temp_dir().join(format!("uetctl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let f = root.join("sys/bus/pci/devices/0000:3b:00.0");
    std::fs::create_dir_all(&f).unwrap();
    std::fs::write(f.join("vendor"), "0xfffe\n").unwrap();
    std::fs::write(f.join("device"), "0x0001\n").unwrap();
    std::fs::write(f.join("driver_override"), "(null)\n").unwrap();
    std::fs::write(root.join("sys/bus/pci/drivers_probe"), "").unwrap();
    symlink("../../../kernel/iommu_groups/9", f.join("iommu_group")).unwrap();
    for d in ["vfio-pci", "ixgbe"] {
        let d = root.join("sys/bus/pci/drivers").join(d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("unbind"), "").unwrap();
    }
    if let Some(d) = driver {
        symlink(format!("../../../bus/pci/drivers/{d}"), f.join("driver")).unwrap();
    }
    std::fs::create_dir_all(root.join("proc")).unwrap();
    root
}

fn uetctl_on(root: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let sys = root.join("sys");
    let proc = root.join("proc");
    let mut all: Vec<&str> = args.to_vec();
    all.extend([
        "--sysfs",
        sys.to_str().unwrap(),
        "--procfs",
        proc.to_str().unwrap(),
    ]);
    let out = uetctl(&all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bind_and_unbind_report_what_they_did_and_why_they_could_not() {
    let root = sys_tree("bound", Some("vfio-pci"));
    let (ok, stdout, _) = uetctl_on(&root, &["bind", "3b:00.0"]);
    assert!(ok);
    assert_eq!(stdout, "0000:3b:00.0 is bound to vfio-pci already\n");
    let (ok, stdout, _) = uetctl_on(&root, &["--json", "bind", "0000:3b:00.0"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(v["driver"], "vfio-pci");
    assert_eq!(v["address"], "0000:3b:00.0");
    let (ok, stdout, stderr) = uetctl_on(&root, &["unbind", "0000:3b:00.0"]);
    assert!(ok, "{stderr}");
    // The tree is not a kernel: the link still names vfio-pci afterwards.
    assert_eq!(
        stdout,
        "0000:3b:00.0 released from vfio-pci (now vfio-pci)\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("sys/bus/pci/drivers/vfio-pci/unbind")).unwrap(),
        "0000:3b:00.0"
    );
    std::fs::remove_dir_all(&root).unwrap();

    // A driver that does not let go (nothing here reacts to the writes): status 1, the reason,
    // and the override cleared again.
    let root = sys_tree("stuck", Some("ixgbe"));
    let (ok, stdout, stderr) = uetctl_on(&root, &["bind", "0000:3b:00.0"]);
    assert!(!ok && stdout.is_empty());
    assert!(
        stderr.contains("uetctl bind: vfio-pci did not take 0000:3b:00.0 (now bound to ixgbe)"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("sys/bus/pci/devices/0000:3b:00.0/driver_override"))
            .unwrap(),
        "\n"
    );
    let (ok, _, stderr) = uetctl_on(&root, &["unbind", "0000:3b:00.0"]);
    assert!(!ok);
    assert!(stderr.contains("bound to ixgbe, not vfio-pci"), "{stderr}");
    let (ok, _, stderr) = uetctl_on(&root, &["bind", "0000:3b:00.1"]);
    assert!(!ok);
    assert!(stderr.contains("no PCI function 0000:3b:00.1"), "{stderr}");
    std::fs::remove_dir_all(&root).unwrap();

    // The listing.
    let root = sys_tree("list", Some("vfio-pci"));
    let (ok, stdout, _) = uetctl_on(&root, &["pci"]);
    assert!(ok);
    assert_eq!(
        stdout,
        "ADDRESS        DRIVER     IOMMU GROUP\n0000:3b:00.0   vfio-pci   9\n"
    );
    let (ok, stdout, _) = uetctl_on(&root, &["--json", "pci"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(v["functions"][0]["iommu_group"], 9);
    std::fs::remove_dir_all(root.join("sys/bus/pci/devices/0000:3b:00.0")).unwrap();
    let (ok, stdout, _) = uetctl_on(&root, &["pci"]);
    assert!(ok);
    assert_eq!(stdout, "no uet-nic function on the PCI bus\n");
    std::fs::remove_dir_all(&root).unwrap();

    // A bad address is a usage error.
    let out = uetctl(&["bind", "0000:3b:20.0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the device is above 1f"));
}

#[test]
fn regs_of_a_function_that_cannot_be_opened_says_why() {
    // No such function on this machine's bus: refused by sysfs, before any device file.
    let out = uetctl(&["regs", "--vfio", "ffff:ff:1f.7"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("uetctl regs: cannot open device vfio:ffff:ff:1f.7"),
        "{stderr}"
    );
    assert!(stderr.contains("no PCI function"), "{stderr}");
    assert!(out.stdout.is_empty());
    let out = uetctl(&["regs", "--vfio", "0000:3b:00.0", "--pid", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("do not apply"));
    // The job's options, which only a job on the functions (--demo) uses, are refused: not
    // ignored while the registers are read.
    for (job, needle) in [
        (&["--ranks", "2"][..], "--ranks"),
        (&["--messages", "3"], "--messages"),
        (&["--job-id", "0x55"], "--job-id"),
        (&["--tagged", "0"], "--tagged"),
        (&["--no-rma"], "--no-rma"),
    ] {
        let mut args = vec!["regs", "--vfio", "ffff:ff:1f.7"];
        args.extend_from_slice(job);
        let out = uetctl(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("do not apply") && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("cannot open device"), "{args:?}: {stderr}");
    }
    // Every subcommand that takes the job's options parses (their names are unique).
    for cmd in [&["regs"][..], &["stats"], &["av", "dump"], &["demo"]] {
        let mut args = cmd.to_vec();
        args.push("--help");
        assert!(uetctl(&args).status.success(), "{cmd:?}");
    }
}

/// `stats --help` says what it shows of a live process: its NICs' counters; its endpoints'
/// are `ep list`'s.
#[test]
fn stats_help_says_what_a_live_process_shows() {
    let help = uetctl(&["stats", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("of a live process (--pid, --socket), the counters of its NICs")
            && help.contains("`uetctl ep list` shows its endpoints' counters"),
        "{help}"
    );
}

#[test]
fn the_demo_on_pci_functions_checks_them_before_any_rank_starts() {
    let run = |args: &[&str]| {
        let out = uetctl(args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Functions this machine does not have: rank 0's is refused by sysfs, nothing runs.
    let (code, stdout, stderr) = run(&["demo", "--vfio", "ffff:ff:1f.6,ffff:ff:1f.7"]);
    assert_ne!(code, Some(0));
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("rank 0: cannot open device vfio:ffff:ff:1f.6")
            && stderr.contains("no PCI function"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["demo", "--vfio", "3b:00.0,3b:00.0"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("--vfio names 0000:3b:00.0 twice"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["demo", "--vfio", "3b:00.0,3b:00.1", "--ranks", "3"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("--vfio names 2 functions for 3 ranks"),
        "{stderr}"
    );
    let (code, _, _) = run(&["demo", "--vfio", "3b:00.0,3b:00.1", "--vfio-user", "/tmp"]);
    assert_eq!(code, Some(2));
}

/// The demo job's options say how to run a job, which inspecting a live process does not do:
/// given with --pid or --socket they are refused (exit 2), not ignored while the command
/// succeeds (a `--pcap` file never written, `--ranks` never used).
#[test]
fn the_job_options_are_refused_with_a_live_process() {
    let pcap = std::env::temp_dir().join(format!("uetctl-live-pcap-{}.pcap", std::process::id()));
    let pcap_s = pcap.to_str().unwrap();
    for cmd in [&["av", "dump"][..], &["stats"], &["regs"]] {
        for target in [["--pid", "1"], ["--socket", "/nonexistent.sock"]] {
            for (job, needle) in [
                (&["--pcap", pcap_s][..], "cannot be used with"),
                (&["--ranks", "3"], "cannot be used with"),
                (&["--messages", "2"], "cannot be used with"),
                (&["--tagged", "0"], "cannot be used with"),
                (&["--job-id", "0x55"], "cannot be used with"),
                (&["--no-rma"], "cannot be used with"),
                (&["--interface-minor", "8"], "cannot be used with"),
                (&["--vfio-user", "/tmp"], "cannot be used with"),
                (&["--vfio", "3b:00.0"], "--vfio"),
            ] {
                let mut args = cmd.to_vec();
                args.extend_from_slice(&target);
                args.extend_from_slice(job);
                let out = uetctl(&args);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
                assert!(stderr.contains(needle), "{args:?}: {stderr}");
                assert!(!stderr.contains("cannot reach"), "{args:?}: {stderr}");
                assert!(out.stdout.is_empty(), "{args:?}");
            }
        }
    }
    assert!(!pcap.exists());
}

/// The README's `--interface-minor` paragraph names the current host interface version, and
/// what each version the driver gates a feature on changes, up to that one.
#[test]
fn the_readme_says_what_each_interface_minor_up_to_the_current_one_gates() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let paragraph = readme
        .split("\n\n")
        .find(|p| p.starts_with("`--interface-minor N`"))
        .expect("the --interface-minor paragraph");
    let text = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let current = uet_regs::INTERFACE_MINOR;
    assert!(
        text.contains(&format!("(7 to the current {current})")),
        "{text}"
    );
    for minor in 8..=current {
        assert!(
            text.contains(&format!(" 1.{minor}")),
            "nothing said of 1.{minor}: {text}"
        );
    }
}

/// A `--socket` that names a file or a directory, no socket, is said to be one, with status
/// 2: not "connection refused", which reads as a process that is there and refuses.
#[test]
fn a_socket_path_that_is_no_socket_is_said_to_be_none() {
    let dir = std::env::temp_dir().join(format!("uetctl-no-socket-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("1234.sock");
    std::fs::write(&file, b"not a socket").unwrap();
    for (path, what) in [(&file, "is a file"), (&dir, "is a directory")] {
        let path = path.to_str().unwrap();
        for args in [
            &["av", "dump", "--socket", path][..],
            &["regs", "--socket", path],
            &["ep", "list", "--socket", path],
        ] {
            let out = uetctl(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(
                stderr.contains(what) && stderr.contains("not a telemetry socket"),
                "{args:?}: {stderr}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
