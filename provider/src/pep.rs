//! `fi_passive_ep`: a listener for `FI_EP_MSG` connections ([`uet_driver::PassiveEndpoint`]),
//! and the connection requests it hands the application.
//!
//! * `fi_passive_ep(fabric, info)` takes an `fi_info` of `FI_EP_MSG` (`-FI_EINVAL` for
//!   another type); `fi_pep_bind` takes its EQ (one; `-FI_EINVAL` for anything else, and
//!   `-FI_EOPBADSTATE` once listening); `fi_listen` (`-FI_ENOEQ` without an EQ) makes the
//!   listener on the NIC, which gives it its address: `fi_getname` (the 32-byte UET address,
//!   or with `FI_ADDR_STR` its string, as `fi_connect` takes it; `-FI_ETOOSMALL` with the
//!   size when the buffer is shorter; `-FI_EOPBADSTATE` before `fi_listen`). The NIC
//!   assigns the address: `fi_setname` is `-FI_ENOSYS`, and `fi_listen` of a listener whose
//!   `fi_info` asked for another PIDonFEP (`src_addr`, as `fi_getinfo` gives it for
//!   `FI_SOURCE` and a service) is `-FI_EADDRNOTAVAIL`.
//! * Each request reaches the EQ as `FI_CONNREQ` (also one that arrives while `fi_listen`
//!   is still making the listener): its `fi_info` repeats the listener's, with
//!   `dest_addr` the requester's address and `handle` the request, an `FI_CLASS_CONNREQ`
//!   object of the provider. An endpoint opened with that `fi_info` takes the request
//!   (`fi_accept`); `fi_reject(pep, handle, param, len)` refuses it, and the requester's
//!   EQ gets `FI_ECONNREFUSED` with `param` as its error data. A request is answered once:
//!   the handle is freed then, and a later use of it is `-FI_EINVAL` (handles are looked up,
//!   never read through) — unless a newer request's handle has taken its address, which the
//!   application cannot tell apart: as fi_cm(3) has it, a handle is not used once answered.
//!   `fi_accept` and `fi_reject` of one request racing in two threads: one answers it, and
//!   the other is `-FI_EINVAL`, as any use of an answered handle is.
//! * Connection data (`param`) longer than the protocol carries ([`MAX_CM_DATA`]) is cut to
//!   it, as fi_cm(3) has it.
//! * `fi_close` rejects every request left unanswered (their requesters get
//!   `FI_ECONNREFUSED`), frees their handles, and drops the listener's events the EQ still
//!   holds.

use crate::abi::*;
use crate::eq::EqLink;
use crate::fabric::fabric_ref;
use crate::info::{listen_info, ListenInfo};
use crate::{entry, null, object_ref, unsupported};
use core::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use uet_av::{AddrFormat, FiErrno, FiError};
use uet_driver::{ConnReq, DriverError, Endpoint, EndpointAttr, EqEvent, Nic, PassiveEndpoint};
use uet_fwif::cm::MAX_CM_DATA;

/// A listener's state.
struct PepState {
    /// Its EQ, once bound.
    eq: Option<EqLink>,
    /// The NIC's listener, once listening; `None` again once closed.
    listener: Option<PassiveEndpoint>,
}

/// The part of a passive endpoint its requests and its EQ reach.
pub(crate) struct PepCore {
    nic: Nic,
    listen: ListenInfo,
    state: Mutex<PepState>,
}

impl PepCore {
    fn lock(&self) -> MutexGuard<'_, PepState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A passive endpoint: libfabric's `fid_pep` first.
#[repr(C)]
pub struct UetPep {
    fid: FidPep,
    core: Arc<PepCore>,
}

/// A request handed to the application: `handle` is what `fi_info.handle` points to.
struct Request {
    handle: Box<Fid>,
    /// The listener's fabric id, and the listener.
    listener_id: u64,
    pep: Weak<PepCore>,
    req: ConnReq,
}

// SAFETY: the handle is a `Fid` of this crate, never written after it is made: its raw
// pointers are the static ops table and a NULL context.
unsafe impl Send for Request {}

/// The requests handed to the application and not answered yet, across listeners. A handle
/// is found here by its address, never read through: a handle already answered (freed) or
/// of another provider is simply not here.
static REQUESTS: Mutex<Vec<Request>> = Mutex::new(Vec::new());

fn requests() -> MutexGuard<'static, Vec<Request>> {
    REQUESTS.lock().unwrap_or_else(PoisonError::into_inner)
}

static CONNREQ_FID_OPS: FiOps =
    unsupported::fid_ops(connreq_close, unsupported::bind, unsupported::control);

/// `fi_close` of a request handle: not the application's to close (`fi_accept` and
/// `fi_reject` answer it, which frees it).
unsafe extern "C" fn connreq_close(_: *mut Fid) -> c_int {
    crate::neg(FiErrno::FI_EINVAL)
}

/// Whether `handle` is a request the application may still answer (`fi_endpoint` of an
/// `FI_CONNREQ`'s `fi_info`).
pub(crate) fn is_request(handle: *mut Fid) -> bool {
    requests().iter().any(|r| core::ptr::eq(&*r.handle, handle))
}

/// The request behind `handle` and its listener: `FI_EINVAL` when it is none (answered, its
/// listener closed, or not a request of this provider).
fn request(call: &str, handle: *mut Fid) -> Result<(ConnReq, Arc<PepCore>), FiError> {
    let found = requests()
        .iter()
        .find(|r| core::ptr::eq(&*r.handle, handle))
        .map(|r| (r.req.clone(), r.pep.clone()));
    let gone = || {
        FiError::inval(format!(
            "{call}: the handle is no connection request waiting for an answer (answered \
             already, or its listener was closed)"
        ))
    };
    let (req, pep) = found.ok_or_else(gone)?;
    Ok((req, pep.upgrade().ok_or_else(gone)?))
}

/// The request answered: its handle goes.
fn answered(handle: *mut Fid) {
    let gone: Vec<Request> = {
        let mut all = requests();
        let (gone, kept) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|r| core::ptr::eq(&*r.handle, handle));
        *all = kept;
        gone
    };
    drop(gone);
}

/// Connection data as the protocol carries it: at most [`MAX_CM_DATA`] bytes, the rest cut
/// (fi_cm(3)). `FI_EINVAL` for NULL with a length.
///
/// # Safety
/// `param` is NULL or holds `len` readable bytes.
pub(crate) unsafe fn cm_param<'a>(
    call: &str,
    param: *const c_void,
    len: usize,
) -> Result<&'a [u8], FiError> {
    if len == 0 {
        return Ok(&[]);
    }
    if param.is_null() {
        return Err(null(call, "param"));
    }
    // SAFETY: `len` readable bytes (the caller's promise), of which at most MAX_CM_DATA are
    // read.
    Ok(unsafe { core::slice::from_raw_parts(param.cast::<u8>(), len.min(MAX_CM_DATA)) })
}

fn driver_error(call: &str, e: &DriverError) -> FiError {
    FiError::new(e.errno(), format!("{call}: {e}"))
}

/// The `fi_info` of an `FI_CONNREQ` event of `listener`: `None` when the request is gone
/// (answered, or the listener closed), so the event is not reported. The request's handle
/// is made at the first read of its event and kept until it is answered (a read with
/// `FI_PEEK`, then the read that takes the event, give the same handle).
pub(crate) fn connreq_info(
    listener: &Weak<PepCore>,
    ev: &EqEvent,
) -> Result<Option<*mut FiInfo>, FiError> {
    let Some(core) = listener.upgrade() else {
        return Ok(None);
    };
    let st = core.lock();
    let Some(pep) = st.listener.as_ref() else {
        return Ok(None);
    };
    let Ok(req) = pep.connreq(ev) else {
        return Ok(None);
    };
    let listener_id = pep.fid();
    let mut all = requests();
    let handle = match all
        .iter()
        .find(|r| r.listener_id == listener_id && r.req.id == req.id)
    {
        Some(r) => core::ptr::addr_of!(*r.handle).cast_mut(),
        None => {
            let handle = Box::new(Fid {
                fclass: FI_CLASS_CONNREQ,
                context: core::ptr::null_mut(),
                ops: core::ptr::addr_of!(CONNREQ_FID_OPS).cast_mut(),
            });
            let at = core::ptr::addr_of!(*handle).cast_mut();
            all.push(Request {
                handle,
                listener_id,
                pep: listener.clone(),
                req: req.clone(),
            });
            at
        }
    };
    drop(all);
    crate::info::connreq_info(&core.nic, &core.listen, &req.peer, handle).map(Some)
}

/// `fi_accept` of an endpoint opened with the `fi_info` of the request `handle`: the NIC's
/// endpoint `ep` takes the connection, sending `param`. The handle goes once accepted; on
/// an error nothing changed.
pub(crate) fn accept(
    call: &str,
    handle: *mut Fid,
    ep: &mut Endpoint,
    param: &[u8],
) -> Result<(), FiError> {
    let (req, core) = request(call, handle)?;
    let st = core.lock();
    let pep = st
        .listener
        .as_ref()
        .ok_or_else(|| FiError::inval(format!("{call}: the request's listener is closed")))?;
    pep.accept(&req, ep, param)
        .map_err(|e| driver_error(call, &e))?;
    drop(st);
    answered(handle);
    Ok(())
}

static PEP_FID_OPS: FiOps = unsupported::fid_ops(pep_close, pep_bind, unsupported::control);

static PEP_OPS: FiOpsEp = FiOpsEp {
    size: core::mem::size_of::<FiOpsEp>(),
    cancel: unsupported::ep_cancel,
    getopt: pep_getopt,
    setopt: unsupported::ep_setopt,
    tx_ctx: unsupported::ep_tx_ctx,
    rx_ctx: unsupported::ep_rx_ctx,
    rx_size_left: unsupported::ep_size_left,
    tx_size_left: unsupported::ep_size_left,
};

static PEP_CM_OPS: FiOpsCm = FiOpsCm {
    size: core::mem::size_of::<FiOpsCm>(),
    setname: unsupported::cm_setname,
    getname: pep_getname,
    getpeer: unsupported::cm_getpeer,
    connect: unsupported::cm_connect,
    listen: pep_listen,
    accept: unsupported::cm_accept,
    reject: pep_reject,
    shutdown: unsupported::cm_shutdown,
    join: unsupported::cm_join,
};

/// The provider's passive endpoint behind a `fid` pointer.
///
/// # Safety
/// `fid` is NULL or a live libfabric object.
unsafe fn pep_ref<'a>(fid: *const Fid, call: &str) -> Result<&'a UetPep, FiError> {
    // SAFETY: the caller's promise.
    unsafe { object_ref(fid, FI_CLASS_PEP, &PEP_FID_OPS, call, "passive endpoint") }
}

/// `fi_passive_ep`.
pub(crate) unsafe extern "C" fn fabric_passive_ep(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    pep: *mut *mut c_void,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_passive_ep";
    entry(CALL, || {
        // SAFETY: the application's fabric pointer, ours.
        let f = unsafe { fabric_ref(fabric) }?;
        if pep.is_null() {
            return Err(null(CALL, "pep"));
        }
        // SAFETY: NULL or a valid fi_info (libfabric's contract).
        let info = unsafe { info.as_ref() }.ok_or_else(|| null(CALL, "info"))?;
        // SAFETY: a valid fi_info's attributes are NULL or valid.
        let listen = unsafe { listen_info(info, CALL) }?;
        let boxed = Box::new(UetPep {
            fid: FidPep {
                fid: Fid {
                    fclass: FI_CLASS_PEP,
                    context,
                    ops: core::ptr::addr_of!(PEP_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(PEP_OPS).cast_mut(),
                cm: core::ptr::addr_of!(PEP_CM_OPS).cast_mut(),
            },
            core: Arc::new(PepCore {
                nic: f.nic.clone(),
                listen,
                state: Mutex::new(PepState {
                    eq: None,
                    listener: None,
                }),
            }),
        });
        // SAFETY: `pep` is non-NULL and writable (libfabric's contract).
        unsafe { *pep = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

/// `fi_pep_bind`: the EQ the listener reports to.
unsafe extern "C" fn pep_bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    const CALL: &str = "fi_pep_bind";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let p = unsafe { pep_ref(fid, CALL) }?;
        // SAFETY: NULL or a live object (libfabric's contract).
        let b = unsafe { bfid.as_ref() }.ok_or_else(|| null(CALL, "bfid"))?;
        if b.fclass != FI_CLASS_EQ {
            return Err(FiError::inval(format!(
                "{CALL}: fid class {}: a passive endpoint binds an EQ",
                b.fclass
            )));
        }
        if flags != 0 {
            return Err(FiError::badflags(format!(
                "{CALL}: flags {flags:#x} with an EQ"
            )));
        }
        // SAFETY: a live object of class EQ.
        let eq = unsafe { crate::eq::eq_ref(bfid, CALL) }?;
        let mut st = p.core.lock();
        if st.listener.is_some() {
            return Err(FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!("{CALL}: the passive endpoint is listening"),
            ));
        }
        if st.eq.is_some() {
            return Err(FiError::inval(format!("{CALL}: an EQ is bound already")));
        }
        st.eq = Some(eq.link()?);
        Ok(0)
    })
}

/// `fi_listen`: the listener on the NIC, reporting to the bound EQ. Listening again is 0.
///
/// A request may arrive as soon as the NIC has made the listener, before the EQ knows it
/// for this passive endpoint's: the EQ's readers wait (its readers' lock, taken before the
/// passive endpoint's, as a read takes them) until it does, so every `FI_CONNREQ` is
/// reported with its `fi_info`.
unsafe extern "C" fn pep_listen(pep: *mut c_void) -> c_int {
    const CALL: &str = "fi_listen";
    entry(CALL, || {
        // SAFETY: the application's passive endpoint.
        let p = unsafe { pep_ref(pep.cast(), CALL) }?;
        let reads = p.core.lock().eq.as_ref().map(EqLink::reads);
        let _reading = reads
            .as_deref()
            .map(|r| r.lock().unwrap_or_else(PoisonError::into_inner));
        let mut st = p.core.lock();
        if st.listener.is_some() {
            return Ok(0);
        }
        let link = st.eq.as_ref().ok_or_else(|| {
            FiError::new(
                FiErrno::FI_ENOEQ,
                format!("{CALL}: bind an EQ to the passive endpoint first (fi_pep_bind)"),
            )
        })?;
        if reads.is_none() {
            // Bound by another thread since the look above: the readers are not held.
            return Err(FiError::new(
                FiErrno::FI_EAGAIN,
                format!("{CALL}: the EQ was bound during the call: listen again"),
            ));
        }
        let attr = EndpointAttr {
            job_id: p.core.listen.job_id(),
            ..EndpointAttr::default()
        };
        let listener = p
            .core
            .nic
            .passive_endpoint(attr, link.queue())
            .map_err(|e| driver_error(CALL, &e))?;
        // The NIC assigns PIDonFEPs: a listener asked to be at another one would listen where
        // no requester looks. It goes again, refusing what reached it, whose events go.
        let got = *listener.address();
        if let Some(want) = p.core.listen.src() {
            if want.pid_on_fep != 0 && want.pid_on_fep != got.pid_on_fep {
                let id = listener.fid();
                drop(listener);
                link.queue().discard(id);
                return Err(FiError::new(
                    FiErrno::FI_EADDRNOTAVAIL,
                    format!(
                        "{CALL}: src_addr {want} names PIDonFEP {}, and the NIC assigned {}: \
                         the NIC assigns every PIDonFEP (leave the service out, or 0, and \
                         give requesters the listener's fi_getname)",
                        want.pid_on_fep, got.pid_on_fep
                    ),
                ));
            }
        }
        link.name(listener.fid(), pep.cast(), Some(Arc::downgrade(&p.core)));
        st.listener = Some(listener);
        Ok(0)
    })
}

/// `fi_getname` of a passive endpoint: its UET address once listening.
unsafe extern "C" fn pep_getname(fid: *mut Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    const CALL: &str = "fi_getname";
    entry(CALL, || {
        // SAFETY: called through the passive endpoint's own ops.
        let p = unsafe { pep_ref(fid, CALL) }?;
        let st = p.core.lock();
        let listener = st.listener.as_ref().ok_or_else(|| {
            FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!("{CALL}: the passive endpoint has its address once listening (fi_listen)"),
            )
        })?;
        let bytes = address_in(p.core.listen.addr_format(), listener.address(), CALL)?;
        // SAFETY: libfabric's contract on `addr` and `addrlen`.
        unsafe { put_address(CALL, &bytes, addr, addrlen) }
    })
}

/// `a` as an address of `format` hands it out: its 32 bytes, or its NUL-terminated string
/// (`FI_ADDR_STR`), the form `fi_av_insert` and `fi_connect` take back in that format.
pub(crate) fn address_in(
    format: AddrFormat,
    a: &uet_fwif::UetAddress,
    call: &str,
) -> Result<Vec<u8>, FiError> {
    Ok(match format {
        AddrFormat::Uet => a
            .to_bytes()
            .map_err(|e| FiError::inval(format!("{call}: {e}")))?
            .to_vec(),
        AddrFormat::Str => {
            let mut s = a.to_string().into_bytes();
            s.push(0);
            s
        }
    })
}

/// `fi_getopt`'s level for endpoint options (`FI_OPT_ENDPOINT`).
const FI_OPT_ENDPOINT: c_int = 0;
/// `FI_OPT_CM_DATA_SIZE`: the connection data a connection message carries (read only).
const FI_OPT_CM_DATA_SIZE: c_int = 1;

/// `fi_getopt` of a connection's endpoint or listener: `FI_OPT_CM_DATA_SIZE` is
/// [`MAX_CM_DATA`], the `param` bytes `fi_connect`, `fi_accept` and `fi_reject` carry and an
/// `FI_CONNREQ` can hold, as a `size_t`; `FI_ETOOSMALL` with `*optlen` set when the buffer
/// is shorter. Any other option is `FI_ENOPROTOOPT`.
///
/// # Safety
/// `optlen` is NULL or valid; `optval` is NULL or holds `*optlen` writable bytes.
pub(crate) unsafe fn cm_getopt(
    call: &str,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> Result<c_int, FiError> {
    if level != FI_OPT_ENDPOINT || optname != FI_OPT_CM_DATA_SIZE {
        return Err(FiError::new(
            FiErrno::FI_ENOPROTOOPT,
            format!(
                "{call}: level {level}, option {optname}: FI_OPT_CM_DATA_SIZE is the one option \
                 served"
            ),
        ));
    }
    // SAFETY: NULL or valid (the caller's promise).
    let len = unsafe { optlen.as_mut() }.ok_or_else(|| null(call, "optlen"))?;
    let size = core::mem::size_of::<usize>();
    if optval.is_null() || *len < size {
        let room = *len;
        *len = size;
        return Err(FiError::new(
            FiErrno::FI_ETOOSMALL,
            format!("{call}: FI_OPT_CM_DATA_SIZE is a size_t of {size} bytes, the buffer {room}"),
        ));
    }
    // SAFETY: `optval` holds at least a `size_t` (checked above); it need not be aligned.
    unsafe { optval.cast::<usize>().write_unaligned(MAX_CM_DATA) };
    *len = size;
    Ok(0)
}

/// `fi_getopt` of a passive endpoint: [`cm_getopt`].
unsafe extern "C" fn pep_getopt(
    fid: *mut Fid,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    const CALL: &str = "fi_getopt";
    entry(CALL, || {
        // SAFETY: called through the passive endpoint's own ops.
        unsafe { pep_ref(fid, CALL) }?;
        // SAFETY: libfabric's contract on `optval` and `optlen`.
        unsafe { cm_getopt(CALL, level, optname, optval, optlen) }
    })
}

/// Write an address into the application's buffer (`fi_getname`, `fi_getpeer`): all of it,
/// or `FI_ETOOSMALL` with as much as fits; `*addrlen` is set to its size either way.
///
/// # Safety
/// `addrlen` is NULL or valid; `addr` is NULL or holds `*addrlen` writable bytes.
pub(crate) unsafe fn put_address(
    call: &str,
    bytes: &[u8],
    addr: *mut c_void,
    addrlen: *mut usize,
) -> Result<c_int, FiError> {
    // SAFETY: NULL or valid (the caller's promise).
    let len = unsafe { addrlen.as_mut() }.ok_or_else(|| null(call, "addrlen"))?;
    let room = if addr.is_null() { 0 } else { *len };
    let n = room.min(bytes.len());
    // SAFETY: `addr` holds `*addrlen` writable bytes (the caller's promise); n is at most that.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), addr.cast::<u8>(), n) };
    *len = bytes.len();
    if n < bytes.len() {
        return Err(FiError::new(
            FiErrno::FI_ETOOSMALL,
            format!(
                "{call}: the address is {} bytes, the buffer {room}",
                bytes.len()
            ),
        ));
    }
    Ok(0)
}

/// `fi_reject`: refuse the request `handle`, sending `param` to the requester.
unsafe extern "C" fn pep_reject(
    pep: *mut c_void,
    handle: *mut Fid,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    const CALL: &str = "fi_reject";
    entry(CALL, || {
        // SAFETY: the application's passive endpoint.
        let p = unsafe { pep_ref(pep.cast(), CALL) }?;
        // SAFETY: libfabric's contract: `param` holds `paramlen` bytes.
        let param = unsafe { cm_param(CALL, param, paramlen) }?;
        let (req, core) = request(CALL, handle)?;
        if !Arc::ptr_eq(&core, &p.core) {
            return Err(FiError::inval(format!(
                "{CALL}: the request was made to another passive endpoint"
            )));
        }
        let st = core.lock();
        let listener = st
            .listener
            .as_ref()
            .ok_or_else(|| FiError::inval(format!("{CALL}: the passive endpoint is closed")))?;
        listener
            .reject(&req, param)
            .map_err(|e| driver_error(CALL, &e))?;
        drop(st);
        answered(handle);
        Ok(0)
    })
}

/// `fi_close` of a passive endpoint: the listener leaves the NIC (rejecting the requests it
/// leaves unanswered), its handles are freed and its events still queued dropped.
unsafe extern "C" fn pep_close(fid: *mut Fid) -> c_int {
    const CALL: &str = "fi_close(pep)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let p = unsafe { pep_ref(fid, CALL) }?;
        // Out of the lock first: a read of the EQ takes it for an FI_CONNREQ of the listener
        // (which, the listener gone, it no longer reports), and the events are dropped only
        // between reads.
        let (listener, eq) = {
            let mut st = p.core.lock();
            (st.listener.take(), st.eq.take())
        };
        let id = listener.as_ref().map(PassiveEndpoint::fid);
        drop(listener);
        if let (Some(id), Some(link)) = (id, eq.as_ref()) {
            link.forget(id);
        }
        drop(eq);
        let gone: Vec<Request> = {
            let mut all = requests();
            let (gone, kept) = std::mem::take(&mut *all)
                .into_iter()
                .partition(|r| core::ptr::eq(r.pep.as_ptr(), Arc::as_ptr(&p.core)));
            *all = kept;
            gone
        };
        drop(gone);
        // SAFETY: made by `Box::into_raw` in `fabric_passive_ep`; the application gives it
        // up with this call.
        drop(unsafe { Box::from_raw(fid.cast::<UetPep>()) });
        Ok(0)
    })
}
