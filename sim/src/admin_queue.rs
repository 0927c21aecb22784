//! Admin queue engine.
//!
//! The submission ring (`ADMIN_SQ_BASE`, `2^sq_log2` entries of 64 bytes) and the completion
//! ring (`ADMIN_CQ_BASE`, `2^cq_log2` entries of 16 bytes) live in host memory; their geometry
//! is latched when the function is enabled.
//!
//! * `ADMIN_SQ_DOORBELL` latches the new tail in `ADMIN_SQ_TAIL`. An index outside the ring is
//!   ignored (and counted in the model's `bad_doorbells`).
//! * While running, the engine consumes commands from `ADMIN_SQ_HEAD` up to the tail, in order:
//!   it copies the 64-byte command, advances `ADMIN_SQ_HEAD`, decodes it with
//!   `AdminCommand::decode`, executes it (see [`crate::firmware`]) and writes one 16-byte
//!   completion at its CQ tail: `result0`, `result1`, `sq_head`, `command_id`, `status` first,
//!   then a release fence, then the phase word (phase 1 on the first pass, flipping each
//!   wrap). `ADMIN_COMMANDS` counts every command, `ADMIN_ERRORS` those whose status is not
//!   success, and `INTR_CAUSE.admin` is set.
//! * `ADMIN_ARM` (interface 1.15) arms the completion ring: the next completion written
//!   raises the MSI-X vector it names, once, and disarms the ring; arming while the ring
//!   holds a completion the driver has not consumed (the CQ tail is not `ADMIN_CQ_HEAD`)
//!   raises it at once instead. The vector is raised for the host, not for a ring: a pending
//!   bit it sets while masked is not withdrawn when the driver consumes the completions
//!   (unmasking then sends a message that finds nothing new, which a driver tolerates).
//!   A vector outside the MSI-X table is ignored and counted (`bad_admin_arms`); the other
//!   writes are counted in `admin_arms`. The arm survives a stop and a new enable;
//!   `FUNCTION_RESET` and a function-level reset drop it.
//! * The device never overwrites an entry the driver has not consumed: with one slot always
//!   kept empty, the engine stops when the CQ is full and resumes when `ADMIN_CQ_HEAD` moves.
//!   A CQ head write outside the ring, or past what the device has written, is ignored (the
//!   register keeps its previous value) and counted.
//! * A DMA fault reading the SQ or writing the CQ stops the function: `FATAL_ERROR.dma_fault`,
//!   `DEV_STATUS.fatal`, `DMA_FAULTS`.

use crate::nic::Nic;
use uet_fwif::admin::{AdminCompletion, COMMAND_BYTES, COMPLETION_BYTES, COMPLETION_PHASE_OFFSET};
use uet_fwif::ring::{phase_for_pass, RingGeometry};
use uet_fwif::{AdminCommand, Status};
use uet_regs::{
    FatalError, RingIndex, ADMIN_COMMANDS, ADMIN_CQ_BASE, ADMIN_CQ_HEAD, ADMIN_ERRORS,
    ADMIN_QUEUE_SIZE, ADMIN_SQ_BASE, ADMIN_SQ_HEAD, ADMIN_SQ_TAIL, DMA_FAULTS, INTR_CAUSE,
};
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, IntoBytes};

/// The admin rings as latched at enable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AdminRings {
    sq_base: u64,
    sq: RingGeometry,
    cq_base: u64,
    cq: RingGeometry,
}

/// Admin queue state the registers do not show.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AdminQueue {
    rings: Option<AdminRings>,
    cq_tail: u16,
    cq_pass: u64,
    /// The vector `ADMIN_ARM` asked for, raised (once) by the next completion written.
    armed: Option<u16>,
}

impl Nic {
    /// Latch and check the admin programming at enable; false when it is invalid.
    pub(crate) fn admin_enable(&mut self) -> bool {
        let sq_base = self.regs.get(ADMIN_SQ_BASE);
        let cq_base = self.regs.get(ADMIN_CQ_BASE);
        let size = self.regs.get(ADMIN_QUEUE_SIZE);
        let max = u32::from(self.cfg.max_admin_entries);
        let geom = |log2: u8| RingGeometry::new(log2).filter(|g| g.entries() <= max);
        let (Some(sq), Some(cq)) = (geom(size.sq_log2()), geom(size.cq_log2())) else {
            return false;
        };
        // The base registers hold IOVA bits 63:12 only: both bases are 4 KiB aligned.
        let fits = |base: u64, g: RingGeometry, bytes: usize| {
            base.checked_add(u64::from(g.entries()) * bytes as u64)
                .is_some()
        };
        if !fits(sq_base, sq, COMMAND_BYTES) || !fits(cq_base, cq, COMPLETION_BYTES) {
            return false;
        }
        let rings = AdminRings {
            sq_base,
            sq,
            cq_base,
            cq,
        };
        if self.admin.rings != Some(rings) {
            self.admin = AdminQueue {
                rings: Some(rings),
                cq_tail: 0,
                cq_pass: 0,
                // New rings hold nothing to raise for; the arm waits for their first.
                armed: self.admin.armed,
            };
            let tail = self.regs.get(ADMIN_SQ_TAIL).index();
            if !sq.contains(tail) {
                self.counters.debug.bad_doorbells += 1;
                self.regs.set(ADMIN_SQ_TAIL, RingIndex::new());
            }
            self.regs.set(ADMIN_SQ_HEAD, RingIndex::new());
            self.regs.set(ADMIN_CQ_HEAD, RingIndex::new());
        }
        true
    }

    /// `ADMIN_SQ_DOORBELL` written.
    pub(crate) fn admin_doorbell(&mut self, index: u16) {
        if let Some(r) = self.admin.rings {
            if !r.sq.contains(index) {
                self.counters.debug.bad_doorbells += 1;
                return;
            }
        }
        self.regs
            .set(ADMIN_SQ_TAIL, RingIndex::new().with_index(index));
    }

    /// `ADMIN_CQ_HEAD` written (the register already holds `new`).
    pub(crate) fn admin_cq_head_written(&mut self, old: u16, new: u16) {
        let Some(r) = self.admin.rings else {
            return;
        };
        let ok = r.cq.contains(new) && r.cq.used(old, new) <= r.cq.used(old, self.admin.cq_tail);
        if !ok {
            self.counters.debug.bad_doorbells += 1;
            self.regs
                .set(ADMIN_CQ_HEAD, RingIndex::new().with_index(old));
        }
    }

    /// `ADMIN_ARM`: raise `vector` once the completion ring holds a completion the driver has
    /// not consumed; at once when it holds one already.
    pub(crate) fn admin_arm(&mut self, arm: uet_regs::AdminArm) {
        let vector = arm.vector();
        if vector >= uet_regs::pci::MSIX_VECTORS {
            self.counters.debug.bad_admin_arms += 1;
            return;
        }
        self.counters.debug.admin_arms += 1;
        let unconsumed = self.admin.rings.is_some_and(|r| {
            r.cq.used(self.regs.get(ADMIN_CQ_HEAD).index(), self.admin.cq_tail) > 0
        });
        if unconsumed {
            self.admin.armed = None;
            self.msix.raise(vector);
        } else {
            self.admin.armed = Some(vector);
        }
    }

    fn admin_dma_fatal(&mut self) {
        self.counters.inc(DMA_FAULTS);
        self.fatal(FatalError::new().with_dma_fault(true));
    }

    /// Run admin commands while there are some and the CQ has room.
    pub(crate) fn admin_poll(&mut self) -> bool {
        let Some(r) = self.admin.rings else {
            return false;
        };
        let mut progress = false;
        while self.running() {
            let head = self.regs.get(ADMIN_SQ_HEAD).index();
            let tail = self.regs.get(ADMIN_SQ_TAIL).index();
            if head == tail || !r.sq.contains(head) {
                break;
            }
            let cq_head = self.regs.get(ADMIN_CQ_HEAD).index();
            if r.cq.free(cq_head, self.admin.cq_tail) == 0 {
                break;
            }
            let mut raw = [0u8; COMMAND_BYTES];
            let at = r.sq_base + u64::from(head) * COMMAND_BYTES as u64;
            if self.iommu.read(at, &mut raw).is_err() {
                self.admin_dma_fatal();
                break;
            }
            let Ok(cmd) = AdminCommand::read_from_bytes(&raw) else {
                break;
            };
            let new_head = r.sq.next(head);
            self.regs
                .set(ADMIN_SQ_HEAD, RingIndex::new().with_index(new_head));
            let (status, result0, result1) = self.execute(&cmd);
            tracing::debug!(
                nic = %self.cfg.fabric_addr,
                opcode = cmd.opcode,
                command_id = cmd.command_id.get(),
                ?status,
                "admin command"
            );
            self.counters.inc(ADMIN_COMMANDS);
            if status != Status::Success {
                self.counters.inc(ADMIN_ERRORS);
            }
            let cqe = AdminCompletion {
                result0: U32::new(result0),
                result1: U32::new(result1),
                sq_head: U16::new(new_head),
                command_id: cmd.command_id,
                status: U16::new(status as u16),
                phase: U16::new(u16::from(phase_for_pass(self.admin.cq_pass))),
            };
            let at = r.cq_base + u64::from(self.admin.cq_tail) * COMPLETION_BYTES as u64;
            let (body, phase) = cqe.as_bytes().split_at(COMPLETION_PHASE_OFFSET);
            if self.iommu.write_entry_phase_last(at, body, phase).is_err() {
                self.admin_dma_fatal();
                break;
            }
            self.admin.cq_tail = r.cq.next(self.admin.cq_tail);
            if self.admin.cq_tail == 0 {
                self.admin.cq_pass += 1;
            }
            self.regs.update(INTR_CAUSE, |i| i.with_admin(true));
            if let Some(vector) = self.admin.armed.take() {
                self.msix.raise(vector);
            }
            progress = true;
        }
        progress
    }
}
