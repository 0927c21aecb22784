//! Table memory: the store behind an AV table's entries and its source CAM.
//!
//! On a NIC this is the device's own memory: it is there, whole, from the moment a table is
//! created, and writing an entry costs the same wherever it lands. The model gives each table
//! host memory when it is created, zero until written:
//!
//! * a table of at least one 2 MiB page is an anonymous mapping asking for transparent
//!   hugepages (`MADV_HUGEPAGE`), written whole when the table is created
//!   (`MADV_POPULATE_WRITE`), as a NIC's table memory is ready before its first AV_WRITE:
//!   writing an entry then costs the same as rewriting one, where a page fault per 4 KiB
//!   would be most of what writing a fresh entry costs on a virtual machine. It does not take
//!   pages from the reserved hugepage pool (`MAP_HUGETLB`): that pool is for the driver's DMA
//!   memory, which a simulated NIC's tables would otherwise compete with. Both are advice:
//!   a kernel without transparent hugepages backs the table with 4 KiB pages, and one without
//!   `MADV_POPULATE_WRITE` commits them as entries are written;
//! * a table smaller than a hugepage is a heap allocation, zeroed by writing it whole when the
//!   table is created (not left to `calloc`, whose fresh pages would fault in under the first
//!   writes, scattered over the table by a CAM's hash).
//!
//! Either way the memory is viewed as a slice of plain-data elements (`zerocopy`), so no
//! `unsafe` is needed here.

use core::marker::PhantomData;
use memmap2::{Advice, MmapMut, MmapOptions};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bytes of a hugepage (x86-64 and arm64 with 4 KiB base pages).
pub(crate) const HUGEPAGE_BYTES: usize = 2 << 20;

/// `len` zeroed elements of `T`.
#[derive(Debug)]
pub(crate) struct TableMemory<T> {
    store: Store<T>,
    len: usize,
}

#[derive(Debug)]
enum Store<T> {
    /// A small table, on the heap.
    Heap(Vec<T>),
    /// A large one, mapped for it (asking for transparent hugepages).
    Mapped {
        map: MmapMut,
        _elements: PhantomData<T>,
    },
}

impl<T: FromBytes + IntoBytes + KnownLayout + Immutable> TableMemory<T> {
    /// `len` zeroed elements; `None` when the host refuses the memory.
    pub(crate) fn zeroed(len: usize) -> Option<Self> {
        let bytes = len.checked_mul(core::mem::size_of::<T>())?;
        if bytes < HUGEPAGE_BYTES {
            // Written whole now, so the host commits it at creation, not under first writes.
            let mut v = Vec::new();
            v.try_reserve_exact(len).ok()?;
            v.resize_with(len, T::new_zeroed);
            return Some(TableMemory {
                store: Store::Heap(v),
                len,
            });
        }
        // A whole number of hugepages, which the kernel places on a 2 MiB boundary.
        let rounded = bytes.checked_next_multiple_of(HUGEPAGE_BYTES)?;
        let map = MmapOptions::new().len(rounded).map_anon().ok()?;
        let _ = map.advise(Advice::HugePage);
        let _ = map.advise(Advice::PopulateWrite);
        let memory = TableMemory {
            store: Store::Mapped {
                map,
                _elements: PhantomData,
            },
            len,
        };
        // The views below fall back to an empty slice where the cast fails; check once here
        // that it cannot (a page-aligned mapping, a whole number of elements).
        (memory.as_slice().len() == len).then_some(memory)
    }

    /// The elements.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[T] {
        match &self.store {
            Store::Heap(v) => v,
            // A page-aligned mapping of at least `len` elements of a plain type whose
            // alignment is at most a page; the empty slice stands for what cannot happen.
            Store::Mapped { map, .. } => map
                .get(..self.len * core::mem::size_of::<T>())
                .and_then(|b| <[T]>::ref_from_bytes(b).ok())
                .unwrap_or_default(),
        }
    }

    /// The elements, to write.
    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match &mut self.store {
            Store::Heap(v) => v,
            Store::Mapped { map, .. } => map
                .get_mut(..self.len * core::mem::size_of::<T>())
                .and_then(|b| <[T]>::mut_from_bytes(b).ok())
                .unwrap_or_default(),
        }
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is a mapping asking for hugepages (a large one), not on the heap.
    pub(crate) fn is_huge(&self) -> bool {
        matches!(self.store, Store::Mapped { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_writable_and_sized() {
        let mut m = TableMemory::<u32>::zeroed(1000).unwrap();
        assert_eq!(m.as_slice().len(), 1000);
        assert!(m.as_slice().iter().all(|&v| v == 0));
        m.as_mut_slice()[999] = 7;
        assert_eq!(m.as_slice()[999], 7);
        assert!(!m.is_huge(), "4 KB is no hugepage's worth");
        let empty = TableMemory::<u64>::zeroed(0).unwrap();
        assert!(empty.as_slice().is_empty());
        assert!(TableMemory::<u64>::zeroed(usize::MAX).is_none());
    }

    #[test]
    fn a_large_table_is_mapped_zeroed_and_writable() {
        // 4 MiB: a mapping asking for hugepages; on hugepages or not, the contents behave the
        // same.
        let mut m = TableMemory::<u64>::zeroed(HUGEPAGE_BYTES / 4).unwrap();
        assert!(m.is_huge());
        let n = m.as_slice().len();
        assert_eq!(n, HUGEPAGE_BYTES / 4);
        m.as_mut_slice()[n - 1] = u64::MAX;
        m.as_mut_slice()[0] = 1;
        assert_eq!((m.as_slice()[0], m.as_slice()[n - 1]), (1, u64::MAX));
        assert!(m.as_slice()[1..n - 1].iter().all(|&v| v == 0));
    }
}
