//! FI_EVENT AVs on the simulated NIC, end to end: asynchronous AV_WRITEs on the admin queue,
//! events on the driver's event queue, open-attribute checks against the capability registers,
//! and fi_close of an AV that endpoints use.

use std::sync::Arc;
use std::time::Duration;
use uet_av::{
    AvAttr, AvName, AvType, FiErrno, NicAvTable, FI_ADDR_NOTAVAIL, FI_EVENT, FI_MORE, FI_READ,
    FI_SYNC_ERR,
};
use uet_driver::backend::sim::SimDevice;
use uet_driver::{Av, DmaPool, EqEventKind, EventQueue, Nic};
use uet_fwif::admin::{Command, RangeBody, Status};
use uet_fwif::datapath::CompletionKind;
use uet_regs::RegisterAccess;
use uet_tests::{fabric, job_endpoint, Node};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromZeros;

const JOB: u32 = 0x42;

fn open_nic(f: uet_sim::SimFunction) -> Nic {
    Nic::open(Arc::new(SimDevice::new(f))).expect("open NIC")
}

fn event_av(nic: &Nic, count: usize) -> Av {
    nic.open_av(AvAttr {
        count,
        job_id: JOB,
        flags: FI_EVENT,
        ..AvAttr::default()
    })
    .expect("open FI_EVENT AV")
}

fn bound_av(nic: &Nic, count: usize) -> (Av, EventQueue) {
    let mut av = event_av(nic, count);
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    av.bind(eq.av_sink(), 0).unwrap();
    (av, eq)
}

/// A well-formed address no NIC of the fabric owns.
fn nowhere(n: u8) -> [u8; 32] {
    let a = uet_fwif::UetAddress {
        caps: 0,
        mode: uet_fwif::address::AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: u16::from(n),
        fabric_addr: std::net::Ipv4Addr::new(192, 0, 2, n).into(),
        ri_start: 1,
        ri_count: 1,
        initiator: u32::from(n),
    };
    a.to_bytes().unwrap()
}

fn malformed() -> [u8; 32] {
    let mut b = nowhere(1);
    b[0] = 0x70; // unknown address version
    b
}

#[test]
fn async_insert_reports_each_failed_address_then_completes_and_traffic_flows() {
    let (_fabric, fns) = fabric(3);
    let mut it = fns.into_iter();
    let nic = open_nic(it.next().unwrap());
    let mut peers: Vec<Node> = it.map(|f| Node::new(f, JOB, 4)).collect();
    for p in &mut peers {
        p.post_recvs(2);
    }
    let (mut av, eq) = bound_av(&nic, 8);
    let mut ep = job_endpoint(&nic, JOB, &av);
    let pool = DmaPool::new(&nic, 4096, 8).unwrap();

    let addrs: Vec<u8> = [peers[0].addr(), malformed(), peers[1].addr(), malformed()].concat();
    let mut out = [0u64; 4];
    let ret = av
        .with_context(0xABCD)
        .insert(&addrs, 4, Some(&mut out), 0)
        .unwrap();
    assert_eq!(ret, 0, "FI_SUCCESS: initiated");
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1, FI_ADDR_NOTAVAIL]);
    assert_eq!(eq.len(), (0, 0), "nothing is posted before progress");

    // Reading the EQ drives progress: the errors first, then FI_AV_COMPLETE.
    assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAVAIL);
    for position in [1, 3] {
        let e = eq.readerr().unwrap();
        assert_eq!(e.fid, av.id());
        assert_eq!(e.context, 0xABCD);
        assert_eq!(e.data, position, "index in the caller's array");
        assert_eq!(e.err, FiErrno::FI_EINVAL);
        assert_eq!(e.prov_errno, 0);
    }
    assert_eq!(eq.readerr().unwrap_err().errno, FiErrno::FI_EAGAIN);
    let done = eq.read(0).unwrap();
    assert_eq!(done.kind, EqEventKind::AvComplete);
    assert_eq!((done.fid, done.context, done.data), (av.id(), 0xABCD, 2));
    assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAGAIN);
    assert!(av.verify_nic().unwrap().is_empty());

    // The NIC translates the new entries: fi_addr 1 reaches the second peer.
    let mut b = pool.alloc().unwrap();
    b.fill(b"after FI_AV_COMPLETE").unwrap();
    ep.post_send(1, b, 7, 0).map_err(|(e, _)| e).unwrap();
    let c = ep.poll().unwrap().expect("send completion");
    assert!(c.error.is_none(), "{:?}", c.error);
    let rx = peers[1].next_completion().expect("delivered");
    assert_eq!(rx.kind, CompletionKind::Recv);
    assert_eq!(
        rx.buffer.unwrap().to_vec().unwrap(),
        b"after FI_AV_COMPLETE"
    );
    assert!(peers[0].next_completion().is_none());
}

#[test]
fn a_batch_the_nic_refuses_fails_every_address_and_is_rolled_back() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let (mut av, eq) = bound_av(&nic, 8);
    // Take the NIC table away behind the AV's back: the next AV_WRITE gets InvalidHandle.
    let handle = av.nic().table().handle();
    nic.admin_command(Command::AvDestroy { av: handle })
        .unwrap();
    let addrs: Vec<u8> = [nowhere(1), malformed(), nowhere(2)].concat();
    let mut out = [0u64; 3];
    av.with_context(9)
        .insert(&addrs, 3, Some(&mut out), 0)
        .unwrap();
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1]);
    let errs: Vec<_> = (0..3).map(|_| eq.readerr().unwrap()).collect();
    assert_eq!(
        errs.iter().map(|e| (e.data, e.err)).collect::<Vec<_>>(),
        vec![
            (0, FiErrno::FI_EIO),
            (1, FiErrno::FI_EINVAL),
            (2, FiErrno::FI_EIO)
        ]
    );
    assert_eq!(errs[0].prov_errno, i32::from(Status::InvalidHandle as u16));
    assert!(
        errs[0]
            .err_data
            .contains("refused the AV_WRITE of 2 addresses"),
        "{}",
        errs[0].err_data
    );
    let done = eq.read(0).unwrap();
    assert_eq!(
        (done.kind, done.context, done.data),
        (EqEventKind::AvComplete, 9, 0)
    );
    // Rolled back from the mirror.
    let mut buf = [0u8; 32];
    let mut len = buf.len();
    assert_eq!(
        av.lookup(0, &mut buf, &mut len).unwrap_err().errno,
        FiErrno::FI_EINVAL
    );
    assert_eq!(av.progress(), 0);
    assert_eq!(av.len(), 0);
}

#[test]
fn inserts_before_bind_are_enoeq_and_sync_err_is_ebadflags() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let mut av = event_av(&nic, 8);
    let a = nowhere(1);
    assert_eq!(
        av.insert(&a, 1, None, 0).unwrap_err().errno,
        FiErrno::FI_ENOEQ
    );
    assert_eq!(
        av.insertsvc("10.9.0.1", Some("3"), None, 0, None)
            .unwrap_err()
            .errno,
        FiErrno::FI_ENOEQ
    );
    assert_eq!(
        av.insertsym("10.9.0.1", 2, "3", 2, None, 0, None)
            .unwrap_err()
            .errno,
        FiErrno::FI_ENOEQ
    );
    let mut st = [0i32; 1];
    assert_eq!(
        av.insert_with_status(&a, 1, None, FI_SYNC_ERR, Some(&mut st))
            .unwrap_err()
            .errno,
        FiErrno::FI_EBADFLAGS
    );
    assert_eq!(av.len(), 0);
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    assert_eq!(
        av.bind(eq.av_sink(), 4).unwrap_err().errno,
        FiErrno::FI_EBADFLAGS
    );
    av.bind(eq.av_sink(), 0).unwrap();
    assert_eq!(
        av.bind(eq.av_sink(), 0).unwrap_err().errno,
        FiErrno::FI_EINVAL
    );
    assert_eq!(
        av.insert_with_status(&a, 1, None, FI_SYNC_ERR, Some(&mut st))
            .unwrap_err()
            .errno,
        FiErrno::FI_EBADFLAGS
    );
    // insertsym after binding: 4 addresses, one completion.
    av.with_context(3)
        .insertsym("10.9.0.1", 2, "3", 2, None, 0, None)
        .unwrap();
    let done = eq.sread(Some(Duration::from_secs(5)), 0).unwrap();
    assert_eq!((done.context, done.data), (3, 4));
}

#[test]
fn sread_waits_for_the_completion() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let (mut av, eq) = bound_av(&nic, 8);
    // The same thread: sread itself makes the progress.
    av.with_context(1).insert(&nowhere(1), 1, None, 0).unwrap();
    let ev = eq.sread(Some(Duration::from_secs(5)), 0).unwrap();
    assert_eq!(
        (ev.kind, ev.context, ev.data),
        (EqEventKind::AvComplete, 1, 1)
    );

    // Another thread blocked in sread before the insert is made sees it complete.
    let reader = eq.clone();
    let t = std::thread::spawn(move || reader.sread(Some(Duration::from_secs(10)), 0));
    std::thread::sleep(Duration::from_millis(20));
    av.with_context(2).insert(&nowhere(2), 1, None, 0).unwrap();
    let ev = t.join().unwrap().unwrap();
    assert_eq!((ev.context, ev.data), (2, 1));
    // Nothing else is coming: sread times out.
    assert_eq!(
        eq.sread(Some(Duration::from_millis(10)), 0)
            .unwrap_err()
            .errno,
        FiErrno::FI_EAGAIN
    );
}

/// A reader blocked in sread before any AV is bound still sees an AV bound afterwards complete
/// its inserts: binding wakes it, and it progresses the AV from then on (fi_eq(3): sread returns
/// once "an event has been read from the EQ or an error or timeout occurs").
#[test]
fn a_reader_blocked_before_the_av_was_bound_sees_its_inserts_complete() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let reader = eq.clone();
    let t = std::thread::spawn(move || reader.sread(Some(Duration::from_secs(20)), 0));
    std::thread::sleep(Duration::from_millis(50));
    let mut av = event_av(&nic, 8);
    av.bind(eq.av_sink(), 0).unwrap();
    av.with_context(9).insert(&nowhere(1), 1, None, 0).unwrap();
    let ev = t.join().unwrap().unwrap();
    assert_eq!(
        (ev.kind, ev.context, ev.data),
        (EqEventKind::AvComplete, 9, 1)
    );
}

#[test]
fn several_batches_in_flight_complete_in_order_across_synchronous_commands() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let (mut av, eq) = bound_av(&nic, 64);
    for c in 1..=3u8 {
        let addrs: Vec<u8> = (0..c).flat_map(|i| nowhere(c * 10 + i)).collect();
        av.with_context(u64::from(c))
            .insert(&addrs, usize::from(c), None, 0)
            .unwrap();
    }
    av.with_context(4)
        .insert(&nowhere(40), 1, None, FI_MORE)
        .unwrap();
    av.with_context(5).insert(&nowhere(50), 1, None, 0).unwrap();
    assert_eq!(av.writes_in_flight(), 4);
    assert_eq!(av.inserts_in_flight(), 5);
    // A synchronous command collects the asynchronous completions it meets and files them.
    let mut entries = [uet_fwif::NicAvEntry::INVALID; 4];
    av.nic_mut().read_entries(0, &mut entries).unwrap();
    assert!(entries.iter().all(|e| e.is_valid()));
    let mut body = RangeBody::new_zeroed();
    body.first = U32::new(0);
    body.count = U32::new(1);
    body.buf = U64::new(0);
    assert!(nic
        .admin_command(Command::AvInvalidate { av: 999, body })
        .is_err());
    assert_eq!(av.writes_in_flight(), 4, "filed, not yet taken by the AV");
    let got: Vec<(u64, u64)> = (0..5)
        .map(|_| {
            let e = eq.read(0).unwrap();
            (e.context, e.data)
        })
        .collect();
    assert_eq!(got, vec![(1, 1), (2, 2), (3, 3), (4, 1), (5, 1)]);
    assert_eq!(av.writes_in_flight(), 0);
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn more_asynchronous_writes_than_the_admin_ring_holds() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let eq = EventQueue::open(uet_tests::WAITABLE_EQ).unwrap();
    let mut avs: Vec<Av> = (0..3).map(|_| event_av(&nic, 64)).collect();
    for av in &mut avs {
        av.bind(eq.av_sink(), 0).unwrap();
    }
    // 3 × 30 writes outstanding at once: more than the 63 the admin ring can hold.
    for i in 0..30u8 {
        for av in &mut avs {
            av.with_context(u64::from(i))
                .insert(&nowhere(i), 1, None, 0)
                .unwrap();
        }
    }
    let mut next = [0u64; 3];
    for _ in 0..90 {
        let e = eq.read(0).unwrap();
        let k = avs.iter().position(|a| a.id() == e.fid).unwrap();
        assert_eq!((e.context, e.data), (next[k], 1), "AV {k} in call order");
        next[k] += 1;
    }
    assert_eq!(next, [30; 3]);
    for av in &mut avs {
        assert_eq!(av.len(), 30);
        assert!(av.verify_nic().unwrap().is_empty());
    }
}

#[test]
fn open_attributes_are_checked_against_the_capability_registers() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let caps = *nic.capabilities();
    let bad = |attr: AvAttr| nic.open_av(attr).map(|_| ()).unwrap_err();
    let base = AvAttr {
        count: 16,
        ..AvAttr::default()
    };
    let e = bad(AvAttr {
        count: caps.av_entries as usize + 1,
        ..base
    });
    assert_eq!(e.errno, FiErrno::FI_ENOSPC);
    assert!(e.message.contains("count"), "{e}");
    let e = bad(AvAttr {
        rx_ctx_bits: caps.max_rx_ctx_bits + 1,
        ..base
    });
    assert_eq!(e.errno, FiErrno::FI_EOVERFLOW);
    assert!(e.message.contains("rx_ctx_bits"), "{e}");
    // CAP_EP.max_rx_ctx receive contexts need ceil(log2) bits; one more is refused.
    let usable = (u32::from(caps.max_rx_ctx)
        .next_power_of_two()
        .trailing_zeros()) as u8;
    assert!(
        usable < caps.max_rx_ctx_bits,
        "the reference model decodes more"
    );
    let e = bad(AvAttr {
        rx_ctx_bits: usable + 1,
        ..base
    });
    assert_eq!(e.errno, FiErrno::FI_EOVERFLOW);
    assert!(e.message.contains("receive contexts"), "{e}");
    let av = nic
        .open_av(AvAttr {
            rx_ctx_bits: usable,
            ..base
        })
        .unwrap();
    assert_eq!(av.rx_ctx_bits(), usable);
    let e = bad(AvAttr {
        ep_per_node: usize::from(caps.endpoints) + 1,
        ..base
    });
    assert_eq!(e.errno, FiErrno::FI_E2BIG);
    assert!(e.message.contains("ep_per_node"), "{e}");
    let e = bad(AvAttr {
        name: Some(AvName::new("job-7").unwrap()),
        ..base
    });
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("name 'job-7'"), "{e}");
    assert!(e.message.contains("open_named_av"), "{e}");
    let e = bad(AvAttr {
        flags: FI_READ,
        ..base
    });
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("FI_READ"), "{e}");
    let e = bad(AvAttr {
        flags: 1 << 3,
        ..base
    });
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS);
    // MAP and UNSPEC behave as, and are reported as, TABLE; ep_per_node at the limit is fine.
    for t in [AvType::Map, AvType::Unspec] {
        let av = nic
            .open_av(AvAttr {
                av_type: t,
                ep_per_node: usize::from(caps.endpoints),
                ..base
            })
            .unwrap();
        assert_eq!(av.av_type(), AvType::Table);
    }
}

#[test]
fn close_is_busy_while_an_endpoint_uses_the_av() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let (av, eq) = bound_av(&nic, 8);
    let handle = av.nic().table().handle();
    let ep = job_endpoint(&nic, JOB, &av);
    let err = av.close().unwrap_err();
    assert_eq!(err.error.errno, FiErrno::FI_EBUSY);
    assert!(err.error.message.contains("1 endpoints"), "{}", err.error);
    let av = err.av;
    // Still open and usable; the EQ cannot close while the AV is bound to it.
    assert_eq!(eq.clone().close().unwrap_err().errno, FiErrno::FI_EBUSY);
    drop(ep);
    av.close().unwrap();
    // The NIC table is gone (AV_DESTROY ran) and the EQ is free.
    let mut body = RangeBody::new_zeroed();
    body.count = U32::new(1);
    assert!(nic
        .admin_command(Command::AvRead { av: handle, body })
        .is_err());
    eq.close().unwrap();
}

#[test]
fn close_with_inserts_in_flight_waits_and_posts_their_events() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let (mut av, eq) = bound_av(&nic, 8);
    av.with_context(1).insert(&nowhere(1), 1, None, 0).unwrap();
    av.with_context(2)
        .insert(&nowhere(2), 1, None, FI_MORE)
        .unwrap();
    assert_eq!(av.writes_in_flight(), 1);
    av.close().unwrap();
    // Everything is queued by close: the cancelled FI_MORE address (read first: an error
    // waits ahead of events), then both completions in call order.
    assert_eq!(eq.len(), (2, 1));
    assert_eq!(eq.read(0).unwrap_err().errno, FiErrno::FI_EAVAIL);
    let err = eq.readerr().unwrap();
    assert_eq!(
        (err.context, err.data, err.err),
        (2, 0, FiErrno::FI_ECANCELED)
    );
    let done = eq.read(0).unwrap();
    assert_eq!((done.context, done.data), (1, 1));
    let done = eq.read(0).unwrap();
    assert_eq!((done.context, done.data), (2, 0));
    eq.close().unwrap();
}

/// A symmetric range whose asynchronous AV_WRITE times out fails its addresses and frees its
/// indices in the mirror, but the device may run it late and hold the range. The next insert,
/// which takes the range's first index, first rewrites the indices in doubt, behind the late
/// write, so the NIC does not refuse it as a single entry on a live range.
#[test]
fn an_insert_into_the_indices_of_a_late_range_succeeds() {
    let (_fabric, fns) = fabric(1);
    let nic = open_nic(fns.into_iter().next().unwrap());
    let (mut av, eq) = bound_av(&nic, 16);
    nic.set_admin_timeout(Duration::from_millis(50));
    nic.bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    av.with_context(1)
        .insertsym("192.0.2.1", 1, "1", 4, None, 0, None)
        .unwrap();
    // Four error entries (one per member), then the completion with none inserted.
    let e = uet_tests::wait_error(&eq);
    assert_eq!((e.context, e.err), (1, FiErrno::FI_EIO));
    assert!(e.err_data.contains("did not answer"), "{}", e.err_data);
    for _ in 1..4 {
        uet_tests::wait_error(&eq);
    }
    let done = uet_tests::wait_event(&eq);
    assert_eq!(
        (done.kind, done.context, done.data),
        (EqEventKind::AvComplete, 1, 0)
    );
    // The device resumes and runs the range write late.
    nic.bar0().write(
        uet_regs::DEV_CTRL,
        uet_regs::DevCtrl::new().with_enable(true),
    );
    nic.set_admin_timeout(Duration::from_secs(5));
    let mut out = [0u64; 1];
    av.with_context(2)
        .insert(&nowhere(9), 1, Some(&mut out), 0)
        .unwrap();
    assert_eq!(out[0], 0, "the range's first index, free in the mirror");
    let done = uet_tests::wait_event(&eq);
    assert_eq!(
        (done.kind, done.context, done.data),
        (EqEventKind::AvComplete, 2, 1)
    );
    assert!(eq.readerr().is_err(), "no error entry for it");
    assert_eq!(av.len(), 1);
    assert!(av.verify_nic().unwrap().is_empty());
}

/// FI_EVENT AVs whose event queues are not read keep their answered writes in the NIC's
/// admin command table until their progress takes them: four AVs with 32 each fill its 128
/// entries. Other admin commands of the process (a synchronous insert, an AV_READ) still go
/// through, and every asynchronous insert completes when its queue is read.
#[test]
fn unread_asynchronous_writes_never_crowd_out_other_admin_commands() {
    let (_f, fns) = fabric(1);
    let mut node = Node::new(fns[0].clone(), JOB, 8);
    let mut avs: Vec<(Av, EventQueue)> = (0..4).map(|_| bound_av(&node.nic, 64)).collect();
    for (k, (av, _)) in avs.iter_mut().enumerate() {
        for i in 0..32u8 {
            let mut a = nowhere(i + 1);
            a[16] = k as u8; // another fabric address per AV
            assert_eq!(av.insert(&a, 1, None, 0).unwrap(), 0, "initiated");
        }
    }
    let two = [nowhere(200), nowhere(201)].concat();
    assert_eq!(node.av.insert(&two, 2, None, 0).unwrap(), 2);
    assert_eq!(node.av.verify_nic().unwrap(), vec![]);
    for (av, eq) in &mut avs {
        for _ in 0..32 {
            let ev = uet_tests::wait_event(eq);
            assert_eq!((ev.kind, ev.data), (EqEventKind::AvComplete, 1));
        }
        assert!(eq.readerr().is_err(), "no error entry");
        assert_eq!(av.len(), 32);
        assert_eq!(av.verify_nic().unwrap(), vec![]);
    }
}
