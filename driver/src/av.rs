//! The AV on the NIC: `uet-av`'s host mirror over a NIC AV table programmed by admin commands.
//!
//! `uet-av` owns the fi_av(3) semantics and the host mirror; this module gives it a
//! [`NicAvTable`] that turns each batch into one AV_WRITE, AV_INVALIDATE or AV_READ through the
//! admin queue's scratch buffer — except the write of one entry (an insert without `FI_MORE`),
//! which goes through the AV write window, and the removal of a few
//! ([`DOORBELL_INVALIDATE_MAX`]), which rings `AV_INVALIDATE_DOORBELL`: register writes, no
//! admin round trip. A batch of new peers at consecutive indices with nothing beside their
//! addresses ([`NicAvTable::write_peers`], what a fresh AV's inserts are) goes, on a NIC of
//! interface 1.13 or later, as one AV_WRITE_PEERS: the mirror's address slots copied into the
//! scratch buffer as they are, which the NIC turns into entries itself.
//!
//! The asynchronous inserts of an AV opened with `FI_EVENT` submit their AV_WRITE with
//! [`NicAvTable::submit_write`]: the records go to DMA memory of their own (the scratch buffer
//! belongs to synchronous commands), the command is submitted without waiting, and the
//! returned [`PendingWrite`] completes when the admin queue has collected its completion —
//! whoever polls first (the AV's progress, reading its event queue, or any synchronous admin
//! command, which files the completions it meets). A write that times out is abandoned, and
//! its memory is kept, handed back to no one, until the NIC's reset (the `Nic`'s drop): the
//! NIC might still read it.
//!
//! A command that times out is reported in doubt ([`uet_av::NicError::in_doubt`]): the device
//! may still run it, and the AV then rewrites the entries it concerned from the mirror. Those
//! rewrites must land after it: the admin queue executes in order, and while any abandoned
//! command may still run the window and the doorbell are not used (they are posted register
//! writes that could overtake it).
//!
//! `fi_close` of the AV ([`uet_av::AddressVector::close`]) is `FI_EBUSY` while endpoints
//! created with it exist: each holds the table ([`AvTableHandle`]).
//!
//! Auth keys (`FI_AV_AUTH_KEY`): each key of the AV is a slot of the NIC's auth-key table
//! owned by the AV table (AUTH_KEY_ADD, AUTH_KEY_REMOVE, AUTH_KEY_SOURCE, AUTH_KEY_READ).
//! Endpoints created with the AV are granted its keys' slots ([`crate::Endpoint`]); the NIC
//! keeps a per-slot count of the endpoints of this process granted it, which
//! [`NicAvTable::auth_key_users`] reports so a key in use is refused `FI_EBUSY` before the NIC
//! is asked. AV_DESTROY frees the AV's slots.

use crate::dma::DmaRegion;
use crate::domain::{DomainRecord, DomainSeat};
use crate::error::DriverError;
use crate::mapped::MappedRegion;
use crate::nic::{
    Nic, NicInner, AUTH_KEY_OWNER_CHECK_INTERFACE_MINOR, AV_DOORBELL_INTERFACE_MINOR,
    AV_WRITE_PEERS_INTERFACE_MINOR, AV_WRITE_WINDOW_INTERFACE_MINOR,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};
use uet_av::nic::{check_batch, peer_record};
use uet_av::{
    AddressVector, AvAttr, AvLimits, FiErrno, FiError, NamedAv, NicAvTable, NicError, PendingWrite,
    FI_AV_AUTH_KEY,
};
use uet_fwif::address::ADDRESS_BYTES;
use uet_fwif::admin::{
    AvCreateBody, AvWritePeersBody, BufferBody, Command, Opcode, RangeBody, MAX_BATCH,
};
use uet_fwif::auth_key::{AuthKeyAddBody, AuthKeyEntry, AuthKeyRemoveBody, AuthKeySourceBody};
use uet_fwif::av_entry::{entry_flags, MAX_JOB_ID};
use uet_fwif::{AvWriteRecord, NicAvEntry, Status};
use uet_regs::{
    AvInvalidateDoorbell, AvWriteDoorbell, RegisterAccess, ADMIN_SQ_BASE, AV_INVALIDATE_DOORBELL,
    AV_WRITE_DOORBELL, AV_WRITE_DROPS, AV_WRITE_ENTRY_0,
};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Removals of at most this many entries use `AV_INVALIDATE_DOORBELL` instead of an
/// AV_INVALIDATE command.
pub const DOORBELL_INVALIDATE_MAX: usize = 8;

/// A NIC AV table: created by AV_CREATE, destroyed by AV_DESTROY when the last user (the AV
/// itself or an endpoint bound to it) lets go.
pub struct AvTableHandle {
    nic: Arc<NicInner>,
    handle: u32,
    capacity: u32,
    /// AV_CREATE `max_group_id`: the peer groups endpoints bound to the table receive.
    max_group_id: u32,
    /// The named AV the table holds this process's entries of; `None` for an unnamed AV.
    named: Option<Arc<NamedTable>>,
    /// The domain the AV was opened in, which counts it until the table goes; `None` for an
    /// AV opened on the NIC alone ([`Nic::open_av`]).
    domain: Option<DomainSeat>,
    /// The changes made to the table and its auth keys, for a reader outside the AV (the
    /// telemetry socket) to tell a table read in several pieces from one that changed between
    /// them.
    changes: Arc<TableChanges>,
}

/// How many changes to a NIC AV table (its entries or the auth-key slots it owns) have begun,
/// and how many have ended: a reader that reads `ended` before its reads and `begun` after
/// them, and finds the two equal, read a table no change touched meanwhile (as a seqlock's
/// reader). A change ends once its command is on the admin queue, or its register writes
/// posted: the NIC runs them in order, before any AV_READ a reader submits after.
#[derive(Debug, Default)]
pub(crate) struct TableChanges {
    begun: std::sync::atomic::AtomicU64,
    ended: std::sync::atomic::AtomicU64,
}

impl TableChanges {
    /// A change of the table begins; it ends when the returned guard goes. The guard borrows
    /// the counters: a change costs two atomic additions, not a reference count's too.
    fn begin(&self) -> TableChange<'_> {
        self.begun.fetch_add(1, Ordering::SeqCst);
        TableChange(self)
    }

    /// Changes ended so far: read before the reads a reader checks.
    pub(crate) fn ended(&self) -> u64 {
        self.ended.load(Ordering::SeqCst)
    }

    /// Changes begun so far: read after the reads a reader checks.
    pub(crate) fn begun(&self) -> u64 {
        self.begun.load(Ordering::SeqCst)
    }
}

/// A change of a table in progress ([`TableChanges::begin`]).
pub(crate) struct TableChange<'a>(&'a TableChanges);

impl Drop for TableChange<'_> {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::SeqCst);
    }
}

/// What the NIC records of a named AV's table for inspection from outside
/// ([`crate::telemetry`]): the AV's name, and the AV generation the table reflects.
#[derive(Debug)]
pub(crate) struct NamedTable {
    /// The AV name (`fi_av_attr::name`).
    pub(crate) name: String,
    /// [`NicAvTable::reflects_generation`]'s last value; [`NamedTable::NOT_CAUGHT_UP`]
    /// before the first.
    generation: std::sync::atomic::AtomicU64,
}

impl NamedTable {
    /// [`NamedTable::generation`] before the table first caught up with the AV.
    pub(crate) const NOT_CAUGHT_UP: u64 = u64::MAX;

    /// The AV generation the table reflects, `None` before it first caught up.
    pub(crate) fn generation(&self) -> Option<u64> {
        Some(self.generation.load(std::sync::atomic::Ordering::Acquire))
            .filter(|&g| g != Self::NOT_CAUGHT_UP)
    }
}

impl AvTableHandle {
    /// A change of the grants of the auth-key slots the table owns begins (an endpoint of its
    /// AV enabled with them, granted one more, or destroyed): the telemetry socket's dump
    /// shows the grants with the table. It ends when the guard goes.
    pub(crate) fn grants_change(&self) -> TableChange<'_> {
        self.changes.begin()
    }

    /// The NIC's handle for the table.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The largest peer group id the table accepts (AV_CREATE `max_group_id`); 0 without
    /// peer groups.
    pub fn max_group_id(&self) -> u32 {
        self.max_group_id
    }

    /// Entries the table holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The named AV the table belongs to, if any.
    pub(crate) fn named(&self) -> Option<&Arc<NamedTable>> {
        self.named.as_ref()
    }

    /// The changes made to the table ([`TableChanges`]).
    pub(crate) fn changes(&self) -> &Arc<TableChanges> {
        &self.changes
    }

    /// Whether the AV was opened in the domain `domain` ([`crate::Domain::open_av`]).
    pub(crate) fn is_in(&self, domain: &Arc<DomainRecord>) -> bool {
        self.domain.as_ref().is_some_and(|d| d.is_of(domain))
    }

    /// Whether the table is on the NIC `nic` opened. A table handle names a table of its own
    /// NIC only: every NIC numbers its tables from 1.
    pub(crate) fn is_on(&self, nic: &Arc<NicInner>) -> bool {
        Arc::ptr_eq(&self.nic, nic)
    }
}

impl AvTableHandle {
    /// `out.len()` entries of the NIC table from `first` (AV_READ).
    pub fn read_entries(&self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        self.nic.read_av_entries(self.handle, first, out)
    }
}

impl NicInner {
    /// One AV_READ per [`MAX_BATCH`] entries: `out.len()` entries of NIC table `av` from
    /// `first`. Reading has no effect on the table, so any part of the driver may read it (the
    /// AV; the telemetry socket, for `uetctl`) while the AV changes it: each AV_READ sees the
    /// table between two admin commands.
    pub(crate) fn read_av_entries(
        &self,
        av: u32,
        first: u32,
        out: &mut [NicAvEntry],
    ) -> Result<(), NicError> {
        const OP: &str = "AV_READ";
        let mut at = first;
        for chunk in out.chunks_mut(MAX_BATCH as usize) {
            let mut admin = self.admin().map_err(|e| nic_error(OP, e))?;
            let len = core::mem::size_of_val(chunk);
            let mut body = RangeBody::new_zeroed();
            body.buf = U64::new(
                admin
                    .scratch(self.bar(), Opcode::AvRead)
                    .map_err(|e| nic_error(OP, e))?
                    .iova(),
            );
            body.len = U32::new(len as u32);
            body.first = U32::new(at);
            body.count = U32::new(chunk.len() as u32);
            admin
                .execute(self.bar(), Command::AvRead { av, body })
                .map_err(|e| nic_error(OP, e))?;
            admin
                .scratch_result()
                .read_bytes(0, chunk.as_mut_bytes())
                .map_err(|e| nic_error(OP, e.into()))?;
            at = at.saturating_add(chunk.len() as u32);
        }
        Ok(())
    }

    /// One AUTH_KEY_READ of `out.len()` slots of the NIC's auth-key table from `first`
    /// (every AV's slots: each names the table that owns it).
    pub(crate) fn read_auth_keys(
        &self,
        first: u16,
        out: &mut [AuthKeyEntry],
    ) -> Result<(), FiError> {
        let mut admin = self.admin().map_err(crate::errno::admin_to_fi)?;
        let len = core::mem::size_of_val(out);
        let mut body = RangeBody::new_zeroed();
        body.buf = U64::new(
            admin
                .scratch(self.bar(), Opcode::AuthKeyRead)
                .map_err(crate::errno::admin_to_fi)?
                .iova(),
        );
        body.len = U32::new(len as u32);
        body.first = U32::new(u32::from(first));
        body.count = U32::new(out.len() as u32);
        admin
            .execute(self.bar(), Command::AuthKeyRead(body))
            .map_err(crate::errno::admin_to_fi)?;
        admin
            .scratch_result()
            .read_bytes(0, out.as_mut_bytes())
            .map_err(|e| crate::errno::admin_to_fi(e.into()))
    }
}

impl Drop for AvTableHandle {
    fn drop(&mut self) {
        if self.nic.in_forked_child() {
            // The parent's table ([`crate::fork`]).
            return;
        }
        if let Err(e) = self.nic.destroy(Command::AvDestroy { av: self.handle }) {
            tracing::warn!(av = self.handle, "AV_DESTROY failed: {e}");
        }
    }
}

/// The [`NicAvTable`] of one NIC AV table.
pub struct NicAv {
    table: Arc<AvTableHandle>,
}

impl NicAv {
    /// The table handle, shared with endpoints bound to this AV.
    pub fn table(&self) -> &Arc<AvTableHandle> {
        &self.table
    }
}

/// A driver error of admin command `op` as the AV's table trait reports it: refused; busy when
/// the admin ring had no room (not submitted: the AV call fails with `FI_EAGAIN`); gone in a
/// process forked from the NIC's (not submitted: `FI_ENODEV`); or — timed out — in doubt (the
/// device may still run it; see [`uet_av::NicAvTable`]).
fn nic_error(op: &'static str, e: DriverError) -> NicError {
    match e {
        e if e.in_doubt() => NicError::in_doubt(op, Box::new(e)),
        DriverError::AdminRingFull { .. } => NicError::busy(op, Box::new(e)),
        DriverError::DeviceGone => NicError::gone(op, Box::new(e)),
        _ => NicError {
            op,
            source: Box::new(e),
            in_doubt: false,
            busy: false,
            gone: false,
        },
    }
}

impl NicAv {
    /// One record through the AV write window: the entry in one burst of eight posted writes,
    /// the doorbell, and a read of `AV_WRITE_DROPS`, which returns once the writes have landed and
    /// says whether the NIC stored the entry (it refuses what AV_WRITE would, and then
    /// changes nothing). No admin round trip, no DMA. While the count the last window write
    /// read is 0, that is the count before (the window is the NIC's, under its lock): a
    /// function reset, which zeroes the count, cannot hide a drop behind it. A count above 0
    /// is read afresh first, since the count of a reset NIC can climb back to it unseen. A read
    /// of all ones, or a count below the last one read (a function reset), leaves the entry in
    /// doubt, and the next write reads the count afresh. So does a count above 0 that did not
    /// move while the function was reset meanwhile (`ADMIN_SQ_BASE` cleared, read only then):
    /// a reset between the read before and the doorbell zeroes the count, and the drop of the
    /// entry by the NIC without tables brings it back to 1. A count that moved is a refusal,
    /// said to be the reset's when `ADMIN_SQ_BASE` no longer holds the admin ring (read only
    /// then).
    fn write_through_window(&self, record: &AvWriteRecord) -> Result<(), NicError> {
        const OP: &str = "AV_WRITE_DOORBELL";
        let _change = self.table.changes.begin();
        let index = record.index.get();
        // The window takes the entry alone; the record's reserved word, which AV_WRITE checks,
        // is checked here.
        if record.reserved.get() != 0 {
            return Err(NicError::new(
                OP,
                format!(
                    "the record for index {index} has its reserved word set ({:#x}): AV_WRITE \
                     refuses it",
                    record.reserved.get()
                ),
            ));
        }
        let av = self.doorbell_target(OP, core::iter::once(index))?;
        let nic = &self.table.nic;
        let bar = nic.bar();
        let mut window = nic.av_window().map_err(|e| nic_error(OP, e))?;
        let last = *window;
        let before = match last {
            Some(0) => 0,
            _ => bar.read(AV_WRITE_DROPS),
        };
        // The entry as AV_WRITE_ENTRY_0..7 take it: eight little-endian words, one burst.
        let words = <[U64; 8]>::read_from_bytes(record.entry.as_bytes())
            .map_err(|_| NicError::new(OP, "an AV entry is not 64 bytes"))?
            .map(U64::get);
        bar.write64_burst(AV_WRITE_ENTRY_0.offset(), &words);
        bar.write(
            AV_WRITE_DOORBELL,
            AvWriteDoorbell::new().with_av(av).with_index(index),
        );
        let after = bar.read(AV_WRITE_DROPS);
        // A read of all ones failed (no function answered it), and a count lower than the one
        // read before it was reset with the function; a count above 0 that stayed put may
        // have been reset after it was read and climbed back with this entry's drop, which
        // the function's lost admin ring tells: either way, whether the NIC stored the entry
        // is not known, and the next write reads its own count before it rings.
        let went_down = after < before
            || last.is_some_and(|last| before < last)
            || (before != 0 && after == before && nic.was_reset());
        if before == u64::MAX || after == u64::MAX || went_down {
            *window = None;
            return Err(NicError::in_doubt(
                OP,
                format!(
                    "AV_WRITE_DROPS read {before} before and {after} after the entry for index \
                     {index}: whether the NIC stored it is not known"
                )
                .into(),
            ));
        }
        *window = Some(after);
        if after != before {
            if nic.was_reset() {
                // A table a reset took refuses every write; said as the admin path says it.
                return Err(NicError::new(
                    OP,
                    format!(
                        "the NIC refused the entry for index {index}: the function was reset \
                         under the driver (ADMIN_SQ_BASE {:#x} no longer holds its admin ring), \
                         and holds no table until the NIC is opened again",
                        bar.read(ADMIN_SQ_BASE)
                    ),
                ));
            }
            return Err(NicError::new(
                OP,
                format!(
                    "the NIC refused the entry for index {index} (AV_WRITE_DROPS {before} -> \
                     {after}): it fails AV_WRITE's checks"
                ),
            ));
        }
        Ok(())
    }

    /// The table's handle as the AV doorbells carry it (16 bits), after checking every index
    /// against the table: a doorbell has no status to refuse them with.
    fn doorbell_target(
        &self,
        op: &'static str,
        mut indices: impl Iterator<Item = u32>,
    ) -> Result<u16, NicError> {
        let capacity = self.table.capacity;
        let Ok(av) = u16::try_from(self.table.handle) else {
            return Err(NicError::new(
                op,
                "AV handle wider than the doorbell's 16 bits",
            ));
        };
        if let Some(bad) = indices.find(|&i| i >= capacity) {
            return Err(NicError::new(
                op,
                format!("index {bad} outside the table's {capacity} entries"),
            ));
        }
        Ok(av)
    }
}

impl NicAvTable for NicAv {
    fn table_handle(&self) -> Option<u32> {
        Some(self.table.handle)
    }

    fn reflects_generation(&self, generation: u64) {
        if let Some(named) = &self.table.named {
            named
                .generation
                .store(generation, std::sync::atomic::Ordering::Release);
        }
    }

    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        self.write_entries_with(records.len(), &mut |i| {
            // Always within `records` (exactly that many are asked for); past it, an index
            // outside every table, so that a miscount fails the whole write and stores nothing.
            records.get(i).copied().unwrap_or(AvWriteRecord {
                index: u32::MAX.into(),
                reserved: Default::default(),
                entry: NicAvEntry::INVALID,
            })
        })
    }

    fn write_entries_with(
        &mut self,
        count: usize,
        record: &mut dyn FnMut(usize) -> AvWriteRecord,
    ) -> Result<(), NicError> {
        const OP: &str = "AV_WRITE";
        const RECORD_BYTES: usize = core::mem::size_of::<AvWriteRecord>();
        let _change = self.table.changes.begin();
        // One command, applied whole or not at all: as the trait says, and as the firmware
        // and the in-memory table check.
        check_batch(OP, count)?;
        // The window is a posted register write: never while an abandoned admin command may
        // still run, which could land after it (then the admin queue, in order, is used).
        if count == 1
            && self.table.nic.identity.interface_minor >= AV_WRITE_WINDOW_INTERFACE_MINOR
            && !self.table.nic.admin_unanswered()
        {
            return self.write_through_window(&record(0));
        }
        let nic = &self.table.nic;
        let mut admin = nic.admin().map_err(|e| nic_error(OP, e))?;
        // Each record is built where AV_WRITE reads it: the scratch buffer.
        let scratch = admin
            .scratch(nic.bar(), Opcode::AvWrite)
            .map_err(|e| nic_error(OP, e))?;
        for i in 0..count {
            scratch
                .write_obj(i * RECORD_BYTES, &record(i))
                .map_err(|e| nic_error(OP, e.into()))?;
        }
        let mut body = BufferBody::new_zeroed();
        body.buf = U64::new(scratch.iova());
        body.len = U32::new((count * RECORD_BYTES) as u32);
        body.count = U32::new(count as u32);
        admin
            .execute(
                nic.bar(),
                Command::AvWrite {
                    av: self.table.handle,
                    body,
                },
            )
            .map(|_| ())
            .map_err(|e| nic_error(OP, e))
    }

    fn write_peers(
        &mut self,
        first: u32,
        addrs: &[[u8; ADDRESS_BYTES]],
        job_id: u32,
        entry_flags: u16,
    ) -> Result<(), NicError> {
        const OP: &str = "AV_WRITE_PEERS";
        check_batch(OP, addrs.len())?;
        let from_address = uet_fwif::av_entry::entry_flags::FROM_ADDRESS;
        // The NIC gives each entry every flag its address implies: the AV must allow them all
        // (it allows what the NIC defines, so from 1.13 on it does). One entry takes the window.
        // (`write_entries_with` counts its change itself.)
        if addrs.len() == 1
            || self.table.nic.identity.interface_minor < AV_WRITE_PEERS_INTERFACE_MINOR
            || entry_flags & from_address != from_address
        {
            return self.write_entries_with(addrs.len(), &mut |i| {
                peer_record(first, addrs, job_id, entry_flags, i)
            });
        }
        let _change = self.table.changes.begin();
        let nic = &self.table.nic;
        let mut admin = nic.admin().map_err(|e| nic_error(OP, e))?;
        let scratch = admin
            .scratch(nic.bar(), Opcode::AvWritePeers)
            .map_err(|e| nic_error(OP, e))?;
        let bytes = addrs.as_flattened();
        scratch
            .write_bytes(0, bytes)
            .map_err(|e| nic_error(OP, e.into()))?;
        let mut body = AvWritePeersBody::new_zeroed();
        body.buf = U64::new(scratch.iova());
        body.len = U32::new(bytes.len() as u32);
        body.first = U32::new(first);
        body.count = U32::new(addrs.len() as u32);
        body.job_id = U32::new(job_id & MAX_JOB_ID);
        admin
            .execute(
                nic.bar(),
                Command::AvWritePeers {
                    av: self.table.handle,
                    body,
                },
            )
            .map(|_| ())
            .map_err(|e| nic_error(OP, e))
    }

    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        const OP: &str = "AV_INVALIDATE";
        let _change = self.table.changes.begin();
        check_batch(OP, indices.len())?;
        let nic = &self.table.nic;
        if indices.len() <= DOORBELL_INVALIDATE_MAX
            && nic.identity.interface_minor >= AV_DOORBELL_INTERFACE_MINOR
            && !nic.admin_unanswered()
        {
            // A few entries: one posted register write each, no admin round trip. The AV has
            // checked every index against the table, and register writes reach the NIC in
            // order, so no later doorbell can see the entries.
            let av = self.doorbell_target(OP, indices.iter().copied())?;
            // One writer at a time, as for the write window: a path that splits the 64-bit
            // doorbell into two 32-bit halves has the NIC hold the low half (the index) until
            // the high half (the table) comes, so halves of two threads' doorbells that
            // interleaved would invalidate one table's entry at the other's index and drop the
            // other invalidation.
            let _one_writer = nic.av_window().map_err(|e| nic_error(OP, e))?;
            let bar = nic.bar();
            for &index in indices {
                bar.write(
                    AV_INVALIDATE_DOORBELL,
                    AvInvalidateDoorbell::new().with_av(av).with_index(index),
                );
            }
            return Ok(());
        }
        // The indices as AV_INVALIDATE reads them, little-endian, staged a piece at a time on
        // the stack: no allocation per command.
        let mut piece = [U32::ZERO; 512];
        let mut admin = nic.admin().map_err(|e| nic_error(OP, e))?;
        let scratch = admin
            .scratch(nic.bar(), Opcode::AvInvalidate)
            .map_err(|e| nic_error(OP, e))?;
        for (k, part) in indices.chunks(piece.len()).enumerate() {
            for (dst, &index) in piece.iter_mut().zip(part) {
                *dst = U32::new(index);
            }
            let bytes = piece.get(..part.len()).unwrap_or_default().as_bytes();
            scratch
                .write_bytes(k * core::mem::size_of_val(&piece), bytes)
                .map_err(|e| nic_error(OP, e.into()))?;
        }
        let mut body = RangeBody::new_zeroed();
        body.buf = U64::new(scratch.iova());
        body.len = U32::new(core::mem::size_of_val(indices) as u32);
        body.count = U32::new(indices.len() as u32);
        admin
            .execute(
                nic.bar(),
                Command::AvInvalidate {
                    av: self.table.handle,
                    body,
                },
            )
            .map(|_| ())
            .map_err(|e| nic_error(OP, e))
    }

    fn submit_write(
        &mut self,
        records: &[AvWriteRecord],
    ) -> Result<Box<dyn PendingWrite>, NicError> {
        const OP: &str = "AV_WRITE";
        let _change = self.table.changes.begin();
        let nic = &self.table.nic;
        let bytes = records.as_bytes();
        check_batch(OP, records.len())?;
        // At most MAX_BATCH, checked above.
        let count = records.len() as u32;
        // Normal pages: a batch is small and lives only until its completion.
        let buffer = DmaRegion::new_normal_in(bytes.len(), &nic.iova)
            .map_err(|e| nic_error(OP, e.into()))
            .and_then(|r| {
                MappedRegion::map_claimed(&nic.claim, r).map_err(|e| nic_error(OP, e.into()))
            })?;
        buffer
            .region()
            .write_bytes(0, bytes)
            .map_err(|e| nic_error(OP, e.into()))?;
        let mut body = BufferBody::new_zeroed();
        body.buf = U64::new(buffer.region().iova());
        body.len = U32::new(bytes.len() as u32);
        body.count = U32::new(count);
        let id = nic
            .admin()
            .and_then(|mut admin| {
                admin.submit(
                    nic.bar(),
                    Command::AvWrite {
                        av: self.table.handle,
                        body,
                    },
                )
            })
            .map_err(|e| nic_error(OP, e))?;
        Ok(Box::new(AdminWrite {
            nic: nic.clone(),
            id,
            buffer: Some(buffer),
            outcome: None,
            seen: None,
            gives_up_at: None,
        }))
    }

    fn check_close(&self) -> Result<(), FiError> {
        // In a process forked from the one that opened the NIC the table is the parent's, and
        // this close destroys nothing on the NIC (see `crate::fork`). The child's endpoints
        // never run: one whose lock a thread of the parent held at the fork stays open for
        // good, holding the table, which its count here keeps alive.
        if self.table.nic.in_forked_child() {
            return Ok(());
        }
        let endpoints = Arc::strong_count(&self.table) - 1;
        if endpoints > 0 {
            return Err(FiError::new(
                FiErrno::FI_EBUSY,
                format!("fi_close: {endpoints} endpoints still use the AV; close them first"),
            ));
        }
        Ok(())
    }

    fn add_auth_key(&mut self, job_id: u32, source: u64) -> Result<u16, FiError> {
        let _change = self.table.changes.begin();
        let mut body = AuthKeyAddBody::new_zeroed();
        body.job_id = U32::new(job_id);
        body.source = U64::new(source);
        let r = self
            .table
            .nic
            .execute(Command::AuthKeyAdd {
                av: self.table.handle,
                body,
            })
            .map_err(|e| match e {
                // The AV checked the JobID, and the table is its own: a table the NIC does not
                // know, or a body it does not take, is the NIC's state, not the caller's
                // argument (FI_EINVAL), as for AUTH_KEY_REMOVE and AUTH_KEY_SOURCE.
                DriverError::AdminStatus {
                    status: Status::InvalidHandle | Status::InvalidField,
                    ..
                } => FiError::io(format!("NIC AUTH_KEY_ADD refused: {e}")),
                e => crate::errno::admin_to_fi(e),
            })?;
        let slot = u16::try_from(r.result0).map_err(|_| {
            FiError::io(format!(
                "AUTH_KEY_ADD returned slot {} beyond the table",
                r.result0
            ))
        })?;
        // The slot was free: no endpoint is granted it. A count left from an endpoint granted
        // it under its last owner, whose ENDPOINT_DESTROY went unanswered and ran late (the
        // slot was freed after it), is stale, and would refuse this key's removal FI_EBUSY.
        if let Some(n) = self.table.nic.auth_grants.get(usize::from(slot)) {
            n.store(0, Ordering::Release);
        }
        Ok(slot)
    }

    fn remove_auth_key(&mut self, slot: u16, job_id: u32) -> Result<(), FiError> {
        let _change = self.table.changes.begin();
        let nic = &self.table.nic;
        // Where the device can, the NIC checks the slot is still this table's key.
        let body = if nic.identity.interface_minor >= AUTH_KEY_OWNER_CHECK_INTERFACE_MINOR {
            AuthKeyRemoveBody::owned_by(self.table.handle, job_id)
        } else {
            AuthKeyRemoveBody::unchecked()
        };
        nic.execute(Command::AuthKeyRemove {
            slot: u32::from(slot),
            body,
        })
        .map(|_| ())
        .map_err(|e| match e {
            // The slot is free, or (checked) another table's or another JobID's: the NIC no
            // longer holds the key the mirror does. Not the caller's argument (FI_EINVAL)
            // but the NIC's state, as the in-memory table reports it too.
            DriverError::AdminStatus {
                status: Status::InvalidHandle,
                ..
            } => FiError::io(format!(
                "NIC AUTH_KEY_REMOVE refused: slot {slot} is not this AV's key for JobID \
                 {job_id:#x}: {e}"
            )),
            e => crate::errno::admin_to_fi(e),
        })
    }

    fn set_auth_key_source(&mut self, slot: u16, source: u64) -> Result<(), FiError> {
        let _change = self.table.changes.begin();
        let mut body = AuthKeySourceBody::new_zeroed();
        body.source = U64::new(source);
        self.table
            .nic
            .execute(Command::AuthKeySource {
                slot: u32::from(slot),
                body,
            })
            .map(|_| ())
            .map_err(|e| match e {
                // The slot is free: the NIC no longer holds the key the mirror does. The
                // NIC's state, not the caller's argument (FI_EINVAL), as for AUTH_KEY_REMOVE.
                DriverError::AdminStatus {
                    status: Status::InvalidHandle,
                    ..
                } => FiError::io(format!(
                    "NIC AUTH_KEY_SOURCE refused: slot {slot} holds no key: {e}"
                )),
                e => crate::errno::admin_to_fi(e),
            })
    }

    fn read_auth_keys(&mut self, first: u16, out: &mut [AuthKeyEntry]) -> Result<(), FiError> {
        self.table.nic.read_auth_keys(first, out)
    }

    fn auth_key_users(&self, slot: u16) -> usize {
        self.table
            .nic
            .auth_grants
            .get(usize::from(slot))
            .map_or(0, |n| n.load(std::sync::atomic::Ordering::Acquire) as usize)
    }

    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        self.table.read_entries(first, out)
    }
}

/// An AV_WRITE submitted on the admin queue without waiting.
struct AdminWrite {
    nic: Arc<NicInner>,
    id: u16,
    /// The records, in DMA memory the NIC reads until the command completes.
    buffer: Option<MappedRegion>,
    outcome: Option<Result<(), DriverError>>,
    /// The admin queue's reap count as the last poll read it under the queue's lock; `None`
    /// when that poll found the queue held (a synchronous command collects completions
    /// meanwhile, this one's perhaps) or none was made.
    seen: Option<u64>,
    /// When a poll gives the command up, as the last poll found it
    /// ([`crate::admin::AdminQueue::gives_up_at`]): the latest a reader asleep until the NIC
    /// answers must poll, however often it was woken and slept again meanwhile.
    gives_up_at: Option<Instant>,
}

impl AdminWrite {
    fn settle(&mut self, r: Result<crate::admin::AdminResult, DriverError>) {
        if r.as_ref().is_err_and(DriverError::in_doubt) {
            // The NIC may still read the records: never hand that memory back.
            tracing::error!(
                command_id = self.id,
                "asynchronous AV_WRITE in doubt; its DMA memory is kept until the NIC's reset"
            );
            if let Some(buffer) = self.buffer.take() {
                self.nic.quarantine(buffer);
            }
        } else {
            self.buffer = None;
        }
        self.outcome = Some(r.map(|_| ()));
    }
}

impl PendingWrite for AdminWrite {
    fn poll(&mut self) -> bool {
        if self.outcome.is_none() {
            // Never wait for the admin queue: a synchronous command holds it until its
            // completion or its timeout, and polling (reading the event queue) must not block.
            // Not done yet, then; the command that holds the queue files this completion for
            // the next poll.
            let r = match self.nic.try_admin() {
                Ok(Some(mut admin)) => {
                    let r = admin.poll_command(self.nic.bar(), self.id);
                    self.seen = Some(self.nic.admin_reaped.load(Ordering::Acquire));
                    self.gives_up_at = admin.gives_up_at(self.id);
                    r
                }
                Ok(None) => {
                    self.seen = None;
                    return false;
                }
                // A process forked since: the command is the parent's.
                Err(e) => Some(Err(e)),
            };
            if let Some(r) = r {
                self.settle(r);
            }
        }
        self.outcome.is_some()
    }

    fn wait(&mut self) {
        // The buffer goes when the command settles: still held means still in flight.
        if self.outcome.is_none() && self.buffer.is_some() {
            let r = self
                .nic
                .admin()
                .and_then(|mut admin| admin.wait_command(self.nic.bar(), self.id));
            self.settle(r);
        }
    }

    fn wake_when_done(&mut self, waker: &Waker) -> bool {
        if self.outcome.is_some() {
            waker.wake_by_ref();
            return true;
        }
        let (Some(seen), Some(interrupt)) = (self.seen, self.nic.admin_interrupt()) else {
            return false;
        };
        // The poll at the command's timeout gives it up. Without one (a timeout too long for
        // the clock), a poll a day off is as good as none.
        let deadline = self
            .gives_up_at
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
        interrupt.wake_after(
            self.nic.bar(),
            &self.nic.admin_reaped,
            seen,
            waker,
            deadline,
        )
    }

    fn prov_errno(&self) -> i32 {
        match &self.outcome {
            Some(Err(DriverError::AdminStatus { status, .. })) => i32::from(*status as u16),
            _ => 0,
        }
    }

    fn finish(mut self: Box<Self>) -> Result<(), NicError> {
        self.wait();
        match self.outcome.take() {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(nic_error("AV_WRITE", e)),
            None => Err(NicError::new("AV_WRITE", "no outcome")),
        }
    }
}

impl Drop for AdminWrite {
    fn drop(&mut self) {
        // Settle (or abandon) the command before the records' memory goes.
        self.wait();
    }
}

/// An address vector whose entries live in a NIC AV table.
pub type Av = AddressVector<NicAv>;

/// A named AV shared by the processes of a node, with this process's entries in a NIC AV
/// table of its own ([`uet_av::named`]). Endpoints bind to its mirror, [`NamedAv::av`], and
/// catch it up with other processes' changes before each send and completion read
/// ([`uet_av::AvSync`]).
pub type SharedAv = NamedAv<NicAv>;

impl Nic {
    /// What the NIC's AV tables can hold, from its capability registers.
    pub fn av_limits(&self) -> AvLimits {
        let caps = self.capabilities();
        AvLimits {
            max_entries: caps.av_entries,
            max_rx_ctx_bits: caps.max_rx_ctx_bits,
            max_rx_ctx: u64::from(caps.max_rx_ctx),
            max_endpoints: u32::from(caps.endpoints),
            max_auth_keys: caps.auth_key_slots,
            max_group_id: caps.max_group_id,
            // MAX_MSG_MTU only from MAX_MSG_MTU_ENTRY_INTERFACE_MINOR on.
            entry_flags: entry_flags::defined_at(self.identity().interface_minor),
            per_insert_user_ids: true,
        }
    }

    /// `fi_av_open` with the NIC's limits alone: create a NIC AV table and the host mirror
    /// over it. The attributes are checked against the NIC's capability registers before the
    /// NIC is asked for anything; [`crate::Domain::open_av`] adds the checks of the domain the
    /// AV is opened in (type, capabilities, context limits). Here any type, `FI_AV_USER_ID`
    /// both at open and per insert, and every receive context and endpoint of the NIC are
    /// allowed. A named AV is opened with [`Nic::open_named_av`] (a name here is `FI_EINVAL`).
    pub fn open_av(&self, attr: AvAttr) -> Result<Av, FiError> {
        self.open_av_within(attr, self.av_limits(), None)
    }

    /// `fi_av_open` with a name and the NIC's limits alone (see [`Nic::open_av`]): create or
    /// open the named AV shared by the processes of this node, with a NIC AV table of this
    /// process for its entries ([`NamedAv::open`]: `FI_READ` opens an existing one read-only;
    /// attributes that differ from an existing AV's are `FI_EINVAL`).
    pub fn open_named_av(&self, attr: AvAttr) -> Result<SharedAv, FiError> {
        self.open_named_av_within(attr, self.av_limits(), None)
    }

    /// [`Nic::open_av`] within `limits` (the NIC's, or a domain's narrower ones), in `domain`
    /// if the AV is opened in one.
    pub(crate) fn open_av_within(
        &self,
        attr: AvAttr,
        limits: AvLimits,
        domain: Option<&Arc<DomainRecord>>,
    ) -> Result<Av, FiError> {
        if let Some(name) = &attr.name {
            return Err(FiError::inval(format!(
                "fi_av_open: name '{}': a named AV is shared between processes; open it with \
                 open_named_av",
                name.as_str()
            )));
        }
        let attr = attr.resolve(&limits)?;
        let nic = self.create_av_table_in(&attr, domain)?;
        AddressVector::open(nic, attr, limits)
    }

    /// [`Nic::open_named_av`] within `limits`, in `domain` if the AV is opened in one.
    pub(crate) fn open_named_av_within(
        &self,
        attr: AvAttr,
        limits: AvLimits,
        domain: Option<&Arc<DomainRecord>>,
    ) -> Result<SharedAv, FiError> {
        NamedAv::open(attr, limits, |attr| self.create_av_table_in(attr, domain))
    }

    /// AV_CREATE of a NIC AV table for `attr`, resolved ([`AvAttr::resolve`] against
    /// [`Nic::av_limits`] or a domain's): the table alone, for an [`AddressVector`] over a
    /// table type that wraps [`NicAv`] (to trace or test the commands it sends).
    /// [`Nic::open_av`] is the usual way to an AV. `FI_ENOSYS` for `FI_AV_AUTH_KEY` on a NIC
    /// without an auth-key table; `FI_ENOSPC` for a `count` past 32 bits; what AV_CREATE
    /// answers (`FI_ENOSPC` when the NIC has no room for the table).
    pub fn create_av_table(&self, attr: &AvAttr) -> Result<NicAv, FiError> {
        self.create_av_table_in(attr, None)
    }

    /// [`Nic::create_av_table`] for an AV of `domain`, which counts the table while it lives.
    fn create_av_table_in(
        &self,
        attr: &AvAttr,
        domain: Option<&Arc<DomainRecord>>,
    ) -> Result<NicAv, FiError> {
        if attr.auth_key_size == FI_AV_AUTH_KEY && self.capabilities().auth_key_slots == 0 {
            return Err(FiError::new(
                FiErrno::FI_ENOSYS,
                "fi_av_open: FI_AV_AUTH_KEY: this NIC has no auth-key table (CAP_AUTH_KEY)",
            ));
        }
        let capacity = u32::try_from(attr.count).map_err(|_| {
            FiError::new(
                FiErrno::FI_ENOSPC,
                format!(
                    "fi_av_open: count {} exceeds the {} entries an AV table can have",
                    attr.count,
                    u32::MAX
                ),
            )
        })?;
        let mut body = AvCreateBody::new_zeroed();
        body.capacity = U32::new(capacity);
        body.rx_ctx_bits = attr.rx_ctx_bits;
        body.max_group_id = U32::new(attr.max_group_id);
        let result = self
            .inner
            .execute(Command::AvCreate(body))
            .map_err(crate::errno::admin_to_fi)?;
        let table = Arc::new(AvTableHandle {
            nic: self.inner.clone(),
            handle: result.result0,
            capacity,
            max_group_id: attr.max_group_id,
            named: attr.name.as_ref().map(|name| {
                Arc::new(NamedTable {
                    name: name.as_str().to_string(),
                    generation: NamedTable::NOT_CAUGHT_UP.into(),
                })
            }),
            domain: domain.map(DomainRecord::av_seat),
            changes: Arc::default(),
        });
        self.inner.register_av_table(&table);
        // On a later failure the table handle drops and AV_DESTROY removes the NIC table.
        Ok(NicAv { table })
    }
}
