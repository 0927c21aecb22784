//! Datapath descriptors as a host may write them, right or wrong: an endpoint created by hand
//! (ENDPOINT_CREATE, its rings in one DMA region the input writes) on a NIC whose driver runs
//! an endpoint of its own, with TX, RX and tagged RX descriptors of fuzzed fields (opcodes,
//! flags, lengths, buffer addresses in the region, past it or anywhere, destinations, tags,
//! groups), raw bytes anywhere in the rings and the completion ring, doorbells of any index
//! (the hand-made endpoint's, or of any handle but the driver's endpoint's), and messages
//! from the other NIC of the fabric to the hand-made endpoint between them. The admin-command, register and frame
//! targets reach the rings only through what the driver writes; a host is untrusted from the
//! NIC's side, and its descriptors are the datapath's way in.
//!
//! What must hold whatever was written: the simulated NIC never panics or hangs; it still
//! answers admin commands (IDENTIFY, and ENDPOINT_DESTROY of the hand-made endpoint); and
//! the driver's endpoint, which no descriptor of the input names, still exchanges a message
//! with the other NIC both ways, whole.
//!
//! Input: actions until the input ends (at most [`MAX_ACTIONS`]), each a kind byte and its
//! operands.

use crate::Input;
use uet_av::NicAvTable;
use uet_fwif::admin::EndpointCreateBody;
use uet_fwif::datapath::{
    Completion, RxDescriptor, TaggedRxDescriptor, TxDescriptor, TxOpcode, COMPLETION_BYTES,
    RX_DESCRIPTOR_BYTES, TAGGED_RX_DESCRIPTOR_BYTES, TX_DESCRIPTOR_BYTES,
};
use uet_fwif::{AdminCommand, Opcode};
use uet_regs::{
    QueueDoorbell, Reg, RegisterAccess, CQ_DOORBELL, RXQ_DOORBELL, TRXQ_DOORBELL, TXQ_DOORBELL,
};
use uet_sim::{Fabric, NicConfig};
use uet_tests::{nic_addr, pattern, Node};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromZeros, IntoBytes};

/// Actions per input.
pub const MAX_ACTIONS: usize = 48;

/// log2 of the hand-made endpoint's TX, RX and tagged RX rings.
const RING_LOG2: u8 = 4;
/// log2 of its completion ring: room for every descriptor of the three rings.
const CQ_LOG2: u8 = 6;
/// Where its rings lie in the region, and where the buffers the descriptors name start.
const TX_AT: usize = 0;
const RX_AT: usize = 1024;
const TRX_AT: usize = 2048;
const CQ_AT: usize = 4096;
const DATA_AT: usize = 8192;
/// Bytes of the region.
const REGION_BYTES: usize = 64 * 1024;
/// The hand-made endpoint's initiator id: no endpoint of the driver's has it.
const INITIATOR: u32 = 0x7717;
/// The job of every endpoint.
const JOB: u32 = 1;

/// The hand-made endpoint: its handle, and its address for the other NIC's AV.
struct RawEndpoint {
    handle: u16,
    address: [u8; 32],
}

/// A buffer address: in the region's data area most of the time (at any offset, so a
/// buffer may run past the region's end), in a ring, or anywhere.
fn buffer(input: &mut Input<'_>, iova: u64) -> u64 {
    match input.below(8) {
        0..=4 => iova + DATA_AT as u64 + u64::from(input.u16()) % (REGION_BYTES - DATA_AT) as u64,
        5 => iova + u64::from(input.u16()) % DATA_AT as u64,
        6 => 0,
        _ => input.u64(),
    }
}

/// A length: short most of the time, sometimes past a packet or the region, or any.
fn length(input: &mut Input<'_>) -> u32 {
    match input.below(4) {
        0 | 1 => u32::from(input.u8()),
        2 => u32::from(input.u16()),
        _ => input.u32(),
    }
}

/// Create the hand-made endpoint on `node`'s NIC, bound to its AV, rings in the region at
/// `iova`.
fn create(node: &mut Node, iova: u64) -> RawEndpoint {
    let av = node.av.nic_mut().table_handle().unwrap_or(0);
    let body = EndpointCreateBody {
        tx_ring: U64::new(iova + TX_AT as u64),
        rx_ring: U64::new(iova + RX_AT as u64),
        cq_ring: U64::new(iova + CQ_AT as u64),
        job_id: U32::new(JOB),
        initiator: U32::new(INITIATOR),
        ri_count: U16::new(4),
        tx_log2: RING_LOG2,
        rx_log2: RING_LOG2,
        cq_log2: CQ_LOG2,
        flags: 0,
        trx_log2: RING_LOG2,
        rx_ctx_cnt: 0,
        trx_ring: U64::new(iova + TRX_AT as u64),
        tx_ctx_cnt: 0,
        reserved: [0; 7],
    };
    let mut cmd = AdminCommand::new_zeroed();
    cmd.opcode = Opcode::EndpointCreate as u8;
    cmd.handle = U32::new(av);
    cmd.body[..core::mem::size_of::<EndpointCreateBody>()].copy_from_slice(body.as_bytes());
    let r = match node.nic.admin_raw(cmd) {
        Ok(r) => r,
        Err(e) => panic!("ENDPOINT_CREATE of the hand-made endpoint: {e}"),
    };
    let mut address = *node.ep.address();
    address.pid_on_fep = (r.result0 >> 16) as u16;
    address.ri_start = r.result1 as u16;
    address.ri_count = (r.result1 >> 16) as u16;
    address.initiator = INITIATOR;
    RawEndpoint {
        handle: r.result0 as u16,
        address: address
            .to_bytes()
            .unwrap_or_else(|e| panic!("its address: {e}")),
    }
}

/// Read every completion `node`'s endpoint has; errors must say what went wrong.
fn drain(node: &mut Node) {
    for _ in 0..64 {
        match node.ep.poll() {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

/// The tag of the messages the driver's endpoint and the other NIC exchange at the end: no
/// descriptor the input writes whole carries it (their match bits are below 256), so the
/// messages the hand-made endpoint sent the other NIC, which may have taken its receives or
/// wait on its unexpected list, are not taken for these. Raw bytes may still write it over a
/// descriptor's match bits: a receive such a message takes is posted again.
const EXCHANGE_TAG: u64 = 0xFEED_0000_0000_F00D;

/// `from` sends `data` to `dest` (its `fi_addr_t`) tagged [`EXCHANGE_TAG`]; `to` takes it
/// whole with a tagged receive, posted again each time a message of the hand-made endpoint
/// with that tag takes it (at most as many as the input's doorbells handed the NIC), and
/// `from`'s send completes.
fn exchange(from: &mut Node, to: &mut Node, dest: u64, data: &[u8], what: &str) {
    drain(to);
    to.trecv(EXCHANGE_TAG, 0, 8);
    from.tsend(dest, data, EXCHANGE_TAG, 9);
    let mut delivered = false;
    let mut sent = false;
    let mut others = 0usize;
    let mut rounds = 4;
    while rounds > 0 {
        rounds -= 1;
        while let Some(ev) = from.next_completion() {
            sent |= ev.context == 9 && ev.error.is_none();
        }
        while let Some(ev) = to.next_completion() {
            if ev.context != 8 || delivered {
                continue;
            }
            let whole = match (&ev.error, &ev.buffer) {
                (None, Some(b)) => ev.tag == EXCHANGE_TAG && b.to_vec().is_ok_and(|v| v == data),
                _ => false,
            };
            if whole {
                delivered = true;
            } else if others < MAX_ACTIONS << RING_LOG2 {
                others += 1;
                to.trecv(EXCHANGE_TAG, 0, 8);
                rounds = rounds.max(2);
            }
        }
    }
    assert!(
        delivered && sent,
        "{what}: sent {sent}, delivered {delivered} ({others} other messages took its receive)"
    );
}

/// Run the target on `data`.
pub fn run(data: &[u8]) {
    play(data);
}

/// [`run`], giving back the completions in the hand-made endpoint's completion ring after
/// the input's actions: what the NIC made of its descriptors.
fn play(data: &[u8]) -> Vec<Completion> {
    let mut input = Input::new(data);
    let fabric = Fabric::new();
    let (fa, fb) = match (
        fabric.add_nic(NicConfig::new(nic_addr(0))),
        fabric.add_nic(NicConfig::new(nic_addr(1))),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => panic!("two NICs on a fabric: {e}"),
    };
    let mut a = Node::new(fa.clone(), JOB, 16);
    let mut b = Node::new(fb, JOB, 16);
    let a_to_b = a.insert(&b.addr());
    let b_to_a = b.insert(&a.addr());
    let region = a.nic.map_dma(REGION_BYTES).expect("map the rings' region");
    let iova = region.region().iova();
    let raw = create(&mut a, iova);
    let b_to_raw = b.insert(&raw.address);
    let own = a.ep.handle();
    // Producer indices as the input last rang them, so a doorbell moves on from there.
    let mut tails = [0u16; 3];

    for _ in 0..MAX_ACTIONS {
        if input.is_empty() {
            break;
        }
        let slot = usize::from(input.below(1 << RING_LOG2));
        match input.below(8) {
            0 => {
                let mut d = TxDescriptor::new_zeroed();
                d.opcode = match input.below(6) {
                    0 => TxOpcode::TaggedSend as u8,
                    1 => TxOpcode::Write as u8,
                    2 => TxOpcode::Read as u8,
                    3 => input.u8(),
                    _ => TxOpcode::Send as u8,
                };
                d.flags = if input.below(4) == 0 { input.u8() } else { 0 };
                d.len = U32::new(length(&mut input));
                d.buf = U64::new(buffer(&mut input, iova));
                d.dest = U64::new(match input.below(4) {
                    0 => input.u64(),
                    1 => u64::from(input.u8()),
                    _ => a_to_b,
                });
                d.context = U64::new(input.u64());
                d.match_bits = U64::new(u64::from(input.u8()));
                d.remote_offset = U64::new(u64::from(input.u16()));
                let at = TX_AT + slot * TX_DESCRIPTOR_BYTES;
                let _ = region.region().write_bytes(at, d.as_bytes());
            }
            1 => {
                let mut d = RxDescriptor::new_zeroed();
                d.buf = U64::new(buffer(&mut input, iova));
                d.len = U32::new(length(&mut input));
                d.flags = U32::new(u32::from(input.below(4)));
                d.context = U64::new(input.u64());
                d.min_free = U32::new(u32::from(input.u8()));
                d.group = U32::new(u32::from(input.below(2)));
                let at = RX_AT + slot * RX_DESCRIPTOR_BYTES;
                let _ = region.region().write_bytes(at, d.as_bytes());
            }
            2 => {
                let mut d = TaggedRxDescriptor::new_zeroed();
                d.buf = U64::new(buffer(&mut input, iova));
                d.len = U32::new(length(&mut input));
                d.flags = U32::new(u32::from(input.below(8)));
                d.context = U64::new(input.u64());
                d.tag = U64::new(u64::from(input.u8()));
                d.ignore = U64::new(if input.below(2) == 0 { 0 } else { u64::MAX });
                d.group = U32::new(u32::from(input.below(2)));
                d.claim = U64::new(input.u64());
                let at = TRX_AT + slot * TAGGED_RX_DESCRIPTOR_BYTES;
                let _ = region.region().write_bytes(at, d.as_bytes());
            }
            3 => {
                // Raw bytes anywhere in the rings, the completion ring included.
                let at = usize::from(input.u16()) % DATA_AT;
                let len = usize::from(input.below(64));
                let bytes = input.bytes(len);
                let _ = region.region().write_bytes(at, bytes);
            }
            4 | 5 => {
                let reg: Reg<QueueDoorbell> = match input.below(4) {
                    0 => TXQ_DOORBELL,
                    1 => RXQ_DOORBELL,
                    2 => TRXQ_DOORBELL,
                    _ => CQ_DOORBELL,
                };
                // Any endpoint's but the driver's, whose rings are the driver's to ring: an
                // index the driver did not write would hand the NIC descriptors it never
                // posted, which the driver then reports as the device's protocol error.
                let endpoint = match input.below(8) {
                    0 => input.u16(),
                    _ => raw.handle,
                };
                let endpoint = if endpoint == own {
                    raw.handle
                } else {
                    endpoint
                };
                let ring = match reg.info.offset {
                    o if o == TXQ_DOORBELL.info.offset => Some(0),
                    o if o == RXQ_DOORBELL.info.offset => Some(1),
                    o if o == TRXQ_DOORBELL.info.offset => Some(2),
                    _ => None,
                };
                let index = match (input.below(4), ring) {
                    (0, _) | (_, None) => input.u16(),
                    (_, Some(r)) => {
                        let step = 1 + u16::from(input.below(4));
                        tails[r] = (tails[r] + step) % (1 << RING_LOG2);
                        tails[r]
                    }
                };
                fa.write(
                    reg,
                    QueueDoorbell::new()
                        .with_endpoint(endpoint)
                        .with_index(index),
                );
            }
            6 => {
                // A message from the other NIC to the hand-made endpoint: untagged or
                // tagged, one packet or several.
                drain(&mut b);
                let len = match input.below(4) {
                    0 => 4096,
                    _ => usize::from(input.u8()) + 1,
                };
                let Some(mut buf) = b.pool.alloc() else {
                    continue;
                };
                let len = len.min(buf.capacity());
                if buf.fill(&pattern(len, input.u8())).is_err() {
                    continue;
                }
                let posted = if input.below(2) == 0 {
                    b.ep.post_send(b_to_raw, buf, 7, 7)
                } else {
                    let tag = u64::from(input.u8());
                    b.ep.post_tsend(b_to_raw, buf, tag, 7, 7)
                };
                if let Err((e, _)) = posted {
                    assert!(!e.to_string().is_empty());
                }
            }
            _ => {
                drain(&mut a);
                drain(&mut b);
            }
        }
    }

    drain(&mut a);
    drain(&mut b);
    let completions = (0..1usize << CQ_LOG2)
        .filter_map(|i| {
            region
                .region()
                .read_obj::<Completion>(CQ_AT + i * COMPLETION_BYTES)
                .ok()
        })
        .collect();
    let mut identify = AdminCommand::new_zeroed();
    identify.opcode = Opcode::Identify as u8;
    identify.body[..8].copy_from_slice(&(iova + DATA_AT as u64).to_le_bytes());
    identify.body[8..12].copy_from_slice(&4096u32.to_le_bytes());
    if let Err(e) = a.nic.admin_raw(identify) {
        panic!("IDENTIFY after the fuzzed descriptors: {e}");
    }
    let mut destroy = AdminCommand::new_zeroed();
    destroy.opcode = Opcode::EndpointDestroy as u8;
    destroy.handle = U32::new(u32::from(raw.handle));
    if let Err(e) = a.nic.admin_raw(destroy) {
        assert!(
            !matches!(
                e,
                uet_driver::DriverError::AdminTimeout { .. }
                    | uet_driver::DriverError::AdminDeviceFatal { .. }
            ),
            "ENDPOINT_DESTROY of the hand-made endpoint went unanswered: {e}"
        );
    }
    exchange(
        &mut a,
        &mut b,
        a_to_b,
        &pattern(300, 1),
        "the driver's endpoint to B",
    );
    exchange(
        &mut b,
        &mut a,
        b_to_a,
        &pattern(3000, 2),
        "B to the driver's endpoint",
    );
    completions
}

/// A TX descriptor of each opcode to the other NIC, receives of each kind, and a message from
/// the other NIC to the hand-made endpoint, each rung in.
pub fn seeds() -> Vec<Vec<u8>> {
    // Each action: its ring slot, its kind, then its operands in the order `run` reads them.
    // A buffer at the data area's start (pick 0, offset 0), 512 bytes long (pick 2, u16).
    const BUFFER: [u8; 3] = [0, 0, 0];
    const LEN_512: [u8; 3] = [2, 0, 2];
    // A doorbell (kind 4) of ring `which` of the hand-made endpoint (pick 2), the index one on
    // (pick 1, step 1).
    let ring = |seed: &mut Vec<u8>, which: u8| seed.extend_from_slice(&[0, 4, which, 2, 1, 0]);
    let mut out = Vec::new();
    // TX (kind 0) in slot 0, the one the first doorbell hands the NIC: opcode pick (4 SEND,
    // 0 TAGGED_SEND, 1 WRITE, 2 READ), no flags (pick 1), 64 bytes (pick 0, u8), the buffer,
    // to B (pick 2), the seed's number as the context, match bits (a tag or memory key; 0
    // for a SEND, which has none), remote offset; rung; then the completions drained (kind 7).
    for (context, pick) in (0u64..).zip([4u8, 0, 1, 2]) {
        let mut seed = vec![0, 0, pick, 1, 0, 64];
        seed.extend_from_slice(&BUFFER);
        seed.push(2);
        seed.extend_from_slice(&context.to_le_bytes());
        seed.extend_from_slice(&[if pick == 4 { 0 } else { 5 }, 0, 0]);
        ring(&mut seed, 0);
        seed.extend_from_slice(&[0, 7]);
        out.push(seed);
    }
    // RX (kind 1): the buffer, 512 bytes, no flags, context 0, min_free 0, group 0; rung; a
    // message from B (kind 6) of 100 bytes (pick 1, 99 + 1), pattern 3, untagged.
    let mut seed = vec![0, 1];
    seed.extend_from_slice(&BUFFER);
    seed.extend_from_slice(&LEN_512);
    seed.push(0);
    seed.extend_from_slice(&[0; 8]);
    seed.extend_from_slice(&[0, 0]);
    ring(&mut seed, 1);
    seed.extend_from_slice(&[0, 6, 1, 99, 3, 0]);
    out.push(seed);
    // Tagged RX (kind 2): the buffer, 512 bytes, no flags, context 0, tag 0x42, ignore none,
    // group 0, claim 0; rung; a tagged message from B with tag 0x42.
    let mut seed = vec![0, 2];
    seed.extend_from_slice(&BUFFER);
    seed.extend_from_slice(&LEN_512);
    seed.push(0);
    seed.extend_from_slice(&[0; 8]);
    seed.extend_from_slice(&[0x42, 0, 0]);
    seed.extend_from_slice(&[0; 8]);
    ring(&mut seed, 2);
    seed.extend_from_slice(&[0, 6, 1, 99, 3, 1, 0x42]);
    out.push(seed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_fwif::datapath::LocalStatus;

    /// A well-formed SEND of the hand-made endpoint to B's driver endpoint waits on B's
    /// unexpected list and takes the next receive B posts: the exchange after the input still
    /// finds its own message in a receive of its own, and the input is no failure.
    #[test]
    fn a_send_of_the_hand_made_endpoint_to_bs_endpoint_is_no_failure() {
        // Slot 0, TX; SEND (pick 4), no flags, 64 bytes at the data area's start, to B,
        // context 0, no match bits, remote offset 0; the TX doorbell one on; drained.
        let mut input = vec![0, 0, 4, 1, 0, 64, 0, 0, 0, 2];
        input.extend_from_slice(&[0; 8]);
        input.extend_from_slice(&[0, 0, 0]);
        input.extend_from_slice(&[0, 4, 0, 2, 1, 0]);
        input.extend_from_slice(&[0, 7]);
        run(&input);
        // Three of them, then a message of B's own to the hand-made endpoint.
        let mut three = Vec::new();
        for context in 0u8..3 {
            let mut send = input.clone();
            send[10] = context;
            send[0] = context;
            three.extend_from_slice(&send);
        }
        three.extend_from_slice(&[0, 6, 1, 99, 3, 0]);
        run(&three);
    }

    /// A TAGGED_SEND of the hand-made endpoint to B's driver endpoint whose match bits the
    /// input's raw bytes set to the tag of the closing exchange takes the receive B posts for
    /// it: B still takes the driver endpoint's message in a receive of its own, and the input
    /// is no failure.
    #[test]
    fn a_send_of_the_hand_made_endpoint_with_the_exchange_tag_is_no_failure() {
        // Slot 0, TX; TAGGED_SEND (pick 0), no flags, 64 bytes at the data area's start, to
        // B, context 0, match bits 0, remote offset 0.
        let mut input = vec![0, 0, 0, 1, 0, 64, 0, 0, 0, 2];
        input.extend_from_slice(&[0; 8]);
        input.extend_from_slice(&[0, 0, 0]);
        // Raw bytes (kind 3): the exchange's tag over the descriptor's match bits.
        let match_bits = TX_AT + core::mem::offset_of!(TxDescriptor, match_bits);
        input.extend_from_slice(&[0, 3]);
        input.extend_from_slice(&(match_bits as u16).to_le_bytes());
        input.push(8);
        input.extend_from_slice(&EXCHANGE_TAG.to_le_bytes());
        // The TX doorbell one on; drained.
        input.extend_from_slice(&[0, 4, 0, 2, 1, 0]);
        input.extend_from_slice(&[0, 7]);
        run(&input);
    }

    /// Each TX seed hands the NIC the well-formed descriptor it writes: the hand-made
    /// endpoint's completion ring then holds a completion of that descriptor, of its opcode
    /// and with its context, not one of a slot the seed left zero or of a malformed
    /// descriptor.
    #[test]
    fn each_tx_seed_posts_a_descriptor_of_its_opcode() {
        let opcodes = [
            TxOpcode::Send,
            TxOpcode::TaggedSend,
            TxOpcode::Write,
            TxOpcode::Read,
        ];
        for (i, (seed, opcode)) in seeds().iter().zip(opcodes).enumerate() {
            let completions = play(seed);
            let context = u64::try_from(i).expect("a seed's number");
            assert!(
                completions.iter().any(|c| c.opcode == opcode as u8
                    && c.context.get() == context
                    && c.status != LocalStatus::BadDescriptor as u8),
                "seed {i} ({opcode:?}): {:?}",
                completions
                    .iter()
                    .filter(|c| c.kind != 0)
                    .map(|c| (c.opcode, c.context.get(), c.status))
                    .collect::<Vec<_>>()
            );
        }
    }
}
