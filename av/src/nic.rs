//! The NIC side of an AV: the trait the driver implements over its admin queue, and an
//! in-memory table for tests and for measuring the host's own cost.
//!
//! ## Auth keys
//!
//! An AV of a domain opened with `FI_AV_AUTH_KEY` keeps its auth keys in the NIC's auth-key
//! table (`uet_fwif::auth_key`): [`NicAvTable::add_auth_key`] (AUTH_KEY_ADD, the NIC picks
//! the slot), [`NicAvTable::remove_auth_key`] (AUTH_KEY_REMOVE), [`NicAvTable::set_auth_key_source`]
//! (AUTH_KEY_SOURCE) and [`NicAvTable::read_auth_keys`] (AUTH_KEY_READ). The AV never asks
//! to remove a slot while [`NicAvTable::auth_key_users`] reports endpoints enabled with it:
//! the implementation knows which endpoints were granted which slots. These methods return
//! the fabric errno the fi_av call reports: `FI_ENOSPC` for a full table, `FI_EBUSY` for a
//! slot in use, `FI_EAGAIN` for a command the NIC could not be sent (nothing done), `FI_EIO`
//! for anything else the NIC refused, and `FI_ETIMEDOUT` for a command the NIC did not
//! answer, which it may still run (the AV then treats a remove as done and sends a source
//! again). Any errno but `FI_ETIMEDOUT` is a refusal: the NIC's table is unchanged. The defaults are `FI_ENOSYS`: a table without auth keys.

use std::task::Waker;
use uet_fwif::address::ADDRESS_BYTES;
use uet_fwif::admin::MAX_BATCH;
use uet_fwif::auth_key::{AuthKeyEntry, AUTH_KEY_VALID, MAX_AUTH_KEY_SLOTS};
use uet_fwif::{AvWriteRecord, NicAvEntry};
use zerocopy::little_endian::{U16, U32, U64};

use crate::errno::{FiErrno, FiError};

fn no_auth_keys(call: &str) -> FiError {
    FiError::new(
        FiErrno::FI_ENOSYS,
        format!("{call}: this NIC table has no auth-key table"),
    )
}

/// One NIC AV table, reached through admin commands. Each method is exactly one command.
///
/// The AV relies on the firmware rule that a batch command is applied entirely or not at all:
/// when a method returns an error, the table is as it was before the call — unless the error
/// is [`NicError::in_doubt`]: the NIC did not answer, and the command may still be applied,
/// entirely, later. Then the AV treats the entries it concerned as unknown on the NIC and
/// rewrites them from the mirror with later commands, which the implementation must apply
/// after the unanswered one (an admin queue executes in order; a path that bypasses it must
/// wait until the unanswered command has completed). The AV never issues an empty batch or
/// one larger than [`MAX_BATCH`].
pub trait NicAvTable {
    /// One AV_WRITE of these records (at most [`uet_fwif::admin::MAX_BATCH`]).
    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError>;
    /// One AV_WRITE of `count` records (at most [`MAX_BATCH`]), the `i`th made by
    /// `record(i)`, as [`NicAvTable::write_entries`]. A table whose command reads its records
    /// from DMA memory builds them there, so the host neither stages nor copies them; the
    /// default builds them in a buffer of its own and calls [`NicAvTable::write_entries`].
    ///
    /// `record` may run while the table holds the NIC's command channel (the driver's admin
    /// queue): it must only compute the record, never call into the NIC.
    fn write_entries_with(
        &mut self,
        count: usize,
        record: &mut dyn FnMut(usize) -> AvWriteRecord,
    ) -> Result<(), NicError> {
        let records: Vec<AvWriteRecord> = (0..count).map(record).collect();
        self.write_entries(&records)
    }
    /// One write of the single entries of the peers whose UET addresses are `addrs` (each one
    /// [`uet_fwif::UetAddress::bytes_are_valid`] accepts) to the indices `first ..`, at most
    /// [`MAX_BATCH`] of them, with `job_id`, no auth key and no user id: the same as
    /// [`NicAvTable::write_entries`] of [`peer_record`]s, and applied whole or not at all
    /// like it. A NIC that converts addresses itself (AV_WRITE_PEERS, since interface 1.13)
    /// is given them as they are, 32 bytes per entry and nothing composed on the host; the
    /// default writes the records with [`NicAvTable::write_entries_with`].
    fn write_peers(
        &mut self,
        first: u32,
        addrs: &[[u8; ADDRESS_BYTES]],
        job_id: u32,
        entry_flags: u16,
    ) -> Result<(), NicError> {
        self.write_entries_with(addrs.len(), &mut |i| {
            peer_record(first, addrs, job_id, entry_flags, i)
        })
    }
    /// One AV_INVALIDATE of these indices.
    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError>;
    /// One AV_READ of `out.len()` entries starting at `first`.
    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError>;

    /// Start one AV_WRITE of these records (at most [`MAX_BATCH`]) without waiting for it: the
    /// asynchronous inserts of an AV opened with `FI_EVENT`. `Ok` means the NIC owns the
    /// command and [`PendingWrite`] reports its outcome (applied entirely or not at all, as
    /// [`NicAvTable::write_entries`]); `Err` means it was not submitted and nothing changed.
    ///
    /// The default executes the write at once with [`NicAvTable::write_entries`] and returns
    /// its outcome as already complete (or, when the NIC had no room for it,
    /// [`NicError::busy`], as not submitted), so every table supports `FI_EVENT`; a table with a
    /// queue of its own (the driver's admin queue) returns before the NIC has executed it.
    fn submit_write(
        &mut self,
        records: &[AvWriteRecord],
    ) -> Result<Box<dyn PendingWrite>, NicError> {
        match self.write_entries(records) {
            // A command the NIC had no room for was never submitted.
            Err(e) if e.busy => Err(e),
            done => Ok(Box::new(CompletedWrite::new(done))),
        }
    }

    /// A named AV's table ([`crate::named`]): the AV's generation this table now reflects,
    /// every change the shared segment committed up to it applied. A table that can be
    /// inspected from outside the process keeps it, so that its entries can be compared with
    /// the segment of that generation; the default keeps nothing.
    fn reflects_generation(&self, generation: u64) {
        let _ = generation;
    }

    /// Whether the table may be destroyed now (`fi_close` of the AV): `FI_EBUSY` while
    /// endpoints still use it. The default has no users besides the AV.
    fn check_close(&self) -> Result<(), FiError> {
        Ok(())
    }

    /// One AUTH_KEY_ADD: put `job_id` into a free slot of the NIC's auth-key table, owned by
    /// this AV table, reporting `source` for requests accepted through it. Returns the slot.
    /// `FI_ENOSPC` when every slot is in use.
    fn add_auth_key(&mut self, job_id: u32, source: u64) -> Result<u16, FiError> {
        let _ = (job_id, source);
        Err(no_auth_keys("AUTH_KEY_ADD"))
    }

    /// One AUTH_KEY_REMOVE of `slot`, which holds the AV's key `job_id`. `FI_EBUSY` while an
    /// endpoint is granted it. Where the NIC can, it removes the slot only while this table
    /// owns it with `job_id` (else `FI_EIO`, nothing removed; also for a free slot): a slot
    /// number the AV no longer rightly holds never takes another AV's key.
    fn remove_auth_key(&mut self, slot: u16, job_id: u32) -> Result<(), FiError> {
        let _ = (slot, job_id);
        Err(no_auth_keys("AUTH_KEY_REMOVE"))
    }

    /// One AUTH_KEY_SOURCE: `slot` reports `source` from now on.
    fn set_auth_key_source(&mut self, slot: u16, source: u64) -> Result<(), FiError> {
        let _ = (slot, source);
        Err(no_auth_keys("AUTH_KEY_SOURCE"))
    }

    /// One AUTH_KEY_READ of `out.len()` slots from `first`.
    fn read_auth_keys(&mut self, first: u16, out: &mut [AuthKeyEntry]) -> Result<(), FiError> {
        let _ = (first, out);
        Err(no_auth_keys("AUTH_KEY_READ"))
    }

    /// Endpoints currently enabled with (granted) `slot`. The default knows of none.
    fn auth_key_users(&self, slot: u16) -> usize {
        let _ = slot;
        0
    }

    /// The NIC's handle of this table: the owner its auth-key slots name
    /// ([`AuthKeyEntry::av`]), since the NIC uses a slot only for its owner's entries. `None`
    /// when the table does not know it (ownership is then not checked).
    fn table_handle(&self) -> Option<u32> {
        None
    }
}

/// Refuse a batch a single command of `op` cannot take: 0 entries, or more than
/// [`MAX_BATCH`]. Every table implementation starts AV_WRITE, AV_INVALIDATE and AV_READ with
/// this.
pub fn check_batch(op: &'static str, len: usize) -> Result<(), NicError> {
    if len == 0 || len > MAX_BATCH as usize {
        return Err(NicError::new(
            op,
            format!("batch of {len} entries (must be 1..={MAX_BATCH})"),
        ));
    }
    Ok(())
}

/// An AV_WRITE submitted by [`NicAvTable::submit_write`] whose outcome may not be known yet.
///
/// The AV calls [`PendingWrite::poll`] (or [`PendingWrite::wait`]) until it says the command
/// completed, then [`PendingWrite::finish`] once. Dropping one that is still in flight must
/// not release memory the NIC may still read.
pub trait PendingWrite: Send {
    /// Whether the NIC has completed the command. Never blocks; collects the NIC's
    /// completions as a side effect.
    fn poll(&mut self) -> bool;
    /// Block until the command completed, or until the implementation gives up on it (a
    /// timeout), in which case the outcome is that error.
    fn wait(&mut self);
    /// The provider-specific code of a failed outcome (`fi_eq_err_entry.prov_errno`, for the
    /// NIC its admin status), 0 when there is none. Valid once complete.
    fn prov_errno(&self) -> i32 {
        0
    }
    /// The outcome, once [`PendingWrite::poll`] returned `true` or [`PendingWrite::wait`]
    /// returned.
    fn finish(self: Box<Self>) -> Result<(), NicError>;
    /// Arrange for `waker` to be woken when [`PendingWrite::poll`] may find the command
    /// complete (at once when it may be already; wakeups may be spurious), or when it is
    /// time to poll anyway (a command the NIC never answers is given up on by a poll after
    /// its timeout), so that a reader waiting for it can sleep instead of polling. False
    /// when no one will wake it: then it polls. Call it after a [`PendingWrite::poll`] that
    /// returned `false`. False by default.
    fn wake_when_done(&mut self, waker: &Waker) -> bool {
        let _ = waker;
        false
    }
}

/// A [`PendingWrite`] whose outcome is already known (what the default
/// [`NicAvTable::submit_write`] returns).
#[derive(Debug)]
pub struct CompletedWrite {
    outcome: Result<(), NicError>,
}

impl CompletedWrite {
    /// A write that completed with `outcome`.
    pub fn new(outcome: Result<(), NicError>) -> Self {
        CompletedWrite { outcome }
    }
}

impl PendingWrite for CompletedWrite {
    fn poll(&mut self) -> bool {
        true
    }
    fn wait(&mut self) {}
    fn finish(self: Box<Self>) -> Result<(), NicError> {
        self.outcome
    }
}

/// The `i`th record of [`NicAvTable::write_peers`]`(first, addrs, job_id, entry_flags)`:
/// index `first + i` and the single entry of `addrs[i]`, its flags within `entry_flags`. Past
/// the addresses (or the index space), a record at index `u32::MAX`, outside every table, so
/// that a miscount fails the whole write.
pub fn peer_record(
    first: u32,
    addrs: &[[u8; ADDRESS_BYTES]],
    job_id: u32,
    entry_flags: u16,
    i: usize,
) -> AvWriteRecord {
    let at = u32::try_from(i).ok().and_then(|i| first.checked_add(i));
    match (addrs.get(i), at) {
        (Some(a), Some(index)) => AvWriteRecord {
            index: U32::new(index),
            reserved: U32::ZERO,
            entry: NicAvEntry::for_valid_peer_bytes(a, job_id).with_flags_within(entry_flags),
        },
        _ => AvWriteRecord {
            index: U32::new(u32::MAX),
            reserved: U32::ZERO,
            entry: NicAvEntry::INVALID,
        },
    }
}

/// Records of [`MemoryNicTable`]'s staging buffer kept between writes (a larger one, grown by
/// an unusually large write, is released).
const STAGING_KEEP: usize = 4096;

/// Forward every method to the table behind a pointer.
macro_rules! forward_nic_av_table {
    ($($ptr:ty),*) => {$(
        impl<T: NicAvTable + ?Sized> NicAvTable for $ptr {
            fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
                (**self).write_entries(records)
            }
            fn write_entries_with(
                &mut self,
                count: usize,
                record: &mut dyn FnMut(usize) -> AvWriteRecord,
            ) -> Result<(), NicError> {
                (**self).write_entries_with(count, record)
            }
            fn write_peers(
                &mut self,
                first: u32,
                addrs: &[[u8; ADDRESS_BYTES]],
                job_id: u32,
                entry_flags: u16,
            ) -> Result<(), NicError> {
                (**self).write_peers(first, addrs, job_id, entry_flags)
            }
            fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
                (**self).invalidate(indices)
            }
            fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
                (**self).read_entries(first, out)
            }
            fn submit_write(
                &mut self,
                records: &[AvWriteRecord],
            ) -> Result<Box<dyn PendingWrite>, NicError> {
                (**self).submit_write(records)
            }
            fn reflects_generation(&self, generation: u64) {
                (**self).reflects_generation(generation)
            }
            fn check_close(&self) -> Result<(), FiError> {
                (**self).check_close()
            }
            fn add_auth_key(&mut self, job_id: u32, source: u64) -> Result<u16, FiError> {
                (**self).add_auth_key(job_id, source)
            }
            fn remove_auth_key(&mut self, slot: u16, job_id: u32) -> Result<(), FiError> {
                (**self).remove_auth_key(slot, job_id)
            }
            fn set_auth_key_source(&mut self, slot: u16, source: u64) -> Result<(), FiError> {
                (**self).set_auth_key_source(slot, source)
            }
            fn read_auth_keys(&mut self, first: u16, out: &mut [AuthKeyEntry]) -> Result<(), FiError> {
                (**self).read_auth_keys(first, out)
            }
            fn auth_key_users(&self, slot: u16) -> usize {
                (**self).auth_key_users(slot)
            }
            fn table_handle(&self) -> Option<u32> {
                (**self).table_handle()
            }
        }
    )*};
}

forward_nic_av_table!(&mut T, Box<T>);

/// A NIC AV command failed.
#[derive(Debug, thiserror::Error)]
#[error("NIC {op} failed: {source}")]
pub struct NicError {
    /// The command: `"AV_WRITE"`, `"AV_INVALIDATE"` or `"AV_READ"`.
    pub op: &'static str,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
    /// The NIC did not answer (the driver gave up waiting): the command may yet be applied,
    /// whole, later. The exception to "the table is as it was before the call"; see
    /// [`NicAvTable`].
    pub in_doubt: bool,
    /// The NIC could not take the command now (its command queue was full of commands it had
    /// not answered): the command was not sent and changed nothing, and the same call may
    /// succeed later. A libfabric call reports it as `FI_EAGAIN` ([`NicError::errno`]).
    pub busy: bool,
    /// The device is not this process's to use (a process forked from the one that opened
    /// it): the command was not sent and changed nothing, and no later call will reach the
    /// device either. A libfabric call reports it as `FI_ENODEV` ([`NicError::errno`]).
    pub gone: bool,
}

impl NicError {
    /// An error of command `op` with a plain message: the NIC refused the command.
    pub fn new(op: &'static str, message: impl Into<String>) -> Self {
        NicError {
            op,
            source: message.into().into(),
            in_doubt: false,
            busy: false,
            gone: false,
        }
    }

    /// Command `op` was not sent: the NIC had no room for it now (`source` says why).
    pub fn busy(op: &'static str, source: Box<dyn std::error::Error + Send + Sync>) -> Self {
        NicError {
            op,
            source,
            in_doubt: false,
            busy: true,
            gone: false,
        }
    }

    /// The errno of a call that failed, changing nothing, because of this error:
    /// `FI_EAGAIN` when the NIC was [busy](NicError::busy) (try again), `FI_ENODEV` when the
    /// device is [gone](NicError::gone) for this process, else `FI_EIO`.
    pub fn errno(&self) -> FiErrno {
        if self.busy {
            FiErrno::FI_EAGAIN
        } else if self.gone {
            FiErrno::FI_ENODEV
        } else {
            FiErrno::FI_EIO
        }
    }

    /// Command `op` was not sent: the device is not this process's to use (`source` says
    /// why).
    pub fn gone(op: &'static str, source: Box<dyn std::error::Error + Send + Sync>) -> Self {
        NicError {
            op,
            source,
            in_doubt: false,
            busy: false,
            gone: true,
        }
    }

    /// What the NIC did with the command, for messages: "refused", or "did not answer".
    pub fn verb(&self) -> &'static str {
        if self.in_doubt {
            "did not answer"
        } else {
            "refused"
        }
    }

    /// Command `op` went unanswered (`source` says how): it may still be applied.
    pub fn in_doubt(op: &'static str, source: Box<dyn std::error::Error + Send + Sync>) -> Self {
        NicError {
            op,
            source,
            in_doubt: true,
            busy: false,
            gone: false,
        }
    }
}

/// How an injected fault ([`MemoryNicTable::inject`]) fails its command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The NIC refuses the command and changes nothing.
    Refused,
    /// The command goes unanswered ([`NicError::in_doubt`]). `applied`: whether the NIC runs
    /// it anyway, as a device that answers late would; else it never does.
    InDoubt {
        /// The command took effect.
        applied: bool,
    },
    /// The NIC has no room for the command now ([`NicError::busy`]): it is not sent and
    /// changes nothing.
    Busy,
}

/// Which command kind (for fault injection and counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NicOp {
    /// AV_WRITE.
    Write,
    /// AV_INVALIDATE.
    Invalidate,
    /// AV_READ.
    Read,
    /// Any auth-key command (AUTH_KEY_ADD, AUTH_KEY_REMOVE, AUTH_KEY_SOURCE, AUTH_KEY_READ).
    AuthKey,
}

impl NicOp {
    /// The admin command name.
    pub const fn name(self) -> &'static str {
        match self {
            NicOp::Write => "AV_WRITE",
            NicOp::Invalidate => "AV_INVALIDATE",
            NicOp::Read => "AV_READ",
            NicOp::AuthKey => "AUTH_KEY",
        }
    }
}

/// Commands a [`MemoryNicTable`] has executed (failed ones are counted apart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicCounters {
    /// AV_WRITE commands that succeeded.
    pub writes: u64,
    /// AV_INVALIDATE commands that succeeded.
    pub invalidates: u64,
    /// AV_READ commands that succeeded.
    pub reads: u64,
    /// Records written by successful AV_WRITEs.
    pub records_written: u64,
    /// Indices invalidated by successful AV_INVALIDATEs.
    pub indices_invalidated: u64,
    /// Entries returned by successful AV_READs.
    pub entries_read: u64,
    /// Auth-key commands that succeeded.
    pub auth_key_commands: u64,
    /// Commands rejected (bad batch, out of range, injected fault).
    pub failed: u64,
}

impl NicCounters {
    /// Every command issued, successful or not.
    pub fn commands(&self) -> u64 {
        self.writes + self.invalidates + self.reads + self.auth_key_commands + self.failed
    }
}

/// A NIC AV table in host memory, with the checks the firmware makes: batches of 1 to
/// [`MAX_BATCH`], indices below the capacity, reserved fields zero, entries that pass
/// [`NicAvEntry::check`], all-or-nothing application. It counts the commands it executes and
/// can be told to fail a later command, to exercise the AV's error paths.
///
/// It also models the NIC's auth-key table ([`MemoryNicTable::DEFAULT_AUTH_KEY_SLOTS`] slots,
/// owned by this table) with the firmware's rules: lowest free slot, `FI_ENOSPC` when full,
/// `FI_EBUSY` for removing a slot granted to an endpoint ([`MemoryNicTable::grant_auth_key`]
/// stands in for an endpoint enabled with it), and AV_WRITE of an `AUTH_KEY` entry only
/// naming a slot in use.
#[derive(Clone, Debug)]
pub struct MemoryNicTable {
    entries: Vec<NicAvEntry>,
    counters: NicCounters,
    /// Per [`NicOp`]: fail the command after this many more successful ones, and how.
    faults: [Option<(u64, Fault)>; 4],
    /// The auth-key table; a free slot is all zero.
    auth: Vec<AuthKeyEntry>,
    /// Where [`NicAvTable::write_entries_with`] builds a write's records: the model of the
    /// firmware's staging buffer, kept between writes (up to [`STAGING_KEEP`] records) as that
    /// buffer would be. Like the entries, it stands for NIC memory and is not counted in the
    /// AV's `host_bytes`.
    staging: Vec<AvWriteRecord>,
}

impl MemoryNicTable {
    /// Auth-key slots of a new table (the reference NIC's `CAP_AUTH_KEY.slots`).
    pub const DEFAULT_AUTH_KEY_SLOTS: u16 = 64;

    /// A table of `capacity` entries, all invalid (what AV_CREATE makes), and an empty
    /// auth-key table of [`MemoryNicTable::DEFAULT_AUTH_KEY_SLOTS`] slots.
    pub fn new(capacity: u32) -> Self {
        MemoryNicTable {
            entries: vec![NicAvEntry::INVALID; capacity as usize],
            counters: NicCounters::default(),
            faults: [None; 4],
            auth: vec![AuthKeyEntry::default(); usize::from(Self::DEFAULT_AUTH_KEY_SLOTS)],
            staging: Vec::new(),
        }
    }

    /// Give the auth-key table `slots` slots (at most 256), all free.
    pub fn with_auth_key_slots(mut self, slots: u16) -> Self {
        let n = slots.min(MAX_AUTH_KEY_SLOTS);
        self.auth = vec![AuthKeyEntry::default(); usize::from(n)];
        self
    }

    /// The auth-key table, as the NIC holds it.
    pub fn auth_keys(&self) -> &[AuthKeyEntry] {
        &self.auth
    }

    /// Count an endpoint enabled with `slot` (what ENDPOINT_AUTH_KEYS does); `false` when the
    /// slot is free.
    pub fn grant_auth_key(&mut self, slot: u16) -> bool {
        match self
            .auth
            .get_mut(usize::from(slot))
            .filter(|e| e.is_valid())
        {
            Some(e) => {
                e.grants = U16::new(e.grants.get().saturating_add(1));
                true
            }
            None => false,
        }
    }

    /// Drop one endpoint's grant of `slot` (the endpoint closed).
    pub fn revoke_auth_key(&mut self, slot: u16) {
        if let Some(e) = self.auth.get_mut(usize::from(slot)) {
            e.grants = U16::new(e.grants.get().saturating_sub(1));
        }
    }

    fn auth_slot(&self, op: &str, slot: u16) -> Result<&AuthKeyEntry, FiError> {
        self.auth
            .get(usize::from(slot))
            .filter(|e| e.is_valid())
            .ok_or_else(|| FiError::io(format!("NIC {op} failed: slot {slot} is not in use")))
    }

    /// The fault an auth-key command meets: `Err` when it fails changing nothing (`FI_EIO`
    /// refused, `FI_ETIMEDOUT` unanswered and never applied), `Ok(true)` when it is applied
    /// and then reported unanswered ([`MemoryNicTable::auth_outcome`]).
    fn auth_fault(&mut self) -> Result<bool, FiError> {
        self.take_fault(NicOp::AuthKey).map_err(|e| {
            if e.in_doubt {
                FiError::new(FiErrno::FI_ETIMEDOUT, e.to_string())
            } else {
                FiError::new(e.errno(), e.to_string())
            }
        })
    }

    /// The outcome of an auth-key command applied after [`MemoryNicTable::auth_fault`].
    fn auth_outcome<T>(late: bool, value: T) -> Result<T, FiError> {
        if late {
            Err(FiError::new(
                FiErrno::FI_ETIMEDOUT,
                Self::in_doubt_error(NicOp::AuthKey).to_string(),
            ))
        } else {
            Ok(value)
        }
    }

    fn auth_done<T>(&mut self, r: Result<T, FiError>) -> Result<T, FiError> {
        match &r {
            Ok(_) => self.counters.auth_key_commands += 1,
            Err(_) => self.counters.failed += 1,
        }
        r
    }

    fn do_add_auth_key(&mut self, job_id: u32, source: u64) -> Result<u16, FiError> {
        if job_id > uet_fwif::av_entry::MAX_JOB_ID {
            return Err(FiError::io(format!(
                "NIC AUTH_KEY_ADD failed: JobID {job_id:#x} wider than 24 bits"
            )));
        }
        let free = self
            .auth
            .iter()
            .position(|e| !e.is_valid())
            .ok_or_else(|| {
                FiError::new(
                    FiErrno::FI_ENOSPC,
                    format!(
                        "NIC AUTH_KEY_ADD failed: all {} auth-key slots are in use",
                        self.auth.len()
                    ),
                )
            })?;
        let late = self.auth_fault()?;
        if let Some(e) = self.auth.get_mut(free) {
            *e = AuthKeyEntry {
                job_id: U32::new(job_id),
                flags: U16::new(AUTH_KEY_VALID),
                grants: U16::ZERO,
                av: U32::new(1),
                reserved: U32::ZERO,
                source: U64::new(source),
            };
        }
        let slot = u16::try_from(free)
            .map_err(|_| FiError::io("NIC AUTH_KEY_ADD failed: slot out of range"))?;
        Self::auth_outcome(late, slot)
    }

    fn do_remove_auth_key(&mut self, slot: u16, job_id: u32) -> Result<(), FiError> {
        let e = self.auth_slot("AUTH_KEY_REMOVE", slot)?;
        if e.job_id.get() != job_id {
            return Err(FiError::io(format!(
                "NIC AUTH_KEY_REMOVE failed: slot {slot} holds JobID {:#x}, not {job_id:#x}",
                e.job_id.get()
            )));
        }
        if e.grants.get() > 0 {
            return Err(FiError::new(
                FiErrno::FI_EBUSY,
                format!(
                    "NIC AUTH_KEY_REMOVE failed: slot {slot} is granted to {} endpoints",
                    e.grants.get()
                ),
            ));
        }
        let late = self.auth_fault()?;
        if let Some(e) = self.auth.get_mut(usize::from(slot)) {
            *e = AuthKeyEntry::default();
        }
        Self::auth_outcome(late, ())
    }

    fn do_set_auth_key_source(&mut self, slot: u16, source: u64) -> Result<(), FiError> {
        self.auth_slot("AUTH_KEY_SOURCE", slot)?;
        let late = self.auth_fault()?;
        if let Some(e) = self.auth.get_mut(usize::from(slot)) {
            e.source = U64::new(source);
        }
        Self::auth_outcome(late, ())
    }

    fn do_read_auth_keys(&mut self, first: u16, out: &mut [AuthKeyEntry]) -> Result<(), FiError> {
        let start = usize::from(first);
        let src = start
            .checked_add(out.len())
            .filter(|_| !out.is_empty())
            .and_then(|end| self.auth.get(start..end))
            .ok_or_else(|| {
                FiError::io(format!(
                    "NIC AUTH_KEY_READ failed: {} slots from {first} are not within the table's {}",
                    out.len(),
                    self.auth.len()
                ))
            })?;
        out.copy_from_slice(src);
        let late = self.auth_fault()?;
        Self::auth_outcome(late, ())
    }

    /// Number of entries.
    pub fn capacity(&self) -> u32 {
        // The length came from a u32.
        u32::try_from(self.entries.len()).unwrap_or(u32::MAX)
    }

    /// The whole table, as the NIC holds it.
    pub fn entries(&self) -> &[NicAvEntry] {
        &self.entries
    }

    /// The entry at `index`.
    pub fn entry(&self, index: u32) -> Option<&NicAvEntry> {
        self.entries.get(index as usize)
    }

    /// Mutable access to the table, to model a NIC that lost or corrupted entries.
    pub fn entries_mut(&mut self) -> &mut [NicAvEntry] {
        &mut self.entries
    }

    /// Number of valid entries.
    pub fn valid_count(&self) -> usize {
        self.entries.iter().filter(|e| e.is_valid()).count()
    }

    /// Commands executed so far.
    pub fn counters(&self) -> NicCounters {
        self.counters
    }

    /// Zero the counters.
    pub fn reset_counters(&mut self) {
        self.counters = NicCounters::default();
    }

    /// Make the command of kind `op` after `after` more successful ones fail (0: the next one),
    /// changing nothing. One pending fault per kind; a new call replaces it.
    pub fn fail_after(&mut self, op: NicOp, after: u64) {
        self.inject(op, after, Fault::Refused);
    }

    /// Make the command of kind `op` after `after` more successful ones fail as `fault` says.
    /// One pending fault per kind; a new call replaces it.
    pub fn inject(&mut self, op: NicOp, after: u64, fault: Fault) {
        self.faults[op as usize] = Some((after, fault));
    }

    /// Cancel every pending injected fault.
    pub fn clear_faults(&mut self) {
        self.faults = [None; 4];
    }

    /// The fault the command of kind `op` meets: `Err` when it fails changing nothing,
    /// `Ok(true)` when it is applied and then reported in doubt, `Ok(false)` for none.
    fn take_fault(&mut self, op: NicOp) -> Result<bool, NicError> {
        let slot = &mut self.faults[op as usize];
        match slot {
            Some((0, fault)) => {
                let fault = *fault;
                *slot = None;
                match fault {
                    Fault::Refused => Err(NicError::new(op.name(), "injected fault")),
                    Fault::InDoubt { applied: false } => Err(NicError::in_doubt(
                        op.name(),
                        "injected fault: unanswered, never applied".into(),
                    )),
                    Fault::InDoubt { applied: true } => Ok(true),
                    Fault::Busy => Err(NicError::busy(
                        op.name(),
                        "injected fault: no room for the command".into(),
                    )),
                }
            }
            Some((n, _)) => {
                *n -= 1;
                Ok(false)
            }
            None => Ok(false),
        }
    }

    /// The error of a command applied and then reported in doubt.
    fn in_doubt_error(op: NicOp) -> NicError {
        NicError::in_doubt(op.name(), "injected fault: unanswered, applied late".into())
    }

    fn check_index(&self, op: NicOp, index: u32) -> Result<(), NicError> {
        if index as usize >= self.entries.len() {
            return Err(NicError::new(
                op.name(),
                format!(
                    "index {index} beyond the table's {} entries",
                    self.entries.len()
                ),
            ));
        }
        Ok(())
    }

    fn fail<T>(&mut self, r: Result<T, NicError>) -> Result<T, NicError> {
        if r.is_err() {
            self.counters.failed += 1;
        }
        r
    }

    fn do_write(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        let op = NicOp::Write;
        check_batch(op.name(), records.len())?;
        for r in records {
            let index = r.index.get();
            self.check_index(op, index)?;
            if r.reserved.get() != 0 {
                return Err(NicError::new(
                    op.name(),
                    format!("record for index {index} has reserved bits set"),
                ));
            }
            r.entry.check().map_err(|why| {
                NicError::new(op.name(), format!("entry for index {index}: {why}"))
            })?;
            if let Some(slot) = r.entry.auth_key_slot() {
                if !self
                    .auth
                    .get(usize::from(slot))
                    .is_some_and(|e| e.is_valid())
                {
                    return Err(NicError::new(
                        op.name(),
                        format!("entry for index {index} names auth-key slot {slot}, not in use"),
                    ));
                }
            }
            if r.entry.is_range() {
                let span = r.entry.range_indices();
                if span.start != u64::from(index) || span.end > self.entries.len() as u64 {
                    return Err(NicError::new(
                        op.name(),
                        format!("range record at index {index} covers {span:?}"),
                    ));
                }
                let covered = self.entries.get(span.start as usize..span.end as usize);
                if covered.is_some_and(|c| c.iter().any(NicAvEntry::is_valid)) {
                    return Err(NicError::new(
                        op.name(),
                        format!("range {span:?} overlaps valid entries"),
                    ));
                }
            }
        }
        let late = self.take_fault(op)?;
        for r in records {
            let index = r.index.get();
            if r.entry.is_range() {
                // This reference table stores every member expanded: what AV_READ returns.
                let span = r.entry.range_indices();
                for i in span.start as u32..span.end as u32 {
                    if let Some(slot) = self.entries.get_mut(i as usize) {
                        *slot = r.entry.range_member(i).unwrap_or(NicAvEntry::INVALID);
                    }
                }
            } else if let Some(slot) = self.entries.get_mut(index as usize) {
                *slot = r.entry;
            }
        }
        self.counters.writes += 1;
        self.counters.records_written += records.len() as u64;
        if late {
            return Err(Self::in_doubt_error(op));
        }
        Ok(())
    }

    fn do_invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        let op = NicOp::Invalidate;
        check_batch(op.name(), indices.len())?;
        for &i in indices {
            self.check_index(op, i)?;
        }
        let late = self.take_fault(op)?;
        for &i in indices {
            if let Some(slot) = self.entries.get_mut(i as usize) {
                *slot = NicAvEntry::INVALID;
            }
        }
        self.counters.invalidates += 1;
        self.counters.indices_invalidated += indices.len() as u64;
        if late {
            return Err(Self::in_doubt_error(op));
        }
        Ok(())
    }

    fn do_read(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        let op = NicOp::Read;
        check_batch(op.name(), out.len())?;
        let start = first as usize;
        let end = start
            .checked_add(out.len())
            .filter(|&end| end <= self.entries.len())
            .ok_or_else(|| {
                NicError::new(
                    op.name(),
                    format!(
                        "{} entries from {first} run past the table's {} entries",
                        out.len(),
                        self.entries.len()
                    ),
                )
            })?;
        if self.take_fault(op)? {
            // A read that went unanswered delivered nothing.
            return Err(Self::in_doubt_error(op));
        }
        if let Some(src) = self.entries.get(start..end) {
            out.copy_from_slice(src);
        }
        self.counters.reads += 1;
        self.counters.entries_read += out.len() as u64;
        Ok(())
    }
}

impl NicAvTable for MemoryNicTable {
    /// The one table of its own auth-key slots, handle 1.
    fn table_handle(&self) -> Option<u32> {
        Some(1)
    }

    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        let r = self.do_write(records);
        self.fail(r)
    }

    fn write_entries_with(
        &mut self,
        count: usize,
        record: &mut dyn FnMut(usize) -> AvWriteRecord,
    ) -> Result<(), NicError> {
        let mut staging = core::mem::take(&mut self.staging);
        staging.clear();
        staging.extend((0..count).map(record));
        let r = self.do_write(&staging);
        // Kept for the next write, unless an unusually large one grew it.
        if staging.capacity() <= STAGING_KEEP {
            staging.clear();
            self.staging = staging;
        }
        self.fail(r)
    }

    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        let r = self.do_invalidate(indices);
        self.fail(r)
    }

    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        let r = self.do_read(first, out);
        self.fail(r)
    }

    fn add_auth_key(&mut self, job_id: u32, source: u64) -> Result<u16, FiError> {
        let r = self.do_add_auth_key(job_id, source);
        self.auth_done(r)
    }

    fn remove_auth_key(&mut self, slot: u16, job_id: u32) -> Result<(), FiError> {
        let r = self.do_remove_auth_key(slot, job_id);
        self.auth_done(r)
    }

    fn set_auth_key_source(&mut self, slot: u16, source: u64) -> Result<(), FiError> {
        let r = self.do_set_auth_key_source(slot, source);
        self.auth_done(r)
    }

    fn read_auth_keys(&mut self, first: u16, out: &mut [AuthKeyEntry]) -> Result<(), FiError> {
        let r = self.do_read_auth_keys(first, out);
        self.auth_done(r)
    }

    fn auth_key_users(&self, slot: u16) -> usize {
        self.auth
            .get(usize::from(slot))
            .filter(|e| e.is_valid())
            .map_or(0, |e| usize::from(e.grants.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use uet_fwif::address::{caps, AddressingMode};
    use uet_fwif::UetAddress;

    /// A table that only notes the generation it is told it reflects.
    struct Noting(std::rc::Rc<std::cell::Cell<u64>>);

    impl NicAvTable for Noting {
        fn write_entries(&mut self, _: &[AvWriteRecord]) -> Result<(), NicError> {
            Ok(())
        }
        fn invalidate(&mut self, _: &[u32]) -> Result<(), NicError> {
            Ok(())
        }
        fn read_entries(&mut self, _: u32, _: &mut [NicAvEntry]) -> Result<(), NicError> {
            Ok(())
        }
        fn reflects_generation(&self, generation: u64) {
            self.0.set(generation);
        }
    }

    /// A named AV's table behind `&mut` or a `Box` still learns the generation it reflects
    /// (the pointer's own default would drop it).
    #[test]
    fn a_table_behind_a_pointer_learns_the_generation_it_reflects() {
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut table = Noting(seen.clone());
        NicAvTable::reflects_generation(&&mut table, 3);
        assert_eq!(seen.get(), 3);
        let boxed: Box<dyn NicAvTable> = Box::new(Noting(seen.clone()));
        NicAvTable::reflects_generation(&boxed, 9);
        assert_eq!(seen.get(), 9);
    }

    fn entry(n: u8) -> NicAvEntry {
        let a = UetAddress {
            caps: caps::HPC,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: u16::from(n),
            fabric_addr: std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, n.max(1))),
            ri_start: 0,
            ri_count: 1,
            initiator: u32::from(n),
        };
        NicAvEntry::for_peer(&a, 7)
    }

    fn rec(index: u32, n: u8) -> AvWriteRecord {
        AvWriteRecord {
            index: index.into(),
            reserved: Default::default(),
            entry: entry(n),
        }
    }

    #[test]
    fn write_read_invalidate() {
        let mut t = MemoryNicTable::new(4);
        t.write_entries(&[rec(0, 1), rec(3, 2)]).unwrap();
        let mut out = [NicAvEntry::INVALID; 4];
        t.read_entries(0, &mut out).unwrap();
        assert_eq!(out[0], entry(1));
        assert_eq!(out[3], entry(2));
        assert!(!out[1].is_valid());
        t.invalidate(&[3]).unwrap();
        assert!(!t.entry(3).unwrap().is_valid());
        let c = t.counters();
        assert_eq!((c.writes, c.reads, c.invalidates), (1, 1, 1));
        assert_eq!(c.records_written, 2);
        assert_eq!(c.commands(), 3);
    }

    #[test]
    fn rejects_whole_batches() {
        let mut t = MemoryNicTable::new(4);
        let e = t.write_entries(&[rec(0, 1), rec(4, 2)]).unwrap_err();
        assert_eq!(e.op, "AV_WRITE");
        assert!(e.source().is_some());
        assert!(!t.entry(0).unwrap().is_valid(), "nothing applied");
        assert!(t.write_entries(&[]).is_err());
        assert!(t.invalidate(&[]).is_err());
        assert!(t.invalidate(&[9]).is_err());
        let mut out = [NicAvEntry::INVALID; 2];
        assert!(t.read_entries(3, &mut out).is_err());
        assert!(t.read_entries(u32::MAX, &mut out).is_err());
        assert_eq!(t.counters().failed, 6);
    }

    #[test]
    fn injected_faults_fire_once_and_change_nothing() {
        let mut t = MemoryNicTable::new(4);
        t.fail_after(NicOp::Write, 1);
        t.write_entries(&[rec(0, 1)]).unwrap();
        let e = t.write_entries(&[rec(1, 2)]).unwrap_err();
        assert_eq!(e.to_string(), "NIC AV_WRITE failed: injected fault");
        assert!(!t.entry(1).unwrap().is_valid());
        t.write_entries(&[rec(1, 2)]).unwrap();
        assert!(t.entry(1).unwrap().is_valid());
    }
}
