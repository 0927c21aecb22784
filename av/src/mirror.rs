//! Storage of the host mirror: paged address slots, and symmetric ranges.
//!
//! * [`Slots`]: the serialized address (32 bytes) of every single entry, in pages of
//!   [`PAGE_SLOTS`] allocated when first written. A page table of a few kilobytes covers a
//!   million indices, so a range or a gap costs no slot memory, and a lookup is the page-table
//!   load (hot in cache) and the slot itself. An all-zero slot is empty: no valid address starts
//!   with a zero byte.
//! * [`Ranges`]: symmetric ranges (`fi_av_insertsym`), one record per run of consecutive
//!   indices however many peers it covers, sorted by first index. Members are computed by the
//!   rule `UetAddress::symmetric_member` defines and the NIC applies (`uet_fwif::av_entry`).
//!   Which members are still inserted is the index allocator's business; a range only counts
//!   its live members, and goes away with the last.

use std::collections::TryReserveError;
use uet_fwif::{NicAvEntry, UetAddress};

/// Slots per page (32 KiB pages).
pub const PAGE_SLOTS: usize = 1024;

/// A serialized address.
pub type Slot = [u8; 32];

type Page = Box<[Slot]>;

/// Paged address slots.
#[derive(Debug, Default)]
pub struct Slots {
    pages: Vec<Option<Page>>,
}

impl Slots {
    /// The slot at `index`; `None` when its page was never written.
    #[inline]
    pub fn get(&self, index: u32) -> Option<&Slot> {
        let i = index as usize;
        self.pages
            .get(i / PAGE_SLOTS)?
            .as_deref()?
            .get(i % PAGE_SLOTS)
    }

    /// Make sure the page of `index` exists, so a following [`Slots::set`] cannot fail.
    pub fn reserve(&mut self, index: u32) -> Result<(), TryReserveError> {
        let p = index as usize / PAGE_SLOTS;
        if p >= self.pages.len() {
            self.pages.try_reserve(p + 1 - self.pages.len())?;
            self.pages.resize_with(p + 1, || None);
        }
        if let Some(slot @ None) = self.pages.get_mut(p) {
            let mut v = Vec::new();
            v.try_reserve_exact(PAGE_SLOTS)?;
            v.resize(PAGE_SLOTS, [0; 32]);
            *slot = Some(v.into_boxed_slice());
        }
        Ok(())
    }

    /// Store `bytes` at `index` (its page allocated on demand).
    pub fn set(&mut self, index: u32, bytes: Slot) -> Result<(), TryReserveError> {
        self.reserve(index)?;
        let i = index as usize;
        if let Some(s) = self
            .pages
            .get_mut(i / PAGE_SLOTS)
            .and_then(|p| p.as_deref_mut())
            .and_then(|p| p.get_mut(i % PAGE_SLOTS))
        {
            *s = bytes;
        }
        Ok(())
    }

    /// Empty the slot at `index`; returns whether it held an address.
    pub fn clear(&mut self, index: u32) -> bool {
        let i = index as usize;
        match self
            .pages
            .get_mut(i / PAGE_SLOTS)
            .and_then(|p| p.as_deref_mut())
            .and_then(|p| p.get_mut(i % PAGE_SLOTS))
        {
            Some(s) if s[0] != 0 => {
                *s = [0; 32];
                true
            }
            _ => false,
        }
    }

    /// Non-empty slots, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Slot)> + '_ {
        self.pages
            .iter()
            .enumerate()
            .filter_map(|(p, page)| page.as_deref().map(|page| (p, page)))
            .flat_map(|(p, page)| {
                page.iter()
                    .enumerate()
                    .filter(|(_, s)| s[0] != 0)
                    .map(move |(i, s)| ((p * PAGE_SLOTS + i) as u32, s))
            })
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.pages.capacity() * core::mem::size_of::<Option<Page>>()
            + self.pages.iter().flatten().count() * PAGE_SLOTS * 32
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

    /// What the NIC holds at `index`: the member, expanded, with the range fields.
    pub fn nic_entry(&self, index: u32, job_id: u32) -> Option<NicAvEntry> {
        self.record(job_id).range_member(index)
    }
}

/// The mirror's ranges, sorted by first index, never overlapping.
#[derive(Debug, Default)]
pub struct Ranges {
    list: Vec<Range>,
}

impl Ranges {
    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// No ranges.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn position(&self, index: u32) -> Option<usize> {
        let k = self
            .list
            .partition_point(|r| r.first <= index)
            .checked_sub(1)?;
        self.list.get(k)?.covers(index).then_some(k)
    }

    /// The range covering `index`.
    #[inline]
    pub fn covering(&self, index: u32) -> Option<&Range> {
        if self.list.is_empty() {
            return None;
        }
        self.list.get(self.position(index)?)
    }

    /// The range that starts at `first`.
    pub fn starting_at(&self, first: u32) -> Option<&Range> {
        self.covering(first).filter(|r| r.first == first)
    }

    /// Add a range (its indices were allocated for it, so it overlaps nothing).
    pub fn insert(&mut self, r: Range) -> Result<(), TryReserveError> {
        self.list.try_reserve(1)?;
        let k = self.list.partition_point(|x| x.first < r.first);
        self.list.insert(k, r);
        Ok(())
    }

    /// One member of the range covering `index` was removed; the range goes with its last.
    pub fn member_removed(&mut self, index: u32) {
        if let Some(k) = self.position(index) {
            if let Some(r) = self.list.get_mut(k) {
                r.live = r.live.saturating_sub(1);
                if r.live == 0 {
                    self.list.remove(k);
                }
            }
        }
    }

    /// Remove the range starting at `first` whole (a batch rolled back).
    pub fn remove_at(&mut self, first: u32) -> Option<Range> {
        let k = self.position(first)?;
        if self.list.get(k)?.first != first {
            return None;
        }
        Some(self.list.remove(k))
    }

    /// Every range, ascending.
    pub fn iter(&self) -> impl Iterator<Item = &Range> + '_ {
        self.list.iter()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.list.capacity() * core::mem::size_of::<Range>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_fwif::address::{caps, AddressingMode};

    #[test]
    fn slots_page_on_demand() {
        let mut s = Slots::default();
        assert!(s.get(5_000_000).is_none());
        s.set(1_000_000, [1; 32]).unwrap();
        assert_eq!(s.get(1_000_000), Some(&[1; 32]));
        assert_eq!(s.get(1_000_001), Some(&[0; 32]));
        assert!(s.heap_bytes() < 64 * 1024, "one page and the page table");
        assert_eq!(s.iter().map(|(i, _)| i).collect::<Vec<_>>(), [1_000_000]);
        assert!(s.clear(1_000_000));
        assert!(!s.clear(1_000_000));
        assert_eq!(s.iter().count(), 0);
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
        })
        .unwrap();
        r.insert(Range {
            first: 10,
            count: 2,
            svc: 2,
            offset: 4,
            base,
            live: 2,
        })
        .unwrap();
        assert_eq!(r.covering(11).unwrap().first, 10);
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
