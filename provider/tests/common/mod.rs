//! What the provider's test programs share.

use core::ffi::c_int;

/// Whether `fd` polls readable within `ms` milliseconds (0: now, without waiting). A
/// descriptor that is not open is not readable.
pub fn fd_readable(fd: c_int, ms: c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack for the call, and the count passed is 1; poll(2)
    // writes only its `revents`, and reports a descriptor that is not open as POLLNVAL.
    unsafe { libc::poll(&mut p, 1, ms) > 0 && p.revents & libc::POLLIN != 0 }
}
