//! The whole reference-model runs of the AV crate's `model.rs`, `model_auth_keys.rs` and
//! `av_events.rs` on a NIC of the simulator. The first drives every insert form (binary, `FI_ADDR_STR`, insertsvc, insertsym), `FI_SYNC_ERR`, `FI_MORE`, user
//! ids (open flag and per insert), removes, lookups, `fi_av_set_user_id`, flushes, AV sets,
//! receive-context and peer-group addressing, and refused, busy and unanswered AV_WRITE and
//! AV_INVALIDATE commands — 10,000 steps per seed. After every step the model, the host
//! mirror and the NIC table, read back with AV_READ, agree. The second drives auth keys
//! (insert_auth_key, inserts bound to keys, removes of addresses and of keys,
//! lookup_auth_key, refused auth-key commands), and after every step the NIC's auth-key
//! table, read back with AUTH_KEY_READ, holds exactly the AV's keys, in the slots the AV
//! names, owned by its table. The third drives `FI_EVENT` inserts (the AV crate's
//! `av_events.rs` model), whose AV_WRITEs go through the admin queue without waiting and are
//! collected when the event queue is read; a refused one is sent so that the NIC itself
//! refuses it.
//!
//! The engines are the AV crate's (`av/tests/model/engine.rs` and the others, included
//! here); only the NIC table differs. Faults are armed host-side (but for the `FI_EVENT`
//! model's refusals), between the AV and the driver's table: a
//! refused or busy command is not sent (what the NIC would have done with it: nothing), an
//! unanswered one is sent or not and then reported in doubt, so that every other command
//! runs on the simulated NIC through the admin queue.

#[path = "../../av/tests/common/mod.rs"]
mod common;
#[path = "../../av/tests/model/engine.rs"]
mod engine;
#[path = "../../av/tests/model_auth_keys/engine.rs"]
mod engine_auth_keys;
#[path = "../../av/tests/av_events/model.rs"]
mod events_model;

use engine::{run_on, seeded_ops, seeded_ops_long_ranges, Config, ModelNic};
use std::sync::Arc;
use uet_av::{
    AddressVector, AvAttr, CompletedWrite, Fault, FiError, NicAvTable, NicError, NicOp,
    PendingWrite, FI_EVENT,
};
use uet_driver::av::NicAv;
use uet_driver::backend::sim::SimDevice;
use uet_driver::Nic;
use uet_fwif::auth_key::AuthKeyEntry;
use uet_fwif::{AvWriteRecord, NicAvEntry};
use uet_sim::{Fabric, NicConfig};
use zerocopy::little_endian::U32;

/// The driver's table of a simulated NIC, with a fault armed per command kind.
struct SimTable {
    table: NicAv,
    /// The faults of the next AV_WRITE and AV_INVALIDATE.
    faults: [Option<Fault>; 2],
    /// The next auth-key command is refused, not sent.
    refuse_auth: bool,
}

impl SimTable {
    /// The fault the next command of kind `op` meets: `Err` when it is not sent, `Ok(true)`
    /// when it is sent and then reported in doubt, `Ok(false)` for none.
    fn take(&mut self, op: NicOp) -> Result<bool, NicError> {
        let slot = match op {
            NicOp::Write => &mut self.faults[0],
            NicOp::Invalidate => &mut self.faults[1],
            _ => return Ok(false),
        };
        match slot.take() {
            None => Ok(false),
            Some(Fault::Refused) => Err(NicError::new(op.name(), "armed fault: refused")),
            Some(Fault::Busy) => Err(NicError::busy(
                op.name(),
                "armed fault: no room for the command".into(),
            )),
            Some(Fault::InDoubt { applied: false }) => Err(NicError::in_doubt(
                op.name(),
                "armed fault: unanswered, never sent".into(),
            )),
            Some(Fault::InDoubt { applied: true }) => Ok(true),
        }
    }

    /// `Err` (not sent) when the next auth-key command is to be refused.
    fn take_auth(&mut self, op: &str) -> Result<(), FiError> {
        if std::mem::take(&mut self.refuse_auth) {
            return Err(FiError::new(
                uet_av::FiErrno::FI_EIO,
                format!("{op}: armed fault: refused"),
            ));
        }
        Ok(())
    }

    /// The outcome of a command sent with [`SimTable::take`]'s `late`.
    fn answer(op: NicOp, late: bool, sent: Result<(), NicError>) -> Result<(), NicError> {
        sent?;
        if late {
            return Err(NicError::in_doubt(
                op.name(),
                "armed fault: applied, never answered".into(),
            ));
        }
        Ok(())
    }
}

impl NicAvTable for SimTable {
    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        let late = self.take(NicOp::Write)?;
        let sent = self.table.write_entries(records);
        Self::answer(NicOp::Write, late, sent)
    }

    fn write_entries_with(
        &mut self,
        count: usize,
        record: &mut dyn FnMut(usize) -> AvWriteRecord,
    ) -> Result<(), NicError> {
        let late = self.take(NicOp::Write)?;
        let sent = self.table.write_entries_with(count, record);
        Self::answer(NicOp::Write, late, sent)
    }

    fn write_peers(
        &mut self,
        first: u32,
        addrs: &[[u8; 32]],
        job_id: u32,
        entry_flags: u16,
    ) -> Result<(), NicError> {
        let late = self.take(NicOp::Write)?;
        let sent = self.table.write_peers(first, addrs, job_id, entry_flags);
        Self::answer(NicOp::Write, late, sent)
    }

    /// The driver's own asynchronous AV_WRITE (an `FI_EVENT` AV's), the armed fault applied
    /// thus: refused, it is sent with its last record's index past the table, so that the NIC
    /// refuses the whole command and the driver reports the NIC's status; for want of room,
    /// not submitted; unanswered, sent or not and then reported in doubt.
    fn submit_write(
        &mut self,
        records: &[AvWriteRecord],
    ) -> Result<Box<dyn PendingWrite>, NicError> {
        match self.take(NicOp::Write) {
            Err(e) if e.busy => Err(e),
            Err(e) if e.in_doubt => Ok(Box::new(CompletedWrite::new(Err(e)))),
            Err(_refused) => {
                let mut refused = records.to_vec();
                if let Some(last) = refused.last_mut() {
                    last.index = U32::new(u32::MAX);
                }
                self.table.submit_write(&refused)
            }
            Ok(false) => self.table.submit_write(records),
            Ok(true) => Ok(Box::new(Unanswered(self.table.submit_write(records)?))),
        }
    }

    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        let late = self.take(NicOp::Invalidate)?;
        let sent = self.table.invalidate(indices);
        Self::answer(NicOp::Invalidate, late, sent)
    }

    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        self.table.read_entries(first, out)
    }

    fn check_close(&self) -> Result<(), FiError> {
        self.table.check_close()
    }

    fn add_auth_key(&mut self, job_id: u32, source: u64) -> Result<u16, FiError> {
        self.take_auth("AUTH_KEY_ADD")?;
        self.table.add_auth_key(job_id, source)
    }

    fn remove_auth_key(&mut self, slot: u16, job_id: u32) -> Result<(), FiError> {
        self.take_auth("AUTH_KEY_REMOVE")?;
        self.table.remove_auth_key(slot, job_id)
    }

    fn set_auth_key_source(&mut self, slot: u16, source: u64) -> Result<(), FiError> {
        self.take_auth("AUTH_KEY_SOURCE")?;
        self.table.set_auth_key_source(slot, source)
    }

    fn read_auth_keys(&mut self, first: u16, out: &mut [AuthKeyEntry]) -> Result<(), FiError> {
        self.take_auth("AUTH_KEY_READ")?;
        self.table.read_auth_keys(first, out)
    }

    fn auth_key_users(&self, slot: u16) -> usize {
        self.table.auth_key_users(slot)
    }

    fn table_handle(&self) -> Option<u32> {
        self.table.table_handle()
    }
}

/// An asynchronous AV_WRITE sent, whose answer is then treated as never come.
struct Unanswered(Box<dyn PendingWrite>);

impl PendingWrite for Unanswered {
    fn poll(&mut self) -> bool {
        self.0.poll()
    }

    fn wait(&mut self) {
        self.0.wait();
    }

    fn finish(self: Box<Self>) -> Result<(), NicError> {
        let _applied = self.0.finish();
        Err(NicError::in_doubt(
            NicOp::Write.name(),
            "armed fault: applied, never answered".into(),
        ))
    }
}

impl events_model::EventNic for SimTable {
    fn refuse_next_write(&mut self) {
        self.faults[0] = Some(Fault::Refused);
    }

    fn cancel_refusal(&mut self) {
        self.faults = [None; 2];
    }

    fn entries_on_nic(&mut self, count: usize) -> Vec<NicAvEntry> {
        ModelNic::entries_on_nic(self, count)
    }
}

impl engine_auth_keys::AuthModelNic for SimTable {
    fn refuse_next_auth_key_command(&mut self) {
        self.refuse_auth = true;
    }

    fn disarm(&mut self) {
        self.refuse_auth = false;
    }
}

impl ModelNic for SimTable {
    fn entries_on_nic(&mut self, count: usize) -> Vec<NicAvEntry> {
        let mut out = vec![NicAvEntry::INVALID; count];
        self.table
            .read_entries(0, &mut out)
            .unwrap_or_else(|e| panic!("AV_READ of the NIC table: {e}"));
        out
    }

    fn arm_fault(&mut self, op: NicOp, fault: Fault) {
        match op {
            NicOp::Write => self.faults[0] = Some(fault),
            NicOp::Invalidate => self.faults[1] = Some(fault),
            _ => {}
        }
    }

    fn disarm_faults(&mut self) {
        self.faults = [None; 2];
    }
}

/// A fresh NIC of the simulator, with `auth_key_slots` auth-key slots when given.
fn sim_nic(auth_key_slots: Option<u16>) -> (Fabric, Nic) {
    let fabric = Fabric::new();
    let mut config = NicConfig::new("10.66.0.1".parse().expect("address"));
    if let Some(slots) = auth_key_slots {
        config.auth_key_slots = slots;
    }
    let function = fabric.add_nic(config).expect("add NIC");
    let nic = Nic::open(Arc::new(SimDevice::new(function))).expect("open NIC");
    (fabric, nic)
}

/// The AV `attr` asks for on `nic`, over its table wrapped in a [`SimTable`].
fn open_on(nic: &Nic, attr: AvAttr) -> AddressVector<SimTable> {
    let limits = nic.av_limits();
    let resolved = attr.resolve(&limits).expect("the model's attributes");
    let table = nic.create_av_table(&resolved).expect("AV_CREATE");
    AddressVector::open(
        SimTable {
            table,
            faults: [None; 2],
            refuse_auth: false,
        },
        attr,
        limits,
    )
    .expect("open the AV")
}

/// Run `ops` with `cfg` on a fresh NIC of the simulator.
fn run_on_sim(cfg: Config, ops: &[engine::Op]) -> [usize; 3] {
    let (_fabric, nic) = sim_nic(None);
    run_on(cfg, ops, |attr: AvAttr| open_on(&nic, attr))
}

/// Every configuration the AV crate's fixed seeds cover (user ids, receive-context bits,
/// peer groups, address format), with refused and busy commands.
#[test]
fn the_whole_model_run_agrees_with_the_simulated_nic() {
    let configs = [
        (8u64, 0u8, 0u32, false, false),
        (16, 3, 0, true, false),
        (33, 0, 0, false, true),
        (20, 0, 0xFF, true, false),
        (9, 4, 0xFFF, false, true),
    ];
    for k in 0..uet_tests::model_seed_count(configs.len()) {
        let (cap, rx_bits, max_group_id, open_user_id, str_av) = configs[k % configs.len()];
        let seed = 0x51a7_e000_0000_0001u64 ^ ((k as u64) << 20);
        eprintln!("model on the simulator: seed {seed:#x} cap {cap}");
        run_on_sim(
            Config {
                cap: cap as usize,
                rx_bits,
                max_group_id,
                open_user_id,
                str_av,
                unanswered: false,
            },
            &seeded_ops(seed, cap, 10_000, true),
        );
    }
}

/// Runs without per-insert user ids store symmetric inserts as ranges, which the NIC expands
/// when it translates; AV_READ reads each member back.
#[test]
fn the_model_with_symmetric_ranges_agrees_with_the_simulated_nic() {
    for (seed, cap, rx_bits) in [
        (0x2545_f491_4f6c_dd1du64, 8u64, 0u8),
        (0x1b87_3593_5851_3e29, 23, 2),
    ] {
        run_on_sim(
            Config::binary(cap, rx_bits, 0),
            &seeded_ops(seed, cap, 10_000, false),
        );
    }
}

/// Runs that drain stretches of the AV and insert symmetric sets of up to 6 nodes × 4
/// services: long ranges, which the NIC expands member by member when AV_READ reads them.
#[test]
fn the_model_with_long_ranges_agrees_with_the_simulated_nic() {
    for (seed, cap, rx_bits) in [
        (0x3243_f6a8_885a_308du64, 24u64, 0u8),
        (0x1319_8a2e_0370_7344, 40, 2),
    ] {
        run_on_sim(
            Config::binary(cap, rx_bits, 0),
            &seeded_ops_long_ranges(seed, cap, 10_000, false),
        );
    }
}

/// With unanswered commands among the faults: wherever nothing is in doubt the NIC agrees, and
/// everywhere once the entries in doubt are rewritten.
#[test]
fn the_model_with_unanswered_commands_agrees_with_the_simulated_nic() {
    for (seed, cap, open_user_id) in [
        (0x3c6e_f372_fe94_f82bu64, 8u64, false),
        (0xa54f_f53a_5f1d_36f1, 16, true),
    ] {
        let doubts = run_on_sim(
            Config {
                cap: cap as usize,
                rx_bits: 0,
                max_group_id: 0,
                open_user_id,
                str_av: false,
                unanswered: true,
            },
            &seeded_ops(seed, cap, 10_000, true),
        );
        let [writes, removes, _] = doubts;
        assert!(
            writes >= 10 && removes >= 10,
            "seed {seed:#x}: steps that left entries in doubt: {doubts:?}"
        );
    }
}

/// The auth-key model's runs (tables nearly always full, often full and rarely full) on a
/// NIC of [`engine_auth_keys::SLOTS`] auth-key slots: every outcome the calls can have comes up.
#[test]
fn auth_keys_match_the_model_on_the_simulated_nic() {
    let mut seen = engine_auth_keys::Tally::new();
    for (seed, cap) in [
        (0x9e37_79b9_7f4a_7c15u64, 4usize),
        (0x0123_4567_89ab_cdef, 16),
        (0x7e57_9a0f_0123_4567, 32),
    ] {
        let (_fabric, nic) = sim_nic(Some(engine_auth_keys::SLOTS));
        let av = open_on(&nic, engine_auth_keys::attr(cap));
        engine_auth_keys::run_on(seed, 10_000, &mut seen, av);
    }
    // And on an AV with user ids: of addresses, and of keys (their slots' sources).
    let (_fabric, nic) = sim_nic(Some(engine_auth_keys::SLOTS));
    let av = open_on(&nic, engine_auth_keys::attr_with_user_ids(8));
    engine_auth_keys::run_on(0x1b87_3593_5851_3e29, 10_000, &mut seen, av);
    for e in [
        uet_av::FiErrno::FI_EINVAL,
        uet_av::FiErrno::FI_ENOSPC,
        uet_av::FiErrno::FI_EBUSY,
        uet_av::FiErrno::FI_ENOKEY,
        uet_av::FiErrno::FI_EIO,
    ] {
        assert!(
            seen.get(&e.to_status()).is_some_and(|&n| n > 0),
            "{e:?}: {seen:?}"
        );
    }
}

/// The `FI_EVENT` model's runs (the AV crate's `av_events.rs`) on a NIC of the simulator:
/// each insert's AV_WRITE goes through the driver's admin queue without waiting, and is
/// collected when the event queue is read. Random inserts (some malformed, a table often
/// full, `FI_MORE` batches, writes the NIC refuses), symmetric inserts, `FI_SYNC_ERR`
/// (refused), queue reads and removes, and some runs end with `fi_close` with writes in
/// flight; after every step the mirror, the NIC table read back with AV_READ and the calls in
/// flight are the model's, and each read of the queue gives the model's events.
#[test]
fn fi_event_inserts_match_the_model_on_the_simulated_nic() {
    use events_model::Ev;
    let mut seen = Vec::new();
    for (seed, cap, close) in [
        (0x9e37_79b9_7f4a_7c15u64, 4usize, true),
        (0xdead_beef_cafe_f00d, 8, false),
        (0x0bad_5eed_0f00_d001, 32, true),
    ] {
        let (_fabric, nic) = sim_nic(None);
        let attr = AvAttr {
            count: cap,
            flags: FI_EVENT,
            ..AvAttr::default()
        };
        seen.extend(events_model::ev_run(
            open_on(&nic, attr),
            seed,
            10_000,
            close,
        ));
    }
    assert!(seen.iter().any(|e| matches!(e, Ev::Done(_, n) if *n > 0)));
    for errno in [
        uet_av::FiErrno::FI_EINVAL,
        uet_av::FiErrno::FI_ENOSPC,
        uet_av::FiErrno::FI_EIO,
    ] {
        assert!(
            seen.iter()
                .any(|e| matches!(e, Ev::Err(_, _, x) if *x == errno)),
            "no {errno:?} event"
        );
    }
}

/// `Nic::create_av_table` (public, for tables that wrap `NicAv`) makes a table of `count`
/// entries or none: a count past what AV_CREATE's 32-bit capacity holds is refused, not cut
/// to its low bits (a table of 8 entries for 2^32 + 8).
#[test]
fn a_table_count_past_32_bits_is_refused_not_cut() {
    let (_fabric, nic) = sim_nic(None);
    let attr = AvAttr {
        count: (1usize << 32) + 8,
        ..AvAttr::default()
    };
    match nic.create_av_table(&attr) {
        Ok(table) => panic!(
            "a table of {} entries for count {}",
            table.table().capacity(),
            attr.count
        ),
        Err(e) => assert_eq!(e.errno, uet_av::FiErrno::FI_ENOSPC, "{e}"),
    }
}
