//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use uet_av::{AddressVector, AvAttr, AvLimits, FiError, MemoryNicTable, NamedAv, ADDR_LEN};
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::UetAddress;

pub const LIMITS: AvLimits = AvLimits::new(1 << 20, 8);

/// Cases per property test: `PROPTEST_CASES` when set, else `default`.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

/// A named-AV name no other test (or run) uses.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Open (or attach to) the named AV `a` names, over an in-memory NIC table.
pub fn open_named(a: AvAttr) -> Result<NamedAv<MemoryNicTable>, FiError> {
    NamedAv::open(a, LIMITS, |a| Ok(MemoryNicTable::new(a.count as u32)))
}

/// A small xorshift generator for the random-sequence tests: a run is reproducible from its
/// seed (which must not be 0).
pub struct XorShift(pub u64);

impl XorShift {
    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// True once in `one_in` draws, on average.
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// A distinct valid peer address per `n` (IPv6 for odd `n` above 1000, to mix families).
pub fn peer(n: u32) -> UetAddress {
    let fabric_addr = if n > 1000 && n % 2 == 1 {
        IpAddr::V6(Ipv6Addr::new(
            0xfd00,
            0,
            0,
            0,
            0,
            0,
            (n >> 16) as u16,
            n as u16,
        ))
    } else {
        IpAddr::V4(Ipv4Addr::new(
            10,
            (n >> 16) as u8,
            (n >> 8) as u8,
            (n as u8).max(1),
        ))
    };
    UetAddress {
        caps: caps::HPC | caps::AI_BASE,
        mode: if n.is_multiple_of(3) {
            AddressingMode::Absolute
        } else {
            AddressingMode::Relative
        },
        max_msg_mtu: n.is_multiple_of(5),
        pid_on_fep: (n % 4096) as u16,
        fabric_addr,
        ri_start: 1,
        ri_count: 8,
        initiator: n,
    }
}

pub fn peer_bytes(n: u32) -> [u8; ADDR_LEN] {
    peer(n).to_bytes().expect("test address is valid")
}

/// Bytes that `UetAddress::from_bytes` rejects (unknown version).
pub fn bad_bytes(n: u32) -> [u8; ADDR_LEN] {
    let mut b = peer_bytes(n);
    b[0] = 0x20;
    b
}

/// Concatenate addresses into one insert buffer.
pub fn pack(addrs: &[[u8; ADDR_LEN]]) -> Vec<u8> {
    addrs.iter().flatten().copied().collect()
}

pub fn open(count: usize) -> AddressVector<MemoryNicTable> {
    open_with(AvAttr {
        count,
        job_id: 0x00ab_cdef,
        ..AvAttr::default()
    })
}

pub fn open_with(attr: AvAttr) -> AddressVector<MemoryNicTable> {
    let size = attr.resolve(&LIMITS).expect("valid attr").count as u32;
    AddressVector::open(MemoryNicTable::new(size), attr, LIMITS).expect("open")
}

/// Insert peers `ns` without FI_MORE, returning their fi_addrs.
pub fn insert_peers(av: &mut AddressVector<MemoryNicTable>, ns: &[u32]) -> Vec<u64> {
    let buf = pack(&ns.iter().map(|&n| peer_bytes(n)).collect::<Vec<_>>());
    let mut out = vec![0u64; ns.len()];
    let got = av
        .insert(&buf, ns.len(), Some(&mut out), 0)
        .expect("insert");
    assert_eq!(got, ns.len());
    out
}

/// Mirror and NIC agree at every index, and nothing is pending.
pub fn assert_in_step(av: &AddressVector<MemoryNicTable>) {
    assert_eq!(av.pending_len(), 0);
    let nic = av.nic().entries();
    assert_eq!(nic.len(), av.capacity());
    for (i, e) in nic.iter().enumerate() {
        assert_eq!(
            av.mirror_entry(i as u32).as_ref(),
            Some(e),
            "index {i}: mirror and NIC differ"
        );
    }
}
