//! Device backends.

#[cfg(feature = "sim")]
pub mod sim;
pub mod vfio_user;
