//! Device backends.

pub mod iommu_info;
#[cfg(feature = "sim")]
pub mod sim;
pub mod sysfs;
pub mod vfio;
pub mod vfio_user;
