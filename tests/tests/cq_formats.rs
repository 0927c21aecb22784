//! Completion formats and errors as libfabric reports them: every `fi_cq_format` entry for a
//! send, a receive, a tagged receive and RMA, with `rdma/fabric.h` flag bits; `fi_cq_readerr`
//! entries for a truncated receive (olen), a target's return code (prov_errno) and a local AV
//! miss; `cq_read` failing with FI_EAVAIL until `cq_readerr` takes the error.

use std::sync::Arc;
use uet_av::FiErrno;
use uet_driver::cq::{
    FiCqDataEntry, FiCqEntry, FiCqMsgEntry, FiCqTaggedEntry, FI_MSG, FI_MULTI_RECV, FI_READ,
    FI_RECV, FI_REMOTE_CQ_DATA, FI_RMA, FI_SEND, FI_TAGGED, FI_WRITE, PROV_ERRNO_LOCAL_BASE,
};
use uet_driver::{CqEntry, CqEvent, CqFormat, DmaPool, MrAccess, MrMemory};
use uet_fwif::datapath::LocalStatus;
use uet_fwif::ReturnCode;
use uet_tests::{fabric, forged, pair_with, pattern, Node};

const JOB: u32 = 0x00_C0F0;
const KEY: u64 = 0x4B45_5900_0000_0001;

/// The flag values of `rdma/fabric.h`.
#[test]
fn flag_bits_are_libfabrics() {
    assert_eq!(FI_MSG, 1 << 1);
    assert_eq!(FI_RMA, 1 << 2);
    assert_eq!(FI_TAGGED, 1 << 3);
    assert_eq!(FI_READ, 1 << 8);
    assert_eq!(FI_WRITE, 1 << 9);
    assert_eq!(FI_RECV, 1 << 10);
    assert_eq!(FI_SEND, 1 << 11);
    assert_eq!(FI_MULTI_RECV, 1 << 16);
    assert_eq!(FI_REMOTE_CQ_DATA, 1 << 17);
    let fmts = [
        CqFormat::Context,
        CqFormat::Msg,
        CqFormat::Data,
        CqFormat::Tagged,
    ];
    let values: Vec<u32> = fmts.iter().map(|f| f.fi_value()).collect();
    assert_eq!(values, [1, 2, 3, 4], "enum fi_cq_format");
    let sizes: Vec<usize> = fmts.iter().map(|f| f.entry_size()).collect();
    assert_eq!(sizes, [8, 24, 40, 48], "sizeof on LP64");
    assert_eq!(CqFormat::default(), CqFormat::Tagged);
}

/// Every format of one event, checked against the full tagged entry it is cut from.
fn check_formats(ev: &CqEvent, full: FiCqTaggedEntry) {
    assert_eq!(
        ev.entry(CqFormat::Context),
        CqEntry::Context(FiCqEntry {
            op_context: full.op_context
        })
    );
    assert_eq!(
        ev.entry(CqFormat::Msg),
        CqEntry::Msg(FiCqMsgEntry {
            op_context: full.op_context,
            flags: full.flags,
            len: full.len,
        })
    );
    assert_eq!(
        ev.entry(CqFormat::Data),
        CqEntry::Data(FiCqDataEntry {
            op_context: full.op_context,
            flags: full.flags,
            len: full.len,
            buf: full.buf,
            data: full.data,
        })
    );
    assert_eq!(ev.entry(CqFormat::Tagged), CqEntry::Tagged(full));
    for f in [
        CqFormat::Context,
        CqFormat::Msg,
        CqFormat::Data,
        CqFormat::Tagged,
    ] {
        assert_eq!(ev.entry(f).format(), f);
        assert_eq!(ev.entry(f).op_context(), full.op_context);
    }
    assert!(ev.err_entry().is_none(), "a success has no error entry");
}

fn read_ok(node: &mut Node) -> CqEvent {
    for _ in 0..16 {
        match node.ep.cq_read() {
            Ok(ev) => return ev,
            Err(e) if e == FiErrno::FI_EAGAIN => continue,
            Err(e) => panic!("cq_read: {e:?}"),
        }
    }
    panic!("no completion")
}

#[test]
fn every_format_for_send_recv_tagged_recv_and_rma() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    // Send with remote CQ data, received untagged.
    b.post_recvs(1);
    a.send(0, b"hello formats", 0x5EED);
    let ev = read_ok(&mut a);
    check_formats(
        &ev,
        FiCqTaggedEntry {
            op_context: 0x5EED,
            flags: FI_SEND | FI_MSG,
            len: 13,
            buf: 0,
            data: 0,
            tag: 0,
        },
    );
    let ev = read_ok(&mut b);
    check_formats(
        &ev,
        FiCqTaggedEntry {
            op_context: 1000,
            flags: FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA,
            len: 13,
            buf: 0,
            data: 0x5EED,
            tag: 0,
        },
    );

    // A send without remote CQ data: no FI_REMOTE_CQ_DATA, data 0.
    b.post_recvs(1);
    let mut buf = a.pool.alloc().unwrap();
    buf.fill(b"no data").unwrap();
    a.ep.post_send(0, buf, 7, 0).unwrap();
    assert_eq!(read_ok(&mut a).entry(CqFormat::Msg).op_context(), 7);
    let ev = read_ok(&mut b);
    let CqEntry::Tagged(t) = ev.entry(CqFormat::Tagged) else {
        panic!("tagged format")
    };
    assert_eq!((t.flags, t.data), (FI_RECV | FI_MSG, 0));

    // Tagged send and receive.
    b.trecv(0xAB00, 0xFF, 42);
    a.tsend(0, b"tagged", 0xAB17, 43);
    check_formats(
        &read_ok(&mut a),
        FiCqTaggedEntry {
            op_context: 43,
            flags: FI_SEND | FI_TAGGED,
            len: 6,
            buf: 0,
            data: 0,
            tag: 0,
        },
    );
    check_formats(
        &read_ok(&mut b),
        FiCqTaggedEntry {
            op_context: 42,
            flags: FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA,
            len: 6,
            buf: 0,
            data: 43,
            tag: 0xAB17,
        },
    );

    // RMA write and read.
    let target = Arc::new(b.nic.map_dma(8192).unwrap());
    let _mr =
        b.ep.register_mr(
            MrMemory::Region(target, 0..8192),
            MrAccess::REMOTE_READ_WRITE,
            KEY,
        )
        .unwrap();
    let mut buf = a.pool.alloc().unwrap();
    let data = pattern(300, 3);
    buf.fill(&data).unwrap();
    a.ep.post_write(0, buf, 100, KEY, 51).unwrap();
    check_formats(
        &read_ok(&mut a),
        FiCqTaggedEntry {
            op_context: 51,
            flags: FI_RMA | FI_WRITE,
            len: 300,
            buf: 0,
            data: 0,
            tag: 0,
        },
    );
    a.ep.post_read(0, a.pool.alloc().unwrap(), 300, 100, KEY, 52)
        .unwrap();
    let ev = read_ok(&mut a);
    check_formats(
        &ev,
        FiCqTaggedEntry {
            op_context: 52,
            flags: FI_RMA | FI_READ,
            len: 300,
            buf: 0,
            data: 0,
            tag: 0,
        },
    );
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), data);
}

#[test]
fn the_endpoint_reads_in_its_own_format() {
    let (_f, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut a = Node::new(it.next().unwrap(), JOB, 4);
    let fb = it.next().unwrap();
    let nic = uet_tests::open_nic(&fb);
    let av = uet_tests::open_av(&nic, JOB, 4, 0);
    let mut ep = nic
        .endpoint(
            uet_driver::EndpointAttr {
                job_id: JOB,
                cq_format: CqFormat::Msg,
                ..Default::default()
            },
            Some(&av),
        )
        .unwrap();
    assert_eq!(ep.cq_format(), CqFormat::Msg);
    let pool = DmaPool::new(&nic, 256, 4).unwrap();
    ep.post_recv(pool.alloc().unwrap(), 9).unwrap();
    ep.post_recv(pool.alloc().unwrap(), 10).unwrap();
    let k = a.insert(&ep.address().to_bytes().unwrap());
    a.send(k, b"msg format", 1);
    a.send(k, b"context format", 2);
    let (entry, ev) = ep.cq_read_entry().unwrap();
    assert_eq!(
        entry,
        CqEntry::Msg(FiCqMsgEntry {
            op_context: 9,
            flags: FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA,
            len: 10,
        })
    );
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"msg format");
    ep.set_cq_format(CqFormat::Context);
    let (entry, _) = ep.cq_read_entry().unwrap();
    assert_eq!(entry, CqEntry::Context(FiCqEntry { op_context: 10 }));
    assert_eq!(ep.cq_read_entry().unwrap_err(), FiErrno::FI_EAGAIN);
}

#[test]
fn a_truncated_receive_reads_as_an_error_with_olen() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let small = DmaPool::new(&b.nic, 64, 2).unwrap();
    b.ep.post_recv(small.alloc().unwrap(), 31).unwrap();
    b.post_recvs(1);
    let data = pattern(100, 5);
    a.send(0, &data, 77);
    a.send(0, b"after", 78);
    assert_eq!(read_ok(&mut a).context, 77, "the sender's side succeeded");
    assert_eq!(read_ok(&mut a).context, 78);

    // read -> FI_EAVAIL (and again: the error stays at the head), then readerr.
    assert_eq!(b.ep.cq_read().unwrap_err(), FiErrno::FI_EAVAIL);
    assert_eq!(b.ep.cq_read().unwrap_err(), FiErrno::FI_EAVAIL);
    let ev = b.ep.cq_readerr().expect("the error");
    let e = ev.err_entry().expect("an error entry");
    assert_eq!(e.op_context, 31);
    assert_eq!(e.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
    assert_eq!((e.len, e.olen), (64, 36));
    assert_eq!(e.data, 77);
    assert_eq!(e.buf, 0);
    assert_eq!(e.err, FiErrno::FI_ETRUNC);
    assert_eq!(
        e.prov_errno,
        PROV_ERRNO_LOCAL_BASE + LocalStatus::Truncated as i32
    );
    assert!(
        e.err_data.contains("longer than the receive buffer"),
        "{}",
        e.err_data
    );
    assert_eq!(
        ev.buffer.unwrap().to_vec().unwrap(),
        data[..64],
        "delivered part"
    );

    // The next completion is a success: readerr leaves it for read.
    assert_eq!(b.ep.cq_readerr().unwrap_err(), FiErrno::FI_EAGAIN);
    let ev = b.ep.cq_read().unwrap();
    assert_eq!(ev.context, 1000);
    assert_eq!(b.ep.cq_read().unwrap_err(), FiErrno::FI_EAGAIN);
    assert_eq!(b.ep.cq_readerr().unwrap_err(), FiErrno::FI_EAGAIN);
}

#[test]
fn a_targets_return_code_is_the_prov_errno() {
    let (_f, fns) = fabric(2);
    let mut it = fns.into_iter();
    let mut sender = Node::new(it.next().unwrap(), 1, 4);
    let target = Node::new(it.next().unwrap(), 1, 4);
    let bad = forged(target.ep.address(), |x| x.pid_on_fep += 100);
    let k = sender.insert(&bad);
    sender.send(k, b"no such process", 12);
    let mut first = None;
    for _ in 0..16 {
        match sender.ep.cq_read() {
            Err(e) if e == FiErrno::FI_EAGAIN => continue,
            other => {
                first = Some(other);
                break;
            }
        }
    }
    assert_eq!(first.unwrap().unwrap_err(), FiErrno::FI_EAVAIL);
    let ev = sender.ep.cq_readerr().unwrap();
    let e = ev.err_entry().unwrap();
    assert_eq!(e.op_context, 12);
    assert_eq!(e.flags, FI_SEND | FI_MSG);
    assert_eq!(e.err, FiErrno::FI_EADDRNOTAVAIL);
    assert_eq!(e.prov_errno, ReturnCode::BadPid as i32);
    assert_eq!(e.prov_errno, 0x1A);
    assert_eq!(e.olen, 0);
    assert!(e.err_data.contains("RC_BAD_PID"), "{}", e.err_data);
    // The buffer comes back with the error event.
    assert!(ev.buffer.is_some());
}

#[test]
fn a_local_av_miss_reads_as_an_error_and_poll_still_returns_everything() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    b.post_recvs(2);
    a.send(3, b"to nobody", 21); // index 3 was never inserted
    a.send(0, b"to b", 22);
    assert_eq!(a.ep.cq_read().unwrap_err(), FiErrno::FI_EAVAIL);
    let ev = a.ep.cq_readerr().unwrap();
    let e = ev.err_entry().unwrap();
    assert_eq!((e.op_context, e.flags), (21, FI_SEND | FI_MSG));
    assert_eq!(e.err, FiErrno::FI_EADDRNOTAVAIL);
    assert_eq!(
        e.prov_errno,
        PROV_ERRNO_LOCAL_BASE + LocalStatus::AddrNotAvail as i32
    );
    assert!(e.err_data.contains("AV"), "{}", e.err_data);
    assert_eq!(read_ok(&mut a).context, 22);

    // poll() keeps returning errors and successes alike, also after cq_read set one aside.
    a.send(3, b"again", 23);
    a.send(0, b"and b", 24);
    assert_eq!(a.ep.cq_read().unwrap_err(), FiErrno::FI_EAVAIL);
    let ev = a.ep.poll().unwrap().expect("the held error first");
    assert_eq!(ev.context, 23);
    assert_eq!(ev.error.unwrap().local, LocalStatus::AddrNotAvail);
    assert_eq!(a.ep.poll().unwrap().unwrap().context, 24);
}
