//! Lost indices: `fi_addr_t` values that an insert call returned and whose addresses were
//! then rolled back, because the NIC refused the `FI_MORE` batch a later call ended.
//!
//! An `FI_MORE` insert returns its `fi_addr` values before the NIC holds the addresses (the
//! call that ends the batch sends them). If the NIC refuses that batch, the addresses are
//! rolled back: the mirror and the NIC no longer hold them. The application still holds the
//! `fi_addr` values, and it has been told only that the ending call failed (`FI_EIO`). Were
//! the indices free, the next insert would hand one out again for another peer, and a send
//! through the old value would reach that peer. So an index rolled back for an earlier call
//! is *lost*, not freed: it holds no address (lookup and every other call that needs one
//! answer `FI_EINVAL`, saying so), it is not counted in the AV's length, and no insert takes
//! it. `fi_av_remove` of it succeeds and frees it, as removing the address would have. The
//! ending call's own indices are freed at once: its `fi_addr` slots say they failed.
//!
//! Indices are kept as sorted runs of consecutive indices: the addresses of one batch are
//! usually one run (lowest-free allocation), and a rolled-back symmetric range is one run
//! however many peers it covered.

use std::collections::TryReserveError;

/// Sorted, disjoint, non-adjacent runs of lost indices.
#[derive(Debug, Default)]
pub(super) struct LostIndices {
    /// `(first, end)`: indices `first..end`, ascending; a run never touches the next.
    runs: Vec<(u32, u64)>,
    /// Indices in all runs.
    len: u64,
}

impl LostIndices {
    /// Nothing is lost.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Lost indices.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Position of the run that starts last at or before `index`, if any.
    fn run_before(&self, index: u32) -> Option<usize> {
        self.runs
            .partition_point(|&(first, _)| first <= index)
            .checked_sub(1)
    }

    /// Whether `index` is lost.
    #[inline]
    pub(super) fn contains(&self, index: u32) -> bool {
        !self.is_empty()
            && self
                .run_before(index)
                .and_then(|k| self.runs.get(k))
                .is_some_and(|&(_, end)| u64::from(index) < end)
    }

    /// Mark `index` lost (nothing changes if it is already). Fails, changing nothing, only
    /// when there is no memory for a new run.
    pub(super) fn add(&mut self, index: u32) -> Result<(), TryReserveError> {
        if self.contains(index) {
            return Ok(());
        }
        self.add_run(index, 1)
    }

    /// Mark `first..first + count` lost; none of them may be lost already. The span joins the
    /// run ending at `first` and the one starting at its end, if any. Fails, changing nothing,
    /// only when there is no memory for a new run.
    pub(super) fn add_run(&mut self, first: u32, count: u32) -> Result<(), TryReserveError> {
        if count == 0 {
            return Ok(());
        }
        let (start, end) = (u64::from(first), u64::from(first) + u64::from(count));
        let last_before = self.run_before(first);
        let next = last_before.map_or(0, |k| k + 1);
        let before = last_before.filter(|&k| self.runs.get(k).is_some_and(|&(_, e)| e == start));
        let after = self
            .runs
            .get(next)
            .filter(|&&(f, _)| u64::from(f) == end)
            .map(|&(_, e)| e);
        match (before, after) {
            (Some(k), Some(after_end)) => {
                if let Some(run) = self.runs.get_mut(k) {
                    run.1 = after_end;
                }
                self.runs.remove(next);
            }
            (Some(k), None) => {
                if let Some(run) = self.runs.get_mut(k) {
                    run.1 = end;
                }
            }
            (None, Some(_)) => {
                if let Some(run) = self.runs.get_mut(next) {
                    run.0 = first;
                }
            }
            (None, None) => {
                self.runs.try_reserve(1)?;
                self.runs.insert(next, (first, end));
            }
        }
        self.len += u64::from(count);
        Ok(())
    }

    /// Free `index`: true when it was lost (and is no more). Fails, changing nothing, only
    /// when splitting its run needs memory there is not.
    pub(super) fn take(&mut self, index: u32) -> Result<bool, TryReserveError> {
        let at = u64::from(index);
        let Some(k) = self.run_before(index) else {
            return Ok(false);
        };
        let Some(&(first, end)) = self.runs.get(k) else {
            return Ok(false);
        };
        if at >= end {
            return Ok(false);
        }
        match (first == index, end == at + 1) {
            (true, true) => {
                self.runs.remove(k);
            }
            (true, false) => {
                if let Some(run) = self.runs.get_mut(k) {
                    run.0 = index + 1;
                }
            }
            (false, true) => {
                if let Some(run) = self.runs.get_mut(k) {
                    run.1 = at;
                }
            }
            (false, false) => {
                self.runs.try_reserve(1)?;
                if let Some(run) = self.runs.get_mut(k) {
                    run.1 = at;
                }
                self.runs.insert(k + 1, (index + 1, end));
            }
        }
        self.len -= 1;
        Ok(true)
    }

    /// Make room for `n` more runs, so that `n` calls of [`LostIndices::take`] cannot fail.
    pub(super) fn reserve(&mut self, n: usize) -> Result<(), TryReserveError> {
        self.runs.try_reserve(n)
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.runs.capacity() * core::mem::size_of::<(u32, u64)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(l: &LostIndices) -> Vec<(u32, u64)> {
        l.runs.clone()
    }

    #[test]
    fn runs_merge_split_and_count() {
        let mut l = LostIndices::default();
        assert!(l.is_empty() && !l.contains(0));
        for i in [5, 7, 6, 2] {
            l.add(i).unwrap();
        }
        assert_eq!(runs(&l), [(2, 3), (5, 8)], "5, 7 then 6 join into one run");
        assert_eq!(l.len(), 4);
        l.add(6).unwrap();
        assert_eq!(l.len(), 4, "adding a lost index changes nothing");
        assert!(l.contains(2) && l.contains(7) && !l.contains(8) && !l.contains(4));
        assert_eq!(l.take(6), Ok(true));
        assert_eq!(runs(&l), [(2, 3), (5, 6), (7, 8)], "a run splits");
        assert_eq!(l.take(6), Ok(false), "taken twice");
        assert_eq!(l.take(100), Ok(false));
        assert_eq!(l.take(5), Ok(true));
        assert_eq!(l.take(2), Ok(true));
        assert_eq!(runs(&l), [(7, 8)]);
        assert_eq!(l.take(7), Ok(true));
        assert!(l.is_empty());
        assert_eq!(l.len(), 0);

        l.add(1010).unwrap();
        l.add_run(10, 1000).unwrap();
        assert_eq!(
            runs(&l),
            [(10, 1011)],
            "a range is one run, joined to the next"
        );
        assert_eq!(l.take(1010), Ok(true));
        assert_eq!(l.take(10), Ok(true));
        assert_eq!(l.take(1009), Ok(true));
        assert_eq!(runs(&l), [(11, 1009)]);
        l.add(u32::MAX - 1).unwrap();
        assert!(l.contains(u32::MAX - 1) && !l.contains(u32::MAX));
        assert_eq!(l.len(), 999);
    }
}
