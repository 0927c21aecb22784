//! Relative and absolute addressing, and the PIDonFEP and resource-index allocators.
//!
//! Relative: JobID scopes PIDonFEP. Absolute: PIDonFEP alone names the endpoint and JobID
//! only authorises it. The mode is chosen per endpoint, advertised in its address, and the
//! sender's SES REL flag follows it. PIDonFEP exhaustion is FI_ENOSPC naming CAP_PID_ON_FEP,
//! destroy releases, and resource index 0 is never assigned.

use std::sync::Arc;
use uet_av::FiErrno;
use uet_driver::backend::sim::SimDevice;
use uet_driver::{DmaPool, Endpoint, EndpointAttr, Nic};
use uet_fwif::address::{flags, AddressingMode};
use uet_fwif::ReturnCode;
use uet_regs::{RX_BAD_JOB_ID, RX_BAD_PID};
use uet_sim::{pcap, Fabric, NicConfig};
use uet_tests::{fabric, forged, nic_addr, open_av, open_nic, poll_one};

fn attr(job_id: u32, mode: AddressingMode) -> EndpointAttr {
    EndpointAttr {
        job_id,
        mode,
        ..EndpointAttr::default()
    }
}

fn send(ep: &mut Endpoint, pool: &DmaPool, dest: u64) -> Option<ReturnCode> {
    let mut b = pool.alloc().unwrap();
    b.fill(b"addressed").unwrap();
    ep.post_send(dest, b, 1, 0).unwrap();
    poll_one(ep)
        .expect("a completion")
        .error
        .map(|e| e.return_code.expect("a remote refusal"))
}

#[test]
fn absolute_finds_by_pid_and_authorises_by_job() {
    let path = std::env::temp_dir().join(format!("uet-abs-{}.pcap", std::process::id()));
    let (fabric, fns) = fabric(2);
    let (na, nb) = (open_nic(&fns[0]), open_nic(&fns[1]));
    // On B's NIC: an absolute endpoint of job 1 and a relative one of job 2.
    let av_b = open_av(&nb, 1, 4, 0);
    let mut abs = nb
        .endpoint(attr(1, AddressingMode::Absolute), Some(&av_b))
        .unwrap();
    let rel = nb
        .endpoint(attr(2, AddressingMode::Relative), Some(&av_b))
        .unwrap();
    let abs_bytes = abs.address().to_bytes().unwrap();
    assert_ne!(abs_bytes[1] & flags::ABSOLUTE_ADDRESSING, 0, "advertised");
    assert_eq!(
        rel.address().to_bytes().unwrap()[1] & flags::ABSOLUTE_ADDRESSING,
        0
    );
    let pool_b = DmaPool::new(&nb, 4096, 4).unwrap();
    abs.post_recv(pool_b.alloc().unwrap(), 1).unwrap();

    // A sender of job 1 reaches the absolute endpoint; its request has REL clear.
    let mut av1 = open_av(&na, 1, 8, 0);
    let mut s1 = na
        .endpoint(attr(1, AddressingMode::Relative), Some(&av1))
        .unwrap();
    let pool = DmaPool::new(&na, 4096, 8).unwrap();
    let mut fi = [0u64; 1];
    av1.insert(&abs_bytes, 1, Some(&mut fi), 0).unwrap();
    fabric.capture_to_file(&path).unwrap();
    assert_eq!(send(&mut s1, &pool, fi[0]), None);
    fabric.stop_capture();
    let cap = pcap::read_file(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let ses_flags = cap.records[0].data[14 + 20 + 8 + 12 + 1];
    assert_eq!(ses_flags & uet_sim::ses::FLAG_REL, 0, "absolute: REL clear");
    assert!(poll_one(&mut abs).unwrap().error.is_none());

    // A sender of job 2 (its AV stamps job 2): absolute request → found by PIDonFEP, not
    // authorised → RC_BAD_JOB_ID. Relative request (REL set) for the same PIDonFEP: job 2
    // scopes the lookup and has no such PIDonFEP → RC_BAD_PID.
    let mut av2 = open_av(&na, 2, 8, 0);
    let mut s2 = na
        .endpoint(attr(2, AddressingMode::Relative), Some(&av2))
        .unwrap();
    let mut fa = [0u64; 1];
    av2.insert(&abs_bytes, 1, Some(&mut fa), 0).unwrap();
    assert_eq!(send(&mut s2, &pool, fa[0]), Some(ReturnCode::BadJobId));
    assert_eq!(fns[1].counter(RX_BAD_JOB_ID), 1);
    let as_relative = forged(abs.address(), |a| a.mode = AddressingMode::Relative);
    let mut fr = [0u64; 1];
    av2.insert(&as_relative, 1, Some(&mut fr), 0).unwrap();
    assert_eq!(send(&mut s2, &pool, fr[0]), Some(ReturnCode::BadPid));
    assert_eq!(fns[1].counter(RX_BAD_PID), 1);
    // A relative endpoint cannot be named without its JobID scoping the PIDonFEP.
    let rel_as_abs = forged(rel.address(), |a| a.mode = AddressingMode::Absolute);
    let mut fx = [0u64; 1];
    av2.insert(&rel_as_abs, 1, Some(&mut fx), 0).unwrap();
    assert_eq!(send(&mut s2, &pool, fx[0]), Some(ReturnCode::BadPid));
    assert!(poll_one(&mut abs).is_none());
    drop(s1);
}

fn nic_with(cfg: impl FnOnce(&mut NicConfig)) -> (Fabric, Nic) {
    let fabric = Fabric::new();
    let mut c = NicConfig::new(nic_addr(0));
    cfg(&mut c);
    let f = fabric.add_nic(c).unwrap();
    let nic = Nic::open(Arc::new(SimDevice::new(f))).unwrap();
    (fabric, nic)
}

#[test]
fn pid_exhaustion_is_enospc_naming_cap_pid_on_fep_and_destroy_releases() {
    let (_f, nic) = nic_with(|c| {
        c.pid_first = 40;
        c.pid_count = 3;
    });
    let av = open_av(&nic, 1, 4, 0);
    let mut eps: Vec<Endpoint> = (0..3)
        .map(|_| nic.endpoint(EndpointAttr::default(), Some(&av)).unwrap())
        .collect();
    let pids: Vec<u16> = eps.iter().map(Endpoint::pid_on_fep).collect();
    assert_eq!(pids, [40, 41, 42]);
    let e = nic
        .endpoint(EndpointAttr::default(), Some(&av))
        .err()
        .unwrap();
    assert_eq!(e.errno(), FiErrno::FI_ENOSPC);
    assert!(e.to_string().contains("CAP_PID_ON_FEP"), "{e}");
    // Passive endpoints draw from the same PIDonFEP space.
    let eq = uet_driver::EventQueue::open(Default::default()).unwrap();
    let e = nic
        .passive_endpoint(EndpointAttr::default(), &eq)
        .err()
        .unwrap();
    assert_eq!(e.errno(), FiErrno::FI_ENOSPC);
    // Destroy releases: the freed PIDonFEP is handed out again.
    eps.remove(1);
    let again = nic.endpoint(EndpointAttr::default(), Some(&av)).unwrap();
    assert_eq!(again.pid_on_fep(), 41);
}

#[test]
fn resource_index_zero_is_never_assigned_and_exhaustion_is_enospc() {
    let (_f, nic) = nic_with(|c| {
        c.ri_space = 9;
        c.ri_per_endpoint = 4;
    });
    let av = open_av(&nic, 1, 4, 0);
    let ri4 = EndpointAttr {
        ri_count: 4,
        ..EndpointAttr::default()
    };
    let a = nic.endpoint(ri4, Some(&av)).unwrap();
    let b = nic.endpoint(ri4, Some(&av)).unwrap();
    assert_eq!(a.resource_indices(), 1..5, "index 0 is the control channel");
    assert_eq!(b.resource_indices(), 5..9);
    let e = nic.endpoint(ri4, Some(&av)).err().unwrap();
    assert_eq!(e.errno(), FiErrno::FI_ENOSPC);
    assert!(e.to_string().contains("CAP_RESOURCE_INDEX"), "{e}");
    drop(a);
    let c = nic.endpoint(ri4, Some(&av)).unwrap();
    assert_eq!(c.resource_indices(), 1..5);
}

#[test]
fn resource_index_zero_is_the_control_channel_only() {
    // Only a SEND posted with the control flag goes to index 0: an application send through
    // an entry whose range starts at 0 is refused by the sending NIC (FI_EADDRNOTAVAIL), and
    // nothing reaches the target, whether it has a control channel or not.
    let (_f, fns) = fabric(2);
    let (na, nb) = (open_nic(&fns[0]), open_nic(&fns[1]));
    let mut av = open_av(&na, 1, 4, 0);
    let mut s = na
        .endpoint(attr(1, AddressingMode::Relative), Some(&av))
        .unwrap();
    let av_b = open_av(&nb, 1, 4, 0);
    let mut t = nb
        .endpoint(attr(1, AddressingMode::Relative), Some(&av_b))
        .unwrap();
    let pool_b = DmaPool::new(&nb, 4096, 2).unwrap();
    t.post_recv(pool_b.alloc().unwrap(), 1).unwrap();
    // An address forged to start at index 0.
    let zero = forged(t.address(), |a| {
        a.ri_start = 0;
        a.ri_count = 1;
    });
    let mut fi = [0u64; 1];
    av.insert(&zero, 1, Some(&mut fi), 0).unwrap();
    let pool = DmaPool::new(&na, 4096, 2).unwrap();
    let mut b = pool.alloc().unwrap();
    b.fill(b"addressed").unwrap();
    s.post_send(fi[0], b, 1, 0).unwrap();
    let err = poll_one(&mut s)
        .expect("a completion")
        .error
        .expect("refused");
    assert_eq!(err.errno, uet_av::FiErrno::FI_EADDRNOTAVAIL);
    assert_eq!(err.return_code, None, "refused before anything was sent");
    assert!(poll_one(&mut t).is_none());
}

/// A target tells senders apart by (fabric address, JobID, initiator): for FI_SOURCE and for
/// the identity of their messages. So no two live endpoints of one JobID on a NIC share an
/// initiator id (interface 1.11): the second is refused with `FI_EADDRINUSE`, nothing of it
/// is left, and the id is free again once the first endpoint is gone. Another job's rank may
/// have the same id. A derived id passes over one an endpoint numbered by its caller holds.
#[test]
fn no_two_endpoints_of_a_job_on_a_nic_share_an_initiator_id() {
    let (_f, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let av = open_av(&nic, 0x42, 8, 0);
    let ranked = |job_id, rank| EndpointAttr {
        job_id,
        initiator: Some(rank),
        ..EndpointAttr::default()
    };
    let first = nic.endpoint(ranked(0x42, 7), Some(&av)).unwrap();
    let Err(e) = nic.endpoint(ranked(0x42, 7), Some(&av)) else {
        panic!("a second endpoint of JobID 0x42 with initiator id 7");
    };
    assert_eq!(e.errno(), FiErrno::FI_EADDRINUSE, "{e}");
    assert!(e.to_string().contains("initiator id 0x7"), "{e}");
    let other_job = open_av(&nic, 0x43, 8, 0);
    let rank_7_of_another_job = nic.endpoint(ranked(0x43, 7), Some(&other_job)).unwrap();
    assert_eq!(
        rank_7_of_another_job.address().pid_on_fep,
        first.address().pid_on_fep + 1,
        "the refused endpoint took no PIDonFEP"
    );
    drop(first);
    let again = nic.endpoint(ranked(0x42, 7), Some(&av)).unwrap();
    assert_eq!(again.address().initiator, 7);

    // Derived ids count up; one taken by a numbered endpoint is passed over.
    let derived = |nic: &Nic| {
        nic.endpoint(attr(0x42, AddressingMode::Relative), Some(&av))
            .unwrap()
    };
    let d1 = derived(&nic);
    let taken = d1.address().initiator + 1;
    let numbered = nic.endpoint(ranked(0x42, taken), Some(&av)).unwrap();
    let d2 = derived(&nic);
    assert_eq!(d2.address().initiator, taken + 1);
    drop((rank_7_of_another_job, numbered, d2, d1, again));
}

/// fi_getname with a buffer shorter than the address (fi_cm(3)): the address truncated to
/// the buffer, `FI_ETOOSMALL`, and the length the whole address needs; nothing past `*len`.
#[test]
fn getname_truncates_into_a_short_buffer_and_gives_the_length_it_needs() {
    let (_f, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let av = open_av(&nic, 1, 4, 0);
    let ep = nic
        .endpoint(attr(1, AddressingMode::Relative), Some(&av))
        .unwrap();
    let whole = ep.address().to_bytes().unwrap();
    let mut buf = [0xEE; 40];
    let mut len = 10;
    let e = ep.getname(&mut buf, &mut len).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ETOOSMALL);
    assert_eq!(len, whole.len());
    assert_eq!(buf[..10], whole[..10], "the address, truncated");
    assert!(buf[10..].iter().all(|&b| b == 0xEE), "nothing past *len");
    let mut len = buf.len();
    ep.getname(&mut buf, &mut len).unwrap();
    assert_eq!(buf[..len], whole[..]);
}
