//! `fi_eq_open` and `struct fi_ops_eq`: a [`uet_driver::EventQueue`] behind libfabric's
//! `fid_eq`, where `FI_EVENT` AVs bound with `fi_av_bind` report their inserts.
//!
//! * `fi_eq_read`, `fi_eq_sread`: the event code and a `struct fi_eq_entry`, or for the
//!   connection events (`FI_CONNREQ`, `FI_CONNECTED`, `FI_SHUTDOWN`) a `struct
//!   fi_eq_cm_entry` followed by the connection's data, as much of it as the buffer holds
//!   (fi_eq(3)); the return value is the bytes written. A buffer smaller than the entry is
//!   `-FI_ETOOSMALL` and the event stays queued. `fi_eq_sread`'s timeout is in milliseconds,
//!   negative for none; a thread waiting in it when another closes the queue (`fi_close`)
//!   returns `-FI_EBADF`, and one a signal delivered to it interrupts (a POSIX signal whose
//!   handler returns: fi_eq(3)'s thread "signaled by some external source") returns
//!   `-FI_EAGAIN` once a last look finds nothing, as `fi_cq_sread` does.
//! * `FI_CONNREQ`: `fid` is the passive endpoint, `info` an `fi_info` the provider allocates
//!   (the application frees it with `fi_freeinfo`) whose `handle` is the request
//!   ([`crate::pep`]); a request already answered, or whose listener was closed, is not
//!   reported. A request that finds the queue full is refused (its requester gets
//!   `FI_ECONNREFUSED`) instead of overrunning the queue. The queue holds two entries past
//!   its size for each `FI_EP_MSG` endpoint bound to it, once enabled (their connection's
//!   outcome and its end), which requests never take: a burst of requests that fills it
//!   does not make those events overrun it. `FI_CONNECTED` and `FI_SHUTDOWN`
//!   name the endpoint, `info` NULL.
//! * `fi_eq_readerr`: a `struct fi_eq_err_entry`; `err` is the fabric errno (positive). A
//!   connection refused (`FI_ECONNREFUSED`) carries the listener's `fi_reject` param as its
//!   error data (fi_cm(3)), empty when there was none; any other error its message. The
//!   error data is copied into the application's `err_data` buffer when it gives one
//!   (`err_data_size` in: the buffer's size; out: the bytes written, the message truncated to
//!   fit), as libfabric 1.5 and later define. Without a buffer (`err_data_size` 0), or on a
//!   fabric opened with an API before 1.5, `err_data` points to the queue's own copy of the
//!   message, NUL-terminated, valid until the next `fi_eq_readerr` (`err_data_size`: its
//!   length).
//! * `fi_eq_write`: an application's own event, on a queue opened with `FI_WRITE` (else
//!   `-FI_EOPNOTSUPP`), in the entry fi_eq(3) gives its code: `FI_CONNREQ`, `FI_CONNECTED` and
//!   `FI_SHUTDOWN` a `struct fi_eq_cm_entry` followed by its connection data (`len` at least
//!   the entry: its data is the bytes after it), any other event (`FI_NOTIFY`,
//!   `FI_MR_COMPLETE`, `FI_AV_COMPLETE`, `FI_JOIN_COMPLETE`) a `struct fi_eq_entry` (`len`
//!   exactly the entry). A read gives it back as written: its `fid`, its `info` pointer
//!   (neither copied nor freed by the provider: the application's), its data. Another length
//!   (a connection event's above `isize::MAX` among them: no buffer is that long), or a code
//!   that is no event, is `-FI_EINVAL`. libfabric 1.17 defines no flag for
//!   `fi_eq_write` (an application cannot write an error entry): flags are `-FI_EBADFLAGS`.
//! * `fi_eq_attr.flags`: `FI_WRITE`, and `FI_AFFINITY`, whose `signaling_vector` is the hint
//!   fi_eq(3) lets a provider without interrupt affinity ignore; any other flag is
//!   `-FI_EBADFLAGS`.
//! * `fi_eq_strerror`: the provider's description of a `prov_errno` (the NIC's status codes).
//! * Wait objects: `FI_WAIT_NONE` (the default: `fi_eq_sread` is `-FI_EINVAL`),
//!   `FI_WAIT_UNSPEC`, `FI_WAIT_MUTEX_COND`, `FI_WAIT_YIELD` and `FI_WAIT_FD`; wait sets and
//!   `FI_WAIT_POLLFD` are `-FI_ENOSYS`, and a value that is no `enum fi_wait_obj` is
//!   `-FI_EINVAL`, as for a CQ or counter. `fi_control(FI_GETWAITOBJ)` gives the queue's wait
//!   object (`-FI_ENODATA` for `FI_WAIT_NONE`).
//! * `FI_WAIT_MUTEX_COND`: `fi_control(FI_GETWAIT)` writes the queue's `struct
//!   fi_mutex_cond` (a pthread mutex and condition it owns) at `arg`. The condition is
//!   broadcast, under the mutex, whenever the descriptor of an `FI_WAIT_FD` queue would
//!   become readable (below), by a thread of the queue's own (started by the first `FI_GETWAIT`), so that no thread posting to
//!   the queue waits for the application's mutex. The application reads the queue and
//!   calls `fi_trywait` under the mutex, and sleeps on the condition when `fi_trywait` gives
//!   0, as on a descriptor. `fi_close` destroys both.
//! * `FI_WAIT_FD`: `fi_control(FI_GETWAIT)` gives the queue's descriptor (an eventfd it owns;
//!   `-FI_ENODATA` on a queue of another wait object), usable in select, poll and epoll. It
//!   polls readable while an event or error waits to be read, whichever thread posted it (a
//!   connection's progress thread, an AV's inserts, `fi_eq_write`), and stops being readable
//!   when a read empties the queue. `fi_trywait(fabric, fids, count)` takes the queue beside
//!   `FI_WAIT_FD` CQs and counters: `-FI_EAGAIN` while an event waits, and while an
//!   `FI_EVENT` AV's insert is in flight on a NIC without the admin completion interrupt
//!   (interface 1.15; its event is posted when the queue is read, so the application reads
//!   rather than sleeps); 0 when the application may sleep. An insert queued from another
//!   thread, and the NIC's answer to one in flight (the admin interrupt), make the
//!   descriptor readable until the next `fi_trywait`, so a thread asleep on it comes back to
//!   read. `fi_eq_sread` waits as on the other wait objects, and wakes as the descriptor
//!   does. `fi_close` closes the descriptor.
//!
//! An AV's events name it by the `fid_av` pointer the application holds: the queue learns
//! it when the AV is bound (`fi_av_bind`); a passive endpoint's when it listens, an
//! `FI_EP_MSG` endpoint's when it is enabled (an `EqLink`). When either closes, the events of
//! it the queue still holds are dropped.

use crate::abi::*;
use crate::fabric::{fabric_ref, FabricSeat};
use crate::pep::PepCore;
use crate::wait::{CondWait, WaitHandle};
use crate::{entry, null, object_ref, ssize, strerror, unsupported, OwnedErrData};
use core::ffi::{c_char, c_int, c_void};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use uet_av::{AvEventSink, FiErrno, FiError};
use uet_driver::eq::{EqBinding, FI_PEEK};
use uet_driver::{EqAttr, EqEvent, EqEventKind, EventQueue, WaitObj};

/// What a queue knows of the objects bound to it, by their fabric ids: the `fid` pointers
/// its events name, and the passive endpoints whose `FI_CONNREQ` events it turns into
/// `fi_info`s.
#[derive(Default)]
pub(crate) struct Names {
    fids: HashMap<u64, usize>,
    listeners: HashMap<u64, Weak<PepCore>>,
}

/// A passive or `FI_EP_MSG` endpoint's binding to a queue (`fi_pep_bind`, `fi_ep_bind`): the
/// queue cannot close while it stands, and through it the endpoint names itself to the
/// queue once the NIC has made it.
pub(crate) struct EqLink {
    queue: EventQueue,
    names: Arc<Mutex<Names>>,
    /// The queue's readers' lock ([`UetEq::reading`]).
    reading: Arc<Mutex<()>>,
    _binding: EqBinding,
}

impl EqLink {
    /// The driver's queue.
    pub(crate) fn queue(&self) -> &EventQueue {
        &self.queue
    }

    /// The queue's readers' lock: held, no read looks at an event (see [`UetEq::reading`]).
    pub(crate) fn reads(&self) -> Arc<Mutex<()>> {
        Arc::clone(&self.reading)
    }

    /// Events of `id` name `fid`; an `FI_CONNREQ` of `id` is a request to `listener`.
    pub(crate) fn name(&self, id: u64, fid: *mut Fid, listener: Option<Weak<PepCore>>) {
        let mut n = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        n.fids.insert(id, fid as usize);
        if let Some(l) = listener {
            n.listeners.insert(id, l);
        }
    }

    /// The object `id` is closed (nothing posts for it any more): its events still queued
    /// are dropped, and its name forgotten. Not during a read, which looks at an event and
    /// then takes the queue's first: had the event gone in between, it would take another
    /// object's in its place, and report one whose object has no name any more. The caller
    /// holds no lock a read takes (a passive endpoint's).
    pub(crate) fn forget(&self, id: u64) {
        let _reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        let dropped = self.queue.discard(id);
        if dropped > 0 {
            tracing::debug!(id, dropped, "events of a closed endpoint dropped");
        }
        let mut n = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        n.fids.remove(&id);
        n.listeners.remove(&id);
    }
}

/// An event queue: libfabric's `fid_eq` first, then the driver's queue and the `fid`
/// pointers of the objects bound to it, by their fabric ids.
#[repr(C)]
pub struct UetEq {
    fid: FidEq,
    eq: EventQueue,
    /// Shared with the `fi_eq_sread`s under way, which a close must not free.
    fids: Arc<Mutex<Names>>,
    /// Held by a read from the look at its event to the take: a read that finds the buffer
    /// too small leaves the event queued, and the event it took is the one it looked at. Held
    /// by an error read from the take until the entry names its object.
    reading: Arc<Mutex<()>>,
    /// The fabric's API version: before 1.5, `err_data` is always the queue's own.
    api_version: u32,
    /// The `err_data` `fi_eq_readerr` hands out when the application gives no buffer.
    err_data: OwnedErrData,
    /// The wait object it was opened with (`fi_control(FI_GETWAITOBJ)`).
    wait_obj: c_int,
    /// `FI_WAIT_MUTEX_COND`: the mutex and condition the application sleeps on.
    cond_wait: Option<CondWait>,
    /// Counts the queue in its fabric until `fi_close` frees it, and names the fabric
    /// (`fi_trywait` takes the queue on that fabric only).
    fabric: FabricSeat,
}

impl UetEq {
    /// The sink an AV bound to the queue posts to. Its events carry the AV's `fid` pointer
    /// where others carry their object's fabric id (see the provider's AV), so the queue
    /// keeps no name for it.
    pub(crate) fn av_sink(&self) -> std::sync::Arc<dyn AvEventSink> {
        self.eq.av_sink()
    }

    /// Bind a passive or `FI_EP_MSG` endpoint to the queue.
    pub(crate) fn link(&self) -> Result<EqLink, FiError> {
        Ok(EqLink {
            _binding: self.eq.bind()?,
            queue: self.eq.clone(),
            names: Arc::clone(&self.fids),
            reading: Arc::clone(&self.reading),
        })
    }

    /// The `fid` pointer of an event's object: see [`fid_of`].
    fn fid_of(&self, id: u64) -> *mut Fid {
        fid_of(&self.fids, id)
    }

    /// Whether the application may sleep on its wait object after `fi_trywait`: opened with
    /// `FI_WAIT_FD` (and not closed), or with `FI_WAIT_MUTEX_COND`.
    pub(crate) fn has_native_wait(&self) -> bool {
        self.eq.wait_fd().is_some() || self.cond_wait.is_some()
    }

    /// Whether it was opened on `fabric` (`fi_trywait` takes it there only).
    pub(crate) fn of_fabric(&self, fabric: &crate::fabric::Fabric) -> bool {
        fabric.seats(&self.fabric)
    }

    /// `fi_trywait` of this queue ([`EventQueue::trywait`]).
    pub(crate) fn trywait(&self) -> Result<(), FiError> {
        self.eq.trywait()
    }
}

/// The `fid` pointer of an event's object in `fids`: the bound endpoint's, or (an event the
/// application wrote, or an AV's, which carries its `fid` pointer) the pointer the event
/// carries.
fn fid_of(names: &Mutex<Names>, id: u64) -> *mut Fid {
    let n = names.lock().unwrap_or_else(PoisonError::into_inner);
    n.fids.get(&id).copied().unwrap_or(id as usize) as *mut Fid
}

static EQ_FID_OPS: FiOps = unsupported::fid_ops(eq_close, unsupported::bind, eq_control);

static EQ_OPS: FiOpsEq = FiOpsEq {
    size: core::mem::size_of::<FiOpsEq>(),
    read: eq_read,
    readerr: eq_readerr,
    write: eq_write,
    sread: eq_sread,
    strerror: eq_strerror,
};

/// The provider's queue behind a `fid` pointer (a `fid_eq`'s, or the `fid` an application
/// passes to `fi_av_bind`). `FI_EINVAL` for NULL or another object.
///
/// # Safety
/// `fid` is NULL or a live libfabric object.
pub(crate) unsafe fn eq_ref<'a>(fid: *mut Fid, call: &str) -> Result<&'a UetEq, FiError> {
    // SAFETY: the caller's promise.
    unsafe { object_ref(fid, FI_CLASS_EQ, &EQ_FID_OPS, call, "event queue") }
}

/// `fi_eq_open`. `FI_AFFINITY` is accepted and its vector ignored (fi_eq(3) makes it a hint).
pub(crate) unsafe extern "C" fn fabric_eq_open(
    fabric: *mut FidFabric,
    attr: *mut FiEqAttr,
    eq: *mut *mut FidEq,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_eq_open";
    entry(CALL, || {
        // SAFETY: the application's fabric pointer, ours.
        let f = unsafe { fabric_ref(fabric) }?;
        if eq.is_null() {
            return Err(null(CALL, "eq"));
        }
        // SAFETY: NULL or valid (libfabric's contract).
        let a = unsafe { attr.as_ref() }.ok_or_else(|| null(CALL, "attr"))?;
        let wait_obj = match a.wait_obj {
            FI_WAIT_NONE => WaitObj::None,
            FI_WAIT_UNSPEC => WaitObj::Unspec,
            FI_WAIT_MUTEX_COND => WaitObj::MutexCond,
            FI_WAIT_YIELD => WaitObj::Yield,
            FI_WAIT_FD => WaitObj::Fd,
            other => return Err(crate::wait::unserved(CALL, "queues", other)),
        };
        let queue = EventQueue::open(EqAttr {
            size: a.size,
            flags: crate::without_affinity(CALL, a.flags, a.signaling_vector),
            wait_obj,
        })?;
        let cond_wait = match wait_obj {
            WaitObj::MutexCond => {
                let wait = CondWait::new(CALL, "uet-eq-cond", None)?;
                queue.on_change(wait.hook());
                Some(wait)
            }
            _ => None,
        };
        let boxed = Box::new(UetEq {
            fid: FidEq {
                fid: Fid {
                    fclass: FI_CLASS_EQ,
                    context,
                    ops: core::ptr::addr_of!(EQ_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(EQ_OPS).cast_mut(),
            },
            eq: queue,
            fids: Arc::new(Mutex::new(Names::default())),
            reading: Arc::new(Mutex::new(())),
            api_version: f.api_version(),
            err_data: OwnedErrData::default(),
            wait_obj: a.wait_obj,
            cond_wait,
            fabric: f.seat(),
        });
        // SAFETY: `eq` is non-NULL and writable (libfabric's contract).
        unsafe { *eq = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

/// `fi_control` of a queue: `FI_GETWAIT` (an `FI_WAIT_FD` queue's descriptor, into the `int`
/// at `arg`; an `FI_WAIT_MUTEX_COND` queue's `struct fi_mutex_cond`, into the one at `arg`)
/// and `FI_GETWAITOBJ` (the queue's `enum fi_wait_obj`), as a CQ answers them
/// ([`crate::cq`]): `-FI_ENODATA` for a wait object the queue does not have, `-FI_ENOSYS`
/// for other commands.
unsafe extern "C" fn eq_control(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int {
    const CALL: &str = "fi_control(eq)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let q = unsafe { eq_ref(fid, CALL) }?;
        let waitable = q.wait_obj != FI_WAIT_NONE;
        let handle = match &q.cond_wait {
            Some(w) => Some(WaitHandle::MutexCond(w)),
            None => q.eq.wait_fd().map(WaitHandle::Fd),
        };
        // SAFETY: `arg` as libfabric passes it.
        unsafe { crate::wait::control(CALL, "queue", q.wait_obj, waitable, handle, command, arg) }
    })
}

/// `fi_close` of a queue: `-FI_EBUSY` while objects are bound to it. A thread waiting in
/// `fi_eq_sread` wakes with `-FI_EBADF`, on the queue it holds of its own. An `FI_WAIT_FD`
/// queue's descriptor is closed.
unsafe extern "C" fn eq_close(fid: *mut Fid) -> c_int {
    const CALL: &str = "fi_close(eq)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let q = unsafe { eq_ref(fid, CALL) }?;
        q.eq.clone().close()?;
        // SAFETY: made by `Box::into_raw` in `fabric_eq_open`; the application gives it up
        // with this call, and the queue is closed.
        drop(unsafe { Box::from_raw(fid.cast::<UetEq>()) });
        Ok(0)
    })
}

/// Whether `kind` is a connection event, written as a `struct fi_eq_cm_entry`.
fn is_cm(kind: EqEventKind) -> bool {
    matches!(
        kind,
        EqEventKind::ConnReq | EqEventKind::Connected | EqEventKind::Shutdown
    )
}

/// The bytes of the entry an event of `kind` is written as (before any connection data).
fn entry_size(kind: EqEventKind) -> usize {
    if is_cm(kind) {
        core::mem::size_of::<FiEqCmEntry>()
    } else {
        core::mem::size_of::<FiEqEntry>()
    }
}

/// Write `ev` as the event code and its entry, its object's `fid` found in `names`; a
/// connection event's `info` is `info`, and its data follows the entry, cut to the buffer.
/// Returns the bytes written.
///
/// # Safety
/// `event` is valid for a write of a `u32`, `buf` for `len` bytes, and `len` is at least
/// [`entry_size`] of the event.
unsafe fn put_event(
    names: &Mutex<Names>,
    ev: &EqEvent,
    info: *mut FiInfo,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
) -> usize {
    let fid = fid_of(names, ev.fid);
    // An event the application wrote carries its own `info` as its context; the provider's
    // connection events have none (0).
    let info = if info.is_null() {
        ev.context as usize as *mut FiInfo
    } else {
        info
    };
    // SAFETY: the caller's promise; the buffer may be unaligned.
    unsafe { event.write_unaligned(ev.kind as u32) };
    if !is_cm(ev.kind) {
        let entry = FiEqEntry {
            fid,
            context: ev.context as usize as *mut c_void,
            data: ev.data,
        };
        // SAFETY: the caller's promise: `len` holds the entry.
        unsafe { buf.cast::<FiEqEntry>().write_unaligned(entry) };
        return core::mem::size_of::<FiEqEntry>();
    }
    let head = core::mem::size_of::<FiEqCmEntry>();
    let n = ev.cm_data.len().min(len - head);
    // SAFETY: the caller's promise: `len` bytes, the entry and then `n` of them.
    unsafe {
        buf.cast::<FiEqCmEntry>()
            .write_unaligned(FiEqCmEntry { fid, info });
        core::ptr::copy_nonoverlapping(ev.cm_data.as_ptr(), buf.cast::<u8>().add(head), n);
    }
    head + n
}

/// Check the arguments of a read: `FI_EINVAL` for NULL, `FI_ETOOSMALL` for a buffer that
/// holds no entry of any event.
fn check_read_args(
    call: &str,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
) -> Result<(), FiError> {
    if event.is_null() {
        return Err(null(call, "event"));
    }
    if buf.is_null() {
        return Err(null(call, "buf"));
    }
    if len < core::mem::size_of::<FiEqCmEntry>() {
        return Err(too_small(
            call,
            len,
            "struct fi_eq_cm_entry",
            core::mem::size_of::<FiEqCmEntry>(),
        ));
    }
    Ok(())
}

fn too_small(call: &str, len: usize, what: &str, size: usize) -> FiError {
    FiError::new(
        FiErrno::FI_ETOOSMALL,
        format!("{call}: len {len} is less than a {what} ({size} bytes)"),
    )
}

/// What a read works on: the queue, its names, and the lock readers take.
struct Reader {
    queue: EventQueue,
    names: Arc<Mutex<Names>>,
    reading: Arc<Mutex<()>>,
}

impl Reader {
    fn of(q: &UetEq) -> Reader {
        Reader {
            queue: q.eq.clone(),
            names: Arc::clone(&q.fids),
            reading: Arc::clone(&q.reading),
        }
    }

    /// Read the next event into the application's buffer without blocking: the event is
    /// looked at, then taken only once it is written (and kept, `FI_PEEK`). A buffer too
    /// small for its entry is `FI_ETOOSMALL`, the event left queued. An `FI_CONNREQ` gets its
    /// `fi_info` ([`crate::pep::connreq_info`]); one whose request is gone (answered, or its
    /// listener closed) is taken and not reported.
    ///
    /// # Safety
    /// `event` is valid for a write of a `u32`, `buf` for `len` bytes.
    unsafe fn read(
        &self,
        call: &str,
        event: *mut u32,
        buf: *mut c_void,
        len: usize,
        flags: u64,
    ) -> Result<usize, FiError> {
        let _reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let ev = self.queue.read(flags | FI_PEEK)?;
            let need = entry_size(ev.kind);
            if len < need {
                let what = if is_cm(ev.kind) {
                    "struct fi_eq_cm_entry"
                } else {
                    "struct fi_eq_entry"
                };
                return Err(too_small(call, len, what, need));
            }
            let mut info = core::ptr::null_mut();
            if ev.kind == EqEventKind::ConnReq {
                let listener = self
                    .names
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .listeners
                    .get(&ev.fid)
                    .cloned();
                // An FI_CONNREQ the application wrote has no listener of ours: as written.
                if let Some(listener) = listener {
                    match crate::pep::connreq_info(&listener, &ev)? {
                        Some(i) => info = i,
                        None => {
                            self.queue.read(0)?;
                            continue;
                        }
                    }
                }
            }
            if flags & FI_PEEK == 0 {
                if let Err(e) = self.queue.read(0) {
                    // SAFETY: ours, not handed out.
                    unsafe { crate::info::free_info(info) };
                    return Err(e);
                }
            }
            // SAFETY: the caller's promise; `len` holds the entry (checked above).
            return Ok(unsafe { put_event(&self.names, &ev, info, event, buf, len) });
        }
    }
}

/// `fi_eq_read`.
unsafe extern "C" fn eq_read(
    eq: *mut FidEq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    const CALL: &str = "fi_eq_read";
    ssize(CALL, || {
        // SAFETY: the application's queue pointer.
        let q = unsafe { eq_ref(eq.cast(), CALL) }?;
        check_read_args(CALL, event, buf, len)?;
        // SAFETY: checked non-NULL (libfabric's contract: valid for `len` bytes).
        unsafe { Reader::of(q).read(CALL, event, buf, len, flags) }
    })
}

/// `fi_eq_sread`.
unsafe extern "C" fn eq_sread(
    eq: *mut FidEq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    const CALL: &str = "fi_eq_sread";
    ssize(CALL, || {
        // SAFETY: the application's queue pointer.
        let q = unsafe { eq_ref(eq.cast(), CALL) }?;
        check_read_args(CALL, event, buf, len)?;
        // The wait holds the queue and the fid map of its own: a close in another thread
        // frees `q`, and wakes the wait, which returns FI_EBADF without touching it.
        let reader = Reader::of(q);
        let deadline = u64::try_from(timeout)
            .ok()
            .map(|ms| std::time::Instant::now() + Duration::from_millis(ms));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            // Wait for an event, then read it as fi_eq_read does; another reader may have
            // taken it meanwhile (FI_EAGAIN), and the wait starts again.
            reader.queue.sread(left, flags | FI_PEEK)?;
            // SAFETY: as in `eq_read`.
            match unsafe { reader.read(CALL, event, buf, len, flags) } {
                Err(e) if e.errno == FiErrno::FI_EAGAIN => {
                    if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                        return Err(e);
                    }
                }
                done => return done,
            }
        }
    })
}

/// `fi_eq_readerr`.
unsafe extern "C" fn eq_readerr(eq: *mut FidEq, buf: *mut FiEqErrEntry, flags: u64) -> isize {
    const CALL: &str = "fi_eq_readerr";
    ssize(CALL, || {
        // SAFETY: the application's queue pointer.
        let q = unsafe { eq_ref(eq.cast(), CALL) }?;
        // SAFETY: NULL or a valid entry (libfabric's contract).
        let out = unsafe { buf.as_mut() }.ok_or_else(|| null(CALL, "buf"))?;
        if flags != 0 {
            return Err(FiError::badflags(format!(
                "{CALL}: unsupported flags {flags:#x}"
            )));
        }
        // Held until the entry names its object: a close of the object in another thread
        // forgets its name only between reads (see [`EqLink::forget`]), so the error, once
        // taken, is reported with its object's `fid` and not the provider's number for it.
        let _reading = q.reading.lock().unwrap_or_else(PoisonError::into_inner);
        let e = q.eq.readerr()?;
        // A refused connection's error data is the listener's reject param (fi_cm(3)).
        let data = if e.err == FiErrno::FI_ECONNREFUSED {
            tracing::debug!(call = CALL, "{}", e.err_data);
            e.cm_data.as_slice()
        } else {
            e.err_data.as_bytes()
        };
        // SAFETY: `err_data` is NULL or the application's buffer of `err_data_size` bytes
        // (libfabric's contract).
        let (err_data, err_data_size) = unsafe {
            q.err_data
                .give(q.api_version, data, out.err_data, out.err_data_size)
        };
        *out = FiEqErrEntry {
            fid: q.fid_of(e.fid),
            context: e.context as usize as *mut c_void,
            data: e.data,
            err: c_int::try_from(e.err.get()).unwrap_or(c_int::MAX),
            prov_errno: e.prov_errno,
            err_data,
            err_data_size,
        };
        Ok(core::mem::size_of::<FiEqErrEntry>())
    })
}

/// `fi_eq_write`.
unsafe extern "C" fn eq_write(
    eq: *mut FidEq,
    event: u32,
    buf: *const c_void,
    len: usize,
    flags: u64,
) -> isize {
    const CALL: &str = "fi_eq_write";
    ssize(CALL, || {
        // SAFETY: the application's queue pointer.
        let q = unsafe { eq_ref(eq.cast(), CALL) }?;
        if flags != 0 {
            return Err(FiError::badflags(format!(
                "{CALL}: unsupported flags {flags:#x}"
            )));
        }
        if buf.is_null() {
            return Err(null(CALL, "buf"));
        }
        let kind = EqEventKind::from_u32(event)
            .ok_or_else(|| FiError::inval(format!("{CALL}: event {event} is no EQ event")))?;
        let ev = if is_cm(kind) {
            let head = core::mem::size_of::<FiEqCmEntry>();
            if len < head {
                return Err(FiError::inval(format!(
                    "{CALL}: len {len}: a connection event is a struct fi_eq_cm_entry \
                     ({head} bytes) and its data"
                )));
            }
            if len > isize::MAX as usize {
                return Err(FiError::inval(format!(
                    "{CALL}: len {len}: no buffer of that many bytes can exist"
                )));
            }
            // SAFETY: non-NULL and `len` bytes long (libfabric's contract: readable), of
            // which the entry is the first `head`.
            let (entry, data) = unsafe {
                (
                    buf.cast::<FiEqCmEntry>().read_unaligned(),
                    core::slice::from_raw_parts(buf.cast::<u8>().add(head), len - head),
                )
            };
            EqEvent {
                kind,
                fid: entry.fid as usize as u64,
                context: entry.info as usize as u64,
                data: 0,
                cm_data: data.to_vec(),
            }
        } else {
            if len != core::mem::size_of::<FiEqEntry>() {
                return Err(FiError::inval(format!(
                    "{CALL}: len {len}: event {event} is a struct fi_eq_entry ({} bytes)",
                    core::mem::size_of::<FiEqEntry>()
                )));
            }
            // SAFETY: non-NULL and an entry long (libfabric's contract: readable).
            let entry = unsafe { buf.cast::<FiEqEntry>().read_unaligned() };
            EqEvent {
                kind,
                fid: entry.fid as usize as u64,
                context: entry.context as usize as u64,
                data: entry.data,
                cm_data: Vec::new(),
            }
        };
        q.eq.write(ev)?;
        Ok(len)
    })
}

/// `fi_eq_strerror`: a description of `prov_errno`, copied into `buf` when it is given.
unsafe extern "C" fn eq_strerror(
    _eq: *mut FidEq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: `buf` is NULL or holds `len` bytes (libfabric's contract).
    unsafe {
        strerror(
            c"uet provider error: the NIC's status code; err_data holds the message",
            "NIC status",
            prov_errno,
            buf,
            len,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use uet_driver::EqErrEntry;

    /// A queue as `fi_eq_open` makes it, without a fabric.
    fn open(api_version: u32) -> Box<UetEq> {
        Box::new(UetEq {
            fid: FidEq {
                fid: Fid {
                    fclass: FI_CLASS_EQ,
                    context: core::ptr::null_mut(),
                    ops: core::ptr::addr_of!(EQ_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(EQ_OPS).cast_mut(),
            },
            eq: EventQueue::open(EqAttr::default()).unwrap(),
            fids: Arc::new(Mutex::new(Names::default())),
            reading: Arc::new(Mutex::new(())),
            api_version,
            err_data: OwnedErrData::default(),
            wait_obj: FI_WAIT_NONE,
            cond_wait: None,
            fabric: FabricSeat::in_count(&Arc::default()),
        })
    }

    /// An error read while its object is closed in another thread (its events dropped, its
    /// name forgotten) either finds the error gone or names the object by its `fid`: never
    /// by the provider's own number for it, which is no pointer of the application's.
    #[test]
    fn an_error_read_while_its_object_closes_names_the_object_or_is_gone() {
        let mut q = open(fi_version(1, 17));
        let link = q.link().unwrap();
        let named: usize = 0x5000;
        let id = uet_av::next_fid();
        let eq: *mut FidEq = &mut q.fid;
        let eq = eq as usize;
        let mut bogus = 0;
        for round in 0..20_000u32 {
            link.name(id, named as *mut Fid, None);
            q.eq.post_error(EqErrEntry {
                fid: id,
                context: 0,
                data: 0,
                err: FiErrno::FI_EIO,
                prov_errno: 0,
                err_data: "refused".into(),
                cm_data: Vec::new(),
            })
            .unwrap();
            let go = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    for _ in 0..(round % 32) * 4 {
                        std::hint::spin_loop();
                    }
                    link.forget(id);
                });
                // SAFETY: a plain-data structure.
                let mut e: FiEqErrEntry = unsafe { core::mem::zeroed() };
                go.store(true, Ordering::Release);
                // SAFETY: an open queue; a valid entry, no error-data buffer.
                let ret = unsafe { eq_readerr(eq as *mut FidEq, &mut e, 0) };
                if ret > 0 && e.fid as usize != named {
                    bogus += 1;
                }
            });
            // What the close left behind.
            while q.eq.readerr().is_ok() {}
        }
        assert_eq!(
            bogus, 0,
            "errors named an object by no pointer of the application's"
        );
        drop(link);
        q.eq.clone().close().unwrap();
    }
}
