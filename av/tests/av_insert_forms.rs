//! FI_SYNC_ERR, user ids, FI_ADDR_STR, insertsvc and insertsym: fi_av(3)'s rules, one test each.

mod common;

use common::*;
use std::net::{IpAddr, Ipv4Addr};
use uet_av::{
    straddr, AddrFormat, AddrStr, AvAttr, FiErrno, MemoryNicTable, NicOp, ADDR_LEN, ADDR_STR_MAX,
    FI_ADDR_NOTAVAIL, FI_AUTH_KEY, FI_AV_USER_ID, FI_MORE, FI_SYNC_ERR,
};
use uet_fwif::NicAvEntry;

fn errno<T: std::fmt::Debug>(r: Result<T, uet_av::FiError>) -> FiErrno {
    r.expect_err("call should fail").errno
}

/// Status values as fi_av(3) has them: the fabric errno, positive.
const EINVAL: i32 = 22;
const ENOSPC: i32 = 28;
const EIO: i32 = 5;
const EADDRNOTAVAIL: i32 = 99;

fn open_user_id(count: usize) -> uet_av::AddressVector<MemoryNicTable> {
    open_with(AvAttr {
        count,
        job_id: 0x00ab_cdef,
        flags: FI_AV_USER_ID,
        ..AvAttr::default()
    })
}

fn open_str(count: usize) -> uet_av::AddressVector<MemoryNicTable> {
    open_with(AvAttr {
        count,
        job_id: 0x00ab_cdef,
        addr_format: AddrFormat::Str,
        ..AvAttr::default()
    })
}

// ---------------------------------------------------------------------------------------------
// FI_SYNC_ERR

#[test]
fn sync_err_reports_each_address_and_returns_the_count() {
    let mut av = open(3);
    let buf = pack(&[
        peer_bytes(1),
        bad_bytes(2),
        peer_bytes(3),
        peer_bytes(4),
        peer_bytes(5),
    ]);
    let mut out = [0u64; 5];
    let mut st = [7i32; 6];
    let n = av
        .insert_with_status(&buf, 5, Some(&mut out), FI_SYNC_ERR, Some(&mut st))
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1, 2, FI_ADDR_NOTAVAIL]);
    assert_eq!(
        st,
        [0, EINVAL, 0, 0, ENOSPC, 7],
        "slot past count untouched"
    );
    assert_in_step(&av);
}

#[test]
fn sync_err_without_fi_addr_and_with_fi_more() {
    let mut av = open(8);
    let mut st = [1i32; 2];
    let buf = pack(&[bad_bytes(1), peer_bytes(2)]);
    let n = av
        .insert_with_status(&buf, 2, None, FI_SYNC_ERR | FI_MORE, Some(&mut st))
        .unwrap();
    assert_eq!((n, st), (1, [EINVAL, 0]));
    assert_eq!(av.pending_len(), 1);
    av.flush().unwrap();
    assert_in_step(&av);
}

#[test]
fn sync_err_argument_rules() {
    let mut av = open(8);
    let buf = pack(&[peer_bytes(1), peer_bytes(2)]);
    let mut st = [9i32; 2];
    // FI_SYNC_ERR with no array (a NULL context): libfabric's util AV says FI_EINVAL.
    let e = av
        .insert_with_status(&buf, 2, None, FI_SYNC_ERR, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("needs the status array"), "{e}");
    // An array without the flag.
    let e = av
        .insert_with_status(&buf, 2, None, 0, Some(&mut st))
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("only written with FI_SYNC_ERR"), "{e}");
    // Too short.
    let e = av
        .insert_with_status(&buf, 2, None, FI_SYNC_ERR, Some(&mut st[..1]))
        .unwrap_err();
    assert!(e.message.contains("room for 1 of 2"), "{e}");
    // Unsupported flags still win over the array.
    assert_eq!(
        errno(av.insert_with_status(&buf, 2, None, FI_SYNC_ERR | (1 << 3), Some(&mut st))),
        FiErrno::FI_EBADFLAGS
    );
    assert_eq!(st, [9, 9], "a refused call writes no status");
    assert!(av.is_empty());
    assert_eq!(av.nic().counters().commands(), 0);
}

#[test]
fn sync_err_marks_a_rolled_back_batch() {
    let mut av = open(8);
    av.insert(&peer_bytes(1), 1, None, FI_MORE).unwrap();
    av.nic_mut().fail_after(NicOp::Write, 0);
    let buf = pack(&[peer_bytes(2), bad_bytes(3)]);
    let mut st = [0i32; 2];
    let e = av
        .insert_with_status(&buf, 2, None, FI_SYNC_ERR, Some(&mut st))
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert_eq!(st, [EIO, EINVAL]);
    assert!(av.is_empty());
    assert_in_step(&av);
}

// ---------------------------------------------------------------------------------------------
// user ids

#[test]
fn user_id_av_starts_every_entry_at_notavail() {
    let mut av = open_user_id(8);
    let fas = insert_peers(&mut av, &[1, 2]);
    for &fa in &fas {
        assert_eq!(av.user_id(fa).unwrap(), Some(FI_ADDR_NOTAVAIL));
        let e = av.nic().entry(fa as u32).unwrap();
        assert_eq!(e.user_id(), Some(FI_ADDR_NOTAVAIL));
    }
    assert_in_step(&av);
}

#[test]
fn set_user_id_rewrites_one_nic_entry() {
    let mut av = open_user_id(8);
    insert_peers(&mut av, &[1, 2, 3]);
    av.nic_mut().reset_counters();
    av.set_user_id(1, 0x77, 0).unwrap();
    let c = av.nic().counters();
    assert_eq!((c.writes, c.records_written, c.commands()), (1, 1, 1));
    assert_eq!(av.user_id(1).unwrap(), Some(0x77));
    assert_eq!(
        av.nic().entry(1).copied(),
        Some(NicAvEntry::for_peer(&peer(2), 0x00ab_cdef).with_user_id(0x77))
    );
    assert_eq!(av.mirror_entry(1), av.nic().entry(1).copied());
    assert_eq!(av.user_id(0).unwrap(), Some(FI_ADDR_NOTAVAIL));
    // Lookup is unchanged.
    let mut buf = [0u8; ADDR_LEN];
    let mut len = ADDR_LEN;
    av.lookup(1, &mut buf, &mut len).unwrap();
    assert_eq!(buf, peer_bytes(2));
    assert_in_step(&av);
}

#[test]
fn set_user_id_sends_pending_records_first() {
    let mut av = open_user_id(8);
    av.insert(&pack(&[peer_bytes(1), peer_bytes(2)]), 2, None, FI_MORE)
        .unwrap();
    av.set_user_id(1, 5, 0).unwrap();
    let c = av.nic().counters();
    assert_eq!((c.writes, c.records_written), (2, 3));
    assert_in_step(&av);
}

#[test]
fn set_user_id_errors_change_nothing() {
    let mut av = open_user_id(8);
    insert_peers(&mut av, &[1]);
    av.set_user_id(0, 3, 0).unwrap();
    let before = av.nic().counters();
    for fa in [1, 8, FI_ADDR_NOTAVAIL] {
        assert_eq!(errno(av.set_user_id(fa, 4, 0)), FiErrno::FI_EINVAL);
    }
    // FI_AUTH_KEY outside an FI_AV_AUTH_KEY domain.
    let e = av.set_user_id(0, 4, FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("FI_AV_AUTH_KEY"), "{e}");
    assert_eq!(errno(av.set_user_id(0, 4, 1 << 3)), FiErrno::FI_EBADFLAGS);
    assert_eq!(av.nic().counters(), before);
    // A failed AV_WRITE keeps the old user id on both sides.
    av.nic_mut().fail_after(NicOp::Write, 0);
    assert_eq!(errno(av.set_user_id(0, 4, 0)), FiErrno::FI_EIO);
    assert_eq!(av.user_id(0).unwrap(), Some(3));
    assert_in_step(&av);
    // Not opened with FI_AV_USER_ID.
    let mut plain = open(4);
    insert_peers(&mut plain, &[1]);
    let e = plain.set_user_id(0, 4, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("not opened with FI_AV_USER_ID"), "{e}");
}

#[test]
fn per_insert_user_ids_read_fi_addr_and_return_indices() {
    let mut av = open(8);
    insert_peers(&mut av, &[1]);
    assert_eq!(av.user_id(0).unwrap(), None);
    let buf = pack(&[peer_bytes(2), bad_bytes(3), peer_bytes(4)]);
    let mut io = [100u64, 200, FI_ADDR_NOTAVAIL];
    assert_eq!(av.insert(&buf, 3, Some(&mut io), FI_AV_USER_ID).unwrap(), 2);
    assert_eq!(io, [1, FI_ADDR_NOTAVAIL, 2], "output unchanged by the flag");
    assert_eq!(av.user_id(1).unwrap(), Some(100));
    assert_eq!(
        av.user_id(2).unwrap(),
        Some(FI_ADDR_NOTAVAIL),
        "a user id like any other"
    );
    assert_eq!(av.user_id(0).unwrap(), None, "inserted without the flag");
    assert_eq!(av.nic().entry(0).unwrap().user_id(), None);
    assert_eq!(av.nic().entry(1).unwrap().user_id(), Some(100));
    // Removal clears it; the index comes back without one.
    av.remove(&[1], 0).unwrap();
    assert_eq!(insert_peers(&mut av, &[5]), vec![1]);
    assert_eq!(av.user_id(1).unwrap(), None);
    assert_in_step(&av);
}

#[test]
fn user_id_combinations_the_man_page_forbids() {
    let mut av = open_user_id(8);
    let mut io = [1u64];
    let e = av
        .insert(&peer_bytes(1), 1, Some(&mut io), FI_AV_USER_ID)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("use set_user_id"), "{e}");
    assert_eq!(io, [1]);
    insert_peers(&mut av, &[1]);
    assert_eq!(errno(av.remove(&[0], FI_AV_USER_ID)), FiErrno::FI_EINVAL);
    let mut fa = 7u64;
    assert_eq!(
        errno(av.insertsvc("10.0.0.1", Some("1"), Some(&mut fa), FI_AV_USER_ID, None)),
        FiErrno::FI_EINVAL
    );
    assert_eq!(av.len(), 1);
    // Per insert, the fi_addr array is required.
    let mut plain = open(8);
    let e = plain
        .insert(&peer_bytes(1), 1, None, FI_AV_USER_ID)
        .unwrap_err();
    assert!(e.message.contains("needs the fi_addr array"), "{e}");
}

#[test]
fn rolled_back_user_ids_are_gone() {
    let mut av = open(8);
    let mut io = [42u64];
    av.nic_mut().fail_after(NicOp::Write, 0);
    assert_eq!(
        errno(av.insert(&peer_bytes(1), 1, Some(&mut io), FI_AV_USER_ID)),
        FiErrno::FI_EIO
    );
    assert_eq!(io, [FI_ADDR_NOTAVAIL]);
    assert_eq!(insert_peers(&mut av, &[2]), vec![0]);
    assert_eq!(av.user_id(0).unwrap(), None);
    assert_in_step(&av);
}

#[test]
fn user_ids_cost_nothing_until_used_and_stay_compact() {
    let n = (1u32 << 16) + 1;
    let buf: Vec<u8> = (0..n).flat_map(peer_bytes).collect();
    let mut plain = open(1 << 20);
    plain.insert(&buf, n as usize, None, 0).unwrap();
    let mut with = open_user_id(1 << 20);
    with.insert(&buf, n as usize, None, 0).unwrap();
    let extra = with.host_bytes() - plain.host_bytes();
    let per_entry = with.host_bytes() as f64 / f64::from(n);
    assert!(
        extra as f64 / f64::from(n) <= 10.5,
        "{extra} bytes for user ids"
    );
    assert!(per_entry <= 48.0, "{per_entry} host bytes per entry");
}

// ---------------------------------------------------------------------------------------------
// FI_ADDR_STR and insertsvc

#[test]
fn straddr_parse_insert_lookup_round_trips() {
    for n in [1u32, 5, 1003] {
        let bytes = peer_bytes(n);
        let mut buf = [0u8; 128];
        let mut len = buf.len();
        let s = straddr(&bytes, &mut buf, &mut len);
        let parsed: AddrStr = s.parse().unwrap();
        assert_eq!(parsed.0.to_bytes().unwrap(), bytes);

        // Binary AV: the string goes in through insertsvc, lookup gives the 32 bytes back.
        let mut av = open(4);
        let mut fa = 0u64;
        assert_eq!(av.insertsvc(&s, None, Some(&mut fa), 0, None).unwrap(), 1);
        let mut out = [0u8; ADDR_LEN];
        let mut len = ADDR_LEN;
        av.lookup(fa, &mut out, &mut len).unwrap();
        assert_eq!(out, bytes);
        // Node and service split.
        let (node, service) = s
            .strip_prefix("uet://")
            .and_then(|r| r.split_once('/'))
            .unwrap();
        assert_eq!(
            av.insertsvc(node, Some(service), Some(&mut fa), 0, None)
                .unwrap(),
            1
        );
        av.lookup(fa, &mut out, &mut len).unwrap();
        assert_eq!(out, bytes);
        assert_in_step(&av);

        // String AV: insert takes the string, lookup returns it.
        let mut av = open_str(4);
        let mut fas = [0u64; 1];
        assert_eq!(av.insert_str(&[&s], Some(&mut fas), 0, None).unwrap(), 1);
        let mut out = [0u8; ADDR_STR_MAX];
        let mut len = out.len();
        av.lookup(fas[0], &mut out, &mut len).unwrap();
        assert_eq!(len, s.len() + 1);
        assert_eq!(&out[..s.len()], s.as_bytes());
        assert_eq!(out[s.len()], 0);
        assert_eq!(av.address(fas[0]).unwrap().to_bytes().unwrap(), bytes);
        assert_eq!(av.nic().entry(0).copied(), av.mirror_entry(0));
        assert_in_step(&av);
    }
}

/// The binary insert and the string forms agree on which IPv4-mapped IPv6 addresses are
/// addresses: one that spells 0.0.0.0, a multicast or the broadcast address reaches no single
/// node and fails alone (`-FI_EINVAL`), and straddr of every one inserted goes back in.
#[test]
fn binary_and_string_inserts_agree_on_ipv4_mapped_addresses() {
    let mapped = |v4: &str| {
        let mut b = peer_bytes(3);
        b[1] |= 1 << 6; // IPV6
        let a: std::net::Ipv6Addr = format!("::ffff:{v4}").parse().unwrap();
        b[16..32].copy_from_slice(&a.octets());
        b
    };
    let cases = [
        ("10.1.2.3", true),
        ("0.0.0.0", false),
        ("224.0.0.1", false),
        ("239.255.255.255", false),
        ("255.255.255.255", false),
    ];
    let mut av = open(8);
    let buf = pack(&cases.map(|(v4, _)| mapped(v4)));
    let mut fa = [0u64; 5];
    let mut st = [0i32; 5];
    let n = av
        .insert_with_status(&buf, 5, Some(&mut fa), FI_SYNC_ERR, Some(&mut st))
        .unwrap();
    assert_eq!(n, 1);
    for (i, (v4, ok)) in cases.iter().enumerate() {
        assert_eq!(st[i] == 0, *ok, "::ffff:{v4}: status {}", st[i]);
        if !ok {
            assert_eq!((fa[i], st[i]), (FI_ADDR_NOTAVAIL, EINVAL), "::ffff:{v4}");
        }
    }
    let mut text = [0u8; 128];
    let mut len = text.len();
    let s = straddr(&mapped("10.1.2.3"), &mut text, &mut len);
    let mut again = 0u64;
    assert_eq!(
        av.insertsvc(&s, None, Some(&mut again), 0, None).unwrap(),
        1
    );
    let (mut out, mut len) = ([0u8; ADDR_LEN], ADDR_LEN);
    av.lookup(again, &mut out, &mut len).unwrap();
    assert_eq!(out, mapped("10.1.2.3"));
    assert_in_step(&av);
}

#[test]
fn string_av_rules() {
    let mut av = open_str(4);
    assert_eq!(av.addrlen(), ADDR_STR_MAX);
    let good = peer(1).to_string();
    let mut st = [0i32; 3];
    let mut out = [0u64; 3];
    let n = av
        .insert_str(
            &[&good, "uet://10.0.0.1/4096", "uet://localhost/9?ri=1+2"],
            Some(&mut out),
            FI_SYNC_ERR,
            Some(&mut st),
        )
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(st, [0, EINVAL, 0]);
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1]);
    assert!(av.address(1).unwrap().fabric_addr.is_loopback());
    // Binary addresses do not go into a string AV, nor strings into a binary one.
    let e = av.insert(&peer_bytes(2), 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("insert_str"), "{e}");
    let mut bin = open(4);
    assert_eq!(
        errno(bin.insert_str(&[&good], None, 0, None)),
        FiErrno::FI_EINVAL
    );
    // Truncated lookup, straddr of a string.
    let mut small = [0xffu8; 8];
    let mut len = small.len();
    av.lookup(0, &mut small, &mut len).unwrap();
    assert_eq!(len, good.len() + 1);
    assert_eq!(&small[..7], &good.as_bytes()[..7]);
    assert_eq!(small[7], 0);
    let mut buf = [0u8; 128];
    let mut len = buf.len();
    let mut c_string = good.clone().into_bytes();
    c_string.push(0);
    assert_eq!(av.straddr(&c_string, &mut buf, &mut len), good);
    assert_eq!(len, good.len() + 1);
    assert_in_step(&av);
}

#[test]
fn insertsvc_nodes_and_services() {
    let mut av = open(8);
    let mut fa = 0u64;
    assert_eq!(
        av.insertsvc("10.1.2.3", Some("17"), Some(&mut fa), 0, None)
            .unwrap(),
        1
    );
    let a = av.address(fa).unwrap();
    assert_eq!(a.fabric_addr, IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)));
    assert_eq!(
        (a.pid_on_fep, a.ri_start, a.ri_count, a.initiator, a.caps),
        (17, 1, 1, 0, 0)
    );
    assert_eq!(
        av.insertsvc("fd00::9", Some("18?abs"), Some(&mut fa), 0, None)
            .unwrap(),
        1
    );
    assert_eq!(
        av.address(fa).unwrap().fabric_addr,
        "fd00::9".parse::<IpAddr>().unwrap()
    );
    assert_eq!(
        av.insertsvc("[fd00::a]", Some("19"), None, 0, None)
            .unwrap(),
        1
    );
    assert_eq!(
        av.insertsvc("localhost", Some("20?init=0x10"), Some(&mut fa), 0, None)
            .unwrap(),
        1
    );
    assert!(av.address(fa).unwrap().fabric_addr.is_loopback());
    assert_eq!(av.address(fa).unwrap().initiator, 16);
    assert_in_step(&av);
}

#[test]
fn insertsvc_errors_insert_nothing() {
    let mut av = open(8);
    let mut fa = 5u64;
    let mut st = 1i32;
    for (node, service, part) in [
        ("10.0.0.1", None, "service (the PIDonFEP) is required"),
        ("10.0.0.1", Some("x"), "bad PIDonFEP 'x'"),
        ("10.0.0.1", Some("1?ri=9"), "bad ri '9'"),
        ("10.0.0", Some("1"), "not an IPv4 literal"),
        ("host_1", Some("1"), "bad host name label"),
        ("0.0.0.0", Some("1"), "unusable fabric address"),
        ("uet://10.0.0.1/1", Some("1"), "service must be NULL"),
        ("uet://10.0.0.1", None, "expected '/'"),
    ] {
        let e = av
            .insertsvc(node, service, Some(&mut fa), FI_SYNC_ERR, Some(&mut st))
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{node} {service:?}");
        assert!(e.message.starts_with("fi_av_insertsvc: "), "{e}");
        assert!(e.message.contains(part), "{node} {service:?}: {e}");
    }
    assert_eq!((fa, st), (5, 1), "nothing written");
    assert!(av.is_empty());
    assert_eq!(av.nic().counters().commands(), 0);
}

#[test]
fn insertsvc_full_table_fails_the_address() {
    let mut av = open(1);
    insert_peers(&mut av, &[1]);
    let (mut fa, mut st) = (0u64, 0i32);
    assert_eq!(
        av.insertsvc(
            "10.0.0.2",
            Some("2"),
            Some(&mut fa),
            FI_SYNC_ERR,
            Some(&mut st)
        )
        .unwrap(),
        0
    );
    assert_eq!((fa, st), (FI_ADDR_NOTAVAIL, ENOSPC));
}

/// A host name that does not resolve fails the address, not the call, as the same name in an
/// FI_ADDR_STR string does in fi_av_insert: 0 inserted, `FI_ADDR_NOTAVAIL` in `fi_addr`,
/// `FI_EADDRNOTAVAIL` in the status; the AV unchanged.
#[test]
fn insertsvc_of_a_name_that_does_not_resolve_fails_the_address() {
    let mut av = open(4);
    av.set_resolver(fake_resolver);
    let (mut fa, mut st) = (5u64, 1i32);
    assert_eq!(
        av.insertsvc(
            "nosuchhost",
            Some("1"),
            Some(&mut fa),
            FI_SYNC_ERR,
            Some(&mut st)
        ),
        Ok(0)
    );
    assert_eq!((fa, st), (FI_ADDR_NOTAVAIL, EADDRNOTAVAIL));
    let mut strings = open_with(AvAttr {
        count: 4,
        addr_format: AddrFormat::Str,
        ..AvAttr::default()
    });
    strings.set_resolver(fake_resolver);
    fails_the_address_in_both_calls(&mut strings, "uet://nosuchhost/1", EADDRNOTAVAIL);
    assert!(av.is_empty() && strings.is_empty());
    assert_in_step(&av);
    assert_in_step(&strings);
}

/// A host name that resolves to an address no peer can have (multicast here) fails the
/// address, not the call, as the same text does in fi_av_insert on an FI_ADDR_STR AV: 0
/// inserted, `FI_ADDR_NOTAVAIL` in `fi_addr`, `FI_EINVAL` in the status; the AV unchanged.
#[test]
fn insertsvc_of_a_name_resolving_to_an_unusable_address_fails_the_address() {
    fn resolver(name: &str) -> std::io::Result<Vec<IpAddr>> {
        match name {
            "mcast" => Ok(vec![IpAddr::V4(Ipv4Addr::new(224, 0, 0, 2))]),
            _ => fake_resolver(name),
        }
    }
    let mut strings = open_with(AvAttr {
        count: 4,
        addr_format: AddrFormat::Str,
        ..AvAttr::default()
    });
    strings.set_resolver(resolver);
    fails_the_address_in_both_calls(&mut strings, "uet://mcast/1", EINVAL);
    let mut av = open(4);
    av.set_resolver(resolver);
    let (mut fa, mut st) = (5u64, 1i32);
    assert_eq!(
        av.insertsvc(
            "mcast",
            Some("1"),
            Some(&mut fa),
            FI_SYNC_ERR,
            Some(&mut st)
        ),
        Ok(0)
    );
    assert_eq!((fa, st), (FI_ADDR_NOTAVAIL, EINVAL));
    assert!(av.is_empty() && strings.is_empty());
    assert_in_step(&av);
    assert_in_step(&strings);
}

#[test]
fn insertsvc_takes_a_user_id() {
    let mut av = open(4);
    let mut fa = 99u64;
    av.insertsvc("10.0.0.1", Some("1"), Some(&mut fa), FI_AV_USER_ID, None)
        .unwrap();
    assert_eq!(fa, 0);
    assert_eq!(av.user_id(0).unwrap(), Some(99));
    assert_in_step(&av);
}

fn fake_resolver(name: &str) -> std::io::Result<Vec<IpAddr>> {
    let n: u8 = name
        .strip_prefix("node")
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"))?;
    Ok(vec![IpAddr::V4(Ipv4Addr::new(10, 7, 0, n))])
}

// ---------------------------------------------------------------------------------------------
// insertsym

#[test]
fn insertsym_follows_the_man_page_order() {
    let mut av = open(16);
    insert_peers(&mut av, &[1, 2]);
    av.remove(&[0], 0).unwrap();
    let mut out = [0u64; 4];
    let n = av
        .insertsym("10.1.1.1", 2, "5000", 2, Some(&mut out), 0, None)
        .unwrap_err();
    assert!(n.message.contains("bad PIDonFEP '5000'"), "{n}");
    let n = av
        .insertsym("10.1.1.1", 2, "500?init=7", 2, Some(&mut out), 0, None)
        .unwrap();
    assert_eq!(n, 4);
    assert_eq!(out, [0, 2, 3, 4], "each takes the lowest unused index");
    let got: Vec<(String, u16, u32)> = out
        .iter()
        .map(|&fa| {
            let a = av.address(fa).unwrap();
            (a.fabric_addr.to_string(), a.pid_on_fep, a.initiator)
        })
        .collect();
    let want = [
        ("10.1.1.1", 500, 7),
        ("10.1.1.1", 501, 8),
        ("10.1.1.2", 500, 7),
        ("10.1.1.2", 501, 8),
    ]
    .map(|(ip, p, i)| (ip.to_string(), p, i));
    assert_eq!(got, want);
    assert_in_step(&av);
}

#[test]
fn insertsym_host_names_count_up_with_padding() {
    let mut av = open(16);
    av.set_resolver(fake_resolver);
    let mut out = [0u64; 3];
    assert_eq!(
        av.insertsym("node001", 3, "1", 1, Some(&mut out), 0, None)
            .unwrap(),
        3
    );
    let ips: Vec<String> = out
        .iter()
        .map(|&fa| av.address(fa).unwrap().fabric_addr.to_string())
        .collect();
    assert_eq!(ips, ["10.7.0.1", "10.7.0.2", "10.7.0.3"]);
    // A node whose name does not resolve fails its own addresses; the others are inserted
    // (fi_av(3): the return value counts the addresses inserted).
    let (mut out, mut st) = ([7u64; 6], [1i32; 6]);
    assert_eq!(
        av.insertsym(
            "node254",
            3,
            "1",
            2,
            Some(&mut out),
            FI_SYNC_ERR,
            Some(&mut st)
        ),
        Ok(4)
    );
    assert_eq!(out, [3, 4, 5, 6, FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL]);
    assert_eq!(st, [0, 0, 0, 0, EADDRNOTAVAIL, EADDRNOTAVAIL]);
    assert_eq!(av.len(), 7);
    // localhost with the system resolver; no suffix, so one node only.
    let mut av = open(4);
    assert_eq!(
        av.insertsym("localhost", 1, "1", 2, None, 0, None).unwrap(),
        2
    );
    let e = av
        .insertsym("localhost", 2, "1", 1, None, 0, None)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("numeric suffix"), "{e}");
    assert_in_step(&av);
}

/// A node whose name resolves to an address no peer can have (multicast here) fails its own
/// addresses, as a name that does not resolve does; the other nodes' are inserted.
#[test]
fn insertsym_node_resolving_to_an_unusable_address_fails_only_its_own_addresses() {
    fn resolver(name: &str) -> std::io::Result<Vec<IpAddr>> {
        match name {
            "host2" => Ok(vec![IpAddr::V4(Ipv4Addr::new(224, 0, 0, 2))]),
            _ => fake_resolver(&name.replace("host", "node")),
        }
    }
    let mut av = open(16);
    av.set_resolver(resolver);
    let (mut out, mut st) = ([7u64; 6], [1i32; 6]);
    assert_eq!(
        av.insertsym(
            "host1",
            3,
            "1",
            2,
            Some(&mut out),
            FI_SYNC_ERR,
            Some(&mut st)
        ),
        Ok(4)
    );
    assert_eq!(out, [0, 1, FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, 2, 3]);
    assert_eq!(st, [0, 0, EINVAL, EINVAL, 0, 0]);
    let ips: Vec<String> = [0, 1, 2, 3]
        .iter()
        .map(|&fa| av.address(fa).unwrap().fabric_addr.to_string())
        .collect();
    assert_eq!(ips, ["10.7.0.1", "10.7.0.1", "10.7.0.3", "10.7.0.3"]);
    assert_in_step(&av);
}

#[test]
fn insertsym_errors_and_limits() {
    let mut av = open(4);
    let mut out = [0u64; 4];
    let mut st = [0i32; 4];
    // nodecnt × svccnt beyond the AV, or overflowing.
    assert_eq!(
        errno(av.insertsym("10.0.0.1", 5, "1", 1, None, 0, None)),
        FiErrno::FI_EINVAL
    );
    assert_eq!(
        errno(av.insertsym("10.0.0.1", usize::MAX, "1", 2, None, 0, None)),
        FiErrno::FI_EINVAL
    );
    // fi_addr and status must hold nodecnt × svccnt.
    assert_eq!(
        errno(av.insertsym("10.0.0.1", 2, "1", 2, Some(&mut out[..3]), 0, None)),
        FiErrno::FI_EINVAL
    );
    assert_eq!(
        errno(av.insertsym("10.0.0.1", 2, "1", 2, None, FI_SYNC_ERR, Some(&mut st[..3]))),
        FiErrno::FI_EINVAL
    );
    // Ranges that run out.
    assert_eq!(
        errno(av.insertsym("255.255.255.254", 2, "1", 1, None, 0, None)),
        FiErrno::FI_EINVAL
    );
    assert_eq!(
        errno(av.insertsym("10.0.0.1", 1, "4095", 2, None, 0, None)),
        FiErrno::FI_EINVAL
    );
    assert!(av.is_empty());
    // Zero nodes or services insert nothing, but still end an FI_MORE batch.
    av.insert(&peer_bytes(1), 1, None, FI_MORE).unwrap();
    assert_eq!(
        av.insertsym("10.0.0.1", 0, "1", 3, None, 0, None).unwrap(),
        0
    );
    assert_eq!(av.pending_len(), 0);
    // An empty range names no member that could run out of range, or need a name suffix.
    assert_eq!(
        av.insertsym("10.0.0.1", 0, "4000", 500, None, 0, None)
            .unwrap(),
        0
    );
    assert_eq!(
        av.insertsym("localhost", 5, "1", 0, None, 0, None).unwrap(),
        0
    );
    assert_eq!(
        errno(av.insertsym("not a node!", 0, "1", 1, None, 0, None)),
        FiErrno::FI_EINVAL,
        "the strings are still checked"
    );
    // A full table fails the extra addresses alone.
    let n = av
        .insertsym(
            "10.0.0.1",
            2,
            "1",
            2,
            Some(&mut out),
            FI_SYNC_ERR,
            Some(&mut st),
        )
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(out[3], FI_ADDR_NOTAVAIL);
    assert_eq!(st, [0, 0, 0, ENOSPC]);
    assert_in_step(&av);
}

#[test]
fn insertsym_with_user_ids_and_fi_more() {
    let mut av = open(8);
    let mut io = [10u64, 11, 12, 13];
    av.insertsym(
        "fd00::1",
        2,
        "3",
        2,
        Some(&mut io),
        FI_AV_USER_ID | FI_MORE,
        None,
    )
    .unwrap();
    assert_eq!(io, [0, 1, 2, 3]);
    assert_eq!(av.pending_len(), 4);
    av.flush().unwrap();
    for i in 0..4u64 {
        assert_eq!(av.user_id(i).unwrap(), Some(10 + i));
    }
    assert_eq!(
        av.address(2).unwrap().fabric_addr,
        "fd00::2".parse::<IpAddr>().unwrap()
    );
    assert_in_step(&av);
}

/// A node the resolver would read as a number in hexadecimal form is not taken as a host
/// name, whose numeric suffix insertsym would count up (10.0.0.0x9 + 1 would be 10.0.0.0x10,
/// 10.0.0.16): refused as a whole, nothing inserted.
#[test]
fn a_hexadecimal_ipv4_node_is_refused_not_counted_as_a_name() {
    for node in ["10.0.0.0x9", "0x0a000009"] {
        let mut av = open(8);
        let mut fa = [7u64; 2];
        let e = av
            .insertsym(node, 2, "5", 1, Some(&mut fa), 0, None)
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{node}: {e}");
        assert!(e.message.contains("not an IPv4 literal"), "{e}");
        assert_eq!(fa, [7, 7], "untouched");
        assert_eq!(av.len(), 0);
        let e = av.insertsvc(node, Some("5"), None, 0, None).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{node}: {e}");
    }
}

/// `fi_av_straddr` on an `FI_ADDR_STR` AV writes the string as it is, byte for byte, also
/// where it is not UTF-8 (only the copy returned to Rust replaces what is not), up to its
/// first NUL.
#[test]
fn straddr_of_a_string_av_copies_the_bytes_as_they_are() {
    let av = open_str(4);
    let given = b"fi_addr_uet://\xff\xfe/1\0ignored";
    let mut buf = [0x55u8; 64];
    let mut len = buf.len();
    let s = av.straddr(given, &mut buf, &mut len);
    assert_eq!(len, 19, "the string and its NUL");
    assert_eq!(&buf[..19], b"fi_addr_uet://\xff\xfe/1\0");
    assert_eq!(buf[19], 0x55, "nothing past the NUL");
    assert_eq!(s, "fi_addr_uet://\u{fffd}\u{fffd}/1");
    let mut len = 16;
    av.straddr(given, &mut buf, &mut len);
    assert_eq!(len, 19);
    assert_eq!(
        &buf[..16],
        b"fi_addr_uet://\xff\0",
        "truncated, NUL-terminated"
    );
}

/// `text`, an `FI_ADDR_STR` address, given to `fi_av_insert` and to `fi_av_insertsvc` of the
/// string AV `strings` with `FI_SYNC_ERR`: each call inserts nothing and returns 0, with
/// `FI_ADDR_NOTAVAIL` in its `fi_addr` and `errno` in its status.
fn fails_the_address_in_both_calls(
    strings: &mut uet_av::AddressVector<MemoryNicTable>,
    text: &str,
    errno: i32,
) {
    let (mut fa, mut st) = ([5u64], [1i32]);
    assert_eq!(
        strings.insert_str(&[text], Some(&mut fa), FI_SYNC_ERR, Some(&mut st)),
        Ok(0)
    );
    assert_eq!(
        (fa[0], st[0]),
        (FI_ADDR_NOTAVAIL, errno),
        "fi_av_insert of {text}"
    );
    let (mut fa, mut st) = (5u64, 1i32);
    assert_eq!(
        strings.insertsvc(text, None, Some(&mut fa), FI_SYNC_ERR, Some(&mut st)),
        Ok(0)
    );
    assert_eq!(
        (fa, st),
        (FI_ADDR_NOTAVAIL, errno),
        "fi_av_insertsvc of {text}"
    );
}
