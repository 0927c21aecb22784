//! The AV against a plain reference model of fi_av(3), on a NIC of the simulator: random
//! sequences of inserts (single, batched, empty, with `FI_MORE`, with `FI_SYNC_ERR`, with bad
//! addresses), insertsvc (of a peer's straddr string, which must read back as the peer),
//! symmetric inserts, removes (good and bad, small and past the doorbell's limit, so both
//! AV_INVALIDATE paths run), explicit flushes, lookups (whole, truncated, and never written
//! past the length given) and user ids, 10,000 steps per seed, eight seeds per configuration
//! (`UET_MODEL_SEEDS` sets another number). After every step the model, the host mirror and
//! the NIC table read back with AV_READ agree; the model computes symmetric members with its
//! own arithmetic. A failure names its seed on standard error.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use uet_av::{AvAttr, FiErrno, NicAvTable, FI_AV_USER_ID, FI_MORE, FI_SYNC_ERR};
use uet_driver::backend::sim::SimDevice;
use uet_driver::{Av, Nic};
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::{NicAvEntry, UetAddress};
use uet_sim::{Fabric, NicConfig};

const CAP: usize = 48;
const STEPS: usize = 10_000;
/// The AV's JobID, stamped into every NIC entry.
const JOB: u32 = 0x51;
/// `FI_SYNC_ERR` status values: a malformed address, a full table.
const EINVAL: i32 = 22;
const ENOSPC: i32 = 28;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn peer(n: u64) -> UetAddress {
    UetAddress {
        caps: caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 1 + (n % 500) as u16,
        fabric_addr: IpAddr::V4(Ipv4Addr::from(0x0a20_0000 + (n as u32 % 4000) + 1)),
        ri_start: 1,
        ri_count: 4,
        initiator: n as u32,
    }
}

/// Member `j` of the symmetric set `nodes × svc` based at `base`, by fi_av(3)'s order (every
/// service of a node before the next node) and this provider's service rule (the PIDonFEP
/// and the initiator count up with the service, the fabric address with the node), computed
/// here without the library's own arithmetic.
fn sym_member(base: &UetAddress, svc: u64, j: u64) -> UetAddress {
    let (node, k) = (j / svc, j % svc);
    let IpAddr::V4(ip) = base.fabric_addr else {
        panic!("the model's peers are IPv4");
    };
    UetAddress {
        fabric_addr: IpAddr::V4(Ipv4Addr::from(u32::from(ip) + node as u32)),
        pid_on_fep: base.pid_on_fep + k as u16,
        initiator: base.initiator + k as u32,
        ..*base
    }
}

/// The reference model: slots in index order, lowest-free allocation, user ids.
struct Model {
    slots: Vec<Option<([u8; 32], Option<u64>)>>,
}

impl Model {
    fn new() -> Self {
        Model {
            slots: vec![None; CAP],
        }
    }

    fn insert(&mut self, bytes: [u8; 32], user_id: Option<u64>) -> Option<u64> {
        let i = self.slots.iter().position(Option::is_none)?;
        self.slots[i] = Some((bytes, user_id));
        Some(i as u64)
    }

    fn len(&self) -> usize {
        self.slots.iter().flatten().count()
    }
}

fn open(fabric: &Fabric, user_ids: bool) -> (Nic, Av) {
    let f = fabric
        .add_nic(NicConfig::new("10.250.0.1".parse().unwrap()))
        .unwrap();
    let nic = Nic::open(Arc::new(SimDevice::new(f))).unwrap();
    let av = nic
        .open_av(AvAttr {
            count: CAP,
            job_id: JOB,
            flags: if user_ids { FI_AV_USER_ID } else { 0 },
            ..AvAttr::default()
        })
        .unwrap();
    (nic, av)
}

fn check(av: &mut Av, m: &Model, step: usize) {
    assert_eq!(av.len(), m.len(), "step {step}: len");
    for (i, slot) in m.slots.iter().enumerate() {
        // A buffer longer than the length given: nothing past the length is written.
        let mut b = [0xAAu8; 40];
        let mut len = 32;
        let got = av.lookup(i as u64, &mut b, &mut len);
        match slot {
            Some((bytes, uid)) => {
                assert!(got.is_ok(), "step {step}: index {i} should be in use");
                assert_eq!(&b[..32], bytes, "step {step}: index {i} address");
                assert_eq!(len, 32, "step {step}: index {i} addrlen");
                assert!(
                    b[32..].iter().all(|&x| x == 0xAA),
                    "step {step}: past addrlen"
                );
                // Truncated: the first bytes only, and the size needed.
                let short = (i * 7) % 32;
                let mut t = [0xAAu8; 32];
                let mut tlen = short;
                av.lookup(i as u64, &mut t, &mut tlen)
                    .expect("truncated lookup");
                assert_eq!(tlen, 32, "step {step}: index {i} size needed");
                assert_eq!(
                    &t[..short],
                    &bytes[..short],
                    "step {step}: index {i} truncated"
                );
                assert!(
                    t[short..].iter().all(|&x| x == 0xAA),
                    "step {step}: past {short}"
                );
                if let Some(u) = uid {
                    assert_eq!(
                        av.user_id(i as u64).unwrap(),
                        Some(*u),
                        "step {step}: uid {i}"
                    );
                }
            }
            None => assert_eq!(
                got.map_err(|e| e.errno),
                Err(FiErrno::FI_EINVAL),
                "step {step}: index {i} should be free"
            ),
        }
    }
    let mismatches = av.verify_nic().expect("AV_READ");
    assert!(
        mismatches.is_empty(),
        "step {step}: NIC and mirror differ at {:?}",
        mismatches.iter().map(|m| m.index).collect::<Vec<_>>()
    );
    // The NIC table, read back with AV_READ, against entries built from the model alone:
    // the peer's address, the AV's JobID, and the user id when one is set.
    let mut nic = vec![NicAvEntry::INVALID; CAP];
    av.nic_mut().read_entries(0, &mut nic).expect("AV_READ");
    for (i, (slot, got)) in m.slots.iter().zip(&nic).enumerate() {
        let want = match slot {
            None => NicAvEntry::INVALID,
            Some((bytes, uid)) => {
                let peer = UetAddress::from_bytes(bytes).expect("a valid address");
                let e = NicAvEntry::for_peer(&peer, JOB);
                match uid {
                    Some(u) => e.with_user_id(*u),
                    None => e,
                }
            }
        };
        assert_eq!(
            got.without_range(),
            want,
            "step {step}: NIC entry {i} against the model"
        );
    }
}

fn run(seed: u64, user_ids: bool) {
    let fabric = Fabric::new();
    let (_nic, mut av) = open(&fabric, user_ids);
    let mut m = Model::new();
    let mut r = Rng(seed);
    let mut pending_more = false;
    for step in 0..STEPS {
        match r.below(10) {
            // Insert 0..5 addresses, some malformed, sometimes with FI_MORE or FI_SYNC_ERR.
            0..=3 => {
                let n = r.below(6) as usize;
                let mut buf = Vec::new();
                let mut good = Vec::new();
                for _ in 0..n {
                    let mut b = peer(r.below(1 << 20)).to_bytes().unwrap();
                    let ok = r.below(8) != 0;
                    if !ok {
                        b[0] = 0x70;
                    }
                    buf.extend_from_slice(&b);
                    good.push((ok, b));
                }
                let more = r.below(4) == 0;
                let sync_err = r.below(3) == 0;
                let flags = if more { FI_MORE } else { 0 } | if sync_err { FI_SYNC_ERR } else { 0 };
                let mut out = vec![0u64; n];
                let mut status = vec![-1i32; n];
                let k = av
                    .insert_with_status(
                        &buf,
                        n,
                        Some(&mut out),
                        flags,
                        sync_err.then_some(&mut status[..]),
                    )
                    .unwrap();
                let mut want = 0;
                for (j, (ok, b)) in good.iter().enumerate() {
                    let expect = if *ok {
                        m.insert(*b, user_ids.then_some(u64::MAX))
                    } else {
                        None
                    };
                    want += usize::from(expect.is_some());
                    assert_eq!(
                        out[j],
                        expect.unwrap_or(u64::MAX),
                        "step {step}: fi_addr of address {j}"
                    );
                    if sync_err {
                        let errno = match (ok, expect) {
                            (false, _) => EINVAL,
                            (true, None) => ENOSPC,
                            (true, Some(_)) => 0,
                        };
                        assert_eq!(status[j], errno, "step {step}: status of address {j}");
                    }
                }
                assert_eq!(k, want, "step {step}: inserted");
                // A call without FI_MORE ends the batch, an empty one too.
                pending_more = more;
            }
            // A symmetric insert: nodecnt × svccnt sequential peers.
            4 => {
                let nodes = 1 + r.below(3);
                let svc = 1 + r.below(3);
                let base = peer(r.below(3000));
                let node = base.fabric_addr.to_string();
                let service = format!(
                    "{}?ri={}+{}&init={}&caps={}",
                    base.pid_on_fep, base.ri_start, base.ri_count, base.initiator, base.caps
                );
                let total = (nodes * svc) as usize;
                let mut out = vec![0u64; total];
                let k = av
                    .insertsym(
                        &node,
                        nodes as usize,
                        &service,
                        svc as usize,
                        Some(&mut out),
                        0,
                        None,
                    )
                    .unwrap();
                let mut want = 0;
                for (j, &got) in out.iter().enumerate() {
                    let member = sym_member(&base, svc, j as u64);
                    let expect = m.insert(member.to_bytes().unwrap(), user_ids.then_some(u64::MAX));
                    want += usize::from(expect.is_some());
                    assert_eq!(got, expect.unwrap_or(u64::MAX), "step {step}: member {j}");
                }
                assert_eq!(k, want, "step {step}: symmetric inserted");
                pending_more = false;
            }
            // Remove 1..3 indices, or sometimes 9..28 of those in use (past what one AV
            // doorbell takes, so the admin AV_INVALIDATE runs): all in use → removed; any not
            // in use → FI_EINVAL, none removed.
            5..=7 => {
                let in_use: Vec<u64> = (0..CAP as u64)
                    .filter(|&i| m.slots[i as usize].is_some())
                    .collect();
                let mut list: Vec<u64> = if r.below(8) == 0 && in_use.len() > 9 {
                    let n = 9 + r.below(20) as usize;
                    in_use
                        .iter()
                        .copied()
                        .filter(|_| r.below(4) != 0)
                        .take(n)
                        .collect()
                } else {
                    let n = 1 + r.below(3) as usize;
                    (0..n).map(|_| r.below(CAP as u64 + 4)).collect()
                };
                list.sort_unstable();
                list.dedup();
                let all_used = list
                    .iter()
                    .all(|&i| m.slots.get(i as usize).is_some_and(Option::is_some));
                let got = av.remove(&list, 0);
                if all_used {
                    assert!(got.is_ok(), "step {step}: remove {list:?}: {got:?}");
                    for &i in &list {
                        m.slots[i as usize] = None;
                    }
                } else {
                    assert_eq!(
                        got.map_err(|e| e.errno),
                        Err(FiErrno::FI_EINVAL),
                        "step {step}"
                    );
                }
                pending_more = false;
            }
            // A user id on an address in use (AVs opened with FI_AV_USER_ID).
            8 if user_ids => {
                let i = r.below(CAP as u64);
                let uid = r.below(1 << 40);
                let got = av.set_user_id(i, uid, 0);
                match m.slots.get_mut(i as usize).and_then(Option::as_mut) {
                    Some(slot) => {
                        assert!(got.is_ok(), "step {step}: set_user_id: {got:?}");
                        slot.1 = Some(uid);
                    }
                    None => assert_eq!(got.map_err(|e| e.errno), Err(FiErrno::FI_EINVAL)),
                }
                pending_more = false;
            }
            // insertsvc of a peer's straddr string (FI_ADDR_STR form, service NULL): it reads
            // back as the peer.
            9 if r.below(2) == 0 => {
                let peer = peer(r.below(1 << 20)).to_bytes().unwrap();
                let mut buf = [0u8; 128];
                let mut len = buf.len();
                let text = av.straddr(&peer, &mut buf, &mut len);
                assert_eq!(len, text.len() + 1, "step {step}: straddr length");
                let mut fa = 0u64;
                let k = av.insertsvc(&text, None, Some(&mut fa), 0, None).unwrap();
                let expect = m.insert(peer, user_ids.then_some(u64::MAX));
                assert_eq!(k, usize::from(expect.is_some()), "step {step}: {text}");
                assert_eq!(fa, expect.unwrap_or(u64::MAX), "step {step}: {text}");
                pending_more = false;
            }
            // An explicit flush, which sends what FI_MORE left pending.
            9 => {
                av.flush().unwrap();
                pending_more = false;
            }
            // Lookups of indices out of range and FI_ADDR_NOTAVAIL.
            _ => {
                let mut b = [0u8; 32];
                let mut len = b.len();
                for bad in [CAP as u64 + r.below(100), u64::MAX] {
                    assert_eq!(
                        av.lookup(bad, &mut b, &mut len).map_err(|e| e.errno),
                        Err(FiErrno::FI_EINVAL)
                    );
                }
            }
        }
        if !pending_more {
            check(&mut av, &m, step);
        }
    }
    av.flush().unwrap();
    check(&mut av, &m, STEPS);
}

/// The seeds of a configuration: `base`, then more drawn from it (splitmix64), as many as
/// `UET_MODEL_SEEDS` says (8 by default).
fn seeds(base: u64) -> impl Iterator<Item = u64> {
    let n = uet_tests::model_seed_count(8) as u64;
    (0..n).map(move |k| {
        if k == 0 {
            return base;
        }
        let mut z = base.wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        // xorshift never leaves 0.
        (z ^ (z >> 31)).max(1)
    })
}

#[test]
fn av_on_the_simulated_nic_matches_the_model() {
    for seed in seeds(0x9e37_79b9_7f4a_7c15) {
        eprintln!("seed {seed:#x}, without user ids");
        run(seed, false);
    }
}

#[test]
fn av_with_user_ids_on_the_simulated_nic_matches_the_model() {
    for seed in seeds(0x0bad_5eed_0f00_d001) {
        eprintln!("seed {seed:#x}, with user ids");
        run(seed, true);
    }
}
