//! Probes of the NIC's unexpected list (host interface 1.18; fi_tagged(3) `FI_PEEK`,
//! `FI_CLAIM`, `FI_DISCARD`): a peek reports the oldest matching message and leaves it, a
//! claim reserves it for the receive that names the claim, a discard drops it; a probe that
//! finds nothing completes `FI_ENOMSG`.

use uet_av::FiErrno;
use uet_driver::{CqEvent, CqOp, TaggedProbe};
use uet_fwif::datapath::{CompletionKind, LocalStatus};
use uet_regs::RX_UNEXPECTED_OVERFLOW;
use uet_tests::{pair_with, Node};

const JOB: u32 = 0x00_9E3C;

/// The next completion of `b`: a probe's report of a message.
fn report(b: &mut Node) -> CqEvent {
    let ev = b.next_completion().expect("the probe completes");
    assert_eq!(
        (ev.kind, ev.op),
        (CompletionKind::TaggedRecv, CqOp::TaggedRecv)
    );
    assert!(ev.error.is_none(), "{:?}", ev.error);
    assert!(ev.report, "a report");
    assert!(ev.buffer.is_none(), "a probe takes no buffer");
    ev
}

/// The next completion of `b`: a probe that found nothing.
fn nothing(b: &mut Node, context: u64) {
    let ev = b.next_completion().expect("the probe completes");
    let err = ev.error.expect("FI_ENOMSG");
    assert_eq!(err.errno, FiErrno::FI_ENOMSG);
    assert_eq!(err.local, LocalStatus::NoMessage);
    assert_eq!((ev.context, ev.len, ev.report), (context, 0, false));
}

/// The next completion of `b`: a tagged receive that took a message.
fn received(b: &mut Node) -> CqEvent {
    let ev = b.next_completion().expect("a receive completion");
    assert_eq!((ev.kind, ev.report), (CompletionKind::TaggedRecv, false));
    assert!(ev.error.is_none(), "{:?}", ev.error);
    ev
}

fn bytes(ev: &CqEvent) -> Vec<u8> {
    ev.buffer.as_ref().expect("buffer").to_vec().expect("read")
}

#[test]
fn a_peek_reports_the_oldest_matching_message_and_leaves_it() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    a.tsend(0, b"first", 0x15, 1);
    a.tsend(0, b"second, longer", 0x15, 2);
    a.send_ok();
    a.send_ok();
    b.ep.post_tprobe(TaggedProbe::Peek, 0x10, 0xF, 0, 50)
        .unwrap();
    let ev = report(&mut b);
    assert_eq!(
        (ev.context, ev.len, ev.tag, ev.data, ev.src_addr),
        (50, 5, 0x15, 1, 0)
    );
    // Left where it was: a second peek finds it again, and a receive takes it.
    b.ep.post_tprobe(TaggedProbe::Peek, 0x15, 0, 0, 51).unwrap();
    assert_eq!(report(&mut b).data, 1);
    b.trecv(0x15, 0, 60);
    let ev = received(&mut b);
    assert_eq!((ev.context, bytes(&ev)), (60, b"first".to_vec()));
    b.ep.post_tprobe(TaggedProbe::Peek, 0x15, 0, 0, 52).unwrap();
    assert_eq!(report(&mut b).len, 14);
    // A report is no received message.
    let stats = b.ep.counters().unwrap();
    assert_eq!((stats.rx_messages, stats.rx_tagged_messages), (1, 1));
}

#[test]
fn a_peek_that_finds_nothing_completes_enomsg() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    b.ep.post_tprobe(TaggedProbe::Peek, 7, 0, 0, 1).unwrap();
    nothing(&mut b, 1);
    // An untagged message waiting, and a tagged one of another tag, are not found.
    a.send(0, b"untagged", 2);
    a.tsend(0, b"tag 8", 8, 3);
    a.send_ok();
    a.send_ok();
    b.ep.post_tprobe(TaggedProbe::Peek, 7, 0, 0, 4).unwrap();
    nothing(&mut b, 4);
    let stats = b.ep.counters().unwrap();
    assert_eq!(stats.rx_messages, 0);
    // Both still wait for their receives.
    b.trecv(8, 0, 5);
    assert_eq!(bytes(&received(&mut b)), b"tag 8");
    b.post_recvs(1);
    assert_eq!(bytes(&received_untagged(&mut b)), b"untagged");
}

fn received_untagged(b: &mut Node) -> CqEvent {
    let ev = b.next_completion().expect("a receive completion");
    assert_eq!(ev.kind, CompletionKind::Recv);
    assert!(ev.error.is_none(), "{:?}", ev.error);
    ev
}

/// `FI_PEEK | FI_CLAIM` reserves the message: receives and peeks pass it over, and only the
/// `FI_CLAIM` receive naming the claim takes it, once.
#[test]
fn a_claimed_message_is_taken_only_by_the_receive_that_names_its_claim() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    a.tsend(0, b"claimed", 0x40, 1);
    a.tsend(0, b"next", 0x40, 2);
    a.send_ok();
    a.send_ok();
    b.ep.post_tprobe(TaggedProbe::PeekClaim(0xC1A1), 0x40, 0, 0, 10)
        .unwrap();
    let ev = report(&mut b);
    assert_eq!((ev.len, ev.data), (7, 1));
    // A peek and a receive now find the next message.
    b.ep.post_tprobe(TaggedProbe::Peek, 0x40, 0, 0, 11).unwrap();
    assert_eq!(report(&mut b).data, 2);
    b.trecv(0x40, 0, 12);
    let ev = received(&mut b);
    assert_eq!((ev.context, bytes(&ev)), (12, b"next".to_vec()));
    // Another claim takes nothing; the claim takes its message.
    let buf = b.pool.alloc().unwrap();
    b.ep.post_trecv_claimed(buf, 0xC1A2, 13).unwrap();
    nothing(&mut b, 13);
    let buf = b.pool.alloc().unwrap();
    b.ep.post_trecv_claimed(buf, 0xC1A1, 14).unwrap();
    let ev = received(&mut b);
    assert_eq!((ev.context, ev.tag, ev.data, ev.src_addr), (14, 0x40, 1, 0));
    assert_eq!(bytes(&ev), b"claimed");
    // Once.
    let buf = b.pool.alloc().unwrap();
    b.ep.post_trecv_claimed(buf, 0xC1A1, 15).unwrap();
    nothing(&mut b, 15);
}

/// `FI_PEEK | FI_DISCARD` and `FI_CLAIM | FI_DISCARD` drop the message, which frees its place
/// on the list at once.
#[test]
fn a_discarded_message_is_dropped_and_frees_its_place() {
    let (_f, mut a, mut b) = pair_with(JOB, |c| c.unexpected_entries = 1);
    a.tsend(0, b"dropped by a peek", 1, 1);
    a.send_ok();
    a.tsend(0, b"no room", 2, 2);
    let err = a
        .next_completion()
        .unwrap()
        .error
        .expect("the list is full");
    assert_eq!(err.errno, FiErrno::FI_ENORX);
    assert_eq!(b.counter(RX_UNEXPECTED_OVERFLOW), 1);
    b.ep.post_tprobe(TaggedProbe::PeekDiscard, 1, 0, 0, 20)
        .unwrap();
    assert_eq!(report(&mut b).len, 17);
    b.ep.post_tprobe(TaggedProbe::Peek, 1, 0, 0, 21).unwrap();
    nothing(&mut b, 21);

    a.tsend(0, b"claimed, then dropped", 3, 3);
    a.send_ok();
    b.ep.post_tprobe(TaggedProbe::PeekClaim(9), 3, 0, 0, 22)
        .unwrap();
    report(&mut b);
    // A discard names its message by claim: tag, ignore and group are not looked at.
    b.ep.post_tprobe(TaggedProbe::Discard(9), 0x55, 0, 7, 23)
        .unwrap();
    let ev = report(&mut b);
    assert_eq!((ev.context, ev.len, ev.tag), (23, 21, 3));
    let buf = b.pool.alloc().unwrap();
    b.ep.post_trecv_claimed(buf, 9, 24).unwrap();
    nothing(&mut b, 24);
    // The list has room again.
    a.tsend(0, b"room", 4, 4);
    a.send_ok();
    assert_eq!(b.counter(RX_UNEXPECTED_OVERFLOW), 1);
}

#[test]
fn a_nic_of_interface_1_17_takes_no_probe() {
    let (_f, _a, mut b) = pair_with(JOB, |c| {
        c.interface_minor = uet_regs::since::TAGGED_PROBE - 1;
    });
    let e = b.ep.post_tprobe(TaggedProbe::Peek, 0, 0, 0, 1).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_ENOSYS);
    let buf = b.pool.alloc().unwrap();
    let (e, _buf) = b.ep.post_trecv_claimed(buf, 1, 2).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_ENOSYS);
    assert!(b.next_completion().is_none(), "nothing was posted");
}
