//! # uet-regs — BAR0 of the uet-nic UET NIC
//!
//! This crate is the register half of the datasheet. Every register the driver touches and the
//! simulator implements is defined here once, with its offset, width, reset value, access kind
//! and bit fields; [`REGISTERS`] lists them all, and `REGISTERS.md` beside this crate is
//! generated from that list (a test fails when the checked-in copy is stale).
//!
//! The in-memory contracts (admin queue, descriptors, AV entries) live in `uet-fwif`.
//!
//! ## Conventions
//!
//! * BAR0 is [`BAR0_SIZE`] (16 KiB): the registers in its first [`REGISTERS_SIZE`] bytes (all
//!   of BAR0 on a device older than interface 1.12), then the MSI-X table and pending bits
//!   ([`pci::MSIX_TABLE_OFFSET`], [`pci::MSIX_PBA_OFFSET`]). Little-endian, accessed with
//!   naturally aligned 32- or 64-bit transactions.
//! * No register has a read side effect: status that must be acknowledged is write-1-to-clear
//!   (W1C), so a spurious read (a debugger, `uetctl regs`) never changes device state.
//! * Writes to reserved bits are ignored; reserved bits read as zero.
//! * A read of an offset that holds no register returns all ones (a PCIe unsupported request)
//!   and a write to one is dropped; the simulator counts both.
//! * Write-only (WO) registers are doorbells and commands: they read as zero.
//!
//! ## Identity
//!
//! The model answers to PCI vendor `0xFFFE`, device `0x0001`. `0xFFFE` is not a PCI-SIG assigned
//! vendor ID; it marks this as an experimental device model. A real part carries its vendor's
//! assigned ID, and the driver matches on the [`ID`] register as well as on the interface
//! version in [`REVISION`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod map;
mod mmio;
pub mod pci;
mod reference;

pub use map::*;
pub use mmio::{read_registers, Mmio, RegisterAccess};
pub use reference::registers_markdown;

use core::marker::PhantomData;

/// Experimental PCI vendor ID of the reference model (not PCI-SIG assigned; see the crate docs).
pub const PCI_VENDOR_ID: u16 = 0xFFFE;
/// PCI device ID of the uet-nic reference model.
pub const PCI_DEVICE_ID: u16 = 0x0001;
/// Size of BAR0 in bytes: the registers in the first [`REGISTERS_SIZE`] bytes, then the
/// MSI-X table at [`pci::MSIX_TABLE_OFFSET`] and its pending-bit array at
/// [`pci::MSIX_PBA_OFFSET`], each in a 4 KiB page of its own, so that a host can map the
/// registers without them (vfio-pci keeps the MSI-X table for itself, PCI Local Bus
/// Specification 3.0 §6.8.2 advises the separation).
pub const BAR0_SIZE: u32 = 0x4000;
/// Bytes of BAR0 that hold the registers ([`REGISTERS`]), from offset 0.
pub const REGISTERS_SIZE: u32 = 0x1000;
/// Major version of the host interface (register map + `uet-fwif` layouts). A driver refuses a
/// device whose major version differs from its own.
pub const INTERFACE_MAJOR: u8 = 1;
/// Minor version of the host interface.
///
/// | minor | adds |
/// |---|---|
/// | 1 | `CAP_MAX_MSG`: messages longer than the MTU |
/// | 2 | tagged messages, RMA write/read, inject, memory regions, per-endpoint counters: `CAP_TAGGED`, `TRXQ_DOORBELL`, `RX_PERM_VIOLATION`, `RX_UNEXPECTED_OVERFLOW`, `RX_UNEXPECTED`; the 64-byte datapath completion |
/// | 3 | endpoint kinds and contexts: datagram (UUD) and passive endpoints, scalable endpoints (`rx_ctx_cnt`, `tx_ctx_cnt`, CONTEXT_CREATE, `CAP_EP.max_tx_ctx`/`max_rx_ctx` enforced), the control channel (resource index 0, `TX_FLAG_CONTROL`), the PidExhausted and RiExhausted statuses |
/// | 4 | `AV_INVALIDATE_DOORBELL`: invalidate one AV entry with a register write |
/// | 5 | auth keys: `CAP_AUTH_KEY`, AUTH_KEY_ADD, AUTH_KEY_REMOVE, AUTH_KEY_SOURCE, AUTH_KEY_READ, ENDPOINT_AUTH_KEYS; the AV entry's `AUTH_KEY` flag takes effect |
/// | 6 | multi-receive buffers (`FI_MULTI_RECV`): `RX_FLAG_MULTI_RECV` and `min_free` in the RX descriptor; `buf_offset`, `overflow` and the multi-receive flags in the completion |
/// | 7 | peer groups: `CAP_PEER_GROUPS`, AV_CREATE `max_group_id`, the group id in SEND/TAGGED_SEND requests (SES `buffer_offset`), `group` in the RX and tagged RX descriptors and the completion, the `BadGroup` local status, `TX_BAD_GROUP`, `RX_BAD_GROUP` |
/// | 8 | the AV write window: `AV_WRITE_ENTRY_0..7`, `AV_WRITE_DOORBELL`; the `AV_INVALIDATE_DROPS` and `AV_WRITE_DROPS` counters |
/// | 9 | AUTH_KEY_REMOVE's body: `AUTH_KEY_REMOVE_CHECK_OWNER` removes a slot only while the named AV table owns it with the named JobID |
/// | 10 | the AV entry's `MAX_MSG_MTU` flag (the peer takes messages of one MTU) the `MsgTooLong` local status of a longer send to such a peer, `TX_MSG_TOO_LONG` |
/// | 11 | ENDPOINT_CREATE refuses an initiator id that a live endpoint of the same JobID on the function holds (status `InitiatorInUse`): a target's FI_SOURCE tells senders apart by (fabric address, JobID, initiator) |
/// | 12 | completion interrupts: `CQ_ARM` asks for an MSI-X vector when an endpoint's completion ring holds a completion (the MSI-X capability and table, [`pci::MSIX_CAP`], are the PCI function's at every version) |
/// | 13 | AV_WRITE_PEERS: a run of AV entries written from the peers' UET addresses, which the NIC converts itself |
/// | 14 | RECV_CANCEL: a posted receive withdrawn, completing with the `Cancelled` local status |
/// | 15 | `ADMIN_ARM`: the admin completion ring raises an MSI-X vector |
/// | 16 | a send through an AV entry bound to an auth key whose slot was not granted to the sending endpoint (ENDPOINT_AUTH_KEYS) fails with the `KeyNotGranted` local status |
/// | 17 | untagged messages that arrive before their receive wait on the unexpected list |
/// | 18 | probes of the unexpected list: `TRX_FLAG_PEEK`, `TRX_FLAG_CLAIM`, `TRX_FLAG_DISCARD`, the `NoMessage` local status |
/// | 19 | RECV_CANCEL withdraws multi-receive buffers |
/// | 20 | connected endpoints: ENDPOINT_CREATE's `EP_FLAG_CONNECTED` and ENDPOINT_PEER; such an endpoint refuses data requests (RC_PERM_VIOLATION) from any sender but its peer |
///
/// The interface is pre-release: minor 2 changed the completion layout, minor 3 gave
/// reserved bytes of ENDPOINT_CREATE a meaning, minor 4 added `AV_INVALIDATE_DOORBELL`, minor
/// 5 auth keys, minor 6 gave reserved bytes of the RX descriptor and the completion a meaning,
/// minor 7 gave reserved bytes of AV_CREATE, both RX descriptors and the completion a meaning,
/// minor 8 added the AV write window, minor 9 gave AUTH_KEY_REMOVE a body (all zero: as
/// before), minor 10 defined a bit of the AV entry's flags and a local status, minor 11 a
/// refusal of ENDPOINT_CREATE, minor 12 added `CQ_ARM`, minor 13 the AV_WRITE_PEERS command,
/// minor 14 the RECV_CANCEL command and the `Cancelled` local status, minor 15 `ADMIN_ARM`,
/// minor 16 the `KeyNotGranted` local status, minor 17 the unexpected list for untagged
/// messages, minor 18 probes of the unexpected list,
/// minor 19 RECV_CANCEL of multi-receive buffers, minor 20 a bit of ENDPOINT_CREATE's flags
/// and the ENDPOINT_PEER command; a driver refuses a device older than the layouts it speaks.
pub const INTERFACE_MINOR: u8 = 20;

/// The interface minor version each feature a driver may gate on appeared in (the table of
/// [`INTERFACE_MINOR`]). A register's own version is [`RegInfo::since_minor`]; these name the
/// features that are more than a register: a command body, a bit of an AV entry.
pub mod since {
    /// `CAP_MAX_MSG`: messages longer than the MTU.
    pub const MULTI_PACKET_MESSAGES: u8 = 1;
    /// Tagged messages, RMA, inject, memory regions; the 64-byte datapath completion.
    pub const TAGGED_AND_RMA: u8 = 2;
    /// Datagram, passive and scalable endpoints; the control channel.
    pub const ENDPOINT_KINDS: u8 = 3;
    /// `AV_INVALIDATE_DOORBELL`.
    pub const AV_INVALIDATE_DOORBELL: u8 = 4;
    /// The auth-key table and commands; the AV entry's `AUTH_KEY` flag takes effect.
    pub const AUTH_KEYS: u8 = 5;
    /// Multi-receive buffers.
    pub const MULTI_RECV: u8 = 6;
    /// Peer groups.
    pub const PEER_GROUPS: u8 = 7;
    /// The AV write window (`AV_WRITE_ENTRY_0..7`, `AV_WRITE_DOORBELL`) and its counters.
    pub const AV_WRITE_WINDOW: u8 = 8;
    /// AUTH_KEY_REMOVE's body (`AUTH_KEY_REMOVE_CHECK_OWNER`); before, its bytes are reserved.
    pub const AUTH_KEY_REMOVE_CHECK_OWNER: u8 = 9;
    /// The AV entry's `MAX_MSG_MTU` flag, the `MsgTooLong` status and `TX_MSG_TOO_LONG`; before,
    /// the flag is an undefined bit that fails the entry's checks.
    pub const AV_ENTRY_MAX_MSG_MTU: u8 = 10;
    /// ENDPOINT_CREATE's `InitiatorInUse`: no two live endpoints of a JobID on one function
    /// share an initiator id; before, a duplicate is accepted and the FI_SOURCE of either
    /// endpoint's messages may name the other.
    pub const UNIQUE_INITIATORS: u8 = 11;
    /// AV_WRITE_PEERS (opcode 0x25): entries written from UET addresses; before, the opcode
    /// is unknown (InvalidOpcode).
    pub const AV_WRITE_PEERS: u8 = 13;
    /// RECV_CANCEL (opcode 0x13): a posted receive withdrawn, completing with the `Cancelled`
    /// local status; before, the opcode is unknown (InvalidOpcode) and a posted receive stays
    /// until a message takes it or its endpoint is destroyed.
    pub const RECV_CANCEL: u8 = 14;
    /// `ADMIN_ARM`: the admin completion ring raises an MSI-X vector; before, admin
    /// completions are polled.
    pub const ADMIN_ARM: u8 = 15;
    /// The send-side auth-key check: a send, tagged send, WRITE or READ through an AV entry
    /// bound to an auth key whose slot the sending endpoint (a context's: its scalable
    /// endpoint's) was not granted by ENDPOINT_AUTH_KEYS, and whose JobID is not the
    /// endpoint's own, completes with the `KeyNotGranted` local status and sends nothing
    /// (fi_av(3): an endpoint is configured with the AV's keys when it is enabled, and later
    /// keys do not reach it). Before, any key of the endpoint's AV is used.
    pub const TX_AUTH_KEY_GRANTS: u8 = 16;
    /// Untagged messages on the unexpected list: a SEND that finds no posted receive buffer
    /// is held in NIC memory, within `CAP_TAGGED`'s bounds, and answered RC_OK; the next
    /// receive posted for it takes it (`uet_fwif::datapath`, *Untagged messages before their
    /// receive*). Before, such a message is refused RC_UNDELIVERABLE (libfabric `FI_ENORX`
    /// at the sender).
    pub const UNTAGGED_UNEXPECTED: u8 = 17;
    /// Probes of the unexpected list: the tagged RX descriptor's `TRX_FLAG_PEEK`, `_CLAIM`
    /// and `_DISCARD` and its `claim`, and the `NoMessage` local status
    /// (`uet_fwif::datapath`, *Probing the unexpected list*; fi_tagged(3) `FI_PEEK`,
    /// `FI_CLAIM`, `FI_DISCARD`). Before, a tagged RX descriptor with a flag set completes
    /// `BadDescriptor`.
    pub const TAGGED_PROBE: u8 = 18;
    /// RECV_CANCEL withdraws a multi-receive buffer: one still in the RX ring, or the current
    /// one when no message is still arriving into it (`uet_fwif::admin`, *RECV_CANCEL*).
    /// Before, every multi-receive buffer is InProgress.
    pub const MULTI_RECV_CANCEL: u8 = 19;
    /// Connected endpoints: ENDPOINT_CREATE's `EP_FLAG_CONNECTED` and ENDPOINT_PEER (opcode
    /// 0x14). Such an endpoint refuses SEND, TAGGED_SEND, WRITE and READ requests, except
    /// those to its control channel, from every sender but the peer ENDPOINT_PEER names
    /// (RC_PERM_VIOLATION, libfabric `FI_EACCES` at the sender; `uet_fwif::admin`,
    /// *Connected endpoints*). Before, the flag is undefined (InvalidField), the opcode
    /// unknown (InvalidOpcode), and an endpoint takes data from any sender.
    pub const CONNECTED_PEER: u8 = 20;

    // Every feature named here is of the current interface or older.
    const _: () = assert!(CONNECTED_PEER <= crate::INTERFACE_MINOR);
}

/// Width of a register access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// 32-bit register.
    W32,
    /// 64-bit register.
    W64,
}

impl Width {
    /// Number of bytes the register occupies.
    pub const fn bytes(self) -> u32 {
        match self {
            Width::W32 => 4,
            Width::W64 => 8,
        }
    }
}

/// How the device treats reads and writes of a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read-only: writes are ignored.
    Ro,
    /// Read-write: defined bits take the written value.
    Rw,
    /// Write-1-to-clear: writing 1 to a defined bit clears it, writing 0 leaves it.
    W1c,
    /// Write-only (doorbells and commands): the write acts, reads return 0.
    Wo,
}

impl Access {
    /// The abbreviation used in the reference table.
    pub const fn abbrev(self) -> &'static str {
        match self {
            Access::Ro => "RO",
            Access::Rw => "RW",
            Access::W1c => "W1C",
            Access::Wo => "WO",
        }
    }
}

/// One bit field of a register.
#[derive(Clone, Copy, Debug)]
pub struct FieldInfo {
    /// Field name, as the `bitfield-struct` accessor spells it.
    pub name: &'static str,
    /// Lowest bit.
    pub lsb: usize,
    /// Number of bits.
    pub bits: usize,
    /// What the field means.
    pub doc: &'static str,
}

impl FieldInfo {
    /// A field at `lsb` of `bits` bits.
    pub const fn new(name: &'static str, lsb: usize, bits: usize, doc: &'static str) -> Self {
        FieldInfo {
            name,
            lsb,
            bits,
            doc,
        }
    }

    /// The bits of the register this field occupies.
    pub const fn mask(&self) -> u64 {
        let ones = if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        };
        ones << self.lsb
    }
}

/// Everything the datasheet says about one register.
#[derive(Clone, Copy, Debug)]
pub struct RegInfo {
    /// Register name, as the constant is spelled.
    pub name: &'static str,
    /// Byte offset in BAR0.
    pub offset: u32,
    /// Access width.
    pub width: Width,
    /// Access kind.
    pub access: Access,
    /// Value after power-on and after a function reset.
    pub reset: u64,
    /// The block of the register map the register belongs to.
    pub section: &'static str,
    /// The interface minor version that added the register (0: interface 1.0). A device of an
    /// older interface has no register at its offset: an access reads all ones and counts in
    /// `BAD_REGISTER_ACCESSES`.
    pub since_minor: u8,
    /// Description.
    pub doc: &'static str,
    /// Defined bit fields; every other bit is reserved.
    pub fields: &'static [FieldInfo],
}

impl RegInfo {
    /// Whether a device of interface 1.`interface_minor` has the register.
    pub const fn present_at(&self, interface_minor: u8) -> bool {
        self.since_minor <= interface_minor
    }

    /// The bits covered by defined fields. Reserved bits are outside this mask.
    pub const fn defined_mask(&self) -> u64 {
        let mut m = 0u64;
        let mut i = 0;
        while i < self.fields.len() {
            m |= self.fields[i].mask();
            i += 1;
        }
        m
    }
}

/// A value that can be stored in a register: a plain integer or a `bitfield-struct` type.
pub trait RegValue: Copy {
    /// Width of the register type.
    const WIDTH: Width;
    /// Build the value from the raw bits read from the device.
    fn from_raw(raw: u64) -> Self;
    /// The raw bits to write to the device.
    fn to_raw(self) -> u64;
}

impl RegValue for u32 {
    const WIDTH: Width = Width::W32;
    fn from_raw(raw: u64) -> Self {
        raw as u32
    }
    fn to_raw(self) -> u64 {
        self as u64
    }
}

impl RegValue for u64 {
    const WIDTH: Width = Width::W64;
    fn from_raw(raw: u64) -> Self {
        raw
    }
    fn to_raw(self) -> u64 {
        self
    }
}

/// A typed register: its datasheet entry and the Rust type of its value.
pub struct Reg<T> {
    /// The datasheet entry.
    pub info: RegInfo,
    _ty: PhantomData<fn() -> T>,
}

impl<T> Clone for Reg<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Reg<T> {}

impl<T: RegValue> Reg<T> {
    /// A register; fails to compile when the value type's width differs from the register's.
    pub const fn new(info: RegInfo) -> Self {
        assert!(
            T::WIDTH as u8 == info.width as u8,
            "register type width mismatch"
        );
        assert!(
            info.offset.is_multiple_of(info.width.bytes()),
            "register not naturally aligned"
        );
        assert!(
            info.offset < REGISTERS_SIZE,
            "register outside the register pages of BAR0"
        );
        Reg {
            info,
            _ty: PhantomData,
        }
    }

    /// Byte offset in BAR0.
    pub const fn offset(&self) -> u32 {
        self.info.offset
    }

    /// The reset value as the typed value.
    pub fn reset_value(&self) -> T {
        T::from_raw(self.info.reset)
    }
}

impl<T> core::fmt::Debug for Reg<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}@{:#05x}", self.info.name, self.info.offset)
    }
}

/// Find the register at a BAR0 offset.
pub fn register_at(offset: u32) -> Option<&'static RegInfo> {
    REGISTERS.iter().find(|r| r.offset == offset)
}

/// Find a register by name (case-insensitive), as `uetctl regs` and error messages spell it.
pub fn register_named(name: &str) -> Option<&'static RegInfo> {
    REGISTERS.iter().find(|r| r.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_do_not_overlap_and_fit_bar0() {
        let mut spans: Vec<(u32, u32, &str)> = REGISTERS
            .iter()
            .map(|r| (r.offset, r.offset + r.width.bytes(), r.name))
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "{} overlaps {}", w[0].2, w[1].2);
        }
        assert!(spans.last().unwrap().1 <= REGISTERS_SIZE);
    }

    #[test]
    fn registers_and_counters_are_in_offset_order() {
        // The simulator finds a register by binary search on these tables.
        assert!(REGISTERS.windows(2).all(|w| w[0].offset < w[1].offset));
        assert!(COUNTERS
            .windows(2)
            .all(|w| w[0].info.offset < w[1].info.offset));
    }

    #[test]
    fn names_are_unique_and_findable() {
        for r in REGISTERS {
            assert_eq!(register_named(r.name).unwrap().offset, r.offset);
            assert_eq!(register_at(r.offset).unwrap().name, r.name);
        }
    }

    #[test]
    fn fields_fit_their_register_and_do_not_overlap() {
        for r in REGISTERS {
            let width_bits = r.width.bytes() as usize * 8;
            let mut seen = 0u64;
            for f in r.fields {
                assert!(
                    f.lsb + f.bits <= width_bits,
                    "{}.{} too wide",
                    r.name,
                    f.name
                );
                assert_eq!(seen & f.mask(), 0, "{}.{} overlaps", r.name, f.name);
                seen |= f.mask();
            }
            assert!(!r.fields.is_empty(), "{} has no fields", r.name);
        }
    }

    #[test]
    fn every_register_says_the_version_that_added_it() {
        for r in REGISTERS {
            assert!(
                r.since_minor <= INTERFACE_MINOR,
                "{} is from the future",
                r.name
            );
            // A description that names the version agrees with the map entry.
            if let Some(at) = r.doc.find("since interface 1.") {
                let rest = &r.doc[at + "since interface 1.".len()..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                assert_eq!(digits.parse::<u8>().ok(), Some(r.since_minor), "{}", r.name);
            }
        }
        let window = [
            AV_WRITE_ENTRY_0.info,
            AV_WRITE_ENTRY_7.info,
            AV_WRITE_DOORBELL.info,
            AV_WRITE_DROPS.info,
            AV_INVALIDATE_DROPS.info,
        ];
        for r in window {
            assert_eq!(r.since_minor, since::AV_WRITE_WINDOW, "{}", r.name);
        }
        assert_eq!(
            TX_MSG_TOO_LONG.info.since_minor,
            since::AV_ENTRY_MAX_MSG_MTU
        );
        assert_eq!(
            AV_INVALIDATE_DOORBELL.info.since_minor,
            since::AV_INVALIDATE_DOORBELL
        );
        assert_eq!(CAP_AUTH_KEY.info.since_minor, since::AUTH_KEYS);
        assert_eq!(ADMIN_ARM.info.since_minor, since::ADMIN_ARM);
        assert_eq!(CAP_PEER_GROUPS.info.since_minor, since::PEER_GROUPS);
        assert!(ID.info.present_at(0) && !TX_MSG_TOO_LONG.info.present_at(9));
    }

    #[test]
    fn reset_values_only_set_defined_bits() {
        for r in REGISTERS {
            assert_eq!(
                r.reset & !r.defined_mask(),
                0,
                "{} resets reserved bits",
                r.name
            );
            if r.access == Access::Wo {
                assert_eq!(r.reset, 0, "{}: write-only registers read 0", r.name);
            }
        }
    }

    #[test]
    fn reset_identity_matches_constants() {
        let id = ID.reset_value();
        assert_eq!(id.vendor_id(), PCI_VENDOR_ID);
        assert_eq!(id.device_id(), PCI_DEVICE_ID);
        assert_eq!(REVISION.reset_value().interface_major(), INTERFACE_MAJOR);
    }

    #[test]
    fn checked_in_reference_table_is_current() {
        let generated = registers_markdown();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/REGISTERS.md");
        if std::env::var_os("UET_BLESS").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "regs/REGISTERS.md is out of date with the register definitions; \
             regenerate it with `UET_BLESS=1 cargo test -p uet-regs`"
        );
    }
}
