//! `fi_endpoint` and `struct fi_ops_msg`: an `FI_EP_RDM`, `FI_EP_DGRAM` or `FI_EP_MSG`
//! endpoint on the NIC ([`EpKind`], from the `fi_info`'s `ep_attr->type`), its messages
//! addressed by `fi_addr_t` through the bound AV, which the NIC translates, or on `FI_EP_MSG`
//! to the connected peer.
//!
//! * An `FI_EP_MSG` endpoint binds an EQ and CQs, never an AV (`-FI_EINVAL`); its sends go to
//!   its peer whatever `fi_addr_t` they name, and are `-FI_ENOTCONN` before it is connected
//!   and after `fi_shutdown` (its own or its peer's), as is `fi_shutdown` then. Once the
//!   connection is shut down the peer sends nothing more. On a NIC of host interface 1.20
//!   or later the endpoint names no peer any more from then on (before `fi_shutdown`
//!   returns; before the peer's `FI_SHUTDOWN` is posted): a message of the peer's that
//!   arrives after that (sent racing the shutdown, or overtaken by the peer's SHUTDOWN,
//!   which `fi_shutdown` sends without waiting for the sends in flight) is refused, and
//!   its send fails with `FI_EACCES` in the peer's CQ rather than completing for data
//!   nobody reads; one acknowledged before stays where it landed. On an older NIC such a
//!   message finds its receive withdrawn and waits on the NIC's unexpected list, as any
//!   message that arrives before its receive does, for a receive posted since, or when
//!   that list is full is retried by its sender, as every refused message is (below); on a
//!   NIC older than host interface 1.17 the sender gets `FI_ENORX`. The receives still
//!   posted are flushed,
//!   each an `FI_ECANCELED` error entry in the receive CQ (and an error on a bound receive
//!   counter), as fi_cm(3) lets `fi_shutdown` cancel them — before `fi_shutdown` returns, and
//!   after the peer's `FI_SHUTDOWN` at the next read of the CQ or counter (as is a receive
//!   posted after the shutdown). The peer's shutdown wakes whoever waits on them at once
//!   (`fi_cq_sread`, `fi_cntr_wait`, an `FI_WAIT_FD` descriptor after `fi_trywait`): the
//!   driver raises the endpoint's vector, as a completion would, and the read that follows
//!   flushes them.
//!   `fi_connect(ep, addr, param, len)` asks the listener at `addr` (its `fi_getname`: the
//!   32-byte address, or its string for `FI_ADDR_STR`) for a connection; `fi_accept(ep,
//!   param, len)` takes the request whose `FI_CONNREQ` `fi_info` opened the endpoint
//!   (`-FI_EINVAL` for one opened otherwise, or whose request is answered). Both need an EQ
//!   (`-FI_ENOEQ`), enable the endpoint if it is not, and are followed by `FI_CONNECTED`
//!   (or `FI_ECONNREFUSED`) on the EQ; a connection's data longer than the protocol carries
//!   is cut (fi_cm(3)). A request neither accepted nor rejected within
//!   `FI_UET_CONNECT_TIMEOUT` milliseconds ([`CONNECT_TIMEOUT_VAR`]; 5000 by default, 0 for
//!   no deadline) ends with an error entry of the endpoint's fid with `err = FI_ETIMEDOUT`,
//!   and the endpoint is left as a refused one is. `fi_connect` is called once in an endpoint's lifetime (fi_cm(3)):
//!   after one that started, whether accepted, refused or unreachable, another is
//!   `-FI_EOPBADSTATE` (a refused endpoint is closed and a new one connects); a call that
//!   returned an error started nothing and may be repeated. `fi_getpeer` gives the peer's
//!   address once connected. `fi_close` of
//!   a connected endpoint shuts its connection down (the peer gets `FI_SHUTDOWN`). On a NIC
//!   of host interface 1.20 or later a connected endpoint takes data from its peer only: an
//!   endpoint of another connection, or an `FI_EP_RDM` one, that sends to its address gets
//!   `FI_EACCES` in its CQ, and nothing lands in the endpoint's receives (on an older NIC it
//!   does, reported with `src_addr` `FI_ADDR_NOTAVAIL`). The
//!   connection calls of an `FI_EP_RDM` or `FI_EP_DGRAM` endpoint are `-FI_EOPNOTSUPP`;
//!   `fi_setname` is `-FI_ENOSYS` (the NIC assigns every address). One whose `fi_info` asks
//!   for an address (`src_addr`, as `fi_getinfo` gives it for `FI_SOURCE` with a node and
//!   service) gets it or is refused with `-FI_EADDRNOTAVAIL`, as a listener is: by
//!   `fi_endpoint` (`fi_scalable_ep`) at another fabric address than its NIC's, by
//!   `fi_enable` at a PIDonFEP other than the one the NIC assigned it (service 0 asks for
//!   none), the endpoint not enabled and nothing of it left on the NIC.
//!
//! * An `FI_EP_DGRAM` endpoint sends single-packet datagrams (UET's UUD): a send longer than
//!   the MTU is `-FI_EMSGSIZE`, a send completes once its packet is on the wire, and an
//!   untagged datagram that finds no receive (or any that finds no endpoint, or a full
//!   unexpected list) is dropped at the target, never reported to the sender; a tagged one
//!   that arrives before its receive waits on the NIC's unexpected list, as on `FI_EP_RDM`.
//!   `FI_DELIVERY_COMPLETE` and `FI_MATCH_COMPLETE` cannot be met
//!   without an acknowledgement: `-FI_EBADFLAGS` in a call's flags, `-FI_EINVAL` from
//!   `fi_endpoint` in the `fi_info`'s `tx_attr->op_flags`.
//!
//! * `fi_endpoint` refuses an `fi_info` asking for what `fi_getinfo` never answers, one
//!   edited since or made by hand (`-FI_EINVAL`, as `fi_tx_context` refuses a context's,
//!   nothing opened): capabilities the provider does not serve (`caps`, `tx_attr->caps`,
//!   `rx_attr->caps`; an endpoint takes none it would not honour, such as
//!   `FI_DIRECTED_RECV`, whose receives would take messages of any source) or that its
//!   type lacks (`FI_NAMED_RX_CTX` but on `FI_EP_RDM`; on `FI_EP_MSG`, which binds no AV,
//!   `FI_SOURCE`, `FI_SHARED_AV`, `FI_AV_USER_ID`); several or
//!   shared contexts (`ep_attr->tx_ctx_cnt`, `rx_ctx_cnt`: [`crate::sep`]); default flags
//!   (`tx_attr->op_flags`, `rx_attr->op_flags`) other than those `fi_getinfo` answers
//!   (`FI_MATCH_COMPLETE`, which a flagless `fi_tsend` does not meet); sizes beyond those
//!   `fi_getinfo` answers (`tx_attr->size`,
//!   `iov_limit`, `inject_size`, `rma_iov_limit`, `rx_attr->size`, `iov_limit`,
//!   `ep_attr->max_msg_size`, which for `FI_EP_DGRAM` is one packet); an `ep_attr->auth_key`
//!   other than the domain's JobID; an order (`msg_order`, `comp_order`,
//!   `max_order_*_size`) or a protocol other than UET (`ep_attr->protocol`,
//!   `protocol_version`): messages travel unordered; an `addr_format` other than
//!   `FI_FORMAT_UNSPEC` (the UET address) and `FI_ADDR_STR`.
//! * `fi_endpoint` makes the object; `fi_ep_bind` takes its AV (one, named or not; none on
//!   `FI_EP_MSG`),
//!   its CQs (`FI_TRANSMIT`, `FI_RECV`, optionally `FI_SELECTIVE_COMPLETION`), counters
//!   (`FI_SEND` or its alias `FI_TRANSMIT`, `FI_RECV`: [`crate::cntr`]; the RMA flags are
//!   `-FI_EBADFLAGS`) and an EQ;
//!   under `FI_SELECTIVE_COMPLETION` a call that takes no flags (`fi_send`, `fi_recv`, ...)
//!   reports its success when the `op_flags` of the `fi_info`'s `tx_attr` or `rx_attr` the
//!   endpoint was opened with hold `FI_COMPLETION`, as `fi_endpoint(3)` has it;
//!   `fi_enable` (`-FI_ENOAV` without an AV but on `FI_EP_MSG`, `-FI_ENOEQ` without an EQ
//!   on `FI_EP_MSG`, which reports its connection there, `-FI_ENOCQ` without a CQ
//!   for a direction the `fi_info`'s caps serve; a transfer of a direction they leave out is
//!   `-FI_EOPNOTSUPP`, as no CQ need report it) creates the endpoint on the NIC
//!   ([`uet_driver::Domain::endpoint`]), which gives it its address (`fi_getname`). Binding
//!   after `fi_enable` is `-FI_EOPBADSTATE`, and so is a data call before it.
//! * Messages go through DMA buffers of the endpoint's own: a small one ([`MSG_BUF_BYTES`])
//!   per ring entry, made at `fi_enable`, and for longer messages classes of larger ones,
//!   each class's buffers twice the size of the last, up to `ep_attr->max_msg_size` (the
//!   NIC's `CAP_MAX_MSG`, at most [`MAX_MSG_BYTES`]), [`LARGE_CLASS_BYTES`] of buffers per
//!   class, made when a message or receive first needs one of its size ([`DmaPoolSet`]). A
//!   send copies the application's buffer (so it may be reused at once, as for
//!   `FI_INJECT`) into the smallest buffer that holds it; a receive takes one as large as
//!   its iovecs (up to `max_msg_size`; never the last free one of a class of large buffers,
//!   which is left to a send), and the message is copied into the application's buffer
//!   when its completion is read. A message longer than the receive buffer is
//!   truncated: the completion is an `FI_ETRUNC` error with `olen` the bytes dropped. Sends
//!   longer than `max_msg_size` are `-FI_EMSGSIZE`, and so are an `fi_inject` and an
//!   `fi_sendmsg` or `fi_tsendmsg` with `FI_INJECT` longer than `tx_attr->inject_size`
//!   (fi_msg(3)), nothing posted; iovecs (up to [`IOV_LIMIT`]) are gathered and scattered.
//!   A message that arrives before its receive waits on the NIC's unexpected list, which
//!   holds 64 messages and 4 MiB per endpoint by default (`CAP_TAGGED`).
//! * A message its target refuses for want of a receive buffer (`RC_UNDELIVERABLE`: none
//!   posted and no room on the unexpected list) is retried, as fi_domain(3) has
//!   `FI_RM_ENABLED`, which `fi_getinfo` answers from host interface 1.17: its sender keeps
//!   it (the send does not complete) and posts it again as its CQ or counter is read, after
//!   a wait that doubles from 50 µs up to 16 ms, until a receive takes it (a thread in
//!   `fi_cq_sread` or `fi_cntr_wait` reads when the next try is due, and `fi_trywait` lets
//!   an application sleep on an `FI_WAIT_FD` descriptor, which polls readable then).
//!   `FI_UET_RNR_TIMEOUT`
//!   milliseconds ([`RETRY_TIMEOUT_VAR`]; unset or 0: no bound) bound the retries, after
//!   which the send completes `FI_ENORX`. An `fi_inject` is retried too: on such an
//!   endpoint it is sent from a buffer of the endpoint's, as a send, its success counted
//!   and never reported, its failure an error entry with no context. A datagram, which is
//!   never answered, is not retried; nor are messages on an older NIC (`FI_RM_DISABLED`),
//!   which complete `FI_ENORX`, and whose injects go inline in the NIC's descriptor.
//!   Messages travel unordered, so a retried message may arrive after later ones of its
//!   sender. A send waiting for its retry keeps its place in the transmit queue: with
//!   `tx_attr->size` sends outstanding, in flight or waiting, a send is `-FI_EAGAIN`, and
//!   the receives keep their buffers.
//! * With no buffer of the size or ring entry free a call is `-FI_EAGAIN`: read the CQ and
//!   retry.
//! * Remote CQ data travels with `fi_senddata`/`fi_injectdata`; a receive completion carries
//!   `FI_REMOTE_CQ_DATA` when the data is not 0 (the NIC's completion has no flag for it).
//! * `fi_close`: the operations the NIC completed already are taken from the ring first, as a
//!   read of a CQ or counter would: they reach the bound counters and CQs (a receive's
//!   message is copied into its buffer), so none is lost to the close. Then the endpoint
//!   leaves the NIC; operations still outstanding (receives still posted, a send the NIC has
//!   not completed) are dropped unreported, as fi_endpoint(3) has it: also the receives of a
//!   connection shut down that no read has flushed yet.
//!
//! * Tagged messages (`fi_tsend*`, `fi_tinject*`, `fi_trecv*`): the NIC matches them, 64 bits
//!   of tag with an ignore mask; a tagged message that arrives before its receive waits on
//!   the NIC's unexpected list (so does an untagged one, on a NIC of host interface 1.17 or
//!   later). Their completions carry `FI_TAGGED` and the message's tag. `fi_trecvmsg` takes
//!   fi_tagged(3)'s probes of that list (host interface 1.18; `-FI_ENOSYS` before): `FI_PEEK`
//!   completes with the oldest matching message's length, tag, data and source, `buf` NULL
//!   (no data is copied), or with the error `FI_ENOMSG`; `FI_PEEK | FI_CLAIM` also reserves
//!   the message for the `FI_CLAIM` receive given the same `struct fi_context` (the
//!   context is the claim; NULL is `-FI_EINVAL`); `FI_DISCARD` with `FI_PEEK` or `FI_CLAIM`
//!   drops it, its iovecs ignored (`-FI_EBADFLAGS` alone). A probe always completes, whatever
//!   `FI_SELECTIVE_COMPLETION` says, since its result is its completion; no counter counts
//!   it.
//!
//! * On a named AV the endpoint follows what other processes change in it: the NIC table
//!   catches up before each send and completion read ([`uet_av::named`]).
//!
//! * A context of a scalable endpoint ([`crate::sep`]) is an endpoint of this module whose
//!   state is the scalable endpoint's ring set of its index (shared with the other
//!   direction's context of that index): it binds its own direction's CQ and counter, no AV
//!   or EQ, serves its own direction's calls (the others are `-FI_EOPNOTSUPP`), binds until
//!   it is enabled, and carries transfers once it is: by its own `fi_enable` (which puts the
//!   scalable endpoint on the NIC if it is not yet) or by the scalable endpoint's.
//!
//! * `fi_cancel` withdraws a posted receive, untagged or tagged, by its `op_context` (host
//!   interface 1.14's RECV_CANCEL): it completes in the receive CQ as an `FI_ECANCELED`
//!   error entry (a tagged one with the tag it was posted with, `len` 0; a multi-receive
//!   buffer's with `FI_MULTI_RECV`). A multi-receive buffer a message is arriving into is
//!   withdrawn once that message is in (`fi_cancel` returns 0: the message completes, then
//!   the release), as fi_endpoint(3) lets a cancel complete later. A NIC older than host
//!   interface 1.19 does not withdraw a multi-receive buffer (`-FI_ENOENT`): it is released
//!   as messages fill it. Sends are not cancelled (`-FI_ENOENT`): they complete on their own.
//!
//! * Multi-receive buffers (fi_msg(3) `FI_MULTI_RECV`, a receive capability `fi_getinfo`
//!   answers): `fi_recvmsg` with the flag, or `fi_recv` and `fi_recvv` on an endpoint whose
//!   `rx_attr->op_flags` hold it, post one buffer (one iovec) for several untagged messages.
//!   The NIC places each whole at the next 64-byte aligned offset of an endpoint buffer of
//!   the application's buffer's size (up to `max_msg_size`: a larger one is used up to
//!   that size), and each completes on its own, `buf` pointing at its copy in the
//!   application's buffer; the buffer is released once less than `FI_OPT_MIN_MULTI_RECV`
//!   bytes are left after a message (`fi_setopt`, a `size_t`; one MTU by default) or when a
//!   message does not fit what is left, which then takes the next receive. The release is
//!   the completion with `FI_MULTI_RECV`: a message's, or one of its own (`len` 0,
//!   `FI_MULTI_RECV` alone), which is written even under `FI_SELECTIVE_COMPLETION` for a
//!   buffer posted without `FI_COMPLETION`, since it hands the buffer back. Tagged receives
//!   have no multi-receive form (fi_tagged(3)).
//!
//! Not served yet: RMA, atomics, endpoint options other than `FI_OPT_MIN_MULTI_RECV` and
//! `FI_OPT_CM_DATA_SIZE`.

use crate::abi::*;
use crate::av::UetAv;
use crate::cntr::UetCntr;
use crate::cq::{Completion, CompletionError, UetCq, NO_SOURCE};
use crate::domain::{domain_ref, UetDomain};
use crate::eq::EqLink;
use crate::info::{EpKind, FI_MATCH_COMPLETE, RELIABLE_ONLY_FLAGS};
use crate::pep::{
    address_in, cm_param, put_address, put_size_opt, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV,
};
use crate::{entry, null, object_ref, unsupported};
use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use uet_av::addr_str::parse_addr_str_with;
use uet_av::{system_resolver, AddrFormat};
use uet_av::{FiErrno, FiError};
use uet_driver::fork::MadeIn;
use uet_driver::pool::{DmaBuffer, DmaPoolSet};
use uet_driver::{CqEvent, CqOp, DriverError, Endpoint, TaggedProbe};
use uet_fwif::UetAddress;

/// Bytes of each of an endpoint's small message buffers, one per ring entry, made with the
/// endpoint: a message or receive of up to this size takes one.
pub const MSG_BUF_BYTES: usize = 16 * 1024;

/// The longest message a reliable endpoint carries (`ep_attr->max_msg_size`) when the NIC
/// takes longer ones (`CAP_MAX_MSG`, 1 MiB on the simulated NIC): a message travels through
/// one DMA buffer of the endpoint's, and a buffer class of this size holds at least
/// [`DmaPoolSet::MIN_LARGE_BUFFERS`].
pub const MAX_MSG_BYTES: usize = 16 << 20;

/// Bytes of DMA buffers in each class of an endpoint's large buffers ([`DmaPoolSet`]): a
/// class of 32 KiB buffers holds 128 of them, one of 1 MiB four. A class's memory is made
/// when a message or receive first needs a buffer of its size.
pub const LARGE_CLASS_BYTES: usize = 4 << 20;

/// Most iovecs of a vectored call (`tx_attr->iov_limit`, `rx_attr->iov_limit`).
pub const IOV_LIMIT: usize = 4;

/// Flags `fi_sendmsg` takes.
///
/// The completion levels (`FI_INJECT_COMPLETE`, `FI_TRANSMIT_COMPLETE`,
/// `FI_DELIVERY_COMPLETE`, `FI_MATCH_COMPLETE`) are all met: a send completes when the
/// target's response comes back, after the message has been placed in a receive buffer or
/// on the NIC's unexpected list (one that finds neither is retried until it is, or refused
/// `FI_ENORX` past `FI_UET_RNR_TIMEOUT`, or at once on a NIC older than host interface 1.17
/// for an untagged one with no receive posted).
/// `fi_tsendmsg` takes them but `FI_MATCH_COMPLETE` ([`TSENDMSG_FLAGS`]).
const SENDMSG_FLAGS: u64 = FI_COMPLETION
    | FI_REMOTE_CQ_DATA
    | FI_INJECT
    | FI_MORE
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_MATCH_COMPLETE;
/// Flags `fi_tsendmsg` takes: those of `fi_sendmsg` but `FI_MATCH_COMPLETE`, which a tagged
/// send cannot meet. A tagged message that arrives before its receive is held on the NIC's
/// unexpected list and answered at once, so its send completes before any receive matches it.
const TSENDMSG_FLAGS: u64 = SENDMSG_FLAGS & !FI_MATCH_COMPLETE;
/// `FI_INJECT_COMPLETE`.
pub(crate) const FI_INJECT_COMPLETE: u64 = 1 << 26;
/// `FI_TRANSMIT_COMPLETE`.
pub(crate) const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
/// `FI_DELIVERY_COMPLETE`.
pub(crate) const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
/// Flags `fi_recvmsg` takes. `FI_TRANSMIT_COMPLETE` (fi_msg(3): the completion may come as
/// soon as the provider has processed the message) is met by every receive, whose
/// completion comes once the message is in its buffer; `FI_MULTI_RECV` posts a
/// multi-receive buffer ([`recv_multi`]).
const RECVMSG_FLAGS: u64 = FI_COMPLETION | FI_MORE | FI_TRANSMIT_COMPLETE | FI_MULTI_RECV;
/// Flags `fi_trecvmsg` takes (fi_tagged(3) gives `FI_TRANSMIT_COMPLETE` to `fi_tsendmsg`
/// only). `FI_PEEK`, `FI_CLAIM` and `FI_DISCARD` need a NIC of host interface 1.18.
const TRECVMSG_FLAGS: u64 = FI_COMPLETION | FI_MORE | FI_PEEK | FI_CLAIM | FI_DISCARD;
/// `FI_MORE`: more calls follow (a hint).
const FI_MORE: u64 = uet_av::FI_MORE;

/// How a message matches its receive: in order (`fi_send`, `fi_recv`) or by match bits
/// (`fi_tsend`, `fi_trecv`: a tagged receive takes a message whose tag `t` satisfies
/// `(tag ^ t) & !ignore == 0`).
#[derive(Clone, Copy)]
enum Matching {
    Untagged,
    Tagged { tag: u64, ignore: u64 },
}

impl Matching {
    /// `FI_MSG` or `FI_TAGGED`, for a completion's flags.
    fn flag(self) -> u64 {
        match self {
            Matching::Untagged => FI_MSG,
            Matching::Tagged { .. } => FI_TAGGED,
        }
    }
}

/// An application's iovec list, `(base, len)` each, held inline: posting a message allocates
/// nothing.
#[derive(Clone, Copy, Default)]
struct IoList {
    parts: [(usize, usize); IOV_LIMIT],
    len: usize,
}

impl IoList {
    fn as_slice(&self) -> &[(usize, usize)] {
        &self.parts[..self.len]
    }
}

/// An operation in flight, by the token the NIC carries as its context.
#[derive(Clone, Copy)]
enum Posted {
    Send {
        context: u64,
        report: bool,
        matching: Matching,
        /// Where it goes, and its remote CQ data: what a retry posts again.
        dest: FiAddr,
        data: u64,
        /// Refused by its target for want of a receive buffer, and retried since
        /// ([`EpState::retry_refused`]): when first refused, and the wait before the next try.
        refused: Option<Refused>,
        /// An inject sent from a buffer ([`Inject::Silent`]): its success is counted, never
        /// reported.
        silent: bool,
    },
    Recv {
        context: u64,
        report: bool,
        matching: Matching,
        /// The application's buffers.
        iov: IoList,
        /// Withdrawn at the connection's end already ([`EpState::flush_receives`]).
        withdrawn: bool,
        /// A probe of the unexpected list (`FI_PEEK`, or `FI_CLAIM | FI_DISCARD`): its
        /// completion delivers nothing, and no counter counts it.
        probe: bool,
        /// The claim it makes (`FI_PEEK | FI_CLAIM`) or ends (`FI_CLAIM`, alone or with
        /// `FI_DISCARD`).
        claim: Option<Claim>,
        /// A multi-receive buffer (`FI_MULTI_RECV`): `iov` is its one buffer, each message
        /// completes at its offset, and the operation is held until the NIC releases it.
        multi: bool,
        /// A multi-receive buffer `fi_cancel` found a message arriving into: withdrawn once
        /// that message is in ([`EpState::withdraw_cancelled`]).
        cancelled: bool,
    },
    /// An operation of a context that has closed: its completion is read off the ring and
    /// reported nowhere, counted nowhere (a context opened again on its index gets none of
    /// it). `recv`: a receive, which may still be posted on the NIC, and how it matches;
    /// `claim`: the claim it still makes or ends when it completes.
    Orphan {
        recv: Option<Matching>,
        claim: Option<Claim>,
        /// The receive is a multi-receive buffer.
        multi: bool,
    },
}

/// A send its target refused for want of a receive buffer, which the endpoint retries.
#[derive(Clone, Copy)]
struct Refused {
    /// When the target first refused it.
    first: std::time::Instant,
    /// The wait before the next try, doubled at each refusal up to [`RETRY_BACKOFF_MAX`].
    backoff: std::time::Duration,
}

/// A refused send waiting to be posted again ([`EpState::retries`]).
struct Retry {
    /// The send's token: its [`Posted::Send`] stays held until it completes.
    token: u64,
    /// Its message, as the NIC returned it with the refusal.
    buffer: DmaBuffer,
    /// When it is posted again.
    due: std::time::Instant,
}

/// The first wait before a refused send is posted again.
const RETRY_BACKOFF_FIRST: std::time::Duration = std::time::Duration::from_micros(50);
/// The longest wait between two tries of a refused send: a receiver that posts its buffer
/// gets the message within about this much of a read of the sender's CQ or counter.
const RETRY_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_millis(16);

/// What a tagged receive does to a claim (fi_tagged(3) `FI_CLAIM`), which the ring set
/// follows in [`EpState::claims`].
#[derive(Clone, Copy)]
enum Claim {
    /// `FI_PEEK | FI_CLAIM`: its report marks the message found with the claim.
    Makes(u64),
    /// `FI_CLAIM`, alone or with `FI_DISCARD`: the message of the claim is taken or dropped
    /// (or none held it).
    Ends(u64),
}

/// A CQ binding: the CQ and whether only operations with `FI_COMPLETION` are reported.
#[derive(Clone, Copy)]
struct CqBinding {
    cq: *const UetCq,
    selective: bool,
}

/// What an endpoint holds, under its lock.
struct EpState {
    /// The NIC's endpoint, once enabled.
    driver: Option<Endpoint>,
    /// Its message buffers.
    pool: Option<DmaPoolSet>,
    /// Operations in flight: the NIC carries `index + 1` as an operation's context (0 is its
    /// inject completions'), so a completion finds its operation without a search.
    posted: Vec<Option<Posted>>,
    /// Free slots of `posted`.
    free: Vec<usize>,
    av: Option<*const UetAv>,
    tx_cq: Option<CqBinding>,
    rx_cq: Option<CqBinding>,
    /// The counters of its sends (`FI_SEND`) and receives (`FI_RECV`), which may be one.
    tx_cntr: Option<*const UetCntr>,
    rx_cntr: Option<*const UetCntr>,
    /// Its EQ: where an `FI_EP_MSG` endpoint reports its connection.
    eq: Option<EqLink>,
    /// Injects posted whose completion has not been read off the ring: the NIC's inject
    /// completions carry no token, so whose they are is told by when they were posted
    /// ([`EpShared::reclaim`]).
    injects: u64,
    /// An `FI_EP_MSG` endpoint: its receives have no source address to report (the peer is
    /// in the connection's own AV, not the application's).
    connected_kind: bool,
    /// Its receives report their source to `fi_cq_readfrom`: it was opened with the
    /// `FI_SOURCE` capability, without which fi_cq(3) has the source `FI_ADDR_NOTAVAIL`.
    sources: bool,
    /// A multi-receive buffer `fi_cancel` found a message arriving into waits to be withdrawn
    /// ([`EpState::withdraw_cancelled`]).
    cancels_due: bool,
    /// Claims the NIC holds for the receives of this ring set: `FI_PEEK | FI_CLAIM` probes
    /// reported, whose message no `FI_CLAIM` receive or discard has completed for yet. A
    /// receive context's close drops their messages ([`EpState::discard_claims`]).
    claims: Vec<u64>,
    /// Whether the NIC withdraws a multi-receive buffer (RECV_CANCEL, host interface 1.19).
    cancels_multi_recv: bool,
    /// `FI_OPT_MIN_MULTI_RECV` as `fi_setopt` set it: the space below which a multi-receive
    /// buffer posted from then on is released. `None`: the NIC endpoint's default, one MTU
    /// (and again once a scalable endpoint's receive context that set it closes).
    min_multi_recv: Option<usize>,
    /// Sends their target refused for want of a receive buffer (`RC_UNDELIVERABLE`: none
    /// posted and no room on its unexpected list), waiting to be posted again
    /// ([`EpState::retry_refused`]).
    retries: Vec<Retry>,
    /// Whether such sends are retried, and for how long (`Some(None)`: until they are
    /// taken): on a reliable endpoint of a NIC that gives `FI_RM_ENABLED` ([`retry_policy`]).
    retry: Option<Option<std::time::Duration>>,
    /// The most sends outstanding at once, on the transmit ring or waiting in
    /// [`EpState::retries`]: the ring's entries but one, what it holds in flight. A send
    /// waiting for its retry keeps its place, so that sends never take the message buffers
    /// the receives need.
    tx_room: usize,
}

/// What [`EpShared::arm`] made of an endpoint's ring for a waiting `fi_cq_sread`.
pub(crate) enum Arm {
    /// A completion is there: read again.
    Ready,
    /// Armed: this descriptor polls readable when a completion lands. With sends waiting for
    /// their retry ([`EpState::retries`]), when the first is due: a read then posts it again.
    Fd(std::os::fd::RawFd, Option<std::time::Instant>),
    /// Not enabled: nothing completes on it.
    Idle,
    /// No vector: read the ring again after a while.
    NoWait,
}

/// The part of an endpoint its CQs reach: they drain it when read.
pub struct EpShared {
    state: Mutex<EpState>,
    /// The process it was made in: in a process forked since, its close takes the lock only
    /// if it is free ([`EpShared::abandon`]).
    made_in: MadeIn,
    /// The AV, CQs and counters an endpoint of its own is bound to, as its state has them,
    /// for a close that cannot read the state ([`EpShared::abandon`]).
    bound: Bound,
}

/// What `fi_ep_bind` bound an endpoint of its own to, set with its state's fields under its
/// lock; null where nothing is bound. Read only by the close of an endpoint of its own.
#[derive(Default)]
struct Bound {
    av: AtomicPtr<UetAv>,
    /// Of its sends and its receives (which may be one CQ).
    cqs: [AtomicPtr<UetCq>; 2],
    /// Of its sends and its receives (which may be one counter).
    cntrs: [AtomicPtr<UetCntr>; 2],
}

// SAFETY: the raw pointers in the state name the AV, CQs and counters the endpoint is bound
// to, which cannot close while it is (they count the binding); they are only dereferenced to
// read those objects, whose own state is behind their locks or in atomics.
unsafe impl Send for EpShared {}
// SAFETY: as for `Send`; every access to the state takes the mutex.
unsafe impl Sync for EpShared {}

impl EpShared {
    fn lock(&self) -> MutexGuard<'_, EpState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The close of an endpoint of its own in a process forked while a thread of the parent
    /// held its lock, which no thread of the child will let go. The state stays as that
    /// thread left it (it may have been halfway through changing it), never read or dropped:
    /// its NIC endpoint and buffers are the parent's anyway. The endpoint is counted out of
    /// the CQs and counters it is bound to ([`Bound`]), so that their closes in the child
    /// succeed; an EQ it is bound to stays bound (its `fi_close` is `-FI_EBUSY`), its binding
    /// being in the state. Returns the AV it is bound to, for the caller to count it out.
    fn abandon(self: &Arc<Self>) -> Option<*const UetAv> {
        // Never dropped: the CQs' lists may hold it until they close.
        std::mem::forget(Arc::clone(self));
        fn take<T>(p: &AtomicPtr<T>) -> *mut T {
            p.swap(core::ptr::null_mut(), Ordering::AcqRel)
        }
        for cq in self.bound.cqs.iter().map(take) {
            // SAFETY: a bound CQ stays open while the endpoint is bound to it.
            if let Some(cq) = unsafe { cq.as_ref() } {
                cq.detach(self, false);
            }
        }
        for cntr in self.bound.cntrs.iter().map(take) {
            // SAFETY: a bound counter stays open while the endpoint is bound to it.
            if let Some(cntr) = unsafe { cntr.as_ref() } {
                cntr.detach(self, false);
            }
        }
        let av = take(&self.bound.av);
        (!av.is_null()).then_some(av.cast_const())
    }

    /// A state not enabled and bound to nothing; `connected_kind` for an `FI_EP_MSG`
    /// endpoint, `sources` for one whose receives report their source (`FI_SOURCE`).
    fn new(connected_kind: bool, sources: bool) -> EpShared {
        EpShared {
            state: Mutex::new(EpState {
                driver: None,
                pool: None,
                posted: Vec::new(),
                free: Vec::new(),
                av: None,
                tx_cq: None,
                rx_cq: None,
                tx_cntr: None,
                rx_cntr: None,
                eq: None,
                injects: 0,
                connected_kind,
                sources: sources && !connected_kind,
                cancels_due: false,
                claims: Vec::new(),
                min_multi_recv: None,
                cancels_multi_recv: false,
                retries: Vec::new(),
                retry: None,
                tx_room: 0,
            }),
            made_in: MadeIn::here(),
            bound: Bound::default(),
        }
    }

    /// A ring set of a scalable endpoint ([`crate::sep`]): the state its transmit and
    /// receive context of one index share; `sources` when its receives report their source
    /// (the scalable endpoint's `FI_SOURCE`).
    pub(crate) fn lane(sources: bool) -> Arc<EpShared> {
        Arc::new(EpShared::new(false, sources))
    }

    /// Whether its receives report their source to `fi_cq_readfrom` (a receive context
    /// opened with or without `FI_SOURCE`).
    pub(crate) fn report_sources(&self, sources: bool) {
        let mut st = self.lock();
        st.sources = sources && !st.connected_kind;
    }

    /// The NIC address of its ring set, once enabled.
    pub(crate) fn address(&self) -> Option<uet_fwif::UetAddress> {
        self.lock().driver.as_ref().map(|d| *d.address())
    }

    /// Wake the threads waiting on its CQs and counters (a context of its ring set enabled
    /// after they armed it).
    pub(crate) fn wake(&self) {
        self.lock().wake_bound();
    }

    /// Make the ring set ready for a new context of a direction (`tx`: transmit) whose
    /// previous context closed ([`crate::sep`]'s `fi_tx_context`, `fi_rx_context`): what
    /// the NIC completed is read off the ring (the old context's operations reported
    /// nowhere), and the old context's receives still posted (its close withdrew the others)
    /// are withdrawn from the NIC (RECV_CANCEL), so that no message for the new context lands
    /// in one. While one is still there no context opens: `FI_EBUSY` when a message is
    /// arriving into it (it completes shortly: try again), `FI_EOPBADSTATE` when the NIC
    /// cannot cancel receives (host interface older than 1.14), or a multi-receive buffer is
    /// among them and the NIC cannot withdraw one (older than 1.19), which retrying does not
    /// change: the index opens again once messages have taken them.
    pub(crate) fn reclaim(&self, tx: bool, call: &str) -> Result<(), FiError> {
        let mut st = self.lock();
        st.drain();
        if tx {
            // The old context's injects completed since it closed were read off the ring
            // with no counter or CQ to reach. One still in flight would complete on the new
            // context's: a success counted on its counter, a failure reported on its CQ
            // (with no context), for nothing tells its completion from the new context's.
            if st.injects > 0 {
                return Err(FiError::new(
                    FiErrno::FI_EBUSY,
                    format!(
                        "{call}: {} inject(s) of the closed transmit context are still in \
                         flight on the NIC, which completes them shortly: try again",
                        st.injects
                    ),
                ));
            }
            return Ok(());
        }
        // Claims the closed context's probes made since its close (their reports were read
        // just now) leave with their messages too.
        st.discard_claims();
        // Withdrawn at the close already, but for one a message was arriving into (it may
        // have completed since), or what a full completion ring held back.
        let withdrawn = st.cancel_orphan_receives();
        let left = st.orphan_receives().len();
        if left == 0 {
            return Ok(());
        }
        // Multi-receive buffers a NIC older than 1.19 cannot withdraw: retrying changes
        // nothing either.
        let multi_left = st.posted.iter().flatten().any(|op| {
            matches!(
                op,
                Posted::Orphan {
                    recv: Some(_),
                    multi: true,
                    ..
                }
            )
        });
        if multi_left && !st.cancels_multi_recv {
            return Err(FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!(
                    "{call}: a multi-receive buffer of the closed receive context is still \
                     posted on the NIC, which cannot withdraw one (host interface older than \
                     1.{}); the index opens again once messages have filled it",
                    uet_driver::nic::MULTI_RECV_CANCEL_INTERFACE_MINOR
                ),
            ));
        }
        match withdrawn {
            // Retrying changes nothing: only messages taking the receives do.
            Err(e) if e.errno() == FiErrno::FI_ENOSYS => Err(FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!(
                    "{call}: {left} receive(s) of the closed receive context are still posted \
                     on the NIC, which cannot withdraw them ({e}); the index opens again once \
                     messages have taken them"
                ),
            )),
            _ => Err(FiError::new(
                FiErrno::FI_EBUSY,
                format!(
                    "{call}: {left} receive(s) of the closed receive context are still posted \
                     on the NIC: a message is arriving into one, or its completion ring stays \
                     full; try again"
                ),
            )),
        }
    }

    /// Whether a CQ is bound for the direction (`tx`: sends, else receives).
    pub(crate) fn has_cq(&self, tx: bool) -> bool {
        let st = self.lock();
        if tx {
            st.tx_cq.is_some()
        } else {
            st.rx_cq.is_some()
        }
    }

    /// Give the state its NIC ring set and message buffers (the first `fi_enable` of a
    /// scalable endpoint or of one of its contexts, which makes the NIC endpoint), and wake
    /// the threads waiting on its CQs and counters, which armed only the rings enabled then.
    /// `tx_entries`: the entries of its transmit ring (0 for a ring set without one).
    pub(crate) fn install(
        &self,
        driver: Endpoint,
        pool: DmaPoolSet,
        retry: Option<Option<std::time::Duration>>,
        tx_entries: usize,
    ) {
        let mut st = self.lock();
        st.driver = Some(driver);
        st.pool = Some(pool);
        st.retry = retry;
        st.cancels_multi_recv = st.driver.as_ref().is_some_and(Endpoint::cancels_multi_recv);
        st.tx_room = tx_entries.saturating_sub(1);
        st.wake_bound();
    }

    /// Take the NIC ring set and buffers back (a scalable endpoint's `fi_close`): receives
    /// still posted are dropped unreported.
    pub(crate) fn uninstall(&self) -> Option<Endpoint> {
        let mut st = self.lock();
        let driver = st.driver.take();
        st.retries.clear();
        drop(st.pool.take());
        st.posted.clear();
        st.free.clear();
        st.injects = 0;
        // The endpoint leaves the NIC with its unexpected list, claimed messages included.
        st.claims.clear();
        driver
    }

    /// Whether the endpoint's NIC will write no more completions: it stopped with a fatal
    /// error, or its function was reset ([`uet_driver::Endpoint::device_stopped`]); `false`
    /// for an endpoint not enabled.
    pub(crate) fn device_stopped(&self) -> bool {
        self.lock()
            .driver
            .as_ref()
            .is_some_and(|d| d.device_stopped())
    }

    /// Have the endpoint's NIC write `eventfd` once if it stops (a fatal error, or its
    /// function reset): [`uet_driver::Endpoint::wake_when_stopped`]. Nothing for an endpoint
    /// not enabled.
    pub(crate) fn wake_when_stopped(&self, eventfd: &Arc<vmm_sys_util::eventfd::EventFd>) {
        if let Some(d) = self.lock().driver.as_ref() {
            d.wake_when_stopped(eventfd);
        }
    }

    /// Make the endpoint's completion ring wake a waiter: [`Arm::Ready`] when a completion is
    /// there to read (it came after the last read) or a refused send's retry is due,
    /// [`Arm::Fd`] with the descriptor of its MSI-X vector, armed, which polls readable when
    /// one lands ([`Endpoint::cq_trywait`]), and the instant the next retry is due if one
    /// waits, [`Arm::Idle`] for an endpoint not enabled (nothing can complete on it), and
    /// [`Arm::NoWait`] when the endpoint has no vector (a NIC or backend without
    /// interrupts, every vector held): the waiter must read the ring again itself.
    ///
    /// The descriptor is the eventfd of one of the NIC's vectors, open as long as the NIC
    /// (which the CQ's domain holds); the vector may go to another endpoint once this one
    /// closes, which at worst wakes the waiter for nothing.
    pub(crate) fn arm(&self) -> Arm {
        use std::os::fd::AsRawFd;
        let mut st = self.lock();
        let Some(driver) = st.driver.as_mut() else {
            return Arm::Idle;
        };
        let armed = driver.cq_trywait();
        // Receives to flush: the read that follows does it. Looked at once the ring is armed
        // (which clears the vector): the driver marks a connection the peer shut down, then
        // raises the endpoint's vector, so a shutdown this look misses wakes the waiter.
        if st.flush_due() {
            return Arm::Ready;
        }
        // A refused send is posted again by a read: the waiter reads when the first is due
        // (at once when it is), rather than sleep until a completion that only the retry
        // brings.
        let due = st.retries.iter().map(|r| r.due).min();
        if due.is_some_and(|d| d <= std::time::Instant::now()) {
            return Arm::Ready;
        }
        let Some(driver) = st.driver.as_mut() else {
            return Arm::Idle;
        };
        match armed {
            Ok(()) => match driver.cq_wait_fd() {
                Ok(fd) => Arm::Fd(fd.as_raw_fd(), due),
                Err(_) => Arm::NoWait,
            },
            Err(FiErrno::FI_EAGAIN) => Arm::Ready,
            Err(_) => Arm::NoWait,
        }
    }

    /// Read every completion of the endpoint's ring, count it in its direction's counter and
    /// queue it in its direction's CQ. The CQs and counters are reached under the endpoint's
    /// lock, which its close takes to unbind them, so none can close under this call (lock
    /// order: endpoint, then CQ; a count takes no lock).
    ///
    /// A completion queued in a CQ whose waiter has armed the ring wakes that waiter
    /// ([`UetCq::push`]): it is out of the ring, and the next arm of the ring clears the
    /// vector that announced it.
    ///
    /// An `FI_EP_MSG` endpoint whose peer shut the connection down flushes its posted
    /// receives first ([`EpState::flush_receives`]).
    pub(crate) fn drain(&self) {
        self.lock().drain();
    }
}

/// How many times a receive's withdrawal is tried while the completion ring is full (each
/// try after the first reads the ring, which makes room).
const FLUSH_TRIES: usize = 4;

impl EpState {
    /// [`EpShared::drain`], under the endpoint's lock the caller holds: a connection shut
    /// down flushes its posted receives first ([`EpState::flush_receives`]), then the ring
    /// is read ([`EpState::drain_ring`]).
    fn drain(&mut self) {
        if self.flush_due() {
            self.flush_receives();
        }
        self.drain_ring();
        self.withdraw_cancelled();
        self.post_retries();
    }

    /// Withdraw the multi-receive buffers `fi_cancel` found a message arriving into
    /// ([`EpState::cancel`]), and those of closed receive contexts a message was arriving
    /// into at the close ([`EpState::cancel_orphan_receives`]), which stay posted once that
    /// message is in: each completes as its `FI_ECANCELED` release (reported nowhere for a
    /// closed context's), read off the ring here. One another message is arriving into, or
    /// that the full completion ring holds back, is tried again at the next read; one the
    /// NIC released meanwhile (a message filled it) has completed on its own.
    fn withdraw_cancelled(&mut self) {
        if !self.cancels_due {
            return;
        }
        let mut left = false;
        let mut withdrawn = false;
        for (slot, op) in self.posted.iter_mut().enumerate() {
            let cancelled = match op {
                Some(Posted::Recv {
                    cancelled: cancelled @ true,
                    ..
                }) => Some(cancelled),
                Some(Posted::Orphan {
                    recv: Some(_),
                    multi: true,
                    ..
                }) => None,
                _ => continue,
            };
            let Some(driver) = self.driver.as_mut() else {
                return;
            };
            match driver.cancel_recv(slot as u64 + 1).map_err(|e| e.errno()) {
                Err(FiErrno::FI_EBUSY | FiErrno::FI_EAGAIN) => left = true,
                r => {
                    withdrawn |= r.is_ok();
                    if let Some(cancelled) = cancelled {
                        *cancelled = false;
                    }
                }
            }
        }
        self.cancels_due = left;
        if withdrawn {
            self.drain_ring();
        }
    }

    /// Keep `ev` for another try when it is a send its target refused for want of a receive
    /// buffer (`RC_UNDELIVERABLE`) and the endpoint retries such sends ([`EpState::retry`])
    /// within their bound: its message waits in [`EpState::retries`], posted again after a
    /// wait that doubles at each refusal (from [`RETRY_BACKOFF_FIRST`] up to
    /// [`RETRY_BACKOFF_MAX`]), and its operation stays held. `false`: `ev` completes.
    fn retry_refused(&mut self, ev: &mut CqEvent) -> bool {
        let Some(bound) = self.retry else {
            return false;
        };
        let refused = ev
            .error
            .as_ref()
            .is_some_and(|e| e.return_code == Some(uet_fwif::ReturnCode::Undeliverable));
        if !refused || ev.buffer.is_none() {
            return false;
        }
        let slot = ev
            .context
            .checked_sub(1)
            .and_then(|s| usize::try_from(s).ok());
        let Some(Some(Posted::Send { refused, .. })) = slot.and_then(|s| self.posted.get_mut(s))
        else {
            return false;
        };
        let now = std::time::Instant::now();
        let mut state = refused.unwrap_or(Refused {
            first: now,
            backoff: RETRY_BACKOFF_FIRST,
        });
        if bound.is_some_and(|b| now.duration_since(state.first) >= b) {
            return false;
        }
        let Some(buffer) = ev.buffer.take() else {
            return false;
        };
        if refused.is_none() {
            tracing::debug!(
                token = ev.context,
                "a send found no receive buffer at its target: retried"
            );
        }
        let due = now + state.backoff;
        state.backoff = state.backoff.saturating_mul(2).min(RETRY_BACKOFF_MAX);
        *refused = Some(state);
        self.retries.push(Retry {
            token: ev.context,
            buffer,
            due,
        });
        true
    }

    /// Drop the refused sends waiting for a retry ([`EpState::retries`]) whose transmit
    /// context closed (their operations [`Posted::Orphan`]): discarded unreported, as every
    /// operation outstanding at a close is (fi_endpoint(3)), and never posted again.
    fn discard_orphaned_retries(&mut self) {
        let mut i = 0;
        while i < self.retries.len() {
            if matches!(self.peek(self.retries[i].token), Some(Posted::Send { .. })) {
                i += 1;
                continue;
            }
            let Retry { token, .. } = self.retries.swap_remove(i);
            self.take(token);
        }
    }

    /// Post again the refused sends whose wait is over ([`EpState::retry_refused`]). One the
    /// transmit ring has no room for is tried again after the first wait; one the driver
    /// refuses (the connection shut down, say) completes with that error.
    fn post_retries(&mut self) {
        if self.retries.is_empty() {
            return;
        }
        let now = std::time::Instant::now();
        let mut i = 0;
        while i < self.retries.len() {
            if self.retries[i].due > now {
                i += 1;
                continue;
            }
            let Retry { token, buffer, .. } = self.retries.swap_remove(i);
            let Some(Posted::Send {
                dest,
                data,
                matching,
                ..
            }) = self.peek(token)
            else {
                // Its context closed since: the message goes nowhere, and so does its
                // operation.
                self.take(token);
                continue;
            };
            let Some(driver) = self.driver.as_mut() else {
                return;
            };
            let posted = match matching {
                Matching::Untagged => driver.post_send(dest, buffer, token, data),
                Matching::Tagged { tag, .. } => driver.post_tsend(dest, buffer, tag, token, data),
            };
            match posted {
                Ok(()) => {}
                Err((e, buffer)) if e.errno() == FiErrno::FI_EAGAIN => {
                    // Tried again shortly, with every other one due now: the ring has room
                    // once its completions are read, and a retry left due would have the
                    // waiters read again at once, and again, while it stays full.
                    let later = now + RETRY_BACKOFF_FIRST;
                    for r in self.retries.iter_mut().filter(|r| r.due <= now) {
                        r.due = later;
                    }
                    self.retries.push(Retry {
                        token,
                        buffer,
                        due: later,
                    });
                    return;
                }
                Err((e, buffer)) => {
                    tracing::debug!(token, error = %e, "a refused send not posted again");
                    let ev = CqEvent {
                        kind: uet_fwif::datapath::CompletionKind::Send,
                        op: if matches!(matching, Matching::Tagged { .. }) {
                            CqOp::TaggedSend
                        } else {
                            CqOp::Send
                        },
                        context: token,
                        len: 0,
                        data: 0,
                        src_addr: NO_SOURCE,
                        tag: 0,
                        group: 0,
                        error: Some(uet_driver::CqError {
                            errno: e.errno(),
                            local: uet_fwif::LocalStatus::Remote,
                            return_code: Some(uet_fwif::ReturnCode::Undeliverable),
                            olen: 0,
                        }),
                        buffer: Some(buffer),
                        multi_recv: None,
                        report: false,
                    };
                    // Completed with the error: the driver refused it, so another try
                    // would be refused too.
                    if let Some((cq, c)) = self.finish(ev) {
                        // SAFETY: a bound CQ cannot close while the endpoint is bound to it,
                        // and the binding is only dropped under the endpoint's lock, which
                        // the caller holds.
                        unsafe { &*cq }.push(c);
                    }
                }
            }
        }
    }

    /// Read every completion of the ring into the bound CQs and counters, under the
    /// endpoint's lock the caller holds.
    fn drain_ring(&mut self) {
        while let Some(driver) = self.driver.as_mut() {
            let ev = match driver.poll() {
                Ok(Some(ev)) => ev,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "uet provider: reading an endpoint's completions");
                    break;
                }
            };
            if let Some((cq, c)) = self.complete(ev) {
                // SAFETY: a bound CQ cannot close while the endpoint is bound to it, and the
                // binding is only dropped under the endpoint's lock, which the caller holds.
                unsafe { &*cq }.push(c);
            }
        }
        // Successful injects make no event; their counter counts them all the same.
        if let Some(driver) = self.driver.as_mut() {
            let n = driver.take_silent_completions();
            self.injects = self.injects.saturating_sub(n);
            if let (Some(cntr), true) = (self.tx_cntr, n > 0) {
                // SAFETY: as for the CQ above: bound, so open, while the lock is held.
                unsafe { &*cntr }.count(true, n);
            }
        }
    }

    /// Whether the endpoint's connection is shut down (its own `fi_shutdown`, or the peer's
    /// `FI_SHUTDOWN`) while a receive it posted is not withdrawn yet.
    fn flush_due(&self) -> bool {
        self.connected_kind
            && self.driver.as_ref().is_some_and(Endpoint::is_shut_down)
            && self.posted.iter().flatten().any(|op| {
                matches!(
                    op,
                    Posted::Recv {
                        withdrawn: false,
                        ..
                    }
                )
            })
    }

    /// The connection is shut down: the peer sends nothing more, and every receive still
    /// posted is withdrawn on the NIC (RECV_CANCEL, as `fi_cancel` does). Each completes in
    /// the receive CQ as an `FI_ECANCELED` error entry (its context, its buffer untouched)
    /// and counts as an error on a bound receive counter, as fi_cm(3) has it for
    /// `fi_shutdown`; the ring is read before this returns, so the entries are in the CQ.
    /// A receive a message is arriving into completes on its own. On a NIC without
    /// RECV_CANCEL (older than host interface 1.14) the receives stay posted.
    fn flush_receives(&mut self) {
        let pending: Vec<(u64, Matching)> = self
            .posted
            .iter_mut()
            .enumerate()
            .filter_map(|(slot, op)| match op {
                Some(Posted::Recv {
                    matching,
                    withdrawn,
                    ..
                }) if !*withdrawn => {
                    *withdrawn = true;
                    Some((slot as u64 + 1, *matching))
                }
                _ => None,
            })
            .collect();
        'receives: for (token, matching) in pending {
            for _ in 0..FLUSH_TRIES {
                let Some(driver) = self.driver.as_mut() else {
                    return;
                };
                let withdrawn = match matching {
                    Matching::Untagged => driver.cancel_recv(token),
                    Matching::Tagged { .. } => driver.cancel_trecv(token),
                };
                match withdrawn.map_err(|e| (e.errno(), e)) {
                    Ok(()) => continue 'receives,
                    // The completion ring is full: its completions go to the CQs first.
                    Err((FiErrno::FI_EAGAIN, _)) => self.drain_ring(),
                    Err((FiErrno::FI_ENOSYS, e)) => {
                        tracing::debug!(error = %e, "receives left posted at shutdown");
                        break 'receives;
                    }
                    // Taken by a message, or completed: its completion is in the ring.
                    Err((_, e)) => {
                        tracing::debug!(token, error = %e, "receive not withdrawn at shutdown");
                        continue 'receives;
                    }
                }
            }
            tracing::warn!(
                token,
                "receive not withdrawn at shutdown: the completion ring stays full"
            );
        }
        self.drain_ring();
    }

    /// Wake a thread asleep on a CQ (`fi_cq_sread`, or an `FI_WAIT_FD` descriptor after
    /// `fi_trywait`) or counter (`fi_cntr_wait`) of the state: it armed only the rings
    /// enabled then, and arms this one too when it wakes, or its completions would not wake
    /// it.
    fn wake_bound(&self) {
        for b in [self.tx_cq, self.rx_cq].into_iter().flatten() {
            // SAFETY: a bound CQ stays open while the endpoint is bound to it, and the
            // binding is only dropped under the endpoint's lock, held by the caller.
            unsafe { &*b.cq }.wake_waiters();
        }
        for c in [self.tx_cntr, self.rx_cntr].into_iter().flatten() {
            // SAFETY: as for the CQs: bound, so open, under the endpoint's lock.
            unsafe { &*c }.wake_waiters();
        }
    }

    /// A refused send now waits for a retry, which only a read of the endpoint posts: a
    /// waiter armed on a CQ or counter of the endpoint (a thread in `fi_cq_sread` or
    /// `fi_cntr_wait`, an application asleep on an `FI_WAIT_FD` descriptor or an
    /// `FI_WAIT_MUTEX_COND` condition after `fi_trywait`) wakes and arms again, now with the
    /// retry's due time ([`EpShared::arm`] gives it to a waiter of either direction, whose
    /// reply may wait on the send). The refusal, taken off the ring by this drain, reaches
    /// it otherwise through nothing: the vector that announced it may have been cleared by
    /// the arm of another object of the endpoint.
    fn wake_for_retry(&self) {
        for b in [self.tx_cq, self.rx_cq].into_iter().flatten() {
            // SAFETY: a bound CQ stays open while the endpoint is bound to it, and the
            // binding is only dropped under the endpoint's lock, held by the caller.
            unsafe { &*b.cq }.wake_armed();
        }
        for c in [self.tx_cntr, self.rx_cntr].into_iter().flatten() {
            // SAFETY: as for the CQs: bound, so open, under the endpoint's lock.
            unsafe { &*c }.wake_armed();
        }
    }

    /// The completion of `ev` and the CQ it goes to, or `None` when it is not reported (or
    /// is a refused send kept for another try, [`EpState::retry_refused`]).
    fn complete(&mut self, mut ev: CqEvent) -> Option<(*const UetCq, Completion)> {
        if self.retry_refused(&mut ev) {
            self.wake_for_retry();
            return None;
        }
        self.finish(ev)
    }

    /// The completion of `ev`, which is not tried again, and the CQ it goes to, or `None`
    /// when it is not reported.
    fn finish(&mut self, mut ev: CqEvent) -> Option<(*const UetCq, Completion)> {
        // A multi-receive buffer's operation is held until its last completion.
        let release = ev.multi_recv.map(|m| m.released);
        let found = if release == Some(false) {
            // A multi-receive buffer a message was arriving into when the connection's end
            // withdrew its receives stayed posted: with that message in, the next read
            // withdraws it ([`EpState::flush_due`]).
            let slot = ev
                .context
                .checked_sub(1)
                .and_then(|s| usize::try_from(s).ok());
            if let Some(Some(Posted::Recv { withdrawn, .. })) =
                slot.and_then(|s| self.posted.get_mut(s))
            {
                *withdrawn = false;
            }
            self.peek(ev.context)
        } else {
            self.take(ev.context)
        };
        let posted = match found {
            // Its buffer, if any, goes back to the pool with the event. A claim its report
            // made is held until the ring set drops it.
            Some(Posted::Orphan { claim, .. }) => {
                self.follow_claim(claim, ev.report);
                return None;
            }
            Some(posted) => posted,
            // A failed inject: the NIC reports it with context 0, which no posted operation
            // has (tokens start at 1), and it is reported as every failed operation is,
            // with no context (fi_cq(3)).
            None if ev.context == 0
                && matches!(ev.op, CqOp::Send | CqOp::TaggedSend)
                && ev.error.is_some() =>
            {
                self.injects = self.injects.saturating_sub(1);
                Posted::Send {
                    context: 0,
                    report: false,
                    matching: if ev.op == CqOp::TaggedSend {
                        tagged(ev.tag)
                    } else {
                        Matching::Untagged
                    },
                    dest: 0,
                    data: 0,
                    refused: None,
                    silent: false,
                }
            }
            None => return None,
        };
        let mut counted = true;
        let mut quiet = false;
        let (binding, cntr, context, report, flags, iov) = match posted {
            Posted::Send {
                context,
                report,
                matching,
                silent,
                ..
            } => {
                quiet = silent;
                (
                    self.tx_cq,
                    self.tx_cntr,
                    context,
                    report,
                    FI_SEND | matching.flag(),
                    None,
                )
            }
            Posted::Recv {
                context,
                report,
                matching,
                iov,
                probe,
                claim,
                multi,
                ..
            } => {
                self.follow_claim(claim, ev.report);
                // A multi-receive buffer's release without a message transfers nothing, but
                // its cancel is counted as a cancelled receive is.
                counted =
                    !(multi && ev.error.is_none() && ev.multi_recv.is_some_and(|m| !m.has_message));
                (
                    self.rx_cq,
                    // A probe is no transfer: fi_cntr(3) counts completed transfers.
                    if probe { None } else { self.rx_cntr },
                    context,
                    report,
                    FI_RECV | matching.flag(),
                    Some(iov),
                )
            }
            Posted::Orphan { .. } => return None,
        };
        let mut entry = FiCqTaggedEntry {
            op_context: context as usize as *mut c_void,
            flags,
            len: 0,
            buf: core::ptr::null_mut(),
            data: 0,
            tag: 0,
        };
        let mut error = ev.error.take().map(|e| CompletionError {
            errno: e.errno,
            prov_errno: e.local as c_int,
            olen: e.olen,
            message: e.to_string(),
        });
        let mut src = NO_SOURCE;
        if let Some(iov) = iov {
            if self.sources {
                src = ev.src_addr;
            }
            entry.buf = iov
                .as_slice()
                .first()
                .map_or(core::ptr::null_mut(), |&(p, _)| p as *mut c_void);
            if flags & FI_TAGGED != 0 {
                entry.tag = ev.tag;
            }
            // A probe that found a message (fi_tagged(3) `FI_PEEK`): its metadata, `len` the
            // message's, and no data (`buf` NULL).
            if ev.report {
                entry.buf = core::ptr::null_mut();
                entry.len = ev.len;
                entry.data = ev.data;
                if ev.data != 0 {
                    entry.flags |= FI_REMOTE_CQ_DATA;
                }
            }
            // A message longer than the endpoint's buffer, which the NIC cut: what it placed
            // goes on to the application's buffers as a message that fits would (fi_cq(3):
            // `len` placed, `olen` dropped).
            let cut = error
                .as_ref()
                .is_some_and(|e| e.errno == FiErrno::FI_ETRUNC);
            if let Some(m) = ev.multi_recv {
                self.multi_recv_entry(&ev, m, iov, &mut entry, &mut error);
            } else if (error.is_none() || cut) && !ev.report {
                entry.data = ev.data;
                if ev.data != 0 {
                    entry.flags |= FI_REMOTE_CQ_DATA;
                }
                let (copied, dropped) = ev
                    .buffer
                    .as_ref()
                    .map_or((0, 0), |b| scatter(b, iov.as_slice()));
                entry.len = copied;
                if let Some(e) = error.as_mut() {
                    e.olen = e.olen.saturating_add(dropped);
                } else if dropped > 0 {
                    error = Some(CompletionError {
                        errno: FiErrno::FI_ETRUNC,
                        prov_errno: 0,
                        olen: dropped,
                        message: format!(
                            "a {}-byte message into a {copied}-byte buffer: {dropped} bytes dropped",
                            copied + dropped
                        ),
                    });
                }
            }
        } else {
            entry.len = ev.len;
        }
        // A buffer the completion returned goes back to the pool here.
        drop(ev.buffer.take());
        // Counted whether or not it is reported (fi_cntr(3)).
        if let Some(cntr) = cntr.filter(|_| counted) {
            // SAFETY: a bound counter stays open while the endpoint is bound to it, and the
            // binding is only dropped under the endpoint's lock, which the drain holds.
            unsafe { &*cntr }.count(error.is_none(), 1);
        }
        let binding = binding?;
        // An inject's success is never reported (fi_msg(3)).
        if quiet && error.is_none() {
            return None;
        }
        // A multi-receive buffer's release is always reported: it is how the application
        // learns that the buffer is its own again.
        if !report && error.is_none() && binding.selective && release != Some(true) {
            return None;
        }
        Some((binding.cq, Completion { entry, src, error }))
    }

    /// The entry of a multi-receive buffer's completion `ev` (at `m`) into the application's
    /// buffer `iov`: the message, copied to the same offset of the application's buffer as
    /// it has in the endpoint's, `buf` pointing at it; `FI_MULTI_RECV` on the buffer's last
    /// completion, alone when that reports no message (fi_cq(3)).
    fn multi_recv_entry(
        &self,
        ev: &CqEvent,
        m: uet_driver::MultiRecv,
        iov: IoList,
        entry: &mut FiCqTaggedEntry,
        error: &mut Option<CompletionError>,
    ) {
        let (base, room) = iov.as_slice().first().copied().unwrap_or((0, 0));
        let at = m.offset.min(room);
        entry.buf = base.wrapping_add(at) as *mut c_void;
        if m.released {
            entry.flags |= FI_MULTI_RECV;
        }
        if !m.has_message {
            if error.is_none() {
                entry.flags = FI_MULTI_RECV;
            }
            entry.len = 0;
            return;
        }
        entry.data = ev.data;
        if ev.data != 0 {
            entry.flags |= FI_REMOTE_CQ_DATA;
        }
        // The endpoint's buffer offers the NIC no more than the application's holds, so the
        // message lies within it.
        let fits = room.saturating_sub(at).min(ev.len);
        if fits == 0 || base == 0 {
            entry.len = 0;
            return;
        }
        // SAFETY: the application gave `room` writable bytes at `base` for the buffer's
        // life (fi_msg(3): a multi-receive buffer is the provider's until its
        // `FI_MULTI_RECV` completion, which is this one or a later one), and
        // `at + fits <= room`.
        let dst = unsafe { core::slice::from_raw_parts_mut((base + at) as *mut u8, fits) };
        let copied = match self.driver.as_ref().map(|d| d.multi_recv_read(ev, dst)) {
            Some(Ok(n)) => n,
            Some(Err(e)) => {
                *error = Some(CompletionError {
                    errno: e.errno(),
                    prov_errno: 0,
                    olen: 0,
                    message: format!("a message of a multi-receive buffer not read: {e}"),
                });
                0
            }
            None => 0,
        };
        entry.len = copied;
    }

    /// `fi_cancel` of the receive posted with `context` (see `ep_cancel`).
    fn cancel(&mut self, context: u64, call: &str) -> Result<(), FiError> {
        let driver = self.driver.as_mut().ok_or_else(|| {
            FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!("{call}: the endpoint is not enabled (fi_enable)"),
            )
        })?;
        driver
            .cancel_supported()
            .map_err(|e| driver_error(call, &e))?;
        if context == 0 {
            // fi_endpoint(3): an operation posted without a context cannot be cancelled.
            return Err(FiError::new(
                FiErrno::FI_ENOENT,
                format!("{call}: no context: an operation posted without one is not cancelled"),
            ));
        }
        let receives = self
            .posted
            .iter()
            .enumerate()
            .filter_map(|(slot, op)| match op {
                Some(Posted::Recv {
                    context: c,
                    matching,
                    multi,
                    ..
                }) if *c == context => Some((slot as u64 + 1, *matching, *multi)),
                _ => None,
            });
        // A multi-receive buffer a message is arriving into stays posted once the message is
        // in: it is the one cancelled, after that message, if no other receive is.
        let mut arriving = None;
        for (token, matching, multi) in receives {
            let r = match matching {
                Matching::Untagged => driver.cancel_recv(token),
                Matching::Tagged { .. } => driver.cancel_trecv(token),
            };
            match r.map_err(|e| (e.errno(), e)) {
                Ok(()) => return Ok(()),
                Err((FiErrno::FI_EBUSY, _))
                    if multi && self.cancels_multi_recv && arriving.is_none() =>
                {
                    arriving = Some(token);
                }
                // Taken by a message already, or one that completes on its own: try another
                // receive with the context, if any.
                Err((FiErrno::FI_ENOENT | FiErrno::FI_EBUSY, _)) => {}
                Err((_, e)) => return Err(driver_error(call, &e)),
            }
        }
        let slot = arriving
            .and_then(|token| token.checked_sub(1))
            .and_then(|s| usize::try_from(s).ok());
        if let Some(Some(Posted::Recv { cancelled, .. })) =
            slot.and_then(|s| self.posted.get_mut(s))
        {
            // fi_endpoint(3): the cancel completes asynchronously, within a bounded time.
            *cancelled = true;
            self.cancels_due = true;
            return Ok(());
        }
        Err(FiError::new(
            FiErrno::FI_ENOENT,
            format!("{call}: no receive with context {context:#x} is posted"),
        ))
    }

    /// Leave the operations of a closing context's direction (`tx`: its sends, else its
    /// receives) to the ring set, whose context may be opened again: each becomes an
    /// [`Posted::Orphan`], whose completion is reported and counted nowhere, so a receive's
    /// message is copied into no buffer of the application's, which has them back.
    fn orphan(&mut self, tx: bool) {
        for op in self.posted.iter_mut().flatten() {
            let (recv, claim, multi) = match op {
                Posted::Send { .. } if tx => (None, None, false),
                Posted::Recv {
                    matching,
                    claim,
                    multi,
                    ..
                } if !tx => (Some(*matching), *claim, *multi),
                _ => continue,
            };
            *op = Posted::Orphan { recv, claim, multi };
        }
    }

    /// Withdraw the receives of closed contexts still posted on the NIC (RECV_CANCEL), so
    /// that no message lands in one: each completes cancelled, read off the ring here and
    /// reported nowhere. A receive a message is arriving into is not withdrawn: it completes
    /// on its own, reported nowhere too; a multi-receive buffer, which stays posted after
    /// that message, is withdrawn at the read after it ([`EpState::withdraw_cancelled`]).
    /// `Err` (the driver's `FI_ENOSYS`) when the NIC
    /// cannot cancel receives (older than host interface 1.14): they stay posted, and a
    /// message that takes one is read off the ring and discarded.
    fn cancel_orphan_receives(&mut self) -> Result<(), DriverError> {
        let Some(driver) = self.driver.as_ref() else {
            return Ok(());
        };
        let orphans = self.orphan_receives();
        if orphans.is_empty() {
            return Ok(());
        }
        driver.cancel_supported()?;
        'receives: for (token, matching) in orphans {
            for _ in 0..FLUSH_TRIES {
                let Some(driver) = self.driver.as_mut() else {
                    break 'receives;
                };
                let withdrawn = match matching {
                    Matching::Untagged => driver.cancel_recv(token),
                    Matching::Tagged { .. } => driver.cancel_trecv(token),
                };
                match withdrawn.map_err(|e| e.errno()) {
                    // The completion ring is full: what it holds goes to the CQs first.
                    Err(FiErrno::FI_EAGAIN) => self.drain_ring(),
                    // Withdrawn; or taken by a message, or arriving: it completes on its own.
                    _ => continue 'receives,
                }
            }
        }
        self.drain_ring();
        // A multi-receive buffer a message is arriving into stays posted once the message is
        // in: messages sent to the closed index would land in it and be discarded.
        if self.cancels_multi_recv
            && self.posted.iter().flatten().any(|op| {
                matches!(
                    op,
                    Posted::Orphan {
                        recv: Some(_),
                        multi: true,
                        ..
                    }
                )
            })
        {
            self.cancels_due = true;
        }
        Ok(())
    }

    /// The receives of closed contexts still posted on the NIC: (token, how each matches).
    fn orphan_receives(&self) -> Vec<(u64, Matching)> {
        self.posted
            .iter()
            .enumerate()
            .filter_map(|(slot, op)| match op {
                Some(Posted::Orphan { recv: Some(m), .. }) => Some((slot as u64 + 1, *m)),
                _ => None,
            })
            .collect()
    }

    /// Follow what a completed tagged receive did to a claim ([`EpState::claims`]);
    /// `report`: its completion reports a message found.
    fn follow_claim(&mut self, claim: Option<Claim>, report: bool) {
        match claim {
            Some(Claim::Makes(claim)) if report => self.claims.push(claim),
            Some(Claim::Ends(claim)) => {
                if let Some(i) = self.claims.iter().position(|&c| c == claim) {
                    self.claims.swap_remove(i);
                }
            }
            _ => {}
        }
    }

    /// Drop the messages of the claims the ring set holds (`FI_CLAIM | FI_DISCARD` of each):
    /// a receive context closes, and no later context of its index could take them, for
    /// only the `FI_CLAIM` receive given the closed context's `fi_context` does. Each
    /// discard completes reported nowhere; the ring is read before this returns. A claim
    /// whose discard the tagged RX ring has no room for (its receives full) is kept for the
    /// next call.
    fn discard_claims(&mut self) {
        // Reports read off the ring first: an orphaned probe's may make a claim.
        self.drain_ring();
        let mut kept = Vec::new();
        'claims: while let Some(claim) = self.claims.pop() {
            for _ in 0..FLUSH_TRIES {
                let token = self.hold(Posted::Orphan {
                    recv: None,
                    claim: None,
                    multi: false,
                });
                let Some(driver) = self.driver.as_mut() else {
                    self.take(token);
                    return;
                };
                let posted = driver.post_tprobe(TaggedProbe::Discard(claim), 0, 0, 0, token);
                match posted.map_err(|e| (e.errno(), e)) {
                    Ok(()) => continue 'claims,
                    // The tagged RX ring is full: its completions are read first.
                    Err((FiErrno::FI_EAGAIN, _)) => {
                        self.take(token);
                        self.drain_ring();
                    }
                    Err((_, e)) => {
                        self.take(token);
                        tracing::debug!(claim, error = %e, "a closed context's claim not dropped");
                        continue 'claims;
                    }
                }
            }
            kept.push(claim);
        }
        self.drain_ring();
        self.claims.append(&mut kept);
    }

    /// Hold `op` until its completion: its token, the context the NIC carries (never 0, the
    /// context of the NIC's inject completions).
    fn hold(&mut self, op: Posted) -> u64 {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.posted[slot] = Some(op);
                slot
            }
            None => {
                self.posted.push(Some(op));
                self.posted.len() - 1
            }
        };
        slot as u64 + 1
    }

    /// The operation of `token`, still held; `None` for a token that holds none.
    fn peek(&self, token: u64) -> Option<Posted> {
        let slot = usize::try_from(token.checked_sub(1)?).ok()?;
        *self.posted.get(slot)?
    }

    /// The operation of `token`, no longer held; `None` for a token that holds none.
    fn take(&mut self, token: u64) -> Option<Posted> {
        let slot = usize::try_from(token.checked_sub(1)?).ok()?;
        let op = self.posted.get_mut(slot)?.take()?;
        self.free.push(slot);
        Some(op)
    }

    /// `FI_EOPBADSTATE` before `fi_enable`.
    fn enabled(&self, call: &str) -> Result<(), FiError> {
        match (self.driver.as_ref(), self.pool.as_ref()) {
            (Some(_), Some(_)) => Ok(()),
            _ => Err(not_enabled(call)),
        }
    }

    /// The enabled endpoint and a free buffer of at least `len` bytes. `FI_EOPBADSTATE`
    /// before `fi_enable`, `FI_EMSGSIZE` above the largest buffer, `FI_EAGAIN` with no buffer
    /// of the size free, and the error of making a class of large buffers (`FI_ENOMEM`) when
    /// that fails.
    fn ready(&mut self, call: &str, len: usize) -> Result<DmaBuffer, FiError> {
        self.ready_leaving(call, len, 0)
    }

    /// [`EpState::ready`] for a receive, which holds its buffer until a message comes: it
    /// takes none of the last buffer of a class of large ones, which is left to a send, so
    /// that receives of long messages never keep the endpoint from sending one (a peer's
    /// receive waiting for it may be what completes them).
    fn ready_recv(&mut self, call: &str, len: usize) -> Result<DmaBuffer, FiError> {
        self.ready_leaving(call, len, 1)
    }

    /// [`EpState::ready`], leaving `keep` buffers of a class of large ones free
    /// ([`DmaPoolSet::alloc_leaving`]).
    fn ready_leaving(&mut self, call: &str, len: usize, keep: usize) -> Result<DmaBuffer, FiError> {
        let (Some(_), Some(pool)) = (self.driver.as_ref(), self.pool.as_ref()) else {
            return Err(not_enabled(call));
        };
        match pool.alloc_leaving(len, keep) {
            Ok(buffer) => Ok(buffer),
            // Every message buffer of the size is in flight: the application reads its CQ
            // and retries, often in a loop, so the answer is made without formatting a
            // message.
            Err(DriverError::Full(_)) => Err(FiError::new(FiErrno::FI_EAGAIN, String::new())),
            Err(DriverError::MessageTooLong { max, .. }) => Err(FiError::new(
                FiErrno::FI_EMSGSIZE,
                format!("{call}: a message is at most {max} bytes (ep_attr->max_msg_size)"),
            )),
            Err(e) => Err(FiError::new(
                e.errno(),
                format!("{call}: a message buffer of {len} bytes: {e}"),
            )),
        }
    }

    /// The bytes of the largest message buffer: the longest receive worth a buffer of its
    /// own, since no message is longer. 0 before `fi_enable`.
    fn max_buffer(&self) -> usize {
        self.pool.as_ref().map_or(0, DmaPoolSet::max_size)
    }
}

/// Copy a received buffer into the application's iovecs: (bytes copied, bytes that did not
/// fit).
fn scatter(buffer: &DmaBuffer, iov: &[(usize, usize)]) -> (usize, usize) {
    let total = buffer.len();
    let mut offset = 0;
    for &(base, len) in iov {
        if offset == total {
            break;
        }
        // An empty iovec takes nothing; the message goes on into the next.
        let n = len.min(total - offset);
        if n == 0 {
            continue;
        }
        // SAFETY: the application gave `len` writable bytes at `base` with the receive and
        // keeps them until its completion is read (fi_msg(3)); this is that read.
        let out = unsafe { core::slice::from_raw_parts_mut(base as *mut u8, n) };
        match buffer.read_at(offset, out) {
            Ok(read) => offset += read,
            Err(e) => {
                tracing::warn!(error = %e, "uet provider: reading a receive buffer");
                break;
            }
        }
    }
    (offset, total - offset)
}

/// An endpoint: libfabric's `fid_ep` first.
#[repr(C)]
pub struct UetEp {
    fid: FidEp,
    shared: Arc<EpShared>,
    domain: *const UetDomain,
    /// `tx_attr->op_flags` and `rx_attr->op_flags` of the `fi_info` it was opened with: the
    /// flags of the calls that take none (`fi_send`, `fi_recv`, ...).
    tx_op_flags: u64,
    rx_op_flags: u64,
    /// `caps` of that `fi_info`: `FI_SEND` and `FI_RECV` say which directions the endpoint
    /// serves (neither: both).
    caps: u64,
    /// `ep_attr->type` of that `fi_info` (`FI_EP_UNSPEC`: `FI_EP_RDM`).
    kind: EpKind,
    /// `addr_format` of that `fi_info`: how `fi_connect` reads its address.
    addr_format: AddrFormat,
    /// `handle` of that `fi_info` for an `FI_EP_MSG` endpoint: the connection request
    /// (`FI_CONNREQ`) `fi_accept` takes, or NULL.
    connreq: *mut Fid,
    /// `src_addr` of that `fi_info` for an `FI_EP_RDM` or `FI_EP_DGRAM` endpoint: the
    /// address it asked to have, which `fi_enable` checks the NIC gave it.
    src: Option<UetAddress>,
    /// An endpoint of its own, or a context of a scalable endpoint.
    role: Role,
}

/// What an endpoint object is: an endpoint of its own (`fi_endpoint`), or the transmit or
/// receive context `index` of a scalable endpoint (`fi_tx_context`, `fi_rx_context`), whose
/// state is the scalable endpoint's ring set `index`, shared by its transmit and receive
/// context of that index, each binding its own direction's CQ and counter.
#[derive(Clone, Copy)]
pub(crate) enum Role {
    /// `FI_CLASS_EP`.
    Endpoint,
    /// `FI_CLASS_TX_CTX` (`tx`) or `FI_CLASS_RX_CTX` of the scalable endpoint `sep`, which
    /// cannot close while the context is open.
    Context {
        sep: *const crate::sep::UetSep,
        tx: bool,
        index: usize,
    },
}

impl Role {
    /// `FI_EOPNOTSUPP` for a transfer of the direction a context does not serve (`tx`:
    /// sends).
    fn check_serves(self, tx: bool, call: &str) -> Result<(), FiError> {
        match self {
            Role::Context { tx: own, .. } if own != tx => Err(FiError::new(
                FiErrno::FI_EOPNOTSUPP,
                format!(
                    "{call}: a {} context {}",
                    if own { "transmit" } else { "receive" },
                    if own {
                        "does not receive"
                    } else {
                        "does not send"
                    }
                ),
            )),
            _ => Ok(()),
        }
    }

    /// `FI_EOPBADSTATE` for a transfer on a context not enabled: neither its own `fi_enable`
    /// nor its scalable endpoint's has enabled it. An endpoint's own state says whether it
    /// is (its NIC endpoint), which the transfer checks.
    fn check_enabled(self, tx: bool, call: &str) -> Result<(), FiError> {
        match self {
            // SAFETY: the scalable endpoint cannot close while its contexts are open.
            Role::Context { sep, index, .. } if !unsafe { &*sep }.context_enabled(tx, index) => {
                Err(FiError::new(
                    FiErrno::FI_EOPBADSTATE,
                    format!("{call}: the context is not enabled (fi_enable)"),
                ))
            }
            _ => Ok(()),
        }
    }
}

impl UetEp {
    /// Whether a flagless send reports its success under `FI_SELECTIVE_COMPLETION`.
    fn tx_report(&self) -> bool {
        self.tx_op_flags & FI_COMPLETION != 0
    }

    /// `FI_OPT_MIN_MULTI_RECV`: what `fi_setopt` set, else the NIC endpoint's default (one
    /// MTU; before `fi_enable`, the domain's NIC's MTU).
    fn min_multi_recv(&self, call: &str) -> Result<usize, FiError> {
        let st = self.shared.lock();
        if let Some(v) = st.min_multi_recv {
            return Ok(v);
        }
        if let Some(d) = st.driver.as_ref() {
            return Ok(d.min_multi_recv());
        }
        drop(st);
        // SAFETY: the domain outlives its endpoints (it counts them).
        let domain = unsafe { &*self.domain };
        let guard = domain.lock()?;
        let dom = guard
            .as_ref()
            .ok_or_else(|| FiError::inval(format!("{call}: the domain is closed")))?;
        Ok(usize::from(dom.nic().capabilities().mtu))
    }

    /// Whether a flagless receive reports its success under `FI_SELECTIVE_COMPLETION`.
    fn rx_report(&self) -> bool {
        self.rx_op_flags & FI_COMPLETION != 0
    }

    /// Whether the endpoint serves the direction `dir` (`FI_SEND`, `FI_RECV`): the caps of
    /// its `fi_info` name it, or name neither direction (both).
    fn serves(&self, dir: u64) -> bool {
        let dirs = self.caps & (FI_SEND | FI_RECV);
        dirs == 0 || dirs & dir != 0
    }

    /// `FI_EOPNOTSUPP` for a transfer of a direction (`tx`: sends) the endpoint does not
    /// serve: a context's other direction ([`Role::check_serves`]), or one its caps leave
    /// out, for which `fi_enable` asked no CQ: its completions (a message a receive took, a
    /// send's error) would reach none (fi_endpoint(3): CQs report every operation).
    fn check_serves(&self, tx: bool, call: &str) -> Result<(), FiError> {
        self.role.check_serves(tx, call)?;
        if !self.serves(if tx { FI_SEND } else { FI_RECV }) {
            return Err(FiError::new(
                FiErrno::FI_EOPNOTSUPP,
                format!(
                    "{call}: the endpoint's caps ({:#x}) leave out {}",
                    self.caps,
                    if tx { "FI_SEND" } else { "FI_RECV" }
                ),
            ));
        }
        Ok(())
    }

    /// `FI_EOPNOTSUPP` unless the endpoint is `FI_EP_MSG`: `call` is a connection's.
    fn check_connected_kind(&self, call: &str) -> Result<(), FiError> {
        if self.kind != EpKind::Msg {
            return Err(FiError::new(
                FiErrno::FI_EOPNOTSUPP,
                format!(
                    "{call}: an {} endpoint has no connection (FI_EP_MSG endpoints do)",
                    self.kind.name()
                ),
            ));
        }
        Ok(())
    }

    /// The `fid` pointer the application holds.
    fn fid_ptr(&self) -> *mut Fid {
        core::ptr::addr_of!(self.fid.fid).cast_mut()
    }

    /// `FI_EBADFLAGS` for send flags asking a datagram endpoint for a completion level only a
    /// reliable one meets: a datagram is never acknowledged, so its send completes once its
    /// packet is on the wire (`FI_TRANSMIT_COMPLETE` for unreliable endpoints, `fi_cq(3)`).
    fn check_completion_level(&self, call: &str, flags: u64) -> Result<(), FiError> {
        if self.kind == EpKind::Dgram && flags & RELIABLE_ONLY_FLAGS != 0 {
            return Err(FiError::badflags(format!(
                "{call}: flags {flags:#x}: FI_DELIVERY_COMPLETE and FI_MATCH_COMPLETE apply to \
                 reliable endpoints; an FI_EP_DGRAM send completes once its packet is on the \
                 wire"
            )));
        }
        Ok(())
    }
}

pub(crate) static EP_FID_OPS: FiOps = unsupported::fid_ops(ep_close, ep_bind, ep_control);

pub(crate) static EP_OPS: FiOpsEp = FiOpsEp {
    size: core::mem::size_of::<FiOpsEp>(),
    cancel: ep_cancel,
    getopt: ep_getopt,
    setopt: ep_setopt,
    tx_ctx: unsupported::ep_tx_ctx,
    rx_ctx: unsupported::ep_rx_ctx,
    rx_size_left: unsupported::ep_size_left,
    tx_size_left: unsupported::ep_size_left,
};

pub(crate) static EP_CM_OPS: FiOpsCm = FiOpsCm {
    size: core::mem::size_of::<FiOpsCm>(),
    setname: unsupported::cm_setname,
    getname: ep_getname,
    getpeer: ep_getpeer,
    connect: ep_connect,
    listen: unsupported::cm_listen,
    accept: ep_accept,
    reject: unsupported::cm_reject,
    shutdown: ep_shutdown,
    join: unsupported::cm_join,
};

pub(crate) static EP_MSG_OPS: FiOpsMsg = FiOpsMsg {
    size: core::mem::size_of::<FiOpsMsg>(),
    recv: ep_recv,
    recvv: ep_recvv,
    recvmsg: ep_recvmsg,
    send: ep_send,
    sendv: ep_sendv,
    sendmsg: ep_sendmsg,
    inject: ep_inject,
    senddata: ep_senddata,
    injectdata: ep_injectdata,
};

pub(crate) static EP_TAGGED_OPS: FiOpsTagged = FiOpsTagged {
    size: core::mem::size_of::<FiOpsTagged>(),
    recv: ep_trecv,
    recvv: ep_trecvv,
    recvmsg: ep_trecvmsg,
    send: ep_tsend,
    sendv: ep_tsendv,
    sendmsg: ep_tsendmsg,
    inject: ep_tinject,
    senddata: ep_tsenddata,
    injectdata: ep_tinjectdata,
};

/// The provider's endpoint behind a `fid` pointer.
///
/// # Safety
/// `fid` is NULL or a live libfabric object.
unsafe fn ep_ref<'a>(fid: *const Fid, call: &str) -> Result<&'a UetEp, FiError> {
    // SAFETY: NULL or a live object (the caller's promise); only its `struct fid` is read.
    let class = unsafe { fid.as_ref() }.map_or(FI_CLASS_EP, |f| f.fclass);
    let class = match class {
        FI_CLASS_TX_CTX | FI_CLASS_RX_CTX => class,
        // SAFETY: the caller's promise.
        FI_CLASS_SEP if unsafe { crate::sep::is_sep(fid) } => {
            return Err(FiError::new(
                FiErrno::FI_EOPNOTSUPP,
                format!(
                    "{call}: a scalable endpoint carries no transfers itself: use its \
                     contexts (fi_tx_context, fi_rx_context)"
                ),
            ))
        }
        _ => FI_CLASS_EP,
    };
    // SAFETY: the caller's promise.
    unsafe { object_ref(fid, class, &EP_FID_OPS, call, "endpoint") }
}

/// The `fid_ep` of an endpoint or of a scalable endpoint's context (`fclass`): the same
/// operations for all of them, which tell one from another by the object's role.
fn endpoint_fid(fclass: usize, context: *mut c_void) -> FidEp {
    FidEp {
        fid: Fid {
            fclass,
            context,
            ops: core::ptr::addr_of!(EP_FID_OPS).cast_mut(),
        },
        ops: core::ptr::addr_of!(EP_OPS).cast_mut(),
        cm: core::ptr::addr_of!(EP_CM_OPS).cast_mut(),
        msg: core::ptr::addr_of!(EP_MSG_OPS).cast_mut(),
        rma: core::ptr::addr_of!(unsupported::RMA_OPS).cast_mut(),
        tagged: core::ptr::addr_of!(EP_TAGGED_OPS).cast_mut(),
        atomic: core::ptr::addr_of!(unsupported::ATOMIC_OPS).cast_mut(),
        collective: core::ptr::addr_of!(unsupported::COLLECTIVE_OPS).cast_mut(),
    }
}

/// Transmit (`tx`) or receive context `index` of the scalable endpoint `sep`, on its ring
/// set `lane`, taking the `op_flags` given as its flagless calls' flags and serving `caps`
/// (its direction's, and for a receive context `FI_MULTI_RECV` or not): a `fid_ep` of
/// class `FI_CLASS_TX_CTX` or `FI_CLASS_RX_CTX`, not counted among the domain's endpoints
/// (the scalable endpoint is, and outlives its contexts).
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_context(
    sep: &crate::sep::UetSep,
    domain: *const UetDomain,
    lane: Arc<EpShared>,
    tx: bool,
    index: usize,
    op_flags: u64,
    caps: u64,
    addr_format: AddrFormat,
    context: *mut c_void,
) -> *mut FidEp {
    let boxed = Box::new(UetEp {
        fid: endpoint_fid(if tx { FI_CLASS_TX_CTX } else { FI_CLASS_RX_CTX }, context),
        shared: lane,
        domain,
        tx_op_flags: if tx { op_flags } else { 0 },
        rx_op_flags: if tx { 0 } else { op_flags },
        caps,
        kind: EpKind::Rdm,
        addr_format,
        connreq: core::ptr::null_mut(),
        // The scalable endpoint's address is checked at its own enable.
        src: None,
        role: Role::Context { sep, tx, index },
    });
    Box::into_raw(boxed).cast()
}

/// `fi_endpoint`. `FI_EINVAL` for an `fi_info` asking for what the provider does not serve
/// or honour ([`crate::info::endpoint_info_refused`]: capabilities, default flags, sizes
/// beyond those `fi_getinfo` answers, an order or a protocol, an address format, or an
/// `ep_attr->auth_key` that is not the domain's JobID, on a fabric of API 1.5 or later).
pub(crate) unsafe extern "C" fn domain_endpoint(
    domain: *mut FidDomain,
    info: *mut c_void,
    ep: *mut *mut c_void,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_endpoint";
    entry(CALL, || {
        // SAFETY: the application's domain pointer.
        let d = unsafe { domain_ref(domain, CALL) }?;
        if ep.is_null() {
            return Err(null(CALL, "ep"));
        }
        // SAFETY: NULL or a valid fi_info (libfabric's contract).
        let info = unsafe { info.cast::<FiInfo>().as_ref() }.ok_or_else(|| null(CALL, "info"))?;
        let mut kind = EpKind::default();
        // SAFETY: NULL or valid attributes of a valid fi_info.
        if let Some(a) = unsafe { info.ep_attr.as_ref() } {
            kind = EpKind::from_raw(a.ep_type)
                .map_err(|why| FiError::inval(format!("{CALL}: {why}")))?
                .unwrap_or_default();
            if let Some(why) = crate::info::context_counts_refused(a) {
                return Err(FiError::inval(format!("{CALL}: {why}")));
            }
        }
        // An endpoint that takes a connection request names one the application may still
        // answer.
        let connreq = if kind == EpKind::Msg {
            info.handle
        } else {
            core::ptr::null_mut()
        };
        if !connreq.is_null() && !crate::pep::is_request(connreq) {
            return Err(FiError::inval(format!(
                "{CALL}: info->handle is no connection request waiting for an answer"
            )));
        }
        let (checked, ours) = {
            let guard = d.lock()?;
            let dom = guard
                .as_ref()
                .ok_or_else(|| FiError::inval(format!("{CALL}: the domain is closed")))?;
            let job_id = dom.endpoint_attr().job_id;
            // SAFETY: NULL or valid attributes of a valid fi_info.
            let checked = unsafe {
                crate::info::endpoint_info_refused(info, kind, dom.nic(), job_id, d.api_version)
            };
            (checked, dom.nic().fabric_addr())
        };
        let addr_format = checked.map_err(|why| FiError::inval(format!("{CALL}: {why}")))?;
        // The address asked for (FI_SOURCE): on this NIC, or the endpoint would be at
        // another address than the application asked for. (An FI_EP_MSG endpoint's is the
        // listener's or none: the NIC gives it its own at fi_connect or fi_accept.)
        let src = if kind == EpKind::Msg {
            None
        } else {
            // SAFETY: a valid fi_info.
            unsafe { crate::info::src_addr(info, addr_format, CALL) }?
        };
        if let Some(want) = src {
            check_src_fabric_addr(&want, ours, CALL)?;
        }
        // SAFETY: NULL or valid attributes of a valid fi_info.
        let tx_op_flags = unsafe { info.tx_attr.as_ref() }.map_or(0, |a| a.op_flags);
        // SAFETY: as above.
        let rx_op_flags = unsafe { info.rx_attr.as_ref() }.map_or(0, |a| a.op_flags);
        // The flagless sends take these flags: a datagram's cannot meet a reliable level.
        if kind == EpKind::Dgram && tx_op_flags & RELIABLE_ONLY_FLAGS != 0 {
            return Err(FiError::inval(format!(
                "{CALL}: tx_attr->op_flags {tx_op_flags:#x}: FI_DELIVERY_COMPLETE and \
                 FI_MATCH_COMPLETE apply to reliable endpoints; an FI_EP_DGRAM send completes \
                 once its packet is on the wire"
            )));
        }
        d.endpoints.fetch_add(1, Ordering::AcqRel);
        let boxed = Box::new(UetEp {
            fid: endpoint_fid(FI_CLASS_EP, context),
            shared: Arc::new(EpShared::new(
                kind == EpKind::Msg,
                info.caps == 0 || info.caps & FI_SOURCE_CAP != 0,
            )),
            role: Role::Endpoint,
            domain: d,
            tx_op_flags,
            rx_op_flags,
            caps: info.caps,
            kind,
            addr_format,
            connreq,
            src,
        });
        // SAFETY: `ep` is non-NULL and writable (libfabric's contract).
        unsafe { *ep = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

/// `fi_ep_bind`.
unsafe extern "C" fn ep_bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    const CALL: &str = "fi_ep_bind";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let e = unsafe { ep_ref(fid, CALL) }?;
        // SAFETY: NULL or a live object (libfabric's contract).
        let b = unsafe { bfid.as_ref() }.ok_or_else(|| null(CALL, "bfid"))?;
        // A context is bound until its own enable (its ring set may be on the NIC before:
        // the enable of another context or of the scalable endpoint put it there).
        let sep_guard = match e.role {
            // SAFETY: the scalable endpoint cannot close while its contexts are open.
            Role::Context { sep, tx, index } => Some(unsafe { &*sep }.bind_guard(tx, index, CALL)?),
            Role::Endpoint => None,
        };
        let mut st = e.shared.lock();
        if sep_guard.is_none() && st.driver.is_some() {
            return Err(FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!("{CALL}: the endpoint is enabled"),
            ));
        }
        match b.fclass {
            FI_CLASS_AV => {
                // SAFETY: a live object of class AV.
                let av = unsafe { crate::av::av_ref(bfid.cast(), CALL) }?;
                if let Role::Context { .. } = e.role {
                    return Err(FiError::inval(format!(
                        "{CALL}: a context uses its scalable endpoint's AV \
                         (fi_scalable_ep_bind)"
                    )));
                }
                if e.kind == EpKind::Msg {
                    return Err(FiError::inval(format!(
                        "{CALL}: an FI_EP_MSG endpoint binds no AV: its peer is the one it \
                         connects to"
                    )));
                }
                if st.av.is_some() {
                    return Err(FiError::inval(format!("{CALL}: an AV is bound already")));
                }
                if flags != 0 {
                    return Err(FiError::badflags(format!(
                        "{CALL}: flags {flags:#x} with an AV"
                    )));
                }
                av.eps.fetch_add(1, Ordering::AcqRel);
                st.av = Some(av);
                e.shared
                    .bound
                    .av
                    .store(core::ptr::from_ref(av).cast_mut(), Ordering::Release);
            }
            FI_CLASS_CQ => {
                // SAFETY: a live object of class CQ.
                let cq = unsafe { crate::cq::cq_ref(bfid, CALL) }?;
                if flags & !(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION) != 0
                    || flags & (FI_TRANSMIT | FI_RECV) == 0
                {
                    return Err(FiError::badflags(format!(
                        "{CALL}: flags {flags:#x}: a CQ binds with FI_TRANSMIT and/or FI_RECV \
                         (and FI_SELECTIVE_COMPLETION)"
                    )));
                }
                let tx = flags & FI_TRANSMIT != 0;
                let rx = flags & FI_RECV != 0;
                context_direction(e, tx, rx, CALL, "a CQ", "FI_TRANSMIT")?;
                if (tx && st.tx_cq.is_some()) || (rx && st.rx_cq.is_some()) {
                    return Err(FiError::inval(format!(
                        "{CALL}: a CQ is bound for that direction already"
                    )));
                }
                let binding = CqBinding {
                    cq,
                    selective: flags & FI_SELECTIVE_COMPLETION != 0,
                };
                let st = &mut *st;
                for (bound, cqs, at) in [(tx, &mut st.tx_cq, 0), (rx, &mut st.rx_cq, 1)] {
                    if bound {
                        *cqs = Some(binding);
                        e.shared.bound.cqs[at]
                            .store(core::ptr::from_ref(cq).cast_mut(), Ordering::Release);
                        cq.attach(&e.shared);
                    }
                }
            }
            FI_CLASS_CNTR => {
                // SAFETY: a live object of class CNTR.
                let cntr = unsafe { crate::cntr::cntr_ref(bfid, CALL) }?;
                const RMA: u64 = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
                if flags & RMA != 0 {
                    return Err(FiError::badflags(format!(
                        "{CALL}: flags {flags:#x}: counters of RMA (FI_READ, FI_WRITE, \
                         FI_REMOTE_READ, FI_REMOTE_WRITE) are not served, as RMA is not"
                    )));
                }
                if flags & !(FI_SEND | FI_RECV) != 0 || flags == 0 {
                    return Err(FiError::badflags(format!(
                        "{CALL}: flags {flags:#x}: a counter binds with FI_SEND (FI_TRANSMIT) \
                         and/or FI_RECV"
                    )));
                }
                let tx = flags & FI_SEND != 0;
                let rx = flags & FI_RECV != 0;
                context_direction(e, tx, rx, CALL, "a counter", "FI_SEND")?;
                if (tx && st.tx_cntr.is_some()) || (rx && st.rx_cntr.is_some()) {
                    return Err(FiError::inval(format!(
                        "{CALL}: a counter is bound for that direction already"
                    )));
                }
                let st = &mut *st;
                for (bound, cntrs, at) in [(tx, &mut st.tx_cntr, 0), (rx, &mut st.rx_cntr, 1)] {
                    if bound {
                        *cntrs = Some(cntr);
                        e.shared.bound.cntrs[at]
                            .store(core::ptr::from_ref(cntr).cast_mut(), Ordering::Release);
                        cntr.attach(&e.shared);
                    }
                }
            }
            FI_CLASS_EQ => {
                if let Role::Context { .. } = e.role {
                    return Err(FiError::inval(format!(
                        "{CALL}: a context of a scalable endpoint (FI_EP_RDM) reports no \
                         connection: it binds no EQ"
                    )));
                }
                // SAFETY: a live object of class EQ.
                let eq = unsafe { crate::eq::eq_ref(bfid, CALL) }?;
                if st.eq.is_some() {
                    return Err(FiError::inval(format!("{CALL}: an EQ is bound already")));
                }
                st.eq = Some(eq.link()?);
            }
            other => {
                return Err(FiError::inval(format!(
                    "{CALL}: fid class {other}: an endpoint binds an AV, CQs, counters and an EQ"
                )))
            }
        }
        Ok(0)
    })
}

/// `FI_EBADFLAGS` for a binding of a context in the direction it does not serve: a
/// transmit context binds `what` with `tx_flag` only, a receive context with `FI_RECV` only.
fn context_direction(
    e: &UetEp,
    tx: bool,
    rx: bool,
    call: &str,
    what: &str,
    tx_flag: &str,
) -> Result<(), FiError> {
    match e.role {
        Role::Context { tx: true, .. } if rx => Err(FiError::badflags(format!(
            "{call}: a transmit context binds {what} with {tx_flag} only"
        ))),
        Role::Context { tx: false, .. } if tx => Err(FiError::badflags(format!(
            "{call}: a receive context binds {what} with FI_RECV only"
        ))),
        _ => Ok(()),
    }
}

/// `fi_control`: `FI_ENABLE` creates the endpoint on the NIC.
unsafe extern "C" fn ep_control(fid: *mut Fid, command: c_int, _arg: *mut c_void) -> c_int {
    const CALL: &str = "fi_enable";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let e = unsafe { ep_ref(fid, CALL) }?;
        if command != FI_ENABLE {
            return Err(FiError::new(
                FiErrno::FI_ENOSYS,
                format!("fi_control: command {command} is not served on an endpoint"),
            ));
        }
        if let Role::Context { sep, tx, index } = e.role {
            // SAFETY: the scalable endpoint cannot close while its contexts are open.
            unsafe { &*sep }.enable_context(tx, index, &e.shared, CALL)?;
            return Ok(0);
        }
        let mut st = e.shared.lock();
        enable(e, &mut st, CALL)?;
        Ok(0)
    })
}

/// Create the endpoint on the NIC (`fi_enable`, or implicitly `fi_connect` and `fi_accept`)
/// unless it is: `FI_ENOAV` without an AV (`FI_EP_MSG` binds none), `FI_ENOEQ` without an
/// EQ on `FI_EP_MSG` (fi_endpoint(3): bound before it is enabled, which no EQ is after),
/// `FI_ENOCQ` without a CQ for a direction the `fi_info`'s caps serve. An `FI_EP_MSG`
/// endpoint reports to its EQ from then on. Nothing changes on an error.
fn enable(e: &UetEp, st: &mut EpState, call: &str) -> Result<(), FiError> {
    if st.driver.is_some() {
        return Ok(());
    }
    let av = match e.kind {
        EpKind::Msg => {
            no_eq(st, call)?;
            None
        }
        _ => Some(st.av.ok_or_else(|| {
            FiError::new(
                FiErrno::FI_ENOAV,
                format!("{call}: no AV is bound (fi_ep_bind)"),
            )
        })?),
    };
    // A direction without a CQ would never have its completions read, nor its buffers
    // and ring entries freed.
    if (e.serves(FI_SEND) && st.tx_cq.is_none()) || (e.serves(FI_RECV) && st.rx_cq.is_none()) {
        return Err(FiError::new(
            FiErrno::FI_ENOCQ,
            format!(
                "{call}: the endpoint needs a CQ bound for each direction it serves \
                 (fi_ep_bind with FI_TRANSMIT, FI_RECV)"
            ),
        ));
    }
    // SAFETY: the domain outlives its endpoints (it counts them).
    let domain = unsafe { &*e.domain };
    let guard = domain.lock()?;
    let dom = guard
        .as_ref()
        .ok_or_else(|| FiError::inval(format!("{call}: the domain is closed")))?;
    let attr = uet_driver::EndpointAttr {
        ep_type: e.kind.driver(),
        ..dom.endpoint_attr()
    };
    let slots = (1usize << attr.tx_log2) + (1usize << attr.rx_log2) + (1usize << attr.trx_log2);
    let mut driver = match av {
        // SAFETY: a bound AV cannot close while the endpoint is bound to it.
        Some(av) => unsafe { &*av }.with_table(call, |table| {
            dom.endpoint(attr, Some(table))
                .map_err(|e| FiError::new(e.errno(), format!("{call}: {e}")))
        })?,
        None => dom
            .endpoint(attr, None)
            .map_err(|e| FiError::new(e.errno(), format!("{call}: {e}")))?,
    };
    if let Some(want) = e.src.as_ref() {
        // It goes again: dropped here.
        check_src_pid_on_fep(want, driver.address(), call)?;
    }
    let pool = message_buffers(dom.nic(), e.kind, slots)
        .map_err(|e| FiError::new(e.errno(), format!("{call}: message buffers: {e}")))?;
    if let (EpKind::Msg, Some(link)) = (e.kind, st.eq.as_ref()) {
        driver
            .bind_eq(link.queue())
            .map_err(|e| FiError::new(e.errno(), format!("{call}: {e}")))?;
        link.name(driver.fid(), e.fid_ptr(), None);
    }
    st.driver = Some(driver);
    st.pool = Some(pool);
    st.retry = retry_policy(dom.nic(), e.kind);
    st.cancels_multi_recv = st.driver.as_ref().is_some_and(Endpoint::cancels_multi_recv);
    st.tx_room = (1usize << attr.tx_log2).saturating_sub(1);
    st.wake_bound();
    Ok(())
}

/// `FI_EADDRNOTAVAIL` when the address an endpoint's `fi_info` asked for (`src_addr`) is at
/// another fabric address than its NIC's, `ours`: the endpoint would be elsewhere than the
/// application asked.
pub(crate) fn check_src_fabric_addr(
    want: &UetAddress,
    ours: std::net::IpAddr,
    call: &str,
) -> Result<(), FiError> {
    if crate::info::same_ip(want.fabric_addr, ours) {
        return Ok(());
    }
    Err(FiError::new(
        FiErrno::FI_EADDRNOTAVAIL,
        format!("{call}: src_addr {want} is not on this NIC ({ours})"),
    ))
}

/// `FI_EADDRNOTAVAIL` when the address an endpoint's `fi_info` asked for (`src_addr`) names
/// another PIDonFEP than the NIC assigned it (`got`): the NIC assigns every PIDonFEP, and an
/// endpoint at another would be where no peer given the address it asked for looks. A
/// PIDonFEP of 0 (service 0, or none) asks for none.
pub(crate) fn check_src_pid_on_fep(
    want: &UetAddress,
    got: &UetAddress,
    call: &str,
) -> Result<(), FiError> {
    if want.pid_on_fep == 0 || want.pid_on_fep == got.pid_on_fep {
        return Ok(());
    }
    Err(FiError::new(
        FiErrno::FI_EADDRNOTAVAIL,
        format!(
            "{call}: src_addr {want} names PIDonFEP {}, and the NIC assigned {}: the NIC \
             assigns every PIDonFEP (leave the service out, or 0, and give peers the \
             endpoint's fi_getname)",
            want.pid_on_fep, got.pid_on_fep
        ),
    ))
}

/// The environment variable bounding how long a send its target refused for want of a
/// receive buffer is retried, in milliseconds, after which it completes with that refusal
/// (`FI_ENORX`). Unset or `0`: retried until a receive takes it, as fi_domain(3) has
/// `FI_RM_ENABLED` retry such a message. Read at each `fi_enable`.
pub const RETRY_TIMEOUT_VAR: &str = "FI_UET_RNR_TIMEOUT";

/// Whether an endpoint of `kind` on `nic` retries the sends its target refuses for want of
/// a receive buffer, and for how long (`Some(None)`: until one is taken;
/// [`RETRY_TIMEOUT_VAR`]): a reliable one on a NIC that gives `FI_RM_ENABLED`
/// ([`crate::info::resource_mgmt`]), whose table in fi_domain(3) has such a message
/// "retried", not a transmit error. A datagram's target drops it unanswered.
pub(crate) fn retry_policy(
    nic: &uet_driver::Nic,
    kind: EpKind,
) -> Option<Option<std::time::Duration>> {
    if kind == EpKind::Dgram || crate::info::resource_mgmt(nic) != FI_RM_ENABLED {
        return None;
    }
    Some(retry_timeout(
        std::env::var(RETRY_TIMEOUT_VAR).ok().as_deref(),
    ))
}

/// The retry bound [`RETRY_TIMEOUT_VAR`]'s value gives: `None` (no bound) when unset, `0` or
/// more milliseconds than 64 bits hold; a value that is not a number of milliseconds is
/// logged and taken as unset.
pub fn retry_timeout(value: Option<&str>) -> Option<std::time::Duration> {
    let v = value?;
    millis_bound(v).unwrap_or_else(|()| {
        tracing::warn!(
            "{RETRY_TIMEOUT_VAR}={v:?} is not a number of milliseconds; refused sends are \
             retried until a receive takes them"
        );
        None
    })
}

/// A bound given in milliseconds by an environment variable's value `v`: `Ok(None)` (no
/// bound) for 0 and for more milliseconds than 64 bits hold, longer than any deadline the
/// clock holds; `Err` for a value that is not a number of milliseconds.
fn millis_bound(v: &str) -> Result<Option<std::time::Duration>, ()> {
    match v.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(ms) => Ok(Some(std::time::Duration::from_millis(ms))),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Ok(None),
        Err(_) => Err(()),
    }
}

/// The message buffers of an endpoint of `kind` on `nic` with `slots` ring entries: a small
/// buffer ([`MSG_BUF_BYTES`]) for each, and classes of larger ones up to the endpoint's
/// longest message ([`EpKind::max_msg_size`]), [`LARGE_CLASS_BYTES`] each, made when first
/// used.
pub(crate) fn message_buffers(
    nic: &uet_driver::Nic,
    kind: EpKind,
    slots: usize,
) -> Result<DmaPoolSet, DriverError> {
    DmaPoolSet::new(
        nic,
        MSG_BUF_BYTES,
        u32::try_from(slots.max(1)).unwrap_or(u32::MAX),
        kind.max_msg_size(nic).max(MSG_BUF_BYTES),
        LARGE_CLASS_BYTES,
    )
}

/// `fi_cancel`: the receive posted with `op_context` `context` (untagged or tagged) and not
/// yet taken by a message is withdrawn on the NIC; its completion then reaches the receive
/// CQ as an error entry (`FI_ECANCELED`, the context, `FI_RECV` with `FI_MSG` or `FI_TAGGED`
/// and a tagged receive's tag, `len` 0, the buffer untouched) and a bound
/// receive counter counts an error. A multi-receive buffer a message is arriving into stays
/// posted after that message: it is withdrawn once the message is in, at a read of the
/// endpoint's CQ or counter (0; the message's completion comes first). `-FI_ENOENT` when no
/// such receive is posted: never posted, already completed (its completion is or will be in
/// the CQ), one a message is arriving into, a multi-receive buffer on a NIC older than host
/// interface 1.19 (each completes on its own), a send's context
/// (sends are not cancelled), or a NULL context (an operation posted without a context is
/// not cancelled, as fi_endpoint(3) has it). `-FI_EAGAIN` while the endpoint's completion ring is full (read
/// the CQ and retry); `-FI_ENOSYS` on a NIC older than host interface 1.14.
unsafe extern "C" fn ep_cancel(fid: *mut Fid, context: *mut c_void) -> isize {
    const CALL: &str = "fi_cancel";
    entry(CALL, || {
        // SAFETY: called through the endpoint's own ops.
        let e = unsafe { ep_ref(fid, CALL) }?;
        if e.role.check_serves(false, CALL).is_err() {
            // A transmit context posts sends only, which are not cancelled.
            return Err(FiError::new(
                FiErrno::FI_ENOENT,
                format!("{CALL}: a transmit context posts no receive"),
            ));
        }
        e.shared.lock().cancel(context as u64, CALL)?;
        Ok(0)
    }) as isize
}

/// `fi_getopt`: `FI_OPT_MIN_MULTI_RECV` (a `size_t`: what `fi_setopt` set, else the NIC's
/// default of one MTU), and `FI_OPT_CM_DATA_SIZE` of an `FI_EP_MSG` endpoint
/// ([`crate::pep::cm_getopt`]); `FI_ETOOSMALL` with `*optlen` set when the buffer is shorter
/// than a `size_t`, `-FI_ENOPROTOOPT` for any other option, for the connection data on
/// other endpoint types, which have none, and for every option of a scalable endpoint's
/// transmit context, which posts no receive.
unsafe extern "C" fn ep_getopt(
    fid: *mut Fid,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    const CALL: &str = "fi_getopt";
    entry(CALL, || {
        // SAFETY: called through the endpoint's own ops.
        let e = unsafe { ep_ref(fid, CALL) }?;
        no_option_of_a_transmit_context(CALL, e, level, optname)?;
        if level == FI_OPT_ENDPOINT && optname == FI_OPT_MIN_MULTI_RECV {
            let value = e.min_multi_recv(CALL)?;
            // SAFETY: libfabric's contract on `optval` and `optlen`.
            return unsafe { put_size_opt(CALL, "FI_OPT_MIN_MULTI_RECV", value, optval, optlen) };
        }
        if e.kind != EpKind::Msg {
            return Err(FiError::new(
                FiErrno::FI_ENOPROTOOPT,
                format!(
                    "{CALL}: level {level}, option {optname}: an {} endpoint serves \
                     FI_OPT_MIN_MULTI_RECV only",
                    e.kind.name()
                ),
            ));
        }
        // SAFETY: libfabric's contract on `optval` and `optlen`.
        unsafe { crate::pep::cm_getopt(CALL, level, optname, optval, optlen) }
    })
}

/// `-FI_ENOPROTOOPT` for a scalable endpoint's transmit context: it posts no receive, and
/// `FI_OPT_MIN_MULTI_RECV` is its ring set's receive context's, whose value it must neither
/// set nor read as its own.
fn no_option_of_a_transmit_context(
    call: &str,
    e: &UetEp,
    level: c_int,
    optname: c_int,
) -> Result<(), FiError> {
    if let Role::Context { tx: true, .. } = e.role {
        return Err(FiError::new(
            FiErrno::FI_ENOPROTOOPT,
            format!(
                "{call}: level {level}, option {optname}: a transmit context serves no option \
                 (FI_OPT_MIN_MULTI_RECV is its receive context's)"
            ),
        ));
    }
    Ok(())
}

/// `fi_setopt`: `FI_OPT_MIN_MULTI_RECV`, a `size_t` (`optlen` its size, else `-FI_EINVAL`)
/// of at most `u32::MAX` (the NIC's descriptor field; else `-FI_EINVAL`), for the
/// multi-receive buffers posted from then on. `FI_OPT_CM_DATA_SIZE` is read only, any other
/// option unknown, and a scalable endpoint's transmit context, which posts no receive, sets
/// none: `-FI_ENOPROTOOPT`.
unsafe extern "C" fn ep_setopt(
    fid: *mut Fid,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    const CALL: &str = "fi_setopt";
    entry(CALL, || {
        // SAFETY: called through the endpoint's own ops.
        let e = unsafe { ep_ref(fid, CALL) }?;
        no_option_of_a_transmit_context(CALL, e, level, optname)?;
        if level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV {
            return Err(FiError::new(
                FiErrno::FI_ENOPROTOOPT,
                format!(
                    "{CALL}: level {level}, option {optname}: FI_OPT_MIN_MULTI_RECV is the one \
                     option an endpoint sets (FI_OPT_CM_DATA_SIZE is read only)"
                ),
            ));
        }
        if optval.is_null() {
            return Err(null(CALL, "optval"));
        }
        if optlen != core::mem::size_of::<usize>() {
            return Err(FiError::inval(format!(
                "{CALL}: FI_OPT_MIN_MULTI_RECV is a size_t of {} bytes, not {optlen}",
                core::mem::size_of::<usize>()
            )));
        }
        // SAFETY: `optval` holds a `size_t` (libfabric's contract; its length checked
        // above); it need not be aligned.
        let value = unsafe { optval.cast::<usize>().read_unaligned() };
        if u32::try_from(value).is_err() {
            return Err(FiError::inval(format!(
                "{CALL}: FI_OPT_MIN_MULTI_RECV {value}: the NIC takes at most {}",
                u32::MAX
            )));
        }
        e.shared.lock().min_multi_recv = Some(value);
        Ok(0)
    })
}

/// `fi_getname`: the endpoint's UET address in the `fi_info`'s format (32 bytes, or with
/// `FI_ADDR_STR` its NUL-terminated string, which an AV of that format inserts as it is);
/// `-FI_ETOOSMALL` with `*addrlen` set
/// when the buffer is shorter.
unsafe extern "C" fn ep_getname(fid: *mut Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    const CALL: &str = "fi_getname";
    entry(CALL, || {
        // SAFETY: called through the endpoint's own ops.
        let e = unsafe { ep_ref(fid, CALL) }?;
        // SAFETY: NULL or valid (libfabric's contract).
        let addrlen = unsafe { addrlen.as_mut() }.ok_or_else(|| null(CALL, "addrlen"))?;
        let st = e.shared.lock();
        let driver = st.driver.as_ref().ok_or_else(|| {
            FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!("{CALL}: the endpoint has its address once enabled (fi_enable)"),
            )
        })?;
        let bytes = address_in(e.addr_format, driver.address(), CALL)?;
        // SAFETY: libfabric's contract on `addr` and `addrlen`.
        unsafe { put_address(CALL, &bytes, addr, addrlen) }
    })
}

/// `fi_getpeer`: the connected peer's UET address, in the format `fi_getname` uses; `-FI_ETOOSMALL` with
/// `*addrlen` set when the buffer is shorter, `-FI_ENOTCONN` while not connected.
unsafe extern "C" fn ep_getpeer(ep: *mut FidEp, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    const CALL: &str = "fi_getpeer";
    entry(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        e.check_connected_kind(CALL)?;
        let st = e.shared.lock();
        let peer = st
            .driver
            .as_ref()
            .ok_or_else(|| {
                FiError::new(
                    FiErrno::FI_ENOTCONN,
                    format!("{CALL}: the endpoint is not connected"),
                )
            })?
            .peer_address()
            .map_err(|e| driver_error(CALL, &e))?;
        let bytes = address_in(e.addr_format, &peer, CALL)?;
        // SAFETY: libfabric's contract on `addr` and `addrlen`.
        unsafe { put_address(CALL, &bytes, addr, addrlen) }
    })
}

/// The listener's address `fi_connect` names, in the endpoint's address format: the 32-byte
/// UET address, or its string (`FI_ADDR_STR`), as serialized bytes.
///
/// # Safety
/// `addr` is NULL or holds an address of that format.
unsafe fn listener_address(e: &UetEp, addr: *const c_void, call: &str) -> Result<Vec<u8>, FiError> {
    if addr.is_null() {
        return Err(null(call, "addr"));
    }
    let bad = |why: String| FiError::inval(format!("{call}: addr: {why}"));
    let a = match e.addr_format {
        AddrFormat::Uet => {
            // SAFETY: a UET address is ADDRESS_BYTES long (the caller's promise).
            let bytes = unsafe {
                core::slice::from_raw_parts(addr.cast::<u8>(), uet_fwif::address::ADDRESS_BYTES)
            };
            uet_fwif::UetAddress::from_bytes(bytes).map_err(|e| bad(e.to_string()))?
        }
        AddrFormat::Str => {
            // SAFETY: a NUL-terminated string (the caller's promise).
            let text = unsafe { crate::info::c_str(addr.cast(), "addr") }?.unwrap_or_default();
            parse_addr_str_with(text, system_resolver)?
        }
    };
    Ok(a.to_bytes().map_err(|e| bad(e.to_string()))?.to_vec())
}

/// `fi_connect`: ask the listener at `addr` for a connection, sending `param` (cut to what
/// the protocol carries). `FI_CONNECTED`, or an `FI_ECONNREFUSED` error, follows on the EQ;
/// an `FI_ETIMEDOUT` error when no answer came within [`CONNECT_TIMEOUT_VAR`].
/// Enables the endpoint first if it is not. `-FI_ENOEQ` without an EQ; `-FI_EOPBADSTATE`
/// once a connection was asked for, whatever its outcome (once in a lifetime, fi_cm(3)).
unsafe extern "C" fn ep_connect(
    ep: *mut FidEp,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    const CALL: &str = "fi_connect";
    entry(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        e.check_connected_kind(CALL)?;
        // SAFETY: libfabric's contract: `param` holds `paramlen` bytes, `addr` an address.
        let (param, listener) = unsafe {
            (
                cm_param(CALL, param, paramlen)?,
                listener_address(e, addr, CALL)?,
            )
        };
        let mut st = e.shared.lock();
        no_eq(&st, CALL)?;
        enable(e, &mut st, CALL)?;
        let driver = st
            .driver
            .as_mut()
            .ok_or_else(|| FiError::inval(format!("{CALL}: not enabled")))?;
        driver
            .set_connect_timeout(connect_timeout_from_env())
            .map_err(|e| driver_error(CALL, &e))?;
        driver
            .connect(&listener, param)
            .map_err(|e| driver_error(CALL, &e))?;
        Ok(0)
    })
}

/// The environment variable giving `fi_connect`'s timeout, in milliseconds: how long a
/// connection request waits for an accept or a reject before it ends with an `FI_ETIMEDOUT`
/// error entry. `0`, or more than 64 bits of milliseconds: no deadline; unset:
/// [`uet_driver::CM_CONNECT_TIMEOUT`] (5 s). Read at each `fi_connect`.
pub const CONNECT_TIMEOUT_VAR: &str = "FI_UET_CONNECT_TIMEOUT";

/// `fi_connect`'s timeout from `value`, the value of [`CONNECT_TIMEOUT_VAR`] (`None` when
/// unset); `None` for no deadline. A number of milliseconds too large for 64 bits (longer
/// than any deadline the clock holds) is no deadline too. A value that is not a number of
/// milliseconds is logged, and the default taken.
pub fn connect_timeout(value: Option<&str>) -> Option<std::time::Duration> {
    let default = Some(uet_driver::CM_CONNECT_TIMEOUT);
    let Some(v) = value else {
        return default;
    };
    millis_bound(v).unwrap_or_else(|()| {
        tracing::warn!(
            "{CONNECT_TIMEOUT_VAR}={v:?} is not a number of milliseconds; fi_connect times \
             out after {:?}",
            uet_driver::CM_CONNECT_TIMEOUT
        );
        default
    })
}

/// [`connect_timeout`] of the environment.
pub(crate) fn connect_timeout_from_env() -> Option<std::time::Duration> {
    match std::env::var(CONNECT_TIMEOUT_VAR) {
        Ok(v) => connect_timeout(Some(&v)),
        Err(std::env::VarError::NotPresent) => connect_timeout(None),
        Err(std::env::VarError::NotUnicode(_)) => connect_timeout(Some("(not UTF-8)")),
    }
}

/// `FI_ENOEQ` for an endpoint without an EQ: it could not report its connection.
fn no_eq(st: &EpState, call: &str) -> Result<(), FiError> {
    if st.eq.is_none() {
        return Err(FiError::new(
            FiErrno::FI_ENOEQ,
            format!("{call}: bind an EQ to the endpoint first (fi_ep_bind)"),
        ));
    }
    Ok(())
}

/// `fi_accept`: the endpoint, opened with an `FI_CONNREQ`'s `fi_info`, takes that request,
/// sending `param`. `FI_CONNECTED` follows on its EQ (and the requester's). Enables the
/// endpoint first if it is not. `-FI_ENOEQ` without an EQ, `-FI_EINVAL` for an endpoint
/// opened without a request or whose request is answered.
unsafe extern "C" fn ep_accept(ep: *mut FidEp, param: *const c_void, paramlen: usize) -> c_int {
    const CALL: &str = "fi_accept";
    entry(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        e.check_connected_kind(CALL)?;
        // SAFETY: libfabric's contract: `param` holds `paramlen` bytes.
        let param = unsafe { cm_param(CALL, param, paramlen) }?;
        if e.connreq.is_null() {
            return Err(FiError::inval(format!(
                "{CALL}: the endpoint was not opened with the fi_info of an FI_CONNREQ event"
            )));
        }
        let mut st = e.shared.lock();
        no_eq(&st, CALL)?;
        if !crate::pep::is_request(e.connreq) {
            return Err(FiError::inval(format!(
                "{CALL}: the endpoint's connection request is answered already, or its \
                 listener was closed"
            )));
        }
        enable(e, &mut st, CALL)?;
        let driver = st
            .driver
            .as_mut()
            .ok_or_else(|| FiError::inval(format!("{CALL}: not enabled")))?;
        crate::pep::accept(CALL, e.connreq, driver, param)?;
        Ok(0)
    })
}

/// `fi_shutdown`: end the connection; the peer gets `FI_SHUTDOWN`. `-FI_ENOTCONN` when not
/// connected; sends fail with `-FI_ENOTCONN` from then on. The driver has the NIC take no
/// more of the peer's data (from host interface 1.20) before the receives are flushed, so
/// that a message of the peer's arriving after fails at the peer (`FI_EACCES`).
unsafe extern "C" fn ep_shutdown(ep: *mut FidEp, flags: u64) -> c_int {
    const CALL: &str = "fi_shutdown";
    entry(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        e.check_connected_kind(CALL)?;
        if flags != 0 {
            return Err(FiError::badflags(format!("{CALL}: flags {flags:#x}")));
        }
        let mut st = e.shared.lock();
        let driver = st.driver.as_mut().ok_or_else(|| {
            FiError::new(
                FiErrno::FI_ENOTCONN,
                format!("{CALL}: the endpoint is not connected"),
            )
        })?;
        driver.shutdown().map_err(|e| driver_error(CALL, &e))?;
        // fi_cm(3): the canceled receives' completions are written before fi_shutdown
        // returns.
        st.flush_receives();
        Ok(0)
    })
}

/// How a send relates to `FI_INJECT`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Inject {
    /// A send with no `FI_INJECT`.
    No,
    /// `fi_sendmsg` or `fi_tsendmsg` with `FI_INJECT`, which fi_msg(3) limits to messages of
    /// at most `inject_size` bytes: a longer one is `FI_EMSGSIZE`, as it is from
    /// `fi_inject`, whatever the state of the endpoint's buffers and rings, and nothing is
    /// posted.
    Flag,
    /// An `fi_inject` of an endpoint that retries refused messages, sent from a buffer of
    /// the endpoint's so that a retry has its message: limited as [`Inject::Flag`], it
    /// reports no success, only a failure (with no context, as an inject's), and a bound
    /// counter counts it.
    Silent,
}

impl Inject {
    /// [`Inject::Flag`] when a call's `flags` hold `FI_INJECT`.
    fn of(flags: u64) -> Inject {
        if flags & FI_INJECT != 0 {
            Inject::Flag
        } else {
            Inject::No
        }
    }
}

/// Post a send of `iov`'s bytes to `dest`, gathered into one of the endpoint's buffers, as
/// `inject` says.
#[allow(clippy::too_many_arguments)]
fn send(
    e: &UetEp,
    call: &str,
    iov: &IoList,
    dest: FiAddr,
    context: u64,
    data: u64,
    report: bool,
    matching: Matching,
    inject: Inject,
) -> Result<(), FiError> {
    e.check_serves(true, call)?;
    e.role.check_enabled(true, call)?;
    let total = iov
        .as_slice()
        .iter()
        .try_fold(0usize, |t, &(_, l)| t.checked_add(l));
    let Some(total) = total else {
        return Err(FiError::new(
            FiErrno::FI_EMSGSIZE,
            format!("{call}: the iovecs' lengths overflow"),
        ));
    };
    let mut st = e.shared.lock();
    if inject != Inject::No {
        // Not enabled: `ready` refuses the call.
        if let Some(max) = st.driver.as_ref().map(Endpoint::inject_size) {
            if total > max {
                return Err(FiError::new(
                    FiErrno::FI_EMSGSIZE,
                    format!("{call}: {total} bytes with FI_INJECT: inject_size is {max}"),
                ));
            }
        }
    }
    // A message longer than the largest buffer is `FI_EMSGSIZE` however full the queue is,
    // and nothing is taken or made for it.
    if let Some(max) = st.pool.as_ref().map(DmaPoolSet::max_size) {
        if total > max {
            return Err(FiError::new(
                FiErrno::FI_EMSGSIZE,
                format!("{call}: a message is at most {max} bytes (ep_attr->max_msg_size)"),
            ));
        }
    }
    // Sends waiting for their retry hold their places in the transmit queue: with the queue
    // full of outstanding sends, the application reads its CQ and tries again, before a
    // buffer is taken (or a class of them made) for the message.
    if !st.retries.is_empty() {
        let in_flight = st.driver.as_ref().map_or(0, |d| d.in_flight().0 as usize);
        if st.retries.len().saturating_add(in_flight) >= st.tx_room {
            return Err(FiError::new(FiErrno::FI_EAGAIN, String::new()));
        }
    }
    // Refuses a message no buffer holds (`FI_EMSGSIZE`) before any slice is made of the
    // application's bytes.
    let mut buffer = st.ready(call, total)?;
    let mut parts: [&[u8]; IOV_LIMIT] = [&[]; IOV_LIMIT];
    for (part, &(base, len)) in parts.iter_mut().zip(iov.as_slice()) {
        if len > 0 {
            // SAFETY: the application gave `len` readable bytes at `base` for the call
            // (libfabric's contract; NULL with a length was refused when the list was made),
            // and `len` is at most the buffer's size (checked by `ready`), far below
            // `isize::MAX`.
            *part = unsafe { core::slice::from_raw_parts(base as *const u8, len) };
        }
    }
    buffer
        .fill_parts(&parts[..iov.len])
        .map_err(|e| FiError::new(e.errno(), format!("{call}: {e}")))?;
    let token = st.hold(Posted::Send {
        context,
        report,
        matching,
        dest,
        data,
        refused: None,
        silent: inject == Inject::Silent,
    });
    let driver = st
        .driver
        .as_mut()
        .ok_or_else(|| FiError::inval("not enabled"))?;
    let posted = match matching {
        Matching::Untagged => driver.post_send(dest, buffer, token, data),
        Matching::Tagged { tag, .. } => driver.post_tsend(dest, buffer, tag, token, data),
    };
    if let Err((err, _buffer)) = posted {
        st.take(token);
        return Err(driver_error(call, &err));
    }
    Ok(())
}

/// Post a receive into `iov`.
fn recv(
    e: &UetEp,
    call: &str,
    iov: &IoList,
    context: u64,
    report: bool,
    matching: Matching,
) -> Result<(), FiError> {
    recv_as(
        e,
        call,
        iov,
        context,
        report,
        matching,
        TaggedRecvKind::Receive,
    )
}

/// Post the application's buffer `iov` as a multi-receive buffer (`FI_MULTI_RECV`,
/// fi_msg(3)): the NIC places untagged messages one after another into an endpoint buffer
/// of the same size (up to `ep_attr->max_msg_size`: a larger buffer is used up to that
/// size), each completing on its own with `buf` pointing at its copy in the application's
/// buffer, and releases it once less than `FI_OPT_MIN_MULTI_RECV` bytes are left (or a
/// message does not fit what is left), in the completion that carries `FI_MULTI_RECV`.
/// `FI_EINVAL` for other than one iovec of at least one byte, `FI_EBADFLAGS` on an
/// endpoint opened with capabilities that leave `FI_MULTI_RECV` out.
fn recv_multi(
    e: &UetEp,
    call: &str,
    iov: &IoList,
    context: u64,
    report: bool,
) -> Result<(), FiError> {
    e.check_serves(false, call)?;
    e.role.check_enabled(false, call)?;
    if e.caps != 0 && e.caps & FI_MULTI_RECV == 0 {
        return Err(FiError::badflags(format!(
            "{call}: FI_MULTI_RECV on an endpoint whose caps ({:#x}) leave it out",
            e.caps
        )));
    }
    let &[(_, len)] = iov.as_slice() else {
        return Err(FiError::inval(format!(
            "{call}: a multi-receive buffer is one iovec, not {}",
            iov.len
        )));
    };
    if len == 0 {
        return Err(FiError::inval(format!(
            "{call}: a multi-receive buffer of 0 bytes holds no message"
        )));
    }
    let mut st = e.shared.lock();
    let max = st.max_buffer();
    let mut buffer = st.ready_recv(call, len.min(max))?;
    // The NIC places messages at the offsets they will have in the application's buffer,
    // and releases the buffer by the space that buffer has left.
    buffer.limit(len);
    let min_free = st.min_multi_recv;
    let token = st.hold(Posted::Recv {
        context,
        report,
        matching: Matching::Untagged,
        iov: *iov,
        withdrawn: false,
        probe: false,
        claim: None,
        multi: true,
        cancelled: false,
    });
    let Some(driver) = st.driver.as_mut() else {
        st.take(token);
        return Err(not_enabled(call));
    };
    if let Err((err, _buffer)) = driver.post_recv_multi(buffer, min_free, token) {
        st.take(token);
        return Err(driver_error(call, &err));
    }
    Ok(())
}

/// What a tagged `fi_trecvmsg` asks for (fi_tagged(3)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaggedRecvKind {
    /// A receive.
    Receive,
    /// `FI_PEEK` (with `FI_CLAIM` or `FI_DISCARD`), or `FI_CLAIM | FI_DISCARD`.
    Probe(TaggedProbe),
    /// `FI_CLAIM`: the message claimed with this claim (the receive's `fi_context`).
    Claimed(u64),
}

impl TaggedRecvKind {
    /// The kind `flags` ask for; the claim is the receive's context, which fi_tagged(3) makes
    /// the same `struct fi_context` for a claim and the receive that takes the message.
    fn of(flags: u64, context: u64, call: &str) -> Result<Self, FiError> {
        let probe = flags & (FI_PEEK | FI_CLAIM | FI_DISCARD);
        if probe & FI_CLAIM != 0 && context == 0 {
            return Err(FiError::inval(format!(
                "{call}: FI_CLAIM needs a struct fi_context as the context, the same for the \
                 claim and the receive that takes the message"
            )));
        }
        Ok(match probe {
            0 => TaggedRecvKind::Receive,
            FI_PEEK => TaggedRecvKind::Probe(TaggedProbe::Peek),
            x if x == FI_PEEK | FI_CLAIM => TaggedRecvKind::Probe(TaggedProbe::PeekClaim(context)),
            x if x == FI_PEEK | FI_DISCARD => TaggedRecvKind::Probe(TaggedProbe::PeekDiscard),
            FI_CLAIM => TaggedRecvKind::Claimed(context),
            x if x == FI_CLAIM | FI_DISCARD => TaggedRecvKind::Probe(TaggedProbe::Discard(context)),
            _ => {
                return Err(FiError::badflags(format!(
                    "{call}: flags {flags:#x}: FI_DISCARD goes with FI_PEEK or FI_CLAIM, not \
                     alone or with both"
                )))
            }
        })
    }
}

/// [`recv`], or a tagged probe or claim (`kind`).
fn recv_as(
    e: &UetEp,
    call: &str,
    iov: &IoList,
    context: u64,
    report: bool,
    matching: Matching,
    kind: TaggedRecvKind,
) -> Result<(), FiError> {
    e.check_serves(false, call)?;
    e.role.check_enabled(false, call)?;
    let mut st = e.shared.lock();
    let probe = matches!(kind, TaggedRecvKind::Probe(_));
    // A probe takes no buffer, but is refused on an endpoint not enabled as a receive is,
    // before it holds a slot.
    let buffer = if probe {
        st.enabled(call)?;
        None
    } else {
        // A buffer as large as the application's, up to the longest message: a message
        // longer than the application's buffers is cut by the NIC or, within the endpoint's
        // buffer, when it is copied out, and completes `FI_ETRUNC` either way.
        let room = iov
            .as_slice()
            .iter()
            .fold(0usize, |t, &(_, l)| t.saturating_add(l));
        let max = st.max_buffer();
        Some(st.ready_recv(call, room.min(max))?)
    };
    let token = st.hold(Posted::Recv {
        context,
        // The results of a probe are only in its completion (fi_tagged(3)).
        report: report || probe,
        matching,
        iov: *iov,
        withdrawn: false,
        probe,
        claim: match kind {
            TaggedRecvKind::Probe(TaggedProbe::PeekClaim(claim)) => Some(Claim::Makes(claim)),
            TaggedRecvKind::Claimed(claim) | TaggedRecvKind::Probe(TaggedProbe::Discard(claim)) => {
                Some(Claim::Ends(claim))
            }
            _ => None,
        },
        multi: false,
        cancelled: false,
    });
    let Some(driver) = st.driver.as_mut() else {
        st.take(token);
        return Err(not_enabled(call));
    };
    let posted = match (matching, kind, buffer) {
        (Matching::Untagged, _, Some(buffer)) => driver.post_recv(buffer, token).map_err(|e| e.0),
        (Matching::Tagged { tag, ignore }, TaggedRecvKind::Receive, Some(buffer)) => driver
            .post_trecv(buffer, tag, ignore, token)
            .map_err(|e| e.0),
        (Matching::Tagged { .. }, TaggedRecvKind::Claimed(claim), Some(buffer)) => driver
            .post_trecv_claimed(buffer, claim, token)
            .map_err(|e| e.0),
        (Matching::Tagged { tag, ignore }, TaggedRecvKind::Probe(p), _) => {
            driver.post_tprobe(p, tag, ignore, 0, token)
        }
        _ => Err(DriverError::InvalidArgument(
            "a probe or claim is a tagged receive".into(),
        )),
    };
    if let Err(err) = posted {
        st.take(token);
        return Err(driver_error(call, &err));
    }
    Ok(())
}

/// An operation on an endpoint not enabled (`fi_enable`).
fn not_enabled(call: &str) -> FiError {
    FiError::new(
        FiErrno::FI_EOPBADSTATE,
        format!("{call}: the endpoint is not enabled (fi_enable)"),
    )
}

fn driver_error(call: &str, e: &DriverError) -> FiError {
    FiError::new(e.errno(), format!("{call}: {e}"))
}

/// The application's iovecs. `FI_EINVAL` for more than [`IOV_LIMIT`] or a NULL base with a
/// length.
///
/// # Safety
/// `iov` is NULL or holds `count` iovecs.
unsafe fn iovecs(iov: *const IoVec, count: usize, call: &str) -> Result<IoList, FiError> {
    if count > IOV_LIMIT {
        return Err(FiError::inval(format!(
            "{call}: {count} iovecs (iov_limit {IOV_LIMIT})"
        )));
    }
    let mut list = IoList::default();
    if count == 0 {
        return Ok(list);
    }
    if iov.is_null() {
        return Err(null(call, "iov"));
    }
    // SAFETY: `count` iovecs (the caller's promise).
    let v = unsafe { core::slice::from_raw_parts(iov, count) };
    for (part, i) in list.parts.iter_mut().zip(v) {
        if i.iov_base.is_null() && i.iov_len > 0 {
            return Err(null(call, "an iovec's base"));
        }
        *part = (i.iov_base as usize, i.iov_len);
    }
    list.len = count;
    Ok(list)
}

/// One buffer as an iovec list. `FI_EINVAL` for a NULL buffer with a length.
fn one(buf: *const c_void, len: usize, call: &str) -> Result<IoList, FiError> {
    if buf.is_null() && len > 0 {
        return Err(null(call, "buf"));
    }
    let mut list = IoList::default();
    list.parts[0] = (buf as usize, len);
    list.len = 1;
    Ok(list)
}

/// A `ssize_t` return of a data call: 0 or the negative errno.
fn data_call(call: &str, f: impl FnOnce() -> Result<(), FiError>) -> isize {
    entry(call, || f().map(|()| 0)) as isize
}

unsafe extern "C" fn ep_send(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest_addr: FiAddr,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_send";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        send(
            e,
            CALL,
            &one(buf, len, CALL)?,
            dest_addr,
            context as u64,
            0,
            e.tx_report(),
            Matching::Untagged,
            Inject::No,
        )
    })
}

unsafe extern "C" fn ep_senddata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest_addr: FiAddr,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_senddata";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        send(
            e,
            CALL,
            &one(buf, len, CALL)?,
            dest_addr,
            context as u64,
            data,
            e.tx_report(),
            Matching::Untagged,
            Inject::No,
        )
    })
}

unsafe extern "C" fn ep_sendv(
    ep: *mut FidEp,
    iov: *const IoVec,
    _desc: *mut *mut c_void,
    count: usize,
    dest_addr: FiAddr,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_sendv";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer; `iov` holds `count` iovecs.
        let (e, v) = unsafe { (ep_ref(ep.cast(), CALL)?, iovecs(iov, count, CALL)?) };
        send(
            e,
            CALL,
            &v,
            dest_addr,
            context as u64,
            0,
            e.tx_report(),
            Matching::Untagged,
            Inject::No,
        )
    })
}

unsafe extern "C" fn ep_sendmsg(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> isize {
    const CALL: &str = "fi_sendmsg";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        // SAFETY: NULL or a valid message (libfabric's contract).
        let m = unsafe { msg.as_ref() }.ok_or_else(|| null(CALL, "msg"))?;
        if flags & !SENDMSG_FLAGS != 0 {
            return Err(FiError::badflags(format!("{CALL}: flags {flags:#x}")));
        }
        e.check_completion_level(CALL, flags)?;
        // SAFETY: `msg_iov` holds `iov_count` iovecs (libfabric's contract).
        let v = unsafe { iovecs(m.msg_iov, m.iov_count, CALL) }?;
        let data = if flags & FI_REMOTE_CQ_DATA != 0 {
            m.data
        } else {
            0
        };
        send(
            e,
            CALL,
            &v,
            m.addr,
            m.context as u64,
            data,
            flags & FI_COMPLETION != 0,
            Matching::Untagged,
            Inject::of(flags),
        )
    })
}

unsafe extern "C" fn ep_inject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    dest_addr: FiAddr,
) -> isize {
    // SAFETY: the same contract, without data.
    unsafe { inject(ep, buf, len, 0, dest_addr, None, "fi_inject") }
}

unsafe extern "C" fn ep_injectdata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: FiAddr,
) -> isize {
    // SAFETY: libfabric's contract on the arguments.
    unsafe { inject(ep, buf, len, data, dest_addr, None, "fi_injectdata") }
}

/// `fi_inject`, `fi_injectdata` (and with a tag `fi_tinject`, `fi_tinjectdata`): the payload
/// is copied before the call returns (into the NIC's ring; into a buffer of the endpoint's,
/// on an endpoint that retries refused messages, so that a retry has it), and no completion
/// is reported unless the send fails (an error completion with no context).
///
/// # Safety
/// `ep` is NULL or live; `buf` holds `len` bytes.
#[allow(clippy::too_many_arguments)]
unsafe fn inject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: FiAddr,
    tag: Option<u64>,
    call: &str,
) -> isize {
    data_call(call, || {
        // SAFETY: the caller's promise.
        let e = unsafe { ep_ref(ep.cast(), call) }?;
        e.check_serves(true, call)?;
        e.role.check_enabled(true, call)?;
        if buf.is_null() && len > 0 {
            return Err(null(call, "buf"));
        }
        let mut st = e.shared.lock();
        if st.retry.is_some() {
            // A refused message is retried: the endpoint keeps this one in a buffer of its
            // own, as a send's, so that a retry has it to post again.
            // `send` refuses one longer than inject_size.
            drop(st);
            let v = one(buf, len, call)?;
            let matching = tag.map_or(Matching::Untagged, tagged);
            return send(e, call, &v, dest, 0, data, false, matching, Inject::Silent);
        }
        let driver = st.driver.as_mut().ok_or_else(|| {
            FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!("{call}: the endpoint is not enabled"),
            )
        })?;
        if len > driver.inject_size() {
            return Err(FiError::new(
                FiErrno::FI_EMSGSIZE,
                format!(
                    "{call}: {len} bytes: inject_size is {}",
                    driver.inject_size()
                ),
            ));
        }
        // Made once the length is known to fit: no slice is made of more bytes than a
        // message can hold.
        let payload: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: `buf` holds `len` readable bytes (the caller's promise), and is not
            // NULL (checked above).
            unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) }
        };
        match tag {
            None => driver.inject(dest, payload, data),
            Some(tag) => driver.tinject(dest, payload, tag, data),
        }
        .map_err(|e| driver_error(call, &e))?;
        st.injects += 1;
        Ok(())
    })
}

unsafe extern "C" fn ep_recv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    _src_addr: FiAddr,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_recv";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        // `rx_attr->op_flags` with `FI_MULTI_RECV`: every flagless receive posts a
        // multi-receive buffer.
        if e.rx_op_flags & FI_MULTI_RECV != 0 {
            return recv_multi(
                e,
                CALL,
                &one(buf, len, CALL)?,
                context as u64,
                e.rx_report(),
            );
        }
        recv(
            e,
            CALL,
            &one(buf, len, CALL)?,
            context as u64,
            e.rx_report(),
            Matching::Untagged,
        )
    })
}

unsafe extern "C" fn ep_recvv(
    ep: *mut FidEp,
    iov: *const IoVec,
    _desc: *mut *mut c_void,
    count: usize,
    _src_addr: FiAddr,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_recvv";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer; `iov` holds `count` iovecs.
        let (e, v) = unsafe { (ep_ref(ep.cast(), CALL)?, iovecs(iov, count, CALL)?) };
        // `rx_attr->op_flags` with `FI_MULTI_RECV`: every flagless receive posts a
        // multi-receive buffer.
        if e.rx_op_flags & FI_MULTI_RECV != 0 {
            return recv_multi(e, CALL, &v, context as u64, e.rx_report());
        }
        recv(
            e,
            CALL,
            &v,
            context as u64,
            e.rx_report(),
            Matching::Untagged,
        )
    })
}

unsafe extern "C" fn ep_recvmsg(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> isize {
    const CALL: &str = "fi_recvmsg";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        // SAFETY: NULL or a valid message (libfabric's contract).
        let m = unsafe { msg.as_ref() }.ok_or_else(|| null(CALL, "msg"))?;
        if flags & !RECVMSG_FLAGS != 0 {
            return Err(FiError::badflags(format!("{CALL}: flags {flags:#x}")));
        }
        // SAFETY: `msg_iov` holds `iov_count` iovecs (libfabric's contract).
        let v = unsafe { iovecs(m.msg_iov, m.iov_count, CALL) }?;
        if flags & FI_MULTI_RECV != 0 {
            return recv_multi(e, CALL, &v, m.context as u64, flags & FI_COMPLETION != 0);
        }
        recv(
            e,
            CALL,
            &v,
            m.context as u64,
            flags & FI_COMPLETION != 0,
            Matching::Untagged,
        )
    })
}

/// Untagged sends match nothing but untagged receives; a tagged send carries `tag`.
fn tagged(tag: u64) -> Matching {
    Matching::Tagged { tag, ignore: 0 }
}

unsafe extern "C" fn ep_tsend(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest_addr: FiAddr,
    tag: u64,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_tsend";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        let v = one(buf, len, CALL)?;
        send(
            e,
            CALL,
            &v,
            dest_addr,
            context as u64,
            0,
            e.tx_report(),
            tagged(tag),
            Inject::No,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_tsenddata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest_addr: FiAddr,
    tag: u64,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_tsenddata";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        let v = one(buf, len, CALL)?;
        send(
            e,
            CALL,
            &v,
            dest_addr,
            context as u64,
            data,
            e.tx_report(),
            tagged(tag),
            Inject::No,
        )
    })
}

unsafe extern "C" fn ep_tsendv(
    ep: *mut FidEp,
    iov: *const IoVec,
    _desc: *mut *mut c_void,
    count: usize,
    dest_addr: FiAddr,
    tag: u64,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_tsendv";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer; `iov` holds `count` iovecs.
        let (e, v) = unsafe { (ep_ref(ep.cast(), CALL)?, iovecs(iov, count, CALL)?) };
        send(
            e,
            CALL,
            &v,
            dest_addr,
            context as u64,
            0,
            e.tx_report(),
            tagged(tag),
            Inject::No,
        )
    })
}

unsafe extern "C" fn ep_tsendmsg(ep: *mut FidEp, msg: *const FiMsgTagged, flags: u64) -> isize {
    const CALL: &str = "fi_tsendmsg";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        // SAFETY: NULL or a valid message (libfabric's contract).
        let m = unsafe { msg.as_ref() }.ok_or_else(|| null(CALL, "msg"))?;
        if flags & !TSENDMSG_FLAGS != 0 {
            return Err(FiError::badflags(format!(
                "{CALL}: flags {flags:#x} (FI_MATCH_COMPLETE cannot be met: a tagged message \
                 that arrives before its receive completes at once)"
            )));
        }
        e.check_completion_level(CALL, flags)?;
        // SAFETY: `msg_iov` holds `iov_count` iovecs (libfabric's contract).
        let v = unsafe { iovecs(m.msg_iov, m.iov_count, CALL) }?;
        let data = if flags & FI_REMOTE_CQ_DATA != 0 {
            m.data
        } else {
            0
        };
        let report = flags & FI_COMPLETION != 0;
        send(
            e,
            CALL,
            &v,
            m.addr,
            m.context as u64,
            data,
            report,
            tagged(m.tag),
            Inject::of(flags),
        )
    })
}

unsafe extern "C" fn ep_tinject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    dest_addr: FiAddr,
    tag: u64,
) -> isize {
    // SAFETY: libfabric's contract on the arguments.
    unsafe { inject(ep, buf, len, 0, dest_addr, Some(tag), "fi_tinject") }
}

unsafe extern "C" fn ep_tinjectdata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: FiAddr,
    tag: u64,
) -> isize {
    // SAFETY: libfabric's contract on the arguments.
    unsafe { inject(ep, buf, len, data, dest_addr, Some(tag), "fi_tinjectdata") }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_trecv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    _src_addr: FiAddr,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_trecv";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        let v = one(buf, len, CALL)?;
        recv(
            e,
            CALL,
            &v,
            context as u64,
            e.rx_report(),
            Matching::Tagged { tag, ignore },
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_trecvv(
    ep: *mut FidEp,
    iov: *const IoVec,
    _desc: *mut *mut c_void,
    count: usize,
    _src_addr: FiAddr,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    const CALL: &str = "fi_trecvv";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer; `iov` holds `count` iovecs.
        let (e, v) = unsafe { (ep_ref(ep.cast(), CALL)?, iovecs(iov, count, CALL)?) };
        recv(
            e,
            CALL,
            &v,
            context as u64,
            e.rx_report(),
            Matching::Tagged { tag, ignore },
        )
    })
}

unsafe extern "C" fn ep_trecvmsg(ep: *mut FidEp, msg: *const FiMsgTagged, flags: u64) -> isize {
    const CALL: &str = "fi_trecvmsg";
    data_call(CALL, || {
        // SAFETY: the application's endpoint pointer.
        let e = unsafe { ep_ref(ep.cast(), CALL) }?;
        // SAFETY: NULL or a valid message (libfabric's contract).
        let m = unsafe { msg.as_ref() }.ok_or_else(|| null(CALL, "msg"))?;
        if flags & !TRECVMSG_FLAGS != 0 {
            return Err(FiError::badflags(format!("{CALL}: flags {flags:#x}")));
        }
        let kind = TaggedRecvKind::of(flags, m.context as u64, CALL)?;
        // fi_tagged(3): with FI_DISCARD the input buffers and length are ignored.
        let v = if flags & FI_DISCARD != 0 {
            IoList::default()
        } else {
            // SAFETY: `msg_iov` holds `iov_count` iovecs (libfabric's contract).
            unsafe { iovecs(m.msg_iov, m.iov_count, CALL) }?
        };
        let matching = Matching::Tagged {
            tag: m.tag,
            ignore: m.ignore,
        };
        recv_as(
            e,
            CALL,
            &v,
            m.context as u64,
            flags & FI_COMPLETION != 0,
            matching,
            kind,
        )
    })
}

/// `fi_close` of an endpoint: it leaves the NIC and its bindings.
unsafe extern "C" fn ep_close(fid: *mut Fid) -> c_int {
    const CALL: &str = "fi_close(ep)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let e = unsafe { ep_ref(fid, CALL) }?;
        if let Role::Context { sep, tx, index } = e.role {
            // SAFETY: the scalable endpoint cannot close while its contexts are open.
            let sep = unsafe { &*sep };
            sep.close_context(tx, index, || {
                // Its direction's bindings only: the ring set stays with the scalable
                // endpoint, and the other direction's context of its index keeps its own.
                let mut st = e.shared.lock();
                // What the NIC completed already reaches this direction's CQ and counter
                // before they are unbound, as at an endpoint's close. A refused send
                // waiting for its retry is outstanding: it is not posted again, and a
                // transmit context's are discarded with its other operations.
                st.drain_ring();
                st.orphan(tx);
                if tx {
                    st.discard_orphaned_retries();
                }
                if !tx {
                    // Its receives leave the NIC now, so a message sent to the index while
                    // it is closed finds none (it waits on the NIC's unexpected list), rather
                    // than landing in one and being discarded.
                    if let Err(e) = st.cancel_orphan_receives() {
                        tracing::debug!(error = %e, "a closed receive context's receives stay posted");
                    }
                    // The messages it claimed and did not take no later context could take.
                    st.discard_claims();
                    // Its option goes with it: a context opened again on the index starts
                    // from the default (the buffers posted already keep theirs).
                    st.min_multi_recv = None;
                }
                let (cq, other_cq) = if tx {
                    (st.tx_cq.take(), st.rx_cq)
                } else {
                    (st.rx_cq.take(), st.tx_cq)
                };
                if let Some(b) = cq {
                    let still = other_cq.is_some_and(|o| core::ptr::eq(o.cq, b.cq));
                    // SAFETY: a bound CQ stays open while the endpoint is bound to it.
                    unsafe { &*b.cq }.detach(&e.shared, still);
                }
                let (cntr, other_cntr) = if tx {
                    (st.tx_cntr.take(), st.rx_cntr)
                } else {
                    (st.rx_cntr.take(), st.tx_cntr)
                };
                if let Some(c) = cntr {
                    let still = other_cntr.is_some_and(|o| core::ptr::eq(o, c));
                    // SAFETY: a bound counter stays open while the endpoint is bound to it.
                    unsafe { &*c }.detach(&e.shared, still);
                }
            });
            // SAFETY: made by `Box::into_raw` in `open_context`; the application gives it up.
            drop(unsafe { Box::from_raw(fid.cast::<UetEp>()) });
            return Ok(0);
        }
        // In a process forked while a thread of the parent held the lock, only if it is free.
        let Some(mut st) = e.shared.made_in.lock(&e.shared.state) else {
            if let Some(av) = e.shared.abandon() {
                // SAFETY: a bound AV stays open while the endpoint is bound to it.
                unsafe { &*av }.eps.fetch_sub(1, Ordering::AcqRel);
            }
            // SAFETY: the domain outlives its endpoints.
            unsafe { &*e.domain }
                .endpoints
                .fetch_sub(1, Ordering::AcqRel);
            // SAFETY: made by `Box::into_raw` in `domain_endpoint`; the application gives it
            // up.
            drop(unsafe { Box::from_raw(fid.cast::<UetEp>()) });
            return Ok(0);
        };
        let av = {
            // The operations the NIC has completed already (their completions are in the
            // ring) reach the bound counters and CQs, as a read would take them: a count or
            // completion is not lost for the endpoint's close. The lock is held from here to
            // ENDPOINT_DESTROY, so no post or read comes between; an operation the NIC has not
            // completed when the drain finds the ring empty was outstanding when fi_close was
            // called, and is discarded unreported with the rings (fi_endpoint(3)), even if the
            // NIC completes it before ENDPOINT_DESTROY. So is a receive of a connection shut
            // down that no read has flushed yet: the ring is read, no receive withdrawn.
            st.drain_ring();
            // The NIC's endpoint first (ENDPOINT_DESTROY; a connected one shuts its
            // connection down), then its buffers; then its events the EQ still holds.
            let id = st.driver.as_ref().map(Endpoint::fid);
            drop(st.driver.take());
            if let (Some(id), Some(link), EpKind::Msg) = (id, st.eq.as_ref(), e.kind) {
                link.forget(id);
            }
            // Refused sends waiting for another try are outstanding too.
            st.retries.clear();
            drop(st.pool.take());
            st.posted.clear();
            st.free.clear();
            drop(st.eq.take());
            for b in [st.tx_cq.take(), st.rx_cq.take()].into_iter().flatten() {
                // SAFETY: a bound CQ stays open while the endpoint is bound to it.
                unsafe { &*b.cq }.detach(&e.shared, false);
            }
            for c in [st.tx_cntr.take(), st.rx_cntr.take()].into_iter().flatten() {
                // SAFETY: a bound counter stays open while the endpoint is bound to it.
                unsafe { &*c }.detach(&e.shared, false);
            }
            st.av.take()
        };
        if let Some(av) = av {
            // SAFETY: a bound AV stays open while the endpoint is bound to it.
            unsafe { &*av }.eps.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: the domain outlives its endpoints.
        unsafe { &*e.domain }
            .endpoints
            .fetch_sub(1, Ordering::AcqRel);
        // SAFETY: made by `Box::into_raw` in `domain_endpoint`; the application gives it up.
        drop(unsafe { Box::from_raw(fid.cast::<UetEp>()) });
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_fwif::datapath::{CompletionKind, LocalStatus};

    /// A completion the NIC made for the operation of `token`.
    fn event(token: u64, op: CqOp, error: Option<FiErrno>) -> CqEvent {
        CqEvent {
            kind: match op {
                CqOp::Recv => CompletionKind::Recv,
                CqOp::TaggedRecv => CompletionKind::TaggedRecv,
                _ => CompletionKind::Send,
            },
            op,
            context: token,
            len: 0,
            data: 0,
            src_addr: 0,
            tag: 0,
            group: 0,
            error: error.map(|errno| uet_driver::CqError {
                errno,
                local: LocalStatus::Remote,
                return_code: None,
                olen: 0,
            }),
            buffer: None,
            multi_recv: None,
            report: false,
        }
    }

    /// A CQ binding that `complete` names and never reads.
    fn binding(at: usize) -> Option<CqBinding> {
        Some(CqBinding {
            cq: core::ptr::without_provenance(at),
            selective: false,
        })
    }

    /// The operations of a closed context complete after a context of its index opened
    /// again and bound a CQ of its own: the new CQ gets none of them, and the new context's
    /// own completions go to it.
    #[test]
    fn a_closed_contexts_operations_complete_nowhere_once_its_index_opens_again() {
        let lane = EpShared::lane(true);
        let mut st = lane.lock();
        (st.tx_cq, st.rx_cq) = (binding(0x1000), binding(0x2000));
        let send = st.hold(Posted::Send {
            context: 5,
            report: true,
            matching: Matching::Untagged,
            dest: 0,
            data: 0,
            refused: None,
            silent: false,
        });
        let recv = st.hold(Posted::Recv {
            context: 6,
            report: true,
            matching: Matching::Tagged { tag: 1, ignore: 0 },
            iov: IoList::default(),
            withdrawn: false,
            probe: false,
            claim: None,
            multi: false,
            cancelled: false,
        });
        // The transmit context closes: its send is left to the ring set, the receive
        // context's receive is not.
        st.orphan(true);
        assert!(st.orphan_receives().is_empty());
        st.tx_cq = binding(0x3000);
        let new_send = st.hold(Posted::Send {
            context: 7,
            report: true,
            matching: Matching::Untagged,
            dest: 0,
            data: 0,
            refused: None,
            silent: false,
        });
        assert!(st.complete(event(send, CqOp::Send, None)).is_none());
        let (cq, c) = st
            .complete(event(new_send, CqOp::Send, None))
            .expect("the new context's send");
        assert_eq!((cq as usize, c.entry.op_context as usize), (0x3000, 7));
        // The receive context closes and opens again; the old receive, cancelled, completes
        // with an error that reaches no CQ.
        st.orphan(false);
        assert_eq!(st.orphan_receives().len(), 1);
        st.rx_cq = binding(0x4000);
        let ev = event(recv, CqOp::TaggedRecv, Some(FiErrno::FI_ECANCELED));
        assert!(st.complete(ev).is_none());
        assert!(st.orphan_receives().is_empty());
        assert!(st.posted.iter().all(Option::is_none));
    }

    /// The ring set follows the claims the NIC holds: an `FI_PEEK | FI_CLAIM` that found a
    /// message makes one, one that found none does not, and the `FI_CLAIM` receive ends it,
    /// also once its context closed.
    #[test]
    fn the_claims_held_are_those_reported_and_not_yet_taken() {
        let lane = EpShared::lane(true);
        let mut st = lane.lock();
        st.rx_cq = binding(0x1000);
        let recv = |st: &mut EpState, claim: Claim| {
            st.hold(Posted::Recv {
                context: 0xC1,
                report: true,
                matching: Matching::Tagged { tag: 1, ignore: 0 },
                iov: IoList::default(),
                withdrawn: false,
                probe: matches!(claim, Claim::Makes(_)),
                claim: Some(claim),
                multi: false,
                cancelled: false,
            })
        };
        let none = recv(&mut st, Claim::Makes(0xC1));
        let _ = st.complete(event(none, CqOp::TaggedRecv, Some(FiErrno::FI_ENOMSG)));
        assert!(st.claims.is_empty(), "no message found, no claim");
        let found = recv(&mut st, Claim::Makes(0xC1));
        let mut ev = event(found, CqOp::TaggedRecv, None);
        ev.report = true;
        assert!(st.complete(ev).is_some());
        assert_eq!(st.claims, [0xC1]);
        let take = recv(&mut st, Claim::Ends(0xC1));
        st.orphan(false);
        assert!(st.complete(event(take, CqOp::TaggedRecv, None)).is_none());
        assert!(st.claims.is_empty(), "taken");
        assert!(st.posted.iter().all(Option::is_none));
    }

    /// An `fi_inject` of a closed transmit context still in flight keeps its index from
    /// opening again (`FI_EBUSY`: try again), for its completion carries no token and would
    /// land on the new context's counter or CQ; once it completes (here it fails, its error
    /// read off the ring with no CQ bound) the index opens, and the new context's own failed
    /// inject is reported on its CQ.
    #[test]
    fn a_transmit_index_does_not_open_again_while_an_inject_of_its_closed_context_is_in_flight() {
        let lane = EpShared::lane(true);
        {
            let mut st = lane.lock();
            st.tx_cq = binding(0x1000);
            // Posted on the NIC (what `inject` counts once the driver has it).
            st.injects += 1;
            // The transmit context closes.
            st.orphan(true);
            st.tx_cq = None;
        }
        let e = lane
            .reclaim(true, "fi_tx_context")
            .expect_err("the old inject is in flight");
        assert_eq!(e.errno, FiErrno::FI_EBUSY);
        {
            let mut st = lane.lock();
            let failed = event(0, CqOp::Send, Some(FiErrno::FI_ENORX));
            assert!(st.complete(failed).is_none(), "no CQ is bound");
            assert_eq!(st.injects, 0);
        }
        lane.reclaim(true, "fi_tx_context")
            .expect("the index opens once the inject completed");
        let mut st = lane.lock();
        st.tx_cq = binding(0x3000);
        st.injects += 1;
        let failed = event(0, CqOp::TaggedSend, Some(FiErrno::FI_ENORX));
        let (cq, c) = st
            .complete(failed)
            .expect("the new context's failed inject");
        assert_eq!((cq as usize, c.entry.op_context as usize), (0x3000, 0));
        assert_eq!(st.injects, 0);
    }
}
