//! FI_AV_TABLE index allocation: every allocation returns the lowest unused index.
//!
//! Indices below a high-water mark have been handed out at least once; a freed one is marked in
//! a 64-ary tree of bitmaps (a set bit in level 0 is a freed index, a set bit in level k says the
//! corresponding word of level k-1 is non-zero). Allocation takes the lowest marked index by
//! following the first set bit down from the single top word, or the high-water mark when
//! nothing is marked; freeing sets one bit and its ancestors. Both are O(log64 n): three or four
//! words at a million entries, against the linear sorted insertion of libfabric's util AV.
//!
//! Levels grow with the high-water mark, never with the capacity, so an AV opened for 16M
//! entries that holds 100 costs a few words. Level 0 is about one bit per index ever used; the
//! upper levels add 1/63 of that.

/// Lowest-free index allocator over `0..capacity`.
#[derive(Clone, Debug)]
pub struct IndexAllocator {
    capacity: u32,
    high_water: u32,
    live: u32,
    /// `levels[0]`: bit per index below `high_water`, set = freed. `levels[k]`: bit per word of
    /// `levels[k-1]`, set = that word has a set bit. The last level is at most one word. Words
    /// past the end of a level are zero.
    levels: Vec<Vec<u64>>,
}

impl IndexAllocator {
    /// An allocator of `0..capacity`, all free.
    pub fn new(capacity: u32) -> Self {
        let mut depth = 1;
        let mut span: u64 = 64;
        while span < u64::from(capacity) {
            span = span.saturating_mul(64);
            depth += 1;
        }
        IndexAllocator {
            capacity,
            high_water: 0,
            live: 0,
            levels: vec![Vec::new(); depth],
        }
    }

    /// Number of indices.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Number of allocated indices.
    pub fn len(&self) -> u32 {
        self.live
    }

    /// No index is allocated.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// One past the highest index ever allocated.
    pub fn high_water(&self) -> u32 {
        self.high_water
    }

    /// Whether `index` is allocated.
    #[inline]
    pub fn is_allocated(&self, index: u32) -> bool {
        index < self.high_water && !self.is_freed(index)
    }

    #[inline]
    fn is_freed(&self, index: u32) -> bool {
        let i = index as usize;
        self.levels
            .first()
            .and_then(|l0| l0.get(i / 64))
            .is_some_and(|w| (w >> (i % 64)) & 1 == 1)
    }

    /// Allocate the lowest free index; `None` when all `capacity` are allocated.
    pub fn alloc(&mut self) -> Option<u32> {
        let index = match self.lowest_freed() {
            Some(i) => {
                self.unmark(i);
                i
            }
            None if self.high_water < self.capacity => {
                self.high_water += 1;
                self.high_water - 1
            }
            None => return None,
        };
        self.live += 1;
        Some(index)
    }

    /// Allocate up to `max` consecutive indices starting at the lowest free one: exactly the
    /// indices `max` calls of [`IndexAllocator::alloc`] would return first, as long as they are
    /// consecutive. Returns `(first, count)` with `1 <= count <= max`, or `None` when the table
    /// is full or `max` is 0. A run that reaches the high-water mark continues past it in O(1),
    /// so a million fresh indices cost one call.
    pub fn alloc_run(&mut self, max: u32) -> Option<(u32, u32)> {
        if max == 0 {
            return None;
        }
        let (first, mut count) = match self.lowest_freed() {
            Some(i) => {
                self.unmark(i);
                let mut n = 1;
                while n < max {
                    let next = i + n;
                    if next < self.high_water && self.is_freed(next) {
                        self.unmark(next);
                        n += 1;
                    } else {
                        break;
                    }
                }
                (i, n)
            }
            None if self.high_water < self.capacity => (self.high_water, 0),
            None => return None,
        };
        // Continue past the high-water mark when the run reaches it.
        if first + count == self.high_water || count == 0 {
            let extra = (max - count).min(self.capacity - self.high_water);
            self.high_water += extra;
            count += extra;
        }
        self.live += count;
        Some((first, count))
    }

    /// Allocate `index` itself, whichever index is lowest (a named AV places indices its
    /// processes chose together). Indices between the high-water mark and `index` become
    /// free ones. `false`, and no change, when `index` is allocated or outside the capacity.
    pub fn alloc_at(&mut self, index: u32) -> bool {
        if index >= self.capacity || self.is_allocated(index) {
            return false;
        }
        if index < self.high_water {
            self.unmark(index);
        } else {
            for skipped in self.high_water..index {
                self.mark(skipped);
            }
            self.high_water = index + 1;
        }
        self.live += 1;
        true
    }

    /// The lowest index [`IndexAllocator::alloc`] would return, without allocating it.
    pub fn peek(&self) -> Option<u32> {
        self.lowest_freed()
            .or((self.high_water < self.capacity).then_some(self.high_water))
    }

    /// Free an allocated index; `false` (and no change) if it was not allocated.
    pub fn free(&mut self, index: u32) -> bool {
        if !self.is_allocated(index) {
            return false;
        }
        self.mark(index);
        self.live -= 1;
        true
    }

    /// Allocated indices, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.high_water).filter(move |&i| !self.is_freed(i))
    }

    fn lowest_freed(&self) -> Option<u32> {
        let top = self.levels.len().checked_sub(1)?;
        let mut pos: u64 = 0;
        for lvl in (0..=top).rev() {
            let word = self.levels[lvl].get(pos as usize).copied().unwrap_or(0);
            if word == 0 {
                // Only the top word may legitimately be zero: a set parent bit promises a
                // non-zero child.
                debug_assert!(lvl == top, "index tree out of step at level {lvl}");
                return None;
            }
            pos = pos * 64 + u64::from(word.trailing_zeros());
        }
        u32::try_from(pos).ok()
    }

    /// Clear the freed bit of `index` and every ancestor bit whose word becomes zero.
    fn unmark(&mut self, index: u32) {
        let mut pos = index as usize;
        for level in &mut self.levels {
            let Some(word) = level.get_mut(pos / 64) else {
                return;
            };
            *word &= !(1u64 << (pos % 64));
            if *word != 0 {
                return;
            }
            pos /= 64;
        }
    }

    /// Set the freed bit of `index` and every ancestor bit whose word was zero.
    fn mark(&mut self, index: u32) {
        let mut pos = index as usize;
        for level in &mut self.levels {
            let w = pos / 64;
            if level.len() <= w {
                level.resize(w + 1, 0);
            }
            let Some(word) = level.get_mut(w) else {
                return;
            };
            let was = *word;
            *word |= 1u64 << (pos % 64);
            if was != 0 {
                return;
            }
            pos = w;
        }
    }

    /// Bytes of heap the allocator holds.
    pub fn heap_bytes(&self) -> usize {
        self.levels.capacity() * core::mem::size_of::<Vec<u64>>()
            + self
                .levels
                .iter()
                .map(|l| l.capacity() * core::mem::size_of::<u64>())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_match_repeated_single_allocations() {
        // Any pattern of holes: alloc_run(k) hands out what k alloc() calls would, cut at the
        // first gap.
        for seed in 0..200u64 {
            let mut a = IndexAllocator::new(300);
            let mut b = IndexAllocator::new(300);
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut rnd = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let fill = (rnd() % 250) as u32;
            for _ in 0..fill {
                a.alloc();
                b.alloc();
            }
            for _ in 0..(rnd() % 100) {
                let i = (rnd() % 250) as u32;
                a.free(i);
                b.free(i);
            }
            while let Some((first, count)) = a.alloc_run((rnd() % 40 + 1) as u32) {
                for k in 0..count {
                    assert_eq!(b.alloc(), Some(first + k), "seed {seed}");
                }
                // The run stopped at a gap or at its limit, never early.
                assert_eq!(a.len(), b.len());
            }
            assert_eq!(b.alloc(), None);
        }
        let mut a = IndexAllocator::new(1 << 20);
        assert_eq!(a.alloc_run(1_000_000), Some((0, 1_000_000)));
        assert_eq!(
            a.alloc_run(u32::MAX),
            Some((1_000_000, (1 << 20) - 1_000_000))
        );
        assert_eq!(a.alloc_run(1), None);
        assert_eq!(a.alloc_run(0), None);
        assert!(
            a.heap_bytes() < 1024,
            "a run past the water mark marks nothing"
        );
    }
    use std::collections::BTreeSet;

    #[test]
    fn sequential_then_lowest_reuse() {
        let mut a = IndexAllocator::new(10);
        for i in 0..10 {
            assert_eq!(a.alloc(), Some(i));
        }
        assert_eq!(a.alloc(), None);
        assert!(a.free(7));
        assert!(a.free(3));
        assert!(!a.free(3), "double free");
        assert!(!a.free(10), "never allocated");
        assert_eq!(a.len(), 8);
        assert_eq!(a.peek(), Some(3));
        assert_eq!(a.alloc(), Some(3));
        assert_eq!(a.alloc(), Some(7));
        assert_eq!(a.alloc(), None);
    }

    #[test]
    fn deep_tree_matches_a_set() {
        // 64^3 < 300_000 <= 64^4: four levels.
        let cap = 300_000;
        let mut a = IndexAllocator::new(cap);
        assert_eq!(a.levels.len(), 4);
        for _ in 0..cap {
            a.alloc().unwrap();
        }
        let mut free = BTreeSet::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % u64::from(cap)) as u32;
            if x & (1 << 40) != 0 {
                assert_eq!(a.free(i), free.insert(i));
            } else {
                let got = a.alloc();
                assert_eq!(got, free.pop_first());
            }
            assert_eq!(a.peek(), free.first().copied());
        }
        assert_eq!(a.len() as usize, cap as usize - free.len());
        assert_eq!(a.iter().count(), a.len() as usize);
    }

    #[test]
    fn edge_capacities() {
        let mut a = IndexAllocator::new(0);
        assert_eq!(a.alloc(), None);
        let mut a = IndexAllocator::new(64);
        assert_eq!(a.levels.len(), 1);
        for i in 0..64 {
            assert_eq!(a.alloc(), Some(i));
        }
        assert!(a.free(63));
        assert!(a.free(0));
        assert_eq!(a.alloc(), Some(0));
        assert_eq!(a.alloc(), Some(63));
        let a = IndexAllocator::new(u32::MAX);
        assert_eq!(a.levels.len(), 6);
    }

    #[test]
    fn alloc_at_places_and_leaves_the_gap_free() {
        let mut a = IndexAllocator::new(200);
        assert!(a.alloc_at(130));
        assert!(!a.alloc_at(130), "already allocated");
        assert!(!a.alloc_at(200), "outside the capacity");
        assert_eq!((a.len(), a.high_water()), (1, 131));
        assert_eq!(
            a.alloc(),
            Some(0),
            "the skipped indices are free, lowest first"
        );
        assert!(a.alloc_at(64));
        assert_eq!(a.iter().collect::<Vec<_>>(), [0, 64, 130]);
        for want in (1..64).chain(65..130).chain(131..200) {
            assert_eq!(a.alloc(), Some(want));
        }
        assert_eq!(a.alloc(), None);
        assert!(a.free(64) && a.alloc_at(64));
    }
}
