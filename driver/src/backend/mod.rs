//! Device backends.

#[cfg(feature = "sim")]
pub mod sim;
