//! # uet-driver — a kernel-bypass userspace driver for the uet-nic UET NIC
//!
//! The libfabric objects map one to one onto the driver's:
//!
//! | libfabric | driver | NIC |
//! |---|---|---|
//! | `fi_domain` | [`Nic`], and [`Domain`] for what the application asked of it (AV type, capabilities, context limits) | a PCI function, brought up by [`Nic::open`] |
//! | `fi_av` | [`Av`] (`uet-av`'s mirror over [`av::NicAv`]) | an AV table (AV_CREATE, AV_WRITE, …) |
//! | `fi_endpoint` + its CQ | [`Endpoint`] (`FI_EP_RDM`, `FI_EP_DGRAM`, `FI_EP_MSG`: [`EpType`]) | an endpoint with a PIDonFEP and resource indices |
//! | `fi_scalable_ep`, `fi_tx_context`, `fi_rx_context` | [`ScalableEndpoint`] | an endpoint and its contexts (CONTEXT_CREATE) |
//! | `fi_passive_ep`, `fi_connect`, `fi_accept`, `fi_reject`, `fi_shutdown` | [`PassiveEndpoint`], [`Endpoint::connect`], … ([`cm`]) | the control channel, resource index 0 |
//! | `fi_cq` (one per endpoint; formats, `fi_cq_readerr`) | [`Endpoint::poll`], [`Endpoint::cq_read`], [`Endpoint::cq_readerr`], [`cq`] | the endpoint's completion ring |
//! | `fi_cq_sread`, `fi_cq_signal`, `fi_trywait`, `FI_WAIT_FD` (`fi_control(FI_GETWAIT)`) | [`Endpoint::cq_sread`], [`Endpoint::cq_signal`], [`Endpoint::cq_trywait`], [`Endpoint::cq_wait_fd`] ([`interrupt`]) | an MSI-X vector per waiting endpoint, raised for its ring armed with `CQ_ARM` |
//! | `fi_eq`; `FI_WAIT_FD` (`fi_control(FI_GETWAIT)`, `fi_trywait`) | [`EventQueue`], [`EventQueue::wait_fd`], [`EventQueue::trywait`] ([`admin_interrupt`]) | an eventfd of the host, readable while an event waits; the admin ring's MSI-X vector, armed with `ADMIN_ARM` while an `FI_EVENT` insert is in flight |
//! | registered buffers | [`DmaPool`], [`DmaBuffer`] | memory mapped for DMA |
//! | `fi_mr` | [`MemoryRegion`] | a memory region bound to an RMA resource index (MR_REGISTER) |
//! | peer groups (`fi_group_addr`, domain `max_group_id`) | `AvAttr::max_group_id`, [`Endpoint::post_recv_group`], [`Endpoint::post_trecv_group`], [`CqEvent::group`] | AV_CREATE `max_group_id`, the group in SES requests, matching by group (`CAP_PEER_GROUPS`) |
//!
//! Backends implement [`Device`]; the in-process simulator backend is [`backend::sim`]
//! (feature `sim`, on by default).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use uet_driver::{backend::sim::SimDevice, EndpointAttr, Nic};
//! let fabric = uet_sim::Fabric::new();
//! let f = fabric.add_nic(uet_sim::NicConfig::new("10.0.0.1".parse()?))?;
//! let nic = Nic::open(Arc::new(SimDevice::new(f)))?;
//! let av = nic.open_av(Default::default())?;
//! let ep = nic.endpoint(EndpointAttr::default(), Some(&av))?;
//! println!("{}", ep.address());
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod admin;
pub mod admin_interrupt;
pub mod av;
pub mod backend;
pub mod cm;
pub mod cq;
pub mod device;
pub mod dma;
pub mod domain;
pub mod endpoint;
pub mod eq;
pub mod errno;
pub mod error;
pub mod fork;
pub mod interrupt;
pub mod mapped;
pub mod mr;
pub mod nic;
pub mod pool;
pub mod scalable;
pub mod stop_watch;
pub mod telemetry;

pub use av::{Av, SharedAv};
pub use cm::{ConnReq, PassiveEndpoint, CM_CONNECT_TIMEOUT};
pub use cq::{CqEntry, CqErrEntry, CqFormat};
pub use device::{Device, DeviceError};
pub use domain::Domain;
pub use endpoint::{
    CqError, CqEvent, CqOp, Endpoint, EndpointAttr, EndpointStats, EpType, MultiRecv, TaggedProbe,
};
pub use eq::{EqAttr, EqErrEntry, EqEvent, EqEventKind, EventQueue, WaitObj};
pub use error::DriverError;
pub use mapped::MappedRegion;
pub use mr::{MemoryRegion, MrAccess, MrMemory, MrRegError};
pub use nic::{Capabilities, Identity, Nic};
pub use pool::{DmaBuffer, DmaPool};
pub use scalable::ScalableEndpoint;
pub use telemetry::Telemetry;
pub use uet_av;
pub use uet_fwif;
pub use uet_regs;
