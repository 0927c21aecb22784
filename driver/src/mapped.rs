//! RAII for DMA mappings: a region that is mapped for the device while this value lives.

use crate::device::{Device, DeviceError};
use crate::dma::DmaRegion;
use crate::nic::DeviceClaim;
use std::sync::Arc;

/// A [`DmaRegion`] mapped into a device's IOVA space; unmapped on drop.
pub struct MappedRegion {
    region: DmaRegion,
    device: Arc<dyn Device>,
    /// The claim of the [`crate::Nic`] the region was mapped for, given up after the unmap:
    /// the device opens again only once no mapping of that Nic's IOVAs is left.
    _claim: Option<Arc<DeviceClaim>>,
}

impl MappedRegion {
    /// Map `region` for `device`.
    pub fn map(device: Arc<dyn Device>, region: DmaRegion) -> Result<Self, DeviceError> {
        device.dma_map(&region)?;
        Ok(MappedRegion {
            region,
            device,
            _claim: None,
        })
    }

    /// Map `region` for the device of a Nic's `claim`, which the mapping holds.
    pub(crate) fn map_claimed(
        claim: &Arc<DeviceClaim>,
        region: DmaRegion,
    ) -> Result<Self, DeviceError> {
        let mut mapped = Self::map(claim.device.clone(), region)?;
        mapped._claim = Some(claim.clone());
        Ok(mapped)
    }

    /// The region.
    pub fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// Whether the region is mapped for `device`: its IOVAs name this memory only to that
    /// device. Every device (each NIC) has an IOVA space of its own, so another NIC may map
    /// memory of its own at the same IOVAs.
    pub fn is_mapped_for(&self, device: &Arc<dyn Device>) -> bool {
        Arc::ptr_eq(&self.device, device)
    }
}

impl Drop for MappedRegion {
    fn drop(&mut self) {
        if let Err(e) = self.device.dma_unmap(&self.region) {
            tracing::warn!("{e}");
        }
    }
}
