//! The simulator's packet capture: a libpcap file of every frame that crosses the fabric, with
//! every header field where Wireshark's UET dissector expects it.

use std::io::Write;
use std::path::PathBuf;
use uet_fwif::datapath::CompletionKind;
use uet_sim::frame::{internet_checksum, GATEWAY_MAC};
use uet_sim::pcap;
use uet_tests::{fabric, nic_addr, Node};

const JOB: u32 = 0x00AB_CDEF;

fn tmp(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// Two nodes in one job, each in the other's AV (fi_addr 0).
fn pair() -> (uet_sim::Fabric, Node, Node) {
    let (fabric, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut a = Node::new(it.next().unwrap(), JOB, 4);
    let mut b = Node::new(it.next().unwrap(), JOB, 4);
    assert_eq!(a.insert(&b.addr()), 0);
    assert_eq!(b.insert(&a.addr()), 0);
    (fabric, a, b)
}

// Offsets in an IPv4 UET frame.
const IP: usize = 14;
const UDP: usize = IP + 20;
const PDS: usize = UDP + 8;
const SES: usize = PDS + 12;
const PAYLOAD: usize = SES + 44;

#[test]
fn capture_of_a_send_decodes_field_by_field() {
    let (fabric, mut a, mut b) = pair();
    let path = tmp("capture-send.pcap");
    fabric.capture_to_file(&path).expect("start capture");
    assert!(fabric.capture_status().active);
    b.post_recvs(1);
    let payload = b"hello, ultra ethernet";
    let data = 0x0123_4567_89AB_CDEF;
    let mut buf = a.pool.alloc().unwrap();
    buf.fill(payload).unwrap();
    a.ep.post_send(0, buf, 7, data).map_err(|(e, _)| e).unwrap();
    let send = a.next_completion().expect("send completion");
    assert!(send.error.is_none(), "{:?}", send.error);
    let recv = b.next_completion().expect("receive completion");
    assert_eq!(recv.kind, CompletionKind::Recv);
    fabric.stop_capture();
    let status = fabric.capture_status();
    assert!(!status.active);
    assert_eq!((status.frames, status.write_errors), (2, 0));
    assert_eq!(status.path.as_deref(), Some(path.as_path()));

    let cap = pcap::read_file(&path).expect("a valid capture");
    assert_eq!(
        (cap.snaplen, cap.linktype, cap.big_endian),
        (65535, 1, false)
    );
    let raw = std::fs::read(&path).unwrap();
    assert_eq!(&raw[..4], &0xa1b2_c3d4u32.to_le_bytes());
    assert_eq!(cap.records.len(), 2, "one request, one response");
    let (req, resp) = (&cap.records[0], &cap.records[1]);
    assert_eq!((req.ts_us(), resp.ts_us()), (0, 1), "the simulated clock");
    assert_eq!(req.orig_len as usize, req.data.len());

    let (ip_a, ip_b) = (nic_addr(0), nic_addr(1));
    let (std::net::IpAddr::V4(ip_a), std::net::IpAddr::V4(ip_b)) = (ip_a, ip_b) else {
        panic!("IPv4 test fabric");
    };
    let mac_a = a.function.config().unwrap().mac;
    let mac_b = b.function.config().unwrap().mac;
    let target = *b.ep.address();
    let initiator = a.ep.address().initiator;

    // ---- the request -------------------------------------------------------------------
    let f = &req.data;
    assert_eq!(f.len(), PAYLOAD + payload.len());
    // Ethernet.
    assert_eq!(&f[0..6], &GATEWAY_MAC);
    assert_eq!(&f[6..12], &mac_a);
    assert_eq!(be16(f, 12), 0x0800);
    // IPv4.
    assert_eq!(f[IP], 0x45);
    assert_eq!(usize::from(be16(f, IP + 2)), f.len() - IP);
    assert_eq!(be16(f, IP + 6), 0x4000, "DF, not fragmented");
    assert_eq!(f[IP + 8], 64, "TTL");
    assert_eq!(f[IP + 9], 17, "protocol UDP");
    assert_eq!(internet_checksum(&f[IP..UDP]), 0, "header checksum");
    assert_ne!(be16(f, IP + 10), 0);
    assert_eq!(&f[IP + 12..IP + 16], &ip_a.octets());
    assert_eq!(&f[IP + 16..IP + 20], &ip_b.octets());
    // UDP.
    let spdcid = be16(f, PDS + 8);
    assert_eq!(be16(f, UDP), 0xC000 | spdcid, "entropy source port");
    assert_eq!(be16(f, UDP + 2), 4793);
    assert_eq!(usize::from(be16(f, UDP + 4)), f.len() - UDP);
    assert_ne!(be16(f, UDP + 6), 0, "checksum present");
    assert!(uet_sim::frame::parse(f).is_ok(), "UDP checksum verifies");
    // PDS RUD request: type 2, next_hdr 3 (SES standard request), flags SYN.
    let prologue = be16(f, PDS);
    assert_eq!(prologue >> 11, 2, "RUD_REQ");
    assert_eq!((prologue >> 7) & 0xF, 3, "next_hdr: request std");
    assert_eq!(prologue & 0x7F, 0x04, "SYN only");
    assert_eq!(be16(f, PDS + 2), 0, "clear_psn_offset");
    assert_eq!(be32(f, PDS + 4), uet_sim::pds::START_PSN);
    assert_eq!(spdcid, 1, "the initiator's first PDC");
    assert_eq!(be16(f, PDS + 10), 0, "DPDCID unknown until the ACK");
    // SES standard request.
    assert_eq!(f[SES], 0x05, "SEND");
    assert_eq!(
        f[SES + 1],
        0x08 | 0x04 | 0x02 | 0x01,
        "REL|HD|EOM|SOM, version 0"
    );
    assert_eq!(be16(f, SES + 2), 0, "message id");
    assert_eq!(be32(f, SES + 4), JOB, "ri_generation 0, JobID");
    assert_eq!(be16(f, SES + 8), target.pid_on_fep);
    assert_eq!(be16(f, SES + 10), target.ri_start, "resource index");
    assert_eq!(be64(f, SES + 12), 0, "buffer_offset");
    assert_eq!(be32(f, SES + 20), initiator);
    assert_eq!(be64(f, SES + 24), 0, "match bits");
    assert_eq!(be64(f, SES + 32), data, "header_data");
    assert_eq!(be32(f, SES + 40) as usize, payload.len(), "request_length");
    assert_eq!(&f[PAYLOAD..], payload);

    // ---- the response ------------------------------------------------------------------
    let g = &resp.data;
    assert_eq!(g.len(), PDS + 12 + 12);
    assert_eq!(&g[0..6], &GATEWAY_MAC);
    assert_eq!(&g[6..12], &mac_b);
    assert_eq!(be16(g, 12), 0x0800);
    assert_eq!(internet_checksum(&g[IP..UDP]), 0);
    assert_eq!(&g[IP + 12..IP + 16], &ip_b.octets());
    assert_eq!(&g[IP + 16..IP + 20], &ip_a.octets());
    assert_eq!(be16(g, UDP), be16(f, UDP), "back to the request's port");
    assert_eq!(be16(g, UDP + 2), 4793);
    assert_eq!(usize::from(be16(g, UDP + 4)), g.len() - UDP);
    assert!(uet_sim::frame::parse(g).is_ok());
    // PDS ACK: type 7, next_hdr 4 (SES response), flags 0.
    let prologue = be16(g, PDS);
    assert_eq!(prologue >> 11, 7, "ACK");
    assert_eq!((prologue >> 7) & 0xF, 4, "next_hdr: response");
    assert_eq!(prologue & 0x7F, 0);
    assert_eq!(be32(g, PDS + 4), uet_sim::pds::START_PSN, "cack_psn");
    assert_ne!(be16(g, PDS + 8), 0, "the target's PDC");
    assert_eq!(be16(g, PDS + 10), spdcid, "DPDCID = the initiator's PDC");
    // SES response: default response, RC_OK, the request's message id and JobID.
    let s = PDS + 12;
    assert_eq!(g[s], 0x00, "list 0, opcode default response");
    assert_eq!(g[s + 1], 0x01, "version 0, RC_OK");
    assert_eq!(be16(g, s + 2), 0, "message id");
    assert_eq!(be32(g, s + 4), JOB);
    assert_eq!(be32(g, s + 8) as usize, payload.len(), "modified_length");
    let _ = std::fs::remove_file(&path);
}

/// Run the same traffic on a fresh fabric and return the capture's bytes.
fn captured_run(name: &str) -> Vec<u8> {
    let (fabric, mut a, mut b) = pair();
    let path = tmp(name);
    fabric.capture_to_file(&path).unwrap();
    b.post_recvs(3);
    a.post_recvs(1);
    for i in 0..3 {
        a.send(0, format!("message {i}").as_bytes(), i);
    }
    b.send(0, b"reply", 9);
    // Rejected traffic is captured too: a frame for an unknown port and a corrupted frame.
    let bytes = std::fs::read(&path).unwrap();
    let good = pcap::parse(&bytes).unwrap().records[0].data.clone();
    let mut corrupted = good.clone();
    let n = corrupted.len();
    corrupted[n - 1] ^= 0xFF;
    fabric.inject_frame(&corrupted);
    fabric.inject_frame(&[0u8; 20]);
    fabric.stop_capture();
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    bytes
}

#[test]
fn captures_are_reproducible_and_include_rejected_frames() {
    let one = captured_run("capture-repro-1.pcap");
    let two = captured_run("capture-repro-2.pcap");
    assert_eq!(one, two, "same traffic, same bytes");
    let cap = pcap::parse(&one).unwrap();
    // 4 sends -> 4 requests + 4 responses, then the two injected frames.
    assert_eq!(cap.records.len(), 10);
    assert_eq!(cap.records[9].data, vec![0u8; 20]);
    assert!(uet_sim::frame::parse(&cap.records[8].data).is_err());
    for (k, r) in cap.records.iter().enumerate() {
        assert_eq!(r.ts_us(), k as u64);
    }
}

#[test]
fn stop_capture_ends_the_file_and_a_new_capture_restarts_the_clock() {
    let (fabric, mut a, mut b) = pair();
    b.post_recvs(2);
    let first = tmp("capture-first.pcap");
    let second = tmp("capture-second.pcap");
    fabric.capture_to_file(&first).unwrap();
    a.send(0, b"one", 1);
    fabric.stop_capture();
    fabric.stop_capture(); // harmless
    a.send(0, b"not captured", 2);
    fabric.capture_to_file(&second).unwrap();
    fabric.capture_to_file(&second).unwrap(); // restarting truncates
    b.send(0, b"three", 3);
    fabric.stop_capture();
    let one = pcap::read_file(&first).unwrap();
    let two = pcap::read_file(&second).unwrap();
    assert_eq!(one.records.len(), 2);
    assert_eq!(two.records.len(), 2);
    assert_eq!(two.records[0].ts_us(), 0);
    assert_eq!(fabric.capture_status().frames, 2);
    let _ = std::fs::remove_file(&first);
    let _ = std::fs::remove_file(&second);
}

#[test]
fn capture_to_a_bad_path_is_an_error_and_changes_nothing() {
    let (fabric, mut a, mut b) = pair();
    let dir = env!("CARGO_TARGET_TMPDIR");
    let err = fabric.capture_to_file(dir).unwrap_err();
    assert!(
        err.to_string().contains("cannot write packet capture to"),
        "{err}"
    );
    assert!(!fabric.capture_status().active);
    b.post_recvs(1);
    a.send(0, b"still works", 1);
    assert!(a.next_completion().unwrap().error.is_none());
}

/// Accepts `budget` bytes, then fails every write.
struct FailAfter {
    budget: usize,
}

impl Write for FailAfter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.budget == 0 {
            return Err(std::io::Error::other("disk full"));
        }
        let n = buf.len().min(self.budget);
        self.budget -= n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_error_stops_the_capture_but_never_the_fabric() {
    let (fabric, mut a, mut b) = pair();
    // Room for the header and part of the first frame.
    fabric
        .capture_to_writer(FailAfter { budget: 24 + 40 })
        .unwrap();
    b.post_recvs(4);
    for i in 0..4 {
        a.send(0, b"through a failing capture", i);
    }
    for _ in 0..4 {
        let ev = a.next_completion().expect("sends complete");
        assert!(ev.error.is_none());
        let ev = b.next_completion().expect("receives complete");
        assert!(ev.error.is_none());
    }
    let s = fabric.capture_status();
    assert!(!s.active, "the capture stopped");
    assert_eq!(s.write_errors, 1, "counted once, then no more writes");
    assert_eq!(s.frames, 0);
    assert!(s.last_error.unwrap().contains("disk full"));
    assert_eq!(s.path, None);
    // A writer that fails at once refuses to start.
    let err = fabric
        .capture_to_writer(FailAfter { budget: 0 })
        .unwrap_err();
    assert!(err.to_string().contains("writer"), "{err}");
}

#[test]
fn a_full_disk_is_reported_when_the_capture_starts() {
    let path = std::path::Path::new("/dev/full");
    if !path.exists() {
        return;
    }
    let (fabric, _a, _b) = pair();
    let err = fabric.capture_to_file(path).unwrap_err();
    assert!(err.to_string().contains("/dev/full"), "{err}");
    assert!(!fabric.capture_status().active);
}
