//! The NIC top level: wires the blocks together and decodes BAR0 accesses into their actions.
//!
//! ## Function control
//!
//! * After reset `DEV_STATUS.ready` = 1 and the function is disabled.
//! * `DEV_CTRL.enable` 0 -> 1 checks the admin queue programming (the bases are 4 KiB aligned
//!   by construction: their registers hold IOVA bits 63:12 and drop the rest): each ring of
//!   `2^log2` entries with `log2` in 1..=15 and at most
//!   `CAP_QUEUES.max_admin_entries`. Bad programming sets `FATAL_ERROR.admin_queue`,
//!   `DEV_STATUS.fatal` and `INTR_CAUSE.fatal`; the function then stays stopped until
//!   FUNCTION_RESET. Good programming sets `DEV_STATUS.enabled`. When the admin ring
//!   programming is unchanged since the last enable, its indices carry over; otherwise the
//!   admin queue starts empty at index 0.
//! * `DEV_CTRL.enable` 1 -> 0 stops all processing and clears `DEV_STATUS.enabled`; every
//!   object is kept.
//! * Doorbells written while the function is not running are latched (`ADMIN_SQ_TAIL`, ring
//!   tails) and act once it runs. The AV doorbells (`AV_INVALIDATE_DOORBELL`,
//!   `AV_WRITE_DOORBELL`) are not queue doorbells: they change table memory directly, with no
//!   queue and no DMA, and act at once whether or not the function runs.
//! * FUNCTION_RESET (write 1): every endpoint, AV table, PDC and queue is destroyed, every
//!   register (counters included) returns to its reset value. DMA mappings are kept: they
//!   belong to the IOMMU. A request that was waiting in an endpoint's receive backlog is
//!   answered RC_DISABLED, as one arriving at a function that is not running, and the fabric
//!   runs until idle before the write returns.
//! * A DMA fault on the admin rings themselves is fatal (`FATAL_ERROR.dma_fault`); a DMA fault
//!   on an endpoint's own rings stops that endpoint only.
//!
//! Writes to `ADMIN_SQ_DOORBELL`, `ADMIN_CQ_HEAD`, `TXQ_DOORBELL`, `RXQ_DOORBELL`,
//! `TRXQ_DOORBELL`, `CQ_DOORBELL` and `DEV_CTRL` make the fabric run until idle before the
//! write returns. A `TRXQ_DOORBELL` for an endpoint without a tagged RX ring is ignored and
//! counted like any doorbell whose index lies outside its ring. Doorbells name an endpoint or
//! a context by its handle; a `TXQ_DOORBELL` for a context without the TX or CONTROL role, or
//! an `RXQ_DOORBELL` or `TRXQ_DOORBELL` for one without the RX or CONTROL role, is ignored and
//! counted (`doorbells_without_role`): the NIC never reads a ring its context may not use.
//!
//! ## Interface version
//!
//! The NIC decodes BAR0 as a device of its interface version ([`NicConfig::interface_minor`],
//! reported in `REVISION`): a register added by a later minor version (its
//! `RegInfo::since_minor`) is no register there. Its reads return all ones, its writes do
//! nothing, and both count in `BAD_REGISTER_ACCESSES`; the AV write window, its doorbell and
//! its burst path included.

use crate::admin_queue::AdminQueue;
use crate::auth_table::AuthTable;
use crate::av_table::AvTables;
use crate::av_window::{self, AvDoorbell};
use crate::config::NicConfig;
use crate::counters::Counters;
use crate::endpoint_table::EndpointTable;
use crate::iommu::Iommu;
use crate::mr_table::MrTable;
use crate::msix::{self, Msix};
use crate::pds::PdcTable;
use crate::regfile::{Decoded, Part, RegFile};
use crate::rx_engine::Reassembler;
use crate::tx_engine::{PendingPacket, PendingSend};
use std::collections::{HashMap, VecDeque};
use uet_fwif::admin::{CTX_ROLE_CONTROL, CTX_ROLE_RX, CTX_ROLE_TX};
use uet_fwif::datapath::{
    COMPLETION_BYTES, COMPLETION_FLAG_NO_MESSAGE, COMPLETION_FLAG_REPORT, COMPLETION_PHASE_OFFSET,
};
use uet_fwif::ring::phase_for_pass;
use uet_fwif::{Completion, CompletionKind, LocalStatus, ReturnCode};
use uet_regs::{
    Access, DevStatus, FatalError, RegInfo, Width, AV_WRITE_ENTRY_0, BAD_REGISTER_ACCESSES,
    DEV_STATUS, DMA_FAULTS, FATAL_ERROR, INTR_CAUSE,
};
use zerocopy::little_endian::U64;
use zerocopy::IntoBytes;

/// Which datapath doorbell was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueKind {
    Tx,
    Rx,
    TaggedRx,
    Cq,
}

/// One simulated NIC.
#[derive(Debug)]
pub(crate) struct Nic {
    pub cfg: NicConfig,
    pub regs: RegFile,
    pub counters: Counters,
    pub iommu: Iommu,
    pub admin: AdminQueue,
    pub avs: AvTables,
    /// The auth-key (JobID) table.
    pub auths: AuthTable,
    pub eps: EndpointTable,
    pub mrs: MrTable,
    pub pdcs: PdcTable,
    /// Packets awaiting their response, by (SPDCID, PSN).
    pub pending_tx: HashMap<(u16, u32), PendingPacket>,
    /// Sends (TX descriptors) with packets in flight, by an internal serial number.
    pub tx_messages: HashMap<u64, PendingSend>,
    /// Serial number of the next send.
    pub next_tx_msg: u64,
    /// Multi-packet messages being received.
    pub reasm: Reassembler,
    /// Requests to run through the receive path again (their endpoint went away).
    pub rx_replay: VecDeque<Vec<u8>>,
    /// Frames for the fabric.
    pub outbox: Vec<Vec<u8>>,
    /// Staging of the AV commands' DMA: AV_WRITE's records, AV_INVALIDATE's indices,
    /// AV_READ's entries.
    pub fw_buf: Vec<u8>,
    /// The AV write window's staged entry (`AV_WRITE_ENTRY_0..7`).
    pub av_window: av_window::AvWriteWindow,
    /// The MSI-X table, pending bits and triggers.
    pub msix: Msix,
}

fn all_ones(width: Width) -> u64 {
    match width {
        Width::W32 => u64::from(u32::MAX),
        Width::W64 => u64::MAX,
    }
}

impl Nic {
    pub(crate) fn new(cfg: NicConfig) -> Self {
        Nic {
            regs: RegFile::new(&cfg),
            counters: Counters::default(),
            iommu: Iommu::new(cfg.dma_mappings, cfg.dma_bytes),
            admin: AdminQueue::default(),
            avs: AvTables::new(cfg.av_tables),
            auths: AuthTable::new(cfg.auth_key_slots),
            eps: EndpointTable::new(cfg.endpoints, cfg.pid_first, cfg.pid_count, cfg.ri_space),
            mrs: MrTable::new(cfg.memory_regions),
            pdcs: PdcTable::default(),
            pending_tx: HashMap::new(),
            tx_messages: HashMap::new(),
            next_tx_msg: 0,
            reasm: Reassembler::default(),
            rx_replay: VecDeque::new(),
            outbox: Vec::new(),
            fw_buf: Vec::new(),
            av_window: av_window::AvWriteWindow::default(),
            msix: Msix::default(),
            cfg,
        }
    }

    /// Whether the function processes queues.
    pub(crate) fn running(&self) -> bool {
        let s = self.regs.get(DEV_STATUS);
        s.enabled() && !s.fatal()
    }

    /// Whether the NIC's interface version has register `reg` ([`NicConfig::interface_minor`]).
    #[inline]
    fn has(&self, reg: &RegInfo) -> bool {
        reg.present_at(self.cfg.interface_minor)
    }

    /// Decode a driver access as a device of the NIC's interface version does: a register
    /// added after it is no register (`None`, a bad access).
    #[inline]
    fn decode(&self, offset: u32, width: Width) -> Option<Decoded> {
        RegFile::decode(offset, width).filter(|d| self.has(d.info))
    }

    /// A driver read of BAR0.
    pub(crate) fn bar_read(&mut self, offset: u32, width: Width) -> u64 {
        if offset >= uet_regs::REGISTERS_SIZE {
            return match self.msix.read(offset, width) {
                msix::Access::Done(v) => v,
                msix::Access::Bad | msix::Access::NotMsix => {
                    self.counters.inc(BAD_REGISTER_ACCESSES);
                    all_ones(width)
                }
            };
        }
        let Some(d) = self.decode(offset, width) else {
            self.counters.inc(BAD_REGISTER_ACCESSES);
            return all_ones(width);
        };
        match self.counters.at_offset(d.info.offset) {
            Some(v) => match d.part {
                Part::Full => v,
                Part::Low => v & 0xFFFF_FFFF,
                Part::High => v >> 32,
            },
            None => self.regs.driver_read(&d),
        }
    }

    /// A burst of 64-bit driver writes from `offset`, in order; returns whether the fabric
    /// must run. A burst that lies wholly in the AV write window (a write-combined line on
    /// hardware: one transaction) is staged as one; any other is its writes one by one.
    pub(crate) fn bar_write_burst(&mut self, offset: u32, words: &[u64]) -> bool {
        if let Some(first) =
            av_window::burst_words(offset, words.len()).filter(|_| self.has(&AV_WRITE_ENTRY_0.info))
        {
            self.av_window.stage_words(first, words);
            return false;
        }
        let mut kick = false;
        let mut at = offset;
        for &w in words {
            kick |= self.bar_write(at, Width::W64, w);
            at = at.wrapping_add(8);
        }
        kick
    }

    /// A driver write of BAR0; returns whether the fabric must run.
    pub(crate) fn bar_write(&mut self, offset: u32, width: Width, value: u64) -> bool {
        // The AV doorbells, written once per AV entry, without the decode table; a 32-bit
        // half of one, or one the NIC's interface lacks, is decoded below.
        if let Some(doorbell) = full_width_doorbell(offset, width) {
            if self.has(doorbell.info()) {
                self.av_doorbell_written(doorbell, Part::Full, value);
                return false;
            }
        }
        if offset >= uet_regs::REGISTERS_SIZE {
            match self.msix.write(offset, width, value) {
                msix::Access::Done(_) => {}
                msix::Access::Bad | msix::Access::NotMsix => {
                    self.counters.inc(BAD_REGISTER_ACCESSES)
                }
            }
            return false;
        }
        let Some(d) = self.decode(offset, width) else {
            self.counters.inc(BAD_REGISTER_ACCESSES);
            return false;
        };
        if d.info.access == Access::Ro {
            return false; // identity, capabilities, status and counters: writes do nothing
        }
        // A 32-bit half of an AV doorbell: the two halves ring once (see `av_window`).
        if let Some(doorbell) = AvDoorbell::at(d.info.offset) {
            self.av_doorbell_written(doorbell, d.part, value);
            return false;
        }
        let w = self.regs.driver_write(&d, value);
        // The AV write window first: eight words per entry written, ahead of every doorbell.
        if let Some(word) = av_window::entry_word(w.info.offset) {
            self.av_window.stage(word, d.part, value);
            return false;
        }
        let v32 = w.value as u32;
        // Constant patterns: one jump on the offset, not a comparison per register.
        match w.info.offset {
            at::DEV_CTRL => {
                self.dev_ctrl_written(w.old & 1 != 0, w.new & 1 != 0);
                true
            }
            at::FUNCTION_RESET => {
                // The fabric runs so that the answers of the requests the reset let go leave.
                if w.value & 1 != 0 {
                    self.function_reset();
                    return true;
                }
                false
            }
            at::ADMIN_SQ_DOORBELL => {
                self.admin_doorbell(v32 as u16);
                true
            }
            at::ADMIN_CQ_HEAD => {
                self.admin_cq_head_written(w.old as u16, w.new as u16);
                true
            }
            at::TXQ_DOORBELL => {
                self.queue_doorbell(QueueKind::Tx, v32);
                true
            }
            at::RXQ_DOORBELL => {
                self.queue_doorbell(QueueKind::Rx, v32);
                true
            }
            at::CQ_DOORBELL => {
                self.queue_doorbell(QueueKind::Cq, v32);
                true
            }
            at::TRXQ_DOORBELL => {
                self.queue_doorbell(QueueKind::TaggedRx, v32);
                true
            }
            at::CQ_ARM => {
                self.cq_arm(uet_regs::CqArm::from_bits(v32));
                false
            }
            at::ADMIN_ARM => {
                self.admin_arm(uet_regs::AdminArm::from_bits(v32));
                false
            }
            _ => false,
        }
    }

    fn dev_ctrl_written(&mut self, was: bool, now: bool) {
        if !was && now {
            if self.regs.get(DEV_STATUS).fatal() {
                return;
            }
            if self.admin_enable() {
                self.regs.update(DEV_STATUS, |s| s.with_enabled(true));
            } else {
                self.fatal(FatalError::new().with_admin_queue(true));
            }
        } else if was && !now {
            self.regs.update(DEV_STATUS, |s| s.with_enabled(false));
        }
    }

    /// Stop the function with a fatal error.
    pub(crate) fn fatal(&mut self, cause: FatalError) {
        self.regs.update(FATAL_ERROR, |f| {
            FatalError::from_bits(f.into_bits() | cause.into_bits())
        });
        self.regs
            .update(DEV_STATUS, |s| s.with_fatal(true).with_enabled(false));
        self.regs.update(INTR_CAUSE, |i| i.with_fatal(true));
        tracing::warn!(nic = %self.cfg.fabric_addr, ?cause, "fatal error");
    }

    /// FUNCTION_RESET.
    pub(crate) fn function_reset(&mut self) {
        // Requests taken off the wire and waiting for completion-ring room (or for the receive
        // path again) go with their endpoints, but their senders wait for an answer: each is
        // answered as a request reaching a function that is not running.
        let mut waiting: Vec<Vec<u8>> = self.rx_replay.drain(..).collect();
        for h in self.eps.handles() {
            if let Some(ep) = self.eps.get_mut(h) {
                waiting.extend(ep.rx_backlog.drain(..));
            }
        }
        self.regs.reset();
        self.regs.set(DEV_STATUS, DevStatus::new().with_ready(true));
        self.counters.reset();
        self.msix.sent = msix::Sent::default();
        self.admin = AdminQueue::default();
        self.avs.clear();
        self.auths.clear();
        self.eps.clear();
        self.mrs.clear();
        self.pdcs.clear();
        self.pending_tx.clear();
        self.tx_messages.clear();
        self.reasm.clear();
        self.rx_replay.clear();
        self.outbox.clear();
        self.av_window = av_window::AvWriteWindow::default();
        for f in waiting {
            self.receive(&f);
        }
    }

    /// Count a DMA fault.
    pub(crate) fn dma_fault(&mut self) {
        self.counters.inc(DMA_FAULTS);
    }

    /// One pass over all pending work; returns whether anything moved.
    pub(crate) fn poll(&mut self) -> bool {
        if !self.running() {
            return false;
        }
        let mut progress = self.admin_poll();
        while let Some(f) = self.rx_replay.pop_front() {
            self.receive(&f);
            progress = true;
        }
        for h in self.eps.handles() {
            progress |= self.flush_completions(h);
            progress |= self.rx_backlog_poll(h);
            progress |= self.rx_group_poll(h);
            progress |= self.trx_poll(h);
            progress |= self.untagged_unexpected_poll(h);
            progress |= self.tx_poll(h);
        }
        progress
    }

    /// Refuse a receive descriptor the driver posted malformed: a BadDescriptor completion
    /// with its context, no source (`FI_ADDR_NOTAVAIL`) and no data.
    pub(crate) fn refuse_rx_descriptor(&mut self, handle: u16, kind: CompletionKind, context: U64) {
        let c = unfilled_receive(
            context,
            kind,
            LocalStatus::BadDescriptor,
            ReturnCode::Undeliverable,
        );
        self.post_completion(handle, c);
    }

    /// Queue a completion for an endpoint's completion ring and write what fits. Receive
    /// completions count in the endpoint's counters here (a multi-receive buffer's release
    /// that carries no message does not).
    pub(crate) fn post_completion(&mut self, handle: u16, c: Completion) {
        if let Some(ep) = self.eps.get_mut(handle) {
            // A multi-receive release and a probe's report carry no message.
            let release_only = c.flags & (COMPLETION_FLAG_NO_MESSAGE | COMPLETION_FLAG_REPORT) != 0;
            if c.kind != CompletionKind::Send as u8 && !release_only {
                let s = &mut ep.stats;
                let status = LocalStatus::from_u8(c.status);
                if matches!(status, LocalStatus::Ok | LocalStatus::Truncated) {
                    s.rx_messages = s.rx_messages.wrapping_add(1);
                    s.rx_bytes = s.rx_bytes.wrapping_add(u64::from(c.len.get()));
                    if c.kind == CompletionKind::TaggedRecv as u8 {
                        s.rx_tagged_messages = s.rx_tagged_messages.wrapping_add(1);
                    }
                } else {
                    s.rx_errors = s.rx_errors.wrapping_add(1);
                }
            }
            ep.pending_cqes.push_back(c);
            self.flush_completions(handle);
        }
    }

    /// Write queued completions while the ring has room: body, release fence, phase byte.
    pub(crate) fn flush_completions(&mut self, handle: u16) -> bool {
        let mut progress = false;
        while let Some(ep) = self.eps.get_mut(handle) {
            if ep.faulted || ep.cq.free() == 0 {
                break;
            }
            let Some(mut c) = ep.pending_cqes.front().copied() else {
                break;
            };
            c.phase = u8::from(phase_for_pass(ep.cq.pass));
            let addr = ep.cq.base + u64::from(ep.cq.tail) * COMPLETION_BYTES as u64;
            let bytes = c.as_bytes();
            let (body, phase) = bytes.split_at(COMPLETION_PHASE_OFFSET);
            if self
                .iommu
                .write_entry_phase_last(addr, body, phase)
                .is_err()
            {
                ep.faulted = true;
                self.counters.debug.endpoint_ring_faults += 1;
                self.counters.inc(DMA_FAULTS);
                break;
            }
            ep.pending_cqes.pop_front();
            ep.cq.tail = ep.cq.geom.next(ep.cq.tail);
            if ep.cq.tail == 0 {
                ep.cq.pass += 1;
            }
            if let Some(vector) = ep.cq.armed.take() {
                self.msix.raise_for_ring(vector, handle);
            }
            self.regs.update(INTR_CAUSE, |i| i.with_completion(true));
            progress = true;
        }
        progress
    }

    /// `CQ_ARM`: raise `vector` once the endpoint's completion ring holds a completion the
    /// driver has not freed; at once when it holds one already.
    fn cq_arm(&mut self, arm: uet_regs::CqArm) {
        let vector = arm.vector();
        let Some(ep) = self
            .eps
            .get_mut(arm.endpoint())
            .filter(|_| vector < uet_regs::pci::MSIX_VECTORS)
        else {
            self.counters.debug.bad_cq_arms += 1;
            return;
        };
        if ep.cq.geom.used(ep.cq.head, ep.cq.tail) > 0 {
            ep.cq.armed = None;
            self.msix.raise_for_ring(vector, arm.endpoint());
        } else {
            ep.cq.armed = Some(vector);
        }
    }

    /// The model-internal counters, the MSI-X block's message counts among them.
    pub(crate) fn debug_counters(&self) -> crate::DebugCounters {
        crate::DebugCounters {
            msix_messages: self.msix.sent.delivered,
            msix_unclaimed: self.msix.sent.unclaimed,
            ..self.counters.debug
        }
    }

    /// Stop an endpoint whose own ring could not be accessed.
    pub(crate) fn ring_fault(&mut self, handle: u16) {
        self.counters.inc(DMA_FAULTS);
        self.counters.debug.endpoint_ring_faults += 1;
        if let Some(ep) = self.eps.get_mut(handle) {
            ep.faulted = true;
        }
    }

    fn queue_doorbell(&mut self, kind: QueueKind, raw: u32) {
        let db = uet_regs::QueueDoorbell::from_bits(raw);
        let index = db.index();
        let Some(ep) = self.eps.get_mut(db.endpoint()) else {
            self.counters.debug.unknown_endpoint_doorbells += 1;
            return;
        };
        // The roles of which the context needs one to use the ring (every context has a CQ).
        let needs = match kind {
            QueueKind::Tx => Some(CTX_ROLE_TX | CTX_ROLE_CONTROL),
            QueueKind::Rx | QueueKind::TaggedRx => Some(CTX_ROLE_RX | CTX_ROLE_CONTROL),
            QueueKind::Cq => None,
        };
        if needs.is_some_and(|roles| ep.role & roles == 0) {
            self.counters.debug.doorbells_without_role += 1;
            return;
        }
        let ok = match kind {
            QueueKind::Tx if ep.tx.geom.contains(index) => {
                ep.tx.tail = index;
                true
            }
            QueueKind::Rx if ep.rx.geom.contains(index) => {
                ep.rx.tail = index;
                true
            }
            QueueKind::TaggedRx => match ep.trx.as_mut() {
                Some(r) if r.geom.contains(index) => {
                    r.tail = index;
                    true
                }
                _ => false,
            },
            QueueKind::Cq if ep.cq.geom.contains(index) => {
                // The driver may only return entries the NIC has written.
                let g = ep.cq.geom;
                if g.used(ep.cq.head, index) <= g.used(ep.cq.head, ep.cq.tail) {
                    ep.cq.head = index;
                    // Every completion consumed: a vector the ring left pending has nothing
                    // left to report.
                    if g.used(index, ep.cq.tail) == 0 {
                        self.msix.withdraw_ring(db.endpoint());
                    }
                    true
                } else {
                    false
                }
            }
            _ => false,
        };
        if !ok {
            self.counters.debug.bad_doorbells += 1;
        }
    }
}

/// The AV doorbell a full-width write at `offset` rings, if it is one: the registers
/// written once per AV entry (one remove, or one entry through the write window), decoded
/// straight from the offset. Any other access takes the decoder.
#[inline]
fn full_width_doorbell(offset: u32, width: Width) -> Option<AvDoorbell> {
    if width != Width::W64 {
        return None;
    }
    AvDoorbell::at(offset)
}

/// The offsets of the registers whose writes act, as constants to match on.
mod at {
    pub(super) const DEV_CTRL: u32 = uet_regs::DEV_CTRL.offset();
    pub(super) const FUNCTION_RESET: u32 = uet_regs::FUNCTION_RESET.offset();
    pub(super) const ADMIN_SQ_DOORBELL: u32 = uet_regs::ADMIN_SQ_DOORBELL.offset();
    pub(super) const ADMIN_CQ_HEAD: u32 = uet_regs::ADMIN_CQ_HEAD.offset();
    pub(super) const TXQ_DOORBELL: u32 = uet_regs::TXQ_DOORBELL.offset();
    pub(super) const RXQ_DOORBELL: u32 = uet_regs::RXQ_DOORBELL.offset();
    pub(super) const CQ_DOORBELL: u32 = uet_regs::CQ_DOORBELL.offset();
    pub(super) const TRXQ_DOORBELL: u32 = uet_regs::TRXQ_DOORBELL.offset();
    pub(super) const CQ_ARM: u32 = uet_regs::CQ_ARM.offset();
    pub(super) const ADMIN_ARM: u32 = uet_regs::ADMIN_ARM.offset();
}

/// The completion of a receive that ends with no message in it (refused, withdrawn):
/// `context` and `kind` as posted, no source (`FI_ADDR_NOTAVAIL`), no data.
pub(crate) fn unfilled_receive(
    context: U64,
    kind: CompletionKind,
    status: LocalStatus,
    return_code: ReturnCode,
) -> Completion {
    Completion {
        context,
        src_addr: U64::new(uet_fwif::FI_ADDR_NOTAVAIL),
        status: status as u8,
        return_code: return_code as u8,
        kind: kind as u8,
        ..Completion::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use uet_regs::{AV_INVALIDATE_DOORBELL, AV_WRITE_DOORBELL, DEV_CTRL, TXQ_DOORBELL};

    /// The AV doorbells' direct decode acts exactly as the register decoder would: the same
    /// defined bits reach the handler, the register file keeps nothing, and every other
    /// access (a 32-bit half, another register) is left to the decoder.
    #[test]
    fn hot_doorbells_decode_as_the_register_file_does() {
        let mut regs = RegFile::new(&NicConfig::new(Ipv4Addr::new(10, 0, 0, 1).into()));
        let values = [
            0,
            1,
            u64::MAX,
            0xDEAD_BEEF_0123_4567,
            1 << 63,
            0xFFFF_FFFF,
            0xFFFF_FFFF_0000_0000,
        ];
        for reg in [AV_INVALIDATE_DOORBELL.info, AV_WRITE_DOORBELL.info] {
            for v in values {
                let d = RegFile::decode(reg.offset, Width::W64).expect("a register");
                let w = regs.driver_write(&d, v);
                assert_eq!(regs.raw(d.index), 0, "{} keeps nothing", reg.name);
                let hot = match full_width_doorbell(reg.offset, Width::W64) {
                    Some(doorbell) => {
                        assert_eq!(doorbell.info().offset, reg.offset);
                        v & doorbell.mask()
                    }
                    None => panic!("{} not decoded", reg.name),
                };
                assert_eq!(hot, w.value, "{} {v:#x}", reg.name);
            }
            assert!(full_width_doorbell(reg.offset, Width::W32).is_none());
            assert!(full_width_doorbell(reg.offset + 4, Width::W32).is_none());
        }
        assert!(full_width_doorbell(DEV_CTRL.offset(), Width::W64).is_none());
        assert!(full_width_doorbell(TXQ_DOORBELL.offset(), Width::W64).is_none());
    }
}
