//! Admin commands as a host may write them, right or wrong: any opcode (mostly known ones),
//! flags, object handle (mostly one the NIC knows) and body, with DMA addresses in the body
//! that point into a mapped buffer of fuzzed bytes (AV_WRITE records, auth keys, endpoint
//! parameters) or anywhere. The simulated NIC answers every command with a status, whatever
//! it holds, and the queue takes the next command: an IDENTIFY after them all succeeds.
//!
//! Input: the buffer's length (two bytes) and contents, then commands until the input ends
//! (at most [`MAX_COMMANDS`]).

use crate::Input;
use uet_av::NicAvTable;
use uet_driver::admin::AdminResult;
use uet_driver::DriverError;
use uet_fwif::{AdminCommand, Opcode};
use uet_sim::{Fabric, NicConfig, OLDEST_INTERFACE_MINOR};
use uet_tests::{nic_addr, Node};
use zerocopy::little_endian::U32;
use zerocopy::FromZeros;

/// Commands per input.
pub const MAX_COMMANDS: usize = 32;

/// Bytes of the DMA buffer commands may point into.
const DMA_BYTES: usize = 8192;

/// Every opcode the NIC knows.
const OPCODES: [Opcode; 20] = [
    Opcode::Identify,
    Opcode::EndpointCreate,
    Opcode::EndpointDestroy,
    Opcode::ContextCreate,
    Opcode::AvCreate,
    Opcode::AvDestroy,
    Opcode::AvWrite,
    Opcode::AvInvalidate,
    Opcode::AvRead,
    Opcode::MrRegister,
    Opcode::MrDeregister,
    Opcode::CountersRead,
    Opcode::AuthKeyAdd,
    Opcode::AuthKeyRemove,
    Opcode::AuthKeySource,
    Opcode::AuthKeyRead,
    Opcode::EndpointAuthKeys,
    Opcode::AvWritePeers,
    Opcode::RecvCancel,
    Opcode::EndpointPeer,
];

fn answered(opcode: u8, r: Result<AdminResult, DriverError>) {
    if let Err(e) = r {
        assert!(
            !matches!(
                e,
                DriverError::AdminTimeout { .. } | DriverError::AdminDeviceFatal { .. }
            ),
            "opcode {opcode:#04x} went unanswered: {e}"
        );
        assert!(!e.to_string().is_empty());
    }
}

/// Run the target on `data`, on a NIC of the current interface version.
pub fn run(data: &[u8]) {
    run_at(uet_regs::INTERFACE_MINOR, data);
}

/// The target `admin_commands_any_interface`: the first byte picks the NIC's interface
/// version, from [`OLDEST_INTERFACE_MINOR`] to the current one (modulo their number), and
/// the rest is an `admin_commands` input. A NIC of an older interface answers commands and
/// fields it does not have with a status too, and the driver drives it.
pub fn run_any_interface(data: &[u8]) {
    let (&pick, rest) = data.split_first().unwrap_or((&0, &[]));
    let versions = uet_regs::INTERFACE_MINOR - OLDEST_INTERFACE_MINOR + 1;
    run_at(OLDEST_INTERFACE_MINOR + pick % versions, rest);
}

/// Seeds of `admin_commands_any_interface`: each of [`seeds`] at every interface version.
pub fn seeds_any_interface() -> Vec<Vec<u8>> {
    let versions = uet_regs::INTERFACE_MINOR - OLDEST_INTERFACE_MINOR + 1;
    (0..versions)
        .flat_map(|v| {
            seeds().into_iter().map(move |seed| {
                let mut input = vec![v];
                input.extend_from_slice(&seed);
                input
            })
        })
        .collect()
}

/// Run the target on `data` on a NIC of interface 1.`interface_minor`.
fn run_at(interface_minor: u8, data: &[u8]) {
    let mut input = Input::new(data);
    let fabric = Fabric::new();
    let config = NicConfig {
        interface_minor,
        ..NicConfig::new(nic_addr(0))
    };
    let function = match fabric.add_nic(config) {
        Ok(f) => f,
        Err(e) => panic!("a NIC of interface 1.{interface_minor}: {e}"),
    };
    let mut node = Node::new(function, 1, 16);
    let dma = node.nic.map_dma(DMA_BYTES).expect("map the command buffer");
    let fill_len = usize::from(input.u16()) % DMA_BYTES;
    let fill = input.bytes(fill_len);
    dma.region()
        .write_bytes(0, fill)
        .expect("fill the command buffer");
    let iova = dma.region().iova();
    let av = node.av.nic_mut().table_handle().unwrap_or(1);
    let ep = u32::from(node.ep.handle());

    for _ in 0..MAX_COMMANDS {
        if input.is_empty() {
            break;
        }
        let mut raw = AdminCommand::new_zeroed();
        raw.opcode = match input.below(8) {
            0 => input.u8(),
            _ => OPCODES[usize::from(input.below(OPCODES.len() as u8))] as u8,
        };
        if input.below(8) == 0 {
            raw.flags = input.u8();
        }
        raw.handle = U32::new(match input.below(6) {
            0 | 1 => av,
            2 => ep,
            3 => u32::from(input.u8()),
            _ => input.u32(),
        });
        let body = input.bytes(raw.body.len());
        raw.body[..body.len()].copy_from_slice(body);
        if input.below(2) == 0 {
            // A DMA address into the buffer, at one of the body's 8-byte-aligned words.
            let at = usize::from(input.below(7)) * 8;
            let addr = iova + u64::from(input.u16()) % DMA_BYTES as u64;
            raw.body[at..at + 8].copy_from_slice(&addr.to_le_bytes());
        }
        let opcode = raw.opcode;
        answered(opcode, node.nic.admin_raw(raw));
    }

    let mut identify = AdminCommand::new_zeroed();
    identify.opcode = Opcode::Identify as u8;
    identify.body[..8].copy_from_slice(&iova.to_le_bytes());
    identify.body[8..12].copy_from_slice(&(DMA_BYTES as u32).to_le_bytes());
    if let Err(e) = node.nic.admin_raw(identify) {
        panic!("IDENTIFY after the fuzzed commands: {e}");
    }
}

/// One command of a seed: an opcode of [`OPCODES`], the handle of the node's AV table, the
/// body, and a DMA address at body offset 0 pointing `offset` bytes into the buffer.
fn seed_command(out: &mut Vec<u8>, opcode: Opcode, body: &[u8; 56], offset: u16) {
    let Some(i) = OPCODES.iter().position(|&o| o == opcode) else {
        return;
    };
    out.extend_from_slice(&[1, i as u8, 1, 0]);
    out.extend_from_slice(body);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&offset.to_le_bytes());
}

/// An AV_WRITE of two records, an AV_READ of the table, an AV_WRITE_PEERS of two addresses,
/// an AV_INVALIDATE of one index, an AUTH_KEY_ADD and a COUNTERS_READ, each with its buffer in the fuzzed bytes,
/// then a RECV_CANCEL of the node's endpoint.
pub fn seeds() -> Vec<Vec<u8>> {
    use std::net::{IpAddr, Ipv4Addr};
    use uet_fwif::address::{caps, AddressingMode};
    use uet_fwif::{AvWriteRecord, NicAvEntry, UetAddress};
    use zerocopy::IntoBytes;
    let mut buffer = Vec::new();
    for index in [0u32, 5] {
        let peer = UetAddress {
            caps: caps::HPC,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: index as u16,
            fabric_addr: IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)),
            ri_start: 1,
            ri_count: 2,
            initiator: index,
        };
        let mut record = AvWriteRecord::new_zeroed();
        record.index = U32::new(index);
        record.entry = NicAvEntry::for_peer(&peer, 1);
        buffer.extend_from_slice(record.as_bytes());
    }
    let records_len = buffer.len();
    for index in [8u16, 9] {
        let peer = UetAddress {
            caps: caps::HPC,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: index,
            fabric_addr: IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)),
            ri_start: 1,
            ri_count: 2,
            initiator: u32::from(index),
        };
        buffer.extend_from_slice(&peer.to_bytes().unwrap_or([0; 32]));
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(buffer.len() as u16).to_le_bytes());
    out.extend_from_slice(&buffer);
    let body = |len: u32, a: u32, b: u32| {
        let mut body = [0u8; 56];
        body[8..12].copy_from_slice(&len.to_le_bytes());
        body[12..16].copy_from_slice(&a.to_le_bytes());
        body[16..20].copy_from_slice(&b.to_le_bytes());
        body
    };
    let record_bytes = records_len as u32 / 2;
    seed_command(&mut out, Opcode::AvWrite, &body(2 * record_bytes, 2, 0), 0);
    seed_command(&mut out, Opcode::AvRead, &body(16 * 64, 0, 16), 1024);
    seed_command(
        &mut out,
        Opcode::AvWritePeers,
        &body(64, 8, 2),
        records_len as u16,
    );
    seed_command(&mut out, Opcode::AvInvalidate, &body(0, 5, 1), 0);
    seed_command(&mut out, Opcode::AuthKeyAdd, &body(4, 1, 0), 0);
    seed_command(&mut out, Opcode::CountersRead, &body(4096, 0, 0), 2048);
    // RECV_CANCEL of the node's endpoint (handle pick 2), RX ring, context 0, no DMA address.
    if let Some(i) = OPCODES.iter().position(|&o| o == Opcode::RecvCancel) {
        let mut cancel = [0u8; 56];
        cancel[8] = uet_fwif::admin::RECV_CANCEL_RING_RX;
        out.extend_from_slice(&[1, i as u8, 1, 2]);
        out.extend_from_slice(&cancel);
        out.push(1);
    }
    vec![out]
}
