//! Tag-matching unit: tagged RX rings, posted tagged receives and the unexpected list.
//!
//! Each endpoint created with a tagged RX ring (ENDPOINT_CREATE `trx_log2` > 0) has:
//!
//! * a **posted list**: tagged receives in posting order. `TRXQ_DOORBELL` latches the ring's
//!   tail; while the function runs, the unit reads each new [`TaggedRxDescriptor`] — only when
//!   the endpoint's completion ring can take one more completion, and only while the posted
//!   list holds fewer receives than the ring has entries — and frees its ring entry at once.
//!   A descriptor with reserved fields set, flags other than a probe's (since interface 1.18;
//!   before, any flag), or a `group` the endpoint does not receive (not 0 without peer
//!   groups, above the AV's `max_group_id` with them), completes `BadDescriptor`
//!   (`TaggedRecv`; tagged receives have no multi-receive form). A probe (`TRX_FLAG_PEEK`,
//!   `_CLAIM`, `_DISCARD`) is `probe`'s and completes at once. Otherwise
//!   it first takes the oldest unclaimed message of the unexpected list of its peer group
//!   whose match bits it matches (`(tag ^ match_bits) & !ignore == 0`); only when none does, it joins the
//!   posted list.
//! * an **unexpected list**: tagged messages that found no matching posted receive — and,
//!   since interface 1.17, untagged messages that found no receive buffer
//!   (`untagged_unexpected`), which share its bounds and no tagged receive takes — in order
//!   of their first packet's arrival, bounded by `CAP_TAGGED.unexpected_entries` messages and
//!   `CAP_TAGGED.unexpected_kib` KiB (whole `request_length` of each message counts from its
//!   first packet). The message's bytes are held in NIC memory; its packets are answered RC_OK
//!   on the overflow list (SES response `list` = 1), so the initiator's send completes — late
//!   copies of them too, after a receive took the message (`rx_engine`). A
//!   message that would exceed a bound — or a multi-packet one while every reassembly slot is
//!   in use — is refused RC_UNDELIVERABLE (the rest of its packets get the same answer) and
//!   counted in `RX_UNEXPECTED_OVERFLOW` and the endpoint's `rejected[RC_UNDELIVERABLE]`.
//!   Messages accepted onto the list count in `RX_UNEXPECTED` and the endpoint's
//!   `rx_unexpected`.
//!
//! An arriving TAGGED_SEND (after the checks of `rx_engine`) takes the first posted receive
//! of its peer group (0 without peer groups) whose tag matches, in posting order — a receive
//! of another group never matches, and never holds up one of the message's group — provided
//! the completion ring has room (else it waits in the endpoint's receive backlog like any
//! request). A message no posted receive matches also waits there while the tagged RX ring
//! holds receives the unit has not read (none is read while the completion ring is full), as
//! long as the posted list has room for them: one of them may be the message's, and the
//! message would otherwise take a place on the unexpected list, or be refused for want of one,
//! although its receive was posted. A receive that matched a multi-packet
//! message still arriving on the unexpected list is bound to it and completes when its last
//! byte arrives. Delivery copies the message into the receive's buffer, truncated to it
//! (status `Truncated`), and writes one `TaggedRecv` completion carrying the message's match
//! bits in `tag`, the remote CQ data and the source `fi_addr_t`, looked up when the receive
//! takes the message (see `rx_engine`).
//!
//! ENDPOINT_DESTROY drops both lists with the endpoint.

use crate::nic::Nic;
use crate::probe;
use crate::rx_engine::{MsgKey, ParsedRequest, Reassembly, RxOutcome, Sink};
use crate::ses;
use uet_fwif::datapath::TAGGED_RX_DESCRIPTOR_BYTES;
use uet_fwif::{Completion, CompletionKind, LocalStatus, ReturnCode, TaggedRxDescriptor};
use uet_regs::{RX_BYTES, RX_PACKETS, RX_UNEXPECTED, RX_UNEXPECTED_OVERFLOW};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromBytes;

/// Where a message taken off the unexpected list goes: the receive that took it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeldInto {
    pub context: U64,
    pub buf: u64,
    pub buf_len: u32,
    /// Completion flags (a multi-receive buffer's).
    pub flags: u8,
    /// Where the message starts in a multi-receive buffer (0 otherwise).
    pub buf_offset: u32,
}

impl HeldInto {
    /// A receive's whole buffer: the descriptor's `context`, IOVA `buf` and length `len`.
    pub(crate) fn buffer(context: U64, buf: u64, len: u32) -> Self {
        HeldInto {
            context,
            buf,
            buf_len: len,
            flags: 0,
            buf_offset: 0,
        }
    }
}

/// A tagged receive on the posted list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PostedTagged {
    pub desc: TaggedRxDescriptor,
}

/// A message on the unexpected list: tagged, or (since interface 1.17) untagged, see
/// `untagged_unexpected`.
#[derive(Debug)]
pub(crate) struct Unexpected {
    pub key: MsgKey,
    /// A TAGGED_SEND (only a tagged receive takes it) or a SEND (only an untagged one does).
    pub tagged: bool,
    /// The match bits (0 for a SEND).
    pub tag: u64,
    /// The message's peer group: only a receive of the same group takes it.
    pub group: u32,
    pub header_data: u64,
    /// The request's JobID: with its sender, what the source a receive that takes the
    /// message reports is looked up by, then.
    pub job_id: u32,
    pub total: u32,
    /// The message's bytes, once every one has arrived.
    pub data: Option<Vec<u8>>,
    /// A receive that matched it before its last byte arrived.
    pub bound: Option<TaggedRxDescriptor>,
    /// The claim a `PEEK | CLAIM` probe marked it with (`probe`): only a `CLAIM` naming it
    /// takes it.
    pub claim: Option<u64>,
}

impl Nic {
    /// Read an endpoint's new tagged receives (see the module docs).
    pub(crate) fn trx_poll(&mut self, handle: u16) -> bool {
        let mut progress = false;
        while let Some(ep) = self.eps.get_mut(handle) {
            let Some(trx) = ep.trx else {
                break;
            };
            if ep.faulted || !trx.pending() {
                break;
            }
            if ep.posted_tagged.len() >= trx.geom.entries() as usize {
                break;
            }
            if !ep.cq_has_room() {
                self.counters.debug.cq_stalls += 1;
                break;
            }
            let at = trx.base + u64::from(trx.head) * TAGGED_RX_DESCRIPTOR_BYTES as u64;
            if let Some(r) = ep.trx.as_mut() {
                r.head = r.geom.next(r.head);
            }
            let mut raw = [0u8; TAGGED_RX_DESCRIPTOR_BYTES];
            if self.iommu.read(at, &mut raw).is_err() {
                self.ring_fault(handle);
                break;
            }
            progress = true;
            let Ok(d) = TaggedRxDescriptor::read_from_bytes(&raw) else {
                continue;
            };
            self.trx_post(handle, d);
        }
        progress
    }

    fn trx_post(&mut self, handle: u16, d: TaggedRxDescriptor) {
        let Some(ep) = self.eps.get_mut(handle) else {
            return;
        };
        let probes = self.cfg.interface_minor >= uet_regs::since::TAGGED_PROBE;
        if !probe::well_formed(&d, probes) || d.group.get() > ep.max_group.unwrap_or(0) {
            return self.refuse_rx_descriptor(handle, CompletionKind::TaggedRecv, d.context);
        }
        if d.flags.get() != 0 {
            return self.probe(handle, &d);
        }
        let found = ep.unexpected.iter().position(|u| {
            u.tagged && u.bound.is_none() && u.claim.is_none() && d.matches_in_group(u.group, u.tag)
        });
        let Some(i) = found else {
            ep.posted_tagged.push_back(PostedTagged { desc: d });
            return;
        };
        if ep.unexpected.get(i).is_some_and(|u| u.data.is_some()) {
            if let Some(u) = ep.unexpected.remove(i) {
                self.deliver_unexpected(handle, u, &d);
            }
        } else if let Some(u) = ep.unexpected.get_mut(i) {
            u.bound = Some(d);
            ep.reassembling += 1; // its completion is promised
        }
    }

    /// Copy a complete unexpected message into a tagged receive and complete it.
    fn deliver_unexpected(&mut self, handle: u16, u: Unexpected, d: &TaggedRxDescriptor) {
        self.deliver_held(
            handle,
            u,
            HeldInto::buffer(d.context, d.buf.get(), d.len.get()),
        );
    }

    /// Copy a complete message taken off the unexpected list into the buffer of the receive
    /// that took it (truncated to it), and complete that receive: `TaggedRecv` for a tagged
    /// message, `Recv` for an untagged one. The source is looked up now.
    pub(crate) fn deliver_held(&mut self, handle: u16, u: Unexpected, into: HeldInto) {
        let data = u.data.unwrap_or_default();
        if let Some(ep) = self.eps.get_mut(handle) {
            ep.unexpected_bytes = ep.unexpected_bytes.saturating_sub(u64::from(u.total));
            if !u.tagged {
                ep.unexpected_untagged = ep.unexpected_untagged.saturating_sub(1);
            }
        }
        let n = data.len().min(into.buf_len as usize);
        let av = self.eps.get(handle).map_or(0, |ep| ep.av);
        let (ip, initiator) = u.key.sender();
        let src_addr = self.sender_source(av, handle, ip, initiator, u.job_id);
        let kind = if u.tagged {
            CompletionKind::TaggedRecv
        } else {
            CompletionKind::Recv
        };
        let mut c = Completion {
            context: into.context,
            data: U64::new(u.header_data),
            src_addr: U64::new(src_addr),
            tag: U64::new(u.tag),
            len: U32::new(n as u32),
            group: U32::new(u.group),
            status: LocalStatus::Ok as u8,
            return_code: ReturnCode::Ok as u8,
            kind: kind as u8,
            flags: into.flags,
            buf_offset: U32::new(into.buf_offset),
            ..Completion::default()
        };
        if n < data.len() {
            c.status = LocalStatus::Truncated as u8;
            c.overflow = U32::new((data.len() - n) as u32);
        }
        let bytes = data.get(..n).unwrap_or(&[]);
        if self.iommu.write(into.buf, bytes).is_err() {
            self.dma_fault();
            c.status = LocalStatus::DmaFault as u8;
            c.return_code = ReturnCode::HostUnsuccessfulCompletion as u8;
            c.len = U32::ZERO;
            c.overflow = U32::ZERO;
        }
        self.post_completion(handle, c);
    }

    /// The last byte of a multi-packet unexpected message arrived.
    pub(crate) fn unexpected_complete(
        &mut self,
        handle: u16,
        serial: u64,
        key: MsgKey,
        data: Vec<u8>,
        header_data: u64,
    ) {
        let Some(ep) = self.eps.get_mut(handle).filter(|e| e.serial == serial) else {
            return;
        };
        // The entry still waiting for its bytes: a complete one with the same key is an older
        // message whose id the sender has since given again.
        let Some(i) = ep
            .unexpected
            .iter()
            .position(|u| u.key == key && u.data.is_none())
        else {
            return;
        };
        let bound = ep.unexpected.get(i).and_then(|u| u.bound);
        match bound {
            Some(d) => {
                ep.reassembling = ep.reassembling.saturating_sub(1);
                if let Some(mut u) = ep.unexpected.remove(i) {
                    u.data = Some(data);
                    u.header_data = header_data;
                    self.deliver_unexpected(handle, u, &d);
                }
            }
            None => {
                if let Some(u) = ep.unexpected.get_mut(i) {
                    u.data = Some(data);
                    u.header_data = header_data;
                }
            }
        }
    }

    /// A TAGGED_SEND packet that opens a message (single-packet, or the first packet of a
    /// multi-packet message to arrive) for endpoint `handle`.
    pub(crate) fn rx_tagged(
        &mut self,
        handle: u16,
        serial: u64,
        p: &ParsedRequest<'_>,
        f: &[u8],
        from_backlog: bool,
    ) -> RxOutcome {
        // Receives the doorbell announced and the unit has not read yet join the posted list
        // first (as far as the completion ring has room), as with peer groups.
        self.trx_poll(handle);
        let tag = p.ses.match_bits;
        let single = p.single();
        let Some(ep) = self.eps.get(handle) else {
            return RxOutcome::Done;
        };
        let av = ep.av;
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        let group = p.group;
        let Some(i) = ep
            .posted_tagged
            .iter()
            .position(|r| r.desc.matches_in_group(group, tag))
        else {
            // Receives the doorbell announced that the unit could not read (it reads none
            // while the completion ring is full, see the poll above) may hold the message's:
            // it waits for them to be read rather than take a place on the unexpected list,
            // or be refused for want of one.
            let unread = ep
                .trx
                .is_some_and(|t| t.pending() && ep.posted_tagged.len() < t.geom.entries() as usize);
            if unread {
                return self.hold_for_cq_room(handle, p, f, from_backlog);
            }
            return self.rx_unexpected(handle, serial, p, CompletionKind::TaggedRecv);
        };
        if !ep.cq_has_room() {
            return self.hold_for_cq_room(handle, p, f, from_backlog);
        }
        if !single && !self.reasm.has_room(self.cfg.reassembly_slots, &self.eps) {
            self.counters.debug.reassembly_overflows += 1;
            self.refuse(handle, p, ReturnCode::Undeliverable);
            return RxOutcome::Done;
        }
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        let Some(r) = ep.posted_tagged.remove(i) else {
            return RxOutcome::Done;
        };
        let d = r.desc;
        if single {
            let src_addr = self.source_of(av, handle, p);
            let c = Completion {
                context: d.context,
                data: U64::new(p.cq_data()),
                tag: U64::new(tag),
                status: LocalStatus::Ok as u8,
                return_code: ReturnCode::Ok as u8,
                kind: CompletionKind::TaggedRecv as u8,
                ..Completion::default()
            };
            self.deliver_single(handle, p, d.buf.get(), d.len.get(), c, src_addr);
            return RxOutcome::Done;
        }
        let sink = Sink::Host {
            buf: d.buf.get(),
            buf_len: d.len.get(),
        };
        let r = Reassembly::new(
            handle,
            serial,
            sink,
            CompletionKind::TaggedRecv,
            d.context,
            p,
        );
        self.start_reassembly(r, p)
    }

    /// No posted receive takes the message: hold it on the unexpected list, or refuse it
    /// when the list is full. `kind` is the completion its receive will get (`TaggedRecv`,
    /// or `Recv` for an untagged message).
    pub(crate) fn rx_unexpected(
        &mut self,
        handle: u16,
        serial: u64,
        p: &ParsedRequest<'_>,
        kind: CompletionKind,
    ) -> RxOutcome {
        let tagged = kind == CompletionKind::TaggedRecv;
        let single = p.single();
        let total = p.ses.request_length;
        let entries = usize::from(self.cfg.unexpected_entries);
        let budget = u64::from(self.cfg.unexpected_kib) * 1024;
        let fits = self.eps.get(handle).is_some_and(|ep| {
            ep.unexpected.len() < entries && ep.unexpected_bytes + u64::from(total) <= budget
        }) && (single || self.reasm.has_room(self.cfg.reassembly_slots, &self.eps));
        if !fits {
            self.counters.inc(RX_UNEXPECTED_OVERFLOW);
            self.refuse(handle, p, ReturnCode::Undeliverable);
            return RxOutcome::Done;
        }
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        let key = p.key();
        ep.unexpected.push_back(Unexpected {
            key,
            tagged,
            // A SEND's match bits mean nothing: its receive reports no tag.
            tag: if tagged { p.ses.match_bits } else { 0 },
            group: p.group,
            header_data: p.cq_data(),
            job_id: p.ses.job_id,
            total,
            data: single.then(|| p.payload.to_vec()),
            bound: None,
            claim: None,
        });
        ep.unexpected_bytes += u64::from(total);
        if !tagged {
            ep.unexpected_untagged += 1;
        }
        ep.stats.rx_unexpected = ep.stats.rx_unexpected.wrapping_add(1);
        self.counters.inc(RX_UNEXPECTED);
        if single {
            let n = p.payload.len() as u32;
            self.counters.inc(RX_PACKETS);
            self.counters.add(RX_BYTES, u64::from(n));
            self.respond_list(p, ReturnCode::Ok, n, ses::LIST_OVERFLOW, None);
            return RxOutcome::Done;
        }
        let sink = Sink::Staged(vec![0; total as usize]);
        let r = Reassembly::new(handle, serial, sink, kind, U64::ZERO, p);
        self.reasm.active.insert(key, r);
        self.rx_segment(key, p)
    }
}
