//! `fi_fabric`: the fabric object, on the process's NIC ([`crate::device`]).

use crate::abi::*;
use crate::info::FABRIC_NAME;
use crate::{entry, info::c_str, null, object_ref, unsupported};
use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use uet_av::{FiErrno, FiError};
use uet_driver::Nic;

/// A fabric: libfabric's `fid_fabric` first (the pointer the application holds), then the NIC
/// and how many of its domains, and of its other objects (event queues, passive endpoints),
/// are open.
#[repr(C)]
pub struct Fabric {
    fid: FidFabric,
    pub(crate) nic: Nic,
    pub(crate) domains: Arc<AtomicUsize>,
    /// Event queues and passive endpoints of the fabric: each holds a [`FabricSeat`].
    others: Arc<AtomicUsize>,
}

impl Fabric {
    /// The API version the application opened the fabric with (`fi_fabric_attr.api_version`).
    pub(crate) fn api_version(&self) -> u32 {
        self.fid.api_version
    }

    /// A seat for an event queue or passive endpoint opened on the fabric.
    pub(crate) fn seat(&self) -> FabricSeat {
        FabricSeat::in_count(&self.others)
    }

    /// Whether an object tagged `tag` was opened under this fabric.
    pub(crate) fn is(&self, tag: &FabricTag) -> bool {
        Arc::ptr_eq(&self.domains, &tag.0)
    }

    /// Whether an object holding `seat` (an event queue) was opened on this fabric.
    pub(crate) fn seats(&self, seat: &FabricSeat) -> bool {
        Arc::ptr_eq(&self.others, &seat.0)
    }
}

/// The fabric a CQ or counter was opened under (through its domain), which `fi_trywait`
/// checks: it takes only the fabric's own objects (fi_poll(3)). It holds the fabric's count
/// of domains, whose allocation thus outlives neither the object nor the fabric's tag, so no
/// other fabric can have it.
#[derive(Clone)]
pub(crate) struct FabricTag(Arc<AtomicUsize>);

impl FabricTag {
    /// The tag of a domain's objects, whose fabric's count of domains is `domains`.
    pub(crate) fn of_domains(domains: &Arc<AtomicUsize>) -> FabricTag {
        FabricTag(Arc::clone(domains))
    }
}

/// An event queue or passive endpoint counted in its fabric while it lives (dropped with the
/// object when `fi_close` frees it): fi_fabric(3) has every object of a fabric released
/// before the fabric is closed, and `fi_close` of the fabric is `-FI_EBUSY` while one is open.
pub(crate) struct FabricSeat(Arc<AtomicUsize>);

impl FabricSeat {
    /// A seat counted in `count`.
    pub(crate) fn in_count(count: &Arc<AtomicUsize>) -> FabricSeat {
        count.fetch_add(1, Ordering::AcqRel);
        FabricSeat(Arc::clone(count))
    }
}

impl Drop for FabricSeat {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

static FABRIC_FID_OPS: FiOps =
    unsupported::fid_ops(fabric_close, unsupported::bind, unsupported::control);

static FABRIC_OPS: FiOpsFabric = FiOpsFabric {
    size: core::mem::size_of::<FiOpsFabric>(),
    domain: crate::domain::fabric_domain,
    passive_ep: crate::pep::fabric_passive_ep,
    eq_open: crate::eq::fabric_eq_open,
    wait_open: unsupported::wait_open,
    trywait: crate::cq::fabric_trywait,
    domain2: crate::domain::fabric_domain2,
};

/// The open fabrics, by address, in the order they were opened: fi_fabric(3) has an answer
/// of `fi_getinfo` whose hints name no fabric reference the first opened instance.
static OPEN_FABRICS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The first fabric opened of those still open, if any.
pub(crate) fn first_open() -> Option<core::ptr::NonNull<FidFabric>> {
    let open = OPEN_FABRICS.lock().unwrap_or_else(PoisonError::into_inner);
    open.first()
        .and_then(|&f| core::ptr::NonNull::new(f as *mut FidFabric))
}

/// The provider's fabric behind a `fid_fabric` pointer.
///
/// # Safety
/// `fabric` is NULL or a pointer [`uet_fabric`] returned and `fi_close` has not freed.
pub(crate) unsafe fn fabric_ref<'a>(fabric: *mut FidFabric) -> Result<&'a Fabric, FiError> {
    // SAFETY: the caller's promise.
    unsafe {
        object_ref(
            fabric.cast(),
            FI_CLASS_FABRIC,
            &FABRIC_FID_OPS,
            "fi_domain",
            "fabric",
        )
    }
}

/// `fi_provider.fabric`: open a fabric on the process's NIC.
///
/// # Safety
/// libfabric's contract: `attr` NULL or valid, `fabric` a valid place for the answer.
pub(crate) unsafe extern "C" fn uet_fabric(
    attr: *mut FiFabricAttr,
    fabric: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int {
    entry("fi_fabric", || {
        if fabric.is_null() {
            return Err(null("fi_fabric", "fabric"));
        }
        // SAFETY: NULL or valid (libfabric's contract).
        let attr = unsafe { attr.as_ref() };
        if let Some(a) = attr {
            // SAFETY: NULL or a NUL-terminated string of the attributes.
            let name = unsafe { c_str(a.name, "fabric_attr->name") }?;
            if name.is_some_and(|n| n != FABRIC_NAME) {
                return Err(FiError::new(
                    FiErrno::FI_ENODATA,
                    format!("fi_fabric: fabric {name:?} is not {FABRIC_NAME}"),
                ));
            }
        }
        let nic = crate::device::nic()?;
        let f = Box::new(Fabric {
            fid: FidFabric {
                fid: Fid {
                    fclass: FI_CLASS_FABRIC,
                    context,
                    ops: core::ptr::addr_of!(FABRIC_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(FABRIC_OPS).cast_mut(),
                api_version: attr.map_or(FI_PROVIDER_API, |a| a.api_version),
            },
            nic,
            domains: Arc::new(AtomicUsize::new(0)),
            others: Arc::new(AtomicUsize::new(0)),
        });
        let f = Box::into_raw(f);
        OPEN_FABRICS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(f as usize);
        // SAFETY: `fabric` is non-NULL and writable (libfabric's contract).
        unsafe { *fabric = f.cast() };
        Ok(0)
    })
}

/// `fi_close` of a fabric: `-FI_EBUSY` while any of its domains, event queues or passive
/// endpoints is open.
unsafe extern "C" fn fabric_close(fid: *mut Fid) -> c_int {
    entry("fi_close(fabric)", || {
        // SAFETY: libfabric calls this through the fid's own ops, so `fid` is one of ours.
        let f = unsafe { fabric_ref(fid.cast()) }?;
        let open = f.domains.load(Ordering::Acquire);
        if open > 0 {
            return Err(FiError::new(
                FiErrno::FI_EBUSY,
                format!("fi_close(fabric): {open} domain(s) of the fabric are open"),
            ));
        }
        let open = f.others.load(Ordering::Acquire);
        if open > 0 {
            return Err(FiError::new(
                FiErrno::FI_EBUSY,
                format!(
                    "fi_close(fabric): {open} event queue(s) or passive endpoint(s) of the \
                     fabric are open"
                ),
            ));
        }
        OPEN_FABRICS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|&f| f != fid as usize);
        // SAFETY: made by `Box::into_raw` in `uet_fabric`; the application gives it up with
        // this call.
        drop(unsafe { Box::from_raw(fid.cast::<Fabric>()) });
        Ok(0)
    })
}
