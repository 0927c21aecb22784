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

    /// A plain model of the allocator: the high-water mark and the freed indices below it.
    struct ModelAlloc {
        capacity: u32,
        high_water: u32,
        freed: BTreeSet<u32>,
    }

    impl ModelAlloc {
        fn lowest(&self) -> Option<u32> {
            self.freed
                .first()
                .copied()
                .or((self.high_water < self.capacity).then_some(self.high_water))
        }

        fn is_free(&self, i: u32) -> bool {
            i < self.capacity && (i >= self.high_water || self.freed.contains(&i))
        }

        fn take(&mut self, i: u32) {
            if i >= self.high_water {
                self.freed.extend(self.high_water..i);
                self.high_water = i + 1;
            } else {
                self.freed.remove(&i);
            }
        }
    }

    /// Every operation against the model, at a capacity the runs fill and at capacities whose
    /// trees grow to three and four levels while indices are freed, placed and taken in runs:
    /// the levels grow with the high-water mark under words already marked.
    #[test]
    fn every_operation_matches_a_model_while_the_tree_grows() {
        for (seed, capacity) in [
            (0x3c6e_f372_fe94_f82bu64, 700u32),
            (0x9e37_79b9_7f4a_7c15, 5_000),
            (0x2545_f491_4f6c_dd1d, 70_000),
            (0x6a09_e667_f3bc_c908, 300_000),
            (0xbb67_ae85_84ca_a73b, 300_000),
        ] {
            let mut a = IndexAllocator::new(capacity);
            let mut m = ModelAlloc {
                capacity,
                high_water: 0,
                freed: BTreeSet::new(),
            };
            let mut x = seed;
            let mut rnd = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n.max(1)
            };
            for step in 0..20_000 {
                let span = u64::from(m.high_water) + 64;
                match rnd(12) {
                    0..=2 => {
                        let want = m.lowest();
                        if let Some(i) = want {
                            m.take(i);
                        }
                        assert_eq!(a.alloc(), want, "seed {seed:#x} step {step}: alloc");
                    }
                    3 => {
                        let max = rnd(3000) as u32;
                        let want = m.lowest().filter(|_| max > 0).map(|first| {
                            let mut n = 0;
                            while n < max && m.is_free(first + n) {
                                n += 1;
                            }
                            (first, n)
                        });
                        if let Some((first, n)) = want {
                            (first..first + n).for_each(|i| m.take(i));
                        }
                        assert_eq!(a.alloc_run(max), want, "seed {seed:#x} step {step}: run");
                    }
                    4 => {
                        // Mostly near the mark, sometimes far past it (the tree grows by
                        // levels at once), sometimes outside the capacity.
                        let i = match rnd(8) {
                            0 => (u64::from(m.high_water) + rnd(u64::from(capacity))) as u32,
                            _ => rnd(span) as u32,
                        };
                        let want = m.is_free(i);
                        if want {
                            m.take(i);
                        }
                        assert_eq!(a.alloc_at(i), want, "seed {seed:#x} step {step}: at {i}");
                    }
                    10..=11 => {
                        // A block freed whole, often the one just below the mark, so that
                        // runs meet the mark and gaps sit one short of it.
                        let len = 1 + rnd(300) as u32;
                        let first = match rnd(2) {
                            0 => m.high_water.saturating_sub(len),
                            _ => rnd(span) as u32,
                        };
                        for i in first..first.saturating_add(len) {
                            let want = i < m.high_water && !m.freed.contains(&i);
                            if want {
                                m.freed.insert(i);
                            }
                            assert_eq!(a.free(i), want, "seed {seed:#x} step {step}: free {i}");
                        }
                        if rnd(3) == 0 {
                            // And one index kept, one below the mark.
                            if let Some(i) = m.high_water.checked_sub(2) {
                                if m.freed.remove(&i) {
                                    assert!(a.alloc_at(i), "seed {seed:#x} step {step}");
                                }
                            }
                        }
                    }
                    _ => {
                        let i = rnd(span) as u32;
                        let want = i < m.high_water && !m.freed.contains(&i);
                        if want {
                            m.freed.insert(i);
                        }
                        assert_eq!(a.free(i), want, "seed {seed:#x} step {step}: free {i}");
                    }
                }
                assert_eq!(a.peek(), m.lowest(), "seed {seed:#x} step {step}: peek");
                assert_eq!(a.high_water(), m.high_water, "seed {seed:#x} step {step}");
                assert_eq!(
                    a.len(),
                    m.high_water - m.freed.len() as u32,
                    "seed {seed:#x} step {step}: len"
                );
            }
            assert!(
                a.iter()
                    .eq((0..m.high_water).filter(|i| !m.freed.contains(i))),
                "seed {seed:#x}: iter"
            );
            // The number of levels is fixed by the capacity; what grows is the words in use.
            // The top word numbering more than one word below it means every level was
            // reached (four at 300,000: indices past 64^3 were freed).
            let depth = a.levels.len();
            assert!(
                depth >= 2 && a.levels[depth - 2].len() > 1,
                "seed {seed:#x}: the tree grew to its top level ({depth} levels): {:?}",
                a.levels.iter().map(Vec::len).collect::<Vec<_>>()
            );
            if capacity >= 300_000 {
                assert_eq!(depth, 4, "seed {seed:#x}");
            }
        }
    }
}
