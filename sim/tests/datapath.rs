//! Two NICs on one fabric: sends, demultiplexing errors, DMA faults, stalls, malformed frames.

mod common;

use common::*;
use uet_fwif::auth_key::{AuthKeyAddBody, AuthKeyRemoveBody};
use uet_fwif::{
    Command, Completion, CompletionKind, LocalStatus, NicAvEntry, ReturnCode, Status, TxDescriptor,
    TxOpcode,
};
use uet_regs::*;
use uet_sim::pds::{RudRequest, FLAG_SYN};
use uet_sim::ses::StandardRequest;
use uet_sim::{frame, Fabric, NicConfig};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromZeros;

const JOB: u32 = 0x00AB_CDEF;

struct Pair {
    fabric: Fabric,
    a: Driver,
    b: Driver,
    ea: Ep,
    eb: Ep,
    /// A's AV handle (B's endpoint at index 3).
    av_a: u32,
}

/// NIC A (10.0.0.1) with an endpoint whose AV has B's endpoint at index 3; NIC B (10.0.0.2)
/// with an endpoint of job JOB whose AV has A's endpoint at index 5.
fn pair(rx_ctx_bits: u8) -> Pair {
    pair_of_interface(rx_ctx_bits, INTERFACE_MINOR)
}

/// [`pair`] with NICs of host interface 1.`minor`.
fn pair_of_interface(rx_ctx_bits: u8, minor: u8) -> Pair {
    let fabric = Fabric::new();
    let nic = |ip: &str| {
        let mut cfg = NicConfig::new(addr(ip));
        cfg.interface_minor = minor;
        Driver::with_config(&fabric, cfg)
    };
    let mut a = nic("10.0.0.1");
    let mut b = nic("10.0.0.2");
    let av_a = a.av_create(64, rx_ctx_bits).unwrap();
    let av_b = b.av_create(64, 0).unwrap();
    let ea = a.ep_create(av_a, JOB, 0x1111, 4).unwrap();
    let eb = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    let to_b = NicAvEntry::for_peer(&b.address_of(&eb, 0x2222), JOB);
    a.av_write(av_a, &[(3, to_b)]).unwrap();
    let to_a = NicAvEntry::for_peer(&a.address_of(&ea, 0x1111), JOB);
    b.av_write(av_b, &[(5, to_a)]).unwrap();
    Pair {
        fabric,
        a,
        b,
        ea,
        eb,
        av_a,
    }
}

/// A frame from NIC A (10.0.0.1) to NIC B (10.0.0.2) carrying `pkt`, from UDP port `src_port`.
fn a_to_b(src_port: u16, pkt: &[u8]) -> Vec<u8> {
    frame::build(
        [2; 6],
        frame::GATEWAY_MAC,
        addr("10.0.0.1"),
        addr("10.0.0.2"),
        src_port,
        pkt,
    )
    .unwrap()
}

/// A RUD request as a peer at PDC 40 sends it: its PDS header (`pds_flags`, `psn`), then
/// `request` with `payload`, from A to B at UDP source port `src_port`. For requests built
/// by hand.
fn request_frame(
    src_port: u16,
    pds_flags: u8,
    psn: u32,
    request: StandardRequest,
    payload: &[u8],
) -> Vec<u8> {
    let mut pkt = Vec::new();
    RudRequest {
        next_hdr: 3,
        flags: pds_flags,
        clear_psn_offset: 0,
        psn,
        spdcid: 40,
        dpdcid: 0,
    }
    .encode(&mut pkt);
    request.encode(&mut pkt);
    pkt.extend_from_slice(payload);
    a_to_b(src_port, &pkt)
}

/// A single-packet SEND (REL, SOM, EOM) to endpoint `eb` of job JOB, from initiator 0x1111:
/// the fields a request built by hand starts from.
fn send_to(eb: &Ep) -> StandardRequest {
    StandardRequest {
        opcode: 5,
        flags: 0x0B,
        job_id: JOB,
        pid_on_fep: eb.pid,
        resource_index: eb.ri_start,
        initiator: 0x1111,
        ..Default::default()
    }
}

fn status(c: &Completion) -> LocalStatus {
    LocalStatus::from_u8(c.status)
}

/// Where [`tagged_endpoint`] puts its tagged RX ring, from the endpoint's ring memory.
const TRX_OFF: usize = 0x3000;

/// An endpoint of job JOB (initiator 0x2222) on `b`, with a tagged RX ring of `2^EP_LOG2`
/// entries at `base + TRX_OFF` and AV `av`: the endpoint and `base`, its ring memory.
fn tagged_endpoint(b: &mut Driver, av: u32) -> (Ep, usize) {
    let (mut body, base) = b.ep_body(JOB, 0x2222, 4);
    body.trx_log2 = EP_LOG2;
    body.trx_ring = U64::new(b.iova(base + TRX_OFF));
    (b.ep_create_with(av, body, base).unwrap(), base)
}

#[test]
fn send_reaches_the_endpoint_at_the_av_index() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    b.post_recv(&mut eb, 0, 4096, 0xB0);
    a.send(&mut ea, 3, 1, b"hello, UET", 0xA0, 0x5151);
    let rc = b.poll_cq(&mut eb).expect("receive completion");
    assert_eq!(rc.kind, CompletionKind::Recv as u8);
    assert_eq!(status(&rc), LocalStatus::Ok);
    assert_eq!(rc.context.get(), 0xB0);
    assert_eq!(rc.len.get(), 10);
    assert_eq!(rc.data.get(), 0x5151);
    assert_eq!(rc.src_addr.get(), 5, "reverse translation through B's AV");
    assert_eq!(b.buf(0, 10), b"hello, UET");
    let sc = a.poll_cq(&mut ea).expect("send completion");
    assert_eq!(sc.kind, CompletionKind::Send as u8);
    assert_eq!(status(&sc), LocalStatus::Ok);
    assert_eq!(sc.return_code, ReturnCode::Ok as u8);
    assert_eq!((sc.context.get(), sc.len.get()), (0xA0, 10));
    assert_eq!(a.f.counter(TX_PACKETS), 1);
    assert_eq!(a.f.counter(TX_BYTES), 10);
    assert_eq!(b.f.counter(RX_PACKETS), 1);
    assert_eq!(b.f.counter(RX_BYTES), 10);
    assert!(b.f.read(INTR_CAUSE).completion());
    // A second send: more completions, phase tracking across the CQ.
    for i in 0..10u64 {
        b.post_recv(&mut eb, 0, 64, i);
        a.send(&mut ea, 3, 1, &[i as u8; 8], i, 0);
        assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(i));
        assert_eq!(
            a.poll_cq(&mut ea).map(|c| status(&c)),
            Some(LocalStatus::Ok)
        );
    }
    assert_eq!(a.f.counter(TX_ERRORS), 0);
}

#[test]
fn unknown_sender_and_user_id_in_src_addr() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    // B's AV without A: FI_ADDR_NOTAVAIL.
    let av_b2 = b.av_create(8, 0).unwrap();
    let mut eb2 = b.ep_create(av_b2, JOB, 0x3333, 1).unwrap();
    let to_b2 = NicAvEntry::for_peer(&b.address_of(&eb2, 0x3333), JOB);
    let av_a = 1;
    a.av_write(av_a, &[(4, to_b2)]).unwrap();
    b.post_recv(&mut eb2, 0, 64, 1);
    a.send(&mut ea, 4, 1, b"x", 1, 0);
    assert_eq!(b.poll_cq(&mut eb2).unwrap().src_addr.get(), u64::MAX);
    // With a user id on A's entry in B's AV, the user id is reported.
    let to_a = NicAvEntry::for_peer(&a.address_of(&ea, 0x1111), JOB).with_user_id(0xC0FFEE);
    b.av_write(1, &[(5, to_a)]).unwrap();
    b.post_recv(&mut eb, 0, 64, 2);
    a.send(&mut ea, 3, 1, b"y", 2, 0);
    assert_eq!(b.poll_cq(&mut eb).unwrap().src_addr.get(), 0xC0FFEE);
}

#[test]
fn wire_bytes_match_the_uet_layout() {
    // Capture what A puts on the wire by sending to an address with no NIC, then re-parse it
    // through the public parsers.
    let Pair {
        mut a,
        mut ea,
        av_a,
        ..
    } = pair(0);
    let ghost = uet_fwif::UetAddress {
        fabric_addr: addr("10.0.0.99"),
        ..a.address_of(&ea, 1)
    };
    a.av_write(av_a, &[(9, NicAvEntry::for_peer(&ghost, JOB))])
        .unwrap();
    a.send(&mut ea, 9, 1, b"zz", 0x77, 0);
    let c = a.poll_cq(&mut ea).unwrap();
    assert_eq!(status(&c), LocalStatus::Unreachable);
    assert_eq!(c.context.get(), 0x77);
    assert_eq!(a.f.counter(TX_ERRORS), 1);
    // Build the same request by hand and check the header offsets the NIC uses.
    let req = RudRequest {
        next_hdr: 3,
        flags: FLAG_SYN,
        clear_psn_offset: 0,
        psn: 1,
        spdcid: 1,
        dpdcid: 0,
    };
    let mut pkt = Vec::new();
    req.encode(&mut pkt);
    StandardRequest {
        opcode: 5,
        flags: 0x0B,
        job_id: JOB,
        pid_on_fep: 0x123,
        resource_index: 2,
        request_length: 2,
        ..Default::default()
    }
    .encode(&mut pkt);
    pkt.extend_from_slice(b"zz");
    let f = a_to_b(9, &pkt);
    let udp_payload = 14 + 20 + 8;
    assert_eq!(&f[36..38], &4793u16.to_be_bytes());
    assert_eq!(f[udp_payload] >> 3, 2, "PDS type RUD_REQ");
    assert_eq!(f[udp_payload + 12], 5, "SES opcode SEND");
    assert_eq!(
        &f[udp_payload + 12 + 4..udp_payload + 12 + 8],
        &[0x00, 0xAB, 0xCD, 0xEF]
    );
    assert_eq!(
        &f[udp_payload + 12 + 8..udp_payload + 12 + 10],
        &[0x01, 0x23]
    );
}

fn expect_remote(a: &mut Driver, ea: &mut Ep, rc: ReturnCode) {
    let c = a.poll_cq(ea).expect("send completion");
    assert_eq!(status(&c), LocalStatus::Remote);
    assert_eq!(c.return_code, rc as u8, "{rc}");
}

#[test]
fn wrong_job_pid_and_index_are_rejected() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        av_a,
        ..
    } = pair(0);
    b.post_recv(&mut eb, 0, 64, 1);
    let good = b.address_of(&eb, 0x2222);
    // Wrong JobID.
    a.av_write(av_a, &[(10, NicAvEntry::for_peer(&good, JOB + 1))])
        .unwrap();
    a.send(&mut ea, 10, 1, b"j", 1, 0);
    expect_remote(&mut a, &mut ea, ReturnCode::BadJobId);
    assert_eq!(b.f.counter(RX_BAD_JOB_ID), 1);
    // Right JobID, wrong PIDonFEP.
    let wrong_pid = uet_fwif::UetAddress {
        pid_on_fep: good.pid_on_fep + 7,
        ..good
    };
    a.av_write(av_a, &[(11, NicAvEntry::for_peer(&wrong_pid, JOB))])
        .unwrap();
    a.send(&mut ea, 11, 1, b"p", 2, 0);
    expect_remote(&mut a, &mut ea, ReturnCode::BadPid);
    assert_eq!(b.f.counter(RX_BAD_PID), 1);
    // Resource index outside the endpoint's range.
    let wrong_ri = uet_fwif::UetAddress {
        ri_start: good.ri_start + good.ri_count,
        ..good
    };
    a.av_write(av_a, &[(12, NicAvEntry::for_peer(&wrong_ri, JOB))])
        .unwrap();
    a.send(&mut ea, 12, 1, b"i", 3, 0);
    expect_remote(&mut a, &mut ea, ReturnCode::BadIndex);
    assert_eq!(b.f.counter(RX_BAD_INDEX), 1);
    assert_eq!(a.f.counter(TX_ERRORS), 3);
    // Nothing reached B's buffers; the posted buffer is still there for a good send.
    assert!(b.peek_cq(&eb).is_none());
    a.send(&mut ea, 3, 1, b"ok", 4, 0);
    assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(1));
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
}

#[test]
fn rx_context_selects_the_resource_index() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(2);
    // rx_ctx 3 -> ri_start + 3: inside B's 4 indices.
    b.post_recv(&mut eb, 0, 64, 1);
    a.send(&mut ea, (3u64 << 62) | 3, 1, b"c", 1, 0);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
    assert!(b.poll_cq(&mut eb).is_some());
    // Index bits only: the context bits do not make index 3 out of range.
    a.send(&mut ea, (1u64 << 62) | 4, 1, b"c", 2, 0);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::AddrNotAvail)
    );
}

#[test]
fn no_buffer_is_undeliverable_before_interface_1_17() {
    let Pair {
        mut a, b, mut ea, ..
    } = pair_of_interface(0, since::UNTAGGED_UNEXPECTED - 1);
    a.send(&mut ea, 3, 1, b"nobody home", 1, 0);
    expect_remote(&mut a, &mut ea, ReturnCode::Undeliverable);
    assert_eq!(b.f.counter(RX_NO_BUFFER), 1);
}

#[test]
fn truncation_delivers_what_fits() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    b.post_recv(&mut eb, 0, 4, 1);
    a.send(&mut ea, 3, 1, b"0123456789", 1, 0);
    let c = b.poll_cq(&mut eb).unwrap();
    assert_eq!(status(&c), LocalStatus::Truncated);
    assert_eq!(c.len.get(), 4);
    assert_eq!(b.buf(0, 4), b"0123");
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
}

#[test]
fn local_errors_complete_without_sending() {
    let Pair { mut a, mut ea, .. } = pair(0);
    // AV index never written, and beyond the table.
    a.send(&mut ea, 4, 1, b"x", 1, 0);
    a.send(&mut ea, 1 << 40, 1, b"x", 2, 0);
    // Payload outside mapped memory.
    let d = TxDescriptor {
        opcode: 1,
        len: U32::new(16),
        buf: U64::new(0x7000_0000),
        dest: U64::new(3),
        context: U64::new(3),
        ..Default::default()
    };
    a.post_send_desc(&mut ea, d);
    // Bad descriptors: unknown opcode, reserved bytes, above CAP_MAX_MSG.
    let mut bad = d;
    bad.opcode = 9;
    bad.context = U64::new(4);
    a.post_send_desc(&mut ea, bad);
    let mut bad = d;
    bad.reserved1[5] = 1;
    bad.context = U64::new(5);
    a.post_send_desc(&mut ea, bad);
    let mut bad = d;
    bad.len = U32::new(a.f.read(CAP_MAX_MSG) + 1);
    bad.context = U64::new(6);
    a.post_send_desc(&mut ea, bad);
    let got: Vec<(u64, LocalStatus)> = std::iter::from_fn(|| a.poll_cq(&mut ea))
        .map(|c| (c.context.get(), status(&c)))
        .collect();
    assert_eq!(
        got,
        [
            (1, LocalStatus::AddrNotAvail),
            (2, LocalStatus::AddrNotAvail),
            (3, LocalStatus::DmaFault),
            (4, LocalStatus::BadDescriptor),
            (5, LocalStatus::BadDescriptor),
            (6, LocalStatus::BadDescriptor),
        ]
    );
    assert_eq!(a.f.counter(DMA_FAULTS), 1);
    assert_eq!(a.f.counter(TX_ERRORS), 6);
    assert_eq!(a.f.counter(TX_PACKETS), 0);
}

/// A READ lands in its local buffer, which the NIC writes: a buffer in memory mapped readable
/// only (`DmaAccess`, a vfio-user `DMA_MAP` without `VFIO_DMA_MAP_FLAG_WRITE`) faults at post
/// as one outside mapped memory does, and nothing is sent.
#[test]
fn a_read_into_memory_mapped_readable_only_completes_without_sending() {
    use std::os::fd::AsFd;
    let Pair { mut a, mut ea, .. } = pair(0);
    let iova = 0x7000_0000;
    let readable = DmaMem::new(4096, iova);
    let access = uet_sim::DmaAccess {
        read: true,
        write: false,
    };
    a.f.dma_map_for(iova, 4096, readable.fd.as_fd(), 0, access)
        .unwrap();
    let d = TxDescriptor {
        opcode: TxOpcode::Read as u8,
        len: U32::new(16),
        buf: U64::new(iova),
        dest: U64::new(3),
        context: U64::new(1),
        ..Default::default()
    };
    a.post_send_desc(&mut ea, d);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| (c.context.get(), status(&c))),
        Some((1, LocalStatus::DmaFault))
    );
    assert_eq!(a.f.counter(DMA_FAULTS), 1);
    assert_eq!(a.f.counter(TX_PACKETS), 0, "nothing was sent");
}

#[test]
fn rx_buffer_outside_dma_memory() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    b.post_recv_desc(
        &mut eb,
        uet_fwif::RxDescriptor {
            buf: U64::new(0x7000_0000),
            len: U32::new(64),
            context: U64::new(9),
            ..Default::default()
        },
    );
    a.send(&mut ea, 3, 1, b"lost", 1, 0);
    assert_eq!(
        b.poll_cq(&mut eb).map(|c| status(&c)),
        Some(LocalStatus::DmaFault)
    );
    assert_eq!(b.f.counter(DMA_FAULTS), 1);
    expect_remote(&mut a, &mut ea, ReturnCode::HostUnsuccessfulCompletion);
}

#[test]
fn full_completion_ring_stalls_and_never_overwrites() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    // B's CQ has 8 slots, 7 usable. Post 7 buffers and receive 7 messages without consuming.
    for i in 0..7u64 {
        b.post_recv(&mut eb, i as usize, 64, i);
    }
    for i in 0..7u64 {
        a.send(&mut ea, 3, 1, &[i as u8], i, 0);
        assert!(a.poll_cq(&mut ea).is_some());
    }
    // An 8th message waits at B: its buffer is posted but the CQ is full.
    b.post_recv(&mut eb, 7, 64, 7);
    a.send(&mut ea, 3, 1, b"late", 7, 0);
    assert!(a.peek_cq(&ea).is_none(), "no response while B stalls");
    // Consuming B's completions frees the ring; the stalled message completes in order.
    let mut seen = Vec::new();
    while let Some(c) = b.poll_cq(&mut eb) {
        seen.push(c.context.get());
    }
    assert_eq!(seen, (0..8).collect::<Vec<_>>());
    assert_eq!(a.poll_cq(&mut ea).map(|c| c.context.get()), Some(7));
    assert!(b.f.debug_counters().cq_stalls > 0);

    // Sender side: with the CQ not consumed, the TX engine stops after 7 descriptors.
    for i in 0..7u64 {
        b.post_recv(&mut eb, 0, 64, i);
    }
    for i in 0..7u64 {
        a.send(&mut ea, 3, 1, b"s", 100 + i, 0);
    }
    b.post_recv(&mut eb, 0, 64, 7);
    a.send(&mut ea, 3, 1, b"s", 107, 0);
    assert_eq!(a.f.counter(TX_PACKETS), 8 + 7, "the 8th waits for CQ space");
    // B consumes its completions so that it can take the 8th message.
    let mut n = 0;
    while b.poll_cq(&mut eb).is_some() {
        n += 1;
    }
    assert_eq!(n, 7);
    let mut got = Vec::new();
    while let Some(c) = a.poll_cq(&mut ea) {
        got.push(c.context.get());
    }
    assert_eq!(got, (100..108).collect::<Vec<_>>());
    assert_eq!(a.f.counter(TX_PACKETS), 16);
    assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(7));
}

/// Fill B's completion ring (8 slots, 7 usable) with 7 messages from A, which A's AV sends
/// to at index 3, into B's buffers 0 to 6 (contexts 0 to 6), each send completing `Ok`.
fn fill_completion_ring(a: &mut Driver, ea: &mut Ep, b: &mut Driver, eb: &mut Ep) {
    for i in 0..7u64 {
        b.post_recv(eb, i as usize, 64, i);
    }
    for i in 0..7u64 {
        a.send(ea, 3, 1, &[i as u8], i, 0);
        assert_eq!(a.poll_cq(ea).map(|c| status(&c)), Some(LocalStatus::Ok));
    }
}

/// With peer groups the RX ring is read onto the posted list only while the completion ring
/// has room, so a buffer posted while it is full is still in the ring: a message for it waits
/// with it, as at an endpoint without peer groups, and is not refused for want of a buffer.
#[test]
fn with_peer_groups_a_full_completion_ring_stalls_a_message_whose_buffer_is_in_the_ring() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "10.0.0.1");
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let av_a = a.av_create(64, 0).unwrap();
    let c = b.submit(Command::AvCreate(uet_fwif::admin::AvCreateBody {
        capacity: U32::new(64),
        max_group_id: U32::new(3),
        ..FromZeros::new_zeroed()
    }));
    assert_eq!(c.status(), Status::Success);
    let av_b = c.result0.get();
    let mut ea = a.ep_create(av_a, JOB, 0x1111, 4).unwrap();
    let mut eb = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    let to_b = NicAvEntry::for_peer(&b.address_of(&eb, 0x2222), JOB);
    a.av_write(av_a, &[(3, to_b)]).unwrap();
    fill_completion_ring(&mut a, &mut ea, &mut b, &mut eb);
    // The 8th buffer is posted while the CQ is full; its message waits for CQ space.
    b.post_recv(&mut eb, 7, 64, 7);
    a.send(&mut ea, 3, 1, b"late", 7, 0);
    assert!(a.peek_cq(&ea).is_none(), "no response while B stalls");
    assert_eq!(b.f.counter(RX_NO_BUFFER), 0);
    let mut seen = Vec::new();
    while let Some(c) = b.poll_cq(&mut eb) {
        assert_eq!(status(&c), LocalStatus::Ok);
        seen.push(c.context.get());
    }
    assert_eq!(seen, (0..8).collect::<Vec<_>>());
    assert_eq!(b.buf(7, 4), b"late");
    let sc = a.poll_cq(&mut ea).expect("the late send completes");
    assert_eq!((sc.context.get(), status(&sc)), (7, LocalStatus::Ok));
}

/// Tagged receives are read from the tagged RX ring only while the completion ring has room,
/// so a receive posted while it is full is still in the ring: a message for it waits with it.
/// It neither takes a place on the unexpected list nor, that list being full, is refused
/// RC_UNDELIVERABLE although its receive was posted.
#[test]
fn a_full_completion_ring_stalls_a_tagged_message_whose_receive_is_in_the_ring() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "10.0.0.1");
    let mut cfg = NicConfig::new("10.0.0.2".parse().unwrap());
    cfg.unexpected_entries = 1;
    let mut b = Driver::with_config(&fabric, cfg);
    let av_a = a.av_create(64, 0).unwrap();
    let av_b = b.av_create(64, 0).unwrap();
    let mut ea = a.ep_create(av_a, JOB, 0x1111, 4).unwrap();
    let (mut eb, base) = tagged_endpoint(&mut b, av_b);
    let to_b = NicAvEntry::for_peer(&b.address_of(&eb, 0x2222), JOB);
    a.av_write(av_a, &[(3, to_b)]).unwrap();
    let tsend = |a: &mut Driver, ea: &mut Ep, payload: &[u8], tag: u64, context: u64| {
        let off = 0x2000 * 2;
        a.mem.write(common::BUFS_OFF + off, payload);
        let d = TxDescriptor {
            opcode: TxOpcode::TaggedSend as u8,
            len: U32::new(payload.len() as u32),
            buf: U64::new(a.iova(common::BUFS_OFF + off)),
            dest: U64::new(3),
            context: U64::new(context),
            match_bits: U64::new(tag),
            ..Default::default()
        };
        a.post_send_desc(ea, d);
    };
    fill_completion_ring(&mut a, &mut ea, &mut b, &mut eb);
    // The unexpected list's one place goes to a message no receive will match.
    tsend(&mut a, &mut ea, b"other", 0x99, 100);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1);
    // A tagged receive for 0x5 is posted while the CQ is full: it stays in the ring.
    let rd = uet_fwif::TaggedRxDescriptor {
        buf: U64::new(b.iova(common::BUFS_OFF + 8 * 0x2000)),
        len: U32::new(64),
        context: U64::new(8),
        tag: U64::new(0x5),
        ..FromZeros::new_zeroed()
    };
    b.mem
        .write(base + TRX_OFF, zerocopy::IntoBytes::as_bytes(&rd));
    b.f.write(
        TRXQ_DOORBELL,
        QueueDoorbell::new().with_endpoint(eb.handle).with_index(1),
    );
    tsend(&mut a, &mut ea, b"late", 0x5, 101);
    assert!(a.peek_cq(&ea).is_none(), "no response while B stalls");
    assert_eq!(b.f.counter(RX_UNEXPECTED_OVERFLOW), 0, "not refused");
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1, "not held unexpected");
    let mut seen = Vec::new();
    while let Some(c) = b.poll_cq(&mut eb) {
        assert_eq!(status(&c), LocalStatus::Ok);
        seen.push((c.context.get(), c.tag.get()));
    }
    let mut want: Vec<(u64, u64)> = (0..7).map(|i| (i, 0)).collect();
    want.push((8, 0x5));
    assert_eq!(seen, want);
    assert_eq!(b.buf(8, 4), b"late");
    let sc = a.poll_cq(&mut ea).expect("the late send completes");
    assert_eq!((sc.context.get(), status(&sc)), (101, LocalStatus::Ok));
}

/// A copy of a single-packet tagged message held on the unexpected list is answered again
/// but takes no second place there: one receive takes the message, a second one stays
/// posted.
#[test]
fn a_duplicate_tagged_message_is_held_unexpected_once() {
    let fabric = Fabric::new();
    let a = Driver::new(&fabric, "10.0.0.1");
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let av_b = b.av_create(64, 0).unwrap();
    let (mut eb, base) = tagged_endpoint(&mut b, av_b);
    let to_eb = send_to(&eb);
    let request = StandardRequest {
        opcode: 9,
        message_id: 3,
        match_bits: 0x5,
        request_length: 3,
        ..to_eb
    };
    let f = request_frame(5, FLAG_SYN, 9, request, b"tag");
    fabric.inject_frame(&f);
    fabric.inject_frame(&f);
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1, "held once");
    assert_eq!(
        a.f.debug_counters().stray_responses,
        2,
        "both copies answered"
    );
    for (i, context) in [8u64, 9].into_iter().enumerate() {
        let rd = uet_fwif::TaggedRxDescriptor {
            buf: U64::new(b.iova(common::BUFS_OFF + (8 + i) * 0x2000)),
            len: U32::new(64),
            context: U64::new(context),
            tag: U64::new(0x5),
            ..FromZeros::new_zeroed()
        };
        b.mem.write(
            base + TRX_OFF + i * uet_fwif::datapath::TAGGED_RX_DESCRIPTOR_BYTES,
            zerocopy::IntoBytes::as_bytes(&rd),
        );
        b.f.write(
            TRXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(eb.handle)
                .with_index(i as u16 + 1),
        );
    }
    let c = b.poll_cq(&mut eb).expect("the message");
    assert_eq!((c.context.get(), status(&c)), (8, LocalStatus::Ok));
    assert_eq!(b.buf(8, 3), b"tag");
    assert!(
        b.poll_cq(&mut eb).is_none(),
        "the second receive stays posted"
    );
}

/// Bytes 32–39 of a SOM packet are remote CQ data only when the SES flag HD says so: a
/// request without HD completes with `data` 0 whatever those bytes hold, one with HD carries
/// them.
#[test]
fn header_data_is_remote_cq_data_only_with_the_hd_flag() {
    let Pair {
        fabric,
        mut b,
        mut eb,
        ..
    } = pair(0);
    for (i, (flags, want)) in [(0x0Bu8, 0u64), (0x0B | 0x04, 0x0102_0304_0506_0708)]
        .into_iter()
        .enumerate()
    {
        b.post_recv(&mut eb, i, 64, i as u64);
        let request = StandardRequest {
            opcode: 5,
            flags,
            job_id: JOB,
            pid_on_fep: eb.pid,
            resource_index: eb.ri_start,
            initiator: 0x1111,
            message_id: i as u16,
            header_data: 0x0102_0304_0506_0708,
            request_length: 3,
            ..Default::default()
        };
        fabric.inject_frame(&request_frame(5, FLAG_SYN, 9 + i as u32, request, b"hdr"));
        let c = b.poll_cq(&mut eb).expect("delivered");
        assert_eq!(status(&c), LocalStatus::Ok);
        assert_eq!(
            (c.context.get(), c.data.get()),
            (i as u64, want),
            "flags {flags:#x}"
        );
    }
}

#[test]
fn doorbells_for_unknown_endpoints_and_bad_indices_are_ignored() {
    let Pair { a, ea, .. } = pair(0);
    a.f.write(
        TXQ_DOORBELL,
        QueueDoorbell::new().with_endpoint(77).with_index(1),
    );
    a.f.write(
        RXQ_DOORBELL,
        QueueDoorbell::new().with_endpoint(ea.handle).with_index(8),
    );
    a.f.write(
        CQ_DOORBELL,
        QueueDoorbell::new().with_endpoint(ea.handle).with_index(3),
    );
    let dc = a.f.debug_counters();
    assert_eq!(dc.unknown_endpoint_doorbells, 1);
    assert_eq!(dc.bad_doorbells, 2);
    assert_eq!(a.f.counter(TX_PACKETS), 0);
}

#[test]
fn malformed_frames_are_counted_and_dropped() {
    let Pair {
        fabric,
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    b.post_recv(&mut eb, 0, 64, 1);
    // A well-formed request injected by hand reaches B (proves the injector works) ...
    let mut pkt = Vec::new();
    RudRequest {
        next_hdr: 3,
        flags: FLAG_SYN,
        clear_psn_offset: 0,
        psn: 9,
        spdcid: 40,
        dpdcid: 0,
    }
    .encode(&mut pkt);
    let to_eb = send_to(&eb);
    StandardRequest {
        request_length: 3,
        ..to_eb
    }
    .encode(&mut pkt);
    pkt.extend_from_slice(b"inj");
    let good = a_to_b(5, &pkt);
    fabric.inject_frame(&good);
    let c = b.poll_cq(&mut eb).unwrap();
    assert_eq!(b.buf(0, 3), b"inj");
    assert_eq!(c.src_addr.get(), 5);
    // ... and A counts the response to a request it never sent as stray.
    assert_eq!(a.f.debug_counters().stray_responses, 1);

    let mut bad: Vec<Vec<u8>> = Vec::new();
    bad.push(good[..good.len() - 1].to_vec()); // truncated payload (UDP length)
    bad.push(good[..30].to_vec()); // truncated IP header
    let mut x = good.clone();
    x[14 + 10] ^= 0xFF; // IPv4 checksum
    bad.push(x);
    let mut x = good.clone();
    let n = x.len();
    x[n - 1] ^= 0x01; // UDP checksum
    bad.push(x);
    // Wrong UDP port (with checksums fixed up): rebuild with a port other than 4793.
    let mut x = good.clone();
    x[36..38].copy_from_slice(&4794u16.to_be_bytes());
    x[40..42].copy_from_slice(&[0, 0]); // no UDP checksum
    bad.push(x);
    // A SES header with reserved bits set.
    let mut p2 = pkt.clone();
    p2[12 + 8] |= 0x80;
    bad.push(a_to_b(5, &p2));
    // request_length disagreeing with the payload.
    let mut p3 = pkt.clone();
    p3[12 + 43] = 9;
    bad.push(a_to_b(5, &p3));
    // Unknown PDS type.
    let mut p4 = pkt.clone();
    p4[0] = 0x70;
    bad.push(a_to_b(5, &p4));
    // Garbage, empty.
    bad.push(vec![0xFF; 3]);
    // The 30-byte and 3-byte frames have no complete IP header: the fabric cannot route them.
    let n_routed = bad.len() - 2;
    for f in &bad {
        fabric.inject_frame(f);
    }
    assert_eq!(b.f.counter(RX_MALFORMED), n_routed as u64);
    assert_eq!(fabric.dropped_frames(), 2);
    assert!(b.peek_cq(&eb).is_none());
    assert_eq!(b.f.counter(RX_PACKETS), 1);
    // Traffic still flows.
    b.post_recv(&mut eb, 0, 64, 2);
    a.send(&mut ea, 3, 1, b"after", 1, 0);
    assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(2));
}

#[test]
fn endpoint_destroy_with_backlog_answers_requests() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    for i in 0..7u64 {
        b.post_recv(&mut eb, 0, 64, i);
    }
    for i in 0..7u64 {
        a.send(&mut ea, 3, 1, b"q", i, 0);
    }
    b.post_recv(&mut eb, 0, 64, 7);
    a.send(&mut ea, 3, 1, b"q", 7, 0);
    // 7 delivered, 1 waiting in B's backlog; A has 7 completions.
    let mut n = 0;
    while a.poll_cq(&mut ea).is_some() {
        n += 1;
    }
    assert_eq!(n, 7);
    assert_eq!(
        b.submit(uet_fwif::Command::EndpointDestroy {
            endpoint: u32::from(eb.handle)
        })
        .status(),
        uet_fwif::Status::Success
    );
    // The waiting request is answered (its endpoint is gone) and A's send completes.
    expect_remote(&mut a, &mut ea, ReturnCode::BadJobId);
}

/// A function reset forgets every endpoint, but a request waiting in an endpoint's receive
/// backlog was taken off the wire: it is answered as a request to a function that is not
/// running, so its send completes instead of waiting for an answer that never comes.
#[test]
fn a_function_reset_answers_the_requests_waiting_for_completion_ring_room() {
    for reset in ["register", "flr"] {
        let Pair {
            mut a,
            mut b,
            mut ea,
            mut eb,
            ..
        } = pair(0);
        fill_completion_ring(&mut a, &mut ea, &mut b, &mut eb);
        b.post_recv(&mut eb, 7, 64, 7);
        a.send(&mut ea, 3, 1, b"waits", 7, 0);
        assert!(a.peek_cq(&ea).is_none(), "{reset}: the request waits at B");
        match reset {
            "register" => {
                b.f.write(FUNCTION_RESET, FunctionReset::new().with_reset(true))
            }
            _ => b.f.function_level_reset(),
        }
        expect_remote(&mut a, &mut ea, ReturnCode::Disabled);
    }
}

/// Requests for an endpoint whose completion ring is full wait in its receive backlog, but
/// only as far as `RX_BACKLOG_BYTES`: a flood of them (forged or not) past that is refused
/// RC_UNDELIVERABLE, not held without end, and the requests that waited are still delivered
/// in order once the host reads its completions.
#[test]
fn a_full_receive_backlog_refuses_further_requests() {
    let Pair {
        fabric,
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    fill_completion_ring(&mut a, &mut ea, &mut b, &mut eb);
    b.post_recv(&mut eb, 0, 64, 100);
    let body = vec![0x5A; 8192];
    let to_eb = send_to(&eb);
    let packet = |n: u32| {
        let request = StandardRequest {
            message_id: n as u16,
            request_length: body.len() as u32,
            ..to_eb
        };
        request_frame(5, 0, 1000 + n, request, &body)
    };
    let frame_len = packet(0).len();
    let held = uet_sim::RX_BACKLOG_BYTES / frame_len;
    for n in 0..held as u32 + 3 {
        fabric.inject_frame(&packet(n));
    }
    let answered = a.f.debug_counters().stray_responses;
    assert_eq!(
        answered, 3,
        "the requests past the backlog's room are answered"
    );
    assert_eq!(b.f.debug_counters().rx_backlog_overflows, 3);
    // The host reads its completions: the backlog drains, the first held request into the
    // posted buffer, and every held request is answered.
    let mut delivered = 0;
    while let Some(c) = b.poll_cq(&mut eb) {
        if c.context.get() == 100 {
            delivered += 1;
        }
    }
    assert_eq!(delivered, 1);
    assert_eq!(
        a.f.debug_counters().stray_responses,
        answered + held as u64,
        "every held request is answered once the ring has room"
    );
}

#[test]
fn ipv6_fabric_addresses_work_end_to_end() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "fd00::1");
    let mut b = Driver::new(&fabric, "fd00::2");
    let av_a = a.av_create(8, 0).unwrap();
    let av_b = b.av_create(8, 0).unwrap();
    let mut ea = a.ep_create(av_a, 7, 1, 1).unwrap();
    let mut eb = b.ep_create(av_b, 7, 2, 1).unwrap();
    a.av_write(av_a, &[(0, NicAvEntry::for_peer(&b.address_of(&eb, 2), 7))])
        .unwrap();
    b.av_write(av_b, &[(1, NicAvEntry::for_peer(&a.address_of(&ea, 1), 7))])
        .unwrap();
    b.post_recv(&mut eb, 0, 64, 1);
    a.send(&mut ea, 0, 1, b"six", 1, 0);
    let c = b.poll_cq(&mut eb).unwrap();
    assert_eq!((status(&c), c.src_addr.get()), (LocalStatus::Ok, 1));
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync + Clone>() {}
    check::<Fabric>();
    check::<uet_sim::SimFunction>();
}

#[test]
fn rx_descriptor_flags_and_min_free_are_checked() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    // Payload buffer slot 5.
    let buf = b.iova(0x8_0000 + 5 * 0x2000);
    // min_free without the multi-receive flag, then an undefined flag: both malformed.
    for (flags, min_free) in [(0u32, 16u32), (1 << 1, 0)] {
        b.post_recv_desc(
            &mut eb,
            uet_fwif::RxDescriptor {
                buf: U64::new(buf),
                len: U32::new(256),
                flags: U32::new(flags),
                context: U64::new(3),
                min_free: U32::new(min_free),
                ..Default::default()
            },
        );
        a.send(&mut ea, 3, 1, b"refused", 1, 0);
        assert_eq!(
            b.poll_cq(&mut eb).map(|c| status(&c)),
            Some(LocalStatus::BadDescriptor)
        );
        expect_remote(&mut a, &mut ea, ReturnCode::Undeliverable);
    }
    // A multi-receive descriptor takes two messages at aligned offsets.
    b.post_recv_desc(
        &mut eb,
        uet_fwif::RxDescriptor {
            buf: U64::new(buf),
            len: U32::new(256),
            flags: U32::new(uet_fwif::datapath::RX_FLAG_MULTI_RECV),
            context: U64::new(4),
            min_free: U32::new(100),
            ..Default::default()
        },
    );
    a.send(&mut ea, 3, 1, b"first", 1, 0);
    let c = b.poll_cq(&mut eb).expect("first message");
    assert_eq!((c.buf_offset.get(), c.len.get(), c.flags), (0, 5, 1 << 1));
    a.send(&mut ea, 3, 1, b"second", 1, 0);
    let c = b.poll_cq(&mut eb).expect("second message");
    // 64 + 6 -> 128: 128 bytes left >= 100, still open.
    assert_eq!((c.buf_offset.get(), c.len.get(), c.flags), (64, 6, 1 << 1));
    a.send(&mut ea, 3, 1, b"third", 1, 0);
    let c = b.poll_cq(&mut eb).expect("third message");
    // 128 + 5 -> 192: 64 left < 100: released with this message.
    assert_eq!((c.buf_offset.get(), c.flags), (128, (1 << 1) | (1 << 2)));
    assert_eq!(c.context.get(), 4);
}

/// The source CAM tells the address families apart: an IPv6 entry whose bytes begin as an IPv4
/// sender's address does (800:1:: and 10.0.0.1 differ only in the family), with the same
/// initiator and job, is not the sender's source.
#[test]
fn an_ipv6_entry_is_not_the_source_of_an_ipv4_sender() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "10.0.0.1");
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let av_a = a.av_create(64, 0).unwrap();
    let av_b = b.av_create(64, 0).unwrap();
    let mut ea = a.ep_create(av_a, JOB, 0x1111, 4).unwrap();
    let mut eb = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    let to_b = NicAvEntry::for_peer(&b.address_of(&eb, 0x2222), JOB);
    a.av_write(av_a, &[(3, to_b)]).unwrap();
    let to_a = NicAvEntry::for_peer(&a.address_of(&ea, 0x1111), JOB);
    // Index 0: an unrelated IPv6 peer 800:1:: (bytes 08 00 00 01 ..), same initiator and job.
    let mut v6 = a.address_of(&ea, 0x1111);
    v6.fabric_addr = addr("800:1::");
    let other = NicAvEntry::for_peer(&v6, JOB);
    b.av_write(av_b, &[(0, other), (5, to_a)]).unwrap();
    b.post_recv(&mut eb, 0, 4096, 0xB0);
    a.send(&mut ea, 3, 1, b"hello", 0xA0, 0);
    let rc = b.poll_cq(&mut eb).expect("receive completion");
    assert_eq!(status(&rc), LocalStatus::Ok);
    assert_eq!(
        rc.src_addr.get(),
        5,
        "the IPv4 sender 10.0.0.1 is at index 5, not the IPv6 peer 800:1:: at index 0"
    );
}

/// Only the owning AV's entries use an auth-key slot: an entry of AV A whose slot was removed
/// and then given to AV A2 (with another JobID) does not send with A2's key; the send completes
/// AddrNotAvail, as through any removed slot.
#[test]
fn an_entry_never_sends_with_another_avs_auth_key() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "10.0.0.1");
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let av_a = a.av_create(64, 0).unwrap();
    let av_a2 = a.av_create(64, 0).unwrap();
    let av_b = b.av_create(64, 0).unwrap();
    let mut ea = a.ep_create(av_a, 0x11, 0x1111, 4).unwrap();
    let mut eb = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    let add = |d: &mut Driver, av: u32, job: u32| {
        let mut body = AuthKeyAddBody::new_zeroed();
        body.job_id = U32::new(job);
        let c = d.submit(Command::AuthKeyAdd { av, body });
        assert_eq!(c.status(), Status::Success);
        c.result0.get() as u16
    };
    let slot = add(&mut a, av_a, 0x42);
    let to_b = NicAvEntry::for_peer(&b.address_of(&eb, 0x2222), 0x11).with_auth_key(slot);
    a.av_write(av_a, &[(3, to_b)]).unwrap();
    assert_eq!(
        a.submit(Command::AuthKeyRemove {
            slot: u32::from(slot),
            body: AuthKeyRemoveBody::unchecked(),
        })
        .status(),
        Status::Success
    );
    // The slot goes to the other AV, with the receiver's JobID.
    assert_eq!(add(&mut a, av_a2, JOB), slot);
    // AV_WRITE of this very entry into av_a is now refused...
    assert_eq!(a.av_write(av_a, &[(4, to_b)]), Err(Status::InvalidField));
    // ...yet the entry already there sends with av_a2's key.
    b.post_recv(&mut eb, 0, 4096, 0xB0);
    a.send(&mut ea, 3, 1, b"hello", 0xA0, 0);
    let sc = a.poll_cq(&mut ea).expect("send completion");
    assert_eq!(
        status(&sc),
        LocalStatus::AddrNotAvail,
        "av_a's entry must not use a slot owned by av_a2"
    );
    assert!(b.poll_cq(&mut eb).is_none(), "nothing delivered");
}

/// Resource index 0 is the target's provider control channel: only a control send
/// (TX_FLAG_CONTROL) goes there. An application send through an entry whose range starts at 0
/// completes AddrNotAvail and sends nothing.
#[test]
fn an_application_send_never_reaches_resource_index_0() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        av_a,
        ..
    } = pair(0);
    let mut to_zero = b.address_of(&eb, 0x2222);
    to_zero.ri_start = 0;
    a.av_write(av_a, &[(4, NicAvEntry::for_peer(&to_zero, JOB))])
        .unwrap();
    b.post_recv(&mut eb, 0, 4096, 0xB0);
    a.send(&mut ea, 4, 1, b"not a control message", 0xA0, 0);
    let c = a.poll_cq(&mut ea).expect("send completion");
    assert_eq!(status(&c), LocalStatus::AddrNotAvail);
    assert!(b.poll_cq(&mut eb).is_none(), "nothing delivered");
}

#[test]
fn an_entry_limited_to_one_mtu_refuses_longer_sends_and_writes_but_not_reads() {
    let Pair {
        mut a,
        mut ea,
        mut b,
        mut eb,
        av_a,
        ..
    } = pair(0);
    let mtu = a.f.read(CAP_PROFILES).mtu() as u32;
    let mut peer = b.address_of(&eb, 0x2222);
    peer.max_msg_mtu = true;
    let entry = NicAvEntry::for_peer(&peer, JOB);
    assert!(entry.max_msg_mtu());
    a.av_write(av_a, &[(7, entry)]).unwrap();
    assert_eq!(
        a.av_read(av_a, 7, 1).unwrap(),
        [entry],
        "AV_READ keeps the flag"
    );
    b.post_recv(&mut eb, 0, 8192, 50);
    let buf = a.iova(BUFS_OFF);
    let desc = |opcode: TxOpcode, len: u32, context: u64| TxDescriptor {
        opcode: opcode as u8,
        len: U32::new(len),
        buf: U64::new(buf),
        dest: U64::new(7),
        context: U64::new(context),
        ..Default::default()
    };
    a.post_send_desc(&mut ea, desc(TxOpcode::Send, mtu + 1, 1));
    a.post_send_desc(&mut ea, desc(TxOpcode::TaggedSend, 2 * mtu, 2));
    a.post_send_desc(&mut ea, desc(TxOpcode::Write, mtu + 1, 3));
    let refused: Vec<(u64, LocalStatus)> = std::iter::from_fn(|| a.poll_cq(&mut ea))
        .map(|c| (c.context.get(), status(&c)))
        .collect();
    assert_eq!(
        refused,
        [1, 2, 3].map(|c| (c, LocalStatus::MsgTooLong)),
        "nothing longer than the MTU goes to the peer"
    );
    assert_eq!(a.f.counter(TX_MSG_TOO_LONG), 3);
    assert_eq!(a.f.counter(TX_ERRORS), 3);
    assert_eq!(a.f.counter(TX_PACKETS), 0);
    // A READ is one-packet requests whatever its length: it goes (and B, with no memory
    // region, refuses it), and one MTU of SEND goes and arrives.
    a.post_send_desc(&mut ea, desc(TxOpcode::Read, 2 * mtu, 4));
    a.post_send_desc(&mut ea, desc(TxOpcode::Send, mtu, 5));
    let sent: Vec<(u64, LocalStatus)> = std::iter::from_fn(|| a.poll_cq(&mut ea))
        .map(|c| (c.context.get(), status(&c)))
        .collect();
    assert_eq!(sent, [(4, LocalStatus::Remote), (5, LocalStatus::Ok)]);
    assert_eq!(a.f.counter(TX_PACKETS), 3, "two READ requests and one SEND");
    assert_eq!(a.f.counter(TX_MSG_TOO_LONG), 3);
    let got = b.poll_cq(&mut eb).expect("the one-MTU send arrives");
    assert_eq!((got.context.get(), status(&got)), (50, LocalStatus::Ok));
}

/// CQ_ARM (interface 1.12): the armed ring raises its vector once, when a completion lands
/// or at once when one is waiting; the vector is delivered only as the MSI-X capability
/// says (enabled, unmasked); a bad arm changes nothing and is counted.
#[test]
fn an_armed_completion_ring_raises_its_vector_once() {
    use std::os::fd::AsFd;
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    let (tx, mut rx) = trigger_for(&b.f, 7);
    assert_ne!(b.f.msix_control() & pci::MSIX_CONTROL_ENABLE, 0);
    let arm = |b: &Driver, ep: &Ep, vector: u16| {
        b.f.write(
            CQ_ARM,
            CqArm::new().with_endpoint(ep.handle).with_vector(vector),
        );
    };

    // Armed on an empty ring: nothing until a completion lands, then one message.
    arm(&b, &eb, 7);
    assert_eq!(interrupts(&mut rx), 0);
    b.post_recv(&mut eb, 0, 64, 1);
    a.send(&mut ea, 3, 1, b"one", 1, 0);
    assert_eq!(
        interrupts(&mut rx),
        1,
        "the receive completion raised the vector"
    );
    // Disarmed by raising: the next completion raises nothing.
    b.post_recv(&mut eb, 0, 64, 2);
    a.send(&mut ea, 3, 1, b"two", 2, 0);
    assert_eq!(interrupts(&mut rx), 0);
    // Armed while two completions wait unfreed: at once.
    arm(&b, &eb, 7);
    assert_eq!(interrupts(&mut rx), 1);
    assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(1));
    assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(2));
    // Freed: arming waits again.
    arm(&b, &eb, 7);
    assert_eq!(interrupts(&mut rx), 0);

    // Masked by the function: held pending, sent when the mask clears.
    b.f.set_msix_control(pci::MSIX_CONTROL_ENABLE | pci::MSIX_CONTROL_FUNCTION_MASK);
    b.post_recv(&mut eb, 0, 64, 3);
    a.send(&mut ea, 3, 1, b"three", 3, 0);
    assert_eq!(interrupts(&mut rx), 0);
    assert_eq!(b.f.read64(pci::MSIX_PBA_OFFSET), 1 << 7);
    b.f.set_msix_control(pci::MSIX_CONTROL_ENABLE);
    assert_eq!(interrupts(&mut rx), 1);
    assert_eq!(b.f.read64(pci::MSIX_PBA_OFFSET), 0);

    // Bad arms: no such endpoint, a vector outside the table.
    let bad = b.f.debug_counters().bad_cq_arms;
    b.f.write(CQ_ARM, CqArm::new().with_endpoint(999).with_vector(7));
    arm(&b, &eb, pci::MSIX_VECTORS);
    assert_eq!(b.f.debug_counters().bad_cq_arms, bad + 2);
    assert_eq!(
        interrupts(&mut rx),
        0,
        "the ring holds a completion, but no arm took"
    );

    // A vector with no eventfd: the message reaches no one, and is counted.
    b.f.set_msix_eventfd(9, None).unwrap();
    let lost = b.f.debug_counters().msix_unclaimed;
    arm(&b, &eb, 9);
    assert_eq!(
        b.f.debug_counters().msix_unclaimed,
        lost,
        "vector 9 is masked"
    );
    b.f.write32(pci::MSIX_TABLE_OFFSET + 9 * pci::MSIX_ENTRY_BYTES + 12, 0);
    assert_eq!(b.f.debug_counters().msix_unclaimed, lost + 1);
    assert_eq!(b.f.debug_counters().msix_messages, 3);

    // Removing the last eventfd disables MSI-X: an armed ring then raises nothing.
    b.f.set_msix_eventfd(7, None).unwrap();
    assert_eq!(b.f.msix_control() & pci::MSIX_CONTROL_ENABLE, 0);
    assert!(b
        .f
        .set_msix_eventfd(pci::MSIX_VECTORS, Some(tx.as_fd()))
        .is_err());
    let _ = b.poll_cq(&mut eb);
    arm(&b, &eb, 7);
    b.post_recv(&mut eb, 0, 64, 4);
    a.send(&mut ea, 3, 1, b"four", 4, 0);
    assert_eq!(interrupts(&mut rx), 0);
    assert_eq!(b.f.debug_counters().msix_messages, 3);
}

/// A NIC of interface 1.11 has no CQ_ARM: the write is a bad access and arms nothing.
#[test]
fn cq_arm_is_no_register_before_interface_1_12() {
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(addr("10.0.0.9"));
    cfg.interface_minor = 11;
    let f = fabric.add_nic(cfg).unwrap();
    let before = f.counter(BAD_REGISTER_ACCESSES);
    f.write(CQ_ARM, CqArm::new().with_endpoint(1).with_vector(1));
    assert_eq!(f.counter(BAD_REGISTER_ACCESSES), before + 1);
    assert_eq!(f.debug_counters().bad_cq_arms, 0);
}

/// PCI Local Bus 3.0 §6.8.2: a pending bit whose event is over is cleared. A ring that raised
/// its vector while the function was masked, then was emptied by the driver, leaves nothing
/// to send when the mask clears; one still holding its completion does.
#[test]
fn a_pending_vector_whose_ring_was_emptied_sends_nothing_on_unmask() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    let (_tx, mut rx) = trigger_for(&b.f, 4);
    let masked = pci::MSIX_CONTROL_ENABLE | pci::MSIX_CONTROL_FUNCTION_MASK;
    for consume in [true, false] {
        b.f.set_msix_control(masked);
        b.f.write(CQ_ARM, CqArm::new().with_endpoint(eb.handle).with_vector(4));
        b.post_recv(&mut eb, 0, 64, 1);
        a.send(&mut ea, 3, 1, b"masked", 1, 0);
        assert_eq!(b.f.read64(pci::MSIX_PBA_OFFSET), 1 << 4);
        assert_eq!(interrupts(&mut rx), 0);
        if consume {
            assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(1));
            assert_eq!(b.f.read64(pci::MSIX_PBA_OFFSET), 0, "withdrawn");
        }
        b.f.set_msix_control(pci::MSIX_CONTROL_ENABLE);
        assert_eq!(interrupts(&mut rx), usize::from(!consume));
        if !consume {
            assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(1));
        }
        let _ = a.poll_cq(&mut ea);
    }
}

/// A pending bit is withdrawn only when every event that set it is over: with two rings
/// armed with one vector, emptying one leaves the bit for the other, whose completion is
/// still unread; and a ring whose raise was already sent (the mask cleared since) withdraws
/// nothing when emptied, not the bit that something else set after.
#[test]
fn emptying_one_ring_keeps_a_pending_vector_another_event_holds() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        av_a,
        ..
    } = pair(0);
    let mut eb2 = b.ep_create(1, JOB, 0x3333, 1).unwrap();
    let to_b2 = NicAvEntry::for_peer(&b.address_of(&eb2, 0x3333), JOB);
    a.av_write(av_a, &[(4, to_b2)]).unwrap();
    let (_tx, mut rx) = trigger_for(&b.f, 4);
    let masked = pci::MSIX_CONTROL_ENABLE | pci::MSIX_CONTROL_FUNCTION_MASK;
    let arm = |b: &Driver, ep: &Ep| {
        b.f.write(CQ_ARM, CqArm::new().with_endpoint(ep.handle).with_vector(4));
    };

    // Two rings share vector 4; both raise it while the function is masked.
    b.f.set_msix_control(masked);
    arm(&b, &eb);
    arm(&b, &eb2);
    b.post_recv(&mut eb, 0, 64, 1);
    b.post_recv(&mut eb2, 1, 64, 2);
    a.send(&mut ea, 3, 1, b"to eb", 1, 0);
    a.send(&mut ea, 4, 2, b"to eb2", 2, 0);
    assert_eq!(b.f.read64(pci::MSIX_PBA_OFFSET), 1 << 4);
    assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(1));
    assert_eq!(
        b.f.read64(pci::MSIX_PBA_OFFSET),
        1 << 4,
        "eb2's completion is unread: its event is not over"
    );
    b.f.set_msix_control(pci::MSIX_CONTROL_ENABLE);
    assert_eq!(interrupts(&mut rx), 1, "eb2's waiter is woken");
    assert_eq!(b.poll_cq(&mut eb2).map(|c| c.context.get()), Some(2));

    // eb raises vector 4 while masked, and the message goes when the mask clears; masked
    // again, the host raises vector 4; emptying eb then must not take that bit.
    b.f.set_msix_control(masked);
    arm(&b, &eb);
    b.post_recv(&mut eb, 0, 64, 3);
    a.send(&mut ea, 3, 1, b"again", 3, 0);
    assert_eq!(b.f.read64(pci::MSIX_PBA_OFFSET), 1 << 4);
    b.f.set_msix_control(pci::MSIX_CONTROL_ENABLE);
    assert_eq!(interrupts(&mut rx), 1);
    b.f.set_msix_control(masked);
    b.f.raise_msix(4);
    assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(3));
    assert_eq!(
        b.f.read64(pci::MSIX_PBA_OFFSET),
        1 << 4,
        "eb's own raise was sent already"
    );
    b.f.set_msix_control(pci::MSIX_CONTROL_ENABLE);
    assert_eq!(interrupts(&mut rx), 1);

    // Two rings again, the one that raised last emptied first: the bit stays for the other.
    b.f.set_msix_control(masked);
    arm(&b, &eb);
    arm(&b, &eb2);
    b.post_recv(&mut eb, 0, 64, 4);
    b.post_recv(&mut eb2, 1, 64, 5);
    a.send(&mut ea, 3, 1, b"to eb", 4, 0);
    a.send(&mut ea, 4, 2, b"to eb2", 5, 0);
    assert_eq!(b.poll_cq(&mut eb2).map(|c| c.context.get()), Some(5));
    assert_eq!(
        b.f.read64(pci::MSIX_PBA_OFFSET),
        1 << 4,
        "eb's completion is unread: its event is not over"
    );
    b.f.set_msix_control(pci::MSIX_CONTROL_ENABLE);
    assert_eq!(interrupts(&mut rx), 1, "eb's waiter is woken");
    assert_eq!(b.poll_cq(&mut eb).map(|c| c.context.get()), Some(4));
    for _ in 0..5 {
        let _ = a.poll_cq(&mut ea);
    }
}

/// A single-packet request that arrives again with the same PDC, message id and PSN (a
/// retransmission, or a copy the fabric made) is a duplicate: answered again, with the
/// answer the first copy got, but never delivered into a second receive. A later request
/// with that id and another PSN is a new message.
#[test]
fn a_duplicate_single_packet_message_is_answered_but_not_delivered_again() {
    let Pair {
        fabric,
        a,
        mut b,
        mut eb,
        ..
    } = pair(0);
    for slot in 0..3 {
        b.post_recv(&mut eb, slot, 64, 10 + slot as u64);
    }
    let to_eb = send_to(&eb);
    let packet = |psn: u32, flags: u8, body: &[u8]| {
        let request = StandardRequest {
            message_id: 7,
            request_length: body.len() as u32,
            ..to_eb
        };
        request_frame(5, flags, psn, request, body)
    };
    fabric.inject_frame(&packet(9, FLAG_SYN, b"one"));
    let c = b.poll_cq(&mut eb).expect("delivered");
    assert_eq!((c.context.get(), status(&c)), (10, LocalStatus::Ok));
    // The same packet again, as a retransmission.
    fabric.inject_frame(&packet(9, FLAG_SYN | uet_sim::pds::FLAG_RETX, b"one"));
    assert!(
        b.peek_cq(&eb).is_none(),
        "a duplicate is not delivered again"
    );
    assert_eq!(b.f.debug_counters().rx_duplicate_packets, 1);
    assert_eq!(
        a.f.debug_counters().stray_responses,
        2,
        "both copies answered"
    );
    assert_eq!(b.f.counter(RX_PACKETS), 1);
    // The id given again, at a later PSN: a new message, into the next receive.
    fabric.inject_frame(&packet(10, 0, b"two"));
    let c = b.poll_cq(&mut eb).expect("the new message");
    assert_eq!((c.context.get(), status(&c)), (11, LocalStatus::Ok));
    assert_eq!(b.buf(1, 3), b"two");
}

/// A message longer than the space left in the current multi-receive buffer, with no RX
/// descriptor after it, is refused RC_UNDELIVERABLE and leaves the buffer as it was: it is
/// not released, and a later message that fits still goes into it.
#[test]
fn a_message_refused_for_want_of_a_next_buffer_leaves_the_multi_receive_buffer_open() {
    // Before interface 1.17, which holds such a message (`untagged_unexpected.rs`).
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair_of_interface(0, since::UNTAGGED_UNEXPECTED - 1);
    let buf = b.iova(0x8_0000 + 5 * 0x2000);
    b.post_recv_desc(
        &mut eb,
        uet_fwif::RxDescriptor {
            buf: U64::new(buf),
            len: U32::new(512),
            flags: U32::new(uet_fwif::datapath::RX_FLAG_MULTI_RECV),
            context: U64::new(4),
            ..Default::default()
        },
    );
    a.send(&mut ea, 3, 1, &[1; 200], 1, 0);
    let c = b.poll_cq(&mut eb).expect("first message");
    assert_eq!((c.buf_offset.get(), c.len.get(), c.flags), (0, 200, 1 << 1));
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
    // 256 bytes left: 300 do not fit, and no RX descriptor follows.
    a.send(&mut ea, 3, 1, &[2; 300], 2, 0);
    expect_remote(&mut a, &mut ea, ReturnCode::Undeliverable);
    assert_eq!(b.f.counter(RX_NO_BUFFER), 1);
    assert!(b.peek_cq(&eb).is_none(), "the buffer is not released");
    a.send(&mut ea, 3, 1, &[3; 100], 3, 0);
    let c = b.poll_cq(&mut eb).expect("a message that fits");
    assert_eq!(status(&c), LocalStatus::Ok);
    assert_eq!(
        (c.context.get(), c.buf_offset.get(), c.len.get(), c.flags),
        (4, 256, 100, 1 << 1)
    );
    assert_eq!(b.mem.read(0x8_0000 + 5 * 0x2000 + 256, 100), vec![3; 100]);
}

/// Since interface 1.17 an untagged message without a receive waits on the unexpected list
/// (its sender answered RC_OK). A descriptor that fails its checks when it would take the
/// message completes `BadDescriptor`, and the message waits on for the next one, which takes
/// it whole; a fourth message arriving meanwhile queues behind it.
#[test]
fn a_bad_descriptor_completes_and_leaves_the_waiting_message_for_the_next() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    a.send(&mut ea, 3, 1, b"waiting", 1, 11);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1);
    b.post_recv_desc(
        &mut eb,
        uet_fwif::RxDescriptor {
            buf: U64::new(b.iova(0x8_0000)),
            len: U32::new(64),
            flags: U32::new(1 << 7),
            context: U64::new(5),
            ..Default::default()
        },
    );
    let c = b.poll_cq(&mut eb).expect("the bad descriptor completes");
    assert_eq!(
        (c.context.get(), status(&c)),
        (5, LocalStatus::BadDescriptor)
    );
    assert!(b.poll_cq(&mut eb).is_none(), "the message still waits");
    a.send(&mut ea, 3, 2, b"behind", 2, 12);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
    b.post_recv(&mut eb, 0, 64, 6);
    b.post_recv(&mut eb, 1, 64, 7);
    let c = b.poll_cq(&mut eb).expect("the next descriptor takes it");
    assert_eq!(status(&c), LocalStatus::Ok);
    assert_eq!((c.context.get(), c.len.get(), c.data.get()), (6, 7, 11));
    assert_eq!(c.src_addr.get(), 5, "A at B's index 5");
    assert_eq!(b.buf(0, 7), b"waiting");
    let c = b.poll_cq(&mut eb).expect("then the one behind it");
    assert_eq!((c.context.get(), c.len.get(), c.data.get()), (7, 6, 12));
    assert_eq!(b.buf(1, 6), b"behind");
}

/// Waiting untagged messages go first: one that arrives while they wait joins them even when
/// a receive is posted — here while the completion ring is full, so the receives posted meanwhile
/// have not been given out yet — and the receives then take the messages in arrival order.
#[test]
fn a_message_arriving_while_others_wait_queues_behind_them_though_a_receive_is_posted() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    // B's completion ring full (a ring keeps one entry empty): messages none of it read.
    let ring = (1u64 << EP_LOG2) - 1;
    for i in 0..ring {
        b.post_recv(&mut eb, 0, 64, 100 + i);
        a.send(&mut ea, 3, 1, b"filler", 100 + i, 0);
        assert_eq!(
            a.poll_cq(&mut ea).map(|c| status(&c)),
            Some(LocalStatus::Ok)
        );
    }
    // No receive left: the first waits on the unexpected list.
    a.send(&mut ea, 3, 1, b"first", 1, 1);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
    // Two receives posted; the ring has no room for their completions yet.
    b.post_recv(&mut eb, 1, 64, 11);
    b.post_recv(&mut eb, 2, 64, 12);
    a.send(&mut ea, 3, 3, b"second", 2, 2);
    for i in 0..ring {
        let c = b.poll_cq(&mut eb).expect("a filler");
        assert_eq!(c.context.get(), 100 + i);
    }
    let c = b.poll_cq(&mut eb).expect("the first message");
    assert_eq!((c.context.get(), c.data.get()), (11, 1));
    assert_eq!(b.buf(1, 5), b"first");
    let c = b.poll_cq(&mut eb).expect("the second message");
    assert_eq!((c.context.get(), c.data.get()), (12, 2));
    assert_eq!(b.buf(2, 6), b"second");
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
}

/// A probe (`TRX_FLAG_PEEK`, interface 1.18) finds nothing while the oldest matching message
/// is still arriving, though a later one is whole: reporting the later one would report the
/// messages out of order. Once the first is whole, the probe reports it.
#[test]
fn a_peek_waits_for_the_oldest_matching_message_to_be_whole() {
    use uet_fwif::datapath::{COMPLETION_FLAG_REPORT, TRX_FLAG_PEEK};
    use uet_sim::ses::{segment_word, FLAG_EOM, FLAG_REL, FLAG_SOM};
    let fabric = Fabric::new();
    let _a = Driver::new(&fabric, "10.0.0.1");
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let av_b = b.av_create(64, 0).unwrap();
    let (mut eb, base) = tagged_endpoint(&mut b, av_b);
    let to_eb = send_to(&eb);
    let request = |message_id: u16, flags: u8, header_data: u64, length: u32| StandardRequest {
        opcode: 9,
        flags: FLAG_REL | flags,
        message_id,
        match_bits: 0x5,
        header_data,
        request_length: length,
        ..to_eb
    };
    // Message 1: the first of its two packets only. Message 2: one packet, whole.
    fabric.inject_frame(&request_frame(
        5,
        FLAG_SYN,
        9,
        request(1, FLAG_SOM, 0, 6),
        b"one",
    ));
    fabric.inject_frame(&request_frame(
        5,
        0,
        11,
        request(2, FLAG_SOM | FLAG_EOM, 0, 3),
        b"two",
    ));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 2);
    let mut slot = 0u16;
    let mut peek = |b: &mut Driver, eb: &mut Ep, context: u64| {
        let rd = uet_fwif::TaggedRxDescriptor {
            context: U64::new(context),
            tag: U64::new(0x5),
            flags: U32::new(TRX_FLAG_PEEK),
            ..FromZeros::new_zeroed()
        };
        b.mem.write(
            base + TRX_OFF + usize::from(slot) * uet_fwif::datapath::TAGGED_RX_DESCRIPTOR_BYTES,
            zerocopy::IntoBytes::as_bytes(&rd),
        );
        slot += 1;
        b.f.write(
            TRXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(eb.handle)
                .with_index(slot),
        );
        b.poll_cq(eb).expect("the probe completes")
    };
    let c = peek(&mut b, &mut eb, 1);
    assert_eq!((c.context.get(), status(&c)), (1, LocalStatus::NoMessage));
    fabric.inject_frame(&request_frame(
        5,
        0,
        10,
        request(1, FLAG_EOM, segment_word(3, 3), 6),
        b"end",
    ));
    let c = peek(&mut b, &mut eb, 2);
    assert_eq!(status(&c), LocalStatus::Ok);
    assert_eq!(c.flags, COMPLETION_FLAG_REPORT);
    assert_eq!((c.context.get(), c.len.get(), c.tag.get()), (2, 6, 0x5));
}

/// A SEND's match bits mean nothing to an untagged receive: one that waited on the
/// unexpected list completes with `tag` 0, as one that finds its receive posted does,
/// whatever those header bytes held.
#[test]
fn a_waiting_untagged_message_completes_with_no_tag() {
    let Pair {
        fabric,
        mut b,
        mut eb,
        ..
    } = pair(0);
    let to_eb = send_to(&eb);
    let request = |message_id| StandardRequest {
        message_id,
        match_bits: 0x77,
        request_length: 3,
        ..to_eb
    };
    b.post_recv(&mut eb, 0, 64, 1);
    fabric.inject_frame(&request_frame(5, FLAG_SYN, 9, request(1), b"one"));
    let c = b.poll_cq(&mut eb).expect("posted: taken at once");
    assert_eq!((c.context.get(), c.tag.get()), (1, 0));
    fabric.inject_frame(&request_frame(5, 0, 10, request(2), b"two"));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1, "held");
    b.post_recv(&mut eb, 1, 64, 2);
    let c = b.poll_cq(&mut eb).expect("the waiting message");
    assert_eq!(status(&c), LocalStatus::Ok);
    assert_eq!((c.context.get(), c.tag.get()), (2, 0));
    assert_eq!(b.buf(1, 3), b"two");
}

/// Untagged messages keep their order per sender only: a message still arriving on the
/// unexpected list (its last packet has not come, and may never) holds up its own sender's
/// later messages, not another sender's.
#[test]
fn a_message_still_arriving_holds_up_its_own_sender_only() {
    use uet_sim::ses::{FLAG_REL, FLAG_SOM};
    let Pair {
        fabric,
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    // From A's address but another initiator: the first of two packets, the second never
    // comes.
    let to_eb = send_to(&eb);
    let request = StandardRequest {
        flags: FLAG_REL | FLAG_SOM,
        initiator: 0x7777,
        message_id: 1,
        request_length: 8,
        ..to_eb
    };
    fabric.inject_frame(&request_frame(5, FLAG_SYN, 9, request, b"half"));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1);
    // A's own message waits too, then takes the receive posted: the half message does not
    // hold it up.
    a.send(&mut ea, 3, 1, b"whole", 1, 21);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );
    b.post_recv(&mut eb, 0, 64, 6);
    let c = b.poll_cq(&mut eb).expect("A's message takes the receive");
    assert_eq!((c.context.get(), c.len.get(), c.data.get()), (6, 5, 21));
    assert_eq!(b.buf(0, 5), b"whole");
}

/// RECV_CANCEL (interface 1.19) of a context whose current multi-receive buffer a message is
/// still arriving into is InProgress: the current buffer is older than any descriptor in the
/// ring, so the context names it, and a younger descriptor with the same context stays
/// posted. Once the message is whole, the cancel retires the buffer.
#[test]
fn a_cancel_names_the_current_multi_receive_buffer_before_a_younger_descriptor() {
    use uet_fwif::admin::{RecvCancelBody, RECV_CANCEL_RING_RX};
    use uet_fwif::datapath::COMPLETION_FLAG_BUFFER_RELEASED;
    use uet_fwif::Command;
    use uet_sim::ses::{segment_word, FLAG_EOM, FLAG_REL, FLAG_SOM};
    let Pair {
        fabric,
        mut b,
        mut eb,
        ..
    } = pair(0);
    let cancel = |b: &mut Driver, eb: &Ep| {
        let body = RecvCancelBody {
            context: U64::new(7),
            ring: RECV_CANCEL_RING_RX,
            ..FromZeros::new_zeroed()
        };
        let endpoint = u32::from(eb.handle);
        b.submit(Command::RecvCancel { endpoint, body }).status()
    };
    b.post_recv_desc(
        &mut eb,
        uet_fwif::RxDescriptor {
            buf: U64::new(b.iova(0x8_0000)),
            len: U32::new(512),
            flags: U32::new(uet_fwif::datapath::RX_FLAG_MULTI_RECV),
            context: U64::new(7),
            min_free: U32::new(1),
            ..Default::default()
        },
    );
    b.post_recv(&mut eb, 1, 64, 7);
    let to_eb = send_to(&eb);
    let request = |flags: u8, header_data: u64| StandardRequest {
        flags: FLAG_REL | flags,
        message_id: 1,
        header_data,
        request_length: 6,
        ..to_eb
    };
    // The first of two packets: the message is placed in the multi-receive buffer.
    fabric.inject_frame(&request_frame(5, FLAG_SYN, 9, request(FLAG_SOM, 0), b"one"));
    assert_eq!(cancel(&mut b, &eb), Status::InProgress);
    fabric.inject_frame(&request_frame(
        5,
        0,
        10,
        request(FLAG_EOM, segment_word(3, 3)),
        b"end",
    ));
    let c = b.poll_cq(&mut eb).expect("the message");
    assert_eq!((c.context.get(), c.len.get()), (7, 6));
    assert_eq!(cancel(&mut b, &eb), Status::Success);
    let c = b.poll_cq(&mut eb).expect("the buffer's release");
    assert_eq!(status(&c), LocalStatus::Cancelled);
    assert_ne!(c.flags & COMPLETION_FLAG_BUFFER_RELEASED, 0);
    // The younger descriptor was never withdrawn: the next cancel takes it.
    assert_eq!(cancel(&mut b, &eb), Status::Success);
    let c = b.poll_cq(&mut eb).expect("the younger descriptor");
    assert_eq!((status(&c), c.flags), (LocalStatus::Cancelled, 0));
}

/// The fabric's frames, captured into memory (a `Fabric::capture_to_writer` target).
#[derive(Clone, Default)]
struct Wire(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Wire {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Wire {
    /// NIC B's (10.0.0.2) answers so far, in order: (message id, PSN acknowledged, return
    /// code, list).
    fn answers(&self) -> Vec<(u16, u32, u8, u8)> {
        let bytes = self.0.lock().unwrap().clone();
        let capture = uet_sim::pcap::parse(&bytes).expect("a whole capture");
        capture
            .records
            .iter()
            .filter_map(|r| {
                let dg = frame::parse(&r.data).ok()?;
                if dg.src_ip != addr("10.0.0.2") {
                    return None;
                }
                let (ack, rest) = uet_sim::pds::Ack::parse(dg.payload).ok()?;
                let (resp, _) = uet_sim::ses::Response::parse(rest).ok()?;
                Some((resp.message_id, ack.cack_psn, resp.return_code, resp.list))
            })
            .collect()
    }

    /// The last answer.
    fn last(&self) -> (u16, u32, u8, u8) {
        *self.answers().last().expect("an answer")
    }
}

/// The two packets ("one" at PSN 9, "two" at PSN 10) of message 3 to endpoint `eb`, a
/// TAGGED_SEND with match bits 0x5 when `tagged`, else a SEND: `packet(i, pds_flags)`.
fn two_packets(eb: &Ep, tagged: bool) -> impl Fn(usize, u8) -> Vec<u8> {
    use uet_sim::ses::{segment_word, FLAG_EOM, FLAG_REL, FLAG_SOM};
    let to_eb = send_to(eb);
    move |i, pds_flags| {
        let (flags, header_data, payload) = match i {
            0 => (FLAG_SOM, 0, b"one"),
            _ => (FLAG_EOM, segment_word(3, 3), b"two"),
        };
        let request = StandardRequest {
            opcode: if tagged { 9 } else { 5 },
            flags: FLAG_REL | flags,
            message_id: 3,
            match_bits: if tagged { 0x5 } else { 0 },
            header_data,
            request_length: 6,
            ..to_eb
        };
        request_frame(5, pds_flags, 9 + i as u32, request, payload)
    }
}

/// Post a tagged receive (a probe with `flags`) for match bits 0x5 into slot `slot` of `eb`'s
/// tagged RX ring (`base`: its ring memory), its buffer in buffer slot `8 + slot`.
fn post_tagged(b: &mut Driver, eb: &Ep, base: usize, slot: usize, context: u64, flags: u32) {
    let rd = uet_fwif::TaggedRxDescriptor {
        buf: U64::new(b.iova(common::BUFS_OFF + (8 + slot) * 0x2000)),
        len: U32::new(64),
        context: U64::new(context),
        tag: U64::new(0x5),
        flags: U32::new(flags),
        ..FromZeros::new_zeroed()
    };
    b.mem.write(
        base + TRX_OFF + slot * uet_fwif::datapath::TAGGED_RX_DESCRIPTOR_BYTES,
        zerocopy::IntoBytes::as_bytes(&rd),
    );
    b.f.write(
        TRXQ_DOORBELL,
        QueueDoorbell::new()
            .with_endpoint(eb.handle)
            .with_index(slot as u16 + 1),
    );
}

/// Two NICs of one fabric whose frames are captured (`wire`): `b` (of `cfg`, at 10.0.0.2)
/// with a tagged endpoint `eb` on an AV of its own, its buffers at `base`.
struct Tagged {
    fabric: Fabric,
    _a: Driver,
    b: Driver,
    eb: Ep,
    base: usize,
    wire: Wire,
}

fn tagged_on_the_wire(cfg: NicConfig) -> Tagged {
    let fabric = Fabric::new();
    let _a = Driver::new(&fabric, "10.0.0.1");
    let mut b = Driver::with_config(&fabric, cfg);
    let av_b = b.av_create(64, 0).unwrap();
    let (eb, base) = tagged_endpoint(&mut b, av_b);
    let wire = Wire::default();
    fabric.capture_to_writer(wire.clone()).unwrap();
    Tagged {
        fabric,
        _a,
        b,
        eb,
        base,
        wire,
    }
}

/// A late copy `frame` of a packet of a message that finished on the unexpected list: it is
/// answered as the packet was (`answer`), counted the `dups`-th duplicate, completes nothing
/// and takes no place on the list (which holds `held` messages still).
#[allow(clippy::too_many_arguments)]
fn late_copy_is_a_duplicate(
    fabric: &Fabric,
    b: &Driver,
    eb: &Ep,
    wire: &Wire,
    frame: &[u8],
    answer: (u16, u32, u8, u8),
    dups: u64,
    held: u64,
) {
    fabric.inject_frame(frame);
    assert_eq!(wire.last(), answer, "answered as before");
    assert_eq!(b.f.debug_counters().rx_duplicate_packets, dups);
    assert!(b.peek_cq(eb).is_none(), "no completion");
    assert_eq!(b.f.counter(RX_UNEXPECTED), held, "not held again");
}

/// A new message `data` (tagged with match bits 0x5, or untagged) under a fresh message id:
/// the receive of `context`, still posted, takes it into buffer `slot`.
fn a_new_message_takes(
    fabric: &Fabric,
    b: &mut Driver,
    eb: &mut Ep,
    tagged: bool,
    data: &[u8],
    (context, slot): (u64, usize),
) {
    let mut next = StandardRequest {
        message_id: 4,
        request_length: data.len() as u32,
        ..send_to(eb)
    };
    if tagged {
        next.opcode = 9;
        next.match_bits = 0x5;
    }
    fabric.inject_frame(&request_frame(5, 0, 11, next, data));
    let c = b.poll_cq(eb).expect("the new message");
    assert_eq!(
        (c.context.get(), c.len.get() as usize),
        (context, data.len())
    );
    assert_eq!(b.buf(slot, data.len()), data);
}

/// A late copy of a packet (a retransmission: same PDC, message id and PSN) of a multi-packet
/// tagged message that waited on the unexpected list — while it is still there, whole, and
/// after a receive took it — is a duplicate: answered RC_OK on the overflow list as the
/// original packet was, counted in `rx_duplicate_packets`, and neither held again nor
/// delivered into a receive posted since.
#[test]
fn a_late_packet_of_a_tagged_message_that_waited_unexpected_is_a_duplicate() {
    use uet_sim::pds::FLAG_RETX;
    use uet_sim::ses::LIST_OVERFLOW;
    let Tagged {
        fabric,
        mut b,
        mut eb,
        base,
        wire,
        _a,
    } = tagged_on_the_wire(NicConfig::new(addr("10.0.0.2")));
    let packet = two_packets(&eb, true);
    let ok = ReturnCode::Ok as u8;
    fabric.inject_frame(&packet(0, FLAG_SYN));
    fabric.inject_frame(&packet(1, 0));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1);
    assert_eq!(
        wire.answers(),
        [(3, 9, ok, LIST_OVERFLOW), (3, 10, ok, LIST_OVERFLOW)]
    );
    // Whole on the list, not taken yet: a copy of its last packet.
    let late = packet(1, FLAG_RETX);
    let answer = (3, 10, ok, LIST_OVERFLOW);
    late_copy_is_a_duplicate(&fabric, &b, &eb, &wire, &late, answer, 1, 1);
    assert_eq!(b.f.counter(RX_PACKETS), 2);
    // Two receives: the first takes the message, the second stays posted.
    post_tagged(&mut b, &eb, base, 0, 8, 0);
    post_tagged(&mut b, &eb, base, 1, 9, 0);
    let c = b.poll_cq(&mut eb).expect("the message");
    assert_eq!(
        (c.context.get(), c.len.get(), status(&c)),
        (8, 6, LocalStatus::Ok)
    );
    assert_eq!(b.buf(8, 6), b"onetwo");
    assert!(b.poll_cq(&mut eb).is_none());
    // Taken: a copy of its first packet.
    let late = packet(0, FLAG_SYN | FLAG_RETX);
    let answer = (3, 9, ok, LIST_OVERFLOW);
    late_copy_is_a_duplicate(&fabric, &b, &eb, &wire, &late, answer, 2, 1);
    assert_eq!(b.f.counter(RX_PACKETS), 2);
    // The second receive is still posted: the next message takes it.
    a_new_message_takes(&fabric, &mut b, &mut eb, true, b"next", (9, 9));
}

/// The same for a tagged message a probe (`TRX_FLAG_PEEK | TRX_FLAG_DISCARD`) dropped off the
/// unexpected list: a late copy of one of its packets is answered as before and is neither
/// held again nor taken by a receive posted since.
#[test]
fn a_late_packet_of_a_message_a_probe_discarded_is_a_duplicate() {
    use uet_fwif::datapath::{COMPLETION_FLAG_REPORT, TRX_FLAG_DISCARD, TRX_FLAG_PEEK};
    use uet_sim::pds::FLAG_RETX;
    use uet_sim::ses::LIST_OVERFLOW;
    let Tagged {
        fabric,
        mut b,
        mut eb,
        base,
        wire,
        _a,
    } = tagged_on_the_wire(NicConfig::new(addr("10.0.0.2")));
    let packet = two_packets(&eb, true);
    let ok = ReturnCode::Ok as u8;
    fabric.inject_frame(&packet(0, FLAG_SYN));
    fabric.inject_frame(&packet(1, 0));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1);
    post_tagged(&mut b, &eb, base, 0, 7, TRX_FLAG_PEEK | TRX_FLAG_DISCARD);
    let c = b.poll_cq(&mut eb).expect("the probe");
    assert_eq!(
        (c.context.get(), c.len.get(), status(&c)),
        (7, 6, LocalStatus::Ok)
    );
    assert_eq!(c.flags, COMPLETION_FLAG_REPORT);
    post_tagged(&mut b, &eb, base, 1, 8, 0);
    let late = packet(1, FLAG_RETX);
    let answer = (3, 10, ok, LIST_OVERFLOW);
    late_copy_is_a_duplicate(&fabric, &b, &eb, &wire, &late, answer, 1, 1);
    a_new_message_takes(&fabric, &mut b, &mut eb, true, b"next", (8, 9));
}

/// The same for an untagged message held on the unexpected list (interface 1.17): a late
/// copy of one of its packets, after a receive took it, is answered as before and consumes
/// no receive posted since.
#[test]
fn a_late_packet_of_an_untagged_message_that_waited_unexpected_is_a_duplicate() {
    use uet_sim::pds::FLAG_RETX;
    use uet_sim::ses::LIST_OVERFLOW;
    let Pair {
        fabric,
        mut b,
        mut eb,
        ..
    } = pair(0);
    let wire = Wire::default();
    fabric.capture_to_writer(wire.clone()).unwrap();
    let packet = two_packets(&eb, false);
    let ok = ReturnCode::Ok as u8;
    fabric.inject_frame(&packet(0, FLAG_SYN));
    fabric.inject_frame(&packet(1, 0));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1);
    b.post_recv(&mut eb, 0, 64, 1);
    let c = b.poll_cq(&mut eb).expect("the message");
    assert_eq!(
        (c.context.get(), c.len.get(), status(&c)),
        (1, 6, LocalStatus::Ok)
    );
    assert_eq!(b.buf(0, 6), b"onetwo");
    b.post_recv(&mut eb, 1, 64, 2);
    let late = packet(1, FLAG_RETX);
    let answer = (3, 10, ok, LIST_OVERFLOW);
    late_copy_is_a_duplicate(&fabric, &b, &eb, &wire, &late, answer, 1, 1);
    assert_eq!(b.f.counter(RX_PACKETS), 2);
    a_new_message_takes(&fabric, &mut b, &mut eb, false, b"next", (2, 1));
}

/// A multi-packet tagged message refused for want of room on the unexpected list
/// (RC_UNDELIVERABLE: its sender will send it again under a new message id) stays refused:
/// a late copy of one of its packets, after a matching receive was posted, is refused again
/// and takes neither the receive nor a place on the list.
#[test]
fn a_late_packet_of_a_message_the_full_unexpected_list_refused_is_refused_again() {
    use uet_sim::pds::FLAG_RETX;
    use uet_sim::ses::LIST_EXPECTED;
    let mut cfg = NicConfig::new(addr("10.0.0.2"));
    cfg.unexpected_entries = 1;
    let Tagged {
        fabric,
        mut b,
        mut eb,
        base,
        wire,
        _a,
    } = tagged_on_the_wire(cfg);
    // The list's one place goes to a message no receive will match.
    let other = StandardRequest {
        opcode: 9,
        message_id: 1,
        match_bits: 0x99,
        request_length: 5,
        ..send_to(&eb)
    };
    fabric.inject_frame(&request_frame(5, FLAG_SYN, 8, other, b"other"));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1);
    let packet = two_packets(&eb, true);
    let refused = ReturnCode::Undeliverable as u8;
    fabric.inject_frame(&packet(0, 0));
    fabric.inject_frame(&packet(1, 0));
    assert_eq!(b.f.counter(RX_UNEXPECTED_OVERFLOW), 1);
    assert_eq!(
        wire.answers()[1..],
        [
            (3, 9, refused, LIST_EXPECTED),
            (3, 10, refused, LIST_EXPECTED)
        ]
    );
    post_tagged(&mut b, &eb, base, 0, 8, 0);
    fabric.inject_frame(&packet(0, FLAG_RETX));
    assert_eq!(wire.last(), (3, 9, refused, LIST_EXPECTED), "refused again");
    assert!(b.peek_cq(&eb).is_none(), "the receive stays posted");
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1);
    assert_eq!(b.f.counter(RX_PACKETS), 1);
    // The message sent again under a new id takes the receive.
    a_new_message_takes(&fabric, &mut b, &mut eb, true, b"onetwo", (8, 8));
}

/// Frames the fabric holds back are neither delivered nor captured until released: a
/// three-packet message whose packets after the first are held stays part-way arrived (no
/// completion on either side, as long as the test wants), and once they are released it
/// completes whole, in order. Frames discarded are lost: the message they carried never
/// completes, and nothing else is held after.
#[test]
fn frames_held_back_arrive_when_released_and_never_when_discarded() {
    let Pair {
        fabric,
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    let mtu = a.f.read(CAP_PROFILES).mtu() as usize;
    let data: Vec<u8> = (0..3 * mtu).map(|i| (i * 7 + 3) as u8).collect();
    let mut seen = 0;
    fabric.hold_frames(move |_| {
        seen += 1;
        seen > 1
    });
    b.post_recv(&mut eb, 0, data.len() as u32, 0xB0);
    a.send(&mut ea, 3, 1, &data, 0xA0, 0);
    assert!(fabric.held_frames() >= 2, "the later packets held");
    assert_eq!(b.f.counter(RX_PACKETS), 1, "the first packet in");
    assert!(b.peek_cq(&eb).is_none() && a.peek_cq(&ea).is_none());
    fabric.run_until_idle();
    assert!(b.peek_cq(&eb).is_none(), "still part-way");
    let held = fabric.held_frames();
    assert_eq!(fabric.release_held(), held);
    assert_eq!(fabric.held_frames(), 0);
    let c = b.poll_cq(&mut eb).expect("the message, whole");
    assert_eq!((c.context.get(), c.len.get() as usize), (0xB0, data.len()));
    assert_eq!(status(&c), LocalStatus::Ok);
    assert_eq!(b.buf(0, data.len()), data);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok)
    );

    // Everything held from here on, then lost.
    fabric.hold_frames(|_| true);
    b.post_recv(&mut eb, 0, data.len() as u32, 0xB1);
    a.send(&mut ea, 3, 1, &data, 0xA1, 0);
    let held = fabric.held_frames();
    assert!(held >= 3, "every packet held: {held}");
    assert_eq!(fabric.discard_held(), held);
    assert_eq!(fabric.held_frames(), 0);
    fabric.run_until_idle();
    assert!(b.peek_cq(&eb).is_none(), "nothing arrived");
    // The filter went with them: a frame now is delivered (here, a small message into the
    // same receive, which the lost one never reached).
    a.send(&mut ea, 3, 1, b"after", 0xA2, 0);
    assert_eq!(fabric.held_frames(), 0);
    let c = b.poll_cq(&mut eb).expect("delivered");
    assert_eq!((c.context.get(), c.len.get()), (0xB1, 5));
}

/// A hold filter runs with the fabric held: one that calls the fabric (here, to count what it
/// holds) panics, saying so, instead of waiting for ever for the fabric its own call holds.
#[test]
fn a_hold_filter_that_calls_the_fabric_panics_instead_of_deadlocking() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let Pair {
                fabric,
                mut a,
                mut b,
                mut ea,
                mut eb,
                ..
            } = pair(0);
            let f = fabric.clone();
            fabric.hold_frames(move |_| f.held_frames() > 0);
            b.post_recv(&mut eb, 0, 64, 0xB0);
            a.send(&mut ea, 3, 1, b"hello", 0xA0, 0);
        }));
        let message = outcome.err().map(|p| match p.downcast::<String>() {
            Ok(s) => *s,
            Err(p) => p
                .downcast_ref::<&str>()
                .map_or_else(String::new, |s| s.to_string()),
        });
        let _ = tx.send(message);
    });
    let message = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the filter's call came back, not deadlocked");
    let message = message.expect("the filter's call panicked");
    assert!(message.contains("hold filter"), "{message}");
}

/// A function that has sent to as many destinations as there are PDC ids (65,535) still
/// completes its sends: the PDC it opens for one more destination takes the id of an idle
/// one it closes, not the id of the PDC whose request is waiting for its ACK. (It took the
/// id of the PDC opened last, whose waiting request was then taken for the new one's, so
/// that the first send delivered its message and never completed.)
#[test]
fn sends_complete_after_every_pdc_id_was_used() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "10.0.0.1");
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let av_b = b.av_create(4, 0).unwrap();
    let mut eb = b.ep_create(av_b, JOB, 1, 4).unwrap();
    // Entries 0..idle: peers with no NIC (each send opens a PDC and completes Unreachable);
    // entry `idle`: B; entry `idle + 1`: one more peer with no NIC.
    let idle: u32 = u32::from(u16::MAX) - 1;
    let av = a.av_create(idle + 2, 0).unwrap();
    let mut ea = a.ep_create(av, JOB, 7, 4).unwrap();
    let to_b = NicAvEntry::for_peer(&b.address_of(&eb, 1), JOB);
    let mut records = Vec::new();
    for i in 0..idle + 2 {
        let mut e = to_b;
        if i != idle {
            let [_, x, y, z] = i.to_be_bytes();
            e.fabric_addr[..4].copy_from_slice(&[10, 1 + x, y, z]);
        }
        records.push((i, e));
        if records.len() == 700 || i == idle + 1 {
            a.av_write(av, &records).unwrap();
            records.clear();
        }
    }
    for i in 0..idle {
        a.send(&mut ea, u64::from(i), 0, b"x", u64::from(i), 0);
        let c = a.poll_cq(&mut ea).expect("a completion");
        assert_eq!(c.status, LocalStatus::Unreachable as u8, "send {i}");
    }
    // The PDC to B takes the last free id; its request waits on the wire while the send to
    // one more destination opens another PDC.
    b.post_recv(&mut eb, 0, 64, 1);
    fabric.hold_frames(|_| true);
    a.send(&mut ea, u64::from(idle), 0, b"to B", 0xB, 0);
    fabric.hold_frames(|_| false);
    a.send(&mut ea, u64::from(idle + 1), 0, b"x", 0xD, 0);
    let c = a.poll_cq(&mut ea).expect("the second send's completion");
    assert_eq!(
        (c.context.get(), c.status),
        (0xD, LocalStatus::Unreachable as u8)
    );
    assert_eq!(fabric.release_held(), 1);
    let r = b.poll_cq(&mut eb).expect("B received");
    assert_eq!(r.status, LocalStatus::Ok as u8);
    let c = a.poll_cq(&mut ea).expect("the send to B completes");
    assert_eq!((c.context.get(), c.status), (0xB, LocalStatus::Ok as u8));
}

/// Post on `eb` a receive of context 9 claiming `claimed` bytes whose buffer starts `mapped`
/// bytes before the end of the node's DMA memory: a write past those bytes faults.
fn post_recv_at_memory_end(b: &mut Driver, eb: &mut Ep, mapped: u64, claimed: u32) {
    b.post_recv_desc(
        eb,
        uet_fwif::RxDescriptor {
            buf: U64::new(MEM_IOVA + MEM_BYTES as u64 - mapped),
            len: U32::new(claimed),
            context: U64::new(9),
            ..Default::default()
        },
    );
}

/// `c` is the `DmaFault` completion of the receive of context 9: nothing delivered, and no
/// overflow, which only a `Truncated` completion reports.
fn assert_faulted(c: &Completion) {
    assert_eq!(c.context.get(), 9);
    assert_eq!(status(c), LocalStatus::DmaFault);
    assert_eq!(
        c.overflow.get(),
        0,
        "only a Truncated completion reports an overflow"
    );
    assert_eq!(c.len.get(), 0, "a faulted buffer holds no message");
}

/// A multi-packet message whose buffer faults completes `DmaFault`, and a completion that is
/// not `Truncated` reports no overflow, even when the message was longer than the buffer.
#[test]
fn a_multi_packet_message_into_a_faulting_buffer_reports_no_overflow() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    // The buffer starts 100 bytes before the end of B's DMA memory and claims 8000 bytes.
    post_recv_at_memory_end(&mut b, &mut eb, 100, 8000);
    let payload = vec![0x5Au8; 10_000];
    a.send(&mut ea, 3, 1, &payload, 1, 0);
    assert_faulted(&b.poll_cq(&mut eb).expect("the receive completes"));
    expect_remote(&mut a, &mut ea, ReturnCode::HostUnsuccessfulCompletion);
}

/// A single-packet message whose buffer faults completes `DmaFault` as a multi-packet one
/// does: nothing delivered (`len` 0), and the sender's source and the message's group
/// reported.
#[test]
fn a_single_packet_message_into_a_faulting_buffer_reports_its_source_and_nothing_delivered() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    // Messages that reach their buffers first: the source each reports. The first buffer
    // is all mapped, the second 10 bytes of its 50.
    let (src_ok, src_fault) = [false, true]
        .map(|fault| {
            post_recv_at_memory_end(&mut b, &mut eb, if fault { 10 } else { 50 }, 50);
            a.send(&mut ea, 3, 1, &[7u8; 40], 1, 0);
            let c = b.poll_cq(&mut eb).expect("the receive completes");
            if fault {
                assert_faulted(&c);
            } else {
                assert_eq!((status(&c), c.len.get()), (LocalStatus::Ok, 40));
            }
            let _ = a.poll_cq(&mut ea);
            c.src_addr.get()
        })
        .into();
    assert_eq!(src_fault, src_ok, "the faulted completion names the sender");
}

/// A message held on the unexpected list that a faulting receive takes completes `DmaFault`
/// with no overflow, even when it was longer than the buffer.
#[test]
fn a_held_message_taken_by_a_faulting_buffer_reports_no_overflow() {
    let Pair {
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    a.send(&mut ea, 3, 1, &[7u8; 100], 1, 0);
    assert_eq!(
        a.poll_cq(&mut ea).map(|c| status(&c)),
        Some(LocalStatus::Ok),
        "held on the unexpected list"
    );
    // 50 bytes claimed, 10 of them mapped.
    post_recv_at_memory_end(&mut b, &mut eb, 10, 50);
    assert_faulted(&b.poll_cq(&mut eb).expect("the receive completes"));
}

/// The packets of a message still arriving when its endpoint is destroyed never open a
/// reassembly in the endpoint created at the same address after it: they would take its
/// receive and never complete it, and the sender would be told the lost message arrived.
#[test]
fn late_packets_of_a_destroyed_endpoints_message_take_no_receive_of_its_successor() {
    let Pair {
        fabric,
        mut a,
        mut b,
        mut ea,
        mut eb,
        ..
    } = pair(0);
    let mtu = a.f.read(CAP_PROFILES).mtu() as usize;
    let data: Vec<u8> = (0..3 * mtu).map(|i| (i * 5 + 1) as u8).collect();
    b.post_recv(&mut eb, 0, data.len() as u32, 0xB0);
    let mut seen = 0;
    fabric.hold_frames(move |_| {
        seen += 1;
        seen > 1
    });
    a.send(&mut ea, 3, 1, &data, 0xA0, 0);
    assert_eq!(b.f.counter(RX_PACKETS), 1, "the first packet in");
    assert_eq!(
        b.submit(Command::EndpointDestroy {
            endpoint: u32::from(eb.handle)
        })
        .status(),
        Status::Success
    );
    let av = b.av_create(64, 0).unwrap();
    let mut eb2 = b.ep_create(av, JOB, 0x2222, 4).unwrap();
    assert_eq!(
        (eb2.pid, eb2.ri_start),
        (eb.pid, eb.ri_start),
        "the same address"
    );
    b.post_recv(&mut eb2, 2, data.len() as u32, 0xB2);
    fabric.release_held();
    assert!(b.peek_cq(&eb2).is_none(), "nothing for the new endpoint");
    let c = a.poll_cq(&mut ea).expect("the send completes");
    assert_ne!(
        status(&c),
        LocalStatus::Ok,
        "the message was not delivered: its send does not complete Ok"
    );
    // The new endpoint's receive is free for the next message.
    a.send(&mut ea, 3, 1, b"next", 0xA1, 0);
    let c = b.poll_cq(&mut eb2).expect("the next message");
    assert_eq!((c.context.get(), c.len.get()), (0xB2, 4));
    assert_eq!(status(&c), LocalStatus::Ok);
}

/// A reassembly of a destroyed endpoint dropped to make room for another message is
/// remembered as refused too: the rest of its packets are answered RC_UNDELIVERABLE and take
/// no receive of the endpoint created at the same address.
#[test]
fn a_destroyed_endpoints_reassembly_dropped_for_room_is_refused_when_its_packets_come() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "10.0.0.1");
    let mut cfg = NicConfig::new(addr("10.0.0.2"));
    cfg.reassembly_slots = 1;
    let mut b = Driver::with_config(&fabric, cfg);
    let av_a = a.av_create(64, 0).unwrap();
    let av_b = b.av_create(64, 0).unwrap();
    let mut ea = a.ep_create(av_a, JOB, 0x1111, 4).unwrap();
    let mut eb = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    let to_b = NicAvEntry::for_peer(&b.address_of(&eb, 0x2222), JOB);
    a.av_write(av_a, &[(3, to_b)]).unwrap();
    let mtu = a.f.read(CAP_PROFILES).mtu() as usize;
    let data: Vec<u8> = (0..3 * mtu).map(|i| (i * 5 + 1) as u8).collect();
    b.post_recv(&mut eb, 0, data.len() as u32, 0xB0);
    let mut seen = 0;
    fabric.hold_frames(move |_| {
        seen += 1;
        seen > 1
    });
    a.send(&mut ea, 3, 1, &data, 0xA0, 0);
    fabric.hold_frames(|_| false);
    assert_eq!(
        b.submit(Command::EndpointDestroy {
            endpoint: u32::from(eb.handle)
        })
        .status(),
        Status::Success
    );
    let mut eb2 = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    b.post_recv(&mut eb2, 2, data.len() as u32, 0xB2);
    b.post_recv(&mut eb2, 3, data.len() as u32, 0xB3);
    // Another multi-packet message takes the only reassembly slot.
    a.send(&mut ea, 3, 5, &data, 0xA1, 0);
    let c = b.poll_cq(&mut eb2).expect("the second message");
    assert_eq!((c.context.get(), status(&c)), (0xB2, LocalStatus::Ok));
    let c = a.poll_cq(&mut ea).expect("its send");
    assert_eq!((c.context.get(), status(&c)), (0xA1, LocalStatus::Ok));
    fabric.release_held();
    let c = a.poll_cq(&mut ea).expect("the first send completes");
    assert_eq!(c.context.get(), 0xA0);
    assert_eq!(status(&c), LocalStatus::Remote);
    assert_eq!(c.return_code, ReturnCode::Undeliverable as u8);
    assert!(b.peek_cq(&eb2).is_none(), "no receive taken");
}

/// A packet found malformed against its message in reassembly (here one whose bytes overlap
/// bytes already received), however far its PSN, leaves the message as it was: when the
/// reassembly is dropped for room after its endpoint is destroyed, the message is remembered
/// at the PSN of its own packets, so the rest of them are refused RC_UNDELIVERABLE and take
/// no receive of the endpoint created at the same address.
#[test]
fn a_malformed_packet_does_not_move_the_psn_its_message_is_remembered_at() {
    use uet_sim::ses::{segment_word, FLAG_EOM, FLAG_REL, FLAG_SOM};
    let fabric = Fabric::new();
    let _a = Driver::new(&fabric, "10.0.0.1");
    let mut cfg = NicConfig::new(addr("10.0.0.2"));
    cfg.reassembly_slots = 1;
    let mut b = Driver::with_config(&fabric, cfg);
    let av_b = b.av_create(64, 0).unwrap();
    let mut eb = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    let wire = Wire::default();
    fabric.capture_to_writer(wire.clone()).unwrap();
    // Message `id` of 6 bytes: "one" (SOM) at offset 0, "two" (EOM) at offset 3.
    let packet = |eb: &Ep, id: u16, second: bool, offset: u32, psn: u32| {
        let (flags, header_data, payload) = if second {
            (FLAG_EOM, segment_word(3, offset), b"two")
        } else {
            (FLAG_SOM, 0, b"one")
        };
        let request = StandardRequest {
            flags: FLAG_REL | flags,
            message_id: id,
            header_data,
            request_length: 6,
            ..send_to(eb)
        };
        request_frame(
            5,
            if psn == 9 { FLAG_SYN } else { 0 },
            psn,
            request,
            payload,
        )
    };
    b.post_recv(&mut eb, 0, 64, 0xB0);
    fabric.inject_frame(&packet(&eb, 3, false, 0, 9));
    assert_eq!(b.f.counter(RX_PACKETS), 1, "the first packet in");
    // A middle packet of bytes 2..5 overlaps the first packet's bytes: malformed, whatever
    // its PSN.
    let malformed = b.f.counter(RX_MALFORMED);
    let overlapping = StandardRequest {
        flags: FLAG_REL,
        message_id: 3,
        header_data: segment_word(3, 2),
        request_length: 6,
        ..send_to(&eb)
    };
    fabric.inject_frame(&request_frame(5, 0, 9 + (1 << 31), overlapping, b"xyz"));
    assert_eq!(b.f.counter(RX_MALFORMED), malformed + 1);
    assert_eq!(
        b.submit(Command::EndpointDestroy {
            endpoint: u32::from(eb.handle)
        })
        .status(),
        Status::Success
    );
    let mut eb2 = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    assert_eq!((eb2.pid, eb2.ri_start), (eb.pid, eb.ri_start));
    b.post_recv(&mut eb2, 2, 64, 0xB2);
    b.post_recv(&mut eb2, 3, 64, 0xB3);
    // Another multi-packet message takes the only reassembly slot: the destroyed
    // endpoint's reassembly is dropped and remembered as refused.
    fabric.inject_frame(&packet(&eb2, 4, false, 0, 20));
    fabric.inject_frame(&packet(&eb2, 4, true, 3, 21));
    let c = b.poll_cq(&mut eb2).expect("the second message");
    assert_eq!((c.context.get(), status(&c)), (0xB2, LocalStatus::Ok));
    // The rest of the first message is refused, as its first packet's PSN says.
    fabric.inject_frame(&packet(&eb2, 3, true, 3, 10));
    let (id, psn, rc, _) = wire.last();
    assert_eq!((id, psn), (3, 10));
    assert_eq!(rc, ReturnCode::Undeliverable as u8);
    assert!(b.peek_cq(&eb2).is_none(), "no receive taken");
    // The new endpoint's second receive is free for the next message.
    let next = StandardRequest {
        message_id: 5,
        request_length: 4,
        ..send_to(&eb2)
    };
    fabric.inject_frame(&request_frame(5, 0, 30, next, b"next"));
    let c = b.poll_cq(&mut eb2).expect("the next message");
    assert_eq!((c.context.get(), c.len.get()), (0xB3, 4));
}

/// A packet of message `id` of 6 bytes to endpoint `eb`, at `psn`: the first (SOM, bytes
/// 0..3) or the second (EOM, bytes 3..6), carrying `payload`. A SEND.
fn half_of_six(eb: &Ep, id: u16, second: bool, psn: u32, payload: &[u8; 3]) -> Vec<u8> {
    half_of_six_tagged(eb, id, second, psn, payload, None)
}

/// [`half_of_six`], a TAGGED_SEND with match bits `tag` when there is one.
fn half_of_six_tagged(
    eb: &Ep,
    id: u16,
    second: bool,
    psn: u32,
    payload: &[u8; 3],
    tag: Option<u64>,
) -> Vec<u8> {
    use uet_sim::ses::{segment_word, FLAG_EOM, FLAG_REL, FLAG_SOM};
    let (flags, header_data) = if second {
        (FLAG_EOM, segment_word(3, 3))
    } else {
        (FLAG_SOM, 0)
    };
    let request = StandardRequest {
        opcode: if tag.is_some() { 9 } else { 5 },
        flags: FLAG_REL | flags,
        message_id: id,
        match_bits: tag.unwrap_or(0),
        header_data,
        request_length: 6,
        ..send_to(eb)
    };
    let pds_flags = if psn == 9 { FLAG_SYN } else { 0 };
    request_frame(5, pds_flags, psn, request, payload)
}

/// Whether `bytes` hold `what` anywhere.
fn holds(bytes: &[u8], what: &[u8]) -> bool {
    bytes.windows(what.len()).any(|w| w == what)
}

/// NIC B (10.0.0.2, one reassembly slot) with an endpoint on an AV of its own, its answers
/// captured, and the fabric's NIC A (10.0.0.1) the hand-built packets come from.
fn one_reassembly_slot() -> (Fabric, Driver, Driver, u32, Ep, Wire) {
    let fabric = Fabric::new();
    let a = Driver::new(&fabric, "10.0.0.1");
    let mut cfg = NicConfig::new(addr("10.0.0.2"));
    cfg.reassembly_slots = 1;
    let mut b = Driver::with_config(&fabric, cfg);
    let av_b = b.av_create(64, 0).unwrap();
    let eb = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    let wire = Wire::default();
    fabric.capture_to_writer(wire.clone()).unwrap();
    (fabric, a, b, av_b, eb, wire)
}

/// A message whose second packet was lost for good stays in reassembly; once the sender's
/// message ids wrap on its PDC, a new message with its id (its PSNs 65,536 or more ahead)
/// never joins it: the old message is ended — its receive completes `Cancelled`, `len` 0,
/// holding none of the new message's bytes, its reassembly slot is freed, and a late copy of
/// its packet is refused RC_UNDELIVERABLE — and the new message is delivered whole into the
/// next receive, each of its packets answered RC_OK.
#[test]
fn a_new_message_with_the_id_of_one_that_never_finished_ends_it_and_is_delivered_whole() {
    let (fabric, _a, mut b, _, mut eb, wire) = one_reassembly_slot();
    b.post_recv(&mut eb, 0, 64, 0xB0);
    b.post_recv(&mut eb, 1, 64, 0xB1);
    fabric.inject_frame(&half_of_six(&eb, 3, false, 9, b"one"));
    assert_eq!(b.f.counter(RX_PACKETS), 1, "the first packet in");
    // Its second packet (PSN 10) never comes. The sender's ids wrap: message 3 again.
    let far = 9 + (1 << 16) + 7;
    fabric.inject_frame(&half_of_six(&eb, 3, true, far + 1, b"TWO"));
    let c = b.poll_cq(&mut eb).expect("the old receive completes");
    assert_eq!(c.context.get(), 0xB0);
    assert!(
        !holds(&b.buf(0, 64), b"TWO"),
        "the old receive holds none of the new message's bytes"
    );
    assert_eq!((status(&c), c.len.get()), (LocalStatus::Cancelled, 0));
    assert_eq!(wire.last(), (3, far + 1, ReturnCode::Ok as u8, 0));
    // A late copy of the old message's second packet: refused, takes nothing.
    fabric.inject_frame(&half_of_six(&eb, 3, true, 10, b"two"));
    assert_eq!(wire.last(), (3, 10, ReturnCode::Undeliverable as u8, 0));
    assert!(b.peek_cq(&eb).is_none(), "no receive taken");
    fabric.inject_frame(&half_of_six(&eb, 3, false, far, b"new"));
    assert_eq!(wire.last(), (3, far, ReturnCode::Ok as u8, 0));
    let c = b.poll_cq(&mut eb).expect("the new message");
    assert_eq!((c.context.get(), c.len.get()), (0xB1, 6));
    assert_eq!(status(&c), LocalStatus::Ok);
    assert_eq!(b.buf(1, 6), b"newTWO");
    assert_eq!(b.f.debug_counters().rx_duplicate_packets, 0);
}

/// The same for a new message with the id to another endpoint of the NIC: it is no
/// contradiction of the old message (whose receive completes `Cancelled`), but a new message,
/// delivered to its endpoint.
#[test]
fn a_new_message_with_the_id_of_one_that_never_finished_reaches_another_endpoint() {
    let (fabric, _a, mut b, av_b, mut eb, wire) = one_reassembly_slot();
    let mut eb2 = b.ep_create(av_b, JOB, 0x3333, 4).unwrap();
    b.post_recv(&mut eb, 0, 64, 0xB0);
    b.post_recv(&mut eb2, 2, 64, 0xB2);
    fabric.inject_frame(&half_of_six(&eb, 3, false, 9, b"one"));
    let far = 9 + (1 << 16);
    let malformed = b.f.counter(RX_MALFORMED);
    fabric.inject_frame(&half_of_six(&eb2, 3, false, far, b"new"));
    assert_eq!(b.f.counter(RX_MALFORMED), malformed, "not dropped");
    assert_eq!(wire.last(), (3, far, ReturnCode::Ok as u8, 0));
    let c = b.poll_cq(&mut eb).expect("the old receive completes");
    assert_eq!(
        (c.context.get(), status(&c)),
        (0xB0, LocalStatus::Cancelled)
    );
    assert_eq!(c.len.get(), 0);
    fabric.inject_frame(&half_of_six(&eb2, 3, true, far + 1, b"TWO"));
    let c = b.poll_cq(&mut eb2).expect("the new message");
    assert_eq!((c.context.get(), c.len.get()), (0xB2, 6));
    assert_eq!(status(&c), LocalStatus::Ok);
    assert_eq!(b.buf(2, 6), b"newTWO");
}

/// A single-packet message with the id of a message still in reassembly, its PSN 65,536 or
/// more ahead, ends that message too, and is delivered.
#[test]
fn a_single_packet_message_with_the_id_of_one_that_never_finished_ends_it() {
    let (fabric, _a, mut b, _, mut eb, wire) = one_reassembly_slot();
    b.post_recv(&mut eb, 0, 64, 0xB0);
    b.post_recv(&mut eb, 1, 64, 0xB1);
    fabric.inject_frame(&half_of_six(&eb, 3, false, 9, b"one"));
    let far = 9 + (1 << 16);
    let single = StandardRequest {
        message_id: 3,
        request_length: 4,
        ..send_to(&eb)
    };
    fabric.inject_frame(&request_frame(5, 0, far, single, b"next"));
    assert_eq!(wire.last(), (3, far, ReturnCode::Ok as u8, 0));
    let c = b.poll_cq(&mut eb).expect("the old receive completes");
    assert_eq!(
        (c.context.get(), status(&c)),
        (0xB0, LocalStatus::Cancelled)
    );
    let c = b.poll_cq(&mut eb).expect("the new message");
    assert_eq!((c.context.get(), c.len.get()), (0xB1, 4));
    assert_eq!(b.buf(1, 4), b"next");
}

/// A copy of a packet of a message in reassembly (bytes already received) is answered as a
/// duplicate but leaves the PSN the message is known at as it was, whatever PSN it carries:
/// a copy at a PSN near a later message with the same id cannot make that message join it.
#[test]
fn a_copy_of_received_bytes_does_not_move_the_psn_its_message_is_known_at() {
    let (fabric, _a, mut b, _, mut eb, wire) = one_reassembly_slot();
    b.post_recv(&mut eb, 0, 64, 0xB0);
    b.post_recv(&mut eb, 1, 64, 0xB1);
    fabric.inject_frame(&half_of_six(&eb, 3, false, 9, b"one"));
    let copy = 9 + 60_000;
    fabric.inject_frame(&half_of_six(&eb, 3, false, copy, b"one"));
    assert_eq!(wire.last(), (3, copy, ReturnCode::Ok as u8, 0));
    assert_eq!(b.f.debug_counters().rx_duplicate_packets, 1);
    assert!(b.peek_cq(&eb).is_none());
    // Near the copy's PSN, far ahead of the message's own: a new message with the id.
    let far = 9 + 70_000;
    fabric.inject_frame(&half_of_six(&eb, 3, true, far + 1, b"TWO"));
    let c = b.poll_cq(&mut eb).expect("the old receive completes");
    assert!(!holds(&b.buf(0, 64), b"TWO"), "never mixed");
    assert_eq!(
        (c.context.get(), status(&c)),
        (0xB0, LocalStatus::Cancelled)
    );
    fabric.inject_frame(&half_of_six(&eb, 3, false, far, b"new"));
    let c = b.poll_cq(&mut eb).expect("the new message");
    assert_eq!((c.context.get(), c.len.get()), (0xB1, 6));
    assert_eq!(b.buf(1, 6), b"newTWO");
}

/// A message placed in a multi-receive buffer that never finishes completes nothing when a
/// new message with its id ends it. It was the last message of the buffer, which its
/// placement retired: the buffer's release then comes, a completion of its own.
#[test]
fn a_multi_receive_buffer_whose_last_message_never_finished_is_released_when_it_ends() {
    use uet_fwif::datapath::{
        COMPLETION_FLAG_BUFFER_RELEASED, COMPLETION_FLAG_MULTI_RECV, COMPLETION_FLAG_NO_MESSAGE,
        RX_FLAG_MULTI_RECV,
    };
    let (fabric, _a, mut b, _, mut eb, _wire) = one_reassembly_slot();
    let buf = b.iova(common::BUFS_OFF);
    b.post_recv_desc(
        &mut eb,
        uet_fwif::RxDescriptor {
            buf: U64::new(buf),
            len: U32::new(70),
            flags: U32::new(RX_FLAG_MULTI_RECV),
            min_free: U32::new(16),
            context: U64::new(0xB0),
            ..Default::default()
        },
    );
    // Placed at offset 0; the 6 bytes left after offset 64 retire the buffer.
    fabric.inject_frame(&half_of_six(&eb, 3, false, 9, b"one"));
    assert!(b.peek_cq(&eb).is_none());
    b.post_recv(&mut eb, 1, 64, 0xB1);
    let far = 9 + (1 << 16) + 1;
    fabric.inject_frame(&half_of_six(&eb, 3, true, far + 1, b"TWO"));
    let c = b.poll_cq(&mut eb).expect("the buffer's release");
    let release =
        COMPLETION_FLAG_MULTI_RECV | COMPLETION_FLAG_BUFFER_RELEASED | COMPLETION_FLAG_NO_MESSAGE;
    assert_eq!((c.context.get(), c.flags, c.len.get()), (0xB0, release, 0));
    assert_eq!((status(&c), c.buf_offset.get()), (LocalStatus::Ok, 64));
    assert!(!holds(&b.buf(0, 70), b"TWO"), "never mixed");
    fabric.inject_frame(&half_of_six(&eb, 3, false, far, b"new"));
    let c = b.poll_cq(&mut eb).expect("the new message");
    assert_eq!((c.context.get(), c.len.get()), (0xB1, 6));
    assert_eq!(b.buf(1, 6), b"newTWO");
}

/// A tagged receive bound to a message still arriving on the unexpected list completes
/// `Cancelled` when a new message with the message's id ends it; the new message takes the
/// next matching receive.
#[test]
fn a_tagged_receive_bound_to_a_message_that_never_finished_completes_cancelled() {
    let Tagged {
        fabric,
        mut b,
        mut eb,
        base,
        wire,
        ..
    } = tagged_on_the_wire(NicConfig::new(addr("10.0.0.2")));
    let packet =
        |eb: &Ep, second, psn, payload| half_of_six_tagged(eb, 3, second, psn, payload, Some(5));
    fabric.inject_frame(&packet(&eb, false, 9, b"one"));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1, "held");
    post_tagged(&mut b, &eb, base, 0, 0xC0, 0);
    post_tagged(&mut b, &eb, base, 1, 0xC1, 0);
    assert!(
        b.peek_cq(&eb).is_none(),
        "bound to the message still arriving"
    );
    let far = 9 + (1 << 16) + 3;
    fabric.inject_frame(&packet(&eb, true, far + 1, b"TWO"));
    assert_eq!(wire.last(), (3, far + 1, ReturnCode::Ok as u8, 0));
    let c = b.poll_cq(&mut eb).expect("the bound receive completes");
    assert_eq!(c.kind, CompletionKind::TaggedRecv as u8);
    assert_eq!(
        (c.context.get(), status(&c)),
        (0xC0, LocalStatus::Cancelled)
    );
    assert_eq!(c.len.get(), 0);
    assert!(!holds(&b.buf(8, 64), b"TWO"), "never mixed");
    fabric.inject_frame(&packet(&eb, false, far, b"new"));
    let c = b.poll_cq(&mut eb).expect("the new message");
    assert_eq!((c.context.get(), c.len.get(), c.tag.get()), (0xC1, 6, 5));
    assert_eq!(b.buf(9, 6), b"newTWO");
}

/// A message held on the unexpected list that never finishes gives up its place there when
/// a new message with its id comes: the messages of its sender that waited behind it take
/// the receives posted for them, and the new message is held in turn.
#[test]
fn an_unexpected_message_that_never_finished_no_longer_holds_up_its_sender() {
    let (fabric, _a, mut b, _, mut eb, wire) = one_reassembly_slot();
    fabric.inject_frame(&half_of_six(&eb, 3, false, 9, b"one"));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 1, "held");
    // A later single-packet message of the sender waits behind it.
    let next = StandardRequest {
        message_id: 4,
        request_length: 4,
        ..send_to(&eb)
    };
    fabric.inject_frame(&request_frame(5, 0, 11, next, b"next"));
    assert_eq!(b.f.counter(RX_UNEXPECTED), 2, "held behind it");
    b.post_recv(&mut eb, 0, 64, 0xB0);
    assert!(b.peek_cq(&eb).is_none(), "waits for the first");
    let far = 9 + (1 << 16) + 2;
    fabric.inject_frame(&half_of_six(&eb, 3, false, far, b"new"));
    assert_eq!(wire.last(), (3, far, ReturnCode::Ok as u8, 1));
    b.post_recv(&mut eb, 1, 64, 0xB1);
    let c = b.poll_cq(&mut eb).expect("the waiting message");
    assert_eq!((c.context.get(), c.len.get()), (0xB0, 4));
    assert_eq!(b.buf(0, 4), b"next");
    assert!(b.peek_cq(&eb).is_none(), "the new message is not whole yet");
    fabric.inject_frame(&half_of_six(&eb, 3, true, far + 1, b"TWO"));
    b.post_recv(&mut eb, 2, 64, 0xB2);
    let c = b.poll_cq(&mut eb).expect("the new message");
    assert_eq!((c.context.get(), c.len.get()), (0xB1, 6));
    assert_eq!(b.buf(1, 6), b"newTWO");
}

/// A packet that waits in the receive backlog because its message had not opened yet when it
/// came is taken once its message opens, though requests ahead of it still wait for
/// completion-ring room: a message in reassembly needs no new completion slot. Here every
/// slot the host frees goes to a reservation of a message opened from the backlog, so a
/// request waiting ahead of those messages' last packets would otherwise hold them, and their
/// completions, for ever.
#[test]
fn packets_of_a_message_opened_from_the_backlog_do_not_wait_behind_requests_for_room() {
    use uet_sim::ses::{segment_word, FLAG_EOM, FLAG_REL, FLAG_SOM};
    let fabric = Fabric::new();
    let _a = Driver::new(&fabric, "10.0.0.1");
    let mut b = Driver::new(&fabric, "10.0.0.2");
    let av_b = b.av_create(64, 0).unwrap();
    let mut eb = b.ep_create(av_b, JOB, 0x2222, 4).unwrap();
    b.post_recv_desc(
        &mut eb,
        uet_fwif::RxDescriptor {
            buf: U64::new(b.iova(0x8_0000)),
            len: U32::new(0x2000),
            flags: U32::new(uet_fwif::datapath::RX_FLAG_MULTI_RECV),
            context: U64::new(0xB0),
            ..Default::default()
        },
    );
    let mut psn = 9;
    let mut next = |flags: u8, id: u16, header_data: u64, len: u32, payload: &[u8]| {
        let request = StandardRequest {
            flags: FLAG_REL | flags,
            message_id: id,
            header_data,
            request_length: len,
            ..send_to(&eb)
        };
        let syn = if psn == 9 { FLAG_SYN } else { 0 };
        psn += 1;
        request_frame(5, syn, psn - 1, request, payload)
    };
    // The completion ring full (it keeps one entry empty): seven messages the host has not read.
    let ring = (1u16 << EP_LOG2) - 1;
    for id in 0..ring {
        fabric.inject_frame(&next(FLAG_SOM | FLAG_EOM, id, 0, 4, b"full"));
    }
    // Seven two-packet messages, a single-packet one, then the seven messages' last packets:
    // all wait in the backlog, in that order.
    let firsts: Vec<_> = (0..ring)
        .map(|i| next(FLAG_SOM, 100 + i, 0, 6, b"one"))
        .collect();
    let single = next(FLAG_SOM | FLAG_EOM, 200, 0, 4, b"last");
    let lasts: Vec<_> = (0..ring)
        .map(|i| next(FLAG_EOM, 100 + i, segment_word(3, 3), 6, b"two"))
        .collect();
    for f in firsts.iter().chain([&single]).chain(&lasts) {
        fabric.inject_frame(f);
    }
    assert!(
        b.f.debug_counters().cq_stalls > 0,
        "the requests wait for room"
    );
    // The host reads every completion the ring holds, and then every one that comes.
    let mut read = Vec::new();
    while let Some(c) = b.poll_cq(&mut eb) {
        assert_eq!(status(&c), LocalStatus::Ok);
        read.push(c.len.get());
    }
    assert_eq!(
        read.len(),
        usize::from(ring) * 2 + 1,
        "the full ring, the seven two-packet messages and the single one: {read:?}"
    );
    assert_eq!(read.iter().filter(|&&n| n == 6).count(), usize::from(ring));
}

/// A range member is the address `UetAddress::symmetric_member` gives, or none: the NIC
/// sends to no member the host's rule does not make an address. Across the IPv4-mapped
/// broadcast address ::ffff:255.255.255.255 (which reaches 255.255.255.255) the middle
/// member of this range is no usable address — the send to it completes `AddrNotAvail` and
/// nothing leaves the NIC — while its neighbours are; and a range whose last member would be
/// a multicast address is refused as one that overflows.
#[test]
fn a_range_member_that_is_no_usable_address_is_not_sent_to() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "fd00::1");
    let av = a.av_create(64, 0).unwrap();
    let mut ea = a.ep_create(av, JOB, 0x1111, 4).unwrap();
    let mut peer = a.address_of(&ea, 0x1111);
    peer.fabric_addr = addr("::ffff:255.255.255.254");
    let base = NicAvEntry::for_peer(&peer, JOB);
    a.av_write(av, &[(10, NicAvEntry::range(&base, 1, 10, 0, 3))])
        .unwrap();
    assert!(peer.symmetric_member(1, 1).is_none(), "the host's rule");
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = sent.clone();
    fabric.hold_frames(move |f| {
        log.lock().unwrap().push(frame::peek_dst_ip(f));
        true
    });
    a.send(&mut ea, 11, 1, b"x", 1, 0);
    let c = a.poll_cq(&mut ea).expect("a completion");
    assert_eq!(
        (c.context.get(), status(&c)),
        (1, LocalStatus::AddrNotAvail)
    );
    assert_eq!(*sent.lock().unwrap(), [], "nothing sent");
    assert_eq!(a.f.counter(TX_PACKETS), 0);
    // Its neighbours are members as the host computes them.
    for (index, m) in [(10, 0), (12, 2)] {
        let nic = a.av_read(av, index, 1).unwrap()[0].peer_address();
        assert_eq!(nic, peer.symmetric_member(1, m), "index {index}");
    }
    let mid = a.av_read(av, 11, 1).unwrap()[0];
    assert!(!mid.is_valid(), "no member at 11: {mid:?}");

    let mut v4 = peer;
    v4.fabric_addr = addr("223.255.255.254");
    let to_multicast = NicAvEntry::range(&NicAvEntry::for_peer(&v4, JOB), 1, 20, 0, 3);
    assert!(v4.symmetric_member(1, 2).is_none(), "224.0.0.0 is no peer");
    assert_eq!(
        a.av_write(av, &[(20, to_multicast)]),
        Err(Status::InvalidField)
    );
}

/// A datagram endpoint refuses WRITE, READ and messages longer than the MTU as descriptors
/// it cannot carry (`BadDescriptor`) whatever their buffer: it reads none of it, so a buffer
/// outside mapped memory is no DMA fault, and nothing is sent.
#[test]
fn a_datagram_endpoint_refuses_what_it_cannot_carry_before_reading_the_buffer() {
    let fabric = Fabric::new();
    let mut a = Driver::new(&fabric, "10.0.0.1");
    let av = a.av_create(64, 0).unwrap();
    let (mut body, base) = a.ep_body(JOB, 0x1111, 4);
    body.flags = uet_fwif::admin::EP_FLAG_DGRAM;
    let mut ea = a.ep_create_with(av, body, base).unwrap();
    let mut peer = a.address_of(&ea, 0x2222);
    peer.fabric_addr = addr("10.0.0.2");
    a.av_write(av, &[(3, NicAvEntry::for_peer(&peer, JOB))])
        .unwrap();
    let mtu = a.f.read(CAP_PROFILES).mtu();
    let unmapped = TxDescriptor {
        len: U32::new(16),
        buf: U64::new(0x7000_0000),
        dest: U64::new(3),
        ..Default::default()
    };
    for (context, opcode, len) in [
        (1, TxOpcode::Write, 16),
        (2, TxOpcode::Read, 16),
        (3, TxOpcode::Send, u32::from(mtu) + 1),
    ] {
        let d = TxDescriptor {
            opcode: opcode as u8,
            len: U32::new(len),
            context: U64::new(context),
            ..unmapped
        };
        a.post_send_desc(&mut ea, d);
        let c = a.poll_cq(&mut ea).expect("a completion");
        assert_eq!(
            (c.context.get(), status(&c)),
            (context, LocalStatus::BadDescriptor),
            "{opcode:?}"
        );
    }
    assert_eq!(a.f.counter(DMA_FAULTS), 0, "no buffer was read");
    assert_eq!(a.f.counter(TX_PACKETS), 0);
}

/// A region is registered only over memory that lets the device do what the region grants
/// peers: remote WRITE needs memory the device may write, remote READ memory it may read.
/// Memory mapped for the other access only (`DmaAccess`, a vfio-user `DMA_MAP` without one
/// of `VFIO_DMA_MAP_FLAG_READ` / `_WRITE`) is refused `DmaFault` as memory outside the
/// mappings is, and nothing is registered: the key stays free.
#[test]
fn a_region_is_refused_over_memory_the_device_may_not_access_as_it_grants() {
    use std::os::fd::AsFd;
    use uet_fwif::admin::{MrRegisterBody, MR_ACCESS_REMOTE_READ, MR_ACCESS_REMOTE_WRITE};
    let Pair { mut b, eb, .. } = pair(0);
    let readable = DmaMem::new(4096, 0x7000_0000);
    let writable = DmaMem::new(4096, 0x7100_0000);
    let only = |read, write| uet_sim::DmaAccess { read, write };
    b.f.dma_map_for(
        readable.iova,
        4096,
        readable.fd.as_fd(),
        0,
        only(true, false),
    )
    .unwrap();
    b.f.dma_map_for(
        writable.iova,
        4096,
        writable.fd.as_fd(),
        0,
        only(false, true),
    )
    .unwrap();
    let mut register = |iova: u64, access: u8, key: u64| {
        let body = MrRegisterBody {
            iova: U64::new(iova),
            len: U64::new(4096),
            key: U64::new(key),
            access,
            ..Default::default()
        };
        b.submit(Command::MrRegister {
            endpoint: u32::from(eb.handle),
            body,
        })
        .status()
    };
    let both = MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE;
    for (iova, access, key, want) in [
        (readable.iova, MR_ACCESS_REMOTE_WRITE, 1, Status::DmaFault),
        (readable.iova, both, 1, Status::DmaFault),
        (writable.iova, MR_ACCESS_REMOTE_READ, 2, Status::DmaFault),
        (writable.iova, both, 2, Status::DmaFault),
        // Refused, the keys are free: each registers over memory that allows its access.
        (readable.iova, MR_ACCESS_REMOTE_READ, 1, Status::Success),
        (writable.iova, MR_ACCESS_REMOTE_WRITE, 2, Status::Success),
    ] {
        assert_eq!(
            register(iova, access, key),
            want,
            "access {access:#x} at {iova:#x}"
        );
    }
    assert_eq!(b.f.counter(DMA_FAULTS), 4);
}

/// Registers `len` bytes at offset `off` of `b`'s memory for endpoint `eb` under memory key
/// `key` with `access`; returns the MR handle.
fn register_region(b: &mut Driver, eb: &Ep, off: usize, len: usize, key: u64, access: u8) -> u32 {
    let body = uet_fwif::admin::MrRegisterBody {
        iova: U64::new(b.iova(off)),
        len: U64::new(len as u64),
        key: U64::new(key),
        access,
        ..Default::default()
    };
    let c = b.submit(Command::MrRegister {
        endpoint: u32::from(eb.handle),
        body,
    });
    assert_eq!(c.status(), Status::Success);
    c.result0.get()
}

fn deregister_region(b: &mut Driver, handle: u32, key: u64) {
    let mut body = uet_fwif::admin::MrDeregisterBody::new_zeroed();
    body.key = U64::new(key);
    let c = b.submit(Command::MrDeregister { mr: handle, body });
    assert_eq!(c.status(), Status::Success);
}

/// An RMA operation reaches one region: once the region its first packet reached is
/// deregistered, its later packets are refused RC_PERM_VIOLATION even when a region
/// registered with the same key has taken its place meanwhile. So a multi-packet WRITE, or a
/// segmented READ, completes with that error and nothing of it lands in, or is read from,
/// the new region; an operation posted after the new registration reaches the new region.
#[test]
fn later_packets_of_an_rma_never_reach_a_region_that_took_its_key_after_it_began() {
    use uet_fwif::admin::{MR_ACCESS_REMOTE_READ, MR_ACCESS_REMOTE_WRITE};
    let Pair {
        fabric,
        mut a,
        mut b,
        mut ea,
        eb,
        ..
    } = pair(0);
    let mtu = a.f.read(CAP_PROFILES).mtu() as usize;
    let len = 3 * mtu;
    let both = MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE;
    const KEY: u64 = 0x77;
    let (first, second, third) = (BUFS_OFF, BUFS_OFF + 0x10000, BUFS_OFF + 0x20000);
    let rma = |a: &mut Driver, ea: &mut Ep, opcode: TxOpcode, context: u64| {
        a.post_send_desc(
            ea,
            TxDescriptor {
                opcode: opcode as u8,
                len: U32::new(len as u32),
                buf: U64::new(a.iova(BUFS_OFF)),
                dest: U64::new(3),
                context: U64::new(context),
                match_bits: U64::new(KEY),
                ..Default::default()
            },
        );
    };
    // Only the first frame on the wire (the first packet or request) goes through at once.
    let first_frame_only = || {
        let mut seen = 0;
        move |_: &[u8]| {
            seen += 1;
            seen > 1
        }
    };

    // A WRITE whose first packet reached the first region.
    let old = register_region(&mut b, &eb, first, len, KEY, both);
    let data = vec![0xAB; len];
    a.mem.write(BUFS_OFF, &data);
    fabric.hold_frames(first_frame_only());
    rma(&mut a, &mut ea, TxOpcode::Write, 1);
    deregister_region(&mut b, old, KEY);
    let new = register_region(&mut b, &eb, second, len, KEY, both);
    fabric.release_held();
    let c = a.poll_cq(&mut ea).expect("the WRITE completes");
    assert_eq!(c.context.get(), 1);
    assert_eq!(status(&c), LocalStatus::Remote);
    assert_eq!(c.return_code, ReturnCode::PermViolation as u8);
    assert_eq!(
        b.mem.read(first, mtu),
        data[..mtu],
        "the first packet landed"
    );
    assert_eq!(
        b.mem.read(second, len),
        vec![0; len],
        "nothing in the new region"
    );
    assert_eq!(b.f.counter(RX_PERM_VIOLATION), 2);

    // A READ whose first request was served from the second region.
    b.mem.write(second, &vec![0x22; len]);
    b.mem.write(third, &vec![0x33; len]);
    a.mem.fill(BUFS_OFF, len, 0);
    fabric.hold_frames(first_frame_only());
    rma(&mut a, &mut ea, TxOpcode::Read, 2);
    deregister_region(&mut b, new, KEY);
    let newer = register_region(&mut b, &eb, third, len, KEY, both);
    fabric.release_held();
    let c = a.poll_cq(&mut ea).expect("the READ completes");
    assert_eq!(c.context.get(), 2);
    assert_eq!(status(&c), LocalStatus::Remote);
    assert_eq!(c.return_code, ReturnCode::PermViolation as u8);
    assert!(
        !a.mem.read(BUFS_OFF, len).contains(&0x33),
        "nothing read from the newest region"
    );
    assert_eq!(b.f.counter(RX_PERM_VIOLATION), 4);

    // Posted after the registration, a WRITE and a READ reach the newest region.
    a.mem.write(BUFS_OFF, &data);
    rma(&mut a, &mut ea, TxOpcode::Write, 3);
    let c = a.poll_cq(&mut ea).expect("the WRITE completes");
    assert_eq!((c.context.get(), status(&c)), (3, LocalStatus::Ok));
    assert_eq!(b.mem.read(third, len), data);
    b.mem.write(third, &vec![0x44; len]);
    rma(&mut a, &mut ea, TxOpcode::Read, 4);
    let c = a.poll_cq(&mut ea).expect("the READ completes");
    assert_eq!((c.context.get(), status(&c)), (4, LocalStatus::Ok));
    assert_eq!(a.mem.read(BUFS_OFF, len), vec![0x44; len]);
    deregister_region(&mut b, newer, KEY);
}

/// A copy of a single-packet WRITE (the fabric duplicated it) that arrives after its region
/// was deregistered is refused RC_PERM_VIOLATION, even when a region registered with the
/// same key has taken its place: it never writes the old data into the new region. A copy
/// that arrives while the region is still registered is placed again, the same bytes.
#[test]
fn a_copy_of_a_write_never_reaches_a_region_that_took_its_key_after_it() {
    use std::sync::{Arc, Mutex};
    use uet_fwif::admin::MR_ACCESS_REMOTE_WRITE;
    let Pair {
        fabric,
        mut a,
        mut b,
        mut ea,
        eb,
        ..
    } = pair(0);
    const KEY: u64 = 0x78;
    let (first, second) = (BUFS_OFF, BUFS_OFF + 0x10000);
    let old = register_region(&mut b, &eb, first, 64, KEY, MR_ACCESS_REMOTE_WRITE);
    // Every frame goes through; the first (the WRITE) is also kept.
    let kept = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let keep = kept.clone();
    fabric.hold_frames(move |f| {
        keep.lock().unwrap().push(f.to_vec());
        false
    });
    a.mem.write(BUFS_OFF, &[0xCD; 16]);
    a.post_send_desc(
        &mut ea,
        TxDescriptor {
            opcode: TxOpcode::Write as u8,
            len: U32::new(16),
            buf: U64::new(a.iova(BUFS_OFF)),
            dest: U64::new(3),
            context: U64::new(1),
            match_bits: U64::new(KEY),
            ..Default::default()
        },
    );
    let c = a.poll_cq(&mut ea).expect("the WRITE completes");
    assert_eq!(status(&c), LocalStatus::Ok);
    let write = kept.lock().unwrap()[0].clone();
    fabric.hold_frames(|_| false);
    // A copy while the region is registered: the same bytes again.
    b.mem.fill(first, 16, 0);
    fabric.inject_frame(&write);
    assert_eq!(b.mem.read(first, 16), vec![0xCD; 16]);
    assert_eq!(b.f.counter(RX_PERM_VIOLATION), 0);
    // A copy after the key went to another region: refused, the new region untouched.
    deregister_region(&mut b, old, KEY);
    register_region(&mut b, &eb, second, 64, KEY, MR_ACCESS_REMOTE_WRITE);
    fabric.inject_frame(&write);
    assert_eq!(b.f.counter(RX_PERM_VIOLATION), 1);
    assert_eq!(
        b.mem.read(second, 64),
        vec![0; 64],
        "nothing in the new region"
    );
}
