//! `libuet-fi.so`: the `uet` libfabric provider, libfabric's C ABI on the uet-nic driver.
//!
//! libfabric loads the library from `FI_PROVIDER_PATH` (or its own provider directory), calls
//! [`fi_prov_ini`] for the provider's entry points, and from then on an application's
//! `fi_getinfo`, `fi_fabric`, `fi_domain` and `fi_av_*` calls land here, on the same Rust
//! objects a Rust program of the driver uses: [`uet_driver::Nic`], [`uet_driver::Domain`] and
//! [`uet_driver::Av`], whose AV entries live in the NIC's translation table.
//!
//! ```sh
//! cargo build --release -p uet-provider
//! mkdir -p prov && ln -sf "$PWD/target/release/libuet_fi.so" prov/libuet-fi.so
//! FI_PROVIDER_PATH=$PWD/prov FI_PROVIDER=uet fi_info -p uet
//! ```
//!
//! # What it serves
//!
//! The provider is built for the libfabric 1.17 ABI ([`abi`]), the oldest with every call it
//! serves; libfabric 1.x from 1.17 on loads it. It offers one `fi_info` per endpoint type,
//! `FI_EP_RDM`, `FI_EP_DGRAM` and then `FI_EP_MSG` ([`info::EpKind`]), each with
//! `FI_THREAD_SAFE`, `FI_PROGRESS_AUTO`, `FI_AV_TABLE`, the NIC's limits as the domain's,
//! messages (`FI_MSG`, `FI_TAGGED`, `FI_SOURCE`) and, but for `FI_EP_MSG` (which binds no
//! AV), the AV's capabilities (`FI_SHARED_AV`, `FI_AV_USER_ID`);
//! addresses are the 32-byte UET address (`FI_FORMAT_UNSPEC`, the provider's own format) or
//! its string form (`FI_ADDR_STR`), as the hints ask.
//!
//! | call | here |
//! |---|---|
//! | `fi_getinfo` | [`info`]: hints matched, node and service as a UET address |
//! | `fi_fabric`, `fi_close` | [`fabric`]: the NIC; `-FI_EBUSY` while a domain, event queue or passive endpoint of it is open |
//! | `fi_domain`, `fi_close` | [`domain`]: a [`uet_driver::Domain`]; `-FI_EBUSY` while an AV is open |
//! | `fi_av_open`, `fi_av_bind`, `fi_av_insert`, `fi_av_insertsvc`, `fi_av_insertsym`, `fi_av_remove`, `fi_av_lookup`, `fi_av_straddr`, `fi_close` | [`av`]: a [`uet_driver::Av`] or, with a name, a shared one |
//! | `fi_eq_open`, `fi_eq_read`, `fi_eq_readerr`, `fi_eq_sread`, `fi_eq_write`, `fi_eq_strerror`, `fi_control` (`FI_GETWAIT`, `FI_GETWAITOBJ`), `fi_trywait`, `fi_close` | [`eq`]: a [`uet_driver::EventQueue`], where `FI_EVENT` AVs and connections report; waited on in `fi_eq_sread` or, `FI_WAIT_FD`, on a descriptor |
//!
//! | `fi_av_set`, `fi_av_set_union`, `fi_av_set_intersect`, `fi_av_set_diff`, `fi_av_set_insert`, `fi_av_set_remove`, `fi_av_set_addr`, `fi_close` | [`av_set`]: a [`uet_av::AvSet`] |
//!
//! | `fi_cq_open`, `fi_cq_read`, `fi_cq_readfrom`, `fi_cq_readerr`, `fi_cq_sread`, `fi_cq_sreadfrom`, `fi_cq_signal`, `fi_cq_strerror`, `fi_control` (`FI_GETWAIT`, `FI_GETWAITOBJ`), `fi_trywait`, `fi_close` | [`cq`]: completions of the endpoints bound to it |
//! | `fi_cntr_open`, `fi_cntr_read`, `fi_cntr_readerr`, `fi_cntr_add`, `fi_cntr_adderr`, `fi_cntr_set`, `fi_cntr_seterr`, `fi_cntr_wait`, `fi_control` (`FI_GETWAIT`, `FI_GETWAITOBJ`), `fi_trywait`, `fi_close` | [`cntr`]: completion counters of the sends and receives of the endpoints bound to it; waited on in `fi_cntr_wait` or, `FI_WAIT_FD`, on a descriptor |
//! | `fi_endpoint`, `fi_ep_bind`, `fi_enable`, `fi_getname`, `fi_getpeer`, `fi_connect`, `fi_accept`, `fi_shutdown`, `fi_send*`, `fi_inject*`, `fi_recv*`, `fi_tsend*`, `fi_tinject*`, `fi_trecv*`, `fi_cancel` (of a posted receive), `fi_close` | [`ep`]: an `FI_EP_RDM`, `FI_EP_DGRAM` or `FI_EP_MSG` [`uet_driver::Endpoint`] |
//! | `fi_scalable_ep`, `fi_scalable_ep_bind`, `fi_tx_context`, `fi_rx_context`, `fi_enable`, `fi_getname`, `fi_close` | [`sep`]: an `FI_EP_RDM` [`uet_driver::ScalableEndpoint`], each context an endpoint of [`ep`] on one of its ring sets, enabled by its own `fi_enable` or the scalable endpoint's, opened again on its index after its `fi_close`, receive contexts named by `fi_rx_addr` |
//! | `fi_passive_ep`, `fi_pep_bind`, `fi_listen`, `fi_getname`, `fi_reject`, `fi_close` | [`pep`]: a [`uet_driver::PassiveEndpoint`] and its connection requests |
//!
//! RMA, atomics, memory registration and shared contexts (`fi_stx_context`,
//! `fi_srx_context`) are the driver's today or not at all, and not yet the provider's: their
//! calls return `-FI_ENOSYS` (and so does `fi_cntr_open` of a
//! counter waited on through a wait set; `fi_ep_bind` of a counter for RMA,
//! with `FI_READ`, `FI_WRITE`, `FI_REMOTE_READ` or `FI_REMOTE_WRITE`, is `-FI_EBADFLAGS`),
//! and `fi_getinfo` offers none of their capabilities, so an application that asks for them
//! is told `-FI_ENODATA` rather than given a provider that fails later.
//!
//! # The NIC
//!
//! `FI_UET_DEVICE` names it:
//! * unset or `sim`: a simulated NIC in this process (its fabric address `FI_UET_SIM_ADDR`,
//!   by default `10.0.0.1`), for applications and tests without hardware;
//! * `vfio-user:<socket>`: a NIC a simulator process serves (`uetctl sim serve`);
//! * `vfio:<PCI address>`: a NIC bound to `vfio-pci`.
//!
//! It is opened at the first `fi_getinfo` or `fi_fabric` and shared by every fabric of the
//! process until libfabric unloads the provider.
//!
//! # Connections
//!
//! `FI_UET_CONNECT_TIMEOUT` ([`ep::CONNECT_TIMEOUT_VAR`]) bounds how long `fi_connect` waits
//! for the listener's `fi_accept` or `fi_reject`, in milliseconds: 5000 by default, `0` for
//! no deadline (a value that is not a number is logged and the default taken). When it
//! passes, the endpoint's EQ gets an error entry (`fi_eq_readerr`) with the endpoint's fid
//! and `err = FI_ETIMEDOUT`, the endpoint is left as a refused one is (another `fi_connect`
//! is `-FI_EOPBADSTATE`), and an accept that comes later is refused, its endpoint getting
//! an error entry with `err = FI_ECONNABORTED`. It bounds as well how long an endpoint that
//! `fi_accept`ed waits for the requester to confirm that it took the accept in (the
//! requester's READY, which brings the accepting side's `FI_CONNECTED`): when it passes,
//! that endpoint's EQ gets an error entry with `err = FI_ETIMEDOUT`. It is read at each
//! `fi_connect` and `fi_accept`.
//!
//! # Errors
//!
//! Every call returns 0 or a negative fabric errno, as libfabric's; the reason is logged
//! through `tracing`, which goes to libfabric's log (`FI_LOG_LEVEL=debug`; see [`log`]) or,
//! with `RUST_LOG` set (`RUST_LOG=uet_fi=debug`), to standard error. A panic never crosses into C: it is caught at
//! the entry point and returned as `-FI_EOTHER`.

#![warn(missing_docs)]

pub mod abi;
pub mod av;
pub mod av_set;
pub mod cntr;
pub mod cq;
pub mod device;
pub mod domain;
pub mod ep;
pub mod eq;
pub mod fabric;
pub mod info;
pub mod log;
pub mod pep;
pub mod sep;
mod unsupported;
pub mod wait;

use abi::{FiContext, FiProvider, FI_PROVIDER_API};
use core::ffi::c_int;
use std::sync::{Mutex, OnceLock, PoisonError};
use uet_av::{FiErrno, FiError};

/// The provider's name, as `fi_info.fabric_attr->prov_name` and `FI_PROVIDER` spell it.
pub const PROVIDER_NAME: &str = "uet";

/// The provider's own version, `FI_VERSION(0, 1)`.
pub const PROVIDER_VERSION: u32 = abi::fi_version(0, 1);

/// Where the provider structure lives: made once, never freed (libfabric keeps the pointer
/// until it unloads the library, and may write to its `context`).
struct ProviderBox(*mut FiProvider);

// SAFETY: the pointer is written once, by `OnceLock`, and the structure it points to is only
// read by this crate; libfabric, which may write its `context`, serializes its own use.
unsafe impl Send for ProviderBox {}
// SAFETY: as for `Send`: this crate never writes through the pointer after making it.
unsafe impl Sync for ProviderBox {}

static PROVIDER: OnceLock<ProviderBox> = OnceLock::new();

/// libfabric's entry point into a provider library (`FI_EXT_INI`): the provider's version,
/// API, name and its `getinfo`, `fabric` and `cleanup` calls.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut FiProvider {
    PROVIDER
        .get_or_init(|| {
            let provider = Box::new(FiProvider {
                version: PROVIDER_VERSION,
                fi_version: FI_PROVIDER_API,
                context: FiContext {
                    internal: [core::ptr::null_mut(); 4],
                },
                name: c"uet".as_ptr(),
                getinfo: info::uet_getinfo,
                fabric: fabric::uet_fabric,
                cleanup: uet_cleanup,
            });
            let provider = Box::into_raw(provider);
            init_logging(provider);
            log::define_params(provider);
            ProviderBox(provider)
        })
        .0
}

/// Where the provider's `tracing` events go ([`log`]): with `RUST_LOG` set, to standard error,
/// filtered by it; otherwise to libfabric's log (`fi_log`, filtered by `FI_LOG_LEVEL`,
/// `FI_LOG_PROV` and `FI_LOG_SUBSYS`), where libfabric loaded the provider and logs anything.
/// A subscriber already installed (a Rust program linking the provider) is left as it is.
fn init_logging(provider: *const FiProvider) {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    } else if let Some(logger) = log::libfabric_logger(provider) {
        // Only when libfabric logs anything (`FI_LOG_LEVEL` set): otherwise the global
        // subscriber stays free for the program's own.
        if tracing::Subscriber::max_level_hint(&logger)
            != Some(tracing::level_filters::LevelFilter::OFF)
        {
            let _ = tracing::subscriber::set_global_default(logger);
        }
    }
}

/// `fi_provider.cleanup`: libfabric is unloading the provider; the NIC is closed.
unsafe extern "C" fn uet_cleanup() {
    let _ = std::panic::catch_unwind(device::close);
}

/// Run `f` for a C entry point: its error, logged, becomes the negative fabric errno; a panic
/// is caught and becomes `-FI_EOTHER`.
pub(crate) fn entry(call: &str, f: impl FnOnce() -> Result<c_int, FiError>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(ret)) => ret,
        Ok(Err(e)) => {
            tracing::debug!(call, errno = e.errno.name().unwrap_or("?"), "{}", e.message);
            neg(e.errno)
        }
        Err(_) => {
            tracing::error!(call, "panicked; returning -FI_EOTHER");
            neg(FiErrno::FI_EOTHER)
        }
    }
}

/// `-errno` as a C `int`.
pub(crate) fn neg(errno: FiErrno) -> c_int {
    c_int::try_from(errno.get()).map_or(c_int::MIN, |e| -e)
}

/// A `ssize_t` return of a queue read: the count `f` gives, or the negative errno.
pub(crate) fn ssize(call: &str, f: impl FnOnce() -> Result<usize, FiError>) -> isize {
    let mut n = 0usize;
    let ret = entry(call, || {
        n = f()?;
        Ok(0)
    });
    if ret == 0 {
        isize::try_from(n).unwrap_or(isize::MAX)
    } else {
        ret as isize
    }
}

/// The most bytes of error data (`domain_attr->max_err_data`) an error entry carries: its
/// message, cut to this length.
pub(crate) const MAX_ERR_DATA: usize = 1024;

/// The first API version whose applications may pass their own `err_data` buffer (1.5).
pub(crate) const FI_ERR_DATA_BUFFER_API: u32 = abi::fi_version(1, 5);

/// The `err_data` an EQ or CQ hands out when the application gives no buffer of its own: the
/// last error's message, NUL-terminated, owned by the queue until its next `readerr`
/// (fi_cq(3), fi_eq(3): "valid until a subsequent read call", which the application must
/// serialize with its use of the buffer).
#[derive(Default)]
pub(crate) struct OwnedErrData(Mutex<Box<[u8]>>);

impl OwnedErrData {
    /// An error entry's message (or the bytes that stand for it) for its `err_data`, at most [`MAX_ERR_DATA`] bytes of it.
    /// Copied into the application's buffer (`err_data`, `err_data_size` bytes), truncated to
    /// fit, when it gives one and speaks
    /// API 1.5 or later (`api_version`): `(err_data, bytes written)`. Otherwise the buffer is
    /// ignored, as the man pages say, and the message is kept here: `(the queue's copy, its
    /// length without the NUL)`, or NULL and 0 for an empty message.
    ///
    /// # Safety
    /// `err_data` is NULL or holds `err_data_size` writable bytes.
    pub(crate) unsafe fn give(
        &self,
        api_version: u32,
        message: &[u8],
        err_data: *mut core::ffi::c_void,
        err_data_size: usize,
    ) -> (*mut core::ffi::c_void, usize) {
        let message = message.get(..MAX_ERR_DATA).unwrap_or(message);
        let own_buffer = api_version >= FI_ERR_DATA_BUFFER_API;
        if own_buffer && !err_data.is_null() && err_data_size > 0 {
            let n = err_data_size.min(message.len());
            // SAFETY: the application's buffer of `err_data_size` bytes (the caller's
            // promise); `n` is at most that.
            unsafe { core::ptr::copy_nonoverlapping(message.as_ptr(), err_data.cast::<u8>(), n) };
            return (err_data, n);
        }
        if message.is_empty() {
            return (core::ptr::null_mut(), 0);
        }
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *kept = message.iter().copied().chain([0]).collect();
        (kept.as_mut_ptr().cast(), message.len())
    }
}

/// `fi_eq_strerror`, `fi_cq_strerror`: `generic` when `buf` is NULL or empty; otherwise `what`
/// and `prov_errno` written into `buf` (truncated, NUL-terminated), and `buf`.
///
/// # Safety
/// `buf` is NULL or holds `len` writable bytes.
pub(crate) unsafe fn strerror(
    generic: &'static core::ffi::CStr,
    what: &str,
    prov_errno: c_int,
    buf: *mut core::ffi::c_char,
    len: usize,
) -> *const core::ffi::c_char {
    if buf.is_null() || len == 0 {
        return generic.as_ptr();
    }
    let text = format!("uet provider error: {what} {prov_errno}");
    let n = text.len().min(len - 1);
    // SAFETY: the application's buffer of `len` bytes (the caller's promise); n + 1 <= len.
    unsafe {
        core::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
    buf
}

/// The provider's object of type `T` behind a libfabric `fid` pointer. `FI_EINVAL` for NULL,
/// and for an object of another class or another provider: its `struct fid` is read first,
/// and the object is taken for a `T` only when its class is `class` and its operations are
/// `ops`, a table of this crate that only `T`s carry.
///
/// # Safety
/// `fid` is NULL or points to a live libfabric object, which starts with its `struct fid`;
/// an object carrying `ops` is a `T` this crate made (`repr(C)`, its `fid` first) and stays
/// live for `'a`.
pub(crate) unsafe fn object_ref<'a, T>(
    fid: *const abi::Fid,
    class: usize,
    ops: &'static abi::FiOps,
    call: &str,
    what: &str,
) -> Result<&'a T, FiError> {
    // SAFETY: NULL or a live object (the caller's promise); only its `struct fid` is read.
    let f = unsafe { fid.as_ref() }.ok_or_else(|| null(call, what))?;
    if f.fclass != class || !core::ptr::eq(f.ops, ops) {
        return Err(FiError::inval(format!(
            "{call}: the fid is not a uet {what}"
        )));
    }
    // SAFETY: it carries `ops`, so it is a `T` of this crate, live for `'a` (the caller's
    // promise), which starts with the `struct fid`.
    Ok(unsafe { &*fid.cast::<T>() })
}

/// An `FI_EINVAL` error for a NULL pointer the call needs.
pub(crate) fn null(call: &str, what: &str) -> FiError {
    FiError::inval(format!("{call}: {what} is NULL"))
}

/// `flags` of a queue's attributes (`fi_eq_attr`, `fi_cq_attr`) without `FI_AFFINITY`, which
/// only says `signaling_vector` is set: a hint fi_eq(3) and fi_cq(3) let a provider without
/// interrupt affinity ignore, as this one does (logged at debug).
pub(crate) fn without_affinity(call: &str, flags: u64, signaling_vector: core::ffi::c_int) -> u64 {
    if flags & abi::FI_AFFINITY != 0 {
        tracing::debug!(
            call,
            vector = signaling_vector,
            "FI_AFFINITY: the signaling vector is ignored"
        );
    }
    flags & !abi::FI_AFFINITY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_data_is_at_most_max_err_data_bytes_in_either_buffer() {
        let owned = OwnedErrData::default();
        let long = "x".repeat(3 * MAX_ERR_DATA);
        // The application's buffer, larger than the bound: the bound's worth is written.
        let mut app = vec![0u8; 4 * MAX_ERR_DATA];
        let v = abi::fi_version(1, 17);
        // SAFETY: `app` holds `app.len()` writable bytes.
        let (at, n) = unsafe { owned.give(v, long.as_bytes(), app.as_mut_ptr().cast(), app.len()) };
        assert_eq!((at, n), (app.as_mut_ptr().cast(), MAX_ERR_DATA));
        assert!(app[MAX_ERR_DATA..].iter().all(|&b| b == 0));
        // No buffer: the queue's copy, cut to the bound and NUL-terminated.
        // SAFETY: no buffer.
        let (at, n) = unsafe { owned.give(v, long.as_bytes(), core::ptr::null_mut(), 0) };
        assert_eq!(n, MAX_ERR_DATA);
        // SAFETY: the queue's copy, n bytes and a NUL, alive until the next give.
        let copy = unsafe { core::ffi::CStr::from_ptr(at.cast()) };
        assert_eq!(copy.to_bytes(), &long.as_bytes()[..MAX_ERR_DATA]);
        // A short message is whole.
        // SAFETY: no buffer.
        let (at, n) = unsafe { owned.give(v, b"short", core::ptr::null_mut(), 0) };
        // SAFETY: the queue's copy, n bytes and a NUL, alive until the next give.
        let copy = unsafe { core::ffi::CStr::from_ptr(at.cast()) };
        assert_eq!(copy.to_bytes(), b"short");
        assert_eq!(n, 5);
    }
}
