//! The NIC the provider runs on: named by `FI_UET_DEVICE`, opened once per process.

use std::cell::RefCell;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError};
use uet_av::{FiErrno, FiError};
use uet_driver::backend::sim::SimDevice;
use uet_driver::backend::sysfs::PciAddress;
use uet_driver::backend::vfio::VfioDevice;
use uet_driver::backend::vfio_user::VfioUserDevice;
use uet_driver::{Device, Nic};
use uet_sim::{Fabric, NicConfig};

/// The environment variable naming the NIC.
pub const DEVICE_VAR: &str = "FI_UET_DEVICE";

/// The environment variable giving the simulated NIC's fabric address.
pub const SIM_ADDR_VAR: &str = "FI_UET_SIM_ADDR";

/// The simulated NIC's fabric address when [`SIM_ADDR_VAR`] is unset.
pub const DEFAULT_SIM_ADDR: &str = "10.0.0.1";

/// Which NIC: the value of [`DEVICE_VAR`], parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// `sim` (or unset): a simulated NIC in this process, at this fabric address.
    Sim(IpAddr),
    /// `vfio-user:<socket>`: a NIC served by a simulator process.
    VfioUser(PathBuf),
    /// `vfio:<PCI address>`: a NIC bound to `vfio-pci`.
    Vfio(PciAddress),
}

impl DeviceSpec {
    /// Parse `device` (the value of [`DEVICE_VAR`], `None` when unset) with `sim_addr` (the
    /// value of [`SIM_ADDR_VAR`]). `FI_EINVAL`, naming the variable, for anything else.
    pub fn parse(device: Option<&str>, sim_addr: Option<&str>) -> Result<DeviceSpec, FiError> {
        match device {
            None | Some("sim") => {
                let addr = sim_addr.unwrap_or(DEFAULT_SIM_ADDR);
                addr.parse().map(DeviceSpec::Sim).map_err(|_| {
                    FiError::inval(format!(
                        "{SIM_ADDR_VAR}={addr:?} is not an IPv4 or IPv6 address"
                    ))
                })
            }
            Some(d) => {
                if let Some(path) = d.strip_prefix("vfio-user:").filter(|p| !p.is_empty()) {
                    Ok(DeviceSpec::VfioUser(PathBuf::from(path)))
                } else if let Some(bdf) = d.strip_prefix("vfio:") {
                    bdf.parse().map(DeviceSpec::Vfio).map_err(|e| {
                        FiError::inval(format!("{DEVICE_VAR}={d:?}: bad PCI address: {e}"))
                    })
                } else {
                    Err(FiError::inval(format!(
                        "{DEVICE_VAR}={d:?}: expected sim, vfio-user:<socket> or \
                         vfio:<PCI address>"
                    )))
                }
            }
        }
    }

    /// From the environment.
    pub fn from_env() -> Result<DeviceSpec, FiError> {
        let var = |name| match std::env::var(name) {
            Ok(v) => Ok(Some(v)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(FiError::inval(format!("{name} is not UTF-8")))
            }
        };
        DeviceSpec::parse(var(DEVICE_VAR)?.as_deref(), var(SIM_ADDR_VAR)?.as_deref())
    }
}

/// The open NIC, and the simulated fabric it is on when it is simulated.
struct Opened {
    nic: Nic,
    /// Kept so the simulated NIC stays attached to a fabric; `None` for a real NIC.
    _fabric: Option<Fabric>,
}

/// The process's NIC. Its lock is held across every `fork(2)` (see [`hold_across_forks`]).
static OPENED: Mutex<Option<Opened>> = Mutex::new(None);

fn opened() -> MutexGuard<'static, Option<Opened>> {
    hold_across_forks();
    OPENED.lock().unwrap_or_else(PoisonError::into_inner)
}

static FORK_HANDLERS: Once = Once::new();

thread_local! {
    /// [`OPENED`]'s lock, held by a thread that forks from just before the fork to just
    /// after it, in the parent and in the child alike (the child's one thread is the one
    /// that forked).
    static HELD_ACROSS_FORK: RefCell<Option<MutexGuard<'static, Option<Opened>>>> =
        const { RefCell::new(None) };
}

/// Register, once, the `pthread_atfork(3)` handlers that take [`OPENED`]'s lock before a
/// fork and release it after, in parent and child.
///
/// A child of `fork(2)` gets the lock in the state the parent's threads left it. Were a
/// thread opening or closing the NIC at the fork (an open waits for the device, which can
/// take up to the admin timeout), the child would start with the lock held by a thread it
/// does not have, and its first `fi_fabric` or `fi_getinfo` would wait forever. With the
/// lock taken first, a fork waits for such an open or close to end, and the child starts
/// with the lock free and the NIC as the open left it.
///
/// The handlers run in the thread that calls `fork`, which must not hold the lock itself;
/// nothing of the provider forks, and an application cannot call `fork` from within it.
fn hold_across_forks() {
    FORK_HANDLERS.call_once(|| {
        // SAFETY: registers handlers that take and release a lock of this module: the
        // prepare handler runs before the fork, where any call is allowed; the parent and
        // child handlers only drop the guard (an atomic swap, and in the parent a futex
        // wake), which runs in the child as in any single-threaded process. None of them
        // unwinds: each catches a borrow or a thread-local access it cannot make.
        let rc = unsafe {
            libc::pthread_atfork(
                Some(take_opened_before_fork),
                Some(release_opened_after_fork),
                Some(release_opened_after_fork),
            )
        };
        if rc != 0 {
            tracing::warn!(
                rc,
                "pthread_atfork failed: a child forked while the NIC opens may wait for it \
                 forever"
            );
        }
    });
}

extern "C" fn take_opened_before_fork() {
    let guard = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
    // A thread whose thread-locals are gone (it is exiting) forks without the lock held.
    let _ = HELD_ACROSS_FORK.try_with(|held| {
        if let Ok(mut held) = held.try_borrow_mut() {
            *held = Some(guard);
        }
    });
}

extern "C" fn release_opened_after_fork() {
    let _ = HELD_ACROSS_FORK.try_with(|held| {
        if let Ok(mut held) = held.try_borrow_mut() {
            drop(held.take());
        }
    });
}

/// The process's NIC, opened as [`DeviceSpec::from_env`] says the first time. `FI_ENODEV`
/// when it cannot be opened, `FI_EINVAL` for a bad [`DEVICE_VAR`].
///
/// A NIC that stopped (a fatal error, or its function reset under the provider) runs
/// nothing again. Once the application has closed every object of it, it is closed here and
/// opened anew, its function brought up again: an application recovers from the stop by
/// closing what it had and opening a fabric again, without a restart. While any object of
/// it is open, the stopped NIC is what this gives (its capabilities still answer
/// `fi_getinfo`; what runs on it fails with `FI_EIO`).
///
/// In a process forked from the one that opened the NIC, the NIC is that process's, which
/// holds its function: it is not opened again (a vfio-user server would keep the child
/// waiting for a function it serves to the parent), and what the child asks of it fails at
/// once.
pub fn nic() -> Result<Nic, FiError> {
    let mut opened = opened();
    if let Some(o) = opened.as_ref() {
        if !o.nic.answers_nothing() || !o.nic.is_last_handle() || o.nic.opened_in_a_parent() {
            return Ok(o.nic.clone());
        }
        tracing::warn!("uet provider: the NIC stopped; it is closed and opened again");
        // Closed before the function is opened again: a function runs under one handle.
        drop(opened.take());
    }
    let spec = DeviceSpec::from_env()?;
    let fail = |e: &dyn std::fmt::Display| {
        FiError::new(
            FiErrno::FI_ENODEV,
            format!("cannot open the NIC {spec:?}: {e}"),
        )
    };
    let (device, fabric): (Arc<dyn Device>, Option<Fabric>) = match &spec {
        DeviceSpec::Sim(addr) => {
            let fabric = Fabric::new();
            let function = fabric
                .add_nic(NicConfig::new(*addr))
                .map_err(|e| fail(&e))?;
            (Arc::new(SimDevice::new(function)), Some(fabric))
        }
        DeviceSpec::VfioUser(path) => (
            Arc::new(VfioUserDevice::open(path).map_err(|e| fail(&e))?),
            None,
        ),
        DeviceSpec::Vfio(bdf) => (
            Arc::new(VfioDevice::open(*bdf).map_err(|e| fail(&e))?),
            None,
        ),
    };
    let nic = Nic::open(device).map_err(|e| fail(&e))?;
    tracing::info!(?spec, "uet provider: NIC open");
    *opened = Some(Opened {
        nic: nic.clone(),
        _fabric: fabric,
    });
    Ok(nic)
}

/// Close the process's NIC (the provider's cleanup). Objects still open keep theirs, but
/// the NIC's stop watch ends now: libfabric unloads the provider next, and a thread of it that
/// woke afterwards would run code no longer there.
pub fn close() {
    if let Some(opened) = opened().take() {
        opened.nic.stop_watching();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A thread holds the NIC's lock (as an open in progress does) when another forks: the
    /// child opens its own NIC. Were the lock copied held, the child would wait for a thread
    /// it does not have until its alarm killed it.
    #[test]
    fn a_child_forked_while_another_thread_opens_the_nic_opens_one_itself() {
        let (locked, is_locked) = mpsc::channel();
        let holder = std::thread::spawn(move || {
            let guard = opened();
            locked.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(guard);
        });
        is_locked.recv().unwrap();
        // SAFETY: the child calls the provider, whose locks the fork handlers keep free,
        // and leaves with `_exit`, running no destructor of the parent's objects.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: alarm and _exit are async-signal-safe.
            unsafe { libc::alarm(10) };
            let code = match nic() {
                Ok(_) => 0,
                Err(e) => {
                    eprintln!("child: {e}");
                    1
                }
            };
            // SAFETY: ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(code) };
        }
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: `pid` is this process's child; `status` is writable.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        holder.join().unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status:#x} (signal {})",
            libc::WTERMSIG(status)
        );
    }

    #[test]
    fn the_device_variable_names_a_simulated_vfio_user_or_vfio_nic() {
        let sim = |a: &str| DeviceSpec::Sim(a.parse().unwrap());
        assert_eq!(DeviceSpec::parse(None, None).unwrap(), sim("10.0.0.1"));
        assert_eq!(
            DeviceSpec::parse(Some("sim"), Some("fd00::9")).unwrap(),
            sim("fd00::9")
        );
        assert_eq!(
            DeviceSpec::parse(Some("vfio-user:/run/nic0.sock"), None).unwrap(),
            DeviceSpec::VfioUser("/run/nic0.sock".into())
        );
        assert_eq!(
            DeviceSpec::parse(Some("vfio:0000:3b:00.0"), None).unwrap(),
            DeviceSpec::Vfio("0000:3b:00.0".parse().unwrap())
        );
        for (device, addr) in [
            (Some("sim"), Some("10.0.0")),
            (Some("vfio-user:"), None),
            (Some("vfio:3b"), None),
            (Some("nic0"), None),
            (Some(""), None),
        ] {
            let e = DeviceSpec::parse(device, addr).unwrap_err();
            assert_eq!(e.errno, FiErrno::FI_EINVAL, "{device:?} {addr:?}");
        }
    }
}
