//! The 32-byte UET address (`fi_getname`'s output, `fi_av_insert`'s input): the full parse and
//! the AV's fast check agree on every input; an accepted address serializes back to the same
//! bytes, makes a valid NIC entry that names it, and reads back from its `fi_av_straddr` text.

use uet_av::addr_str::{AddrStr, ADDR_STR_MAX};
use uet_fwif::address::ADDRESS_BYTES;
use uet_fwif::{NicAvEntry, UetAddress};

/// Run the target on `data`.
pub fn run(data: &[u8]) {
    let parsed = UetAddress::from_bytes(data);
    let Some(bytes) = data
        .first_chunk::<ADDRESS_BYTES>()
        .filter(|_| data.len() == ADDRESS_BYTES)
    else {
        assert!(parsed.is_err(), "{} bytes taken as an address", data.len());
        return;
    };
    assert_eq!(
        UetAddress::bytes_are_valid(bytes),
        parsed.is_ok(),
        "the fast check and the parse disagree on {bytes:02x?}: {parsed:?}"
    );
    let entry = NicAvEntry::for_peer_bytes(bytes, 7);
    let address = match parsed {
        Ok(a) => a,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert!(entry.is_none(), "a NIC entry made of a refused address");
            return;
        }
    };
    assert_eq!(address.to_bytes().as_ref(), Ok(bytes), "{address:?}");
    let entry = entry.unwrap_or_else(|| panic!("no NIC entry for {address:?}"));
    assert_eq!(entry, NicAvEntry::for_peer(&address, 7));
    assert_eq!(entry.check(), Ok(()), "{address:?}");
    assert_eq!(entry.peer_address(), Some(address));
    let text = AddrStr(address).to_string();
    assert!(text.len() < ADDR_STR_MAX, "{text} is too long");
    match text.parse::<AddrStr>() {
        Ok(AddrStr(back)) => assert_eq!(back, address, "{text}"),
        Err(e) => panic!("{text} does not read back: {e}"),
    }
}

/// Valid addresses (IPv4, IPv6, IPv4-mapped, each flag) and near misses.
pub fn seeds() -> Vec<Vec<u8>> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use uet_fwif::address::{caps, AddressingMode};
    let base = UetAddress {
        caps: caps::HPC | caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 7,
        fabric_addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        ri_start: 1,
        ri_count: 4,
        initiator: 42,
    };
    let v6 = UetAddress {
        fabric_addr: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9)),
        mode: AddressingMode::Absolute,
        max_msg_mtu: true,
        pid_on_fep: 4095,
        ri_start: 4000,
        ri_count: 96,
        ..base
    };
    let mapped = UetAddress {
        fabric_addr: IpAddr::V6(Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped()),
        ..base
    };
    let mut out: Vec<Vec<u8>> = [base, v6, mapped]
        .iter()
        .filter_map(|a| a.to_bytes().ok())
        .map(|b| b.to_vec())
        .collect();
    if let Some(mut bad) = out.first().cloned() {
        bad[20] = 1; // a byte after the IPv4 address
        out.push(bad);
    }
    out
}
