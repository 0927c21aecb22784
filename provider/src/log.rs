//! The provider's log and configuration variables, through libfabric's own.
//!
//! * Its `tracing` events go to `fi_log` (`rdma/providers/fi_log.h`), as every provider's
//!   `FI_WARN`/`FI_INFO`/`FI_DBG` do: `FI_LOG_LEVEL`, `FI_LOG_PROV` and `FI_LOG_SUBSYS` pick
//!   them as they pick any provider's, and libfabric prints them in its own format
//!   (`libfabric:<pid>:<time>::uet:<subsystem>:<target>():<line><level> <message>`), or
//!   hands them to the logger an application installed with `fi_import_log`.
//!   `tracing`'s error and warning events are libfabric's warnings, its info events libfabric's
//!   info, and its debug and trace events libfabric's debug; the subsystem is the module's
//!   ([`subsystem`]). `RUST_LOG` instead sends them to standard error through
//!   `tracing_subscriber`, filtered as it says.
//! * Its environment variables (`FI_UET_DEVICE`, `FI_UET_SIM_ADDR`,
//!   `FI_UET_CONNECT_TIMEOUT`) are defined with `fi_param_define`, so that `fi_info -e`
//!   lists them with every provider's.
//!
//! Both are libfabric's exports for providers, found at run time in the libfabric that
//! loaded the provider (`dlopen` with `RTLD_NOLOAD`, so a libfabric loaded `RTLD_LOCAL` is
//! found too). A program that uses the provider library without libfabric (its own tests)
//! has neither: the events then go nowhere unless `RUST_LOG` is set, and the variables are
//! read from the environment all the same.

use crate::abi::FiProvider;
use core::ffi::{c_char, c_int, c_void, CStr};
use std::ffi::CString;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// `fi_log_enabled(prov, level, subsys)`.
type LogEnabledFn = unsafe extern "C" fn(*const FiProvider, c_int, c_int) -> c_int;
/// `fi_log(prov, level, subsys, func, line, fmt, ...)`.
type LogFn =
    unsafe extern "C" fn(*const FiProvider, c_int, c_int, *const c_char, c_int, *const c_char, ...);
/// `fi_param_define(prov, name, type, help_fmt, ...)`.
type ParamDefineFn =
    unsafe extern "C" fn(*const FiProvider, *const c_char, c_int, *const c_char, ...) -> c_int;

/// `enum fi_log_level`.
const FI_LOG_WARN: c_int = 0;
const FI_LOG_TRACE: c_int = 1;
const FI_LOG_INFO: c_int = 2;
const FI_LOG_DEBUG: c_int = 3;

/// `enum fi_log_subsys`.
const FI_LOG_CORE: c_int = 0;
const FI_LOG_FABRIC: c_int = 1;
const FI_LOG_DOMAIN: c_int = 2;
const FI_LOG_EP_CTRL: c_int = 3;
const FI_LOG_AV: c_int = 5;
const FI_LOG_CQ: c_int = 6;
const FI_LOG_EQ: c_int = 7;
const FI_LOG_MR: c_int = 8;
const FI_LOG_CNTR: c_int = 9;
/// `FI_LOG_SUBSYS_MAX`.
const SUBSYSTEMS: c_int = 10;

/// `FI_PARAM_STRING` of `enum fi_param_type`.
const FI_PARAM_STRING: c_int = 0;

/// The provider's variables and their help, as `fi_info -e` shows them (the names without
/// libfabric's `FI_UET_` prefix, which it adds from the provider's name).
const PARAMS: [(&CStr, &CStr); 3] = [
    (
        c"device",
        c"The NIC: sim (the default) for a simulated NIC in the process, \
          vfio-user:<socket> for one a simulator process serves (uetctl sim serve), \
          vfio:<PCI address> for one bound to vfio-pci.",
    ),
    (
        c"sim_addr",
        c"The simulated NIC's fabric address, IPv4 or IPv6 (default: 10.0.0.1).",
    ),
    (
        c"connect_timeout",
        c"Milliseconds fi_connect waits for the listener's fi_accept or fi_reject, and an \
          accepting endpoint for the requester's confirmation; 0: no deadline \
          (default: 5000).",
    ),
];

/// A symbol of the libfabric that loaded the provider, or null.
fn libfabric_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlopen with RTLD_NOLOAD only looks a loaded library up (and counts one more
    // reference, given back by dlclose); dlsym reads the symbol table of a library that stays
    // loaded, as libfabric does while its provider runs.
    unsafe {
        let handle = libc::dlopen(
            c"libfabric.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        );
        if !handle.is_null() {
            let symbol = libc::dlsym(handle, name.as_ptr());
            libc::dlclose(handle);
            if !symbol.is_null() {
                return symbol;
            }
        }
        libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr())
    }
}

/// Define the provider's variables with libfabric's `fi_param_define`, where libfabric
/// loaded the provider. `prov` lives as long as the library.
pub(crate) fn define_params(prov: *const FiProvider) {
    let define = libfabric_symbol(c"fi_param_define");
    if define.is_null() {
        return;
    }
    // SAFETY: libfabric's `fi_param_define`, of this type since FABRIC_1.0.
    let define = unsafe { core::mem::transmute::<*mut c_void, ParamDefineFn>(define) };
    for (name, help) in PARAMS {
        // SAFETY: the provider structure and NUL-terminated strings that live as long as
        // the library; the help goes through "%s", so no `%` of it is read as a conversion.
        let rc = unsafe {
            define(
                prov,
                name.as_ptr(),
                FI_PARAM_STRING,
                c"%s".as_ptr(),
                help.as_ptr(),
            )
        };
        if rc != 0 {
            tracing::debug!(rc, ?name, "fi_param_define failed");
        }
    }
}

/// The subscriber that hands events to `fi_log`, when the libfabric that loaded the
/// provider has it.
pub(crate) fn libfabric_logger(prov: *const FiProvider) -> Option<LibfabricLog> {
    let (enabled, log) = (
        libfabric_symbol(c"fi_log_enabled"),
        libfabric_symbol(c"fi_log"),
    );
    if enabled.is_null() || log.is_null() {
        return None;
    }
    // SAFETY: libfabric's `fi_log_enabled` and `fi_log`, of these types since FABRIC_1.0.
    let (enabled, log) = unsafe {
        (
            core::mem::transmute::<*mut c_void, LogEnabledFn>(enabled),
            core::mem::transmute::<*mut c_void, LogFn>(log),
        )
    };
    Some(LibfabricLog { prov, enabled, log })
}

/// A `tracing` subscriber whose events are libfabric's log lines (see the module docs).
pub(crate) struct LibfabricLog {
    prov: *const FiProvider,
    enabled: LogEnabledFn,
    log: LogFn,
}

// SAFETY: `prov` points to the provider structure, made once and never freed or written by
// this crate; `fi_log_enabled` and `fi_log` may be called from any thread (libfabric's
// logging takes its own lock).
unsafe impl Send for LibfabricLog {}
// SAFETY: as for `Send`.
unsafe impl Sync for LibfabricLog {}

/// libfabric's level for a `tracing` level.
fn level(level: &Level) -> c_int {
    match *level {
        Level::ERROR | Level::WARN => FI_LOG_WARN,
        Level::INFO => FI_LOG_INFO,
        Level::DEBUG | Level::TRACE => FI_LOG_DEBUG,
    }
}

/// libfabric's subsystem for an event of `target` (its module path): the object the module
/// serves.
pub fn subsystem(target: &str) -> c_int {
    let module = target.rsplit("::").next().unwrap_or(target);
    match module {
        "av" | "av_set" | "named" | "segment" | "mirror" | "templates" | "addr_str" => FI_LOG_AV,
        "cq" => FI_LOG_CQ,
        "eq" | "event" => FI_LOG_EQ,
        "mr" => FI_LOG_MR,
        "cntr" => FI_LOG_CNTR,
        "ep" | "sep" | "pep" | "cm" | "endpoint" | "scalable" => FI_LOG_EP_CTRL,
        "fabric" | "info" | "device" => FI_LOG_FABRIC,
        _ if target.starts_with("uet_av") => FI_LOG_AV,
        _ if target.starts_with("uet_driver") || target.starts_with("uet_sim") => FI_LOG_DOMAIN,
        "domain" => FI_LOG_DOMAIN,
        _ => FI_LOG_CORE,
    }
}

impl LibfabricLog {
    fn wants(&self, meta: &Metadata<'_>) -> bool {
        // SAFETY: libfabric's `fi_log_enabled` on the provider structure.
        unsafe { (self.enabled)(self.prov, level(meta.level()), subsystem(meta.target())) != 0 }
    }
}

/// An event's message, then its other fields as ` name=value`.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

/// `s` as a C string, its NULs (which a C string cannot hold) shown as `\0`.
fn c_string(s: String) -> CString {
    CString::new(s).unwrap_or_else(|e| {
        let escaped = String::from_utf8_lossy(&e.into_vec()).replace('\0', "\\0");
        CString::new(escaped).unwrap_or_default()
    })
}

impl Subscriber for LibfabricLog {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        // libfabric reads its log variables once: a callsite's answer holds.
        if self.wants(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        self.wants(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        let any = |lf_level| {
            (0..SUBSYSTEMS).any(|subsys| {
                // SAFETY: libfabric's `fi_log_enabled` on the provider structure.
                unsafe { (self.enabled)(self.prov, lf_level, subsys) != 0 }
            })
        };
        Some(if any(FI_LOG_DEBUG) {
            LevelFilter::TRACE
        } else if any(FI_LOG_INFO) {
            LevelFilter::INFO
        } else if any(FI_LOG_WARN) || any(FI_LOG_TRACE) {
            LevelFilter::WARN
        } else {
            LevelFilter::OFF
        })
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Spans carry nothing to libfabric's log: one id for all.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let mut text = Text::default();
        event.record(&mut text);
        text.message.push_str(&text.fields);
        let message = c_string(text.message);
        let func = c_string(meta.target().to_owned());
        let line = meta
            .line()
            .and_then(|l| c_int::try_from(l).ok())
            .unwrap_or(0);
        // As libfabric's FI_LOG does: the caller's errno survives the log.
        // SAFETY: the calling thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: libfabric's `fi_log` on the provider structure, with NUL-terminated
        // strings that outlive the call; the message goes through "%s\n" (libfabric's
        // callers end their lines themselves).
        unsafe {
            (self.log)(
                self.prov,
                level(meta.level()),
                subsystem(meta.target()),
                func.as_ptr(),
                line,
                c"%s\n".as_ptr(),
                message.as_ptr(),
            );
            *libc::__errno_location() = errno;
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_filed_under_the_subsystem_of_their_module() {
        for (target, subsys) in [
            ("uet_fi::cq", FI_LOG_CQ),
            ("uet_fi::av_set", FI_LOG_AV),
            ("uet_av::named::segment", FI_LOG_AV),
            ("uet_av", FI_LOG_AV),
            ("uet_fi::ep", FI_LOG_EP_CTRL),
            ("uet_driver::cm", FI_LOG_EP_CTRL),
            ("uet_driver::mr", FI_LOG_MR),
            ("uet_driver::admin", FI_LOG_DOMAIN),
            ("uet_fi::device", FI_LOG_FABRIC),
            ("uet_fi::cntr", FI_LOG_CNTR),
            ("uet_fi::eq", FI_LOG_EQ),
            ("uet_fi", FI_LOG_CORE),
        ] {
            assert_eq!(subsystem(target), subsys, "{target}");
        }
    }

    #[test]
    fn a_message_with_a_nul_is_logged_with_it_escaped() {
        assert_eq!(c_string("a\0b".into()).as_bytes(), b"a\\0b");
        assert_eq!(c_string("plain".into()).as_bytes(), b"plain");
    }
}
