//! RECV_CANCEL: posted receives withdrawn from the RX ring and the tagged posted list.

mod common;

use common::*;
use uet_fwif::admin::{RecvCancelBody, RECV_CANCEL_RING_RX, RECV_CANCEL_RING_TAGGED};
use uet_fwif::datapath::RX_FLAG_MULTI_RECV;
use uet_fwif::{
    Command, Completion, CompletionKind, LocalStatus, NicAvEntry, RxDescriptor, Status,
    TaggedRxDescriptor, TxDescriptor, TxOpcode,
};
use uet_regs::*;
use uet_sim::{Fabric, NicConfig};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromZeros, IntoBytes};

const JOB: u32 = 0x0012_3456;
const TRX_OFF: usize = 0x3000;

struct Pair {
    _fabric: Fabric,
    a: Driver,
    b: Driver,
    ea: Ep,
    eb: Ep,
    /// B's tagged RX ring offset in its memory and its tail.
    trx_off: usize,
    trx_tail: u16,
}

/// NIC A sends to B's endpoint (A's AV index 3); B's endpoint has an RX and a tagged RX ring;
/// B is a NIC of interface `minor`.
fn pair(minor: u8) -> Pair {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "10.0.0.1");
    let mut cfg = NicConfig::new("10.0.0.2".parse().unwrap());
    cfg.interface_minor = minor;
    let mut b = Driver::with_config(&fabric, cfg);
    let av_a = a.av_create(64, 0).unwrap();
    let av_b = b.av_create(64, 0).unwrap();
    let ea = a.ep_create(av_a, JOB, 0x1111, 4).unwrap();
    let (mut body, base) = b.ep_body(JOB, 0x2222, 4);
    body.trx_log2 = EP_LOG2;
    body.trx_ring = U64::new(b.iova(base + TRX_OFF));
    let eb = b.ep_create_with(av_b, body, base).unwrap();
    let to_b = NicAvEntry::for_peer(&b.address_of(&eb, 0x2222), JOB);
    a.av_write(av_a, &[(3, to_b)]).unwrap();
    Pair {
        _fabric: fabric,
        a,
        b,
        ea,
        eb,
        trx_off: base + TRX_OFF,
        trx_tail: 0,
    }
}

impl Pair {
    fn cancel(&mut self, ring: u8, context: u64) -> Status {
        let body = RecvCancelBody {
            context: U64::new(context),
            ring,
            ..FromZeros::new_zeroed()
        };
        let endpoint = u32::from(self.eb.handle);
        self.b
            .submit(Command::RecvCancel { endpoint, body })
            .status()
    }

    fn send(&mut self, payload: &[u8], tag: Option<u64>) {
        assert_eq!(self.try_send(payload, tag), LocalStatus::Ok);
    }

    /// Send and give the send's completion status.
    fn try_send(&mut self, payload: &[u8], tag: Option<u64>) -> LocalStatus {
        let off = BUFS_OFF + 30 * 0x2000;
        self.a.mem.write(off, payload);
        let d = TxDescriptor {
            opcode: if tag.is_some() {
                TxOpcode::TaggedSend as u8
            } else {
                TxOpcode::Send as u8
            },
            len: U32::new(payload.len() as u32),
            buf: U64::new(self.a.iova(off)),
            dest: U64::new(3),
            context: U64::new(0x5e),
            match_bits: U64::new(tag.unwrap_or(0)),
            ..Default::default()
        };
        self.a.post_send_desc(&mut self.ea, d);
        let c = self.a.poll_cq(&mut self.ea).expect("the send completes");
        LocalStatus::from_u8(c.status)
    }

    /// Post a receive of 64 bytes at buffer slot `slot` (filled with 0xEE), context `slot`.
    fn post_recv(&mut self, slot: usize) {
        self.b.mem.fill(BUFS_OFF + slot * 0x2000, 64, 0xEE);
        self.b.post_recv(&mut self.eb, slot, 64, slot as u64);
    }

    /// Post a tagged receive for `tag` at buffer slot `slot`, context `slot`.
    fn post_trecv(&mut self, slot: usize, tag: u64) {
        self.b.mem.fill(BUFS_OFF + slot * 0x2000, 64, 0xEE);
        let d = TaggedRxDescriptor {
            buf: U64::new(self.b.iova(BUFS_OFF + slot * 0x2000)),
            len: U32::new(64),
            context: U64::new(slot as u64),
            tag: U64::new(tag),
            ..FromZeros::new_zeroed()
        };
        self.b
            .mem
            .write(self.trx_off + usize::from(self.trx_tail) * 64, d.as_bytes());
        self.trx_tail = (self.trx_tail + 1) % (1 << EP_LOG2);
        self.b.f.write(
            TRXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(self.eb.handle)
                .with_index(self.trx_tail),
        );
    }

    fn completion(&mut self) -> Option<Completion> {
        self.b.poll_cq(&mut self.eb)
    }
}

fn summary(c: &Completion) -> (u64, LocalStatus, u32, u8) {
    (
        c.context.get(),
        LocalStatus::from_u8(c.status),
        c.len.get(),
        c.kind,
    )
}

const RECV: u8 = CompletionKind::Recv as u8;
const TAGGED: u8 = CompletionKind::TaggedRecv as u8;

#[test]
fn a_receive_withdrawn_from_the_middle_of_the_rx_ring_is_skipped_by_later_messages() {
    let mut p = pair(INTERFACE_MINOR);
    for slot in 1..=3 {
        p.post_recv(slot);
    }
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 2), Status::Success);
    let c = p.completion().expect("the withdrawn receive completes");
    assert_eq!(summary(&c), (2, LocalStatus::Cancelled, 0, RECV));
    assert!(p.completion().is_none());
    // Withdrawn once: a second cancel finds nothing.
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 2), Status::NotPosted);
    p.send(b"first", None);
    p.send(b"second", None);
    let c1 = p.completion().unwrap();
    let c2 = p.completion().unwrap();
    assert_eq!(summary(&c1), (1, LocalStatus::Ok, 5, RECV));
    assert_eq!(summary(&c2), (3, LocalStatus::Ok, 6, RECV));
    assert_eq!(p.b.buf(1, 5), b"first");
    assert_eq!(p.b.buf(3, 6), b"second");
    assert_eq!(
        p.b.buf(2, 64),
        vec![0xEE; 64],
        "the withdrawn buffer is untouched"
    );
    // A receive already completed is no longer posted; the ring is empty now.
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 1), Status::NotPosted);
    // A message that finds no receive waits on the unexpected list for the next one.
    assert_eq!(p.try_send(b"early", None), LocalStatus::Ok);
    assert!(p.completion().is_none());
    assert_eq!(p.b.f.counter(RX_NO_BUFFER), 1);
    p.post_recv(4);
    let c = p.completion().expect("the next receive takes it");
    assert_eq!(summary(&c), (4, LocalStatus::Ok, 5, RECV));
    assert_eq!(p.b.buf(4, 5), b"early");
}

#[test]
fn a_receive_withdrawn_at_the_head_passes_the_head_and_the_ring_wraps_over_it() {
    let mut p = pair(INTERFACE_MINOR);
    // Slots 1..=7 fill the ring of 8 entries; the first two are withdrawn.
    for slot in 1..=7 {
        p.post_recv(slot);
    }
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 2), Status::Success);
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 1), Status::Success);
    assert_eq!(p.completion().map(|c| c.context.get()), Some(2));
    assert_eq!(p.completion().map(|c| c.context.get()), Some(1));
    // Both ring entries are free again: two more receives wrap over them.
    p.post_recv(8);
    p.post_recv(9);
    for (i, want) in (3..=9).enumerate() {
        p.send(&[i as u8; 4], None);
        let c = p.completion().expect("delivered");
        assert_eq!(summary(&c), (want, LocalStatus::Ok, 4, RECV));
    }
}

#[test]
fn a_withdrawn_tagged_receive_leaves_the_next_matching_one_to_the_message() {
    let mut p = pair(INTERFACE_MINOR);
    p.post_trecv(1, 0x77);
    p.post_trecv(2, 0x77);
    assert_eq!(
        p.cancel(RECV_CANCEL_RING_RX, 1),
        Status::NotPosted,
        "wrong ring"
    );
    assert_eq!(p.cancel(RECV_CANCEL_RING_TAGGED, 1), Status::Success);
    let c = p.completion().unwrap();
    assert_eq!(summary(&c), (1, LocalStatus::Cancelled, 0, TAGGED));
    assert_eq!(p.cancel(RECV_CANCEL_RING_TAGGED, 1), Status::NotPosted);
    p.send(b"tagged", Some(0x77));
    let c = p.completion().unwrap();
    assert_eq!(summary(&c), (2, LocalStatus::Ok, 6, TAGGED));
    assert_eq!(p.b.buf(1, 64), vec![0xEE; 64]);
    assert_eq!(p.cancel(RECV_CANCEL_RING_TAGGED, 2), Status::NotPosted);
}

#[test]
fn refused_cancels_change_nothing() {
    let mut p = pair(INTERFACE_MINOR);
    p.post_recv(1);
    p.post_trecv(2, 0x5);
    // Unknown context, unknown handle, undefined ring, reserved bytes.
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 99), Status::NotPosted);
    assert_eq!(p.cancel(RECV_CANCEL_RING_TAGGED, 99), Status::NotPosted);
    let body = RecvCancelBody {
        context: U64::new(1),
        ring: RECV_CANCEL_RING_RX,
        ..FromZeros::new_zeroed()
    };
    for endpoint in [0, 77, 1 << 16] {
        let c = p.b.submit(Command::RecvCancel { endpoint, body });
        assert_eq!(c.status(), Status::InvalidHandle, "handle {endpoint}");
    }
    let endpoint = u32::from(p.eb.handle);
    for bad in [
        RecvCancelBody { ring: 0, ..body },
        RecvCancelBody { ring: 3, ..body },
    ] {
        let c = p.b.submit(Command::RecvCancel {
            endpoint,
            body: bad,
        });
        assert_eq!(c.status(), Status::InvalidField);
    }
    let mut raw = Command::RecvCancel { endpoint, body }.encode(0);
    raw.body[40] = 1;
    assert_eq!(p.b.submit_raw(raw).status(), Status::InvalidField);
    assert!(p.completion().is_none(), "no completion for a refusal");
    // Both receives are still posted and take their messages.
    p.send(b"plain", None);
    p.send(b"tag", Some(0x5));
    let got: Vec<_> = std::iter::from_fn(|| p.completion())
        .map(|c| summary(&c))
        .collect();
    assert_eq!(
        got,
        [
            (1, LocalStatus::Ok, 5, RECV),
            (2, LocalStatus::Ok, 3, TAGGED)
        ]
    );
}

#[test]
fn the_tagged_ring_of_an_endpoint_without_one_is_an_invalid_field() {
    let fabric = Fabric::new();
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let av = b.av_create(8, 0).unwrap();
    let eb = b.ep_create(av, JOB, 1, 1).unwrap();
    let body = RecvCancelBody {
        context: U64::new(0),
        ring: RECV_CANCEL_RING_TAGGED,
        ..FromZeros::new_zeroed()
    };
    let endpoint = u32::from(eb.handle);
    let c = b.submit(Command::RecvCancel { endpoint, body });
    assert_eq!(c.status(), Status::InvalidField);
}

#[test]
fn before_interface_1_19_a_multi_receive_buffer_is_not_withdrawn() {
    let mut p = pair(since::MULTI_RECV_CANCEL - 1);
    post_multi_recv_of_context_1(&mut p);
    // In the ring, not yet the NIC's current buffer, and once it is.
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 1), Status::InProgress);
    p.send(b"one", None);
    let c = p.completion().unwrap();
    assert_eq!(summary(&c), (1, LocalStatus::Ok, 3, RECV));
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 1), Status::InProgress);
    p.send(b"two", None);
    assert_eq!(p.completion().map(|c| c.len.get()), Some(3));
}

#[test]
fn before_interface_1_14_recv_cancel_is_an_unknown_opcode() {
    let mut p = pair(since::RECV_CANCEL - 1);
    p.post_recv(1);
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 1), Status::InvalidOpcode);
    assert_eq!(p.cancel(0, 1), Status::InvalidOpcode, "whatever the body");
    assert!(p.completion().is_none());
    p.send(b"kept", None);
    let c = p.completion().unwrap();
    assert_eq!(summary(&c), (1, LocalStatus::Ok, 4, RECV));
}

/// RECV_CANCEL on endpoint `ep` of `b`.
fn cancel_on(b: &mut Driver, ep: &Ep, ring: u8, context: u64) -> Status {
    let body = RecvCancelBody {
        context: U64::new(context),
        ring,
        ..FromZeros::new_zeroed()
    };
    let endpoint = u32::from(ep.handle);
    b.submit(Command::RecvCancel { endpoint, body }).status()
}

/// A tagged receive posted while the completion ring is full is still in the tagged RX ring,
/// unread: it is posted, so its cancel waits for room (Busy), and is not NotPosted.
#[test]
fn a_tagged_receive_still_in_the_ring_of_a_full_completion_ring_is_busy_not_unposted() {
    let mut p = pair(INTERFACE_MINOR);
    // Seven withdrawn receives fill the completion ring of eight entries.
    for slot in 1..=7 {
        p.post_recv(slot);
        assert_eq!(p.cancel(RECV_CANCEL_RING_RX, slot as u64), Status::Success);
    }
    p.post_trecv(10, 0x99);
    assert_eq!(p.cancel(RECV_CANCEL_RING_TAGGED, 10), Status::Busy);
    assert_eq!(p.cancel(RECV_CANCEL_RING_TAGGED, 11), Status::Busy);
    for slot in 1..=7 {
        let c = p.completion().expect("a withdrawn receive");
        assert_eq!(summary(&c), (slot, LocalStatus::Cancelled, 0, RECV));
    }
    assert_eq!(p.cancel(RECV_CANCEL_RING_TAGGED, 10), Status::Success);
    let c = p.completion().expect("the withdrawn tagged receive");
    assert_eq!(summary(&c), (10, LocalStatus::Cancelled, 0, TAGGED));
    assert_eq!(p.cancel(RECV_CANCEL_RING_TAGGED, 11), Status::NotPosted);
}

/// With peer groups the RX ring is read onto the posted list only while the completion ring
/// has room: a receive posted while it is full is still posted, its cancel Busy.
#[test]
fn with_peer_groups_a_receive_still_in_the_ring_of_a_full_completion_ring_is_busy() {
    let fabric = Fabric::new();
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let c = b.submit(Command::AvCreate(uet_fwif::admin::AvCreateBody {
        capacity: U32::new(64),
        max_group_id: U32::new(3),
        ..FromZeros::new_zeroed()
    }));
    assert_eq!(c.status(), Status::Success);
    let mut eb = b.ep_create(c.result0.get(), JOB, 0x2222, 4).unwrap();
    for slot in 1..=7 {
        b.post_recv(&mut eb, slot, 64, slot as u64);
        assert_eq!(
            cancel_on(&mut b, &eb, RECV_CANCEL_RING_RX, slot as u64),
            Status::Success
        );
    }
    b.post_recv(&mut eb, 8, 64, 8);
    assert_eq!(cancel_on(&mut b, &eb, RECV_CANCEL_RING_RX, 8), Status::Busy);
    for slot in 1..=7 {
        let c = b.poll_cq(&mut eb).expect("a withdrawn receive");
        assert_eq!(summary(&c), (slot, LocalStatus::Cancelled, 0, RECV));
    }
    assert_eq!(
        cancel_on(&mut b, &eb, RECV_CANCEL_RING_RX, 8),
        Status::Success
    );
    let c = b.poll_cq(&mut eb).expect("the withdrawn receive");
    assert_eq!(summary(&c), (8, LocalStatus::Cancelled, 0, RECV));
    assert!(b.poll_cq(&mut eb).is_none());
}

/// Before interface 1.19 the NIC's current multi-receive buffer is InProgress to RECV_CANCEL,
/// and it is the oldest receive with its context: a younger receive in the ring posted with
/// the same context is not withdrawn in its place.
#[test]
fn before_interface_1_19_a_current_multi_receive_buffer_shields_a_younger_receive_with_its_context()
{
    let mut p = pair(since::MULTI_RECV_CANCEL - 1);
    post_multi_recv_of_context_1(&mut p);
    p.send(b"one", None);
    let c = p.completion().unwrap();
    assert_eq!(summary(&c), (1, LocalStatus::Ok, 3, RECV));
    // A regular receive with the same context, behind the current buffer.
    p.b.post_recv(&mut p.eb, 2, 64, 1);
    assert_eq!(p.cancel(RECV_CANCEL_RING_RX, 1), Status::InProgress);
    assert!(p.completion().is_none(), "nothing was withdrawn");
    // A message too long for the space left retires the buffer and takes the regular receive.
    p.send(&[9u8; 4090], None);
    let release = p.completion().expect("the buffer's release");
    assert_eq!(release.context.get(), 1);
    let c = p
        .completion()
        .expect("the regular receive takes the message");
    assert_eq!(summary(&c), (1, LocalStatus::Truncated, 64, RECV));
}

/// Post on B a multi-receive buffer of 4 KiB (64 bytes kept free), context 1.
fn post_multi_recv_of_context_1(p: &mut Pair) {
    let d = RxDescriptor {
        buf: U64::new(p.b.iova(BUFS_OFF + 0x2000)),
        len: U32::new(4096),
        flags: U32::new(RX_FLAG_MULTI_RECV),
        context: U64::new(1),
        min_free: U32::new(64),
        ..Default::default()
    };
    p.b.post_recv_desc(&mut p.eb, d);
}
