//! # uet-fwif — what the host and the NIC agree on in memory
//!
//! The register map is in `uet-regs`; everything that crosses PCIe as DMA is here:
//!
//! | module | contents |
//! |---|---|
//! | [`admin`] | the admin queue pair: 64-byte commands, 16-byte completions, opcodes, status codes |
//! | [`identify`] | the IDENTIFY data page |
//! | [`cm`] | connection-management messages on the control channel (resource index 0) |
//! | [`av_entry`] | the NIC AV entry (64 bytes) and the AV_WRITE record |
//! | [`auth_key`] | the auth-key (JobID) table: commands, slot layout, the auth key's byte form |
//! | [`counters`] | the per-endpoint counter block COUNTERS_READ returns |
//! | [`address`] | the UET endpoint address as `fi_getname` returns it (32 bytes, big-endian) |
//! | [`datapath`] | TX/RX/tagged-RX descriptors, datapath completions, resource-index spaces, tag matching, peer groups (the group's place in `fi_addr_t` and on the wire, matching by group), RMA and inject rules |
//! | [`return_code`] | UET SES return codes, as carried in responses and completions |
//! | [`ring`] | ring index arithmetic and the phase-bit rule shared by every ring |
//!
//! Host/NIC structures are little-endian (PCIe); the endpoint address is big-endian because it
//! travels between hosts. Every layout is a `zerocopy` type with a size assertion, so host and
//! NIC read the same bytes the same way. No Rust reference into DMA memory is ever formed:
//! both sides copy these structures in and out with volatile accesses.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod admin;
pub mod auth_key;
pub mod av_entry;
pub mod cm;
pub mod counters;
pub mod datapath;
pub mod identify;
pub mod return_code;
pub mod ring;

pub use address::{AddressError, UetAddress};
pub use admin::{AdminCommand, AdminCompletion, Command, Opcode, Status};
pub use av_entry::{AvWriteRecord, NicAvEntry};
pub use counters::EndpointCounters;
pub use datapath::{
    Completion, CompletionKind, LocalStatus, RxDescriptor, TaggedRxDescriptor, TxDescriptor,
    TxOpcode,
};
pub use return_code::ReturnCode;

/// `fi_addr_t` value meaning "no address" (`FI_ADDR_NOTAVAIL`, `FI_ADDR_UNSPEC`).
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;
