//! What a process forked from one holding named-AV handles gives up at the fork: its share of
//! each segment's open file description.
//!
//! A segment's locks belong to its open file description (`F_OFD_SETLK`), and the kernel
//! drops them only when the last reference to the description goes. A descriptor is one, and
//! so is every mapping of the file: a forked child holds both, copies of its parent's. Were
//! the parent to die in the middle of a change (the segment lock held), a child it forked
//! that is still running would keep that lock for as long as it runs, and every other process
//! of the AV would wait for it for good, with no repair; and a handle's presence would keep
//! counting after its process closed it or died.
//!
//! So a `pthread_atfork(3)` child handler, registered with the first handle, replaces in the
//! child, for every handle of the parent's:
//!
//! * the segment's descriptor with one of `/dev/null` (`dup3`, close-on-exec as the original
//!   was), which the handle's later close then closes;
//! * the segment's mapping with anonymous zeroed memory of the same size and place (`mmap`
//!   with `MAP_FIXED`), which the handle's later `munmap` then unmaps.
//!
//! Both are single system calls, as what runs between `fork` and the child's return from it
//! must be. Until the child first runs, and so runs the handler, it holds the references the
//! fork copied: a lock outlives a dead parent by that moment, not by the child's life. The child's copy of a handle reads zeros from then on: a generation of 0, so
//! every call that catches up first takes the segment lock, which is `FI_EINVAL` in a forked
//! process (`Segment::check_opener`), as it was; a forked process opens the AV itself.
//!
//! Handles are registered in a list of entries that are never freed, only reused, so the
//! handler walks it with atomic loads alone, whatever the parent's threads were doing at the
//! fork. A handle being opened or closed at the very moment another thread forks may be
//! missed, and the child then keeps its share of that one description until it exits.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;

use tracing::warn;

/// An entry's states.
const FREE: u8 = 0;
const FILLING: u8 = 1;
const HELD: u8 = 2;

/// One registered handle: its descriptor and mapping.
struct Entry {
    state: AtomicU8,
    fd: AtomicI32,
    addr: AtomicUsize,
    len: AtomicUsize,
    /// The entry registered before this one; set before the entry is published.
    next: AtomicPtr<Entry>,
}

/// The newest entry; each points at the one before it. Entries are leaked: never freed.
static HEAD: AtomicPtr<Entry> = AtomicPtr::new(core::ptr::null_mut());

/// A descriptor of `/dev/null` the child puts in place of a segment's (-1: none could be
/// opened, and the child keeps the segments' descriptors).
static DEV_NULL: AtomicI32 = AtomicI32::new(-1);

static SETUP: Once = Once::new();

/// The child handler (see the module documentation). Only atomic loads and the system calls
/// `dup3` and `mmap`: async-signal-safe, and no allocation, lock or panic.
extern "C" fn release_in_child() {
    let null = DEV_NULL.load(Ordering::Relaxed);
    let mut p = HEAD.load(Ordering::Acquire);
    // SAFETY: every pointer in the list comes from `Box::leak` in `register`, and entries are
    // never freed, so each is a valid `Entry` for the rest of the process (the child's copy
    // of the parent's memory included).
    while let Some(e) = unsafe { p.as_ref() } {
        if e.state.load(Ordering::Acquire) == HELD {
            let fd = e.fd.load(Ordering::Relaxed);
            if null >= 0 {
                // SAFETY: replaces descriptor `fd`, which the handle's `File` owns, with a
                // copy of `/dev/null`'s: the `File` stays the owner of a valid descriptor of
                // that number and closes it when dropped.
                unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) };
            }
            let (addr, len) = (
                e.addr.load(Ordering::Relaxed),
                e.len.load(Ordering::Relaxed),
            );
            // SAFETY: `addr..addr + len` is exactly the live mapping the handle's `Mapping`
            // owns (registered while it exists, withdrawn before it is unmapped); it is
            // replaced by anonymous memory of the same size and protection, which that
            // `Mapping` goes on reading through atomics and unmaps when dropped.
            unsafe {
                libc::mmap(
                    addr as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
        }
        p = e.next.load(Ordering::Acquire);
    }
}

fn setup() {
    SETUP.call_once(|| {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
        {
            // The descriptor is kept for the life of the process.
            Ok(f) => DEV_NULL.store(std::os::fd::IntoRawFd::into_raw_fd(f), Ordering::Relaxed),
            Err(e) => warn!(
                error = %e,
                "opening /dev/null failed: a process forked from this one keeps its share of \
                 each named AV's segment descriptor"
            ),
        }
        // SAFETY: registers a child handler that only loads atomics and makes two system
        // calls per handle (see `release_in_child`); no prepare or parent handler.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(release_in_child)) };
        if rc != 0 {
            warn!(
                rc,
                "pthread_atfork failed: a process forked from this one keeps its share of each \
                 named AV's segment"
            );
        }
    });
}

/// A handle's registration; dropping it withdraws it, and must come before the mapping is
/// unmapped and the descriptor closed.
pub(super) struct Registration(Option<&'static Entry>);

impl Registration {
    /// Not registered (a handle with no shared mapping).
    pub(super) const fn none() -> Registration {
        Registration(None)
    }

    /// Register `file` and its mapping `addr..addr + len` (which must stay both open and
    /// mapped until the registration is dropped).
    pub(super) fn new(file: &File, addr: *const u8, len: usize) -> Registration {
        setup();
        let fd: RawFd = file.as_raw_fd();
        let fill = |e: &Entry| {
            e.fd.store(fd, Ordering::Relaxed);
            e.addr.store(addr as usize, Ordering::Relaxed);
            e.len.store(len, Ordering::Relaxed);
            e.state.store(HELD, Ordering::Release);
        };
        let mut p = HEAD.load(Ordering::Acquire);
        // SAFETY: as in `release_in_child`: entries are leaked, never freed.
        while let Some(e) = unsafe { p.as_ref() } {
            if e.state
                .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                fill(e);
                return Registration(Some(e));
            }
            p = e.next.load(Ordering::Acquire);
        }
        let e: &'static Entry = Box::leak(Box::new(Entry {
            state: AtomicU8::new(FILLING),
            fd: AtomicI32::new(-1),
            addr: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            next: AtomicPtr::new(core::ptr::null_mut()),
        }));
        fill(e);
        let me = core::ptr::from_ref(e).cast_mut();
        let mut head = HEAD.load(Ordering::Acquire);
        loop {
            e.next.store(head, Ordering::Relaxed);
            match HEAD.compare_exchange_weak(head, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Registration(Some(e)),
                Err(now) => head = now,
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(e) = self.0 {
            e.state.store(FREE, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> Vec<(i32, usize, usize)> {
        let mut out = Vec::new();
        let mut p = HEAD.load(Ordering::Acquire);
        // SAFETY: as in `release_in_child`.
        while let Some(e) = unsafe { p.as_ref() } {
            if e.state.load(Ordering::Acquire) == HELD {
                out.push((
                    e.fd.load(Ordering::Relaxed),
                    e.addr.load(Ordering::Relaxed),
                    e.len.load(Ordering::Relaxed),
                ));
            }
            p = e.next.load(Ordering::Acquire);
        }
        out
    }

    #[test]
    fn a_registration_is_listed_until_dropped() {
        let f = File::open("/dev/null").unwrap();
        let fd = f.as_raw_fd();
        let a = Registration::new(&f, 0x1000 as *const u8, 4096);
        assert!(held().contains(&(fd, 0x1000, 4096)));
        drop(a);
        assert!(!held().contains(&(fd, 0x1000, 4096)));
    }
}
