//! Device backends.

#[cfg(feature = "sim")]
pub mod sim;
pub mod sysfs;
pub mod vfio;
pub mod vfio_user;
