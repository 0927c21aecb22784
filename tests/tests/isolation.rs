//! Cross-job isolation: an endpoint of job A tries every way to reach job B's buffers — its
//! own AV entries forged with B's PIDonFEP and every resource index of B's range (plus the
//! control channel and indices outside it), both addressing modes, every receive context of
//! its AV, SEND, TAGGED_SEND, RMA WRITE and READ with B's memory key — against B in relative
//! and in absolute addressing. Not one byte of B's memory changes, nothing reaches B's
//! receive buffers, each attempt is counted at the target by the counter of the check that
//! refused it, and each is an error completion at A.

use std::sync::Arc;
use uet_av::{fi_rx_addr, FiErrno};
use uet_driver::{CqOp, DmaPool, Endpoint, EndpointAttr, MrAccess, MrMemory};
use uet_fwif::address::AddressingMode;
use uet_fwif::datapath::LocalStatus;
use uet_fwif::ReturnCode;
use uet_regs::{RX_BAD_JOB_ID, RX_BAD_PID, RX_BYTES, RX_PACKETS};
use uet_tests::{fabric, forged, job_endpoint, open_av, open_nic, pattern, poll_one};

const JOB_A: u32 = 0x0A;
const JOB_B: u32 = 0x0B;
const KEY_B: u64 = 0xB0B0_0000_0000_0001;
const REGION: usize = 16 * 1024;
const RX_CTX_BITS: u8 = 2;

fn attack(b_mode: AddressingMode) {
    let (_f, fns) = fabric(2);
    let (na, nb) = (open_nic(&fns[0]), open_nic(&fns[1]));

    // Job B's endpoint, its memory region and its receive buffers.
    let av_b = open_av(&nb, JOB_B, 4, 0);
    let mut b = nb
        .endpoint(
            EndpointAttr {
                job_id: JOB_B,
                ri_count: 8,
                mode: b_mode,
                ..EndpointAttr::default()
            },
            Some(&av_b),
        )
        .unwrap();
    // Job A also has an endpoint on B's NIC: job A's scope exists there.
    let _decoy = job_endpoint(&nb, JOB_A, &av_b);
    let region = Arc::new(nb.map_dma(REGION).unwrap());
    let before = pattern(REGION, 0xB);
    region.region().write_bytes(0, &before).unwrap();
    let mut mrs = Vec::new();
    for ri in b.resource_indices() {
        let key = KEY_B + u64::from(ri);
        mrs.push(
            b.register_mr_at(
                MrMemory::Region(region.clone(), 0..REGION),
                MrAccess::REMOTE_READ_WRITE,
                key,
                Some(ri),
            )
            .unwrap(),
        );
    }
    let pool_b = DmaPool::new(&nb, 4096, 64).unwrap();
    for k in 0..8 {
        b.post_recv(pool_b.alloc().unwrap(), k).unwrap();
        b.post_trecv(pool_b.alloc().unwrap(), 0, u64::MAX, 100 + k)
            .unwrap();
    }

    // Job A's endpoint and its AV (stamping job A, decoding receive contexts).
    let mut av_a = open_av(&na, JOB_A, 256, RX_CTX_BITS);
    let mut a: Endpoint = job_endpoint(&na, JOB_A, &av_a);
    let pool_a = DmaPool::new(&na, 4096, 16).unwrap();
    let range = b.resource_indices();
    let mut indices: Vec<u16> = range.clone().collect();
    indices.extend([0, range.end, range.end + 3, 4000]);

    let mut attempts = 0u64;
    let mut refused_locally = 0u64;
    let mut expect_pid = 0u64;
    let mut expect_job = 0u64;
    for mode in [AddressingMode::Relative, AddressingMode::Absolute] {
        // What B's NIC must answer: relative requests carry job A, whose scope has no such
        // PIDonFEP; absolute ones find an absolute B by PIDonFEP and fail authorisation, and
        // cannot name a relative B at all.
        let want = match (mode, b_mode) {
            (AddressingMode::Absolute, AddressingMode::Absolute) => ReturnCode::BadJobId,
            _ => ReturnCode::BadPid,
        };
        for &ri in &indices {
            let bytes = forged(b.address(), |x| {
                x.mode = mode;
                x.ri_start = ri;
                x.ri_count = 1;
            });
            let mut fi = [0u64; 1];
            assert_eq!(av_a.insert(&bytes, 1, Some(&mut fi), 0).unwrap(), 1);
            for rx_ctx in 0..(1u32 << RX_CTX_BITS) {
                let dest = fi_rx_addr(fi[0], rx_ctx, RX_CTX_BITS);
                let key = KEY_B + u64::from(ri);
                for op in [CqOp::Send, CqOp::TaggedSend, CqOp::Write, CqOp::Read] {
                    let mut buf = pool_a.alloc().unwrap();
                    buf.fill(&[0xAA; 64]).unwrap();
                    let posted = match op {
                        CqOp::Send => a.post_send(dest, buf, 1, 0),
                        CqOp::TaggedSend => a.post_tsend(dest, buf, 7, 2, 0),
                        CqOp::Write => a.post_write(dest, buf, 0, key, 3),
                        _ => a.post_read(dest, buf, 64, 0, key, 4),
                    };
                    posted.map_err(|(e, _)| e).unwrap();
                    attempts += 1;
                    let ev = poll_one(&mut a).expect("every attempt completes at A");
                    let err = ev.error.unwrap_or_else(|| {
                        panic!("{op:?} to ri {ri} ctx {rx_ctx} ({mode:?}) succeeded")
                    });
                    let index = ri + rx_ctx as u16;
                    if index > 0x0FFF || index == 0 {
                        // The index does not fit 12 bits, or is the control channel, which
                        // only a control send reaches: A's own NIC refuses to send it.
                        assert_eq!(err.local, LocalStatus::AddrNotAvail);
                        attempts -= 1;
                        refused_locally += 1;
                        continue;
                    }
                    assert_eq!(err.local, LocalStatus::Remote, "{op:?} ri {ri}");
                    assert_eq!(err.return_code, Some(want), "{op:?} ri {ri} {mode:?}");
                    assert_eq!(
                        err.errno,
                        if want == ReturnCode::BadJobId {
                            FiErrno::FI_EACCES
                        } else {
                            FiErrno::FI_EADDRNOTAVAIL
                        }
                    );
                    match want {
                        ReturnCode::BadJobId => expect_job += 1,
                        _ => expect_pid += 1,
                    }
                }
            }
        }
    }
    assert!(attempts > 200, "{attempts} attempts");
    // Each attempt counted once, by the check that refused it.
    assert_eq!(fns[1].counter(RX_BAD_PID), expect_pid);
    assert_eq!(fns[1].counter(RX_BAD_JOB_ID), expect_job);
    assert_eq!(expect_pid + expect_job, attempts);
    // Not one byte reached B.
    assert_eq!(fns[1].counter(RX_PACKETS), 0);
    assert_eq!(fns[1].counter(RX_BYTES), 0);
    let mut after = vec![0u8; REGION];
    region.region().read_bytes(0, &mut after).unwrap();
    assert!(after == before, "B's memory region changed");
    assert!(
        poll_one(&mut b).is_none(),
        "nothing reached B's receive buffers"
    );
    let cb = b.counters().unwrap();
    assert_eq!(
        (
            cb.rx_messages,
            cb.rma_target_write_bytes,
            cb.rma_target_read_bytes
        ),
        (0, 0, 0)
    );
    assert_eq!(b.in_flight().1, 8, "every receive buffer still posted");
    assert_eq!(b.tagged_in_flight(), 8);
    // Every attempt is an error completion at A.
    let ca = a.counters().unwrap();
    assert_eq!(ca.tx_errors, attempts + refused_locally);
    assert_eq!((ca.tx_messages, ca.rma_writes, ca.rma_reads), (0, 0, 0));
    drop(mrs);
}

#[test]
fn job_a_cannot_reach_relative_job_b() {
    attack(AddressingMode::Relative);
}

#[test]
fn job_a_cannot_reach_absolute_job_b() {
    attack(AddressingMode::Absolute);
}
