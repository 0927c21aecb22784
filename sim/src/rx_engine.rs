//! RX engine.
//!
//! Every frame the fabric delivers is parsed strictly — Ethernet, IPv4/IPv6, UDP 4793 (see
//! [`crate::frame`]), then the PDS header and the SES header it announces. A frame that fails
//! any check counts in `RX_MALFORMED` and is dropped unanswered; nothing in it is trusted. The
//! checks include truncation, bad checksums, the wrong port or destination address, reserved
//! bits, and the packet's place in its message:
//!
//! | packet | payload must be |
//! |---|---|
//! | SOM and EOM (single-packet message) | exactly `request_length` bytes |
//! | SOM only (first packet) | 1 to `request_length - 1` bytes, at message offset 0 |
//! | neither, or EOM only | `payload_len` bytes (1 or more, from SES bytes 32–35), at `message_offset`, ending before (EOM: exactly at) `request_length`; HD clear |
//! | READ | SOM and EOM, no payload, HD clear (`request_length` is the number of bytes asked) |
//!
//! A request (PDS RUD_REQ + SES standard request) is always answered by one packet: a PDS ACK
//! followed by an SES response carrying the return code — every packet of a multi-packet
//! message gets its own. Demultiplexing follows the UEC reference provider:
//!
//! | check | failure |
//! |---|---|
//! | function running | RC_DISABLED |
//! | relative addressing (REL): an endpoint accepts the JobID | RC_BAD_JOB_ID, `RX_BAD_JOB_ID` |
//! | relative: within the JobID's scope, an endpoint with the PIDonFEP: the job's own endpoint there, or the one there that accepts the JobID (a granted auth key) | RC_BAD_PID, `RX_BAD_PID` |
//! | absolute (REL clear): an absolute-addressing endpoint with the PIDonFEP exists / it accepts the JobID | RC_BAD_PID / RC_BAD_JOB_ID |
//!
//! An endpoint *accepts* a JobID that is its own (ENDPOINT_CREATE) or the JobID of an auth-key
//! slot granted to it (ENDPOINT_AUTH_KEYS, `uet_fwif::auth_key`).
//! | opcode SEND, TAGGED_SEND, WRITE or READ | RC_UNSUPPORTED_OP |
//! | delivery mode: UUD to a datagram endpoint, RUD to any other | RC_UNSUPPORTED_OP |
//! | resource index inside the endpoint's range of the opcode's space, served by the endpoint or one of its receive contexts (SEND, TAGGED — empty without a tagged RX ring — or RMA; index 0: the control channel; see `uet_fwif::datapath`) | RC_BAD_INDEX, `RX_BAD_INDEX` |
//! | `request_length <= CAP_MAX_MSG` (READ: at most one MTU per request) | RC_TOO_LONG |
//! | since interface 1.20, at an endpoint created with `EP_FLAG_CONNECTED`, except a SEND to its control channel: the sender (source fabric address, initiator) and JobID are its peer's (ENDPOINT_PEER; none before one is named) — WRITE, READ: every packet; SEND, TAGGED_SEND: the first packet of a message to arrive, after the reassembly and duplicate checks below (`uet_fwif::admin`, *Connected endpoints*) | RC_PERM_VIOLATION, `RX_PERM_VIOLATION` (debug `rx_not_peer`) |
//! | WRITE, READ: the memory-region checks (`mr_table`) | RC_PERM_VIOLATION, `RX_PERM_VIOLATION` |
//! | SEND, TAGGED_SEND (first packet of a message to arrive): a peer group the endpoint receives — 0 without peer groups, at most its AV's `max_group_id` with them | RC_UNDELIVERABLE, `RX_BAD_GROUP` |
//! | SEND: a posted RX descriptor (for the first packet of a message to arrive; with peer groups, one of the message's group, see `peer_groups`), or since interface 1.17 room on the unexpected list (`untagged_unexpected`) | RC_UNDELIVERABLE, `RX_NO_BUFFER` (since 1.17 also `RX_UNEXPECTED_OVERFLOW`) |
//! | TAGGED_SEND: a matching posted tagged receive, or room on the unexpected list (`tag_match`) | RC_UNDELIVERABLE, `RX_UNEXPECTED_OVERFLOW` |
//!
//! Every refusal after the endpoint is known (from the opcode check on) also counts in the
//! endpoint's `rejected[return code]`. From the index check on, "the endpoint" is the entry
//! that serves the index: the endpoint itself, a receive context of a scalable endpoint, or
//! the control channel; delivery, completions, counters and backlog are that entry's.
//!
//! A UUD request (PDS UUD_REQ, from a datagram endpoint) must be one packet (SOM|EOM) of a
//! SEND or TAGGED_SEND, else it is malformed. It goes through the same checks and delivery,
//! but nothing is ever sent back: a refusal is only counted (the check's counter, the
//! endpoint's `rejected`, and the debug counter `rx_datagrams_dropped`). WRITE and READ are handled by `rma_engine` and produce
//! no completion at the target; SEND and TAGGED_SEND continue below.
//!
//! When the request is deliverable but the endpoint's completion ring has no room, the request
//! waits in the endpoint's receive backlog (later requests for that endpoint queue behind it)
//! until a `CQ_DOORBELL` frees space; it is neither dropped nor answered early. Packets of a
//! message already in reassembly need no new completion slot and never wait: neither do those
//! that came before their message opened and wait in the backlog behind a request that still
//! waits for room, which are taken as soon as their message opens. The backlog is
//! NIC memory: it holds at most [`RX_BACKLOG_BYTES`] bytes of frames per entry (a frame always
//! fits an empty one). A request that would exceed that is refused RC_UNDELIVERABLE at once
//! (the rest of a multi-packet message's packets get the same answer) and counted
//! (`rx_backlog_overflows`), so that senders flooding an endpoint whose host does not read its
//! completions cannot make the NIC hold their requests without end.
//!
//! ## Single-packet messages
//!
//! Delivery consumes the next RX descriptor (undefined flags and reserved fields must be zero,
//! and `min_free` too unless the descriptor is a multi-receive one, else the descriptor
//! completes with `BadDescriptor` and the request is answered RC_UNDELIVERABLE), copies the
//! payload into its buffer by DMA — truncated to the buffer, which completes with `Truncated`
//! but still answers RC_OK — and writes a `Recv` completion: `context`, `len` = bytes
//! delivered, `data` = the header data when the SES flag HD says it is present (0 without
//! it), `src_addr` = the reverse translation of (source address,
//! initiator id) through the endpoint's bound AV: among the sender's entries the lowest index
//! that sends with the request's JobID (an `AUTH_KEY` entry with its slot's), else the lowest;
//! the entry's user id when it has one. When the sender is in no entry: the `source` of the
//! auth-key slot the request was accepted through (the endpoint's granted slot with the
//! request's JobID; a context's grants are its endpoint's), or for a request accepted by the
//! endpoint's own JobID the AV's slot with that JobID, if it has one; else
//! `FI_ADDR_NOTAVAIL`. The source is looked up when the completion is written: a multi-packet
//! message's when its last byte arrives, an unexpected tagged message's when a receive takes
//! it (`tag_match`), so that a user id set or an entry changed meanwhile is what it reports.
//! A DMA fault on the buffer completes with `DmaFault` and answers RC_HOST_UNSUCCESS_CMPL.
//!
//! The answers of the last [`RECENT_MESSAGES`] single-packet SEND and TAGGED_SEND requests
//! are remembered: a copy of one (the same PDC, message id and PSN — a retransmission) is
//! answered again with the same return code and never delivered a second time (counted in
//! `rx_duplicate_packets`, or in the endpoint's `rejected` when the answer was a refusal).
//! A multi-packet message with the same key ends the remembering: the sender gave the id
//! again.
//!
//! ## Multi-packet messages
//!
//! Packets of one message share (source fabric address, the initiator's PDC, initiator,
//! message id; message ids count per PDC at the sender). They may
//! arrive in any order: the first to arrive — SOM or not — consumes the next RX descriptor
//! (with the checks above) and opens a reassembly; each packet's payload is written by DMA at
//! its message offset in that buffer, and only the part inside the buffer (a longer message is
//! truncated, never written past the buffer; its packets still answer RC_OK with the bytes
//! delivered as `modified_length`). The SOM packet supplies the header data (with HD). The
//! engine tracks
//! which byte ranges arrived: a packet whose bytes all arrived already is a duplicate (counted,
//! answered RC_OK, not written again); one that partly overlaps received bytes, whose
//! `request_length`, peer group, operation, match bits or JobID differs from its message's, or
//! that demultiplexes to another endpoint than its message, is malformed. When every byte of
//! `request_length` has arrived, one `Recv` completion is written: `len` = bytes delivered
//! (`min(request_length, buffer)`), status `Truncated` when the message was longer than the
//! buffer, `DmaFault` when a write faulted (that packet answered RC_HOST_UNSUCCESS_CMPL; the
//! completion's `len` is 0, as a single packet's and a held message's are: a faulted buffer
//! holds no message).
//!
//! At most `NicConfig::reassembly_slots` messages are in reassembly at once, over the whole
//! NIC; the first packet of another message is answered RC_UNDELIVERABLE and counted
//! (`reassembly_overflows`). The outcome of the last [`RECENT_MESSAGES`] finished or refused
//! multi-packet messages is remembered, so a late packet of one is answered with the same
//! return code, on the list its message's packets were answered on (the overflow list for a
//! message held on the unexpected list, whether it is still there, a receive took it or a
//! probe discarded it), rather than opening a new reassembly, taking a receive or a place on
//! the unexpected list: a duplicate, counted in `rx_duplicate_packets` (a refusal counts in
//! the endpoint's `rejected` again: one per refused packet). A packet is a late one only when
//! its PSN is
//! within 65,536 of the last packet seen of the remembered message: further away, the
//! sender's 16-bit message ids have wrapped and the packet starts a new message with the same
//! id. A single-packet message with the key of a remembered one also ends the remembering:
//! the sender has given the id again (which also covers PSNs that wrapped at 2^32 while only
//! single-packet messages went by). Reassemblies of a destroyed endpoint are dropped, and
//! remembered as refused RC_UNDELIVERABLE: the rest of the message's packets get that answer
//! (its send does not complete `Ok`), and none opens a reassembly in an endpoint created at
//! the same address since, whose receive it would take and never complete.
//!
//! **Messages that never finish.** The model's fabric is lossless and delivers a message's
//! packets within one run, so a reassembly ends, except for one that forged or truncated
//! traffic opened, whose sender gave up on one of its packets, or whose later packets a test
//! held back (until it releases them) or discarded (`Fabric::hold_frames`,
//! `Fabric::discard_held`). There is no reassembly timeout (the model has no clock and no
//! thread): such a reassembly holds what it took — its receive (RECV_CANCEL answers
//! InProgress), its completion-ring reservation, one of the NIC's `reassembly_slots`, and on
//! the unexpected list its place (its sender's later untagged messages of its group wait
//! behind it) — until its endpoint is destroyed, the function reset, or its sender gives its
//! message id to another message.
//!
//! A packet joins the message in reassembly with its key only when its PSN is within 65,536
//! of the PSN the message is known at: that of the last packet accepted into it (new bytes;
//! a copy of bytes received, whatever PSN it carries, and a malformed packet leave it as it
//! was). The bytes of two messages are never mixed. A RUD packet (of a single- or
//! multi-packet message) whose PSN is 65,536 or more ahead of it (less than 2^31: PSNs wrap)
//! was sent after the sender's 16-bit message ids wrapped on its PDC, so the message in
//! reassembly will never finish, and it is ended:
//!
//! * its reassembly slot and completion-ring reservation are freed, and its place on the
//!   unexpected list given up (later messages of its sender and group no longer wait behind
//!   it);
//! * its receive — the posted buffer it took, or a tagged receive bound to it on the
//!   unexpected list — completes `Cancelled`, `len` 0, counted in the endpoint's `rx_errors`,
//!   as a receive RECV_CANCEL withdraws does (libfabric `FI_ECANCELED`); the buffer may hold
//!   some of the message's bytes. A message placed in a multi-receive buffer completes
//!   nothing and its space stays unused; when it was the last message of a retired buffer
//!   still in reassembly, the buffer's release is a completion of its own;
//! * the rest of its packets are refused RC_UNDELIVERABLE, as those of a destroyed endpoint's
//!   message are (its sender gave up on it already).
//!
//! The packet is then taken as the first of a new message, whichever endpoint it is for. A
//! packet whose PSN is as far behind belongs to an older message with the id: it is answered
//! from that message's remembered outcome when its PSN is within 65,536 of it, else dropped
//! unanswered and counted in `RX_MALFORMED`, as one that demultiplexes to another endpoint
//! than its message does. A NIC on a lossy network ends such a reassembly sooner, when the
//! PDS gives up on the sender's PDC.
//!
//! An RX descriptor with `RX_FLAG_MULTI_RECV` becomes the endpoint's current multi-receive
//! buffer instead of being consumed by one message: untagged messages are placed in it one
//! after another until it is retired, each with a completion of its own (see `multi_recv`
//! and `uet_fwif::datapath`, *Multi-receive buffers*). A message that does not fit the current
//! buffer retires it and takes the next RX descriptor.
//!
//! SEND and TAGGED_SEND requests carry their peer group in SES bytes 16–19 (bytes 12–15 must
//! be zero, else the packet is malformed); every packet of a message must carry the group its
//! first packet did (else malformed). Receive completions report it in `group`. An endpoint
//! with peer groups takes its untagged buffers from a posted list instead of the head of the
//! RX ring (see `peer_groups`; `uet_fwif::datapath`, *Peer groups*).
//!
//! Tagged messages (TAGGED_SEND) follow the same single- and multi-packet rules, but the
//! buffer is the first matching posted tagged receive, or — when none matches — NIC memory on
//! the endpoint's unexpected list (see `tag_match`); their completions are `TaggedRecv` and
//! carry the message's match bits in `tag`.
//!
//! `RX_PACKETS` counts request packets accepted into a buffer (host or unexpected list),
//! `RX_BYTES` the bytes written. Every receive completion also counts in the endpoint's
//! `rx_messages`/`rx_bytes` (`rx_tagged_messages` for tagged; `rx_errors` when it failed).
//!
//! A response (PDS ACK + SES response) completes the matching send packet (see
//! [`crate::tx_engine`]); one that matches no outstanding packet is dropped and counted.

use crate::endpoint_table::EndpointTable;
use crate::frame::{self, Datagram, GATEWAY_MAC};
use crate::nic::Nic;
use crate::pds::{self, Ack, Prologue, RudRequest, UudRequest};
use crate::ses::{self, Response, StandardRequest};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use uet_fwif::datapath::RX_FLAG_MULTI_RECV;
use uet_fwif::{Completion, CompletionKind, LocalStatus, ReturnCode, RxDescriptor};
use uet_regs::{
    RX_BAD_GROUP, RX_BAD_INDEX, RX_BAD_JOB_ID, RX_BAD_PID, RX_BYTES, RX_MALFORMED, RX_PACKETS,
    RX_PERM_VIOLATION,
};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromBytes;

/// Finished or refused multi-packet messages whose outcome is remembered for late packets.
pub const RECENT_MESSAGES: usize = 1024;
/// PSNs within which a packet can belong to a remembered message. Message ids count per PDC
/// in 16 bits and every message takes at least one PSN of its PDC, so by the time a sender
/// gives a message the id of a remembered one again, its PSNs have moved on by at least this
/// many.
const MESSAGE_ID_SPAN: u32 = 1 << 16;
/// Bytes of frames an entry's receive backlog holds at most (see the module docs).
pub const RX_BACKLOG_BYTES: usize = 1 << 22;
/// Most disjoint byte ranges one message in reassembly may have (adjacent ranges merge, so
/// in-order arrival keeps one); a packet that would need more is malformed.
pub const MAX_REASSEMBLY_RANGES: usize = 1024;

/// What became of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxOutcome {
    /// Answered (delivered or rejected).
    Done,
    /// Waiting for completion-ring space.
    Stalled,
}

pub(crate) struct ParsedRequest<'a> {
    pub dg: Datagram<'a>,
    /// RUD (answered) or UUD (never answered; `pds` is then all zeros).
    pub reliable: bool,
    pub pds: RudRequest,
    pub ses: StandardRequest,
    pub payload: &'a [u8],
    /// Message offset of the payload.
    pub offset: u32,
    /// SEND, TAGGED_SEND: the peer group (SES bytes 16–19). Otherwise 0.
    pub group: u32,
}

/// Which resource-index space a request addresses (by its SES opcode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    Send,
    Tagged,
    Rma,
}

impl ParsedRequest<'_> {
    pub(crate) fn single(&self) -> bool {
        let both = ses::FLAG_SOM | ses::FLAG_EOM;
        self.ses.flags & both == both
    }

    /// The remote CQ data the message carries: the SOM packet's header data when its HD flag
    /// says it is present, 0 otherwise (bytes 32–39 of a packet without HD are not data).
    pub(crate) fn cq_data(&self) -> u64 {
        let both = ses::FLAG_SOM | ses::FLAG_HD;
        if self.ses.flags & both == both {
            self.ses.header_data
        } else {
            0
        }
    }

    pub(crate) fn key(&self) -> MsgKey {
        MsgKey {
            src: self.dg.src_ip,
            spdcid: self.pds.spdcid,
            initiator: self.ses.initiator,
            message_id: self.ses.message_id,
        }
    }
}

fn parse_request(f: &[u8]) -> Option<ParsedRequest<'_>> {
    let dg = frame::parse(f).ok()?;
    let (reliable, pds, rest) = match Prologue::peek(dg.payload).ok()?.pkt_type {
        pds::TYPE_UUD_REQ => {
            let (uud, rest) = UudRequest::parse(dg.payload).ok()?;
            let none = RudRequest {
                next_hdr: uud.next_hdr,
                flags: 0,
                clear_psn_offset: 0,
                psn: 0,
                spdcid: 0,
                dpdcid: 0,
            };
            (false, none, rest)
        }
        _ => {
            let (pds, rest) = RudRequest::parse(dg.payload).ok()?;
            (true, pds, rest)
        }
    };
    if pds.next_hdr != pds::NEXT_HDR_REQUEST_STD {
        return None;
    }
    let (ses, payload) = StandardRequest::parse(rest).ok()?;
    // A message carries its peer group in the low half of buffer_offset; the high half is 0.
    let group = if matches!(ses.opcode, ses::OP_SEND | ses::OP_TAGGED_SEND) {
        u32::try_from(ses.buffer_offset).ok()?
    } else {
        0
    };
    // A datagram is one packet of a SEND or TAGGED_SEND.
    let som_eom = ses::FLAG_SOM | ses::FLAG_EOM;
    if !reliable
        && (ses.flags & som_eom != som_eom
            || !matches!(ses.opcode, ses::OP_SEND | ses::OP_TAGGED_SEND))
    {
        return None;
    }
    let total = usize::try_from(ses.request_length).ok()?;
    let n = payload.len();
    let eom = ses.flags & ses::FLAG_EOM != 0;
    if ses.opcode == ses::OP_READ {
        let som_eom = ses::FLAG_SOM | ses::FLAG_EOM;
        let ok = ses.flags & som_eom == som_eom && n == 0 && ses.flags & ses::FLAG_HD == 0;
        return ok.then_some(ParsedRequest {
            dg,
            reliable,
            pds,
            ses,
            payload,
            offset: 0,
            group,
        });
    }
    let offset = match ses.segment() {
        // SOM: the message starts here.
        None => {
            let fits = if eom { n == total } else { n > 0 && n < total };
            if !fits {
                return None;
            }
            0
        }
        Some((len, offset)) => {
            if ses.flags & ses::FLAG_HD != 0 || usize::from(len) != n || n == 0 {
                return None;
            }
            let end = usize::try_from(offset).ok()?.checked_add(n)?;
            let fits = if eom { end == total } else { end < total };
            if !fits {
                return None;
            }
            offset
        }
    };
    Some(ParsedRequest {
        dg,
        reliable,
        pds,
        ses,
        payload,
        offset,
        group,
    })
}

/// Identifies a message at its target: the PDC it travels in (the source address and the
/// initiator's PDC id) and the message id the sending NIC gave it in that PDC. Message ids
/// count per PDC, not per endpoint (`pds::PdcTable::next_message_id`), and a function's PDC
/// ids are not reused after its reset (`pds::PdcTable::clear`). Initiator ids and JobIDs do
/// not tell senders apart here: a NIC opened again derives the initiators it had, jobs number
/// their ranks from 0, and a packet sent through an auth key carries the key's JobID, so a
/// key made of them took a new sender's message for an old one's and answered it from that
/// one's outcome, undelivered. The initiator is kept in the key as the message's own field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MsgKey {
    src: IpAddr,
    spdcid: u16,
    initiator: u32,
    message_id: u16,
}

impl MsgKey {
    /// The sender: its fabric address and initiator id.
    pub(crate) fn sender(&self) -> (IpAddr, u32) {
        (self.src, self.initiator)
    }
}

/// Where a new byte range falls among those received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RangeInsert {
    New,
    Duplicate,
    Overlap,
    TooFragmented,
}

/// Where a message in reassembly is written.
#[derive(Debug)]
pub(crate) enum Sink {
    /// A posted receive buffer in host memory.
    Host { buf: u64, buf_len: u32 },
    /// NIC memory of the unexpected list (`request_length` bytes).
    Staged(Vec<u8>),
}

/// One message being reassembled into a receive buffer or the unexpected list.
#[derive(Debug)]
pub(crate) struct Reassembly {
    pub handle: u16,
    pub serial: u64,
    pub sink: Sink,
    pub kind: CompletionKind,
    pub tag: u64,
    pub context: U64,
    pub total: u32,
    pub received: u64,
    /// Received byte ranges, start -> end (exclusive), merged when adjacent.
    pub ranges: BTreeMap<u32, u32>,
    pub header_data: u64,
    /// The request's JobID: with its sender, what the completion's source is looked up by
    /// when the last byte arrives.
    pub job_id: u32,
    pub dma_fault: bool,
    /// Placed in a multi-receive buffer: (buffer id, offset).
    pub multi: Option<crate::multi_recv::MultiPlace>,
    /// The message's peer group; every packet must carry it.
    pub group: u32,
    /// The PSN it is known at: that of the last packet accepted into it (new bytes). A copy
    /// of received bytes or a packet found malformed against it does not move it.
    pub psn: u32,
}

impl Reassembly {
    /// A reassembly of the message `p` starts for endpoint `handle`.
    pub(crate) fn new(
        handle: u16,
        serial: u64,
        sink: Sink,
        kind: CompletionKind,
        context: U64,
        p: &ParsedRequest<'_>,
    ) -> Self {
        Reassembly {
            handle,
            serial,
            sink,
            kind,
            tag: p.ses.match_bits,
            context,
            total: p.ses.request_length,
            received: 0,
            ranges: BTreeMap::new(),
            header_data: 0,
            job_id: p.ses.job_id,
            dma_fault: false,
            multi: None,
            group: p.group,
            psn: p.pds.psn,
        }
    }

    fn list(&self) -> u8 {
        match self.sink {
            Sink::Host { .. } => ses::LIST_EXPECTED,
            Sink::Staged(_) => ses::LIST_OVERFLOW,
        }
    }

    fn insert(&mut self, start: u32, end: u32) -> RangeInsert {
        let prev = self
            .ranges
            .range(..=start)
            .next_back()
            .map(|(&s, &e)| (s, e));
        if let Some((_, pe)) = prev {
            if pe >= end {
                return RangeInsert::Duplicate;
            }
            if pe > start {
                return RangeInsert::Overlap;
            }
        }
        let next = self
            .ranges
            .range(start.saturating_add(1)..)
            .next()
            .map(|(&s, &e)| (s, e));
        if next.is_some_and(|(ns, _)| ns < end) {
            return RangeInsert::Overlap;
        }
        let join_prev = prev.filter(|&(_, pe)| pe == start);
        let join_next = next.filter(|&(ns, _)| ns == end);
        if join_prev.is_none() && join_next.is_none() && self.ranges.len() >= MAX_REASSEMBLY_RANGES
        {
            return RangeInsert::TooFragmented;
        }
        let mut new_start = start;
        let mut new_end = end;
        if let Some((ps, _)) = join_prev {
            new_start = ps;
        }
        if let Some((ns, ne)) = join_next {
            self.ranges.remove(&ns);
            new_end = ne;
        }
        self.ranges.insert(new_start, new_end);
        self.received += u64::from(end - start);
        RangeInsert::New
    }
}

/// What the reassembly state says about a packet of a multi-packet message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lookup {
    /// Its message is in reassembly for this endpoint.
    Active,
    /// Its message finished (or was refused) with this return code, its packets answered
    /// on this list.
    Finished(ReturnCode, u8),
    /// Its key is in reassembly for another live endpoint, or for a message its PSN is far
    /// behind (one with the id after it), and no remembered outcome answers it: the packet
    /// contradicts the message in reassembly.
    Conflict,
    /// Its key is in reassembly for a message its PSN is far ahead of: the sender has given
    /// the id to a new message since, so the one in reassembly will never finish.
    Stale,
    /// A new message.
    New,
}

/// The RX engine's multi-packet state.
#[derive(Debug, Default)]
pub(crate) struct Reassembler {
    pub(crate) active: HashMap<MsgKey, Reassembly>,
    /// Outcome of a finished or refused message: the return code and list its packets were
    /// answered with, and the PSN of the last of its packets seen.
    recent: Recent<(ReturnCode, u8, u32)>,
    /// Answer of an answered single-packet SEND or TAGGED_SEND: its PSN, return code and
    /// response list, so that a copy of the packet (same key, same PSN) is answered again
    /// and not delivered twice.
    recent_single: Recent<SingleAnswer>,
    /// RMA operations (a WRITE's packets, a READ's requests): the MR handle of the region
    /// the first of its packets to arrive reached (0: none, it was refused), and the PSN of
    /// the last of its packets seen.
    rma: Recent<(u32, u32)>,
}

/// What the RX engine remembers of the last [`RECENT_MESSAGES`] messages, by key: inserting
/// one more forgets the oldest. Keyed lookups are hashed; only taking out a key that is
/// there walks the order.
#[derive(Debug)]
struct Recent<V> {
    map: HashMap<MsgKey, V>,
    /// Keys, oldest first.
    order: VecDeque<MsgKey>,
}

impl<V> Default for Recent<V> {
    fn default() -> Self {
        Recent {
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<V> Recent<V> {
    fn get(&self, key: &MsgKey) -> Option<&V> {
        self.map.get(key)
    }

    fn get_mut(&mut self, key: &MsgKey) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// Forget `key`, if it is remembered.
    fn remove(&mut self, key: MsgKey) {
        if self.map.is_empty() || self.map.remove(&key).is_none() {
            return;
        }
        if let Some(i) = self.order.iter().position(|k| *k == key) {
            self.order.remove(i);
        }
    }

    /// Remember `value` for `key` as the newest (in the place of what `key` had), and forget
    /// the oldest beyond [`RECENT_MESSAGES`].
    fn insert(&mut self, key: MsgKey, value: V) {
        if self.map.insert(key, value).is_some() {
            if let Some(i) = self.order.iter().position(|k| *k == key) {
                self.order.remove(i);
            }
        }
        self.order.push_back(key);
        while self.order.len() > RECENT_MESSAGES {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

/// How a single-packet message was answered: (PSN, return code, response list).
type SingleAnswer = (u32, ReturnCode, u8);

fn alive(eps: &EndpointTable, handle: u16, serial: u64) -> bool {
    eps.get(handle).is_some_and(|e| e.serial == serial)
}

/// Whether `psn` can be a packet of the message last seen at `at`: within
/// [`MESSAGE_ID_SPAN`] of it, either way (PSNs wrap at 2^32).
fn near(at: u32, psn: u32) -> bool {
    psn.wrapping_sub(at).min(at.wrapping_sub(psn)) < MESSAGE_ID_SPAN
}

/// Whether `psn` is [`MESSAGE_ID_SPAN`] or more ahead of `at` (less than 2^31, PSNs wrap):
/// a packet sent after the message last seen at `at` and the next one with its id.
fn passed(at: u32, psn: u32) -> bool {
    !near(at, psn) && psn.wrapping_sub(at) < 1 << 31
}

impl Reassembler {
    fn lookup(
        &mut self,
        key: MsgKey,
        psn: u32,
        handle: u16,
        serial: u64,
        eps: &EndpointTable,
    ) -> Lookup {
        if let Some(r) = self.active.get(&key) {
            // Only a packet near the PSNs of the message in reassembly can be one of its
            // packets: the bytes of two messages are never mixed.
            if passed(r.psn, psn) {
                return Lookup::Stale;
            }
            if !near(r.psn, psn) {
                // An older message's: only its remembered outcome can answer it.
                return match self.remembered(key, psn) {
                    Some((rc, list)) => Lookup::Finished(rc, list),
                    None => Lookup::Conflict,
                };
            }
            if r.handle == handle && r.serial == serial {
                return Lookup::Active;
            }
            if alive(eps, r.handle, r.serial) {
                return Lookup::Conflict;
            }
            // Its endpoint is gone: the rest of the message is refused.
            self.active.remove(&key);
            let (rc, list) = (ReturnCode::Undeliverable, ses::LIST_EXPECTED);
            self.recent.insert(key, (rc, list, psn));
            return Lookup::Finished(rc, list);
        }
        match self.remembered(key, psn) {
            Some((rc, list)) => Lookup::Finished(rc, list),
            None => Lookup::New,
        }
    }

    /// The outcome remembered for message `key` when this packet (`psn`) can be one of its.
    /// A remembered message whose PSNs are far from this packet's had its id before the
    /// sender's message ids wrapped: this packet is not one of its. A late packet moves the
    /// remembered PSN along, so the packets of a message of any length match.
    fn remembered(&mut self, key: MsgKey, psn: u32) -> Option<(ReturnCode, u8)> {
        match self.recent.get_mut(&key) {
            Some((rc, list, at)) if near(*at, psn) => {
                *at = psn;
                Some((*rc, *list))
            }
            _ => None,
        }
    }

    /// Whether a packet (`psn`) of a message with key `key` is far ahead of the message in
    /// reassembly with that key, if any (see [`Lookup::Stale`]).
    fn passes_active(&self, key: MsgKey, psn: u32) -> bool {
        !self.active.is_empty() && self.active.get(&key).is_some_and(|r| passed(r.psn, psn))
    }

    /// Whether another message may start, after dropping reassemblies of destroyed endpoints.
    pub(crate) fn has_room(&mut self, slots: u16, eps: &EndpointTable) -> bool {
        if self.active.len() < usize::from(slots) {
            return true;
        }
        let recent = &mut self.recent;
        self.active.retain(|&key, r| {
            let live = alive(eps, r.handle, r.serial);
            if !live {
                // Its endpoint is gone: the rest of the message is refused.
                recent.insert(key, (ReturnCode::Undeliverable, ses::LIST_EXPECTED, r.psn));
            }
            live
        });
        self.active.len() < usize::from(slots)
    }

    /// Forget the outcome remembered for `key`: a single-packet message with that key came,
    /// so the sender has given the id again and the remembered message is over for good.
    fn forget(&mut self, key: MsgKey) {
        self.recent.remove(key);
    }

    /// Remember how a message ended: the return code and list its packets were answered
    /// with; `psn` is one of its packets'. A message that reused the id of a remembered one
    /// takes its place, as the newest.
    fn finish(&mut self, key: MsgKey, rc: ReturnCode, list: u8, psn: u32) {
        self.recent.insert(key, (rc, list, psn));
    }

    /// The answer of the single-packet message `key` when this packet (`psn`) is a copy of
    /// it: the same message id in the same PDC at the same PSN.
    fn single_answer(&self, key: MsgKey, psn: u32) -> Option<(ReturnCode, u8)> {
        self.recent_single
            .get(&key)
            .filter(|a| a.0 == psn)
            .map(|&(_, rc, list)| (rc, list))
    }

    /// Forget the answer remembered for the single-packet message `key`: a multi-packet
    /// message with that key started, so the sender has given the id again.
    fn forget_single(&mut self, key: MsgKey) {
        self.recent_single.remove(key);
    }

    /// Remember how a single-packet message was answered, as the newest.
    fn answered_single(&mut self, key: MsgKey, answer: SingleAnswer) {
        self.recent_single.insert(key, answer);
    }

    /// Whether a packet (`psn`) of RMA operation `key` that reached region `region` (its MR
    /// handle, 0 for none) reaches the region the operation's first packet to arrive did,
    /// which is remembered for its later packets. A remembered operation whose PSNs are far
    /// from this packet's had its id before the sender's message ids wrapped (see
    /// [`Reassembler::lookup`]): this packet starts a new one.
    pub(crate) fn rma_same_region(&mut self, key: MsgKey, psn: u32, region: u32) -> bool {
        match self.rma.get_mut(&key) {
            Some((first, at)) if near(*at, psn) => {
                *at = psn;
                *first == region
            }
            _ => {
                self.rma.insert(key, (region, psn));
                true
            }
        }
    }

    /// Forget everything (function reset).
    pub(crate) fn clear(&mut self) {
        *self = Reassembler::default();
    }
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
            Ok(pds::TYPE_RUD_REQ | pds::TYPE_UUD_REQ) => {
                let _ = self.rx_request(f, false);
            }
            Ok(pds::TYPE_ACK) => self.rx_response(&dg),
            _ => self.counters.inc(RX_MALFORMED),
        }
    }

    fn rx_response(&mut self, dg: &Datagram<'_>) {
        let parsed = Ack::parse(dg.payload).ok().and_then(|(ack, rest)| {
            let (resp, data) = Response::parse(rest).ok()?;
            let ok = match ack.next_hdr {
                pds::NEXT_HDR_RESPONSE => data.is_empty(),
                pds::NEXT_HDR_RESPONSE_DATA => resp.opcode == ses::OP_RESPONSE_WITH_DATA,
                _ => false,
            };
            ok.then_some((ack, resp, data))
        });
        match parsed {
            Some((ack, resp, data)) => self.on_response(dg.src_ip, &ack, &resp, data),
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
                progress |= self.rx_backlog_take_reassembling(handle);
                break;
            }
            if let Some(ep) = self.eps.get_mut(handle) {
                if let Some(done) = ep.rx_backlog.pop_front() {
                    ep.rx_backlog_bytes = ep.rx_backlog_bytes.saturating_sub(done.len());
                }
            }
            progress = true;
        }
        progress
    }

    /// The request at the front of entry `handle`'s backlog waits for completion-ring room:
    /// take the packets behind it whose message is now in reassembly for the entry (they
    /// came before it opened), in order. They need no completion slot, and the slots their
    /// messages reserved may be the very room the front request waits for. Returns whether
    /// any was taken.
    fn rx_backlog_take_reassembling(&mut self, handle: u16) -> bool {
        let Some(serial) = self.eps.get(handle).map(|ep| ep.serial) else {
            return false;
        };
        let active = &self.reasm.active;
        let ours = |f: &[u8]| {
            parse_request(f).is_some_and(|p| {
                !p.single()
                    && active.get(&p.key()).is_some_and(|r| {
                        r.handle == handle && r.serial == serial && near(r.psn, p.pds.psn)
                    })
            })
        };
        if !active
            .values()
            .any(|r| r.handle == handle && r.serial == serial)
        {
            return false;
        }
        let Some(ep) = self.eps.get_mut(handle) else {
            return false;
        };
        let mut taken = Vec::new();
        let mut i = 1;
        while let Some(f) = ep.rx_backlog.get(i) {
            if !ours(f) {
                i += 1;
                continue;
            }
            if let Some(f) = ep.rx_backlog.remove(i) {
                ep.rx_backlog_bytes = ep.rx_backlog_bytes.saturating_sub(f.len());
                taken.push(f);
            }
        }
        let any = !taken.is_empty();
        let mut taken = taken.into_iter();
        while let Some(f) = taken.next() {
            if self.rx_request(&f, true) == RxOutcome::Stalled {
                // Not one of an open message after all: back behind the front, in order.
                if let Some(ep) = self.eps.get_mut(handle) {
                    for (at, f) in (1..).zip(std::iter::once(f).chain(taken)) {
                        ep.rx_backlog_bytes = ep.rx_backlog_bytes.saturating_add(f.len());
                        ep.rx_backlog.insert(at.min(ep.rx_backlog.len()), f);
                    }
                }
                break;
            }
        }
        any
    }

    fn demux(&mut self, s: &StandardRequest) -> Result<u16, ReturnCode> {
        let handle = if s.flags & ses::FLAG_REL != 0 {
            if !self.eps.has_job(s.job_id) {
                self.counters.inc(RX_BAD_JOB_ID);
                return Err(ReturnCode::BadJobId);
            }
            // The JobID scopes the PIDonFEP: the endpoint of that job at that PIDonFEP, or one
            // granted the job's auth key. A job the NIC knows without such an endpoint there
            // is RC_BAD_PID.
            let Some(h) = self.eps.by_job_pid(s.job_id, s.pid_on_fep).or_else(|| {
                self.eps
                    .by_pid(s.pid_on_fep)
                    .filter(|&h| self.eps.get(h).is_some_and(|e| e.accepts(s.job_id)))
            }) else {
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
            if !self.eps.get(h).is_some_and(|e| e.accepts(s.job_id)) {
                self.counters.inc(RX_BAD_JOB_ID);
                return Err(ReturnCode::BadJobId);
            }
            h
        };
        if self.eps.get(handle).is_none() {
            return Err(ReturnCode::BadPid);
        }
        Ok(handle)
    }

    /// The request's delivery mode, opcode and resource index, checked against the
    /// endpoint's kind and spaces: the space, the entry (the endpoint or one of its
    /// contexts) that serves it, and whether the endpoint takes the request's data from its
    /// sender (a connected endpoint only from its peer, [`crate::endpoint_table`]).
    fn space_check(
        &mut self,
        handle: u16,
        p: &ParsedRequest<'_>,
    ) -> Result<(Space, u16, bool), ReturnCode> {
        let s = &p.ses;
        let space = match s.opcode {
            ses::OP_SEND => Space::Send,
            ses::OP_TAGGED_SEND => Space::Tagged,
            ses::OP_WRITE | ses::OP_READ => Space::Rma,
            _ => return Err(ReturnCode::UnsupportedOp),
        };
        let Some(ep) = self.eps.get(handle) else {
            return Err(ReturnCode::BadPid);
        };
        // A datagram endpoint takes only datagrams, and a reliable one only RUD requests.
        if ep.dgram == p.reliable {
            self.counters.debug.rx_wrong_delivery_mode += 1;
            return Err(ReturnCode::UnsupportedOp);
        }
        let target = match space {
            Space::Rma => {
                (!ep.passive && EndpointTable::in_range(ep, s.resource_index)).then_some(handle)
            }
            Space::Send | Space::Tagged => {
                EndpointTable::receiver(ep, s.resource_index, space == Space::Tagged)
            }
        };
        let served = target.filter(|&t| {
            space != Space::Tagged || self.eps.get(t).is_some_and(|e| e.trx.is_some())
        });
        let Some(target) = served else {
            self.counters.inc(RX_BAD_INDEX);
            return Err(ReturnCode::BadIndex);
        };
        // A connected endpoint takes data from its peer only; its control channel (a SEND to
        // resource index 0, the only request index 0 serves) takes anyone's.
        let control = space == Space::Send && s.resource_index == 0;
        let from_peer = control || ep.takes_data_from(p.key().sender(), s.job_id);
        Ok((space, target, from_peer))
    }

    /// Count a data request a connected endpoint refused for its sender.
    fn count_not_peer(&mut self) {
        self.counters.inc(RX_PERM_VIOLATION);
        self.counters.debug.rx_not_peer += 1;
    }

    /// Count a refusal in the endpoint's counters.
    pub(crate) fn count_reject(&mut self, handle: u16, rc: ReturnCode) {
        if let Some(ep) = self.eps.get_mut(handle) {
            ep.stats.reject(rc);
        }
    }

    /// Hold request `f` (parsed: `p`) in endpoint `handle`'s receive backlog until its
    /// completion ring has room (or the ring's unread receives are read), counted as a stall;
    /// a request retried from the backlog (`from_backlog`) keeps its place there.
    pub(crate) fn hold_for_cq_room(
        &mut self,
        handle: u16,
        p: &ParsedRequest<'_>,
        f: &[u8],
        from_backlog: bool,
    ) -> RxOutcome {
        self.counters.debug.cq_stalls += 1;
        if from_backlog {
            return RxOutcome::Stalled;
        }
        self.backlog(handle, p, f)
    }

    /// Queue request `f` (parsed: `p`) at the end of endpoint `handle`'s receive backlog, or
    /// refuse it when the backlog has no room for it.
    fn backlog(&mut self, handle: u16, p: &ParsedRequest<'_>, f: &[u8]) -> RxOutcome {
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        let room = ep.rx_backlog.is_empty()
            || ep.rx_backlog_bytes.saturating_add(f.len()) <= RX_BACKLOG_BYTES;
        if !room {
            self.counters.debug.rx_backlog_overflows += 1;
            self.refuse(handle, p, ReturnCode::Undeliverable);
            return RxOutcome::Done;
        }
        ep.rx_backlog_bytes = ep.rx_backlog_bytes.saturating_add(f.len());
        ep.rx_backlog.push_back(f.to_vec());
        RxOutcome::Stalled
    }

    /// Refuse a request addressed to endpoint `handle`: counted, answered.
    pub(crate) fn reject(&mut self, handle: u16, p: &ParsedRequest<'_>, rc: ReturnCode) {
        self.count_reject(handle, rc);
        self.respond(p, rc, 0);
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
        let (space, handle, from_peer) = match self.space_check(handle, &p) {
            Ok(s) => s,
            Err(rc) => {
                self.reject(handle, &p, rc);
                return RxOutcome::Done;
            }
        };
        let too_long = p.ses.request_length > self.cfg.max_msg
            || (p.ses.opcode == ses::OP_READ && p.ses.request_length > u32::from(self.cfg.mtu));
        if too_long {
            self.counters.debug.rx_too_long += 1;
            self.reject(handle, &p, ReturnCode::TooLong);
            return RxOutcome::Done;
        }
        if space == Space::Rma {
            if !from_peer {
                self.count_not_peer();
                self.reject(handle, &p, ReturnCode::PermViolation);
                return RxOutcome::Done;
            }
            self.rx_rma(handle, &p);
            return RxOutcome::Done;
        }
        let single = p.single();
        let key = p.key();
        let Some(ep) = self.eps.get(handle) else {
            return RxOutcome::Done;
        };
        if ep.faulted {
            self.reject(handle, &p, ReturnCode::HostUnsuccessfulCompletion);
            return RxOutcome::Done;
        }
        let (serial, max_group, av) = (ep.serial, ep.max_group, ep.av);
        if !single {
            let mut found = self.reasm.lookup(key, p.pds.psn, handle, serial, &self.eps);
            if found == Lookup::Stale {
                // The sender gave the id of a message still in reassembly to this one: that
                // message is over. End it, then take this packet as it comes.
                self.end_reassembly(key);
                found = self.reasm.lookup(key, p.pds.psn, handle, serial, &self.eps);
            }
            match found {
                Lookup::Active => return self.rx_segment(key, &p),
                Lookup::Finished(rc, list) => {
                    if rc == ReturnCode::Ok {
                        self.counters.debug.rx_duplicate_packets += 1;
                    } else {
                        self.count_reject(handle, rc);
                    }
                    self.respond_list(&p, rc, 0, list, None);
                    return RxOutcome::Done;
                }
                Lookup::Conflict | Lookup::Stale => {
                    self.counters.inc(RX_MALFORMED);
                    return RxOutcome::Done;
                }
                // The id given again: a copy of an older single-packet message with it is
                // no longer told apart by its PSN alone.
                Lookup::New => self.reasm.forget_single(key),
            }
        } else {
            // A copy of a single-packet message already answered: the same answer again
            // (datagrams have no PSN and are never answered, so none is a copy).
            let copy = p
                .reliable
                .then(|| self.reasm.single_answer(key, p.pds.psn))
                .flatten();
            if let Some((rc, list)) = copy {
                if rc == ReturnCode::Ok {
                    self.counters.debug.rx_duplicate_packets += 1;
                } else {
                    self.count_reject(handle, rc);
                }
                self.respond_list(&p, rc, 0, list, None);
                return RxOutcome::Done;
            }
            // The sender gave this message the id of a remembered one: that one is over, and
            // a later message with the id is new whatever its PSNs (they wrap too, at 2^32).
            self.reasm.forget(key);
            // So is one still in reassembly with the id, that this packet's PSN is far ahead
            // of (datagrams have no PSN).
            if p.reliable && self.reasm.passes_active(key, p.pds.psn) {
                self.end_reassembly(key);
            }
        }
        // A new message: from the peer of a connected endpoint (the packets of a message it
        // took before its peer changed finish it, above), and of a peer group the endpoint
        // receives.
        if !from_peer {
            self.count_not_peer();
            self.refuse(handle, &p, ReturnCode::PermViolation);
            return RxOutcome::Done;
        }
        if p.group > max_group.unwrap_or(0) {
            self.counters.inc(RX_BAD_GROUP);
            self.refuse(handle, &p, ReturnCode::Undeliverable);
            return RxOutcome::Done;
        }
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        if !from_backlog && !ep.rx_backlog.is_empty() {
            return self.backlog(handle, &p, f);
        }
        if space == Space::Tagged {
            return self.rx_tagged(handle, serial, &p, f, from_backlog);
        }
        // Untagged messages of one sender take buffers in arrival order: one of a group and
        // sender whose earlier messages wait on the unexpected list joins them
        // (`untagged_unexpected`).
        if ep.holds_untagged_of(p.group, p.key().sender()) {
            return self.rx_untagged_unexpected(handle, serial, &p);
        }
        if max_group.is_some() {
            return self.rx_grouped(handle, serial, &p, f, from_backlog);
        }
        // Untagged: the current multi-receive buffer when the message fits it, else the next
        // RX descriptor (a message that does not fit retires the current buffer first; with
        // no next descriptor it waits on the unexpected list, or is refused, and the current
        // buffer stays as it was).
        let fits = ep.mrecv.as_ref().map(|m| m.fits(p.ses.request_length));
        if fits != Some(true) && !ep.rx.pending() {
            return self.rx_untagged_unexpected(handle, serial, &p);
        }
        if !ep.cq_has_room_for(1 + u64::from(fits == Some(false))) {
            return self.hold_for_cq_room(handle, &p, f, from_backlog);
        }
        if !single && !self.reasm.has_room(self.cfg.reassembly_slots, &self.eps) {
            self.counters.debug.reassembly_overflows += 1;
            self.refuse(handle, &p, ReturnCode::Undeliverable);
            return RxOutcome::Done;
        }
        let src_addr = self.source_of(av, handle, &p);
        match fits {
            Some(true) => return self.mrecv_deliver(handle, serial, &p, src_addr),
            Some(false) => self.mrecv_retire(handle),
            None => {}
        }
        let Some(ep) = self.eps.get_mut(handle) else {
            return RxOutcome::Done;
        };
        if !ep.rx.pending() {
            return self.rx_untagged_unexpected(handle, serial, &p);
        }
        let at = ep.rx.base + u64::from(ep.rx.head) * 32;
        let mut raw = [0u8; 32];
        if self.iommu.read(at, &mut raw).is_err() {
            self.ring_fault(handle);
            self.refuse(handle, &p, ReturnCode::HostUnsuccessfulCompletion);
            return RxOutcome::Done;
        }
        ep.rx.head = ep.rx.geom.next(ep.rx.head);
        ep.skip_withdrawn_rx();
        let Ok(d) = RxDescriptor::read_from_bytes(&raw) else {
            return RxOutcome::Done;
        };
        let mut c = Completion {
            context: d.context,
            data: U64::new(p.cq_data()),
            src_addr: U64::new(uet_fwif::FI_ADDR_NOTAVAIL),
            status: LocalStatus::Ok as u8,
            return_code: ReturnCode::Ok as u8,
            kind: CompletionKind::Recv as u8,
            ..Completion::default()
        };
        let multi = d.flags.get() == RX_FLAG_MULTI_RECV;
        let bad = d.flags.get() & !RX_FLAG_MULTI_RECV != 0
            || d.group.get() != 0
            || (!multi && d.min_free.get() != 0);
        if bad {
            c.status = LocalStatus::BadDescriptor as u8;
            c.return_code = ReturnCode::Undeliverable as u8;
            if !single {
                c.data = U64::ZERO;
            }
            self.post_completion(handle, c);
            self.refuse(handle, &p, ReturnCode::Undeliverable);
            return RxOutcome::Done;
        }
        if multi {
            self.mrecv_open(handle, &d);
            return self.mrecv_deliver(handle, serial, &p, src_addr);
        }
        if !single {
            let sink = Sink::Host {
                buf: d.buf.get(),
                buf_len: d.len.get(),
            };
            let r = Reassembly::new(handle, serial, sink, CompletionKind::Recv, d.context, &p);
            return self.start_reassembly(r, &p);
        }
        self.deliver_single(handle, &p, d.buf.get(), d.len.get(), c, src_addr);
        RxOutcome::Done
    }

    /// The sender of a request that entry `handle` (an endpoint or a context) serves, as an
    /// `fi_addr_t` of AV `av`. A sender in no entry is reported by the `source` of the slot
    /// the request was accepted through: the endpoint's granted slot with the request's
    /// JobID (a context's grants are its endpoint's); for a request accepted by the
    /// endpoint's own JobID, the AV's slot with that JobID, if any.
    pub(crate) fn source_of(&mut self, av: u32, handle: u16, p: &ParsedRequest<'_>) -> u64 {
        self.sender_source(av, handle, p.dg.src_ip, p.ses.initiator, p.ses.job_id)
    }

    /// [`Nic::source_of`] for a request of JobID `job` from `(ip, initiator)`: what a
    /// completion written now reports. A message whose completion comes after its first
    /// packet (the last packet of a reassembly, a receive taking an unexpected message) is
    /// looked up then, so that it reports the AV as it is when the completion is written.
    pub(crate) fn sender_source(
        &mut self,
        av: u32,
        handle: u16,
        ip: IpAddr,
        initiator: u32,
        job: u32,
    ) -> u64 {
        let (auths, eps) = (&self.auths, &self.eps);
        let in_job = |e: &uet_fwif::NicAvEntry| match e.auth_key_slot() {
            Some(slot) => auths.job_of_av(slot, av) == Some(job),
            None => e.job_id.get() == job,
        };
        self.avs
            .get_mut(av)
            .and_then(|t| t.source_for_job(ip, initiator, in_job))
            .or_else(|| {
                // The sender is in no entry (looked up only then, off the common path): the
                // slot the request was accepted through.
                let through = eps
                    .get(handle)
                    .and_then(|e| eps.get(e.owner))
                    .and_then(|ep| {
                        ep.auth_slots
                            .iter()
                            .copied()
                            .find(|&s| auths.job_of_av(s, av) == Some(job))
                    });
                match through {
                    Some(slot) => auths.get(slot).map(|s| s.source),
                    None => (av != 0).then(|| auths.source_for(av, job)).flatten(),
                }
            })
            .unwrap_or(uet_fwif::FI_ADDR_NOTAVAIL)
    }

    /// Write a single-packet message into a host buffer, complete it with `c` and answer it.
    pub(crate) fn deliver_single(
        &mut self,
        handle: u16,
        p: &ParsedRequest<'_>,
        buf: u64,
        buf_len: u32,
        mut c: Completion,
        src_addr: u64,
    ) {
        let n = p.payload.len().min(buf_len as usize);
        let data = p.payload.get(..n).unwrap_or(&[]);
        if self.iommu.write(buf, data).is_err() {
            self.dma_fault();
            c.status = LocalStatus::DmaFault as u8;
            c.return_code = ReturnCode::HostUnsuccessfulCompletion as u8;
            // Nothing delivered; the sender and group are known, as on the other paths.
            c.src_addr = U64::new(src_addr);
            c.group = U32::new(p.group);
            self.post_completion(handle, c);
            self.reject(handle, p, ReturnCode::HostUnsuccessfulCompletion);
            return;
        }
        if n < p.payload.len() {
            c.status = LocalStatus::Truncated as u8;
            c.overflow = U32::new((p.payload.len() - n) as u32);
        }
        c.len = U32::new(n as u32);
        c.src_addr = U64::new(src_addr);
        c.group = U32::new(p.group);
        self.counters.inc(RX_PACKETS);
        self.counters.add(RX_BYTES, n as u64);
        self.post_completion(handle, c);
        self.respond(p, ReturnCode::Ok, n as u32);
    }

    /// Answer a request with an error; for a packet of a multi-packet message, the rest of the
    /// message gets the same answer.
    pub(crate) fn refuse(&mut self, handle: u16, p: &ParsedRequest<'_>, rc: ReturnCode) {
        if !p.single() {
            self.reasm
                .finish(p.key(), rc, ses::LIST_EXPECTED, p.pds.psn);
        }
        self.reject(handle, p, rc);
    }

    /// Open the reassembly of a multi-packet message into a host buffer (`r`, built for its
    /// first packet `p`) and take that packet. The endpoint counts it in `reassembling` until
    /// `finish_reassembly`.
    pub(crate) fn start_reassembly(&mut self, r: Reassembly, p: &ParsedRequest<'_>) -> RxOutcome {
        if let Some(ep) = self.eps.get_mut(r.handle) {
            ep.reassembling += 1;
        }
        let key = p.key();
        self.reasm.active.insert(key, r);
        self.rx_segment(key, p)
    }

    /// One packet of a message in reassembly.
    pub(crate) fn rx_segment(&mut self, key: MsgKey, p: &ParsedRequest<'_>) -> RxOutcome {
        let Some(r) = self.reasm.active.get_mut(&key) else {
            return RxOutcome::Done;
        };
        // Every packet of a message carries its length, group, operation, match bits and
        // JobID: one that names another belongs to no message in reassembly.
        let tagged = p.ses.opcode == ses::OP_TAGGED_SEND;
        if p.ses.request_length != r.total
            || p.group != r.group
            || tagged != (r.kind == CompletionKind::TaggedRecv)
            || p.ses.match_bits != r.tag
            || p.ses.job_id != r.job_id
        {
            self.counters.inc(RX_MALFORMED);
            return RxOutcome::Done;
        }
        let n = p.payload.len() as u32; // parse_request: offset + n <= request_length
        let start = p.offset;
        let end = start.saturating_add(n);
        // Only a packet accepted into the message (new bytes) moves the PSN it is known at:
        // a copy of received bytes (whatever PSN it carries) and a malformed packet leave the
        // message as it was.
        match r.insert(start, end) {
            RangeInsert::New => r.psn = p.pds.psn,
            RangeInsert::Duplicate => {
                self.counters.debug.rx_duplicate_packets += 1;
                let list = r.list();
                self.respond_list(p, ReturnCode::Ok, 0, list, None);
                return RxOutcome::Done;
            }
            RangeInsert::Overlap | RangeInsert::TooFragmented => {
                self.counters.inc(RX_MALFORMED);
                return RxOutcome::Done;
            }
        }
        if p.ses.flags & ses::FLAG_SOM != 0 {
            r.header_data = p.cq_data();
        }
        // Only the part of the packet inside the buffer is written.
        let list = r.list();
        let buf_len = match &r.sink {
            Sink::Host { buf_len, .. } => *buf_len,
            Sink::Staged(v) => v.len() as u32,
        };
        let inside = end.min(buf_len).saturating_sub(start);
        let mut rc = ReturnCode::Ok;
        if inside > 0 {
            let data = p.payload.get(..inside as usize).unwrap_or(&[]);
            let written = match &mut r.sink {
                Sink::Host { buf, .. } => buf
                    .checked_add(u64::from(start))
                    .is_some_and(|at| self.iommu.write(at, data).is_ok()),
                Sink::Staged(v) => v
                    .get_mut(start as usize..(start + inside) as usize)
                    .map(|dst| dst.copy_from_slice(data))
                    .is_some(),
            };
            if written {
                self.counters.inc(RX_PACKETS);
                self.counters.add(RX_BYTES, u64::from(inside));
            } else {
                r.dma_fault = true;
                rc = ReturnCode::HostUnsuccessfulCompletion;
                self.counters.inc(uet_regs::DMA_FAULTS);
            }
        } else {
            self.counters.inc(RX_PACKETS);
        }
        let handle = r.handle;
        if r.received >= u64::from(r.total) {
            if let Some(r) = self.reasm.active.remove(&key) {
                self.finish_reassembly(key, r, p.pds.psn);
            }
        }
        let delivered = if rc == ReturnCode::Ok { inside } else { 0 };
        if rc != ReturnCode::Ok {
            self.count_reject(handle, rc);
        }
        self.respond_list(p, rc, delivered, list, None);
        RxOutcome::Done
    }

    /// End the message in reassembly under `key`, which will never finish: the sender has
    /// given its id to a new message (see the module docs, *Messages that never finish*). What
    /// it holds is freed: its reassembly slot, its completion-ring reservation, its place on
    /// the unexpected list. A receive it took completes `Cancelled`, `len` 0; a place in a
    /// multi-receive buffer completes nothing (the release of a retired buffer it was the
    /// last message of is a completion of its own). The rest of its packets are refused
    /// RC_UNDELIVERABLE, as those of a destroyed endpoint's message are.
    fn end_reassembly(&mut self, key: MsgKey) {
        let Some(r) = self.reasm.active.remove(&key) else {
            return;
        };
        self.reasm
            .finish(key, ReturnCode::Undeliverable, ses::LIST_EXPECTED, r.psn);
        let Some(ep) = self.eps.get_mut(r.handle).filter(|e| e.serial == r.serial) else {
            return;
        };
        let cancelled = |context| {
            crate::nic::unfilled_receive(context, r.kind, LocalStatus::Cancelled, ReturnCode::Ok)
        };
        let c = match r.sink {
            Sink::Host { .. } => {
                ep.reassembling = ep.reassembling.saturating_sub(1);
                match r.multi {
                    Some(place) => return self.mrecv_abandoned(r.handle, place),
                    None => cancelled(r.context),
                }
            }
            Sink::Staged(_) => {
                // Its entry still waiting for its bytes, and a receive bound to it.
                let Some(i) = ep
                    .unexpected
                    .iter()
                    .position(|u| u.key == key && u.data.is_none())
                else {
                    return;
                };
                let Some(u) = ep.unexpected.remove(i) else {
                    return;
                };
                ep.unexpected_bytes = ep.unexpected_bytes.saturating_sub(u64::from(u.total));
                if !u.tagged {
                    ep.unexpected_untagged = ep.unexpected_untagged.saturating_sub(1);
                }
                let Some(d) = u.bound else {
                    return;
                };
                ep.reassembling = ep.reassembling.saturating_sub(1);
                cancelled(d.context)
            }
        };
        self.post_completion(r.handle, c);
    }

    /// Every byte of a message arrived: complete its receive descriptor, or mark its
    /// unexpected-list entry complete.
    fn finish_reassembly(&mut self, key: MsgKey, r: Reassembly, psn: u32) {
        let buf_len = match r.sink {
            Sink::Host { buf_len, .. } => buf_len,
            Sink::Staged(data) => {
                self.reasm
                    .finish(key, ReturnCode::Ok, ses::LIST_OVERFLOW, psn);
                return self.unexpected_complete(r.handle, r.serial, key, data, r.header_data);
            }
        };
        let delivered = r.total.min(buf_len);
        let (status, rc) = if r.dma_fault {
            (
                LocalStatus::DmaFault,
                ReturnCode::HostUnsuccessfulCompletion,
            )
        } else if r.total > buf_len {
            (LocalStatus::Truncated, ReturnCode::Ok)
        } else {
            (LocalStatus::Ok, ReturnCode::Ok)
        };
        self.reasm.finish(key, rc, ses::LIST_EXPECTED, psn);
        let Some(av) = self
            .eps
            .get(r.handle)
            .filter(|e| e.serial == r.serial)
            .map(|e| e.av)
        else {
            return;
        };
        let src_addr = self.sender_source(av, r.handle, key.src, key.initiator, r.job_id);
        let Some(ep) = self.eps.get_mut(r.handle) else {
            return;
        };
        ep.reassembling = ep.reassembling.saturating_sub(1);
        let (flags, buf_offset) = match r.multi {
            Some(place) => self.mrecv_finished(r.handle, place),
            None => (0, 0),
        };
        let c = Completion {
            context: r.context,
            data: U64::new(r.header_data),
            src_addr: U64::new(src_addr),
            tag: U64::new(if r.kind == CompletionKind::TaggedRecv {
                r.tag
            } else {
                0
            }),
            // A faulted buffer holds no message: nothing is delivered, as on every other path.
            len: U32::new(if r.dma_fault { 0 } else { delivered }),
            status: status as u8,
            return_code: rc as u8,
            kind: r.kind as u8,
            flags,
            buf_offset: U32::new(buf_offset),
            // Only a truncated message reports the bytes that did not fit.
            overflow: U32::new(if status == LocalStatus::Truncated {
                r.total - delivered
            } else {
                0
            }),
            group: U32::new(r.group),
            ..Completion::default()
        };
        self.post_completion(r.handle, c);
    }

    /// Answer a request with a PDS ACK and an SES default response on the expected list.
    pub(crate) fn respond(&mut self, p: &ParsedRequest<'_>, rc: ReturnCode, delivered: u32) {
        self.respond_list(p, rc, delivered, ses::LIST_EXPECTED, None);
    }

    /// Answer a request: `list` as given, and with `data` a response with data.
    pub(crate) fn respond_list(
        &mut self,
        p: &ParsedRequest<'_>,
        rc: ReturnCode,
        delivered: u32,
        list: u8,
        data: Option<&[u8]>,
    ) {
        if !p.reliable {
            // A datagram is never answered: its outcome stays in the counters.
            if rc != ReturnCode::Ok {
                self.counters.debug.rx_datagrams_dropped += 1;
            }
            return;
        }
        if p.single() && matches!(p.ses.opcode, ses::OP_SEND | ses::OP_TAGGED_SEND) {
            self.reasm.answered_single(p.key(), (p.pds.psn, rc, list));
        }
        let local_pdc = self.pdcs.target_pdc(p.dg.src_ip, p.pds.spdcid);
        let ack = Ack {
            next_hdr: if data.is_some() {
                pds::NEXT_HDR_RESPONSE_DATA
            } else {
                pds::NEXT_HDR_RESPONSE
            },
            flags: 0,
            ack_psn_offset: 0,
            cack_psn: p.pds.psn,
            spdcid: local_pdc,
            dpdcid: p.pds.spdcid,
        };
        let resp = Response {
            list,
            opcode: if data.is_some() {
                ses::OP_RESPONSE_WITH_DATA
            } else {
                ses::OP_RESPONSE_DEFAULT
            },
            return_code: rc as u8,
            message_id: p.ses.message_id,
            ri_generation: p.ses.ri_generation,
            job_id: p.ses.job_id,
            modified_length: delivered,
        };
        let extra = data.map_or(0, <[u8]>::len);
        let mut pkt = Vec::with_capacity(pds::ACK_BYTES + ses::RESPONSE_BYTES + extra);
        ack.encode(&mut pkt);
        resp.encode(&mut pkt);
        if let Some(d) = data {
            pkt.extend_from_slice(d);
        }
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
