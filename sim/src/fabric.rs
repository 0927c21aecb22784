//! Fabric: an in-memory switch between the NICs of one simulation.
//!
//! Each NIC's fabric port hands its transmitted frames to the switch, which routes them by
//! destination IP address to the NIC that owns that fabric address. Delivery is lossless and in
//! order, but for the frames a test holds back or discards (below). A frame whose destination no NIC owns is returned to the sending NIC as undeliverable
//! (its send completes with `Unreachable`); an injected frame with no owner is dropped.
//!
//! ## Held frames
//!
//! A test can make the switch hold frames back (`Fabric::hold_frames`, with a filter that
//! picks them; it runs with the fabric held, so a call it makes into the fabric or one of its
//! functions panics instead of waiting for ever), as a congested or failed link delays or
//! loses them: a held frame is neither
//! captured nor delivered until it is released (`Fabric::release_held`: back on the wire in
//! the order held, behind what is on it) or discarded (`Fabric::discard_held`: lost). So the
//! states between the packets of one message, which lossless in-order delivery within one run
//! never shows, can be reached and stay put as long as a test needs: a message part-way
//! arrived, a request whose answer has not come.
//!
//! Execution is deterministic and single-threaded: [`FabricInner::run_until_idle`] polls every
//! NIC (admin queue, receive backlogs, TX rings), then delivers every frame in flight, and
//! repeats until a whole round moves nothing. Every round consumes driver-posted work
//! (commands, descriptors) or frames, and a frame produces at most one answer, so the loop ends.
//!
//! ## Capture
//!
//! With a capture on (`Fabric::capture_to_file`), the switch writes every frame it takes off
//! the wire — whoever sent it, whether a NIC will accept it or not, whether anyone owns its
//! destination — to a pcap file (see [`crate::pcap`] for the format and the simulated clock),
//! before delivering it. The file is flushed whenever the fabric goes idle, so it is complete
//! and readable between doorbells. A write error never stops or slows the fabric: it is
//! counted, the capture stops, and [`CaptureStatus`] reports it.

use crate::frame;
use crate::nic::Nic;
use crate::pcap::{PcapWriter, CAPTURE_TICK_US};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;

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
    /// The capture in progress.
    pub capture: Option<ActiveCapture>,
    /// What the current (or last) capture did.
    pub capture_status: CaptureStatus,
    /// Which frames the switch holds back, while a test wants some held.
    pub hold: Option<HoldFilter>,
    /// Frames held back, in the order they were taken off the wire.
    pub held: VecDeque<(Option<usize>, Vec<u8>)>,
}

/// Picks the frames the switch holds back ([`crate::Fabric::hold_frames`]): called with each
/// frame taken off the wire, `true` to hold it.
pub(crate) struct HoldFilter(pub Box<HoldFn>);

impl HoldFilter {
    /// Whether the filter holds `frame`, asked with [`in_hold_filter`] true on this thread.
    fn holds(&mut self, frame: &[u8]) -> bool {
        /// Clears the mark when the filter returns, or unwinds.
        struct Running;
        impl Drop for Running {
            fn drop(&mut self) {
                IN_HOLD_FILTER.with(|r| r.set(false));
            }
        }
        IN_HOLD_FILTER.with(|r| r.set(true));
        let _running = Running;
        (self.0)(frame)
    }
}

thread_local! {
    /// A hold filter is running on this thread, with the fabric held.
    static IN_HOLD_FILTER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a hold filter is running on this thread: a call into the fabric from it would wait
/// for ever for the fabric its caller holds.
pub(crate) fn in_hold_filter() -> bool {
    IN_HOLD_FILTER.with(std::cell::Cell::get)
}

/// The function of a [`HoldFilter`].
pub(crate) type HoldFn = dyn FnMut(&[u8]) -> bool + Send;

impl std::fmt::Debug for HoldFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HoldFilter")
    }
}

/// What a packet capture did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureStatus {
    /// Whether frames are being written.
    pub active: bool,
    /// The file being (or last) written; `None` for a capture to a writer.
    pub path: Option<PathBuf>,
    /// Frames written since the capture started.
    pub frames: u64,
    /// Write errors since the capture started (the first one stops it).
    pub write_errors: u64,
    /// The last write error.
    pub last_error: Option<String>,
}

/// A capture in progress.
pub(crate) struct ActiveCapture {
    pub writer: PcapWriter<Box<dyn Write + Send>>,
    /// The simulated clock, in microseconds since the capture started.
    pub clock_us: u64,
    /// Frames written since the last flush.
    pub dirty: bool,
}

impl std::fmt::Debug for ActiveCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveCapture")
            .field("clock_us", &self.clock_us)
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

impl FabricInner {
    /// Start capturing to `writer` (its header already written), ending any capture before.
    pub(crate) fn start_capture(
        &mut self,
        writer: PcapWriter<Box<dyn Write + Send>>,
        path: Option<PathBuf>,
    ) {
        self.stop_capture();
        self.capture = Some(ActiveCapture {
            writer,
            clock_us: 0,
            dirty: false,
        });
        self.capture_status = CaptureStatus {
            active: true,
            path,
            ..CaptureStatus::default()
        };
    }

    /// Flush and close the capture, if one is on.
    pub(crate) fn stop_capture(&mut self) {
        self.flush_capture();
        self.capture = None;
        self.capture_status.active = false;
    }

    fn capture_failed(&mut self, e: &std::io::Error) {
        self.capture = None;
        let s = &mut self.capture_status;
        s.active = false;
        s.write_errors += 1;
        s.last_error = Some(e.to_string());
        tracing::warn!(error = %e, path = ?s.path, "packet capture stopped: write failed");
    }

    fn capture_frame(&mut self, f: &[u8]) {
        let Some(c) = self.capture.as_mut() else {
            return;
        };
        match c.writer.write_frame(c.clock_us, f) {
            Ok(()) => {
                c.clock_us += CAPTURE_TICK_US;
                c.dirty = true;
                self.capture_status.frames += 1;
            }
            Err(e) => self.capture_failed(&e),
        }
    }

    fn flush_capture(&mut self) {
        let Some(c) = self.capture.as_mut().filter(|c| c.dirty) else {
            return;
        };
        match c.writer.flush() {
            Ok(()) => c.dirty = false,
            Err(e) => self.capture_failed(&e),
        }
    }

    /// Stop holding frames back and put those held back on the wire, behind what is on it;
    /// how many there were.
    pub(crate) fn release_held(&mut self) -> usize {
        self.hold = None;
        let n = self.held.len();
        self.wire.extend(self.held.drain(..));
        n
    }

    /// Process everything until nothing moves.
    pub(crate) fn run_until_idle(&mut self) {
        self.run_rounds();
        self.flush_capture();
    }

    fn run_rounds(&mut self) {
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
                if self.hold.as_mut().is_some_and(|h| h.holds(&f)) {
                    self.held.push_back((src, f));
                    continue;
                }
                self.capture_frame(&f);
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
