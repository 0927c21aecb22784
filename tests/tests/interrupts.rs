//! Completion interrupts (interface 1.12): `fi_cq_sread`, `fi_trywait` and the `FI_WAIT_FD`
//! descriptor, on MSI-X vectors the NIC raises for an armed completion ring.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::mpsc;
use std::time::Duration;
use uet_av::FiErrno;
use uet_regs::RegisterAccess;
use uet_tests::*;

const JOB: u32 = 0x0012_3456;

/// Whether `fd` polls readable now.
fn readable(fd: BorrowedFd<'_>) -> bool {
    readable_within(fd.as_raw_fd(), std::time::Duration::ZERO)
}

/// A thread asleep in `cq_sread` is woken by the MSI-X vector its ring raises when another
/// thread's send lands, and returns that receive; nothing returns it before the send.
#[test]
fn cq_sread_sleeps_until_another_threads_send_lands() {
    let (_fabric, mut a, mut b) = pair_with(JOB, |_| {});
    b.post_recvs(1);
    let sent_before = b.function.debug_counters().msix_messages;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let ep = &mut b.ep;
        s.spawn(move || {
            let got = ep.cq_sread(Some(Duration::from_secs(30)));
            let _ = tx.send(got.map(|ev| (ev.context, ev.len)));
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(rx.try_recv().is_err(), "nothing to return before the send");
        a.send(0, b"wake up", 7);
        let got = rx.recv_timeout(Duration::from_secs(30)).expect("woken");
        assert_eq!(got, Ok((1000, 7)));
    });
    assert!(
        b.function.debug_counters().msix_messages > sent_before,
        "woken by the vector, not by polling"
    );
}

/// With nothing coming, `cq_sread` returns `FI_EAGAIN` when its time is up, and the ring
/// reads on as before; an error completion is `FI_EAVAIL`, as for `cq_read`.
#[test]
fn cq_sread_times_out_with_eagain_and_reports_errors_as_cq_read_does() {
    let (_fabric, mut a, mut b) = pair_with(JOB, |_| {});
    assert_eq!(
        b.ep.cq_sread(Some(Duration::from_millis(20))).err(),
        Some(FiErrno::FI_EAGAIN)
    );
    assert_eq!(
        b.ep.cq_sread(Some(Duration::ZERO)).err(),
        Some(FiErrno::FI_EAGAIN)
    );
    b.post_recvs(1);
    a.send(0, b"after the wait", 3);
    let ev =
        b.ep.cq_sread(Some(Duration::ZERO))
            .expect("waiting already");
    assert_eq!((ev.context, ev.len), (1000, 14));
    assert_eq!(a.ep.cq_sread(None).map(|ev| ev.context), Ok(3));
    // An address A's AV does not hold: the send fails, and its completion is an error.
    a.send(7, b"nobody there", 4);
    assert_eq!(a.ep.cq_sread(None).err(), Some(FiErrno::FI_EAVAIL));
    assert_eq!(a.ep.cq_readerr().map(|ev| ev.context), Ok(4));
}

/// A timeout too long for the clock to add (`Duration::MAX`, as a caller maps "forever") is
/// a wait without end, not a panic: the sleeper is woken by the send as with `None`.
#[test]
fn cq_sread_with_a_timeout_past_the_clocks_range_waits_without_end() {
    let (_fabric, mut a, mut b) = pair_with(JOB, |_| {});
    b.post_recvs(1);
    std::thread::scope(|s| {
        let ep = &mut b.ep;
        let waiter = s.spawn(move || ep.cq_sread(Some(Duration::MAX)).map(|ev| ev.len));
        std::thread::sleep(Duration::from_millis(20));
        a.send(0, b"no deadline", 1);
        assert_eq!(waiter.join().expect("the waiter returns"), Ok(11));
    });
    assert_eq!(
        a.ep.cq_sread(Some(Duration::MAX)).map(|ev| ev.context),
        Ok(1)
    );
}

/// `fi_trywait` and the wait descriptor: armed on an empty ring, the descriptor turns
/// readable when a completion lands, `cq_trywait` then says to read first, and after the
/// read it arms again with the descriptor quiet.
#[test]
fn the_wait_fd_turns_readable_when_an_armed_ring_gets_a_completion() {
    let (_fabric, mut a, mut b) = pair_with(JOB, |_| {});
    b.post_recvs(2);
    let fd = b.ep.cq_wait_fd().expect("a wait descriptor").as_raw_fd();
    // SAFETY: the endpoint keeps the descriptor open while it lives, past every use here.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    assert_eq!(b.ep.cq_trywait(), Ok(()));
    assert!(!readable(fd));
    a.send(0, b"one", 1);
    assert!(readable(fd), "the armed ring raised its vector");
    assert_eq!(b.ep.cq_trywait(), Err(FiErrno::FI_EAGAIN));
    assert_eq!(b.ep.cq_read().map(|ev| ev.context), Ok(1000));
    assert_eq!(b.ep.cq_trywait(), Ok(()));
    assert!(!readable(fd), "cleared by the trywait");
    // Completions that wait already: the trywait refuses, and the arm is not needed.
    a.send(0, b"two", 2);
    assert_eq!(b.ep.cq_trywait(), Err(FiErrno::FI_EAGAIN));
    assert_eq!(b.ep.cq_read().map(|ev| ev.context), Ok(1001));
}

/// Each waiting endpoint has a vector of its own: two endpoints' descriptors differ, and a
/// completion for one leaves the other's quiet.
#[test]
fn two_endpoints_wait_on_vectors_of_their_own() {
    let (_fabric, mut a, mut b) = pair_with(JOB, |_| {});
    let fa = a.ep.cq_wait_fd().expect("A's descriptor").as_raw_fd();
    let fb = b.ep.cq_wait_fd().expect("B's descriptor").as_raw_fd();
    assert_ne!(fa, fb);
    // SAFETY: both endpoints keep their descriptors open past every use here.
    let (fa, fb) = unsafe { (BorrowedFd::borrow_raw(fa), BorrowedFd::borrow_raw(fb)) };
    b.post_recvs(1);
    assert_eq!(a.ep.cq_trywait(), Ok(()));
    assert_eq!(b.ep.cq_trywait(), Ok(()));
    a.send(0, b"to b", 1);
    // A's send completes too: both rings were armed and both hold a completion.
    assert!(readable(fa) && readable(fb));
    assert_eq!(a.ep.cq_read().map(|ev| ev.context), Ok(1));
    assert_eq!(a.ep.cq_trywait(), Ok(()));
    assert_eq!(b.ep.cq_read().map(|ev| ev.context), Ok(1000));
    assert_eq!(b.ep.cq_trywait(), Ok(()));
    b.post_recvs(1);
    a.send(0, b"again", 2);
    assert!(readable(fa) && readable(fb));
    assert_eq!(b.ep.cq_read().map(|ev| ev.context), Ok(1000));
    assert_eq!(b.ep.cq_trywait(), Ok(()));
    assert!(
        !readable(fb) && readable(fa),
        "only A's ring holds a completion"
    );
}

/// A NIC of interface 1.11 has no CQ_ARM: no wait descriptor (`FI_ENOSYS`), and
/// `cq_sread` waits by reading the ring, still woken by another thread's send.
#[test]
fn a_nic_without_completion_interrupts_still_waits_in_cq_sread() {
    let (_fabric, mut a, mut b) = pair_with(JOB, |cfg| cfg.interface_minor = 11);
    assert_eq!(b.ep.cq_wait_fd().err(), Some(FiErrno::FI_ENOSYS));
    assert_eq!(b.ep.cq_trywait(), Err(FiErrno::FI_ENOSYS));
    assert_eq!(
        b.ep.cq_sread(Some(Duration::from_millis(5))).err(),
        Some(FiErrno::FI_EAGAIN)
    );
    b.post_recvs(1);
    std::thread::scope(|s| {
        let ep = &mut b.ep;
        let waiter = s.spawn(move || ep.cq_sread(Some(Duration::from_secs(30))).map(|e| e.len));
        std::thread::sleep(Duration::from_millis(20));
        a.send(0, b"polled", 1);
        assert_eq!(waiter.join().expect("waiter"), Ok(6));
    });
    assert_eq!(b.function.debug_counters().msix_messages, 0);
}

/// With every vector held by other endpoints, an endpoint has no wait descriptor and cannot
/// arm: `cq_wait_fd` and `cq_trywait` both say `FI_EBUSY`, and `cq_sread` still waits (by
/// reading its ring). A vector given back is taken by the next endpoint that waits.
#[test]
fn an_endpoint_finds_every_vector_held_and_still_waits() {
    use uet_driver::EndpointAttr;
    let (_fabric, mut a, mut b) = pair_with(JOB, |_| {});
    let attr = EndpointAttr {
        job_id: JOB,
        ..EndpointAttr::default()
    };
    let mut holders = Vec::new();
    while holders.len() < usize::from(uet_regs::pci::MSIX_VECTORS) - 1 {
        let mut ep = b.nic.endpoint(attr, None).expect("an endpoint");
        assert_eq!(ep.cq_trywait(), Ok(()));
        holders.push(ep);
    }
    // A holds a vector on A's NIC, not B's: B's own endpoint takes the last one.
    let mut last = b.nic.endpoint(attr, None).expect("an endpoint");
    assert_eq!(last.cq_trywait(), Ok(()));
    assert_eq!(b.ep.cq_wait_fd().err(), Some(FiErrno::FI_EBUSY));
    assert_eq!(b.ep.cq_trywait(), Err(FiErrno::FI_EBUSY));
    b.post_recvs(1);
    a.send(0, b"polled", 1);
    assert_eq!(
        b.ep.cq_sread(Some(Duration::from_secs(5))).map(|e| e.len),
        Ok(6)
    );
    drop(last);
    assert_eq!(b.ep.cq_trywait(), Ok(()), "the vector given back");
    drop(holders);
}

/// `fi_cq_signal`: another thread wakes a thread asleep in `cq_sread`, which returns
/// `FI_EAGAIN`; a signal sent with nobody asleep makes the next `cq_sread` return at once,
/// and a completion that waits is returned before the signal is seen. Polled NICs (1.11)
/// are woken too.
#[test]
fn cq_signal_wakes_a_thread_asleep_in_cq_sread() {
    for minor in [uet_regs::INTERFACE_MINOR, 11] {
        let (_fabric, mut a, mut b) = pair_with(JOB, |cfg| cfg.interface_minor = minor);
        let signal = b.ep.cq_signal().expect("a signal");
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            let ep = &mut b.ep;
            s.spawn(move || {
                let _ = tx.send(
                    ep.cq_sread(Some(Duration::from_secs(60)))
                        .map(|ev| ev.context),
                );
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(rx.try_recv().is_err(), "asleep until signalled");
            signal.clone().signal().expect("signal");
            let got = rx.recv_timeout(Duration::from_secs(30)).expect("woken");
            assert_eq!(got, Err(FiErrno::FI_EAGAIN), "interface 1.{minor}");
        });
        // Signalled before: at once, once.
        signal.signal().expect("signal");
        signal.signal().expect("signal");
        assert_eq!(b.ep.cq_sread(None).err(), Some(FiErrno::FI_EAGAIN));
        assert_eq!(
            b.ep.cq_sread(Some(Duration::from_millis(10))).err(),
            Some(FiErrno::FI_EAGAIN),
            "seen once, the wait goes on as before"
        );
        // A completion first, then the signal.
        b.post_recvs(1);
        a.send(0, b"first", 1);
        signal.signal().expect("signal");
        assert_eq!(b.ep.cq_sread(None).map(|ev| ev.len), Ok(5));
        assert_eq!(b.ep.cq_sread(None).err(), Some(FiErrno::FI_EAGAIN));
    }
}

/// Counts the driver's writes to `CQ_DOORBELL` (the completion ring's head).
#[derive(Default)]
struct CqHeadWrites(std::sync::atomic::AtomicU32);

impl BarHook for CqHeadWrites {
    fn write32(&self, offset: u32, _value: u32) -> bool {
        if offset == uet_regs::CQ_DOORBELL.offset() {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        true
    }
}

/// A reader that polls the ring empty after every completion (a busy-polling `fi_cq_read`)
/// writes the head to the NIC once per quarter ring, not once per completion: on vfio-user
/// each register write is a round trip to the simulator's process. The NIC still has room
/// for every message.
#[test]
fn a_busy_polling_reader_writes_the_completion_head_once_a_quarter_ring() {
    let fabric = uet_sim::Fabric::new();
    let fa = fabric
        .add_nic(uet_sim::NicConfig::new(nic_addr(0)))
        .unwrap();
    let fb = fabric
        .add_nic(uet_sim::NicConfig::new(nic_addr(1)))
        .unwrap();
    let hooked = std::sync::Arc::new(HookedDevice {
        inner: uet_driver::backend::sim::SimDevice::new(fb.clone()),
        hook: CqHeadWrites::default(),
    });
    let mut a = Node::new(fa, JOB, 4);
    let mut b = Node::on_device(hooked.clone(), fb, JOB, JOB, 4);
    let to_b = a.insert(&b.addr());
    let quarter = (1u32 << uet_driver::EndpointAttr::default().cq_log2) / 4;
    let writes = || hooked.hook.0.load(std::sync::atomic::Ordering::Relaxed);
    let before = writes();
    for i in 0..quarter + quarter / 2 {
        b.post_recvs(1);
        a.send(to_b, b"one at a time", u64::from(i) + 1);
        assert!(a.next_completion().is_some_and(|e| e.error.is_none()));
        let got = b.next_completion().expect("delivered");
        assert!(got.error.is_none(), "{:?}", got.error);
        assert!(b.ep.poll().unwrap().is_none(), "the ring is read empty");
        if i + 1 < quarter {
            assert_eq!(writes(), before, "after {} completions", i + 1);
        }
    }
    assert_eq!(writes() - before, 1, "one write for the quarter ring");
}

/// An arm of a ring whose reader has taken completions it has not reported (fewer than a
/// quarter ring) reports them first: the NIC, which raises an armed vector while the ring
/// holds an entry the driver has not freed, does not raise it for entries already read.
#[test]
fn an_arm_after_unreported_reads_does_not_raise_the_vector() {
    // pair_with put b at index 0 of a's AV.
    let (_fabric, mut a, mut b) = pair_with(JOB, |_| {});
    for i in 0..3 {
        b.post_recvs(1);
        a.send(0, b"taken", i + 1);
        assert!(a.next_completion().is_some());
        assert!(b.next_completion().is_some_and(|e| e.error.is_none()));
    }
    let sent_before = b.function.debug_counters().msix_messages;
    assert_eq!(b.ep.cq_trywait(), Ok(()), "nothing to read: safe to sleep");
    let fd = b.ep.cq_wait_fd().expect("a vector");
    assert!(!readable(fd), "raised for entries already read");
    assert_eq!(b.function.debug_counters().msix_messages, sent_before);
    // A new completion still raises it.
    b.post_recvs(1);
    a.send(0, b"wakes", 9);
    let fd = b.ep.cq_wait_fd().expect("a vector");
    assert!(readable(fd), "a new completion raises the vector");
}

/// A thread in `cq_sread` without end when the NIC stops — its function reset under the
/// driver, or a fatal error (a DMA fault of the admin queue: bus mastering is off) — learns
/// of it with `FI_EIO`, on a NIC with completion interrupts (which a stopped NIC never
/// raises) and on one without: it does not wait for good.
#[test]
fn cq_sread_without_end_returns_eio_once_the_nic_stops() {
    for minor in [11, uet_regs::INTERFACE_MINOR] {
        for reset in [false, true] {
            let (_fabric, _a, mut b) = pair_with(JOB, |c| c.interface_minor = minor);
            b.post_recvs(1);
            std::thread::scope(|s| {
                let (tx, rx) = mpsc::channel();
                let ep = &mut b.ep;
                s.spawn(move || {
                    let _ = tx.send(ep.cq_sread(None).map(|ev| ev.context));
                });
                std::thread::sleep(Duration::from_millis(50));
                assert!(rx.try_recv().is_err(), "nothing to return yet");
                if reset {
                    b.nic.bar0().write(
                        uet_regs::FUNCTION_RESET,
                        uet_regs::FunctionReset::new().with_reset(true),
                    );
                } else {
                    b.function.set_bus_master(false);
                    // An admin command's DMA faults: the NIC stops with a fatal error.
                    assert!(b.nic.open_av(uet_av::AvAttr::default()).is_err());
                }
                // A generous bound, only so that a wait without end fails the test.
                let got = rx.recv_timeout(Duration::from_secs(60));
                assert_eq!(
                    got,
                    Ok(Err(FiErrno::FI_EIO)),
                    "interface 1.{minor}, reset {reset}"
                );
            });
        }
    }
}
