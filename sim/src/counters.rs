//! Statistics block: the 64-bit free-running counters of BAR0 (`0x200`–`0x2ff`) plus a few
//! model-internal counters that have no register.
//!
//! Every BAR counter is RO to the driver and wraps at 2^64. A FUNCTION_RESET clears them with
//! the rest of the register file. The internal [`DebugCounters`] record events that the
//! datasheet says are "ignored and counted" but that have no register of their own (a doorbell
//! index outside its ring, a doorbell for an endpoint that does not exist, a response that
//! matches no outstanding request, a frame the fabric could not route); tests and `uetctl` read
//! them through `SimFunction::debug_counters`.

use uet_regs::{Reg, COUNTERS};

/// Model-internal counters (no BAR register).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugCounters {
    /// Doorbell writes whose index lay outside the ring (ignored).
    pub bad_doorbells: u64,
    /// Datapath doorbell writes naming no endpoint (ignored).
    pub unknown_endpoint_doorbells: u64,
    /// PDS ACKs or SES responses that matched no outstanding request (dropped).
    pub stray_responses: u64,
    /// Requests answered with RC_DISABLED because the function was not running.
    pub rx_while_disabled: u64,
    /// Times an endpoint's engine waited for completion-ring space.
    pub cq_stalls: u64,
    /// Endpoints stopped because their own rings could not be read or written.
    pub endpoint_ring_faults: u64,
    /// Packets of a multi-packet message that repeated bytes already received (answered
    /// RC_OK, not written again), or that arrived after their message had finished; copies
    /// of a delivered single-packet message (answered RC_OK, not delivered again).
    pub rx_duplicate_packets: u64,
    /// Multi-packet messages refused because every reassembly slot was in use.
    pub reassembly_overflows: u64,
    /// Requests refused because their endpoint's receive backlog was full
    /// (`rx_engine::RX_BACKLOG_BYTES`).
    pub rx_backlog_overflows: u64,
    /// Requests refused with RC_TOO_LONG (request_length above `CAP_MAX_MSG`).
    pub rx_too_long: u64,
    /// Requests refused RC_UNSUPPORTED_OP because their delivery mode (RUD, UUD) is not the
    /// endpoint's.
    pub rx_wrong_delivery_mode: u64,
    /// Data requests a connected endpoint refused RC_PERM_VIOLATION because they came from
    /// another sender than its peer, or before ENDPOINT_PEER named one (since interface 1.20;
    /// also in `RX_PERM_VIOLATION`).
    pub rx_not_peer: u64,
    /// UUD requests dropped unanswered (any refusal of a datagram).
    pub rx_datagrams_dropped: u64,
    /// UUD requests handed to the fabric.
    pub tx_datagrams: u64,
    /// TX doorbells of a context without the TX or CONTROL role, RX and tagged RX doorbells
    /// of one without the RX or CONTROL role (ignored).
    pub doorbells_without_role: u64,
    /// `CQ_ARM` writes naming no endpoint or a vector outside the MSI-X table (ignored).
    pub bad_cq_arms: u64,
    /// `ADMIN_ARM` writes naming a vector outside the MSI-X table (ignored).
    pub bad_admin_arms: u64,
    /// `ADMIN_ARM` writes that armed the admin completion ring (or raised its vector at once).
    pub admin_arms: u64,
    /// MSI-X messages sent to the trigger a host set for their vector.
    pub msix_messages: u64,
    /// MSI-X messages sent for a vector with no trigger (reached no one).
    pub msix_unclaimed: u64,
    /// AV entries AV_WRITE_PEERS wrote (each composed by the NIC from a peer's address).
    pub av_write_peers_entries: u64,
}

/// The counter block of one NIC.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    bar: [u64; COUNTERS.len()],
    pub(crate) debug: DebugCounters,
}

/// The counter at BAR offset `offset` (COUNTERS is in offset order; a uet-regs test checks it).
fn slot_at(offset: u32) -> Option<usize> {
    COUNTERS
        .binary_search_by_key(&offset, |c| c.info.offset)
        .ok()
}

fn slot(reg: Reg<u64>) -> Option<usize> {
    slot_at(reg.info.offset)
}

impl Counters {
    /// Add `n` to a BAR counter (wrapping, as the hardware does).
    pub(crate) fn add(&mut self, reg: Reg<u64>, n: u64) {
        if let Some(v) = slot(reg).and_then(|i| self.bar.get_mut(i)) {
            *v = v.wrapping_add(n);
        }
    }

    /// Add one to a BAR counter.
    pub(crate) fn inc(&mut self, reg: Reg<u64>) {
        self.add(reg, 1);
    }

    /// The counter at a BAR offset, if one lives there.
    pub(crate) fn at_offset(&self, offset: u32) -> Option<u64> {
        let i = slot_at(offset)?;
        self.bar.get(i).copied()
    }

    /// Clear everything (function reset).
    pub(crate) fn reset(&mut self) {
        *self = Counters::default();
    }
}
