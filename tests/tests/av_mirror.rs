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
fn a_refused_run_of_peers_changes_nothing_on_the_nic() {
    let (_fabric, fns) = fabric(3);
    let mut nodes: Vec<Node> = fns.into_iter().map(|f| Node::new(f, 7, 32)).collect();
    let addrs: Vec<[u8; 32]> = nodes.iter().map(Node::addr).collect();
    let n0 = &mut nodes[0];
    let cap = n0.av.capacity() as u32;
    let flags = uet_fwif::av_entry::entry_flags::ALL;
    let peers = [addrs[1], addrs[2]];
    // The run's last index lies past the table: refused whole, its first entry not written.
    let e = n0
        .av
        .nic_mut()
        .write_peers(cap - 1, &peers, 7, flags)
        .unwrap_err();
    assert!(e.to_string().contains("AV_WRITE_PEERS"), "{e}");
    let mut back = [NicAvEntry::INVALID; 1];
    n0.av.nic_mut().read_entries(cap - 1, &mut back).unwrap();
    assert!(!back[0].is_valid(), "nothing written");
    // Empty and oversized runs never reach the NIC.
    let before = n0.counter(ADMIN_COMMANDS);
    assert!(n0.av.nic_mut().write_peers(0, &[], 7, flags).is_err());
    let too_many = vec![addrs[1]; uet_fwif::admin::MAX_BATCH as usize + 1];
    let e = n0
        .av
        .nic_mut()
        .write_peers(0, &too_many, 7, flags)
        .unwrap_err();
    assert!(e.to_string().contains("must be 1..="), "{e}");
    assert_eq!(n0.counter(ADMIN_COMMANDS), before, "no command sent");
    // A good run is written as AV_WRITE of the same peers would write it.
    let (converted, written) = (n0.function.debug_counters().av_write_peers_entries, 2);
    n0.av.nic_mut().write_peers(3, &peers, 7, flags).unwrap();
    let mut back = [NicAvEntry::INVALID; 2];
    n0.av.nic_mut().read_entries(3, &mut back).unwrap();
    let entry = |a: &[u8; 32]| NicAvEntry::for_valid_peer_bytes(a, 7);
    assert_eq!(back, [entry(&addrs[1]), entry(&addrs[2])]);
    assert_eq!(
        n0.function.debug_counters().av_write_peers_entries,
        converted + written
    );
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

/// A hook making the next read of `AV_WRITE_DROPS`, once armed, complete with all ones, as a
/// PCIe read nothing answers does.
struct OnceAllOnes {
    armed: std::sync::atomic::AtomicBool,
}

/// A node of job 1 on a NIC whose BAR accesses go through the hook `make` builds (given the
/// NIC's function): the fabric (kept for the test's length), the function, the device (to arm
/// the hook) and the node.
fn hooked_node<H: uet_tests::BarHook + Send + Sync + 'static>(
    make: impl FnOnce(&uet_sim::SimFunction) -> H,
) -> (
    uet_sim::Fabric,
    uet_sim::SimFunction,
    std::sync::Arc<uet_tests::HookedDevice<H>>,
    Node,
) {
    let (f, fns) = fabric(1);
    let function = fns[0].clone();
    let device = std::sync::Arc::new(uet_tests::HookedDevice {
        inner: uet_driver::backend::sim::SimDevice::new(function.clone()),
        hook: make(&function),
    });
    let node = Node::on_device(device.clone(), function.clone(), 1, 1, 8);
    (f, function, device, node)
}

impl uet_tests::BarHook for OnceAllOnes {
    fn read64(&self, offset: u32, value: u64) -> u64 {
        use std::sync::atomic::Ordering;
        if offset == AV_WRITE_DROPS.offset() && self.armed.swap(false, Ordering::AcqRel) {
            return u64::MAX;
        }
        value
    }
}

/// The write window learns whether the NIC stored an entry from `AV_WRITE_DROPS`. A read of
/// it that fails (all ones) leaves the entry in doubt, not refused: the AV keeps it and
/// rewrites it at its next call, and NIC and mirror agree again. A count that went down (the
/// function was reset) is in doubt too, never taken as "stored".
#[test]
fn a_window_write_whose_drop_count_cannot_be_trusted_is_in_doubt() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_f, function, device, mut node) = hooked_node(|_| OnceAllOnes {
        armed: AtomicBool::new(false),
    });
    let own = *node.ep.address();
    let peer = |i: u32| uet_tests::forged(&own, |a| a.initiator = i);
    let (a, b, c) = (peer(0x71), peer(0x72), peer(0x73));
    assert_eq!(node.insert(&a), 0);
    device.hook.armed.store(true, Ordering::Release);
    let e = node.av.insert(&b, 1, None, 0).unwrap_err();
    assert_eq!(e.errno, uet_av::FiErrno::FI_EIO, "{e}");
    assert!(e.message.contains("is not known"), "{e}");
    assert_eq!(node.av.entries_in_doubt(), 1, "kept, to be rewritten");
    assert_eq!(node.av.len(), 2);
    assert_eq!(node.insert(&c), 2);
    assert_eq!(node.av.entries_in_doubt(), 0);
    assert_nic_equals_mirror(&mut node, "after a failed read of the drop count");

    // Two refusals through the window (entries without VALID that are not all zero), then
    // a function reset: the count falls from 2 to 0, and the next write, dropped by a NIC
    // that lost its tables, counts 1 — below what the driver last read.
    let rec = refused_record(&a, 5);
    for _ in 0..2 {
        assert!(node.av.nic_mut().write_entries(&[rec]).is_err());
    }
    assert_eq!(function.counter(AV_WRITE_DROPS), 2);
    // The reset NIC answers no admin command: tearing the node down waits this long for each.
    node.nic
        .set_admin_timeout(std::time::Duration::from_millis(20));
    function.function_level_reset();
    let e = node.av.insert(&peer(0x74), 1, None, 0).unwrap_err();
    assert!(e.message.contains("is not known"), "{e}");
    assert_eq!(function.counter(AV_WRITE_DROPS), 1, "the NIC dropped it");
}

/// One record with its reserved word set is refused as a batch holding it is: through the
/// write window as through AV_WRITE, nothing stored.
#[test]
fn a_record_with_its_reserved_word_set_is_refused_alone_as_in_a_batch() {
    let (_f, fns) = fabric(1);
    let mut node = Node::new(fns[0].clone(), 1, 8);
    let a = uet_fwif::UetAddress::from_bytes(&node.addr()).unwrap();
    let rec = uet_fwif::AvWriteRecord {
        index: 3.into(),
        reserved: 1.into(),
        entry: NicAvEntry::for_peer(&a, 1),
    };
    let mut other = rec;
    other.index = 4.into();
    assert!(node.av.nic_mut().write_entries(&[rec, other]).is_err());
    let e = node.av.nic_mut().write_entries(&[rec]).unwrap_err();
    assert!(e.to_string().contains("reserved word"), "{e}");
    let mut got = [NicAvEntry::INVALID; 2];
    node.av.nic_mut().read_entries(3, &mut got).unwrap();
    assert_eq!(got, [NicAvEntry::INVALID; 2], "nothing stored");
}

/// Insert peer `first` (its initiator id; the others the returned function makes differ in
/// it) into `node`'s AV, then have the NIC drop one window write (`AV_WRITE_DROPS` 1), and
/// shorten the admin timeout: the reset NIC these tests make answers no admin command, and
/// tearing the node down waits that long for each.
fn one_window_write_dropped(
    node: &mut Node,
    function: &uet_sim::SimFunction,
    first: u32,
) -> impl Fn(u32) -> [u8; 32] {
    let own = *node.ep.address();
    let peer = move |i: u32| uet_tests::forged(&own, |a| a.initiator = i);
    let a = peer(first);
    assert_eq!(node.insert(&a), 0);
    let rec = refused_record(&a, 5);
    assert!(node.av.nic_mut().write_entries(&[rec]).is_err());
    assert_eq!(function.counter(AV_WRITE_DROPS), 1);
    node.nic
        .set_admin_timeout(std::time::Duration::from_millis(20));
    peer
}

/// One refusal through the write window (the drop count 1), then a function reset (the count
/// back to 0): the next write through the window, dropped by a NIC that lost its tables,
/// counts 1 again — the count the driver last read. It is not taken as stored.
#[test]
fn a_window_write_dropped_after_a_reset_is_not_taken_as_stored() {
    let (_f, fns) = fabric(1);
    let function = fns[0].clone();
    let mut node = Node::new(function.clone(), 1, 8);
    let peer = one_window_write_dropped(&mut node, &function, 0x61);
    function.function_level_reset();
    let r = node.av.insert(&peer(0x62), 1, None, 0);
    assert_eq!(function.counter(AV_WRITE_DROPS), 1, "the NIC dropped it");
    assert!(r.is_err(), "an entry the NIC dropped was reported inserted");
}

/// A record of `addr` at `index` that the NIC refuses, through the window as in a batch: an
/// entry without VALID that is not all zero.
fn refused_record(addr: &[u8; 32], index: u32) -> uet_fwif::AvWriteRecord {
    let mut entry = NicAvEntry::for_peer(&uet_fwif::UetAddress::from_bytes(addr).unwrap(), 1);
    entry.flags = zerocopy::little_endian::U16::new(0);
    uet_fwif::AvWriteRecord {
        index: index.into(),
        reserved: Default::default(),
        entry,
    }
}

/// A hook resetting the function, once armed, right after the driver's next read of
/// `AV_WRITE_DROPS` has returned: between the count a window write reads before it rings and
/// its doorbell.
struct ResetAfterCountRead {
    armed: std::sync::atomic::AtomicBool,
    function: uet_sim::SimFunction,
}

impl uet_tests::BarHook for ResetAfterCountRead {
    fn read64(&self, offset: u32, value: u64) -> u64 {
        use std::sync::atomic::Ordering;
        if offset == AV_WRITE_DROPS.offset() && self.armed.swap(false, Ordering::AcqRel) {
            self.function.function_level_reset();
        }
        value
    }
}

/// One refusal through the write window (the drop count 1); then the function is reset after
/// the next window write read the count (1) and before it rang. The NIC, which lost its
/// tables, drops the entry and counts 1 again: the count the write read before it rang. The
/// entry is not taken as stored.
#[test]
fn a_window_write_dropped_by_a_reset_while_it_rang_is_not_taken_as_stored() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_f, function, device, mut node) = hooked_node(|function| ResetAfterCountRead {
        armed: AtomicBool::new(false),
        function: function.clone(),
    });
    let peer = one_window_write_dropped(&mut node, &function, 0x51);
    device.hook.armed.store(true, Ordering::Release);
    let r = node.av.insert(&peer(0x52), 1, None, 0);
    assert!(!device.hook.armed.load(Ordering::Acquire), "the reset came");
    assert_eq!(function.counter(AV_WRITE_DROPS), 1, "the NIC dropped it");
    let e = r.expect_err("an entry the NIC dropped was reported inserted");
    assert!(e.message.contains("is not known"), "{e}");
}

/// A path to the NIC that splits each `AV_INVALIDATE_DOORBELL` write into its two 32-bit
/// halves, low half first, as some PCIe paths do; while armed, the high half waits until
/// another invalidation's low half has come as well (or a second has passed), as when two
/// CPUs ring at once.
struct SplitInvalidations {
    armed: std::sync::atomic::AtomicBool,
    low_halves: std::sync::atomic::AtomicU32,
}

impl uet_tests::BarHook for SplitInvalidations {
    fn write64(&self, bar: &dyn uet_regs::Mmio, offset: u32, value: u64) {
        use std::sync::atomic::Ordering;
        if offset != uet_regs::AV_INVALIDATE_DOORBELL.offset() {
            return bar.write64(offset, value);
        }
        bar.write32(offset, value as u32);
        if self.armed.load(Ordering::Acquire) {
            self.low_halves.fetch_add(1, Ordering::AcqRel);
            let give_up = std::time::Instant::now() + std::time::Duration::from_secs(1);
            while self.low_halves.load(Ordering::Acquire) < 2 && std::time::Instant::now() < give_up
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        bar.write32(offset + 4, (value >> 32) as u32);
    }
}

/// Two threads remove an entry each from two AVs of one NIC at once, on a path that splits
/// the invalidation doorbell into halves: each AV loses exactly its own entry. The NIC acts on
/// a split doorbell when the high half (the table) comes, with the low half (the index) it
/// holds; halves of two doorbells that interleave invalidate one table's entry at the other's
/// index and drop the other invalidation, so a removed peer stays reachable and another AV
/// loses a live one.
#[test]
fn removals_from_two_avs_at_once_through_split_doorbells_invalidate_their_own_entries() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let (_f, _function, device, mut node) = hooked_node(|_| SplitInvalidations {
        armed: AtomicBool::new(false),
        low_halves: AtomicU32::new(0),
    });
    let mut other = node
        .nic
        .open_av(uet_av::AvAttr {
            count: 8,
            job_id: 1,
            ..uet_av::AvAttr::default()
        })
        .unwrap();
    let own = *node.ep.address();
    let peers: Vec<u8> = (0..4)
        .flat_map(|i| uet_tests::forged(&own, |a| a.initiator = 0x80 + i))
        .collect();
    assert_eq!(node.av.insert(&peers, 4, None, 0).unwrap(), 4);
    assert_eq!(other.insert(&peers, 4, None, 0).unwrap(), 4);
    device.hook.armed.store(true, Ordering::Release);
    let av = &mut node.av;
    std::thread::scope(|s| {
        let a = s.spawn(|| av.remove(&[1], 0));
        let b = s.spawn(|| other.remove(&[2], 0));
        a.join().unwrap().unwrap();
        b.join().unwrap().unwrap();
    });
    assert_eq!(device.hook.low_halves.load(Ordering::Acquire), 2);
    assert_nic_equals_mirror(&mut node, "after removing index 1");
    assert!(
        other.verify_nic().unwrap().is_empty(),
        "the other AV's NIC table differs from its mirror after removing index 2"
    );
}
