//! `inject` (fi_inject/fi_tinject), per-endpoint counters (COUNTERS_READ) against the traffic
//! that produced them, and the wire form of the new operations.

use uet_driver::{CqOp, DmaPool, DriverError, MrAccess};
use uet_fwif::datapath::{LocalStatus, MAX_INJECT_BYTES};
use uet_fwif::ReturnCode;
use uet_sim::{frame, pcap, pds, ses};
use uet_tests::{pair_with, pattern, CaptureBuffer};

const JOB: u32 = 0x00_1213;

#[test]
fn inject_frees_the_buffer_at_return_and_reports_no_success() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    assert_eq!(a.ep.inject_size(), MAX_INJECT_BYTES);
    assert_eq!(a.nic.capabilities().inject_size, MAX_INJECT_BYTES);
    b.post_recvs(2);
    b.trecv(0x77, 0, 50);
    let mut payload = pattern(MAX_INJECT_BYTES, 3);
    let sent = payload.clone();
    a.ep.inject(0, &payload, 0xD1).unwrap();
    // The caller's buffer is the caller's again: change it at once.
    payload.fill(0);
    a.ep.tinject(0, b"tagged inject", 0x77, 0xD2).unwrap();
    assert!(
        a.next_completion().is_none(),
        "no completion for a successful inject"
    );
    assert_eq!(a.ep.in_flight().0, 0, "the TX slots came back");

    let ev = b.next_completion().unwrap();
    assert_eq!((ev.op, ev.data), (CqOp::Recv, 0xD1));
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), sent);
    let ev = b.next_completion().unwrap();
    assert_eq!((ev.op, ev.tag, ev.data), (CqOp::TaggedRecv, 0x77, 0xD2));
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"tagged inject");

    // Too long for inject: refused at once, nothing posted.
    match a.ep.inject(0, &[0u8; MAX_INJECT_BYTES + 1], 0) {
        Err(DriverError::MessageTooLong { len, max }) => {
            assert_eq!((len, max), (MAX_INJECT_BYTES + 1, MAX_INJECT_BYTES));
        }
        other => panic!("expected MessageTooLong, got {other:?}"),
    }
    // A failing inject is reported: an fi_addr that is not in the AV, and a target refusal.
    a.ep.inject(3, b"nowhere", 0).unwrap();
    let err = a
        .next_completion()
        .unwrap()
        .error
        .expect("error completion");
    assert_eq!(err.local, LocalStatus::AddrNotAvail);
    a.ep.tinject(0, b"no tagged receive, list is fine", 0x99, 0)
        .unwrap();
    assert!(a.next_completion().is_none(), "held unexpected: a success");
    let ca = a.ep.counters().unwrap();
    assert_eq!(ca.tx_inject_messages, 3);
    assert_eq!(ca.tx_errors, 1);
}

#[test]
fn endpoint_counters_match_the_traffic() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let mtu = a.ep.mtu();
    let big = DmaPool::new(&a.nic, 2 * mtu, 4).unwrap();
    let start = (a.ep.counters().unwrap(), b.ep.counters().unwrap());
    assert_eq!(
        start.0.tx_messages + start.1.rx_messages,
        0,
        "zero at creation"
    );

    // Untagged: 10 B and MTU + 1 B.
    b.post_recvs(1);
    b.ep.post_recv(
        DmaPool::new(&b.nic, 2 * mtu, 1).unwrap().alloc().unwrap(),
        9,
    )
    .unwrap();
    a.send(0, &[1u8; 10], 1);
    let mut buf = big.alloc().unwrap();
    buf.fill(&pattern(mtu + 1, 1)).unwrap();
    a.ep.post_send(0, buf, 2, 0).unwrap();
    // Tagged: one expected, one unexpected then matched; an inject.
    b.trecv(5, 0, 3);
    a.tsend(0, &[2u8; 20], 5, 3);
    a.tsend(0, &[3u8; 30], 6, 4);
    b.trecv(6, 0, 4);
    b.post_recvs(1);
    a.ep.inject(0, &[4u8; 40], 0).unwrap();
    // RMA: a 100-byte write, a 50-byte read, a refused write.
    let mr =
        b.ep.register_mr(b.pool.alloc().unwrap(), MrAccess::REMOTE_READ_WRITE, 0xAA)
            .unwrap();
    let mut buf = a.pool.alloc().unwrap();
    buf.fill(&[5u8; 100]).unwrap();
    a.ep.post_write(0, buf, 0, 0xAA, 5).unwrap();
    a.ep.post_read(0, a.pool.alloc().unwrap(), 50, 10, 0xAA, 6)
        .unwrap();
    let mut buf = a.pool.alloc().unwrap();
    buf.fill(&[6u8; 8]).unwrap();
    a.ep.post_write(0, buf, 0, 0xAB, 7).unwrap();
    // One send nobody receives: it waits on B's unexpected list.
    a.send(0, b"no buffer", 8);
    while a.next_completion().is_some() {}
    while b.next_completion().is_some() {}
    drop(mr);

    let ca = a.ep.counters().unwrap();
    let cb = b.ep.counters().unwrap();
    let msg_bytes = (10 + mtu + 1 + 20 + 30 + 40) as u64;
    assert_eq!(ca.tx_messages, 6, "{ca:?}");
    assert_eq!(ca.tx_bytes, msg_bytes + 9);
    assert_eq!(ca.tx_tagged_messages, 2);
    assert_eq!(ca.tx_inject_messages, 1);
    assert_eq!((ca.rma_writes, ca.rma_write_bytes), (1, 100));
    assert_eq!((ca.rma_reads, ca.rma_read_bytes), (1, 50));
    assert_eq!(ca.tx_errors, 1, "the refused write");
    assert_eq!(cb.rx_messages, 5, "{cb:?}");
    assert_eq!(cb.rx_bytes, msg_bytes);
    assert_eq!(cb.rx_tagged_messages, 2);
    assert_eq!(cb.rx_unexpected, 2, "a tagged message and the untagged one");
    assert_eq!(cb.rma_target_write_bytes, 100);
    assert_eq!(cb.rma_target_read_bytes, 50);
    assert_eq!(cb.rejected(ReturnCode::PermViolation), 1);
    assert_eq!(cb.rejected.iter().sum::<u64>(), 1);
    let named = cb.named();
    assert!(named.contains(&("rejected_RC_PERM_VIOLATION".to_string(), 1)));
    assert_eq!(named[0], ("tx_messages".to_string(), 0));
}

/// `rejected` counts one per refused packet: every packet of a multi-packet message that
/// finds no buffer, and no room on the unexpected list, is answered RC_UNDELIVERABLE, the
/// first by the check and the others from the message's outcome, and each counts.
#[test]
fn every_refused_packet_of_a_multi_packet_message_counts_in_rejected() {
    // The unexpected list holds 1 KiB: less than the message.
    let (_f, mut a, b) = pair_with(JOB, |c| c.unexpected_kib = 1);
    let mtu = a.ep.mtu();
    let big = DmaPool::new(&a.nic, 3 * mtu, 1).unwrap();
    let mut buf = big.alloc().unwrap();
    buf.fill(&pattern(2 * mtu + 1, 7)).unwrap();
    a.ep.post_send(0, buf, 1, 0).unwrap();
    let err = a
        .next_completion()
        .unwrap()
        .error
        .expect("no receive posted");
    assert_eq!(err.return_code, Some(ReturnCode::Undeliverable));
    let cb = b.ep.counters().unwrap();
    assert_eq!(cb.rejected(ReturnCode::Undeliverable), 3, "{cb:?}");
    assert_eq!(cb.rejected.iter().sum::<u64>(), 3);
}

#[test]
fn tagged_write_and_read_on_the_wire() {
    let (fabric, mut a, b) = pair_with(JOB, |_| {});
    let buf = CaptureBuffer::default();
    let _mr =
        b.ep.register_mr(
            b.pool.alloc().unwrap(),
            MrAccess::REMOTE_READ_WRITE,
            0x1122_3344_5566_7788,
        )
        .unwrap();
    fabric.capture_to_writer(buf.clone()).unwrap();
    a.tsend(0, b"tag", 0xFEED_FACE_CAFE_BEEF, 1);
    let mut w = a.pool.alloc().unwrap();
    w.fill(b"rma").unwrap();
    a.ep.post_write(0, w, 0x40, 0x1122_3344_5566_7788, 2)
        .unwrap();
    a.ep.post_read(
        0,
        a.pool.alloc().unwrap(),
        3,
        0x40,
        0x1122_3344_5566_7788,
        3,
    )
    .unwrap();
    fabric.stop_capture();
    let cap = pcap::parse(&buf.bytes()).expect("a valid capture");
    // Three requests, three responses.
    assert_eq!(cap.records.len(), 6);
    let ses_of = |i: usize| {
        let dg = frame::parse(&cap.records[i].data).unwrap();
        dg.payload[pds::RUD_REQ_BYTES..].to_vec()
    };
    let be64 = |b: &[u8], at: usize| u64::from_be_bytes(b[at..at + 8].try_into().unwrap());
    let t = ses_of(0);
    assert_eq!(t[0], ses::OP_TAGGED_SEND);
    assert_eq!(
        be64(&t, 24),
        0xFEED_FACE_CAFE_BEEF,
        "match bits in bytes 24-31"
    );
    let w = ses_of(2);
    assert_eq!(w[0], ses::OP_WRITE);
    assert_eq!(be64(&w, 12), 0x40, "buffer_offset in bytes 12-19");
    assert_eq!(
        be64(&w, 24),
        0x1122_3344_5566_7788,
        "memory key in bytes 24-31"
    );
    let r = ses_of(4);
    assert_eq!(r[0], ses::OP_READ);
    // The READ's answer: PDS next_hdr 5, SES response with data, then the bytes.
    let dg = frame::parse(&cap.records[5].data).unwrap();
    let p = pds::Prologue::peek(dg.payload).unwrap();
    assert_eq!(
        (p.pkt_type, p.next_hdr),
        (pds::TYPE_ACK, pds::NEXT_HDR_RESPONSE_DATA)
    );
    let resp = &dg.payload[pds::ACK_BYTES..];
    assert_eq!(resp[0] & 0x3F, ses::OP_RESPONSE_WITH_DATA);
    assert_eq!(&resp[ses::RESPONSE_BYTES..], b"rma");
    let ev = (0..3)
        .filter_map(|_| a.next_completion())
        .collect::<Vec<_>>();
    assert!(ev.iter().all(|e| e.error.is_none()), "{ev:?}");
}
