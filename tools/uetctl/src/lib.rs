//! The pieces of `uetctl` that tests use too: the demo job, the AV table dump, the counter
//! report, the simulator daemon and the telemetry client.

pub mod demo;
pub mod dump;
pub mod live;
pub mod regs;
pub mod serve;
pub mod stats;
