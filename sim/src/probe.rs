//! Probes of the unexpected list (since interface 1.18): tagged RX descriptors with
//! `TRX_FLAG_PEEK`, `TRX_FLAG_CLAIM` or `TRX_FLAG_DISCARD` (fi_tagged(3) `FI_PEEK`,
//! `FI_CLAIM`, `FI_DISCARD`).
//!
//! The tag-matching unit (`tag_match`) hands this block every well-formed descriptor with a
//! flag set as it reads it from the tagged RX ring, which it does only while the completion
//! ring has room for one more completion. A probe never joins the posted list: it completes
//! at once, `TaggedRecv` with the descriptor's context, as the datasheet's table says
//! (`uet_fwif::datapath`, *Probing the unexpected list*):
//!
//! * `PEEK` finds the oldest tagged message of the descriptor's group on the unexpected list
//!   that is neither claimed nor already bound to a receive, and whose tag the descriptor
//!   matches. If that message is still arriving (a multi-packet message whose last byte has
//!   not come), nothing is found: reporting a later message would report them out of order.
//!   With `CLAIM` the message found is marked with the descriptor's `claim`; with `DISCARD`
//!   it is dropped.
//! * `CLAIM` alone, or with `DISCARD`, finds the tagged message marked with `claim`, and
//!   delivers it into the descriptor's buffer (as `tag_match` delivers an unexpected message
//!   to a receive) or drops it.
//! * A report (every probe but a `CLAIM` that delivers) writes nothing into the buffer; its
//!   completion carries the message's tag, remote CQ data, group and source (looked up now)
//!   and `len` = the message's length, and `COMPLETION_FLAG_REPORT`; it counts in no
//!   receive counter. Nothing found: status `NoMessage`, `len` 0 (counted in `rx_errors`,
//!   as a cancelled receive is).
//!
//! A dropped message frees its place and bytes on the list at once. Claims live in the
//! unexpected list's entries, so ENDPOINT_DESTROY drops them with the list.

use crate::nic::{unfilled_receive, Nic};
use crate::tag_match::{HeldInto, Unexpected};
use uet_fwif::datapath::{COMPLETION_FLAG_REPORT, TRX_FLAG_CLAIM, TRX_FLAG_DISCARD, TRX_FLAG_PEEK};
use uet_fwif::{Completion, CompletionKind, LocalStatus, ReturnCode, TaggedRxDescriptor};
use zerocopy::little_endian::{U32, U64};

/// Whether a tagged RX descriptor's flags, claim and reserved bytes are well formed on a NIC
/// that takes probes (`probes`) or not.
pub(crate) fn well_formed(d: &TaggedRxDescriptor, probes: bool) -> bool {
    let flags = d.flags.get();
    let known = if probes {
        const PEEK_CLAIM: u32 = TRX_FLAG_PEEK | TRX_FLAG_CLAIM;
        const PEEK_DISCARD: u32 = TRX_FLAG_PEEK | TRX_FLAG_DISCARD;
        const CLAIM_DISCARD: u32 = TRX_FLAG_CLAIM | TRX_FLAG_DISCARD;
        matches!(
            flags,
            0 | TRX_FLAG_PEEK | PEEK_CLAIM | PEEK_DISCARD | TRX_FLAG_CLAIM | CLAIM_DISCARD
        )
    } else {
        flags == 0
    };
    let claim = d.claim.get() == 0 || (probes && flags & TRX_FLAG_CLAIM != 0);
    known && claim && d.reserved == [0; 12]
}

impl Nic {
    /// Carry out the probe `d` (well formed, a flag set) of entry `handle`.
    pub(crate) fn probe(&mut self, handle: u16, d: &TaggedRxDescriptor) {
        let flags = d.flags.get();
        let Some(ep) = self.eps.get_mut(handle) else {
            return;
        };
        let found = if flags & TRX_FLAG_PEEK != 0 {
            ep.unexpected
                .iter()
                .position(|u| {
                    u.tagged
                        && u.claim.is_none()
                        && u.bound.is_none()
                        && d.matches_in_group(u.group, u.tag)
                })
                .filter(|&i| ep.unexpected.get(i).is_some_and(|u| u.data.is_some()))
        } else {
            let claim = d.claim.get();
            ep.unexpected
                .iter()
                .position(|u| u.tagged && u.claim == Some(claim))
        };
        let Some(i) = found else {
            let c = unfilled_receive(
                d.context,
                CompletionKind::TaggedRecv,
                LocalStatus::NoMessage,
                ReturnCode::Ok,
            );
            return self.post_completion(handle, c);
        };
        if flags & TRX_FLAG_DISCARD != 0 {
            let Some(u) = ep.unexpected.remove(i) else {
                return;
            };
            ep.unexpected_bytes = ep.unexpected_bytes.saturating_sub(u64::from(u.total));
            return self.report(handle, &u, d.context);
        }
        if flags == TRX_FLAG_CLAIM {
            let Some(u) = ep.unexpected.remove(i) else {
                return;
            };
            return self.deliver_held(
                handle,
                u,
                HeldInto::buffer(d.context, d.buf.get(), d.len.get()),
            );
        }
        let Some(u) = ep.unexpected.get_mut(i) else {
            return;
        };
        if flags & TRX_FLAG_CLAIM != 0 {
            u.claim = Some(d.claim.get());
        }
        // The entry stays on the list: report a copy of what the completion needs.
        let (key, tag, group, header_data, job_id, total) =
            (u.key, u.tag, u.group, u.header_data, u.job_id, u.total);
        let seen = Unexpected {
            key,
            tagged: true,
            tag,
            group,
            header_data,
            job_id,
            total,
            data: None,
            bound: None,
            claim: None,
        };
        self.report(handle, &seen, d.context);
    }

    /// Complete a probe with `context` by reporting message `u`: its tag, remote CQ data,
    /// group, source and length, nothing written.
    fn report(&mut self, handle: u16, u: &Unexpected, context: U64) {
        let av = self.eps.get(handle).map_or(0, |ep| ep.av);
        let (ip, initiator) = u.key.sender();
        let src_addr = self.sender_source(av, handle, ip, initiator, u.job_id);
        let c = Completion {
            context,
            data: U64::new(u.header_data),
            src_addr: U64::new(src_addr),
            tag: U64::new(u.tag),
            len: U32::new(u.total),
            group: U32::new(u.group),
            status: LocalStatus::Ok as u8,
            return_code: ReturnCode::Ok as u8,
            kind: CompletionKind::TaggedRecv as u8,
            flags: COMPLETION_FLAG_REPORT,
            ..Completion::default()
        };
        self.post_completion(handle, c);
    }
}
