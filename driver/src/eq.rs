//! Event queues (`fi_eq(3)`): where control operations report that they finished.
//!
//! Asynchronous AV inserts (`FI_EVENT`), memory registration and connection management post
//! here. The semantics follow the man page:
//!
//! * Successful events and errors are kept apart. While an error waits, [`EventQueue::read`]
//!   fails with `FI_EAVAIL` and [`EventQueue::readerr`] returns it.
//! * An empty queue reads as `FI_EAGAIN`; [`EventQueue::sread`] blocks until an event arrives,
//!   the timeout passes (`FI_EAGAIN`), or [`EventQueue::signal`] wakes it. Blocking is refused
//!   on a queue opened with [`WaitObj::None`], which is the default (`EqAttr::default()`, as
//!   for a zeroed `fi_eq_attr`).
//! * A queue that fills up is overrun: the event that did not fit is lost, later writes fail
//!   with `FI_EOVERRUN`, reads return what was queued and then `FI_EOVERRUN`. An overrun EQ is
//!   fatal, as libfabric defines it. An event the application writes ([`EventQueue::write`])
//!   that does not fit is refused with `FI_EAGAIN` instead: the caller keeps it, nothing is
//!   lost, and the queue stays usable. So is a peer's connection request
//!   ([`EventQueue::offer`]), which connection management then rejects. The queue holds
//!   [`ENDPOINT_RESERVED_ENTRIES`] entries past its size for each `FI_EP_MSG` endpoint bound
//!   to it, and [`LISTENER_RESERVED_ENTRIES`] for each passive endpoint (fi_eq(3) makes
//!   `size` a minimum), taken only by the events the provider posts, never by requests or
//!   writes: a burst of requests that fills the queue leaves room for the connection events
//!   of the endpoints that report there, and for a listener's error, which cannot be
//!   refused.
//! * Closing a queue that objects are still bound to fails with `FI_EBUSY`. Closing it
//!   otherwise closes it for every clone of the handle: the events it held are lost, readers
//!   blocked in [`EventQueue::sread`] return, and every later call (read, post, bind) fails
//!   with `FI_EBADF`.
//!
//! Posting is a short critical section under a mutex: the EQ is a control-path object.
//!
//! ## A descriptor to sleep on ([`WaitObj::Fd`])
//!
//! A queue opened with [`WaitObj::Fd`] owns an eventfd ([`EventQueue::wait_fd`]) that an
//! application polls with select, poll or epoll beside its other descriptors. It is readable
//! while the queue holds an event or an error (or was overrun), and made unreadable by the
//! read that empties the queue, all under the queue's lock: every producer — connection
//! management's progress threads, an AV's progress posting its inserts' events, the
//! application's [`EventQueue::write`] — makes it readable as it posts. The events of an
//! asynchronous AV insert are posted only when progress runs, which a sleeping reader does
//! not do: so an insert queued ([`AvEventSink::inserts_queued`]), a [`EventQueue::signal`],
//! and the NIC's answer to an insert (below) make the descriptor readable too, until the next
//! [`EventQueue::trywait`]. `trywait` (`fi_trywait`, which the application calls before it
//! sleeps) runs progress, answers `FI_EAGAIN` while an event is queued, and otherwise lets
//! the application sleep once every AV with an insert in flight will wake the queue when
//! the NIC answers it. One that cannot (a NIC older than the admin interrupt, interface
//! 1.15, or without a vector to spare) gets `FI_EAGAIN` while its insert is in flight: the
//! application reads the queue again, which runs progress. [`EventQueue::close`] closes the
//! descriptor. A queue opened with [`WaitObj::MutexCond`] is slept on the same way, `trywait`
//! included, on what its [`EventQueue::on_change`] hook signals.
//!
//! ## Progress of asynchronous AV inserts
//!
//! An AV bound to the queue ([`uet_av::AddressVector::bind`] with [`EventQueue::av_sink`])
//! hands it a progress hook ([`uet_av::AvProgress`]). [`EventQueue::read`],
//! [`EventQueue::readerr`] and [`EventQueue::sread`] run every bound AV's progress first, which
//! collects the NIC's completions and posts the events of the inserts that finished. Before
//! `sread` sleeps, each AV with an insert in flight is asked to wake the queue when the NIC
//! may have answered it ([`uet_av::AvProgress::wake_on_progress`]): the driver's AV arms the
//! NIC's admin completion interrupt for it ([`crate::admin_interrupt`]), and the queue is woken
//! (an [`std::task::Waker`] of its own) by the interrupt, or when the admin timeout makes a
//! poll due. The reader then runs progress, and asks again while inserts are in flight; a
//! blocked reader thus sees an insert complete without any other thread and without polling.
//! Where an AV cannot wake the queue, `sread` runs progress every [`PROGRESS_INTERVAL`]
//! instead, as it waits; a reader that returns while it does so has the others run progress
//! (one of them may be asleep counting on a wakeup the returning reader took), so that one
//! of them asks again or polls in its turn. Progress runs outside the queue's lock (it posts
//! to the queue).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};
use uet_av::{AvEvent, AvEventSink, AvProgress, FiErrno, FiError};
use vmm_sys_util::eventfd::{EventFd, EFD_CLOEXEC, EFD_NONBLOCK};

/// `fi_eq_attr.flags`: the application may call [`EventQueue::write`].
pub const FI_WRITE: u64 = uet_av::flags::FI_WRITE;
/// `fi_eq_read` flag: return the event without consuming it.
pub const FI_PEEK: u64 = 1 << 19;
/// Entries an EQ holds past its size for each `FI_EP_MSG` endpoint bound to it
/// (`EventQueue::bind_endpoint`), which only the events the provider posts take, never
/// offered ones ([`EventQueue::offer`]) or writes: the events its connection posts without
/// the application's doing, its outcome (`FI_CONNECTED` or an error) and its end
/// (`FI_SHUTDOWN` or an error).
pub const ENDPOINT_RESERVED_ENTRIES: usize = 2;
/// Entries an EQ holds past its size for each passive endpoint bound to it
/// (`EventQueue::bind_listener`), as [`ENDPOINT_RESERVED_ENTRIES`] for an endpoint: the one
/// event a listener posts without the application's doing, the `FI_EIO` error of a stopped
/// NIC, which would otherwise overrun a queue its requests filled.
pub const LISTENER_RESERVED_ENTRIES: usize = 1;
/// Entries an EQ gets when `size` is 0.
pub const DEFAULT_EQ_SIZE: usize = 256;
/// Largest EQ.
pub const MAX_EQ_SIZE: usize = 1 << 20;
/// How often a blocked [`EventQueue::sread`] runs the progress of the AVs bound to the queue
/// while one of them has an insert in flight and cannot wake the queue when the NIC answers.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(1);

/// Event codes of `fi_eq_read` (`enum` in `rdma/fi_eq.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EqEventKind {
    /// `FI_NOTIFY`.
    Notify = 0,
    /// `FI_CONNREQ`: a connection request at a passive endpoint.
    ConnReq = 1,
    /// `FI_CONNECTED`.
    Connected = 2,
    /// `FI_SHUTDOWN`.
    Shutdown = 3,
    /// `FI_MR_COMPLETE`.
    MrComplete = 4,
    /// `FI_AV_COMPLETE`: an asynchronous AV insert finished; `data` is the success count.
    AvComplete = 5,
    /// `FI_JOIN_COMPLETE`.
    JoinComplete = 6,
}

impl EqEventKind {
    /// Decode an event code.
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => EqEventKind::Notify,
            1 => EqEventKind::ConnReq,
            2 => EqEventKind::Connected,
            3 => EqEventKind::Shutdown,
            4 => EqEventKind::MrComplete,
            5 => EqEventKind::AvComplete,
            6 => EqEventKind::JoinComplete,
            _ => return None,
        })
    }
}

/// `struct fi_eq_entry` with its event code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EqEvent {
    /// The event code.
    pub kind: EqEventKind,
    /// The object the event concerns (its fabric id, see [`next_fid`]).
    pub fid: u64,
    /// The operation's context.
    pub context: u64,
    /// Event-specific data (`FI_AV_COMPLETE`: addresses inserted).
    pub data: u64,
    /// Connection-management data carried with the event.
    pub cm_data: Vec<u8>,
}

/// `struct fi_eq_err_entry`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EqErrEntry {
    /// The object the error concerns.
    pub fid: u64,
    /// The operation's context.
    pub context: u64,
    /// Event-specific data (an asynchronous AV insert: the failed address's index in the
    /// caller's array).
    pub data: u64,
    /// The fabric errno.
    pub err: FiErrno,
    /// Provider-specific error code (for the NIC: the admin status or UET return code).
    pub prov_errno: i32,
    /// Provider-specific error text.
    pub err_data: String,
    /// The rejecting side's param of a connection refused with `fi_reject` (`FI_ECONNREFUSED`),
    /// byte for byte: what fi_cm(3) returns as the error's additional `err_data`. Empty for
    /// every other error.
    pub cm_data: Vec<u8>,
}

/// `fi_eq_attr.wait_obj`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitObj {
    /// `FI_WAIT_NONE`: the application never blocks on the queue.
    None,
    /// `FI_WAIT_UNSPEC`: the provider picks (a mutex and condition variable).
    Unspec,
    /// `FI_WAIT_MUTEX_COND`.
    MutexCond,
    /// `FI_WAIT_YIELD`: blocking reads spin with `sched_yield`.
    Yield,
    /// `FI_WAIT_FD`: blocking reads wait as for [`WaitObj::Unspec`], and the queue owns a
    /// descriptor an application polls ([`EventQueue::wait_fd`], [`EventQueue::trywait`]).
    Fd,
}

/// `struct fi_eq_attr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EqAttr {
    /// Minimum entries; 0 for [`DEFAULT_EQ_SIZE`].
    pub size: usize,
    /// [`FI_WRITE`] or 0.
    pub flags: u64,
    /// How readers block.
    pub wait_obj: WaitObj,
}

impl Default for EqAttr {
    /// A zeroed `struct fi_eq_attr`: the default size, no flags and `FI_WAIT_NONE`, which
    /// fi_eq(3) makes the default when no wait object is given (so [`EventQueue::sread`] is
    /// refused; ask for [`WaitObj::Unspec`] to block).
    fn default() -> Self {
        EqAttr {
            size: 0,
            flags: 0,
            wait_obj: WaitObj::None,
        }
    }
}

impl EqAttr {
    /// The default attributes with readers that may block ([`EventQueue::sread`]):
    /// `FI_WAIT_UNSPEC`, where the zeroed default (`FI_WAIT_NONE`) refuses blocking reads.
    pub const WAITABLE: EqAttr = EqAttr {
        size: 0,
        flags: 0,
        wait_obj: WaitObj::Unspec,
    };
}

/// A fresh fabric id for an object that reports to an EQ: the one counter AVs take theirs
/// from, so an entry's `fid` names one object of any kind.
pub use uet_av::next_fid;

#[derive(Default)]
struct State {
    events: VecDeque<EqEvent>,
    errors: VecDeque<EqErrEntry>,
    overrun: bool,
    /// [`EventQueue::close`] succeeded: nothing is queued, and every call fails.
    closed: bool,
    /// A signal no reader has taken yet: the next [`EventQueue::sread`] returns at once.
    signaled: bool,
    /// Signals so far: a reader that was waiting when one came returns, whichever reader
    /// took `signaled`.
    signals: u64,
    bound: usize,
    /// Entries held past the queue's size for the events of the connected endpoints
    /// reporting here (`EventQueue::bind_endpoint`).
    reserved: usize,
    /// AVs attached so far ([`AvEventSink::attach_av`]): a reader that last progressed AVs
    /// at an older count progresses again before it waits, so no bind goes unnoticed.
    av_attachments: u64,
    /// [`WaitObj::Fd`]: the descriptor an application polls, until the queue is closed.
    wait_fd: Option<EventFd>,
    /// Whether `wait_fd` is readable (written, and not read since).
    fd_ready: bool,
    /// An insert was queued or a signal came since the last [`EventQueue::trywait`]: the
    /// descriptor stays readable, though nothing is queued, until the application looks.
    kicked: bool,
    /// A bound AV may have progress to make: it woke the queue ([`EqWake`]) or queued an
    /// insert. A reader that wakes runs progress.
    progress_due: bool,
}

impl State {
    /// Whether the queue holds something a read returns (an event, an error, or the news of
    /// an overrun).
    fn has_entries(&self) -> bool {
        !self.events.is_empty() || !self.errors.is_empty() || self.overrun
    }

    /// Make the descriptor readable exactly when there is something to read or a kick
    /// waits to be seen. Called under the queue's lock after every change of the queue.
    fn settle_fd(&mut self) {
        let want = self.has_entries() || self.kicked;
        let Some(fd) = &self.wait_fd else {
            return;
        };
        if want == self.fd_ready {
            return;
        }
        if want {
            // Fails only when the counter would overflow, which one write per unread state
            // never comes near.
            if fd.write(1).is_ok() {
                self.fd_ready = true;
            }
        } else {
            // Reads the counter back to 0 (EAGAIN when it already is: unreadable either way).
            let _ = fd.read();
            self.fd_ready = false;
        }
    }
}

struct Shared {
    attr: EqAttr,
    size: usize,
    fid: u64,
    state: Mutex<State>,
    ready: Condvar,
    /// The eventfds of the readers asleep in [`EventQueue::sread`], one each, written with
    /// `ready` ([`Shared::wake_readers`]): a reader sleeps in poll(2) on its own, so that a
    /// signal delivered to its thread ends its sleep (fi_eq(3)), which a wait on `ready`
    /// would sleep on through. A reader that could get no eventfd waits on `ready`.
    readers: Mutex<Vec<Arc<EventFd>>>,
    /// Progress hooks of the AVs bound to the queue, by attachment number.
    progress: Mutex<Vec<(u64, Weak<dyn AvProgress>)>>,
    /// What a bound AV wakes the queue with ([`EqWake`]), made when first needed.
    waker: std::sync::OnceLock<Waker>,
    /// Told of every change a reader may be waiting for ([`EventQueue::on_change`]).
    on_change: std::sync::OnceLock<ChangeHook>,
    /// The process that opened the queue: a child forked from it drops its copies of the
    /// queue's bindings without waiting for a lock a thread of the parent held at the fork
    /// ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

/// What [`EventQueue::on_change`] calls.
pub type ChangeHook = Arc<dyn Fn() + Send + Sync>;

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wake every reader asleep in [`EventQueue::sread`], on `ready` or on its eventfd.
    /// Called after a change of the state, with or without the queue's lock (which is taken
    /// before `readers`, never after).
    fn wake_readers(&self) {
        self.ready.notify_all();
        for fd in self
            .readers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            // Cannot fail short of the counter's overflow, 2^64 - 2 wakes unread.
            let _ = fd.write(1);
        }
    }

    /// A bound AV may have progress to make (its insert was queued or sent, or the NIC
    /// answered): wake the readers asleep in [`EventQueue::sread`], which run progress, and
    /// make the descriptor readable until the next [`EventQueue::trywait`].
    fn progress_due(&self) {
        let mut s = self.lock();
        s.progress_due = true;
        if s.wait_fd.is_some() {
            s.kicked = true;
            s.settle_fd();
        }
        drop(s);
        self.wake_readers();
        self.changed();
    }

    /// Tell the [`EventQueue::on_change`] hook, if any, that the queue changed. Called with
    /// the queue's lock released.
    fn changed(&self) {
        if let Some(hook) = self.on_change.get() {
            hook();
        }
    }
}

/// How a bound AV wakes its queue when the NIC may have answered one of its inserts
/// ([`AvProgress::wake_on_progress`]): [`Shared::progress_due`]. Holds the queue weakly: a
/// wakeup that comes after the queue is gone wakes no one.
struct EqWake(Weak<Shared>);

impl Wake for EqWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(shared) = self.0.upgrade() {
            shared.progress_due();
        }
    }
}

static NEXT_ATTACHMENT: AtomicU64 = AtomicU64::new(1);

/// An event queue. Clones share the queue; objects bound to it hold a [`EqBinding`].
#[derive(Clone)]
pub struct EventQueue {
    shared: Arc<Shared>,
}

/// A bond between an object and an EQ: the queue cannot be closed while one exists.
pub struct EqBinding {
    eq: EventQueue,
    /// The entries it holds past the queue's size for posted events (`EventQueue::bind_endpoint`).
    reserves: usize,
}

impl EqBinding {
    /// The queue.
    pub fn eq(&self) -> &EventQueue {
        &self.eq
    }
}

impl Drop for EqBinding {
    fn drop(&mut self) {
        let shared = &self.eq.shared;
        let Some(mut s) = shared.made_in.lock(&shared.state) else {
            // A forked child's copy of a queue a thread of the parent held: never usable.
            return;
        };
        s.bound = s.bound.saturating_sub(1);
        s.reserved = s.reserved.saturating_sub(self.reserves);
    }
}

fn again() -> FiError {
    FiError::new(FiErrno::FI_EAGAIN, "the event queue is empty")
}

fn closed() -> FiError {
    FiError::new(FiErrno::FI_EBADF, "the event queue was closed")
}

/// A thread in [`EventQueue::sread`], among the queue's readers (`Shared::readers`) with an
/// eventfd of its own until it returns; without one (none could be made) it waits on the
/// queue's condition variable instead.
struct Reader<'a> {
    shared: &'a Shared,
    fd: Option<Arc<EventFd>>,
}

impl<'a> Reader<'a> {
    fn enter(shared: &'a Shared) -> Reader<'a> {
        let fd = EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).ok().map(Arc::new);
        if let Some(fd) = &fd {
            shared
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Arc::clone(fd));
        }
        Reader { shared, fd }
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(fd) = &self.fd {
            // In a forked child, a lock a thread of the parent held at the fork is left alone.
            if let Some(mut readers) = self.shared.made_in.lock(&self.shared.readers) {
                readers.retain(|r| !Arc::ptr_eq(r, fd));
            }
        }
    }
}

/// Sleep in poll(2) until `fd` is readable or `timeout` passes (`None`: without end), or a
/// signal delivered to the thread interrupts the sleep: whether one did.
fn sleep_on(fd: &EventFd, timeout: Option<Duration>) -> bool {
    let ms: libc::c_int = timeout.map_or(-1, |t| {
        // Rounded up, so a wait of less than a millisecond still sleeps.
        t.as_micros()
            .div_ceil(1000)
            .try_into()
            .unwrap_or(libc::c_int::MAX)
    });
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack for the call, and the count passed is 1; poll(2)
    // writes only its `revents`.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
}

impl EventQueue {
    /// `fi_eq_open`.
    pub fn open(attr: EqAttr) -> Result<Self, FiError> {
        if attr.flags & !FI_WRITE != 0 {
            return Err(FiError::badflags(format!(
                "fi_eq_open: unsupported flags {:#x}",
                attr.flags & !FI_WRITE
            )));
        }
        let size = if attr.size == 0 {
            DEFAULT_EQ_SIZE
        } else {
            attr.size
        };
        if size > MAX_EQ_SIZE {
            return Err(FiError::inval(format!(
                "fi_eq_open: size {size} exceeds the largest EQ, {MAX_EQ_SIZE}"
            )));
        }
        let wait_fd = match attr.wait_obj {
            WaitObj::Fd => Some(EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).map_err(|e| {
                FiError::new(
                    FiErrno::FI_ENOMEM,
                    format!("fi_eq_open: no eventfd for FI_WAIT_FD: {e}"),
                )
            })?),
            _ => None,
        };
        Ok(EventQueue {
            shared: Arc::new(Shared {
                attr,
                size,
                fid: next_fid(),
                state: Mutex::new(State {
                    wait_fd,
                    ..State::default()
                }),
                ready: Condvar::new(),
                readers: Mutex::new(Vec::new()),
                progress: Mutex::new(Vec::new()),
                waker: std::sync::OnceLock::new(),
                on_change: std::sync::OnceLock::new(),
                made_in: crate::fork::MadeIn::here(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// The queue's fabric id.
    pub fn fid(&self) -> u64 {
        self.shared.fid
    }

    /// Have `hook` called whenever a reader waiting on the queue may have something to look at:
    /// an event or error posted or written (or the queue overrun by one), a bound AV's
    /// progress due (an insert queued, or the NIC's answer to one: see
    /// [`EventQueue::trywait`]), a signal, the close. It is what a wait object the
    /// application sleeps on itself (`FI_WAIT_MUTEX_COND`) is signaled through. Called from
    /// whichever thread made the change, without the queue's lock but perhaps with locks of
    /// the caller's: it must not block on anything but its own. The first hook set stays:
    /// `false` when one was set already.
    pub fn on_change(&self, hook: ChangeHook) -> bool {
        self.shared.on_change.set(hook).is_ok()
    }

    /// The descriptor of a queue opened with [`WaitObj::Fd`] (`fi_control(FI_GETWAIT)`):
    /// readable while an event or error is queued, or after an AV insert was queued, the NIC
    /// answered one, or a signal came, until [`EventQueue::trywait`]. `None` for another wait object, or once
    /// the queue is closed (which closes it).
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.lock().wait_fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// `fi_trywait` of a queue opened with [`WaitObj::Fd`]: `Ok` when the application may
    /// sleep on [`EventQueue::wait_fd`], which then becomes readable when an event is posted,
    /// an insert is queued, or the NIC answers an insert in flight. The same for a queue
    /// opened with [`WaitObj::MutexCond`], whose application sleeps on what its
    /// [`EventQueue::on_change`] hook signals. Runs the progress of the
    /// bound AVs first. `FI_EAGAIN` while something is queued to read, or while an AV insert
    /// is in flight on a NIC that cannot announce its answer (no admin interrupt: its events
    /// are posted by a read, which the application then makes). `FI_EINVAL` for another wait
    /// object, `FI_EBADF` once closed.
    pub fn trywait(&self) -> Result<(), FiError> {
        {
            let mut s = self.lock();
            if s.closed {
                return Err(closed());
            }
            if s.wait_fd.is_none() && self.shared.attr.wait_obj != WaitObj::MutexCond {
                return Err(FiError::inval(
                    "fi_trywait: the event queue was not opened with FI_WAIT_FD or \
                     FI_WAIT_MUTEX_COND",
                ));
            }
            // Taken before the look below: an insert queued after it makes the descriptor
            // readable again.
            s.kicked = false;
            s.settle_fd();
        }
        let must_poll = self.progress_then_arm();
        {
            let s = self.lock();
            if s.closed {
                return Err(closed());
            }
            if s.has_entries() {
                return Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    "fi_trywait: an event waits to be read",
                ));
            }
        }
        if must_poll {
            return Err(FiError::new(
                FiErrno::FI_EAGAIN,
                "fi_trywait: an asynchronous AV insert is in flight and the NIC has no admin \
                 interrupt; its event comes with a read of the queue",
            ));
        }
        Ok(())
    }

    /// Entries the queue holds.
    pub fn size(&self) -> usize {
        self.shared.size
    }

    /// The queue as the event sink of an AV: pass it to [`uet_av::AddressVector::bind`]
    /// (`fi_av_bind(av, eq, 0)`).
    pub fn av_sink(&self) -> Arc<dyn AvEventSink> {
        Arc::new(self.clone())
    }

    fn progress_hooks(&self) -> MutexGuard<'_, Vec<(u64, Weak<dyn AvProgress>)>> {
        self.shared
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The AVs bound to the queue, taken out of the hooks' lock: an AV dropped meanwhile
    /// detaches under that lock, and progress posts to the queue.
    fn bound_avs(&self) -> Vec<Arc<dyn AvProgress>> {
        self.progress_hooks()
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    /// Run the progress of every AV bound to the queue; whether any is bound.
    fn run_progress(&self) -> bool {
        let avs = self.bound_avs();
        for av in &avs {
            av.progress();
        }
        !avs.is_empty()
    }

    /// Run the progress of every AV bound to the queue, then have each that still has an
    /// insert in flight wake the queue when the NIC may have answered it
    /// ([`AvProgress::wake_on_progress`]): whether a reader must run progress at intervals
    /// instead ([`PROGRESS_INTERVAL`]), because one cannot (a NIC without an admin interrupt,
    /// or an AV whose owner holds it).
    fn progress_then_arm(&self) -> bool {
        let avs = self.bound_avs();
        for av in &avs {
            av.progress();
        }
        let waker = self
            .shared
            .waker
            .get_or_init(|| Waker::from(Arc::new(EqWake(Arc::downgrade(&self.shared)))));
        !avs.iter()
            .filter(|av| av.in_flight())
            .all(|av| av.wake_on_progress(waker))
    }

    /// Bind an object to the queue (`fi_*_bind`); `FI_EBADF` once the queue is closed.
    pub fn bind(&self) -> Result<EqBinding, FiError> {
        let mut s = self.lock();
        if s.closed {
            return Err(closed());
        }
        s.bound += 1;
        Ok(EqBinding {
            eq: self.clone(),
            reserves: 0,
        })
    }

    /// Bind an `FI_EP_MSG` endpoint, which reports its connection here: as
    /// [`EventQueue::bind`], and while it is bound the queue holds
    /// [`ENDPOINT_RESERVED_ENTRIES`] more entries for posted events.
    pub(crate) fn bind_endpoint(&self) -> Result<EqBinding, FiError> {
        self.bind_reserving(ENDPOINT_RESERVED_ENTRIES)
    }

    /// Bind a passive endpoint, which reports its requests here: as [`EventQueue::bind`],
    /// and while it is bound the queue holds [`LISTENER_RESERVED_ENTRIES`] more entries for
    /// posted events.
    pub(crate) fn bind_listener(&self) -> Result<EqBinding, FiError> {
        self.bind_reserving(LISTENER_RESERVED_ENTRIES)
    }

    /// [`EventQueue::bind`], holding `entries` past the queue's size while bound.
    fn bind_reserving(&self, entries: usize) -> Result<EqBinding, FiError> {
        let mut b = self.bind()?;
        let mut s = self.lock();
        s.reserved = s.reserved.saturating_add(entries);
        b.reserves = entries;
        Ok(b)
    }

    /// `fi_close`: fails with `FI_EBUSY` while objects are bound. Otherwise the queue is
    /// closed for every clone of the handle: "Any events which remain on the EQ when it is
    /// closed are lost" (fi_eq(3)), readers blocked in [`EventQueue::sread`] return
    /// `FI_EBADF`, and so does every later call.
    pub fn close(self) -> Result<(), FiError> {
        let mut s = self.lock();
        if s.closed {
            return Err(closed());
        }
        if s.bound > 0 {
            return Err(FiError::new(
                FiErrno::FI_EBUSY,
                format!(
                    "fi_close: {} objects are still bound to the event queue",
                    s.bound
                ),
            ));
        }
        s.closed = true;
        s.events.clear();
        s.errors.clear();
        // The descriptor closes with the queue, whatever clones of the handle live on.
        s.wait_fd = None;
        drop(s);
        self.shared.wake_readers();
        self.shared.changed();
        Ok(())
    }

    /// Queue an entry with `push`, under the queue's lock, then tell the
    /// [`EventQueue::on_change`] hook, without it. On a full queue, an entry the provider
    /// posts is lost and overruns the queue; one the application writes, or one offered
    /// (`refuse_when_full`), is refused with `FI_EAGAIN`, the queue untouched, as the caller
    /// still holds it.
    fn push(&self, refuse_when_full: bool, push: impl FnOnce(&mut State)) -> Result<(), FiError> {
        let pushed = self.push_locked(&mut self.lock(), refuse_when_full, push);
        self.shared.changed();
        pushed
    }

    /// [`EventQueue::push`] with the queue's lock held.
    fn push_locked(
        &self,
        s: &mut State,
        refuse_when_full: bool,
        push: impl FnOnce(&mut State),
    ) -> Result<(), FiError> {
        if s.closed {
            return Err(closed());
        }
        if s.overrun {
            return Err(FiError::new(
                FiErrno::FI_EOVERRUN,
                "the event queue was overrun and is no longer usable",
            ));
        }
        // Posted events may take the entries held for the bound endpoints' events; what a
        // caller can refuse may not.
        let limit = if refuse_when_full {
            self.shared.size
        } else {
            self.shared.size.saturating_add(s.reserved)
        };
        if s.events.len() + s.errors.len() >= limit {
            if refuse_when_full {
                return Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    format!(
                        "fi_eq_write: the event queue of {} entries is full",
                        self.shared.size
                    ),
                ));
            }
            s.overrun = true;
            s.settle_fd();
            tracing::error!(size = self.shared.size, "event queue overrun");
            self.shared.wake_readers();
            return Err(FiError::new(
                FiErrno::FI_EOVERRUN,
                format!("the event queue of {} entries is full", self.shared.size),
            ));
        }
        push(s);
        s.settle_fd();
        // Every waiter: one that takes nothing (it peeks, or an error is at the head for it)
        // must not leave the others asleep with an entry queued.
        self.shared.wake_readers();
        Ok(())
    }

    /// Post an event (provider side).
    pub fn post(&self, event: EqEvent) -> Result<(), FiError> {
        self.push(false, |s| s.events.push_back(event))
    }

    /// Post an event only if the queue has room for it: one that does not fit is refused with
    /// `FI_EAGAIN` and the queue is left as it was, not overrun. For an event whose cause the
    /// caller can refuse instead (a peer's connection request, rejected): what peers send
    /// must not make the queue unusable for every other object reporting to it. Nor does it
    /// take the entries held past the queue's size for the events of the endpoints bound to
    /// it (`EventQueue::bind_endpoint`).
    pub fn offer(&self, event: EqEvent) -> Result<(), FiError> {
        self.push(true, |s| s.events.push_back(event))
            .map_err(|e| match e.errno {
                FiErrno::FI_EAGAIN => FiError::new(
                    FiErrno::FI_EAGAIN,
                    format!("the event queue of {} entries is full", self.shared.size),
                ),
                _ => e,
            })
    }

    /// Post an error (provider side).
    pub fn post_error(&self, err: EqErrEntry) -> Result<(), FiError> {
        self.push(false, |s| s.errors.push_back(err))
    }

    /// `fi_eq_write`: insert a user event; needs [`FI_WRITE`] at open. A queue with no room
    /// refuses the event with `FI_EAGAIN` (read events, then write again); unlike an event the
    /// provider could not post, it is not lost, so the queue is not overrun.
    pub fn write(&self, event: EqEvent) -> Result<(), FiError> {
        if self.shared.attr.flags & FI_WRITE == 0 {
            return Err(FiError::new(
                FiErrno::FI_EOPNOTSUPP,
                "fi_eq_write: the event queue was not opened with FI_WRITE",
            ));
        }
        self.push(true, |s| s.events.push_back(event))
    }

    fn take(&self, s: &mut State, flags: u64) -> Result<EqEvent, FiError> {
        if s.closed {
            return Err(closed());
        }
        if !s.errors.is_empty() {
            return Err(FiError::new(
                FiErrno::FI_EAVAIL,
                "an error event is queued: read it with fi_eq_readerr",
            ));
        }
        let ev = if flags & FI_PEEK != 0 {
            s.events.front().cloned()
        } else {
            let ev = s.events.pop_front();
            s.settle_fd();
            ev
        };
        match ev {
            Some(ev) => Ok(ev),
            None if s.overrun => Err(FiError::new(
                FiErrno::FI_EOVERRUN,
                "the event queue was overrun: events were lost",
            )),
            None => Err(again()),
        }
    }

    /// `fi_eq_read`: the next event, without blocking. `flags` may hold [`FI_PEEK`].
    pub fn read(&self, flags: u64) -> Result<EqEvent, FiError> {
        if flags & !FI_PEEK != 0 {
            return Err(FiError::badflags(format!(
                "fi_eq_read: unsupported flags {:#x}",
                flags & !FI_PEEK
            )));
        }
        self.run_progress();
        let mut s = self.lock();
        self.take(&mut s, flags)
    }

    /// `fi_eq_readerr`: the next error, without blocking. With none queued: `FI_EOVERRUN`
    /// once the queue was overrun and its events are read too (as [`EventQueue::read`]
    /// reports it), else `FI_EAGAIN`.
    pub fn readerr(&self) -> Result<EqErrEntry, FiError> {
        self.run_progress();
        let mut s = self.lock();
        if s.closed {
            return Err(closed());
        }
        let e = s.errors.pop_front();
        s.settle_fd();
        match e {
            Some(e) => Ok(e),
            // "After all valid events have been retrieved" (fi_eq(3)).
            None if s.overrun && s.events.is_empty() => Err(FiError::new(
                FiErrno::FI_EOVERRUN,
                "the event queue was overrun: events were lost",
            )),
            None => Err(FiError::new(FiErrno::FI_EAGAIN, "no error event is queued")),
        }
    }

    /// `fi_eq_sread`: the next event, blocking up to `timeout` (`None`: forever). Returns
    /// `FI_EAGAIN` on timeout, when [`EventQueue::signal`] interrupts the wait, or when a
    /// signal delivered to the thread (a POSIX signal whose handler returns) interrupts its
    /// sleep and nothing is there to read (fi_eq(3): a thread "signaled by some external
    /// source" returns, "even if the timeout ... was specified as infinite"; a signal that
    /// lands between two sleeps, or during a [`WaitObj::Yield`] reader's spin, ends nothing),
    /// and `FI_EBADF` once the queue is closed (a reader blocked at the close included).
    pub fn sread(&self, timeout: Option<Duration>, flags: u64) -> Result<EqEvent, FiError> {
        if self.shared.attr.wait_obj == WaitObj::None {
            return Err(FiError::inval(
                "fi_eq_sread: the event queue was opened with FI_WAIT_NONE",
            ));
        }
        if flags & !FI_PEEK != 0 {
            return Err(FiError::badflags(format!(
                "fi_eq_sread: unsupported flags {:#x}",
                flags & !FI_PEEK
            )));
        }
        // A timeout too long to add to the clock waits forever, as a negative one does in C.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // Among the readers woken for every change from before the first look at the queue;
        // it leaves them after the last (declared before the queue's lock is taken).
        let me = Reader::enter(&self.shared);
        // A signal delivered to the thread cut its last sleep short.
        let mut interrupted = false;
        // The attachments counted before progress runs: one made after this read shows as a
        // change below, whenever it lands.
        // The signals counted on entry: every reader waiting when a signal comes returns.
        let (mut progressed, signals) = {
            let s = self.lock();
            (s.av_attachments, s.signals)
        };
        let mut polling = self.progress_then_arm();
        let mut s = self.lock();
        let read = loop {
            match self.take(&mut s, flags) {
                Err(e) if e.errno == FiErrno::FI_EAGAIN => {}
                other => break other,
            }
            let flagged = std::mem::take(&mut s.signaled);
            if flagged || s.signals != signals {
                break Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    "fi_eq_sread: interrupted by fi_eq_signal",
                ));
            }
            if interrupted {
                break Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    "fi_eq_sread: interrupted by a signal",
                ));
            }
            let left = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break Err(FiError::new(FiErrno::FI_EAGAIN, "fi_eq_sread: timed out"));
                    }
                    Some(d - now)
                }
                None => None,
            };
            // An AV was bound since progress last ran, or one woke the queue (its insert was
            // sent, or the NIC answered, perhaps while progress ran): progress before waiting.
            if s.av_attachments != progressed || std::mem::take(&mut s.progress_due) {
                progressed = s.av_attachments;
                drop(s);
                polling = self.progress_then_arm();
                s = self.lock();
                continue;
            }
            if self.shared.attr.wait_obj == WaitObj::Yield {
                progressed = s.av_attachments;
                drop(s);
                std::thread::yield_now();
                self.run_progress();
                s = self.lock();
                continue;
            }
            let left = if polling {
                Some(left.map_or(PROGRESS_INTERVAL, |l| l.min(PROGRESS_INTERVAL)))
            } else {
                left
            };
            s = match (&me.fd, left) {
                // Every change from its registration on has written the eventfd: one made
                // after the look above, with the lock let go, makes the sleep end at once.
                (Some(fd), left) => {
                    drop(s);
                    interrupted = sleep_on(fd, left);
                    // Seen: the look that follows, under the lock, finds what it announced.
                    let _ = fd.read();
                    self.lock()
                }
                (None, Some(left)) => {
                    self.shared
                        .ready
                        .wait_timeout(s, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                (None, None) => self.shared.ready.wait(s).unwrap_or_else(|p| p.into_inner()),
            };
            // A wake-up from polling's interval runs progress again; one from a bind
            // (attach_av wakes this wait) or from an AV (its waker) is caught by the check
            // above, and one from an event or a signal needs no progress.
            if polling {
                progressed = s.av_attachments;
                drop(s);
                polling = self.progress_then_arm();
                s = self.lock();
            }
        };
        if polling {
            // This reader's last progress left an AV unable to wake the queue, perhaps after
            // taking the wakeup another reader asleep here counts on (`progress_due`): that
            // one runs progress now, and asks again or polls in its turn.
            s.progress_due = true;
            drop(s);
            self.shared.wake_readers();
        }
        read
    }

    /// Wake every thread blocked in [`EventQueue::sread`] (`fi_eq_signal`): each returns
    /// `FI_EAGAIN`. With none blocked, the next `sread` returns at once instead.
    pub fn signal(&self) {
        let mut s = self.lock();
        s.signaled = true;
        s.signals = s.signals.wrapping_add(1);
        s.kicked = true;
        s.settle_fd();
        drop(s);
        self.shared.wake_readers();
        self.shared.changed();
    }

    /// Drop every event and error of the object `fid` still queued: what `fi_close` of an
    /// object reporting here does, so that no entry names an object that is gone. Returns how
    /// many were dropped.
    pub fn discard(&self, fid: u64) -> usize {
        let mut s = self.lock();
        let before = s.events.len() + s.errors.len();
        s.events.retain(|e| e.fid != fid);
        s.errors.retain(|e| e.fid != fid);
        s.settle_fd();
        before - s.events.len() - s.errors.len()
    }

    /// Events and errors queued.
    pub fn len(&self) -> (usize, usize) {
        let s = self.lock();
        (s.events.len(), s.errors.len())
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }
}

impl AvEventSink for EventQueue {
    fn post_av_event(&self, event: AvEvent) -> Result<(), FiError> {
        match event {
            AvEvent::InsertComplete {
                av,
                context,
                inserted,
            } => self.post(EqEvent {
                kind: EqEventKind::AvComplete,
                fid: av,
                context,
                data: inserted,
                cm_data: Vec::new(),
            }),
            AvEvent::InsertError {
                av,
                context,
                position,
                errno,
                prov_errno,
                message,
            } => self.post_error(EqErrEntry {
                fid: av,
                context,
                data: position,
                err: errno,
                prov_errno,
                err_data: message,
                cm_data: Vec::new(),
            }),
        }
    }

    fn attach_av(&self, progress: Weak<dyn AvProgress>) -> Result<u64, FiError> {
        let id = NEXT_ATTACHMENT.fetch_add(1, Ordering::Relaxed);
        // The hook goes in before the count changes: a reader that sees the count change
        // progresses this AV.
        self.progress_hooks().push((id, progress));
        {
            let mut s = self.lock();
            // Checked with the count, under the lock close takes: a close that came first
            // wins, and one that comes later sees the AV bound.
            if s.closed {
                drop(s);
                self.progress_hooks().retain(|(i, _)| *i != id);
                return Err(closed());
            }
            s.bound += 1;
            s.av_attachments += 1;
        }
        // A reader blocked in sread since before this AV was bound waits without progressing
        // AVs: wake it, so that it runs this one's progress while it waits (a reader about to
        // wait sees the count change instead).
        self.shared.wake_readers();
        Ok(id)
    }

    fn inserts_queued(&self) {
        self.shared.progress_due();
    }

    fn detach_av(&self, attachment: u64) {
        // In a forked child, a lock a thread of the parent held at the fork is left alone, as
        // by a binding's drop.
        let made_in = self.shared.made_in;
        let Some(mut hooks) = made_in.lock(&self.shared.progress) else {
            return;
        };
        let before = hooks.len();
        hooks.retain(|(id, _)| *id != attachment);
        let removed = before - hooks.len();
        drop(hooks);
        if removed > 0 {
            if let Some(mut s) = made_in.lock(&self.shared.state) {
                s.bound = s.bound.saturating_sub(removed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue readers may block on.
    const WAITABLE: EqAttr = EqAttr::WAITABLE;

    fn ev(data: u64) -> EqEvent {
        EqEvent {
            kind: EqEventKind::AvComplete,
            fid: 7,
            context: 9,
            data,
            cm_data: Vec::new(),
        }
    }

    fn err(data: u64) -> EqErrEntry {
        EqErrEntry {
            fid: 7,
            context: 9,
            data,
            err: FiErrno::FI_EINVAL,
            prov_errno: 2,
            err_data: "bad address".into(),
            cm_data: Vec::new(),
        }
    }

    /// A thread of the parent held the queue at the fork: the child's copy of a binding
    /// drops without waiting for a lock no thread of the child will let go.
    #[test]
    fn a_forked_child_drops_a_binding_while_a_parents_thread_held_the_queue() {
        let eq = EventQueue::open(WAITABLE).expect("eq");
        let mut binding = Some(eq.bind().expect("bind"));
        let holder = eq.clone();
        let hold = move |wait: &dyn Fn()| {
            let _state = holder.lock();
            wait();
        };
        let code = crate::fork::tests::in_child_while_held(hold, || {
            drop(binding.take());
            0
        });
        assert_eq!(code, Some(0), "the child dropped its binding and ended");
        // The parent's binding holds the queue open until it goes.
        assert!(eq.clone().close().is_err());
        drop(binding);
        assert!(eq.close().is_ok());
    }

    /// Offered events fill a queue's size and no more, however many connected endpoints
    /// report to it; posted events also take the entries held past the size for those
    /// endpoints (two each), and only past those is the queue overrun. An endpoint unbound
    /// gives its entries back.
    #[test]
    fn posted_events_take_the_entries_held_past_the_size_for_bound_endpoints() {
        const SIZE: usize = 4;
        let eq = EventQueue::open(EqAttr {
            size: SIZE,
            ..WAITABLE
        })
        .unwrap();
        // More endpoints than the queue has entries: requests still fill its size.
        let bound: Vec<EqBinding> = (0..100).map(|_| eq.bind_endpoint().unwrap()).collect();
        for k in 0..SIZE {
            eq.offer(ev(k as u64))
                .expect("a request fits the queue's size");
        }
        assert_eq!(
            eq.offer(ev(99)).unwrap_err().errno,
            FiErrno::FI_EAGAIN,
            "past the size"
        );
        let mut w = ev(98);
        w.kind = EqEventKind::Connected;
        // Posted: into the held entries.
        for _ in 0..2 * bound.len() {
            eq.post(w.clone())
                .expect("a connection event fits a held entry");
        }
        assert_eq!(eq.len(), (SIZE + 200, 0));
        assert_eq!(eq.post(w.clone()).unwrap_err().errno, FiErrno::FI_EOVERRUN);
        // A smaller queue's held entries go with their endpoints.
        let small = EventQueue::open(EqAttr {
            size: 1,
            ..WAITABLE
        })
        .unwrap();
        let one = small.bind_endpoint().unwrap();
        drop(one);
        small.post(ev(1)).unwrap();
        assert_eq!(small.post(ev(2)).unwrap_err().errno, FiErrno::FI_EOVERRUN);
        drop(bound);
    }

    #[test]
    fn discard_drops_only_the_objects_entries() {
        let eq = EventQueue::open(WAITABLE).unwrap();
        eq.post(ev(1)).unwrap();
        eq.post(EqEvent { fid: 8, ..ev(2) }).unwrap();
        eq.post_error(err(3)).unwrap();
        eq.post(ev(4)).unwrap();
        assert_eq!(eq.discard(7), 3);
        assert_eq!(eq.len(), (1, 0));
        assert_eq!(eq.read(0).unwrap().data, 2);
        assert_eq!(eq.discard(7), 0);
    }

    #[test]
    fn read_peek_and_empty() {
        let eq = EventQueue::open(WAITABLE).unwrap();
        assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAGAIN);
        eq.post(ev(3)).unwrap();
        assert_eq!(eq.read(FI_PEEK).unwrap().data, 3);
        assert_eq!(eq.read(0).unwrap().data, 3);
        assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAGAIN);
        assert_eq!(eq.read(1 << 3).unwrap_err().errno, FiErrno::FI_EBADFLAGS);
    }

    #[test]
    fn an_error_blocks_reads_until_readerr() {
        let eq = EventQueue::open(WAITABLE).unwrap();
        eq.post(ev(1)).unwrap();
        eq.post_error(err(4)).unwrap();
        assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAVAIL);
        let e = eq.readerr().unwrap();
        assert_eq!((e.data, e.err), (4, FiErrno::FI_EINVAL));
        assert_eq!(eq.readerr().unwrap_err().errno, FiErrno::FI_EAGAIN);
        assert_eq!(eq.read(0).unwrap().data, 1);
    }

    #[test]
    fn sread_blocks_until_an_event_or_timeout() {
        let eq = EventQueue::open(WAITABLE).unwrap();
        let e = eq.sread(Some(Duration::from_millis(20)), 0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EAGAIN);
        let poster = eq.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            poster.post(ev(42)).unwrap();
        });
        assert_eq!(eq.sread(None, 0).unwrap().data, 42);
        t.join().unwrap();
        // A signal interrupts an infinite wait.
        let waker = eq.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            waker.signal();
        });
        assert_eq!(eq.sread(None, 0).unwrap_err().errno, FiErrno::FI_EAGAIN);
        t.join().unwrap();
        // Yield-based waiting works too.
        let eq = EventQueue::open(EqAttr {
            wait_obj: WaitObj::Yield,
            ..WAITABLE
        })
        .unwrap();
        eq.post(ev(5)).unwrap();
        assert_eq!(eq.sread(Some(Duration::from_secs(1)), 0).unwrap().data, 5);
        // A timeout the clock cannot add waits like no timeout (no overflow panic).
        eq.post(ev(6)).unwrap();
        assert_eq!(eq.sread(Some(Duration::MAX), 0).unwrap().data, 6);
    }

    #[test]
    fn wait_none_refuses_sread_and_write_needs_fi_write() {
        let eq = EventQueue::open(EqAttr {
            wait_obj: WaitObj::None,
            ..WAITABLE
        })
        .unwrap();
        assert_eq!(
            eq.sread(Some(Duration::ZERO), 0).unwrap_err().errno,
            FiErrno::FI_EINVAL
        );
        assert_eq!(eq.write(ev(1)).unwrap_err().errno, FiErrno::FI_EOPNOTSUPP);
        // No wait object given is FI_WAIT_NONE, as for a zeroed fi_eq_attr.
        let unspecified = EventQueue::open(EqAttr::default()).unwrap();
        let e = unspecified.sread(Some(Duration::ZERO), 0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.contains("FI_WAIT_NONE"), "{e}");
        let eq = EventQueue::open(EqAttr {
            flags: FI_WRITE,
            ..WAITABLE
        })
        .unwrap();
        eq.write(ev(1)).unwrap();
        assert_eq!(eq.read(0).unwrap().data, 1);
        assert_eq!(
            EventQueue::open(EqAttr {
                flags: 1 << 40,
                ..WAITABLE
            })
            .err()
            .unwrap()
            .errno,
            FiErrno::FI_EBADFLAGS
        );
    }

    #[test]
    fn overrun_is_fatal_and_reported_after_the_queued_events() {
        let eq = EventQueue::open(EqAttr {
            size: 2,
            ..WAITABLE
        })
        .unwrap();
        eq.post(ev(1)).unwrap();
        eq.post(ev(2)).unwrap();
        assert_eq!(eq.post(ev(3)).unwrap_err().errno, FiErrno::FI_EOVERRUN);
        assert_eq!(eq.read(0).unwrap().data, 1);
        assert_eq!(eq.post(ev(4)).unwrap_err().errno, FiErrno::FI_EOVERRUN);
        assert_eq!(eq.read(0).unwrap().data, 2);
        assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EOVERRUN);
    }

    #[test]
    fn close_with_bound_objects_is_busy() {
        let eq = EventQueue::open(WAITABLE).unwrap();
        let b = eq.bind().unwrap();
        assert_eq!(eq.clone().close().unwrap_err().errno, FiErrno::FI_EBUSY);
        drop(b);
        eq.close().unwrap();
        assert!(EventQueue::open(EqAttr {
            size: MAX_EQ_SIZE + 1,
            ..WAITABLE
        })
        .is_err());
    }

    struct Poster {
        eq: EventQueue,
        calls: AtomicU64,
        /// What `in_flight` answers; it cannot wake the queue.
        in_flight: std::sync::atomic::AtomicBool,
    }

    impl AvProgress for Poster {
        fn progress(&self) -> usize {
            let n = self.calls.fetch_add(1, Ordering::Relaxed);
            if n == 0 {
                let sink = self.eq.av_sink();
                sink.post_av_event(AvEvent::InsertError {
                    av: 3,
                    context: 4,
                    position: 1,
                    errno: FiErrno::FI_EIO,
                    prov_errno: 6,
                    message: "refused".into(),
                })
                .unwrap();
                sink.post_av_event(AvEvent::InsertComplete {
                    av: 3,
                    context: 4,
                    inserted: 2,
                })
                .unwrap();
                return 1;
            }
            0
        }

        fn in_flight(&self) -> bool {
            self.in_flight.load(Ordering::Acquire)
        }
    }

    #[test]
    fn reading_drives_the_progress_of_bound_avs_and_binding_blocks_close() {
        let eq = EventQueue::open(WAITABLE).unwrap();
        let poster = Arc::new(Poster {
            eq: eq.clone(),
            calls: AtomicU64::new(0),
            in_flight: std::sync::atomic::AtomicBool::new(false),
        });
        let weak: Weak<dyn AvProgress> = Arc::downgrade(&poster) as Weak<dyn AvProgress>;
        let sink = eq.av_sink();
        let id = sink.attach_av(weak).unwrap();
        assert_eq!(eq.clone().close().unwrap_err().errno, FiErrno::FI_EBUSY);
        assert_eq!(eq.len(), (0, 0), "nothing before a read");
        assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAVAIL);
        let e = eq.readerr().unwrap();
        assert_eq!(
            (e.fid, e.context, e.data, e.err, e.prov_errno),
            (3, 4, 1, FiErrno::FI_EIO, 6)
        );
        assert_eq!(e.err_data, "refused");
        let ev = eq.read(0).unwrap();
        assert_eq!(
            (ev.kind, ev.fid, ev.context, ev.data),
            (EqEventKind::AvComplete, 3, 4, 2)
        );
        // sread runs progress once for an AV with nothing in flight, and sleeps.
        let before = poster.calls.load(Ordering::Relaxed);
        let e = eq.sread(Some(Duration::from_millis(20)), 0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EAGAIN);
        assert_eq!(poster.calls.load(Ordering::Relaxed), before + 1);
        // It keeps polling while an AV that cannot wake it has an insert in flight, and times
        // out when nothing comes.
        poster.in_flight.store(true, Ordering::Release);
        let before = poster.calls.load(Ordering::Relaxed);
        let e = eq.sread(Some(Duration::from_millis(20)), 0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EAGAIN);
        assert!(poster.calls.load(Ordering::Relaxed) > before + 2);
        sink.detach_av(id);
        sink.detach_av(id);
        eq.close().unwrap();
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the call only.
        unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
    }

    /// An AV with one insert, as its queue sees it: in flight while `in_flight`; once
    /// `answered`, the next progress posts its event (data 9). Its NIC can wake the queue when
    /// it answers only with `can_wake`: `wake_on_progress` then keeps the waker (which
    /// [`FakeInsert::answer`] fires), unless `contended`, when it cannot arrange a wakeup
    /// now and fires the one it held (the NIC woke it for a command that failed).
    struct FakeInsert {
        eq: EventQueue,
        in_flight: std::sync::atomic::AtomicBool,
        answered: std::sync::atomic::AtomicBool,
        can_wake: bool,
        contended: std::sync::atomic::AtomicBool,
        progress_runs: std::sync::atomic::AtomicUsize,
        waker: Mutex<Option<Waker>>,
    }

    impl FakeInsert {
        fn new(eq: &EventQueue, in_flight: bool, can_wake: bool) -> Arc<FakeInsert> {
            use std::sync::atomic::{AtomicBool, AtomicUsize};
            Arc::new(FakeInsert {
                eq: eq.clone(),
                in_flight: AtomicBool::new(in_flight),
                answered: AtomicBool::new(false),
                can_wake,
                contended: AtomicBool::new(false),
                progress_runs: AtomicUsize::new(0),
                waker: Mutex::new(None),
            })
        }

        /// The NIC answers: the next progress posts the event, and the waker the queue left,
        /// if any, fires.
        fn answer(&self) {
            self.answered.store(true, Ordering::Release);
            if let Some(w) = self.waker.lock().unwrap().take() {
                w.wake();
            }
        }

        /// Whether the queue left a waker.
        fn asked(&self) -> bool {
            self.waker.lock().unwrap().is_some()
        }
    }

    impl AvProgress for FakeInsert {
        fn progress(&self) -> usize {
            self.progress_runs.fetch_add(1, Ordering::AcqRel);
            if self.answered.load(Ordering::Acquire) && self.in_flight.swap(false, Ordering::AcqRel)
            {
                self.eq.post(ev(9)).unwrap();
                return 1;
            }
            0
        }

        fn in_flight(&self) -> bool {
            self.in_flight.load(Ordering::Acquire)
        }

        fn wake_on_progress(&self, waker: &Waker) -> bool {
            if !self.can_wake {
                return false;
            }
            let mut held = self.waker.lock().unwrap();
            if self.contended.load(Ordering::Acquire) {
                if let Some(w) = held.take() {
                    w.wake();
                }
                return false;
            }
            *held = Some(waker.clone());
            true
        }
    }

    #[test]
    fn an_fd_queues_descriptor_is_readable_exactly_while_something_is_queued() {
        let eq = EventQueue::open(EqAttr {
            wait_obj: WaitObj::Fd,
            flags: FI_WRITE,
            ..WAITABLE
        })
        .unwrap();
        assert!(EventQueue::open(WAITABLE).unwrap().wait_fd().is_none());
        let fd = eq.wait_fd().unwrap();
        assert!(!readable(fd));
        eq.trywait().unwrap();
        // Posted from another thread.
        let poster = eq.clone();
        std::thread::spawn(move || poster.post(ev(1)).unwrap())
            .join()
            .unwrap();
        assert!(readable(fd), "an event was posted");
        assert_eq!(eq.trywait().unwrap_err().errno, FiErrno::FI_EAGAIN);
        eq.write(ev(2)).unwrap();
        eq.post_error(err(3)).unwrap();
        assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAVAIL);
        eq.readerr().unwrap();
        assert!(readable(fd), "two events are still queued");
        assert_eq!(eq.read(FI_PEEK).unwrap().data, 1);
        assert_eq!(eq.read(0).unwrap().data, 1);
        assert!(readable(fd));
        assert_eq!(eq.read(0).unwrap().data, 2);
        assert!(!readable(fd), "the queue was emptied");
        eq.trywait().unwrap();
        // A signal is there to see until the next trywait; sread still works beside it.
        eq.signal();
        assert!(readable(fd));
        assert_eq!(eq.trywait(), Ok(()));
        assert!(!readable(fd));
        assert_eq!(
            eq.sread(Some(Duration::ZERO), 0).unwrap_err().errno,
            FiErrno::FI_EAGAIN
        );
        eq.post(ev(4)).unwrap();
        assert_eq!(eq.sread(Some(Duration::from_secs(1)), 0).unwrap().data, 4);
        assert!(!readable(fd));
        // Another wait object has no descriptor to try.
        let plain = EventQueue::open(WAITABLE).unwrap();
        assert_eq!(plain.trywait().unwrap_err().errno, FiErrno::FI_EINVAL);
        eq.clone().close().unwrap();
        assert_eq!(eq.wait_fd(), None, "the descriptor closes with the queue");
        assert_eq!(eq.trywait().unwrap_err().errno, FiErrno::FI_EBADF);
    }

    #[test]
    fn an_fd_queue_is_not_slept_on_while_an_av_insert_is_in_flight() {
        let eq = EventQueue::open(EqAttr {
            wait_obj: WaitObj::Fd,
            ..WAITABLE
        })
        .unwrap();
        let fd = eq.wait_fd().unwrap();
        let av = FakeInsert::new(&eq, false, false);
        let sink = eq.av_sink();
        let id = sink
            .attach_av(Arc::downgrade(&av) as Weak<dyn AvProgress>)
            .unwrap();
        eq.trywait().unwrap();
        // An insert queued by another thread wakes the sleeper, which may not sleep again
        // until the NIC answered and a read of the queue posted the event.
        av.in_flight.store(true, Ordering::Release);
        sink.inserts_queued();
        assert!(readable(fd), "an insert was queued");
        assert_eq!(eq.trywait().unwrap_err().errno, FiErrno::FI_EAGAIN);
        assert!(!readable(fd));
        assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAGAIN);
        av.answered.store(true, Ordering::Release);
        let e = eq.trywait().unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EAGAIN, "trywait ran progress: {e}");
        assert!(readable(fd));
        assert_eq!(eq.read(0).unwrap().data, 9);
        eq.trywait().unwrap();
        assert!(!readable(fd));
        sink.detach_av(id);
        eq.close().unwrap();
    }

    /// An AV whose NIC can wake the queue ([`AvProgress::wake_on_progress`]): `sread` sleeps
    /// until it does instead of running progress every [`PROGRESS_INTERVAL`], and `trywait`
    /// lets the application sleep on the descriptor, which the wakeup makes readable.
    #[test]
    fn readers_sleep_until_an_av_that_can_wake_them_does() {
        for wait_obj in [WaitObj::Unspec, WaitObj::Fd] {
            let eq = EventQueue::open(EqAttr {
                wait_obj,
                ..WAITABLE
            })
            .unwrap();
            let av = FakeInsert::new(&eq, true, true);
            let sink = eq.av_sink();
            let id = sink
                .attach_av(Arc::downgrade(&av) as Weak<dyn AvProgress>)
                .unwrap();
            let reader = {
                let eq = eq.clone();
                std::thread::spawn(move || eq.sread(Some(Duration::from_secs(20)), 0))
            };
            // Once it asked to be woken (however long it took to get there), it sleeps.
            let start = Instant::now();
            while !av.asked() {
                assert!(start.elapsed() < Duration::from_secs(10), "never asked");
                std::thread::sleep(Duration::from_millis(1));
            }
            let before = av.progress_runs.load(Ordering::Acquire);
            std::thread::sleep(Duration::from_millis(200));
            let runs = av.progress_runs.load(Ordering::Acquire) - before;
            assert!(
                runs <= 2,
                "{wait_obj:?}: the reader ran progress {runs} times in 200 ms instead of sleeping"
            );
            assert!(
                av.asked(),
                "{wait_obj:?}: the reader no longer waits to be woken"
            );
            av.answer();
            let got = reader.join().unwrap().map(|e| e.data);
            assert_eq!(got.map_err(|e| e.errno), Ok(9), "{wait_obj:?}");
            if wait_obj == WaitObj::Fd {
                // The descriptor: trywait lets the application sleep while the insert is in
                // flight, and the wakeup makes it readable.
                let fd = eq.wait_fd().unwrap();
                av.in_flight.store(true, Ordering::Release);
                av.answered.store(false, Ordering::Release);
                eq.trywait().unwrap();
                eq.trywait().unwrap();
                assert!(!readable(fd), "nothing came yet");
                assert!(av.asked(), "trywait left no waker");
                av.answer();
                assert!(readable(fd), "the wakeup made the descriptor readable");
                assert_eq!(eq.read(0).unwrap().data, 9);
                eq.trywait().unwrap();
                assert!(!readable(fd));
            }
            sink.detach_av(id);
            eq.close().unwrap();
        }
    }

    /// A reader that ran progress at intervals because an AV could not wake the queue (its
    /// NIC's admin queue held by another thread's command, say) may have taken the wakeup that
    /// another reader, asleep, was counting on. When it returns, the one asleep runs progress
    /// and asks again (or polls in its turn), and so sees the insert finish.
    #[test]
    fn a_polling_reader_that_returns_leaves_the_sleeping_one_to_progress() {
        for round in 0..3 {
            let eq = EventQueue::open(WAITABLE).unwrap();
            let av = FakeInsert::new(&eq, true, true);
            let id = eq
                .attach_av(Arc::downgrade(&av) as Weak<dyn AvProgress>)
                .unwrap();
            // One reader asleep until the AV wakes the queue.
            let sleeper = {
                let eq = eq.clone();
                std::thread::spawn(move || eq.sread(Some(Duration::from_secs(10)), 0))
            };
            let start = Instant::now();
            while !av.asked() {
                assert!(start.elapsed() < Duration::from_secs(10), "never asked");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(20));
            // Another, here, whose progress finds the AV unable to wake the queue: it polls
            // until its timeout.
            av.contended.store(true, Ordering::Release);
            let e = eq.sread(Some(Duration::from_millis(50)), 0).unwrap_err();
            assert_eq!(e.errno, FiErrno::FI_EAGAIN);
            // The NIC answers; nothing was asked to wake the queue since.
            av.contended.store(false, Ordering::Release);
            av.answer();
            let start = Instant::now();
            while !sleeper.is_finished() && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(
                sleeper.is_finished(),
                "round {round}: the sleeping reader was left asleep with the insert answered"
            );
            let got = sleeper.join().unwrap().map(|e| e.data);
            assert_eq!(got.map_err(|e| e.errno), Ok(9), "round {round}");
            eq.detach_av(id);
            eq.close().unwrap();
        }
    }

    /// A bind that lands between a reader's first progress (no AV yet) and its wait is not
    /// missed: the reader, blocked without a timeout, progresses the new AV and returns.
    #[test]
    fn sread_sees_a_bind_that_races_its_first_progress() {
        use std::sync::atomic::AtomicBool;
        use std::sync::mpsc;
        struct PostOnce {
            eq: EventQueue,
            done: AtomicBool,
        }
        impl AvProgress for PostOnce {
            fn progress(&self) -> usize {
                if self.done.swap(true, Ordering::AcqRel) {
                    return 0;
                }
                let _ = self.eq.post(ev(1));
                1
            }
        }
        let mut missed = 0;
        for round in 0..4000u32 {
            let eq = EventQueue::open(WAITABLE).unwrap();
            let reader = eq.clone();
            let (tx, rx) = mpsc::channel();
            let started = Arc::new(AtomicBool::new(false));
            let go = started.clone();
            let t = std::thread::spawn(move || {
                go.store(true, Ordering::Release);
                let _ = tx.send(reader.sread(None, 0).is_ok());
            });
            while !started.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            // Bind at varying points of the reader's way into its wait.
            for _ in 0..(round % 64) * 8 {
                std::hint::spin_loop();
            }
            let hook = Arc::new(PostOnce {
                eq: eq.clone(),
                done: AtomicBool::new(false),
            });
            let id = eq
                .attach_av(Arc::downgrade(&hook) as Weak<dyn AvProgress>)
                .unwrap();
            if rx.recv_timeout(Duration::from_secs(2)).is_err() {
                missed += 1;
                eq.signal();
            }
            t.join().unwrap();
            eq.detach_av(id);
        }
        assert_eq!(
            missed, 0,
            "sread blocked for ever after a bind it did not see"
        );
    }
}
