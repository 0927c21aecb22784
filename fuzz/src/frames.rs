//! Frames off the wire into a NIC with a live endpoint (posted receives and tagged receives,
//! the sender in its AV): raw bytes, and fuzzed UET payloads (PDS, SES and what follows)
//! inside well-formed Ethernet, IP and UDP headers from the peer, so the fuzzer spends its
//! time past the checksums. Nothing panics or hangs; each completion the endpoints report is
//! read; and afterwards the peer's next message is still answered: its send completes.
//!
//! Input: frames until the input ends (at most [`MAX_FRAMES`]): a kind byte, then for raw
//! bytes a length (two bytes) and the frame; for a UET payload the UDP source port (two
//! bytes), a length (two bytes) and the payload. [`seeds`] gives inputs made of the payloads
//! of real messages.

use crate::Input;
use uet_sim::{frame, Fabric};
use uet_tests::{fabric, CaptureBuffer, Node};

/// Frames per input.
pub const MAX_FRAMES: usize = 16;

/// Two NICs: `rx` with receives posted and the sender in its AV, `tx` the sender; and the
/// sender's `fi_addr_t` for `rx`, `rx`'s for the sender.
fn pair() -> (Fabric, Node, Node, u64) {
    let (f, functions) = fabric(2);
    let mut it = functions.into_iter();
    let (Some(a), Some(b)) = (it.next(), it.next()) else {
        panic!("a fabric of two NICs has fewer");
    };
    let mut rx = Node::new(a, 1, 8);
    let mut tx = Node::new(b, 1, 8);
    rx.insert(&tx.addr());
    let to_rx = tx.insert(&rx.addr());
    rx.post_recvs(4);
    rx.trecv(0x77, 0, 500);
    rx.trecv(0, u64::MAX, 501);
    (f, rx, tx, to_rx)
}

/// Read every completion either endpoint has; errors must say what went wrong.
fn drain(node: &mut Node) {
    for _ in 0..64 {
        match node.ep.poll() {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

/// Run the target on `data`.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let (fabric, mut rx, mut tx, to_rx) = pair();
    let (src_ip, dst_ip) = (tx.nic.fabric_addr(), rx.nic.fabric_addr());
    for _ in 0..MAX_FRAMES {
        if input.is_empty() {
            break;
        }
        if input.below(4) == 0 {
            let len = usize::from(input.u16() % 2048);
            fabric.inject_frame(input.bytes(len));
        } else {
            let src_port = input.u16();
            let len = usize::from(input.u16() % 2048);
            let payload = input.bytes(len);
            let built = frame::build(
                [2, 0, 0, 0, 0, 2],
                [2, 0, 0, 0, 0, 1],
                src_ip,
                dst_ip,
                src_port,
                payload,
            );
            if let Ok(f) = built {
                fabric.inject_frame(&f);
            }
        }
        drain(&mut rx);
        drain(&mut tx);
    }
    // The sender's next message is answered.
    rx.post_recvs(1);
    tx.send(to_rx, b"after the fuzzed frames", 0xAF);
    fabric.run_until_idle();
    let mut completed = false;
    for _ in 0..64 {
        match tx.ep.poll() {
            Ok(Some(ev)) if ev.context == 0xAF => {
                completed = true;
                break;
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                completed = true;
                break;
            }
        }
    }
    assert!(completed, "a send after the fuzzed frames never completed");
    drain(&mut rx);
}

/// Inputs made of the UET payloads of real traffic between the two NICs: a message, a
/// tagged message and a long message in several packets, each as one fuzz input (one frame
/// per packet, in order).
pub fn seeds() -> Vec<Vec<u8>> {
    let (fabric, mut rx, mut tx, to_rx) = pair();
    let captured = CaptureBuffer::default();
    if fabric.capture_to_writer(captured.clone()).is_err() {
        return Vec::new();
    }
    tx.send(to_rx, b"hello", 1);
    tx.tsend(to_rx, b"tagged hello", 0x77, 2);
    tx.send(to_rx, &[0x5A; 3000], 3);
    fabric.run_until_idle();
    drain(&mut rx);
    drain(&mut tx);
    fabric.stop_capture();
    let mut one = Vec::new();
    let mut seeds = Vec::new();
    for record in captured.records() {
        let Ok(d) = frame::parse(&record) else {
            continue;
        };
        if d.dst_ip != rx.nic.fabric_addr() {
            continue;
        }
        let mut input = vec![1u8];
        input.extend_from_slice(&d.src_port.to_le_bytes());
        input.extend_from_slice(&(d.payload.len() as u16).to_le_bytes());
        input.extend_from_slice(d.payload);
        one.extend_from_slice(&input);
        seeds.push(input);
    }
    seeds.push(one);
    seeds
}
