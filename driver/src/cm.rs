//! Connection management (`fi_cm(3)`): passive endpoints and connected `FI_EP_MSG` endpoints.
//!
//! The NIC knows no connections; it carries the provider's control messages
//! ([`uet_fwif::cm`]) on resource index 0 of an endpoint, its control channel. The host keeps
//! the state and reports through an event queue:
//!
//! | step | call | wire (SEND to resource index 0) | events |
//! |---|---|---|---|
//! | listen | [`Nic::passive_endpoint`] (its own rings are its control channel) | — | — |
//! | request | [`Endpoint::connect`]`(listener address, param)` | CONNREQ to the listener | listener's EQ: `FI_CONNREQ`, `data` = the request's id, `cm_data` = param; [`PassiveEndpoint::connreq`] gives the requester's address |
//! | accept | [`PassiveEndpoint::accept`]`(req, &mut ep, param)` | ACCEPT from `ep` to the requester; READY from the requester once it has taken the ACCEPT in | requester's EQ: `FI_CONNECTED`, `cm_data` = param, as it sends the READY; `ep`'s EQ: `FI_CONNECTED` when the READY arrives |
//! | no READY | — (`ep`'s deadline, its connect timeout, passes) | — | `ep`'s EQ: error `FI_ETIMEDOUT`; `ep` is idle again, free to accept another request |
//! | reject | [`PassiveEndpoint::reject`]`(req, param)` | REJECT from the listener | requester's EQ: error `FI_ECONNREFUSED` (`cm_data`: the param, byte for byte; `err_data`: why) |
//! | no answer | — (the request's deadline, [`CM_CONNECT_TIMEOUT`] by default, passes) | — | requester's EQ: error `FI_ETIMEDOUT` |
//! | close | [`Endpoint::shutdown`], or dropping the connected endpoint (`fi_close`) | SHUTDOWN to the peer | peer's EQ: `FI_SHUTDOWN` |
//! | close the listener | drop the [`PassiveEndpoint`] | REJECT of every request left unanswered | each requester's EQ: error `FI_ECONNREFUSED` |
//! | the NIC stops | — (a fatal error, or its function reset under the driver) | nothing more | within [`CM_IDLE_RECHECK`] (the progress thread's next look), on its side: the listener's EQ, an error `FI_EIO`; a pending request's, an accept's and a connection's, an error `FI_EIO`, each then refused, idle or shut down |
//!
//! A connected endpoint's peer is in the endpoint's own AV (an `FI_EP_MSG` endpoint is never
//! bound to an application's AV): the connecting side inserts the accepting endpoint's address
//! when the ACCEPT arrives, the accepting side the requester's when it accepts. Every
//! operation of a connected endpoint goes to that peer: the send path reads the connection
//! state and the peer's `fi_addr` from two atomics, with no lock and no lookup. A request
//! whose CONNREQ cannot be delivered (no listener at that PIDonFEP, wrong JobID) is refused
//! the same way as a REJECT, with the UET return code as `prov_errno`; one that reaches an
//! endpoint that does not listen (an active `FI_EP_MSG` endpoint) is answered with a REJECT.
//! One that finds the listener with no receive free (`RC_UNDELIVERABLE`: more requests came
//! at once than its control ring holds, faster than its progress thread posts them again) is
//! not refused while the listener's backlog may have room: its CONNREQ is sent again after
//! 1 ms, twice as long after each try that finds none (up to 100 ms), until the request's
//! deadline.
//! So is an ACCEPT that reaches an endpoint that made no such request (the requester closed
//! and the NIC gave its PIDonFEP to a new endpoint, the accepting one itself included): the
//! accepting endpoint then gets `FI_ECONNABORTED`, as when its ACCEPT cannot be delivered
//! at all, and is idle again.
//!
//! A connected endpoint takes data from its peer only (fi_endpoint(3), fi_cm(3)): on a NIC of
//! interface 1.20 or later it is created with `EP_FLAG_CONNECTED`, so that the NIC refuses
//! every send, tagged send and RMA request to it, whoever makes it, until the endpoint names
//! its peer with ENDPOINT_PEER (`uet_fwif::admin`, *Connected endpoints*): the accepting
//! side when it accepts, before its ACCEPT goes; the requesting side when it takes the
//! ACCEPT in, before its READY goes. So the peer's data, which may follow the READY at once,
//! is taken, and anyone else's is refused with RC_PERM_VIOLATION: the sender's operation
//! fails with `FI_EACCES`, and nothing lands in the endpoint's receives. An accept given up
//! names nobody again, and so does a connection shut down, by either side, at the point its
//! receives are due to be flushed: [`Endpoint::shutdown`] once its SHUTDOWN is sent (before
//! it returns, so before `fi_shutdown` flushes them), the peer's SHUTDOWN before it is
//! taken in (before the endpoint reads as shut down). The peer's data that arrives after
//! that, whether sent racing the SHUTDOWN or overtaken by it (a SHUTDOWN goes on the control
//! ring, and `shutdown` does not wait for the sends in flight on the data ring), is refused,
//! and the peer's operation fails with `FI_EACCES` instead of completing for bytes nobody
//! will read (in a receive about to be flushed, or on the NIC's unexpected list). Data
//! acknowledged before stays where it landed. `shutdown` does not wait for this side's
//! sends in flight: their completions are the application's to read from its CQ, which the
//! driver cannot take without reading them itself, and one its SHUTDOWN overtakes fails at
//! this side with `FI_EACCES` rather than completing undelivered. The control channel takes
//! anyone's messages, as it must for a connection to be made. On an older NIC a connected
//! endpoint takes data from any sender of its job that names its address (received with
//! `src_addr` `FI_ADDR_NOTAVAIL`), its peer's after a shutdown too: data that arrives after
//! the endpoint's receives were flushed lands on the NIC's unexpected list, and its send
//! completes without error.
//!
//! The acceptor is connected by the requester's READY, not by the NIC's acknowledgement of
//! the ACCEPT, as InfiniBand's connection manager waits for its RTU: the acknowledgement
//! says that the ACCEPT reached a receive ring, not that the requester is still there to
//! read it. A requester closed as the ACCEPT arrives either takes it in as it closes (it is
//! then connected, and its close sends a SHUTDOWN after the READY), or refuses it (a request
//! still pending is given up when its close begins, and a later ACCEPT answered with a
//! REJECT), or is gone when it arrives (the ACCEPT cannot be delivered: its channel
//! withdrew its receives before it went, so nothing lands in a ring nobody reads). In each
//! case the acceptor hears of it: `FI_CONNECTED` and then `FI_SHUTDOWN`, or
//! `FI_ECONNABORTED`. A NIC older than interface 1.14 cannot withdraw receives: an ACCEPT
//! that lands after the requester's last look at its ring is read by nobody, and its
//! acceptor hears of it only at its deadline (`FI_ETIMEDOUT`; never, without one). A READY
//! that finds its acceptor no longer waiting for it (its deadline passed, or it accepted
//! another requester since, whatever that request's id) is answered with a REJECT, which
//! ends the requester's connection with `FI_SHUTDOWN`; one that cannot be delivered (the
//! acceptor closed) ends it too. An acceptor closed before the READY comes sends a
//! SHUTDOWN once its ACCEPT was delivered, which the requester reads after the ACCEPT; if
//! the ACCEPT is still not delivered when the close stops waiting, it sends nothing that
//! could overtake it, and withdraws its receives, so that the READY is refused; a READY
//! that comes before that (the ACCEPT was delivered after all) is answered with a SHUTDOWN,
//! which the requester, having taken the ACCEPT in, reads after it. On a NIC older than
//! interface 1.14 such an acceptor keeps its receives: a READY that lands after its last
//! look, before the endpoint is destroyed, is read by nobody, and its requester stays
//! connected to an endpoint that is gone (its sends fail as undeliverable).
//!
//! A request neither accepted nor rejected within its deadline (the listener's application
//! never answers it, or never reads its EQ; the peer hung) times out: the requester gets an
//! error entry with its fid and `err = FI_ETIMEDOUT`, and is left as a refused one is (another
//! `connect` is `FI_EOPBADSTATE`, sends `FI_ENOTCONN`). An ACCEPT that arrives after that is
//! answered with a REJECT, so the accepting endpoint gets `FI_ECONNABORTED` instead of
//! waiting for a READY; a late REJECT is dropped and counted. The deadline is
//! [`CM_CONNECT_TIMEOUT`] (5 s: a datacenter fabric answers in microseconds, so an
//! unanswered request is a hung or overloaded peer, and rdma_cm's address and route
//! resolution, which libfabric's verbs provider bounds at 2 s, are of that order) unless
//! [`Endpoint::set_connect_timeout`] set another, or none, before `connect` (the provider
//! reads it from `FI_UET_CONNECT_TIMEOUT`). An accept waits for its READY as long: the
//! accepting endpoint's connect timeout when it accepts.
//!
//! Messages are checked: a malformed one, one of an unknown connection (its `conn_id`), a
//! SHUTDOWN whose source is not the peer, a REJECT of a request from anywhere but where the
//! request went, a REJECT of an accept or a connection from anywhere but the peer's address
//! (the peer, or the endpoint that took its PIDonFEP), a message naming a request pending
//! at the listener (a second CONNREQ, or a READY or ACCEPT: never answered with a REJECT,
//! which would refuse the request) or one of the last [`ANSWERED_REMEMBERED`] it answered
//! (a copy would reach the application as a new request), a READY or ACCEPT that names the peer as its sender
//! without coming from it (once connected, one naming a sender at the peer's Fabric Address
//! and PIDonFEP with any initiator), or a CONNREQ reaching an endpoint that accepts or is connected
//! that names a sender at its peer's Fabric Address and PIDonFEP (a peer asks a listener,
//! never its peer, and the REJECT would end the connection there), is dropped and counted ([`PassiveEndpoint::dropped`],
//! [`Endpoint::cm_dropped`]). The source is the AV entry the NIC found the sender at; a
//! sender in no entry is the peer only for the requester's messages that landed before it
//! took the ACCEPT in, and had an entry for the acceptor. A REJECT comes from the
//! listener's (or the peer's) address when the NIC found its sender at that entry, or found
//! it in none and it names a sender at that entry's Fabric Address and PIDonFEP with
//! another initiator: the endpoint the NIC gave that PIDonFEP to since the other closed.
//!
//! Control progress is automatic (`FI_PROGRESS_AUTO`): each passive endpoint and each
//! `FI_EP_MSG` endpoint has a thread that takes in its control channel's completions and
//! posts the events; it stops when the endpoint is dropped. The thread sleeps until there is
//! something to do, so an idle connection costs no CPU: it empties the control channel's
//! completion ring, arms the ring with an MSI-X vector (`CQ_ARM`, see [`crate::interrupt`];
//! a completion written since the ring was found empty raises it at once), and sleeps in
//! `poll(2)` until the vector is raised or the endpoint's drop writes an eventfd to stop it.
//! Every control message, sent or received, completes on that ring, so the only other thing
//! that needs the thread is a pending request's deadline: its sleep ends no later than that
//! (`connect` wakes it to sleep again with the deadline in view), and otherwise after
//! [`CM_IDLE_RECHECK`] of silence, to look at the ring again in case an interrupt was lost.
//! A thread that polls (below) looks at the deadline at each pass.
//!
//! The control channels of a NIC take at most half of its vectors (none of a single one),
//! the others being left to the application's completion queues (`fi_cq_sread`,
//! `FI_WAIT_FD`, `fi_trywait`), which need one per endpoint. Within that share, taken when
//! the endpoint is made:
//!
//! | control channels | the thread sleeps on |
//! |---|---|
//! | the first ones, while more than half of the vectors (rounded up) plus one are free | a vector of its own, whose eventfd it reads itself |
//! | the others (any number) | one vector they share: a dispatcher thread waits on it, clears it, looks at the members' rings (a read of the head entry's phase) and writes the eventfd of each thread whose ring holds a completion; the thread sleeps on that eventfd. The dispatcher and the vector go with the last member |
//! | none: a NIC older than interface 1.12, a backend without interrupts, or no vector left for the shared one | nothing: it reads its ring every [`CM_POLL_INTERVAL`], as it always did, at the CPU cost that implies (about 5,000 wakeups a second per connection) |
//!
//! A control message to a thread on the shared vector costs one more thread wakeup (the
//! dispatcher's), and each raise of the shared vector a look at every member's ring, which
//! only traffic on the control channels (connections made and closed) causes.
//!
//! The close paths that wait for the control channel (room for a REJECT or a SHUTDOWN, an
//! accept in flight, a SHUTDOWN's send completing) sleep on what the progress thread does:
//! each pass that takes in completions wakes them, as does a request or accept timing out,
//! and they wait no longer than their deadline.
//!
//! | misuse | error |
//! |---|---|
//! | `connect`, `shutdown`, `bind_eq`, `set_connect_timeout` on an endpoint that is not `FI_EP_MSG`; `accept` of such an endpoint | `FI_EOPNOTSUPP` |
//! | `connect` or `accept` without a bound EQ | `FI_ENOEQ` |
//! | `connect` while connecting or connected, `accept` of an endpoint that is | `FI_EOPBADSTATE` |
//! | accepting or rejecting a request already accepted or rejected (also by a racing `accept` or `reject`: the one that comes second), or taking it again from its event ([`PassiveEndpoint::connreq`]) | `FI_EINVAL` |
//! | sending on an endpoint that is not connected (yet, or any more), `shutdown` of one | `FI_ENOTCONN` |
//! | a param longer than [`MAX_CM_DATA`], a malformed address, a request of another listener | `FI_EINVAL` |
//!
//! A request answered already is no longer a request (fi_cm(3): the `handle` of an
//! `FI_CONNREQ` is used once, by `fi_accept` or `fi_reject`): answering it again is an
//! invalid argument, `FI_EINVAL`, as using any handle that names no pending request is, and
//! not a state of the listener (which stays as it was).

use crate::av::Av;
use crate::endpoint::{CqEvent, Endpoint, EndpointAttr, EpType, RingSizes};
use crate::eq::{EqBinding, EqErrEntry, EqEvent, EqEventKind, EventQueue};
use crate::error::DriverError;
use crate::interrupt::{CqSignal, Vector};
use crate::nic::Nic;
use crate::pool::DmaPool;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use uet_av::{AvAttr, FiErrno};
use uet_fwif::address::UetAddress;
use uet_fwif::admin::{CTX_ROLE_CONTROL, EP_FLAG_CONNECTED, EP_FLAG_PASSIVE};
use uet_fwif::cm::{CmKind, CmMessage, MAX_CM_DATA, MAX_CM_MESSAGE};
use uet_fwif::CompletionKind;

/// How often a control channel is polled when its progress thread has no MSI-X vector.
pub const CM_POLL_INTERVAL: Duration = Duration::from_micros(200);
/// How long a control progress thread asleep on its vector waits before it looks at its ring
/// anyway: a safety net for an interrupt lost (a masked function), never the way a control
/// message is noticed.
pub const CM_IDLE_RECHECK: Duration = Duration::from_secs(1);
/// How long a connection request waits for an ACCEPT or a REJECT by default before it ends
/// with `FI_ETIMEDOUT` (see the module docs; [`Endpoint::set_connect_timeout`] changes it).
pub const CM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection request whose CONNREQ found no receive free at the listener waits
/// before it is sent again; each try that finds none doubles the wait, up to
/// [`CM_CONNREQ_RETRY_MAX`] (see the module docs).
const CM_CONNREQ_RETRY: Duration = Duration::from_millis(1);
/// The longest wait between two tries of a CONNREQ that finds no receive free.
const CM_CONNREQ_RETRY_MAX: Duration = Duration::from_millis(100);
/// Control-channel ring sizes: 8 sends, 16 receives.
const CONTROL_RINGS: RingSizes = RingSizes {
    tx_log2: 3,
    rx_log2: 4,
    trx_log2: 0,
    cq_log2: 5,
};
/// Control buffers: the receive ring's plus a few sends.
const CONTROL_BUFFERS: u32 = 32;
/// The accept numbers an ACCEPT's context carries above its kind's byte ([`CmInner`]).
const ACCEPT_NUMBERS: u64 = (1 << 56) - 1;
/// Peers a passive endpoint's AV holds at once (requesters awaiting a REJECT).
const LISTENER_AV_ENTRIES: usize = 64;
/// Entries of an `FI_EP_MSG` endpoint's own AV (the listener, then the peer).
const MSG_AV_ENTRIES: usize = 4;
/// Connection requests a listener holds unanswered (a `listen` backlog), and the most
/// [`PassiveEndpoint::set_backlog`] takes; more are rejected, and their requesters get
/// `FI_ECONNREFUSED`.
pub const CM_BACKLOG: usize = 1024;

/// Requests a listener remembers once the application answered them (accepted or
/// rejected), the most recent first to stay: a copy of one that reaches the listener is a
/// forgery, dropped instead of reported as a new request.
pub const ANSWERED_REMEMBERED: usize = 1024;

const IDLE: u8 = 0;
const CONNECTING: u8 = 1;
const ACCEPTING: u8 = 2;
const CONNECTED: u8 = 3;
const SHUT_DOWN: u8 = 4;
const REFUSED: u8 = 5;

fn state_name(s: u8) -> &'static str {
    match s {
        IDLE => "the endpoint is not connected",
        CONNECTING => "the connection request is still pending",
        ACCEPTING => "the accept is still in flight",
        CONNECTED => "connected",
        SHUT_DOWN => "the connection was shut down",
        _ => "the connection request was refused",
    }
}

/// The next connection id's counter; 0 until the process's first draw starts it where
/// [`conn_id_start`] says.
static NEXT_CONN_ID: AtomicU32 = AtomicU32::new(0);

/// Where a process's connection ids start: a point of its own, drawn from the randomness
/// the standard library seeds its hash maps with (and the process id), so that two
/// processes making the same calls (a client run again, its endpoint at the PIDonFEP and
/// with the fabric id its previous run's had) draw different ids. An ACCEPT or a REJECT
/// answers a request by its id and the requester's address: a late answer to the previous
/// run's request must not be taken for the new one's. Never 0.
fn conn_id_start() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as u32).max(1)
}

/// The `conn_id` of a connection request of the endpoint `fid`: the process's counter, the
/// endpoint's fabric id mixed into its upper half. Two processes' counters start apart
/// ([`conn_id_start`]).
fn draw_conn_id(fid: u64) -> u32 {
    if NEXT_CONN_ID.load(Ordering::Relaxed) == 0 {
        // Lost to another thread's first draw, or to a test's setting: either way started.
        let _ =
            NEXT_CONN_ID.compare_exchange(0, conn_id_start(), Ordering::Relaxed, Ordering::Relaxed);
    }
    NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed) ^ (fid as u32) << 16
}

/// A pending connection request at a passive endpoint (`fi_info` of an `FI_CONNREQ` event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnReq {
    /// The request's id: `data` of the `FI_CONNREQ` event.
    pub id: u64,
    /// The requester's address (`fi_info.dest_addr`).
    pub peer: UetAddress,
    /// The requester's private data.
    pub param: Vec<u8>,
    conn_id: u32,
    listener: u64,
}

struct Pending {
    req: ConnReq,
}

/// Where the current accept's ACCEPT is, as its completion tells. Read only while the
/// endpoint is accepting; an endpoint that is not may hold any value, which its next accept
/// replaces before anything reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AcceptSent {
    /// None sent, its completion said it failed, or its accept was given up while it was in
    /// flight (its completion is then awaited under `stale_accepts`).
    No,
    /// Sent; its completion is not taken in yet.
    InFlight,
    /// The NIC acknowledged its delivery.
    Delivered,
}

/// What the control channel serves.
enum Role {
    /// A listener: requests by id, at most `backlog` of them unanswered.
    Passive {
        pending: HashMap<u64, Pending>,
        next_id: u64,
        backlog: usize,
        /// The last [`ANSWERED_REMEMBERED`] requests answered: requester and `conn_id`.
        answered: VecDeque<(UetAddress, u32)>,
    },
    /// One side of a connection.
    Active {
        conn_id: u32,
        /// AV entry of the listener while connecting.
        listener: Option<u64>,
    },
}

struct CmInner {
    /// The control channel: a passive endpoint's own rings, or an endpoint's CONTROL context.
    lane: Endpoint,
    /// The NIC handle of the connected endpoint, whose peer the NIC is told
    /// ([`CmInner::set_data_peer`]): an endpoint created with `EP_FLAG_CONNECTED`, on a NIC
    /// of interface 1.20 or later. `None` for a listener, and on an older NIC.
    data_endpoint: Option<u16>,
    av: Av,
    pool: DmaPool,
    eq: Option<(EventQueue, EqBinding)>,
    role: Role,
    /// The address control messages name as their sender.
    local: UetAddress,
    scratch: Vec<u8>,
    /// Passes of [`Connection::progress`] that took in a completion, for the waits of the
    /// close paths ([`Connection::wait_until`]).
    generation: u64,
    /// How long a connection request waits for its answer; `None`: without end.
    connect_timeout: Option<Duration>,
    /// When the pending connection request, or the accept waiting for the requester's
    /// READY, times out, while it is pending, and the timeout it was made with (what its
    /// `FI_ETIMEDOUT` entry says it waited).
    connect_deadline: Option<(Instant, Duration)>,
    /// The pending request's param, for its CONNREQ sent again.
    connreq_param: Vec<u8>,
    /// When the pending request's CONNREQ, which found no receive free at the listener, is
    /// sent again, while it waits to be.
    connreq_retry: Option<Instant>,
    /// The wait before the last try of the pending request's CONNREQ (zero before any).
    connreq_backoff: Duration,
    /// Where the current accept's ACCEPT is.
    accept_sent: AcceptSent,
    /// Accepts given up while their ACCEPT was in flight, by number, with the requester's
    /// AV entry: it goes when that ACCEPT completes. A NIC may read the entry as it
    /// transmits, and the entry freed at once would be the next requester's (an AV gives
    /// the lowest free index), which the stale ACCEPT would then reach.
    stale_accepts: Vec<(u64, u64)>,
    /// Accepts this endpoint made (56 bits, wrapping): an ACCEPT is sent with its accept's
    /// number in its context, so that the completion of an earlier accept's ACCEPT (one
    /// that timed out before its send completed) is not taken for the current one's.
    accepts: u64,
    /// An accept of this endpoint timed out waiting for its READY: its requester may still
    /// take the ACCEPT in, and the READY it then sends needs an answer (a REJECT), whatever
    /// the endpoint has done since.
    unconfirmed_accept: bool,
    /// This endpoint's request was given up (at its close) or timed out: its ACCEPT may
    /// still come, and needs an answer (a REJECT). Not one the listener rejected or that
    /// was not delivered: no ACCEPT answers it.
    late_accept: bool,
    /// The last look at the control channel has begun ([`Connection::final_look`]): a
    /// receive that completes is not posted again.
    closing: bool,
    /// The pass of [`Connection::take_in`] under way took this endpoint's ACCEPT in: a
    /// message of the connection it reads after it that the NIC found in no AV entry may
    /// have arrived before the acceptor had one (see [`Connection::is_from_peer`]).
    accept_pass: bool,
    /// The NIC was seen stopped, and what waited was ended ([`Connection::look_for_stop`]).
    nic_stopped: bool,
    /// When the thread last looked at the NIC's status while polling.
    stop_looked: Option<Instant>,
}

impl CmInner {
    /// ENDPOINT_PEER: the connected endpoint takes data (sends, tagged sends, RMA) from the
    /// endpoint at `peer` only, `None`: from nobody. Its control channel still takes anyone's
    /// messages. Nothing to do on a NIC older than interface 1.20, whose endpoint takes data
    /// from any sender.
    fn set_data_peer(&self, peer: Option<&UetAddress>) -> Result<(), DriverError> {
        let Some(handle) = self.data_endpoint else {
            return Ok(());
        };
        // The peer's requests carry the JobID of its entry for this endpoint: this job's.
        let job_id = self.lane.job_id();
        let peer = peer.map(|a| (a.fabric_addr, job_id, a.initiator));
        self.lane.nic_inner().endpoint_peer(handle, peer)
    }

    /// [`CmInner::set_data_peer`] of nobody, once the endpoint is no longer connecting to
    /// its peer (an accept given up) or its connection is shut down (by either side): a
    /// failure only leaves the last peer's data let in. A stopped NIC takes nothing any
    /// more, and is not asked.
    fn clear_data_peer(&self, fid: u64) {
        if self.data_endpoint.is_none() || self.lane.device_stopped() {
            return;
        }
        if let Err(e) = self.set_data_peer(None) {
            tracing::warn!(fid, "the NIC still takes the former peer's data: {e}");
        }
    }
}

/// The state a connection shares with its progress thread.
pub(crate) struct Connection {
    fid: u64,
    state: AtomicU8,
    peer: AtomicU64,
    dropped: AtomicU64,
    /// Passes of the progress thread (each wakeup, or poll): what idleness costs.
    passes: AtomicU64,
    inner: Mutex<CmInner>,
    /// Notified after every pass of [`Connection::progress`] that took in a completion.
    progressed: Condvar,
    /// How the progress thread learns of the control ring's completions. Declared after
    /// `inner`, so that a vector is given back only after the control channel (whose ring
    /// may still have it armed) is destroyed.
    wakeup: Wakeup,
    /// Wakes the progress thread: written by the shared vector's dispatcher for a completion
    /// on this control ring, and at drop to stop the thread.
    signal: CqSignal,
    /// The vector of the endpoint's completion ring, once it has one (its first wait): the
    /// peer's SHUTDOWN raises it ([`Connection::shut_down_by_peer`]).
    completions: std::sync::OnceLock<crate::interrupt::Raise>,
}

/// How a control progress thread learns of its ring's completions (see the module docs).
enum Wakeup {
    /// The ring raises a vector of the thread's own.
    Own(Vector),
    /// The ring raises the vector the NIC's control channels share; its dispatcher writes
    /// the connection's `signal`.
    Shared(Arc<SharedVector>),
    /// No vector: the thread polls.
    Poll,
}

/// The vector the control channels of a NIC share once their own vectors are all taken,
/// and the thread that waits on it: it clears the vector's eventfd, then writes the signal of
/// every member whose ring holds a completion (which its thread takes in, then arms the ring
/// again), then sleeps until the vector is raised again. A completion that lands after the
/// clear raises the vector again, so none is missed; the rings are looked at only when one
/// raised it.
pub(crate) struct SharedVector {
    vector: Vector,
    /// The connections whose rings raise it; a connection leaves before it is destroyed.
    members: Mutex<Vec<std::sync::Weak<Connection>>>,
    stop: AtomicBool,
    stop_signal: CqSignal,
    /// Declared after `vector`: the NIC's slot says no shared vector is going only once it
    /// is back.
    _empties: EmptiesSlot,
}

impl SharedVector {
    fn dispatch(&self) {
        while !self.stop.load(Ordering::Acquire) {
            self.vector.clear();
            self.members
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|m| {
                    let Some(c) = m.upgrade() else {
                        return false;
                    };
                    if c.may_have_completion() && c.signal.signal().is_err() {
                        tracing::warn!(fid = c.fid, "control progress not woken");
                    }
                    true
                });
            if let Err(e) = self
                .vector
                .wait(Some(CM_IDLE_RECHECK), Some(&self.stop_signal))
            {
                tracing::warn!(error = %e, "shared control vector wait failed");
                std::thread::sleep(CM_POLL_INTERVAL);
            }
        }
    }

    fn leave(&self, conn: &Arc<Connection>) {
        // Under the members' lock, which the dispatcher holds while it holds a member: once
        // out, the connection is nobody's but its owner's.
        self.members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|m| !std::ptr::eq(m.as_ptr(), Arc::as_ptr(conn)));
    }
}

/// Where a NIC keeps its [`SharedWakeup`] while any connection uses it: not upgradable but
/// not empty while the last one is going (its vector not yet given back).
pub(crate) type SharedWakeupSlot = Arc<Mutex<std::sync::Weak<SharedWakeup>>>;

/// Empties the NIC's [`SharedWakeupSlot`] when dropped, unless a newer shared vector is in
/// use: the last field of a [`SharedVector`], so that it runs once the vector is back.
struct EmptiesSlot(SharedWakeupSlot);

impl Drop for EmptiesSlot {
    fn drop(&mut self) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if slot.strong_count() == 0 {
            *slot = std::sync::Weak::new();
        }
    }
}

/// Owns a NIC's [`SharedVector`] and its dispatcher thread; each connection using it holds
/// one reference, and the last one gone stops the thread and gives the vector back.
pub(crate) struct SharedWakeup {
    shared: Arc<SharedVector>,
    thread: Option<JoinHandle<()>>,
    /// Where the thread runs: not in a child forked since ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

impl SharedWakeup {
    /// The NIC's shared control vector, made when none is in use; `None` when no vector can
    /// be taken for it (or no thread started). While the last one is going, waits (up to
    /// `CM_IDLE_RECHECK`) for its vector to come back, so that a control channel made as the
    /// last of the others closes does not find the vector taken and poll for its life.
    fn of(nic: &Nic) -> Option<Arc<SharedWakeup>> {
        let give_up = Instant::now() + CM_IDLE_RECHECK;
        let mut slot = loop {
            let slot = nic
                .inner
                .cm_shared_wakeup
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(s) = slot.upgrade() {
                return Some(s);
            }
            if slot.ptr_eq(&std::sync::Weak::new()) || Instant::now() >= give_up {
                break slot;
            }
            drop(slot);
            std::thread::sleep(CM_POLL_INTERVAL);
        };
        let irq = nic.inner.interrupts()?;
        let vector = irq.take_leaving(left_to_applications(irq))?;
        let stop_signal = CqSignal::new()
            .inspect_err(|e| tracing::warn!(error = %e, "no eventfd for the shared control vector"))
            .ok()?;
        let shared = Arc::new(SharedVector {
            vector,
            members: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            stop_signal,
            _empties: EmptiesSlot(nic.inner.cm_shared_wakeup.clone()),
        });
        let d = shared.clone();
        let thread = match std::thread::Builder::new()
            .name("uet-cm-wake".into())
            .spawn(move || d.dispatch())
        {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "no thread for the shared control vector");
                // Let go of the slot first: the vector's drop empties it.
                drop(slot);
                drop(shared);
                return None;
            }
        };
        let s = Arc::new(SharedWakeup {
            made_in: crate::fork::MadeIn::here(),
            shared,
            thread: Some(thread),
        });
        *slot = Arc::downgrade(&s);
        Some(s)
    }
}

impl Drop for SharedWakeup {
    fn drop(&mut self) {
        if self.made_in.in_forked_child() {
            std::mem::forget(self.thread.take());
            return;
        }
        self.shared.stop.store(true, Ordering::Release);
        if self.shared.stop_signal.signal().is_err() {
            tracing::warn!("the shared control vector's thread was not woken to stop");
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the shared control vector's thread panicked");
            }
        }
    }
}

/// Owns a connection's progress thread: dropping it stops the thread, then releases the
/// control channel.
pub(crate) struct CmLink {
    shared: Arc<Connection>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The NIC's shared control vector when the connection uses it: released after the
    /// thread stopped.
    _shared_wakeup: Option<Arc<SharedWakeup>>,
    /// Where the thread runs: not in a child forked since ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

impl CmLink {
    fn start(
        shared: Arc<Connection>,
        shared_wakeup: Option<Arc<SharedWakeup>>,
    ) -> Result<Self, DriverError> {
        let stop = Arc::new(AtomicBool::new(false));
        if let Wakeup::Shared(v) = &shared.wakeup {
            v.members
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Arc::downgrade(&shared));
        }
        let (s, st) = (shared.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("uet-cm".into())
            .spawn(move || s.run(&st))
            .map_err(|e| {
                DriverError::Exhausted(format!("cannot start the control progress thread: {e}"))
            });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                if let Wakeup::Shared(v) = &shared.wakeup {
                    v.leave(&shared);
                }
                return Err(e);
            }
        };
        Ok(CmLink {
            made_in: crate::fork::MadeIn::here(),
            shared,
            stop,
            thread: Some(thread),
            _shared_wakeup: shared_wakeup,
        })
    }

    /// The endpoint's completion ring raises `vector` from now on: a shutdown by the peer
    /// raises it too. The fence pairs with the one in [`Connection::shut_down_by_peer`]: a
    /// waiter that armed the ring after this and then found the connection not shut down
    /// sleeps on a vector the progress thread raises once it marks it so.
    pub(crate) fn note_completion_vector(&self, vector: &Vector) {
        if self.shared.completions.set(vector.raiser()).is_ok() {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }

    /// The peer's `fi_addr` when connected (the send path: two atomic loads).
    #[inline]
    pub(crate) fn peer(&self) -> Result<u64, DriverError> {
        let s = self.shared.state.load(Ordering::Acquire);
        if s == CONNECTED {
            Ok(self.shared.peer.load(Ordering::Relaxed))
        } else {
            Err(DriverError::NotConnected(state_name(s)))
        }
    }
}

impl Drop for CmLink {
    fn drop(&mut self) {
        if self.made_in.in_forked_child() {
            // The connection is the parent's: no thread to stop, no last look to take.
            std::mem::forget(self.thread.take());
            return;
        }
        self.stop.store(true, Ordering::Release);
        if self.shared.signal.signal().is_err() {
            // The thread then sees `stop` when its sleep ends (at most CM_IDLE_RECHECK).
            tracing::warn!(
                fid = self.shared.fid,
                "the control progress thread was not woken to stop"
            );
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the control progress thread panicked");
            }
        }
        self.shared.final_look();
        // Out of the shared vector's members before the control channel goes (with the last
        // reference to the connection, after this).
        if let Wakeup::Shared(v) = &self.shared.wakeup {
            v.leave(&self.shared);
        }
    }
}

/// An AV or event-queue error, its errno kept.
fn fi_err(e: uet_av::FiError) -> DriverError {
    DriverError::Fabric(e)
}

/// Insert a peer's serialized address (`who` names it in errors) into a connection's AV.
fn insert_peer(av: &mut Av, bytes: &[u8], who: &str) -> Result<u64, DriverError> {
    let mut fi = [0u64; 1];
    match av.insert(bytes, 1, Some(&mut fi), 0).map_err(fi_err)? {
        1 => Ok(fi[0]),
        _ => Err(DriverError::InvalidArgument(format!(
            "the {who}'s address was refused by the AV"
        ))),
    }
}

/// The address AV entry `fi_addr` of a connection holds.
fn entry_address(inner: &CmInner, fi_addr: u64) -> Option<UetAddress> {
    let mut bytes = [0u8; uet_fwif::address::ADDRESS_BYTES];
    let mut len = bytes.len();
    inner.av.lookup(fi_addr, &mut bytes, &mut len).ok()?;
    UetAddress::from_bytes(bytes.get(..len)?).ok()
}

/// Take back an entry [`insert_peer`] made for a control message that was not sent.
fn forget_peer(av: &mut Av, fi_addr: u64) {
    if let Err(e) = av.remove(&[fi_addr], 0) {
        tracing::debug!("connection AV entry {fi_addr} not removed: {e}");
    }
}

impl Connection {
    /// Run `send` again while it finds no room (`DriverError::Full`: no control buffer or
    /// TX entry free) and `deadline` has not passed, collecting the completions that free
    /// them between tries. The close paths' sends, which must not give up at the first try.
    fn when_room<T>(
        &self,
        deadline: Instant,
        mut send: impl FnMut() -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        loop {
            let seen = self.lock().generation;
            match send() {
                Err(DriverError::Full(_)) if Instant::now() < deadline => {
                    self.progress();
                    // Room comes with a send's completion: wait for a pass that took one in.
                    self.wait_until(deadline, |inner| inner.generation != seen);
                }
                done => return done,
            }
        }
    }

    /// Wait until `ready` holds of the control state, or `deadline` passes; whether it holds.
    /// `ready` is checked again after every pass of [`Connection::progress`] that took in a
    /// completion (the progress thread's, woken by the control channel's vector or polling,
    /// or another caller's), and after a request or accept timed out
    /// ([`Connection::expire`]), which is when control state changes.
    fn wait_until(&self, deadline: Instant, ready: impl Fn(&CmInner) -> bool) -> bool {
        let mut inner = self.lock();
        loop {
            if ready(&inner) {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            if left.is_zero() {
                return false;
            }
            inner = match self.progressed.wait_timeout(inner, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// The progress thread: take in the control channel's completions whenever there are
    /// some, until `stop` is set (and `signal` written). See the module docs.
    fn run(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            self.passes.fetch_add(1, Ordering::Relaxed);
            if let Wakeup::Poll = self.wakeup {
                // Under one hold of the lock, as below: an answer already taken in wins.
                let mut inner = self.lock();
                self.take_in(&mut inner);
                self.expire(&mut inner);
                self.retry_connreq(&mut inner);
                let due = inner
                    .stop_looked
                    .is_none_or(|at| at.elapsed() >= crate::endpoint::STOPPED_CHECK_INTERVAL);
                if due {
                    inner.stop_looked = Some(Instant::now());
                    self.look_for_stop(&mut inner);
                }
                drop(inner);
                std::thread::sleep(CM_POLL_INTERVAL);
                continue;
            }
            // Emptied and armed under one hold of the lock: a completion that lands after
            // the ring was found empty raises the vector at the arm, so none is slept through.
            // A request answered by a completion taken in here does not time out.
            let (healthy, deadline) = {
                let mut inner = self.lock();
                let healthy = self.take_in(&mut inner);
                // Each pass (a completion, a deadline, or the idle recheck, at least once a
                // [`CM_IDLE_RECHECK`]): two register reads. A NIC that stops raises no vector,
                // so the recheck is what sees it.
                self.look_for_stop(&mut inner);
                let deadline = match (self.expire(&mut inner), self.retry_connreq(&mut inner)) {
                    (Some(d), Some(r)) => Some(d.min(r)),
                    (d, r) => d.or(r),
                };
                match &self.wakeup {
                    Wakeup::Own(v) => inner.lane.arm_with(v),
                    Wakeup::Shared(s) => inner.lane.arm_shared(s.vector.number()),
                    Wakeup::Poll => {}
                }
                (healthy, deadline)
            };
            if !healthy {
                // A ring that cannot be read would raise the vector at once, again and again.
                std::thread::sleep(CM_POLL_INTERVAL);
                continue;
            }
            // No later than the pending request's deadline, or its CONNREQ's next try (the
            // wait rounds up to the next millisecond, so it does not end just before it).
            let nap = deadline.map_or(CM_IDLE_RECHECK, |d| {
                d.saturating_duration_since(Instant::now())
                    .min(CM_IDLE_RECHECK)
            });
            // Taken before the ring is read again: a later signal is for a later completion
            // (or a later `connect`).
            let slept = match &self.wakeup {
                Wakeup::Own(v) => v.wait(Some(nap), Some(&self.signal)),
                _ => self.signal.wait(Some(nap)),
            }
            .inspect(|_| {
                self.signal.take();
            });
            if let Err(e) = slept {
                tracing::warn!(fid = self.fid, error = %e, "control progress wait failed");
                std::thread::sleep(CM_POLL_INTERVAL);
            }
        }
    }

    /// Once the NIC has stopped (a fatal error, or its function reset under the driver), in
    /// which nothing on the control channel completes any more, end with `FI_EIO` what would
    /// otherwise wait on, without end where it has no deadline: a pending connection request
    /// (refused, as at its deadline), an accept waiting for its READY (the endpoint idle
    /// again), a connection (shut down: its sends are `FI_ENOTCONN`), each with an error
    /// entry on its EQ; and a listener, whose EQ gets one error entry, so that an application
    /// asleep on it for requests wakes. Once.
    fn look_for_stop(&self, inner: &mut CmInner) {
        if inner.nic_stopped || !inner.lane.device_stopped() {
            return;
        }
        inner.nic_stopped = true;
        let why = "the NIC stopped (a fatal error, or its function was reset): its control \
                   channel carries nothing more";
        let eio = FiErrno::FI_EIO;
        match (&inner.role, self.get()) {
            (Role::Passive { .. }, _) => self.post_error(
                inner,
                eio,
                0,
                format!("the listener takes no request: {why}"),
            ),
            (_, CONNECTING) => {
                inner.connect_deadline = None;
                inner.connreq_retry = None;
                self.set(REFUSED);
                let text = format!("the connection request cannot be answered: {why}");
                self.post_error(inner, eio, 0, text);
            }
            (_, ACCEPTING) => {
                let text = format!("the accept cannot be confirmed: {why}");
                self.abort_accept(inner, eio, 0, text);
            }
            (_, CONNECTED) => {
                self.set(SHUT_DOWN);
                self.post_error(inner, eio, 0, format!("the connection is lost: {why}"));
            }
            _ => return,
        }
        tracing::error!(fid = self.fid, "{why}");
        // The state changed with no completion: a close waiting on it goes on.
        self.progressed.notify_all();
    }

    /// End the pending connection request, or the accept still waiting for its READY, with
    /// `FI_ETIMEDOUT` if its deadline has passed; the deadline while it is still pending.
    /// A request that timed out is refused: a late ACCEPT is answered with a REJECT. An
    /// accept that timed out leaves the endpoint idle, free to accept another request: a
    /// late READY is answered with a REJECT, which shuts its requester's connection down
    /// (see [`Connection::on_received`]).
    fn expire(&self, inner: &mut CmInner) -> Option<Instant> {
        let (deadline, waited) = inner.connect_deadline?;
        let state = self.get();
        if state != CONNECTING && state != ACCEPTING {
            inner.connect_deadline = None;
            return None;
        }
        if Instant::now() < deadline {
            return Some(deadline);
        }
        inner.connect_deadline = None;
        if state == CONNECTING {
            inner.late_accept = true;
            self.set(REFUSED);
            self.post_error(
                inner,
                FiErrno::FI_ETIMEDOUT,
                0,
                format!("the connection request was not answered within {waited:?}"),
            );
        } else {
            inner.unconfirmed_accept = true;
            self.abort_accept(
                inner,
                FiErrno::FI_ETIMEDOUT,
                0,
                format!(
                    "the requester did not confirm the accept within {waited:?}: it is gone, \
                     or did not take the ACCEPT in"
                ),
            );
        }
        // The state changed with no completion: a close waiting for the accept goes on.
        self.progressed.notify_all();
        None
    }

    /// Send the pending request's CONNREQ again once its wait has passed (it found no receive
    /// free at the listener, [`Connection::on_sent`]); when it is due while it waits. A
    /// CONNREQ that cannot be sent now (no control buffer or TX entry free) waits again; one
    /// that cannot be sent at all refuses the request, as an undelivered one is.
    fn retry_connreq(&self, inner: &mut CmInner) -> Option<Instant> {
        let at = inner.connreq_retry?;
        if self.get() != CONNECTING || inner.closing {
            inner.connreq_retry = None;
            return None;
        }
        if Instant::now() < at {
            return Some(at);
        }
        inner.connreq_retry = None;
        let Role::Active {
            conn_id,
            listener: Some(fi),
        } = inner.role
        else {
            return None;
        };
        let param = std::mem::take(&mut inner.connreq_param);
        let sent = self.send(inner, fi, CmKind::ConnReq, conn_id, &param, 0);
        inner.connreq_param = param;
        match sent {
            Ok(()) => None,
            Err(DriverError::Full(_)) => {
                let again = Instant::now() + inner.connreq_backoff;
                inner.connreq_retry = Some(again);
                Some(again)
            }
            Err(e) => {
                self.set(REFUSED);
                self.post_error(
                    inner,
                    FiErrno::FI_ECONNREFUSED,
                    0,
                    format!("the connection request could not be sent again: {e}"),
                );
                self.progressed.notify_all();
                None
            }
        }
    }

    /// Whether the control ring may hold a completion its thread has not taken in (for the
    /// shared vector's dispatcher): `true` while another thread holds the lock.
    fn may_have_completion(&self) -> bool {
        match self.inner.try_lock() {
            Ok(inner) => inner.lane.may_have_completion(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().lane.may_have_completion(),
            Err(std::sync::TryLockError::WouldBlock) => true,
        }
    }

    fn lock(&self) -> MutexGuard<'_, CmInner> {
        // Every critical section leaves the state consistent: a poisoned lock is usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, s: u8) {
        self.state.store(s, Ordering::Release);
    }

    fn get(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    fn drop_message(&self, why: &str) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(fid = self.fid, why, "control message dropped");
    }

    /// Send a control message to AV entry `dest`; `context` tells progress what it was.
    fn send(
        &self,
        inner: &mut CmInner,
        dest: u64,
        kind: CmKind,
        conn_id: u32,
        param: &[u8],
        context: u64,
    ) -> Result<(), DriverError> {
        let msg = CmMessage {
            kind,
            conn_id,
            sender: inner.local,
            param: param.to_vec(),
        };
        let mut bytes = std::mem::take(&mut inner.scratch);
        msg.encode(&mut bytes)
            .map_err(|e| DriverError::InvalidArgument(e.to_string()))?;
        let mut buf = inner
            .pool
            .alloc()
            .ok_or(DriverError::Full("control message pool"))?;
        buf.fill(&bytes)?;
        inner.scratch = bytes;
        inner
            .lane
            .post_control(dest, buf, context | u64::from(kind as u8))
            .map_err(|(e, _)| e)
    }

    /// Post an event to the bound EQ; whether it was queued.
    fn post(&self, inner: &CmInner, kind: EqEventKind, data: u64, cm_data: Vec<u8>) -> bool {
        let Some((eq, _)) = inner.eq.as_ref() else {
            return false;
        };
        let ev = EqEvent {
            kind,
            fid: self.fid,
            context: 0,
            data,
            cm_data,
        };
        match eq.post(ev) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(fid = self.fid, "event lost: {e}");
                false
            }
        }
    }

    /// Post a peer's connection request (`id`) to the bound EQ if it has room for it: whether
    /// it was queued. One that does not fit is not posted, and the queue is not overrun: the
    /// caller refuses the request.
    fn offer_connreq(&self, inner: &CmInner, id: u64, cm_data: Vec<u8>) -> bool {
        let Some((eq, _)) = inner.eq.as_ref() else {
            return false;
        };
        let ev = EqEvent {
            kind: EqEventKind::ConnReq,
            fid: self.fid,
            context: 0,
            data: id,
            cm_data,
        };
        match eq.offer(ev) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(fid = self.fid, "connection request refused: {e}");
                false
            }
        }
    }

    fn post_error(&self, inner: &CmInner, err: FiErrno, prov_errno: i32, text: String) {
        self.post_error_with(inner, err, prov_errno, text, Vec::new());
    }

    /// [`Connection::post_error`] carrying the peer's param (a REJECT's).
    fn post_error_with(
        &self,
        inner: &CmInner,
        err: FiErrno,
        prov_errno: i32,
        text: String,
        cm_data: Vec<u8>,
    ) {
        if let Some((eq, _)) = inner.eq.as_ref() {
            let e = EqErrEntry {
                fid: self.fid,
                context: 0,
                data: 0,
                err,
                prov_errno,
                err_data: text,
                cm_data,
            };
            if let Err(e) = eq.post_error(e) {
                tracing::error!(fid = self.fid, "error event lost: {e}");
            }
        }
    }

    /// Collect the control channel's completions and act on them, from a thread other than
    /// the progress thread (the close paths).
    fn progress(&self) {
        let took = {
            let mut inner = self.lock();
            let seen = inner.generation;
            self.take_in(&mut inner);
            inner.generation != seen
        };
        // A completion taken in here may be the one that raised the shared vector (which
        // disarmed the ring): its dispatcher then finds the ring empty and wakes nobody, and
        // the progress thread would sleep with its ring no longer armed, deaf to the next
        // control message until `CM_IDLE_RECHECK`. It is woken to arm the ring again.
        if took && matches!(self.wakeup, Wakeup::Shared(_)) && self.signal.signal().is_err() {
            tracing::warn!(fid = self.fid, "control progress not woken to arm again");
        }
    }

    /// [`Connection::progress`] with the lock held: `false` when the ring could not be read.
    /// A pass that took in a completion wakes the close paths' waits.
    fn take_in(&self, inner: &mut CmInner) -> bool {
        let mut taken = false;
        inner.accept_pass = false;
        let healthy = loop {
            let ev = match inner.lane.poll() {
                Ok(Some(ev)) => ev,
                Ok(None) => break true,
                Err(e) => {
                    tracing::error!(fid = self.fid, "control channel: {e}");
                    break false;
                }
            };
            taken = true;
            match ev.kind {
                CompletionKind::Send => self.on_sent(inner, &ev),
                _ => self.on_received(inner, ev),
            }
        };
        inner.accept_pass = false;
        if taken {
            inner.generation = inner.generation.wrapping_add(1);
            self.progressed.notify_all();
        }
        healthy
    }

    /// A control message this side sent completed.
    fn on_sent(&self, inner: &mut CmInner, ev: &CqEvent) {
        let kind = CmKind::from_u8((ev.context & 0xFF) as u8);
        // Above the kind's byte: the AV entry a REJECT went to, or the number of the accept
        // an ACCEPT was sent for.
        let sent_for = ev.context >> 8;
        if kind == Some(CmKind::Accept) {
            if let Some(at) = inner.stale_accepts.iter().position(|&(n, _)| n == sent_for) {
                // The ACCEPT of an accept given up while it was in flight (the current
                // accept's number too, when no other came since): its requester's entry
                // goes now.
                let (_, entry) = inner.stale_accepts.swap_remove(at);
                forget_peer(&mut inner.av, entry);
                return;
            }
            if sent_for == inner.accepts {
                inner.accept_sent = if ev.error.is_none() {
                    AcceptSent::Delivered
                } else {
                    AcceptSent::No
                };
            }
        }
        match (kind, &ev.error) {
            // The listener is there, but its control ring had no receive free: more requests
            // came at once than it holds, faster than its progress thread posts them again.
            // Its backlog may have room: the CONNREQ is sent again after a wait
            // ([`Connection::retry_connreq`], which the progress thread runs after this pass;
            // other callers are closing the endpoint, which gives the request up).
            (Some(CmKind::ConnReq), Some(err))
                if self.get() == CONNECTING
                    && err.return_code == Some(uet_fwif::ReturnCode::Undeliverable) =>
            {
                inner.connreq_backoff =
                    (inner.connreq_backoff * 2).clamp(CM_CONNREQ_RETRY, CM_CONNREQ_RETRY_MAX);
                inner.connreq_retry = Some(Instant::now() + inner.connreq_backoff);
                tracing::debug!(
                    fid = self.fid,
                    wait = ?inner.connreq_backoff,
                    "the listener had no receive free: the CONNREQ is sent again"
                );
            }
            (Some(CmKind::ConnReq), Some(err)) if self.get() == CONNECTING => {
                self.set(REFUSED);
                let rc = err.return_code.map_or(0, |rc| i32::from(rc as u8));
                self.post_error(
                    inner,
                    FiErrno::FI_ECONNREFUSED,
                    rc,
                    format!("the connection request was not delivered: {err}"),
                );
            }
            // Delivered to the requester's ring (`accept_sent`, above): connected once the
            // requester says it took it in (READY). A failure of the current accept's ACCEPT
            // (its number in the context) gives the accept up.
            (Some(CmKind::Accept), Some(err))
                if self.get() == ACCEPTING && sent_for == inner.accepts =>
            {
                self.abort_accept(
                    inner,
                    FiErrno::FI_ECONNABORTED,
                    err.return_code.map_or(0, |rc| i32::from(rc as u8)),
                    format!("the accept was not delivered: {err}"),
                );
            }
            // The READY did not reach the acceptor: it closed before it heard that this side
            // took its ACCEPT in. The connection ends as a peer's close ends it.
            (Some(CmKind::Ready), Some(err)) if self.get() == CONNECTED => {
                tracing::debug!(fid = self.fid, "READY not delivered: {err}");
                self.shut_down_by_peer(inner);
            }
            (Some(CmKind::Reject), _) => {
                // The requester's entry was only needed for the REJECT.
                if let Err(e) = inner.av.remove(&[sent_for], 0) {
                    tracing::debug!("listener AV entry {sent_for} not removed: {e}");
                }
            }
            (_, Some(err)) => tracing::debug!(fid = self.fid, "control send failed: {err}"),
            _ => {}
        }
    }

    /// A control message arrived.
    fn on_received(&self, inner: &mut CmInner, ev: CqEvent) {
        let Some(mut buf) = ev.buffer else {
            return;
        };
        // A receive withdrawn by the last look at the channel brought no message.
        if ev
            .error
            .as_ref()
            .is_some_and(|e| e.local == uet_fwif::LocalStatus::Cancelled)
        {
            return;
        }
        let parsed = if ev.error.is_some() {
            None
        } else {
            buf.to_vec().ok().and_then(|b| CmMessage::parse(&b).ok())
        };
        buf.set_len(0);
        if !inner.closing {
            if let Err((e, _)) = inner.lane.post_recv(buf, 0) {
                tracing::error!(fid = self.fid, "control receive not reposted: {e}");
            }
        }
        let Some(msg) = parsed else {
            return self.drop_message("malformed");
        };
        // A requester sends its request once (again only when it found no receive, so was not
        // taken), and sends a listener nothing else: a message of a request pending here (its
        // requester's address and `conn_id`) is a forgery. A second CONNREQ would give the
        // application the request twice, and any answer to it (a REJECT, when the backlog is
        // full, or to a stray READY or ACCEPT) would reach the requester from the listener and
        // refuse the request the application may still accept. Nor does it send anything
        // here once the application answered its request (the acceptor takes its READY): a
        // copy of an answered request would reach the application as a new one.
        if let Role::Passive {
            pending, answered, ..
        } = &inner.role
        {
            if pending
                .values()
                .any(|p| p.req.conn_id == msg.conn_id && p.req.peer == msg.sender)
            {
                return self.drop_message("a message of a request already pending");
            }
            if answered
                .iter()
                .any(|&(peer, conn_id)| conn_id == msg.conn_id && peer == msg.sender)
            {
                return self.drop_message("a message of a request already answered");
            }
        }
        // An active endpoint never listens, a listener being closed no longer does, and one
        // whose backlog is full takes no more requests.
        let listening = match &inner.role {
            Role::Passive {
                pending, backlog, ..
            } => self.get() != SHUT_DOWN && pending.len() < *backlog,
            Role::Active { .. } => false,
        };
        // A CONNREQ naming this endpoint's peer (its Fabric Address and PIDonFEP, where a
        // REJECT to it lands) as its sender: a peer asks a listener for a connection, never
        // its own peer, so it is forged, and its REJECT would reach the peer from this side
        // and end the connection there (or the request it is making, once the ACCEPT is in).
        if msg.kind == CmKind::ConnReq
            && matches!(inner.role, Role::Active { .. })
            && self.names_peer(inner, &msg)
        {
            return self.drop_message("a connection request naming the peer");
        }
        if msg.kind == CmKind::ConnReq && !listening {
            return self.refuse_connreq(inner, &msg);
        }
        // An ACCEPT of a request this endpoint did not make: its requester closed, and the
        // NIC gave the requester's PIDonFEP to this endpoint (a listener, which makes no
        // requests, included). Or of a request that timed out (only a timed-out request is
        // refused and then accepted: a REJECT or an undelivered CONNREQ gets no ACCEPT).
        // The acceptor waits for a READY; a REJECT of the connection tells it that nobody
        // is there, and it gives the accept up (`FI_ECONNABORTED`). An accepting endpoint
        // made no request either, though the connection's `conn_id` is its own: an ACCEPT
        // that reaches it is its own, come back because it took the closed requester's
        // PIDonFEP, and the REJECT it answers with comes back to it the same way; one that
        // comes from its requester or names it is forged (a requester sends no ACCEPT), and
        // its REJECT would end the connection the requester is making: dropped below. An
        // ACCEPT reaching an endpoint connected (or once connected) with the same `conn_id`
        // (ids are drawn per process, so another process's closed requester may have had it)
        // is stray too unless it comes from the peer (a duplicate, dropped below): its
        // acceptor answered another request, and would otherwise wait for a READY that never
        // comes.
        let stray_accept = msg.kind == CmKind::Accept
            && match &inner.role {
                Role::Active { conn_id, .. } => {
                    msg.conn_id != *conn_id
                        || match self.get() {
                            IDLE | REFUSED => true,
                            ACCEPTING | CONNECTED | SHUT_DOWN => {
                                !self.is_peers(inner, ev.src_addr, &msg)
                            }
                            _ => false,
                        }
                }
                Role::Passive { .. } => true,
            };
        if stray_accept {
            return self.refuse_connreq(inner, &msg);
        }
        // A READY of an accept this endpoint is not waiting for: it gave up waiting (its
        // deadline passed) or accepted another request since, whose id may be the same (ids
        // are drawn per process) but whose requester is another. The requester is connected
        // to nobody: a REJECT shuts its connection down. A READY of the connection this
        // endpoint has, from its peer (a duplicate, or one after a SHUTDOWN that overtook
        // it), is dropped, as is one of the request this endpoint is making: a requester sends
        // a READY only to its acceptor, so it is forged, and its REJECT would reach the
        // acceptor (whose name it gives) and end the accept.
        let stray_ready = msg.kind == CmKind::Ready
            && match &inner.role {
                Role::Active { conn_id, .. } => {
                    msg.conn_id != *conn_id
                        || match self.get() {
                            IDLE | REFUSED => true,
                            CONNECTING => false,
                            _ => !self.is_peers(inner, ev.src_addr, &msg),
                        }
                }
                Role::Passive { .. } => true,
            };
        if stray_ready {
            return self.refuse_connreq(inner, &msg);
        }
        // A REJECT of this endpoint's request comes from where the request went: the listener,
        // or the endpoint that took its PIDonFEP. One from anywhere else is forged, and would
        // otherwise refuse a request its listener may still accept.
        let from_listener = match inner.role {
            Role::Active {
                listener: Some(l), ..
            } => self.is_from_entry_or_its_successor(inner, ev.src_addr, l, &msg),
            _ => false,
        };
        match &mut inner.role {
            Role::Passive {
                pending, next_id, ..
            } => {
                if msg.kind != CmKind::ConnReq {
                    return self.drop_message("a listener takes only connection requests");
                }
                let id = *next_id;
                *next_id += 1;
                let req = ConnReq {
                    id,
                    peer: msg.sender,
                    param: msg.param.clone(),
                    conn_id: msg.conn_id,
                    listener: self.fid,
                };
                pending.insert(id, Pending { req });
                // A request the application never hears of is not held either: it is refused,
                // also when the EQ has no room for it (which it leaves usable), the entries
                // it keeps for the events of the endpoints bound to it included.
                if !self.offer_connreq(inner, id, msg.param.clone()) {
                    if let Role::Passive { pending, .. } = &mut inner.role {
                        pending.remove(&id);
                    }
                    self.refuse_connreq(inner, &msg);
                }
            }
            Role::Active { conn_id, listener } => {
                if msg.conn_id != *conn_id {
                    return self.drop_message("unknown connection");
                }
                match (msg.kind, self.get()) {
                    (CmKind::Accept, CONNECTING) => {
                        let listener = listener.take();
                        let bytes = match msg.sender.to_bytes() {
                            Ok(b) => b,
                            Err(_) => return self.drop_message("bad accepting address"),
                        };
                        let fi = match insert_peer(&mut inner.av, &bytes, "accepting endpoint") {
                            Ok(fi) => fi,
                            Err(_) => {
                                self.set(REFUSED);
                                return self.post_error(
                                    inner,
                                    FiErrno::FI_ECONNABORTED,
                                    0,
                                    "the accepting endpoint's address could not be inserted".into(),
                                );
                            }
                        };
                        if let Some(l) = listener {
                            forget_peer(&mut inner.av, l);
                        }
                        // The acceptor's data may follow the READY at once: the NIC takes it
                        // (and nobody else's) from now on.
                        if let Err(e) = inner.set_data_peer(Some(&msg.sender)) {
                            forget_peer(&mut inner.av, fi);
                            self.set(REFUSED);
                            return self.post_error(
                                inner,
                                FiErrno::FI_ECONNABORTED,
                                0,
                                format!("the NIC could not be told the accepting endpoint: {e}"),
                            );
                        }
                        let conn_id = msg.conn_id;
                        // The acceptor is connected when this READY reaches it; one that
                        // cannot be sent leaves it waiting until its deadline, and this side
                        // not connected.
                        if let Err(e) = self.send(inner, fi, CmKind::Ready, conn_id, &[], 0) {
                            forget_peer(&mut inner.av, fi);
                            self.set(REFUSED);
                            return self.post_error(
                                inner,
                                FiErrno::FI_ECONNABORTED,
                                0,
                                format!("the accept could not be confirmed to the acceptor: {e}"),
                            );
                        }
                        self.peer.store(fi, Ordering::Relaxed);
                        self.set(CONNECTED);
                        inner.accept_pass = true;
                        self.post(inner, EqEventKind::Connected, 0, msg.param);
                    }
                    (CmKind::Ready, ACCEPTING) if self.is_from_peer(inner, ev.src_addr, &msg) => {
                        inner.connect_deadline = None;
                        self.set(CONNECTED);
                        self.post(inner, EqEventKind::Connected, 0, Vec::new());
                    }
                    // The requester took the ACCEPT in and closed at once: its SHUTDOWN came
                    // before its READY. It was connected, and is no longer.
                    (CmKind::Shutdown, ACCEPTING)
                        if self.is_from_peer(inner, ev.src_addr, &msg) =>
                    {
                        inner.connect_deadline = None;
                        self.post(inner, EqEventKind::Connected, 0, Vec::new());
                        self.shut_down_by_peer(inner);
                    }
                    // The ACCEPT reached an endpoint that made no such request (the requester
                    // closed, and its PIDonFEP went to that endpoint): nobody is there to
                    // connect to. The endpoint is idle again, as when the ACCEPT is not
                    // delivered at all.
                    (CmKind::Reject, ACCEPTING)
                        if self.is_from_peers_address(inner, ev.src_addr, &msg) =>
                    {
                        self.abort_accept(
                            inner,
                            FiErrno::FI_ECONNABORTED,
                            0,
                            "the accept reached an endpoint that made no such request: the \
                             requester closed"
                                .into(),
                        );
                    }
                    (CmKind::Reject, CONNECTING) if from_listener => {
                        self.set(REFUSED);
                        let text = format!(
                            "connection rejected by the listener; param {:?}",
                            String::from_utf8_lossy(&msg.param)
                        );
                        self.post_error_with(inner, FiErrno::FI_ECONNREFUSED, 0, text, msg.param);
                    }
                    (CmKind::Shutdown, CONNECTED)
                        if self.is_from_peer(inner, ev.src_addr, &msg) =>
                    {
                        self.shut_down_by_peer(inner);
                    }
                    // The READY this side sent reached an acceptor no longer waiting for it
                    // (its deadline passed, or it accepted another requester since): the
                    // connection ends as a peer's close ends it.
                    (CmKind::Reject, CONNECTED)
                        if self.is_from_peers_address(inner, ev.src_addr, &msg) =>
                    {
                        self.shut_down_by_peer(inner);
                    }
                    _ => self.drop_message("unexpected in this state"),
                }
            }
        }
    }
}

impl Connection {
    /// The last look at the control channel, once its progress thread has stopped and before
    /// the channel goes.
    ///
    /// Where a message needing an answer may still come, its receives are withdrawn first
    /// (`fi_cancel`, from interface 1.14: an admin command each, so not where nothing can
    /// come), so that a message sent to it from now on finds no buffer and is refused by the
    /// NIC: an ACCEPT then fails at its sender, whose accept ends with `FI_ECONNABORTED`,
    /// instead of landing in a ring that nobody reads. Then what reached the channel before
    /// is answered (an ACCEPT of a request given up at close, a CONNREQ to a closed
    /// listener: each with a REJECT; a READY that connected the endpoint since its close
    /// looked, with a SHUTDOWN), and what that sends is given up to
    /// [`FINAL_LOOK_WAIT`] to leave (no time on a NIC stopped by a fatal error, which
    /// completes nothing). On an older NIC an ACCEPT that lands after this look goes
    /// unanswered, and its acceptor, whom no READY reaches, times out.
    fn final_look(&self) {
        let deadline = Instant::now() + FINAL_LOOK_WAIT;
        let mut inner = self.lock();
        inner.closing = true;
        let seen = inner.generation;
        // Only where a message may still come that needs an answer: to a listener (a
        // CONNREQ), to a request given up or timed out (a late ACCEPT; not to one rejected or
        // not delivered, which no ACCEPT answers), to an accept that ended unconfirmed (a
        // late READY), whatever the endpoint did after it: accepted or asked again, and
        // connected. Not after a connection's end, which the peer was told of or told, nor
        // to an endpoint that never asked or accepted. A `conn_id` of 0 is a request's like
        // any other, and an endpoint idle after a request or accept that was never sent, or
        // whose ACCEPT was not delivered or reached a newcomer, hears nothing more of it.
        let answer_due = match inner.role {
            Role::Passive { .. } => true,
            Role::Active { .. } => {
                inner.unconfirmed_accept
                    || inner.late_accept
                    || matches!(self.get(), CONNECTING | ACCEPTING)
            }
        };
        if answer_due && inner.lane.cancel_supported().is_ok() {
            // Every control receive is posted with context 0, and the oldest one still posted
            // is withdrawn each time: its completion is taken in before the next, which then
            // finds the one after it. A message that arrived first is taken in on the way.
            while Instant::now() < deadline {
                match inner.lane.cancel_recv(0) {
                    Ok(()) => {
                        self.take_in(&mut inner);
                    }
                    // The completion ring is full, or a message is arriving into the oldest
                    // receive: take in what is there, and try again.
                    Err(e) if matches!(e.errno(), FiErrno::FI_EAGAIN | FiErrno::FI_EBUSY) => {
                        self.take_in(&mut inner);
                        std::thread::yield_now();
                    }
                    // The oldest receive the host holds was taken by a message whose
                    // completion is not read yet: read it, and go on with the next one.
                    Err(e) if e.errno() == FiErrno::FI_ENOENT => {
                        let before = inner.generation;
                        self.take_in(&mut inner);
                        if inner.generation == before {
                            break;
                        }
                    }
                    // None left, or a NIC that does not answer.
                    Err(_) => break,
                }
            }
        }
        self.take_in(&mut inner);
        // A stopped NIC completes nothing: what is in flight never leaves.
        if inner.lane.nic_inner().stopped() {
            return;
        }
        let shut_down = self.get() == CONNECTED && self.shut_down_at_last_look(&mut inner);
        if inner.generation == seen && !shut_down {
            return;
        }
        while inner.lane.in_flight().0 != 0 && Instant::now() < deadline {
            drop(inner);
            std::thread::sleep(CM_POLL_INTERVAL);
            inner = self.lock();
            self.take_in(&mut inner);
        }
    }

    /// At the last look, of an endpoint connected since its close looked: the READY of an
    /// accept whose ACCEPT was not delivered when the close stopped waiting for it (the close
    /// then sent nothing that could overtake the ACCEPT) came after, and the progress thread
    /// or the last look took it in. The requester took the ACCEPT in, so a SHUTDOWN comes
    /// after it: one is sent, and the requester's connection ends instead of staying
    /// connected to nobody. Also a connected endpoint whose close found no room for its
    /// SHUTDOWN. Whether one was sent.
    fn shut_down_at_last_look(&self, inner: &mut CmInner) -> bool {
        let conn_id = match inner.role {
            Role::Active { conn_id, .. } => conn_id,
            Role::Passive { .. } => 0,
        };
        let peer = self.peer.load(Ordering::Relaxed);
        match self.send(inner, peer, CmKind::Shutdown, conn_id, &[], 0) {
            Ok(()) => {
                self.set(SHUT_DOWN);
                true
            }
            Err(e) => {
                tracing::debug!(fid = self.fid, "no SHUTDOWN at the last look: {e}");
                false
            }
        }
    }

    /// At the close of an endpoint whose ACCEPT was delivered and whose READY has not come:
    /// a SHUTDOWN to the requester, as from a connected endpoint, so that a requester that
    /// takes the ACCEPT in after this endpoint is gone hears of the close (sent after the
    /// ACCEPT arrived, it is read after it). An ACCEPT not delivered yet gets no SHUTDOWN
    /// after it (see the code). `Ok(false)`, nothing sent, when the state changed meanwhile
    /// (the READY came, or the requester ended the connection).
    fn shut_down_accepting(&self) -> Result<bool, DriverError> {
        let mut inner = self.lock();
        if self.get() != ACCEPTING {
            return Ok(false);
        }
        if inner.accept_sent != AcceptSent::Delivered {
            // Not delivered within the close's wait: a SHUTDOWN sent now might overtake it.
            // Nothing is sent, and the state stays: the last look withdraws the receives of
            // an endpoint still accepting, so that the requester's READY, should the ACCEPT
            // still reach it, is refused by the NIC, which ends its connection.
            return Ok(true);
        }
        let conn_id = match inner.role {
            Role::Active { conn_id, .. } => conn_id,
            Role::Passive { .. } => 0,
        };
        let peer = self.peer.load(Ordering::Relaxed);
        self.send(&mut inner, peer, CmKind::Shutdown, conn_id, &[], 0)?;
        inner.connect_deadline = None;
        self.set(SHUT_DOWN);
        Ok(true)
    }

    /// The peer closed the connection: `FI_SHUTDOWN` on the EQ, and the endpoint's vector is
    /// raised, as a completion would, so that whoever sleeps on its completion ring (a CQ or
    /// counter read or wait) wakes and finds its receives due to be flushed. The state is
    /// set before the vector is looked at, and a waiter arms (clearing the vector) before it
    /// looks at the state: it sees the shutdown, or sleeps on the vector raised here.
    /// The endpoint names no peer any more before the state says so, so that the peer's data
    /// that arrives once its receives are flushed (data it sent racing its SHUTDOWN, or that
    /// its SHUTDOWN overtook) is refused, and fails at the peer, instead of landing where
    /// nobody reads it.
    fn shut_down_by_peer(&self, inner: &CmInner) {
        inner.clear_data_peer(self.fid);
        self.set(SHUT_DOWN);
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(v) = self.completions.get() {
            v.raise();
        }
        self.post(inner, EqEventKind::Shutdown, 0, Vec::new());
    }

    /// Whether a message came from the connection's peer: the NIC found its source at the
    /// peer's entry. A message that arrived before the requester took in the ACCEPT (the
    /// SHUTDOWN of an acceptor closed before the requester's READY came) was resolved while
    /// the peer was in no entry yet: it is the peer's when it names the peer as its sender
    /// and is read in the pass that took the ACCEPT in, which reads the ring to its end, so
    /// that every message that landed before the peer's entry was made is read in it. Any
    /// other message found in no entry comes from an endpoint the connection does not know,
    /// whatever sender it names. One found at another
    /// entry that holds the peer's address (that of an accept given up in flight, kept until
    /// its ACCEPT completes, whose requester closed and left its PIDonFEP to the peer: the
    /// NIC names the lowest entry of a sender) is the peer's too.
    fn is_from_peer(&self, inner: &CmInner, src_addr: u64, msg: &CmMessage) -> bool {
        let peer = self.peer.load(Ordering::Relaxed);
        if src_addr == peer {
            return true;
        }
        let Some(address) = self.peer_address(inner) else {
            return false;
        };
        if src_addr == uet_fwif::FI_ADDR_NOTAVAIL {
            return inner.accept_pass && address == msg.sender;
        }
        entry_address(inner, src_addr).is_some_and(|a| a == address)
    }

    /// Whether the NIC found a message's sender at the AV entry `entry`, or at another entry
    /// of the same endpoint address (Fabric Address and PIDonFEP).
    fn is_from_entry(&self, inner: &CmInner, src_addr: u64, entry: u64) -> bool {
        if src_addr == uet_fwif::FI_ADDR_NOTAVAIL {
            return false;
        }
        if src_addr == entry {
            return true;
        }
        match (entry_address(inner, src_addr), entry_address(inner, entry)) {
            (Some(a), Some(b)) => (a.fabric_addr, a.pid_on_fep) == (b.fabric_addr, b.pid_on_fep),
            _ => false,
        }
    }

    /// Whether a message comes from the endpoint at AV entry `entry`
    /// ([`Connection::is_from_entry`]), or from whichever endpoint is at its Fabric Address
    /// and PIDonFEP with another initiator than the entry's: one the NIC gave that PIDonFEP
    /// to since the entry's endpoint closed, or the endpoint itself when the entry was made
    /// from an address without its initiator (`FI_ADDR_STR` names it 0 unless it says more).
    /// The NIC finds such a sender in no entry, and it names itself there. A message found
    /// in no entry that names the entry's own initiator does not come from there: the NIC
    /// would have found that one at the entry.
    fn is_from_entry_or_its_successor(
        &self,
        inner: &CmInner,
        src_addr: u64,
        entry: u64,
        msg: &CmMessage,
    ) -> bool {
        if self.is_from_entry(inner, src_addr, entry) {
            return true;
        }
        if src_addr != uet_fwif::FI_ADDR_NOTAVAIL {
            return false;
        }
        entry_address(inner, entry).is_some_and(|a| {
            (a.fabric_addr, a.pid_on_fep) == (msg.sender.fabric_addr, msg.sender.pid_on_fep)
                && a.initiator != msg.sender.initiator
        })
    }

    /// Whether a message is the peer's ([`Connection::is_from_peer`]) or names the peer as
    /// its sender: one a stray READY or ACCEPT is not, which is answered with a REJECT to
    /// its sender. One that names the peer but does not come from it is dropped instead: its
    /// REJECT would reach the peer and end the connection. Once connected, the peer is at its
    /// Fabric Address and PIDonFEP (it would have shut the connection down to leave): a
    /// sender named there with another initiator is the peer's address too, where the
    /// REJECT would land. An accepting endpoint's requester may have closed unannounced and
    /// left its PIDonFEP to another endpoint, which is answered.
    fn is_peers(&self, inner: &CmInner, src_addr: u64, msg: &CmMessage) -> bool {
        self.is_from_peer(inner, src_addr, msg)
            || self.peer_address(inner).is_some_and(|a| a == msg.sender)
            || (self.get() == CONNECTED && self.names_peer(inner, msg))
    }

    /// Whether a message names as its sender an endpoint at the peer's Fabric Address and
    /// PIDonFEP (whatever its initiator): an answer to that sender reaches the peer.
    fn names_peer(&self, inner: &CmInner, msg: &CmMessage) -> bool {
        self.peer_address(inner).is_some_and(|a| {
            (a.fabric_addr, a.pid_on_fep) == (msg.sender.fabric_addr, msg.sender.pid_on_fep)
        })
    }

    /// Whether a message comes from the endpoint at the peer's address (its Fabric Address
    /// and PIDonFEP), whether or not it is the peer: the peer, found at its entry, or the
    /// endpoint the NIC gave the peer's PIDonFEP to since
    /// ([`Connection::is_from_entry_or_its_successor`]). One that only names an endpoint
    /// there as its sender does not.
    fn is_from_peers_address(&self, inner: &CmInner, src_addr: u64, msg: &CmMessage) -> bool {
        let peer = self.peer.load(Ordering::Relaxed);
        self.is_from_entry_or_its_successor(inner, src_addr, peer, msg)
    }

    /// An accept that will not connect: the endpoint is idle again, free to accept another
    /// request, the requester's entry goes, and the EQ gets the error.
    /// The entry goes when the ACCEPT has completed: at once, or with its completion
    /// (`CmInner::stale_accepts`); at once too when no memory can be had to remember it.
    fn abort_accept(&self, inner: &mut CmInner, err: FiErrno, prov_errno: i32, text: String) {
        inner.connect_deadline = None;
        self.set(IDLE);
        inner.clear_data_peer(self.fid);
        let entry = self.peer.swap(u64::MAX, Ordering::Relaxed);
        let in_flight = inner.accept_sent == AcceptSent::InFlight;
        inner.accept_sent = AcceptSent::No;
        if in_flight && inner.stale_accepts.try_reserve(1).is_ok() {
            let number = inner.accepts;
            inner.stale_accepts.push((number, entry));
        } else {
            forget_peer(&mut inner.av, entry);
        }
        self.post_error(inner, err, prov_errno, text);
    }

    /// The connection peer's address, as its AV entry holds it.
    fn peer_address(&self, inner: &CmInner) -> Option<UetAddress> {
        entry_address(inner, self.peer.load(Ordering::Relaxed))
    }

    /// A CONNREQ reached an endpoint that does not listen (an active `FI_EP_MSG` endpoint,
    /// or a passive one being closed), or a listener that cannot take it (its backlog is full,
    /// or its event queue has no room for the `FI_CONNREQ`), or an ACCEPT reached an endpoint
    /// that made no such request (the acceptor then gets `FI_ECONNABORTED`), or a READY an
    /// endpoint that is not waiting for it (its requester then gets `FI_SHUTDOWN`):
    /// answer it with a REJECT, so the requester gets `FI_ECONNREFUSED` instead of waiting
    /// for an answer that never comes. A request that cannot be answered (no room in the
    /// endpoint's AV, no control buffer) is dropped and counted.
    fn refuse_connreq(&self, inner: &mut CmInner, msg: &CmMessage) {
        if let Err(e) = self.send_reject(inner, &msg.sender, msg.conn_id, &[]) {
            tracing::debug!(
                fid = self.fid,
                "REJECT of a connection request not sent: {e}"
            );
            self.drop_message("a connection request that cannot be answered");
        }
    }

    /// A REJECT of the request `conn_id` of `peer`, sending `param`. The requester's AV entry
    /// goes when the REJECT's send completes ([`Connection::on_sent`]), or now if it is not
    /// sent.
    fn send_reject(
        &self,
        inner: &mut CmInner,
        peer: &UetAddress,
        conn_id: u32,
        param: &[u8],
    ) -> Result<(), DriverError> {
        let bytes = peer
            .to_bytes()
            .map_err(|e| DriverError::InvalidArgument(e.to_string()))?;
        let fi = insert_peer(&mut inner.av, &bytes, "requester")?;
        if let Err(e) = self.send(inner, fi, CmKind::Reject, conn_id, param, fi << 8) {
            forget_peer(&mut inner.av, fi);
            return Err(e);
        }
        Ok(())
    }
}

/// Post every receive buffer the control channel's ring takes.
fn fill_control_ring(lane: &mut Endpoint, pool: &DmaPool) -> Result<(), DriverError> {
    let n = (1u32 << CONTROL_RINGS.rx_log2) - 1;
    for _ in 0..n {
        let b = pool
            .alloc()
            .ok_or(DriverError::Full("control message pool"))?;
        lane.post_recv(b, 0).map_err(|(e, _)| e)?;
    }
    Ok(())
}

/// The eventfd that wakes a control progress thread.
fn wake_signal() -> Result<CqSignal, DriverError> {
    CqSignal::new()
        .map_err(|e| DriverError::Exhausted(format!("no eventfd for the control progress: {e}")))
}

/// The vectors the control channels of a NIC (and its admin interrupt,
/// [`crate::admin_interrupt`], which takes one as a control channel takes its own, never
/// the one kept for the shared vector) leave free for the application's completion queues:
/// half, rounded up, so that they never take more than half (and none of a NIC that
/// delivers a single vector).
pub(crate) fn left_to_applications(irq: &crate::interrupt::Interrupts) -> usize {
    irq.vectors() - irq.vectors() / 2
}

/// How a control channel's progress thread will sleep (see the module docs): on a vector of
/// its own from the control channels' share of the NIC's vectors, the last of which is kept
/// for the vector they share beyond it; else on that shared vector; else not at all (it
/// polls).
fn control_wakeup(nic: &Nic, lane: &Endpoint) -> (Wakeup, Option<Arc<SharedWakeup>>) {
    let Some(irq) = nic.inner.interrupts() else {
        return (Wakeup::Poll, None);
    };
    if let Some(v) = irq.take_leaving(left_to_applications(irq) + 1) {
        lane.note_vector(&v);
        return (Wakeup::Own(v), None);
    }
    match SharedWakeup::of(nic) {
        Some(s) => {
            lane.note_vector(&s.shared.vector);
            (Wakeup::Shared(s.shared.clone()), Some(s))
        }
        None => {
            tracing::debug!(
                endpoint = lane.handle(),
                "no MSI-X vector left for control channels: its progress polls"
            );
            (Wakeup::Poll, None)
        }
    }
}

fn control_pool(nic: &Nic) -> Result<DmaPool, DriverError> {
    DmaPool::new(nic, MAX_CM_MESSAGE.next_power_of_two(), CONTROL_BUFFERS)
}

/// A passive endpoint (`fi_passive_ep`): listens for connection requests at its PIDonFEP.
pub struct PassiveEndpoint {
    link: CmLink,
    address: UetAddress,
}

impl Nic {
    /// `fi_passive_ep` + `fi_pep_bind(eq)` + `fi_listen`: a listener in `attr.job_id` with
    /// `attr.mode`, reporting to `eq`. Its address (PIDonFEP; ring sizes and context counts of
    /// `attr` are not used) is what connecting endpoints name.
    pub fn passive_endpoint(
        &self,
        attr: EndpointAttr,
        eq: &EventQueue,
    ) -> Result<PassiveEndpoint, DriverError> {
        self.passive_endpoint_with_backlog(attr, eq, CM_BACKLOG)
    }

    /// [`Nic::passive_endpoint`] holding at most `backlog` requests unanswered from its first
    /// ([`PassiveEndpoint::set_backlog`], which it takes as it is: capped at [`CM_BACKLOG`],
    /// 0 refused with `FI_EINVAL` before anything is made).
    pub fn passive_endpoint_with_backlog(
        &self,
        attr: EndpointAttr,
        eq: &EventQueue,
        backlog: usize,
    ) -> Result<PassiveEndpoint, DriverError> {
        if backlog == 0 {
            return Err(DriverError::InvalidArgument(
                "a backlog of 0: a listener holds at least one request".into(),
            ));
        }
        // A closed queue is refused before anything is asked of the NIC.
        let binding = eq.bind_listener().map_err(fi_err)?;
        let av = self
            .open_av(AvAttr {
                count: LISTENER_AV_ENTRIES,
                job_id: attr.job_id,
                ..AvAttr::default()
            })
            .map_err(fi_err)?;
        let pattr = EndpointAttr {
            ri_count: 1,
            tx_log2: CONTROL_RINGS.tx_log2,
            rx_log2: CONTROL_RINGS.rx_log2,
            trx_log2: 0,
            cq_log2: CONTROL_RINGS.cq_log2,
            ep_type: EpType::Msg,
            tx_ctx_cnt: 0,
            rx_ctx_cnt: 0,
            ..attr
        };
        let table = av.nic().table().clone();
        let mut lane = self.create_endpoint(&pattr, Some(table), EP_FLAG_PASSIVE, 0, 0)?;
        let pool = control_pool(self)?;
        fill_control_ring(&mut lane, &pool)?;
        let address = *lane.address();
        let (wakeup, shared_wakeup) = control_wakeup(self, &lane);
        let signal = wake_signal()?;
        let shared = Arc::new(Connection {
            fid: crate::eq::next_fid(),
            state: AtomicU8::new(IDLE),
            peer: AtomicU64::new(u64::MAX),
            dropped: AtomicU64::new(0),
            passes: AtomicU64::new(0),
            inner: Mutex::new(CmInner {
                lane,
                data_endpoint: None,
                av,
                pool,
                eq: Some((eq.clone(), binding)),
                role: Role::Passive {
                    pending: HashMap::new(),
                    next_id: 1,
                    backlog: backlog.min(CM_BACKLOG),
                    answered: VecDeque::new(),
                },
                local: address,
                scratch: Vec::new(),
                generation: 0,
                connect_timeout: None,
                connect_deadline: None,
                connreq_param: Vec::new(),
                connreq_retry: None,
                connreq_backoff: Duration::ZERO,
                accept_sent: AcceptSent::No,
                stale_accepts: Vec::new(),
                accepts: 0,
                unconfirmed_accept: false,
                late_accept: false,
                closing: false,
                accept_pass: false,
                nic_stopped: false,
                stop_looked: None,
            }),
            progressed: Condvar::new(),
            wakeup,
            signal,
            completions: std::sync::OnceLock::new(),
        });
        Ok(PassiveEndpoint {
            link: CmLink::start(shared, shared_wakeup)?,
            address,
        })
    }
}

/// Create an `FI_EP_MSG` endpoint: an endpoint bound to an AV of its own, with a control
/// context and its progress thread.
pub(crate) fn msg_endpoint(nic: &Nic, attr: EndpointAttr) -> Result<Endpoint, DriverError> {
    let av = nic
        .open_av(AvAttr {
            count: MSG_AV_ENTRIES,
            job_id: attr.job_id,
            ..AvAttr::default()
        })
        .map_err(fi_err)?;
    let table = av.nic().table().clone();
    // From interface 1.20 the NIC refuses the endpoint's data from all but its peer, which
    // the endpoint names once it has one ([`CmInner::set_data_peer`]).
    let filtered = nic.identity().interface_minor >= crate::nic::CONNECTED_PEER_INTERFACE_MINOR;
    let flags = if filtered { EP_FLAG_CONNECTED } else { 0 };
    let mut ep = nic.create_endpoint(&attr, Some(table), flags, 0, 0)?;
    let mut lane = nic.create_context(&ep, CONTROL_RINGS, CTX_ROLE_CONTROL, 0)?;
    let pool = control_pool(nic)?;
    fill_control_ring(&mut lane, &pool)?;
    let (wakeup, shared_wakeup) = control_wakeup(nic, &lane);
    let signal = wake_signal()?;
    let shared = Arc::new(Connection {
        fid: ep.fid(),
        state: AtomicU8::new(IDLE),
        peer: AtomicU64::new(u64::MAX),
        dropped: AtomicU64::new(0),
        passes: AtomicU64::new(0),
        inner: Mutex::new(CmInner {
            lane,
            data_endpoint: filtered.then(|| ep.handle()),
            av,
            pool,
            eq: None,
            role: Role::Active {
                conn_id: 0,
                listener: None,
            },
            local: *ep.address(),
            scratch: Vec::new(),
            generation: 0,
            connect_timeout: Some(CM_CONNECT_TIMEOUT),
            connect_deadline: None,
            connreq_param: Vec::new(),
            connreq_retry: None,
            connreq_backoff: Duration::ZERO,
            accept_sent: AcceptSent::No,
            stale_accepts: Vec::new(),
            accepts: 0,
            unconfirmed_accept: false,
            late_accept: false,
            closing: false,
            accept_pass: false,
            nic_stopped: false,
            stop_looked: None,
        }),
        progressed: Condvar::new(),
        wakeup,
        signal,
        completions: std::sync::OnceLock::new(),
    });
    ep.cm = Some(CmLink::start(shared, shared_wakeup)?);
    Ok(ep)
}

impl PassiveEndpoint {
    /// The listener's address (`fi_getname`): what `connect` names.
    pub fn address(&self) -> &UetAddress {
        &self.address
    }

    /// The fabric id its events carry.
    pub fn fid(&self) -> u64 {
        self.link.shared.fid
    }

    /// Control messages dropped (malformed, or not a connection request).
    pub fn dropped(&self) -> u64 {
        self.link.shared.dropped.load(Ordering::Relaxed)
    }

    /// Passes the listener's control progress thread has made: one per wakeup (a control
    /// message, a `CM_IDLE_RECHECK`) when it sleeps on a vector, one per
    /// [`CM_POLL_INTERVAL`] when it polls. What an idle listener costs.
    pub fn control_passes(&self) -> u64 {
        self.link.shared.passes.load(Ordering::Relaxed)
    }

    /// `fi_control(FI_BACKLOG)`: hold at most `backlog` requests unanswered, from the next
    /// request on (one that finds the backlog full is refused, and its requester gets
    /// `FI_ECONNREFUSED`); requests held already stay. A backlog above [`CM_BACKLOG`] holds
    /// [`CM_BACKLOG`], as `listen(2)` caps its backlog; what it holds is returned. 0 is
    /// `FI_EINVAL`: a listener that takes no request listens for nothing.
    pub fn set_backlog(&self, backlog: usize) -> Result<usize, DriverError> {
        if backlog == 0 {
            return Err(DriverError::InvalidArgument(
                "a backlog of 0: a listener holds at least one request".into(),
            ));
        }
        let held = backlog.min(CM_BACKLOG);
        if let Role::Passive { backlog, .. } = &mut self.link.shared.lock().role {
            *backlog = held;
        }
        Ok(held)
    }

    /// The pending request an `FI_CONNREQ` event announced (its `data`).
    pub fn connreq(&self, event: &EqEvent) -> Result<ConnReq, DriverError> {
        if event.kind != EqEventKind::ConnReq || event.fid != self.fid() {
            return Err(DriverError::InvalidArgument(
                "not an FI_CONNREQ event of this passive endpoint".into(),
            ));
        }
        let inner = self.link.shared.lock();
        match &inner.role {
            Role::Passive { pending, .. } => pending
                .get(&event.data)
                .map(|p| p.req.clone())
                // As accepting or rejecting it again: no request any more, an invalid argument.
                .ok_or_else(|| {
                    DriverError::InvalidArgument(format!(
                        "connection request {} was already answered",
                        event.data
                    ))
                }),
            Role::Active { .. } => Err(DriverError::InvalidArgument("not a listener".into())),
        }
    }

    fn check_pending(&self, inner: &CmInner, req: &ConnReq) -> Result<(), DriverError> {
        if req.listener != self.fid() {
            return Err(DriverError::InvalidArgument(format!(
                "connection request {} belongs to another passive endpoint",
                req.id
            )));
        }
        match &inner.role {
            Role::Passive { pending, .. } if pending.contains_key(&req.id) => Ok(()),
            // Not a pending request any more: an invalid argument, whatever answered it.
            _ => Err(DriverError::InvalidArgument(format!(
                "connection request {} was already accepted or rejected",
                req.id
            ))),
        }
    }

    fn take_pending(&self, inner: &mut CmInner, req: &ConnReq) {
        if let Role::Passive {
            pending, answered, ..
        } = &mut inner.role
        {
            if let Some(p) = pending.remove(&req.id) {
                if answered.len() == ANSWERED_REMEMBERED {
                    answered.pop_front();
                }
                answered.push_back((p.req.peer, p.req.conn_id));
            }
        }
    }

    /// `fi_accept`: connect `ep` (an unconnected `FI_EP_MSG` endpoint with a bound EQ) to the
    /// requester, sending `param`.
    pub fn accept(
        &self,
        req: &ConnReq,
        ep: &mut Endpoint,
        param: &[u8],
    ) -> Result<(), DriverError> {
        if param.len() > MAX_CM_DATA {
            return Err(DriverError::InvalidArgument(format!(
                "accept param of {} bytes exceeds {MAX_CM_DATA}",
                param.len()
            )));
        }
        let mut listener = self.link.shared.lock();
        self.check_pending(&listener, req)?;
        let Some(link) = ep.cm.as_ref() else {
            return Err(DriverError::Unsupported(format!(
                "fi_accept needs an FI_EP_MSG endpoint, this one is {:?}",
                ep.ep_type()
            )));
        };
        let conn = &link.shared;
        let mut inner = conn.lock();
        if inner.eq.is_none() {
            return Err(DriverError::NoEq(
                "bind an event queue to the endpoint before fi_accept".into(),
            ));
        }
        if conn.get() != IDLE {
            return Err(DriverError::BadState(format!(
                "fi_accept of an endpoint that is not idle: {}",
                state_name(conn.get())
            )));
        }
        let bytes = req
            .peer
            .to_bytes()
            .map_err(|e| DriverError::InvalidArgument(e.to_string()))?;
        let fi = insert_peer(&mut inner.av, &bytes, "requester")?;
        // The requester's data may follow its READY at once: the NIC takes it (and nobody
        // else's) from before the ACCEPT goes.
        if let Err(e) = inner.set_data_peer(Some(&req.peer)) {
            forget_peer(&mut inner.av, fi);
            return Err(e);
        }
        inner.role = Role::Active {
            conn_id: req.conn_id,
            listener: None,
        };
        conn.peer.store(fi, Ordering::Relaxed);
        conn.set(ACCEPTING);
        inner.accepts = inner.accepts.wrapping_add(1) & ACCEPT_NUMBERS;
        let number = inner.accepts << 8;
        if let Err(e) = conn.send(&mut inner, fi, CmKind::Accept, req.conn_id, param, number) {
            conn.set(IDLE);
            forget_peer(&mut inner.av, fi);
            inner.clear_data_peer(conn.fid);
            return Err(e);
        }
        inner.accept_sent = AcceptSent::InFlight;
        self.take_pending(&mut listener, req);
        // The requester's READY is waited for as long as a request waits for its answer.
        inner.connect_deadline = inner
            .connect_timeout
            .and_then(|t| Some((Instant::now().checked_add(t)?, t)));
        let deadline = inner.connect_deadline.is_some();
        drop(inner);
        // The progress thread sleeps with no deadline in view: it sleeps again with this one.
        if deadline && conn.signal.signal().is_err() {
            tracing::warn!(
                fid = conn.fid,
                "control progress not woken for the accept's deadline"
            );
        }
        Ok(())
    }

    /// `fi_reject`: refuse the request, sending `param` to the requester.
    pub fn reject(&self, req: &ConnReq, param: &[u8]) -> Result<(), DriverError> {
        if param.len() > MAX_CM_DATA {
            return Err(DriverError::InvalidArgument(format!(
                "reject param of {} bytes exceeds {MAX_CM_DATA}",
                param.len()
            )));
        }
        let conn = &self.link.shared;
        let mut inner = conn.lock();
        self.check_pending(&inner, req)?;
        conn.send_reject(&mut inner, &req.peer, req.conn_id, param)?;
        self.take_pending(&mut inner, req);
        Ok(())
    }
}

/// How long closing a listener waits for room to reject the requests it left unanswered.
const CLOSE_REJECT_WAIT: Duration = Duration::from_secs(1);

/// How long closing a connected endpoint waits for its SHUTDOWN to be sent.
const CLOSE_SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// How long the last look at a closed endpoint's control channel waits for the answers it
/// sent to leave ([`Connection::final_look`]).
const FINAL_LOOK_WAIT: Duration = Duration::from_millis(100);

impl Drop for PassiveEndpoint {
    /// `fi_close` of a listener: every request it leaves unanswered is rejected, so that its
    /// requester gets `FI_ECONNREFUSED` instead of waiting for an answer that never comes.
    /// The REJECTs are sent while their completions are collected (which free the control
    /// buffers and TX entries the next ones need), for at most 1 s (`CLOSE_REJECT_WAIT`); a
    /// request still unanswered then is dropped and counted.
    fn drop(&mut self) {
        if self.link.made_in.in_forked_child() {
            // The parent's listener: its requests are the parent's to answer.
            return;
        }
        let conn = &self.link.shared;
        let mut unanswered: Vec<ConnReq> = {
            let mut inner = conn.lock();
            // From now on the progress thread refuses new requests itself.
            conn.set(SHUT_DOWN);
            match &mut inner.role {
                Role::Passive { pending, .. } => pending.drain().map(|(_, p)| p.req).collect(),
                Role::Active { .. } => Vec::new(),
            }
        };
        unanswered.sort_by_key(|r| r.id);
        let deadline = Instant::now() + CLOSE_REJECT_WAIT;
        for req in &unanswered {
            let sent = conn.when_room(deadline, || {
                conn.send_reject(&mut conn.lock(), &req.peer, req.conn_id, &[])
            });
            if let Err(e) = sent {
                tracing::debug!(
                    fid = conn.fid,
                    request = req.id,
                    "not rejected at close: {e}"
                );
                conn.drop_message("a request the closed listener could not reject");
            }
        }
    }
}

impl Endpoint {
    fn link(&self, call: &str) -> Result<&Arc<Connection>, DriverError> {
        self.cm.as_ref().map(|l| &l.shared).ok_or_else(|| {
            DriverError::Unsupported(format!(
                "{call} needs an FI_EP_MSG endpoint, this one is {:?}",
                self.ep_type()
            ))
        })
    }

    /// `fi_ep_bind(ep, eq)`: where an `FI_EP_MSG` endpoint reports connection events.
    pub fn bind_eq(&mut self, eq: &EventQueue) -> Result<(), DriverError> {
        let conn = self.link("fi_ep_bind(eq)")?;
        let mut inner = conn.lock();
        if inner.eq.is_some() {
            return Err(DriverError::BadState(
                "an event queue is already bound".into(),
            ));
        }
        inner.eq = Some((eq.clone(), eq.bind_endpoint().map_err(fi_err)?));
        Ok(())
    }

    /// `fi_connect`: ask the passive endpoint at `listener` (a serialized UET address) for a
    /// connection, sending `param`. `FI_CONNECTED` or an `FI_ECONNREFUSED` error follows on
    /// the bound event queue, or an `FI_ETIMEDOUT` one when neither an ACCEPT nor a REJECT
    /// came within the endpoint's connect timeout ([`Endpoint::set_connect_timeout`]).
    pub fn connect(&mut self, listener: &[u8], param: &[u8]) -> Result<(), DriverError> {
        let conn = self.link("fi_connect")?.clone();
        if param.len() > MAX_CM_DATA {
            return Err(DriverError::InvalidArgument(format!(
                "connect param of {} bytes exceeds {MAX_CM_DATA}",
                param.len()
            )));
        }
        UetAddress::from_bytes(listener)
            .map_err(|e| DriverError::InvalidArgument(format!("listener address: {e}")))?;
        let mut inner = conn.lock();
        if inner.eq.is_none() {
            return Err(DriverError::NoEq(
                "bind an event queue to the endpoint before fi_connect".into(),
            ));
        }
        if conn.get() != IDLE {
            return Err(DriverError::BadState(format!(
                "fi_connect: {}",
                state_name(conn.get())
            )));
        }
        let fi = insert_peer(&mut inner.av, listener, "listener")?;
        let conn_id = draw_conn_id(conn.fid);
        inner.role = Role::Active {
            conn_id,
            listener: Some(fi),
        };
        inner.connreq_param = param.to_vec();
        inner.connreq_retry = None;
        inner.connreq_backoff = Duration::ZERO;
        conn.set(CONNECTING);
        if let Err(e) = conn.send(&mut inner, fi, CmKind::ConnReq, conn_id, param, 0) {
            conn.set(IDLE);
            inner.role = Role::Active {
                conn_id,
                listener: None,
            };
            forget_peer(&mut inner.av, fi);
            return Err(e);
        }
        inner.connect_deadline = inner
            .connect_timeout
            .and_then(|t| Some((Instant::now().checked_add(t)?, t)));
        let deadline = inner.connect_deadline.is_some();
        drop(inner);
        // The progress thread sleeps with no deadline in view: it sleeps again with this one.
        if deadline && conn.signal.signal().is_err() {
            tracing::warn!(
                fid = conn.fid,
                "control progress not woken for the connection request's deadline"
            );
        }
        Ok(())
    }

    /// How long a later [`Endpoint::connect`] waits for an ACCEPT or a REJECT, and a later
    /// accept of a request by this endpoint for the requester's READY, before it ends with
    /// an `FI_ETIMEDOUT` error event ([`CM_CONNECT_TIMEOUT`] unless set); `None`: without
    /// end, as before a listener closes or rejects. A request or accept already pending
    /// keeps its deadline. `FI_EINVAL` for a zero timeout (`None` is "no deadline"), `FI_EOPNOTSUPP`
    /// for an endpoint that is not `FI_EP_MSG`.
    pub fn set_connect_timeout(&mut self, timeout: Option<Duration>) -> Result<(), DriverError> {
        let conn = self.link("connect timeout")?;
        if timeout == Some(Duration::ZERO) {
            return Err(DriverError::InvalidArgument(
                "a connect timeout of zero; no deadline is None".into(),
            ));
        }
        conn.lock().connect_timeout = timeout;
        Ok(())
    }

    /// The timeout a later [`Endpoint::connect`] gets ([`Endpoint::set_connect_timeout`]);
    /// `None` for no deadline, or an endpoint that is not `FI_EP_MSG`.
    pub fn connect_timeout(&self) -> Option<Duration> {
        self.cm
            .as_ref()
            .and_then(|l| l.shared.lock().connect_timeout)
    }

    /// `fi_shutdown`: close the connection; the peer gets `FI_SHUTDOWN`. Later sends fail
    /// with `FI_ENOTCONN`. `FI_EAGAIN` ([`DriverError::Full`]) while the control channel has
    /// no room for the SHUTDOWN: the connection then stands, and the call may be repeated.
    /// Once the SHUTDOWN is sent the endpoint names no peer any more (from interface 1.20):
    /// the peer's data that arrives after this returns (sent before it took the SHUTDOWN
    /// in) is refused by the NIC, and fails at the peer with `FI_EACCES`, instead of landing
    /// in a receive about to be flushed or where nobody reads it. Sends of this endpoint
    /// still in flight are not waited for (see the module docs).
    pub fn shutdown(&mut self) -> Result<(), DriverError> {
        let conn = self.link("fi_shutdown")?.clone();
        let mut inner = conn.lock();
        if conn.get() != CONNECTED {
            return Err(DriverError::NotConnected(state_name(conn.get())));
        }
        let conn_id = match inner.role {
            Role::Active { conn_id, .. } => conn_id,
            Role::Passive { .. } => 0,
        };
        conn.set(SHUT_DOWN);
        let peer = conn.peer.load(Ordering::Relaxed);
        if let Err(e) = conn.send(&mut inner, peer, CmKind::Shutdown, conn_id, &[], 0) {
            // Nothing was sent (FI_EAGAIN when the control channel is full): the connection
            // stands, and fi_shutdown may be called again.
            conn.set(CONNECTED);
            return Err(e);
        }
        inner.clear_data_peer(conn.fid);
        Ok(())
    }

    /// At `fi_close` of a connected `FI_EP_MSG` endpoint: [`Endpoint::shutdown`] (again while
    /// the control channel is full), and wait for the SHUTDOWN's send to complete, so that it
    /// has left before the control channel goes; at most [`CLOSE_SHUTDOWN_WAIT`] in all.
    /// An endpoint closed as its connection comes up counts as connected: an ACCEPT already
    /// received is taken in first, and an accept in flight is waited for (its peer is
    /// connected once the ACCEPT is delivered). An endpoint not connected sends nothing, but
    /// what it sent still leaves first: the REJECT that answers an ACCEPT arriving after
    /// its request timed out (which its peer needs, to learn it is not connected), or its
    /// request, within the same wait. On a NIC stopped by a fatal error or disabled, which
    /// sends and completes nothing, a close does none of this and waits for nothing.
    pub(crate) fn shut_down_at_close(&mut self) {
        let Some(conn) = self.cm.as_ref().map(|l| l.shared.clone()) else {
            return;
        };
        // A stopped NIC sends and completes nothing: its close waits for no accept, sends no
        // SHUTDOWN and waits for no send.
        if self.nic_inner().stopped() {
            return;
        }
        let deadline = Instant::now() + CLOSE_SHUTDOWN_WAIT;
        conn.progress();
        // The state changes only under the lock, in a pass that took in a completion or found
        // a deadline passed (each wakes this wait). An accept is waited for until its ACCEPT was delivered (or was not), not for the
        // requester's READY: a requester that is gone never sends one.
        conn.wait_until(deadline, |inner| {
            conn.get() != ACCEPTING || inner.accept_sent == AcceptSent::Delivered
        });
        if conn.get() == ACCEPTING {
            match conn.when_room(deadline, || conn.shut_down_accepting()) {
                Ok(true) => {
                    conn.progress();
                    if !conn.wait_until(deadline, |inner| inner.lane.in_flight().0 == 0) {
                        tracing::debug!(
                            fid = conn.fid,
                            "the SHUTDOWN sent at close did not complete"
                        );
                    }
                    return;
                }
                // The READY came meanwhile: connected, and closed as such below.
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(fid = conn.fid, "no SHUTDOWN at close: {e}");
                    return;
                }
            }
        }
        {
            // A request still pending is given up, under the lock the progress thread takes
            // an ACCEPT in with: that thread runs until the endpoint goes, and an ACCEPT it
            // took in now would connect an endpoint being closed, whose READY would connect
            // the acceptor to nobody. Refused, it answers a late ACCEPT with a REJECT.
            let mut inner = conn.lock();
            if conn.get() == CONNECTING {
                inner.late_accept = true;
                conn.set(REFUSED);
            }
        }
        if !self.is_connected() {
            if !conn.wait_until(deadline, |inner| inner.lane.in_flight().0 == 0) {
                tracing::debug!(
                    fid = conn.fid,
                    "a control message sent before close did not complete"
                );
            }
            return;
        }
        if let Err(e) = conn.when_room(deadline, || self.shutdown()) {
            tracing::debug!(fid = conn.fid, "no SHUTDOWN at close: {e}");
            return;
        }
        conn.progress();
        if !conn.wait_until(deadline, |inner| inner.lane.in_flight().0 == 0) {
            tracing::debug!(
                fid = conn.fid,
                "the SHUTDOWN sent at close did not complete"
            );
        }
    }

    /// The connected peer's address (`fi_getpeer`): the accepting endpoint's on the side
    /// that connected, the requester's on the side that accepted. `FI_ENOTCONN` while the
    /// endpoint is not connected, `FI_EOPNOTSUPP` for an endpoint that is not `FI_EP_MSG`.
    pub fn peer_address(&self) -> Result<UetAddress, DriverError> {
        let conn = self.link("fi_getpeer")?;
        let inner = conn.lock();
        if conn.get() != CONNECTED {
            return Err(DriverError::NotConnected(state_name(conn.get())));
        }
        conn.peer_address(&inner).ok_or(DriverError::NotConnected(
            "the connection's peer has no address any more",
        ))
    }

    /// Whether the `FI_EP_MSG` endpoint is connected.
    pub fn is_connected(&self) -> bool {
        self.cm
            .as_ref()
            .is_some_and(|l| l.shared.get() == CONNECTED)
    }

    /// Whether the `FI_EP_MSG` endpoint's connection was shut down, by [`Endpoint::shutdown`]
    /// or by the peer (`FI_SHUTDOWN`): the peer sends nothing more, though a message it sent
    /// before may still be on the wire (the NIC knows no connections: it is delivered, or
    /// refused, as any message is). The peer's shutdown is marked here first, then raises the
    /// endpoint's completion vector if it has one: a waiter that armed the ring
    /// ([`Endpoint::cq_trywait`]) and then found the connection not shut down is woken.
    pub fn is_shut_down(&self) -> bool {
        self.cm
            .as_ref()
            .is_some_and(|l| l.shared.get() == SHUT_DOWN)
    }

    /// Control messages this `FI_EP_MSG` endpoint dropped (malformed, another connection's,
    /// or a SHUTDOWN from someone else).
    pub fn cm_dropped(&self) -> u64 {
        self.cm
            .as_ref()
            .map_or(0, |l| l.shared.dropped.load(Ordering::Relaxed))
    }

    /// Passes this `FI_EP_MSG` endpoint's control progress thread has made (see
    /// [`PassiveEndpoint::control_passes`]); 0 for other endpoints.
    pub fn cm_passes(&self) -> u64 {
        self.cm
            .as_ref()
            .map_or(0, |l| l.shared.passes.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::{sim_nic, SimDevice};
    use crate::eq::EqAttr;
    use uet_sim::{Fabric, NicConfig};

    const WAITABLE: EqAttr = EqAttr::WAITABLE;

    /// Two NICs of one fabric, 10.0.0.1 (`ns`) and 10.0.0.2 (`nc`), and a listener on the
    /// first reporting to `eq_l`. Fields drop in order: the listener first, the fabric last.
    struct Listening {
        pep: PassiveEndpoint,
        eq_l: EventQueue,
        ns: Nic,
        nc: Nic,
        _fabric: Fabric,
    }

    impl Listening {
        fn new() -> Listening {
            let fabric = Fabric::new();
            let (ns, nc) = (sim_nic(&fabric, "10.0.0.1"), sim_nic(&fabric, "10.0.0.2"));
            let eq_l = EventQueue::open(WAITABLE).expect("event queue");
            let pep = ns
                .passive_endpoint(EndpointAttr::default(), &eq_l)
                .expect("listener");
            Listening {
                pep,
                eq_l,
                ns,
                nc,
                _fabric: fabric,
            }
        }

        /// `client` requests a connection of the listener: the request, as the listener's
        /// `FI_CONNREQ` gives it.
        /// `client` asks the listener and `server` accepts while `requester`, the client's
        /// connection ([`connection`]), is held locked: no READY is taken in while the guard
        /// stands. The guard, and the server's connection once its ACCEPT is delivered.
        fn accept_with_ready_held<'a>(
            &self,
            client: &mut Endpoint,
            server: &mut Endpoint,
            requester: &'a Connection,
        ) -> (MutexGuard<'a, CmInner>, Arc<Connection>) {
            let req = self.request(client);
            let held = requester.lock();
            self.pep.accept(&req, server, b"").expect("accept");
            (held, delivered_accept(server))
        }

        fn request(&self, client: &mut Endpoint) -> ConnReq {
            client
                .connect(&self.pep.address().to_bytes().expect("address"), b"")
                .expect("connect");
            let ev = self
                .eq_l
                .sread(Some(Duration::from_secs(5)), 0)
                .expect("FI_CONNREQ");
            self.pep.connreq(&ev).expect("request")
        }
    }

    /// The connection `ep`'s control channel serves.
    fn connection(ep: &Endpoint) -> Arc<Connection> {
        ep.cm.as_ref().expect("FI_EP_MSG").shared.clone()
    }

    /// Stop the progress thread of a control channel, as a close does before the last look;
    /// the connection it served.
    fn stop_progress(link: &mut CmLink) -> Arc<Connection> {
        link.stop.store(true, Ordering::Release);
        link.shared.signal.signal().expect("woken");
        link.thread
            .take()
            .expect("progress thread")
            .join()
            .expect("stopped");
        link.shared.clone()
    }

    /// The connection of `server`, once the ACCEPT of its accept was delivered (the NIC's
    /// acknowledgement, within 5 s).
    fn delivered_accept(server: &Endpoint) -> Arc<Connection> {
        let conn = connection(server);
        let delivered = conn.wait_until(Instant::now() + Duration::from_secs(5), |inner| {
            inner.accept_sent == AcceptSent::Delivered
        });
        assert!(delivered, "the ACCEPT's delivery");
        conn
    }

    /// The accept `eq` reports on ends at its deadline: an error entry, not `FI_CONNECTED`,
    /// and it is `FI_ETIMEDOUT` (returned).
    fn accept_timed_out(eq: &EventQueue, wait: Duration) -> EqErrEntry {
        let err = eq.sread(Some(wait), 0).expect_err("no FI_CONNECTED");
        assert_eq!(err.errno, FiErrno::FI_EAVAIL, "{err}");
        let entry = eq.readerr().expect("error entry");
        assert_eq!(entry.err, FiErrno::FI_ETIMEDOUT);
        entry
    }

    /// `ep`, a requester whose acceptor is gone or no longer waits, is connected and then
    /// shut down (`eq` reports both): it is not left connected to nobody.
    fn connected_then_shut_down(eq: &EventQueue, ep: &Endpoint, wait: Duration) {
        let ev = eq.sread(Some(wait), 0).expect("FI_CONNECTED");
        assert_eq!(ev.kind, EqEventKind::Connected);
        let ev = eq
            .sread(Some(wait), 0)
            .expect("the connection to nobody ends");
        assert_eq!((ev.kind, ev.fid), (EqEventKind::Shutdown, ep.fid()));
    }

    /// The last look of `ep`'s closing connection, its progress thread stopped, withdraws
    /// every receive of its control channel.
    fn last_look_withdraws_every_receive(ep: &mut Endpoint) {
        let conn = stop_progress(ep.cm.as_mut().expect("FI_EP_MSG"));
        conn.final_look();
        assert_eq!(conn.lock().lane.in_flight().1, 0, "a receive left posted");
    }

    /// The completion of an ACCEPT sent for accept `number`, failed with `error` or not.
    fn accept_completion(number: u64, error: Option<crate::endpoint::CqError>) -> CqEvent {
        CqEvent {
            kind: CompletionKind::Send,
            op: crate::endpoint::CqOp::Send,
            context: (number << 8) | u64::from(CmKind::Accept as u8),
            len: 0,
            data: 0,
            src_addr: 0,
            tag: 0,
            group: 0,
            error,
            buffer: None,
            multi_recv: None,
            report: false,
        }
    }

    /// An `FI_EP_MSG` endpoint of `nic`, bound to no event queue yet.
    fn msg_endpoint(nic: &Nic) -> Endpoint {
        nic.endpoint(
            EndpointAttr {
                ep_type: EpType::Msg,
                ..EndpointAttr::default()
            },
            None,
        )
        .expect("FI_EP_MSG endpoint")
    }

    /// An `FI_EP_MSG` endpoint of `nic` bound to an event queue of its own.
    fn msg_client(nic: &Nic) -> (Endpoint, EventQueue) {
        let mut c = msg_endpoint(nic);
        let eq_c = EventQueue::open(WAITABLE).expect("event queue");
        c.bind_eq(&eq_c).expect("bound");
        (c, eq_c)
    }

    /// The ACCEPT reaches the requester's ring, but the requester does not take it in (here
    /// its control progress is held off, as it is for good when the requester closes just
    /// after its last look at the ring): the acceptor, whom no READY reaches, is not
    /// connected, and at its deadline gets `FI_ETIMEDOUT` and is idle again. When the
    /// requester does take the ACCEPT in, its READY finds nobody waiting and is refused, and
    /// the requester's connection ends: `FI_CONNECTED`, then `FI_SHUTDOWN`.
    #[test]
    fn an_accept_the_requester_does_not_take_in_times_out_and_its_late_ready_is_refused() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let wait = Duration::from_millis(300);
        server.set_connect_timeout(Some(wait)).expect("timeout");
        let req = l.request(&mut client);
        let requester = connection(&client);
        let held = requester.lock();
        let accepted = Instant::now();
        pep.accept(&req, &mut server, b"").expect("accept");
        let err = accept_timed_out(&eq_s, Duration::from_secs(10));
        assert_eq!(err.fid, server.fid());
        assert!(accepted.elapsed() >= wait, "{:?}", accepted.elapsed());
        assert!(!server.is_connected() && requester.get() != CONNECTED);
        drop(held);
        connected_then_shut_down(&eq_c, &client, Duration::from_secs(10));
        assert!(!client.is_connected());
        assert!(eq_s.is_empty(), "the acceptor hears of nothing more");
    }

    /// The acceptor gives up waiting for the READY of one requester and accepts another
    /// whose request has the same `conn_id` (ids are drawn per process: here the second
    /// requester's counter is set as another process's would be). The first requester's
    /// late READY names a connection the acceptor has, but does not come from its peer: it
    /// is refused, and that requester's connection ends, instead of being left connected to
    /// an endpoint that has another peer.
    #[test]
    fn a_late_ready_of_another_requester_with_the_same_conn_id_is_refused() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let wait = Duration::from_secs(5);
        let (mut first, eq_1) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        server
            .set_connect_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let req = l.request(&mut first);
        let requester = connection(&first);
        let held = requester.lock();
        pep.accept(&req, &mut server, b"").expect("accept");
        accept_timed_out(&eq_s, wait);
        // The second requester's id is the first one's, as another process's may be.
        let (mut second, eq_2) = msg_client(nc);
        let fid2 = second.cm.as_ref().expect("FI_EP_MSG").shared.fid;
        NEXT_CONN_ID.store(req.conn_id ^ (fid2 as u32) << 16, Ordering::Relaxed);
        let req2 = l.request(&mut second);
        assert_eq!(req2.conn_id, req.conn_id);
        server
            .set_connect_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        pep.accept(&req2, &mut server, b"").expect("accept");
        assert_eq!(
            eq_2.sread(Some(wait), 0).expect("event").kind,
            EqEventKind::Connected
        );
        assert_eq!(
            eq_s.sread(Some(wait), 0).expect("event").kind,
            EqEventKind::Connected
        );
        // The first requester takes its ACCEPT in now, and its READY reaches the server.
        drop(held);
        connected_then_shut_down(&eq_1, &first, wait);
        assert!(!first.is_connected());
        assert!(server.is_connected() && second.is_connected());
        assert!(
            eq_s.is_empty() && eq_2.is_empty(),
            "the connection made stays"
        );
    }

    /// A burst of requests reaches a listener whose queue an endpoint it accepts with reports
    /// to as well (as servers bind the endpoints they accept with to the listener's queue):
    /// the requests fill the queue's size and no more (those it has no room for are
    /// refused), and that endpoint's `FI_CONNECTED` takes an entry held past the size for it,
    /// rather than overrun the queue (fi_eq(3): an overrun queue is unusable).
    #[test]
    fn requests_leave_a_shared_queue_room_for_the_accepting_endpoints_events() {
        const SIZE: usize = 4;
        let fabric = Fabric::new();
        let (ns, nc) = (sim_nic(&fabric, "10.0.0.1"), sim_nic(&fabric, "10.0.0.2"));
        let eq = EventQueue::open(EqAttr {
            size: SIZE,
            ..WAITABLE
        })
        .expect("event queue");
        let pep = ns
            .passive_endpoint(EndpointAttr::default(), &eq)
            .expect("listener");
        let listener = pep.address().to_bytes().expect("address");
        let mut server = msg_endpoint(&ns);
        server.bind_eq(&eq).expect("bound to the listener's queue");
        let wait = Duration::from_secs(5);
        let (mut first, _eq_1) = msg_client(&nc);
        first.connect(&listener, b"").expect("connect");
        let ev = eq.sread(Some(wait), 0).expect("FI_CONNREQ");
        let req = pep.connreq(&ev).expect("request");
        // As many requests as the queue has entries, each held or refused.
        let mut burst: Vec<(Endpoint, EventQueue)> = (0..SIZE).map(|_| msg_client(&nc)).collect();
        for (c, _) in &mut burst {
            c.connect(&listener, b"").expect("connect");
        }
        let deadline = Instant::now() + wait;
        loop {
            let refused = burst.iter().filter(|(_, q)| q.len().1 > 0).count();
            if eq.len().0 + refused == SIZE {
                break;
            }
            assert!(Instant::now() < deadline, "every request held or refused");
            std::thread::sleep(Duration::from_millis(1));
        }
        pep.accept(&req, &mut server, b"").expect("accept");
        let mut held = 0;
        loop {
            let ev = eq
                .sread(Some(wait), 0)
                .unwrap_or_else(|e| panic!("the acceptor's FI_CONNECTED: {e}"));
            match ev.kind {
                EqEventKind::ConnReq => held += 1,
                EqEventKind::Connected => {
                    assert_eq!(ev.fid, server.fid());
                    break;
                }
                k => panic!("{k:?}"),
            }
        }
        assert!(server.is_connected());
        assert!(held <= SIZE, "no request past the queue's size");
    }

    /// The requester closes before its request is answered, and a newcomer takes its address
    /// (the NIC gives its PIDonFEP out again) and, its `conn_id` the requester's (ids are
    /// drawn per process: here the newcomer's counter is set as another process's would
    /// be), asks the same listener and is connected. The first request's ACCEPT, from
    /// another endpoint, then reaches the newcomer, which made no such request: the acceptor
    /// gets `FI_ECONNABORTED` then, instead of waiting for a READY until its deadline, and
    /// the newcomer's connection stays.
    #[test]
    fn an_accept_of_another_acceptor_reaching_a_connected_endpoint_with_its_conn_id_is_refused() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let wait = Duration::from_secs(5);
        let (mut gone, _eq_g) = msg_client(nc);
        let req = l.request(&mut gone);
        let at = *gone.address();
        drop(gone);
        let (mut newcomer, eq_n) = msg_client(nc);
        assert_eq!(
            (
                newcomer.address().pid_on_fep,
                newcomer.address().fabric_addr
            ),
            (at.pid_on_fep, at.fabric_addr),
            "the NIC gave the PIDonFEP out again"
        );
        let fid = connection(&newcomer).fid;
        NEXT_CONN_ID.store(req.conn_id ^ (fid as u32) << 16, Ordering::Relaxed);
        let req2 = l.request(&mut newcomer);
        assert_eq!(req2.conn_id, req.conn_id);
        let (mut server, eq_s) = msg_client(ns);
        pep.accept(&req2, &mut server, b"").expect("accept");
        for eq in [&eq_n, &eq_s] {
            assert_eq!(
                eq.sread(Some(wait), 0).expect("event").kind,
                EqEventKind::Connected
            );
        }
        let (mut late, eq_late) = msg_client(ns);
        late.set_connect_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        pep.accept(&req, &mut late, b"").expect("accept");
        let err = eq_late.sread(Some(wait), 0).expect_err("no FI_CONNECTED");
        assert_eq!(err.errno, FiErrno::FI_EAVAIL, "{err}");
        let entry = eq_late.readerr().expect("error entry");
        assert_eq!(
            (entry.err, entry.fid),
            (FiErrno::FI_ECONNABORTED, late.fid())
        );
        assert!(!late.is_connected());
        assert!(newcomer.is_connected() && server.is_connected());
        assert!(eq_n.is_empty() && eq_s.is_empty(), "the connection stays");
    }

    /// Connection ids are drawn from a sequence each process starts at a point of its own:
    /// two processes making the same calls (a client run again, whose endpoint takes the
    /// PIDonFEP and the fabric id its previous run's had) draw different ids, so that the
    /// late ACCEPT of the previous run's request is not taken for the new run's. Here the
    /// test binary runs this test again twice, each run drawing one id.
    #[test]
    fn two_processes_making_the_same_calls_draw_different_connection_ids() {
        const CHILD: &str = "UET_CM_DRAW_ONE_CONN_ID";
        const NAME: &str =
            "cm::tests::two_processes_making_the_same_calls_draw_different_connection_ids";
        if std::env::var_os(CHILD).is_some() {
            println!("conn_id={}", draw_conn_id(7));
            return;
        }
        let draw = || {
            let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
                .args(["--exact", NAME, "--nocapture"])
                .env(CHILD, "1")
                .output()
                .expect("the test binary runs");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines()
                .find_map(|l| l.strip_prefix("conn_id="))
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("no connection id drawn: {text}"))
        };
        assert_ne!(draw(), draw());
    }

    /// An endpoint that is neither side of a connection sends each side a SHUTDOWN, a READY
    /// and an ACCEPT of it (its `conn_id`), naming as their sender the other side: the NIC
    /// finds their source in neither side's AV, and they do not come from the peer. Both
    /// sides drop them and count them, answer none (a REJECT would go to the peer), and stay
    /// connected.
    #[test]
    fn messages_of_a_connection_from_an_endpoint_that_is_not_the_peer_are_dropped() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let req = l.request(&mut client);
        pep.accept(&req, &mut server, b"").expect("accept");
        both_connected(&eq_c, &eq_s, wait);
        let (forger, _eq_f) = msg_client(nc);
        let f = connection(&forger);
        let kinds = [CmKind::Ready, CmKind::Accept, CmKind::Shutdown];
        let targets =
            [(&client, *server.address()), (&server, *client.address())].map(|(target, claim)| {
                let to = target.address().to_bytes().expect("address");
                let fi = insert_peer(&mut f.lock().av, &to, "target").expect("inserted");
                (fi, claim)
            });
        for kind in kinds {
            for (fi, claim) in targets {
                let mut inner = f.lock();
                inner.local = claim;
                f.send(&mut inner, fi, kind, req.conn_id, &[], 0)
                    .expect("sent");
            }
            let sent = f.wait_until(Instant::now() + wait, |inner| inner.lane.in_flight().0 == 0);
            assert!(sent, "delivered");
        }
        let deadline = Instant::now() + wait;
        while client.cm_dropped() + server.cm_dropped() < 2 * kinds.len() as u64 {
            assert!(Instant::now() < deadline, "every message taken in");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(client.is_connected() && server.is_connected());
        assert!(eq_c.is_empty() && eq_s.is_empty(), "no FI_SHUTDOWN");
        assert_eq!(f.dropped.load(Ordering::Relaxed), 0, "no REJECT came back");
    }

    /// A CONNREQ naming a connection's peer as its sender, reaching the other side (a peer
    /// never asks its own peer for a connection), is dropped and counted, not answered with
    /// a REJECT, which would reach the peer from this side and end its connection. Also
    /// while the acceptor waits for the READY.
    #[test]
    fn a_connreq_naming_the_peer_gets_no_reject() {
        let l = Listening::new();
        let (ns, nc) = (&l.ns, &l.nc);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let (forger, _eq_f) = msg_client(nc);
        let f = connection(&forger);
        let forge = |to: &Endpoint, claim: UetAddress, conn_id: u32| {
            send_forged(&f, to.address(), claim, (CmKind::ConnReq, conn_id));
        };
        let taken_in = |ep: &Endpoint, n: u64| wait_dropped(|| ep.cm_dropped(), n);
        let requester = connection(&client);
        let (held, _) = l.accept_with_ready_held(&mut client, &mut server, &requester);
        let conn_id = requested_conn_id(&held);
        forge(&server, *client.address(), conn_id);
        taken_in(&server, 1);
        drop(held);
        both_connected(&eq_c, &eq_s, wait);
        forge(&client, *server.address(), conn_id);
        forge(&server, *client.address(), conn_id);
        // A REJECT goes to the sender's Fabric Address and PIDonFEP: one naming the peer
        // with another initiator would reach it too.
        // (From a second forger: each forged message keeps an entry of the forger's AV.)
        let (forger2, _eq_f2) = msg_client(nc);
        let f2 = connection(&forger2);
        for (to, claim) in [(&client, &server), (&server, &client)] {
            let claim = other_initiator(claim.address());
            send_forged(&f2, to.address(), claim, (CmKind::ConnReq, conn_id));
        }
        taken_in(&client, 2);
        taken_in(&server, 3);
        still_connected((&client, &eq_c), (&server, &eq_s));
    }

    /// A REJECT of a connection that names the peer as its sender but comes from another
    /// endpoint (one that learnt the connection's `conn_id`) is dropped and counted, as a
    /// SHUTDOWN is: it ends neither an accept waiting for its READY nor a connection.
    #[test]
    fn a_reject_of_a_connection_from_an_endpoint_that_is_not_the_peer_is_dropped() {
        let l = Listening::new();
        let (ns, nc) = (&l.ns, &l.nc);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let (forger, _eq_f) = msg_client(nc);
        let f = connection(&forger);
        let forge = |to: &Endpoint, claim: UetAddress, conn_id: u32| {
            send_forged(&f, to.address(), claim, (CmKind::Reject, conn_id));
        };
        let taken_in = |ep: &Endpoint, n: u64| wait_dropped(|| ep.cm_dropped(), n);
        // The acceptor waits for the READY, which the requester, held, does not send yet.
        let requester = connection(&client);
        let (held, _) = l.accept_with_ready_held(&mut client, &mut server, &requester);
        let conn_id = requested_conn_id(&held);
        forge(&server, *client.address(), conn_id);
        taken_in(&server, 1);
        assert!(eq_s.is_empty(), "no FI_ECONNABORTED");
        drop(held);
        both_connected(&eq_c, &eq_s, wait);
        // Connected: a REJECT naming the other side ends neither.
        forge(&client, *server.address(), conn_id);
        forge(&server, *client.address(), conn_id);
        taken_in(&client, 1);
        taken_in(&server, 2);
        assert!(client.is_connected() && server.is_connected());
        assert!(eq_c.is_empty() && eq_s.is_empty(), "no FI_SHUTDOWN");
    }

    /// A READY of its own connection reaching a requester still connecting, or an ACCEPT
    /// naming the requester reaching its acceptor, comes from neither side (the requester
    /// sends no ACCEPT, and a READY only to its acceptor): it is dropped and counted, not
    /// answered with a REJECT, which would reach the other side from this one and end the
    /// connection (the acceptor's accept, or the requester's connection once connected).
    #[test]
    fn a_ready_or_accept_only_a_forger_sends_gets_no_reject() {
        let l = Listening::new();
        let (ns, nc) = (&l.ns, &l.nc);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let (forger, _eq_f) = msg_client(nc);
        let f = connection(&forger);
        let forge = |to: &Endpoint, kind: CmKind, claim: UetAddress, conn_id: u32| {
            send_forged(&f, to.address(), claim, (kind, conn_id));
        };
        let taken_in = |ep: &Endpoint, n: u64| wait_dropped(|| ep.cm_dropped(), n);
        let req = l.request(&mut client);
        // The requester, connecting: a READY of its connection, naming the acceptor-to-be.
        forge(&client, CmKind::Ready, *server.address(), req.conn_id);
        taken_in(&client, 1);
        // The acceptor, waiting for the READY the requester, held, does not send yet: an
        // ACCEPT naming the requester.
        let requester = connection(&client);
        let held = requester.lock();
        l.pep.accept(&req, &mut server, b"").expect("accept");
        delivered_accept(&server);
        forge(&server, CmKind::Accept, *client.address(), req.conn_id);
        taken_in(&server, 1);
        drop(held);
        both_connected(&eq_c, &eq_s, wait);
        still_connected((&client, &eq_c), (&server, &eq_s));
    }

    /// A READY or ACCEPT of a connection naming as its sender an endpoint at the peer's
    /// Fabric Address and PIDonFEP with another initiator, from neither side, reaching
    /// either side of the connection is dropped and counted: a REJECT to that sender would
    /// reach the peer (a message goes to a Fabric Address and PIDonFEP) and end the
    /// connection.
    #[test]
    fn a_ready_or_accept_naming_the_peer_with_another_initiator_gets_no_reject() {
        let l = Listening::new();
        let (ns, nc) = (&l.ns, &l.nc);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let req = l.request(&mut client);
        l.pep.accept(&req, &mut server, b"").expect("accept");
        both_connected(&eq_c, &eq_s, wait);
        // Each forger's AV keeps an entry per message it sent: one forger per target.
        for (to, claim) in [(&client, &server), (&server, &client)] {
            let (forger, _eq_f) = msg_client(nc);
            let f = connection(&forger);
            let claim = other_initiator(claim.address());
            for kind in [CmKind::Ready, CmKind::Accept] {
                send_forged(&f, to.address(), claim, (kind, req.conn_id));
            }
        }
        wait_dropped(|| client.cm_dropped(), 2);
        wait_dropped(|| server.cm_dropped(), 2);
        still_connected((&client, &eq_c), (&server, &eq_s));
    }

    /// Both sides of a connection read `FI_CONNECTED` within `wait`.
    fn both_connected(eq_c: &EventQueue, eq_s: &EventQueue, wait: Duration) {
        for eq in [eq_c, eq_s] {
            assert_eq!(
                eq.sread(Some(wait), 0).expect("event").kind,
                EqEventKind::Connected
            );
        }
    }

    /// A little after what was forged, both sides are still connected, and neither EQ holds
    /// an `FI_SHUTDOWN`.
    fn still_connected(client: (&Endpoint, &EventQueue), server: (&Endpoint, &EventQueue)) {
        std::thread::sleep(Duration::from_millis(50));
        assert!(client.0.is_connected() && server.0.is_connected());
        assert!(client.1.is_empty() && server.1.is_empty(), "no FI_SHUTDOWN");
    }

    /// `a` with another initiator: at the same Fabric Address and PIDonFEP, where a message
    /// to it lands.
    fn other_initiator(a: &UetAddress) -> UetAddress {
        UetAddress {
            initiator: a.initiator.wrapping_add(1),
            ..*a
        }
    }

    /// The `conn_id` of the request a requester's held connection made.
    fn requested_conn_id(held: &CmInner) -> u32 {
        match held.role {
            Role::Active { conn_id, .. } => conn_id,
            Role::Passive { .. } => unreachable!("a requester"),
        }
    }

    /// Send a `kind` message of connection `conn_id` through the control channel `f` (a
    /// forger's) to `to`, naming `claim` as its sender, and wait until it is delivered.
    fn send_forged(f: &Connection, to: &UetAddress, claim: UetAddress, msg: (CmKind, u32)) {
        let (kind, conn_id) = msg;
        {
            let to = to.to_bytes().expect("address");
            let mut inner = f.lock();
            let fi = insert_peer(&mut inner.av, &to, "target").expect("inserted");
            inner.local = claim;
            f.send(&mut inner, fi, kind, conn_id, b"forged", 0)
                .expect("sent");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(
            f.wait_until(deadline, |inner| inner.lane.in_flight().0 == 0),
            "delivered"
        );
    }

    /// Wait until `dropped()` (a count of dropped control messages) reaches `n`.
    fn wait_dropped(dropped: impl Fn() -> u64, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while dropped() < n {
            assert!(Instant::now() < deadline, "taken in and dropped");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// [`send_forged`] from a new endpoint of `nic`; then wait until `dropped` (the
    /// target's count of dropped messages) is past 0.
    fn forge(
        nic: &Nic,
        to: &UetAddress,
        claim: UetAddress,
        msg: (CmKind, u32),
        dropped: impl Fn() -> u64,
    ) {
        let (forger, _eq_f) = msg_client(nic);
        send_forged(&connection(&forger), to, claim, msg);
        wait_dropped(dropped, 1);
    }

    /// A REJECT of a pending request that names the listener as its sender but comes from
    /// another endpoint (one that learnt the request's `conn_id`) is dropped and counted: the
    /// requester keeps waiting, and the listener's ACCEPT connects it.
    #[test]
    fn a_reject_from_an_endpoint_the_request_did_not_go_to_is_dropped() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let req = l.request(&mut client);
        let reject = (CmKind::Reject, req.conn_id);
        forge(nc, client.address(), *pep.address(), reject, || {
            client.cm_dropped()
        });
        assert!(eq_c.is_empty(), "no FI_ECONNREFUSED");
        pep.accept(&req, &mut server, b"").expect("accept");
        for eq in [&eq_c, &eq_s] {
            assert_eq!(
                eq.sread(Some(Duration::from_secs(5)), 0)
                    .expect("event")
                    .kind,
                EqEventKind::Connected
            );
        }
        assert!(client.is_connected() && server.is_connected());
    }

    /// A copy of a pending request (its requester's address and `conn_id`) reaching the
    /// listener is dropped and counted: the application hears of the request once.
    #[test]
    fn a_second_connreq_of_a_pending_request_is_dropped() {
        let l = Listening::new();
        let (nc, pep) = (&l.nc, &l.pep);
        let (mut client, _eq_c) = msg_client(nc);
        let req = l.request(&mut client);
        let copy = (CmKind::ConnReq, req.conn_id);
        forge(nc, pep.address(), *client.address(), copy, || pep.dropped());
        assert!(l.eq_l.is_empty(), "one FI_CONNREQ");
    }

    /// A copy of a request the application answered (accepted, or rejected) reaching the
    /// listener is dropped and counted, not reported as a new request: the requester sends
    /// the listener nothing after its request.
    #[test]
    fn a_copy_of_an_answered_request_is_dropped() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let (mut accepted, eq_a) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let req = l.request(&mut accepted);
        pep.accept(&req, &mut server, b"").expect("accept");
        for eq in [&eq_a, &eq_s] {
            let ev = eq.sread(Some(Duration::from_secs(5)), 0).expect("event");
            assert_eq!(ev.kind, EqEventKind::Connected);
        }
        let copy = (CmKind::ConnReq, req.conn_id);
        forge(nc, pep.address(), *accepted.address(), copy, || {
            pep.dropped()
        });
        assert!(
            l.eq_l.is_empty(),
            "no second FI_CONNREQ of an accepted request"
        );
        let (mut refused, _eq_r) = msg_client(nc);
        let req = l.request(&mut refused);
        pep.reject(&req, b"").expect("reject");
        let copy = (CmKind::ConnReq, req.conn_id);
        let dropped_before = pep.dropped();
        forge(nc, pep.address(), *refused.address(), copy, || {
            pep.dropped() - dropped_before
        });
        assert!(
            l.eq_l.is_empty(),
            "no second FI_CONNREQ of a rejected request"
        );
        assert!(accepted.is_connected() && server.is_connected());
    }

    /// A message naming a request pending at the listener (its requester's address and
    /// `conn_id`) is dropped and counted whatever its kind, and also when the listener's
    /// backlog is full: it is not answered with a REJECT, which would reach the requester
    /// from the listener and refuse a request the application may still accept.
    #[test]
    fn a_message_naming_a_pending_request_gets_no_reject_from_a_full_listener() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        pep.set_backlog(1).expect("backlog");
        let req = l.request(&mut client);
        let (forger, _eq_f) = msg_client(nc);
        let f = connection(&forger);
        let to = pep.address().to_bytes().expect("address");
        let fi = insert_peer(&mut f.lock().av, &to, "listener").expect("inserted");
        let kinds = [CmKind::ConnReq, CmKind::Ready, CmKind::Accept];
        for kind in kinds {
            let mut inner = f.lock();
            inner.local = *client.address();
            f.send(&mut inner, fi, kind, req.conn_id, b"", 0)
                .expect("sent");
            drop(inner);
            assert!(
                f.wait_until(Instant::now() + wait, |inner| inner.lane.in_flight().0 == 0),
                "delivered"
            );
        }
        let deadline = Instant::now() + wait;
        while pep.dropped() < kinds.len() as u64 {
            assert!(Instant::now() < deadline, "every copy taken in and dropped");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(l.eq_l.is_empty(), "one FI_CONNREQ");
        assert!(eq_c.is_empty(), "no FI_ECONNREFUSED");
        pep.accept(&req, &mut server, b"").expect("accept");
        both_connected(&eq_c, &eq_s, wait);
    }

    /// The acceptor is closed once its ACCEPT was delivered and before the requester took it
    /// in: its SHUTDOWN lands behind the ACCEPT, before the requester has an AV entry for the
    /// acceptor, so the NIC finds its source in none. The requester reads both in one pass,
    /// and takes the SHUTDOWN as its peer's: `FI_CONNECTED`, then `FI_SHUTDOWN`, nothing
    /// dropped.
    #[test]
    fn a_shutdown_that_landed_before_the_requester_took_its_accept_in_is_the_peers() {
        let l = Listening::new();
        let (ns, nc) = (&l.ns, &l.nc);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, _eq_s) = msg_client(ns);
        let requester = connection(&client);
        let (held, _) = l.accept_with_ready_held(&mut client, &mut server, &requester);
        drop(server);
        drop(held);
        connected_then_shut_down(&eq_c, &client, Duration::from_secs(5));
        assert_eq!(client.cm_dropped(), 0, "the SHUTDOWN taken as the peer's");
    }

    /// More requests arrive at once than the listener's control ring has receives: its
    /// progress thread (held off here, as a busy or descheduled one is) has not taken the
    /// first ones in to post their receives again. The CONNREQs that find no receive are
    /// sent again, not refused: the listener's backlog has room for every one, and each
    /// reaches the application.
    #[test]
    fn a_burst_of_requests_beyond_the_listeners_receives_is_not_refused() {
        let l = Listening::new();
        let (nc, pep) = (&l.nc, &l.pep);
        let listener = pep.address().to_bytes().expect("address");
        let burst = 2usize << CONTROL_RINGS.rx_log2;
        let mut clients: Vec<(Endpoint, EventQueue)> = (0..burst).map(|_| msg_client(nc)).collect();
        let held = pep.link.shared.lock();
        for (client, _) in &mut clients {
            client.connect(&listener, b"").expect("connect");
        }
        // Every CONNREQ has reached the listener's NIC: taken into a receive, or not.
        for (client, _) in &clients {
            let sent = connection(client)
                .wait_until(Instant::now() + Duration::from_secs(5), |inner| {
                    inner.lane.in_flight().0 == 0
                });
            assert!(sent, "the CONNREQ's send completes");
        }
        drop(held);
        for n in 0..burst {
            let ev = l
                .eq_l
                .sread(Some(Duration::from_secs(5)), 0)
                .unwrap_or_else(|e| panic!("FI_CONNREQ {n} of {burst}: {e}"));
            assert_eq!(ev.kind, EqEventKind::ConnReq);
        }
        for (client, eq) in &clients {
            assert!(eq.is_empty(), "no error");
            assert_eq!(client.cm_dropped(), 0);
        }
    }

    /// A message lands in the control ring of a listener being closed after the progress
    /// thread's last pass, so its receive has completed but its completion is not read when
    /// the last look begins: the last look still withdraws every other receive, so that
    /// nothing sent later lands in a ring nobody reads (the message itself is answered: a
    /// REJECT of the request). An endpoint that never asked or accepted, or whose
    /// connection ended (and none of whose accepts timed out), keeps its receives posted to
    /// the end: nothing that comes to it then needs an answer that a timeout does not give.
    #[test]
    fn the_last_look_withdraws_every_receive_past_one_a_message_took_unread() {
        let fabric = Fabric::new();
        let (na, nb) = (sim_nic(&fabric, "10.0.0.1"), sim_nic(&fabric, "10.0.0.2"));
        let eq_t = EventQueue::open(WAITABLE).expect("event queue");
        let mut target = na
            .passive_endpoint(EndpointAttr::default(), &eq_t)
            .expect("listener");
        let link = &mut target.link;
        // Closing, as its drop begins: it takes no more requests.
        link.shared.set(SHUT_DOWN);
        let conn = stop_progress(link);
        let posted = conn.lock().lane.in_flight().1;
        assert!(posted > 1, "{posted}");
        // Delivered at once (the model runs on the sender's doorbell), and nobody reads it.
        let (mut client, eq_c) = msg_client(&nb);
        client
            .connect(&target.address().to_bytes().expect("address"), b"")
            .expect("connect");
        assert!(conn.lock().lane.may_have_completion());
        conn.final_look();
        assert_eq!(conn.lock().lane.in_flight().1, 0, "a receive left posted");
        let err = eq_c
            .sread(Some(Duration::from_secs(5)), 0)
            .expect_err("refused");
        assert_eq!(err.errno, FiErrno::FI_EAVAIL, "{err}");
        assert_eq!(eq_c.readerr().expect("error").err, FiErrno::FI_ECONNREFUSED);

        // An endpoint that never asked nor accepted: its receives stay posted.
        let (mut idle, _eq_i) = msg_client(&na);
        let link = idle.cm.as_mut().expect("FI_EP_MSG");
        let conn = stop_progress(link);
        let posted = conn.lock().lane.in_flight().1;
        conn.final_look();
        assert_eq!(conn.lock().lane.in_flight().1, posted, "nothing withdrawn");
    }

    /// An accept of a request whose `conn_id` is 0 (ids are drawn per process: here the
    /// requester's counter is set as another process's may be) times out, and the acceptor
    /// is closed: its last look withdraws its receives, so that the requester, which takes
    /// the ACCEPT in after that look, finds nobody to take its READY and is not left
    /// connected to nobody.
    #[test]
    fn the_last_look_after_an_accept_of_conn_id_0_timed_out_withdraws_the_receives() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        server
            .set_connect_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let fid = client.cm.as_ref().expect("FI_EP_MSG").shared.fid;
        NEXT_CONN_ID.store((fid as u32) << 16, Ordering::Relaxed);
        let req = l.request(&mut client);
        assert_eq!(req.conn_id, 0);
        let requester = connection(&client);
        let held = requester.lock();
        pep.accept(&req, &mut server, b"").expect("accept");
        accept_timed_out(&eq_s, wait);
        last_look_withdraws_every_receive(&mut server);
        drop(held);
        connected_then_shut_down(&eq_c, &client, wait);
    }

    /// An acceptor gives up waiting for the READY of one requester, accepts another and is
    /// connected, then shuts that connection down and is closed: its last look still
    /// withdraws its receives, so that the first requester, which takes its ACCEPT in after
    /// that look, finds nobody to take its READY and is not left connected to nobody.
    #[test]
    fn the_last_look_after_a_connection_withdraws_the_receives_if_an_earlier_accept_timed_out() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let wait = Duration::from_secs(5);
        let (mut first, eq_1) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        server
            .set_connect_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let req = l.request(&mut first);
        let requester = connection(&first);
        let held = requester.lock();
        pep.accept(&req, &mut server, b"").expect("accept");
        accept_timed_out(&eq_s, wait);
        let (mut second, eq_2) = msg_client(nc);
        let req2 = l.request(&mut second);
        pep.accept(&req2, &mut server, b"").expect("accept");
        assert_eq!(
            eq_s.sread(Some(wait), 0).expect("event").kind,
            EqEventKind::Connected
        );
        assert_eq!(
            eq_2.sread(Some(wait), 0).expect("event").kind,
            EqEventKind::Connected
        );
        server.shutdown().expect("shut down");
        last_look_withdraws_every_receive(&mut server);
        drop(held);
        connected_then_shut_down(&eq_1, &first, wait);
    }

    /// A request the listener rejected gets no ACCEPT: the requester's last look withdraws
    /// none of its receives (an admin command each), as after a connection's end.
    #[test]
    fn the_last_look_of_a_rejected_requester_withdraws_nothing() {
        let l = Listening::new();
        let (nc, pep) = (&l.nc, &l.pep);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let req = l.request(&mut client);
        pep.reject(&req, b"").expect("reject");
        let err = eq_c.sread(Some(wait), 0).expect_err("refused");
        assert_eq!(err.errno, FiErrno::FI_EAVAIL, "{err}");
        assert_eq!(eq_c.readerr().expect("error").err, FiErrno::FI_ECONNREFUSED);
        let conn = stop_progress(client.cm.as_mut().expect("FI_EP_MSG"));
        let posted = conn.lock().lane.in_flight().1;
        assert!(posted > 1, "{posted}");
        conn.final_look();
        assert_eq!(conn.lock().lane.in_flight().1, posted, "nothing withdrawn");
    }

    /// The last look at a control channel on a NIC stopped by a fatal error waits for
    /// nothing: a message it still finds in its ring (here one that came after the progress
    /// thread's last pass) is taken in, but what the channel has in flight (here its own
    /// connection request, which never left) never completes.
    #[test]
    fn the_last_look_on_a_stopped_nic_waits_for_nothing() {
        let fabric = Fabric::new();
        let na = sim_nic(&fabric, "10.0.0.1");
        let fb = fabric
            .add_nic(NicConfig::new("10.0.0.2".parse().expect("address")))
            .expect("NIC");
        let nb = Nic::open(Arc::new(SimDevice::new(fb.clone()))).expect("open NIC");
        let eq_l = EventQueue::open(WAITABLE).expect("event queue");
        let pep = na
            .passive_endpoint(EndpointAttr::default(), &eq_l)
            .expect("listener");
        let (mut target, _eq_t) = msg_client(&nb);
        let link = target.cm.as_mut().expect("FI_EP_MSG");
        let conn = stop_progress(link);
        let (mut other, _eq_o) = msg_client(&na);
        other
            .connect(&target.address().to_bytes().expect("address"), b"")
            .expect("connect");
        assert!(conn.lock().lane.may_have_completion());
        // The target's NIC can do no DMA: its own request never leaves, and the NIC stops.
        fb.set_bus_master(false);
        target
            .connect(&pep.address().to_bytes().expect("address"), b"")
            .expect("connect");
        assert!(nb
            .open_av(AvAttr {
                count: 4,
                ..AvAttr::default()
            })
            .is_err());
        assert!(nb.inner.stopped());
        let started = Instant::now();
        conn.final_look();
        let took = started.elapsed();
        assert!(took < FINAL_LOOK_WAIT / 2, "the last look took {took:?}");
    }

    /// An ACCEPT's completion is the current accept's only when it carries that accept's
    /// number: the completion of an earlier accept's ACCEPT (one that timed out before its
    /// send completed, on a NIC slower than the model, which completes a send at its
    /// doorbell) neither marks the current ACCEPT delivered nor gives the current accept up.
    #[test]
    fn the_completion_of_an_earlier_accepts_accept_is_not_taken_for_the_current_ones() {
        let l = Listening::new();
        let (ns, nc) = (&l.ns, &l.nc);
        let (mut client, _eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let requester = connection(&client);
        let (held, conn) = l.accept_with_ready_held(&mut client, &mut server, &requester);
        let mut inner = conn.lock();
        inner.accept_sent = AcceptSent::InFlight;
        let completion = accept_completion;
        let refused = crate::endpoint::CqError {
            errno: FiErrno::FI_EIO,
            local: uet_fwif::LocalStatus::Remote,
            return_code: Some(uet_fwif::ReturnCode::Undeliverable),
            olen: 0,
        };
        let earlier = inner.accepts.wrapping_sub(1) & ACCEPT_NUMBERS;
        conn.on_sent(&mut inner, &completion(earlier, None));
        assert_eq!(
            inner.accept_sent,
            AcceptSent::InFlight,
            "an earlier accept's delivery"
        );
        conn.on_sent(&mut inner, &completion(earlier, Some(refused)));
        assert_eq!(conn.get(), ACCEPTING, "an earlier accept's failure");
        assert_eq!(
            inner.accept_sent,
            AcceptSent::InFlight,
            "an earlier accept's failure"
        );
        assert!(eq_s.is_empty());
        let current = inner.accepts;
        conn.on_sent(&mut inner, &completion(current, None));
        assert_eq!(
            inner.accept_sent,
            AcceptSent::Delivered,
            "the current accept's delivery"
        );
        conn.on_sent(&mut inner, &completion(current, Some(refused)));
        assert_eq!(conn.get(), IDLE, "the current accept's failure");
        drop(inner);
        drop(held);
    }

    /// An acceptor closed before its ACCEPT was delivered (the close's wait ran out) sends
    /// no SHUTDOWN that could overtake the ACCEPT: it stays accepting, so that its last look
    /// withdraws its receives and a READY is refused by the NIC.
    #[test]
    fn an_acceptor_closed_before_its_accept_was_delivered_sends_no_shutdown() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let (mut client, _eq_c) = msg_client(nc);
        let (mut server, _eq_s) = msg_client(ns);
        let req = l.request(&mut client);
        let requester = connection(&client);
        let held = requester.lock();
        pep.accept(&req, &mut server, b"").expect("accept");
        let conn = delivered_accept(&server);
        // As if the ACCEPT were still on its way.
        conn.lock().accept_sent = AcceptSent::InFlight;
        let sends = conn.lock().lane.in_flight().0;
        assert_eq!(conn.shut_down_accepting().ok(), Some(true));
        assert_eq!(conn.get(), ACCEPTING, "still accepting");
        assert_eq!(conn.lock().lane.in_flight().0, sends, "no SHUTDOWN sent");
        // Delivered: the SHUTDOWN goes.
        conn.lock().accept_sent = AcceptSent::Delivered;
        assert_eq!(conn.shut_down_accepting().ok(), Some(true));
        assert_eq!(conn.get(), SHUT_DOWN);
        drop(held);
    }

    /// An acceptor whose close stopped waiting before its ACCEPT was delivered sends nothing
    /// then, but the ACCEPT may still be delivered, and the requester's READY come, before
    /// its last look withdraws its receives: taken in by its progress thread after the close
    /// looked, or by the last look itself. The requester took the ACCEPT in, so a SHUTDOWN
    /// no longer overtakes it: the last look sends one, and the requester's connection ends
    /// (`FI_CONNECTED`, then `FI_SHUTDOWN`) instead of staying connected to nobody.
    #[test]
    fn a_ready_that_comes_after_the_close_stopped_waiting_for_the_accept_gets_a_shutdown() {
        for by_last_look in [false, true] {
            let l = Listening::new();
            let wait = Duration::from_secs(5);
            let (mut client, eq_c) = msg_client(&l.nc);
            let (mut server, _eq_s) = msg_client(&l.ns);
            let requester = connection(&client);
            let (held, conn) = l.accept_with_ready_held(&mut client, &mut server, &requester);
            // As if the ACCEPT were still on its way when the close stops waiting for it.
            conn.lock().accept_sent = AcceptSent::InFlight;
            if by_last_look {
                stop_progress(server.cm.as_mut().expect("FI_EP_MSG"));
            }
            server.shut_down_at_close();
            assert_eq!(
                conn.get(),
                ACCEPTING,
                "{by_last_look}: nothing sent at close"
            );
            drop(held);
            let ev = eq_c.sread(Some(wait), 0).expect("FI_CONNECTED");
            assert_eq!(ev.kind, EqEventKind::Connected);
            if !by_last_look {
                assert!(
                    conn.wait_until(Instant::now() + wait, |_| conn.get() == CONNECTED),
                    "the READY taken in after the close"
                );
            }
            // The rest of the close: the progress thread stops, and the last look.
            drop(server.cm.take());
            let ev = eq_c.sread(Some(wait), 0);
            assert_eq!(
                ev.map(|e| e.kind).ok(),
                Some(EqEventKind::Shutdown),
                "{by_last_look}: the requester hears of the close"
            );
        }
    }

    /// An accept that times out while its acceptor's close waits for its ACCEPT's delivery
    /// ends that wait: the close goes on at the accept's deadline (100 ms here), not at its
    /// own (1 s).
    #[test]
    fn a_close_waiting_for_an_accept_that_times_out_goes_on_at_the_accepts_deadline() {
        let l = Listening::new();
        let (mut client, _eq_c) = msg_client(&l.nc);
        let (mut server, eq_s) = msg_client(&l.ns);
        server
            .set_connect_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let requester = connection(&client);
        let (held, conn) = l.accept_with_ready_held(&mut client, &mut server, &requester);
        // As if the ACCEPT were still on its way.
        conn.lock().accept_sent = AcceptSent::InFlight;
        let began = Instant::now();
        server.shut_down_at_close();
        let took = began.elapsed();
        assert_eq!(eq_s.readerr().expect("error").err, FiErrno::FI_ETIMEDOUT);
        assert!(
            took < Duration::from_millis(800),
            "the close waited {took:?}"
        );
        drop(held);
    }

    /// An accept given up at its deadline while its ACCEPT is still in flight (on a NIC
    /// slower than the model, which completes a send at its doorbell) keeps the requester's
    /// AV entry until that ACCEPT completes: freed at once, the entry would be the next
    /// requester's, and a NIC that reads it as it transmits would carry the stale ACCEPT
    /// there.
    #[test]
    fn an_accept_given_up_in_flight_keeps_the_requesters_entry_until_its_accept_completes() {
        let l = Listening::new();
        let (ns, nc) = (&l.ns, &l.nc);
        let (mut client, _eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let requester = connection(&client);
        let (held, conn) = l.accept_with_ready_held(&mut client, &mut server, &requester);
        let mut inner = conn.lock();
        // As if the ACCEPT's completion had not come yet.
        inner.accept_sent = AcceptSent::InFlight;
        let entry = conn.peer.load(Ordering::Relaxed);
        let now = Instant::now();
        inner.connect_deadline = Some((now, Duration::from_millis(1)));
        while Instant::now() == now {
            std::hint::spin_loop();
        }
        assert_eq!(conn.expire(&mut inner), None);
        assert_eq!(conn.get(), IDLE, "given up");
        let (mut bytes, mut len) = ([0u8; 32], 32);
        assert!(
            inner.av.lookup(entry, &mut bytes, &mut len).is_ok(),
            "the requester's entry stays while the ACCEPT is in flight"
        );
        let number = inner.accepts;
        let completion = accept_completion(number, None);
        conn.on_sent(&mut inner, &completion);
        assert!(
            inner.av.lookup(entry, &mut bytes, &mut len).is_err(),
            "the entry goes with the ACCEPT's completion"
        );
        assert!(inner.stale_accepts.is_empty());
        drop(inner);
        drop(held);
        let err = eq_s.readerr().expect("the accept's error");
        assert_eq!(err.err, FiErrno::FI_ETIMEDOUT);
    }

    /// An accept given up while its ACCEPT was in flight keeps its requester's entry, and
    /// the next requester may be at the same address (the first one closed, and the NIC gave
    /// its PIDonFEP to the newcomer): the NIC then finds the newcomer's READY at the older,
    /// lower entry. The READY is still the peer's, and connects.
    #[test]
    fn a_ready_found_at_a_stale_accepts_entry_of_the_peers_address_connects() {
        let l = Listening::new();
        let (ns, nc, pep) = (&l.ns, &l.nc, &l.pep);
        let wait = Duration::from_secs(5);
        let (mut client, eq_c) = msg_client(nc);
        let (mut server, eq_s) = msg_client(ns);
        let req = l.request(&mut client);
        let conn = connection(&server);
        {
            // An earlier accept, given up in flight, to the endpoint that had this address.
            let mut inner = conn.lock();
            let bytes = req.peer.to_bytes().expect("address");
            let stale = insert_peer(&mut inner.av, &bytes, "requester").expect("entry");
            let number = inner.accepts;
            inner.stale_accepts.push((number, stale));
        }
        pep.accept(&req, &mut server, b"").expect("accept");
        let ev = eq_s.sread(Some(wait), 0).expect("FI_CONNECTED");
        assert_eq!((ev.kind, ev.fid), (EqEventKind::Connected, server.fid()));
        let ev = eq_c.sread(Some(wait), 0).expect("FI_CONNECTED");
        assert_eq!((ev.kind, ev.fid), (EqEventKind::Connected, client.fid()));
        assert!(
            eq_c.sread(Some(Duration::from_millis(200)), 0).is_err(),
            "the requester's connection goes on"
        );
    }

    /// A close path asleep in `wait_until` is woken by the progress thread's pass that took
    /// a completion in (here a connection request reaching a listener), not by its deadline
    /// (30 s, which the bound of 15 s tells apart however slow the machine).
    #[test]
    fn a_close_path_wait_wakes_when_the_progress_thread_takes_a_completion_in() {
        let fabric = Fabric::new();
        let (ns, nc) = (sim_nic(&fabric, "10.0.0.1"), sim_nic(&fabric, "10.0.0.2"));
        let eq = EventQueue::open(WAITABLE).expect("event queue");
        let pep = ns
            .passive_endpoint(EndpointAttr::default(), &eq)
            .expect("listener");
        let conn = pep.link.shared.clone();
        let seen = conn.lock().generation;
        let started = Instant::now();
        let waiter = std::thread::spawn(move || {
            let woken = conn.wait_until(started + Duration::from_secs(30), |inner| {
                inner.generation != seen
            });
            (woken, started.elapsed())
        });
        // Give the waiter time to fall asleep (it is woken either way).
        std::thread::sleep(Duration::from_millis(20));
        let (mut client, _eq_c) = msg_client(&nc);
        client
            .connect(&pep.address().to_bytes().expect("address"), b"")
            .expect("connect");
        let (woken, after) = waiter.join().expect("the waiter");
        assert!(
            woken && after < Duration::from_secs(15),
            "woken by the pass that took the request in, not the deadline: {woken} after {after:?}"
        );
        assert_eq!(
            eq.sread(Some(Duration::from_secs(5)), 0)
                .expect("FI_CONNREQ")
                .kind,
            EqEventKind::ConnReq
        );
    }

    /// Every vector of `nic`'s control channels' own share taken (held until the result is
    /// dropped), but the one kept for the vector they share.
    fn hold_control_channels_own_vectors(nic: &Nic) -> Vec<crate::interrupt::Vector> {
        let irq = nic.inner.interrupts().expect("interrupts");
        let mut held = Vec::new();
        while irq.free_vectors() > left_to_applications(irq) + 1 {
            held.push(irq.take().expect("a vector"));
        }
        held
    }

    /// A control channel on the NIC's shared vector whose completion (the one that raised
    /// the vector, which disarms the ring) is taken in by a close path before the dispatcher
    /// looks at the ring: the progress thread still arms its ring again, and the next control
    /// message reaches it at once, not when its sleep ends (`CM_IDLE_RECHECK`, 1 s, which the
    /// bound of half of it tells apart: the thread's sleep began just before the race).
    #[test]
    fn a_completion_taken_by_a_close_path_leaves_a_shared_vector_ring_armed() {
        let fabric = Fabric::new();
        let (ns, nc) = (sim_nic(&fabric, "10.0.0.1"), sim_nic(&fabric, "10.0.0.2"));
        // The control channels' own vectors all taken: the listener's shares one.
        let held = hold_control_channels_own_vectors(&ns);
        let eq = EventQueue::open(WAITABLE).expect("event queue");
        let pep = ns
            .passive_endpoint(EndpointAttr::default(), &eq)
            .expect("listener");
        let conn = pep.link.shared.clone();
        let Wakeup::Shared(shared) = &conn.wakeup else {
            panic!("the listener's control channel does not share the vector");
        };
        let client = || msg_client(&nc);
        let listener = pep.address().to_bytes().expect("address");
        let (mut first, mut second) = (client(), client());
        // The progress thread has armed its ring and sleeps (on a machine too slow for that,
        // it takes the request in itself, and the test proves nothing but fails neither).
        std::thread::sleep(Duration::from_millis(100));
        // The dispatcher cannot look at the rings until the close path took the request in.
        let members = shared.members.lock().expect("members");
        first.0.connect(&listener, b"").expect("connect");
        let until = Instant::now() + Duration::from_secs(2);
        while !conn.lock().lane.may_have_completion() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        conn.progress();
        drop(members);
        assert_eq!(
            eq.sread(Some(Duration::from_secs(5)), 0)
                .expect("FI_CONNREQ")
                .kind,
            EqEventKind::ConnReq
        );
        // The dispatcher found the ring empty.
        std::thread::sleep(Duration::from_millis(20));
        let started = Instant::now();
        second.0.connect(&listener, b"").expect("connect");
        let ev = eq.sread(Some(Duration::from_secs(5)), 0);
        let after = started.elapsed();
        assert_eq!(ev.expect("FI_CONNREQ").kind, EqEventKind::ConnReq);
        assert!(
            after < CM_IDLE_RECHECK / 2,
            "the second request was taken in after {after:?}: the ring was left unarmed"
        );
        drop(held);
    }

    /// The admin completion interrupt ([`crate::admin_interrupt`]) set up once the control
    /// channels' own vectors are all taken leaves them the one kept for the vector they share:
    /// a control channel made after it still sleeps on a shared vector instead of polling.
    #[test]
    fn the_admin_interrupt_leaves_control_channels_the_vector_they_share() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let held = hold_control_channels_own_vectors(&nic);
        // Whether or not it gets a vector, it must not take the shared one.
        let _ = nic.inner.admin_interrupt();
        let eq = EventQueue::open(WAITABLE).expect("event queue");
        let pep = nic
            .passive_endpoint(EndpointAttr::default(), &eq)
            .expect("listener");
        assert!(
            matches!(pep.link.shared.wakeup, Wakeup::Shared(_)),
            "the listener's control channel polls: the admin interrupt took the shared vector"
        );
        drop(pep);
        drop(held);
    }

    /// A backend that delivers fewer vectors than the NIC's table has (a kernel or a
    /// vfio-user server may): control channels still take at most half of them, however
    /// many connections there are, and none of a single one.
    #[test]
    fn control_channels_take_at_most_half_of_few_vectors() {
        struct FewVectors(SimDevice, u16);
        impl crate::device::Device for FewVectors {
            fn bar0(&self) -> &dyn uet_regs::Mmio {
                self.0.bar0()
            }
            fn dma_map(&self, r: &crate::dma::DmaRegion) -> Result<(), crate::device::DeviceError> {
                self.0.dma_map(r)
            }
            fn dma_unmap(
                &self,
                r: &crate::dma::DmaRegion,
            ) -> Result<(), crate::device::DeviceError> {
                self.0.dma_unmap(r)
            }
            fn name(&self) -> String {
                format!("few-vectors-{}", self.1)
            }
            fn msix_vectors(&self) -> u16 {
                self.1
            }
            fn set_msix_eventfds(
                &self,
                eventfds: &[vmm_sys_util::eventfd::EventFd],
            ) -> Result<(), crate::device::DeviceError> {
                self.0.set_msix_eventfds(eventfds)
            }
            fn clear_msix(&self) -> Result<(), crate::device::DeviceError> {
                self.0.clear_msix()
            }
        }
        for (i, vectors) in [1u16, 2, 3, 5].into_iter().enumerate() {
            let fabric = Fabric::new();
            let f = fabric
                .add_nic(NicConfig::new(
                    format!("10.0.1.{}", i + 1).parse().expect("address"),
                ))
                .expect("NIC");
            let nic = Nic::open(Arc::new(FewVectors(SimDevice::new(f), vectors))).expect("NIC");
            let irq = nic.inner.interrupts().expect("interrupts").clone();
            assert_eq!(irq.vectors(), usize::from(vectors));
            let eq = EventQueue::open(WAITABLE).expect("event queue");
            let listeners: Vec<_> = (0..usize::from(vectors) + 2)
                .map(|_| {
                    nic.passive_endpoint(EndpointAttr::default(), &eq)
                        .expect("listener")
                })
                .collect();
            let taken = irq.vectors() - irq.free_vectors();
            assert!(
                2 * taken <= irq.vectors(),
                "{} control channels took {taken} of {vectors} vectors",
                listeners.len()
            );
            let mut app = nic
                .endpoint(EndpointAttr::default(), None)
                .expect("endpoint");
            assert_eq!(
                app.cq_trywait(),
                Ok(()),
                "an application endpoint gets a vector beside {} control channels of {vectors}",
                listeners.len()
            );
        }
    }

    /// A control channel made while the NIC's shared control vector goes with the last of
    /// its members (its dispatcher not yet stopped, the vector not yet given back) still
    /// sleeps on a shared vector, made anew once the old one is back, instead of finding the
    /// vector taken and polling for its life. The dispatcher is held in its scan (by the
    /// members' lock) to keep the old vector going while the new channel is made.
    #[test]
    fn a_control_channel_made_as_the_shared_vector_goes_still_shares_one() {
        use std::io::Write;
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let held = hold_control_channels_own_vectors(&nic);
        let eq = EventQueue::open(WAITABLE).expect("event queue");
        let listen = || {
            nic.passive_endpoint(EndpointAttr::default(), &eq)
                .expect("listener")
        };
        let first = listen();
        let going = first
            .link
            ._shared_wakeup
            .clone()
            .expect("the listener shares the vector");
        let shared = going.shared.clone();
        drop(first);
        std::thread::scope(|scope| {
            let members = shared.members.lock().expect("members");
            // Raise the vector: the dispatcher clears it and waits for the members.
            let mut raise = std::fs::File::from(
                shared
                    .vector
                    .fd()
                    .try_clone_to_owned()
                    .expect("the eventfd"),
            );
            raise.write_all(&1u64.to_ne_bytes()).expect("raised");
            std::thread::sleep(Duration::from_millis(50));
            let dropper = scope.spawn(move || drop(going));
            let until = Instant::now() + Duration::from_secs(5);
            // (Counted, not upgraded: an upgrade here could make this thread drop it.)
            while nic
                .inner
                .cm_shared_wakeup
                .lock()
                .expect("slot")
                .strong_count()
                > 0
            {
                assert!(Instant::now() < until, "the shared vector was never let go");
                std::thread::sleep(Duration::from_millis(1));
            }
            let maker = scope.spawn(listen);
            // The new channel is being made while the old vector is still out.
            std::thread::sleep(Duration::from_millis(50));
            drop(members);
            dropper.join().expect("dropped");
            // The vector's last reference: it goes back now.
            drop(shared);
            let second = maker.join().expect("made");
            assert!(
                matches!(second.link.shared.wakeup, Wakeup::Shared(_)),
                "the control channel made as the shared vector went polls"
            );
        });
        drop(held);
    }
}
