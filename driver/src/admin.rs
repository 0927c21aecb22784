//! The admin-queue client (firmware interface, `uet-fwif::admin`).
//!
//! One submission ring and one completion ring in DMA memory plus a scratch buffer for commands
//! that carry data (IDENTIFY, AV_WRITE, AV_INVALIDATE lists, AV_READ). Commands are executed one
//! at a time under the NIC's admin lock: the admin path programs tables, it is not the datapath.
//!
//! Submitting: write the 64-byte command at the SQ tail, advance the tail, fence, write
//! `ADMIN_SQ_DOORBELL`. Completing: poll the CQ entry at the head until its phase bit equals the
//! expected phase (acquire fence, then read the body), check its command id, advance the head
//! (flipping the expected phase on wrap) and write `ADMIN_CQ_HEAD`. A command that does not
//! complete within the timeout is reported with the device's fatal-error state, never waited on
//! forever.

use crate::dma::{DmaError, DmaRegion};
use crate::error::DriverError;
use crate::mapped::MappedRegion;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};
use uet_fwif::admin::{
    AdminCommand, AdminCompletion, Command, Opcode, Status, COMMAND_BYTES, COMPLETION_BYTES,
};
use uet_fwif::ring::RingGeometry;
use uet_regs::{
    AdminQueueSize, Mmio, RegisterAccess, RingIndex, ADMIN_CQ_BASE, ADMIN_CQ_HEAD,
    ADMIN_QUEUE_SIZE, ADMIN_SQ_BASE, ADMIN_SQ_DOORBELL, DEV_STATUS,
};
use zerocopy::little_endian::U16;

/// log2 of the admin ring sizes the driver uses.
pub const ADMIN_RING_LOG2: u8 = 6;
const ADMIN_GEOMETRY: RingGeometry = match RingGeometry::new(ADMIN_RING_LOG2) {
    Some(g) => g,
    None => panic!("admin ring size out of range"),
};
/// Bytes of scratch DMA memory for command data: enough for `MAX_BATCH` AV_WRITE records.
pub const SCRATCH_BYTES: usize = 8 << 20;
/// How long a command may take before the driver gives up on it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// The result words of a successful command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminResult {
    /// First result word.
    pub result0: u32,
    /// Second result word.
    pub result1: u32,
}

/// The driver's side of the admin queue pair.
pub struct AdminQueue {
    sq: MappedRegion,
    cq: MappedRegion,
    scratch: MappedRegion,
    geometry: RingGeometry,
    sq_tail: u16,
    cq_head: u16,
    cq_phase: bool,
    next_command_id: u16,
    timeout: Duration,
}

impl AdminQueue {
    /// Use already-mapped rings and scratch memory.
    pub(crate) fn new(sq: MappedRegion, cq: MappedRegion, scratch: MappedRegion) -> Self {
        AdminQueue {
            sq,
            cq,
            scratch,
            geometry: ADMIN_GEOMETRY,
            sq_tail: 0,
            cq_head: 0,
            cq_phase: true,
            next_command_id: 0,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Bytes each ring needs.
    pub(crate) fn ring_bytes() -> (usize, usize) {
        let n = 1usize << ADMIN_RING_LOG2;
        (n * COMMAND_BYTES, n * COMPLETION_BYTES)
    }

    /// Program the admin registers (datasheet: "Admin queue", before `DEV_CTRL.enable`).
    pub(crate) fn program(&mut self, bar: &dyn Mmio) -> Result<(), DmaError> {
        let (sq_len, cq_len) = Self::ring_bytes();
        self.sq.region().zero(0, sq_len)?;
        self.cq.region().zero(0, cq_len)?;
        self.sq_tail = 0;
        self.cq_head = 0;
        self.cq_phase = true;
        bar.write(ADMIN_SQ_BASE, self.sq.region().iova());
        bar.write(ADMIN_CQ_BASE, self.cq.region().iova());
        bar.write(
            ADMIN_QUEUE_SIZE,
            AdminQueueSize::new()
                .with_sq_log2(ADMIN_RING_LOG2)
                .with_cq_log2(ADMIN_RING_LOG2),
        );
        bar.write(ADMIN_CQ_HEAD, RingIndex::new().with_index(0));
        Ok(())
    }

    /// The scratch buffer for command data.
    pub fn scratch(&self) -> &DmaRegion {
        self.scratch.region()
    }

    /// Set how long a command may take.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Execute one command and wait for its completion.
    pub fn execute(&mut self, bar: &dyn Mmio, cmd: Command) -> Result<AdminResult, DriverError> {
        self.execute_raw(bar, cmd.encode(0))
    }

    /// Execute a submission entry as given (its command id is replaced by the queue's own).
    pub fn execute_raw(
        &mut self,
        bar: &dyn Mmio,
        mut entry: AdminCommand,
    ) -> Result<AdminResult, DriverError> {
        let opcode = entry.opcode;
        let command_id = self.next_command_id;
        self.next_command_id = self.next_command_id.wrapping_add(1);
        entry.command_id = U16::new(command_id);
        let slot = usize::from(self.sq_tail) * COMMAND_BYTES;
        self.sq.region().write_obj(slot, &entry)?;
        self.sq_tail = self.geometry.next(self.sq_tail);
        // The command must be in memory before the device sees the doorbell.
        fence(Ordering::SeqCst);
        bar.write(ADMIN_SQ_DOORBELL, RingIndex::new().with_index(self.sq_tail));
        let cqe = self.wait_completion(bar, opcode)?;
        if cqe.command_id.get() != command_id {
            return Err(DriverError::AdminProtocol(format!(
                "{}: completion for command id {} while waiting for {}",
                opcode_name(opcode),
                cqe.command_id.get(),
                command_id
            )));
        }
        match cqe.status() {
            Status::Success => Ok(AdminResult {
                result0: cqe.result0.get(),
                result1: cqe.result1.get(),
            }),
            status => Err(DriverError::AdminStatus { opcode, status }),
        }
    }

    fn wait_completion(
        &mut self,
        bar: &dyn Mmio,
        opcode: u8,
    ) -> Result<AdminCompletion, DriverError> {
        let slot = usize::from(self.cq_head) * COMPLETION_BYTES;
        let phase_offset = slot + uet_fwif::admin::COMPLETION_PHASE_OFFSET;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let phase = self.cq.region().read_u8(phase_offset)? & 1 != 0;
            if phase == self.cq_phase {
                break;
            }
            if start.elapsed() >= self.timeout {
                let status = bar.read(DEV_STATUS);
                return Err(DriverError::AdminTimeout {
                    opcode,
                    waited: self.timeout,
                    device_fatal: status.fatal(),
                    device_enabled: status.enabled(),
                });
            }
            spins += 1;
            if spins < 1024 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // Read the body only after seeing the phase the device wrote last.
        fence(Ordering::Acquire);
        let cqe: AdminCompletion = self.cq.region().read_obj(slot)?;
        self.cq_head = self.geometry.next(self.cq_head);
        if self.cq_head == 0 {
            self.cq_phase = !self.cq_phase;
        }
        bar.write(ADMIN_CQ_HEAD, RingIndex::new().with_index(self.cq_head));
        Ok(cqe)
    }
}

/// The datasheet name of an opcode byte, or its value when unknown.
pub fn opcode_name(opcode: u8) -> String {
    match Opcode::from_u8(opcode) {
        Some(op) => op.name().to_string(),
        None => format!("opcode {opcode:#04x}"),
    }
}
