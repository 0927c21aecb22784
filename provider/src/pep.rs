//! `fi_passive_ep`: a listener for `FI_EP_MSG` connections ([`uet_driver::PassiveEndpoint`]),
//! and the connection requests it hands the application.
//!
//! * `fi_passive_ep(fabric, info)` takes an `fi_info` of `FI_EP_MSG` (`-FI_EINVAL` for
//!   another type, or, from API 1.5, an `ep_attr->auth_key` other than its domain's); `fi_pep_bind` takes its EQ (one; `-FI_EINVAL` for anything else, and
//!   `-FI_EOPBADSTATE` once listening); `fi_listen` (`-FI_ENOEQ` without an EQ) makes the
//!   listener on the NIC, which gives it its address: `fi_getname` (the 32-byte UET address,
//!   or with `FI_ADDR_STR` its string, as `fi_connect` takes it; `-FI_ETOOSMALL` with the
//!   size when the buffer is shorter; `-FI_EOPBADSTATE` before `fi_listen`). The NIC
//!   assigns the address: `fi_setname` is `-FI_ENOSYS`, and `fi_listen` of a listener whose
//!   `fi_info` asked for another PIDonFEP (`src_addr`, as `fi_getinfo` gives it for
//!   `FI_SOURCE` and a service), or at another fabric address than the NIC's, is
//!   `-FI_EADDRNOTAVAIL`.
//! * Each request reaches the EQ as `FI_CONNREQ` (also one that arrives while `fi_listen`
//!   is still making the listener): its `fi_info` repeats the listener's, with
//!   `dest_addr` the requester's address and `handle` the request, an `FI_CLASS_CONNREQ`
//!   object of the provider. An endpoint opened with that `fi_info` takes the request
//!   (`fi_accept`); `fi_reject(pep, handle, param, len)` refuses it, and the requester's
//!   EQ gets `FI_ECONNREFUSED` with `param` as its error data. A request is answered once:
//!   the handle is freed then, and a later use of it (`fi_reject`, `fi_endpoint` of its
//!   `fi_info`, `fi_accept`) is `-FI_EINVAL` and acts on no request: handles are looked up,
//!   never read through, and no two requests of the process ever get the same handle
//!   address, so a stale handle never names a newer request (handles are carved from
//!   address space never given twice, their memory given back once answered).
//!   `fi_accept` and `fi_reject` of one request racing in two threads: one answers it, and
//!   the other is `-FI_EINVAL`, as any use of an answered handle is.
//! * `fi_control(FI_BACKLOG, int *)`, before or after `fi_listen`, sets how many requests
//!   the listener holds unanswered (1,024 at most, and by default); one that finds the
//!   backlog full is refused (`FI_ECONNREFUSED`). Other `fi_control` commands are
//!   `-FI_ENOSYS`.
//! * Connection data (`param`) longer than the protocol carries ([`MAX_CM_DATA`]) is cut to
//!   it, as fi_cm(3) has it.
//! * `fi_close` rejects every request left unanswered (their requesters get
//!   `FI_ECONNREFUSED`), frees their handles, and drops the listener's events the EQ still
//!   holds.

use crate::abi::*;
use crate::eq::EqLink;
use crate::fabric::{fabric_ref, FabricSeat};
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
    /// `fi_control(FI_BACKLOG)` before `fi_listen`: the listener's backlog when it comes.
    backlog: Option<usize>,
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
    /// Counts the passive endpoint in its fabric until `fi_close` frees it.
    _fabric: FabricSeat,
}

/// A request handed to the application: `handle` is what `fi_info.handle` points to.
struct Request {
    handle: handles::Handle,
    /// The listener's fabric id, and the listener.
    listener_id: u64,
    pep: Weak<PepCore>,
    req: ConnReq,
}

/// The requests handed to the application and not answered yet, across listeners. A handle
/// is found here by its address, never read through: a handle already answered (freed) or
/// of another provider is simply not here, and no handle's address is ever given to another
/// request ([`handles`]), so a stale one never finds a newer request.
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
    requests().iter().any(|r| r.handle.is(handle))
}

/// The request behind `handle` and its listener: `FI_EINVAL` when it is none (answered, its
/// listener closed, or not a request of this provider).
fn request(call: &str, handle: *mut Fid) -> Result<(ConnReq, Arc<PepCore>), FiError> {
    let found = requests()
        .iter()
        .find(|r| r.handle.is(handle))
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
            .partition(|r| r.handle.is(handle));
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
        Some(r) => r.handle.as_ptr(),
        None => {
            let handle = handles::Handle::new(Fid {
                fclass: FI_CLASS_CONNREQ,
                context: core::ptr::null_mut(),
                ops: core::ptr::addr_of!(CONNREQ_FID_OPS).cast_mut(),
            })?;
            let at = handle.as_ptr();
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
    // The accept waits for the requester's READY as long as a request waits for its answer.
    // An endpoint that is not FI_EP_MSG has no such timeout, and the accept refuses it.
    let _ = ep.set_connect_timeout(crate::ep::connect_timeout_from_env());
    pep.accept(&req, ep, param)
        .map_err(|e| driver_error(call, &e))?;
    drop(st);
    answered(handle);
    Ok(())
}

static PEP_FID_OPS: FiOps = unsupported::fid_ops(pep_close, pep_bind, pep_control);

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
        let listen = unsafe { listen_info(info, f.api_version(), CALL) }?;
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
                    backlog: None,
                }),
            }),
            _fabric: f.seat(),
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
        // A listener is on this NIC: one asked to be at another fabric address would listen
        // where no requester looks.
        let ours = p.core.nic.fabric_addr();
        if let Some(want) = p.core.listen.src() {
            if !crate::info::same_ip(want.fabric_addr, ours) {
                return Err(FiError::new(
                    FiErrno::FI_EADDRNOTAVAIL,
                    format!("{CALL}: src_addr {want} is not on this NIC ({ours})"),
                ));
            }
        }
        let attr = EndpointAttr {
            job_id: p.core.listen.job_id(),
            ..EndpointAttr::default()
        };
        // A backlog set before: in force from the first request.
        let backlog = st.backlog.unwrap_or(uet_driver::cm::CM_BACKLOG);
        let listener = p
            .core
            .nic
            .passive_endpoint_with_backlog(attr, link.queue(), backlog)
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

/// `fi_control` of a passive endpoint: `FI_BACKLOG` (`int *`) sets how many connection
/// requests it holds unanswered, before or after `fi_listen`; more are refused, and their
/// requesters get `FI_ECONNREFUSED`. A value above the provider's most, 1,024, holds 1,024;
/// one below 1, or a NULL argument, is `-FI_EINVAL`. Other commands are `-FI_ENOSYS`.
unsafe extern "C" fn pep_control(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int {
    const CALL: &str = "fi_control";
    if command != FI_BACKLOG {
        // SAFETY: the caller's arguments, passed on as they came.
        return unsafe { unsupported::control(fid, command, arg) };
    }
    entry(CALL, || {
        // SAFETY: the application's passive endpoint.
        let p = unsafe { pep_ref(fid, CALL) }?;
        // SAFETY: NULL or an int (fi_endpoint(3): FI_BACKLOG takes an `int *`).
        let value = unsafe { arg.cast::<c_int>().as_ref() }.ok_or_else(|| null(CALL, "arg"))?;
        let backlog = usize::try_from(*value)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                FiError::inval(format!(
                    "{CALL}: FI_BACKLOG {value}: a listener holds at least one request"
                ))
            })?;
        let mut st = p.core.lock();
        match &st.listener {
            Some(listener) => {
                listener
                    .set_backlog(backlog)
                    .map_err(|e| driver_error(CALL, &e))?;
            }
            None => st.backlog = Some(backlog),
        }
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
pub(crate) const FI_OPT_ENDPOINT: c_int = 0;
/// `FI_OPT_MIN_MULTI_RECV`: the space below which a multi-receive buffer is released.
pub(crate) const FI_OPT_MIN_MULTI_RECV: c_int = 0;
/// `FI_OPT_CM_DATA_SIZE`: the connection data a connection message carries (read only).
pub(crate) const FI_OPT_CM_DATA_SIZE: c_int = 1;

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
    // SAFETY: the caller's promise.
    unsafe { put_size_opt(call, "FI_OPT_CM_DATA_SIZE", MAX_CM_DATA, optval, optlen) }
}

/// Answer a `fi_getopt` whose value is a `size_t`: `value` into `optval`, `*optlen` its size;
/// `FI_ETOOSMALL` with `*optlen` set when the buffer is shorter (or NULL).
///
/// # Safety
/// `optlen` is NULL or valid; `optval` is NULL or holds `*optlen` writable bytes.
pub(crate) unsafe fn put_size_opt(
    call: &str,
    name: &str,
    value: usize,
    optval: *mut c_void,
    optlen: *mut usize,
) -> Result<c_int, FiError> {
    // SAFETY: NULL or valid (the caller's promise).
    let len = unsafe { optlen.as_mut() }.ok_or_else(|| null(call, "optlen"))?;
    let size = core::mem::size_of::<usize>();
    if optval.is_null() || *len < size {
        let room = *len;
        *len = size;
        return Err(FiError::new(
            FiErrno::FI_ETOOSMALL,
            format!("{call}: {name} is a size_t of {size} bytes, the buffer {room}"),
        ));
    }
    // SAFETY: `optval` holds at least a `size_t` (checked above); it need not be aligned.
    unsafe { optval.cast::<usize>().write_unaligned(value) };
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

/// Request handles whose addresses are never given twice in the process: the address is
/// what names a request (the application passes nothing else to `fi_reject`), so a handle
/// kept after its request was answered must not become a newer request's, as a freed heap
/// block soon would.
///
/// Handles are carved in order out of regions of address space mapped for them
/// (`REGION_BYTES`, private and anonymous, backed only once written) and never mapped
/// elsewhere, one `SLOT_BYTES` slot each, never reused. A page all of whose handles are
/// answered gives its memory back (`MADV_DONTNEED`) and keeps its addresses: a stale
/// handle then reads as zeroes. A handle costs address space only, 32 bytes of it per
/// request over the process's life.
mod handles {
    use crate::abi::Fid;
    use std::collections::BTreeMap;
    use std::sync::{Mutex, PoisonError};
    use uet_av::{FiErrno, FiError};

    /// A handle's slot: a `Fid`, at an 8-byte aligned address; a power of two, so no slot
    /// straddles a page.
    const SLOT_BYTES: usize = 32;
    /// The address space mapped at once for handles: 512Ki of them.
    const REGION_BYTES: usize = 16 << 20;
    const _: () = assert!(core::mem::size_of::<Fid>() <= SLOT_BYTES);
    const _: () = assert!(core::mem::align_of::<Fid>() <= 8 && SLOT_BYTES.is_multiple_of(8));

    /// Where the next handle goes, and the pages holding handles not answered yet.
    struct Arena {
        /// Start of the region handles are carved from (0 before the first).
        region: usize,
        /// Offset of the next slot in it.
        next: usize,
        /// The page the last handle went to: the next may go there too.
        open_page: usize,
        /// Handles live, by page.
        live: BTreeMap<usize, u32>,
    }

    static ARENA: Mutex<Arena> = Mutex::new(Arena {
        region: 0,
        next: 0,
        open_page: 0,
        live: BTreeMap::new(),
    });

    fn page_bytes() -> usize {
        // SAFETY: sysconf reads a system constant.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n)
            .ok()
            .filter(|n| n.is_power_of_two() && *n >= SLOT_BYTES && REGION_BYTES.is_multiple_of(*n))
            .unwrap_or(4096)
    }

    /// A request's handle: a `Fid` at an address no other handle ever had. Its slot goes
    /// back (never to be given again) when it is dropped.
    pub(super) struct Handle(*mut Fid);

    // SAFETY: the `Fid` is written once, when the handle is made, and never again; its raw
    // pointers are a static ops table and a NULL context. The slot is only given back
    // through the arena's lock.
    unsafe impl Send for Handle {}

    impl Handle {
        /// `fid` in a new slot. `FI_ENOMEM` when no address space can be mapped for it.
        pub(super) fn new(fid: Fid) -> Result<Handle, FiError> {
            let mut a = ARENA.lock().unwrap_or_else(PoisonError::into_inner);
            if a.region == 0 || a.next + SLOT_BYTES > REGION_BYTES {
                // SAFETY: a new private anonymous mapping, placed by the kernel: it overlaps
                // nothing of the process.
                let at = unsafe {
                    libc::mmap(
                        core::ptr::null_mut(),
                        REGION_BYTES,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                if at == libc::MAP_FAILED {
                    return Err(FiError::new(
                        FiErrno::FI_ENOMEM,
                        format!(
                            "no address space for connection request handles: {}",
                            std::io::Error::last_os_error()
                        ),
                    ));
                }
                // The old region stays mapped: its addresses are never the kernel's to give
                // again.
                a.region = at as usize;
                a.next = 0;
            }
            let at = a.region + a.next;
            a.next += SLOT_BYTES;
            let page = at & !(page_bytes() - 1);
            if page != a.open_page {
                // The last page is full: once its handles are all answered, it goes.
                let full = core::mem::replace(&mut a.open_page, page);
                if full != 0 && !a.live.contains_key(&full) {
                    release(full);
                }
            }
            *a.live.entry(page).or_insert(0) += 1;
            let slot = at as *mut Fid;
            // SAFETY: a slot of a region mapped readable and writable above, never given
            // before, 8-byte aligned (the region is page aligned, slots are 32 bytes) and
            // large enough for a `Fid` (checked at compile time).
            unsafe { slot.write(fid) };
            Ok(Handle(slot))
        }

        /// The address the application holds.
        pub(super) fn as_ptr(&self) -> *mut Fid {
            self.0
        }

        /// Whether `fid` is this handle.
        pub(super) fn is(&self, fid: *const Fid) -> bool {
            core::ptr::eq(self.0, fid)
        }
    }

    impl Drop for Handle {
        fn drop(&mut self) {
            let mut a = ARENA.lock().unwrap_or_else(PoisonError::into_inner);
            let page = (self.0 as usize) & !(page_bytes() - 1);
            let left = a.live.get_mut(&page).map(|n| {
                *n -= 1;
                *n
            });
            if left == Some(0) {
                a.live.remove(&page);
                if page != a.open_page {
                    release(page);
                }
            }
        }
    }

    /// Give back the memory of a page whose handles are all answered; its addresses stay
    /// mapped (reading as zeroes), never to be given again.
    fn release(page: usize) {
        // SAFETY: a page of a handle region, which stays mapped; no handle in it is live,
        // and handles are never read through by this crate, so nothing refers to its
        // contents.
        let r =
            unsafe { libc::madvise(page as *mut libc::c_void, page_bytes(), libc::MADV_DONTNEED) };
        if r != 0 {
            tracing::debug!(
                page,
                error = %std::io::Error::last_os_error(),
                "a page of answered request handles kept"
            );
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn no_handle_address_is_given_twice_and_answered_pages_read_as_zeroes() {
            let fid = || Fid {
                fclass: 11,
                context: core::ptr::null_mut(),
                ops: core::ptr::null_mut(),
            };
            let mut seen = std::collections::HashSet::new();
            // Made and dropped one after another, as requests answered at once: a freed
            // heap block would come back every time.
            let mut first = None;
            for _ in 0..4 * page_bytes() / SLOT_BYTES {
                let h = Handle::new(fid()).unwrap();
                // SAFETY: a live handle, written when made.
                assert_eq!(unsafe { (*h.as_ptr()).fclass }, 11);
                assert!(seen.insert(h.as_ptr() as usize), "an address given twice");
                first.get_or_insert(h.as_ptr());
            }
            // The first page is full and its handles are answered: its memory is given
            // back, its addresses stay mapped.
            let first = first.unwrap();
            // SAFETY: the handle regions stay mapped for the process's life.
            assert_eq!(unsafe { core::ptr::read_volatile(first).fclass }, 0);
        }
    }
}
