//! The pieces of `uetctl` that tests use too: the demo job, the AV table dump, the counter
//! report, the simulator daemon and the telemetry client; and [`out`](mod@out), standard output that
//! ends quietly when its reader has gone.

pub mod out;

pub mod demo;
pub mod dump;
pub mod live;
pub mod regs;
pub mod serve;
pub mod stats;
