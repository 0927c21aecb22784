//! FI_EVENT (asynchronous inserts), fi_av_bind, fi_close and the open attributes, on in-memory
//! NIC tables: one that completes writes at once, and one that holds them until told.

mod common;
#[path = "av_events/model.rs"]
mod model;

use common::*;
use model::{ev_run, short, Ev, Sink};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use uet_av::{
    av_type_from_c, rx_ctx_bits_from_c, AddrFormat, AddressVector, AvAttr, AvEvent, AvLimits,
    AvName, AvType, FiErrno, FiError, MemoryNicTable, NicAvTable, NicError, NicOp, PendingWrite,
    AV_NAME_MAX, DEFAULT_AV_COUNT, FI_ADDR_NOTAVAIL, FI_AV_USER_ID, FI_EVENT, FI_MORE, FI_READ,
    FI_SYMMETRIC, FI_SYNC_ERR, MAX_WRITES_IN_FLIGHT,
};
use uet_fwif::{AvWriteRecord, NicAvEntry};

// ---------------------------------------------------------------------------------------------
// A NIC whose writes complete only when the test opens the gate

#[derive(Clone)]
struct DeferredNic {
    table: Arc<Mutex<MemoryNicTable>>,
    /// Opens every write's gate at once.
    gate: Arc<AtomicBool>,
    /// Each write's own gate, in submission order, to complete writes in any order.
    gates: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

impl DeferredNic {
    fn new(capacity: u32) -> Self {
        DeferredNic {
            table: Arc::new(Mutex::new(MemoryNicTable::new(capacity))),
            gate: Arc::new(AtomicBool::new(false)),
            gates: Default::default(),
        }
    }
    /// Let the `write`th write submitted complete.
    fn open(&self, write: usize) {
        self.gates.lock().unwrap()[write].store(true, Ordering::Release);
    }
    fn valid(&self, index: u32) -> bool {
        self.table.lock().unwrap().entry(index).unwrap().is_valid()
    }
}

struct DeferredWrite {
    table: Arc<Mutex<MemoryNicTable>>,
    gate: Arc<AtomicBool>,
    own_gate: Arc<AtomicBool>,
    records: Vec<AvWriteRecord>,
    outcome: Option<Result<(), NicError>>,
}

impl DeferredWrite {
    fn complete(&mut self) {
        if self.outcome.is_none() {
            self.outcome = Some(self.table.lock().unwrap().write_entries(&self.records));
        }
    }
}

impl PendingWrite for DeferredWrite {
    fn poll(&mut self) -> bool {
        if self.gate.load(Ordering::Acquire) || self.own_gate.load(Ordering::Acquire) {
            self.complete();
        }
        self.outcome.is_some()
    }
    fn wait(&mut self) {
        self.complete();
    }
    fn prov_errno(&self) -> i32 {
        match self.outcome {
            Some(Err(_)) => 7,
            _ => 0,
        }
    }
    fn finish(mut self: Box<Self>) -> Result<(), NicError> {
        self.complete();
        self.outcome.take().unwrap()
    }
}

impl NicAvTable for DeferredNic {
    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        self.table.lock().unwrap().write_entries(records)
    }
    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        self.table.lock().unwrap().invalidate(indices)
    }
    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        self.table.lock().unwrap().read_entries(first, out)
    }
    fn submit_write(
        &mut self,
        records: &[AvWriteRecord],
    ) -> Result<Box<dyn PendingWrite>, NicError> {
        let own_gate = Arc::new(AtomicBool::new(false));
        self.gates.lock().unwrap().push(own_gate.clone());
        Ok(Box::new(DeferredWrite {
            table: self.table.clone(),
            gate: self.gate.clone(),
            own_gate,
            records: records.to_vec(),
            outcome: None,
        }))
    }
}

fn event_attr(count: usize) -> AvAttr {
    AvAttr {
        count,
        flags: FI_EVENT,
        ..AvAttr::default()
    }
}

fn open_event(count: usize) -> AddressVector<MemoryNicTable> {
    AddressVector::open(MemoryNicTable::new(count as u32), event_attr(count), LIMITS).unwrap()
}

fn open_deferred(count: usize) -> (AddressVector<DeferredNic>, DeferredNic) {
    let nic = DeferredNic::new(count as u32);
    let av = AddressVector::open(nic.clone(), event_attr(count), LIMITS).unwrap();
    (av, nic)
}

/// An `FI_EVENT` AV of 16 entries (opened with `extra_flags` too) on a deferring NIC, its
/// queue bound, and one insert of peers 1 and 2 (context 1) whose AV_WRITE is in flight.
fn two_in_flight(extra_flags: u64) -> (AddressVector<DeferredNic>, DeferredNic, Arc<Sink>) {
    let nic = DeferredNic::new(16);
    let mut av = AddressVector::open(
        nic.clone(),
        AvAttr {
            flags: FI_EVENT | extra_flags,
            ..event_attr(16)
        },
        LIMITS,
    )
    .unwrap();
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.with_context(1)
        .insert(&[peer_bytes(1), peer_bytes(2)].concat(), 2, None, 0)
        .unwrap();
    (av, nic, sink)
}

fn errno<T: std::fmt::Debug>(r: Result<T, FiError>) -> FiErrno {
    r.expect_err("call should fail").errno
}

// ---------------------------------------------------------------------------------------------
// bind and the errors before it

#[test]
fn inserts_before_bind_fail_with_enoeq_and_change_nothing() {
    let mut av = open_event(16);
    let a = peer_bytes(1);
    let mut out = [7u64; 1];
    assert_eq!(
        errno(av.insert(&a, 1, Some(&mut out), 0)),
        FiErrno::FI_ENOEQ
    );
    assert_eq!(out[0], 7, "fi_addr untouched");
    assert_eq!(
        errno(av.insertsvc("10.0.0.1", Some("5"), None, 0, None)),
        FiErrno::FI_ENOEQ
    );
    assert_eq!(
        errno(av.insertsym("10.0.0.1", 2, "5", 2, None, 0, None)),
        FiErrno::FI_ENOEQ
    );
    assert_eq!(
        errno(av.with_context(9).insert(&a, 1, None, FI_MORE)),
        FiErrno::FI_ENOEQ
    );
    let mut s = AddressVector::open(
        MemoryNicTable::new(4),
        AvAttr {
            addr_format: AddrFormat::Str,
            ..event_attr(4)
        },
        LIMITS,
    )
    .unwrap();
    assert_eq!(
        errno(s.insert_str(&["uet://10.0.0.1/5"], None, 0, None)),
        FiErrno::FI_ENOEQ
    );
    assert_eq!(av.len(), 0);
    assert_eq!(av.nic().counters().commands(), 0);
    assert_eq!(av.inserts_in_flight(), 0);
}

#[test]
fn sync_err_with_event_is_ebadflags_bound_or_not() {
    let mut av = open_event(16);
    let a = peer_bytes(1);
    let mut st = [0i32; 1];
    assert_eq!(
        errno(av.insert_with_status(&a, 1, None, FI_SYNC_ERR, Some(&mut st))),
        FiErrno::FI_EBADFLAGS
    );
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let e = av
        .insert_with_status(&a, 1, None, FI_SYNC_ERR, Some(&mut st))
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS);
    assert!(e.message.contains("FI_EVENT"), "{e}");
    assert_eq!(av.len(), 0);
    assert!(sink.read().is_empty(), "a refused call posts nothing");
}

#[test]
fn bind_checks_flags_and_binds_once() {
    let mut av = open_event(16);
    let sink = Sink::new();
    let e = av.bind(sink.clone(), 1).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS);
    assert!(e.message.contains("must be 0"), "{e}");
    assert!(!av.is_bound());
    assert_eq!(sink.bound(), 0);
    av.bind(sink.clone(), 0).unwrap();
    assert!(av.is_bound());
    assert_eq!(sink.bound(), 1);
    let other = Sink::new();
    let e = av.bind(other.clone(), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("already bound"), "{e}");
    assert_eq!(other.bound(), 0);
    // Closing (or dropping) the AV detaches it.
    av.close().unwrap();
    assert_eq!(sink.bound(), 0);

    // A synchronous AV may be bound too; its inserts stay synchronous and post nothing.
    let mut av = open(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    assert_eq!(av.insert(&peer_bytes(1), 1, None, 0).unwrap(), 1);
    assert!(sink.read().is_empty());
    drop(av);
    assert_eq!(sink.bound(), 0);
}

// ---------------------------------------------------------------------------------------------
// asynchronous inserts

#[test]
fn mixed_insert_returns_success_then_errors_then_complete() {
    let mut av = open_event(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let addrs: Vec<u8> = [peer_bytes(1), bad_bytes(2), peer_bytes(3), bad_bytes(4)].concat();
    let mut out = [0u64; 4];
    assert_eq!(
        av.with_context(0xC0FFEE)
            .insert(&addrs, 4, Some(&mut out), 0)
            .unwrap(),
        0,
        "FI_SUCCESS: the insert was initiated"
    );
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1, FI_ADDR_NOTAVAIL]);
    // The mirror answers at once.
    let mut buf = [0u8; 32];
    let mut len = buf.len();
    av.lookup(1, &mut buf, &mut len).unwrap();
    assert_eq!(buf, peer_bytes(3));
    // Nothing is posted before progress.
    assert!(sink.take().is_empty());
    assert_eq!(av.inserts_in_flight(), 1);
    assert_eq!(
        short(sink.read()),
        vec![
            Ev::Err(0xC0FFEE, 1, FiErrno::FI_EINVAL),
            Ev::Err(0xC0FFEE, 3, FiErrno::FI_EINVAL),
            Ev::Done(0xC0FFEE, 2),
        ]
    );
    assert_eq!(av.inserts_in_flight(), 0);
    assert!(av.verify_nic().unwrap().is_empty());
    // A call whose addresses all fail, and an empty one, still complete.
    assert_eq!(
        av.with_context(5)
            .insert(&bad_bytes(9), 1, None, 0)
            .unwrap(),
        0
    );
    assert_eq!(av.with_context(6).insert(&[], 0, None, 0).unwrap(), 0);
    assert_eq!(av.progress(), 2);
    assert_eq!(
        short(sink.take()),
        vec![
            Ev::Err(5, 0, FiErrno::FI_EINVAL),
            Ev::Done(5, 0),
            Ev::Done(6, 0)
        ]
    );
}

#[test]
fn error_entries_carry_the_reason_and_the_av() {
    let mut av = open_event(2);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let addrs: Vec<u8> = [peer_bytes(1), peer_bytes(2), peer_bytes(3)].concat();
    av.with_context(1).insert(&addrs, 3, None, 0).unwrap();
    let events = sink.read();
    assert_eq!(
        events[0],
        AvEvent::InsertError {
            av: av.id(),
            context: 1,
            position: 2,
            errno: FiErrno::FI_ENOSPC,
            prov_errno: 0,
            message: "all 2 AV entries are in use".into(),
        }
    );
    assert_eq!(
        events[1],
        AvEvent::InsertComplete {
            av: av.id(),
            context: 1,
            inserted: 2
        }
    );
}

#[test]
fn nic_entries_become_valid_when_the_write_completes() {
    let (mut av, nic) = open_deferred(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.with_context(1)
        .insert(&peer_bytes(1), 1, None, 0)
        .unwrap();
    assert_eq!(av.writes_in_flight(), 1);
    // Lookup sees the address; the NIC entry is not valid yet.
    assert_eq!(av.index_of(0).unwrap(), 0);
    assert!(!nic.valid(0));
    assert!(sink.read().is_empty(), "still in flight");
    nic.gate.store(true, Ordering::Release);
    assert_eq!(short(sink.read()), vec![Ev::Done(1, 1)]);
    assert!(nic.valid(0));
    assert_eq!(av.writes_in_flight(), 0);
}

#[test]
fn several_calls_in_flight_complete_in_call_order() {
    let (mut av, nic) = open_deferred(64);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    for c in 1..=3u32 {
        let addrs: Vec<u8> = (0..c).flat_map(|i| peer_bytes(c * 10 + i)).collect();
        av.with_context(u64::from(c))
            .insert(&addrs, c as usize, None, 0)
            .unwrap();
    }
    // FI_MORE calls share one AV_WRITE, each with its own completion.
    av.with_context(4)
        .insert(&peer_bytes(40), 1, None, FI_MORE)
        .unwrap();
    av.with_context(5)
        .insert(&[peer_bytes(50), bad_bytes(51)].concat(), 2, None, FI_MORE)
        .unwrap();
    assert_eq!(
        av.writes_in_flight(),
        3,
        "FI_MORE records wait for the last call"
    );
    av.with_context(6)
        .insert(&peer_bytes(60), 1, None, 0)
        .unwrap();
    assert_eq!(av.writes_in_flight(), 4);
    assert_eq!(av.inserts_in_flight(), 6);
    assert!(sink.read().is_empty());
    nic.gate.store(true, Ordering::Release);
    assert_eq!(
        short(sink.read()),
        vec![
            Ev::Done(1, 1),
            Ev::Done(2, 2),
            Ev::Done(3, 3),
            Ev::Done(4, 1),
            Ev::Err(5, 1, FiErrno::FI_EINVAL),
            Ev::Done(5, 1),
            Ev::Done(6, 1),
        ]
    );
    assert_eq!(nic.table.lock().unwrap().counters().writes, 4);
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn a_refused_write_fails_every_address_and_rolls_them_back() {
    let mut av = open_event(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.with_context(1)
        .insert(&peer_bytes(1), 1, None, 0)
        .unwrap();
    av.nic_mut().fail_after(NicOp::Write, 0);
    let mut out = [0u64; 3];
    av.with_context(2)
        .insert(
            &[peer_bytes(2), bad_bytes(3), peer_bytes(4)].concat(),
            3,
            Some(&mut out),
            0,
        )
        .unwrap();
    assert_eq!(out, [1, FI_ADDR_NOTAVAIL, 2]);
    let events = sink.read();
    assert_eq!(
        short(events.clone()),
        vec![
            Ev::Done(1, 1),
            Ev::Err(2, 0, FiErrno::FI_EIO),
            Ev::Err(2, 1, FiErrno::FI_EINVAL),
            Ev::Err(2, 2, FiErrno::FI_EIO),
            Ev::Done(2, 0),
        ]
    );
    match &events[1] {
        AvEvent::InsertError { message, .. } => {
            assert!(message.contains("injected fault"), "{message}")
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(av.len(), 1, "only the first call's address is in the AV");
    // Refused addresses are gone for lookup at once…
    let mut buf = [0u8; 32];
    let mut len = buf.len();
    let e = av.lookup(1, &mut buf, &mut len).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("refused"), "{e}");
    let e = av.index_of(1).unwrap_err();
    assert!(e.message.contains("refused"), "{e}");
    assert_eq!(errno(av.remove(&[2], 0)), FiErrno::FI_EINVAL);
    // …and their indices are reused by the next insert.
    av.with_context(3)
        .insert(&peer_bytes(5), 1, Some(&mut out[..1]), 0)
        .unwrap();
    assert_eq!(out[0], 1);
    assert_eq!(av.len(), 2);
    assert_eq!(short(sink.read()), vec![Ev::Done(3, 1)]);
    assert!(av.verify_nic().unwrap().is_empty());
}

/// A write the NIC has no room for is not submitted: its addresses fail with `FI_EAGAIN`
/// (try again), leave the mirror, and the same insert then succeeds at the same indices.
#[test]
fn a_write_the_nic_has_no_room_for_fails_its_addresses_with_eagain() {
    let mut av = open_event(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.nic_mut().inject(NicOp::Write, 0, uet_av::Fault::Busy);
    let two = [peer_bytes(1), peer_bytes(2)].concat();
    let mut out = [0u64; 2];
    av.with_context(1)
        .insert(&two, 2, Some(&mut out), 0)
        .unwrap();
    let events = sink.read();
    assert_eq!(
        short(events.clone()),
        vec![
            Ev::Err(1, 0, FiErrno::FI_EAGAIN),
            Ev::Err(1, 1, FiErrno::FI_EAGAIN),
            Ev::Done(1, 0),
        ]
    );
    match &events[0] {
        AvEvent::InsertError { message, .. } => {
            assert!(message.contains("could not be submitted"), "{message}")
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(av.len(), 0);
    assert_eq!(av.nic().counters().writes, 0, "nothing reached the NIC");
    av.with_context(2)
        .insert(&two, 2, Some(&mut out), 0)
        .unwrap();
    assert_eq!(out, [0, 1], "the same indices, free again");
    assert_eq!(short(sink.read()), vec![Ev::Done(2, 2)]);
    assert!(av.verify_nic().unwrap().is_empty());
}

/// An AV_WRITE the NIC has no room for fails the records of the `FI_MORE` calls before the
/// one that sent it too. Those calls have returned their indices: no other insert takes them
/// until the error entries that fail them are posted (the provider then sets their `fi_addr`
/// to `FI_ADDR_NOTAVAIL`), else an address the application still names by its index would
/// be another peer's.
#[test]
fn indices_an_fi_more_call_returned_go_to_no_insert_before_its_unsent_write_is_posted() {
    let mut av = open_event(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let mut first = [0u64];
    av.with_context(1)
        .insert(&peer_bytes(1), 1, Some(&mut first), FI_MORE)
        .unwrap();
    av.nic_mut().inject(NicOp::Write, 0, uet_av::Fault::Busy);
    let mut second = [0u64];
    av.with_context(2)
        .insert(&peer_bytes(2), 1, Some(&mut second), 0)
        .unwrap();
    assert_eq!(
        second,
        [FI_ADDR_NOTAVAIL],
        "the call's own fi_addr says so at once"
    );
    assert!(av.index_of(first[0]).is_err(), "taken back at once");
    let mut third = [0u64];
    av.with_context(3)
        .insert(&peer_bytes(3), 1, Some(&mut third), 0)
        .unwrap();
    let posted = short(sink.take());
    assert!(
        third != first || posted.contains(&Ev::Err(1, 0, FiErrno::FI_EAGAIN)),
        "index {} given again before its failure was posted: {posted:?}",
        third[0]
    );
    let mut events = posted;
    events.extend(short(sink.read()));
    assert_eq!(
        events,
        vec![
            Ev::Err(1, 0, FiErrno::FI_EAGAIN),
            Ev::Done(1, 0),
            Ev::Err(2, 0, FiErrno::FI_EAGAIN),
            Ev::Done(2, 0),
            Ev::Done(3, 1),
        ]
    );
    assert!(av.index_of(first[0]).is_err() || third == first);
    // Posted: the next call releases it.
    let mut fourth = [0u64];
    av.with_context(4)
        .insert(&peer_bytes(4), 1, Some(&mut fourth), 0)
        .unwrap();
    assert_eq!(short(sink.read()), vec![Ev::Done(4, 1)]);
    assert_eq!(av.len(), 2);
    assert!(av.verify_nic().unwrap().is_empty());
}

/// An asynchronous AV_WRITE that goes unanswered fails its addresses as a refused one does;
/// since it may yet be applied, the NIC is told again, at the next settling call, what the
/// mirror holds there (here nothing, whether it was applied or not).
#[test]
fn an_unanswered_write_fails_its_addresses_and_the_nic_is_repaired() {
    for applied in [false, true] {
        let mut av = open_event(16);
        let sink = Sink::new();
        av.bind(sink.clone(), 0).unwrap();
        av.nic_mut()
            .inject(NicOp::Write, 0, uet_av::Fault::InDoubt { applied });
        let mut out = [0u64; 2];
        av.with_context(1)
            .insert(
                &[peer_bytes(1), peer_bytes(2)].concat(),
                2,
                Some(&mut out),
                0,
            )
            .unwrap();
        let events = sink.read();
        assert_eq!(
            short(events.clone()),
            vec![
                Ev::Err(1, 0, FiErrno::FI_EIO),
                Ev::Err(1, 1, FiErrno::FI_EIO),
                Ev::Done(1, 0),
            ]
        );
        match &events[0] {
            AvEvent::InsertError { message, .. } => {
                assert!(message.contains("did not answer"), "{message}")
            }
            e => panic!("{e:?}"),
        }
        av.settle().unwrap();
        assert_in_step(&av);
        assert_eq!(av.len(), 0, "applied: {applied}");
    }
}

/// A NIC that runs each AV_WRITE when it is submitted, in order, as an admin queue does, and
/// reports the outcomes in that order only as far as the test lets it.
#[derive(Clone)]
struct HeldAnswersNic {
    table: Arc<Mutex<MemoryNicTable>>,
    /// Writes submitted so far (this handle's, the AV's).
    submitted: usize,
    /// Writes whose outcome is reported.
    answered: Arc<std::sync::atomic::AtomicUsize>,
}

struct HeldAnswer {
    seq: usize,
    answered: Arc<std::sync::atomic::AtomicUsize>,
    outcome: Option<Result<(), NicError>>,
}

impl PendingWrite for HeldAnswer {
    fn poll(&mut self) -> bool {
        self.answered.load(Ordering::Acquire) > self.seq
    }
    fn wait(&mut self) {
        self.answered.fetch_max(self.seq + 1, Ordering::AcqRel);
    }
    fn finish(mut self: Box<Self>) -> Result<(), NicError> {
        self.outcome.take().unwrap()
    }
}

impl NicAvTable for HeldAnswersNic {
    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        self.table.lock().unwrap().write_entries(records)
    }
    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        self.table.lock().unwrap().invalidate(indices)
    }
    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        self.table.lock().unwrap().read_entries(first, out)
    }
    fn submit_write(
        &mut self,
        records: &[AvWriteRecord],
    ) -> Result<Box<dyn PendingWrite>, NicError> {
        let outcome = self.table.lock().unwrap().write_entries(records);
        self.submitted += 1;
        Ok(Box::new(HeldAnswer {
            seq: self.submitted - 1,
            answered: self.answered.clone(),
            outcome: Some(outcome),
        }))
    }
}

/// An insert that rewrites the entries in doubt waits first for the AV_WRITEs still in
/// flight: the rewrite of a range's span reaches the single entries in its holes, and one
/// whose write the NIC then refuses must not be left on the NIC once the mirror lets it go.
#[test]
fn the_rewrite_before_an_insert_waits_for_the_writes_in_flight() {
    let nic = HeldAnswersNic {
        table: Arc::new(Mutex::new(MemoryNicTable::new(16))),
        submitted: 0,
        answered: Default::default(),
    };
    let (table, answered) = (nic.table.clone(), nic.answered.clone());
    let mut av = AddressVector::open(nic, event_attr(16), LIMITS).unwrap();
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    // A range of four at 0..4, members 1 and 2 removed.
    assert_eq!(av.insertsym("10.3.0.1", 1, "1", 4, None, 0, None), Ok(0));
    av.remove(&[1, 2], 0).unwrap();
    assert_eq!(av.ranges().collect::<Vec<_>>(), [(0, 4, 2)]);
    // W puts a peer in the hole at 1 and goes unanswered; V puts one in the hole at 2 and is
    // refused. The NIC has run both; only W's outcome (none: the driver gave up) is known.
    let at = answered.load(Ordering::Acquire);
    table
        .lock()
        .unwrap()
        .inject(NicOp::Write, 0, uet_av::Fault::InDoubt { applied: false });
    let mut w = [0u64];
    assert_eq!(av.insert(&peer_bytes(7), 1, Some(&mut w), 0), Ok(0));
    table.lock().unwrap().fail_after(NicOp::Write, 0);
    let mut v = [0u64];
    assert_eq!(av.insert(&peer_bytes(8), 1, Some(&mut v), 0), Ok(0));
    assert_eq!((w, v), ([1], [2]));
    answered.store(at + 1, Ordering::Release);
    av.progress();
    assert!(av.index_of(1).is_err(), "W's index is taken back");
    assert_eq!(av.entries_in_doubt(), 1);
    // The next insert rewrites the entry in doubt first (the whole range's span), then
    // takes index 1.
    let mut y = [0u64];
    assert_eq!(av.insert(&peer_bytes(9), 1, Some(&mut y), 0), Ok(0));
    answered.store(usize::MAX, Ordering::Release);
    av.progress();
    assert!(av.index_of(2).is_err(), "V's index is taken back");
    assert_eq!(y, [1]);
    assert_eq!(av.verify_nic().unwrap(), []);
}

/// A symmetric range whose asynchronous AV_WRITE goes unanswered, and is applied late, frees
/// its indices in the mirror. An insert first rewrites the indices in doubt (on the NIC, a
/// single entry on the late range's span would be refused as overlapping it): while that
/// rewrite fails the insert fails, with nothing inserted and no event; then it goes through
/// at the range's first index. (`an_insert_into_the_indices_of_a_late_range_succeeds` in
/// `tests/tests/av_events.rs` runs it on the simulated NIC.)
#[test]
fn an_insert_rewrites_the_indices_of_an_unanswered_range_first() {
    let mut av = open_event(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.nic_mut()
        .inject(NicOp::Write, 0, uet_av::Fault::InDoubt { applied: true });
    av.with_context(1)
        .insertsym("10.0.3.1", 1, "1", 4, None, 0, None)
        .unwrap();
    let events = short(sink.read());
    assert_eq!(events.last(), Some(&Ev::Done(1, 0)), "{events:?}");
    assert_eq!(av.progress(), 0);
    assert_eq!(av.len(), 0, "the range's indices are free in the mirror");
    assert!(av.nic().entry(0).unwrap().is_valid(), "the NIC ran it late");
    av.nic_mut().fail_after(NicOp::Invalidate, 0);
    let mut out = [0u64; 1];
    let e = av
        .with_context(2)
        .insert(&peer_bytes(9), 1, Some(&mut out), 0)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert!(e.message.contains("nothing inserted"), "{e}");
    assert_eq!(av.len(), 0);
    assert!(sink.read().is_empty(), "no event for a call that failed");
    av.with_context(3)
        .insert(&peer_bytes(9), 1, Some(&mut out), 0)
        .unwrap();
    assert_eq!(out[0], 0, "the lowest free index, the range's first");
    assert_eq!(short(sink.read()), vec![Ev::Done(3, 1)]);
    assert_in_step(&av);
    assert_eq!(av.len(), 1);
}

/// The rewrite an insert runs first, when entries are in doubt, leaves the `FI_MORE` batch
/// around it alone: the staged records of the calls before and after go out together, in one
/// AV_WRITE, when the batch ends.
#[test]
fn the_rewrite_before_an_insert_keeps_the_fi_more_batch_whole() {
    let mut av = open_event(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.nic_mut()
        .inject(NicOp::Write, 0, uet_av::Fault::InDoubt { applied: false });
    av.with_context(1)
        .insert(&peer_bytes(1), 1, None, 0)
        .unwrap();
    av.with_context(2)
        .insert(&peer_bytes(2), 1, None, FI_MORE)
        .unwrap();
    // Progress takes in the unanswered write: its index is free, and in doubt.
    av.progress();
    assert_eq!(av.entries_in_doubt(), 1);
    av.nic_mut().reset_counters();
    av.with_context(3)
        .insert(&peer_bytes(3), 1, None, FI_MORE)
        .unwrap();
    assert_eq!(
        av.entries_in_doubt(),
        0,
        "rewritten before call 3 took an index"
    );
    av.with_context(4)
        .insert(&peer_bytes(4), 1, None, 0)
        .unwrap();
    let c = av.nic().counters();
    assert_eq!((c.invalidates, c.writes, c.records_written), (1, 1, 3));
    let events = short(sink.read());
    assert_eq!(
        events,
        vec![
            Ev::Err(1, 0, FiErrno::FI_EIO),
            Ev::Done(1, 0),
            Ev::Done(2, 1),
            Ev::Done(3, 1),
            Ev::Done(4, 1)
        ]
    );
    assert_in_step(&av);
}

#[test]
fn a_refusal_at_the_deferred_nic_reports_its_code() {
    let (mut av, nic) = open_deferred(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.with_context(1)
        .insert(&[peer_bytes(1), peer_bytes(2)].concat(), 2, None, 0)
        .unwrap();
    nic.table.lock().unwrap().fail_after(NicOp::Write, 0);
    nic.gate.store(true, Ordering::Release);
    let events = sink.read();
    assert_eq!(events.len(), 3);
    for (i, e) in events.iter().take(2).enumerate() {
        match e {
            AvEvent::InsertError {
                position,
                errno,
                prov_errno,
                ..
            } => assert_eq!(
                (*position, *errno, *prov_errno),
                (i as u64, FiErrno::FI_EIO, 7)
            ),
            e => panic!("{e:?}"),
        }
    }
    // They are in the AV no longer: len counts them no more at once, and the next call
    // releases their indices.
    assert_eq!(av.len(), 0);
    assert_eq!(av.progress(), 0);
    assert_eq!(av.len(), 0);
}

/// The index of an address the NIC refused goes to no other insert before the refusal is
/// posted: until then the application may still name the address by it (the provider sets
/// its `fi_addr` to `FI_ADDR_NOTAVAIL` when the error entry is posted), and a send would
/// reach the new peer. Whether the refusal is taken in by a remove or settle, which wait for
/// the writes in flight, or by a progress while an earlier call still waits for the NIC.
#[test]
fn a_refused_index_goes_to_no_other_insert_before_its_failure_is_posted() {
    // Taken in by settle (a remove does the same).
    let (mut av, nic) = open_deferred(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let mut first = [0u64];
    av.with_context(1)
        .insert(&peer_bytes(1), 1, Some(&mut first), 0)
        .unwrap();
    nic.table.lock().unwrap().fail_after(NicOp::Write, 0);
    av.settle().unwrap();
    let mut second = [0u64];
    av.with_context(2)
        .insert(&peer_bytes(2), 1, Some(&mut second), 0)
        .unwrap();
    let posted = short(sink.take());
    assert!(
        second != first || posted.contains(&Ev::Err(1, 0, FiErrno::FI_EIO)),
        "index {} given again before its refusal was posted: {posted:?}",
        second[0]
    );
    nic.gate.store(true, Ordering::Release);
    sink.read();
    assert_eq!(av.index_of(second[0]), Ok(second[0] as u32));
    assert!(av.verify_nic().unwrap().is_empty());

    // Taken in by a progress while the call before still waits for its write.
    let nic = DeferredNic::new(16);
    let mut av = AddressVector::open(nic.clone(), event_attr(16), LIMITS).unwrap();
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.with_context(1)
        .insert(&peer_bytes(1), 1, None, 0)
        .unwrap();
    let mut refused = [0u64];
    av.with_context(2)
        .insert(&peer_bytes(2), 1, Some(&mut refused), 0)
        .unwrap();
    nic.table.lock().unwrap().fail_after(NicOp::Write, 0);
    nic.open(1);
    assert!(sink.read().is_empty(), "call 1 is still in flight");
    assert!(av.index_of(refused[0]).is_err(), "taken back at once");
    let mut third = [0u64];
    av.with_context(3)
        .insert(&peer_bytes(3), 1, Some(&mut third), 0)
        .unwrap();
    assert_ne!(
        third, refused,
        "the refused index was given again before its refusal was posted"
    );
    nic.open(0);
    nic.open(2);
    assert_eq!(
        short(sink.read()),
        vec![
            Ev::Done(1, 1),
            Ev::Err(2, 0, FiErrno::FI_EIO),
            Ev::Done(2, 0),
            Ev::Done(3, 1),
        ]
    );
    assert!(
        av.index_of(refused[0]).is_err(),
        "after its error entry is read, the refused index names no address"
    );
    // Posted: the next call releases it, and an insert takes it again.
    let mut fourth = [0u64];
    av.with_context(4)
        .insert(&peer_bytes(4), 1, Some(&mut fourth), 0)
        .unwrap();
    assert_eq!(fourth, refused);
    nic.open(3);
    assert_eq!(short(sink.read()), vec![Ev::Done(4, 1)]);
    assert_eq!(av.len(), 3);
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn remove_and_set_user_id_wait_for_writes_in_flight() {
    let (mut av, nic, sink) = two_in_flight(FI_AV_USER_ID);
    av.set_user_id(1, 77, 0).unwrap();
    assert_eq!(av.writes_in_flight(), 0, "the write was waited for");
    assert!(nic.valid(1));
    av.remove(&[0], 0).unwrap();
    assert!(!nic.valid(0));
    assert_eq!(av.user_id(1).unwrap(), Some(77));
    // The insert's events were posted when the write was waited for.
    assert_eq!(short(sink.read()), vec![Ev::Done(1, 2)]);
}

#[test]
fn remove_and_set_user_id_of_an_insert_the_nic_then_refuses_are_einval() {
    let (mut av, nic, _sink) = two_in_flight(FI_AV_USER_ID);
    // fi_addr 0 and 1 are still valid when the calls start; the NIC refuses the write they
    // wait for, which takes both back.
    nic.table.lock().unwrap().fail_after(NicOp::Write, 0);
    assert_eq!(errno(av.set_user_id(1, 77, 0)), FiErrno::FI_EINVAL);
    assert_eq!(errno(av.remove(&[0], 0)), FiErrno::FI_EINVAL);
    assert_eq!(av.len(), 0);
    assert!(!nic.valid(0) && !nic.valid(1));
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn remove_of_addresses_the_nic_then_refuses_is_einval() {
    // One address, then two: the insert they name is in flight when remove starts, and the
    // NIC refuses it, which takes the indices back; remove then removes nothing.
    for listed in [&[0u64][..], &[0, 1][..]] {
        let (mut av, nic, _sink) = two_in_flight(0);
        nic.table.lock().unwrap().fail_after(NicOp::Write, 0);
        let e = av.remove(listed, 0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
        assert!(e.message.contains("taken back"), "{e}");
        assert_eq!(av.len(), 0);
        assert!(!nic.valid(0) && !nic.valid(1));
        assert!(av.verify_nic().unwrap().is_empty());
    }
}

#[test]
fn writes_in_flight_are_bounded() {
    let (mut av, nic) = open_deferred(256);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let calls = MAX_WRITES_IN_FLIGHT + 8;
    for c in 0..calls {
        av.with_context(c as u64)
            .insert(&peer_bytes(c as u32 + 1), 1, None, 0)
            .unwrap();
        assert!(av.writes_in_flight() <= MAX_WRITES_IN_FLIGHT);
    }
    nic.gate.store(true, Ordering::Release);
    let events = short(sink.read());
    let expect: Vec<Ev> = (0..calls).map(|c| Ev::Done(c as u64, 1)).collect();
    assert_eq!(events, expect);
}

// ---------------------------------------------------------------------------------------------
// close

/// fi_close waits for the writes in flight and cancels unsent `FI_MORE` records; an AV
/// dropped rather than closed (or while a panic unwinds) ends its inserts the same way
/// (fi_av(3): "There will always be one non-error completion event for each insert
/// operation"). Either way the events are posted before the AV detaches from the queue.
#[test]
fn close_or_drop_waits_for_writes_in_flight_and_cancels_unsent_records() {
    for close in [true, false] {
        let (mut av, nic) = open_deferred(16);
        let sink = Sink::new();
        av.bind(sink.clone(), 0).unwrap();
        av.with_context(1)
            .insert(&peer_bytes(1), 1, None, 0)
            .unwrap();
        av.with_context(2)
            .insert(&[peer_bytes(2), peer_bytes(3)].concat(), 2, None, FI_MORE)
            .unwrap();
        if close {
            av.close().unwrap();
        } else {
            drop(av);
        }
        assert!(
            nic.valid(0),
            "the write in flight completed (close: {close})"
        );
        assert!(!nic.valid(1), "the FI_MORE records were never sent");
        assert_eq!(
            short(sink.take()),
            vec![
                Ev::Done(1, 1),
                Ev::Err(2, 0, FiErrno::FI_ECANCELED),
                Ev::Err(2, 1, FiErrno::FI_ECANCELED),
                Ev::Done(2, 0),
            ],
            "close: {close}"
        );
        assert_eq!(sink.bound(), 0);
    }
}

struct BusyNic(MemoryNicTable, Arc<AtomicBool>);

impl NicAvTable for BusyNic {
    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        self.0.write_entries(records)
    }
    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        self.0.invalidate(indices)
    }
    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        self.0.read_entries(first, out)
    }
    fn check_close(&self) -> Result<(), FiError> {
        if self.1.load(Ordering::Relaxed) {
            return Err(FiError::new(FiErrno::FI_EBUSY, "an endpoint uses the AV"));
        }
        Ok(())
    }
}

#[test]
fn close_while_busy_returns_the_av_unchanged() {
    let busy = Arc::new(AtomicBool::new(true));
    let mut av = AddressVector::open(
        BusyNic(MemoryNicTable::new(8), busy.clone()),
        event_attr(8),
        LIMITS,
    )
    .unwrap();
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.with_context(1)
        .insert(&peer_bytes(1), 1, None, FI_MORE)
        .unwrap();
    let err = av.close().unwrap_err();
    assert_eq!(err.error.errno, FiErrno::FI_EBUSY);
    assert_eq!(err.to_string(), err.error.to_string());
    let mut av = err.av;
    assert_eq!(av.len(), 1);
    assert_eq!(av.pending_len(), 1, "nothing cancelled");
    assert_eq!(sink.bound(), 1, "still bound");
    assert!(sink.read().is_empty());
    av.with_context(2)
        .insert(&peer_bytes(2), 1, None, 0)
        .unwrap();
    busy.store(false, Ordering::Relaxed);
    av.close().unwrap();
    assert_eq!(short(sink.take()), vec![Ev::Done(1, 1), Ev::Done(2, 1)]);
    assert_eq!(sink.bound(), 0);
}

// ---------------------------------------------------------------------------------------------
// open attributes

#[test]
fn open_attributes_get_their_own_errors() {
    let base = AvAttr {
        count: 16,
        ..AvAttr::default()
    };
    let limits = AvLimits {
        max_rx_ctx: 16,
        max_endpoints: 256,
        ..LIMITS
    };
    let check = |attr: AvAttr, want: FiErrno, names: &str| {
        let e = attr.resolve(&limits).unwrap_err();
        assert_eq!(e.errno, want, "{e}");
        assert!(e.message.contains(names), "{e} should name {names}");
        // AddressVector::open refuses the same way.
        let e = AddressVector::open(MemoryNicTable::new(16), attr, limits).unwrap_err();
        assert_eq!(e.errno, want);
    };
    check(
        AvAttr {
            count: (1 << 20) + 1,
            ..base
        },
        FiErrno::FI_ENOSPC,
        "count",
    );
    check(
        AvAttr {
            rx_ctx_bits: 9,
            ..base
        },
        FiErrno::FI_EOVERFLOW,
        "rx_ctx_bits 9 exceeds the NIC's maximum of 8",
    );
    // 16 receive contexts need 4 bits; 5 address contexts no endpoint has.
    check(
        AvAttr {
            rx_ctx_bits: 5,
            ..base
        },
        FiErrno::FI_EOVERFLOW,
        "rx_ctx_bits 5 exceeds the 4 bits",
    );
    assert!(AvAttr {
        rx_ctx_bits: 4,
        ..base
    }
    .resolve(&limits)
    .is_ok());
    check(
        AvAttr {
            ep_per_node: 257,
            ..base
        },
        FiErrno::FI_E2BIG,
        "ep_per_node 257",
    );
    // A name passes resolve (a named AV checks the rest), but a plain AV refuses it.
    for attr in [
        AvAttr {
            name: Some(AvName::new("/uet-job-42").unwrap()),
            ..base
        },
        AvAttr {
            name: Some(AvName::new("shared").unwrap()),
            flags: FI_READ,
            ..base
        },
    ] {
        assert!(attr.resolve(&limits).is_ok());
        let e = AddressVector::open(MemoryNicTable::new(16), attr, limits).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
        assert!(e.message.contains("NamedAv::open"), "{e}");
    }
    check(
        AvAttr {
            flags: FI_READ,
            ..base
        },
        FiErrno::FI_EINVAL,
        "FI_READ",
    );
    check(
        AvAttr {
            flags: FI_EVENT | (1 << 3),
            ..base
        },
        FiErrno::FI_EBADFLAGS,
        "unknown flags 0x8",
    );
    check(
        AvAttr {
            job_id: 1 << 24,
            ..base
        },
        FiErrno::FI_EINVAL,
        "JobID",
    );
    // C values: type and rx_ctx_bits.
    let e = av_type_from_c(3).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("type 3"), "{e}");
    assert_eq!(av_type_from_c(1).unwrap(), AvType::Map);
    let e = rx_ctx_bits_from_c(-1).unwrap_err();
    assert!(e.message.contains("rx_ctx_bits -1"), "{e}");
    assert_eq!(errno(rx_ctx_bits_from_c(65)), FiErrno::FI_EINVAL);
    assert_eq!(rx_ctx_bits_from_c(4).unwrap(), 4);
    // Names: 1..=AV_NAME_MAX bytes, no NUL.
    assert_eq!(errno(AvName::new("")), FiErrno::FI_EINVAL);
    assert_eq!(errno(AvName::new("a\0b")), FiErrno::FI_EINVAL);
    assert_eq!(
        errno(AvName::new(&"n".repeat(AV_NAME_MAX + 1))),
        FiErrno::FI_EINVAL
    );
    let long = "n".repeat(AV_NAME_MAX);
    assert_eq!(AvName::new(&long).unwrap().as_str(), long);
    assert_eq!(format!("{:?}", AvName::new("x").unwrap()), "\"x\"");
}

#[test]
fn open_accepts_supported_flags_types_and_ignores_map_addr_without_name() {
    for (t, flags) in [
        (AvType::Unspec, FI_EVENT),
        (AvType::Map, FI_SYMMETRIC),
        (AvType::Table, FI_EVENT | FI_AV_USER_ID | FI_SYMMETRIC),
    ] {
        let av = AddressVector::open(
            MemoryNicTable::new(8),
            AvAttr {
                av_type: t,
                count: 8,
                flags,
                map_addr: 0x1000,
                ..AvAttr::default()
            },
            LIMITS,
        )
        .unwrap();
        assert_eq!(
            av.av_type(),
            AvType::Table,
            "MAP and UNSPEC are reported as TABLE"
        );
        assert_eq!(av.attr().flags, flags);
    }
}

#[test]
fn ep_per_node_rounds_the_default_size_to_whole_nodes() {
    let size = |ep_per_node: usize, max: u32| {
        AvAttr {
            ep_per_node,
            ..AvAttr::default()
        }
        .resolve(&AvLimits::new(max, 0))
        .unwrap()
        .count
    };
    assert_eq!(size(0, 1 << 20), DEFAULT_AV_COUNT);
    assert_eq!(size(1, 1 << 20), DEFAULT_AV_COUNT);
    assert_eq!(size(48, 1 << 20), 1056, "22 nodes of 48");
    assert_eq!(
        size(48, 1000),
        960,
        "capped at whole nodes below the NIC's size"
    );
    assert_eq!(size(48, 40), 40, "less than a node: the NIC's size");
    // An explicit count is kept.
    let attr = AvAttr {
        count: 100,
        ep_per_node: 48,
        ..AvAttr::default()
    };
    assert_eq!(attr.resolve(&LIMITS).unwrap().count, 100);
}

// ---------------------------------------------------------------------------------------------
// symmetric ranges

#[test]
fn insertsym_completes_once_with_every_member_and_a_refusal_fails_the_whole_range() {
    let (mut av, nic) = open_deferred(64);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let mut out = [0u64; 6];
    av.with_context(1)
        .insertsym("10.0.0.1", 3, "100", 2, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [0, 1, 2, 3, 4, 5]);
    assert_eq!(av.ranges().count(), 1, "stored as one range");
    // Lookup answers from the range at once: member 4 is node 3, first service.
    let member = av.address(4).unwrap();
    assert_eq!(
        member.fabric_addr,
        "10.0.0.3".parse::<std::net::IpAddr>().unwrap()
    );
    assert_eq!(member.pid_on_fep, 100);
    assert!(
        !nic.valid(0),
        "the NIC has nothing until the write completes"
    );
    nic.gate.store(true, Ordering::Release);
    assert_eq!(short(sink.read()), vec![Ev::Done(1, 6)]);
    assert!(nic.valid(5));
    assert!(av.verify_nic().unwrap().is_empty());

    // A refused range: every member fails at its position, and the range leaves the mirror.
    nic.table.lock().unwrap().fail_after(NicOp::Write, 0);
    av.with_context(2)
        .insertsym("10.0.1.1", 2, "7", 2, Some(&mut out[..4]), 0, None)
        .unwrap();
    assert_eq!(&out[..4], &[6, 7, 8, 9]);
    assert_eq!(
        short(sink.read()),
        vec![
            Ev::Err(2, 0, FiErrno::FI_EIO),
            Ev::Err(2, 1, FiErrno::FI_EIO),
            Ev::Err(2, 2, FiErrno::FI_EIO),
            Ev::Err(2, 3, FiErrno::FI_EIO),
            Ev::Done(2, 0),
        ]
    );
    assert_eq!(errno(av.address(7)), FiErrno::FI_EINVAL);
    assert_eq!(av.progress(), 0);
    assert_eq!(av.len(), 6);
    assert_eq!(av.ranges().count(), 1);
    assert!(av.verify_nic().unwrap().is_empty());

    // Past the table's end: the members that find no index fail with FI_ENOSPC.
    let mut av = open_event(4);
    av.bind(sink.clone(), 0).unwrap();
    av.with_context(3)
        .insertsym("10.0.2.1", 1, "1", 4, None, FI_MORE, None)
        .unwrap();
    av.with_context(4)
        .insertsym("10.0.3.1", 1, "1", 2, None, 0, None)
        .unwrap();
    assert_eq!(
        short(sink.read()),
        vec![
            Ev::Done(3, 4),
            Ev::Err(4, 0, FiErrno::FI_ENOSPC),
            Ev::Err(4, 1, FiErrno::FI_ENOSPC),
            Ev::Done(4, 0),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Named AVs

/// A handle on the 4-entry named AV `name`, opened with `flags`.
fn open_named(name: &str, flags: u64) -> uet_av::NamedAv<MemoryNicTable> {
    uet_av::NamedAv::open(
        AvAttr {
            name: Some(AvName::new(name).unwrap()),
            count: 4,
            flags,
            ..AvAttr::default()
        },
        LIMITS,
        |a| Ok(MemoryNicTable::new(a.count as u32)),
    )
    .unwrap()
}

#[test]
fn a_named_fi_event_av_reports_each_insert_on_its_queue() {
    let name = format!("test-named-event-{}", std::process::id());
    let open_named = |flags| open_named(&name, flags);
    let mut a = open_named(FI_EVENT);
    let mut b = open_named(0);
    let buf = pack(&[peer_bytes(1), [0u8; 32], peer_bytes(2)]);
    let mut out = [7u64; 3];
    let e = a.insert(&buf, 3, Some(&mut out), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOEQ, "no queue bound yet");
    assert_eq!(out, [7; 3], "nothing written");

    let eq = Sink::new();
    a.bind(eq.clone(), 0).unwrap();
    assert_eq!(eq.bound(), 1);
    assert_eq!(
        a.bind(eq.clone(), 0).unwrap_err().errno,
        FiErrno::FI_EINVAL,
        "bound once"
    );
    let mut st = [0i32; 3];
    let e = a
        .insert_with_status(&buf, 3, Some(&mut out), FI_SYNC_ERR, Some(&mut st))
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS);
    // A count the buffer does not hold, or one that overflows: FI_EINVAL before anything is
    // sized by it, and no event.
    let e = a.insert(&buf, usize::MAX / 8, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    let e = a
        .insertsym("10.3.0.1", usize::MAX, "1", 2, None, 0, None)
        .unwrap_err();
    assert!(e.message.contains("overflows"), "{e}");
    let e = a
        .insertsym("10.3.0.1", 3, "1", 2, None, 0, None)
        .unwrap_err();
    assert!(e.message.contains("more than the AV's 4 entries"), "{e}");

    // FI_SUCCESS: the outcome is on the queue, the fi_addrs in the array.
    assert_eq!(
        a.with_context(0x77).insert(&buf, 3, Some(&mut out), 0),
        Ok(0)
    );
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1]);
    let events = eq.read();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(matches!(
        events[0],
        AvEvent::InsertError {
            context: 0x77,
            position: 1,
            errno: FiErrno::FI_EINVAL,
            ..
        }
    ));
    assert!(matches!(
        events[1],
        AvEvent::InsertComplete {
            context: 0x77,
            inserted: 2,
            ..
        }
    ));
    // The other process's handle sees the entries.
    b.sync().unwrap();
    assert_eq!(b.av().iter().count(), 2);

    // insertsym reports the same way: 2 of 4 fit.
    assert_eq!(a.insertsym("10.3.0.1", 2, "1", 2, None, 0, None), Ok(0));
    let events = eq.read();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(matches!(
        events[2],
        AvEvent::InsertComplete {
            context: 0,
            inserted: 2,
            ..
        }
    ));
    drop(a);
    assert_eq!(eq.bound(), 0, "detached when the handle goes");
}

/// fi_eq(3): an event's context is "the context specified as part of the operation". A call
/// refused before it ran (here: a count the buffer does not hold) must not leave its context
/// to the next call, and a read-only FI_EVENT handle refuses inserts with FI_EPERM, not with
/// what an evented call would say first (FI_ENOEQ).
#[test]
fn a_named_fi_event_call_keeps_its_context_to_itself_and_read_only_is_eperm() {
    let name = format!("test-named-event-ctx-{}", std::process::id());
    let open_named = |flags| open_named(&name, flags);
    let mut a = open_named(FI_EVENT);
    let mut r = open_named(FI_EVENT | FI_READ);
    let e = r.insert(&peer_bytes(1), 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM, "{e}");
    let e = r
        .insertsym("10.3.0.1", 1, "1", 1, None, 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM, "{e}");
    let sink = Sink::new();
    a.bind(sink.clone(), 0).unwrap();
    let buf = peer_bytes(1);
    let e = a.with_context(0x55).insert(&buf, 2, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = a
        .with_context(0x56)
        .insertsym("10.3.0.1", usize::MAX, "1", 2, None, 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    a.insert(&buf, 1, None, 0).unwrap();
    assert_eq!(short(sink.read()), [Ev::Done(0, 1)], "no stale context");
}

/// A NIC that does not take its next AV_WRITE at all (an admin queue full, DMA memory gone).
struct NoSubmitNic {
    table: MemoryNicTable,
    refuse_submit: bool,
}

impl NicAvTable for NoSubmitNic {
    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        self.table.write_entries(records)
    }
    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        self.table.invalidate(indices)
    }
    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        self.table.read_entries(first, out)
    }
    fn submit_write(
        &mut self,
        records: &[AvWriteRecord],
    ) -> Result<Box<dyn PendingWrite>, NicError> {
        if std::mem::take(&mut self.refuse_submit) {
            return Err(NicError::new("AV_WRITE", "admin queue full"));
        }
        Ok(Box::new(uet_av::CompletedWrite::new(
            self.table.write_entries(records),
        )))
    }
}

/// fi_av(3): "In both the synchronous and asynchronous modes of operation, the fi_addr buffer
/// associated with a failed or aborted insertion will be set to FI_ADDR_NOTAVAIL". An AV_WRITE
/// the NIC does not take is known within the call: its fi_addr entries say so, and none names
/// the index a later insert takes.
#[test]
fn an_av_write_not_submitted_leaves_fi_addr_notavail() {
    let nic = NoSubmitNic {
        table: MemoryNicTable::new(16),
        refuse_submit: true,
    };
    let attr = AvAttr {
        count: 16,
        flags: FI_EVENT,
        ..AvAttr::default()
    };
    let mut av = AddressVector::open(nic, attr, LIMITS).unwrap();
    let eq = Sink::new();
    av.bind(eq.clone(), 0).unwrap();
    // fi_addr longer than the call: the entries past its count are the caller's own.
    let mut out = [0u64, 0, 0, 5, 6];
    let buf = pack(&[peer_bytes(1), [0u8; 32], peer_bytes(2)]);
    assert_eq!(
        av.with_context(1)
            .insert(&buf, 3, Some(&mut out), 0)
            .unwrap(),
        0
    );
    assert_eq!(
        out,
        [FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, 5, 6]
    );
    let mut other = [0u64; 1];
    av.with_context(2)
        .insert(&peer_bytes(9), 1, Some(&mut other), 0)
        .unwrap();
    assert_eq!(other, [0]);
    assert_eq!(
        short(eq.read()),
        [
            Ev::Err(1, 0, FiErrno::FI_EIO),
            Ev::Err(1, 1, FiErrno::FI_EINVAL),
            Ev::Err(1, 2, FiErrno::FI_EIO),
            Ev::Done(1, 0),
            Ev::Done(2, 1),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// AV sets of an FI_EVENT AV whose NIC refused an insert

/// An AV with index 0 stored and indices 1 and 2 refused by the NIC (reported, not yet
/// released: the AV has made no call since).
fn av_with_refused_indices() -> (AddressVector<MemoryNicTable>, Arc<Sink>) {
    let mut av = AddressVector::open(
        MemoryNicTable::new(16),
        AvAttr {
            count: 16,
            flags: FI_EVENT,
            ..AvAttr::default()
        },
        LIMITS,
    )
    .unwrap();
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.insert(&peer_bytes(1), 1, None, 0).unwrap();
    av.nic_mut().fail_after(NicOp::Write, 0);
    av.insert(&[peer_bytes(2), peer_bytes(3)].concat(), 2, None, 0)
        .unwrap();
    sink.read();
    assert!(av.index_of(1).is_err() && av.index_of(2).is_err());
    (av, sink)
}

/// fi_av_set(3): FI_UNIVERSE "will be created containing all addresses stored in the
/// corresponding AV". Addresses the NIC refused are not stored (lookup, index_of and a range
/// agree), so the set holds none of them and is not stale from the start.
#[test]
fn fi_universe_leaves_out_addresses_the_nic_refused() {
    let (av, _sink) = av_with_refused_indices();
    let by_range = av
        .av_set(&uet_av::AvSetAttr {
            start_addr: 0,
            end_addr: 15,
            stride: 1,
            ..uet_av::AvSetAttr::default()
        })
        .unwrap();
    assert_eq!(by_range.members().collect::<Vec<_>>(), [0]);
    let universe = av
        .av_set(&uet_av::AvSetAttr {
            flags: uet_av::FI_UNIVERSE,
            ..uet_av::AvSetAttr::default()
        })
        .unwrap();
    assert_eq!(universe.members().collect::<Vec<_>>(), [0]);
    assert!(
        universe.addr(&av).is_ok(),
        "a fresh FI_UNIVERSE set is stale"
    );
    assert_eq!(av.indices().collect::<Vec<_>>(), [0]);
    // A count of the addresses actually stored is enough.
    let one = av.av_set(&uet_av::AvSetAttr {
        count: 1,
        flags: uet_av::FI_UNIVERSE,
        ..uet_av::AvSetAttr::default()
    });
    assert!(one.is_ok(), "{:?}", one.err());
}

/// Random FI_EVENT inserts (some malformed, a table often full, FI_MORE batches, NIC
/// refusals), symmetric inserts, FI_SYNC_ERR (refused), queue reads and removes, and at the
/// end of some runs fi_close, against the model: 5 runs of 10,000 steps. After every step the mirror (lookup), the NIC table and the
/// calls in flight are the model's.
#[test]
fn fi_event_inserts_match_the_model() {
    let mut seen = Vec::new();
    // Some runs end with fi_close, the others with every insert settled.
    for (seed, cap, close) in [
        (0x9e37_79b9_7f4a_7c15u64, 4usize, true),
        (0xdead_beef_cafe_f00d, 8, false),
        (0x0123_4567_89ab_cdef, 16, true),
        (0x5151_5151_5151_5151, 6, false),
        (0x0bad_5eed_0f00_d001, 32, true),
    ] {
        seen.extend(ev_run(open_event(cap), seed, 10_000, close));
    }
    // Every kind of outcome came up: inserted addresses, and each reason for a failed one.
    assert!(seen.iter().any(|e| matches!(e, Ev::Done(_, n) if *n > 0)));
    for errno in [FiErrno::FI_EINVAL, FiErrno::FI_ENOSPC, FiErrno::FI_EIO] {
        assert!(
            seen.iter()
                .any(|e| matches!(e, Ev::Err(_, _, x) if *x == errno)),
            "no {errno:?} event"
        );
    }
}

/// `with_context` names the context of the next insert call only: a call refused before it
/// looks at the AV takes it too, so it never reaches a later call's events, of any form.
#[test]
fn a_context_never_carries_over_to_a_later_insert() {
    let mut av = open_event(16);
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let mut out = [0u64; 1];
    let refused = av
        .with_context(7)
        .insert(&peer_bytes(1), 1, Some(&mut out), 1 << 60)
        .unwrap_err();
    assert_eq!(refused.errno, FiErrno::FI_EBADFLAGS);
    assert!(sink.read().is_empty());
    av.insert(&peer_bytes(1), 1, Some(&mut out), 0).unwrap();
    assert_eq!(short(sink.read()), vec![Ev::Done(0, 1)]);
    av.with_context(8)
        .insertsvc("10.0.0.1", Some("bad service"), None, 0, None)
        .unwrap_err();
    av.insertsym("10.0.4.1", 1, "1", 2, None, 0, None).unwrap();
    assert_eq!(short(sink.read()), vec![Ev::Done(0, 2)]);
    av.with_context(9)
        .insert_str(&["uet://10.0.0.1/5"], None, 0, None)
        .unwrap_err();
    av.insertsvc("10.0.0.2", Some("3"), None, 0, None).unwrap();
    assert_eq!(short(sink.read()), vec![Ev::Done(0, 1)]);
}

/// A queue whose reader sleeps on a descriptor learns of each insert call as it is queued,
/// and that it is in flight until progress posted its events: a table that cannot announce
/// the NIC's answer (as this one) leaves the reader to read rather than sleep until then.
#[test]
fn an_insert_tells_its_queue_it_was_queued_and_is_in_flight_until_its_events_are_posted() {
    let (mut av, nic, sink) = two_in_flight(0);
    assert_eq!(sink.queued.load(Ordering::Acquire), 1);
    assert!(sink.in_flight(), "the AV_WRITE is in flight");
    assert!(sink.read().is_empty());
    assert!(sink.in_flight(), "the NIC has not answered");
    nic.gate.store(true, Ordering::Release);
    assert_eq!(short(sink.read()), vec![Ev::Done(1, 2)]);
    assert!(!sink.in_flight(), "every event is posted");
    // A call with FI_MORE is queued too (its records wait for the next call), and in flight
    // until the batch it belongs to is sent and answered.
    av.with_context(2)
        .insert(&peer_bytes(3), 1, None, FI_MORE)
        .unwrap();
    assert_eq!(sink.queued.load(Ordering::Acquire), 2);
    assert!(sink.in_flight());
    av.with_context(3)
        .insert(&peer_bytes(4), 1, None, 0)
        .unwrap();
    assert_eq!(sink.queued.load(Ordering::Acquire), 3);
    assert_eq!(short(sink.read()), vec![Ev::Done(2, 1), Ev::Done(3, 1)]);
    assert!(!sink.in_flight());
}

/// A NIC whose writes' polls wait for `hold`, noting in `polled` that one began.
#[derive(Clone)]
struct HeldNic {
    nic: DeferredNic,
    hold: Arc<Mutex<()>>,
    polled: Arc<AtomicBool>,
}

struct HeldWrite {
    write: Box<dyn PendingWrite>,
    hold: Arc<Mutex<()>>,
    polled: Arc<AtomicBool>,
}

impl PendingWrite for HeldWrite {
    fn poll(&mut self) -> bool {
        self.polled.store(true, Ordering::Release);
        let _held = self.hold.lock().unwrap_or_else(|p| p.into_inner());
        self.write.poll()
    }
    fn wait(&mut self) {
        self.write.wait()
    }
    fn prov_errno(&self) -> i32 {
        self.write.prov_errno()
    }
    fn finish(self: Box<Self>) -> Result<(), NicError> {
        self.write.finish()
    }
}

impl NicAvTable for HeldNic {
    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        self.nic.write_entries(records)
    }
    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        self.nic.invalidate(indices)
    }
    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        self.nic.read_entries(first, out)
    }
    fn submit_write(
        &mut self,
        records: &[AvWriteRecord],
    ) -> Result<Box<dyn PendingWrite>, NicError> {
        Ok(Box::new(HeldWrite {
            write: self.nic.submit_write(records)?,
            hold: self.hold.clone(),
            polled: self.polled.clone(),
        }))
    }
}

/// A process forked while a thread reading the bound queue was running the AV's progress
/// (which holds the AV's inserts while it polls the NIC) drops its copy of the AV without
/// waiting for that thread, which it does not have: the inserts are the parent's, whose
/// events the parent's queue gets.
#[test]
fn a_forked_child_drops_its_copy_of_an_av_whose_progress_a_parents_thread_was_running() {
    let held = HeldNic {
        nic: DeferredNic::new(16),
        hold: Arc::new(Mutex::new(())),
        polled: Arc::new(AtomicBool::new(false)),
    };
    let mut av = AddressVector::open(held.clone(), event_attr(16), LIMITS).unwrap();
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    av.with_context(1)
        .insert(&[peer_bytes(1), peer_bytes(2)].concat(), 2, None, 0)
        .unwrap();
    let hold = held.hold.lock().unwrap();
    let reader = {
        let sink = sink.clone();
        std::thread::spawn(move || short(sink.read()))
    };
    while !held.polled.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let mut copy = Some(av);
    // SAFETY: the child only drops its copy of the AV and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop(copy.take());
        // SAFETY: ends the forked child at once, running nothing more of the parent's.
        unsafe { libc::_exit(0) };
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut status = 0;
    let ended = loop {
        // SAFETY: polls the child forked above; `status` outlives the call.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid || std::time::Instant::now() >= deadline {
            break got == pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    if !ended {
        // SAFETY: ends and reaps the child forked above, still running.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut status, 0);
        }
    }
    assert!(ended, "the child dropped its copy of the AV and ended");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    // The parent's insert completes as ever.
    held.nic.gate.store(true, Ordering::Release);
    drop(hold);
    let mut events = reader.join().unwrap();
    events.extend(short(sink.read()));
    assert_eq!(events, vec![Ev::Done(1, 2)]);
    drop(copy);
}
