//! DMA memory is placed only at IOVAs the device's IOMMU translates (`Device::iova_ranges`,
//! which the kernel VFIO backend takes from `VFIO_IOMMU_GET_INFO`): a NIC behind an IOMMU
//! with holes and a narrow aperture works with every region inside it, and one the driver
//! cannot place its memory behind is refused at open with the ranges named and nothing left
//! mapped.

use std::sync::{Arc, Mutex};
use uet_driver::backend::sim::SimDevice;
use uet_driver::dma::{DmaError, DmaRegion, IovaRange, HUGE_PAGE};
use uet_driver::{Device, DeviceError, DriverError, Nic};
use uet_sim::{Fabric, NicConfig};
use uet_tests::{nic_addr, Node};

const G: u64 = 1 << 30;
const HP: u64 = HUGE_PAGE as u64;

/// A simulated NIC behind an IOMMU translating only `ranges`; it refuses a mapping outside
/// them (as `VFIO_IOMMU_MAP_DMA` does, with `EINVAL`) and records every mapping it holds.
struct BehindIommu {
    inner: SimDevice,
    ranges: Vec<IovaRange>,
    mapped: Mutex<Vec<(u64, usize)>>,
    maps: Mutex<usize>,
}

impl BehindIommu {
    fn new(inner: SimDevice, ranges: &[(u64, u64)]) -> Arc<Self> {
        Arc::new(BehindIommu {
            inner,
            ranges: ranges
                .iter()
                .map(|&(start, last)| IovaRange { start, last })
                .collect(),
            mapped: Mutex::new(Vec::new()),
            maps: Mutex::new(0),
        })
    }

    fn translates(&self, iova: u64, len: usize) -> bool {
        let last = iova + len as u64 - 1;
        self.ranges
            .iter()
            .any(|r| iova >= r.start && last <= r.last)
    }

    /// Mappings held now.
    fn mapped(&self) -> Vec<(u64, usize)> {
        self.mapped.lock().unwrap().clone()
    }
}

impl Device for BehindIommu {
    fn bar0(&self) -> &dyn uet_regs::Mmio {
        self.inner.bar0()
    }
    fn dma_map(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        if !self.translates(region.iova(), region.len()) {
            return Err(DeviceError::DmaMap {
                iova: region.iova(),
                len: region.len(),
                reason: "outside the IOMMU's ranges (EINVAL)".into(),
                errno: Some(libc::EINVAL),
            });
        }
        self.inner.dma_map(region)?;
        self.mapped
            .lock()
            .unwrap()
            .push((region.iova(), region.len()));
        *self.maps.lock().unwrap() += 1;
        Ok(())
    }
    fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        self.inner.dma_unmap(region)?;
        self.mapped
            .lock()
            .unwrap()
            .retain(|&(iova, _)| iova != region.iova());
        Ok(())
    }
    fn name(&self) -> String {
        self.inner.name()
    }
    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.ranges.clone()
    }
}

/// Below 4 GiB (which the driver leaves alone), then 3 hugepages, a hole, and 1 GiB: the
/// admin rings and scratch fill the first range, everything after goes past the hole, and
/// messages flow both ways through an AV.
#[test]
fn a_nic_behind_an_iommu_with_holes_works_with_every_region_inside_its_ranges() {
    let fabric = Fabric::new();
    let fa = fabric.add_nic(NicConfig::new(nic_addr(0))).unwrap();
    let fb = fabric.add_nic(NicConfig::new(nic_addr(1))).unwrap();
    let device = BehindIommu::new(
        SimDevice::new(fb.clone()),
        &[
            (0, 0xfedf_ffff),
            (0xfef0_0000, 4 * G + 3 * HP - 1),
            (4 * G + 10 * HP, 5 * G - 1),
        ],
    );
    let mut a = Node::new(fa, 0x77, 4);
    let mut b = Node::on_device(device.clone(), fb, 0x77, 0x77, 4);
    assert_eq!(a.insert(&b.addr()), 0);
    assert_eq!(b.insert(&a.addr()), 0);
    for k in 0..4 {
        b.post_recvs(1);
        a.send(0, b"through the IOMMU", k);
        assert!(a.next_completion().is_some());
        assert!(b.next_completion().is_some());
        a.post_recvs(1);
        b.send(0, b"and back", k);
        assert!(b.next_completion().is_some());
        assert!(a.next_completion().is_some());
    }
    let mapped = device.mapped();
    assert!(mapped.len() > 3, "{mapped:x?}");
    assert!(
        mapped
            .iter()
            .all(|&(iova, len)| device.translates(iova, len)),
        "{mapped:x?}"
    );
    assert!(
        mapped.iter().all(|&(iova, _)| iova >= 4 * G),
        "nothing below 4 GiB"
    );
    assert!(
        mapped.iter().any(|&(iova, _)| iova >= 4 * G + 10 * HP),
        "past the hole: {mapped:x?}"
    );
    drop(b);
    assert_eq!(device.mapped(), [], "everything unmapped when the NIC goes");
}

/// An IOMMU translating nothing at or above 4 GiB: refused before any memory is mapped, the
/// ranges named. One whose aperture holds only part of what the NIC needs: the open fails
/// at the region that does not fit, and what was mapped before it is unmapped.
#[test]
fn a_nic_whose_iommu_cannot_hold_the_drivers_memory_is_refused_with_nothing_left_mapped() {
    let fabric = Fabric::new();
    let f = fabric.add_nic(NicConfig::new(nic_addr(0))).unwrap();

    let low = BehindIommu::new(SimDevice::new(f.clone()), &[(0, 4 * G - 1)]);
    let Err(e) = Nic::open(low.clone()) else {
        panic!("opened behind an IOMMU translating nothing above 4 GiB")
    };
    assert!(matches!(e, DriverError::Unsupported(_)), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("0x0-0xffffffff"), "{text}");
    assert_eq!(*low.maps.lock().unwrap(), 0);

    let narrow = BehindIommu::new(SimDevice::new(f.clone()), &[(4 * G, 4 * G + 2 * HP - 1)]);
    let Err(e) = Nic::open(narrow.clone()) else {
        panic!("opened behind an IOMMU with room for two regions")
    };
    assert!(
        matches!(e, DriverError::Dma(DmaError::IovaExhausted { .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains("0x100000000-0x1003fffff"), "{e}");
    assert!(*narrow.maps.lock().unwrap() >= 2, "the two that fit");
    assert_eq!(narrow.mapped(), [], "and unmapped again");

    // The same function opens with room, afterwards.
    let roomy = BehindIommu::new(SimDevice::new(f), &[(4 * G, 5 * G - 1)]);
    let Ok(nic) = Nic::open(roomy.clone()) else {
        panic!("cannot open with room")
    };
    assert!(roomy.mapped().len() >= 3);
    drop(nic);
    assert_eq!(roomy.mapped(), []);
}
