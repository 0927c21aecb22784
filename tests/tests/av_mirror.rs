//! After every AV operation the NIC table read back with AV_READ equals the host mirror.

use uet_av::{NicAvTable, FI_MORE};
use uet_fwif::NicAvEntry;
use uet_regs::{ADMIN_COMMANDS, AV_WRITE_DROPS};
use uet_tests::{fabric, Node};

fn assert_nic_equals_mirror(node: &mut Node, step: &str) {
    let cap = node.av.capacity();
    let mut nic = vec![NicAvEntry::INVALID; cap];
    node.av.nic_mut().read_entries(0, &mut nic).unwrap();
    for (i, e) in nic.iter().enumerate() {
        let m = node
            .av
            .mirror_entry(i as u32)
            .unwrap_or(NicAvEntry::INVALID);
        assert_eq!(*e, m, "{step}: index {i} differs between NIC and mirror");
    }
    assert!(
        node.av.verify_nic().unwrap().is_empty(),
        "{step}: verify_nic"
    );
}

#[test]
fn nic_table_equals_mirror_after_every_operation() {
    let (_fabric, fns) = fabric(6);
    let mut nodes: Vec<Node> = fns.into_iter().map(|f| Node::new(f, 7, 32)).collect();
    let addrs: Vec<[u8; 32]> = nodes.iter().map(Node::addr).collect();
    let n0 = &mut nodes[0];
    assert_nic_equals_mirror(n0, "empty");

    let flat: Vec<u8> = addrs[1..].concat();
    assert_eq!(n0.av.insert(&flat, 5, None, 0).unwrap(), 5);
    assert_nic_equals_mirror(n0, "insert 5");

    // A removal of a few entries rings AV_INVALIDATE_DOORBELL: no admin command.
    let before = n0.counter(ADMIN_COMMANDS);
    n0.av.remove(&[1, 3], 0).unwrap();
    assert_eq!(
        n0.counter(ADMIN_COMMANDS),
        before,
        "doorbell, not AV_INVALIDATE"
    );
    assert_nic_equals_mirror(n0, "remove 1 and 3");

    // A batch with FI_MORE: the mirror answers at once, the NIC gets one AV_WRITE at the end.
    let before = n0.counter(ADMIN_COMMANDS);
    let mut out = [0u64; 1];
    n0.av.insert(&addrs[2], 1, Some(&mut out), FI_MORE).unwrap();
    assert_eq!(out[0], 1, "lowest free index");
    n0.av.insert(&addrs[4], 1, Some(&mut out), FI_MORE).unwrap();
    assert_eq!(out[0], 3);
    assert_eq!(
        n0.counter(ADMIN_COMMANDS),
        before,
        "FI_MORE defers the NIC write"
    );
    n0.av.insert(&addrs[5], 1, Some(&mut out), 0).unwrap();
    assert_eq!(out[0], 5);
    assert_eq!(
        n0.counter(ADMIN_COMMANDS),
        before + 1,
        "one AV_WRITE for the whole batch"
    );
    assert_nic_equals_mirror(n0, "FI_MORE batch");

    // One insert without FI_MORE: one record through the AV write window, no admin command,
    // and the NIC reports it stored (AV_WRITE_DROPS unchanged).
    n0.av.remove(&[5], 0).unwrap();
    let before = n0.counter(ADMIN_COMMANDS);
    n0.av.insert(&addrs[5], 1, Some(&mut out), 0).unwrap();
    assert_eq!(out[0], 5);
    assert_eq!(n0.counter(ADMIN_COMMANDS), before, "window, not AV_WRITE");
    assert_eq!(n0.counter(AV_WRITE_DROPS), 0);
    assert_nic_equals_mirror(n0, "insert through the window");

    // A bad address among good ones: its slot gets FI_ADDR_NOTAVAIL, the rest go in.
    let mut bad = addrs[1];
    bad[0] = 0x70; // unknown address version
    let mixed: Vec<u8> = [addrs[1], bad, addrs[3]].concat();
    let mut out = [0u64; 3];
    assert_eq!(n0.av.insert(&mixed, 3, Some(&mut out), 0).unwrap(), 2);
    assert_eq!(out[1], u64::MAX);
    assert_nic_equals_mirror(n0, "mixed good and bad");

    let all: Vec<u64> = n0.av.iter().map(|(i, _)| u64::from(i)).collect();
    n0.av.remove(&all, 0).unwrap();
    assert_nic_equals_mirror(n0, "remove all");
    assert_eq!(n0.av.len(), 0);
}

#[test]
fn a_refused_batch_of_records_changes_nothing_on_the_nic() {
    let (_fabric, fns) = fabric(3);
    let mut nodes: Vec<Node> = fns.into_iter().map(|f| Node::new(f, 7, 32)).collect();
    let addrs: Vec<[u8; 32]> = nodes.iter().map(Node::addr).collect();
    let n0 = &mut nodes[0];
    let cap = n0.av.capacity() as u32;
    let entry =
        |a: &[u8; 32]| NicAvEntry::for_peer(&uet_fwif::UetAddress::from_bytes(a).unwrap(), 0);
    let good = uet_fwif::AvWriteRecord {
        index: 3.into(),
        reserved: Default::default(),
        entry: entry(&addrs[1]),
    };
    let past = uet_fwif::AvWriteRecord {
        index: cap.into(),
        ..good
    };
    // The records are built in the AV_WRITE buffer; the firmware checks them all first.
    let e = n0.av.nic_mut().write_entries(&[good, past]).unwrap_err();
    assert!(e.to_string().contains("AV_WRITE"), "{e}");
    let mut back = [NicAvEntry::INVALID; 1];
    n0.av.nic_mut().read_entries(3, &mut back).unwrap();
    assert!(
        !back[0].is_valid(),
        "the good record was not written either"
    );
    // An empty batch, and one past MAX_BATCH, are refused before anything reaches the NIC.
    let before = n0.counter(ADMIN_COMMANDS);
    assert!(n0.av.nic_mut().write_entries(&[]).is_err());
    let too_many = uet_fwif::admin::MAX_BATCH as usize + 1;
    let e = n0
        .av
        .nic_mut()
        .write_entries_with(too_many, &mut |_| good)
        .unwrap_err();
    assert!(e.to_string().contains("must be 1..="), "{e}");
    assert!(n0.av.nic_mut().invalidate(&[]).is_err());
    let many: Vec<u32> = (0..too_many as u32).collect();
    assert!(n0.av.nic_mut().invalidate(&many).is_err());
    assert_eq!(n0.counter(ADMIN_COMMANDS), before, "no command sent");
    // Two good records, built one by one where AV_WRITE reads them: both are stored.
    let mut records = [good, good];
    records[1].index = 4.into();
    n0.av
        .nic_mut()
        .write_entries_with(2, &mut |i| records[i])
        .unwrap();
    let mut back = [NicAvEntry::INVALID; 2];
    n0.av.nic_mut().read_entries(3, &mut back).unwrap();
    assert_eq!(back, [good.entry, good.entry]);
}

#[test]
fn a_large_removal_is_one_av_invalidate() {
    let (_fabric, fns) = fabric(2);
    let mut nodes: Vec<Node> = fns.into_iter().map(|f| Node::new(f, 7, 2048)).collect();
    let n0 = &mut nodes[0];
    let base = uet_fwif::UetAddress::from_bytes(&n0.addr()).unwrap();
    let peers: Vec<u8> = (0..1500u32)
        .flat_map(|i| {
            uet_fwif::UetAddress {
                initiator: i,
                ..base
            }
            .to_bytes()
            .unwrap()
        })
        .collect();
    let mut out = vec![0u64; 1500];
    assert_eq!(n0.av.insert(&peers, 1500, Some(&mut out), 0).unwrap(), 1500);
    // 700 indices, every other one from 100 on: more than one staged piece of indices.
    let gone: Vec<u64> = (0..700).map(|k| 100 + 2 * k as u64).collect();
    let before = n0.counter(ADMIN_COMMANDS);
    n0.av.remove(&gone, 0).unwrap();
    assert_eq!(n0.counter(ADMIN_COMMANDS), before + 1, "one AV_INVALIDATE");
    assert_eq!(n0.av.len(), 800);
    assert_nic_equals_mirror(n0, "after removing 700");
}
