//! `fi_domain`: a [`uet_driver::Domain`] on the fabric's NIC, with the attributes of the
//! `fi_info` it is opened with.

use crate::abi::*;
use crate::fabric::fabric_ref;
use crate::info::{c_str, domain_attr, domain_name, FABRIC_NAME};
use crate::{entry, null, object_ref, unsupported, PROVIDER_NAME};
use core::ffi::{c_int, c_void};
use core::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use uet_av::{FiErrno, FiError};
use uet_driver::Domain;

/// A domain: libfabric's `fid_domain` first, then the driver's domain (`None` once closed) and
/// the count of its fabric's open domains.
#[repr(C)]
pub struct UetDomain {
    fid: FidDomain,
    domain: Mutex<Option<Domain>>,
    fabric_domains: Arc<AtomicUsize>,
    /// The fabric's API version ([`crate::fabric::Fabric::api_version`]).
    pub(crate) api_version: u32,
    /// Endpoints of the domain, enabled or not (`fi_close` is `FI_EBUSY` while any are).
    pub(crate) endpoints: AtomicUsize,
    /// CQs of the domain (`fi_close` is `FI_EBUSY` while any are open): each holds the count
    /// and takes itself off it when it closes.
    pub(crate) cqs: Arc<AtomicUsize>,
    /// Counters of the domain (`fi_close` is `FI_EBUSY` while any are open, and
    /// `fi_cntr_open` `FI_ENOSPC` at [`crate::cntr::CNTR_CNT`]): each holds the count and takes
    /// itself off it when it closes.
    pub(crate) cntrs: Arc<AtomicUsize>,
    /// `domain_attr->max_ep_tx_ctx` of the `fi_info` it is opened with (0: the NIC's): the
    /// most transmit contexts of a scalable endpoint in it.
    pub(crate) max_ep_tx_ctx: usize,
}

impl UetDomain {
    /// The fabric the domain was opened under, for the CQs and counters opened in it.
    pub(crate) fn fabric_tag(&self) -> crate::fabric::FabricTag {
        crate::fabric::FabricTag::of_domains(&self.fabric_domains)
    }

    /// The driver's domain, locked. `FI_EINVAL` once closed (which a valid pointer never is).
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, Option<Domain>>, FiError> {
        let guard = self.domain.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            return Err(FiError::inval("the domain is closed"));
        }
        Ok(guard)
    }
}

static DOMAIN_FID_OPS: FiOps =
    unsupported::fid_ops(domain_close, unsupported::bind, unsupported::control);

static DOMAIN_OPS: FiOpsDomain = FiOpsDomain {
    size: core::mem::size_of::<FiOpsDomain>(),
    av_open: crate::av::domain_av_open,
    cq_open: crate::cq::domain_cq_open,
    endpoint: crate::ep::domain_endpoint,
    scalable_ep: crate::sep::domain_scalable_ep,
    cntr_open: crate::cntr::domain_cntr_open,
    poll_open: unsupported::poll_open,
    stx_ctx: unsupported::domain_open,
    srx_ctx: unsupported::domain_open,
    query_atomic: unsupported::query_atomic,
    query_collective: unsupported::query_collective,
    endpoint2: unsupported::endpoint2,
};

static DOMAIN_MR_OPS: FiOpsMr = FiOpsMr {
    size: core::mem::size_of::<FiOpsMr>(),
    reg: unsupported::mr_reg,
    regv: unsupported::mr_regv,
    regattr: unsupported::mr_regattr,
};

/// The open domains, by address with their fabric's, in the order they were opened:
/// fi_domain(3) has an answer of `fi_getinfo` whose hints name no domain reference the first
/// opened instance.
static OPEN_DOMAINS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// The fabric and domain an answer of `fi_getinfo` names, given the open ones the hints name
/// (`fabric`, and `domain`, of that fabric): as fi_fabric(3) and fi_domain(3) have it, each
/// the one the hints name, or else the first opened instance, or NULL when none is open. A
/// domain named alone gives its fabric; the domain is the first opened of the answer's fabric.
pub(crate) fn answer_instances(
    fabric: Option<NonNull<FidFabric>>,
    domain: Option<NonNull<FidDomain>>,
) -> (Option<NonNull<FidFabric>>, Option<NonNull<FidDomain>>) {
    let open = OPEN_DOMAINS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let fabric = fabric
        .or_else(|| {
            let d = domain?.as_ptr() as usize;
            let &(f, _) = open.iter().find(|&&(_, od)| od == d)?;
            NonNull::new(f as *mut FidFabric)
        })
        .or_else(crate::fabric::first_open);
    let domain = domain.or_else(|| {
        let f = fabric?.as_ptr() as usize;
        let &(_, d) = open.iter().find(|&&(of, _)| of == f)?;
        NonNull::new(d as *mut FidDomain)
    });
    (fabric, domain)
}

/// The provider's domain behind a `fid_domain` pointer.
///
/// # Safety
/// `domain` is NULL or a pointer [`fabric_domain`] returned and `fi_close` has not freed.
pub(crate) unsafe fn domain_ref<'a>(
    domain: *mut FidDomain,
    call: &str,
) -> Result<&'a UetDomain, FiError> {
    // SAFETY: the caller's promise.
    unsafe {
        object_ref(
            domain.cast(),
            FI_CLASS_DOMAIN,
            &DOMAIN_FID_OPS,
            call,
            "domain",
        )
    }
}

/// `fi_domain`: the domain `info` describes, on the fabric's NIC. `FI_EINVAL` for an `info`
/// that names another domain, fabric or provider, or attributes the provider does not serve; `FI_ENODATA` for
/// limits above the NIC's (`max_ep_tx_ctx`, and [`uet_driver::Nic::domain`]'s).
pub(crate) unsafe extern "C" fn fabric_domain(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    domain: *mut *mut FidDomain,
    context: *mut c_void,
) -> c_int {
    entry("fi_domain", || {
        // SAFETY: libfabric passes the application's fabric pointer, ours.
        let f = unsafe { fabric_ref(fabric) }?;
        if domain.is_null() {
            return Err(null("fi_domain", "domain"));
        }
        // SAFETY: NULL or a valid fi_info (libfabric's contract).
        let info = unsafe { info.as_ref() }.ok_or_else(|| null("fi_domain", "info"))?;
        // SAFETY: NULL or valid attributes of a valid fi_info.
        if let Some(a) = unsafe { info.fabric_attr.as_ref() } {
            // SAFETY: NULL or NUL-terminated strings.
            let (name, prov) = unsafe {
                (
                    c_str(a.name, "fabric_attr->name")?,
                    c_str(a.prov_name, "fabric_attr->prov_name")?,
                )
            };
            // An info of another fabric or provider describes none of this fabric's domains
            // (libfabric names providers without regard to case).
            if name.is_some_and(|n| n != FABRIC_NAME)
                || prov.is_some_and(|p| !p.eq_ignore_ascii_case(PROVIDER_NAME))
            {
                return Err(FiError::inval(format!(
                    "fi_domain: the info is of fabric {name:?} of provider {prov:?}, not this \
                     fabric ({FABRIC_NAME}, {PROVIDER_NAME})"
                )));
            }
        }
        // SAFETY: NULL or valid attributes of a valid fi_info.
        if let Some(d) = unsafe { info.domain_attr.as_ref() } {
            // SAFETY: NULL or a NUL-terminated string.
            let name = unsafe { c_str(d.name, "domain_attr->name") }?;
            let ours = domain_name(&f.nic);
            if name.is_some_and(|n| n != ours) {
                return Err(FiError::inval(format!(
                    "fi_domain: domain {name:?} is not this fabric's {ours}"
                )));
            }
        }
        // SAFETY: as above.
        let attr = unsafe { domain_attr(info) }?;
        // SAFETY: as above.
        let max_ep_tx_ctx = unsafe { info.domain_attr.as_ref() }.map_or(0, |d| d.max_ep_tx_ctx);
        // As the driver refuses receive contexts per endpoint above the NIC's: a domain whose
        // endpoints the NIC cannot give the transmit contexts it promises is not opened.
        let (nic_tx, _) = crate::info::context_limits(&f.nic);
        if max_ep_tx_ctx > nic_tx {
            return Err(FiError::new(
                FiErrno::FI_ENODATA,
                format!(
                    "fi_domain: max_ep_tx_ctx {max_ep_tx_ctx} exceeds the {nic_tx} transmit \
                     contexts a NIC endpoint can have"
                ),
            ));
        }
        let d = f.nic.domain(attr)?;
        f.domains.fetch_add(1, Ordering::AcqRel);
        let boxed = Box::new(UetDomain {
            fid: FidDomain {
                fid: Fid {
                    fclass: FI_CLASS_DOMAIN,
                    context,
                    ops: core::ptr::addr_of!(DOMAIN_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(DOMAIN_OPS).cast_mut(),
                mr: core::ptr::addr_of!(DOMAIN_MR_OPS).cast_mut(),
            },
            domain: Mutex::new(Some(d)),
            fabric_domains: f.domains.clone(),
            api_version: f.api_version(),
            endpoints: AtomicUsize::new(0),
            cqs: Arc::new(AtomicUsize::new(0)),
            cntrs: Arc::new(AtomicUsize::new(0)),
            max_ep_tx_ctx,
        });
        let boxed = Box::into_raw(boxed);
        OPEN_DOMAINS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((fabric as usize, boxed as usize));
        // SAFETY: `domain` is non-NULL and writable (libfabric's contract).
        unsafe { *domain = boxed.cast() };
        Ok(0)
    })
}

/// `fi_domain2`: as `fi_domain`; no flags are defined for it.
pub(crate) unsafe extern "C" fn fabric_domain2(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    domain: *mut *mut FidDomain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return crate::neg(FiErrno::FI_EBADFLAGS);
    }
    // SAFETY: the same contract as `fi_domain`.
    unsafe { fabric_domain(fabric, info, domain, context) }
}

/// `fi_close` of a domain: `-FI_EBUSY` while AVs, endpoints, CQs or counters of it are open
/// (a CQ or counter waits on the vectors of the domain's NIC).
unsafe extern "C" fn domain_close(fid: *mut Fid) -> c_int {
    entry("fi_close(domain)", || {
        // SAFETY: libfabric calls this through the fid's own ops, so `fid` is one of ours.
        let d = unsafe { domain_ref(fid.cast(), "fi_close(domain)") }?;
        {
            let mut guard = d.lock()?;
            let eps = d.endpoints.load(Ordering::Acquire);
            if eps > 0 {
                return Err(FiError::new(
                    FiErrno::FI_EBUSY,
                    format!("fi_close(domain): {eps} endpoint(s) of the domain are open"),
                ));
            }
            let cqs = d.cqs.load(Ordering::Acquire);
            if cqs > 0 {
                return Err(FiError::new(
                    FiErrno::FI_EBUSY,
                    format!("fi_close(domain): {cqs} CQ(s) of the domain are open"),
                ));
            }
            let cntrs = d.cntrs.load(Ordering::Acquire);
            if cntrs > 0 {
                return Err(FiError::new(
                    FiErrno::FI_EBUSY,
                    format!("fi_close(domain): {cntrs} counter(s) of the domain are open"),
                ));
            }
            if let Some(domain) = guard.take() {
                if let Err(e) = domain.close() {
                    *guard = Some(*e.domain);
                    return Err(e.error);
                }
            }
        }
        d.fabric_domains.fetch_sub(1, Ordering::AcqRel);
        OPEN_DOMAINS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|&(_, od)| od != fid as usize);
        // SAFETY: made by `Box::into_raw` in `fabric_domain`; the application gives it up
        // with this call, and the domain inside is closed.
        drop(unsafe { Box::from_raw(fid.cast::<UetDomain>()) });
        Ok(0)
    })
}
