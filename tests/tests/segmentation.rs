//! Messages longer than the MTU: the sending NIC segments them (SOM … EOM), the receiving NIC
//! reassembles them into one buffer, and each side sees one completion.

use std::net::IpAddr;
use uet_av::{FiErrno, NicAvTable};
use uet_driver::{DmaPool, DriverError};
use uet_fwif::datapath::{CompletionKind, LocalStatus};
use uet_fwif::{ReturnCode, UetAddress};
use uet_regs::{RX_BAD_JOB_ID, RX_MALFORMED, RX_PACKETS, TX_MSG_TOO_LONG, TX_PACKETS};
use uet_sim::pds::{RudRequest, FLAG_SYN, NEXT_HDR_REQUEST_STD, START_PSN, TYPE_ACK, TYPE_RUD_REQ};
use uet_sim::ses::{self, segment_word, StandardRequest};
use uet_sim::{frame, Fabric, NicConfig};
use uet_tests::{pattern, CaptureBuffer, Node};

const JOB: u32 = 0x0005_1234;

fn pair_with(cfg_b: impl FnOnce(&mut NicConfig)) -> (Fabric, Node, Node) {
    uet_tests::pair_with(JOB, cfg_b)
}

fn pair() -> (Fabric, Node, Node) {
    pair_with(|_| {})
}

fn send_bytes(node: &mut Node, pool: &DmaPool, data: &[u8], cq_data: u64) {
    let mut buf = pool.alloc().expect("send buffer");
    buf.fill(data).expect("fill");
    node.ep
        .post_send(0, buf, 1, cq_data)
        .map_err(|(e, _)| e)
        .expect("post send");
}

#[test]
fn messages_around_the_mtu_arrive_intact_with_one_completion_each() {
    let (_fabric, mut a, mut b) = pair();
    let mtu = a.ep.mtu();
    assert_eq!(mtu, usize::from(a.nic.capabilities().mtu));
    assert_eq!(a.ep.max_msg_size(), 1 << 20);
    assert_eq!(a.nic.capabilities().max_msg_size, 1 << 20);
    assert!(
        !a.ep.address().max_msg_mtu,
        "messages are not limited to one MTU"
    );
    let tx_pool = DmaPool::new(&a.nic, 64 * 1024, 4).unwrap();
    let rx_pool = DmaPool::new(&b.nic, 64 * 1024, 4).unwrap();
    for (i, len) in [0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu + 17, 64 * 1024]
        .into_iter()
        .enumerate()
    {
        let msg = pattern(len, i as u8);
        let (tx0, rx0) = (a.counter(TX_PACKETS), b.counter(RX_PACKETS));
        b.ep.post_recv(rx_pool.alloc().unwrap(), 100 + i as u64)
            .map_err(|(e, _)| e)
            .unwrap();
        let cq_data = 0xD000 + i as u64;
        send_bytes(&mut a, &tx_pool, &msg, cq_data);

        let sent = a.next_completion().expect("one send completion");
        assert_eq!(sent.kind, CompletionKind::Send);
        assert!(sent.error.is_none(), "len {len}: {:?}", sent.error);
        assert_eq!(sent.len, len);
        assert!(a.next_completion().is_none(), "len {len}: exactly one");

        let got = b.next_completion().expect("one receive completion");
        assert_eq!(got.kind, CompletionKind::Recv);
        assert!(got.error.is_none(), "len {len}: {:?}", got.error);
        assert_eq!(got.context, 100 + i as u64);
        assert_eq!(got.len, len);
        assert_eq!(got.data, cq_data, "header data from the SOM packet");
        assert_eq!(got.src_addr, 0, "reverse-translated sender");
        let bytes = got.buffer.expect("buffer back").to_vec().unwrap();
        assert!(bytes == msg, "len {len}: payload differs");
        assert!(b.next_completion().is_none(), "len {len}: exactly one");

        let packets = len.div_ceil(mtu).max(1) as u64;
        assert_eq!(a.counter(TX_PACKETS) - tx0, packets, "len {len}");
        assert_eq!(b.counter(RX_PACKETS) - rx0, packets, "len {len}");
    }
    assert_eq!(b.counter(RX_MALFORMED), 0);
}

#[test]
fn a_message_of_cap_max_msg_bytes_arrives_and_one_more_is_refused() {
    let (_fabric, mut a, mut b) = pair();
    let max = a.ep.max_msg_size();
    let tx_pool = DmaPool::new(&a.nic, max + 64, 1).unwrap();
    let rx_pool = DmaPool::new(&b.nic, max, 1).unwrap();
    let msg = pattern(max, 3);
    b.ep.post_recv(rx_pool.alloc().unwrap(), 1)
        .map_err(|(e, _)| e)
        .unwrap();
    send_bytes(&mut a, &tx_pool, &msg, 5);
    assert!(a.next_completion().unwrap().error.is_none());
    let got = b.next_completion().unwrap();
    assert!(got.error.is_none());
    assert!(got.buffer.unwrap().to_vec().unwrap() == msg);

    // One byte more: the driver refuses it before the NIC sees it, and returns the buffer.
    let mut buf = tx_pool.alloc().unwrap();
    buf.fill(&pattern(max + 1, 4)).unwrap();
    let (err, buf) = a.ep.post_send(0, buf, 2, 0).unwrap_err();
    assert!(
        matches!(err, DriverError::MessageTooLong { len, max: m } if len == max + 1 && m == max),
        "{err}"
    );
    assert_eq!(err.errno(), FiErrno::FI_EMSGSIZE);
    assert_eq!(buf.len(), max + 1);
    let err =
        a.ep.post_send_iova(0, buf.iova(), max + 1, 3, 0)
            .unwrap_err();
    assert_eq!(err.errno(), FiErrno::FI_EMSGSIZE);
    assert_eq!(a.ep.in_flight(), (0, 0), "nothing was posted");
    assert!(a.next_completion().is_none());
}

#[test]
fn a_target_with_a_smaller_max_msg_answers_too_long() {
    let (fabric, mut a, mut b) = pair_with(|c| c.max_msg = 2 * u32::from(c.mtu));
    let mtu = a.ep.mtu();
    assert_eq!(b.ep.max_msg_size(), 2 * mtu);
    let pool = DmaPool::new(&a.nic, 4 * mtu, 2).unwrap();
    b.post_recvs(1);
    send_bytes(&mut a, &pool, &pattern(3 * mtu, 1), 0);
    let ev = a.next_completion().expect("send completion");
    let err = ev.error.expect("refused");
    assert_eq!(err.local, LocalStatus::Remote);
    assert_eq!(err.return_code, Some(ReturnCode::TooLong));
    assert_eq!(err.errno, FiErrno::FI_EMSGSIZE);
    assert!(b.next_completion().is_none());
    assert_eq!(b.ep.in_flight(), (0, 1), "the receive buffer is untouched");
    assert_eq!(
        b.function.debug_counters().rx_too_long,
        3,
        "every packet answered"
    );
    drop(fabric);
}

#[test]
fn a_message_longer_than_the_buffer_is_truncated_without_writing_past_it() {
    let (_fabric, mut a, mut b) = pair();
    let mtu = a.ep.mtu();
    let tx_pool = DmaPool::new(&a.nic, 4 * mtu + 64, 1).unwrap();
    // Two adjacent 1 KiB buffers: the first receives, the second must stay untouched.
    let rx_pool = DmaPool::new(&b.nic, 1024, 2).unwrap();
    let small = rx_pool.alloc().unwrap();
    let mut guard = rx_pool.alloc().unwrap();
    assert_eq!(guard.iova(), small.iova() + 1024);
    guard.fill(&[0xEE; 1024]).unwrap();
    b.ep.post_recv(small, 77).map_err(|(e, _)| e).unwrap();
    let msg = pattern(3 * mtu + 17, 9);
    send_bytes(&mut a, &tx_pool, &msg, 0);

    let sent = a.next_completion().unwrap();
    assert!(
        sent.error.is_none(),
        "the sender sees success: {:?}",
        sent.error
    );
    let got = b.next_completion().expect("one receive completion");
    let err = got.error.expect("truncated");
    assert_eq!(err.local, LocalStatus::Truncated);
    assert_eq!(err.errno, FiErrno::FI_ETRUNC);
    assert_eq!(got.len, 1024);
    assert_eq!(got.context, 77);
    assert!(got.buffer.unwrap().to_vec().unwrap() == msg[..1024]);
    assert_eq!(guard.to_vec().unwrap(), vec![0xEE; 1024]);
    assert!(b.next_completion().is_none());
}

#[test]
fn capture_of_a_three_packet_message_shows_som_eom_and_offsets() {
    let (fabric, mut a, mut b) = pair();
    let mtu = a.ep.mtu();
    let len = 2 * mtu + 100;
    let msg = pattern(len, 7);
    let pool = DmaPool::new(&a.nic, len, 1).unwrap();
    let rx_pool = DmaPool::new(&b.nic, len, 1).unwrap();
    b.ep.post_recv(rx_pool.alloc().unwrap(), 1)
        .map_err(|(e, _)| e)
        .unwrap();
    let cap = CaptureBuffer::default();
    fabric.capture_to_writer(cap.clone()).unwrap();
    send_bytes(&mut a, &pool, &msg, 0xFEED);
    assert!(a.next_completion().unwrap().error.is_none());
    assert!(b.next_completion().unwrap().error.is_none());
    fabric.stop_capture();

    let frames = cap.records();
    assert_eq!(frames.len(), 6, "three requests, three responses");
    let mut reqs = Vec::new();
    let mut acks = Vec::new();
    for f in &frames {
        let dg = frame::parse(f).expect("well-formed");
        let p = dg.payload;
        match uet_sim::pds::Prologue::peek(p).unwrap().pkt_type {
            TYPE_RUD_REQ => {
                let (pds, rest) = RudRequest::parse(p).unwrap();
                let (ses, payload) = StandardRequest::parse(rest).unwrap();
                reqs.push((pds, ses, payload.to_vec(), p[12 + 32..12 + 40].to_vec()));
            }
            TYPE_ACK => acks.push(p.to_vec()),
            t => panic!("unexpected PDS type {t}"),
        }
    }
    assert_eq!(reqs.len(), 3);
    let message_id = reqs[0].1.message_id;
    let mut reassembled = Vec::new();
    for (i, (pds, s, payload, raw32)) in reqs.iter().enumerate() {
        assert_eq!(pds.next_hdr, NEXT_HDR_REQUEST_STD);
        assert_eq!(pds.psn, START_PSN + i as u32, "consecutive PSNs");
        assert_eq!(pds.spdcid, reqs[0].0.spdcid, "one PDC");
        assert_eq!(
            pds.flags & FLAG_SYN,
            FLAG_SYN,
            "the PDC is not established yet"
        );
        assert_eq!(s.opcode, ses::OP_SEND);
        assert_eq!(s.message_id, message_id, "one message id");
        assert_eq!(
            s.request_length as usize, len,
            "the whole message in every packet"
        );
        assert_eq!(s.flags & ses::FLAG_REL, ses::FLAG_REL);
        let som = s.flags & ses::FLAG_SOM != 0;
        let eom = s.flags & ses::FLAG_EOM != 0;
        assert_eq!((som, eom), (i == 0, i == 2), "packet {i}");
        if i == 0 {
            assert_eq!(s.header_data, 0xFEED);
            assert_eq!(s.flags & ses::FLAG_HD, ses::FLAG_HD);
            assert_eq!(payload.len(), mtu);
        } else {
            assert_eq!(s.flags & ses::FLAG_HD, 0);
            let (plen, offset) = s.segment().unwrap();
            assert_eq!(offset as usize, i * mtu);
            assert_eq!(usize::from(plen), payload.len());
            assert_eq!(payload.len(), if i == 1 { mtu } else { 100 });
            // Bytes 32-35: rsvd(18) payload_len(14); bytes 36-39: message_offset.
            assert_eq!(&raw32[..4], &u32::from(plen).to_be_bytes());
            assert_eq!(&raw32[4..], &offset.to_be_bytes());
        }
        reassembled.extend_from_slice(payload);
    }
    assert!(reassembled == msg);
    assert_eq!(acks.len(), 3);
    let mut cack: Vec<u32> = acks
        .iter()
        .map(|p| u32::from_be_bytes(p[4..8].try_into().unwrap()))
        .collect();
    cack.sort_unstable();
    assert_eq!(cack, [START_PSN, START_PSN + 1, START_PSN + 2]);
    for p in &acks {
        assert_eq!(p[12 + 1], ReturnCode::Ok as u8, "RC_OK for every packet");
        assert_eq!(u16::from_be_bytes([p[14], p[15]]), message_id);
    }
}

/// Builds request frames to a node from a sender that is not on the fabric.
struct Forger {
    src: IpAddr,
    dst: IpAddr,
    target: UetAddress,
    psn: u32,
}

impl Forger {
    fn new(target: &Node) -> Self {
        Forger {
            src: "10.1.0.200".parse().unwrap(),
            dst: target.function.fabric_addr(),
            target: *target.ep.address(),
            psn: START_PSN,
        }
    }

    /// A packet of message `id` (total `msg.len()` bytes) carrying `msg[offset..end]`.
    fn packet(&mut self, id: u16, msg: &[u8], offset: usize, end: usize) -> Vec<u8> {
        self.packet_with(id, msg, offset, end, |_| {})
    }

    /// [`Forger::packet`], its SES header as `edit` leaves it.
    fn packet_with(
        &mut self,
        id: u16,
        msg: &[u8],
        offset: usize,
        end: usize,
        edit: impl FnOnce(&mut StandardRequest),
    ) -> Vec<u8> {
        let mut flags = ses::FLAG_REL;
        let header_data = if offset == 0 {
            flags |= ses::FLAG_SOM | ses::FLAG_HD;
            0xABCD
        } else {
            segment_word((end - offset) as u16, offset as u32)
        };
        if end == msg.len() {
            flags |= ses::FLAG_EOM;
        }
        let pds = RudRequest {
            next_hdr: NEXT_HDR_REQUEST_STD,
            flags: 0,
            clear_psn_offset: 0,
            psn: self.psn,
            spdcid: 9,
            dpdcid: 0,
        };
        self.psn += 1;
        let req = StandardRequest {
            opcode: ses::OP_SEND,
            flags,
            message_id: id,
            job_id: JOB,
            pid_on_fep: self.target.pid_on_fep,
            resource_index: self.target.ri_start,
            initiator: 0x5555,
            header_data,
            request_length: msg.len() as u32,
            ..StandardRequest::default()
        };
        let mut req = req;
        edit(&mut req);
        let mut pkt = Vec::new();
        pds.encode(&mut pkt);
        req.encode(&mut pkt);
        pkt.extend_from_slice(&msg[offset..end]);
        frame::build(
            [2, 0, 0, 0, 0, 9],
            frame::GATEWAY_MAC,
            self.src,
            self.dst,
            0xC009,
            &pkt,
        )
        .unwrap()
    }
}

/// The SES return codes of the responses in a capture, in order.
fn response_codes(cap: &CaptureBuffer) -> Vec<u8> {
    cap.records()
        .iter()
        .filter_map(|f| {
            let p = frame::parse(f).ok()?.payload;
            (uet_sim::pds::Prologue::peek(p).ok()?.pkt_type == TYPE_ACK).then(|| p[13])
        })
        .collect()
}

#[test]
fn reassembly_takes_packets_in_any_order_and_ignores_duplicates() {
    let (fabric, _a, mut b) = pair();
    let rx_pool = DmaPool::new(&b.nic, 1000, 2).unwrap();
    for ctx in [1, 2] {
        b.ep.post_recv(rx_pool.alloc().unwrap(), ctx)
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let cap = CaptureBuffer::default();
    fabric.capture_to_writer(cap.clone()).unwrap();
    let msg = pattern(1000, 5);
    let mut f = Forger::new(&b);
    let p0 = f.packet(3, &msg, 0, 300);
    let p1 = f.packet(3, &msg, 300, 700);
    let p2 = f.packet(3, &msg, 700, 1000);
    fabric.inject_frame(&p2); // EOM first: consumes buffer 1
    fabric.inject_frame(&p1);
    fabric.inject_frame(&p1); // duplicate while reassembling
    assert!(b.next_completion().is_none(), "not complete without SOM");
    fabric.inject_frame(&p0);
    let got = b.next_completion().expect("complete");
    assert!(got.error.is_none(), "{:?}", got.error);
    assert_eq!(got.context, 1);
    assert_eq!(got.len, 1000);
    assert_eq!(got.data, 0xABCD);
    assert_eq!(
        got.src_addr,
        uet_fwif::FI_ADDR_NOTAVAIL,
        "sender not in the AV"
    );
    assert!(got.buffer.unwrap().to_vec().unwrap() == msg);
    // A late duplicate after completion is answered, not delivered again.
    fabric.inject_frame(&p1);
    assert!(b.next_completion().is_none());
    assert_eq!(b.ep.in_flight(), (0, 1), "buffer 2 still waits");
    assert_eq!(b.function.debug_counters().rx_duplicate_packets, 2);
    assert_eq!(response_codes(&cap), vec![ReturnCode::Ok as u8; 5]);

    // A packet that partly overlaps received bytes is malformed and unanswered.
    let msg2 = pattern(1000, 6);
    let q0 = f.packet(4, &msg2, 0, 500);
    let q_overlap = f.packet(4, &msg2, 400, 800);
    let q1 = f.packet(4, &msg2, 500, 1000);
    fabric.inject_frame(&q0);
    fabric.inject_frame(&q_overlap);
    assert_eq!(b.counter(RX_MALFORMED), 1);
    fabric.inject_frame(&q1);
    let got = b.next_completion().expect("second message");
    assert!(got.error.is_none());
    assert!(got.buffer.unwrap().to_vec().unwrap() == msg2);
    assert_eq!(response_codes(&cap).len(), 7);
}

/// Every packet of a message carries its operation, match bits and JobID: a later packet
/// that names another (a SEND joining a TAGGED_SEND, other match bits, another job) belongs
/// to no message in reassembly. It is malformed, counted and unanswered, and the message
/// completes from its own packets.
#[test]
fn a_packet_that_names_another_operation_tag_or_job_joins_no_message() {
    let (fabric, _a, mut b) = pair();
    let rx_pool = DmaPool::new(&b.nic, 1000, 1).unwrap();
    b.ep.post_recv(rx_pool.alloc().unwrap(), 1)
        .map_err(|(e, _)| e)
        .unwrap();
    let msg = pattern(1000, 7);
    let mut f = Forger::new(&b);
    let first = f.packet(5, &msg, 0, 500);
    let forged = [
        f.packet_with(5, &msg, 500, 1000, |r| r.opcode = ses::OP_TAGGED_SEND),
        f.packet_with(5, &msg, 500, 1000, |r| r.match_bits = 7),
        f.packet_with(5, &msg, 500, 1000, |r| r.job_id ^= 1),
    ];
    let rest = f.packet(5, &msg, 500, 1000);
    fabric.inject_frame(&first);
    let (malformed, bad_job) = (b.counter(RX_MALFORMED), b.counter(RX_BAD_JOB_ID));
    for (k, p) in forged.iter().enumerate() {
        fabric.inject_frame(p);
        // Another job's packet is refused before it is matched to a message: the endpoint
        // does not accept that job.
        let refused = b.counter(RX_MALFORMED) - malformed + b.counter(RX_BAD_JOB_ID) - bad_job;
        assert_eq!(refused, k as u64 + 1, "forged {k}");
        assert!(
            b.next_completion().is_none(),
            "forged {k} completed nothing"
        );
    }
    assert_eq!(
        b.counter(RX_MALFORMED) - malformed,
        2,
        "the operation and the tag"
    );
    fabric.inject_frame(&rest);
    let got = b
        .next_completion()
        .expect("the message, from its own packets");
    assert!(got.error.is_none(), "{:?}", got.error);
    assert!(got.buffer.unwrap().to_vec().unwrap() == msg);
}

/// A single-packet message with the id of a remembered multi-packet one ends the
/// remembering: the sender has given the id again. A later multi-packet message with that id
/// is delivered, even when its PSNs are close to the remembered message's, as they are once
/// the 32-bit PSNs of a connection carrying only single-packet messages have wrapped (here
/// the PSNs are simply consecutive).
#[test]
fn a_single_packet_message_with_a_remembered_id_ends_the_remembering() {
    let (fabric, _a, mut b) = pair();
    let rx_pool = DmaPool::new(&b.nic, 1000, 3).unwrap();
    for ctx in [1, 2, 3] {
        b.ep.post_recv(rx_pool.alloc().unwrap(), ctx)
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let mut f = Forger::new(&b);
    let (m1, m3) = (pattern(600, 1), pattern(600, 3));
    fabric.inject_frame(&f.packet(7, &m1, 0, 300));
    fabric.inject_frame(&f.packet(7, &m1, 300, 600));
    let got = b.next_completion().expect("the first message 7");
    assert!(got.buffer.unwrap().to_vec().unwrap() == m1);
    fabric.inject_frame(&f.packet(7, b"one", 0, 3));
    let got = b.next_completion().expect("the single-packet message 7");
    assert_eq!(got.buffer.unwrap().to_vec().unwrap(), b"one");
    fabric.inject_frame(&f.packet(7, &m3, 0, 300));
    fabric.inject_frame(&f.packet(7, &m3, 300, 600));
    let got = b
        .next_completion()
        .expect("the third message 7 is delivered");
    assert!(got.error.is_none(), "{:?}", got.error);
    assert!(got.buffer.unwrap().to_vec().unwrap() == m3);
    assert_eq!(b.function.debug_counters().rx_duplicate_packets, 0);
}

#[test]
fn reassembly_slots_are_bounded_and_overflow_is_counted() {
    let (fabric, _a, mut b) = pair_with(|c| c.reassembly_slots = 1);
    let rx_pool = DmaPool::new(&b.nic, 1000, 3).unwrap();
    for ctx in [1, 2, 3] {
        b.ep.post_recv(rx_pool.alloc().unwrap(), ctx)
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let cap = CaptureBuffer::default();
    fabric.capture_to_writer(cap.clone()).unwrap();
    let (m1, m2) = (pattern(600, 1), pattern(600, 2));
    let mut f = Forger::new(&b);
    fabric.inject_frame(&f.packet(10, &m1, 0, 300));
    // The only slot is taken: message 11 is refused, every packet of it alike.
    fabric.inject_frame(&f.packet(11, &m2, 0, 300));
    fabric.inject_frame(&f.packet(11, &m2, 300, 600));
    assert_eq!(b.function.debug_counters().reassembly_overflows, 1);
    fabric.inject_frame(&f.packet(10, &m1, 300, 600));
    let got = b.next_completion().expect("message 10");
    assert!(got.error.is_none());
    assert!(got.buffer.unwrap().to_vec().unwrap() == m1);
    // The slot is free again.
    fabric.inject_frame(&f.packet(12, &m2, 300, 600));
    fabric.inject_frame(&f.packet(12, &m2, 0, 300));
    let got = b.next_completion().expect("message 12");
    assert_eq!(got.context, 2, "message 11 consumed no buffer");
    assert!(got.buffer.unwrap().to_vec().unwrap() == m2);
    let ok = ReturnCode::Ok as u8;
    let undeliverable = ReturnCode::Undeliverable as u8;
    assert_eq!(
        response_codes(&cap),
        [ok, undeliverable, undeliverable, ok, ok, ok]
    );
}

#[test]
fn inconsistent_segments_are_malformed() {
    let (fabric, _a, mut b) = pair();
    b.post_recvs(1);
    let msg = pattern(100, 1);
    let mut f = Forger::new(&b);
    let mut bad = Vec::new();
    // payload_len disagrees with the payload.
    let mut p = f.packet(1, &msg, 40, 100);
    let at = frame::ETH_HDR + frame::IPV4_HDR + frame::UDP_HDR + 12 + 35;
    p[at] ^= 1;
    bad.push(p);
    // A middle packet that reaches the end of the message without EOM, and one past it.
    let mut req = f.packet(1, &msg, 40, 100);
    let flags_at = frame::ETH_HDR + frame::IPV4_HDR + frame::UDP_HDR + 12 + 1;
    req[flags_at] &= !ses::FLAG_EOM;
    bad.push(req);
    // SOM without EOM carrying the whole message.
    let mut req = f.packet(1, &msg, 0, 100);
    req[flags_at] &= !ses::FLAG_EOM;
    bad.push(req);
    for (i, p) in bad.iter().enumerate() {
        // Re-checksum what was edited so only the UET fields are wrong.
        let p = reframe(p);
        fabric.inject_frame(&p);
        assert_eq!(b.counter(RX_MALFORMED), i as u64 + 1, "case {i}");
    }
    assert!(b.next_completion().is_none());
    assert_eq!(b.ep.in_flight(), (0, 1));
}

/// Rebuild a frame around its (edited) UDP payload so the checksums are right again.
fn reframe(f: &[u8]) -> Vec<u8> {
    let start = frame::ETH_HDR + frame::IPV4_HDR + frame::UDP_HDR;
    let src: IpAddr = IpAddr::from(<[u8; 4]>::try_from(&f[26..30]).unwrap());
    let dst: IpAddr = IpAddr::from(<[u8; 4]>::try_from(&f[30..34]).unwrap());
    frame::build(
        [2, 0, 0, 0, 0, 9],
        frame::GATEWAY_MAC,
        src,
        dst,
        0xC009,
        &f[start..],
    )
    .unwrap()
}

#[test]
fn a_peer_that_takes_one_mtu_gets_no_longer_message_and_the_sender_gets_emsgsize() {
    // B's NIC takes messages of one MTU, so its endpoint's address says so (MAX_MSG_MTU).
    let (_fabric, mut a, mut b) = pair_with(|c| c.max_msg = u32::from(c.mtu));
    let mtu = a.ep.mtu();
    assert!(b.ep.address().max_msg_mtu);
    assert!(a.av.address(0).unwrap().max_msg_mtu, "the mirror keeps it");
    let mut on_nic = [uet_fwif::NicAvEntry::INVALID; 1];
    a.av.nic_mut().read_entries(0, &mut on_nic).unwrap();
    assert!(on_nic[0].max_msg_mtu(), "AV_READ: {:?}", on_nic[0]);
    assert!(a.av.verify_nic().unwrap().is_empty());

    let pool = DmaPool::new(&a.nic, 4 * mtu, 4).unwrap();
    b.post_recvs(2);
    let (tx0, rx0) = (a.counter(TX_PACKETS), b.counter(RX_PACKETS));
    // One byte over, untagged and tagged: refused by A's NIC, nothing on the wire.
    send_bytes(&mut a, &pool, &pattern(mtu + 1, 1), 0);
    let mut tagged = pool.alloc().unwrap();
    tagged.fill(&pattern(3 * mtu, 2)).unwrap();
    a.ep.post_tsend(0, tagged, 0x77, 9, 0)
        .map_err(|(e, _)| e)
        .unwrap();
    for context in [1, 9] {
        let ev = a.next_completion().expect("send completion");
        assert_eq!(ev.context, context);
        let err = ev.error.expect("refused");
        assert_eq!(err.local, LocalStatus::MsgTooLong);
        assert_eq!(err.errno, FiErrno::FI_EMSGSIZE);
    }
    assert_eq!(a.counter(TX_MSG_TOO_LONG), 2);
    assert_eq!(a.counter(TX_PACKETS), tx0, "nothing sent");
    assert_eq!(b.counter(RX_PACKETS), rx0, "nothing arrived");
    assert!(b.next_completion().is_none());

    // One MTU exactly still goes, as one packet.
    let msg = pattern(mtu, 3);
    send_bytes(&mut a, &pool, &msg, 4);
    let sent = a.next_completion().expect("send completion");
    assert!(sent.error.is_none(), "{:?}", sent.error);
    assert_eq!(a.counter(TX_PACKETS), tx0 + 1);
    let got = b.next_completion().expect("receive completion");
    assert!(got.error.is_none(), "{:?}", got.error);
    assert!(got.buffer.unwrap().to_vec().unwrap() == msg);

    // The other way, B's peer A takes long messages: B's entry for A has no flag.
    let mut on_b = [uet_fwif::NicAvEntry::INVALID; 1];
    b.av.nic_mut().read_entries(0, &mut on_b).unwrap();
    assert!(on_b[0].is_valid() && !on_b[0].max_msg_mtu());
}

/// A NIC configuration whose 1 KiB MTU makes a 3,000-byte message three packets.
fn small_mtu(i: usize) -> NicConfig {
    let mut c = NicConfig::new(uet_tests::nic_addr(i));
    c.mtu = 1024;
    c
}

/// Two opened NICs of [`small_mtu`] on `fabric`, each with a pool of buffers.
fn small_mtu_nics(fabric: &Fabric) -> [(uet_driver::Nic, DmaPool); 2] {
    [0, 1].map(|i| {
        let nic = uet_driver::Nic::open(std::sync::Arc::new(
            uet_driver::backend::sim::SimDevice::new(fabric.add_nic(small_mtu(i)).unwrap()),
        ))
        .unwrap();
        let pool = DmaPool::new(&nic, 4096, 8).unwrap();
        (nic, pool)
    })
}

/// Bytes of a three-packet message at [`small_mtu`].
const THREE_PACKETS: usize = 3000;

/// Send `len` bytes of pattern `seed` from `ep` to `dest` and wait for the send's completion.
fn send_pattern(
    ep: &mut uet_driver::Endpoint,
    pool: &DmaPool,
    dest: u64,
    len: usize,
    seed: u8,
) -> Option<uet_driver::CqError> {
    let mut buf = pool.alloc().expect("send buffer");
    buf.fill(&pattern(len, seed)).expect("fill");
    ep.post_send(dest, buf, 9, 0)
        .map_err(|(e, _)| e)
        .expect("post send");
    uet_tests::poll_one(ep).expect("send completion").error
}

/// An endpoint of a NIC opened again derives the initiator id its predecessor had, and its
/// message ids start at 0 again. Its first multi-packet message is a new message at the
/// target, delivered, not taken for a late packet of the old endpoint's message 0 and
/// answered from that one's outcome with nothing delivered.
#[test]
fn a_multi_packet_message_from_a_nic_opened_again_is_delivered() {
    let fabric = Fabric::new();
    let fa = fabric.add_nic(small_mtu(0)).unwrap();
    let mut b = Node::new(fabric.add_nic(small_mtu(1)).unwrap(), JOB, 8);
    b.post_recvs(2);
    let attr = uet_av::AvAttr {
        count: 8,
        job_id: JOB,
        ..uet_av::AvAttr::default()
    };
    let mut initiators = Vec::new();
    for seed in [1u8, 2] {
        let nic = uet_driver::Nic::open(std::sync::Arc::new(
            uet_driver::backend::sim::SimDevice::new(fa.clone()),
        ))
        .unwrap();
        assert!(usize::from(nic.capabilities().mtu) < THREE_PACKETS);
        let mut av = nic.open_av(attr).unwrap();
        let pool = DmaPool::new(&nic, 4096, 8).unwrap();
        let mut ep = nic
            .endpoint(
                uet_driver::EndpointAttr {
                    job_id: JOB,
                    ..uet_driver::EndpointAttr::default()
                },
                Some(&av),
            )
            .unwrap();
        initiators.push(ep.address().initiator);
        let mut dest = [0u64];
        av.insert(&b.addr(), 1, Some(&mut dest), 0).unwrap();
        let sent = send_pattern(&mut ep, &pool, dest[0], THREE_PACKETS, seed);
        assert!(sent.is_none(), "{sent:?}");
        let got = b.next_completion().expect("delivered");
        assert!(got.error.is_none(), "{:?}", got.error);
        assert_eq!(
            got.buffer.unwrap().to_vec().unwrap(),
            pattern(THREE_PACKETS, seed)
        );
    }
    assert_eq!(
        initiators[0], initiators[1],
        "the same initiator id, derived again"
    );
    assert_eq!(b.function.debug_counters().rx_duplicate_packets, 0);
}

/// Two live endpoints of one NIC, in two jobs and both rank 0 (the same initiator id), each
/// send a multi-packet message, with message id 0, to an endpoint of their own job on one
/// target NIC: two messages, each delivered to its own endpoint.
#[test]
fn rank_zero_of_two_jobs_on_one_nic_send_multi_packet_messages_that_both_arrive() {
    let fabric = Fabric::new();
    let [(nic_a, pool_a), (nic_b, pool_b)] = small_mtu_nics(&fabric);
    let attr = |job_id| uet_av::AvAttr {
        count: 4,
        job_id,
        ..uet_av::AvAttr::default()
    };
    let endpoint = |nic: &uet_driver::Nic, av: &uet_driver::Av, job_id, initiator| {
        nic.endpoint(
            uet_driver::EndpointAttr {
                job_id,
                initiator,
                ..uet_driver::EndpointAttr::default()
            },
            Some(av),
        )
        .unwrap()
    };
    let mut kept = Vec::new();
    let mut targets = Vec::new();
    for job in [1u32, 2] {
        let av = nic_b.open_av(attr(job)).unwrap();
        let mut ep = endpoint(&nic_b, &av, job, None);
        ep.post_recv(pool_b.alloc().unwrap(), 1).unwrap();
        targets.push(ep);
        kept.push(av);
    }
    let mut senders = Vec::new();
    for (i, job) in [1u32, 2].into_iter().enumerate() {
        let mut av = nic_a.open_av(attr(job)).unwrap();
        let mut ep = endpoint(&nic_a, &av, job, Some(0));
        let mut dest = [0u64];
        let target = targets[i].address().to_bytes().unwrap();
        av.insert(&target, 1, Some(&mut dest), 0).unwrap();
        let sent = send_pattern(&mut ep, &pool_a, dest[0], THREE_PACKETS, 10 + i as u8);
        assert!(sent.is_none(), "job {job}: {sent:?}");
        kept.push(av);
        senders.push(ep);
    }
    for (i, ep) in targets.iter_mut().enumerate() {
        let got = uet_tests::poll_one(ep).unwrap_or_else(|| panic!("job {} got nothing", i + 1));
        assert!(got.error.is_none(), "{:?}", got.error);
        assert_eq!(
            got.buffer.unwrap().to_vec().unwrap(),
            pattern(THREE_PACKETS, 10 + i as u8)
        );
    }
}

/// The SES JobID of a request is the JobID its AV entry sends with (an auth key's when the
/// entry is bound to one), not the sending endpoint's own. Endpoint X (job 0x77, rank 0) and
/// endpoint Y (job 0x11, rank 0: another job, so interface 1.11 allows it) share a NIC, and Y
/// sends through an auth key of job 0x77: their packets carry the same JobID and initiator.
/// Each sends a multi-packet message to one target endpoint: two messages, both delivered
/// (message ids count per PDC at the sender, not per endpoint).
#[test]
fn a_sender_through_an_auth_key_and_the_same_rank_of_the_keys_job_both_deliver() {
    use uet_av::{job_id_to_auth_key, FI_AUTH_KEY, FI_AV_AUTH_KEY};
    let fabric = Fabric::new();
    let [(nic_a, pool_a), (nic_b, pool_b)] = small_mtu_nics(&fabric);
    let av_attr = |job_id, auth_key_size| uet_av::AvAttr {
        count: 4,
        job_id,
        auth_key_size,
        ..uet_av::AvAttr::default()
    };
    let endpoint = |nic: &uet_driver::Nic, av: &uet_driver::Av, job_id| {
        nic.endpoint(
            uet_driver::EndpointAttr {
                job_id,
                initiator: Some(0),
                ..uet_driver::EndpointAttr::default()
            },
            Some(av),
        )
        .unwrap()
    };
    // The target: an endpoint of job 0x77 with two receives.
    let av_t = nic_b.open_av(av_attr(0x77, 0)).unwrap();
    let mut t = endpoint(&nic_b, &av_t, 0x77);
    t.post_recv(pool_b.alloc().unwrap(), 1).unwrap();
    t.post_recv(pool_b.alloc().unwrap(), 2).unwrap();
    let target = t.address().to_bytes().unwrap();

    // X: job 0x77, rank 0, a plain entry (sends with JobID 0x77).
    let mut av_x = nic_a.open_av(av_attr(0x77, 0)).unwrap();
    let mut x = endpoint(&nic_a, &av_x, 0x77);
    let mut to_t = [0u64];
    av_x.insert(&target, 1, Some(&mut to_t), 0).unwrap();
    let sent = send_pattern(&mut x, &pool_a, to_t[0], THREE_PACKETS, 21);
    assert!(sent.is_none(), "X: {sent:?}");

    // Y: job 0x11, rank 0, an entry bound to an auth key of job 0x77 (sends with JobID 0x77).
    let mut av_y = nic_a.open_av(av_attr(0x11, FI_AV_AUTH_KEY)).unwrap();
    let k = av_y.insert_auth_key(&job_id_to_auth_key(0x77), 0).unwrap();
    let mut y = endpoint(&nic_a, &av_y, 0x11);
    let mut to_t = [k];
    av_y.insert(&target, 1, Some(&mut to_t), FI_AUTH_KEY)
        .unwrap();
    let sent = send_pattern(&mut y, &pool_a, to_t[0], THREE_PACKETS, 22);
    assert!(sent.is_none(), "Y: {sent:?}");

    for seed in [21u8, 22] {
        let got = uet_tests::poll_one(&mut t)
            .unwrap_or_else(|| panic!("the message of seed {seed} was not delivered"));
        assert!(got.error.is_none(), "{:?}", got.error);
        assert_eq!(
            got.buffer.unwrap().to_vec().unwrap(),
            pattern(THREE_PACKETS, seed)
        );
    }
    drop((x, y, av_x, av_y, av_t));
}

/// Message ids count per PDC in 16 bits, so they wrap. A sender whose multi-packet message 0
/// was delivered, followed by 65,535 single-packet messages (ids 1 to 65,535, which the target
/// keeps no outcome for), sends its next multi-packet message with id 0 again: a new message,
/// delivered into the posted buffer, not taken for a late packet of the first one and
/// answered RC_OK with nothing delivered.
#[test]
fn a_multi_packet_message_whose_id_wrapped_around_is_delivered() {
    // NICs that refuse a message without a buffer (before interface 1.17, which holds it on
    // the unexpected list): the ids go by and the target keeps nothing of them.
    let refusing = |i| {
        let mut c = small_mtu(i);
        c.interface_minor = uet_regs::since::UNTAGGED_UNEXPECTED - 1;
        c
    };
    let fabric = Fabric::new();
    let mut a = Node::new(fabric.add_nic(refusing(0)).unwrap(), JOB, 8);
    let mut b = Node::new(fabric.add_nic(refusing(1)).unwrap(), JOB, 8);
    let to_b = a.insert(&b.addr());
    b.insert(&a.addr());
    b.post_recvs(1);
    a.send(to_b, &pattern(THREE_PACKETS, 1), 1);
    assert!(a.next_completion().expect("sent").error.is_none());
    let got = b.next_completion().expect("delivered");
    assert!(got.error.is_none(), "{:?}", got.error);
    // Ids 1 to 65,535: one packet each, refused (no buffer posted).
    for _ in 1..=u16::MAX {
        a.send(to_b, b"x", 2);
        let c = a.next_completion().expect("send completion");
        assert!(c.error.is_some(), "no buffer was posted");
    }
    // Id 0 again.
    b.post_recvs(1);
    a.send(to_b, &pattern(THREE_PACKETS, 3), 3);
    let sent = a.next_completion().expect("sent");
    assert!(sent.error.is_none(), "{:?}", sent.error);
    let got = b
        .next_completion()
        .expect("the message whose id wrapped is delivered");
    assert!(got.error.is_none(), "{:?}", got.error);
    assert_eq!(got.len, THREE_PACKETS);
    assert_eq!(
        got.buffer.unwrap().to_vec().unwrap(),
        pattern(THREE_PACKETS, 3)
    );
    assert_eq!(b.function.debug_counters().rx_duplicate_packets, 0);
}

/// A message of several packets reports its sender as the AV holds it when the last packet
/// completes the receive, not as it held it when the first arrived: an address inserted with
/// a user id meanwhile is the reported source.
#[test]
fn a_reassembled_message_reports_its_sender_as_the_av_holds_it_at_completion() {
    let (fabric, _a, mut b) = pair();
    let rx_pool = DmaPool::new(&b.nic, 1000, 1).unwrap();
    b.ep.post_recv(rx_pool.alloc().unwrap(), 1)
        .map_err(|(e, _)| e)
        .unwrap();
    let msg = pattern(1000, 7);
    let mut f = Forger::new(&b);
    let p0 = f.packet(3, &msg, 0, 500);
    let p1 = f.packet(3, &msg, 500, 1000);
    fabric.inject_frame(&p0);
    assert!(b.next_completion().is_none(), "not complete yet");
    // The forged sender (10.1.0.200, initiator 0x5555) joins B's AV with a user id.
    let sender = uet_tests::forged(b.ep.address(), |s| {
        s.fabric_addr = "10.1.0.200".parse().unwrap();
        s.initiator = 0x5555;
    });
    let mut user_id = [0xF00D];
    assert_eq!(
        b.av.insert(&sender, 1, Some(&mut user_id), uet_av::FI_AV_USER_ID)
            .unwrap(),
        1
    );
    fabric.inject_frame(&p1);
    let got = b.next_completion().expect("complete");
    assert!(got.error.is_none(), "{:?}", got.error);
    assert_eq!(got.src_addr, 0xF00D);
}
