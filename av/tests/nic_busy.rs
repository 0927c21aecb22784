//! Commands the NIC has no room for (`NicError::busy`: a full command queue). They are not
//! sent and change nothing, so the call fails with `FI_EAGAIN` and the same call succeeds
//! later; a call that had already changed something when it met one fails with `FI_EIO`, as
//! for any refusal, since repeating it would not do the same again.

mod common;

use common::*;
use uet_av::{
    AvAttr, Fault, FiErrno, NicOp, FI_ADDR_NOTAVAIL, FI_AV_USER_ID, FI_MORE, FI_SYNC_ERR,
};
use uet_fwif::admin::MAX_BATCH;

#[test]
fn an_insert_the_nic_has_no_room_for_fails_with_eagain_and_keeps_nothing() {
    let mut av = open(16);
    insert_peers(&mut av, &[1]);
    av.nic_mut().inject(NicOp::Write, 0, Fault::Busy);
    let two = pack(&[peer_bytes(2), peer_bytes(3)]);
    let (mut fi, mut status) = ([7u64; 2], [1i32; 2]);
    let e = av
        .insert_with_status(&two, 2, Some(&mut fi), FI_SYNC_ERR, Some(&mut status))
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    assert!(e.message.contains("rolled back"), "{e}");
    assert_eq!(fi, [FI_ADDR_NOTAVAIL; 2]);
    assert_eq!(status, [FiErrno::FI_EAGAIN.to_status(); 2]);
    assert_eq!(av.len(), 1);
    assert_in_step(&av);
    // Tried again, the same call succeeds, at the same indices.
    assert_eq!(av.insert(&two, 2, Some(&mut fi), 0).unwrap(), 2);
    assert_eq!(fi, [1, 2]);
    assert_in_step(&av);
}

#[test]
fn a_remove_the_nic_has_no_room_for_fails_with_eagain_and_removes_nothing() {
    let mut av = open(16);
    let fi = insert_peers(&mut av, &[1, 2, 3]);
    for list in [&fi[..1], &fi[..2]] {
        av.nic_mut().inject(NicOp::Invalidate, 0, Fault::Busy);
        let e = av.remove(list, 0).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
        assert_eq!(av.len(), 3);
        assert_in_step(&av);
    }
    av.remove(&fi[..2], 0).unwrap();
    assert_eq!(av.len(), 1);
    assert_in_step(&av);
}

#[test]
fn a_user_id_the_nic_has_no_room_for_fails_with_eagain_and_stays_as_it_was() {
    let mut av = open_with(AvAttr {
        count: 16,
        flags: FI_AV_USER_ID,
        ..AvAttr::default()
    });
    let fi = insert_peers(&mut av, &[1]);
    av.nic_mut().inject(NicOp::Write, 0, Fault::Busy);
    let e = av.set_user_id(fi[0], 42, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    assert_eq!(av.user_id(fi[0]).unwrap(), Some(FI_ADDR_NOTAVAIL));
    assert_in_step(&av);
    av.set_user_id(fi[0], 42, 0).unwrap();
    assert_eq!(av.user_id(fi[0]).unwrap(), Some(42));
    assert_in_step(&av);
}

/// A batch of two AV_WRITEs whose second finds no room: the first chunk is invalidated again,
/// so nothing changed (`FI_EAGAIN`) — unless that invalidation is refused too, and the first
/// chunk stays inserted (`FI_EIO`: the call did change the AV).
#[test]
fn a_large_insert_is_eagain_only_when_it_changed_nothing() {
    let n = MAX_BATCH + 10;
    let addrs = pack(&(0..n).map(peer_bytes).collect::<Vec<_>>());
    for invalidate_refused in [false, true] {
        let mut av = open(2 * n as usize);
        av.nic_mut().inject(NicOp::Write, 1, Fault::Busy);
        if invalidate_refused {
            av.nic_mut().fail_after(NicOp::Invalidate, 0);
        }
        let e = av.insert(&addrs, n as usize, None, 0).unwrap_err();
        if invalidate_refused {
            assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
            assert_eq!(av.len(), MAX_BATCH as usize, "the accepted chunk stays");
        } else {
            assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
            assert_eq!(av.len(), 0);
        }
        assert_in_step(&av);
    }
}

/// A removal of two AV_INVALIDATEs whose second finds no room: the first chunk's addresses
/// are gone, so the call changed the AV (`FI_EIO`), and says how many were removed.
#[test]
fn a_large_remove_that_removed_some_is_eio() {
    let n = MAX_BATCH + 10;
    let mut av = open(n as usize);
    let fi = insert_peers(&mut av, &(0..n).collect::<Vec<_>>());
    av.nic_mut().inject(NicOp::Invalidate, 1, Fault::Busy);
    let e = av.remove(&fi, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(
        e.message.contains(&format!("{MAX_BATCH} of {n} removed")),
        "{e}"
    );
    assert_eq!(av.len(), 10);
    assert_in_step(&av);
}

/// The insert that ends an `FI_MORE` batch finds no room for its AV_WRITE: the whole batch
/// is rolled back, the addresses the earlier calls reported as inserted too. The call has
/// changed what an earlier call reported, so it is `FI_EIO`, not `FI_EAGAIN` (repeating it
/// would not bring the earlier addresses back).
#[test]
fn a_batch_end_with_no_room_after_fi_more_calls_is_eio() {
    let mut av = open(16);
    let mut a = [0u64; 1];
    assert_eq!(
        av.insert(&peer_bytes(1), 1, Some(&mut a), FI_MORE).unwrap(),
        1
    );
    av.nic_mut().inject(NicOp::Write, 0, Fault::Busy);
    let (mut b, mut status) = ([7u64; 1], [1i32; 1]);
    let e = av
        .insert_with_status(
            &peer_bytes(2),
            1,
            Some(&mut b),
            FI_SYNC_ERR,
            Some(&mut status),
        )
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert_eq!(b, [FI_ADDR_NOTAVAIL]);
    assert_eq!(status, [FiErrno::FI_EIO.to_status()]);
    assert_eq!(av.len(), 0, "the FI_MORE insert is rolled back too");
    assert!(av.address_bytes(a[0] as u32).is_none());
    assert_in_step(&av);

    // A batch of the ending call's records only: FI_EAGAIN, as ever.
    av.nic_mut().inject(NicOp::Write, 0, Fault::Busy);
    let e = av.insert(&peer_bytes(2), 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    assert_in_step(&av);
}

/// A remove settles the `FI_MORE` inserts before it; when their AV_WRITE finds no room, they
/// are rolled back: the remove fails with `FI_EIO` (earlier calls' addresses are gone) and
/// removes nothing.
#[test]
fn a_remove_whose_settling_rolls_back_fi_more_inserts_is_eio() {
    let mut av = open(16);
    let x = insert_peers(&mut av, &[1]);
    let mut a = [0u64; 1];
    assert_eq!(
        av.insert(&peer_bytes(2), 1, Some(&mut a), FI_MORE).unwrap(),
        1
    );
    av.nic_mut().inject(NicOp::Write, 0, Fault::Busy);
    let e = av.remove(&x, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert_eq!(av.len(), 1, "x stays, the FI_MORE insert is rolled back");
    assert!(av.address_bytes(x[0] as u32).is_some());
    assert!(av.address_bytes(a[0] as u32).is_none());
    assert_in_step(&av);
    av.remove(&x, 0).unwrap();
    assert_in_step(&av);
}

/// Entries in doubt are rewritten before a batch is sent; when that rewrite finds no room,
/// nothing is sent and the batch is rolled back: `FI_EAGAIN` when the batch was the call's
/// own, `FI_EIO` when it held an earlier `FI_MORE` call's inserts.
#[test]
fn a_repair_with_no_room_before_a_batch_is_eagain_only_for_the_calls_own_batch() {
    let mut av = open(16);
    let x = insert_peers(&mut av, &[1]);
    av.nic_mut()
        .inject(NicOp::Invalidate, 0, Fault::InDoubt { applied: false });
    assert_eq!(av.remove(&x, 0).unwrap_err().errno, FiErrno::FI_EIO);
    assert_eq!(av.entries_in_doubt(), 1);

    let mut a = [0u64; 1];
    assert_eq!(
        av.insert(&peer_bytes(2), 1, Some(&mut a), FI_MORE).unwrap(),
        1
    );
    av.nic_mut().inject(NicOp::Invalidate, 0, Fault::Busy);
    let e = av.insert(&peer_bytes(3), 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(
        av.address_bytes(a[0] as u32).is_none(),
        "the FI_MORE insert is rolled back"
    );

    av.nic_mut().inject(NicOp::Invalidate, 0, Fault::Busy);
    let e = av.insert(&peer_bytes(3), 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    assert_eq!(av.len(), 1, "x stays, in doubt");

    assert_eq!(av.insert(&peer_bytes(3), 1, None, 0).unwrap(), 1);
    assert_eq!(av.entries_in_doubt(), 0);
    assert_in_step(&av);
}
