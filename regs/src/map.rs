//! The BAR0 register map: field types and register definitions, section by section.
//!
//! Each register is a [`Reg`] constant; its [`RegInfo`] is what the simulator enforces and what
//! `REGISTERS.md` shows.

use crate::{Access, FieldInfo, Reg, RegInfo, RegValue, Width};
use bitfield_struct::bitfield;

macro_rules! reg_value {
    ($($ty:ty => $w:ident),* $(,)?) => {$(
        impl RegValue for $ty {
            const WIDTH: Width = Width::$w;
            fn from_raw(raw: u64) -> Self {
                Self::from_bits(raw as _)
            }
            fn to_raw(self) -> u64 {
                self.into_bits() as u64
            }
        }
    )*};
}

macro_rules! register_map {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident: $ty:ty = ($off:literal, $width:ident, $access:ident, reset $reset:expr, $section:literal $(, since_minor $since:literal)?)
            $fields:expr;
    )*) => {
        $(
            $(#[doc = $doc])*
            pub const $name: Reg<$ty> = Reg::new(RegInfo {
                name: stringify!($name),
                offset: $off,
                width: Width::$width,
                access: Access::$access,
                reset: $reset,
                section: $section,
                since_minor: since_minor(&[$($since)?]),
                doc: concat!($($doc, "\n"),*),
                fields: &$fields,
            });
        )*
        /// Every register of BAR0, in offset order.
        pub const REGISTERS: &[RegInfo] = &[$($name.info),*];
    };
}

/// The interface minor version a register appeared in: the `since_minor` of its map entry, 0 for
/// the registers of interface 1.0.
const fn since_minor(given: &[u8]) -> u8 {
    match given {
        [minor] => *minor,
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Field types
// ---------------------------------------------------------------------------------------------

/// [`ID`]: PCI identity, as in config space.
#[bitfield(u32)]
pub struct Id {
    /// PCI vendor ID.
    pub vendor_id: u16,
    /// PCI device ID.
    pub device_id: u16,
}

/// [`REVISION`]: silicon revision and host-interface version.
#[bitfield(u32)]
pub struct Revision {
    /// Silicon/model revision.
    pub revision: u8,
    /// Host interface major version ([`crate::INTERFACE_MAJOR`]).
    pub interface_major: u8,
    /// Host interface minor version.
    pub interface_minor: u8,
    #[bits(8)]
    __: u8,
}

/// [`CAP_AV`]: address-vector tables.
#[bitfield(u32)]
pub struct CapAv {
    /// Number of AV tables the NIC holds.
    pub max_tables: u16,
    /// Size of one NIC AV entry in bytes.
    pub entry_bytes: u8,
    /// Largest `rx_ctx_bits` an AV table can decode from an `fi_addr_t`.
    pub max_rx_ctx_bits: u8,
}

/// [`CAP_EP`]: endpoints and contexts.
#[bitfield(u32)]
pub struct CapEp {
    /// Number of endpoints the NIC can hold at once.
    pub max_endpoints: u16,
    /// Transmit contexts per endpoint.
    pub max_tx_ctx: u8,
    /// Receive contexts per endpoint.
    pub max_rx_ctx: u8,
}

/// [`CAP_PID_ON_FEP`]: the PIDonFEP values the NIC hands out.
#[bitfield(u32)]
pub struct CapPidOnFep {
    /// First PIDonFEP the NIC assigns.
    pub first: u16,
    /// Number of PIDonFEP values from `first` (PIDonFEP is 12 bits on the wire).
    pub count: u16,
}

/// [`CAP_RESOURCE_INDEX`]: resource indices.
#[bitfield(u32)]
pub struct CapResourceIndex {
    /// Most resource indices one endpoint may own.
    pub max_per_endpoint: u16,
    /// Size of the NIC's resource-index space (12 bits on the wire); index 0 is reserved.
    pub space: u16,
}

/// [`CAP_PROFILES`]: UET profiles and packet size.
#[bitfield(u32)]
pub struct CapProfiles {
    /// AI Base profile.
    pub ai_base: bool,
    /// AI Full profile.
    pub ai_full: bool,
    /// HPC profile.
    pub hpc: bool,
    #[bits(13)]
    __: u16,
    /// Largest SES payload per packet, in bytes.
    pub mtu: u16,
}

/// [`CAP_TAGGED`]: tag matching (since interface 1.2).
#[bitfield(u32)]
pub struct CapTagged {
    /// Tagged messages the NIC holds per endpoint on its unexpected list (arrived before a
    /// matching tagged receive was posted).
    pub unexpected_entries: u16,
    /// Payload the NIC holds per endpoint on its unexpected list, in KiB.
    pub unexpected_kib: u16,
}

/// [`CAP_AUTH_KEY`]: the function's auth-key (JobID) table (since interface 1.5).
#[bitfield(u32)]
pub struct CapAuthKey {
    /// Slots of the auth-key table (at most 256: an endpoint's grant is a 256-bit map).
    pub slots: u16,
    #[bits(16)]
    __: u16,
}

/// [`CAP_QUEUES`]: queue depths.
#[bitfield(u32)]
pub struct CapQueues {
    /// Largest admin queue, in entries.
    pub max_admin_entries: u16,
    /// Largest TX/RX/completion queue, in entries.
    pub max_queue_entries: u16,
}

/// [`DEV_CTRL`]: function control.
#[bitfield(u32)]
pub struct DevCtrl {
    /// Enable the function: admin queue and datapath run only while set. Program the admin
    /// queue registers before setting it.
    pub enable: bool,
    #[bits(31)]
    __: u32,
}

/// [`DEV_STATUS`]: function status.
#[bitfield(u32)]
pub struct DevStatus {
    /// The function finished reset and accepts register programming.
    pub ready: bool,
    /// The function is enabled and processing queues.
    pub enabled: bool,
    /// A fatal error stopped the function; see [`FATAL_ERROR`].
    pub fatal: bool,
    #[bits(29)]
    __: u32,
}

/// [`FUNCTION_RESET`]: function-level reset command.
#[bitfield(u32)]
pub struct FunctionReset {
    /// Write 1 to reset the function: every endpoint, AV table and queue is destroyed and every
    /// register returns to its reset value.
    pub reset: bool,
    #[bits(31)]
    __: u32,
}

/// [`FATAL_ERROR`]: causes of a fatal error (W1C).
#[bitfield(u32)]
pub struct FatalError {
    /// The device attempted DMA outside the memory mapped for it.
    pub dma_fault: bool,
    /// The admin queue registers were inconsistent when the function was enabled.
    pub admin_queue: bool,
    /// Internal device error.
    pub internal: bool,
    #[bits(29)]
    __: u32,
}

/// [`ADMIN_QUEUE_SIZE`]: admin ring sizes.
#[bitfield(u32)]
pub struct AdminQueueSize {
    /// log2 of the submission ring's entry count.
    pub sq_log2: u8,
    /// log2 of the completion ring's entry count.
    pub cq_log2: u8,
    #[bits(16)]
    __: u16,
}

/// A ring index: admin SQ tail/head, CQ head.
#[bitfield(u32)]
pub struct RingIndex {
    /// Index into the ring, modulo the ring size.
    pub index: u16,
    #[bits(16)]
    __: u16,
}

/// [`INTR_CAUSE`] and [`INTR_MASK`]: interrupt sources.
#[bitfield(u32)]
pub struct Interrupts {
    /// An admin completion was written.
    pub admin: bool,
    /// A datapath completion was written.
    pub completion: bool,
    /// A fatal error occurred.
    pub fatal: bool,
    #[bits(29)]
    __: u32,
}

/// [`TXQ_DOORBELL`], [`RXQ_DOORBELL`], [`CQ_DOORBELL`], [`TRXQ_DOORBELL`]: a queue and its
/// new index.
#[bitfield(u32)]
pub struct QueueDoorbell {
    /// The new producer index (TX/RX) or consumer index (CQ).
    pub index: u16,
    /// The endpoint handle whose queue this is.
    pub endpoint: u16,
}

/// [`CQ_ARM`]: arm an endpoint's completion ring for an interrupt.
#[bitfield(u32)]
pub struct CqArm {
    /// The MSI-X vector to raise (below the table size, `pci::MSIX_VECTORS`).
    pub vector: u16,
    /// The endpoint (or context) handle whose completion ring this is.
    pub endpoint: u16,
}

/// [`ADMIN_ARM`]: arm the admin completion ring for an interrupt.
#[bitfield(u32)]
pub struct AdminArm {
    /// The MSI-X vector to raise (below the table size, `pci::MSIX_VECTORS`).
    pub vector: u16,
    #[bits(16)]
    __: u16,
}

/// [`AV_INVALIDATE_DOORBELL`]: one AV entry to invalidate.
#[bitfield(u64)]
pub struct AvInvalidateDoorbell {
    /// Table index.
    pub index: u32,
    /// AV handle.
    pub av: u16,
    #[bits(16)]
    __: u16,
}

reg_value!(AvInvalidateDoorbell => W64);

/// [`AV_WRITE_DOORBELL`]: write the entry staged in `AV_WRITE_ENTRY_0..7` at one index.
#[bitfield(u64)]
pub struct AvWriteDoorbell {
    /// Table index.
    pub index: u32,
    /// AV handle.
    pub av: u16,
    #[bits(16)]
    __: u16,
}

reg_value!(AvWriteDoorbell => W64);

reg_value!(
    Id => W32, Revision => W32, CapAv => W32, CapEp => W32, CapPidOnFep => W32,
    CapResourceIndex => W32, CapProfiles => W32, CapQueues => W32, DevCtrl => W32,
    DevStatus => W32, FunctionReset => W32, FatalError => W32, AdminQueueSize => W32,
    RingIndex => W32, Interrupts => W32, QueueDoorbell => W32, CapTagged => W32,
    CapAuthKey => W32, CqArm => W32, AdminArm => W32,
);

// Reset values of the reference model's capability registers.
const ID_RESET: u64 = (crate::PCI_DEVICE_ID as u64) << 16 | crate::PCI_VENDOR_ID as u64;
const REVISION_RESET: u64 =
    (crate::INTERFACE_MINOR as u64) << 16 | (crate::INTERFACE_MAJOR as u64) << 8 | 0x01;

const fn f(name: &'static str, lsb: usize, bits: usize, doc: &'static str) -> FieldInfo {
    FieldInfo::new(name, lsb, bits, doc)
}

const COUNTER: [FieldInfo; 1] = [f("count", 0, 64, "Free-running count; wraps at 2^64.")];
const RING: [FieldInfo; 1] = [f(
    "index",
    RingIndex::INDEX_OFFSET,
    RingIndex::INDEX_BITS,
    "Ring index.",
)];
const INTR: [FieldInfo; 3] = [
    f("admin", Interrupts::ADMIN_OFFSET, 1, "Admin completion."),
    f(
        "completion",
        Interrupts::COMPLETION_OFFSET,
        1,
        "Datapath completion.",
    ),
    f("fatal", Interrupts::FATAL_OFFSET, 1, "Fatal error."),
];
const DOORBELL: [FieldInfo; 2] = [
    f(
        "index",
        QueueDoorbell::INDEX_OFFSET,
        QueueDoorbell::INDEX_BITS,
        "New producer (TX/RX) or consumer (CQ) index.",
    ),
    f(
        "endpoint",
        QueueDoorbell::ENDPOINT_OFFSET,
        QueueDoorbell::ENDPOINT_BITS,
        "Endpoint handle.",
    ),
];

register_map! {
    // ---- Identity and capabilities: 0x000-0x03f -------------------------------------------

    /// PCI identity of the function. The driver checks it before anything else; all ones means
    /// the device is gone.
    ID: Id = (0x000, W32, Ro, reset ID_RESET, "identity") [
        f("vendor_id", Id::VENDOR_ID_OFFSET, Id::VENDOR_ID_BITS, "PCI vendor ID (0xFFFE: experimental, not assigned)."),
        f("device_id", Id::DEVICE_ID_OFFSET, Id::DEVICE_ID_BITS, "PCI device ID."),
    ];
    /// Silicon revision and the version of the host interface this crate and `uet-fwif` define.
    REVISION: Revision = (0x004, W32, Ro, reset REVISION_RESET, "identity") [
        f("revision", Revision::REVISION_OFFSET, Revision::REVISION_BITS, "Silicon/model revision."),
        f("interface_major", Revision::INTERFACE_MAJOR_OFFSET, Revision::INTERFACE_MAJOR_BITS, "Host interface major version: the driver refuses another."),
        f("interface_minor", Revision::INTERFACE_MINOR_OFFSET, Revision::INTERFACE_MINOR_BITS, "Host interface minor version."),
    ];
    /// Firmware version, major.minor.patch in bytes 2..0.
    FW_VERSION: u32 = (0x008, W32, Ro, reset 0x0001_0000, "identity") [
        f("version", 0, 24, "Firmware version: major[23:16] minor[15:8] patch[7:0]."),
    ];
    /// Address-vector tables the NIC holds.
    CAP_AV: CapAv = (0x010, W32, Ro, reset (8 << 24) | (64 << 16) | 64, "capabilities") [
        f("max_tables", CapAv::MAX_TABLES_OFFSET, CapAv::MAX_TABLES_BITS, "AV tables."),
        f("entry_bytes", CapAv::ENTRY_BYTES_OFFSET, CapAv::ENTRY_BYTES_BITS, "Bytes per NIC AV entry."),
        f("max_rx_ctx_bits", CapAv::MAX_RX_CTX_BITS_OFFSET, CapAv::MAX_RX_CTX_BITS_BITS, "Largest rx_ctx_bits an AV decodes."),
    ];
    /// Entries one AV table can hold.
    CAP_AV_ENTRIES: u32 = (0x014, W32, Ro, reset 1 << 20, "capabilities") [
        f("entries", 0, 32, "Entries per AV table."),
    ];
    /// Endpoints and their contexts.
    CAP_EP: CapEp = (0x018, W32, Ro, reset (16 << 24) | (16 << 16) | 256, "capabilities") [
        f("max_endpoints", CapEp::MAX_ENDPOINTS_OFFSET, CapEp::MAX_ENDPOINTS_BITS, "Endpoints."),
        f("max_tx_ctx", CapEp::MAX_TX_CTX_OFFSET, CapEp::MAX_TX_CTX_BITS, "TX contexts per endpoint."),
        f("max_rx_ctx", CapEp::MAX_RX_CTX_OFFSET, CapEp::MAX_RX_CTX_BITS, "RX contexts per endpoint."),
    ];
    /// PIDonFEP values the NIC assigns to endpoints (12 bits on the wire).
    CAP_PID_ON_FEP: CapPidOnFep = (0x01c, W32, Ro, reset (4095 << 16) | 1, "capabilities") [
        f("first", CapPidOnFep::FIRST_OFFSET, CapPidOnFep::FIRST_BITS, "First PIDonFEP."),
        f("count", CapPidOnFep::COUNT_OFFSET, CapPidOnFep::COUNT_BITS, "How many from first."),
    ];
    /// Resource indices (12 bits on the wire; index 0 is reserved for the provider control channel).
    CAP_RESOURCE_INDEX: CapResourceIndex = (0x020, W32, Ro, reset (4096 << 16) | 256, "capabilities") [
        f("max_per_endpoint", CapResourceIndex::MAX_PER_ENDPOINT_OFFSET, CapResourceIndex::MAX_PER_ENDPOINT_BITS, "Most indices per endpoint."),
        f("space", CapResourceIndex::SPACE_OFFSET, CapResourceIndex::SPACE_BITS, "Size of the index space."),
    ];
    /// UET profiles the NIC implements and its MTU.
    CAP_PROFILES: CapProfiles = (0x024, W32, Ro, reset (4096 << 16) | 0b111, "capabilities") [
        f("ai_base", CapProfiles::AI_BASE_OFFSET, 1, "AI Base profile."),
        f("ai_full", CapProfiles::AI_FULL_OFFSET, 1, "AI Full profile."),
        f("hpc", CapProfiles::HPC_OFFSET, 1, "HPC profile."),
        f("mtu", CapProfiles::MTU_OFFSET, CapProfiles::MTU_BITS, "SES payload bytes per packet."),
    ];
    /// Queue depths.
    CAP_QUEUES: CapQueues = (0x028, W32, Ro, reset (4096 << 16) | 4096, "capabilities") [
        f("max_admin_entries", CapQueues::MAX_ADMIN_ENTRIES_OFFSET, CapQueues::MAX_ADMIN_ENTRIES_BITS, "Admin ring entries."),
        f("max_queue_entries", CapQueues::MAX_QUEUE_ENTRIES_OFFSET, CapQueues::MAX_QUEUE_ENTRIES_BITS, "TX/RX/CQ ring entries."),
    ];
    /// Largest message a TX descriptor may carry, in bytes (since interface 1.1). The NIC
    /// segments a longer-than-MTU message into MTU-sized packets (SES SOM ... EOM) and the
    /// receiving NIC reassembles it into one receive buffer.
    CAP_MAX_MSG: u32 = (0x02c, W32, Ro, reset 0x0010_0000, "capabilities", since_minor 1) [
        f("bytes", 0, 32, "Largest message in bytes (at least CAP_PROFILES.mtu)."),
    ];
    /// Tag matching (since interface 1.2): how much the NIC holds per endpoint on its
    /// unexpected list — tagged messages that arrived before a matching tagged receive was
    /// posted and, since interface 1.17, untagged messages that arrived before a receive
    /// buffer; both kinds share the bounds. A message that would exceed either bound is
    /// answered RC_UNDELIVERABLE and counted in `RX_UNEXPECTED_OVERFLOW`.
    CAP_TAGGED: CapTagged = (0x030, W32, Ro, reset (4096 << 16) | 64, "capabilities", since_minor 2) [
        f("unexpected_entries", CapTagged::UNEXPECTED_ENTRIES_OFFSET, CapTagged::UNEXPECTED_ENTRIES_BITS, "Unexpected messages held per endpoint."),
        f("unexpected_kib", CapTagged::UNEXPECTED_KIB_OFFSET, CapTagged::UNEXPECTED_KIB_BITS, "Unexpected payload held per endpoint, KiB."),
    ];
    /// The function's auth-key table (since interface 1.5): slots that each hold one JobID an
    /// endpoint may be granted (AUTH_KEY_ADD, ENDPOINT_AUTH_KEYS; see `uet_fwif::auth_key`).
    /// The RX engine accepts a request for an endpoint whose JobID is the endpoint's own or the
    /// JobID of a slot granted to it; an AV entry with `AUTH_KEY` set sends with its slot's
    /// JobID.
    CAP_AUTH_KEY: CapAuthKey = (0x034, W32, Ro, reset 64, "capabilities", since_minor 5) [
        f("slots", CapAuthKey::SLOTS_OFFSET, CapAuthKey::SLOTS_BITS, "Auth-key table slots (at most 256)."),
    ];
    /// Peer groups (since interface 1.7): the largest group id an AV table may be created
    /// with (AV_CREATE `max_group_id`, the libfabric domain attribute `max_group_id`). 0: the
    /// NIC has no peer groups. An AV created with `max_group_id` > 0 decodes the group id from
    /// bits 32–63 of a destination `fi_addr_t`, below its `rx_ctx_bits`; the group travels in
    /// SEND and TAGGED_SEND requests and selects the receive buffers it may land in (see
    /// `uet_fwif::datapath`, *Peer groups*).
    CAP_PEER_GROUPS: u32 = (0x038, W32, Ro, reset 0xFFFF, "capabilities", since_minor 7) [
        f("max_group_id", 0, 32, "Largest group id an AV may allow (0: no peer groups)."),
    ];

    // ---- Global control and status: 0x040-0x07f --------------------------------------------

    /// Function control. Bring-up: wait for `DEV_STATUS.ready`, program the admin queue, then
    /// set `enable`. Clearing `enable` stops queue processing; state is kept.
    DEV_CTRL: DevCtrl = (0x040, W32, Rw, reset 0, "control") [
        f("enable", DevCtrl::ENABLE_OFFSET, 1, "Run the admin queue and datapath."),
    ];
    /// Function status.
    DEV_STATUS: DevStatus = (0x044, W32, Ro, reset 1, "control") [
        f("ready", DevStatus::READY_OFFSET, 1, "Out of reset."),
        f("enabled", DevStatus::ENABLED_OFFSET, 1, "Processing queues."),
        f("fatal", DevStatus::FATAL_OFFSET, 1, "Stopped by a fatal error."),
    ];
    /// Function-level reset, the register form of PCIe FLR.
    FUNCTION_RESET: FunctionReset = (0x048, W32, Wo, reset 0, "control") [
        f("reset", FunctionReset::RESET_OFFSET, 1, "Write 1 to reset the function."),
    ];
    /// Causes of a fatal error. Write 1 to a bit to clear it; the function stays stopped until
    /// it is reset.
    FATAL_ERROR: FatalError = (0x04c, W32, W1c, reset 0, "control") [
        f("dma_fault", FatalError::DMA_FAULT_OFFSET, 1, "DMA outside mapped memory."),
        f("admin_queue", FatalError::ADMIN_QUEUE_OFFSET, 1, "Bad admin queue programming."),
        f("internal", FatalError::INTERNAL_OFFSET, 1, "Internal error."),
    ];

    // ---- Admin queue: 0x080-0x0bf ----------------------------------------------------------

    /// IOVA of the admin submission ring (64-byte entries, 4 KiB aligned).
    ADMIN_SQ_BASE: u64 = (0x080, W64, Rw, reset 0, "admin queue") [
        f("address", 12, 52, "IOVA bits 63:12."),
    ];
    /// IOVA of the admin completion ring (16-byte entries, 4 KiB aligned).
    ADMIN_CQ_BASE: u64 = (0x088, W64, Rw, reset 0, "admin queue") [
        f("address", 12, 52, "IOVA bits 63:12."),
    ];
    /// Ring sizes, as log2 of the entry count. Program before enabling.
    ADMIN_QUEUE_SIZE: AdminQueueSize = (0x090, W32, Rw, reset 0, "admin queue") [
        f("sq_log2", AdminQueueSize::SQ_LOG2_OFFSET, AdminQueueSize::SQ_LOG2_BITS, "log2 SQ entries."),
        f("cq_log2", AdminQueueSize::CQ_LOG2_OFFSET, AdminQueueSize::CQ_LOG2_BITS, "log2 CQ entries."),
    ];
    /// The SQ tail the device last received through `ADMIN_SQ_DOORBELL`.
    ADMIN_SQ_TAIL: RingIndex = (0x094, W32, Ro, reset 0, "admin queue") RING;
    /// The device's SQ consumer index: entries before it have been read.
    ADMIN_SQ_HEAD: RingIndex = (0x098, W32, Ro, reset 0, "admin queue") RING;
    /// The driver's CQ consumer index: the device never overwrites an entry at or after it.
    ADMIN_CQ_HEAD: RingIndex = (0x09c, W32, Rw, reset 0, "admin queue") RING;
    /// Admin doorbell: write the new SQ tail; the device executes entries up to it.
    ADMIN_SQ_DOORBELL: RingIndex = (0x0a0, W32, Wo, reset 0, "admin queue") RING;

    // ---- Interrupts: 0x0c0-0x0ff -----------------------------------------------------------

    /// Causes seen since last cleared (W1C): an admin completion, a datapath completion, a
    /// fatal error. They raise no interrupt: a completion ring raises its own MSI-X vector
    /// when armed (`CQ_ARM`, from interface 1.12 on), and so does the admin completion ring
    /// (`ADMIN_ARM`, from 1.15 on); fatal errors are polled.
    INTR_CAUSE: Interrupts = (0x0c0, W32, W1c, reset 0, "interrupts") INTR;
    /// Mask of the causes in `INTR_CAUSE`, held for a function-wide interrupt the NIC does not
    /// have: it changes nothing that the NIC does.
    INTR_MASK: Interrupts = (0x0c4, W32, Rw, reset 0b111, "interrupts") INTR;

    // ---- Datapath doorbells: 0x100-0x13f ---------------------------------------------------

    /// TX doorbell: an endpoint's new TX ring producer index.
    TXQ_DOORBELL: QueueDoorbell = (0x100, W32, Wo, reset 0, "doorbells") DOORBELL;
    /// RX doorbell: an endpoint's new RX ring producer index.
    RXQ_DOORBELL: QueueDoorbell = (0x104, W32, Wo, reset 0, "doorbells") DOORBELL;
    /// CQ doorbell: an endpoint's new completion ring consumer index (frees entries).
    CQ_DOORBELL: QueueDoorbell = (0x108, W32, Wo, reset 0, "doorbells") DOORBELL;
    /// Completion interrupt (since interface 1.12): arm an endpoint's completion ring to raise
    /// MSI-X `vector` once, as soon as the ring holds a completion the driver has not freed
    /// with `CQ_DOORBELL` — at once if it holds one already, so a driver that found the ring
    /// empty, wrote `CQ_DOORBELL` with its head and then armed cannot miss a completion
    /// written in between. Raising the vector disarms the ring; arming an armed ring
    /// replaces its vector. A write naming no endpoint, or a vector outside the MSI-X table,
    /// is dropped and counted. The vector is delivered as the MSI-X capability says
    /// (`uet_regs::pci`, [`crate::pci::MSIX_CAP`]): not at all while MSI-X is disabled, and
    /// held as a pending bit while it or the function is masked. A function reset
    /// (`FUNCTION_RESET`, a function-level reset) and destroying the endpoint disarm; stopping
    /// the function (`DEV_CTRL.enable` 0) does not.
    CQ_ARM: CqArm = (0x10c, W32, Wo, reset 0, "doorbells", since_minor 12) [
        f("vector", CqArm::VECTOR_OFFSET, CqArm::VECTOR_BITS, "MSI-X vector to raise."),
        f("endpoint", CqArm::ENDPOINT_OFFSET, CqArm::ENDPOINT_BITS, "Endpoint handle."),
    ];
    /// Tagged RX doorbell (since interface 1.2): an endpoint's new tagged receive ring
    /// producer index.
    TRXQ_DOORBELL: QueueDoorbell = (0x110, W32, Wo, reset 0, "doorbells", since_minor 2) DOORBELL;
    /// Admin completion interrupt (since interface 1.15): arm the admin completion ring to
    /// raise MSI-X `vector` once, as soon as the ring holds a completion the driver has not
    /// consumed (the device's CQ tail is not `ADMIN_CQ_HEAD`) — at once if it holds one
    /// already, so a driver that took in every completion, wrote `ADMIN_CQ_HEAD` and then
    /// armed cannot miss one written in between. Raising the vector disarms the ring; arming
    /// an armed ring replaces its vector. A vector outside the MSI-X table is dropped and
    /// counted. The vector is delivered as for `CQ_ARM`; its pending bit, while masked, stays
    /// until unmasked (a driver that finds nothing new at that message sleeps again). A
    /// function reset (`FUNCTION_RESET`, a function-level reset) disarms; stopping the
    /// function (`DEV_CTRL.enable` 0) does not, and neither does enabling it again, which
    /// runs the commands submitted while it was stopped.
    ADMIN_ARM: AdminArm = (0x114, W32, Wo, reset 0, "doorbells", since_minor 15) [
        f("vector", AdminArm::VECTOR_OFFSET, AdminArm::VECTOR_BITS, "MSI-X vector to raise."),
    ];
    /// AV invalidate doorbell (since interface 1.4): invalidate one entry of an AV table
    /// without an admin command, as AV_INVALIDATE would: a single entry is cleared, a member of
    /// a symmetric range becomes a hole. Register writes are executed in order, so every TX
    /// doorbell written after it translates without the entry. A write naming no table or an
    /// index outside it is dropped and counted (in `AV_INVALIDATE_DROPS`, from interface 1.8;
    /// a NIC before it keeps no count a driver can read); the driver checks both before
    /// writing. Bits 63:48 are reserved: ignored, the write acts on the fields. Acts at
    /// once even while the function is stopped (`DEV_CTRL.enable` 0): it needs no queue.
    /// Written as two 32-bit halves, low half first, it acts once, when the high half comes;
    /// a full-width write drops a low half written before it, and a high half with no low half
    /// held is a bad access and does nothing.
    AV_INVALIDATE_DOORBELL: AvInvalidateDoorbell = (0x118, W64, Wo, reset 0, "doorbells", since_minor 4) [
        f("index", AvInvalidateDoorbell::INDEX_OFFSET, AvInvalidateDoorbell::INDEX_BITS, "Table index."),
        f("av", AvInvalidateDoorbell::AV_OFFSET, AvInvalidateDoorbell::AV_BITS, "AV handle."),
    ];

    // ---- AV write window: 0x140-0x18f (since interface 1.8) --------------------------------
    //
    // One AV entry written with register writes instead of an AV_WRITE command: the driver
    // stores the 64-byte `NicAvEntry` (uet_fwif::av_entry) as eight little-endian 64-bit
    // words in AV_WRITE_ENTRY_0..7 (a write-combining burst on hardware), then rings
    // AV_WRITE_DOORBELL with the table and index, then reads AV_WRITE_DROPS: the read returns
    // after the posted writes have landed and says whether the entry was stored. The staged
    // words belong to the function, so the driver serializes stage-ring-read sequences.

    /// AV write window, bytes 0-7 of the staged entry.
    AV_WRITE_ENTRY_0: u64 = (0x140, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("bytes", 0, 64, "Entry bytes 0-7, little-endian."),
    ];
    /// AV write window, bytes 8-15 of the staged entry.
    AV_WRITE_ENTRY_1: u64 = (0x148, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("bytes", 0, 64, "Entry bytes 8-15, little-endian."),
    ];
    /// AV write window, bytes 16-23 of the staged entry.
    AV_WRITE_ENTRY_2: u64 = (0x150, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("bytes", 0, 64, "Entry bytes 16-23, little-endian."),
    ];
    /// AV write window, bytes 24-31 of the staged entry.
    AV_WRITE_ENTRY_3: u64 = (0x158, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("bytes", 0, 64, "Entry bytes 24-31, little-endian."),
    ];
    /// AV write window, bytes 32-39 of the staged entry.
    AV_WRITE_ENTRY_4: u64 = (0x160, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("bytes", 0, 64, "Entry bytes 32-39, little-endian."),
    ];
    /// AV write window, bytes 40-47 of the staged entry.
    AV_WRITE_ENTRY_5: u64 = (0x168, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("bytes", 0, 64, "Entry bytes 40-47, little-endian."),
    ];
    /// AV write window, bytes 48-55 of the staged entry.
    AV_WRITE_ENTRY_6: u64 = (0x170, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("bytes", 0, 64, "Entry bytes 48-55, little-endian."),
    ];
    /// AV write window, bytes 56-63 of the staged entry.
    AV_WRITE_ENTRY_7: u64 = (0x178, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("bytes", 0, 64, "Entry bytes 56-63, little-endian."),
    ];
    /// AV write doorbell (since interface 1.8): store the staged entry at `index` of table
    /// `av`, exactly as an AV_WRITE of that one record would (a range entry included). Register
    /// writes are executed in order, so every TX doorbell written after it translates with the
    /// entry. A write AV_WRITE would refuse (no such table, index outside it, an entry that
    /// fails its checks or overlaps a range, an auth-key slot of another AV) changes nothing
    /// and is counted in `AV_WRITE_DROPS`, which the driver reads back for the outcome. Bits
    /// 63:48 are reserved: ignored, the write acts on the fields. Acts at once even while the
    /// function is stopped (`DEV_CTRL.enable` 0): it needs no queue.
    /// Written as two 32-bit halves, low half first, it acts once, when the high half comes;
    /// a full-width write drops a low half written before it, and a high half with no low half
    /// held is a bad access and does nothing.
    AV_WRITE_DOORBELL: AvWriteDoorbell = (0x180, W64, Wo, reset 0, "av write window", since_minor 8) [
        f("index", AvWriteDoorbell::INDEX_OFFSET, AvWriteDoorbell::INDEX_BITS, "Table index."),
        f("av", AvWriteDoorbell::AV_OFFSET, AvWriteDoorbell::AV_BITS, "AV handle."),
    ];

    // ---- Counters: 0x200-0x2ff, 64-bit, free-running ---------------------------------------

    /// UET packets transmitted.
    TX_PACKETS: u64 = (0x200, W64, Ro, reset 0, "counters") COUNTER;
    /// SES payload bytes transmitted.
    TX_BYTES: u64 = (0x208, W64, Ro, reset 0, "counters") COUNTER;
    /// UET packets received and accepted.
    RX_PACKETS: u64 = (0x210, W64, Ro, reset 0, "counters") COUNTER;
    /// SES payload bytes received and accepted.
    RX_BYTES: u64 = (0x218, W64, Ro, reset 0, "counters") COUNTER;
    /// Sends failed at the initiator: invalid AV entry, bad descriptor, error response.
    TX_ERRORS: u64 = (0x220, W64, Ro, reset 0, "counters") COUNTER;
    /// Requests rejected with RC_BAD_JOB_ID.
    RX_BAD_JOB_ID: u64 = (0x228, W64, Ro, reset 0, "counters") COUNTER;
    /// Requests rejected with RC_BAD_PID.
    RX_BAD_PID: u64 = (0x230, W64, Ro, reset 0, "counters") COUNTER;
    /// Requests rejected with RC_BAD_INDEX.
    RX_BAD_INDEX: u64 = (0x238, W64, Ro, reset 0, "counters") COUNTER;
    /// Frames dropped as malformed or truncated.
    RX_MALFORMED: u64 = (0x240, W64, Ro, reset 0, "counters") COUNTER;
    /// Untagged messages that found no posted receive buffer: refused RC_UNDELIVERABLE
    /// before interface 1.17; since, held on the unexpected list when it has room (then also
    /// counted in `RX_UNEXPECTED`), else refused (then also in `RX_UNEXPECTED_OVERFLOW`) —
    /// but at a datagram endpoint (dropped) or a control channel (refused) as before. Since
    /// 1.17 it also counts a message that queued behind its sender's messages waiting on the
    /// list, a buffer posted or not: the buffer is theirs first.
    RX_NO_BUFFER: u64 = (0x248, W64, Ro, reset 0, "counters") COUNTER;
    /// DMA accesses outside mapped memory (each failed the command or descriptor).
    DMA_FAULTS: u64 = (0x250, W64, Ro, reset 0, "counters") COUNTER;
    /// Admin commands executed.
    ADMIN_COMMANDS: u64 = (0x258, W64, Ro, reset 0, "counters") COUNTER;
    /// Admin commands completed with an error status.
    ADMIN_ERRORS: u64 = (0x260, W64, Ro, reset 0, "counters") COUNTER;
    /// Register accesses to offsets with no register.
    BAD_REGISTER_ACCESSES: u64 = (0x268, W64, Ro, reset 0, "counters") COUNTER;
    /// Requests rejected with RC_PERM_VIOLATION: RMA requests with an unknown memory key, a key
    /// not bound to the resource index, a range outside the region, or access not granted;
    /// from host interface 1.20 also data requests a connected endpoint (`EP_FLAG_CONNECTED`)
    /// refuses because they come from another sender than its peer (ENDPOINT_PEER).
    RX_PERM_VIOLATION: u64 = (0x270, W64, Ro, reset 0, "counters", since_minor 2) COUNTER;
    /// Messages refused with RC_UNDELIVERABLE because the endpoint's unexpected list was full
    /// (`CAP_TAGGED`; since interface 1.2): tagged ones, and from 1.17 on untagged ones.
    RX_UNEXPECTED_OVERFLOW: u64 = (0x278, W64, Ro, reset 0, "counters", since_minor 2) COUNTER;
    /// Messages that arrived before a matching receive and were held on the unexpected list
    /// (since interface 1.2): tagged ones, and from 1.17 on untagged ones.
    RX_UNEXPECTED: u64 = (0x280, W64, Ro, reset 0, "counters", since_minor 2) COUNTER;
    /// Sends refused at the initiator because the destination `fi_addr_t` names a peer group
    /// above the AV's `max_group_id` (completion status `BadGroup`; since interface 1.7).
    TX_BAD_GROUP: u64 = (0x288, W64, Ro, reset 0, "counters", since_minor 7) COUNTER;
    /// SEND and TAGGED_SEND requests refused with RC_UNDELIVERABLE because they carry a peer
    /// group the target endpoint cannot receive: a group other than 0 at an endpoint without
    /// peer groups, or one above its AV's `max_group_id` (since interface 1.7).
    RX_BAD_GROUP: u64 = (0x290, W64, Ro, reset 0, "counters", since_minor 7) COUNTER;
    /// `AV_INVALIDATE_DOORBELL` writes the NIC dropped (since interface 1.8): no such table, or
    /// an index outside it. Nonzero means a driver bug.
    AV_INVALIDATE_DROPS: u64 = (0x298, W64, Ro, reset 0, "counters", since_minor 8) COUNTER;
    /// `AV_WRITE_DOORBELL` writes the NIC dropped (since interface 1.8): what AV_WRITE would
    /// refuse. A driver reads it after ringing (the read also waits for the posted writes to
    /// land) to learn whether its entry was stored.
    AV_WRITE_DROPS: u64 = (0x2a0, W64, Ro, reset 0, "counters", since_minor 8) COUNTER;
    /// SEND, TAGGED_SEND and WRITE refused at the initiator because they were longer than the
    /// MTU and the destination entry has `MAX_MSG_MTU` (completion status `MsgTooLong`; since
    /// interface 1.10).
    TX_MSG_TOO_LONG: u64 = (0x2a8, W64, Ro, reset 0, "counters", since_minor 10) COUNTER;
}

/// Counters, in offset order, for `uetctl stats`.
pub const COUNTERS: &[Reg<u64>] = &[
    TX_PACKETS,
    TX_BYTES,
    RX_PACKETS,
    RX_BYTES,
    TX_ERRORS,
    RX_BAD_JOB_ID,
    RX_BAD_PID,
    RX_BAD_INDEX,
    RX_MALFORMED,
    RX_NO_BUFFER,
    DMA_FAULTS,
    ADMIN_COMMANDS,
    ADMIN_ERRORS,
    BAD_REGISTER_ACCESSES,
    RX_PERM_VIOLATION,
    RX_UNEXPECTED_OVERFLOW,
    RX_UNEXPECTED,
    TX_BAD_GROUP,
    RX_BAD_GROUP,
    AV_INVALIDATE_DROPS,
    AV_WRITE_DROPS,
    TX_MSG_TOO_LONG,
];
