//! `fi_cntr_open` and `struct fi_ops_cntr`: completion counters that endpoints bind to with
//! `fi_ep_bind(FI_SEND | FI_RECV)`.
//!
//! A counter holds two numbers: the operations of its endpoints that completed successfully
//! (`fi_cntr_read`) and those that completed in error (`fi_cntr_readerr`). Each send or
//! receive of an endpoint bound to the counter for its direction adds one to either when it
//! completes, whether or not it writes a CQ entry: a call under `FI_SELECTIVE_COMPLETION`
//! without `FI_COMPLETION`, and an `fi_inject` (which never reports its success to the CQ),
//! count all the same (fi_cntr(3)). A receive whose message was truncated counts as an error,
//! as its CQ entry is one. The count is an atomic add where the endpoint's completions are
//! drained ([`crate::ep`]); no lock is taken for it. An endpoint's `fi_close` drains them
//! too, so an operation the NIC completed before the close is counted even when no read of
//! the counter came between.
//!
//! The NIC writes completions into each endpoint's ring, which a read of a CQ or counter of
//! the endpoint drains (`FI_PROGRESS_AUTO`): an application may read only the counter.
//!
//! * `fi_cntr_open(domain, attr, &cntr, context)`: `attr->events` is `FI_CNTR_EVENTS_COMP`
//!   (libfabric 2's `FI_CNTR_EVENTS_BYTES` is `-FI_ENOSYS`, any other value `-FI_EINVAL`);
//!   `wait_obj` `FI_WAIT_NONE`, or `FI_WAIT_UNSPEC`, `FI_WAIT_MUTEX_COND`, `FI_WAIT_YIELD`,
//!   `FI_WAIT_FD`, which all wait as `fi_cq_sread` does ([`crate::cq`]); wait sets and
//!   `FI_WAIT_POLLFD` are `-FI_ENOSYS`, and a value that is no `enum fi_wait_obj` is
//!   `-FI_EINVAL`, as for a CQ. `flags` must be 0
//!   (`-FI_EBADFLAGS`). A NULL `attr` is `FI_CNTR_EVENTS_COMP` with `FI_WAIT_NONE`. A domain
//!   holds at most [`CNTR_CNT`] counters (`domain_attr->cntr_cnt`; `-FI_ENOSPC` beyond).
//! * `fi_cntr_read`, `fi_cntr_readerr`: drain the bound endpoints' rings, then give the
//!   value. The calls return no error: a pointer that is no counter of the provider reads 0.
//! * `fi_cntr_add`, `fi_cntr_adderr`, `fi_cntr_set`, `fi_cntr_seterr`: change a value (an
//!   addition wraps at 2^64); a thread in `fi_cntr_wait` looks at the new value.
//! * `fi_cntr_wait(cntr, threshold, timeout)`: 0 once the value is at least `threshold`;
//!   `-FI_EAVAIL` when the error count changes during the wait (fi_cntr(3): any change of it
//!   unblocks the waiter; read it with `fi_cntr_readerr`); `-FI_ETIMEDOUT` after `timeout`
//!   ms (negative: no end); `-FI_EIO` once the NIC of an endpoint counting into it stopped (a
//!   fatal error, or its function reset), looked at every 100 ms the wait goes on. It drains the rings and sleeps in poll(2) on the endpoints'
//!   MSI-X vectors and the counter's own eventfd (which a count made by another thread's
//!   read, an `fi_cntr_add` or `fi_cntr_set`, or an endpoint of the counter enabled makes
//!   readable), at most 100 ms between reads. Several threads may wait at once, beside an
//!   application asleep on the `FI_WAIT_FD` descriptor: a wakeup one of them takes from the
//!   counter's eventfd is passed on to every other ([`crate::wait`]), so each looks at the
//!   new values at once. Where an endpoint has no vector, it reads the
//!   rings with a sleep growing from 1 µs to 1 ms between reads instead, as `fi_cq_sread`
//!   does. `-FI_EINVAL` on a counter opened with `FI_WAIT_NONE`.
//! * `FI_WAIT_FD`: `fi_control(FI_GETWAIT)` gives the counter's descriptor, an epoll set of
//!   its own eventfd, the eventfd through which threads in `fi_cntr_wait` pass on a wakeup
//!   they took, and its endpoints' vectors (as an `FI_WAIT_FD` CQ's), usable in select,
//!   poll and epoll. After `fi_trywait(fabric, fids, count)` returns 0 it polls readable when
//!   the counter may have changed: a completion lands on a bound endpoint, another thread's
//!   read of a CQ or counter of the endpoint counts one here, `fi_cntr_add`, `fi_cntr_set`,
//!   `fi_cntr_adderr` or `fi_cntr_seterr` comes, or an endpoint of the counter is enabled.
//!   The count itself is made when the rings are drained, so after a wakeup `fi_cntr_read`
//!   shows it. `fi_trywait` drains the rings and arms the endpoints' vectors; it is
//!   `-FI_EAGAIN` when the counter changed since the last `fi_trywait` (read it first), and
//!   while an endpoint of the counter has no vector (read rather than sleep); `-FI_EIO` once
//!   the NIC of an endpoint of the counter stopped, which raises nothing more.
//! * `FI_WAIT_MUTEX_COND`: `fi_control(FI_GETWAIT)` writes the counter's `struct
//!   fi_mutex_cond` (a pthread mutex and condition it owns) at `arg`. The application reads
//!   the counter and calls `fi_trywait` under the mutex, and sleeps on the condition when
//!   `fi_trywait` gives 0, as it would on the descriptor of an `FI_WAIT_FD` counter, which it
//!   has but does not see: `fi_trywait` answers as for one, and arms the same epoll set. As
//!   for a CQ ([`crate::cq`]), a thread of the counter's own (`crate::wait::CondWait`,
//!   started by the first `FI_GETWAIT`) sleeps on that set after each successful `fi_trywait`, and broadcasts the condition
//!   under the mutex when it polls readable: a completion lands on a bound endpoint, another
//!   thread's read counts one here (successful or in error), a value is added or set, an
//!   endpoint is enabled, or the NIC stops. `fi_cntr_add`, `fi_cntr_set`, `fi_cntr_adderr`
//!   and `fi_cntr_seterr` broadcast it at once too, as do a count made while a waiter sleeps
//!   and an endpoint enabled. The broadcast waits for the mutex, which the application lets
//!   go only as it sleeps, so a count made between its read and its sleep wakes it; no
//!   thread that counts waits for the mutex, and a count takes nothing more while no one
//!   waits.
//! * `fi_control`: `FI_GETWAITOBJ` gives the counter's wait object, `FI_GETWAIT` the
//!   descriptor of an `FI_WAIT_FD` counter or the mutex and condition of an
//!   `FI_WAIT_MUTEX_COND` one; both are `-FI_ENODATA` for a wait object the counter does not
//!   have (`FI_GETWAIT` of any other, either of `FI_WAIT_NONE`), as for a CQ.
//! * `fi_close`: `-FI_EBUSY` while endpoints are bound to it (they unbind when they close), or
//!   while a thread waits in `fi_cntr_wait` (of this process: as for a CQ, a forked child
//!   counts none of its parent's). An `FI_WAIT_FD` counter's descriptors are
//!   closed; an `FI_WAIT_MUTEX_COND` counter's thread ends, and its mutex and condition are
//!   destroyed.
//!
//! Counters of RMA (`FI_READ`, `FI_WRITE`, `FI_REMOTE_READ`, `FI_REMOTE_WRITE`) are not
//! served, as RMA is not: binding with those flags is `-FI_EBADFLAGS`.

use crate::abi::*;
use crate::cq::{
    after_sleep, poll_readable, stopped, FdWait, StatusLook, SREAD_SLEEP_MAX, WAIT_RECHECK,
};
use crate::ep::{Arm, EpShared};
use crate::wait::{CondWait, Parked, Sleepers, WaitHandle, Waits};
use crate::{entry, null, object_ref, unsupported};
use core::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use uet_av::{FiErrno, FiError};
use vmm_sys_util::eventfd::EventFd;

/// Most counters a domain holds open (`domain_attr->cntr_cnt`). A counter is a host object
/// (two atomics and an eventfd, for `FI_WAIT_FD` another eventfd and an epoll set, and for
/// `FI_WAIT_MUTEX_COND` those, a pthread mutex and condition, and a thread), not a NIC
/// resource: the bound keeps a runaway application from exhausting the process's
/// descriptors.
pub const CNTR_CNT: usize = 1024;

/// `FI_CNTR_EVENTS_BYTES`, libfabric 2's counter of bytes transferred: not served.
const FI_CNTR_EVENTS_BYTES: c_int = 1;

/// A counter: libfabric's `fid_cntr` first.
#[repr(C)]
pub struct UetCntr {
    fid: FidCntr,
    /// Successful completions (and what `fi_cntr_add`/`fi_cntr_set` made of them).
    value: AtomicU64,
    /// Completions in error.
    errors: AtomicU64,
    /// The endpoints bound to the counter, drained when it is read; shared with the reads,
    /// which take it without copying the list (copy on write for a bind or close).
    endpoints: Mutex<Arc<Vec<Arc<EpShared>>>>,
    /// Endpoint bindings (`fi_close` is `FI_EBUSY` while any are).
    bound: AtomicUsize,
    /// Threads in `fi_cntr_wait` (`fi_close` is `FI_EBUSY` while any are).
    waiting: crate::wait::Waiters,
    /// The process that opened it: in one forked from it, its lock may be held by a thread
    /// that is not there ([`uet_driver::fork`]).
    made_in: uet_driver::fork::MadeIn,
    /// A waiter armed the rings and may be asleep: the next change writes `wake`.
    sleepers: AtomicBool,
    /// The threads in `fi_cntr_wait` and the `FI_WAIT_FD` descriptor's `kick`: the waiter
    /// that reads a wakeup from `wake` passes it on to them ([`crate::wait`]).
    parked: Sleepers,
    /// Readable after a change of the counter while a waiter slept, or after an endpoint of
    /// the counter was enabled. `None` on a counter without a wait object, or when no
    /// eventfd could be made (its waits then read the rings with a growing sleep).
    wake: Option<EventFd>,
    /// The wait object it was opened with.
    wait_obj: c_int,
    /// `FI_WAIT_FD`: the descriptor `fi_control(FI_GETWAIT)` gives, an epoll set of `wake`,
    /// the `kick` of `parked` and the vectors of the endpoints `fi_trywait` armed.
    /// `FI_WAIT_MUTEX_COND`: the same set, which `cond_wait` watches.
    fd_wait: Option<FdWait>,
    /// `FI_WAIT_MUTEX_COND`: the mutex and condition `fi_control(FI_GETWAIT)` gives, and the
    /// thread that broadcasts the condition for every change and, after `fi_trywait`, once
    /// `fd_wait` polls readable.
    cond_wait: Option<CondWait>,
    /// `FI_WAIT_FD`, `FI_WAIT_MUTEX_COND`: the counter changed since the last `fi_trywait`,
    /// which then says to read it rather than sleep.
    changed: AtomicBool,
    /// The count of its domain's open counters, which it is on until it closes.
    domain_cntrs: Arc<AtomicUsize>,
    /// The fabric of its domain: `fi_trywait` takes it on that fabric only.
    pub(crate) fabric: crate::fabric::FabricTag,
}

impl UetCntr {
    fn lock(&self) -> MutexGuard<'_, Arc<Vec<Arc<EpShared>>>> {
        self.endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Bind an endpoint: its rings are drained when the counter is read or waited on.
    pub(crate) fn attach(&self, ep: &Arc<EpShared>) {
        let mut eps = self.lock();
        if !eps.iter().any(|e| Arc::ptr_eq(e, ep)) {
            Arc::make_mut(&mut eps).push(ep.clone());
        }
        self.bound.fetch_add(1, Ordering::AcqRel);
    }

    /// Unbind an endpoint (its close), once per [`UetCntr::attach`]; `still_bound` when it
    /// stays bound in its other direction (a scalable endpoint's ring set, whose transmit
    /// and receive contexts close one by one), which keeps it drained here.
    /// In a process forked from the counter's, the lock is taken only if it is free, as by
    /// the counter's close: one a thread of the parent held at the fork stays held, and the
    /// endpoint then stays on the list, which only a read of that copy would walk, while the
    /// binding is counted out all the same.
    pub(crate) fn detach(&self, ep: &Arc<EpShared>, still_bound: bool) {
        if let Some(mut eps) = self.made_in.lock(&self.endpoints) {
            if !still_bound {
                Arc::make_mut(&mut eps).retain(|e| !Arc::ptr_eq(e, ep));
            }
        }
        self.bound.fetch_sub(1, Ordering::AcqRel);
    }

    /// Count `n` completions: successful ones when `ok`, else errors. An endpoint's drain
    /// calls it under the endpoint's lock.
    pub(crate) fn count(&self, ok: bool, n: u64) {
        let v = if ok { &self.value } else { &self.errors };
        // SeqCst, paired with the waiter's store of `sleepers` and its look at the values:
        // either the waiter sees this count, or this call sees its flag.
        v.fetch_add(n, Ordering::SeqCst);
        self.changed();
    }

    /// A value changed: a waiter asleep since it armed the rings wakes, and the next
    /// `fi_trywait` of an `FI_WAIT_FD` counter says to read it.
    fn changed(&self) {
        if self.fd_wait.is_some() {
            // SeqCst, paired with `trywait`'s store of `sleepers` and its look at this flag.
            self.changed.store(true, Ordering::SeqCst);
        }
        self.wake_sleepers();
    }

    /// Whether the application may sleep on its wait object after `fi_trywait`: opened with
    /// `FI_WAIT_FD` or `FI_WAIT_MUTEX_COND`.
    pub(crate) fn has_native_wait(&self) -> bool {
        self.fd_wait.is_some()
    }

    /// `fi_trywait` of this counter: `Ok` when the application may sleep on its `FI_WAIT_FD`
    /// descriptor, which then polls readable when the counter may have changed (a completion
    /// lands on a bound endpoint, a count or an `fi_cntr_add`/`set` is made by another
    /// thread), or on its `FI_WAIT_MUTEX_COND` condition, which is then broadcast for the
    /// same. The rings are drained first. `FI_EAGAIN` when the counter changed since the
    /// last `fi_trywait` (the application reads it first), or when an endpoint has no vector,
    /// so that sleeping could miss its completions. `FI_EIO` once the NIC of an endpoint
    /// stopped, as for `fi_cntr_wait`.
    pub(crate) fn trywait(&self, call: &str) -> Result<(), FiError> {
        let (Some(fd_wait), Some(wake)) = (&self.fd_wait, &self.wake) else {
            return Err(FiError::inval(format!(
                "{call}: the counter was not opened with FI_WAIT_FD or FI_WAIT_MUTEX_COND"
            )));
        };
        let again = |why: &str| FiError::new(FiErrno::FI_EAGAIN, format!("{call}: {why}"));
        // Cleared before the rings and the flag are looked at: a change after this point
        // makes the descriptor readable again. A wakeup taken from `wake` may be a waiting
        // thread's too: it is passed on.
        self.parked.take_kick();
        if wake.read().is_ok() {
            self.parked.fan_out(None);
        }
        self.progress();
        if self.changed.swap(false, Ordering::SeqCst) {
            return Err(again("the counter changed; read it"));
        }
        // A NIC that stopped completes nothing and raises no vector: the descriptor would
        // never poll readable. Told as `fi_cntr_wait` tells it.
        if self.device_stopped() {
            return Err(stopped(
                call,
                "its count will not move, and its descriptor would never poll readable",
            ));
        }
        let (fds, due) = match self.arm() {
            Ok(armed) => armed,
            Err(Arm::NoWait) => {
                return Err(again(
                    "an endpoint of the counter has no interrupt vector; read the counter \
                     instead of sleeping",
                ))
            }
            Err(_) => return Err(again("a completion came")),
        };
        // From here a change made by another thread writes `wake` (`wake_sleepers`); one
        // made before, after the look above, is seen now.
        self.sleepers.store(true, Ordering::SeqCst);
        if self.changed.swap(false, Ordering::SeqCst) {
            return Err(again("the counter changed; read it"));
        }
        fd_wait.hold_until(&fds, due).map_err(|e| {
            FiError::new(
                FiErrno::FI_EIO,
                format!("{call}: the descriptor's epoll set: {e}"),
            )
        })?;
        // The NIC that stops after the look above makes the descriptor readable too.
        let endpoints = Arc::clone(&self.lock());
        self.parked.kick_when_stopped(&endpoints);
        // Last: whatever makes the set readable from here on is broadcast.
        if let Some(cond_wait) = &self.cond_wait {
            cond_wait.arm();
        }
        Ok(())
    }

    /// Wake a waiter that armed the rings since the last change ([`UetCntr::sleepers`]).
    fn wake_sleepers(&self) {
        if self.sleepers.load(Ordering::SeqCst) && self.sleepers.swap(false, Ordering::SeqCst) {
            self.wake_waiters();
        }
    }

    /// A read of the counter's endpoints is needed though no value changed (a refused send
    /// kept for a retry): a waiter that armed the rings since the last change wakes and arms
    /// again, with the retry's due time.
    pub(crate) fn wake_armed(&self) {
        self.wake_sleepers();
    }

    /// Make `wake` readable: the threads in `fi_cntr_wait` look at the values again and arm
    /// the endpoints (one enabled since they armed them, too), an `FI_WAIT_FD` descriptor
    /// polls readable, and an `FI_WAIT_MUTEX_COND` condition is broadcast.
    pub(crate) fn wake_waiters(&self) {
        if let Some(wake) = &self.wake {
            // Cannot fail short of the eventfd's overflow, 2^64 - 2 wakes unread.
            let _ = wake.write(1);
        }
        if let Some(cond_wait) = &self.cond_wait {
            cond_wait.changed();
        }
    }

    /// Drain the rings of the bound endpoints (outside the counter's lock: a drain takes each
    /// endpoint's lock, then counts here without a lock).
    fn progress(&self) {
        let endpoints = Arc::clone(&self.lock());
        for ep in endpoints.iter() {
            ep.drain();
        }
    }

    /// Arm the bound endpoints' rings for a wait: the descriptors to sleep on, and when a
    /// read is due (a refused send's retry) if one is; `Err` when one is not to be slept on
    /// (a completion came: look again; or no vector: nap).
    fn arm(&self) -> Result<(Vec<RawFd>, Option<Instant>), Arm> {
        let endpoints = Arc::clone(&self.lock());
        let mut fds = Vec::with_capacity(endpoints.len() + 1);
        let mut due = None;
        for ep in endpoints.iter() {
            match ep.arm() {
                Arm::Fd(fd, at) => {
                    fds.push(fd);
                    due = crate::cq::earliest(due, at);
                }
                Arm::Idle => {}
                other => return Err(other),
            }
        }
        Ok((fds, due))
    }

    /// Whether the NIC of an endpoint counting into the counter stopped (a fatal error, or its
    /// function reset): it completes nothing more, so the counter moves no more.
    fn device_stopped(&self) -> bool {
        let endpoints = Arc::clone(&self.lock());
        endpoints.iter().any(|ep| ep.device_stopped())
    }

    /// `fi_cntr_wait`.
    fn wait(&self, threshold: u64, timeout: c_int, call: &str) -> Result<(), FiError> {
        if self.wait_obj == FI_WAIT_NONE {
            return Err(FiError::inval(format!(
                "{call}: the counter was opened with FI_WAIT_NONE"
            )));
        }
        let _waiting = Waiting::enter(self);
        let deadline = u64::try_from(timeout)
            .ok()
            .and_then(|ms| Instant::now().checked_add(Duration::from_millis(ms)));
        let errors = self.errors.load(Ordering::SeqCst);
        // Whether the wait is over: reached, or an error counted.
        let done = || -> Option<Result<(), FiError>> {
            if self.value.load(Ordering::SeqCst) >= threshold {
                return Some(Ok(()));
            }
            let now = self.errors.load(Ordering::SeqCst);
            if now != errors {
                return Some(Err(FiError::new(
                    FiErrno::FI_EAVAIL,
                    format!("{call}: the error count changed ({errors} to {now})"),
                )));
            }
            None
        };
        let mut sleep = Duration::from_micros(1);
        // Among the counter's waiters from its first sleep on (after `_waiting`: it leaves
        // first).
        let mut parked: Option<Parked<'_>> = None;
        let mut look = StatusLook::new();
        loop {
            self.progress();
            if let Some(r) = done() {
                return r;
            }
            let now = Instant::now();
            if timeout >= 0 && deadline.is_none_or(|d| now >= d) {
                return Err(FiError::new(
                    FiErrno::FI_ETIMEDOUT,
                    format!("{call}: the counter stayed below {threshold}"),
                ));
            }
            if look.stopped(now, || self.device_stopped()) {
                return Err(stopped(
                    call,
                    &format!("the counter stays below {threshold}"),
                ));
            }
            let left = deadline.map(|d| d.saturating_duration_since(now));
            // Without an eventfd nothing would wake it: the rings are read again after a nap.
            let armed = match self.wake.as_ref().map(|wake| {
                // Parked before it arms anything: a wakeup another waiter of the counter
                // takes from `wake` from here on is passed on to this one.
                let me = &*parked.get_or_insert_with(|| self.parked.park());
                (wake, me, self.arm())
            }) {
                Some((_, _, Err(Arm::Ready))) => continue,
                Some((wake, me, Ok((mut fds, due)))) => {
                    fds.push(wake.as_raw_fd());
                    fds.extend(me.fd());
                    Some((wake, me, fds, due))
                }
                _ => None,
            };
            // From here a count made by another thread wakes this one (`count`); one made
            // before, after this wait's look, is seen now.
            self.sleepers.store(true, Ordering::SeqCst);
            if done().is_some() {
                continue;
            }
            if let Some((wake, me, fds, due)) = armed {
                let cap = left.map_or(WAIT_RECHECK, |l| l.min(WAIT_RECHECK));
                // A retry due reads the rings then.
                let cap = due.map_or(cap, |d| {
                    cap.min(d.saturating_duration_since(Instant::now()))
                });
                let ready = poll_readable(&fds, cap);
                // Taken, so it wakes no one again, and passed on to the counter's other
                // waiters, which look at the values again.
                after_sleep(&self.parked, me, wake, &ready, true);
                continue;
            }
            std::thread::sleep(left.map_or(sleep, |l| sleep.min(l)));
            sleep = (sleep * 2).min(SREAD_SLEEP_MAX);
        }
    }
}

/// A thread in `fi_cntr_wait`, counted in [`UetCntr::waiting`] until it returns.
struct Waiting<'a>(&'a UetCntr);

impl<'a> Waiting<'a> {
    fn enter(c: &'a UetCntr) -> Self {
        c.waiting.enter();
        Waiting(c)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.leave();
    }
}

static CNTR_FID_OPS: FiOps = unsupported::fid_ops(cntr_close, unsupported::bind, cntr_control);

static CNTR_OPS: FiOpsCntr = FiOpsCntr {
    size: core::mem::size_of::<FiOpsCntr>(),
    read: cntr_read,
    readerr: cntr_readerr,
    add: cntr_add,
    set: cntr_set,
    wait: cntr_wait,
    adderr: cntr_adderr,
    seterr: cntr_seterr,
};

/// The provider's counter behind a `fid` pointer. `FI_EINVAL` for NULL or another object.
///
/// # Safety
/// `fid` is NULL or a live libfabric object.
pub(crate) unsafe fn cntr_ref<'a>(fid: *const Fid, call: &str) -> Result<&'a UetCntr, FiError> {
    // SAFETY: the caller's promise.
    unsafe { object_ref(fid, FI_CLASS_CNTR, &CNTR_FID_OPS, call, "counter") }
}

/// `fi_cntr_open`.
pub(crate) unsafe extern "C" fn domain_cntr_open(
    domain: *mut FidDomain,
    attr: *mut c_void,
    cntr: *mut *mut c_void,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_cntr_open";
    entry(CALL, || {
        // SAFETY: the application's domain pointer.
        let d = unsafe { crate::domain::domain_ref(domain, CALL) }?;
        if cntr.is_null() {
            return Err(null(CALL, "cntr"));
        }
        // SAFETY: NULL or valid attributes (libfabric's contract).
        let (events, wait_obj, flags) = match unsafe { attr.cast::<FiCntrAttr>().as_ref() } {
            Some(a) => (a.events, a.wait_obj, a.flags),
            None => (FI_CNTR_EVENTS_COMP, FI_WAIT_NONE, 0),
        };
        match events {
            FI_CNTR_EVENTS_COMP => {}
            FI_CNTR_EVENTS_BYTES => {
                return Err(FiError::new(
                    FiErrno::FI_ENOSYS,
                    format!(
                        "{CALL}: events FI_CNTR_EVENTS_BYTES: the uet provider's counters count \
                         completions (FI_CNTR_EVENTS_COMP)"
                    ),
                ))
            }
            other => {
                return Err(FiError::inval(format!(
                    "{CALL}: events {other} is no fi_cntr_events (FI_CNTR_EVENTS_COMP is 0)"
                )))
            }
        }
        let Waits {
            wake,
            fd_wait,
            parked,
            cond_wait,
        } = crate::wait::open_waits(CALL, "counters", wait_obj)?;
        if flags != 0 {
            return Err(FiError::badflags(format!("{CALL}: flags {flags:#x}")));
        }
        let domain_cntrs = Arc::clone(&d.cntrs);
        // The last check: from here nothing fails, so a refusal leaves no count behind.
        domain_cntrs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < CNTR_CNT).then_some(n + 1)
            })
            .map_err(|n| {
                FiError::new(
                    FiErrno::FI_ENOSPC,
                    format!("{CALL}: the domain holds {n} counters (domain_attr->cntr_cnt)"),
                )
            })?;
        let boxed = Box::new(UetCntr {
            fid: FidCntr {
                fid: Fid {
                    fclass: FI_CLASS_CNTR,
                    context,
                    ops: core::ptr::addr_of!(CNTR_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(CNTR_OPS).cast_mut(),
            },
            value: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            endpoints: Mutex::new(Arc::new(Vec::new())),
            bound: AtomicUsize::new(0),
            waiting: crate::wait::Waiters::default(),
            made_in: uet_driver::fork::MadeIn::here(),
            sleepers: AtomicBool::new(false),
            parked,
            wake,
            wait_obj,
            fd_wait,
            cond_wait,
            changed: AtomicBool::new(false),
            domain_cntrs,
            fabric: d.fabric_tag(),
        });
        // SAFETY: `cntr` is non-NULL and writable (libfabric's contract).
        unsafe { *cntr = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

/// `fi_control` of a counter: `FI_GETWAIT` (an `FI_WAIT_FD` counter's descriptor, into the
/// `int` at `arg`; an `FI_WAIT_MUTEX_COND` counter's `struct fi_mutex_cond`, into the one
/// at `arg`) and `FI_GETWAITOBJ` (the counter's `enum fi_wait_obj`), as a CQ answers
/// them ([`crate::cq`]): `-FI_ENODATA` for a wait object the counter does not have,
/// `-FI_ENOSYS` for other commands.
unsafe extern "C" fn cntr_control(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int {
    const CALL: &str = "fi_control(cntr)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let c = unsafe { cntr_ref(fid, CALL) }?;
        let handle = match (&c.cond_wait, &c.fd_wait) {
            (Some(w), _) => Some(WaitHandle::MutexCond(w)),
            (None, w) => w.as_ref().map(|w| WaitHandle::Fd(w.fd())),
        };
        let waitable = c.wait_obj != FI_WAIT_NONE;
        // SAFETY: `arg` as libfabric passes it.
        unsafe { crate::wait::control(CALL, "counter", c.wait_obj, waitable, handle, command, arg) }
    })
}

unsafe extern "C" fn cntr_close(fid: *mut Fid) -> c_int {
    const CALL: &str = "fi_close(cntr)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let c = unsafe { cntr_ref(fid, CALL) }?;
        {
            // Under the lock endpoints take to bind, as a CQ's close takes it (in a process
            // forked from the counter's, only if it is free, and with the parent's waiting
            // threads not counted).
            let _eps = c.made_in.lock(&c.endpoints);
            crate::wait::refuse_close_in_use(
                CALL,
                "counter",
                c.bound.load(Ordering::Acquire),
                c.waiting.here(),
                "fi_cntr_wait",
            )?;
        }
        // SAFETY: made by `Box::into_raw` in `domain_cntr_open`; the application gives it up.
        let c = unsafe { Box::from_raw(fid.cast::<UetCntr>()) };
        c.domain_cntrs.fetch_sub(1, Ordering::AcqRel);
        drop(c);
        Ok(0)
    })
}

/// A value read for `fi_cntr_read` or `fi_cntr_readerr`, which return no error: 0 for a
/// pointer that is no counter of the provider (logged, as every refused call).
fn value_of(call: &str, f: impl FnOnce() -> Result<u64, FiError>) -> u64 {
    let mut value = 0;
    entry(call, || {
        value = f()?;
        Ok(0)
    });
    value
}

unsafe extern "C" fn cntr_read(cntr: *mut FidCntr) -> u64 {
    const CALL: &str = "fi_cntr_read";
    value_of(CALL, || {
        // SAFETY: the application's counter pointer.
        let c = unsafe { cntr_ref(cntr.cast(), CALL) }?;
        c.progress();
        Ok(c.value.load(Ordering::SeqCst))
    })
}

unsafe extern "C" fn cntr_readerr(cntr: *mut FidCntr) -> u64 {
    const CALL: &str = "fi_cntr_readerr";
    value_of(CALL, || {
        // SAFETY: the application's counter pointer.
        let c = unsafe { cntr_ref(cntr.cast(), CALL) }?;
        c.progress();
        Ok(c.errors.load(Ordering::SeqCst))
    })
}

/// `fi_cntr_add` and the others that change a value: `f` gets the counter. An
/// `FI_WAIT_MUTEX_COND` condition is broadcast, whether or not a waiter armed.
fn change(call: &str, cntr: *mut FidCntr, f: impl FnOnce(&UetCntr)) -> c_int {
    entry(call, || {
        // SAFETY: the application's counter pointer.
        let c = unsafe { cntr_ref(cntr.cast(), call) }?;
        f(c);
        c.changed();
        if let Some(cond_wait) = &c.cond_wait {
            cond_wait.changed();
        }
        Ok(0)
    })
}

unsafe extern "C" fn cntr_add(cntr: *mut FidCntr, value: u64) -> c_int {
    change("fi_cntr_add", cntr, |c| {
        c.value.fetch_add(value, Ordering::SeqCst);
    })
}

unsafe extern "C" fn cntr_adderr(cntr: *mut FidCntr, value: u64) -> c_int {
    change("fi_cntr_adderr", cntr, |c| {
        c.errors.fetch_add(value, Ordering::SeqCst);
    })
}

unsafe extern "C" fn cntr_set(cntr: *mut FidCntr, value: u64) -> c_int {
    change("fi_cntr_set", cntr, |c| {
        c.value.store(value, Ordering::SeqCst)
    })
}

unsafe extern "C" fn cntr_seterr(cntr: *mut FidCntr, value: u64) -> c_int {
    change("fi_cntr_seterr", cntr, |c| {
        c.errors.store(value, Ordering::SeqCst)
    })
}

unsafe extern "C" fn cntr_wait(cntr: *mut FidCntr, threshold: u64, timeout: c_int) -> c_int {
    const CALL: &str = "fi_cntr_wait";
    entry(CALL, || {
        // SAFETY: the application's counter pointer.
        let c = unsafe { cntr_ref(cntr.cast(), CALL) }?;
        c.wait(threshold, timeout, CALL)?;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter without a wait object and no endpoint bound, as `fi_cntr_open` makes it.
    fn counter() -> UetCntr {
        UetCntr {
            fid: FidCntr {
                fid: Fid {
                    fclass: FI_CLASS_CNTR,
                    context: core::ptr::null_mut(),
                    ops: core::ptr::addr_of!(CNTR_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(CNTR_OPS).cast_mut(),
            },
            value: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            endpoints: Mutex::new(Arc::new(Vec::new())),
            bound: AtomicUsize::new(0),
            waiting: crate::wait::Waiters::default(),
            made_in: uet_driver::fork::MadeIn::here(),
            sleepers: AtomicBool::new(false),
            parked: Sleepers::new(),
            wake: None,
            wait_obj: FI_WAIT_NONE,
            fd_wait: None,
            cond_wait: None,
            changed: AtomicBool::new(false),
            domain_cntrs: Arc::new(AtomicUsize::new(0)),
            fabric: crate::fabric::FabricTag::of_domains(&Arc::default()),
        }
    }

    /// In a process forked while a thread of the parent held the counter's lock, an
    /// endpoint's close still unbinds it from the counter, which may then close, instead of
    /// waiting for good for a lock no thread of the child will let go.
    #[test]
    fn a_forked_childs_unbind_takes_no_lock_a_thread_of_its_parent_held() {
        let c = counter();
        let ep = EpShared::lane(false);
        c.attach(&ep);
        let endpoints = &c.endpoints;
        let hold = move |wait: &dyn Fn()| {
            let _eps = endpoints.lock();
            wait();
        };
        let status = crate::wait::tests::in_child_while_held(hold, || {
            c.detach(&ep, false);
            if c.bound.load(Ordering::Acquire) == 0 {
                0
            } else {
                2
            }
        });
        assert_eq!(status, Some(0), "the child unbound the endpoint");
        // The parent's own unbind takes the lock, once free, as ever.
        c.detach(&ep, false);
        assert_eq!(c.bound.load(Ordering::Acquire), 0);
        assert!(c.lock().is_empty());
    }
}
