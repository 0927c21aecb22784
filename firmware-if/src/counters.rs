//! Per-endpoint counters, as COUNTERS_READ writes them (since interface 1.2).
//!
//! The NIC keeps one [`EndpointCounters`] block per endpoint, zeroed by ENDPOINT_CREATE and
//! free-running (wrapping at 2^64) until ENDPOINT_DESTROY. COUNTERS_READ copies it, 640 bytes,
//! little-endian, into a host buffer. NIC-wide counters stay in the BAR0 counter registers.
//!
//! | bytes | counter | counts |
//! |---|---|---|
//! | 0 | `tx_messages` | SEND and TAGGED_SEND descriptors completed successfully (inject included) |
//! | 8 | `tx_bytes` | their payload bytes |
//! | 16 | `tx_tagged_messages` | of which TAGGED_SEND |
//! | 24 | `tx_inject_messages` | of which posted with `TX_FLAG_INJECT` |
//! | 32 | `rx_messages` | messages delivered into receive buffers (untagged and tagged; truncated ones included) |
//! | 40 | `rx_bytes` | bytes delivered into receive buffers |
//! | 48 | `rx_tagged_messages` | of which tagged |
//! | 56 | `rx_unexpected` | tagged messages held on the unexpected list |
//! | 64 | `rma_writes` | WRITE descriptors completed successfully (initiator) |
//! | 72 | `rma_write_bytes` | their bytes |
//! | 80 | `rma_reads` | READ descriptors completed successfully (initiator) |
//! | 88 | `rma_read_bytes` | their bytes |
//! | 96 | `rma_target_write_bytes` | bytes remote WRITEs placed in this endpoint's regions |
//! | 104 | `rma_target_read_bytes` | bytes remote READs took from this endpoint's regions |
//! | 112 | `tx_errors` | TX descriptors completed with an error |
//! | 120 | `rx_errors` | receive descriptors completed with an error |
//! | 128–639 | `rejected[64]` | refused requests, by return code (below) |
//!
//! `rejected[rc]` counts requests addressed to this endpoint (they matched
//! its JobID and PIDonFEP) that the NIC refused, indexed by the UET return code of the
//! refusal (RC_BAD_INDEX, RC_PERM_VIOLATION, RC_UNDELIVERABLE, RC_TOO_LONG, …), one per
//! refused packet. Requests refused before an endpoint is known (RC_BAD_JOB_ID, RC_BAD_PID)
//! count only in the BAR0 registers.

use crate::ReturnCode;
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Return codes `rejected` is indexed by (6 bits).
pub const RETURN_CODES: usize = 64;

/// One endpoint's counter block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct EndpointCounters {
    /// SEND and TAGGED_SEND descriptors completed successfully.
    pub tx_messages: U64,
    /// Their payload bytes.
    pub tx_bytes: U64,
    /// Of which TAGGED_SEND.
    pub tx_tagged_messages: U64,
    /// Of which inject.
    pub tx_inject_messages: U64,
    /// Messages delivered into receive buffers.
    pub rx_messages: U64,
    /// Bytes delivered into receive buffers.
    pub rx_bytes: U64,
    /// Of which tagged.
    pub rx_tagged_messages: U64,
    /// Tagged messages held on the unexpected list.
    pub rx_unexpected: U64,
    /// WRITE descriptors completed successfully.
    pub rma_writes: U64,
    /// Their bytes.
    pub rma_write_bytes: U64,
    /// READ descriptors completed successfully.
    pub rma_reads: U64,
    /// Their bytes.
    pub rma_read_bytes: U64,
    /// Bytes remote WRITEs placed in this endpoint's regions.
    pub rma_target_write_bytes: U64,
    /// Bytes remote READs took from this endpoint's regions.
    pub rma_target_read_bytes: U64,
    /// TX descriptors completed with an error.
    pub tx_errors: U64,
    /// Receive descriptors completed with an error.
    pub rx_errors: U64,
    /// Refused requests, by return code.
    pub rejected: [U64; RETURN_CODES],
}

const _: () = assert!(core::mem::size_of::<EndpointCounters>() == 640);
const _: () = assert!(core::mem::offset_of!(EndpointCounters, rejected) == 128);

impl EndpointCounters {
    /// Bytes of the block.
    pub const BYTES: usize = core::mem::size_of::<EndpointCounters>();

    /// Requests refused with `rc`.
    pub fn rejected(&self, rc: ReturnCode) -> u64 {
        self.rejected
            .get(usize::from(rc as u8))
            .map_or(0, |v| v.get())
    }

    /// The named counters, in layout order, with their datasheet names.
    pub fn named(&self) -> [(&'static str, u64); 16] {
        [
            ("tx_messages", self.tx_messages.get()),
            ("tx_bytes", self.tx_bytes.get()),
            ("tx_tagged_messages", self.tx_tagged_messages.get()),
            ("tx_inject_messages", self.tx_inject_messages.get()),
            ("rx_messages", self.rx_messages.get()),
            ("rx_bytes", self.rx_bytes.get()),
            ("rx_tagged_messages", self.rx_tagged_messages.get()),
            ("rx_unexpected", self.rx_unexpected.get()),
            ("rma_writes", self.rma_writes.get()),
            ("rma_write_bytes", self.rma_write_bytes.get()),
            ("rma_reads", self.rma_reads.get()),
            ("rma_read_bytes", self.rma_read_bytes.get()),
            ("rma_target_write_bytes", self.rma_target_write_bytes.get()),
            ("rma_target_read_bytes", self.rma_target_read_bytes.get()),
            ("tx_errors", self.tx_errors.get()),
            ("rx_errors", self.rx_errors.get()),
        ]
    }
}
