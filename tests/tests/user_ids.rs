//! User ids end to end on AVs without auth keys: the NIC entry carries the user id, and a
//! receive completion reports it as the source (fi_av(3), FI_AV_USER_ID).

use std::sync::Arc;
use uet_av::{AvAttr, FiAddr, FI_ADDR_NOTAVAIL, FI_AV_USER_ID};
use uet_driver::backend::sim::SimDevice;
use uet_driver::{Av, DmaPool, Endpoint, EndpointAttr, Nic};
use uet_sim::{Fabric, NicConfig};
use uet_tests::nic_addr;

/// The job every endpoint and AV of these tests belongs to.
const JOB: u32 = 0x11;

struct Host {
    nic: Nic,
    av: Av,
    pool: DmaPool,
}

fn host(fabric: &Fabric, i: usize, av_flags: u64) -> Host {
    let function = fabric
        .add_nic(NicConfig::new(nic_addr(i)))
        .expect("add NIC");
    let nic = Nic::open(Arc::new(SimDevice::new(function))).expect("open NIC");
    let av = nic
        .open_av(AvAttr {
            count: 16,
            job_id: JOB,
            flags: av_flags,
            ..AvAttr::default()
        })
        .expect("open AV");
    let pool = DmaPool::new(&nic, 4096, 32).expect("pool");
    Host { nic, av, pool }
}

fn endpoint(h: &Host) -> Endpoint {
    h.nic
        .endpoint(
            EndpointAttr {
                job_id: JOB,
                ..EndpointAttr::default()
            },
            Some(&h.av),
        )
        .expect("endpoint")
}

fn next(ep: &mut Endpoint) -> Option<uet_driver::CqEvent> {
    (0..16).find_map(|_| ep.poll().unwrap())
}

/// Send one message from `a` to `dest` and return the source `b`'s receive reports.
fn src_of_next_message(a: &mut Host, ea: &mut Endpoint, dest: FiAddr, eb: &mut Endpoint) -> u64 {
    let mut buf = a.pool.alloc().unwrap();
    buf.fill(b"x").unwrap();
    ea.post_send(dest, buf, 0, 0).unwrap();
    let sent = next(ea).expect("send completion");
    assert!(sent.error.is_none(), "{:?}", sent.error);
    let got = next(eb).expect("receive completion");
    assert!(got.error.is_none(), "{:?}", got.error);
    got.src_addr
}

/// Host `a` (an AV without user ids) and host `b` (an AV opened with `FI_AV_USER_ID`), an
/// endpoint on each, each in the other's AV.
struct Pair {
    a: Host,
    b: Host,
    ea: Endpoint,
    eb: Endpoint,
    /// `eb` in `a`'s AV.
    b_in_a: FiAddr,
    /// `ea` in `b`'s AV.
    a_in_b: FiAddr,
}

impl Pair {
    /// [`src_of_next_message`] from `ea` to `eb`.
    fn src_of_next_message(&mut self) -> u64 {
        src_of_next_message(&mut self.a, &mut self.ea, self.b_in_a, &mut self.eb)
    }
}

fn pair_with_user_ids(fabric: &Fabric) -> Pair {
    let mut a = host(fabric, 0, 0);
    let mut b = host(fabric, 1, FI_AV_USER_ID);
    let ea = endpoint(&a);
    let eb = endpoint(&b);
    let mut b_in_a = [0];
    a.av.insert(&eb.address().to_bytes().unwrap(), 1, Some(&mut b_in_a), 0)
        .unwrap();
    let mut a_in_b = [0];
    b.av.insert(&ea.address().to_bytes().unwrap(), 1, Some(&mut a_in_b), 0)
        .unwrap();
    Pair {
        a,
        b,
        ea,
        eb,
        b_in_a: b_in_a[0],
        a_in_b: a_in_b[0],
    }
}

#[test]
fn an_av_opened_with_user_ids_reports_notavail_until_set_user_id() {
    let fabric = Fabric::new();
    let mut p = pair_with_user_ids(&fabric);
    for i in 0..2 {
        p.eb.post_recv(p.b.pool.alloc().unwrap(), i).unwrap();
    }
    // Every entry of such an AV starts with FI_ADDR_NOTAVAIL as its user id.
    assert_eq!(p.src_of_next_message(), FI_ADDR_NOTAVAIL);
    p.b.av.set_user_id(p.a_in_b, 0xBEEF, 0).unwrap();
    assert_eq!(p.src_of_next_message(), 0xBEEF);
}

#[test]
fn a_per_insert_user_id_is_the_reported_source() {
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, 0);
    let mut b = host(&fabric, 1, 0);
    let mut ea = endpoint(&a);
    let mut eb = endpoint(&b);
    let mut fi = [0];
    a.av.insert(&eb.address().to_bytes().unwrap(), 1, Some(&mut fi), 0)
        .unwrap();
    // FI_AV_USER_ID on the insert: fi_addr holds the user id in, the index out.
    let mut a_in_b: [FiAddr; 1] = [0xC0FFEE];
    b.av.insert(
        &ea.address().to_bytes().unwrap(),
        1,
        Some(&mut a_in_b),
        FI_AV_USER_ID,
    )
    .unwrap();
    assert_eq!(a_in_b[0], 0);
    eb.post_recv(b.pool.alloc().unwrap(), 0).unwrap();
    assert_eq!(
        src_of_next_message(&mut a, &mut ea, fi[0], &mut eb),
        0xC0FFEE
    );
    // Removed and inserted again without the flag: the index is reported, not the old id.
    b.av.remove(&a_in_b, 0).unwrap();
    let mut again = [0];
    b.av.insert(&ea.address().to_bytes().unwrap(), 1, Some(&mut again), 0)
        .unwrap();
    eb.post_recv(b.pool.alloc().unwrap(), 1).unwrap();
    assert_eq!(
        src_of_next_message(&mut a, &mut ea, fi[0], &mut eb),
        again[0]
    );
}

/// A tagged message that waited on the NIC's unexpected list reports its sender's user id as
/// it is when a receive takes the message, not as it was when the message arrived: fi_av(3)
/// has the target events that follow `fi_av_set_user_id` carry the new id.
#[test]
fn an_unexpected_message_reports_the_user_id_set_before_its_receive_took_it() {
    let fabric = Fabric::new();
    let mut p = pair_with_user_ids(&fabric);
    let mut buf = p.a.pool.alloc().unwrap();
    buf.fill(b"x").unwrap();
    p.ea.post_tsend(p.b_in_a, buf, 0x42, 0, 0).unwrap();
    let sent = next(&mut p.ea).expect("send completion");
    assert!(sent.error.is_none(), "{:?}", sent.error);
    assert!(next(&mut p.eb).is_none(), "the message waits unexpected");
    p.b.av.set_user_id(p.a_in_b, 0xBEEF, 0).unwrap();
    p.eb.post_trecv(p.b.pool.alloc().unwrap(), 0x42, 0, 1)
        .unwrap();
    let got = next(&mut p.eb).expect("receive completion");
    assert!(got.error.is_none(), "{:?}", got.error);
    assert_eq!(got.src_addr, 0xBEEF);
}
