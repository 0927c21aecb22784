//! The driver on every host interface it drives: NICs of interface 1.7 to the current one
//! (the simulator emulates each), and the refusal of a NIC older than 1.7 or of another major
//! version.
//!
//! On each version the whole AV path runs (single inserts through the AV write window where
//! the NIC has one and AV_WRITE where it does not, batched inserts through AV_WRITE_PEERS
//! where the NIC has it, removal, reinsert, auth keys), messages cross in both directions, and a peer that takes one MTU is handled as that
//! version can: refused at the sender's NIC from 1.10, refused by the peer before. Throughout,
//! the driver touches no register its NIC lacks: `BAD_REGISTER_ACCESSES` stays 0.

use std::sync::Arc;
use uet_av::{job_id_to_auth_key, AvAttr, FiErrno, NicAvTable, FI_AUTH_KEY, FI_AV_AUTH_KEY};
use uet_driver::backend::sim::SimDevice;
use uet_driver::nic::REQUIRED_INTERFACE_MINOR;
use uet_driver::uet_fwif::NicAvEntry;
use uet_driver::{DmaPool, DriverError, Nic};
use uet_fwif::datapath::LocalStatus;
use uet_fwif::ReturnCode;
use uet_regs::{
    since, BAD_REGISTER_ACCESSES, INTERFACE_MINOR, REVISION, TX_MSG_TOO_LONG, TX_PACKETS,
};
use uet_sim::{Fabric, NicConfig, OLDEST_INTERFACE_MINOR};
use uet_tests::{nic_addr, pattern, BarHook, HookedDevice, Node};

const JOB: u32 = 0x0007_1000;

/// Two nodes whose NICs implement interface 1.`minor`, B's taking messages of one MTU when
/// `b_one_mtu`; each in the other's AV at fi_addr 0.
fn pair_at(minor: u8, b_one_mtu: bool) -> (Fabric, Node, Node) {
    let fabric = Fabric::new();
    let cfg = |i: usize| {
        let mut c = NicConfig::new(nic_addr(i));
        c.interface_minor = minor;
        if b_one_mtu && i == 1 {
            c.max_msg = u32::from(c.mtu);
        }
        c
    };
    let fa = fabric.add_nic(cfg(0)).expect("add NIC");
    let fb = fabric.add_nic(cfg(1)).expect("add NIC");
    let mut a = Node::new(fa, JOB, 64);
    let mut b = Node::new(fb, JOB, 64);
    assert_eq!(a.insert(&b.addr()), 0);
    assert_eq!(b.insert(&a.addr()), 0);
    (fabric, a, b)
}

fn nic_entry(node: &mut Node, index: u32) -> NicAvEntry {
    let mut e = [NicAvEntry::INVALID; 1];
    node.av
        .nic_mut()
        .read_entries(index, &mut e)
        .expect("AV_READ");
    e[0]
}

#[test]
fn every_interface_the_driver_drives_runs_the_av_and_the_datapath() {
    assert_eq!(REQUIRED_INTERFACE_MINOR, OLDEST_INTERFACE_MINOR);
    for minor in REQUIRED_INTERFACE_MINOR..=INTERFACE_MINOR {
        let (_fabric, mut a, mut b) = pair_at(minor, false);
        assert_eq!(a.nic.identity().interface_minor, minor);

        // Single inserts (the window from 1.8, AV_WRITE before), a batch, remove, reinsert.
        let peer = b.addr();
        let mut one = [0u64; 1];
        assert_eq!(a.av.insert(&peer, 1, Some(&mut one), 0).unwrap(), 1);
        assert_eq!(one[0], 1, "1.{minor}");
        let batch: Vec<u8> = std::iter::repeat_n(peer, 20).flatten().collect();
        let mut many = [0u64; 20];
        assert_eq!(a.av.insert(&batch, 20, Some(&mut many), 0).unwrap(), 20);
        assert_eq!(many.to_vec(), (2..22).collect::<Vec<_>>(), "1.{minor}");
        // New peers at consecutive indices: one AV_WRITE_PEERS from 1.13, AV_WRITE before.
        assert_eq!(
            a.function.debug_counters().av_write_peers_entries,
            if minor >= since::AV_WRITE_PEERS {
                20
            } else {
                0
            },
            "1.{minor}"
        );
        a.av.remove(&[1, 5, 21], 0).unwrap();
        assert!(
            !nic_entry(&mut a, 5).is_valid(),
            "1.{minor}: removed on the NIC"
        );
        assert_eq!(a.av.insert(&peer, 1, Some(&mut one), 0).unwrap(), 1);
        assert_eq!(one[0], 1, "1.{minor}: lowest unused index again");
        assert_eq!(nic_entry(&mut a, 1).peer_address(), Some(*b.ep.address()));
        assert!(a.av.verify_nic().unwrap().is_empty(), "1.{minor}");

        // Messages both ways, to entries written by either path.
        b.post_recvs(3);
        for (dest, context) in [(0, 1), (1, 2), (7, 3)] {
            a.send(dest, &pattern(100, context as u8), context);
            let sent = a.next_completion().expect("send completion");
            assert!(sent.error.is_none(), "1.{minor}: {:?}", sent.error);
            let got = b.next_completion().expect("receive completion");
            assert!(got.error.is_none(), "1.{minor}: {:?}", got.error);
            assert_eq!(
                got.buffer.unwrap().to_vec().unwrap(),
                pattern(100, context as u8)
            );
        }
        a.post_recvs(1);
        b.send(0, b"back", 9);
        assert!(b.next_completion().unwrap().error.is_none(), "1.{minor}");
        assert_eq!(
            a.next_completion()
                .unwrap()
                .buffer
                .unwrap()
                .to_vec()
                .unwrap(),
            b"back"
        );

        // fi_cancel of a posted receive: RECV_CANCEL from 1.14, FI_ENOSYS before (the
        // receive stays posted and takes the next message).
        a.post_recvs(1);
        let cancelled = a.ep.cancel_recv(1000).map_err(|e| e.errno());
        if minor >= since::RECV_CANCEL {
            assert_eq!(cancelled, Ok(()), "1.{minor}");
            let ev = a
                .next_completion()
                .expect("the cancelled receive completes");
            assert_eq!(
                ev.error.map(|e| e.errno),
                Some(FiErrno::FI_ECANCELED),
                "1.{minor}"
            );
        } else {
            assert_eq!(cancelled, Err(FiErrno::FI_ENOSYS), "1.{minor}");
            b.send(0, b"kept", 10);
            assert!(b.next_completion().unwrap().error.is_none(), "1.{minor}");
            let got = a.next_completion().expect("the receive is still posted");
            assert_eq!(got.context, 1000, "1.{minor}");
        }

        // The counters the driver lists are the ones the NIC has.
        let names: Vec<&str> = a.nic.counters().iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names.contains(&"AV_WRITE_DROPS"),
            minor >= since::AV_WRITE_WINDOW,
            "1.{minor}"
        );
        assert_eq!(
            names.contains(&"TX_MSG_TOO_LONG"),
            minor >= since::AV_ENTRY_MAX_MSG_MTU,
            "1.{minor}"
        );
        assert!(names.contains(&"TX_PACKETS"));

        for node in [&a, &b] {
            assert_eq!(node.counter(BAD_REGISTER_ACCESSES), 0, "1.{minor}");
        }
    }
}

#[test]
fn auth_keys_are_added_and_removed_on_every_interface() {
    for minor in REQUIRED_INTERFACE_MINOR..=INTERFACE_MINOR {
        let fabric = Fabric::new();
        let mut cfg = NicConfig::new(nic_addr(0));
        cfg.interface_minor = minor;
        let function = fabric.add_nic(cfg).unwrap();
        let nic = Nic::open(Arc::new(SimDevice::new(function.clone()))).unwrap();
        let mut av = nic
            .open_av(AvAttr {
                count: 8,
                job_id: JOB,
                auth_key_size: FI_AV_AUTH_KEY,
                ..AvAttr::default()
            })
            .unwrap();
        // AUTH_KEY_REMOVE with the owner check from 1.9, a body of zeros before: a body the
        // NIC does not define would be refused (InvalidField) and the key would stay.
        let k = av.insert_auth_key(&job_id_to_auth_key(0x42), 0).unwrap();
        av.remove(&[k], FI_AUTH_KEY).unwrap();
        let k2 = av.insert_auth_key(&job_id_to_auth_key(0x43), 0).unwrap();
        assert!(av.verify_nic().unwrap().is_empty(), "1.{minor}");
        av.remove(&[k2], FI_AUTH_KEY).unwrap();
        assert_eq!(
            av.remove(&[k2], FI_AUTH_KEY).unwrap_err().errno,
            FiErrno::FI_EINVAL,
            "1.{minor}: removed once"
        );
        assert!(av.verify_nic().unwrap().is_empty(), "1.{minor}");
        assert_eq!(function.counter(BAD_REGISTER_ACCESSES), 0, "1.{minor}");
    }
}

/// From 1.10 the sender's NIC refuses a message longer than the MTU to a one-MTU peer
/// (`FI_EMSGSIZE`, nothing sent). Before, the entry cannot carry the limit (the NIC would
/// refuse the entry), so the message crosses the wire and the peer answers RC_TOO_LONG: the
/// sender still gets `FI_EMSGSIZE`, and the receiver still gets nothing.
#[test]
fn a_one_mtu_peer_is_refused_where_the_interface_can_and_by_the_peer_before() {
    for minor in REQUIRED_INTERFACE_MINOR..=INTERFACE_MINOR {
        let (_fabric, mut a, mut b) = pair_at(minor, true);
        assert!(b.ep.address().max_msg_mtu);
        assert!(
            a.av.address(0).unwrap().max_msg_mtu,
            "1.{minor}: the mirror keeps it"
        );
        let on_nic = nic_entry(&mut a, 0);
        let nic_knows = minor >= since::AV_ENTRY_MAX_MSG_MTU;
        assert_eq!(on_nic.max_msg_mtu(), nic_knows, "1.{minor}: {on_nic:?}");
        assert!(a.av.verify_nic().unwrap().is_empty(), "1.{minor}");

        let mtu = a.ep.mtu();
        let pool = DmaPool::new(&a.nic, 2 * mtu, 2).unwrap();
        let rx_pool = DmaPool::new(&b.nic, 2 * mtu, 2).unwrap();
        b.ep.post_recv(rx_pool.alloc().unwrap(), 50)
            .map_err(|(e, _)| e)
            .unwrap();
        let tx0 = a.counter(TX_PACKETS);
        let mut buf = pool.alloc().unwrap();
        buf.fill(&pattern(mtu + 1, 4)).unwrap();
        a.ep.post_send(0, buf, 1, 0).map_err(|(e, _)| e).unwrap();
        let err = a.next_completion().expect("send completion").error;
        let err = err.unwrap_or_else(|| panic!("1.{minor}: the long send succeeded"));
        if nic_knows {
            assert_eq!(err.errno, FiErrno::FI_EMSGSIZE);
            assert_eq!(a.counter(TX_MSG_TOO_LONG), 1);
            assert_eq!(a.counter(TX_PACKETS), tx0, "nothing sent");
        } else {
            assert!(
                a.counter(TX_PACKETS) > tx0,
                "1.{minor}: it crossed the wire"
            );
            // The peer answers RC_TOO_LONG: the same errno, reported as the target's.
            assert_eq!(
                (err.errno, err.local, err.return_code),
                (
                    FiErrno::FI_EMSGSIZE,
                    LocalStatus::Remote,
                    Some(ReturnCode::TooLong)
                ),
                "1.{minor}"
            );
        }
        assert!(
            b.next_completion().is_none(),
            "1.{minor}: nothing delivered"
        );

        // One MTU goes on every version.
        let mut buf = pool.alloc().unwrap();
        buf.fill(&pattern(mtu, 5)).unwrap();
        a.ep.post_send(0, buf, 2, 0).map_err(|(e, _)| e).unwrap();
        assert!(a.next_completion().unwrap().error.is_none(), "1.{minor}");
        let got = b.next_completion().expect("receive completion");
        assert_eq!(got.buffer.unwrap().to_vec().unwrap(), pattern(mtu, 5));
        for node in [&a, &b] {
            assert_eq!(node.counter(BAD_REGISTER_ACCESSES), 0, "1.{minor}");
        }
    }
}

/// A device that reports another interface version in `REVISION`.
struct Revision(u32);

impl BarHook for Revision {
    fn read32(&self, offset: u32, value: u32) -> u32 {
        if offset == REVISION.offset() {
            self.0
        } else {
            value
        }
    }
}

#[test]
fn a_nic_older_than_the_driver_or_of_another_major_version_is_refused() {
    let fabric = Fabric::new();
    let function = fabric.add_nic(NicConfig::new(nic_addr(0))).unwrap();
    let reported = |major: u8, minor: u8| {
        let rev = uet_regs::Revision::new()
            .with_revision(1)
            .with_interface_major(major)
            .with_interface_minor(minor);
        Arc::new(HookedDevice {
            inner: SimDevice::new(function.clone()),
            hook: Revision(rev.into_bits()),
        })
    };
    let older = REQUIRED_INTERFACE_MINOR - 1;
    match Nic::open(reported(uet_regs::INTERFACE_MAJOR, older)) {
        Err(e @ DriverError::InterfaceTooOld { device, required }) => {
            assert_eq!((device, required), (older, REQUIRED_INTERFACE_MINOR));
            assert_eq!(e.errno(), FiErrno::FI_ENODEV);
            assert!(e.to_string().contains(&format!("{older}")), "{e}");
        }
        other => panic!("a 1.{older} NIC was not refused: {:?}", other.err()),
    }
    match Nic::open(reported(uet_regs::INTERFACE_MAJOR + 1, 0)) {
        Err(DriverError::InterfaceVersion { device, driver }) => {
            assert_eq!((device, driver), (uet_regs::INTERFACE_MAJOR + 1, 1));
        }
        other => panic!("another major version was not refused: {:?}", other.err()),
    }
    // Refused before the function was reset or enabled: the NIC opens normally afterwards.
    let nic = Nic::open(Arc::new(SimDevice::new(function.clone()))).unwrap();
    assert_eq!(nic.identity().interface_minor, INTERFACE_MINOR);
}

/// A NIC of another major version is no device this driver can drive, as one older than it
/// is not: both are refused with `FI_ENODEV`, a newer major as an older one.
#[test]
fn a_nic_of_another_major_version_is_refused_with_fi_enodev() {
    let fabric = Fabric::new();
    let function = fabric.add_nic(NicConfig::new(nic_addr(0))).unwrap();
    for major in [uet_regs::INTERFACE_MAJOR - 1, uet_regs::INTERFACE_MAJOR + 1] {
        let rev = uet_regs::Revision::new()
            .with_revision(1)
            .with_interface_major(major)
            .with_interface_minor(INTERFACE_MINOR);
        let device = Arc::new(HookedDevice {
            inner: SimDevice::new(function.clone()),
            hook: Revision(rev.into_bits()),
        });
        match Nic::open(device) {
            Err(e @ DriverError::InterfaceVersion { .. }) => {
                assert_eq!(e.errno(), FiErrno::FI_ENODEV, "v{major}: {e}");
                assert!(e.to_string().contains(&format!("v{major}.")), "{e}");
            }
            other => panic!("a v{major} NIC was not refused: {:?}", other.err()),
        }
    }
}

/// ENDPOINT_CREATE refuses an initiator id in use by an endpoint of the same JobID from
/// interface 1.11 on; a NIC of an older interface accepts it, as it always did.
#[test]
fn a_duplicate_initiator_is_refused_from_interface_1_11() {
    for minor in [since::UNIQUE_INITIATORS - 1, since::UNIQUE_INITIATORS] {
        let fabric = Fabric::new();
        let mut cfg = NicConfig::new(nic_addr(0));
        cfg.interface_minor = minor;
        let node = Node::new(fabric.add_nic(cfg).expect("add NIC"), JOB, 4);
        let second = node.nic.endpoint(
            uet_driver::EndpointAttr {
                job_id: JOB,
                initiator: Some(node.ep.address().initiator),
                ..uet_driver::EndpointAttr::default()
            },
            Some(&node.av),
        );
        match second {
            Ok(_) => assert!(minor < since::UNIQUE_INITIATORS, "1.{minor}"),
            Err(e) => {
                assert!(minor >= since::UNIQUE_INITIATORS, "1.{minor}: {e}");
                assert_eq!(e.errno(), FiErrno::FI_EADDRINUSE);
            }
        }
    }
}
