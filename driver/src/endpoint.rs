//! Endpoints: the NIC assigns a PIDonFEP and a resource-index range; the driver owns the rings.
//!
//! An endpoint has a TX ring, an RX ring and a completion ring in one DMA region, handed to the
//! NIC by ENDPOINT_CREATE together with the AV table the NIC translates through. Sending is:
//! write a [`TxDescriptor`] naming the destination by `fi_addr_t`, fence, ring `TXQ_DOORBELL`.
//! The host never looks the peer up: the NIC's TX engine reads its own AV table. Receiving is:
//! post buffers to the RX ring; the NIC's RX engine demultiplexes arriving packets by JobID,
//! PIDonFEP and resource index into them, and reverse-translates the sender into an `fi_addr_t`.
//!
//! Buffers are [`DmaBuffer`]s: they move into the endpoint when posted and come back in the
//! completion, so nothing is copied or allocated on the way.
//!
//! | libfabric | endpoint call | ring |
//! |---|---|---|
//! | `fi_senddata` | [`Endpoint::post_send`] | TX, SEND |
//! | `fi_send` (connected `FI_EP_MSG`) | [`Endpoint::send`] | TX, SEND to the peer |
//! | `fi_tsenddata` | [`Endpoint::post_tsend`] | TX, TAGGED_SEND |
//! | `fi_inject`, `fi_injectdata` | [`Endpoint::inject`] | TX, SEND + inject |
//! | `fi_tinject`, `fi_tinjectdata` | [`Endpoint::tinject`] | TX, TAGGED_SEND + inject |
//! | `fi_write` | [`Endpoint::post_write`] | TX, WRITE |
//! | `fi_read` | [`Endpoint::post_read`] | TX, READ |
//! | `fi_recv` | [`Endpoint::post_recv`] | RX |
//! | `fi_recvmsg` with `FI_MULTI_RECV` | [`Endpoint::post_recv_multi`] | RX, multi-receive |
//! | `fi_trecv` | [`Endpoint::post_trecv`] | tagged RX |
//! | `fi_recv` for peer group `g` | [`Endpoint::post_recv_group`] | RX, group `g` |
//! | `fi_trecv` for peer group `g` | [`Endpoint::post_trecv_group`] | tagged RX, group `g` |
//! | `fi_trecvmsg` with `FI_PEEK` (and `FI_CLAIM` or `FI_DISCARD`), or `FI_CLAIM \| FI_DISCARD` | [`Endpoint::post_tprobe`] | tagged RX, a probe (interface 1.18) |
//! | `fi_trecvmsg` with `FI_CLAIM` | [`Endpoint::post_trecv_claimed`] | tagged RX, a claim (interface 1.18) |
//! | `fi_cq_read` | [`Endpoint::poll`] (every completion), [`Endpoint::cq_read`] (successes; `FI_EAVAIL` at an error) | completion |
//! | `fi_cq_readerr` | [`Endpoint::cq_readerr`] | completion |
//! | `fi_setopt(FI_OPT_MIN_MULTI_RECV)` | [`Endpoint::set_min_multi_recv`] | — |
//! | `fi_mr_reg` | [`Endpoint::register_mr`] | admin (MR_REGISTER) |
//!
//! The rings live in one DMA region together with the inject slots: one slot of
//! [`MAX_INJECT_BYTES`] per TX ring entry. `inject` copies the payload into the slot of the TX
//! completion context it takes, so the caller's buffer is free when the call returns; the slot
//! is reused only after that context's completion, which the driver consumes without reporting
//! it when it is a success (`fi_inject`: no completion), and reports when it is an error.
//!
//! ## Multi-receive buffers
//!
//! [`Endpoint::post_recv_multi`] posts one buffer for many untagged messages (`FI_MULTI_RECV`;
//! placement, alignment and release rules in `uet_fwif::datapath`, *Multi-receive buffers*).
//! Every message completes on its own, with [`CqEvent::multi_recv`] giving its offset in the
//! buffer; the buffer itself comes back only in the buffer's last completion, the one
//! carrying `FI_MULTI_RECV` ([`MultiRecv::released`]), after which the NIC never writes it
//! again. Until then the buffer stays in the endpoint, because the NIC is still placing later
//! messages in it: the driver forms no reference into that memory, and the application
//! reads a message's bytes by copying them out with [`Endpoint::multi_recv_read`] — a
//! completion is only written once its message's bytes are final, so the copy is exact
//! while the NIC writes elsewhere in the buffer. After the release, the returned
//! [`DmaBuffer`] holds every message: [`DmaBuffer::read_at`] at each completion's offset.
//! A [`MultiRecv`] names its buffer by ring slot and posting sequence number, so one from an
//! earlier, released buffer is refused rather than read from the buffer now in that slot.
//!
//! Tagged receives have no multi-receive form: `fi_tagged(3)` gives `fi_trecvmsg` no
//! `FI_MULTI_RECV` flag, and [`Endpoint::post_trecv_multi`] refuses with `FI_EOPNOTSUPP`.
//!
//! ## Peer groups
//!
//! An endpoint bound to an AV opened with `max_group_id` > 0 has peer groups (libfabric 2.x;
//! the datasheet is `uet_fwif::datapath`, *Peer groups*). Sends need nothing new: the
//! destination `fi_addr_t` carries the group (`fi_group_addr(fi_addr, g)`), and the NIC
//! decodes it and marks the message; a group above the AV's `max_group_id` completes the send
//! with `FI_EINVAL` and nothing leaves the NIC. A receive names its group with
//! [`Endpoint::post_recv_group`] or [`Endpoint::post_trecv_group`] and takes messages of that
//! group only (fi_av(3) 2.x: "posted receive buffers must have a matching group id"; how a C
//! call names it is the binding's to say, since `fi_group_addr(FI_ADDR_UNSPEC, g)` is
//! `FI_ADDR_UNSPEC` itself); a receive
//! posted without one ([`Endpoint::post_recv`], [`Endpoint::post_trecv`]) is a receive for
//! group 0, since fi_av(3) requires a posted buffer's group to match the message's. The NIC
//! matches across groups out of posting order (a message of group 2 takes a group-2 buffer
//! posted after a waiting group-1 buffer); a message of a group with no posted buffer waits
//! on the NIC's unexpected list, tagged or untagged (untagged: since host interface 1.17;
//! before, the sender's send completes `FI_ENORX`). [`CqEvent::group`] reports a received message's group. A group
//! above the AV's `max_group_id` (or any group but 0 on an endpoint without peer groups) is
//! refused at posting with `FI_EINVAL`. Multi-receive buffers are not available on an
//! endpoint with peer groups (`FI_EOPNOTSUPP`). The NIC completes untagged receives out of
//! posting order there, and reads the RX ring eagerly onto its posted list: a receive still
//! waiting for its group holds a completion context, not the ring entry it was posted at, so
//! the ring keeps taking receives round it; posting reports the ring full only while
//! `2^rx_log2 - 1` receives are outstanding.
//!
//! ## Completion formats and errors
//!
//! [`Endpoint::poll`] returns every completion, successes and errors alike, as a
//! [`CqEvent`]. [`Endpoint::cq_read`] and [`Endpoint::cq_readerr`] split them as
//! `fi_cq_read`/`fi_cq_readerr` do: `cq_read` fails with `FI_EAGAIN` when nothing completed
//! and with `FI_EAVAIL` while the next completion is an error, which `cq_readerr` then
//! returns. [`CqEvent::entry`] converts an event into the endpoint's [`CqFormat`]
//! ([`EndpointAttr::cq_format`]), and [`CqEvent::err_entry`] an error into
//! `struct fi_cq_err_entry` (see [`crate::cq`]). Both calls keep at most one completion aside
//! in the endpoint (no allocation) and may be mixed with `poll`, which returns it first.
//!
//! Tagged receives complete in matching order, not posting order: their completion context is
//! a slot of a fixed table (no allocation), not a ring position. At most `2^trx_log2 - 1`
//! tagged receives are outstanding. So do the untagged receives of an endpoint with peer
//! groups (a receive of one group may wait while others complete round the ring): their
//! context is a free entry of the RX ring's table, and the ring's position is the NIC's again
//! once it has read the descriptor there.
//!
//! The send path (`post_*`, `inject`) takes no lock, allocates nothing and never looks at the
//! AV: it writes one descriptor, fences and rings one doorbell. On an `FI_EP_MSG` endpoint it
//! also reads the connection state and the peer's `fi_addr` (two atomics, see [`crate::cm`]).
//! One exception: an endpoint bound to a named AV first catches its NIC table up with what
//! other processes changed (`uet_av::named`), which try-locks the AV and, when there is
//! something to catch up, programs the NIC.
//!
//! Endpoint types ([`EpType`]): `Rdm` is the reliable default; `Dgram` endpoints
//! (`EP_FLAG_DGRAM`) send single-packet UUD datagrams of at most one MTU — `post_*` refuses a
//! longer message with `FI_EMSGSIZE` and RMA with `FI_EOPNOTSUPP` — and advertise the
//! "max message size limited to MTU" address flag; `Msg` endpoints are connected
//! ([`crate::cm`]). A context of a scalable endpoint ([`crate::scalable`]) is an `Endpoint`
//! too, restricted to its role: a receive-only context refuses sends (`FI_EOPNOTSUPP`), a
//! transmit-only one refuses receive buffers.
//!
//! ## Auth keys
//!
//! An endpoint created with an AV that holds auth keys (`FI_AV_AUTH_KEY`) is enabled with the
//! keys the AV holds at that moment, as fi_av(3) says: right after ENDPOINT_CREATE, one
//! ENDPOINT_AUTH_KEYS grants it their NIC slots, and it accepts requests carrying their
//! JobIDs besides its own, and sends through entries bound to them. Keys inserted later are
//! not granted unless [`Endpoint::grant_auth_key`] asks for it: the endpoint does not accept
//! their JobIDs, and (from interface 1.16) a send or RMA through an entry bound to one
//! completes with `FI_EACCES` ([`uet_fwif::LocalStatus::KeyNotGranted`]), nothing sent. The grants are counted per slot on the NIC
//! object, so the AV refuses to remove a key (`FI_EBUSY`) while an endpoint enabled with it is
//! open; dropping the endpoint (ENDPOINT_DESTROY, which revokes its grants) releases them.

use crate::av::{Av, AvTableHandle};
use crate::cq::CqFormat;
use crate::domain::DomainSeat;
use crate::errno::completion_errno;
use crate::error::DriverError;
use crate::mapped::MappedRegion;
use crate::nic::{Capabilities, Nic, NicInner, RECV_CANCEL_INTERFACE_MINOR};
use crate::pool::DmaBuffer;
use std::net::IpAddr;
use std::ops::Range;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uet_av::{AvSync, FiAddr, FiErrno, FiError};
use uet_fwif::address::{AddressingMode, UetAddress};
use uet_fwif::admin::{
    Command, ContextCreateBody, EndpointCreateBody, Status, CTX_ROLE_CONTROL, CTX_ROLE_RX,
    CTX_ROLE_TX, EP_FLAG_ABSOLUTE, EP_FLAG_DGRAM, EP_FLAG_PASSIVE, RECV_CANCEL_RING_RX,
    RECV_CANCEL_RING_TAGGED,
};
use uet_fwif::auth_key::EndpointAuthKeysBody;
use uet_fwif::datapath::{
    Completion, CompletionKind, LocalStatus, RxDescriptor, TaggedRxDescriptor, TxDescriptor,
    TxOpcode, COMPLETION_FLAG_BUFFER_RELEASED, COMPLETION_FLAG_MULTI_RECV,
    COMPLETION_FLAG_NO_MESSAGE, COMPLETION_FLAG_REPORT, COMPLETION_PHASE_OFFSET, MAX_INJECT_BYTES,
    RX_FLAG_MULTI_RECV, TRX_FLAG_CLAIM, TRX_FLAG_DISCARD, TRX_FLAG_PEEK, TX_FLAG_CONTROL,
    TX_FLAG_INJECT,
};
use uet_fwif::ring::RingGeometry;
use uet_fwif::ReturnCode;
use uet_regs::{
    CqArm, QueueDoorbell, RegisterAccess, CQ_ARM, CQ_DOORBELL, RXQ_DOORBELL, TRXQ_DOORBELL,
    TXQ_DOORBELL,
};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::FromZeros;

/// How long [`Endpoint::cq_sread`] waits between two looks at the NIC's status: a NIC that
/// stopped writes no completion and raises no vector, and an unbounded wait would never end.
/// A register read or two ten times a second, only while a waiter finds nothing.
pub const STOPPED_CHECK_INTERVAL: Duration = Duration::from_millis(100);

const TX_DESC: usize = core::mem::size_of::<TxDescriptor>();
const RX_DESC: usize = core::mem::size_of::<RxDescriptor>();
const TRX_DESC: usize = core::mem::size_of::<TaggedRxDescriptor>();
const CQE: usize = core::mem::size_of::<Completion>();

/// Endpoint attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointAttr {
    /// JobID (24 bits): what the endpoint accepts and, through the AV, what it sends with.
    pub job_id: u32,
    /// Resource indices to request.
    pub ri_count: u16,
    /// Initiator ID; `None` derives one: the low 16 bits of the NIC's fabric address, then the
    /// endpoint's sequence number on that NIC in this process. Jobs that number their ranks
    /// pass the rank instead. No two live endpoints of a JobID on one NIC share an id
    /// (interface 1.11): one in use is refused with `FI_EADDRINUSE`
    /// ([`DriverError::InitiatorInUse`]), and a derived one passes over ids in use.
    pub initiator: Option<u32>,
    /// log2 of the TX ring entries.
    pub tx_log2: u8,
    /// log2 of the RX ring entries.
    pub rx_log2: u8,
    /// log2 of the tagged RX ring entries; 0: no tagged receives (the endpoint's TAGGED
    /// resource-index space is empty and tagged messages to it are refused RC_BAD_INDEX).
    pub trx_log2: u8,
    /// log2 of the completion ring entries (must hold TX + RX + tagged RX in flight).
    pub cq_log2: u8,
    /// Addressing mode, advertised in the endpoint address (flags bit 5) and applied by the
    /// target NIC: relative (JobID scopes PIDonFEP) or absolute (PIDonFEP alone names the
    /// endpoint; JobID only authorises).
    pub mode: AddressingMode,
    /// `fi_ep_attr.type`.
    pub ep_type: EpType,
    /// `fi_ep_attr.tx_ctx_cnt`: 0 or 1 for one transmit context; more for a scalable
    /// endpoint, at most `CAP_EP.max_tx_ctx`.
    pub tx_ctx_cnt: u8,
    /// `fi_ep_attr.rx_ctx_cnt`: 0 for a regular endpoint; 1..=`CAP_EP.max_rx_ctx` receive
    /// contexts for a scalable endpoint (receive context `i` is resource index
    /// `ri_start + i`, so `ri_count` must be at least `rx_ctx_cnt`).
    pub rx_ctx_cnt: u8,
    /// `fi_cq_attr.format` of the endpoint's completion queue: the entry
    /// [`CqEvent::entry`] produces for it ([`Endpoint::cq_format`]).
    pub cq_format: CqFormat,
}

impl Default for EndpointAttr {
    fn default() -> Self {
        EndpointAttr {
            job_id: 1,
            ri_count: 4,
            initiator: None,
            tx_log2: 6,
            rx_log2: 6,
            trx_log2: 6,
            cq_log2: 8,
            mode: AddressingMode::Relative,
            ep_type: EpType::Rdm,
            tx_ctx_cnt: 0,
            rx_ctx_cnt: 0,
            cq_format: CqFormat::Tagged,
        }
    }
}

/// `enum fi_ep_type`: what delivery an endpoint gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EpType {
    /// `FI_EP_RDM`: reliable datagram (RUD), connectionless; messages up to `CAP_MAX_MSG`,
    /// tagged messages, RMA.
    #[default]
    Rdm,
    /// `FI_EP_DGRAM`: unreliable datagram (UUD): messages of at most one MTU, no RMA; a send
    /// completes when its packet is on the wire, and a message that finds no receive buffer
    /// is dropped (and counted) at the target, never reported to the sender.
    Dgram,
    /// `FI_EP_MSG`: reliable and connected; sends go to the one peer set up through an event
    /// queue (`fi_cm(3)`).
    Msg,
}

/// Why a completion failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqError {
    /// The fabric errno (`fi_cq_err_entry.err`).
    pub errno: FiErrno,
    /// What the local NIC concluded.
    pub local: LocalStatus,
    /// The UET return code from the target, when it answered with an error.
    pub return_code: Option<ReturnCode>,
    /// A truncated receive: the message's bytes that did not fit the buffer and were
    /// discarded (`fi_cq_err_entry.olen`). Otherwise 0.
    pub olen: usize,
}

impl core::fmt::Display for CqError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?} ({:?})", self.errno, self.local)?;
        if let Some(rc) = self.return_code {
            write!(f, ", target returned {rc}")?;
        }
        Ok(())
    }
}

/// What a completion completes (libfabric's `fi_cq_entry.flags`: `FI_SEND|FI_MSG`,
/// `FI_SEND|FI_TAGGED`, `FI_RMA|FI_WRITE`, `FI_RMA|FI_READ`, `FI_RECV|FI_MSG`,
/// `FI_RECV|FI_TAGGED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CqOp {
    /// `post_send` or `inject`.
    Send,
    /// `post_tsend` or `tinject`.
    TaggedSend,
    /// `post_write`.
    Write,
    /// `post_read`.
    Read,
    /// `post_recv`.
    Recv,
    /// `post_trecv`.
    TaggedRecv,
}

impl CqOp {
    fn of_tx(op: TxOpcode) -> Self {
        match op {
            TxOpcode::Send => CqOp::Send,
            TxOpcode::TaggedSend => CqOp::TaggedSend,
            TxOpcode::Write => CqOp::Write,
            TxOpcode::Read => CqOp::Read,
        }
    }
}

/// One completion, with the buffer it concerns.
#[derive(Debug)]
pub struct CqEvent {
    /// Which ring: `Send` (any TX operation), `Recv` or `TaggedRecv`.
    pub kind: CompletionKind,
    /// The operation.
    pub op: CqOp,
    /// The context given when posting.
    pub context: u64,
    /// Bytes transferred.
    pub len: usize,
    /// Remote CQ data (receive).
    pub data: u64,
    /// Receive: the sender's `fi_addr_t` in the bound AV, its user id, or `FI_ADDR_NOTAVAIL`.
    pub src_addr: u64,
    /// Tagged receive: the match bits the message carried (`fi_cq_tagged_entry.tag`); for
    /// one cancelled before a message took it ([`Endpoint::cancel_trecv`]), the tag it was
    /// posted with.
    pub tag: u64,
    /// Receive: the peer group of the message (0 on an endpoint without peer groups).
    pub group: u32,
    /// `None` on success.
    pub error: Option<CqError>,
    /// The posted buffer, returned (`None` for a send posted by IOVA, an inject or a probe).
    /// After a receive or a READ that succeeded, its length is the bytes delivered; a READ
    /// that failed returns it with the length it was posted with. A multi-receive buffer comes back
    /// only with its last completion ([`MultiRecv::released`]); its length is then the end of
    /// the last message placed in it.
    pub buffer: Option<DmaBuffer>,
    /// A completion of a multi-receive buffer ([`Endpoint::post_recv_multi`]): where the
    /// message lies and whether the buffer is released. `None` otherwise.
    pub multi_recv: Option<MultiRecv>,
    /// The completion of a probe ([`Endpoint::post_tprobe`]) that found a message and
    /// delivered nothing: `len` is the message's length, and no buffer comes back. `false`
    /// for every other completion.
    pub report: bool,
}

/// Where a message lies in a multi-receive buffer, and whether this completion releases it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultiRecv {
    /// Byte offset of the message in the buffer (a multiple of
    /// `uet_fwif::datapath::MULTI_RECV_ALIGN`). For a release without a message: where the
    /// buffer's free space began.
    pub offset: usize,
    /// The buffer's last completion (libfabric's `FI_MULTI_RECV` completion flag): the NIC
    /// has released the buffer and [`CqEvent::buffer`] returns it.
    pub released: bool,
    /// The completion reports a message. `false`: it only releases the buffer (`len` 0,
    /// `FI_MULTI_RECV` as its only flag).
    pub has_message: bool,
    /// IOVA of the message's first byte (`fi_cq_data_entry.buf`).
    pub iova: u64,
    /// The endpoint whose RX ring holds the buffer (its fid).
    endpoint: u64,
    /// RX ring slot holding the buffer.
    slot: u16,
    /// Posting sequence number of the buffer.
    seq: u32,
}

struct Posted {
    buffer: Option<DmaBuffer>,
    context: u64,
    op: CqOp,
    /// An inject: a successful completion is consumed without being reported.
    silent: bool,
    /// A multi-receive buffer: its posting sequence number and the end of the last message
    /// placed in it.
    multi: Option<(u32, usize)>,
    /// A tagged receive: the tag it was posted with, which its completion reports when no
    /// message gives one (a cancelled receive). 0 for any other operation.
    tag: u64,
    /// A receive: its place in its ring's posting order ([`Ring::posts`]), so that a cancel
    /// finds the oldest. 0 for a transmit.
    order: u64,
    /// A transmit: the bytes it was posted with (a READ: the bytes it asked for, the most its
    /// completion may have placed). 0 for a receive.
    len: usize,
    /// A receive: the ring position its descriptor was written at. Its completion context
    /// too, unless the entry there was still held by a receive the NIC had passed (see
    /// `Ring::at`). 0 for a transmit.
    pos: u16,
    /// The NIC has read the descriptor, and its head is past the entry: a multi-receive
    /// buffer a completion has come from (the NIC's current buffer), still posted.
    passed: bool,
}

/// What a tagged RX descriptor carries: a receive's buffer, or none (a probe's).
trait TrxBuffer {
    /// The buffer the NIC may write, if any.
    fn buffer(&mut self) -> Option<&mut DmaBuffer>;
    /// What the posting's slot keeps until the completion.
    fn into_posted(self) -> Option<DmaBuffer>;
}

impl TrxBuffer for DmaBuffer {
    fn buffer(&mut self) -> Option<&mut DmaBuffer> {
        Some(self)
    }

    fn into_posted(self) -> Option<DmaBuffer> {
        Some(self)
    }
}

/// A probe's: no buffer.
struct NoBuffer;

impl TrxBuffer for NoBuffer {
    fn buffer(&mut self) -> Option<&mut DmaBuffer> {
        None
    }

    fn into_posted(self) -> Option<DmaBuffer> {
        None
    }
}

/// The fields of a tagged RX descriptor besides its buffer and context.
#[derive(Clone, Copy, Debug)]
struct TrxPost {
    tag: u64,
    ignore: u64,
    group: u32,
    /// `TRX_FLAG_*`: 0 for a receive.
    flags: u32,
    claim: u64,
}

/// What a probe of the NIC's unexpected list does ([`Endpoint::post_tprobe`]; fi_tagged(3)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaggedProbe {
    /// `FI_PEEK`: report the oldest matching message and leave it.
    Peek,
    /// `FI_PEEK | FI_CLAIM`: report it and claim it with this claim, for
    /// [`Endpoint::post_trecv_claimed`] or [`TaggedProbe::Discard`].
    PeekClaim(u64),
    /// `FI_PEEK | FI_DISCARD`: report it and drop it.
    PeekDiscard,
    /// `FI_CLAIM | FI_DISCARD`: drop the message claimed with this claim, and report it.
    Discard(u64),
}

/// Completion contexts of the tagged RX ring: a fixed table with a free list, allocated when
/// the endpoint is created.
struct Slab {
    slots: Vec<Option<Posted>>,
    free: Vec<u16>,
}

impl Slab {
    fn new(entries: u32) -> Self {
        let n = entries.saturating_sub(1) as usize;
        Slab {
            slots: (0..n).map(|_| None).collect(),
            free: (0..n as u16).rev().collect(),
        }
    }

    fn take(&mut self, slot: u64) -> Option<Posted> {
        let i = u16::try_from(slot).ok()?;
        let p = self.slots.get_mut(usize::from(i))?.take()?;
        self.free.push(i); // within capacity: every index is in `free` at most once
        Some(p)
    }
}

/// The TX request a `post_*` call describes.
struct TxRequest {
    op: TxOpcode,
    flags: u8,
    dest: u64,
    iova: u64,
    len: usize,
    data: u64,
    match_bits: u64,
    remote_offset: u64,
    /// The completion context an inject took: the one whose inject slot holds its payload.
    /// `None`: the tail's entry, or the first free one after it when a send in flight holds
    /// that one ([`Endpoint::post_tx`]).
    context: Option<u16>,
}

impl TxRequest {
    /// A request of `op` for `len` bytes at `iova` to `dest`: no flags, CQ data, match bits
    /// or remote offset (struct update syntax sets those that a call has).
    fn new(op: TxOpcode, dest: u64, iova: u64, len: usize) -> Self {
        TxRequest {
            op,
            flags: 0,
            dest,
            iova,
            len,
            data: 0,
            match_bits: 0,
            remote_offset: 0,
            context: None,
        }
    }
}

struct Ring {
    geometry: RingGeometry,
    /// `geometry.entries() - 1`: the most descriptors in flight at once, and the mask that
    /// wraps a position (kept, so the send path computes neither).
    mask: u32,
    offset: usize,
    tail: u16,
    slots: Vec<Option<Posted>>,
    in_flight: u32,
    /// RX ring: entries whose receive was cancelled (RECV_CANCEL). The NIC may not have
    /// passed such an entry yet (it skips it when its head comes to it), so it stays taken
    /// until no receive posted before it is left (the NIC's head never rests on a withdrawn
    /// entry, so it is past it) or the tail comes round to it (an entry at the tail is
    /// outside the NIC's part of the ring, whatever the NIC's head).
    withdrawn: Vec<bool>,
    /// Entries marked in `withdrawn`.
    withdrawn_count: u32,
    /// Descriptors posted so far: the posting order of the ring's receives.
    posts: u64,
    /// RX ring the NIC reads in order: by position, the completion context of the receive
    /// last posted there (that receive is still posted there while its entry of `slots`
    /// holds it with that position). A receive's context is its position, unless the entry
    /// of that number is held by a receive the NIC has passed (the current multi-receive
    /// buffer, which may stay posted while the tail comes round to it).
    at: Vec<Option<u16>>,
}

impl Ring {
    fn new(log2: u8, offset: usize) -> Option<Self> {
        let geometry = RingGeometry::new(log2)?;
        Some(Ring {
            geometry,
            mask: geometry.entries() - 1,
            offset,
            tail: 0,
            slots: (0..geometry.entries()).map(|_| None).collect(),
            in_flight: 0,
            withdrawn: vec![false; geometry.entries() as usize],
            withdrawn_count: 0,
            posts: 0,
            at: vec![None; geometry.entries() as usize],
        })
    }

    /// A completion context for a descriptor posted at the tail of a ring the NIC reads in
    /// order (see `at`): the tail's position, or the first free entry of `slots` from it when
    /// a receive the NIC has passed holds that one; `None` when the ring is full. Entries
    /// taken by receives and by withdrawn ones the NIC may not have passed are fewer than the
    /// ring's entries less one, so the tail's position is outside the NIC's part of the ring.
    fn ordered_context(&mut self) -> Option<u16> {
        if self.withdrawn_count > 0 {
            self.release_withdrawn();
        }
        if self.in_flight + self.withdrawn_count >= self.geometry.entries() - 1 {
            return None;
        }
        match self.slots.get(usize::from(self.tail))? {
            None => Some(self.tail),
            Some(p) if p.passed => self.free_context(),
            Some(_) => None,
        }
    }

    /// The receive still posted at ring position `i` of a ring the NIC reads in order.
    fn posted_at(&self, i: usize) -> Option<&Posted> {
        let context = (*self.at.get(i)?)?;
        self.slots
            .get(usize::from(context))?
            .as_ref()
            .filter(|p| usize::from(p.pos) == i)
    }

    /// A completion context for a descriptor posted at the tail of a ring the NIC reads
    /// eagerly (the RX ring of an endpoint with peer groups, the TX ring): the first free
    /// entry of `slots` from the tail on, when the ring has room. Its receives (sends)
    /// complete out of posting order
    /// (one of a group may wait while those of others complete round the ring), and a ring
    /// position is the NIC's again as soon as it has read the descriptor there, so the
    /// context cannot be the position: a receive still waiting would hold the position the
    /// tail comes back to. The NIC's unread descriptors are never more than those posted and
    /// not completed, fewer than the ring's entries less one, so the tail's position is free.
    #[inline]
    fn free_context(&self) -> Option<u16> {
        let entries = self.geometry.entries();
        if self.in_flight >= entries - 1 {
            return None;
        }
        // Nearly always the tail's own entry: the scan is for when an operation still in
        // flight holds it.
        if self
            .slots
            .get(usize::from(self.tail))
            .is_some_and(Option::is_none)
        {
            return Some(self.tail);
        }
        self.free_context_past_tail()
    }

    /// The first free entry of `slots` after the tail, round the ring.
    #[cold]
    fn free_context_past_tail(&self) -> Option<u16> {
        let entries = self.geometry.entries();
        (1..entries)
            .map(|k| ((u32::from(self.tail) + k) % entries) as u16)
            .find(|&i| self.slots.get(usize::from(i)).is_some_and(Option::is_none))
    }

    /// Free the withdrawn entries the NIC's head has passed: those with no receive still
    /// posted before them. The entries after the tail, round the ring to it, are in posting
    /// order; the NIC takes them in that order and passes a withdrawn one as soon as its head
    /// reaches it, so its head is at the oldest receive still posted (or at the tail), past
    /// every withdrawn entry older than that one.
    fn release_withdrawn(&mut self) {
        let entries = self.geometry.entries();
        for k in 1..=entries {
            if self.withdrawn_count == 0 {
                break;
            }
            let i = ((u32::from(self.tail) + k) % entries) as usize;
            if i >= self.withdrawn.len() {
                break;
            }
            // A receive the NIC has not passed ends the run; the current multi-receive
            // buffer, whose entry the NIC read when a message first came, does not.
            if self.posted_at(i).is_some_and(|p| !p.passed) {
                break;
            }
            if let Some(w) = self.withdrawn.get_mut(i) {
                if *w {
                    *w = false;
                    self.withdrawn_count -= 1;
                }
            }
        }
    }

    /// The entry of a cancelled receive stays taken until the NIC's head has passed it
    /// (see `withdrawn`).
    fn withdraw(&mut self, slot: u64) {
        if let Some(w) = usize::try_from(slot)
            .ok()
            .and_then(|i| self.withdrawn.get_mut(i))
        {
            if !*w {
                *w = true;
                self.withdrawn_count += 1;
            }
        }
    }

    fn take(&mut self, slot: u64) -> Option<Posted> {
        let p = self.slots.get_mut(usize::try_from(slot).ok()?)?.take()?;
        self.in_flight -= 1;
        Some(p)
    }

    fn get_mut(&mut self, slot: u64) -> Option<&mut Posted> {
        self.slots.get_mut(usize::try_from(slot).ok()?)?.as_mut()
    }
}

/// An active endpoint on a NIC, or one context of a scalable endpoint.
pub struct Endpoint {
    nic: Arc<NicInner>,
    _av: Option<Arc<AvTableHandle>>,
    /// Bound to a named AV's mirror: its catch-up, run before each send and completion read
    /// so that this process's NIC table translates `fi_addr_t` values as the AV does now.
    pub(crate) av_sync: Option<Arc<dyn AvSync>>,
    handle: u16,
    fid: u64,
    address: UetAddress,
    job_id: u32,
    ep_type: EpType,
    /// `CTX_ROLE_*`: what this ring set may do (an endpoint's own rings: TX | RX).
    roles: u8,
    rings: Option<MappedRegion>,
    tx: Ring,
    rx: Ring,
    /// Tagged RX ring: geometry, offset, tail, and the completion contexts.
    trx: Option<(Ring, Slab)>,
    /// Offset of the inject slots in the ring region.
    inject_offset: usize,
    cq_geometry: RingGeometry,
    cq_offset: usize,
    cq_head: u16,
    cq_phase: bool,
    /// Completions taken since `CQ_DOORBELL` last told the NIC the head.
    cq_unreported: u32,
    mtu: usize,
    max_msg: usize,
    /// `fi_cq_attr.format`.
    cq_format: CqFormat,
    /// `FI_OPT_MIN_MULTI_RECV` for multi-receive buffers posted from now on.
    min_multi_recv: usize,
    /// Posting sequence number of the next multi-receive buffer.
    multi_seq: u32,
    /// A completion read by `cq_read`/`cq_readerr` and not returned yet.
    held: Option<CqEvent>,
    /// Successful inject completions read from the ring and not reported (an inject's success
    /// makes no event) since [`Endpoint::take_silent_completions`] last took them.
    silent_done: u64,
    /// `FI_EP_MSG`: the connection (state, peer, control channel); dropped before the rings.
    pub(crate) cm: Option<crate::cm::CmLink>,
    /// Auth-key slots granted to the endpoint (counted in `NicInner::auth_grants`).
    auth_slots: Vec<u16>,
    /// The largest peer group its receives may name (the bound AV's `max_group_id`); 0
    /// without peer groups, and always for a passive endpoint or a control channel.
    max_group_id: u32,
    /// Its place among its domain's endpoints ([`crate::Domain::endpoint`]); `None` for an
    /// endpoint made on the NIC alone, and for a scalable endpoint's contexts.
    pub(crate) domain_seat: Option<DomainSeat>,
    /// An endpoint (ENDPOINT_CREATE): its family, which its contexts share. Dropping the
    /// endpoint parks its NIC endpoint and memory there, destroyed when the family's last
    /// member goes. `None` for a context.
    family: Option<Arc<Family>>,
    /// A context (CONTEXT_CREATE): its endpoint's family, let go once the context is
    /// destroyed. `None` for an endpoint.
    owner: Option<Arc<Family>>,
    /// The MSI-X vector its completion ring raises when armed (see [`crate::interrupt`]),
    /// taken when it first waits; `None` before, or while the NIC has none to give.
    wakeup: Option<crate::interrupt::Vector>,
    /// `fi_cq_signal`'s eventfd, made by the first [`Endpoint::cq_signal`].
    signal: Option<crate::interrupt::CqSignal>,
}

/// An endpoint and its contexts: the NIC refuses to destroy an endpoint while contexts of
/// it exist, and the application may drop the endpoint first (a scalable endpoint's ring
/// sets can be moved out of it with `mem::replace`, or swapped with another's). The endpoint
/// is then destroyed when its last context goes.
#[derive(Default)]
struct Family {
    /// The endpoint's teardown, parked when the endpoint was dropped: it runs when the
    /// family goes.
    endpoint: std::sync::Mutex<Option<Teardown>>,
}

/// What destroys a NIC endpoint or context: ENDPOINT_DESTROY, then the memory the device
/// may use until then (rings, posted buffers) and the AV table it translates through.
struct Teardown {
    nic: Arc<NicInner>,
    handle: u16,
    rings: Option<MappedRegion>,
    posted: Vec<Option<Posted>>,
    /// Auth-key slots granted (counted in `NicInner::auth_grants`).
    auth_slots: Vec<u16>,
    /// Dropped after ENDPOINT_DESTROY: the NIC keeps a table an endpoint is bound to.
    _av: Option<Arc<AvTableHandle>>,
    /// Its place among its domain's endpoints, given up once the NIC endpoint is gone (a
    /// domain does not close while it is still there).
    _domain_seat: Option<DomainSeat>,
}

/// What a transmit carries: a pool buffer, returned with its completion, or none (the
/// caller's IOVA, an inject slot).
trait TxBuffer: Into<Option<DmaBuffer>> {
    /// The pool buffer, if any, for the checks a post makes of it.
    fn dma_buffer(&self) -> Option<&DmaBuffer>;
}

impl TxBuffer for DmaBuffer {
    fn dma_buffer(&self) -> Option<&DmaBuffer> {
        Some(self)
    }
}

impl TxBuffer for Option<DmaBuffer> {
    fn dma_buffer(&self) -> Option<&DmaBuffer> {
        self.as_ref()
    }
}

/// `FI_ENOENT`: no receive with `context` is posted.
fn not_posted(context: u64) -> DriverError {
    DriverError::Fabric(FiError::new(
        FiErrno::FI_ENOENT,
        format!("no receive with context {context:#x} is posted"),
    ))
}

/// The oldest receive posted with `context` after posting number `after`, as (its posting
/// number, its entry of `slots`): entries are not taken in posting order (a ring read
/// eagerly, a free list handing out the entry freed last).
fn oldest_posted(slots: &[Option<Posted>], context: u64, after: u64) -> Option<(u64, usize)> {
    (slots.iter().enumerate())
        .filter_map(|(s, p)| {
            p.as_ref()
                .filter(|p| p.context == context && p.order > after)
                .map(|p| (p.order, s))
        })
        .min()
}

/// Whether RECV_CANCEL found no such receive posted on the NIC.
fn refused_not_posted(e: &DriverError) -> bool {
    matches!(
        e,
        DriverError::AdminStatus {
            status: Status::NotPosted,
            ..
        }
    )
}

fn align_page(x: usize) -> usize {
    x.div_ceil(4096) * 4096
}

/// Ring sizes of one ring set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingSizes {
    pub tx_log2: u8,
    pub rx_log2: u8,
    pub trx_log2: u8,
    pub cq_log2: u8,
}

impl RingSizes {
    /// The sizes of `attr`.
    pub(crate) fn of(attr: &EndpointAttr) -> Self {
        RingSizes {
            tx_log2: attr.tx_log2,
            rx_log2: attr.rx_log2,
            trx_log2: attr.trx_log2,
            cq_log2: attr.cq_log2,
        }
    }
}

/// A ring set allocated in DMA memory, not yet given to the NIC.
pub(crate) struct RingSet {
    rings: MappedRegion,
    tx: Ring,
    rx: Ring,
    trx: Option<(Ring, Slab)>,
    inject_offset: usize,
    cq_geometry: RingGeometry,
    cq_offset: usize,
}

impl RingSet {
    /// The IOVA of the ring at `off`, inside the ring set's region.
    fn iova(&self, off: usize) -> U64 {
        U64::new(self.rings.region().iova_inside(off))
    }
}

impl Nic {
    /// Check ring sizes against `CAP_QUEUES` and allocate the rings.
    pub(crate) fn ring_set(&self, z: RingSizes) -> Result<RingSet, DriverError> {
        let caps = self.capabilities();
        let bad = |m: String| Err(DriverError::InvalidArgument(m));
        // A device reporting no queue entries gets 0: every ring size is then refused.
        let max_log2 = caps.max_queue_entries.checked_ilog2().unwrap_or(0) as u8;
        for (name, v) in [
            ("tx_log2", z.tx_log2),
            ("rx_log2", z.rx_log2),
            ("cq_log2", z.cq_log2),
        ] {
            if v == 0 || v > max_log2 {
                return bad(format!("{name} {v} outside 1..={max_log2}"));
            }
        }
        if z.trx_log2 > max_log2 {
            return bad(format!("trx_log2 {} outside 0..={max_log2}", z.trx_log2));
        }
        let trx_entries = if z.trx_log2 == 0 {
            0
        } else {
            1u32 << z.trx_log2
        };
        if (1u32 << z.cq_log2) < (1u32 << z.tx_log2) + (1u32 << z.rx_log2) + trx_entries {
            return bad(
                "the completion ring must hold every TX, RX and tagged RX descriptor".into(),
            );
        }
        let tx_off = 0;
        let rx_off = align_page(TX_DESC << z.tx_log2);
        let trx_off = rx_off + align_page(RX_DESC << z.rx_log2);
        let cq_off = trx_off + align_page(TRX_DESC * trx_entries as usize);
        let inject_off = cq_off + align_page(CQE << z.cq_log2);
        let total = inject_off + align_page(MAX_INJECT_BYTES << z.tx_log2);
        // Fresh memfd memory reads as zero: every completion's phase bit starts at 0.
        let rings = self.inner.map_new(total)?;
        let (Some(tx), Some(rx), Some(cq_geometry)) = (
            Ring::new(z.tx_log2, tx_off),
            Ring::new(z.rx_log2, rx_off),
            RingGeometry::new(z.cq_log2),
        ) else {
            return bad("ring size out of range".into());
        };
        let trx = match z.trx_log2 {
            0 => None,
            n => match Ring::new(n, trx_off) {
                Some(r) => Some((r, Slab::new(trx_entries))),
                None => return bad("tagged RX ring size out of range".into()),
            },
        };
        Ok(RingSet {
            rings,
            tx,
            rx,
            trx,
            inject_offset: inject_off,
            cq_geometry,
            cq_offset: cq_off,
        })
    }

    /// Create an endpoint bound to `av` (ENDPOINT_CREATE): the NIC assigns its PIDonFEP and
    /// resource-index range, which together with the NIC's fabric address form its address.
    ///
    /// `attr.ep_type` selects the kind: `Rdm` and `Dgram` endpoints are bound to `av`;
    /// a `Msg` endpoint takes no AV (`None`): it keeps one of its own for its peer and is
    /// connected through an event queue ([`Endpoint::bind_eq`], [`Endpoint::connect`],
    /// [`crate::PassiveEndpoint::accept`]). Scalable endpoints (`tx_ctx_cnt` > 1 or
    /// `rx_ctx_cnt` > 0) are created by [`Nic::scalable_endpoint`]. `av` must be on this NIC:
    /// an AV of another NIC is `FI_EINVAL` ([`DriverError::InvalidArgument`]), and nothing is
    /// asked of the NIC.
    pub fn endpoint(&self, attr: EndpointAttr, av: Option<&Av>) -> Result<Endpoint, DriverError> {
        if attr.tx_ctx_cnt > 1 || attr.rx_ctx_cnt > 0 {
            return Err(DriverError::InvalidArgument(format!(
                "tx_ctx_cnt {} / rx_ctx_cnt {} ask for a scalable endpoint: use Nic::scalable_endpoint",
                attr.tx_ctx_cnt, attr.rx_ctx_cnt
            )));
        }
        match attr.ep_type {
            EpType::Msg => {
                if av.is_some() {
                    return Err(DriverError::InvalidArgument(
                        "an FI_EP_MSG endpoint is not bound to an AV: it keeps its peer in one of its own".into(),
                    ));
                }
                crate::cm::msg_endpoint(self, attr)
            }
            EpType::Rdm | EpType::Dgram => {
                let table = self.av_table_of(av)?;
                let mut endpoint = self.create_endpoint(&attr, table, 0, 0, 0)?;
                // On failure the endpoint drops here and ENDPOINT_DESTROY removes it.
                endpoint.enable_with_av(av)?;
                Ok(endpoint)
            }
        }
    }

    /// The NIC table of `av`, for an endpoint of this NIC to bind (`fi_ep_bind`).
    /// `FI_EINVAL` ([`DriverError::InvalidArgument`]) for an AV of another NIC: ENDPOINT_CREATE
    /// names the table by its handle, and this NIC may hold a table of its own, another AV's,
    /// under the same number.
    pub(crate) fn av_table_of(
        &self,
        av: Option<&Av>,
    ) -> Result<Option<Arc<AvTableHandle>>, DriverError> {
        match av.map(|a| a.nic().table()) {
            Some(table) if !table.is_on(&self.inner) => Err(DriverError::InvalidArgument(format!(
                "fi_ep_bind: the AV (NIC table {}) is on another NIC than {}: an endpoint \
                     binds an AV of its own domain",
                table.handle(),
                self.fabric_addr()
            ))),
            table => Ok(table.cloned()),
        }
    }

    /// ENDPOINT_CREATE with `extra_flags` (`EP_FLAG_PASSIVE`) and the context counts.
    pub(crate) fn create_endpoint(
        &self,
        attr: &EndpointAttr,
        av_table: Option<Arc<AvTableHandle>>,
        extra_flags: u8,
        tx_ctx_cnt: u8,
        rx_ctx_cnt: u8,
    ) -> Result<Endpoint, DriverError> {
        let caps = *self.capabilities();
        let bad = |m: String| Err(DriverError::InvalidArgument(m));
        if attr.ri_count == 0 || attr.ri_count > caps.ri_per_endpoint {
            return bad(format!(
                "ri_count {} outside 1..={}",
                attr.ri_count, caps.ri_per_endpoint
            ));
        }
        if attr.job_id > uet_fwif::av_entry::MAX_JOB_ID {
            return bad(format!("JobID {:#x} wider than 24 bits", attr.job_id));
        }
        let set = self.ring_set(RingSizes::of(attr))?;
        let fabric_addr = self.fabric_addr();
        let derive = || {
            let low = match fabric_addr {
                IpAddr::V4(a) => u32::from(a) & 0xFFFF,
                IpAddr::V6(a) => (u128::from(a) & 0xFFFF) as u32,
            };
            low << 16 | u32::from(self.inner.endpoint_seq.fetch_add(1, Ordering::Relaxed))
        };
        let mut initiator = attr.initiator.unwrap_or_else(derive);
        let mut body = EndpointCreateBody::new_zeroed();
        body.tx_ring = set.iova(set.tx.offset);
        body.rx_ring = set.iova(set.rx.offset);
        body.cq_ring = set.iova(set.cq_offset);
        body.job_id = U32::new(attr.job_id);
        body.ri_count = U16::new(attr.ri_count);
        body.tx_log2 = attr.tx_log2;
        body.rx_log2 = attr.rx_log2;
        body.cq_log2 = attr.cq_log2;
        if let Some((r, _)) = set.trx.as_ref() {
            body.trx_log2 = attr.trx_log2;
            body.trx_ring = set.iova(r.offset);
        }
        body.tx_ctx_cnt = tx_ctx_cnt;
        body.rx_ctx_cnt = rx_ctx_cnt;
        body.flags = extra_flags;
        if attr.mode == AddressingMode::Absolute {
            body.flags |= EP_FLAG_ABSOLUTE;
        }
        if attr.ep_type == EpType::Dgram {
            body.flags |= EP_FLAG_DGRAM;
        }
        // A derived initiator id that an endpoint the caller numbered holds (interface 1.11
        // refuses it) is passed over for the next one.
        let mut tries = 0;
        let result = loop {
            body.initiator = U32::new(initiator);
            match self.inner.execute(Command::EndpointCreate {
                av: av_table.as_ref().map_or(0, |t| t.handle()),
                body,
            }) {
                Ok(result) => break result,
                Err(DriverError::AdminStatus {
                    status: Status::InitiatorInUse,
                    ..
                }) if attr.initiator.is_none() && tries < DERIVED_INITIATOR_TRIES => {
                    tries += 1;
                    initiator = derive();
                }
                Err(e) => {
                    drop_rings_unless_timed_out(&self.inner, &e, set);
                    return Err(endpoint_create_error(e, &caps, attr, initiator));
                }
            }
        };
        let handle = (result.result0 & 0xFFFF) as u16;
        let dgram = attr.ep_type == EpType::Dgram;
        let address = UetAddress {
            caps: caps.address_caps(),
            mode: attr.mode,
            max_msg_mtu: dgram || caps.max_msg_size <= u32::from(caps.mtu),
            pid_on_fep: (result.result0 >> 16) as u16,
            fabric_addr,
            ri_start: (result.result1 & 0xFFFF) as u16,
            ri_count: (result.result1 >> 16) as u16,
            initiator,
        };
        let mut endpoint = self.assemble(
            set,
            handle,
            address,
            attr.job_id,
            attr.ep_type,
            CTX_ROLE_TX | CTX_ROLE_RX,
            av_table,
            attr.cq_format,
        );
        endpoint.family = Some(Arc::default());
        if extra_flags & EP_FLAG_PASSIVE != 0 {
            endpoint.max_group_id = 0; // the NIC gives a listener no peer groups
        }
        if let Err(e) = address.validate() {
            return Err(DriverError::AdminProtocol(format!(
                "ENDPOINT_CREATE returned an invalid address: {e}"
            )));
        }
        tracing::debug!(%address, handle, ?attr.ep_type, "endpoint created");
        Ok(endpoint)
    }

    /// CONTEXT_CREATE: a ring set of `owner` with `role` and `index`.
    pub(crate) fn create_context(
        &self,
        owner: &Endpoint,
        z: RingSizes,
        role: u8,
        index: u8,
    ) -> Result<Endpoint, DriverError> {
        let set = self.ring_set(z)?;
        let mut body = ContextCreateBody::new_zeroed();
        body.tx_ring = set.iova(set.tx.offset);
        body.rx_ring = set.iova(set.rx.offset);
        body.cq_ring = set.iova(set.cq_offset);
        body.tx_log2 = z.tx_log2;
        body.rx_log2 = z.rx_log2;
        body.cq_log2 = z.cq_log2;
        if let Some((r, _)) = set.trx.as_ref() {
            body.trx_log2 = z.trx_log2;
            body.trx_ring = set.iova(r.offset);
        }
        body.index = index;
        body.role = role;
        let result = match self.inner.execute(Command::ContextCreate {
            endpoint: u32::from(owner.handle),
            body,
        }) {
            Ok(result) => result,
            Err(e) => {
                drop_rings_unless_timed_out(&self.inner, &e, set);
                return Err(e);
            }
        };
        let handle = (result.result0 & 0xFFFF) as u16;
        tracing::debug!(owner = owner.handle, handle, role, index, "context created");
        let mut context = self.assemble(
            set,
            handle,
            owner.address,
            owner.job_id,
            owner.ep_type,
            role,
            owner._av.clone(),
            owner.cq_format,
        );
        context.av_sync = owner.av_sync.clone();
        context.owner = owner.family.clone();
        Ok(context)
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        &self,
        set: RingSet,
        handle: u16,
        address: UetAddress,
        job_id: u32,
        ep_type: EpType,
        roles: u8,
        av: Option<Arc<AvTableHandle>>,
        cq_format: CqFormat,
    ) -> Endpoint {
        let caps = self.capabilities();
        let max_group_id = match av.as_ref() {
            Some(t) if roles != CTX_ROLE_CONTROL => t.max_group_id(),
            _ => 0,
        };
        self.inner.register_endpoint(crate::nic::EndpointRecord {
            handle,
            address,
            job_id,
            ep_type,
            roles,
            av_table: av.as_ref().map(|t| t.handle()),
            serial: 0,
            msix_vector: None,
        });
        Endpoint {
            nic: self.inner.clone(),
            _av: av,
            av_sync: None,
            handle,
            fid: crate::eq::next_fid(),
            address,
            job_id,
            ep_type,
            roles,
            cq_format,
            min_multi_recv: usize::from(caps.mtu),
            multi_seq: 0,
            held: None,
            silent_done: 0,
            rings: Some(set.rings),
            tx: set.tx,
            rx: set.rx,
            trx: set.trx,
            inject_offset: set.inject_offset,
            cq_geometry: set.cq_geometry,
            cq_offset: set.cq_offset,
            cq_head: 0,
            cq_phase: true,
            cq_unreported: 0,
            mtu: usize::from(caps.mtu),
            max_msg: if ep_type == EpType::Dgram {
                usize::from(caps.mtu)
            } else {
                caps.max_msg_size as usize
            },
            cm: None,
            auth_slots: Vec::new(),
            max_group_id,
            domain_seat: None,
            family: None,
            owner: None,
            wakeup: None,
            signal: None,
        }
    }
}

/// Derived initiator ids one ENDPOINT_CREATE tries before it reports the last one in use.
const DERIVED_INITIATOR_TRIES: u32 = 64;

/// ENDPOINT_CREATE's refusals, named: an initiator id in use (with the id and JobID), and
/// allocation failures after the capability that ran out.
fn endpoint_create_error(
    e: DriverError,
    caps: &Capabilities,
    attr: &EndpointAttr,
    initiator: u32,
) -> DriverError {
    let ri_count = attr.ri_count;
    match e {
        DriverError::AdminStatus {
            status: Status::InitiatorInUse,
            ..
        } => DriverError::InitiatorInUse {
            initiator,
            job_id: attr.job_id,
        },
        DriverError::AdminStatus {
            status: Status::PidExhausted,
            ..
        } => DriverError::Exhausted(format!(
            "no free PIDonFEP: all {} values of CAP_PID_ON_FEP (from {}) are assigned to endpoints",
            caps.pid_count, caps.pid_first
        )),
        DriverError::AdminStatus {
            status: Status::RiExhausted,
            ..
        } => DriverError::Exhausted(format!(
            "no run of {ri_count} free resource indices in CAP_RESOURCE_INDEX.space ({})",
            caps.ri_space
        )),
        DriverError::AdminStatus {
            status: Status::NoResources,
            ..
        } => DriverError::Exhausted(format!(
            "the endpoint table is full (CAP_EP.max_endpoints {}, contexts included)",
            caps.endpoints
        )),
        e => e,
    }
}

impl Endpoint {
    /// Enable a new endpoint against the AV it was created with: it follows a named AV's
    /// mirror ([`Av::sync_hook`]), and it is granted the NIC auth-key slot of every key the AV
    /// holds now — fi_av(3): "When endpoints or memory regions are enabled, they are
    /// configured with address vector authorization keys at that point in time" — which also
    /// makes removing those keys `FI_EBUSY` while the endpoint lives. Every kind of endpoint
    /// bound to an AV goes through here, a scalable endpoint for all its contexts.
    pub(crate) fn enable_with_av(&mut self, av: Option<&Av>) -> Result<(), DriverError> {
        self.av_sync = av.and_then(Av::sync_hook);
        if let Some(av) = av.filter(|a| a.has_auth_keys()) {
            let mut slots: Vec<u16> = av.auth_keys().map(|k| k.slot).collect();
            slots.sort_unstable();
            slots.dedup();
            if !slots.is_empty() {
                self.set_auth_slots(slots)?;
            }
        }
        Ok(())
    }

    /// Grant the endpoint exactly `slots` (ascending, distinct) with one ENDPOINT_AUTH_KEYS,
    /// and move the per-slot counts from the old set to the new.
    fn set_auth_slots(&mut self, slots: Vec<u16>) -> Result<(), DriverError> {
        let _change = self._av.as_ref().map(|t| t.grants_change());
        self.nic.execute(Command::EndpointAuthKeys {
            endpoint: u32::from(self.handle),
            body: EndpointAuthKeysBody::granting(slots.iter().copied()),
        })?;
        let grants = &self.nic.auth_grants;
        for s in &slots {
            if let Some(n) = grants.get(usize::from(*s)) {
                n.fetch_add(1, Ordering::AcqRel);
            }
        }
        for s in core::mem::replace(&mut self.auth_slots, slots) {
            release_grant(grants, s);
        }
        Ok(())
    }

    /// The NIC auth-key slots the endpoint is granted (it accepts their JobIDs), ascending.
    /// Empty for a context of a scalable endpoint other than context 0: the endpoint's grants
    /// serve every context.
    pub fn auth_key_slots(&self) -> &[u16] {
        &self.auth_slots
    }

    /// Enable the endpoint with one more auth key of its AV: `handle` from
    /// [`uet_av::AddressVector::insert_auth_key`] on `av`, the AV the endpoint was created
    /// with. A key already granted changes nothing. `FI_EINVAL` when `av` is not the
    /// endpoint's AV or `handle` is no key of it, and on a context of a scalable endpoint other
    /// than context 0 (the keys are the endpoint's, shared by its contexts: grant through
    /// context 0); the NIC's refusal as its errno. On error the endpoint keeps the keys it had.
    pub fn grant_auth_key(&mut self, av: &Av, handle: FiAddr) -> Result<(), FiError> {
        if self.owner.is_some() {
            return Err(FiError::inval(
                "grant_auth_key: this is a context of a scalable endpoint, whose auth keys are \
                 the endpoint's and serve every context: grant through context 0",
            ));
        }
        let same_av = self
            ._av
            .as_ref()
            .is_some_and(|t| Arc::ptr_eq(t, av.nic().table()));
        if !same_av {
            return Err(FiError::inval(
                "grant_auth_key: the AV is not the one the endpoint was created with",
            ));
        }
        let slot = av
            .auth_keys()
            .find(|k| k.handle == handle)
            .map(|k| k.slot)
            .ok_or_else(|| {
                FiError::inval(format!(
                    "grant_auth_key: {handle:#x} is no auth key of the AV"
                ))
            })?;
        if self.auth_slots.contains(&slot) {
            return Ok(());
        }
        let mut slots = self.auth_slots.clone();
        slots.push(slot);
        slots.sort_unstable();
        self.set_auth_slots(slots)
            .map_err(crate::errno::admin_to_fi)
    }

    /// The endpoint's UET address, as `fi_getname` returns it.
    pub fn address(&self) -> &UetAddress {
        &self.address
    }

    /// `fi_getname`: the serialized address, at most `min(*len, buf.len())` bytes of it. When
    /// that is shorter than the address, the address is truncated to it (fi_cm(3)), `*len` is
    /// set to the size needed, and the call fails with `FI_ETOOSMALL`.
    pub fn getname(&self, buf: &mut [u8], len: &mut usize) -> Result<(), uet_av::FiError> {
        let bytes = self.address.to_bytes().map_err(|e| {
            uet_av::FiError::new(FiErrno::FI_EOTHER, format!("endpoint address invalid: {e}"))
        })?;
        let avail = (*len).min(buf.len());
        *len = bytes.len();
        if avail < bytes.len() {
            buf[..avail].copy_from_slice(&bytes[..avail]);
            return Err(uet_av::FiError::new(
                FiErrno::FI_ETOOSMALL,
                format!("fi_getname needs {} bytes, got {avail}", bytes.len()),
            ));
        }
        buf[..bytes.len()].copy_from_slice(&bytes);
        Ok(())
    }

    /// The NIC's handle for the endpoint (or context): the index its doorbells carry.
    pub fn handle(&self) -> u16 {
        self.handle
    }

    /// The fabric id the endpoint's events carry.
    pub fn fid(&self) -> u64 {
        self.fid
    }

    pub(crate) fn nic_inner(&self) -> &Arc<NicInner> {
        &self.nic
    }

    /// The PIDonFEP the NIC assigned.
    pub fn pid_on_fep(&self) -> u16 {
        self.address.pid_on_fep
    }

    /// The resource indices the NIC assigned.
    pub fn resource_indices(&self) -> Range<u16> {
        self.address.ri_start..self.address.ri_start + self.address.ri_count
    }

    /// The endpoint's JobID.
    pub fn job_id(&self) -> u32 {
        self.job_id
    }

    /// Largest message (`fi_info.ep_attr.max_msg_size`): the NIC's `CAP_MAX_MSG`, and the MTU
    /// for a datagram endpoint (`EpType::Dgram`), whose messages are single packets. A message
    /// longer than [`Endpoint::mtu`] travels as several packets and still completes once on
    /// each side.
    pub fn max_msg_size(&self) -> usize {
        self.max_msg
    }

    /// Payload bytes per packet.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// [`DriverError::DeviceGone`] in a process forked from the one that opened the NIC
    /// ([`crate::fork`]): the rings are the parent's, their memory shared with it, and a
    /// descriptor written there could replace one the parent posted. One load.
    fn check_not_forked(&self) -> Result<(), DriverError> {
        if self.nic.in_forked_child() {
            return Err(DriverError::DeviceGone);
        }
        Ok(())
    }

    fn region(&self) -> Result<&crate::dma::DmaRegion, DriverError> {
        self.check_not_forked()?;
        self.rings
            .as_ref()
            .map(MappedRegion::region)
            .ok_or_else(|| DriverError::InvalidArgument("endpoint is closed".into()))
    }

    /// Largest [`Endpoint::inject`] payload (`fi_info.tx_attr.inject_size`): an inject slot,
    /// or the largest message when that is smaller (a datagram endpoint of a NIC whose MTU is
    /// below [`MAX_INJECT_BYTES`]).
    pub fn inject_size(&self) -> usize {
        MAX_INJECT_BYTES.min(self.max_msg)
    }

    /// Whether the endpoint has a tagged RX ring (`post_trecv` works, tagged messages are
    /// accepted).
    pub fn has_tagged_rx(&self) -> bool {
        self.trx.is_some()
    }

    /// `fi_senddata`: send the buffer's data to `dest` (an `fi_addr_t` of the bound AV,
    /// possibly carrying a receive context in its top bits). On error the buffer comes back.
    pub fn post_send(
        &mut self,
        dest: u64,
        buffer: DmaBuffer,
        context: u64,
        data: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        let req = TxRequest {
            data,
            ..TxRequest::new(TxOpcode::Send, dest, buffer.iova(), buffer.len())
        };
        self.post_tx(req, context, buffer)
    }

    /// Send `len` bytes at `iova` to `dest`. The memory is the caller's: the NIC checks it
    /// against what is mapped for DMA and completes the send with `FI_EFAULT` when it is not.
    pub fn post_send_iova(
        &mut self,
        dest: u64,
        iova: u64,
        len: usize,
        context: u64,
        data: u64,
    ) -> Result<(), DriverError> {
        let req = TxRequest {
            data,
            ..TxRequest::new(TxOpcode::Send, dest, iova, len)
        };
        self.post_tx(req, context, None::<DmaBuffer>)
            .map_err(|(e, _)| e)
    }

    /// `fi_tsenddata`: send the buffer's data to `dest` as a tagged message with match bits
    /// `tag`. On error the buffer comes back.
    pub fn post_tsend(
        &mut self,
        dest: u64,
        buffer: DmaBuffer,
        tag: u64,
        context: u64,
        data: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        let req = TxRequest {
            data,
            match_bits: tag,
            ..TxRequest::new(TxOpcode::TaggedSend, dest, buffer.iova(), buffer.len())
        };
        self.post_tx(req, context, buffer)
    }

    /// `fi_injectdata`: send `payload` (at most [`Endpoint::inject_size`] bytes) to `dest`.
    /// The payload is copied before the call returns; a successful send is never reported,
    /// a failed one is (an error completion with context 0).
    pub fn inject(&mut self, dest: u64, payload: &[u8], data: u64) -> Result<(), DriverError> {
        self.inject_op(TxOpcode::Send, dest, payload, 0, data)
    }

    /// `fi_tinjectdata`: as [`Endpoint::inject`], a tagged message with match bits `tag`.
    pub fn tinject(
        &mut self,
        dest: u64,
        payload: &[u8],
        tag: u64,
        data: u64,
    ) -> Result<(), DriverError> {
        self.inject_op(TxOpcode::TaggedSend, dest, payload, tag, data)
    }

    fn inject_op(
        &mut self,
        op: TxOpcode,
        dest: u64,
        payload: &[u8],
        tag: u64,
        data: u64,
    ) -> Result<(), DriverError> {
        if payload.len() > self.inject_size() {
            return Err(DriverError::MessageTooLong {
                len: payload.len(),
                max: self.inject_size(),
            });
        }
        // The completion context the inject takes, and its slot, which holds the payload
        // until the completion: free, since the context's last operation has completed.
        let Some(context) = self.tx.free_context() else {
            return Err(DriverError::Full("TX ring"));
        };
        let slot = self.inject_offset + usize::from(context) * MAX_INJECT_BYTES;
        let region = self.region()?;
        region.write_bytes(slot, payload)?;
        let req = TxRequest {
            flags: TX_FLAG_INJECT,
            data,
            match_bits: tag,
            context: Some(context),
            ..TxRequest::new(op, dest, region.iova_at(slot)?, payload.len())
        };
        self.post_tx(req, 0, None::<DmaBuffer>).map_err(|(e, _)| e)
    }

    /// `fi_write`: write the buffer's data into the memory region with memory key `key` of
    /// `dest`, at `remote_offset` within the region. On error the buffer comes back; after
    /// the completion it comes back in the event.
    pub fn post_write(
        &mut self,
        dest: u64,
        local: DmaBuffer,
        remote_offset: u64,
        key: u64,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        let req = TxRequest {
            match_bits: key,
            remote_offset,
            ..TxRequest::new(TxOpcode::Write, dest, local.iova(), local.len())
        };
        self.post_tx(req, context, local)
    }

    /// `fi_read`: read `len` bytes at `remote_offset` of the memory region with memory key
    /// `key` of `dest` into `local` (at most its capacity). The completion returns the
    /// buffer with its length set to `len`.
    pub fn post_read(
        &mut self,
        dest: u64,
        local: DmaBuffer,
        len: usize,
        remote_offset: u64,
        key: u64,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        if len > local.capacity() {
            let e = DriverError::InvalidArgument(format!(
                "a {len}-byte read does not fit a {}-byte buffer",
                local.capacity()
            ));
            return Err((e, local));
        }
        let req = TxRequest {
            match_bits: key,
            remote_offset,
            ..TxRequest::new(TxOpcode::Read, dest, local.iova(), len)
        };
        self.post_tx(req, context, local)
    }

    /// Whether this ring set may transmit.
    fn can_tx(&self) -> bool {
        self.roles & (CTX_ROLE_TX | CTX_ROLE_CONTROL) != 0
    }

    /// Whether this ring set may receive.
    fn can_rx(&self) -> bool {
        self.roles & (CTX_ROLE_RX | CTX_ROLE_CONTROL) != 0
    }

    /// `FI_EINVAL` for a buffer of a pool made for another NIC: its IOVA names other memory
    /// (or none) to this NIC, which would read or write that memory instead. One pointer
    /// comparison.
    #[inline]
    fn check_buffer(&self, buffer: &DmaBuffer) -> Result<(), DriverError> {
        if buffer.is_mapped_for(&self.nic.device) {
            return Ok(());
        }
        Err(DriverError::InvalidArgument(format!(
            "the buffer at IOVA {:#x} is of a DMA pool made for another NIC than the \
             endpoint's ({})",
            buffer.iova(),
            self.address.fabric_addr
        )))
    }

    /// The endpoint type (`fi_ep_attr.type`).
    pub fn ep_type(&self) -> EpType {
        self.ep_type
    }

    /// `fi_send` on a connected `FI_EP_MSG` endpoint: send the buffer's data to the peer.
    pub fn send(
        &mut self,
        buffer: DmaBuffer,
        context: u64,
        data: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        if self.cm.is_none() {
            let e = DriverError::InvalidArgument(format!(
                "send without a destination needs a connected FI_EP_MSG endpoint, this one is {:?}",
                self.ep_type
            ));
            return Err((e, buffer));
        }
        self.post_send(uet_fwif::FI_ADDR_NOTAVAIL, buffer, context, data)
    }

    /// A SEND to resource index 0 of `dest` (the provider control channel).
    pub(crate) fn post_control(
        &mut self,
        dest: u64,
        buffer: DmaBuffer,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        let req = TxRequest {
            flags: TX_FLAG_CONTROL,
            ..TxRequest::new(TxOpcode::Send, dest, buffer.iova(), buffer.len())
        };
        self.post_tx(req, context, buffer)
    }

    fn post_tx<B: TxBuffer>(
        &mut self,
        mut req: TxRequest,
        context: u64,
        buffer: B,
    ) -> Result<(), (DriverError, B)> {
        if let Err(e) = self.check_not_forked() {
            return Err((e, buffer));
        }
        if let Some(Err(e)) = buffer.dma_buffer().map(|b| self.check_buffer(b)) {
            return Err((e, buffer));
        }
        if !self.can_tx() {
            let e = DriverError::Unsupported(
                "this is a receive context: it has no transmit ring".into(),
            );
            return Err((e, buffer));
        }
        if let Some(cm) = self.cm.as_ref() {
            // FI_EP_MSG: every operation goes to the connected peer (no lock, no lookup).
            match cm.peer() {
                Ok(peer) => req.dest = peer,
                Err(e) => return Err((e, buffer)),
            }
        }
        if self.ep_type == EpType::Dgram && req.op.is_rma() {
            let e = DriverError::Unsupported("FI_EP_DGRAM endpoints do not support RMA".into());
            return Err((e, buffer));
        }
        if req.len > self.max_msg {
            let e = DriverError::MessageTooLong {
                len: req.len,
                max: self.max_msg,
            };
            return Err((e, buffer));
        }
        let slot = self.tx.tail;
        // The completion context: the tail's position while its entry is free (an inject
        // took its context already, the same way), else another free entry
        // (`post_tx_past_tail`). Sends complete out of posting order (each when its target
        // answers), so one a slow target holds must not keep the tail from coming round to
        // its position; the NIC reads the ring eagerly, so the position is the host's again
        // once read, and the NIC's unread descriptors are never more than the sends in
        // flight, fewer than the ring's entries less one.
        let full = self.tx.in_flight >= self.tx.mask;
        let entry = req.context.unwrap_or(slot);
        // The context's entry must be free (its completion reaped): checked on the entry
        // itself, so the store below replaces a known-empty one.
        let Some(free @ None) = self.tx.slots.get_mut(usize::from(entry)).filter(|_| !full) else {
            return self.post_tx_past_tail(req, context, buffer, full);
        };
        if let Some(sync) = self.av_sync.as_deref() {
            // A named AV: changes other processes made reach this NIC's table first (after
            // the cheap refusals: a full ring is not worth a catch-up).
            if let Err(e) = sync.catch_up() {
                return Err((DriverError::AvSync(e), buffer));
            }
        }
        let d = TxDescriptor {
            opcode: req.op as u8,
            flags: req.flags,
            reserved0: [0; 2],
            len: U32::new(req.len as u32),
            buf: U64::new(req.iova),
            dest: U64::new(req.dest),
            context: U64::new(u64::from(entry)),
            data: U64::new(req.data),
            match_bits: U64::new(req.match_bits),
            remote_offset: U64::new(req.remote_offset),
            reserved1: [0; 8],
        };
        let off = self.tx.offset + usize::from(slot) * TX_DESC;
        let Some(region) = self.rings.as_ref().map(MappedRegion::region) else {
            let e = DriverError::InvalidArgument("endpoint is closed".into());
            return Err((e, buffer));
        };
        if let Err(e) = region.write_obj(off, &d) {
            return Err((e.into(), buffer));
        }
        // The slot was matched empty above, so the value it held is `None`: forgetting it
        // skips a drop call on the send path and leaks nothing.
        let empty = free.replace(Posted {
            buffer: buffer.into(),
            context,
            op: CqOp::of_tx(req.op),
            silent: req.flags & TX_FLAG_INJECT != 0,
            multi: None,
            tag: 0,
            order: 0,
            len: req.len,
            pos: 0,
            passed: false,
        });
        debug_assert!(empty.is_none());
        core::mem::forget(empty);
        self.tx.in_flight += 1;
        // `geometry.next(slot)`, with the mask kept.
        self.tx.tail = ((u32::from(slot) + 1) & self.tx.mask) as u16;
        fence(Ordering::SeqCst);
        self.nic.bar().write(
            TXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(self.handle)
                .with_index(self.tx.tail),
        );
        Ok(())
    }

    /// [`Endpoint::post_tx`] when the entry at the tail is still held by a send in flight
    /// (or the ring is `full`): post with the first free entry after it as the context.
    #[cold]
    fn post_tx_past_tail<B: TxBuffer>(
        &mut self,
        mut req: TxRequest,
        context: u64,
        buffer: B,
        full: bool,
    ) -> Result<(), (DriverError, B)> {
        // An inject's context was free when it took it: that one is not tried again.
        let entry = (!full && req.context.is_none())
            .then(|| self.tx.free_context_past_tail())
            .flatten();
        let Some(entry) = entry else {
            return Err((DriverError::Full("TX ring"), buffer));
        };
        req.context = Some(entry);
        self.post_tx(req, context, buffer)
    }

    /// `fi_recv`: post a buffer for one incoming message. On error the buffer comes back.
    pub fn post_recv(
        &mut self,
        buffer: DmaBuffer,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        self.post_rx(buffer, context, None, 0)
    }

    /// `fi_recv` for peer group `group` (libfabric 2.x peer groups): post a buffer for one
    /// incoming untagged message of that group.
    /// It takes no message of another group, and messages of other groups never wait for it.
    /// `FI_EINVAL` when `group` is above the bound AV's `max_group_id` (on an endpoint without
    /// peer groups: any group but 0). On error the buffer comes back.
    pub fn post_recv_group(
        &mut self,
        buffer: DmaBuffer,
        group: u32,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        if let Err(e) = self.check_group(group) {
            return Err((e, buffer));
        }
        self.post_rx(buffer, context, None, group)
    }

    /// The largest peer group id a receive may name: the bound AV's `max_group_id`, 0
    /// without peer groups.
    pub fn max_group_id(&self) -> u32 {
        self.max_group_id
    }

    /// Whether the endpoint has peer groups (its AV was opened with `max_group_id` > 0).
    pub fn has_peer_groups(&self) -> bool {
        self.max_group_id != 0
    }

    fn check_group(&self, group: u32) -> Result<(), DriverError> {
        if group <= self.max_group_id {
            return Ok(());
        }
        Err(DriverError::InvalidArgument(if self.max_group_id == 0 {
            format!(
                "peer group {group}: the endpoint has no peer groups (its AV was opened with \
                 max_group_id 0)"
            )
        } else {
            format!(
                "peer group {group} is above the AV's max_group_id {}",
                self.max_group_id
            )
        }))
    }

    /// `fi_recvmsg` with `FI_MULTI_RECV`: post `buffer` for several untagged messages. The
    /// NIC places each message whole at the next free offset (64-byte aligned) and completes
    /// each on its own ([`CqEvent::multi_recv`] gives the offset); it releases the buffer when
    /// less than `min_free` bytes are left after a message (`None`: the endpoint's
    /// `FI_OPT_MIN_MULTI_RECV`, [`Endpoint::min_multi_recv`]), or when a message does not fit
    /// the space left — that message goes to the next posted buffer, never split. The buffer
    /// comes back in its last completion, the one with `FI_MULTI_RECV`; before that, read a
    /// message with [`Endpoint::multi_recv_read`]. On error the buffer comes back.
    pub fn post_recv_multi(
        &mut self,
        buffer: DmaBuffer,
        min_free: Option<usize>,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        if self.has_peer_groups() {
            let e = DriverError::Unsupported(
                "FI_MULTI_RECV: multi-receive buffers are not available on an endpoint with \
                 peer groups (the NIC matches its untagged receives by group)"
                    .into(),
            );
            return Err((e, buffer));
        }
        let min_free = min_free.unwrap_or(self.min_multi_recv);
        let Ok(min_free) = u32::try_from(min_free) else {
            let e = DriverError::InvalidArgument(format!(
                "min_free {min_free} exceeds the descriptor's 32-bit field"
            ));
            return Err((e, buffer));
        };
        self.post_rx(buffer, context, Some(min_free), 0)
    }

    /// `fi_trecvmsg` with `FI_MULTI_RECV`: refused with `FI_EOPNOTSUPP`. `fi_tagged(3)` gives
    /// tagged receives no `FI_MULTI_RECV` flag, and the NIC's tagged RX descriptor has no
    /// multi-receive form. The buffer comes back.
    pub fn post_trecv_multi(
        &mut self,
        buffer: DmaBuffer,
        _tag: u64,
        _ignore: u64,
        _min_free: Option<usize>,
        _context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        let e = DriverError::Unsupported(
            "FI_MULTI_RECV applies to untagged receives only: fi_tagged(3) defines no \
             multi-receive tagged receive; post a multi-receive buffer with post_recv_multi"
                .into(),
        );
        Err((e, buffer))
    }

    /// `FI_OPT_MIN_MULTI_RECV` (`fi_getopt`): the space below which a multi-receive buffer
    /// posted with `min_free` `None` is released. Defaults to one MTU.
    pub fn min_multi_recv(&self) -> usize {
        self.min_multi_recv
    }

    /// `fi_setopt(FI_OPT_MIN_MULTI_RECV)`: applies to multi-receive buffers posted from now
    /// on (each descriptor carries its own value to the NIC). `FI_EINVAL` above `u32::MAX`.
    pub fn set_min_multi_recv(&mut self, bytes: usize) -> Result<(), DriverError> {
        if u32::try_from(bytes).is_err() {
            return Err(DriverError::InvalidArgument(format!(
                "FI_OPT_MIN_MULTI_RECV {bytes} exceeds 32 bits"
            )));
        }
        self.min_multi_recv = bytes;
        Ok(())
    }

    /// The endpoint's completion format (`fi_cq_attr.format`).
    pub fn cq_format(&self) -> CqFormat {
        self.cq_format
    }

    /// Change the completion format [`Endpoint::cq_read_entry`] reads as.
    pub fn set_cq_format(&mut self, format: CqFormat) {
        self.cq_format = format;
    }

    /// Post an RX descriptor: one message of peer group `group` (already checked), or with
    /// `min_free` a multi-receive buffer.
    fn post_rx(
        &mut self,
        mut buffer: DmaBuffer,
        user_context: u64,
        min_free: Option<u32>,
        group: u32,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        if let Err(e) = self.check_buffer(&buffer) {
            return Err((e, buffer));
        }
        if !self.can_rx() {
            let e = DriverError::Unsupported(
                "this is a transmit context: it has no receive ring".into(),
            );
            return Err((e, buffer));
        }
        // The completion context: the ring position on a ring the NIC reads in order, where
        // receives complete in posting order and a cancelled one keeps its position until the
        // NIC has passed it (another free entry while the current multi-receive buffer, which
        // the NIC has passed, holds that one); any free entry on one it reads eagerly (peer groups, as the NIC
        // decides it: the bound AV's groups, never a control channel's ring).
        let slot = self.rx.tail;
        let ordered = self.max_group_id == 0;
        let context = if ordered {
            self.rx.ordered_context()
        } else {
            self.rx.free_context()
        };
        let Some(context) = context else {
            return Err((DriverError::Full("RX ring"), buffer));
        };
        let mut d = RxDescriptor::new_zeroed();
        d.buf = U64::new(buffer.iova());
        d.len = U32::new(buffer.capacity() as u32);
        d.context = U64::new(u64::from(context));
        d.group = U32::new(group);
        if let Some(m) = min_free {
            d.flags = U32::new(RX_FLAG_MULTI_RECV);
            d.min_free = U32::new(m);
        }
        let off = self.rx.offset + usize::from(slot) * RX_DESC;
        let written = self.region().and_then(|r| Ok(r.write_obj(off, &d)?));
        if let Err(e) = written {
            // Nothing taken: the buffer comes back as it was given.
            return Err((e, buffer));
        }
        buffer.set_len(0);
        let multi = min_free.map(|_| {
            let seq = self.multi_seq;
            self.multi_seq = self.multi_seq.wrapping_add(1);
            (seq, 0)
        });
        self.rx.posts += 1;
        self.rx.slots[usize::from(context)] = Some(Posted {
            buffer: Some(buffer),
            context: user_context,
            op: CqOp::Recv,
            silent: false,
            multi,
            tag: 0,
            order: self.rx.posts,
            len: 0,
            pos: slot,
            passed: false,
        });
        if let Some(at) = self.rx.at.get_mut(usize::from(slot)).filter(|_| ordered) {
            *at = Some(context);
        }
        self.rx.in_flight += 1;
        self.rx.tail = self.rx.geometry.next(slot);
        fence(Ordering::SeqCst);
        self.nic.bar().write(
            RXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(self.handle)
                .with_index(self.rx.tail),
        );
        Ok(())
    }

    /// `fi_trecv`: post a buffer for one tagged message whose match bits `t` satisfy
    /// `(tag ^ t) & !ignore == 0`. Receives match in posting order; a message that arrived
    /// before any matching receive waits on the NIC's unexpected list and completes this
    /// receive at once. `FI_EOPNOTSUPP` on an endpoint made without a tagged RX ring
    /// (`trx_log2` 0), as a receive on a transmit context. On error the buffer comes back.
    pub fn post_trecv(
        &mut self,
        buffer: DmaBuffer,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        self.post_trx(buffer, tag, ignore, 0, context)
    }

    /// `fi_trecv` for peer group `group` (libfabric 2.x peer groups): as
    /// [`Endpoint::post_trecv`], for a tagged message of peer group `group`
    /// only. Matching is by group and tag; a message of the group that arrived first waits on
    /// the NIC's unexpected list and completes this receive at once. `FI_EINVAL` when `group`
    /// is above the bound AV's `max_group_id` (on an endpoint without peer groups: any group
    /// but 0). On error the buffer comes back.
    pub fn post_trecv_group(
        &mut self,
        buffer: DmaBuffer,
        tag: u64,
        ignore: u64,
        group: u32,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        if let Err(e) = self.check_group(group) {
            return Err((e, buffer));
        }
        self.post_trx(buffer, tag, ignore, group, context)
    }

    /// Post a tagged RX descriptor for peer group `group` (already checked).
    fn post_trx(
        &mut self,
        buffer: DmaBuffer,
        tag: u64,
        ignore: u64,
        group: u32,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        let d = TrxPost {
            tag,
            ignore,
            group,
            flags: 0,
            claim: 0,
        };
        self.post_trx_desc(buffer, d, context)
    }

    /// `fi_trecvmsg` with `FI_PEEK`, `FI_PEEK | FI_CLAIM`, `FI_PEEK | FI_DISCARD` or
    /// `FI_CLAIM | FI_DISCARD` (fi_tagged(3)): a probe of the NIC's unexpected list for a
    /// tagged message of peer group `group` matching `tag` and `ignore` (see [`TaggedProbe`];
    /// a `Discard` names its message by claim, and ignores `tag`, `ignore` and `group`).
    /// It takes no buffer and completes through [`Endpoint::poll`] as a tagged receive with
    /// `context`: when a message is found, [`CqEvent::report`] is set, `len` is the message's
    /// length and the event carries its tag, remote CQ data, group and source, and no buffer;
    /// when none is (none matches, or the oldest that matches is still arriving), the error
    /// `FI_ENOMSG`. A claimed message is taken by [`Endpoint::post_trecv_claimed`] with its
    /// claim, and by no other receive or probe. `FI_ENOSYS` on a NIC older than interface
    /// 1.18; `FI_EINVAL` for a group the endpoint does not receive.
    pub fn post_tprobe(
        &mut self,
        probe: TaggedProbe,
        tag: u64,
        ignore: u64,
        group: u32,
        context: u64,
    ) -> Result<(), DriverError> {
        self.probe_supported()?;
        // A discard names its message by claim alone.
        let group = if matches!(probe, TaggedProbe::Discard(_)) {
            0
        } else {
            group
        };
        self.check_group(group)?;
        let (flags, claim) = match probe {
            TaggedProbe::Peek => (TRX_FLAG_PEEK, 0),
            TaggedProbe::PeekClaim(claim) => (TRX_FLAG_PEEK | TRX_FLAG_CLAIM, claim),
            TaggedProbe::PeekDiscard => (TRX_FLAG_PEEK | TRX_FLAG_DISCARD, 0),
            TaggedProbe::Discard(claim) => (TRX_FLAG_CLAIM | TRX_FLAG_DISCARD, claim),
        };
        let d = TrxPost {
            tag,
            ignore,
            group,
            flags,
            claim,
        };
        self.post_trx_desc(NoBuffer, d, context)
            .map_err(|(e, NoBuffer)| e)
    }

    /// `fi_trecvmsg` with `FI_CLAIM` alone (fi_tagged(3)): take the message a
    /// [`TaggedProbe::PeekClaim`] with `claim` claimed into `buffer`, as a tagged receive that
    /// matched it (truncated to the buffer). It completes through [`Endpoint::poll`] as a
    /// tagged receive with `context`, or with the error `FI_ENOMSG` when no message holds the
    /// claim. `FI_ENOSYS` on a NIC older than interface 1.18. On error the buffer comes back.
    pub fn post_trecv_claimed(
        &mut self,
        buffer: DmaBuffer,
        claim: u64,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        if let Err(e) = self.probe_supported() {
            return Err((e, buffer));
        }
        let d = TrxPost {
            tag: 0,
            ignore: 0,
            group: 0,
            flags: TRX_FLAG_CLAIM,
            claim,
        };
        self.post_trx_desc(buffer, d, context)
    }

    /// Whether the NIC takes probes of its unexpected list (interface 1.18).
    fn probe_supported(&self) -> Result<(), DriverError> {
        if self.nic.identity.interface_minor < uet_regs::since::TAGGED_PROBE {
            return Err(DriverError::Fabric(FiError::new(
                FiErrno::FI_ENOSYS,
                format!(
                    "the NIC (interface 1.{}) cannot probe its unexpected list (FI_PEEK, FI_CLAIM, \
                     FI_DISCARD): that needs interface 1.{}",
                    self.nic.identity.interface_minor,
                    uet_regs::since::TAGGED_PROBE
                ),
            )));
        }
        Ok(())
    }

    /// Post one tagged RX descriptor: a receive into `buffer`, or a probe (`d.flags` set;
    /// no buffer but a `CLAIM` that takes its message). On error the buffer comes back.
    fn post_trx_desc<B: TrxBuffer>(
        &mut self,
        mut buffer: B,
        p: TrxPost,
        context: u64,
    ) -> Result<(), (DriverError, B)> {
        if let Err(e) = self.check_not_forked() {
            return Err((e, buffer));
        }
        if let Some(Err(e)) = buffer.buffer().map(|b| self.check_buffer(b)) {
            return Err((e, buffer));
        }
        if !self.can_rx() {
            let e = DriverError::Unsupported(
                "this is a transmit context: it has no receive ring".into(),
            );
            return Err((e, buffer));
        }
        let handle = self.handle;
        let Some(region) = self.rings.as_ref().map(MappedRegion::region) else {
            let e = DriverError::InvalidArgument("endpoint is closed".into());
            return Err((e, buffer));
        };
        let Some((ring, slab)) = self.trx.as_mut() else {
            // As a transmit context's receive: the endpoint was made without the operation.
            let e = DriverError::Unsupported(
                "the endpoint has no tagged RX ring (opened with trx_log2 0)".into(),
            );
            return Err((e, buffer));
        };
        if ring.in_flight >= ring.geometry.entries() - 1 {
            return Err((DriverError::Full("tagged RX ring"), buffer));
        }
        let Some(ctx) = slab.free.pop() else {
            return Err((DriverError::Full("tagged RX ring"), buffer));
        };
        let mut d = TaggedRxDescriptor::new_zeroed();
        if let Some(b) = buffer.buffer() {
            d.buf = U64::new(b.iova());
            d.len = U32::new(b.capacity() as u32);
        }
        d.context = U64::new(u64::from(ctx));
        d.tag = U64::new(p.tag);
        d.ignore = U64::new(p.ignore);
        d.group = U32::new(p.group);
        d.flags = U32::new(p.flags);
        d.claim = U64::new(p.claim);
        let off = ring.offset + usize::from(ring.tail) * TRX_DESC;
        if let Err(e) = region.write_obj(off, &d) {
            // Nothing taken: the buffer comes back as it was given.
            slab.free.push(ctx);
            return Err((e.into(), buffer));
        }
        if let Some(b) = buffer.buffer() {
            b.set_len(0);
        }
        ring.posts += 1;
        if let Some(s) = slab.slots.get_mut(usize::from(ctx)) {
            *s = Some(Posted {
                buffer: buffer.into_posted(),
                context,
                op: CqOp::TaggedRecv,
                silent: false,
                multi: None,
                tag: p.tag,
                order: ring.posts,
                len: 0,
                pos: 0,
                passed: false,
            });
        }
        ring.in_flight += 1;
        ring.tail = ring.geometry.next(ring.tail);
        fence(Ordering::SeqCst);
        self.nic.bar().write(
            TRXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(handle)
                .with_index(ring.tail),
        );
        Ok(())
    }

    /// `fi_cancel` of an untagged receive: withdraw the oldest receive posted with `context`
    /// that no message has taken. It completes through [`Endpoint::poll`] with the error
    /// `FI_ECANCELED` (status `Cancelled`), its buffer returned untouched. `FI_ENOENT` when no
    /// receive with `context` is posted (never posted, or already completed: its completion
    /// may still wait to be read); `FI_EBUSY` for a receive a message is arriving into, or a
    /// multi-receive buffer a message is arriving into (any multi-receive buffer on a NIC
    /// older than interface 1.19); `FI_EAGAIN` while the completion ring is full; `FI_ENOSYS`
    /// on a NIC older than interface 1.14. A multi-receive buffer ([`Endpoint::post_recv_multi`])
    /// completes as its release ([`MultiRecv::released`], no message) with the error
    /// `FI_ECANCELED`, and comes back with the length of what was placed in it; the messages
    /// placed before completed as usual.
    pub fn cancel_recv(&mut self, context: u64) -> Result<(), DriverError> {
        self.cancel_supported()?;
        self.cancel_oldest(RECV_CANCEL_RING_RX, context)
    }

    /// `fi_cancel` of a tagged receive (see [`Endpoint::cancel_recv`]). Its completion
    /// reports the tag the receive was posted with ([`CqEvent::tag`]).
    pub fn cancel_trecv(&mut self, context: u64) -> Result<(), DriverError> {
        self.cancel_supported()?;
        self.cancel_oldest(RECV_CANCEL_RING_TAGGED, context)
    }

    /// RECV_CANCEL of the oldest receive on `ring` posted with `context` that is still
    /// posted on the NIC. The driver holds a receive until its completion is read, so the
    /// oldest it holds may be one a message completed, or one already cancelled, whose
    /// completion waits unread: the NIC refuses it as not posted, and the next oldest is
    /// tried. Posting order, not entry order: on a ring read eagerly, and in the tagged
    /// table (its free list hands out the entry freed last), entries are taken in no
    /// particular order.
    fn cancel_oldest(&mut self, ring: u8, context: u64) -> Result<(), DriverError> {
        let mut after = 0;
        loop {
            let slots = if ring == RECV_CANCEL_RING_TAGGED {
                self.trx.as_ref().map(|(_, slab)| slab.slots.as_slice())
            } else {
                Some(self.rx.slots.as_slice())
            };
            let (order, slot) = slots
                .and_then(|slots| oldest_posted(slots, context, after))
                .ok_or_else(|| not_posted(context))?;
            match self.send_cancel(ring, slot as u64) {
                Err(e) if refused_not_posted(&e) => after = order,
                r => return r,
            }
        }
    }

    /// `fi_cancel`: the untagged receive posted with `context`, else the tagged one (see
    /// [`Endpoint::cancel_recv`]). Sends are not cancelled: they complete on their own, and a
    /// send's context is `FI_ENOENT`.
    pub fn cancel(&mut self, context: u64) -> Result<(), DriverError> {
        match self.cancel_recv(context) {
            Err(e) if e.errno() == FiErrno::FI_ENOENT && self.trx.is_some() => {
                self.cancel_trecv(context)
            }
            r => r,
        }
    }

    /// Whether RECV_CANCEL withdraws a multi-receive buffer on the endpoint's NIC (host
    /// interface 1.19; before, one stays posted until messages fill it).
    pub fn cancels_multi_recv(&self) -> bool {
        self.nic.identity.interface_minor >= crate::nic::MULTI_RECV_CANCEL_INTERFACE_MINOR
    }

    /// `Ok` when the endpoint can cancel its receives: `FI_ENOSYS` on a NIC older than
    /// interface 1.14, `FI_ENOENT` for a transmit context (it posts no receive).
    pub fn cancel_supported(&self) -> Result<(), DriverError> {
        if self.nic.identity.interface_minor < RECV_CANCEL_INTERFACE_MINOR {
            return Err(DriverError::Fabric(FiError::new(
                FiErrno::FI_ENOSYS,
                format!(
                    "the NIC (interface 1.{}) cannot cancel a posted receive: RECV_CANCEL \
                     needs interface 1.{RECV_CANCEL_INTERFACE_MINOR}",
                    self.nic.identity.interface_minor
                ),
            )));
        }
        if !self.can_rx() {
            return Err(not_posted(0));
        }
        Ok(())
    }

    fn send_cancel(&mut self, ring: u8, slot: u64) -> Result<(), DriverError> {
        match self.nic.recv_cancel(self.handle, ring, slot) {
            Err(DriverError::AdminStatus {
                status: Status::Busy,
                ..
            }) => Err(DriverError::Full("completion ring")),
            r => r,
        }
    }

    /// Descriptors posted and not yet completed: (TX, RX). Tagged receives are in
    /// [`Endpoint::tagged_in_flight`].
    pub fn in_flight(&self) -> (u32, u32) {
        (self.tx.in_flight, self.rx.in_flight)
    }

    /// Tagged receives posted and not yet completed.
    pub fn tagged_in_flight(&self) -> u32 {
        self.trx.as_ref().map_or(0, |(r, _)| r.in_flight)
    }

    /// The next completion, success or error, or `None` when there is none yet. Successful
    /// inject completions are consumed here and never returned. A completion that
    /// [`Endpoint::cq_read`] or [`Endpoint::cq_readerr`] set aside comes first.
    pub fn poll(&mut self) -> Result<Option<CqEvent>, DriverError> {
        if let Some(ev) = self.held.take() {
            return Ok(Some(ev));
        }
        if let Some(sync) = self.av_sync.as_deref() {
            // A named AV: messages that arrive from now on are attributed by the AV's
            // current contents (see uet_av::named). A catch-up the NIC refuses does not keep
            // the completions already there from being read; the next read tries again.
            if let Err(e) = sync.catch_up() {
                tracing::warn!(endpoint = self.handle, error = %e, "named AV catch-up failed");
            }
        }
        loop {
            let Some(c) = self.next_completion()? else {
                return Ok(None);
            };
            if let Some(ev) = self.event(&c)? {
                return Ok(Some(ev));
            }
        }
    }

    /// The injects that completed successfully since the last call: their completions were
    /// read from the ring (by [`Endpoint::poll`] or the `cq_*` reads) and make no event, but a
    /// completion counter counts them (fi_cntr(3)).
    pub fn take_silent_completions(&mut self) -> u64 {
        core::mem::take(&mut self.silent_done)
    }

    /// `fi_cq_read` of one entry: the next successful completion. Fails with `FI_EAGAIN` when
    /// nothing has completed, and with `FI_EAVAIL` while the next completion is an error
    /// (read it with [`Endpoint::cq_readerr`]); any other error is the endpoint's (a closed
    /// endpoint, a completion the NIC should not have written). [`CqEvent::entry`] converts
    /// the event into the endpoint's format.
    pub fn cq_read(&mut self) -> Result<CqEvent, FiErrno> {
        let ev = self.next_event()?;
        if ev.error.is_some() {
            self.held = Some(ev);
            return Err(FiErrno::FI_EAVAIL);
        }
        Ok(ev)
    }

    /// `fi_cq_sread` of one entry: [`Endpoint::cq_read`], waiting up to `timeout` (`None`, or
    /// one too long for the clock to add, such as `Duration::MAX`: without end) for a
    /// completion when there is none yet. Fails with `FI_EAGAIN` when the time passes with
    /// nothing completed, or when [`Endpoint::cq_signal`]'s handle woke it (or had signalled
    /// before it was called) and nothing completed; with `FI_EAVAIL` for an error completion
    /// (read it with [`Endpoint::cq_readerr`]), and as `cq_read` does otherwise. Fails with
    /// `FI_EIO` once the NIC stopped (a fatal error, or its function reset under the driver),
    /// which then writes no completion and raises no vector: the wait looks at the NIC's
    /// status every [`STOPPED_CHECK_INTERVAL`] it waits (completions written before are read
    /// first).
    ///
    /// The wait sleeps on the endpoint's MSI-X vector ([`crate::interrupt`]): the ring is read,
    /// found empty, armed with `CQ_ARM`, and the thread sleeps until the NIC raises the vector
    /// (at once if a completion landed after the read). Without a vector (a NIC older than
    /// interface 1.12, a backend without interrupts, every vector held) it reads the ring with
    /// a growing sleep between reads, up to [`crate::interrupt::POLL_SLEEP_MAX`].
    ///
    /// With the in-process simulator, a completion comes only from a register write another
    /// thread makes (the model runs on doorbells), as on hardware only the NIC makes one.
    pub fn cq_sread(&mut self, timeout: Option<Duration>) -> Result<CqEvent, FiErrno> {
        // A timeout past the clock's range (`Duration::MAX`) has no deadline: it never passes.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut sleep = Duration::from_micros(2);
        let mut looked = Instant::now();
        loop {
            match self.cq_read() {
                Err(FiErrno::FI_EAGAIN) => {}
                done => return done,
            }
            // Woken by fi_cq_signal, or signalled before: nothing to read, the caller's turn.
            if self.signal.as_ref().is_some_and(|s| s.take()) {
                return Err(FiErrno::FI_EAGAIN);
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Err(FiErrno::FI_EAGAIN),
                },
                None => None,
            };
            if looked.elapsed() >= STOPPED_CHECK_INTERVAL {
                looked = Instant::now();
                if self.device_stopped() {
                    tracing::warn!(
                        endpoint = self.handle,
                        "the NIC stopped (a fatal error, or its function was reset): no completion will come"
                    );
                    return Err(FiErrno::FI_EIO);
                }
            }
            // In slices, so that a NIC that stops, and so raises no vector, is seen.
            let left = Some(left.map_or(STOPPED_CHECK_INTERVAL, |l| l.min(STOPPED_CHECK_INTERVAL)));
            if self.arm_wakeup().is_ok() {
                if let Some(v) = self.wakeup.as_ref() {
                    v.wait(left, self.signal.as_ref()).map_err(|e| {
                        tracing::warn!(endpoint = self.handle, error = %e, "completion wait failed");
                        FiErrno::FI_EIO
                    })?;
                }
            } else {
                std::thread::sleep(left.map_or(sleep, |l| l.min(sleep)));
                sleep = (sleep * 2).min(crate::interrupt::POLL_SLEEP_MAX);
            }
        }
    }

    /// Whether the NIC will write no more completions: it stopped with a fatal error, or its
    /// function was reset under the driver. Two register reads: for a waiter that has found
    /// nothing for a while, never the read path.
    pub fn device_stopped(&self) -> bool {
        self.nic.answers_nothing()
    }

    /// Write `eventfd` once when the NIC stops (a fatal error, or its function reset under
    /// the driver), within [`STOPPED_CHECK_INTERVAL`], for as long as `eventfd` is alive: for
    /// a descriptor an application sleeps on, which the NIC's vectors would never make
    /// readable then ([`crate::stop_watch`]). Held once however often it is handed.
    pub fn wake_when_stopped(&self, eventfd: &Arc<vmm_sys_util::eventfd::EventFd>) {
        self.nic.wake_when_stopped(eventfd);
    }

    /// `fi_cq_signal`: a handle that wakes a thread asleep in this endpoint's
    /// [`Endpoint::cq_sread`] from any thread ([`crate::interrupt::CqSignal`]); made on first
    /// call, the same one after. `FI_ENOMEM` when no eventfd can be made.
    pub fn cq_signal(&mut self) -> Result<crate::interrupt::CqSignal, FiErrno> {
        if self.signal.is_none() {
            self.signal = Some(crate::interrupt::CqSignal::new().map_err(|e| {
                tracing::warn!(endpoint = self.handle, error = %e, "no eventfd for fi_cq_signal");
                FiErrno::FI_ENOMEM
            })?);
        }
        self.signal.clone().ok_or(FiErrno::FI_ENOMEM)
    }

    /// `fi_trywait` for the endpoint's completion queue: `Ok` when it is safe to sleep on
    /// [`Endpoint::cq_wait_fd`] — nothing waits to be read, and the ring is armed, so the
    /// descriptor becomes readable when a completion lands. `FI_EAGAIN` when a completion
    /// may be read now (read it first; `cq_read` may still find none, for a successful inject
    /// completion is never reported). `FI_ENOSYS` or `FI_EBUSY` when the endpoint has no
    /// vector, as for [`Endpoint::cq_wait_fd`].
    pub fn cq_trywait(&mut self) -> Result<(), FiErrno> {
        if self.held.is_some() || self.cq_written_at_head().map_err(|e| e.errno())? {
            return Err(FiErrno::FI_EAGAIN);
        }
        self.arm_wakeup()
    }

    /// `fi_control(FI_GETWAIT)` of the completion queue (`FI_WAIT_FD`): a descriptor that
    /// polls readable once the ring, armed by [`Endpoint::cq_trywait`] or a
    /// [`Endpoint::cq_sread`], holds a completion; it stays readable until the next
    /// `cq_trywait`. Usable with `poll(2)` and `epoll(7)`; the endpoint keeps it open while it
    /// lives. `FI_ENOSYS` when the NIC has no completion interrupts (older than interface
    /// 1.12, or a backend without MSI-X), `FI_EBUSY` when every vector is held by another
    /// endpoint.
    pub fn cq_wait_fd(&mut self) -> Result<std::os::fd::BorrowedFd<'_>, FiErrno> {
        Ok(self.vector()?.fd())
    }

    /// The endpoint's vector, taken on first need (and noted for the telemetry socket):
    /// `FI_ENOSYS` without completion interrupts, `FI_EBUSY` while every vector is held.
    fn vector(&mut self) -> Result<&crate::interrupt::Vector, FiErrno> {
        if self.wakeup.is_none() {
            let irq = self.nic.interrupts().ok_or(FiErrno::FI_ENOSYS)?;
            let v = irq.take().ok_or(FiErrno::FI_EBUSY)?;
            self.nic.note_endpoint_vector(self.handle, v.number());
            // A connection's peer shutting it down raises the vector too (see `crate::cm`).
            if let Some(cm) = &self.cm {
                cm.note_completion_vector(&v);
            }
            self.wakeup = Some(v);
        }
        self.wakeup.as_ref().ok_or(FiErrno::FI_ENOSYS)
    }

    /// Byte offset of the completion ring's head entry in the ring region.
    fn cq_head_slot(&self) -> usize {
        self.cq_offset + usize::from(self.cq_head) * CQE
    }

    /// Whether the NIC wrote the entry at the head (its phase is this pass's): a completion
    /// to read, a successful inject's included.
    fn cq_written_at_head(&self) -> Result<bool, DriverError> {
        let phase = self
            .region()?
            .read_u8(self.cq_head_slot() + COMPLETION_PHASE_OFFSET)?;
        Ok((phase & 1 != 0) == self.cq_phase)
    }

    /// Take a vector if the endpoint has none, clear its eventfd and arm the ring with it;
    /// `FI_ENOSYS` or `FI_EBUSY` when there is no vector ([`Endpoint::cq_wait_fd`]). The
    /// caller found the ring empty; the head it has taken goes to the NIC first.
    fn arm_wakeup(&mut self) -> Result<(), FiErrno> {
        self.vector()?;
        let vector = self.wakeup.take().ok_or(FiErrno::FI_ENOSYS)?;
        self.arm_with(&vector);
        self.wakeup = Some(vector);
        Ok(())
    }

    /// Clear `vector`'s eventfd and arm the completion ring to raise it; the caller found
    /// the ring empty, and holds the vector (the endpoint's own, or a vector its owner keeps
    /// for it, as a connection's control progress does for its control channel). The head
    /// the reads have taken goes to the NIC first. A completion written since the ring was
    /// found empty raises the vector at the arm, so a waiter that sleeps on the eventfd next
    /// misses none.
    pub(crate) fn arm_with(&mut self, vector: &crate::interrupt::Vector) {
        vector.clear();
        self.arm_shared(vector.number());
    }

    /// Arm the completion ring to raise `vector`, a vector several rings share, without
    /// clearing its eventfd: its one reader clears it before it looks at the rings that
    /// raise it. The caller found the ring empty; the head taken goes to the NIC first.
    pub(crate) fn arm_shared(&mut self, vector: u16) {
        // The NIC must know every entry taken before the arm, or the arm raises at once (it
        // raises when the ring holds an entry the driver has not freed).
        if self.cq_unreported > 0 {
            self.report_cq_head();
        }
        self.nic.bar().write(
            CQ_ARM,
            CqArm::new().with_endpoint(self.handle).with_vector(vector),
        );
    }

    /// Whether a completion may wait to be read (one held aside, or an entry the NIC wrote
    /// at the head; `true` when the ring cannot be read, so that its reader looks).
    pub(crate) fn may_have_completion(&self) -> bool {
        self.held.is_some() || self.cq_written_at_head().unwrap_or(true)
    }

    /// Note for the telemetry socket that the completion ring raises `vector`, which its
    /// owner holds for it (see [`Endpoint::arm_with`]).
    pub(crate) fn note_vector(&self, vector: &crate::interrupt::Vector) {
        self.nic.note_endpoint_vector(self.handle, vector.number());
    }

    /// The completion held aside by a read of the other kind, or the next one from the ring.
    fn next_event(&mut self) -> Result<CqEvent, FiErrno> {
        match self.held.take() {
            Some(ev) => Ok(ev),
            None => match self.poll() {
                Ok(Some(ev)) => Ok(ev),
                Ok(None) => Err(FiErrno::FI_EAGAIN),
                Err(e) => Err(e.errno()),
            },
        }
    }

    /// [`Endpoint::cq_read`] in the endpoint's [`CqFormat`], with the event it came from (for
    /// its buffer and source address).
    pub fn cq_read_entry(&mut self) -> Result<(crate::cq::CqEntry, CqEvent), FiErrno> {
        let ev = self.cq_read()?;
        Ok((ev.entry(self.cq_format), ev))
    }

    /// `fi_cq_readerr`: the next completion when it is an error ([`CqEvent::err_entry`] gives
    /// `struct fi_cq_err_entry`). Fails with `FI_EAGAIN` when the next completion is a
    /// success (it stays for [`Endpoint::cq_read`]) or nothing has completed.
    pub fn cq_readerr(&mut self) -> Result<CqEvent, FiErrno> {
        let ev = self.next_event()?;
        if ev.error.is_none() {
            self.held = Some(ev);
            return Err(FiErrno::FI_EAGAIN);
        }
        Ok(ev)
    }

    /// Copy the message a multi-receive completion reports into `out` (at most `out.len()`
    /// bytes of its `len`); returns the bytes copied. Works while the buffer is still the
    /// NIC's — the message's bytes are final once its completion is written — and after the
    /// release, from the buffer the last completion returned (pass that event). A release
    /// that [`Endpoint::cq_read`] or [`Endpoint::cq_readerr`] set aside is not returned yet,
    /// so the buffer's messages still read with their own completions. Refused with
    /// `FI_EINVAL` for a completion that is not a multi-receive one, or whose buffer was
    /// released by an earlier completion already returned.
    pub fn multi_recv_read(&self, ev: &CqEvent, out: &mut [u8]) -> Result<usize, DriverError> {
        let Some(m) = ev.multi_recv else {
            return Err(DriverError::InvalidArgument(
                "not a multi-receive completion".into(),
            ));
        };
        let n = ev.len.min(out.len());
        let dst = &mut out[..n];
        if let Some(b) = ev.buffer.as_ref() {
            return Ok(b.read_at(m.offset, dst)?);
        }
        // The completion names its endpoint, then the posting (slot and sequence number, which
        // every endpoint counts alike).
        let held = self
            .rx
            .slots
            .get(usize::from(m.slot))
            .filter(|_| m.endpoint == self.fid)
            .and_then(Option::as_ref)
            .filter(|p| p.multi.is_some_and(|(seq, _)| seq == m.seq))
            .and_then(|p| p.buffer.as_ref());
        if let Some(b) = held {
            b.read_in_capacity(m.offset, dst)?;
            return Ok(n);
        }
        // Released by the completion set aside, not returned yet: the buffer is in it, each
        // message at its offset.
        let set_aside = self
            .held
            .as_ref()
            .filter(|h| {
                h.multi_recv
                    .is_some_and(|r| (r.endpoint, r.slot, r.seq) == (m.endpoint, m.slot, m.seq))
            })
            .and_then(|h| h.buffer.as_ref());
        match set_aside {
            Some(b) => Ok(b.read_at(m.offset, dst)?),
            None => Err(DriverError::InvalidArgument(
                "not a completion of a buffer this endpoint holds: a multi-receive buffer that \
                 was released is read from the buffer its last completion returned"
                    .into(),
            )),
        }
    }

    fn next_completion(&mut self) -> Result<Option<Completion>, DriverError> {
        let (region, slot) = (self.region()?, self.cq_head_slot());
        if !self.cq_written_at_head()? {
            // Caught up. The head is not reported here: a busy-polling reader finds the ring
            // empty after nearly every completion, and a register write each time would cost
            // it a write per completion (on vfio-user, a socket round trip). The NIC still
            // sees room: the head goes to it every quarter ring, so it never holds back for
            // more than a quarter, and before every arm (`arm_wakeup`).
            return Ok(None);
        }
        fence(Ordering::Acquire);
        let c: Completion = region.read_obj(slot)?;
        self.cq_head = self.cq_geometry.next(self.cq_head);
        if self.cq_head == 0 {
            self.cq_phase = !self.cq_phase;
        }
        // The head goes to the NIC every quarter ring (and before an arm), not per
        // completion: one register write frees many entries.
        self.cq_unreported += 1;
        if self.cq_unreported >= (self.cq_geometry.entries() / 4).max(1) {
            self.report_cq_head();
        }
        Ok(Some(c))
    }

    /// `CQ_DOORBELL` with the consumer index: the entries before it are free for the NIC.
    fn report_cq_head(&mut self) {
        self.cq_unreported = 0;
        self.nic.bar().write(
            CQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(self.handle)
                .with_index(self.cq_head),
        );
    }

    /// The event a completion reports; `None` for a successful inject.
    fn event(&mut self, c: &Completion) -> Result<Option<CqEvent>, DriverError> {
        let kind = CompletionKind::from_u8(c.kind).ok_or_else(|| {
            DriverError::AdminProtocol(format!("completion of unknown kind {}", c.kind))
        })?;
        if kind == CompletionKind::Recv && c.flags & COMPLETION_FLAG_MULTI_RECV != 0 {
            return self.multi_recv_event(c).map(Some);
        }
        let posted = match kind {
            CompletionKind::Send => self.tx.take(c.context.get()),
            CompletionKind::Recv => self.rx.take(c.context.get()),
            CompletionKind::TaggedRecv => self.trx.as_mut().and_then(|(ring, slab)| {
                let p = slab.take(c.context.get())?;
                ring.in_flight -= 1;
                Some(p)
            }),
        };
        let Some(posted) = posted else {
            return Err(DriverError::AdminProtocol(format!(
                "{kind:?} completion for slot {} that holds no descriptor",
                c.context.get()
            )));
        };
        let local = LocalStatus::from_u8(c.status);
        // On a ring the NIC reads eagerly (peer groups), the entry was free once read.
        if kind == CompletionKind::Recv && local == LocalStatus::Cancelled && self.max_group_id == 0
        {
            self.rx.withdraw(u64::from(posted.pos));
        }
        if posted.silent && local == LocalStatus::Ok {
            self.silent_done += 1;
            return Ok(None);
        }
        let mut buffer = posted.buffer;
        let mut len = c.len.get() as usize;
        // A probe's report delivered nothing: its `len` is the message's.
        let report = kind == CompletionKind::TaggedRecv && c.flags & COMPLETION_FLAG_REPORT != 0;
        // A receive's buffer holds what was delivered; a READ's only when it succeeded.
        let delivers = match posted.op {
            CqOp::Recv | CqOp::TaggedRecv => !report,
            CqOp::Read => local == LocalStatus::Ok,
            _ => false,
        };
        // Bytes the NIC says it delivered past the buffer's end, or past what a READ asked
        // for: none was placed there.
        let mut beyond = 0;
        if let (true, Some(b)) = (delivers, buffer.as_mut()) {
            let room = match posted.op {
                CqOp::Read => posted.len.min(b.capacity()),
                _ => b.capacity(),
            };
            beyond = len.saturating_sub(room);
            len -= beyond;
            b.set_len(len);
        }
        let return_code = ReturnCode::from_u8(c.return_code);
        let mut error = cq_error(c, local, return_code);
        // A receive whose length runs past its buffer is a truncated one: what the buffer
        // holds, and the rest counted as dropped (`fi_cq_err_entry.olen`).
        if beyond > 0 && matches!(posted.op, CqOp::Recv | CqOp::TaggedRecv) {
            truncated_by(&mut error, beyond);
        }
        // A cancelled tagged receive took no message: it reports the tag it was posted with.
        let tag = if kind == CompletionKind::TaggedRecv && local == LocalStatus::Cancelled {
            posted.tag
        } else {
            c.tag.get()
        };
        Ok(Some(CqEvent {
            kind,
            op: posted.op,
            context: posted.context,
            len,
            data: c.data.get(),
            src_addr: c.src_addr.get(),
            tag,
            group: c.group.get(),
            error,
            buffer,
            multi_recv: None,
            report,
        }))
    }

    /// The event of a multi-receive completion: the buffer stays in its slot until the
    /// completion that releases it.
    fn multi_recv_event(&mut self, c: &Completion) -> Result<CqEvent, DriverError> {
        let slot = c.context.get();
        let released = c.flags & COMPLETION_FLAG_BUFFER_RELEASED != 0;
        let has_message = c.flags & COMPLETION_FLAG_NO_MESSAGE == 0;
        let offset = c.buf_offset.get() as usize;
        let mut len = c.len.get() as usize;
        let protocol = || {
            DriverError::AdminProtocol(format!(
                "multi-receive completion for RX slot {slot} that holds no multi-receive buffer"
            ))
        };
        let posted = self.rx.get_mut(slot).ok_or_else(protocol)?;
        let Some((seq, used)) = posted.multi.as_mut() else {
            return Err(protocol());
        };
        // Bytes the NIC says it placed past the buffer's end: none was placed there.
        let mut beyond = 0;
        if has_message {
            if let Some(b) = posted.buffer.as_ref() {
                beyond = len.saturating_sub(b.capacity().saturating_sub(offset));
                len -= beyond;
            }
            *used = (*used).max(offset.saturating_add(len));
        }
        let (seq, used) = (*seq, *used);
        // The NIC read the buffer's entry when its first message came: its head is past it.
        posted.passed |= !released;
        let pos = posted.pos;
        let context = posted.context;
        let iova = posted
            .buffer
            .as_ref()
            .map_or(0, |b| b.iova().wrapping_add(offset as u64));
        let local = LocalStatus::from_u8(c.status);
        // A buffer withdrawn by RECV_CANCEL (interface 1.19): its entry, if the NIC had not
        // read it, is free only once the NIC's head has passed it.
        if released && local == LocalStatus::Cancelled {
            self.rx.withdraw(u64::from(pos));
        }
        let buffer = if released {
            let mut b = self.rx.take(slot).and_then(|p| p.buffer);
            if let Some(b) = b.as_mut() {
                b.set_len(used);
            }
            b
        } else {
            None
        };
        let return_code = ReturnCode::from_u8(c.return_code);
        let mut error = cq_error(c, local, return_code);
        if beyond > 0 {
            truncated_by(&mut error, beyond);
        }
        Ok(CqEvent {
            kind: CompletionKind::Recv,
            op: CqOp::Recv,
            context,
            len,
            data: c.data.get(),
            src_addr: c.src_addr.get(),
            tag: 0,
            group: c.group.get(),
            error,
            buffer,
            report: false,
            multi_recv: Some(MultiRecv {
                offset,
                released,
                has_message,
                iova,
                endpoint: self.fid,
                slot: slot as u16,
                seq,
            }),
        })
    }

    /// The endpoint's counters, as the NIC keeps them (COUNTERS_READ).
    pub fn counters(&self) -> Result<EndpointStats, DriverError> {
        Ok(EndpointStats::from(
            &self.nic.endpoint_counters(self.handle)?,
        ))
    }
}

/// The error of a completion, `None` for a success.
fn cq_error(
    c: &Completion,
    local: LocalStatus,
    return_code: Option<ReturnCode>,
) -> Option<CqError> {
    (local != LocalStatus::Ok).then(|| CqError {
        errno: completion_errno(local, return_code),
        local,
        return_code: return_code.filter(|rc| !rc.is_ok() && *rc != ReturnCode::Null),
        olen: if local == LocalStatus::Truncated {
            c.overflow.get() as usize
        } else {
            0
        },
    })
}

/// A receive whose completion said `beyond` bytes more than its buffer holds: a success is
/// truncated by them, a truncation counts them as dropped too (`olen`), and any other error
/// stays as it is.
fn truncated_by(error: &mut Option<CqError>, beyond: usize) {
    match error.as_mut() {
        None => {
            *error = Some(CqError {
                errno: FiErrno::FI_ETRUNC,
                local: LocalStatus::Truncated,
                return_code: None,
                olen: beyond,
            })
        }
        Some(e) if e.local == LocalStatus::Truncated => e.olen = e.olen.saturating_add(beyond),
        Some(_) => {}
    }
}

/// An endpoint's counters (see `uet_fwif::counters` for exactly what each counts): the
/// values COUNTERS_READ returns, as native integers.
pub use uet_fwif::counters::EndpointCounterValues as EndpointStats;

/// The rings of a creation that failed: a creation that timed out may still be run by the
/// device, on these rings, until the admin queue's undo destroys what it made, so their
/// memory is handed back to no one until the NIC's reset (`NicInner::quarantine`);
/// otherwise they are freed.
fn drop_rings_unless_timed_out(nic: &NicInner, e: &DriverError, set: RingSet) {
    if e.in_doubt() {
        tracing::error!(
            "endpoint or context creation in doubt ({e}); its ring memory is kept until the \
             NIC's reset"
        );
        nic.quarantine(set);
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if self.nic.in_forked_child() {
            // The parent's endpoint ([`crate::fork`]).
            return;
        }
        self.nic.forget_endpoint(self.handle);
        // ENDPOINT_DESTROY gives back the endpoint's grants of its AV's auth-key slots.
        let granted = !self.auth_slots.is_empty();
        let av = self._av.clone().filter(|_| granted);
        let _change = av.as_deref().map(AvTableHandle::grants_change);
        // The endpoint's DMA memory (rings, posted buffers) is freed once it is destroyed:
        // now, or, when the command goes ahead of the next one (behind a late context's undo,
        // or after the admin ring was full), when its completion comes; until then the device
        // may use it.
        let posted: Vec<Posted> = self.posted.drain(..).flatten().collect();
        let memory: crate::admin::Held = Box::new((self.rings.take(), posted));
        let cmd = Command::EndpointDestroy {
            endpoint: u32::from(self.handle),
        };
        if let Err((e, memory)) = self.nic.destroy_freeing(cmd, memory) {
            tracing::error!(
                handle = self.handle,
                "ENDPOINT_DESTROY failed: {e}; its DMA memory is kept until the NIC's reset"
            );
            if let Some(memory) = memory {
                self.nic.quarantine(memory);
            }
        }
        // ENDPOINT_DESTROY revokes the endpoint's auth-key grants. One that failed or went
        // unanswered may leave them on the NIC for now, but no endpoint of this process holds
        // them any more: an AUTH_KEY_REMOVE, which the NIC runs after this destroy, is refused
        // Busy by the NIC itself while a grant is left, and a count kept here would refuse
        // the key's removal for as long as the AV lives.
        for s in self.auth_slots.drain(..) {
            release_grant(&self.nic.auth_grants, s);
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if self.nic.in_forked_child() {
            // The parent's endpoint and connection ([`crate::fork`]): what is the child's
            // own (its copies of the memory) goes with the fields.
            return;
        }
        // fi_close of a connected FI_EP_MSG endpoint ends the connection: the peer gets
        // FI_SHUTDOWN, as after fi_shutdown.
        self.shut_down_at_close();
        // A connection's control channel is a context of this endpoint: it goes first.
        drop(self.cm.take());
        let mut posted = core::mem::take(&mut self.tx.slots);
        posted.append(&mut self.rx.slots);
        if let Some((_, slab)) = self.trx.as_mut() {
            posted.append(&mut slab.slots);
        }
        let teardown = Teardown {
            nic: self.nic.clone(),
            handle: self.handle,
            rings: self.rings.take(),
            posted,
            auth_slots: core::mem::take(&mut self.auth_slots),
            _av: self._av.take(),
            _domain_seat: self.domain_seat.take(),
        };
        match self.family.take() {
            // An endpoint goes with the last of its family: now when no context of it is
            // left, else when the last one is dropped (the NIC refuses it before).
            Some(family) => {
                *family
                    .endpoint
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(teardown);
            }
            // A context goes now; its endpoint's family (`owner`) is let go after it.
            None => drop(teardown),
        }
    }
}

/// Count one grant of auth-key slot `s` less in `grants` (`NicInner::auth_grants`), never
/// below 0: a slot AUTH_KEY_ADD hands out again starts at 0 (`NicAvTable::add_auth_key`),
/// and a grant of its last owner's endpoint given back after that must not wrap the count
/// to a number no key removal could ever see fall to 0.
fn release_grant(grants: &[std::sync::atomic::AtomicU32], s: u16) {
    if let Some(n) = grants.get(usize::from(s)) {
        let _ = n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
            Some(c.saturating_sub(1))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::sim_nic;
    use crate::pool::DmaPool;
    use std::sync::atomic::AtomicU32;
    use uet_sim::Fabric;

    /// An endpoint of its own NIC, bound to no AV, and a pool of 256-byte buffers for it.
    fn endpoint(fabric: &Fabric) -> (Endpoint, DmaPool) {
        let nic = sim_nic(fabric, "10.0.0.1");
        let ep = nic
            .endpoint(EndpointAttr::default(), None)
            .expect("endpoint");
        let pool = DmaPool::new(&nic, 256, 8).expect("pool");
        (ep, pool)
    }

    /// Write `c` at the completion ring's head as the NIC would: with the phase of this pass.
    fn forge(ep: &Endpoint, mut c: Completion) {
        c.phase = u8::from(ep.cq_phase);
        let region = ep.region().expect("rings");
        region
            .write_obj(ep.cq_head_slot(), &c)
            .expect("write completion");
    }

    /// A completion of `kind` for the descriptor posted with `context`.
    fn completion(kind: CompletionKind, context: u64) -> Completion {
        Completion {
            context: U64::new(context),
            kind: kind as u8,
            ..Completion::new_zeroed()
        }
    }

    /// A grant given back more often than it was counted (its slot counted afresh from 0 in
    /// between) leaves the count at 0, where a removal of the slot's key sees no endpoint;
    /// a slot outside the table is nothing to count.
    #[test]
    fn a_grant_given_back_once_too_often_leaves_the_count_at_zero() {
        let grants = [AtomicU32::new(1), AtomicU32::new(0)];
        release_grant(&grants, 0);
        release_grant(&grants, 0);
        release_grant(&grants, 1);
        release_grant(&grants, 7);
        let counts: Vec<u32> = grants.iter().map(|n| n.load(Ordering::Acquire)).collect();
        assert_eq!(counts, [0, 0]);
    }

    /// A receive the NIC completes as a success with more bytes than its buffer holds is
    /// reported truncated: the bytes the buffer holds, the rest as `olen`, never a success
    /// whose length runs past the buffer.
    #[test]
    fn a_receive_completion_longer_than_its_buffer_is_truncated() {
        let fabric = Fabric::new();
        let (mut ep, pool) = endpoint(&fabric);
        let buffer = pool.alloc().expect("buffer");
        let capacity = buffer.capacity();
        ep.post_recv(buffer, 7).expect("post");
        let mut c = completion(CompletionKind::Recv, 0);
        c.len = U32::new(10_000);
        forge(&ep, c);
        let ev = ep.poll().expect("poll").expect("a completion");
        assert_eq!(ev.context, 7);
        assert_eq!(ev.len, capacity, "the length is what the buffer holds");
        let error = ev.error.expect("truncated");
        assert_eq!(error.errno, FiErrno::FI_ETRUNC);
        assert_eq!(error.olen, 10_000 - capacity);
        let b = ev.buffer.expect("the buffer");
        assert_eq!(b.len(), capacity);
        assert_eq!(ep.in_flight(), (0, 0));
    }

    /// A tagged receive likewise; one the NIC already reported truncated counts the excess
    /// in `olen` too.
    #[test]
    fn a_tagged_receive_completion_longer_than_its_buffer_is_truncated() {
        let fabric = Fabric::new();
        let (mut ep, pool) = endpoint(&fabric);
        let buffer = pool.alloc().expect("buffer");
        let capacity = buffer.capacity();
        ep.post_trecv(buffer, 5, 0, 9).expect("post");
        let mut c = completion(CompletionKind::TaggedRecv, 0);
        c.len = U32::new(1000);
        c.status = LocalStatus::Truncated as u8;
        c.overflow = U32::new(24);
        forge(&ep, c);
        let ev = ep.poll().expect("poll").expect("a completion");
        assert_eq!((ev.context, ev.len), (9, capacity));
        let error = ev.error.expect("truncated");
        assert_eq!(error.errno, FiErrno::FI_ETRUNC);
        assert_eq!(error.olen, 1000 - capacity + 24);
        assert_eq!(ev.buffer.expect("the buffer").len(), capacity);
    }

    /// A message of a multi-receive buffer that the NIC says runs past the buffer's end is
    /// reported truncated to what the buffer holds from its offset, and reads as that much.
    #[test]
    fn a_multi_receive_message_past_the_buffers_end_is_truncated() {
        let fabric = Fabric::new();
        let (mut ep, pool) = endpoint(&fabric);
        let buffer = pool.alloc().expect("buffer");
        let capacity = buffer.capacity();
        ep.post_recv_multi(buffer, Some(0), 3).expect("post");
        let mut c = completion(CompletionKind::Recv, 0);
        c.flags = COMPLETION_FLAG_MULTI_RECV;
        c.buf_offset = U32::new(64);
        c.len = U32::new(1000);
        forge(&ep, c);
        let ev = ep.poll().expect("poll").expect("a completion");
        assert_eq!(
            ev.len,
            capacity - 64,
            "the bytes the buffer holds from the offset"
        );
        let error = ev.error.expect("truncated");
        assert_eq!(error.errno, FiErrno::FI_ETRUNC);
        assert_eq!(error.olen, 1000 - (capacity - 64));
        let mut out = vec![0u8; 1000];
        let n = ep.multi_recv_read(&ev, &mut out).expect("read");
        assert_eq!(n, capacity - 64);
        // The release returns the buffer, its length within it.
        let mut c = completion(CompletionKind::Recv, 0);
        c.flags = COMPLETION_FLAG_MULTI_RECV
            | COMPLETION_FLAG_BUFFER_RELEASED
            | COMPLETION_FLAG_NO_MESSAGE;
        c.buf_offset = U32::new(capacity as u32);
        forge(&ep, c);
        let ev = ep.poll().expect("poll").expect("the release");
        assert!(ev.error.is_none());
        assert_eq!(ev.buffer.expect("the buffer").len(), capacity);
    }

    /// A READ the NIC completes as a success with more bytes than it asked for returns its
    /// buffer holding only what was asked: the bytes after them were never read into it.
    #[test]
    fn a_read_completion_longer_than_the_read_returns_only_what_was_asked() {
        let fabric = Fabric::new();
        let (mut ep, pool) = endpoint(&fabric);
        let mut buffer = pool.alloc().expect("buffer");
        buffer.fill(&[0x5A; 256]).expect("fill");
        // The NIC completes it at once (no AV: an address error); the completion at the
        // head is replaced by a success that claims 200 bytes.
        ep.post_read(0, buffer, 16, 0, 1, 4)
            .map_err(|(e, _)| e)
            .expect("post");
        assert!(
            ep.cq_written_at_head().expect("ring"),
            "the NIC completed it"
        );
        let mut c = completion(CompletionKind::Send, 0);
        c.opcode = TxOpcode::Read as u8;
        c.len = U32::new(200);
        forge(&ep, c);
        let ev = ep.poll().expect("poll").expect("a completion");
        assert_eq!((ev.op, ev.context), (CqOp::Read, 4));
        assert!(ev.error.is_none());
        assert_eq!(ev.len, 16);
        assert_eq!(ev.buffer.expect("the buffer").len(), 16);
    }
}
