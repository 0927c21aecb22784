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
//! | 56 | `rx_unexpected` | messages held on the unexpected list: tagged ones, and since interface 1.17 untagged ones |
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

/// Declares the counter block once: the wire layout [`EndpointCounters`], the native values
/// [`EndpointCounterValues`] both sides count in, the conversions between them, and the names.
macro_rules! endpoint_counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// One endpoint's counter block, as COUNTERS_READ writes it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
        #[repr(C)]
        pub struct EndpointCounters {
            $($(#[doc = $doc])* pub $name: U64,)*
            /// Refused requests, by return code.
            pub rejected: [U64; RETURN_CODES],
        }

        /// One endpoint's counters as native integers: what the NIC counts in and what the
        /// driver reports (`EndpointCounters` is their wire form).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct EndpointCounterValues {
            $($(#[doc = $doc])* pub $name: u64,)*
            /// Refused requests, by return code.
            pub rejected: [u64; RETURN_CODES],
        }

        impl Default for EndpointCounterValues {
            fn default() -> Self {
                EndpointCounterValues {
                    $($name: 0,)*
                    rejected: [0; RETURN_CODES],
                }
            }
        }

        impl From<&EndpointCounters> for EndpointCounterValues {
            fn from(w: &EndpointCounters) -> Self {
                EndpointCounterValues {
                    $($name: w.$name.get(),)*
                    rejected: w.rejected.map(|v| v.get()),
                }
            }
        }

        impl From<&EndpointCounterValues> for EndpointCounters {
            fn from(v: &EndpointCounterValues) -> Self {
                EndpointCounters {
                    $($name: U64::new(v.$name),)*
                    rejected: v.rejected.map(U64::new),
                }
            }
        }

        impl EndpointCounters {
            /// The named counters, in layout order, with their datasheet names.
            pub fn named(&self) -> [(&'static str, u64); NAMED_COUNTERS] {
                [$((stringify!($name), self.$name.get()),)*]
            }
        }
    };
}

/// Counters with a name (all but `rejected`).
pub const NAMED_COUNTERS: usize = 16;

endpoint_counters! {
    /// SEND and TAGGED_SEND descriptors completed successfully.
    tx_messages,
    /// Their payload bytes.
    tx_bytes,
    /// Of which TAGGED_SEND.
    tx_tagged_messages,
    /// Of which inject.
    tx_inject_messages,
    /// Messages delivered into receive buffers.
    rx_messages,
    /// Bytes delivered into receive buffers.
    rx_bytes,
    /// Of which tagged.
    rx_tagged_messages,
    /// Messages held on the unexpected list: tagged ones, and since interface 1.17 untagged
    /// ones.
    rx_unexpected,
    /// WRITE descriptors completed successfully.
    rma_writes,
    /// Their bytes.
    rma_write_bytes,
    /// READ descriptors completed successfully.
    rma_reads,
    /// Their bytes.
    rma_read_bytes,
    /// Bytes remote WRITEs placed in this endpoint's regions.
    rma_target_write_bytes,
    /// Bytes remote READs took from this endpoint's regions.
    rma_target_read_bytes,
    /// TX descriptors completed with an error.
    tx_errors,
    /// Receive descriptors completed with an error.
    rx_errors,
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
}

impl EndpointCounterValues {
    /// Requests refused with `rc`.
    pub fn rejected(&self, rc: ReturnCode) -> u64 {
        self.rejected
            .get(usize::from(rc as u8))
            .copied()
            .unwrap_or(0)
    }

    /// The named counters in datasheet order, then every non-zero `rejected` entry as
    /// `rejected_RC_…`.
    pub fn named(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = EndpointCounters::from(self)
            .named()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        for (code, &v) in self.rejected.iter().enumerate() {
            if v != 0 {
                let name = ReturnCode::from_u8(code as u8)
                    .map_or_else(|| format!("RC_{code:#04x}"), |rc| rc.name().to_string());
                out.push((format!("rejected_{name}"), v));
            }
        }
        out
    }

    /// Count one request refused with `rc`.
    pub fn reject(&mut self, rc: ReturnCode) {
        if let Some(v) = self.rejected.get_mut(usize::from(rc as u8)) {
            *v = v.wrapping_add(1);
        }
    }
}
