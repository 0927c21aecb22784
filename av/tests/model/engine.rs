//! The reference-model engine of `model.rs`: a plain model of fi_av(3) and fi_av_set(3) (a
//! `Vec<Option<(address, user id)>>` where an insert takes the lowest empty slot that is not
//! lost, plus a list of plain `Vec` AV sets), random operation sequences, and a run that after
//! every step checks model, mirror, NIC table and sets agree. It runs over any [`ModelNic`]:
//! the in-memory table here, and a NIC of the simulator in the workspace's end-to-end tests
//! (`tests/tests/av_model_full_sim.rs`, which includes this file).
#![allow(dead_code)]
use crate::common::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};
use uet_av::NicAvTable;
use uet_av::{
    address_string, fi_rx_addr, is_av_set_addr, AddrFormat, AddressVector, AvAttr, AvSet,
    AvSetAttr, Fault, FiErrno, MemoryNicTable, NicOp, Service, ADDR_LEN, ADDR_STR_MAX,
    FI_ADDR_NOTAVAIL, FI_AV_USER_ID, FI_MORE, FI_SYNC_ERR, FI_UNIVERSE,
};
use uet_fwif::{NicAvEntry, UetAddress};

/// A NIC table the model runs over: read back as the NIC holds it, with faults armed on its
/// next AV_WRITE or AV_INVALIDATE.
pub(crate) trait ModelNic: NicAvTable {
    /// Entries `0..count` as the NIC holds them (AV_READ on a NIC).
    fn entries_on_nic(&mut self, count: usize) -> Vec<NicAvEntry>;
    /// The next command of kind `op` meets `fault`.
    fn arm_fault(&mut self, op: NicOp, fault: Fault);
    /// Cancel every armed fault.
    fn disarm_faults(&mut self);
}

impl ModelNic for MemoryNicTable {
    fn entries_on_nic(&mut self, count: usize) -> Vec<NicAvEntry> {
        self.entries()[..count].to_vec()
    }

    fn arm_fault(&mut self, op: NicOp, fault: Fault) {
        self.inject(op, 0, fault);
    }

    fn disarm_faults(&mut self) {
        self.clear_faults();
    }
}

const JOB: u32 = 0x000f_00d5;
const MAX_SETS: usize = 4;

#[derive(Clone, Debug)]
pub(crate) struct InsertMode {
    more: bool,
    null_out: bool,
    sync_err: bool,
    /// Per-insert FI_AV_USER_ID, the user ids being `base + i`.
    user_ids: Option<u64>,
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// Insert peers (`n`, malformed?).
    Insert {
        addrs: Vec<(u32, bool)>,
        mode: InsertMode,
    },
    /// insertsvc of peer `n`: form 0 node + service, 1 FI_ADDR_STR node, 2 localhost, 3 bad.
    InsertSvc {
        n: u32,
        form: u8,
        mode: InsertMode,
    },
    /// insertsym from peer `n`.
    InsertSym {
        n: u32,
        nodecnt: usize,
        svccnt: usize,
        mode: InsertMode,
    },
    /// Remove these fi_addrs: (index, rx context); index may be out of range.
    Remove {
        targets: Vec<(u64, u32)>,
    },
    /// Remove FI_ADDR_NOTAVAIL along with a valid-looking index.
    RemoveNotAvail {
        index: u64,
    },
    /// Remove, in one call, every index of `from..from + len` that the model holds in use or
    /// lost (each named with a receive context and peer group): frees long runs, so that
    /// later symmetric inserts are stored as long ranges, and removes range members
    /// together with singles.
    Drain {
        from: u64,
        len: u64,
    },
    /// Look up (index, rx context) with an output buffer of `len` bytes.
    Lookup {
        index: u64,
        rx: u32,
        len: usize,
    },
    /// fi_av_set_user_id.
    SetUserId {
        index: u64,
        user_id: u64,
    },
    /// Make the next AV_WRITE fail.
    FailWrite,
    /// Make the next AV_INVALIDATE fail.
    FailInvalidate,
    /// Send pending records.
    Flush,
    /// fi_av_set into slot `slot`: a range (start, end, stride) or FI_UNIVERSE, with `count`.
    SetNew {
        slot: usize,
        range: Option<(u64, u64, u64)>,
        count: usize,
    },
    SetInsert {
        set: usize,
        index: u64,
    },
    SetRemove {
        set: usize,
        index: u64,
    },
    SetUnion {
        dst: usize,
        src: usize,
    },
    SetIntersect {
        dst: usize,
        src: usize,
    },
    SetDiff {
        dst: usize,
        src: usize,
    },
    SetAddr {
        set: usize,
    },
    SetPrune {
        set: usize,
    },
}

struct MSet {
    members: Vec<u32>,
    cap: usize,
    addr: Option<u64>,
}

type Slot = Option<([u8; ADDR_LEN], Option<u64>)>;

struct Model {
    slots: Vec<Slot>,
    /// Lost indices: returned by an FI_MORE insert, then rolled back with a refused batch.
    /// They hold no address and no insert takes them, until a remove frees them.
    lost: Vec<bool>,
    pending: Vec<u32>,
    fail_write: bool,
    fail_invalidate: bool,
    /// The errno of the armed AV_WRITE, or AV_INVALIDATE, failure: `FI_EIO` refused,
    /// `FI_EAGAIN` when the NIC had no room for it (the call then changed nothing).
    fail_write_errno: FiErrno,
    fail_invalidate_errno: FiErrno,
    /// The next AV_WRITE, or AV_INVALIDATE, goes unanswered. Armed only when no other fault
    /// is and nothing is in doubt, so that the repair after it meets no fault.
    doubt_write: bool,
    doubt_invalidate: bool,
    /// Entries are in doubt (an unanswered command): the NIC may differ from the mirror there
    /// until the next call that repairs (an insert that sends, remove, set_user_id).
    in_doubt: bool,
    open_user_id: bool,
    sets: Vec<Option<MSet>>,
}

/// What an insert call returns: the result, fi_addr out, status out.
type InsertOutcome = (Result<usize, FiErrno>, Vec<u64>, Vec<i32>);

impl Model {
    fn new(cap: usize, open_user_id: bool) -> Self {
        Model {
            slots: vec![None; cap],
            lost: vec![false; cap],
            pending: Vec::new(),
            fail_write: false,
            fail_invalidate: false,
            fail_write_errno: FiErrno::FI_EIO,
            fail_invalidate_errno: FiErrno::FI_EIO,
            doubt_write: false,
            doubt_invalidate: false,
            in_doubt: false,
            open_user_id,
            sets: (0..MAX_SETS).map(|_| None).collect(),
        }
    }

    fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn valid(&self, i: u32) -> bool {
        self.slots.get(i as usize).is_some_and(|s| s.is_some())
    }

    /// The fault armed for the next AV_WRITE (`write`) or AV_INVALIDATE, if any, taken: its
    /// errno when refused; `FI_EIO` and entries in doubt when unanswered.
    fn command_fault(&mut self, write: bool) -> Result<(), FiErrno> {
        let (fail, errno, doubt) = if write {
            (
                &mut self.fail_write,
                self.fail_write_errno,
                &mut self.doubt_write,
            )
        } else {
            (
                &mut self.fail_invalidate,
                self.fail_invalidate_errno,
                &mut self.doubt_invalidate,
            )
        };
        if core::mem::take(fail) {
            return Err(errno);
        }
        if core::mem::take(doubt) {
            self.in_doubt = true;
            return Err(FiErrno::FI_EIO);
        }
        Ok(())
    }

    fn lost_len(&self) -> usize {
        self.lost.iter().filter(|&&l| l).count()
    }

    /// Send pending records; the errno if the (armed) write fails, after rolling back.
    /// `returned`: how many pending records (at the front) are earlier `FI_MORE` calls'; all
    /// of them when the flush is a remove's or set_user_id's. Rolling those back changes what
    /// those calls reported: `FI_EIO` whatever the NIC's reason, and their indices are lost.
    fn flush(&mut self, returned: usize) -> Result<(), FiErrno> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // Entries in doubt are rewritten first (no fault is armed while they are).
        self.in_doubt = false;
        if self.fail_write {
            self.fail_write = false;
            for (p, i) in self.pending.drain(..).enumerate() {
                self.slots[i as usize] = None;
                if p < returned {
                    self.lost[i as usize] = true;
                }
            }
            // Every batch of the model fits one AV_WRITE: a failure keeps nothing.
            return Err(if returned == 0 {
                self.fail_write_errno
            } else {
                FiErrno::FI_EIO
            });
        }
        if self.doubt_write {
            // Unanswered: the records stay inserted, in doubt.
            self.doubt_write = false;
            self.pending.clear();
            self.in_doubt = true;
            return Err(FiErrno::FI_EIO);
        }
        self.pending.clear();
        Ok(())
    }

    /// A call without FI_MORE refused with `errno` ends the batch before it: `errno`, or
    /// `FI_EIO` when that batch fails (the earlier calls' inserts are rolled back).
    fn end_refused(&mut self, errno: FiErrno) -> FiErrno {
        match self.flush(self.pending.len()) {
            Ok(()) => errno,
            Err(_) => FiErrno::FI_EIO,
        }
    }

    /// The argument checks every insert shares; `Some(errno)` when the call is refused.
    fn refused(&self, mode: &InsertMode) -> Option<FiErrno> {
        if mode.user_ids.is_some() && (self.open_user_id || mode.null_out) {
            return Some(FiErrno::FI_EINVAL);
        }
        None
    }

    /// Insert `addrs` (each the bytes, or the errno it fails with) as one call.
    fn insert(
        &mut self,
        addrs: &[Result<[u8; ADDR_LEN], i32>],
        mode: &InsertMode,
    ) -> InsertOutcome {
        // Records pending when the call starts are earlier FI_MORE calls'.
        let returned = self.pending.len();
        let mut out = Vec::new();
        let mut st = Vec::new();
        let mut ok = 0;
        for (k, a) in addrs.iter().enumerate() {
            let user_id = match mode.user_ids {
                Some(base) => Some(base + k as u64),
                None if self.open_user_id => Some(FI_ADDR_NOTAVAIL),
                None => None,
            };
            let r = a.and_then(|b| {
                let i = (0..self.slots.len())
                    .find(|&i| self.slots[i].is_none() && !self.lost[i])
                    .ok_or(28)?;
                self.slots[i] = Some((b, user_id));
                self.pending.push(i as u32);
                Ok(i)
            });
            match r {
                Ok(i) => {
                    out.push(i as u64);
                    st.push(0);
                    ok += 1;
                }
                Err(e) => {
                    out.push(FI_ADDR_NOTAVAIL);
                    st.push(e);
                }
            }
        }
        if let Err(e) = if mode.more {
            Ok(())
        } else {
            self.flush(returned)
        } {
            for (v, s) in out.iter_mut().zip(st.iter_mut()) {
                if *v != FI_ADDR_NOTAVAIL && self.slots[*v as usize].is_none() {
                    *v = FI_ADDR_NOTAVAIL;
                    *s = e.to_status();
                }
            }
            return (Err(e), out, st);
        }
        (Ok(ok), out, st)
    }

    fn index_of(&self, fa: u64, addressing: Addressing) -> Option<usize> {
        if fa == FI_ADDR_NOTAVAIL {
            return None;
        }
        let i = usize::try_from(addressing.index(fa)).ok()?;
        self.slots.get(i)?.as_ref().map(|_| i)
    }

    /// The lost index `fa` names.
    fn lost_index(&self, fa: u64, addressing: Addressing) -> Option<usize> {
        if fa == FI_ADDR_NOTAVAIL {
            return None;
        }
        let i = usize::try_from(addressing.index(fa)).ok()?;
        self.lost.get(i)?.then_some(i)
    }

    fn remove(&mut self, fas: &[u64], addressing: Addressing) -> Result<(), FiErrno> {
        let mut idx = Vec::new();
        for &fa in fas {
            let i = self.index_of(fa, addressing);
            idx.push(
                i.or_else(|| self.lost_index(fa, addressing))
                    .ok_or(FiErrno::FI_EINVAL)?,
            );
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
        self.in_doubt = false;
        self.flush(self.pending.len())?;
        // Lost indices hold nothing on the NIC: only the others are invalidated there.
        if idx.iter().any(|&i| !self.lost[i]) {
            // Unanswered, the addresses stay, in doubt.
            self.command_fault(false)?;
        }
        for i in idx {
            self.slots[i] = None;
            self.lost[i] = false;
        }
        Ok(())
    }

    fn set_user_id(
        &mut self,
        fa: u64,
        user_id: u64,
        addressing: Addressing,
    ) -> Result<(), FiErrno> {
        if !self.open_user_id {
            return Err(FiErrno::FI_EINVAL);
        }
        let i = self.index_of(fa, addressing).ok_or(FiErrno::FI_EINVAL)?;
        self.in_doubt = false;
        self.flush(self.pending.len())?;
        // Unanswered, the old user id stays, in doubt.
        self.command_fault(true)?;
        if let Some((_, u)) = self.slots[i].as_mut() {
            *u = Some(user_id);
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

fn localhost() -> IpAddr {
    ("localhost", 0)
        .to_socket_addrs()
        .expect("localhost resolves")
        .next()
        .expect("localhost has an address")
        .ip()
}

/// The addresses insertsym(peer n's node, nodecnt, peer n's service, svccnt) names, computed
/// without the crate's range code; `None` when the range runs out.
pub(crate) fn sym_addrs(n: u32, nodecnt: usize, svccnt: usize) -> Option<Vec<[u8; ADDR_LEN]>> {
    let base = peer(n);
    // nodecnt × svccnt members: a count of 0 names none, whatever the other count.
    if nodecnt == 0 || svccnt == 0 {
        return Some(Vec::new());
    }
    let last_svc = svccnt.saturating_sub(1) as u32;
    if u32::from(base.pid_on_fep) + last_svc > 4095
        || base.initiator.checked_add(last_svc).is_none()
    {
        return None;
    }
    let last_node = nodecnt.saturating_sub(1) as u128;
    let fits = match base.fabric_addr {
        IpAddr::V4(a) => u128::from(u32::from(a)) + last_node <= u128::from(u32::MAX),
        IpAddr::V6(a) => u128::from(a).checked_add(last_node).is_some(),
    };
    if !fits {
        return None;
    }
    let mut out = Vec::new();
    for i in 0..nodecnt as u128 {
        let ip = match base.fabric_addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(
                u32::from(a).checked_add(u32::try_from(i).ok()?)?,
            )),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a).checked_add(i)?)),
        };
        for k in 0..svccnt as u32 {
            let pid = u32::from(base.pid_on_fep) + k;
            if pid > 4095 {
                return None;
            }
            let a = UetAddress {
                fabric_addr: ip,
                pid_on_fep: pid as u16,
                initiator: base.initiator.checked_add(k)?,
                ..base
            };
            out.push(a.to_bytes().ok()?);
        }
    }
    Some(out)
}

fn check<N: ModelNic>(av: &mut AddressVector<N>, sets: &[Option<AvSet>], m: &Model, step: usize) {
    let nic_entries = av.nic_mut().entries_on_nic(m.slots.len());
    assert_eq!(av.len(), m.len(), "step {step}: len");
    assert_eq!(av.lost_len(), m.lost_len(), "step {step}: lost");
    assert_eq!(av.pending_len(), m.pending.len(), "step {step}: pending");
    assert_eq!(
        av.entries_in_doubt() > 0,
        m.in_doubt,
        "step {step}: in doubt"
    );
    let str_av = av.attr().addr_format == AddrFormat::Str;
    let mut buf = [0u8; ADDR_STR_MAX];
    for (i, slot) in m.slots.iter().enumerate() {
        let mut len = buf.len();
        let got = av.lookup(i as u64, &mut buf, &mut len);
        match slot {
            Some((bytes, user_id)) => {
                assert!(got.is_ok(), "step {step}: index {i} should be in use");
                if str_av {
                    let s = address_string(bytes);
                    assert_eq!(len, s.len() + 1, "step {step}: index {i} string length");
                    assert_eq!(
                        &buf[..s.len()],
                        s.as_bytes(),
                        "step {step}: index {i} string"
                    );
                } else {
                    assert_eq!(len, ADDR_LEN);
                    assert_eq!(&buf[..ADDR_LEN], bytes, "step {step}: index {i} bytes");
                }
                assert_eq!(
                    av.user_id(i as u64).unwrap(),
                    *user_id,
                    "step {step}: index {i} user id"
                );
            }
            None => {
                assert_eq!(
                    got.map_err(|e| e.errno),
                    Err(FiErrno::FI_EINVAL),
                    "step {step}: index {i} should be free"
                );
                assert!(av.user_id(i as u64).is_err());
            }
        }
        let expect_entry = slot
            .as_ref()
            .map(|(b, u)| {
                let e = NicAvEntry::for_peer(&UetAddress::from_bytes(b).unwrap(), JOB);
                match u {
                    Some(u) => e.with_user_id(*u),
                    None => e,
                }
            })
            .unwrap_or(NicAvEntry::INVALID);
        // A member of a symmetric range carries the range's fields besides its own address;
        // the model knows addresses only.
        assert_eq!(
            av.mirror_entry(i as u32).map(NicAvEntry::without_range),
            Some(expect_entry),
            "step {step}: mirror entry {i}"
        );
        let on_nic = nic_entries[i];
        if m.in_doubt {
            // The NIC may differ from the mirror until the entries in doubt are rewritten.
        } else if m.pending.contains(&(i as u32)) {
            assert!(
                !on_nic.is_valid(),
                "step {step}: pending index {i} already on the NIC"
            );
        } else {
            assert_eq!(
                on_nic,
                av.mirror_entry(i as u32).unwrap_or(NicAvEntry::INVALID),
                "step {step}: NIC entry {i} against the mirror"
            );
            assert_eq!(
                NicAvEntry::without_range(on_nic),
                expect_entry,
                "step {step}: NIC entry {i}"
            );
        }
    }
    check_ranges(av, m, step);
    let iter: Vec<(u32, UetAddress)> = av.iter().collect();
    let model: Vec<(u32, UetAddress)> = m
        .slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|(b, _)| (i as u32, UetAddress::from_bytes(&b).unwrap())))
        .collect();
    assert_eq!(iter, model, "step {step}: iter");
    for (k, (set, mset)) in sets.iter().zip(&m.sets).enumerate() {
        match (set, mset) {
            (Some(s), Some(ms)) => {
                let got: Vec<u64> = s.members().collect();
                let want: Vec<u64> = ms.members.iter().map(|&i| u64::from(i)).collect();
                assert_eq!(got, want, "step {step}: set {k} members");
                assert_eq!(s.capacity(), ms.cap, "step {step}: set {k} capacity");
            }
            (None, None) => {}
            _ => panic!("step {step}: set {k} exists on one side only"),
        }
    }
}

/// The range records (symmetric inserts stored as one record): sorted, disjoint, none without
/// members; each one's live count is the number of in-use indices of its span that are its
/// members (whose mirror entry is a member of a range starting there); and every range member
/// lies in a record. The entries themselves are compared index by index in [`check`].
fn check_ranges<N: ModelNic>(av: &AddressVector<N>, m: &Model, step: usize) {
    let member_of = |i: u32| {
        av.mirror_entry(i)
            .filter(NicAvEntry::is_range)
            .map(|e| e.range_first.get())
    };
    let records: Vec<(u32, u32, u32)> = av.ranges().collect();
    let mut end = 0u64;
    for &(first, count, live) in &records {
        assert!(
            u64::from(first) >= end && count > 0 && live > 0,
            "step {step}: range records {records:?} out of order, overlapping or dead"
        );
        end = u64::from(first) + u64::from(count);
        let members = (first..first + count)
            .filter(|&i| {
                m.slots.get(i as usize).is_some_and(Option::is_some) && member_of(i) == Some(first)
            })
            .count();
        assert_eq!(
            members, live as usize,
            "step {step}: range record at {first} (of {count}) counts {live} live members"
        );
    }
    for i in 0..m.slots.len() as u32 {
        if let Some(first) = member_of(i) {
            assert!(
                records
                    .iter()
                    .any(|&(f, c, _)| f == first && i >= f && i - f < c),
                "step {step}: index {i} is a member of a range at {first} no record holds"
            );
        }
    }
}

struct Run<N: ModelNic> {
    av: AddressVector<N>,
    sets: Vec<Option<AvSet>>,
    m: Model,
    addressing: Addressing,
    localhost: IpAddr,
    /// Some armed faults leave their command unanswered ([`Run::arm`]).
    unanswered: bool,
}

/// How an `fi_addr_t` names an index, by the man pages: fi_av(3) `fi_rx_addr` puts the receive
/// context in the top `rx_bits` bits; fi_av(3) 2.x `fi_group_addr` puts the peer group in bits
/// 32 and up (below the receive context), and the index is then bits 0–31.
#[derive(Clone, Copy, Debug)]
struct Addressing {
    rx_bits: u8,
    max_group_id: u32,
}

impl Addressing {
    /// The index an `fi_addr_t` names (receive context and group ignored).
    fn index(self, fa: u64) -> u64 {
        if self.max_group_id > 0 {
            fa & 0xFFFF_FFFF
        } else if self.rx_bits == 0 {
            fa
        } else {
            fa & (u64::MAX >> self.rx_bits)
        }
    }

    /// `index` with receive context `rx` and a peer group drawn from `salt`, each within what
    /// the AV decodes.
    fn fi_addr(self, index: u64, rx: u32, salt: u64) -> u64 {
        let mut fa = index;
        if self.max_group_id > 0 {
            let group = (salt.wrapping_mul(0x9e37_79b9) >> 7) % (u64::from(self.max_group_id) + 1);
            fa = uet_av::fi_group_addr(fa, group as u32);
        }
        if self.rx_bits == 0 {
            return fa;
        }
        fi_rx_addr(fa, rx.min((1u32 << self.rx_bits) - 1), self.rx_bits)
    }
}

impl<N: ModelNic> Run<N> {
    fn insert_call(
        &mut self,
        step: usize,
        what: &str,
        addrs: Vec<Result<[u8; ADDR_LEN], i32>>,
        mode: &InsertMode,
        call: impl FnOnce(
            &mut AddressVector<N>,
            Option<&mut [u64]>,
            u64,
            Option<&mut [i32]>,
        ) -> Result<usize, uet_av::FiError>,
    ) {
        let count = addrs.len();
        let mut flags = if mode.more { FI_MORE } else { 0 };
        if mode.sync_err {
            flags |= FI_SYNC_ERR;
        }
        if mode.user_ids.is_some() {
            flags |= FI_AV_USER_ID;
        }
        let mut out: Vec<u64> = (0..count as u64)
            .map(|k| mode.user_ids.map_or(0xabab, |b| b + k))
            .collect();
        let before = out.clone();
        let mut st = vec![0x5a5a_i32; count];
        let got = call(
            &mut self.av,
            (!mode.null_out).then_some(out.as_mut_slice()),
            flags,
            mode.sync_err.then_some(st.as_mut_slice()),
        )
        .map_err(|e| e.errno);
        if let Some(e) = self.m.refused(mode) {
            // Refused, yet a call without FI_MORE ends the batch before it.
            let want = if mode.more { e } else { self.m.end_refused(e) };
            assert_eq!(got, Err(want), "step {step}: {what} refused");
            assert_eq!(
                out, before,
                "step {step}: {what} refused, fi_addr untouched"
            );
            return;
        }
        let (want, want_out, want_st) = self.m.insert(&addrs, mode);
        assert_eq!(got, want, "step {step}: {what} result");
        if !mode.null_out {
            assert_eq!(out, want_out, "step {step}: {what} fi_addr out");
        }
        if mode.sync_err {
            assert_eq!(st, want_st, "step {step}: {what} status");
        }
    }

    /// Make the next command of kind `op` fail: refused, as ever (at every other such step
    /// for want of room, `FI_EAGAIN`, instead of refused outright). In a run with unanswered
    /// commands, at two steps in three it goes unanswered instead (never applied, or applied
    /// late, alternately) — then only when no other fault is armed and nothing is in doubt,
    /// so that the repair after it meets no fault; and while entries are in doubt no fault is
    /// armed at all.
    fn arm(&mut self, step: usize, op: NicOp) {
        let write = op == NicOp::Write;
        if self.unanswered {
            let m = &self.m;
            if m.in_doubt || m.doubt_write || m.doubt_invalidate {
                return;
            }
            let flavor = step % 3;
            if flavor > 0 {
                if m.fail_write || m.fail_invalidate {
                    return;
                }
                let applied = flavor == 2;
                self.av.nic_mut().arm_fault(op, Fault::InDoubt { applied });
                if write {
                    self.m.doubt_write = true;
                } else {
                    self.m.doubt_invalidate = true;
                }
                return;
            }
        }
        let (fault, errno) = if step.is_multiple_of(2) {
            (Fault::Busy, FiErrno::FI_EAGAIN)
        } else {
            (Fault::Refused, FiErrno::FI_EIO)
        };
        self.av.nic_mut().arm_fault(op, fault);
        if write {
            self.m.fail_write = true;
            self.m.fail_write_errno = errno;
        } else {
            self.m.fail_invalidate = true;
            self.m.fail_invalidate_errno = errno;
        }
    }

    fn step(&mut self, step: usize, op: &Op) {
        let addressing = self.addressing;
        let fa = |index: u64, rx: u32| addressing.fi_addr(index, rx, index ^ u64::from(rx) << 20);
        let str_av = self.av.attr().addr_format == AddrFormat::Str;
        match op {
            Op::Insert { addrs, mode } => {
                let items: Vec<Result<[u8; ADDR_LEN], i32>> = addrs
                    .iter()
                    .map(|&(n, bad)| if bad { Err(22) } else { Ok(peer_bytes(n)) })
                    .collect();
                if str_av {
                    let strings: Vec<String> = addrs
                        .iter()
                        .map(|&(n, bad)| {
                            let s = peer(n).to_string();
                            if bad {
                                s.replace("?ri=", "?ri=x")
                            } else {
                                s
                            }
                        })
                        .collect();
                    let refs: Vec<&str> = strings.iter().map(String::as_str).collect();
                    self.insert_call(step, "insert_str", items, mode, |av, out, flags, st| {
                        av.insert_str(&refs, out, flags, st)
                    });
                } else {
                    let bytes: Vec<[u8; ADDR_LEN]> = addrs
                        .iter()
                        .map(|&(n, bad)| address_bytes(n, bad))
                        .collect();
                    let buf = pack(&bytes);
                    let count = bytes.len();
                    self.insert_call(step, "insert", items, mode, |av, out, flags, st| {
                        av.insert_with_status(&buf, count, out, flags, st)
                    });
                }
            }
            Op::InsertSvc { n, form, mode } => {
                let a = peer(*n);
                let service = Service::of(&a).to_string();
                let (node, svc, want): (String, Option<String>, Result<UetAddress, ()>) = match form
                {
                    0 => (a.fabric_addr.to_string(), Some(service), Ok(a)),
                    1 => (a.to_string(), None, Ok(a)),
                    2 => (
                        "localhost".into(),
                        Some(service),
                        Ok(UetAddress {
                            fabric_addr: self.localhost,
                            ..a
                        }),
                    ),
                    _ => (
                        a.fabric_addr.to_string(),
                        Some(format!("{}?ri=0+0", a.pid_on_fep)),
                        Err(()),
                    ),
                };
                match want {
                    Ok(want) => {
                        let items = vec![Ok(want.to_bytes().unwrap())];
                        self.insert_call(step, "insertsvc", items, mode, |av, out, flags, st| {
                            av.insertsvc(
                                &node,
                                svc.as_deref(),
                                out.and_then(|o| o.first_mut()),
                                flags,
                                st.and_then(|s| s.first_mut()),
                            )
                        });
                    }
                    Err(()) => {
                        let got = self.av.insertsvc(&node, svc.as_deref(), None, 0, None);
                        let want = self.m.end_refused(FiErrno::FI_EINVAL);
                        assert_eq!(
                            got.map_err(|e| e.errno),
                            Err(want),
                            "step {step}: bad insertsvc"
                        );
                    }
                }
            }
            Op::InsertSym {
                n,
                nodecnt,
                svccnt,
                mode,
            } => {
                let a = peer(*n);
                let node = a.fabric_addr.to_string();
                let service = Service::of(&a).to_string();
                let cap = self.m.slots.len();
                match sym_addrs(*n, *nodecnt, *svccnt).filter(|a| a.len() <= cap) {
                    Some(addrs) => {
                        let items = addrs.into_iter().map(Ok).collect();
                        self.insert_call(step, "insertsym", items, mode, |av, out, flags, st| {
                            av.insertsym(&node, *nodecnt, &service, *svccnt, out, flags, st)
                        });
                    }
                    None => {
                        let got = self
                            .av
                            .insertsym(&node, *nodecnt, &service, *svccnt, None, 0, None);
                        let want = self.m.end_refused(FiErrno::FI_EINVAL);
                        assert_eq!(
                            got.map_err(|e| e.errno),
                            Err(want),
                            "step {step}: insertsym out of range or larger than the AV"
                        );
                    }
                }
            }
            Op::Remove { targets } => {
                let fas: Vec<u64> = targets.iter().map(|&(i, rx)| fa(i, rx)).collect();
                let want = self.m.remove(&fas, addressing);
                let got = self.av.remove(&fas, 0).map_err(|e| e.errno);
                assert_eq!(got, want, "step {step}: remove {fas:x?}");
            }
            Op::Drain { from, len } => {
                let fas: Vec<u64> = (*from..from.saturating_add(*len))
                    .filter(|&i| {
                        let i = i as usize;
                        self.m.slots.get(i).is_some_and(Option::is_some)
                            || self.m.lost.get(i).is_some_and(|&l| l)
                    })
                    .map(|i| fa(i, (i % 8) as u32))
                    .collect();
                let want = self.m.remove(&fas, addressing);
                let got = self.av.remove(&fas, 0).map_err(|e| e.errno);
                assert_eq!(got, want, "step {step}: drain {fas:x?}");
            }
            Op::RemoveNotAvail { index } => {
                let fas = [*index, FI_ADDR_NOTAVAIL];
                let want = self.m.remove(&fas, addressing);
                assert_eq!(want, Err(FiErrno::FI_EINVAL));
                assert_eq!(self.av.remove(&fas, 0).map_err(|e| e.errno), want);
            }
            Op::Lookup { index, rx, len } => {
                let f = fa(*index, *rx);
                let mut buf = vec![0u8; *len];
                let mut l = *len;
                let got = self.av.lookup(f, &mut buf, &mut l).map_err(|e| e.errno);
                match self.m.index_of(f, addressing) {
                    Some(i) => {
                        assert_eq!(got, Ok(()), "step {step}: lookup {f:#x}");
                        let (bytes, _) = self.m.slots[i].unwrap();
                        if str_av {
                            let s = address_string(&bytes);
                            assert_eq!(l, s.len() + 1);
                            let n = (*len).min(s.len() + 1);
                            if n > 0 {
                                assert_eq!(&buf[..n - 1], &s.as_bytes()[..n - 1]);
                                assert_eq!(buf[n - 1], 0);
                            }
                        } else {
                            assert_eq!(l, ADDR_LEN);
                            let n = (*len).min(ADDR_LEN);
                            assert_eq!(&buf[..n], &bytes[..n]);
                            // fi_av_straddr of it, into a buffer of the same length: the
                            // string truncated as a C string, its full size in `len`, and a
                            // form insertsvc takes back (fi_av(3)) naming the same address.
                            let mut sbuf = vec![0xAAu8; *len];
                            let mut sl = *len;
                            let text = self.av.straddr(&bytes, &mut sbuf, &mut sl);
                            assert_eq!(sl, text.len() + 1, "step {step}: straddr size");
                            let n = (*len).min(text.len() + 1);
                            if n > 0 {
                                assert_eq!(&sbuf[..n - 1], &text.as_bytes()[..n - 1]);
                                assert_eq!(sbuf[n - 1], 0, "step {step}: NUL-terminated");
                            }
                            assert!(sbuf[n..].iter().all(|&b| b == 0xAA), "nothing past it");
                            let back = uet_av::addr_str::parse_addr_str_with(
                                &text,
                                uet_av::addr_str::system_resolver,
                            )
                            .unwrap_or_else(|e| panic!("step {step}: {text}: {e}"));
                            assert_eq!(back.to_bytes().unwrap(), bytes, "step {step}: {text}");
                        }
                    }
                    None => {
                        assert_eq!(got, Err(FiErrno::FI_EINVAL), "step {step}: lookup {f:#x}");
                        assert_eq!(l, *len);
                    }
                }
            }
            Op::SetUserId { index, user_id } => {
                // Named with a receive context and group drawn from the id, as any fi_addr_t.
                let f = fa(*index, (*user_id % 8) as u32);
                let want = self.m.set_user_id(f, *user_id, addressing);
                let got = self.av.set_user_id(f, *user_id, 0).map_err(|e| e.errno);
                assert_eq!(got, want, "step {step}: set_user_id {f:#x}");
            }
            Op::FailWrite => self.arm(step, NicOp::Write),
            Op::FailInvalidate => self.arm(step, NicOp::Invalidate),
            Op::Flush => {
                // What is pending is earlier FI_MORE calls' (every other insert flushes).
                let want = self.m.flush(self.m.pending.len());
                assert_eq!(
                    self.av.flush().map_err(|e| e.errno),
                    want,
                    "step {step}: flush"
                );
            }
            Op::SetNew { slot, range, count } => self.set_new(step, *slot, *range, *count),
            Op::SetInsert { set, index } => {
                let (Some(s), Some(ms)) = (self.sets[*set].as_mut(), self.m.sets[*set].as_mut())
                else {
                    return;
                };
                let i = *index as u32;
                let want = if !self.m.slots.get(i as usize).is_some_and(|x| x.is_some())
                    || ms.members.contains(&i)
                {
                    Err(FiErrno::FI_EINVAL)
                } else if ms.members.len() >= ms.cap {
                    Err(FiErrno::FI_ENOSPC)
                } else {
                    ms.members.push(i);
                    Ok(())
                };
                assert_eq!(
                    s.insert(&self.av, *index).map_err(|e| e.errno),
                    want,
                    "step {step}: set insert"
                );
            }
            Op::SetRemove { set, index } => {
                let (Some(s), Some(ms)) = (self.sets[*set].as_mut(), self.m.sets[*set].as_mut())
                else {
                    return;
                };
                let want = match ms.members.iter().position(|&i| u64::from(i) == *index) {
                    Some(p) => {
                        ms.members.remove(p);
                        Ok(())
                    }
                    None => Err(FiErrno::FI_EINVAL),
                };
                assert_eq!(
                    s.remove(*index).map_err(|e| e.errno),
                    want,
                    "step {step}: set remove"
                );
            }
            Op::SetUnion { dst, src }
            | Op::SetIntersect { dst, src }
            | Op::SetDiff { dst, src } => {
                if dst == src {
                    return;
                }
                let (Some(src_members), true, true) = (
                    self.m.sets[*src].as_ref().map(|s| s.members.clone()),
                    self.sets[*dst].is_some(),
                    self.sets[*src].is_some(),
                ) else {
                    return;
                };
                let Some(ms) = self.m.sets[*dst].as_mut() else {
                    return;
                };
                let want = match op {
                    Op::SetUnion { .. } => {
                        let new: Vec<u32> = src_members
                            .iter()
                            .copied()
                            .filter(|i| !ms.members.contains(i))
                            .collect();
                        if ms.members.len() + new.len() > ms.cap {
                            Err(FiErrno::FI_ENOSPC)
                        } else {
                            ms.members.extend(new);
                            Ok(())
                        }
                    }
                    Op::SetIntersect { .. } => {
                        ms.members.retain(|i| src_members.contains(i));
                        Ok(())
                    }
                    _ => {
                        ms.members.retain(|i| !src_members.contains(i));
                        Ok(())
                    }
                };
                let mut d = self.sets[*dst].take().expect("checked");
                let s = self.sets[*src].as_ref().expect("checked");
                let got = match op {
                    Op::SetUnion { .. } => d.union(s),
                    Op::SetIntersect { .. } => d.intersect(s),
                    _ => d.diff(s),
                };
                self.sets[*dst] = Some(d);
                assert_eq!(got.map_err(|e| e.errno), want, "step {step}: {op:?}");
            }
            Op::SetAddr { set } => {
                let (Some(s), Some(ms)) = (self.sets[*set].as_ref(), self.m.sets[*set].as_mut())
                else {
                    return;
                };
                let stale = ms
                    .members
                    .iter()
                    .any(|&i| self.m.slots[i as usize].is_none());
                let got = s.addr(&self.av);
                if ms.members.is_empty() || stale {
                    assert_eq!(
                        got.map_err(|e| e.errno),
                        Err(FiErrno::FI_EINVAL),
                        "step {step}: set addr"
                    );
                } else {
                    let a = got.unwrap();
                    assert!(is_av_set_addr(a));
                    assert_eq!(
                        *ms.addr.get_or_insert(a),
                        a,
                        "step {step}: set addr is stable"
                    );
                }
            }
            Op::SetPrune { set } => {
                let (Some(s), Some(ms)) = (self.sets[*set].as_mut(), self.m.sets[*set].as_mut())
                else {
                    return;
                };
                let before = ms.members.len();
                let slots = &self.m.slots;
                ms.members.retain(|&i| slots[i as usize].is_some());
                assert_eq!(
                    s.prune(&self.av).unwrap(),
                    before - ms.members.len(),
                    "step {step}: prune"
                );
            }
        }
    }

    fn set_new(&mut self, step: usize, slot: usize, range: Option<(u64, u64, u64)>, count: usize) {
        let av_cap = self.m.slots.len();
        let cap = if count == 0 {
            av_cap
        } else {
            count.min(av_cap)
        };
        let attr = match range {
            Some((start, end, stride)) => AvSetAttr {
                count,
                start_addr: start,
                end_addr: end,
                stride,
                ..AvSetAttr::default()
            },
            None => AvSetAttr {
                count,
                flags: FI_UNIVERSE,
                ..AvSetAttr::default()
            },
        };
        let want: Result<Vec<u32>, FiErrno> = match range {
            Some((start, end, stride)) => {
                if start > end
                    || end >= av_cap as u64
                    || stride == 0
                    || (count != 0 && (end - start) / stride + 1 > count as u64)
                {
                    Err(FiErrno::FI_EINVAL)
                } else {
                    Ok((start..=end)
                        .step_by(stride as usize)
                        .map(|i| i as u32)
                        .filter(|&i| self.m.valid(i))
                        .collect())
                }
            }
            None => {
                let all: Vec<u32> = (0..av_cap as u32).filter(|&i| self.m.valid(i)).collect();
                if all.len() > cap {
                    Err(FiErrno::FI_EINVAL)
                } else {
                    Ok(all)
                }
            }
        };
        let got = self.av.av_set(&attr);
        match want {
            Ok(members) => {
                self.sets[slot] =
                    Some(got.unwrap_or_else(|e| panic!("step {step}: fi_av_set {attr:?}: {e}")));
                self.m.sets[slot] = Some(MSet {
                    members,
                    cap,
                    addr: None,
                });
            }
            Err(e) => assert_eq!(
                got.map_err(|e| e.errno).map(|_| ()),
                Err(e),
                "step {step}: fi_av_set {attr:?}"
            ),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) cap: usize,
    pub(crate) rx_bits: u8,
    /// Peer groups (fi_av(3) 2.x) up to this id; 0: none.
    pub(crate) max_group_id: u32,
    pub(crate) open_user_id: bool,
    pub(crate) str_av: bool,
    /// Some armed faults leave their command unanswered ([`Run::arm`]).
    pub(crate) unanswered: bool,
}

impl Config {
    /// An AV of `cap` entries with `rx_bits` receive-context bits and peer groups up to
    /// `max_group_id` (0: none), of binary addresses, without user ids at open, whose armed
    /// faults are all answered: what the runs that make symmetric ranges use.
    #[allow(dead_code)] // Not every test program that includes the engine makes such runs.
    pub(crate) fn binary(cap: u64, rx_bits: u8, max_group_id: u32) -> Config {
        Config {
            cap: cap as usize,
            rx_bits,
            max_group_id,
            open_user_id: false,
            str_av: false,
            unanswered: false,
        }
    }
}

impl Op {
    /// Whether the op is an insert with per-insert user ids.
    fn has_per_insert_user_ids(&self) -> bool {
        match self {
            Op::Insert { mode, .. } | Op::InsertSvc { mode, .. } | Op::InsertSym { mode, .. } => {
                mode.user_ids.is_some()
            }
            _ => false,
        }
    }
}

/// Runs of the ops drawn with [`random_op`] whose inserts never carry a per-insert user id
/// on an AV opened without one, over binary addresses, make symmetric ranges ([`run`]
/// asserts that some exist at some step): an AV that keeps user ids stores every symmetric
/// member singly, so the mixed runs reach ranges only before their first user id.
fn makes_ranges(cfg: &Config, per_insert_ids: bool) -> bool {
    !per_insert_ids && !cfg.open_user_id && !cfg.str_av
}

/// [`run_on`] over an in-memory NIC table.
pub(crate) fn run(cfg: Config, ops: &[Op]) -> [usize; 3] {
    run_on(cfg, ops, open_with)
}

/// Run `ops` on the AV `open` opens over its NIC table; returns how many steps left entries in
/// doubt that were not before, by the kind of call: [inserts and flushes, removes,
/// set_user_id].
pub(crate) fn run_on<N: ModelNic>(
    cfg: Config,
    ops: &[Op],
    open: impl FnOnce(AvAttr) -> AddressVector<N>,
) -> [usize; 3] {
    let per_insert_ids = ops.iter().any(Op::has_per_insert_user_ids);
    let mut ranges_seen = 0;
    let mut longest_range = 0;
    let av = open(AvAttr {
        count: cfg.cap,
        rx_ctx_bits: cfg.rx_bits,
        max_group_id: cfg.max_group_id,
        job_id: JOB,
        flags: if cfg.open_user_id { FI_AV_USER_ID } else { 0 },
        addr_format: if cfg.str_av {
            AddrFormat::Str
        } else {
            AddrFormat::Uet
        },
        ..AvAttr::default()
    });
    let mut r = Run {
        av,
        sets: (0..MAX_SETS).map(|_| None).collect(),
        m: Model::new(cfg.cap, cfg.open_user_id),
        addressing: Addressing {
            rx_bits: cfg.rx_bits,
            max_group_id: cfg.max_group_id,
        },
        localhost: localhost(),
        unanswered: cfg.unanswered,
    };
    let mut doubts = [0; 3];
    for (step, op) in ops.iter().enumerate() {
        let before = r.m.in_doubt;
        r.step(step, op);
        check(&mut r.av, &r.sets, &r.m, step);
        ranges_seen = ranges_seen.max(r.av.ranges().count());
        longest_range =
            r.av.ranges()
                .map(|(_, c, _)| c)
                .fold(longest_range, u32::max);
        if r.m.in_doubt && !before {
            let kind = match op {
                Op::Remove { .. } | Op::RemoveNotAvail { .. } | Op::Drain { .. } => 1,
                Op::SetUserId { .. } => 2,
                _ => 0,
            };
            doubts[kind] += 1;
        }
    }
    r.av.nic_mut().disarm_faults();
    r.m.fail_write = false;
    r.m.fail_invalidate = false;
    r.m.doubt_write = false;
    r.m.doubt_invalidate = false;
    // verify_nic rewrites the entries in doubt first.
    r.m.in_doubt = false;
    assert!(r.av.verify_nic().unwrap().is_empty());
    let _ = r.m.flush(r.m.pending.len());
    check(&mut r.av, &r.sets, &r.m, ops.len());
    if makes_ranges(&cfg, per_insert_ids) {
        assert!(ranges_seen > 0, "no symmetric insert was stored as a range");
        // Drained stretches leave room for long ranges: members of several nodes and
        // services each, at positions far from the range's first index.
        if ops.iter().any(|op| matches!(op, Op::Drain { .. })) {
            assert!(
                longest_range >= 8,
                "no range longer than {longest_range} members"
            );
        }
    }
    doubts
}

// ---------------------------------------------------------------------------------------------
// random operations

/// Draws from any source of random numbers below a bound.
pub(crate) trait Draw {
    fn below(&mut self, n: u64) -> u64;
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

impl Draw for XorShift {
    fn below(&mut self, n: u64) -> u64 {
        XorShift::below(self, n)
    }
}

/// How an insert is made; with `per_insert_ids` false, never with per-insert user ids (the
/// same draws are made either way, so a seed gives the same sequence otherwise).
fn mode(r: &mut impl Draw, per_insert_ids: bool) -> InsertMode {
    InsertMode {
        more: r.chance(3),
        null_out: r.chance(6),
        sync_err: r.chance(3),
        user_ids: r
            .chance(5)
            .then(|| r.below(1 << 40))
            .filter(|_| per_insert_ids),
    }
}

pub(crate) fn random_op(r: &mut impl Draw, cap: u64, per_insert_ids: bool) -> Op {
    let set = |r: &mut dyn FnMut(u64) -> u64| r(MAX_SETS as u64) as usize;
    match r.below(40) {
        0..=7 => Op::Insert {
            addrs: (0..r.below(5))
                .map(|_| (r.below(3000) as u32, r.chance(8)))
                .collect(),
            mode: mode(r, per_insert_ids),
        },
        8..=9 => Op::InsertSvc {
            n: r.below(3000) as u32,
            form: r.below(4) as u8,
            mode: mode(r, per_insert_ids),
        },
        10..=11 => Op::InsertSym {
            n: 4090
                + r.below(10) as u32
                + if r.chance(2) {
                    0
                } else {
                    1000 * r.below(3) as u32
                },
            nodecnt: r.below(3) as usize,
            svccnt: r.below(4) as usize,
            mode: mode(r, per_insert_ids),
        },
        12..=16 => Op::Remove {
            targets: (0..1 + r.below(2))
                .map(|_| (r.below(cap + 3), r.below(8) as u32))
                .collect(),
        },
        17 => Op::RemoveNotAvail {
            index: r.below(cap),
        },
        18..=20 => Op::Lookup {
            index: r.below(cap + 3),
            rx: r.below(8) as u32,
            len: r.below(120) as usize,
        },
        21..=22 => Op::SetUserId {
            index: r.below(cap + 2),
            user_id: r.below(u64::MAX),
        },
        23 => Op::FailWrite,
        24 => Op::FailInvalidate,
        25 => Op::Flush,
        26..=27 => {
            let slot = r.below(MAX_SETS as u64) as usize;
            let count = if r.chance(2) {
                0
            } else {
                r.below(cap + 2) as usize
            };
            let range = if r.chance(3) {
                None
            } else {
                let start = r.below(cap);
                Some((start, start + r.below(cap - start + 1), r.below(4)))
            };
            Op::SetNew { slot, range, count }
        }
        28..=30 => Op::SetInsert {
            set: r.below(MAX_SETS as u64) as usize,
            index: r.below(cap + 1),
        },
        31..=32 => Op::SetRemove {
            set: r.below(MAX_SETS as u64) as usize,
            index: r.below(cap + 1),
        },
        33 => Op::SetUnion {
            dst: set(&mut |n| r.below(n)),
            src: set(&mut |n| r.below(n)),
        },
        34 => Op::SetIntersect {
            dst: set(&mut |n| r.below(n)),
            src: set(&mut |n| r.below(n)),
        },
        35 => Op::SetDiff {
            dst: set(&mut |n| r.below(n)),
            src: set(&mut |n| r.below(n)),
        },
        36..=37 => Op::SetAddr {
            set: r.below(MAX_SETS as u64) as usize,
        },
        _ => Op::SetPrune {
            set: r.below(MAX_SETS as u64) as usize,
        },
    }
}

/// [`random_op`], and now and then a [`Op::Drain`] of a stretch of the AV or a symmetric
/// insert of up to 6 nodes × 4 services from a peer whose range fits (PIDonFEP 1000 and up,
/// IPv4 and IPv6): a stretch [`random_op`] keeps nearly full, which leaves no run of free
/// indices longer than a few, so its ranges hold 3 members at most, of 2 nodes at most.
pub(crate) fn random_op_long_ranges(r: &mut impl Draw, cap: u64, per_insert_ids: bool) -> Op {
    match r.below(30) {
        0 => {
            let from = r.below(cap);
            Op::Drain {
                from,
                len: 1 + r.below(cap - from),
            }
        }
        1..=2 => Op::InsertSym {
            n: 5000 + r.below(2000) as u32,
            nodecnt: 1 + r.below(6) as usize,
            svccnt: 1 + r.below(4) as usize,
            mode: mode(r, per_insert_ids),
        },
        _ => random_op(r, cap, per_insert_ids),
    }
}

/// `steps` ops of [`random_op_long_ranges`] from `seed`.
pub(crate) fn seeded_ops_long_ranges(
    seed: u64,
    cap: u64,
    steps: usize,
    per_insert_ids: bool,
) -> Vec<Op> {
    let mut r = XorShift(seed);
    (0..steps)
        .map(|_| random_op_long_ranges(&mut r, cap, per_insert_ids))
        .collect()
}

pub(crate) fn seeded_ops(seed: u64, cap: u64, steps: usize, per_insert_ids: bool) -> Vec<Op> {
    let mut r = XorShift(seed);
    (0..steps)
        .map(|_| random_op(&mut r, cap, per_insert_ids))
        .collect()
}
