//! IOMMU and DMA engine: the NIC's only view of host memory.
//!
//! The driver maps DMA memory with `SimFunction::dma_map(iova, len, fd, fd_offset)`, passing
//! the memfd that backs it, as a vfio-user client passes its regions. The model duplicates the
//! descriptor and maps the same pages a second time (`MAP_SHARED`) through vm-memory's
//! `GuestRegionMmap` with a `FileOffset`, placed at guest address = IOVA. Host and NIC therefore
//! share the pages; the model never forms a Rust reference into them (vm-memory copies with
//! volatile accesses).
//!
//! Rules:
//!
//! * A mapping is non-empty, its IOVA, length and file offset are 4 KiB aligned, it does not
//!   overlap another mapping, and the file is at least `fd_offset + len` bytes long (mapping
//!   past the end of a file would fault on access).
//! * At most [`crate::NicConfig::dma_mappings`] mappings are held at once (65,535 by default,
//!   the VFIO type1 IOMMU's `dma_entry_limit`); a map beyond it is refused, so that no client
//!   makes the model hold a descriptor and a mapping per request without bound; and at most
//!   [`crate::NicConfig::dma_bytes`] bytes over all of them, since each mapping takes as much
//!   of the simulator's address space, even of sparse memory that costs the client nothing.
//! * `dma_unmap(iova, len)` removes every mapping inside the range; a range that cuts a mapping
//!   in two, or covers none, is refused.
//! * A mapping lets the device read, write, or both ([`DmaAccess`], VFIO's
//!   `VFIO_DMA_MAP_FLAG_READ` and `_WRITE`); one that allows neither is refused. A read or
//!   write the mappings under it do not allow is a DMA fault, as one outside them is.
//! * Every DMA is checked against the mappings *before* any byte moves: an access that is not
//!   entirely inside mapped memory is a DMA fault — the engine that issued it reports an error
//!   status or completion and counts `DMA_FAULTS`, and nothing is written.
//! * Mappings belong to the IOMMU, not to the function: FUNCTION_RESET keeps them (as VFIO does).
//! * A function issues memory requests only while its PCI command register enables bus
//!   mastering (PCI Local Bus Specification 3.0 §6.2.2, bit 2): with it clear, every DMA is a
//!   fault, checked like an unmapped one. Only a configuration space changes it (the
//!   vfio-user server's, [`crate::SimFunction::set_bus_master`]); a function driven in process
//!   has no configuration space and is a bus master from the start.

use crate::SimError;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemory, GuestMemoryMmap, GuestRegionMmap, Permissions,
};

/// IOMMU page size: mappings are aligned to it.
pub const IOMMU_PAGE: u64 = 4096;

/// A DMA access outside mapped memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DMA fault at IOVA {iova:#x} length {len:#x}")]
pub struct DmaFault {
    /// First IOVA of the access.
    pub iova: u64,
    /// Length of the access.
    pub len: u64,
}

/// What the device may do with a mapping's memory (VFIO's `VFIO_DMA_MAP_FLAG_READ` and
/// `VFIO_DMA_MAP_FLAG_WRITE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaAccess {
    /// The device may read it.
    pub read: bool,
    /// The device may write it.
    pub write: bool,
}

impl DmaAccess {
    /// Read and write, as the driver maps all its memory.
    pub const READ_WRITE: DmaAccess = DmaAccess {
        read: true,
        write: true,
    };
}

/// The DMA view of one function.
#[derive(Debug)]
pub(crate) struct Iommu {
    mem: GuestMemoryMmap,
    /// iova -> length of each mapping, and what the device may do with it.
    maps: BTreeMap<u64, (u64, DmaAccess)>,
    /// Bus mastering disabled in the command register: every DMA faults.
    bus_master_off: bool,
    /// The most mappings held at once ([`crate::NicConfig::dma_mappings`]).
    limit: usize,
    /// The bytes mapped, over all mappings.
    mapped: u64,
    /// The most bytes mapped at once ([`crate::NicConfig::dma_bytes`]).
    byte_limit: u64,
}

impl Iommu {
    /// An IOMMU with nothing mapped, holding at most `limit` mappings and `byte_limit` bytes
    /// at once.
    pub(crate) fn new(limit: u32, byte_limit: u64) -> Iommu {
        Iommu {
            mem: GuestMemoryMmap::default(),
            maps: BTreeMap::new(),
            bus_master_off: false,
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            mapped: 0,
            byte_limit,
        }
    }

    /// Map `len` bytes of `fd` from `fd_offset` at `iova`, for `access`. Refused once
    /// `limit` mappings are held ([`SimError::TooManyMappings`]), or when it would map more
    /// than `byte_limit` bytes ([`SimError::TooMuchMemory`]).
    pub(crate) fn map(
        &mut self,
        iova: u64,
        len: u64,
        fd: BorrowedFd<'_>,
        fd_offset: u64,
        access: DmaAccess,
    ) -> Result<(), SimError> {
        if len == 0 {
            return Err(SimError::InvalidMapping("zero length"));
        }
        if !access.read && !access.write {
            return Err(SimError::InvalidMapping("neither readable nor writable"));
        }
        if !iova.is_multiple_of(IOMMU_PAGE)
            || !len.is_multiple_of(IOMMU_PAGE)
            || !fd_offset.is_multiple_of(IOMMU_PAGE)
        {
            return Err(SimError::InvalidMapping(
                "IOVA, length and offset must be 4 KiB aligned",
            ));
        }
        let end = iova
            .checked_add(len)
            .ok_or(SimError::InvalidMapping("IOVA range wraps"))?;
        let size = usize::try_from(len).map_err(|_| SimError::InvalidMapping("too large"))?;
        if self.overlaps(iova, end) {
            return Err(SimError::Overlap { iova, len });
        }
        if self.maps.len() >= self.limit {
            return Err(SimError::TooManyMappings { limit: self.limit });
        }
        let mapped = self
            .mapped
            .checked_add(len)
            .filter(|&m| m <= self.byte_limit)
            .ok_or(SimError::TooMuchMemory {
                limit: self.byte_limit,
                mapped: self.mapped,
            })?;
        let file = File::from(fd.try_clone_to_owned()?);
        let file_len = file.metadata()?.len();
        let need = fd_offset
            .checked_add(len)
            .ok_or(SimError::InvalidMapping("file range wraps"))?;
        if file_len < need {
            return Err(SimError::InvalidMapping(
                "file is shorter than offset + length",
            ));
        }
        let region = GuestRegionMmap::from_range(
            GuestAddress(iova),
            size,
            Some(FileOffset::new(file, fd_offset)),
        )
        .map_err(|e| SimError::Map(e.to_string()))?;
        self.mem = self
            .mem
            .insert_region(Arc::new(region))
            .map_err(|e| SimError::Map(e.to_string()))?;
        self.maps.insert(iova, (len, access));
        self.mapped = mapped;
        Ok(())
    }

    fn overlaps(&self, start: u64, end: u64) -> bool {
        // The last mapping starting before `end` is the only one that can reach into the range
        // from below; any mapping starting inside the range overlaps too.
        self.maps
            .range(..end)
            .next_back()
            .is_some_and(|(&s, &(l, _))| s.saturating_add(l) > start)
    }

    /// Enable or disable bus mastering (the PCI command register's bit).
    pub(crate) fn set_bus_master(&mut self, on: bool) {
        self.bus_master_off = !on;
    }

    /// Unmap everything (bus mastering and the limit stay as they are: they belong to the
    /// function).
    pub(crate) fn clear(&mut self) {
        self.mem = GuestMemoryMmap::default();
        self.maps.clear();
        self.mapped = 0;
    }

    /// Unmap every mapping inside `[iova, iova + len)`.
    pub(crate) fn unmap(&mut self, iova: u64, len: u64) -> Result<(), SimError> {
        let end = iova
            .checked_add(len)
            .ok_or(SimError::InvalidMapping("IOVA range wraps"))?;
        if len == 0 {
            return Err(SimError::InvalidMapping("zero length"));
        }
        let mut victims = Vec::new();
        for (&s, &(l, _)) in self.maps.range(..end) {
            let e = s.saturating_add(l);
            if e <= iova {
                continue;
            }
            if s < iova || e > end {
                return Err(SimError::InvalidMapping("range cuts a mapping in two"));
            }
            victims.push((s, l));
        }
        if victims.is_empty() {
            return Err(SimError::NotMapped { iova, len });
        }
        let mut mem = self.mem.clone();
        for &(s, l) in &victims {
            mem = mem
                .remove_region(GuestAddress(s), l)
                .map_err(|e| SimError::Map(e.to_string()))?
                .0;
        }
        self.mem = mem;
        for (s, l) in victims {
            self.maps.remove(&s);
            self.mapped = self.mapped.saturating_sub(l);
        }
        Ok(())
    }

    /// Whether `[iova, iova + len)` lies entirely in mapped memory, and the function may
    /// issue memory requests at all.
    pub(crate) fn check(&self, iova: u64, len: u64) -> Result<(), DmaFault> {
        let fault = DmaFault { iova, len };
        if self.bus_master_off {
            return Err(fault);
        }
        if len == 0 {
            return Ok(());
        }
        iova.checked_add(len).ok_or(fault)?;
        let size = usize::try_from(len).map_err(|_| fault)?;
        if self
            .mem
            .check_range(GuestAddress(iova), size, Permissions::ReadWrite)
        {
            Ok(())
        } else {
            Err(fault)
        }
    }

    /// Whether every mapping under `[iova, iova + len)` lets the device write (`write`) or
    /// read it. The mappings are apart and ordered: walking back from the range's end, the
    /// first that ends at or before `iova` ends the walk.
    fn allows(&self, iova: u64, len: u64, write: bool) -> bool {
        let end = iova.saturating_add(len);
        self.maps
            .range(..end)
            .rev()
            .take_while(|(&s, &(l, _))| s.saturating_add(l) > iova)
            .all(|(_, (_, a))| if write { a.write } else { a.read })
    }

    /// [`Iommu::check`], and that the mappings let the device write (`write`) or read.
    pub(crate) fn check_access(&self, iova: u64, len: u64, write: bool) -> Result<(), DmaFault> {
        self.check(iova, len)?;
        if self.allows(iova, len, write) {
            Ok(())
        } else {
            Err(DmaFault { iova, len })
        }
    }

    /// Copy `buf.len()` bytes from IOVA `iova`.
    pub(crate) fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let len = buf.len() as u64;
        self.check_access(iova, len, false)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.mem
            .read_slice(buf, GuestAddress(iova))
            .map_err(|_| DmaFault { iova, len })
    }

    /// Copy `buf` to IOVA `iova`. Checked first: a faulting write changes nothing.
    pub(crate) fn write(&self, iova: u64, buf: &[u8]) -> Result<(), DmaFault> {
        let len = buf.len() as u64;
        self.check_access(iova, len, true)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.mem
            .write_slice(buf, GuestAddress(iova))
            .map_err(|_| DmaFault { iova, len })
    }

    /// Write a ring entry whose last bytes hold the phase: `body` first, a release fence, then
    /// `phase` at `iova + body.len()`, so a host that sees the new phase sees the whole entry.
    pub(crate) fn write_entry_phase_last(
        &self,
        iova: u64,
        body: &[u8],
        phase: &[u8],
    ) -> Result<(), DmaFault> {
        let total = (body.len() + phase.len()) as u64;
        self.check_access(iova, total, true)?;
        self.write(iova, body)?;
        fence(Ordering::Release);
        self.write(iova + body.len() as u64, phase)
    }
}
