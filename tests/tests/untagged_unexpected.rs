//! Untagged messages that arrive before their receive (host interface 1.17): held on the
//! NIC's unexpected list within its bounds, taken by the receives posted later in arrival
//! order, into plain, multi-receive and peer-group buffers alike; refused `FI_ENORX` only
//! when the list is full. fi_domain(3): with resource management enabled, a reliable
//! endpoint's message that finds no receive buffer is not an error at the sender.

use uet_av::FiErrno;
use uet_driver::{CqEvent, CqOp, DmaPool};
use uet_fwif::datapath::{CompletionKind, LocalStatus};
use uet_fwif::ReturnCode;
use uet_regs::{RX_NO_BUFFER, RX_UNEXPECTED, RX_UNEXPECTED_OVERFLOW};
use uet_tests::{pair_with, pattern, Node};

const JOB: u32 = 0x00_0E41;

/// The next completion of `b`: a successful untagged receive.
fn received(b: &mut Node) -> CqEvent {
    let ev = b.next_completion().expect("a receive completion");
    assert_eq!((ev.kind, ev.op), (CompletionKind::Recv, CqOp::Recv));
    assert!(ev.error.is_none(), "{:?}", ev.error);
    ev
}

fn bytes(ev: &CqEvent) -> Vec<u8> {
    let b = ev.buffer.as_ref().expect("the receive's buffer");
    let mut got = vec![0u8; ev.len];
    assert_eq!(b.read_at(0, &mut got).expect("read"), ev.len);
    got
}

#[test]
fn a_message_sent_before_its_receive_waits_for_it_with_its_data_and_source() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    a.send(0, b"before the receive", 41);
    a.send_ok();
    assert!(b.next_completion().is_none(), "no receive was posted");
    assert_eq!(b.counter(RX_NO_BUFFER), 1);
    assert_eq!(b.counter(RX_UNEXPECTED), 1);
    assert_eq!(b.counter(RX_UNEXPECTED_OVERFLOW), 0);
    let stats = b.ep.counters().unwrap();
    assert_eq!((stats.rx_unexpected, stats.rx_messages), (1, 0));

    b.post_recvs(1);
    let ev = received(&mut b);
    assert_eq!((ev.context, ev.data, ev.src_addr), (1000, 41, 0));
    assert_eq!(bytes(&ev), b"before the receive");
    let stats = b.ep.counters().unwrap();
    assert_eq!((stats.rx_messages, stats.rx_bytes), (1, 18));
    // The list is empty again: the next message takes the next receive as it arrives.
    b.post_recvs(1);
    a.send(0, b"after", 42);
    a.send_ok();
    assert_eq!(received(&mut b).data, 42);
    assert_eq!(b.counter(RX_UNEXPECTED), 1);
}

/// Receives take waiting messages in arrival order, a multi-packet one included, and a
/// message that arrives while others wait queues behind them even when a receive is free.
#[test]
fn waiting_messages_take_receives_in_arrival_order() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let mtu = a.ep.mtu();
    let long = pattern(2 * mtu + 7, 3);
    let big_a = DmaPool::new(&a.nic, 3 * mtu, 1).unwrap();
    let mut buf = big_a.alloc().unwrap();
    buf.fill(&long).unwrap();
    a.send(0, b"one", 1);
    a.ep.post_send(0, buf, 2, 2).unwrap();
    a.send(0, b"three", 3);
    for _ in 0..3 {
        a.send_ok();
    }
    assert_eq!(b.counter(RX_UNEXPECTED), 3);

    let big_b = DmaPool::new(&b.nic, 3 * mtu, 2).unwrap();
    let post = |b: &mut Node, context: u64| {
        b.ep.post_recv(big_b.alloc().unwrap(), context).unwrap();
    };
    post(&mut b, 10);
    let ev = received(&mut b);
    assert_eq!((ev.context, ev.data), (10, 1));
    assert_eq!(bytes(&ev), b"one");
    // A fourth message arrives with a receive free but two messages waiting: it queues.
    post(&mut b, 11);
    let ev = received(&mut b);
    assert_eq!((ev.context, ev.data, ev.len), (11, 2, long.len()));
    assert_eq!(bytes(&ev), long);
    a.send(0, b"four", 4);
    a.send_ok();
    b.post_recvs(2);
    let (c, d) = (received(&mut b), received(&mut b));
    assert_eq!((c.data, bytes(&c)), (3, b"three".to_vec()));
    assert_eq!((d.data, bytes(&d)), (4, b"four".to_vec()));
    assert!(b.next_completion().is_none());
}

/// The list's bounds are shared by both kinds of message; an untagged message beyond them
/// is refused `FI_ENORX` (RC_UNDELIVERABLE), counted, and the list goes on as before.
#[test]
fn a_full_list_refuses_an_untagged_message_with_enorx_and_the_bound_is_shared_with_tagged() {
    let (_f, mut a, mut b) = pair_with(JOB, |c| c.unexpected_entries = 2);
    a.tsend(0, b"tagged", 7, 1);
    a.send_ok();
    a.send(0, b"untagged", 2);
    a.send_ok();
    a.send(0, b"one too many", 3);
    let ev = a.next_completion().expect("the send completes");
    let err = ev.error.expect("refused");
    assert_eq!(err.errno, FiErrno::FI_ENORX);
    assert_eq!(err.local, LocalStatus::Remote);
    assert_eq!(err.return_code, Some(ReturnCode::Undeliverable));
    assert_eq!(b.counter(RX_UNEXPECTED_OVERFLOW), 1);
    assert_eq!(
        b.counter(RX_NO_BUFFER),
        2,
        "held or refused, both found none"
    );
    assert_eq!(
        b.ep.counters().unwrap().rejected(ReturnCode::Undeliverable),
        1
    );
    a.tsend(0, b"tagged too", 8, 4);
    let err = a.next_completion().unwrap().error.expect("refused");
    assert_eq!(
        err.errno,
        FiErrno::FI_ENORX,
        "the list is full for tags too"
    );

    // A receive of each kind takes its own message and makes room.
    b.post_recvs(1);
    let ev = received(&mut b);
    assert_eq!((ev.data, bytes(&ev)), (2, b"untagged".to_vec()));
    b.trecv(7, 0, 20);
    let ev = b.next_completion().unwrap();
    assert_eq!((ev.kind, ev.tag), (CompletionKind::TaggedRecv, 7));
    a.send(0, b"room again", 5);
    a.send_ok();
    b.post_recvs(1);
    assert_eq!(bytes(&received(&mut b)), b"room again");
}

/// A multi-receive buffer posted after several messages arrived takes them one after
/// another, each at its offset; one that does not fit what is left retires it and takes the
/// next buffer.
#[test]
fn a_multi_receive_buffer_takes_the_waiting_messages_one_after_another() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let sizes = [100usize, 200, 300];
    for (i, &n) in sizes.iter().enumerate() {
        a.send(0, &pattern(n, i as u8), i as u64);
        a.send_ok();
    }
    let pool = DmaPool::new(&b.nic, 512, 2).unwrap();
    b.ep.post_recv_multi(pool.alloc().unwrap(), Some(1), 77)
        .unwrap();
    // 100 at 0, 200 at 128; 300 does not fit the 184 bytes left: the buffer is released.
    let mut placed = Vec::new();
    for _ in 0..2 {
        let ev = b.next_completion().expect("a message");
        assert!(ev.error.is_none(), "{:?}", ev.error);
        let m = ev.multi_recv.expect("multi-receive");
        assert!(m.has_message);
        placed.push((ev.context, m.offset, ev.len, ev.data));
        let mut got = vec![0u8; ev.len];
        b.ep.multi_recv_read(&ev, &mut got).unwrap();
        assert_eq!(got, pattern(ev.len, ev.data as u8));
    }
    assert_eq!(placed, vec![(77, 0, 100, 0), (77, 128, 200, 1)]);
    assert!(
        b.next_completion().is_none(),
        "the third waits for a next buffer"
    );
    b.ep.post_recv_multi(pool.alloc().unwrap(), Some(1), 78)
        .unwrap();
    let release = b.next_completion().expect("the first buffer's release");
    let m = release.multi_recv.expect("multi-receive");
    assert!(m.released && !m.has_message);
    assert_eq!(release.context, 77);
    let ev = b.next_completion().expect("the third message");
    let m = ev.multi_recv.expect("multi-receive");
    assert_eq!((ev.context, m.offset, ev.len, ev.data), (78, 0, 300, 2));
}

/// A waiting message longer than the receive that takes it is truncated into it, as one
/// arriving would be.
#[test]
fn a_waiting_message_longer_than_its_receive_is_truncated_into_it() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    a.send(0, &pattern(3000, 9), 5);
    a.send_ok();
    let small = DmaPool::new(&b.nic, 1000, 1).unwrap();
    let room = small.buf_size();
    assert!(room < 3000);
    b.ep.post_recv(small.alloc().unwrap(), 6).unwrap();
    let ev = b.next_completion().expect("the receive completes");
    let err = ev.error.expect("truncated");
    assert_eq!(err.errno, FiErrno::FI_ETRUNC);
    assert_eq!(err.local, LocalStatus::Truncated);
    assert_eq!((ev.context, ev.len, err.olen), (6, room, 3000 - room));
    assert_eq!(bytes(&ev), pattern(3000, 9)[..room]);
}

/// Before interface 1.17 the NIC keeps no untagged message: one that finds no receive is
/// refused at once, and a receive posted later takes nothing.
#[test]
fn a_nic_of_interface_1_16_refuses_a_message_without_a_receive() {
    let (_f, mut a, mut b) = pair_with(JOB, |c| {
        c.interface_minor = uet_regs::since::UNTAGGED_UNEXPECTED - 1;
    });
    a.send(0, b"too early", 1);
    let err = a.next_completion().unwrap().error.expect("refused");
    assert_eq!(err.errno, FiErrno::FI_ENORX);
    assert_eq!(b.counter(RX_NO_BUFFER), 1);
    assert_eq!(b.counter(RX_UNEXPECTED), 0);
    b.post_recvs(1);
    assert!(b.next_completion().is_none());
}

/// Closing an endpoint with messages waiting drops them with it: a new endpoint on the NIC
/// starts with an empty list.
#[test]
fn an_endpoint_closed_with_messages_waiting_drops_them() {
    let (_f, mut a, b) = pair_with(JOB, |_| {});
    a.send(0, b"never taken", 1);
    a.send_ok();
    let Node {
        nic, av, ep, pool, ..
    } = b;
    drop(ep);
    let mut ep = nic
        .endpoint(
            uet_driver::EndpointAttr {
                job_id: JOB,
                ..Default::default()
            },
            Some(&av),
        )
        .unwrap();
    ep.post_recv(pool.alloc().unwrap(), 3).unwrap();
    assert!(
        uet_tests::poll_one(&mut ep).is_none(),
        "nothing of the closed endpoint's list"
    );
}
