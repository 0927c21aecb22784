//! The in-process simulator backend: the NIC model runs in this process, driven synchronously
//! by register writes. Deterministic and fast; most tests run on it.

use crate::device::{Device, DeviceError, FunctionId};
use crate::dma::DmaRegion;
use uet_regs::Mmio;
use uet_sim::SimFunction;

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

    fn name(&self) -> String {
        format!("sim:{}", self.function.fabric_addr())
    }

    fn function_id(&self) -> Option<FunctionId> {
        let (fabric, nic) = self.function.function_key();
        Some(FunctionId::Sim { fabric, nic })
    }
}
