//! NIC AV tables: the translation memory the TX engine reads and the RX engine reverse-maps.
//!
//! * Up to `CAP_AV.max_tables` tables; handles are 1-based (0 means "no AV") and the lowest free
//!   handle is reused first.
//! * A table of `capacity` entries ([`NicAvEntry`], 64 bytes each) starts all invalid. Its
//!   storage is [`TableMemory`]: zeroed, and committed whole when the table is created (on
//!   transparent hugepages when it is large enough), as a NIC's table memory is there before
//!   its first write.
//! * `rx_ctx_bits`: a destination `fi_addr_t` carries the receive context in its top
//!   `rx_ctx_bits` bits (`fi_rx_addr`) and the table index in the rest.
//! * `max_group_id` (peer groups, since 1.7): when not 0, the index is bits 0–31 only and
//!   the peer group is bits 32 to 63 − `rx_ctx_bits` (`fi_group_addr`); a group above
//!   `max_group_id` does not translate ([`TranslateError::BadGroup`]).
//! * A source CAM (`source_cam`) maps (fabric address, initiator id) to the single entries
//!   holding that peer and serves FI_SOURCE on receive: the lowest valid index holding the
//!   sender is reported (or its user id when the entry has one). AV_WRITE does not wait for
//!   it: each single entry written leaves its CAM placement (home slot and index, 8 bytes,
//!   computed while the entry is at hand) on a backlog, and the CAM takes the backlog in
//!   before the next source lookup, in home-slot order (see [`AvTable::catch_up_cam`]), as a
//!   NIC updates such a structure off the command path and has its receive pipeline wait
//!   for it. Every lookup sees every entry written before it. The backlog is table memory
//!   of its own, `capacity` placements, committed when the table is created like the rest;
//!   a write that finds it full catches the CAM up first.
//!   Placed one at a time, at the write, each entry cost a cache miss at a random slot of a
//!   CAM twice the table's size — at a million entries most of what a write cost; placed in
//!   bulk, in order, the misses are one per line of slots.
//! * A table cannot be destroyed while an endpoint is bound to it.
//!
//! * Symmetric range entries (`RANGE`, see `uet_fwif::av_entry`) are kept in an ordered map by
//!   first index, beside the per-index entries, and indexed by the fabric addresses their
//!   members span for FI_SOURCE ([`crate::range_sources`]), so a receive checks only the
//!   ranges that may hold its sender; a range costs one map entry however many
//!   peers it covers, and adding or removing one costs the same wherever it lies. Translation
//!   of an index with no single entry looks up the range starting last at or before it and
//!   computes the member. Removing a member marks a hole in the range's own bitmap (allocated at
//!   the first hole); a single entry written into a hole takes its place; the range goes away
//!   with its last member. Ranges never overlap each other or a single entry: AV_WRITE refuses
//!   such a batch whole.
//! * A bitmap of the indices holding single entries lets AV_WRITE check a new range against
//!   them without touching the (lazily allocated) entry pages.

use crate::range_sources::RangeSources;
use crate::source_cam::{SourceCam, SourceKey};
use crate::table_memory::TableMemory;
use std::collections::BTreeMap;
use std::net::IpAddr;
use uet_fwif::av_entry::entry_flags;
use uet_fwif::NicAvEntry;

/// A range entry and the members removed from it.
#[derive(Debug)]
struct RangeSlot {
    entry: NicAvEntry,
    first: u32,
    count: u32,
    live: u32,
    /// Bit per position: the member was removed. Empty until the first removal.
    holes: Vec<u64>,
}

impl RangeSlot {
    fn is_hole(&self, position: u32) -> bool {
        let p = position as usize;
        self.holes
            .get(p / 64)
            .is_some_and(|w| (w >> (p % 64)) & 1 == 1)
    }

    fn set_hole(&mut self, position: u32, hole: bool) {
        let p = position as usize;
        if self.holes.is_empty() {
            if !hole {
                return;
            }
            self.holes = vec![0; (self.count as usize).div_ceil(64)];
        }
        if let Some(w) = self.holes.get_mut(p / 64) {
            if hole {
                *w |= 1 << (p % 64);
            } else {
                *w &= !(1 << (p % 64));
            }
        }
    }
}

/// Why a batch of AV_WRITE records cannot be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteConflict {
    /// An index past the table.
    OutOfRange,
    /// A range overlapping another range or a single entry, or a single entry on a live range
    /// member, or a range record not written at its own first index.
    Overlap,
}

/// One record of a write to a table: the index and the entry to store there. AV_WRITE's
/// records are checked and stored where the firmware read them, in its staging buffer; the
/// write window's one is a pair.
pub(crate) trait TableRecord {
    /// Index and entry.
    fn parts(&self) -> (u32, &NicAvEntry);
}

impl TableRecord for (u32, NicAvEntry) {
    fn parts(&self) -> (u32, &NicAvEntry) {
        (self.0, &self.1)
    }
}

impl TableRecord for uet_fwif::AvWriteRecord {
    fn parts(&self) -> (u32, &NicAvEntry) {
        (self.index.get(), &self.entry)
    }
}

/// One AV table.
#[derive(Debug)]
pub(crate) struct AvTable {
    pub capacity: u32,
    pub rx_ctx_bits: u8,
    /// Largest peer group id a destination may name; 0: no peer groups.
    pub max_group_id: u32,
    entries: TableMemory<NicAvEntry>,
    /// Key -> first index of its chain.
    cam: SourceCam,
    /// Bit per index: a valid single entry is there. Grows with the highest such index.
    singles: Vec<u64>,
    /// Range entries by first index (a map, so that adding or removing one costs the same
    /// wherever it lies, however many there are).
    ranges: BTreeMap<u32, RangeSlot>,
    /// The ranges by the fabric addresses their members span: FI_SOURCE's candidates.
    range_sources: RangeSources,
    /// Endpoints bound to the table.
    pub bound: u32,
}

/// Why a destination `fi_addr_t` was refused by [`AvTable::translate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TranslateError {
    /// The index names no valid entry.
    NotAvail,
    /// The peer group is above the table's `max_group_id`.
    BadGroup,
}

/// A translated destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Destination {
    /// The entry to send with.
    pub entry: NicAvEntry,
    /// The receive context (`fi_rx_addr`).
    pub rx_ctx: u64,
    /// The peer group (0 without peer groups).
    pub group: u32,
}

impl AvTable {
    /// A table of `capacity` invalid entries; `None` when memory cannot be reserved.
    pub(crate) fn new(capacity: u32, rx_ctx_bits: u8, max_group_id: u32) -> Option<Self> {
        let entries = TableMemory::zeroed(usize::try_from(capacity).ok()?)?;
        let cam = SourceCam::new(capacity)?;
        tracing::debug!(
            capacity,
            entries_on_hugepages = entries.is_huge(),
            cam_on_hugepages = cam.is_huge(),
            "AV table memory mapped"
        );
        Some(AvTable {
            capacity,
            rx_ctx_bits,
            max_group_id,
            entries,
            cam,
            singles: Vec::new(),
            ranges: BTreeMap::new(),
            range_sources: RangeSources::default(),
            bound: 0,
        })
    }

    /// The valid single entry at `index`. An entry's validity is its bit in `singles` — a
    /// valid-bit array beside the entry memory, so invalidating an entry writes one bit and
    /// leaves its 64 bytes alone.
    pub(crate) fn get(&self, index: u32) -> Option<&NicAvEntry> {
        if Self::bit(&self.singles, index) {
            self.entries.as_slice().get(index as usize)
        } else {
            None
        }
    }

    fn bit(words: &[u64], index: u32) -> bool {
        let i = index as usize;
        words.get(i / 64).is_some_and(|w| (w >> (i % 64)) & 1 == 1)
    }

    fn key(e: &NicAvEntry) -> Option<SourceKey> {
        e.is_valid().then(|| SourceKey {
            fabric_addr: u128::from_le_bytes(e.fabric_addr),
            ipv6: e.flags.get() & entry_flags::IPV6 != 0,
            initiator: e.initiator.get(),
        })
    }

    /// The CAM key of the valid single entry at `index`.
    fn key_at(singles: &[u64], entries: &[NicAvEntry], index: u32) -> Option<SourceKey> {
        if Self::bit(singles, index) {
            entries.get(index as usize).and_then(Self::key)
        } else {
            None
        }
    }

    /// Every valid single entry and its CAM key, in index order.
    fn valid_keys<'a>(
        singles: &'a [u64],
        entries: &'a [NicAvEntry],
    ) -> impl Iterator<Item = (u32, SourceKey)> + 'a {
        let valid = singles.iter().enumerate().flat_map(|(w, &word)| {
            (0..64u32)
                .filter(move |b| (word >> b) & 1 == 1)
                .map(move |b| w as u32 * 64 + b)
        });
        valid.filter_map(|i| Self::key_at(singles, entries, i).map(|k| (i, k)))
    }

    fn set_single_bit(&mut self, index: u32, on: bool) {
        let i = index as usize;
        if i / 64 >= self.singles.len() {
            if !on {
                return;
            }
            self.singles.resize(i / 64 + 1, 0);
        }
        if let Some(w) = self.singles.get_mut(i / 64) {
            if on {
                *w |= 1 << (i % 64);
            } else {
                *w &= !(1 << (i % 64));
            }
        }
    }

    /// The words of a bitmap that bits `lo..hi` fall in, each with the mask of those bits.
    fn word_masks(lo: usize, hi: usize) -> impl Iterator<Item = (usize, u64)> {
        let mut i = lo;
        core::iter::from_fn(move || {
            if i >= hi {
                return None;
            }
            let bit = i % 64;
            let take = (64 - bit).min(hi - i);
            let mask = if take == 64 {
                u64::MAX
            } else {
                ((1u64 << take) - 1) << bit
            };
            let word = i / 64;
            i += take;
            Some((word, mask))
        })
    }

    /// Whether any single entry lies in `first..first + count`.
    fn singles_in(&self, first: u32, count: u32) -> bool {
        let (lo, hi) = (first as usize, first as usize + count as usize);
        Self::word_masks(lo, hi)
            .any(|(word, mask)| self.singles.get(word).is_some_and(|&w| w & mask != 0))
    }

    /// The range covering `index`.
    fn covering(&self, index: u32) -> Option<&RangeSlot> {
        let (_, r) = self.ranges.range(..=index).next_back()?;
        (u64::from(index) < u64::from(r.first) + u64::from(r.count)).then_some(r)
    }

    /// The live range member at `index`, if one is there.
    fn range_member(&self, index: u32) -> Option<NicAvEntry> {
        let r = self.covering(index)?;
        let position = index - r.first;
        if r.is_hole(position) {
            return None;
        }
        r.entry.range_member(index)
    }

    /// What the TX engine uses for `index`: its single entry, its range member, or INVALID.
    pub(crate) fn effective(&self, index: u32) -> NicAvEntry {
        match self.get(index) {
            Some(e) if e.is_valid() => *e,
            _ => self.range_member(index).unwrap_or(NicAvEntry::INVALID),
        }
    }

    /// Check a whole AV_WRITE batch against the table and against itself before any of it is
    /// applied. Records are (index, entry) with entries already checked field by field.
    ///
    /// Each step is bounded whatever the batch holds: a range is checked against the table's
    /// ranges by one lookup, the new ranges against each other once sorted, and only then
    /// against the single entries, when they are known not to overlap (so the spans scanned
    /// add up to at most the table).
    pub(crate) fn check_batch<R: TableRecord>(&self, records: &[R]) -> Result<(), WriteConflict> {
        // The common case, single entries into a table without ranges: nothing can overlap,
        // and only the indices need checking.
        if self.ranges.is_empty() && records.iter().all(|r| !r.parts().1.is_range()) {
            return if records.iter().all(|r| r.parts().0 < self.capacity) {
                Ok(())
            } else {
                Err(WriteConflict::OutOfRange)
            };
        }
        let mut new_ranges: Vec<(u32, u32)> = Vec::new();
        for (index, &e) in records.iter().map(TableRecord::parts) {
            if index >= self.capacity {
                return Err(WriteConflict::OutOfRange);
            }
            if !e.is_range() {
                continue;
            }
            let (first, count) = (e.range_first.get(), e.range_count.get());
            if first != index {
                return Err(WriteConflict::Overlap);
            }
            if u64::from(first) + u64::from(count) > u64::from(self.capacity) {
                return Err(WriteConflict::OutOfRange);
            }
            // The table's range starting last before the new one's end must end before it.
            let end = first + count;
            if let Some((_, prev)) = self.ranges.range(..end).next_back() {
                if u64::from(prev.first) + u64::from(prev.count) > u64::from(first) {
                    return Err(WriteConflict::Overlap);
                }
            }
            new_ranges.push((first, count));
        }
        new_ranges.sort_unstable();
        if new_ranges.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
            return Err(WriteConflict::Overlap);
        }
        if new_ranges
            .iter()
            .any(|&(first, count)| self.singles_in(first, count))
        {
            return Err(WriteConflict::Overlap);
        }
        for (index, &e) in records.iter().map(TableRecord::parts) {
            if !e.is_valid() || e.is_range() {
                continue;
            }
            if self.range_member(index).is_some() {
                return Err(WriteConflict::Overlap);
            }
            let k = new_ranges.partition_point(|&(f, _)| f <= index);
            if let Some(&(f, c)) = k.checked_sub(1).and_then(|p| new_ranges.get(p)) {
                if index < f + c {
                    return Err(WriteConflict::Overlap);
                }
            }
        }
        Ok(())
    }

    /// Whether single entries may be written to `first..first + count`
    /// (AV_WRITE_PEERS): the run lies in the table and holds no live member of a range. A
    /// table without ranges checks only the bounds.
    pub(crate) fn check_run(&self, first: u32, count: u32) -> Result<(), WriteConflict> {
        if u64::from(first) + u64::from(count) > u64::from(self.capacity) {
            return Err(WriteConflict::OutOfRange);
        }
        if !self.ranges.is_empty() && (first..first + count).any(|i| self.range_member(i).is_some())
        {
            return Err(WriteConflict::Overlap);
        }
        Ok(())
    }

    /// Store valid single entries at `first ..` (AV_WRITE_PEERS, a run that passed
    /// [`AvTable::check_run`]): the same as [`AvTable::set`] on each. Where the run holds no
    /// single entry yet — a fresh table filling up — the questions `set` asks of each entry
    /// are asked once: no entry is overwritten (so no CAM key is compared), the backlog's room
    /// is made once, and the valid bits are set a word at a time.
    pub(crate) fn set_singles(&mut self, first: u32, entries: &[NicAvEntry]) {
        let count = entries.len();
        let at = first as usize;
        let fresh = u32::try_from(count).is_ok_and(|n| !self.singles_in(first, n))
            && entries.iter().all(|e| e.is_valid() && !e.is_range());
        if !fresh
            || at
                .checked_add(count)
                .is_none_or(|end| end > self.entries.as_slice().len())
        {
            for (&e, index) in entries.iter().zip(first..) {
                self.set(index, e);
            }
            return;
        }
        if self.cam.backlog_room() < count {
            self.catch_up_cam();
        }
        if let Some(slots) = self.entries.as_mut_slice().get_mut(at..at + count) {
            slots.copy_from_slice(entries);
        }
        self.set_single_bits(first, count);
        for (e, index) in entries.iter().zip(first..) {
            if let Some(key) = Self::key(e) {
                // Room was made above, and a backlog holds as many placements as the table
                // has entries.
                let recorded = self.cam.record(key, index);
                debug_assert!(recorded, "room was made for the run");
            }
        }
    }

    /// Set the valid bits of `first..first + count`, a word at a time.
    fn set_single_bits(&mut self, first: u32, count: usize) {
        let (lo, hi) = (first as usize, first as usize + count);
        if hi == lo {
            return;
        }
        let words = (hi - 1) / 64 + 1;
        if self.singles.len() < words {
            self.singles.resize(words, 0);
        }
        for (word, mask) in Self::word_masks(lo, hi) {
            if let Some(w) = self.singles.get_mut(word) {
                *w |= mask;
            }
        }
    }

    /// Store a batch of records that passed [`AvTable::check_batch`], in order: the same as
    /// [`AvTable::set`] on each.
    pub(crate) fn set_batch<R: TableRecord>(&mut self, records: &[R]) {
        for (index, &entry) in records.iter().map(TableRecord::parts) {
            self.set(index, entry);
        }
    }

    /// Take the entries written since the last call into the source CAM
    /// ([`SourceCam::catch_up`]): what a source lookup does first.
    pub(crate) fn catch_up_cam(&mut self) {
        let (singles, entries) = (&self.singles, self.entries.as_slice());
        self.cam.catch_up(|| Self::valid_keys(singles, entries));
    }

    /// Store `entry` at `index` (the batch passed [`AvTable::check_batch`]). A range entry is
    /// added to the range list; an invalid entry invalidates the index.
    pub(crate) fn set(&mut self, index: u32, entry: NicAvEntry) {
        if !entry.is_valid() {
            self.invalidate(index);
            return;
        }
        if entry.is_range() {
            let count = entry.range_count.get();
            let replaced = self.ranges.insert(
                index,
                RangeSlot {
                    entry,
                    first: index,
                    count,
                    live: count,
                    holes: Vec::new(),
                },
            );
            // A checked batch never writes a range over another; were it to, the index
            // forgets the old one before it learns the new.
            if let Some(old) = replaced {
                self.range_sources.remove(&old.entry, old.first, old.count);
            }
            self.range_sources.add(&entry, index, count);
            return;
        }
        // The key of the single entry being overwritten, if any.
        let old_key = self.get(index).and_then(Self::key);
        let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|i| self.entries.as_mut_slice().get_mut(i))
        else {
            return;
        };
        *slot = entry;
        // Written into a range's hole, the single entry shadows the removed member, which
        // stays removed when the single entry goes.
        self.set_single_bit(index, true);
        let Some(key) = Self::key(&entry).filter(|&k| old_key != Some(k)) else {
            // Rewritten with the same peer (a new user id, say): the placement it has, in the
            // CAM or the backlog, still stands, and another would only take a slot.
            return;
        };
        if !self.cam.record(key, index) {
            // The backlog is full: the CAM takes it in, then this entry waits in turn (a
            // rebuild has placed it already; the second placement is only a spare slot).
            self.catch_up_cam();
            let recorded = self.cam.record(key, index);
            debug_assert!(recorded, "an empty backlog has room");
        }
    }

    /// Invalidate the entry at `index`: a single entry is cleared, a range member becomes a
    /// hole (and the range goes away with its last member).
    pub(crate) fn invalidate(&mut self, index: u32) {
        if self.get(index).is_some() {
            // One bit: the entry's bytes stay, unread, until it is written again; its CAM
            // slot (or backlog place) goes stale.
            self.set_single_bit(index, false);
            return;
        }
        let Some(first) = self.covering(index).map(|r| r.first) else {
            return;
        };
        let Some(r) = self.ranges.get_mut(&first) else {
            return;
        };
        let position = index - r.first;
        if r.is_hole(position) {
            return;
        }
        r.set_hole(position, true);
        r.live -= 1;
        if r.live == 0 {
            if let Some(gone) = self.ranges.remove(&first) {
                self.range_sources
                    .remove(&gone.entry, gone.first, gone.count);
            }
        }
    }

    /// Ranges in the table.
    #[cfg(test)]
    pub(crate) fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// Split a destination `fi_addr_t` into (index, rx_ctx, group). Without peer groups the
    /// index is everything below the receive-context bits and the group 0; with them the
    /// index is bits 0–31 and the group the bits between it and the receive context.
    pub(crate) fn split(&self, dest: u64) -> (u64, u64, u64) {
        let bits = u32::from(self.rx_ctx_bits);
        let (rest, rx_ctx) = if bits == 0 {
            (dest, 0)
        } else {
            let shift = 64 - bits;
            (dest & ((1u64 << shift) - 1), dest >> shift)
        };
        if self.max_group_id == 0 {
            (rest, rx_ctx, 0)
        } else {
            (rest & u64::from(u32::MAX), rx_ctx, rest >> 32)
        }
    }

    /// Translate a destination: the valid entry, the receive context and the peer group.
    pub(crate) fn translate(&self, dest: u64) -> Result<Destination, TranslateError> {
        let (index, rx_ctx, group) = self.split(dest);
        let index = u32::try_from(index).map_err(|_| TranslateError::NotAvail)?;
        if index >= self.capacity {
            return Err(TranslateError::NotAvail);
        }
        let entry = self.effective(index);
        if !entry.is_valid() {
            return Err(TranslateError::NotAvail);
        }
        let group = u32::try_from(group)
            .ok()
            .filter(|&g| g <= self.max_group_id)
            .ok_or(TranslateError::BadGroup)?;
        Ok(Destination {
            entry,
            rx_ctx,
            group,
        })
    }

    /// The index of the member of range `r` with this fabric address and initiator.
    fn range_source(r: &RangeSlot, fa: &[u8; 16], ipv6: bool, initiator: u32) -> Option<u32> {
        let e = &r.entry;
        if (e.flags.get() & entry_flags::IPV6 != 0) != ipv6 {
            return None;
        }
        let node = if ipv6 {
            u32::try_from(u128::from_be_bytes(*fa).checked_sub(u128::from_be_bytes(e.fabric_addr))?)
                .ok()?
        } else {
            let b = &e.fabric_addr;
            u32::from_be_bytes([fa[0], fa[1], fa[2], fa[3]])
                .checked_sub(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))?
        };
        let service = initiator.checked_sub(e.initiator.get())?;
        let svc = e.range_svc.get();
        if service >= svc {
            return None;
        }
        let member = node.checked_mul(svc)?.checked_add(service)?;
        let position = member.checked_sub(e.range_offset.get())?;
        if position >= r.count || r.is_hole(position) {
            return None;
        }
        r.first.checked_add(position)
    }

    /// Reverse translation for a receive completion's `src_addr`.
    #[cfg(test)]
    pub(crate) fn source(&mut self, ip: IpAddr, initiator: u32) -> u64 {
        self.source_for_job(ip, initiator, |_| true)
            .unwrap_or(uet_fwif::FI_ADDR_NOTAVAIL)
    }

    /// Reverse translation for a receive completion's `src_addr`: among the valid entries of
    /// the sender `(ip, initiator)`, the lowest index for which `in_job` holds (the entry sends
    /// with the request's JobID), else the lowest index; its user id when it has one, else the
    /// index. `None` when no entry holds the sender.
    pub(crate) fn source_for_job(
        &mut self,
        ip: IpAddr,
        initiator: u32,
        in_job: impl Fn(&NicAvEntry) -> bool,
    ) -> Option<u64> {
        self.catch_up_cam();
        let mut fa = [0u8; 16];
        let ipv6 = match ip {
            IpAddr::V4(a) => {
                fa[..4].copy_from_slice(&a.octets());
                false
            }
            IpAddr::V6(a) => {
                fa = a.octets();
                true
            }
        };
        let key = SourceKey {
            fabric_addr: u128::from_le_bytes(fa),
            ipv6,
            initiator,
        };
        // The lowest single entry holding the sender (and the lowest in the request's job)...
        fn lower(best: &mut Option<u32>, index: u32) {
            *best = Some(best.map_or(index, |b| b.min(index)));
        }
        let (mut best, mut best_in_job) = (None, None);
        // One probe run answers both: each candidate's entry is read once.
        self.cam.candidates(key, |i| {
            let Some(e) = self.get(i) else {
                return;
            };
            if Self::key(e) == Some(key) {
                lower(&mut best, i);
                if in_job(e) {
                    lower(&mut best_in_job, i);
                }
            }
        });
        // ...or a range member, if one sits lower: among the ranges whose members' addresses
        // span the sender's (see `range_sources`).
        // A table without ranges (the common case) reads no index.
        if !self.ranges.is_empty() {
            let address = if ipv6 {
                u128::from_be_bytes(fa)
            } else {
                u128::from(u32::from_be_bytes([fa[0], fa[1], fa[2], fa[3]]))
            };
            let ranges = &self.ranges;
            self.range_sources.candidates(ipv6, address, |first| {
                let Some(r) = ranges.get(&first) else {
                    return;
                };
                if best_in_job.is_some_and(|b| b <= r.first) {
                    return;
                }
                if let Some(index) = Self::range_source(r, &fa, ipv6, initiator) {
                    lower(&mut best, index);
                    if in_job(&r.entry) {
                        lower(&mut best_in_job, index);
                    }
                }
            });
        }
        let index = best_in_job.or(best)?;
        Some(self.source_value(index))
    }

    /// What a receive reports as the source held at `index`: its user id, else the index.
    fn source_value(&self, index: u32) -> u64 {
        match self.effective(index).user_id() {
            Some(uid) => uid,
            None => u64::from(index),
        }
    }
}

/// Every AV table of a NIC.
#[derive(Debug)]
pub(crate) struct AvTables {
    tables: Vec<Option<AvTable>>,
}

impl AvTables {
    pub(crate) fn new(max_tables: u16) -> Self {
        AvTables {
            tables: (0..max_tables).map(|_| None).collect(),
        }
    }

    fn slot(handle: u32) -> Option<usize> {
        usize::try_from(handle.checked_sub(1)?).ok()
    }

    /// Insert a table under the lowest free handle; `None` when all handles are taken.
    pub(crate) fn insert(&mut self, t: AvTable) -> Option<u32> {
        let i = self.tables.iter().position(Option::is_none)?;
        let slot = self.tables.get_mut(i)?;
        *slot = Some(t);
        u32::try_from(i + 1).ok()
    }

    /// Whether a handle could be allocated now.
    pub(crate) fn has_free(&self) -> bool {
        self.tables.iter().any(Option::is_none)
    }

    /// Entries of the live tables, together: the table memory they hold.
    pub(crate) fn entries(&self) -> u64 {
        self.tables
            .iter()
            .flatten()
            .map(|t| u64::from(t.capacity))
            .sum()
    }

    pub(crate) fn get(&self, handle: u32) -> Option<&AvTable> {
        self.tables.get(Self::slot(handle)?)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, handle: u32) -> Option<&mut AvTable> {
        self.tables.get_mut(Self::slot(handle)?)?.as_mut()
    }

    pub(crate) fn remove(&mut self, handle: u32) -> Option<AvTable> {
        self.tables.get_mut(Self::slot(handle)?)?.take()
    }

    pub(crate) fn clear(&mut self) {
        for t in &mut self.tables {
            *t = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_fwif::address::{AddressingMode, UetAddress};

    pub(super) fn peer(ip: &str, initiator: u32) -> NicAvEntry {
        NicAvEntry::for_peer(
            &UetAddress {
                caps: 0,
                mode: AddressingMode::Relative,
                max_msg_mtu: false,
                pid_on_fep: 3,
                fabric_addr: ip.parse().unwrap(),
                ri_start: 1,
                ri_count: 4,
                initiator,
            },
            9,
        )
    }

    #[test]
    fn million_entry_table_is_lazy_and_translates() {
        let mut t = AvTable::new(1 << 20, 4, 0).unwrap();
        t.set(1000, peer("10.0.0.2", 5));
        let dest = (3u64 << 60) | 1000;
        let d = t.translate(dest).unwrap();
        assert_eq!(d.rx_ctx, 3);
        assert_eq!(d.entry.pid_on_fep.get(), 3);
        assert_eq!(t.translate(999), Err(TranslateError::NotAvail));
        assert_eq!(t.translate(1 << 20), Err(TranslateError::NotAvail));
        // Without peer groups, bits 32 and up are index bits: out of range.
        assert_eq!(t.translate((5 << 32) | 1000), Err(TranslateError::NotAvail));
        assert_eq!(t.source("10.0.0.2".parse().unwrap(), 5), 1000);
        t.set(7, peer("10.0.0.2", 5).with_user_id(0xABC));
        assert_eq!(t.source("10.0.0.2".parse().unwrap(), 5), 0xABC);
        t.invalidate(7);
        t.invalidate(1000);
        assert_eq!(t.source("10.0.0.2".parse().unwrap(), 5), u64::MAX);
    }

    /// The lowest index holding each peer of `t`, by a scan of the table.
    fn lowest_by_scan(t: &AvTable) -> std::collections::HashMap<([u8; 16], u32), u64> {
        let mut lowest = std::collections::HashMap::new();
        for i in (0..t.capacity).rev() {
            if let Some(f) = t.get(i) {
                lowest.insert((f.fabric_addr, f.initiator.get()), u64::from(i));
            }
        }
        lowest
    }

    /// Each of `peers` reverse-translates to the lowest index holding it (by a scan), or to
    /// none; afterwards the backlog is taken in and the CAM is not past 3/4.
    fn assert_sources_by_scan(
        t: &mut AvTable,
        peers: impl Iterator<Item = NicAvEntry>,
        what: &str,
    ) {
        let lowest = lowest_by_scan(t);
        for e in peers {
            let want = lowest
                .get(&(e.fabric_addr, e.initiator.get()))
                .copied()
                .unwrap_or(u64::MAX);
            let ip = e.fabric_ip();
            assert_eq!(t.source(ip, e.initiator.get()), want, "{what}: {ip}");
        }
        assert_eq!(t.cam.pending(), 0, "{what}");
        assert!(!t.cam.full_after(0), "{what}");
    }

    #[test]
    fn the_cam_answers_through_rebuilds_and_full_backlogs() {
        // A 64-entry table, rewritten over and over with some 150 writes between lookups:
        // the backlog fills (and the CAM catches up at the write), and rebuilds happen as
        // stale slots pile up. Every lookup finds the lowest index holding the sender.
        let mut t = AvTable::new(64, 0, 0).unwrap();
        let mut x = 0x2545_F491u32;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let index = x % 64;
            if x & 0x100 == 0 {
                t.invalidate(index);
            } else {
                t.set(index, peer(&format!("10.0.{}.1", x % 7 + 1), x % 5));
            }
            assert!(
                t.cam.pending() <= 64,
                "step {step}: the backlog stays bounded"
            );
            if step % 301 == 0 {
                let peers = (0..7 * 5).map(|n| peer(&format!("10.0.{}.1", n % 7 + 1), n / 7));
                assert_sources_by_scan(&mut t, peers, &format!("step {step}"));
            }
        }
    }

    #[test]
    fn a_run_of_singles_stores_what_one_set_per_entry_would() {
        // Two tables with one random history of single entries, invalidations and a range;
        // then a run of new peers through set_singles on one and set per entry on the other.
        // Fresh runs, runs over single entries, over a range's hole, and runs that fill the
        // backlog: every index and every sender's source agree.
        let mut x = 0x9E37_79B9u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for round in 0..300u32 {
            let (mut a, mut b) = (
                AvTable::new(64, 0, 0).unwrap(),
                AvTable::new(64, 0, 0).unwrap(),
            );
            let both = |a: &mut AvTable, b: &mut AvTable, f: &dyn Fn(&mut AvTable)| {
                f(a);
                f(b);
            };
            let peer_n = |n: u32| peer(&format!("10.0.{}.{}", n / 200, 1 + n % 200), n % 3);
            if round % 2 == 0 {
                let range = NicAvEntry::range(&peer_n(900), 1, 40, 0, 8);
                both(&mut a, &mut b, &|t| t.set(40, range));
                both(&mut a, &mut b, &|t| t.invalidate(42));
            }
            // Every third round keeps its history below index 16, so that its run above it
            // is fresh: set_singles's bulk path, for runs of up to 24 entries.
            let span = if round % 3 == 1 { 16 } else { 40 };
            for _ in 0..20 + next() % 60 {
                let (i, n) = (next() % span, next() % 30);
                if next() % 4 == 0 {
                    both(&mut a, &mut b, &|t| t.invalidate(i));
                } else {
                    both(&mut a, &mut b, &|t| t.set(i, peer_n(n)));
                }
            }
            let first = match round % 3 {
                0 => 42,
                1 => 16 + next() % 8,
                _ => next() % 40,
            };
            let len = if first == 42 {
                1
            } else {
                1 + next() % (40 - first)
            };
            let run: Vec<NicAvEntry> = (0..len).map(|_| peer_n(next() % 30)).collect();
            a.set_singles(first, &run);
            for (&e, i) in run.iter().zip(first..) {
                b.set(i, e);
            }
            for i in 0..64 {
                assert_eq!(a.get(i), b.get(i), "round {round}: index {i}");
                assert_eq!(a.effective(i), b.effective(i), "round {round}: index {i}");
            }
            for n in (0..30).chain([900]) {
                let p = peer_n(n);
                let (ip, init) = (p.fabric_ip(), p.initiator.get());
                assert_eq!(
                    a.source(ip, init),
                    b.source(ip, init),
                    "round {round}: peer {n}"
                );
            }
        }
        // A run longer than the backlog's room: the CAM takes the backlog in first.
        let mut t = AvTable::new(64, 0, 0).unwrap();
        let peer_n = |n: u32| peer(&format!("10.3.0.{}", n + 1), n % 3);
        (0..60).for_each(|i| t.set(i, peer_n(i)));
        (50..60).for_each(|i| t.invalidate(i));
        assert!(t.cam.backlog_room() < 14);
        let run: Vec<NicAvEntry> = (100..114).map(peer_n).collect();
        t.set_singles(50, &run);
        for n in (0..50).chain(100..114) {
            let p = peer_n(n);
            let want = if n < 50 { n } else { n - 50 };
            assert_eq!(
                t.source(p.fabric_ip(), p.initiator.get()),
                u64::from(want),
                "peer {n}"
            );
        }
    }

    /// An entry rewritten with the same peer (a new user id) keeps its one CAM slot: the
    /// CAM does not fill with copies of it, and the lookup reports the newest user id.
    #[test]
    fn rewriting_the_same_peer_takes_no_new_slot() {
        let mut t = AvTable::new(64, 0, 0).unwrap();
        let ip: IpAddr = "10.3.0.1".parse().unwrap();
        t.set(5, peer("10.3.0.1", 2));
        assert_eq!(t.source(ip, 2), 5);
        for uid in 1..1000u64 {
            t.set(5, peer("10.3.0.1", 2).with_user_id(uid));
        }
        assert_eq!(t.source(ip, 2), 999);
        assert_eq!(t.cam.used(), 1);
        // Another peer at the index takes a slot of its own; the old one goes stale.
        t.set(5, peer("10.3.0.2", 2));
        assert_eq!(t.source(ip, 2), u64::MAX);
        assert_eq!(t.source("10.3.0.2".parse().unwrap(), 2), 5);
        assert_eq!(t.cam.used(), 2);
    }

    /// Tables of a few entries, written many times their capacity between lookups: the
    /// backlog fills again and again, and nothing written is lost.
    #[test]
    fn small_tables_lose_nothing_when_the_backlog_fills() {
        for cap in [1u32, 2, 3, 64, 100] {
            let mut t = AvTable::new(cap, 0, 0).unwrap();
            for round in 0..20u32 {
                for k in 0..5 * cap {
                    let n = round * 7 + k;
                    t.set(
                        (n * 13) % cap,
                        peer(&format!("10.2.0.{}", n % 200 + 1), n % 3),
                    );
                }
                for (&(fabric_addr, initiator), &want) in &lowest_by_scan(&t) {
                    let ip = t
                        .get(want as u32)
                        .map(|e| e.fabric_ip())
                        .unwrap_or(IpAddr::from([0, 0, 0, 0]));
                    assert_eq!(t.get(want as u32).map(|e| e.fabric_addr), Some(fabric_addr));
                    assert_eq!(
                        t.source(ip, initiator),
                        want,
                        "capacity {cap}, round {round}"
                    );
                }
            }
        }
    }

    /// Writes and invalidations in bursts of every size between source lookups: each lookup
    /// finds the lowest valid index holding the sender, as a scan of the table does, whether
    /// the CAM took the burst in one by one, in bulk, or by a rebuild.
    #[test]
    fn source_lookups_see_every_write_before_them() {
        const CAP: u32 = 4096;
        let mut t = AvTable::new(CAP, 0, 0).unwrap();
        let mut x = 0x1234_5678u32;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let peer_of = |n: u32| peer(&format!("10.1.{}.{}", n / 250 % 250, n % 250 + 1), n % 3);
        for round in 0..60 {
            let burst = [1, 10, 63, 64, 500, 3000, 9000][round % 7];
            for _ in 0..burst {
                let r = rand();
                let index = r % CAP;
                if r & 0x8000_0000 != 0 && r & 0x4000_0000 != 0 {
                    t.invalidate(index);
                } else {
                    t.set(index, peer_of(rand() % 900));
                }
            }
            assert_sources_by_scan(&mut t, (0..900).map(peer_of), &format!("round {round}"));
        }
    }

    #[test]
    fn peer_groups_split_index_group_and_receive_context() {
        let mut t = AvTable::new(64, 4, 0x0FFF).unwrap();
        t.set(7, peer("10.0.0.2", 5));
        // Group 0x123 in bits 32.., receive context 2 in the top 4 bits.
        let dest = (2u64 << 60) | (0x123 << 32) | 7;
        let d = t.translate(dest).unwrap();
        assert_eq!((d.rx_ctx, d.group), (2, 0x123));
        assert_eq!(t.translate(7).unwrap().group, 0);
        assert_eq!(t.translate(0x1000 << 32 | 7), Err(TranslateError::BadGroup));
        // The index is checked first.
        assert_eq!(t.translate(0x1000 << 32 | 8), Err(TranslateError::NotAvail));
        assert_eq!(t.translate(u64::MAX), Err(TranslateError::NotAvail));
    }

    fn sym(ip: &str, pid: u16, svc: u32, first: u32, offset: u32, count: u32) -> NicAvEntry {
        let mut base = peer(ip, 100);
        base.pid_on_fep = zerocopy::little_endian::U16::new(pid);
        NicAvEntry::range(&base, svc, first, offset, count)
    }

    #[test]
    fn a_range_translates_every_member_and_costs_one_slot() {
        let mut t = AvTable::new(1 << 20, 0, 0).unwrap();
        // 1000 nodes x 1000 services at indices 0..1_000_000.
        let r = sym("10.0.0.1", 1, 1000, 0, 0, 1_000_000);
        assert_eq!(t.check_batch(&[(0, r)]), Ok(()));
        t.set(0, r);
        assert_eq!(t.range_count(), 1);
        let e = t.translate(999_999).unwrap().entry;
        assert_eq!(e.fabric_ip().to_string(), "10.0.3.232"); // 10.0.0.1 + 999
        assert_eq!(e.pid_on_fep.get(), 1 + 999);
        assert!(t.translate(1_000_000).is_err());
        // The sender of index 123_456's packets reverse-translates to 123_456.
        let m = t.effective(123_456);
        assert_eq!(t.source(m.fabric_ip(), m.initiator.get()), 123_456);
        // Nothing was written into the per-index entries.
        assert!(t.singles.is_empty());
    }

    #[test]
    fn holes_singles_and_overlaps() {
        let mut t = AvTable::new(64, 0, 0).unwrap();
        let r = sym("10.0.0.1", 1, 2, 4, 0, 6); // indices 4..10
        t.set(4, r);
        // A single on a live member, or a range over a range or a single: refused.
        assert_eq!(
            t.check_batch(&[(5, peer("10.9.9.9", 1))]),
            Err(WriteConflict::Overlap)
        );
        assert_eq!(
            t.check_batch(&[(8, sym("10.1.0.1", 1, 1, 8, 0, 4))]),
            Err(WriteConflict::Overlap)
        );
        t.set(20, peer("10.9.9.9", 1));
        assert_eq!(
            t.check_batch(&[(18, sym("10.1.0.1", 1, 1, 18, 0, 4))]),
            Err(WriteConflict::Overlap)
        );
        // Ranges that overlap each other within one batch: refused.
        assert_eq!(
            t.check_batch(&[
                (30, sym("10.1.0.1", 1, 1, 30, 0, 4)),
                (32, sym("10.2.0.1", 1, 1, 32, 0, 4)),
            ]),
            Err(WriteConflict::Overlap)
        );
        // A range record written away from its first index, or past the table: refused.
        assert_eq!(
            t.check_batch(&[(31, sym("10.1.0.1", 1, 1, 30, 0, 4))]),
            Err(WriteConflict::Overlap)
        );
        assert_eq!(
            t.check_batch(&[(62, sym("10.1.0.1", 1, 1, 62, 0, 4))]),
            Err(WriteConflict::OutOfRange)
        );
        // Remove member 5: a hole; a single may then go there, and stays alone when removed.
        t.invalidate(5);
        assert!(!t.effective(5).is_valid());
        assert!(t.effective(6).is_valid());
        assert_eq!(t.check_batch(&[(5, peer("10.9.9.8", 2))]), Ok(()));
        t.set(5, peer("10.9.9.8", 2));
        assert_eq!(t.effective(5).fabric_ip().to_string(), "10.9.9.8");
        t.invalidate(5);
        assert!(!t.effective(5).is_valid());
        // Removing every member removes the range.
        for i in 4..10 {
            t.invalidate(i);
        }
        assert_eq!(t.range_count(), 0);
        assert_eq!(t.check_batch(&[(5, peer("10.9.9.7", 3))]), Ok(()));
    }
}

#[cfg(test)]
mod source_model_tests {
    use super::*;
    use std::collections::{BTreeMap as Map, BTreeSet};

    /// Peer `10.0.0.<n>` with `initiator`.
    fn peer(n: u32, initiator: u32) -> NicAvEntry {
        super::tests::peer(&format!("10.0.0.{n}"), initiator)
    }

    #[derive(Clone, Debug)]
    pub(super) struct RefRange {
        pub(super) count: u32,
        pub(super) entry: NicAvEntry,
        pub(super) holes: BTreeSet<u32>,
    }

    /// A plain model of a table: single entries and ranges with holes, by index.
    #[derive(Default, Debug)]
    pub(super) struct Ref {
        pub(super) singles: Map<u32, NicAvEntry>,
        pub(super) ranges: Map<u32, RefRange>,
    }

    impl Ref {
        pub(super) fn covering(&self, i: u32) -> Option<(u32, &RefRange)> {
            self.ranges
                .range(..=i)
                .next_back()
                .filter(|(f, r)| i < **f + r.count)
                .map(|(f, r)| (*f, r))
        }
        pub(super) fn live_member(&self, i: u32) -> bool {
            self.covering(i)
                .is_some_and(|(f, r)| !r.holes.contains(&(i - f)))
        }
        pub(super) fn effective(&self, i: u32) -> NicAvEntry {
            if let Some(e) = self.singles.get(&i) {
                return *e;
            }
            match self.covering(i) {
                Some((f, r)) if !r.holes.contains(&(i - f)) => r.entry.range_member(i).unwrap(),
                _ => NicAvEntry::INVALID,
            }
        }
        fn can_write(&self, cap: u32, i: u32, e: &NicAvEntry) -> bool {
            if i >= cap {
                return false;
            }
            if !e.is_valid() {
                return true;
            }
            if e.is_range() {
                let (f, c) = (e.range_first.get(), e.range_count.get());
                if f != i || f + c > cap {
                    return false;
                }
                let overlaps_range = self
                    .ranges
                    .iter()
                    .any(|(rf, r)| *rf < f + c && f < rf + r.count);
                let overlaps_single = self.singles.keys().any(|&s| s >= f && s < f + c);
                return !overlaps_range && !overlaps_single;
            }
            !self.live_member(i)
        }
        pub(super) fn invalidate(&mut self, i: u32) {
            if self.singles.remove(&i).is_some() {
                return;
            }
            let Some((f, _)) = self.covering(i) else {
                return;
            };
            let r = self.ranges.get_mut(&f).unwrap();
            r.holes.insert(i - f);
            if r.holes.len() as u32 == r.count {
                self.ranges.remove(&f);
            }
        }
        pub(super) fn set(&mut self, i: u32, e: NicAvEntry) {
            if !e.is_valid() {
                self.invalidate(i);
            } else if e.is_range() {
                self.ranges.insert(
                    i,
                    RefRange {
                        count: e.range_count.get(),
                        entry: e,
                        holes: BTreeSet::new(),
                    },
                );
            } else {
                self.singles.insert(i, e);
            }
        }
        fn source(&self, cap: u32, ip: IpAddr, init: u32) -> u64 {
            for i in 0..cap {
                let e = self.effective(i);
                if e.is_valid() && e.fabric_ip() == ip && e.initiator.get() == init {
                    return e.user_id().unwrap_or(u64::from(i));
                }
            }
            u64::MAX
        }
    }

    /// Random single-record writes, ranges (based at different nodes, so that their address
    /// intervals overlap in every way) and invalidations on small tables, compared with a
    /// plain model after every step: acceptance, AV_READ's view, and FI_SOURCE (the lowest
    /// index holding the sender, single or range member, or its user id) every third step.
    #[test]
    fn writes_reads_and_sources_match_a_plain_model() {
        let mut x = 0x1234_5678u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut ranges_ok, mut hole_fills) = (0, 0);
        for cap in [1u32, 2, 5, 16, 40] {
            let mut t = AvTable::new(cap, 0, 0).unwrap();
            let mut m = Ref::default();
            for step in 0..4000 {
                let kind = rnd(10);
                let i = rnd(u64::from(cap) + 1) as u32;
                let e = match kind {
                    0..=3 => {
                        let mut e = peer(1 + rnd(3) as u32, rnd(3) as u32);
                        if rnd(4) == 0 {
                            e = e.with_user_id(1000 + rnd(5));
                        }
                        e
                    }
                    4..=5 => {
                        let svc = 1 + rnd(3) as u32;
                        let count = 1 + rnd(6) as u32;
                        let offset = rnd(4) as u32;
                        let base = peer(1 + rnd(3) as u32, rnd(2) as u32);
                        NicAvEntry::range(&base, svc, i, offset, count)
                    }
                    _ => NicAvEntry::INVALID,
                };
                if (6..8).contains(&kind) && i < cap {
                    t.invalidate(i);
                    m.invalidate(i);
                } else {
                    assert!(e.check().is_ok());
                    let want = m.can_write(cap, i, &e);
                    let got = t.check_batch(&[(i, e)]).is_ok();
                    assert_eq!(
                        got, want,
                        "cap {cap} step {step}: write {i} {e:?}\nmodel {m:?}"
                    );
                    if got {
                        if e.is_range() {
                            ranges_ok += 1;
                        }
                        if e.is_valid() && !e.is_range() && m.covering(i).is_some() {
                            hole_fills += 1;
                        }
                        t.set_batch(&[(i, e)]);
                        m.set(i, e);
                    }
                }
                for j in 0..cap {
                    assert_eq!(
                        t.effective(j),
                        m.effective(j),
                        "cap {cap} step {step} index {j}"
                    );
                }
                if step % 3 == 0 {
                    for n in 1..=4u32 {
                        for init in 0..4u32 {
                            let ip = IpAddr::from([10, 0, 0, n as u8]);
                            assert_eq!(
                                t.source(ip, init),
                                m.source(cap, ip, init),
                                "cap {cap} step {step} source {ip} {init}\nmodel {m:?}"
                            );
                        }
                    }
                }
            }
        }
        // The run exercised what it is for.
        assert!(
            ranges_ok > 200 && hole_fills > 50,
            "{ranges_ok} ranges, {hole_fills} fills"
        );
    }
}

/// The model of `source_model_tests`, driven harder: multi-record batches, both address
/// families with the same bytes, entries of two jobs, and lookups now often, now rarely.
#[cfg(test)]
mod deep_model_tests {
    use super::source_model_tests::Ref;
    use super::*;
    use uet_fwif::address::{AddressingMode, UetAddress};

    fn peer(v6: bool, n: u8, initiator: u32, job: u32) -> NicAvEntry {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&[10, 0, 0, n]);
        let ip = if v6 {
            IpAddr::from(b)
        } else {
            IpAddr::from([10, 0, 0, n])
        };
        NicAvEntry::for_peer(
            &UetAddress {
                caps: 0,
                mode: AddressingMode::Relative,
                max_msg_mtu: false,
                pid_on_fep: 3,
                fabric_addr: ip,
                ri_start: 1,
                ri_count: 4,
                initiator,
            },
            job,
        )
    }

    impl Ref {
        fn can_write_batch(&self, cap: u32, batch: &[(u32, NicAvEntry)]) -> bool {
            let mut new_ranges = Vec::new();
            for &(i, e) in batch {
                if i >= cap {
                    return false;
                }
                if !e.is_valid() {
                    continue;
                }
                if e.is_range() {
                    let (f, c) = (e.range_first.get(), e.range_count.get());
                    if f != i || f + c > cap {
                        return false;
                    }
                    if self
                        .ranges
                        .iter()
                        .any(|(rf, r)| *rf < f + c && f < rf + r.count)
                        || self.singles.keys().any(|&s| s >= f && s < f + c)
                    {
                        return false;
                    }
                    new_ranges.push((f, c));
                } else if self.live_member(i) {
                    return false;
                }
            }
            for (a, &(fa, ca)) in new_ranges.iter().enumerate() {
                for &(fb, cb) in new_ranges.iter().skip(a + 1) {
                    if fa < fb + cb && fb < fa + ca {
                        return false;
                    }
                }
            }
            batch.iter().all(|&(i, e)| {
                !e.is_valid()
                    || e.is_range()
                    || !new_ranges.iter().any(|&(f, c)| i >= f && i < f + c)
            })
        }
        /// FI_SOURCE preferring entries of `job`: the lowest index of the sender in the job,
        /// else the lowest.
        fn source_in_job(&self, cap: u32, ip: IpAddr, init: u32, job: u32) -> Option<u64> {
            let mut best = None;
            for i in 0..cap {
                let e = self.effective(i);
                if e.is_valid() && e.fabric_ip() == ip && e.initiator.get() == init {
                    if e.job_id.get() == job {
                        return Some(e.user_id().unwrap_or(u64::from(i)));
                    }
                    if best.is_none() {
                        best = Some(e.user_id().unwrap_or(u64::from(i)));
                    }
                }
            }
            best
        }
    }

    /// Batches of up to six records (singles, ranges of up to 40 members, invalidations) and
    /// invalidations, IPv4 and IPv6 peers whose address bytes are equal, entries of the
    /// request's job and of another: acceptance is all or nothing as the model says, every
    /// index reads as the model's, and FI_SOURCE is the lowest index of the sender in the job,
    /// else the lowest, or its user id. Lookups come every few steps on some tables and after
    /// hundreds of writes on others, so the CAM takes its backlog one by one, in bulk, at a
    /// write that finds the backlog full, and by rebuilds.
    #[test]
    fn batches_families_jobs_tiny_cams_and_many_ranges_match_a_plain_model() {
        let mut x = 0x9876_5432_1234_5678u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut stats = [0u32; 4];
        for (cap, lookup_every) in [
            (1u32, 7u64),
            (2, 7),
            (3, 7),
            (7, 7),
            (33, 7),
            (64, 40),
            (130, 7),
            (130, 150),
            (700, 400),
        ] {
            let mut t = AvTable::new(cap, 0, 0).unwrap();
            let mut m = Ref::default();
            let steps = 2000;
            for step in 0..steps {
                let op = rnd(20);
                if op < 3 {
                    // Invalidate a run or a list.
                    let n = 1 + rnd(4) as u32;
                    let idx: Vec<u32> = (0..n).map(|_| rnd(u64::from(cap)) as u32).collect();
                    for &i in &idx {
                        t.invalidate(i);
                        m.invalidate(i);
                    }
                } else {
                    let wide = rnd(3) == 0;
                    let n = 1 + rnd(if wide { 6 } else { 1 }) as usize;
                    let mut batch = Vec::new();
                    for _ in 0..n {
                        let i = rnd(u64::from(cap) + 1) as u32;
                        let v6 = rnd(2) == 0;
                        let job = 9 + rnd(2) as u32;
                        let e = match rnd(10) {
                            0..=4 => {
                                let mut e = peer(v6, 1 + rnd(4) as u8, rnd(4) as u32, job);
                                if rnd(4) == 0 {
                                    e = e.with_user_id(1000 + rnd(5));
                                }
                                e
                            }
                            5..=7 => {
                                let svc = 1 + rnd(3) as u32;
                                let long = rnd(3) == 0;
                                let count = 1 + rnd(if long { 40 } else { 6 }) as u32;
                                let offset = rnd(5) as u32;
                                let base = peer(v6, 1 + rnd(3) as u8, rnd(2) as u32, job);
                                NicAvEntry::range(&base, svc, i, offset, count)
                            }
                            _ => NicAvEntry::INVALID,
                        };
                        assert!(e.check().is_ok());
                        batch.push((i, e));
                    }
                    let want = m.can_write_batch(cap, &batch);
                    let got = t.check_batch(&batch).is_ok();
                    assert_eq!(
                        got, want,
                        "cap {cap} step {step}: batch {batch:?}\nmodel {m:?}"
                    );
                    stats[usize::from(batch.len() > 1)] += u32::from(got);
                    if got {
                        t.set_batch(&batch);
                        for &(i, e) in &batch {
                            if e.is_valid() && !e.is_range() && m.covering(i).is_some() {
                                stats[2] += 1;
                            }
                            if e.is_range() {
                                stats[3] += 1;
                            }
                            m.set(i, e);
                        }
                    }
                }
                for j in 0..cap.min(140) {
                    let j = if cap > 140 {
                        rnd(u64::from(cap)) as u32
                    } else {
                        j
                    };
                    assert_eq!(
                        t.effective(j),
                        m.effective(j),
                        "cap {cap} step {step} index {j}"
                    );
                }
                if rnd(lookup_every) == 0 {
                    for v6 in [false, true] {
                        for n in 0..=6u8 {
                            for init in 0..6u32 {
                                let ip = peer(v6, n, 0, 0).fabric_ip();
                                let got = t.source_for_job(ip, init, |e| e.job_id.get() == 10);
                                assert_eq!(
                                    got,
                                    m.source_in_job(cap, ip, init, 10),
                                    "cap {cap} step {step} source {ip} {init}\nmodel {m:?}"
                                );
                            }
                        }
                    }
                    assert!(!t.cam.full_after(0));
                }
            }
        }
        assert!(stats.iter().all(|&s| s > 100), "{stats:?}");
    }
}
