//! Packet buffers: fixed-size DMA buffers from a pool, returned to it on drop (RAII, as ixy).
//!
//! A [`DmaBuffer`] is owned by the application, moves into an endpoint when posted, and comes
//! back in the completion. The free list is a lock-free queue, so allocating and freeing on the
//! datapath takes no lock and no allocation.

use crate::dma::{DmaError, DmaRegion};
use crate::error::DriverError;
use crate::mapped::MappedRegion;
use crate::nic::Nic;
use crossbeam_queue::ArrayQueue;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

struct PoolInner {
    region: MappedRegion,
    buf_size: usize,
    free: ArrayQueue<u32>,
    /// The process that opened the pool's NIC: a child forked from it shares the buffers'
    /// memory with it, and takes none ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

/// A pool of equal-sized DMA buffers mapped for one NIC.
#[derive(Clone)]
pub struct DmaPool {
    inner: Arc<PoolInner>,
}

impl DmaPool {
    /// The most buffers one pool holds: 16 Mi, far more than every ring of an endpoint can
    /// have posted. The free list is allocated whole when the pool is made (16 bytes per
    /// buffer), and an allocation that fails aborts the process rather than returning an
    /// error, so the count is bounded before it is tried.
    pub const MAX_BUFFERS: u32 = 1 << 24;

    /// `count` buffers of `buf_size` bytes (rounded up to 64) for `nic`. `FI_EINVAL`
    /// ([`DriverError::InvalidArgument`]) for a size or count of 0, a count above
    /// [`DmaPool::MAX_BUFFERS`], or buffers too large for a descriptor's 32-bit length.
    pub fn new(nic: &Nic, buf_size: usize, count: u32) -> Result<Self, DriverError> {
        if buf_size == 0 || count == 0 {
            return Err(DriverError::InvalidArgument(
                "a DMA pool needs a non-zero buffer size and count".into(),
            ));
        }
        if count > Self::MAX_BUFFERS {
            return Err(DriverError::InvalidArgument(format!(
                "a DMA pool of {count} buffers: at most {} per pool",
                Self::MAX_BUFFERS
            )));
        }
        // Descriptors carry a buffer's length in 32 bits.
        let buf_size = match buf_size.checked_next_multiple_of(64) {
            Some(b) if u32::try_from(b).is_ok() => b,
            _ => {
                return Err(DriverError::InvalidArgument(format!(
                    "DMA pool buffers of {buf_size} bytes: a descriptor's length is 32 bits"
                )))
            }
        };
        let total = buf_size
            .checked_mul(count as usize)
            .ok_or_else(|| DriverError::InvalidArgument("DMA pool size overflows".into()))?;
        let region = nic.inner.map_new(total)?;
        let free = ArrayQueue::new(count as usize);
        for i in 0..count {
            // Cannot fail: the queue holds exactly `count` entries.
            let _ = free.push(i);
        }
        Ok(DmaPool {
            inner: Arc::new(PoolInner {
                region,
                buf_size,
                free,
                made_in: nic.inner.made_in,
            }),
        })
    }

    /// Take a buffer, or `None` when every buffer is in use, and in a process forked from the
    /// one that opened the pool's NIC (the buffers the child's copy holds free may be the
    /// parent's now, their memory shared with it).
    pub fn alloc(&self) -> Option<DmaBuffer> {
        if self.inner.made_in.in_forked_child() {
            return None;
        }
        self.inner.free.pop().map(|index| DmaBuffer {
            pool: self.inner.clone(),
            index,
            len: 0,
            capacity: self.inner.buf_size,
        })
    }

    /// Take a buffer while more than `keep` are free, else `None`: the last `keep` are left
    /// to other callers. (A buffer freed meanwhile only makes more free.)
    pub fn alloc_leaving(&self, keep: usize) -> Option<DmaBuffer> {
        if self.inner.free.len() <= keep {
            return None;
        }
        self.alloc()
    }

    /// Buffer size in bytes.
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }

    /// Buffers currently free.
    pub fn available(&self) -> usize {
        self.inner.free.len()
    }

    /// Bytes of DMA memory behind the pool: `buf_size` × buffers, rounded up to the pages
    /// that back it (4 KiB, or 2 MiB where hugepages are reserved), so possibly more than the
    /// buffers hold. A [`crate::MrMemory::Pool`] range may span all of them.
    pub fn bytes(&self) -> usize {
        self.inner.region.region().len()
    }

    /// Whether the pool is mapped for `device` ([`MappedRegion::is_mapped_for`]).
    pub(crate) fn is_mapped_for(&self, device: &Arc<dyn crate::device::Device>) -> bool {
        self.inner.region.is_mapped_for(device)
    }

    pub(crate) fn region(&self) -> &DmaRegion {
        self.inner.region.region()
    }
}

/// DMA buffers of several sizes for one NIC, for messages from a few bytes to
/// [`DmaPoolSet::max_size`]: a pool of small buffers made at once, and above it pools of
/// larger ones, each class twice the size of the one below it (the last one exactly
/// `max_size`), each made the first time a buffer of its size is asked for.
///
/// A small message takes a small buffer, as from a [`DmaPool`]; a larger one takes a buffer
/// of the smallest class that holds it, or of a larger class when every buffer of that one
/// is in use. A class holds as many buffers as fit its byte budget, at least
/// [`DmaPoolSet::MIN_LARGE_BUFFERS`], so memory grows with the sizes an application
/// actually uses rather than with the largest it may use.
pub struct DmaPoolSet {
    nic: crate::nic::Nic,
    small: DmaPool,
    max_size: usize,
    class_bytes: usize,
    /// The buffer size of each class of large buffers, smallest first.
    sizes: Vec<usize>,
    /// Each class's pool, once made.
    large: Vec<OnceLock<DmaPool>>,
    /// Held while a class's pool is made, so that two callers make one.
    making: Mutex<()>,
}

impl DmaPoolSet {
    /// The fewest buffers a class of large buffers holds, whatever its budget.
    pub const MIN_LARGE_BUFFERS: u32 = 2;

    /// `small_count` buffers of `small_size` bytes for `nic`, made now, and classes of larger
    /// buffers up to `max_size` bytes, each holding `class_bytes` of buffers (at least
    /// [`DmaPoolSet::MIN_LARGE_BUFFERS`]), made when first used. `FI_EINVAL` for a small pool
    /// [`DmaPool::new`] refuses, or a `max_size` below `small_size` or whose buffer (rounded
    /// up to 64 bytes, as every buffer is) is above a descriptor's 32-bit length.
    pub fn new(
        nic: &crate::nic::Nic,
        small_size: usize,
        small_count: u32,
        max_size: usize,
        class_bytes: usize,
    ) -> Result<Self, DriverError> {
        // Every buffer is rounded up to 64 bytes ([`DmaPool::new`]): the largest one must
        // still fit a descriptor's length.
        let fits = max_size
            .checked_next_multiple_of(64)
            .is_some_and(|b| u32::try_from(b).is_ok());
        if max_size < small_size || !fits {
            return Err(DriverError::InvalidArgument(format!(
                "DMA buffers of up to {max_size} bytes: at least the small buffers' \
                 {small_size}, and within a descriptor's 32-bit length"
            )));
        }
        let small = DmaPool::new(nic, small_size, small_count)?;
        // Twice the size of the class below, the last one capped at `max_size`.
        let mut sizes = Vec::new();
        let mut size = small.buf_size();
        while size < max_size {
            size = size.saturating_mul(2).min(max_size);
            sizes.push(size);
        }
        Ok(DmaPoolSet {
            nic: nic.clone(),
            small,
            max_size,
            class_bytes,
            large: sizes.iter().map(|_| OnceLock::new()).collect(),
            sizes,
            making: Mutex::new(()),
        })
    }

    /// The bytes of a buffer of class `class` (0 is the smallest class of large buffers), or
    /// `None` past the last.
    pub fn class_size(&self, class: usize) -> Option<usize> {
        self.sizes.get(class).copied()
    }

    /// The largest buffer, and so the longest message, the set holds.
    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// The small buffers' size.
    pub fn small_size(&self) -> usize {
        self.small.buf_size()
    }

    /// The classes of large buffers.
    pub fn classes(&self) -> usize {
        self.large.len()
    }

    /// A buffer of at least `len` bytes: a small one when `len` fits it, else one of the
    /// smallest class of large buffers that holds `len` and has one free.
    /// [`DriverError::MessageTooLong`] (`FI_EMSGSIZE`) above [`DmaPoolSet::max_size`],
    /// [`DriverError::Full`] (`FI_EAGAIN`) when every buffer that would do is in use. A class
    /// whose pool cannot be made (its memory, its mapping: a process at its locked-memory
    /// limit, a server at its mapping limit) is passed over for the larger classes already
    /// made, one of which may have a buffer free; making no further one, which would ask for
    /// as much. When none has, the error of making the class: nothing of it is made, and a
    /// later call tries again. [`DriverError::DeviceGone`] in a process
    /// forked from the one that opened the NIC.
    pub fn alloc(&self, len: usize) -> Result<DmaBuffer, DriverError> {
        self.alloc_leaving(len, 0)
    }

    /// [`DmaPoolSet::alloc`], taking no buffer of a class of large buffers that would leave
    /// fewer than `keep` of that class free: a caller that holds buffers for long (a
    /// receive, until a message comes) leaves some to one that needs them to make progress
    /// (a send of a message as long). The small buffers are taken as by `alloc`.
    pub fn alloc_leaving(&self, len: usize, keep: usize) -> Result<DmaBuffer, DriverError> {
        // A process forked from the NIC's: its copies of the pools share the parent's memory.
        if self.nic.inner.in_forked_child() {
            return Err(DriverError::DeviceGone);
        }
        // First: a small buffer rounded up to 64 bytes may hold more than the largest.
        if len > self.max_size {
            return Err(DriverError::MessageTooLong {
                len,
                max: self.max_size,
            });
        }
        if len <= self.small.buf_size() {
            return self
                .small
                .alloc()
                .ok_or(DriverError::Full("the DMA buffers"));
        }
        // `len` is at most `max_size`, the last class's size.
        let first = self.sizes.partition_point(|&size| size < len);
        let mut unmade = None;
        for class in first..self.large.len() {
            let pool = match unmade {
                None => match self.pool(class) {
                    Ok(pool) => pool,
                    Err(e) => {
                        unmade = Some(e);
                        continue;
                    }
                },
                Some(_) => match self.large.get(class).and_then(OnceLock::get) {
                    Some(pool) => pool,
                    None => continue,
                },
            };
            if let Some(buffer) = pool.alloc_leaving(keep) {
                return Ok(buffer);
            }
        }
        Err(unmade.unwrap_or(DriverError::Full("the DMA buffers")))
    }

    /// The pool of class `class`, made now if it is not yet.
    fn pool(&self, class: usize) -> Result<&DmaPool, DriverError> {
        let (Some(cell), Some(&size)) = (self.large.get(class), self.sizes.get(class)) else {
            return Err(DriverError::InvalidArgument(format!(
                "no class {class} of DMA buffers"
            )));
        };
        if let Some(pool) = cell.get() {
            return Ok(pool);
        }
        let _making = self.making.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = cell.get() {
            return Ok(pool);
        }
        let count = u32::try_from(self.class_bytes / size)
            .unwrap_or(u32::MAX)
            .clamp(Self::MIN_LARGE_BUFFERS, DmaPool::MAX_BUFFERS);
        let pool = DmaPool::new(&self.nic, size, count)?;
        Ok(cell.get_or_init(|| pool))
    }

    /// Bytes of DMA memory behind the pools made so far ([`DmaPool::bytes`]).
    pub fn bytes(&self) -> usize {
        self.small.bytes()
            + self
                .large
                .iter()
                .filter_map(OnceLock::get)
                .map(DmaPool::bytes)
                .sum::<usize>()
    }

    /// Small buffers currently free.
    pub fn small_available(&self) -> usize {
        self.small.available()
    }
}

/// One DMA buffer of a [`DmaPool`]; returns to its pool when dropped.
pub struct DmaBuffer {
    pool: Arc<PoolInner>,
    index: u32,
    len: usize,
    /// The bytes of the buffer in use: its pool's buffer size, or less after
    /// [`DmaBuffer::limit`].
    capacity: usize,
}

impl DmaBuffer {
    pub(crate) fn offset(&self) -> usize {
        self.index as usize * self.pool.buf_size
    }

    pub(crate) fn region(&self) -> &DmaRegion {
        self.pool.region.region()
    }

    /// Whether the buffer's pool is mapped for `device` ([`MappedRegion::is_mapped_for`]).
    #[inline]
    pub(crate) fn is_mapped_for(&self, device: &Arc<dyn crate::device::Device>) -> bool {
        self.pool.region.is_mapped_for(device)
    }

    /// The IOVA of the buffer's first byte.
    pub fn iova(&self) -> u64 {
        self.pool.region.region().iova_inside(self.offset())
    }

    /// Capacity in bytes: what a receive posted with the buffer offers the NIC, and what
    /// [`DmaBuffer::fill`] takes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Use only the first `capacity` bytes from now on (never more than the buffer has): a
    /// receive posted with it then offers the NIC that many, as a multi-receive buffer that
    /// mirrors an application's buffer of that size must. The valid length shrinks with it.
    pub fn limit(&mut self, capacity: usize) {
        self.capacity = self.capacity.min(capacity);
        self.len = self.len.min(self.capacity);
    }

    /// Bytes of valid data: set by [`DmaBuffer::fill`] or by a receive completion.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity());
    }

    /// Copy `data` into the buffer and set its length.
    pub fn fill(&mut self, data: &[u8]) -> Result<(), DriverError> {
        self.fill_parts(&[data])
    }

    /// Copy `parts` one after another into the buffer (a gather: an iovec list) and set its
    /// length to their total. Nothing is written when they do not fit.
    pub fn fill_parts(&mut self, parts: &[&[u8]]) -> Result<(), DriverError> {
        let total = parts
            .iter()
            .try_fold(0usize, |t, p| t.checked_add(p.len()))
            .filter(|&t| t <= self.capacity())
            .ok_or_else(|| {
                DriverError::InvalidArgument(format!(
                    "{} bytes do not fit a {}-byte buffer",
                    parts.iter().fold(0usize, |t, p| t.saturating_add(p.len())),
                    self.capacity()
                ))
            })?;
        let mut at = self.offset();
        for part in parts {
            self.pool.region.region().write_bytes(at, part)?;
            at += part.len();
        }
        self.len = total;
        Ok(())
    }

    /// Copy the buffer's valid data into `out` (at most `out.len()` bytes); returns the count.
    pub fn read(&self, out: &mut [u8]) -> Result<usize, DmaError> {
        let n = self.len.min(out.len());
        self.pool
            .region
            .region()
            .read_bytes(self.offset(), &mut out[..n])?;
        Ok(n)
    }

    /// Copy bytes of the buffer's valid data from `offset` into `out` (at most `out.len()`,
    /// never past [`DmaBuffer::len`]); returns the count. A multi-receive buffer returned by
    /// its last completion holds every message at the offset its completion reported.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<usize, DmaError> {
        let n = self.len.saturating_sub(offset).min(out.len());
        if n == 0 {
            return Ok(0);
        }
        self.pool
            .region
            .region()
            .read_bytes(self.offset() + offset, &mut out[..n])?;
        Ok(n)
    }

    /// Copy `out.len()` bytes from `offset`, anywhere inside the capacity (a multi-receive
    /// buffer the NIC still holds has no valid length yet). Nothing is read on error.
    pub(crate) fn read_in_capacity(&self, offset: usize, out: &mut [u8]) -> Result<(), DmaError> {
        match offset.checked_add(out.len()) {
            Some(end) if end <= self.capacity() => self
                .pool
                .region
                .region()
                .read_bytes(self.offset() + offset, out),
            _ => Err(DmaError::OutOfBounds {
                offset,
                len: out.len(),
                size: self.capacity(),
            }),
        }
    }

    /// The buffer's valid data as a new vector (tools and tests; the datapath uses `read`).
    pub fn to_vec(&self) -> Result<Vec<u8>, DmaError> {
        let mut v = vec![0u8; self.len];
        self.read(&mut v)?;
        Ok(v)
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        // Cannot fail: an index is in the queue at most once, and the queue holds every index.
        let _ = self.pool.free.push(self.index);
    }
}

impl core::fmt::Debug for DmaBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaBuffer")
            .field("iova", &format_args!("{:#x}", self.iova()))
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::sim_nic;
    use uet_sim::Fabric;

    /// 4 small buffers of 1 KiB, classes up to 10,000 bytes of 8 KiB of buffers each.
    fn set(fabric: &Fabric) -> DmaPoolSet {
        let nic = sim_nic(fabric, "10.0.0.1");
        DmaPoolSet::new(&nic, 1024, 4, 10_000, 8 * 1024).expect("pool set")
    }

    #[test]
    fn classes_double_from_the_small_buffers_to_the_largest_message() {
        let fabric = Fabric::new();
        let s = set(&fabric);
        let sizes: Vec<_> = (0..=s.classes()).map(|c| s.class_size(c)).collect();
        assert_eq!(
            sizes,
            [Some(2048), Some(4096), Some(8192), Some(10_000), None]
        );
        assert_eq!((s.small_size(), s.max_size()), (1024, 10_000));
        // One class when the largest is the small size doubled, none when it is the small
        // size.
        let nic = sim_nic(&fabric, "10.0.0.2");
        let two = DmaPoolSet::new(&nic, 1024, 1, 2048, 0).expect("pool set");
        assert_eq!((two.classes(), two.class_size(0)), (1, Some(2048)));
        let none = DmaPoolSet::new(&nic, 1024, 1, 1024, 0).expect("pool set");
        assert_eq!(none.classes(), 0);
    }

    #[test]
    fn a_buffer_comes_from_the_smallest_class_that_holds_it_and_larger_ones_when_full() {
        let fabric = Fabric::new();
        let s = set(&fabric);
        let small_bytes = s.bytes();
        let small = s.alloc(1024).expect("small");
        assert_eq!(small.capacity(), 1024);
        assert_eq!(
            s.bytes(),
            small_bytes,
            "no class is made for a small buffer"
        );
        // 3,000 bytes: the 4 KiB class, which holds two buffers (8 KiB), made now.
        let a = s.alloc(3000).expect("first");
        let b = s.alloc(3000).expect("second");
        assert_eq!((a.capacity(), b.capacity()), (4096, 4096));
        assert!(s.bytes() > small_bytes);
        assert_ne!(a.iova(), b.iova());
        // Its class full, the next larger one serves.
        let c = s.alloc(3000).expect("from the 8 KiB class");
        assert_eq!(c.capacity(), 8192);
        // A freed buffer returns to its own class.
        drop(a);
        assert_eq!(s.alloc(2049).expect("again").capacity(), 4096);
        // A buffer limited offers only what is left, and fills no more.
        let mut limited = s.alloc(5000).expect("limited");
        limited.limit(1000);
        assert_eq!(limited.capacity(), 1000);
        limited.limit(2000);
        assert_eq!(limited.capacity(), 1000, "a limit never grows the buffer");
        assert!(limited.fill(&[1u8; 1001]).is_err());
        limited.fill(&[1u8; 1000]).expect("fits");
        limited.limit(10);
        assert_eq!(limited.len(), 10);
        drop(limited);
        // The largest message takes a buffer of exactly its size.
        let mut big = s.alloc(10_000).expect("largest");
        assert_eq!(big.capacity(), 10_000usize.next_multiple_of(64));
        big.fill(&[7u8; 10_000]).expect("fill");
        assert_eq!(big.to_vec().expect("read"), vec![7u8; 10_000]);
    }

    #[test]
    fn a_message_above_the_largest_is_too_long_and_no_free_buffer_is_full() {
        let fabric = Fabric::new();
        let s = set(&fabric);
        let err = s.alloc(10_001).expect_err("too long");
        assert!(
            matches!(
                err,
                DriverError::MessageTooLong {
                    len: 10_001,
                    max: 10_000
                }
            ),
            "{err}"
        );
        assert_eq!(err.errno(), uet_av::FiErrno::FI_EMSGSIZE);
        let held: Vec<_> = (0..4).map(|_| s.alloc(1).expect("small")).collect();
        let err = s.alloc(0).expect_err("every small buffer is in use");
        assert_eq!(err.errno(), uet_av::FiErrno::FI_EAGAIN);
        assert_eq!(s.small_available(), 0);
        drop(held);
        assert_eq!(s.small_available(), 4);
        // Every large class full: the two largest buffers, then nothing larger is left.
        let largest: Vec<_> = (0..2).map(|_| s.alloc(10_000).expect("largest")).collect();
        let err = s.alloc(9000).expect_err("the last class is full");
        assert_eq!(err.errno(), uet_av::FiErrno::FI_EAGAIN);
        drop(largest);
        assert!(s.alloc(9000).is_ok());
    }

    /// The largest size holds even where the small buffers, rounded up to 64 bytes, hold
    /// more: a buffer between the two is too long.
    #[test]
    fn a_length_above_the_largest_is_too_long_though_a_small_buffer_would_hold_it() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        let s = DmaPoolSet::new(&nic, 1000, 2, 1000, 0).expect("pool set");
        assert_eq!(s.small_size(), 1024);
        assert!(s.alloc(1000).is_ok());
        let err = s.alloc(1001).expect_err("above the largest");
        assert_eq!(err.errno(), uet_av::FiErrno::FI_EMSGSIZE, "{err}");
    }

    #[test]
    fn a_set_whose_largest_is_below_its_small_buffers_or_beyond_a_descriptor_is_refused() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        for max in [512, (u32::MAX as usize) + 1] {
            let err = DmaPoolSet::new(&nic, 1024, 4, max, 0)
                .err()
                .expect("refused");
            assert_eq!(err.errno(), uet_av::FiErrno::FI_EINVAL, "{max}: {err}");
        }
    }

    #[test]
    fn a_buffer_taken_leaving_some_takes_none_of_the_last_of_a_class() {
        let fabric = Fabric::new();
        let s = set(&fabric);
        // The last class holds two buffers of 10,000 bytes: one is left to `alloc`.
        let held = s.alloc_leaving(10_000, 1).expect("the first");
        let err = s.alloc_leaving(9000, 1).expect_err("only one left");
        assert_eq!(err.errno(), uet_av::FiErrno::FI_EAGAIN);
        let last = s.alloc(9000).expect("alloc takes the last");
        drop((held, last));
        // A smaller message falls through to a larger class when its own keeps its last.
        let a = s.alloc_leaving(3000, 1).expect("4 KiB class");
        assert_eq!(a.capacity(), 4096);
        let b = s.alloc_leaving(3000, 1).expect("8 KiB class");
        assert_eq!(b.capacity(), 8192);
        // Small buffers are taken as by `alloc`.
        let small: Vec<_> = (0..4)
            .map(|_| s.alloc_leaving(1, 1).expect("small"))
            .collect();
        assert_eq!(s.small_available(), 0);
        drop(small);
    }

    /// A class whose pool cannot be made (its DMA mapping refused: a process at its locked
    /// memory limit, a server at its mapping limit) leaves a buffer of a larger class made
    /// already to the request, instead of failing it; with none free, the request fails with
    /// why the class could not be made, and a later call makes it once mappings are granted.
    #[test]
    fn a_class_that_cannot_be_made_leaves_a_larger_class_made_already_to_the_request() {
        use crate::backend::sim::SimDevice;
        use crate::device::{Device, DeviceError};
        use std::sync::atomic::{AtomicBool, Ordering};
        struct Refusing(SimDevice, Arc<AtomicBool>);
        impl Device for Refusing {
            fn bar0(&self) -> &dyn uet_regs::Mmio {
                self.0.bar0()
            }
            fn dma_map(&self, r: &crate::dma::DmaRegion) -> Result<(), DeviceError> {
                if self.1.load(Ordering::Relaxed) {
                    return Err(DeviceError::DmaMap {
                        iova: r.iova(),
                        len: r.len(),
                        reason: "no mapping left".into(),
                        errno: Some(libc::ENOSPC),
                    });
                }
                self.0.dma_map(r)
            }
            fn dma_unmap(&self, r: &crate::dma::DmaRegion) -> Result<(), DeviceError> {
                self.0.dma_unmap(r)
            }
            fn name(&self) -> String {
                "refusing".into()
            }
            fn msix_vectors(&self) -> u16 {
                self.0.msix_vectors()
            }
            fn set_msix_eventfds(
                &self,
                eventfds: &[vmm_sys_util::eventfd::EventFd],
            ) -> Result<(), DeviceError> {
                self.0.set_msix_eventfds(eventfds)
            }
            fn clear_msix(&self) -> Result<(), DeviceError> {
                self.0.clear_msix()
            }
        }
        let fabric = Fabric::new();
        let f = fabric
            .add_nic(uet_sim::NicConfig::new(
                "10.0.0.1".parse().expect("address"),
            ))
            .expect("NIC");
        let refuse = Arc::new(AtomicBool::new(false));
        let nic = crate::nic::Nic::open(Arc::new(Refusing(SimDevice::new(f), refuse.clone())))
            .expect("NIC");
        let s = DmaPoolSet::new(&nic, 1024, 4, 10_000, 8 * 1024).expect("pool set");
        // The 8 KiB class is made (two buffers); the 2 and 4 KiB classes are not.
        let large = s.alloc(8000).expect("an 8 KiB buffer");
        assert_eq!(large.capacity(), 8192);
        refuse.store(true, Ordering::Relaxed);
        let b = s.alloc(3000).expect("the 8 KiB class's other buffer");
        assert_eq!(b.capacity(), 8192);
        // None free now: the error is why the 4 KiB class could not be made. The
        // 10,000-byte class is not made either: a failure of the 4 KiB one stops making.
        let bytes = s.bytes();
        let err = s.alloc(3000).expect_err("nothing left");
        assert!(err.to_string().contains("no mapping left"), "{err}");
        assert_ne!(err.errno(), uet_av::FiErrno::FI_EAGAIN, "{err}");
        assert_eq!(s.bytes(), bytes);
        drop((large, b));
        refuse.store(false, Ordering::Relaxed);
        let made = s.alloc(3000).expect("mappings granted again");
        assert_eq!(made.capacity(), 4096);
        assert!(s.bytes() > bytes);
    }

    #[test]
    fn a_set_whose_largest_buffer_rounded_up_is_beyond_a_descriptor_is_refused() {
        let fabric = Fabric::new();
        let nic = sim_nic(&fabric, "10.0.0.1");
        // Within 32 bits, but not once rounded up to 64 bytes as every buffer is.
        for max in [u32::MAX as usize, (u32::MAX - 62) as usize] {
            let err = DmaPoolSet::new(&nic, 1024, 4, max, 0)
                .err()
                .expect("refused");
            assert_eq!(err.errno(), uet_av::FiErrno::FI_EINVAL, "{max}: {err}");
        }
        // The largest that rounds up within 32 bits is taken.
        let max = (u32::MAX as usize) & !63;
        let s = DmaPoolSet::new(&nic, 1024, 4, max, 0).expect("within 32 bits");
        assert_eq!(s.max_size(), max);
    }
}
