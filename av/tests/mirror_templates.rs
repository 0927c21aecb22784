//! The mirror keeps an address as the bits a job's peers differ in and a shared template
//! (`uet_av::mirror::templates`): through the AV, every address reads back as inserted,
//! whether it shares a template, has one of its own, or is kept whole past the last template.

mod common;

use common::*;
use std::net::{IpAddr, Ipv6Addr};
use uet_av::ADDR_LEN;
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::UetAddress;

/// An address of subnet `fd00:k::/32` (each `k` its own template) with `low` in the bits a
/// slot holds.
fn lone(k: u16, low: u16) -> [u8; ADDR_LEN] {
    UetAddress {
        caps: caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: low % 4096,
        fabric_addr: IpAddr::V6(Ipv6Addr::new(0xfd00, k, 0, 0, 0, 0, 0, low)),
        ri_start: 1,
        ri_count: 4,
        initiator: u32::from(low),
    }
    .to_bytes()
    .unwrap()
}

fn read(av: &uet_av::AddressVector<uet_av::MemoryNicTable>, fi_addr: u64) -> [u8; ADDR_LEN] {
    let mut out = [0u8; ADDR_LEN];
    let mut len = ADDR_LEN;
    av.lookup(fi_addr, &mut out, &mut len).unwrap();
    assert_eq!(len, ADDR_LEN);
    out
}

#[test]
fn addresses_past_the_last_template_are_kept_whole_and_read_back() {
    // 5,000 subnets: 4,094 templates, then 906 addresses kept whole.
    let n = 5_000u16;
    let mut av = open(6_000);
    let addrs: Vec<[u8; ADDR_LEN]> = (0..n).map(|k| lone(k, k)).collect();
    let mut fi = vec![0u64; addrs.len()];
    let got = av
        .insert(&pack(&addrs), addrs.len(), Some(&mut fi), 0)
        .unwrap();
    assert_eq!(got, addrs.len());
    for (a, &f) in addrs.iter().zip(&fi) {
        assert_eq!(&read(&av, f), a, "fi_addr {f}");
    }
    assert_in_step(&av);

    // Remove one with a template and one kept whole; their room goes to the next inserts,
    // which read back as themselves (a freed template id taken by a new subnet, a freed
    // whole entry by another address).
    av.remove(&[fi[10], fi[4_500]], 0).unwrap();
    let fresh = [lone(9_000, 7), lone(9_001, 8)];
    let mut again = [0u64; 2];
    assert_eq!(av.insert(&pack(&fresh), 2, Some(&mut again), 0).unwrap(), 2);
    assert_eq!(again, [fi[10], fi[4_500]], "lowest free indices");
    assert_eq!(read(&av, again[0]), fresh[0]);
    assert_eq!(read(&av, again[1]), fresh[1]);
    for (i, (a, &f)) in addrs.iter().zip(&fi).enumerate() {
        if i != 10 && i != 4_500 {
            assert_eq!(&read(&av, f), a, "fi_addr {f}");
        }
    }
    assert_in_step(&av);

    // Everything removed, then peers of one subnet: each takes the room of a removed one.
    av.remove(&fi, 0).unwrap();
    let same_subnet: Vec<[u8; ADDR_LEN]> = (0..1_000).map(|i| lone(1, i)).collect();
    let mut fi = vec![0u64; same_subnet.len()];
    av.insert(&pack(&same_subnet), same_subnet.len(), Some(&mut fi), 0)
        .unwrap();
    for (a, &f) in same_subnet.iter().zip(&fi) {
        assert_eq!(&read(&av, f), a);
    }
    assert_in_step(&av);
}

#[test]
fn peers_of_one_job_cost_about_eight_bytes_each() {
    let n = 200_000u32;
    let mut av = open(n as usize);
    let addrs: Vec<[u8; ADDR_LEN]> = (0..n)
        .map(|i| {
            UetAddress {
                caps: caps::AI_BASE,
                mode: AddressingMode::Relative,
                max_msg_mtu: false,
                pid_on_fep: (i % 8) as u16,
                fabric_addr: IpAddr::V4(std::net::Ipv4Addr::from(0x0A00_0000 + i / 8)),
                ri_start: 1,
                ri_count: 4,
                initiator: i,
            }
            .to_bytes()
            .unwrap()
        })
        .collect();
    let mut fi = vec![0u64; addrs.len()];
    for (chunk, out) in addrs.chunks(256).zip(fi.chunks_mut(256)) {
        av.insert(&pack(chunk), chunk.len(), Some(out), 0).unwrap();
    }
    let per_entry = av.host_bytes() as f64 / f64::from(n);
    assert!(per_entry < 12.0, "{per_entry} host bytes per entry");
    for (i, (a, &f)) in addrs.iter().zip(&fi).enumerate().step_by(997) {
        assert_eq!(&read(&av, f), a, "peer {i}");
    }
    assert_in_step(&av);
}
