//! The in-process simulator backend: the NIC model runs in this process, driven synchronously
//! by register writes. Deterministic and fast; most tests run on it. Its MSI-X vectors reach
//! the driver's eventfds as a kernel's would: the model writes them when it raises a vector.

use crate::device::{Device, DeviceError, FunctionId};
use crate::dma::DmaRegion;
use std::os::fd::{AsRawFd, BorrowedFd};
use uet_regs::Mmio;
use uet_sim::SimFunction;
use vmm_sys_util::eventfd::EventFd;

/// A simulated NIC function in this process.
#[derive(Clone)]
pub struct SimDevice {
    function: SimFunction,
}

impl SimDevice {
    /// Wrap a function of a simulated fabric.
    pub fn new(function: SimFunction) -> Self {
        SimDevice { function }
    }

    /// The simulated function, for tools that inspect the model directly.
    pub fn function(&self) -> &SimFunction {
        &self.function
    }
}

impl Device for SimDevice {
    fn bar0(&self) -> &dyn Mmio {
        &self.function
    }

    fn dma_map(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        self.function
            .dma_map(region.iova(), region.len() as u64, region.fd(), 0)
            .map_err(|e| DeviceError::DmaMap {
                iova: region.iova(),
                len: region.len(),
                reason: e.to_string(),
                errno: None,
            })
    }

    fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        self.function
            .dma_unmap(region.iova(), region.len() as u64)
            .map_err(|e| DeviceError::DmaUnmap {
                iova: region.iova(),
                reason: e.to_string(),
            })
    }

    fn msix_vectors(&self) -> u16 {
        uet_regs::pci::MSIX_VECTORS
    }

    fn set_msix_eventfds(&self, eventfds: &[EventFd]) -> Result<(), DeviceError> {
        for (vector, eventfd) in (0u16..).zip(eventfds) {
            // SAFETY: the descriptor is the eventfd's own, open while `eventfds` is borrowed,
            // for the whole call; the function duplicates it and keeps only its duplicate.
            let fd = unsafe { BorrowedFd::borrow_raw(eventfd.as_raw_fd()) };
            if let Err(e) = self.function.set_msix_eventfd(vector, Some(fd)) {
                self.function.clear_msix();
                return Err(DeviceError::Interrupts {
                    name: self.name(),
                    reason: e.to_string(),
                });
            }
        }
        Ok(())
    }

    fn clear_msix(&self) -> Result<(), DeviceError> {
        self.function.clear_msix();
        Ok(())
    }

    fn name(&self) -> String {
        format!("sim:{}", self.function.fabric_addr())
    }

    fn function_id(&self) -> Option<FunctionId> {
        let (fabric, nic) = self.function.function_key();
        Some(FunctionId::Sim { fabric, nic })
    }
}

/// A NIC of `fabric` at fabric address `addr`, opened, for the driver's unit tests.
#[cfg(test)]
pub(crate) fn sim_nic(fabric: &uet_sim::Fabric, addr: &str) -> crate::Nic {
    sim_function_and_nic(fabric, addr).1
}

/// [`sim_nic`], with the simulated function behind it (to reset it, or stop it).
#[cfg(test)]
pub(crate) fn sim_function_and_nic(
    fabric: &uet_sim::Fabric,
    addr: &str,
) -> (uet_sim::SimFunction, crate::Nic) {
    let f = fabric
        .add_nic(uet_sim::NicConfig::new(addr.parse().expect("address")))
        .expect("NIC");
    let nic = crate::Nic::open(std::sync::Arc::new(SimDevice::new(f.clone()))).expect("open NIC");
    (f, nic)
}
