//! RECV_CANCEL (since interface 1.14): a posted receive withdrawn before a message takes it
//! (see `uet_fwif::admin`, *RECV_CANCEL*).
//!
//! * The RX ring of an endpoint without peer groups is read by arriving messages, in order.
//!   A withdrawn descriptor that is not at the ring's head stays in the ring, its position
//!   marked in the endpoint's `rx_withdrawn`; whenever the head moves, it passes every marked
//!   position it reaches (`skip_withdrawn_rx`), so a later delivery never takes it and the
//!   head never rests on one. The ring is never reordered.
//! * The RX ring of an endpoint with peer groups and the tagged RX ring are read eagerly onto
//!   posted lists: the descriptor is removed from its list.
//!
//! * A multi-receive buffer (since interface 1.19): one still in the RX ring is withdrawn as
//!   above; the current one, which is older than any in the ring, is retired, provided no
//!   message placed in it is still arriving. Its completion is the buffer's release, marked
//!   `Cancelled`.
//!
//! Either way the receive completes `Cancelled` (`len` 0) in the completion ring of the
//! entry named, and the command answers Success. A receive found nowhere is NotPosted; one
//! a message in reassembly holds (in a host buffer, or bound to a message still arriving on
//! the unexpected list), a multi-receive buffer a message is still arriving into, and before
//! 1.19 any multi-receive buffer, are InProgress; no room in the
//! completion ring is Busy, also when the receive is not found but an eagerly read ring still
//! holds descriptors left unread for want of that room. A refusal changes nothing.

use crate::endpoint_table::Endpoint;
use crate::nic::Nic;
use crate::rx_engine::Sink;
use uet_fwif::admin::{RecvCancelBody, CTX_ROLE_CONTROL, CTX_ROLE_RX, RECV_CANCEL_RING_TAGGED};
use uet_fwif::datapath::{
    COMPLETION_FLAG_BUFFER_RELEASED, COMPLETION_FLAG_MULTI_RECV, COMPLETION_FLAG_NO_MESSAGE,
    RX_DESCRIPTOR_BYTES, RX_FLAG_MULTI_RECV,
};
use uet_fwif::{CompletionKind, LocalStatus, ReturnCode, RxDescriptor, Status};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromBytes;

impl Endpoint {
    /// Move the RX ring's head past the withdrawn descriptors it reaches.
    pub(crate) fn skip_withdrawn_rx(&mut self) {
        while self.rx.pending() && self.rx_withdrawn.remove(&self.rx.head) {
            self.rx.head = self.rx.geom.next(self.rx.head);
        }
    }
}

impl Nic {
    pub(crate) fn fw_recv_cancel(
        &mut self,
        endpoint: u32,
        b: &RecvCancelBody,
    ) -> Result<(u32, u32), Status> {
        let h = u16::try_from(endpoint).map_err(|_| Status::InvalidHandle)?;
        let ep = self.eps.get(h).ok_or(Status::InvalidHandle)?;
        if ep.role & (CTX_ROLE_RX | CTX_ROLE_CONTROL) == 0 {
            return Err(Status::InvalidHandle);
        }
        let tagged = b.ring == RECV_CANCEL_RING_TAGGED;
        if tagged && ep.trx.is_none() {
            return Err(Status::InvalidField);
        }
        let context = b.context;
        let kind = if tagged {
            CompletionKind::TaggedRecv
        } else {
            CompletionKind::Recv
        };
        // Take in what the eager readers have not read yet, so the posted lists are whole.
        if tagged {
            self.trx_poll(h);
        } else if ep.max_group.is_some() {
            self.rx_group_poll(h);
        }
        let Some(ep) = self.eps.get(h) else {
            return Err(Status::InvalidHandle);
        };
        if ep.faulted {
            return Err(Status::NotPosted);
        }
        let found = if tagged {
            ep.posted_tagged
                .iter()
                .position(|p| p.desc.context == context)
                .map(Found::Listed)
        } else if ep.max_group.is_some() {
            ep.posted_rx
                .iter()
                .position(|d| d.context == context)
                .map(Found::Listed)
        } else {
            match self.current_mrecv(h, context)? {
                Some(found) => Some(found),
                None => self.find_in_rx_ring(h, context)?,
            }
        };
        let Some(found) = found else {
            // The eager readers leave a ring unread while the completion ring is full: a
            // receive still there is posted, and withdrawn once there is room.
            let held_back = self.eps.get(h).is_some_and(|ep| {
                let unread = if tagged {
                    ep.trx.is_some_and(|r| r.pending())
                } else {
                    ep.max_group.is_some() && ep.rx.pending()
                };
                unread && !ep.cq_has_room()
            });
            if held_back {
                return Err(Status::Busy);
            }
            return Err(if self.holds_receive(h, kind, context) {
                Status::InProgress
            } else {
                Status::NotPosted
            });
        };
        let Some(ep) = self.eps.get_mut(h) else {
            return Err(Status::InvalidHandle);
        };
        if !ep.cq_has_room() {
            return Err(Status::Busy);
        }
        match found {
            Found::Listed(i) if tagged => {
                ep.posted_tagged.remove(i);
            }
            Found::Listed(i) => {
                ep.posted_rx.remove(i);
            }
            Found::Ring { pos, .. } => {
                ep.rx_withdrawn.insert(pos);
                ep.skip_withdrawn_rx();
            }
            Found::CurrentMultiRecv => {}
        }
        let mut c =
            crate::nic::unfilled_receive(context, kind, LocalStatus::Cancelled, ReturnCode::Ok);
        match found {
            Found::Ring { multi: true, .. } => {
                c.flags = MULTI_RECV_RELEASE;
            }
            Found::CurrentMultiRecv => {
                if let Some(m) = self.eps.get_mut(h).and_then(|ep| ep.mrecv.take()) {
                    c.flags = MULTI_RECV_RELEASE;
                    c.buf_offset = U32::new(m.next);
                }
            }
            _ => {}
        }
        self.post_completion(h, c);
        Ok((0, 0))
    }

    /// The endpoint's current multi-receive buffer, when it has `context` and RECV_CANCEL may
    /// withdraw it (since interface 1.19). It is older than any descriptor in the ring, so a
    /// context names it first: with a message placed in it still arriving it is InProgress,
    /// and no younger descriptor with the context is withdrawn in its place.
    fn current_mrecv(&self, h: u16, context: U64) -> Result<Option<Found>, Status> {
        let Some(m) = self.eps.get(h).and_then(|ep| ep.mrecv.as_ref()) else {
            return Ok(None);
        };
        if m.context != context {
            return Ok(None);
        }
        // Before 1.19 every multi-receive buffer is InProgress, the current one too.
        if m.pending > 0 || self.cfg.interface_minor < uet_regs::since::MULTI_RECV_CANCEL {
            return Err(Status::InProgress);
        }
        Ok(Some(Found::CurrentMultiRecv))
    }

    /// The ring position of the oldest descriptor with `context` the NIC has not read from
    /// the RX ring of `h` (one without peer groups), skipping withdrawn ones. A multi-receive
    /// buffer is InProgress; a ring the NIC cannot read is a DMA fault.
    fn find_in_rx_ring(&mut self, h: u16, context: U64) -> Result<Option<Found>, Status> {
        let Some(ep) = self.eps.get(h) else {
            return Err(Status::InvalidHandle);
        };
        let ring = ep.rx;
        let mut pos = ring.head;
        while pos != ring.tail {
            let withdrawn = self
                .eps
                .get(h)
                .is_some_and(|e| e.rx_withdrawn.contains(&pos));
            if !withdrawn {
                let at = ring.base + u64::from(pos) * RX_DESCRIPTOR_BYTES as u64;
                let mut raw = [0u8; RX_DESCRIPTOR_BYTES];
                if self.iommu.read(at, &mut raw).is_err() {
                    return Err(self.dma_status());
                }
                if let Ok(d) = RxDescriptor::read_from_bytes(&raw) {
                    if d.context == context {
                        let multi = d.flags.get() & RX_FLAG_MULTI_RECV != 0;
                        if multi && self.cfg.interface_minor < uet_regs::since::MULTI_RECV_CANCEL {
                            return Err(Status::InProgress);
                        }
                        return Ok(Some(Found::Ring { pos, multi }));
                    }
                }
            }
            pos = ring.geom.next(pos);
        }
        Ok(None)
    }

    /// Whether a receive of `kind` with `context` of entry `h` is held by a message still
    /// arriving (or is its current or retired multi-receive buffer).
    fn holds_receive(&self, h: u16, kind: CompletionKind, context: U64) -> bool {
        let Some(ep) = self.eps.get(h) else {
            return false;
        };
        let in_reassembly = self.reasm.active.values().any(|r| {
            r.handle == h
                && r.serial == ep.serial
                && r.kind == kind
                && r.context == context
                && matches!(r.sink, Sink::Host { .. })
        });
        let bound = kind == CompletionKind::TaggedRecv
            && ep
                .unexpected
                .iter()
                .any(|u| u.bound.is_some_and(|d| d.context == context));
        let multi = kind == CompletionKind::Recv
            && (ep.mrecv.as_ref().is_some_and(|m| m.context == context)
                || ep.mrecv_retired.values().any(|m| m.context == context));
        in_reassembly || bound || multi
    }
}

/// Where the receive to withdraw is.
enum Found {
    /// Index on the posted list (tagged, or untagged with peer groups).
    Listed(usize),
    /// Position in the RX ring; `multi`: a multi-receive descriptor.
    Ring { pos: u16, multi: bool },
    /// The endpoint's current multi-receive buffer.
    CurrentMultiRecv,
}

/// The flags of a multi-receive buffer's release that carries no message.
const MULTI_RECV_RELEASE: u8 =
    COMPLETION_FLAG_MULTI_RECV | COMPLETION_FLAG_BUFFER_RELEASED | COMPLETION_FLAG_NO_MESSAGE;
