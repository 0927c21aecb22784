//! The entries of libfabric's operation tables this provider does not serve (yet): each
//! returns `-FI_ENOSYS`, as libfabric's own `fi_no_*` functions do, so that a call through
//! any table entry is answered and never jumps through NULL.

use crate::abi::{FiInfo, Fid, FidDomain, FidFabric};
use crate::neg;
use core::ffi::{c_char, c_int, c_void};
use uet_av::FiErrno;

fn enosys(what: &str) -> c_int {
    tracing::debug!("{what}: not served by the uet provider: -FI_ENOSYS");
    neg(FiErrno::FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn bind(_: *mut Fid, _: *mut Fid, _: u64) -> c_int {
    enosys("fi_bind")
}

pub(crate) unsafe extern "C" fn control(_: *mut Fid, _: c_int, _: *mut c_void) -> c_int {
    enosys("fi_control")
}

pub(crate) unsafe extern "C" fn ops_open(
    _: *mut Fid,
    _: *const c_char,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    enosys("fi_open_ops")
}

pub(crate) unsafe extern "C" fn tostr(_: *const Fid, _: *mut c_char, _: usize) -> c_int {
    enosys("fi_tostr")
}

pub(crate) unsafe extern "C" fn ops_set(
    _: *mut Fid,
    _: *const c_char,
    _: u64,
    _: *mut c_void,
    _: *mut c_void,
) -> c_int {
    enosys("fi_set_ops")
}

pub(crate) unsafe extern "C" fn passive_ep(
    _: *mut FidFabric,
    _: *mut FiInfo,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    enosys("fi_passive_ep")
}

pub(crate) unsafe extern "C" fn wait_open(
    _: *mut FidFabric,
    _: *mut c_void,
    _: *mut *mut c_void,
) -> c_int {
    enosys("fi_wait_open")
}

pub(crate) unsafe extern "C" fn trywait(_: *mut FidFabric, _: *mut *mut Fid, _: c_int) -> c_int {
    enosys("fi_trywait")
}

pub(crate) unsafe extern "C" fn domain_open(
    _: *mut FidDomain,
    _: *mut c_void,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    enosys(
        "fi_cq_open, fi_endpoint, fi_scalable_ep, fi_cntr_open, fi_stx_context or fi_srx_context",
    )
}

pub(crate) unsafe extern "C" fn poll_open(
    _: *mut FidDomain,
    _: *mut c_void,
    _: *mut *mut c_void,
) -> c_int {
    enosys("fi_poll_open")
}

pub(crate) unsafe extern "C" fn query_atomic(
    _: *mut FidDomain,
    _: c_int,
    _: c_int,
    _: *mut c_void,
    _: u64,
) -> c_int {
    enosys("fi_query_atomic")
}

pub(crate) unsafe extern "C" fn query_collective(
    _: *mut FidDomain,
    _: c_int,
    _: *mut c_void,
    _: u64,
) -> c_int {
    enosys("fi_query_collective")
}

pub(crate) unsafe extern "C" fn endpoint2(
    _: *mut FidDomain,
    _: *mut FiInfo,
    _: *mut *mut c_void,
    _: u64,
    _: *mut c_void,
) -> c_int {
    enosys("fi_endpoint2")
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn mr_reg(
    _: *mut Fid,
    _: *const c_void,
    _: usize,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    enosys("fi_mr_reg")
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn mr_regv(
    _: *mut Fid,
    _: *const c_void,
    _: usize,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    enosys("fi_mr_regv")
}

pub(crate) unsafe extern "C" fn mr_regattr(
    _: *mut Fid,
    _: *const c_void,
    _: u64,
    _: *mut *mut c_void,
) -> c_int {
    enosys("fi_mr_regattr")
}
