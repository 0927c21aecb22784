//! The driver's telemetry socket and uetctl's client of it, in one process: what a live dump
//! reads is what the NIC holds, page by page; every bad request gets a fabric errno and
//! leaves the socket serving; the socket never keeps a NIC or an AV table alive.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use uet_av::{job_id_to_auth_key, AvAttr, FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID};
use uet_driver::backend::sim::SimDevice;
use uet_driver::telemetry::{self, Telemetry, AV_DUMP_MAX, MAX_REQUEST};
use uet_driver::Nic;
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::UetAddress;
use uet_sim::{Fabric, NicConfig};
use uetctl::dump;
use uetctl::live::{self, Client, Target};

fn nic(fabric: &Fabric, ip: &str) -> Nic {
    let f = fabric.add_nic(NicConfig::new(ip.parse().unwrap())).unwrap();
    Nic::open(Arc::new(SimDevice::new(f))).unwrap()
}

/// A fabric, a NIC of fabric address `ip` on it, and a telemetry socket named `test` that
/// serves the NIC (dropped before the NIC and the fabric).
fn serving_one_nic(ip: &str, test: &str) -> (Fabric, Nic, PathBuf, Telemetry) {
    let fabric = Fabric::new();
    let nic0 = nic(&fabric, ip);
    let path = socket(test);
    let t = Telemetry::bind(&path).unwrap();
    t.add_nic(&nic0);
    (fabric, nic0, path, t)
}

/// `av_list`'s tables, each of which must carry a serial, with the serial left out (its value
/// is the driver's own).
fn listed(tables: Vec<live::LiveTable>) -> Vec<live::LiveTable> {
    tables
        .into_iter()
        .map(|t| {
            assert!(t.serial.is_some(), "{t:?}");
            live::LiveTable { serial: None, ..t }
        })
        .collect()
}

fn socket(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uetctl-telemetry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{test}.sock"));
    let _ = std::fs::remove_file(&path);
    path
}

/// A child process, killed when dropped (also when a test fails).
/// The conversation of a scripted telemetry server with its one client.
struct Script {
    input: BufReader<std::os::unix::net::UnixStream>,
    output: std::os::unix::net::UnixStream,
}

impl Script {
    /// Answer with `v`, one line.
    fn say(&mut self, v: Value) {
        writeln!(self.output, "{v}").unwrap();
    }

    /// Take the client's first request and answer it as a process of protocol 1 with one
    /// open NIC, 0, does.
    fn answer_hello(&mut self) {
        self.hear();
        self.say(json!({"ok": {"protocol": 1, "pid": 1, "program": "p",
                               "nics": [{"nic": 0, "open": true}]}}));
    }

    /// The client's next request.
    fn hear(&mut self) -> Value {
        let mut line = String::new();
        self.input.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    }
}

/// A scripted telemetry server at a socket named after `test`, playing a process with one
/// NIC: it takes one client, greets it, and runs `script` on the conversation. Returns the
/// socket's path and the server's thread, which ends with what `script` returns.
fn scripted<T: Send + 'static>(
    test: &str,
    script: impl FnOnce(&mut Script) -> T + Send + 'static,
) -> (PathBuf, std::thread::JoinHandle<T>) {
    let path = socket(test);
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut c = Script {
            input: BufReader::new(s.try_clone().unwrap()),
            output: s,
        };
        c.say(
            json!({"uet_nic_telemetry": telemetry::PROTOCOL, "pid": 1, "program": "p", "nics": 1}),
        );
        script(&mut c)
    });
    (path, server)
}

/// Connect to the socket `path` of a [`scripted`] server, ask what `ask` asks, hang up, wait
/// for the server's script to end and remove its socket: what `ask` returned.
fn ask_scripted<T>(
    path: PathBuf,
    server: std::thread::JoinHandle<()>,
    ask: impl FnOnce(&mut Client) -> T,
) -> T {
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    let answer = ask(&mut client);
    drop(client);
    server.join().unwrap();
    let _ = std::fs::remove_file(&path);
    answer
}

/// Run `uetctl` with `args` and then the socket `path` of a [`scripted`] server, wait for the
/// server's script to end and remove its socket: what `uetctl` printed, and its stderr.
fn uetctl_against(
    args: &[&str],
    path: &std::path::Path,
    server: std::thread::JoinHandle<()>,
) -> (std::process::Output, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(args)
        .arg(path)
        .output()
        .unwrap();
    server.join().unwrap();
    let _ = std::fs::remove_file(path);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `uetctl` with `args` and `envs`, a job that lingers, and read the JSON document it
/// prints first (pretty-printed: it ends with a line "}"): the job, its PID and the document.
fn lingering_job(args: &[&str], envs: &[(&str, &std::ffi::OsStr)]) -> (Kill, u32, Value) {
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uetctl"));
    cmd.args(args).stdout(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut job = cmd.spawn().unwrap();
    let out = job.stdout.take().unwrap();
    let pid = job.id();
    let job = Kill(job);
    let mut doc = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        let end = line == "}";
        doc.push_str(&line);
        doc.push('\n');
        if end {
            break;
        }
    }
    (job, pid, serde_json::from_str(&doc).unwrap())
}

/// A raw connection: the greeting, then one answer per line sent.
struct Raw {
    input: BufReader<UnixStream>,
    output: UnixStream,
    hello: Value,
}

impl Raw {
    fn connect(path: &PathBuf) -> Raw {
        let s = UnixStream::connect(path).unwrap();
        let output = s.try_clone().unwrap();
        let mut raw = Raw {
            input: BufReader::new(s),
            output,
            hello: Value::Null,
        };
        raw.hello = raw.read().expect("greeting");
        raw
    }

    fn read(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.input.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    fn ask(&mut self, line: &[u8]) -> Option<Value> {
        self.output.write_all(line).ok()?;
        self.output.write_all(b"\n").ok()?;
        self.read()
    }

    fn errno(&mut self, request: Value) -> (String, String) {
        let a = self.ask(request.to_string().as_bytes()).expect("answer");
        let e = &a["error"];
        assert!(e.is_object(), "{request} answered {a}");
        assert!(e["errno"].as_u64().is_some(), "{a}");
        (
            e["name"].as_str().unwrap().to_string(),
            e["message"].as_str().unwrap().to_string(),
        )
    }
}

/// A live dump of an AV with single entries, a symmetric range, user ids and auth keys,
/// larger than one answer, equals what the process itself reads back from the NIC.
#[test]
fn a_live_dump_is_what_the_nic_holds() {
    let fabric = Fabric::new();
    let nic0 = nic(&fabric, "10.60.0.1");
    let nic1 = nic(&fabric, "10.60.0.2");
    let count = AV_DUMP_MAX as usize + 4000;
    let mut big = nic0
        .open_av(AvAttr {
            count: count + 64,
            job_id: 5,
            ..AvAttr::default()
        })
        .unwrap();
    let mut addrs = Vec::with_capacity(count * 32);
    for i in 0..count as u32 {
        let peer = UetAddress {
            caps: caps::AI_BASE,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 1 + (i % 7) as u16,
            fabric_addr: std::net::Ipv4Addr::from(0x0b00_0000 + i).into(),
            ri_start: 1,
            ri_count: 4,
            initiator: i,
        };
        addrs.extend_from_slice(&peer.to_bytes().unwrap());
    }
    let mut fa = vec![0u64; count];
    assert_eq!(big.insert(&addrs, count, Some(&mut fa), 0).unwrap(), count);
    // A range after the singles, then holes among the singles.
    big.insertsym("10.61.0.1", 3, "7?ri=1+4&init=9", 4, None, 0, None)
        .unwrap();
    for i in (97..count).step_by(97) {
        big.remove(&[fa[i]], 0).unwrap();
    }
    // Then one more peer (per-address user ids end range storage), with a user id given at insert (fi_addr as input).
    let mut user_id = [0xfeed_u64];
    let last = &addrs[..32];
    big.remove(&[fa[0]], 0).unwrap();
    assert_eq!(
        big.insert(last, 1, Some(&mut user_id), FI_AV_USER_ID)
            .unwrap(),
        1
    );
    let mut keyed_av = nic1
        .open_av(AvAttr {
            count: 8,
            job_id: 5,
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        })
        .unwrap();
    keyed_av
        .insert_auth_key(&job_id_to_auth_key(0x50), 0)
        .unwrap();
    let mut keyed = keyed_av
        .insert_auth_key(&job_id_to_auth_key(0x51), 0)
        .unwrap();
    keyed_av
        .insertsvc("10.2.0.9", Some("3"), Some(&mut keyed), FI_AUTH_KEY, None)
        .unwrap();

    let path = socket("dump");
    let t = Telemetry::bind(&path).unwrap();
    assert_eq!(t.add_nic(&nic0), 0);
    assert_eq!(t.add_nic(&nic1), 1);
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    assert_eq!(client.hello["pid"], std::process::id());
    assert_eq!(client.hello["nics"], 2);
    assert_eq!(client.open_nics().unwrap(), vec![0, 1]);

    let big_handle = big.nic().table().handle();
    assert_eq!(
        listed(live::tables(&mut client, 0).unwrap()),
        vec![live::LiveTable {
            handle: big_handle,
            capacity: (count + 64) as u32,
            serial: None,
            named: None
        }]
    );
    let live_big = live::av_dump(&mut client, 0, big_handle).unwrap();
    let own_big = dump::collect(&mut big).unwrap();
    assert_eq!(own_big.differences(), 0);
    assert!(!live_big.mirror);
    assert_eq!(live_big.capacity, own_big.capacity);
    let shape = |d: &dump::AvDump| -> Vec<(u32, u32, uet_fwif::NicAvEntry)> {
        d.rows.iter().map(|r| (r.index, r.span, r.nic)).collect()
    };
    assert_eq!(shape(&live_big), shape(&own_big));
    let valid: usize = live_big.rows.iter().map(|r| r.span as usize).sum();
    assert_eq!(valid, count - (count - 1) / 97 + 12);
    assert!(live_big.rows.iter().all(|r| r.mirror.is_none()));
    assert!(live_big.named.is_none());
    let text = dump::render_text("t", &live_big);
    assert!(text.contains("0xfeed"), "user id shown");
    assert!(text.contains("range"), "range shown");
    assert!(text.contains("host mirror belongs to the process"));
    let json = dump::render_json(&live_big);
    assert_eq!(json["mirror_read"], false);
    assert!(json["differences"].is_null());
    assert!(json["entries"][0]["mirror"].is_null());

    let keyed_handle = keyed_av.nic().table().handle();
    let live_keyed = live::av_dump(&mut client, 1, keyed_handle).unwrap();
    let own_keyed = dump::collect(&mut keyed_av).unwrap();
    assert_eq!(shape(&live_keyed), shape(&own_keyed));
    let own_slots: Vec<(u16, u32)> = own_keyed
        .keys
        .iter()
        .map(|k| (k.key.slot, k.nic.job_id.get()))
        .collect();
    let live_slots: Vec<(u16, u32)> = live_keyed
        .nic_keys
        .iter()
        .map(|(s, e)| (*s, e.job_id.get()))
        .collect();
    assert_eq!(live_slots, own_slots);
    assert_eq!(live_slots.len(), 2);
    let text = dump::render_text("t", &live_keyed);
    assert!(text.contains("AUTH-KEY SLOT"), "{text}");
    assert!(text.contains("0x51"), "{text}");

    // Registers and counters: what the NIC's own accessors read.
    let regs = live::regs(&mut client, 1).unwrap();
    assert!(regs
        .iter()
        .any(|r| r.name() == Some("ID") && r.value == 0x0001_fffe));
    let counters = live::counters(&mut client, 0).unwrap();
    let expected: Vec<(String, u64)> = nic0
        .counters()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    assert_eq!(counters, expected);
}

/// Every bad request is an error answer with a fabric errno; the connection goes on (or, for
/// a line that is not a request at all, closes) and the socket keeps serving.
#[test]
fn bad_requests_get_errnos_and_the_socket_keeps_serving() {
    let fabric = Fabric::new();
    let nic0 = nic(&fabric, "10.62.0.1");
    let av = nic0
        .open_av(AvAttr {
            count: 4,
            ..AvAttr::default()
        })
        .unwrap();
    let handle = av.nic().table().handle();
    let path = socket("bad");
    let t = Telemetry::bind(&path).unwrap();
    t.add_nic(&nic0);
    let mut raw = Raw::connect(&path);
    assert_eq!(raw.hello["uet_nic_telemetry"], telemetry::PROTOCOL);
    let cases = [
        (json!({"cmd": "warp"}), "FI_ENOSYS", "unknown command"),
        (json!({"nic": 0}), "FI_EINVAL", "\"cmd\""),
        (json!([1, 2]), "FI_EINVAL", "\"cmd\""),
        (
            json!({"cmd": "regs"}),
            "FI_EINVAL",
            "missing argument \"nic\"",
        ),
        (json!({"cmd": "regs", "nic": 7}), "FI_EINVAL", "no NIC 7"),
        (json!({"cmd": "regs", "nic": -1}), "FI_EINVAL", "unsigned"),
        (
            json!({"cmd": "counters", "nic": "0"}),
            "FI_EINVAL",
            "unsigned",
        ),
        (
            json!({"cmd": "av_dump", "nic": 0}),
            "FI_EINVAL",
            "\"table\"",
        ),
        (
            json!({"cmd": "av_dump", "nic": 0, "table": handle + 100}),
            "FI_EINVAL",
            "no AV table",
        ),
        (
            json!({"cmd": "av_dump", "nic": 0, "table": handle, "first": 5}),
            "FI_EINVAL",
            "past the table",
        ),
        (
            json!({"cmd": "av_dump", "nic": 0, "table": handle, "max": 0}),
            "FI_EINVAL",
            "max 0",
        ),
        (
            json!({"cmd": "av_dump", "nic": 0, "table": handle, "max": AV_DUMP_MAX + 1}),
            "FI_EINVAL",
            "max",
        ),
        (
            json!({"cmd": "av_dump", "nic": 0, "table": 1u64 << 40}),
            "FI_EINVAL",
            "32 bits",
        ),
    ];
    for (request, name, text) in cases {
        let (n, m) = raw.errno(request.clone());
        assert_eq!(n, name, "{request}: {m}");
        assert!(m.contains(text), "{request}: {m}");
    }
    // The same connection still answers.
    let ok = raw.ask(br#"{"cmd": "help"}"#).unwrap();
    assert!(ok["ok"]["commands"].as_array().unwrap().len() >= 6);

    // Not JSON: an error, then the connection closes.
    let a = raw.ask(b"regs 0").unwrap();
    assert_eq!(a["error"]["name"], "FI_EINVAL");
    assert!(raw.read().is_none(), "closed after a line that is not JSON");

    // A line longer than MAX_REQUEST: an error, then closed, without reading it all.
    let mut raw = Raw::connect(&path);
    let long = vec![b' '; MAX_REQUEST + 10];
    // The driver may close before the whole line is written: the write may fail, the answer
    // is still there to read.
    let _ = raw.output.write_all(&long);
    let _ = raw.output.write_all(b"\n");
    let a = raw.read().expect("an answer to the long line");
    assert!(
        a["error"]["message"].as_str().unwrap().contains("longer"),
        "{a}"
    );
    assert!(raw.read().is_none());

    // A NIC the application closed reads as closed; its number is not reused.
    drop(av);
    let mut raw = Raw::connect(&path);
    let a = raw
        .ask(json!({"cmd": "av_list", "nic": 0}).to_string().as_bytes())
        .unwrap();
    assert_eq!(a["ok"]["tables"], json!([]), "a dropped AV's table is gone");
    drop(nic0);
    let (n, m) = raw.errno(json!({"cmd": "regs", "nic": 0}));
    assert_eq!(n, "FI_ENODEV", "{m}");
    let info = raw.ask(br#"{"cmd":"info"}"#).unwrap();
    assert_eq!(info["ok"]["nics"][0]["open"], false);
}

/// Telemetry listing a table never holds it: the AV's fi_close is not FI_EBUSY because of it,
/// and AV_DESTROY runs when the AV goes.
#[test]
fn telemetry_keeps_no_table_or_nic_alive() {
    let (_fabric, nic0, path, _t) = serving_one_nic("10.63.0.1", "alive");
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    let av = nic0
        .open_av(AvAttr {
            count: 4,
            ..AvAttr::default()
        })
        .unwrap();
    let handle = av.nic().table().handle();
    assert_eq!(
        listed(live::tables(&mut client, 0).unwrap()),
        vec![live::LiveTable {
            handle,
            capacity: 4,
            serial: None,
            named: None
        }]
    );
    av.close()
        .expect("fi_close while telemetry lists the table");
    assert_eq!(live::tables(&mut client, 0).unwrap(), vec![]);
    let e = live::av_dump(&mut client, 0, handle).unwrap_err();
    assert!(e.contains("no AV table"), "{e}");
}

/// A process whose NICs are all closed has no registers or counters to show: `regs` and
/// `stats` say so, as `av dump` and `ep list` do, instead of printing nothing or a lone
/// header; their JSON lists no NIC.
#[test]
fn a_process_without_an_open_nic_is_said_to_have_none() {
    let (_fabric, nic0, path, _t) = serving_one_nic("10.63.0.9", "no-nic");
    drop(nic0);
    let pid = std::process::id();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_uetctl"))
            .args(args)
            .arg("--socket")
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for cmd in ["regs", "stats"] {
        assert_eq!(
            run(&[cmd]),
            format!("process {pid}: no open NIC\n"),
            "{cmd}"
        );
        let doc: Value = serde_json::from_str(&run(&["--json", cmd])).unwrap();
        assert_eq!(doc, json!({"pid": pid, "nics": []}), "{cmd}");
    }
    assert_eq!(
        run(&["ep", "list"]),
        format!("process {pid}: no endpoints\n")
    );
    assert_eq!(
        run(&["av", "dump"]),
        format!("process {pid}: no AV tables\n")
    );
}

/// Binding: a live socket is refused and keeps serving; a stale one is replaced; a file that
/// is not a socket is refused and left alone; dropping removes the socket, also while a client
/// that sends nothing holds the connection.
#[test]
fn binding_replaces_only_stale_sockets_and_drop_cleans_up() {
    let path = socket("bind");
    let first = Telemetry::bind(&path).unwrap();
    let e = Telemetry::bind(&path).unwrap_err().to_string();
    assert!(e.contains("another process serves it"), "{e}");
    Raw::connect(&path);

    // A client that connects and then says nothing: drop must not wait for it.
    let silent = Raw::connect(&path);
    drop(first);
    assert!(!path.exists(), "the socket file is removed");
    drop(silent);

    // A stale socket: bound, then its listener gone without removing the file.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let again = Telemetry::bind(&path).unwrap();
    assert_eq!(Raw::connect(&path).hello["nics"], 0);
    drop(again);

    std::fs::write(&path, b"not a socket").unwrap();
    let e = Telemetry::bind(&path).unwrap_err().to_string();
    assert!(e.contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    std::fs::remove_file(&path).unwrap();

    let e = Client::connect(&Target::Socket(path.clone()))
        .err()
        .unwrap();
    assert!(e.contains("cannot reach"), "{e}");
}

/// `uetctl` run against another process: `uetctl demo --telemetry --linger` keeps its job's
/// NICs open, and `uetctl ps`, `av dump --pid`, `regs --pid` and `stats --pid` inspect it from
/// other processes; wrong targets get a message and exit 2.
#[test]
fn uetctl_inspects_a_live_process() {
    use std::process::Command;
    let dir = std::env::temp_dir().join(format!("uetctl-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let uetctl = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_uetctl"))
            .args(args)
            .env(telemetry::DIR_ENV, &dir)
            .output()
            .unwrap()
    };
    let (job, pid, doc) = lingering_job(
        &[
            "--json",
            "demo",
            "--ranks",
            "2",
            "--telemetry",
            "--linger",
            "120",
        ],
        &[(telemetry::DIR_ENV, dir.as_os_str())],
    );
    assert_eq!(doc["ok"], true, "{doc:#}");
    let sock = telemetry::socket_path(&dir, pid);
    assert_eq!(doc["telemetry"], sock.display().to_string());

    let ps = uetctl(&["--json", "ps"]);
    assert!(ps.status.success());
    let ps: Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert_eq!(ps["processes"][0]["pid"], pid);
    assert_eq!(ps["processes"][0]["nics"].as_array().unwrap().len(), 2);
    let text = uetctl(&["ps"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("{pid:<8} uetctl")), "{text}");

    let pid_s = pid.to_string();
    let dump = uetctl(&["--json", "av", "dump", "--pid", &pid_s]);
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let dump: Value = serde_json::from_slice(&dump.stdout).unwrap();
    let tables = dump["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 2, "one AV table per rank's NIC");
    // NICs are numbered in the order the ranks opened them: find rank 0's by its address.
    let nic_of_rank = |rank: usize| -> u64 {
        let nics = ps["processes"][0]["nics"].as_array().unwrap();
        let n = nics
            .iter()
            .find(|n| n["fabric_addr"] == doc["ranks"][rank]["fabric_addr"])
            .unwrap();
        n["nic"].as_u64().unwrap()
    };
    // What rank 0 saw in its own process, NIC side, is what the live dump shows.
    let own = doc["rank0_av"]["entries"].as_array().unwrap();
    let live0 = tables.iter().find(|t| t["nic"] == nic_of_rank(0)).unwrap()["av"]["entries"]
        .as_array()
        .unwrap();
    assert_eq!(own.len(), 2);
    assert_eq!(
        own.iter().map(|e| &e["nic"]).collect::<Vec<_>>(),
        live0.iter().map(|e| &e["nic"]).collect::<Vec<_>>()
    );
    assert!(live0.iter().all(|e| e["mirror"].is_null()));

    let regs = uetctl(&["regs", "--pid", &pid_s, "--nic", "1"]);
    let regs = String::from_utf8_lossy(&regs.stdout);
    assert!(
        regs.contains(&format!("process {pid} NIC 1 BAR0")) && regs.contains("REVISION"),
        "{regs}"
    );
    let eps = uetctl(&["--json", "ep", "list", "--pid", &pid_s]);
    let eps: Value = serde_json::from_slice(&eps.stdout).unwrap();
    let eps = eps["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 2, "one endpoint per rank");
    for rank in 0..2 {
        let e = eps.iter().find(|e| e["nic"] == nic_of_rank(rank)).unwrap();
        assert_eq!(e["pid_on_fep"], doc["ranks"][rank]["pid_on_fep"]);
        let sent = doc["ranks"][rank]["sent"].as_u64().unwrap()
            + doc["ranks"][rank]["tagged"]["sent"].as_u64().unwrap();
        assert_eq!(e["counters"]["tx_messages"], sent, "{e}");
    }
    let stats = uetctl(&["--json", "stats", "--socket", &sock.display().to_string()]);
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert!(stats["nics"][0]["counters"]["TX_PACKETS"].as_u64().unwrap() > 0);

    // Wrong targets.
    let refused = |args: &[&str], says: &str| {
        let out = uetctl(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(&["regs", "--pid", &pid_s, "--nic", "9"], "no NIC 9");
    refused(
        &["av", "dump", "--pid", &pid_s, "--table", "99"],
        "no AV table 99",
    );
    refused(
        &["stats", "--nic", "0"],
        "--nic names a part of a live process",
    );
    refused(&["av", "dump"], "say what to inspect");
    refused(
        &["av", "dump", "--pid", "4000000000"],
        "cannot reach process",
    );
    refused(&["regs", "--demo", "--pid", &pid_s], "cannot be used with");

    // Killed, the process leaves its socket file; nobody answers it, so ps lists nothing.
    drop(job);
    let ps: Value = serde_json::from_slice(&uetctl(&["--json", "ps"]).stdout).unwrap();
    assert_eq!(ps["processes"], json!([]));
    refused(&["av", "dump", "--pid", &pid_s], "cannot reach process");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ep_list` names each endpoint the process holds on the NIC, with the NIC's counters for
/// it (what `Endpoint::counters` reads) and the MSI-X vector it waits on once it has one; a
/// dropped endpoint is gone from the list.
#[test]
fn endpoints_are_listed_with_their_counters_until_dropped() {
    use uet_driver::EndpointAttr;
    let fabric = Fabric::new();
    let nic0 = nic(&fabric, "10.64.0.1");
    let av = nic0
        .open_av(AvAttr {
            count: 4,
            job_id: 7,
            ..AvAttr::default()
        })
        .unwrap();
    let attr = EndpointAttr {
        job_id: 7,
        ..EndpointAttr::default()
    };
    let a = nic0.endpoint(attr, Some(&av)).unwrap();
    let mut b = nic0.endpoint(attr, None).unwrap();
    let path = socket("eps");
    let t = Telemetry::bind(&path).unwrap();
    t.add_nic(&nic0);
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    let eps = live::endpoints(&mut client, 0).unwrap();
    assert_eq!(eps.len(), 2);
    let own = a.counters().unwrap().named();
    assert_eq!(eps[0].counters.as_ref().unwrap(), &own);
    assert_eq!(eps[0].info["address"], a.address().to_string());
    assert_eq!(eps[0].info["job_id"], 7);
    assert_eq!(eps[0].info["type"], "rdm");
    assert_eq!(eps[0].info["av_table"], av.nic().table().handle());
    assert!(eps[1].info["av_table"].is_null());
    assert_eq!(eps[1].info["pid_on_fep"], b.address().pid_on_fep);
    assert!(eps[1].info["msix_vector"].is_null(), "no wait yet");
    assert_eq!(b.cq_trywait(), Ok(()));
    let eps = live::endpoints(&mut client, 0).unwrap();
    assert!(eps[0].info["msix_vector"].is_null());
    assert_eq!(
        eps[1].info["msix_vector"], 0,
        "the first vector, taken by the wait"
    );
    drop(a);
    let eps = live::endpoints(&mut client, 0).unwrap();
    assert_eq!(eps.len(), 1);
    assert_eq!(eps[0].info["address"], b.address().to_string());
}

/// `Telemetry::start` makes its directory 0700 and serves `<pid>.sock` there; a directory
/// others may write to, or a symbolic link, is refused before anything is bound.
#[test]
fn start_uses_only_a_private_directory() {
    use std::os::unix::fs::PermissionsExt;
    let base = std::env::temp_dir().join(format!("uetctl-start-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let dir = base.join("fresh");
    // nextest runs each test in a process of its own, so the variable is this test's.
    std::env::set_var(telemetry::DIR_ENV, &dir);
    let t = Telemetry::start().unwrap();
    assert_eq!(t.path(), telemetry::socket_path(&dir, std::process::id()));
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    drop(t);

    let open = base.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::env::set_var(telemetry::DIR_ENV, &open);
    let e = Telemetry::start().unwrap_err().to_string();
    assert!(e.contains("may be written by others"), "{e}");
    assert_eq!(
        std::fs::read_dir(&open).unwrap().count(),
        0,
        "nothing bound"
    );

    let link = base.join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    std::env::set_var(telemetry::DIR_ENV, &link);
    let e = Telemetry::start().unwrap_err().to_string();
    assert!(e.contains("not a directory"), "{e}");
    let _ = std::fs::remove_dir_all(&base);
}

/// `UET_NIC_TELEMETRY=1` starts the socket at the first `Nic::open` of a program that does
/// nothing about telemetry, every NIC it opens answers, and a normal exit removes the socket.
#[test]
fn the_environment_turns_telemetry_on_for_any_program() {
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("uetctl-env-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = |args: &[&str], on: &str| {
        Command::new(env!("CARGO_BIN_EXE_uetctl"))
            .args(args)
            .env(telemetry::DIR_ENV, &dir)
            .env(telemetry::ENABLE_ENV, on)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (job, pid, doc) = lingering_job(
        &["--json", "demo", "--ranks", "2", "--linger", "120"],
        &[
            (telemetry::DIR_ENV, dir.as_os_str()),
            (telemetry::ENABLE_ENV, "1".as_ref()),
        ],
    );
    let sock = telemetry::socket_path(&dir, pid);
    assert_eq!(doc["telemetry"], sock.display().to_string());
    let mut client = Client::connect(&Target::Socket(sock.clone())).unwrap();
    assert_eq!(client.open_nics().unwrap(), vec![0, 1]);
    assert_eq!(live::endpoints(&mut client, 1).unwrap().len(), 1);
    drop(client);
    drop(job);

    // A job that ends normally leaves no socket behind; "0" leaves telemetry off.
    for on in ["yes", "0"] {
        let _ = std::fs::remove_dir_all(&dir);
        let status = run(&["demo", "--ranks", "2"], on).wait().unwrap();
        assert!(status.success());
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{on}: {left:?}");
        assert_eq!(
            dir.exists(),
            on == "yes",
            "{on}: the directory is made when on"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A named AV's table is compared with the AV itself, read from its shared segment: in step
/// when the process has caught up (ranges included), not compared (and why) while it lags,
/// and every entry the NIC holds otherwise than the AV says is a difference.
#[test]
fn a_named_av_table_is_compared_with_the_av() {
    use uet_av::{AvName, NicAvTable};
    use uet_fwif::av_entry::AvWriteRecord;
    use uet_fwif::NicAvEntry;

    let fabric = Fabric::new();
    let nic0 = nic(&fabric, "10.64.0.1");
    let nic1 = nic(&fabric, "10.64.0.2");
    let name = format!("uetctl-named-{}", std::process::id());
    let attr = AvAttr {
        name: Some(AvName::new(&name).unwrap()),
        count: 64,
        job_id: 0x77,
        ..AvAttr::default()
    };
    // Two handles, as two processes of the node would hold, each with its own NIC table.
    let mut a = nic0.open_named_av(attr).unwrap();
    let mut b = nic1.open_named_av(attr).unwrap();
    a.insertsvc("10.9.0.1", Some("3"), None, 0, None).unwrap();
    a.insertsvc("10.9.0.2", Some("3"), None, 0, None).unwrap();
    a.insertsym("10.70.0.1", 3, "1?ri=1+4", 4, None, 0, None)
        .unwrap();
    a.remove(&[0], 0).unwrap();
    b.sync().unwrap();

    let path = socket("named");
    let t = Telemetry::bind(&path).unwrap();
    t.add_nic(&nic0);
    t.add_nic(&nic1);
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    let (ha, hb) = (a.av().nic().table().handle(), b.av().nic().table().handle());
    let g = a.generation();
    assert_eq!(
        listed(live::tables(&mut client, 1).unwrap()),
        vec![live::LiveTable {
            handle: hb,
            capacity: 64,
            serial: None,
            named: Some((name.clone(), Some(g)))
        }]
    );

    // In step: every index compared, the range one folded row.
    for (nic, handle) in [(0, ha), (1, hb)] {
        let d = live::av_dump(&mut client, nic, handle).unwrap();
        let named = d.named.as_ref().expect("a named table");
        assert_eq!(named.not_compared, None, "NIC {nic}");
        assert_eq!(
            (named.generation, named.reflected, named.handles),
            (Some(g), Some(g), Some(2))
        );
        assert!(d.mirror);
        assert_eq!(d.differences(), 0, "{}", dump::render_text("t", &d));
        assert_eq!(
            d.rows.iter().map(|r| (r.index, r.span)).collect::<Vec<_>>(),
            [(1, 1), (2, 12)]
        );
        let text = dump::render_text("t", &d);
        assert!(
            text.contains(&format!("(named AV '{name}')"))
                && text.contains("0 differences between NIC and the AV")
                && text.contains("NAMED AV"),
            "{text}"
        );
        let json = dump::render_json(&d);
        assert_eq!(json["compared_with"], "named_av");
        assert_eq!(json["named_av"]["generation"], g);
        assert_eq!(json["differences"], 0);
    }

    // b lags behind a change it has not caught up with: not compared, and the reason.
    a.insertsvc("10.9.0.3", Some("5"), None, 0, None).unwrap();
    let d = live::av_dump(&mut client, 1, hb).unwrap();
    let named = d.named.as_ref().unwrap();
    assert_eq!(named.reflected, Some(g));
    assert_eq!(named.generation, Some(g + 1));
    let why = named.not_compared.as_deref().expect("not compared");
    assert!(why.contains(&format!("generation {g}")), "{why}");
    assert!(!d.mirror && d.rows.iter().all(|r| r.mirror.is_none()));
    let text = dump::render_text("t", &d);
    assert!(text.contains("the NIC's side only"), "{text}");
    assert_eq!(dump::render_json(&d)["compared_with"], Value::Null);
    b.sync().unwrap();
    let d = live::av_dump(&mut client, 1, hb).unwrap();
    assert_eq!(d.named.as_ref().unwrap().not_compared, None);
    assert_eq!(d.differences(), 0);
    assert_eq!(d.rows[0].index, 0, "the new entry took the freed index 0");

    // A's NIC table changed behind its AV: another peer at 1, a range member missing, an
    // entry where the AV holds none.
    let stranger = stranger();
    let mut wrong = AvWriteRecord::default();
    wrong.index.set(1);
    wrong.entry = NicAvEntry::for_peer(&stranger, 0x77);
    let mut extra = wrong;
    extra.index.set(40);
    {
        let mut table = a.nic_mut();
        table.write_entries(&[wrong, extra]).unwrap();
        table.invalidate(&[5]).unwrap();
    }
    let d = live::av_dump(&mut client, 0, ha).unwrap();
    assert_eq!(d.differences(), 3, "{}", dump::render_text("t", &d));
    let text = dump::render_text("t", &d);
    for expected in [
        "DIFFERS: address: AV uet://10.9.0.2/3?",
        "NIC uet://10.9.9.9/3?",
        "DIFFERS: NIC entry invalid; AV holds uet://10.70.0.1/4?",
        "DIFFERS: AV slot empty",
        "3 differences between NIC and the AV",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    // The range still folds where NIC and AV agree: 2..5, then 6..14 after the hole at 5.
    let spans: Vec<(u32, u32)> = d.rows.iter().map(|r| (r.index, r.span)).collect();
    assert_eq!(spans, [(0, 1), (1, 1), (2, 3), (5, 1), (6, 8), (40, 1)]);

    // The AV gone with its last handle: its table is gone too.
    drop(a);
    drop(b);
    assert_eq!(live::tables(&mut client, 0).unwrap(), vec![]);
}

/// Set in the child of [`uetctl_compares_another_processs_named_av`]: the AV name.
const NAMED_CHILD: &str = "UETCTL_NAMED_AV_CHILD";
/// Prefix of the child's line saying it is ready (libtest writes lines of its own).
const NAMED_READY: &str = "named-av-child-ready:";

/// `uetctl av dump --pid` of another process that holds a named AV: the AV read from its
/// segment beside the process's NIC table, in step; then, after a third process changed the
/// AV and the holder made no call since, shown as not compared, with the generation it
/// reflects. The test binary runs itself again as the holder.
#[test]
fn uetctl_compares_another_processs_named_av() {
    use std::process::{Command, Stdio};
    use uet_av::AvName;
    let attr = |name: &str| AvAttr {
        name: Some(AvName::new(name).unwrap()),
        count: 32,
        job_id: 0x42,
        ..AvAttr::default()
    };
    if let Ok(name) = std::env::var(NAMED_CHILD) {
        // The holder: telemetry from the environment, a named AV, then wait for stdin's end.
        let fabric = Fabric::new();
        let n = nic(&fabric, "10.65.0.2");
        let mut av = n.open_named_av(attr(&name)).unwrap();
        av.insertsvc("10.9.1.1", Some("2"), None, 0, None).unwrap();
        av.insertsym("10.71.0.1", 2, "1?ri=1+4", 3, None, 0, None)
            .unwrap();
        println!("{NAMED_READY}{}", std::process::id());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest);
        return;
    }
    let name = format!("uetctl-named-cli-{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("uetctl-named-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "uetctl_compares_another_processs_named_av",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(NAMED_CHILD, &name)
        .env(telemetry::ENABLE_ENV, "1")
        .env(telemetry::DIR_ENV, &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let stdin = child.stdin.take();
    let child = Kill(child);
    let pid: u32 = out
        .lines()
        .map_while(Result::ok)
        // libtest's "test … " may start the line.
        .find_map(|l| {
            l.split_once(NAMED_READY)
                .map(|(_, p)| p.trim().parse().unwrap())
        })
        .expect("the holder gets ready");
    assert_eq!(pid, child.0.id());
    let dump = |json: bool| {
        let mut args = vec!["av", "dump", "--pid"];
        let pid = pid.to_string();
        args.push(&pid);
        if json {
            args.insert(0, "--json");
        }
        let o = Command::new(env!("CARGO_BIN_EXE_uetctl"))
            .args(&args)
            .env(telemetry::DIR_ENV, &dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let ps = Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["ps", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let ps = String::from_utf8(ps.stdout).unwrap();
    assert!(
        ps.contains(&format!(": 32 named AV '{name}'")),
        "ps names the AV:\n{ps}"
    );
    let doc: Value = serde_json::from_str(&dump(true)).unwrap();
    let av = &doc["tables"][0]["av"];
    assert_eq!(av["compared_with"], "named_av", "{doc:#}");
    assert_eq!(av["differences"], 0);
    assert_eq!(av["named_av"]["name"], name.as_str());
    assert_eq!(av["named_av"]["handles"], 1);
    assert_eq!(
        av["entries"].as_array().unwrap().len(),
        2,
        "a single, a range"
    );
    let text = dump(false);
    assert!(
        text.contains(&format!("(named AV '{name}')"))
            && text.contains("0 differences between NIC and the AV"),
        "{text}"
    );

    // A third process's change (this one's): the idle holder has not caught up.
    let fabric = Fabric::new();
    let n = nic(&fabric, "10.65.0.3");
    let mut mine = n.open_named_av(attr(&name)).unwrap();
    mine.insertsvc("10.9.1.2", Some("2"), None, 0, None)
        .unwrap();
    let doc: Value = serde_json::from_str(&dump(true)).unwrap();
    let av = &doc["tables"][0]["av"];
    assert_eq!(av["compared_with"], Value::Null, "{doc:#}");
    let g = mine.generation();
    assert_eq!(av["named_av"]["generation"], g);
    assert_eq!(av["named_av"]["reflected_generation"], g - 1);
    assert!(
        av["named_av"]["not_compared"]
            .as_str()
            .unwrap()
            .contains("catches up at its next AV call"),
        "{doc:#}"
    );
    drop(stdin);
    drop(child);
    drop(mine);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A socket left by a process killed by a signal is removed when the next process starts its
/// telemetry in the directory; a socket of a process that still exists, a socket someone
/// listens on, and files that are not `<pid>.sock` sockets are left alone.
#[test]
fn start_removes_only_sockets_of_processes_that_died() {
    use std::os::unix::net::UnixListener;
    let dir = std::env::temp_dir().join(format!("uetctl-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    }
    // A process that has exited: its PID names no process now.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = |pid: u32| {
        let path = telemetry::socket_path(&dir, pid);
        drop(UnixListener::bind(&path).unwrap());
        path
    };
    let dead_sock = stale(dead);
    // The parent (the test runner) exists: its socket may be about to listen.
    let parent_sock = stale(std::os::unix::process::parent_id());
    // Someone listens here, whatever the PID says.
    let served = telemetry::socket_path(&dir, dead.wrapping_add(1_000_000));
    let _listener = UnixListener::bind(&served).unwrap();
    let not_socket = telemetry::socket_path(&dir, dead.wrapping_add(2_000_000));
    std::fs::write(&not_socket, b"").unwrap();
    let other_name = dir.join("notes.sock");
    drop(UnixListener::bind(&other_name).unwrap());

    std::env::set_var(telemetry::DIR_ENV, &dir);
    let t = Telemetry::start().unwrap();
    assert!(!dead_sock.exists(), "the dead process's socket is removed");
    for kept in [&parent_sock, &served, &not_socket, &other_name] {
        assert!(kept.exists(), "{} is kept", kept.display());
    }
    assert!(t.path().exists());
    assert_eq!(
        telemetry::remove_stale_sockets(&dir),
        0,
        "nothing more to remove"
    );
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The row of `index` in a text dump.
fn row_line<'a>(text: &'a str, index: &str) -> &'a str {
    text.lines()
        .skip(2)
        .find(|l| l.split_whitespace().next() == Some(index))
        .unwrap_or_else(|| panic!("no row {index}:\n{text}"))
}

/// A live dump of an AV whose entry is bound to an auth key the NIC holds for the AV's table
/// shows the key's JobID in the JOBID cell ("0x51 (key)"), as the process's own dump does,
/// although a live dump has no mirror keys, only the slots the table owns on the NIC.
#[test]
fn a_live_dump_shows_the_jobid_of_a_key_the_nic_holds_for_the_table() {
    let fabric = Fabric::new();
    let nic0 = nic(&fabric, "10.70.0.1");
    let mut av = nic0
        .open_av(AvAttr {
            count: 8,
            job_id: 5,
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        })
        .unwrap();
    let mut keyed = av.insert_auth_key(&job_id_to_auth_key(0x51), 0).unwrap();
    av.insertsvc("10.2.0.9", Some("3"), Some(&mut keyed), FI_AUTH_KEY, None)
        .unwrap();
    // The process's own dump: the key's JobID.
    let own = dump::collect(&mut av).unwrap();
    assert_eq!(own.differences(), 0);
    let own_text = dump::render_text("own", &own);
    assert!(
        row_line(&own_text, &keyed.to_string()).contains("0x51 (key)"),
        "{own_text}"
    );

    let path = socket("keyed-jobid");
    let t = Telemetry::bind(&path).unwrap();
    t.add_nic(&nic0);
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    let handle = av.nic().table().handle();
    let live = live::av_dump(&mut client, 0, handle).unwrap();
    assert_eq!(live.nic_keys.len(), 1, "the NIC's slot is read");
    let text = dump::render_text("live", &live);
    let line = row_line(&text, &keyed.to_string());
    assert!(
        line.contains("0x51 (key)") && !line.contains("(no key)"),
        "live dump says the key is missing although the NIC holds it:\n{text}"
    );
}

/// An address that routes nowhere, distinct for each `n`.
fn nowhere(n: u32) -> [u8; 32] {
    UetAddress {
        caps: caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 1 + (n % 7) as u16,
        fabric_addr: std::net::Ipv4Addr::from(0xc000_0200 + n).into(),
        ri_start: 1,
        ri_count: 1,
        initiator: n,
    }
    .to_bytes()
    .unwrap()
}

/// A dump is read page by page. When the AV is closed between two pages and a new AV's table
/// takes the same NIC handle (the NIC reuses the lowest free handle), the request continuing
/// the dump with the first page's serial is answered FI_ENOENT, not with the new table's
/// entries; the new table has another serial in `av_list` and its own dump.
#[test]
fn a_dump_continued_after_its_table_was_replaced_is_enoent() {
    let fabric = Fabric::new();
    let nic0 = nic(&fabric, "10.74.0.1");
    let attr = AvAttr {
        count: 8,
        job_id: 5,
        ..AvAttr::default()
    };
    let mut old = nic0.open_av(attr).unwrap();
    let old_addrs: Vec<u8> = (1..=3).flat_map(nowhere).collect();
    old.insert(&old_addrs, 3, None, 0).unwrap();
    let handle = old.nic().table().handle();
    let path = socket("replaced");
    let t = Telemetry::bind(&path).unwrap();
    t.add_nic(&nic0);
    let mut raw = Raw::connect(&path);
    let listed = raw
        .ask(json!({"cmd": "av_list", "nic": 0}).to_string().as_bytes())
        .unwrap();
    let old_serial = listed["ok"]["tables"][0]["serial"]
        .as_u64()
        .expect("av_list gives the serial");
    // A first page is asked for without a serial.
    let page1 = raw
        .ask(
            json!({"cmd": "av_dump", "nic": 0, "table": handle, "first": 0, "max": 1})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    assert_eq!(page1["ok"]["serial"], old_serial, "{page1}");
    let next = page1["ok"]["next"].as_u64().expect("more to read");
    // The application closes the AV and opens another: same handle.
    drop(old);
    let mut new = nic0.open_av(attr).unwrap();
    assert_eq!(new.nic().table().handle(), handle, "the handle is reused");
    let new_addrs: Vec<u8> = (7..=9).flat_map(nowhere).collect();
    new.insert(&new_addrs, 3, None, 0).unwrap();
    let (name, message) = raw.errno(
        json!({"cmd": "av_dump", "nic": 0, "table": handle, "serial": old_serial, "first": next}),
    );
    assert_eq!(name, "FI_ENOENT", "{message}");
    assert!(message.contains("closed since the dump began"), "{message}");

    let listed = raw
        .ask(json!({"cmd": "av_list", "nic": 0}).to_string().as_bytes())
        .unwrap();
    let new_serial = listed["ok"]["tables"][0]["serial"].as_u64().unwrap();
    assert_ne!(new_serial, old_serial, "a serial is never reused");
    let page = raw
        .ask(
            json!({"cmd": "av_dump", "nic": 0, "table": handle, "serial": new_serial, "first": 0})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    assert_eq!(page["ok"]["entries"].as_array().unwrap().len(), 3, "{page}");
    // A serial for a table that is gone altogether is FI_ENOENT too.
    drop(new);
    let (name, message) =
        raw.errno(json!({"cmd": "av_dump", "nic": 0, "table": handle, "serial": new_serial}));
    assert_eq!(name, "FI_ENOENT", "{message}");
}

/// `uetctl`'s dump sends the serial of the first page with every later page, and a refused
/// continuation is an error saying the dump is incomplete (a scripted telemetry server plays
/// the process whose table was replaced).
#[test]
fn uetctl_continues_a_dump_by_the_tables_serial_and_reports_a_replaced_table() {
    let (path, server) = scripted("scripted", |c| {
        let first = c.hear();
        c.say(
            json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0,
                          "entries": [], "next": 4, "auth_key_slots": []}}),
        );
        let second = c.hear();
        c.say(json!({"error": {"errno": 2, "name": "FI_ENOENT",
                               "message": "AV table 3 of serial 7 was closed since the dump began"}}));
        (first, second)
    });
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    let e = live::av_dump(&mut client, 0, 3).unwrap_err();
    let (first, second) = server.join().unwrap();
    assert!(first.get("serial").is_none(), "{first}");
    assert_eq!(second["serial"], 7, "{second}");
    assert_eq!(second["first"], 4, "{second}");
    assert!(
        e.contains("incomplete") && e.contains("FI_ENOENT") && e.contains("closed since"),
        "{e}"
    );
}

/// A client that keeps its connection and asks something several times a second does not
/// keep a second client (`uetctl av dump --socket`) from being greeted and served meanwhile.
#[test]
fn a_second_client_is_served_while_a_first_keeps_its_connection() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let (_fabric, _nic0, path, _t) = serving_one_nic("10.73.0.1", "two");
    let served = Arc::new(AtomicBool::new(false));
    let first_done = Arc::new(AtomicBool::new(false));
    let first = {
        let (path, served, first_done) = (path.clone(), served.clone(), first_done.clone());
        std::thread::spawn(move || {
            let mut raw = Raw::connect(&path);
            // Talk until the second client has been served, and for at most 8 s: served one
            // at a time, the second would be greeted only when this one stops.
            let start = Instant::now();
            while !served.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(8) {
                assert!(raw.ask(br#"{"cmd":"help"}"#).unwrap()["ok"].is_object());
                std::thread::sleep(Duration::from_millis(200));
            }
            first_done.store(true, Ordering::Release);
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let second = Client::connect(&Target::Socket(path.clone())).and_then(|mut c| c.open_nics());
    let first_still_talking = !first_done.load(Ordering::Acquire);
    served.store(true, Ordering::Release);
    first.join().unwrap();
    assert_eq!(second, Ok(vec![0]));
    assert!(
        first_still_talking,
        "the second client was served only once the first stopped"
    );
}

/// At most `max_clients` connections are served at once: one more is answered FI_EBUSY and
/// closed, and `uetctl` says the process has too many clients; once a client goes, another
/// is served.
#[test]
fn a_client_over_the_limit_is_told_the_socket_is_busy() {
    let path = socket("busy");
    let limits = telemetry::ServeLimits {
        max_clients: 2,
        ..telemetry::ServeLimits::default()
    };
    let t = Telemetry::bind_with_limits(&path, limits).unwrap();
    let a = Raw::connect(&path);
    let _b = Raw::connect(&path);
    let s = UnixStream::connect(&path).unwrap();
    let mut refused = Raw {
        input: BufReader::new(s.try_clone().unwrap()),
        output: s,
        hello: Value::Null,
    };
    let e = refused.read().expect("an answer");
    assert_eq!(e["error"]["name"], "FI_EBUSY", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many telemetry clients"),
        "{e}"
    );
    assert!(refused.read().is_none(), "closed after the answer");
    let e = Client::connect(&Target::Socket(path.clone()))
        .err()
        .unwrap();
    assert!(
        e.contains("refused the connection") && e.contains("FI_EBUSY"),
        "{e}"
    );
    drop(a);
    // The first connection's thread notices its client went at its next read.
    let start = std::time::Instant::now();
    loop {
        match Client::connect(&Target::Socket(path.clone())) {
            Ok(_) => break,
            Err(e) if start.elapsed() < std::time::Duration::from_secs(5) => {
                assert!(e.contains("FI_EBUSY"), "{e}");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("a place freed is not taken: {e}"),
        }
    }
    drop(t);
}

/// A connection is closed once it has been open for `client_lifetime`, however busy, with an
/// FI_ETIMEDOUT answer; the socket goes on serving.
#[test]
fn a_connection_is_closed_at_the_end_of_its_lifetime() {
    use std::time::{Duration, Instant};
    let path = socket("lifetime");
    let limits = telemetry::ServeLimits {
        client_lifetime: Duration::from_millis(600),
        ..telemetry::ServeLimits::default()
    };
    let _t = Telemetry::bind_with_limits(&path, limits).unwrap();
    let start = Instant::now();
    let mut raw = Raw::connect(&path);
    let last = loop {
        // The connection may be closed before the request is written: its answer is there
        // to read all the same.
        let _ = raw.output.write_all(b"{\"cmd\":\"help\"}\n");
        let a = raw.read().expect("an answer");
        if a.get("ok").is_none() {
            break a;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "never closed");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(last["error"]["name"], "FI_ETIMEDOUT", "{last}");
    assert!(start.elapsed() >= Duration::from_millis(600));
    assert!(raw.read().is_none(), "closed after the answer");

    // A client trickling a request a byte at a time is closed all the same.
    let mut raw = Raw::connect(&path);
    let start = Instant::now();
    let request = br#"{"cmd":"help"}"#;
    for b in request.iter().cycle() {
        if raw.output.write_all(&[*b]).is_err() || start.elapsed() > Duration::from_secs(2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let a = raw.read().expect("an answer");
    assert_eq!(a["error"]["name"], "FI_ETIMEDOUT", "{a}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(Raw::connect(&path).hello["nics"], 0, "still serving");
}

/// Dropping the telemetry while several clients hold connections, silent or in the middle
/// of a request, returns at once and removes the socket.
#[test]
fn drop_ends_every_connection_at_once() {
    let path = socket("drop-many");
    let t = Telemetry::bind(&path).unwrap();
    let silent = Raw::connect(&path);
    let mut halfway = Raw::connect(&path);
    halfway.output.write_all(br#"{"cmd":"#).unwrap();
    let mut talking = Raw::connect(&path);
    assert!(talking.ask(br#"{"cmd":"info"}"#).unwrap()["ok"].is_object());
    let start = std::time::Instant::now();
    drop(t);
    assert!(
        start.elapsed() < std::time::Duration::from_secs(2),
        "drop waited {:?}",
        start.elapsed()
    );
    assert!(!path.exists());
    for mut raw in [silent, halfway, talking] {
        assert!(raw.read().is_none(), "connection closed");
    }
}

/// Set in the child of [`the_socket_is_private_whatever_the_umask`]: the telemetry directory.
const UMASK_CHILD: &str = "UETCTL_TELEMETRY_UMASK_CHILD";
/// Prefix of the child's line giving the socket's mode (libtest writes lines of its own).
const UMASK_MODE: &str = "telemetry-socket-mode:";

/// The socket file is mode 0600 even for a process with umask 0 (a libfabric application may
/// run so) in a directory others may read: connecting needs write permission on the socket,
/// so no other user can dump the process's tables. The test binary runs itself again with
/// umask 0.
#[test]
fn the_socket_is_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = std::env::var_os(UMASK_CHILD) {
        // SAFETY: umask only sets the process's file creation mask; it touches no memory.
        unsafe {
            libc::umask(0);
        }
        std::env::set_var(telemetry::DIR_ENV, &dir);
        let t = Telemetry::start().unwrap();
        let mode = std::fs::metadata(t.path()).unwrap().permissions().mode() & 0o777;
        println!("{UMASK_MODE}{mode:o}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("uetctl-umask-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_socket_is_private_whatever_the_umask",
            "--nocapture",
        ])
        .env(UMASK_CHILD, &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mode = stdout
        .lines()
        .find_map(|l| l.strip_prefix(UMASK_MODE))
        .map(|m| u32::from_str_radix(m.trim(), 8).unwrap())
        .unwrap_or_else(|| panic!("child: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        mode & 0o077,
        0,
        "telemetry socket mode {mode:o} in a 0755 directory: other users can connect and dump \
         the process's AV tables and JobIDs"
    );
}

/// A caller that means "no limit" passes `Duration::MAX` as `ServeLimits::client_lifetime`:
/// the socket serves (greets) every client, and its accept thread does not die of the
/// deadline's overflow.
#[test]
fn an_unbounded_client_lifetime_still_serves() {
    use std::time::Duration;
    let path = socket("unbounded-lifetime");
    let limits = telemetry::ServeLimits {
        client_lifetime: Duration::MAX,
        ..telemetry::ServeLimits::default()
    };
    let _t = Telemetry::bind_with_limits(&path, limits).unwrap();
    for _ in 0..2 {
        let s = UnixStream::connect(&path).expect("the socket still accepts");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        let hello: Value = serde_json::from_str(&line).expect("a greeting");
        assert!(hello.get("uet_nic_telemetry").is_some(), "{hello}");
    }
}

/// `uetctl stats --socket` of a process whose NICs are of different interface versions shows
/// every NIC's counters: a counter only the later NIC has is a row, with "-" for the NIC
/// without it, as the JSON output already lists it.
#[test]
fn live_stats_show_the_counters_of_every_nic_not_only_the_first() {
    let fabric = Fabric::new();
    let open = |ip: &str, minor: u8| {
        let mut cfg = NicConfig::new(ip.parse().unwrap());
        cfg.interface_minor = minor;
        Nic::open(Arc::new(SimDevice::new(fabric.add_nic(cfg).unwrap()))).unwrap()
    };
    let old = open("10.70.0.1", uet_sim::OLDEST_INTERFACE_MINOR);
    let new = open("10.70.0.2", uet_driver::uet_regs::INTERFACE_MINOR);
    assert!(!old.counters().iter().any(|(n, _)| *n == "TX_MSG_TOO_LONG"));
    assert!(new.counters().iter().any(|(n, _)| *n == "TX_MSG_TOO_LONG"));
    let path = socket("mixed-versions");
    let t = Telemetry::bind(&path).unwrap();
    t.add_nic(&old);
    t.add_nic(&new);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["stats", "--socket", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("TX_MSG_TOO_LONG"))
        .unwrap_or_else(|| panic!("NIC 1's TX_MSG_TOO_LONG is missing:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["TX_MSG_TOO_LONG", "-", "0"], "{text}");
}

/// `uetctl ps` names a process whose telemetry socket is busy (every place taken) instead
/// of saying that no process answers: it says why on standard error and exits 1; `ps
/// --json` gives the reason in the process's `error` and exits 1 too.
#[test]
fn ps_names_a_live_process_whose_socket_is_busy() {
    let dir = std::env::temp_dir().join(format!("uetctl-ps-busy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.sock", std::process::id()));
    let t = Telemetry::bind(&path).unwrap();
    // Every place taken, each client greeted.
    let held: Vec<UnixStream> = (0..telemetry::MAX_CLIENTS)
        .map(|_| {
            let s = UnixStream::connect(&path).unwrap();
            let mut line = String::new();
            BufReader::new(s.try_clone().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert!(line.contains("uet_nic_telemetry"), "{line}");
            s
        })
        .collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["ps", "--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let json = std::process::Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["ps", "--json", "--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    drop(held);
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("FI_EBUSY"), "{stderr}");
    assert!(
        stderr.contains(&format!("{}.sock", std::process::id())),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    let listed = v["processes"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{v}");
    assert!(
        listed[0]["error"].as_str().unwrap().contains("FI_EBUSY"),
        "{v}"
    );
    assert_eq!(
        json.status.code(),
        Some(1),
        "--json exits as the table does: {v}"
    );
}

/// A process whose telemetry accepts no connection (stopped, or stuck) and whose listen
/// backlog is full is listed by `ps` with an error, and `Client::connect` fails, each within
/// its wait: neither blocks for good in connect(2).
#[test]
fn ps_and_connect_give_up_on_a_process_whose_backlog_is_full() {
    let dir = std::env::temp_dir().join(format!("uetctl-ps-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.sock", std::process::id()));
    // A listener that never accepts: connections wait in its backlog until it is full.
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (progress, filled) = std::sync::mpsc::channel();
    let filling = path.clone();
    std::thread::spawn(move || loop {
        // The last connect blocks: the backlog is full.
        let s = UnixStream::connect(&filling);
        if progress.send(s.is_ok()).is_err() {
            return;
        }
    });
    while filled.recv_timeout(std::time::Duration::from_secs(2)) == Ok(true) {}
    let (done, answered) = std::sync::mpsc::channel();
    let asked = dir.clone();
    std::thread::spawn(move || {
        let listed = live::processes(&asked);
        let _ = done.send(listed);
    });
    let target = Target::Socket(path.clone());
    let (done2, connected) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done2.send(Client::connect(&target).err());
    });
    let wait = std::time::Duration::from_secs(30);
    let listed = answered.recv_timeout(wait);
    let refused = connected.recv_timeout(wait);
    drop(listener);
    let _ = std::fs::remove_dir_all(&dir);
    let listed = listed.expect("ps gave up within its wait").unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0]["error"].is_string(), "{}", listed[0]);
    let e = refused.expect("the connect gave up within its wait");
    let e = e.expect("connected to a listener that accepts nothing");
    assert!(e.contains("unresponsive"), "{e}");
}

/// `uetctl ps` takes one place of a process's telemetry, not two: a process serving every
/// client it may but one is listed with its NICs, not taken for busy.
#[test]
fn ps_lists_a_process_with_one_place_left() {
    let dir = std::env::temp_dir().join(format!("uetctl-ps-one-left-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.sock", std::process::id()));
    let limits = telemetry::ServeLimits {
        max_clients: 2,
        ..telemetry::ServeLimits::default()
    };
    let t = Telemetry::bind_with_limits(&path, limits).unwrap();
    let held = Raw::connect(&path);
    let listed = live::processes(&dir);
    drop(held);
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
    let listed = listed.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].get("error").is_none(), "{}", listed[0]);
    assert_eq!(listed[0]["pid"], std::process::id(), "{}", listed[0]);
}

/// Dropping the telemetry returns at once also when its socket file was removed by someone
/// else meanwhile: nothing can connect to the path to wake its accept any more.
#[test]
fn drop_returns_when_the_socket_file_was_removed() {
    let path = socket("drop-removed");
    let t = Telemetry::bind(&path).unwrap();
    assert_eq!(Raw::connect(&path).hello["nics"], 0);
    std::fs::remove_file(&path).unwrap();
    let (done, dropped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(t);
        let _ = done.send(());
    });
    assert!(
        dropped
            .recv_timeout(std::time::Duration::from_secs(3))
            .is_ok(),
        "drop still waits for the accept after 3 s"
    );
}

/// A telemetry whose socket file was removed, and whose path another socket took since (a
/// second process given the same path), leaves that socket in place when it is dropped.
#[test]
fn drop_leaves_a_socket_bound_at_its_path_since() {
    let path = socket("drop-replaced");
    let first = Telemetry::bind(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let second = Telemetry::bind(&path).unwrap();
    drop(first);
    assert!(path.exists(), "the second socket's file was removed");
    assert_eq!(
        Raw::connect(&path).hello["nics"],
        0,
        "the second still answers"
    );
    drop(second);
    assert!(!path.exists(), "the second removes its own");
}

/// Set in the child of [`a_forked_child_that_exits_leaves_the_socket`]: the telemetry
/// directory.
const FORK_CHILD: &str = "UETCTL_TELEMETRY_FORK_CHILD";
/// Prefix of the child's line saying whether its socket outlived its own forked child.
const FORK_KEPT: &str = "telemetry-socket-kept:";

/// A process that forks, and whose forked child exits normally (`exit(3)`, which runs what
/// `atexit` registered), still has its telemetry socket: the socket is the parent's, not the
/// child's to remove. The test binary runs itself again, with telemetry on, to fork.
#[test]
fn a_forked_child_that_exits_leaves_the_socket() {
    if let Some(dir) = std::env::var_os(FORK_CHILD) {
        std::env::set_var(telemetry::DIR_ENV, &dir);
        let path = telemetry::enable().unwrap();
        // SAFETY: fork(2) has no memory preconditions; the child only calls exit(3), which
        // runs the handlers atexit registered (the telemetry's compares the PID, stats and
        // removes a file, with no lock another thread may hold) and ends it.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: ends the forked child, as a C program's child does.
            unsafe { libc::exit(0) };
        }
        assert!(child > 0, "fork: {}", std::io::Error::last_os_error());
        let mut status = 0;
        // SAFETY: waits for the child forked above; `status` is a valid int to write.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(waited, child);
        println!("{FORK_KEPT}{}", path.exists());
        return;
    }
    let dir = std::env::temp_dir().join(format!("uetctl-fork-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_forked_child_that_exits_leaves_the_socket",
            "--nocapture",
        ])
        .env(FORK_CHILD, &dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kept = stdout
        .lines()
        .find_map(|l| l.strip_prefix(FORK_KEPT))
        .unwrap_or_else(|| panic!("child: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        kept.trim(),
        "true",
        "the forked child's exit removed the parent's telemetry socket"
    );
}

/// A process that goes away in the middle of an answer (it died, or was killed) is said to
/// have closed the connection, not to have answered something that is not JSON.
#[test]
fn an_answer_cut_short_is_a_closed_connection() {
    let path = socket("cut-short");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let hello = json!({"uet_nic_telemetry": telemetry::PROTOCOL, "pid": 1, "nics": 1});
        s.write_all(format!("{hello}\n").as_bytes()).unwrap();
        let mut request = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut request)
            .unwrap();
        // Half an answer, then gone.
        s.write_all(br#"{"ok": {"counters": [["TX_PACK"#).unwrap();
    });
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    let e = live::counters(&mut client, 0).unwrap_err();
    server.join().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(e.contains("closed the connection"), "{e}");
    assert!(!e.contains("not JSON"), "{e}");
}

/// `uetctl av dump` exits as diff(1) does, whatever it dumps: 0 when NIC and the other side
/// agree, 1 when it found differences (`--demo` has always exited 1 then), 2 when it could not
/// dump. A live named AV's table changed behind the AV is a difference, in text and JSON.
#[test]
fn a_live_dump_that_finds_differences_exits_1_as_a_demo_dump_does() {
    use std::process::Command;
    use uet_av::{AvName, NicAvTable};
    use uet_fwif::av_entry::AvWriteRecord;
    use uet_fwif::NicAvEntry;

    let fabric = Fabric::new();
    let nic0 = nic(&fabric, "10.76.0.1");
    let name = format!("uetctl-named-exit-{}", std::process::id());
    let mut a = nic0
        .open_named_av(AvAttr {
            name: Some(AvName::new(&name).unwrap()),
            count: 16,
            job_id: 0x78,
            ..AvAttr::default()
        })
        .unwrap();
    a.insertsvc("10.9.0.1", Some("3"), None, 0, None).unwrap();
    let path = socket("named-exit");
    let t = Telemetry::bind(&path).unwrap();
    t.add_nic(&nic0);
    let dump = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uetctl"));
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .args(["av", "dump", "--socket"])
            .arg(&path)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for json in [false, true] {
        let (code, stdout, stderr) = dump(json);
        assert_eq!(code, Some(0), "in step: {stdout}{stderr}");
    }

    // Another peer at index 7 of the NIC table, where the AV holds none.
    let stranger = stranger();
    let mut extra = AvWriteRecord::default();
    extra.index.set(7);
    extra.entry = NicAvEntry::for_peer(&stranger, 0x78);
    a.nic_mut().write_entries(&[extra]).unwrap();
    let (code, stdout, stderr) = dump(false);
    assert!(
        stdout.contains("1 differences between NIC and the AV"),
        "{stdout}"
    );
    assert_eq!(code, Some(1), "differences found: {stdout}{stderr}");
    let (code, stdout, _) = dump(true);
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["tables"][0]["av"]["differences"], 1, "{doc:#}");
    assert_eq!(code, Some(1), "differences found, in JSON: {doc:#}");
    drop(t);
    drop(a);
}

/// A live dump of the table asked for by number that stops part way (the table closed
/// between two pages) cannot say whether NIC and AV differ: it exits 2 with the reason, as
/// every other live command that could not do its work, and not 1, which says the dump found
/// differences.
#[test]
fn a_live_dump_of_a_table_asked_for_that_stops_part_way_exits_2() {
    let (path, server) = scripted("stops-part-way", |c| {
        c.hear();
        c.say(json!({"ok": {"tables": [{"table": 3, "serial": 7, "capacity": 8}]}}));
        c.hear();
        c.say(
            json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0,
                          "entries": [], "next": 4, "auth_key_slots": []}}),
        );
        c.hear();
        c.say(json!({"error": {"errno": 2, "name": "FI_ENOENT",
                               "message": "AV table 3 of serial 7 was closed since the dump began"}}));
    });
    let (out, stderr) = uetctl_against(
        &["av", "dump", "--nic", "0", "--table", "3", "--socket"],
        &path,
        server,
    );
    assert!(stderr.contains("incomplete"), "{stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
}

/// A live dump of every table names each by the serial `av_list` gave, from its first page:
/// a table the process closed after it was listed, before its first page or part way, is no
/// longer one of its tables, and the dump is of the others, with a note on stderr for each
/// table left out; the exit status is theirs.
#[test]
fn a_live_dump_leaves_out_a_table_closed_after_it_was_listed() {
    let (path, server) = scripted("closed-after-listing", |c| {
        c.hear();
        c.say(json!({"ok": {"tables": [
            {"table": 2, "serial": 5, "capacity": 8},
            {"table": 3, "serial": 7, "capacity": 8},
            {"table": 4, "serial": 9, "capacity": 8},
        ]}}));
        // Table 2 closed before its first page (the page asks for serial 5).
        let asked = c.hear();
        assert_eq!(
            (asked["table"].as_u64(), asked["serial"].as_u64()),
            (Some(2), Some(5))
        );
        c.say(json!({"error": {"errno": 2, "name": "FI_ENOENT",
                               "message": "AV table 2 of serial 5 was closed since the dump began"}}));
        // Table 3 closed part way.
        let asked = c.hear();
        assert_eq!(asked["serial"].as_u64(), Some(7));
        c.say(
            json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0,
                          "entries": [], "next": 4, "auth_key_slots": []}}),
        );
        c.hear();
        c.say(json!({"error": {"errno": 2, "name": "FI_ENOENT",
                               "message": "AV table 3 of serial 7 was closed since the dump began"}}));
        // Table 4 is there, empty.
        let asked = c.hear();
        assert_eq!(asked["serial"].as_u64(), Some(9));
        c.say(
            json!({"ok": {"table": 4, "serial": 9, "capacity": 8, "first": 0,
                          "entries": [], "next": null, "auth_key_slots": []}}),
        );
    });
    let (out, stderr) = uetctl_against(&["av", "dump", "--nic", "0", "--socket"], &path, server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.matches("not dumped").count(), 2, "{stderr}");
    assert!(
        stderr.contains("AV table 2 of serial 5 was closed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("AV table 3 of serial 7 was closed"),
        "{stderr}"
    );
    assert!(stdout.contains("AV table 4"), "{stdout}");
    assert!(
        !stdout.contains("AV table 2") && !stdout.contains("AV table 3"),
        "{stdout}"
    );
}

/// `uetctl --json av dump` of a large live table writes its document entry by entry: 100,000
/// entries (a tenth of the largest AVs) fit in 256 MiB of data with room to spare. Built as
/// one JSON value, the document took several KiB per entry, gigabytes at a million. (A
/// scripted telemetry server plays the process, answering pages as the driver does.)
#[test]
fn a_large_live_table_is_dumped_as_json_in_bounded_memory() {
    use std::process::Command;
    use uet_fwif::NicAvEntry;
    use zerocopy::IntoBytes;
    const N: u64 = 100_000;
    const PAGE: u64 = AV_DUMP_MAX as u64;
    let peer = UetAddress {
        caps: caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 3,
        fabric_addr: "10.9.9.9".parse().unwrap(),
        ri_start: 1,
        ri_count: 4,
        initiator: 0,
    };
    let entry = hex::encode(NicAvEntry::for_peer(&peer, 5).as_bytes());
    let path = socket("large");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut input = BufReader::new(s.try_clone().unwrap());
        let mut output = std::io::BufWriter::new(s);
        writeln!(
            output,
            "{}",
            json!({"uet_nic_telemetry": telemetry::PROTOCOL, "pid": 1, "program": "p", "nics": 1})
        )
        .unwrap();
        output.flush().unwrap();
        let mut line = String::new();
        while {
            line.clear();
            input.read_line(&mut line).unwrap_or(0) > 0
        } {
            let request: Value = serde_json::from_str(&line).unwrap();
            if request["cmd"] == "av_list" {
                let tables = json!({"ok": {"tables": [{"table": 3, "serial": 7, "capacity": N}]}});
                writeln!(output, "{tables}").unwrap();
            } else {
                let first = request["first"].as_u64().unwrap_or(0);
                let end = (first + PAGE).min(N);
                let entries: Vec<String> =
                    (first..end).map(|i| format!("[{i},\"{entry}\"]")).collect();
                let next = if end < N {
                    end.to_string()
                } else {
                    "null".into()
                };
                writeln!(
                    output,
                    "{{\"ok\":{{\"table\":3,\"serial\":7,\"capacity\":{N},\"first\":{first},\
                     \"entries\":[{}],\"next\":{next},\"auth_key_slots\":[]}}}}",
                    entries.join(",")
                )
                .unwrap();
            }
            output.flush().unwrap();
        }
    });
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -d 262144 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_uetctl"))
        .args(["--json", "av", "dump", "--nic", "0", "--socket"])
        .arg(&path)
        .output()
        .unwrap();
    server.join().unwrap();
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches("\"index\": ").count() as u64,
        N,
        "every entry, pretty-printed"
    );
    assert!(
        stdout.starts_with("{\n  \"pid\": 1,\n  \"tables\": [\n    {\n      \"av\": {"),
        "{}",
        &stdout[..200.min(stdout.len())]
    );
    assert!(
        stdout.ends_with("\n    }\n  ]\n}\n"),
        "the document is whole"
    );
}

/// `uetctl stats --pid` prints one column per NIC, each as wide as its widest figure: a
/// counter of more digits than the column's usual width (a byte counter of a NIC that has run
/// for a while) widens its column, and every row keeps its figures under their NIC.
#[test]
fn the_live_counters_table_stays_aligned_whatever_the_figures() {
    use std::process::Command;
    let (path, server) = scripted("wide-counters", |c| {
        let info = c.hear();
        assert_eq!(info["cmd"], "info", "{info}");
        c.say(json!({"ok": {"pid": 1, "program": "p",
                            "nics": [{"nic": 0, "open": true}, {"nic": 1, "open": true}]}}));
        for (nic, bytes) in [(0, 123_456_789_012_345_678u64), (1, 7)] {
            let ask = c.hear();
            assert_eq!(ask["cmd"], "counters", "{ask}");
            assert_eq!(ask["nic"], nic, "{ask}");
            c.say(json!({"ok": {"counters": [["TX_PACKETS", 3], ["TX_BYTES", bytes]]}}));
        }
    });
    let out = Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["stats", "--socket"])
        .arg(&path)
        .output()
        .unwrap();
    server.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    // Right-aligned figures under right-aligned headers: each column ends where its header does.
    let ends = |line: &str| -> Vec<usize> {
        let mut ends = Vec::new();
        let bytes = line.as_bytes();
        for i in 0..bytes.len() {
            if bytes[i] != b' ' && bytes.get(i + 1).is_none_or(|b| *b == b' ') {
                ends.push(i);
            }
        }
        ends
    };
    let header: Vec<usize> = ["NIC 0", "NIC 1"]
        .iter()
        .map(|h| lines[0].find(h).unwrap() + h.len() - 1)
        .collect();
    for line in &lines[1..] {
        let row = ends(line);
        assert_eq!(row[row.len() - 2..], header[..], "misaligned:\n{stdout}");
    }
}

/// A peer no AV of these tests holds, to plant in a NIC table behind its AV's back.
fn stranger() -> UetAddress {
    UetAddress {
        caps: caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 3,
        fabric_addr: "10.9.9.9".parse().unwrap(),
        ri_start: 1,
        ri_count: 4,
        initiator: 0,
    }
}

/// A table the process changes between two pages of a dump is not shown as one table: the
/// pages would mix it before and after the change (here, index 0 of the table before and the
/// last index of the table after two removals, a table that never was). `uetctl` reads it
/// again and shows the table as it is. (A relay between uetctl and the socket holds the
/// second page's request until the application has changed the table.)
#[test]
fn a_table_changed_between_two_pages_is_read_again_not_spliced() {
    use std::sync::mpsc;
    use std::time::Duration;
    let (_fabric, nic0, path, _t) = serving_one_nic("10.77.0.1", "changed-between");
    let count = AV_DUMP_MAX as usize + 2;
    let mut av = nic0
        .open_av(AvAttr {
            count,
            job_id: 5,
            ..AvAttr::default()
        })
        .unwrap();
    let addrs: Vec<u8> = (0..count as u32).flat_map(nowhere).collect();
    let mut fa = vec![0u64; count];
    assert_eq!(av.insert(&addrs, count, Some(&mut fa), 0).unwrap(), count);
    let handle = av.nic().table().handle();

    let relay_path = socket("changed-between-relay");
    let relay = std::os::unix::net::UnixListener::bind(&relay_path).unwrap();
    let (paused, pause) = mpsc::channel::<()>();
    let (resume, resumed) = mpsc::channel::<()>();
    let server_path = path.clone();
    std::thread::spawn(move || {
        let (client, _) = relay.accept().unwrap();
        let server = UnixStream::connect(&server_path).unwrap();
        let mut from_client = BufReader::new(client.try_clone().unwrap());
        let mut to_client = client;
        let mut from_server = BufReader::new(server.try_clone().unwrap());
        let mut to_server = server;
        let mut line = String::new();
        from_server.read_line(&mut line).unwrap();
        to_client.write_all(line.as_bytes()).unwrap();
        let mut held = false;
        loop {
            line.clear();
            if from_client.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let request: Value = serde_json::from_str(&line).unwrap();
            if !held && request["cmd"] == "av_dump" && request["first"].as_u64() != Some(0) {
                held = true;
                paused.send(()).unwrap();
                resumed.recv().unwrap();
            }
            to_server.write_all(line.as_bytes()).unwrap();
            line.clear();
            from_server.read_line(&mut line).unwrap();
            to_client.write_all(line.as_bytes()).unwrap();
        }
    });
    let target = Target::Socket(relay_path.clone());
    let dumping = std::thread::spawn(move || {
        let mut client = Client::connect(&target)?;
        live::av_dump(&mut client, 0, handle)
    });
    pause
        .recv_timeout(Duration::from_secs(60))
        .expect("the dump asked for a second page");
    av.remove(&[fa[0], fa[count - 1]], 0).unwrap();
    resume.send(()).unwrap();
    let dumped = dumping.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&relay_path);
    let shape = |d: &dump::AvDump| -> Vec<(u32, u32, uet_fwif::NicAvEntry)> {
        d.rows.iter().map(|r| (r.index, r.span, r.nic)).collect()
    };
    let own = dump::collect(&mut av).unwrap();
    assert_eq!(own.rows.len(), count - 2);
    assert_eq!(
        dumped.rows.first().map(|r| r.index),
        Some(1),
        "index 0 was removed before the table was read whole"
    );
    assert_eq!(shape(&dumped), shape(&own), "the table as it is now");
}

/// A table that changes while each of uetctl's reads of it runs (pages read during a change,
/// or of different `changes`) is an error saying so, never a dump: a scripted telemetry
/// server plays a process that changes its table all the time.
#[test]
fn a_table_that_changes_at_every_read_is_an_error_not_a_dump() {
    let (path, server) = scripted("changing", |c| {
        // Each read is two pages: of different `changes`, or one read during a change.
        let reads = [
            (json!(10), json!(11)),
            (json!(null), json!(12)),
            (json!(13), json!(null)),
        ];
        let mut firsts = Vec::new();
        for (one, two) in reads {
            firsts.push(c.hear()["first"].clone());
            c.say(
                json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0,
                                "changes": one, "entries": [], "next": 4,
                                "auth_key_slots": []}}),
            );
            firsts.push(c.hear()["first"].clone());
            c.say(
                json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 4,
                                "changes": two, "entries": [], "next": null}}),
            );
        }
        firsts
    });
    let mut client = Client::connect(&Target::Socket(path.clone())).unwrap();
    let e = live::av_dump(&mut client, 0, 3).unwrap_err();
    let firsts = server.join().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(e.contains("changed while it was read"), "{e}");
    assert_eq!(firsts, [0, 4, 0, 4, 0, 4], "read whole three times");
}

/// Pages that are no part of one table's dump (an entry outside the table, entries out of
/// order or before the index asked for, a page going on past the table or of another
/// capacity) are an error naming the table, not rows of a dump (a scripted telemetry server
/// plays a process that answers them).
#[test]
fn pages_that_are_no_part_of_the_table_are_an_error_not_a_dump() {
    use uet_fwif::NicAvEntry;
    use zerocopy::IntoBytes;
    let entry = hex::encode(NicAvEntry::for_peer(&stranger(), 5).as_bytes());
    let page = |first: u64, capacity: u64, entries: Value, next: Value| {
        json!({"ok": {"table": 3, "serial": 7, "capacity": capacity, "first": first,
                      "changes": 1, "entries": entries, "next": next, "auth_key_slots": []}})
    };
    let cases = [
        // Index 9 of an 8-entry table.
        vec![page(0, 8, json!([[9, entry]]), json!(null))],
        // Index 2 twice.
        vec![page(0, 8, json!([[2, entry], [2, entry]]), json!(null))],
        // The second page repeats an index of the first, before the index asked for.
        vec![
            page(0, 8, json!([[2, entry]]), json!(4)),
            page(4, 8, json!([[2, entry]]), json!(null)),
        ],
        // The second page goes on past the table.
        vec![
            page(0, 8, json!([[2, entry]]), json!(4)),
            page(4, 8, json!([]), json!(100)),
        ],
        // The second page is of another capacity.
        vec![
            page(0, 8, json!([[2, entry]]), json!(4)),
            page(4, 16, json!([[12, entry]]), json!(null)),
        ],
    ];
    for (n, pages) in cases.into_iter().enumerate() {
        let (path, server) = scripted(&format!("no-part-{n}"), move |c| {
            for p in pages {
                c.hear();
                c.say(p);
            }
        });
        let dumped = ask_scripted(path, server, |client| live::av_dump(client, 0, 3));
        let e = dumped.map(|d| d.rows).unwrap_err();
        assert!(e.contains("AV table 3 of NIC 0"), "case {n}: {e}");
    }
}

/// A page whose `next` is no index to go on from (negative, fractional, a string) or that
/// lacks it is an error naming the table, not the end of the dump: taken for the end, the
/// entries the pages after it hold were left out and the dump shown as the whole table,
/// exit 0 (a scripted telemetry server plays a process that answers so).
#[test]
fn a_page_whose_next_is_no_index_is_an_error_not_the_end() {
    for (n, next) in [json!(-1), json!(2.5), json!("4"), Value::Null]
        .into_iter()
        .enumerate()
    {
        let (path, server) = scripted(&format!("bad-next-{n}"), move |c| {
            c.hear();
            c.say(json!({"ok": {"tables": [{"table": 3, "serial": 7, "capacity": 8}]}}));
            c.hear();
            let mut page = json!({"table": 3, "serial": 7, "capacity": 8, "first": 0,
                                  "changes": 1, "entries": [], "auth_key_slots": []});
            // Null here stands for no `next` at all.
            if !next.is_null() {
                page["next"] = next;
            }
            c.say(json!({ "ok": page }));
        });
        let (out, stderr) =
            uetctl_against(&["av", "dump", "--nic", "0", "--socket"], &path, server);
        assert_eq!(out.status.code(), Some(2), "case {n}: {stderr}");
        assert!(stderr.contains("AV table 3 of NIC 0"), "case {n}: {stderr}");
        assert!(stderr.contains("next"), "case {n}: {stderr}");
    }
}

/// A process that trickles its answer, a byte at a time each well within the wait for the
/// next, does not keep uetctl: the whole answer must come within the wait, and an answer that
/// would take a minute is an error saying the process did not answer in time. (A scripted
/// telemetry server trickles; it stops when uetctl has gone.)
#[test]
fn an_answer_trickled_byte_by_byte_is_given_up() {
    use std::time::Duration;
    let (path, server) = scripted("trickle", |c| {
        c.hear();
        let counters: Vec<Value> = (0..12).map(|i| json!([format!("C{i}"), i])).collect();
        let answer = format!("{}\n", json!({"ok": {"counters": counters}}));
        assert!(answer.len() > 100);
        for b in answer.bytes() {
            if c.output.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(400));
        }
    });
    let r = ask_scripted(path, server, |client| live::counters(client, 0));
    let e = r.unwrap_err();
    assert!(e.contains("did not answer within"), "{e}");
}

/// Figures a process sends that no driver would (an endpoint's resource indices ending past
/// 64 bits, a symmetric range of 2^32 - 1 services per node whose members' services pass 32
/// bits) are shown as they are: `uetctl ep list` and `uetctl av dump` do not panic on them. (A
/// scripted telemetry server plays the process.)
#[test]
fn figures_past_their_width_are_shown_not_a_panic() {
    use uet_fwif::av_entry::entry_flags;
    use uet_fwif::NicAvEntry;
    use zerocopy::IntoBytes;
    let info = json!({"ok": {"protocol": 1, "pid": 1, "program": "p",
                             "nics": [{"nic": 0, "open": true}]}});
    let (path, server) = scripted("wide-ep", {
        let info = info.clone();
        move |c| {
            c.hear();
            c.say(info);
            c.hear();
            c.say(json!({"ok": {"endpoints": [{
                "endpoint": 1, "type": "rdm", "roles": 3, "address": "a",
                "fabric_addr": "10.9.9.9", "pid_on_fep": 3, "ri_start": u64::MAX,
                "ri_count": 4, "initiator": 0, "job_id": 5, "av_table": null,
                "msix_vector": null, "counters": null, "counters_error": "not read"}]}}));
        }
    });
    let (out, stderr) = uetctl_against(&["ep", "list", "--socket"], &path, server);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&u64::MAX.to_string()));

    // Two members of one range, of services 2^32 - 2 and 2^32 - 1 (mod 2^32 - 1: the second
    // is service 0 of the next node).
    let member = |index: u32| {
        let mut e = NicAvEntry::for_peer(&stranger(), 5);
        e.flags.set(e.flags.get() | entry_flags::RANGE);
        e.range_first.set(0);
        e.range_count.set(2);
        e.range_svc.set(u32::MAX);
        e.range_offset.set(u32::MAX - 1);
        json!([index, hex::encode(e.as_bytes())])
    };
    let (path, server) = scripted("wide-range", move |c| {
        c.hear();
        c.say(info);
        c.hear();
        c.say(json!({"ok": {"tables": [{"table": 3, "serial": 7, "capacity": 8}]}}));
        c.hear();
        c.say(
            json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0, "changes": 1,
                            "entries": [member(0), member(1)], "next": null,
                            "auth_key_slots": []}}),
        );
    });
    let (out, stderr) = uetctl_against(&["av", "dump", "--socket"], &path, server);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The two carry the same PIDonFEP and fabric address, which no two members of a range
    // do (a member of the next node has the next address): each is shown as it is.
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        row_line(&text, "0").split_whitespace().nth(1),
        Some("yes"),
        "{text}"
    );
    assert_eq!(
        row_line(&text, "1").split_whitespace().nth(1),
        Some("yes"),
        "{text}"
    );
}

/// A register the process's driver read that this uetctl's map does not have (one a later
/// minor version of the interface added) is listed by its offset and value, the rest decoded
/// as ever, instead of failing `regs --pid` as a whole; a pair that is no `[offset, value]`
/// of a 32-bit offset is still an error. (A scripted telemetry server plays the process.)
#[test]
fn regs_lists_a_register_it_does_not_know_by_offset() {
    use uet_driver::uet_regs::REGISTERS;
    let unknown = (0u32..)
        .step_by(4)
        .map(|o| o + 0x4000)
        .find(|o| {
            REGISTERS
                .iter()
                .all(|r| r.offset != *o && r.offset + 4 != *o)
        })
        .unwrap();
    let info = json!({"ok": {"protocol": 1, "pid": 1, "program": "p",
                             "nics": [{"nic": 0, "open": true}]}});
    let answer = move |regs: Value| {
        let info = info.clone();
        move |c: &mut Script| {
            c.hear();
            c.say(info);
            c.hear();
            c.say(json!({"ok": {"interface_minor": 99, "regs": regs}}));
        }
    };
    let (path, server) = scripted(
        "newer-regs",
        answer(json!([[0, 0x0001_fffe], [unknown, 0xabcd]])),
    );
    let (out, stderr) = uetctl_against(&["regs", "--socket"], &path, server);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("vendor_id=0xfffe"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("{unknown:#06x}")))
        .unwrap_or_else(|| panic!("no row of {unknown:#x}: {text}"));
    assert!(
        row.contains("0xabcd") && row.contains("not in this uetctl"),
        "{row}"
    );

    let (path, server) = scripted("newer-regs-json", answer(json!([[unknown, 7]])));
    let (out, stderr) = uetctl_against(&["--json", "regs", "--socket"], &path, server);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reg = &doc["nics"][0]["registers"][0];
    assert_eq!(reg["offset"], unknown);
    assert_eq!(reg["value"], 7);
    assert!(reg["name"].is_null(), "{doc}");

    for bad in [json!([[1u64 << 32, 7]]), json!([[0]]), json!([["ID", 7]])] {
        let (path, server) = scripted("bad-regs", answer(bad.clone()));
        let (out, stderr) = uetctl_against(&["regs", "--socket"], &path, server);
        assert_ne!(out.status.code(), Some(0), "{bad}");
        assert!(stderr.contains("bad register"), "{bad}: {stderr}");
    }
}

/// An endpoint the process sent without its resource indices, initiator or JobID (another
/// driver version, a context that has none yet) shows `-` for each, as it does for a missing
/// string, not `0..0` and `0x0`, which read as values the endpoint has. (A scripted
/// telemetry server plays the process.)
#[test]
fn ep_list_shows_a_figure_the_process_did_not_send_as_missing() {
    let (path, server) = scripted("sparse-ep", move |c| {
        c.answer_hello();
        c.hear();
        c.say(json!({"ok": {"endpoints": [{
            "endpoint": 1, "type": "rdm", "roles": 3, "address": "a",
            "fabric_addr": "10.9.9.9", "pid_on_fep": 3, "ri_start": 16,
            "av_table": null, "msix_vector": null, "counters": null,
            "counters_error": "not read"}]}}));
    });
    let (out, stderr) = uetctl_against(&["ep", "list", "--socket"], &path, server);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.contains("10.9.9.9"))
        .unwrap_or_else(|| panic!("no row: {text}"))
        .split_whitespace()
        .collect();
    // NIC, EP, TYPE, FABRIC ADDRESS, PIDonFEP, then the range (its count missing), the
    // initiator and the JobID.
    assert_eq!(row.get(5..8), Some(&["-", "-", "-"][..]), "{text}");
}

/// A table handle past 32 bits in `av_list`, or an auth-key slot past 16 bits in a page of
/// `av_dump`, is an error naming it: cut to its low bits it would name another table, or
/// another slot, and the dump would show that one as this one's. (A scripted telemetry
/// server plays the process.)
#[test]
fn a_handle_or_slot_past_its_width_is_an_error_not_another() {
    use uet_fwif::auth_key::AuthKeyEntry;
    use uet_fwif::NicAvEntry;
    use zerocopy::IntoBytes;
    let handle = (1u64 << 32) + 3;
    let (path, server) = scripted("wide-handle", move |c| {
        c.hear();
        c.say(json!({"ok": {"tables": [{"table": handle, "serial": 7, "capacity": 8}]}}));
    });
    let listed = ask_scripted(path, server, |client| live::tables(client, 0));
    let e = listed.unwrap_err();
    assert!(e.contains(&handle.to_string()), "{e}");

    let entry = hex::encode(NicAvEntry::for_peer(&stranger(), 5).as_bytes());
    let key = hex::encode(AuthKeyEntry::default().as_bytes());
    let slot = (1u64 << 16) + 2;
    let (path, server) = scripted("wide-slot", move |c| {
        c.hear();
        c.say(
            json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0, "changes": 1,
                            "entries": [[0, entry]], "next": null,
                            "auth_key_slots": [[slot, key]]}}),
        );
    });
    let dumped = ask_scripted(path, server, |client| live::av_dump(client, 0, 3));
    let e = dumped.map(|d| d.nic_keys).unwrap_err();
    assert!(e.contains(&slot.to_string()), "{e}");
}

/// A process whose NIC no longer answers reads all ones from its BAR0 and sends them:
/// `uetctl regs --socket` says the NIC does not answer, with status 2, instead of showing
/// all ones decoded as the NIC's registers. (A scripted telemetry server plays the process.)
#[test]
fn live_registers_of_a_nic_that_reads_all_ones_are_an_error() {
    use uet_driver::uet_regs::REGISTERS;
    let regs: Vec<Value> = REGISTERS
        .iter()
        .map(|r| json!([r.offset, u64::from(u32::MAX)]))
        .collect();
    let (out, stderr) = regs_of_a_scripted_process("all-ones", 255, regs, false);
    assert_regs_refused(&out, &stderr, "all ones", "all ones");
}

/// `uetctl regs --socket` (with `--json` when `json_output`) against a scripted process whose
/// NIC 0 answers `regs` at host interface 1.`interface_minor`: what it printed, and its
/// stderr.
fn regs_of_a_scripted_process(
    name: &str,
    interface_minor: u8,
    regs: Vec<Value>,
    json_output: bool,
) -> (std::process::Output, String) {
    let (path, server) = scripted(name, move |c| {
        c.answer_hello();
        c.hear();
        c.say(json!({"ok": {"interface_minor": interface_minor, "regs": regs}}));
    });
    let args: &[&str] = if json_output {
        &["--json", "regs", "--socket"]
    } else {
        &["regs", "--socket"]
    };
    uetctl_against(args, &path, server)
}

/// The registers were refused: status 2, nothing on stdout, and stderr naming NIC 0 and
/// `said`.
fn assert_regs_refused(out: &std::process::Output, stderr: &str, said: &str, case: &str) {
    assert_eq!(out.status.code(), Some(2), "{case}: {stderr}");
    assert!(
        stderr.contains("NIC 0") && stderr.contains(said),
        "{case}: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{case}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A process's NIC whose `ID` names another device, or whose `REVISION` another interface
/// major version, has registers this uetctl's map does not describe: `uetctl regs --socket`
/// refuses them with what it read and status 2, as `regs --vfio` refuses such a function,
/// instead of showing them decoded as a uet-nic's of this major version. (A scripted
/// telemetry server plays the process.)
#[test]
fn live_registers_of_another_device_or_major_version_are_an_error() {
    use uet_driver::uet_regs::{ID, INTERFACE_MAJOR, REGISTERS, REVISION};
    let ours = 0x0001_fffe_u64;
    let revision = |major: u8| u64::from(major) << 8 | 7 << 16;
    let cases = [
        (0x1234_8086, revision(INTERFACE_MAJOR), "0x8086"),
        (ours, revision(INTERFACE_MAJOR + 1), "2.x"),
    ];
    for (n, (id, rev, said)) in cases.into_iter().enumerate() {
        let regs: Vec<Value> = REGISTERS
            .iter()
            .map(|r| match r.offset {
                o if o == ID.offset() => json!([o, id]),
                o if o == REVISION.offset() => json!([o, rev]),
                o => json!([o, 0]),
            })
            .collect();
        for json_output in [false, true] {
            let name = format!("other-nic-{n}-{json_output}");
            let (out, stderr) = regs_of_a_scripted_process(&name, 7, regs.clone(), json_output);
            assert_regs_refused(&out, &stderr, said, &format!("case {n}"));
        }
    }
}

/// A process that names a counter twice, with two values, has no one value to show for it:
/// `uetctl stats --socket` refuses the answer with status 2, in text and in JSON alike,
/// instead of the text showing the first value and the JSON the last. (A scripted telemetry
/// server plays the process.)
#[test]
fn a_counter_named_twice_is_an_error_in_text_and_json_alike() {
    for json_output in [false, true] {
        let (path, server) = scripted(&format!("counter-twice-{json_output}"), |c| {
            c.answer_hello();
            c.hear();
            c.say(json!({"ok": {"counters": [["TX_FRAMES", 1], ["TX_FRAMES", 2]]}}));
        });
        let args: &[&str] = if json_output {
            &["--json", "stats", "--socket"]
        } else {
            &["stats", "--socket"]
        };
        let (out, stderr) = uetctl_against(args, &path, server);
        assert_eq!(
            out.status.code(),
            Some(2),
            "json {json_output}: {stderr}\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            stderr.contains("NIC 0") && stderr.contains("TX_FRAMES"),
            "{stderr}"
        );
    }
}

/// A dump whose pages give one auth-key slot twice (the NIC has one entry per slot) is an
/// error naming the slot, not a dump listing the slot twice, with an entry bound to it shown
/// with the JobID of whichever came first. (A scripted telemetry server plays the process.)
#[test]
fn an_auth_key_slot_given_twice_is_an_error_not_two_slots() {
    use uet_fwif::auth_key::AuthKeyEntry;
    use uet_fwif::NicAvEntry;
    use zerocopy::IntoBytes;
    let entry = hex::encode(NicAvEntry::for_peer(&stranger(), 5).as_bytes());
    let key = |job: u32| {
        let mut k = AuthKeyEntry::default();
        k.job_id.set(job);
        hex::encode(k.as_bytes())
    };
    let slots = json!([[2, key(0x51)], [2, key(0x52)]]);
    let (path, server) = scripted("slot-twice", move |c| {
        c.hear();
        c.say(
            json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0, "changes": 1,
                            "entries": [[0, entry]], "next": null, "auth_key_slots": slots}}),
        );
    });
    let dumped = ask_scripted(path, server, |client| live::av_dump(client, 0, 3));
    let e = dumped.map(|d| d.nic_keys).unwrap_err();
    assert!(
        e.contains("AV table 3 of NIC 0") && e.contains("slot 2"),
        "{e}"
    );
}

/// A value past the 32 bits of the register the process sends it for is no value that
/// register reads: `uetctl regs --socket` refuses it naming the register, status 2, instead
/// of showing it with fields decoded from its low bits. (A scripted telemetry server plays
/// the process.)
#[test]
fn a_register_value_past_its_width_is_an_error() {
    use uet_driver::uet_regs::{Width, REGISTERS};
    let reg = REGISTERS
        .iter()
        .find(|r| r.width == Width::W32 && r.offset > 4)
        .expect("a 32-bit register");
    let regs = json!([[0, 0x0001_fffe], [reg.offset, 1u64 << 40]]);
    let (path, server) = scripted("wide-value", move |c| {
        c.answer_hello();
        c.hear();
        c.say(json!({"ok": {"interface_minor": 7, "regs": regs}}));
    });
    let (out, stderr) = uetctl_against(&["regs", "--socket"], &path, server);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.contains(reg.name), "{stderr}");
}

/// Text a process sends (a named AV's name, which may hold any character but NUL, a
/// counter's name, an error's message) is shown with its control characters escaped: a
/// newline in it cannot start a line that reads as a row of the NIC's table or counters, nor
/// an escape sequence steer the terminal. (A scripted telemetry server plays the process.)
#[test]
fn text_a_process_sends_cannot_start_lines_of_its_own() {
    use uet_fwif::NicAvEntry;
    use zerocopy::IntoBytes;
    let forged = "0  yes  10.66.66.66";
    let entry = hex::encode(NicAvEntry::for_peer(&stranger(), 5).as_bytes());
    let name = format!("job\n{forged}\u{1b}[2J");
    let (path, server) = scripted("forged-av", move |c| {
        c.hear();
        c.say(
            json!({"ok": {"tables": [{"table": 3, "serial": 7, "capacity": 8,
                                        "named": {"name": name, "generation": 1}}]}}),
        );
        c.hear();
        c.say(
            json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0, "changes": 1,
                          "entries": [[1, entry]], "next": null, "auth_key_slots": [],
                          "named": {"name": name, "generation": 1, "entry_flags": 1}}}),
        );
    });
    let (out, stderr) = uetctl_against(&["av", "dump", "--nic", "0", "--socket"], &path, server);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(text.contains("job\\n0  yes"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with(forged)) && !text.contains('\u{1b}'),
        "{text}"
    );

    let (path, server) = scripted("forged-counter", move |c| {
        c.answer_hello();
        c.hear();
        c.say(json!({"ok": {"counters": [["TX_FRAMES\nRX_FRAMES 99", 1]]}}));
    });
    let (out, stderr) = uetctl_against(&["stats", "--socket"], &path, server);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(text.contains("TX_FRAMES\\nRX_FRAMES 99"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("RX_FRAMES")), "{text}");

    let (path, server) = scripted("forged-error", move |c| {
        c.hear();
        c.say(json!({"error": {"errno": 22, "name": "FI_EINVAL",
                               "message": "no\nuetctl: all is well"}}));
    });
    let (out, stderr) = uetctl_against(&["regs", "--socket"], &path, server);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no\\nuetctl: all is well"), "{stderr}");
    assert!(
        !stderr.lines().any(|l| l.starts_with("uetctl: all is well")),
        "{stderr}"
    );

    let (path, server) = scripted("forged-endpoint", move |c| {
        c.answer_hello();
        c.hear();
        c.say(json!({"ok": {"endpoints": [{"endpoint": 1, "type": "msg",
                                           "fabric_addr": "10.0.0.1\n7    9",
                                           "counters_error": "gone\n7    10"}]}}));
    });
    let (out, stderr) = uetctl_against(&["ep", "list", "--socket"], &path, server);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!text.lines().any(|l| l.starts_with("7 ")), "{text}");

    // `ps` of a directory holding one process's socket, whose program name holds a newline.
    let dir = std::env::temp_dir().join(format!("uetctl-ps-forged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(dir.join("1.sock")).unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut c = Script {
            input: BufReader::new(s.try_clone().unwrap()),
            output: s,
        };
        c.say(
            json!({"uet_nic_telemetry": telemetry::PROTOCOL, "pid": 1, "program": "p",
                     "nics": 1}),
        );
        c.hear();
        c.say(json!({"ok": {"pid": 1, "program": "p\n2        forged",
                            "nics": [{"nic": 0, "open": true, "fabric_addr": "10.0.0.1",
                                      "interface_minor": 19, "av_tables": []}]}}));
    });
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["ps", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("p\\n2"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("2 ")), "{text}");
}

/// `uetctl stats --socket` of a process that sends a great many counters (100,000 in an
/// answer of 2 MB, well within the largest answer taken) shows them in time linear in their
/// number: it took minutes, looking each name up among all the others, where the JSON of
/// the same answer takes a second. (A scripted telemetry server plays the process.)
#[test]
fn a_great_many_counters_are_shown_in_linear_time() {
    const COUNTERS: u64 = 100_000;
    let counters: Vec<Value> = (0..COUNTERS).map(|i| json!([format!("C{i}"), i])).collect();
    let (path, server) = scripted("many-counters", move |c| {
        c.answer_hello();
        c.hear();
        c.say(json!({"ok": {"counters": counters}}));
    });
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_uetctl"))
        .args(["stats", "--socket"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let text = reader.join().unwrap();
    server.join().unwrap();
    let _ = std::fs::remove_file(&path);
    let status = status.expect("stats still running after 30 s");
    assert!(status.success(), "{status}");
    assert_eq!(
        text.lines().count() as u64,
        COUNTERS + 1,
        "a header and a row each"
    );
}

/// An auth-key slot past the most any NIC has (`MAX_AUTH_KEY_SLOTS`, 256) is no slot of the
/// NIC's: a dump whose pages give one is an error naming it, not a dump listing it (and
/// looking every keyed entry up among tens of thousands of such slots). (A scripted
/// telemetry server plays the process.)
#[test]
fn an_auth_key_slot_past_the_nics_slots_is_an_error() {
    use uet_fwif::auth_key::{AuthKeyEntry, MAX_AUTH_KEY_SLOTS};
    use uet_fwif::NicAvEntry;
    use zerocopy::IntoBytes;
    let entry = hex::encode(NicAvEntry::for_peer(&stranger(), 5).as_bytes());
    let key = hex::encode(AuthKeyEntry::default().as_bytes());
    let slot = MAX_AUTH_KEY_SLOTS;
    let (path, server) = scripted("slot-past-the-nics", move |c| {
        c.hear();
        c.say(
            json!({"ok": {"table": 3, "serial": 7, "capacity": 8, "first": 0, "changes": 1,
                            "entries": [[0, entry]], "next": null,
                            "auth_key_slots": [[slot, key]]}}),
        );
    });
    let dumped = ask_scripted(path, server, |client| live::av_dump(client, 0, 3));
    let e = dumped.map(|d| d.nic_keys).unwrap_err();
    assert!(
        e.contains("AV table 3 of NIC 0") && e.contains(&slot.to_string()),
        "{e}"
    );
}
