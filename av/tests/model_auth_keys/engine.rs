//! The engine of `model_auth_keys.rs`: a plain model of auth keys (fi_av(3), and the rules of
//! `uet_av::av::auth_keys` where the man page leaves them to the provider), random steps, and
//! the check after each that model, mirror, NIC AV table and NIC auth-key table agree. It runs
//! over any [`AuthModelNic`]: the in-memory table here, and a NIC of the simulator in the
//! workspace's end-to-end tests (`tests/tests/av_model_full_sim.rs`, which includes this file).
#![allow(dead_code)]
use crate::common::{peer_bytes, XorShift, LIMITS};
use uet_av::{
    AddressVector, AvAttr, AvLimits, FiErrno, MemoryNicTable, NicAvTable, NicOp, ADDR_LEN,
    AUTH_KEY_ADDR_BASE, FI_ADDR_NOTAVAIL, FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID,
};
use uet_fwif::auth_key::AuthKeyEntry;
use uet_fwif::{NicAvEntry, UetAddress};

/// A NIC table with an auth-key table the model runs over, whose next auth-key command can be
/// refused.
pub(crate) trait AuthModelNic: NicAvTable {
    /// The next auth-key command (AUTH_KEY_ADD, _REMOVE, _SOURCE or _READ) is refused and
    /// changes nothing.
    fn refuse_next_auth_key_command(&mut self);
    /// Cancel a refusal no command used.
    fn disarm(&mut self);
}

impl AuthModelNic for MemoryNicTable {
    fn refuse_next_auth_key_command(&mut self) {
        self.fail_after(NicOp::AuthKey, 0);
    }

    fn disarm(&mut self) {
        self.clear_faults();
    }
}

/// Auth-key slots of the NIC, and keys the AV may hold.
pub(crate) const SLOTS: u16 = 3;
/// The AV's own JobID.
const JOB: u32 = 0x51;

/// One key the model holds.
#[derive(Clone, Copy, Debug)]
struct Key {
    number: u16,
    job: u32,
    /// `fi_av_insert_auth_key` calls of it not yet removed.
    inserts: u32,
    /// Set with `fi_av_set_user_id(FI_AUTH_KEY)`: the source the NIC reports for it.
    user_id: Option<u64>,
}

impl Key {
    fn handle(&self) -> u64 {
        AUTH_KEY_ADDR_BASE | u64::from(self.number)
    }
}

/// The reference model: slots in index order (address, the number of the key it was inserted
/// against), lowest-free allocation; keys numbered from 0, lowest unused first.
struct Model {
    slots: Vec<Option<([u8; ADDR_LEN], Option<u16>)>>,
    keys: Vec<Key>,
    /// The user id of each index, on an AV opened with `FI_AV_USER_ID` (`FI_ADDR_NOTAVAIL`
    /// until set).
    user_ids: Option<Vec<u64>>,
    /// The NIC refuses its next auth-key command.
    fail_auth: bool,
}

impl Model {
    fn key(&self, handle: u64) -> Option<&Key> {
        self.keys.iter().find(|k| k.handle() == handle)
    }

    fn bound(&self, number: u16) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|(_, k)| *k == Some(number))
            .count()
    }

    /// An AUTH_KEY command: `false` when the NIC refuses it (the refusal is used up).
    fn nic_auth(&mut self) -> bool {
        !std::mem::take(&mut self.fail_auth)
    }

    fn insert_key(&mut self, job: u32) -> Result<u64, FiErrno> {
        if job > 0x00FF_FFFF {
            return Err(FiErrno::FI_EINVAL);
        }
        if let Some(k) = self.keys.iter_mut().find(|k| k.job == job) {
            // A key already held: its handle again, one more insert, no NIC command.
            k.inserts += 1;
            return Ok(k.handle());
        }
        if self.keys.len() >= usize::from(SLOTS) {
            return Err(FiErrno::FI_ENOSPC);
        }
        if !self.nic_auth() {
            return Err(FiErrno::FI_EIO);
        }
        let number = (0..)
            .find(|n| self.keys.iter().all(|k| k.number != *n))
            .unwrap_or(0);
        let k = Key {
            number,
            job,
            inserts: 1,
            user_id: None,
        };
        self.keys.push(k);
        Ok(k.handle())
    }

    /// An insert call of `addrs` (each valid or not); `keyed`: with `FI_AUTH_KEY`, each
    /// address's `fi_addr` slot holding the handle it is inserted against.
    fn insert(
        &mut self,
        addrs: &[(bool, [u8; ADDR_LEN])],
        keyed: Option<&[u64]>,
    ) -> Result<(usize, Vec<u64>), FiErrno> {
        let mut numbers = Vec::new();
        if let Some(handles) = keyed {
            // Every handle must be a held key's, or the call changes nothing.
            for &h in handles {
                numbers.push(Some(self.key(h).ok_or(FiErrno::FI_EINVAL)?.number));
            }
        } else {
            numbers.resize(addrs.len(), None);
        }
        let mut out = Vec::new();
        let mut ok = 0;
        for (&(valid, bytes), key) in addrs.iter().zip(numbers) {
            let free = self.slots.iter().position(Option::is_none);
            match (valid, free) {
                (true, Some(i)) => {
                    self.slots[i] = Some((bytes, key));
                    if let Some(u) = self.user_ids.as_mut() {
                        u[i] = FI_ADDR_NOTAVAIL;
                    }
                    out.push(i as u64);
                    ok += 1;
                }
                _ => out.push(FI_ADDR_NOTAVAIL),
            }
        }
        Ok((ok, out))
    }

    fn remove(&mut self, indices: &[u64]) -> Result<(), FiErrno> {
        let mut seen = Vec::new();
        for &i in indices {
            let in_use = usize::try_from(i)
                .ok()
                .and_then(|i| self.slots.get(i))
                .is_some_and(Option::is_some);
            if !in_use || seen.contains(&i) {
                return Err(FiErrno::FI_EINVAL);
            }
            seen.push(i);
        }
        for i in seen {
            self.slots[i as usize] = None;
        }
        Ok(())
    }

    fn remove_key(&mut self, handle: u64) -> Result<(), FiErrno> {
        let Some(at) = self.keys.iter().position(|k| k.handle() == handle) else {
            return Err(FiErrno::FI_EINVAL);
        };
        let k = self.keys[at];
        if k.inserts > 1 {
            self.keys[at].inserts -= 1;
            return Ok(());
        }
        // The last insert: no endpoint uses it here, so only addresses bound to it keep it.
        if self.bound(k.number) > 0 {
            return Err(FiErrno::FI_EBUSY);
        }
        if !self.nic_auth() {
            return Err(FiErrno::FI_EIO);
        }
        self.keys.remove(at);
        Ok(())
    }

    /// The source the NIC's slot of key `k` reports: its user id once set; before,
    /// `FI_ADDR_NOTAVAIL` on an AV with user ids, else the key's handle.
    fn source(&self, k: &Key) -> u64 {
        match (k.user_id, &self.user_ids) {
            (Some(u), _) => u,
            (None, Some(_)) => FI_ADDR_NOTAVAIL,
            (None, None) => k.handle(),
        }
    }

    /// `fi_av_set_user_id` of an address (`FI_EINVAL` on an AV without user ids).
    fn set_user_id(&mut self, index: u64, user_id: u64) -> Result<(), FiErrno> {
        let in_use = usize::try_from(index)
            .ok()
            .and_then(|i| self.slots.get(i))
            .is_some_and(Option::is_some);
        match self.user_ids.as_mut() {
            Some(u) if in_use => {
                u[index as usize] = user_id;
                Ok(())
            }
            _ => Err(FiErrno::FI_EINVAL),
        }
    }

    /// `fi_av_set_user_id(FI_AUTH_KEY)` of a key: AUTH_KEY_SOURCE tells the NIC.
    fn set_key_user_id(&mut self, handle: u64, user_id: u64) -> Result<(), FiErrno> {
        if self.user_ids.is_none() {
            return Err(FiErrno::FI_EINVAL);
        }
        let Some(at) = self.keys.iter().position(|k| k.handle() == handle) else {
            return Err(FiErrno::FI_EINVAL);
        };
        if !self.nic_auth() {
            return Err(FiErrno::FI_EIO);
        }
        self.keys[at].user_id = Some(user_id);
        Ok(())
    }

    /// `fi_av_lookup_auth_key` of `fi_addr`: the key's JobID.
    fn lookup_key(&self, fi_addr: u64) -> Result<u32, FiErrno> {
        if let Some(k) = self.key(fi_addr) {
            return Ok(k.job);
        }
        let slot = usize::try_from(fi_addr)
            .ok()
            .and_then(|i| self.slots.get(i))
            .and_then(|s| s.as_ref());
        match slot {
            None => Err(FiErrno::FI_EINVAL),
            Some((_, None)) => Err(FiErrno::FI_ENOKEY),
            Some((_, Some(n))) => self
                .keys
                .iter()
                .find(|k| k.number == *n)
                .map(|k| k.job)
                .ok_or(FiErrno::FI_EINVAL),
        }
    }
}

/// A handle to insert against or remove: a held key's mostly, else one no key has (a stale or
/// never-issued number), or an address.
fn any_handle(r: &mut XorShift, m: &Model) -> u64 {
    match r.below(8) {
        0 => AUTH_KEY_ADDR_BASE | r.below(6),
        1 => r.below(4),
        _ if m.keys.is_empty() => AUTH_KEY_ADDR_BASE | r.below(6),
        _ => m.keys[r.below(m.keys.len() as u64) as usize].handle(),
    }
}

/// The attributes of the model's AV: `cap` entries, in an FI_AV_AUTH_KEY domain.
pub(crate) fn attr(cap: usize) -> AvAttr {
    AvAttr {
        count: cap,
        job_id: JOB,
        auth_key_size: FI_AV_AUTH_KEY,
        ..AvAttr::default()
    }
}

/// [`attr`], the AV opened with `FI_AV_USER_ID`: user ids of addresses and of keys.
pub(crate) fn attr_with_user_ids(cap: usize) -> AvAttr {
    AvAttr {
        flags: FI_AV_USER_ID,
        ..attr(cap)
    }
}

/// The model's AV of `attr` over an in-memory table of [`SLOTS`] auth-key slots.
fn open(attr: AvAttr) -> AddressVector<MemoryNicTable> {
    let nic = MemoryNicTable::new(attr.count as u32).with_auth_key_slots(SLOTS);
    let limits = AvLimits {
        max_auth_keys: SLOTS,
        ..LIMITS
    };
    AddressVector::open(nic, attr, limits).expect("open")
}

/// The model, the mirror, the NIC AV table and the NIC auth-key table agree: every slot the AV
/// holds a key in holds it on the NIC, owned by the AV's table, and every other slot of the
/// NIC (which serves this AV alone) is free.
fn check<N: AuthModelNic>(av: &mut AddressVector<N>, m: &Model, step: usize) {
    assert_eq!(
        av.len(),
        m.slots.iter().flatten().count(),
        "step {step}: addresses"
    );
    for (i, slot) in m.slots.iter().enumerate() {
        let mut b = [0u8; ADDR_LEN];
        let mut len = b.len();
        let got = av.lookup(i as u64, &mut b, &mut len);
        match slot {
            None => assert!(got.is_err(), "step {step}: index {i} should be free"),
            Some((bytes, key)) => {
                assert!(got.is_ok(), "step {step}: index {i} should be in use");
                assert_eq!(&b, bytes, "step {step}: index {i}");
                assert_eq!(
                    av.user_id(i as u64).unwrap(),
                    m.user_ids.as_ref().map(|u| u[i]),
                    "step {step}: user id of index {i}"
                );
                let want = key.map(|n| AUTH_KEY_ADDR_BASE | u64::from(n));
                assert_eq!(
                    av.auth_key_of(i as u64).unwrap(),
                    want,
                    "step {step}: key of index {i}"
                );
            }
        }
    }
    let mut held: Vec<(u64, u32, u32)> = av
        .auth_keys()
        .map(|k| (k.handle, k.job_id, k.bound))
        .collect();
    held.sort_unstable();
    let mut want: Vec<(u64, u32, u32)> = m
        .keys
        .iter()
        .map(|k| (k.handle(), k.job, m.bound(k.number) as u32))
        .collect();
    want.sort_unstable();
    assert_eq!(
        held, want,
        "step {step}: keys (handle, JobID, addresses bound)"
    );
    assert!(
        av.verify_nic().unwrap().is_empty(),
        "step {step}: NIC AV table"
    );
    assert!(
        av.verify_auth_keys().unwrap().is_empty(),
        "step {step}: NIC auth-key table"
    );
    // Each index as the NIC holds it (AV_READ): the model's address, stamped with the AV's
    // JobID, and for an address inserted against a key the NIC slot of that key (which the
    // AUTH_KEY_READ below shows holding the key's JobID), so that the NIC sends to it with
    // the key's JobID, not the AV's.
    let mut on_nic = vec![NicAvEntry::INVALID; m.slots.len()];
    av.nic_mut()
        .read_entries(0, &mut on_nic)
        .unwrap_or_else(|e| panic!("step {step}: AV_READ: {e}"));
    for (i, (slot, e)) in m.slots.iter().zip(&on_nic).enumerate() {
        let want = slot.as_ref().map_or(NicAvEntry::INVALID, |(bytes, key)| {
            let single = NicAvEntry::for_peer(
                &UetAddress::from_bytes(bytes).expect("the model holds valid addresses"),
                JOB,
            );
            match key {
                Some(n) => {
                    let handle = AUTH_KEY_ADDR_BASE | u64::from(*n);
                    let k = av
                        .auth_keys()
                        .find(|k| k.handle == handle)
                        .unwrap_or_else(|| panic!("step {step}: key {handle:#x} not held"));
                    single.with_auth_key(k.slot)
                }
                None => single,
            }
        });
        let want = match &m.user_ids {
            Some(u) if want.is_valid() => want.with_user_id(u[i]),
            _ => want,
        };
        if want.is_valid() {
            // A member of a symmetric range carries the range's fields too.
            assert_eq!(e.without_range(), want, "step {step}: NIC entry {i}");
        } else {
            assert!(
                !e.is_valid(),
                "step {step}: NIC entry {i} should be invalid: {e:?}"
            );
        }
    }
    let mut slots = vec![AuthKeyEntry::default(); usize::from(SLOTS)];
    av.nic_mut()
        .read_auth_keys(0, &mut slots)
        .unwrap_or_else(|e| panic!("step {step}: AUTH_KEY_READ: {e}"));
    let owner = av.nic().table_handle();
    for (slot, on_nic) in slots.iter().enumerate() {
        let key = av.auth_keys().find(|k| usize::from(k.slot) == slot);
        match key {
            Some(k) => {
                assert!(
                    on_nic.is_valid()
                        && on_nic.job_id.get() == k.job_id
                        && owner.is_none_or(|h| on_nic.av.get() == h),
                    "step {step}: NIC auth-key slot {slot} should hold JobID {:#x}: {on_nic:?}",
                    k.job_id
                );
                let mk = m
                    .keys
                    .iter()
                    .find(|mk| mk.handle() == k.handle)
                    .unwrap_or_else(|| panic!("step {step}: key {:#x} not held", k.handle));
                assert_eq!(
                    on_nic.source.get(),
                    m.source(mk),
                    "step {step}: source of NIC auth-key slot {slot}"
                );
            }
            None => assert!(
                !on_nic.is_valid(),
                "step {step}: NIC auth-key slot {slot} is held, and the AV holds no key there: \
                 {on_nic:?}"
            ),
        }
    }
}

/// An `fi_av_insertsym` of up to 2 nodes × 2 services, with `FI_AUTH_KEY` (each member's
/// `fi_addr` slot holding the handle it is inserted against; members stored singly) or
/// without (members stored as a range). Members are computed here: the fabric address counts
/// up with the node, PIDonFEP and initiator with the service.
fn sym_step<N: AuthModelNic>(
    av: &mut AddressVector<N>,
    m: &mut Model,
    r: &mut XorShift,
    step: usize,
    seen: &mut Tally,
) {
    let n = 1 + r.below(900) as u32;
    let base = UetAddress {
        fabric_addr: std::net::Ipv4Addr::new(10, 99, (n >> 8) as u8, n as u8).into(),
        ..crate::common::peer(n)
    };
    let std::net::IpAddr::V4(ip) = base.fabric_addr else {
        unreachable!("an IPv4 base")
    };
    let (nodes, svcs) = (1 + r.below(2) as u32, 1 + r.below(2) as u32);
    let addrs: Vec<(bool, [u8; ADDR_LEN])> = (0..nodes)
        .flat_map(|node| (0..svcs).map(move |k| (node, k)))
        .map(|(node, k)| {
            let a = UetAddress {
                fabric_addr: std::net::Ipv4Addr::from(u32::from(ip) + node).into(),
                pid_on_fep: base.pid_on_fep + k as u16,
                initiator: base.initiator + k,
                ..base
            };
            (true, a.to_bytes().expect("a valid member"))
        })
        .collect();
    let keyed = r.chance(2);
    let mut fa: Vec<u64> = (0..addrs.len())
        .map(|_| if keyed { any_handle(r, m) } else { 0 })
        .collect();
    let handles = fa.clone();
    let got = av
        .insertsym(
            &base.fabric_addr.to_string(),
            nodes as usize,
            &uet_av::Service::of(&base).to_string(),
            svcs as usize,
            Some(&mut fa),
            if keyed { FI_AUTH_KEY } else { 0 },
            None,
        )
        .map_err(|e| e.errno);
    tally(seen, &got);
    match m.insert(&addrs, keyed.then_some(handles.as_slice())) {
        Ok((k, out)) => {
            assert_eq!(got, Ok(k), "step {step}: insertsym {handles:x?}");
            assert_eq!(fa, out, "step {step}: insertsym fi_addr out");
        }
        Err(e) => {
            assert_eq!(got, Err(e), "step {step}: insertsym {handles:x?}");
            assert_eq!(fa, handles, "step {step}: fi_addr untouched");
        }
    }
}

/// Outcomes seen, by errno (0: success): a run that never meets one would not test it.
pub(crate) type Tally = std::collections::BTreeMap<i32, usize>;

fn tally<T>(t: &mut Tally, r: &Result<T, FiErrno>) {
    let k = match r {
        Ok(_) => 0,
        Err(e) => e.to_status(),
    };
    *t.entry(k).or_default() += 1;
}

/// [`run_on`] over an in-memory table, on the AV `attr` ([`attr`] or
/// [`attr_with_user_ids`]) opens.
pub(crate) fn run(seed: u64, attr: AvAttr, steps: usize, seen: &mut Tally) {
    run_on(seed, steps, seen, open(attr));
}

/// Run `steps` random steps from `seed` on `av` (opened with [`attr`] or
/// [`attr_with_user_ids`], its NIC with [`SLOTS`] auth-key slots and no other AV).
pub(crate) fn run_on<N: AuthModelNic>(
    seed: u64,
    steps: usize,
    seen: &mut Tally,
    mut av: AddressVector<N>,
) {
    let cap = av.capacity();
    let mut m = Model {
        slots: vec![None; cap],
        keys: Vec::new(),
        user_ids: (av.attr().flags & FI_AV_USER_ID != 0).then(|| vec![0; cap]),
        fail_auth: false,
    };
    let mut r = XorShift(seed);
    for step in 0..steps {
        if r.chance(10) {
            // The NIC refuses its next auth-key command, made in this step if any.
            av.nic_mut().refuse_next_auth_key_command();
            m.fail_auth = true;
        }
        match r.below(12) {
            0..=2 => {
                // Mostly JobIDs seen before; sometimes one too wide.
                let job = if r.chance(12) {
                    0x0100_0000 + r.below(4) as u32
                } else {
                    0x40 + r.below(5) as u32
                };
                // The key as the application passes it: 4 bytes, little-endian (a JobID
                // too wide keeps its top byte). Now and then 3 bytes: the wrong size.
                let key = job.to_le_bytes();
                let (bytes, want) = if r.chance(16) {
                    (&key[..3], Err(FiErrno::FI_EINVAL))
                } else {
                    (&key[..], m.insert_key(job))
                };
                let got = av.insert_auth_key(bytes, 0).map_err(|e| e.errno);
                tally(seen, &got);
                assert_eq!(got, want, "step {step}: insert_auth_key {bytes:x?}");
            }
            3..=6 if r.chance(4) => sym_step(&mut av, &mut m, &mut r, step, seen),
            3..=6 => {
                let n = 1 + r.below(3) as usize;
                let addrs: Vec<(bool, [u8; ADDR_LEN])> = (0..n)
                    .map(|_| {
                        let valid = !r.chance(8);
                        let mut b = peer_bytes(r.below(1000) as u32 + 1);
                        if !valid {
                            b[0] = 0x70;
                        }
                        (valid, b)
                    })
                    .collect();
                let buf: Vec<u8> = addrs.iter().flat_map(|(_, b)| *b).collect();
                let keyed = r.chance(2);
                let mut fa: Vec<u64> = (0..n)
                    .map(|_| if keyed { any_handle(&mut r, &m) } else { 0 })
                    .collect();
                let handles = fa.clone();
                let flags = if keyed { FI_AUTH_KEY } else { 0 };
                let got = av
                    .insert(&buf, n, Some(&mut fa), flags)
                    .map_err(|e| e.errno);
                tally(seen, &got);
                let want = m.insert(&addrs, keyed.then_some(handles.as_slice()));
                match want {
                    Ok((k, out)) => {
                        assert_eq!(got, Ok(k), "step {step}: insert {handles:x?}");
                        assert_eq!(fa, out, "step {step}: fi_addr out");
                    }
                    Err(e) => {
                        assert_eq!(got, Err(e), "step {step}: insert {handles:x?}");
                        assert_eq!(fa, handles, "step {step}: fi_addr untouched");
                    }
                }
            }
            7..=8 => {
                let targets: Vec<u64> = (0..1 + r.below(2))
                    .map(|_| r.below(cap as u64 + 1))
                    .collect();
                let got = av.remove(&targets, 0).map_err(|e| e.errno);
                tally(seen, &got);
                assert_eq!(got, m.remove(&targets), "step {step}: remove {targets:?}");
            }
            11 if r.chance(2) => {
                let user_id = r.below(1 << 40);
                if r.chance(2) {
                    let index = r.below(cap as u64 + 1);
                    let got = av.set_user_id(index, user_id, 0).map_err(|e| e.errno);
                    tally(seen, &got);
                    let want = m.set_user_id(index, user_id);
                    assert_eq!(got, want, "step {step}: set_user_id {index}");
                } else {
                    let h = any_handle(&mut r, &m);
                    let got = av.set_user_id(h, user_id, FI_AUTH_KEY).map_err(|e| e.errno);
                    tally(seen, &got);
                    let want = m.set_key_user_id(h, user_id);
                    assert_eq!(got, want, "step {step}: set_user_id of key {h:#x}");
                }
            }
            9..=10 => {
                let h = any_handle(&mut r, &m);
                let got = av.remove(&[h], FI_AUTH_KEY).map_err(|e| e.errno);
                tally(seen, &got);
                assert_eq!(got, m.remove_key(h), "step {step}: remove key {h:#x}");
            }
            _ => {
                let target = if r.chance(2) {
                    any_handle(&mut r, &m)
                } else {
                    r.below(cap as u64 + 1)
                };
                let mut key = [0u8; 4];
                let mut size = key.len();
                let got = av
                    .lookup_auth_key(target, &mut key, &mut size)
                    .map(|()| u32::from_le_bytes(key))
                    .map_err(|e| e.errno);
                tally(seen, &got);
                assert_eq!(
                    got,
                    m.lookup_key(target),
                    "step {step}: lookup_auth_key {target:#x}"
                );
            }
        }
        // A refusal no command of this step used goes, as the NIC forgets nothing else.
        av.nic_mut().disarm();
        m.fail_auth = false;
        check(&mut av, &m, step);
    }
}
