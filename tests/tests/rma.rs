//! RMA write and read into memory regions: byte-exact at 1 B, MTU + 1 and 64 KiB; wrong key,
//! out-of-range offsets and missing access are refused with RC_PERM_VIOLATION at the target
//! (counted, memory untouched) and FI_EACCES at the initiator.

use std::sync::Arc;
use uet_av::FiErrno;
use uet_driver::{CqOp, DmaPool, DriverError, MrAccess, MrMemory, MrRegError};
use uet_fwif::admin::Status;
use uet_fwif::datapath::{CompletionKind, LocalStatus};
use uet_fwif::ReturnCode;
use uet_regs::{RX_BYTES, RX_PACKETS, RX_PERM_VIOLATION, TX_PACKETS};
use uet_tests::{pair_with, pattern, Node};

const JOB: u32 = 0x00_0DAA;
const KEY: u64 = 0xC0DE_0000_0000_0001;
const REGION: usize = 128 * 1024;

fn expect_perm_violation(a: &mut Node, context: u64) {
    let ev = a
        .next_completion()
        .expect("the initiator gets a completion");
    assert_eq!(ev.context, context);
    let err = ev.error.expect("an error completion");
    assert_eq!(err.local, LocalStatus::Remote);
    assert_eq!(err.return_code, Some(ReturnCode::PermViolation));
    assert_eq!(err.errno, FiErrno::FI_EACCES);
}

#[test]
fn write_and_read_are_byte_exact_at_1_b_mtu_plus_1_and_64_kib() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let mtu = a.ep.mtu();
    let target = Arc::new(b.nic.map_dma(REGION).unwrap());
    let mr =
        b.ep.register_mr(
            MrMemory::Region(target.clone(), 0..REGION),
            MrAccess::REMOTE_READ_WRITE,
            KEY,
        )
        .unwrap();
    assert_eq!(mr.key(), KEY);
    assert_eq!(mr.resource_index(), b.ep.resource_indices().start);
    assert_eq!(mr.len(), REGION);
    let pool = DmaPool::new(&a.nic, 64 * 1024, 4).unwrap();
    for (i, (len, offset)) in [(1usize, 5u64), (mtu + 1, 333), (64 * 1024, 16384)]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8 + 1);
        let mut buf = pool.alloc().unwrap();
        buf.fill(&data).unwrap();
        let packets = a.counter(TX_PACKETS);
        a.ep.post_write(0, buf, offset, KEY, 100 + i as u64)
            .unwrap();
        let ev = a.next_completion().expect("write completes");
        assert_eq!(
            (ev.kind, ev.op, ev.context),
            (CompletionKind::Send, CqOp::Write, 100 + i as u64)
        );
        assert!(ev.error.is_none(), "len {len}: {:?}", ev.error);
        assert_eq!(ev.len, len);
        assert_eq!(a.counter(TX_PACKETS) - packets, len.div_ceil(mtu) as u64);
        // At the target: exactly those bytes, at exactly that offset, and no completion.
        let mut got = vec![0u8; len + 2];
        mr.read(offset as usize - 1, &mut got).unwrap();
        assert_eq!(got[0], 0, "byte before untouched");
        assert_eq!(&got[1..=len], &data[..], "len {len}");
        assert_eq!(got[len + 1], 0, "byte after untouched");
        assert!(
            b.next_completion().is_none(),
            "RMA completes only at the initiator"
        );

        // Read it back.
        let packets = a.counter(TX_PACKETS);
        let (accepted, payload) = (b.counter(RX_PACKETS), b.counter(RX_BYTES));
        let mut dst = pool.alloc().unwrap();
        dst.fill(&vec![0xEE; len]).unwrap();
        a.ep.post_read(0, dst, len, offset, KEY, 200 + i as u64)
            .unwrap();
        let ev = a.next_completion().expect("read completes");
        assert_eq!((ev.op, ev.context), (CqOp::Read, 200 + i as u64));
        assert!(ev.error.is_none(), "len {len}: {:?}", ev.error);
        assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), data, "len {len}");
        assert_eq!(a.counter(TX_PACKETS) - packets, len.div_ceil(mtu) as u64);
        // The target accepted each READ request the initiator counted; they carry no payload.
        assert_eq!(
            b.counter(RX_PACKETS) - accepted,
            a.counter(TX_PACKETS) - packets,
            "len {len}"
        );
        assert_eq!(b.counter(RX_BYTES), payload);
    }
    let ca = a.ep.counters().unwrap();
    let cb = b.ep.counters().unwrap();
    let total = (1 + mtu + 1 + 64 * 1024) as u64;
    assert_eq!((ca.rma_writes, ca.rma_write_bytes), (3, total));
    assert_eq!((ca.rma_reads, ca.rma_read_bytes), (3, total));
    assert_eq!(cb.rma_target_write_bytes, total);
    assert_eq!(cb.rma_target_read_bytes, total);
    assert_eq!(cb.rx_messages, 0);
}

#[test]
fn wrong_key_range_or_access_is_a_perm_violation_and_touches_nothing() {
    let (_f, mut a, b) = pair_with(JOB, |_| {});
    let mtu = a.ep.mtu();
    let wo_mem = Arc::new(b.nic.map_dma(4 * mtu).unwrap());
    let write_only =
        b.ep.register_mr(
            MrMemory::Region(wo_mem.clone(), 0..4 * mtu),
            MrAccess::REMOTE_WRITE,
            KEY,
        )
        .unwrap();
    let ro_key = KEY + 1;
    let ro_buf = b.pool.alloc().unwrap();
    let read_only =
        b.ep.register_mr(ro_buf, MrAccess::REMOTE_READ, ro_key)
            .unwrap();
    // Known contents on both regions, to compare after.
    let before_wo = pattern(4 * mtu, 42);
    write_only.write(0, &before_wo).unwrap();
    let before_ro = pattern(read_only.len(), 43);
    read_only.write(0, &before_ro).unwrap();

    let pool = DmaPool::new(&a.nic, 4 * mtu, 8).unwrap();
    let write = |a: &mut Node, len: usize, offset: u64, key: u64, ctx: u64| {
        let mut buf = pool.alloc().unwrap();
        buf.fill(&vec![0xAB; len]).unwrap();
        a.ep.post_write(0, buf, offset, key, ctx).unwrap();
    };
    // Wrong key.
    write(&mut a, 64, 0, KEY ^ 0xFF, 1);
    expect_perm_violation(&mut a, 1);
    // Range past the end, single packet and multi-packet (every packet refused).
    write(&mut a, 64, 4 * mtu as u64 - 10, KEY, 2);
    expect_perm_violation(&mut a, 2);
    write(&mut a, 3 * mtu, 2 * mtu as u64, KEY, 3);
    expect_perm_violation(&mut a, 3);
    // An offset that overflows 64 bits at the target.
    write(&mut a, 8, u64::MAX - 4, KEY, 4);
    let err = a.next_completion().unwrap().error.unwrap();
    assert_eq!(
        err.local,
        LocalStatus::BadDescriptor,
        "refused before sending"
    );
    // Write into a read-only region.
    write(&mut a, 16, 0, ro_key, 5);
    expect_perm_violation(&mut a, 5);
    // Read from a write-only region: nothing lands in the local buffer either.
    let mut dst = pool.alloc().unwrap();
    dst.fill(&[0x5A; 32]).unwrap();
    a.ep.post_read(0, dst, 32, 0, KEY, 6).unwrap();
    let ev = a.next_completion().unwrap();
    let err = ev.error.expect("refused");
    assert_eq!(err.return_code, Some(ReturnCode::PermViolation));
    assert_eq!(err.errno, FiErrno::FI_EACCES);
    let back = ev.buffer.unwrap();
    assert_eq!(
        back.to_vec().unwrap(),
        [0x5A; 32],
        "the local buffer is unchanged"
    );
    // Read past the end of the read-only region.
    let dst = pool.alloc().unwrap();
    a.ep.post_read(0, dst, 64, read_only.len() as u64 - 1, ro_key, 7)
        .unwrap();
    expect_perm_violation(&mut a, 7);

    assert_eq!(
        write_only.to_vec().unwrap(),
        before_wo,
        "target memory unchanged"
    );
    assert_eq!(
        read_only.to_vec().unwrap(),
        before_ro,
        "target memory unchanged"
    );
    // 1 + 1 + 3 packets + 1 + 1 + 1 refused packets.
    let refused = 8;
    assert_eq!(b.counter(RX_PERM_VIOLATION), refused);
    let cb = b.ep.counters().unwrap();
    assert_eq!(cb.rejected(ReturnCode::PermViolation), refused);
    assert_eq!(cb.rma_target_write_bytes + cb.rma_target_read_bytes, 0);
    let ca = a.ep.counters().unwrap();
    assert_eq!(ca.tx_errors, 7);
    assert_eq!(ca.rma_writes + ca.rma_reads, 0);
}

#[test]
fn keys_are_unique_and_deregistration_ends_remote_access() {
    let (_f, mut a, b) = pair_with(JOB, |_| {});
    let mr =
        b.ep.register_mr(b.pool.alloc().unwrap(), MrAccess::REMOTE_READ_WRITE, KEY)
            .unwrap();
    let mut taken = b.pool.alloc().unwrap();
    taken.fill(b"the caller's").unwrap();
    let available = b.pool.available();
    match b.ep.register_mr(taken, MrAccess::REMOTE_READ, KEY) {
        Err(MrRegError {
            error: e @ DriverError::AdminStatus { .. },
            memory,
        }) => {
            assert!(matches!(
                e,
                DriverError::AdminStatus {
                    status: Status::KeyExists,
                    ..
                }
            ));
            assert_eq!(e.errno(), FiErrno::FI_ENOKEY);
            // The buffer is handed back as it was given, as a refused post hands back its own.
            match memory {
                Some(MrMemory::Buffer(buf)) => {
                    assert_eq!(buf.to_vec().unwrap(), b"the caller's");
                    assert_eq!(b.pool.available(), available, "the caller holds it");
                }
                _ => panic!("the refused registration's buffer is handed back"),
            }
        }
        other => panic!("expected KeyExists, got {other:?}"),
    }
    // A resource index outside the endpoint is refused before the NIC sees it.
    let end = b.ep.resource_indices().end;
    let e =
        b.ep.register_mr_at(b.pool.alloc().unwrap(), MrAccess::REMOTE_READ, 7, Some(end))
            .unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
    // A region bound to the endpoint's second index is not reachable through its first.
    let second = b.ep.resource_indices().start + 1;
    let other =
        b.ep.register_mr_at(
            b.pool.alloc().unwrap(),
            MrAccess::REMOTE_WRITE,
            8,
            Some(second),
        )
        .unwrap();
    assert_eq!(other.resource_index(), second);
    let mut buf = a.pool.alloc().unwrap();
    buf.fill(b"x").unwrap();
    a.ep.post_write(0, buf, 0, 8, 1).unwrap();
    expect_perm_violation(&mut a, 1);

    let mut buf = a.pool.alloc().unwrap();
    buf.fill(b"before").unwrap();
    a.ep.post_write(0, buf, 0, KEY, 2).unwrap();
    assert!(a.next_completion().unwrap().error.is_none());
    assert_eq!(&mr.to_vec().unwrap()[..6], b"before");
    drop(mr);
    let mut buf = a.pool.alloc().unwrap();
    buf.fill(b"after").unwrap();
    a.ep.post_write(0, buf, 0, KEY, 3).unwrap();
    expect_perm_violation(&mut a, 3);
    // The key is free again.
    let again =
        b.ep.register_mr(b.pool.alloc().unwrap(), MrAccess::REMOTE_READ, KEY)
            .unwrap();
    assert_eq!(again.key(), KEY);
}
