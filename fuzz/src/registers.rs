//! BAR0 accesses as a host may make them, right or wrong, under a driver that runs the
//! function: any register (mostly the map's, at its width; sometimes any offset, inside BAR0
//! or past it), any value (often a small one, as ring indices and handles are), bursts into
//! the AV write window, reads, and driver calls (AV inserts and removes, sends) between them.
//! A host is untrusted from the NIC's side, and BAR0 is the one way in that the admin-command
//! and frame targets do not reach: the doorbells, the AV write window and doorbell, the
//! admin queue registers, `DEV_CTRL` and `FUNCTION_RESET`.
//!
//! The MSI-X table and pending bits (BAR0 past the registers) are reached too, with the host
//! side of the function between the accesses (triggers given and taken, Message Control's
//! Enable and Function Mask, a vector raised), `CQ_ARM` of the driver's endpoint and
//! `ADMIN_ARM` of the admin completion ring.
//!
//! What must hold whatever was written: the simulated NIC never panics; the table reads back
//! what was written to it, and Message Control what the host set (`MsixModel`); a vector is
//! held pending only while it cannot be sent; each host action and table access sends
//! exactly the messages the capability says (PCI Local Bus Specification 3.0, §6.8.2: a
//! vector raised while it can be sent, a pending one once its masks clear), to its trigger
//! alone; the driver that ran the function closes without a panic or a hang, whatever state
//! the function was left in; and a driver that opens the function after it (its function
//! reset first) finds it as new: a message from the other NIC of the fabric reaches it, and
//! its answer comes back.
//!
//! Input: accesses until the input ends (at most [`MAX_ACCESSES`]), each a kind byte and
//! its operands.

use crate::Input;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;
use uet_regs::pci::{
    MSIX_CONTROL_ENABLE, MSIX_CONTROL_FUNCTION_MASK, MSIX_ENTRY_BYTES, MSIX_PBA_OFFSET,
    MSIX_TABLE_OFFSET, MSIX_VECTORS, MSIX_VECTOR_MASKED,
};
use uet_regs::{AdminArm, CqArm, Mmio, Width, BAR0_SIZE, REGISTERS};
use uet_sim::{Fabric, NicConfig, SimFunction};
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
    let triggers: Vec<Trigger> = (0..TRIGGERS).map(|_| Trigger::new()).collect();
    let mut msix = MsixModel::default();

    for _ in 0..MAX_ACCESSES {
        if input.is_empty() {
            break;
        }
        match input.below(13) {
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
                let width = match input.below(2) {
                    0 => Width::W32,
                    _ => Width::W64,
                };
                match width {
                    Width::W32 => fa.write32(offset, v as u32),
                    Width::W64 => fa.write64(offset, v),
                }
                msix.written(offset, width, v);
                msix.check(&fa, "a write anywhere");
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
            9 => {
                if let Some(mut buffer) = a.pool.alloc() {
                    if buffer.fill(b"under test").is_ok() {
                        let _ = a.ep.post_send(to_b, buffer, 7, 0);
                    }
                }
                let _ = a.ep.poll();
                let _ = b.ep.poll();
            }
            // The MSI-X table and pending bits, at any width, read or written.
            10 => msix_access(&mut input, &fa, &mut msix, &triggers),
            // The host side of the function: triggers, Message Control, a vector raised.
            11 => msix_host(&mut input, &fa, &mut msix, &triggers),
            // The driver's endpoint, or the admin completion ring, armed for an interrupt,
            // with a vector in the table or not.
            _ => {
                let vector = u16::from(input.below(MSIX_VECTORS as u8 + 4));
                let bad_arms = |f: &SimFunction| {
                    let d = f.debug_counters();
                    d.bad_cq_arms + d.bad_admin_arms
                };
                let bad_before = bad_arms(&fa);
                let register = match input.below(4) {
                    0 => {
                        let arm = AdminArm::new().with_vector(vector);
                        fa.write32(uet_regs::ADMIN_ARM.offset(), arm.into_bits());
                        "ADMIN_ARM"
                    }
                    k => {
                        let endpoint = match k {
                            1 => u16::from(input.u8()),
                            _ => a.ep.handle(),
                        };
                        let arm = CqArm::new().with_endpoint(endpoint).with_vector(vector);
                        fa.write32(uet_regs::CQ_ARM.offset(), arm.into_bits());
                        "CQ_ARM"
                    }
                };
                if vector >= MSIX_VECTORS {
                    assert_eq!(
                        bad_arms(&fa),
                        bad_before + 1,
                        "{register} of vector {vector}, outside the table, is not refused"
                    );
                }
                msix.check(&fa, register);
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

/// Triggers the host may give vectors (several vectors may share one).
const TRIGGERS: usize = 3;

/// A stand-in for an eventfd, as the simulator's own tests use: the function writes each
/// message (8 bytes) to one end of a socket pair, and they are read from the other.
struct Trigger {
    tx: UnixStream,
    rx: UnixStream,
}

impl Trigger {
    fn new() -> Trigger {
        let (tx, rx) = UnixStream::pair().expect("a socket pair");
        rx.set_nonblocking(true).expect("a non-blocking socket");
        Trigger { tx, rx }
    }

    /// Messages received since the last call.
    fn messages(&self) -> u64 {
        use std::io::Read;
        let mut buf = [0u8; 512];
        let mut bytes = 0;
        while let Ok(n @ 1..) = (&self.rx).read(&mut buf) {
            bytes += n as u64;
        }
        bytes / 8
    }
}

const VECTORS: usize = MSIX_VECTORS as usize;

/// What the host has made of the function's MSI-X block: the table as written (address,
/// upper address, data, vector control per vector, as they read back), Message Control's two
/// bits, and the trigger (an index of the eventfds) each vector has.
struct MsixModel {
    table: [[u32; 4]; VECTORS],
    enabled: bool,
    function_mask: bool,
    triggers: [Option<usize>; VECTORS],
}

impl Default for MsixModel {
    fn default() -> Self {
        MsixModel {
            table: [[0, 0, 0, MSIX_VECTOR_MASKED]; VECTORS],
            enabled: false,
            function_mask: false,
            triggers: [None; VECTORS],
        }
    }
}

impl MsixModel {
    /// A BAR0 write of `value` at `offset`: the table fields it covers, when it is a
    /// naturally aligned access inside the table.
    fn written(&mut self, offset: u32, width: Width, value: u64) {
        let bytes = match width {
            Width::W32 => 4,
            Width::W64 => 8,
        };
        let end = MSIX_TABLE_OFFSET + MSIX_VECTORS as u32 * MSIX_ENTRY_BYTES;
        if !(MSIX_TABLE_OFFSET..end).contains(&offset) || !offset.is_multiple_of(bytes) {
            return;
        }
        let rel = offset - MSIX_TABLE_OFFSET;
        let entry = &mut self.table[(rel / MSIX_ENTRY_BYTES) as usize];
        let first = (rel % MSIX_ENTRY_BYTES / 4) as usize;
        for (k, dword) in [value as u32, (value >> 32) as u32]
            .into_iter()
            .take(bytes as usize / 4)
            .enumerate()
        {
            entry[first + k] = match first + k {
                0 => dword & !3,
                3 => dword & MSIX_VECTOR_MASKED,
                _ => dword,
            };
        }
    }

    fn masked(&self, v: usize) -> bool {
        self.table[v][3] & MSIX_VECTOR_MASKED != 0
    }

    /// Whether a message of vector `v` goes out at once rather than being held.
    fn sendable(&self, v: usize) -> bool {
        self.enabled && !self.function_mask && !self.masked(v)
    }

    fn control(&self) -> u16 {
        let mut c = 0;
        if self.enabled {
            c |= MSIX_CONTROL_ENABLE;
        }
        if self.function_mask {
            c |= MSIX_CONTROL_FUNCTION_MASK;
        }
        c
    }

    /// The function agrees: every table field reads back as written, Message Control is
    /// what the host set, and a vector is pending only while it cannot be sent.
    fn check(&self, f: &SimFunction, what: &str) {
        for v in 0..VECTORS {
            for (k, &want) in self.table[v].iter().enumerate() {
                let at = MSIX_TABLE_OFFSET + v as u32 * MSIX_ENTRY_BYTES + 4 * k as u32;
                assert_eq!(
                    f.read32(at),
                    want,
                    "after {what}: dword {k} of MSI-X entry {v} reads back wrong"
                );
            }
        }
        assert_eq!(
            f.msix_control(),
            self.control(),
            "after {what}: Message Control"
        );
        let pending = pending_bits(f);
        for v in (0..VECTORS).filter(|&v| pending >> v & 1 != 0) {
            assert!(
                !self.sendable(v),
                "after {what}: vector {v} held pending although it can be sent"
            );
        }
    }
}

/// The pending bits (the table has 64 vectors: one word).
fn pending_bits(f: &SimFunction) -> u64 {
    const _: () = assert!(VECTORS == 64);
    f.read64(MSIX_PBA_OFFSET)
}

/// Messages each trigger received since it was last read.
fn messages(triggers: &[Trigger]) -> Vec<u64> {
    triggers.iter().map(Trigger::messages).collect()
}

/// Run `act`, which changes the host's view of MSI-X as `model` now says and raises
/// `raised`, if any, and check that it sent exactly the messages the capability says: a
/// vector pending before, or raised, that can now be sent goes to its trigger once and is no
/// longer pending; one that cannot stays (or becomes, when raised while MSI-X is enabled)
/// pending.
fn sends_as_the_model_says(
    f: &SimFunction,
    model: &MsixModel,
    triggers: &[Trigger],
    raised: Option<usize>,
    what: &str,
    act: impl FnOnce(),
) {
    messages(triggers);
    let before = pending_bits(f);
    act();
    let mut want = vec![0u64; triggers.len()];
    let mut pending = 0u64;
    for v in 0..VECTORS {
        let held = before >> v & 1 != 0;
        let raised_now = raised == Some(v) && model.enabled;
        if !(held || raised_now) {
            continue;
        }
        if model.sendable(v) {
            if let Some(t) = model.triggers[v] {
                want[t] += 1;
            }
        } else {
            pending |= 1 << v;
        }
    }
    assert_eq!(messages(triggers), want, "{what}: messages per trigger");
    assert_eq!(pending_bits(f), pending, "{what}: pending bits");
    model.check(f, what);
}

/// A read or write of the MSI-X table or pending bits: a field of a vector (or just past the
/// table or the bits), at either width, aligned or not.
fn msix_access(
    input: &mut Input<'_>,
    f: &SimFunction,
    model: &mut MsixModel,
    triggers: &[Trigger],
) {
    let offset = match input.below(4) {
        0 => MSIX_PBA_OFFSET + u32::from(input.below(24)),
        _ => {
            let v = u32::from(input.below(MSIX_VECTORS as u8 + 2));
            MSIX_TABLE_OFFSET + v * MSIX_ENTRY_BYTES + u32::from(input.below(16))
        }
    };
    let width = match input.below(2) {
        0 => Width::W32,
        _ => Width::W64,
    };
    if input.below(3) == 0 {
        let _ = match width {
            Width::W32 => u64::from(f.read32(offset)),
            Width::W64 => f.read64(offset),
        };
        model.check(f, "an MSI-X read");
        return;
    }
    let v = value(input);
    model.written(offset, width, v);
    let what = format!("an MSI-X write of {v:#x} at {offset:#x} ({width:?})");
    sends_as_the_model_says(f, model, triggers, None, &what, || match width {
        Width::W32 => f.write32(offset, v as u32),
        Width::W64 => f.write64(offset, v),
    });
}

/// What a host does to the function's MSI-X besides BAR0 (VFIO's `SET_IRQS`, configuration
/// space's Message Control): give or take a vector's trigger, set Enable and Function Mask,
/// raise a vector, or take every trigger and reset the table.
fn msix_host(input: &mut Input<'_>, f: &SimFunction, model: &mut MsixModel, triggers: &[Trigger]) {
    let vector = u16::from(input.below(MSIX_VECTORS as u8 + 2));
    let v = usize::from(vector);
    match input.below(6) {
        0 | 1 => {
            let trigger = usize::from(input.below(TRIGGERS as u8 + 1));
            let fd = triggers.get(trigger).map(|t| t.tx.as_fd());
            if v < VECTORS {
                model.triggers[v] = fd.is_some().then_some(trigger);
                model.table[v][3] = if fd.is_some() { 0 } else { MSIX_VECTOR_MASKED };
                if model.triggers.iter().any(Option::is_some) {
                    model.enabled = true;
                } else {
                    model.enabled = false;
                    model.function_mask = false;
                }
            }
            let what = format!("vector {vector} given trigger {trigger}");
            sends_as_the_model_says(f, model, triggers, None, &what, || {
                let r = f.set_msix_eventfd(vector, fd);
                assert_eq!(r.is_ok(), v < VECTORS, "{what}: {r:?}");
            });
        }
        2 => {
            let control = match input.below(4) {
                0 => 0,
                1 => MSIX_CONTROL_ENABLE,
                2 => MSIX_CONTROL_ENABLE | MSIX_CONTROL_FUNCTION_MASK,
                _ => input.u16(),
            };
            model.enabled = control & MSIX_CONTROL_ENABLE != 0;
            model.function_mask = control & MSIX_CONTROL_FUNCTION_MASK != 0;
            let what = format!("Message Control {control:#06x}");
            sends_as_the_model_says(f, model, triggers, None, &what, || {
                f.set_msix_control(control)
            });
        }
        3 | 4 => {
            let what = format!("vector {vector} raised");
            let raised = (v < VECTORS).then_some(v);
            sends_as_the_model_says(f, model, triggers, raised, &what, || f.raise_msix(vector));
        }
        _ => {
            *model = MsixModel::default();
            f.clear_msix();
            messages(triggers);
            assert_eq!(pending_bits(f), 0, "pending bits after clear_msix");
            model.check(f, "clear_msix");
        }
    }
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
/// disabled, reset and enabled; an MSI-X vector given a trigger, raised, masked and unmasked,
/// and armed on the endpoint; and the driver's own calls between them.
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

    // MSI-X: vector 3 given a trigger and raised; masked in its table entry, raised (held
    // pending), unmasked (sent); held by the function mask and let go; the endpoint armed
    // with it before a send, and with a vector outside the table; every trigger taken.
    let mut msix = Vec::new();
    msix.extend_from_slice(&[11, 3, 0, 0, 11, 3, 3]);
    let control_of_3 = |masked: u8| [10, 1, 3, 12, 0, 1, 0, masked];
    msix.extend_from_slice(&control_of_3(1));
    msix.extend_from_slice(&[11, 3, 3]);
    msix.extend_from_slice(&control_of_3(0));
    msix.extend_from_slice(&[11, 0, 2, 2, 11, 3, 3, 11, 0, 2, 1]);
    msix.extend_from_slice(&[12, 3, 1, 9, 12, 67, 1, 9, 11, 0, 5]);

    vec![window, doorbells, admin, reset, msix, Vec::new()]
}
