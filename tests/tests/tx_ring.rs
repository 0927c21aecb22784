//! The TX ring: sends complete out of posting order (each when its target answers), and one
//! waiting on a slow target holds up no send to another.

use std::sync::Arc;
use uet_driver::backend::sim::SimDevice;
use uet_driver::{DmaPool, EndpointAttr, Nic};
use uet_sim::{Fabric, NicConfig};
use uet_tests::{nic_addr, open_av};

const JOB: u32 = 0x00_5151;

/// NIC `i` of `fabric` with an AV, an endpoint of `attr` bound to it, and a buffer pool.
fn node(
    fabric: &Fabric,
    i: usize,
    attr: EndpointAttr,
) -> (Nic, uet_driver::Av, uet_driver::Endpoint, DmaPool) {
    let f = fabric.add_nic(NicConfig::new(nic_addr(i))).expect("NIC");
    let nic = Nic::open(Arc::new(SimDevice::new(f))).expect("open NIC");
    let av = open_av(&nic, JOB, 4, 0);
    let ep = nic
        .endpoint(
            EndpointAttr {
                job_id: JOB,
                ..attr
            },
            Some(&av),
        )
        .expect("endpoint");
    let pool = DmaPool::new(&nic, 4096, 16).expect("pool");
    (nic, av, ep, pool)
}

/// The fi_addr of `ep` in `av`, inserted now.
fn insert(av: &mut uet_driver::Av, ep: &uet_driver::Endpoint) -> u64 {
    let mut out = [0u64; 1];
    let bytes = ep.address().to_bytes().expect("address");
    assert_eq!(av.insert(&bytes, 1, Some(&mut out), 0).expect("insert"), 1);
    out[0]
}

/// A send whose target holds it (its completion ring is full: its application reads it
/// later) stays in flight while sends to another peer complete round the TX ring: the ring
/// keeps taking sends to that peer, and the held one completes once its target reads.
#[test]
fn a_send_held_by_a_slow_target_holds_up_no_send_to_another() {
    let fabric = Fabric::new();
    let small = EndpointAttr {
        tx_log2: 2,
        rx_log2: 1,
        trx_log2: 0,
        cq_log2: 3,
        ..EndpointAttr::default()
    };
    // The slow target: a completion ring of 4 entries, which holds 3 completions.
    let slow = EndpointAttr {
        tx_log2: 1,
        rx_log2: 1,
        trx_log2: 0,
        cq_log2: 2,
        ..EndpointAttr::default()
    };
    let (_na, mut av_a, mut a, pool_a) = node(&fabric, 0, small);
    let (_nb, _av_b, mut b, pool_b) = node(&fabric, 1, slow);
    let (_nc, mut av_c, mut c, pool_c) = node(&fabric, 2, EndpointAttr::default());
    let to_b = insert(&mut av_a, &b);
    let to_c = insert(&mut av_a, &c);
    // B's completion ring fills with messages of C into a multi-receive buffer B does not
    // read yet.
    b.post_recv_multi(pool_b.alloc().expect("buffer"), Some(0), 1)
        .map_err(|(e, _)| e)
        .expect("multi-receive buffer");
    let c_to_b = insert(&mut av_c, &b);
    for i in 0..3u64 {
        c.inject(c_to_b, b"fill", i).expect("inject");
    }
    while c.poll().expect("poll").is_some() {}
    // A's send to B waits for room in B's completion ring.
    let mut buf = pool_a.alloc().expect("buffer");
    buf.fill(b"held").expect("fill");
    a.post_send(to_b, buf, 100, 0)
        .map_err(|(e, _)| e)
        .expect("send to B");
    assert!(a.poll().expect("poll").is_none(), "B holds the send");
    // Sends to C complete, twice round A's TX ring of 4 entries.
    for i in 0..8u64 {
        c.post_recv(pool_c.alloc().expect("buffer"), i)
            .map_err(|(e, _)| e)
            .expect("receive at C");
        let mut buf = pool_a.alloc().expect("buffer");
        buf.fill(b"to C").expect("fill");
        let sent = a.post_send(to_c, buf, 200 + i, 0).map_err(|(e, _)| e);
        assert!(sent.is_ok(), "send {i} to C: {:?}", sent.err());
        let ev = a.poll().expect("poll").expect("the send to C completes");
        assert_eq!(ev.context, 200 + i);
        assert!(ev.error.is_none(), "{:?}", ev.error);
        let ev = c.poll().expect("poll").expect("C receives");
        assert_eq!(ev.context, i);
    }
    assert_eq!(a.in_flight().0, 1);
    // Injects too, whose payload lives in the slot of the context each takes: twice round
    // the ring again, past the entry the held send keeps.
    for i in 0..8u64 {
        c.post_recv(pool_c.alloc().expect("buffer"), 300 + i)
            .map_err(|(e, _)| e)
            .expect("receive at C");
        let injected = a.inject(to_c, &[i as u8; 3], 0);
        assert!(injected.is_ok(), "inject {i} to C: {:?}", injected.err());
        assert!(
            a.poll().expect("poll").is_none(),
            "an inject reports nothing"
        );
        let ev = c.poll().expect("poll").expect("C receives the inject");
        assert_eq!(ev.context, 300 + i);
        assert_eq!(
            ev.buffer.expect("its buffer").to_vec().expect("bytes"),
            [i as u8; 3]
        );
    }
    assert_eq!(a.in_flight().0, 1);
    // B reads its completions: A's send reaches it and completes.
    for _ in 0..3 {
        assert!(b.poll().expect("poll").is_some());
    }
    let ev = b.poll().expect("poll").expect("A's message");
    assert_eq!(ev.len, 4);
    let ev = a.poll().expect("poll").expect("the send to B completes");
    assert_eq!(ev.context, 100);
    assert!(ev.error.is_none(), "{:?}", ev.error);
    assert_eq!(a.in_flight().0, 0);
}
