//! An in-memory event queue, and the reference model of `FI_EVENT` inserts, shared by the AV
//! crate's tests (`av_events.rs`, over in-memory NIC tables) and the workspace's end-to-end
//! tests (`tests/tests/av_model_full_sim.rs`, over a NIC of the simulator, whose AV_WRITEs
//! go through the driver's admin queue and complete asynchronously).
#![allow(dead_code)]

use crate::common::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use uet_av::{
    AddressVector, AvEvent, AvEventSink, AvProgress, FiErrno, FiError, MemoryNicTable, NicAvTable,
    NicOp, FI_ADDR_NOTAVAIL, FI_MORE, FI_SYNC_ERR,
};
use uet_fwif::{NicAvEntry, UetAddress};

// ---------------------------------------------------------------------------------------------
// An event queue in memory

#[derive(Default)]
pub(crate) struct Sink {
    pub(crate) events: Mutex<Vec<AvEvent>>,
    pub(crate) hooks: Mutex<Vec<(u64, Weak<dyn AvProgress>)>>,
    pub(crate) next: AtomicU64,
    /// Insert calls the AVs said they queued.
    pub(crate) queued: AtomicU64,
}

impl Sink {
    pub(crate) fn new() -> Arc<Sink> {
        Arc::new(Sink::default())
    }

    /// What reading the queue does: run the bound AVs' progress, then take what is queued.
    pub(crate) fn read(&self) -> Vec<AvEvent> {
        for h in self.bound_avs() {
            h.progress();
        }
        self.take()
    }

    /// The AVs bound to the queue, taken out of the hooks' lock (their progress posts here).
    fn bound_avs(&self) -> Vec<Arc<dyn AvProgress>> {
        self.hooks
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    /// What is queued, without progress.
    pub(crate) fn take(&self) -> Vec<AvEvent> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    pub(crate) fn bound(&self) -> usize {
        self.hooks.lock().unwrap().len()
    }

    /// Whether a bound AV has an insert whose events are still to be posted.
    pub(crate) fn in_flight(&self) -> bool {
        self.bound_avs().iter().any(|h| h.in_flight())
    }
}

impl AvEventSink for Sink {
    fn post_av_event(&self, event: AvEvent) -> Result<(), FiError> {
        self.events.lock().unwrap().push(event);
        Ok(())
    }
    fn attach_av(&self, progress: Weak<dyn AvProgress>) -> Result<u64, FiError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.hooks.lock().unwrap().push((id, progress));
        Ok(id)
    }
    fn detach_av(&self, attachment: u64) {
        self.hooks
            .lock()
            .unwrap()
            .retain(|(id, _)| *id != attachment);
    }
    fn inserts_queued(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }
}

/// (context, inserted) of a completion; (context, position, errno) of an error.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ev {
    Done(u64, u64),
    Err(u64, u64, FiErrno),
}

pub(crate) fn short(events: Vec<AvEvent>) -> Vec<Ev> {
    events
        .into_iter()
        .map(|e| match e {
            AvEvent::InsertComplete {
                context, inserted, ..
            } => Ev::Done(context, inserted),
            AvEvent::InsertError {
                context,
                position,
                errno,
                ..
            } => Ev::Err(context, position, errno),
        })
        .collect()
}

/// A NIC table the `FI_EVENT` model runs over: its next AV_WRITE refused, and its entries read
/// back as the NIC holds them.
pub(crate) trait EventNic: NicAvTable + Send + 'static {
    /// The next AV_WRITE is refused (applied to no entry).
    fn refuse_next_write(&mut self);
    /// A refusal no write used is cancelled.
    fn cancel_refusal(&mut self);
    /// Entries `0..count` as the NIC holds them (AV_READ on a NIC).
    fn entries_on_nic(&mut self, count: usize) -> Vec<NicAvEntry>;
}

impl EventNic for MemoryNicTable {
    fn refuse_next_write(&mut self) {
        self.fail_after(NicOp::Write, 0);
    }

    fn cancel_refusal(&mut self) {
        self.clear_faults();
    }

    fn entries_on_nic(&mut self, count: usize) -> Vec<NicAvEntry> {
        self.entries()[..count].to_vec()
    }
}

// ---------------------------------------------------------------------------------------------
// FI_EVENT against a reference model

/// What the model knows of an index.
#[derive(Clone, Copy, Debug, PartialEq)]
enum EvSlot {
    Free,
    Held([u8; 32]),
    /// The NIC refused the write of call `.0`'s address and that is known: lookups fail; free
    /// again at the AV's first call once the call's events are posted.
    Refused(u64),
}

/// One insert call: its context, records not yet written, and outcome so far.
struct EvCall {
    seq: u64,
    context: u64,
    waiting: usize,
    inserted: u64,
    failed: Vec<(u64, FiErrno)>,
}

/// fi_av(3)'s asynchronous inserts, over a NIC that completes each AV_WRITE at once: an insert
/// returns 0 with its indices in `fi_addr`; its records go to the NIC with the first call
/// without `FI_MORE`; reading the queue collects the writes and posts, per call and in call
/// order, one error per address not inserted (position order), then `FI_AV_COMPLETE`.
struct EvModel {
    slots: Vec<EvSlot>,
    calls: std::collections::VecDeque<EvCall>,
    next_seq: u64,
    /// Records of `FI_MORE` calls not sent yet: (call, position, index).
    staged: Vec<(u64, u64, usize)>,
    /// Records sent and not yet collected: (call, position, index, written).
    sent: Vec<(u64, u64, usize, bool)>,
    /// The NIC refuses its next AV_WRITE.
    fail_write: bool,
    /// Events posted and not read yet.
    posted: Vec<Ev>,
}

impl EvModel {
    fn call(&mut self, seq: u64) -> Option<&mut EvCall> {
        self.calls.iter_mut().find(|c| c.seq == seq)
    }

    /// What every call of the AV starts with: refused indices whose calls' events are posted
    /// are free again.
    fn release(&mut self) {
        let calls = &self.calls;
        for s in &mut self.slots {
            if let EvSlot::Refused(seq) = *s {
                if !calls.iter().any(|c| c.seq == seq) {
                    *s = EvSlot::Free;
                }
            }
        }
    }

    fn submit(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        let written = !std::mem::take(&mut self.fail_write);
        let staged = std::mem::take(&mut self.staged);
        self.sent
            .extend(staged.into_iter().map(|(c, p, i)| (c, p, i, written)));
    }

    fn insert(&mut self, addrs: &[Option<[u8; 32]>], more: bool, context: u64) -> Vec<u64> {
        self.release();
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut call = EvCall {
            seq,
            context,
            waiting: 0,
            inserted: 0,
            failed: Vec::new(),
        };
        let mut out = Vec::new();
        for (pos, a) in addrs.iter().enumerate() {
            let pos = pos as u64;
            let free = self.slots.iter().position(|s| *s == EvSlot::Free);
            match (a, free) {
                (None, _) => {
                    call.failed.push((pos, FiErrno::FI_EINVAL));
                    out.push(FI_ADDR_NOTAVAIL);
                }
                (Some(_), None) => {
                    call.failed.push((pos, FiErrno::FI_ENOSPC));
                    out.push(FI_ADDR_NOTAVAIL);
                }
                (Some(bytes), Some(i)) => {
                    self.slots[i] = EvSlot::Held(*bytes);
                    self.staged.push((seq, pos, i));
                    call.waiting += 1;
                    out.push(i as u64);
                }
            }
        }
        self.calls.push_back(call);
        if !more {
            self.submit();
        }
        out
    }

    /// Collect the writes sent: what the NIC refused is refused.
    fn collect(&mut self) {
        for (seq, pos, index, written) in std::mem::take(&mut self.sent) {
            if !written {
                self.slots[index] = EvSlot::Refused(seq);
            }
            if let Some(c) = self.call(seq) {
                c.waiting -= 1;
                if written {
                    c.inserted += 1;
                } else {
                    c.failed.push((pos, FiErrno::FI_EIO));
                }
            }
        }
    }

    /// The calls finished, in call order, post their events.
    fn post(&mut self) {
        while self.calls.front().is_some_and(|c| c.waiting == 0) {
            let Some(mut c) = self.calls.pop_front() else {
                break;
            };
            c.failed.sort_by_key(|f| f.0);
            self.posted
                .extend(c.failed.iter().map(|&(p, e)| Ev::Err(c.context, p, e)));
            self.posted.push(Ev::Done(c.context, c.inserted));
        }
    }

    /// Reading the queue: the writes are collected, the calls finished post their events,
    /// and everything posted is read.
    fn read(&mut self) -> Vec<Ev> {
        self.collect();
        self.post();
        std::mem::take(&mut self.posted)
    }

    /// A synchronous call: pending records are sent and every write collected first, the
    /// calls finished post their events, then refused indices are free again.
    fn settle(&mut self) {
        self.submit();
        self.collect();
        self.post();
        self.release();
    }

    /// Whether the NIC holds index `i`'s address now: inserted, its record sent (a call
    /// without `FI_MORE` ended its batch) and not refused. Over this NIC a write completes
    /// when it is sent; the event comes at the next read.
    fn on_nic(&self, i: usize) -> bool {
        matches!(self.slots[i], EvSlot::Held(_))
            && !self.staged.iter().any(|&(_, _, x)| x == i)
            && !self
                .sent
                .iter()
                .any(|&(_, _, x, written)| x == i && !written)
    }

    /// A call without `FI_MORE` refused for its flags: it still ends the batch before it.
    fn refused_call(&mut self) {
        self.submit();
    }

    /// A remove: its arguments are checked against what the AV knows (a bad one changes
    /// nothing); then the AV settles, and an address whose insert the NIC turns out to have
    /// refused makes it `FI_EINVAL` too, with nothing removed.
    fn remove(&mut self, indices: &[u64]) -> Result<(), FiErrno> {
        let held = |m: &Self, i: u64| {
            usize::try_from(i)
                .ok()
                .and_then(|i| m.slots.get(i))
                .is_some_and(|s| matches!(s, EvSlot::Held(_)))
        };
        let mut seen = Vec::new();
        for &i in indices {
            if !held(self, i) || seen.contains(&i) {
                return Err(FiErrno::FI_EINVAL);
            }
            seen.push(i);
        }
        self.settle();
        if seen.iter().any(|&i| !held(self, i)) {
            return Err(FiErrno::FI_EINVAL);
        }
        for i in seen {
            self.slots[i as usize] = EvSlot::Free;
        }
        Ok(())
    }
}

/// Run `steps` random steps; the events seen.
pub(crate) fn ev_run<N: EventNic>(
    mut av: AddressVector<N>,
    seed: u64,
    steps: usize,
    close: bool,
) -> Vec<Ev> {
    let cap = av.capacity();
    let sink = Sink::new();
    av.bind(sink.clone(), 0).unwrap();
    let mut m = EvModel {
        slots: vec![EvSlot::Free; cap],
        calls: Default::default(),
        next_seq: 0,
        staged: Vec::new(),
        sent: Vec::new(),
        fail_write: false,
        posted: Vec::new(),
    };
    let job_id = av.attr().job_id;
    let mut seen = Vec::new();
    let mut r = XorShift(seed);
    let mut below = |n: u64| r.below(n);
    for step in 0..steps {
        if below(10) == 0 {
            av.nic_mut().refuse_next_write();
            m.fail_write = true;
        }
        match below(10) {
            0..=4 => {
                let n = 1 + below(3) as usize;
                let addrs: Vec<Option<[u8; 32]>> = (0..n)
                    .map(|_| (below(8) != 0).then(|| peer_bytes(below(500) as u32 + 1)))
                    .collect();
                let buf: Vec<u8> = addrs.iter().flat_map(|a| a.unwrap_or([0u8; 32])).collect();
                let more = below(3) == 0;
                let context = step as u64;
                let mut fa = vec![7u64; n];
                let got = av
                    .with_context(context)
                    .insert(&buf, n, Some(&mut fa), if more { FI_MORE } else { 0 })
                    .map_err(|e| e.errno);
                assert_eq!(got, Ok(0), "step {step}: an FI_EVENT insert returns 0");
                assert_eq!(fa, m.insert(&addrs, more, context), "step {step}: fi_addr");
            }
            5 if below(2) == 0 => {
                // insertsym of up to 3 nodes × 3 services, each member's address computed
                // here: the fabric address counts up with the node, PIDonFEP and initiator
                // with the service.
                let n = 1 + below(2000) as u32;
                let (nodes, svcs) = (1 + below(3) as u32, 1 + below(3) as u32);
                let base = UetAddress {
                    fabric_addr: std::net::Ipv4Addr::new(10, 88, (n >> 8) as u8, n as u8).into(),
                    ..peer(n)
                };
                let std::net::IpAddr::V4(ip) = base.fabric_addr else {
                    unreachable!("an IPv4 base")
                };
                let members: Vec<Option<[u8; 32]>> = (0..nodes)
                    .flat_map(|node| (0..svcs).map(move |k| (node, k)))
                    .map(|(node, k)| {
                        let a = UetAddress {
                            fabric_addr: std::net::Ipv4Addr::from(u32::from(ip) + node).into(),
                            pid_on_fep: base.pid_on_fep + k as u16,
                            initiator: base.initiator + k,
                            ..base
                        };
                        Some(a.to_bytes().unwrap())
                    })
                    .collect();
                let more = below(3) == 0;
                let context = step as u64;
                let mut fa = vec![7u64; members.len()];
                let got = av
                    .with_context(context)
                    .insertsym(
                        &base.fabric_addr.to_string(),
                        nodes as usize,
                        &uet_av::Service::of(&base).to_string(),
                        svcs as usize,
                        Some(&mut fa),
                        if more { FI_MORE } else { 0 },
                        None,
                    )
                    .map_err(|e| e.errno);
                if members.len() > cap {
                    // More members than the AV has entries: refused whole (a call without
                    // FI_MORE still ends the batch before it).
                    assert_eq!(got, Err(FiErrno::FI_EINVAL), "step {step}: insertsym");
                    if !more {
                        m.refused_call();
                    }
                } else {
                    assert_eq!(got, Ok(0), "step {step}: insertsym returns 0");
                    assert_eq!(
                        fa,
                        m.insert(&members, more, context),
                        "step {step}: fi_addr"
                    );
                }
            }
            5 => {
                // FI_SYNC_ERR is for synchronous inserts: FI_EBADFLAGS, nothing inserted, and
                // the batch before the call ends.
                let mut fa = [7u64];
                let mut st = [0i32];
                let got = av
                    .with_context(step as u64)
                    .insert_with_status(
                        &peer_bytes(9),
                        1,
                        Some(&mut fa),
                        FI_SYNC_ERR,
                        Some(&mut st),
                    )
                    .map_err(|e| e.errno);
                assert_eq!(got, Err(FiErrno::FI_EBADFLAGS), "step {step}: FI_SYNC_ERR");
                assert_eq!(fa, [7], "step {step}: fi_addr untouched");
                m.refused_call();
            }
            6..=7 => {
                let want = m.read();
                assert_eq!(short(sink.read()), want, "step {step}: events");
                seen.extend(want);
            }
            _ => {
                let targets: Vec<u64> = (0..1 + below(2)).map(|_| below(cap as u64 + 1)).collect();
                let got = av.remove(&targets, 0).map_err(|e| e.errno);
                assert_eq!(got, m.remove(&targets), "step {step}: remove {targets:?}");
            }
        }
        // A refusal no write of this step used goes.
        av.nic_mut().cancel_refusal();
        m.fail_write = false;
        let nic = av.nic_mut().entries_on_nic(cap);
        for (i, s) in m.slots.iter().enumerate() {
            let mut b = [0u8; 32];
            let mut len = b.len();
            let got = av.lookup(i as u64, &mut b, &mut len);
            match s {
                EvSlot::Held(bytes) => {
                    assert!(got.is_ok(), "step {step}: index {i} in use");
                    assert_eq!(&b, bytes, "step {step}: index {i}");
                }
                _ => assert!(got.is_err(), "step {step}: index {i} not in use"),
            }
            // The NIC table, read back: the model's address where its write went through,
            // nothing elsewhere.
            let on_nic = nic[i];
            match s {
                // A member of a symmetric range carries the range's fields too.
                EvSlot::Held(bytes) if m.on_nic(i) => assert_eq!(
                    on_nic.without_range(),
                    NicAvEntry::for_peer(&UetAddress::from_bytes(bytes).unwrap(), job_id),
                    "step {step}: NIC entry {i}"
                ),
                _ => assert!(!on_nic.is_valid(), "step {step}: NIC entry {i}: {on_nic:?}"),
            }
        }
        assert_eq!(
            av.inserts_in_flight(),
            m.calls.len(),
            "step {step}: insert calls in flight"
        );
    }
    if close {
        // fi_close with whatever is in flight, and a last FI_MORE call whose records are not
        // sent: those fail with FI_ECANCELED, the writes sent complete, and every call posts
        // its events (in call order) before the AV is gone.
        let addrs = [Some(peer_bytes(4001)), None, Some(peer_bytes(4003))];
        let buf: Vec<u8> = addrs.iter().flat_map(|a| a.unwrap_or([0u8; 32])).collect();
        let mut fa = [7u64; 3];
        let context = steps as u64;
        let got = av
            .with_context(context)
            .insert(&buf, 3, Some(&mut fa), FI_MORE)
            .map_err(|e| e.errno);
        assert_eq!(got, Ok(0), "the last FI_MORE insert");
        assert_eq!(fa.to_vec(), m.insert(&addrs, true, context), "its fi_addr");
        m.collect();
        for (seq, pos, index) in std::mem::take(&mut m.staged) {
            m.slots[index] = EvSlot::Free;
            if let Some(c) = m.call(seq) {
                c.waiting -= 1;
                c.failed.push((pos, FiErrno::FI_ECANCELED));
            }
        }
        assert!(av.close().is_ok(), "fi_close");
        let want = m.read();
        assert!(m.calls.is_empty());
        assert_eq!(short(sink.take()), want, "the events posted at fi_close");
        seen.extend(want);
        return seen;
    }
    // At the end the NIC holds what the mirror holds, and every call has been reported.
    av.settle().unwrap();
    m.settle();
    assert_eq!(short(sink.read()), m.read(), "the last events");
    assert!(m.calls.is_empty());
    assert!(av.verify_nic().unwrap().is_empty());
    seen
}
