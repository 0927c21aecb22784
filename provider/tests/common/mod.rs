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

/// Run the test `name` in a process of its own. What some tests count is the whole process's
/// (its open descriptors, the PIDonFEPs the simulated NIC hands out), which tests running
/// beside them in one process (as `cargo test` runs them) would change. True in the test's own
/// process, where it goes on; elsewhere this runs the test program again for that test
/// alone, asserts that it ran and passed, and returns false: the caller returns.
#[allow(dead_code)] // Not every test program has such a test.
pub fn in_own_process(name: &str) -> bool {
    const OWN: &str = "UET_TEST_IN_OWN_PROCESS";
    if std::env::var_os(OWN).is_some_and(|n| n == name) {
        return true;
    }
    let program = std::env::current_exe().expect("the test program");
    let out = std::process::Command::new(program)
        .args([name, "--exact", "--test-threads=1"])
        .env(OWN, name)
        .output()
        .expect("the test program runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} in a process of its own: {}\n{stdout}\n{stderr}",
        out.status
    );
    false
}
