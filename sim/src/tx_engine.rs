//! TX engine.
//!
//! `TXQ_DOORBELL` (endpoint handle, new tail) latches an endpoint's TX ring tail; a doorbell
//! for an unknown endpoint or with an index outside the ring is ignored and counted. While the
//! function runs, the engine consumes each endpoint's descriptors in order. It consumes one only
//! when the endpoint's completion ring can take its completion (counting completions already
//! queued and sends still awaiting a response), so a full completion ring stalls the engine and
//! nothing is ever overwritten or dropped.
//!
//! For each [`TxDescriptor`]:
//!
//! 1. Validate: a known opcode (SEND, TAGGED_SEND, WRITE, READ); `flags` only
//!    `TX_FLAG_INJECT`, and that only on SEND or TAGGED_SEND with `len <= MAX_INJECT_BYTES`;
//!    reserved bytes zero; `match_bits` zero for SEND; `remote_offset` zero unless WRITE or
//!    READ, and `remote_offset + len` within 64 bits; `data` zero for WRITE and READ;
//!    `len <= CAP_MAX_MSG`. Otherwise complete with `BadDescriptor`.
//! 2. SEND, TAGGED_SEND, WRITE: read `len` payload bytes from `buf` by DMA. READ: check that
//!    `[buf, buf + len)` is mapped, and writable (the response lands there). A fault completes
//!    with `DmaFault` (and counts `DMA_FAULTS`) before any packet is sent.
//! 3. Translate `dest` through the endpoint's bound AV: the receive context is the top
//!    `rx_ctx_bits` bits, the index the rest. No bound AV, an index beyond the table, an invalid
//!    entry, a resource index (`entry.ri_start + rx_ctx`) beyond 12 bits, or resource index 0
//!    (the control channel) for a send without `TX_FLAG_CONTROL` complete with
//!    `AddrNotAvail`. With peer groups (the AV's `max_group_id` > 0) the index is bits 0–31
//!    and the group the bits above it, below the receive context; a group above
//!    `max_group_id` completes with `BadGroup` and counts `TX_BAD_GROUP` (see
//!    `uet_fwif::datapath`, *Peer groups*). An entry with `MAX_MSG_MTU` (the peer takes
//!    messages of one MTU) refuses a SEND, TAGGED_SEND or WRITE longer than the MTU:
//!    `MsgTooLong`, counted in `TX_MSG_TOO_LONG`, nothing sent. READ requests are one packet
//!    each whatever `len`, so a READ is not refused. An entry with `AUTH_KEY` whose slot
//!    ENDPOINT_AUTH_KEYS did not grant the sending endpoint (a context: its scalable
//!    endpoint), and whose JobID is not the endpoint's own, completes with `KeyNotGranted`,
//!    nothing sent (since interface 1.16: fi_av(3) configures an endpoint with the AV's keys
//!    when it is enabled; before, any key of its AV is used).
//! 4. SEND, TAGGED_SEND, WRITE: segment the message at the MTU (`CAP_PROFILES.mtu`):
//!    `max(1, ceil(len / mtu))` UET packets, all on the PDC to the destination with consecutive
//!    PSNs (SYN until the PDC is established) and one message id (the next of that PDC: ids count per destination, whichever endpoint
//!    sends). Each
//!    packet: source IP = this NIC, destination IP = the entry's fabric address, UDP 4793; PDS
//!    RUD_REQ; SES standard request with the opcode (SEND 0x05, TAGGED_SEND 0x09, WRITE 0x01),
//!    JobID from the entry (from its auth-key slot when the entry has `AUTH_KEY` set; a slot
//!    no longer in use, or owned by another AV, completes `AddrNotAvail`) and PIDonFEP from the entry, resource index `entry.ri_start + rx_ctx`, the
//!    endpoint's initiator id, `match_bits` = the descriptor's (tag or memory key),
//!    `buffer_offset` = `remote_offset` (WRITE) or the peer group (SEND, TAGGED_SEND; 0 for
//!    a control-channel SEND), request_length = `len` (the whole message, in
//!    every packet), then its slice of the payload. Flags: REL unless the entry is absolute;
//!    SOM on the first packet, which also carries header_data = `data` (and HD when `data` is
//!    non-zero); EOM on the last. Every packet but the first carries payload_len (14 bits) and
//!    message_offset (32 bits) in SES bytes 32–39 instead. A one-MTU message is one packet with
//!    SOM|EOM. READ: `max(1, ceil(len / mtu))` single-packet READ requests (SOM|EOM, no
//!    payload), packet `i` with `buffer_offset = remote_offset + i * mtu` and request_length
//!    its share of `len`; the response with data of packet `i` is written by DMA at
//!    `buf + i * mtu`, unless the endpoint that posted the READ was destroyed meanwhile:
//!    its buffers are the host's again once ENDPOINT_DESTROY completes, so the data is
//!    dropped and the response counted stray. `TX_PACKETS` counts packets, `TX_BYTES` payload
//!    bytes sent.
//! 5. The descriptor completes once (`Send`, its `context`, `len`, `opcode`, and
//!    `COMPLETION_FLAG_INJECT` when it was an inject), when the response of every packet has
//!    arrived: all RC_OK gives `Ok`; otherwise the first error decides — another return code
//!    gives `Remote` with that code, a packet the fabric could not route (no NIC owns the
//!    destination address) gives `Unreachable`, a READ response whose data could not be
//!    written gives `DmaFault`, and one whose data length differs from what was asked gives
//!    `Remote` with RC_UNCOR (and counts `RX_MALFORMED`).
//!
//! Every completion other than `Ok` also counts in `TX_ERRORS` and the endpoint's
//! `tx_errors`; a successful one counts in the endpoint's message or RMA counters.
//!
//! A datagram endpoint (`EP_FLAG_DGRAM`) refuses WRITE, READ and messages longer than the MTU
//! (`BadDescriptor`, with the checks of step 1: before any of the buffer is read), sends each SEND or TAGGED_SEND as one PDS UUD_REQ packet (no PDC: no
//! PSN, no SYN, message id 0, source port 0xC000) and completes it `Ok` once the packet is handed to the
//! fabric. `TX_FLAG_CONTROL` (SEND only) puts resource index 0 in the request instead of
//! `entry.ri_start + rx_ctx`. Contexts of an endpoint send with its initiator ID.

use crate::av_table::TranslateError;
use crate::frame::{self, GATEWAY_MAC};
use crate::nic::Nic;
use crate::pds::{Ack, RudRequest, UudRequest};
use crate::ses::{self, Response, StandardRequest};
use std::net::IpAddr;
use uet_fwif::av_entry::entry_flags;
use uet_fwif::datapath::{
    COMPLETION_FLAG_INJECT, MAX_INJECT_BYTES, TX_FLAG_CONTROL, TX_FLAG_INJECT,
};
use uet_fwif::{Completion, CompletionKind, LocalStatus, ReturnCode, TxDescriptor, TxOpcode};
use uet_regs::{
    DMA_FAULTS, RX_MALFORMED, TX_BAD_GROUP, TX_BYTES, TX_ERRORS, TX_MSG_TOO_LONG, TX_PACKETS,
};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromBytes;

/// One packet of a send, waiting for its response; keyed by (SPDCID, PSN).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingPacket {
    /// The send it belongs to (key of `Nic::tx_messages`).
    pub msg: u64,
    pub dst: IpAddr,
    pub message_id: u16,
    /// READ: where the response's data goes, and how many bytes were asked.
    pub read: Option<(u64, u32)>,
}

/// A TX descriptor whose packets are in flight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingSend {
    pub handle: u16,
    pub serial: u64,
    pub context: u64,
    pub len: u32,
    pub op: TxOpcode,
    pub inject: bool,
    /// Packets still waiting for their response.
    pub packets_left: u32,
    /// The first failure among the responses so far.
    pub first_error: Option<(LocalStatus, u8)>,
}

fn send_completion(
    context: u64,
    len: u32,
    opcode: u8,
    inject: bool,
    status: LocalStatus,
    rc: u8,
) -> Completion {
    Completion {
        context: U64::new(context),
        len: U32::new(len),
        status: status as u8,
        return_code: rc,
        kind: CompletionKind::Send as u8,
        flags: if inject { COMPLETION_FLAG_INJECT } else { 0 },
        opcode,
        ..Completion::default()
    }
}

/// Whether a descriptor breaks the rules of step 1.
fn malformed(d: &TxDescriptor, max_msg: u32) -> Option<TxOpcode> {
    let op = TxOpcode::from_u8(d.opcode)?;
    let len = d.len.get();
    let inject = d.flags & TX_FLAG_INJECT != 0;
    let control = d.flags & TX_FLAG_CONTROL != 0;
    let ok = d.flags & !(TX_FLAG_INJECT | TX_FLAG_CONTROL) == 0
        && (!control || op == TxOpcode::Send)
        && d.reserved0 == [0; 2]
        && d.reserved1 == [0; 8]
        && len <= max_msg
        && d.remote_offset.get().checked_add(u64::from(len)).is_some()
        && match op {
            TxOpcode::Send => d.match_bits.get() == 0 && d.remote_offset.get() == 0,
            TxOpcode::TaggedSend => d.remote_offset.get() == 0,
            TxOpcode::Write | TxOpcode::Read => d.data.get() == 0 && !inject,
        }
        && (!inject || len as usize <= MAX_INJECT_BYTES);
    ok.then_some(op)
}

impl Nic {
    /// Consume an endpoint's TX descriptors while its completion ring has room.
    pub(crate) fn tx_poll(&mut self, handle: u16) -> bool {
        let mut progress = false;
        while let Some(ep) = self.eps.get_mut(handle) {
            if ep.faulted || !ep.tx.pending() {
                break;
            }
            if !ep.cq_has_room() {
                self.counters.debug.cq_stalls += 1;
                break;
            }
            let at = ep.tx.base + u64::from(ep.tx.head) * 64;
            let mut raw = [0u8; 64];
            if self.iommu.read(at, &mut raw).is_err() {
                self.ring_fault(handle);
                break;
            }
            ep.tx.head = ep.tx.geom.next(ep.tx.head);
            progress = true;
            if let Ok(d) = TxDescriptor::read_from_bytes(&raw) {
                self.tx_one(handle, &d);
            }
        }
        progress
    }

    fn tx_fail(&mut self, handle: u16, d: &TxDescriptor, status: LocalStatus) {
        self.counters.inc(TX_ERRORS);
        if let Some(ep) = self.eps.get_mut(handle) {
            ep.stats.tx_errors = ep.stats.tx_errors.wrapping_add(1);
        }
        let inject = d.flags & TX_FLAG_INJECT != 0;
        let c = send_completion(d.context.get(), d.len.get(), d.opcode, inject, status, 0);
        self.post_completion(handle, c);
    }

    /// Whether endpoint `owner` (a context's scalable endpoint, which holds its grants) may
    /// send with the JobID `job` of auth-key slot `slot`: its own JobID, or a slot
    /// ENDPOINT_AUTH_KEYS granted it (since interface 1.16; before, any key of its AV).
    fn may_send_with(&self, owner: u16, slot: u16, job: u32) -> bool {
        if self.cfg.interface_minor < uet_regs::since::TX_AUTH_KEY_GRANTS {
            return true;
        }
        self.eps
            .get(owner)
            .is_some_and(|ep| ep.job_id == job || ep.auth_slots.contains(&slot))
    }

    fn tx_one(&mut self, handle: u16, d: &TxDescriptor) {
        let len = d.len.get();
        let Some(op) = malformed(d, self.cfg.max_msg) else {
            return self.tx_fail(handle, d, LocalStatus::BadDescriptor);
        };
        // What a datagram endpoint cannot carry is refused as the descriptor it is, before
        // any of its buffer is read: no DMA fault for a buffer it would never use, and no
        // copy of a message it would not send.
        let dgram_refuses = op.is_rma() || len > u32::from(self.cfg.mtu);
        if dgram_refuses && self.eps.get(handle).is_some_and(|ep| ep.dgram) {
            return self.tx_fail(handle, d, LocalStatus::BadDescriptor);
        }
        let mut payload = Vec::new();
        let local = if op == TxOpcode::Read {
            // The response lands there: the memory must be writable, as well as mapped.
            self.iommu.check_access(d.buf.get(), u64::from(len), true)
        } else {
            payload.resize(len as usize, 0);
            self.iommu.read(d.buf.get(), &mut payload)
        };
        if local.is_err() {
            self.dma_fault();
            return self.tx_fail(handle, d, LocalStatus::DmaFault);
        }
        let Some(ep) = self.eps.get(handle) else {
            return;
        };
        let (serial, initiator, av, owner, dgram) =
            (ep.serial, ep.initiator, ep.av, ep.owner, ep.dgram);
        let translated = match self.avs.get(av) {
            Some(t) => t.translate(d.dest.get()),
            None => Err(TranslateError::NotAvail),
        };
        let to = match translated {
            Ok(to) => to,
            Err(TranslateError::NotAvail) => {
                return self.tx_fail(handle, d, LocalStatus::AddrNotAvail);
            }
            Err(TranslateError::BadGroup) => {
                self.counters.inc(TX_BAD_GROUP);
                return self.tx_fail(handle, d, LocalStatus::BadGroup);
            }
        };
        let (entry, rx_ctx) = (to.entry, to.rx_ctx);
        let control = d.flags & TX_FLAG_CONTROL != 0;
        let ri = if control {
            0 // the destination's control channel
        } else {
            u64::from(entry.ri_start.get()) + rx_ctx
        };
        // SEND and TAGGED_SEND carry the peer group where RMA carries its offset.
        let buffer_offset = match op {
            TxOpcode::Write | TxOpcode::Read => d.remote_offset.get(),
            _ if control => 0,
            _ => u64::from(to.group),
        };
        // Index 0 is the control channel of the target's providers: only a control send
        // (TX_FLAG_CONTROL) goes there; an entry whose range starts at 0 reaches no endpoint.
        if ri > 0x0FFF || (ri == 0 && !control) {
            return self.tx_fail(handle, d, LocalStatus::AddrNotAvail);
        }
        let job_id = match entry.auth_key_slot() {
            None => entry.job_id.get(),
            Some(slot) => match self.auths.job_of_av(slot, av) {
                Some(job) if self.may_send_with(owner, slot, job) => job,
                Some(_) => return self.tx_fail(handle, d, LocalStatus::KeyNotGranted),
                None => return self.tx_fail(handle, d, LocalStatus::AddrNotAvail),
            },
        };
        // A peer that takes messages of one MTU: nothing that would need a second packet.
        if entry.max_msg_mtu() && op != TxOpcode::Read && len > u32::from(self.cfg.mtu) {
            self.counters.inc(TX_MSG_TOO_LONG);
            return self.tx_fail(handle, d, LocalStatus::MsgTooLong);
        }
        let dst = entry.fabric_ip();
        if dst.is_ipv4() != self.cfg.fabric_addr.is_ipv4() {
            return self.tx_fail(handle, d, LocalStatus::Unreachable);
        }
        // Message ids count per PDC (`PdcTable::next_message_id`): the target keys
        // multi-packet messages by their PDC and id, and tells an id used again after the
        // ids wrapped by the PSNs every message of the PDC takes. A datagram travels in no
        // PDC and takes no id of one (it carries 0).
        if self.eps.get(owner).is_none() {
            return;
        }
        let message_id = if dgram {
            0
        } else {
            self.pdcs.next_message_id(dst)
        };
        let mut base_flags = 0;
        if entry.flags.get() & entry_flags::ABSOLUTE == 0 {
            base_flags |= ses::FLAG_REL;
        }
        let mut req = StandardRequest {
            opcode: match op {
                TxOpcode::Send => ses::OP_SEND,
                TxOpcode::TaggedSend => ses::OP_TAGGED_SEND,
                TxOpcode::Write => ses::OP_WRITE,
                TxOpcode::Read => ses::OP_READ,
            },
            flags: base_flags,
            message_id,
            ri_generation: 0,
            job_id,
            pid_on_fep: entry.pid_on_fep.get(),
            resource_index: ri as u16,
            buffer_offset,
            initiator,
            match_bits: d.match_bits.get(),
            header_data: 0,
            request_length: len,
        };
        if dgram {
            return self.tx_datagram(handle, d, op, req, dst, &payload);
        }
        let mtu = usize::from(self.cfg.mtu.max(1));
        let count = (len as usize).div_ceil(mtu).max(1);
        let msg = self.next_tx_msg;
        self.next_tx_msg = self.next_tx_msg.wrapping_add(1);
        let mut frames = Vec::with_capacity(count);
        let read_sizes: Vec<usize> = if op == TxOpcode::Read {
            (0..count)
                .map(|i| (len as usize - (i * mtu).min(len as usize)).min(mtu))
                .collect()
        } else {
            Vec::new()
        };
        let chunks: Vec<&[u8]> = if op == TxOpcode::Read {
            vec![&[][..]; count]
        } else {
            payload
                .chunks(mtu)
                .chain(payload.is_empty().then_some(&[][..]))
                .collect()
        };
        for (i, chunk) in chunks.into_iter().enumerate() {
            let offset = i * mtu;
            req.flags = base_flags;
            let mut read = None;
            if let Some(&n) = read_sizes.get(i) {
                // Each READ packet is a request of its own: SOM|EOM, no payload.
                req.flags |= ses::FLAG_SOM | ses::FLAG_EOM;
                req.buffer_offset = d.remote_offset.get().wrapping_add(offset as u64);
                req.request_length = n as u32;
                req.header_data = 0;
                read = Some((d.buf.get().wrapping_add(offset as u64), n as u32));
            } else {
                if i == 0 {
                    req.flags |= ses::FLAG_SOM;
                    req.header_data = d.data.get();
                    if req.header_data != 0 {
                        req.flags |= ses::FLAG_HD;
                    }
                } else {
                    // chunk.len() <= mtu <= MAX_MTU (14 bits); offset < len (32 bits).
                    req.header_data = ses::segment_word(chunk.len() as u16, offset as u32);
                }
                if i + 1 == count {
                    req.flags |= ses::FLAG_EOM;
                }
            }
            let pds = self.pdcs.next_request(dst);
            let mut pkt = Vec::with_capacity(
                crate::pds::RUD_REQ_BYTES + ses::STD_REQUEST_BYTES + chunk.len(),
            );
            pds.encode(&mut pkt);
            req.encode(&mut pkt);
            pkt.extend_from_slice(chunk);
            let src_port = 0xC000 | (pds.spdcid & 0x3FFF);
            match frame::build(
                self.cfg.mac,
                GATEWAY_MAC,
                self.cfg.fabric_addr,
                dst,
                src_port,
                &pkt,
            ) {
                Ok(f) => frames.push(((pds.spdcid, pds.psn), f, chunk.len(), read)),
                Err(_) => {
                    // None of the message's requests goes out: none will be answered.
                    for _ in 0..=frames.len() {
                        self.pdcs.request_unanswered(dst);
                    }
                    return self.tx_fail(handle, d, LocalStatus::BadDescriptor);
                }
            }
        }
        self.tx_messages.insert(
            msg,
            PendingSend {
                handle,
                serial,
                context: d.context.get(),
                len,
                op,
                inject: d.flags & TX_FLAG_INJECT != 0,
                packets_left: frames.len() as u32,
                first_error: None,
            },
        );
        if let Some(ep) = self.eps.get_mut(handle) {
            ep.outstanding += 1;
        }
        for (key, f, bytes, read) in frames {
            self.pending_tx.insert(
                key,
                PendingPacket {
                    msg,
                    dst,
                    message_id,
                    read,
                },
            );
            self.counters.inc(TX_PACKETS);
            self.counters.add(TX_BYTES, bytes as u64);
            self.outbox.push(f);
        }
    }

    /// Send one datagram (UUD) and complete the descriptor: the packet is on the fabric, and
    /// nothing will answer it.
    fn tx_datagram(
        &mut self,
        handle: u16,
        d: &TxDescriptor,
        op: TxOpcode,
        mut req: StandardRequest,
        dst: IpAddr,
        payload: &[u8],
    ) {
        req.flags |= ses::FLAG_SOM | ses::FLAG_EOM;
        req.header_data = d.data.get();
        if req.header_data != 0 {
            req.flags |= ses::FLAG_HD;
        }
        let mut pkt =
            Vec::with_capacity(crate::pds::UUD_REQ_BYTES + ses::STD_REQUEST_BYTES + payload.len());
        UudRequest {
            next_hdr: crate::pds::NEXT_HDR_REQUEST_STD,
        }
        .encode(&mut pkt);
        req.encode(&mut pkt);
        pkt.extend_from_slice(payload);
        let f = match frame::build(
            self.cfg.mac,
            GATEWAY_MAC,
            self.cfg.fabric_addr,
            dst,
            0xC000,
            &pkt,
        ) {
            Ok(f) => f,
            Err(_) => return self.tx_fail(handle, d, LocalStatus::BadDescriptor),
        };
        self.counters.inc(TX_PACKETS);
        self.counters.add(TX_BYTES, payload.len() as u64);
        self.counters.debug.tx_datagrams += 1;
        self.outbox.push(f);
        let Some(ep) = self.eps.get(handle) else {
            return;
        };
        let p = PendingSend {
            handle,
            serial: ep.serial,
            context: d.context.get(),
            len: d.len.get(),
            op,
            inject: d.flags & TX_FLAG_INJECT != 0,
            packets_left: 0,
            first_error: None,
        };
        if let Some(ep) = self.eps.get_mut(handle) {
            ep.outstanding += 1; // finish_send returns it
        }
        self.finish_send(&p);
    }

    /// Complete the send a response answers; `data` follows a response with data.
    pub(crate) fn on_response(&mut self, src: IpAddr, ack: &Ack, resp: &Response, data: &[u8]) {
        let key = (ack.dpdcid, ack.cack_psn);
        let matches = self
            .pending_tx
            .get(&key)
            .is_some_and(|p| p.dst == src && p.message_id == resp.message_id);
        if !matches || !self.pdcs.initiator_matches(src, ack.dpdcid) {
            self.counters.debug.stray_responses += 1;
            return;
        }
        let Some(p) = self.pending_tx.remove(&key) else {
            return;
        };
        self.pdcs.ack_received(src, ack.spdcid);
        let ok = resp.return_code == ReturnCode::Ok as u8;
        match p.read {
            // The READ's endpoint was destroyed while the request was out: ENDPOINT_DESTROY
            // gave the host back every buffer its descriptors named, so the data is dropped
            // (the send itself completes nowhere, as `finish_send` finds no endpoint).
            Some(_) if ok && !self.send_alive(p.msg) => {
                self.counters.debug.stray_responses += 1;
                self.packet_done(p.msg, resp.return_code, None);
            }
            Some((at, asked)) if ok => {
                if data.len() != asked as usize || resp.modified_length != asked {
                    self.counters.inc(RX_MALFORMED);
                    let rc = ReturnCode::Uncorrectable as u8;
                    self.packet_done(p.msg, rc, Some(LocalStatus::Remote));
                } else if self.iommu.write(at, data).is_err() {
                    self.counters.inc(DMA_FAULTS);
                    self.packet_done(p.msg, 0, Some(LocalStatus::DmaFault));
                } else {
                    self.packet_done(p.msg, resp.return_code, None);
                }
            }
            _ => self.packet_done(p.msg, resp.return_code, None),
        }
    }

    /// Whether send `msg` still belongs to a live endpoint: the one that posted it, not a later
    /// endpoint given the same handle.
    fn send_alive(&self, msg: u64) -> bool {
        self.tx_messages.get(&msg).is_some_and(|m| {
            self.eps
                .get(m.handle)
                .is_some_and(|ep| ep.serial == m.serial)
        })
    }

    /// One packet of send `msg` was answered (`rc`) or failed locally; the send completes with
    /// its last packet.
    fn packet_done(&mut self, msg: u64, rc: u8, local: Option<LocalStatus>) {
        let Some(m) = self.tx_messages.get_mut(&msg) else {
            return;
        };
        if m.first_error.is_none() {
            m.first_error = match local {
                Some(s) => Some((s, rc)),
                None if rc == ReturnCode::Ok as u8 => None,
                None => Some((LocalStatus::Remote, rc)),
            };
        }
        m.packets_left = m.packets_left.saturating_sub(1);
        if m.packets_left > 0 {
            return;
        }
        if let Some(m) = self.tx_messages.remove(&msg) {
            self.finish_send(&m);
        }
    }

    fn finish_send(&mut self, p: &PendingSend) {
        let Some(ep) = self.eps.get_mut(p.handle).filter(|e| e.serial == p.serial) else {
            return; // the endpoint is gone
        };
        ep.outstanding = ep.outstanding.saturating_sub(1);
        let (status, rc) = p
            .first_error
            .unwrap_or((LocalStatus::Ok, ReturnCode::Ok as u8));
        let st = &mut ep.stats;
        let len = u64::from(p.len);
        if status != LocalStatus::Ok {
            st.tx_errors = st.tx_errors.wrapping_add(1);
            self.counters.inc(TX_ERRORS);
        } else {
            match p.op {
                TxOpcode::Send | TxOpcode::TaggedSend => {
                    st.tx_messages = st.tx_messages.wrapping_add(1);
                    st.tx_bytes = st.tx_bytes.wrapping_add(len);
                    if p.op == TxOpcode::TaggedSend {
                        st.tx_tagged_messages = st.tx_tagged_messages.wrapping_add(1);
                    }
                    if p.inject {
                        st.tx_inject_messages = st.tx_inject_messages.wrapping_add(1);
                    }
                }
                TxOpcode::Write => {
                    st.rma_writes = st.rma_writes.wrapping_add(1);
                    st.rma_write_bytes = st.rma_write_bytes.wrapping_add(len);
                }
                TxOpcode::Read => {
                    st.rma_reads = st.rma_reads.wrapping_add(1);
                    st.rma_read_bytes = st.rma_read_bytes.wrapping_add(len);
                }
            }
        }
        let c = send_completion(p.context, p.len, p.op as u8, p.inject, status, rc);
        self.post_completion(p.handle, c);
    }

    /// The fabric found no NIC at the destination of a frame this NIC sent.
    pub(crate) fn on_unreachable(&mut self, f: &[u8]) {
        let Ok(dg) = frame::parse(f) else {
            return;
        };
        let Ok((req, _)) = RudRequest::parse(dg.payload) else {
            return; // a response to a vanished initiator: nothing waits for it
        };
        if let Some(p) = self.pending_tx.remove(&(req.spdcid, req.psn)) {
            self.pdcs.request_unanswered(p.dst);
            self.packet_done(p.msg, 0, Some(LocalStatus::Unreachable));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NicConfig;
    use crate::iommu::DmaAccess;
    use std::os::fd::AsFd;

    /// A READ response that comes after ENDPOINT_DESTROY of the endpoint that posted the READ
    /// writes nothing: the destroy gave its buffer back to the host, which may have handed it
    /// to someone else.
    #[test]
    fn a_read_response_after_its_endpoint_is_destroyed_writes_nothing() {
        let mut nic = Nic::new(NicConfig::new("10.0.0.1".parse().unwrap()));
        // Host memory: a file the model maps as it maps the driver's memfd.
        let path =
            std::env::temp_dir().join(format!("uet-sim-read-after-destroy-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        file.set_len(4096).unwrap();
        let iova = 1 << 32;
        nic.iommu
            .map(iova, 4096, file.as_fd(), 0, DmaAccess::READ_WRITE)
            .unwrap();
        // A READ of 4 bytes from `peer` into `iova`, posted by endpoint 1, which no longer
        // exists (no endpoint was created with that handle since).
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        let req = nic.pdcs.next_request(peer);
        let message_id = nic.pdcs.next_message_id(peer);
        nic.tx_messages.insert(
            0,
            PendingSend {
                handle: 1,
                serial: 1,
                context: 0,
                len: 4,
                op: TxOpcode::Read,
                inject: false,
                packets_left: 1,
                first_error: None,
            },
        );
        nic.pending_tx.insert(
            (req.spdcid, req.psn),
            PendingPacket {
                msg: 0,
                dst: peer,
                message_id,
                read: Some((iova, 4)),
            },
        );
        let ack = Ack {
            next_hdr: crate::pds::NEXT_HDR_RESPONSE_DATA,
            flags: 0,
            ack_psn_offset: 0,
            cack_psn: req.psn,
            spdcid: 9,
            dpdcid: req.spdcid,
        };
        let resp = Response {
            opcode: ses::OP_RESPONSE_WITH_DATA,
            return_code: ReturnCode::Ok as u8,
            message_id,
            modified_length: 4,
            ..Response::default()
        };
        nic.on_response(peer, &ack, &resp, b"late");
        let mut now = [0xAAu8; 4];
        nic.iommu.read(iova, &mut now).unwrap();
        assert_eq!(
            now, [0; 4],
            "the late data reached a buffer the host owns again"
        );
        assert!(nic.pending_tx.is_empty() && nic.tx_messages.is_empty());
        assert_eq!(nic.counters.debug.stray_responses, 1);
    }
}
