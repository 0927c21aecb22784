//! The one door to a NIC: the [`Device`] trait every backend implements.
//!
//! Driver code above this trait never knows whether it runs on kernel VFIO, on a vfio-user
//! simulator daemon, or on the simulator in this process.

use crate::dma::{DmaRegion, IovaRange};
use uet_regs::Mmio;

/// Errors a backend reports.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The IOMMU (or the simulator's) refused a DMA mapping.
    #[error("DMA map of {len} bytes at IOVA {iova:#x} failed: {reason}")]
    DmaMap {
        /// IOVA of the region.
        iova: u64,
        /// Length of the region.
        len: usize,
        /// Why.
        reason: String,
    },
    /// A DMA unmap failed.
    #[error("DMA unmap at IOVA {iova:#x} failed: {reason}")]
    DmaUnmap {
        /// IOVA of the region.
        iova: u64,
        /// Why.
        reason: String,
    },
    /// The backend could not be opened.
    #[error("cannot open device {name}: {reason}")]
    Open {
        /// Device name (PCI address, socket path).
        name: String,
        /// Why.
        reason: String,
    },
}

/// A NIC PCI function as a backend exposes it.
pub trait Device: Send + Sync {
    /// BAR0. Every register access of the driver goes through it.
    fn bar0(&self) -> &dyn Mmio;
    /// Make `region` reachable by the device at its IOVA.
    fn dma_map(&self, region: &DmaRegion) -> Result<(), DeviceError>;
    /// Withdraw the device's access to `region`.
    fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError>;
    /// A human-readable name: PCI address, socket path, or simulator NIC.
    fn name(&self) -> String;
    /// The IOVAs the device can reach, ascending: what its IOMMU translates (kernel VFIO
    /// asks the IOMMU). The driver places every DMA region inside them. By default every
    /// IOVA, as for a simulator, which takes any.
    fn iova_ranges(&self) -> Vec<IovaRange> {
        vec![IovaRange::ALL]
    }
}
