//! The text forms of a UET address (`FI_ADDR_STR`, and the node and service of
//! `fi_av_insertsvc` and `fi_av_insertsym`): every parser answers, with a message when it
//! refuses; what is accepted prints as text that reads back to the same value; a symmetric
//! range expands to exactly nodecnt × svccnt valid addresses, in the man page's order.
//!
//! Input: nodecnt (a byte, 0–16), svccnt (a byte, 0–16), then the text. The text is parsed
//! whole as each form; split at its first space, it is the node and the service of a range.

use crate::{refused, resolver, Input};
use uet_av::addr_str::{nth_node, split_addr_str, AddrStr, Node, Service, SymRange};

/// Run the target on `data`.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let nodecnt = usize::from(input.below(17));
    let svccnt = usize::from(input.below(17));
    let text = String::from_utf8_lossy(input.bytes(usize::MAX)).into_owned();

    match text.parse::<AddrStr>() {
        Ok(AddrStr(a)) => {
            assert!(a.to_bytes().is_ok(), "{text} parsed to an invalid {a:?}");
            let again = AddrStr(a).to_string();
            match again.parse::<AddrStr>() {
                Ok(AddrStr(b)) => assert_eq!(a, b, "{text} → {again}"),
                Err(e) => panic!("{again} (from {text}) does not read back: {e}"),
            }
            let (node, service) =
                split_addr_str(&again).unwrap_or_else(|e| panic!("{again} does not split: {e}"));
            let ip = Node::parse(node)
                .and_then(|n| n.resolve(resolver))
                .unwrap_or_else(|e| panic!("node of {again}: {e}"));
            let svc = Service::parse(service).unwrap_or_else(|e| panic!("service of {again}: {e}"));
            assert_eq!(svc.at(ip).ok(), Some(a), "{again}");
        }
        Err(e) => refused(&e),
    }

    match Service::parse(&text) {
        Ok(svc) => {
            let again = svc.to_string();
            assert_eq!(Service::parse(&again).ok(), Some(svc), "{text} → {again}");
            for k in [1, svccnt as u64, u64::from(u32::MAX), u64::MAX] {
                if let Some(m) = svc.nth(k) {
                    assert_eq!(u64::from(m.pid_on_fep), u64::from(svc.pid_on_fep) + k);
                    assert_eq!(u64::from(m.initiator), u64::from(svc.initiator) + k);
                }
            }
        }
        Err(e) => refused(&e),
    }

    match Node::parse(&text) {
        Ok(node) => {
            if let Err(e) = node.resolve(resolver) {
                refused(&e);
            }
            for n in [1, nodecnt as u64, u64::from(u32::MAX), u64::MAX] {
                if let Err(e) = nth_node(&text, node, n) {
                    refused(&e);
                }
            }
        }
        Err(e) => refused(&e),
    }

    let (node, service) = text.split_once(' ').unwrap_or((&text, ""));
    match SymRange::parse(node, nodecnt, service, svccnt) {
        Ok(range) => {
            assert_eq!(range.len(), Some(nodecnt * svccnt));
            match range.expand(resolver) {
                Ok(members) => {
                    assert_eq!(members.len(), nodecnt * svccnt, "{node} / {service}");
                    for (i, m) in members.iter().enumerate() {
                        assert!(
                            m.to_bytes().is_ok(),
                            "member {i} of {node} / {service}: {m:?}"
                        );
                        // Every service of a node before the next node.
                        let first = &members[i - i % svccnt];
                        assert_eq!(m.fabric_addr, first.fabric_addr, "member {i}");
                        let step = (i % svccnt) as u64;
                        assert_eq!(
                            u64::from(m.pid_on_fep),
                            u64::from(first.pid_on_fep) + step,
                            "member {i}"
                        );
                    }
                }
                Err(e) => refused(&e),
            }
        }
        Err(e) => refused(&e),
    }
}

/// Texts of every form: `FI_ADDR_STR` addresses, nodes, services with parameters, ranges.
pub fn seeds() -> Vec<Vec<u8>> {
    [
        "uet://10.0.0.1/7?ri=1+4&init=42",
        "uet://[fd00::9]/4095?ri=4000+96&init=0x2a&caps=0x03&abs&mtu",
        "10.0.0.1 7?ri=1+4",
        "node01 5?ri=2+2&init=4294967290",
        "[fd00::1] 4094",
        "node1-v6 1",
        "255.255.255.250 1?caps=3&abs",
    ]
    .iter()
    .map(|t| {
        let mut v = vec![3u8, 2];
        v.extend_from_slice(t.as_bytes());
        v
    })
    .collect()
}
