//! fi_av(3) rules of the AddressVector, one test per rule.

mod common;

use common::*;
use uet_av::{
    fi_rx_addr, straddr, AddressVector, AvAttr, AvLimits, AvType, Fault, FiErrno, FiError,
    MemoryNicTable, NicOp, ADDR_LEN, DEFAULT_AV_COUNT, FI_ADDR_NOTAVAIL, FI_AUTH_KEY,
    FI_AV_USER_ID, FI_EVENT, FI_MORE, FI_READ, FI_SYMMETRIC, FI_SYNC_ERR,
};
use uet_fwif::admin::MAX_BATCH;
use uet_fwif::av_entry::entry_flags;
use uet_fwif::NicAvEntry;

fn errno<T: std::fmt::Debug>(r: Result<T, uet_av::FiError>) -> FiErrno {
    r.expect_err("call should fail").errno
}

// ---------------------------------------------------------------------------------------------
// open

#[test]
fn every_type_behaves_as_table() {
    for t in [AvType::Unspec, AvType::Map, AvType::Table] {
        let av = open_with(AvAttr {
            av_type: t,
            count: 8,
            ..AvAttr::default()
        });
        assert_eq!(av.av_type(), AvType::Table);
        assert_eq!(av.attr().av_type, AvType::Table);
        assert_eq!(av.capacity(), 8);
    }
}

#[test]
fn count_zero_means_default_bounded_by_the_nic() {
    let av = open(0);
    assert_eq!(av.capacity(), DEFAULT_AV_COUNT);
    assert_eq!(av.attr().count, DEFAULT_AV_COUNT);
    let small = AvLimits::new(100, 0);
    let attr = AvAttr::default();
    let av = AddressVector::open(MemoryNicTable::new(100), attr, small).unwrap();
    assert_eq!(av.capacity(), 100);
}

#[test]
fn open_rejects_bad_attributes() {
    let open = |attr: AvAttr, limits: AvLimits| {
        AddressVector::open(MemoryNicTable::new(1), attr, limits).map(|_| ())
    };
    let count = |c| AvAttr {
        count: c,
        ..AvAttr::default()
    };
    assert_eq!(
        errno(open(count(LIMITS.max_entries as usize + 1), LIMITS)),
        FiErrno::FI_ENOSPC
    );
    assert!(open(count(LIMITS.max_entries as usize), LIMITS).is_ok());
    let rx = AvAttr {
        rx_ctx_bits: LIMITS.max_rx_ctx_bits + 1,
        ..count(4)
    };
    assert_eq!(errno(open(rx, LIMITS)), FiErrno::FI_EOVERFLOW);
    let job = AvAttr {
        job_id: 0x0100_0000,
        ..count(4)
    };
    assert_eq!(errno(open(job, LIMITS)), FiErrno::FI_EINVAL);
    let none = AvLimits::new(0, 0);
    assert_eq!(errno(open(count(0), none)), FiErrno::FI_ENOSPC);
    // The index must fit below the rx-context bits.
    let wide = AvLimits::new(u32::MAX, 40);
    let crowded = AvAttr {
        rx_ctx_bits: 40,
        ..count(1 << 24)
    };
    assert_eq!(errno(crowded.resolve(&wide)), FiErrno::FI_EOVERFLOW);
    assert!(AvAttr {
        count: (1 << 24) - 1,
        ..crowded
    }
    .resolve(&wide)
    .is_ok());
}

#[test]
fn open_flags_are_checked_by_name() {
    // FI_EVENT, FI_SYMMETRIC (a hint) and FI_AV_USER_ID are supported.
    for f in [
        FI_EVENT,
        FI_SYMMETRIC,
        FI_AV_USER_ID,
        FI_EVENT | FI_AV_USER_ID,
    ] {
        let attr = AvAttr {
            count: 4,
            flags: f,
            ..AvAttr::default()
        };
        assert!(attr.resolve(&LIMITS).is_ok(), "{f:#x}");
    }
    // FI_READ opens an existing named AV; without a name it is invalid.
    let attr = AvAttr {
        count: 4,
        flags: FI_READ,
        ..AvAttr::default()
    };
    let e = attr.resolve(&LIMITS).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("FI_READ"), "{e}");
    let attr = AvAttr {
        count: 4,
        flags: 1 << 3,
        ..AvAttr::default()
    };
    let e = attr.resolve(&LIMITS).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS);
    assert!(e.message.contains("unknown flags 0x8"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// insert

#[test]
fn indices_are_sequential_across_calls() {
    let mut av = open(16);
    assert_eq!(insert_peers(&mut av, &[1, 2, 3]), vec![0, 1, 2]);
    assert_eq!(insert_peers(&mut av, &[4]), vec![3]);
    assert_eq!(av.len(), 4);
    assert_eq!(av.addrlen(), ADDR_LEN);
    assert_in_step(&av);
}

#[test]
fn insert_takes_the_lowest_free_index_after_remove() {
    let mut av = open(16);
    insert_peers(&mut av, &[10, 11, 12, 13, 14]);
    av.remove(&[3, 1], 0).unwrap();
    assert_eq!(av.len(), 3);
    assert_eq!(insert_peers(&mut av, &[20]), vec![1]);
    assert_eq!(insert_peers(&mut av, &[21, 22]), vec![3, 5]);
    let mut buf = [0u8; ADDR_LEN];
    let mut len = ADDR_LEN;
    av.lookup(3, &mut buf, &mut len).unwrap();
    assert_eq!(buf, peer_bytes(21));
    assert_in_step(&av);
}

#[test]
fn bad_addresses_fail_alone() {
    let mut av = open(16);
    let buf = pack(&[peer_bytes(1), bad_bytes(2), peer_bytes(3), [0; ADDR_LEN]]);
    let mut out = [0u64; 4];
    assert_eq!(av.insert(&buf, 4, Some(&mut out), 0).unwrap(), 2);
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1, FI_ADDR_NOTAVAIL]);
    let mut got = [0u8; ADDR_LEN];
    let mut len = ADDR_LEN;
    av.lookup(1, &mut got, &mut len).unwrap();
    assert_eq!(got, peer_bytes(3));
    assert_eq!(av.len(), 2);
    assert_in_step(&av);
}

#[test]
fn null_fi_addr_is_allowed() {
    let mut av = open(16);
    let buf = pack(&[peer_bytes(1), bad_bytes(9), peer_bytes(2)]);
    assert_eq!(av.insert(&buf, 3, None, 0).unwrap(), 2);
    assert_eq!(av.address(0).unwrap(), peer(1));
    assert_eq!(av.address(1).unwrap(), peer(2));
    assert_in_step(&av);
}

#[test]
fn short_buffers_are_invalid_and_insert_nothing() {
    let mut av = open(16);
    let buf = pack(&[peer_bytes(1), peer_bytes(2)]);
    assert_eq!(errno(av.insert(&buf[..63], 2, None, 0)), FiErrno::FI_EINVAL);
    let mut out = [7u64; 1];
    assert_eq!(
        errno(av.insert(&buf, 2, Some(&mut out), 0)),
        FiErrno::FI_EINVAL
    );
    assert_eq!(out, [7], "fi_addr untouched");
    assert_eq!(
        errno(av.insert(&buf, usize::MAX, None, 0)),
        FiErrno::FI_EINVAL
    );
    assert_eq!(av.len(), 0);
    assert_eq!(av.nic().counters().commands(), 0);
    // A longer buffer is fine: only `count` addresses are read.
    assert_eq!(av.insert(&buf, 1, None, 0).unwrap(), 1);
    assert_eq!(av.insert(&[], 0, None, 0).unwrap(), 0);
    assert_eq!(av.len(), 1);
}

#[test]
fn full_table_fails_the_extra_addresses() {
    let mut av = open(2);
    let buf = pack(&[peer_bytes(1), peer_bytes(2), peer_bytes(3)]);
    let mut out = [0u64; 3];
    assert_eq!(av.insert(&buf, 3, Some(&mut out), 0).unwrap(), 2);
    assert_eq!(out, [0, 1, FI_ADDR_NOTAVAIL]);
    assert_eq!(av.insert(&buf, 1, Some(&mut out), 0).unwrap(), 0);
    assert_eq!(out[0], FI_ADDR_NOTAVAIL);
    av.remove(&[0], 0).unwrap();
    assert_eq!(insert_peers(&mut av, &[4]), vec![0]);
    assert_in_step(&av);
}

#[test]
fn insert_flags_not_supported_are_refused() {
    let mut av = open(16);
    let buf = pack(&[peer_bytes(1)]);
    av.insert(&buf, 1, None, FI_MORE).unwrap();
    // Refused calls with FI_MORE leave the batch pending.
    let e = av.insert(&buf, 1, None, FI_MORE | (1 << 3)).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS, "{e}");
    // FI_SYNC_ERR without the status array (a NULL context) and FI_AUTH_KEY outside an
    // FI_AV_AUTH_KEY domain are invalid arguments.
    for f in [FI_MORE | FI_SYNC_ERR, FI_MORE | FI_AUTH_KEY] {
        let e = av.insert(&buf, 1, None, f).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    }
    assert_eq!(av.pending_len(), 1, "still batched");
    assert!(!av.nic().entry(0).unwrap().is_valid());
    // A refused call without FI_MORE is refused too, and ends the batch (fi_av(3): a call
    // without FI_MORE "signifies to the provider that the insertion list is complete").
    let e = av.insert(&buf, 1, None, 1 << 3).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS, "{e}");
    assert_eq!(av.pending_len(), 0, "the batch before it was sent");
    assert!(av.nic().entry(0).unwrap().is_valid());
    // FI_AV_USER_ID without the fi_addr array that holds the user ids is invalid too.
    for f in [FI_SYNC_ERR, FI_AV_USER_ID, FI_AUTH_KEY] {
        let e = av.insert(&buf, 1, None, f).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    }
    assert_eq!(av.len(), 1);
    assert_eq!(errno(av.remove(&[0], FI_AUTH_KEY)), FiErrno::FI_EINVAL);
    assert_eq!(errno(av.remove(&[0], FI_AV_USER_ID)), FiErrno::FI_EBADFLAGS);
    assert_eq!(errno(av.remove(&[0], 1 << 3)), FiErrno::FI_EBADFLAGS);
    assert_eq!(av.len(), 1);
}

/// A call without FI_MORE that fails for what it was given — a host name that does not
/// resolve, a malformed service — still ends the batch before it; when the NIC refuses that
/// batch, the earlier calls' inserts are rolled back, and the call fails with `FI_EIO`, its
/// message naming its own error and the batch's.
#[test]
fn a_refused_call_without_fi_more_ends_the_batch_before_it() {
    let mut av = open(16);
    let mut fa = [0u64; 1];
    av.insert(&pack(&[peer_bytes(1)]), 1, Some(&mut fa), FI_MORE)
        .unwrap();
    let e = av
        .insertsvc("10.0.0.9", Some("not-a-service"), None, 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert_eq!(av.pending_len(), 0);
    assert!(av.nic().entry(0).unwrap().is_valid());
    av.insert(&pack(&[peer_bytes(2)]), 1, None, FI_MORE)
        .unwrap();
    av.nic_mut().fail_after(NicOp::Write, 0);
    let e = av
        .insertsym("10.0.0.1", 1, "4095", 2, None, 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(e.message.contains("FI_MORE batch"), "{e}");
    assert!(e.message.contains("FI_EINVAL"), "the call's own error: {e}");
    assert_eq!(av.len(), 1, "the refused batch is rolled back");
    assert_in_step(&av);
}

/// A call a C shim refuses before the AV sees it ends as one the AV refuses: with `FI_MORE`
/// the batch stays open, without it the batch is sent, and the call's error comes back.
#[test]
fn an_insert_refused_before_the_av_saw_it_ends_the_batch_as_the_av_would() {
    let mut av = open(16);
    av.insert(&pack(&[peer_bytes(1)]), 1, None, FI_MORE)
        .unwrap();
    let e = av
        .refuse_insert(FI_MORE, FiError::inval("fi_av_insertsvc: node is NULL"))
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert_eq!(av.pending_len(), 1, "still batched");
    let e = av
        .refuse_insert(0, FiError::inval("fi_av_insertsvc: node is NULL"))
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("node is NULL"), "{e}");
    assert_eq!(av.pending_len(), 0, "the batch before it was sent");
    assert!(av.nic().entry(0).unwrap().is_valid());
    assert_in_step(&av);
}

#[test]
fn nic_entries_carry_the_job_id_and_the_address() {
    let mut av = open(4);
    insert_peers(&mut av, &[5, 1003]);
    for (index, addr) in av.iter().collect::<Vec<_>>() {
        let e = av.nic().entry(index).copied().unwrap();
        assert_eq!(e.job_id.get(), 0x00ab_cdef);
        assert_eq!(e, NicAvEntry::for_peer(&addr, 0x00ab_cdef));
    }
    assert_eq!(av.mirror_entry(2), Some(NicAvEntry::INVALID));
    assert_eq!(av.mirror_entry(4), None);
    assert_eq!(
        av.iter().collect::<Vec<_>>(),
        vec![(0, peer(5)), (1, peer(1003))]
    );
}

// ---------------------------------------------------------------------------------------------
// FI_MORE

#[test]
fn fi_more_batches_into_one_nic_write() {
    let mut av = open(64);
    let mut expect = 0;
    for call in 0..4u32 {
        let ns: Vec<u32> = (0..3).map(|k| call * 3 + k).collect();
        let buf = pack(&ns.iter().map(|&n| peer_bytes(n)).collect::<Vec<_>>());
        let mut out = [0u64; 3];
        assert_eq!(av.insert(&buf, 3, Some(&mut out), FI_MORE).unwrap(), 3);
        assert_eq!(out, [expect, expect + 1, expect + 2]);
        expect += 3;
        // The mirror answers at once.
        assert_eq!(av.address(out[2]).unwrap(), peer(ns[2]));
    }
    assert_eq!(av.nic().counters().commands(), 0);
    assert_eq!(av.pending_len(), 12);
    assert_eq!(av.nic().valid_count(), 0);

    assert_eq!(insert_peers(&mut av, &[100]), vec![12]);
    let c = av.nic().counters();
    assert_eq!(c.writes, 1, "one AV_WRITE for the whole batch");
    assert_eq!(c.records_written, 13);
    assert_eq!(c.commands(), 1);
    assert_in_step(&av);

    // Without FI_MORE, one write per call.
    insert_peers(&mut av, &[101, 102]);
    insert_peers(&mut av, &[103]);
    assert_eq!(av.nic().counters().writes, 3);
}

#[test]
fn an_insert_of_nothing_without_fi_more_ends_the_batch() {
    let mut av = open(8);
    av.insert(&peer_bytes(1), 1, None, FI_MORE).unwrap();
    av.insert(&[], 0, None, 0).unwrap();
    assert_eq!(av.nic().counters().writes, 1);
    assert_in_step(&av);
}

#[test]
fn remove_and_verify_send_pending_records_first() {
    let mut av = open(8);
    av.insert(&pack(&[peer_bytes(1), peer_bytes(2)]), 2, None, FI_MORE)
        .unwrap();
    av.remove(&[0], 0).unwrap();
    let c = av.nic().counters();
    assert_eq!((c.writes, c.invalidates), (1, 1));
    assert_in_step(&av);

    av.insert(&peer_bytes(3), 1, None, FI_MORE).unwrap();
    assert!(av.verify_nic().unwrap().is_empty());
    assert_eq!(av.pending_len(), 0);
    assert_in_step(&av);

    av.insert(&peer_bytes(4), 1, None, FI_MORE).unwrap();
    av.flush().unwrap();
    assert_in_step(&av);
}

#[test]
fn batches_above_max_batch_go_in_chunks() {
    let n = MAX_BATCH + 10;
    let mut av = open(n as usize);
    let buf: Vec<u8> = (0..n).flat_map(peer_bytes).collect();
    assert_eq!(
        av.insert(&buf, n as usize, None, FI_MORE).unwrap(),
        n as usize
    );
    av.flush().unwrap();
    let c = av.nic().counters();
    assert_eq!(c.writes, 2);
    assert_eq!(c.records_written, u64::from(n));
    let all: Vec<u64> = (0..u64::from(n)).collect();
    av.remove(&all, 0).unwrap();
    assert_eq!(av.nic().counters().invalidates, 2);
    assert!(av.is_empty());
    assert_eq!(av.nic().valid_count(), 0);
    assert!(av.verify_nic().unwrap().is_empty());
    assert_eq!(av.nic().counters().reads, 2);
}

// ---------------------------------------------------------------------------------------------
// NIC failures

#[test]
fn failed_nic_write_rolls_back_the_whole_batch() {
    let mut av = open(16);
    insert_peers(&mut av, &[1, 2]);
    let mut early = [0u64; 3];
    av.insert(
        &pack(&[peer_bytes(3), peer_bytes(4), peer_bytes(5)]),
        3,
        Some(&mut early),
        FI_MORE,
    )
    .unwrap();
    assert_eq!(early, [2, 3, 4]);

    av.nic_mut().fail_after(NicOp::Write, 0);
    let mut out = [0u64; 2];
    let e = av
        .insert(&pack(&[peer_bytes(6), bad_bytes(7)]), 2, Some(&mut out), 0)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert_eq!(e.to_neg_errno(), -5);
    assert!(e.message.contains("injected fault"), "{e}");
    assert_eq!(out, [FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL]);

    assert!(
        e.message
            .contains("3 of the indices were returned by earlier FI_MORE calls"),
        "{e}"
    );

    assert_eq!(av.len(), 2);
    assert_eq!(av.pending_len(), 0);
    for fa in 2..6 {
        assert_eq!(errno(av.address(fa)), FiErrno::FI_EINVAL);
    }
    let e = av.address(3).unwrap_err();
    assert!(e.message.contains("fi_av_remove frees the index"), "{e}");
    assert_in_step(&av);
    assert!(av.verify_nic().unwrap().is_empty());
    // The earlier call's indices (2, 3, 4), which the application still holds, are lost: no
    // insert takes them. The ending call's own index (5) is free again.
    assert_eq!(av.lost_len(), 3);
    assert_eq!(av.indices().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(insert_peers(&mut av, &[8]), vec![5]);
    // Removing a lost index frees it, alone or in a list, once; nothing else is touched.
    av.remove(&[3], 0).unwrap();
    assert_eq!(
        errno(av.remove(&[3], 0)),
        FiErrno::FI_EINVAL,
        "removed twice"
    );
    assert_eq!(
        errno(av.remove(&[2, 2], 0)),
        FiErrno::FI_EINVAL,
        "listed twice"
    );
    assert_eq!(errno(av.remove(&[2, 4, 9], 0)), FiErrno::FI_EINVAL);
    assert_eq!(av.lost_len(), 2, "a refused remove frees nothing");
    av.remove(&[2, 5, 4], 0).unwrap();
    assert_eq!(av.lost_len(), 0);
    assert_eq!(av.len(), 2);
    assert_eq!(insert_peers(&mut av, &[9, 10, 11]), vec![2, 3, 4]);
    assert_in_step(&av);
}

#[test]
fn failed_write_of_a_later_chunk_takes_back_the_earlier_ones() {
    let n = MAX_BATCH + 5;
    let mut av = open(n as usize);
    insert_peers(&mut av, &[0]);
    let buf: Vec<u8> = (1..n).flat_map(peer_bytes).collect();
    av.insert(&buf, (n - 1) as usize, None, FI_MORE).unwrap();
    av.nic_mut().fail_after(NicOp::Write, 1);
    assert_eq!(errno(av.flush()), FiErrno::FI_EIO);
    assert_eq!(av.len(), 1);
    assert_in_step(&av);
    assert_eq!(av.nic().valid_count(), 1);
}

#[test]
fn failed_flush_during_remove_removes_nothing_else() {
    let mut av = open(8);
    insert_peers(&mut av, &[1]);
    av.insert(&peer_bytes(2), 1, None, FI_MORE).unwrap();
    av.nic_mut().fail_after(NicOp::Write, 0);
    assert_eq!(errno(av.remove(&[0], 0)), FiErrno::FI_EIO);
    assert_eq!(av.len(), 1);
    assert_eq!(av.address(0).unwrap(), peer(1));
    assert_in_step(&av);
}

#[test]
fn failed_nic_invalidate_keeps_the_addresses() {
    let mut av = open(8);
    insert_peers(&mut av, &[1, 2, 3]);
    av.nic_mut().fail_after(NicOp::Invalidate, 0);
    let e = av.remove(&[0, 2], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert!(e.message.contains("injected fault"), "{e}");
    assert!(
        e.message
            .contains("2 entries (0 of 2 removed before them, the rest stay inserted)"),
        "{e}"
    );
    assert_eq!(av.len(), 3);
    assert_in_step(&av);
    av.remove(&[0, 2], 0).unwrap();
    assert_eq!(av.len(), 1);
    assert_in_step(&av);
    // A single address takes its own path: the same outcome.
    av.nic_mut().fail_after(NicOp::Invalidate, 0);
    let e = av.remove(&[1], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert!(
        e.message.contains("index 1") && e.message.contains("injected fault"),
        "{e}"
    );
    assert_eq!(av.len(), 1);
    assert_in_step(&av);
    let e = av.remove(&[0], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("fi_addr[0]"), "{e}");
    av.remove(&[1], 0).unwrap();
    assert_eq!(av.len(), 0);
    assert_in_step(&av);
}

#[test]
fn verify_reports_what_the_nic_lost() {
    let mut av = open(8);
    insert_peers(&mut av, &[1, 2]);
    av.nic_mut().entries_mut()[1] = NicAvEntry::INVALID;
    av.nic_mut().entries_mut()[5] = NicAvEntry::for_peer(&peer(9), 1);
    let m = av.verify_nic().unwrap();
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].index, 1);
    assert_eq!(m[0].mirror, NicAvEntry::for_peer(&peer(2), 0x00ab_cdef));
    assert_eq!(m[0].nic, NicAvEntry::INVALID);
    assert_eq!(m[1].index, 5);
    assert_eq!(m[1].mirror, NicAvEntry::INVALID);
    av.nic_mut().fail_after(NicOp::Read, 0);
    assert_eq!(errno(av.verify_nic()), FiErrno::FI_EIO);
    // An unanswered read changed nothing: it is late, not failed.
    av.nic_mut()
        .inject(NicOp::Read, 0, Fault::InDoubt { applied: false });
    assert_eq!(errno(av.verify_nic()), FiErrno::FI_ETIMEDOUT);
    av.nic_mut().inject(NicOp::Read, 0, Fault::Busy);
    assert_eq!(errno(av.verify_nic()), FiErrno::FI_EAGAIN);
}

// ---------------------------------------------------------------------------------------------
// remove and lookup of bad fi_addrs

#[test]
fn bad_fi_addrs_are_invalid_for_lookup_and_remove() {
    let mut av = open(8);
    insert_peers(&mut av, &[1, 2, 3]);
    av.remove(&[1], 0).unwrap();
    let mut buf = [0u8; ADDR_LEN];
    // never inserted, removed, out of range, UINT64_MAX
    for fa in [5, 1, 8, 1 << 40, FI_ADDR_NOTAVAIL] {
        let mut len = ADDR_LEN;
        assert_eq!(
            errno(av.lookup(fa, &mut buf, &mut len)),
            FiErrno::FI_EINVAL,
            "lookup {fa:#x}"
        );
        assert_eq!(len, ADDR_LEN, "addrlen untouched");
        assert_eq!(
            errno(av.remove(&[fa], 0)),
            FiErrno::FI_EINVAL,
            "remove {fa:#x}"
        );
    }
    assert_eq!(av.len(), 2);
    assert_in_step(&av);
}

#[test]
fn double_remove_is_invalid() {
    let mut av = open(8);
    insert_peers(&mut av, &[1, 2]);
    av.remove(&[0], 0).unwrap();
    let e = av.remove(&[0], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert_eq!(e.to_neg_errno(), -22);
    assert!(e.message.contains("not in use"), "{e}");
}

#[test]
fn a_bad_fi_addr_anywhere_removes_nothing() {
    let mut av = open(8);
    insert_peers(&mut av, &[1, 2, 3]);
    let before = av.nic().counters();
    assert_eq!(errno(av.remove(&[0, 1, 7], 0)), FiErrno::FI_EINVAL);
    assert_eq!(errno(av.remove(&[0, 2, 0], 0)), FiErrno::FI_EINVAL);
    assert_eq!(
        errno(av.remove(&[2, FI_ADDR_NOTAVAIL], 0)),
        FiErrno::FI_EINVAL
    );
    assert_eq!(av.len(), 3);
    assert_eq!(av.nic().counters(), before, "no NIC command issued");
    av.remove(&[], 0).unwrap();
    av.remove(&[2, 0, 1], 0).unwrap();
    assert!(av.is_empty());
    assert_eq!(av.nic().counters().invalidates, 1, "one AV_INVALIDATE");
    assert_in_step(&av);
}

#[test]
fn lookup_truncates_and_reports_the_size_needed() {
    let mut av = open(8);
    insert_peers(&mut av, &[1]);
    let full = peer_bytes(1);

    let mut buf = [0xeeu8; 16];
    let mut len = 10;
    av.lookup(0, &mut buf, &mut len).unwrap();
    assert_eq!(len, ADDR_LEN);
    assert_eq!(&buf[..10], &full[..10]);
    assert_eq!(&buf[10..], &[0xee; 6], "nothing past *addrlen");

    let mut big = [0u8; 64];
    let mut len = 64;
    av.lookup(0, &mut big, &mut len).unwrap();
    assert_eq!(len, ADDR_LEN);
    assert_eq!(&big[..32], &full);
    assert_eq!(&big[32..], &[0; 32]);

    let mut len = 0;
    av.lookup(0, &mut [], &mut len).unwrap();
    assert_eq!(len, ADDR_LEN);

    // *addrlen larger than the slice: the slice bounds the copy.
    let mut small = [0u8; 4];
    let mut len = 100;
    av.lookup(0, &mut small, &mut len).unwrap();
    assert_eq!(small, full[..4]);
    assert_eq!(len, ADDR_LEN);
}

// ---------------------------------------------------------------------------------------------
// straddr

#[test]
fn straddr_prints_truncates_and_reports_the_size() {
    let addr = peer_bytes(1);
    let full = peer(1).to_string();
    assert!(full.starts_with("uet://10.0.0.1/1?"), "{full}");

    let mut buf = [0xffu8; 128];
    let mut len = buf.len();
    assert_eq!(straddr(&addr, &mut buf, &mut len), full);
    assert_eq!(len, full.len() + 1);
    assert_eq!(&buf[..full.len()], full.as_bytes());
    assert_eq!(buf[full.len()], 0);

    let mut buf = [0xffu8; 128];
    let mut len = 10;
    straddr(&addr, &mut buf, &mut len);
    assert_eq!(len, full.len() + 1);
    assert_eq!(&buf[..9], &full.as_bytes()[..9]);
    assert_eq!(buf[9], 0, "truncated and NUL-terminated");
    assert_eq!(buf[10], 0xff, "nothing past *len");

    let mut len = 0;
    straddr(&addr, &mut buf, &mut len);
    assert_eq!(len, full.len() + 1);

    let mut one = [0xffu8; 1];
    let mut len = 1;
    straddr(&addr, &mut one, &mut len);
    assert_eq!(one, [0]);
}

#[test]
fn straddr_prints_unparsable_bytes_in_hex() {
    let av = open(4);
    let mut buf = [0u8; 128];
    let mut len = buf.len();
    let s = av.straddr(&bad_bytes(1), &mut buf, &mut len);
    assert!(s.starts_with("uet-raw[32]:201f"), "{s}");
    let mut len = buf.len();
    assert_eq!(
        av.straddr(&[0xab, 0x01], &mut buf, &mut len),
        "uet-raw[2]:ab01"
    );
    assert_eq!(len, "uet-raw[2]:ab01".len() + 1);
    let v6 = peer(1003).to_bytes().unwrap();
    let mut len = buf.len();
    assert!(av
        .straddr(&v6, &mut buf, &mut len)
        .starts_with("uet://[fd00::"));
    let long = [1u8; 100];
    let mut len = 0;
    assert!(straddr(&long, &mut [], &mut len).ends_with("..."));
}

// ---------------------------------------------------------------------------------------------
// rx-context bits

#[test]
fn rx_context_bits_are_ignored_in_fi_addrs() {
    let mut av = open_with(AvAttr {
        count: 16,
        rx_ctx_bits: 4,
        ..AvAttr::default()
    });
    assert_eq!(av.rx_ctx_bits(), 4);
    let fas = insert_peers(&mut av, &[1, 2, 3]);
    assert_eq!(fas, vec![0, 1, 2], "insert returns plain indices");

    let rx = fi_rx_addr(1, 15, 4);
    assert_eq!(rx >> 60, 15);
    let mut buf = [0u8; ADDR_LEN];
    let mut len = ADDR_LEN;
    av.lookup(rx, &mut buf, &mut len).unwrap();
    assert_eq!(buf, peer_bytes(2));

    av.remove(&[fi_rx_addr(1, 3, 4)], 0).unwrap();
    assert_eq!(errno(av.address(1)), FiErrno::FI_EINVAL);
    // The same index under two rx contexts is the same address: listed twice.
    assert_eq!(
        errno(av.remove(&[fi_rx_addr(0, 1, 4), fi_rx_addr(0, 2, 4)], 0)),
        FiErrno::FI_EINVAL
    );
    // Without rx bits in the AV, top bits are part of the index: out of range.
    let mut plain = open(16);
    insert_peers(&mut plain, &[1]);
    assert_eq!(
        errno(plain.remove(&[fi_rx_addr(0, 1, 4)], 0)),
        FiErrno::FI_EINVAL
    );
    assert_in_step(&av);
}

// ---------------------------------------------------------------------------------------------
// bookkeeping

#[test]
fn nic_entries_carry_the_one_mtu_flag_of_singles_and_ranges() {
    let mut av = open(64);
    let n = 5; // peer(5) has max_msg_mtu set, peer(1) not
    assert!(peer(n).max_msg_mtu && !peer(1).max_msg_mtu);
    insert_peers(&mut av, &[n, 1]);
    assert_eq!(av.address(0).unwrap(), peer(n));
    let on_nic = |av: &AddressVector<MemoryNicTable>, i: u32| *av.nic().entry(i).unwrap();
    assert_eq!(on_nic(&av, 0).peer_address(), Some(peer(n)));
    assert!(on_nic(&av, 0).max_msg_mtu());
    assert!(!on_nic(&av, 1).max_msg_mtu());
    // A symmetric range of one-MTU peers: the range record and every member carry it.
    let mut fi = [0u64; 6];
    let done = av
        .insertsym("10.9.0.1", 3, "7?ri=1+4&mtu", 2, Some(&mut fi), 0, None)
        .unwrap();
    assert_eq!(done, 6);
    for (m, &f) in fi.iter().enumerate() {
        let e = on_nic(&av, f as u32);
        assert!(e.is_range() && e.max_msg_mtu(), "member {m}: {e:?}");
        assert_eq!(e.peer_address(), Some(av.address(f).unwrap()), "member {m}");
    }
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn a_nic_older_than_the_one_mtu_flag_gets_entries_without_it() {
    // Before interface 1.10 the NIC refuses the MAX_MSG_MTU bit as an undefined flag.
    let old = AvLimits {
        entry_flags: entry_flags::ALL_BEFORE_MAX_MSG_MTU,
        ..LIMITS
    };
    let attr = AvAttr {
        count: 64,
        ..AvAttr::default()
    };
    let mut av = AddressVector::open(MemoryNicTable::new(64), attr, old).unwrap();
    insert_peers(&mut av, &[5]);
    av.insertsym("10.9.0.1", 2, "7?ri=1+4&mtu", 1, None, 0, None)
        .unwrap();
    for i in 0..3 {
        let e = av.nic().entry(i).unwrap();
        assert!(e.is_valid() && !e.max_msg_mtu(), "index {i}: {e:?}");
        assert_eq!(e.flags.get() & !entry_flags::ALL_BEFORE_MAX_MSG_MTU, 0);
    }
    // The mirror keeps every address byte, and agrees with the NIC about what it was sent.
    assert_eq!(av.address(0).unwrap(), peer(5));
    assert!(av.address(1).unwrap().max_msg_mtu);
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn host_memory_stays_compact() {
    // Just past a power of two, where a doubling Vec would hold ~64 bytes per entry.
    let n = (1u32 << 17) + 1;
    let mut av = open(1 << 20);
    let buf: Vec<u8> = (0..n).flat_map(peer_bytes).collect();
    assert_eq!(av.insert(&buf, n as usize, None, 0).unwrap(), n as usize);
    let per_entry = av.host_bytes() as f64 / f64::from(n);
    assert!(per_entry <= 48.0, "{per_entry} host bytes per entry");
}

#[test]
fn into_nic_hands_the_table_back() {
    let mut av = open(4);
    insert_peers(&mut av, &[1]);
    let nic = av.into_nic();
    assert_eq!(nic.valid_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// the plain insert loop against the general one

/// A plain insert (no flags beside `FI_MORE`, an AV without user ids, keys or events) takes a
/// loop of its own; with `FI_SYNC_ERR` the same insert takes the general one. Random
/// sequences of inserts (malformed addresses among them, with and without `fi_addr`),
/// removes and refused NIC commands must give both AVs the same results, mirrors and NIC
/// tables at every step.
#[test]
fn plain_and_general_insert_loops_agree() {
    for seed in 1..=40u64 {
        let mut r = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut rand = move |n: u64| r.below(n);
        let cap = 4 + rand(20) as usize;
        let (mut plain, mut general) = (open(cap), open(cap));
        for step in 0..300 {
            let at = format!("seed {seed} step {step}");
            match rand(10) {
                0..=5 => {
                    let k = 1 + rand(6) as usize;
                    let addrs: Vec<[u8; ADDR_LEN]> = (0..k)
                        .map(|_| {
                            let n = rand(40) as u32;
                            if rand(6) == 0 {
                                bad_bytes(n)
                            } else {
                                peer_bytes(n)
                            }
                        })
                        .collect();
                    let buf = pack(&addrs);
                    let more = if rand(3) == 0 { FI_MORE } else { 0 };
                    let with_out = rand(4) != 0;
                    let (mut out_p, mut out_g) = (vec![7u64; k], vec![7u64; k]);
                    let mut status = vec![1i32; k];
                    let p = plain.insert(&buf, k, with_out.then_some(&mut out_p[..]), more);
                    let g = general.insert_with_status(
                        &buf,
                        k,
                        with_out.then_some(&mut out_g[..]),
                        more | FI_SYNC_ERR,
                        Some(&mut status),
                    );
                    match (&p, &g) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "{at}: inserted"),
                        (Err(a), Err(b)) => {
                            assert_eq!(a.errno, b.errno, "{at}");
                            assert_eq!(a.message, b.message, "{at}");
                        }
                        _ => panic!("{at}: {p:?} vs {g:?}"),
                    }
                    assert_eq!(out_p, out_g, "{at}: fi_addr");
                }
                6..=8 => {
                    let list: Vec<u64> = (0..1 + rand(3)).map(|_| rand(cap as u64 + 2)).collect();
                    let p = plain.remove(&list, 0).map_err(|e| (e.errno, e.message));
                    let g = general.remove(&list, 0).map_err(|e| (e.errno, e.message));
                    assert_eq!(p, g, "{at}: remove {list:?}");
                }
                _ => {
                    let op = if rand(2) == 0 {
                        NicOp::Write
                    } else {
                        NicOp::Invalidate
                    };
                    let after = rand(3);
                    plain.nic_mut().fail_after(op, after);
                    general.nic_mut().fail_after(op, after);
                }
            }
            assert_eq!(plain.len(), general.len(), "{at}: len");
            for i in 0..cap as u32 {
                assert_eq!(plain.mirror_entry(i), general.mirror_entry(i), "{at}: {i}");
            }
            assert_eq!(plain.nic().entries(), general.nic().entries(), "{at}: NIC");
        }
    }
}

/// Each attribute `fi_av_open` checks against the NIC fails with an errno of its own, so a
/// caller learns which one to change without reading the message: `count` against the
/// table's capacity, `rx_ctx_bits` against the receive contexts, `ep_per_node` against the
/// endpoints, `flags` against the flags an AV takes.
#[test]
fn each_open_attribute_fails_with_an_errno_of_its_own() {
    let limits = AvLimits {
        max_rx_ctx: 4,
        max_endpoints: 16,
        ..AvLimits::new(64, 8)
    };
    let refused = |attr: AvAttr| {
        AddressVector::open(MemoryNicTable::new(64), attr, limits)
            .map(|_| ())
            .unwrap_err()
            .errno
    };
    let base = AvAttr {
        count: 8,
        ..AvAttr::default()
    };
    let all = [
        refused(AvAttr { count: 65, ..base }),
        refused(AvAttr {
            rx_ctx_bits: 3,
            ..base
        }),
        refused(AvAttr {
            ep_per_node: 17,
            ..base
        }),
        refused(AvAttr {
            flags: 1 << 30,
            ..base
        }),
    ];
    assert_eq!(
        all,
        [
            FiErrno::FI_ENOSPC,
            FiErrno::FI_EOVERFLOW,
            FiErrno::FI_E2BIG,
            FiErrno::FI_EBADFLAGS
        ]
    );
}
