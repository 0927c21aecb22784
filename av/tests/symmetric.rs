//! FI_SYMMETRIC storage: `fi_av_insertsym` of IP-literal nodes is kept as ranges, on the host
//! and on the NIC, with the same indices and addresses as inserting every member.

mod common;

use common::{insert_peers, open};
use uet_av::{FiErrno, NicAvTable, FI_AV_USER_ID, FI_MORE};
use uet_fwif::{NicAvEntry, UetAddress};

fn lookup(av: &uet_av::AddressVector<uet_av::MemoryNicTable>, fi_addr: u64) -> UetAddress {
    let mut b = [0u8; 32];
    let mut len = b.len();
    av.lookup(fi_addr, &mut b, &mut len).expect("lookup");
    UetAddress::from_bytes(&b).expect("valid")
}

#[test]
fn a_million_symmetric_peers_cost_one_record_and_under_a_megabyte() {
    let mut av = open(1 << 20);
    let before = av.host_bytes();
    let mut out = vec![0u64; 1_000_000];
    let n = av
        .insertsym(
            "10.8.0.1",
            1000,
            "1?ri=1+4&init=0x100",
            1000,
            Some(&mut out),
            0,
            None,
        )
        .expect("insertsym");
    assert_eq!(n, 1_000_000);
    assert!(out.iter().enumerate().all(|(i, &a)| a == i as u64));
    let grown = av.host_bytes() - before;
    assert!(grown < 1 << 20, "host mirror grew by {grown} bytes");
    let c = av.nic().counters();
    assert_eq!(
        (c.writes, c.records_written),
        (1, 1),
        "one AV_WRITE of one record"
    );
    assert_eq!(av.ranges().collect::<Vec<_>>(), [(0, 1_000_000, 1_000_000)]);
    // Node 999, service 999.
    let last = lookup(&av, 999_999);
    assert_eq!(last.fabric_addr.to_string(), "10.8.3.232");
    assert_eq!((last.pid_on_fep, last.initiator), (1000, 0x100 + 999));
    // The NIC computes the same member.
    let mut e = [NicAvEntry::INVALID; 1];
    av.nic_mut().read_entries(999_999, &mut e).unwrap();
    assert_eq!(e[0].peer_address(), Some(last));
    assert!(e[0].is_range());
}

#[test]
fn ranges_assign_exactly_the_indices_single_inserts_would() {
    // Holes at 1, 3, 4: a symmetric insert of 6 fills 1, then 3..5 as a range, then 5..7.
    let mut av = open(64);
    let singles = insert_peers(&mut av, &[1, 2, 3, 4, 5, 6, 7, 8]);
    av.remove(&[singles[1], singles[3], singles[4]], 0).unwrap();
    let mut out = [0u64; 6];
    av.insertsym("10.9.0.1", 3, "7", 2, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [1, 3, 4, 8, 9, 10]);
    // Member k is node k / 2, service k % 2, wherever it landed.
    for (k, &fa) in out.iter().enumerate() {
        let a = lookup(&av, fa);
        assert_eq!(a.fabric_addr.to_string(), format!("10.9.0.{}", 1 + k / 2));
        assert_eq!(a.pid_on_fep, 7 + (k % 2) as u16);
    }
    // Index 1 alone is a single entry; 3..5 and 8..11 are ranges.
    assert_eq!(
        av.ranges().map(|(f, c, _)| (f, c)).collect::<Vec<_>>(),
        [(3, 2), (8, 3)]
    );
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn removing_members_leaves_holes_that_singles_fill() {
    let mut av = open(32);
    let mut out = [0u64; 8];
    av.insertsym("10.7.0.1", 4, "3", 2, Some(&mut out), 0, None)
        .unwrap();
    av.remove(&[2, 5], 0).unwrap();
    assert_eq!(
        av.lookup(2, &mut [0; 32], &mut 32).unwrap_err().errno,
        FiErrno::FI_EINVAL
    );
    assert_eq!(av.len(), 6);
    // The lowest free index is the hole at 2; a plain insert takes it.
    let k = insert_peers(&mut av, &[40]);
    assert_eq!(k, [2]);
    assert_eq!(lookup(&av, 2), common::peer(40));
    assert!(av.verify_nic().unwrap().is_empty());
    // Removing every member removes the range; removing the single leaves index 2 free.
    av.remove(&[0, 1, 3, 4, 6, 7], 0).unwrap();
    assert_eq!(av.ranges().count(), 0);
    av.remove(&[2], 0).unwrap();
    assert!(av.is_empty());
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn pending_ranges_go_out_with_the_batch_and_roll_back_whole() {
    let mut av = open(64);
    av.insertsym("10.6.0.1", 2, "1", 4, None, FI_MORE, None)
        .unwrap();
    assert_eq!(av.pending_len(), 8);
    assert_eq!(av.nic().counters().writes, 0);
    // The NIC refuses the batch: the range is rolled back whole. Its indices were returned
    // by the insertsym call, so they are lost, one run of 8, until removed; the ending call's
    // own index is free again.
    av.nic_mut().fail_after(uet_av::NicOp::Write, 0);
    let e = av.insert(&common::peer_bytes(9), 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert!(e.message.contains("8 of the indices"), "{e}");
    assert!(av.is_empty());
    assert_eq!(av.lost_len(), 8);
    assert_eq!(av.ranges().count(), 0);
    av.nic_mut().clear_faults();
    let mut out = [0u64; 8];
    av.insertsym("10.6.0.1", 2, "1", 4, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [8, 9, 10, 11, 12, 13, 14, 15]);
    let lost: Vec<u64> = (0..8).collect();
    av.remove(&lost, 0).unwrap();
    assert_eq!(av.lost_len(), 0);
    av.insertsym("10.6.0.1", 2, "1", 4, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn host_name_ranges_and_user_ids_are_stored_per_address() {
    // Host names resolve one by one: no range.
    let mut av = open(16);
    av.set_resolver(|name| match name {
        "node1" => Ok(vec!["10.5.0.9".parse().unwrap()]),
        "node2" => Ok(vec!["10.5.0.3".parse().unwrap()]),
        _ => Err(std::io::Error::other("unknown")),
    });
    let mut out = [0u64; 2];
    av.insertsym("node1", 2, "4", 1, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(av.ranges().count(), 0);
    assert_eq!(lookup(&av, out[1]).fabric_addr.to_string(), "10.5.0.3");
    // An AV with user ids keeps one entry per address.
    let mut av = common::open_with(uet_av::AvAttr {
        count: 16,
        flags: uet_av::FI_AV_USER_ID,
        ..uet_av::AvAttr::default()
    });
    av.insertsym("10.4.0.1", 2, "4", 2, None, 0, None).unwrap();
    assert_eq!(av.ranges().count(), 0);
    assert_eq!(av.len(), 4);
}

#[test]
fn a_new_range_never_covers_the_holes_of_an_older_one() {
    // A range at 0..4 loses members 1 and 2; the next symmetric insert takes the lowest free
    // indices 1, 2 and 4.. — inside the old range's span they are single entries.
    let mut av = open(16);
    av.insertsym("10.3.0.1", 2, "1", 2, None, 0, None).unwrap();
    av.remove(&[1, 2], 0).unwrap();
    let mut out = [0u64; 5];
    av.insertsym("10.4.0.1", 5, "9", 1, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(out, [1, 2, 4, 5, 6]);
    for (k, &fa) in out.iter().enumerate() {
        assert_eq!(
            lookup(&av, fa).fabric_addr.to_string(),
            format!("10.4.0.{}", 1 + k)
        );
    }
    assert_eq!(
        av.ranges().map(|(f, c, _)| (f, c)).collect::<Vec<_>>(),
        [(0, 4), (4, 3)]
    );
    assert!(av.verify_nic().unwrap().is_empty());
}

#[test]
fn insert_range_at_places_a_range_where_told_and_refuses_what_a_range_cannot_hold() {
    use common::{assert_in_step, open_with};
    let mut av = open(64);
    let base = lookup_base();
    insert_peers(&mut av, &[1]);
    assert_eq!(av.insert_range_at(4, 10, 8, 3, base), Ok(()));
    av.flush().unwrap();
    assert_in_step(&av);
    assert_eq!(av.ranges().collect::<Vec<_>>(), [(4, 10, 10)]);
    // Member 3 at index 4: node 0, service 3.
    assert_eq!(lookup(&av, 4), base.symmetric_member(8, 3).unwrap());
    assert_eq!(lookup(&av, 13), base.symmetric_member(8, 12).unwrap());

    let refused = [
        (0, 4, "index 0 is in use"),
        (12, 4, "meets the span of a range"),
        (2, 3, "meets the span of a range"),
        (60, 5, "outside the table"),
        (20, 1, "fewer than 2"),
    ];
    for (first, count, why) in refused {
        let e = av.insert_range_at(first, count, 8, 0, base).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{why}");
    }
    // With 5000 services per node, members 4095 on would need PIDonFEPs past 12 bits.
    let e = av.insert_range_at(30, 4, 5000, 4093, base).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert_eq!(av.ranges().count(), 1, "nothing changed");
    assert_eq!(av.pending_len(), 0);
    assert_in_step(&av);

    // An AV that keeps user ids holds no ranges.
    let mut with_ids = open_with(uet_av::AvAttr {
        count: 16,
        flags: uet_av::FI_AV_USER_ID,
        ..uet_av::AvAttr::default()
    });
    let e = with_ids.insert_range_at(0, 4, 8, 0, base).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
}

fn lookup_base() -> UetAddress {
    uet_av::addr_str::SymRange::parse("10.9.0.1", 4, "1?ri=1+4", 8)
        .and_then(|r| {
            r.literal_set()
                .ok_or_else(|| uet_av::FiError::inval("not literal"))
        })
        .map(|(base, _, _)| base)
        .expect("a literal set")
}

/// On an AV opened without `FI_AV_USER_ID`, an insert with the per-insert `FI_AV_USER_ID` flag
/// (one whose addresses all fail, as much as one that inserts) leaves later symmetric inserts
/// stored as ranges: their members carry no user id, and the AV keeps one record for them,
/// not one slot per member.
#[test]
fn a_per_insert_user_id_leaves_symmetric_inserts_stored_as_ranges() {
    let mut av = open(64);
    let mut ids = [0x51u64];
    let bad = common::bad_bytes(1);
    assert_eq!(av.insert(&bad, 1, Some(&mut ids), FI_AV_USER_ID), Ok(0));
    assert_eq!(av.insertsym("10.3.0.1", 4, "1", 4, None, 0, None), Ok(16));
    assert_eq!(av.ranges().collect::<Vec<_>>(), [(0, 16, 16)]);

    let mut ids = [0x52u64];
    let good = common::peer_bytes(7);
    assert_eq!(av.insert(&good, 1, Some(&mut ids), FI_AV_USER_ID), Ok(1));
    assert_eq!(ids, [16]);
    let mut out = [0u64; 4];
    assert_eq!(
        av.insertsym("10.4.0.1", 2, "1", 2, Some(&mut out), 0, None),
        Ok(4)
    );
    assert_eq!(out, [17, 18, 19, 20]);
    assert_eq!(av.ranges().count(), 2);
    assert_eq!(av.user_id(16), Ok(Some(0x52)));
    for fa in (0..16).chain(out) {
        assert_eq!(av.user_id(fa), Ok(None), "index {fa}");
    }
    // A member removed and an address with a user id put in its place, then removed again:
    // the next symmetric insert finds no user id there.
    av.remove(&[17], 0).unwrap();
    let mut ids = [0x53u64];
    assert_eq!(av.insert(&good, 1, Some(&mut ids), FI_AV_USER_ID), Ok(1));
    assert_eq!((ids, av.user_id(17)), ([17], Ok(Some(0x53))));
    av.remove(&[17], 0).unwrap();
    assert_eq!(av.insertsym("10.5.0.1", 1, "1", 1, None, 0, None), Ok(1));
    assert_eq!(av.user_id(17), Ok(None));
    assert!(av.verify_nic().unwrap().is_empty());
    common::assert_in_step(&av);
}

/// Many small ranges (one `fi_av_insertsym` per node, as an application adding nodes one by
/// one does) are each found, stored and dropped on their own: lookups give each member, a
/// removed member leaves a hole in its range, a range goes with its last member whichever
/// order they go in (index order, the reverse, or from the middle), and the mirror and the
/// NIC agree throughout. (The mirror keeps them in a B-tree: a sorted list moved every later
/// range at each one dropped, quadratic over all of them.)
#[test]
fn many_small_ranges_are_each_added_found_and_dropped_on_their_own() {
    const NODES: u32 = 1500;
    const SVC: usize = 4;
    let mut av = open(1 << 16);
    let empty_bytes = av.host_bytes();
    let mut members = Vec::new();
    for n in 0..NODES {
        let node = format!("10.{}.{}.1", 20 + n / 256, n % 256);
        let mut out = [0u64; SVC];
        let added = av
            .insertsym(
                &node,
                1,
                "2?ri=1+4&init=0x100",
                SVC,
                Some(&mut out),
                0,
                None,
            )
            .expect("insertsym");
        assert_eq!(added, SVC);
        members.push(out);
    }
    assert_eq!(av.ranges().count(), NODES as usize);
    for (n, out) in members.iter().enumerate().step_by(97) {
        let a = lookup(&av, out[SVC - 1]);
        let want = format!("10.{}.{}.1", 20 + n / 256, n % 256);
        assert_eq!(
            (a.fabric_addr.to_string(), a.pid_on_fep),
            (want, 2 + SVC as u16 - 1)
        );
    }
    // A member from the middle of a range: a hole, the range stays.
    av.remove(&members[700][1..2], 0).unwrap();
    assert_eq!(av.ranges().count(), NODES as usize);
    let mut b = [0u8; 32];
    let mut len = b.len();
    assert!(av.lookup(members[700][1], &mut b, &mut len).is_err());
    assert_eq!(lookup(&av, members[700][2]).pid_on_fep, 4);
    // The first third in index order, the last third in reverse, then the rest.
    let (first, rest) = members.split_at(NODES as usize / 3);
    let (middle, last) = rest.split_at(NODES as usize / 3);
    for out in first {
        av.remove(out, 0).unwrap();
    }
    for out in last.iter().rev() {
        av.remove(out, 0).unwrap();
    }
    assert_eq!(av.ranges().count(), middle.len());
    assert!(av.verify_nic().unwrap().is_empty(), "mirror and NIC agree");
    for out in middle {
        let live: Vec<u64> = out
            .iter()
            .copied()
            .filter(|&a| a != members[700][1])
            .collect();
        av.remove(&live, 0).unwrap();
    }
    assert_eq!(av.ranges().count(), 0);
    assert!(av.verify_nic().unwrap().is_empty());
    assert!(
        av.host_bytes() <= empty_bytes + (64 << 10),
        "{} bytes",
        av.host_bytes()
    );
}
