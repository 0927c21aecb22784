//! Bringing a NIC up, and the object every other one hangs off.
//!
//! [`Nic::open`] follows the register reference (`regs/REGISTERS.md`) step by step:
//!
//! 0. A device that a `Nic` of this process runs (the same device object, or another object
//!    driving the same function, [`crate::device::FunctionId`]), or whose memory mapped for a
//!    `Nic` (a pool, a region) outlives it, is refused with `FI_EBUSY`
//!    ([`DriverError::DeviceInUse`]) before anything reaches it: step 3 would reset the
//!    function under that `Nic`, and a new one numbers its IOVAs as the old one did. Another
//!    domain on the NIC is a [`crate::Domain`] of the `Nic` (or a clone of it).
//! 1. `ID`: all ones means the function is gone; anything but `0xFFFE:0x0001` is not ours.
//! 2. `REVISION.interface_major` must equal the driver's [`uet_regs::INTERFACE_MAJOR`], and
//!    `interface_minor` be at least [`REQUIRED_INTERFACE_MINOR`]: the driver speaks the 1.7
//!    interface (64-byte completions with buffer offset, overflow and peer group, tagged RX
//!    ring, contexts, datagram and passive endpoints, the control channel, multi-receive
//!    buffers, peer groups), and uses the 1.8 AV write window, the 1.9 owner-checked
//!    AUTH_KEY_REMOVE and the 1.10 one-MTU flag of AV entries where the device has them.
//! 3. `FUNCTION_RESET.reset = 1`, then wait for `DEV_STATUS.ready`: start from a known state
//!    whatever a previous owner left behind.
//! 4. Read the capability registers `CAP_*`. `CAP_AV.entry_bytes` must be the size of the
//!    entries the driver writes ([`uet_fwif::NicAvEntry`], 64 bytes): a NIC whose table
//!    holds entries of another layout is refused before anything is written to it.
//! 5. Allocate the admin rings (64 entries, or the largest power of two within
//!    `CAP_QUEUES.max_admin_entries`; fewer than 2 allowed is refused) and scratch memory, map
//!    them for DMA at IOVAs inside the ranges the device's IOMMU translates
//!    ([`Device::iova_ranges`]; none the driver can use is refused), program `ADMIN_SQ_BASE`, `ADMIN_CQ_BASE`, `ADMIN_QUEUE_SIZE` and
//!    `ADMIN_CQ_HEAD`.
//! 6. `DEV_CTRL.enable = 1`, then wait for `DEV_STATUS.enabled`: a `DEV_STATUS.fatal`
//!    instead fails the open with the `FATAL_ERROR` causes, and neither within
//!    [`READY_TIMEOUT`] fails it as a timeout.
//! 7. IDENTIFY: the NIC's fabric address, MAC, serial number and model.
//!
//! If step 6 or 7 fails, the device is disabled and function-reset before the memory of
//! step 5 is unmapped, as on drop; a function removed meanwhile (its `ID` reads all ones) fails
//! the open as gone ([`DriverError::DeviceGone`]), not with the fatal error or timeout its
//! all-ones registers look like.
//!
//! Dropping the last reference resets the function (the device forgets every endpoint and
//! table and stops DMA) before the DMA memory is unmapped.

use crate::admin::{admin_geometry, AdminQueue, AdminResult, SCRATCH_BYTES};
use crate::device::{Device, FunctionId};
use crate::dma::{DmaRegion, IovaAllocator};
use crate::error::DriverError;
use crate::mapped::MappedRegion;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU16, AtomicU32};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use uet_fwif::admin::{BufferBody, Command, EndpointPeerBody, Opcode};
use uet_fwif::identify::IdentifyData;
use uet_regs::{
    DevCtrl, FunctionReset, Mmio, RegisterAccess, ADMIN_ARM, ADMIN_SQ_BASE, CAP_AUTH_KEY, CAP_AV,
    CAP_AV_ENTRIES, CAP_EP, CAP_MAX_MSG, CAP_PEER_GROUPS, CAP_PID_ON_FEP, CAP_PROFILES, CAP_QUEUES,
    CAP_RESOURCE_INDEX, CAP_TAGGED, CQ_ARM, DEV_CTRL, DEV_STATUS, FATAL_ERROR, FUNCTION_RESET,
    FW_VERSION, ID, REVISION,
};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromZeros;

/// The interface minor version that added `AV_INVALIDATE_DOORBELL` (1.4); on older devices the
/// driver invalidates AV entries with admin commands only.
pub const AV_DOORBELL_INTERFACE_MINOR: u8 = uet_regs::since::AV_INVALIDATE_DOORBELL;

/// The interface minor version that added the AV write window (`AV_WRITE_ENTRY_0..7`,
/// `AV_WRITE_DOORBELL`, 1.8); on older devices every AV entry is written with AV_WRITE.
pub const AV_WRITE_WINDOW_INTERFACE_MINOR: u8 = uet_regs::since::AV_WRITE_WINDOW;

/// The interface minor version from which the NIC holds an untagged message that arrives
/// before its receive on its unexpected list (1.17); on older devices it fails at the sender
/// (`FI_ENORX`).
pub const UNTAGGED_UNEXPECTED_INTERFACE_MINOR: u8 = uet_regs::since::UNTAGGED_UNEXPECTED;

/// The interface minor version that added RECV_CANCEL (1.14): a posted receive withdrawn
/// (`fi_cancel`); on older devices a posted receive cannot be cancelled (`FI_ENOSYS`).
pub const RECV_CANCEL_INTERFACE_MINOR: u8 = uet_regs::since::RECV_CANCEL;

/// The interface minor version that added AV_WRITE_PEERS (1.13): entries written from the
/// peers' addresses, which the NIC converts; on older devices they are written with AV_WRITE.
pub const AV_WRITE_PEERS_INTERFACE_MINOR: u8 = uet_regs::since::AV_WRITE_PEERS;

/// The interface minor version whose AUTH_KEY_REMOVE can check the slot's owner and JobID
/// (`AUTH_KEY_REMOVE_CHECK_OWNER`, 1.9); on older devices a key is removed by slot number
/// alone, and an AUTH_KEY_ADD that completes after the driver gave up on it is not undone
/// (its slot goes with its AV).
pub const AUTH_KEY_OWNER_CHECK_INTERFACE_MINOR: u8 = uet_regs::since::AUTH_KEY_REMOVE_CHECK_OWNER;

/// The first interface minor version whose AV entries carry `entry_flags::MAX_MSG_MTU` (1.10):
/// on older devices the driver writes entries without it ([`uet_av::AvLimits::entry_flags`]),
/// and a long message to a one-MTU peer is refused by the peer instead.
pub const MAX_MSG_MTU_ENTRY_INTERFACE_MINOR: u8 = uet_regs::since::AV_ENTRY_MAX_MSG_MTU;

/// The first interface minor version whose RECV_CANCEL withdraws a multi-receive buffer
/// (1.19); on older devices one stays posted until messages fill it.
pub const MULTI_RECV_CANCEL_INTERFACE_MINOR: u8 = uet_regs::since::MULTI_RECV_CANCEL;

/// The first interface minor version whose connected endpoints take data from their peer
/// only (`EP_FLAG_CONNECTED`, ENDPOINT_PEER, 1.20); on older devices a connected `FI_EP_MSG`
/// endpoint takes data from any sender of its job that names its address.
pub const CONNECTED_PEER_INTERFACE_MINOR: u8 = uet_regs::since::CONNECTED_PEER;

/// The oldest interface minor version the driver drives (see [`uet_regs::INTERFACE_MINOR`]).
pub const REQUIRED_INTERFACE_MINOR: u8 = uet_regs::since::PEER_GROUPS;

/// How long the driver waits for `DEV_STATUS.ready` after a reset, and for
/// `DEV_STATUS.enabled` after setting `DEV_CTRL.enable`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// The limits a NIC advertises in its capability registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// AV tables (`CAP_AV.max_tables`).
    pub av_tables: u16,
    /// Bytes per NIC AV entry.
    pub av_entry_bytes: u8,
    /// Largest rx_ctx_bits an AV decodes.
    pub max_rx_ctx_bits: u8,
    /// Entries per AV table (`CAP_AV_ENTRIES`).
    pub av_entries: u32,
    /// Endpoints.
    pub endpoints: u16,
    /// TX contexts per endpoint.
    pub max_tx_ctx: u8,
    /// RX contexts per endpoint.
    pub max_rx_ctx: u8,
    /// First PIDonFEP assigned.
    pub pid_first: u16,
    /// PIDonFEP values from `pid_first`.
    pub pid_count: u16,
    /// Resource indices per endpoint.
    pub ri_per_endpoint: u16,
    /// Size of the resource-index space.
    pub ri_space: u16,
    /// AI Base profile.
    pub ai_base: bool,
    /// AI Full profile.
    pub ai_full: bool,
    /// HPC profile.
    pub hpc: bool,
    /// Payload bytes per packet: the NIC segments longer messages at this size.
    pub mtu: u16,
    /// Largest message in bytes (`CAP_MAX_MSG`). Never below `mtu`.
    pub max_msg_size: u32,
    /// Tagged messages the NIC holds per endpoint before a matching receive is posted
    /// (`CAP_TAGGED.unexpected_entries`).
    pub unexpected_entries: u16,
    /// Unexpected payload the NIC holds per endpoint, KiB (`CAP_TAGGED.unexpected_kib`).
    pub unexpected_kib: u16,
    /// Largest `inject` payload (`fi_info.tx_attr.inject_size`):
    /// [`uet_fwif::datapath::MAX_INJECT_BYTES`].
    pub inject_size: usize,
    /// Largest admin ring.
    pub max_admin_entries: u16,
    /// Largest datapath ring.
    pub max_queue_entries: u16,
    /// Slots of the auth-key table (`CAP_AUTH_KEY.slots`, at most `MAX_AUTH_KEY_SLOTS`).
    pub auth_key_slots: u16,
    /// Largest peer group id an AV may allow (`CAP_PEER_GROUPS.max_group_id`, the libfabric
    /// domain attribute `max_group_id`); 0: no peer groups.
    pub max_group_id: u32,
}

impl Capabilities {
    fn read(bar: &dyn Mmio) -> Self {
        let av = bar.read(CAP_AV);
        let ep = bar.read(CAP_EP);
        let pid = bar.read(CAP_PID_ON_FEP);
        let ri = bar.read(CAP_RESOURCE_INDEX);
        let prof = bar.read(CAP_PROFILES);
        let q = bar.read(CAP_QUEUES);
        let mtu = prof.mtu();
        let max_msg_size = bar.read(CAP_MAX_MSG).max(u32::from(mtu));
        let tagged = bar.read(CAP_TAGGED);
        Capabilities {
            av_tables: av.max_tables(),
            av_entry_bytes: av.entry_bytes(),
            max_rx_ctx_bits: av.max_rx_ctx_bits(),
            av_entries: bar.read(CAP_AV_ENTRIES),
            endpoints: ep.max_endpoints(),
            max_tx_ctx: ep.max_tx_ctx(),
            max_rx_ctx: ep.max_rx_ctx(),
            pid_first: pid.first(),
            pid_count: pid.count(),
            ri_per_endpoint: ri.max_per_endpoint(),
            ri_space: ri.space(),
            ai_base: prof.ai_base(),
            ai_full: prof.ai_full(),
            hpc: prof.hpc(),
            mtu,
            max_msg_size,
            unexpected_entries: tagged.unexpected_entries(),
            unexpected_kib: tagged.unexpected_kib(),
            inject_size: uet_fwif::datapath::MAX_INJECT_BYTES,
            max_admin_entries: q.max_admin_entries(),
            max_queue_entries: q.max_queue_entries(),
            // Every interface the driver accepts (REQUIRED_INTERFACE_MINOR) has the register.
            auth_key_slots: bar
                .read(CAP_AUTH_KEY)
                .slots()
                .min(uet_fwif::auth_key::MAX_AUTH_KEY_SLOTS),
            max_group_id: bar.read(CAP_PEER_GROUPS),
        }
    }

    /// The Fabric Endpoint Capabilities byte of an endpoint address on this NIC.
    pub fn address_caps(&self) -> u8 {
        use uet_fwif::address::caps;
        let mut c = 0;
        if self.ai_base {
            c |= caps::AI_BASE;
        }
        if self.ai_full {
            c |= caps::AI_FULL;
        }
        if self.hpc {
            c |= caps::HPC;
        }
        c
    }
}

/// What IDENTIFY and the identity registers say about the NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// PCI vendor ID.
    pub vendor_id: u16,
    /// PCI device ID.
    pub device_id: u16,
    /// Silicon revision.
    pub revision: u8,
    /// Host interface minor version (`REVISION.interface_minor`): what the device supports
    /// beyond the driver's minimum.
    pub interface_minor: u8,
    /// Firmware version.
    pub fw_version: u32,
    /// The NIC's Fabric Address.
    pub fabric_addr: IpAddr,
    /// Station MAC.
    pub mac: [u8; 6],
    /// Serial number.
    pub serial: String,
    /// Model name.
    pub model: String,
}

/// An AV table of this process on the NIC, as the telemetry socket lists it.
#[derive(Clone, Debug)]
pub(crate) struct AvTableRecord {
    /// The NIC's handle (AV_CREATE's result).
    pub(crate) handle: u32,
    /// Entries.
    pub(crate) capacity: u32,
    /// AV_CREATE `max_group_id`.
    pub(crate) max_group_id: u32,
    /// The named AV the table holds this process's entries of; `None` for an unnamed AV.
    pub(crate) named: Option<Arc<crate::av::NamedTable>>,
    /// Set by [`NicInner::register_av_table`], unique in the process: the NIC gives a
    /// destroyed table's handle to the next table made, so the handle alone does not say
    /// which table a dump continued page by page is reading.
    pub(crate) serial: u64,
    /// The changes made to the table ([`crate::av::TableChanges`]): a dump read page by page
    /// tells from them whether the table changed between its pages.
    pub(crate) changes: Arc<crate::av::TableChanges>,
    /// Whether the table still exists, never upgraded: a strong reference would count as an
    /// endpoint using the AV and make its `fi_close` `FI_EBUSY`.
    table: std::sync::Weak<crate::av::AvTableHandle>,
}

/// An endpoint or context of this process on the NIC, as the telemetry socket lists it.
#[derive(Clone, Debug)]
pub(crate) struct EndpointRecord {
    /// The NIC's handle (ENDPOINT_CREATE's or CONTEXT_CREATE's result).
    pub(crate) handle: u16,
    /// Its UET address.
    pub(crate) address: uet_fwif::UetAddress,
    /// Its JobID.
    pub(crate) job_id: u32,
    /// Its `fi_ep_type`.
    pub(crate) ep_type: crate::endpoint::EpType,
    /// `CTX_ROLE_*` bits.
    pub(crate) roles: u8,
    /// The NIC handle of the AV table it translates through.
    pub(crate) av_table: Option<u32>,
    /// Set by [`NicInner::register_endpoint`], unique in the process: a handle is reused once
    /// its endpoint is destroyed, so the handle alone does not say which endpoint a record
    /// names.
    pub(crate) serial: u64,
    /// The MSI-X vector its completion ring raises, once its first `cq_sread`, `cq_trywait`
    /// or `cq_wait_fd` took one ([`crate::interrupt`]).
    pub(crate) msix_vector: Option<u16>,
}

impl AvTableRecord {
    /// Whether the AV or an endpoint still holds the table (AV_DESTROY has not run).
    pub(crate) fn exists(&self) -> bool {
        self.table.strong_count() > 0
    }
}

pub(crate) struct NicInner {
    pub(crate) device: Arc<dyn Device>,
    pub(crate) iova: IovaAllocator,
    pub(crate) caps: Capabilities,
    pub(crate) identity: Identity,
    /// Endpoints created on this NIC by this process, for default initiator IDs.
    pub(crate) endpoint_seq: AtomicU16,
    /// Per auth-key slot: endpoints of this process granted it (ENDPOINT_AUTH_KEYS), so an
    /// AV can refuse to remove a key in use without asking the NIC.
    pub(crate) auth_grants: Box<[AtomicU32]>,
    admin: Mutex<AdminQueue>,
    /// [`AdminQueue::abandoned_counter`]: admin commands abandoned after a timeout that the
    /// device may still run.
    admin_abandoned: Arc<std::sync::atomic::AtomicUsize>,
    /// [`AdminQueue::reaped_counter`]: reaps that collected a completion.
    pub(crate) admin_reaped: Arc<std::sync::atomic::AtomicU64>,
    /// [`AdminQueue::sq_base`]: what `ADMIN_SQ_BASE` holds until the function is reset.
    admin_sq_base: u64,
    /// The AV write window: its staged entry belongs to the function, so one writer at a time
    /// stages, rings and reads `AV_WRITE_DROPS`, whose last value it keeps (`None` until the
    /// first window write reads it). `AV_INVALIDATE_DOORBELL` is rung under it too: the NIC
    /// holds a doorbell's low half for its high half, so two writers' halves must not meet.
    av_window: Mutex<Option<u64>>,
    /// The AV tables this process created on the NIC, for the telemetry socket.
    pub(crate) av_tables: Mutex<Vec<AvTableRecord>>,
    /// The endpoints and contexts this process holds on the NIC, for the telemetry socket:
    /// added when made, removed when dropped.
    pub(crate) endpoints: Mutex<Vec<EndpointRecord>>,
    /// The device is this Nic's: released once the device is reset and every mapping made
    /// for this Nic is gone (each [`MappedRegion`] it made holds the claim: a pool or region
    /// may outlive the Nic, and a Nic opened after it numbers its IOVAs alike).
    pub(crate) claim: Arc<DeviceClaim>,
    /// DMA memory the device may still reach for a command in doubt (timed out, or undone
    /// late): rings, buffers, regions. It is handed back to no one while the function runs,
    /// and released after the function reset this Nic's drop makes, when the device can reach
    /// it no longer: its IOVAs then unmap, and the device claim they hold goes with them.
    quarantine: Mutex<Vec<Box<dyn Send>>>,
    /// The MSI-X vectors and their eventfds, set up when an endpoint first waits for a
    /// completion (`None` inside: the NIC or the backend has no interrupts).
    interrupts: std::sync::OnceLock<Option<Arc<crate::interrupt::Interrupts>>>,
    /// The admin ring's vector and the thread that sleeps on it, set up the first time
    /// someone waits for an admin completion without the queue and a vector can be had.
    admin_interrupt: Mutex<AdminInterruptSlot>,
    /// The vector the control channels share once their own vectors are all taken, while
    /// any uses it (see [`crate::cm`]); shared with it, which empties the slot once it
    /// has given the vector back.
    pub(crate) cm_shared_wakeup: crate::cm::SharedWakeupSlot,
    /// The eventfds of descriptors to wake when the NIC stops ([`crate::stop_watch`]).
    pub(crate) stop_watch: crate::stop_watch::StopWatch,
    /// The process that opened the NIC: in a child forked from it, the NIC's objects leave
    /// the device alone ([`crate::fork`]).
    pub(crate) made_in: crate::fork::MadeIn,
}

/// Where [`NicInner::admin_interrupt`] is.
#[derive(Default)]
enum AdminInterruptSlot {
    /// Not set up yet: no vector could be had so far, or no one waited.
    #[default]
    NotYet,
    /// Running until the NIC goes.
    Running(Arc<crate::admin_interrupt::AdminInterrupt>),
    /// Its start failed (logged then): the NIC's waiters poll, and no later wait tries again.
    Failed,
}

/// The devices a [`Nic`] of this process runs: by the address of the device object, and by
/// the function it drives where the backend names it ([`Device::function_id`]). A second
/// [`Nic::open`] of either is refused before it resets the function under the first.
static CLAIMED_DEVICES: Mutex<Vec<ClaimKey>> = Mutex::new(Vec::new());

/// What a [`DeviceClaim`] holds in [`CLAIMED_DEVICES`].
#[derive(Clone, PartialEq)]
struct ClaimKey {
    object: usize,
    function: Option<FunctionId>,
}

impl ClaimKey {
    fn of(device: &Arc<dyn Device>) -> Self {
        ClaimKey {
            object: Arc::as_ptr(device).cast::<()>() as usize,
            function: device.function_id(),
        }
    }

    /// Whether `self` and `other` name one device: the same object, or the same function.
    fn overlaps(&self, other: &ClaimKey) -> bool {
        self.object == other.object || (self.function.is_some() && self.function == other.function)
    }
}

/// A device claimed by [`Nic::open`] until dropped. It holds the device, so no other object
/// takes its address (nor, for a simulated function, its fabric's) while the claim stands.
pub(crate) struct DeviceClaim {
    pub(crate) device: Arc<dyn Device>,
    key: ClaimKey,
    /// The process that claimed the device: a child forked from it drops its copy of the
    /// claim without waiting for the list a thread of the parent held at the fork
    /// ([`crate::fork`]).
    made_in: crate::fork::MadeIn,
}

impl DeviceClaim {
    /// Claim `backend` for `device`, the device the Nic drives it through (its
    /// [`crate::fork::Fenced`] wrapper), which the claim holds; `None` when a Nic of this
    /// process holds the backend object, or the function it drives.
    fn take(backend: &Arc<dyn Device>, device: &Arc<dyn Device>) -> Option<Self> {
        let key = ClaimKey::of(backend);
        // A panic elsewhere never leaves the list half-changed: a poisoned lock is usable.
        let mut claimed = CLAIMED_DEVICES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if claimed.iter().any(|k| k.overlaps(&key)) {
            return None;
        }
        claimed.push(key.clone());
        Some(DeviceClaim {
            device: device.clone(),
            key,
            made_in: crate::fork::MadeIn::here(),
        })
    }
}

impl Drop for DeviceClaim {
    fn drop(&mut self) {
        // `None` only in a forked child whose copy of the list a thread of the parent held.
        let Some(mut claimed) = self.made_in.lock(&CLAIMED_DEVICES) else {
            return;
        };
        if let Some(at) = claimed.iter().position(|k| *k == self.key) {
            claimed.swap_remove(at);
        }
    }
}

impl NicInner {
    /// The NIC's completion interrupts, set up on first use (see [`crate::interrupt`]):
    /// `None` for a NIC older than `CQ_ARM` or a backend without MSI-X vectors, and when
    /// setting them up failed (logged once).
    pub(crate) fn interrupts(&self) -> Option<&Arc<crate::interrupt::Interrupts>> {
        self.interrupts
            .get_or_init(|| {
                if !CQ_ARM.info.present_at(self.identity.interface_minor) {
                    return None;
                }
                crate::interrupt::Interrupts::open(&*self.device)
                    .inspect_err(
                        |e| tracing::warn!(error = %e, "no completion interrupts: endpoints poll"),
                    )
                    .ok()
                    .map(Arc::new)
            })
            .as_ref()
    }

    /// The admin completion interrupt (see [`crate::admin_interrupt`]), set up on first use:
    /// `None` for a NIC older than `ADMIN_ARM` or a backend without MSI-X vectors, and while
    /// the driver's share of the vectors (half, as for control channels) is all held but the
    /// one kept for the vector control channels share (then whoever waits for an admin
    /// completion polls, and the next wait tries again), and for good once its start failed
    /// (the system had no thread or no eventfd for it: logged once, as for
    /// [`NicInner::interrupts`], not at every wait of a reader that polls each millisecond).
    /// Nor is it set up while the NIC will answer nothing (stopped with a fatal error, or
    /// reset under the driver): it would raise nothing, and the function would be given MSI-X
    /// (which a reset took back) and a thread for nothing; whoever waits polls, and learns of
    /// the failure at its next poll. Once set up it holds its vector until the NIC goes.
    pub(crate) fn admin_interrupt(&self) -> Option<Arc<crate::admin_interrupt::AdminInterrupt>> {
        if !ADMIN_ARM.info.present_at(self.identity.interface_minor) {
            return None;
        }
        let mut slot = self
            .admin_interrupt
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*slot {
            AdminInterruptSlot::Running(running) => return Some(running.clone()),
            AdminInterruptSlot::Failed => return None,
            AdminInterruptSlot::NotYet => {}
        }
        if crate::admin_interrupt::answers_nothing(self.bar(), self.admin_sq_base) {
            return None;
        }
        // From the driver's own share, as a control channel's own vector: the application's
        // completion queues keep half, and the control channels the last of the share for the
        // vector they share, which would otherwise poll.
        let irq = self.interrupts()?;
        let vector = irq.take_leaving(crate::cm::left_to_applications(irq) + 1)?;
        match crate::admin_interrupt::AdminInterrupt::start(
            vector,
            self.device.clone(),
            self.admin_sq_base,
        ) {
            Ok(running) => {
                let running = Arc::new(running);
                *slot = AdminInterruptSlot::Running(running.clone());
                Some(running)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no admin interrupt: event queues poll");
                *slot = AdminInterruptSlot::Failed;
                None
            }
        }
    }

    /// Keep `memory` (DMA memory, or what holds it) until the function is reset: the device
    /// may still read or write it for a command in doubt. See `NicInner::quarantine`.
    pub(crate) fn quarantine(&self, memory: impl Send + 'static) {
        self.quarantine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Box::new(memory));
    }

    pub(crate) fn bar(&self) -> &dyn Mmio {
        self.device.bar0()
    }

    /// Whether this is a process forked from the one that opened the NIC, whose device it
    /// must leave alone ([`crate::fork`]).
    pub(crate) fn in_forked_child(&self) -> bool {
        self.made_in.in_forked_child()
    }

    /// Whether the NIC has stopped (`DEV_STATUS`: a fatal error, or no longer enabled):
    /// nothing it was given completes any more, until the function is reset.
    pub(crate) fn stopped(&self) -> bool {
        let status = self.bar().read(DEV_STATUS);
        status.fatal() || !status.enabled()
    }

    /// Write `eventfd` once when the NIC stops: see [`crate::stop_watch`].
    pub(crate) fn wake_when_stopped(&self, eventfd: &Arc<vmm_sys_util::eventfd::EventFd>) {
        self.stop_watch
            .add(eventfd, &self.device, self.admin_sq_base);
    }

    /// The NIC's counters (BAR0) its interface version has, by name ([`Nic::counters`]).
    pub(crate) fn counters(&self) -> Vec<(&'static str, u64)> {
        let minor = self.identity.interface_minor;
        uet_regs::COUNTERS
            .iter()
            .filter(|r| r.info.present_at(minor))
            .map(|r| (r.info.name, self.bar().read(*r)))
            .collect()
    }

    /// Record a table AV_CREATE made, for [`NicInner::av_tables`], under a serial no other
    /// table of the process is ever given; forget destroyed ones.
    pub(crate) fn register_av_table(&self, table: &Arc<crate::av::AvTableHandle>) {
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tables = self.av_tables.lock().unwrap_or_else(|p| p.into_inner());
        tables.retain(AvTableRecord::exists);
        tables.push(AvTableRecord {
            handle: table.handle(),
            capacity: table.capacity(),
            max_group_id: table.max_group_id(),
            named: table.named().cloned(),
            serial,
            changes: table.changes().clone(),
            table: Arc::downgrade(table),
        });
    }

    /// Record an endpoint or context, for [`NicInner::endpoints`].
    pub(crate) fn register_endpoint(&self, mut record: EndpointRecord) {
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        record.serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut eps = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        eps.push(record);
    }

    /// Note the MSI-X vector the live endpoint `handle` took.
    pub(crate) fn note_endpoint_vector(&self, handle: u16, vector: u16) {
        let mut eps = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = eps.iter_mut().find(|e| e.handle == handle) {
            e.msix_vector = Some(vector);
        }
    }

    /// Whether the endpoint `record` names is still open (its record is still listed).
    pub(crate) fn endpoint_open(&self, record: &EndpointRecord) -> bool {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|e| e.serial == record.serial)
    }

    /// Forget endpoint `handle` (dropped).
    pub(crate) fn forget_endpoint(&self, handle: u16) {
        let mut eps = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        eps.retain(|e| e.handle != handle);
    }

    /// The endpoints and contexts of this process on the NIC now, in creation order.
    pub(crate) fn endpoints(&self) -> Vec<EndpointRecord> {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// COUNTERS_READ of endpoint `handle`: its counter block as the NIC keeps it.
    pub(crate) fn endpoint_counters(
        &self,
        handle: u16,
    ) -> Result<uet_fwif::counters::EndpointCounters, DriverError> {
        use zerocopy::IntoBytes;
        let mut admin = self.admin()?;
        let mut body = BufferBody::new_zeroed();
        body.buf = U64::new(admin.scratch(self.bar(), Opcode::CountersRead)?.iova());
        body.len = U32::new(uet_fwif::counters::EndpointCounters::BYTES as u32);
        admin.execute(
            self.bar(),
            Command::CountersRead {
                endpoint: u32::from(handle),
                body,
            },
        )?;
        let mut block = uet_fwif::counters::EndpointCounters::new_zeroed();
        admin.scratch_result().read_bytes(0, block.as_mut_bytes())?;
        Ok(block)
    }

    /// RECV_CANCEL: withdraw the receive posted with descriptor context `context` on ring
    /// `ring` (`RECV_CANCEL_RING_*`) of endpoint or context `handle`.
    pub(crate) fn recv_cancel(
        &self,
        handle: u16,
        ring: u8,
        context: u64,
    ) -> Result<(), DriverError> {
        let mut body = uet_fwif::admin::RecvCancelBody::new_zeroed();
        body.context = U64::new(context);
        body.ring = ring;
        let endpoint = u32::from(handle);
        self.admin()?
            .execute(self.bar(), Command::RecvCancel { endpoint, body })?;
        Ok(())
    }

    /// ENDPOINT_PEER: connected endpoint `handle` takes data only from the sender at
    /// (fabric address, JobID, initiator) `peer`, or from nobody (`None`).
    pub(crate) fn endpoint_peer(
        &self,
        handle: u16,
        peer: Option<(std::net::IpAddr, u32, u32)>,
    ) -> Result<(), DriverError> {
        let body = match peer {
            Some((ip, job_id, initiator)) => EndpointPeerBody::peer(ip, job_id, initiator),
            None => EndpointPeerBody::none(),
        };
        let endpoint = u32::from(handle);
        self.admin()?
            .execute(self.bar(), Command::EndpointPeer { endpoint, body })?;
        Ok(())
    }

    /// The AV tables of this process that exist on the NIC now, in creation order.
    pub(crate) fn av_tables(&self) -> Vec<AvTableRecord> {
        let tables = self.av_tables.lock().unwrap_or_else(|p| p.into_inner());
        tables.iter().filter(|t| t.exists()).cloned().collect()
    }

    /// Lock the admin queue. A panic while holding it cannot leave the ring inconsistent in a
    /// way the next command would not detect (command ids), so a poisoned lock is taken over.
    /// [`DriverError::DeviceGone`] in a process forked from the one that opened the NIC
    /// ([`crate::fork`]): the ring is the parent's (its memory shared with it), and the lock
    /// may be held for good by a thread of the parent the child does not have.
    pub(crate) fn admin(&self) -> Result<MutexGuard<'_, AdminQueue>, DriverError> {
        if self.in_forked_child() {
            return Err(DriverError::DeviceGone);
        }
        Ok(self.admin.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// [`NicInner::admin`] without waiting: `None` while another thread holds the queue (a
    /// command of its own may hold it until the admin timeout).
    pub(crate) fn try_admin(&self) -> Result<Option<MutexGuard<'_, AdminQueue>>, DriverError> {
        if self.in_forked_child() {
            return Err(DriverError::DeviceGone);
        }
        Ok(match self.admin.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        })
    }

    /// Whether an admin command abandoned after a timeout may still run on the device: then
    /// no posted register write may stand in for an admin command (the AV doorbells), since
    /// it could land before the late command and be undone by it. One load.
    pub(crate) fn admin_unanswered(&self) -> bool {
        self.admin_abandoned
            .load(std::sync::atomic::Ordering::Acquire)
            != 0
    }

    /// Whether the NIC will answer nothing more: stopped with a fatal error, or its function
    /// reset under the driver (see [`crate::admin_interrupt::answers_nothing`]). One register
    /// read, two for a device not enabled.
    pub(crate) fn answers_nothing(&self) -> bool {
        crate::admin_interrupt::answers_nothing(self.bar(), self.admin_sq_base)
    }

    /// Whether the function was reset since this Nic programmed it: `ADMIN_SQ_BASE`, which
    /// a reset clears, no longer holds the admin ring (a read nothing answers, all ones, does
    /// not either). One register read.
    pub(crate) fn was_reset(&self) -> bool {
        self.bar().read(ADMIN_SQ_BASE) != self.admin_sq_base
    }

    /// Execute `cmd`, a destroy (AV_DESTROY, ENDPOINT_DESTROY, MR_DEREGISTER). A `Busy`
    /// refusal while undoes of late creations wait comes from an object a late creation made
    /// and bound to the one being destroyed (an endpoint on the AV, a context on the
    /// endpoint): the device runs commands, and the queue collects their completions, in
    /// order, so the late creation's completion, and its undo, came before this refusal. Then
    /// the destroy is submitted again after that undo. A destroy that found the admin ring
    /// full was not submitted; it goes ahead of the next command instead. `Ok(true)` says the
    /// destroy is deferred so (the device may use the object until then). Decided under the
    /// admin queue's lock, so no other command sends the undoes between.
    pub(crate) fn destroy(&self, cmd: Command) -> Result<bool, DriverError> {
        self.destroy_holding(cmd, None).map_err(|(e, _)| e)
    }

    /// [`NicInner::destroy`] of an object whose DMA memory the device may use until the
    /// destroy completes: the memory is freed once it has, at once or, for a destroy sent
    /// ahead of the next command, when its completion comes (kept until the function's reset
    /// if that completion is a failure). On error the memory comes back, for the caller to
    /// keep ([`NicInner::quarantine`]).
    pub(crate) fn destroy_freeing(
        &self,
        cmd: Command,
        memory: crate::admin::Held,
    ) -> Result<(), (DriverError, Option<crate::admin::Held>)> {
        self.destroy_holding(cmd, Some(memory)).map(|_| ())
    }

    /// [`NicInner::destroy`], `held` freed when the destroy completes (see
    /// [`NicInner::destroy_freeing`]).
    fn destroy_holding(
        &self,
        cmd: Command,
        held: Option<crate::admin::Held>,
    ) -> Result<bool, (DriverError, Option<crate::admin::Held>)> {
        let mut admin = match self.admin() {
            Ok(admin) => admin,
            Err(e) => return Err((e, held)),
        };
        match admin.execute(self.bar(), cmd) {
            Ok(_) => {
                drop(held);
                Ok(false)
            }
            Err(DriverError::AdminRingFull { .. }) => {
                tracing::info!(
                    ?cmd,
                    "destroy found the admin ring full; sent ahead of the next command"
                );
                admin.destroy_after_undoes(cmd, held);
                Ok(true)
            }
            Err(DriverError::AdminStatus {
                status: uet_fwif::admin::Status::Busy,
                ..
            }) if admin.has_undoes() => {
                tracing::info!(
                    ?cmd,
                    "destroy refused Busy behind a late creation; retried after it"
                );
                admin.destroy_after_undoes(cmd, held);
                Ok(true)
            }
            Err(e) => Err((e, held)),
        }
    }

    /// Lock the AV write window (nothing it guards can be left half-done by a panic: a
    /// half-staged entry is overwritten by the next writer before it rings, and the drop count
    /// is stored only after it was read). [`DriverError::DeviceGone`] in a process forked from
    /// the one that opened the NIC ([`crate::fork`]), as for [`NicInner::admin`]: the window is
    /// the parent's, and the lock may be held for good by a thread of the parent the child
    /// does not have.
    pub(crate) fn av_window(&self) -> Result<MutexGuard<'_, Option<u64>>, DriverError> {
        if self.in_forked_child() {
            return Err(DriverError::DeviceGone);
        }
        Ok(self.av_window.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) fn execute(&self, cmd: Command) -> Result<AdminResult, DriverError> {
        self.admin()?.execute(self.bar(), cmd)
    }

    /// Allocate DMA memory at a fresh IOVA and map it for the device.
    pub(crate) fn map_new(&self, len: usize) -> Result<MappedRegion, DriverError> {
        let region = DmaRegion::new_in(len, &self.iova)?;
        Ok(MappedRegion::map_claimed(&self.claim, region)?)
    }
}

/// The [`AdminSleep`](crate::admin::AdminSleep) of a NIC's admin queue: its admin completion
/// interrupt, set up at the first sleep as for a reader of an event queue
/// ([`NicInner::admin_interrupt`]). Weak, since the queue is the NIC's: a command waited on
/// while the NIC goes polls.
struct AdminSleeper(std::sync::Weak<NicInner>);

impl crate::admin::AdminSleep for AdminSleeper {
    fn wake_after(
        &self,
        bar: &dyn Mmio,
        reaped: &std::sync::atomic::AtomicU64,
        seen: u64,
        waker: &std::task::Waker,
        deadline: Instant,
    ) -> bool {
        let Some(interrupt) = self.0.upgrade().and_then(|nic| nic.admin_interrupt()) else {
            return false;
        };
        interrupt.wake_after(bar, reaped, seen, waker, deadline)
    }
}

impl Drop for NicInner {
    fn drop(&mut self) {
        if self.in_forked_child() {
            // The parent's NIC, which the parent closes.
            return;
        }
        // The stop watch's thread reads the device's status too.
        self.stop_watch.close();
        // The admin interrupt's thread reads the device's status: it stops (joined) before the
        // device is reset and its claim released, not after, when another open may hold it.
        let slot = self
            .admin_interrupt
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        drop(std::mem::replace(slot, AdminInterruptSlot::Failed));
        // Take the eventfds back from the device: it raises nothing once this Nic is gone.
        if let Some(Some(_)) = self.interrupts.get() {
            if let Err(e) = self.device.clear_msix() {
                tracing::warn!(error = %e, "MSI-X not disabled");
            }
        }
        // Stop the device before its memory is unmapped (the mappings drop after this, the
        // quarantined ones among them).
        let bar = self.device.bar0();
        bar.write(DEV_CTRL, DevCtrl::new());
        bar.write(FUNCTION_RESET, FunctionReset::new().with_reset(true));
    }
}

/// An opened NIC: its capabilities, its identity, and the admin queue every object uses.
#[derive(Clone)]
pub struct Nic {
    pub(crate) inner: Arc<NicInner>,
}

impl Nic {
    /// Bring the NIC up (see the module docs for the sequence).
    pub fn open(device: Arc<dyn Device>) -> Result<Nic, DriverError> {
        // The device is this process's: a child forked from it leaves it alone.
        let made_in = crate::fork::MadeIn::here();
        let backend = device;
        let device: Arc<dyn Device> = Arc::new(crate::fork::Fenced::new(backend.clone()));
        // 0. A device a Nic of this process runs is refused before anything reaches it: the
        // backend object the caller gave, which each open wraps anew.
        let claim = Arc::new(DeviceClaim::take(&backend, &device).ok_or_else(|| {
            DriverError::DeviceInUse {
                name: device.name(),
            }
        })?);
        drop(backend);
        let bar = device.bar0();
        // 1. Identity.
        let id = bar.read(ID);
        if id.into_bits() == u32::MAX {
            return Err(DriverError::DeviceGone);
        }
        if id.vendor_id() != uet_regs::PCI_VENDOR_ID || id.device_id() != uet_regs::PCI_DEVICE_ID {
            return Err(DriverError::NotOurDevice {
                vendor: id.vendor_id(),
                device: id.device_id(),
            });
        }
        // 2. Interface version.
        let rev = bar.read(REVISION);
        if rev.interface_major() != uet_regs::INTERFACE_MAJOR {
            return Err(DriverError::InterfaceVersion {
                device: rev.interface_major(),
                driver: uet_regs::INTERFACE_MAJOR,
            });
        }
        if rev.interface_minor() < REQUIRED_INTERFACE_MINOR {
            return Err(DriverError::InterfaceTooOld {
                device: rev.interface_minor(),
                required: REQUIRED_INTERFACE_MINOR,
            });
        }
        // 3. Function reset, wait for ready.
        bar.write(FUNCTION_RESET, FunctionReset::new().with_reset(true));
        let start = Instant::now();
        while !bar.read(DEV_STATUS).ready() {
            if start.elapsed() > READY_TIMEOUT {
                return Err(DriverError::NotReady {
                    waited: READY_TIMEOUT,
                });
            }
            std::thread::yield_now();
        }
        // 4. Capabilities.
        let caps = Capabilities::read(bar);
        tracing::debug!(?caps, "capabilities");
        let entry_bytes = core::mem::size_of::<uet_fwif::NicAvEntry>();
        if usize::from(caps.av_entry_bytes) != entry_bytes {
            // A function removed since step 1 reads all ones here too: say that, not a size.
            if bar.read(ID).into_bits() == u32::MAX {
                return Err(DriverError::DeviceGone);
            }
            return Err(DriverError::Unsupported(format!(
                "CAP_AV.entry_bytes is {}: this driver writes AV entries of {entry_bytes} bytes",
                caps.av_entry_bytes
            )));
        }
        // 5. Admin queue: rings no larger than CAP_QUEUES allows.
        let geometry = admin_geometry(caps.max_admin_entries).ok_or_else(|| {
            DriverError::Unsupported(format!(
                "CAP_QUEUES.max_admin_entries is {}: an admin ring needs at least 2 entries",
                caps.max_admin_entries
            ))
        })?;
        let ranges = device.iova_ranges();
        let iova = IovaAllocator::within(&ranges).ok_or_else(|| {
            DriverError::Unsupported(format!(
                "the IOMMU translates no IOVA the driver can use (a 2 MiB-aligned 2 MiB at or \
                 above {:#x}); it translates {}",
                IovaAllocator::BASE,
                ranges
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        tracing::debug!(ranges = ?iova.ranges(), "IOVA ranges");
        let (sq_len, cq_len) = AdminQueue::ring_bytes(geometry);
        let map = |len: usize| -> Result<MappedRegion, DriverError> {
            let region = DmaRegion::new_in(len, &iova)?;
            Ok(MappedRegion::map_claimed(&claim, region)?)
        };
        let mut admin = AdminQueue::new(geometry, map(sq_len)?, map(cq_len)?, map(SCRATCH_BYTES)?);
        admin.undo_auth_key_adds(rev.interface_minor() >= AUTH_KEY_OWNER_CHECK_INTERFACE_MINOR);
        admin.program(bar)?;
        // 6. Enable, and 7. IDENTIFY. Should either fail, the device is stopped and reset
        // before the rings and scratch memory it was given are unmapped (as on drop): a late
        // completion must not land in memory the driver no longer owns.
        let data = match Self::enable_and_identify(bar, &mut admin) {
            Ok(data) => data,
            Err(e) => {
                // A function removed since step 4 reads all ones: `DEV_STATUS.fatal` with
                // every `FATAL_ERROR` cause, and IDENTIFY given up on as on a stopped device.
                // Say that, not a refusal. Asked before the reset, which a device may answer
                // with all ones while it runs.
                let gone = bar.read(ID).into_bits() == u32::MAX;
                bar.write(DEV_CTRL, DevCtrl::new());
                bar.write(FUNCTION_RESET, FunctionReset::new().with_reset(true));
                return Err(if gone { DriverError::DeviceGone } else { e });
            }
        };
        let identity = Identity {
            vendor_id: id.vendor_id(),
            device_id: id.device_id(),
            revision: rev.revision(),
            interface_minor: rev.interface_minor(),
            fw_version: bar.read(FW_VERSION),
            fabric_addr: data.fabric_ip(),
            mac: data.mac,
            serial: data.serial_str(),
            model: data.model_str(),
        };
        tracing::info!(
            device = %device.name(),
            fabric_addr = %identity.fabric_addr,
            "NIC up"
        );
        let nic = Nic {
            inner: Arc::new_cyclic(|weak| {
                // Synchronous commands sleep on the admin interrupt once their spin is over.
                admin.set_sleeper(Arc::new(AdminSleeper(weak.clone())));
                NicInner {
                    device,
                    iova,
                    caps,
                    identity,
                    endpoint_seq: AtomicU16::new(1),
                    auth_grants: (0..caps.auth_key_slots)
                        .map(|_| AtomicU32::new(0))
                        .collect(),
                    admin_abandoned: admin.abandoned_counter(),
                    admin_reaped: admin.reaped_counter(),
                    admin_sq_base: admin.sq_base(),
                    admin: Mutex::new(admin),
                    av_window: Mutex::new(None),
                    av_tables: Mutex::new(Vec::new()),
                    endpoints: Mutex::new(Vec::new()),
                    claim,
                    quarantine: Mutex::new(Vec::new()),
                    interrupts: std::sync::OnceLock::new(),
                    admin_interrupt: Mutex::new(AdminInterruptSlot::NotYet),
                    cm_shared_wakeup: Arc::new(Mutex::new(std::sync::Weak::new())),
                    stop_watch: crate::stop_watch::StopWatch::default(),
                    made_in,
                }
            }),
        };
        crate::telemetry::nic_opened(&nic);
        Ok(nic)
    }

    /// Steps 6 and 7 of [`Nic::open`]: enable the device on the programmed admin queue, and
    /// read its identity with IDENTIFY.
    fn enable_and_identify(
        bar: &dyn Mmio,
        admin: &mut AdminQueue,
    ) -> Result<IdentifyData, DriverError> {
        // 6. Enable, and wait for the device to say it runs its queues (or why not).
        bar.write(DEV_CTRL, DevCtrl::new().with_enable(true));
        let start = Instant::now();
        loop {
            let status = bar.read(DEV_STATUS);
            if status.fatal() {
                return Err(DriverError::EnableFailed {
                    fatal_error: bar.read(FATAL_ERROR).into_bits(),
                });
            }
            if status.enabled() {
                break;
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(DriverError::NotEnabled {
                    waited: READY_TIMEOUT,
                });
            }
            std::thread::yield_now();
        }
        // 7. IDENTIFY.
        let len = core::mem::size_of::<IdentifyData>();
        let scratch = admin.scratch(bar, Opcode::Identify)?;
        scratch.zero(0, len)?;
        let mut body = BufferBody::new_zeroed();
        body.buf = U64::new(scratch.iova());
        body.len = U32::new(len as u32);
        admin.execute(bar, Command::Identify(body))?;
        Ok(admin.scratch_result().read_obj(0)?)
    }

    /// The capability registers.
    pub fn capabilities(&self) -> &Capabilities {
        &self.inner.caps
    }

    /// Identity and IDENTIFY data.
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// The NIC's Fabric Address.
    pub fn fabric_addr(&self) -> IpAddr {
        self.inner.identity.fabric_addr
    }

    /// BAR0, for diagnostics (`uetctl regs`).
    pub fn bar0(&self) -> &dyn Mmio {
        self.inner.bar()
    }

    /// Every counter register the NIC's interface version has, by name: a counter added by a
    /// later version is not read (there is no register at its offset).
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }

    /// DMA memory of `len` bytes at a fresh IOVA, mapped for this NIC (unmapped on drop): for
    /// memory regions larger than a pool buffer.
    pub fn map_dma(&self, len: usize) -> Result<MappedRegion, DriverError> {
        self.inner.map_new(len)
    }

    /// Whether the NIC will answer nothing more: stopped by a fatal error, or its function
    /// reset under the driver. Nothing opened on it works again; once every object of it
    /// (every handle, AV, endpoint, buffer pool) is gone, [`Nic::open`] brings the function
    /// up again.
    pub fn answers_nothing(&self) -> bool {
        self.inner.answers_nothing()
    }

    /// Whether the NIC was opened by a process this one was forked from: it is that
    /// process's, and this one leaves it alone ([`crate::fork`]).
    pub fn opened_in_a_parent(&self) -> bool {
        self.inner.in_forked_child()
    }

    /// Whether this handle is the only thing that keeps the NIC open: no other handle, and
    /// no AV, endpoint or memory region made on it lives. Dropping it then closes the NIC.
    /// A buffer pool or mapped region made on it holds the device claim, not the NIC: while
    /// one lives, the function stays claimed, and opening it again is refused
    /// (`DriverError::DeviceInUse`) until the pool goes.
    pub fn is_last_handle(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// End the thread that watches the NIC for a stop ([`crate::stop_watch`]), joined, for
    /// good: for a library about to be unloaded (libfabric's provider cleanup), which must
    /// leave no thread of its own to run on while objects the application never closed keep
    /// the NIC open. Descriptors handed to the watch afterwards are not watched.
    pub fn stop_watching(&self) {
        self.inner.stop_watch.close();
    }

    /// The default endpoint attributes ([`crate::EndpointAttr::default`]) within this NIC's
    /// limits: the ring sizes and resource indices an endpoint opened with them gets, which
    /// `fi_getinfo` answers (see [`crate::Domain::endpoint_attr`]). On a NIC whose rings are
    /// smaller than the defaults (`CAP_QUEUES.max_queue_entries` below 256), the completion
    /// ring is the largest the NIC has and each of the three descriptor rings a quarter of it.
    pub fn endpoint_defaults(&self) -> crate::EndpointAttr {
        let default = crate::EndpointAttr::default();
        let caps = self.capabilities();
        let max_log2 = caps.max_queue_entries.checked_ilog2().unwrap_or(0) as u8;
        let cq_log2 = default.cq_log2.min(max_log2);
        let ring_log2 = default.tx_log2.min(cq_log2.saturating_sub(2)).max(1);
        crate::EndpointAttr {
            ri_count: default.ri_count.min(caps.ri_per_endpoint),
            tx_log2: ring_log2,
            rx_log2: ring_log2,
            trx_log2: ring_log2,
            cq_log2,
            ..default
        }
    }

    /// Set the admin command timeout.
    pub fn set_admin_timeout(&self, timeout: Duration) {
        if let Ok(mut admin) = self.inner.admin() {
            admin.set_timeout(timeout);
        }
    }

    /// Execute a raw admin command (diagnostics and tests of the firmware interface).
    pub fn admin_command(&self, cmd: Command) -> Result<AdminResult, DriverError> {
        self.inner.execute(cmd)
    }

    /// Execute a raw, possibly malformed, submission entry (firmware-interface tests).
    pub fn admin_raw(&self, entry: uet_fwif::AdminCommand) -> Result<AdminResult, DriverError> {
        self.inner.admin()?.execute_raw(self.inner.bar(), entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimDevice;
    use crate::device::DeviceError;
    use std::sync::atomic::{AtomicBool, Ordering};
    use uet_sim::{Fabric, NicConfig};

    /// A simulated function behind a backend that names no function (as a vfio-user one):
    /// only the object tells it apart.
    struct Unnamed(SimDevice);

    impl Device for Unnamed {
        fn bar0(&self) -> &dyn Mmio {
            self.0.bar0()
        }

        fn dma_map(&self, region: &DmaRegion) -> Result<(), DeviceError> {
            self.0.dma_map(region)
        }

        fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError> {
            self.0.dma_unmap(region)
        }

        fn name(&self) -> String {
            self.0.name()
        }
    }

    /// A thread of the parent held the list of claimed devices at the fork (opening or
    /// closing another NIC): the child's copy of a NIC drops without waiting for it.
    #[test]
    fn a_forked_child_drops_its_copy_of_a_nic_while_a_parents_thread_held_the_claims() {
        let fabric = Fabric::new();
        let mut nic = Some(crate::backend::sim::sim_nic(&fabric, "10.0.0.1"));
        let hold = |wait: &dyn Fn()| {
            let _claims = CLAIMED_DEVICES.lock();
            wait();
        };
        let code = crate::fork::tests::in_child_while_held(hold, || {
            drop(nic.take());
            0
        });
        assert_eq!(code, Some(0), "the child dropped its copy and ended");
        let nic = nic.expect("the parent's NIC");
        assert!(nic.open_av(uet_av::AvAttr::default()).is_ok());
    }

    /// A device object a Nic runs, or whose memory mapped for a Nic outlives it, is refused
    /// by a second open, for a backend that names no function too.
    #[test]
    fn a_device_object_a_nic_holds_is_refused_by_a_second_open() {
        let fabric = Fabric::new();
        let function = fabric
            .add_nic(NicConfig::new("10.0.0.1".parse().expect("address")))
            .expect("NIC");
        let device: Arc<dyn Device> = Arc::new(Unnamed(SimDevice::new(function)));
        let nic = Nic::open(device.clone()).expect("open");
        assert!(matches!(
            Nic::open(device.clone()),
            Err(DriverError::DeviceInUse { .. })
        ));
        let pool = crate::pool::DmaPool::new(&nic, 256, 4).expect("pool");
        drop(nic);
        assert!(matches!(
            Nic::open(device.clone()),
            Err(DriverError::DeviceInUse { .. })
        ));
        drop(pool);
        assert!(Nic::open(device).is_ok());
    }

    /// A simulated function removed at the driver's first write to the register at `at`:
    /// that write goes nowhere, and from then on every read answers all ones, as a removed
    /// PCI function's does.
    struct RemovedAt {
        inner: SimDevice,
        at: u32,
        gone: AtomicBool,
    }

    impl RemovedAt {
        fn removed_by(&self, offset: u32) -> bool {
            if offset == self.at {
                self.gone.store(true, Ordering::SeqCst);
            }
            self.gone.load(Ordering::SeqCst)
        }
    }

    impl Mmio for RemovedAt {
        fn read32(&self, offset: u32) -> u32 {
            if self.gone.load(Ordering::SeqCst) {
                return u32::MAX;
            }
            self.inner.bar0().read32(offset)
        }

        fn write32(&self, offset: u32, value: u32) {
            if !self.removed_by(offset) {
                self.inner.bar0().write32(offset, value);
            }
        }

        fn read64(&self, offset: u32) -> u64 {
            if self.gone.load(Ordering::SeqCst) {
                return u64::MAX;
            }
            self.inner.bar0().read64(offset)
        }

        fn write64(&self, offset: u32, value: u64) {
            if !self.removed_by(offset) {
                self.inner.bar0().write64(offset, value);
            }
        }
    }

    impl Device for RemovedAt {
        fn bar0(&self) -> &dyn Mmio {
            self
        }

        fn dma_map(&self, region: &DmaRegion) -> Result<(), DeviceError> {
            self.inner.dma_map(region)
        }

        fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError> {
            self.inner.dma_unmap(region)
        }

        fn name(&self) -> String {
            self.inner.name()
        }
    }

    /// A function removed while the open enables it, or while IDENTIFY runs, reads all ones
    /// from then on: `DEV_STATUS.fatal` with every `FATAL_ERROR` cause set. The open reports
    /// the removal (`FI_ENODEV`), as it does for one removed during the capability reads, not
    /// a refused enable or a fatal error of the device.
    #[test]
    fn a_function_removed_during_enable_or_identify_is_reported_gone() {
        for at in [DEV_CTRL.offset(), uet_regs::ADMIN_SQ_DOORBELL.offset()] {
            let function = Fabric::new()
                .add_nic(NicConfig::new("10.0.0.1".parse().expect("address")))
                .expect("NIC");
            let device = Arc::new(RemovedAt {
                inner: SimDevice::new(function),
                at,
                gone: AtomicBool::new(false),
            });
            match Nic::open(device) {
                Err(e @ DriverError::DeviceGone) => {
                    assert_eq!(e.errno(), uet_av::FiErrno::FI_ENODEV, "{e}");
                }
                Err(e) => panic!("removed at {at:#x}: expected the removal, got {e:?}"),
                Ok(_) => panic!("removed at {at:#x}: a removed function was opened"),
            }
        }
    }
}
