//! Peer groups (libfabric 2.x): `fi_group_addr` destinations decoded by the NIC, the group
//! carried on the wire, receives matched by group out of posting order, the host AV calls that
//! strip the group, and the limits at open, at the sender and at the target.

use std::sync::Arc;
use uet_av::{fi_group_addr, fi_rx_addr, AvAttr, FiAddr, FiErrno, FI_ADDR_UNSPEC};
use uet_driver::backend::sim::SimDevice;
use uet_driver::{Av, CqEvent, CqOp, DmaPool, Endpoint, EndpointAttr, Nic};
use uet_fwif::datapath::{CompletionKind, LocalStatus};
use uet_fwif::ReturnCode;
use uet_regs::{
    RX_BAD_GROUP, RX_NO_BUFFER, RX_PACKETS, RX_UNEXPECTED, TX_BAD_GROUP, TX_ERRORS, TX_PACKETS,
};
use uet_sim::{Fabric, NicConfig, SimFunction};
use uet_tests::{nic_addr, pattern};

const JOB: u32 = 0x00_6A01;

/// A NIC whose AV has `max_group_id` (0: no peer groups), an endpoint bound to it, buffers.
struct GroupNode {
    nic: Nic,
    av: Av,
    ep: Endpoint,
    pool: DmaPool,
    function: SimFunction,
}

impl GroupNode {
    fn new(function: SimFunction, max_group_id: u32) -> Self {
        let nic = Nic::open(Arc::new(SimDevice::new(function.clone()))).expect("open NIC");
        let av = nic
            .open_av(AvAttr {
                count: 8,
                job_id: JOB,
                max_group_id,
                ..AvAttr::default()
            })
            .expect("open AV");
        let ep = nic
            .endpoint(
                EndpointAttr {
                    job_id: JOB,
                    ..EndpointAttr::default()
                },
                Some(&av),
            )
            .expect("create endpoint");
        let pool = DmaPool::new(&nic, 16384, 32).expect("pool");
        GroupNode {
            nic,
            av,
            ep,
            pool,
            function,
        }
    }

    fn addr(&self) -> [u8; 32] {
        self.ep.address().to_bytes().expect("valid address")
    }

    fn insert(&mut self, other: &GroupNode) -> FiAddr {
        let mut out = [0u64; 1];
        let n = self
            .av
            .insert(&other.addr(), 1, Some(&mut out), 0)
            .expect("insert");
        assert_eq!(n, 1);
        out[0]
    }

    fn recv_group(&mut self, group: u32, context: u64) {
        let b = self.pool.alloc().expect("buffer");
        self.ep
            .post_recv_group(b, group, context)
            .expect("post group receive");
    }

    fn trecv_group(&mut self, tag: u64, group: u32, context: u64) {
        let b = self.pool.alloc().expect("buffer");
        self.ep
            .post_trecv_group(b, tag, 0, group, context)
            .expect("post group tagged receive");
    }

    fn send(&mut self, dest: FiAddr, data: &[u8], context: u64) {
        let mut b = self.pool.alloc().expect("buffer");
        b.fill(data).expect("fill");
        self.ep.post_send(dest, b, context, 0).expect("post send");
    }

    fn tsend(&mut self, dest: FiAddr, data: &[u8], tag: u64, context: u64) {
        let mut b = self.pool.alloc().expect("buffer");
        b.fill(data).expect("fill");
        self.ep
            .post_tsend(dest, b, tag, context, 0)
            .expect("post tagged send");
    }

    fn next(&mut self) -> Option<CqEvent> {
        (0..16).find_map(|_| self.ep.poll().expect("poll"))
    }

    /// The next completion, which must be a successful send.
    fn send_ok(&mut self) {
        let ev = self.next().expect("a send completion");
        assert_eq!(ev.kind, CompletionKind::Send);
        assert!(ev.error.is_none(), "{:?}", ev.error);
    }

    /// The next completion, which must be a successful receive of `kind`.
    fn received(&mut self, kind: CompletionKind) -> CqEvent {
        let ev = self.next().expect("a receive completion");
        assert_eq!(ev.kind, kind);
        assert!(ev.error.is_none(), "{:?}", ev.error);
        ev
    }

    fn counter(&self, reg: uet_regs::Reg<u64>) -> u64 {
        self.function.counter(reg)
    }
}

/// `n` NICs on one fabric; `cfg` may change each NIC's configuration.
fn nics(n: usize, cfg: impl Fn(usize, &mut NicConfig)) -> (Fabric, Vec<SimFunction>) {
    let fabric = Fabric::new();
    let fns = (0..n)
        .map(|i| {
            let mut c = NicConfig::new(nic_addr(i));
            cfg(i, &mut c);
            fabric.add_nic(c).expect("add NIC")
        })
        .collect();
    (fabric, fns)
}

/// A sender and two receivers, all with peer groups 0..=`max_group_id`; the sender has the
/// receivers at fi_addr 0 and 1, each receiver has the sender at 0.
fn trio(max_group_id: u32) -> (Fabric, GroupNode, GroupNode, GroupNode) {
    let (fabric, fns) = nics(3, |_, _| {});
    let mut it = fns.into_iter();
    let mut nodes = (0..3).map(|_| GroupNode::new(it.next().expect("NIC"), max_group_id));
    let (mut a, mut b, mut c) = (
        nodes.next().expect("a"),
        nodes.next().expect("b"),
        nodes.next().expect("c"),
    );
    assert_eq!(a.insert(&b), 0);
    assert_eq!(a.insert(&c), 1);
    assert_eq!(b.insert(&a), 0);
    assert_eq!(c.insert(&a), 0);
    (fabric, a, b, c)
}

#[test]
fn a_group_address_reaches_the_peers_buffer_of_that_group_only() {
    let (_f, mut a, mut b, mut c) = trio(7);
    assert!(b.ep.has_peer_groups());
    assert_eq!(b.ep.max_group_id(), 7);
    b.recv_group(1, 11);
    b.recv_group(2, 12);
    c.recv_group(1, 21);
    c.recv_group(2, 22);

    // fi_group_addr(1, 2): peer 1 (C), group 2: C's group-2 buffer, not the group-1 buffer
    // posted before it; B, also holding a group-2 buffer, gets nothing.
    a.send(fi_group_addr(1, 2), b"to C in 2", 1);
    a.send_ok();
    let ev = c.received(CompletionKind::Recv);
    assert_eq!((ev.context, ev.group, ev.src_addr), (22, 2, 0));
    assert_eq!(
        ev.buffer.expect("buffer").to_vec().expect("read"),
        b"to C in 2"
    );
    assert!(b.next().is_none(), "peer 0 was not addressed");

    // fi_group_addr(0, 2): B's group-2 buffer, not its group-1 buffer posted before it.
    a.send(fi_group_addr(0, 2), b"to B in 2", 2);
    a.send_ok();
    let ev = b.received(CompletionKind::Recv);
    assert_eq!((ev.context, ev.group), (12, 2));
    assert_eq!(
        ev.buffer.expect("buffer").to_vec().expect("read"),
        b"to B in 2"
    );

    // Group 3 at B: no buffer of group 3 (its group-1 buffer is not taken). The message
    // waits on the unexpected list, counted like an untagged message that finds no buffer.
    let no_buffer = b.counter(RX_NO_BUFFER);
    a.send(fi_group_addr(0, 3), b"nobody in 3", 3);
    a.send_ok();
    assert_eq!(b.counter(RX_NO_BUFFER), no_buffer + 1);
    assert!(b.next().is_none(), "nothing delivered at B");

    // Group 1 then takes B's group-1 buffer, which waited all along.
    a.send(fi_group_addr(0, 1), b"to B in 1", 4);
    a.send_ok();
    let ev = b.received(CompletionKind::Recv);
    assert_eq!((ev.context, ev.group), (11, 1));
    assert_eq!(
        ev.buffer.expect("buffer").to_vec().expect("read"),
        b"to B in 1"
    );

    // A receive without a group is a group-0 receive; a plain fi_addr is group 0.
    let buf = b.pool.alloc().expect("buffer");
    b.ep.post_recv(buf, 10).expect("post recv");
    a.send(fi_group_addr(0, 1), b"group 1, no buffer", 5);
    a.send_ok();
    assert!(
        b.next().is_none(),
        "a group-0 receive never takes a group-1 message"
    );
    // The waiting group-1 message holds up no other group.
    a.send(0, b"plain", 6);
    a.send_ok();
    let ev = b.received(CompletionKind::Recv);
    assert_eq!((ev.context, ev.group), (10, 0));
    // A buffer of each waiting message's group takes it.
    for (group, context, message) in [(3, 13, &b"nobody in 3"[..]), (1, 14, b"group 1, no buffer")]
    {
        b.recv_group(group, context);
        let ev = b.received(CompletionKind::Recv);
        assert_eq!((ev.context, ev.group), (context, group));
        assert_eq!(ev.buffer.expect("buffer").to_vec().expect("read"), message);
    }
    assert_eq!(c.ep.in_flight().1, 1, "C's group-1 buffer still waits");
}

#[test]
fn interleaved_groups_match_out_of_posting_order() {
    let (_f, mut a, mut b, _c) = trio(15);
    // Posting order: g1, g2, g1, g3.
    b.recv_group(1, 1);
    b.recv_group(2, 2);
    b.recv_group(1, 3);
    b.recv_group(3, 4);
    // Arrival order: g3, g2 (a multi-packet message), g1, g1.
    let big = pattern(3 * 4096 + 100, 7);
    a.send(fi_group_addr(0, 3), b"three", 1);
    a.send_ok();
    a.send(fi_group_addr(0, 2), &big, 2);
    a.send_ok();
    a.send(fi_group_addr(0, 1), b"one-a", 3);
    a.send_ok();
    a.send(fi_group_addr(0, 1), b"one-b", 4);
    a.send_ok();
    let got: Vec<(u64, u32, Vec<u8>)> = (0..4)
        .map(|_| {
            let ev = b.received(CompletionKind::Recv);
            let data = ev.buffer.expect("buffer").to_vec().expect("read");
            (ev.context, ev.group, data)
        })
        .collect();
    assert_eq!(got[0], (4, 3, b"three".to_vec()));
    assert_eq!(got[1], (2, 2, big));
    assert_eq!(got[2], (1, 1, b"one-a".to_vec()));
    assert_eq!(got[3], (3, 1, b"one-b".to_vec()));

    // Tagged: the same tag in two groups; the group-2 message passes the group-1 receive.
    b.trecv_group(0x55, 1, 21);
    b.trecv_group(0x55, 2, 22);
    a.tsend(fi_group_addr(0, 2), b"tag 55 in 2", 0x55, 5);
    a.send_ok();
    let ev = b.received(CompletionKind::TaggedRecv);
    assert_eq!(
        (ev.context, ev.op, ev.tag, ev.group),
        (22, CqOp::TaggedRecv, 0x55, 2)
    );

    // A tagged message of a group with no receive waits unexpected, with its group: a
    // matching tag of another group does not take it, one of its group does at once.
    let unexpected = b.counter(RX_UNEXPECTED);
    a.tsend(fi_group_addr(0, 9), b"tag 77 in 9", 0x77, 6);
    a.send_ok();
    assert_eq!(b.counter(RX_UNEXPECTED), unexpected + 1);
    b.trecv_group(0x77, 8, 31);
    assert!(
        b.next().is_none(),
        "group 8 does not take a group-9 message"
    );
    b.trecv_group(0x77, 9, 32);
    let ev = b.received(CompletionKind::TaggedRecv);
    assert_eq!((ev.context, ev.tag, ev.group), (32, 0x77, 9));
    assert_eq!(
        ev.buffer.expect("buffer").to_vec().expect("read"),
        b"tag 77 in 9"
    );
    // The group-1 tagged receive still waits, and takes a group-1 message.
    a.tsend(fi_group_addr(0, 1), b"tag 55 in 1", 0x55, 7);
    a.send_ok();
    let ev = b.received(CompletionKind::TaggedRecv);
    assert_eq!((ev.context, ev.group), (21, 1));
}

/// Receives of one group complete while a receive of another group waits: the RX ring's
/// entries are the NIC's again as soon as it has read them onto its posted list, so the
/// endpoint keeps taking receives round the ring for as long as the waiting one waits, and
/// the waiting one still takes its group's message at the end.
#[test]
fn a_waiting_receive_of_one_group_does_not_block_the_ring_for_the_others() {
    let (_f, mut a, mut b, _c) = trio(7);
    b.recv_group(1, 1);
    let entries = 1u64 << EndpointAttr::default().rx_log2;
    for i in 0..2 * entries {
        let buf = b.pool.alloc().expect("buffer");
        if let Err((e, _)) = b.ep.post_recv_group(buf, 0, 100 + i) {
            panic!("receive {i} of group 0 refused while one of group 1 waits: {e}");
        }
        a.send(fi_group_addr(0, 0), b"zero", i);
        a.send_ok();
        let ev = b.received(CompletionKind::Recv);
        assert_eq!((ev.context, ev.group), (100 + i, 0));
    }
    // A second group-1 receive; cancelling the first withdraws it, the second takes the
    // group's message.
    b.recv_group(1, 2);
    b.ep.cancel_recv(1).expect("cancel the waiting receive");
    let ev = b.next().expect("the cancel completes");
    assert_eq!(ev.context, 1);
    assert_eq!(ev.error.expect("cancelled").errno, FiErrno::FI_ECANCELED);
    a.send(fi_group_addr(0, 1), b"one", 0);
    a.send_ok();
    let ev = b.received(CompletionKind::Recv);
    assert_eq!((ev.context, ev.group), (2, 1));
    assert_eq!(ev.buffer.expect("buffer").to_vec().expect("read"), b"one");
}

#[test]
fn a_group_above_the_maximum_is_rejected_at_the_sender() {
    let (_f, mut a, mut b, _c) = trio(7);
    let (tx_packets, rx_packets) = (a.counter(TX_PACKETS), b.counter(RX_PACKETS));
    let tx_errors = a.counter(TX_ERRORS);
    a.send(fi_group_addr(0, 8), b"group 8", 1);
    a.tsend(fi_group_addr(1, u32::MAX >> 4), b"huge group", 3, 2);
    for context in [1, 2] {
        let ev = a.next().expect("the send completes");
        assert_eq!(ev.context, context);
        let err = ev.error.expect("refused");
        assert_eq!(err.errno, FiErrno::FI_EINVAL);
        assert_eq!(err.local, LocalStatus::BadGroup);
    }
    assert_eq!(a.counter(TX_BAD_GROUP), 2);
    assert_eq!(a.counter(TX_ERRORS), tx_errors + 2);
    assert_eq!(a.counter(TX_PACKETS), tx_packets, "nothing was sent");
    assert_eq!(b.counter(RX_PACKETS), rx_packets);
    // The index is checked first: an index that names nothing is FI_EADDRNOTAVAIL whatever
    // its group.
    a.send(fi_group_addr(5, 99), b"nobody", 3);
    let err = a.next().expect("completion").error.expect("refused");
    assert_eq!(err.errno, FiErrno::FI_EADDRNOTAVAIL);
    // The receive side refuses a group above its AV's maximum at posting.
    let buf = b.pool.alloc().expect("buffer");
    let (e, _buf) = b.ep.post_recv_group(buf, 8, 1).expect_err("group 8 > 7");
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
    let buf = b.pool.alloc().expect("buffer");
    let (e, _buf) =
        b.ep.post_trecv_group(buf, 1, 0, 8, 1)
            .expect_err("group 8 > 7");
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
    let buf = b.pool.alloc().expect("buffer");
    let (e, _buf) =
        b.ep.post_recv_multi(buf, None, 1)
            .expect_err("no FI_MULTI_RECV");
    assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP);
}

#[test]
fn a_target_refuses_groups_it_cannot_receive() {
    // A's AV allows groups up to 100; B's up to 7; C has no peer groups.
    let (_f, fns) = nics(3, |_, _| {});
    let mut fns = fns.into_iter();
    let mut a = GroupNode::new(fns.next().expect("NIC"), 100);
    let mut b = GroupNode::new(fns.next().expect("NIC"), 7);
    let mut c = GroupNode::new(fns.next().expect("NIC"), 0);
    assert_eq!(a.insert(&b), 0);
    assert_eq!(a.insert(&c), 1);
    b.insert(&a);
    c.insert(&a);
    b.recv_group(0, 1);
    let buf = c.pool.alloc().expect("buffer");
    c.ep.post_recv(buf, 2).expect("post recv");
    for (dest, node) in [(fi_group_addr(0, 50), &b), (fi_group_addr(1, 1), &c)] {
        let before = node.counter(RX_BAD_GROUP);
        a.send(dest, b"beyond the target's groups", 3);
        let err = a.next().expect("completion").error.expect("refused");
        assert_eq!(err.return_code, Some(ReturnCode::Undeliverable));
        assert_eq!(err.errno, FiErrno::FI_ENORX);
        assert_eq!(node.counter(RX_BAD_GROUP), before + 1);
    }
    assert!(
        b.next().is_none() && c.next().is_none(),
        "nothing delivered"
    );
    // Group 0 reaches both, and a sender without peer groups reaches a group-0 receive.
    a.send(fi_group_addr(1, 0), b"group 0 to C", 4);
    a.send_ok();
    let ev = c.received(CompletionKind::Recv);
    assert_eq!((ev.context, ev.group), (2, 0));
    // C's AV has no peer groups: its messages are group 0, held while A has no group-0
    // buffer, then delivered to one (not to a buffer of another group).
    c.send(0, b"from a groupless AV", 5);
    c.send_ok();
    a.recv_group(3, 8);
    assert!(
        a.next().is_none(),
        "a group-3 buffer takes no group-0 message"
    );
    a.recv_group(0, 9);
    let ev = a.received(CompletionKind::Recv);
    assert_eq!((ev.context, ev.group, ev.src_addr), (9, 0, 1));
    assert_eq!(
        ev.buffer.expect("buffer").to_vec().expect("read"),
        b"from a groupless AV"
    );
    // C's endpoint has no peer groups: a receive naming one is refused at posting.
    let buf = c.pool.alloc().expect("buffer");
    let (e, _buf) = c.ep.post_recv_group(buf, 1, 7).expect_err("no peer groups");
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
    assert!(!c.ep.has_peer_groups());
}

#[test]
fn host_av_calls_strip_the_group_like_the_receive_context() {
    let (_f, fns) = nics(3, |_, _| {});
    let mut fns = fns.into_iter();
    let (fa, fb, fc) = (
        fns.next().expect("a"),
        fns.next().expect("b"),
        fns.next().expect("c"),
    );
    let b = GroupNode::new(fb, 0);
    let c = GroupNode::new(fc, 0);
    let nic = Nic::open(Arc::new(SimDevice::new(fa))).expect("open NIC");
    // 4 receive-context bits take the top of the group field: groups of up to 28 bits fit,
    // but the NIC allows 16.
    let mut av = nic
        .open_av(AvAttr {
            count: 8,
            job_id: JOB,
            rx_ctx_bits: 4,
            max_group_id: 0xFFFF,
            ..AvAttr::default()
        })
        .expect("open AV");
    assert!(av.peer_groups());
    let mut out = [0u64; 2];
    let mut addrs = b.addr().to_vec();
    addrs.extend_from_slice(&c.addr());
    assert_eq!(av.insert(&addrs, 2, Some(&mut out), 0).expect("insert"), 2);
    assert_eq!(out, [0, 1], "inserts return group-0 addresses");

    let mut buf = [0u8; 64];
    for fa in [
        fi_group_addr(0, 5),
        fi_group_addr(0, 0xFFFF),
        fi_rx_addr(fi_group_addr(0, 0xABC), 3, 4),
    ] {
        let mut len = buf.len();
        av.lookup(fa, &mut buf, &mut len)
            .expect("lookup strips the group");
        assert_eq!(&buf[..len], &b.addr(), "{fa:#x}");
        assert_eq!(av.index_of(fa).expect("index"), 0);
        let mut s = [0u8; 128];
        let mut slen = s.len();
        let text = av.straddr(&buf[..len], &mut s, &mut slen);
        assert_eq!(text, av.straddr(&b.addr(), &mut [0u8; 128], &mut 128));
    }
    // Remove through a group-carrying fi_addr: index 1 goes, whatever group named it.
    av.remove(&[fi_group_addr(1, 42)], 0).expect("remove");
    let mut len = buf.len();
    let e = av
        .lookup(fi_group_addr(1, 7), &mut buf, &mut len)
        .expect_err("removed");
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = av.remove(&[1], 0).expect_err("double remove");
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    // fi_group_addr(FI_ADDR_UNSPEC, g) names no address.
    let mut len = buf.len();
    assert!(av
        .lookup(fi_group_addr(FI_ADDR_UNSPEC, 3), &mut buf, &mut len)
        .is_err());
    drop(av);
    drop(nic);
}

#[test]
fn opening_an_av_checks_the_group_limit_and_the_bits_it_shares() {
    // NIC 0 allows every 32-bit group, NIC 1 the reference 16 bits, NIC 2 none.
    let (_f, fns) = nics(3, |i, c| {
        c.max_group_id = [u32::MAX, 0xFFFF, 0][i];
        c.max_rx_ctx_bits = 8;
        c.max_rx_ctx = 255;
    });
    let open = |f: &SimFunction, max_group_id: u32, rx_ctx_bits: u8| {
        let nic = Nic::open(Arc::new(SimDevice::new(f.clone()))).expect("open NIC");
        let r = nic.open_av(AvAttr {
            count: 8,
            job_id: JOB,
            rx_ctx_bits,
            max_group_id,
            ..AvAttr::default()
        });
        r.map(|av| av.max_group_id())
    };
    assert_eq!(
        open(&fns[0], 0x00FF_FFFF, 8).expect("24 + 8 bits"),
        0x00FF_FFFF
    );
    assert_eq!(open(&fns[0], u32::MAX, 0).expect("32 + 0 bits"), u32::MAX);
    for (max_group_id, rx_ctx_bits) in [(0x0100_0000, 8), (u32::MAX, 1), (0x3FFF_FFFF, 3)] {
        let e = open(&fns[0], max_group_id, rx_ctx_bits).expect_err("more than 32 bits");
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.contains("rx_ctx_bits"), "{e}");
    }
    let e = open(&fns[1], 0x1_0000, 0).expect_err("above CAP_PEER_GROUPS");
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("CAP_PEER_GROUPS"), "{e}");
    let e = open(&fns[2], 1, 0).expect_err("no peer groups on this NIC");
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert_eq!(open(&fns[2], 0, 0).expect("groups off"), 0);
    // The NIC reports its limit.
    let nic = Nic::open(Arc::new(SimDevice::new(fns[1].clone()))).expect("open NIC");
    assert_eq!(nic.capabilities().max_group_id, 0xFFFF);
    assert_eq!(nic.av_limits().max_group_id, 0xFFFF);
}

#[test]
fn an_av_without_groups_treats_the_high_bits_as_before() {
    let (_f, mut a, mut b, _c) = trio(0);
    assert!(!a.av.peer_groups());
    let buf = b.pool.alloc().expect("buffer");
    b.ep.post_recv(buf, 1).expect("post recv");
    // Bits 32-63 set: an index beyond the table, on the NIC and on the host.
    a.send(fi_group_addr(0, 1), b"high bits", 1);
    let err = a.next().expect("completion").error.expect("refused");
    assert_eq!(err.errno, FiErrno::FI_EADDRNOTAVAIL);
    assert_eq!(err.local, LocalStatus::AddrNotAvail);
    assert_eq!(a.counter(TX_BAD_GROUP), 0);
    let mut buf = [0u8; 64];
    let mut len = buf.len();
    let e =
        a.av.lookup(fi_group_addr(0, 1), &mut buf, &mut len)
            .expect_err("out of range");
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e =
        a.av.remove(&[fi_group_addr(0, 1)], 0)
            .expect_err("out of range");
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    // Plain traffic still flows, group 0 everywhere.
    a.send(0, b"plain", 2);
    a.send_ok();
    let ev = b.received(CompletionKind::Recv);
    assert_eq!((ev.context, ev.group), (1, 0));
    let _ = &a.nic;
}

#[test]
fn the_group_travels_in_the_ses_buffer_offset_field() {
    let (fabric, mut a, mut b, _c) = trio(7);
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("peer-groups.pcap");
    let _ = std::fs::remove_file(&path);
    fabric.capture_to_file(&path).expect("start capture");
    b.recv_group(5, 1);
    b.trecv_group(0x99, 6, 2);
    a.send(fi_group_addr(0, 5), b"group five", 1);
    a.send_ok();
    a.tsend(fi_group_addr(0, 6), b"group six", 0x99, 2);
    a.send_ok();
    assert_eq!(b.received(CompletionKind::Recv).group, 5);
    assert_eq!(b.received(CompletionKind::TaggedRecv).group, 6);
    fabric.stop_capture();
    let cap = uet_sim::pcap::read_file(&path).expect("capture");
    let _ = std::fs::remove_file(&path);
    // Ethernet 14 + IPv4 20 + UDP 8, then the 12-byte PDS RUD request: the SES header.
    const SES: usize = 14 + 20 + 8 + uet_sim::pds::RUD_REQ_BYTES;
    let requests: Vec<Vec<u8>> = cap
        .records
        .iter()
        .map(|r| r.data.clone())
        .filter(|f| uet_sim::frame::parse(f).is_ok_and(|d| d.src_ip == nic_addr(0)))
        .collect();
    assert_eq!(requests.len(), 2);
    for (f, (opcode, group, tag)) in requests.iter().zip([
        (uet_sim::ses::OP_SEND, 5u32, 0u64),
        (uet_sim::ses::OP_TAGGED_SEND, 6, 0x99),
    ]) {
        assert_eq!(f[SES] & 0x3F, opcode);
        assert_eq!(&f[SES + 12..SES + 16], &[0; 4], "bytes 12-15 zero");
        assert_eq!(&f[SES + 16..SES + 20], &group.to_be_bytes(), "group id");
        assert_eq!(
            &f[SES + 24..SES + 32],
            &tag.to_be_bytes(),
            "the tag is untouched"
        );
    }

    // A request with bytes 12-15 set is malformed at the target and delivers nothing.
    b.recv_group(5, 3);
    let malformed = b.counter(uet_regs::RX_MALFORMED);
    let d = uet_sim::frame::parse(&requests[0]).expect("frame");
    let mut uet = d.payload.to_vec();
    uet[uet_sim::pds::RUD_REQ_BYTES + 12] = 1;
    let forged = uet_sim::frame::build(d.src_mac, d.dst_mac, d.src_ip, d.dst_ip, d.src_port, &uet)
        .expect("frame");
    fabric.inject_frame(&forged);
    assert_eq!(b.counter(uet_regs::RX_MALFORMED), malformed + 1);
    assert!(b.next().is_none(), "nothing delivered");
    assert_eq!(b.ep.in_flight().1, 1, "the group-5 buffer still waits");
}
