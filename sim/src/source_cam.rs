//! The source CAM of an AV table: (fabric address, initiator) → table index, for FI_SOURCE.
//!
//! An arriving request names its sender by source IP and Initiator ID; the RX engine asks the
//! CAM for the lowest index of the bound AV that holds that peer. The CAM stores table indices
//! only — 4 bytes a slot, open addressing with linear probing, at most 3/4 full — and checks a
//! candidate against the AV entry itself, as a hardware CAM keyed by a hash with the entry
//! memory as the data store would. The same peer inserted at several indices takes several
//! slots. Removing an entry touches nothing here: its slot goes stale, and a candidate is
//! always checked against the entry's valid bit and key, so a stale slot never answers. Stale
//! slots are dropped when the CAM is rebuilt, from the valid entries, as it fills up.
//!
//! Like the table it indexes, the CAM is sized once, when the table is created: twice the
//! table's capacity in slots (a power of two), so it is at most half full of live entries and
//! never grows. A slot holds `index + 1`, and 0 marks a free slot: a new CAM is zeroed table
//! memory (`table_memory`: the heap, or a mapping asking for hugepages, written at creation),
//! as the NIC's own memory would simply be there.

use crate::table_memory::TableMemory;

/// A free slot.
const EMPTY: u32 = 0;
/// The fewest slots of a CAM.
const MIN_SLOTS: usize = 64;
/// Keys [`SourceCam::warm`] hashes before it loads their home slots.
const WARM_GROUP: usize = 64;

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
    /// Entries the CAM stands for.
    live: usize,
}

impl SourceCam {
    /// The CAM of a table of `capacity` entries: `2 * capacity` slots rounded up to a power of
    /// two (at least [`MIN_SLOTS`]), all free.
    pub(crate) fn new(capacity: u32) -> Option<Self> {
        let slots = (capacity as usize)
            .saturating_mul(2)
            .next_power_of_two()
            .max(MIN_SLOTS);
        Some(SourceCam {
            // Zeroed: every slot free (see `table_memory` for where the memory comes from).
            slots: TableMemory::zeroed(slots)?,
            used: 0,
            live: 0,
        })
    }

    /// Whether the slots are a mapping asking for hugepages (else on the heap).
    pub(crate) fn is_huge(&self) -> bool {
        self.slots.is_huge()
    }

    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Whether one more entry needs a [`SourceCam::rebuild`] first (at most 3/4 of the slots
    /// are used, live or stale).
    pub(crate) fn full(&self) -> bool {
        (self.used + 1) * 4 > self.slots.len() * 3
    }

    /// Rebuild from exactly the valid entries, in place: stale slots are dropped. The table
    /// holds at most its capacity, half the slots, so a rebuild frees at least a quarter of
    /// them and costs O(1) per entry removed since the last one.
    pub(crate) fn rebuild(&mut self, valid: impl Iterator<Item = (u32, SourceKey)>) {
        self.slots.as_mut_slice().fill(EMPTY);
        self.used = 0;
        self.live = 0;
        for (index, key) in valid {
            self.place(key, index);
        }
    }

    fn place(&mut self, key: SourceKey, index: u32) {
        let mask = self.mask();
        let slots = self.slots.as_mut_slice();
        let mut at = key.hash() as usize & mask;
        for _ in 0..slots.len() {
            match slots.get_mut(at) {
                Some(s) if *s == EMPTY => {
                    // Slot encoding: index + 1 (0 is free); an index is below the capacity,
                    // itself a u32, so the sum cannot wrap.
                    *s = index.wrapping_add(1);
                    self.used += 1;
                    self.live += 1;
                    return;
                }
                Some(_) => at = (at + 1) & mask,
                None => return,
            }
        }
    }

    /// Touch the home slot of every key before a batch of [`SourceCam::insert`]s. The slots
    /// are scattered over the whole CAM by design, so each insert alone waits for a cache
    /// miss; reading them all first, independent loads the CPU overlaps, leaves the inserts
    /// to hit the cache, as a hardware CAM pipelines the lookups of a burst of writes.
    pub(crate) fn warm(&self, keys: impl Iterator<Item = SourceKey>) {
        let mask = self.mask();
        let slots = self.slots.as_slice();
        let mut keys = keys.peekable();
        let mut seen = 0u32;
        // Home slots first, a group at a time, then their loads in a loop of nothing else: the
        // loads of a whole group are then in flight at once, where loads interleaved with the
        // hashing would be limited by how much of the loop the CPU looks ahead through.
        let mut homes = [0usize; WARM_GROUP];
        while keys.peek().is_some() {
            let mut n = 0;
            for (home, key) in homes.iter_mut().zip(keys.by_ref()) {
                *home = key.hash() as usize & mask;
                n += 1;
            }
            for &home in homes.iter().take(n) {
                seen |= slots.get(home).copied().unwrap_or(0);
            }
        }
        // The loads are the point: keep them from being optimised away.
        std::hint::black_box(seen);
    }

    /// Add `index`, whose entry has `key`. The caller rebuilds first when
    /// [`SourceCam::full`]; a full CAM still has free slots (at most 3/4 are used), so the
    /// entry is placed either way, only with longer probe runs.
    pub(crate) fn insert(&mut self, key: SourceKey, index: u32) {
        debug_assert!(
            !self.full(),
            "rebuild the CAM before inserting into a full one"
        );
        self.place(key, index);
    }

    /// An entry the CAM stood for went away (invalidated or overwritten): its slot is stale.
    pub(crate) fn forget(&mut self) {
        self.live = self.live.saturating_sub(1);
    }

    /// Entries the CAM stands for.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.live
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
            if keys.remove(&index).is_some() {
                cam.forget();
            } else {
                let k = key((x >> 20) as u32 % 500);
                keys.insert(index, k);
                if cam.full() {
                    let valid: Vec<(u32, SourceKey)> = keys
                        .iter()
                        .filter(|(&i, _)| i != index)
                        .map(|(&i, &k)| (i, k))
                        .collect();
                    cam.rebuild(valid.into_iter());
                }
                cam.insert(k, index);
            }
            assert_eq!(cam.live(), keys.len());
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
