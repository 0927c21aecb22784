//! The seam between an AV opened with `FI_EVENT` and the event queue bound to it.
//!
//! `uet-av` does not know the driver's event queue: an AV posts through [`AvEventSink`], which
//! the driver's `EventQueue` implements (and tests implement in memory), and the queue drives
//! the AV's progress through [`AvProgress`], which the AV hands it when bound
//! ([`crate::AddressVector::bind`]).
//!
//! ## What an asynchronous insert reports
//!
//! Each insert call of an `FI_EVENT` AV that returns `Ok` produces, in this order:
//!
//! 1. one [`AvEvent::InsertError`] per address that was not inserted, in the order of the
//!    addresses in the call (`position` = the address's index in the caller's array):
//!    malformed (`FI_EINVAL`), table full (`FI_ENOSPC`), the mirror could not grow
//!    (`FI_ENOMEM`), host name that does not resolve (`FI_EADDRNOTAVAIL`), refused by the NIC
//!    (`FI_EIO`, every address of the refused AV_WRITE, with the NIC's status as
//!    `prov_errno`), not answered by it (`FI_EIO`, every address, `prov_errno` 0), not sent
//!    because the NIC's admin ring had no room for the AV_WRITE (`FI_EAGAIN`, every address
//!    of it), or cancelled because the AV was closed before its `FI_MORE` batch was sent
//!    (`FI_ECANCELED`);
//! 2. one [`AvEvent::InsertComplete`] whose `inserted` is the number that went in (also when
//!    every address failed, or the call had none).
//!
//! Calls complete in the order they were made.

use std::sync::Weak;
use std::task::Waker;

use crate::errno::{FiErrno, FiError};

/// An entry an asynchronous insert posts to its event queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AvEvent {
    /// An `fi_eq_err_entry` for one address that was not inserted.
    InsertError {
        /// The AV ([`crate::AddressVector::id`]): the entry's `fid`.
        av: u64,
        /// The insert call's `context`.
        context: u64,
        /// The address's index in the caller's array (`fi_eq_err_entry.data`).
        position: u64,
        /// Why (`fi_eq_err_entry.err`).
        errno: FiErrno,
        /// The NIC's code for it, 0 when the host refused the address (`prov_errno`).
        prov_errno: i32,
        /// What went wrong (`err_data`).
        message: String,
    },
    /// `FI_AV_COMPLETE`: the insert call finished.
    InsertComplete {
        /// The AV ([`crate::AddressVector::id`]): the entry's `fid`.
        av: u64,
        /// The insert call's `context`.
        context: u64,
        /// Addresses of the call that were inserted (`fi_eq_entry.data`).
        inserted: u64,
    },
}

/// The first fabric id [`next_fid`] gives: the top bit of 64 set, which no user-space
/// address has (x86-64 and AArch64 give user space the lower half of the address space).
pub const FIRST_FID: u64 = 1 << 63;

/// The counter behind [`next_fid`].
static NEXT_FID: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(FIRST_FID);

/// A fresh fabric id, from the one counter of the process: no other object that reports to
/// an event queue (AVs here; event queues, endpoints and connections in the driver) has it,
/// so an entry's `fid` names one object however many kinds share the queue. Starts at
/// [`FIRST_FID`], so that no id is the address of an application's object: an event an
/// application writes into a queue (`fi_eq_write`) names its objects by their addresses,
/// and is never taken for one of the provider's own.
pub fn next_fid() -> u64 {
    NEXT_FID.fetch_add(1, core::sync::atomic::Ordering::Relaxed)
}

/// An event queue an AV can be bound to (`fi_av_bind`).
pub trait AvEventSink: Send + Sync {
    /// Post one event. An error (the queue was overrun) loses the event; the AV logs it.
    fn post_av_event(&self, event: AvEvent) -> Result<(), FiError>;

    /// Bind an AV: the queue counts it as bound (its `fi_close` fails with `FI_EBUSY` until
    /// [`AvEventSink::detach_av`]) and calls `progress` whenever the application reads the
    /// queue. Returns a number naming this attachment, or why the queue takes no AV (it was
    /// closed: `FI_EBADF`).
    fn attach_av(&self, progress: Weak<dyn AvProgress>) -> Result<u64, FiError>;

    /// Undo [`AvEventSink::attach_av`] (the AV is closed or dropped).
    fn detach_av(&self, attachment: u64);

    /// An insert call was queued, or its records were sent to the NIC: its events will be
    /// posted by a later progress ([`AvProgress::progress`]). A reader asleep until the AV's
    /// earlier writes progress ([`AvProgress::wake_on_progress`]) knows nothing of these: the
    /// queue wakes it (a queue whose readers sleep on a descriptor makes it readable), and it
    /// runs progress and asks again. Nothing by default.
    fn inserts_queued(&self) {}
}

/// Progress of an AV's asynchronous inserts, driven by the queue it is bound to.
pub trait AvProgress: Send + Sync {
    /// Collect the NIC's completions and post the events of every insert that finished.
    /// Never blocks: while the AV's owner holds its state (waiting for the NIC in a remove
    /// or a close) it does nothing and returns 0, and the next progress catches up. Returns
    /// how many inserts completed.
    fn progress(&self) -> usize;

    /// Whether an insert call has not been reported yet: its events come with a later
    /// progress, so a reader that sleeps without running progress could miss them. Never
    /// blocks: while the AV's owner holds its state, the answer is `true`. `false` by default.
    fn in_flight(&self) -> bool {
        false
    }

    /// Arrange for `waker` to be woken when [`AvProgress::progress`] may have an insert to
    /// finish (at once when it may have one already; wakeups may be spurious), so that a
    /// reader can sleep until then instead of running progress at intervals. False when no
    /// one will wake it (the NIC has no admin interrupt, or the AV's owner holds its state):
    /// then it runs progress at intervals. Call it after a progress, while
    /// [`AvProgress::in_flight`]. Never blocks. False by default.
    fn wake_on_progress(&self, waker: &Waker) -> bool {
        let _ = waker;
        false
    }
}
