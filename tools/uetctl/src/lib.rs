//! The pieces of `uetctl` that tests use too: the demo job and the AV table dump.

pub mod demo;
pub mod dump;
