//! Every text the AV parses comes from outside (an application, a job launcher, a hosts file):
//! the `FI_ADDR_STR` form, `fi_av_insertsvc`'s node and service and `fi_av_insertsym`'s range.
//! Random texts, most of them near a valid form, go through the parsers and through the AV
//! calls that take them. Whatever the text, the parsers answer (never a panic, which in a
//! debug build includes arithmetic overflow), an accepted text names an address whose own text
//! reads back the same, and a refused call is `FI_EINVAL`, `FI_EADDRNOTAVAIL` or `FI_ENOSPC`
//! and changes nothing: mirror and NIC table stay as they were, and in step.
//!
//! `PROPTEST_CASES` sets the number of cases (1,024 by default); CI replays a fixed seed.

mod common;

use common::*;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use uet_av::addr_str::{split_addr_str, Node};
use uet_av::{
    AddrFormat, AddrStr, AddressVector, AvAttr, FiErrno, FiError, MemoryNicTable, Service,
    ADDR_LEN, ADDR_STR_MAX, FI_ADDR_NOTAVAIL,
};
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::{NicAvEntry, UetAddress};

/// Entries of the AVs the calls go to: room for some ranges, small enough to fill.
const CAPACITY: usize = 64;

/// Names `node<n>` (n < 256, any zero padding) resolve to 10.7.0.n; no other name does.
fn resolver(name: &str) -> std::io::Result<Vec<IpAddr>> {
    name.strip_prefix("node")
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u8>().ok())
        .map(|n| vec![IpAddr::V4(Ipv4Addr::new(10, 7, 0, n))])
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"))
}

// ---------------------------------------------------------------------------------------------
// generators

/// Any fabric address: IPv4, IPv6, IPv4-mapped IPv6 (the unusable ones included).
fn fabric_addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|v| IpAddr::V4(Ipv4Addr::from(v))),
        any::<u128>().prop_map(|v| IpAddr::V6(Ipv6Addr::from(v))),
        any::<u32>().prop_map(|v| IpAddr::V6(Ipv4Addr::from(v).to_ipv6_mapped())),
    ]
}

/// Any address that serializes: every field anywhere in its range.
fn valid_address() -> impl Strategy<Value = UetAddress> {
    let ri = (0u16..=4095).prop_flat_map(|start| (Just(start), 1..=4096 - start));
    (
        any::<u8>(),
        any::<bool>(),
        any::<bool>(),
        0u16..=4095,
        fabric_addr(),
        ri,
        any::<u32>(),
    )
        .prop_map(
            |(c, abs, mtu, pid, fa, (ri_start, ri_count), init)| UetAddress {
                caps: c & caps::ALL,
                mode: if abs {
                    AddressingMode::Absolute
                } else {
                    AddressingMode::Relative
                },
                max_msg_mtu: mtu,
                pid_on_fep: pid,
                fabric_addr: fa,
                ri_start,
                ri_count,
                initiator: init,
            },
        )
        .prop_filter("a usable fabric address", |a| a.validate().is_ok())
}

/// The pieces the forms are made of, and some that they are not.
const TOKENS: &[&str] = &[
    "uet://",
    "uet:/",
    "[",
    "]",
    "/",
    "?",
    "&",
    "=",
    "+",
    ".",
    ":",
    "::",
    "-",
    "0x",
    "0X",
    "ri",
    "init",
    "caps",
    "abs",
    "mtu",
    "0",
    "1",
    "7",
    "9",
    "12",
    "255",
    "256",
    "4095",
    "4096",
    "65535",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "ffff",
    "fd00",
    "10.0.0.1",
    "255.255.255.255",
    "node",
    "node001",
    "n",
    "a",
    "Z",
    " ",
    "\t",
    "\0",
    "é",
    "🦀",
    "%",
    "#",
];

/// A text of up to 24 tokens.
fn token_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..24).prop_map(|t| t.concat())
}

/// A valid text with up to four edits: a token inserted, a character removed or replaced.
fn edited(base: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    let edit = (
        any::<prop::sample::Index>(),
        0u8..3,
        prop::sample::select(TOKENS),
    );
    (base, prop::collection::vec(edit, 0..4)).prop_map(|(mut s, edits)| {
        for (at, kind, token) in edits {
            let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
            let i = bounds[at.index(bounds.len())];
            let next = s[i..].chars().next().map_or(i, |c| i + c.len_utf8());
            match kind {
                0 => s.insert_str(i, token),
                1 => s.replace_range(i..next, ""),
                _ => s.replace_range(i..next, token),
            }
        }
        s
    })
}

/// Texts of the `FI_ADDR_STR` form: valid, edited, or made of tokens.
fn addr_text() -> impl Strategy<Value = String> {
    prop_oneof![
        valid_address().prop_map(|a| a.to_string()),
        edited(valid_address().prop_map(|a| a.to_string())),
        token_text(),
    ]
}

/// Nodes a range may start at, and some it may not: literals near the ends of their
/// families, host names with and without a numeric suffix.
fn node_base() -> impl Strategy<Value = String> {
    prop::sample::select(
        &[
            "10.0.0.1",
            "255.255.255.250",
            "239.255.255.255",
            "0.0.0.0",
            "fd00::1",
            "[fd00::1]",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe",
            "::ffff:10.0.0.1",
            "node001",
            "node9",
            "node250",
            "node99999999999999999999",
            "n-1",
            "-node1",
            "a..b",
            "",
        ][..],
    )
    .prop_map(str::to_string)
}

/// Nodes: [`node_base`], edits of them, tokens.
fn node_text() -> impl Strategy<Value = String> {
    prop_oneof![node_base(), edited(node_base()), token_text()]
}

/// Services a range may start at: a PIDonFEP (near 4095 too), perhaps an initiator near the
/// top of its 32 bits.
fn service_base() -> impl Strategy<Value = String> {
    (
        prop_oneof![0u16..8, 4090u16..=4095],
        prop::option::of(prop_oneof![0u32..8, (u32::MAX - 4)..=u32::MAX]),
    )
        .prop_map(|(pid, init)| match init {
            Some(i) => format!("{pid}?init={i}"),
            None => pid.to_string(),
        })
}

/// Services: valid ones (any PIDonFEP and parameters), edits of them, tokens.
fn service_text() -> impl Strategy<Value = String> {
    let valid = || valid_address().prop_map(|a| Service::of(&a).to_string());
    let short = (0u16..=4095).prop_map(|p| p.to_string());
    prop_oneof![valid(), short, edited(valid()), token_text()]
}

/// Counts: small, around the AV's capacity, and at the ends of the integer.
fn count() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..6,
        (CAPACITY - 2)..(CAPACITY + 2),
        Just(1usize << 32),
        Just(usize::MAX),
    ]
}

// ---------------------------------------------------------------------------------------------
// checks

/// The `fi_addr` array a range's call is given: one slot per member, when that is not absurd
/// (larger ranges go without one, as `NULL`).
fn out_len(nodecnt: usize, svccnt: usize) -> Option<usize> {
    nodecnt.checked_mul(svccnt).filter(|&n| n <= 4 * CAPACITY)
}

/// Node `n` of a range from `node`, worked out on its own: an IP literal plus `n`, or the
/// host name's numeric suffix plus `n` (zero padding kept), resolved by [`resolver`].
fn nth_node(node: &str, n: u64) -> Option<IpAddr> {
    let literal = node
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(node);
    match literal.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => u32::from(a)
            .checked_add(u32::try_from(n).ok()?)
            .map(|v| IpAddr::V4(Ipv4Addr::from(v))),
        Ok(IpAddr::V6(a)) => u128::from(a)
            .checked_add(u128::from(n))
            .map(|v| IpAddr::V6(Ipv6Addr::from(v))),
        Err(_) if n == 0 => resolver(node).ok()?.first().copied(),
        Err(_) => {
            let digits = node.bytes().rev().take_while(u8::is_ascii_digit).count();
            let (prefix, suffix) = node.split_at(node.len() - digits);
            let value = suffix.parse::<u64>().ok()?.checked_add(n)?;
            let name = format!("{prefix}{value:0width$}", width = suffix.len());
            resolver(&name).ok()?.first().copied()
        }
    }
}

/// Mirror entries at every index and the count: what a refused call must leave alone.
fn snapshot(av: &AddressVector<MemoryNicTable>) -> (usize, Vec<Option<NicAvEntry>>) {
    let cap = av.capacity() as u32;
    (av.len(), (0..cap).map(|i| av.mirror_entry(i)).collect())
}

/// An AV with some addresses in it, resolving with [`resolver`].
fn av_with_peers(format: AddrFormat) -> AddressVector<MemoryNicTable> {
    let mut av = open_with(AvAttr {
        count: CAPACITY,
        job_id: 0x00ab_cdef,
        addr_format: format,
        ..AvAttr::default()
    });
    av.set_resolver(resolver);
    if format == AddrFormat::Uet {
        insert_peers(&mut av, &[1, 2, 3]);
    }
    av
}

/// A refusal the parsers or the AV may give for a text, with a message.
fn check_refusal(e: &FiError) -> Result<(), TestCaseError> {
    prop_assert!(
        matches!(
            e.errno,
            FiErrno::FI_EINVAL | FiErrno::FI_EADDRNOTAVAIL | FiErrno::FI_ENOSPC
        ),
        "unexpected errno: {e}"
    );
    prop_assert!(!e.message.is_empty());
    Ok(())
}

/// After a call: refused ones changed nothing; taken ones added exactly what they returned.
fn check_outcome(
    r: &Result<usize, FiError>,
    before: &(usize, Vec<Option<NicAvEntry>>),
    av: &AddressVector<MemoryNicTable>,
) -> Result<(), TestCaseError> {
    let after = snapshot(av);
    match r {
        Ok(k) => prop_assert_eq!(after.0, before.0 + k),
        Err(e) => {
            check_refusal(e)?;
            prop_assert_eq!(&after, before, "a refused call changed the AV: {}", e);
        }
    }
    assert_in_step(av);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(1024), ..ProptestConfig::default() })]

    /// Every serializable address prints a text that reads back to it, fits
    /// `ADDR_STR_MAX`, splits into a node and service that `fi_av_insertsvc` takes, and that
    /// insert stores the same bytes as a binary insert.
    #[test]
    fn every_address_text_reads_back(a in valid_address()) {
        let s = a.to_string();
        prop_assert_eq!(s.parse::<AddrStr>().map(|p| p.0), Ok(a));
        prop_assert!(s.len() < ADDR_STR_MAX, "{} is {} bytes", s, s.len());
        let (node, service) = split_addr_str(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(Service::parse(service).map_err(|e| e.to_string()), Ok(Service::of(&a)));

        let mut av = av_with_peers(AddrFormat::Uet);
        let mut fi_addr = FI_ADDR_NOTAVAIL;
        prop_assert_eq!(av.insertsvc(node, Some(service), Some(&mut fi_addr), 0, None).map_err(|e| e.to_string()), Ok(1));
        let mut out = [0u8; ADDR_LEN];
        let mut len = out.len();
        prop_assert!(av.lookup(fi_addr, &mut out, &mut len).is_ok());
        prop_assert_eq!(Some(out), a.to_bytes().ok());
        // The FI_ADDR_STR form of the node and service, whole, is the same address.
        let mut fi_addr2 = FI_ADDR_NOTAVAIL;
        prop_assert_eq!(av.insertsvc(&s, None, Some(&mut fi_addr2), 0, None).map_err(|e| e.to_string()), Ok(1));
        prop_assert_eq!(av.mirror_entry(fi_addr2 as u32), av.mirror_entry(fi_addr as u32));
        assert_in_step(&av);
    }

    /// Any text: the strict parser accepts only addresses whose own text is a fixed point, and
    /// refuses the rest with `FI_EINVAL`; the node and service parsers answer too.
    #[test]
    fn any_text_is_read_or_refused(s in addr_text()) {
        match s.parse::<AddrStr>() {
            Ok(AddrStr(a)) => {
                prop_assert!(a.validate().is_ok());
                prop_assert!(a.to_bytes().is_ok());
                let canonical = a.to_string();
                prop_assert_eq!(canonical.parse::<AddrStr>().map(|p| p.0), Ok(a));
            }
            Err(e) => {
                prop_assert_eq!(e.errno, FiErrno::FI_EINVAL, "{}", e);
                prop_assert!(!e.message.is_empty());
            }
        }
        if let Ok(svc) = Service::parse(&s) {
            prop_assert_eq!(Service::parse(&svc.to_string()).map_err(|e| e.to_string()), Ok(svc));
        }
        if let Ok(Node::Ip(ip)) = Node::parse(&s) {
            let text = match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            };
            prop_assert_eq!(Node::parse(&text).map_err(|e| e.to_string()), Ok(Node::Ip(ip)));
        }
    }

    /// `fi_av_insertsvc` of any node and service, or of any `FI_ADDR_STR` text alone: one
    /// address taken (the one the texts name), or the call refused with nothing changed.
    #[test]
    fn insertsvc_takes_one_address_or_nothing(
        node in prop_oneof![node_text(), addr_text()],
        service in prop::option::of(service_text()),
    ) {
        let mut av = av_with_peers(AddrFormat::Uet);
        let before = snapshot(&av);
        let mut fi_addr = FI_ADDR_NOTAVAIL;
        let r = av.insertsvc(&node, service.as_deref(), Some(&mut fi_addr), 0, None);
        check_outcome(&r, &before, &av)?;
        if r.as_ref().is_ok_and(|&k| k == 1) {
            let text = match &service {
                Some(svc) => format!("uet://{node}/{svc}"),
                None => node.clone(),
            };
            // A host name node resolves as the resolver says; a literal reads as the form.
            let want = uet_av::addr_str::parse_addr_str_with(&text, resolver)
                .or_else(|_| {
                    let svc = Service::parse(service.as_deref().unwrap_or_default())?;
                    svc.at(Node::parse(&node)?.resolve(resolver)?)
                })
                .map_err(|e| TestCaseError::fail(format!("insertsvc took '{text}', which does not parse: {e}")))?;
            prop_assert_eq!(av.address(fi_addr).map_err(|e| e.to_string()), Ok(want));
        }
    }

    /// `fi_av_insertsym` of any node, service and counts: nodecnt × svccnt addresses taken in
    /// the man page's order (members refused one by one only once the AV is full, or because
    /// their node's name does not resolve), or the call refused with nothing changed.
    #[test]
    fn insertsym_takes_each_member_or_nothing(
        (node, nodecnt, service, svccnt) in prop_oneof![
            // Mostly ranges that can be taken, near the ends of what nodes and services reach.
            3 => (node_base(), 1usize..6, service_base(), 1usize..6),
            // Ranges about as large as the room left in the AV.
            1 => (node_base(), (CAPACITY - 8)..CAPACITY, service_base(), Just(1usize)),
            1 => (node_text(), count(), service_text(), count()),
        ],
    ) {
        let mut av = av_with_peers(AddrFormat::Uet);
        let before = snapshot(&av);
        let mut fi_addr = vec![FI_ADDR_NOTAVAIL; out_len(nodecnt, svccnt).unwrap_or(0)];
        let out = out_len(nodecnt, svccnt).map(|_| &mut fi_addr[..]);
        let r = av.insertsym(&node, nodecnt, &service, svccnt, out, 0, None);
        check_outcome(&r, &before, &av)?;
        let Ok(k) = r else {
            return Ok(());
        };
        let total = nodecnt * svccnt;
        prop_assert!(k <= total);
        let unresolved = |n: u64| nth_node(&node, n).is_none();
        if k < total {
            // Members are refused one by one only when the AV has no room left for them, or
            // their node does not resolve.
            prop_assert!(
                av.len() == av.capacity() || (0..nodecnt as u64).any(unresolved),
                "{} of {} members taken", k, total
            );
        }
        if out_len(nodecnt, svccnt).is_none() {
            return Ok(());
        }
        for (m, &fa) in fi_addr.iter().enumerate() {
            if unresolved((m / svccnt) as u64) {
                prop_assert_eq!(fa, FI_ADDR_NOTAVAIL, "member {} of a node that does not resolve", m);
            }
        }
        if k == 0 {
            return Ok(());
        }
        prop_assert_eq!(fi_addr.iter().filter(|&&fa| fa != FI_ADDR_NOTAVAIL).count(), k);
        // Member m is service m % svccnt of node m / svccnt (fi_av(3)'s order), counted here
        // without the parser's own arithmetic.
        let base = Service::parse(&service).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (m, &fa) in fi_addr.iter().enumerate().filter(|(_, &fa)| fa != FI_ADDR_NOTAVAIL) {
            let (n, j) = ((m / svccnt) as u64, (m % svccnt) as u64);
            let want = UetAddress {
                caps: base.caps,
                mode: base.mode,
                max_msg_mtu: base.max_msg_mtu,
                pid_on_fep: u16::try_from(u64::from(base.pid_on_fep) + j)
                    .ok()
                    .filter(|&p| p <= 4095)
                    .ok_or_else(|| TestCaseError::fail(format!("member {m}: PIDonFEP past 4095")))?,
                fabric_addr: nth_node(&node, n)
                    .ok_or_else(|| TestCaseError::fail(format!("member {m}: no node {n} of '{node}'")))?,
                ri_start: base.ri_start,
                ri_count: base.ri_count,
                initiator: u32::try_from(u64::from(base.initiator) + j)
                    .map_err(|_| TestCaseError::fail(format!("member {m}: initiator past 32 bits")))?,
            };
            prop_assert_eq!(av.address(fa).map_err(|e| e.to_string()), Ok(want), "member {}", m);
        }
    }

    /// `fi_av_insert` on an `FI_ADDR_STR` AV of any texts: each taken or refused on its own
    /// (`FI_ADDR_NOTAVAIL` in its slot), the count of those taken returned, each taken one
    /// reading back as the address its text names.
    #[test]
    fn string_inserts_take_each_text_alone(texts in prop::collection::vec(addr_text(), 1..6)) {
        let mut av = av_with_peers(AddrFormat::Str);
        let before = snapshot(&av);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut fi_addr = vec![0; refs.len()];
        let r = av.insert_str(&refs, Some(&mut fi_addr), 0, None);
        check_outcome(&r, &before, &av)?;
        let taken = fi_addr.iter().filter(|&&fa| fa != FI_ADDR_NOTAVAIL).count();
        prop_assert_eq!(r.as_ref().ok(), Some(&taken));
        for (text, &fa) in texts.iter().zip(&fi_addr) {
            let named = uet_av::addr_str::parse_addr_str_with(text, resolver);
            if fa == FI_ADDR_NOTAVAIL {
                // Refused alone: its text does not name an address (the AV is not full).
                prop_assert!(named.is_err(), "'{}' was refused", text);
            } else {
                let named = named.map_err(|e| TestCaseError::fail(format!("'{text}' was taken: {e}")))?;
                prop_assert_eq!(av.address(fa).map_err(|e| e.to_string()), Ok(named));
            }
        }
    }
}
