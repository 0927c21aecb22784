//! Peer groups in the host AV: the attribute checks of `fi_av_open`, group-carrying `fi_addr_t`
//! values in every call that takes one, AV sets, and the AVs that cannot have peer groups.

mod common;

use common::{pack, peer_bytes, LIMITS};
use uet_av::{
    fi_addr_index, fi_group_addr, fi_group_id, fi_rx_addr, AddressVector, AvAttr, AvLimits, AvName,
    AvSet, AvSetAttr, FiErrno, MemoryNicTable, NamedAv, AUTH_KEY_MAX_GROUP_ID, FI_AV_AUTH_KEY,
};

const JOB: u32 = 0x00_6A02;

fn attr(max_group_id: u32, rx_ctx_bits: u8) -> AvAttr {
    AvAttr {
        count: 16,
        job_id: JOB,
        rx_ctx_bits,
        max_group_id,
        ..AvAttr::default()
    }
}

fn open(a: AvAttr) -> AddressVector<MemoryNicTable> {
    AddressVector::open(MemoryNicTable::new(a.count as u32), a, LIMITS).expect("open")
}

#[test]
fn open_checks_the_group_limit_and_the_shared_bits() {
    let limits = AvLimits {
        max_group_id: 0x00FF_FFFF,
        ..LIMITS
    };
    assert!(attr(0x00FF_FFFF, 8).resolve(&limits).is_ok());
    let e = attr(0x0100_0000, 0).resolve(&limits).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("max_group_id"), "{e}");
    let e = attr(0x00FF_FFFF, 8)
        .resolve(&AvLimits {
            max_group_id: u32::MAX,
            ..LIMITS
        })
        .map(|_| ());
    assert!(e.is_ok());
    // 24 group bits and 8 receive-context bits fill the high word; one more bit does not fit.
    let wide = AvLimits {
        max_group_id: u32::MAX,
        ..LIMITS
    };
    let e = attr(0x0100_0000, 8).resolve(&wide).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("rx_ctx_bits is 8"), "{e}");
    let none = AvLimits {
        max_group_id: 0,
        ..LIMITS
    };
    let e = attr(1, 0).resolve(&none).unwrap_err();
    assert!(e.message.contains("no peer groups"), "{e}");
    assert!(
        attr(0, 8).resolve(&none).is_ok(),
        "groups off needs nothing"
    );
    // An auth-key AV keeps groups to 16 bits, so no address looks like a key handle.
    let keys = |g| AvAttr {
        auth_key_size: FI_AV_AUTH_KEY,
        ..attr(g, 0)
    };
    assert!(keys(AUTH_KEY_MAX_GROUP_ID).resolve(&wide).is_ok());
    let e = keys(AUTH_KEY_MAX_GROUP_ID + 1).resolve(&wide).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("FI_AV_AUTH_KEY"), "{e}");
}

#[test]
fn group_carrying_addresses_name_their_index() {
    let mut av = open(attr(0xFFF, 4));
    assert!(av.peer_groups());
    assert_eq!(av.max_group_id(), 0xFFF);
    let mut out = [0u64; 3];
    let n = av
        .insert(
            &pack(&[peer_bytes(1), peer_bytes(2), peer_bytes(3)]),
            3,
            Some(&mut out),
            0,
        )
        .expect("insert");
    assert_eq!((n, out), (3, [0, 1, 2]));
    let a = fi_rx_addr(fi_group_addr(2, 0xABC), 9, 4);
    assert_eq!(fi_group_id(a, 4), 0xABC);
    assert_eq!(fi_addr_index(a, 4, true), 2);
    assert_eq!(av.index_of(a).expect("index"), 2);
    assert_eq!(
        av.address(a).expect("address").to_bytes().expect("bytes"),
        peer_bytes(3)
    );
    // A group beyond max_group_id is still stripped on the host: the NIC checks sends.
    assert_eq!(
        av.index_of(fi_group_addr(1, 0x0FFF_FFFF)).expect("index"),
        1
    );

    // AV sets take group-carrying addresses as members.
    let mut set = AvSet::new(&av, &AvSetAttr::default()).expect("set");
    set.insert(&av, fi_group_addr(0, 5)).expect("insert member");
    set.insert(&av, fi_group_addr(2, 6)).expect("insert member");
    assert_eq!(set.len(), 2);
    set.remove(fi_group_addr(0, 7)).expect("remove member");
    assert_eq!(set.len(), 1);

    av.remove(&[fi_group_addr(0, 1), fi_group_addr(2, 2)], 0)
        .expect("remove");
    assert_eq!(av.len(), 1);
    let e = av.index_of(fi_group_addr(0, 1)).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
}

#[test]
fn without_groups_the_high_bits_are_index_bits() {
    let mut av = open(attr(0, 4));
    assert!(!av.peer_groups());
    let mut out = [0u64; 1];
    av.insert(&peer_bytes(1), 1, Some(&mut out), 0)
        .expect("insert");
    let e = av.index_of(fi_group_addr(0, 1)).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert_eq!(
        av.index_of(fi_rx_addr(0, 3, 4)).expect("rx bits stripped"),
        0
    );
}

#[test]
fn named_avs_share_their_peer_group_limit() {
    let name = format!("uet-peer-groups-test-{}", std::process::id());
    let named = |max_group_id| AvAttr {
        name: Some(AvName::new(&name).expect("name")),
        ..attr(max_group_id, 0)
    };
    let open_named = |a| NamedAv::open(a, LIMITS, |a| Ok(MemoryNicTable::new(a.count as u32)));
    let mut a = open_named(named(3)).expect("create with peer groups");
    let mut b = open_named(named(3)).expect("open with the same limit");
    assert_eq!((a.attr().max_group_id, b.attr().max_group_id), (3, 3));
    let buf = pack(&[peer_bytes(1)]);
    let mut fa = [0u64];
    assert_eq!(a.insert(&buf, 1, Some(&mut fa), 0).unwrap(), 1);
    b.sync().unwrap();
    assert_eq!(b.av().iter().count(), 1);
    // A group address names the same entry in every process.
    let grouped = uet_av::fi_group_addr(fa[0], 2);
    assert_eq!(b.av().index_of(grouped).unwrap(), 0);
    for other in [0, 5] {
        let e = open_named(named(other)).map(|_| ()).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.contains("max_group_id"), "{e}");
    }
}

#[test]
fn an_auth_key_handle_is_no_address_on_an_av_with_peer_groups() {
    // With peer groups the index is the low 32 bits, and a handle's low bits are its key
    // number: key 0's handle must not name the address at index 0.
    let mut av = open(AvAttr {
        auth_key_size: FI_AV_AUTH_KEY,
        ..attr(AUTH_KEY_MAX_GROUP_ID, 0)
    });
    let handle = av
        .insert_auth_key(&uet_av::job_id_to_auth_key(0x42), 0)
        .expect("auth key");
    assert_eq!(handle & u64::from(u32::MAX), 0, "key 0");
    av.insert(&peer_bytes(1), 1, None, 0).expect("insert");
    let mut buf = [0u8; 32];
    let mut len = buf.len();
    let e = av.lookup(handle, &mut buf, &mut len).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("auth-key handle"), "{e}");
    assert!(av.index_of(handle).is_err());
    let e = av.remove(&[handle], 0).unwrap_err();
    assert!(e.message.contains("auth-key handle"), "{e}");
    let e = av.remove(&[handle, 0], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert_eq!(av.len(), 1, "the address at index 0 stays");
    assert_eq!(
        av.index_of(fi_group_addr(0, 3)),
        Ok(0),
        "a real grouped address still works"
    );
}
