//! fi_av_set(3): creation, set algebra in the man page's order, limits, stale members, and the
//! collective address.

mod common;

use common::*;
use proptest::prelude::*;
use uet_av::{
    fi_rx_addr, is_av_set_addr, AvAttr, AvLimits, AvSet, AvSetAttr, FiErrno, AUTH_KEY_ADDR_BASE,
    FI_ADDR_NOTAVAIL, FI_AV_AUTH_KEY, FI_AV_USER_ID, FI_BARRIER_SET, FI_GATHER_SET, FI_MORE,
    FI_UNIVERSE,
};

fn errno<T: std::fmt::Debug>(r: Result<T, uet_av::FiError>) -> FiErrno {
    r.expect_err("call should fail").errno
}

fn members(s: &AvSet) -> Vec<u64> {
    s.members().collect()
}

fn range(start: u64, end: u64, stride: u64) -> AvSetAttr {
    AvSetAttr {
        start_addr: start,
        end_addr: end,
        stride,
        ..AvSetAttr::default()
    }
}

fn empty_set(av: &uet_av::AddressVector<uet_av::MemoryNicTable>) -> AvSet {
    av.av_set(&AvSetAttr::default()).unwrap()
}

/// An AV of 16 with indices 0..10 in use and 3 and 6 removed.
fn av10() -> uet_av::AddressVector<uet_av::MemoryNicTable> {
    let mut av = open(16);
    insert_peers(&mut av, &(0..10).collect::<Vec<_>>());
    av.remove(&[3, 6], 0).unwrap();
    av
}

#[test]
fn creation_from_a_range_skips_unused_indices() {
    let av = av10();
    assert_eq!(
        members(&av.av_set(&range(0, 9, 1)).unwrap()),
        [0, 1, 2, 4, 5, 7, 8, 9]
    );
    assert_eq!(members(&av.av_set(&range(1, 9, 2)).unwrap()), [1, 5, 7, 9]);
    assert_eq!(members(&av.av_set(&range(4, 4, 7)).unwrap()), [4]);
    assert_eq!(
        members(&av.av_set(&range(10, 15, 1)).unwrap()),
        Vec::<u64>::new()
    );
    let s = empty_set(&av);
    assert!(s.is_empty());
    assert_eq!(s.capacity(), 16);
}

#[test]
fn universe_takes_every_address() {
    let mut av = av10();
    av.insert(&peer_bytes(50), 1, None, FI_MORE).unwrap(); // index 3, pending
    let s = av
        .av_set(&AvSetAttr {
            flags: FI_UNIVERSE | FI_BARRIER_SET,
            ..AvSetAttr::default()
        })
        .unwrap();
    assert_eq!(members(&s), [0, 1, 2, 3, 4, 5, 7, 8, 9]);
    assert_eq!(s.flags(), FI_UNIVERSE | FI_BARRIER_SET);
}

#[test]
fn creation_errors() {
    let av = av10();
    let bad = |attr: AvSetAttr| errno(av.av_set(&attr));
    assert_eq!(
        bad(AvSetAttr {
            flags: 1 << 3,
            ..AvSetAttr::default()
        }),
        FiErrno::FI_EBADFLAGS
    );
    assert_eq!(bad(range(0, FI_ADDR_NOTAVAIL, 0)), FiErrno::FI_EINVAL);
    assert_eq!(bad(range(FI_ADDR_NOTAVAIL, 3, 0)), FiErrno::FI_EINVAL);
    assert_eq!(bad(range(5, 4, 1)), FiErrno::FI_EINVAL);
    assert_eq!(
        bad(range(0, 16, 1)),
        FiErrno::FI_EINVAL,
        "end outside the AV"
    );
    assert_eq!(
        bad(range(0, 4, 0)),
        FiErrno::FI_EINVAL,
        "stride 0 with a range"
    );
    assert_eq!(
        bad(AvSetAttr {
            stride: 1,
            ..AvSetAttr::default()
        }),
        FiErrno::FI_EINVAL,
        "stride without a range"
    );
    assert_eq!(
        bad(AvSetAttr {
            flags: FI_UNIVERSE,
            ..range(0, 4, 1)
        }),
        FiErrno::FI_EINVAL
    );
    assert_eq!(
        bad(AvSetAttr {
            comm_key: vec![1, 2],
            ..range(0, 4, 1)
        }),
        FiErrno::FI_EINVAL
    );
    assert_eq!(
        bad(AvSetAttr {
            comm_key: vec![1],
            flags: FI_UNIVERSE,
            ..AvSetAttr::default()
        }),
        FiErrno::FI_EINVAL
    );
    // The range may name at most count addresses (counted by stride, used or not).
    let e = av
        .av_set(&AvSetAttr {
            count: 4,
            ..range(0, 9, 2)
        })
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(
        e.message.contains("names 5 addresses, more than count 4"),
        "{e}"
    );
    assert!(av
        .av_set(&AvSetAttr {
            count: 5,
            ..range(0, 9, 2)
        })
        .is_ok());
    assert_eq!(
        bad(AvSetAttr {
            count: 7,
            flags: FI_UNIVERSE,
            ..AvSetAttr::default()
        }),
        FiErrno::FI_EINVAL
    );
    let s = av
        .av_set(&AvSetAttr {
            comm_key: vec![9, 8],
            flags: FI_GATHER_SET,
            ..AvSetAttr::default()
        })
        .unwrap();
    assert_eq!(s.comm_key(), [9, 8]);
    assert!(s.is_empty());
}

#[test]
fn union_appends_new_members_in_source_order() {
    let av = av10();
    let mut dst = empty_set(&av);
    for fa in [5, 1] {
        dst.insert(&av, fa).unwrap();
    }
    let mut src = empty_set(&av);
    for fa in [9, 1, 0, 5, 7] {
        src.insert(&av, fa).unwrap();
    }
    dst.union(&src).unwrap();
    assert_eq!(members(&dst), [5, 1, 9, 0, 7]);
    assert_eq!(members(&src), [9, 1, 0, 5, 7], "source unchanged");
}

#[test]
fn intersect_and_diff_keep_destination_order() {
    let av = av10();
    let set_of = |fas: &[u64]| {
        let mut s = empty_set(&av);
        for &fa in fas {
            s.insert(&av, fa).unwrap();
        }
        s
    };
    let src = set_of(&[2, 9, 4]);
    let mut a = set_of(&[9, 0, 4, 7, 2, 1]);
    a.intersect(&src).unwrap();
    assert_eq!(members(&a), [9, 4, 2]);
    let mut b = set_of(&[9, 0, 4, 7, 2, 1]);
    b.diff(&src).unwrap();
    assert_eq!(members(&b), [0, 7, 1]);
    // Diff of a set with an equal set empties it; with a disjoint one changes nothing.
    let mut c = set_of(&[4, 2]);
    c.diff(&set_of(&[2, 4])).unwrap();
    assert!(c.is_empty());
    let mut d = set_of(&[4, 2]);
    d.diff(&set_of(&[0, 1])).unwrap();
    assert_eq!(members(&d), [4, 2]);
    // Membership bits follow: removed members can come back.
    b.insert(&av, 9).unwrap();
    assert_eq!(members(&b), [0, 7, 1, 9]);
    // A diff with itself empties a set, and cleared members can come back too.
    b.clear();
    assert!(b.is_empty() && !b.contains(0));
    b.insert(&av, 7).unwrap();
    b.insert(&av, 0).unwrap();
    assert_eq!(members(&b), [7, 0]);
}

#[test]
fn insert_and_remove_rules() {
    let av = av10();
    let mut s = empty_set(&av);
    s.insert(&av, 4).unwrap();
    s.insert(&av, 1).unwrap();
    s.insert(&av, 8).unwrap();
    let e = s.insert(&av, 1).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("already a member"), "{e}");
    for fa in [3, 12, 16, FI_ADDR_NOTAVAIL] {
        assert_eq!(errno(s.insert(&av, fa)), FiErrno::FI_EINVAL, "{fa:#x}");
    }
    s.remove(4).unwrap();
    assert_eq!(members(&s), [1, 8]);
    let e = s.remove(4).unwrap_err();
    assert!(e.message.contains("not a member"), "{e}");
    assert_eq!(errno(s.remove(FI_ADDR_NOTAVAIL)), FiErrno::FI_EINVAL);
    assert_eq!(members(&s), [1, 8]);
    assert!(s.contains(8) && !s.contains(4));
}

#[test]
fn rx_context_bits_name_the_same_member() {
    let mut av = open_with(AvAttr {
        count: 8,
        rx_ctx_bits: 3,
        ..AvAttr::default()
    });
    insert_peers(&mut av, &[1, 2]);
    let mut s = av.av_set(&AvSetAttr::default()).unwrap();
    s.insert(&av, fi_rx_addr(1, 5, 3)).unwrap();
    assert_eq!(members(&s), [1]);
    assert_eq!(errno(s.insert(&av, 1)), FiErrno::FI_EINVAL);
    assert!(s.contains(fi_rx_addr(1, 2, 3)));
    s.remove(fi_rx_addr(1, 7, 3)).unwrap();
    assert!(s.is_empty());
}

#[test]
fn capacity_is_enforced_with_enospc() {
    let av = av10();
    let mut s = av
        .av_set(&AvSetAttr {
            count: 2,
            ..AvSetAttr::default()
        })
        .unwrap();
    assert_eq!(s.capacity(), 2);
    s.insert(&av, 0).unwrap();
    s.insert(&av, 1).unwrap();
    assert_eq!(errno(s.insert(&av, 2)), FiErrno::FI_ENOSPC);
    let mut src = empty_set(&av);
    for fa in [1, 2] {
        src.insert(&av, fa).unwrap();
    }
    let e = s.union(&src).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOSPC);
    assert_eq!(members(&s), [0, 1], "a refused union adds nothing");
    s.remove(0).unwrap();
    s.union(&src).unwrap();
    assert_eq!(members(&s), [1, 2]);
    // count above the AV's capacity is bounded by it.
    let big = av
        .av_set(&AvSetAttr {
            count: 1000,
            ..AvSetAttr::default()
        })
        .unwrap();
    assert_eq!(big.capacity(), 16);
}

#[test]
fn sets_of_different_avs_do_not_mix() {
    let av = av10();
    let other = av10();
    let mut a = empty_set(&av);
    let b = empty_set(&other);
    assert_ne!(a.av_id(), b.av_id());
    assert_eq!(errno(a.union(&b)), FiErrno::FI_EINVAL);
    assert_eq!(errno(a.intersect(&b)), FiErrno::FI_EINVAL);
    assert_eq!(errno(a.diff(&b)), FiErrno::FI_EINVAL);
    assert_eq!(errno(a.insert(&other, 0)), FiErrno::FI_EINVAL);
    a.insert(&av, 0).unwrap();
    assert_eq!(errno(a.addr(&other)), FiErrno::FI_EINVAL);
}

#[test]
fn collective_address_is_a_stable_handle_outside_the_av() {
    let mut av = av10();
    let mut s = av.av_set(&range(0, 4, 1)).unwrap();
    let t = av.av_set(&range(0, 4, 1)).unwrap();
    let a = s.addr(&av).unwrap();
    assert!(is_av_set_addr(a));
    assert!(!is_av_set_addr(FI_ADDR_NOTAVAIL) && !is_av_set_addr(3));
    assert_ne!(a, t.addr(&av).unwrap(), "one address per set");
    s.remove(0).unwrap();
    assert_eq!(s.addr(&av).unwrap(), a, "stable while members change");
    let mut buf = [0u8; 32];
    let mut len = 32;
    assert_eq!(errno(av.lookup(a, &mut buf, &mut len)), FiErrno::FI_EINVAL);
    assert_eq!(errno(av.remove(&[a], 0)), FiErrno::FI_EINVAL);
    let e = empty_set(&av).addr(&av).unwrap_err();
    assert!(e.message.contains("empty"), "{e}");
}

#[test]
fn members_removed_from_the_av_go_stale() {
    let mut av = av10();
    let mut s = av.av_set(&range(0, 9, 1)).unwrap();
    av.remove(&[4, 8], 0).unwrap();
    assert_eq!(members(&s), [0, 1, 2, 4, 5, 7, 8, 9], "the set is not told");
    assert_eq!(s.stale(&av).unwrap().collect::<Vec<_>>(), [4, 8]);
    // Asked of another AV, whose indices are other addresses, the question has no answer.
    let other = av10();
    assert_eq!(errno(s.stale(&other).map(|_| ())), FiErrno::FI_EINVAL);
    let e = s.addr(&av).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("member fi_addr 4 (and 1 more)"), "{e}");
    // Remove works on stale members without the AV; prune drops the rest in order.
    s.remove(4).unwrap();
    assert_eq!(s.prune(&av).unwrap(), 1);
    assert_eq!(members(&s), [0, 1, 2, 5, 7, 9]);
    assert!(s.addr(&av).is_ok());
    // A reused index names the new address again.
    let mut t = av.av_set(&range(3, 3, 1)).unwrap();
    assert!(t.is_empty());
    assert_eq!(insert_peers(&mut av, &[77]), vec![3]);
    t.insert(&av, 3).unwrap();
    assert!(t.addr(&av).is_ok());
}

#[test]
fn sets_work_on_user_id_avs() {
    let mut av = open_with(AvAttr {
        count: 4,
        flags: FI_AV_USER_ID,
        ..AvAttr::default()
    });
    insert_peers(&mut av, &[1, 2]);
    av.set_user_id(1, 500, 0).unwrap();
    let s = av
        .av_set(&AvSetAttr {
            flags: FI_UNIVERSE,
            ..AvSetAttr::default()
        })
        .unwrap();
    assert_eq!(members(&s), [0, 1], "members are fi_addrs, never user ids");
}

/// Handles are no addresses: on an AV with peer groups the index is only bits 0-31, so without
/// the AV's check a collective address (or an auth-key handle) would name the peer at its low
/// bits, in the AV's calls and in the set's.
#[test]
fn a_collective_address_names_no_peer_on_an_av_with_peer_groups() {
    let mut av = open_with(AvAttr {
        count: 64,
        max_group_id: 0xFF,
        ..AvAttr::default()
    });
    insert_peers(&mut av, &(0..64).collect::<Vec<_>>());
    let set = av.av_set(&range(0, 3, 1)).unwrap();
    let coll = set.addr(&av).unwrap();
    let low = coll & 0xFFFF_FFFF;
    assert!(low < 64, "the set number {low} is within the AV");
    let mut buf = [0u8; 32];
    let mut len = buf.len();
    let e = av.lookup(coll, &mut buf, &mut len).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("collective address"), "{e}");
    let mut other = empty_set(&av);
    other.insert(&av, low).unwrap();
    assert!(!other.contains(coll));
    assert_eq!(errno(other.remove(coll)), FiErrno::FI_EINVAL);
    assert_eq!(members(&other), [low]);
    assert_eq!(errno(empty_set(&av).insert(&av, coll)), FiErrno::FI_EINVAL);
    assert_eq!(errno(av.remove(&[coll], 0)), FiErrno::FI_EINVAL);
    assert_eq!(av.len(), 64, "nothing was removed");
}

#[test]
fn a_set_reads_an_auth_key_handle_as_the_av_does() {
    let a = AvAttr {
        count: 16,
        job_id: 0x42,
        auth_key_size: FI_AV_AUTH_KEY,
        max_group_id: 0xFF,
        ..AvAttr::default()
    };
    let size = a.resolve(&LIMITS).expect("valid attr").count as u32;
    let nic = uet_av::MemoryNicTable::new(size).with_auth_key_slots(8);
    let limits = AvLimits {
        max_auth_keys: 8,
        ..LIMITS
    };
    let mut av = uet_av::AddressVector::open(nic, a, limits).expect("open");
    let k = av
        .insert_auth_key(&uet_av::job_id_to_auth_key(0x43), 0)
        .unwrap();
    assert_eq!(k, AUTH_KEY_ADDR_BASE);
    av.insert(&peer_bytes(1), 1, None, 0).unwrap();
    let mut s = empty_set(&av);
    s.insert(&av, 0).unwrap();
    assert_eq!(errno(s.insert(&av, k)), FiErrno::FI_EINVAL);
    assert!(!s.contains(k), "the handle names member 0");
    assert_eq!(errno(s.remove(k)), FiErrno::FI_EINVAL);
    assert_eq!(members(&s), [0]);
}

/// With 16 receive-context bits any fi_addr_t may be an address (fi_rx_addr(i, 0xFFFB, 16) has
/// the collective form), so a set of such an AV has no collective address; its other calls
/// work.
#[test]
fn a_set_of_an_av_whose_addresses_take_every_form_has_no_collective_address() {
    let limits = AvLimits::new(1 << 20, 16);
    let attr = AvAttr {
        count: 16,
        rx_ctx_bits: 16,
        ..AvAttr::default()
    };
    let mut av =
        uet_av::AddressVector::open(uet_av::MemoryNicTable::new(16), attr, limits).expect("open");
    insert_peers(&mut av, &[0, 1, 2]);
    let rx = fi_rx_addr(1, 0xFFFB, 16);
    assert!(is_av_set_addr(rx), "{rx:#x}");
    assert_eq!(
        av.index_of(rx).unwrap(),
        1,
        "an address with a receive context"
    );
    let set = av.av_set(&range(0, 2, 1)).unwrap();
    assert_eq!(members(&set), [0, 1, 2]);
    let e = set.addr(&av).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("receive-context"), "{e}");
}

/// Creation bounds built with `fi_rx_addr` name the same indices as bare ones, as members do;
/// a bound that names no index (a handle, past the AV) is refused in hex.
#[test]
fn range_bounds_with_receive_context_bits_name_their_indices() {
    let mut av = open_with(uet_av::AvAttr {
        count: 8,
        rx_ctx_bits: 3,
        ..uet_av::AvAttr::default()
    });
    insert_peers(&mut av, &[1, 2, 3, 4]);
    let s = av
        .av_set(&AvSetAttr {
            start_addr: uet_av::fi_rx_addr(1, 2, 3),
            end_addr: uet_av::fi_rx_addr(3, 5, 3),
            stride: 1,
            ..AvSetAttr::default()
        })
        .expect("the same indices as 1..=3");
    assert_eq!(members(&s), [1, 2, 3]);
    let e = av
        .av_set(&AvSetAttr {
            start_addr: 0,
            end_addr: 8,
            stride: 1,
            ..AvSetAttr::default()
        })
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(
        e.message
            .contains("end_addr 0x8 names no index of the AV's 8 entries"),
        "{e}"
    );
}

/// A set whose members a communication key names (through the fabric's manager) has a
/// collective address while the AV lists none of them; an empty set without a key has none.
#[test]
fn a_set_named_by_its_communication_key_has_a_collective_address() {
    let av = av10();
    let keyed = av
        .av_set(&AvSetAttr {
            comm_key: vec![1, 2, 3, 4],
            ..AvSetAttr::default()
        })
        .unwrap();
    assert!(keyed.is_empty());
    let a = keyed.addr(&av).expect("a keyed set's address");
    assert!(uet_av::av_set::is_av_set_addr(a), "{a:#x}");
    let empty = av.av_set(&AvSetAttr::default()).unwrap();
    let e = empty.addr(&av).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("no communication key"), "{e}");
}

/// One call of the set's member calls, for the model test below. Addresses are AV indices
/// 0..MODEL_AV, all in use.
#[derive(Clone, Debug)]
enum SetCall {
    Insert(u64),
    Remove(u64),
    /// Remove the member at this place of the list (modulo its length), if any.
    RemoveAt(usize),
    Union(Vec<u64>),
    Intersect(Vec<u64>),
    Diff(Vec<u64>),
    Clear,
}

/// Addresses of the model test's AV.
const MODEL_AV: u64 = 40;

/// Most members of the model test's set: fewer than the AV holds, so inserts and unions meet
/// `FI_ENOSPC`.
const MODEL_CAPACITY: usize = 30;

fn set_call() -> impl Strategy<Value = SetCall> {
    let addr = 0..MODEL_AV;
    let list = proptest::collection::vec(0..MODEL_AV, 0..12);
    prop_oneof![
        5 => addr.clone().prop_map(SetCall::Insert),
        3 => addr.prop_map(SetCall::Remove),
        5 => any::<usize>().prop_map(SetCall::RemoveAt),
        1 => list.clone().prop_map(SetCall::Union),
        1 => list.clone().prop_map(SetCall::Intersect),
        1 => list.prop_map(SetCall::Diff),
        1 => Just(SetCall::Clear),
    ]
}

/// A set of the model test's AV holding `fas` (duplicates after the first dropped), in order.
fn set_holding(av: &uet_av::AddressVector<uet_av::MemoryNicTable>, fas: &[u64]) -> AvSet {
    let mut s = empty_set(av);
    for &fa in fas {
        if !s.contains(fa) {
            s.insert(av, fa).unwrap();
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(256), ..ProptestConfig::default() })]

    /// Any mix of inserts, removes (which leave holes until the set compacts), unions,
    /// intersects, diffs and clears leaves the members a plain list says, in its order, with
    /// the same errors and nothing changed by a call that fails.
    #[test]
    fn member_calls_keep_the_order_of_a_plain_list(
        calls in proptest::collection::vec(set_call(), 0..300)
    ) {
        let mut av = open(MODEL_AV as usize);
        insert_peers(&mut av, &(0..MODEL_AV as u32).collect::<Vec<_>>());
        let mut set = av
            .av_set(&AvSetAttr { count: MODEL_CAPACITY, ..AvSetAttr::default() })
            .unwrap();
        let mut model: Vec<u64> = Vec::new();
        for (step, call) in calls.iter().enumerate() {
            let call = match call {
                SetCall::RemoveAt(k) if !model.is_empty() => SetCall::Remove(model[k % model.len()]),
                SetCall::RemoveAt(k) => SetCall::Remove((k % MODEL_AV as usize) as u64),
                c => c.clone(),
            };
            let call = &call;
            let got = match call {
                SetCall::Insert(fa) => set.insert(&av, *fa),
                SetCall::Remove(fa) => set.remove(*fa),
                SetCall::RemoveAt(_) => unreachable!("made a Remove above"),
                SetCall::Union(fas) => set.union(&set_holding(&av, fas)),
                SetCall::Intersect(fas) => set.intersect(&set_holding(&av, fas)),
                SetCall::Diff(fas) => set.diff(&set_holding(&av, fas)),
                SetCall::Clear => {
                    set.clear();
                    Ok(())
                }
            };
            let want = match call {
                SetCall::Insert(fa) if model.contains(fa) => Err(FiErrno::FI_EINVAL),
                SetCall::Insert(_) if model.len() >= MODEL_CAPACITY => Err(FiErrno::FI_ENOSPC),
                SetCall::Insert(fa) => {
                    model.push(*fa);
                    Ok(())
                }
                SetCall::RemoveAt(_) => unreachable!("made a Remove above"),
                SetCall::Remove(fa) => match model.iter().position(|m| m == fa) {
                    Some(at) => {
                        model.remove(at);
                        Ok(())
                    }
                    None => Err(FiErrno::FI_EINVAL),
                },
                SetCall::Union(fas) => {
                    let mut new: Vec<u64> = Vec::new();
                    for fa in fas {
                        if !model.contains(fa) && !new.contains(fa) {
                            new.push(*fa);
                        }
                    }
                    if model.len() + new.len() > MODEL_CAPACITY {
                        Err(FiErrno::FI_ENOSPC)
                    } else {
                        model.extend(new);
                        Ok(())
                    }
                }
                SetCall::Intersect(fas) => {
                    model.retain(|m| fas.contains(m));
                    Ok(())
                }
                SetCall::Diff(fas) => {
                    model.retain(|m| !fas.contains(m));
                    Ok(())
                }
                SetCall::Clear => {
                    model.clear();
                    Ok(())
                }
            };
            prop_assert_eq!(got.map_err(|e| e.errno), want, "step {}: {:?}", step, call);
            prop_assert_eq!(members(&set), model.clone(), "step {}: {:?}", step, call);
            prop_assert_eq!(set.len(), model.len());
            prop_assert_eq!(set.members().len(), model.len());
            prop_assert_eq!(set.is_empty(), model.is_empty());
            for fa in 0..MODEL_AV {
                prop_assert_eq!(set.contains(fa), model.contains(&fa), "step {}: {}", step, fa);
            }
        }
    }
}

/// At scale: removes in a scattered order, then inserts, then more removes, compact the set
/// many times and keep every remaining member in order; `members()` counts exactly as it
/// goes; and a set emptied down to a few members gives its memory back.
#[test]
fn a_large_set_keeps_its_order_through_removes_inserts_and_compactions() {
    const N: u32 = 5000;
    let mut av = open(N as usize);
    insert_peers(&mut av, &(0..N).collect::<Vec<_>>());
    let mut set = av
        .av_set(&AvSetAttr {
            flags: FI_UNIVERSE,
            ..AvSetAttr::default()
        })
        .unwrap();
    assert!(
        set.heap_bytes() <= 24 * N as usize,
        "{} bytes for {N} members",
        set.heap_bytes()
    );
    let mut model: Vec<u64> = (0..u64::from(N)).collect();
    let remove = |set: &mut AvSet, model: &mut Vec<u64>, fa: u64| {
        set.remove(fa).unwrap();
        let at = model.iter().position(|&m| m == fa).unwrap();
        model.remove(at);
    };
    // Two thirds of the members, scattered (613 is prime to 5000).
    for k in 0..u64::from(N) {
        let fa = k * 613 % u64::from(N);
        if fa % 3 != 0 {
            remove(&mut set, &mut model, fa);
        }
        if k % 97 == 0 {
            assert_eq!(members(&set), model, "after {k} steps");
            assert_eq!(set.members().len(), model.len());
        }
    }
    assert_eq!(members(&set), model);
    // Back at the end, in descending order, then the front half of the list removed.
    for fa in (0..u64::from(N)).rev().filter(|fa| fa % 3 == 1) {
        set.insert(&av, fa).unwrap();
        model.push(fa);
    }
    assert_eq!(members(&set), model);
    for fa in model.clone().iter().take(model.len() / 2) {
        remove(&mut set, &mut model, *fa);
    }
    assert_eq!(members(&set), model);
    assert_eq!(set.len(), model.len());
    // Down to 10 members: the rest of the room goes back.
    while model.len() > 10 {
        let fa = model[model.len() / 2];
        remove(&mut set, &mut model, fa);
    }
    assert_eq!(members(&set), model);
    assert!(set.heap_bytes() < 4096, "{} bytes", set.heap_bytes());
    // Every member still found by value and removable; the set empties.
    for fa in model.clone() {
        assert!(set.contains(fa));
        remove(&mut set, &mut model, fa);
        assert_eq!(members(&set), model);
    }
    assert!(set.is_empty() && set.members().next().is_none());

    // Removes from the end leave no holes, and give the room back too.
    let mut set = av
        .av_set(&AvSetAttr {
            flags: FI_UNIVERSE,
            ..AvSetAttr::default()
        })
        .unwrap();
    for fa in (10..u64::from(N)).rev() {
        set.remove(fa).unwrap();
    }
    assert_eq!(members(&set), (0..10).collect::<Vec<u64>>());
    assert!(set.heap_bytes() < 4096, "{} bytes", set.heap_bytes());
}
