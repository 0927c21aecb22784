//! Tagged messages (fi_tsend/fi_trecv): matching with ignore bits in posting order, the NIC's
//! unexpected list and its bounds, and the TAGGED resource-index space.

use uet_av::FiErrno;
use uet_driver::{CqOp, EndpointAttr};
use uet_fwif::datapath::{CompletionKind, LocalStatus};
use uet_fwif::ReturnCode;
use uet_regs::{RX_BAD_INDEX, RX_UNEXPECTED, RX_UNEXPECTED_OVERFLOW};
use uet_tests::{fabric, forged, pair_with, pattern, Node};

const JOB: u32 = 0x00_7A66;

fn recv_tagged(node: &mut Node) -> uet_driver::CqEvent {
    let ev = node.next_completion().expect("a tagged receive completes");
    assert_eq!(ev.kind, CompletionKind::TaggedRecv);
    assert_eq!(ev.op, CqOp::TaggedRecv);
    assert!(ev.error.is_none(), "{:?}", ev.error);
    ev
}

#[test]
fn tags_match_with_ignore_bits_in_posting_order() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    // A matches 0x1XX; B only 0x1FF; C only 0x200.
    b.trecv(0x100, 0xFF, 1);
    b.trecv(0x1FF, 0, 2);
    b.trecv(0x200, 0, 3);
    assert_eq!(b.ep.tagged_in_flight(), 3);

    // 0x1FF matches A and B: A was posted first.
    a.tsend(0, b"first 1ff", 0x1FF, 10);
    a.send_ok();
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.context, ev.tag, ev.data), (1, 0x1FF, 10));
    assert_eq!(ev.src_addr, 0, "the sender's fi_addr");
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"first 1ff");

    // The next 0x1FF finds B.
    a.tsend(0, b"second 1ff", 0x1FF, 11);
    a.send_ok();
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.context, ev.tag), (2, 0x1FF));

    // 0x105 would have matched A, which is gone; C does not match: it waits unexpected.
    a.tsend(0, b"early 105", 0x105, 12);
    a.send_ok();
    assert!(b.next_completion().is_none(), "nothing matches 0x105");
    assert_eq!(b.counter(RX_UNEXPECTED), 1);

    // 0x200 takes C.
    a.tsend(0, b"exact 200", 0x200, 13);
    a.send_ok();
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.context, ev.tag), (3, 0x200));

    // An untagged message never matches a tagged receive, and the reverse.
    b.trecv(0, u64::MAX, 4); // matches every tag: takes the waiting 0x105 at once
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.context, ev.tag, ev.data), (4, 0x105, 12));
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"early 105");
    b.trecv(0, u64::MAX, 5);
    b.post_recvs(1);
    a.send(0, b"untagged", 14);
    a.send_ok();
    let ev = b.next_completion().unwrap();
    assert_eq!(ev.kind, CompletionKind::Recv);
    assert_eq!(ev.op, CqOp::Recv);
    assert_eq!(ev.tag, 0);
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"untagged");
    assert_eq!(
        b.ep.tagged_in_flight(),
        1,
        "the wildcard receive still waits"
    );
}

#[test]
fn unexpected_messages_match_receives_posted_later_oldest_first() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let mtu = a.ep.mtu();
    let long = pattern(mtu + 1, 7);
    let big_a = uet_driver::DmaPool::new(&a.nic, 2 * mtu, 2).unwrap();
    let big_b = uet_driver::DmaPool::new(&b.nic, 2 * mtu, 2).unwrap();
    a.tsend(0, b"tag one", 1, 1);
    a.tsend(0, b"tag two", 2, 2);
    let mut buf = big_a.alloc().unwrap();
    buf.fill(&long).unwrap();
    a.ep.post_tsend(0, buf, 3, 3, 3).unwrap(); // two packets, held whole by the NIC
    a.tsend(0, b"tag one again", 1, 4);
    for _ in 0..4 {
        a.send_ok();
    }
    assert!(b.next_completion().is_none());
    assert_eq!(b.counter(RX_UNEXPECTED), 4);

    b.trecv(2, 0, 20);
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.context, ev.tag, ev.data), (20, 2, 2));
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"tag two");

    // Matching every tag: the oldest waiting message, not the newest.
    b.trecv(0, u64::MAX, 21);
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.tag, ev.data), (1, 1));

    b.ep.post_trecv(big_b.alloc().unwrap(), 3, 0, 22).unwrap();
    let ev = recv_tagged(&mut b);
    assert_eq!(ev.tag, 3);
    assert_eq!(ev.len, mtu + 1);
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), long, "byte exact");

    b.trecv(1, 0, 23);
    let ev = recv_tagged(&mut b);
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"tag one again");
    assert!(b.next_completion().is_none());

    // A multi-packet message to a receive already posted goes straight to its buffer.
    b.ep.post_trecv(big_b.alloc().unwrap(), 3, 0, 24).unwrap();
    let mut buf = big_a.alloc().unwrap();
    let long2 = pattern(mtu + 1, 9);
    buf.fill(&long2).unwrap();
    a.ep.post_tsend(0, buf, 3, 5, 5).unwrap();
    a.send_ok();
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.context, ev.tag, ev.data), (24, 3, 5));
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), long2);

    let c = b.ep.counters().unwrap();
    assert_eq!(c.rx_unexpected, 4);
    assert_eq!(c.rx_tagged_messages, 5);
    assert_eq!(c.rx_messages, 5);
    assert_eq!(b.counter(RX_UNEXPECTED), 4);
}

#[test]
fn a_full_unexpected_list_refuses_with_undeliverable_and_counts() {
    let (_f, mut a, mut b) = pair_with(JOB, |c| {
        c.unexpected_entries = 2;
        c.unexpected_kib = 4;
    });
    let caps = b.nic.capabilities();
    assert_eq!((caps.unexpected_entries, caps.unexpected_kib), (2, 4));
    a.tsend(0, b"one", 1, 1);
    a.tsend(0, b"two", 2, 2);
    a.send_ok();
    a.send_ok();
    a.tsend(0, b"three", 3, 3);
    let ev = a.next_completion().unwrap();
    let err = ev.error.expect("refused");
    assert_eq!(err.local, LocalStatus::Remote);
    assert_eq!(err.return_code, Some(ReturnCode::Undeliverable));
    assert_eq!(err.errno, FiErrno::FI_ENORX);
    assert_eq!(b.counter(RX_UNEXPECTED_OVERFLOW), 1);
    assert_eq!(b.counter(RX_UNEXPECTED), 2);
    assert_eq!(
        b.ep.counters().unwrap().rejected(ReturnCode::Undeliverable),
        1
    );

    // Taking one off the list makes room again.
    b.trecv(1, 0, 10);
    assert_eq!(recv_tagged(&mut b).tag, 1);
    a.tsend(0, b"three again", 3, 4);
    a.send_ok();

    // The byte bound: 4 KiB held at most; one is free by count but 3 KiB + 2 B > 4 KiB - 5 B.
    b.trecv(2, 0, 11);
    b.trecv(3, 0, 12);
    assert_eq!(recv_tagged(&mut b).tag, 2);
    assert_eq!(recv_tagged(&mut b).tag, 3);
    a.tsend(0, &pattern(3000, 1), 5, 5);
    a.send_ok();
    a.tsend(0, &pattern(2000, 2), 6, 6);
    let err = a
        .next_completion()
        .unwrap()
        .error
        .expect("over the byte bound");
    assert_eq!(err.return_code, Some(ReturnCode::Undeliverable));
    assert_eq!(b.counter(RX_UNEXPECTED_OVERFLOW), 2);
    assert!(b.next_completion().is_none(), "nothing reached a buffer");
}

#[test]
fn tagged_space_of_an_endpoint_without_tagged_ring_is_empty() {
    let (_f, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut a = Node::new(it.next().unwrap(), JOB, 4);
    let fb = it.next().unwrap();
    let nic = uet_driver::Nic::open(std::sync::Arc::new(
        uet_driver::backend::sim::SimDevice::new(fb.clone()),
    ))
    .unwrap();
    let av = nic.open_av(Default::default()).unwrap();
    let mut ep = nic
        .endpoint(
            EndpointAttr {
                job_id: JOB,
                trx_log2: 0,
                ..EndpointAttr::default()
            },
            Some(&av),
        )
        .unwrap();
    assert!(!ep.has_tagged_rx());
    let pool = uet_driver::DmaPool::new(&nic, 256, 2).unwrap();
    let (e, _buf) = ep.post_trecv(pool.alloc().unwrap(), 1, 0, 1).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP, "{e}");

    let k = a.insert(&ep.address().to_bytes().unwrap());
    a.tsend(k, b"nobody takes tags", 9, 1);
    let err = a.next_completion().unwrap().error.expect("refused");
    assert_eq!(err.return_code, Some(ReturnCode::BadIndex));
    assert_eq!(err.errno, FiErrno::FI_EADDRNOTAVAIL);
    assert_eq!(fb.counter(RX_BAD_INDEX), 1);
    assert_eq!(ep.counters().unwrap().rejected(ReturnCode::BadIndex), 1);

    // A tagged message outside the endpoint's range, to an endpoint with a tagged ring.
    let (_f2, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut s = Node::new(it.next().unwrap(), JOB, 4);
    let t = Node::new(it.next().unwrap(), JOB, 4);
    let end = t.ep.resource_indices().end;
    let bad = forged(t.ep.address(), |x| {
        x.ri_start = end + 3;
        x.ri_count = 1;
    });
    let k = s.insert(&bad);
    s.tsend(k, b"wrong index", 1, 1);
    let err = s.next_completion().unwrap().error.expect("refused");
    assert_eq!(err.return_code, Some(ReturnCode::BadIndex));
}

/// Message ids count per PDC in 16 bits and wrap after 65,536 messages. A multi-packet tagged
/// message held on the unexpected list with the id of a single-packet one still waiting there
/// completes its own entry: each tagged receive gets its own message, whole.
#[test]
fn an_unexpected_multi_packet_message_with_the_id_of_a_waiting_one_completes_its_own_entry() {
    let fabric = uet_sim::Fabric::new();
    // NICs that refuse an untagged message without a buffer (before interface 1.17, which
    // holds it on the unexpected list): the ids go by and the target keeps nothing of them.
    let cfg = |i| {
        let mut c = uet_sim::NicConfig::new(uet_tests::nic_addr(i));
        c.mtu = 1024;
        c.interface_minor = uet_regs::since::UNTAGGED_UNEXPECTED - 1;
        c
    };
    let mut a = Node::new(fabric.add_nic(cfg(0)).unwrap(), JOB, 8);
    let mut b = Node::new(fabric.add_nic(cfg(1)).unwrap(), JOB, 8);
    let to_b = a.insert(&b.addr());
    b.insert(&a.addr());
    // Message id 0: one packet, held unexpected.
    a.tsend(to_b, b"early", 0x1, 1);
    a.send_ok();
    // Ids 1 to 65,535: untagged, refused for want of a buffer.
    for _ in 1..=u16::MAX {
        a.send(to_b, b"x", 2);
        let ev = a.next_completion().expect("send completion");
        assert!(ev.error.is_some(), "no buffer was posted");
    }
    // Id 0 again: three packets, held unexpected.
    let long = pattern(3000, 7);
    a.tsend(to_b, &long, 0x2, 3);
    a.send_ok();
    assert_eq!(b.counter(RX_UNEXPECTED), 2);
    b.trecv(0x2, 0, 20);
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.context, ev.tag, ev.len), (20, 0x2, long.len()));
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), long);
    b.trecv(0x1, 0, 10);
    let ev = recv_tagged(&mut b);
    assert_eq!((ev.context, ev.tag), (10, 0x1));
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"early");
}
