//! Datapath rings: TX descriptors, RX descriptors and completions.
//!
//! Each endpoint owns three rings in host memory, given to the NIC by ENDPOINT_CREATE:
//!
//! * TX ring of 64-byte [`TxDescriptor`]s. The driver writes descriptors and rings
//!   `TXQ_DOORBELL` with the new tail. A descriptor names its destination by `fi_addr_t` only:
//!   the NIC translates it through the AV table bound to the endpoint. The host never looks a
//!   peer up on the send path.
//! * RX ring of 32-byte [`RxDescriptor`]s: receive buffers, consumed in order. `RXQ_DOORBELL`
//!   carries the new tail.
//! * Completion ring of 32-byte [`Completion`]s, written by the NIC with a phase bit (see
//!   [`crate::ring`]); the driver returns entries with `CQ_DOORBELL`. A full completion ring
//!   stalls the endpoint's TX and RX engines; nothing is overwritten.
//!
//! A message is at most `CAP_MAX_MSG` bytes of payload (interface 1.1; in 1.0 it was one MTU).
//! The NIC segments a message longer than the MTU (`CAP_PROFILES.mtu`) into MTU-sized UET
//! packets — SOM on the first, EOM on the last, one message id — and the target NIC reassembles
//! them, in whatever order they arrive, into the one receive buffer the first of them consumed.
//! Either side still sees one descriptor and one completion per message: the send completes
//! when every packet has been answered (with the first error, if any), the receive when every
//! byte has arrived (`Truncated` when the message was longer than the buffer; nothing is
//! written past it).

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// TX descriptor opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TxOpcode {
    /// Send a message to `dest`, to be matched against the peer's RX ring.
    Send = 0x01,
}

impl TxOpcode {
    /// Decode an opcode byte.
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            0x01 => Some(TxOpcode::Send),
            _ => None,
        }
    }
}

/// A TX ring entry.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct TxDescriptor {
    /// [`TxOpcode`].
    pub opcode: u8,
    /// Reserved, zero.
    pub flags: u8,
    /// Reserved, zero.
    pub reserved0: [u8; 2],
    /// Payload length in bytes, at most `CAP_MAX_MSG`.
    pub len: U32,
    /// IOVA of the payload.
    pub buf: U64,
    /// Destination `fi_addr_t`: AV index in the low bits, receive context in the top
    /// `rx_ctx_bits` of the bound AV.
    pub dest: U64,
    /// Returned in the completion.
    pub context: U64,
    /// Remote CQ data delivered with the message.
    pub data: U64,
    /// Reserved, zero.
    pub reserved1: [u8; 24],
}

/// An RX ring entry.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct RxDescriptor {
    /// IOVA of the buffer.
    pub buf: U64,
    /// Buffer length.
    pub len: U32,
    /// Reserved, zero.
    pub flags: U32,
    /// Returned in the completion.
    pub context: U64,
    /// Reserved, zero.
    pub reserved: U64,
}

/// What the local NIC concluded about a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LocalStatus {
    /// Completed successfully.
    Ok = 0,
    /// The target answered with an error: see the completion's return code.
    Remote = 1,
    /// `dest` names no valid entry of the bound AV (out of range, never inserted, removed).
    AddrNotAvail = 2,
    /// The descriptor's buffer lies outside memory mapped for DMA.
    DmaFault = 3,
    /// The message was longer than the receive buffer; `len` bytes were delivered.
    Truncated = 4,
    /// The descriptor is malformed (unknown opcode, reserved fields set, length above
    /// `CAP_MAX_MSG`).
    BadDescriptor = 5,
    /// No NIC answers at the destination fabric address.
    Unreachable = 6,
}

impl LocalStatus {
    /// Decode; unknown values decode as `BadDescriptor`, never as success.
    pub const fn from_u8(v: u8) -> Self {
        match v {
            0 => LocalStatus::Ok,
            1 => LocalStatus::Remote,
            2 => LocalStatus::AddrNotAvail,
            3 => LocalStatus::DmaFault,
            4 => LocalStatus::Truncated,
            6 => LocalStatus::Unreachable,
            _ => LocalStatus::BadDescriptor,
        }
    }
}

/// Which ring a completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CompletionKind {
    /// A TX descriptor completed.
    Send = 1,
    /// An RX descriptor was filled.
    Recv = 2,
}

/// A completion ring entry.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct Completion {
    /// The descriptor's context.
    pub context: U64,
    /// Remote CQ data (receive).
    pub data: U64,
    /// Receive: the sender as an `fi_addr_t` of the bound AV (the NIC's reverse translation),
    /// its user id when the entry has one, or `FI_ADDR_NOTAVAIL`.
    pub src_addr: U64,
    /// Bytes transferred.
    pub len: U32,
    /// [`LocalStatus`].
    pub status: u8,
    /// [`crate::ReturnCode`] of the target's response (send) or of the delivery (receive).
    pub return_code: u8,
    /// [`CompletionKind`].
    pub kind: u8,
    /// Bit 0: phase. Written last.
    pub phase: u8,
}

/// Byte offset of [`Completion::phase`].
pub const COMPLETION_PHASE_OFFSET: usize = 31;

const _: () = assert!(core::mem::size_of::<TxDescriptor>() == 64);
const _: () = assert!(core::mem::size_of::<RxDescriptor>() == 32);
const _: () = assert!(core::mem::size_of::<Completion>() == 32);
