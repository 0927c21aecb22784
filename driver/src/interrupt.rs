//! Completion interrupts: the NIC's MSI-X vectors, each delivered to an eventfd, and the wait
//! on one.
//!
//! A NIC of interface 1.12 or later raises an MSI-X vector for a completion ring armed with
//! `CQ_ARM` once the ring holds a completion the driver has not freed — at once if it holds
//! one already (`uet_regs::CQ_ARM`). The wait of [`crate::Endpoint::cq_sread`] is therefore:
//! read the ring; found empty (which reports the head with `CQ_DOORBELL`), clear the eventfd,
//! arm, and sleep in `poll(2)` until the eventfd is readable. A completion written between
//! the read and the arm raises the vector at the arm, so no completion is slept through.
//!
//! The vectors are set up the first time an endpoint of the NIC waits: one eventfd per vector
//! the backend delivers ([`Device::msix_vectors`]), given to the device in one
//! [`Device::set_msix_eventfds`] (kernel VFIO's `VFIO_DEVICE_SET_IRQS`; the vfio-user server
//! and the in-process model take the same eventfds). Each endpoint (and each context of a
//! scalable endpoint) that waits takes a vector of its own (`Vector`) and gives it back when
//! it goes. A vector is never held by two endpoints at once: an eventfd read by one waiter
//! would take the wakeup of another. (An endpoint dropped while contexts of it live leaves
//! its ring on the NIC, armed if it was; a late completion there raises the vector the
//! endpoint gave back, and its next holder wakes for nothing, reads its own ring and sleeps
//! again: a spurious wakeup, which `fi_cq_sread` allows.) When every vector is taken, or the NIC or backend has no interrupts, an endpoint
//! waits by reading its ring with a growing sleep between reads (at most
//! [`POLL_SLEEP_MAX`]), and has no wait descriptor to give.
//!
//! The progress thread of an `FI_EP_MSG` endpoint's connection raises the endpoint's vector
//! when the peer shuts the connection down (`Raise`), as a completion would: what sleeps on
//! the ring wakes and finds the connection shut down.
//!
//! A connection's control progress ([`crate::cm`]) holds a vector too, for its control
//! channel, from the moment its passive or `FI_EP_MSG` endpoint is made; control channels
//! take one only while more than half of the vectors (rounded up) are free
//! (`Interrupts::take_leaving`), so that they never leave the application's completion
//! queues without, and beyond their share they all raise one vector they share, whose one
//! reader tells each which rings to read.

use crate::device::{Device, DeviceError};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::{EventFd, EFD_CLOEXEC, EFD_NONBLOCK};

/// The longest sleep between two reads of a ring an endpoint waits on without a vector.
pub const POLL_SLEEP_MAX: Duration = Duration::from_millis(1);

/// The NIC's vectors and their eventfds.
pub(crate) struct Interrupts {
    eventfds: Vec<EventFd>,
    /// Vectors no endpoint holds, lowest last (taken first).
    free: Mutex<Vec<u16>>,
    /// The process that set the vectors up: a child forked from it drops its copies of them
    /// without waiting for `free` when a thread of the parent held it at the fork
    /// ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

impl Interrupts {
    /// One non-blocking eventfd per vector of `device`, given to it.
    pub(crate) fn open(device: &dyn Device) -> Result<Interrupts, DeviceError> {
        let fail = |reason: String| DeviceError::Interrupts {
            name: device.name(),
            reason,
        };
        let vectors = device.msix_vectors();
        if vectors == 0 {
            return Err(fail("the backend delivers no MSI-X vectors".into()));
        }
        let eventfds = (0..vectors)
            .map(|_| EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(format!("eventfd: {e}")))?;
        device.set_msix_eventfds(&eventfds)?;
        Ok(Interrupts {
            eventfds,
            free: Mutex::new((0..vectors).rev().collect()),
            made_in: crate::fork::MadeIn::here(),
        })
    }

    /// A vector of its own for one waiter; `None` when every vector is held.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Vector> {
        let number = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()?;
        Some(Vector {
            interrupts: self.clone(),
            number,
        })
    }

    /// A vector for a waiter the application does not see (a connection's control
    /// progress), taken only while more than `keep` stay free for the others; `None` when
    /// fewer do.
    pub(crate) fn take_leaving(self: &Arc<Self>, keep: usize) -> Option<Vector> {
        let number = {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            if free.len() <= keep {
                return None;
            }
            free.pop()?
        };
        Some(Vector {
            interrupts: self.clone(),
            number,
        })
    }

    /// How many vectors the NIC delivers.
    pub(crate) fn vectors(&self) -> usize {
        self.eventfds.len()
    }

    /// Raise vector `number`, as the NIC does.
    #[cfg(test)]
    pub(crate) fn raise(&self, number: u16) {
        if let Some(fd) = self.eventfds.get(usize::from(number)) {
            let _ = fd.write(1);
        }
    }

    /// Vectors no waiter holds.
    #[cfg(test)]
    pub(crate) fn free_vectors(&self) -> usize {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// One MSI-X vector, held by one waiter until dropped.
pub(crate) struct Vector {
    interrupts: Arc<Interrupts>,
    number: u16,
}

impl Vector {
    /// The vector's number, for `CQ_ARM`.
    pub(crate) fn number(&self) -> u16 {
        self.number
    }

    fn eventfd(&self) -> &EventFd {
        // In range by construction: numbers come from `0..eventfds.len()`.
        &self.interrupts.eventfds[usize::from(self.number)]
    }

    /// The eventfd, readable once the vector was raised after the last [`Vector::clear`].
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is the eventfd's, which lives in `self.interrupts` as long
        // as `self` does, and the borrow cannot outlive `self`.
        unsafe { BorrowedFd::borrow_raw(self.eventfd().as_raw_fd()) }
    }

    /// A handle that raises this vector as the NIC would ([`Raise`]), for a thread other than
    /// the vector's holder.
    pub(crate) fn raiser(&self) -> Raise {
        Raise {
            interrupts: self.interrupts.clone(),
            number: self.number,
        }
    }

    /// Take the messages the eventfd holds: whether it held any (the vector was raised since
    /// the last take or clear).
    pub(crate) fn take(&self) -> bool {
        self.eventfd().read().is_ok()
    }

    /// Take the messages the eventfd holds, so that it is readable again only for a later one.
    pub(crate) fn clear(&self) {
        // Non-blocking: EAGAIN when it holds none, which is what clearing wants.
        self.take();
    }

    /// Sleep until the eventfd, or `also` when given, is readable (`true`) or `timeout` passes
    /// (`false`); `None`, or a timeout too long for the clock to add, waits without end. A
    /// signal that interrupts the sleep resumes it for the time left.
    pub(crate) fn wait(
        &self,
        timeout: Option<Duration>,
        also: Option<&CqSignal>,
    ) -> std::io::Result<bool> {
        wait_readable(
            [
                self.eventfd().as_raw_fd(),
                also.map_or(-1, |s| s.0.as_raw_fd()),
            ],
            timeout,
        )
    }
}

/// Raises one vector, held by someone else, as a NIC interrupt would: whoever sleeps on its
/// eventfd wakes and reads its ring. A connection's progress thread raises its endpoint's
/// vector when the peer shuts the connection down (see [`crate::cm`]). A raise after the
/// holder gave the vector back would wake its next holder for nothing, a spurious wakeup.
pub(crate) struct Raise {
    interrupts: Arc<Interrupts>,
    number: u16,
}

impl Raise {
    /// Make the vector's eventfd readable.
    pub(crate) fn raise(&self) {
        if let Some(fd) = self.interrupts.eventfds.get(usize::from(self.number)) {
            // Cannot fail short of the counter's overflow, 2^64 - 2 raises unread.
            let _ = fd.write(1);
        }
    }
}

/// Sleep in poll(2) until one of `fds` (a negative one is skipped) is readable (`true`) or
/// `timeout` passes (`false`); `None`, or a timeout too long for the clock to add, waits
/// without end. A signal that interrupts the sleep resumes it for the time left.
fn wait_readable(fds: [i32; 2], timeout: Option<Duration>) -> std::io::Result<bool> {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        let ms: libc::c_int = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Rounded up, so a wait of less than a millisecond still sleeps.
                left.as_micros()
                    .div_ceil(1000)
                    .try_into()
                    .unwrap_or(libc::c_int::MAX)
            }
        };
        let watch = |fd: i32| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // A negative descriptor is skipped by poll(2).
        let mut pfds = [watch(fds[0]), watch(fds[1])];
        // SAFETY: `pfds` is an array of two valid pollfds on the stack for the whole call,
        // and its length is the count passed; poll(2) writes only their `revents`.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        match n {
            1.. => return Ok(true),
            0 => return Ok(false),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// `fi_cq_signal` of one endpoint's completion queue ([`crate::Endpoint::cq_signal`]): wakes
/// the thread asleep in its [`crate::Endpoint::cq_sread`], which then returns `FI_EAGAIN`
/// unless a completion came too. With no thread asleep, the next `cq_sread` that finds
/// nothing to read returns `FI_EAGAIN` at once; signals not yet seen count as one. A clone
/// signals the same endpoint, from any thread; an eventfd of its own, so it works whether or
/// not the endpoint has a vector.
#[derive(Clone)]
pub struct CqSignal(Arc<EventFd>);

impl std::fmt::Debug for CqSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CqSignal").finish_non_exhaustive()
    }
}

impl CqSignal {
    pub(crate) fn new() -> std::io::Result<CqSignal> {
        EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC).map(|e| CqSignal(Arc::new(e)))
    }

    /// Wake the endpoint's waiter (see the type's documentation). Fails only when the
    /// eventfd refuses the write (`FI_EIO`), which a counter of 2^64 - 2 unseen signals would.
    pub fn signal(&self) -> Result<(), uet_av::FiErrno> {
        self.0.write(1).map_err(|e| {
            tracing::warn!(error = %e, "fi_cq_signal failed");
            uet_av::FiErrno::FI_EIO
        })
    }

    /// Take the signals sent since the last take: whether there was one.
    pub(crate) fn take(&self) -> bool {
        self.0.read().is_ok()
    }

    /// Sleep until a signal is sent (`true`; it is not taken) or `timeout` passes (`false`);
    /// `None` waits without end.
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> std::io::Result<bool> {
        wait_readable([self.0.as_raw_fd(), -1], timeout)
    }
}

impl Drop for Vector {
    fn drop(&mut self) {
        let interrupts = &self.interrupts;
        // `None` only in a forked child whose copy of the list a thread of the parent held.
        if let Some(mut free) = interrupts.made_in.lock(&interrupts.free) {
            free.push(self.number);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimDevice;
    use uet_sim::{Fabric, NicConfig};

    fn device() -> SimDevice {
        let fabric = Fabric::new();
        let f = fabric
            .add_nic(NicConfig::new("10.0.0.1".parse().expect("address")))
            .expect("nic");
        SimDevice::new(f)
    }

    /// A thread of the parent held the free vectors at the fork (taking or giving back one):
    /// the child's copy of a vector drops without waiting for a lock no thread of the child
    /// will let go.
    #[test]
    fn a_forked_child_drops_a_vector_while_a_parents_thread_held_the_free_ones() {
        let d = device();
        let irq = Arc::new(Interrupts::open(&d).expect("interrupts"));
        let mut vector = Some(irq.take().expect("a vector"));
        let holder = irq.clone();
        let hold = move |wait: &dyn Fn()| {
            let _free = holder.free.lock();
            wait();
        };
        let code = crate::fork::tests::in_child_while_held(hold, || {
            drop(vector.take());
            0
        });
        assert_eq!(code, Some(0), "the child dropped its vector and ended");
        let n = usize::from(uet_regs::pci::MSIX_VECTORS);
        assert_eq!(irq.free_vectors(), n - 1);
        drop(vector);
        assert_eq!(irq.free_vectors(), n);
    }

    /// Every vector is one waiter's at a time, and comes back when dropped; a raised vector
    /// makes its eventfd readable until cleared; the wait times out otherwise.
    #[test]
    fn vectors_are_held_one_waiter_each_and_wake_their_waiter() {
        let d = device();
        let irq = Arc::new(Interrupts::open(&d).expect("interrupts"));
        let n = usize::from(uet_regs::pci::MSIX_VECTORS);
        let held: Vec<Vector> = (0..n).map_while(|_| irq.take()).collect();
        assert_eq!(held.len(), n);
        assert!(irq.take().is_none(), "every vector is held");
        let mut numbers: Vec<u16> = held.iter().map(Vector::number).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), n, "no vector twice");
        drop(held);
        assert_eq!(irq.free_vectors(), n);

        let v = irq.take().expect("a vector");
        assert_eq!(
            v.wait(Some(Duration::from_millis(5)), None).ok(),
            Some(false)
        );
        d.function().raise_msix(v.number());
        assert_eq!(v.wait(Some(Duration::from_secs(5)), None).ok(), Some(true));
        assert_eq!(
            v.wait(Some(Duration::ZERO), None).ok(),
            Some(true),
            "until cleared"
        );
        v.clear();
        assert_eq!(v.wait(Some(Duration::ZERO), None).ok(), Some(false));
        // A timeout past the clock's range waits without end instead of overflowing.
        d.function().raise_msix(v.number());
        assert_eq!(v.wait(Some(Duration::MAX), None).ok(), Some(true));
    }

    /// A backend without interrupts gives none, and says so.
    #[test]
    fn a_backend_without_vectors_gives_no_interrupts() {
        struct NoIrq(SimDevice);
        impl Device for NoIrq {
            fn bar0(&self) -> &dyn uet_regs::Mmio {
                self.0.bar0()
            }
            fn dma_map(&self, r: &crate::dma::DmaRegion) -> Result<(), DeviceError> {
                self.0.dma_map(r)
            }
            fn dma_unmap(&self, r: &crate::dma::DmaRegion) -> Result<(), DeviceError> {
                self.0.dma_unmap(r)
            }
            fn name(&self) -> String {
                "no-irq".into()
            }
        }
        let e = Interrupts::open(&NoIrq(device())).err().expect("refused");
        assert!(e.to_string().contains("no MSI-X vectors"), "{e}");
    }
}
