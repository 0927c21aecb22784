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
use std::sync::Arc;

struct PoolInner {
    region: MappedRegion,
    buf_size: usize,
    free: ArrayQueue<u32>,
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
            }),
        })
    }

    /// Take a buffer, or `None` when every buffer is in use.
    pub fn alloc(&self) -> Option<DmaBuffer> {
        self.inner.free.pop().map(|index| DmaBuffer {
            pool: self.inner.clone(),
            index,
            len: 0,
        })
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

/// One DMA buffer of a [`DmaPool`]; returns to its pool when dropped.
pub struct DmaBuffer {
    pool: Arc<PoolInner>,
    index: u32,
    len: usize,
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

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.pool.buf_size
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
