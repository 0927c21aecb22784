//! DMA memory: memfd-backed regions the NIC reads and writes.
//!
//! A [`DmaRegion`] is a memfd mapped `MAP_SHARED` into this process, with an IOVA the driver
//! chooses. It is created with `MFD_HUGETLB` first (2 MiB pages: no TLB misses for the NIC's
//! address translation, as DPDK and SPDK do); when the machine has no hugepages reserved it
//! falls back to a plain memfd with `MADV_HUGEPAGE`, so the driver works everywhere. A memfd,
//! rather than anonymous memory, because a vfio-user simulator in another process must map the
//! same pages (its file descriptor is passed over the socket), and the in-process simulator
//! maps it the same way.
//!
//! While a region is mapped for DMA the device may write it at any time, so no Rust reference
//! into it ever exists: every access copies in or out through volatile operations on raw
//! pointers, bounds-checked against the region.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Size of a huge page, and the alignment of every IOVA the driver hands out.
pub const HUGE_PAGE: usize = 2 << 20;
/// Size of a base page.
pub const PAGE: usize = 4096;

/// Errors of DMA memory.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    /// memfd_create failed.
    #[error("memfd_create failed: {0}")]
    Memfd(std::io::Error),
    /// Sizing the memfd failed (for hugetlb: not enough hugepages).
    #[error("sizing DMA memory of {len} bytes failed: {source}")]
    Size {
        /// Requested length.
        len: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// mmap failed.
    #[error("mapping DMA memory of {len} bytes failed: {source}")]
    Map {
        /// Requested length.
        len: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// An access fell outside the region.
    #[error("DMA access at offset {offset} length {len} outside region of {size} bytes")]
    OutOfBounds {
        /// Offset of the access.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Region size.
        size: usize,
    },
    /// A zero-length region was requested.
    #[error("a DMA region cannot be empty")]
    Empty,
    /// The requested length, rounded up to whole pages, does not fit the address space.
    #[error("a DMA region of {len} bytes does not fit the address space")]
    TooLarge {
        /// Requested length.
        len: usize,
    },
    /// The IOVA space has no room left for a region of this size (IOVAs are never reused).
    #[error(
        "no IOVA space left for a DMA region of {len} bytes (the IOMMU translates {ranges}; \
         IOVAs are not reused)"
    )]
    IovaExhausted {
        /// Requested length.
        len: usize,
        /// The usable IOVA ranges.
        ranges: String,
    },
}

/// Which kind of pages back a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Reserved 2 MiB hugepages (`MFD_HUGETLB`).
    Huge,
    /// Normal pages with transparent-hugepage advice.
    Normal,
}

/// A span of IOVAs the device's IOMMU translates, both ends inclusive (as VFIO reports them:
/// `struct vfio_iova_range`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IovaRange {
    /// First IOVA.
    pub start: u64,
    /// Last IOVA (inclusive, so the range may end at 2^64 - 1).
    pub last: u64,
}

impl IovaRange {
    /// Every IOVA: a device without an IOMMU aperture of its own (the simulators).
    pub const ALL: IovaRange = IovaRange {
        start: 0,
        last: u64::MAX,
    };
}

impl core::fmt::Display for IovaRange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}-{:#x}", self.start, self.last)
    }
}

/// Hands out IOVAs: a bump allocator with huge-page alignment, inside the ranges the device's
/// IOMMU translates. IOVAs are never reused within a process, so a stale descriptor naming a
/// freed region faults at the IOMMU instead of scribbling on new memory.
///
/// A request that does not fit what is left of the current range moves the cursor to the
/// next range it fits in; what it skips is not handed out later (the cursor only moves up).
/// The driver's regions (rings, buffers, pools: MiB) are small next to an IOMMU's ranges
/// (apertures of 2^39 to 2^57 bytes with a few holes: the x86 interrupt window, AMD's
/// HyperTransport window below 1 TiB, a platform's reserved regions), so little is skipped.
#[derive(Debug)]
pub struct IovaAllocator {
    next: AtomicU64,
    /// Usable ranges, ascending by start, each starting on a hugepage and at or above
    /// [`IovaAllocator::BASE`] (as the IOMMU reports them, disjoint).
    ranges: Box<[IovaRange]>,
}

impl IovaAllocator {
    /// IOVAs start at 4 GiB, away from address 0 so that a zeroed descriptor never names
    /// mapped memory.
    pub const BASE: u64 = 1 << 32;

    /// A fresh allocator over the whole IOVA space from [`IovaAllocator::BASE`].
    pub fn new() -> Self {
        Self::over(Box::new([IovaRange {
            start: Self::BASE,
            last: u64::MAX,
        }]))
    }

    /// A fresh allocator over the parts of `ranges` at or above [`IovaAllocator::BASE`] that
    /// can hold a hugepage-aligned hugepage. Each region lies inside one of the ranges, never
    /// across two that touch: `VFIO_IOMMU_MAP_DMA` checks a mapping against one range of its
    /// list. `None` when no range qualifies: the device could reach no DMA memory of this
    /// driver.
    pub fn within(ranges: &[IovaRange]) -> Option<Self> {
        let align = HUGE_PAGE as u64;
        // Each range from its first hugepage boundary at or above BASE, if a whole hugepage
        // fits after it.
        let mut usable: Vec<IovaRange> = ranges
            .iter()
            .filter_map(|r| {
                let start = r.start.max(Self::BASE).checked_next_multiple_of(align)?;
                (start <= r.last && r.last - start >= align - 1).then_some(IovaRange {
                    start,
                    last: r.last,
                })
            })
            .collect();
        usable.sort_by_key(|r| (r.start, r.last));
        usable.dedup();
        (!usable.is_empty()).then(|| Self::over(usable.into_boxed_slice()))
    }

    /// An allocator over `ranges`: usable (hugepage-aligned starts at or above BASE), sorted,
    /// not empty; the cursor at the first.
    fn over(ranges: Box<[IovaRange]>) -> Self {
        IovaAllocator {
            next: AtomicU64::new(ranges.first().map_or(Self::BASE, |r| r.start)),
            ranges,
        }
    }

    /// An allocator whose next IOVA is `next` (tests of the end of the IOVA space).
    #[cfg(test)]
    fn starting_at(next: u64) -> Self {
        let a = Self::new();
        a.next.store(next, Ordering::Relaxed);
        a
    }

    /// The ranges IOVAs are taken from.
    pub fn ranges(&self) -> &[IovaRange] {
        &self.ranges
    }

    /// Where a request of `span` bytes (a whole number of hugepages) goes when the cursor
    /// stands at `next`: the first hugepage boundary at or after it, in the first range the
    /// request fits in whole. `None` when it fits in none, or would end at 2^64 (the cursor
    /// after it would not fit a u64).
    fn place(&self, next: u64, span: u64) -> Option<u64> {
        self.ranges.iter().find_map(|r| {
            let at = next
                .max(r.start)
                .checked_next_multiple_of(HUGE_PAGE as u64)?;
            let end = at.checked_add(span)?;
            (r.last.checked_add(1).is_none_or(|past| end <= past) && at <= r.last).then_some(at)
        })
    }

    /// Reserve `len` bytes of IOVA space, huge-page aligned, inside one usable range. A
    /// request that does not fit what is left fails and reserves nothing: the cursor never
    /// wraps back onto IOVAs in use.
    pub fn alloc(&self, len: usize) -> Result<u64, DmaError> {
        let span = u64::try_from(len)
            .ok()
            .and_then(|l| l.checked_next_multiple_of(HUGE_PAGE as u64))
            .ok_or(DmaError::TooLarge { len })?;
        let exhausted = || DmaError::IovaExhausted {
            len,
            ranges: self
                .ranges
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        };
        if span == 0 {
            return Err(DmaError::Empty);
        }
        let before = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |next| {
                self.place(next, span).map(|at| at + span)
            })
            .map_err(|_| exhausted())?;
        // The same placement the update made from the same cursor.
        self.place(before, span).ok_or_else(exhausted)
    }
}

impl Default for IovaAllocator {
    fn default() -> Self {
        Self::new()
    }
}

/// A memfd-backed region of DMA memory.
#[derive(Debug)]
pub struct DmaRegion {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
    iova: u64,
    kind: PageKind,
}

// SAFETY: the region is plain shared memory; every access goes through volatile copies on raw
// pointers bounds-checked against `len`, and the mapping lives until Drop. Concurrent accesses
// from several threads are as safe as concurrent device DMA: torn values are the callers'
// protocol concern (rings use phase bits and fences), never memory unsafety.
unsafe impl Send for DmaRegion {}
// SAFETY: see `Send`; no method hands out a reference into the mapping.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Allocate `len` bytes (rounded up to a page) at IOVA `iova`, hugepages first.
    pub fn new(len: usize, iova: u64) -> Result<Self, DmaError> {
        let normal_len = Self::rounded(len, PAGE)?;
        match Self::rounded(len, HUGE_PAGE).and_then(|l| Self::create(l, iova, PageKind::Huge)) {
            Ok(r) => Ok(r),
            Err(e) => {
                tracing::debug!("no hugepage DMA memory ({e}); using normal pages");
                Self::create(normal_len, iova, PageKind::Normal)
            }
        }
    }

    /// Allocate with normal pages only.
    pub fn new_normal(len: usize, iova: u64) -> Result<Self, DmaError> {
        Self::create(Self::rounded(len, PAGE)?, iova, PageKind::Normal)
    }

    /// [`DmaRegion::new`] at a fresh IOVA from `iovas`, taken only once the memory exists:
    /// a request the system cannot back uses up no IOVA space.
    pub fn new_in(len: usize, iovas: &IovaAllocator) -> Result<Self, DmaError> {
        Self::new(len, 0)?.at_fresh_iova(iovas)
    }

    /// [`DmaRegion::new_normal`] at a fresh IOVA from `iovas`, as [`DmaRegion::new_in`].
    pub fn new_normal_in(len: usize, iovas: &IovaAllocator) -> Result<Self, DmaError> {
        Self::new_normal(len, 0)?.at_fresh_iova(iovas)
    }

    /// Give a region not yet mapped for the device its IOVA.
    fn at_fresh_iova(mut self, iovas: &IovaAllocator) -> Result<Self, DmaError> {
        self.iova = iovas.alloc(self.len)?;
        Ok(self)
    }

    /// `len` rounded up to a multiple of `unit`, within what a mapping (and `off_t`) can
    /// span; a zero length is refused.
    fn rounded(len: usize, unit: usize) -> Result<usize, DmaError> {
        if len == 0 {
            return Err(DmaError::Empty);
        }
        len.checked_next_multiple_of(unit)
            .filter(|&l| isize::try_from(l).is_ok())
            .ok_or(DmaError::TooLarge { len })
    }

    fn create(len: usize, iova: u64, kind: PageKind) -> Result<Self, DmaError> {
        let mut flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        if kind == PageKind::Huge {
            flags |= libc::MFD_HUGETLB | libc::MFD_HUGE_2MB;
        }
        // SAFETY: the name is a valid NUL-terminated string and flags are defined memfd flags.
        let raw = unsafe { libc::memfd_create(c"uet-dma".as_ptr(), flags) };
        if raw < 0 {
            return Err(DmaError::Memfd(std::io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on a descriptor we own; `len` is at most isize::MAX (checked by
        // `rounded`), so it fits off_t on 64-bit Linux.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(DmaError::Size {
                len,
                source: std::io::Error::last_os_error(),
            });
        }
        if kind == PageKind::Huge {
            // Take the hugepages now. A mapping reserves them from the pool, but a hugetlb
            // cgroup's limit, or a memory policy binding a node that has none free, is only
            // met when a page is faulted in: MAP_POPULATE ignores a page it could not get,
            // and the first access to it raises SIGBUS. fallocate(2) fails instead (ENOSPC,
            // ENOMEM), and the caller falls back to normal pages.
            // SAFETY: fallocate on a descriptor we own, within the size just set; `len` fits
            // off_t (see above).
            if unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, len as libc::off_t) } != 0 {
                return Err(DmaError::Size {
                    len,
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        // Seal the size: a process that maps this memfd (the simulator, a vfio-user server) can
        // then rely on every page staying backed. Failure is logged: the in-process simulator
        // and kernel VFIO do without the seal, but a vfio-user simulator refuses to map memory
        // that lacks it.
        // SAFETY: fcntl on a descriptor we own with defined seal flags.
        let sealed = unsafe {
            libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            )
        };
        if sealed != 0 {
            tracing::debug!(
                "sealing DMA memfd failed: {}",
                std::io::Error::last_os_error()
            );
        }
        let populate = if kind == PageKind::Huge {
            libc::MAP_POPULATE
        } else {
            0
        };
        // SAFETY: mapping `len` bytes of a memfd we own, shared, readable and writable; the
        // kernel picks the address. The result is checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | populate,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            // A hugetlb memfd accepts ftruncate even with no pages reserved; the mapping (with
            // MAP_POPULATE) is what fails. Either way the caller falls back.
            return Err(DmaError::Map {
                len,
                source: std::io::Error::last_os_error(),
            });
        }
        if kind == PageKind::Normal {
            // SAFETY: advice on the mapping just created; failure only loses the advice.
            unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
        }
        Ok(DmaRegion {
            fd,
            ptr: ptr.cast(),
            len,
            iova,
            kind,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: construction refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The IOVA of byte 0.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The IOVA of byte `offset`, which may be the region's end. `OutOfBounds` for an offset
    /// past the end, or an IOVA past 2^64 - 1 (a region placed by hand at the top of the
    /// space; the [`IovaAllocator`] never places one there).
    pub fn iova_at(&self, offset: usize) -> Result<u64, DmaError> {
        self.check(offset, 0)?;
        u64::try_from(offset)
            .ok()
            .and_then(|o| self.iova.checked_add(o))
            .ok_or(DmaError::OutOfBounds {
                offset,
                len: 0,
                size: self.len,
            })
    }

    /// The IOVA of byte `offset` of a region the [`IovaAllocator`] placed, for an offset the
    /// caller already knows lies inside it (a pool buffer, a ring of a ring set): no check
    /// beyond a debug assertion. The allocator places regions below 2^64 - 1 with room for
    /// their length, so the sum cannot wrap; [`DmaRegion::iova_at`] checks any offset.
    pub(crate) fn iova_inside(&self, offset: usize) -> u64 {
        debug_assert!(
            offset < self.len,
            "offset {offset} outside {} bytes",
            self.len
        );
        self.iova.wrapping_add(offset as u64)
    }

    /// Which pages back the region.
    pub fn page_kind(&self) -> PageKind {
        self.kind
    }

    /// The address of byte 0 in this process, for a backend that maps the region into an
    /// IOMMU (kernel VFIO). A raw pointer: no Rust reference into DMA memory may exist.
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The memfd, for a backend that maps the same pages (simulator, vfio-user).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), DmaError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(DmaError::OutOfBounds {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Copy `src` into the region at `offset`.
    pub fn write_bytes(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.check(offset, src.len())?;
        // SAFETY: bounds checked above; the destination lies inside our live mapping.
        unsafe { volatile_copy_to(self.ptr.add(offset), src) };
        Ok(())
    }

    /// Copy from the region at `offset` into `dst`.
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.check(offset, dst.len())?;
        // SAFETY: bounds checked above; the source lies inside our live mapping.
        unsafe { volatile_copy_from(self.ptr.add(offset), dst) };
        Ok(())
    }

    /// Fill `len` bytes at `offset` with zero.
    pub fn zero(&self, offset: usize, len: usize) -> Result<(), DmaError> {
        self.check(offset, len)?;
        for i in 0..len {
            // SAFETY: offset + i < offset + len <= self.len, inside the mapping.
            unsafe { self.ptr.add(offset + i).write_volatile(0) };
        }
        Ok(())
    }

    /// Write a layout type at `offset`.
    pub fn write_obj<T: IntoBytes + Immutable>(
        &self,
        offset: usize,
        v: &T,
    ) -> Result<(), DmaError> {
        let len = core::mem::size_of::<T>();
        self.check(offset, len)?;
        // SAFETY: bounds checked above, so `dst` lies inside our live mapping.
        let dst = unsafe { self.ptr.add(offset) };
        let bytes = v.as_bytes();
        if (dst as usize).is_multiple_of(8) && len.is_multiple_of(8) {
            // Descriptors and completions: whole 64-bit stores, one per word, as a NIC's
            // doorbell-ordered descriptor write expects (no torn or byte-wise stores).
            for (i, w) in bytes.chunks_exact(8).enumerate() {
                let mut word = [0u8; 8];
                word.copy_from_slice(w);
                // SAFETY: `dst + 8*i .. + 8` lies inside `dst..dst+len`, checked above, and
                // is 8-byte aligned.
                unsafe {
                    dst.add(i * 8)
                        .cast::<u64>()
                        .write_volatile(u64::from_ne_bytes(word))
                };
            }
            Ok(())
        } else {
            self.write_bytes(offset, bytes)
        }
    }

    /// Read a layout type at `offset`.
    pub fn read_obj<T: FromBytes + IntoBytes>(&self, offset: usize) -> Result<T, DmaError> {
        let len = core::mem::size_of::<T>();
        self.check(offset, len)?;
        // SAFETY: bounds checked above, so `src` lies inside our live mapping.
        let src = unsafe { self.ptr.add(offset) };
        if (src as usize).is_multiple_of(core::mem::align_of::<T>()) {
            // SAFETY: `src..src+len` is inside the mapping and aligned for `T`; every bit
            // pattern is a valid `T` (FromBytes), so one volatile load is a valid read.
            return Ok(unsafe { src.cast::<T>().read_volatile() });
        }
        let mut v = T::new_zeroed();
        self.read_bytes(offset, v.as_mut_bytes())?;
        Ok(v)
    }

    /// Read one byte with a volatile load (a phase bit).
    pub fn read_u8(&self, offset: usize) -> Result<u8, DmaError> {
        self.check(offset, 1)?;
        // SAFETY: bounds checked; a byte load has no alignment requirement.
        Ok(unsafe { self.ptr.add(offset).read_volatile() })
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping created in `create`, unmapped once here.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Volatile copy into DMA memory, 8 bytes at a time where aligned.
///
/// # Safety
/// `dst..dst+src.len()` must lie inside a live mapping.
unsafe fn volatile_copy_to(dst: *mut u8, src: &[u8]) {
    let mut i = 0;
    // SAFETY: (the whole loop) the caller guarantees the destination range is mapped; unaligned
    // u64 stores are avoided by only taking the word path when `dst + i` is 8-byte aligned.
    unsafe {
        while i < src.len() && !(dst.add(i) as usize).is_multiple_of(8) {
            dst.add(i).write_volatile(src[i]);
            i += 1;
        }
        while i + 8 <= src.len() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&src[i..i + 8]);
            dst.add(i)
                .cast::<u64>()
                .write_volatile(u64::from_ne_bytes(w));
            i += 8;
        }
        while i < src.len() {
            dst.add(i).write_volatile(src[i]);
            i += 1;
        }
    }
}

/// Volatile copy out of DMA memory, 8 bytes at a time where aligned.
///
/// # Safety
/// `src..src+dst.len()` must lie inside a live mapping.
unsafe fn volatile_copy_from(src: *const u8, dst: &mut [u8]) {
    let mut i = 0;
    // SAFETY: (the whole loop) as in `volatile_copy_to`, with the source range mapped.
    unsafe {
        while i < dst.len() && !(src.add(i) as usize).is_multiple_of(8) {
            dst[i] = src.add(i).read_volatile();
            i += 1;
        }
        while i + 8 <= dst.len() {
            let w = src.add(i).cast::<u64>().read_volatile();
            dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
            i += 8;
        }
        while i < dst.len() {
            dst[i] = src.add(i).read_volatile();
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_round_trip_and_bounds() {
        let r = DmaRegion::new(10_000, IovaAllocator::BASE).unwrap();
        assert!(r.len() >= 10_000);
        let data: Vec<u8> = (0..=255).collect();
        r.write_bytes(3, &data).unwrap();
        let mut back = vec![0u8; 256];
        r.read_bytes(3, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(r.write_bytes(r.len() - 1, &[1, 2]).is_err());
        assert!(r.read_bytes(usize::MAX, &mut [0]).is_err());
        assert!(DmaRegion::new(0, 0).is_err());
    }

    fn free_hugepages() -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("HugePages_Free:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    #[test]
    fn hugepages_are_used_when_reserved() {
        // Hugepages are a machine setting (.ci/run reserves some); where there are none the
        // fallback is covered by `normal_pages_work_without_hugepages`.
        if free_hugepages() < 2 {
            return;
        }
        let r = DmaRegion::new(4096, IovaAllocator::BASE).unwrap();
        assert_eq!(r.page_kind(), PageKind::Huge);
        assert_eq!(r.len(), HUGE_PAGE);
        r.write_bytes(HUGE_PAGE - 8, &[7; 8]).unwrap();
        let mut b = [0u8; 8];
        r.read_bytes(HUGE_PAGE - 8, &mut b).unwrap();
        assert_eq!(b, [7; 8]);
    }

    #[test]
    fn normal_pages_work_without_hugepages() {
        let r = DmaRegion::new_normal(4096, 0x1000_0000).unwrap();
        assert_eq!(r.page_kind(), PageKind::Normal);
        r.write_obj(0, &0xdead_beef_u32).unwrap();
        assert_eq!(r.read_obj::<u32>(0).unwrap(), 0xdead_beef);
    }

    #[test]
    fn regions_are_sealed_against_resizing() {
        let r = DmaRegion::new_normal(8192, 0).unwrap();
        // SAFETY: ftruncate on the region's own descriptor; expected to fail (sealed).
        let rc = unsafe { libc::ftruncate(r.fd().as_raw_fd(), 4096) };
        assert_ne!(rc, 0, "a sealed memfd refuses to shrink");
    }

    #[test]
    fn iovas_are_distinct_and_aligned() {
        let a = IovaAllocator::new();
        let x = a.alloc(1).unwrap();
        let y = a.alloc(HUGE_PAGE + 1).unwrap();
        let z = a.alloc(1).unwrap();
        assert_eq!(x % HUGE_PAGE as u64, 0);
        assert_eq!(y, x + HUGE_PAGE as u64);
        assert_eq!(z, y + 2 * HUGE_PAGE as u64);
    }

    /// The end of the IOVA space: a request past it fails and reserves nothing, so the cursor
    /// never wraps back onto IOVAs in use; a length that cannot be rounded fails as too large.
    #[test]
    fn the_iova_cursor_never_wraps() {
        let last = u64::MAX - (u64::MAX % HUGE_PAGE as u64) - 2 * HUGE_PAGE as u64;
        let a = IovaAllocator::starting_at(last);
        assert!(matches!(
            a.alloc(3 * HUGE_PAGE),
            Err(DmaError::IovaExhausted { len, .. }) if len == 3 * HUGE_PAGE
        ));
        assert!(matches!(
            a.alloc(usize::MAX),
            Err(DmaError::TooLarge { len: usize::MAX })
        ));
        assert_eq!(a.alloc(HUGE_PAGE).unwrap(), last);
        assert_eq!(a.alloc(1).unwrap(), last + HUGE_PAGE as u64);
        // The cursor now stands on the last hugepage, whose end 2^64 no u64 holds.
        assert!(matches!(
            a.alloc(1),
            Err(DmaError::IovaExhausted { len: 1, .. })
        ));
        assert!(a.alloc(HUGE_PAGE).is_err());
    }

    /// IOVAs come only from the ranges the IOMMU translates, at or above 4 GiB: a range's
    /// unaligned start is skipped to its first hugepage, a request that does not fit the rest
    /// of a range goes to the next one it fits in, and past the last range nothing is
    /// reserved.
    #[test]
    fn iovas_stay_inside_the_ranges_the_iommu_translates() {
        const G: u64 = 1 << 30;
        let hp = HUGE_PAGE as u64;
        let r = |start: u64, last: u64| IovaRange { start, last };
        // Below 4 GiB (the interrupt window's side), a hole at 5 GiB + 3 hugepages, then a
        // range starting off a hugepage boundary and ending at 6 GiB; given out of order.
        let a = IovaAllocator::within(&[
            r(5 * G + 5 * hp + 4096, 6 * G - 1),
            r(0, 0xfedf_ffff),
            r(0xfef0_0000, 5 * G + 3 * hp - 1),
        ])
        .unwrap();
        assert_eq!(
            a.ranges(),
            [r(4 * G, 5 * G + 3 * hp - 1), r(5 * G + 6 * hp, 6 * G - 1)]
        );
        assert_eq!(a.alloc(1).unwrap(), 4 * G);
        let top = a.alloc(G as usize + HUGE_PAGE).unwrap();
        assert_eq!(top, 4 * G + hp);
        // Two hugepages do not fit the one left before the hole: the next range.
        assert_eq!(a.alloc(2 * HUGE_PAGE).unwrap(), 5 * G + 6 * hp);
        assert_eq!(a.alloc(HUGE_PAGE).unwrap(), 5 * G + 8 * hp);
        // What is left of the last range, exactly.
        let left = 6 * G - (5 * G + 9 * hp);
        assert!(matches!(
            a.alloc(left as usize + 1),
            Err(DmaError::IovaExhausted { ref ranges, .. }) if ranges.contains("0x17fffffff")
        ));
        assert_eq!(a.alloc(left as usize).unwrap(), 5 * G + 9 * hp);
        assert!(a.alloc(1).is_err(), "nothing past the last range");
        assert!(matches!(a.alloc(0), Err(DmaError::Empty)));

        // Ranges that touch stay two: a region lies inside one, as VFIO_IOMMU_MAP_DMA wants.
        let touching =
            IovaAllocator::within(&[r(4 * G + hp, 4 * G + 3 * hp - 1), r(4 * G, 4 * G + hp - 1)])
                .unwrap();
        assert_eq!(
            touching.ranges(),
            [r(4 * G, 4 * G + hp - 1), r(4 * G + hp, 4 * G + 3 * hp - 1)]
        );
        assert_eq!(touching.alloc(2 * HUGE_PAGE).unwrap(), 4 * G + hp);
        assert!(touching.alloc(1).is_err(), "the first range was passed");
        // Ranges with no aligned hugepage at or above 4 GiB leave nothing, and a device that
        // reaches nothing the driver can use has no allocator.
        assert!(IovaAllocator::within(&[]).is_none());
        assert!(IovaAllocator::within(&[r(0, 4 * G - 1)]).is_none());
        assert!(IovaAllocator::within(&[r(4 * G + 1, 4 * G + 2 * hp - 2)]).is_none());
        assert!(
            IovaAllocator::within(&[r(5 * G, 4 * G)]).is_none(),
            "backwards"
        );
        let one = IovaAllocator::within(&[r(4 * G + 1, 4 * G + 2 * hp - 1)]).unwrap();
        assert_eq!(one.alloc(1).unwrap(), 4 * G + hp);
        assert!(one.alloc(1).is_err());
        // The whole space, as a simulator reports it: from 4 GiB on.
        assert_eq!(IovaAllocator::new().ranges(), [r(4 * G, u64::MAX)]);
    }

    /// Threads taking IOVAs at once get disjoint ones, all inside the ranges.
    #[test]
    fn concurrent_allocations_are_disjoint() {
        let hp = HUGE_PAGE as u64;
        let r = |start: u64, last: u64| IovaRange { start, last };
        let a = IovaAllocator::within(&[
            r(IovaAllocator::BASE, IovaAllocator::BASE + 10 * hp - 1),
            r(
                IovaAllocator::BASE + 20 * hp,
                IovaAllocator::BASE + 200 * hp - 1,
            ),
        ])
        .unwrap();
        let got = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..4 {
                let (a, got) = (&a, &got);
                s.spawn(move || {
                    for i in 0..20 {
                        let len = (1 + (t + i) % 3) * HUGE_PAGE;
                        if let Ok(at) = a.alloc(len) {
                            got.lock().unwrap().push((at, at + len as u64));
                        }
                    }
                });
            }
        });
        let mut got = got.into_inner().unwrap();
        got.sort();
        assert!(got.windows(2).all(|w| w[0].1 <= w[1].0), "overlap: {got:?}");
        assert!(got
            .iter()
            .all(|&(s, e)| a.ranges().iter().any(|r| s >= r.start && e - 1 <= r.last)));
        // 10 + 180 hugepages in all, requests of 1 to 3: most of it is given out.
        let pages: u64 = got.iter().map(|(s, e)| (e - s) / hp).sum();
        assert!(pages > 150, "{pages} hugepages given out");
    }

    /// An IOVA is named only for an offset inside the region (or its end), and only when it
    /// fits the IOVA space: an offset past the region, or a region placed at the top of the
    /// space, is an error rather than an overflow or an address outside the region.
    #[test]
    fn an_iova_outside_the_region_or_the_iova_space_is_refused() {
        let r = DmaRegion::new_normal(4096, IovaAllocator::BASE).unwrap();
        assert_eq!(r.iova_at(0).unwrap(), IovaAllocator::BASE);
        assert_eq!(r.iova_at(4095).unwrap(), IovaAllocator::BASE + 4095);
        assert_eq!(r.iova_at(4096).unwrap(), IovaAllocator::BASE + 4096);
        assert!(matches!(
            r.iova_at(4097),
            Err(DmaError::OutOfBounds { offset: 4097, .. })
        ));
        assert!(r.iova_at(usize::MAX).is_err());
        let top = DmaRegion::new_normal(4096, u64::MAX - 4095).unwrap();
        assert_eq!(top.iova_at(4095).unwrap(), u64::MAX);
        assert!(top.iova_at(4096).is_err(), "2^64 is no IOVA");
    }

    /// Lengths that no mapping can have are refused before any system call, and a region
    /// that cannot be made takes no IOVA.
    #[test]
    fn impossible_lengths_are_refused_and_take_no_iova() {
        for len in [usize::MAX, usize::MAX - HUGE_PAGE, isize::MAX as usize + 1] {
            assert!(matches!(
                DmaRegion::new(len, 0),
                Err(DmaError::TooLarge { .. })
            ));
            assert!(matches!(
                DmaRegion::new_normal(len, 0),
                Err(DmaError::TooLarge { .. })
            ));
        }
        let iovas = IovaAllocator::new();
        let first = iovas.alloc(1).unwrap();
        // Rounds within the address space, but no system backs half of it.
        let huge = isize::MAX as usize - PAGE + 1;
        assert!(DmaRegion::new_in(huge, &iovas).is_err());
        assert!(DmaRegion::new_normal_in(huge, &iovas).is_err());
        let r = DmaRegion::new_normal_in(4096, &iovas).unwrap();
        assert_eq!(
            r.iova(),
            first + HUGE_PAGE as u64,
            "the failed requests took no IOVA"
        );
    }
}
