//! Untagged messages on the unexpected list (since interface 1.17).
//!
//! An untagged message (SEND) that finds no receive buffer — the RX ring empty and no current
//! multi-receive buffer it fits, or, with peer groups, no posted descriptor of its group — is
//! held in NIC memory on the endpoint's unexpected list, as a tagged message that no posted
//! receive matches is (`tag_match`), and answered RC_OK on the overflow list, so the sender's
//! send completes. The two kinds share the list's bounds (`CAP_TAGGED.unexpected_entries`
//! messages, `CAP_TAGGED.unexpected_kib` KiB); a message that would exceed one is refused
//! RC_UNDELIVERABLE (libfabric `FI_ENORX` at the sender) and counted in
//! `RX_UNEXPECTED_OVERFLOW`. Every untagged message that finds no buffer counts in
//! `RX_NO_BUFFER`, held or not. This is fi_domain(3)'s resource management for a reliable
//! endpoint: a message that arrives before its receive is not an error at the sender.
//! Before 1.17 such a message is refused RC_UNDELIVERABLE at once.
//!
//! Two kinds of entry refuse it as before: a datagram endpoint drops it (fi_domain(3): a
//! datagram that finds no buffer is dropped; nothing is answered), and a control channel
//! (resource index 0; a passive endpoint's rings) refuses it, because the connection protocol
//! learns from that refusal that its peer no longer takes messages.
//!
//! **Order.** Untagged messages of one sender (fabric address and initiator) take buffers in
//! the order they arrived, per peer group (fi_msg(3): a sender's messages are received in
//! the order it sent them): while the list holds an untagged message of a group and sender,
//! a later message of that group and sender joins the list behind it even when a buffer is
//! posted, and the list's messages go first. Messages of different senders have no order
//! between them, so one sender's message still arriving (a multi-packet message whose last
//! packet has not come) holds up no other sender's.
//!
//! **Taking.** While the function runs, the NIC gives the oldest complete untagged message of
//! the list (a multi-packet one once its last byte arrived; messages of its group and sender
//! behind it wait for it) the buffer an arriving message would take, with the same rules
//! (`rx_engine`, `multi_recv`, `peer_groups`):
//!
//! * without peer groups: the current multi-receive buffer when the message fits it; else the
//!   next RX descriptor, after retiring the current buffer — a multi-receive descriptor
//!   becomes the current buffer and takes the message, truncated if it is longer than the
//!   whole buffer;
//! * with peer groups: the oldest posted descriptor of the message's group.
//!
//! It does so only when the completion ring can take the completions (two when a retirement
//! comes first), and writes the message into the buffer (truncated to it, status
//! `Truncated`), completing the receive `Recv` with the message's remote CQ data, group and
//! source (looked up now, see `rx_engine`). A descriptor that fails its checks completes
//! `BadDescriptor` and the message waits for the next one: its sender was already answered,
//! so nothing but a receive can end it. A DMA fault on the buffer completes the receive
//! `DmaFault`. ENDPOINT_DESTROY drops the list with the endpoint.

use crate::nic::Nic;
use crate::rx_engine::{ParsedRequest, RxOutcome};
use crate::tag_match::HeldInto;
use std::collections::HashSet;
use std::net::IpAddr;
use uet_fwif::datapath::{RX_DESCRIPTOR_BYTES, RX_FLAG_MULTI_RECV};
use uet_fwif::{CompletionKind, ReturnCode, RxDescriptor};
use uet_regs::RX_NO_BUFFER;
use zerocopy::FromBytes;

impl Nic {
    /// Whether entry `handle` holds untagged messages that find no buffer (since interface
    /// 1.17; see the module docs for the entries that do not).
    fn holds_untagged(&self, handle: u16) -> bool {
        self.cfg.interface_minor >= uet_regs::since::UNTAGGED_UNEXPECTED
            && self.eps.get(handle).is_some_and(|ep| ep.holds_untagged())
    }

    /// An untagged message `p` (the first of its packets to arrive) finds no buffer: hold it
    /// on the unexpected list, or refuse it (before interface 1.17, or the list is full).
    pub(crate) fn rx_untagged_unexpected(
        &mut self,
        handle: u16,
        serial: u64,
        p: &ParsedRequest<'_>,
    ) -> RxOutcome {
        self.counters.inc(RX_NO_BUFFER);
        if !self.holds_untagged(handle) {
            self.refuse(handle, p, ReturnCode::Undeliverable);
            return RxOutcome::Done;
        }
        self.rx_unexpected(handle, serial, p, CompletionKind::Recv)
    }

    /// Give the untagged messages of entry `handle`'s unexpected list the buffers posted for
    /// them (see the module docs); returns whether anything moved.
    pub(crate) fn untagged_unexpected_poll(&mut self, handle: u16) -> bool {
        let mut progress = false;
        while let Some(i) = self.next_untagged(handle) {
            match self.take_untagged(handle, i) {
                Some(moved) => progress |= moved,
                None => break,
            }
        }
        progress
    }

    /// The list position of the oldest complete untagged message a buffer is posted for,
    /// taking each group's messages in order.
    fn next_untagged(&self, handle: u16) -> Option<usize> {
        let ep = self.eps.get(handle)?;
        if ep.faulted || ep.unexpected_untagged == 0 {
            return None;
        }
        let grouped = ep.max_group.is_some();
        if grouped && ep.posted_rx.is_empty() || !grouped && ep.mrecv.is_none() && !ep.rx.pending()
        {
            return None;
        }
        // (Group, sender) pairs whose oldest message cannot go now: their later messages wait
        // behind it. Another sender's messages pass it.
        let mut held_up: HashSet<(u32, IpAddr, u32)> = HashSet::new();
        for (i, u) in ep.unexpected.iter().enumerate() {
            let (ip, initiator) = u.key.sender();
            if u.tagged || held_up.contains(&(u.group, ip, initiator)) {
                continue;
            }
            let has_buffer = if grouped {
                ep.posted_rx.iter().any(|d| d.group.get() == u.group)
            } else {
                ep.mrecv.as_ref().is_some_and(|m| m.fits(u.total)) || ep.rx.pending()
            };
            if u.data.is_some() && has_buffer {
                return Some(i);
            }
            held_up.insert((u.group, ip, initiator));
        }
        None
    }

    /// Give the message at list position `i` its buffer. `Some(true)`: a descriptor or the
    /// message moved; `Some(false)`: nothing did, but the next message may; `None`: stop (no
    /// completion-ring room, or the ring faulted).
    fn take_untagged(&mut self, handle: u16, i: usize) -> Option<bool> {
        let ep = self.eps.get_mut(handle)?;
        let total = ep.unexpected.get(i)?.total;
        if ep.max_group.is_some() {
            if !ep.cq_has_room() {
                self.counters.debug.cq_stalls += 1;
                return None;
            }
            let group = ep.unexpected.get(i)?.group;
            let j = ep.posted_rx.iter().position(|d| d.group.get() == group)?;
            let d = ep.posted_rx.remove(j)?;
            let u = ep.unexpected.remove(i)?;
            self.deliver_held(
                handle,
                u,
                HeldInto::buffer(d.context, d.buf.get(), d.len.get()),
            );
            return Some(true);
        }
        let fits = ep.mrecv.as_ref().map(|m| m.fits(total));
        if !ep.cq_has_room_for(1 + u64::from(fits == Some(false))) {
            self.counters.debug.cq_stalls += 1;
            return None;
        }
        match fits {
            Some(true) => return Some(self.untagged_into_mrecv(handle, i)),
            Some(false) => self.mrecv_retire(handle),
            None => {}
        }
        let ep = self.eps.get_mut(handle)?;
        if !ep.rx.pending() {
            // The retirement above moved; the message waits for a descriptor.
            return Some(fits.is_some());
        }
        let at = ep.rx.base + u64::from(ep.rx.head) * RX_DESCRIPTOR_BYTES as u64;
        let mut raw = [0u8; RX_DESCRIPTOR_BYTES];
        if self.iommu.read(at, &mut raw).is_err() {
            self.ring_fault(handle);
            return None;
        }
        let ep = self.eps.get_mut(handle)?;
        ep.rx.head = ep.rx.geom.next(ep.rx.head);
        ep.skip_withdrawn_rx();
        let Ok(d) = RxDescriptor::read_from_bytes(&raw) else {
            return Some(true);
        };
        let multi = d.flags.get() == RX_FLAG_MULTI_RECV;
        let bad = d.flags.get() & !RX_FLAG_MULTI_RECV != 0
            || d.group.get() != 0
            || (!multi && d.min_free.get() != 0);
        if bad {
            self.refuse_rx_descriptor(handle, CompletionKind::Recv, d.context);
            return Some(true);
        }
        if multi {
            self.mrecv_open(handle, &d);
            return Some(self.untagged_into_mrecv(handle, i));
        }
        let u = self.eps.get_mut(handle)?.unexpected.remove(i)?;
        self.deliver_held(
            handle,
            u,
            HeldInto::buffer(d.context, d.buf.get(), d.len.get()),
        );
        Some(true)
    }

    /// Place the message at list position `i` in the current multi-receive buffer.
    fn untagged_into_mrecv(&mut self, handle: u16, i: usize) -> bool {
        let Some(total) = self
            .eps
            .get(handle)
            .and_then(|ep| ep.unexpected.get(i))
            .map(|u| u.total)
        else {
            return false;
        };
        let Some(at) = self.mrecv_place(handle, total, true) else {
            return false;
        };
        let Some(u) = self
            .eps
            .get_mut(handle)
            .and_then(|ep| ep.unexpected.remove(i))
        else {
            return false;
        };
        let into = HeldInto {
            context: at.context,
            buf: at.buf,
            buf_len: at.space,
            flags: at.flags,
            buf_offset: at.offset,
        };
        self.deliver_held(handle, u, into);
        true
    }
}
