//! # uet-sim — a register-accurate model of the uet-nic UET NIC
//!
//! The model implements BAR0 exactly as `uet-regs` defines it and the in-memory contracts of
//! `uet-fwif` (admin queue, AV entries, descriptors, completions); it puts real UET packets
//! (PDS + SES over UDP 4793) on an in-memory fabric between NICs. It depends on nothing but those
//! two crates: a driver bug cannot hide behind shared code.
//!
//! ## Blocks
//!
//! | module | block |
//! |---|---|
//! | [`config`] | instance configuration and the capability values it implies |
//! | `regfile` | BAR0 storage: access kinds, reset values, reserved bits, bad accesses |
//! | `nic` | top level: function control, reset, register side effects, completion writer |
//! | `iommu` | DMA view of host memory (vm-memory over the driver's memfds) |
//! | `admin_queue` | admin SQ/CQ engine |
//! | `firmware` | admin command handlers |
//! | `av_table` | NIC AV tables and the FI_SOURCE reverse map |
//! | `table_memory` | the store behind an AV table's entries and its source CAM |
//! | `source_cam` | an AV table's source CAM: (fabric address, initiator) to index, for FI_SOURCE |
//! | `range_sources` | the FI_SOURCE index of an AV table's range entries |
//! | `av_window` | the AV doorbells: `AV_INVALIDATE_DOORBELL` and the AV write window |
//! | `auth_table` | the auth-key (JobID) table: slots, owners, grants |
//! | `endpoint_table` | endpoints, PIDonFEP and resource-index allocators, per-endpoint counters |
//! | `mr_table` | memory regions: keys, access, bounds |
//! | `tx_engine` | TX rings, AV translation, request generation (SEND, TAGGED_SEND, WRITE, READ), send completions |
//! | `rx_engine` | strict receive parsing, demultiplexing, delivery, responses |
//! | `tag_match` | tagged RX rings, posted tagged receives, the unexpected list |
//! | `multi_recv` | multi-receive buffers: placement, retirement, release |
//! | `peer_groups` | untagged receives of endpoints with peer groups: posted list, matching by group |
//! | `untagged_unexpected` | untagged messages that arrive before their receive: held on the unexpected list, taken in arrival order |
//! | `probe` | probes of the unexpected list: peek, claim, discard |
//! | `recv_cancel` | RECV_CANCEL: a posted receive withdrawn before a message takes it |
//! | `rma_engine` | target side of WRITE and READ |
//! | [`pds`], [`ses`] | UET headers |
//! | [`frame`] | Ethernet/IP/UDP framing |
//! | `fabric` | the in-memory switch and its packet capture |
//! | [`pcap`] | libpcap file writer and strict reader |
//! | [`counters`] | statistics |
//! | `pci_config` | PCI configuration space: identity, command register, BAR0 sizing, the PCI Express capability (Function Level Reset), the MSI-X capability |
//! | `msix` | the MSI-X table, pending bits and message delivery to the host's triggers |
//! | [`vfio_user`] | the function served to another process on a vfio-user socket |
//!
//! Each block's module documentation is its datasheet section.
//!
//! ## Use
//!
//! ```no_run
//! use uet_sim::{Fabric, NicConfig};
//! use uet_regs::{Mmio, ID};
//!
//! let fabric = Fabric::new();
//! let nic = fabric.add_nic(NicConfig::new("10.0.0.1".parse().unwrap())).unwrap();
//! assert_eq!(nic.read32(ID.offset()) & 0xFFFF, 0xFFFE);
//! ```
//!
//! A [`SimFunction`] is one PCI function: BAR0 through [`uet_regs::Mmio`], DMA through
//! [`SimFunction::dma_map`]. Execution is deterministic: a write to a doorbell
//! (`ADMIN_SQ_DOORBELL`, `TXQ_DOORBELL`, `RXQ_DOORBELL`, `TRXQ_DOORBELL`, `CQ_DOORBELL`,
//! `ADMIN_CQ_HEAD`) or to
//! `DEV_CTRL` runs the whole fabric until idle before it returns, so by the time a driver looks
//! at a completion ring everything its doorbell caused has happened. No threads are involved.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod admin_queue;
mod auth_table;
mod av_table;
mod av_window;
pub mod config;
pub mod counters;
mod endpoint_table;
mod fabric;
mod firmware;
pub mod frame;
mod iommu;
mod mr_table;
mod msix;
mod multi_recv;
mod nic;
pub mod pcap;
mod pci_config;
pub mod pds;
mod peer_groups;
mod probe;
mod range_sources;
mod recv_cancel;
mod regfile;
mod rma_engine;
mod rx_engine;
pub mod ses;
mod source_cam;
mod table_memory;
mod tag_match;
mod tx_engine;
mod untagged_unexpected;
pub mod vfio_user;

pub use config::{NicConfig, DEFAULT_DMA_MAPPINGS, OLDEST_INTERFACE_MINOR};
pub use counters::DebugCounters;
pub use fabric::CaptureStatus;
pub use iommu::{DmaAccess, DmaFault, IOMMU_PAGE};
pub use rx_engine::RX_BACKLOG_BYTES;

use fabric::FabricInner;
use nic::Nic;
use pcap::PcapWriter;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use uet_regs::{Reg, Width};

/// Errors of the simulator's host-side API (DMA mapping, fabric setup).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Another NIC on the fabric already has this fabric address.
    #[error("fabric address {0} is already taken")]
    DuplicateAddress(IpAddr),
    /// The configuration describes impossible hardware.
    #[error("invalid NIC configuration: {0}")]
    InvalidConfig(&'static str),
    /// A DMA map or unmap request broke a rule.
    #[error("invalid DMA mapping: {0}")]
    InvalidMapping(&'static str),
    /// The range overlaps an existing mapping.
    #[error("DMA range {iova:#x}+{len:#x} overlaps an existing mapping")]
    Overlap {
        /// IOVA of the request.
        iova: u64,
        /// Length of the request.
        len: u64,
    },
    /// The IOMMU holds as many mappings as it may ([`NicConfig::dma_mappings`]).
    #[error("DMA map refused: the IOMMU holds its most mappings, {limit}")]
    TooManyMappings {
        /// The most mappings held at once.
        limit: usize,
    },
    /// The mapping would take the IOMMU past the bytes it maps ([`NicConfig::dma_bytes`]).
    #[error(
        "DMA map refused: the IOMMU maps at most {limit} bytes of DMA memory, {mapped} mapped"
    )]
    TooMuchMemory {
        /// The most bytes mapped at once.
        limit: u64,
        /// The bytes mapped before the refused map.
        mapped: u64,
    },
    /// Nothing is mapped in the range.
    #[error("nothing mapped at {iova:#x}+{len:#x}")]
    NotMapped {
        /// IOVA of the request.
        iova: u64,
        /// Length of the request.
        len: u64,
    },
    /// Mapping the memory failed.
    #[error("mapping DMA memory failed: {0}")]
    Map(String),
    /// A packet capture could not be started.
    #[error("cannot write packet capture to {target}: {source}")]
    Capture {
        /// The file (or "writer").
        target: String,
        /// Why.
        source: std::io::Error,
    },
    /// A vfio-user socket could not be served.
    #[error("vfio-user server at {path}: {reason}")]
    VfioUser {
        /// The socket.
        path: String,
        /// Why.
        reason: String,
    },
    /// An operating-system call failed (duplicating an eventfd, for one), or an MSI-X
    /// request named a vector outside the table.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// An in-memory fabric and the NICs attached to it. Cloning shares the fabric.
#[derive(Clone, Debug, Default)]
pub struct Fabric {
    inner: Arc<Mutex<FabricInner>>,
}

impl Fabric {
    /// An empty fabric.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, FabricInner> {
        assert!(
            !fabric::in_hold_filter(),
            "a hold filter called the fabric or one of its functions: it runs with the fabric \
             held, and decides from the frame and its own state alone"
        );
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Attach a NIC; its fabric address must be unique on the fabric.
    pub fn add_nic(&self, cfg: NicConfig) -> Result<SimFunction, SimError> {
        cfg.validate().map_err(SimError::InvalidConfig)?;
        let mut f = self.lock();
        if f.by_addr.contains_key(&cfg.fabric_addr) {
            return Err(SimError::DuplicateAddress(cfg.fabric_addr));
        }
        let id = f.nics.len();
        f.by_addr.insert(cfg.fabric_addr, id);
        f.nics.push(Nic::new(cfg));
        Ok(SimFunction {
            fabric: self.clone(),
            nic: id,
        })
    }

    /// Process all pending work on all NICs until nothing moves.
    pub fn run_until_idle(&self) {
        self.lock().run_until_idle();
    }

    /// Deliver raw bytes as if received from the wire (routed by destination IP), then run
    /// until idle. A frame whose destination no NIC owns is dropped.
    pub fn inject_frame(&self, frame: &[u8]) {
        let mut f = self.lock();
        f.wire.push_back((None, frame.to_vec()));
        f.run_until_idle();
    }

    /// Injected frames that no NIC owned.
    pub fn dropped_frames(&self) -> u64 {
        self.lock().dropped
    }

    /// From now on hold back every frame `filter` picks (called with each frame the switch
    /// takes off the wire, in order; `true` holds it), as a congested or failed link would:
    /// it is neither captured nor delivered until [`Fabric::release_held`] or
    /// [`Fabric::discard_held`]. A filter set before replaces the last one; frames it held
    /// stay held. So a test reaches, and keeps, the states between the packets of one
    /// message that lossless in-order delivery never leaves standing: a message part-way
    /// arrived, a request whose answer has not come. The filter runs with the fabric held: it
    /// decides from the frame and its own state, and a call it makes into this fabric or one
    /// of its functions panics (it would otherwise wait for ever).
    pub fn hold_frames(&self, filter: impl FnMut(&[u8]) -> bool + Send + 'static) {
        self.lock().hold = Some(fabric::HoldFilter(Box::new(filter)));
    }

    /// Frames held back now.
    pub fn held_frames(&self) -> usize {
        self.lock().held.len()
    }

    /// Stop holding frames back, deliver those held (in the order they were held, behind
    /// whatever else is on the wire), and run until idle; how many were held.
    pub fn release_held(&self) -> usize {
        let mut f = self.lock();
        let n = f.release_held();
        f.run_until_idle();
        n
    }

    /// Stop holding frames back and lose those held, as a failed link loses them; how many
    /// there were.
    pub fn discard_held(&self) -> usize {
        let mut f = self.lock();
        f.hold = None;
        let n = f.held.len();
        f.held.clear();
        n
    }

    /// Write every frame that crosses the fabric from now on to a new libpcap file at `path`
    /// (created or truncated; see [`pcap`] for the format and the simulated clock). A capture
    /// already on is flushed and closed first. The file is complete whenever the fabric is
    /// idle; [`Fabric::stop_capture`] closes it.
    pub fn capture_to_file(&self, path: impl AsRef<Path>) -> Result<(), SimError> {
        let path = path.as_ref();
        let fail = |source| SimError::Capture {
            target: path.display().to_string(),
            source,
        };
        let file = std::fs::File::create(path).map_err(fail)?;
        let out: Box<dyn Write + Send> = Box::new(BufWriter::new(file));
        let mut writer = PcapWriter::new(out).map_err(fail)?;
        writer.flush().map_err(fail)?;
        self.lock().start_capture(writer, Some(PathBuf::from(path)));
        Ok(())
    }

    /// As [`Fabric::capture_to_file`], to any writer (a pipe, a socket, memory).
    pub fn capture_to_writer(&self, out: impl Write + Send + 'static) -> Result<(), SimError> {
        let fail = |source| SimError::Capture {
            target: "writer".to_string(),
            source,
        };
        let out: Box<dyn Write + Send> = Box::new(out);
        let mut writer = PcapWriter::new(out).map_err(fail)?;
        writer.flush().map_err(fail)?;
        self.lock().start_capture(writer, None);
        Ok(())
    }

    /// Flush and close the capture; nothing happens when none is on. A write error while
    /// flushing is reported by [`Fabric::capture_status`].
    pub fn stop_capture(&self) {
        self.lock().stop_capture();
    }

    /// Whether a capture is on, how many frames it wrote, and whether writing failed. A write
    /// error stops the capture (the fabric keeps running); the status stays until the next
    /// capture starts.
    pub fn capture_status(&self) -> CaptureStatus {
        self.lock().capture_status.clone()
    }
}

/// One simulated PCI function: BAR0 and its IOMMU. Cloning shares the function.
#[derive(Clone, Debug)]
pub struct SimFunction {
    fabric: Fabric,
    nic: usize,
}

impl SimFunction {
    fn with_nic<R>(&self, default: R, f: impl FnOnce(&mut Nic) -> R) -> R {
        let mut g = self.fabric.lock();
        match g.nics.get_mut(self.nic) {
            Some(n) => f(n),
            None => default,
        }
    }

    fn write(&self, offset: u32, width: Width, value: u64) {
        let mut g = self.fabric.lock();
        let kick = g
            .nics
            .get_mut(self.nic)
            .is_some_and(|n| n.bar_write(offset, width, value));
        if kick {
            g.run_until_idle();
        }
    }

    /// Map `len` bytes of the memory behind `fd`, from `fd_offset`, at `iova`, for the
    /// device to read and write. The descriptor is duplicated. Zero-length, unaligned (4 KiB)
    /// or overlapping ranges are refused.
    pub fn dma_map(
        &self,
        iova: u64,
        len: u64,
        fd: BorrowedFd<'_>,
        fd_offset: u64,
    ) -> Result<(), SimError> {
        self.dma_map_for(iova, len, fd, fd_offset, DmaAccess::READ_WRITE)
    }

    /// [`SimFunction::dma_map`] for `access` only: a DMA the mapping does not allow is a DMA
    /// fault. A mapping that allows neither reading nor writing is refused.
    pub fn dma_map_for(
        &self,
        iova: u64,
        len: u64,
        fd: BorrowedFd<'_>,
        fd_offset: u64,
        access: DmaAccess,
    ) -> Result<(), SimError> {
        self.with_nic(Err(SimError::InvalidMapping("no such function")), |n| {
            n.iommu.map(iova, len, fd, fd_offset, access)
        })
    }

    /// Unmap every mapping inside `[iova, iova + len)`.
    pub fn dma_unmap(&self, iova: u64, len: u64) -> Result<(), SimError> {
        self.with_nic(Err(SimError::InvalidMapping("no such function")), |n| {
            n.iommu.unmap(iova, len)
        })
    }

    /// Enable or disable bus mastering, as the command register of the function's
    /// configuration space does (the vfio-user server calls this when the client writes it):
    /// while disabled, every DMA the function attempts is a DMA fault. A function driven in
    /// process is a bus master from the start.
    pub fn set_bus_master(&self, on: bool) {
        self.with_nic((), |n| n.iommu.set_bus_master(on));
    }

    /// Withdraw every DMA mapping of the function, as the IOMMU does when the process that
    /// owned the function goes away.
    pub fn dma_unmap_all(&self) {
        self.with_nic((), |n| n.iommu.clear());
    }

    /// Function-level reset, as PCIe FLR or a VFIO device reset: the same as writing
    /// `FUNCTION_RESET` (every endpoint, table and queue forgotten, registers at their reset
    /// values). DMA mappings belong to the IOMMU and stay.
    pub fn function_level_reset(&self) {
        let mut g = self.fabric.lock();
        if let Some(n) = g.nics.get_mut(self.nic) {
            n.function_reset();
            g.run_until_idle();
        }
    }

    /// Which function of which fabric this is: equal for every clone of one function (and
    /// only for them) while any of them lives. A driver keys on it to run a function once.
    pub fn function_key(&self) -> (usize, usize) {
        (Arc::as_ptr(&self.fabric.inner) as usize, self.nic)
    }

    /// The NIC's fabric address.
    pub fn fabric_addr(&self) -> IpAddr {
        self.with_nic(IpAddr::from([0, 0, 0, 0]), |n| n.cfg.fabric_addr)
    }

    /// The NIC's configuration.
    pub fn config(&self) -> Option<NicConfig> {
        self.with_nic(None, |n| Some(n.cfg.clone()))
    }

    /// Read a counter register (same as `read64` of its offset).
    pub fn counter(&self, reg: Reg<u64>) -> u64 {
        uet_regs::Mmio::read64(self, reg.offset())
    }

    /// Count a BAR0 access the function cannot take that never reached the register
    /// decoder (a width other than 32 or 64 bits, or bytes past BAR0, from a vfio-user
    /// client): `BAD_REGISTER_ACCESSES`, as for any access with no register.
    pub(crate) fn bad_register_access(&self) {
        self.with_nic((), |n| n.counters.inc(uet_regs::BAD_REGISTER_ACCESSES));
    }

    /// Deliver MSI-X vectors `start..start + eventfds.len()` to `eventfds`, as one
    /// `VFIO_DEVICE_SET_IRQS` of `DATA_EVENTFD` does ([`SimFunction::set_msix_eventfd`] for
    /// each), all or none: a vector outside the table, or a descriptor that cannot be
    /// duplicated (none left), changes no vector. With no eventfd nothing changes, MSI-X
    /// Enable included.
    pub fn set_msix_eventfds(
        &self,
        start: u16,
        eventfds: &[BorrowedFd<'_>],
    ) -> Result<(), SimError> {
        self.with_nic(Err(SimError::InvalidConfig("no such function")), |n| {
            n.msix.set_triggers(start, eventfds)?;
            for v in 0..eventfds.len() {
                n.msix.set_masked(start + v as u16, false);
            }
            // No eventfd, no vector changed: MSI-X stays as it was (enabled or not).
            if !eventfds.is_empty() {
                n.msix
                    .set_control(n.msix.control() | uet_regs::pci::MSIX_CONTROL_ENABLE);
            }
            Ok(())
        })
    }

    /// Deliver MSI-X `vector` to `eventfd`, or stop delivering it (`None`), as
    /// `VFIO_DEVICE_SET_IRQS` does for one vector of a PCI function's MSI-X index: with an
    /// eventfd the vector is unmasked and MSI-X enabled; without, the vector is masked, and
    /// MSI-X is disabled once no vector has an eventfd. Each message adds 1 to the eventfd
    /// (the descriptor is duplicated; the function keeps its copy until the vector is
    /// cleared, [`SimFunction::clear_msix`], or the function goes). Refused for a vector
    /// outside the table (`uet_regs::pci::MSIX_VECTORS`), changing nothing.
    pub fn set_msix_eventfd(
        &self,
        vector: u16,
        eventfd: Option<BorrowedFd<'_>>,
    ) -> Result<(), SimError> {
        let installed = eventfd.is_some();
        self.with_nic(Err(SimError::InvalidConfig("no such function")), |n| {
            n.msix.set_trigger(vector, eventfd)?;
            n.msix.set_masked(vector, !installed);
            let control = match n.msix.has_triggers() {
                true => n.msix.control() | uet_regs::pci::MSIX_CONTROL_ENABLE,
                false => 0,
            };
            n.msix.set_control(control);
            Ok(())
        })
    }

    /// Stop delivering every MSI-X vector and disable MSI-X (VFIO's `SET_IRQS` with
    /// `DATA_NONE`, count 0), and reset the table: every vector masked, nothing pending.
    pub fn clear_msix(&self) {
        self.with_nic((), |n| {
            n.msix.clear_triggers();
            n.msix.reset();
        });
    }

    /// MSI-X Message Control's Enable and Function Mask bits, as a host writes them in
    /// configuration space (the other bits are ignored). Clearing a mask sends what it held.
    pub fn set_msix_control(&self, control: u16) {
        self.with_nic((), |n| n.msix.set_control(control));
    }

    /// Raise MSI-X `vector` as the function would (VFIO's `SET_IRQS` with `DATA_NONE` and a
    /// count: a test of the wiring): sent, held pending, or dropped as the capability says.
    pub fn raise_msix(&self, vector: u16) {
        self.with_nic((), |n| n.msix.raise(vector));
    }

    /// MSI-X Message Control's Enable and Function Mask bits as the function holds them.
    pub fn msix_control(&self) -> u16 {
        self.with_nic(0, |n| n.msix.control())
    }

    /// The model-internal counters that have no register.
    pub fn debug_counters(&self) -> DebugCounters {
        self.with_nic(DebugCounters::default(), |n| n.debug_counters())
    }

    /// The fabric this function is attached to.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }
}

impl uet_regs::Mmio for SimFunction {
    fn read32(&self, offset: u32) -> u32 {
        self.with_nic(u64::from(u32::MAX), |n| n.bar_read(offset, Width::W32)) as u32
    }

    fn write32(&self, offset: u32, value: u32) {
        self.write(offset, Width::W32, u64::from(value));
    }

    fn read64(&self, offset: u32) -> u64 {
        self.with_nic(u64::MAX, |n| n.bar_read(offset, Width::W64))
    }

    fn write64(&self, offset: u32, value: u64) {
        self.write(offset, Width::W64, value);
    }

    /// One lock for the whole burst; the words are written in order, each as `write64` would
    /// (a burst into the AV write window is one transaction: `Nic::bar_write_burst`).
    fn write64_burst(&self, offset: u32, words: &[u64]) {
        let mut g = self.fabric.lock();
        let kick = g
            .nics
            .get_mut(self.nic)
            .is_some_and(|n| n.bar_write_burst(offset, words));
        if kick {
            g.run_until_idle();
        }
    }
}
