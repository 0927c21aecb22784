//! Cancelling posted receives (`fi_cancel`) through the driver: RECV_CANCEL on the NIC, the
//! cancelled completion through `poll` with `FI_ECANCELED` and the buffer, the ring entry
//! kept until the NIC has passed it, and the refusals.

use uet_av::FiErrno;
use uet_driver::cq::{FI_RECV, FI_TAGGED};
use uet_driver::{CqEvent, CqOp, DriverError};
use uet_fwif::datapath::{CompletionKind, LocalStatus};
use uet_regs::{since, RX_NO_BUFFER};
use uet_sim::{Fabric, NicConfig};
use uet_tests::{nic_addr, Node};

const JOB: u32 = 0x0007_0C0C;

fn pair() -> (Fabric, Node, Node) {
    uet_tests::pair_with(JOB, |_| {})
}

fn post(node: &mut Node, context: u64) {
    let b = node.pool.alloc().expect("buffer");
    node.ep
        .post_recv(b, context)
        .map_err(|(e, _)| e)
        .expect("post recv");
}

fn errno(r: Result<(), DriverError>) -> Option<FiErrno> {
    r.err().map(|e| e.errno())
}

/// The cancelled completion of the receive posted with `context`.
fn expect_cancelled(ev: Option<CqEvent>, kind: CompletionKind, context: u64) {
    let ev = ev.expect("the cancelled receive completes");
    assert_eq!((ev.kind, ev.context, ev.len), (kind, context, 0));
    let err = ev.error.expect("an error completion");
    assert_eq!(err.errno, FiErrno::FI_ECANCELED);
    assert_eq!(err.local, LocalStatus::Cancelled);
    let buf = ev.buffer.expect("the buffer comes back");
    assert_eq!(buf.len(), 0);
}

fn expect_message(ev: Option<CqEvent>, context: u64, data: &[u8]) {
    let ev = ev.expect("a receive completion");
    assert!(ev.error.is_none(), "{:?}", ev.error);
    assert_eq!((ev.op, ev.context), (CqOp::Recv, context));
    let buf = ev.buffer.expect("buffer");
    let mut got = vec![0u8; buf.len()];
    buf.read(&mut got).expect("read");
    assert_eq!(got, data);
}

#[test]
fn a_cancelled_receive_completes_with_ecanceled_and_the_next_message_takes_the_next_receive() {
    let (_fabric, mut a, mut b) = pair();
    for ctx in [1, 2, 3] {
        post(&mut b, ctx);
    }
    b.ep.cancel_recv(2).expect("cancel");
    expect_cancelled(b.next_completion(), CompletionKind::Recv, 2);
    assert!(b.next_completion().is_none());
    assert_eq!(b.ep.in_flight().1, 2);
    assert_eq!(errno(b.ep.cancel_recv(2)), Some(FiErrno::FI_ENOENT));
    a.send(0, b"one", 50);
    a.send(0, b"two", 51);
    expect_message(b.next_completion(), 1, b"one");
    expect_message(b.next_completion(), 3, b"two");
    // Unknown contexts, a completed receive, and a send are not cancellable.
    assert_eq!(errno(b.ep.cancel(99)), Some(FiErrno::FI_ENOENT));
    assert_eq!(errno(b.ep.cancel(1)), Some(FiErrno::FI_ENOENT));
    a.send(0, b"three", 52);
    assert_eq!(errno(a.ep.cancel(52)), Some(FiErrno::FI_ENOENT));
}

#[test]
fn a_cancelled_tagged_receive_leaves_the_message_to_the_next_matching_one() {
    let (_fabric, mut a, mut b) = pair();
    b.trecv(0x42, 0, 10);
    b.trecv(0x42, 0, 11);
    // fi_cancel finds the tagged receive by its context.
    b.ep.cancel(10).expect("cancel");
    expect_cancelled(b.next_completion(), CompletionKind::TaggedRecv, 10);
    assert_eq!(b.ep.tagged_in_flight(), 1);
    assert_eq!(errno(b.ep.cancel_trecv(10)), Some(FiErrno::FI_ENOENT));
    a.tsend(0, b"tagged", 0x42, 60);
    let ev = b.next_completion().expect("delivered");
    assert_eq!((ev.op, ev.context, ev.tag), (CqOp::TaggedRecv, 11, 0x42));
    assert!(ev.error.is_none());
}

/// Of two tagged receives posted with one context, fi_cancel withdraws the older, as for
/// untagged receives, even when the newer took a table entry freed before the older's.
#[test]
fn a_tagged_cancel_withdraws_the_oldest_receive_with_the_context() {
    let (_fabric, mut a, mut b) = pair();
    b.trecv(0x1, 0, 100);
    b.trecv(0x2, 0, 7);
    // The first completes, and its entry goes to the next receive, also with context 7.
    a.tsend(0, b"one", 0x1, 60);
    let ev = b.next_completion().expect("delivered");
    assert_eq!((ev.context, ev.tag), (100, 0x1));
    b.trecv(0x3, 0, 7);
    b.ep.cancel_trecv(7).expect("cancel");
    let ev = b
        .next_completion()
        .expect("the cancelled receive completes");
    assert_eq!(ev.error.map(|e| e.errno), Some(FiErrno::FI_ECANCELED));
    assert_eq!(
        (ev.context, ev.tag),
        (7, 0x2),
        "the older receive is withdrawn"
    );
    // The newer still takes its message.
    a.tsend(0, b"three", 0x3, 61);
    let ev = b.next_completion().expect("delivered");
    assert!(ev.error.is_none());
    assert_eq!((ev.context, ev.tag), (7, 0x3));
}

/// A cancelled tagged receive took no message: its completion and its error entry report
/// the tag it was posted with (whatever its ignore mask), `FI_RECV | FI_TAGGED`, its
/// context, no data and no length.
#[test]
fn a_cancelled_tagged_receive_reports_the_tag_it_was_posted_with() {
    let (_fabric, _a, mut b) = pair();
    b.trecv(0x1234_5678_9abc_def0, 0xff, 12);
    b.ep.cancel_trecv(12).expect("cancel");
    let ev = b
        .next_completion()
        .expect("the cancelled receive completes");
    assert_eq!(
        (ev.op, ev.context, ev.tag),
        (CqOp::TaggedRecv, 12, 0x1234_5678_9abc_def0)
    );
    let e = ev.err_entry().expect("an error entry");
    assert_eq!(e.err, FiErrno::FI_ECANCELED);
    assert_eq!((e.op_context, e.flags), (12, FI_RECV | FI_TAGGED));
    assert_eq!(
        (e.tag, e.len, e.olen, e.data),
        (0x1234_5678_9abc_def0, 0, 0, 0)
    );
}

/// A cancelled entry in the middle of a full RX ring is not free before the NIC's head has
/// passed it: posting over it would make the ring look empty to the NIC.
#[test]
fn a_cancelled_entry_stays_taken_until_the_nic_has_passed_it() {
    let (_fabric, mut a, mut b) = pair();
    let entries = 64u64;
    for ctx in 0..entries - 1 {
        post(&mut b, ctx);
    }
    b.ep.cancel_recv(1).expect("cancel");
    expect_cancelled(b.next_completion(), CompletionKind::Recv, 1);
    let full =
        b.ep.post_recv(b.pool.alloc().unwrap(), 100)
            .map_err(|(e, _)| e);
    assert_eq!(
        errno(full),
        Some(FiErrno::FI_EAGAIN),
        "the ring is still full"
    );
    a.send(0, b"m0", 200);
    expect_message(b.next_completion(), 0, b"m0");
    // Entry 0 is free again, and so is entry 1: the NIC's head passed it when it left entry
    // 0. Two more fit, then one per message, the first over the cancelled entry, and
    // messages find every receive in order.
    post(&mut b, 100);
    post(&mut b, 101);
    let full =
        b.ep.post_recv(b.pool.alloc().unwrap(), 102)
            .map_err(|(e, _)| e);
    assert_eq!(errno(full), Some(FiErrno::FI_EAGAIN));
    for ctx in (2..entries - 1).chain([100, 101, 102]) {
        a.send(0, &ctx.to_le_bytes(), 300 + ctx);
        expect_message(b.next_completion(), ctx, &ctx.to_le_bytes());
        while a.next_completion().is_some() {}
        if ctx == 2 {
            post(&mut b, 102);
        }
    }
    assert_eq!(b.counter(RX_NO_BUFFER), 0);
}

#[test]
fn a_nic_older_than_interface_1_14_cannot_cancel() {
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(nic_addr(0));
    cfg.interface_minor = since::RECV_CANCEL - 1;
    let mut b = Node::new(fabric.add_nic(cfg).unwrap(), JOB, 4);
    post(&mut b, 1);
    b.trecv(1, 0, 2);
    assert_eq!(errno(b.ep.cancel_recv(1)), Some(FiErrno::FI_ENOSYS));
    assert_eq!(errno(b.ep.cancel(2)), Some(FiErrno::FI_ENOSYS));
    assert!(b.next_completion().is_none());
    assert_eq!(b.ep.in_flight().1, 1);
}

/// Every receive of a full RX ring cancelled: the NIC's head has passed every cancelled
/// entry (no receive is left before it), so the ring is empty again without any message,
/// which could only arrive into a receive posted now.
#[test]
fn a_ring_whose_receives_were_all_cancelled_takes_new_receives() {
    let (_fabric, mut a, mut b) = pair();
    let entries = 64u64;
    for ctx in 0..entries - 1 {
        post(&mut b, ctx);
    }
    // Newest first: none is at the NIC's head until the last one.
    for ctx in (0..entries - 1).rev() {
        b.ep.cancel_recv(ctx).expect("cancel");
        expect_cancelled(b.next_completion(), CompletionKind::Recv, ctx);
    }
    assert_eq!(b.ep.in_flight().1, 0);
    for ctx in 100..100 + entries - 1 {
        post(&mut b, ctx);
    }
    for ctx in 100..100 + entries - 1 {
        a.send(0, &ctx.to_le_bytes(), ctx);
        expect_message(b.next_completion(), ctx, &ctx.to_le_bytes());
        while a.next_completion().is_some() {}
    }
    assert_eq!(b.counter(RX_NO_BUFFER), 0);
}

/// A cancelled entry behind receives still posted stays taken; once the receives before it
/// have completed, the NIC's head has passed it and it is free again.
#[test]
fn a_cancelled_entry_is_free_once_the_receives_before_it_completed() {
    let (_fabric, mut a, mut b) = pair();
    let entries = 64u64;
    for ctx in 0..entries - 1 {
        post(&mut b, ctx);
    }
    b.ep.cancel_recv(5).expect("cancel");
    expect_cancelled(b.next_completion(), CompletionKind::Recv, 5);
    for ctx in 0..5u64 {
        a.send(0, &ctx.to_le_bytes(), 200 + ctx);
        expect_message(b.next_completion(), ctx, &ctx.to_le_bytes());
        while a.next_completion().is_some() {}
    }
    // Entries 0 to 5 are free: six receives fit, a seventh does not.
    for ctx in 100..106 {
        post(&mut b, ctx);
    }
    let full =
        b.ep.post_recv(b.pool.alloc().unwrap(), 106)
            .map_err(|(e, _)| e);
    assert_eq!(errno(full), Some(FiErrno::FI_EAGAIN));
    for ctx in (6..entries - 1).chain(100..106) {
        a.send(0, &ctx.to_le_bytes(), 300 + ctx);
        expect_message(b.next_completion(), ctx, &ctx.to_le_bytes());
        while a.next_completion().is_some() {}
    }
    assert_eq!(b.counter(RX_NO_BUFFER), 0);
}

/// Of receives posted with one context, fi_cancel withdraws the oldest one still posted on
/// the NIC: not one a message has already completed, nor one already cancelled, whose
/// completions wait unread in the completion ring.
#[test]
fn a_cancel_passes_over_receives_whose_completions_wait_unread() {
    let (_fabric, mut a, mut b) = pair();
    for _ in 0..3 {
        post(&mut b, 7);
    }
    // A message completes the oldest; its completion is not read yet.
    a.send(0, b"one", 50);
    b.ep.cancel_recv(7)
        .expect("the second receive is cancelled");
    b.ep.cancel(7).expect("the third receive is cancelled");
    assert_eq!(errno(b.ep.cancel_recv(7)), Some(FiErrno::FI_ENOENT));
    expect_message(b.next_completion(), 7, b"one");
    expect_cancelled(b.next_completion(), CompletionKind::Recv, 7);
    expect_cancelled(b.next_completion(), CompletionKind::Recv, 7);
    assert!(b.next_completion().is_none());
    assert_eq!(b.ep.in_flight().1, 0);
}

/// The same for tagged receives: a tagged receive whose completion waits unread is passed
/// over, and so is one already cancelled.
#[test]
fn a_tagged_cancel_passes_over_receives_whose_completions_wait_unread() {
    let (_fabric, mut a, mut b) = pair();
    for _ in 0..3 {
        b.trecv(0x42, 0, 9);
    }
    a.tsend(0, b"one", 0x42, 60);
    b.ep.cancel_trecv(9)
        .expect("the second receive is cancelled");
    b.ep.cancel(9).expect("the third receive is cancelled");
    assert_eq!(errno(b.ep.cancel_trecv(9)), Some(FiErrno::FI_ENOENT));
    let ev = b.next_completion().expect("delivered");
    assert!(ev.error.is_none());
    assert_eq!((ev.context, ev.tag), (9, 0x42));
    expect_cancelled(b.next_completion(), CompletionKind::TaggedRecv, 9);
    expect_cancelled(b.next_completion(), CompletionKind::TaggedRecv, 9);
    assert!(b.next_completion().is_none());
    assert_eq!(b.ep.tagged_in_flight(), 0);
}

/// The released multi-receive buffer a cancel completes with: `FI_ECANCELED`, no message,
/// the buffer back with `used` bytes (the end of the messages placed in it).
fn expect_multi_cancelled(ev: Option<CqEvent>, context: u64, used: usize) {
    let ev = ev.expect("the cancelled buffer completes");
    assert_eq!(
        (ev.kind, ev.context, ev.len),
        (CompletionKind::Recv, context, 0)
    );
    let err = ev.error.expect("an error completion");
    assert_eq!(err.errno, FiErrno::FI_ECANCELED);
    let m = ev.multi_recv.expect("a multi-receive completion");
    assert!(m.released && !m.has_message, "{m:?}");
    assert_eq!(ev.buffer.expect("the buffer comes back").len(), used);
}

/// Since interface 1.19 `fi_cancel` withdraws a multi-receive buffer: the current one, which
/// keeps the messages already placed in it and takes no more, and one the NIC has not read.
/// Its ring entry is posted again once the NIC has passed it.
#[test]
fn a_multi_receive_buffer_is_cancelled_keeping_what_was_placed_in_it() {
    let (_f, mut a, mut b) = pair();
    let pool = uet_driver::DmaPool::new(&b.nic, 512, 3).unwrap();
    b.ep.post_recv_multi(pool.alloc().unwrap(), Some(1), 77)
        .map_err(|(e, _)| e)
        .unwrap();
    b.ep.post_recv_multi(pool.alloc().unwrap(), Some(1), 78)
        .map_err(|(e, _)| e)
        .unwrap();
    a.send(0, &[7; 100], 1);
    let ev = b.next_completion().expect("the message");
    assert_eq!((ev.context, ev.len), (77, 100));
    assert!(ev.error.is_none());
    // 78, still in the ring, then 77, the current buffer.
    assert_eq!(errno(b.ep.cancel_recv(78)), None);
    expect_multi_cancelled(b.next_completion(), 78, 0);
    assert_eq!(errno(b.ep.cancel_recv(77)), None);
    expect_multi_cancelled(b.next_completion(), 77, 100);
    assert_eq!(errno(b.ep.cancel_recv(77)), Some(FiErrno::FI_ENOENT));
    // No buffer is left: the next message waits for a receive, and takes the next one.
    a.send(0, b"after", 2);
    assert!(b.next_completion().is_none());
    for _ in 0..8 {
        post(&mut b, 5);
    }
    let ev = b.next_completion().expect("the next receive takes it");
    assert_eq!((ev.context, ev.len, ev.multi_recv), (5, 5, None));
}

#[test]
fn a_multi_receive_buffer_is_in_progress_on_a_nic_of_interface_1_18() {
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(nic_addr(0));
    cfg.interface_minor = since::MULTI_RECV_CANCEL - 1;
    let mut b = Node::new(fabric.add_nic(cfg).unwrap(), JOB, 4);
    b.ep.post_recv_multi(b.pool.alloc().unwrap(), None, 77)
        .map_err(|(e, _)| e)
        .unwrap();
    assert_eq!(errno(b.ep.cancel_recv(77)), Some(FiErrno::FI_EBUSY));
    assert!(b.next_completion().is_none(), "nothing withdrawn");
}

/// A multi-receive buffer a message has been placed in is the NIC's current buffer: the
/// NIC's head is past its entry, and past receives posted after it that were cancelled. Those
/// entries are free again though the buffer stays posted, so receives posted and cancelled
/// round the ring while it waits for more messages never leave the ring full.
#[test]
fn receives_cancelled_behind_the_current_multi_receive_buffer_leave_their_entries_free() {
    let (_fabric, mut a, mut b) = pair();
    let pool = uet_driver::DmaPool::new(&b.nic, 64 * 1024, 1).unwrap();
    b.ep.post_recv_multi(pool.alloc().unwrap(), Some(1), 77)
        .map_err(|(e, _)| e)
        .unwrap();
    a.send(0, &[7; 100], 1);
    let ev = b.next_completion().expect("the message");
    assert_eq!((ev.context, ev.len), (77, 100));
    assert!(ev.error.is_none());
    assert!(!ev.multi_recv.expect("multi-receive").released);
    while a.next_completion().is_some() {}
    // Twice round the ring of 64 entries.
    for ctx in 100..228u64 {
        let posted =
            b.ep.post_recv(b.pool.alloc().unwrap(), ctx)
                .map_err(|(e, _)| e);
        assert_eq!(errno(posted), None, "receive {ctx}");
        b.ep.cancel_recv(ctx).expect("cancel");
        expect_cancelled(b.next_completion(), CompletionKind::Recv, ctx);
    }
    // The buffer still takes messages.
    a.send(0, &[8; 100], 2);
    let ev = b.next_completion().expect("the second message");
    assert_eq!((ev.context, ev.len), (77, 100));
    assert_eq!(ev.multi_recv.expect("multi-receive").offset, 128);
}
