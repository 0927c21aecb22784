//! Processes forked from one that runs a NIC.
//!
//! A child of `fork(2)` starts with copies of its parent's objects: the same device file
//! descriptors and BAR mapping (kernel VFIO), the same socket (vfio-user), the same mutexes
//! in whatever state the parent's other threads left them, and none of those threads. The
//! device stays the parent's. Were the child to drive it through its copies, dropping them
//! on its way out (a helper that returns through its destructors, or an `exit(3)` that runs
//! the provider's cleanup), it would destroy the parent's AV tables and endpoints, unmap the
//! parent's memory from the IOMMU and reset the function; and joining its copy of a thread
//! handle would wait forever for a thread it does not have.
//!
//! So a NIC is fenced from the processes forked from the one that opened it:
//!
//! * [`crate::Nic::open`] wraps its backend in a `Fenced` device. In a forked child the
//!   device is gone, as after a surprise removal: register reads answer all ones (every wait
//!   on the device ends as on a stopped NIC), and register writes, DMA mappings and MSI-X
//!   changes are not made; the check is one atomic load per register access. Nor is the
//!   memory the child shares with the parent written: admin commands, descriptors posted
//!   on an endpoint's rings and buffers taken from a pool fail with
//!   [`crate::DriverError::DeviceGone`]. When the child drops its last copy, the backend
//!   itself is not dropped, so its descriptors are not closed through calls that would
//!   change the parent's device (a VFIO group's container, a vfio-user session).
//! * The objects whose drop talks to the NIC ([`crate::Endpoint`], the AV's table, a
//!   [`crate::MemoryRegion`], a listener, the NIC itself) do nothing in a forked child but
//!   free what is the child's own, taking none of the locks a thread of the parent may have
//!   held at the fork; and the owners of the driver's threads (the NIC's stop watch and
//!   admin interrupt, each connection's progress, telemetry) forget, rather than join, the
//!   handles of threads the child does not have.
//!
//! A child that wants the NIC opens it itself (a function runs under one process at a time:
//! the open waits for the device as any second open does).
//!
//! A child is told from its parent by a count of forks, raised in every child by a
//! `pthread_atfork(3)` handler registered when the first NIC opens: a check is one atomic
//! load, cheap enough for a doorbell. A child made without the handlers (a raw `clone(2)`)
//! is not told apart; `posix_spawn(3)` and `vfork(2)` children execute another program at
//! once and drop nothing.

use crate::device::{Device, DeviceError, FunctionId};
use crate::dma::{DmaRegion, IovaRange};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError, TryLockError};
use uet_regs::Mmio;
use vmm_sys_util::eventfd::EventFd;

/// Forks this process is a child of, counted since the handler was registered.
static FORKS: AtomicU64 = AtomicU64::new(0);

static REGISTER: Once = Once::new();

/// The `pthread_atfork` child handler: one atomic add, which is async-signal-safe, as a
/// handler run between `fork` and the child's return from it must be.
extern "C" fn count_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The process an object was made in, to tell it from a child forked since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadeIn(u64);

impl MadeIn {
    /// This process. The first call registers the fork handler.
    pub fn here() -> MadeIn {
        REGISTER.call_once(|| {
            // SAFETY: registers a child handler that only adds to an atomic (see
            // `count_fork_in_child`); no prepare or parent handler.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
            if rc != 0 {
                tracing::warn!(
                    rc,
                    "pthread_atfork failed: a forked child's copies of a NIC are not fenced"
                );
            }
        });
        MadeIn(FORKS.load(Ordering::Relaxed))
    }

    /// Whether this is a process forked (once or more) from the one the object was made in.
    pub fn in_forked_child(self) -> bool {
        FORKS.load(Ordering::Relaxed) != self.0
    }

    /// A number that tells this process from those forked from it, and them from each other
    /// along one line of forks: two objects were made in the same process when it is the
    /// same (processes of separate lines may share it, but share no object either).
    pub fn generation(self) -> u64 {
        self.0
    }

    /// Lock `mutex`, of an object made in the process `self` names: there, once it is free;
    /// in a process forked since, only if it is free now (`None` otherwise). Held in the
    /// child, it was held at the fork by a thread of the parent, which the child does not
    /// have: nothing would ever let it go.
    pub fn lock<T>(self, mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
        if !self.in_forked_child() {
            return Some(mutex.lock().unwrap_or_else(PoisonError::into_inner));
        }
        match mutex.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// A backend fenced from the processes forked from the one that made it (see the module
/// docs).
pub(crate) struct Fenced {
    /// Dropped only in the process that made it.
    inner: ManuallyDrop<Arc<dyn Device>>,
    made_in: MadeIn,
}

impl Fenced {
    pub(crate) fn new(inner: Arc<dyn Device>) -> Fenced {
        Fenced {
            inner: ManuallyDrop::new(inner),
            made_in: MadeIn::here(),
        }
    }

    fn gone(&self) -> bool {
        self.made_in.in_forked_child()
    }
}

impl Drop for Fenced {
    fn drop(&mut self) {
        if self.gone() {
            // The backend's descriptors and mappings stay as the fork left them: closing a
            // VFIO device or a vfio-user session through its drop would change the parent's.
            return;
        }
        // SAFETY: `inner` is dropped once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.inner) };
    }
}

/// The BAR of a device gone: what [`Fenced::bar0`] gives in a forked child. Reads answer all
/// ones, as a removed PCI function's do; writes go nowhere.
struct GoneBar;

impl Mmio for GoneBar {
    fn read32(&self, _offset: u32) -> u32 {
        u32::MAX
    }

    fn write32(&self, _offset: u32, _value: u32) {}

    fn read64(&self, _offset: u32) -> u64 {
        u64::MAX
    }

    fn write64(&self, _offset: u32, _value: u64) {}

    fn write64_burst(&self, _offset: u32, _words: &[u64]) {}
}

impl Device for Fenced {
    /// The backend's BAR, or in a forked child [`GoneBar`]. Decided at each call (every
    /// register access of the driver asks for the BAR), so the datapath pays one atomic load
    /// per access and nothing more: the backend's own accesses are not wrapped.
    fn bar0(&self) -> &dyn Mmio {
        if self.gone() {
            return &GoneBar;
        }
        self.inner.bar0()
    }

    fn dma_map(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        if self.gone() {
            return Err(DeviceError::Gone);
        }
        self.inner.dma_map(region)
    }

    fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        if self.gone() {
            // The parent's mapping, which the parent unmaps.
            return Ok(());
        }
        self.inner.dma_unmap(region)
    }

    fn name(&self) -> String {
        self.inner.name()
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.inner.iova_ranges()
    }

    fn function_id(&self) -> Option<FunctionId> {
        self.inner.function_id()
    }

    fn msix_vectors(&self) -> u16 {
        self.inner.msix_vectors()
    }

    fn set_msix_eventfds(&self, eventfds: &[EventFd]) -> Result<(), DeviceError> {
        if self.gone() {
            return Err(DeviceError::Gone);
        }
        self.inner.set_msix_eventfds(eventfds)
    }

    fn clear_msix(&self) -> Result<(), DeviceError> {
        if self.gone() {
            return Ok(());
        }
        self.inner.clear_msix()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::backend::sim::sim_nic;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    use uet_fwif::admin::{BufferBody, Command};
    use uet_sim::Fabric;
    use zerocopy::FromZeros;

    /// Wait for the forked child `pid` for at most `limit`: its exit code, or `None` when it
    /// was still running then (it is killed).
    fn wait_child(pid: libc::pid_t, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            let mut status = 0;
            // SAFETY: polls the child forked by the caller; `status` outlives the call.
            let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            assert!(got >= 0, "waitpid: {}", std::io::Error::last_os_error());
            if got == pid {
                assert!(libc::WIFEXITED(status), "child status {status:#x}");
                return Some(libc::WEXITSTATUS(status));
            }
            if Instant::now() >= deadline {
                // SAFETY: ends and reaps the caller's child, still running.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Fork; in the child run `child` (its exit code, 3 for a panic) and end at once. The
    /// child's exit code, `None` when it had not ended after 10 s.
    pub(crate) fn in_child(child: impl FnOnce() -> i32) -> Option<i32> {
        // SAFETY: the child runs `child` and ends with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(3);
            // SAFETY: ends the forked child at once, running nothing more of the parent's.
            unsafe { libc::_exit(code) };
        }
        wait_child(pid, Duration::from_secs(10))
    }

    /// [`in_child`], while a thread of the parent holds a lock from before the fork until
    /// the child has ended: `hold` takes it, then calls the function it is given, which
    /// returns once the child has ended.
    pub(crate) fn in_child_while_held(
        hold: impl FnOnce(&dyn Fn()) + Send + 'static,
        child: impl FnOnce() -> i32,
    ) -> Option<i32> {
        let (held, is_held) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            hold(&|| {
                held.send(()).expect("held");
                let _ = released.recv();
            })
        });
        is_held.recv().expect("held");
        let code = in_child(child);
        release.send(()).expect("release");
        holder.join().expect("holder");
        code
    }

    /// A thread of the parent holds the admin queue at the fork (a command of its own was
    /// waiting for its completion): the child's copy of the NIC, asked for an admin command,
    /// fails at once instead of waiting for a lock no thread of the child will release.
    #[test]
    fn a_forked_childs_admin_command_fails_while_a_parents_thread_held_the_queue() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let holder = nic.clone();
        let hold = move |wait: &dyn Fn()| {
            let _admin = holder.inner.admin().unwrap();
            wait();
        };
        let code = in_child_while_held(hold, || {
            let r = nic.admin_command(Command::Identify(BufferBody::new_zeroed()));
            if r.is_err() {
                0
            } else {
                2
            }
        });
        assert_eq!(
            code,
            Some(0),
            "the child's command failed and the child ended"
        );
        // The parent's NIC runs on.
        assert!(nic.open_av(uet_av::AvAttr::default()).is_ok());
    }

    /// A peer's serialized address for the AV tests of a forked child.
    fn a_peer() -> [u8; 32] {
        uet_fwif::UetAddress {
            caps: uet_fwif::address::caps::AI_BASE,
            mode: uet_fwif::address::AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 1,
            fabric_addr: "10.0.0.2".parse().expect("address"),
            ri_start: 1,
            ri_count: 1,
            initiator: 1,
        }
        .to_bytes()
        .expect("address bytes")
    }

    /// A thread of the parent holds the AV write window at the fork (a write through it, or an
    /// invalidate doorbell, of another AV was in progress): the child's copy of an AV, asked to
    /// insert one address (the window) or to remove one (the doorbell), fails at once, the
    /// device gone, instead of waiting for a lock no thread of the child will release.
    #[test]
    fn a_forked_childs_av_write_fails_while_a_parents_thread_held_the_window() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let mut av = nic.open_av(uet_av::AvAttr::default()).expect("AV");
        let bytes = a_peer();
        let mut fa = [0u64];
        assert_eq!(av.insert(&bytes, 1, Some(&mut fa), 0), Ok(1));
        let holder = nic.clone();
        let hold = move |wait: &dyn Fn()| {
            let _window = holder.inner.av_window();
            wait();
        };
        let code = in_child_while_held(hold, || {
            // Each fails as the device gone (FI_ENODEV), having sent nothing.
            let gone = |r: Result<_, uet_av::FiError>| {
                r.is_err_and(|e| e.errno == uet_av::FiErrno::FI_ENODEV)
            };
            let mut failed = 0;
            if !gone(av.insert(&bytes, 1, None, 0)) {
                failed |= 1 << 1;
            }
            if !gone(av.remove(&fa, 0).map(|()| 0)) {
                failed |= 1 << 2;
            }
            failed
        });
        assert_eq!(
            code,
            Some(0),
            "the child's window write and doorbell failed and the child ended"
        );
        // The parent's AV runs on.
        assert_eq!(av.insert(&bytes, 1, None, 0), Ok(1));
        assert!(av.remove(&fa, 0).is_ok());
    }

    /// A forked child's copy of an endpoint, used, fails without writing the rings and
    /// buffers whose memory it shares with the parent: a receive and an inject are errors
    /// (the device gone), and its copy of a pool hands out none of the parent's buffers.
    #[test]
    fn a_forked_childs_copy_of_an_endpoint_posts_nothing_into_the_memory_it_shares() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let mut ep = nic
            .endpoint(crate::EndpointAttr::default(), None)
            .expect("endpoint");
        let pool = crate::pool::DmaPool::new(&nic, 256, 8).expect("pool");
        let mut buffer = pool.alloc().expect("buffer");
        buffer.fill(b"kept").expect("fill");
        let code = in_child(|| {
            let gone = |e: &crate::DriverError| matches!(e, crate::DriverError::DeviceGone);
            let mut failed = 0;
            // Refused, the buffer comes back as it was given: its bytes and length kept.
            let kept = |b: &crate::pool::DmaBuffer| b.to_vec().is_ok_and(|v| v == b"kept");
            if !ep
                .post_recv(buffer, 1)
                .is_err_and(|(e, b)| gone(&e) && kept(&b))
            {
                failed |= 1 << 1;
            }
            if !ep.inject(0, b"x", 0).is_err_and(|e| gone(&e)) {
                failed |= 1 << 2;
            }
            if pool.alloc().is_some() {
                failed |= 1 << 3;
            }
            failed
        });
        assert_eq!(code, Some(0), "the child's posts failed and it ended");
        // The parent's endpoint and pool run on.
        let buffer = pool.alloc().expect("buffer");
        assert!(ep.post_recv(buffer, 1).is_ok());
        assert_eq!(ep.in_flight().1, 1);
    }

    /// A forked child's copy of an `FI_EVENT` AV, asked to insert, submits nothing: the
    /// insert's error event says the device gone (`FI_ENODEV`), as a synchronous insert's
    /// error does, not an I/O error of the AV_WRITE's DMA buffer.
    #[test]
    fn a_forked_childs_event_insert_reports_the_device_gone() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let mut av = nic
            .open_av(uet_av::AvAttr {
                count: 8,
                flags: uet_av::FI_EVENT,
                ..uet_av::AvAttr::default()
            })
            .expect("AV");
        let eq = crate::EventQueue::open(crate::EqAttr::WAITABLE).expect("event queue");
        av.bind(eq.av_sink(), 0).expect("bound");
        let bytes = a_peer();
        let code = in_child(|| {
            if av.insert(&bytes, 1, None, 0) != Ok(0) {
                return 2;
            }
            match eq.readerr() {
                Ok(e) if e.err == uet_av::FiErrno::FI_ENODEV => 0,
                Ok(_) => 4,
                Err(_) => 5,
            }
        });
        assert_eq!(code, Some(0), "the child's insert reported the device gone");
    }
}
