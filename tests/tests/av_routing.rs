//! The NIC, not the host, turns fi_addr_t into a destination: traffic follows the AV entry.

use uet_fwif::datapath::{CompletionKind, LocalStatus};
use uet_tests::{fabric, Node};

const JOB: u32 = 0x42;

#[test]
fn message_to_fi_addr_k_reaches_the_endpoint_inserted_at_k_and_follows_reinsertion() {
    let (_fabric, fns) = fabric(5);
    let mut nodes: Vec<Node> = fns.into_iter().map(|f| Node::new(f, JOB, 16)).collect();
    for n in nodes.iter_mut().skip(1) {
        n.post_recvs(4);
    }
    let peers: Vec<[u8; 32]> = nodes.iter().map(Node::addr).collect();

    // Node 0 inserts nodes 1, 2, 3: fi_addr 0, 1, 2.
    let mut out = [u64::MAX; 3];
    let flat: Vec<u8> = peers[1..4].concat();
    assert_eq!(nodes[0].av.insert(&flat, 3, Some(&mut out), 0).unwrap(), 3);
    assert_eq!(out, [0, 1, 2]);

    for k in 0..3u64 {
        nodes[0].send(k, format!("to fi_addr {k}").as_bytes(), k);
        let ev = nodes[0].next_completion().expect("send completion");
        assert_eq!(ev.kind, CompletionKind::Send);
        assert!(ev.error.is_none(), "send to {k}: {:?}", ev.error);
        let target = &mut nodes[1 + k as usize];
        let rx = target.next_completion().expect("delivered");
        assert_eq!(rx.kind, CompletionKind::Recv);
        assert!(rx.error.is_none());
        assert_eq!(
            rx.buffer.unwrap().to_vec().unwrap(),
            format!("to fi_addr {k}").as_bytes()
        );
        for (i, other) in nodes.iter_mut().enumerate().skip(1) {
            if i != 1 + k as usize {
                assert!(
                    other.next_completion().is_none(),
                    "node {i} got traffic for fi_addr {k}"
                );
            }
        }
    }

    // Remove fi_addr 1 (node 2): a send to it fails locally with FI_EADDRNOTAVAIL.
    nodes[0].av.remove(&[1], 0).unwrap();
    nodes[0].send(1, b"to a removed entry", 9);
    let ev = nodes[0].next_completion().expect("error completion");
    let err = ev.error.expect("send to a removed fi_addr fails");
    assert_eq!(err.local, LocalStatus::AddrNotAvail);
    assert_eq!(err.errno, uet_av::FiErrno::FI_EADDRNOTAVAIL);
    assert!(nodes[2].next_completion().is_none());

    // Insert node 4: it takes the lowest free index, 1, and traffic to 1 now reaches node 4.
    let k = nodes[0].insert(&peers[4]);
    assert_eq!(k, 1);
    nodes[0].send(1, b"to the new peer at 1", 10);
    assert!(nodes[0].next_completion().unwrap().error.is_none());
    let rx = nodes[4].next_completion().expect("new peer receives");
    assert_eq!(
        rx.buffer.unwrap().to_vec().unwrap(),
        b"to the new peer at 1"
    );
    assert!(
        nodes[2].next_completion().is_none(),
        "the old peer gets nothing"
    );
}

#[test]
fn receive_completion_reports_the_source_by_reverse_translation() {
    let (_fabric, fns) = fabric(3);
    let mut nodes: Vec<Node> = fns.into_iter().map(|f| Node::new(f, JOB, 8)).collect();
    let a = nodes[0].addr();
    let b = nodes[1].addr();
    let c = nodes[2].addr();
    // Node 1 knows node 2 at fi_addr 0 and node 0 at fi_addr 1.
    nodes[1].insert(&c);
    nodes[1].insert(&a);
    nodes[0].insert(&b);
    nodes[2].insert(&b);
    nodes[1].post_recvs(2);
    nodes[0].send(0, b"from node 0", 1);
    nodes[2].send(0, b"from node 2", 2);
    assert!(nodes[0].next_completion().unwrap().error.is_none());
    assert!(nodes[2].next_completion().unwrap().error.is_none());
    let r1 = nodes[1].next_completion().unwrap();
    let r2 = nodes[1].next_completion().unwrap();
    assert_eq!(r1.src_addr, 1, "node 0 is fi_addr 1 in node 1's AV");
    assert_eq!(r1.data, 1);
    assert_eq!(r2.src_addr, 0, "node 2 is fi_addr 0 in node 1's AV");
}
