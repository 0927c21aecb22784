//! Multi-receive buffers (`FI_MULTI_RECV`): many messages of mixed sizes per buffer at
//! 64-byte aligned offsets, byte-exact; release when less than `min_free` is left (the
//! releasing completion alone carries `FI_MULTI_RECV`); a message that does not fit goes whole
//! to the next buffer; nothing is written outside the messages' bytes; tagged multi-receive
//! is refused.

use uet_av::FiErrno;
use uet_driver::cq::{FI_MSG, FI_MULTI_RECV, FI_RECV, FI_REMOTE_CQ_DATA};
use uet_driver::{CqEvent, CqFormat, CqOp, DmaBuffer, DmaPool, Endpoint, MultiRecv};
use uet_fwif::datapath::{CompletionKind, LocalStatus, MULTI_RECV_ALIGN};
use uet_tests::{pair_with, pattern, Node};

const JOB: u32 = 0x00_3B1C;
const GUARD: u8 = 0xA5;

fn align(x: usize) -> usize {
    x.div_ceil(MULTI_RECV_ALIGN as usize) * MULTI_RECV_ALIGN as usize
}

/// A buffer of `pool` filled with guard bytes (its length back to 0 once posted).
fn guarded(pool: &DmaPool) -> DmaBuffer {
    let mut b = pool.alloc().expect("buffer");
    b.fill(&vec![GUARD; pool.buf_size()]).expect("fill");
    b
}

/// Every byte of a guard buffer is still the guard.
fn assert_untouched(b: &DmaBuffer, what: &str) {
    let mut got = vec![0u8; b.capacity()];
    assert_eq!(b.read_at(0, &mut got).unwrap(), b.capacity());
    assert!(got.iter().all(|&x| x == GUARD), "{what} was written");
}

fn message(b: &mut Node) -> (CqEvent, MultiRecv) {
    let ev = b.next_completion().expect("a receive completion");
    assert_eq!((ev.kind, ev.op), (CompletionKind::Recv, CqOp::Recv));
    let m = ev.multi_recv.expect("a multi-receive completion");
    (ev, m)
}

/// A pool on `nic` whose buffers are taken in order: guard, multi, guard, multi, guard.
fn layout(node: &Node, size: usize) -> (DmaPool, Vec<DmaBuffer>) {
    let pool = DmaPool::new(&node.nic, size, 5).unwrap();
    let bufs: Vec<DmaBuffer> = (0..5).map(|_| guarded(&pool)).collect();
    for w in bufs.windows(2) {
        assert_eq!(
            w[1].iova() - w[0].iova(),
            pool.buf_size() as u64,
            "adjacent"
        );
    }
    (pool, bufs)
}

/// Check a released multi-receive buffer: each message at its offset, guard bytes elsewhere.
fn assert_layout(buf: &DmaBuffer, placed: &[(usize, Vec<u8>)]) {
    let mut got = vec![0u8; buf.capacity()];
    let mut expect = vec![GUARD; buf.capacity()];
    for (off, data) in placed {
        expect[*off..*off + data.len()].copy_from_slice(data);
    }
    // Read the whole capacity regardless of the buffer's length: compare every byte.
    let n = buf.read_at(0, &mut got).unwrap();
    assert_eq!(n, buf.len());
    let end = placed.iter().map(|(o, d)| o + d.len()).max().unwrap_or(0);
    assert_eq!(buf.len(), end, "length: end of the last message");
    assert_eq!(&got[..n], &expect[..n], "messages and padding");
}

#[test]
fn mixed_sizes_fill_a_buffer_until_min_free_releases_it_and_the_next_takes_over() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let mtu = a.ep.mtu();
    let size = 4 * mtu;
    let min_free = 512;
    let (_pool, mut bufs) = layout(&b, size);
    let guard_after = bufs.pop().unwrap();
    let second = bufs.pop().unwrap();
    let guard_mid = bufs.pop().unwrap();
    let first = bufs.pop().unwrap();
    let guard_before = bufs.pop().unwrap();
    b.ep.post_recv_multi(first, Some(min_free), 77).unwrap();
    b.ep.post_recv_multi(second, Some(min_free), 78).unwrap();
    assert_eq!(b.ep.in_flight().1, 2);

    // Mixed sizes, among them an empty message and one of several packets. The last one of
    // the first buffer does not fit what is left: it goes whole to the second buffer.
    let mut sizes = vec![100, 1, 0, 700, 64, mtu + 300, 65, 1000];
    let mut used = 0usize;
    for &n in &sizes {
        used = align(used + n);
    }
    let left = size - used;
    assert!(
        left >= min_free,
        "the first buffer is still open: {left} left"
    );
    sizes.push(left + 1); // does not fit
    let big_src = DmaPool::new(&a.nic, size, 4).unwrap();
    let mut sent = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let data = pattern(n, i as u8 + 1);
        let mut buf = big_src.alloc().unwrap();
        buf.fill(&data).unwrap();
        a.ep.post_send(0, buf, 500 + i as u64, 9000 + i as u64)
            .unwrap();
        a.send_ok();
        sent.push(data);
    }

    // First buffer: one completion per message, then the release on its own.
    let mut placed_first = Vec::new();
    let mut offset = 0usize;
    for (i, data) in sent.iter().take(sizes.len() - 1).enumerate() {
        let (ev, m) = message(&mut b);
        assert!(ev.error.is_none(), "message {i}: {:?}", ev.error);
        assert_eq!(ev.context, 77);
        assert_eq!(ev.len, data.len(), "message {i}");
        assert_eq!(m.offset, offset, "message {i} at the next aligned offset");
        assert!(m.has_message && !m.released, "message {i}");
        assert!(ev.buffer.is_none(), "the buffer stays with the NIC");
        assert_eq!(ev.data, 9000 + i as u64);
        assert_eq!(ev.src_addr, 0);
        // Readable now, byte exact, while the NIC still owns the buffer.
        let mut got = vec![0u8; data.len() + 8];
        let n = b.ep.multi_recv_read(&ev, &mut got).unwrap();
        assert_eq!(&got[..n], &data[..], "message {i}");
        let flags = ev.flags();
        assert_eq!(flags & FI_MULTI_RECV, 0, "only the last completion");
        assert_eq!(flags & (FI_RECV | FI_MSG), FI_RECV | FI_MSG);
        assert_eq!(flags & FI_REMOTE_CQ_DATA, FI_REMOTE_CQ_DATA);
        placed_first.push((offset, data.clone()));
        offset = align(offset + data.len());
    }
    let (release, m) = message(&mut b);
    assert!(m.released && !m.has_message);
    assert_eq!((release.context, release.len, m.offset), (77, 0, used));
    assert!(release.error.is_none());
    assert_eq!(
        release.flags(),
        FI_MULTI_RECV,
        "release only: FI_MULTI_RECV alone"
    );
    let first = release
        .buffer
        .as_ref()
        .expect("the released buffer comes back");
    assert_layout(first, &placed_first);
    // The events of the released buffer now read from the buffer itself.
    let mut got = vec![0u8; 16];
    let n = b.ep.multi_recv_read(&release, &mut got).unwrap();
    assert_eq!(n, 0, "a release carries no message");

    // Second buffer: the message that did not fit, whole, at offset 0.
    let (ev, m) = message(&mut b);
    assert_eq!((ev.context, ev.len, m.offset), (78, left + 1, 0));
    assert!(!m.released);
    let mut got = vec![0u8; left + 1];
    assert_eq!(b.ep.multi_recv_read(&ev, &mut got).unwrap(), left + 1);
    assert_eq!(&got, sent.last().unwrap());
    let mut placed_second = vec![(0, sent.last().unwrap().clone())];

    // Fill it to below min_free: the message that does so carries FI_MULTI_RECV.
    let at = align(left + 1);
    let last_len = size - at - min_free + 1; // leaves less than min_free
    let data = pattern(last_len, 99);
    let mut buf = big_src.alloc().unwrap();
    buf.fill(&data).unwrap();
    a.ep.post_send(0, buf, 600, 0).unwrap();
    a.send_ok();
    let (ev, m) = message(&mut b);
    assert!(size - align(at + last_len) < min_free);
    assert_eq!((ev.len, m.offset), (last_len, at));
    assert!(m.released && m.has_message);
    assert_eq!(
        ev.flags(),
        FI_RECV | FI_MSG | FI_MULTI_RECV,
        "no data: no FI_REMOTE_CQ_DATA"
    );
    let second = ev.buffer.as_ref().expect("released with its last message");
    placed_second.push((at, data.clone()));
    assert_layout(second, &placed_second);
    let mut got = vec![0u8; last_len];
    assert_eq!(b.ep.multi_recv_read(&ev, &mut got).unwrap(), last_len);
    assert_eq!(got, data);
    assert_eq!(b.ep.in_flight().1, 0, "both buffers returned");

    assert_untouched(&guard_before, "the buffer before the first");
    assert_untouched(&guard_mid, "the buffer between them");
    assert_untouched(&guard_after, "the buffer after the second");
    let c = b.ep.counters().unwrap();
    assert_eq!(
        c.rx_messages,
        sizes.len() as u64 + 1,
        "a release is no message"
    );
    assert_eq!(c.rx_errors, 0);

    // With no buffer left, the next message waits on the unexpected list for one.
    a.send(0, b"early", 1);
    let ev = a.next_completion().unwrap();
    assert!(ev.error.is_none(), "held, not refused: {:?}", ev.error);
    assert!(b.next_completion().is_none());
    b.post_recvs(1);
    let ev = b.next_completion().expect("the next receive takes it");
    assert!(ev.error.is_none(), "{:?}", ev.error);
    assert_eq!(ev.buffer.unwrap().to_vec().unwrap(), b"early");
}

#[test]
fn a_stale_completion_cannot_read_a_released_buffer_and_the_default_min_free_is_the_option() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let pool = DmaPool::new(&b.nic, 1024, 4).unwrap();
    assert_eq!(
        b.ep.min_multi_recv(),
        b.ep.mtu(),
        "FI_OPT_MIN_MULTI_RECV defaults to the MTU"
    );
    b.ep.set_min_multi_recv(256).unwrap();
    assert_eq!(b.ep.min_multi_recv(), 256);
    assert_eq!(
        b.ep.set_min_multi_recv(usize::MAX).unwrap_err().errno(),
        FiErrno::FI_EINVAL
    );
    b.ep.post_recv_multi(pool.alloc().unwrap(), None, 1)
        .unwrap();
    a.send(0, &pattern(500, 1), 1);
    a.send_ok();
    let (first, m) = message(&mut b);
    assert_eq!((m.offset, m.released), (0, false));
    // Another endpoint holding a multi-receive buffer of its own, posted the same way (same
    // ring slot, same sequence number), cannot read b's completion.
    let pool_a = DmaPool::new(&a.nic, 1024, 1).unwrap();
    a.ep.post_recv_multi(pool_a.alloc().unwrap(), None, 1)
        .unwrap();
    let mut out = [0u8; 8];
    let e = a.ep.multi_recv_read(&first, &mut out).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
    a.send(0, &pattern(300, 2), 2);
    a.send_ok();
    let (last, m) = message(&mut b);
    // 512 + 320 = 832: 192 left < 256.
    assert_eq!((m.offset, m.released), (512, true));
    let buf = last.buffer.as_ref().unwrap();
    assert_eq!(buf.len(), 812);

    // The buffer is back with the application: the earlier completion no longer reads.
    b.ep.post_recv_multi(pool.alloc().unwrap(), None, 2)
        .unwrap();
    let mut out = [0u8; 8];
    let e = b.ep.multi_recv_read(&first, &mut out).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
    // Its bytes are in the returned buffer, at the offset the completion gave.
    let mut got = vec![0u8; 500];
    assert_eq!(
        buf.read_at(first.multi_recv.unwrap().offset, &mut got)
            .unwrap(),
        500
    );
    assert_eq!(got, pattern(500, 1));
    // A regular receive's completion is no multi-receive one.
    b.post_recvs(1);
    let regular = first_regular(&mut a, &mut b);
    let e = b.ep.multi_recv_read(&regular, &mut out);
    assert_eq!(e.unwrap_err().errno(), FiErrno::FI_EINVAL);
}

/// `cq_readerr` that finds the buffer's release next (a success: `FI_EAGAIN`) sets it aside
/// and changes nothing the application sees: the earlier message still reads with its own
/// completion, until and after the release is returned.
#[test]
fn a_release_set_aside_by_a_read_of_the_other_kind_leaves_earlier_messages_readable() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let pool = DmaPool::new(&b.nic, 1024, 1).unwrap();
    b.ep.post_recv_multi(pool.alloc().unwrap(), Some(256), 4)
        .unwrap();
    let first = pattern(500, 1);
    a.send(0, &first, 1);
    a.send_ok();
    let m1 = b.ep.cq_read().expect("the first message");
    assert!(!m1.multi_recv.unwrap().released);
    // 512 + 320 = 832: 192 left < 256, the second message releases the buffer.
    a.send(0, &pattern(300, 2), 2);
    a.send_ok();
    assert_eq!(
        b.ep.cq_readerr().unwrap_err(),
        FiErrno::FI_EAGAIN,
        "the release is a success"
    );
    let mut got = vec![0u8; 500];
    let n =
        b.ep.multi_recv_read(&m1, &mut got)
            .expect("the first message reads while its release waits to be returned");
    assert_eq!(n, 500);
    assert_eq!(got, first);
    let release = b.ep.cq_read().expect("the release, set aside");
    let m = release.multi_recv.unwrap();
    assert!(m.released && m.has_message);
    assert_eq!(release.buffer.as_ref().unwrap().len(), 812);
    // Returned: the earlier completion no longer reads; the returned buffer holds it.
    let e = b.ep.multi_recv_read(&m1, &mut got).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL);
}

/// A message into the open multi-receive buffer, then check it is one; returns a completion
/// of a regular receive posted after.
fn first_regular(a: &mut Node, b: &mut Node) -> CqEvent {
    a.send(0, b"to the multi buffer", 3);
    a.send_ok();
    let (ev, m) = message(b);
    assert_eq!((ev.context, m.offset), (2, 0));
    // Fill the multi buffer past min_free so the regular receive gets the next message.
    a.send(0, &pattern(900, 4), 4);
    a.send_ok();
    let (_, m) = message(b);
    assert!(m.released);
    a.send(0, b"regular", 5);
    a.send_ok();
    let ev = b.next_completion().unwrap();
    assert!(ev.multi_recv.is_none());
    assert_eq!(ev.buffer.as_ref().unwrap().to_vec().unwrap(), b"regular");
    ev
}

#[test]
fn a_message_longer_than_an_empty_buffer_is_truncated_into_it_and_releases_it() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let (_pool, mut bufs) = layout(&b, 256);
    let after = bufs.pop().unwrap();
    let _unused = bufs.pop().unwrap();
    let _unused2 = bufs.pop().unwrap();
    let multi = bufs.pop().unwrap();
    let before = bufs.pop().unwrap();
    b.ep.post_recv_multi(multi, Some(64), 5).unwrap();
    let data = pattern(300, 7);
    a.send(0, &data, 11);
    a.send_ok();
    let ev = b.next_completion().unwrap();
    let m = ev.multi_recv.unwrap();
    assert!(m.released && m.has_message);
    assert_eq!((ev.len, m.offset), (256, 0));
    let err = ev.error.expect("truncated");
    assert_eq!(err.local, LocalStatus::Truncated);
    assert_eq!(err.errno, FiErrno::FI_ETRUNC);
    assert_eq!(err.olen, 44);
    let e = ev.err_entry().unwrap();
    assert_eq!((e.olen, e.len, e.op_context), (44, 256, 5));
    assert_eq!(
        e.flags,
        FI_RECV | FI_MSG | FI_MULTI_RECV | FI_REMOTE_CQ_DATA
    );
    assert_eq!(e.buf, ev.buffer.as_ref().unwrap().iova());
    let got = ev.buffer.as_ref().unwrap().to_vec().unwrap();
    assert_eq!(got, data[..256]);
    assert_untouched(&before, "the buffer before");
    assert_untouched(&after, "the buffer after");
}

#[test]
fn tagged_multi_receive_is_refused_and_the_entry_formats_carry_the_buffer_address() {
    let (_f, mut a, mut b) = pair_with(JOB, |_| {});
    let buf = b.pool.alloc().unwrap();
    let (e, buf) = b.ep.post_trecv_multi(buf, 1, 0, None, 1).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP);
    assert_eq!(b.ep.tagged_in_flight(), 0);

    let base = buf.iova();
    b.ep.post_recv_multi(buf, Some(64), 9).unwrap();
    a.send(0, b"one", 0);
    a.send(0, b"two", 0);
    a.send_ok();
    a.send_ok();
    for off in [0usize, 64] {
        let (ev, m) = message(&mut b);
        assert_eq!(m.offset, off);
        let data = match ev.entry(CqFormat::Data) {
            uet_driver::CqEntry::Data(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(data.buf, base + off as u64, "fi_cq_data_entry.buf");
        assert_eq!((data.op_context, data.len, data.data), (9, 3, 0));
        assert_eq!(data.flags, FI_RECV | FI_MSG);
    }
}

#[test]
fn post_recv_multi_on_a_transmit_context_is_refused() {
    let (_f, fns) = uet_tests::fabric(1);
    let nic = uet_tests::open_nic(&fns[0]);
    let av = uet_tests::open_av(&nic, 1, 4, 2);
    let mut sep = nic
        .scalable_endpoint(
            uet_driver::EndpointAttr {
                tx_ctx_cnt: 2,
                rx_ctx_cnt: 1,
                ..Default::default()
            },
            Some(&av),
        )
        .unwrap();
    let pool = DmaPool::new(&nic, 256, 2).unwrap();
    let tx: &mut Endpoint = sep.tx_context(1).unwrap();
    let (e, _b) = tx
        .post_recv_multi(pool.alloc().unwrap(), None, 1)
        .unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EOPNOTSUPP);
}
