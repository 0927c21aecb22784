//! `fi_av_open` and `struct fi_ops_av`: the C calls on a [`uet_driver::Av`] (or, opened with a
//! name, a [`uet_driver::SharedAv`]), whose entries live in the NIC's AV table.
//!
//! The C arguments become the Rust API's, and nothing more: the man-page semantics (lowest
//! free index, `FI_ADDR_NOTAVAIL` in a failed address's slot, `FI_SYNC_ERR` statuses, `FI_MORE`
//! batching, user ids, symmetric ranges, errnos) are [`uet_av::AddressVector`]'s. What is
//! checked here is what C adds: NULL pointers where an array is needed (`-FI_EINVAL`), counts
//! whose arrays could not exist in memory (`-FI_EINVAL`), strings that are not UTF-8 (an
//! address that fails alone, as a malformed one does). An insert refused for these ends as
//! one the AV refuses does: without `FI_MORE`, it ends the `FI_MORE` batch before it.
//!
//! * Binary AVs take and return 32-byte UET addresses; `FI_ADDR_STR` AVs take `count` C
//!   strings (`addr` is a `char **`), and `fi_av_lookup` returns the NUL-terminated string.
//! * `FI_SYNC_ERR`: `context` is the `int` status array, one per address. On an `FI_EVENT` AV
//!   the context is the events' and never read as an array: the flag is `-FI_EBADFLAGS`
//!   there, whatever the context.
//! * `FI_AV_USER_ID` is libfabric 1.17's: the insert flag gives each address the user id in
//!   its `fi_addr` slot. The 1.17 ABI has no `fi_av_set_user_id`, so `fi_av_open` refuses
//!   the flag later versions pair with it (`-FI_EBADFLAGS`): such an AV could not be given a
//!   user id.
//! * `FI_EVENT`: `fi_av_bind` to a queue of [`crate::eq`]; an insert's `context` is its
//!   events' context, and their `fid` the application's `fid_av`. An insert's `fi_addr`
//!   array is kept until its `FI_AV_COMPLETE` is posted (fi_av(3) has the application keep it
//!   valid until then): an address that fails after the call returned (the NIC refused or did
//!   not take its AV_WRITE, or `fi_close` cancelled its `FI_MORE` batch) finds
//!   `FI_ADDR_NOTAVAIL` in its slot when its error entry is posted, as fi_av(3) says of
//!   "a failed or aborted insertion" in both modes.
//! * Every AV call takes the AV's lock: the domain is `FI_THREAD_SAFE`.

use crate::abi::*;
use crate::domain::domain_ref;
use crate::info::{c_str, served_av_type};
use crate::{entry, null, object_ref, unsupported};
use core::ffi::{c_char, c_int, c_void, CStr};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use uet_av::{
    av_type_from_c, rx_ctx_bits_from_c, AddrFormat, AvAttr, AvName, AvType, FiError, ADDR_LEN,
    FI_ADDR_NOTAVAIL, FI_AV_USER_ID, FI_EVENT, FI_SYNC_ERR,
};
use uet_av::{AddressVector, AvEvent, AvEventSink, AvProgress};
use uet_driver::av::NicAv;
use uet_driver::{Av, SharedAv};

/// The AV of an `fid_av`: the process's own, or one shared by name.
enum AvKind {
    Own(Box<Av>),
    Shared(Box<SharedAv>),
}

/// Run `$e` with `$a` bound to the AV, whichever kind it is.
macro_rules! with_av {
    ($kind:expr, $a:ident => $e:expr) => {
        match $kind {
            AvKind::Own($a) => $e,
            AvKind::Shared($a) => $e,
        }
    };
}

/// The `fi_addr` arrays of an `FI_EVENT` AV's insert calls whose `FI_AV_COMPLETE` is not
/// posted yet, oldest first (calls complete in call order).
type OutArrays = Arc<Mutex<VecDeque<OutCall>>>;

/// One insert call's `fi_addr` array, kept for its events.
struct OutCall {
    /// The array's address, 0 for a call without one.
    out: usize,
    /// Its entries.
    count: usize,
    /// The call has not returned: the insert holds the array as a Rust slice, so nothing else
    /// may write it, and the call's events wait in `held` until it returns.
    running: bool,
    /// Events of the call posted while it ran, and the queue each was for.
    held: Vec<(Arc<dyn AvEventSink>, AvEvent)>,
}

impl OutCall {
    /// Apply `event` to the call's array: an error entry's address slot says
    /// `FI_ADDR_NOTAVAIL`. Only for a call that has returned.
    fn rewrite(&self, event: &AvEvent) {
        let AvEvent::InsertError { position, .. } = event else {
            return;
        };
        match usize::try_from(*position) {
            Ok(at) if self.out != 0 && at < self.count && !self.running => {
                // SAFETY: `out` is the `fi_addr` array of `count` entries of a call that has
                // returned (nothing of ours holds it) and whose completion is not posted yet:
                // fi_av(3) has the application keep it valid until then.
                unsafe { (self.out as *mut FiAddr).add(at).write(FI_ADDR_NOTAVAIL) };
            }
            _ => {}
        }
    }
}

/// Post `event` of the call at the front of `calls` to `queue`, after applying it to the
/// call's array; `FI_AV_COMPLETE` lets the call go.
fn post_for_front(
    queue: &dyn AvEventSink,
    calls: &mut VecDeque<OutCall>,
    event: AvEvent,
) -> Result<(), FiError> {
    if let Some(front) = calls.front() {
        front.rewrite(&event);
    }
    if matches!(event, AvEvent::InsertComplete { .. }) {
        calls.pop_front();
    }
    queue.post_av_event(event)
}

/// The event queue an `FI_EVENT` AV posts to, seen through the AV's [`OutArrays`]: an error
/// entry sets its address's `fi_addr` slot to `FI_ADDR_NOTAVAIL`, and `FI_AV_COMPLETE` lets
/// the call's array go. The events of a call that has not returned are held until it does
/// ([`UetAv::insert_call`]), so that its array is written only once the insert no longer
/// holds it, and before the events that tell of it can be read.
///
/// It also names the AV in each event by its `fid` pointer, which the queue reports as the
/// event's `fid` as it does the pointer of an event the application wrote: the queue needs
/// no table of the AVs bound to it, which would keep an entry of every AV ever bound, and
/// an event read after the AV closed still names it as the application knew it.
struct OutRewriter {
    queue: Arc<dyn AvEventSink>,
    calls: OutArrays,
    /// The AV's `fid` pointer.
    fid: u64,
}

impl AvEventSink for OutRewriter {
    fn post_av_event(&self, mut event: AvEvent) -> Result<(), FiError> {
        match &mut event {
            AvEvent::InsertComplete { av, .. } | AvEvent::InsertError { av, .. } => {
                *av = self.fid;
            }
        }
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        match calls.front_mut() {
            Some(front) if front.running => {
                front.held.push((Arc::clone(&self.queue), event));
                Ok(())
            }
            _ => post_for_front(&*self.queue, &mut calls, event),
        }
    }

    fn attach_av(&self, progress: Weak<dyn AvProgress>) -> Result<u64, FiError> {
        self.queue.attach_av(progress)
    }

    fn detach_av(&self, attachment: u64) {
        self.queue.detach_av(attachment)
    }

    fn inserts_queued(&self) {
        self.queue.inserts_queued()
    }
}

/// An AV: libfabric's `fid_av` first, then the AV (`None` once closed), its address format
/// and how many AV sets of it are open.
#[repr(C)]
pub struct UetAv {
    fid: FidAv,
    av: Mutex<Option<AvKind>>,
    addr_format: AddrFormat,
    /// The `fi_addr` arrays of inserts not completed (`FI_EVENT`).
    outs: OutArrays,
    pub(crate) sets: AtomicUsize,
    /// Endpoints bound to the AV (`fi_close` is `FI_EBUSY` while any are).
    pub(crate) eps: AtomicUsize,
}

static AV_FID_OPS: FiOps = unsupported::fid_ops(av_close, av_bind, unsupported::control);

static AV_OPS: FiOpsAv = FiOpsAv {
    size: core::mem::size_of::<FiOpsAv>(),
    insert: av_insert,
    insertsvc: av_insertsvc,
    insertsym: av_insertsym,
    remove: av_remove,
    lookup: av_lookup,
    straddr: av_straddr,
    av_set: crate::av_set::av_set_open,
};

/// The provider's AV behind a `fid_av` pointer. `FI_EINVAL` for NULL or another object
/// (another provider's AV among them).
///
/// # Safety
/// `av` is NULL or a live libfabric object.
pub(crate) unsafe fn av_ref<'a>(av: *mut FidAv, call: &str) -> Result<&'a UetAv, FiError> {
    // SAFETY: the caller's promise (an AV an application passes to `fi_ep_bind` may be
    // another provider's: `object_ref` reads only its `struct fid` then).
    unsafe { object_ref(av.cast(), FI_CLASS_AV, &AV_FID_OPS, call, "AV") }
}

impl UetAv {
    /// Run `f` on the AV's table and mirror, locked (an endpoint's creation on it; a named
    /// AV's is this process's mirror of it as of its last catch-up).
    pub(crate) fn with_table<R>(
        &self,
        call: &str,
        f: impl FnOnce(&AddressVector<NicAv>) -> Result<R, FiError>,
    ) -> Result<R, FiError> {
        self.with_mirror(call, false, f)
    }

    /// Run `f` on the AV's table as the AV holds it now, locked: a named AV's mirror first
    /// catches up with what the AV's other handles did (as `fi_av_lookup` does), and a
    /// catch-up that fails is the call's error. AV sets read their AV through this.
    pub(crate) fn with_current_table<R>(
        &self,
        call: &str,
        f: impl FnOnce(&AddressVector<NicAv>) -> Result<R, FiError>,
    ) -> Result<R, FiError> {
        self.with_mirror(call, true, f)
    }

    /// [`UetAv::with_table`], a named AV's mirror caught up first when `catch_up`.
    fn with_mirror<R>(
        &self,
        call: &str,
        catch_up: bool,
        f: impl FnOnce(&AddressVector<NicAv>) -> Result<R, FiError>,
    ) -> Result<R, FiError> {
        self.with_kind(call, |kind| match kind {
            AvKind::Own(av) => f(av),
            AvKind::Shared(av) => {
                if catch_up {
                    av.sync().map_err(|e| e.within(call))?;
                }
                f(&av.av())
            }
        })
    }

    /// Run `f` on the AV (the process's own, or its handle on a named one), locked.
    /// `FI_EINVAL` once closed.
    fn with_kind<R>(
        &self,
        call: &str,
        f: impl FnOnce(&mut AvKind) -> Result<R, FiError>,
    ) -> Result<R, FiError> {
        let mut guard = self.av.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.as_mut() {
            Some(kind) => f(kind),
            None => Err(FiError::inval(format!("{call}: the AV is closed"))),
        }
    }

    /// Run the insert `f` on the AV, locked; `f` learns whether the AV was opened with
    /// `FI_EVENT` (then the C `context` is the events' context, never a status array). On an
    /// `FI_EVENT` AV, `out` (the call's `fi_addr` array of `count` entries, or NULL) is kept
    /// for the call's events until its `FI_AV_COMPLETE` ([`OutRewriter`]); a call refused
    /// posts no event and keeps nothing.
    fn insert_call(
        &self,
        call: &str,
        out: *mut FiAddr,
        count: usize,
        f: impl FnOnce(&mut AvKind, bool) -> Result<usize, FiError>,
    ) -> Result<usize, FiError> {
        self.with_kind(call, |kind| {
            // A named AV's own attributes: its process mirror's leave FI_EVENT to it.
            let flags = match kind {
                AvKind::Own(av) => av.attr().flags,
                AvKind::Shared(av) => av.attr().flags,
            };
            if flags & FI_EVENT == 0 {
                return f(kind, false);
            }
            let outs = || self.outs.lock().unwrap_or_else(PoisonError::into_inner);
            // Before the call: its events may be posted before it returns. Calls are made
            // under the AV's lock, so this one's entry is the last until it returns.
            outs().push_back(OutCall {
                out: out as usize,
                count,
                running: true,
                held: Vec::new(),
            });
            // A call that panics posts nothing either: its array must not stay the one the
            // next call's events are written to.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(kind, true)));
            let mut calls = outs();
            if !matches!(r, Ok(Ok(_))) {
                calls.pop_back();
            } else if let Some(call) = calls.back_mut() {
                // Returned: the array is the application's again. Its events held meanwhile
                // (the call is then at the front: calls complete in order) go out now.
                call.running = false;
                let held = std::mem::take(&mut call.held);
                for (queue, event) in held {
                    if let Err(e) = post_for_front(&*queue, &mut calls, event) {
                        tracing::warn!(error = %e, "AV event lost");
                    }
                }
            }
            drop(calls);
            r.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// An insert call refused for a C argument before the AV saw it: the AV ends it as a call
    /// it refused itself (one without `FI_MORE` ends the `FI_MORE` batch before it). Always an
    /// error.
    fn refuse_insert(&self, call: &str, flags: u64, error: FiError) -> Result<usize, FiError> {
        self.with_kind(
            call,
            |kind| with_av!(kind, av => av.refuse_insert(flags, error)),
        )
    }

    fn lock(&self, call: &str) -> Result<MutexGuard<'_, Option<AvKind>>, FiError> {
        let guard = self.av.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            return Err(FiError::inval(format!("{call}: the AV is closed")));
        }
        Ok(guard)
    }
}

/// `count` elements of `T` at `p` as a slice, `None` when `p` is NULL. `FI_EINVAL` when `p`
/// is NULL and `count` is not 0, or when `count` elements could not exist in memory.
///
/// # Safety
/// `p` is NULL or points to `count` initialized, writable elements, not otherwise referenced
/// for `'a`.
unsafe fn c_array<'a, T>(
    p: *mut T,
    count: usize,
    call: &str,
    what: &str,
) -> Result<Option<&'a mut [T]>, FiError> {
    if count
        .checked_mul(core::mem::size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(FiError::inval(format!(
            "{call}: {count} elements of {what} do not fit in memory"
        )));
    }
    if p.is_null() {
        if count == 0 {
            return Ok(Some(&mut []));
        }
        return Ok(None);
    }
    // SAFETY: non-NULL, `count` valid elements (the caller's promise), size checked above.
    Ok(Some(unsafe { core::slice::from_raw_parts_mut(p, count) }))
}

/// As [`c_array`], with NULL an error.
///
/// # Safety
/// As [`c_array`].
unsafe fn c_array_needed<'a, T>(
    p: *mut T,
    count: usize,
    call: &str,
    what: &str,
) -> Result<&'a mut [T], FiError> {
    // SAFETY: the caller's promise.
    unsafe { c_array(p, count, call, what) }?.ok_or_else(|| null(call, what))
}

/// `count` elements of `T` at `p`, read only: an input array of the application's, which may
/// lie in read-only memory. `FI_EINVAL` for NULL with a count, or a count that could not
/// exist in memory.
///
/// # Safety
/// `p` is NULL or points to `count` initialized elements that stay unchanged for `'a`.
pub(crate) unsafe fn c_slice_needed<'a, T>(
    p: *const T,
    count: usize,
    call: &str,
    what: &str,
) -> Result<&'a [T], FiError> {
    if count
        .checked_mul(core::mem::size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(FiError::inval(format!(
            "{call}: {count} elements of {what} do not fit in memory"
        )));
    }
    if count == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null(call, what));
    }
    // SAFETY: non-NULL, `count` valid elements (the caller's promise), size checked above.
    Ok(unsafe { core::slice::from_raw_parts(p, count) })
}

/// The `FI_SYNC_ERR` status array in `context`, when `flags` asks for it on a synchronous AV.
/// On an `FI_EVENT` AV (`event`) the context is the events' and never an array: none, and the
/// AV refuses `FI_SYNC_ERR` (`FI_EBADFLAGS`).
///
/// # Safety
/// With `FI_SYNC_ERR` on a synchronous AV, `context` is NULL or an array of `count` `int`s.
unsafe fn status_array<'a>(
    flags: u64,
    event: bool,
    context: *mut c_void,
    count: usize,
    call: &str,
) -> Result<Option<&'a mut [i32]>, FiError> {
    if flags & FI_SYNC_ERR == 0 || event {
        return Ok(None);
    }
    // SAFETY: the caller's promise.
    unsafe {
        c_array_needed(
            context.cast::<i32>(),
            count,
            call,
            "the FI_SYNC_ERR status array (context)",
        )
    }
    .map(Some)
}

/// A count of inserted addresses as the C return value.
fn inserted(n: usize) -> Result<c_int, FiError> {
    c_int::try_from(n).map_err(|_| FiError::inval(format!("{n} insertions overflow an int")))
}

/// `fi_av_open`.
pub(crate) unsafe extern "C" fn domain_av_open(
    domain: *mut FidDomain,
    attr: *mut FiAvAttr,
    av: *mut *mut FidAv,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_av_open";
    entry(CALL, || {
        // SAFETY: libfabric passes the application's domain pointer, ours.
        let d = unsafe { domain_ref(domain, CALL) }?;
        if av.is_null() {
            return Err(null(CALL, "av"));
        }
        // SAFETY: NULL or valid (libfabric's contract).
        let c = unsafe { attr.as_mut() }.ok_or_else(|| null(CALL, "attr"))?;
        if c.flags & FI_AV_USER_ID != 0 {
            return Err(FiError::badflags(
                "fi_av_open: flags FI_AV_USER_ID: such an AV takes its user ids from \
                 fi_av_set_user_id, which libfabric 1.17's ABI does not have; fi_av_insert's \
                 FI_AV_USER_ID flag gives them",
            ));
        }
        // SAFETY: NULL or a NUL-terminated string (libfabric's contract).
        let name = unsafe { c_str(c.name, "fi_av_attr.name") }?
            .map(AvName::new)
            .transpose()?;
        let rust = AvAttr {
            av_type: served_av_type(av_type_from_c(c.av_type)?),
            count: c.count,
            rx_ctx_bits: rx_ctx_bits_from_c(c.rx_ctx_bits)?,
            ep_per_node: c.ep_per_node,
            name,
            map_addr: c.map_addr as u64,
            flags: c.flags,
            ..AvAttr::default()
        };
        let guard = d.lock()?;
        let dom = guard
            .as_ref()
            .ok_or_else(|| FiError::inval("fi_av_open: the domain is closed"))?;
        let kind = if rust.name.is_some() {
            // fi_av(3): "If name is non-NULL and map_addr is 0, then the map_addr used by the
            // provider will be returned": 0, the base of the AV's fi_addr_t values in every
            // process, whatever each gave. A map_addr given stays as it is.
            AvKind::Shared(Box::new(dom.open_named_av(rust)?))
        } else {
            AvKind::Own(Box::new(dom.open_av(rust)?))
        };
        // fi_av(3), FI_AV_UNSPEC: "The AV type used will be returned through the type field
        // in fi_av_attr". A type the application named stays as it gave it (FI_AV_MAP is
        // served as a table, see `served_av_type`).
        if c.av_type == AvType::Unspec.to_raw() {
            c.av_type = match &kind {
                AvKind::Own(av) => av.av_type(),
                AvKind::Shared(av) => av.av().av_type(),
            }
            .to_raw();
        }
        let boxed = Box::new(UetAv {
            fid: FidAv {
                fid: Fid {
                    fclass: FI_CLASS_AV,
                    context,
                    ops: core::ptr::addr_of!(AV_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(AV_OPS).cast_mut(),
            },
            av: Mutex::new(Some(kind)),
            addr_format: dom.attr().addr_format,
            outs: OutArrays::default(),
            sets: AtomicUsize::new(0),
            eps: AtomicUsize::new(0),
        });
        // SAFETY: `av` is non-NULL and writable (libfabric's contract).
        unsafe { *av = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

/// `fi_av_bind`: bind the AV to an event queue of this provider (an `FI_EVENT` AV reports its
/// inserts there). `FI_EINVAL` for anything but a uet EQ; the AV's own errors otherwise
/// ([`uet_av::AddressVector::bind`]).
unsafe extern "C" fn av_bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    const CALL: &str = "fi_av_bind";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let a = unsafe { av_ref(fid.cast(), CALL) }?;
        // SAFETY: NULL or a live object (libfabric's contract).
        let q = unsafe { crate::eq::eq_ref(bfid, CALL) }?;
        let through = || -> Arc<dyn AvEventSink> {
            Arc::new(OutRewriter {
                queue: q.av_sink(),
                calls: Arc::clone(&a.outs),
                fid: fid as u64,
            })
        };
        a.with_kind(CALL, |kind| match kind {
            AvKind::Own(av) => av.bind(through(), flags),
            AvKind::Shared(av) => av.bind(through(), flags),
        })?;
        Ok(0)
    })
}

/// `fi_close` of an AV: `-FI_EBUSY` while endpoints use it or AV sets of it are open (the AV
/// stays open).
unsafe extern "C" fn av_close(fid: *mut Fid) -> c_int {
    const CALL: &str = "fi_close(av)";
    entry(CALL, || {
        // SAFETY: libfabric calls this through the fid's own ops, so `fid` is one of ours.
        let a = unsafe { av_ref(fid.cast(), CALL) }?;
        {
            let mut guard = a.lock(CALL)?;
            // Under the AV's lock, which a new set takes to count itself.
            let sets = a.sets.load(Ordering::Acquire);
            if sets > 0 {
                return Err(FiError::new(
                    uet_av::FiErrno::FI_EBUSY,
                    format!("{CALL}: {sets} AV set(s) of the AV are open"),
                ));
            }
            let eps = a.eps.load(Ordering::Acquire);
            if eps > 0 {
                return Err(FiError::new(
                    uet_av::FiErrno::FI_EBUSY,
                    format!("{CALL}: {eps} endpoint(s) are bound to the AV"),
                ));
            }
            match guard.take() {
                Some(AvKind::Own(av)) => {
                    if let Err(e) = av.close() {
                        *guard = Some(AvKind::Own(e.av));
                        return Err(e.error);
                    }
                }
                Some(AvKind::Shared(av)) => {
                    if let Err(e) = av.close() {
                        *guard = Some(AvKind::Shared(e.av));
                        return Err(e.error);
                    }
                }
                None => {}
            }
        }
        // SAFETY: made by `Box::into_raw` in `domain_av_open`; the application gives it up
        // with this call, and the AV inside is closed.
        drop(unsafe { Box::from_raw(fid.cast::<UetAv>()) });
        Ok(0)
    })
}

/// The strings of an `FI_ADDR_STR` insert: a NULL entry or one that is not UTF-8 becomes the
/// empty string, which fails alone as a malformed address does.
///
/// # Safety
/// `addr` is an array of `count` pointers, each NULL or a NUL-terminated string.
unsafe fn c_strings<'a>(addr: *const c_void, count: usize) -> Result<Vec<&'a str>, FiError> {
    const CALL: &str = "fi_av_insert";
    // SAFETY: the caller's promise; only read.
    let ptrs = unsafe { c_slice_needed(addr.cast::<*const c_char>(), count, CALL, "addr") }?;
    Ok(ptrs
        .iter()
        .map(|&p| {
            // SAFETY: NULL or a NUL-terminated string (the caller's promise).
            unsafe { c_str(p, "an FI_ADDR_STR address") }
                .ok()
                .flatten()
                .unwrap_or("")
        })
        .collect())
}

/// `fi_av_insert`.
unsafe extern "C" fn av_insert(
    av: *mut FidAv,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut FiAddr,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_av_insert";
    entry(CALL, || {
        // SAFETY: the application's AV pointer, ours.
        let a = unsafe { av_ref(av, CALL) }?;
        let out = fi_addr;
        // The C arguments, read before the AV sees the call: a refusal ends the call as the
        // AV's own refusals do.
        // SAFETY: libfabric's contract: `fi_addr` NULL or `count` entries; `addr` `count`
        // addresses of ADDR_LEN bytes, or on an FI_ADDR_STR AV `count` C strings; only read.
        let args = || unsafe {
            inserted(count)?;
            let fi_addr = c_array(fi_addr, count, CALL, "fi_addr")?;
            let input = match a.addr_format {
                AddrFormat::Uet => {
                    let bytes = count.saturating_mul(ADDR_LEN);
                    Input::Binary(c_slice_needed(addr.cast::<u8>(), bytes, CALL, "addr")?)
                }
                AddrFormat::Str => Input::Strings(c_strings(addr, count)?),
            };
            Ok((fi_addr, input))
        };
        let (fi_addr, input) = match args() {
            Ok(args) => args,
            Err(e) => return a.refuse_insert(CALL, flags, e).and_then(inserted),
        };
        let context_value = context as u64;
        let n = a.insert_call(CALL, out, count, |kind, event| {
            // SAFETY: libfabric's contract: with FI_SYNC_ERR on a synchronous AV, `context`
            // is NULL or `count` ints.
            let status = match unsafe { status_array(flags, event, context, count, CALL) } {
                Ok(status) => status,
                Err(e) => return with_av!(kind, av => av.refuse_insert(flags, e)),
            };
            with_av!(kind, av => {
                let av = av.with_context(context_value);
                match &input {
                    Input::Binary(addr) => av.insert_with_status(addr, count, fi_addr, flags, status),
                    Input::Strings(strings) => av.insert_str(strings, fi_addr, flags, status),
                }
            })
        })?;
        inserted(n)
    })
}

/// The addresses of an `fi_av_insert` call, as its AV's format has them.
enum Input<'a> {
    /// `count` addresses of [`ADDR_LEN`] bytes.
    Binary(&'a [u8]),
    /// `count` strings (`FI_ADDR_STR`).
    Strings(Vec<&'a str>),
}

/// `fi_av_insertsvc`.
unsafe extern "C" fn av_insertsvc(
    av: *mut FidAv,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut FiAddr,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_av_insertsvc";
    entry(CALL, || {
        // SAFETY: the application's AV pointer, ours.
        let a = unsafe { av_ref(av, CALL) }?;
        // SAFETY: NULL or NUL-terminated strings (libfabric's contract).
        let strings = unsafe { (c_str(node, "node"), c_str(service, "service")) };
        let (node, service) = match strings {
            (Ok(Some(node)), Ok(service)) => (node, service),
            (Err(e), _) | (_, Err(e)) => return a.refuse_insert(CALL, flags, e).and_then(inserted),
            (Ok(None), _) => {
                return a
                    .refuse_insert(CALL, flags, null(CALL, "node"))
                    .and_then(inserted)
            }
        };
        let out = fi_addr;
        // SAFETY: NULL or one fi_addr_t.
        let fi_addr = unsafe { fi_addr.as_mut() };
        let n = a.insert_call(CALL, out, 1, |kind, event| {
            // SAFETY: with FI_SYNC_ERR on a synchronous AV, the status array of one int.
            let status = match unsafe { status_array(flags, event, context, 1, CALL) } {
                Ok(status) => status.and_then(|s| s.first_mut()),
                Err(e) => return with_av!(kind, av => av.refuse_insert(flags, e)),
            };
            with_av!(kind, av => av
                .with_context(context as u64)
                .insertsvc(node, service, fi_addr, flags, status))
        })?;
        inserted(n)
    })
}

/// `fi_av_insertsym`.
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn av_insertsym(
    av: *mut FidAv,
    node: *const c_char,
    nodecnt: usize,
    service: *const c_char,
    svccnt: usize,
    fi_addr: *mut FiAddr,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_av_insertsym";
    entry(CALL, || {
        // SAFETY: the application's AV pointer, ours.
        let a = unsafe { av_ref(av, CALL) }?;
        // The C arguments, read before the AV sees the call: a refusal ends the call as the
        // AV's own refusals do.
        // SAFETY: NULL or NUL-terminated strings, `fi_addr` NULL or nodecnt × svccnt entries
        // (libfabric's contract).
        let args = || unsafe {
            let count = nodecnt.checked_mul(svccnt).ok_or_else(|| {
                FiError::inval(format!(
                    "{CALL}: nodecnt {nodecnt} × svccnt {svccnt} overflows"
                ))
            })?;
            inserted(count)?;
            let (node, service) = (c_str(node, "node")?, c_str(service, "service")?);
            let node = node.ok_or_else(|| null(CALL, "node"))?;
            let service = service.ok_or_else(|| null(CALL, "service"))?;
            let fi_addr = c_array(fi_addr, count, CALL, "fi_addr")?;
            Ok((count, node, service, fi_addr))
        };
        let (count, node, service, slots) = match args() {
            Ok(args) => args,
            Err(e) => return a.refuse_insert(CALL, flags, e).and_then(inserted),
        };
        let out = fi_addr;
        let fi_addr = slots;
        let n = a.insert_call(CALL, out, count, |kind, event| {
            // SAFETY: with FI_SYNC_ERR on a synchronous AV, the status array of `count` ints.
            let status = match unsafe { status_array(flags, event, context, count, CALL) } {
                Ok(status) => status,
                Err(e) => return with_av!(kind, av => av.refuse_insert(flags, e)),
            };
            with_av!(kind, av => av
                .with_context(context as u64)
                .insertsym(node, nodecnt, service, svccnt, fi_addr, flags, status))
        })?;
        inserted(n)
    })
}

/// `fi_av_remove`.
unsafe extern "C" fn av_remove(
    av: *mut FidAv,
    fi_addr: *mut FiAddr,
    count: usize,
    flags: u64,
) -> c_int {
    const CALL: &str = "fi_av_remove";
    entry(CALL, || {
        // SAFETY: the application's AV pointer, ours.
        let a = unsafe { av_ref(av, CALL) }?;
        // SAFETY: `count` entries (libfabric's contract); only read.
        let fi_addrs = unsafe { c_slice_needed(fi_addr.cast_const(), count, CALL, "fi_addr") }?;
        a.with_kind(
            CALL,
            |kind| with_av!(kind, av => av.remove(fi_addrs, flags)),
        )?;
        Ok(0)
    })
}

/// `fi_av_lookup`: `*addrlen` in, the address's full size out; a NULL `addr` with it asks for
/// the size alone.
unsafe extern "C" fn av_lookup(
    av: *mut FidAv,
    fi_addr: FiAddr,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    const CALL: &str = "fi_av_lookup";
    entry(CALL, || {
        // SAFETY: the application's AV pointer, ours.
        let a = unsafe { av_ref(av, CALL) }?;
        // SAFETY: NULL or valid (libfabric's contract).
        let addrlen = unsafe { addrlen.as_mut() }.ok_or_else(|| null(CALL, "addrlen"))?;
        // SAFETY: `addr` NULL or `*addrlen` writable bytes (libfabric's contract).
        let buf = unsafe { c_array(addr.cast::<u8>(), *addrlen, CALL, "addr") }?.unwrap_or(&mut []);
        a.with_kind(
            CALL,
            |kind| with_av!(kind, av => av.lookup(fi_addr, buf, addrlen)),
        )?;
        Ok(0)
    })
}

/// `fi_av_straddr`: `buf`, or NULL when an argument is (with `len` NULL nothing is written).
unsafe extern "C" fn av_straddr(
    av: *mut FidAv,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    const CALL: &str = "fi_av_straddr";
    let ok = entry(CALL, || {
        // SAFETY: the application's AV pointer, ours.
        let a = unsafe { av_ref(av, CALL) }?;
        // SAFETY: NULL or valid (libfabric's contract).
        let len = unsafe { len.as_mut() }.ok_or_else(|| null(CALL, "len"))?;
        if addr.is_null() {
            return Err(null(CALL, "addr"));
        }
        let addr: &[u8] = match a.addr_format {
            // SAFETY: a binary AV's address is ADDR_LEN bytes (libfabric's contract).
            AddrFormat::Uet => unsafe { core::slice::from_raw_parts(addr.cast::<u8>(), ADDR_LEN) },
            // SAFETY: an FI_ADDR_STR address is a NUL-terminated string.
            AddrFormat::Str => unsafe { CStr::from_ptr(addr.cast()) }.to_bytes(),
        };
        // SAFETY: `buf` NULL or `*len` writable bytes (libfabric's contract).
        let out = unsafe { c_array(buf.cast::<u8>(), *len, CALL, "buf") }?.unwrap_or(&mut []);
        a.with_kind(CALL, |kind| {
            with_av!(kind, av => av.straddr(addr, out, len));
            Ok(())
        })?;
        Ok(0)
    });
    if ok == 0 {
        buf
    } else {
        core::ptr::null()
    }
}
