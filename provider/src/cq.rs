//! `fi_cq_open` and `struct fi_ops_cq`: a completion queue that endpoints bind to with
//! `fi_ep_bind(FI_TRANSMIT | FI_RECV)`.
//!
//! The NIC writes each endpoint's completions into that endpoint's own ring; a libfabric CQ
//! may serve several endpoints, and an endpoint's sends and receives may go to two CQs. A read
//! of a CQ therefore first drains the rings of the endpoints bound to it ([`crate::ep`]),
//! routing each completion to the CQ bound for its direction, then reads its own queue:
//!
//! * `fi_cq_read`, `fi_cq_readfrom`: up to `count` entries in the CQ's format (`FI_CQ_FORMAT_
//!   CONTEXT`, `MSG`, `DATA` or `TAGGED`; `UNSPEC` is `CONTEXT`), and with `readfrom` each
//!   entry's source `fi_addr_t` (`FI_ADDR_NOTAVAIL` for a send, a peer the AV does not
//!   hold, or a receive of an endpoint or receive context opened without the `FI_SOURCE`
//!   capability). `-FI_EAGAIN` when none; `-FI_EAVAIL` when the next is an error.
//! * `fi_cq_readerr`: the next error; its message is copied into the application's
//!   `err_data` buffer when it gives one, or kept by the CQ until its next `readerr`, as for
//!   the EQ ([`crate::eq`]). Before API 1.5 the entry is libfabric 1.0's, which ends at
//!   `err_data`: nothing past it is read or written.
//! * `fi_cq_sread`, `fi_cq_sreadfrom`: as `read`, waiting up to `timeout` ms (negative: no
//!   end). The wait sleeps in poll(2) on the MSI-X vectors of the CQ's endpoints (each
//!   endpoint's ring armed with `CQ_ARM`, [`uet_driver::Endpoint::cq_trywait`]) and on the
//!   CQ's own eventfd, which `fi_cq_signal` writes; it reads the rings again when one is
//!   readable, and at least every 100 ms. Several threads may wait at once, beside an
//!   application asleep on the `FI_WAIT_FD` descriptor: a wakeup one of them takes from the
//!   CQ's eventfd is passed on to every other ([`crate::wait`]), so each wakes at once for a
//!   completion, a signal or an endpoint enabled. Where an endpoint has no vector (a NIC
//!   older than interface 1.12, a backend without interrupts, every vector held), it reads
//!   the rings with a sleep growing from 1 µs to 1 ms between reads instead;
//!   `fi_cq_signal` ends with `-FI_EAGAIN` the wait of every thread waiting then (with none
//!   waiting, the next `sread` returns at once), and so does a signal delivered to the
//!   waiting thread that interrupts its sleep (a POSIX signal whose handler returns:
//!   fi_cq(3)'s thread "signaled by some external source"), once a last read finds nothing;
//!   one that lands between two of its sleeps is not seen. A NIC that stopped (a fatal error, or its
//!   function reset) writes no completion and raises no vector: a wait that has found
//!   nothing for 100 ms looks at the NIC's status, and ends with `-FI_EIO` once it stopped.
//!   The CQ must have a wait object
//!   (`FI_WAIT_UNSPEC`, `FI_WAIT_MUTEX_COND`, `FI_WAIT_YIELD` or `FI_WAIT_FD`); `FI_WAIT_NONE`
//!   makes `sread` `-FI_EINVAL`, and wait sets and `FI_WAIT_POLLFD` are `-FI_ENOSYS` at open
//!   (a value that is no `enum fi_wait_obj`, `-FI_EINVAL`).
//!   A wait condition (`cond`, `FI_CQ_COND_THRESHOLD`) is taken as the hint `fi_cq(3)` makes
//!   it: the wait ends at the first completion.
//! * `FI_WAIT_FD`: `fi_control(FI_GETWAIT)` gives the CQ's descriptor, an epoll set of the
//!   CQ's signal eventfd, the eventfd through which threads in `fi_cq_sread` pass on a
//!   wakeup they took, and its endpoints' vectors, usable in select, poll and epoll. After
//!   `fi_trywait(fabric, fids, count)` returns 0 it polls readable when a completion lands or
//!   `fi_cq_signal` comes; `fi_trywait` is `-FI_EAGAIN` while there is something to read
//!   (fi_poll(3)), and also while an endpoint of the CQ has no vector, since sleeping could
//!   then miss its completions; `-FI_EIO` once the NIC of an endpoint of the CQ stopped,
//!   which raises nothing more (what is queued is read first). A NIC that stops while the
//!   application sleeps on the descriptor makes it readable all the same, within a few
//!   100 ms looks at its status ([`uet_driver::stop_watch`]), so that the application wakes
//!   and its next `fi_trywait` says why. `FI_GETWAITOBJ` gives the CQ's wait object. `fi_trywait`
//!   takes `FI_WAIT_FD` and `FI_WAIT_MUTEX_COND` CQs, and the event queues ([`crate::eq`])
//!   and counters ([`crate::cntr`]) of those wait objects beside them, all of the fabric it
//!   is called on (`-FI_EINVAL` for any other object, another wait object, or an object of
//!   another fabric, nothing armed).
//! * `FI_WAIT_MUTEX_COND`: `fi_control(FI_GETWAIT)` writes the CQ's `struct fi_mutex_cond`
//!   (a pthread mutex and condition it owns) at `arg`; `FI_GETWAITOBJ` gives
//!   `FI_WAIT_MUTEX_COND`. The application reads the CQ and calls `fi_trywait` under the
//!   mutex, and sleeps on the condition when `fi_trywait` gives 0, as it would on the
//!   descriptor of an `FI_WAIT_FD` CQ, which it has but does not see: `fi_trywait` answers as
//!   for one, and arms the same epoll set. A thread of the CQ's own (`crate::wait::CondWait`,
//!   started by the first `FI_GETWAIT`) sleeps on that set after each successful `fi_trywait`, and broadcasts the condition
//!   under the mutex when it polls readable: a completion lands (an endpoint's vector), a
//!   completion is queued by another read, `fi_cq_signal` comes, an endpoint is enabled, or
//!   the NIC stops ([`uet_driver::stop_watch`]). A completion queued while a waiter sleeps,
//!   `fi_cq_signal` and an endpoint enabled broadcast it at once too. The
//!   broadcast waits for the mutex, which the application lets go only as it sleeps, so a
//!   completion that lands between its read and its sleep wakes it; no thread that queues a
//!   completion waits for the mutex, and the read path takes nothing more while no one
//!   waits. `fi_close` ends the thread and destroys the mutex and condition.
//! * `fi_close`: `-FI_EBUSY` while endpoints are bound, or while a thread waits in
//!   `fi_cq_sread` (which would wake in a freed CQ): `fi_cq_signal` ends its wait. In a
//!   process forked from the one that opened the CQ, the parent's threads that waited at the
//!   fork are not its own and do not count, nor does a lock one of them held then.

use crate::abi::*;
use crate::ep::{Arm, EpShared};
use crate::fabric::{Fabric, FabricTag};
use crate::wait::{CondWait, Parked, Sleepers, WaitHandle, Waits};
use crate::{
    entry, null, object_ref, ssize, strerror, unsupported, OwnedErrData, FI_ERR_DATA_BUFFER_API,
};
use core::ffi::{c_char, c_int, c_void};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use uet_av::{FiErrno, FiError, FI_ADDR_NOTAVAIL};
use vmm_sys_util::eventfd::{EventFd, EFD_CLOEXEC, EFD_NONBLOCK};

/// A completion waiting in a CQ.
pub(crate) struct Completion {
    /// The entry, in its largest format.
    pub entry: FiCqTaggedEntry,
    /// The source of a receive (`FI_ADDR_NOTAVAIL` otherwise).
    pub src: FiAddr,
    /// An error completion: what `fi_cq_readerr` returns.
    pub error: Option<CompletionError>,
}

/// The error of an error completion.
pub(crate) struct CompletionError {
    pub errno: FiErrno,
    pub prov_errno: c_int,
    pub olen: usize,
    pub message: String,
}

/// The queue and the endpoints bound to the CQ.
#[derive(Default)]
struct Inner {
    queue: VecDeque<Completion>,
    /// Shared with the reads that drain them, which take it without copying the list; a
    /// bind or a close copies it when a read holds it (copy on write).
    endpoints: Arc<Vec<Arc<EpShared>>>,
}

/// A completion queue: libfabric's `fid_cq` first.
#[repr(C)]
pub struct UetCq {
    fid: FidCq,
    /// Bytes of one entry of the CQ's format.
    entry_size: usize,
    inner: Mutex<Inner>,
    /// A `fi_cq_signal` no wait has taken yet.
    signaled: AtomicBool,
    /// `fi_cq_signal`s so far: a wait that was under way when one came ends, whichever wait
    /// took `signaled`.
    signals: AtomicU64,
    /// Endpoints bound to the CQ (`fi_close` is `FI_EBUSY` while any are).
    pub(crate) bound: AtomicUsize,
    /// Threads in `fi_cq_sread` (`fi_close` is `FI_EBUSY` while any are).
    waiting: crate::wait::Waiters,
    /// The process that opened it: in one forked from it, its lock may be held by a thread
    /// that is not there ([`uet_driver::fork`]).
    made_in: uet_driver::fork::MadeIn,
    /// A waiter armed the rings and may be asleep: the next completion queued writes `wake`
    /// ([`UetCq::push`]).
    sleepers: AtomicBool,
    /// The threads in `fi_cq_sread` and the `FI_WAIT_FD` descriptor's `kick`: the waiter that
    /// reads a wakeup from `wake` passes it on to them ([`crate::wait`]).
    parked: Sleepers,
    /// Readable after a `fi_cq_signal`, after a completion was queued while a waiter slept
    /// ([`UetCq::push`]), or after an endpoint of the CQ was enabled
    /// ([`UetCq::wake_waiters`]): a waiter sleeps on it beside its endpoints' vectors. `None`
    /// on a CQ without a wait object, or when no eventfd could be made (its waits then read
    /// the rings with a growing sleep between reads).
    wake: Option<EventFd>,
    /// The CQ's wait object, as opened (`FI_WAIT_UNSPEC` for a CQ opened with it).
    wait_obj: c_int,
    /// `FI_WAIT_FD`: the descriptor `fi_control(FI_GETWAIT)` gives, an epoll set of `wake`,
    /// the `kick` of `parked` and the vectors of the endpoints `fi_trywait` armed, with those
    /// vectors. `FI_WAIT_MUTEX_COND`: the same set, which `cond_wait` watches.
    fd_wait: Option<FdWait>,
    /// `FI_WAIT_MUTEX_COND`: the mutex and condition `fi_control(FI_GETWAIT)` gives, and the
    /// thread that broadcasts the condition for every change and, after `fi_trywait`, once
    /// `fd_wait` polls readable.
    cond_wait: Option<CondWait>,
    /// The fabric's API version: before 1.5, `err_data` is always the CQ's own.
    api_version: u32,
    /// The `err_data` `fi_cq_readerr` hands out when the application gives no buffer.
    err_data: OwnedErrData,
    /// The count of its domain's open CQs, which it is on until it closes.
    domain_cqs: Arc<AtomicUsize>,
    /// The fabric of its domain: `fi_trywait` takes it on that fabric only.
    pub(crate) fabric: FabricTag,
}

impl UetCq {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the CQ may be waited on: it was opened with a wait object.
    fn waitable(&self) -> bool {
        self.wait_obj != FI_WAIT_NONE
    }

    /// Whether the NIC of an endpoint bound to the CQ stopped (a fatal error, or its
    /// function reset): it writes no completion and raises no vector.
    fn device_stopped(&self) -> bool {
        let endpoints = Arc::clone(&self.lock().endpoints);
        endpoints.iter().any(|ep| ep.device_stopped())
    }

    /// Arm every bound endpoint's ring for a wait ([`EpShared::arm`]). The endpoint list is
    /// taken from under the CQ's lock and each endpoint armed under its own, as a read drains
    /// them.
    fn arm_endpoints(&self) -> Armed {
        let endpoints = Arc::clone(&self.lock().endpoints);
        let mut fds = Vec::with_capacity(endpoints.len() + 1);
        let mut due: Option<Instant> = None;
        for ep in endpoints.iter() {
            match ep.arm() {
                Arm::Ready => return Armed::Ready,
                Arm::Fd(fd, at) => {
                    fds.push(fd);
                    due = earliest(due, at);
                }
                Arm::Idle => {}
                Arm::NoWait => return Armed::NoWait,
            }
        }
        // From here a completion queued in this CQ wakes the waiter (`push`). One queued
        // before — by another reader of this CQ, or a read of an endpoint's other CQ, after
        // this waiter's read and before the arm above found the ring empty and cleared the
        // vector — is seen now: there is something to read, and nothing would wake.
        self.sleepers.store(true, Ordering::SeqCst);
        if !self.lock().queue.is_empty() {
            return Armed::Ready;
        }
        Armed::Fds(fds, due)
    }

    /// `fi_trywait` of this CQ: `Ok` when the application may sleep on its `FI_WAIT_FD`
    /// descriptor, which then polls readable when a completion lands or `fi_cq_signal` comes,
    /// or on its `FI_WAIT_MUTEX_COND` condition, which is then broadcast for the same.
    /// `FI_EAGAIN` when there is something to read first (a completion, queued or in a ring,
    /// or a signal no one has seen), or when an endpoint has no vector, so that sleeping could
    /// miss its completions ("blocking could hang the application", fi_poll(3)). `FI_EIO`
    /// once the NIC of an endpoint stopped, as for `fi_cq_sread`.
    fn trywait(&self, call: &str) -> Result<(), FiError> {
        let (Some(fd_wait), Some(wake)) = (&self.fd_wait, &self.wake) else {
            return Err(FiError::inval(format!(
                "{call}: the CQ was not opened with FI_WAIT_FD or FI_WAIT_MUTEX_COND"
            )));
        };
        let again = |why: &str| FiError::new(FiErrno::FI_EAGAIN, format!("{call}: {why}"));
        // Cleared before the queue and the signal are looked at: a completion another CQ's
        // read queues here, or a signal, after this point makes the descriptor readable again.
        // A wakeup taken from `wake` may be a waiting thread's too: it is passed on.
        self.parked.take_kick();
        if wake.read().is_ok() {
            self.parked.fan_out(None);
        }
        self.progress();
        if !self.lock().queue.is_empty() {
            return Err(again("completions are queued"));
        }
        if self.signaled.swap(false, Ordering::AcqRel) {
            return Err(again("signaled"));
        }
        // A NIC that stopped writes no completion and raises no vector: the descriptor would
        // never poll readable, and the application would sleep for good. Told as
        // `fi_cq_sread` tells it, once what was queued is read.
        if self.device_stopped() {
            return Err(stopped(
                call,
                "no completion will come, and its descriptor would never poll readable",
            ));
        }
        match self.arm_endpoints() {
            Armed::Ready => Err(again("a completion came")),
            Armed::NoWait => Err(again(
                "an endpoint of the CQ has no interrupt vector; read the CQ instead of sleeping",
            )),
            Armed::Fds(fds, due) => {
                fd_wait.hold_until(&fds, due).map_err(|e| {
                    FiError::new(
                        FiErrno::FI_EIO,
                        format!("{call}: the descriptor's epoll set: {e}"),
                    )
                })?;
                // The NIC that stops after the look above makes the descriptor readable too.
                let endpoints = Arc::clone(&self.lock().endpoints);
                self.parked.kick_when_stopped(&endpoints);
                // Last: whatever makes the set readable from here on is broadcast.
                if let Some(cond_wait) = &self.cond_wait {
                    cond_wait.arm();
                }
                Ok(())
            }
        }
    }

    /// Bind an endpoint: its completions are drained when this CQ is read.
    pub(crate) fn attach(&self, ep: &Arc<EpShared>) {
        let mut inner = self.lock();
        if !inner.endpoints.iter().any(|e| Arc::ptr_eq(e, ep)) {
            Arc::make_mut(&mut inner.endpoints).push(ep.clone());
        }
        self.bound.fetch_add(1, Ordering::AcqRel);
    }

    /// Unbind an endpoint (its close), once per [`UetCq::attach`]; `still_bound` when it
    /// stays bound in its other direction (a scalable endpoint's ring set, whose transmit
    /// and receive contexts close one by one), which keeps it drained here.
    /// In a process forked from the CQ's, the lock is taken only if it is free, as by the
    /// CQ's close: one a thread of the parent held at the fork stays held, and the endpoint
    /// then stays on the list, which only a read of that copy would walk, while the binding
    /// is counted out all the same.
    pub(crate) fn detach(&self, ep: &Arc<EpShared>, still_bound: bool) {
        if let Some(mut inner) = self.made_in.lock(&self.inner) {
            if !still_bound {
                Arc::make_mut(&mut inner.endpoints).retain(|e| !Arc::ptr_eq(e, ep));
            }
        }
        self.bound.fetch_sub(1, Ordering::AcqRel);
    }

    /// Queue a completion (an endpoint's drain routes it here). When a waiter has armed the
    /// rings since the last completion queued ([`UetCq::sleepers`]), `wake` is made readable:
    /// the ring the completion came from no longer holds it, and the vector that announced it
    /// may have been cleared by another arm (a read or wait of the endpoint's other CQ, or of
    /// another reader of this one). One write per sleep, not one per completion.
    pub(crate) fn push(&self, c: Completion) {
        self.lock().queue.push_back(c);
        // SeqCst, paired with the store in `arm_endpoints`: either the waiter's look at the
        // queue sees this completion, or this swap sees the waiter's flag.
        if self.sleepers.swap(false, Ordering::SeqCst) {
            self.wake_waiters();
        }
    }

    /// Wake a waiter that armed the rings since the last completion queued, as
    /// [`UetCq::push`] does, for a read it needs though nothing is queued (a refused send
    /// of an endpoint of the CQ kept for a retry): it arms again, with the retry's due time.
    pub(crate) fn wake_armed(&self) {
        if self.sleepers.swap(false, Ordering::SeqCst) {
            self.wake_waiters();
        }
    }

    /// Make `wake` readable for a completion queued by a read of another CQ, for an
    /// endpoint of the CQ enabled, or for `fi_cq_signal`: the threads in `fi_cq_sread` read
    /// the queue again and arm the endpoints, an `FI_WAIT_FD` descriptor polls readable
    /// (`fi_trywait` arms), and an `FI_WAIT_MUTEX_COND` condition is broadcast.
    pub(crate) fn wake_waiters(&self) {
        if let Some(wake) = &self.wake {
            // Cannot fail short of the counter's overflow, 2^64 - 2 wakes unread.
            let _ = wake.write(1);
        }
        if let Some(cond_wait) = &self.cond_wait {
            cond_wait.changed();
        }
    }

    /// Whether the application may sleep on its wait object after `fi_trywait`: opened with
    /// `FI_WAIT_FD` or `FI_WAIT_MUTEX_COND`.
    pub(crate) fn has_native_wait(&self) -> bool {
        self.fd_wait.is_some()
    }

    /// Drain the rings of the endpoints bound to this CQ (outside the CQ's lock: a drain
    /// takes each endpoint's lock, then the lock of the CQ its completion goes to).
    fn progress(&self) {
        let endpoints = Arc::clone(&self.lock().endpoints);
        for ep in endpoints.iter() {
            ep.drain();
        }
    }
}

static CQ_FID_OPS: FiOps = unsupported::fid_ops(cq_close, unsupported::bind, cq_control);

static CQ_OPS: FiOpsCq = FiOpsCq {
    size: core::mem::size_of::<FiOpsCq>(),
    read: cq_read,
    readfrom: cq_readfrom,
    readerr: cq_readerr,
    sread: cq_sread,
    sreadfrom: cq_sreadfrom,
    signal: cq_signal,
    strerror: cq_strerror,
};

/// The provider's CQ behind a `fid` pointer. `FI_EINVAL` for NULL or another object.
///
/// # Safety
/// `fid` is NULL or a live libfabric object.
pub(crate) unsafe fn cq_ref<'a>(fid: *const Fid, call: &str) -> Result<&'a UetCq, FiError> {
    // SAFETY: the caller's promise.
    unsafe { object_ref(fid, FI_CLASS_CQ, &CQ_FID_OPS, call, "CQ") }
}

/// `fi_cq_open`.
pub(crate) unsafe extern "C" fn domain_cq_open(
    domain: *mut FidDomain,
    attr: *mut FiCqAttr,
    cq: *mut *mut FidCq,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_cq_open";
    entry(CALL, || {
        // SAFETY: the application's domain pointer.
        let d = unsafe { crate::domain::domain_ref(domain, CALL) }?;
        let (api_version, domain_cqs, fabric) = (d.api_version, Arc::clone(&d.cqs), d.fabric_tag());
        if cq.is_null() {
            return Err(null(CALL, "cq"));
        }
        // SAFETY: NULL or valid (libfabric's contract).
        let a = unsafe { attr.as_ref() }.ok_or_else(|| null(CALL, "attr"))?;
        let entry_size = match a.format {
            FI_CQ_FORMAT_UNSPEC | FI_CQ_FORMAT_CONTEXT => core::mem::size_of::<*mut c_void>(),
            FI_CQ_FORMAT_MSG => 24,
            FI_CQ_FORMAT_DATA => 40,
            FI_CQ_FORMAT_TAGGED => core::mem::size_of::<FiCqTaggedEntry>(),
            other => {
                return Err(FiError::inval(format!(
                    "{CALL}: format {other} is no fi_cq_format"
                )))
            }
        };
        let Waits {
            wake,
            fd_wait,
            parked,
            cond_wait,
        } = crate::wait::open_waits(CALL, "CQs", a.wait_obj)?;
        // FI_AFFINITY is the hint fi_cq(3) lets a provider ignore; any other flag is refused.
        if crate::without_affinity(CALL, a.flags, a.signaling_vector) != 0 {
            return Err(FiError::badflags(format!("{CALL}: flags {:#x}", a.flags)));
        }
        let boxed = Box::new(UetCq {
            fid: FidCq {
                fid: Fid {
                    fclass: FI_CLASS_CQ,
                    context,
                    ops: core::ptr::addr_of!(CQ_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(CQ_OPS).cast_mut(),
            },
            entry_size,
            inner: Mutex::new(Inner::default()),
            signaled: AtomicBool::new(false),
            signals: AtomicU64::new(0),
            bound: AtomicUsize::new(0),
            waiting: crate::wait::Waiters::default(),
            made_in: uet_driver::fork::MadeIn::here(),
            sleepers: AtomicBool::new(false),
            parked,
            wake,
            wait_obj: a.wait_obj,
            fd_wait,
            cond_wait,
            api_version,
            err_data: OwnedErrData::default(),
            domain_cqs,
            fabric,
        });
        boxed.domain_cqs.fetch_add(1, Ordering::AcqRel);
        // SAFETY: `cq` is non-NULL and writable (libfabric's contract).
        unsafe { *cq = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

unsafe extern "C" fn cq_close(fid: *mut Fid) -> c_int {
    const CALL: &str = "fi_close(cq)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let q = unsafe { cq_ref(fid, CALL) }?;
        {
            // Under the lock endpoints take to bind; in a process forked from the CQ's, only
            // if it is free: one a thread of the parent held at the fork stays held, none of
            // the child's being there to let it go. The parent's threads waiting then are
            // not counted either ([`crate::wait::Waiters`]).
            let _inner = q.made_in.lock(&q.inner);
            crate::wait::refuse_close_in_use(
                CALL,
                "CQ",
                q.bound.load(Ordering::Acquire),
                q.waiting.here(),
                "fi_cq_sread (fi_cq_signal)",
            )?;
        }
        // SAFETY: made by `Box::into_raw` in `domain_cq_open`; the application gives it up.
        let q = unsafe { Box::from_raw(fid.cast::<UetCq>()) };
        q.domain_cqs.fetch_sub(1, Ordering::AcqRel);
        drop(q);
        Ok(0)
    })
}

/// Read up to `count` successful entries into `buf` (and sources into `src`), after draining
/// the bound endpoints' rings.
///
/// # Safety
/// `buf` holds `count` entries of the CQ's format (or is NULL for a count of 0); `src` is
/// NULL or holds `count` addresses.
unsafe fn read_into(
    q: &UetCq,
    buf: *mut c_void,
    count: usize,
    src: *mut FiAddr,
    call: &str,
) -> Result<usize, FiError> {
    q.progress();
    // A count of 0 drives progress and reads nothing (fi_cq(3)); `buf` may then be NULL.
    if count == 0 {
        return Ok(0);
    }
    if buf.is_null() {
        return Err(null(call, "buf"));
    }
    let mut inner = q.lock();
    let mut n = 0;
    while n < count {
        match inner.queue.front() {
            // The answer of every read of an idle CQ, which an application polls in a loop:
            // made without formatting a message (the errno says it all).
            None if n == 0 => return Err(FiError::new(FiErrno::FI_EAGAIN, String::new())),
            Some(c) if c.error.is_some() => {
                if n == 0 {
                    return Err(FiError::new(
                        FiErrno::FI_EAVAIL,
                        format!("{call}: an error completion waits: read it with fi_cq_readerr"),
                    ));
                }
                break;
            }
            None => break,
            Some(_) => {}
        }
        let Some(c) = inner.queue.pop_front() else {
            break;
        };
        // SAFETY: entry `n` of `count` lies in `buf`, `entry_size` bytes long; the source
        // bytes are the first `entry_size` of the tagged entry (the formats are its
        // prefixes); `src` entry `n` likewise.
        unsafe {
            core::ptr::copy_nonoverlapping(
                (&c.entry as *const FiCqTaggedEntry).cast::<u8>(),
                buf.cast::<u8>().add(n * q.entry_size),
                q.entry_size,
            );
            if !src.is_null() {
                src.add(n).write_unaligned(c.src);
            }
        }
        n += 1;
    }
    Ok(n)
}

unsafe extern "C" fn cq_read(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: libfabric's contract on `buf`; no source array.
    unsafe { cq_readfrom(cq, buf, count, core::ptr::null_mut()) }
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut FiAddr,
) -> isize {
    const CALL: &str = "fi_cq_read";
    ssize(CALL, || {
        // SAFETY: the application's CQ pointer.
        let q = unsafe { cq_ref(cq.cast(), CALL) }?;
        // SAFETY: libfabric's contract on `buf` and `src_addr`.
        unsafe { read_into(q, buf, count, src_addr, CALL) }
    })
}

unsafe extern "C" fn cq_sread(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: libfabric's contract; no source array.
    unsafe { cq_sreadfrom(cq, buf, count, core::ptr::null_mut(), cond, timeout) }
}

/// A thread in `fi_cq_sread`, counted in [`UetCq::waiting`] until it returns.
struct Waiting<'a>(&'a UetCq);

impl<'a> Waiting<'a> {
    fn enter(q: &'a UetCq) -> Self {
        q.waiting.enter();
        Waiting(q)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.leave();
    }
}

/// The longest sleep between two reads of a waiting `fi_cq_sread` whose endpoints have no
/// vector.
pub(crate) const SREAD_SLEEP_MAX: Duration = Duration::from_millis(1);

/// The longest a `fi_cq_sread` or `fi_cntr_wait` sleeps on its endpoints' vectors before it
/// reads the rings again anyway. A wakeup another waiter took first (each waiter clears the
/// vectors when it arms them, and reads the object's `wake`) reaches it without this: the
/// drain of a completion writes `wake`, and whoever reads `wake` passes it on
/// ([`crate::wait`]). The bound covers a thread that could get no eventfd to park on.
pub(crate) const WAIT_RECHECK: Duration = Duration::from_millis(100);

/// The descriptor of an `FI_WAIT_FD` CQ or counter ([`crate::cntr`]): an epoll set, readable
/// while any descriptor in it is — the object's own eventfd, the `kick` through which its
/// waiting threads pass on a wakeup they took ([`crate::wait`]), and the vectors of its
/// endpoints, as the last `fi_trywait` armed them.
pub(crate) struct FdWait {
    epoll: OwnedFd,
    /// The vectors in the set besides the object's eventfds.
    members: Mutex<Vec<RawFd>>,
    /// Readable when a read of the object's endpoints is due (a refused send's retry,
    /// [`FdWait::hold_until`]); in the set only while one is. Made when first needed, it
    /// lives as long as the set.
    timer: Mutex<Option<vmm_sys_util::timerfd::TimerFd>>,
}

impl FdWait {
    /// The eventfd (`wake`), the descriptor and the waiters (with their `kick`) of an
    /// `FI_WAIT_FD` object, for its `call` (`fi_cq_open`, `fi_cntr_open`): `FI_ENOMEM` when
    /// a descriptor cannot be made (none is left open).
    pub(crate) fn open(call: &str) -> Result<(EventFd, FdWait, Sleepers), FiError> {
        let no = |what: &str, e: std::io::Error| {
            FiError::new(FiErrno::FI_ENOMEM, format!("{call}: no {what}: {e}"))
        };
        let eventfd = || EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).map_err(|e| no("eventfd", e));
        let (wake, kick) = (eventfd()?, eventfd()?);
        let fd_wait = FdWait::new(&[&wake, &kick]).map_err(|e| no("epoll set", e))?;
        Ok((wake, fd_wait, Sleepers::with_kick(kick)))
    }

    /// A set holding `fds`.
    fn new(fds: &[&EventFd]) -> std::io::Result<FdWait> {
        // SAFETY: epoll_create1 takes no pointer; a non-negative result is a new descriptor.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created, and nothing else owns it.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let w = FdWait {
            epoll,
            members: Mutex::new(Vec::new()),
            timer: Mutex::new(None),
        };
        for fd in fds {
            w.ctl(libc::EPOLL_CTL_ADD, fd.as_raw_fd())?;
        }
        Ok(w)
    }

    /// The epoll set's descriptor (`fi_control(FI_GETWAIT)`).
    pub(crate) fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Another descriptor of the same epoll set, for the thread of an `FI_WAIT_MUTEX_COND`
    /// object to sleep on ([`crate::wait::CondWait`]), however long the object keeps this one.
    pub(crate) fn watcher(&self) -> std::io::Result<OwnedFd> {
        self.epoll.try_clone()
    }

    fn ctl(&self, op: c_int, fd: RawFd) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is valid for the call; the kernel checks both descriptors.
        let r = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// [`FdWait::hold`] `fds`, and with `due` the set's timer too, armed to poll readable
    /// then: a read of the object's endpoints is due (a refused send's retry).
    pub(crate) fn hold_until(&self, fds: &[RawFd], due: Option<Instant>) -> std::io::Result<()> {
        let Some(due) = due else {
            return self.hold(fds);
        };
        let mut held = self.timer.lock().unwrap_or_else(PoisonError::into_inner);
        let timer = match held.as_mut() {
            Some(timer) => timer,
            None => {
                held.insert(vmm_sys_util::timerfd::TimerFd::new().map_err(std::io::Error::from)?)
            }
        };
        // At least a microsecond: a zero duration would disarm it.
        let after = due
            .saturating_duration_since(Instant::now())
            .max(Duration::from_micros(1));
        timer.reset(after, None).map_err(std::io::Error::from)?;
        let mut all = fds.to_vec();
        all.push(timer.as_raw_fd());
        self.hold(&all)
    }

    /// Make the set hold the signal eventfd and exactly `fds`: a vector no endpoint of the
    /// CQ holds any more leaves it, so its wakeups (for another endpoint) do not reach the
    /// CQ's waiter.
    pub(crate) fn hold(&self, fds: &[RawFd]) -> std::io::Result<()> {
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        for &gone in members.iter().filter(|f| !fds.contains(f)) {
            // The vector's eventfd lives as long as the NIC: EPOLL_CTL_DEL cannot miss it.
            let _ = self.ctl(libc::EPOLL_CTL_DEL, gone);
        }
        members.retain(|f| fds.contains(f));
        for &new in fds {
            if members.contains(&new) {
                continue;
            }
            match self.ctl(libc::EPOLL_CTL_ADD, new) {
                // `members` stays what the set holds, so the next call adds the rest.
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
                _ => members.push(new),
            }
        }
        Ok(())
    }
}

/// `fi_control` of a CQ: `FI_GETWAIT` (an `FI_WAIT_FD` CQ's descriptor, into the `int` at
/// `arg`) and `FI_GETWAITOBJ` (the CQ's `enum fi_wait_obj`). `-FI_ENODATA` for a wait object
/// the CQ does not have (`FI_GETWAIT` of a CQ not opened with `FI_WAIT_FD`, either of a CQ
/// opened with `FI_WAIT_NONE`), `-FI_ENOSYS` for other commands.
unsafe extern "C" fn cq_control(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int {
    const CALL: &str = "fi_control(cq)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let q = unsafe { cq_ref(fid, CALL) }?;
        let handle = match (&q.cond_wait, &q.fd_wait) {
            (Some(w), _) => Some(WaitHandle::MutexCond(w)),
            (None, w) => w.as_ref().map(|w| WaitHandle::Fd(w.fd())),
        };
        // SAFETY: `arg` as libfabric passes it.
        unsafe { crate::wait::control(CALL, "CQ", q.wait_obj, q.waitable(), handle, command, arg) }
    })
}

/// An object `fi_trywait` takes.
enum Waitable<'a> {
    Cq(&'a UetCq),
    Eq(&'a crate::eq::UetEq),
    Cntr(&'a crate::cntr::UetCntr),
}

impl Waitable<'_> {
    /// The provider's object behind `fid`, when it has a wait object the application sleeps
    /// on itself (`FI_WAIT_FD`, `FI_WAIT_MUTEX_COND`) and was opened under `fabric`;
    /// `FI_EINVAL` otherwise.
    ///
    /// # Safety
    /// `fid` is NULL or a live libfabric object.
    unsafe fn of<'a>(fid: *mut Fid, fabric: &Fabric, call: &str) -> Result<Waitable<'a>, FiError> {
        // SAFETY: NULL or a live object (the caller's promise); only its `struct fid` read.
        let class = unsafe { fid.as_ref() }
            .ok_or_else(|| null(call, "a fid"))?
            .fclass;
        let (w, wait_obj, ours) = match class {
            FI_CLASS_EQ => {
                // SAFETY: the caller's promise (checked by class and table).
                let q = unsafe { crate::eq::eq_ref(fid, call) }?;
                (Waitable::Eq(q), q.has_native_wait(), q.of_fabric(fabric))
            }
            FI_CLASS_CNTR => {
                // SAFETY: the caller's promise (checked by class and table).
                let c = unsafe { crate::cntr::cntr_ref(fid, call) }?;
                (Waitable::Cntr(c), c.has_native_wait(), fabric.is(&c.fabric))
            }
            _ => {
                // SAFETY: the caller's promise (checked by class and table).
                let q = unsafe { cq_ref(fid, call) }?;
                (Waitable::Cq(q), q.has_native_wait(), fabric.is(&q.fabric))
            }
        };
        // Another fabric's object is none of the fabric descriptors fi_trywait checks
        // (fi_poll(3)): arming it would say nothing of this fabric's.
        if !ours {
            return Err(FiError::inval(format!(
                "{call}: an object of another fabric (fi_trywait takes the objects of the \
                 fabric it is called on)"
            )));
        }
        if !wait_obj {
            return Err(FiError::inval(format!(
                "{call}: an object without a descriptor (fi_trywait takes CQs, EQs and counters \
                 opened with FI_WAIT_FD or FI_WAIT_MUTEX_COND)"
            )));
        }
        Ok(w)
    }

    fn trywait(&self, call: &str) -> Result<(), FiError> {
        match self {
            Waitable::Cq(q) => q.trywait(call),
            Waitable::Eq(q) => q.trywait(),
            Waitable::Cntr(c) => c.trywait(call),
        }
    }
}

/// `fi_trywait(fabric, fids, count)`: every fid must be one of the provider's CQs, EQs or
/// counters opened with `FI_WAIT_FD` or `FI_WAIT_MUTEX_COND` under `fabric` (else
/// `-FI_EINVAL`, nothing armed); `0` when the application may sleep on all their wait
/// objects, `-FI_EAGAIN` when it must read one of them first ([`UetCq::trywait`],
/// [`crate::eq::UetEq::trywait`], [`crate::cntr::UetCntr::trywait`]).
pub(crate) unsafe extern "C" fn fabric_trywait(
    fabric: *mut FidFabric,
    fids: *mut *mut Fid,
    count: c_int,
) -> c_int {
    const CALL: &str = "fi_trywait";
    entry(CALL, || {
        // SAFETY: the application's fabric pointer.
        let fabric = unsafe { crate::fabric::fabric_ref(fabric) }?;
        let count =
            usize::try_from(count).map_err(|_| FiError::inval(format!("{CALL}: count {count}")))?;
        // SAFETY: `count` fid pointers at `fids` (libfabric's contract), only read.
        let fids = unsafe { crate::av::c_slice_needed(fids.cast_const(), count, CALL, "fids") }?;
        let objects = fids
            .iter()
            // SAFETY: each an application's object pointer (checked by class and table).
            .map(|&fid| unsafe { Waitable::of(fid, fabric, CALL) })
            .collect::<Result<Vec<_>, _>>()?;
        for w in objects {
            w.trywait(CALL)?;
        }
        Ok(0)
    })
}

/// `FI_EIO` of `call` on a CQ or counter whose NIC stopped (a fatal error, or its function
/// reset), `consequence` saying what the call would otherwise have waited for.
pub(crate) fn stopped(call: &str, consequence: &str) -> FiError {
    FiError::new(
        FiErrno::FI_EIO,
        format!(
            "{call}: the NIC stopped (a fatal error, or its function was reset): {consequence}"
        ),
    )
}

/// The look a wait without end takes at its NIC: a NIC that stopped writes no completion
/// and raises no vector, so nothing else would end the wait. At most one look every
/// [`WAIT_RECHECK`] the wait goes on.
pub(crate) struct StatusLook(Instant);

impl StatusLook {
    /// A wait starting now.
    pub(crate) fn new() -> Self {
        StatusLook(Instant::now())
    }

    /// Whether the NIC stopped, asked of `stopped` when a look is due at `now`.
    pub(crate) fn stopped(&mut self, now: Instant, stopped: impl FnOnce() -> bool) -> bool {
        if now.duration_since(self.0) < WAIT_RECHECK {
            return false;
        }
        self.0 = now;
        stopped()
    }
}

/// What arming the CQ's endpoints for a wait gave.
enum Armed {
    /// A completion came since the last read: read again.
    Ready,
    /// Every enabled endpoint is armed; these descriptors poll readable when one completes,
    /// and a read is due at the instant given, if any (a refused send's retry).
    Fds(Vec<RawFd>, Option<Instant>),
    /// An endpoint has no vector: read the rings again after a while.
    NoWait,
}

/// The earlier of two instants a read is due at, either possibly none.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Sleep in poll(2) until one of `fds` is readable or `timeout` passes (a signal that
/// interrupts it ends it early, which the caller's loop absorbs). Which of `fds` were
/// readable (none after a timeout).
pub(crate) fn poll_readable(fds: &[RawFd], timeout: Duration) -> Vec<bool> {
    poll_fds(fds, timeout).ready
}

/// What a sleep in poll(2) ([`poll_fds`]) saw.
pub(crate) struct Polled {
    /// Which of the descriptors were readable (none after a timeout or an interruption).
    pub(crate) ready: Vec<bool>,
    /// A signal delivered to the thread ended the sleep early (`EINTR`).
    pub(crate) interrupted: bool,
}

/// Sleep in poll(2) until one of `fds` is readable, `timeout` passes, or a signal delivered
/// to the thread interrupts the sleep.
pub(crate) fn poll_fds(fds: &[RawFd], timeout: Duration) -> Polled {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Rounded up, so a wait of less than a millisecond still sleeps.
    let ms = libc::c_int::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
    let Ok(n) = libc::nfds_t::try_from(pfds.len()) else {
        return Polled {
            ready: vec![false; fds.len()],
            interrupted: false,
        };
    };
    // SAFETY: `pfds` is a vector of `n` valid pollfds, alive for the whole call; poll(2)
    // writes only their `revents`. The descriptors are eventfds open as long as the NIC and
    // the CQ (an fd closed meanwhile would only report POLLNVAL).
    let ready = unsafe { libc::poll(pfds.as_mut_ptr(), n, ms) };
    let interrupted =
        ready < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
    Polled {
        ready: pfds
            .iter()
            .map(|p| ready > 0 && p.revents & libc::POLLIN != 0)
            .collect(),
        interrupted,
    }
}

/// Sleep for `d` (less than a second), or less when a signal delivered to the thread
/// interrupts the sleep: whether one did. Unlike `std::thread::sleep`, which sleeps on
/// through signals.
fn nap(d: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(d.subsec_nanos()),
    };
    // SAFETY: `ts` is a valid timespec for the call; no remainder is asked for.
    let r = unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// What a waiter of a CQ or counter does after its sleep on its endpoints' vectors, the
/// object's `wake` and its own eventfd (`me`), in that order in `fds`, of which `ready` were
/// readable: a wakeup it reads from `wake` (when `take_wake`) is passed on to the object's
/// other waiters ([`crate::wait`]), and the wakeups passed on to it are taken.
pub(crate) fn after_sleep(
    sleepers: &Sleepers,
    me: &Parked<'_>,
    wake: &EventFd,
    ready: &[bool],
    take_wake: bool,
) {
    let own = usize::from(me.fd().is_some());
    let wake_ready = ready
        .len()
        .checked_sub(own + 1)
        .and_then(|at| ready.get(at))
        .copied()
        .unwrap_or(false);
    if take_wake && wake_ready && wake.read().is_ok() {
        sleepers.fan_out(Some(me));
    }
    if own == 1 && ready.last().copied().unwrap_or(false) {
        me.clear();
    }
}

unsafe extern "C" fn cq_sreadfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut FiAddr,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    const CALL: &str = "fi_cq_sread";
    ssize(CALL, || {
        // SAFETY: the application's CQ pointer.
        let q = unsafe { cq_ref(cq.cast(), CALL) }?;
        if !q.waitable() {
            return Err(FiError::inval(format!(
                "{CALL}: the CQ was opened with FI_WAIT_NONE"
            )));
        }
        let _waiting = Waiting::enter(q);
        // A wait condition is a hint a provider need not meet before waking (fi_cq(3)):
        // the wait ends at the first completion, whatever `cond` asks.
        let _ = cond;
        let deadline = u64::try_from(timeout)
            .ok()
            .and_then(|ms| Instant::now().checked_add(Duration::from_millis(ms)));
        // The signals counted on entry: every thread waiting when a signal comes returns.
        let signals = q.signals.load(Ordering::Acquire);
        let mut sleep = Duration::from_micros(1);
        // Among the CQ's waiters from its first sleep on (after `_waiting`: it leaves first).
        let mut parked: Option<Parked<'_>> = None;
        let mut look = StatusLook::new();
        // A signal delivered to the thread (a POSIX signal) cut its last sleep short.
        let mut interrupted = false;
        loop {
            // SAFETY: libfabric's contract on `buf` and `src_addr`.
            match unsafe { read_into(q, buf, count, src_addr, CALL) } {
                Err(e) if e.errno == FiErrno::FI_EAGAIN => {}
                other => return other,
            }
            if q.signaled.swap(false, Ordering::AcqRel)
                || q.signals.load(Ordering::Acquire) != signals
            {
                return Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    format!("{CALL}: signaled"),
                ));
            }
            // fi_cq(3): a thread "signaled by some external source" returns, "even if the
            // timeout has not occurred or was specified as infinite", once the read above
            // found nothing.
            if interrupted {
                return Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    format!("{CALL}: interrupted by a signal"),
                ));
            }
            let now = Instant::now();
            if timeout >= 0 && deadline.is_none_or(|d| now >= d) {
                return Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    format!("{CALL}: timed out"),
                ));
            }
            if look.stopped(now, || q.device_stopped()) {
                return Err(stopped(CALL, "no completion will come"));
            }
            let left = deadline.map(|d| d.saturating_duration_since(now));
            if let Some(wake) = &q.wake {
                // Parked before it arms anything: a wakeup another waiter of the CQ takes
                // from `wake` from here on is passed on to this one.
                let me = &*parked.get_or_insert_with(|| q.parked.park());
                // A signal that came after the look above may have had its wakeup taken
                // already, by a thread or `fi_trywait` that found this one not yet parked to
                // pass it on to: it is seen now, as `arm_endpoints` sees a completion.
                if q.signals.load(Ordering::Acquire) != signals {
                    continue;
                }
                match q.arm_endpoints() {
                    Armed::Ready => continue,
                    Armed::Fds(mut fds, due) => {
                        fds.push(wake.as_raw_fd());
                        fds.extend(me.fd());
                        let cap = left.map_or(WAIT_RECHECK, |l| l.min(WAIT_RECHECK));
                        // A retry due reads the rings then (`due` is later than now).
                        let cap = due.map_or(cap, |d| {
                            cap.min(d.saturating_duration_since(Instant::now()))
                        });
                        let polled = poll_fds(&fds, cap);
                        interrupted = polled.interrupted;
                        // A signal that came during the wait is left for every other thread
                        // waiting then, which returns too. Anything else is taken, so it
                        // wakes no one again, and passed on to the CQ's other waiters: a
                        // completion queued here by another read (read next), an endpoint
                        // enabled, a signal this wait has seen already.
                        let take = q.signals.load(Ordering::Acquire) == signals;
                        after_sleep(&q.parked, me, wake, &polled.ready, take);
                        continue;
                    }
                    Armed::NoWait => {}
                }
            }
            interrupted = nap(left.map_or(sleep, |l| sleep.min(l)));
            sleep = (sleep * 2).min(SREAD_SLEEP_MAX);
        }
    })
}

unsafe extern "C" fn cq_readerr(cq: *mut FidCq, buf: *mut FiCqErrEntry, flags: u64) -> isize {
    const CALL: &str = "fi_cq_readerr";
    ssize(CALL, || {
        // SAFETY: the application's CQ pointer.
        let q = unsafe { cq_ref(cq.cast(), CALL) }?;
        if buf.is_null() {
            return Err(null(CALL, "buf"));
        }
        if flags != 0 {
            return Err(FiError::badflags(format!("{CALL}: flags {flags:#x}")));
        }
        q.progress();
        let c = {
            let mut inner = q.lock();
            if inner.queue.front().is_none_or(|c| c.error.is_none()) {
                return Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    format!("{CALL}: no error completion"),
                ));
            }
            inner.queue.pop_front()
        };
        let Some(Completion {
            entry: e,
            error: Some(err),
            ..
        }) = c
        else {
            return Err(FiError::new(
                FiErrno::FI_EAGAIN,
                format!("{CALL}: no error completion"),
            ));
        };
        // Before API 1.5 the application's `struct fi_cq_err_entry` ends at `err_data`
        // (libfabric's `fi_cq_err_entry_1_0`): `err_data_size` is neither read nor written,
        // and neither is the buffer `err_data` names (fi_cq(3), compatibility note).
        let whole = q.api_version >= FI_ERR_DATA_BUFFER_API;
        let (app_data, app_size) = if whole {
            // SAFETY: `buf` is a whole entry of this API version (libfabric's contract).
            unsafe { ((*buf).err_data, (*buf).err_data_size) }
        } else {
            (core::ptr::null_mut(), 0)
        };
        // SAFETY: `err_data` is NULL or the application's buffer of `err_data_size` bytes
        // (libfabric's contract).
        let (err_data, err_data_size) = unsafe {
            q.err_data
                .give(q.api_version, err.message.as_bytes(), app_data, app_size)
        };
        let entry = FiCqErrEntry {
            op_context: e.op_context,
            flags: e.flags,
            len: e.len,
            buf: e.buf,
            data: e.data,
            tag: e.tag,
            olen: err.olen,
            err: c_int::try_from(err.errno.get()).unwrap_or(c_int::MAX),
            prov_errno: err.prov_errno,
            err_data,
            err_data_size,
        };
        let bytes = if whole {
            core::mem::size_of::<FiCqErrEntry>()
        } else {
            core::mem::offset_of!(FiCqErrEntry, err_data_size)
        };
        // SAFETY: `buf` holds an entry of the application's API version, `bytes` long
        // (libfabric's contract), which `entry` does not overlap; it need not be aligned.
        unsafe {
            core::ptr::copy_nonoverlapping((&raw const entry).cast::<u8>(), buf.cast::<u8>(), bytes)
        };
        Ok(1)
    })
}

unsafe extern "C" fn cq_signal(cq: *mut FidCq) -> c_int {
    const CALL: &str = "fi_cq_signal";
    entry(CALL, || {
        // SAFETY: the application's CQ pointer.
        let q = unsafe { cq_ref(cq.cast(), CALL) }?;
        q.signaled.store(true, Ordering::Release);
        q.signals.fetch_add(1, Ordering::AcqRel);
        q.wake_waiters();
        Ok(0)
    })
}

unsafe extern "C" fn cq_strerror(
    _cq: *mut FidCq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: `buf` is NULL or holds `len` bytes (libfabric's contract).
    unsafe {
        strerror(
            c"uet provider error: the NIC's completion status; err_data holds the message",
            "NIC completion status",
            prov_errno,
            buf,
            len,
        )
    }
}

/// `FI_ADDR_NOTAVAIL`, the source of a completion that has none.
pub(crate) const NO_SOURCE: FiAddr = FI_ADDR_NOTAVAIL;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A CQ of `FI_WAIT_UNSPEC` with no endpoint bound, as `fi_cq_open` makes it.
    fn waitable_cq() -> UetCq {
        UetCq {
            fid: FidCq {
                fid: Fid {
                    fclass: FI_CLASS_CQ,
                    context: core::ptr::null_mut(),
                    ops: core::ptr::addr_of!(CQ_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(CQ_OPS).cast_mut(),
            },
            entry_size: core::mem::size_of::<*mut c_void>(),
            inner: Mutex::new(Inner::default()),
            signaled: AtomicBool::new(false),
            signals: AtomicU64::new(0),
            bound: AtomicUsize::new(0),
            waiting: crate::wait::Waiters::default(),
            made_in: uet_driver::fork::MadeIn::here(),
            sleepers: AtomicBool::new(false),
            parked: Sleepers::new(),
            wake: Some(EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).unwrap()),
            wait_obj: FI_WAIT_UNSPEC,
            fd_wait: None,
            cond_wait: None,
            api_version: 0,
            err_data: OwnedErrData::default(),
            domain_cqs: Arc::new(AtomicUsize::new(0)),
            fabric: FabricTag::of_domains(&Arc::default()),
        }
    }

    /// In a process forked while a thread of the parent held the CQ's lock, an endpoint's
    /// close still unbinds it from the CQ, which may then close, instead of waiting for good
    /// for a lock no thread of the child will let go.
    #[test]
    fn a_forked_childs_unbind_takes_no_lock_a_thread_of_its_parent_held() {
        let cq = waitable_cq();
        let ep = EpShared::lane(false);
        cq.attach(&ep);
        // The lock by address: the completions it guards hold raw pointers, not `Send`.
        let inner = core::ptr::addr_of!(cq.inner) as usize;
        let hold = move |wait: &dyn Fn()| {
            // SAFETY: the CQ's mutex, which outlives the call; only locked here.
            let inner = unsafe { &*(inner as *const Mutex<Inner>) };
            let _inner = inner.lock();
            wait();
        };
        let status = crate::wait::tests::in_child_while_held(hold, || {
            cq.detach(&ep, false);
            if cq.bound.load(Ordering::Acquire) == 0 {
                0
            } else {
                2
            }
        });
        assert_eq!(status, Some(0), "the child unbound the endpoint");
        // The parent's own unbind takes the lock, once free, as ever.
        cq.detach(&ep, false);
        assert_eq!(cq.bound.load(Ordering::Acquire), 0);
        assert!(cq.lock().endpoints.is_empty());
    }

    /// A thread in `fi_cq_sread` that looked at the signals just before an `fi_cq_signal`,
    /// and parks only after another waiter (or `fi_trywait`) took the signal's wakeup from
    /// `wake` and passed it on to the threads parked then, which it was not among: it sees
    /// the signal once parked and returns at once, rather than sleeping on until its
    /// periodic look.
    #[test]
    fn a_thread_parking_after_a_signals_wakeup_was_taken_still_returns_at_once() {
        let q = Box::into_raw(Box::new(waitable_cq()));
        // SAFETY: freed only below, once the waiter has returned.
        let cq = unsafe { &*q };
        let at = q as usize;
        // Nobody parks until the list is let go.
        let list = cq.parked.hold();
        let (done, returned) = mpsc::channel();
        std::thread::spawn(move || {
            let mut entry: *mut c_void = core::ptr::null_mut();
            let buf = core::ptr::addr_of_mut!(entry).cast::<c_void>();
            // SAFETY: `at` is the CQ, alive until this thread reports; one entry at `buf`.
            let r = unsafe { cq_sread(at as *mut FidCq, buf, 1, core::ptr::null(), 10_000) };
            let _ = done.send((r, Instant::now()));
        });
        let entered = Instant::now();
        while cq.waiting.here() == 0 {
            assert!(
                entered.elapsed() < Duration::from_secs(10),
                "the waiter never came"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Time to look at the signals and the queue, and block parking.
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: the CQ is alive.
        assert_eq!(unsafe { cq_signal(q.cast()) }, 0);
        // What fi_trywait does (or a thread that entered after the signal and woke): the
        // wakeup is taken, and passed on to the threads parked then (`fan_out`): none.
        assert!(cq.signaled.swap(false, Ordering::AcqRel));
        assert!(cq.wake.as_ref().unwrap().read().is_ok());
        assert!(list.is_empty());
        drop(list);
        let released = Instant::now();
        let (r, at) = returned
            .recv_timeout(Duration::from_secs(10))
            .expect("the waiter returned");
        assert_eq!(r, -(FiErrno::FI_EAGAIN.get() as isize));
        let slept = at.saturating_duration_since(released);
        assert!(
            slept < WAIT_RECHECK * 3 / 4,
            "the waiter slept {slept:?} through fi_cq_signal"
        );
        // SAFETY: made by `Box::into_raw` above; the waiter has returned.
        drop(unsafe { Box::from_raw(q) });
    }
}
