//! `fi_eq_open` and `struct fi_ops_eq`: a [`uet_driver::EventQueue`] behind libfabric's
//! `fid_eq`, where `FI_EVENT` AVs bound with `fi_av_bind` report their inserts.
//!
//! * `fi_eq_read`, `fi_eq_sread`: the event code and a `struct fi_eq_entry`; the return value
//!   is the entry's size. A buffer smaller than the entry is `-FI_ETOOSMALL` and the event
//!   stays queued. `fi_eq_sread`'s timeout is in milliseconds, negative for none; a thread
//!   waiting in it when another closes the queue (`fi_close`) returns `-FI_EBADF`.
//! * `fi_eq_readerr`: a `struct fi_eq_err_entry`; `err` is the fabric errno (positive). The
//!   error's message is copied into the application's `err_data` buffer when it gives one
//!   (`err_data_size` in: the buffer's size; out: the bytes written, the message truncated to
//!   fit), as libfabric 1.5 and later define. Without a buffer (`err_data_size` 0), or on a
//!   fabric opened with an API before 1.5, `err_data` points to the queue's own copy of the
//!   message, NUL-terminated, valid until the next `fi_eq_readerr` (`err_data_size`: its
//!   length).
//! * `fi_eq_write`: an application's own `struct fi_eq_entry`, on a queue opened with
//!   `FI_WRITE`.
//! * `fi_eq_strerror`: the provider's description of a `prov_errno` (the NIC's status codes).
//! * Wait objects: `FI_WAIT_NONE` (the default: `fi_eq_sread` is `-FI_EINVAL`),
//!   `FI_WAIT_UNSPEC`, `FI_WAIT_MUTEX_COND` and `FI_WAIT_YIELD`; `FI_WAIT_FD`, wait sets and
//!   `FI_WAIT_POLLFD` are `-FI_ENOSYS`.
//!
//! An AV's events name it by the `fid_av` pointer the application holds: the queue learns
//! it when the AV is bound (`fi_av_bind`).

use crate::abi::*;
use crate::fabric::fabric_ref;
use crate::{entry, null, object_ref, ssize, strerror, unsupported, OwnedErrData};
use core::ffi::{c_char, c_int, c_void};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use uet_av::{AvEventSink, FiErrno, FiError};
use uet_driver::{EqAttr, EqEvent, EqEventKind, EventQueue, WaitObj};

/// An event queue: libfabric's `fid_eq` first, then the driver's queue and the `fid`
/// pointers of the objects bound to it, by their fabric ids.
#[repr(C)]
pub struct UetEq {
    fid: FidEq,
    eq: EventQueue,
    /// Shared with the `fi_eq_sread`s under way, which a close must not free.
    fids: Arc<Mutex<HashMap<u64, usize>>>,
    /// The fabric's API version: before 1.5, `err_data` is always the queue's own.
    api_version: u32,
    /// The `err_data` `fi_eq_readerr` hands out when the application gives no buffer.
    err_data: OwnedErrData,
}

impl UetEq {
    /// The driver's queue.
    pub(crate) fn queue(&self) -> &EventQueue {
        &self.eq
    }

    /// Bind an AV to the queue: its events will name `fid`. Returns the sink to pass to the
    /// AV's `bind`.
    pub(crate) fn bind_av(&self, av_id: u64, fid: *mut Fid) -> std::sync::Arc<dyn AvEventSink> {
        self.fids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(av_id, fid as usize);
        self.eq.av_sink()
    }

    /// The `fid` pointer of an event's object: see [`fid_of`].
    fn fid_of(&self, id: u64) -> *mut Fid {
        fid_of(&self.fids, id)
    }
}

/// The `fid` pointer of an event's object in `fids`: the bound object's, or (an event the
/// application wrote) the pointer it gave.
fn fid_of(fids: &Mutex<HashMap<u64, usize>>, id: u64) -> *mut Fid {
    let fids = fids.lock().unwrap_or_else(PoisonError::into_inner);
    fids.get(&id).copied().unwrap_or(id as usize) as *mut Fid
}

static EQ_FID_OPS: FiOps = unsupported::fid_ops(eq_close, unsupported::bind, unsupported::control);

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

/// `fi_eq_open`.
pub(crate) unsafe extern "C" fn fabric_eq_open(
    fabric: *mut FidFabric,
    attr: *mut FiEqAttr,
    eq: *mut *mut FidEq,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_eq_open";
    entry(CALL, || {
        // SAFETY: the application's fabric pointer, ours.
        let api_version = unsafe { fabric_ref(fabric) }?.api_version();
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
            other => {
                return Err(FiError::new(
                    FiErrno::FI_ENOSYS,
                    format!(
                        "{CALL}: wait_obj {other}: the uet provider's queues wait on a mutex \
                         and condition variable (FI_WAIT_UNSPEC, FI_WAIT_MUTEX_COND) or by \
                         yielding (FI_WAIT_YIELD)"
                    ),
                ))
            }
        };
        let queue = EventQueue::open(EqAttr {
            size: a.size,
            flags: a.flags,
            wait_obj,
        })?;
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
            fids: Arc::new(Mutex::new(HashMap::new())),
            api_version,
            err_data: OwnedErrData::default(),
        });
        // SAFETY: `eq` is non-NULL and writable (libfabric's contract).
        unsafe { *eq = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

/// `fi_close` of a queue: `-FI_EBUSY` while objects are bound to it. A thread waiting in
/// `fi_eq_sread` wakes with `-FI_EBADF`, on the queue it holds of its own.
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

/// Write `ev` as the event code and a `struct fi_eq_entry`, its object's `fid` found in
/// `fids`.
///
/// # Safety
/// `event` and `buf` are valid for writes of a `u32` and an `FiEqEntry`.
unsafe fn put_event(
    fids: &Mutex<HashMap<u64, usize>>,
    ev: &EqEvent,
    event: *mut u32,
    buf: *mut c_void,
) -> usize {
    let entry = FiEqEntry {
        fid: fid_of(fids, ev.fid),
        context: ev.context as usize as *mut c_void,
        data: ev.data,
    };
    // SAFETY: the caller's promise; the buffer may be unaligned.
    unsafe {
        event.write_unaligned(ev.kind as u32);
        buf.cast::<FiEqEntry>().write_unaligned(entry);
    }
    core::mem::size_of::<FiEqEntry>()
}

/// Check the arguments of a read: `FI_EINVAL` for NULL, `FI_ETOOSMALL` for a short buffer.
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
    if len < core::mem::size_of::<FiEqEntry>() {
        return Err(FiError::new(
            FiErrno::FI_ETOOSMALL,
            format!(
                "{call}: len {len} is less than a struct fi_eq_entry ({} bytes)",
                core::mem::size_of::<FiEqEntry>()
            ),
        ));
    }
    Ok(())
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
        let ev = q.eq.read(flags)?;
        // SAFETY: checked non-NULL and at least an entry long (libfabric's contract: valid).
        Ok(unsafe { put_event(&q.fids, &ev, event, buf) })
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
        let (queue, fids) = (q.eq.clone(), Arc::clone(&q.fids));
        let timeout = u64::try_from(timeout).ok().map(Duration::from_millis);
        let ev = queue.sread(timeout, flags)?;
        // SAFETY: as in `eq_read`.
        Ok(unsafe { put_event(&fids, &ev, event, buf) })
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
        let e = q.eq.readerr()?;
        // SAFETY: `err_data` is NULL or the application's buffer of `err_data_size` bytes
        // (libfabric's contract).
        let (err_data, err_data_size) = unsafe {
            q.err_data
                .give(q.api_version, &e.err_data, out.err_data, out.err_data_size)
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
        if len != core::mem::size_of::<FiEqEntry>() {
            return Err(FiError::inval(format!(
                "{CALL}: len {len} is not a struct fi_eq_entry ({} bytes)",
                core::mem::size_of::<FiEqEntry>()
            )));
        }
        let kind = EqEventKind::from_u32(event)
            .ok_or_else(|| FiError::inval(format!("{CALL}: event {event} is no EQ event")))?;
        // SAFETY: non-NULL and an entry long (libfabric's contract: readable).
        let entry = unsafe { buf.cast::<FiEqEntry>().read_unaligned() };
        q.eq.write(EqEvent {
            kind,
            fid: entry.fid as usize as u64,
            context: entry.context as usize as u64,
            data: entry.data,
            cm_data: Vec::new(),
        })?;
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
