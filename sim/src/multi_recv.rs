//! Multi-receive unit: RX descriptors posted with `RX_FLAG_MULTI_RECV` (`FI_MULTI_RECV`).
//!
//! The rules are the datasheet's (`uet_fwif::datapath`, *Multi-receive buffers*); this block
//! keeps, per endpoint (or receive context):
//!
//! * the **current** buffer: the last multi-receive descriptor read from the RX ring and not
//!   yet retired — its IOVA, length, `min_free`, context, next free offset, the messages
//!   placed and those still in reassembly;
//! * the **retired** buffers whose messages are still in reassembly, by buffer id: the last of
//!   those messages to complete carries `COMPLETION_FLAG_BUFFER_RELEASED`.
//!
//! `rx_engine` asks this block where an untagged message goes when the endpoint has a current
//! buffer or the next RX descriptor is a multi-receive one. A placement reserves
//! `request_length` bytes (aligned to `MULTI_RECV_ALIGN`) when the first packet of the
//! message arrives, so packets of several messages may be written into one buffer at once and
//! in any order, never overlapping. A message that retires the buffer by not fitting needs two
//! completion slots (the release and its own) and waits for both, like any request; one that
//! does not fit while no RX descriptor follows retires nothing: it waits on the unexpected
//! list for the next descriptor (`untagged_unexpected`; before interface 1.17 it is refused).
//! Messages taken off that list are placed by the same rules, complete at once.
//!
//! ENDPOINT_DESTROY and FUNCTION_RESET drop the state with the endpoint.

use crate::nic::Nic;
use crate::rx_engine::{ParsedRequest, Reassembly, RxOutcome, Sink};
use uet_fwif::datapath::{
    multi_recv_next, COMPLETION_FLAG_BUFFER_RELEASED, COMPLETION_FLAG_MULTI_RECV,
    COMPLETION_FLAG_NO_MESSAGE,
};
use uet_fwif::{Completion, CompletionKind, LocalStatus, ReturnCode, RxDescriptor};
use zerocopy::little_endian::{U32, U64};

/// A multi-receive buffer the NIC holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MultiRecvBuf {
    /// Unique per endpoint.
    pub id: u64,
    pub buf: u64,
    pub len: u32,
    pub min_free: u32,
    pub context: U64,
    /// Next free offset.
    pub next: u32,
    /// Messages placed.
    pub placed: u32,
    /// Messages placed and still in reassembly.
    pub pending: u32,
}

impl MultiRecvBuf {
    /// Whether a message of `len` bytes fits the space left.
    pub(crate) fn fits(&self, len: u32) -> bool {
        len <= self.len.saturating_sub(self.next)
    }
}

/// Where a placed multi-packet message belongs: (buffer id, offset in the buffer).
pub(crate) type MultiPlace = (u64, u32);

/// Where [`Nic::mrecv_place`] put a message.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MultiRecvPlacement {
    /// The buffer's id.
    pub id: u64,
    /// The buffer's descriptor context.
    pub context: U64,
    /// IOVA of the message's first byte.
    pub buf: u64,
    /// Bytes of the buffer the message may take (less than the message: truncated).
    pub space: u32,
    /// Where the message starts in the buffer.
    pub offset: u32,
    /// The completion's flags: `MULTI_RECV`, and `BUFFER_RELEASED` when this placement
    /// retired the buffer and none of its messages is still in reassembly.
    pub flags: u8,
}

impl Nic {
    /// Make a multi-receive descriptor (already checked) the endpoint's current buffer.
    pub(crate) fn mrecv_open(&mut self, handle: u16, d: &RxDescriptor) {
        let Some(ep) = self.eps.get_mut(handle) else {
            return;
        };
        let id = ep.next_mrecv;
        ep.next_mrecv = ep.next_mrecv.wrapping_add(1);
        ep.mrecv = Some(MultiRecvBuf {
            id,
            buf: d.buf.get(),
            len: d.len.get(),
            min_free: d.min_free.get(),
            context: d.context,
            next: 0,
            placed: 0,
            pending: 0,
        });
    }

    /// Retire the current buffer: released at once (a completion of its own) when none of
    /// its messages is still in reassembly, else by the last of them.
    pub(crate) fn mrecv_retire(&mut self, handle: u16) {
        let Some(ep) = self.eps.get_mut(handle) else {
            return;
        };
        let Some(m) = ep.mrecv.take() else {
            return;
        };
        if m.pending > 0 {
            ep.mrecv_retired.insert(m.id, m);
            return;
        }
        self.post_completion(handle, release(&m));
    }

    /// A multi-packet message placed in buffer `place` was ended before its last byte came
    /// (`rx_engine`): it completes nothing, and its space stays unused. When it was the last
    /// message of the retired buffer still in reassembly, the buffer's release is a
    /// completion of its own, as when a retirement finds none.
    pub(crate) fn mrecv_abandoned(&mut self, handle: u16, place: MultiPlace) {
        let (id, _) = place;
        let Some(ep) = self.eps.get_mut(handle) else {
            return;
        };
        if let Some(m) = ep.mrecv.as_mut().filter(|m| m.id == id) {
            m.pending = m.pending.saturating_sub(1);
            return;
        }
        let Some(m) = ep.mrecv_retired.get_mut(&id) else {
            return;
        };
        m.pending = m.pending.saturating_sub(1);
        if m.pending > 0 {
            return;
        }
        if let Some(m) = ep.mrecv_retired.remove(&id) {
            self.post_completion(handle, release(&m));
        }
    }

    /// Place the message `p` in the endpoint's current buffer (it fits, or the buffer holds
    /// no message yet and takes it truncated), and deliver it or start its reassembly. The
    /// completion-ring room was checked by the caller.
    pub(crate) fn mrecv_deliver(
        &mut self,
        handle: u16,
        serial: u64,
        p: &ParsedRequest<'_>,
        src_addr: u64,
    ) -> RxOutcome {
        let single = p.single();
        let Some(at) = self.mrecv_place(handle, p.ses.request_length, single) else {
            return RxOutcome::Done;
        };
        if single {
            let c = Completion {
                context: at.context,
                data: U64::new(p.cq_data()),
                status: LocalStatus::Ok as u8,
                return_code: ReturnCode::Ok as u8,
                kind: CompletionKind::Recv as u8,
                flags: at.flags,
                buf_offset: U32::new(at.offset),
                ..Completion::default()
            };
            self.deliver_single(handle, p, at.buf, at.space, c, src_addr);
            return RxOutcome::Done;
        }
        let sink = Sink::Host {
            buf: at.buf,
            buf_len: at.space,
        };
        let mut r = Reassembly::new(handle, serial, sink, CompletionKind::Recv, at.context, p);
        r.multi = Some((at.id, at.offset));
        self.start_reassembly(r, p)
    }

    /// Place a message of `total` bytes in the endpoint's current buffer (see
    /// [`Nic::mrecv_deliver`]): reserve its space, retire the buffer when the placement leaves
    /// it too little, and say where the message goes. `complete`: the message's bytes are all
    /// here (a single-packet message, or one taken off the unexpected list), so its
    /// completion is written now; otherwise it counts in the buffer's `pending` until its
    /// reassembly ends. `None` when the endpoint has no current buffer.
    pub(crate) fn mrecv_place(
        &mut self,
        handle: u16,
        total: u32,
        complete: bool,
    ) -> Option<MultiRecvPlacement> {
        let ep = self.eps.get_mut(handle)?;
        let m = ep.mrecv.as_mut()?;
        let offset = m.next;
        let space = total.min(m.len.saturating_sub(offset));
        m.next = multi_recv_next(offset, space, m.len);
        m.placed = m.placed.saturating_add(1);
        let retire = m.len - m.next < m.min_free || space < total;
        let buf = m.buf.saturating_add(u64::from(offset));
        let (id, context) = (m.id, m.context);
        if !complete {
            m.pending += 1;
        }
        let mut flags = COMPLETION_FLAG_MULTI_RECV;
        if retire {
            if let Some(m) = ep.mrecv.take() {
                if m.pending == 0 {
                    flags |= COMPLETION_FLAG_BUFFER_RELEASED;
                } else {
                    ep.mrecv_retired.insert(id, m);
                }
            }
        }
        Some(MultiRecvPlacement {
            id,
            context,
            buf,
            space,
            offset,
            flags,
        })
    }

    /// A multi-packet message placed in buffer `place` completed: the flags and offset its
    /// completion carries (the release when it is the retired buffer's last message).
    pub(crate) fn mrecv_finished(&mut self, handle: u16, place: MultiPlace) -> (u8, u32) {
        let (id, offset) = place;
        let mut flags = COMPLETION_FLAG_MULTI_RECV;
        if let Some(ep) = self.eps.get_mut(handle) {
            if let Some(m) = ep.mrecv.as_mut().filter(|m| m.id == id) {
                m.pending = m.pending.saturating_sub(1);
            } else if let Some(m) = ep.mrecv_retired.get_mut(&id) {
                m.pending = m.pending.saturating_sub(1);
                if m.pending == 0 {
                    ep.mrecv_retired.remove(&id);
                    flags |= COMPLETION_FLAG_BUFFER_RELEASED;
                }
            }
        }
        (flags, offset)
    }
}

/// The release of multi-receive buffer `m` that carries no message: its context, `len` 0,
/// `buf_offset` its next free offset.
fn release(m: &MultiRecvBuf) -> Completion {
    Completion {
        context: m.context,
        src_addr: U64::new(uet_fwif::FI_ADDR_NOTAVAIL),
        status: LocalStatus::Ok as u8,
        return_code: ReturnCode::Ok as u8,
        kind: CompletionKind::Recv as u8,
        flags: COMPLETION_FLAG_MULTI_RECV
            | COMPLETION_FLAG_BUFFER_RELEASED
            | COMPLETION_FLAG_NO_MESSAGE,
        buf_offset: U32::new(m.next),
        ..Completion::default()
    }
}
