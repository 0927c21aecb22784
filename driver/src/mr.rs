//! Memory regions (`fi_mr`): host memory a peer reaches with RMA write and read.
//!
//! [`Endpoint::register_mr`] issues MR_REGISTER for memory the driver already mapped for DMA —
//! a [`DmaBuffer`] (its whole capacity), a byte range of a [`DmaPool`], or a byte range of a
//! [`MappedRegion`] from [`crate::Nic::map_dma`] — with the access peers get
//! ([`MrAccess::REMOTE_READ`], [`MrAccess::REMOTE_WRITE`]) and a 64-bit memory key the caller
//! chooses (`FI_MR_PROV_KEY` off). The key must be unused on the NIC, else `FI_ENOKEY`. The
//! region is bound to a resource index in the endpoint's RMA space (the NIC assigns the
//! endpoint's first unless one is asked for); a peer's WRITE or READ names the endpoint, the
//! key and an offset within the region, and anything else — another key, a range past the
//! end, an access not granted — is refused by the NIC with RC_PERM_VIOLATION: the peer's
//! operation completes with `FI_EACCES` and the memory is untouched.
//!
//! A region belongs to its endpoint's own job (fi_mr(3): only peers programmed with the
//! region's authorization key may access it, the domain's key when none is given): an
//! endpoint enabled with another job's auth key ([`Endpoint::grant_auth_key`]) takes that
//! job's messages, but that job's WRITE and READ are refused like a wrong key. A region for
//! another key (`fi_mr_attr.auth_key`) is not offered.
//!
//! A [`MemoryRegion`] owns (or shares) its memory, so the memory stays mapped while the NIC
//! may touch it. Dropping it issues MR_DEREGISTER; once that completes, the NIC never touches
//! the memory again — RMA packets still in flight are refused (see `uet_fwif::admin`) — and
//! the memory is released. When MR_DEREGISTER fails (the NIC is gone or hung), the memory is
//! handed back to no one while the device might still write it: the `Nic` keeps it until its
//! drop has reset the function.

use crate::endpoint::Endpoint;
use crate::error::DriverError;
use crate::mapped::MappedRegion;
use crate::nic::NicInner;
use crate::pool::{DmaBuffer, DmaPool};
use std::ops::Range;
use std::sync::Arc;
use uet_fwif::admin::{
    Command, MrDeregisterBody, MrRegisterBody, MR_ACCESS_REMOTE_READ, MR_ACCESS_REMOTE_WRITE,
};
use zerocopy::little_endian::{U16, U64};
use zerocopy::FromZeros;

/// Remote access a memory region grants (`FI_REMOTE_READ`, `FI_REMOTE_WRITE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrAccess(u8);

impl MrAccess {
    /// Peers may read the region (`FI_REMOTE_READ`).
    pub const REMOTE_READ: MrAccess = MrAccess(MR_ACCESS_REMOTE_READ);
    /// Peers may write the region (`FI_REMOTE_WRITE`).
    pub const REMOTE_WRITE: MrAccess = MrAccess(MR_ACCESS_REMOTE_WRITE);
    /// Both.
    pub const REMOTE_READ_WRITE: MrAccess =
        MrAccess(MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE);

    /// The `MR_ACCESS_*` bits.
    pub fn bits(self) -> u8 {
        self.0
    }
}

/// The memory a region covers.
pub enum MrMemory {
    /// One pool buffer, its whole capacity.
    Buffer(DmaBuffer),
    /// A byte range of a pool's memory.
    Pool(DmaPool, Range<usize>),
    /// A byte range of a mapped region.
    Region(Arc<MappedRegion>, Range<usize>),
}

impl From<DmaBuffer> for MrMemory {
    fn from(b: DmaBuffer) -> Self {
        MrMemory::Buffer(b)
    }
}

impl MrMemory {
    /// Whether the memory is mapped for `device` ([`MappedRegion::is_mapped_for`]).
    fn is_mapped_for(&self, device: &Arc<dyn crate::device::Device>) -> bool {
        match self {
            MrMemory::Buffer(b) => b.is_mapped_for(device),
            MrMemory::Pool(p, _) => p.is_mapped_for(device),
            MrMemory::Region(m, _) => m.is_mapped_for(device),
        }
    }

    /// (the DMA region, first byte, length).
    fn span(&self) -> (&crate::dma::DmaRegion, usize, usize) {
        match self {
            MrMemory::Buffer(b) => (b.region(), b.offset(), b.capacity()),
            MrMemory::Pool(p, r) => (p.region(), r.start, r.end.saturating_sub(r.start)),
            MrMemory::Region(m, r) => (m.region(), r.start, r.end.saturating_sub(r.start)),
        }
    }
}

/// A refused registration ([`Endpoint::register_mr`]): why, and the memory handed back as
/// it was given, its bytes untouched, as a refused post hands back its buffer. The memory is
/// `None` only when the registration is in doubt (it timed out): the NIC may still make it
/// late, and peers reach the memory until the admin queue's undo, so the `Nic` keeps the
/// memory until its reset.
pub struct MrRegError {
    /// Why the registration was refused.
    pub error: DriverError,
    /// The memory, unless the registration is in doubt.
    pub memory: Option<MrMemory>,
}

impl MrRegError {
    /// The fabric errno of [`MrRegError::error`].
    pub fn errno(&self) -> uet_av::FiErrno {
        self.error.errno()
    }
}

impl core::fmt::Display for MrRegError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl core::fmt::Debug for MrRegError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MrRegError")
            .field("error", &self.error)
            .field("memory_returned", &self.memory.is_some())
            .finish()
    }
}

impl std::error::Error for MrRegError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<MrRegError> for DriverError {
    fn from(e: MrRegError) -> Self {
        e.error
    }
}

/// A registered memory region; deregistered on drop.
pub struct MemoryRegion {
    nic: Arc<NicInner>,
    handle: u32,
    key: u64,
    resource_index: u16,
    access: MrAccess,
    memory: Option<MrMemory>,
}

impl Endpoint {
    /// `fi_mr_reg` + `fi_mr_bind` to this endpoint: register `memory` for remote `access`
    /// under memory key `key`, bound to the endpoint's first RMA resource index.
    pub fn register_mr(
        &self,
        memory: impl Into<MrMemory>,
        access: MrAccess,
        key: u64,
    ) -> Result<MemoryRegion, MrRegError> {
        self.register_mr_at(memory, access, key, None)
    }

    /// As [`Endpoint::register_mr`], bound to `resource_index` (inside
    /// [`Endpoint::resource_indices`]) when given.
    ///
    /// A refused registration hands the memory back ([`MrRegError`]). One that times out
    /// ([`DriverError::AdminTimeout`], `FI_ETIMEDOUT`) may still be made by the device, late;
    /// the admin queue then deregisters it ahead of the next admin command it sends. Until
    /// then peers holding `key` may reach the memory, so the memory is not handed back: a
    /// pool buffer returns to its pool only after the NIC's reset. A range of a
    /// pool or mapped region that the caller still holds must not be reused for other data
    /// before the NIC's next admin command has completed. Registering `key` again at once
    /// succeeds: a `KeyExists` refusal while such a deregistration waits is retried once,
    /// behind it.
    pub fn register_mr_at(
        &self,
        memory: impl Into<MrMemory>,
        access: MrAccess,
        key: u64,
        resource_index: Option<u16>,
    ) -> Result<MemoryRegion, MrRegError> {
        let memory = memory.into();
        let refused = |error: DriverError, memory: MrMemory| MrRegError {
            error,
            memory: Some(memory),
        };
        if !memory.is_mapped_for(&self.nic_inner().device) {
            return Err(refused(
                DriverError::InvalidArgument(
                    "fi_mr_reg: the memory is mapped for another NIC; its IOVAs name other \
                     memory to this one"
                        .into(),
                ),
                memory,
            ));
        }
        let (region, start, len) = memory.span();
        if len == 0 || !matches!(start.checked_add(len), Some(end) if end <= region.len()) {
            let e = DriverError::InvalidArgument(format!(
                "memory region {start}+{len} outside its {}-byte DMA memory",
                region.len()
            ));
            return Err(refused(e, memory));
        }
        if let Some(ri) = resource_index {
            if ri == 0 || !self.resource_indices().contains(&ri) {
                let e = DriverError::InvalidArgument(format!(
                    "resource index {ri} outside the endpoint's {:?}",
                    self.resource_indices()
                ));
                return Err(refused(e, memory));
            }
        }
        let mut body = MrRegisterBody::new_zeroed();
        let iova = match region.iova_at(start) {
            Ok(iova) => iova,
            Err(e) => return Err(refused(e.into(), memory)),
        };
        body.iova = U64::new(iova);
        body.len = U64::new(len as u64);
        body.key = U64::new(key);
        body.access = access.bits();
        body.resource_index = U16::new(resource_index.unwrap_or(0));
        let nic = self.nic_inner().clone();
        let cmd = Command::MrRegister {
            endpoint: u32::from(self.handle()),
            body,
        };
        let r = match nic.execute(cmd) {
            // The key of a registration that timed out and was made late: its undo was queued
            // when this command collected the late completion, and goes ahead of the retry.
            Err(DriverError::AdminStatus {
                status: uet_fwif::Status::KeyExists,
                ..
            }) if nic.admin().is_ok_and(|admin| admin.has_undoes()) => nic.execute(cmd),
            r => r,
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                if !e.in_doubt() {
                    return Err(refused(e, memory));
                }
                // The device may still register the region late, and peers reach the memory
                // until the admin queue's undo deregisters it: never hand it back.
                tracing::error!(
                    "MR_REGISTER in doubt ({e}); the region's DMA memory is kept until the \
                     NIC's reset"
                );
                nic.quarantine(memory);
                return Err(MrRegError {
                    error: e,
                    memory: None,
                });
            }
        };
        Ok(MemoryRegion {
            nic,
            handle: r.result0,
            key,
            resource_index: (r.result1 & 0xFFFF) as u16,
            access,
            memory: Some(memory),
        })
    }
}

impl MemoryRegion {
    /// The memory key (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The resource index in the endpoint's RMA space the region is bound to.
    pub fn resource_index(&self) -> u16 {
        self.resource_index
    }

    /// The NIC's handle for the region.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The access granted.
    pub fn access(&self) -> MrAccess {
        self.access
    }

    fn span(&self) -> Result<(&crate::dma::DmaRegion, usize, usize), DriverError> {
        self.memory
            .as_ref()
            .map(MrMemory::span)
            .ok_or_else(|| DriverError::InvalidArgument("memory region released".into()))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.span().map_or(0, |(_, _, l)| l)
    }

    /// Whether the region is empty (never: registration refuses empty regions).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// IOVA of the region's first byte.
    pub fn iova(&self) -> u64 {
        // The span was checked against its region at registration (and is never empty).
        self.span().map_or(0, |(r, s, _)| r.iova_inside(s))
    }

    fn check(
        &self,
        offset: usize,
        n: usize,
    ) -> Result<(&crate::dma::DmaRegion, usize), DriverError> {
        let (region, start, len) = self.span()?;
        if !matches!(offset.checked_add(n), Some(end) if end <= len) {
            return Err(DriverError::InvalidArgument(format!(
                "{n} bytes at offset {offset} outside the {len}-byte region"
            )));
        }
        Ok((region, start + offset))
    }

    /// Copy `out.len()` bytes at `offset` of the region out (local access).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), DriverError> {
        let (region, at) = self.check(offset, out.len())?;
        Ok(region.read_bytes(at, out)?)
    }

    /// Copy `data` into the region at `offset` (local access).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), DriverError> {
        let (region, at) = self.check(offset, data.len())?;
        Ok(region.write_bytes(at, data)?)
    }

    /// The whole region as a new vector (tools and tests).
    pub fn to_vec(&self) -> Result<Vec<u8>, DriverError> {
        let mut v = vec![0u8; self.len()];
        self.read(0, &mut v)?;
        Ok(v)
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.nic.in_forked_child() {
            // The parent's region ([`crate::fork`]).
            return;
        }
        let mut body = MrDeregisterBody::new_zeroed();
        body.key = U64::new(self.key);
        let cmd = Command::MrDeregister {
            mr: self.handle,
            body,
        };
        // The memory is freed once the region is deregistered: now, or, when the command is
        // sent ahead of the next one (the admin ring was full), when its completion comes;
        // until then peers may reach it.
        let r = match self.memory.take() {
            Some(memory) => self.nic.destroy_freeing(cmd, Box::new(memory)),
            None => self.nic.destroy(cmd).map(|_| ()).map_err(|e| (e, None)),
        };
        match r {
            Ok(()) => {}
            // The endpoint was destroyed first: the NIC removed the region with it.
            Err((
                DriverError::AdminStatus {
                    status: uet_fwif::Status::InvalidHandle,
                    ..
                },
                _,
            )) => {}
            Err((e, memory)) => {
                tracing::error!(
                    handle = self.handle,
                    "MR_DEREGISTER failed: {e}; the region's DMA memory is kept until the \
                     NIC's reset"
                );
                if let Some(memory) = memory {
                    self.nic.quarantine(memory);
                }
            }
        }
    }
}

impl core::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("handle", &self.handle)
            .field("key", &format_args!("{:#x}", self.key))
            .field("resource_index", &self.resource_index)
            .field("iova", &format_args!("{:#x}", self.iova()))
            .field("len", &self.len())
            .finish()
    }
}
