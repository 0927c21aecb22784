//! BAR0 accesses as a host may make them, right or wrong, under a driver that runs the
//! function: any register (mostly the map's, at its width; sometimes any offset, inside BAR0
//! or past it), any value (often a small one, as ring indices and handles are), bursts into
//! the AV write window, reads, and driver calls (AV inserts and removes, sends) between them.
//! A host is untrusted from the NIC's side, and BAR0 is the one way in that the admin-command
//! and frame targets do not reach: the doorbells, the AV write window and doorbell, the
//! admin queue registers, `DEV_CTRL` and `FUNCTION_RESET`.
//!
//! What must hold whatever was written: the simulated NIC never panics; the driver that ran
//! the function closes without a panic or a hang, whatever state the function was left in;
//! and a driver that opens the function after it (its function reset first) finds it as new:
//! a message from the other NIC of the fabric reaches it, and its answer comes back.
//!
//! Input: accesses until the input ends (at most [`MAX_ACCESSES`]), each a kind byte and
//! its operands.

use crate::Input;
use std::time::Duration;
use uet_regs::{Mmio, Width, BAR0_SIZE, REGISTERS};
use uet_sim::{Fabric, NicConfig};
use uet_tests::{nic_addr, Node};

/// Accesses per input.
pub const MAX_ACCESSES: usize = 64;

/// The offset of the first AV write window register (`AV_WRITE_ENTRY_0`).
const WINDOW: u32 = uet_regs::AV_WRITE_ENTRY_0.info.offset;

/// How long the driver under test waits for an admin command before it gives up: a
/// function the accesses disabled never answers, and the driver's close must not take the
/// default's seconds per command.
const ADMIN_TIMEOUT: Duration = Duration::from_millis(2);

/// A value for a register: small (a ring index, a handle, a count) half of the time.
fn value(input: &mut Input<'_>) -> u64 {
    match input.below(4) {
        0 | 1 => u64::from(input.u8()),
        2 => u64::from(input.u32()),
        _ => input.u64(),
    }
}

/// Run the target on `data`.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let fabric = Fabric::new();
    let (fa, fb) = match (
        fabric.add_nic(NicConfig::new(nic_addr(0))),
        fabric.add_nic(NicConfig::new(nic_addr(1))),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => panic!("two NICs on a fabric: {e}"),
    };
    let mut a = Node::new(fa.clone(), 1, 16);
    let mut b = Node::new(fb, 1, 16);
    let to_b = a.insert(&b.addr());
    b.insert(&a.addr());
    a.post_recvs(2);
    a.nic.set_admin_timeout(ADMIN_TIMEOUT);

    for _ in 0..MAX_ACCESSES {
        if input.is_empty() {
            break;
        }
        match input.below(10) {
            // A register of the map, at its width.
            0..=3 => {
                let reg = &REGISTERS[usize::from(input.u8()) % REGISTERS.len()];
                let v = value(&mut input);
                match reg.width {
                    Width::W32 => fa.write32(reg.offset, v as u32),
                    Width::W64 => fa.write64(reg.offset, v),
                }
            }
            // Any offset, 4-byte aligned, inside BAR0 or just past it.
            4 => {
                let offset = (u32::from(input.u16()) % (BAR0_SIZE + 0x100)) & !3;
                let v = value(&mut input);
                match input.below(2) {
                    0 => fa.write32(offset, v as u32),
                    _ => fa.write64(offset, v),
                }
            }
            // Reads have no side effects to break, but they must answer.
            5 => {
                let offset = (u32::from(input.u16()) % (BAR0_SIZE + 0x100)) & !3;
                let _ = fa.read32(offset);
                let _ = fa.read64(offset);
            }
            // A write-combined burst into the AV write window (a whole entry and its
            // doorbell are nine words), from its start or a little off it.
            6 => {
                let words: Vec<u64> = (0..=input.below(10)).map(|_| value(&mut input)).collect();
                let offset = WINDOW + u32::from(input.below(4)) * 8;
                fa.write64_burst(offset, &words);
            }
            // The driver goes on using the function.
            7 => {
                let _ = a.av.insert(&b.addr(), 1, None, 0);
            }
            8 => {
                let _ = a.av.remove(&[u64::from(input.below(4))], 0);
            }
            _ => {
                if let Some(mut buffer) = a.pool.alloc() {
                    if buffer.fill(b"under test").is_ok() {
                        let _ = a.ep.post_send(to_b, buffer, 7, 0);
                    }
                }
                let _ = a.ep.poll();
                let _ = b.ep.poll();
            }
        }
    }

    // The driver that ran the function closes, whatever the accesses left.
    drop(a);
    // One opened after it resets the function and finds it working.
    let mut a = Node::new(fa, 1, 16);
    let to_a = b.insert(&a.addr());
    let to_b = a.insert(&b.addr());
    a.post_recvs(1);
    b.post_recvs(1);
    exchange(&mut b, to_a, &mut a, "from the other NIC");
    exchange(&mut a, to_b, &mut b, "back");
}

/// A message from `from` to `to` (`dest` in `from`'s AV): its send and its receive both
/// complete without an error.
fn exchange(from: &mut Node, dest: u64, to: &mut Node, what: &str) {
    from.send(dest, what.as_bytes(), 1);
    match from.next_completion() {
        Some(ev) => assert!(ev.error.is_none(), "send {what}: {:?}", ev.error),
        None => panic!("the send {what} never completed"),
    }
    match to.next_completion() {
        Some(ev) => assert!(ev.error.is_none(), "receive {what}: {:?}", ev.error),
        None => panic!("the message {what} never arrived"),
    }
}

/// Seeds: an AV entry written through the window and rung; an AV invalidate doorbell; the
/// queue doorbells at small values; the admin queue registers moved and rung; the function
/// disabled, reset and enabled; and the driver's own calls between them.
pub fn seeds() -> Vec<Vec<u8>> {
    let reg = |name: &str| REGISTERS.iter().position(|r| r.name == name).unwrap_or(0) as u8;
    // Kind 0 (a register of the map) with a small value: [0, register, 0, value].
    let small = |out: &mut Vec<u8>, name: &str, v: u8| out.extend_from_slice(&[0, reg(name), 0, v]);
    let mut window = Vec::new();
    // A burst of nine words into the window (kind 6, nine words), each a small value.
    window.extend_from_slice(&[6, 8]);
    for w in [1u8, 0x0a, 0, 0, 1, 2, 0, 0, 1] {
        window.extend_from_slice(&[0, w]);
    }
    window.push(0);
    small(&mut window, "AV_INVALIDATE_DOORBELL", 1);
    window.push(7);

    let mut doorbells = Vec::new();
    for name in [
        "TXQ_DOORBELL",
        "RXQ_DOORBELL",
        "CQ_DOORBELL",
        "TRXQ_DOORBELL",
    ] {
        small(&mut doorbells, name, 1);
        doorbells.push(9);
    }

    let mut admin = Vec::new();
    small(&mut admin, "ADMIN_QUEUE_SIZE", 4);
    small(&mut admin, "ADMIN_SQ_DOORBELL", 3);
    small(&mut admin, "ADMIN_CQ_HEAD", 9);
    admin.push(7);

    let mut reset = Vec::new();
    small(&mut reset, "DEV_CTRL", 0);
    reset.push(7);
    small(&mut reset, "FUNCTION_RESET", 1);
    small(&mut reset, "DEV_CTRL", 1);
    reset.extend_from_slice(&[8, 0, 9]);

    vec![window, doorbells, admin, reset, Vec::new()]
}
