//! The pieces of `uetctl` that tests use too: the demo job, the AV table dump and the
//! counter report.

pub mod demo;
pub mod dump;
pub mod regs;
pub mod stats;
