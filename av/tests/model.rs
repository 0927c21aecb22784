//! The AV against a plain reference model: a `Vec<Option<address>>` where an insert takes the
//! lowest empty slot. After every step, model, mirror and the in-memory NIC table must agree.

mod common;

use common::*;
use proptest::prelude::*;
use uet_av::{
    fi_rx_addr, AddressVector, AvAttr, FiErrno, MemoryNicTable, NicOp, ADDR_LEN, FI_ADDR_NOTAVAIL,
    FI_MORE,
};
use uet_fwif::{NicAvEntry, UetAddress};

const JOB: u32 = 0x000f_00d5;

#[derive(Clone, Debug)]
enum Op {
    /// Insert peers (`n`, malformed?), with or without FI_MORE, with or without an fi_addr array.
    Insert {
        addrs: Vec<(u32, bool)>,
        more: bool,
        null_out: bool,
    },
    /// Remove these fi_addrs: (index, rx context); index may be out of range.
    Remove { targets: Vec<(u64, u32)> },
    /// Remove FI_ADDR_NOTAVAIL along with a valid-looking index.
    RemoveNotAvail { index: u64 },
    /// Look up (index, rx context) with an output buffer of `len` bytes.
    Lookup { index: u64, rx: u32, len: usize },
    /// Make the next AV_WRITE fail.
    FailWrite,
    /// Make the next AV_INVALIDATE fail.
    FailInvalidate,
    /// Send pending records.
    Flush,
}

#[derive(Default)]
struct Model {
    slots: Vec<Option<[u8; ADDR_LEN]>>,
    pending: Vec<u32>,
    fail_write: bool,
    fail_invalidate: bool,
}

impl Model {
    fn new(cap: usize) -> Self {
        Model {
            slots: vec![None; cap],
            ..Model::default()
        }
    }

    fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Send pending records; `false` if the (armed) write fails, after rolling back.
    fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        if self.fail_write {
            self.fail_write = false;
            for i in self.pending.drain(..) {
                self.slots[i as usize] = None;
            }
            return false;
        }
        self.pending.clear();
        true
    }

    fn insert(
        &mut self,
        addrs: &[[u8; ADDR_LEN]],
        more: bool,
    ) -> (Result<usize, FiErrno>, Vec<u64>) {
        let mut out = Vec::new();
        let mut ok = 0;
        for a in addrs {
            let slot = if UetAddress::from_bytes(a).is_ok() {
                self.slots.iter().position(|s| s.is_none())
            } else {
                None
            };
            match slot {
                Some(i) => {
                    self.slots[i] = Some(*a);
                    self.pending.push(i as u32);
                    out.push(i as u64);
                    ok += 1;
                }
                None => out.push(FI_ADDR_NOTAVAIL),
            }
        }
        if !more && !self.flush() {
            for v in &mut out {
                if *v != FI_ADDR_NOTAVAIL && self.slots[*v as usize].is_none() {
                    *v = FI_ADDR_NOTAVAIL;
                }
            }
            return (Err(FiErrno::FI_EIO), out);
        }
        (Ok(ok), out)
    }

    fn index_of(&self, fa: u64, rx_bits: u8) -> Option<usize> {
        if fa == FI_ADDR_NOTAVAIL {
            return None;
        }
        let idx = if rx_bits == 0 {
            fa
        } else {
            fa & (u64::MAX >> rx_bits)
        };
        let i = usize::try_from(idx).ok()?;
        self.slots.get(i)?.as_ref().map(|_| i)
    }

    fn remove(&mut self, fas: &[u64], rx_bits: u8) -> Result<(), FiErrno> {
        let mut idx = Vec::new();
        for &fa in fas {
            idx.push(self.index_of(fa, rx_bits).ok_or(FiErrno::FI_EINVAL)?);
        }
        let mut sorted = idx.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != idx.len() {
            return Err(FiErrno::FI_EINVAL);
        }
        if idx.is_empty() {
            return Ok(());
        }
        if !self.flush() {
            return Err(FiErrno::FI_EIO);
        }
        if self.fail_invalidate {
            self.fail_invalidate = false;
            return Err(FiErrno::FI_EIO);
        }
        for i in idx {
            self.slots[i] = None;
        }
        Ok(())
    }
}

fn address_bytes(n: u32, bad: bool) -> [u8; ADDR_LEN] {
    if bad {
        bad_bytes(n)
    } else {
        peer_bytes(n)
    }
}

fn fa(index: u64, rx: u32, rx_bits: u8) -> u64 {
    fi_rx_addr(index, rx, rx_bits)
}

fn check(av: &AddressVector<MemoryNicTable>, m: &Model, step: usize) {
    assert_eq!(av.len(), m.len(), "step {step}: len");
    assert_eq!(av.pending_len(), m.pending.len(), "step {step}: pending");
    let mut buf = [0u8; ADDR_LEN];
    for (i, slot) in m.slots.iter().enumerate() {
        let mut len = ADDR_LEN;
        let got = av.lookup(i as u64, &mut buf, &mut len);
        match slot {
            Some(bytes) => {
                assert!(got.is_ok(), "step {step}: index {i} should be in use");
                assert_eq!(&buf, bytes, "step {step}: index {i} bytes");
            }
            None => assert_eq!(
                got.map_err(|e| e.errno),
                Err(FiErrno::FI_EINVAL),
                "step {step}: index {i} should be free"
            ),
        }
        let expect_entry = slot
            .as_ref()
            .map(|b| NicAvEntry::for_peer(&UetAddress::from_bytes(b).unwrap(), JOB))
            .unwrap_or(NicAvEntry::INVALID);
        assert_eq!(
            av.mirror_entry(i as u32),
            Some(expect_entry),
            "step {step}: mirror entry {i}"
        );
        let on_nic = av.nic().entries()[i];
        if m.pending.contains(&(i as u32)) {
            assert!(
                !on_nic.is_valid(),
                "step {step}: pending index {i} already on the NIC"
            );
        } else {
            assert_eq!(on_nic, expect_entry, "step {step}: NIC entry {i}");
        }
    }
    let iter: Vec<(u32, UetAddress)> = av.iter().collect();
    let model: Vec<(u32, UetAddress)> = m
        .slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|b| (i as u32, UetAddress::from_bytes(&b).unwrap())))
        .collect();
    assert_eq!(iter, model, "step {step}: iter");
}

fn run(cap: usize, rx_bits: u8, ops: &[Op]) {
    let mut av = open_with(AvAttr {
        count: cap,
        rx_ctx_bits: rx_bits,
        job_id: JOB,
        ..AvAttr::default()
    });
    let mut m = Model::new(cap);
    let rx_limit = if rx_bits == 0 {
        0
    } else {
        (1u32 << rx_bits) - 1
    };
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Insert {
                addrs,
                more,
                null_out,
            } => {
                let bytes: Vec<[u8; ADDR_LEN]> = addrs
                    .iter()
                    .map(|&(n, bad)| address_bytes(n, bad))
                    .collect();
                let flags = if *more { FI_MORE } else { 0 };
                let (want, want_out) = m.insert(&bytes, *more);
                let mut out = vec![0u64; bytes.len()];
                let got = av.insert(
                    &pack(&bytes),
                    bytes.len(),
                    if *null_out { None } else { Some(&mut out) },
                    flags,
                );
                assert_eq!(got.map_err(|e| e.errno), want, "step {step}: insert result");
                if !null_out {
                    assert_eq!(out, want_out, "step {step}: fi_addr out");
                }
            }
            Op::Remove { targets } => {
                let fas: Vec<u64> = targets
                    .iter()
                    .map(|&(i, rx)| fa(i, rx.min(rx_limit), rx_bits))
                    .collect();
                let want = m.remove(&fas, rx_bits);
                let got = av.remove(&fas, 0).map_err(|e| e.errno);
                assert_eq!(got, want, "step {step}: remove {fas:x?}");
            }
            Op::RemoveNotAvail { index } => {
                let fas = [*index, FI_ADDR_NOTAVAIL];
                let want = m.remove(&fas, rx_bits);
                assert_eq!(want, Err(FiErrno::FI_EINVAL));
                assert_eq!(av.remove(&fas, 0).map_err(|e| e.errno), want);
            }
            Op::Lookup { index, rx, len } => {
                let f = fa(*index, (*rx).min(rx_limit), rx_bits);
                let mut buf = vec![0u8; *len];
                let mut l = *len;
                let got = av.lookup(f, &mut buf, &mut l).map_err(|e| e.errno);
                match m.index_of(f, rx_bits) {
                    Some(i) => {
                        assert_eq!(got, Ok(()), "step {step}: lookup {f:#x}");
                        assert_eq!(l, ADDR_LEN);
                        let n = (*len).min(ADDR_LEN);
                        assert_eq!(&buf[..n], &m.slots[i].unwrap()[..n]);
                    }
                    None => {
                        assert_eq!(got, Err(FiErrno::FI_EINVAL), "step {step}: lookup {f:#x}");
                        assert_eq!(l, *len);
                    }
                }
            }
            Op::FailWrite => {
                av.nic_mut().fail_after(NicOp::Write, 0);
                m.fail_write = true;
            }
            Op::FailInvalidate => {
                av.nic_mut().fail_after(NicOp::Invalidate, 0);
                m.fail_invalidate = true;
            }
            Op::Flush => {
                let want = if m.flush() {
                    Ok(())
                } else {
                    Err(FiErrno::FI_EIO)
                };
                assert_eq!(av.flush().map_err(|e| e.errno), want, "step {step}: flush");
            }
        }
        check(&av, &m, step);
    }
    av.nic_mut().clear_faults();
    m.fail_write = false;
    assert!(av.verify_nic().unwrap().is_empty());
    m.flush();
    check(&av, &m, ops.len());
}

// ---------------------------------------------------------------------------------------------
// proptest

fn op_strategy(cap: u64) -> impl Strategy<Value = Op> {
    let index = 0..cap + 3;
    prop_oneof![
        6 => (
            prop::collection::vec((0u32..3000, prop::bool::weighted(0.15)), 0..5),
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(addrs, more, null_out)| Op::Insert { addrs, more, null_out }),
        4 => prop::collection::vec((index.clone(), 0u32..8), 1..3)
            .prop_map(|targets| Op::Remove { targets }),
        1 => index.clone().prop_map(|index| Op::RemoveNotAvail { index }),
        4 => (index, 0u32..8, 0usize..40).prop_map(|(index, rx, len)| Op::Lookup { index, rx, len }),
        1 => Just(Op::FailWrite),
        1 => Just(Op::FailInvalidate),
        1 => Just(Op::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// 48 cases x 50..100 steps: at least 2,400 steps.
    #[test]
    fn av_matches_the_model(
        (cap, rx_bits, ops) in (4usize..24, prop_oneof![Just(0u8), Just(3u8)]).prop_flat_map(
            |(cap, rx)| (Just(cap), Just(rx), prop::collection::vec(op_strategy(cap as u64), 50..100))
        )
    ) {
        run(cap, rx_bits, &ops);
    }
}

// ---------------------------------------------------------------------------------------------
// fixed seeds

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seeded_ops(seed: u64, cap: u64, steps: usize) -> Vec<Op> {
    let mut r = XorShift(seed);
    (0..steps)
        .map(|_| match r.below(20) {
            0..=6 => Op::Insert {
                addrs: (0..r.below(5))
                    .map(|_| (r.below(3000) as u32, r.below(8) == 0))
                    .collect(),
                more: r.below(3) == 0,
                null_out: r.below(5) == 0,
            },
            7..=11 => Op::Remove {
                targets: (0..1 + r.below(2))
                    .map(|_| (r.below(cap + 3), r.below(8) as u32))
                    .collect(),
            },
            12 => Op::RemoveNotAvail {
                index: r.below(cap),
            },
            13..=16 => Op::Lookup {
                index: r.below(cap + 3),
                rx: r.below(8) as u32,
                len: r.below(40) as usize,
            },
            17 => Op::FailWrite,
            18 => Op::FailInvalidate,
            _ => Op::Flush,
        })
        .collect()
}

#[test]
fn av_matches_the_model_on_fixed_seeds() {
    for (seed, cap, rx_bits) in [
        (0x9e37_79b9_7f4a_7c15u64, 8u64, 0u8),
        (0xdead_beef_cafe_f00d, 16, 3),
        (0x0123_4567_89ab_cdef, 33, 0),
        (0x5151_5151_5151_5151, 5, 2),
    ] {
        let ops = seeded_ops(seed, cap, 1500);
        run(cap as usize, rx_bits, &ops);
    }
}
