//! Endpoint types: `FI_EP_DGRAM` endpoints send unreliable single-packet datagrams (UUD) — a
//! send completes when its packet is on the wire, and a datagram that finds no receive buffer
//! is dropped and counted at the target, never reported to the sender — and the combinations
//! a type does not support are refused with clear errors.

use uet_av::FiErrno;
use uet_driver::{DmaPool, DriverError, Endpoint, EndpointAttr, EpType};
use uet_fwif::address::flags;
use uet_fwif::ReturnCode;
use uet_regs::{RX_BAD_PID, RX_NO_BUFFER, RX_PACKETS, TX_PACKETS};
use uet_tests::{fabric, forged, open_av, open_nic, poll_one};

const JOB: u32 = 0x77;

fn dgram() -> EndpointAttr {
    EndpointAttr {
        job_id: JOB,
        ep_type: EpType::Dgram,
        ..EndpointAttr::default()
    }
}

fn send(ep: &mut Endpoint, pool: &DmaPool, dest: u64, data: &[u8], context: u64) {
    let mut b = pool.alloc().expect("buffer");
    b.fill(data).expect("fill");
    ep.post_send(dest, b, context, 0).expect("post send");
}

#[test]
fn datagrams_are_delivered_once_dropped_without_a_buffer_and_never_reported() {
    let (_f, fns) = fabric(2);
    let (na, nb) = (open_nic(&fns[0]), open_nic(&fns[1]));
    let (mut av_a, mut av_b) = (open_av(&na, JOB, 4, 0), open_av(&nb, JOB, 4, 0));
    let mut a = na.endpoint(dgram(), Some(&av_a)).unwrap();
    let mut b = nb.endpoint(dgram(), Some(&av_b)).unwrap();
    assert_eq!(a.ep_type(), EpType::Dgram);
    // The address says messages are limited to one MTU.
    assert!(a.address().max_msg_mtu);
    assert_ne!(a.address().to_bytes().unwrap()[1] & flags::MAX_MSG_MTU, 0);
    assert_eq!(a.max_msg_size(), a.mtu());
    let mut fi = [0u64; 1];
    av_a.insert(&b.address().to_bytes().unwrap(), 1, Some(&mut fi), 0)
        .unwrap();
    av_b.insert(&a.address().to_bytes().unwrap(), 1, Some(&mut [0u64; 1]), 0)
        .unwrap();
    let pool = DmaPool::new(&na, 2 * a.mtu(), 8).unwrap();
    let rx_pool = DmaPool::new(&nb, 2 * a.mtu(), 8).unwrap();

    // No receive buffer: the sender still completes successfully, the target drops and
    // counts, and no completion appears anywhere at the target.
    send(&mut a, &pool, fi[0], b"into the void", 1);
    let ev = poll_one(&mut a).expect("handed to the wire");
    assert!(ev.error.is_none(), "{:?}", ev.error);
    assert_eq!(fns[1].counter(RX_NO_BUFFER), 1);
    assert_eq!(b.counters().unwrap().rejected(ReturnCode::Undeliverable), 1);
    assert!(poll_one(&mut b).is_none());
    assert_eq!(fns[1].debug_counters().rx_datagrams_dropped, 1);

    // With a buffer: delivered exactly once, with the sender's fi_addr.
    b.post_recv(rx_pool.alloc().unwrap(), 7).unwrap();
    let mtu = a.mtu();
    let full = vec![0x5A; mtu];
    send(&mut a, &pool, fi[0], &full, 2);
    assert!(poll_one(&mut a).unwrap().error.is_none());
    let ev = poll_one(&mut b).expect("delivered");
    assert_eq!((ev.context, ev.len, ev.src_addr), (7, mtu, 0));
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), full);
    assert_eq!(fns[0].counter(TX_PACKETS), 2, "one packet per datagram");
    assert_eq!(fns[0].debug_counters().stray_responses, 0);
    assert_eq!(fns[0].debug_counters().tx_datagrams, 2);

    // A datagram to a PIDonFEP nobody has: dropped and counted at the target, and still a
    // successful completion at the sender.
    let bad = forged(b.address(), |x| x.pid_on_fep += 9);
    let mut k = [0u64; 1];
    av_a.insert(&bad, 1, Some(&mut k), 0).unwrap();
    send(&mut a, &pool, k[0], b"nobody", 3);
    assert!(poll_one(&mut a).unwrap().error.is_none());
    assert_eq!(fns[1].counter(RX_BAD_PID), 1);
}

#[test]
fn dgram_refuses_what_it_cannot_carry() {
    let (_f, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let av = open_av(&nic, JOB, 4, 0);
    let mut a = nic.endpoint(dgram(), Some(&av)).unwrap();
    let pool = DmaPool::new(&nic, 2 * a.mtu(), 4).unwrap();
    let mut b = pool.alloc().unwrap();
    b.fill(&vec![1; a.mtu() + 1]).unwrap();
    // More than one MTU: a multi-packet message cannot be a datagram.
    let (e, b) = a.post_send(0, b, 1, 0).unwrap_err();
    assert!(matches!(e, DriverError::MessageTooLong { .. }), "{e}");
    assert_eq!(e.errno(), FiErrno::FI_EMSGSIZE);
    // No RMA on a datagram endpoint.
    let (e, b) = a.post_write(0, b, 0, 1, 2).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP, "{e}");
    let (e, _) = a.post_read(0, b, 8, 0, 1, 3).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP, "{e}");
    // Nothing reached the NIC.
    assert_eq!(fns[0].counter(TX_PACKETS), 0);
    // A scalable datagram endpoint is not offered; nor are contexts through `endpoint`.
    let e = nic
        .scalable_endpoint(
            EndpointAttr {
                rx_ctx_cnt: 2,
                ..dgram()
            },
            Some(&av),
        )
        .err()
        .unwrap();
    assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP, "{e}");
    let e = nic
        .endpoint(
            EndpointAttr {
                rx_ctx_cnt: 2,
                ..dgram()
            },
            Some(&av),
        )
        .err()
        .unwrap();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
    assert!(e.to_string().contains("scalable_endpoint"), "{e}");
}

#[test]
fn reliable_and_datagram_endpoints_do_not_mix() {
    let (_f, fns) = fabric(2);
    let (na, nb) = (open_nic(&fns[0]), open_nic(&fns[1]));
    let (mut av_a, mut av_b) = (open_av(&na, JOB, 4, 0), open_av(&nb, JOB, 4, 0));
    let mut d = na.endpoint(dgram(), Some(&av_a)).unwrap();
    let rdm_attr = EndpointAttr {
        job_id: JOB,
        ..EndpointAttr::default()
    };
    let mut r = nb.endpoint(rdm_attr, Some(&av_b)).unwrap();
    let pool_a = DmaPool::new(&na, 4096, 4).unwrap();
    let pool_b = DmaPool::new(&nb, 4096, 4).unwrap();
    r.post_recv(pool_b.alloc().unwrap(), 1).unwrap();
    d.post_recv(pool_a.alloc().unwrap(), 1).unwrap();
    let mut fa = [0u64; 1];
    let mut fb = [0u64; 1];
    av_a.insert(&r.address().to_bytes().unwrap(), 1, Some(&mut fa), 0)
        .unwrap();
    av_b.insert(&d.address().to_bytes().unwrap(), 1, Some(&mut fb), 0)
        .unwrap();
    // A datagram to a reliable endpoint: dropped (and counted), the sender sees success.
    send(&mut d, &pool_a, fa[0], b"unreliable", 1);
    assert!(poll_one(&mut d).unwrap().error.is_none());
    assert_eq!(fns[1].debug_counters().rx_wrong_delivery_mode, 1);
    assert_eq!(fns[1].counter(RX_PACKETS), 0);
    // A reliable message to a datagram endpoint: refused RC_UNSUPPORTED_OP.
    send(&mut r, &pool_b, fb[0], b"reliable", 2);
    let err = poll_one(&mut r).unwrap().error.expect("refused");
    assert_eq!(err.return_code, Some(ReturnCode::UnsupportedOp));
    assert_eq!(d.counters().unwrap().rejected(ReturnCode::UnsupportedOp), 1);
    assert!(poll_one(&mut d).is_none());
}

/// On a NIC whose MTU is smaller than an inject slot, a datagram endpoint offers to inject
/// no more than it sends (`fi_info.tx_attr.inject_size` within `ep_attr.max_msg_size`), and
/// an inject of that size leaves as one datagram.
#[test]
fn inject_size_stays_within_a_datagram_of_a_small_mtu() {
    let fabric = uet_sim::Fabric::new();
    let fns: Vec<_> = (0..2)
        .map(|i| {
            let mut cfg = uet_sim::NicConfig::new(uet_tests::nic_addr(i));
            cfg.mtu = 128;
            fabric.add_nic(cfg).unwrap()
        })
        .collect();
    let (na, nb) = (open_nic(&fns[0]), open_nic(&fns[1]));
    let (mut av_a, av_b) = (open_av(&na, JOB, 4, 0), open_av(&nb, JOB, 4, 0));
    let mut a = na.endpoint(dgram(), Some(&av_a)).unwrap();
    let mut b = nb.endpoint(dgram(), Some(&av_b)).unwrap();
    assert_eq!(a.max_msg_size(), 128);
    assert!(
        a.inject_size() <= a.max_msg_size(),
        "inject_size {} above max_msg_size {}",
        a.inject_size(),
        a.max_msg_size()
    );
    let mut fi = [0u64; 1];
    av_a.insert(&b.address().to_bytes().unwrap(), 1, Some(&mut fi), 0)
        .unwrap();
    let pool = DmaPool::new(&nb, 256, 2).unwrap();
    b.post_recv(pool.alloc().unwrap(), 5).unwrap();
    let payload = vec![0x3C; a.inject_size()];
    a.inject(fi[0], &payload, 0)
        .expect("an inject of inject_size bytes");
    assert!(
        poll_one(&mut a).is_none(),
        "a successful inject is not reported"
    );
    let ev = poll_one(&mut b).expect("delivered");
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), payload);
}
