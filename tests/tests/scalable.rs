//! Scalable endpoints: receive context i is resource index ri_start + i; senders reach it
//! with fi_rx_addr; each context gets exactly its own traffic and completions, and a context
//! beyond the target's count or range is refused RC_BAD_INDEX at the target.

use uet_av::{fi_rx_addr, FiErrno};
use uet_driver::{Av, DmaPool, Endpoint, EndpointAttr, Nic};
use uet_fwif::datapath::CompletionKind;
use uet_fwif::ReturnCode;
use uet_regs::RX_BAD_INDEX;
use uet_tests::{fabric, job_endpoint, open_av, open_nic, poll_one};

const JOB: u32 = 0x5CA1E;

fn attr(tx: u8, rx: u8, ri_count: u16) -> EndpointAttr {
    EndpointAttr {
        job_id: JOB,
        ri_count,
        tx_ctx_cnt: tx,
        rx_ctx_cnt: rx,
        tx_log2: 4,
        rx_log2: 4,
        trx_log2: 4,
        cq_log2: 6,
        ..EndpointAttr::default()
    }
}

/// A sender on NIC `f`: its NIC, an AV with rx_ctx_bits 4 holding the scalable endpoint's
/// address `addr`, an endpoint of `JOB` and the fi_addr of `addr` (receive context 0).
fn sender(f: &uet_sim::SimFunction, addr: &[u8]) -> (Nic, Av, Endpoint, u64) {
    let nic = open_nic(f);
    let mut av = open_av(&nic, JOB, 4, 4);
    let ep = job_endpoint(&nic, JOB, &av);
    let mut fi = [0u64; 1];
    av.insert(addr, 1, Some(&mut fi), 0).unwrap();
    (nic, av, ep, fi[0])
}

#[test]
fn context_counts_are_checked_against_cap_ep() {
    let (_f, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let caps = *nic.capabilities();
    let av = open_av(&nic, JOB, 4, 0);
    let e = nic
        .scalable_endpoint(attr(caps.max_tx_ctx + 1, 1, 4), Some(&av))
        .err()
        .unwrap();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
    assert!(e.to_string().contains("CAP_EP.max_tx_ctx"), "{e}");
    let e = nic
        .scalable_endpoint(attr(1, caps.max_rx_ctx + 1, 64), Some(&av))
        .err()
        .unwrap();
    assert!(e.to_string().contains("CAP_EP.max_rx_ctx"), "{e}");
    let e = nic
        .scalable_endpoint(attr(1, 4, 2), Some(&av))
        .err()
        .unwrap();
    assert!(e.to_string().contains("ri_count"), "{e}");
    // The largest counts the NIC advertises work, and contexts are released on drop.
    let n = caps.max_rx_ctx.min(caps.max_tx_ctx);
    let sep = nic
        .scalable_endpoint(attr(n, n, u16::from(n)), Some(&av))
        .unwrap();
    assert_eq!((sep.tx_ctx_cnt(), sep.rx_ctx_cnt()), (n, n));
    drop(sep);
    let again = nic.scalable_endpoint(attr(n, n, u16::from(n)), Some(&av));
    assert!(again.is_ok(), "{:?}", again.err().map(|e| e.to_string()));
}

#[test]
fn each_receive_context_gets_exactly_its_own_traffic() {
    const RX: u8 = 4;
    const PER: usize = 3;
    let (_f, fns) = fabric(3);
    let target_nic = open_nic(&fns[0]);
    let target_av = open_av(&target_nic, JOB, 4, 0);
    // ri_count 8 > rx_ctx_cnt 4: indices ri_start+4..+8 are in range but no context.
    let mut sep = target_nic
        .scalable_endpoint(attr(2, RX, 8), Some(&target_av))
        .unwrap();
    let addr = sep.address().unwrap().to_bytes().unwrap();
    let pool = DmaPool::new(&target_nic, 4096, 64).unwrap();
    for i in 0..RX {
        let ctx = sep.rx_context(i).unwrap();
        for k in 0..(2 * PER) as u64 {
            ctx.post_recv(pool.alloc().unwrap(), u64::from(i) << 8 | k)
                .unwrap();
        }
        ctx.post_trecv(pool.alloc().unwrap(), 0x7A6, 0, u64::from(i) << 8 | 0xFF)
            .unwrap();
    }
    // Two senders, each addressing every context with fi_rx_addr through an AV with
    // rx_ctx_bits 4.
    let mut senders = Vec::new();
    for f in &fns[1..] {
        let (nic, av, ep, base) = sender(f, &addr);
        let pool = DmaPool::new(&nic, 4096, 64).unwrap();
        senders.push((nic, av, ep, pool, base));
    }
    for (s, (_, _, ep, pool, base)) in senders.iter_mut().enumerate() {
        for i in 0..u32::from(RX) {
            for k in 0..PER {
                let mut b = pool.alloc().unwrap();
                b.fill(format!("s{s} c{i} m{k}").as_bytes()).unwrap();
                ep.post_send(fi_rx_addr(*base, i, 4), b, 0, 0).unwrap();
                assert!(poll_one(ep).unwrap().error.is_none());
            }
            let mut b = pool.alloc().unwrap();
            b.fill(format!("tagged s{s} c{i}").as_bytes()).unwrap();
            ep.post_tsend(fi_rx_addr(*base, i, 4), b, 0x7A6, 0, 0)
                .unwrap();
            assert!(poll_one(ep).unwrap().error.is_none());
        }
    }
    for i in 0..RX {
        let ctx = sep.rx_context(i).unwrap();
        let mut got = Vec::new();
        let mut tagged = 0;
        while let Some(ev) = ctx.poll().unwrap() {
            assert!(ev.error.is_none(), "{:?}", ev.error);
            assert_eq!(ev.context >> 8, u64::from(i), "a receive of context {i}");
            let text = String::from_utf8(ev.buffer.unwrap().to_vec().unwrap()).unwrap();
            if ev.kind == CompletionKind::TaggedRecv {
                tagged += 1;
                assert!(text.ends_with(&format!("c{i}")), "{text}");
            } else {
                got.push(text);
            }
        }
        got.sort();
        let mut want: Vec<String> = (0..2)
            .flat_map(|s| (0..PER).map(move |k| format!("s{s} c{i} m{k}")))
            .collect();
        want.sort();
        assert_eq!(got, want, "receive context {i}");
        assert_eq!(tagged, 1, "one tagged message matched in context {i}");
    }

    // Context 4 is inside the range but beyond rx_ctx_cnt; context 9 is outside the range.
    let (_, _, ep, pool, base) = &mut senders[0];
    for ctx in [4u32, 9] {
        let mut b = pool.alloc().unwrap();
        b.fill(b"nowhere").unwrap();
        ep.post_send(fi_rx_addr(*base, ctx, 4), b, 0, 0).unwrap();
        let err = poll_one(ep).unwrap().error.expect("refused");
        assert_eq!(err.return_code, Some(ReturnCode::BadIndex), "context {ctx}");
        assert_eq!(err.errno, FiErrno::FI_EADDRNOTAVAIL);
    }
    assert_eq!(fns[0].counter(RX_BAD_INDEX), 2);
    for i in 0..RX {
        assert!(sep.rx_context(i).unwrap().poll().unwrap().is_none());
    }
}

#[test]
fn transmit_contexts_have_their_own_rings_and_completions() {
    let (_f, fns) = fabric(2);
    let (na, nb) = (open_nic(&fns[0]), open_nic(&fns[1]));
    let mut av_a = open_av(&na, JOB, 4, 0);
    let mut sep = na.scalable_endpoint(attr(2, 3, 4), Some(&av_a)).unwrap();
    let av_b = open_av(&nb, JOB, 4, 0);
    let mut b = job_endpoint(&nb, JOB, &av_b);
    let mut fi = [0u64; 1];
    av_a.insert(&b.address().to_bytes().unwrap(), 1, Some(&mut fi), 0)
        .unwrap();
    let pool = DmaPool::new(&na, 4096, 8).unwrap();
    let rx_pool = DmaPool::new(&nb, 4096, 8).unwrap();
    for k in 0..2 {
        b.post_recv(rx_pool.alloc().unwrap(), k).unwrap();
    }
    // Each transmit context has its own doorbell index.
    let h0 = sep.tx_context(0).unwrap().handle();
    let h1 = sep.tx_context(1).unwrap().handle();
    assert_ne!(h0, h1);
    for t in 0..2u8 {
        let ctx = sep.tx_context(t).unwrap();
        let mut buf = pool.alloc().unwrap();
        buf.fill(&[t; 16]).unwrap();
        ctx.post_send(fi[0], buf, 100 + u64::from(t), 0).unwrap();
    }
    for t in 0..2u8 {
        let ev = poll_one(sep.tx_context(t).unwrap()).expect("own completion");
        assert_eq!(ev.context, 100 + u64::from(t));
        assert!(poll_one(sep.tx_context(t).unwrap()).is_none());
    }
    for _ in 0..2 {
        let ev = poll_one(&mut b).unwrap();
        assert!(ev.error.is_none());
    }
    // Context 2 only receives; transmit context 2 does not exist.
    assert!(sep.tx_context(2).is_err());
    let ctx2 = sep.rx_context(2).unwrap();
    let (e, _) = ctx2
        .post_send(fi[0], pool.alloc().unwrap(), 0, 0)
        .unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP, "{e}");
}

#[test]
fn contexts_reordered_by_the_application_are_still_destroyed_before_the_endpoint() {
    // contexts_mut hands out the ring sets as a slice: an application that reorders it
    // (swap, reverse, sort) to share the contexts among its threads moves the endpoint's own
    // ring set away from index 0. Dropping the scalable endpoint must still destroy every
    // context, then the endpoint, leaving nothing on the NIC.
    let (_f, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let av = open_av(&nic, JOB, 4, 2);
    let fixed = EndpointAttr {
        initiator: Some(0x77),
        ..attr(3, 3, 4)
    };
    let mut sep = nic.scalable_endpoint(fixed, Some(&av)).unwrap();
    sep.contexts_mut().reverse();
    drop(sep);
    // The NIC holds no endpoint with that initiator id any more: it may be taken again.
    let again = nic.scalable_endpoint(fixed, Some(&av));
    assert!(
        again.is_ok(),
        "the endpoint was left on the NIC: {:?}",
        again.err().map(|e| e.to_string())
    );
}

#[test]
fn an_endpoint_whose_contexts_outlive_it_is_destroyed_after_them() {
    // contexts_mut hands out &mut Endpoint: an application can swap a context with one of
    // another scalable endpoint, or take the endpoint's own ring set out with mem::replace,
    // and drop the endpoint while contexts of it still live. The NIC refuses to destroy an
    // endpoint whose contexts exist; the endpoint must go once they have, not stay on the NIC.
    let (_f, fns) = fabric(1);
    let nic = open_nic(&fns[0]);
    let av = open_av(&nic, JOB, 4, 2);
    let fixed = |initiator| EndpointAttr {
        initiator: Some(initiator),
        ..attr(2, 2, 4)
    };
    let mut a = nic.scalable_endpoint(fixed(0x71), Some(&av)).unwrap();
    let mut b = nic.scalable_endpoint(fixed(0x72), Some(&av)).unwrap();
    std::mem::swap(&mut a.contexts_mut()[1], &mut b.contexts_mut()[1]);
    drop(a);
    drop(b);
    // The endpoint's own ring set taken out and dropped first; its context keeps working.
    let mut c = nic.scalable_endpoint(fixed(0x73), Some(&av)).unwrap();
    let stand_in = job_endpoint(&nic, JOB, &av);
    let base = std::mem::replace(&mut c.contexts_mut()[0], stand_in);
    drop(base);
    let pool = DmaPool::new(&nic, 256, 4).unwrap();
    let ctx = c.rx_context(1).unwrap();
    ctx.post_recv(pool.alloc().unwrap(), 1)
        .map_err(|(e, _)| e)
        .unwrap();
    drop(c);
    for initiator in [0x71, 0x72, 0x73] {
        let again = nic.scalable_endpoint(fixed(initiator), Some(&av));
        assert!(
            again.is_ok(),
            "endpoint {initiator:#x} was left on the NIC: {:?}",
            again.err().map(|e| e.to_string())
        );
    }
}

#[test]
fn every_context_gets_the_completion_ring_size_the_attributes_ask_for() {
    // cq_log2 8: each context's completion ring holds 256 completions, as the endpoint's own
    // does. A multi-receive buffer takes many messages per descriptor, each with a completion:
    // a receive context must hold as many unread as context 0 before the NIC holds messages
    // back.
    const MESSAGES: u64 = 100;
    let (_f, fns) = fabric(2);
    let target_nic = open_nic(&fns[0]);
    let target_av = open_av(&target_nic, JOB, 4, 0);
    let mut sep = target_nic
        .scalable_endpoint(
            EndpointAttr {
                cq_log2: 8,
                ..attr(3, 3, 4)
            },
            Some(&target_av),
        )
        .unwrap();
    let addr = sep.address().unwrap().to_bytes().unwrap();
    let target_pool = DmaPool::new(&target_nic, 65536, 4).unwrap();
    let (nic, _av, mut ep, base) = sender(&fns[1], &addr);
    let pool = DmaPool::new(&nic, 64, 4).unwrap();
    for i in 0..3u8 {
        sep.rx_context(i)
            .unwrap()
            .post_recv_multi(target_pool.alloc().unwrap(), Some(0), 0)
            .unwrap();
        for m in 0..MESSAGES {
            let mut b = pool.alloc().unwrap();
            b.fill(&[m as u8; 16]).unwrap();
            ep.post_send(fi_rx_addr(base, u32::from(i), 4), b, m, 0)
                .unwrap();
            let ev = poll_one(&mut ep);
            assert!(
                ev.is_some_and(|ev| ev.error.is_none()),
                "receive context {i}: message {m} held back with {m} completions unread"
            );
        }
        let ctx = sep.rx_context(i).unwrap();
        let mut got = 0;
        while ctx.poll().unwrap().is_some() {
            got += 1;
        }
        assert_eq!(got, MESSAGES, "receive context {i}");
    }
}

#[test]
fn contexts_are_found_by_index_after_the_application_reorders_them() {
    // contexts_mut lets the application reorder the ring sets (the endpoint still goes after
    // its contexts); tx_context(i) and rx_context(i) must still give context i, not whatever
    // ring set now sits at position i.
    let (_f, fns) = fabric(2);
    let target_nic = open_nic(&fns[0]);
    let target_av = open_av(&target_nic, JOB, 4, 0);
    let mut sep = target_nic
        .scalable_endpoint(attr(2, 3, 4), Some(&target_av))
        .unwrap();
    let handles: Vec<u16> = sep.contexts_mut().iter().map(|c| c.handle()).collect();
    sep.contexts_mut().reverse();
    for i in 0..3u8 {
        assert_eq!(
            sep.rx_context(i).unwrap().handle(),
            handles[usize::from(i)],
            "receive context {i}"
        );
    }
    for i in 0..2u8 {
        assert_eq!(
            sep.tx_context(i).unwrap().handle(),
            handles[usize::from(i)],
            "transmit context {i}"
        );
    }
    // A message to receive context 0 lands in the buffer posted through rx_context(0).
    let addr = sep.address().unwrap().to_bytes().unwrap();
    let pool = DmaPool::new(&target_nic, 4096, 4).unwrap();
    sep.rx_context(0)
        .unwrap()
        .post_recv(pool.alloc().unwrap(), 7)
        .unwrap();
    let (nic, _av, mut ep, base) = sender(&fns[1], &addr);
    let send_pool = DmaPool::new(&nic, 4096, 4).unwrap();
    let mut b = send_pool.alloc().unwrap();
    b.fill(b"to context 0").unwrap();
    ep.post_send(fi_rx_addr(base, 0, 4), b, 1, 0).unwrap();
    let sent = poll_one(&mut ep).expect("a send completion");
    assert!(sent.error.is_none(), "{:?}", sent.error);
    let ev = poll_one(sep.rx_context(0).unwrap()).expect("received in context 0");
    assert_eq!(ev.context, 7);
    // A ring set swapped in from another scalable endpoint is not one of this one's contexts.
    let mut other = target_nic
        .scalable_endpoint(attr(2, 3, 4), Some(&target_av))
        .unwrap();
    std::mem::swap(&mut sep.contexts_mut()[0], &mut other.contexts_mut()[0]);
    assert!(
        sep.rx_context(2).is_err(),
        "context 2 moved to the other one"
    );
    assert_eq!(sep.rx_context(1).unwrap().handle(), handles[1]);
    assert_eq!(
        sep.address().unwrap().to_bytes().unwrap(),
        addr,
        "the endpoint's address"
    );
}
