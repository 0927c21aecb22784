//! Auth keys in the AV (`FI_AV_AUTH_KEY`): insert_auth_key, lookup_auth_key, FI_AUTH_KEY on
//! insert, remove and set_user_id, with every error path, over the in-memory NIC table.

mod common;

use common::{assert_in_step, insert_peers, pack, peer_bytes, LIMITS};
use uet_av::{
    is_auth_key_addr, job_id_to_auth_key, AddressVector, AvAttr, AvLimits, Fault, FiErrno,
    MemoryNicTable, NicAvTable, NicOp, AUTH_KEY_ADDR_BASE, AUTH_KEY_BYTES, FI_ADDR_NOTAVAIL,
    FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID, FI_EVENT, FI_MORE, FI_SYNC_ERR,
};
use uet_fwif::av_entry::entry_flags;

const JOB: u32 = 0x00ab_cdef;

fn attr(flags: u64) -> AvAttr {
    AvAttr {
        count: 64,
        job_id: JOB,
        auth_key_size: FI_AV_AUTH_KEY,
        flags,
        ..AvAttr::default()
    }
}

fn open_keys(flags: u64, slots: u16) -> AddressVector<MemoryNicTable> {
    let a = attr(flags);
    let size = a.resolve(&LIMITS).expect("valid attr").count as u32;
    let nic = MemoryNicTable::new(size).with_auth_key_slots(slots);
    let limits = AvLimits {
        max_auth_keys: slots,
        ..LIMITS
    };
    AddressVector::open(nic, a, limits).expect("open")
}

fn key(job: u32) -> [u8; AUTH_KEY_BYTES] {
    job_id_to_auth_key(job)
}

#[test]
fn insert_and_lookup_auth_keys() {
    let mut av = open_keys(0, 8);
    let k1 = av.insert_auth_key(&key(0x42), 0).unwrap();
    let k2 = av.insert_auth_key(&key(0x43), 0).unwrap();
    assert_eq!(k1, AUTH_KEY_ADDR_BASE);
    assert_eq!(k2, AUTH_KEY_ADDR_BASE + 1);
    assert!(is_auth_key_addr(k1) && !is_auth_key_addr(0));
    // The NIC holds both, each reporting its handle as the source.
    let slots = av.nic().auth_keys();
    assert_eq!(slots[0].job_id.get(), 0x42);
    assert_eq!(slots[0].source.get(), k1);
    assert_eq!(slots[1].job_id.get(), 0x43);
    assert!(av.verify_auth_keys().unwrap().is_empty());

    let mut buf = [0u8; 8];
    let mut size = buf.len();
    av.lookup_auth_key(k2, &mut buf, &mut size).unwrap();
    assert_eq!(size, AUTH_KEY_BYTES);
    assert_eq!(&buf[..4], &key(0x43));
    // Truncation: a 2-byte buffer gets 2 bytes and learns the full size.
    let mut small = [0xEEu8; 4];
    let mut size = 2;
    av.lookup_auth_key(k1, &mut small, &mut size).unwrap();
    assert_eq!(size, 4);
    assert_eq!(small, [0x42, 0, 0xEE, 0xEE]);
    // A zero size writes nothing.
    let mut none = [0xEEu8; 4];
    let mut size = 0;
    av.lookup_auth_key(k1, &mut none, &mut size).unwrap();
    assert_eq!((none, size), ([0xEE; 4], 4));

    // The same key again returns the same handle; it goes with its last remove.
    assert_eq!(av.insert_auth_key(&key(0x42), 0).unwrap(), k1);
    av.remove(&[k1], FI_AUTH_KEY).unwrap();
    assert!(av.lookup_auth_key(k1, &mut buf, &mut 4).is_ok());
    av.remove(&[k1], FI_AUTH_KEY).unwrap();
    let e = av.lookup_auth_key(k1, &mut buf, &mut 4).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(!av.nic().auth_keys()[0].is_valid(), "slot freed on the NIC");
    // The freed handle number is reused first.
    assert_eq!(av.insert_auth_key(&key(0x44), 0).unwrap(), k1);
}

#[test]
fn insert_auth_key_errors() {
    let mut av = open_keys(0, 2);
    let before = av.nic().counters();
    let e = av.insert_auth_key(&key(1), FI_MORE).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS);
    let e = av.insert_auth_key(&[1, 2, 3], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("4 bytes"), "{e}");
    let e = av.insert_auth_key(&[1, 2, 3, 4, 5], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = av.insert_auth_key(&[0, 0, 0, 1], 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("24 bits"), "{e}");
    assert_eq!(av.nic().counters(), before, "nothing reached the NIC");
    assert_eq!(av.auth_keys().count(), 0);

    // The AV's keys are bounded by the NIC's slots...
    av.insert_auth_key(&key(1), 0).unwrap();
    av.insert_auth_key(&key(2), 0).unwrap();
    let e = av.insert_auth_key(&key(3), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOSPC);
    // ...and a NIC whose slots other AVs took refuses with FI_ENOSPC too.
    let mut av = open_keys(0, 4);
    for s in 0..4 {
        assert!(av.nic_mut().add_auth_key(0x100 + s, 0).is_ok());
    }
    let e = av.insert_auth_key(&key(7), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOSPC);
    assert_eq!(av.auth_keys().count(), 0, "nothing kept");
    // A NIC refusal of another kind is its own error and keeps nothing.
    let mut av = open_keys(0, 4);
    av.nic_mut().fail_after(NicOp::AuthKey, 0);
    let e = av.insert_auth_key(&key(7), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert_eq!(av.auth_keys().count(), 0);
    assert!(av.nic().auth_keys().iter().all(|s| !s.is_valid()));
}

#[test]
fn auth_key_calls_need_an_auth_key_domain() {
    let mut av = common::open(16);
    let e = av.insert_auth_key(&key(1), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("FI_AV_AUTH_KEY"), "{e}");
    let mut b = [0u8; 4];
    let e = av
        .lookup_auth_key(AUTH_KEY_ADDR_BASE, &mut b, &mut 4)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = av.remove(&[AUTH_KEY_ADDR_BASE], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let mut out = [AUTH_KEY_ADDR_BASE];
    let e = av
        .insert(&peer_bytes(1), 1, Some(&mut out), FI_AUTH_KEY)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(av.is_empty());

    // Open attributes: auth_key_size and rx_ctx_bits.
    let bad_size = AvAttr {
        auth_key_size: 8,
        ..attr(0)
    };
    assert_eq!(
        bad_size.resolve(&LIMITS).unwrap_err().errno,
        FiErrno::FI_EINVAL
    );
    for ok in [0, AUTH_KEY_BYTES, FI_AV_AUTH_KEY] {
        let a = AvAttr {
            auth_key_size: ok,
            ..attr(0)
        };
        assert!(a.resolve(&LIMITS).is_ok(), "auth_key_size {ok}");
    }
    let wide = AvAttr {
        rx_ctx_bits: 16,
        count: 16,
        ..attr(0)
    };
    let limits = AvLimits::new(1 << 20, 32);
    assert!(AvAttr {
        auth_key_size: 0,
        ..wide
    }
    .resolve(&limits)
    .is_ok());
    assert_eq!(
        wide.resolve(&limits).unwrap_err().errno,
        FiErrno::FI_EOVERFLOW
    );
}

#[test]
fn inserts_against_a_key_carry_its_slot() {
    let mut av = open_keys(0, 8);
    let _k0 = av.insert_auth_key(&key(0x10), 0).unwrap();
    let k1 = av.insert_auth_key(&key(0x11), 0).unwrap();
    // fi_addr carries the key handle in, the address out.
    let buf = pack(&[peer_bytes(1), peer_bytes(2)]);
    let mut fi = [k1, k1];
    assert_eq!(av.insert(&buf, 2, Some(&mut fi), FI_AUTH_KEY).unwrap(), 2);
    assert_eq!(fi, [0, 1]);
    // Without FI_AUTH_KEY: no key, the AV's JobID.
    let plain = insert_peers(&mut av, &[3]);
    assert_in_step(&av);
    let e0 = av.nic().entry(0).copied().unwrap();
    assert_eq!(e0.auth_key_slot(), Some(1));
    assert_eq!(
        e0.flags.get() & entry_flags::AUTH_KEY,
        entry_flags::AUTH_KEY
    );
    let e2 = av.nic().entry(2).copied().unwrap();
    assert_eq!(e2.auth_key_slot(), None);
    assert_eq!(e2.job_id.get(), JOB);

    // lookup_auth_key of an address reports its key; of a plain address FI_ENOKEY.
    let mut b = [0u8; 4];
    let mut size = 4;
    av.lookup_auth_key(0, &mut b, &mut size).unwrap();
    assert_eq!(b, key(0x11));
    assert_eq!(av.auth_key_of(1).unwrap(), Some(k1));
    let e = av.lookup_auth_key(plain[0], &mut b, &mut size).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOKEY);
    let e = av.lookup_auth_key(40, &mut b, &mut size).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = av
        .lookup_auth_key(AUTH_KEY_ADDR_BASE + 7, &mut b, &mut size)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);

    // An auth-key handle is no address: address calls refuse it, naming FI_AUTH_KEY.
    let mut out = [0u8; 32];
    let e = av.lookup(k1, &mut out, &mut 32).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("FI_AUTH_KEY"), "{e}");
    assert_eq!(av.remove(&[k1], 0).unwrap_err().errno, FiErrno::FI_EINVAL);

    // A key with addresses inserted against it cannot go; once they are removed, it can.
    let e = av.remove(&[k1], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBUSY);
    assert!(e.message.contains("addresses"), "{e}");
    av.remove(&[0, 1], 0).unwrap();
    av.remove(&[k1], FI_AUTH_KEY).unwrap();
    assert_in_step(&av);
    assert!(av.verify_auth_keys().unwrap().is_empty());
}

#[test]
fn insert_with_auth_key_errors_change_nothing() {
    let mut av = open_keys(0, 8);
    let k = av.insert_auth_key(&key(0x10), 0).unwrap();
    let buf = pack(&[peer_bytes(1), peer_bytes(2)]);
    // No fi_addr array.
    let e = av.insert(&buf, 2, None, FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    // A value that is no key handle, named by position.
    let mut fi = [k, 5];
    let e = av.insert(&buf, 2, Some(&mut fi), FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("fi_addr[1]"), "{e}");
    assert_eq!(fi, [k, 5], "fi_addr untouched");
    let mut fi = [k, AUTH_KEY_ADDR_BASE + 3];
    assert_eq!(
        av.insert(&buf, 2, Some(&mut fi), FI_AUTH_KEY)
            .unwrap_err()
            .errno,
        FiErrno::FI_EINVAL
    );
    // FI_AUTH_KEY with FI_AV_USER_ID, and FI_AV_USER_ID per insert in an auth-key domain.
    let mut fi = [k, k];
    let e = av
        .insert(&buf, 2, Some(&mut fi), FI_AUTH_KEY | FI_AV_USER_ID)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = av
        .insert(&buf, 2, Some(&mut fi), FI_AV_USER_ID)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(e.message.contains("FI_AV_AUTH_KEY"), "{e}");
    assert!(av.is_empty());
    assert_eq!(av.nic().counters().writes, 0);

    // insertsvc, insert_str-free paths and insertsym take the key the same way.
    let mut one = k;
    assert_eq!(
        av.insertsvc("10.9.0.1", Some("7"), Some(&mut one), FI_AUTH_KEY, None)
            .unwrap(),
        1
    );
    assert_eq!(av.auth_key_of(one).unwrap(), Some(k));
    let mut many = [k; 4];
    assert_eq!(
        av.insertsym("10.8.0.1", 2, "3", 2, Some(&mut many), FI_AUTH_KEY, None)
            .unwrap(),
        4
    );
    for f in many {
        assert_eq!(av.auth_key_of(f).unwrap(), Some(k));
    }
    assert_eq!(av.ranges().count(), 0, "keyed members are single entries");
    assert_in_step(&av);
    // FI_SYNC_ERR statuses with keys.
    let mut fi = [k, k];
    let mut st = [9, 9];
    assert_eq!(
        av.insert_with_status(
            &buf,
            2,
            Some(&mut fi),
            FI_AUTH_KEY | FI_SYNC_ERR,
            Some(&mut st)
        )
        .unwrap(),
        2
    );
    assert_eq!(st, [0, 0]);
}

#[test]
fn a_failed_write_unbinds_its_addresses() {
    let mut av = open_keys(0, 8);
    let k = av.insert_auth_key(&key(0x10), 0).unwrap();
    av.nic_mut().fail_after(NicOp::Write, 0);
    let mut fi = [k];
    let e = av
        .insert(&peer_bytes(1), 1, Some(&mut fi), FI_AUTH_KEY)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert_eq!(fi, [FI_ADDR_NOTAVAIL]);
    assert_eq!(av.auth_keys().next().unwrap().bound, 0);
    av.remove(&[k], FI_AUTH_KEY).unwrap();
}

#[test]
fn remove_auth_key_errors() {
    let mut av = open_keys(0, 8);
    let k0 = av.insert_auth_key(&key(0x10), 0).unwrap();
    let k1 = av.insert_auth_key(&key(0x11), 0).unwrap();
    let slot1 = av.auth_keys().nth(1).unwrap().slot;
    // An endpoint enabled with k1 is open: FI_EBUSY, and k0 of the same call stays too.
    assert!(av.nic_mut().grant_auth_key(slot1));
    let e = av.remove(&[k0, k1], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBUSY);
    assert!(e.message.contains("endpoints"), "{e}");
    assert_eq!(av.auth_keys().count(), 2);
    // The endpoint closed: success.
    av.nic_mut().revoke_auth_key(slot1);
    // Listed twice, or not a key: FI_EINVAL, nothing removed.
    let e = av.remove(&[k1, k1], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = av.remove(&[k1, 3], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = av.remove(&[k1, FI_ADDR_NOTAVAIL], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert_eq!(av.auth_keys().count(), 2);
    // Other flags beside FI_AUTH_KEY.
    let e = av.remove(&[k1], FI_AUTH_KEY | FI_MORE).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS);
    // A NIC refusal: FI_EIO, the key stays.
    av.nic_mut().fail_after(NicOp::AuthKey, 0);
    let e = av.remove(&[k1], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert_eq!(av.auth_keys().count(), 2);
    av.remove(&[k0, k1], FI_AUTH_KEY).unwrap();
    assert_eq!(av.auth_keys().count(), 0);
    assert!(av.nic().auth_keys().iter().all(|s| !s.is_valid()));
    // Removing nothing is fine.
    av.remove(&[], FI_AUTH_KEY).unwrap();
}

#[test]
fn user_ids_of_auth_keys() {
    // With FI_AV_USER_ID the key's NIC source is FI_ADDR_NOTAVAIL until set.
    let mut av = open_keys(FI_AV_USER_ID, 8);
    let k = av.insert_auth_key(&key(0x10), 0).unwrap();
    assert_eq!(av.nic().auth_keys()[0].source.get(), FI_ADDR_NOTAVAIL);
    av.set_user_id(k, 0x5151, FI_AUTH_KEY).unwrap();
    assert_eq!(av.nic().auth_keys()[0].source.get(), 0x5151);
    assert_eq!(av.auth_keys().next().unwrap().user_id, Some(0x5151));
    assert!(av.verify_auth_keys().unwrap().is_empty());
    // Errors: not a key, another flag, a NIC refusal (the old id stays).
    let e = av
        .set_user_id(AUTH_KEY_ADDR_BASE + 1, 1, FI_AUTH_KEY)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    let e = av.set_user_id(k, 1, FI_AUTH_KEY | FI_MORE).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBADFLAGS);
    av.nic_mut().fail_after(NicOp::AuthKey, 0);
    let e = av.set_user_id(k, 0x6262, FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO);
    assert_eq!(av.nic().auth_keys()[0].source.get(), 0x5151);
    assert_eq!(av.auth_keys().next().unwrap().user_id, Some(0x5151));
    // Without FI_AUTH_KEY the handle is taken as an address and refused.
    let e = av.set_user_id(k, 1, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    // An address inserted against a key takes its user id as any other.
    let mut fi = [k];
    av.insert(&peer_bytes(1), 1, Some(&mut fi), FI_AUTH_KEY)
        .unwrap();
    av.set_user_id(fi[0], 0x77, 0).unwrap();
    let e = av.nic().entry(0).copied().unwrap();
    assert_eq!((e.user_id(), e.auth_key_slot()), (Some(0x77), Some(0)));
    assert_in_step(&av);

    // Without FI_AV_USER_ID, set_user_id is refused, keyed or not.
    let mut plain = open_keys(0, 8);
    let k = plain.insert_auth_key(&key(0x10), 0).unwrap();
    let e = plain.set_user_id(k, 1, FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    // On a non-auth-key AV opened with FI_AV_USER_ID, FI_AUTH_KEY is refused.
    let mut uav = common::open_with(AvAttr {
        count: 16,
        flags: FI_AV_USER_ID,
        ..AvAttr::default()
    });
    let e = uav
        .set_user_id(AUTH_KEY_ADDR_BASE, 1, FI_AUTH_KEY)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
}

#[test]
fn verify_reports_a_slot_the_nic_lost() {
    let mut av = open_keys(0, 8);
    av.insert_auth_key(&key(0x10), 0).unwrap();
    av.insert_auth_key(&key(0x11), 0).unwrap();
    assert!(av.verify_auth_keys().unwrap().is_empty());
    // Another owner frees slot 1 behind the AV's back.
    av.nic_mut().remove_auth_key(1, 0x11).unwrap();
    let m = av.verify_auth_keys().unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].key.job_id, 0x11);
    assert!(!m[0].nic.is_valid());
    av.nic_mut().fail_after(NicOp::AuthKey, 0);
    assert_eq!(av.verify_auth_keys().unwrap_err().errno, FiErrno::FI_EIO);
    // A read the NIC has no room for: try again.
    av.nic_mut().inject(NicOp::AuthKey, 0, Fault::Busy);
    assert_eq!(av.verify_auth_keys().unwrap_err().errno, FiErrno::FI_EAGAIN);
    assert_eq!(av.verify_auth_keys().unwrap().len(), 1);
}

#[test]
fn event_avs_insert_against_keys() {
    use std::sync::{Arc, Mutex, Weak};
    use uet_av::{AvEvent, AvEventSink, AvProgress, FiError};
    struct Sink(Mutex<Vec<AvEvent>>);
    impl AvEventSink for Sink {
        fn post_av_event(&self, ev: AvEvent) -> Result<(), FiError> {
            self.0.lock().unwrap().push(ev);
            Ok(())
        }
        fn attach_av(&self, _progress: Weak<dyn AvProgress>) -> Result<u64, FiError> {
            Ok(1)
        }
        fn detach_av(&self, _attachment: u64) {}
    }
    let mut av = open_keys(FI_EVENT, 8);
    let sink = Arc::new(Sink(Mutex::new(Vec::new())));
    av.bind(sink.clone(), 0).unwrap();
    let k = av.insert_auth_key(&key(0x10), 0).unwrap();
    let mut fi = [k];
    assert_eq!(
        av.insert(&peer_bytes(1), 1, Some(&mut fi), FI_AUTH_KEY)
            .unwrap(),
        0
    );
    av.progress();
    assert_eq!(av.auth_key_of(fi[0]).unwrap(), Some(k));
    assert_eq!(av.nic().entry(0).unwrap().auth_key_slot(), Some(0));
    assert_eq!(sink.0.lock().unwrap().len(), 1);
    // An insert against the key that the NIC refuses binds nothing to it: once that is
    // reported, the key goes with its remaining address.
    av.nic_mut().fail_after(uet_av::NicOp::Write, 0);
    let mut fi2 = [k];
    av.insert(&peer_bytes(2), 1, Some(&mut fi2), FI_AUTH_KEY)
        .unwrap();
    // No progress yet: the remove settles the insert in flight itself.
    let e = av.remove(&[k], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBUSY, "index 0 is still bound to it");
    assert!(e.message.contains(" 1 addresses"), "{e}");
    assert!(av.index_of(fi2[0]).is_err(), "taken back");
    av.remove(&fi, 0).unwrap();
    av.remove(&[k], FI_AUTH_KEY).unwrap();
    assert_eq!(av.auth_keys().count(), 0);
}

#[test]
fn removing_one_of_two_inserts_of_a_key_in_use_succeeds() {
    let mut av = open_keys(0, 8);
    let k = av.insert_auth_key(&key(0x20), 0).unwrap();
    assert_eq!(
        av.insert_auth_key(&key(0x20), 0).unwrap(),
        k,
        "the same key again"
    );
    let slot = av.auth_keys().next().unwrap().slot;
    assert!(av.nic_mut().grant_auth_key(slot));
    // The first remove only drops an insert: the key, and the endpoint using it, stay.
    av.remove(&[k], FI_AUTH_KEY).unwrap();
    assert_eq!(av.auth_keys().count(), 1);
    assert!(av.nic().auth_keys()[usize::from(slot)].is_valid());
    // The last one would take the key from the endpoint: FI_EBUSY.
    let e = av.remove(&[k], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBUSY);
    av.nic_mut().revoke_auth_key(slot);
    av.remove(&[k], FI_AUTH_KEY).unwrap();
    assert_eq!(av.auth_keys().count(), 0);
}

/// An AUTH_KEY_REMOVE the NIC does not answer may still free the slot, which the NIC could
/// then give to a later key: the key goes from the AV all the same (`FI_ETIMEDOUT`), so no
/// entry can name that slot afterwards.
#[test]
fn an_unanswered_key_removal_removes_the_key_from_the_av() {
    for applied in [false, true] {
        let mut av = open_keys(0, 4);
        let k = av.insert_auth_key(&key(0x77), 0).unwrap();
        av.nic_mut()
            .inject(NicOp::AuthKey, 0, Fault::InDoubt { applied });
        let e = av.remove(&[k], FI_AUTH_KEY).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ETIMEDOUT, "{e}");
        assert!(e.message.contains("removed from the AV"), "{e}");
        assert_eq!(av.auth_keys().count(), 0, "applied: {applied}");
        assert!(
            av.remove(&[k], FI_AUTH_KEY).is_err(),
            "no such key any more"
        );
        // A new key: whatever slot the NIC gives it, nothing else names that slot.
        let k2 = av.insert_auth_key(&key(0x78), 0).unwrap();
        let mut fi = [k2];
        assert_eq!(
            av.insert(&peer_bytes(1), 1, Some(&mut fi), FI_AUTH_KEY)
                .unwrap(),
            1
        );
        assert!(av.verify_auth_keys().unwrap().is_empty());
        assert_in_step(&av);
    }
}

/// An AV of user ids with one auth key (JobID 0x77), whose user id 0x5EED the NIC left
/// unanswered (`FI_ETIMEDOUT`), having taken it late when `applied`: the AV and the key.
fn key_user_id_unanswered(applied: bool) -> (AddressVector<MemoryNicTable>, u64) {
    let mut av = open_keys(FI_AV_USER_ID, 4);
    let k = av.insert_auth_key(&key(0x77), 0).unwrap();
    av.nic_mut()
        .inject(NicOp::AuthKey, 0, Fault::InDoubt { applied });
    let e = av.set_user_id(k, 0x5EED, FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ETIMEDOUT, "{e}");
    (av, k)
}

/// An AUTH_KEY_SOURCE the NIC does not answer leaves the old user id, and the key's source
/// is sent again at the next call that settles the NIC.
#[test]
fn an_unanswered_key_user_id_is_sent_again() {
    let (mut av, k) = key_user_id_unanswered(true);
    assert_eq!(av.auth_keys().next().unwrap().user_id, None, "unchanged");
    assert!(
        !av.verify_auth_keys().unwrap().is_empty(),
        "the NIC took the new source late"
    );
    av.settle().unwrap();
    assert!(av.verify_auth_keys().unwrap().is_empty());
    av.set_user_id(k, 0x5EED, FI_AUTH_KEY).unwrap();
    assert!(av.verify_auth_keys().unwrap().is_empty());
}

/// A synchronous insert that sends the NIC its records first sends again the source of a key
/// whose AUTH_KEY_SOURCE went unanswered, as it rewrites the entries in doubt: the NIC's slot
/// does not keep the user id the AV reported unchanged.
#[test]
fn an_insert_sends_again_the_source_of_a_key_left_unanswered() {
    let (mut av, _) = key_user_id_unanswered(true);
    assert!(
        !av.verify_auth_keys().unwrap().is_empty(),
        "the NIC took the new source late"
    );
    insert_peers(&mut av, &[1]);
    assert!(
        av.verify_auth_keys().unwrap().is_empty(),
        "the insert sent the key's source again"
    );
    assert_in_step(&av);
}

/// A call that first sends again the source of a key whose AUTH_KEY_SOURCE went unanswered,
/// and finds that unanswered too, fails with `FI_EIO` as one whose entries in doubt cannot be
/// rewritten does: the call itself sent nothing, and its own addresses are not inserted.
#[test]
fn an_insert_whose_resent_key_source_goes_unanswered_again_is_eio_and_inserts_nothing() {
    let (mut av, _) = key_user_id_unanswered(false);
    let used = av.len();
    av.nic_mut()
        .inject(NicOp::AuthKey, 0, Fault::InDoubt { applied: false });
    let mut fi = [0u64];
    let e = av.insert(&peer_bytes(1), 1, Some(&mut fi), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(e.message.contains("in doubt"), "{e}");
    assert_eq!(av.len(), used, "nothing inserted");
    // The next call finds the NIC answering, sends the source again and inserts.
    insert_peers(&mut av, &[1]);
    assert!(av.verify_auth_keys().unwrap().is_empty());
    assert_in_step(&av);
}

/// A key's user id set again and again while the NIC answers none of its AUTH_KEY_SOURCE
/// commands notes the key in doubt once: the host holds no more for the thousandth call than
/// for the first.
#[test]
fn a_key_user_id_left_unanswered_again_and_again_holds_no_more_memory() {
    let mut av = open_keys(FI_AV_USER_ID, 4);
    let k = av.insert_auth_key(&key(0x77), 0).unwrap();
    let unanswered = |av: &mut AddressVector<MemoryNicTable>, id: u64| {
        av.nic_mut()
            .inject(NicOp::AuthKey, 0, Fault::InDoubt { applied: false });
        let e = av.set_user_id(k, id, FI_AUTH_KEY).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ETIMEDOUT, "{e}");
    };
    unanswered(&mut av, 0);
    let held = av.host_bytes();
    for id in 1..1000 {
        unanswered(&mut av, id);
    }
    assert_eq!(av.host_bytes(), held);
    av.settle().unwrap();
    assert!(av.verify_auth_keys().unwrap().is_empty());
}

/// An AUTH_KEY_REMOVE the NIC has no room for changes nothing: `FI_EAGAIN` when it is the
/// call's first change, and the same call succeeds later. After a key of the same call was
/// removed (or lost one of its inserts), the call has changed the AV: `FI_EIO`.
#[test]
fn a_key_removal_the_nic_has_no_room_for_is_eagain_only_when_nothing_changed() {
    let mut av = open_keys(0, 8);
    let k0 = av.insert_auth_key(&key(0x30), 0).unwrap();
    let k1 = av.insert_auth_key(&key(0x31), 0).unwrap();
    av.nic_mut().inject(NicOp::AuthKey, 0, Fault::Busy);
    let e = av.remove(&[k0, k1], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    assert_eq!(av.auth_keys().count(), 2);
    assert!(av.verify_auth_keys().unwrap().is_empty());

    // The first key goes, the second finds no room.
    av.nic_mut().inject(NicOp::AuthKey, 1, Fault::Busy);
    let e = av.remove(&[k0, k1], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(e.message.contains("1 of 2 removed before it"), "{e}");
    let left: Vec<u64> = av.auth_keys().map(|k| k.handle).collect();
    assert_eq!(left, [k1]);
    assert!(av.verify_auth_keys().unwrap().is_empty());

    // A key that only loses one of its two inserts is a change too.
    assert_eq!(av.insert_auth_key(&key(0x31), 0).unwrap(), k1);
    let k2 = av.insert_auth_key(&key(0x32), 0).unwrap();
    av.nic_mut().inject(NicOp::AuthKey, 0, Fault::Busy);
    let e = av.remove(&[k1, k2], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert_eq!(av.auth_keys().count(), 2);
    // k1 has one insert left: one remove takes it.
    av.remove(&[k1, k2], FI_AUTH_KEY).unwrap();
    assert_eq!(av.auth_keys().count(), 0);
    assert!(av.nic().auth_keys().iter().all(|s| !s.is_valid()));
}

/// A slot the AV's table owns that no key names is reported, with what it holds; the AV's own
/// keys are not, an AV without auth keys has none, and a failed read fails the call.
#[test]
fn stray_slots_of_the_table_are_reported() {
    let mut av = open_keys(0, 8);
    av.insert_auth_key(&key(0x10), 0).unwrap();
    assert!(av.stray_auth_key_slots().unwrap().is_empty());
    let slot = av.nic_mut().add_auth_key(0x20, 5).unwrap();
    let stray = av.stray_auth_key_slots().unwrap();
    assert_eq!(stray.len(), 1);
    assert_eq!(stray[0].0, slot);
    assert_eq!(stray[0].1.job_id.get(), 0x20);
    assert_eq!(stray[0].1.source.get(), 5);
    assert!(
        av.verify_auth_keys().unwrap().is_empty(),
        "the AV's keys are fine"
    );
    av.nic_mut().fail_after(NicOp::AuthKey, 0);
    let e = av.stray_auth_key_slots().unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(e.message.contains("auth-key table"), "{e}");
    av.nic_mut().remove_auth_key(slot, 0x20).unwrap();
    assert!(av.stray_auth_key_slots().unwrap().is_empty());
    let mut a = attr(0);
    a.auth_key_size = 0;
    let count = a.resolve(&LIMITS).expect("valid attr").count as u32;
    let nic = MemoryNicTable::new(count).with_auth_key_slots(8);
    let mut plain = AddressVector::open(nic, a, LIMITS).expect("open");
    plain.nic_mut().add_auth_key(0x30, 0).unwrap();
    assert!(
        plain.stray_auth_key_slots().unwrap().is_empty(),
        "no auth keys"
    );
}
