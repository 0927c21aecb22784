//! The entries of libfabric's operation tables this provider does not serve (yet): each
//! returns `-FI_ENOSYS`, as libfabric's own `fi_no_*` functions do, so that a call through
//! any table entry is answered and never jumps through NULL.

use crate::abi::{
    FiInfo, FiOps, FiOpsUnsupported, FiRxAttr, FiTxAttr, Fid, FidDomain, FidEp, FidFabric,
};
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

pub(crate) unsafe extern "C" fn wait_open(
    _: *mut FidFabric,
    _: *mut c_void,
    _: *mut *mut c_void,
) -> c_int {
    enosys("fi_wait_open")
}

pub(crate) unsafe extern "C" fn domain_open(
    _: *mut FidDomain,
    _: *mut c_void,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    enosys("fi_stx_context or fi_srx_context")
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

pub(crate) unsafe extern "C" fn ep_cancel(_: *mut Fid, _: *mut c_void) -> isize {
    enosys("fi_cancel") as isize
}

pub(crate) unsafe extern "C" fn ep_setopt(
    _: *mut Fid,
    _: c_int,
    _: c_int,
    _: *const c_void,
    _: usize,
) -> c_int {
    tracing::debug!("fi_setopt: no endpoint option is served: -FI_ENOPROTOOPT");
    neg(FiErrno::FI_ENOPROTOOPT)
}

pub(crate) unsafe extern "C" fn ep_tx_ctx(
    _: *mut FidEp,
    _: c_int,
    _: *mut FiTxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    enosys("fi_tx_context")
}

pub(crate) unsafe extern "C" fn ep_rx_ctx(
    _: *mut FidEp,
    _: c_int,
    _: *mut FiRxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    enosys("fi_rx_context")
}

pub(crate) unsafe extern "C" fn ep_size_left(_: *mut FidEp) -> isize {
    enosys("fi_rx_size_left, fi_tx_size_left") as isize
}

pub(crate) unsafe extern "C" fn cm_setname(_: *mut Fid, _: *mut c_void, _: usize) -> c_int {
    enosys("fi_setname")
}

pub(crate) unsafe extern "C" fn cm_getpeer(_: *mut FidEp, _: *mut c_void, _: *mut usize) -> c_int {
    enosys("fi_getpeer")
}

pub(crate) unsafe extern "C" fn cm_connect(
    _: *mut FidEp,
    _: *const c_void,
    _: *const c_void,
    _: usize,
) -> c_int {
    enosys("fi_connect")
}

pub(crate) unsafe extern "C" fn cm_listen(_: *mut c_void) -> c_int {
    enosys("fi_listen")
}

pub(crate) unsafe extern "C" fn cm_accept(_: *mut FidEp, _: *const c_void, _: usize) -> c_int {
    enosys("fi_accept")
}

pub(crate) unsafe extern "C" fn cm_reject(
    _: *mut c_void,
    _: *mut Fid,
    _: *const c_void,
    _: usize,
) -> c_int {
    enosys("fi_reject")
}

pub(crate) unsafe extern "C" fn cm_shutdown(_: *mut FidEp, _: u64) -> c_int {
    enosys("fi_shutdown")
}

pub(crate) unsafe extern "C" fn cm_join(
    _: *mut FidEp,
    _: *const c_void,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    enosys("fi_join")
}

/// Every entry of an operation table the provider does not serve ([`FiOpsUnsupported`]):
/// `-FI_ENOSYS`. It reads none of its arguments, so it may stand for entries of any
/// signature: in the C calling conventions of the targets libfabric runs on (x86-64 System
/// V, AArch64 AAPCS64) the caller places and removes the arguments, and a callee that reads
/// none is unaffected by them; its `ssize_t` result is also what an `int` entry returns (the
/// low half of the same register).
pub(crate) unsafe extern "C" fn any_op() -> isize {
    enosys("RMA, atomics or collectives") as isize
}

/// `fi_ops_rma`: 9 entries.
pub(crate) static RMA_OPS: FiOpsUnsupported<9> = FiOpsUnsupported {
    size: core::mem::size_of::<FiOpsUnsupported<9>>(),
    ops: [any_op; 9],
};

/// `fi_ops_atomic`: 13 entries.
pub(crate) static ATOMIC_OPS: FiOpsUnsupported<13> = FiOpsUnsupported {
    size: core::mem::size_of::<FiOpsUnsupported<13>>(),
    ops: [any_op; 13],
};

/// `fi_ops_collective`: 11 entries.
pub(crate) static COLLECTIVE_OPS: FiOpsUnsupported<11> = FiOpsUnsupported {
    size: core::mem::size_of::<FiOpsUnsupported<11>>(),
    ops: [any_op; 11],
};

/// A `struct fi_ops` with the object's own `close`, `bind` and `control`, and the calls no
/// object of this provider serves (`fi_open_ops`, `fi_tostr`, `fi_set_ops`) answered
/// `-FI_ENOSYS`.
pub(crate) const fn fid_ops(
    close: unsafe extern "C" fn(*mut Fid) -> c_int,
    bind: unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int,
    control: unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int,
) -> FiOps {
    FiOps {
        size: core::mem::size_of::<FiOps>(),
        close,
        bind,
        control,
        ops_open,
        tostr,
        ops_set,
    }
}
