//! Bad input gets an error status or completion, never a panic or a hang, and changes nothing.

use std::sync::Arc;
use std::time::Duration;
use uet_av::{FiErrno, NicAvTable, FI_ADDR_NOTAVAIL};
use uet_driver::{Device, DriverError};
use uet_fwif::admin::{BufferBody, Command, Status};
use uet_fwif::datapath::LocalStatus;
use uet_fwif::{AvWriteRecord, NicAvEntry};
use uet_regs::{DevCtrl, RegisterAccess, DEV_CTRL, DMA_FAULTS, RX_MALFORMED, RX_PACKETS};
use uet_sim::frame;
use uet_tests::{fabric, Node};
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromZeros;

#[test]
fn unknown_admin_opcode_gets_invalid_opcode_and_the_queue_keeps_working() {
    let (_f, fns) = fabric(1);
    let node = Node::new(fns.into_iter().next().unwrap(), 1, 4);
    let mut raw = Command::EndpointDestroy { endpoint: 1 }.encode(0);
    raw.opcode = 0x7f;
    match node.nic.admin_raw(raw) {
        Err(DriverError::AdminStatus { status, opcode }) => {
            assert_eq!(status, Status::InvalidOpcode);
            assert_eq!(opcode, 0x7f);
        }
        other => panic!("expected InvalidOpcode, got {other:?}"),
    }
    // Reserved bits set: InvalidField.
    let mut raw = Command::EndpointDestroy { endpoint: 1 }.encode(0);
    raw.body[10] = 1;
    assert!(matches!(
        node.nic.admin_raw(raw),
        Err(DriverError::AdminStatus {
            status: Status::InvalidField,
            ..
        })
    ));
    // The next command works.
    let mut out = [NicAvEntry::INVALID; 1];
    let mut node = node;
    node.av.nic_mut().read_entries(0, &mut out).unwrap();
}

#[test]
fn av_index_beyond_the_table_is_an_error() {
    let (_f, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut node = Node::new(it.next().unwrap(), 1, 4);
    let peer = Node::new(it.next().unwrap(), 1, 4);
    let cap = node.av.capacity() as u32;

    // AV_READ and AV_WRITE beyond the table: IndexOutOfRange from the NIC.
    let mut out = [NicAvEntry::INVALID; 1];
    let e = node.av.nic_mut().read_entries(cap, &mut out).unwrap_err();
    assert!(e.to_string().contains("index out of range"), "{e}");
    let mut rec = AvWriteRecord::new_zeroed();
    rec.index = U32::new(cap);
    rec.entry = NicAvEntry::for_peer(peer.ep.address(), 1);
    // Two records: one AV_WRITE command, refused whole by the NIC.
    let mut good = rec;
    good.index = U32::new(0);
    let e = node.av.nic_mut().write_entries(&[good, rec]).unwrap_err();
    assert!(e.to_string().contains("index out of range"), "{e}");
    // One record goes through the AV write window; the driver checks the index first.
    let e = node.av.nic_mut().write_entries(&[rec]).unwrap_err();
    assert!(e.to_string().contains("outside the table"), "{e}");
    assert!(node.av.verify_nic().unwrap().is_empty(), "nothing changed");

    // fi_av calls: -FI_EINVAL.
    let mut buf = [0u8; 32];
    let mut len = buf.len();
    for bad in [u64::from(cap), u64::from(cap) + 1, u64::MAX, 0] {
        assert_eq!(
            node.av.lookup(bad, &mut buf, &mut len).unwrap_err().errno,
            FiErrno::FI_EINVAL
        );
        assert_eq!(
            node.av.remove(&[bad], 0).unwrap_err().errno,
            FiErrno::FI_EINVAL
        );
    }

    // A send to an fi_addr beyond the table: an error completion, FI_EADDRNOTAVAIL.
    node.send(u64::from(cap) + 5, b"nowhere", 1);
    let err = node.next_completion().unwrap().error.unwrap();
    assert_eq!(err.local, LocalStatus::AddrNotAvail);
    assert_eq!(err.errno, FiErrno::FI_EADDRNOTAVAIL);
}

#[test]
fn descriptor_or_command_outside_mapped_dma_memory_is_a_dma_fault() {
    let (_f, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut node = Node::new(it.next().unwrap(), 1, 4);
    let mut peer = Node::new(it.next().unwrap(), 1, 4);
    peer.post_recvs(1);
    let k = node.insert(&peer.addr());
    let unmapped = 0x7700_0000_0000u64;
    node.ep.post_send_iova(k, unmapped, 64, 5, 0).unwrap();
    let ev = node.next_completion().expect("completion");
    let err = ev.error.expect("DMA fault");
    assert_eq!(err.local, LocalStatus::DmaFault);
    assert_eq!(err.errno, FiErrno::FI_EFAULT);
    assert_eq!(ev.context, 5);
    assert!(node.counter(DMA_FAULTS) >= 1);
    assert!(peer.next_completion().is_none());

    // An admin command whose buffer is unmapped.
    let mut body = BufferBody::new_zeroed();
    body.buf = U64::new(unmapped);
    body.len = U32::new(72);
    body.count = U32::new(1);
    let e = node
        .nic
        .admin_command(Command::AvWrite { av: 1, body })
        .unwrap_err();
    assert!(
        matches!(
            e,
            DriverError::AdminStatus {
                status: Status::DmaFault,
                ..
            }
        ),
        "{e}"
    );

    // The endpoint still works.
    node.send(k, b"after the fault", 6);
    assert!(node.next_completion().unwrap().error.is_none());
    assert!(peer.next_completion().unwrap().error.is_none());
}

#[test]
fn admin_command_on_a_disabled_device_times_out_with_a_clear_error() {
    let (_f, fns) = fabric(1);
    let node = Node::new(fns.into_iter().next().unwrap(), 1, 4);
    node.nic.set_admin_timeout(Duration::from_millis(50));
    node.nic.bar0().write(DEV_CTRL, DevCtrl::new());
    let e = node
        .nic
        .admin_command(Command::EndpointDestroy { endpoint: 99 })
        .unwrap_err();
    match &e {
        DriverError::AdminTimeout { device_enabled, .. } => assert!(!device_enabled),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(e.to_string().contains("timed out"), "{e}");
}

/// A data-carrying admin command that timed out may still be run by a late device: the
/// scratch buffer its data sits in is lent to no other command until its completion comes
/// (or the function is reset), so the next such command fails with a clear error instead of
/// having its data read, or overwritten, by the old one.
#[test]
fn a_timed_out_command_keeps_the_scratch_buffer_from_the_next() {
    let (_f, fns) = fabric(1);
    let mut node = Node::new(fns.into_iter().next().unwrap(), 1, 8);
    let peer = |initiator| uet_tests::forged(node.ep.address(), |a| a.initiator = initiator);
    let peers = [peer(0x77), peer(0x78)].concat();
    let others = [peer(0x79), peer(0x7A)].concat();
    node.nic.set_admin_timeout(Duration::from_millis(50));
    node.nic.bar0().write(DEV_CTRL, DevCtrl::new());
    // Two records: an AV_WRITE through the scratch buffer, which times out. The device may
    // still run it, so the two stay inserted, in doubt.
    let e = node.av.insert(&peers, 2, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert!(e.message.contains("timed out"), "{e}");
    assert!(e.message.contains("2 stay inserted"), "{e}");
    assert_eq!(node.av.len(), 2, "kept: the NIC may hold them");
    // The next AV_WRITE through the scratch buffer is refused before it goes out, and rolled
    // back.
    let e = node.av.insert(&others, 2, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert!(e.message.contains("scratch buffer"), "{e}");
    assert_eq!(node.av.len(), 2);
    let e = node.av.verify_nic().unwrap_err();
    assert!(e.message.contains("scratch buffer"), "{e}");
    // The device answers again and runs what it was given: its late completion releases the
    // buffer at the next command that needs it, with no other command in between.
    node.nic
        .bar0()
        .write(DEV_CTRL, DevCtrl::new().with_enable(true));
    assert_eq!(
        node.av.insert(&others, 2, None, 0).map_err(|e| e.errno),
        Ok(2)
    );
    assert!(node.av.verify_nic().unwrap().is_empty());
    assert_eq!(node.av.len(), 4);
}

/// The address an index holds, as the NIC translates it: the AV_READ of its entry.
fn nic_address(node: &mut Node, index: u32) -> Option<uet_fwif::UetAddress> {
    let mut e = [NicAvEntry::INVALID];
    node.av.nic_mut().read_entries(index, &mut e).unwrap();
    e[0].peer_address()
}

/// An AV_WRITE that timed out and that the device runs late leaves the NIC as the mirror
/// says: its records stay inserted, and once the device answers the AV rewrites them.
#[test]
fn a_late_av_write_leaves_the_nic_as_the_mirror() {
    let (_f, fns) = fabric(1);
    let mut node = Node::new(fns.into_iter().next().unwrap(), 1, 8);
    let peer = |initiator| uet_tests::forged(node.ep.address(), |a| a.initiator = initiator);
    let (a, b, c) = (peer(0x77), peer(0x78), peer(0x99));
    node.nic.set_admin_timeout(Duration::from_millis(50));
    node.nic.bar0().write(DEV_CTRL, DevCtrl::new());
    let mut fi = [0u64; 2];
    let e = node
        .av
        .insert(&[a, b].concat(), 2, Some(&mut fi), 0)
        .unwrap_err();
    assert!(e.message.contains("timed out"), "{e}");
    assert_eq!(fi, [0, 1], "kept at their indices");
    // While the late AV_WRITE has not run, the entries in doubt cannot be rewritten (it still
    // holds the scratch buffer), so an insert, which rewrites them first, is rolled back.
    let mut fc = [0u64; 1];
    let e = node.av.insert(&c, 1, Some(&mut fc), 0).unwrap_err();
    assert!(e.message.contains("scratch buffer"), "{e}");
    assert_eq!(fc, [FI_ADDR_NOTAVAIL]);
    node.nic
        .bar0()
        .write(DEV_CTRL, DevCtrl::new().with_enable(true));
    // The device answers: the late AV_WRITE runs, the insert rewrites 0 and 1 behind it and
    // goes in.
    let mut fc = [0u64; 1];
    assert_eq!(node.av.insert(&c, 1, Some(&mut fc), 0).unwrap(), 1);
    assert_eq!(fc, [2]);
    assert!(node.av.verify_nic().unwrap().is_empty());
    for (index, bytes) in [(0, a), (1, b), (2, c)] {
        let want = uet_fwif::UetAddress::from_bytes(&bytes).unwrap();
        assert_eq!(nic_address(&mut node, index), Some(want), "index {index}");
        let (mut out, mut len) = ([0u8; 32], 32);
        node.av
            .lookup(u64::from(index), &mut out, &mut len)
            .unwrap();
        assert_eq!(out, bytes);
    }
}

/// While an abandoned admin command may still run, one address does not take the AV write
/// window and a few removals do not ring the invalidate doorbell: both are posted register
/// writes, which the simulated device takes even while disabled and which could land before
/// the late command. Both go to the admin queue, behind it (here they time out too).
#[test]
fn the_window_and_the_doorbell_wait_for_an_abandoned_command() {
    let (_f, fns) = fabric(1);
    let mut node = Node::new(fns.into_iter().next().unwrap(), 1, 8);
    let peer = |initiator| uet_tests::forged(node.ep.address(), |a| a.initiator = initiator);
    let (a, b) = (peer(0x77), peer(0x78));
    let mut fa = [0u64; 1];
    assert_eq!(node.av.insert(&a, 1, Some(&mut fa), 0).unwrap(), 1);
    node.nic.set_admin_timeout(Duration::from_millis(50));
    node.nic.bar0().write(DEV_CTRL, DevCtrl::new());
    // A command without data times out: abandoned, holding no scratch buffer.
    let e = node
        .nic
        .admin_command(Command::EndpointDestroy { endpoint: 99 })
        .unwrap_err();
    assert!(matches!(e, DriverError::AdminTimeout { .. }), "{e}");
    // A removal of one address: not the doorbell (which would remove it at once) but an
    // AV_INVALIDATE, unanswered.
    let e = node.av.remove(&fa, 0).unwrap_err();
    assert!(e.message.contains("did not answer"), "{e}");
    assert_eq!(node.av.len(), 1);
    // One address: not the window (which would store it at once) but the admin queue, where
    // the rewrite of the entry in doubt goes unanswered first, so the insert is rolled back.
    let mut fb = [0u64; 1];
    let e = node.av.insert(&b, 1, Some(&mut fb), 0).unwrap_err();
    assert!(e.message.contains("in doubt"), "{e}");
    assert_eq!(fb, [FI_ADDR_NOTAVAIL]);
    node.nic
        .bar0()
        .write(DEV_CTRL, DevCtrl::new().with_enable(true));
    assert!(node.av.verify_nic().unwrap().is_empty());
    assert!(nic_address(&mut node, 0).is_some(), "a stays");
    assert_eq!(node.av.insert(&b, 1, Some(&mut fb), 0).unwrap(), 1);
    assert!(node.av.verify_nic().unwrap().is_empty());
}

/// An AV_INVALIDATE that timed out (a batch, and a single entry) leaves the addresses in the
/// AV; once the device answers, the AV rewrites them over whatever the late command did.
#[test]
fn a_late_av_invalidate_leaves_the_nic_as_the_mirror() {
    let (_f, fns) = fabric(1);
    let mut node = Node::new(fns.into_iter().next().unwrap(), 1, 16);
    let peers: Vec<u8> = (0..10u32)
        .flat_map(|i| uet_tests::forged(node.ep.address(), |a| a.initiator = 0x100 + i))
        .collect();
    let mut fi = vec![0u64; 10];
    assert_eq!(node.av.insert(&peers, 10, Some(&mut fi), 0).unwrap(), 10);
    node.nic.set_admin_timeout(Duration::from_millis(50));
    node.nic.bar0().write(DEV_CTRL, DevCtrl::new());
    // Ten indices: one AV_INVALIDATE on the admin queue.
    let e = node.av.remove(&fi[..9], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert!(e.message.contains("did not answer"), "{e}");
    // One: the doorbell would be quicker, but an abandoned command may still run.
    let e = node.av.remove(&fi[9..], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert_eq!(node.av.len(), 10, "kept on the host");
    node.nic
        .bar0()
        .write(DEV_CTRL, DevCtrl::new().with_enable(true));
    assert!(node.av.verify_nic().unwrap().is_empty());
    assert!(
        nic_address(&mut node, 3).is_some(),
        "rewritten after the late invalidate"
    );
    // And the AV goes on: a remove now removes.
    node.av.remove(&fi, 0).unwrap();
    assert_eq!(node.av.len(), 0);
    assert!(node.av.verify_nic().unwrap().is_empty());
}

/// A NIC alone on a fabric of its own, `cfg` applied to its configuration.
fn lone_nic(cfg: impl FnOnce(&mut uet_sim::NicConfig)) -> (uet_sim::Fabric, uet_driver::Nic) {
    let fabric = uet_sim::Fabric::new();
    let mut config = uet_sim::NicConfig::new(uet_tests::nic_addr(0));
    cfg(&mut config);
    let function = fabric.add_nic(config).unwrap();
    let nic = uet_tests::open_nic(&function);
    (fabric, nic)
}

/// Resume a disabled device 50 ms from now, while the caller's next admin command waits for
/// it (for up to 5 s).
fn resume_soon(nic: &uet_driver::Nic) -> std::thread::JoinHandle<()> {
    nic.set_admin_timeout(Duration::from_secs(5));
    let nic = nic.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        nic.bar0().write(DEV_CTRL, DevCtrl::new().with_enable(true));
    })
}

/// An endpoint created late on an AV (its ENDPOINT_CREATE timed out) makes the AV's close,
/// run before the late completion is collected, refused Busy: the close is submitted again
/// after the endpoint's undo, so the NIC's only table is free for the next open.
#[test]
fn an_av_closed_behind_a_late_endpoint_is_destroyed_after_it() {
    let (_fabric, nic) = lone_nic(|c| c.av_tables = 1);
    let attr = uet_av::AvAttr {
        count: 8,
        job_id: 0x42,
        ..uet_av::AvAttr::default()
    };
    let av = nic.open_av(attr).unwrap();
    nic.set_admin_timeout(Duration::from_millis(100));
    nic.bar0().write(DEV_CTRL, DevCtrl::new());
    let ep = uet_driver::EndpointAttr {
        job_id: 0x42,
        ..uet_driver::EndpointAttr::default()
    };
    assert!(
        nic.endpoint(ep, Some(&av)).is_err(),
        "ENDPOINT_CREATE timed out"
    );
    // The device resumes while AV_DESTROY waits: it creates the endpoint, bound to the AV,
    // then refuses AV_DESTROY as Busy.
    let resumed = resume_soon(&nic);
    drop(av);
    resumed.join().unwrap();
    // The next command goes after the endpoint's undo and the AV_DESTROY again.
    let again = nic.open_av(attr).expect("the only table is free again");
    drop(again);
}

/// A simulated device that leaves one admin command unrun until the next is rung: it drops
/// the `hold`-th write of `ADMIN_SQ_DOORBELL` after it is armed ([`HeldDoorbell::arm`]). The
/// next doorbell carries a tail past the held command too, so the device then runs both, in
/// order: the held one late.
type HeldDoorbellDevice = uet_tests::HookedDevice<HeldDoorbell>;

/// The hook of a [`HeldDoorbellDevice`].
struct HeldDoorbell {
    /// Doorbells to let through before the one dropped, plus one; 0: none is dropped.
    countdown: std::sync::atomic::AtomicU32,
}

impl HeldDoorbell {
    /// A device that drops nothing until [`HeldDoorbell::arm`]ed.
    fn device(function: uet_sim::SimFunction) -> Arc<HeldDoorbellDevice> {
        Arc::new(uet_tests::HookedDevice {
            inner: uet_driver::backend::sim::SimDevice::new(function),
            hook: HeldDoorbell {
                countdown: 0.into(),
            },
        })
    }

    fn arm(&self, hold: u32) {
        self.countdown
            .store(hold, std::sync::atomic::Ordering::SeqCst);
    }
}

impl uet_tests::BarHook for HeldDoorbell {
    fn write32(&self, offset: u32, _value: u32) -> bool {
        use std::sync::atomic::Ordering;
        if offset == uet_regs::ADMIN_SQ_DOORBELL.offset() {
            let left = self.countdown.load(Ordering::SeqCst);
            if left > 0 {
                self.countdown.store(left - 1, Ordering::SeqCst);
                return left != 1;
            }
        }
        true
    }
}

/// A scalable endpoint whose CONTEXT_CREATE times out is destroyed by its caller, but the
/// device runs the CONTEXT_CREATE late, ahead of the ENDPOINT_DESTROY, which it then refuses
/// Busy (the endpoint has a context). The destroy is submitted again after the context's
/// undo, so the NIC's only endpoint is free for the next.
#[test]
fn an_endpoint_destroyed_behind_a_late_context_is_destroyed_after_it() {
    let fabric = uet_sim::Fabric::new();
    let mut config = uet_sim::NicConfig::new(uet_tests::nic_addr(0));
    config.endpoints = 2;
    let device = HeldDoorbell::device(fabric.add_nic(config).unwrap());
    let nic = uet_driver::Nic::open(device.clone()).expect("open NIC");
    let av = uet_tests::open_av(&nic, 0x42, 8, 1);
    let attr = uet_driver::EndpointAttr {
        job_id: 0x42,
        rx_ctx_cnt: 2,
        ri_count: 2,
        ..uet_driver::EndpointAttr::default()
    };
    nic.set_admin_timeout(Duration::from_millis(50));
    // ENDPOINT_CREATE runs; the CONTEXT_CREATE after it is held.
    device.hook.arm(2);
    let e = nic.scalable_endpoint(attr, Some(&av)).err().unwrap();
    assert!(
        matches!(e, DriverError::AdminTimeout { opcode, .. }
            if opcode == uet_fwif::admin::Opcode::ContextCreate as u8),
        "{e}"
    );
    nic.set_admin_timeout(Duration::from_secs(5));
    // The NIC's only endpoint is free again: the context's undo and the retried destroy go
    // ahead of the next creation.
    let ep = nic
        .scalable_endpoint(attr, Some(&av))
        .expect("the only endpoint is free");
    drop(ep);
    drop(av);
}

/// A memory region whose MR_REGISTER times out and that the device registers late is
/// deregistered (by handle and key) ahead of the next command: registering the same key again,
/// at once, succeeds instead of finding it in use.
#[test]
fn a_memory_region_registered_late_is_deregistered() {
    let fabric = uet_sim::Fabric::new();
    let device = HeldDoorbell::device(
        fabric
            .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(0)))
            .unwrap(),
    );
    let nic = uet_driver::Nic::open(device.clone()).expect("open NIC");
    let av = uet_tests::open_av(&nic, 0x42, 8, 0);
    let ep = nic
        .endpoint(
            uet_driver::EndpointAttr {
                job_id: 0x42,
                ..uet_driver::EndpointAttr::default()
            },
            Some(&av),
        )
        .unwrap();
    let pool = uet_driver::DmaPool::new(&nic, 4096, 4).unwrap();
    let access = uet_driver::MrAccess::REMOTE_READ_WRITE;
    nic.set_admin_timeout(Duration::from_millis(50));
    device.hook.arm(1);
    let e = ep
        .register_mr(pool.alloc().unwrap(), access, 0x5EED)
        .unwrap_err();
    assert!(
        matches!(e.error, DriverError::AdminTimeout { opcode, .. }
            if opcode == uet_fwif::admin::Opcode::MrRegister as u8),
        "{e}"
    );
    assert!(
        e.memory.is_none(),
        "a registration in doubt keeps the memory: peers may reach it until its undo"
    );
    nic.set_admin_timeout(Duration::from_secs(5));
    // Registering the key again at once: its doorbell runs the held MR_REGISTER late, then
    // this one, refused KeyExists. The late completion queued the MR_DEREGISTER, which goes
    // ahead of the retry.
    let again = ep
        .register_mr(pool.alloc().unwrap(), access, 0x5EED)
        .expect("the late region's key is free again");
    let other = ep
        .register_mr(pool.alloc().unwrap(), access, 0x0DD)
        .expect("another key");
    drop((again, other, ep, av));
}

/// A destroy that finds the admin ring full of unanswered commands is not lost: it goes
/// ahead of the next command once the device answers, so the endpoint's slot and the memory
/// key are free again.
#[test]
fn a_destroy_that_finds_the_admin_ring_full_goes_ahead_of_the_next_command() {
    use uet_driver::admin::ADMIN_RING_LOG2;
    let (_fabric, nic) = lone_nic(|c| c.endpoints = 1);
    let av = uet_tests::open_av(&nic, 0x42, 8, 0);
    let attr = uet_driver::EndpointAttr {
        job_id: 0x42,
        ..uet_driver::EndpointAttr::default()
    };
    let ep = nic.endpoint(attr, Some(&av)).unwrap();
    let pool = uet_driver::DmaPool::new(&nic, 4096, 4).unwrap();
    let access = uet_driver::MrAccess::REMOTE_READ_WRITE;
    let mr = ep
        .register_mr(pool.alloc().unwrap(), access, 0xF00D)
        .unwrap();
    nic.set_admin_timeout(Duration::from_millis(1));
    nic.bar0().write(DEV_CTRL, DevCtrl::new());
    for _ in 0..(1usize << ADMIN_RING_LOG2) - 1 {
        let e = nic
            .admin_command(Command::EndpointDestroy { endpoint: 0xFFFF })
            .unwrap_err();
        assert!(matches!(e, DriverError::AdminTimeout { .. }), "{e}");
    }
    // MR_DEREGISTER and ENDPOINT_DESTROY find the ring full.
    drop(mr);
    drop(ep);
    nic.bar0().write(DEV_CTRL, DevCtrl::new().with_enable(true));
    nic.set_admin_timeout(Duration::from_secs(5));
    let ep = nic
        .endpoint(attr, Some(&av))
        .expect("the only endpoint is free again");
    let mr = ep
        .register_mr(pool.alloc().unwrap(), access, 0xF00D)
        .expect("the key is free again");
    drop((mr, ep, av));
}

/// An auth-key slot made late is not removed by number: its AV may be destroyed meanwhile,
/// and the slot given to another AV's key, which removing it would take away. (The slot goes
/// with its AV instead.)
#[test]
fn a_late_auth_key_slot_is_left_to_its_av() {
    use uet_fwif::admin::AvCreateBody;
    use uet_fwif::auth_key::{AuthKeyAddBody, AuthKeySourceBody};
    let (_fabric, nic) = lone_nic(|_| {});
    let mut body = AvCreateBody::new_zeroed();
    body.capacity = U32::new(8);
    let x = nic.admin_command(Command::AvCreate(body)).unwrap().result0;
    let y = nic.admin_command(Command::AvCreate(body)).unwrap().result0;
    let mut add = AuthKeyAddBody::new_zeroed();
    add.job_id = U32::new(7);
    nic.set_admin_timeout(Duration::from_millis(100));
    // The device stalls: an AUTH_KEY_ADD for X, then AV_DESTROY of X, time out.
    nic.bar0().write(DEV_CTRL, DevCtrl::new());
    assert!(nic
        .admin_command(Command::AuthKeyAdd { av: x, body: add })
        .is_err());
    assert!(nic.admin_command(Command::AvDestroy { av: x }).is_err());
    // It resumes while Y's AUTH_KEY_ADD waits: X's late slot is made, freed with X, and Y
    // gets the lowest free slot, the same one.
    let resumed = resume_soon(&nic);
    let slot = nic
        .admin_command(Command::AuthKeyAdd { av: y, body: add })
        .expect("Y's key")
        .result0;
    resumed.join().unwrap();
    // Y's slot is still Y's after the next command.
    let r = nic.admin_command(Command::AuthKeySource {
        slot,
        body: AuthKeySourceBody::new_zeroed(),
    });
    assert!(r.is_ok(), "Y's auth-key slot {slot} was removed: {r:?}");
}

/// The simulated NIC keeps a symmetric range as one record: a timed-out AV_INVALIDATE of some
/// of its members, run late, is repaired by rebuilding the range with the mirror's holes.
#[test]
fn a_late_invalidate_of_range_members_is_repaired_on_the_range() {
    let (_f, fns) = fabric(1);
    let mut node = Node::new(fns.into_iter().next().unwrap(), 1, 64);
    let mut fi = vec![0u64; 24];
    node.av
        .insertsym("10.20.0.1", 6, "9", 4, Some(&mut fi), 0, None)
        .unwrap();
    node.av.remove(&fi[..2], 0).unwrap();
    node.nic.set_admin_timeout(Duration::from_millis(50));
    node.nic.bar0().write(DEV_CTRL, DevCtrl::new());
    let e = node.av.remove(&fi[4..14], 0).unwrap_err();
    assert!(e.message.contains("did not answer"), "{e}");
    node.nic
        .bar0()
        .write(DEV_CTRL, DevCtrl::new().with_enable(true));
    assert!(node.av.verify_nic().unwrap().is_empty());
    assert_eq!(node.av.ranges().count(), 1, "one range on the host");
    assert!(nic_address(&mut node, 5).is_some());
    assert!(nic_address(&mut node, 0).is_none(), "the hole stays a hole");
    node.av.remove(&fi[4..14], 0).unwrap();
    assert!(node.av.verify_nic().unwrap().is_empty());
    assert_eq!(node.av.len(), 12);
}

/// A creation the driver gave up on (AV_CREATE timed out: fi_av_open failed) and that the
/// device runs late makes a table nobody owns; the admin queue destroys it before its next
/// command, so the NIC's only table is free again for the next open.
#[test]
fn a_table_created_late_is_destroyed_before_the_next_command() {
    let (_fabric, nic) = lone_nic(|c| c.av_tables = 1);
    let attr = uet_av::AvAttr {
        count: 8,
        ..uet_av::AvAttr::default()
    };
    nic.set_admin_timeout(Duration::from_millis(50));
    nic.bar0().write(DEV_CTRL, DevCtrl::new());
    let e = nic.open_av(attr).unwrap_err();
    assert!(e.message.contains("timed out"), "{e}");
    nic.bar0().write(DEV_CTRL, DevCtrl::new().with_enable(true));
    let av = nic.open_av(attr).expect("the late table was destroyed");
    assert_eq!(
        nic.open_av(attr).unwrap_err().errno,
        FiErrno::FI_ENOSPC,
        "one table, and it is in use"
    );
    drop(av);
}

/// Reading a command's result back from the scratch buffer lends the buffer to nothing: a
/// later command without data that times out holds no buffer, so the next data-carrying
/// command is refused for what it meets itself (the disabled device), not for the scratch
/// buffer.
#[test]
fn a_read_back_leaves_the_scratch_buffer_to_no_next_command() {
    let (_f, fns) = fabric(1);
    let mut node = Node::new(fns.into_iter().next().unwrap(), 1, 8);
    let peers = [
        uet_tests::forged(node.ep.address(), |a| a.initiator = 0x77),
        uet_tests::forged(node.ep.address(), |a| a.initiator = 0x78),
    ]
    .concat();
    assert_eq!(
        node.av.insert(&peers, 2, None, 0).map_err(|e| e.errno),
        Ok(2)
    );
    // AV_READ through the scratch buffer, its entries read back.
    assert!(node.av.verify_nic().unwrap().is_empty());
    node.nic.set_admin_timeout(Duration::from_millis(50));
    node.nic.bar0().write(DEV_CTRL, DevCtrl::new());
    let e = node
        .nic
        .admin_command(Command::EndpointDestroy { endpoint: 99 })
        .unwrap_err();
    assert!(matches!(e, DriverError::AdminTimeout { .. }), "{e}");
    let e = node.av.verify_nic().unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ETIMEDOUT, "{e}");
    assert!(e.message.contains("timed out"), "{e}");
    assert!(!e.message.contains("scratch buffer"), "{e}");
}

#[test]
fn malformed_frames_are_counted_and_dropped() {
    let (fabric, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut node = Node::new(it.next().unwrap(), 1, 4);
    let peer = Node::new(it.next().unwrap(), 1, 4);
    node.post_recvs(1);
    let me = node.nic.fabric_addr();
    let src = peer.nic.fabric_addr();
    let frame = |payload: &[u8]| {
        frame::build(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            src,
            me,
            5000,
            payload,
        )
        .unwrap()
    };
    let before = node.counter(RX_MALFORMED);
    // A UDP datagram to port 4793 whose UET headers are cut short.
    fabric.inject_frame(&frame(&[0x10, 0x60, 0, 0, 0]));
    assert_eq!(node.counter(RX_MALFORMED), before + 1);
    // A well-formed PDS prologue followed by a truncated SES header.
    let mut truncated = vec![0u8; 12 + 10];
    truncated[0] = 0x10; // type RUD_REQ
    fabric.inject_frame(&frame(&truncated));
    assert_eq!(node.counter(RX_MALFORMED), before + 2);
    // A corrupted IPv4 header checksum.
    let mut bad_ip = frame(&[0u8; 80]);
    bad_ip[14 + 10] ^= 0xff;
    fabric.inject_frame(&bad_ip);
    assert_eq!(node.counter(RX_MALFORMED), before + 3);
    // Garbage that no NIC owns.
    let dropped = fabric.dropped_frames();
    fabric.inject_frame(&[0u8; 7]);
    assert_eq!(fabric.dropped_frames(), dropped + 1);
    // Nothing reached the posted buffer, and the NIC still works.
    assert!(node.next_completion().is_none());
    assert_eq!(node.counter(RX_PACKETS), 0);
}

#[test]
fn a_pool_of_buffers_wider_than_a_descriptor_length_or_too_many_is_refused() {
    let (_f, fns) = fabric(1);
    let node = Node::new(fns.into_iter().next().unwrap(), 1, 4);
    // A count past DmaPool::MAX_BUFFERS is refused before its free list is allocated, which
    // for u32::MAX buffers (64 GiB) would abort the process where it cannot be had.
    let too_many = uet_driver::DmaPool::MAX_BUFFERS + 1;
    for (size, count) in [
        (1usize << 32, 1u32),
        (usize::MAX, 1),
        (0, 1),
        (64, 0),
        (64, too_many),
        (64, u32::MAX),
    ] {
        match uet_driver::DmaPool::new(&node.nic, size, count) {
            Err(DriverError::InvalidArgument(_)) => {}
            Err(e) => panic!("{size}x{count}: {e}"),
            Ok(_) => panic!("{size}x{count}: accepted"),
        }
    }
    // An ordinary size is fine.
    assert!(uet_driver::DmaPool::new(&node.nic, 4096, 1).is_ok());
    assert!(uet_driver::DmaPool::new(&node.nic, 64, 1 << 16).is_ok());
}

/// DMA memory of a size no system can back is refused with the reason, and uses up nothing:
/// the next mapping gets memory at a fresh IOVA that no other region has.
#[test]
fn an_impossible_dma_length_is_refused_and_the_next_mapping_works() {
    let (_f, fns) = fabric(1);
    let nic = uet_tests::open_nic(&fns[0]);
    let before = nic.map_dma(4096).expect("a page of DMA memory");
    for len in [
        usize::MAX,
        usize::MAX / 2 + 1,
        (isize::MAX as usize) - 4095,
        0,
    ] {
        match nic.map_dma(len) {
            Err(DriverError::Dma(e)) => {
                let text = e.to_string();
                assert!(
                    text.contains("does not fit")
                        || text.contains("mapping DMA memory")
                        || text.contains("empty")
                        || text.contains("sizing DMA memory"),
                    "{len}: {text}"
                );
            }
            other => panic!(
                "map_dma({len}) should fail, got {:?}",
                other.map(|r| r.region().iova())
            ),
        }
    }
    let errno = |len| nic.map_dma(len).err().map(|e| e.errno());
    assert_eq!(
        errno(0),
        Some(FiErrno::FI_EINVAL),
        "an empty region is a bad argument"
    );
    assert_eq!(errno(usize::MAX), Some(FiErrno::FI_ENOMEM));
    let after = nic.map_dma(4096).expect("DMA memory after the refusals");
    assert!(after.region().iova() > before.region().iova());
    assert!(
        after.region().iova() - before.region().iova() <= 2 << 20,
        "the refused requests took no IOVA space"
    );
}

/// A device that takes the enable but never runs IDENTIFY (its doorbell is lost): the open
/// fails with the timeout, and the device is stopped before the admin rings it was given are
/// unmapped, so no late completion can land in freed memory. The next open works.
#[test]
fn an_open_whose_identify_goes_unanswered_leaves_the_device_stopped() {
    let function = uet_sim::Fabric::new()
        .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(0)))
        .expect("add NIC");
    let device = HeldDoorbell::device(function.clone());
    device.hook.arm(1);
    match uet_driver::Nic::open(device.clone()) {
        Err(DriverError::AdminTimeout { .. }) => {}
        Err(e) => panic!("expected the IDENTIFY timeout, got {e}"),
        Ok(_) => panic!("IDENTIFY was never run"),
    }
    let status = device.inner.bar0().read(uet_regs::DEV_STATUS);
    assert!(!status.enabled(), "the device is stopped: {status:?}");
    let nic = uet_driver::Nic::open(device).expect("the next open");
    assert_eq!(nic.identity().fabric_addr, uet_tests::nic_addr(0));
}

/// A device hook that hides `DEV_STATUS.enabled` from the first `hide` reads that would show
/// it (every read when `hide` is `u32::MAX`): a device that takes a moment, or forever, to
/// start its queues after `DEV_CTRL.enable` is set.
struct LateEnable {
    hide: std::sync::atomic::AtomicU32,
}

impl uet_tests::BarHook for LateEnable {
    fn read32(&self, offset: u32, value: u32) -> u32 {
        use std::sync::atomic::Ordering;
        let status = uet_regs::DevStatus::from_bits(value);
        if offset != uet_regs::DEV_STATUS.offset() || !status.enabled() {
            return value;
        }
        let left = self.hide.load(Ordering::SeqCst);
        if left == 0 {
            return value;
        }
        if left != u32::MAX {
            self.hide.store(left - 1, Ordering::SeqCst);
        }
        status.with_enabled(false).into_bits()
    }
}

fn late_enable(
    function: &uet_sim::SimFunction,
    hide: u32,
) -> Arc<uet_tests::HookedDevice<LateEnable>> {
    Arc::new(uet_tests::HookedDevice {
        inner: uet_driver::backend::sim::SimDevice::new(function.clone()),
        hook: LateEnable { hide: hide.into() },
    })
}

/// `DEV_STATUS.enabled` follows `DEV_CTRL.enable` when the device has started its queues,
/// which may be a little after the write: the open waits for it, as it waits for `ready`,
/// and a device that shows it a few reads late opens and works.
#[test]
fn a_device_that_reports_enabled_a_moment_late_is_opened() {
    let function = uet_sim::Fabric::new()
        .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(0)))
        .expect("add NIC");
    let nic = uet_driver::Nic::open(late_enable(&function, 3)).expect("open");
    assert_eq!(nic.identity().fabric_addr, uet_tests::nic_addr(0));
    let av = uet_tests::open_av(&nic, 7, 4, 0);
    drop(av);
}

/// A device that never reports `DEV_STATUS.enabled` (and no fatal error) fails the open
/// with a timeout that says so, not with a refusal naming a `FATAL_ERROR` of 0; the device
/// is left stopped, and the next open works.
#[test]
fn a_device_that_never_reports_enabled_fails_the_open_with_a_timeout() {
    let function = uet_sim::Fabric::new()
        .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(0)))
        .expect("add NIC");
    let device = late_enable(&function, u32::MAX);
    match uet_driver::Nic::open(device.clone()) {
        Err(e @ DriverError::NotEnabled { .. }) => {
            assert_eq!(e.errno(), FiErrno::FI_EIO);
            assert!(e.to_string().contains("DEV_STATUS.enabled"), "{e}");
        }
        Err(e) => panic!("expected the enable timeout, got {e:?}"),
        Ok(_) => panic!("the device never reported enabled"),
    }
    let status = device.inner.bar0().read(uet_regs::DEV_STATUS);
    assert!(!status.enabled(), "the device is stopped: {status:?}");
    let nic = uet_driver::Nic::open(Arc::new(uet_driver::backend::sim::SimDevice::new(function)))
        .expect("the next open");
    assert_eq!(nic.identity().fabric_addr, uet_tests::nic_addr(0));
}

/// A device hook that reports AV entries of `bytes` bytes in `CAP_AV.entry_bytes`.
struct EntryBytes(u8);

impl uet_tests::BarHook for EntryBytes {
    fn read32(&self, offset: u32, value: u32) -> u32 {
        if offset != uet_regs::CAP_AV.offset() {
            return value;
        }
        uet_regs::CapAv::from_bits(value)
            .with_entry_bytes(self.0)
            .into_bits()
    }
}

/// A NIC whose AV table holds entries of another size than the 64-byte entries the driver
/// writes is refused at open (`FI_EOPNOTSUPP`, naming both sizes), before any entry could be
/// written in a layout it does not read; the same NIC reporting 64 opens.
#[test]
fn a_nic_whose_av_entries_are_not_the_drivers_size_is_refused() {
    let function = uet_sim::Fabric::new()
        .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(0)))
        .expect("add NIC");
    for bytes in [0u8, 32, 128, 255] {
        let device = Arc::new(uet_tests::HookedDevice {
            inner: uet_driver::backend::sim::SimDevice::new(function.clone()),
            hook: EntryBytes(bytes),
        });
        match uet_driver::Nic::open(device) {
            Err(e) => {
                assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP, "{e}");
                let text = e.to_string();
                assert!(
                    text.contains(&format!("CAP_AV.entry_bytes is {bytes}")) && text.contains("64"),
                    "{text}"
                );
            }
            Ok(_) => panic!("a NIC with {bytes}-byte AV entries was opened"),
        }
    }
    let device = Arc::new(uet_tests::HookedDevice {
        inner: uet_driver::backend::sim::SimDevice::new(function),
        hook: EntryBytes(64),
    });
    let nic = uet_driver::Nic::open(device).expect("64-byte entries");
    drop(uet_tests::open_av(&nic, 7, 4, 0));
}

/// A device hook for a function removed while the driver reads its capabilities: from the
/// read of `CAP_AV` on, every read returns all ones.
#[derive(Default)]
struct RemovedAtCapabilities(std::sync::atomic::AtomicBool);

impl uet_tests::BarHook for RemovedAtCapabilities {
    fn read32(&self, offset: u32, value: u32) -> u32 {
        use std::sync::atomic::Ordering;
        if offset == uet_regs::CAP_AV.offset() {
            self.0.store(true, Ordering::SeqCst);
        }
        if self.0.load(Ordering::SeqCst) {
            u32::MAX
        } else {
            value
        }
    }

    fn read64(&self, _offset: u32, value: u64) -> u64 {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            u64::MAX
        } else {
            value
        }
    }
}

/// A function removed while the open reads its capabilities reads all ones there, so its AV
/// entries look like 255 bytes: the open reports the removal (`FI_ENODEV`), not an entry size
/// the driver does not support.
#[test]
fn a_function_removed_during_the_capability_reads_is_reported_gone() {
    let function = uet_sim::Fabric::new()
        .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(0)))
        .expect("add NIC");
    let device = Arc::new(uet_tests::HookedDevice {
        inner: uet_driver::backend::sim::SimDevice::new(function),
        hook: RemovedAtCapabilities::default(),
    });
    match uet_driver::Nic::open(device) {
        Err(e @ DriverError::DeviceGone) => assert_eq!(e.errno(), FiErrno::FI_ENODEV),
        Err(e) => panic!("expected the removal, got {e:?}"),
        Ok(_) => panic!("a removed function was opened"),
    }
}

/// A function reset under the driver is seen at the next admin command within a few
/// milliseconds, not after the admin timeout: the device is not enabled and `ADMIN_SQ_BASE`
/// no longer holds the admin ring. The command fails with `FI_EIO` naming the reset, the
/// AV's refused batch is rolled back, and every later command fails at once the same way
/// (none is left holding the scratch buffer, none waits for the timeout).
#[test]
fn a_function_reset_under_the_driver_is_reported_as_one() {
    let (_f, fns) = fabric(1);
    let function = fns[0].clone();
    let mut node = Node::new(function.clone(), 1, 8);
    let peer = |initiator| uet_tests::forged(node.ep.address(), |a| a.initiator = initiator);
    let (first, more) = (
        [peer(0x81), peer(0x82)].concat(),
        [peer(0x83), peer(0x84)].concat(),
    );
    assert_eq!(
        node.av.insert(&first, 2, None, 0).map_err(|e| e.errno),
        Ok(2)
    );
    // Far longer than the test takes: a command that waited for it would fail as timed out.
    node.nic.set_admin_timeout(Duration::from_secs(60));
    function.function_level_reset();

    let e = node.av.insert(&more, 2, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(e.message.contains("the function was reset"), "{e}");
    assert!(!e.message.contains("timed out"), "{e}");
    assert_eq!(
        node.av.len(),
        2,
        "the batch the NIC never took is rolled back"
    );
    assert_eq!(node.av.entries_in_doubt(), 0);

    // Later commands, with data (AV_READ through the scratch buffer) or without, fail at
    // once, not submitted.
    let e = node.av.verify_nic().unwrap_err();
    assert!(e.message.contains("the function was reset"), "{e}");
    match node
        .nic
        .admin_command(Command::EndpointDestroy { endpoint: 99 })
    {
        Err(e @ DriverError::FunctionReset { submitted, .. }) => {
            assert!(!submitted, "{e}");
            assert_eq!(e.errno(), FiErrno::FI_EIO);
            assert!(e.to_string().contains("opened again"), "{e}");
        }
        other => panic!("expected FunctionReset, got {other:?}"),
    }
}

/// A function reset under the driver and then enabled again by another driver, on admin
/// rings of its own in its own DMA memory (`ADMIN_SQ_BASE` holds another ring), is still seen
/// as reset: the next admin command fails with `FI_EIO` naming the reset within milliseconds,
/// not after the admin timeout, and a completion wait without end returns `FI_EIO`.
#[test]
fn a_function_reset_and_enabled_again_by_another_driver_is_reported_as_a_reset() {
    let (_f, fns) = fabric(1);
    let function = fns[0].clone();
    let mut node = Node::new(function.clone(), 1, 8);
    let peer = uet_tests::forged(node.ep.address(), |a| a.initiator = 0x81);
    // Longer than the test takes: a command that waited for it would fail as timed out.
    node.nic.set_admin_timeout(Duration::from_secs(60));
    function.function_level_reset();

    // The other driver: rings of 16 entries far above this driver's IOVAs, then enable.
    let other_rings = uet_driver::dma::DmaRegion::new_normal(8192, 0).unwrap();
    let other_sq = 1u64 << 40;
    function
        .dma_map(other_sq, 8192, other_rings.fd(), 0)
        .unwrap();
    let bar = node.nic.bar0();
    bar.write(uet_regs::ADMIN_SQ_BASE, other_sq);
    bar.write(uet_regs::ADMIN_CQ_BASE, other_sq + 4096);
    bar.write(
        uet_regs::ADMIN_QUEUE_SIZE,
        uet_regs::AdminQueueSize::new()
            .with_sq_log2(4)
            .with_cq_log2(4),
    );
    bar.write(DEV_CTRL, DevCtrl::new().with_enable(true));
    assert!(bar.read(uet_regs::DEV_STATUS).enabled());

    let e = node.av.insert(&peer, 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(e.message.contains("the function was reset"), "{e}");
    assert_eq!(node.av.len(), 0, "the refused insert is rolled back");
    match node
        .nic
        .admin_command(Command::EndpointDestroy { endpoint: 99 })
    {
        Err(e @ DriverError::FunctionReset { .. }) => assert_eq!(e.errno(), FiErrno::FI_EIO),
        other => panic!("expected FunctionReset, got {other:?}"),
    }

    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let ep = &mut node.ep;
        s.spawn(move || {
            let _ = tx.send(ep.cq_sread(None).map(|ev| ev.context));
        });
        // A generous bound, only so that a wait without end fails the test.
        let got = rx.recv_timeout(Duration::from_secs(60));
        assert_eq!(got, Ok(Err(FiErrno::FI_EIO)));
    });
}

/// DMA memory held back for a command in doubt (an endpoint whose ENDPOINT_DESTROY timed out:
/// its rings and the receive buffer posted to it) is handed back to no one while the function
/// runs, and released after the reset the Nic's drop makes: the pool gets its buffer back,
/// and the device, its memory all unmapped, opens again.
#[test]
fn memory_kept_for_a_command_in_doubt_is_released_with_the_nic() {
    let (_f, fns) = fabric(1);
    let device: Arc<dyn Device> =
        Arc::new(uet_driver::backend::sim::SimDevice::new(fns[0].clone()));
    let nic = uet_driver::Nic::open(device.clone()).unwrap();
    nic.set_admin_timeout(Duration::from_millis(20));
    let pool = uet_driver::DmaPool::new(&nic, 256, 4).unwrap();
    let mut ep = nic
        .endpoint(uet_driver::EndpointAttr::default(), None)
        .unwrap();
    ep.post_recv(pool.alloc().unwrap(), 1).unwrap();
    assert_eq!(pool.available(), 3);

    // The function stops answering: the endpoint's destroy times out.
    nic.bar0().write(DEV_CTRL, DevCtrl::new());
    drop(ep);
    assert_eq!(
        pool.available(),
        3,
        "the buffer posted to the endpoint is not handed back while the function runs"
    );
    assert_eq!(
        uet_driver::Nic::open(device.clone())
            .err()
            .map(|e| e.errno()),
        Some(FiErrno::FI_EBUSY),
        "the Nic still runs the device"
    );

    drop(nic);
    assert_eq!(
        pool.available(),
        4,
        "the buffer is back once the Nic's drop has reset the function"
    );
    drop(pool);
    let nic = uet_driver::Nic::open(device).expect("the device opens again");
    let ep = nic.endpoint(uet_driver::EndpointAttr::default(), None);
    assert!(ep.is_ok(), "{:?}", ep.err());
}

/// A buffer filled from parts (an iovec list) holds them one after another; parts that do
/// not fit together are refused and the buffer keeps what it held.
#[test]
fn a_buffer_gathers_parts_in_order_and_refuses_parts_that_do_not_fit() {
    let (_fabric, fns) = fabric(1);
    let nic = uet_tests::open_nic(&fns[0]);
    let pool = uet_driver::DmaPool::new(&nic, 64, 1).unwrap();
    let mut buf = pool.alloc().unwrap();
    buf.fill_parts(&[b"abc", b"", b"defg"]).unwrap();
    assert_eq!(buf.to_vec().unwrap(), b"abcdefg");
    let big = [7u8; 40];
    let err = buf.fill_parts(&[&big, &big]).unwrap_err();
    assert!(matches!(err, DriverError::InvalidArgument(_)), "{err}");
    assert_eq!(buf.to_vec().unwrap(), b"abcdefg");
    buf.fill_parts(&[]).unwrap();
    assert!(buf.is_empty());
}
