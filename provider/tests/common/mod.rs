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

/// A NIC (of an older host interface, or on a fabric the test holds frames on), served over
/// vfio-user from this process, which the provider opens (`FI_UET_DEVICE`): for a test in a
/// process of its own. Its socket's directory goes with it.
#[allow(dead_code)] // Not every test program has such a test.
pub struct ServedNic {
    dir: std::path::PathBuf,
    /// The fabric the NIC is on.
    pub fabric: uet_sim::Fabric,
    /// The NIC's function.
    pub function: uet_sim::SimFunction,
}

#[allow(dead_code)] // Not every test program has such a test.
impl ServedNic {
    /// Serve a NIC of interface 1.`minor` at a socket in a directory named from `tag`.
    pub fn serve(tag: &str, minor: u8) -> ServedNic {
        ServedNic::serve_with(tag, |config| config.interface_minor = minor)
    }

    /// Serve a NIC at 10.0.0.1 configured by `configure`, at a socket in a directory named
    /// from `tag`.
    pub fn serve_with(tag: &str, configure: impl FnOnce(&mut uet_sim::NicConfig)) -> ServedNic {
        let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nic.sock");
        let fabric = uet_sim::Fabric::new();
        let mut config = uet_sim::NicConfig::new("10.0.0.1".parse().unwrap());
        configure(&mut config);
        let function = fabric.add_nic(config).unwrap();
        let server = std::sync::Arc::new(
            uet_sim::vfio_user::VfioUserServer::bind(function.clone(), &path).unwrap(),
        );
        // Client after client, as a daemon serves: a process that closes its NIC may open it
        // again.
        std::thread::spawn(move || server.serve());
        std::env::set_var(
            uet_fi::device::DEVICE_VAR,
            format!("vfio-user:{}", path.display()),
        );
        ServedNic {
            dir,
            fabric,
            function,
        }
    }
}

impl Drop for ServedNic {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
