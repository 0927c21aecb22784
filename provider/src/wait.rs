//! The waiters of one CQ or counter, and the wakeups they share; the pthread mutex and
//! condition of an `FI_WAIT_MUTEX_COND` event queue, CQ or counter, and the thread that
//! signals them (`CondWait`); and `control`, the `fi_control` of the wait object of a CQ,
//! counter or event queue.
//!
//! A CQ or counter wakes its waiters through one eventfd of its own (`wake`), which the
//! thread that queues a completion or makes a count writes once per sleep (one atomic on the
//! datapath when no one sleeps). Several waiters may sleep on it at once: threads in
//! `fi_cq_sread` or `fi_cntr_wait`, and an application asleep on the object's `FI_WAIT_FD`
//! descriptor. The first of them to read `wake` takes the wakeup from the others, so it
//! passes it on (`Sleepers::fan_out`): every other thread waiting on the object parks on an
//! eventfd of its own beside `wake`, which is written, and an `FI_WAIT_FD` descriptor holds a
//! `kick` eventfd, written too. A waiter reads only its own eventfd and `wake`, and whoever
//! reads something from `wake` fans it out, so no waiter whose condition may have become true
//! sleeps on. The list of parked threads is taken under a lock, on the wait path only.
//!
//! An `FI_WAIT_MUTEX_COND` object owns a pthread mutex and condition the application sleeps
//! on, and a thread that broadcasts the condition under the mutex (`CondWait`): whoever
//! changes the object only rings that thread, and so never waits for the application's
//! mutex. An event queue rings it for every change (its `on_change` hook). A CQ or counter
//! has the eventfds and epoll set of an `FI_WAIT_FD` one, which the application does not
//! see: `fi_trywait` arms them as for a descriptor, then arms the thread, which sleeps on the
//! set and broadcasts once it polls readable — when an application asleep on the descriptor
//! would have woken. What writes `wake` (a completion queued or a count made while a waiter
//! sleeps, a signal, an endpoint enabled), and a counter's `fi_cntr_add` and the like, ring
//! it at once too. The application reads the object and calls `fi_trywait` under the mutex,
//! and a broadcast waits for the mutex, which the application lets go only as it sleeps:
//! what comes between its read and its sleep wakes it.

use crate::abi::{
    FiMutexCond, FI_GETWAIT, FI_GETWAITOBJ, FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_NONE,
    FI_WAIT_POLLFD, FI_WAIT_SET, FI_WAIT_UNSPEC, FI_WAIT_YIELD,
};
use crate::cq::FdWait;
use crate::null;
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use uet_av::{FiErrno, FiError};
use uet_driver::eq::ChangeHook;
use vmm_sys_util::eventfd::{EventFd, EFD_CLOEXEC, EFD_NONBLOCK};

/// The threads waiting on one object, and its descriptor's `kick`.
pub(crate) struct Sleepers {
    /// The eventfds of the threads waiting on the object, one each.
    parked: Mutex<Vec<Arc<EventFd>>>,
    /// `FI_WAIT_FD`: in the descriptor's epoll set, standing for the application asleep on
    /// it; `fi_trywait` reads it ([`Sleepers::take_kick`]). Shared with the NICs of the
    /// object's endpoints, which write it when they stop ([`Sleepers::kick_when_stopped`]).
    kick: Option<Arc<EventFd>>,
}

impl Sleepers {
    /// The waiters of an object without a descriptor.
    pub(crate) fn new() -> Sleepers {
        Sleepers {
            parked: Mutex::new(Vec::new()),
            kick: None,
        }
    }

    /// The waiters of an `FI_WAIT_FD` object, whose descriptor holds `kick`.
    pub(crate) fn with_kick(kick: EventFd) -> Sleepers {
        Sleepers {
            parked: Mutex::new(Vec::new()),
            kick: Some(Arc::new(kick)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Arc<EventFd>>> {
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The list's lock, held: no thread parks, leaves or is passed a wakeup meanwhile.
    #[cfg(test)]
    pub(crate) fn hold(&self) -> MutexGuard<'_, Vec<Arc<EventFd>>> {
        self.lock()
    }

    /// A thread starts to wait on the object: from here until the returned guard drops, a
    /// wakeup another waiter takes from `wake` is passed on to it. Called before the thread
    /// arms anything it will sleep on, so that no wakeup meant for it comes before. Without
    /// an eventfd to park on (none could be made), the thread is not reached, and finds what
    /// it missed at its next periodic look.
    pub(crate) fn park(&self) -> Parked<'_> {
        let fd = EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).ok().map(Arc::new);
        if let Some(fd) = &fd {
            self.lock().push(Arc::clone(fd));
        }
        Parked { sleepers: self, fd }
    }

    /// A waiter read a wakeup from `wake`: every other waiter is woken too — each thread
    /// parked but `from`, and, when a thread took it (`from` is given), the application
    /// asleep on the descriptor. Each looks at the object again and sleeps once more if
    /// nothing is there for it.
    pub(crate) fn fan_out(&self, from: Option<&Parked<'_>>) {
        let me = from.and_then(|p| p.fd.as_ref());
        for fd in self.lock().iter() {
            if me.is_some_and(|m| Arc::ptr_eq(m, fd)) {
                continue;
            }
            // Cannot fail short of the counter's overflow, 2^64 - 2 wakes unread.
            let _ = fd.write(1);
        }
        if from.is_some() {
            if let Some(kick) = &self.kick {
                let _ = kick.write(1);
            }
        }
    }

    /// The application may now sleep on the descriptor (`fi_trywait` succeeded): have the
    /// NIC of each of `endpoints` write `kick` if it stops, which nothing else would make
    /// readable then ([`uet_driver::stop_watch`]). The application wakes, and its next
    /// `fi_trywait` returns `-FI_EIO`.
    pub(crate) fn kick_when_stopped(&self, endpoints: &[Arc<crate::ep::EpShared>]) {
        if let Some(kick) = &self.kick {
            for ep in endpoints {
                ep.wake_when_stopped(kick);
            }
        }
    }

    /// `fi_trywait`: the wakeups passed on to the descriptor are seen.
    pub(crate) fn take_kick(&self) {
        if let Some(kick) = &self.kick {
            // EAGAIN when it holds none: unreadable either way.
            let _ = kick.read();
        }
    }
}

/// A thread waiting on an object ([`Sleepers::park`]); it leaves the list when dropped.
pub(crate) struct Parked<'a> {
    sleepers: &'a Sleepers,
    fd: Option<Arc<EventFd>>,
}

impl Parked<'_> {
    /// The eventfd the thread sleeps on beside the object's own, when it has one.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|fd| fd.as_raw_fd())
    }

    /// Take the wakeups passed on to the thread.
    pub(crate) fn clear(&self) {
        if let Some(fd) = &self.fd {
            let _ = fd.read();
        }
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        if let Some(fd) = &self.fd {
            self.sleepers.lock().retain(|f| !Arc::ptr_eq(f, fd));
        }
    }
}

/// The waits of a CQ or counter ([`open_waits`]).
pub(crate) struct Waits {
    /// Its eventfd, which a waiter sleeps on beside its endpoints' vectors: none for
    /// `FI_WAIT_NONE`, nor when none could be made (its waits then read the rings with a
    /// growing sleep).
    pub(crate) wake: Option<EventFd>,
    /// `FI_WAIT_FD` and `FI_WAIT_MUTEX_COND`: its epoll set (the descriptor of the one, what
    /// the other's thread watches).
    pub(crate) fd_wait: Option<FdWait>,
    /// Its waiters.
    pub(crate) parked: Sleepers,
    /// `FI_WAIT_MUTEX_COND`: its mutex, condition and signaling thread.
    pub(crate) cond_wait: Option<CondWait>,
}

/// The waits of a CQ or counter opened (`call`) with `wait_obj`. An `FI_WAIT_MUTEX_COND`
/// object has the eventfds and epoll set of an `FI_WAIT_FD` one, which its [`CondWait`]
/// watches after each `fi_trywait` in the stead of an application asleep on the
/// descriptor. A wait object it does not serve is refused as [`unserved`] says.
pub(crate) fn open_waits(call: &str, objects: &str, wait_obj: c_int) -> Result<Waits, FiError> {
    let simple = |wake: Option<EventFd>| Waits {
        wake,
        fd_wait: None,
        parked: Sleepers::new(),
        cond_wait: None,
    };
    match wait_obj {
        FI_WAIT_NONE => Ok(simple(None)),
        // The descriptor (for FI_WAIT_MUTEX_COND, the set its thread watches) is the point of
        // the wait object: no eventfd, no object.
        FI_WAIT_FD | FI_WAIT_MUTEX_COND => {
            let (wake, fd_wait, parked) = FdWait::open(call)?;
            let cond_wait = if wait_obj == FI_WAIT_MUTEX_COND {
                let watch = fd_wait.watcher().map_err(|e| {
                    FiError::new(
                        FiErrno::FI_ENOMEM,
                        format!("{call}: no descriptor of the epoll set to watch: {e}"),
                    )
                })?;
                Some(CondWait::new(call, "uet-wait-cond", Some(watch))?)
            } else {
                None
            };
            Ok(Waits {
                wake: Some(wake),
                fd_wait: Some(fd_wait),
                parked,
                cond_wait,
            })
        }
        FI_WAIT_UNSPEC | FI_WAIT_YIELD => Ok(simple(EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).ok())),
        other => Err(unserved(call, objects, other)),
    }
}

/// The refusal of a `wait_obj` the provider's `objects` (CQs, counters, queues) do not take:
/// `FI_ENOSYS` for a wait object libfabric defines (a wait set, `FI_WAIT_POLLFD`),
/// `FI_EINVAL` for a value that is no `enum fi_wait_obj`.
pub(crate) fn unserved(call: &str, objects: &str, wait_obj: c_int) -> FiError {
    match wait_obj {
        FI_WAIT_SET | FI_WAIT_POLLFD => FiError::new(
            FiErrno::FI_ENOSYS,
            format!(
                "{call}: wait_obj {wait_obj}: the uet provider's {objects} wait on their own \
                 (FI_WAIT_UNSPEC, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD) or on a descriptor \
                 (FI_WAIT_FD), and join no wait sets"
            ),
        ),
        other => FiError::inval(format!("{call}: wait_obj {other} is no fi_wait_obj")),
    }
}

/// The threads waiting on a CQ or counter (`fi_cq_sread`, `fi_cntr_wait`), of this process:
/// a process forked while threads of its parent waited has none of those threads, which will
/// never return in it to be counted out, and its own are counted from none. One word: the
/// fork generation ([`uet_driver::fork::MadeIn::generation`]) in the high 32 bits, the
/// count in the low 32.
#[derive(Debug, Default)]
pub(crate) struct Waiters(AtomicU64);

impl Waiters {
    /// This process's generation, as the word holds it.
    fn generation() -> u64 {
        uet_driver::fork::MadeIn::here().generation() & u64::from(u32::MAX)
    }

    /// A thread of this process starts waiting.
    pub(crate) fn enter(&self) {
        let now = Self::generation();
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(if w >> 32 == now { w + 1 } else { now << 32 | 1 })
            });
    }

    /// A thread of this process that [`Waiters::enter`]ed returns.
    pub(crate) fn leave(&self) {
        let now = Self::generation();
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w >> 32 == now && w & u64::from(u32::MAX) > 0).then(|| w - 1)
            });
    }

    /// Threads of this process waiting now.
    pub(crate) fn here(&self) -> usize {
        let w = self.0.load(Ordering::Acquire);
        if w >> 32 == Self::generation() {
            (w & u64::from(u32::MAX)) as usize
        } else {
            0
        }
    }
}

/// `fi_close` of a CQ or counter (`object`) refused while it is in use: `FI_EBUSY` while
/// `bound` endpoint bindings use it or `waiting` threads wait in `wait_call`.
pub(crate) fn refuse_close_in_use(
    call: &str,
    object: &str,
    bound: usize,
    waiting: usize,
    wait_call: &str,
) -> Result<(), FiError> {
    if bound > 0 {
        return Err(FiError::new(
            FiErrno::FI_EBUSY,
            format!("{call}: {bound} endpoint binding(s) use the {object}"),
        ));
    }
    if waiting > 0 {
        return Err(FiError::new(
            FiErrno::FI_EBUSY,
            format!("{call}: {waiting} thread(s) wait in {wait_call}"),
        ));
    }
    Ok(())
}

/// What `fi_control(FI_GETWAIT)` gives of an object's wait object.
pub(crate) enum WaitHandle<'a> {
    /// `FI_WAIT_FD`: the descriptor, written into the `int` at `arg`.
    Fd(RawFd),
    /// `FI_WAIT_MUTEX_COND`: the object's wait, whose mutex and condition are written into
    /// the `struct fi_mutex_cond` at `arg` (which starts the thread that signals them, only
    /// then: [`CondWait::pair`]).
    MutexCond(&'a CondWait),
}

/// `fi_control` of a CQ, counter or event queue (`object` names it in messages), opened with
/// `wait_obj` (`waitable`: one a thread can wait on, not `FI_WAIT_NONE`), whose wait object
/// the application may hold `handle` of: `FI_GETWAIT` writes the handle at `arg` (a
/// descriptor into an `int`, a mutex and condition into a `struct fi_mutex_cond`),
/// `FI_GETWAITOBJ` the `enum fi_wait_obj` into an `int`. `-FI_ENODATA` for a wait object the
/// object does not have (`FI_GETWAIT` without a handle, either of an object that cannot be
/// waited on), `-FI_ENOSYS` for other commands.
///
/// # Safety
/// `arg` is NULL or points to what the command writes, writable (libfabric's contract).
pub(crate) unsafe fn control(
    call: &str,
    object: &str,
    wait_obj: c_int,
    waitable: bool,
    handle: Option<WaitHandle<'_>>,
    command: c_int,
    arg: *mut c_void,
) -> Result<c_int, FiError> {
    let no_wait = |what: &str| {
        FiError::new(
            FiErrno::FI_ENODATA,
            format!("{call}: {what}: the {object} was opened with wait object {wait_obj}"),
        )
    };
    let value = match command {
        FI_GETWAIT => match handle {
            Some(WaitHandle::Fd(fd)) => fd,
            Some(WaitHandle::MutexCond(wait)) => {
                if arg.is_null() {
                    return Err(null(call, "arg"));
                }
                let pair = wait.pair(call)?;
                // SAFETY: non-NULL, the application's `struct fi_mutex_cond` (libfabric's
                // contract for FI_GETWAIT of FI_WAIT_MUTEX_COND), perhaps unaligned.
                unsafe { arg.cast::<FiMutexCond>().write_unaligned(pair) };
                return Ok(0);
            }
            None => return Err(no_wait("FI_GETWAIT gives a descriptor (FI_WAIT_FD)")),
        },
        FI_GETWAITOBJ if waitable => wait_obj,
        FI_GETWAITOBJ => return Err(no_wait("FI_GETWAITOBJ")),
        other => {
            return Err(FiError::new(
                FiErrno::FI_ENOSYS,
                format!("{call}: command {other}"),
            ))
        }
    };
    // SAFETY: NULL or the application's `int` (FI_GETWAIT's descriptor, FI_GETWAITOBJ's
    // enum), writable (the caller's contract).
    let out = unsafe { arg.cast::<c_int>().as_mut() }.ok_or_else(|| null(call, "arg"))?;
    *out = value;
    Ok(0)
}

/// A pthread mutex and condition of an `FI_WAIT_MUTEX_COND` object, at addresses that do
/// not change while it is open (the application holds them).
pub(crate) struct NativeCond {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    cond: UnsafeCell<libc::pthread_cond_t>,
}

// SAFETY: a pthread mutex and condition are made to be used from any thread through their
// addresses, which the `Arc` holding them keeps; nothing else of them is touched.
unsafe impl Send for NativeCond {}
// SAFETY: as for `Send`.
unsafe impl Sync for NativeCond {}

impl Drop for NativeCond {
    fn drop(&mut self) {
        // SAFETY: initialized, and no longer used by the object's thread (gone with the last
        // other reference); the application gave them up with fi_close.
        unsafe {
            libc::pthread_cond_destroy(self.cond.get());
            libc::pthread_mutex_destroy(self.mutex.get());
        }
    }
}

/// What the object tells the signaling thread ([`CondWait`]).
#[derive(Default)]
struct Signal {
    /// The object changed since the thread last broadcast: broadcast.
    pending: bool,
    /// `fi_trywait` told the application it may sleep: broadcast once the watched set polls
    /// readable.
    armed: bool,
    /// The object is closed: the thread ends.
    stop: bool,
}

/// The [`Signal`] and the eventfd that rings the thread for each change of it.
struct Signals {
    state: Mutex<Signal>,
    /// Readable after a change of `state`: the thread sleeps on it, beside the watched set.
    bell: EventFd,
}

impl Signals {
    fn lock(&self) -> MutexGuard<'_, Signal> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Change the state with `f` and ring the thread.
    fn ring(&self, f: impl FnOnce(&mut Signal)) {
        f(&mut self.lock());
        // Cannot fail short of the counter's overflow, 2^64 - 2 rings unread.
        let _ = self.bell.write(1);
    }
}

/// An `FI_WAIT_MUTEX_COND` object's wait object: its [`NativeCond`], and the thread that
/// broadcasts the condition under the mutex when the object reports a change
/// ([`CondWait::changed`], or the hook of an event queue, [`CondWait::hook`]) and, after a
/// successful `fi_trywait` ([`CondWait::arm`]), when the set it watches polls readable (a
/// CQ's or counter's epoll set: its `wake`, its `kick`, its endpoints' armed vectors, as an
/// `FI_WAIT_FD` descriptor). Changes are reported by whichever thread makes them, perhaps
/// holding locks the application's calls take: a report only rings the thread, which holds
/// nothing of the provider's while it waits for the application's mutex.
///
/// An application that reads the object and calls `fi_trywait` under the mutex, then waits
/// on the condition, misses nothing: what happens after its `fi_trywait` makes the watched
/// set readable, and the broadcast it brings waits for the mutex, which the application
/// lets go only as it starts to wait.
///
/// The thread starts with the first `fi_control(FI_GETWAIT)`, which gives the application
/// the mutex and condition: an application that only waits in `fi_cq_sread`,
/// `fi_cntr_wait` or `fi_eq_sread` never sleeps on them, and its objects cost no thread.
/// Changes reported before then are kept, and broadcast once it runs.
pub(crate) struct CondWait {
    native: Arc<NativeCond>,
    signals: Arc<Signals>,
    /// The name of the thread, and the set it watches.
    name: &'static str,
    watch: Option<Arc<OwnedFd>>,
    /// The thread, once started.
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The process that made the object: a child forked from it has none of its threads
    /// ([`uet_driver::fork`]).
    made_in: uet_driver::fork::MadeIn,
}

impl CondWait {
    /// The wait object of `call`'s object, whose thread, named `name`, will watch `watch`
    /// (an epoll set) after each [`CondWait::arm`]; `FI_ENOMEM` without an eventfd.
    pub(crate) fn new(
        call: &str,
        name: &'static str,
        watch: Option<OwnedFd>,
    ) -> Result<CondWait, FiError> {
        let bell = EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).map_err(|e| {
            FiError::new(
                FiErrno::FI_ENOMEM,
                format!("{call}: no eventfd to signal FI_WAIT_MUTEX_COND: {e}"),
            )
        })?;
        Ok(CondWait {
            native: Arc::new(NativeCond {
                mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
                cond: UnsafeCell::new(libc::PTHREAD_COND_INITIALIZER),
            }),
            signals: Arc::new(Signals {
                state: Mutex::default(),
                bell,
            }),
            name,
            watch: watch.map(Arc::new),
            thread: Mutex::new(None),
            made_in: uet_driver::fork::MadeIn::here(),
        })
    }

    /// Start the thread unless it runs: `FI_ENOMEM` when the system gives none.
    fn start(&self, call: &str) -> Result<(), FiError> {
        let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        if thread.is_some() {
            return Ok(());
        }
        let (native, signals) = (Arc::clone(&self.native), Arc::clone(&self.signals));
        let watch = self.watch.clone();
        let started = std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || broadcast_changes(&native, &signals, watch.as_deref()))
            .map_err(|e| {
                FiError::new(
                    FiErrno::FI_ENOMEM,
                    format!("{call}: no thread to signal FI_WAIT_MUTEX_COND: {e}"),
                )
            })?;
        *thread = Some(started);
        Ok(())
    }

    /// The object changed: the condition is broadcast.
    pub(crate) fn changed(&self) {
        self.signals.ring(|s| s.pending = true);
    }

    /// What an event queue calls for each change ([`uet_driver::EventQueue::on_change`]):
    /// [`CondWait::changed`].
    pub(crate) fn hook(&self) -> ChangeHook {
        let signals = Arc::clone(&self.signals);
        Arc::new(move || signals.ring(|s| s.pending = true))
    }

    /// `fi_trywait` succeeded: the condition is broadcast once the watched set polls
    /// readable. Called under the application's mutex: it only rings the thread.
    pub(crate) fn arm(&self) {
        self.signals.ring(|s| s.armed = true);
    }

    /// What `fi_control(FI_GETWAIT)` gives, the thread that signals it started (`call`'s
    /// `FI_ENOMEM` when none can be).
    pub(crate) fn pair(&self, call: &str) -> Result<FiMutexCond, FiError> {
        self.start(call)?;
        Ok(FiMutexCond {
            mutex: self.native.mutex.get(),
            cond: self.native.cond.get(),
        })
    }
}

impl Drop for CondWait {
    fn drop(&mut self) {
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if self.made_in.in_forked_child() {
            // The thread is the parent's, which a forked child does not have: its handle names
            // a descriptor the child may have given a thread of its own, and the bell and the
            // state's lock are shared with the parent's thread or were held by it at the fork.
            std::mem::forget(thread);
            return;
        }
        self.signals.ring(|s| s.stop = true);
        if let Some(t) = thread {
            if t.join().is_err() {
                tracing::error!("the FI_WAIT_MUTEX_COND thread panicked");
            }
        }
    }
}

/// The longest the thread of a [`CondWait`] sleeps without looking at its state: its bell
/// wakes it for every change, so this only bounds a sleep a signal delivered to the thread
/// cut short.
const COND_SLEEP: std::time::Duration = std::time::Duration::from_secs(60);

/// The thread of a [`CondWait`]: for each change reported, and for the watched set polling
/// readable after an [`CondWait::arm`], the condition broadcast under the mutex, so that an
/// application that looked at the object under the mutex before the change, and found
/// nothing, is asleep on the condition by then and wakes. A broadcast answers every arm made
/// before it (the application it wakes arms again before it sleeps again), so a set that
/// stays readable until the next `fi_trywait` is broadcast for once.
fn broadcast_changes(native: &NativeCond, signals: &Signals, watch: Option<&OwnedFd>) {
    loop {
        let armed = {
            let mut s = signals.lock();
            if s.stop {
                return;
            }
            if s.pending {
                s.pending = false;
                s.armed = false;
                None
            } else {
                Some(s.armed)
            }
        };
        let Some(armed) = armed else {
            if !broadcast(native, signals) {
                return;
            }
            continue;
        };
        let mut fds = vec![signals.bell.as_raw_fd()];
        if armed {
            fds.extend(watch.map(AsRawFd::as_raw_fd));
        }
        let ready = crate::cq::poll_readable(&fds, COND_SLEEP);
        if ready.first().copied().unwrap_or(false) {
            // EAGAIN when another look took it: unreadable either way.
            let _ = signals.bell.read();
        }
        if ready.get(1).copied().unwrap_or(false) {
            let mut s = signals.lock();
            if s.armed {
                s.pending = true;
            }
        }
    }
}

/// Broadcast the condition under the mutex. Waits for the mutex in steps, so that a close
/// while the application holds it ends the thread: `false` then.
fn broadcast(native: &NativeCond, signals: &Signals) -> bool {
    const STEP_NS: libc::c_long = 10_000_000;
    loop {
        // SAFETY: a timespec for the clock's answer.
        let mut until: libc::timespec = unsafe { core::mem::zeroed() };
        // SAFETY: a valid clock and out pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut until) };
        until.tv_nsec += STEP_NS;
        if until.tv_nsec >= 1_000_000_000 {
            until.tv_sec += 1;
            until.tv_nsec -= 1_000_000_000;
        }
        // SAFETY: the object's mutex, initialized and alive while `native` is.
        let locked = unsafe { libc::pthread_mutex_timedlock(native.mutex.get(), &until) };
        if locked == 0 {
            // SAFETY: the object's condition; the mutex is held by this thread and then
            // released.
            unsafe {
                libc::pthread_cond_broadcast(native.cond.get());
                libc::pthread_mutex_unlock(native.mutex.get());
            }
            return true;
        }
        if locked != libc::ETIMEDOUT {
            // The mutex is unusable (the application broke it): wake the sleepers anyway.
            // SAFETY: the object's condition.
            unsafe { libc::pthread_cond_broadcast(native.cond.get()) };
            return true;
        }
        if signals.lock().stop {
            return false;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Fork while a thread of this process holds a lock: `hold` takes it, then calls the
    /// function it is given, which returns once the child has ended. In the child, `child`
    /// runs and its result is the exit code, at once. The child's exit code; `None` when it
    /// had not ended within 10 s (killed then).
    pub(crate) fn in_child_while_held<'a>(
        hold: impl FnOnce(&dyn Fn()) + Send + 'a,
        child: impl FnOnce() -> i32,
    ) -> Option<i32> {
        let (held, is_held) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                hold(&|| {
                    let _ = held.send(());
                    let _ = released.recv();
                })
            });
            is_held.recv().expect("the lock held");
            // SAFETY: the child runs `child`, which only touches what it was given, and ends
            // with _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
            if pid == 0 {
                let code =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(3);
                // SAFETY: ends the forked child at once, running nothing more of the parent's.
                unsafe { libc::_exit(code) };
            }
            let status = uet_tests::wait_child(pid, std::time::Duration::from_secs(10));
            let _ = release.send(());
            status
        })
    }

    fn readable(fd: &EventFd) -> bool {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the call only.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    /// Waiters counted in a parent are none of a child forked from it, which counts its own
    /// from none; the parent's count goes on as it was, and never below none.
    #[test]
    fn a_forked_child_counts_none_of_its_parents_waiters() {
        let w = Waiters::default();
        w.enter();
        w.enter();
        w.leave();
        assert_eq!(w.here(), 1);
        // SAFETY: the child only reads and changes the counter, then ends with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let none = w.here() == 0;
            w.enter();
            let own = w.here() == 1;
            w.leave();
            w.leave();
            let code = if none && own && w.here() == 0 { 0 } else { 2 };
            // SAFETY: ends the forked child at once, running nothing more of the parent's.
            unsafe { libc::_exit(code) };
        }
        assert_eq!(
            uet_tests::wait_child(pid, std::time::Duration::from_secs(10)),
            Some(0),
            "the child counted its own waiters only"
        );
        assert_eq!(w.here(), 1);
        w.leave();
        w.leave();
        assert_eq!(w.here(), 0);
    }

    /// A process forked while the thread of a wait object ran has no such thread: its copy,
    /// dropped, neither joins it nor rings it, and the child's own threads, which took the
    /// stacks the parent's threads left behind, are joined as ever.
    #[test]
    fn a_forked_child_drops_its_copy_of_a_running_cond_wait_without_joining_its_thread() {
        let w = CondWait::new("test", "uet-test-cond", None).unwrap();
        w.pair("test").unwrap();
        let mut copy = Some(w);
        // SAFETY: the child only drops its copy, runs threads of its own and ends with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let (go, wait) = std::sync::mpsc::channel::<()>();
                let wait = Arc::new(Mutex::new(wait));
                let threads: Vec<_> = (0..8)
                    .map(|_| {
                        let wait = Arc::clone(&wait);
                        std::thread::spawn(move || {
                            let _ = wait.lock().map(|w| w.recv());
                        })
                    })
                    .collect();
                drop(copy.take());
                drop(go);
                if threads.into_iter().all(|t| t.join().is_ok()) {
                    0
                } else {
                    2
                }
            }))
            .unwrap_or(3);
            // SAFETY: ends the forked child at once, running nothing more of the parent's.
            unsafe { libc::_exit(code) };
        }
        assert_eq!(
            uet_tests::wait_child(pid, std::time::Duration::from_secs(10)),
            Some(0),
            "the child dropped its copy and ended"
        );
        drop(copy);
    }

    /// A wakeup taken by one waiter reaches every other one and the descriptor, not the
    /// taker; a thread that left is no longer reached; `fi_trywait`'s wakeups reach the
    /// threads but not the descriptor it is about to sleep on.
    #[test]
    fn a_wakeup_one_waiter_took_reaches_every_other() {
        let s = Sleepers::with_kick(EventFd::new(EFD_NONBLOCK).unwrap());
        let (a, b) = (s.park(), s.park());
        let fd = |p: &Parked<'_>| Arc::clone(p.fd.as_ref().unwrap());
        let (fa, fb) = (fd(&a), fd(&b));
        s.fan_out(Some(&a));
        assert!(!readable(&fa), "the taker is not woken by its own wakeup");
        assert!(readable(&fb));
        assert!(readable(s.kick.as_ref().unwrap()));
        b.clear();
        s.take_kick();
        assert!(!readable(&fb) && !readable(s.kick.as_ref().unwrap()));
        s.fan_out(None);
        assert!(readable(&fa) && readable(&fb));
        assert!(
            !readable(s.kick.as_ref().unwrap()),
            "the descriptor's own trywait"
        );
        a.clear();
        b.clear();
        drop(b);
        s.fan_out(None);
        assert!(readable(&fa));
        assert!(!readable(&fb), "a thread that left is not reached");
        drop(a);
        assert!(s.lock().is_empty());
    }
}
