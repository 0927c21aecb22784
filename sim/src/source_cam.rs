//! The source CAM of an AV table: (fabric address, initiator) → table index, for FI_SOURCE.
//!
//! An arriving request names its sender by source IP and Initiator ID; the RX engine asks the
//! CAM for the lowest index of the bound AV that holds that peer. The CAM stores table indices
//! only — 4 bytes a slot, open addressing with linear probing, at most 3/4 full — and checks a
//! candidate against the AV entry itself, as a hardware CAM keyed by a hash with the entry
//! memory as the data store would. The same peer inserted at several indices takes several
//! slots. Removing an entry touches nothing here: its slot goes stale, and a candidate is
//! always checked against the entry's valid bit and key, so a stale slot never answers (nor
//! does a slot left twice for one index). Stale slots are dropped when the CAM is rebuilt,
//! from the valid entries.
//!
//! Like the table it indexes, the CAM is sized once, when the table is created: twice the
//! table's capacity in slots (a power of two), so it is at most half full of live entries and
//! never grows. A slot holds `index + 1`, and 0 marks a free slot: a new CAM is zeroed table
//! memory (`table_memory`: the heap, or a mapping asking for hugepages, written at creation),
//! as the NIC's own memory would simply be there.
//!
//! Entries are not placed when written: [`SourceCam::record`] puts their [`Placement`]s on a
//! backlog (table memory as long as the table), and the table has the CAM take it in before
//! a receive's lookup ([`SourceCam::catch_up`]). Many placements at once (a catch-up, a
//! rebuild) go in the order of their home slots, bucketed by
//! the top 11 bits of the home (4 KiB of slots a bucket up to 2^21 slots, the CAM of a
//! million-entry table), so the writes sweep the CAM once from start to end instead of
//! landing at random: about one cache miss per line of slots, not one per key, for three
//! passes over the placements (count, scatter, place).

use crate::table_memory::TableMemory;

/// A free slot.
const EMPTY: u32 = 0;
/// The fewest slots of a CAM.
const MIN_SLOTS: usize = 64;
/// Placements [`SourceCam::catch_up`] takes in home-slot order; fewer go as they come.
const SORT_FROM: usize = 64;
/// Bits of the home slot [`SourceCam::catch_up`] buckets by: 2,048 buckets (16 KiB of
/// counts), each at most 1,024 slots (4 KiB) of a CAM of up to 2^21 slots.
const BUCKET_BITS: u32 = 11;

/// Where an index goes in the CAM: its key's home slot in the high 32 bits (a CAM has fewer
/// than 2^32 slots), the index in the low 32. What [`SourceCam::placement`] computes while
/// the entry is at hand, so that placing it later needs no read of the entry.
type Placement = u64;

/// A peer's identity as the CAM hashes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SourceKey {
    /// Fabric address: IPv6, or IPv4 in the first four bytes.
    pub fabric_addr: u128,
    /// The fabric address is IPv6: a key of its own, so that no IPv6 address whose bytes
    /// begin as an IPv4 address's do is taken for it.
    pub ipv6: bool,
    /// Initiator ID.
    pub initiator: u32,
}

impl SourceKey {
    fn hash(&self) -> u64 {
        let mix = |h: u64, v: u64| (h.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        let h = mix(0, self.fabric_addr as u64);
        let h = mix(h, (self.fabric_addr >> 64) as u64);
        let h = mix(h, u64::from(self.initiator) | u64::from(self.ipv6) << 32);
        h ^ (h >> 29)
    }
}

/// The CAM.
#[derive(Debug)]
pub(crate) struct SourceCam {
    slots: TableMemory<u32>,
    /// Slots holding an index, stale or not.
    used: usize,
    /// The placements [`SourceCam::record`] took since the last [`SourceCam::catch_up`], in
    /// order: the first `pending` of as many as the table has entries. One may be stale (its
    /// index invalidated or written again since), which costs a stale slot, no wrong answer.
    backlog: TableMemory<Placement>,
    pending: usize,
    /// Where a catch-up sorts the backlog: as long.
    scratch: TableMemory<Placement>,
    /// The sort's count per bucket: `1 << min(slot bits, BUCKET_BITS)` of them.
    counts: Vec<usize>,
}

impl SourceCam {
    /// The CAM of a table of `capacity` entries: `2 * capacity` slots rounded up to a power of
    /// two (at least [`MIN_SLOTS`]), all free, and a backlog of `capacity` placements.
    pub(crate) fn new(capacity: u32) -> Option<Self> {
        let slots = (capacity as usize)
            .saturating_mul(2)
            .next_power_of_two()
            .max(MIN_SLOTS);
        // A home slot is a [`Placement`]'s high 32 bits: a table of more than 2^31 entries
        // (2^33 slots; 128 GiB of entries besides) has no CAM, and its AV_CREATE no resources.
        if slots as u64 > 1 << 32 {
            return None;
        }
        let backlog = TableMemory::zeroed(usize::try_from(capacity).ok()?)?;
        let mut counts = Vec::new();
        let buckets = 1usize << slots.trailing_zeros().min(BUCKET_BITS);
        counts.try_reserve_exact(buckets).ok()?;
        counts.resize(buckets, 0);
        Some(SourceCam {
            // Zeroed: every slot free (see `table_memory` for where the memory comes from).
            slots: TableMemory::zeroed(slots)?,
            used: 0,
            scratch: TableMemory::zeroed(backlog.len())?,
            backlog,
            pending: 0,
            counts,
        })
    }

    /// Whether the slots are a mapping asking for hugepages (else on the heap).
    pub(crate) fn is_huge(&self) -> bool {
        self.slots.is_huge()
    }

    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Slots holding an index, stale or not.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Placements waiting for the next [`SourceCam::catch_up`].
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// Whether `more` entries need a [`SourceCam::rebuild`] first: afterwards more than 3/4
    /// of the slots would be used, live or stale.
    pub(crate) fn full_after(&self, more: usize) -> bool {
        self.used.saturating_add(more).saturating_mul(4) > self.slots.len().saturating_mul(3)
    }

    /// The [`Placement`] of `index`, whose entry has `key`.
    fn placement(&self, key: SourceKey, index: u32) -> Placement {
        ((key.hash() as usize & self.mask()) as u64) << 32 | u64::from(index)
    }

    /// Placements the backlog can still take before a [`SourceCam::catch_up`].
    pub(crate) fn backlog_room(&self) -> usize {
        self.backlog.as_slice().len().saturating_sub(self.pending)
    }

    /// Note that `index` now holds `key`, for the next [`SourceCam::catch_up`]: its placement
    /// goes on the backlog. `false`, noting nothing, when the backlog is full: catch up first.
    #[must_use]
    pub(crate) fn record(&mut self, key: SourceKey, index: u32) -> bool {
        let placement = self.placement(key, index);
        match self.backlog.as_mut_slice().get_mut(self.pending) {
            Some(p) => {
                *p = placement;
                self.pending += 1;
                true
            }
            None => false,
        }
    }

    /// Place what the backlog holds: from [`SORT_FROM`] placements on, in the order of their
    /// home slots' top [`BUCKET_BITS`] bits — a counting sort into the scratch memory (one
    /// pass to count; one to scatter, whose writes go to as many sequential streams as there
    /// are buckets and depend on no load), then the writes, which move through the CAM from
    /// start to end. A backlog that would fill the CAM past 3/4 rebuilds it instead from
    /// `valid()` (every valid entry, the backlog's among them), which drops the stale slots.
    pub(crate) fn catch_up<I>(&mut self, valid: impl FnOnce() -> I)
    where
        I: Iterator<Item = (u32, SourceKey)>,
    {
        let len = core::mem::take(&mut self.pending);
        if len == 0 {
            return;
        }
        if self.full_after(len) {
            self.rebuild(valid());
        } else {
            self.place_backlog(len);
        }
    }

    /// Rebuild from exactly the valid entries, in place: stale slots are dropped. The table
    /// holds at most its capacity, half the slots, so a rebuild frees at least a quarter of
    /// them. The entries' placements are listed in the backlog memory (as long as the
    /// capacity) and placed as [`SourceCam::catch_up`] places a backlog; any past its end
    /// are placed as they come.
    pub(crate) fn rebuild(&mut self, valid: impl Iterator<Item = (u32, SourceKey)>) {
        self.slots.as_mut_slice().fill(EMPTY);
        self.used = 0;
        let mut listed = 0;
        let mut skips = Skips::new();
        for (index, key) in valid {
            let p = self.placement(key, index);
            match self.backlog.as_mut_slice().get_mut(listed) {
                Some(slot) => {
                    *slot = p;
                    listed += 1;
                }
                None => {
                    let placed = place(self.slots.as_mut_slice(), p, &mut skips).is_some();
                    self.used += usize::from(placed);
                }
            }
        }
        self.pending = 0;
        self.place_backlog(listed);
    }

    /// Place the first `len` placements of the backlog (see [`SourceCam::catch_up`]);
    /// returns how many slots the placements examined.
    fn place_backlog(&mut self, len: usize) -> usize {
        let slot_bits = self.slots.len().trailing_zeros();
        let shift = 32 + slot_bits - slot_bits.min(BUCKET_BITS);
        let Self {
            slots,
            used,
            backlog,
            scratch,
            counts,
            ..
        } = self;
        let (Some(listed), Some(sorted)) = (
            backlog.as_slice().get(..len),
            scratch.as_mut_slice().get_mut(..len),
        ) else {
            return 0;
        };
        let order: &[Placement] = if len >= SORT_FROM {
            bucket_into(listed, sorted, shift, counts);
            sorted
        } else {
            listed
        };
        let slots = slots.as_mut_slice();
        let mut skips = Skips::new();
        let mut examined = 0;
        for &p in order {
            if let Some(steps) = place(slots, p, &mut skips) {
                *used += 1;
                examined += steps;
            }
        }
        examined
    }

    /// Add `index`, whose entry has `key`, at once. The caller rebuilds first when
    /// [`SourceCam::full_after`] says so; a full CAM still has free slots (at most 3/4 are
    /// used), so the entry is placed either way, only with longer probe runs.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, key: SourceKey, index: u32) {
        debug_assert!(
            !self.full_after(1),
            "rebuild the CAM before inserting into a full one"
        );
        let p = self.placement(key, index);
        let placed = place(self.slots.as_mut_slice(), p, &mut Skips::new()).is_some();
        self.used += usize::from(placed);
    }

    /// Every index in `key`'s probe run, the candidates for it: from its home slot up to the
    /// first free one. Stale slots and other keys' indices are among them; the caller checks
    /// each against the AV entry, as a hardware CAM checks its data store.
    pub(crate) fn candidates(&self, key: SourceKey, mut visit: impl FnMut(u32)) {
        let mask = self.mask();
        let slots = self.slots.as_slice();
        let mut at = key.hash() as usize & mask;
        for _ in 0..slots.len() {
            match slots.get(at).copied() {
                Some(EMPTY) | None => break,
                Some(slot) => visit(slot.wrapping_sub(1)),
            }
            at = (at + 1) & mask;
        }
    }

    /// The lowest index whose entry is valid and has `key` (`key_of` reads an index's entry:
    /// `None` when it is not valid).
    #[cfg(test)]
    pub(crate) fn lowest(
        &self,
        key: SourceKey,
        key_of: impl Fn(u32) -> Option<SourceKey>,
    ) -> Option<u32> {
        let mut best: Option<u32> = None;
        self.candidates(key, |i| {
            if key_of(i) == Some(key) {
                best = Some(best.map_or(i, |b| b.min(i)));
            }
        });
        best
    }

    /// Heap bytes held.
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.len() * 4
    }
}

/// Checkpoints of a probe run: every slot whose position is a multiple of this (and the
/// placement's home slot) may hold a skip ([`Skips`]).
const SKIP_STRIDE: usize = 64;

/// Where a placement of one batch may jump ahead in its probe run: a checkpoint slot ->
/// the slot after a run of occupied slots that starts at it. A placement that probed past
/// [`SKIP_STRIDE`] slots leaves one at every checkpoint it passed, pointing past the slot it
/// took, so that the next placement through that run jumps over it instead of walking it
/// again. Slots are only filled while a batch is placed, so a skip stays true to its end;
/// a placement lands in the slot plain linear probing gives it.
///
/// Without them, `n` placements with one home slot (one peer at `n` indices, which an AV
/// may hold as fi_av_insert allows) or with homes inside one run walk `n²/2` slots: with
/// 2^15 entries of one peer, the catch-up before a receive's source lookup took 5.6 s in a
/// debug build (the fabric waiting on it), and the time grows with the square of `n`.
type Skips = std::collections::HashMap<usize, usize>;

/// The first free slot of `slots` from `home` on (following `skips`), and how many slots
/// were examined; every checkpoint passed goes into `marks` when it is given. `None` when
/// there is no free slot, which the 3/4 bound rules out.
fn probe(
    slots: &[u32],
    home: usize,
    skips: &Skips,
    mut marks: Option<&mut Vec<usize>>,
) -> Option<(usize, usize)> {
    let mask = slots.len().wrapping_sub(1);
    let mut at = home;
    for examined in 0..slots.len() {
        if *slots.get(at)? == EMPTY {
            return Some((at, examined));
        }
        if at == home || at.is_multiple_of(SKIP_STRIDE) {
            if let Some(m) = marks.as_deref_mut() {
                m.push(at);
            }
            if let Some(&to) = (!skips.is_empty()).then(|| skips.get(&at)).flatten() {
                at = to;
                continue;
            }
        }
        at = (at + 1) & mask;
    }
    None
}

/// Put the index of `p` in the first free slot of `slots` (a power of two of them) from its
/// home on; the slots examined, or `None` if there is no free slot, which the 3/4 bound
/// rules out. A long probe leaves skips behind it (see [`Skips`]).
#[inline]
fn place(slots: &mut [u32], p: Placement, skips: &mut Skips) -> Option<usize> {
    let mask = slots.len().wrapping_sub(1);
    let home = (p >> 32) as usize & mask;
    // Slot encoding: index + 1 (0 is free); an index is below the capacity, itself a u32,
    // so the sum cannot wrap.
    let value = (p as u32).wrapping_add(1);
    // The common short probe first, plain linear probing with no look at the skips: they
    // only shorten a long probe, which lands where plain probing would.
    let mut at = home;
    for examined in 0..SKIP_STRIDE.min(slots.len()) {
        let slot = slots.get_mut(at)?;
        if *slot == EMPTY {
            *slot = value;
            return Some(examined);
        }
        at = (at + 1) & mask;
    }
    place_long(slots, home, value, skips)
}

/// [`place`] of a placement whose probe is longer than [`SKIP_STRIDE`]: following the skips,
/// and leaving them behind.
#[cold]
#[inline(never)]
fn place_long(slots: &mut [u32], home: usize, value: u32, skips: &mut Skips) -> Option<usize> {
    let mask = slots.len().wrapping_sub(1);
    let (at, examined) = probe(slots, home, skips, None)?;
    let examined = examined + SKIP_STRIDE;
    if examined > SKIP_STRIDE {
        // The same path again, noting its checkpoints (only for a long probe: the common
        // short one allocates nothing).
        let mut marks = Vec::new();
        probe(slots, home, skips, Some(&mut marks));
        let after = (at + 1) & mask;
        for m in marks {
            skips.insert(m, after);
        }
    }
    *slots.get_mut(at)? = value;
    Some(examined)
}

/// Copy `items` into `out` (as long) ordered by `item >> shift` (below `counts.len()`, the
/// buckets), each bucket's items in their order in `items`: a counting sort, with `counts`
/// as its working memory.
fn bucket_into(items: &[u64], out: &mut [u64], shift: u32, counts: &mut [usize]) {
    let bucket = |v: u64| (v >> shift) as usize;
    debug_assert_eq!(items.len(), out.len());
    debug_assert!(items.iter().all(|&v| bucket(v) < counts.len()));
    // Counts per bucket, then each bucket's next position in `out`.
    counts.fill(0);
    for &v in items {
        if let Some(c) = counts.get_mut(bucket(v)) {
            *c += 1;
        }
    }
    let mut at = 0;
    for c in counts.iter_mut() {
        let count = *c;
        *c = at;
        at += count;
    }
    for &v in items {
        if let Some(pos) = counts.get_mut(bucket(v)) {
            if let Some(slot) = out.get_mut(*pos) {
                *slot = v;
            }
            *pos += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn key(n: u32) -> SourceKey {
        SourceKey {
            fabric_addr: u128::from(0x0a00_0000 + n / 8),
            ipv6: false,
            initiator: n % 8,
        }
    }

    #[test]
    fn a_lookup_reads_few_entries_with_many_endpoints_per_node() {
        // Eight endpoints per node, the CAM half full (as full as a full table makes it): a
        // receive's source lookup reads a handful of entries, not a node's whole run.
        let cap = 1u32 << 14;
        let mut cam = SourceCam::new(cap).unwrap();
        let keys: Vec<SourceKey> = (0..cap)
            .map(|i| SourceKey {
                fabric_addr: u128::from(0x0a00_0000 + i / 8),
                ipv6: false,
                initiator: i,
            })
            .collect();
        for (i, &k) in (0..).zip(&keys) {
            cam.insert(k, i);
        }
        let reads = std::cell::Cell::new(0usize);
        for (i, &k) in (0..).zip(&keys) {
            let key_of = |j: u32| {
                reads.set(reads.get() + 1);
                keys.get(j as usize).copied()
            };
            assert_eq!(cam.lowest(k, key_of), Some(i));
        }
        let per_lookup = reads.get() as f64 / f64::from(cap);
        assert!(per_lookup < 6.0, "{per_lookup} entries read per lookup");
    }

    /// A rebuild in home-slot order answers every lookup as inserting the keys one by one
    /// does, and leaves each key within its probe run.
    #[test]
    fn a_sorted_rebuild_finds_every_key() {
        let cap = 5000u32;
        let mut cam = SourceCam::new(cap).unwrap();
        let keys: Vec<SourceKey> = (0..cap).map(|i| key(i % 1200)).collect();
        cam.rebuild((0..cap).zip(keys.iter().copied()));
        assert_eq!(cam.used(), cap as usize);
        for n in 0..1200 {
            let want = (0..cap).find(|&i| keys[i as usize] == key(n));
            assert_eq!(cam.lowest(key(n), |i| keys.get(i as usize).copied()), want);
        }
    }

    /// Placements in bulk (bucketed by home slot) into a CAM that already holds entries find
    /// every key, as inserting them one by one would.
    #[test]
    fn placing_in_bulk_into_a_partly_filled_cam_finds_every_key() {
        let cap = 1u32 << 13;
        let mut cam = SourceCam::new(cap).unwrap();
        let keys: Vec<SourceKey> = (0..cap)
            .map(|i| key(i.wrapping_mul(2_654_435_761) % 3000))
            .collect();
        for i in 0..500 {
            cam.insert(keys[i as usize], i);
        }
        for i in 500..cap {
            assert!(cam.record(keys[i as usize], i));
        }
        cam.catch_up(std::iter::empty);
        assert_eq!(cam.pending(), 0);
        assert_eq!(cam.used(), cap as usize);
        for n in 0..3000 {
            let want = (0..cap).find(|&i| keys[i as usize] == key(n));
            assert_eq!(
                cam.lowest(key(n), |i| keys.get(i as usize).copied()),
                want,
                "key {n}"
            );
        }
    }

    /// Put `placements` on the backlog and place them as a catch-up does; the slots the
    /// placements examined.
    fn place_all(cam: &mut SourceCam, placements: &[Placement]) -> usize {
        for (slot, &p) in cam.backlog.as_mut_slice().iter_mut().zip(placements) {
            *slot = p;
        }
        cam.place_backlog(placements.len())
    }

    /// Each of `placements` is in the CAM once, in its home's probe run (every slot from its
    /// home to it is occupied), as linear probing leaves it. The runs of the callers' homes
    /// do not wrap past the last slot.
    fn assert_in_their_runs(cam: &SourceCam, placements: &[Placement], what: &str) {
        let slots = cam.slots.as_slice();
        let mask = slots.len() - 1;
        let home: HashMap<u32, usize> = placements
            .iter()
            .map(|&p| (p as u32, (p >> 32) as usize & mask))
            .collect();
        // Occupied slots up to and including each slot.
        let mut run = 0usize;
        let mut placed = 0;
        for (at, &v) in slots.iter().enumerate() {
            if v == EMPTY {
                run = 0;
                continue;
            }
            run += 1;
            placed += 1;
            let index = v - 1;
            let h = home[&index];
            assert!(
                h <= at && at - h < run,
                "{what}: index {index} at {at}, home {h}"
            );
        }
        assert_eq!(placed, placements.len(), "{what}");
    }

    /// Many placements with one home slot (one peer at every index of a table), or with
    /// homes inside the run others made, examine a bounded number of slots each, not the
    /// whole run each, and land where linear probing puts them.
    #[test]
    fn placements_into_one_long_run_examine_a_bounded_number_of_slots_each() {
        let cap = 1u32 << 14;
        let one_home: Vec<Placement> = (0..cap).map(|i| 5 << 32 | u64::from(i)).collect();
        let one_run: Vec<Placement> = (0..cap)
            .map(|i| {
                let home = if i < cap / 2 {
                    5
                } else {
                    6 + u64::from(i - cap / 2)
                };
                home << 32 | u64::from(i)
            })
            .collect();
        for (what, placements) in [("one home", one_home), ("one run", one_run)] {
            let mut cam = SourceCam::new(cap).unwrap();
            let examined = place_all(&mut cam, &placements);
            assert_in_their_runs(&cam, &placements, what);
            assert_eq!(cam.used(), cap as usize, "{what}");
            let per_placement = examined / cap as usize;
            assert!(
                per_placement <= 256,
                "{what}: {examined} slots examined for {cap} placements"
            );
        }
    }

    /// The backlog holds as many placements as the table has entries, and refuses the next.
    #[test]
    fn the_backlog_holds_the_capacity() {
        let mut cam = SourceCam::new(3).unwrap();
        for i in 0..3 {
            assert!(cam.record(key(i), i));
        }
        assert!(!cam.record(key(3), 0));
        assert_eq!(cam.pending(), 3);
        cam.catch_up(std::iter::empty);
        assert_eq!((cam.pending(), cam.used()), (0, 3));
        assert!(cam.record(key(3), 0));
    }

    /// Every home slot fits a [`Placement`]'s high half: a CAM that would not is refused.
    #[test]
    fn a_cam_past_two_to_the_32_slots_is_refused() {
        assert!(SourceCam::new(u32::MAX).is_none());
        assert!(SourceCam::new((1 << 31) + 1).is_none());
    }

    /// The bucketing keeps every item and leaves the buckets in order.
    #[test]
    fn bucketing_orders_by_bucket_and_loses_nothing() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for len in [0usize, 1, 2, 63, 64, 1000, 5000] {
            let items: Vec<u64> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x & 0x000F_FFFF_FFFF_FFFF
                })
                .collect();
            let mut out = vec![0; len];
            bucket_into(&items, &mut out, 40, &mut [0; 4096]);
            assert!(
                out.windows(2).all(|w| w[0] >> 40 <= w[1] >> 40),
                "len {len}"
            );
            let (mut got, mut want) = (out.clone(), items.clone());
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "len {len}");
        }
    }

    #[test]
    fn matches_a_reference_map_through_inserts_removes_and_rebuilds() {
        // Index -> key of its valid entry, with duplicate keys at several indices.
        let mut keys: HashMap<u32, SourceKey> = HashMap::new();
        let mut cam = SourceCam::new(3000).unwrap();
        let mut x = 0x9E37_79B9u64;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let index = (x % 3000) as u32;
            if keys.remove(&index).is_none() {
                let k = key((x >> 20) as u32 % 500);
                keys.insert(index, k);
                if cam.full_after(1) {
                    let valid: Vec<(u32, SourceKey)> = keys
                        .iter()
                        .filter(|(&i, _)| i != index)
                        .map(|(&i, &k)| (i, k))
                        .collect();
                    cam.rebuild(valid.into_iter());
                    assert_eq!(cam.used(), keys.len() - 1, "a rebuild drops stale slots");
                }
                cam.insert(k, index);
            }
            assert!(!cam.full_after(0));
            if step % 499 == 0 {
                for n in 0..500 {
                    let k = key(n);
                    let want = keys.iter().filter(|(_, v)| **v == k).map(|(i, _)| *i).min();
                    assert_eq!(
                        cam.lowest(k, |i| keys.get(&i).copied()),
                        want,
                        "step {step}"
                    );
                }
            }
        }
        assert!(
            cam.heap_bytes() <= 4 * 4 * 3000,
            "4-byte slots, at most 4x the entries"
        );
    }
}
