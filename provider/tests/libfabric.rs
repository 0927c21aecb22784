//! The provider under the system libfabric: C programs built against `rdma/fabric.h` and
//! linked with `-lfabric` load `libuet-fi.so` from `FI_PROVIDER_PATH` and run on the
//! simulated NIC, and the structures of [`uet_fi::abi`] are checked against the headers.
//!
//! These need a C compiler and libfabric's development files (`apt-get install -y
//! libfabric-dev`, which `.ci/run` installs). Where they are missing the tests say so and
//! pass, except under `CI=true`, where they fail.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether the C side can be built here; `false` (and a note) when it cannot and this is not
/// CI.
fn have_toolchain() -> bool {
    let header = Path::new("/usr/include/rdma/fabric.h").exists();
    let cc = Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if header && cc {
        return true;
    }
    let why = format!(
        "needs a C compiler ({}) and libfabric-dev's headers ({})",
        if cc { "found" } else { "missing" },
        if header { "found" } else { "missing" }
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    eprintln!("skipped: {why}; apt-get install -y gcc libfabric-dev");
    false
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uet-provider-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The provider library cargo built beside this test (`target/<profile>/libuet_fi.so`),
/// linked into `dir` as `libuet-fi.so`, the name libfabric looks for.
fn provider_dir(dir: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let lib = [
        deps.join("libuet_fi.so"),
        deps.parent().unwrap().join("libuet_fi.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("libuet_fi.so not built beside {}", exe.display()));
    let prov = dir.join("prov");
    std::fs::create_dir_all(&prov).unwrap();
    std::os::unix::fs::symlink(&lib, prov.join("libuet-fi.so")).unwrap();
    prov
}

/// Compile `source` (in `tests/c`) into `dir`, with `extra` arguments.
fn compile(source: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(source);
    let out = dir.join(source.trim_end_matches(".c"));
    let o = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc {source}:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Run a compiled program with the provider on the simulated NIC.
fn run(program: &Path, prov: &Path) -> String {
    run_with(program, prov, &[]).0
}

/// [`run`] with more environment variables: its standard output and error.
fn run_with(program: &Path, prov: &Path, env: &[(&str, &str)]) -> (String, String) {
    let o = Command::new(program)
        .envs(env.iter().copied())
        .env("FI_PROVIDER_PATH", prov)
        .env("FI_PROVIDER", "uet")
        .env_remove("FI_UET_DEVICE")
        .env_remove("FI_UET_SIM_ADDR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success(),
        "{} failed ({}):\n{stdout}\n{stderr}",
        program.display(),
        o.status,
    );
    (stdout, stderr)
}

/// Compile `source`, run it with the provider on the simulated NIC, and check that its
/// output holds each of `lines` and ends with "ok".
fn run_program(source: &str, lines: &[&str]) {
    if !have_toolchain() {
        return;
    }
    let dir = scratch(source.trim_end_matches(".c"));
    let prov = provider_dir(&dir);
    let program = compile(source, &dir, &["-lfabric"]);
    let out = run(&program, &prov);
    for line in lines {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(out.ends_with("ok\n"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_libfabric_application_runs_every_av_call_on_the_nic_through_the_provider() {
    run_program(
        "av.c",
        &[
            "getinfo: uet uet_10.0.0.1",
            "no layered providers: ok",
            "insert: 2 3 notavail",
            "insertsym: last",
            "binary AV: ok",
            "string AV: ok",
            "node and service: ok",
            "named AV: ok",
            "event AV: ok",
            "AV sets: ok",
        ],
    );
}

#[test]
fn two_endpoints_exchange_messages_by_fi_addr_through_the_provider() {
    run_program(
        "msg.c",
        &[
            "message: hello from 0",
            "tagged: ok",
            "named AV: ok",
            "500 messages: ok",
            "largest message: 1048576 bytes ok",
            "multi-receive buffer: ok",
        ],
    );
}

#[test]
fn a_libfabric_application_counts_completions_with_fi_cntr_through_the_provider() {
    run_program(
        "cntr.c",
        &[
            "counted: 9 sent, 9 received",
            "set, add, adderr, seterr, wait: ok",
        ],
    );
}

#[test]
fn a_libfabric_application_sleeps_in_epoll_on_fi_wait_fd_descriptors_through_the_provider() {
    run_program(
        "waitfd.c",
        &[
            "eq: connection request: ok",
            "eq: fi_eq_write from another thread: ok",
            "cntr: completed receives: ok",
            "cntr: fi_cntr_add from another thread: ok",
        ],
    );
}

#[test]
fn a_libfabric_application_names_each_receive_context_of_a_scalable_endpoint_with_fi_rx_addr() {
    run_program(
        "sep.c",
        &[
            "contexts: 2 tx, 4 rx",
            "scalable endpoint: ok",
            "delivered per context: ok",
            "transmit contexts: ok",
        ],
    );
}

/// fabtests' `scalable_ep` order: each context bound and enabled before the scalable
/// endpoint, receives posted on the enabled receive contexts before `fi_enable(sep)` (and,
/// on the other scalable endpoint, after), a message to each receive context both ways;
/// then a receive context closed and opened again on its index.
#[test]
fn scalable_endpoints_set_up_in_fabtests_order_take_receives_before_fi_enable_of_the_sep() {
    run_program(
        "sep_order.c",
        &[
            "server: set up, receives posted before fi_enable(sep)",
            "client: set up, receives posted after fi_enable(sep)",
            "addresses exchanged: ok",
            "client to every receive context of the server: ok",
            "server to every receive context of the client: ok",
            "receive context opened again: ok",
        ],
    );
}

#[test]
fn with_rust_log_set_the_provider_logs_why_a_call_failed() {
    if !have_toolchain() {
        return;
    }
    let dir = scratch("log");
    let prov = provider_dir(&dir);
    let program = compile("av.c", &dir, &["-lfabric"]);
    let (out, err) = run_with(&program, &prov, &[("RUST_LOG", "uet_fi=debug")]);
    assert!(out.ends_with("ok\n"), "{out}");
    // av.c's fi_av_insert with FI_SYNC_ERR and no status array is -FI_EINVAL; the reason is
    // the provider's to tell.
    assert!(
        err.lines().any(|l| l.contains("fi_av_insert")
            && l.contains("FI_EINVAL")
            && l.contains("FI_SYNC_ERR")),
        "no reason for fi_av_insert's -FI_EINVAL on stderr:\n{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fi_connect` to a listener that never answers ends, once `FI_UET_CONNECT_TIMEOUT` has
/// passed and not before, with an `FI_ETIMEDOUT` error entry of the endpoint read with
/// `fi_eq_readerr`; the endpoint is left refused.
#[test]
fn a_libfabric_application_sees_an_unanswered_fi_connect_time_out_through_the_provider() {
    if !have_toolchain() {
        return;
    }
    let dir = scratch("connect-timeout");
    let prov = provider_dir(&dir);
    let program = compile("connect_timeout.c", &dir, &["-lfabric"]);
    let o = Command::new(&program)
        .arg("300")
        .env("FI_UET_CONNECT_TIMEOUT", "300")
        .env("FI_PROVIDER_PATH", &prov)
        .env("FI_PROVIDER", "uet")
        .env_remove("FI_UET_DEVICE")
        .env_remove("FI_UET_SIM_ADDR")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "connect_timeout failed ({}):\n{out}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("timed out: "), "{out}");
    assert!(out.ends_with("ok\n"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The standard output of `child`, a spawned process with piped output, once it has exited;
/// it must have succeeded (else its output and errors name `what` went wrong).
fn succeeded(child: std::process::Child, what: &str) -> String {
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what}: {}:\n{out}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Two NICs (10.0.0.1 and 10.0.0.2) of one simulated fabric, each served over vfio-user at
/// `dir/<prefix>nic<i>.sock` to one client, as `uetctl sim serve` serves them: the fabric,
/// and each NIC's socket path and serving thread (which ends when its client goes).
type Served = Vec<(
    PathBuf,
    std::thread::JoinHandle<Result<(), uet_sim::SimError>>,
)>;

fn serve_two_nics(dir: &Path, prefix: &str) -> (uet_sim::Fabric, Served) {
    let fabric = uet_sim::Fabric::new();
    let served = (0..2u8)
        .map(|i| {
            let f = fabric
                .add_nic(uet_sim::NicConfig::new(std::net::IpAddr::from([
                    10,
                    0,
                    0,
                    1 + i,
                ])))
                .unwrap();
            let path = dir.join(format!("{prefix}nic{i}.sock"));
            let server =
                std::sync::Arc::new(uet_sim::vfio_user::VfioUserServer::bind(f, &path).unwrap());
            (path, std::thread::spawn(move || server.serve_one()))
        })
        .collect();
    (fabric, served)
}

/// Two processes, each on its own NIC of one simulated fabric served over vfio-user (as
/// `uetctl sim serve` serves it), ping-pong messages addressed by `fi_addr_t`.
#[test]
fn two_processes_on_two_nics_over_vfio_user_ping_pong_through_the_provider() {
    if !have_toolchain() {
        return;
    }
    let dir = scratch("pingpong");
    let prov = provider_dir(&dir);
    let program = compile("pingpong.c", &dir, &["-lfabric"]);
    let (_fabric, servers) = serve_two_nics(&dir, "");
    let rounds = "200";
    let children: Vec<_> = ["server", "client"]
        .iter()
        .enumerate()
        .map(|(i, role)| {
            Command::new(&program)
                .args([role, dir.to_str().unwrap(), rounds])
                .env("FI_PROVIDER_PATH", &prov)
                .env("FI_PROVIDER", "uet")
                .env(
                    "FI_UET_DEVICE",
                    format!("vfio-user:{}", servers[i].0.display()),
                )
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (child, nic) in children.into_iter().zip(["uet_10.0.0.1", "uet_10.0.0.2"]) {
        let out = succeeded(child, nic);
        assert!(out.contains(&format!("on {nic}")), "{out}");
        assert!(out.contains("200 rounds") && out.ends_with("ok\n"), "{out}");
    }
    // Each NIC served its process until it closed, and was released.
    for (_, thread) in servers {
        thread.join().unwrap().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A libfabric application forks a child that closes every object it inherited and exits
/// with `exit(3)`, running libfabric's cleanup, and the provider's, in the child: the
/// parent's endpoints and AV work on, on a NIC served over vfio-user whose one socket parent
/// and child share. (A child whose copies drove the NIC would have destroyed the parent's
/// endpoints and AV table and reset the function.)
#[test]
fn a_forked_child_that_closes_what_it_inherited_and_exits_leaves_the_parents_nic_working() {
    if !have_toolchain() {
        return;
    }
    let out = run_on_a_served_nic("fork", "fork.c", |_| {});
    assert!(out.contains("message: before the fork"), "{out}");
    assert!(out.contains("child closed its copies and exited"), "{out}");
    assert!(out.contains("message: after the child"), "{out}");
    assert!(out.ends_with("ok\n"), "{out}");
}

/// Compile `source` into a scratch directory named `test`, run it with the provider on one
/// NIC (10.0.0.1, set up by `configure`) served over vfio-user from this process, and give
/// its output once it has succeeded and the NIC has served it to the end.
fn run_on_a_served_nic(
    test: &str,
    source: &str,
    configure: impl FnOnce(&mut uet_sim::NicConfig),
) -> String {
    let dir = scratch(test);
    let prov = provider_dir(&dir);
    let program = compile(source, &dir, &["-lfabric"]);
    let fabric = uet_sim::Fabric::new();
    let mut cfg = uet_sim::NicConfig::new(std::net::IpAddr::from([10, 0, 0, 1]));
    configure(&mut cfg);
    let nic = fabric.add_nic(cfg).unwrap();
    let path = dir.join("nic.sock");
    let server = std::sync::Arc::new(uet_sim::vfio_user::VfioUserServer::bind(nic, &path).unwrap());
    let serving = std::thread::spawn(move || server.serve_one());
    let child = Command::new(&program)
        .env("FI_PROVIDER_PATH", &prov)
        .env("FI_PROVIDER", "uet")
        .env("FI_UET_DEVICE", format!("vfio-user:{}", path.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = succeeded(child, source);
    serving.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// On a NIC of host interface 1.13, without RECV_CANCEL, a closed receive context's receive
/// stays posted: `fi_rx_context` of its index is `-FI_EOPBADSTATE`, which says retrying does
/// not help (not `-FI_EBUSY`), until a message has taken the receive.
#[test]
fn without_recv_cancel_a_closed_receive_index_is_refused_as_no_retry_opens_it() {
    if !have_toolchain() {
        return;
    }
    let out = run_on_a_served_nic("sep-old", "sep_reopen_old.c", |cfg| {
        cfg.interface_minor = uet_driver::uet_regs::since::RECV_CANCEL - 1;
    });
    assert!(
        out.contains("closed index with a receive posted: -FI_EOPBADSTATE"),
        "{out}"
    );
    assert!(out.ends_with("ok\n"), "{out}");
}

/// A libfabric application started with `UET_NIC_TELEMETRY=1` answers on the driver's
/// telemetry socket, as `uetctl ps`, `av dump --pid` and `ep list --pid` ask it: its AV's NIC
/// table, read back from the NIC while it runs, holds what it inserted, its endpoint
/// translates through that table, and the `fi_cq_sread` it made holds the endpoint's MSI-X
/// vector.
#[test]
fn a_libfabric_application_is_inspected_live_through_its_telemetry_socket() {
    use std::io::{BufRead, BufReader, Write};
    if !have_toolchain() {
        return;
    }
    let dir = scratch("live");
    let prov = provider_dir(&dir);
    let program = compile("live.c", &dir, &["-lfabric"]);
    let sockets = dir.join("telemetry");
    std::fs::create_dir_all(&sockets).unwrap();
    let mut child = Command::new(&program)
        .env("FI_PROVIDER_PATH", &prov)
        .env("FI_PROVIDER", "uet")
        .env_remove("FI_UET_DEVICE")
        .env(uet_driver::telemetry::ENABLE_ENV, "1")
        .env(uet_driver::telemetry::DIR_ENV, &sockets)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");

    let path = uet_driver::telemetry::socket_path(&sockets, child.id());
    let stream = uet_driver::telemetry::connect(&path, std::time::Duration::from_secs(10)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut greeting = String::new();
    reader.read_line(&mut greeting).unwrap();
    let greeting: serde_json::Value = serde_json::from_str(&greeting).unwrap();
    assert_eq!(greeting["pid"], child.id());
    assert_eq!(greeting["nics"], 1);
    let mut ask = |request: serde_json::Value| -> serde_json::Value {
        writeln!(writer, "{request}").unwrap();
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
        v.get("ok")
            .cloned()
            .unwrap_or_else(|| panic!("{request}: {v}"))
    };

    let tables = ask(serde_json::json!({"cmd": "av_list", "nic": 0}));
    let tables = tables["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 1, "{tables:?}");
    assert_eq!(tables[0]["capacity"], 16);
    let table = tables[0]["table"].clone();
    let dump = ask(serde_json::json!({"cmd": "av_dump", "nic": 0, "table": table}));
    let indices: Vec<u64> = dump["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[0].as_u64().unwrap())
        .collect();
    // The three single peers at 0, 1 and 2; the range from 3.
    assert!(indices.starts_with(&[0, 1, 2, 3]), "{indices:?}");
    let endpoints = ask(serde_json::json!({"cmd": "ep_list", "nic": 0}));
    let endpoints = endpoints["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    assert_eq!(endpoints[0]["av_table"], table);
    assert_eq!(endpoints[0]["fabric_addr"], "10.0.0.1");
    // Its fi_cq_sread slept on the endpoint's MSI-X vector, not by reading the ring in a loop.
    assert!(endpoints[0]["msix_vector"].is_u64(), "{:?}", endpoints[0]);

    writeln!(child.stdin.take().unwrap()).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(rest, "ok\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether the TCP `port` is listening on this host (read from `/proc/net/tcp`, without
/// connecting to it).
fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| a.ends_with(hex.trim_end()))
                    && l.split_whitespace().nth(3) == Some("0A")
            })
        })
    })
}

/// libfabric's own `fi_pingpong` (package libfabric-bin), unchanged, between two processes on
/// two NICs of one simulated fabric served over vfio-user: its untagged and tagged modes, on
/// reliable (`-e rdm`), datagram (`-e dgram`, its default) and connected (`-e msg`: a
/// passive endpoint, `FI_CONNREQ`, `fi_accept`, `fi_connect`, `FI_CONNECTED` on both sides)
/// endpoints, with its data checks, through this provider.
/// libfabric's `fi_info` tool with the provider on the simulated NIC: its standard output
/// and error. `None` where the tool is missing (libfabric-bin), which CI installs.
fn fi_info(args: &[&str], env: &[(&str, &str)]) -> Option<(String, String)> {
    if Command::new("fi_info").arg("--version").output().is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "needs fi_info (libfabric-bin)"
        );
        eprintln!("skipped: needs fi_info; apt-get install -y libfabric-bin");
        return None;
    }
    let dir = scratch(&format!("fi-info-{}", args.join("").replace('-', "")));
    let prov = provider_dir(&dir);
    let o = Command::new("fi_info")
        .args(args)
        .env("FI_PROVIDER_PATH", &prov)
        .env_remove("FI_UET_DEVICE")
        .env_remove("FI_UET_SIM_ADDR")
        .env_remove("RUST_LOG")
        .env_remove("FI_LOG_LEVEL")
        .env_remove("FI_LOG_PROV")
        .env_remove("FI_LOG_SUBSYS")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Some((
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

/// `fi_info -e` lists the provider's environment variables with every provider's: the
/// provider defines them with libfabric's `fi_param_define`.
#[test]
fn fi_info_lists_the_providers_variables() {
    let Some((out, _)) = fi_info(&["-e"], &[]) else {
        return;
    };
    for var in ["FI_UET_DEVICE", "FI_UET_SIM_ADDR", "FI_UET_CONNECT_TIMEOUT"] {
        assert!(out.contains(&format!("# {var}: String")), "{var}:\n{out}");
    }
    assert!(out.contains("# uet: The NIC: sim (the default)"), "{out}");
}

/// The provider logs through libfabric's log: `FI_LOG_LEVEL` turns its lines on, in
/// libfabric's format, one a line, under the provider's name and the subsystem of the
/// module; `FI_LOG_PROV` naming another provider turns them off, as does no `FI_LOG_LEVEL`.
#[test]
fn the_providers_log_is_libfabrics_and_its_variables_pick_it() {
    let Some((_, err)) = fi_info(&["-p", "uet"], &[("FI_LOG_LEVEL", "info")]) else {
        return;
    };
    let open = err
        .lines()
        .find(|l| l.contains("uet provider: NIC open"))
        .unwrap_or_else(|| panic!("no line of the NIC's open:\n{err}"));
    assert!(open.starts_with("libfabric:"), "{open}");
    assert!(
        open.contains("::uet:fabric:uet_fi::device():") && open.contains("<info> "),
        "{open}"
    );
    assert!(
        open.ends_with("spec=Sim(10.0.0.1)"),
        "one event a line: {open}"
    );
    assert!(
        !err.lines()
            .any(|l| l.contains(":uet:") && l.contains("<debug>")),
        "info shows no debug line:\n{err}"
    );
    for env in [
        &[("FI_LOG_LEVEL", "debug"), ("FI_LOG_PROV", "tcp")][..],
        &[][..],
    ] {
        let (_, err) = fi_info(&["-p", "uet"], env).unwrap();
        assert!(!err.contains(":uet:"), "{env:?}:\n{err}");
    }
}

#[test]
fn the_stock_fi_pingpong_runs_over_the_provider_between_two_nics() {
    if !have_toolchain() {
        return;
    }
    let have = Command::new("fi_pingpong").arg("-h").output().is_ok();
    if !have {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "needs fi_pingpong (libfabric-bin)"
        );
        eprintln!("skipped: needs fi_pingpong; apt-get install -y libfabric-bin");
        return;
    }
    let dir = scratch("fi-pingpong");
    let prov = provider_dir(&dir);
    let runs = [
        ("rdm", "msg"),
        ("rdm", "tagged"),
        ("dgram", "msg"),
        ("dgram", "tagged"),
        ("msg", "msg"),
        ("msg", "tagged"),
    ];
    for (round, (ep_type, mode)) in runs.into_iter().enumerate() {
        let (_fabric, servers) = serve_two_nics(&dir, &format!("{ep_type}-{mode}-"));
        // A control port of this test's own.
        let port = 20000 + (std::process::id() % 20000) as u16 + round as u16;
        let run = |nic: &Path, args: &[&str]| {
            Command::new("fi_pingpong")
                .args(["-p", "uet", "-e", ep_type, "-I", "50", "-c", "-m", mode])
                .args(args)
                .env("FI_PROVIDER_PATH", &prov)
                .env("FI_UET_DEVICE", format!("vfio-user:{}", nic.display()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let port_s = port.to_string();
        let server = run(&servers[0].0, &["-B", &port_s]);
        let start = std::time::Instant::now();
        while !listening(port) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "the server never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let client = run(&servers[1].0, &["-P", &port_s, "127.0.0.1"]);
        for (who, child) in [("client", client), ("server", server)] {
            let out = succeeded(child, &format!("fi_pingpong {ep_type} {mode} {who}"));
            // Its table: one line per size up to max_msg_size (a datagram's is the MTU,
            // 4 KiB), 50 sent and 50 acknowledged.
            assert!(
                out.lines()
                    .any(|l| l.starts_with("64 ") && l.contains("=50")),
                "{out}"
            );
            assert!(out.lines().any(|l| l.starts_with("4k ")), "{out}");
        }
        for (_, thread) in servers {
            thread.join().unwrap().unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every structure of `uet_fi::abi`: its size, and each field's offset, as C has them.
#[test]
fn the_abi_structures_match_the_system_libfabric_headers() {
    if !have_toolchain() {
        return;
    }
    use core::mem::{offset_of, size_of};
    use uet_fi::abi::*;
    let mut c = String::from(
        "#include <stddef.h>\n#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n#include <rdma/fi_eq.h>\n#include <rdma/fi_collective.h>\n#include <rdma/fi_endpoint.h>\n\
         #include <rdma/fi_cm.h>\n#include <rdma/fi_rma.h>\n#include <rdma/fi_tagged.h>\n\
         #include <rdma/fi_atomic.h>\n#include <sys/uio.h>\n\
         #include <rdma/providers/fi_prov.h>\n",
    );
    macro_rules! layout {
        ($c:literal, $rust:ty { $($cf:ident: $rf:ident),* $(,)? }) => {{
            c += &format!(
                "_Static_assert(sizeof(struct {}) == {}, \"size of {}\");\n",
                $c, size_of::<$rust>(), $c
            );
            $(c += &format!(
                "_Static_assert(offsetof(struct {}, {}) == {}, \"{}.{}\");\n",
                $c, stringify!($cf), offset_of!($rust, $rf), $c, stringify!($cf)
            );)*
        }};
    }
    layout!("fi_context", FiContext { internal: internal });
    layout!(
        "fid",
        Fid {
            fclass: fclass,
            context: context,
            ops: ops
        }
    );
    layout!(
        "fi_ops",
        FiOps {
            size: size,
            close: close,
            bind: bind,
            control: control,
            ops_open: ops_open,
            tostr: tostr,
            ops_set: ops_set,
        }
    );
    layout!(
        "fi_tx_attr",
        FiTxAttr {
            caps: caps,
            mode: mode,
            op_flags: op_flags,
            msg_order: msg_order,
            comp_order: comp_order,
            inject_size: inject_size,
            size: size,
            iov_limit: iov_limit,
            rma_iov_limit: rma_iov_limit,
            tclass: tclass,
        }
    );
    layout!(
        "fi_rx_attr",
        FiRxAttr {
            caps: caps,
            mode: mode,
            op_flags: op_flags,
            msg_order: msg_order,
            comp_order: comp_order,
            total_buffered_recv: total_buffered_recv,
            size: size,
            iov_limit: iov_limit,
        }
    );
    layout!("fi_ep_attr", FiEpAttr {
        type: ep_type, protocol: protocol, protocol_version: protocol_version,
        max_msg_size: max_msg_size, msg_prefix_size: msg_prefix_size,
        max_order_raw_size: max_order_raw_size, max_order_war_size: max_order_war_size,
        max_order_waw_size: max_order_waw_size, mem_tag_format: mem_tag_format,
        tx_ctx_cnt: tx_ctx_cnt, rx_ctx_cnt: rx_ctx_cnt, auth_key_size: auth_key_size,
        auth_key: auth_key,
    });
    layout!(
        "fi_domain_attr",
        FiDomainAttr {
            domain: domain,
            name: name,
            threading: threading,
            control_progress: control_progress,
            data_progress: data_progress,
            resource_mgmt: resource_mgmt,
            av_type: av_type,
            mr_mode: mr_mode,
            mr_key_size: mr_key_size,
            cq_data_size: cq_data_size,
            cq_cnt: cq_cnt,
            ep_cnt: ep_cnt,
            tx_ctx_cnt: tx_ctx_cnt,
            rx_ctx_cnt: rx_ctx_cnt,
            max_ep_tx_ctx: max_ep_tx_ctx,
            max_ep_rx_ctx: max_ep_rx_ctx,
            max_ep_stx_ctx: max_ep_stx_ctx,
            max_ep_srx_ctx: max_ep_srx_ctx,
            cntr_cnt: cntr_cnt,
            mr_iov_limit: mr_iov_limit,
            caps: caps,
            mode: mode,
            auth_key: auth_key,
            auth_key_size: auth_key_size,
            max_err_data: max_err_data,
            mr_cnt: mr_cnt,
            tclass: tclass,
        }
    );
    layout!(
        "fi_fabric_attr",
        FiFabricAttr {
            fabric: fabric,
            name: name,
            prov_name: prov_name,
            prov_version: prov_version,
            api_version: api_version,
        }
    );
    layout!(
        "fi_info",
        FiInfo {
            next: next,
            caps: caps,
            mode: mode,
            addr_format: addr_format,
            src_addrlen: src_addrlen,
            dest_addrlen: dest_addrlen,
            src_addr: src_addr,
            dest_addr: dest_addr,
            handle: handle,
            tx_attr: tx_attr,
            rx_attr: rx_attr,
            ep_attr: ep_attr,
            domain_attr: domain_attr,
            fabric_attr: fabric_attr,
            nic: nic,
        }
    );
    layout!(
        "fi_provider",
        FiProvider {
            version: version,
            fi_version: fi_version,
            context: context,
            name: name,
            getinfo: getinfo,
            fabric: fabric,
            cleanup: cleanup,
        }
    );
    layout!(
        "fi_ops_fabric",
        FiOpsFabric {
            size: size,
            domain: domain,
            passive_ep: passive_ep,
            eq_open: eq_open,
            wait_open: wait_open,
            trywait: trywait,
            domain2: domain2,
        }
    );
    layout!(
        "fid_fabric",
        FidFabric {
            fid: fid,
            ops: ops,
            api_version: api_version
        }
    );
    layout!(
        "fi_ops_domain",
        FiOpsDomain {
            size: size,
            av_open: av_open,
            cq_open: cq_open,
            endpoint: endpoint,
            scalable_ep: scalable_ep,
            cntr_open: cntr_open,
            poll_open: poll_open,
            stx_ctx: stx_ctx,
            srx_ctx: srx_ctx,
            query_atomic: query_atomic,
            query_collective: query_collective,
            endpoint2: endpoint2,
        }
    );
    layout!(
        "fi_ops_mr",
        FiOpsMr {
            size: size,
            reg: reg,
            regv: regv,
            regattr: regattr
        }
    );
    layout!(
        "fid_domain",
        FidDomain {
            fid: fid,
            ops: ops,
            mr: mr
        }
    );
    layout!("fi_av_attr", FiAvAttr {
        type: av_type, rx_ctx_bits: rx_ctx_bits, count: count, ep_per_node: ep_per_node,
        name: name, map_addr: map_addr, flags: flags,
    });
    layout!(
        "fi_ops_av",
        FiOpsAv {
            size: size,
            insert: insert,
            insertsvc: insertsvc,
            insertsym: insertsym,
            remove: remove,
            lookup: lookup,
            straddr: straddr,
            av_set: av_set,
        }
    );
    layout!("fid_av", FidAv { fid: fid, ops: ops });
    layout!(
        "fi_eq_attr",
        FiEqAttr {
            size: size,
            flags: flags,
            wait_obj: wait_obj,
            signaling_vector: signaling_vector,
            wait_set: wait_set,
        }
    );
    layout!(
        "fi_eq_entry",
        FiEqEntry {
            fid: fid,
            context: context,
            data: data
        }
    );
    layout!(
        "fi_eq_cm_entry",
        FiEqCmEntry {
            fid: fid,
            info: info
        }
    );
    layout!(
        "fi_mutex_cond",
        FiMutexCond {
            mutex: mutex,
            cond: cond
        }
    );
    layout!(
        "fid_pep",
        FidPep {
            fid: fid,
            ops: ops,
            cm: cm
        }
    );
    layout!(
        "fi_eq_err_entry",
        FiEqErrEntry {
            fid: fid,
            context: context,
            data: data,
            err: err,
            prov_errno: prov_errno,
            err_data: err_data,
            err_data_size: err_data_size,
        }
    );
    layout!(
        "fi_ops_eq",
        FiOpsEq {
            size: size,
            read: read,
            readerr: readerr,
            write: write,
            sread: sread,
            strerror: strerror,
        }
    );
    layout!("fid_eq", FidEq { fid: fid, ops: ops });
    layout!(
        "fi_av_set_attr",
        FiAvSetAttr {
            count: count,
            start_addr: start_addr,
            end_addr: end_addr,
            stride: stride,
            comm_key_size: comm_key_size,
            comm_key: comm_key,
            flags: flags,
        }
    );
    layout!(
        "fi_ops_av_set",
        FiOpsAvSet {
            size: size,
            set_union: set_union,
            intersect: intersect,
            diff: diff,
            insert: insert,
            remove: remove,
            addr: addr,
        }
    );
    layout!("fid_av_set", FidAvSet { fid: fid, ops: ops });
    layout!(
        "iovec",
        IoVec {
            iov_base: iov_base,
            iov_len: iov_len
        }
    );
    layout!(
        "fi_msg",
        FiMsg {
            msg_iov: msg_iov,
            desc: desc,
            iov_count: iov_count,
            addr: addr,
            context: context,
            data: data,
        }
    );
    layout!(
        "fi_ops_ep",
        FiOpsEp {
            size: size,
            cancel: cancel,
            getopt: getopt,
            setopt: setopt,
            tx_ctx: tx_ctx,
            rx_ctx: rx_ctx,
            rx_size_left: rx_size_left,
            tx_size_left: tx_size_left,
        }
    );
    layout!(
        "fi_ops_cm",
        FiOpsCm {
            size: size,
            setname: setname,
            getname: getname,
            getpeer: getpeer,
            connect: connect,
            listen: listen,
            accept: accept,
            reject: reject,
            shutdown: shutdown,
            join: join,
        }
    );
    layout!(
        "fi_ops_msg",
        FiOpsMsg {
            size: size,
            recv: recv,
            recvv: recvv,
            recvmsg: recvmsg,
            send: send,
            sendv: sendv,
            sendmsg: sendmsg,
            inject: inject,
            senddata: senddata,
            injectdata: injectdata,
        }
    );
    layout!("fi_ops_rma", FiOpsUnsupported<9> {});
    layout!(
        "fi_ops_tagged",
        FiOpsTagged {
            size: size,
            recv: recv,
            recvv: recvv,
            recvmsg: recvmsg,
            send: send,
            sendv: sendv,
            sendmsg: sendmsg,
            inject: inject,
            senddata: senddata,
            injectdata: injectdata,
        }
    );
    layout!(
        "fi_msg_tagged",
        FiMsgTagged {
            msg_iov: msg_iov,
            desc: desc,
            iov_count: iov_count,
            addr: addr,
            tag: tag,
            ignore: ignore,
            context: context,
            data: data,
        }
    );
    layout!("fi_ops_atomic", FiOpsUnsupported<13> {});
    layout!("fi_ops_collective", FiOpsUnsupported<11> {});
    layout!(
        "fid_ep",
        FidEp {
            fid: fid,
            ops: ops,
            cm: cm,
            msg: msg,
            rma: rma,
            tagged: tagged,
            atomic: atomic,
            collective: collective,
        }
    );
    layout!(
        "fi_cq_attr",
        FiCqAttr {
            size: size,
            flags: flags,
            format: format,
            wait_obj: wait_obj,
            signaling_vector: signaling_vector,
            wait_cond: wait_cond,
            wait_set: wait_set,
        }
    );
    layout!(
        "fi_cq_tagged_entry",
        FiCqTaggedEntry {
            op_context: op_context,
            flags: flags,
            len: len,
            buf: buf,
            data: data,
            tag: tag,
        }
    );
    layout!(
        "fi_cq_err_entry",
        FiCqErrEntry {
            op_context: op_context,
            flags: flags,
            len: len,
            buf: buf,
            data: data,
            tag: tag,
            olen: olen,
            err: err,
            prov_errno: prov_errno,
            err_data: err_data,
            err_data_size: err_data_size,
        }
    );
    layout!(
        "fi_ops_cq",
        FiOpsCq {
            size: size,
            read: read,
            readfrom: readfrom,
            readerr: readerr,
            sread: sread,
            sreadfrom: sreadfrom,
            signal: signal,
            strerror: strerror,
        }
    );
    layout!("fid_cq", FidCq { fid: fid, ops: ops });
    layout!(
        "fi_cntr_attr",
        FiCntrAttr {
            events: events,
            wait_obj: wait_obj,
            wait_set: wait_set,
            flags: flags,
        }
    );
    layout!(
        "fi_ops_cntr",
        FiOpsCntr {
            size: size,
            read: read,
            readerr: readerr,
            add: add,
            set: set,
            wait: wait,
            adderr: adderr,
            seterr: seterr,
        }
    );
    layout!("fid_cntr", FidCntr { fid: fid, ops: ops });
    // The other CQ formats are the tagged entry's first fields.
    c += "_Static_assert(sizeof(struct fi_cq_entry) == 8, \"fi_cq_entry\");\n\
          _Static_assert(sizeof(struct fi_cq_msg_entry) == 24, \"fi_cq_msg_entry\");\n\
          _Static_assert(sizeof(struct fi_cq_data_entry) == 40, \"fi_cq_data_entry\");\n";
    // The constants, too.
    for (name, value) in [
        (
            "FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)",
            u64::from(FI_PROVIDER_API),
        ),
        ("FI_CLASS_FABRIC", FI_CLASS_FABRIC as u64),
        ("FI_CLASS_DOMAIN", FI_CLASS_DOMAIN as u64),
        ("FI_CLASS_AV", FI_CLASS_AV as u64),
        ("FI_CLASS_EQ", FI_CLASS_EQ as u64),
        ("FI_CLASS_AV_SET", FI_CLASS_AV_SET as u64),
        ("FI_CLASS_EP", FI_CLASS_EP as u64),
        ("FI_CLASS_CQ", FI_CLASS_CQ as u64),
        ("FI_CLASS_CNTR", FI_CLASS_CNTR as u64),
        ("FI_CNTR_EVENTS_COMP", FI_CNTR_EVENTS_COMP as u64),
        ("FI_READ", FI_READ),
        ("FI_WRITE", FI_WRITE),
        ("FI_REMOTE_READ", FI_REMOTE_READ),
        ("FI_REMOTE_WRITE", FI_REMOTE_WRITE),
        ("FI_CLASS_PEP", FI_CLASS_PEP as u64),
        ("FI_CLASS_CONNREQ", FI_CLASS_CONNREQ as u64),
        ("FI_ENABLE", FI_ENABLE as u64),
        ("FI_TRANSMIT", FI_TRANSMIT),
        ("FI_RECV", FI_RECV),
        ("FI_SELECTIVE_COMPLETION", FI_SELECTIVE_COMPLETION),
        ("FI_COMPLETION", FI_COMPLETION),
        ("FI_INJECT", FI_INJECT),
        ("FI_REMOTE_CQ_DATA", FI_REMOTE_CQ_DATA),
        ("FI_MSG", FI_MSG),
        ("FI_TAGGED", FI_TAGGED),
        ("FI_SEND", FI_SEND),
        ("FI_SOURCE", FI_SOURCE_CAP),
        ("FI_ORDER_SAS", FI_ORDER_SAS),
        ("FI_CQ_FORMAT_UNSPEC", FI_CQ_FORMAT_UNSPEC as u64),
        ("FI_CQ_FORMAT_CONTEXT", FI_CQ_FORMAT_CONTEXT as u64),
        ("FI_CQ_FORMAT_MSG", FI_CQ_FORMAT_MSG as u64),
        ("FI_CQ_FORMAT_DATA", FI_CQ_FORMAT_DATA as u64),
        ("FI_CQ_FORMAT_TAGGED", FI_CQ_FORMAT_TAGGED as u64),
        ("FI_WAIT_NONE", FI_WAIT_NONE as u64),
        ("FI_WAIT_UNSPEC", FI_WAIT_UNSPEC as u64),
        ("FI_WAIT_MUTEX_COND", FI_WAIT_MUTEX_COND as u64),
        ("FI_WAIT_YIELD", FI_WAIT_YIELD as u64),
        ("FI_WAIT_FD", FI_WAIT_FD as u64),
        ("FI_GETWAIT", FI_GETWAIT as u64),
        ("FI_GETWAITOBJ", FI_GETWAITOBJ as u64),
        ("FI_EP_RDM", FI_EP_RDM as u64),
        ("FI_SHARED_CONTEXT", FI_SHARED_CONTEXT as u64),
        ("FI_THREAD_SAFE", FI_THREAD_SAFE as u64),
        ("FI_PROGRESS_AUTO", FI_PROGRESS_AUTO as u64),
        ("FI_RM_ENABLED", FI_RM_ENABLED as u64),
        ("FI_ADDR_STR", u64::from(FI_ADDR_STR)),
        ("FI_MR_PROV_KEY", FI_MR_PROV_KEY as u64),
        ("FI_SOURCE", uet_fi::info::FI_SOURCE),
        ("FI_SHARED_AV", uet_av::FI_SHARED_AV),
        ("FI_AV_USER_ID", uet_av::FI_AV_USER_ID),
    ] {
        c += &format!("_Static_assert((unsigned long long)({name}) == {value}ULL, \"{name}\");\n");
    }
    let dir = scratch("layout");
    let src = dir.join("layout.c");
    std::fs::write(&src, &c).unwrap();
    let o = Command::new("cc")
        .args(["-std=c11", "-fsyntax-only"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the ABI differs from the headers:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
