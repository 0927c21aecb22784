//! `fi_scalable_ep`: an `FI_EP_RDM` endpoint of several transmit and receive contexts, one
//! address for all of them ([`uet_driver::ScalableEndpoint`]).
//!
//! | call | here |
//! |---|---|
//! | `fi_scalable_ep(domain, info, &sep, ctx)` | a `fid_ep` of class `FI_CLASS_SEP` with `ep_attr->tx_ctx_cnt` transmit and `rx_ctx_cnt` receive contexts (0 counts as 1; more than the NIC's `CAP_EP.max_tx_ctx`, `max_rx_ctx`, the domain's `max_ep_tx_ctx`, `max_ep_rx_ctx`, or `FI_SHARED_CONTEXT`: `-FI_EINVAL`; an `FI_EP_DGRAM` or `FI_EP_MSG` info, one asking for capabilities the provider does not serve (`caps`, `tx_attr->caps`, `rx_attr->caps`) or default flags it does not honour (`tx_attr->op_flags`, `rx_attr->op_flags`, which contexts opened without attributes take) or sizes beyond those `fi_getinfo` answers (`tx_attr->size`, `iov_limit`, `inject_size`, `rma_iov_limit`, `rx_attr->size`, `iov_limit`, `ep_attr->max_msg_size`), an order (`msg_order`, `comp_order`, `max_order_*_size`) or a protocol other than UET, an `addr_format` other than `FI_FORMAT_UNSPEC` and `FI_ADDR_STR`, or one whose `ep_attr->auth_key` is not the domain's JobID, from API 1.5: `-FI_EINVAL`) |
//! | `fi_scalable_ep_bind(sep, av, 0)` | its AV, which its contexts address through (an AV only, once: `-FI_EINVAL`; flags: `-FI_EBADFLAGS`; once it or a context is enabled: `-FI_EOPBADSTATE`) |
//! | `fi_tx_context(sep, i, attr, &ep, ctx)`, `fi_rx_context` | context `i`, a `fid_ep` of class `FI_CLASS_TX_CTX` / `FI_CLASS_RX_CTX` (index out of range `-FI_EINVAL`, open already `-FI_EBUSY`; a closed index whose old receives are still posted `-FI_EBUSY` or, on a NIC without RECV_CANCEL (or, for a multi-receive buffer, older than 1.19), `-FI_EOPBADSTATE`; a closed transmit index whose old injects are in flight `-FI_EBUSY`), before or after the scalable endpoint is enabled, and again after `fi_close` of the index's context (see below); `attr` gives its `op_flags` (on a receive context `FI_MULTI_RECV` with capabilities that leave it out: `-FI_EINVAL`) and gets the attributes it has |
//! | `fi_ep_bind(ctx, cq or counter, flags)` | its own CQ (`FI_TRANSMIT` on a transmit context, `FI_RECV` on a receive one, `FI_SELECTIVE_COMPLETION` on either) and counter (`FI_SEND`, `FI_RECV`); the other direction is `-FI_EBADFLAGS`, an AV or EQ `-FI_EINVAL` |
//! | `fi_enable(ctx)` | enables the context (`-FI_ENOCQ` without its CQ): it carries transfers from then on and binds nothing more. The first `fi_enable` of a context or of the scalable endpoint creates the endpoint and all its ring sets on the NIC (`-FI_ENOAV` without an AV bound to the scalable endpoint; `-FI_EINVAL` when the AV's `rx_ctx_bits` cannot name the receive contexts), so a context enabled before `fi_enable(sep)` has the endpoint's address and takes receives and sends at once |
//! | `fi_enable(sep)` | enables every open context (`-FI_ENOCQ` for one without its CQ, nothing enabled), creating the endpoint on the NIC if no context's `fi_enable` did (`-FI_ENOAV`, `-FI_EINVAL` as above); contexts enabled already keep what they posted |
//! | `fi_getname(sep)`, `fi_getname(ctx)` | the one address, once enabled |
//! | `fi_send*`, `fi_tsend*`, `fi_inject*`, `fi_tinject*` on a transmit context; `fi_recv*`, `fi_trecv*` on a receive context | as on an endpoint ([`crate::ep`]), once the context is enabled (`-FI_EOPBADSTATE` before); the other direction's calls are `-FI_EOPNOTSUPP`, and so is every transfer on the scalable endpoint itself |
//! | `fi_close(ctx)` | what the NIC completed reaches its CQ and counter, which it then unbinds; operations still outstanding are reported and counted nowhere, then or later, and posted receives' buffers are never written. A receive context's receives still posted are withdrawn from the NIC (RECV_CANCEL), so a message sent to the index while it is closed finds none (see *A closed index*); a receive a message is arriving into then completes on its own, reported nowhere (the ring set stays on the NIC until the scalable endpoint closes), and a multi-receive buffer, which stays posted after that message, is withdrawn at the first read of the ring set's CQs or counters after it (the transmit context's of the index, or the index's next `fi_rx_context`). Messages it claimed (`fi_trecvmsg` with `FI_PEEK \| FI_CLAIM`) and did not take are dropped from the NIC's unexpected list, for no later context of the index could take them |
//! | `fi_close(sep)` | `-FI_EBUSY` while a context is open; the endpoint leaves the NIC |
//!
//! Receive context `i` is the NIC's resource index `ri_start + i`: a peer reaches it with
//! `fi_rx_addr(fi_addr, i, rx_ctx_bits)` in an AV opened with `rx_ctx_bits` that number it,
//! and its message completes on that context's CQ only. A send to a context beyond the
//! target's receive contexts is refused at the target: the sender's completion is an error,
//! `FI_EADDRNOTAVAIL` with the NIC's reason.
//!
//! # What is shared
//!
//! The NIC's scalable endpoint is ring sets `0..max(tx_ctx_cnt, rx_ctx_cnt)`, each with its
//! own completion ring; ring set `k` serves transmit context `k` and receive context `k`.
//! Each ring set is one endpoint state of [`crate::ep`] (an [`EpShared`]: its driver
//! endpoint, message buffers and operations in flight, under one lock), which the transmit
//! context `k` and receive context `k` objects share, each binding its own direction's CQ
//! and counter in it. Threads driving contexts of different indices take different locks;
//! the two contexts of one index share one.
//!
//! # The order of the calls
//!
//! fi_endpoint(3) asks that an endpoint be bound before it is enabled and enabled before it
//! takes transfers, receives included; a context is "conceptually a receive-only (or
//! send-only) endpoint", with its own `fi_enable`, and the scalable endpoint's AV is bound
//! to it implicitly. It says nothing of the order of `fi_enable(sep)` and the contexts'
//! enables. So each context is enabled on its own: libfabric's fabtests `scalable_ep`
//! binds the AV, binds and enables each transmit context, binds and enables each receive
//! context and posts a receive on it at once (older versions) or after (newer ones), then
//! enables the scalable endpoint, and both work, as does enabling the scalable endpoint
//! alone, which enables the contexts open then.
//!
//! A context may be opened before or after the endpoint is on the NIC; one opened after
//! binds its CQ and is enabled by its own `fi_enable`.
//!
//! # A closed index
//!
//! The closed receive context's receives are gone from the NIC, so a message sent to its
//! index meanwhile is handled as at any endpoint without a receive: it waits on the NIC's
//! unexpected list (its send completes successfully, as every send that arrives before its
//! receive) until a context opened again on the index posts a receive that takes it; when
//! the list is full its sender retries it (the target's RC_UNDELIVERABLE, [`crate::ep`]),
//! up to `FI_UET_RNR_TIMEOUT`, then `FI_ENORX`. On a NIC older than host interface 1.17 an
//! untagged one fails at once (`FI_ENORX`). On a NIC older than host interface 1.14, which
//! has no RECV_CANCEL, the receives stay posted, and so does a multi-receive buffer on one
//! older than 1.19: a message that lands in one succeeds at the sender and is read off the
//! ring and discarded, its buffer untouched.
//!
//! # Opening an index again
//!
//! fi_endpoint(3) has `fi_tx_context` and `fi_rx_context` retrieve the context of an index,
//! which providers may allocate then, and `fi_close` release what the context holds; it
//! forbids no second context on an index whose first has closed. So `fi_tx_context` and
//! `fi_rx_context` open it again: a new context, not enabled and bound to nothing, on the
//! same ring set (same address, same resource index). It starts clean: the completions the
//! NIC made for the old context went to the old context's CQ and counter before its close,
//! or go nowhere; the old context's receives were withdrawn from the NIC at its close, and
//! one a message was arriving into then has completed or is withdrawn as the index opens
//! again, so no message meant for the new context lands in one. While one cannot be
//! withdrawn, `fi_rx_context` opens nothing: `-FI_EBUSY` when a message is arriving into it
//! (it completes shortly: try again); `-FI_EOPBADSTATE` when the NIC predates RECV_CANCEL
//! (host interface 1.14), or a multi-receive buffer is left and the NIC predates its
//! withdrawal (1.19), whose message names the NIC's interface: retrying does not help,
//! and the index opens again only once messages have taken the old receives, which may
//! never happen. Likewise `fi_tx_context` is `-FI_EBUSY` while an `fi_inject` of the old
//! transmit context is in flight: the NIC's inject completions carry no context, so one
//! would count on the new context's counter (or, failed, be reported on its CQ) as the new
//! context's; the NIC completes every send, so trying again opens the index. Tagged
//! messages the NIC holds unexpected for the index are the index's, not the old context's:
//! the new context's tagged receives match them.

use crate::abi::*;
use crate::av::UetAv;
use crate::domain::{domain_ref, UetDomain};
use crate::ep::{message_buffers, EpShared, IOV_LIMIT};
use crate::info::{EpKind, RX_OP_FLAGS, TX_OP_FLAGS};
use crate::pep::{address_in, put_address};
use crate::{entry, null, object_ref, unsupported};
use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use uet_av::{AddrFormat, FiErrno, FiError};
use uet_fwif::UetAddress;

/// A scalable endpoint: libfabric's `fid_ep` first.
#[repr(C)]
pub struct UetSep {
    fid: FidEp,
    domain: *const UetDomain,
    /// Transmit and receive contexts, at least 1 each.
    tx_ctx_cnt: usize,
    rx_ctx_cnt: usize,
    /// Ring set `k`, by index: the state transmit context `k` and receive context `k` share.
    lanes: Vec<Arc<EpShared>>,
    /// `tx_attr->op_flags`, `rx_attr->op_flags` of the `fi_info`: a context's defaults.
    tx_op_flags: u64,
    rx_op_flags: u64,
    /// `caps` of the `fi_info`: what a context's attributes may ask for.
    caps: u64,
    /// What every context has, whatever its attributes ask: returned in them.
    sizes: ContextSizes,
    addr_format: AddrFormat,
    /// `src_addr` of the `fi_info` it was opened with: the address it asked to have, which
    /// its enable checks the NIC gave it.
    src: Option<UetAddress>,
    state: Mutex<SepState>,
    /// Which open contexts are enabled (their own `fi_enable`, or the scalable endpoint's),
    /// by index: read without a lock by their transfers, written under `state`'s.
    tx_enabled: Vec<AtomicBool>,
    rx_enabled: Vec<AtomicBool>,
}

/// What changes, under the scalable endpoint's lock (taken before a ring set's).
struct SepState {
    av: Option<*const UetAv>,
    /// `fi_enable` of the scalable endpoint itself succeeded.
    enabled: bool,
    /// The endpoint and its ring sets are on the NIC: since the first `fi_enable` of it or of
    /// one of its contexts.
    created: bool,
    /// Which contexts are open, by index.
    tx_open: Vec<bool>,
    rx_open: Vec<bool>,
    /// Which were closed once the endpoint was on the NIC, by index: their ring set may
    /// still hold what they posted.
    tx_spent: Vec<bool>,
    rx_spent: Vec<bool>,
}

/// The scalable endpoint's lock, held by `fi_ep_bind` of a context that is not enabled
/// ([`UetSep::bind_guard`]), so that the context's `fi_enable` does not come between its
/// check and its binding.
pub(crate) struct BindGuard<'a> {
    _held: MutexGuard<'a, SepState>,
}

impl UetSep {
    fn lock(&self) -> MutexGuard<'_, SepState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `fi_close` of its transmit (`tx`) or receive context `index` ([`crate::ep`]):
    /// `unbind` takes the context's bindings off its ring set, under the scalable endpoint's
    /// lock (before the ring set's), which marks the context closed in the same hold. So no
    /// call that takes the lock (`fi_enable` of the scalable endpoint, which needs each open
    /// context's CQ; `fi_tx_context`, `fi_rx_context`; a context's `fi_ep_bind` and
    /// `fi_enable`) finds the context half closed: open, and its CQ unbound already.
    pub(crate) fn close_context(&self, tx: bool, index: usize, unbind: impl FnOnce()) {
        let mut st = self.lock();
        unbind();
        let created = st.created;
        let open = if tx { &mut st.tx_open } else { &mut st.rx_open };
        if let Some(o) = open.get_mut(index) {
            *o = false;
        }
        let spent = if tx {
            &mut st.tx_spent
        } else {
            &mut st.rx_spent
        };
        if let Some(o) = spent.get_mut(index) {
            *o = created;
        }
        if let Some(e) = self.enabled_flags(tx).get(index) {
            e.store(false, Ordering::Release);
        }
    }

    fn enabled_flags(&self, tx: bool) -> &[AtomicBool] {
        if tx {
            &self.tx_enabled
        } else {
            &self.rx_enabled
        }
    }

    /// Whether its transmit (`tx`) or receive context `index` is enabled: its transfers are
    /// `-FI_EOPBADSTATE` until it is.
    pub(crate) fn context_enabled(&self, tx: bool, index: usize) -> bool {
        self.enabled_flags(tx)
            .get(index)
            .is_some_and(|e| e.load(Ordering::Acquire))
    }

    /// For `fi_ep_bind` of its transmit (`tx`) or receive context `index`: the scalable
    /// endpoint's lock, held until the binding is made, or `FI_EOPBADSTATE` once the context
    /// is enabled (fi_endpoint(3): bound before enabled).
    pub(crate) fn bind_guard(
        &self,
        tx: bool,
        index: usize,
        call: &str,
    ) -> Result<BindGuard<'_>, FiError> {
        let st = self.lock();
        if self.context_enabled(tx, index) {
            return Err(FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!("{call}: the context is enabled"),
            ));
        }
        Ok(BindGuard { _held: st })
    }

    /// `fi_enable` of its transmit (`tx`) or receive context `index` on ring set `lane`: the
    /// context needs its CQ (`FI_ENOCQ`) and, as its address is the scalable endpoint's, the
    /// scalable endpoint on the NIC, which this creates if no `fi_enable` has yet
    /// (`FI_ENOAV` without an AV bound). From then on the context carries transfers, even
    /// before `fi_enable` of the scalable endpoint. Nothing changes on an error.
    pub(crate) fn enable_context(
        &self,
        tx: bool,
        index: usize,
        lane: &EpShared,
        call: &str,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        if self.context_enabled(tx, index) {
            return Ok(());
        }
        if !lane.has_cq(tx) {
            return Err(FiError::new(
                FiErrno::FI_ENOCQ,
                format!(
                    "{call}: bind a CQ to the context first (fi_ep_bind with {})",
                    if tx { "FI_TRANSMIT" } else { "FI_RECV" }
                ),
            ));
        }
        if !st.created {
            create(self, &st, call)?;
            st.created = true;
        }
        if let Some(e) = self.enabled_flags(tx).get(index) {
            e.store(true, Ordering::Release);
        }
        // A thread asleep on its CQ or counter armed the rings it could read then; this one
        // may have been bound since.
        lane.wake();
        Ok(())
    }
}

pub(crate) static SEP_FID_OPS: FiOps = unsupported::fid_ops(sep_close, sep_bind, sep_control);

static SEP_OPS: FiOpsEp = FiOpsEp {
    size: core::mem::size_of::<FiOpsEp>(),
    cancel: sep_cancel,
    getopt: sep_getopt,
    setopt: unsupported::ep_setopt,
    tx_ctx: sep_tx_ctx,
    rx_ctx: sep_rx_ctx,
    rx_size_left: unsupported::ep_size_left,
    tx_size_left: unsupported::ep_size_left,
};

static SEP_CM_OPS: FiOpsCm = FiOpsCm {
    size: core::mem::size_of::<FiOpsCm>(),
    setname: unsupported::cm_setname,
    getname: sep_getname,
    getpeer: unsupported::cm_getpeer,
    connect: unsupported::cm_connect,
    listen: unsupported::cm_listen,
    accept: unsupported::cm_accept,
    reject: unsupported::cm_reject,
    shutdown: unsupported::cm_shutdown,
    join: unsupported::cm_join,
};

/// Whether `fid` is a scalable endpoint of this provider.
///
/// # Safety
/// `fid` is NULL or a live libfabric object.
pub(crate) unsafe fn is_sep(fid: *const Fid) -> bool {
    // SAFETY: the caller's promise; only the `struct fid` is read.
    unsafe { fid.as_ref() }
        .is_some_and(|f| f.fclass == FI_CLASS_SEP && core::ptr::eq(f.ops, &SEP_FID_OPS))
}

/// The provider's scalable endpoint behind a `fid` pointer.
///
/// # Safety
/// `fid` is NULL or a live libfabric object.
unsafe fn sep_ref<'a>(fid: *const Fid, call: &str) -> Result<&'a UetSep, FiError> {
    // SAFETY: the caller's promise.
    unsafe { object_ref(fid, FI_CLASS_SEP, &SEP_FID_OPS, call, "scalable endpoint") }
}

/// A context count of an `fi_info` (0: 1), against the NIC's `max`. `FI_EINVAL` for
/// `FI_SHARED_CONTEXT` and above `max`.
fn count(call: &str, name: &str, n: usize, max: usize) -> Result<usize, FiError> {
    if n == FI_SHARED_CONTEXT {
        return Err(FiError::inval(format!(
            "{call}: ep_attr->{name} is FI_SHARED_CONTEXT: the uet provider shares no contexts"
        )));
    }
    if n > max {
        return Err(FiError::inval(format!(
            "{call}: ep_attr->{name} {n} is more than the NIC's or the domain's {max}"
        )));
    }
    Ok(n.max(1))
}

/// `fi_scalable_ep`.
pub(crate) unsafe extern "C" fn domain_scalable_ep(
    domain: *mut FidDomain,
    info: *mut c_void,
    sep: *mut *mut c_void,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_scalable_ep";
    entry(CALL, || {
        // SAFETY: the application's domain pointer.
        let d = unsafe { domain_ref(domain, CALL) }?;
        if sep.is_null() {
            return Err(null(CALL, "sep"));
        }
        // SAFETY: NULL or a valid fi_info (libfabric's contract).
        let info = unsafe { info.cast::<FiInfo>().as_ref() }.ok_or_else(|| null(CALL, "info"))?;
        let (max_tx, max_rx, sizes, checked, ours) = {
            let guard = d.lock()?;
            let dom = guard
                .as_ref()
                .ok_or_else(|| FiError::inval(format!("{CALL}: the domain is closed")))?;
            let (tx, rx) = crate::info::context_limits(dom.nic());
            // The domain's own bounds, 0 for the NIC's.
            let within = |nic: usize, domain: usize| {
                if domain == 0 {
                    nic
                } else {
                    nic.min(domain)
                }
            };
            let base = dom.endpoint_attr();
            // The ring sizes `create` gives every ring set.
            let sizes = ContextSizes {
                inject_size: EpKind::Rdm.inject_size(dom.nic()),
                tx_size: 1 << base.tx_log2,
                rx_size: 1 << base.rx_log2,
            };
            // SAFETY: NULL or valid attributes of a valid fi_info.
            let checked = unsafe {
                crate::info::endpoint_info_refused(
                    info,
                    EpKind::Rdm,
                    dom.nic(),
                    base.job_id,
                    d.api_version,
                )
            };
            (
                within(tx, d.max_ep_tx_ctx),
                within(rx, dom.attr().max_ep_rx_ctx),
                sizes,
                checked,
                dom.nic().fabric_addr(),
            )
        };
        let addr_format = checked.map_err(|why| FiError::inval(format!("{CALL}: {why}")))?;
        // SAFETY: a valid fi_info.
        let src = unsafe { crate::info::src_addr(info, addr_format, CALL) }?;
        if let Some(want) = src {
            crate::ep::check_src_fabric_addr(&want, ours, CALL)?;
        }
        let (mut tx, mut rx) = (1, 1);
        // SAFETY: NULL or valid attributes of a valid fi_info.
        if let Some(a) = unsafe { info.ep_attr.as_ref() } {
            let kind = EpKind::from_raw(a.ep_type)
                .map_err(|why| FiError::inval(format!("{CALL}: {why}")))?
                .unwrap_or_default();
            if kind != EpKind::Rdm {
                return Err(FiError::inval(format!(
                    "{CALL}: scalable endpoints are FI_EP_RDM, not {}",
                    kind.name()
                )));
            }
            tx = count(CALL, "tx_ctx_cnt", a.tx_ctx_cnt, max_tx)?;
            rx = count(CALL, "rx_ctx_cnt", a.rx_ctx_cnt, max_rx)?;
        }
        // SAFETY: NULL or valid attributes of a valid fi_info.
        let tx_op_flags = unsafe { info.tx_attr.as_ref() }.map_or(0, |a| a.op_flags);
        // SAFETY: as above.
        let rx_op_flags = unsafe { info.rx_attr.as_ref() }.map_or(0, |a| a.op_flags);
        // Its receive contexts report sources when it was opened with FI_SOURCE (fi_cq(3)),
        // unless a context's own capabilities leave it out.
        let sources = info.caps == 0 || info.caps & FI_SOURCE_CAP != 0;
        d.endpoints.fetch_add(1, Ordering::AcqRel);
        let boxed = Box::new(UetSep {
            fid: FidEp {
                fid: Fid {
                    fclass: FI_CLASS_SEP,
                    context,
                    ops: core::ptr::addr_of!(SEP_FID_OPS).cast_mut(),
                },
                ops: core::ptr::addr_of!(SEP_OPS).cast_mut(),
                cm: core::ptr::addr_of!(SEP_CM_OPS).cast_mut(),
                // Transfers on the scalable endpoint itself are refused (-FI_EOPNOTSUPP) by
                // the endpoint's calls, which tell it from its contexts.
                msg: core::ptr::addr_of!(crate::ep::EP_MSG_OPS).cast_mut(),
                rma: core::ptr::addr_of!(unsupported::RMA_OPS).cast_mut(),
                tagged: core::ptr::addr_of!(crate::ep::EP_TAGGED_OPS).cast_mut(),
                atomic: core::ptr::addr_of!(unsupported::ATOMIC_OPS).cast_mut(),
                collective: core::ptr::addr_of!(unsupported::COLLECTIVE_OPS).cast_mut(),
            },
            domain: d,
            tx_ctx_cnt: tx,
            rx_ctx_cnt: rx,
            lanes: (0..tx.max(rx)).map(|_| EpShared::lane(sources)).collect(),
            tx_op_flags,
            rx_op_flags,
            caps: info.caps,
            sizes,
            addr_format,
            src,
            state: Mutex::new(SepState {
                av: None,
                enabled: false,
                created: false,
                tx_open: vec![false; tx],
                rx_open: vec![false; rx],
                tx_spent: vec![false; tx],
                rx_spent: vec![false; rx],
            }),
            tx_enabled: (0..tx).map(|_| AtomicBool::new(false)).collect(),
            rx_enabled: (0..rx).map(|_| AtomicBool::new(false)).collect(),
        });
        // SAFETY: `sep` is non-NULL and writable (libfabric's contract).
        unsafe { *sep = Box::into_raw(boxed).cast() };
        Ok(0)
    })
}

/// `fi_scalable_ep_bind`: the AV, once.
unsafe extern "C" fn sep_bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    const CALL: &str = "fi_scalable_ep_bind";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let s = unsafe { sep_ref(fid, CALL) }?;
        // SAFETY: NULL or a live object (libfabric's contract).
        let b = unsafe { bfid.as_ref() }.ok_or_else(|| null(CALL, "bfid"))?;
        if b.fclass != FI_CLASS_AV {
            return Err(FiError::inval(format!(
                "{CALL}: fid class {}: a scalable endpoint binds an AV; its contexts bind \
                 their CQs and counters (fi_ep_bind)",
                b.fclass
            )));
        }
        // SAFETY: a live object of class AV.
        let av = unsafe { crate::av::av_ref(bfid.cast(), CALL) }?;
        if flags != 0 {
            return Err(FiError::badflags(format!(
                "{CALL}: flags {flags:#x} with an AV"
            )));
        }
        let mut st = s.lock();
        if st.created {
            return Err(FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!(
                    "{CALL}: the scalable endpoint is enabled (fi_enable of it or of one of \
                     its contexts)"
                ),
            ));
        }
        if st.av.is_some() {
            return Err(FiError::inval(format!("{CALL}: an AV is bound already")));
        }
        av.eps.fetch_add(1, Ordering::AcqRel);
        st.av = Some(av);
        Ok(0)
    })
}

/// `fi_enable` of the scalable endpoint: the endpoint and its ring sets on the NIC, unless
/// the `fi_enable` of a context put them there already, and every open context enabled.
unsafe extern "C" fn sep_control(fid: *mut Fid, command: c_int, _arg: *mut c_void) -> c_int {
    const CALL: &str = "fi_enable";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let s = unsafe { sep_ref(fid, CALL) }?;
        if command != FI_ENABLE {
            return Err(FiError::new(
                FiErrno::FI_ENOSYS,
                format!("fi_control: command {command} is not served on a scalable endpoint"),
            ));
        }
        let mut st = s.lock();
        if st.enabled {
            return Ok(0);
        }
        if st.av.is_none() {
            return Err(no_av(CALL));
        }
        // Every open context is enabled with it, and so needs its CQ.
        for (tx, open) in [(true, &st.tx_open), (false, &st.rx_open)] {
            for (k, _) in open.iter().enumerate().filter(|(_, &o)| o) {
                if !s.lanes.get(k).is_some_and(|l| l.has_cq(tx)) {
                    return Err(FiError::new(
                        FiErrno::FI_ENOCQ,
                        format!(
                            "{CALL}: {} context {k} has no CQ bound (fi_ep_bind with {})",
                            if tx { "transmit" } else { "receive" },
                            if tx { "FI_TRANSMIT" } else { "FI_RECV" }
                        ),
                    ));
                }
            }
        }
        if !st.created {
            create(s, &st, CALL)?;
            st.created = true;
        }
        for (tx, open) in [(true, &st.tx_open), (false, &st.rx_open)] {
            for (k, _) in open.iter().enumerate().filter(|(_, &o)| o) {
                if let Some(e) = s.enabled_flags(tx).get(k) {
                    e.store(true, Ordering::Release);
                }
                // As a context's own `fi_enable` does: a thread asleep on its CQ or counter
                // armed the ring sets it could read then, and the context may have bound
                // them since (after another `fi_enable` put the endpoint on the NIC).
                if let Some(lane) = s.lanes.get(k) {
                    lane.wake();
                }
            }
        }
        st.enabled = true;
        Ok(0)
    })
}

/// `FI_ENOAV` for an `fi_enable` (`call`) before `fi_scalable_ep_bind`.
fn no_av(call: &str) -> FiError {
    FiError::new(
        FiErrno::FI_ENOAV,
        format!("{call}: no AV is bound to the scalable endpoint (fi_scalable_ep_bind)"),
    )
}

/// Create the scalable endpoint on the NIC and give each ring set to its state
/// (`fi_enable` of the scalable endpoint or of one of its contexts, `call`). `FI_ENOAV`
/// without an AV. Nothing changes on an error.
fn create(s: &UetSep, st: &SepState, call: &str) -> Result<(), FiError> {
    let av = st.av.ok_or_else(|| no_av(call))?;
    // SAFETY: the domain outlives its endpoints (it counts them).
    let domain = unsafe { &*s.domain };
    let guard = domain.lock()?;
    let dom = guard
        .as_ref()
        .ok_or_else(|| FiError::inval(format!("{call}: the domain is closed")))?;
    let tx = u8::try_from(s.tx_ctx_cnt).map_err(|_| FiError::inval("tx_ctx_cnt"))?;
    let rx = u8::try_from(s.rx_ctx_cnt).map_err(|_| FiError::inval("rx_ctx_cnt"))?;
    let base = dom.endpoint_attr();
    let attr = uet_driver::EndpointAttr {
        ep_type: uet_driver::EpType::Rdm,
        tx_ctx_cnt: tx,
        rx_ctx_cnt: rx,
        // Receive context i is resource index ri_start + i.
        ri_count: base.ri_count.max(u16::from(rx)),
        ..base
    };
    // SAFETY: a bound AV cannot close while the scalable endpoint is bound to it.
    let sep = unsafe { &*av }.with_table(call, |table| {
        let bits = table.rx_ctx_bits();
        if s.rx_ctx_cnt > 1 && (bits >= 64 || (1u64 << bits) < s.rx_ctx_cnt as u64) {
            return Err(FiError::inval(format!(
                "{call}: the AV's rx_ctx_bits {bits} cannot name {} receive contexts \
                 (fi_av_open with rx_ctx_bits of at least {})",
                s.rx_ctx_cnt,
                (s.rx_ctx_cnt - 1).ilog2() + 1
            )));
        }
        dom.scalable_endpoint(attr, Some(table))
            .map_err(|e| FiError::new(e.errno(), format!("{call}: {e}")))
    })?;
    if let (Some(want), Some(got)) = (s.src.as_ref(), sep.address()) {
        // It goes again: dropped here.
        crate::ep::check_src_pid_on_fep(want, got, call)?;
    }
    let mut ready = Vec::with_capacity(s.lanes.len());
    for (k, ring_set) in sep.into_contexts().into_iter().enumerate() {
        // A buffer per ring entry of the directions the ring set serves.
        let mut slots = 0usize;
        if k < s.tx_ctx_cnt {
            slots += 1 << attr.tx_log2;
        }
        if k < s.rx_ctx_cnt {
            slots += (1 << attr.rx_log2) + (1 << attr.trx_log2);
        }
        let pool = message_buffers(dom.nic(), EpKind::Rdm, slots)
            .map_err(|e| FiError::new(e.errno(), format!("{call}: message buffers: {e}")))?;
        let tx_entries = if k < s.tx_ctx_cnt {
            1usize << attr.tx_log2
        } else {
            0
        };
        ready.push((ring_set, pool, tx_entries));
    }
    if ready.len() != s.lanes.len() {
        return Err(FiError::new(
            FiErrno::FI_EOTHER,
            format!(
                "{call}: the NIC gave {} ring sets for {} contexts",
                ready.len(),
                s.lanes.len()
            ),
        ));
    }
    for ((ring_set, pool, tx_entries), lane) in ready.into_iter().zip(&s.lanes) {
        lane.install(
            ring_set,
            pool,
            crate::ep::retry_policy(dom.nic(), EpKind::Rdm),
            tx_entries,
        );
    }
    Ok(())
}

/// `fi_tx_context`.
unsafe extern "C" fn sep_tx_ctx(
    sep: *mut FidEp,
    index: c_int,
    attr: *mut FiTxAttr,
    tx_ep: *mut *mut FidEp,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_tx_context";
    // SAFETY: libfabric's contract on every argument.
    entry(CALL, || unsafe {
        context_call(sep, true, index, attr, tx_ep, context, CALL)
    })
}

/// `fi_rx_context`.
unsafe extern "C" fn sep_rx_ctx(
    sep: *mut FidEp,
    index: c_int,
    attr: *mut FiRxAttr,
    rx_ep: *mut *mut FidEp,
    context: *mut c_void,
) -> c_int {
    const CALL: &str = "fi_rx_context";
    // SAFETY: libfabric's contract on every argument.
    entry(CALL, || unsafe {
        context_call(sep, false, index, attr, rx_ep, context, CALL)
    })
}

/// `fi_tx_context` (`tx`) or `fi_rx_context`: check what the attributes ask of the context
/// ([`ContextAttr::check`]), open it ([`open_context`]), and only then fill the attributes
/// with what it serves: a context that does not open leaves them untouched.
///
/// # Safety
/// `sep` is NULL or a scalable endpoint of the provider, `attr` NULL or valid attributes,
/// `out` NULL or writable (libfabric's contract).
unsafe fn context_call<A: ContextAttrs>(
    sep: *mut FidEp,
    tx: bool,
    index: c_int,
    attr: *mut A,
    out: *mut *mut FidEp,
    context: *mut c_void,
    call: &str,
) -> Result<c_int, FiError> {
    // SAFETY: the application's scalable endpoint.
    let s = unsafe { sep_ref(sep.cast(), call) }?;
    let (kind, served, allowed, mut op_flags) = if tx {
        let served = crate::info::TX_CAPS & s.caps_or_all();
        ("transmit", served, TX_OP_FLAGS, s.tx_op_flags)
    } else {
        let served =
            (FI_MSG | FI_TAGGED | FI_RECV | FI_SOURCE_CAP | FI_MULTI_RECV) & s.caps_or_all();
        ("receive", served, RX_OP_FLAGS, s.rx_op_flags)
    };
    // SAFETY: NULL or valid attributes (libfabric's contract).
    let attr = unsafe { attr.as_mut() };
    let mut caps = 0;
    if let Some(a) = attr.as_ref() {
        let asked = a.asked();
        asked.check(call, kind, served, allowed)?;
        op_flags = asked.op_flags;
        caps = asked.caps;
    }
    // A receive context reports sources when it has FI_SOURCE (fi_cq(3)): its scalable
    // endpoint's, unless its own capabilities leave it out.
    let sources = served & FI_SOURCE_CAP != 0 && (caps == 0 || caps & FI_SOURCE_CAP != 0);
    // And multi-receive buffers, likewise.
    let multi_recv = served & FI_MULTI_RECV != 0 && (caps == 0 || caps & FI_MULTI_RECV != 0);
    // Default flags with FI_MULTI_RECV make every flagless receive a multi-receive buffer,
    // which a context without the capability refuses: refused here, as `fi_endpoint` refuses
    // them.
    if !tx && op_flags & FI_MULTI_RECV != 0 && !multi_recv {
        return Err(FiError::inval(format!(
            "{call}: rx_attr->op_flags {op_flags:#x} hold FI_MULTI_RECV, which the receive \
             context's capabilities leave out"
        )));
    }
    let which = if tx {
        Direction::Transmit
    } else {
        Direction::Receive {
            sources,
            multi_recv,
        }
    };
    // SAFETY: libfabric's contract on `out`.
    let ret = unsafe { open_context(s, which, index, op_flags, out.cast(), context, call) }?;
    if let Some(a) = attr {
        a.fill(served, &s.sizes);
    }
    Ok(ret)
}

/// The sizes a context has: its scalable endpoint's rings and inject slots, which no
/// context's attributes change (fi_endpoint(3): support for per-context attributes is
/// provider specific, and the provider returns the ones the context has).
#[derive(Clone, Copy)]
struct ContextSizes {
    /// `tx_attr->inject_size`.
    inject_size: usize,
    /// `tx_attr->size`: the transmit ring's entries.
    tx_size: usize,
    /// `rx_attr->size`: the receive ring's entries.
    rx_size: usize,
}

/// The attributes `fi_tx_context` and `fi_rx_context` take: what they ask, and what an open
/// context answers in them.
trait ContextAttrs {
    /// What the attributes ask of the context.
    fn asked(&self) -> ContextAttr;
    /// The answer of a context that opened, serving `served` capabilities (named when the
    /// application asked for none), with the `sizes` it has.
    fn fill(&mut self, served: u64, sizes: &ContextSizes);
}

impl ContextAttrs for FiTxAttr {
    fn asked(&self) -> ContextAttr {
        ContextAttr {
            caps: self.caps,
            op_flags: self.op_flags,
            msg_order: self.msg_order,
            comp_order: self.comp_order,
        }
    }

    fn fill(&mut self, served: u64, sizes: &ContextSizes) {
        if self.caps == 0 {
            self.caps = served;
        }
        self.mode = 0;
        self.inject_size = sizes.inject_size;
        self.size = sizes.tx_size;
        self.iov_limit = IOV_LIMIT;
        self.rma_iov_limit = 0;
    }
}

impl ContextAttrs for FiRxAttr {
    fn asked(&self) -> ContextAttr {
        ContextAttr {
            caps: self.caps,
            op_flags: self.op_flags,
            msg_order: self.msg_order,
            comp_order: self.comp_order,
        }
    }

    fn fill(&mut self, served: u64, sizes: &ContextSizes) {
        if self.caps == 0 {
            self.caps = served;
        }
        self.mode = 0;
        self.size = sizes.rx_size;
        self.iov_limit = IOV_LIMIT;
    }
}

/// What `fi_tx_context` and `fi_rx_context` ask of a context in their attributes.
struct ContextAttr {
    caps: u64,
    op_flags: u64,
    msg_order: u64,
    comp_order: u64,
}

impl ContextAttr {
    /// `FI_EINVAL` for capabilities or default flags a `kind` context does not serve, or an
    /// order (messages travel unordered).
    fn check(&self, call: &str, kind: &str, caps: u64, op_flags: u64) -> Result<(), FiError> {
        if self.caps & !caps != 0 || self.op_flags & !op_flags != 0 {
            return Err(FiError::inval(format!(
                "{call}: attr caps {:#x}, op_flags {:#x}: a {kind} context serves caps \
                 {caps:#x} and op_flags {op_flags:#x}",
                self.caps, self.op_flags
            )));
        }
        if self.msg_order != 0 || self.comp_order != 0 {
            return Err(FiError::inval(format!(
                "{call}: attr msg_order {:#x}, comp_order {:#x}: messages travel unordered",
                self.msg_order, self.comp_order
            )));
        }
        Ok(())
    }
}

impl UetSep {
    /// The `fi_info`'s caps, or every cap the provider offers when it named none.
    fn caps_or_all(&self) -> u64 {
        if self.caps == 0 {
            u64::MAX
        } else {
            self.caps
        }
    }
}

/// The direction of a context [`open_context`] opens.
#[derive(Clone, Copy)]
enum Direction {
    Transmit,
    /// A receive context, which reports its receives' sources or not, and posts
    /// multi-receive buffers (`FI_MULTI_RECV`) or not.
    Receive {
        sources: bool,
        multi_recv: bool,
    },
}

/// Open context `index` of direction `which` into `*out`.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn open_context(
    s: &UetSep,
    which: Direction,
    index: c_int,
    op_flags: u64,
    out: *mut *mut FidEp,
    context: *mut c_void,
    call: &str,
) -> Result<c_int, FiError> {
    let tx = matches!(which, Direction::Transmit);
    if out.is_null() {
        return Err(null(call, if tx { "tx_ep" } else { "rx_ep" }));
    }
    let cnt = if tx { s.tx_ctx_cnt } else { s.rx_ctx_cnt };
    let what = if tx { "transmit" } else { "receive" };
    let k = usize::try_from(index)
        .ok()
        .filter(|&k| k < cnt)
        .ok_or_else(|| {
            FiError::inval(format!(
                "{call}: index {index}: the scalable endpoint has {cnt} {what} contexts"
            ))
        })?;
    let lane = s
        .lanes
        .get(k)
        .cloned()
        .ok_or_else(|| FiError::inval(format!("{call}: index {index}")))?;
    let mut st = s.lock();
    let open = if tx { &st.tx_open } else { &st.rx_open };
    if open.get(k).copied().unwrap_or(false) {
        return Err(FiError::new(
            FiErrno::FI_EBUSY,
            format!("{call}: {what} context {k} is open already"),
        ));
    }
    let spent = if tx { &st.tx_spent } else { &st.rx_spent };
    if spent.get(k).copied().unwrap_or(false) {
        // Closed once the ring set was on the NIC: it starts clean of what that context
        // posted.
        lane.reclaim(tx, call)?;
    }
    let st = &mut *st;
    let (open, spent) = if tx {
        (&mut st.tx_open, &mut st.tx_spent)
    } else {
        (&mut st.rx_open, &mut st.rx_spent)
    };
    if let (Some(o), Some(sp)) = (open.get_mut(k), spent.get_mut(k)) {
        *o = true;
        *sp = false;
    }
    let mut caps = if tx { FI_SEND } else { FI_RECV };
    if let Direction::Receive {
        sources,
        multi_recv,
    } = which
    {
        lane.report_sources(sources);
        if multi_recv {
            caps |= FI_MULTI_RECV;
        }
    }
    let ep = crate::ep::open_context(
        s,
        s.domain,
        lane,
        tx,
        k,
        op_flags,
        caps,
        s.addr_format,
        context,
    );
    // SAFETY: `out` is non-NULL and writable (the caller's promise).
    unsafe { *out = ep };
    Ok(0)
}

/// `fi_cancel` on the scalable endpoint itself: it posts nothing (its receive contexts do,
/// and `fi_cancel` on a receive context cancels its receives), so nothing is found.
unsafe extern "C" fn sep_cancel(_fid: *mut Fid, context: *mut c_void) -> isize {
    entry("fi_cancel", || {
        Err(FiError::new(
            FiErrno::FI_ENOENT,
            format!(
                "fi_cancel: context {context:p}: a scalable endpoint posts no operation itself; \
                 cancel a receive on its receive context"
            ),
        ))
    }) as isize
}

/// `fi_getopt`: no option is served.
unsafe extern "C" fn sep_getopt(
    _fid: *mut Fid,
    level: c_int,
    optname: c_int,
    _optval: *mut c_void,
    _optlen: *mut usize,
) -> c_int {
    entry("fi_getopt", || {
        Err(FiError::new(
            FiErrno::FI_ENOPROTOOPT,
            format!(
                "fi_getopt: level {level}, option {optname}: a scalable endpoint serves no option"
            ),
        ))
    })
}

/// `fi_getname`: the one address of the endpoint and its contexts, once enabled.
unsafe extern "C" fn sep_getname(fid: *mut Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    const CALL: &str = "fi_getname";
    entry(CALL, || {
        // SAFETY: called through the scalable endpoint's own ops.
        let s = unsafe { sep_ref(fid, CALL) }?;
        if addrlen.is_null() {
            return Err(null(CALL, "addrlen"));
        }
        let a = s.lanes.first().and_then(|l| l.address()).ok_or_else(|| {
            FiError::new(
                FiErrno::FI_EOPBADSTATE,
                format!("{CALL}: the scalable endpoint has its address once enabled (fi_enable)"),
            )
        })?;
        let bytes = address_in(s.addr_format, &a, CALL)?;
        // SAFETY: libfabric's contract on `addr` and `addrlen`.
        unsafe { put_address(CALL, &bytes, addr, addrlen) }
    })
}

/// `fi_close`: `-FI_EBUSY` while a context is open; the endpoint leaves the NIC.
unsafe extern "C" fn sep_close(fid: *mut Fid) -> c_int {
    const CALL: &str = "fi_close(sep)";
    entry(CALL, || {
        // SAFETY: called through the fid's own ops.
        let s = unsafe { sep_ref(fid, CALL) }?;
        let av = {
            let mut st = s.lock();
            let open = st.tx_open.iter().chain(&st.rx_open).filter(|&&o| o).count();
            if open > 0 {
                return Err(FiError::new(
                    FiErrno::FI_EBUSY,
                    format!("{CALL}: {open} context(s) of the scalable endpoint are open"),
                ));
            }
            // Contexts before the endpoint's own ring set (the driver destroys the endpoint
            // after its last ring set goes in any case).
            for lane in s.lanes.iter().rev() {
                drop(lane.uninstall());
            }
            st.av.take()
        };
        if let Some(av) = av {
            // SAFETY: a bound AV stays open while the endpoint is bound to it.
            unsafe { &*av }.eps.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: the domain outlives its endpoints.
        unsafe { &*s.domain }
            .endpoints
            .fetch_sub(1, Ordering::AcqRel);
        // SAFETY: made by `Box::into_raw` in `domain_scalable_ep`; the application gives it
        // up.
        drop(unsafe { Box::from_raw(fid.cast::<UetSep>()) });
        Ok(0)
    })
}
