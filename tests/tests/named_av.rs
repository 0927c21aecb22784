//! A named AV shared by two processes, each on its own simulated NIC: the child opens it
//! read-only and sees the parent's addresses at the same fi_addr values, in its mirror and in
//! its own NIC table; then sees the parent's removal once it catches up.
//!
//! The test binary runs itself again as the child (the environment variable [`CHILD`] selects
//! the role); the two talk over the child's stdin and stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use uet_av::{AvAttr, AvName, FiErrno, FI_READ};
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::UetAddress;
use uet_tests::{fabric, open_nic};

/// Set in the child: `<AV name>;<index>=<peer>,…`, what the child must find.
const CHILD: &str = "UET_NAMED_AV_CHILD";
/// Prefix of the child's protocol lines (libtest writes lines of its own).
const TAG: &str = "named-av-child:";
const JOB: u32 = 0x77;
const WAIT: Duration = Duration::from_secs(60);

fn peer(n: u32) -> [u8; 32] {
    UetAddress {
        caps: caps::HPC,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: n as u16,
        fabric_addr: std::net::Ipv4Addr::new(10, 9, 0, n as u8).into(),
        ri_start: 1,
        ri_count: 4,
        initiator: n,
    }
    .to_bytes()
    .expect("valid address")
}

fn attr(name: &str) -> AvAttr {
    AvAttr {
        name: Some(AvName::new(name).expect("valid name")),
        count: 64,
        job_id: JOB,
        ..AvAttr::default()
    }
}

/// Run this test binary's test `test` as a child in `role`, its stdin and stdout piped.
fn spawn_child(test: &str, role: String) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the child")
}

/// The child's protocol lines, as they come.
fn child_lines(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may have started the line ("test … ... ") before the child's output.
            if let Some((_, msg)) = line.split_once(TAG) {
                if tx.send(msg.trim().to_string()).is_err() {
                    break;
                }
            }
        }
    });
    rx
}

/// Waits for the child when dropped, killing it first if the test is failing, so a failed
/// run leaves no process behind (and the segment goes with the parent's handle).
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

#[test]
fn a_crashed_process_leaves_nothing_behind() {
    if let Ok(name) = std::env::var(CHILD) {
        // The child: create the AV, insert, and die without closing anything.
        let (_fabric, fns) = fabric(1);
        let nic = open_nic(&fns[0]);
        let mut av = nic.open_named_av(attr(&name)).expect("create");
        let buf: Vec<u8> = (1..=3).flat_map(peer).collect();
        assert_eq!(av.insert(&buf, 3, None, 0).unwrap(), 3);
        println!("{TAG} inserted");
        std::process::abort();
    }
    let name = format!("test-crash-{}", std::process::id());
    let path = uet_av::named::segment::path_of(&name);
    let mut child = spawn_child("a_crashed_process_leaves_nothing_behind", name.clone());
    let rx = child_lines(&mut child);
    let mut child = Reap(child);
    assert_eq!(
        rx.recv_timeout(WAIT).expect("the child inserts"),
        "inserted"
    );
    let status = child.0.wait().expect("child exit");
    assert!(!status.success(), "the child aborts");
    assert!(path.exists(), "nobody closed it");

    // The next open finds nobody attached: the AV died with its last process.
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let e = nic
        .open_named_av(AvAttr {
            flags: FI_READ,
            ..attr(&name)
        })
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOENT, "{e}");
    assert!(!path.exists(), "the abandoned segment was removed");
    let mut av = nic.open_named_av(attr(&name)).expect("create afresh");
    assert_eq!(av.len().unwrap(), 0);
    drop(av);
    assert!(!path.exists());
}

#[test]
fn two_processes_share_fi_addrs() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    let name = format!("test-two-proc-{}", std::process::id());
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let mut av = nic.open_named_av(attr(&name)).expect("create the named AV");

    // Six peers at 0..5, then a hole at 2 filled by a seventh: the child must see 7 at 2.
    let buf: Vec<u8> = (1..=6).flat_map(peer).collect();
    let mut out = [0u64; 6];
    assert_eq!(av.insert(&buf, 6, Some(&mut out), 0).unwrap(), 6);
    assert_eq!(out, [0, 1, 2, 3, 4, 5]);
    av.remove(&[2], 0).unwrap();
    let mut fa = [0u64; 1];
    av.insert(&peer(7), 1, Some(&mut fa), 0).unwrap();
    assert_eq!(fa, [2]);
    let expect = [(0, 1), (1, 2), (2, 7), (3, 4), (4, 5), (5, 6)];
    assert!(av.verify_nic().unwrap().is_empty());

    let spec = format!(
        "{name};{}",
        expect
            .iter()
            .map(|(i, n)| format!("{i}={n}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut child = spawn_child("two_processes_share_fi_addrs", spec);
    let rx = child_lines(&mut child);
    let mut stdin = child.stdin.take().expect("child stdin");
    let mut child = Reap(child);
    let next = |what: &str| {
        rx.recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("the child did not report '{what}' within {WAIT:?}"))
    };
    assert_eq!(next("ready"), "ready");
    assert_eq!(av.handles(), 2, "the child holds the AV");

    av.remove(&[3], 0).unwrap();
    writeln!(stdin, "removed 3").expect("tell the child");
    stdin.flush().expect("flush");
    assert_eq!(next("done"), "done");
    let status = child.0.wait().expect("child exit");
    assert!(status.success(), "child failed: {status}");
    assert_eq!(av.handles(), 1, "the child's handle is gone");
    let path = av.segment_path().to_path_buf();
    drop(av);
    assert!(!path.exists(), "the last close removed the segment");
}

/// The child: open the AV read-only on a NIC of its own, check it, wait for the parent's
/// removal, check again.
fn child(spec: &str) {
    let (name, table) = spec.split_once(';').expect("spec");
    let expect: Vec<(u64, u32)> = table
        .split(',')
        .map(|kv| {
            let (i, n) = kv.split_once('=').expect("index=peer");
            (i.parse().expect("index"), n.parse().expect("peer"))
        })
        .collect();
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let mut av = nic
        .open_named_av(AvAttr {
            flags: FI_READ,
            count: 0,
            ..attr(name)
        })
        .expect("open the named AV read-only");
    assert_eq!(av.capacity(), 64, "count 0 takes the AV's size");
    assert_eq!(av.len().unwrap(), expect.len());
    for &(fi_addr, n) in &expect {
        let mut out = [0u8; 32];
        let mut len = out.len();
        av.lookup(fi_addr, &mut out, &mut len).expect("lookup");
        assert_eq!(out, peer(n), "fi_addr {fi_addr}");
    }
    // This process's NIC table, read back with AV_READ, is what its mirror says.
    assert!(av.verify_nic().unwrap().is_empty());
    let valid = (0..64)
        .filter(|&i| av.av().mirror_entry(i).is_some_and(|e| e.is_valid()))
        .count();
    assert_eq!(valid, expect.len());
    let e = av.insert(&peer(9), 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM);
    println!("{TAG} ready");

    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("parent's message");
    let removed: u64 = line
        .trim()
        .strip_prefix("removed ")
        .and_then(|i| i.parse().ok())
        .expect("removed <index>");
    av.sync().expect("catch up");
    let mut out = [0u8; 32];
    let mut len = out.len();
    let e = av.lookup(removed, &mut out, &mut len).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(!av.av().mirror_entry(removed as u32).unwrap().is_valid());
    assert!(
        av.verify_nic().unwrap().is_empty(),
        "the NIC entry is gone too"
    );
    assert_eq!(av.len().unwrap(), expect.len() - 1);
    println!("{TAG} done");
}

/// Two processes of a node on one named AV, each with a NIC of its own: A created it, B opened
/// it read-only and has an endpoint bound to its mirror (and buffers); and `n` peers, each a
/// NIC with an AV and an endpoint of its own.
struct TwoProcesses {
    _fabric: uet_sim::Fabric,
    a: uet_driver::SharedAv,
    b: uet_driver::SharedAv,
    nic_b: uet_driver::Nic,
    ep: uet_driver::Endpoint,
    pool: uet_driver::DmaPool,
    peers: Vec<uet_tests::Node>,
}

fn two_processes(tag: &str, n: usize) -> TwoProcesses {
    let name = format!("test-named-{tag}-{}", std::process::id());
    let (fabric, fns) = fabric(2 + n);
    let nic_a = open_nic(&fns[0]);
    let nic_b = open_nic(&fns[1]);
    let peers = fns[2..]
        .iter()
        .map(|f| uet_tests::Node::new(f.clone(), JOB, 8))
        .collect();
    let a = nic_a.open_named_av(attr(&name)).expect("create");
    let b = nic_b
        .open_named_av(AvAttr {
            flags: FI_READ,
            ..attr(&name)
        })
        .expect("open read-only");
    let ep = nic_b
        .endpoint(
            uet_driver::EndpointAttr {
                job_id: JOB,
                ..uet_driver::EndpointAttr::default()
            },
            Some(&b.av()),
        )
        .expect("endpoint on the named AV");
    let pool = uet_driver::DmaPool::new(&nic_b, 4096, 8).expect("pool");
    TwoProcesses {
        _fabric: fabric,
        a,
        b,
        nic_b,
        ep,
        pool,
        peers,
    }
}

/// fi_av(3): "an fi_addr_t returned as part of an fi_av_insert call on one process is usable
/// on another process which opens an AV of the same name". A handle whose process makes no
/// AV call after another process's change still sends where the AV says: its endpoint brings
/// the process's mirror and NIC table up to date before the send.
#[test]
fn an_endpoint_sends_where_another_process_put_the_address() {
    use uet_fwif::datapath::CompletionKind;

    let TwoProcesses {
        mut a,
        mut b,
        mut ep,
        pool,
        mut peers,
        ..
    } = two_processes("send", 2);
    for p in &mut peers {
        p.post_recvs(4);
    }
    let send = |ep: &mut uet_driver::Endpoint, text: &[u8]| {
        let mut buf = pool.alloc().expect("buffer");
        buf.fill(text).expect("fill");
        ep.post_send(0, buf, 1, 0).expect("post send");
        let done = uet_tests::poll_one(ep).expect("completion");
        assert_eq!(done.kind, CompletionKind::Send);
        assert!(done.error.is_none(), "{:?}", done.error);
    };

    // Process A inserts peer 0 at fi_addr 0; B has made no AV call since it opened.
    let mut fa = [0u64; 1];
    a.insert(&peers[0].addr(), 1, Some(&mut fa), 0).unwrap();
    assert_eq!(fa, [0]);
    send(&mut ep, b"first");
    let rx = peers[0].next_completion().expect("peer 0 receives");
    assert_eq!(rx.buffer.unwrap().to_vec().unwrap(), b"first");

    // A puts peer 1 at fi_addr 0 instead: B's next send goes there.
    a.remove(&[0], 0).unwrap();
    a.insert(&peers[1].addr(), 1, Some(&mut fa), 0).unwrap();
    assert_eq!(fa, [0]);
    send(&mut ep, b"second");
    let rx = peers[1].next_completion().expect("peer 1 receives");
    assert_eq!(rx.buffer.unwrap().to_vec().unwrap(), b"second");
    assert!(
        peers[0].next_completion().is_none(),
        "the old peer gets nothing"
    );
    // B's mirror followed as well, and holds what its NIC holds.
    assert_eq!(
        b.av()
            .iter()
            .map(|(i, x)| (i, x.to_bytes().unwrap()))
            .collect::<Vec<_>>(),
        [(0, peers[1].addr())]
    );
    assert!(b.verify_nic().unwrap().is_empty());

    // While this process holds its mirror (an AvGuard), a send does not wait for it: it goes
    // with the table as it is, and the next send after the guard catches up.
    a.remove(&[0], 0).unwrap();
    a.insert(&peers[0].addr(), 1, Some(&mut fa), 0).unwrap();
    let guard = b.av();
    send(&mut ep, b"third");
    assert!(peers[1].next_completion().is_some(), "the table as it was");
    drop(guard);
    send(&mut ep, b"fourth");
    let rx = peers[0].next_completion().expect("peer 0 receives");
    assert_eq!(rx.buffer.unwrap().to_vec().unwrap(), b"fourth");
    drop(ep);
}

/// A send refused for a full TX ring runs no catch-up: an application retrying on a full
/// ring is told so at once, and the first send that goes catches up.
#[test]
fn a_send_refused_for_a_full_ring_leaves_the_catch_up_to_the_next() {
    use uet_fwif::datapath::CompletionKind;

    let TwoProcesses {
        mut a,
        b,
        nic_b,
        mut ep,
        mut peers,
        ..
    } = two_processes("full-ring", 2);
    let pool = uet_driver::DmaPool::new(&nic_b, 64, 80).expect("pool");
    let mut fa = [0u64; 1];
    a.insert(&peers[0].addr(), 1, Some(&mut fa), 0).unwrap();
    // Fill the ring: nothing is reaped, so every send stays in flight.
    let mut in_flight = 0;
    let refused = loop {
        let mut buf = pool.alloc().expect("buffer");
        buf.fill(b"x").expect("fill");
        match ep.post_send(fa[0], buf, 1, 0) {
            Ok(()) => in_flight += 1,
            Err((e, _)) => break e,
        }
        assert!(in_flight < 80, "the ring never filled");
    };
    assert!(
        matches!(refused, uet_driver::DriverError::Full(_)),
        "{refused:?}"
    );
    // Another process changes the AV; a send on the still-full ring is refused without
    // bringing this process's mirror up to it.
    a.insert(&peers[1].addr(), 1, Some(&mut fa), 0).unwrap();
    let mut buf = pool.alloc().expect("buffer");
    buf.fill(b"y").expect("fill");
    let (e, _) = ep
        .post_send(fa[0], buf, 1, 0)
        .expect_err("the ring is full");
    assert!(matches!(e, uet_driver::DriverError::Full(_)), "{e:?}");
    assert_eq!(b.av().len(), 1, "no catch-up for a refused send");
    for _ in 0..in_flight {
        let done = uet_tests::poll_one(&mut ep).expect("completion");
        assert_eq!(done.kind, CompletionKind::Send);
    }
    assert_eq!(b.av().len(), 2, "reading completions catches up");
    peers[1].post_recvs(1);
    let mut buf = pool.alloc().expect("buffer");
    buf.fill(b"z").expect("fill");
    ep.post_send(fa[0], buf, 1, 0).expect("post send");
    assert!(uet_tests::poll_one(&mut ep).is_some());
    let rx = peers[1].next_completion().expect("peer 1 receives");
    assert_eq!(rx.buffer.unwrap().to_vec().unwrap(), b"z");
    drop(ep);
}

/// Completions are attributed by the AV as it is when they are read for: reading them (like
/// sending) catches this process's table up first, so a message that arrives after the read
/// from a peer another process removed is FI_ADDR_NOTAVAIL, not the index the peer had, which
/// now names another peer.
#[test]
fn a_completion_read_catches_up_before_later_messages_are_attributed() {
    let TwoProcesses {
        mut a,
        mut b,
        mut ep,
        pool,
        mut peers,
        ..
    } = two_processes("source", 1);
    let x = &mut peers[0];
    for i in 0..4 {
        ep.post_recv(pool.alloc().unwrap(), i).unwrap();
    }
    let mut fa = [0u64; 1];
    a.insert(&x.addr(), 1, Some(&mut fa), 0).unwrap();
    assert_eq!(fa, [0]);
    let to_b = x.insert(&ep.address().to_bytes().unwrap());
    let recv = |ep: &mut uet_driver::Endpoint| uet_tests::poll_one(ep).expect("a receive");
    // B made no AV call: its first poll caught it up, so X's message names fi_addr 0.
    assert!(ep.poll().unwrap().is_none());
    x.send(to_b, b"one", 1);
    assert_eq!(recv(&mut ep).src_addr, 0, "X is fi_addr 0");

    // Another process puts a peer of its own at fi_addr 0 instead of X; B reads its queue.
    a.remove(&[0], 0).unwrap();
    a.insert(&peer(99), 1, Some(&mut fa), 0).unwrap();
    assert_eq!(fa, [0]);
    assert!(ep.poll().unwrap().is_none());
    x.send(to_b, b"two", 2);
    assert_eq!(
        recv(&mut ep).src_addr,
        uet_av::FI_ADDR_NOTAVAIL,
        "X is no longer in the AV"
    );
    assert_eq!(b.address(0).unwrap().to_bytes().unwrap(), peer(99));
}
