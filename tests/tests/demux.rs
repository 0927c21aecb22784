//! The receiving NIC demultiplexes by JobID, PIDonFEP and resource index, and rejects the rest
//! with the UET return code, a counter, and an error completion at the sender.

use uet_av::FiErrno;
use uet_fwif::datapath::LocalStatus;
use uet_fwif::ReturnCode;
use uet_regs::{RX_BAD_INDEX, RX_BAD_JOB_ID, RX_BAD_PID, RX_PACKETS};
use uet_tests::{fabric, forged, Node};

fn expect_rejected(sender: &mut Node, target: &mut Node, rc: ReturnCode, errno: FiErrno) {
    let ev = sender
        .next_completion()
        .expect("the sender gets a completion");
    let err = ev.error.expect("an error completion");
    assert_eq!(err.local, LocalStatus::Remote);
    assert_eq!(err.return_code, Some(rc));
    assert_eq!(err.errno, errno);
    assert!(
        target.next_completion().is_none(),
        "nothing reaches the target's buffers"
    );
}

#[test]
fn wrong_job_id_is_rejected_and_counted() {
    let (_f, fns) = fabric(2);
    let mut it = fns.into_iter();
    // The sender's AV stamps job 2 into its entries; the target endpoint belongs to job 1.
    let mut sender = Node::with_av_job(it.next().unwrap(), 2, 2, 4);
    let mut target = Node::new(it.next().unwrap(), 1, 4);
    target.post_recvs(1);
    let k = sender.insert(&target.addr());
    sender.send(k, b"cross-job", 1);
    expect_rejected(
        &mut sender,
        &mut target,
        ReturnCode::BadJobId,
        FiErrno::FI_EACCES,
    );
    assert_eq!(target.counter(RX_BAD_JOB_ID), 1);
    assert_eq!(target.counter(RX_PACKETS), 0);
}

#[test]
fn wrong_pid_on_fep_is_rejected_and_counted() {
    let (_f, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut sender = Node::new(it.next().unwrap(), 1, 4);
    let mut target = Node::new(it.next().unwrap(), 1, 4);
    target.post_recvs(1);
    let bad = forged(target.ep.address(), |a| a.pid_on_fep += 100);
    let k = sender.insert(&bad);
    sender.send(k, b"no such process", 1);
    expect_rejected(
        &mut sender,
        &mut target,
        ReturnCode::BadPid,
        FiErrno::FI_EADDRNOTAVAIL,
    );
    assert_eq!(target.counter(RX_BAD_PID), 1);
}

#[test]
fn out_of_range_resource_index_is_rejected_and_counted() {
    let (_f, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut sender = Node::new(it.next().unwrap(), 1, 4);
    let mut target = Node::new(it.next().unwrap(), 1, 4);
    target.post_recvs(1);
    let end = target.ep.resource_indices().end;
    let bad = forged(target.ep.address(), |a| {
        a.ri_start = end + 10;
        a.ri_count = 1;
    });
    let k = sender.insert(&bad);
    sender.send(k, b"no such resource", 1);
    expect_rejected(
        &mut sender,
        &mut target,
        ReturnCode::BadIndex,
        FiErrno::FI_EADDRNOTAVAIL,
    );
    assert_eq!(target.counter(RX_BAD_INDEX), 1);

    // The same target still accepts correctly addressed traffic.
    let good = sender.insert(&target.addr());
    sender.send(good, b"fine", 2);
    assert!(sender.next_completion().unwrap().error.is_none());
    assert_eq!(
        target
            .next_completion()
            .unwrap()
            .buffer
            .unwrap()
            .to_vec()
            .unwrap(),
        b"fine"
    );
}
