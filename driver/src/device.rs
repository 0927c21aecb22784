//! The one door to a NIC: the [`Device`] trait every backend implements.
//!
//! Driver code above this trait never knows whether it runs on kernel VFIO, on a vfio-user
//! simulator daemon, or on the simulator in this process.

use crate::backend::sysfs::PciAddress;
use crate::dma::{DmaRegion, IovaRange};
use uet_regs::Mmio;
use vmm_sys_util::eventfd::EventFd;

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
        /// The operating system's errno, when it gave one: `ENOMEM` (pinned memory over the
        /// locked-memory limit) is `FI_ENOMEM`, `ENOSPC` (the IOMMU takes no more mappings)
        /// `FI_ENOSPC`; anything else `FI_EIO`.
        errno: Option<i32>,
    },
    /// A DMA unmap failed.
    #[error("DMA unmap at IOVA {iova:#x} failed: {reason}")]
    DmaUnmap {
        /// IOVA of the region.
        iova: u64,
        /// Why.
        reason: String,
    },
    /// MSI-X vectors could not be given eventfds, or taken back.
    #[error("MSI-X interrupts of {name}: {reason}")]
    Interrupts {
        /// Device name.
        name: String,
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
    /// The device belongs to the process this one was forked from ([`crate::fork`]): nothing
    /// was asked of it. As a [`crate::DriverError`] it is `DeviceGone` (`FI_ENODEV`).
    #[error("the device belongs to the process this one was forked from")]
    Gone,
}

/// The function a [`Device`] object drives, as this process can name it. Two objects with
/// equal ids drive one function, and [`crate::Nic::open`] runs a function once at a time:
/// opening it would reset it under the `Nic` that runs it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FunctionId {
    /// A PCI function, by its address.
    Pci(PciAddress),
    /// A function of a simulated fabric in this process: the fabric (the address of its
    /// shared state, stable while any handle on it lives) and the NIC's place in it.
    Sim {
        /// The fabric.
        fabric: usize,
        /// The NIC within it.
        nic: usize,
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
    /// The function this object drives ([`FunctionId`]); `None` when the backend cannot
    /// name it, and then only this very object is known to drive it. A vfio-user function
    /// needs none: its server serves one client at a time, so a second object cannot reach
    /// it while the first is connected.
    fn function_id(&self) -> Option<FunctionId> {
        None
    }
    /// MSI-X vectors the backend can deliver to eventfds ([`Device::set_msix_eventfds`]); 0
    /// when it delivers none, and the driver polls.
    fn msix_vectors(&self) -> u16 {
        0
    }
    /// Deliver MSI-X vector `i` to `eventfds[i]`, for every `i`, and enable MSI-X: one
    /// `VFIO_DEVICE_SET_IRQS` (`DATA_EVENTFD | ACTION_TRIGGER`) of the MSI-X index from
    /// vector 0. Each message adds 1 to its eventfd. At most [`Device::msix_vectors`].
    fn set_msix_eventfds(&self, eventfds: &[EventFd]) -> Result<(), DeviceError> {
        let _ = eventfds;
        Err(DeviceError::Interrupts {
            name: self.name(),
            reason: "the backend delivers no interrupts".into(),
        })
    }
    /// Stop delivering every vector and disable MSI-X (`SET_IRQS` with `DATA_NONE`, count
    /// 0); the backend drops its references to the eventfds.
    fn clear_msix(&self) -> Result<(), DeviceError> {
        Ok(())
    }
}
