//! The event queue against fi_eq(3): readers that never wait behind an AV's owner, every
//! blocked reader woken, one fabric id space, fi_close for every handle, and an overrun queue
//! reported by readerr as by read.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uet_av::{
    AddressVector, AvAttr, AvLimits, FiErrno, MemoryNicTable, NicAvTable, NicError, PendingWrite,
    FI_EVENT,
};
use uet_driver::backend::sim::SimDevice;
use uet_driver::eq::FI_PEEK;
use uet_driver::{EndpointAttr, EqAttr, EqEvent, EqEventKind, EventQueue, Nic};
use uet_fwif::{AvWriteRecord, NicAvEntry};
use uet_regs::RegisterAccess;
use uet_tests::{fabric, nic_addr};

fn ev(data: u64) -> EqEvent {
    EqEvent {
        kind: EqEventKind::AvComplete,
        fid: 7,
        context: 9,
        data,
        cm_data: Vec::new(),
    }
}

/// A gate the test opens: until then the NIC completes no asynchronous AV_WRITE.
#[derive(Default)]
struct Gate {
    /// The AV's owner is waiting for a write.
    waiting: AtomicBool,
    open: AtomicBool,
}

/// A NIC table whose asynchronous AV_WRITEs complete only once the test opens its gate, as
/// over an admin queue that has stopped answering for a while.
struct GatedNic {
    table: Arc<Mutex<MemoryNicTable>>,
    gate: Arc<Gate>,
}

struct GatedWrite {
    table: Arc<Mutex<MemoryNicTable>>,
    records: Vec<AvWriteRecord>,
    gate: Arc<Gate>,
}

impl PendingWrite for GatedWrite {
    fn poll(&mut self) -> bool {
        self.gate.open.load(Ordering::Acquire)
    }
    fn wait(&mut self) {
        self.gate.waiting.store(true, Ordering::Release);
        while !self.gate.open.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn finish(self: Box<Self>) -> Result<(), NicError> {
        self.table.lock().unwrap().write_entries(&self.records)
    }
}

impl NicAvTable for GatedNic {
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
        Ok(Box::new(GatedWrite {
            table: self.table.clone(),
            records: records.to_vec(),
            gate: self.gate.clone(),
        }))
    }
}

/// fi_eq_read "performs a non-blocking read", and fi_eq_sread returns when "an error or
/// timeout occurs": neither waits while the AV's owner waits for the NIC. The readers finish
/// while the owner is still held (the NIC answers only after they have), so a reader that
/// waited for it would never finish by itself.
#[test]
fn readers_never_wait_for_the_av_owner_waiting_for_the_nic() {
    let gate = Arc::new(Gate::default());
    let nic = GatedNic {
        table: Arc::new(Mutex::new(MemoryNicTable::new(8))),
        gate: gate.clone(),
    };
    let attr = AvAttr {
        count: 8,
        flags: FI_EVENT,
        ..AvAttr::default()
    };
    let mut av = AddressVector::open(nic, attr, AvLimits::new(1 << 20, 8)).unwrap();
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    av.bind(eq.av_sink(), 0).unwrap();
    let peer = a_peer();
    av.insert(&peer, 1, None, 0).unwrap();
    // fi_av_remove settles the AV_WRITE in flight first: the owner waits for the NIC.
    let owner = std::thread::spawn(move || {
        av.remove(&[0], 0).unwrap();
        av
    });
    while !gate.waiting.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = eq.clone();
    std::thread::spawn(move || {
        let read = reader.read(0).map(|e| e.data).map_err(|e| e.errno);
        let sread = reader
            .sread(Some(Duration::from_millis(10)), 0)
            .map(|e| e.data)
            .map_err(|e| e.errno);
        let _ = tx.send((read, sread));
    });
    let got = rx.recv_timeout(Duration::from_secs(10));
    // Whatever the readers did, let the owner go.
    gate.open.store(true, Ordering::Release);
    let mut av = owner.join().unwrap();
    let (read, sread) = got.expect("the readers waited for the AV's owner");
    // The write had not completed: nothing to read yet.
    assert_eq!(read, Err(FiErrno::FI_EAGAIN));
    assert_eq!(sread, Err(FiErrno::FI_EAGAIN));
    // Nothing was lost: the insert's FI_AV_COMPLETE is read once the owner is done.
    av.progress();
    assert_eq!(eq.read(0).map(|e| e.data).map_err(|e| e.errno), Ok(1));
}

/// A post wakes every blocked reader: one that leaves the entry queued (FI_PEEK) must not
/// leave another asleep.
#[test]
fn every_blocked_reader_sees_an_event() {
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let (eq, tx) = (eq.clone(), tx.clone());
        std::thread::spawn(move || tx.send(eq.sread(None, FI_PEEK).map(|e| e.data)));
    }
    std::thread::sleep(Duration::from_millis(200));
    eq.post(ev(1)).unwrap();
    for reader in 0..2 {
        let r = rx.recv_timeout(Duration::from_secs(5));
        assert_eq!(r, Ok(Ok(1)), "reader {reader}");
    }
}

/// An entry's fid names one object: AVs, endpoints and queues share one id space.
#[test]
fn avs_endpoints_and_queues_never_share_a_fid() {
    let (_fabric, fns) = fabric(1);
    let function = fns.into_iter().next().unwrap();
    let nic = Nic::open(Arc::new(SimDevice::new(function))).unwrap();
    let mut fids = HashSet::new();
    for _ in 0..4 {
        let ep = nic
            .endpoint(
                EndpointAttr {
                    job_id: 0x42,
                    ..EndpointAttr::default()
                },
                None,
            )
            .unwrap();
        let av = nic
            .open_av(AvAttr {
                count: 8,
                job_id: 0x42,
                flags: FI_EVENT,
                ..AvAttr::default()
            })
            .unwrap();
        let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
        for fid in [ep.fid(), av.id(), eq.fid()] {
            assert!(fids.insert(fid), "fid {fid} given twice");
        }
    }
}

/// fi_close: "Any events which remain on the EQ when it is closed are lost." The queue is
/// closed for every handle: later calls fail with FI_EBADF, and no AV can be bound to it.
#[test]
fn close_ends_the_queue_for_every_handle() {
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let other = eq.clone();
    other.post(ev(1)).unwrap();
    eq.close().unwrap();
    let ebadf = Some(FiErrno::FI_EBADF);
    assert_eq!(
        other.read(0).err().map(|e| e.errno),
        ebadf,
        "the event is lost"
    );
    assert_eq!(other.readerr().err().map(|e| e.errno), ebadf);
    assert_eq!(other.sread(None, 0).err().map(|e| e.errno), ebadf);
    assert_eq!(other.post(ev(2)).err().map(|e| e.errno), ebadf);
    assert_eq!(other.bind().err().map(|e| e.errno), ebadf);
    assert_eq!(other.clone().close().err().map(|e| e.errno), ebadf);
    let mut av = AddressVector::open(
        MemoryNicTable::new(4),
        AvAttr {
            count: 4,
            flags: FI_EVENT,
            ..AvAttr::default()
        },
        AvLimits::new(1 << 20, 8),
    )
    .unwrap();
    let e = av.bind(other.av_sink(), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADF, "{e}");
    assert!(!av.is_bound());
}

/// A reader blocked in sread without a timeout returns when the queue is closed under it.
#[test]
fn close_wakes_a_blocked_reader() {
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = eq.clone();
    std::thread::spawn(move || tx.send(reader.sread(None, 0).err().map(|e| e.errno)));
    std::thread::sleep(Duration::from_millis(100));
    eq.close().unwrap();
    let r = rx.recv_timeout(Duration::from_secs(5));
    assert_eq!(r, Ok(Some(FiErrno::FI_EBADF)));
}

/// After the events queued before an overrun, readerr reports the overrun as read does.
#[test]
fn readerr_of_an_overrun_queue_reports_the_overrun() {
    let eq = EventQueue::open(EqAttr {
        size: 1,
        ..uet_tests::WAITABLE_EQ
    })
    .unwrap();
    eq.post(ev(1)).unwrap();
    assert_eq!(eq.post(ev(2)).unwrap_err().errno, FiErrno::FI_EOVERRUN);
    // "After all valid events have been retrieved": not before.
    assert_eq!(eq.readerr().unwrap_err().errno, FiErrno::FI_EAGAIN);
    assert_eq!(eq.read(0).unwrap().data, 1);
    assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EOVERRUN);
    assert_eq!(eq.readerr().unwrap_err().errno, FiErrno::FI_EOVERRUN);
}

/// fi_eq_signal wakes the threads blocked in sread: every one of them returns FI_EAGAIN, not
/// only the first to notice.
#[test]
fn a_signal_wakes_every_blocked_reader() {
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..3 {
        let (eq, tx) = (eq.clone(), tx.clone());
        std::thread::spawn(move || tx.send(eq.sread(None, 0).err().map(|e| e.errno)));
    }
    std::thread::sleep(Duration::from_millis(200));
    eq.signal();
    for reader in 0..3 {
        let r = rx.recv_timeout(Duration::from_secs(5));
        assert_eq!(r, Ok(Some(FiErrno::FI_EAGAIN)), "reader {reader}");
    }
    // The readers took the signal: a later read waits again.
    eq.post(ev(1)).unwrap();
    assert_eq!(eq.sread(Some(Duration::ZERO), 0).unwrap().data, 1);
}

/// An fi_eq_write that does not fit is refused (FI_EAGAIN) and the application keeps its
/// event: nothing was lost, so the queue is not overrun, and it goes on reporting events.
#[test]
fn a_user_write_to_a_full_queue_is_refused_and_leaves_the_queue_usable() {
    let eq = EventQueue::open(EqAttr {
        size: 1,
        flags: uet_driver::eq::FI_WRITE,
        ..uet_tests::WAITABLE_EQ
    })
    .unwrap();
    eq.write(ev(1)).unwrap();
    assert_eq!(eq.write(ev(2)).unwrap_err().errno, FiErrno::FI_EAGAIN);
    assert_eq!(eq.read(0).unwrap().data, 1);
    assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAGAIN);
    eq.write(ev(2)).unwrap();
    assert_eq!(eq.read(0).unwrap().data, 2);
    // The provider's events still arrive.
    eq.post(ev(3)).unwrap();
    assert_eq!(eq.read(0).unwrap().data, 3);
}

/// fi_eq_read "performs a non-blocking read", and fi_eq_sread keeps its timeout, while
/// another thread's admin command waits for a NIC that has stopped answering: reading the
/// queue collects the completion of an FI_EVENT AV's AV_WRITE from the admin queue, which that
/// command holds until its timeout. The event comes once the NIC answers again.
#[test]
fn readers_never_wait_for_another_threads_admin_command() {
    let (nic, mut av, eq, _f) =
        fi_event_queue(uet_regs::INTERFACE_MINOR, uet_tests::WAITABLE_EQ.wait_obj);
    let peer = a_peer();
    av.with_context(3).insert(&peer, 1, None, 0).unwrap();
    // The NIC stops answering; another thread's command waits for it, 2 s at most.
    nic.set_admin_timeout(Duration::from_secs(2));
    nic.bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    let other = nic.clone();
    let command = std::thread::spawn(move || {
        let _ = other.admin_command(uet_fwif::admin::Command::AvDestroy { av: 0xFFFF });
    });
    std::thread::sleep(Duration::from_millis(200));
    let started = std::time::Instant::now();
    let read = eq.read(0).map(|e| e.data).map_err(|e| e.errno);
    let read_took = started.elapsed();
    let started = std::time::Instant::now();
    let sread = eq
        .sread(Some(Duration::from_millis(20)), 0)
        .map(|e| e.data)
        .map_err(|e| e.errno);
    let sread_took = started.elapsed();
    command.join().unwrap();
    nic.bar0().write(
        uet_regs::DEV_CTRL,
        uet_regs::DevCtrl::new().with_enable(true),
    );
    assert!(
        read_took < Duration::from_millis(500),
        "fi_eq_read waited {read_took:?} for another thread's admin command ({read:?})"
    );
    assert!(
        sread_took < Duration::from_millis(500),
        "fi_eq_sread of 20 ms waited {sread_took:?} ({sread:?})"
    );
    // Nothing was lost: the insert's FI_AV_COMPLETE comes.
    let done = uet_tests::wait_event(&eq);
    assert_eq!(
        (done.kind, done.context, done.data),
        (EqEventKind::AvComplete, 3, 1)
    );
}

/// A NIC of interface `minor`, an FI_EVENT AV on it, and a queue of `wait_obj` bound to the
/// AV; the NIC's function, to stop or fail it.
fn fi_event_queue(
    minor: u8,
    wait_obj: uet_driver::eq::WaitObj,
) -> (
    Nic,
    uet_av::AddressVector<impl uet_av::NicAvTable>,
    EventQueue,
    uet_sim::SimFunction,
) {
    let (_fabric, fns) = uet_tests::fabric_with(1, |c| c.interface_minor = minor);
    let f = fns[0].clone();
    let nic = uet_tests::open_nic(&f);
    let mut av = nic
        .open_av(AvAttr {
            count: 8,
            job_id: 0x42,
            flags: FI_EVENT,
            ..AvAttr::default()
        })
        .unwrap();
    let eq = EventQueue::open(EqAttr {
        wait_obj,
        ..uet_tests::WAITABLE_EQ
    })
    .unwrap();
    av.bind(eq.av_sink(), 0).unwrap();
    (nic, av, eq, f)
}

/// [`fi_event_queue`] with an insert whose AV_WRITE waits in the admin queue of the NIC,
/// stopped.
fn insert_held_by_a_stopped_nic(
    minor: u8,
    wait_obj: uet_driver::eq::WaitObj,
) -> (
    Nic,
    uet_av::AddressVector<impl uet_av::NicAvTable>,
    EventQueue,
    uet_sim::SimFunction,
) {
    let (nic, mut av, eq, f) = fi_event_queue(minor, wait_obj);
    // Long enough that no poll gives the command up while the test runs.
    nic.set_admin_timeout(Duration::from_secs(60));
    nic.bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    av.with_context(3).insert(&a_peer(), 1, None, 0).unwrap();
    (nic, av, eq, f)
}

/// Start the NIC stopped by [`insert_held_by_a_stopped_nic`]: it runs the AV_WRITE.
fn start_again(nic: &Nic) {
    nic.bar0().write(
        uet_regs::DEV_CTRL,
        uet_regs::DevCtrl::new().with_enable(true),
    );
}

/// With the admin completion interrupt (interface 1.15), a reader of an FI_EVENT AV's queue
/// sleeps until the NIC answers the insert: `fi_trywait` lets the application sleep on the
/// queue's descriptor while the AV_WRITE is in flight, and the NIC's answer raises the admin
/// vector, which makes the descriptor readable and wakes a blocked `fi_eq_sread`.
#[test]
fn readers_sleep_until_the_nics_admin_interrupt_announces_the_insert() {
    use uet_driver::eq::WaitObj;
    let (nic, _av, eq, f) = insert_held_by_a_stopped_nic(uet_regs::INTERFACE_MINOR, WaitObj::Fd);
    let fd = eq.wait_fd().unwrap();
    eq.trywait().unwrap();
    assert!(
        !uet_tests::readable_within(fd, Duration::from_millis(100)),
        "readable before the NIC answered"
    );
    let raised = f.debug_counters().msix_messages;
    start_again(&nic);
    assert!(
        uet_tests::readable_within(fd, Duration::from_secs(10)),
        "the NIC's answer did not make the descriptor readable"
    );
    assert!(
        f.debug_counters().msix_messages > raised,
        "no vector was raised"
    );
    let done = eq.read(0).unwrap();
    assert_eq!(
        (done.kind, done.context, done.data),
        (EqEventKind::AvComplete, 3, 1)
    );

    // A reader blocked in fi_eq_sread. The NIC is started once the reader armed the admin
    // ring (however long it took to get there): its answer is then announced by the vector.
    let (nic, _av, eq, f) =
        insert_held_by_a_stopped_nic(uet_regs::INTERFACE_MINOR, WaitObj::Unspec);
    let arms = f.debug_counters().admin_arms;
    let reader = {
        let eq = eq.clone();
        std::thread::spawn(move || eq.sread(Some(Duration::from_secs(20)), 0))
    };
    let started = std::time::Instant::now();
    while f.debug_counters().admin_arms == arms {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the reader never armed the admin ring"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let raised = f.debug_counters().msix_messages;
    start_again(&nic);
    let done = reader.join().unwrap().unwrap();
    assert_eq!(
        (done.kind, done.context, done.data),
        (EqEventKind::AvComplete, 3, 1)
    );
    assert!(
        f.debug_counters().msix_messages > raised,
        "no vector was raised"
    );
}

/// A NIC older than the admin interrupt (interface 1.14): `fi_trywait` refuses to let the
/// application sleep while an insert is in flight (nothing would wake it), and a blocked
/// `fi_eq_sread` polls, so both still see the NIC's answer.
#[test]
fn before_interface_1_15_readers_poll_for_the_nics_answer() {
    use uet_driver::eq::WaitObj;
    let (nic, _av, eq, _f) = insert_held_by_a_stopped_nic(14, WaitObj::Fd);
    let e = eq.trywait().unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    let reader = {
        let eq = eq.clone();
        std::thread::spawn(move || eq.sread(Some(Duration::from_secs(20)), 0))
    };
    std::thread::sleep(Duration::from_millis(100));
    start_again(&nic);
    let done = reader.join().unwrap().unwrap();
    assert_eq!(
        (done.kind, done.context, done.data),
        (EqEventKind::AvComplete, 3, 1)
    );
}

/// The address of a peer endpoint on the second NIC of `nic_addr`, for inserts.
fn a_peer() -> [u8; 32] {
    uet_fwif::UetAddress {
        caps: 0,
        mode: uet_fwif::address::AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 5,
        fabric_addr: nic_addr(1),
        ri_start: 1,
        ri_count: 4,
        initiator: 0x100,
    }
    .to_bytes()
    .unwrap()
}

/// An FI_EVENT insert on a NIC that has stopped with a fatal error (a DMA fault: bus
/// mastering is off), or whose function was reset under the driver, fails within a poll or
/// two of a millisecond, as a synchronous command does, for a reader of its queue too where
/// the NIC has the admin completion interrupt (which neither raises): not at the admin
/// timeout.
#[test]
fn a_reader_learns_of_an_insert_a_stopped_nic_will_never_answer_at_once() {
    use uet_driver::eq::WaitObj;
    for (minor, reset) in [14, uet_regs::INTERFACE_MINOR]
        .into_iter()
        .flat_map(|minor| [(minor, false), (minor, true)])
    {
        let (nic, mut av, eq, f) = fi_event_queue(minor, WaitObj::Unspec);
        nic.set_admin_timeout(Duration::from_secs(20));
        if reset {
            nic.bar0().write(
                uet_regs::FUNCTION_RESET,
                uet_regs::FunctionReset::new().with_reset(true),
            );
        } else {
            f.set_bus_master(false);
        }
        av.with_context(3).insert(&a_peer(), 1, None, 0).unwrap();
        let started = std::time::Instant::now();
        let e = eq.sread(Some(Duration::from_secs(30)), 0).unwrap_err();
        let took = started.elapsed();
        assert_eq!(
            e.errno,
            FiErrno::FI_EAVAIL,
            "interface 1.{minor}, reset {reset}: {e}"
        );
        assert!(
            took < Duration::from_secs(2),
            "interface 1.{minor}, reset {reset}: the insert's failure took {took:?}"
        );
        let err = eq.readerr().unwrap();
        assert_eq!(
            err.err,
            FiErrno::FI_EIO,
            "interface 1.{minor}, reset {reset}"
        );
    }
}

/// A reader asleep on the admin completion interrupt (interface 1.15) when the NIC stops
/// with a fatal error (a DMA fault: bus mastering is off as it starts the insert's
/// AV_WRITE), or when its function is reset under the driver (which drops the arm): neither
/// raises the vector, yet the reader learns of the insert's failure within a fraction of a
/// second, not at the admin timeout.
#[test]
fn a_reader_asleep_when_the_nic_fails_learns_of_the_insert_promptly() {
    use uet_driver::eq::WaitObj;
    for reset in [false, true] {
        let (nic, _av, eq, f) =
            insert_held_by_a_stopped_nic(uet_regs::INTERFACE_MINOR, WaitObj::Unspec);
        let arms = f.debug_counters().admin_arms;
        let reader = {
            let eq = eq.clone();
            std::thread::spawn(move || {
                let e = eq.sread(Some(Duration::from_secs(10)), 0);
                (e, std::time::Instant::now())
            })
        };
        let started = std::time::Instant::now();
        while f.debug_counters().admin_arms == arms {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the reader never armed the admin ring"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Asleep on the arm.
        std::thread::sleep(Duration::from_millis(50));
        let raised = f.debug_counters().msix_messages;
        let failed_at = std::time::Instant::now();
        if reset {
            f.function_level_reset();
        } else {
            f.set_bus_master(false);
            start_again(&nic);
        }
        let (e, returned) = reader.join().unwrap();
        let e = e.unwrap_err();
        let took = returned - failed_at;
        assert_eq!(e.errno, FiErrno::FI_EAVAIL, "reset {reset}: {e}");
        assert_eq!(
            f.debug_counters().msix_messages,
            raised,
            "reset {reset}: the vector was raised"
        );
        assert!(
            took < Duration::from_secs(1),
            "reset {reset}: the reader learnt of the failure after {took:?}"
        );
        assert_eq!(eq.readerr().unwrap().err, FiErrno::FI_EIO, "reset {reset}");
    }
}

/// `fi_close` of an `FI_EVENT` AV whose AV_WRITEs a stopped NIC never answers gives them up at
/// about one admin timeout, all of them: each write's timeout runs from the close's first
/// look at them, not from the end of the wait for the one before (eight writes, eight
/// timeouts one after the other). Every insert still gets its events.
#[test]
fn closing_an_fi_event_av_gives_its_unanswered_writes_up_together() {
    use uet_driver::eq::WaitObj;
    const WRITES: u64 = 8;
    let timeout = Duration::from_millis(300);
    let (nic, mut av, eq, _f) = fi_event_queue(uet_regs::INTERFACE_MINOR, WaitObj::Unspec);
    nic.set_admin_timeout(timeout);
    nic.bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    for k in 0..WRITES {
        let peer = uet_tests::forged(&uet_fwif::UetAddress::from_bytes(&a_peer()).unwrap(), |a| {
            a.initiator = 0x100 + k as u32
        });
        // One AV_WRITE per call: no FI_MORE.
        av.with_context(k).insert(&peer, 1, None, 0).unwrap();
    }
    assert_eq!(av.writes_in_flight(), WRITES as usize);
    let started = std::time::Instant::now();
    assert!(av.close().is_ok(), "closed");
    let took = started.elapsed();
    assert!(
        took < timeout * 4,
        "the close gave {WRITES} unanswered writes up after {took:?}, timeout {timeout:?}"
    );
    // Error entries first (fi_eq_read is -FI_EAVAIL while one waits), in call order, then
    // the completions.
    for k in 0..WRITES {
        let e = eq.read(0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EAVAIL, "insert {k}: {e}");
        let err = eq.readerr().unwrap();
        assert_eq!((err.context, err.err), (k, FiErrno::FI_EIO), "insert {k}");
    }
    for k in 0..WRITES {
        let done = eq.read(0).unwrap();
        assert_eq!(
            (done.context, done.data),
            (k, 0),
            "insert {k}'s FI_AV_COMPLETE"
        );
    }
}
