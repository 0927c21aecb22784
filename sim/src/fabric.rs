//! Fabric: an in-memory switch between the NICs of one simulation.
//!
//! Each NIC's fabric port hands its transmitted frames to the switch, which routes them by
//! destination IP address to the NIC that owns that fabric address. Delivery is lossless and in
//! order. A frame whose destination no NIC owns is returned to the sending NIC as undeliverable
//! (its send completes with `Unreachable`); an injected frame with no owner is dropped.
//!
//! Execution is deterministic and single-threaded: [`FabricInner::run_until_idle`] polls every
//! NIC (admin queue, receive backlogs, TX rings), then delivers every frame in flight, and
//! repeats until a whole round moves nothing. Every round consumes driver-posted work
//! (commands, descriptors) or frames, and a frame produces at most one answer, so the loop ends.

use crate::frame;
use crate::nic::Nic;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Upper bound on rounds of one run, as a guard against a modelling error.
const MAX_ROUNDS: u64 = 1 << 32;

/// The switch and the NICs attached to it.
#[derive(Debug, Default)]
pub(crate) struct FabricInner {
    pub nics: Vec<Nic>,
    pub by_addr: HashMap<IpAddr, usize>,
    /// Frames in flight: (sending NIC, or none for an injected frame; bytes).
    pub wire: VecDeque<(Option<usize>, Vec<u8>)>,
    /// Injected frames nobody owned.
    pub dropped: u64,
}

impl FabricInner {
    /// Process everything until nothing moves.
    pub(crate) fn run_until_idle(&mut self) {
        for _ in 0..MAX_ROUNDS {
            let mut progress = false;
            for nic in &mut self.nics {
                progress |= nic.poll();
            }
            for (i, nic) in self.nics.iter_mut().enumerate() {
                for f in nic.outbox.drain(..) {
                    self.wire.push_back((Some(i), f));
                }
            }
            while let Some((src, f)) = self.wire.pop_front() {
                progress = true;
                let dst = frame::peek_dst_ip(&f).and_then(|ip| self.by_addr.get(&ip).copied());
                match (dst.and_then(|d| self.nics.get_mut(d)), src) {
                    (Some(nic), _) => nic.receive(&f),
                    (None, Some(s)) => {
                        if let Some(nic) = self.nics.get_mut(s) {
                            nic.on_unreachable(&f);
                        }
                    }
                    (None, None) => self.dropped += 1,
                }
                for (i, nic) in self.nics.iter_mut().enumerate() {
                    for f in nic.outbox.drain(..) {
                        self.wire.push_back((Some(i), f));
                    }
                }
            }
            if !progress {
                return;
            }
        }
        tracing::error!("fabric did not become idle");
    }
}
