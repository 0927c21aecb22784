//! What a mirror's templates say they hold ([`Templates::heap_bytes`]) against what the
//! allocator gave them: counted here, by a global allocator that tallies this thread's live
//! bytes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use uet_av::mirror::templates::{Templates, MAX_TEMPLATES};
use uet_av::mirror::Slot;

thread_local! {
    /// Bytes this thread holds from the allocator.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

struct Counting;

fn tally(bytes: usize, sign: isize) {
    // Not during the thread's teardown, when its locals are gone.
    let _ = LIVE.try_with(|l| l.set(l.get() + sign * bytes as isize));
}

// SAFETY: every call is passed on to `System` unchanged; only a count is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        tally(layout.size(), 1);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        tally(layout.size(), -1);
        // SAFETY: the caller's contract for `dealloc`; `ptr` came from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        tally(layout.size(), -1);
        tally(new_size, 1);
        // SAFETY: the caller's contract for `realloc`; `ptr` came from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// This thread's count. Signed: a thread may free what another allocated (a harness that
/// runs each test on a thread of its own), so a test may find it below zero.
fn live() -> isize {
    LIVE.with(|l| l.get())
}

/// Bytes this thread has come to hold since its count was `before`.
fn held_since(before: isize) -> usize {
    usize::try_from(live() - before).expect("no more freed than allocated since")
}

/// An address of subnet `k` (a /16 of its own, so a template of its own).
fn subnet(k: u32) -> Slot {
    let mut b = [0u8; 32];
    b[0] = 0x10;
    b[1] = 0x1F;
    b[2] = 1;
    b[16..20].copy_from_slice(&(0x0A00_0001u32 + (k << 16)).to_be_bytes());
    b
}

#[test]
fn templates_count_every_byte_they_hold() {
    let before = live();
    let mut t = Templates::default();
    let mut words = Vec::new();
    let mut most_off = 0usize;
    for k in 0..MAX_TEMPLATES as u32 {
        // The words are this test's, not the templates'.
        words.push(0);
        let w = t.pack(&subnet(k)).unwrap();
        *words.last_mut().unwrap() = w;
        let held = held_since(before) - words.capacity() * 8;
        let counted = t.heap_bytes();
        assert!(counted >= held, "{k}: {counted} bytes counted, {held} held");
        most_off = most_off.max(counted - held);
    }
    assert!(most_off <= 64, "counted up to {most_off} bytes too many");
    // Releasing templates gives no memory back: the count stays.
    let full = t.heap_bytes();
    let held = held_since(before) - words.capacity() * 8;
    for &w in words.iter().step_by(2) {
        t.release(w);
    }
    assert_eq!(held_since(before) - words.capacity() * 8, held);
    assert_eq!(
        t.heap_bytes(),
        full,
        "released templates still hold their room"
    );
}

#[test]
fn addresses_kept_whole_count_every_byte_they_hold() {
    let before = live();
    let mut t = Templates::default();
    let mut words = Vec::with_capacity(MAX_TEMPLATES + 5_000);
    let test_bytes = words.capacity() * 8;
    for k in 0..MAX_TEMPLATES as u32 {
        words.push(t.pack(&subnet(k)).unwrap());
    }
    let mut most_off = 0usize;
    for k in 0..5_000u32 {
        words.push(t.pack(&subnet(MAX_TEMPLATES as u32 + k)).unwrap());
        let held = held_since(before) - test_bytes;
        let counted = t.heap_bytes();
        assert!(counted >= held, "{k}: {counted} bytes counted, {held} held");
        most_off = most_off.max(counted - held);
    }
    assert_eq!(t.spilled(), 5_000);
    assert!(most_off <= 64, "counted up to {most_off} bytes too many");
}
