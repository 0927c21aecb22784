//! Commands the NIC leaves unanswered (`NicError::in_doubt`): they may be applied late, or
//! never. The mirror keeps what it held — inserted records stay, removed addresses stay — and
//! the AV rewrites the entries concerned on the NIC at its next settling call, so mirror and
//! NIC agree whichever way the command went.

mod common;

use common::*;
use uet_av::{Fault, FiErrno, NicOp, FI_ADDR_NOTAVAIL, FI_AV_USER_ID, FI_MORE};

fn lookup(av: &uet_av::AddressVector<uet_av::MemoryNicTable>, fi_addr: u64) -> [u8; 32] {
    let (mut out, mut len) = ([0u8; 32], 32);
    av.lookup(fi_addr, &mut out, &mut len).expect("lookup");
    out
}

#[test]
fn an_unanswered_insert_stays_and_reaches_the_nic_either_way() {
    for applied in [false, true] {
        let mut av = open(16);
        insert_peers(&mut av, &[1]);
        av.nic_mut()
            .inject(NicOp::Write, 0, Fault::InDoubt { applied });
        let buf = pack(&[peer_bytes(2), peer_bytes(3)]);
        let mut fi = [0u64; 2];
        let e = av.insert(&buf, 2, Some(&mut fi), 0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EIO);
        assert!(e.message.contains("did not answer"), "{e}");
        assert!(e.message.contains("2 stay inserted"), "{e}");
        assert_eq!(fi, [1, 2], "kept at their indices (applied: {applied})");
        assert_eq!(av.len(), 3);
        assert_eq!(lookup(&av, 2), peer_bytes(3));
        // The next settling call rewrites them on the NIC.
        av.settle().unwrap();
        assert_in_step(&av);
        assert!(av.verify_nic().unwrap().is_empty());
    }
}

#[test]
fn an_unanswered_remove_keeps_the_addresses_and_the_nic_gets_them_back() {
    for applied in [false, true] {
        let mut av = open(16);
        let fi = insert_peers(&mut av, &[1, 2, 3]);
        av.nic_mut()
            .inject(NicOp::Invalidate, 0, Fault::InDoubt { applied });
        let e = av.remove(&fi[..2], 0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EIO);
        assert!(e.message.contains("did not answer"), "{e}");
        assert_eq!(av.len(), 3, "nothing removed (applied: {applied})");
        assert_eq!(av.nic().entry(0).unwrap().is_valid(), !applied);
        // A remove of another address settles first: the two are rewritten, then it goes.
        av.remove(&fi[2..], 0).unwrap();
        assert_in_step(&av);
        assert_eq!(lookup(&av, fi[0]), peer_bytes(1));
        // And a remove of the two now removes them.
        av.remove(&fi[..2], 0).unwrap();
        assert_eq!(av.len(), 0);
        assert_in_step(&av);
    }
}

#[test]
fn an_unanswered_single_remove_and_user_id_are_rewritten() {
    let mut av = open_with(uet_av::AvAttr {
        count: 8,
        flags: FI_AV_USER_ID,
        ..uet_av::AvAttr::default()
    });
    let fi = insert_peers(&mut av, &[1, 2]);
    av.nic_mut()
        .inject(NicOp::Invalidate, 0, Fault::InDoubt { applied: true });
    assert_eq!(av.remove(&fi[..1], 0).unwrap_err().errno, FiErrno::FI_EIO);
    av.nic_mut()
        .inject(NicOp::Write, 0, Fault::InDoubt { applied: true });
    // Settling rewrites index 0 (that AV_WRITE meets the fault: index 0 stays in doubt) ...
    assert!(av.set_user_id(fi[1], 0x51, 0).is_err());
    // ... and the user id of index 1, refused, is unchanged on the host.
    assert_eq!(av.user_id(fi[1]).unwrap(), Some(FI_ADDR_NOTAVAIL));
    av.settle().unwrap();
    assert_in_step(&av);
    av.set_user_id(fi[1], 0x51, 0).unwrap();
    assert_eq!(av.nic().entry(1).unwrap().user_id.get(), 0x51);
    assert_in_step(&av);
}

#[test]
fn a_repair_that_fails_leaves_the_entries_in_doubt_until_one_succeeds() {
    let mut av = open(8);
    av.nic_mut()
        .inject(NicOp::Write, 0, Fault::InDoubt { applied: false });
    let mut fi = [0u64; 2];
    assert!(av
        .insert(&pack(&[peer_bytes(1), peer_bytes(2)]), 2, Some(&mut fi), 0)
        .is_err());
    // The repair's AV_INVALIDATE is refused: the call fails, naming the entries in doubt.
    av.nic_mut().fail_after(NicOp::Invalidate, 0);
    let e = av.settle().unwrap_err();
    assert!(e.message.contains("2 NIC entries are in doubt"), "{e}");
    assert!(!av.nic().entry(0).unwrap().is_valid(), "not rewritten yet");
    av.settle().unwrap();
    assert_in_step(&av);
    assert_eq!(lookup(&av, fi[1]), peer_bytes(2));
}

#[test]
fn an_unanswered_symmetric_insert_stays_a_range_on_the_host() {
    let mut av = open(64);
    av.nic_mut()
        .inject(NicOp::Write, 0, Fault::InDoubt { applied: false });
    let mut fi = vec![0u64; 12];
    let e = av
        .insertsym("10.9.0.1", 3, "7", 4, Some(&mut fi), 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert_eq!(fi, (0..12).collect::<Vec<u64>>(), "kept");
    assert_eq!(av.ranges().count(), 1, "still one range on the host");
    av.settle().unwrap();
    assert_in_step(&av);
    // Its members come and go as ever.
    av.remove(&[3, 4], 0).unwrap();
    assert_in_step(&av);
    assert_eq!(av.len(), 10);
}

#[test]
fn a_range_with_holes_and_singles_is_rebuilt_as_the_mirror_holds_it() {
    for applied in [false, true] {
        let mut av = open(64);
        let mut fi = vec![0u64; 12];
        av.insertsym("10.9.0.1", 3, "7", 4, Some(&mut fi), 0, None)
            .unwrap();
        av.remove(&[3, 4], 0).unwrap();
        // A single entry in the hole at 3 (the lowest free index).
        assert_eq!(insert_peers(&mut av, &[500]), [3]);
        av.nic_mut()
            .inject(NicOp::Invalidate, 0, Fault::InDoubt { applied });
        assert!(av.remove(&[5, 6, 3], 0).is_err());
        assert_eq!(av.len(), 11, "nothing removed (applied: {applied})");
        av.settle().unwrap();
        assert_in_step(&av);
        assert_eq!(av.ranges().count(), 1);
        assert_eq!(lookup(&av, 3), peer_bytes(500));
        av.remove(&[5, 6, 3], 0).unwrap();
        assert_in_step(&av);
        assert_eq!(av.len(), 8);
    }
}

/// The repair leaves `FI_MORE` records not sent yet to their flush: a flush refused after
/// a repair rolls them back with nothing of theirs on the NIC.
#[test]
fn a_repair_does_not_send_pending_records() {
    let mut av = open(64);
    let mut fi = vec![0u64; 8];
    av.insertsym("10.9.0.1", 2, "7", 4, Some(&mut fi), 0, None)
        .unwrap();
    av.remove(&[2], 0).unwrap();
    av.nic_mut()
        .inject(NicOp::Invalidate, 0, Fault::InDoubt { applied: true });
    assert!(av.remove(&[5], 0).is_err());
    // Pending, in the hole at 2 (inside the span in doubt).
    let mut f = [0u64; 1];
    av.insert(&peer_bytes(900), 1, Some(&mut f), FI_MORE)
        .unwrap();
    assert_eq!(f, [2]);
    // The repair's commands pass; the flush after it is refused.
    av.nic_mut().fail_after(NicOp::Write, 1);
    assert_eq!(av.settle().unwrap_err().errno, FiErrno::FI_EIO);
    assert!(av.address_bytes(2).is_none(), "rolled back on the host");
    assert_in_step(&av);
}

/// An insert rewrites the entries in doubt before it sends its own record; when it cannot,
/// it rolls its addresses back.
#[test]
fn an_insert_repairs_first_or_rolls_back() {
    let mut av = open(16);
    let fi = insert_peers(&mut av, &[1, 2]);
    av.nic_mut()
        .inject(NicOp::Invalidate, 0, Fault::InDoubt { applied: true });
    assert!(av.remove(&fi, 0).is_err());
    av.nic_mut().fail_after(NicOp::Invalidate, 0);
    let mut out = [0u64; 1];
    let e = av.insert(&peer_bytes(3), 1, Some(&mut out), 0).unwrap_err();
    assert!(e.message.contains("rolled back"), "{e}");
    assert_eq!(out, [FI_ADDR_NOTAVAIL]);
    assert_eq!(av.len(), 2);
    // Now the repair passes, and the insert goes in after it.
    assert_eq!(insert_peers(&mut av, &[3]), [2]);
    assert_in_step(&av);
    assert_eq!(lookup(&av, fi[0]), peer_bytes(1));
}

/// An `FI_MORE` batch larger than one AV_WRITE whose second command goes unanswered: the whole
/// batch stays inserted — the chunk the NIC accepted, the unanswered one and the unsent one
/// after it — so every `fi_addr` the batch returned, in this call or the earlier one, stands;
/// the next settling call writes what the NIC may lack.
#[test]
fn an_unanswered_chunk_of_a_large_batch_keeps_the_whole_batch() {
    const CHUNK: u32 = uet_fwif::admin::MAX_BATCH;
    for applied in [false, true] {
        let mut av = open(3 * CHUNK as usize);
        // An earlier FI_MORE call, then the call that ends the batch: three AV_WRITEs in all.
        let first: Vec<u32> = (0..CHUNK + 10).collect();
        let second: Vec<u32> = (CHUNK + 10..2 * CHUNK + 100).collect();
        let bytes = |ns: &[u32]| pack(&ns.iter().map(|&n| peer_bytes(n)).collect::<Vec<_>>());
        let mut fi_first = vec![0u64; first.len()];
        let n = av
            .insert(&bytes(&first), first.len(), Some(&mut fi_first), FI_MORE)
            .unwrap();
        assert_eq!(n, first.len());
        av.nic_mut()
            .inject(NicOp::Write, 1, Fault::InDoubt { applied });
        let mut fi_second = vec![0u64; second.len()];
        let e = av
            .insert(&bytes(&second), second.len(), Some(&mut fi_second), 0)
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EIO);
        assert!(e.message.contains("did not answer"), "{e}");
        let total = first.len() + second.len();
        assert!(
            e.message.contains(&format!("all {total} stay inserted")),
            "{e}"
        );
        assert_eq!(av.len(), total, "applied: {applied}");
        assert_eq!(av.entries_in_doubt(), total - CHUNK as usize);
        // Every fi_addr of both calls stands, with its address.
        for (fi, n) in fi_first
            .iter()
            .zip(&first)
            .chain(fi_second.iter().zip(&second))
        {
            assert_eq!(*fi, u64::from(*n), "lowest free, in order");
            assert_eq!(lookup(&av, *fi), peer_bytes(*n));
        }
        // The NIC holds the accepted chunk already; the rest arrives at the next settle.
        assert!(av.nic().entry(0).unwrap().is_valid());
        av.settle().unwrap();
        assert_eq!(av.entries_in_doubt(), 0);
        assert_in_step(&av);
        assert!(av.verify_nic().unwrap().is_empty());
    }
}

/// A range whose first index was removed, then a remove of other members goes unanswered,
/// then an insert takes that first index (the lowest free one): its flush repairs the range
/// first, and a single entry pending at the range's first index does not make the range's own
/// record look unsent, so the repair rewrites the range whole (found by the `av_calls` fuzz
/// target).
#[test]
fn an_insert_into_the_first_index_of_a_range_in_doubt_repairs_the_range_whole() {
    for applied in [false, true] {
        let mut av = open(16);
        let mut fi = vec![0u64; 16];
        av.insertsym("20.0.0.1", 8, "1?ri=1+2", 2, Some(&mut fi), 0, None)
            .unwrap();
        av.remove(&[10, 8], 0).unwrap();
        av.remove(&[2, 0], 0).unwrap();
        av.nic_mut()
            .inject(NicOp::Invalidate, 0, Fault::InDoubt { applied });
        assert!(av.remove(&[3, 11, 9], 0).is_err());
        assert_eq!(av.len(), 12, "nothing removed (applied: {applied})");
        assert_eq!(insert_peers(&mut av, &[500]), [0]);
        let differ: Vec<u32> = av.verify_nic().unwrap().iter().map(|m| m.index).collect();
        assert!(differ.is_empty(), "applied: {applied}: {differ:?}");
        assert_in_step(&av);
        assert_eq!(lookup(&av, 0), peer_bytes(500));
        assert_eq!(av.ranges().count(), 1);
    }
}
