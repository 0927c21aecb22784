//! RMA engine: the target side of WRITE and READ.
//!
//! A WRITE or READ request that passed demultiplexing, the RMA-space index check and the
//! length checks (`rx_engine`) is checked against the memory-region table (`mr_table`) with
//! its memory key (SES bytes 24–31), JobID (the region's endpoint's own: a JobID granted to
//! the endpoint through an auth key reaches its receive buffers, not its memory regions),
//! resource index, access and the whole range
//! `[buffer_offset, buffer_offset + request_length)`. Any failure answers RC_PERM_VIOLATION,
//! counts `RX_PERM_VIOLATION` and the endpoint's `rejected[RC_PERM_VIOLATION]`, and touches no
//! memory. Because every packet checks the whole range, a multi-packet WRITE with a bad range
//! or key writes nothing at all.
//!
//! An operation reaches one region. For each WRITE, and each READ (whose requests share a
//! message id), the RX engine remembers which region the first of its packets to arrive
//! reached, or that it was refused, as it remembers multi-packet messages (`rx_engine`: the
//! last [`crate::rx_engine::RECENT_MESSAGES`] of them, told apart from a later one with the
//! same id by their PSNs). A later packet — or a copy of one already placed, which the
//! fabric duplicated — that reaches another region, one registered with the key after the
//! first was deregistered, is refused as above: the operation completes RC_PERM_VIOLATION,
//! and none of it lands in, or is read from, the new region.
//!
//! * WRITE: the packet's payload is written by DMA at `region + buffer_offset +
//!   message_offset` and answered RC_OK with `modified_length` = its bytes. Packets are placed
//!   as they arrive, in any order; no receive buffer, reassembly slot or completion is used.
//! * READ (at most one MTU per request, see `tx_engine`): `request_length` bytes are read
//!   by DMA from `region + buffer_offset` and returned in a response with data (PDS next_hdr
//!   5, SES opcode 0x02).
//!
//! A DMA fault on the region (the host unmapped it without deregistering) answers
//! RC_HOST_UNSUCCESS_CMPL and counts `DMA_FAULTS`. `RX_PACKETS` counts WRITE packets placed
//! and READ requests served, as the initiator's `TX_PACKETS` counts them, and `RX_BYTES` the
//! WRITE payload (a READ request has none); the endpoint's `rma_target_write_bytes` and `rma_target_read_bytes` count
//! the bytes written and read.

use crate::mr_table::RmaAccess;
use crate::nic::Nic;
use crate::rx_engine::ParsedRequest;
use crate::ses;
use uet_fwif::ReturnCode;
use uet_regs::{RX_BYTES, RX_PACKETS, RX_PERM_VIOLATION};

impl Nic {
    /// A WRITE or READ request for endpoint `handle`.
    pub(crate) fn rx_rma(&mut self, handle: u16, p: &ParsedRequest<'_>) {
        let Some(ep) = self.eps.get(handle) else {
            return;
        };
        if ep.faulted {
            return self.reject(handle, p, ReturnCode::HostUnsuccessfulCompletion);
        }
        let write = p.ses.opcode == ses::OP_WRITE;
        let access = if write {
            RmaAccess::Write
        } else {
            RmaAccess::Read
        };
        let checked = self.mrs.check(
            p.ses.match_bits,
            (ep.serial, p.ses.job_id),
            p.ses.resource_index,
            access,
            p.ses.buffer_offset,
            u64::from(p.ses.request_length),
        );
        // An operation reaches one region: a packet of a WRITE (a later one, or a copy of one
        // already placed), or a request of a READ, whose operation began in a region since
        // deregistered (or was refused) is refused, though a region registered with the key
        // meanwhile would take it.
        let region = checked.map_or(0, |(h, _)| h);
        let same = self.reasm.rma_same_region(p.key(), p.pds.psn, region);
        let Some((_, base)) = checked.filter(|_| same) else {
            self.counters.inc(RX_PERM_VIOLATION);
            return self.reject(handle, p, ReturnCode::PermViolation);
        };
        if write {
            let n = p.payload.len();
            let at = base.wrapping_add(u64::from(p.offset));
            if self.iommu.write(at, p.payload).is_err() {
                self.dma_fault();
                return self.reject(handle, p, ReturnCode::HostUnsuccessfulCompletion);
            }
            self.counters.inc(RX_PACKETS);
            self.counters.add(RX_BYTES, n as u64);
            if let Some(ep) = self.eps.get_mut(handle) {
                let s = &mut ep.stats;
                s.rma_target_write_bytes = s.rma_target_write_bytes.wrapping_add(n as u64);
            }
            self.respond(p, ReturnCode::Ok, n as u32);
        } else {
            let n = p.ses.request_length;
            let mut data = vec![0u8; n as usize];
            if self.iommu.read(base, &mut data).is_err() {
                self.dma_fault();
                return self.reject(handle, p, ReturnCode::HostUnsuccessfulCompletion);
            }
            // A request packet accepted, as the initiator's TX_PACKETS counted it; it carries
            // no payload, so RX_BYTES is unchanged.
            self.counters.inc(RX_PACKETS);
            if let Some(ep) = self.eps.get_mut(handle) {
                let s = &mut ep.stats;
                s.rma_target_read_bytes = s.rma_target_read_bytes.wrapping_add(u64::from(n));
            }
            self.respond_list(p, ReturnCode::Ok, n, ses::LIST_EXPECTED, Some(&data));
        }
    }
}
