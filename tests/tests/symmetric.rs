//! Symmetric ranges on a simulated NIC: one AV_WRITE for the whole range, traffic to a member
//! reaches that member, and its packets reverse-translate to the member's fi_addr.

use std::sync::Arc;
use uet_av::AvAttr;
use uet_driver::backend::sim::SimDevice;
use uet_driver::{EndpointAttr, Nic};
use uet_fwif::datapath::CompletionKind;
use uet_regs::{ADMIN_COMMANDS, AV_WRITE_DROPS};
use uet_tests::{fabric, nic_addr, Node};

const JOB: u32 = 0x77;
const INITIATOR: u32 = 0x500;

/// A node whose endpoint has the job-wide initiator id, as a launcher assigns for symmetric
/// jobs: every node's first endpoint then differs from the others only in its fabric address.
fn symmetric_node(f: uet_sim::SimFunction) -> Node {
    let nic = Nic::open(Arc::new(SimDevice::new(f.clone()))).unwrap();
    let av = nic
        .open_av(AvAttr {
            count: 4096,
            job_id: JOB,
            ..AvAttr::default()
        })
        .unwrap();
    let ep = nic
        .endpoint(
            EndpointAttr {
                job_id: JOB,
                initiator: Some(INITIATOR),
                ..EndpointAttr::default()
            },
            Some(&av),
        )
        .unwrap();
    let pool = uet_driver::DmaPool::new(&nic, 4096, 32).unwrap();
    Node {
        nic,
        av,
        ep,
        pool,
        function: f,
    }
}

#[test]
fn traffic_follows_a_symmetric_range_on_the_nic() {
    let (_fabric, fns) = fabric(4);
    let mut nodes: Vec<Node> = fns.into_iter().map(symmetric_node).collect();
    for n in &mut nodes {
        n.post_recvs(4);
    }
    let a = *nodes[0].ep.address();
    let service = format!(
        "{}?ri={}+{}&init={}&caps={}",
        a.pid_on_fep, a.ri_start, a.ri_count, INITIATOR, a.caps
    );
    // Every node inserts all four nodes (one service each) with one insertsym.
    for n in &mut nodes {
        let before = n.counter(ADMIN_COMMANDS);
        let mut out = [0u64; 4];
        let k =
            n.av.insertsym(
                &nic_addr(0).to_string(),
                4,
                &service,
                1,
                Some(&mut out),
                0,
                None,
            )
            .unwrap();
        assert_eq!((k, out), (4, [0, 1, 2, 3]));
        // One range record: it goes through the AV write window, not an AV_WRITE command.
        assert_eq!(n.counter(ADMIN_COMMANDS), before, "no admin command");
        assert_eq!(n.counter(AV_WRITE_DROPS), 0);
        assert_eq!(n.av.ranges().collect::<Vec<_>>(), [(0, 4, 4)]);
        assert!(n.av.verify_nic().unwrap().is_empty());
    }
    // Node 0 sends to fi_addr 2: node 2 receives, and sees fi_addr 0 as the source.
    nodes[0].send(2, b"to member 2", 1);
    assert!(nodes[0].next_completion().unwrap().error.is_none());
    let rx = nodes[2].next_completion().expect("member 2 receives");
    assert_eq!(rx.kind, CompletionKind::Recv);
    assert_eq!(rx.src_addr, 0, "reverse-translated through the range");
    assert_eq!(rx.buffer.unwrap().to_vec().unwrap(), b"to member 2");
    for i in [1, 3] {
        assert!(nodes[i].next_completion().is_none());
    }
    // Removing member 2 on node 0 stops traffic to it; a peer inserted next takes index 2.
    nodes[0].av.remove(&[2], 0).unwrap();
    nodes[0].send(2, b"gone", 2);
    let err = nodes[0].next_completion().unwrap().error.unwrap();
    assert_eq!(err.errno, uet_av::FiErrno::FI_EADDRNOTAVAIL);
    let node3 = nodes[3].addr();
    let k = nodes[0].insert(&node3);
    assert_eq!(k, 2);
    nodes[0].send(2, b"to node 3 at index 2", 3);
    assert!(nodes[0].next_completion().unwrap().error.is_none());
    assert_eq!(
        nodes[3]
            .next_completion()
            .unwrap()
            .buffer
            .unwrap()
            .to_vec()
            .unwrap(),
        b"to node 3 at index 2"
    );
    assert!(nodes[0].av.verify_nic().unwrap().is_empty());
}

#[test]
fn the_nic_takes_singles_in_range_holes_and_a_new_range_beside_them() {
    let (_fabric, fns) = fabric(1);
    let node = symmetric_node(fns.into_iter().next().unwrap());
    let mut av = node.av;
    av.insertsym("10.3.0.1", 2, "1", 2, None, 0, None).unwrap();
    av.remove(&[1, 2], 0).unwrap();
    let mut out = [0u64; 5];
    av.insertsym("10.4.0.1", 5, "9", 1, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [1, 2, 4, 5, 6]);
    assert!(av.verify_nic().unwrap().is_empty(), "NIC and mirror agree");
}
