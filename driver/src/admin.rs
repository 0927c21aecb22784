//! The admin-queue client (firmware interface, `uet-fwif::admin`).
//!
//! One submission ring and one completion ring in DMA memory plus a scratch buffer for the
//! data of synchronous commands (IDENTIFY, AV_WRITE, AV_WRITE_PEERS, AV_INVALIDATE lists,
//! AV_READ). The queue lives under the NIC's admin lock: the admin path programs tables, it
//! is not the datapath.
//!
//! Several commands may be outstanding. Submitting: write the 64-byte command at the SQ tail
//! with a fresh command id, advance the tail, fence, write `ADMIN_SQ_DOORBELL`; at most
//! ring size − 1 commands are outstanding (a full queue first collects completions, then waits
//! for one, up to the timeout; a command that finds no room is not submitted,
//! [`DriverError::AdminRingFull`]). Completing ([`AdminQueue::reap`]): consume every CQ entry whose phase bit equals
//! the expected phase (acquire fence, then read the body), advance the head (flipping the
//! expected phase on wrap), write `ADMIN_CQ_HEAD`, and file the completion under its command id
//! until its owner takes it ([`AdminQueue::poll_command`]). Completions arrive in whatever order
//! the firmware finishes commands; nothing depends on the order.
//!
//! [`AdminQueue::execute`] is submit + wait on the same mechanism, so a synchronous command
//! collects (and files) the completions of asynchronous ones that arrive before its own. An
//! asynchronous command (an `FI_EVENT` AV_WRITE, [`crate::av`]) carries its data in DMA memory
//! of its own, not the scratch buffer, and is completed by whoever polls it. A command that does
//! not complete within the timeout is reported with the device's fatal-error state and
//! abandoned (its completion, should it come, is dropped), never waited on forever. Until that
//! completion comes, or the queue is programmed again after a reset, the scratch buffer is
//! lent to no other command ([`AdminQueue::scratch`] refuses): a late device must not take the
//! next command's data for the abandoned one's. A creation that completes late (an AV table,
//! an endpoint or context, a memory region, an auth-key slot: its caller was told it failed, so
//! nobody owns it)
//! is destroyed by a command the queue submits ahead of the next one (see `undo_of` for what
//! is not).

use crate::dma::{DmaError, DmaRegion};
use crate::error::DriverError;
use crate::mapped::MappedRegion;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};
use uet_fwif::admin::{
    AdminCommand, AdminCompletion, Command, MrDeregisterBody, MrRegisterBody, Opcode, Status,
    COMMAND_BYTES, COMPLETION_BYTES,
};
use uet_fwif::auth_key::{AuthKeyAddBody, AuthKeyRemoveBody};
use uet_fwif::ring::RingGeometry;
use uet_regs::{
    AdminQueueSize, Mmio, RegisterAccess, RingIndex, ADMIN_CQ_BASE, ADMIN_CQ_HEAD,
    ADMIN_QUEUE_SIZE, ADMIN_SQ_BASE, ADMIN_SQ_DOORBELL, DEV_STATUS, FATAL_ERROR,
};
use zerocopy::little_endian::{U16, U64};
use zerocopy::{FromBytes, FromZeros};

/// log2 of the admin ring size the driver uses: 64 entries, or the largest power of two the
/// device allows (`CAP_QUEUES.max_admin_entries`) when that is smaller ([`admin_geometry`]).
pub const ADMIN_RING_LOG2: u8 = 6;

/// The admin ring geometry for a device whose rings hold at most `max_entries` entries
/// (`CAP_QUEUES.max_admin_entries`; datasheet "Admin queue": `ADMIN_QUEUE_SIZE` must not
/// exceed it): [`ADMIN_RING_LOG2`], or the largest power of two within `max_entries`. `None`
/// when the device allows fewer than 2 entries, which no ring can work with (one entry is
/// always left empty to tell a full ring from an empty one).
pub fn admin_geometry(max_entries: u16) -> Option<RingGeometry> {
    if max_entries < 2 {
        return None;
    }
    let log2 = (u16::BITS - 1 - max_entries.leading_zeros()) as u8;
    RingGeometry::new(log2.min(ADMIN_RING_LOG2))
}
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

/// Where a submitted command is.
enum Slot {
    /// Submitted; no completion yet.
    ///
    /// `waiting_since` is when a poll first found the command still in flight: the timeout
    /// runs from there, so a command the device has completed by the first poll (every
    /// command of the in-process simulator, most on hardware) costs no clock read.
    Outstanding {
        opcode: u8,
        waiting_since: Option<Instant>,
        /// The command's data is in the scratch buffer ([`AdminQueue::scratch`] was taken
        /// for it).
        uses_scratch: bool,
        /// What the undo of the command needs besides its completion ([`undo_of`]).
        undo_key: u64,
    },
    /// Completed; the completion waits for its owner.
    Done { opcode: u8, cqe: AdminCompletion },
    /// Given up on (timed out); its completion is dropped when it arrives, and what a late
    /// creation made is destroyed ([`undo_of`]).
    Abandoned { opcode: u8, undo_key: u64 },
    /// Submitted by the queue itself (the undo of a late creation, or a destroy retried
    /// behind undoes); its completion is dropped, and with a success (or the object already
    /// gone) the memory the destroy held is freed.
    Discard { held: Option<Held> },
}

/// Memory the device may use until a destroy completes: freed once it has.
pub(crate) type Held = Box<dyn Send>;

/// The error of an undo that could not be submitted, as the error of the caller's command
/// `opcode`, which was not submitted either.
fn not_submitted_as(e: DriverError, opcode: u8) -> DriverError {
    match e {
        DriverError::AdminRingFull {
            waited,
            device_enabled,
            ..
        } => DriverError::AdminRingFull {
            opcode,
            waited,
            device_enabled,
        },
        DriverError::AdminDeviceFatal {
            waited,
            fatal_error,
            submitted: false,
            ..
        } => DriverError::AdminDeviceFatal {
            opcode,
            waited,
            fatal_error,
            submitted: false,
        },
        // A reset seen while the undo waited for room: nothing of the caller's
        // command reached the device either.
        DriverError::FunctionReset { sq_base, ring, .. } => DriverError::FunctionReset {
            opcode,
            sq_base,
            ring,
            submitted: false,
        },
        e => e,
    }
}

/// The command that destroys what a creation `opcode` that completed with `result0` made:
/// the undo of a command the driver gave up on, whose caller was told it failed. Only
/// handles nobody else can free qualify: nobody knows them, so between the late creation
/// and its undo no other command can free the handle and have the NIC hand it out again.
/// An auth-key slot (AUTH_KEY_ADD) is undone by AUTH_KEY_REMOVE with the owner check
/// (`AUTH_KEY_REMOVE_CHECK_OWNER`, interface 1.9) naming the AV table and the JobID of the
/// add (`undo_key`: AV handle << 32 | JobID): the AV may have been destroyed meanwhile, which
/// frees the slot for another AV's key, and a remove by number alone could take that key;
/// the check makes the NIC refuse it instead. A device older than 1.9 would refuse the body,
/// so on one the queue sends no undo ([`AdminQueue::undo_auth_key_adds`]) and the slot goes
/// with its AV (AV_DESTROY frees it).
///
/// A memory region (MR_REGISTER) is undone by MR_DEREGISTER of its handle and key
/// (`undo_key`, kept from the command since the completion does not carry it): MR handles are
/// not reused before 2^32 registrations and MR_DEREGISTER checks the key as well
/// (`uet_fwif::admin`, "Memory regions"), so even if the endpoint went meanwhile, taking the
/// region with it, the undo cannot remove another region.
///
/// `owner_checked_remove`: whether the device checks the owner of an AUTH_KEY_REMOVE.
fn undo_of(opcode: u8, result0: u32, undo_key: u64, owner_checked_remove: bool) -> Option<Command> {
    Some(match Opcode::from_u8(opcode)? {
        Opcode::AuthKeyAdd if owner_checked_remove => Command::AuthKeyRemove {
            slot: result0,
            body: AuthKeyRemoveBody::owned_by((undo_key >> 32) as u32, undo_key as u32),
        },
        Opcode::MrRegister => {
            let mut body = MrDeregisterBody::new_zeroed();
            body.key = U64::new(undo_key);
            Command::MrDeregister { mr: result0, body }
        }
        Opcode::AvCreate => Command::AvDestroy { av: result0 },
        // result0: endpoint handle | PIDonFEP << 16.
        Opcode::EndpointCreate => Command::EndpointDestroy {
            endpoint: result0 & 0xFFFF,
        },
        Opcode::ContextCreate => Command::EndpointDestroy { endpoint: result0 },
        _ => return None,
    })
}

/// The `undo_key` of a submitted command ([`undo_of`]): an MR_REGISTER's memory key, an
/// AUTH_KEY_ADD's AV handle << 32 | JobID; 0 for every other command.
fn undo_key(entry: &AdminCommand) -> u64 {
    if entry.opcode == Opcode::AuthKeyAdd as u8 {
        let job_id =
            AuthKeyAddBody::read_from_prefix(&entry.body).map_or(0, |(b, _)| b.job_id.get());
        return u64::from(entry.handle.get()) << 32 | u64::from(job_id);
    }
    if entry.opcode != Opcode::MrRegister as u8 {
        return 0;
    }
    MrRegisterBody::read_from_prefix(&entry.body).map_or(0, |(body, _)| body.key.get())
}

/// Entries of the command table: twice the largest ring, so a free entry is always within
/// reach of the next command id while at most a ring's worth of commands is outstanding.
const COMMAND_TABLE: usize = 2 << ADMIN_RING_LOG2;

/// Commands submitted and not yet taken, by command id: a fixed table indexed by the id's low
/// bits, so filing a command or a completion costs an array access, not a hash.
///
/// A command answered but not yet taken by its owner (the asynchronous AV_WRITE of an
/// `FI_EVENT` AV whose event queue nobody has read) holds no ring entry, only its table entry.
/// When the table has no free entry for a new command, such answered commands are parked
/// beside it ([`CommandTable::park_answered`]) until their owners take them, so that however
/// many such AVs leave their completions uncollected, the table never fills with them.
struct CommandTable {
    entries: Vec<Option<(u16, Slot)>>,
    /// Answered commands moved out of `entries`, by command id.
    parked: std::collections::BTreeMap<u16, Slot>,
}

impl CommandTable {
    fn new() -> Self {
        CommandTable {
            entries: (0..COMMAND_TABLE).map(|_| None).collect(),
            parked: std::collections::BTreeMap::new(),
        }
    }

    fn at(id: u16) -> usize {
        usize::from(id) % COMMAND_TABLE
    }

    fn is_free(&self, id: u16) -> bool {
        self.entries.get(Self::at(id)).is_some_and(Option::is_none)
            && !self.parked.contains_key(&id)
    }

    /// Move every answered command out of the table; how many moved.
    fn park_answered(&mut self) -> usize {
        let mut moved = 0;
        for e in &mut self.entries {
            if matches!(e, Some((_, Slot::Done { .. }))) {
                if let Some((id, slot)) = e.take() {
                    self.parked.insert(id, slot);
                    moved += 1;
                }
            }
        }
        moved
    }

    /// File `slot` under `id`: in its table entry, or beside the table when another command
    /// holds that entry (an answered command taken out of `parked` and put back, its entry
    /// given to a later command meanwhile). Never over another command.
    fn insert(&mut self, id: u16, slot: Slot) {
        match self.entries.get_mut(Self::at(id)) {
            Some(e) if e.as_ref().is_none_or(|(held, _)| *held == id) => *e = Some((id, slot)),
            _ => {
                self.parked.insert(id, slot);
            }
        }
    }

    fn get(&self, id: u16) -> Option<&Slot> {
        match self.entries.get(Self::at(id))? {
            Some((held, slot)) if *held == id => Some(slot),
            _ => self.parked.get(&id),
        }
    }

    fn remove(&mut self, id: u16) -> Option<Slot> {
        let e = self.entries.get_mut(Self::at(id))?;
        match e.take() {
            Some((held, slot)) if held == id => Some(slot),
            other => {
                *e = other;
                self.parked.remove(&id)
            }
        }
    }

    fn clear(&mut self) {
        self.entries.iter_mut().for_each(|e| *e = None);
        self.parked.clear();
    }
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
    /// When a waiting command last read `DEV_STATUS` ([`AdminQueue::stalled`]): at most one
    /// read per [`FATAL_CHECK_AFTER`] however many commands are polled.
    status_read: Option<Instant>,
    /// Commands submitted and not yet taken, by command id.
    commands: CommandTable,
    /// Completions consumed since the CQ head was last written to the device.
    unreported: u32,
    /// Commands the device has not completed yet (outstanding or abandoned).
    in_flight: usize,
    /// Commands abandoned after a timeout whose completions have not come: the device may
    /// still read or write the scratch buffer for them, so it is lent to no other command
    /// until they complete or the queue is programmed again.
    scratch_holders: Vec<u16>,
    /// Commands abandoned after a timeout whose completions have not come, shared with the
    /// NIC's fast paths ([`AdminQueue::abandoned_counter`]).
    abandoned: Arc<AtomicUsize>,
    /// Reaps that collected a completion, shared with waiters that sleep until one may have
    /// come ([`AdminQueue::reaped_counter`]).
    reaped: Arc<AtomicU64>,
    /// Undoes of late creations ([`undo_of`]) and destroys retried behind them (each with the
    /// memory the device may use until it completes), submitted in this order ahead of the
    /// next command.
    undo: VecDeque<(Command, Option<Held>)>,
    /// Memory whose destroy failed (its completion not a success): the device may still use
    /// it, so it is kept until the function's reset (which clears the queue) or the NIC's
    /// close (which resets the function first).
    kept: Vec<Held>,
    /// The scratch buffer was lent ([`AdminQueue::scratch`]) since the last submission: the
    /// next command uses it. (Reading a result back, [`AdminQueue::scratch_result`], lends
    /// nothing; a lend whose command never went out marks the next one, which only errs on
    /// the side of holding the buffer.)
    scratch_taken: bool,
    /// Whether the device checks the owner of an AUTH_KEY_REMOVE (interface 1.9): only then
    /// is a late AUTH_KEY_ADD undone ([`undo_of`]).
    undo_auth_key_adds: bool,
    /// The function was found reset under the driver ([`AdminQueue::stalled`]): what
    /// `ADMIN_SQ_BASE` read then. Every command fails at once until the queue is programmed
    /// again.
    reset_seen: Option<u64>,
    /// What a synchronous command sleeps on once its spin is over ([`AdminSleep`]); `None`:
    /// it yields between polls.
    sleeper: Option<Arc<dyn AdminSleep>>,
}

impl AdminQueue {
    /// Use already-mapped rings of `geometry` ([`AdminQueue::ring_bytes`] each) and scratch
    /// memory.
    pub(crate) fn new(
        geometry: RingGeometry,
        sq: MappedRegion,
        cq: MappedRegion,
        scratch: MappedRegion,
    ) -> Self {
        AdminQueue {
            sq,
            cq,
            scratch,
            geometry,
            sq_tail: 0,
            cq_head: 0,
            cq_phase: true,
            next_command_id: 0,
            timeout: DEFAULT_TIMEOUT,
            status_read: None,
            commands: CommandTable::new(),
            unreported: 0,
            in_flight: 0,
            scratch_holders: Vec::new(),
            abandoned: Arc::new(AtomicUsize::new(0)),
            reaped: Arc::new(AtomicU64::new(0)),
            undo: VecDeque::new(),
            kept: Vec::new(),
            scratch_taken: false,
            undo_auth_key_adds: false,
            reset_seen: None,
            sleeper: None,
        }
    }

    /// Undo late AUTH_KEY_ADDs ([`undo_of`]): for a device whose AUTH_KEY_REMOVE checks the
    /// owner (interface 1.9).
    pub(crate) fn undo_auth_key_adds(&mut self, yes: bool) {
        self.undo_auth_key_adds = yes;
    }

    /// Bytes the submission and the completion ring of `geometry` need.
    pub(crate) fn ring_bytes(geometry: RingGeometry) -> (usize, usize) {
        let n = geometry.entries() as usize;
        (n * COMMAND_BYTES, n * COMPLETION_BYTES)
    }

    /// Completions consumed before the driver reports its CQ head to the device: a quarter
    /// of the ring (it also reports whenever it finds no new completion, so a device waiting
    /// for room never waits on it).
    fn cq_head_report_every(&self) -> u32 {
        (self.geometry.entries() / 4).max(1)
    }

    /// The count of commands abandoned after a timeout whose completions have not come, for
    /// the NIC to read without the queue's lock. While it is not 0 the device may still run
    /// them: a command submitted now runs after them (the device executes the queue in
    /// order), but a posted register write that bypasses the queue (an AV doorbell) could
    /// overtake them. The count drops as their completions are collected ([`AdminQueue::reap`],
    /// which every later command runs), and is 0 again once the queue is programmed anew.
    pub(crate) fn abandoned_counter(&self) -> Arc<AtomicUsize> {
        self.abandoned.clone()
    }

    /// The IOVA of the submission ring, which `ADMIN_SQ_BASE` holds while the device has not
    /// been reset under the driver.
    pub(crate) fn sq_base(&self) -> u64 {
        self.sq.region().iova()
    }

    /// The count of reaps that collected at least one completion, for a waiter to read
    /// without the queue's lock: one that polled its command, read the count, and finds it
    /// changed later knows another thread may have filed its completion since
    /// ([`crate::admin_interrupt`]).
    pub(crate) fn reaped_counter(&self) -> Arc<AtomicU64> {
        self.reaped.clone()
    }

    /// Program the admin registers (datasheet: "Admin queue", before `DEV_CTRL.enable`).
    /// Commands of a previous programming are forgotten.
    pub(crate) fn program(&mut self, bar: &dyn Mmio) -> Result<(), DmaError> {
        let (sq_len, cq_len) = Self::ring_bytes(self.geometry);
        self.sq.region().zero(0, sq_len)?;
        self.cq.region().zero(0, cq_len)?;
        self.sq_tail = 0;
        self.cq_head = 0;
        self.cq_phase = true;
        self.commands.clear();
        self.unreported = 0;
        self.in_flight = 0;
        self.scratch_holders.clear();
        self.abandoned.store(0, Ordering::Release);
        self.undo.clear();
        self.kept.clear();
        self.scratch_taken = false;
        self.reset_seen = None;
        bar.write(ADMIN_SQ_BASE, self.sq.region().iova());
        bar.write(ADMIN_CQ_BASE, self.cq.region().iova());
        bar.write(
            ADMIN_QUEUE_SIZE,
            AdminQueueSize::new()
                .with_sq_log2(self.geometry.log2())
                .with_cq_log2(self.geometry.log2()),
        );
        bar.write(ADMIN_CQ_HEAD, RingIndex::new().with_index(0));
        Ok(())
    }

    /// What the command that just completed left in the scratch buffer (AV_READ entries,
    /// counters, IDENTIFY data). Takes nothing: the buffer is not lent to a new command.
    pub fn scratch_result(&self) -> &DmaRegion {
        self.scratch.region()
    }

    /// The scratch buffer for the data of the next synchronous command, `opcode`. Refused
    /// while a command that used it timed out and has not completed: a late device would
    /// otherwise read the next command's data as its own, or write over it. Completions that
    /// came since are collected first, so a late completion releases the buffer at once. A
    /// device that stopped with a fatal error will never complete the command that holds the
    /// buffer: `opcode` then fails as not submitted because of that error
    /// ([`DriverError::AdminDeviceFatal`]), as a command that finds the ring full of such
    /// commands does, not as one kept back by a late device.
    pub fn scratch(&mut self, bar: &dyn Mmio, opcode: Opcode) -> Result<&DmaRegion, DriverError> {
        // After a reset nothing holds the buffer: the command it is lent to fails on its own.
        if self.reset_seen.is_none() && !self.scratch_holders.is_empty() {
            if let Err(e) = self.reap(bar) {
                tracing::warn!("{e}");
            }
        }
        match self.scratch_holders.first() {
            None => {
                self.scratch_taken = true;
                Ok(self.scratch.region())
            }
            Some(_) if bar.read(DEV_STATUS).fatal() => Err(DriverError::AdminDeviceFatal {
                opcode: opcode as u8,
                waited: Duration::ZERO,
                fatal_error: bar.read(FATAL_ERROR).into_bits(),
                submitted: false,
            }),
            Some(id) => Err(DriverError::AdminProtocol(format!(
                "admin command {id} timed out and the device may still use the scratch buffer \
                 for it; commands with data wait for its completion or a function reset"
            ))),
        }
    }

    /// Set how long a command may take.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// How long a command may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// When a poll of command `id` gives it up ([`AdminQueue::poll_command`]): its timeout
    /// after a poll first found it in flight. `None` when it is not outstanding, or no poll
    /// found it so yet.
    pub(crate) fn gives_up_at(&self, id: u16) -> Option<Instant> {
        match self.commands.get(id)? {
            Slot::Outstanding {
                waiting_since: Some(since),
                ..
            } => since.checked_add(self.timeout),
            _ => None,
        }
    }

    /// Commands submitted whose completion the device has not written yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Execute one command and wait for its completion.
    pub fn execute(&mut self, bar: &dyn Mmio, cmd: Command) -> Result<AdminResult, DriverError> {
        self.execute_raw(bar, cmd.encode(0))
    }

    /// Execute a submission entry as given (its command id is replaced by the queue's own).
    pub fn execute_raw(
        &mut self,
        bar: &dyn Mmio,
        entry: AdminCommand,
    ) -> Result<AdminResult, DriverError> {
        let id = self.submit_raw(bar, entry)?;
        self.wait_command(bar, id)
    }

    /// Submit one command without waiting; returns its command id, for
    /// [`AdminQueue::poll_command`] or [`AdminQueue::wait_command`].
    pub fn submit(&mut self, bar: &dyn Mmio, cmd: Command) -> Result<u16, DriverError> {
        self.submit_raw(bar, cmd.encode(0))
    }

    /// Submit a submission entry as given (its command id is replaced by the queue's own).
    /// The undoes of late creations go first.
    pub fn submit_raw(&mut self, bar: &dyn Mmio, entry: AdminCommand) -> Result<u16, DriverError> {
        if let Some(e) = self.reset_error(entry.opcode, false) {
            self.scratch_taken = false;
            return Err(e);
        }
        if self.abandoned.load(Ordering::Acquire) > 0 {
            // Late completions first: what they created is destroyed before this command,
            // which may need the room.
            if let Err(e) = self.reap(bar) {
                tracing::warn!("{e}");
            }
        }
        while let Some((cmd, held)) = self.undo.pop_front() {
            tracing::info!(?cmd, "destroying what a command given up on created late");
            match self.submit_entry(bar, cmd.encode(0), true) {
                Ok(id) => {
                    if held.is_some() {
                        self.commands.remove(id);
                        self.commands.insert(id, Slot::Discard { held });
                    }
                }
                Err(e) => {
                    self.undo.push_front((cmd, held));
                    // The caller's command was not submitted either: its own opcode is reported.
                    return Err(not_submitted_as(e, entry.opcode));
                }
            }
        }
        let uses_scratch = core::mem::take(&mut self.scratch_taken);
        match self.submit_entry(bar, entry, false) {
            Ok(id) => {
                if uses_scratch {
                    self.mark_scratch(id);
                }
                Ok(id)
            }
            Err(e) => {
                // Not submitted: the lend still marks the next command.
                self.scratch_taken |= uses_scratch;
                Err(e)
            }
        }
    }

    /// Put one command on the ring and ring the doorbell: `discard`, the queue's own (its
    /// completion is dropped), else the caller's, outstanding.
    fn submit_entry(
        &mut self,
        bar: &dyn Mmio,
        mut entry: AdminCommand,
        discard: bool,
    ) -> Result<u16, DriverError> {
        let opcode = entry.opcode;
        self.make_room(bar, opcode)?;
        let mut command_id = self.next_command_id;
        let mut tries = 0;
        let mut parked = false;
        while !self.commands.is_free(command_id) {
            command_id = command_id.wrapping_add(1);
            tries += 1;
            if tries > COMMAND_TABLE {
                // Answered commands their owners have not taken yet make room by moving
                // aside, once.
                if !parked && self.commands.park_answered() > 0 {
                    parked = true;
                    tries = 0;
                    continue;
                }
                // Only commands abandoned after a timeout, whose completions never came, can
                // fill the table then: the device is not answering.
                return Err(DriverError::AdminProtocol(format!(
                    "{COMMAND_TABLE} admin commands are unanswered; reset the function"
                )));
            }
        }
        self.next_command_id = command_id.wrapping_add(1);
        entry.command_id = U16::new(command_id);
        let slot = usize::from(self.sq_tail) * COMMAND_BYTES;
        self.sq.region().write_obj(slot, &entry)?;
        self.sq_tail = self.geometry.next(self.sq_tail);
        self.commands.insert(
            command_id,
            if discard {
                Slot::Discard { held: None }
            } else {
                Slot::Outstanding {
                    opcode,
                    waiting_since: None,
                    uses_scratch: false,
                    undo_key: undo_key(&entry),
                }
            },
        );
        self.in_flight += 1;
        // The command must be in memory before the device sees the doorbell.
        fence(Ordering::SeqCst);
        bar.write(ADMIN_SQ_DOORBELL, RingIndex::new().with_index(self.sq_tail));
        Ok(command_id)
    }

    /// Whether undoes of late creations wait to be submitted.
    pub(crate) fn has_undoes(&self) -> bool {
        !self.undo.is_empty()
    }

    /// Submit `cmd`, a destroy the device refused as Busy because of an object a late
    /// creation made, or one that found the ring full (see [`NicInner::destroy`]), after the
    /// undoes of the late creations: ahead of the next command, behind every undo queued
    /// until then, its completion dropped.
    ///
    /// [`NicInner::destroy`]: crate::nic::NicInner::destroy
    ///
    /// `held`: memory the device may use until the destroy completes, freed once it has
    /// succeeded (or found the object gone already), kept until the function's reset if it
    /// fails.
    pub(crate) fn destroy_after_undoes(&mut self, cmd: Command, held: Option<Held>) {
        self.undo.push_back((cmd, held));
    }

    /// Record that command `id`, outstanding, carries its data in the scratch buffer.
    fn mark_scratch(&mut self, id: u16) {
        if let Some(Slot::Outstanding {
            opcode,
            waiting_since,
            undo_key,
            ..
        }) = self.commands.remove(id)
        {
            self.commands.insert(
                id,
                Slot::Outstanding {
                    opcode,
                    waiting_since,
                    uses_scratch: true,
                    undo_key,
                },
            );
        }
    }

    /// Wait until fewer than ring size − 1 commands are in flight (spinning, then sleeping
    /// until the next completion, as [`AdminQueue::wait_command`] does); after the timeout,
    /// [`DriverError::AdminRingFull`]: the command was not submitted, so (unlike a command
    /// that timed out) it cannot run late.
    fn make_room(&mut self, bar: &dyn Mmio, opcode: u8) -> Result<(), DriverError> {
        let limit = (self.geometry.entries() - 1) as usize;
        // The clock is read only once the ring is found full.
        let mut start: Option<Instant> = None;
        let mut spins = 0u32;
        let mut waker = None;
        while self.in_flight >= limit {
            // A stray completion is the device's error, not this command's (logged, as when a
            // poll collects it): the room the others made is used.
            if let Err(e) = self.reap(bar) {
                tracing::warn!("{e}");
            }
            if self.in_flight < limit {
                break;
            }
            let since = *start.get_or_insert_with(Instant::now);
            // A stopped device never drains the ring: that is not "try again".
            if let Some(e) = self.stalled(bar, opcode, since.elapsed(), false) {
                return Err(e);
            }
            // Any completion makes room: sleep until the next, as a command waits for its own.
            let deadline = since.checked_add(self.timeout);
            if spins >= SPINS_BEFORE_SLEEP && self.sleep(bar, deadline, &mut waker) {
                continue;
            }
            backoff(&mut spins);
        }
        Ok(())
    }

    /// Collect every completion the device has written, filing each under its command id.
    /// A completion for a command id that is not outstanding is a protocol error (reported
    /// after the rest are collected).
    pub fn reap(&mut self, bar: &dyn Mmio) -> Result<usize, DriverError> {
        let mut collected = 0;
        let mut stray = None;
        loop {
            let slot = usize::from(self.cq_head) * COMPLETION_BYTES;
            let phase_offset = slot + uet_fwif::admin::COMPLETION_PHASE_OFFSET;
            let phase = self.cq.region().read_u8(phase_offset)? & 1 != 0;
            if phase != self.cq_phase {
                break;
            }
            // Read the body only after seeing the phase the device wrote last.
            fence(Ordering::Acquire);
            let cqe: AdminCompletion = self.cq.region().read_obj(slot)?;
            self.cq_head = self.geometry.next(self.cq_head);
            if self.cq_head == 0 {
                self.cq_phase = !self.cq_phase;
            }
            collected += 1;
            let id = cqe.command_id.get();
            match self.commands.remove(id) {
                Some(Slot::Outstanding { opcode, .. }) => {
                    self.in_flight = self.in_flight.saturating_sub(1);
                    self.commands.insert(id, Slot::Done { opcode, cqe });
                }
                Some(Slot::Abandoned { opcode, undo_key }) => {
                    self.in_flight = self.in_flight.saturating_sub(1);
                    self.scratch_holders.retain(|&h| h != id);
                    if cqe.status() == Status::Success {
                        let checked = self.undo_auth_key_adds;
                        if let Some(undo) = undo_of(opcode, cqe.result0.get(), undo_key, checked) {
                            self.undo.push_back((undo, None));
                        }
                    }
                    let _ = self
                        .abandoned
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
                    tracing::debug!(command_id = id, "completion of an abandoned command");
                }
                Some(Slot::Discard { held }) => {
                    self.in_flight = self.in_flight.saturating_sub(1);
                    match cqe.status() {
                        // Destroyed now, or with its endpoint before: the device is done with
                        // the memory.
                        Status::Success | Status::InvalidHandle => drop(held),
                        status => {
                            tracing::warn!(
                                command_id = id,
                                ?status,
                                "a destroy sent ahead of the next command (the undo of a late \
                                 creation, or one that waited behind undoes) failed; any memory \
                                 it held is kept until the function's reset"
                            );
                            self.kept.extend(held);
                        }
                    }
                }
                Some(done @ Slot::Done { .. }) => {
                    self.commands.insert(id, done);
                    stray = Some(id);
                }
                None => stray = Some(id),
            }
        }
        if collected > 0 {
            // After the completions are filed: a waiter that reads the new count finds them.
            self.reaped.fetch_add(1, Ordering::Release);
        }
        // Report the CQ head every few completions, and whenever nothing new came: a device
        // that ran out of completion room is then never left waiting.
        self.unreported += collected as u32;
        let report = if collected == 0 {
            self.unreported > 0
        } else {
            self.unreported >= self.cq_head_report_every()
        };
        if report {
            self.unreported = 0;
            bar.write(ADMIN_CQ_HEAD, RingIndex::new().with_index(self.cq_head));
        }
        match stray {
            Some(id) => Err(DriverError::AdminProtocol(format!(
                "completion for command id {id}, which is not outstanding"
            ))),
            None => Ok(collected),
        }
    }

    /// The outcome of command `id` if it completed (collecting completions first), taking
    /// it; `None` while it is in flight. A command still in flight the timeout after a poll
    /// first found it so is abandoned and reported as timed out. A command id that was never
    /// submitted, or was already taken, is an error.
    pub fn poll_command(
        &mut self,
        bar: &dyn Mmio,
        id: u16,
    ) -> Option<Result<AdminResult, DriverError>> {
        if let Err(e) = self.reap(bar) {
            tracing::warn!("{e}");
        }
        match self.commands.remove(id) {
            Some(Slot::Done { opcode, cqe }) => Some(match cqe.status() {
                Status::Success => Ok(AdminResult {
                    result0: cqe.result0.get(),
                    result1: cqe.result1.get(),
                }),
                status => Err(DriverError::AdminStatus { opcode, status }),
            }),
            Some(Slot::Outstanding {
                opcode,
                waiting_since,
                uses_scratch,
                undo_key,
            }) => {
                let since = waiting_since.unwrap_or_else(Instant::now);
                if let Some(e) = self.stalled(bar, opcode, since.elapsed(), true) {
                    if let DriverError::FunctionReset { .. } = e {
                        // The reset forgot the command: nothing of it can come late.
                        self.in_flight = self.in_flight.saturating_sub(1);
                        return Some(Err(e));
                    }
                    self.commands
                        .insert(id, Slot::Abandoned { opcode, undo_key });
                    self.abandoned.fetch_add(1, Ordering::AcqRel);
                    if uses_scratch && !self.scratch_holders.contains(&id) {
                        self.scratch_holders.push(id);
                    }
                    Some(Err(e))
                } else {
                    self.commands.insert(
                        id,
                        Slot::Outstanding {
                            opcode,
                            waiting_since: Some(since),
                            uses_scratch,
                            undo_key,
                        },
                    );
                    None
                }
            }
            Some(slot @ (Slot::Abandoned { .. } | Slot::Discard { .. })) => {
                self.commands.insert(id, slot);
                Some(Err(DriverError::AdminProtocol(format!(
                    "command id {id} was abandoned"
                ))))
            }
            None => Some(Err(DriverError::AdminProtocol(format!(
                "command id {id} is not outstanding"
            )))),
        }
    }

    /// Wait for command `id` (bounded by the timeout) and take its outcome.
    ///
    /// Polls, spinning, for [`SPINS_BEFORE_SLEEP`] polls: a command the NIC answers at once
    /// (the simulator's; a firmware's fast path) costs no system call. Past them, on a NIC
    /// whose `AdminSleep` can wake the caller (the admin completion interrupt, interface
    /// 1.15), the thread sleeps until a completion may have come or the command's timeout,
    /// then polls again; elsewhere it yields between polls, as before. Holding the queue, it
    /// is the only one to collect completions, so the reap count it read after its poll
    /// changes only by its own next poll: the arm alone decides when it is woken.
    pub fn wait_command(&mut self, bar: &dyn Mmio, id: u16) -> Result<AdminResult, DriverError> {
        let mut spins = 0u32;
        // Made at the first sleep and kept for the rest of the wait, so that the interrupt's
        // list holds it once however often it sleeps.
        let mut waker: Option<Waker> = None;
        loop {
            if let Some(r) = self.poll_command(bar, id) {
                return r;
            }
            if spins >= SPINS_BEFORE_SLEEP && self.sleep(bar, self.gives_up_at(id), &mut waker) {
                continue;
            }
            backoff(&mut spins);
        }
    }

    /// Sleep, in [`AdminQueue::wait_command`] or [`AdminQueue::make_room`], until the NIC may
    /// have written a completion, or until `deadline` (when a poll gives the wait up). False
    /// (nothing slept) when no one would wake the thread: no [`AdminSleep`], a NIC without
    /// the interrupt or one that will answer nothing (the next poll says so), or no deadline.
    fn sleep(
        &mut self,
        bar: &dyn Mmio,
        deadline: Option<Instant>,
        waker: &mut Option<Waker>,
    ) -> bool {
        let (Some(sleeper), Some(deadline)) = (self.sleeper.clone(), deadline) else {
            return false;
        };
        let waker =
            waker.get_or_insert_with(|| Waker::from(Arc::new(Unpark(std::thread::current()))));
        let seen = self.reaped.load(Ordering::Acquire);
        if !sleeper.wake_after(bar, &self.reaped, seen, waker, deadline) {
            return false;
        }
        // An unpark that came before this (the vector already raised) makes it return at once;
        // one meant for an earlier sleep of this thread only costs a poll.
        std::thread::park_timeout(deadline.saturating_duration_since(Instant::now()));
        true
    }

    /// Let [`AdminQueue::wait_command`] sleep through `sleeper` once its spin is over.
    pub(crate) fn set_sleeper(&mut self, sleeper: Arc<dyn AdminSleep>) {
        self.sleeper = Some(sleeper);
    }

    /// [`DriverError::FunctionReset`] for command `opcode` once a reset was seen.
    fn reset_error(&self, opcode: u8, submitted: bool) -> Option<DriverError> {
        self.reset_seen.map(|sq_base| DriverError::FunctionReset {
            opcode,
            sq_base,
            ring: self.sq.region().iova(),
            submitted,
        })
    }

    /// Whether command `opcode`, waiting for `waited` for its completion (`submitted`) or for
    /// room in the ring, is to be given up on, and why: the device stopped with a fatal error
    /// ([`DriverError::AdminDeviceFatal`], learned from one `DEV_STATUS` read, made at most
    /// once per [`FATAL_CHECK_AFTER`] and only once a command has waited that long), or the
    /// timeout passed ([`DriverError::AdminTimeout`] or [`DriverError::AdminRingFull`]).
    /// The device is also asked for `ADMIN_SQ_BASE` (a second read): when that no longer
    /// holds the ring (cleared by a reset, or holding the ring of another driver that enabled
    /// the function again since), the function was reset under the driver
    /// ([`DriverError::FunctionReset`]), and the command is given up on at once too, as is
    /// every later one. A device merely disabled (`DEV_CTRL.enable` cleared, its state kept)
    /// is waited on until the timeout: it may be enabled again and run what it holds.
    fn stalled(
        &mut self,
        bar: &dyn Mmio,
        opcode: u8,
        waited: Duration,
        submitted: bool,
    ) -> Option<DriverError> {
        if let Some(e) = self.reset_error(opcode, submitted) {
            return Some(e);
        }
        let timed_out = waited >= self.timeout;
        let due = waited >= FATAL_CHECK_AFTER
            && self
                .status_read
                .is_none_or(|at| at.elapsed() >= FATAL_CHECK_AFTER);
        if !(timed_out || due) {
            return None;
        }
        self.status_read = Some(Instant::now());
        let status = bar.read(DEV_STATUS);
        if status.fatal() {
            return Some(DriverError::AdminDeviceFatal {
                opcode,
                waited,
                fatal_error: bar.read(FATAL_ERROR).into_bits(),
                submitted,
            });
        }
        let sq_base = bar.read(ADMIN_SQ_BASE);
        if sq_base != self.sq.region().iova() {
            tracing::error!(
                sq_base,
                "the function was reset under the driver; no admin command runs until the NIC is opened again"
            );
            // Nothing given to the device before the reset can be run late.
            self.reset_seen = Some(sq_base);
            self.scratch_holders.clear();
            self.abandoned.store(0, Ordering::Release);
            self.undo.clear();
            self.kept.clear();
            return self.reset_error(opcode, submitted);
        }
        let (waited, device_enabled) = (self.timeout, status.enabled());
        timed_out.then_some(if submitted {
            DriverError::AdminTimeout {
                opcode,
                waited,
                device_enabled,
            }
        } else {
            DriverError::AdminRingFull {
                opcode,
                waited,
                device_enabled,
            }
        })
    }
}

/// How long a command waits (for its completion, or for room in the ring) before each poll
/// also reads `DEV_STATUS` (one register read) to learn whether the device stopped with a
/// fatal error, after which it completes nothing until reset: the command is then given up on
/// at once rather than at the timeout, and never reported as worth retrying.
pub const FATAL_CHECK_AFTER: Duration = Duration::from_millis(1);

/// Polls a synchronous command spins for before it sleeps, where the NIC can wake it
/// ([`AdminQueue::wait_command`]), or yields between polls: some tens of microseconds, which
/// a command the NIC answers at once never reaches.
pub const SPINS_BEFORE_SLEEP: u32 = 1024;

/// What wakes a thread asleep in [`AdminQueue::wait_command`]: the NIC's admin completion
/// interrupt (`crate::admin_interrupt`), reached through its NIC.
pub(crate) trait AdminSleep: Send + Sync {
    /// Wake `waker` at the next completion the NIC writes, at once if the queue's reap count
    /// `reaped` is no longer `seen` (read after the caller's last poll), or at `deadline`.
    /// False when nothing will: the caller polls.
    fn wake_after(
        &self,
        bar: &dyn Mmio,
        reaped: &AtomicU64,
        seen: u64,
        waker: &Waker,
        deadline: Instant,
    ) -> bool;
}

/// Wakes a thread parked in [`AdminQueue::wait_command`].
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Spin a little, then yield.
fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    if *spins < SPINS_BEFORE_SLEEP {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// The datasheet name of an opcode byte, or its value when unknown.
pub fn opcode_name(opcode: u8) -> String {
    match Opcode::from_u8(opcode) {
        Some(op) => op.name().to_string(),
        None => format!("opcode {opcode:#04x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_regs::{DevCtrl, FunctionReset, DEV_CTRL, FUNCTION_RESET};

    /// The ring is the driver's 64 entries or the largest power of two the device allows;
    /// a device allowing fewer than 2 gets none.
    #[test]
    fn the_admin_ring_fits_what_the_device_allows() {
        let log2 = |max| admin_geometry(max).map(RingGeometry::log2);
        assert_eq!(log2(0), None);
        assert_eq!(log2(1), None);
        assert_eq!(log2(2), Some(1));
        assert_eq!(log2(3), Some(1));
        assert_eq!(log2(48), Some(5));
        assert_eq!(log2(64), Some(ADMIN_RING_LOG2));
        assert_eq!(log2(u16::MAX), Some(ADMIN_RING_LOG2));
    }

    /// A device for [`AdminQueue`] alone: enabled, its registers otherwise read 0, DMA mapped
    /// by nothing. The test plays its part by writing completions into the CQ itself.
    struct ScriptedDevice;

    impl uet_regs::Mmio for ScriptedDevice {
        fn read32(&self, offset: u32) -> u32 {
            if offset == DEV_STATUS.offset() {
                uet_regs::DevStatus::new()
                    .with_ready(true)
                    .with_enabled(true)
                    .into_bits()
            } else {
                0
            }
        }
        fn write32(&self, _offset: u32, _value: u32) {}
        fn read64(&self, _offset: u32) -> u64 {
            0
        }
        fn write64(&self, _offset: u32, _value: u64) {}
    }

    impl crate::device::Device for ScriptedDevice {
        fn bar0(&self) -> &dyn Mmio {
            self
        }
        fn dma_map(&self, _region: &DmaRegion) -> Result<(), crate::device::DeviceError> {
            Ok(())
        }
        fn dma_unmap(&self, _region: &DmaRegion) -> Result<(), crate::device::DeviceError> {
            Ok(())
        }
        fn name(&self) -> String {
            "scripted".into()
        }
    }

    /// An admin queue of `2^log2` entries on a [`ScriptedDevice`], programmed, and the CQ
    /// tail and pass of the device the test plays.
    struct Scripted {
        bar: Arc<ScriptedDevice>,
        queue: AdminQueue,
        cq_tail: u16,
        cq_pass: u64,
    }

    impl Scripted {
        fn new(log2: u8) -> Self {
            let bar = Arc::new(ScriptedDevice);
            let device: Arc<dyn crate::device::Device> = bar.clone();
            let geometry = RingGeometry::new(log2).expect("a ring size");
            let (sq, cq) = AdminQueue::ring_bytes(geometry);
            let map = |len, iova| {
                let region = DmaRegion::new_normal(len, iova).expect("DMA memory");
                MappedRegion::map(device.clone(), region).expect("mapped")
            };
            let mut queue = AdminQueue::new(
                geometry,
                map(sq, 1 << 32),
                map(cq, 2 << 32),
                map(4096, 3 << 32),
            );
            queue.program(&*bar).expect("programmed");
            Scripted {
                bar,
                queue,
                cq_tail: 0,
                cq_pass: 0,
            }
        }

        /// Write a successful completion of command `id` at the device's CQ tail.
        fn complete(&mut self, id: u16, result0: u32) {
            let cqe = AdminCompletion {
                result0: zerocopy::little_endian::U32::new(result0),
                command_id: U16::new(id),
                phase: U16::new(u16::from(uet_fwif::ring::phase_for_pass(self.cq_pass))),
                ..AdminCompletion::default()
            };
            let at = usize::from(self.cq_tail) * COMPLETION_BYTES;
            self.queue
                .cq
                .region()
                .write_obj(at, &cqe)
                .expect("CQ entry");
            self.cq_tail = self.queue.geometry.next(self.cq_tail);
            if self.cq_tail == 0 {
                self.cq_pass += 1;
            }
        }
    }

    /// A device that answers a command twice, the second time after the command was parked
    /// beside a full table (its owner had not taken it) and its table entry given to a new
    /// command: the repeat is an error, and the new command stays filed and gets its own
    /// completion.
    #[test]
    fn a_repeated_completion_of_a_parked_command_leaves_the_one_in_its_entry_filed() {
        let mut s = Scripted::new(2);
        let bar = s.bar.clone();
        let cmd = Command::EndpointDestroy { endpoint: 1 };
        // A table's worth of answered commands nobody takes.
        let mut answered = Vec::new();
        for _ in 0..COMMAND_TABLE {
            let id = s.queue.submit(&*bar, cmd).expect("submitted");
            s.complete(id, 0);
            answered.push(id);
        }
        // The next command parks them and takes the entry of one of them.
        let new = s.queue.submit(&*bar, cmd).expect("submitted");
        let parked = answered
            .iter()
            .copied()
            .find(|&id| CommandTable::at(id) == CommandTable::at(new))
            .expect("an answered command shared the new one's entry");
        assert!(s.queue.commands.parked.contains_key(&parked));
        // The device answers the parked one again, then the new one.
        s.complete(parked, 0);
        s.complete(new, 7);
        assert!(
            matches!(s.queue.reap(&*bar), Err(DriverError::AdminProtocol(_))),
            "the repeat is a protocol error"
        );
        match s.queue.poll_command(&*bar, new) {
            Some(Ok(r)) => assert_eq!(r.result0, 7),
            other => panic!("the new command's completion: {other:?}"),
        }
        assert!(matches!(s.queue.poll_command(&*bar, parked), Some(Ok(_))));
        assert_eq!(s.queue.in_flight(), 0);
    }

    /// A completion for a command id that is not outstanding (a device that answers twice),
    /// collected while a command waits for room in a full ring, is the device's error, not
    /// the waiting command's: it is logged, as when a poll collects it, and the command goes
    /// out in the room the other completions made.
    #[test]
    fn a_stray_completion_collected_while_waiting_for_room_fails_no_command() {
        let mut s = Scripted::new(2);
        let bar = s.bar.clone();
        let cmd = Command::EndpointDestroy { endpoint: 1 };
        // The ring holds 3 commands in flight.
        let ids: Vec<u16> = (0..3)
            .map(|_| s.queue.submit(&*bar, cmd).expect("submitted"))
            .collect();
        // The device answers a command id it was never given, then the first command.
        s.complete(ids[2].wrapping_add(100), 0);
        s.complete(ids[0], 7);
        let next = s
            .queue
            .submit(&*bar, cmd)
            .expect("room was made: the stray completion is not this command's");
        match s.queue.poll_command(&*bar, ids[0]) {
            Some(Ok(r)) => assert_eq!(r.result0, 7),
            other => panic!("the first command's completion: {other:?}"),
        }
        assert!(s.queue.poll_command(&*bar, next).is_none(), "in flight");
    }

    /// A NIC whose admin ring has two entries, one command in flight at a time, and whose
    /// commands time out after 20 ms.
    fn one_command_in_flight() -> crate::Nic {
        let mut config = uet_sim::NicConfig::new("10.0.0.1".parse().expect("address"));
        config.max_admin_entries = 2;
        let function = uet_sim::Fabric::new().add_nic(config).expect("NIC");
        let nic = crate::Nic::open(Arc::new(crate::backend::sim::SimDevice::new(function)))
            .expect("open");
        nic.set_admin_timeout(Duration::from_millis(20));
        nic
    }

    /// Stop `nic` ([`one_command_in_flight`]'s) and let an AV_CREATE time out: the ring is
    /// full, and once enabled again the device creates the table late.
    fn fill_with_a_late_av_create(nic: &crate::Nic) {
        nic.bar0().write(DEV_CTRL, DevCtrl::new());
        let mut body = uet_fwif::admin::AvCreateBody::new_zeroed();
        body.capacity = 8.into();
        let e = nic
            .admin_command(Command::AvCreate(body))
            .expect_err("stopped");
        assert!(matches!(e, DriverError::AdminTimeout { .. }), "{e}");
    }

    /// A destroy that finds the admin ring full goes ahead of the next command, holding the
    /// memory the device may use until then: it is freed once that destroy has completed,
    /// not kept until the NIC's reset.
    #[test]
    fn memory_a_deferred_destroy_holds_is_freed_when_the_destroy_completes() {
        struct Freed(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Freed {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let nic = one_command_in_flight();
        let bar = nic.bar0();
        let mut body = uet_fwif::admin::AvCreateBody::new_zeroed();
        body.capacity = 8.into();
        let av = nic
            .admin_command(Command::AvCreate(body))
            .expect("AV_CREATE")
            .result0;
        fill_with_a_late_av_create(&nic);
        let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        nic.inner
            .destroy_freeing(Command::AvDestroy { av }, Box::new(Freed(freed.clone())))
            .map_err(|(e, _)| e)
            .expect("sent ahead of the next command");
        assert!(
            !freed.load(Ordering::SeqCst),
            "held while the destroy waits"
        );
        // Enabled again: the late creation completes, and the next command sends its undo
        // and the destroy ahead of itself.
        bar.write(DEV_CTRL, DevCtrl::new().with_enable(true));
        nic.admin_command(Command::AvCreate(body))
            .expect("AV_CREATE");
        assert!(
            freed.load(Ordering::SeqCst),
            "freed once the destroy completed"
        );
    }

    /// A command that finds the function reset under the driver while it waits behind the
    /// undoes of late creations, which fill the ring, fails naming itself: it is the command
    /// the caller asked for that was not submitted, not the queue's undo.
    #[test]
    fn a_reset_seen_while_undoes_fill_the_ring_is_reported_for_the_callers_command() {
        let nic = one_command_in_flight();
        let bar = nic.bar0();
        fill_with_a_late_av_create(&nic);
        // A destroy that finds the ring full goes ahead of the next command.
        let deferred = nic
            .inner
            .destroy(Command::AvDestroy { av: 999 })
            .expect("deferred");
        assert!(deferred, "the ring was full");
        // Enabled again, the device creates the table late; then the function is reset.
        bar.write(DEV_CTRL, DevCtrl::new().with_enable(true));
        bar.write(FUNCTION_RESET, FunctionReset::new().with_reset(true));
        let cmd = Command::EndpointDestroy { endpoint: 99 };
        let opcode = cmd.encode(0).opcode;
        match nic.admin_command(cmd) {
            Err(DriverError::FunctionReset {
                opcode: reported,
                submitted: false,
                ..
            }) => assert_eq!(
                opcode_name(reported),
                opcode_name(opcode),
                "the error names another command"
            ),
            other => panic!("expected the reset, got {other:?}"),
        }
    }
}
