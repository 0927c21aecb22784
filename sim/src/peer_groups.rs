//! Peer-group receive unit: untagged receives of endpoints with peer groups.
//!
//! An endpoint (or receive context) has peer groups when the AV bound to it at ENDPOINT_CREATE
//! was created with `max_group_id` > 0 (see `uet_fwif::datapath`, *Peer groups*). For such an
//! endpoint the RX ring is not consumed in order by arriving messages; instead:
//!
//! * **Posting.** While the function runs, the unit reads each new [`RxDescriptor`] as soon
//!   as `RXQ_DOORBELL` moves the ring's tail — only while the endpoint's completion ring can
//!   take one more completion — and frees its ring entry at once. A descriptor with any flag
//!   set (multi-receive buffers do not combine with peer groups), `min_free` not zero, or a
//!   `group` above the AV's `max_group_id` completes `BadDescriptor` (`Recv`,
//!   RC_UNDELIVERABLE). Any other joins the endpoint's **posted list**, in posting order.
//! * **Matching.** An untagged message (after the checks of `rx_engine`, which already
//!   refused a group the endpoint does not receive) takes the oldest posted descriptor whose
//!   `group` equals the message's, provided the completion ring has room (else it waits in the
//!   endpoint's receive backlog like any request). Descriptors of other groups are passed
//!   over, so a message of group 2 is never held up by a buffer posted for group 1 before it.
//! * **No buffer.** A message of a group with no posted descriptor is handled as an untagged
//!   message that finds the RX ring of an endpoint without peer groups empty
//!   (`untagged_unexpected`): since interface 1.17 it waits on the unexpected list for a
//!   descriptor of its group, and later messages of its group wait behind it; before, it is
//!   refused RC_UNDELIVERABLE (libfabric `FI_ENORX` at the sender). Either way it counts in
//!   `RX_NO_BUFFER`, and nothing is delivered into a buffer of another group. A descriptor
//!   the doorbell announced and the unit has not read for want of completion-ring room
//!   counts as posted: the message waits with it.
//! * **Delivery** is the untagged one of `rx_engine` (single-packet copy, or reassembly of a
//!   multi-packet message into the descriptor's buffer, truncation, DMA faults); the `Recv`
//!   completion carries the descriptor's context and the message's group.
//!
//! The posted list holds at most as many descriptors as the RX ring has entries (the driver
//! cannot post more without a completion). ENDPOINT_DESTROY drops it with the endpoint.

use crate::nic::Nic;
use crate::rx_engine::{ParsedRequest, Reassembly, RxOutcome, Sink};
use uet_fwif::datapath::RX_DESCRIPTOR_BYTES;
use uet_fwif::{Completion, CompletionKind, LocalStatus, ReturnCode, RxDescriptor};
use zerocopy::little_endian::U64;
use zerocopy::FromBytes;

impl Nic {
    /// Read the new RX descriptors of an endpoint with peer groups onto its posted list (see
    /// the module docs). Endpoints without peer groups are left alone: their ring is read by
    /// arriving messages.
    pub(crate) fn rx_group_poll(&mut self, handle: u16) -> bool {
        let mut progress = false;
        while let Some(ep) = self.eps.get_mut(handle) {
            let Some(max_group) = ep.max_group else {
                break;
            };
            if ep.faulted || !ep.rx.pending() {
                break;
            }
            if ep.posted_rx.len() >= ep.rx.geom.entries() as usize {
                break;
            }
            if !ep.cq_has_room() {
                self.counters.debug.cq_stalls += 1;
                break;
            }
            let at = ep.rx.base + u64::from(ep.rx.head) * RX_DESCRIPTOR_BYTES as u64;
            ep.rx.head = ep.rx.geom.next(ep.rx.head);
            let mut raw = [0u8; RX_DESCRIPTOR_BYTES];
            if self.iommu.read(at, &mut raw).is_err() {
                self.ring_fault(handle);
                break;
            }
            progress = true;
            let Ok(d) = RxDescriptor::read_from_bytes(&raw) else {
                continue;
            };
            if d.flags.get() != 0 || d.min_free.get() != 0 || d.group.get() > max_group {
                self.refuse_rx_descriptor(handle, CompletionKind::Recv, d.context);
                continue;
            }
            if let Some(ep) = self.eps.get_mut(handle) {
                ep.posted_rx.push_back(d);
            }
        }
        progress
    }

    /// An untagged message that opens a message (single-packet, or the first packet of a
    /// multi-packet message to arrive) for endpoint `handle`, which has peer groups.
    pub(crate) fn rx_grouped(
        &mut self,
        handle: u16,
        serial: u64,
        p: &ParsedRequest<'_>,
        f: &[u8],
        from_backlog: bool,
    ) -> RxOutcome {
        // Descriptors the doorbell announced and the unit has not read yet count as posted.
        self.rx_group_poll(handle);
        let single = p.single();
        let group = p.group;
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        let found = ep.posted_rx.iter().position(|d| d.group.get() == group);
        // Without completion-ring room the unit leaves the ring unread: a descriptor still
        // there may be the message's, so the message waits with it.
        if !ep.cq_has_room() && (found.is_some() || ep.rx.pending()) {
            return self.hold_for_cq_room(handle, p, f, from_backlog);
        }
        let Some(i) = found else {
            return self.rx_untagged_unexpected(handle, serial, p);
        };
        if !single && !self.reasm.has_room(self.cfg.reassembly_slots, &self.eps) {
            self.counters.debug.reassembly_overflows += 1;
            self.refuse(handle, p, ReturnCode::Undeliverable);
            return RxOutcome::Done;
        }
        let av = self.eps.get(handle).map_or(0, |ep| ep.av);
        let src_addr = self.source_of(av, handle, p);
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        let Some(d) = ep.posted_rx.remove(i) else {
            return RxOutcome::Done;
        };
        if !single {
            let sink = Sink::Host {
                buf: d.buf.get(),
                buf_len: d.len.get(),
            };
            let r = Reassembly::new(handle, serial, sink, CompletionKind::Recv, d.context, p);
            return self.start_reassembly(r, p);
        }
        let c = Completion {
            context: d.context,
            data: U64::new(p.cq_data()),
            status: LocalStatus::Ok as u8,
            return_code: ReturnCode::Ok as u8,
            kind: CompletionKind::Recv as u8,
            ..Completion::default()
        };
        self.deliver_single(handle, p, d.buf.get(), d.len.get(), c, src_addr);
        RxOutcome::Done
    }
}
