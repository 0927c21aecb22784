//! Packet Delivery Sublayer: PDS headers (big-endian) and the NIC's PDC state.
//!
//! ## Headers
//!
//! Every PDS header starts with the 16-bit prologue `type(5) | next_hdr(4) | flags(7)`.
//!
//! RUD request, 12 bytes ([`RudRequest`]):
//!
//! | bytes | field |
//! |---|---|
//! | 0–1 | prologue: type 2 (RUD_REQ), next_hdr 3 (SES standard request), flags RETX 0x10 / AR 0x08 / SYN 0x04 |
//! | 2–3 | clear_psn_offset |
//! | 4–7 | PSN |
//! | 8–9 | SPDCID (the initiator's PDC) |
//! | 10–11 | DPDCID (the target's PDC; with SYN: use_rsv_pdc(1) rsvd(3) psn_offset(12), 0 here) |
//!
//! ACK, 12 bytes ([`Ack`]): prologue type 7, next_hdr 4 (SES response) or 5 (SES response
//! with data), flags 0 ·
//! ack_psn_offset(16) · cack_psn(32) · SPDCID (the target's PDC) · DPDCID (the initiator's PDC).
//!
//! UUD request, 4 bytes ([`UudRequest`], datagram endpoints): prologue type 6 (UUD_REQ),
//! next_hdr 3, flags 0 · 16 reserved bits, zero. No PDC, no PSN, never acknowledged.
//!
//! Reserved flag bits must be zero; a header with a wrong type, reserved bits set, or fewer than
//! its bytes is malformed.
//!
//! ## PDCs
//!
//! The model's fabric is lossless and in order, so the PDS keeps only what the headers need:
//! the initiator opens one PDC per destination fabric address (SPDCIDs from 1, not reused
//! after a function reset; one id space for initiator and target PDCs, given in turn and
//! wrapping at 2^16, skipping the ids of live PDCs; PSNs from [`START_PSN`] and message ids
//! from 0, both counted per PDC); its first request carries SYN; the target creates its PDC when it first sees a
//! request from `(source address, SPDCID)` and its ACK carries the target's PDCID, which the
//! initiator then puts in DPDCID. Every request is acknowledged by exactly one ACK (AR is not
//! needed) carrying the cumulative PSN of that request.
//!
//! The ids of the live PDCs are all different, however many destinations a function has
//! sent to: opening a PDC, initiator or target, while every id (1 to 65,535) is live first
//! closes the initiator PDC opened longest ago that no request is awaiting an ACK on (one
//! whose last request the fabric could not deliver counts as answered), and a later request
//! to its destination opens a new PDC. Without that, a function that had sent to 65,535
//! destinations (fewer, by the target PDCs its peers opened) gave the next one the id of a
//! live PDC, and a request of one waiting for its ACK under that id and PSN was taken for the
//! other's: it never completed. Only when every initiator PDC awaits an answer is an id
//! shared.
//!
//! The target holds at most [`TARGET_PDCS`] PDCs: a request from any source address and
//! SPDCID opens one, so a peer (or a forger) could otherwise make it hold a PDC for every
//! pair it cares to send. Opening another closes one that carried no request since the
//! table last went round, the oldest such (a second-chance clock: least recently used, near
//! enough, at one flag per request); a later request of that one opens a new PDC, whose id
//! its ACK carries and the initiator takes as its DPDCID from then on. (A NIC has a fixed
//! number of PDC contexts and closes idle PDCs on a timer; the model has no clock.)

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;

/// PDS type RUD_REQ.
pub const TYPE_RUD_REQ: u8 = 2;
/// PDS type UUD_REQ (unreliable unordered datagram).
pub const TYPE_UUD_REQ: u8 = 6;
/// PDS type ACK.
pub const TYPE_ACK: u8 = 7;
/// Bytes of a UUD request header.
pub const UUD_REQ_BYTES: usize = 4;
/// next_hdr: SES standard request.
pub const NEXT_HDR_REQUEST_STD: u8 = 3;
/// next_hdr: SES response.
pub const NEXT_HDR_RESPONSE: u8 = 4;
/// next_hdr: SES response with data (the answer to a READ).
pub const NEXT_HDR_RESPONSE_DATA: u8 = 5;
/// Request flag: retransmission.
pub const FLAG_RETX: u8 = 0x10;
/// Request flag: ACK requested.
pub const FLAG_AR: u8 = 0x08;
/// Request flag: first packet of a PDC.
pub const FLAG_SYN: u8 = 0x04;
/// Bytes of a RUD request header.
pub const RUD_REQ_BYTES: usize = 12;
/// Bytes of an ACK header.
pub const ACK_BYTES: usize = 12;
/// First PSN of a PDC opened by this model.
pub const START_PSN: u32 = 0x0001_0000;
/// Most target PDCs a NIC holds at once (see the module docs).
pub const TARGET_PDCS: usize = 4096;

const REQ_FLAGS_DEFINED: u8 = FLAG_RETX | FLAG_AR | FLAG_SYN;
/// ACK flags: ecn_marked 0x20, retrans 0x10, probe 0x08, request 0x06.
const ACK_FLAGS_DEFINED: u8 = 0x3E;

/// Why a PDS header was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PdsError {
    /// Fewer bytes than the header.
    #[error("truncated PDS header")]
    Truncated,
    /// Unexpected packet type.
    #[error("unexpected PDS type {0}")]
    Type(u8),
    /// Reserved flag bits set.
    #[error("reserved PDS flags {0:#x}")]
    Flags(u8),
}

/// The 16-bit prologue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prologue {
    /// Packet type (5 bits).
    pub pkt_type: u8,
    /// next_hdr / ctl_type (4 bits).
    pub next_hdr: u8,
    /// Flags (7 bits).
    pub flags: u8,
}

impl Prologue {
    /// Encode.
    pub fn to_u16(self) -> u16 {
        (u16::from(self.pkt_type & 0x1F) << 11)
            | (u16::from(self.next_hdr & 0x0F) << 7)
            | u16::from(self.flags & 0x7F)
    }

    /// Decode.
    pub fn from_u16(v: u16) -> Self {
        Prologue {
            pkt_type: (v >> 11) as u8,
            next_hdr: ((v >> 7) & 0x0F) as u8,
            flags: (v & 0x7F) as u8,
        }
    }

    /// The prologue at the start of `b`.
    pub fn peek(b: &[u8]) -> Result<Self, PdsError> {
        let s = b.get(..2).ok_or(PdsError::Truncated)?;
        Ok(Self::from_u16(u16::from_be_bytes([s[0], s[1]])))
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A RUD request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RudRequest {
    /// next_hdr.
    pub next_hdr: u8,
    /// Flags (RETX, AR, SYN).
    pub flags: u8,
    /// clear_psn_offset.
    pub clear_psn_offset: u16,
    /// PSN.
    pub psn: u32,
    /// Source PDC.
    pub spdcid: u16,
    /// Destination PDC.
    pub dpdcid: u16,
}

impl RudRequest {
    /// Append the 12 header bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let p = Prologue {
            pkt_type: TYPE_RUD_REQ,
            next_hdr: self.next_hdr,
            flags: self.flags,
        };
        out.extend_from_slice(&p.to_u16().to_be_bytes());
        out.extend_from_slice(&self.clear_psn_offset.to_be_bytes());
        out.extend_from_slice(&self.psn.to_be_bytes());
        out.extend_from_slice(&self.spdcid.to_be_bytes());
        out.extend_from_slice(&self.dpdcid.to_be_bytes());
    }

    /// Parse; returns the header and the bytes after it.
    pub fn parse(b: &[u8]) -> Result<(Self, &[u8]), PdsError> {
        let h = b.get(..RUD_REQ_BYTES).ok_or(PdsError::Truncated)?;
        let p = Prologue::from_u16(be16(h, 0));
        if p.pkt_type != TYPE_RUD_REQ {
            return Err(PdsError::Type(p.pkt_type));
        }
        if p.flags & !REQ_FLAGS_DEFINED != 0 {
            return Err(PdsError::Flags(p.flags));
        }
        let r = RudRequest {
            next_hdr: p.next_hdr,
            flags: p.flags,
            clear_psn_offset: be16(h, 2),
            psn: be32(h, 4),
            spdcid: be16(h, 8),
            dpdcid: be16(h, 10),
        };
        Ok((r, b.get(RUD_REQ_BYTES..).unwrap_or(&[])))
    }
}

/// A UUD request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UudRequest {
    /// next_hdr.
    pub next_hdr: u8,
}

impl UudRequest {
    /// Append the 4 header bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let p = Prologue {
            pkt_type: TYPE_UUD_REQ,
            next_hdr: self.next_hdr,
            flags: 0,
        };
        out.extend_from_slice(&p.to_u16().to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }

    /// Parse; returns the header and the bytes after it.
    pub fn parse(b: &[u8]) -> Result<(Self, &[u8]), PdsError> {
        let h = b.get(..UUD_REQ_BYTES).ok_or(PdsError::Truncated)?;
        let p = Prologue::from_u16(be16(h, 0));
        if p.pkt_type != TYPE_UUD_REQ {
            return Err(PdsError::Type(p.pkt_type));
        }
        if p.flags != 0 || be16(h, 2) != 0 {
            return Err(PdsError::Flags(p.flags));
        }
        Ok((
            UudRequest {
                next_hdr: p.next_hdr,
            },
            b.get(UUD_REQ_BYTES..).unwrap_or(&[]),
        ))
    }
}

/// An ACK header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// next_hdr.
    pub next_hdr: u8,
    /// Flags.
    pub flags: u8,
    /// ack_psn_offset.
    pub ack_psn_offset: u16,
    /// Cumulative ACK PSN.
    pub cack_psn: u32,
    /// The sender of the ACK's PDC (the target's).
    pub spdcid: u16,
    /// The receiver of the ACK's PDC (the initiator's).
    pub dpdcid: u16,
}

impl Ack {
    /// Append the 12 header bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let p = Prologue {
            pkt_type: TYPE_ACK,
            next_hdr: self.next_hdr,
            flags: self.flags,
        };
        out.extend_from_slice(&p.to_u16().to_be_bytes());
        out.extend_from_slice(&self.ack_psn_offset.to_be_bytes());
        out.extend_from_slice(&self.cack_psn.to_be_bytes());
        out.extend_from_slice(&self.spdcid.to_be_bytes());
        out.extend_from_slice(&self.dpdcid.to_be_bytes());
    }

    /// Parse; returns the header and the bytes after it.
    pub fn parse(b: &[u8]) -> Result<(Self, &[u8]), PdsError> {
        let h = b.get(..ACK_BYTES).ok_or(PdsError::Truncated)?;
        let p = Prologue::from_u16(be16(h, 0));
        if p.pkt_type != TYPE_ACK {
            return Err(PdsError::Type(p.pkt_type));
        }
        if p.flags & !ACK_FLAGS_DEFINED != 0 {
            return Err(PdsError::Flags(p.flags));
        }
        let a = Ack {
            next_hdr: p.next_hdr,
            flags: p.flags,
            ack_psn_offset: be16(h, 2),
            cack_psn: be32(h, 4),
            spdcid: be16(h, 8),
            dpdcid: be16(h, 10),
        };
        Ok((a, b.get(ACK_BYTES..).unwrap_or(&[])))
    }
}

/// An initiator-side PDC.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InitiatorPdc {
    pub spdcid: u16,
    /// The target's PDCID once its first ACK arrived.
    pub dpdcid: Option<u16>,
    pub next_psn: u32,
    /// Whether the SYN request has been sent.
    pub syn_sent: bool,
    /// The SES message id of the next message in the PDC ([`PdcTable::next_message_id`]).
    pub next_message_id: u16,
    /// Requests sent on the PDC that no ACK has answered yet, nor the fabric's word that
    /// none will ([`PdcTable::request_unanswered`]): while there are some, the PDC stays
    /// open.
    pub awaiting: u32,
}

/// The next PDC id after `last` that no live PDC has (PDC id 0 is never given). Ids are
/// given in turn and wrap at 2^16; one a live PDC, initiator or target, still has is
/// skipped, so that two initiator PDCs never share an SPDCID (a sent packet waits for its
/// ACK under its SPDCID and PSN), however many PDCs peers made the target open.
fn alloc_pdcid(last: &mut u16, in_use: &HashSet<u16>) -> u16 {
    for _ in 0..u16::MAX {
        *last = last.wrapping_add(1).max(1);
        if !in_use.contains(last) {
            break;
        }
    }
    *last
}

/// PDC state of one NIC.
#[derive(Debug, Default)]
pub(crate) struct PdcTable {
    initiator: HashMap<IpAddr, InitiatorPdc>,
    /// The initiator PDCs' destinations, the one opened longest ago first: the order in
    /// which [`PdcTable::close_idle_initiator`] looks for one to close.
    initiator_order: VecDeque<IpAddr>,
    /// Target PDCs by (source address, SPDCID): the local id, and whether a request used the
    /// PDC since the clock last passed it (at most [`TARGET_PDCS`]).
    target: HashMap<(IpAddr, u16), (u16, bool)>,
    /// The clock over the target PDCs: their keys, the next to look at first.
    target_clock: VecDeque<(IpAddr, u16)>,
    /// Local ids of the live PDCs, initiator and target.
    in_use: HashSet<u16>,
    next_pdcid: u16,
}

impl PdcTable {
    /// The initiator PDC to `dst`, opened on first use. Opening one while every PDC id is
    /// live closes an idle initiator PDC first ([`PdcTable::close_idle_initiator`]), so that
    /// the new one takes an id no live PDC has.
    fn initiator_pdc(&mut self, dst: IpAddr) -> &mut InitiatorPdc {
        if !self.initiator.contains_key(&dst) && self.in_use.len() >= usize::from(u16::MAX) {
            self.close_idle_initiator();
        }
        let (next_pdcid, in_use, order) = (
            &mut self.next_pdcid,
            &mut self.in_use,
            &mut self.initiator_order,
        );
        self.initiator.entry(dst).or_insert_with(|| {
            let spdcid = alloc_pdcid(next_pdcid, in_use);
            in_use.insert(spdcid);
            order.push_back(dst);
            InitiatorPdc {
                spdcid,
                dpdcid: None,
                next_psn: START_PSN,
                syn_sent: false,
                next_message_id: 0,
                awaiting: 0,
            }
        })
    }

    /// Close the initiator PDC opened longest ago that no request is awaiting an answer on,
    /// if there is one: its id is free again, and a later request to its destination opens
    /// a new PDC (SYN, a new id, PSNs and message ids from the start).
    fn close_idle_initiator(&mut self) {
        for _ in 0..self.initiator_order.len() {
            let Some(dst) = self.initiator_order.pop_front() else {
                return;
            };
            match self.initiator.get(&dst) {
                Some(p) if p.awaiting > 0 => self.initiator_order.push_back(dst),
                Some(p) => {
                    let id = p.spdcid;
                    self.initiator.remove(&dst);
                    self.in_use.remove(&id);
                    return;
                }
                None => {}
            }
        }
    }

    /// Header fields for the next request to `dst`: opens the PDC on first use.
    pub(crate) fn next_request(&mut self, dst: IpAddr) -> RudRequest {
        let pdc = self.initiator_pdc(dst);
        let syn = !pdc.syn_sent || pdc.dpdcid.is_none();
        pdc.syn_sent = true;
        pdc.awaiting = pdc.awaiting.saturating_add(1);
        let psn = pdc.next_psn;
        pdc.next_psn = pdc.next_psn.wrapping_add(1);
        RudRequest {
            next_hdr: NEXT_HDR_REQUEST_STD,
            flags: if syn { FLAG_SYN } else { 0 },
            clear_psn_offset: 0,
            psn,
            spdcid: pdc.spdcid,
            dpdcid: if syn { 0 } else { pdc.dpdcid.unwrap_or(0) },
        }
    }

    /// The SES message id of the next message to `dst`. Ids count per destination (the PDC
    /// the message travels in), not per endpoint: a target identifies a message by its PDC
    /// and id, whatever JobID and initiator id its packets carry. Ids wrap after 65,536
    /// messages; every message takes at least one PSN of the PDC, so a target that still
    /// remembers a message tells a later one with the same id by its PSNs.
    pub(crate) fn next_message_id(&mut self, dst: IpAddr) -> u16 {
        let pdc = self.initiator_pdc(dst);
        let id = pdc.next_message_id;
        pdc.next_message_id = id.wrapping_add(1);
        id
    }

    /// The initiator PDC with local id `spdcid`, if it leads to `peer`.
    pub(crate) fn initiator_matches(&self, peer: IpAddr, spdcid: u16) -> bool {
        self.initiator
            .get(&peer)
            .is_some_and(|p| p.spdcid == spdcid)
    }

    /// An ACK from `peer` answered a request of the initiator PDC to it (the caller checked
    /// that it is that PDC's), and established the target's PDCID.
    pub(crate) fn ack_received(&mut self, peer: IpAddr, target_pdcid: u16) {
        if let Some(p) = self.initiator.get_mut(&peer) {
            p.dpdcid = Some(target_pdcid);
            p.awaiting = p.awaiting.saturating_sub(1);
        }
    }

    /// A request [`PdcTable::next_request`] made for `peer` will have no ACK: the fabric
    /// could not deliver it, or it was never sent.
    pub(crate) fn request_unanswered(&mut self, peer: IpAddr) {
        if let Some(p) = self.initiator.get_mut(&peer) {
            p.awaiting = p.awaiting.saturating_sub(1);
        }
    }

    /// The target-side PDC for requests from `(src, spdcid)`, created on first use.
    /// At most [`TARGET_PDCS`] are held: opening another closes one no request used since
    /// the clock last passed it (see the module docs). A request of a PDC already open costs
    /// one hash lookup and sets its flag; opening one while the table is full passes the
    /// clock over at most every PDC twice, amortised once.
    pub(crate) fn target_pdc(&mut self, src: IpAddr, spdcid: u16) -> u16 {
        let key = (src, spdcid);
        if let Some((id, used)) = self.target.get_mut(&key) {
            *used = true;
            return *id;
        }
        while self.target.len() >= TARGET_PDCS {
            let Some(next) = self.target_clock.pop_front() else {
                break;
            };
            match self.target.get_mut(&next) {
                // Used since the clock last passed: a second chance.
                Some((_, used)) if *used => {
                    *used = false;
                    self.target_clock.push_back(next);
                }
                Some(&mut (closed, _)) => {
                    self.target.remove(&next);
                    self.in_use.remove(&closed);
                }
                None => {}
            }
        }
        // Every id live (the function has sent to as many destinations): an idle initiator
        // PDC makes way, as for a new initiator PDC, so the target PDC's id is its own.
        if self.in_use.len() >= usize::from(u16::MAX) {
            self.close_idle_initiator();
        }
        let id = alloc_pdcid(&mut self.next_pdcid, &self.in_use);
        self.in_use.insert(id);
        self.target.insert(key, (id, false));
        self.target_clock.push_back(key);
        id
    }

    /// Forget every PDC (function reset). PDC ids go on from where they were: a peer that
    /// still holds a PDC of this function from before the reset (and the outcomes of the
    /// messages it carried) never takes a new PDC, whose PSNs and message ids start again,
    /// for that old one. Hardware gets the same from a PDC id space it does not restart at a
    /// fixed value.
    pub(crate) fn clear(&mut self) {
        *self = PdcTable {
            next_pdcid: self.next_pdcid,
            ..PdcTable::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rud_request_bytes() {
        let r = RudRequest {
            next_hdr: NEXT_HDR_REQUEST_STD,
            flags: FLAG_SYN,
            clear_psn_offset: 0x0102,
            psn: 0x0A0B_0C0D,
            spdcid: 0x1122,
            dpdcid: 0x3344,
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(b.len(), 12);
        // type 2 << 11 | next_hdr 3 << 7 | SYN 0x04 = 0x1184
        assert_eq!(&b[0..2], &[0x11, 0x84]);
        assert_eq!(&b[2..4], &[0x01, 0x02]);
        assert_eq!(&b[4..8], &[0x0A, 0x0B, 0x0C, 0x0D]);
        assert_eq!(&b[8..10], &[0x11, 0x22]);
        assert_eq!(&b[10..12], &[0x33, 0x44]);
        b.push(0xEE);
        let (back, rest) = RudRequest::parse(&b).unwrap();
        assert_eq!(back, r);
        assert_eq!(rest, &[0xEE]);
        assert_eq!(RudRequest::parse(&b[..11]), Err(PdsError::Truncated));
        let mut bad = b.clone();
        bad[1] |= 0x01; // reserved flag bit
        assert!(matches!(RudRequest::parse(&bad), Err(PdsError::Flags(_))));
        assert!(matches!(Ack::parse(&b), Err(PdsError::Type(2))));
    }

    #[test]
    fn ack_bytes() {
        let a = Ack {
            next_hdr: NEXT_HDR_RESPONSE,
            flags: 0,
            ack_psn_offset: 0,
            cack_psn: 77,
            spdcid: 5,
            dpdcid: 6,
        };
        let mut b = Vec::new();
        a.encode(&mut b);
        // type 7 << 11 | next_hdr 4 << 7 = 0x3A00
        assert_eq!(&b[0..2], &[0x3A, 0x00]);
        assert_eq!(Ack::parse(&b).unwrap().0, a);
    }

    #[test]
    fn a_reset_does_not_reuse_pdc_ids() {
        let mut t = PdcTable::default();
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let before = t.next_request(peer);
        t.clear();
        let after = t.next_request(peer);
        assert_eq!(after.flags & FLAG_SYN, FLAG_SYN, "a new PDC");
        assert_eq!(after.psn, before.psn, "its PSNs start again");
        assert_ne!(after.spdcid, before.spdcid);
    }

    /// Requests from ever new (source, SPDCID) pairs, as a forger sends them, do not make the
    /// target hold a PDC for each: it keeps at most `TARGET_PDCS`, closing the least
    /// recently used, and a peer that keeps sending keeps its PDC.
    #[test]
    fn the_target_holds_a_bounded_number_of_pdcs() {
        let mut t = PdcTable::default();
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let id = t.target_pdc(peer, 7);
        for n in 0..3 * TARGET_PDCS as u32 {
            let forged = IpAddr::from([10, 6, (n >> 8) as u8, n as u8]);
            t.target_pdc(forged, (n >> 16) as u16);
            if n % 64 == 0 {
                assert_eq!(t.target_pdc(peer, 7), id, "a peer in use keeps its PDC");
            }
        }
        assert!(
            t.target.len() <= TARGET_PDCS,
            "{} target PDCs",
            t.target.len()
        );
        assert_eq!(t.target_pdc(peer, 7), id);
    }

    /// Requests from many (source, SPDCID) pairs, as a forger sends them, open and close
    /// target PDCs until the ids wrap; a new initiator PDC still gets an id no live PDC has,
    /// so two destinations never share an SPDCID.
    #[test]
    fn a_new_pdc_never_takes_the_id_of_a_live_one() {
        let mut t = PdcTable::default();
        let a: IpAddr = "10.0.0.9".parse().unwrap();
        let b: IpAddr = "10.0.0.10".parse().unwrap();
        let to_a = t.next_request(a).spdcid;
        let forger: IpAddr = "10.6.6.6".parse().unwrap();
        for spdcid in 0..u16::MAX - 1 {
            t.target_pdc(forger, spdcid);
        }
        let to_b = t.next_request(b).spdcid;
        assert_ne!(to_b, 0);
        assert_ne!(to_b, to_a, "two initiator PDCs with one SPDCID");
        let live: Vec<u16> = t.target.values().map(|&(id, _)| id).collect();
        assert!(!live.contains(&to_b), "an initiator PDC with a target's id");
        assert_eq!(t.next_request(a).spdcid, to_a);
    }

    /// A target PDC opened while initiator PDCs hold every id takes the id of an idle one
    /// it closes, never the id of a live PDC; one awaiting an ACK stays open.
    #[test]
    fn a_target_pdc_opened_with_every_id_live_takes_an_id_of_its_own() {
        let mut t = PdcTable::default();
        let peers: Vec<IpAddr> = (0..u32::from(u16::MAX))
            .map(|i| IpAddr::from((0x0A00_0000 + i).to_be_bytes()))
            .collect();
        for (n, &p) in peers.iter().enumerate() {
            t.next_request(p);
            // All but the first are answered: the first PDC awaits its ACK.
            if n > 0 {
                t.ack_received(p, 1);
            }
        }
        assert_eq!(t.in_use.len(), usize::from(u16::MAX));
        let initiator_ids = |t: &PdcTable| -> HashMap<u16, IpAddr> {
            t.initiator
                .iter()
                .map(|(&p, pdc)| (pdc.spdcid, p))
                .collect()
        };
        let forger: IpAddr = "10.200.0.1".parse().unwrap();
        for spdcid in 1..=3 {
            let id = t.target_pdc(forger, spdcid);
            let live = initiator_ids(&t);
            assert!(
                !live.contains_key(&id),
                "target PDC {spdcid} took id {id} of a live PDC"
            );
        }
        assert!(
            t.initiator.contains_key(&peers[0]),
            "the PDC awaiting an ACK stays"
        );
        assert_eq!(t.initiator.len(), usize::from(u16::MAX) - 3);
    }

    #[test]
    fn syn_only_until_established() {
        let mut t = PdcTable::default();
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let r1 = t.next_request(peer);
        assert_eq!(r1.flags & FLAG_SYN, FLAG_SYN);
        t.ack_received(peer, 42);
        let r2 = t.next_request(peer);
        assert_eq!(r2.flags & FLAG_SYN, 0);
        assert_eq!(r2.dpdcid, 42);
        assert_eq!(r2.psn, r1.psn + 1);
        assert_eq!(r2.spdcid, r1.spdcid);
    }
}
