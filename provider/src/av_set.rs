//! `fi_av_set` and `struct fi_ops_av_set`: an [`uet_av::AvSet`] of an AV's addresses behind
//! libfabric's `fid_av_set`, with fi_av_set(3)'s order rules (union appends in the source's
//! order, intersect and diff keep the destination's, remove keeps the others') and errnos.
//!
//! A set reads its AV for `fi_av_set`, `fi_av_set_insert` and `fi_av_set_addr`, so the AV
//! stays open while a set of it is (`fi_close` of the AV is `-FI_EBUSY`). It reads the AV as
//! the AV is at the call: a named AV's mirror first catches up with what its other handles
//! did, as for `fi_av_lookup`. Locks are taken AV
//! first, then sets in address order, so two threads combining the same two sets in opposite
//! directions cannot deadlock; a set combined with itself is locked once.

use crate::abi::*;
use crate::av::{av_ref, UetAv};
use crate::{entry, null, object_ref, unsupported};
use core::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError};
use uet_av::{AvSet, AvSetAttr, FiError};

/// An AV set: libfabric's `fid_av_set` first, then the set and its AV.
#[repr(C)]
pub struct UetAvSet {
    fid: FidAvSet,
    set: Mutex<AvSet>,
    /// The set's AV, open while the set is (it counts the set in `sets`).
    av: *const UetAv,
}

impl UetAvSet {
    fn lock(&self) -> MutexGuard<'_, AvSet> {
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn av(&self) -> &UetAv {
        // SAFETY: the AV cannot close while this set is open (it counts the set), and the
        // set is open while `self` is borrowed.
        unsafe { &*self.av }
    }
}

static AV_SET_FID_OPS: FiOps =
    unsupported::fid_ops(av_set_close, unsupported::bind, unsupported::control);

static AV_SET_OPS: FiOpsAvSet = FiOpsAvSet {
    size: core::mem::size_of::<FiOpsAvSet>(),
    set_union: av_set_union,
    intersect: av_set_intersect,
    diff: av_set_diff,
    insert: av_set_insert,
    remove: av_set_remove,
    addr: av_set_addr,
};

/// The provider's set behind a `fid_av_set` pointer. `FI_EINVAL` for NULL or another object.
///
/// # Safety
/// `set` is NULL or a live libfabric object.
unsafe fn set_ref<'a>(set: *const FidAvSet, call: &str) -> Result<&'a UetAvSet, FiError> {
    // SAFETY: the caller's promise.
    unsafe { object_ref(set.cast(), FI_CLASS_AV_SET, &AV_SET_FID_OPS, call, "AV set") }
}

/// `fi_av_set`.
pub(crate) unsafe extern "C" fn av_set_open(
    av: *mut FidAv,
    attr: *mut FiAvSetAttr,
    set: *mut *mut FidAvSet,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_av_set";
    entry(CALL, || {
        // SAFETY: the application's AV pointer.
        let a = unsafe { av_ref(av, CALL) }?;
        if set.is_null() {
            return Err(null(CALL, "set"));
        }
        // SAFETY: NULL or valid (libfabric's contract).
        let c = unsafe { attr.as_ref() }.ok_or_else(|| null(CALL, "attr"))?;
        let comm_key = match (c.comm_key_size, c.comm_key.is_null()) {
            (0, _) => Vec::new(),
            (_, true) => return Err(null(CALL, "comm_key (with a comm_key_size)")),
            (n, false) if n > isize::MAX as usize => {
                return Err(FiError::inval(format!("{CALL}: comm_key_size {n}")))
            }
            // SAFETY: `comm_key` holds `comm_key_size` bytes (libfabric's contract).
            (n, false) => unsafe { core::slice::from_raw_parts(c.comm_key, n) }.to_vec(),
        };
        let rust = AvSetAttr {
            count: c.count,
            start_addr: c.start_addr,
            end_addr: c.end_addr,
            stride: c.stride,
            comm_key,
            flags: c.flags,
        };
        let made = a.with_current_table(CALL, |table| {
            let s = AvSet::new(table, &rust)?;
            // Counted under the AV's lock, which its close takes.
            a.sets.fetch_add(1, Ordering::AcqRel);
            Ok(s)
        })?;
        let boxed = Box::new(UetAvSet {
            fid: FidAvSet {
                fid: Fid {
                    fclass: FI_CLASS_AV_SET,
                    context,
                    ops: core::ptr::addr_of!(AV_SET_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(AV_SET_OPS).cast_mut(),
            },
            set: Mutex::new(made),
            av: a,
        });
        // SAFETY: `set` is non-NULL and writable (libfabric's contract).
        unsafe { *set = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

/// `fi_close` of a set.
unsafe extern "C" fn av_set_close(fid: *mut Fid) -> c_int {
    const CALL: &str = "fi_close(av_set)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let s = unsafe { set_ref(fid.cast(), CALL) }?;
        s.av().sets.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: made by `Box::into_raw` in `av_set_open`; the application gives it up with
        // this call.
        drop(unsafe { Box::from_raw(fid.cast::<UetAvSet>()) });
        Ok(0)
    })
}

/// Combine `dst` with `src` by `op`: both locked in address order, or `same` when they are one
/// set.
///
/// # Safety
/// `dst` and `src` are NULL or live libfabric objects.
unsafe fn combine(
    call: &str,
    dst: *mut FidAvSet,
    src: *const FidAvSet,
    op: fn(&mut AvSet, &AvSet) -> Result<(), FiError>,
    same: fn(&mut AvSet) -> Result<(), FiError>,
) -> c_int {
    entry(call, || {
        // SAFETY: NULL or live (the caller's promise).
        let (d, s) = unsafe { (set_ref(dst, call)?, set_ref(src, call)?) };
        if core::ptr::eq(d, s) {
            same(&mut d.lock())?;
            return Ok(0);
        }
        let (mut dg, sg) = if (d as *const UetAvSet) < (s as *const UetAvSet) {
            let dg = d.lock();
            (dg, s.lock())
        } else {
            let sg = s.lock();
            (d.lock(), sg)
        };
        op(&mut dg, &sg)?;
        Ok(0)
    })
}

/// `fi_av_set_union`: the source's members the destination lacks, appended in its order.
unsafe extern "C" fn av_set_union(dst: *mut FidAvSet, src: *const FidAvSet) -> c_int {
    // SAFETY: the application's set pointers (libfabric's contract).
    unsafe { combine("fi_av_set_union", dst, src, AvSet::union, |_| Ok(())) }
}

/// `fi_av_set_intersect`: the destination keeps the members the source has, in its order.
unsafe extern "C" fn av_set_intersect(dst: *mut FidAvSet, src: *const FidAvSet) -> c_int {
    // SAFETY: the application's set pointers (libfabric's contract).
    unsafe {
        combine(
            "fi_av_set_intersect",
            dst,
            src,
            AvSet::intersect,
            |_| Ok(()),
        )
    }
}

/// `fi_av_set_diff`: the destination drops the members the source has (all, for itself).
unsafe extern "C" fn av_set_diff(dst: *mut FidAvSet, src: *const FidAvSet) -> c_int {
    // SAFETY: the application's set pointers (libfabric's contract).
    unsafe {
        combine("fi_av_set_diff", dst, src, AvSet::diff, |set| {
            set.clear();
            Ok(())
        })
    }
}

/// `fi_av_set_insert`.
unsafe extern "C" fn av_set_insert(set: *mut FidAvSet, addr: FiAddr) -> c_int {
    const CALL: &str = "fi_av_set_insert";
    entry(CALL, || {
        // SAFETY: the application's set pointer.
        let s = unsafe { set_ref(set, CALL) }?;
        s.av()
            .with_current_table(CALL, |table| s.lock().insert(table, addr))?;
        Ok(0)
    })
}

/// `fi_av_set_remove`.
unsafe extern "C" fn av_set_remove(set: *mut FidAvSet, addr: FiAddr) -> c_int {
    const CALL: &str = "fi_av_set_remove";
    entry(CALL, || {
        // SAFETY: the application's set pointer.
        let s = unsafe { set_ref(set, CALL) }?;
        s.lock().remove(addr)?;
        Ok(0)
    })
}

/// `fi_av_set_addr`.
unsafe extern "C" fn av_set_addr(set: *mut FidAvSet, coll_addr: *mut FiAddr) -> c_int {
    const CALL: &str = "fi_av_set_addr";
    entry(CALL, || {
        // SAFETY: the application's set pointer.
        let s = unsafe { set_ref(set, CALL) }?;
        if coll_addr.is_null() {
            return Err(null(CALL, "coll_addr"));
        }
        let a = s
            .av()
            .with_current_table(CALL, |table| s.lock().addr(table))?;
        // SAFETY: non-NULL and writable (libfabric's contract).
        unsafe { coll_addr.write(a) };
        Ok(0)
    })
}
