//! Storage of the host mirror: address slots, and symmetric ranges.
//!
//! * [`Slots`]: the address of every single entry, one 8-byte word per index in one flat
//!   anonymous mapping of `capacity` words made when the AV is opened. A word holds the bits
//!   in which the peers of a job differ and the id of a template holding the rest
//!   ([`templates`] explains the packing and why: a table of a million entries is 8 MB,
//!   which the caches can hold, where one of 32-byte addresses is 32 MB). A small mapping is
//!   committed at once; a larger one is given memory as slots are first written (4 KiB at a
//!   time in its first 8 MiB, 2 MiB past them), so a range or a gap costs no slot memory,
//!   and a lookup is one bounds check, one load and a template from L1: no page table of our
//!   own between the `fi_addr_t` and its slot, which at a million entries is the difference
//!   between one cache miss per scattered lookup and two. A zero word is an empty slot.
//! * [`Ranges`]: symmetric ranges (`fi_av_insertsym`), one record per run of consecutive
//!   indices however many peers it covers, sorted by first index. Members are computed by the
//!   rule `UetAddress::symmetric_member` defines and the NIC applies (`uet_fwif::av_entry`).
//!   Which members are still inserted is the index allocator's business; a range only counts
//!   its live members, and goes away with the last.

pub mod templates;
pub mod whole;

use memmap2::{Advice, MmapMut, MmapOptions};
use std::collections::BTreeMap;
use uet_fwif::{NicAvEntry, UetAddress};

pub use templates::Slot;
use templates::Templates;

/// Bytes of a slot word.
pub const SLOT_BYTES: usize = 8;

/// Bytes of a page as [`Slots::heap_bytes`] counts them: the unit in which the kernel
/// commits memory to the mapping on first write (4 KiB on x86-64 and most arm64 kernels).
pub const PAGE_BYTES: usize = 4096;

/// Slots per counted page.
pub const PAGE_SLOTS: usize = PAGE_BYTES / SLOT_BYTES;

/// Bytes of a transparent hugepage.
pub const HUGEPAGE_BYTES: usize = 2 << 20;

/// Where a mirror starts to ask for transparent hugepages (`MADV_HUGEPAGE`): the slots from
/// 1,048,576 on. There a first write commits 2 MiB at once instead of faulting in each 4 KiB
/// (a fault costs about as much as forty slot writes on a virtual machine), and a scattered
/// lookup walks no page table per 4 KiB. Below it the mirror asks for none
/// (`MADV_NOHUGEPAGE`, which also holds where the system grants hugepages unasked), and
/// memory is committed 4 KiB at a time, so a mirror of up to 8 MiB holds no more than it
/// uses. Past it, each 2 MiB of the mapping is accounted whole from its first write; the
/// kernel places hugepages on 2 MiB boundaries of the address, which need not be those of
/// the mapping, so the count is right to within one hugepage. Lowest-free allocation fills a
/// mirror from index 0, so about one hugepage is ahead of use, at most a quarter of what is
/// in use.
pub const HUGEPAGES_FROM_BYTES: usize = 8 << 20;

/// Pages of [`PAGE_BYTES`] in a hugepage.
const PAGES_PER_HUGEPAGE: usize = HUGEPAGE_BYTES / PAGE_BYTES;

/// Mirrors up to this size (8,192 slots) are committed when the AV opens, as an allocation of
/// that size would be, so that inserts into a small AV never wait for the kernel to supply a
/// page; larger ones are committed a page at a time as they fill.
pub const COMMIT_AT_OPEN_BYTES: usize = 64 * 1024;

/// The most 4 KiB pages past the one being written that a mirror commits ahead of use in one
/// call (256 KiB); see [`Slots`].
pub const POPULATE_AHEAD_PAGES: usize = 64;

/// The address slots of an AV: `capacity` slot words, zero (empty) until written, and the
/// templates they use.
///
/// The mapping is private and anonymous, made without `MAP_NORESERVE`, so the system's
/// overcommit policy decides at open time whether a table of this size may exist (a strict
/// policy refuses the open with `ENOMEM` rather than failing a write later). A mapping of up
/// to [`COMMIT_AT_OPEN_BYTES`] is populated at once (`MAP_POPULATE`); past
/// [`HUGEPAGES_FROM_BYTES`] it is advised to use hugepages. Memory committed is tracked in a
/// bitmap, one bit per [`PAGE_BYTES`] (all the pages of a hugepage at once past
/// [`HUGEPAGES_FROM_BYTES`]), for memory accounting.
///
/// Below [`HUGEPAGES_FROM_BYTES`], the first write to a page not yet committed whose previous
/// page is committed (the mirror filled in order, as lowest-free allocation does) also
/// commits the pages after it (`MADV_POPULATE_WRITE`): a quarter as many as are committed
/// already, at most [`POPULATE_AHEAD_PAGES`]. One call then stands for up to 64 page faults,
/// each of which costs a trap into the kernel (about 3 µs on a virtual machine, 6 ns per
/// slot of a page filled in order), and what an in-order fill holds ahead of use stays within
/// a quarter of what is used, as past [`HUGEPAGES_FROM_BYTES`]. A first write past a gap
/// commits its own page alone. A kernel without the advice (before Linux 5.14) faults each
/// page in as it is written, as before.
#[derive(Debug)]
pub struct Slots {
    map: MmapMut,
    /// `capacity * SLOT_BYTES`: the bytes of `map` that are slots (an empty table maps one
    /// page).
    slot_bytes: usize,
    /// One bit per page of `map` committed: written at least once, or populated at open.
    written: Vec<u64>,
    /// Bits set in `written`.
    written_pages: usize,
    /// What the slot words leave out.
    templates: Templates,
}

impl Slots {
    /// `capacity` empty slots. Fails only when the system refuses the mapping (or, on a
    /// 32-bit host, when `capacity` slots do not fit the address space).
    pub fn new(capacity: u32) -> std::io::Result<Self> {
        let slot_bytes = (capacity as usize)
            .checked_mul(SLOT_BYTES)
            .ok_or_else(|| std::io::Error::other("the mirror does not fit the address space"))?;
        // A zero-length mapping is an error for mmap(2); one page stands for an empty table.
        let len = slot_bytes.max(PAGE_BYTES);
        let small = len <= COMMIT_AT_OPEN_BYTES;
        let mut options = MmapOptions::new();
        options.len(len);
        if small {
            options.populate();
        }
        let map = options.map_anon()?;
        // Only advice: a kernel without transparent hugepages refuses it, and the mirror works
        // the same on 4 KiB pages (still accounted by hugepage past 8 MiB, an upper bound).
        let _ = map.advise_range(Advice::NoHugePage, 0, len.min(HUGEPAGES_FROM_BYTES));
        if let Some(huge) = len.checked_sub(HUGEPAGES_FROM_BYTES).filter(|&n| n > 0) {
            let _ = map.advise_range(Advice::HugePage, HUGEPAGES_FROM_BYTES, huge);
        }
        let pages = len.div_ceil(PAGE_BYTES);
        let mut slots = Slots {
            map,
            slot_bytes,
            written: vec![0; pages.div_ceil(64)],
            written_pages: 0,
            templates: Templates::default(),
        };
        if small {
            (0..pages).for_each(|p| slots.mark_written(p));
        }
        Ok(slots)
    }

    /// The word of the slot at `index`; `None` past the mapping. A table smaller than a page
    /// is mapped as a page, whose words past the capacity read as empty slots (nothing writes
    /// them), so the capacity need not be checked apart: one comparison on the lookup path.
    /// The mapping is read as words (it is page-aligned, and a whole number of words long:
    /// `capacity` words, or the one page of a smaller table, so the view never fails), which
    /// takes fewer instructions than a range of its bytes.
    #[inline(always)]
    fn word(&self, index: u32) -> Option<u64> {
        let words = <[u64] as zerocopy::FromBytes>::ref_from_bytes(&self.map).ok()?;
        words.get(index as usize).copied()
    }

    /// The address in the slot at `index`; `None` when it is empty or past the capacity.
    #[inline(always)]
    pub fn get(&self, index: u32) -> Option<Slot> {
        self.templates.unpack(self.word(index)?)
    }

    /// Whether the slot at `index` holds an address.
    #[inline]
    pub fn is_filled(&self, index: u32) -> bool {
        self.word(index).is_some_and(|w| w != 0)
    }

    /// Whether the `count` slots from `first` all hold an address.
    pub fn all_filled(&self, first: u32, count: usize) -> bool {
        let Some(at) = (first as usize).checked_mul(SLOT_BYTES) else {
            return false;
        };
        let end = count
            .checked_mul(SLOT_BYTES)
            .and_then(|n| n.checked_add(at))
            .filter(|&end| end <= self.slot_bytes);
        match end.and_then(|end| self.map.get(at..end)) {
            Some(words) => words
                .chunks_exact(SLOT_BYTES)
                .all(|w| w.iter().any(|&b| b != 0)),
            None => false,
        }
    }

    /// Store `bytes` at `index` (a first byte of 0, which no address has, empties the slot).
    /// Returns false, and stores nothing, past the capacity or when no memory can be had for
    /// a new template.
    #[inline]
    pub fn set(&mut self, index: u32, bytes: Slot) -> bool {
        let Some(at) = (index as usize)
            .checked_mul(SLOT_BYTES)
            .filter(|&at| at < self.slot_bytes)
        else {
            return false;
        };
        let new = if bytes[0] == 0 {
            0
        } else {
            match self.templates.pack(&bytes) {
                Some(w) => w,
                None => return false,
            }
        };
        let Some(w) = self
            .map
            .get_mut(at..self.slot_bytes)
            .and_then(|m| m.first_chunk_mut::<SLOT_BYTES>())
        else {
            self.templates.release(new);
            return false;
        };
        let old = u64::from_ne_bytes(*w);
        *w = new.to_ne_bytes();
        self.templates.release(old);
        self.mark_written(at / PAGE_BYTES);
        true
    }

    #[inline]
    fn mark_written(&mut self, page: usize) {
        let Some(&w) = self.written.get(page / 64) else {
            return;
        };
        if w & (1u64 << (page % 64)) != 0 {
            return;
        }
        if page < HUGEPAGES_FROM_BYTES / PAGE_BYTES {
            let ahead = self.populate_ahead(page);
            self.set_pages(page, 1 + ahead);
        } else {
            // The whole hugepage: 512 pages, eight aligned words of the bitmap.
            self.set_pages(page - page % PAGES_PER_HUGEPAGE, PAGES_PER_HUGEPAGE);
        }
    }

    /// Commit pages after `page`, which was just written for the first time (see [`Slots`]):
    /// returns how many were committed, 0 when the kernel refused the advice. Only a write
    /// that continues the committed pages before it (`page - 1` committed: an in-order fill)
    /// commits ahead; a first write elsewhere (past a gap) commits its own page alone.
    #[cold]
    fn populate_ahead(&self, page: usize) -> usize {
        let Some(before) = page.checked_sub(1) else {
            return 0;
        };
        if self
            .written
            .get(before / 64)
            .is_none_or(|w| w & (1u64 << (before % 64)) == 0)
        {
            return 0;
        }
        let end = (HUGEPAGES_FROM_BYTES / PAGE_BYTES).min(self.map.len() / PAGE_BYTES);
        let ahead = (self.written_pages / 4)
            .min(POPULATE_AHEAD_PAGES)
            .min(end.saturating_sub(page + 1));
        if ahead == 0 {
            return 0;
        }
        // Only advice, on memory of this mapping alone: the pages stay zero, as unwritten
        // ones read; the kernel commits them now instead of at their first write.
        match self.map.advise_range(
            Advice::PopulateWrite,
            (page + 1) * PAGE_BYTES,
            ahead * PAGE_BYTES,
        ) {
            Ok(()) => ahead,
            Err(_) => 0,
        }
    }

    #[cold]
    fn set_pages(&mut self, first: usize, n: usize) {
        // The mapping's last hugepage may be partial: count only pages of the mapping.
        let end = (first + n).min(self.map.len().div_ceil(PAGE_BYTES));
        for page in first..end {
            if let Some(w) = self.written.get_mut(page / 64) {
                let bit = 1u64 << (page % 64);
                if *w & bit == 0 {
                    *w |= bit;
                    self.written_pages += 1;
                }
            }
        }
    }

    /// Empty the slot at `index`; returns whether it held an address.
    pub fn clear(&mut self, index: u32) -> bool {
        let Some(w) = (index as usize)
            .checked_mul(SLOT_BYTES)
            .and_then(|at| self.map.get_mut(at..self.slot_bytes))
            .and_then(|m| m.first_chunk_mut::<SLOT_BYTES>())
        else {
            return false;
        };
        let old = u64::from_ne_bytes(*w);
        if old == 0 {
            return false;
        }
        *w = [0; SLOT_BYTES];
        self.templates.release(old);
        true
    }

    /// Non-empty slots, ascending (only pages ever written are read).
    pub fn iter(&self) -> impl Iterator<Item = (u32, Slot)> + '_ {
        let pages = self.written.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64)
                .filter(move |b| bits & (1u64 << b) != 0)
                .map(move |b| w * 64 + b)
        });
        pages.flat_map(move |p| {
            let first = p * PAGE_SLOTS;
            self.map
                .get(p * PAGE_BYTES..self.slot_bytes)
                .unwrap_or(&[])
                .chunks_exact(SLOT_BYTES)
                .take(PAGE_SLOTS)
                .enumerate()
                .filter_map(move |(i, w)| {
                    let w = u64::from_ne_bytes(*w.first_chunk::<SLOT_BYTES>()?);
                    Some(((first + i) as u32, self.templates.unpack(w)?))
                })
        })
    }

    /// Templates in use, and addresses kept whole ([`templates`]).
    pub fn templates(&self) -> (usize, usize) {
        (self.templates.len(), self.templates.spilled())
    }

    /// Host bytes held: the pages committed (at open, or by the kernel on first write), the
    /// bitmap that counts them, and the templates.
    pub fn heap_bytes(&self) -> usize {
        self.written_pages * PAGE_BYTES + self.written.capacity() * 8 + self.templates.heap_bytes()
    }
}

/// One symmetric range of the mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// First table index.
    pub first: u32,
    /// Table indices covered.
    pub count: u32,
    /// Services per node.
    pub svc: u32,
    /// Set member at `first`.
    pub offset: u32,
    /// Set member 0.
    pub base: UetAddress,
    /// Members still inserted.
    pub live: u32,
}

impl Range {
    /// Whether `index` is one of the range's indices.
    pub fn covers(&self, index: u32) -> bool {
        index >= self.first && u64::from(index) < u64::from(self.first) + u64::from(self.count)
    }

    /// The address at `index`.
    pub fn member(&self, index: u32) -> Option<UetAddress> {
        if !self.covers(index) {
            return None;
        }
        self.base
            .symmetric_member(self.svc, self.offset.checked_add(index - self.first)?)
    }

    /// The range record AV_WRITE carries, stamping `job_id`.
    pub fn record(&self, job_id: u32) -> NicAvEntry {
        NicAvEntry::range(
            &NicAvEntry::for_peer(&self.base, job_id),
            self.svc,
            self.first,
            self.offset,
            self.count,
        )
    }
}

/// The mirror's ranges, by first index, never overlapping. A B-tree: an AV of many small
/// ranges (one `fi_av_insertsym` per node) adds, finds and drops each in logarithmic time,
/// where a sorted list moved every later range along at each one added before them or gone
/// (quadratic in the ranges when all were removed in index order).
#[derive(Debug, Default)]
pub struct Ranges {
    map: BTreeMap<u32, Range>,
}

impl Ranges {
    /// Entries a node of the standard library's B-tree holds at most, and at least (but the
    /// root): what [`Ranges::heap_bytes`] counts with.
    const NODE_CAPACITY: usize = 11;
    const NODE_FILL_MIN: usize = 5;

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No ranges.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The range covering `index`.
    #[inline]
    pub fn covering(&self, index: u32) -> Option<&Range> {
        if self.map.is_empty() {
            return None;
        }
        let (_, r) = self.map.range(..=index).next_back()?;
        r.covers(index).then_some(r)
    }

    /// The range that starts at `first`.
    pub fn starting_at(&self, first: u32) -> Option<&Range> {
        self.map.get(&first)
    }

    /// Whether a range covers any index of `first..end`. As ranges never overlap, the last
    /// one to start before `end` does if any does: one that starts earlier ends before it.
    pub fn meets(&self, first: u32, end: u64) -> bool {
        let before_end = u32::try_from(end).map_or(u32::MAX, |e| e.saturating_sub(1));
        if end == 0 || u64::from(first) >= end {
            return false;
        }
        self.map
            .range(..=before_end)
            .next_back()
            .is_some_and(|(_, r)| u64::from(r.first) + u64::from(r.count) > u64::from(first))
    }

    /// Add a range (its indices were allocated for it, so it overlaps nothing).
    pub fn insert(&mut self, r: Range) {
        self.map.insert(r.first, r);
    }

    /// One member of the range covering `index` was removed; the range goes with its last.
    pub fn member_removed(&mut self, index: u32) {
        let Some((&first, r)) = self.map.range_mut(..=index).next_back() else {
            return;
        };
        if !r.covers(index) {
            return;
        }
        r.live = r.live.saturating_sub(1);
        if r.live == 0 {
            self.map.remove(&first);
        }
    }

    /// Remove the range starting at `first` whole (a batch rolled back).
    pub fn remove_at(&mut self, first: u32) -> Option<Range> {
        self.map.remove(&first)
    }

    /// Every range, ascending.
    pub fn iter(&self) -> impl Iterator<Item = &Range> + '_ {
        self.map.values()
    }

    /// Heap bytes held, from above: the B-tree's nodes, each holding between 5 and 11 ranges
    /// (the root fewer), with a word per entry for the links of the nodes above them. 0 when
    /// it holds none, though a map emptied again may keep one node (about 600 bytes).
    pub fn heap_bytes(&self) -> usize {
        if self.map.is_empty() {
            return 0;
        }
        let nodes = self.map.len().div_ceil(Self::NODE_FILL_MIN);
        let entry = core::mem::size_of::<u32>() + core::mem::size_of::<Range>();
        nodes * Self::NODE_CAPACITY * (entry + core::mem::size_of::<usize>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_fwif::address::{caps, AddressingMode};

    /// Bytes of `s` that are pages and bitmap: what [`Slots::heap_bytes`] counts besides the
    /// templates.
    fn paged(s: &Slots) -> usize {
        s.heap_bytes() - s.templates.heap_bytes()
    }

    #[test]
    fn slots_are_flat_and_counted_by_page_written() {
        // 10,000 slots: 20 pages of 4 KiB, a bitmap of one word.
        let mut m = Slots::new(10_000).unwrap();
        assert!(m.set(5_000, [1; 32]) && m.set(5_001, [1; 32]));
        assert_eq!(paged(&m), PAGE_BYTES + 8, "one page and the bitmap");
        assert!(m.set(9_999, [1; 32]));
        assert_eq!(paged(&m), 2 * PAGE_BYTES + 8);
        // A mapping of 19.53 pages, read as words to its last one.
        assert_eq!((m.get(9_999), m.get(10_000)), (Some([1; 32]), None));
        assert_eq!(
            m.iter().map(|(i, _)| i).collect::<Vec<_>>(),
            [5_000, 5_001, 9_999]
        );
        assert_eq!(m.templates(), (1, 0), "one template for the three");
        assert!(m.heap_bytes() > paged(&m));

        // 2,000,000 slots (16 MB): 4 KiB pages up to 8 MiB (slot 1,048,576), hugepages past it.
        let mut s = Slots::new(2_000_000).unwrap();
        let bitmap = 2_000_000usize.div_ceil(PAGE_SLOTS * 64) * 8;
        assert!(s.get(2_000_000).is_none());
        assert!(!s.set(2_000_000, [1; 32]), "past the capacity");
        assert!(s.set(100_000, [1; 32]));
        assert_eq!(paged(&s), PAGE_BYTES + bitmap, "one page below 8 MiB");
        assert!(s.set(1_500_000, [1; 32]));
        assert_eq!(s.get(1_500_000), Some([1; 32]));
        assert_eq!(s.get(1_500_001), None, "empty");
        let both = PAGE_BYTES + HUGEPAGE_BYTES + bitmap;
        assert_eq!(paged(&s), both, "and a hugepage past it");
        assert!(
            s.set(1_500_001, [2; 32]),
            "same hugepage: not counted again"
        );
        assert!(s.set(1_500_000 + PAGE_SLOTS as u32 * 3, [2; 32]));
        assert_eq!(paged(&s), both);
        assert!(s.clear(100_000));
        assert!(s.clear(1_500_000 + PAGE_SLOTS as u32 * 3));
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            [(1_500_000, [1; 32]), (1_500_001, [2; 32])]
        );
        // Overwriting gives the old template back.
        assert!(s.set(1_500_000, [2; 32]));
        assert_eq!((s.get(1_500_000), s.templates()), (Some([2; 32]), (1, 0)));
        assert!(s.clear(1_500_001));
        assert!(s.clear(1_500_000));
        assert!(!s.clear(1_500_000));
        assert_eq!(s.iter().count(), 0);
        assert_eq!(s.templates(), (0, 0), "no template outlives its last slot");
        // A first byte of 0 is no address: it empties the slot.
        assert!(s.set(7, [1; 32]) && s.set(7, [0; 32]));
        assert!(!s.is_filled(7) && s.get(7).is_none());

        // A small mirror is committed whole at open, and counted so.
        let small = Slots::new(8192).unwrap();
        assert_eq!(small.heap_bytes(), COMMIT_AT_OPEN_BYTES + 8);
        assert_eq!(small.iter().count(), 0);
        let mut empty = Slots::new(0).unwrap();
        assert!(empty.get(0).is_none());
        assert!(
            !empty.set(0, [1; 32]) && !empty.clear(0) && !empty.is_filled(0),
            "the padding is no slot"
        );
        assert!(!empty.all_filled(0, 1) && !empty.all_filled(u32::MAX, usize::MAX));
        // A partial last hugepage is counted for the pages the mapping has.
        let mut tail = Slots::new(1_200_000).unwrap();
        assert!(tail.set(1_199_999, [1; 32]));
        let pages = (1_200_000 * SLOT_BYTES).div_ceil(PAGE_BYTES);
        let bitmap = pages.div_ceil(64) * 8;
        assert_eq!(
            paged(&tail),
            (pages - HUGEPAGES_FROM_BYTES / PAGE_BYTES) * PAGE_BYTES + bitmap
        );
        let mut ten = Slots::new(10).unwrap();
        assert!(!ten.set(10, [1; 32]) && ten.get(10).is_none());
        assert!(ten.set(8, [1; 32]) && ten.set(9, [1; 32]));
        assert!(ten.all_filled(8, 2) && !ten.all_filled(7, 2) && !ten.all_filled(9, 2));
        assert!(ten.clear(9));
        assert_eq!(empty.heap_bytes(), PAGE_BYTES + 8);
    }

    #[test]
    fn filling_in_order_commits_ahead_within_a_quarter_and_counts_only_committed_pages() {
        // 200,000 slots: 1.6 MB, all below the hugepage part, filled from index 0 as
        // lowest-free allocation does.
        let n = 200_000u32;
        let mut s = Slots::new(n).unwrap();
        let pages = (n as usize * SLOT_BYTES).div_ceil(PAGE_BYTES);
        let bitmap = pages.div_ceil(64) * 8;
        let mut most_ahead = 0;
        for i in 0..n {
            assert!(s.set(i, [1; 32]));
            if i % 1_000 == 999 || i == n - 1 {
                let used = (i as usize + 1) * SLOT_BYTES;
                let used_pages = used.div_ceil(PAGE_BYTES);
                let held = paged(&s) - bitmap;
                assert!(
                    held >= used_pages * PAGE_BYTES,
                    "{i}: every page written counts"
                );
                let ahead = held / PAGE_BYTES - used_pages;
                assert!(
                    ahead <= used_pages / 4 + 1 && ahead <= POPULATE_AHEAD_PAGES,
                    "{i}: {ahead} pages ahead of {used_pages} in use"
                );
                most_ahead = most_ahead.max(ahead);
            }
        }
        assert_eq!(paged(&s), pages * PAGE_BYTES + bitmap, "full: every page");
        // Where the kernel takes the advice (Linux 5.14 on), pages were committed ahead.
        if s.map
            .advise_range(Advice::PopulateWrite, 0, PAGE_BYTES)
            .is_ok()
        {
            assert!(
                most_ahead > POPULATE_AHEAD_PAGES / 2,
                "{most_ahead} pages ahead"
            );
        }
        // Pages committed ahead hold no address, and read as empty slots.
        let mut half = Slots::new(n).unwrap();
        for i in 0..n / 2 {
            assert!(half.set(i, [1; 32]));
        }
        assert!(paged(&half) - bitmap > (n as usize / 2) * SLOT_BYTES);
        assert_eq!(half.iter().count(), n as usize / 2);
        assert_eq!(half.get(n / 2), None);
    }

    #[test]
    fn scattered_first_writes_commit_nothing_ahead() {
        // Pages first written out of order (a gap left by a range, indices chosen far
        // apart) are no in-order fill: committing ahead of each would hold up to 64 unused
        // pages per page used, far past a quarter of what is used.
        let n = 200_000u32;
        let mut s = Slots::new(n).unwrap();
        let pages = (n as usize * SLOT_BYTES).div_ceil(PAGE_BYTES);
        let bitmap = pages.div_ceil(64) * 8;
        let mut used = 0;
        for page in (0..pages - 1).step_by(100) {
            assert!(s.set((page * PAGE_SLOTS) as u32, [1; 32]));
            used += 1;
            let held = (paged(&s) - bitmap) / PAGE_BYTES;
            assert!(
                held - used <= used / 4,
                "page {page}: {} pages ahead of {used} in use",
                held - used
            );
        }
    }

    #[test]
    fn ranges_find_and_count_members() {
        let base = UetAddress {
            caps: caps::AI_BASE,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 10,
            fabric_addr: "10.0.0.1".parse().unwrap(),
            ri_start: 1,
            ri_count: 1,
            initiator: 0,
        };
        let mut r = Ranges::default();
        r.insert(Range {
            first: 100,
            count: 4,
            svc: 2,
            offset: 0,
            base,
            live: 4,
        });
        r.insert(Range {
            first: 10,
            count: 2,
            svc: 2,
            offset: 4,
            base,
            live: 2,
        });
        assert_eq!(r.covering(11).unwrap().first, 10);
        // Whether a span meets a range: the ranges' ends, and spans on either side.
        assert!(r.meets(11, 12) && r.meets(0, 11) && r.meets(103, 200) && r.meets(0, 200));
        assert!(!r.meets(12, 100) && !r.meets(0, 10) && !r.meets(104, u64::MAX));
        assert!(
            !r.meets(50, 50) && !r.meets(60, 0),
            "empty spans meet nothing"
        );
        assert!(r.covering(12).is_none() && r.covering(99).is_none());
        let m = r.covering(103).unwrap().member(103).unwrap();
        assert_eq!(m.fabric_addr.to_string(), "10.0.0.2");
        assert_eq!(m.pid_on_fep, 11);
        // Member 4 (node 2, service 0) sits at index 10.
        let m = r.covering(10).unwrap().member(10).unwrap();
        assert_eq!(
            (m.fabric_addr.to_string().as_str(), m.pid_on_fep),
            ("10.0.0.3", 10)
        );
        r.member_removed(10);
        r.member_removed(11);
        assert!(r.covering(10).is_none(), "gone with its last member");
        assert!(r.remove_at(101).is_none());
        assert!(r.remove_at(100).is_some());
        assert!(r.is_empty());
    }
}
