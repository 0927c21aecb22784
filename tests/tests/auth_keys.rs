//! Auth keys end to end: the NIC's auth-key table and its admin commands, endpoints enabled
//! with an AV's keys accepting the keys' JobIDs (and refusing others with RC_BAD_JOB_ID),
//! AV entries sending with their key's JobID, FI_EBUSY while an endpoint uses a key, the NIC
//! table read back against the host, and `uetctl av dump`.

use std::sync::Arc;
use uet_av::{
    job_id_to_auth_key, AvAttr, FiAddr, FiErrno, NicAvTable, AUTH_KEY_ADDR_BASE, FI_ADDR_NOTAVAIL,
    FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID,
};
use uet_driver::backend::sim::SimDevice;
use uet_driver::uet_fwif::address::AddressingMode;
use uet_driver::uet_fwif::admin::RangeBody;
use uet_driver::uet_fwif::auth_key::{
    AuthKeyAddBody, AuthKeyEntry, AuthKeyRemoveBody, AuthKeySourceBody, EndpointAuthKeysBody,
};
use uet_driver::uet_fwif::{AvWriteRecord, Command, NicAvEntry, Status};
use uet_driver::{
    Av, DmaPool, DriverError, Endpoint, EndpointAttr, MrAccess, Nic, ScalableEndpoint,
};
use uet_fwif::datapath::LocalStatus;
use uet_fwif::ReturnCode;
use uet_regs::{RegisterAccess, AV_WRITE_DROPS, RX_BAD_JOB_ID, RX_PACKETS, RX_PERM_VIOLATION};
use uet_sim::{Fabric, NicConfig, SimFunction};
use uet_tests::nic_addr;
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromZeros;

/// The sender's (and every endpoint's own) JobID.
const OWN_JOB: u32 = 0x11;
/// The JobID granted through an auth key.
const KEY_JOB: u32 = 0x77;

struct Host {
    nic: Nic,
    av: Av,
    pool: DmaPool,
    function: SimFunction,
}

fn host(fabric: &Fabric, i: usize, cfg: impl FnOnce(&mut NicConfig), av_flags: u64) -> Host {
    let mut c = NicConfig::new(nic_addr(i));
    cfg(&mut c);
    let function = fabric.add_nic(c).expect("add NIC");
    let nic = Nic::open(Arc::new(SimDevice::new(function.clone()))).expect("open NIC");
    let av = nic
        .open_av(AvAttr {
            count: 16,
            job_id: OWN_JOB,
            auth_key_size: FI_AV_AUTH_KEY,
            flags: av_flags,
            ..AvAttr::default()
        })
        .expect("open AV");
    let pool = DmaPool::new(&nic, 4096, 32).expect("pool");
    Host {
        nic,
        av,
        pool,
        function,
    }
}

fn endpoint(h: &Host, mode: AddressingMode) -> Endpoint {
    h.nic
        .endpoint(
            EndpointAttr {
                job_id: OWN_JOB,
                mode,
                ..EndpointAttr::default()
            },
            Some(&h.av),
        )
        .expect("endpoint")
}

/// A scalable endpoint of `OWN_JOB` on `h`, with 2 transmit and 2 receive contexts.
fn scalable(h: &Host) -> ScalableEndpoint {
    h.nic
        .scalable_endpoint(
            EndpointAttr {
                job_id: OWN_JOB,
                tx_ctx_cnt: 2,
                rx_ctx_cnt: 2,
                ..EndpointAttr::default()
            },
            Some(&h.av),
        )
        .expect("scalable endpoint")
}

fn key(job: u32) -> [u8; 4] {
    job_id_to_auth_key(job)
}

/// Insert `ep`'s address into `av` against key `k` (or no key).
fn insert(av: &mut Av, ep: &Endpoint, k: Option<FiAddr>) -> FiAddr {
    let bytes = ep.address().to_bytes().unwrap();
    let mut fi = [k.unwrap_or(0)];
    let flags = if k.is_some() { FI_AUTH_KEY } else { 0 };
    assert_eq!(av.insert(&bytes, 1, Some(&mut fi), flags).unwrap(), 1);
    fi[0]
}

fn send(h: &mut Host, ep: &mut Endpoint, dest: FiAddr, data: &[u8], ctx: u64) {
    let mut b = h.pool.alloc().unwrap();
    b.fill(data).unwrap();
    ep.post_send(dest, b, ctx, 0).unwrap();
}

fn recv(h: &mut Host, ep: &mut Endpoint, ctx: u64) {
    let b = h.pool.alloc().unwrap();
    ep.post_recv(b, ctx).unwrap();
}

fn next(ep: &mut Endpoint) -> Option<uet_driver::CqEvent> {
    (0..16).find_map(|_| ep.poll().unwrap())
}

fn status(e: DriverError) -> Status {
    match e {
        DriverError::AdminStatus { status, .. } => status,
        other => panic!("expected an admin status, got {other}"),
    }
}

/// Traffic from an entry bound to key KEY_JOB reaches an endpoint enabled with that key and is
/// refused (RC_BAD_JOB_ID, counted, FI_EACCES at the sender) by one that is not.
fn granted_and_refused(mode: AddressingMode) {
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, |_| {}, 0);
    let mut b = host(&fabric, 1, |_| {}, 0);
    let mut c = host(&fabric, 2, |_| {}, 0);
    // A's AV holds its key before A's endpoint is created: the endpoint is enabled with it,
    // and sends through it (interface 1.16: a key inserted later is refused to its sends).
    let ka = a.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let mut ea = endpoint(&a, mode);
    assert_eq!(ea.auth_key_slots(), &[0]);
    // B's AV holds the key before B's endpoint is created: the endpoint is enabled with it.
    let kb = b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let mut eb = endpoint(&b, mode);
    assert_eq!(eb.auth_key_slots(), &[0]);
    // C has no key.
    let mut ec = endpoint(&c, mode);
    assert!(ec.auth_key_slots().is_empty());

    // A inserts both against its own key KEY_JOB: requests carry 0x77, not the AV's 0x11.
    let to_b = insert(&mut a.av, &eb, Some(ka));
    let to_c = insert(&mut a.av, &ec, Some(ka));

    recv(&mut b, &mut eb, 100);
    recv(&mut c, &mut ec, 200);
    send(&mut a, &mut ea, to_b, b"granted", 1);
    let ok = next(&mut ea).expect("send completion");
    assert!(ok.error.is_none(), "{:?}", ok.error);
    let got = next(&mut eb).expect("delivered");
    assert!(got.error.is_none());
    assert_eq!(got.buffer.unwrap().to_vec().unwrap(), b"granted");
    // A is in no entry of B's AV: the source is the key the request came through.
    assert_eq!(got.src_addr, kb);
    assert_eq!(b.function.counter(RX_PACKETS), 1);

    send(&mut a, &mut ea, to_c, b"not granted", 2);
    let refused = next(&mut ea).expect("send completion");
    let err = refused.error.expect("an error completion");
    assert_eq!(err.local, LocalStatus::Remote);
    assert_eq!(err.return_code, Some(ReturnCode::BadJobId));
    assert_eq!(err.errno, FiErrno::FI_EACCES);
    assert_eq!(c.function.counter(RX_BAD_JOB_ID), 1);
    assert_eq!(c.function.counter(RX_PACKETS), 0);
    assert!(next(&mut ec).is_none(), "nothing reaches C's buffers");
    assert_eq!(ec.counters().unwrap().rx_messages, 0);

    // The endpoints' own JobID still works both ways: a plain entry sends with the AV's JobID.
    let plain_to_c = insert(&mut a.av, &ec, None);
    send(&mut a, &mut ea, plain_to_c, b"own job", 3);
    assert!(next(&mut ea).unwrap().error.is_none());
    assert!(next(&mut ec).unwrap().error.is_none());
}

#[test]
fn relative_addressing_accepts_granted_job_ids_only() {
    granted_and_refused(AddressingMode::Relative);
}

#[test]
fn absolute_addressing_accepts_granted_job_ids_only() {
    granted_and_refused(AddressingMode::Absolute);
}

/// fi_mr(3): only peers programmed with a region's authorization key may access it, and a
/// region registered without one takes the domain's (the endpoint's own JobID). An endpoint
/// enabled with another job's key takes that job's messages, but that job's WRITE and READ are
/// refused (RC_PERM_VIOLATION, `FI_EACCES` at the initiator) and touch nothing; its own job's
/// go through.
#[test]
fn a_memory_region_is_reached_only_through_its_endpoints_own_job() {
    const MR_KEY: u64 = 0xC0DE_0077;
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, |_| {}, 0);
    let mut b = host(&fabric, 1, |_| {}, 0);
    let mut ea = endpoint(&a, AddressingMode::Relative);
    b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let mut eb = endpoint(&b, AddressingMode::Relative);
    assert_eq!(eb.auth_key_slots(), &[0]);
    let mut region = b.pool.alloc().unwrap();
    region.fill(&[0xAA; 64]).unwrap();
    let mr = eb
        .register_mr(region, MrAccess::REMOTE_READ_WRITE, MR_KEY)
        .unwrap();
    let ka = a.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    // Inserted after A's endpoint was enabled: granted to it explicitly, or its sends
    // through the key would be refused (interface 1.16).
    ea.grant_auth_key(&a.av, ka).unwrap();
    let keyed = insert(&mut a.av, &eb, Some(ka));
    let plain = insert(&mut a.av, &eb, None);

    // A message through the key is delivered.
    recv(&mut b, &mut eb, 100);
    send(&mut a, &mut ea, keyed, b"granted", 1);
    assert!(next(&mut ea).unwrap().error.is_none());
    assert!(next(&mut eb).unwrap().error.is_none());

    // WRITE and READ through the key are refused, and nothing is written or read.
    let refused = |ea: &mut Endpoint, ctx: u64| {
        let ev = next(ea).expect("a completion");
        assert_eq!(ev.context, ctx);
        let err = ev.error.expect("refused");
        assert_eq!(err.return_code, Some(ReturnCode::PermViolation));
        assert_eq!(err.errno, FiErrno::FI_EACCES);
    };
    let mut w = a.pool.alloc().unwrap();
    w.fill(&[0x55; 16]).unwrap();
    ea.post_write(keyed, w, 0, MR_KEY, 2).unwrap();
    refused(&mut ea, 2);
    let mut r = a.pool.alloc().unwrap();
    r.fill(&[0xEE; 16]).unwrap();
    ea.post_read(keyed, r, 16, 0, MR_KEY, 3).unwrap();
    refused(&mut ea, 3);
    assert_eq!(mr.to_vec().unwrap()[..64], [0xAA; 64]);
    assert_eq!(b.function.counter(RX_PERM_VIOLATION), 2);

    // The endpoint's own job reaches the region.
    let mut w = a.pool.alloc().unwrap();
    w.fill(&[0x55; 16]).unwrap();
    ea.post_write(plain, w, 0, MR_KEY, 4).unwrap();
    assert!(next(&mut ea).unwrap().error.is_none());
    assert_eq!(mr.to_vec().unwrap()[..16], [0x55; 16]);
    let r = a.pool.alloc().unwrap();
    ea.post_read(plain, r, 16, 16, MR_KEY, 5).unwrap();
    let ev = next(&mut ea).unwrap();
    assert!(ev.error.is_none(), "{:?}", ev.error);
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), [0xAA; 16]);
}

#[test]
fn keys_inserted_later_need_an_explicit_grant() {
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, |_| {}, 0);
    let mut b = host(&fabric, 1, |_| {}, 0);
    let mut ea = endpoint(&a, AddressingMode::Relative);
    let mut eb = endpoint(&b, AddressingMode::Relative);
    // Inserted after B's endpoint was enabled: not granted (fi_av(3)).
    let kb = b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let ka = a.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    // Inserted after A's endpoint was enabled: granted to it explicitly, or its sends
    // through the key would be refused (interface 1.16).
    ea.grant_auth_key(&a.av, ka).unwrap();
    let to_b = insert(&mut a.av, &eb, Some(ka));
    recv(&mut b, &mut eb, 1);
    send(&mut a, &mut ea, to_b, b"early", 1);
    let e = next(&mut ea).unwrap().error.expect("refused");
    assert_eq!(e.return_code, Some(ReturnCode::BadJobId));

    // A grant from another AV, or of something that is no key, is refused.
    let other = b
        .nic
        .open_av(AvAttr {
            count: 4,
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        })
        .unwrap();
    assert_eq!(
        eb.grant_auth_key(&other, kb).unwrap_err().errno,
        FiErrno::FI_EINVAL
    );
    assert_eq!(
        eb.grant_auth_key(&b.av, AUTH_KEY_ADDR_BASE + 9)
            .unwrap_err()
            .errno,
        FiErrno::FI_EINVAL
    );
    assert!(eb.auth_key_slots().is_empty());
    eb.grant_auth_key(&b.av, kb).unwrap();
    eb.grant_auth_key(&b.av, kb).unwrap();
    assert_eq!(eb.auth_key_slots(), &[0]);
    send(&mut a, &mut ea, to_b, b"late", 2);
    assert!(next(&mut ea).unwrap().error.is_none());
    assert_eq!(
        next(&mut eb).unwrap().buffer.unwrap().to_vec().unwrap(),
        b"late"
    );
}

/// fi_av(3): "When endpoints or memory regions are enabled, they are configured with address
/// vector authorization keys at that point in time. Later authorization key insertions will
/// not propagate to already enabled endpoints". A send, and an RMA write, through a key the
/// sending endpoint was not enabled with (nor granted) completes with `KeyNotGranted`
/// (`FI_EACCES`) and sends nothing (interface 1.16); granted, it goes. A NIC of interface 1.15
/// lets any key of the endpoint's AV through, as before.
fn sends_through_a_key_inserted_later(interface_minor: u8) {
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, |c| c.interface_minor = interface_minor, 0);
    let mut b = host(&fabric, 1, |_| {}, 0);
    b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let mut eb = endpoint(&b, AddressingMode::Relative);
    let mut ea = endpoint(&a, AddressingMode::Relative);
    let ka = a.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    assert!(ea.auth_key_slots().is_empty());
    let to_b = insert(&mut a.av, &eb, Some(ka));
    recv(&mut b, &mut eb, 100);
    send(&mut a, &mut ea, to_b, b"too early", 1);
    let ev = next(&mut ea).expect("send completion");
    assert_eq!(ev.context, 1);
    if interface_minor < uet_regs::since::TX_AUTH_KEY_GRANTS {
        assert!(ev.error.is_none(), "{:?}", ev.error);
        assert_eq!(b.function.counter(RX_PACKETS), 1);
        return;
    }
    let err = ev.error.expect("refused");
    assert_eq!(err.local, LocalStatus::KeyNotGranted);
    assert_eq!(err.errno, FiErrno::FI_EACCES);
    let mut w = a.pool.alloc().unwrap();
    w.fill(&[0x55; 16]).unwrap();
    ea.post_write(to_b, w, 0, 0xC0DE, 2).unwrap();
    let err = next(&mut ea)
        .expect("write completion")
        .error
        .expect("refused");
    assert_eq!(err.local, LocalStatus::KeyNotGranted);
    assert_eq!(b.function.counter(RX_PACKETS), 0, "nothing was sent");
    assert!(next(&mut eb).is_none());
    // The endpoint's own JobID needs no key: a plain entry still sends.
    let plain = insert(&mut a.av, &eb, None);
    send(&mut a, &mut ea, plain, b"own job", 3);
    assert!(next(&mut ea).unwrap().error.is_none());
    assert_eq!(next(&mut eb).unwrap().context, 100);
    // Granted, the key is the endpoint's.
    ea.grant_auth_key(&a.av, ka).unwrap();
    recv(&mut b, &mut eb, 101);
    send(&mut a, &mut ea, to_b, b"granted", 4);
    let ev = next(&mut ea).expect("send completion");
    assert!(ev.error.is_none(), "{:?}", ev.error);
    let got = next(&mut eb).expect("delivered");
    assert_eq!(got.buffer.unwrap().to_vec().unwrap(), b"granted");
}

#[test]
fn a_send_through_a_key_the_endpoint_was_not_enabled_with_is_refused() {
    sends_through_a_key_inserted_later(uet_regs::INTERFACE_MINOR);
}

#[test]
fn before_interface_1_16_a_send_through_any_key_of_the_av_goes() {
    sends_through_a_key_inserted_later(uet_regs::since::TX_AUTH_KEY_GRANTS - 1);
}

#[test]
fn removing_a_key_in_use_is_busy_until_the_endpoint_closes() {
    let fabric = Fabric::new();
    let mut b = host(&fabric, 0, |_| {}, 0);
    let k = b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let k2 = b.av.insert_auth_key(&key(KEY_JOB + 1), 0).unwrap();
    let eb = endpoint(&b, AddressingMode::Relative);
    let eb2 = endpoint(&b, AddressingMode::Relative);
    let e = b.av.remove(&[k], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBUSY);
    assert!(e.message.contains("2 endpoints"), "{e}");
    // The NIC agrees: AUTH_KEY_REMOVE of a granted slot completes Busy.
    let slot = b.av.auth_keys().next().unwrap().slot;
    let st = status(
        b.nic
            .admin_command(Command::AuthKeyRemove {
                slot: u32::from(slot),
                body: AuthKeyRemoveBody::unchecked(),
            })
            .unwrap_err(),
    );
    assert_eq!(st, Status::Busy);
    drop(eb);
    assert_eq!(
        b.av.remove(&[k], FI_AUTH_KEY).unwrap_err().errno,
        FiErrno::FI_EBUSY
    );
    drop(eb2);
    b.av.remove(&[k, k2], FI_AUTH_KEY).unwrap();
    assert_eq!(b.av.auth_keys().count(), 0);
    let mut slots = [AuthKeyEntry::default(); 2];
    b.av.nic_mut().read_auth_keys(0, &mut slots).unwrap();
    assert!(
        slots.iter().all(|s| !s.is_valid()),
        "slots freed on the NIC"
    );
}

/// A scalable endpoint is enabled with its AV's keys as a plain one is: its receive contexts
/// accept a key's JobID, and the key stays until the endpoint closes.
#[test]
fn a_scalable_endpoint_is_enabled_with_the_avs_keys() {
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, |_| {}, 0);
    let mut b = host(&fabric, 1, |_| {}, 0);
    let mut ea = endpoint(&a, AddressingMode::Relative);
    let kb = b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let mut sep = scalable(&b);
    let slot = b.av.auth_keys().next().unwrap().slot;
    assert_eq!(sep.tx_context(0).unwrap().auth_key_slots(), [slot]);
    let ka = a.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    // Inserted after A's endpoint was enabled: granted to it explicitly, or its sends
    // through the key would be refused (interface 1.16).
    ea.grant_auth_key(&a.av, ka).unwrap();
    let bytes = sep.address().unwrap().to_bytes().unwrap();
    let mut fi = [ka];
    assert_eq!(
        a.av.insert(&bytes, 1, Some(&mut fi), FI_AUTH_KEY).unwrap(),
        1
    );
    let rx = sep.rx_context(0).unwrap();
    rx.post_recv(b.pool.alloc().unwrap(), 7).unwrap();
    send(&mut a, &mut ea, fi[0], b"via key", 1);
    let sent = next(&mut ea).expect("send completion");
    assert!(
        sent.error.is_none(),
        "the key's JobID refused: {:?}",
        sent.error
    );
    let got = (0..16)
        .find_map(|_| sep.rx_context(0).unwrap().poll().unwrap())
        .expect("receive completion");
    assert_eq!(got.context, 7);
    assert!(got.error.is_none(), "{:?}", got.error);
    let e = b.av.remove(&[kb], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EBUSY, "{e}");
    drop(sep);
    b.av.remove(&[kb], FI_AUTH_KEY).unwrap();
}

/// The keys of a scalable endpoint are the endpoint's, shared by all its contexts: a grant
/// asked of another context is refused with an error that says where to ask, and changes
/// nothing; the grant through context 0 lets the key's JobID reach receive context 1.
#[test]
fn a_grant_asked_of_a_scalable_endpoints_context_is_refused_and_names_context_0() {
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, |_| {}, 0);
    let mut b = host(&fabric, 1, |_| {}, 0);
    // A reaches B's receive contexts: an AV with a receive-context bit.
    a.av = a
        .nic
        .open_av(AvAttr {
            count: 4,
            job_id: OWN_JOB,
            auth_key_size: FI_AV_AUTH_KEY,
            rx_ctx_bits: 1,
            ..AvAttr::default()
        })
        .expect("open AV");
    let mut ea = endpoint(&a, AddressingMode::Relative);
    let mut sep = scalable(&b);
    // Inserted after the endpoint was enabled: it needs a grant.
    let kb = b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let e = sep
        .rx_context(1)
        .unwrap()
        .grant_auth_key(&b.av, kb)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL);
    assert!(
        e.message.contains("context 0"),
        "the error says where a grant goes: {e}"
    );
    assert!(sep.rx_context(0).unwrap().auth_key_slots().is_empty());
    sep.rx_context(0)
        .unwrap()
        .grant_auth_key(&b.av, kb)
        .unwrap();

    let ka = a.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    // Inserted after A's endpoint was enabled: granted to it explicitly, or its sends
    // through the key would be refused (interface 1.16).
    ea.grant_auth_key(&a.av, ka).unwrap();
    let bytes = sep.address().unwrap().to_bytes().unwrap();
    let mut fi = [ka];
    assert_eq!(
        a.av.insert(&bytes, 1, Some(&mut fi), FI_AUTH_KEY).unwrap(),
        1
    );
    let rx = sep.rx_context(1).unwrap();
    rx.post_recv(b.pool.alloc().unwrap(), 9).unwrap();
    send(
        &mut a,
        &mut ea,
        uet_av::fi_rx_addr(fi[0], 1, 1),
        b"ctx 1",
        1,
    );
    let sent = next(&mut ea).expect("send completion");
    assert!(sent.error.is_none(), "{:?}", sent.error);
    let got = (0..16)
        .find_map(|_| sep.rx_context(1).unwrap().poll().unwrap())
        .expect("receive completion on context 1");
    assert_eq!(got.context, 9);
    assert_eq!(got.buffer.unwrap().to_vec().unwrap(), b"ctx 1");
}

#[test]
fn nic_auth_table_reads_back_as_the_host_holds_it() {
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |_| {}, FI_AV_USER_ID);
    assert_eq!(h.nic.capabilities().auth_key_slots, 64);
    let keys: Vec<FiAddr> = (0..5)
        .map(|j| h.av.insert_auth_key(&key(0x100 + j), 0).unwrap())
        .collect();
    h.av.remove(&[keys[1]], FI_AUTH_KEY).unwrap();
    h.av.set_user_id(keys[3], 0xABCD, FI_AUTH_KEY).unwrap();
    let _ep = endpoint(&h, AddressingMode::Relative);
    let mut nic = [AuthKeyEntry::default(); 64];
    h.av.nic_mut().read_auth_keys(0, &mut nic).unwrap();
    let host: Vec<_> = h.av.auth_keys().collect();
    assert_eq!(host.len(), 4);
    for k in &host {
        let s = nic[usize::from(k.slot)];
        assert!(s.is_valid());
        assert_eq!(s.job_id.get(), k.job_id);
        assert_eq!(s.source.get(), k.source);
        assert_eq!(s.grants.get(), 1, "the endpoint holds every key");
        assert_eq!(
            s.source.get(),
            if k.handle == keys[3] {
                0xABCD
            } else {
                FI_ADDR_NOTAVAIL
            }
        );
    }
    let valid = nic.iter().filter(|s| s.is_valid()).count();
    assert_eq!(valid, host.len(), "the NIC holds nothing the host does not");
    assert!(h.av.verify_auth_keys().unwrap().is_empty());
    assert!(h.av.verify_nic().unwrap().is_empty());
}

#[test]
fn user_ids_and_entries_report_the_source() {
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, |_| {}, 0);
    let mut b = host(&fabric, 1, |_| {}, FI_AV_USER_ID);
    let mut ea = endpoint(&a, AddressingMode::Relative);
    let kb = b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let mut eb = endpoint(&b, AddressingMode::Relative);
    let ka = a.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    // Inserted after A's endpoint was enabled: granted to it explicitly, or its sends
    // through the key would be refused (interface 1.16).
    ea.grant_auth_key(&a.av, ka).unwrap();
    let to_b = insert(&mut a.av, &eb, Some(ka));
    for i in 0..3 {
        recv(&mut b, &mut eb, i);
    }
    // FI_AV_USER_ID: the key reports FI_ADDR_NOTAVAIL until it has a user id...
    send(&mut a, &mut ea, to_b, b"1", 1);
    assert_eq!(next(&mut eb).unwrap().src_addr, FI_ADDR_NOTAVAIL);
    b.av.set_user_id(kb, 0x5EED, FI_AUTH_KEY).unwrap();
    send(&mut a, &mut ea, to_b, b"2", 2);
    assert_eq!(next(&mut eb).unwrap().src_addr, 0x5EED);
    // ...and once the sender is in B's AV against the key, its entry (user id) is reported.
    let a_in_b = insert(&mut b.av, &ea, Some(kb));
    b.av.set_user_id(a_in_b, 0xA1, 0).unwrap();
    send(&mut a, &mut ea, to_b, b"3", 3);
    assert_eq!(next(&mut eb).unwrap().src_addr, 0xA1);
    for _ in 0..3 {
        assert!(next(&mut ea).unwrap().error.is_none());
    }
}

#[test]
fn auth_key_admin_commands_check_their_input() {
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |c| c.auth_key_slots = 2, 0);
    let mut other = host(&fabric, 1, |_| {}, 0);
    assert_eq!(h.nic.capabilities().auth_key_slots, 2);
    let av_handle = h.av.nic().table().handle();
    let add = |nic: &Nic, av: u32, job: u32| {
        let mut body = AuthKeyAddBody::new_zeroed();
        body.job_id = U32::new(job);
        nic.admin_command(Command::AuthKeyAdd { av, body })
    };
    // AUTH_KEY_ADD: unknown AV; then the table fills.
    assert_eq!(
        status(add(&h.nic, 99, 1).unwrap_err()),
        Status::InvalidHandle
    );
    assert_eq!(add(&h.nic, av_handle, 1).unwrap().result0, 0);
    assert_eq!(add(&h.nic, av_handle, 2).unwrap().result0, 1);
    assert_eq!(
        status(add(&h.nic, av_handle, 3).unwrap_err()),
        Status::NoResources
    );
    // The AV sees the NIC full: FI_ENOSPC, nothing kept.
    let e = h.av.insert_auth_key(&key(5), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOSPC);
    assert_eq!(h.av.auth_keys().count(), 0);
    // AUTH_KEY_REMOVE / AUTH_KEY_SOURCE of a free or impossible slot.
    for slot in [5, 70_000] {
        assert_eq!(
            status(
                h.nic
                    .admin_command(Command::AuthKeyRemove {
                        slot,
                        body: AuthKeyRemoveBody::unchecked(),
                    })
                    .unwrap_err()
            ),
            Status::InvalidHandle
        );
        let body = AuthKeySourceBody::new_zeroed();
        assert_eq!(
            status(
                h.nic
                    .admin_command(Command::AuthKeySource { slot, body })
                    .unwrap_err()
            ),
            Status::InvalidHandle
        );
    }
    // AUTH_KEY_READ past the table.
    let mut rb = RangeBody::new_zeroed();
    rb.buf = U64::new(0x1000);
    rb.len = U32::new(24 * 2);
    rb.first = U32::new(1);
    rb.count = U32::new(2);
    assert_eq!(
        status(h.nic.admin_command(Command::AuthKeyRead(rb)).unwrap_err()),
        Status::IndexOutOfRange
    );
    // ENDPOINT_AUTH_KEYS: unknown endpoint, a bit beyond the table, a free slot, a slot of
    // another function's... AV (here: an endpoint bound to no AV).
    let ep = endpoint(&h, AddressingMode::Relative);
    let grant = |endpoint: u32, slots: &[u16]| {
        h.nic.admin_command(Command::EndpointAuthKeys {
            endpoint,
            body: EndpointAuthKeysBody::granting(slots.iter().copied()),
        })
    };
    let epn = u32::from(ep.handle());
    assert_eq!(status(grant(77, &[0]).unwrap_err()), Status::InvalidHandle);
    assert_eq!(status(grant(epn, &[2]).unwrap_err()), Status::InvalidField);
    assert_eq!(grant(epn, &[0, 1]).unwrap().result0, 2);
    assert_eq!(grant(epn, &[]).unwrap().result0, 0);
    let bare = h
        .nic
        .endpoint(EndpointAttr::default(), None)
        .expect("endpoint without AV");
    assert_eq!(
        status(grant(u32::from(bare.handle()), &[0]).unwrap_err()),
        Status::InvalidHandle
    );
    // A slot owned by another AV of the function.
    let av2 = h
        .nic
        .open_av(AvAttr {
            count: 4,
            ..AvAttr::default()
        })
        .unwrap();
    h.nic
        .admin_command(Command::AuthKeyRemove {
            slot: 1,
            body: AuthKeyRemoveBody::unchecked(),
        })
        .unwrap();
    assert_eq!(
        add(&h.nic, av2.nic().table().handle(), 9).unwrap().result0,
        1
    );
    assert_eq!(status(grant(epn, &[1]).unwrap_err()), Status::InvalidHandle);
    // AV_WRITE of an entry naming a slot of another AV, or a free slot.
    let peer = *other
        .nic
        .endpoint(EndpointAttr::default(), Some(&other.av))
        .unwrap()
        .address();
    for slot in [1u16, 7] {
        let rec = AvWriteRecord {
            index: 0.into(),
            reserved: Default::default(),
            entry: NicAvEntry::for_peer(&peer, OWN_JOB).with_auth_key(slot),
        };
        // One record: the AV write window, whose drop counter reports the refusal.
        let drops = h.nic.bar0().read(AV_WRITE_DROPS);
        let e = h.av.nic_mut().write_entries(&[rec]).unwrap_err();
        assert!(e.to_string().contains("refused"), "slot {slot}: {e}");
        assert_eq!(h.nic.bar0().read(AV_WRITE_DROPS), drops + 1);
        // Two: AV_WRITE, refused whole.
        assert!(
            h.av.nic_mut().write_entries(&[rec, rec]).is_err(),
            "slot {slot}"
        );
    }
    // Destroying av2 frees its slot.
    drop(av2);
    assert_eq!(add(&h.nic, av_handle, 10).unwrap().result0, 1);
    let _ = &mut other;
}

#[test]
fn av_open_without_auth_key_slots_is_enosys() {
    let fabric = Fabric::new();
    let f = fabric
        .add_nic({
            let mut c = NicConfig::new(nic_addr(0));
            c.auth_key_slots = 0;
            c
        })
        .unwrap();
    let nic = Nic::open(Arc::new(SimDevice::new(f))).unwrap();
    let e = nic
        .open_av(AvAttr {
            count: 4,
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        })
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENOSYS);
    assert!(nic.open_av(AvAttr::default()).is_ok());
}

/// The NIC uses an auth-key slot only for the entries of the AV that owns it. A slot removed
/// behind an AV's back and given to another AV of the NIC, with the same JobID and source, is
/// a mismatch for the first AV's verify_auth_keys, and none for the second's.
#[test]
fn verify_auth_keys_checks_the_slot_owner() {
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |_| {}, 0);
    let mut other = h
        .nic
        .open_av(AvAttr {
            count: 16,
            job_id: OWN_JOB,
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        })
        .expect("a second AV");
    h.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let slot = h.av.auth_keys().next().unwrap().slot;
    assert!(h.av.verify_auth_keys().unwrap().is_empty());
    h.av.nic_mut().remove_auth_key(slot, KEY_JOB).unwrap();
    other.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    assert_eq!(
        other.auth_keys().next().unwrap().slot,
        slot,
        "the slot went over"
    );
    let m = h.av.verify_auth_keys().unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].nic.av.get(), other.nic().table().handle());
    assert!(other.verify_auth_keys().unwrap().is_empty());
}

/// On the simulated NIC: an AUTH_KEY_REMOVE that times out removes the key from the AV all the
/// same (`FI_ETIMEDOUT`); once the device answers, a new key and the NIC's table agree.
#[test]
fn a_timed_out_key_removal_removes_the_key_from_the_av() {
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |_| {}, 0);
    let k = h.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    h.nic
        .set_admin_timeout(std::time::Duration::from_millis(50));
    h.nic
        .bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    let e = h.av.remove(&[k], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ETIMEDOUT, "{e}");
    assert_eq!(h.av.auth_keys().count(), 0);
    h.nic.bar0().write(
        uet_regs::DEV_CTRL,
        uet_regs::DevCtrl::new().with_enable(true),
    );
    h.av.insert_auth_key(&key(KEY_JOB + 1), 0).unwrap();
    assert!(h.av.verify_auth_keys().unwrap().is_empty());
}

/// The NIC's auth-key table, every slot.
fn nic_slots(h: &mut Host) -> Vec<AuthKeyEntry> {
    let n = usize::from(h.nic.capabilities().auth_key_slots);
    let mut slots = vec![AuthKeyEntry::default(); n];
    h.av.nic_mut().read_auth_keys(0, &mut slots).unwrap();
    slots
}

/// On the simulated NIC: an AUTH_KEY_ADD that times out fails the insert (`FI_ETIMEDOUT`, no
/// key); when the device runs it late, the driver undoes it with an owner-checked
/// AUTH_KEY_REMOVE ahead of the next command, so the slot does not stay taken until the AV
/// closes.
#[test]
fn a_late_key_insert_is_undone() {
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |_| {}, 0);
    h.nic
        .set_admin_timeout(std::time::Duration::from_millis(50));
    h.nic
        .bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    let e = h.av.insert_auth_key(&key(KEY_JOB), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ETIMEDOUT, "{e}");
    assert_eq!(h.av.auth_keys().count(), 0);
    // The device answers again and runs the held AUTH_KEY_ADD, taking slot 0 behind the AV's
    // back. The next command collects its completion and sends the undo ahead of itself, so
    // the next key finds slot 0 free again (without the undo it would get slot 1).
    h.nic.bar0().write(
        uet_regs::DEV_CTRL,
        uet_regs::DevCtrl::new().with_enable(true),
    );
    h.nic.set_admin_timeout(std::time::Duration::from_secs(5));
    h.av.insert_auth_key(&key(KEY_JOB + 1), 0).unwrap();
    assert_eq!(h.av.auth_keys().next().unwrap().slot, 0);
    let in_use: Vec<(usize, u32)> = nic_slots(&mut h)
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_valid())
        .map(|(i, s)| (i, s.job_id.get()))
        .collect();
    assert_eq!(in_use, vec![(0, KEY_JOB + 1)], "the late slot was freed");
    assert!(h.av.verify_auth_keys().unwrap().is_empty());
}

/// AUTH_KEY_REMOVE with the owner check removes a slot only while the named AV table owns it
/// with the named JobID; the driver's removes use it, so a key goes only from its own slot.
#[test]
fn an_owner_checked_key_removal_takes_only_its_own_slot() {
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |_| {}, 0);
    let k = h.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let av = h.av.nic().table().handle();
    let slot = h.av.auth_keys().next().unwrap().slot;
    let remove = |h: &Host, av: u32, job: u32| {
        h.nic.admin_command(Command::AuthKeyRemove {
            slot: u32::from(slot),
            body: AuthKeyRemoveBody::owned_by(av, job),
        })
    };
    for (owner, job) in [(av + 1, KEY_JOB), (av, KEY_JOB + 1)] {
        assert_eq!(
            status(remove(&h, owner, job).unwrap_err()),
            Status::InvalidHandle
        );
    }
    assert!(
        nic_slots(&mut h)[usize::from(slot)].is_valid(),
        "nothing removed"
    );
    // The AV's own removal passes the check.
    h.av.remove(&[k], FI_AUTH_KEY).unwrap();
    assert!(!nic_slots(&mut h)[usize::from(slot)].is_valid());
    // The NIC table's remove names the JobID: a slot holding another is refused, and kept.
    // The NIC's state, not the caller's argument, is at fault: FI_EIO, as from the in-memory
    // table.
    let k = h.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let e =
        h.av.nic_mut()
            .remove_auth_key(slot, KEY_JOB + 1)
            .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert!(e.message.contains("not this AV's key"), "{e}");
    let named = format!(
        "slot {slot} is not this AV's key for JobID {:#x}:",
        KEY_JOB + 1
    );
    assert!(e.message.contains(&named), "{e}");
    assert!(nic_slots(&mut h)[usize::from(slot)].is_valid());
    assert!(h.av.verify_auth_keys().unwrap().is_empty());
    // The same through fi_av_remove: the slot now holds another JobID of this AV (as another
    // process's key might), so the key's removal is refused with FI_EIO and the key kept.
    let unchecked = h.nic.admin_command(Command::AuthKeyRemove {
        slot: u32::from(slot),
        body: AuthKeyRemoveBody::unchecked(),
    });
    unchecked.unwrap();
    let mut body = AuthKeyAddBody::new_zeroed();
    body.job_id = U32::new(KEY_JOB + 1);
    let added = h
        .nic
        .admin_command(Command::AuthKeyAdd { av, body })
        .unwrap();
    assert_eq!(added.result0, u32::from(slot));
    let e = h.av.remove(&[k], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert_eq!(h.av.auth_keys().count(), 1, "the key stays held");
    assert!(
        nic_slots(&mut h)[usize::from(slot)].is_valid(),
        "the other key stays"
    );
    assert!(
        !h.av.verify_auth_keys().unwrap().is_empty(),
        "the difference shows"
    );
}

/// A command that finds the admin ring full of commands the device has not answered is not
/// submitted, so it is refused (`FI_EAGAIN`), not in doubt: a key's removal leaves the key
/// held (its NIC slot is still the AV's), an insert is rolled back with nothing left to
/// rewrite, and a remove leaves the address inserted. All go through once the device answers
/// again.
#[test]
fn a_command_the_full_admin_ring_kept_back_is_refused_not_in_doubt() {
    use uet_driver::admin::ADMIN_RING_LOG2;
    use uet_driver::uet_fwif::admin::Opcode;
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |_| {}, 0);
    let k = h.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    // An address to insert; its endpoint goes, so that the key is free to remove.
    let peer = endpoint(&h, AddressingMode::Relative)
        .address()
        .to_bytes()
        .unwrap();
    let mut first = [0];
    assert_eq!(h.av.insert(&peer, 1, Some(&mut first), 0).unwrap(), 1);
    h.nic.set_admin_timeout(std::time::Duration::from_millis(1));
    h.nic
        .bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    // The device stalls with the ring full: ring size − 1 commands time out, unanswered.
    let unanswered = Command::EndpointDestroy { endpoint: 0xFFFF };
    for _ in 0..(1usize << ADMIN_RING_LOG2) - 1 {
        let e = h.nic.admin_command(unanswered).unwrap_err();
        assert!(matches!(e, DriverError::AdminTimeout { .. }), "{e}");
    }
    let e = h.nic.admin_command(unanswered).unwrap_err();
    assert!(
        matches!(e, DriverError::AdminRingFull { opcode, .. }
            if opcode == Opcode::EndpointDestroy as u8),
        "{e:?}"
    );
    assert!(e.to_string().contains("not submitted"), "{e}");
    assert_eq!(e.errno(), FiErrno::FI_EAGAIN);

    let e = h.av.remove(&[k], FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    assert_eq!(h.av.auth_keys().count(), 1, "the NIC never saw the removal");
    let e = h.av.insert(&peer, 1, None, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    assert!(e.message.contains("not submitted"), "{e}");
    assert_eq!(h.av.len(), 1, "rolled back");
    assert_eq!(h.av.entries_in_doubt(), 0, "nothing to rewrite");
    let e = h.av.remove(&first, 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EAGAIN, "{e}");
    assert_eq!(h.av.len(), 1, "still inserted");

    h.nic.bar0().write(
        uet_regs::DEV_CTRL,
        uet_regs::DevCtrl::new().with_enable(true),
    );
    h.nic.set_admin_timeout(std::time::Duration::from_secs(5));
    let mut fi = [0];
    assert_eq!(h.av.insert(&peer, 1, Some(&mut fi), 0).unwrap(), 1);
    assert_eq!(fi[0], 1, "the rolled-back index is the lowest free again");
    h.av.remove(&first, 0).unwrap();
    h.av.remove(&[k], FI_AUTH_KEY).unwrap();
    assert_eq!(h.av.auth_keys().count(), 0);
    assert!(h.av.verify_nic().unwrap().is_empty());
    assert!(h.av.verify_auth_keys().unwrap().is_empty());
}

/// A request accepted through an auth-key slot granted to the endpoint reports that slot's
/// source, not that of another slot of the AV's table holding the same JobID: one no key of
/// the AV names (what an AUTH_KEY_ADD run after the driver gave up on it leaves on a NIC that
/// cannot undo it), which sits lower in the table and which `fi_av_set_user_id` never
/// reaches.
#[test]
fn the_source_of_a_request_is_that_of_the_slot_it_was_accepted_through() {
    let fabric = Fabric::new();
    let mut a = host(&fabric, 0, |_| {}, 0);
    let mut b = host(&fabric, 1, |_| {}, FI_AV_USER_ID);
    let mut ea = endpoint(&a, AddressingMode::Relative);
    let mut body = AuthKeyAddBody::new_zeroed();
    body.job_id = U32::new(KEY_JOB);
    body.source = U64::new(0xBAD);
    let av = b.av.nic().table().handle();
    let stray = b
        .nic
        .admin_command(Command::AuthKeyAdd { av, body })
        .unwrap();
    assert_eq!(stray.result0, 0);
    let kb = b.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    b.av.set_user_id(kb, 0x5EED, FI_AUTH_KEY).unwrap();
    let mut eb = endpoint(&b, AddressingMode::Relative);
    assert_eq!(eb.auth_key_slots(), [1]);
    let ka = a.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    // Inserted after A's endpoint was enabled: granted to it explicitly, or its sends
    // through the key would be refused (interface 1.16).
    ea.grant_auth_key(&a.av, ka).unwrap();
    let to_b = insert(&mut a.av, &eb, Some(ka));
    recv(&mut b, &mut eb, 1);
    send(&mut a, &mut ea, to_b, b"1", 1);
    assert_eq!(next(&mut eb).unwrap().src_addr, 0x5EED);
    assert!(next(&mut ea).unwrap().error.is_none());
}

/// A key whose NIC slot was freed behind the AV's back (here by an unchecked AUTH_KEY_REMOVE
/// of the function): `fi_av_set_user_id` with `FI_AUTH_KEY` is refused by the NIC with
/// `FI_EIO`, as a removal of the key is — the handle is the AV's, the NIC's state is what
/// differs — and the key keeps its user id.
#[test]
fn a_user_id_for_a_key_whose_slot_the_nic_lost_is_an_io_error() {
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |_| {}, FI_AV_USER_ID);
    let k = h.av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let slot = h.av.auth_keys().next().unwrap().slot;
    h.nic
        .admin_command(Command::AuthKeyRemove {
            slot: u32::from(slot),
            body: AuthKeyRemoveBody::unchecked(),
        })
        .unwrap();
    let e = h.av.set_user_id(k, 0x5EED, FI_AUTH_KEY).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert_eq!(h.av.auth_keys().next().unwrap().user_id, None, "unchanged");
}

/// An endpoint of `av`, granted its key's `slot`, dropped while the NIC answers nothing (its
/// ENDPOINT_DESTROY goes unanswered); the NIC answers again after, running the destroy late.
fn drop_an_endpoint_granted_unanswered(nic: &Nic, av: &Av, slot: u16) {
    let ep = nic
        .endpoint(
            EndpointAttr {
                job_id: OWN_JOB,
                ..EndpointAttr::default()
            },
            Some(av),
        )
        .expect("endpoint");
    assert_eq!(ep.auth_key_slots(), &[slot]);
    nic.set_admin_timeout(std::time::Duration::from_millis(50));
    nic.bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    drop(ep);
    nic.bar0().write(
        uet_regs::DEV_CTRL,
        uet_regs::DevCtrl::new().with_enable(true),
    );
}

/// An endpoint granted a key is dropped while the NIC does not answer: its ENDPOINT_DESTROY
/// times out, and the device runs it late. The AV is then closed (AV_DESTROY, behind the late
/// destroy, frees its slots) and another AV's first key takes the freed slot: no endpoint is
/// granted that key, so it is removed, not refused `FI_EBUSY` for the gone endpoint's grant.
#[test]
fn a_slot_freed_with_its_av_carries_no_grant_to_the_next_avs_key() {
    let fabric = Fabric::new();
    let Host { nic, mut av, .. } = host(&fabric, 0, |_| {}, 0);
    av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let slot = av.auth_keys().next().unwrap().slot;
    drop_an_endpoint_granted_unanswered(&nic, &av, slot);
    av.close().map_err(|e| e.error).expect("AV closed");
    let mut other = nic
        .open_av(AvAttr {
            count: 16,
            job_id: OWN_JOB,
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        })
        .expect("second AV");
    let k = other.insert_auth_key(&key(KEY_JOB + 1), 0).unwrap();
    assert_eq!(
        other.auth_keys().next().unwrap().slot,
        slot,
        "the freed slot"
    );
    other
        .remove(&[k], FI_AUTH_KEY)
        .expect("no endpoint uses the key");
    assert_eq!(other.auth_keys().count(), 0);
}

/// An endpoint granted the AV's key whose ENDPOINT_DESTROY times out and runs late: once the
/// NIC has run it no endpoint is granted the key, and the AV removes the key; the grant the
/// gone endpoint held is not counted for ever, refusing the removal `FI_EBUSY` while no
/// endpoint exists.
#[test]
fn a_key_granted_to_an_endpoint_destroyed_late_can_be_removed() {
    let fabric = Fabric::new();
    let Host { nic, mut av, .. } = host(&fabric, 0, |_| {}, 0);
    let k = av.insert_auth_key(&key(KEY_JOB), 0).unwrap();
    let slot = av.auth_keys().next().unwrap().slot;
    drop_an_endpoint_granted_unanswered(&nic, &av, slot);
    av.remove(&[k], FI_AUTH_KEY)
        .expect("no endpoint is granted the key");
    assert_eq!(av.auth_keys().count(), 0);
    let mut slots = [AuthKeyEntry::default(); 1];
    av.nic_mut()
        .read_auth_keys(slot, &mut slots)
        .expect("AUTH_KEY_READ");
    assert!(!slots[0].is_valid(), "the slot is free on the NIC");
}

/// A key inserted into an AV whose NIC table went behind its back (here by an AV_DESTROY of
/// the function): AUTH_KEY_ADD is refused (InvalidHandle) and the insert fails with `FI_EIO`,
/// the NIC refusing, as documented for `fi_av_insert_auth_key` — not `FI_EINVAL`, which names
/// arguments of the caller's, all of them fine — and the AV holds no key.
#[test]
fn a_key_inserted_into_an_av_whose_table_the_nic_lost_is_an_io_error() {
    let fabric = Fabric::new();
    let mut h = host(&fabric, 0, |_| {}, 0);
    h.nic
        .admin_command(Command::AvDestroy {
            av: h.av.nic().table().handle(),
        })
        .unwrap();
    let e = h.av.insert_auth_key(&key(KEY_JOB), 0).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EIO, "{e}");
    assert_eq!(h.av.auth_keys().count(), 0);
}
