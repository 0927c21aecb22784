//! The source CAM of an AV table: (fabric address, initiator) → table index, for FI_SOURCE.
//!
//! An arriving request names its sender by source IP and Initiator ID; the RX engine asks the
//! CAM for the lowest index of the bound AV that holds that peer. The CAM stores table indices
//! only — 4 bytes a slot, open addressing with linear probing, at most 3/4 full — and checks a
//! candidate against the AV entry itself, as a hardware CAM keyed by a hash with the entry
//! memory as the data store would. The same peer inserted at several indices takes several
//! slots. Removing an index leaves a tombstone, reclaimed when the table is rebuilt.

/// A free slot.
const EMPTY: u32 = u32::MAX;
/// A removed slot: probing continues past it.
const DEAD: u32 = u32::MAX - 1;
/// Slots in a new CAM.
const INITIAL_SLOTS: usize = 64;

/// A peer's identity as the CAM hashes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SourceKey {
    /// Fabric address: IPv6, or IPv4 in the first four bytes; the address type folded in.
    pub fabric_addr: u128,
    /// Initiator ID.
    pub initiator: u32,
}

impl SourceKey {
    fn hash(&self) -> u64 {
        let mix = |h: u64, v: u64| (h.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        let h = mix(0, self.fabric_addr as u64);
        let h = mix(h, (self.fabric_addr >> 64) as u64);
        let h = mix(h, u64::from(self.initiator));
        h ^ (h >> 29)
    }
}

/// The CAM.
#[derive(Debug, Default)]
pub(crate) struct SourceCam {
    slots: Vec<u32>,
    live: usize,
    dead: usize,
}

impl SourceCam {
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Add `index`, whose entry has `key`. `key_of` gives the key of any stored index, for
    /// a rebuild when the CAM grows.
    pub(crate) fn insert(
        &mut self,
        key: SourceKey,
        index: u32,
        key_of: impl Fn(u32) -> Option<SourceKey>,
    ) {
        if (self.live + self.dead + 1) * 4 > self.slots.len() * 3 {
            self.rebuild(key_of);
        }
        let mask = self.mask();
        let mut at = key.hash() as usize & mask;
        loop {
            match self.slots.get(at).copied() {
                Some(EMPTY) => {
                    self.live += 1;
                    break;
                }
                Some(DEAD) => {
                    self.dead -= 1;
                    self.live += 1;
                    break;
                }
                Some(_) => at = (at + 1) & mask,
                None => return,
            }
        }
        if let Some(s) = self.slots.get_mut(at) {
            *s = index;
        }
    }

    /// Remove `index`, whose entry has `key`.
    pub(crate) fn remove(&mut self, key: SourceKey, index: u32) {
        if self.slots.is_empty() {
            return;
        }
        let mask = self.mask();
        let mut at = key.hash() as usize & mask;
        for _ in 0..self.slots.len() {
            match self.slots.get(at).copied() {
                Some(EMPTY) | None => return,
                Some(i) if i == index => {
                    if let Some(s) = self.slots.get_mut(at) {
                        *s = DEAD;
                    }
                    self.live -= 1;
                    self.dead += 1;
                    return;
                }
                Some(_) => at = (at + 1) & mask,
            }
        }
    }

    /// The lowest stored index whose entry has `key` (`key_of` reads an index's entry).
    pub(crate) fn lowest(
        &self,
        key: SourceKey,
        key_of: impl Fn(u32) -> Option<SourceKey>,
    ) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut at = key.hash() as usize & mask;
        let mut best: Option<u32> = None;
        for _ in 0..self.slots.len() {
            match self.slots.get(at).copied() {
                Some(EMPTY) | None => break,
                Some(DEAD) => {}
                Some(i) if key_of(i) == Some(key) => {
                    best = Some(best.map_or(i, |b| b.min(i)));
                }
                Some(_) => {}
            }
            at = (at + 1) & mask;
        }
        best
    }

    /// Rebuild at twice the live size (at least [`INITIAL_SLOTS`]), dropping tombstones.
    fn rebuild(&mut self, key_of: impl Fn(u32) -> Option<SourceKey>) {
        let old = core::mem::take(&mut self.slots);
        let size = ((self.live + 1) * 2).next_power_of_two().max(INITIAL_SLOTS);
        self.slots = vec![EMPTY; size];
        self.live = 0;
        self.dead = 0;
        let mask = self.mask();
        for index in old.into_iter().filter(|&i| i != EMPTY && i != DEAD) {
            let Some(key) = key_of(index) else { continue };
            let mut at = key.hash() as usize & mask;
            while self.slots.get(at).is_some_and(|&s| s != EMPTY) {
                at = (at + 1) & mask;
            }
            if let Some(s) = self.slots.get_mut(at) {
                *s = index;
                self.live += 1;
            }
        }
    }

    /// Heap bytes held.
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn key(n: u32) -> SourceKey {
        SourceKey {
            fabric_addr: u128::from(0x0a00_0000 + n / 8),
            initiator: n % 8,
        }
    }

    #[test]
    fn matches_a_reference_map_through_inserts_removes_and_growth() {
        // Index -> key, with duplicate keys at several indices.
        let mut keys: HashMap<u32, SourceKey> = HashMap::new();
        let mut cam = SourceCam::default();
        let mut x = 0x9E37_79B9u64;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let index = (x % 3000) as u32;
            if let Some(k) = keys.remove(&index) {
                cam.remove(k, index);
            } else {
                let k = key((x >> 20) as u32 % 500);
                keys.insert(index, k);
                cam.insert(k, index, |i| keys.get(&i).copied());
            }
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
