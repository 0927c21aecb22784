//! Named AVs: handles on one AV share its fi_addr_t values, read-only handles refuse changes,
//! attributes must agree, the last close removes the segment, and a dead writer is repaired.

mod common;

use std::os::unix::fs::OpenOptionsExt;

use common::{assert_in_step, open_named, pack, peer_bytes, unique, LIMITS};
use uet_av::named::segment::{self, LOG_RECORDS};
use uet_av::{
    AddressVector, AvAttr, AvName, Fault, FiErrno, FiError, MemoryNicTable, NamedAv, NicOp,
    ADDR_LEN, FI_ADDR_NOTAVAIL, FI_AV_AUTH_KEY, FI_AV_USER_ID, FI_MORE, FI_READ, FI_SYNC_ERR,
};

type Named = NamedAv<MemoryNicTable>;

fn attr(name: &str, count: usize) -> AvAttr {
    AvAttr {
        name: Some(AvName::new(name).unwrap()),
        count,
        job_id: 0x00ab_cdef,
        ..AvAttr::default()
    }
}

fn open(a: AvAttr) -> Result<Named, FiError> {
    open_named(a)
}

fn insert(av: &mut Named, ns: &[u32]) -> Vec<u64> {
    let buf = pack(&ns.iter().map(|&n| peer_bytes(n)).collect::<Vec<_>>());
    let mut out = vec![0u64; ns.len()];
    assert_eq!(
        av.insert(&buf, ns.len(), Some(&mut out), 0).unwrap(),
        ns.len()
    );
    out
}

fn lookup(av: &mut Named, fi_addr: u64) -> Result<[u8; ADDR_LEN], FiError> {
    let mut out = [0u8; ADDR_LEN];
    let mut len = ADDR_LEN;
    av.lookup(fi_addr, &mut out, &mut len)?;
    Ok(out)
}

/// Both handles hold the same addresses at the same indices, and each NIC its mirror.
fn assert_same(a: &mut Named, b: &mut Named) {
    a.sync().unwrap();
    b.sync().unwrap();
    let ea: Vec<_> = a.av().iter().collect();
    let eb: Vec<_> = b.av().iter().collect();
    assert_eq!(ea, eb);
    assert_in_step(&a.av());
    assert_in_step(&b.av());
}

#[test]
fn second_handle_sees_the_same_fi_addrs_and_removals() {
    let name = unique("share");
    let mut a = open(attr(&name, 16)).unwrap();
    assert!(a.segment_path().exists());
    assert_eq!(a.attr().map_addr, 0, "the base fi_addr_t is returned");
    assert_eq!(insert(&mut a, &[1, 2, 3, 4, 5]), [0, 1, 2, 3, 4]);

    let mut b = open(attr(&name, 16)).unwrap();
    assert_eq!(b.handles(), 2);
    for (i, n) in (1..=5).enumerate() {
        assert_eq!(lookup(&mut b, i as u64).unwrap(), peer_bytes(n));
    }
    assert_in_step(&b.av());

    // A removal by one handle frees the index in the other once it catches up, and the
    // lowest free index is shared: b's insert takes it.
    a.remove(&[1], 0).unwrap();
    b.sync().unwrap();
    assert_eq!(lookup(&mut b, 1).unwrap_err().errno, FiErrno::FI_EINVAL);
    assert_eq!(insert(&mut b, &[9, 10]), [1, 5]);
    assert_eq!(lookup(&mut a, 1).unwrap(), peer_bytes(9));
    assert_eq!(lookup(&mut a, 5).unwrap(), peer_bytes(10));
    assert_eq!(a.len().unwrap(), 6);
    assert_same(&mut a, &mut b);

    // A replaced address (removed and inserted again by the other handle) is replaced here.
    b.remove(&[2], 0).unwrap();
    assert_eq!(insert(&mut b, &[42]), [2]);
    assert_eq!(lookup(&mut a, 2).unwrap(), peer_bytes(42));
    assert_same(&mut a, &mut b);

    // Every error of the plain AV still applies, and changes nothing.
    let g = a.generation();
    assert_eq!(a.remove(&[1, 1], 0).unwrap_err().errno, FiErrno::FI_EINVAL);
    assert_eq!(a.remove(&[3, 15], 0).unwrap_err().errno, FiErrno::FI_EINVAL);
    assert_eq!(a.remove(&[99], 0).unwrap_err().errno, FiErrno::FI_EINVAL);
    assert_eq!(a.generation(), g);
    assert_same(&mut a, &mut b);
}

#[test]
fn read_only_handle_refuses_every_change() {
    let name = unique("ro");
    let mut a = open(attr(&name, 8)).unwrap();
    insert(&mut a, &[1, 2]);
    let mut r = open(AvAttr {
        flags: FI_READ,
        ..attr(&name, 8)
    })
    .unwrap();
    assert!(r.is_read_only());
    assert_eq!(lookup(&mut r, 1).unwrap(), peer_bytes(2));
    let g = r.generation();
    let bytes = peer_bytes(3);
    let mut out = [0u64; 1];
    let e = r.insert(&bytes, 1, Some(&mut out), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM);
    assert!(e.message.contains("read-only"), "{e}");
    assert_eq!(out[0], 0, "fi_addr untouched");
    let e = r.remove(&[0], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM);
    let e = r
        .insertsvc("10.0.0.1", Some("7"), None, 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM);
    let e = r
        .insertsym("10.0.0.1", 2, "7", 2, None, 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM);
    assert_eq!(r.generation(), g);
    assert_eq!(r.len().unwrap(), 2);
    // The writer's later changes still reach it.
    a.remove(&[0], 0).unwrap();
    assert_eq!(lookup(&mut r, 0).unwrap_err().errno, FiErrno::FI_EINVAL);
    assert_in_step(&r.av());
}

#[test]
fn read_only_open_needs_an_existing_av() {
    let name = unique("missing");
    let e = open(AvAttr {
        flags: FI_READ,
        ..attr(&name, 8)
    })
    .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOENT);
    assert!(e.message.contains(&name), "{e}");
    assert!(!segment::path_of(&name).exists(), "nothing was created");
}

#[test]
fn attributes_must_match_the_existing_av() {
    let name = unique("attrs");
    let mut a = open(AvAttr {
        rx_ctx_bits: 2,
        ..attr(&name, 32)
    })
    .unwrap();
    insert(&mut a, &[1]);
    let base = AvAttr {
        rx_ctx_bits: 2,
        ..attr(&name, 32)
    };
    for (bad, names) in [
        (AvAttr { count: 16, ..base }, "count 16"),
        (
            AvAttr {
                rx_ctx_bits: 3,
                ..base
            },
            "rx_ctx_bits 3",
        ),
        (AvAttr { job_id: 7, ..base }, "JobID 0x7"),
        (
            AvAttr {
                flags: FI_READ,
                job_id: 7,
                ..base
            },
            "JobID",
        ),
    ] {
        let e = open(bad).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
        assert!(e.message.contains(names), "{e} should name {names}");
    }
    assert_eq!(a.handles(), 1, "refused opens leave no reference behind");
    // count 0 takes the AV's size.
    let mut b = open(AvAttr { count: 0, ..base }).unwrap();
    assert_eq!(b.capacity(), 32);
    assert_eq!(b.attr().count, 32);
    assert_eq!(lookup(&mut b, 0).unwrap(), peer_bytes(1));
}

#[test]
fn open_refusals_name_their_attribute() {
    let name = unique("refusals");
    let e = open(AvAttr {
        flags: FI_AV_USER_ID,
        ..attr(&name, 8)
    })
    .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS, "{e}");
    let e = open(AvAttr {
        auth_key_size: FI_AV_AUTH_KEY,
        ..attr(&name, 8)
    })
    .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOSYS, "{e}");
    assert!(e.message.contains("auth_key_size"), "{e}");
    let e = open(AvAttr {
        name: None,
        ..attr(&name, 8)
    })
    .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    // The NIC callback's error comes back, and leaves no segment.
    let e = NamedAv::<MemoryNicTable>::open(attr(&name, 8), LIMITS, |_| {
        Err(FiError::new(FiErrno::FI_ENOSPC, "no NIC tables left"))
    })
    .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOSPC);
    assert!(!segment::path_of(&name).exists());
    // A plain AV refuses a name instead of ignoring it.
    let e = AddressVector::open(MemoryNicTable::new(8), attr(&name, 8), LIMITS).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
}

#[test]
fn last_close_removes_the_segment() {
    let name = unique("close");
    let a = open(attr(&name, 8)).unwrap();
    let path = a.segment_path().to_path_buf();
    let mut b = open(attr(&name, 8)).unwrap();
    insert(&mut b, &[1, 2, 3]);
    drop(a);
    assert!(path.exists(), "b still has it open");
    assert_eq!(b.handles(), 1);
    b.close().unwrap();
    assert!(!path.exists(), "the last close unlinks it");
    // The name now creates a new, empty AV.
    let mut c = open(attr(&name, 4)).unwrap();
    assert_eq!(c.len().unwrap(), 0);
    assert_eq!(c.capacity(), 4);
}

/// Two handles of one named AV holding index 0; handle `a`'s NIC meets `fault` at the
/// AV_WRITE of a two-address insert, which must fail with `errno` in its result and every
/// status slot, `fi_addr` reset, and nothing committed to the AV. Returns the handles and the
/// call's buffer, for what follows.
fn a_failed_write_reaches_nothing(
    tag: &str,
    fault: Fault,
    errno: FiErrno,
) -> (Named, Named, Vec<u8>) {
    let name = unique(tag);
    let mut a = open(attr(&name, 8)).unwrap();
    let mut b = open(attr(&name, 8)).unwrap();
    insert(&mut a, &[1]);
    b.sync().unwrap();
    let g = a.generation();
    a.nic_mut().inject(NicOp::Write, 0, fault);
    let buf = pack(&[peer_bytes(2), peer_bytes(3)]);
    let mut out = [0u64; 2];
    let mut status = [0i32; 2];
    let e = a
        .insert_with_status(&buf, 2, Some(&mut out), FI_SYNC_ERR, Some(&mut status))
        .unwrap_err();
    assert_eq!(e.errno, errno, "{e}");
    assert_eq!(out, [FI_ADDR_NOTAVAIL; 2]);
    assert_eq!(status, [errno.to_status(); 2]);
    assert_eq!(a.generation(), g, "nothing committed");
    assert_eq!(b.len().unwrap(), 1);
    (a, b, buf)
}

#[test]
fn a_refused_nic_write_reaches_nothing() {
    let (mut a, mut b, _) =
        a_failed_write_reaches_nothing("nicfail", Fault::Refused, FiErrno::FI_EIO);
    // The indices were given back: the next insert, from either handle, takes index 1.
    assert_eq!(insert(&mut b, &[4]), [1]);
    assert_same(&mut a, &mut b);
}

/// A NIC with no room for the AV_WRITE: the call changed nothing, `FI_EAGAIN` in its result
/// and every status slot, and the same call succeeds afterwards.
#[test]
fn a_nic_write_with_no_room_is_eagain_and_reaches_nothing() {
    let (mut a, mut b, buf) =
        a_failed_write_reaches_nothing("nicbusy", Fault::Busy, FiErrno::FI_EAGAIN);
    let (mut out, mut status) = ([0u64; 2], [7i32; 2]);
    let n = a
        .insert_with_status(&buf, 2, Some(&mut out), FI_SYNC_ERR, Some(&mut status))
        .unwrap();
    assert_eq!((n, out, status), (2, [1, 2], [0; 2]));
    assert_same(&mut a, &mut b);
}

#[test]
fn entries_the_nic_keeps_after_a_failed_insert_stay_in_the_named_av() {
    // One insert of more than one AV_WRITE's worth: the second AV_WRITE fails, and so does
    // the invalidation of the first one's records, so the NIC (and the mirror) keep those.
    let first = uet_fwif::admin::MAX_BATCH as usize;
    let n = first + 8;
    let name = unique("kept");
    let mut a = open(attr(&name, n)).unwrap();
    let mut b = open(attr(&name, n)).unwrap();
    a.nic_mut().fail_after(NicOp::Write, 1);
    a.nic_mut().fail_after(NicOp::Invalidate, 0);
    let buf = pack(&(0..n as u32).map(peer_bytes).collect::<Vec<_>>());
    let mut out = vec![0u64; n];
    let e = a.insert(&buf, n, Some(&mut out), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert!(e.message.contains(&format!("{first} of {n}")), "{e}");
    assert!(out[..first].iter().enumerate().all(|(i, &f)| f == i as u64));
    assert!(out[first..].iter().all(|&f| f == FI_ADDR_NOTAVAIL));
    // The other handle sees exactly what this NIC kept, and the indices after it are free.
    assert_eq!(b.len().unwrap(), first);
    assert_same(&mut a, &mut b);
    assert_eq!(insert(&mut b, &[n as u32]), [first as u64]);
    assert_eq!(insert(&mut a, &[n as u32 + 1]), [first as u64 + 1]);
}

#[test]
fn full_table_and_bad_addresses_fail_alone() {
    let name = unique("full");
    let mut a = open(attr(&name, 4)).unwrap();
    let mut bad = peer_bytes(9);
    bad[0] = 0x20;
    let buf = pack(&[
        peer_bytes(1),
        bad,
        peer_bytes(2),
        peer_bytes(3),
        peer_bytes(4),
        peer_bytes(5),
    ]);
    let mut out = [0u64; 6];
    let mut status = [0i32; 6];
    let n = a
        .insert_with_status(
            &buf,
            6,
            Some(&mut out),
            FI_SYNC_ERR | FI_MORE,
            Some(&mut status),
        )
        .unwrap();
    assert_eq!(n, 4);
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1, 2, 3, FI_ADDR_NOTAVAIL]);
    assert_eq!(status, [0, 22, 0, 0, 0, 28]);
    assert_eq!(
        a.av().pending_len(),
        0,
        "FI_MORE is a hint: the call completed"
    );
    assert_in_step(&a.av());
}

#[test]
fn string_forms_share_indices_too() {
    let name = unique("strings");
    let mut a = open(attr(&name, 16)).unwrap();
    let mut b = open(attr(&name, 16)).unwrap();
    let mut fa = 0u64;
    assert_eq!(
        a.insertsvc("10.0.0.9", Some("12"), Some(&mut fa), 0, None)
            .unwrap(),
        1
    );
    assert_eq!(fa, 0);
    let mut out = [0u64; 4];
    assert_eq!(
        b.insertsym("10.0.1.1", 2, "5", 2, Some(&mut out), 0, None)
            .unwrap(),
        4
    );
    assert_eq!(out, [1, 2, 3, 4]);
    assert_eq!(a.address(3).unwrap().pid_on_fep, 5);
    assert_eq!(a.address(4).unwrap().fabric_addr.to_string(), "10.0.1.2");
    assert_same(&mut a, &mut b);
    // Members 1..4 sit at consecutive indices: one range in each process.
    assert_eq!(a.av().ranges().collect::<Vec<_>>(), [(1, 4, 4)]);
    assert_eq!(b.av().ranges().collect::<Vec<_>>(), [(1, 4, 4)]);
}

#[test]
fn symmetric_sets_are_ranges_in_every_process() {
    let name = unique("sym");
    let n = 100_000usize;
    let mut a = open(attr(&name, 200_000)).unwrap();
    let mut b = open(attr(&name, 200_000)).unwrap();
    insert(&mut a, &[1, 2]);
    let before = (a.av().host_bytes(), b.av().host_bytes());
    let mut out = vec![0u64; n];
    assert_eq!(
        a.insertsym("10.64.0.1", n / 8, "1?ri=1+4", 8, Some(&mut out), 0, None)
            .unwrap(),
        n
    );
    assert_eq!(out[0], 2);
    assert_eq!(out[n - 1], (n + 1) as u64);
    b.sync().unwrap();
    for (av, was) in [(&a, before.0), (&b, before.1)] {
        assert_eq!(
            av.av().ranges().collect::<Vec<_>>(),
            [(2, n as u32, n as u32)]
        );
        assert!(
            av.av().host_bytes() - was < 64 * 1024,
            "{} host bytes for {n} peers",
            av.av().host_bytes() - was
        );
    }
    assert_eq!(lookup(&mut b, 9).unwrap(), lookup(&mut a, 9).unwrap());
    assert_eq!(b.address(9).unwrap().fabric_addr.to_string(), "10.64.0.1");
    assert_eq!(b.address(10).unwrap().fabric_addr.to_string(), "10.64.0.2");

    // A member removed in one process is a hole in both; a single insert fills it.
    b.remove(&[500], 0).unwrap();
    assert_eq!(lookup(&mut a, 500).unwrap_err().errno, FiErrno::FI_EINVAL);
    assert_eq!(insert(&mut a, &[77]), vec![500]);
    assert_eq!(lookup(&mut b, 500).unwrap(), peer_bytes(77));
    assert_same(&mut a, &mut b);

    // A process that opens later holds the range as a range too (a rescan).
    let mut c = open(attr(&name, 0)).unwrap();
    c.sync().unwrap();
    assert_eq!(c.av().ranges().count(), 1);
    assert_same(&mut a, &mut c);

    // Removing every member frees the segment's range record.
    let all: Vec<u64> = (2..(n + 2) as u64).filter(|&i| i != 500).collect();
    a.remove(&all, 0).unwrap();
    assert_same(&mut a, &mut b);
    assert_eq!(b.av().ranges().count(), 0);
    let params = segment::SegmentParams {
        capacity: 200_000,
        rx_ctx_bits: 0,
        job_id: 0x00ab_cdef,
        max_group_id: 0,
    };
    let seg = segment::Segment::open(&name, false, params).unwrap().0;
    assert!(
        seg.ranges().is_empty(),
        "the record went with its last member"
    );
}

/// A handle behind a remove that freed the indices a symmetric set then took catches up with
/// both at once, and holds the set as one range, not member by member: the entries the
/// segment no longer holds leave its mirror before the range is placed.
#[test]
fn a_handle_behind_a_remove_holds_the_range_that_took_its_indices_as_a_range() {
    let name = unique("sym-behind");
    let mut a = open(attr(&name, 16)).unwrap();
    let mut b = open(attr(&name, 16)).unwrap();
    assert_eq!(insert(&mut a, &[1, 2, 3, 4]), [0, 1, 2, 3]);
    b.sync().unwrap();
    assert_eq!(b.av().len(), 4);
    a.remove(&[0, 1, 2, 3], 0).unwrap();
    let mut out = [0u64; 4];
    assert_eq!(
        a.insertsym("10.0.1.1", 2, "5", 2, Some(&mut out), 0, None)
            .unwrap(),
        4
    );
    assert_eq!(out, [0, 1, 2, 3]);
    assert_eq!(a.av().ranges().collect::<Vec<_>>(), [(0, 4, 4)]);
    b.sync().unwrap();
    assert_same(&mut a, &mut b);
    assert_eq!(b.av().ranges().collect::<Vec<_>>(), [(0, 4, 4)]);
    assert_eq!(b.address(3).unwrap().fabric_addr.to_string(), "10.0.1.2");
}

/// A range record that outlived its members (a process that held them one by one removed
/// them, and counted none of them down) goes when a new range takes its indices: a process
/// opening later would otherwise place the stale record first, find the new range's indices
/// taken, and hold the new range member by member.
#[test]
fn a_new_range_frees_the_stale_record_over_its_indices() {
    let name = unique("sym-stale");
    let mut a = open(attr(&name, 16)).unwrap();
    let params = segment::SegmentParams {
        capacity: 16,
        rx_ctx_bits: 0,
        job_id: 0x00ab_cdef,
        max_group_id: 0,
    };
    let seg = segment::Segment::open(&name, false, params).unwrap().0;
    {
        // The record of a set whose two members at 2 and 3 are gone.
        let locked = seg.lock(true).unwrap();
        locked.begin();
        assert!(locked.add_range(2, 2, 1, 0, &peer_bytes(17)));
        locked.commit();
    }
    let mut out = [0u64; 4];
    assert_eq!(
        a.insertsym("10.0.1.1", 2, "5", 2, Some(&mut out), 0, None)
            .unwrap(),
        4
    );
    assert_eq!(out, [0, 1, 2, 3]);
    let records: Vec<(u32, u32)> = seg.ranges().iter().map(|r| (r.first, r.count)).collect();
    assert_eq!(records, [(0, 4)], "the stale record is gone");
    let mut c = open(attr(&name, 16)).unwrap();
    assert_same(&mut a, &mut c);
    assert_eq!(c.av().ranges().collect::<Vec<_>>(), [(0, 4, 4)]);
}

#[test]
fn a_handle_that_fell_behind_the_log_rescans() {
    let name = unique("behind");
    let mut a = open(attr(&name, 8)).unwrap();
    let mut b = open(attr(&name, 8)).unwrap();
    insert(&mut a, &[1, 2, 3]);
    b.sync().unwrap();
    // More changes than the log holds while b looks away.
    for k in 0..(LOG_RECORDS as u32 / 2 + 10) {
        a.remove(&[1], 0).unwrap();
        insert(&mut a, &[100 + k % 50]);
    }
    a.remove(&[2], 0).unwrap();
    assert_same(&mut a, &mut b);
    assert_eq!(lookup(&mut b, 2).unwrap_err().errno, FiErrno::FI_EINVAL);
}

#[test]
fn handles_in_threads_never_share_an_index() {
    let name = unique("threads");
    let mut a = open(attr(&name, 512)).unwrap();
    let n2 = name.clone();
    let other = std::thread::spawn(move || {
        let mut b = open(attr(&n2, 512)).unwrap();
        let mut got = Vec::new();
        for k in 0..100 {
            got.extend(insert(&mut b, &[1000 + k]));
        }
        got
    });
    let mut mine = Vec::new();
    for k in 0..100 {
        mine.extend(insert(&mut a, &[2000 + k]));
    }
    let theirs = other.join().unwrap();
    let mut all: Vec<u64> = mine.iter().chain(&theirs).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..200).collect::<Vec<_>>(),
        "200 distinct lowest indices"
    );
    for (i, &fa) in theirs.iter().enumerate() {
        assert_eq!(lookup(&mut a, fa).unwrap(), peer_bytes(1000 + i as u32));
    }
    assert_in_step(&a.av());
}

/// Write one header word of the segment file (the layout `segment` documents).
fn poke(path: &std::path::Path, byte: u64, value: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_at(&value.to_le_bytes(), byte).unwrap();
}

#[test]
fn a_writer_that_died_mid_change_is_repaired() {
    let name = unique("repair");
    let mut a = open(attr(&name, 8)).unwrap();
    let mut b = open(attr(&name, 8)).unwrap();
    insert(&mut a, &[1, 2, 3]);
    b.sync().unwrap();
    // A process died after taking index 3 (its bitmap bit) and before writing its slot: the
    // writer word (header word 17) still names it.
    let path = a.segment_path().to_path_buf();
    poke(&path, 512, 0b1111);
    poke(&path, 17 * 8, 4_000_000);
    // Bump the generation (word 10) as if the dead writer had, so b looks.
    let g = a.generation();
    poke(&path, 10 * 8, g + 1);
    b.sync().unwrap();
    assert!(b.generation() > g + 1, "the repair is a change of its own");
    assert_eq!(b.len().unwrap(), 3);
    assert_eq!(
        insert(&mut b, &[4]),
        [3],
        "the half-taken index is free again"
    );
    assert_same(&mut a, &mut b);
}

/// The catch-up an endpoint runs before each send repairs a dead writer's half-made change
/// when the segment's lock is free (it never waits for it), so that a process that makes no AV
/// call still catches up with the changes committed before the writer died.
#[test]
fn the_datapath_catch_up_repairs_a_dead_writers_change_and_catches_up() {
    let name = unique("dp-repair");
    let mut a = open(attr(&name, 8)).unwrap();
    let mut b = open(attr(&name, 8)).unwrap();
    let hook = b
        .av()
        .sync_hook()
        .expect("a named AV's mirror has a catch-up");
    insert(&mut a, &[1, 2, 3]);
    hook.catch_up().unwrap();
    assert_eq!(b.av().len(), 3, "the datapath catches up a finished change");
    // A change committed, which b's datapath has not seen yet...
    assert_eq!(insert(&mut a, &[4]), [3]);
    // ...then a writer died mid-change (as in a_writer_that_died_mid_change_is_repaired),
    // after taking index 4 and before writing its slot.
    let path = a.segment_path().to_path_buf();
    poke(&path, 512, 0b1_1111);
    poke(&path, 17 * 8, 4_000_000);
    let g = a.generation();
    hook.catch_up().unwrap();
    assert!(b.generation() > g, "the datapath repairs");
    assert_eq!(b.av().len(), 4, "and catches up with the committed change");
    assert_eq!(
        b.av().address_bytes(3),
        Some(peer_bytes(4)),
        "the committed address is in b's mirror"
    );
    assert_in_step(&b.av());
    assert_eq!(
        insert(&mut b, &[5]),
        [4],
        "the half-taken index is free again"
    );
    assert_same(&mut a, &mut b);
}

/// With the lock held elsewhere, the datapath's catch-up does not wait: it goes on with the
/// table as it is, and the next AV call repairs.
#[test]
fn the_datapath_catch_up_does_not_wait_for_a_held_lock() {
    let name = unique("dp-held");
    let mut a = open(attr(&name, 8)).unwrap();
    let b = open(attr(&name, 8)).unwrap();
    let hook = b
        .av()
        .sync_hook()
        .expect("a named AV's mirror has a catch-up");
    insert(&mut a, &[1, 2, 3]);
    let path = a.segment_path().to_path_buf();
    poke(&path, 17 * 8, 4_000_000);
    // Another open file description holds the lock byte shared (a reader of another
    // process): the datapath cannot take it exclusive for the repair.
    let holder = std::fs::OpenOptions::new().read(true).open(&path).unwrap();
    // SAFETY: `flock` is a plain C struct of integers; all-zero bytes are a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_RDLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl reads the flock struct, which outlives the call, on an open descriptor.
    let r = unsafe {
        libc::fcntl(
            holder.as_raw_fd(),
            libc::F_OFD_SETLK,
            &mut fl as *mut libc::flock,
        )
    };
    assert_eq!(r, 0);
    let g = a.generation();
    hook.catch_up().unwrap();
    assert_eq!(b.generation(), g, "no repair while the lock is held");
    assert_eq!(b.av().len(), 0, "the table as it was");
    drop(holder);
    hook.catch_up().unwrap();
    assert!(b.generation() > g);
    assert_eq!(b.av().len(), 3);
}

#[test]
fn insert_at_places_where_told_and_refuses_bad_indices() {
    let mut av = common::open(8);
    av.insert_at(5, &peer_bytes(1)).unwrap();
    assert_eq!(av.pending_len(), 1, "the record waits for flush");
    av.flush().unwrap();
    assert_eq!(av.address_bytes(5), Some(peer_bytes(1)));
    assert_eq!(av.address_bytes(4), None);
    for (index, bytes, names) in [
        (5, peer_bytes(2), "in use"),
        (8, peer_bytes(2), "outside"),
        (6, [0x20; ADDR_LEN], "index 6"),
    ] {
        let e = av.insert_at(index, &bytes).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.contains(names), "{e} should say {names}");
    }
    // The indices it skipped stay free, lowest first.
    let mut out = [0u64; 1];
    av.insert(&peer_bytes(3), 1, Some(&mut out), 0).unwrap();
    assert_eq!(out, [0]);
    assert_eq!(av.len(), 2);
    assert_in_step(&av);
}

/// A single insert that fills a hole in a range's span is no member of the range: removing it
/// must not count against the range's record, or the record goes while a member lives and a
/// handle catching up through the log never brings that member in.
#[test]
fn a_lagging_handle_keeps_a_range_member_after_its_hole_is_refilled_and_emptied() {
    let name = unique("rangecount");
    let mut a = open(attr(&name, 8)).unwrap();
    let mut b = open(attr(&name, 8)).unwrap();
    b.sync().unwrap();
    let mut out = [0u64; 2];
    assert_eq!(
        a.insertsym("10.0.1.1", 1, "5", 2, Some(&mut out), 0, None)
            .unwrap(),
        2
    );
    assert_eq!(out, [0, 1]);
    assert_eq!(a.av().ranges().count(), 1, "held as a range");
    a.remove(&[0], 0).unwrap();
    assert_eq!(insert(&mut a, &[7]), [0], "the hole is refilled");
    a.remove(&[0], 0).unwrap();
    assert_eq!(a.len().unwrap(), 1);
    let want = lookup(&mut a, 1).unwrap();
    assert_eq!(lookup(&mut b, 1).map_err(|e| e.to_string()), Ok(want));
    assert_eq!(b.len().unwrap(), 1);
    assert_same(&mut a, &mut b);
}

/// A full `/dev/shm` (a container's small default, say) is `FI_ENOSPC` for the addresses that
/// do not fit, never a SIGBUS: the segment backs its slots before it uses them. The test runs
/// itself again in a private mount namespace with a 1 MiB tmpfs on `/dev/shm`; where making
/// one is not permitted it says so and does nothing.
#[test]
fn a_full_dev_shm_is_enospc_not_sigbus() {
    const TEST: &str = "a_full_dev_shm_is_enospc_not_sigbus";
    if std::env::var_os("UET_TEST_SMALL_SHM").is_some() {
        let name = unique("enospc");
        let n = 40_000u32;
        // 40,000 slots are 1.28 MB: the header, bitmap and log fit, not every slot.
        let mut a = open(attr(&name, 100_000)).expect("the table's bookkeeping fits in 1 MiB");
        let buf = pack(&(0..n).map(peer_bytes).collect::<Vec<_>>());
        let mut out = vec![0u64; n as usize];
        let mut status = vec![0i32; n as usize];
        let k = a
            .insert_with_status(
                &buf,
                n as usize,
                Some(&mut out),
                FI_SYNC_ERR,
                Some(&mut status),
            )
            .expect("the call itself succeeds");
        assert!(k > 0 && k < n as usize, "{k} of {n} inserted");
        assert!(out[..k].iter().zip(0..).all(|(&f, i)| f == i));
        assert!(out[k..].iter().all(|&f| f == FI_ADDR_NOTAVAIL));
        let enospc = uet_av::FiErrno::FI_ENOSPC.to_status();
        assert!(
            status[k..].iter().all(|&s| s == enospc),
            "{:?}",
            &status[k..k + 1]
        );
        assert_eq!(
            lookup(&mut a, k as u64 - 1).unwrap(),
            peer_bytes(k as u32 - 1)
        );
        // What did not fit is not half there: removing what did frees room to insert again.
        a.remove(&out[..1000], 0).unwrap();
        assert_eq!(a.len().unwrap(), k - 1000);
        assert_eq!(insert(&mut a, &[n + 1]), [0]);
        return;
    }
    let private = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"])
        .output();
    if !private.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: cannot mount a private /dev/shm here: {private:?}");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec \"$0\" --exact \"$1\" --nocapture",
        ])
        .arg(&exe)
        .arg(TEST)
        .env("UET_TEST_SMALL_SHM", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("test {TEST} ... ok")),
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Garbage another process wrote into the header's counters is survived: the generation, the
/// log head and the count in use wrap or saturate rather than overflow, and a free hint past
/// the free indices costs a search, not a false FI_ENOSPC. The slots and the bitmap stay the
/// truth: a handle that opens afterwards (and rescans) sees every address.
#[test]
fn garbage_in_the_header_counters_is_survived() {
    let name = unique("garbage");
    let mut a = open(attr(&name, 8)).unwrap();
    let path = a.segment_path().to_path_buf();
    for word in [10, 11, 13, 15] {
        poke(&path, word * 8, u64::MAX);
    }
    assert_eq!(insert(&mut a, &[1, 2]), [0, 1]);
    poke(&path, 15 * 8, 5);
    assert_eq!(
        insert(&mut a, &[3]),
        [2],
        "the lowest free index, below the hint"
    );
    a.remove(&[1], 0).unwrap();
    let mut b = open(attr(&name, 8)).unwrap();
    assert_eq!(lookup(&mut b, 2).unwrap(), peer_bytes(3));
    assert!(lookup(&mut b, 1).is_err());
    assert_same(&mut a, &mut b);
}

/// A read-only handle refuses every change with FI_EPERM before it looks at the arguments: a
/// set larger than the AV is FI_EPERM too, not FI_EINVAL.
#[test]
fn a_read_only_handle_is_eperm_before_anything_else() {
    let name = unique("rosym");
    let _a = open(attr(&name, 8)).unwrap();
    let mut r = open(AvAttr {
        flags: FI_READ,
        ..attr(&name, 8)
    })
    .unwrap();
    let e = r
        .insertsym("10.0.0.1", 4, "7", 4, None, 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM, "{e}");
    let e = r.insert(&peer_bytes(1), 2, None, 0xdead).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EPERM, "{e}");
}

/// fi_av(3): "Processes that provide the same value for map_addr to a shared AV may use the
/// same fi_addr_t values"; how map_addr relates to them is the provider's. Any map_addr is
/// accepted and kept, and the fi_addr_t values are the indices whatever it is.
#[test]
fn any_map_addr_is_accepted_and_fi_addrs_agree() {
    let name = unique("mapaddr");
    let mut a = open(AvAttr {
        map_addr: 0x7f00_0000_0000,
        ..attr(&name, 8)
    })
    .unwrap();
    assert_eq!(a.attr().map_addr, 0x7f00_0000_0000);
    assert_eq!(insert(&mut a, &[1, 2]), [0, 1]);
    let mut b = open(AvAttr {
        map_addr: 0x7f00_0000_0000,
        ..attr(&name, 8)
    })
    .unwrap();
    assert_eq!(lookup(&mut b, 1).unwrap(), peer_bytes(2));
    let mut c = open(attr(&name, 8)).unwrap();
    assert_eq!(c.attr().map_addr, 0);
    assert_eq!(lookup(&mut c, 1).unwrap(), peer_bytes(2));
}

/// A segment of another layout version that nobody holds (processes of an older library that
/// all died) is removed by the next open of its name, as an abandoned segment of this layout
/// is; one that a process holds is refused, naming the version.
#[test]
fn an_abandoned_segment_of_another_layout_gives_way() {
    let name = unique("oldlayout");
    let a = open(attr(&name, 8)).unwrap();
    let path = a.segment_path().to_path_buf();
    poke(&path, 8, segment::LAYOUT_VERSION - 1);
    let e = open(attr(&name, 8)).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("layout version"), "{e}");
    // Keep the file past the last close, as a crash would.
    let keep = path.with_extension("keep");
    std::fs::hard_link(&path, &keep).unwrap();
    drop(a);
    std::fs::rename(&keep, &path).unwrap();
    let mut b = open(attr(&name, 8)).unwrap();
    assert_eq!(insert(&mut b, &[1]), [0], "a fresh AV");
    // A file without the magic is never removed.
    drop(b);
    std::fs::write(&path, [0u8; 4096]).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let e = open(attr(&name, 8)).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(path.exists());
    std::fs::remove_file(&path).unwrap();
}

/// The mirror's guard and the calls that need no mirror live together: straddr of an address
/// read through the guard does not wait for the guard.
#[test]
fn straddr_of_a_mirror_entry_needs_no_second_lock() {
    let name = unique("straddr");
    let mut a = open(attr(&name, 8)).unwrap();
    insert(&mut a, &[1]);
    let mut buf = [0u8; 128];
    let mut len = buf.len();
    let s = a.straddr(&a.av().address_bytes(0).unwrap(), &mut buf, &mut len);
    assert!(s.starts_with("uet://"), "{s}");
}

/// What `uetctl` reads of a named AV from outside: every index in use with its address, the
/// recorded ranges, the generation; read-only, not a handle, and refused clearly.
#[test]
fn a_snapshot_reads_the_av_from_outside_without_joining_it() {
    let name = unique("snap");
    let mut a = open(attr(&name, 64)).unwrap();
    insert(&mut a, &[1, 2, 3, 4]);
    a.remove(&[1], 0).unwrap();
    a.insertsym("10.64.0.1", 2, "1?ri=1+4", 4, None, 0, None)
        .unwrap();

    let snap = segment::Snapshot::read(&name).unwrap();
    assert_eq!(snap.name, name);
    assert_eq!(snap.path, a.segment_path());
    assert_eq!(
        (snap.capacity, snap.job_id, snap.rx_ctx_bits, snap.handles),
        (64, 0x00ab_cdef, 0, 1)
    );
    assert_eq!(snap.generation, a.generation());
    assert_eq!(snap.creator, u64::from(std::process::id()));
    assert_eq!(snap.interrupted_writer, None);
    // Index 1 was removed; the set's 8 members took 1 and 4..11 (lowest free first).
    let indices: Vec<u32> = snap.entries.iter().map(|e| e.0).collect();
    assert_eq!(indices, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    for (index, bytes) in &snap.entries {
        assert_eq!(
            lookup(&mut a, u64::from(*index)).unwrap(),
            *bytes,
            "index {index}"
        );
    }
    assert_eq!(snap.high_water, 11);
    assert_eq!(
        snap.ranges
            .iter()
            .map(|r| (r.first, r.count))
            .collect::<Vec<_>>(),
        [(4, 7)],
        "the members at consecutive indices are one recorded range"
    );

    // Not a handle: the count is unchanged, and the last close still removes the AV.
    assert_eq!(a.handles(), 1);
    let path = a.segment_path().to_path_buf();
    drop(a);
    assert!(!path.exists());
    let gone = segment::Snapshot::read(&name).unwrap_err();
    assert_eq!(gone.errno, FiErrno::FI_ENOENT, "{gone}");
    assert!(gone.to_string().contains(&name), "{gone}");

    // A name no AV can have, and a file that is not a segment.
    assert_eq!(
        segment::Snapshot::read("").unwrap_err().errno,
        FiErrno::FI_EINVAL
    );
    let junk = unique("junk");
    std::fs::write(segment::path_of(&junk), vec![7u8; 4096]).unwrap();
    let e = segment::Snapshot::read(&junk).unwrap_err();
    std::fs::remove_file(segment::path_of(&junk)).unwrap();
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    assert!(e.to_string().contains("bad magic"), "{e}");
}

/// A change in progress holds the lock; a snapshot waits for it, and gives up with
/// `FI_EAGAIN` rather than wait for ever. A writer that died mid-change is reported.
#[test]
fn a_snapshot_waits_for_a_change_and_reports_a_dead_writer() {
    let name = unique("snapwait");
    let mut a = open(attr(&name, 8)).unwrap();
    insert(&mut a, &[1, 2]);
    let params = segment::SegmentParams {
        capacity: 8,
        rx_ctx_bits: 0,
        job_id: 0x00ab_cdef,
        max_group_id: 0,
    };
    let seg = segment::Segment::open(&name, false, params).unwrap().0;
    {
        let _held = seg.lock(true).unwrap();
        let e = segment::Snapshot::read(&name).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
        assert!(e.to_string().contains("try again"), "{e}");
    }
    assert_eq!(segment::Snapshot::read(&name).unwrap().entries.len(), 2);

    poke(a.segment_path(), 17 * 8, 4_000_000);
    let snap = segment::Snapshot::read(&name).unwrap();
    assert_eq!(snap.interrupted_writer, Some(4_000_000));
    // The next change repairs it; the snapshot sees a consistent segment again.
    insert(&mut a, &[3]);
    let snap = segment::Snapshot::read(&name).unwrap();
    assert_eq!(snap.interrupted_writer, None);
    assert_eq!(snap.entries.len(), 3);
}

/// A last handle that died after marking its segment closed and before unlinking it (or
/// could not unlink it) does not block the name: the next open removes the segment and
/// creates the AV afresh, and an FI_READ open finds no AV.
#[test]
fn a_closed_segment_left_at_its_path_does_not_block_the_name() {
    for read_only in [false, true] {
        let name = unique("closed-left");
        let a = open(attr(&name, 8)).unwrap();
        let path = a.segment_path().to_path_buf();
        let keep = path.with_file_name(format!("keep-{name}"));
        std::fs::hard_link(&path, &keep).unwrap();
        drop(a); // marks the segment closed and unlinks it
        std::fs::rename(&keep, &path).unwrap(); // as if the unlink never happened
        if read_only {
            let e = open(AvAttr {
                flags: FI_READ,
                ..attr(&name, 8)
            })
            .err()
            .map(|e| e.errno);
            assert_eq!(e, Some(FiErrno::FI_ENOENT));
            assert!(!path.exists(), "removed");
        } else {
            let mut b = open(attr(&name, 8)).expect("a fresh AV");
            assert_eq!(insert(&mut b, &[1]), [0]);
            drop(b);
            assert!(!path.exists());
        }
    }
}

/// A segment file that another user may open (to write, or only to read: a reader can hold
/// its locks), that another user owns, or that is a symbolic link is refused with FI_EACCES:
/// /dev/shm is writable by all and AV names are known, so such a file could redirect or stall
/// this process's traffic.
#[test]
fn a_segment_file_others_can_reach_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let name = unique("perm");
    let a = open(attr(&name, 8)).unwrap();
    let path = a.segment_path().to_path_buf();
    let mode = |m: u32| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m));
    for m in [0o660, 0o606, 0o644] {
        mode(m).unwrap();
        let e = open(attr(&name, 8)).expect_err("refused");
        assert_eq!(e.errno, FiErrno::FI_EACCES, "{m:o}: {e}");
        assert!(e.message.contains(&format!("mode {m:04o}")), "{e}");
    }
    mode(0o600).unwrap();
    open(attr(&name, 8)).expect("0600 is shared");
    // Owned by another user: only root can make such a file here.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
        let e = open(attr(&name, 8)).expect_err("refused");
        assert_eq!(e.errno, FiErrno::FI_EACCES, "{e}");
        assert!(e.message.contains("belongs to uid 4242"), "{e}");
        std::os::unix::fs::chown(&path, Some(0), None).unwrap();
    }
    drop(a);
    // A symbolic link in the segment's place.
    let link_name = unique("perm-link");
    let link = segment::path_of(&link_name);
    let target = std::env::temp_dir().join(format!("{link_name}-target"));
    std::fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = open(attr(&link_name, 8)).expect_err("refused");
    assert_eq!(e.errno, FiErrno::FI_EACCES, "{e}");
    assert!(e.message.contains("symbolic link"), "{e}");
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_file(&target).unwrap();
}

/// Resolves `node1` only.
fn node1_only(name: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
    if name == "node1" {
        return Ok(vec![std::net::IpAddr::V4(std::net::Ipv4Addr::new(
            10, 7, 0, 1,
        ))]);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "no such host",
    ))
}

/// A named AV's insertsvc fails only the address of a host name that does not resolve, as
/// AddressVector::insertsvc and the named insertsym do: 0 inserted, FI_ADDR_NOTAVAIL in
/// fi_addr, FI_EADDRNOTAVAIL in the status.
#[test]
fn named_insertsvc_of_a_name_that_does_not_resolve_fails_the_address() {
    let name = unique("svc-unresolved");
    let mut a = open(attr(&name, 4)).unwrap();
    a.set_resolver(node1_only);
    let (mut fa, mut st) = (5u64, 1i32);
    assert_eq!(
        a.insertsvc(
            "nosuchhost",
            Some("1"),
            Some(&mut fa),
            FI_SYNC_ERR,
            Some(&mut st)
        ),
        Ok(0),
        "as AddressVector::insertsvc and NamedAv::insertsym"
    );
    assert_eq!((fa, st), (FI_ADDR_NOTAVAIL, 99));
}

/// A count above the NIC's entries per AV is FI_ENOSPC (AvAttr::resolve's table); opening an
/// existing named AV larger than this NIC's tables is the same condition.
#[test]
fn a_named_av_larger_than_the_nic_takes_is_enospc() {
    let name = unique("larger-than-nic");
    let _a = open(attr(&name, 64)).unwrap();
    let small = uet_av::AvLimits::new(32, 8);
    let e = NamedAv::open(attr(&name, 0), small, |a| {
        Ok(MemoryNicTable::new(a.count as u32))
    })
    .map(|_| ())
    .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOSPC, "{e}");
}

/// A symmetric set whose members one process holds one by one (it caught up with the set's
/// insert and the removal of an earlier address at its first index in one go) is removed by
/// that process; a later set at the same first index reaches every other process whole.
#[test]
fn a_range_removed_by_a_process_holding_it_as_singles_does_not_hide_a_later_one() {
    let name = unique("rangestale");
    let mut a = open(attr(&name, 16)).unwrap();
    let mut p = open(attr(&name, 16)).unwrap();
    let mut q = open(attr(&name, 16)).unwrap();
    assert_eq!(insert(&mut a, &[1, 2]), [0, 1]);
    p.sync().unwrap();
    q.sync().unwrap();
    // In one catch-up window of p: index 1 is removed and a set of 4 takes 1..5.
    a.remove(&[1], 0).unwrap();
    let mut out = [0u64; 4];
    a.insertsym("10.0.1.1", 1, "5", 4, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [1, 2, 3, 4]);
    p.sync().unwrap();
    q.sync().unwrap();
    assert_same(&mut a, &mut p);
    // p removes the whole set.
    p.remove(&[1, 2, 3, 4], 0).unwrap();
    q.sync().unwrap();
    assert_same(&mut a, &mut q);
    // A new set of 6, elsewhere on the fabric, takes 1..7.
    let mut out = [0u64; 6];
    a.insertsym("10.0.9.1", 1, "5", 6, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [1, 2, 3, 4, 5, 6]);
    for fa in 1..7 {
        assert_eq!(
            lookup(&mut q, fa).map_err(|e| e.to_string()),
            Ok(lookup(&mut a, fa).unwrap()),
            "fi_addr {fa}"
        );
    }
    assert_same(&mut a, &mut q);
    assert_same(&mut a, &mut p);
}

/// A member removed, its hole refilled with the same address and emptied again by a process
/// that holds the refill as the member, leaves the set's other member in every process,
/// including one that has not caught up since before the set was inserted.
#[test]
fn a_set_member_refilled_with_its_own_address_and_removed_leaves_the_rest_in_a_lagging_process() {
    let name = unique("rangeover");
    let mut a = open(attr(&name, 8)).unwrap();
    let mut l = open(attr(&name, 8)).unwrap();
    let mut m = open(attr(&name, 8)).unwrap();
    l.sync().unwrap();
    m.sync().unwrap();
    let mut out = [0u64; 2];
    a.insertsym("10.0.1.1", 1, "5", 2, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [0, 1]);
    l.sync().unwrap();
    let member0 = lookup(&mut a, 0).unwrap();
    a.remove(&[0], 0).unwrap();
    let mut fa = [0u64; 1];
    a.insert(&member0, 1, Some(&mut fa), 0).unwrap();
    assert_eq!(
        fa,
        [0],
        "the hole is refilled with the member's own address"
    );
    l.sync().unwrap();
    l.remove(&[0], 0).unwrap();
    let want = lookup(&mut a, 1).unwrap();
    assert_eq!(lookup(&mut m, 1).map_err(|e| e.to_string()), Ok(want));
    assert_eq!(m.len().unwrap(), 1);
    assert_same(&mut a, &mut m);
    assert_same(&mut a, &mut l);
}

/// A FIFO (or a link to one) at a segment's path is refused at once: a snapshot does not wait
/// for a writer that never comes.
#[test]
fn a_snapshot_of_a_fifo_at_the_segment_path_is_refused_without_waiting() {
    let name = unique("snapfifo");
    let path = segment::path_of(&name);
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let n = name.clone();
    std::thread::spawn(move || {
        let _ = tx.send(segment::Snapshot::read(&n).map(|s| s.name));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(5));
    if got.is_err() {
        // Let the reader's open return, so that the thread ends.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path);
    }
    std::fs::remove_file(&path).unwrap();
    let e = got
        .expect("the snapshot answers at once")
        .expect_err("a FIFO is no segment");
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    assert!(e.message.contains("not a named-AV segment"), "{e}");
}

/// A set inserted at the first index of a record its members outlived (removed as singles),
/// whose own record is then counted down to nothing while members past the stale record's
/// span remain, reaches whole a process that has not caught up since before it was inserted:
/// the stale record names fewer members than the set has.
#[test]
fn a_set_whose_record_went_early_behind_a_stale_record_at_its_index_reaches_a_lagging_process() {
    let name = unique("rangestalegone");
    let mut a = open(attr(&name, 32)).unwrap();
    let mut p = open(attr(&name, 32)).unwrap();
    let mut l = open(attr(&name, 32)).unwrap();
    let mut m = open(attr(&name, 32)).unwrap();
    // A set of 2 at 0..2 takes the first range record, and a single index 2.
    let mut out = [0u64; 2];
    a.insertsym("10.0.7.1", 1, "5", 2, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [0, 1]);
    assert_eq!(insert(&mut a, &[1]), [2]);
    p.sync().unwrap();
    // In one catch-up window of p: index 2 is removed and a set of 4 takes 2..6, which p
    // then holds as singles and removes: that set's record outlives its members.
    a.remove(&[2], 0).unwrap();
    let mut out = [0u64; 4];
    a.insertsym("10.0.1.1", 1, "5", 4, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [2, 3, 4, 5]);
    p.sync().unwrap();
    p.remove(&[2, 3, 4, 5], 0).unwrap();
    // The first set goes with its record, and singles take its indices.
    a.remove(&[0, 1], 0).unwrap();
    assert_eq!(insert(&mut a, &[3, 4]), [0, 1]);
    l.sync().unwrap();
    m.sync().unwrap();
    // A set of 12 takes 2..14 and the first record; m lags from here on.
    let mut out = [0u64; 12];
    a.insertsym("10.0.9.1", 1, "5", 12, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, core::array::from_fn::<u64, 12, _>(|i| i as u64 + 2));
    l.sync().unwrap();
    // Members 6..12, past the stale record's span, are removed and refilled with their own
    // addresses by a, then removed by l, which holds the refills as the members: the set's
    // record is counted down twice for each, to nothing, while members 2..6 and 12..14 stay.
    let gone: Vec<u64> = (6..12).collect();
    let members: Vec<[u8; ADDR_LEN]> = gone.iter().map(|&i| lookup(&mut a, i).unwrap()).collect();
    a.remove(&gone, 0).unwrap();
    let mut fa = vec![0u64; gone.len()];
    assert_eq!(
        a.insert(&pack(&members), gone.len(), Some(&mut fa), 0)
            .unwrap(),
        gone.len()
    );
    assert_eq!(fa, gone, "the holes are refilled with the members");
    l.sync().unwrap();
    l.remove(&gone, 0).unwrap();
    for fa in (2..6).chain(12..14) {
        assert_eq!(
            lookup(&mut m, fa).map_err(|e| e.to_string()),
            Ok(lookup(&mut a, fa).unwrap()),
            "fi_addr {fa}"
        );
    }
    assert_same(&mut a, &mut m);
    assert_same(&mut a, &mut l);
    assert_same(&mut a, &mut p);
}

/// Set once a [`held_resolver`] call has started; it returns once [`RESOLVER_RELEASE`] is set.
static RESOLVER_ENTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RESOLVER_RELEASE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A resolver as slow as the test wants: it resolves every name to 10.7.0.9 once released.
fn held_resolver(_name: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
    use std::sync::atomic::Ordering;
    RESOLVER_ENTERED.store(true, Ordering::SeqCst);
    while !RESOLVER_RELEASE.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok(vec![std::net::IpAddr::V4(std::net::Ipv4Addr::new(
        10, 7, 0, 9,
    ))])
}

/// An in-memory NIC table that keeps the AV generation it reflects where the test sees it.
struct WatchedNic {
    inner: MemoryNicTable,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl uet_av::NicAvTable for WatchedNic {
    fn write_entries(
        &mut self,
        records: &[uet_fwif::AvWriteRecord],
    ) -> Result<(), uet_av::NicError> {
        self.inner.write_entries(records)
    }
    fn invalidate(&mut self, indices: &[u32]) -> Result<(), uet_av::NicError> {
        self.inner.invalidate(indices)
    }
    fn read_entries(
        &mut self,
        first: u32,
        out: &mut [uet_fwif::NicAvEntry],
    ) -> Result<(), uet_av::NicError> {
        self.inner.read_entries(first, out)
    }
    fn reflects_generation(&self, generation: u64) {
        self.generation
            .store(generation, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Resolving insertsvc's host name does not hold this process's mirror: an endpoint's
/// catch-up meanwhile (before a send or a completion read) brings the NIC table up to the
/// changes other processes made instead of finding the mirror busy for as long as the name
/// takes to resolve.
#[test]
fn an_insertsvc_resolving_a_host_name_leaves_the_datapath_catch_up_to_run() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let name = unique("svc-resolving");
    let generation = std::sync::Arc::new(AtomicU64::new(u64::MAX));
    let seen = generation.clone();
    let mut a = NamedAv::open(attr(&name, 8), LIMITS, move |a| {
        Ok(WatchedNic {
            inner: MemoryNicTable::new(a.count as u32),
            generation: seen,
        })
    })
    .unwrap();
    a.set_resolver(held_resolver);
    let hook = a
        .av()
        .sync_hook()
        .expect("a named AV's mirror has a catch-up");
    let mut b = open(attr(&name, 8)).unwrap();
    insert(&mut b, &[1]);
    let committed = b.generation();
    assert_ne!(generation.load(Ordering::SeqCst), committed);
    let resolving = std::thread::spawn(move || {
        let r = a.insertsvc("slowhost", Some("7"), None, 0, None);
        (a, r)
    });
    while !RESOLVER_ENTERED.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let caught_up = hook.catch_up();
    let reflected = generation.load(Ordering::SeqCst);
    RESOLVER_RELEASE.store(true, Ordering::SeqCst);
    let (mut a, inserted) = resolving.join().unwrap();
    assert_eq!(inserted, Ok(1));
    caught_up.unwrap();
    assert_eq!(
        reflected, committed,
        "the NIC table caught up while the host name resolved"
    );
    drop(hook);
    let (mut out, mut len) = ([0u8; ADDR_LEN], ADDR_LEN);
    a.lookup(0, &mut out, &mut len).unwrap();
    assert_eq!(out, peer_bytes(1), "b's insert, in a's mirror");
}

/// Both opens of the AV `name` of `count` entries, one that may create it and one
/// `FI_READ`, are refused `FI_EINVAL` with a message holding `why` (`what` names the case
/// in a failure).
fn assert_opens_refused(name: &str, count: usize, why: &str, what: &str) {
    for flags in [0, FI_READ] {
        let e = open(AvAttr {
            flags,
            ..attr(name, count)
        })
        .expect_err("refused");
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{what}, flags {flags:#x}: {e}");
        assert!(e.message.contains(why), "{what}: {e}");
    }
}

/// A directory or a socket where the segment file would be is not a named-AV segment:
/// FI_EINVAL, as for any other file that is not one (whether the open would create the AV or
/// only open it, and for a snapshot), and it is left where it is.
#[test]
fn a_directory_or_socket_at_the_segment_path_is_not_a_segment() {
    let name = unique("notfile");
    let path = segment::path_of(&name);
    let refused = |what: &str| {
        assert_opens_refused(&name, 8, "not a named-AV segment", what);
        let e = segment::Snapshot::read(&name).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{what}: {e}");
    };
    std::fs::create_dir(&path).unwrap();
    refused("a directory");
    assert!(path.is_dir(), "left alone");
    std::fs::remove_dir(&path).unwrap();
    let socket = std::os::unix::net::UnixListener::bind(&path).unwrap();
    refused("a socket");
    assert!(path.exists(), "left alone");
    drop(socket);
    std::fs::remove_file(&path).unwrap();
}

/// A live segment whose state word (header word 18) was overwritten, while handles are
/// attached to it, has a corrupt header: an open is FI_EINVAL saying so, and the handles
/// attached go on.
#[test]
fn a_live_segment_with_a_corrupt_state_word_is_einval_to_an_open() {
    for state in [0u64, 2, 7, u64::MAX] {
        let name = unique("bad-state");
        let mut a = open(attr(&name, 8)).unwrap();
        let path = a.segment_path().to_path_buf();
        poke(&path, 18 * 8, state);
        assert_opens_refused(&name, 8, "corrupt header", &format!("state {state}"));
        assert_eq!(insert(&mut a, &[1]), [0], "the attached handle goes on");
        assert_eq!(a.handles(), 1, "no handle of the refused opens is counted");
        drop(a);
        assert!(!path.exists(), "the last close removes it");
    }
}

/// Hold an open-file-description lock of `kind` on byte `byte` of `path`, as a handle of
/// another process does, for as long as the file returned stays open.
fn hold_byte(path: &std::path::Path, kind: libc::c_int, byte: i64) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: `flock` is a plain C struct of integers; all-zero bytes are a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte;
    fl.l_len = 1;
    // SAFETY: fcntl reads the flock struct, which outlives the call, on an open descriptor.
    let r = unsafe {
        libc::fcntl(
            holder.as_raw_fd(),
            libc::F_OFD_SETLK,
            &mut fl as *mut libc::flock,
        )
    };
    assert_eq!(r, 0);
    holder
}

/// A segment whose header describes a table of no entries (sizes and offsets consistent with
/// it) was made by no process of this library, whose AVs have at least one entry: it is a
/// corrupt header, FI_EINVAL, rather than an AV opened with a size it does not have.
#[test]
fn a_segment_of_no_entries_is_a_corrupt_header() {
    let name = unique("no-entries");
    let a = open(attr(&name, 8)).unwrap();
    let path = a.segment_path().to_path_buf();
    let mut bytes = std::fs::read(&path).unwrap();
    drop(a);
    // The layout `segment` documents, for a capacity of 0: no bitmap words, the log at the
    // header's end, then the range table, then no slots.
    let log_off = segment::HEADER_BYTES as u64;
    let ranges_off = log_off + LOG_RECORDS * segment::LOG_RECORD_BYTES as u64;
    let slots_off = ranges_off + (segment::RANGE_RECORDS * segment::RANGE_RECORD_BYTES) as u64;
    let mut set =
        |word: usize, v: u64| bytes[word * 8..word * 8 + 8].copy_from_slice(&v.to_le_bytes());
    set(2, 0); // capacity
    set(7, log_off);
    set(20, ranges_off);
    set(8, slots_off);
    set(9, slots_off); // size
    set(13, 0); // live
    set(14, 0); // high-water mark
    bytes.truncate(slots_off as usize);
    bytes[segment::HEADER_BYTES..].fill(0);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    std::fs::write(&path, &bytes).unwrap();
    // A handle of another process is attached (its presence, byte 1).
    let presence = hold_byte(&path, libc::F_RDLCK, 1);
    assert_opens_refused(&name, 0, "corrupt header", "a segment of no entries");
    let e = segment::Snapshot::read(&name).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    drop(presence);
    std::fs::remove_file(&path).unwrap();
    // Nor is one made.
    let params = segment::SegmentParams {
        capacity: 0,
        rx_ctx_bits: 0,
        job_id: 1,
        max_group_id: 0,
    };
    let e = segment::Segment::open(&name, true, params).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    assert!(!path.exists());
}

/// A snapshot reads a file's header before the rest of it: a file at the segment path that is
/// no segment is FI_EINVAL however large it is (a sparse file of 16 TiB here, which a copy of
/// the whole file could not hold), without the file being read.
#[test]
fn a_snapshot_of_a_huge_file_that_is_no_segment_reads_only_its_header() {
    let name = unique("huge");
    let path = segment::path_of(&name);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    f.set_len(1 << 44).unwrap();
    drop(f);
    let e = segment::Snapshot::read(&name).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    assert!(e.message.contains("bad magic"), "{e}");
    std::fs::remove_file(&path).unwrap();
}

/// An open looks at a file through its header before mapping the rest of it: a file at the
/// segment path that is no segment is FI_EINVAL however large it is (sparse files of 16 TiB,
/// 128 TiB and 4 EiB here, more than an address space maps), whether the open would create
/// the AV or only open it, and it is left where it is.
#[test]
fn an_open_of_a_huge_file_that_is_no_segment_is_einval() {
    for size in [1u64 << 44, 1 << 47, 1 << 62] {
        let name = unique("huge-open");
        let path = segment::path_of(&name);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap();
        f.set_len(size).unwrap();
        drop(f);
        assert_opens_refused(&name, 8, "bad magic", &format!("{size:#x}"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size, "left alone");
        std::fs::remove_file(&path).unwrap();
    }
}

/// A process forked from one that holds a handle shares the handle's open file description,
/// and with it the segment's locks: its copy of the handle can take no lock that keeps the
/// parent out, and its close would give up the parent's presence and, finding no other,
/// remove the AV from under it. So the copy refuses every change and catch-up (FI_EINVAL),
/// and its close leaves the AV to the process that opened the handle.
#[test]
fn a_forked_copy_of_a_handle_neither_changes_nor_closes_the_av() {
    let name = unique("forked");
    let mut a = open(attr(&name, 8)).unwrap();
    let path = a.segment_path().to_path_buf();
    let first = insert(&mut a, &[1]);
    // SAFETY: the child runs only the code below (the forked copy of the handle, then
    // _exit); the test's other threads are not used in it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let buf = pack(&[peer_bytes(2)]);
            let insert = a.insert(&buf, 1, None, 0).map_err(|e| e.errno);
            let remove = a.remove(&first, 0).map_err(|e| e.errno);
            drop(a);
            insert == Err(FiErrno::FI_EINVAL) && remove == Err(FiErrno::FI_EINVAL)
        }));
        let code = match outcome {
            Ok(true) => 0,
            Ok(false) => 2,
            Err(_) => 3,
        };
        // SAFETY: ends the forked child at once, running nothing of the parent's.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above; `status` outlives the call.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the forked copy's changes are FI_EINVAL"
    );
    assert!(path.exists(), "the forked copy's close left the AV");
    assert_eq!(a.handles(), 1);
    let mut b = open(attr(&name, 8)).unwrap();
    assert_eq!(
        lookup(&mut b, first[0]).unwrap(),
        peer_bytes(1),
        "the same AV"
    );
    assert_eq!(a.len().unwrap(), 1, "nothing of the child's reached it");
    drop(b);
    assert!(path.exists(), "a's presence still counts");
    drop(a);
    assert!(!path.exists());
}

/// Whether a lock is held on `byte` of the segment file at `path`, by any open file
/// description but one of this call's own.
fn lock_held(path: &std::path::Path, byte: i64) -> bool {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: a zeroed flock is a valid value of the plain C struct.
    let mut fl: libc::flock = unsafe { core::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = byte;
    fl.l_len = 1;
    // SAFETY: F_OFD_GETLK on a descriptor `f` keeps open, with a valid flock it fills in.
    assert_eq!(
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) },
        0
    );
    i32::from(fl.l_type) != libc::F_UNLCK
}

/// A process forked from one that holds a handle gives up at the fork its share of the
/// segment's open file description (its copies of the descriptor and of the mapping, either
/// of which keeps the description's locks): when the process that opened the handle dies in
/// the middle of a change, a child it forked that is still running keeps no lock from the
/// other processes, and the next one repairs the segment and goes on.
#[test]
fn a_forked_child_keeps_no_lock_of_a_parent_that_died_mid_change() {
    let name = unique("forked-died");
    let mut a = open(attr(&name, 8)).unwrap();
    let path = a.segment_path().to_path_buf();
    insert(&mut a, &[1]);
    let mut pipe = [0; 2];
    // SAFETY: `pipe` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    // SAFETY: the child runs only the code below, then _exit; the test's other threads are
    // not used in it.
    let writer = unsafe { libc::fork() };
    assert!(writer >= 0);
    if writer == 0 {
        // The writer: a handle of its own, in the middle of a change, forks a child that
        // lives on, tells the test the child's pid, and dies.
        let params = segment::SegmentParams {
            capacity: 8,
            rx_ctx_bits: 0,
            job_id: 0x00ab_cdef,
            max_group_id: 0,
        };
        let Ok((seg, _)) = segment::Segment::open(&name, false, params) else {
            // SAFETY: ends the forked child at once.
            unsafe { libc::_exit(2) };
        };
        let Ok(held) = seg.lock(true) else {
            // SAFETY: as above.
            unsafe { libc::_exit(3) };
        };
        held.begin();
        // SAFETY: as above: the grandchild sleeps and exits, running nothing else.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // Past the fork handlers: the child tells the test its pid, sleeps, and ends.
            let bytes = std::process::id().to_ne_bytes();
            // SAFETY: writes the 4 bytes of `bytes` to the pipe's write end; sleeps, then
            // ends at once (the test kills it sooner).
            unsafe {
                libc::write(pipe[1], bytes.as_ptr().cast(), bytes.len());
                libc::sleep(60);
                libc::_exit(0);
            }
        }
        // SAFETY: ends at once, holding the lock, its change unfinished.
        unsafe { libc::_exit(if child > 0 { 0 } else { 4 }) };
    }
    let mut bytes = [0u8; 4];
    // SAFETY: reads up to 4 bytes into `bytes` from the pipe's read end.
    let got = unsafe { libc::read(pipe[0], bytes.as_mut_ptr().cast(), bytes.len()) };
    let child = i32::from_ne_bytes(bytes);
    let mut status = 0;
    // SAFETY: waits for the writer forked above; `status` outlives the call.
    assert_eq!(unsafe { libc::waitpid(writer, &mut status, 0) }, writer);
    // SAFETY: closes the two pipe descriptors made above, used no more.
    unsafe {
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "writer status {status:#x}"
    );
    assert_eq!(got, 4, "the pid of the writer's child, once it runs");
    assert!(child > 0);
    let end_child = || {
        let mut status = 0;
        // SAFETY: ends and reaps the writer's child (a process of this test's making).
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, &mut status, 0);
        }
    };
    // Checked first: an open would wait for the lock for as long as the child lives.
    if lock_held(&path, 0) {
        end_child();
        panic!("the dead writer's lock is kept by its child");
    }
    let mut b = open(attr(&name, 8)).expect("the next open repairs the segment");
    assert_eq!(lookup(&mut b, 0).unwrap(), peer_bytes(1));
    assert_eq!(insert(&mut b, &[2]), [1]);
    assert_same(&mut a, &mut b);
    drop(a);
    drop(b);
    // Nor does the dead writer's presence outlive it in its child.
    let removed = !path.exists();
    end_child();
    assert!(
        removed,
        "the last close removes the AV though the writer's child lives"
    );
}

/// A range record past the high-water mark (no process writes one: its members would be
/// indices never taken) is no range of the AV: a process opening it holds the slots, which
/// are empty there, not members the record describes that no other process holds.
#[test]
fn a_range_record_past_the_high_water_mark_is_not_held() {
    use std::os::unix::fs::FileExt;
    let name = unique("range-hw");
    let mut a = open(attr(&name, 16)).unwrap();
    insert(&mut a, &[1, 2]);
    let path = a.segment_path().to_path_buf();
    let f = std::fs::File::open(&path).unwrap();
    let mut w = [0u8; 8];
    f.read_exact_at(&mut w, 20 * 8).unwrap();
    let ranges_off = u64::from_le_bytes(w);
    // Record 0: members 0 and 1 of a set of one service per node, at indices 8 and 9.
    let base = peer_bytes(7);
    poke(&path, ranges_off + 8, 8 | 2 << 32);
    poke(&path, ranges_off + 16, 1);
    for (k, c) in base.chunks_exact(8).enumerate() {
        poke(
            &path,
            ranges_off + 24 + 8 * k as u64,
            u64::from_le_bytes(c.try_into().unwrap()),
        );
    }
    poke(&path, ranges_off + 56, 2);
    poke(&path, ranges_off, 1);
    let mut b = open(attr(&name, 16)).unwrap();
    assert_eq!(b.av().address_bytes(8), None, "index 8 is not in the AV");
    assert!(lookup(&mut b, 8).is_err());
    assert_same(&mut a, &mut b);
}

/// A high-water mark lowered by garbage in its header word hides no index in use from a
/// process that rescans: it holds what the bitmap and slots hold, as the processes that caught
/// up before do.
#[test]
fn a_rescan_looks_past_a_high_water_mark_below_the_indices_in_use() {
    let name = unique("low-hw");
    let mut a = open(attr(&name, 200)).unwrap();
    insert(&mut a, &[1, 2, 3]);
    let path = a.segment_path().to_path_buf();
    poke(&path, 14 * 8, 1);
    let mut c = open(attr(&name, 200)).unwrap();
    assert_eq!(lookup(&mut c, 2).unwrap(), peer_bytes(3));
    assert_same(&mut a, &mut c);
    // Past the first bitmap word too.
    let many: Vec<u32> = (10..150).collect();
    insert(&mut a, &many);
    poke(&path, 14 * 8, 0);
    let mut d = open(attr(&name, 200)).unwrap();
    assert_eq!(d.len().unwrap(), 143);
    assert_same(&mut a, &mut d);
}

/// A snapshot lists every index in use, past a high-water mark below them too, as a process
/// that opens the AV holds them.
#[test]
fn a_snapshot_lists_the_indices_in_use_past_a_low_high_water_mark() {
    let name = unique("snap-low-hw");
    let mut a = open(attr(&name, 200)).unwrap();
    insert(&mut a, &[1, 2, 3]);
    poke(a.segment_path(), 14 * 8, 1);
    let snap = segment::Snapshot::read(&name).unwrap();
    let indices: Vec<u32> = snap.entries.iter().map(|&(i, _)| i).collect();
    assert_eq!(indices, [0, 1, 2]);
    assert_eq!(snap.entries[2].1, peer_bytes(3));
}
