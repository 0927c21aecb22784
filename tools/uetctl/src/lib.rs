//! The pieces of `uetctl` that tests use too: the demo job, the AV table dump, the counter
//! report and the simulator daemon.

pub mod demo;
pub mod dump;
pub mod regs;
pub mod serve;
pub mod stats;
