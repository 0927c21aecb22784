//! RX engine.
//!
//! Every frame the fabric delivers is parsed strictly — Ethernet, IPv4/IPv6, UDP 4793 (see
//! [`crate::frame`]), then the PDS header and the SES header it announces. A frame that fails
//! any check (truncation, bad checksum, wrong port, wrong destination address, reserved bits,
//! `request_length` different from the payload) counts in `RX_MALFORMED` and is dropped; nothing
//! in it is trusted.
//!
//! A request (PDS RUD_REQ + SES standard request) is always answered by one packet: a PDS ACK
//! followed by an SES response carrying the return code. Demultiplexing follows the UEC
//! reference provider:
//!
//! | check | failure |
//! |---|---|
//! | function running | RC_DISABLED |
//! | relative addressing (REL): an endpoint with the JobID exists | RC_BAD_JOB_ID, `RX_BAD_JOB_ID` |
//! | relative: an endpoint with (JobID, PIDonFEP) exists | RC_BAD_PID, `RX_BAD_PID` |
//! | absolute (REL clear): an absolute-addressing endpoint with the PIDonFEP exists / its JobID matches | RC_BAD_PID / RC_BAD_JOB_ID |
//! | resource index inside the endpoint's range | RC_BAD_INDEX, `RX_BAD_INDEX` |
//! | opcode SEND, single packet (SOM and EOM) | RC_UNSUPPORTED_OP |
//! | a posted RX descriptor | RC_UNDELIVERABLE, `RX_NO_BUFFER` |
//!
//! When the request is deliverable but the endpoint's completion ring has no room, the request
//! waits in the endpoint's receive backlog (later requests for that endpoint queue behind it)
//! until a `CQ_DOORBELL` frees space; it is neither dropped nor answered early.
//!
//! Delivery consumes the next RX descriptor (reserved fields must be zero, else the descriptor
//! completes with `BadDescriptor` and the request is answered RC_UNDELIVERABLE), copies the
//! payload into its buffer by DMA — truncated to the buffer, which completes with `Truncated`
//! but still answers RC_OK — and writes a `Recv` completion: `context`, `len` = bytes
//! delivered, `data` = header_data, `src_addr` = the reverse translation of (source address,
//! initiator id) through the endpoint's bound AV (the entry's user id when it has one,
//! `FI_ADDR_NOTAVAIL` when the sender is not in the AV). `RX_PACKETS` and `RX_BYTES` count it. A
//! DMA fault on the buffer completes with `DmaFault` and answers RC_HOST_UNSUCCESS_CMPL.
//!
//! A response (PDS ACK + SES response) completes the matching send (see
//! [`crate::tx_engine`]); one that matches no outstanding send is dropped and counted.

use crate::frame::{self, Datagram, GATEWAY_MAC};
use crate::nic::Nic;
use crate::pds::{self, Ack, Prologue, RudRequest};
use crate::ses::{self, Response, StandardRequest};
use uet_fwif::{Completion, CompletionKind, LocalStatus, ReturnCode, RxDescriptor};
use uet_regs::{
    RX_BAD_INDEX, RX_BAD_JOB_ID, RX_BAD_PID, RX_BYTES, RX_MALFORMED, RX_NO_BUFFER, RX_PACKETS,
};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromBytes;

/// What became of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxOutcome {
    /// Answered (delivered or rejected).
    Done,
    /// Waiting for completion-ring space.
    Stalled,
}

struct ParsedRequest<'a> {
    dg: Datagram<'a>,
    pds: RudRequest,
    ses: StandardRequest,
    payload: &'a [u8],
}

fn parse_request(f: &[u8]) -> Option<ParsedRequest<'_>> {
    let dg = frame::parse(f).ok()?;
    let (pds, rest) = RudRequest::parse(dg.payload).ok()?;
    if pds.next_hdr != pds::NEXT_HDR_REQUEST_STD {
        return None;
    }
    let (ses, payload) = StandardRequest::parse(rest).ok()?;
    if usize::try_from(ses.request_length).ok()? != payload.len() {
        return None;
    }
    Some(ParsedRequest {
        dg,
        pds,
        ses,
        payload,
    })
}

impl Nic {
    /// A frame arrived from the fabric.
    pub(crate) fn receive(&mut self, f: &[u8]) {
        let Ok(dg) = frame::parse(f) else {
            self.counters.inc(RX_MALFORMED);
            return;
        };
        if dg.dst_ip != self.cfg.fabric_addr {
            self.counters.inc(RX_MALFORMED);
            return;
        }
        match Prologue::peek(dg.payload).map(|p| p.pkt_type) {
            Ok(pds::TYPE_RUD_REQ) => {
                let _ = self.rx_request(f, false);
            }
            Ok(pds::TYPE_ACK) => self.rx_response(&dg),
            _ => self.counters.inc(RX_MALFORMED),
        }
    }

    fn rx_response(&mut self, dg: &Datagram<'_>) {
        let parsed = Ack::parse(dg.payload).ok().and_then(|(ack, rest)| {
            if ack.next_hdr != pds::NEXT_HDR_RESPONSE {
                return None;
            }
            let (resp, _) = Response::parse(rest).ok()?;
            Some((ack, resp))
        });
        match parsed {
            Some((ack, resp)) => self.on_response(dg.src_ip, &ack, &resp),
            None => self.counters.inc(RX_MALFORMED),
        }
    }

    /// Retry an endpoint's backlog; returns whether a request was answered.
    pub(crate) fn rx_backlog_poll(&mut self, handle: u16) -> bool {
        let mut progress = false;
        while let Some(f) = self
            .eps
            .get(handle)
            .and_then(|ep| ep.rx_backlog.front().cloned())
        {
            if self.rx_request(&f, true) == RxOutcome::Stalled {
                break;
            }
            if let Some(ep) = self.eps.get_mut(handle) {
                ep.rx_backlog.pop_front();
            }
            progress = true;
        }
        progress
    }

    fn demux(&mut self, s: &StandardRequest) -> Result<u16, ReturnCode> {
        let handle = if s.flags & ses::FLAG_REL != 0 {
            if !self.eps.has_job(s.job_id) {
                self.counters.inc(RX_BAD_JOB_ID);
                return Err(ReturnCode::BadJobId);
            }
            let Some(h) = self.eps.by_job_pid(s.job_id, s.pid_on_fep) else {
                self.counters.inc(RX_BAD_PID);
                return Err(ReturnCode::BadPid);
            };
            h
        } else {
            // Only an endpoint that uses absolute addressing can be named without its JobID
            // scoping the PIDonFEP.
            let Some(h) = self
                .eps
                .by_pid(s.pid_on_fep)
                .filter(|&h| self.eps.get(h).is_some_and(|e| e.absolute))
            else {
                self.counters.inc(RX_BAD_PID);
                return Err(ReturnCode::BadPid);
            };
            if self.eps.get(h).map(|e| e.job_id) != Some(s.job_id) {
                self.counters.inc(RX_BAD_JOB_ID);
                return Err(ReturnCode::BadJobId);
            }
            h
        };
        let Some(ep) = self.eps.get(handle) else {
            return Err(ReturnCode::BadPid);
        };
        let ri = u32::from(s.resource_index);
        let start = u32::from(ep.ri_start);
        if ri < start || ri >= start + u32::from(ep.ri_count) {
            self.counters.inc(RX_BAD_INDEX);
            return Err(ReturnCode::BadIndex);
        }
        Ok(handle)
    }

    fn rx_request(&mut self, f: &[u8], from_backlog: bool) -> RxOutcome {
        let Some(p) = parse_request(f) else {
            self.counters.inc(RX_MALFORMED);
            return RxOutcome::Done;
        };
        if !self.running() {
            self.counters.debug.rx_while_disabled += 1;
            self.respond(&p, ReturnCode::Disabled, 0);
            return RxOutcome::Done;
        }
        let handle = match self.demux(&p.ses) {
            Ok(h) => h,
            Err(rc) => {
                self.respond(&p, rc, 0);
                return RxOutcome::Done;
            }
        };
        let single = p.ses.flags & (ses::FLAG_SOM | ses::FLAG_EOM) == ses::FLAG_SOM | ses::FLAG_EOM;
        if p.ses.opcode != ses::OP_SEND || !single {
            self.respond(&p, ReturnCode::UnsupportedOp, 0);
            return RxOutcome::Done;
        }
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        if ep.faulted {
            self.respond(&p, ReturnCode::HostUnsuccessfulCompletion, 0);
            return RxOutcome::Done;
        }
        if !from_backlog && !ep.rx_backlog.is_empty() {
            ep.rx_backlog.push_back(f.to_vec());
            return RxOutcome::Stalled;
        }
        if !ep.rx.pending() {
            self.counters.inc(RX_NO_BUFFER);
            self.respond(&p, ReturnCode::Undeliverable, 0);
            return RxOutcome::Done;
        }
        if !ep.cq_has_room() {
            self.counters.debug.cq_stalls += 1;
            if !from_backlog {
                ep.rx_backlog.push_back(f.to_vec());
            }
            return RxOutcome::Stalled;
        }
        let at = ep.rx.base + u64::from(ep.rx.head) * 32;
        let mut raw = [0u8; 32];
        if self.iommu.read(at, &mut raw).is_err() {
            self.ring_fault(handle);
            self.respond(&p, ReturnCode::HostUnsuccessfulCompletion, 0);
            return RxOutcome::Done;
        }
        ep.rx.head = ep.rx.geom.next(ep.rx.head);
        let av = ep.av;
        let Ok(d) = RxDescriptor::read_from_bytes(&raw) else {
            return RxOutcome::Done;
        };
        let mut c = Completion {
            context: d.context,
            data: U64::new(p.ses.header_data),
            src_addr: U64::new(uet_fwif::FI_ADDR_NOTAVAIL),
            len: U32::ZERO,
            status: LocalStatus::Ok as u8,
            return_code: ReturnCode::Ok as u8,
            kind: CompletionKind::Recv as u8,
            phase: 0,
        };
        if d.flags.get() != 0 || d.reserved.get() != 0 {
            c.status = LocalStatus::BadDescriptor as u8;
            c.return_code = ReturnCode::Undeliverable as u8;
            self.post_completion(handle, c);
            self.respond(&p, ReturnCode::Undeliverable, 0);
            return RxOutcome::Done;
        }
        let n = p.payload.len().min(d.len.get() as usize);
        let data = p.payload.get(..n).unwrap_or(&[]);
        if self.iommu.write(d.buf.get(), data).is_err() {
            self.dma_fault();
            c.status = LocalStatus::DmaFault as u8;
            c.return_code = ReturnCode::HostUnsuccessfulCompletion as u8;
            self.post_completion(handle, c);
            self.respond(&p, ReturnCode::HostUnsuccessfulCompletion, 0);
            return RxOutcome::Done;
        }
        if n < p.payload.len() {
            c.status = LocalStatus::Truncated as u8;
        }
        c.len = U32::new(n as u32);
        if let Some(t) = self.avs.get(av) {
            c.src_addr = U64::new(t.source(p.dg.src_ip, p.ses.initiator));
        }
        self.counters.inc(RX_PACKETS);
        self.counters.add(RX_BYTES, n as u64);
        self.post_completion(handle, c);
        self.respond(&p, ReturnCode::Ok, n as u32);
        RxOutcome::Done
    }

    /// Answer a request with a PDS ACK and an SES response.
    fn respond(&mut self, p: &ParsedRequest<'_>, rc: ReturnCode, delivered: u32) {
        let local_pdc = self.pdcs.target_pdc(p.dg.src_ip, p.pds.spdcid);
        let ack = Ack {
            next_hdr: pds::NEXT_HDR_RESPONSE,
            flags: 0,
            ack_psn_offset: 0,
            cack_psn: p.pds.psn,
            spdcid: local_pdc,
            dpdcid: p.pds.spdcid,
        };
        let resp = Response {
            list: 0,
            opcode: ses::OP_RESPONSE_DEFAULT,
            return_code: rc as u8,
            message_id: p.ses.message_id,
            ri_generation: p.ses.ri_generation,
            job_id: p.ses.job_id,
            modified_length: delivered,
        };
        let mut pkt = Vec::with_capacity(pds::ACK_BYTES + ses::RESPONSE_BYTES);
        ack.encode(&mut pkt);
        resp.encode(&mut pkt);
        match frame::build(
            self.cfg.mac,
            GATEWAY_MAC,
            self.cfg.fabric_addr,
            p.dg.src_ip,
            p.dg.src_port,
            &pkt,
        ) {
            Ok(f) => self.outbox.push(f),
            Err(e) => tracing::debug!(%e, "response not framed"),
        }
    }
}
