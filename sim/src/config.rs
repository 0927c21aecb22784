//! NIC configuration: what a particular model instance reports in its capability registers and
//! IDENTIFY page.
//!
//! [`NicConfig::new`] gives the reference model: every limit equals the reset value of the
//! matching `CAP_*` register in `uet-regs`, so a default NIC reads exactly like
//! `regs/REGISTERS.md`. Tests shrink limits (a 4-entry endpoint table, a 2-table AV budget) to
//! reach exhaustion paths quickly; [`NicConfig::validate`] rejects values the hardware could not
//! represent.

use std::net::IpAddr;
use uet_regs::{
    CAP_AUTH_KEY, CAP_AV, CAP_AV_ENTRIES, CAP_EP, CAP_MAX_MSG, CAP_PEER_GROUPS, CAP_PID_ON_FEP,
    CAP_PROFILES, CAP_QUEUES, CAP_RESOURCE_INDEX, CAP_TAGGED,
};

/// Largest MTU the model accepts (SES payload bytes per packet): the SES `payload_len` field
/// of a continuation packet is 14 bits wide.
pub const MAX_MTU: u16 = 0x3FFF;
/// Largest `CAP_MAX_MSG` the model accepts: a message is staged whole in NIC memory.
pub const MAX_MSG_LIMIT: u32 = 1 << 30;
/// Messages the reference model reassembles at once (all endpoints together).
pub const DEFAULT_REASSEMBLY_SLOTS: u16 = 256;
/// Memory regions the reference model holds at once (all endpoints together).
pub const DEFAULT_MEMORY_REGIONS: u32 = 4096;
/// DMA mappings a function's IOMMU holds at once: the VFIO type1 IOMMU's default
/// `dma_entry_limit`, which bounds what one process may map through kernel VFIO.
pub const DEFAULT_DMA_MAPPINGS: u32 = 65_535;
/// Bytes a function's IOMMU maps at once, over all its mappings: 64 GiB.
pub const DEFAULT_DMA_BYTES: u64 = 64 << 30;

/// The oldest host interface the model emulates (1.7: peer groups; the completion, RX
/// descriptor and AV_CREATE layouts the model implements are those of 1.7 and later).
pub const OLDEST_INTERFACE_MINOR: u8 = uet_regs::since::PEER_GROUPS;

/// Configuration of one simulated NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicConfig {
    /// The NIC's Fabric Address (IPv4 or IPv6); unique on a fabric.
    pub fabric_addr: IpAddr,
    /// Station MAC address.
    pub mac: [u8; 6],
    /// Serial number reported by IDENTIFY (ASCII, at most 16 bytes are kept).
    pub serial: String,
    /// Model name reported by IDENTIFY (ASCII, at most 32 bytes are kept).
    pub model: String,
    /// Port speed reported by IDENTIFY, in Mb/s.
    pub port_speed_mbps: u32,
    /// AV tables (`CAP_AV.max_tables`).
    pub av_tables: u16,
    /// Entries per AV table (`CAP_AV_ENTRIES`).
    pub av_entries: u32,
    /// Entries of table memory the AV tables share, which no capability register reports: an
    /// AV_CREATE whose table would take the live tables' entries past it completes
    /// NoResources, as on a NIC whose table memory is spoken for (a driver learns of the
    /// limit from that status, as it learns that every table is taken). `None`: room for
    /// every table at its largest (`av_tables` × `av_entries`), the table count the only
    /// limit. A simulated table of a million entries takes about 88 MiB of host memory.
    pub av_table_memory_entries: Option<u64>,
    /// Largest `rx_ctx_bits` an AV decodes (`CAP_AV.max_rx_ctx_bits`).
    pub max_rx_ctx_bits: u8,
    /// Endpoints (`CAP_EP.max_endpoints`).
    pub endpoints: u16,
    /// TX contexts per endpoint (`CAP_EP.max_tx_ctx`): the largest `tx_ctx_cnt`.
    pub max_tx_ctx: u8,
    /// RX contexts per endpoint (`CAP_EP.max_rx_ctx`): the largest `rx_ctx_cnt`.
    pub max_rx_ctx: u8,
    /// First PIDonFEP handed out (`CAP_PID_ON_FEP.first`).
    pub pid_first: u16,
    /// Number of PIDonFEP values (`CAP_PID_ON_FEP.count`).
    pub pid_count: u16,
    /// Most resource indices per endpoint (`CAP_RESOURCE_INDEX.max_per_endpoint`).
    pub ri_per_endpoint: u16,
    /// Size of the resource-index space (`CAP_RESOURCE_INDEX.space`), index 0 reserved.
    pub ri_space: u16,
    /// SES payload bytes per packet (`CAP_PROFILES.mtu`).
    pub mtu: u16,
    /// Profile bits 2:0 of `CAP_PROFILES` (AI Base, AI Full, HPC).
    pub profiles: u8,
    /// Largest message in bytes (`CAP_MAX_MSG`); longer than `mtu` means the TX engine
    /// segments and the RX engine reassembles.
    pub max_msg: u32,
    /// Multi-packet messages the RX engine reassembles at once, over all endpoints (no
    /// register: a model limit). A message beyond it is answered RC_UNDELIVERABLE.
    pub reassembly_slots: u16,
    /// Messages held per endpoint on the unexpected list, tagged and (since interface 1.17)
    /// untagged together (`CAP_TAGGED.unexpected_entries`).
    pub unexpected_entries: u16,
    /// Unexpected payload held per endpoint, KiB (`CAP_TAGGED.unexpected_kib`).
    pub unexpected_kib: u16,
    /// Memory regions registered at once, over all endpoints (no register: a model limit).
    /// MR_REGISTER beyond it completes NoResources.
    pub memory_regions: u32,
    /// DMA mappings the function's IOMMU holds at once (no register: the host's limit,
    /// [`DEFAULT_DMA_MAPPINGS`] as VFIO's). A map beyond it is refused, so that a client of
    /// the vfio-user server cannot make it hold a descriptor and a mapping per request
    /// without bound.
    pub dma_mappings: u32,
    /// Bytes the function's IOMMU maps at once, over all its mappings (no register: the
    /// host's limit, [`DEFAULT_DMA_BYTES`], as `RLIMIT_MEMLOCK` bounds what kernel VFIO pins).
    /// Each mapping takes as much of the simulator's address space, even of sparse memory
    /// that costs the client nothing: a map beyond it is refused, so that no client of the
    /// vfio-user server takes the address space every other function needs.
    pub dma_bytes: u64,
    /// Slots of the auth-key table (`CAP_AUTH_KEY.slots`), at most
    /// `uet_fwif::auth_key::MAX_AUTH_KEY_SLOTS`.
    pub auth_key_slots: u16,
    /// Largest group id an AV table may be created with (`CAP_PEER_GROUPS.max_group_id`);
    /// 0: no peer groups.
    pub max_group_id: u32,
    /// Largest admin ring (`CAP_QUEUES.max_admin_entries`).
    pub max_admin_entries: u16,
    /// Largest TX/RX/completion ring (`CAP_QUEUES.max_queue_entries`).
    pub max_queue_entries: u16,
    /// Host interface minor version the NIC implements (`REVISION.interface_minor`),
    /// [`OLDEST_INTERFACE_MINOR`] to [`uet_regs::INTERFACE_MINOR`]. Below the current one the
    /// NIC behaves as a device of that version: registers added later are absent (they read
    /// all ones and count in `BAD_REGISTER_ACCESSES`), AUTH_KEY_REMOVE before 1.9 takes no
    /// body (its bytes are reserved), and an AV entry before 1.10 may not carry `MAX_MSG_MTU`
    /// (an undefined bit). What a driver does on a NIC older than itself is tested this way.
    pub interface_minor: u8,
}

impl NicConfig {
    /// The reference model at `fabric_addr`: every limit is the `uet-regs` reset value.
    pub fn new(fabric_addr: IpAddr) -> Self {
        let av = CAP_AV.reset_value();
        let ep = CAP_EP.reset_value();
        let pid = CAP_PID_ON_FEP.reset_value();
        let ri = CAP_RESOURCE_INDEX.reset_value();
        let prof = CAP_PROFILES.reset_value();
        let q = CAP_QUEUES.reset_value();
        let mac = match fabric_addr {
            IpAddr::V4(a) => {
                let o = a.octets();
                [0x02, 0x00, o[0], o[1], o[2], o[3]]
            }
            IpAddr::V6(a) => {
                let o = a.octets();
                [0x02, 0x00, o[12], o[13], o[14], o[15]]
            }
        };
        NicConfig {
            fabric_addr,
            mac,
            serial: format!("SIM-{fabric_addr}"),
            model: "uet-nic reference model".to_string(),
            port_speed_mbps: 400_000,
            av_tables: av.max_tables(),
            av_entries: CAP_AV_ENTRIES.reset_value(),
            av_table_memory_entries: None,
            max_rx_ctx_bits: av.max_rx_ctx_bits(),
            endpoints: ep.max_endpoints(),
            max_tx_ctx: ep.max_tx_ctx(),
            max_rx_ctx: ep.max_rx_ctx(),
            pid_first: pid.first(),
            pid_count: pid.count(),
            ri_per_endpoint: ri.max_per_endpoint(),
            ri_space: ri.space(),
            mtu: prof.mtu(),
            profiles: (prof.into_bits() & 0b111) as u8,
            max_msg: CAP_MAX_MSG.reset_value(),
            reassembly_slots: DEFAULT_REASSEMBLY_SLOTS,
            unexpected_entries: CAP_TAGGED.reset_value().unexpected_entries(),
            unexpected_kib: CAP_TAGGED.reset_value().unexpected_kib(),
            memory_regions: DEFAULT_MEMORY_REGIONS,
            dma_mappings: DEFAULT_DMA_MAPPINGS,
            dma_bytes: DEFAULT_DMA_BYTES,
            auth_key_slots: CAP_AUTH_KEY.reset_value().slots(),
            max_group_id: CAP_PEER_GROUPS.reset_value(),
            max_admin_entries: q.max_admin_entries(),
            max_queue_entries: q.max_queue_entries(),
            interface_minor: uet_regs::INTERFACE_MINOR,
        }
    }

    /// Check that the configuration describes hardware the wire format can address.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.fabric_addr.is_unspecified() || self.fabric_addr.is_multicast() {
            return Err("fabric address must be a unicast address");
        }
        if self.av_tables == 0 || self.av_entries == 0 {
            return Err("at least one AV table of one entry");
        }
        if self.av_table_memory_entries == Some(0) {
            return Err("AV table memory of at least one entry");
        }
        if self.max_rx_ctx_bits > 32 {
            return Err("max_rx_ctx_bits above 32");
        }
        if self.endpoints == 0 {
            return Err("at least one endpoint");
        }
        if self.pid_count == 0 || u32::from(self.pid_first) + u32::from(self.pid_count) > 0x1000 {
            return Err("PIDonFEP range must be non-empty and within 12 bits");
        }
        if self.ri_space < 2 || self.ri_space > 0x1000 {
            return Err("resource-index space must be 2..=4096 (index 0 is reserved)");
        }
        if self.ri_per_endpoint == 0 || self.ri_per_endpoint >= self.ri_space {
            return Err("ri_per_endpoint must be 1..ri_space");
        }
        if self.mtu == 0 || self.mtu > MAX_MTU {
            return Err("mtu must be 1..=16383");
        }
        if self.max_msg < u32::from(self.mtu) || self.max_msg > MAX_MSG_LIMIT {
            return Err("max_msg must be mtu..=1 GiB");
        }
        if self.reassembly_slots == 0 {
            return Err("at least one reassembly slot");
        }
        if self.unexpected_entries == 0 || self.unexpected_kib == 0 {
            return Err("the unexpected list must hold at least one message and 1 KiB");
        }
        if self.memory_regions == 0 {
            return Err("at least one memory region");
        }
        if self.dma_mappings == 0 {
            return Err("at least one DMA mapping");
        }
        if self.auth_key_slots > uet_fwif::auth_key::MAX_AUTH_KEY_SLOTS {
            return Err("auth_key_slots above 256");
        }
        if self.profiles & !0b111 != 0 {
            return Err("unknown profile bits");
        }
        let ok_entries = |n: u16| n >= 2 && n.is_power_of_two();
        if !ok_entries(self.max_admin_entries) || !ok_entries(self.max_queue_entries) {
            return Err("queue limits must be powers of two, at least 2");
        }
        if !(OLDEST_INTERFACE_MINOR..=uet_regs::INTERFACE_MINOR).contains(&self.interface_minor) {
            return Err(
                "interface_minor outside OLDEST_INTERFACE_MINOR..=uet_regs::INTERFACE_MINOR",
            );
        }
        Ok(())
    }
}
