//! Addresses a mirror keeps whole: those no template takes ([`super::templates`]: past the
//! last template id, or when no memory for a new template can be had).
//!
//! An address kept whole costs its 32 bytes beside its slot word, so what matters here is
//! that nothing else does. The table is made of chunks of [`CHUNK_ENTRIES`] entries (32 KiB),
//! each allocated when the last is full and never moved:
//!
//! * growing never copies what is kept, and never holds twice the table for the copy;
//! * the table holds at most one chunk it does not use, where a vector grown by a quarter
//!   holds up to a quarter of itself ahead of use (8 bytes an entry, the price of a slot);
//! * a free entry links to the next free one in its own bytes, and one bit an entry says
//!   which are in use: no list of free entries beside the table.
//!
//! Entries are indexed by a `u32`, which the slot word holds: a mirror has fewer than 2^32
//! slots, so it never keeps more addresses whole.

use super::templates::Slot;
use std::collections::TryReserveError;

/// Entries of one chunk of the table.
pub const CHUNK_ENTRIES: usize = 1024;

/// Bits of an entry's index that pick the entry within its chunk.
const CHUNK_SHIFT: u32 = CHUNK_ENTRIES.trailing_zeros();

/// Words of the in-use bitmap per chunk.
const LIVE_WORDS_PER_CHUNK: usize = CHUNK_ENTRIES / 64;

/// The end of the free list, in a free entry's link.
const NO_ENTRY: u32 = u32::MAX;

/// A chunk: a thin pointer, so that the table of chunks is 8 bytes per 32 KiB.
type Chunk = Box<[Slot; CHUNK_ENTRIES]>;

/// The table of whole addresses.
#[derive(Debug, Default)]
pub struct WholeAddresses {
    chunks: Vec<Chunk>,
    /// One bit per entry of `chunks`: set while the entry holds an address.
    live: Vec<u64>,
    /// The first free entry that held an address before; each free entry holds the index of
    /// the next one in its first four bytes (little-endian), [`NO_ENTRY`] after the last.
    free: Option<u32>,
    /// Entries given out at least once: those past it in the last chunk were never used.
    made: u32,
    /// Entries holding an address.
    used: usize,
}

impl WholeAddresses {
    /// Keep `bytes`: the index of its entry. `None`, with nothing changed, when the table
    /// is full or no memory can be had for another chunk.
    pub fn add(&mut self, bytes: &Slot) -> Option<u32> {
        let at = match self.free {
            Some(at) => {
                let entry = self.entry_mut(at)?;
                let link = entry.first_chunk::<4>().copied().map(u32::from_le_bytes);
                *entry = *bytes;
                self.free = link.filter(|&next| next != NO_ENTRY);
                at
            }
            None => {
                if self.made == NO_ENTRY {
                    return None;
                }
                if self.made as usize == self.chunks.len() * CHUNK_ENTRIES {
                    self.add_chunk().ok()?;
                }
                let at = self.made;
                *self.entry_mut(at)? = *bytes;
                self.made += 1;
                at
            }
        };
        if let Some(w) = self.live.get_mut(at as usize / 64) {
            *w |= 1 << (at % 64);
        }
        self.used += 1;
        Some(at)
    }

    /// Room for one more chunk everywhere, then the chunk: nothing changes unless all of it
    /// can be had.
    fn add_chunk(&mut self) -> Result<(), TryReserveError> {
        self.chunks.try_reserve(1)?;
        self.live.try_reserve(LIVE_WORDS_PER_CHUNK)?;
        let mut chunk = Vec::new();
        chunk.try_reserve_exact(CHUNK_ENTRIES)?;
        chunk.resize(CHUNK_ENTRIES, [0; 32]);
        // A vector of exactly CHUNK_ENTRIES entries always converts; and into_boxed_slice
        // gives back no memory, as its length is its capacity.
        if let Ok(chunk) = Chunk::try_from(chunk.into_boxed_slice()) {
            self.chunks.push(chunk);
            self.live.resize(self.live.len() + LIVE_WORDS_PER_CHUNK, 0);
        }
        Ok(())
    }

    fn entry_mut(&mut self, at: u32) -> Option<&mut Slot> {
        let chunk = self.chunks.get_mut((at >> CHUNK_SHIFT) as usize)?;
        Some(&mut chunk[at as usize % CHUNK_ENTRIES])
    }

    /// The address at entry `at`, for a slot word that holds it. An entry not in use reads
    /// as what a free entry holds (zeros and a link): a lookup is not made to read the
    /// in-use bitmap, a cache miss of its own, for a word no slot holds.
    #[inline]
    pub fn get(&self, at: u32) -> Option<&Slot> {
        let chunk = self.chunks.get((at >> CHUNK_SHIFT) as usize)?;
        Some(&chunk[at as usize % CHUNK_ENTRIES])
    }

    /// Whether entry `at` holds an address.
    pub fn is_used(&self, at: u32) -> bool {
        self.live
            .get(at as usize / 64)
            .is_some_and(|w| w & (1 << (at % 64)) != 0)
    }

    /// Free entry `at` for another address. `false`, with nothing changed, when it holds
    /// none (already freed, or never given), so that freeing twice cannot put an entry on
    /// the free list twice and have two addresses share it.
    pub fn remove(&mut self, at: u32) -> bool {
        if !self.is_used(at) {
            return false;
        }
        let link = self.free.unwrap_or(NO_ENTRY);
        let Some(entry) = self.entry_mut(at) else {
            return false;
        };
        // What the address was is not left behind, but for the link.
        *entry = [0; 32];
        entry[..4].copy_from_slice(&link.to_le_bytes());
        if let Some(w) = self.live.get_mut(at as usize / 64) {
            *w &= !(1 << (at % 64));
        }
        self.free = Some(at);
        self.used -= 1;
        true
    }

    /// Entries holding an address.
    pub fn len(&self) -> usize {
        self.used
    }

    /// No entry holds an address.
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Heap bytes held: the chunks, the table of them and the in-use bitmap.
    pub fn heap_bytes(&self) -> usize {
        use core::mem::size_of;
        self.chunks.len() * size_of::<[Slot; CHUNK_ENTRIES]>()
            + self.chunks.capacity() * size_of::<Chunk>()
            + self.live.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(k: u32) -> Slot {
        let mut b = [0u8; 32];
        b[..4].copy_from_slice(&k.to_le_bytes());
        b[31] = 0xA5;
        b
    }

    #[test]
    fn entries_are_given_in_order_then_freed_ones_last_freed_first() {
        let mut t = WholeAddresses::default();
        let at: Vec<u32> = (0..3 * CHUNK_ENTRIES as u32 + 5)
            .map(|k| t.add(&addr(k)).unwrap())
            .collect();
        assert!(at.iter().copied().eq(0..3 * CHUNK_ENTRIES as u32 + 5));
        assert_eq!(t.len(), at.len());
        for &a in &at {
            assert_eq!(t.get(a), Some(&addr(a)));
        }
        assert!(t.remove(7) && t.remove(CHUNK_ENTRIES as u32 + 1));
        assert_eq!(t.len(), at.len() - 2);
        assert_eq!(t.add(&addr(100_000)), Some(CHUNK_ENTRIES as u32 + 1));
        assert_eq!(t.add(&addr(100_001)), Some(7));
        assert_eq!(
            t.add(&addr(100_002)),
            Some(at.len() as u32),
            "then a new one"
        );
        assert_eq!(t.get(7), Some(&addr(100_001)));
        assert_eq!(t.get(CHUNK_ENTRIES as u32 + 1), Some(&addr(100_000)));
        assert_eq!(t.get(9 * CHUNK_ENTRIES as u32), None, "past the chunks");
    }

    #[test]
    fn an_entry_freed_twice_is_given_once() {
        let mut t = WholeAddresses::default();
        let a = t.add(&addr(1)).unwrap();
        assert!(t.remove(a));
        assert!(!t.remove(a), "already free");
        assert!(!t.remove(5), "never given");
        assert!(!t.remove(u32::MAX), "past the table");
        let (x, y) = (t.add(&addr(2)).unwrap(), t.add(&addr(3)).unwrap());
        assert_ne!(x, y);
        assert_eq!((t.get(x), t.get(y)), (Some(&addr(2)), Some(&addr(3))));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_free_entry_keeps_nothing_of_its_address() {
        let mut t = WholeAddresses::default();
        let a = t.add(&[0xFF; 32]).unwrap();
        t.add(&addr(1)).unwrap();
        t.remove(a);
        let left = t.get(a).unwrap();
        assert_eq!(left[4..], [0; 28], "zeros past the free list's link");
        // All-zero addresses are kept like any other.
        let z = t.add(&[0; 32]).unwrap();
        assert_eq!((z, t.get(z)), (a, Some(&[0; 32])));
        assert!(t.is_used(z));
    }

    #[test]
    fn the_table_holds_at_most_one_chunk_ahead_of_use() {
        let mut t = WholeAddresses::default();
        assert_eq!(t.heap_bytes(), 0);
        for k in 0..10_000u32 {
            t.add(&addr(k)).unwrap();
            let unused = t.chunks.len() * CHUNK_ENTRIES - t.len();
            assert!(unused < CHUNK_ENTRIES, "{k}: {unused} entries unused");
        }
        let per_entry = t.heap_bytes() as f64 / 10_000.0;
        assert!(per_entry < 36.0, "{per_entry} bytes an entry");
    }
}
