//! `FI_EVENT`: asynchronous inserts, `fi_av_bind`, progress, and `fi_close`.
//!
//! An insert call of an `FI_EVENT` AV does everything a synchronous one does on the host (the
//! mirror holds the addresses and `fi_addr` gets their indices before the call returns), then
//! submits the AV_WRITE ([`NicAvTable::submit_write`]) and returns `Ok(0)`, `FI_SUCCESS`,
//! without waiting. The call's bookkeeping (context, per-address failures, records still at the
//! NIC) lives in [`AsyncShared`], which the bound event queue reaches through a weak
//! reference, so reading the queue can finish inserts while the application owns the AV.
//!
//! Until the AV_WRITE completes, the NIC entries of the call are invalid: a send to one of its
//! `fi_addr_t` completes with `FI_EADDRNOTAVAIL`, while `fi_av_lookup` already returns the
//! address (from the mirror). Once `FI_AV_COMPLETE` is read, sends reach the inserted
//! addresses. If the NIC refuses an AV_WRITE, or does not answer it, its addresses are
//! reported failed and their indices are revoked at once for `lookup`, `index_of`, `address`,
//! `remove`, `len` and `iter`, and released from the mirror (reusable) at the AV's first
//! call after their error entries are posted, never before: until then the application may
//! still name the address by its index. The indices of a write that went unanswered are
//! also rewritten on the NIC, by synchronous commands, before the next insert takes any
//! index, once the writes still in flight have completed (see `reconcile_before_insert`):
//! the one time an insert waits for the NIC.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::task::Waker;

use tracing::{debug, warn};
use uet_fwif::admin::MAX_BATCH;
use uet_fwif::AvWriteRecord;

use super::AddressVector;
use crate::errno::{FiErrno, FiError};
use crate::event::{AvEvent, AvEventSink, AvProgress};
use crate::flags::{flag_names, FiAddr, FI_ADDR_NOTAVAIL, FI_EVENT};
use crate::nic::{NicAvTable, PendingWrite};

/// AV_WRITEs an AV keeps in flight before it waits for the oldest (each holds its records in
/// DMA memory until it completes).
pub const MAX_WRITES_IN_FLIGHT: usize = 32;

/// The `FI_EVENT` state of an AV: what it shares with its event queue, and the binding.
pub(super) struct EventState {
    shared: Arc<AsyncShared>,
    binding: Option<Binding>,
    /// The process that opened the AV: a process forked from it drops its copy without
    /// finishing the inserts, which are the parent's.
    opener: u32,
}

/// An AV's attachment to an event queue; detaches when dropped (AV closed or dropped).
struct Binding {
    sink: Arc<dyn AvEventSink>,
    id: u64,
}

impl Drop for Binding {
    fn drop(&mut self) {
        self.sink.detach_av(self.id);
    }
}

/// What the AV and its event queue share.
struct AsyncShared {
    av: u64,
    /// `inner.revoked` is not empty: lookups must check it.
    revoked_any: AtomicBool,
    inner: Mutex<AsyncInner>,
}

#[derive(Default)]
struct AsyncInner {
    sink: Option<Arc<dyn AvEventSink>>,
    /// Sequence number of the next call pushed.
    next_seq: u64,
    /// Calls not reported yet, in call order (sequence numbers without gaps).
    calls: VecDeque<Call>,
    /// AV_WRITEs submitted and not settled, in submission order.
    writes: VecDeque<InFlight>,
    /// Tags of the AV's pending `FI_MORE` records, aligned with `AddressVector::pending`.
    staged: Vec<Tag>,
    /// Records the NIC refused, still in the mirror until the AV's first call after their
    /// call's events are posted ([`AddressVector::reconcile`]).
    revoked: Vec<Revoked>,
    /// Those of them whose AV_WRITE went unanswered and may yet be applied: once released
    /// from the mirror, their indices are in doubt on the NIC ([`AddressVector::repair`]).
    revoked_in_doubt: Vec<Revoked>,
}

/// A record the NIC refused: the call it belongs to, its first index, and the indices it
/// covers.
#[derive(Clone, Copy, Debug)]
struct Revoked {
    seq: u64,
    index: u32,
    count: u32,
}

impl From<&Tag> for Revoked {
    fn from(t: &Tag) -> Self {
        Revoked {
            seq: t.seq,
            index: t.index,
            count: t.count,
        }
    }
}

/// One insert call.
struct Call {
    seq: u64,
    context: u64,
    inserted: u64,
    /// Records of the call not settled yet (staged or in flight).
    waiting: usize,
    failed: Vec<Failed>,
}

/// One address of a call that was not inserted.
struct Failed {
    position: u64,
    errno: FiErrno,
    prov_errno: i32,
    message: String,
}

/// Which call and addresses a NIC record belongs to: a single entry (`count` 1) or a
/// symmetric range of `count` members at consecutive indices and positions.
#[derive(Clone, Copy, Debug)]
struct Tag {
    seq: u64,
    position: u64,
    index: u32,
    count: u32,
}

struct InFlight {
    write: Box<dyn PendingWrite>,
    tags: Vec<Tag>,
}

/// A call being built by an insert, pushed when its addresses have all been handled.
pub(super) struct CallBuilder {
    context: u64,
    failed: Vec<Failed>,
    /// `(position, first index, addresses)` per pending record, in `pending` order.
    records: Vec<(u64, u32, u32)>,
}

impl CallBuilder {
    pub(super) fn new(context: u64) -> Self {
        CallBuilder {
            context,
            failed: Vec::new(),
            records: Vec::new(),
        }
    }

    /// Address `position` went into the mirror at `index`; its record is pending.
    pub(super) fn staged(&mut self, position: usize, index: u32) {
        self.staged_run(position, index, 1);
    }

    /// Addresses `position..position + count` went into the mirror at `first..first + count`
    /// as one pending record (a symmetric range).
    pub(super) fn staged_run(&mut self, position: usize, first: u32, count: u32) {
        self.records.push((position as u64, first, count));
    }

    /// Address `position` was not inserted.
    pub(super) fn failed(&mut self, position: usize, e: &FiError) {
        self.failed.push(Failed {
            position: position as u64,
            errno: e.errno,
            prov_errno: 0,
            message: e.message.clone(),
        });
    }
}

impl EventState {
    pub(super) fn new(av: u64) -> Box<Self> {
        Box::new(EventState {
            shared: Arc::new(AsyncShared {
                av,
                revoked_any: AtomicBool::new(false),
                inner: Mutex::new(AsyncInner::default()),
            }),
            binding: None,
            opener: std::process::id(),
        })
    }

    /// Whether the NIC refused `index` and the mirror has not released it yet.
    #[cold]
    fn revoked(&self, index: u32) -> bool {
        self.shared
            .lock()
            .revoked
            .iter()
            .any(|r| index >= r.index && index - r.index < r.count)
    }
}

impl AsyncShared {
    fn lock(&self) -> MutexGuard<'_, AsyncInner> {
        // Every critical section leaves the state consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AvProgress for AsyncShared {
    fn progress(&self) -> usize {
        // Never wait for the AV's owner, which holds the lock while it waits for the NIC
        // (draining before a remove, finishing at close): fi_eq_read must not block, and
        // fi_eq_sread must keep its timeout. What the owner reaps is posted by the next
        // progress, which a blocked reader runs every PROGRESS_INTERVAL while the AV is bound.
        let mut inner = match self.inner.try_lock() {
            Ok(inner) => inner,
            // Every critical section leaves the state consistent.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return 0,
        };
        inner.reap(self, false);
        inner.post_ready(self.av)
    }

    fn in_flight(&self) -> bool {
        match self.inner.try_lock() {
            Ok(inner) => !inner.calls.is_empty(),
            // Every critical section leaves the state consistent.
            Err(TryLockError::Poisoned(p)) => !p.into_inner().calls.is_empty(),
            Err(TryLockError::WouldBlock) => true,
        }
    }

    fn wake_on_progress(&self, waker: &Waker) -> bool {
        let mut inner = match self.inner.try_lock() {
            Ok(inner) => inner,
            // Every critical section leaves the state consistent.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // The owner waits for the NIC itself; what it collects is posted by a progress
            // that only polling runs.
            Err(TryLockError::WouldBlock) => return false,
        };
        if inner.calls.front().is_some_and(|c| c.waiting == 0) {
            // A call settled (by the owner, since the last progress): the next progress posts
            // its events.
            waker.wake_by_ref();
            return true;
        }
        // Every write in flight wakes the reader. With none, what is left of the calls is
        // staged (`FI_MORE`): it goes to the NIC with the application's next insert, which
        // tells the queue ([`AvEventSink::inserts_queued`]).
        inner
            .writes
            .iter_mut()
            .all(|w| w.write.wake_when_done(waker))
    }
}

impl AsyncInner {
    fn call_mut(&mut self, seq: u64) -> Option<&mut Call> {
        let first = self.calls.front()?.seq;
        let at = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.calls.get_mut(at)
    }

    /// Settle records: inserted, or failed with `errno` (then revoked from the mirror when
    /// `revoke`; the caller released them itself otherwise).
    fn settle(
        &mut self,
        shared: &AsyncShared,
        tags: &[Tag],
        failure: Option<(FiErrno, i32, &str)>,
        revoke: bool,
    ) {
        for t in tags {
            if let Some(call) = self.call_mut(t.seq) {
                call.waiting = call.waiting.saturating_sub(1);
                match failure {
                    None => call.inserted += u64::from(t.count),
                    Some((errno, prov_errno, message)) => {
                        call.failed.extend((0..u64::from(t.count)).map(|k| Failed {
                            position: t.position + k,
                            errno,
                            prov_errno,
                            message: message.to_string(),
                        }))
                    }
                }
            }
        }
        if failure.is_some() && revoke && !tags.is_empty() {
            self.revoked.extend(tags.iter().map(Revoked::from));
            shared.revoked_any.store(true, Ordering::Release);
        }
    }

    /// Settle every AV_WRITE that completed; with `block`, wait for all of them.
    fn reap(&mut self, shared: &AsyncShared, block: bool) {
        if block {
            // A look at every write first: each one's timeout runs from its first poll, so
            // the writes a NIC never answers are given up together, at about one timeout,
            // not each one a timeout after the wait for the one before ended.
            for w in self.writes.iter_mut() {
                w.write.poll();
            }
        }
        let mut i = 0;
        while let Some(w) = self.writes.get_mut(i) {
            let done = if block {
                w.write.wait();
                true
            } else {
                w.write.poll()
            };
            if !done {
                i += 1;
                continue;
            }
            let Some(w) = self.writes.remove(i) else {
                break;
            };
            let prov_errno = w.write.prov_errno();
            match w.write.finish() {
                Ok(()) => self.settle(shared, &w.tags, None, false),
                Err(e) => {
                    warn!(records = w.tags.len(), error = %e, "asynchronous AV_WRITE refused");
                    let addresses: u64 = w.tags.iter().map(|t| u64::from(t.count)).sum();
                    let message = format!(
                        "the NIC {} the AV_WRITE of {addresses} addresses: {e}",
                        e.verb()
                    );
                    self.settle(
                        shared,
                        &w.tags,
                        Some((e.errno(), prov_errno, &message)),
                        true,
                    );
                    if e.in_doubt {
                        self.revoked_in_doubt
                            .extend(w.tags.iter().map(Revoked::from));
                    }
                }
            }
        }
    }

    /// Post the events of every finished call at the front, in call order.
    fn post_ready(&mut self, av: u64) -> usize {
        let mut done = 0;
        while self.calls.front().is_some_and(|c| c.waiting == 0) {
            let Some(mut call) = self.calls.pop_front() else {
                break;
            };
            call.failed.sort_by_key(|f| f.position);
            let events = call
                .failed
                .drain(..)
                .map(|f| AvEvent::InsertError {
                    av,
                    context: call.context,
                    position: f.position,
                    errno: f.errno,
                    prov_errno: f.prov_errno,
                    message: f.message,
                })
                .chain(core::iter::once(AvEvent::InsertComplete {
                    av,
                    context: call.context,
                    inserted: call.inserted,
                }));
            for event in events {
                let posted = match &self.sink {
                    Some(sink) => sink.post_av_event(event),
                    None => Err(FiError::new(FiErrno::FI_ENOEQ, "no event queue is bound")),
                };
                if let Err(e) = posted {
                    warn!(error = %e, context = call.context, "AV event lost");
                }
            }
            done += 1;
        }
        done
    }
}

/// `fi_close` refused: the error, and the AV handle given back unchanged (an
/// [`AddressVector`] or a [`crate::NamedAv`]).
pub struct CloseError<T> {
    /// Why (`FI_EBUSY`: endpoints still use the AV).
    pub error: FiError,
    /// The AV, still open.
    pub av: Box<T>,
}

/// `fi_close` of an [`AddressVector`] refused.
pub type AvCloseError<N> = CloseError<AddressVector<N>>;

impl<T> core::fmt::Debug for CloseError<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CloseError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<T> core::fmt::Display for CloseError<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.error, f)
    }
}

impl<T> std::error::Error for CloseError<T> {}

impl<N: NicAvTable> AddressVector<N> {
    /// Whether the AV was opened with `FI_EVENT`.
    #[inline]
    pub(super) fn is_event(&self) -> bool {
        self.attr.flags & FI_EVENT != 0
    }

    /// `fi_av_bind(av, eq, flags)`: post this AV's events to `eq`. Needed before an AV opened
    /// with `FI_EVENT` can insert; allowed (and then merely held) on other AVs. While bound,
    /// `eq` counts the AV as bound (its close fails with `FI_EBUSY`) and reading it drives the
    /// AV's progress. The AV stays bound until it is closed or dropped. Errors, nothing
    /// changed: `FI_EBADFLAGS` when `flags` is not 0 (fi_av(3): reserved, must be 0);
    /// `FI_EINVAL` when an event queue is already bound; the queue's refusal (a closed queue:
    /// `FI_EBADF`).
    pub fn bind(&mut self, eq: Arc<dyn AvEventSink>, flags: u64) -> Result<(), FiError> {
        if flags != 0 {
            return Err(FiError::badflags(format!(
                "fi_av_bind: flags are reserved and must be 0, not {}",
                flag_names(flags)
            )));
        }
        if self.events.as_ref().is_some_and(|e| e.binding.is_some()) {
            return Err(FiError::inval(
                "fi_av_bind: an event queue is already bound to this AV",
            ));
        }
        // Taken out, and put back only if it was there or the queue took the AV: a refused
        // bind changes nothing.
        let had_state = self.events.is_some();
        let mut state = self
            .events
            .take()
            .unwrap_or_else(|| EventState::new(self.id));
        let progress: Weak<dyn AvProgress> = Arc::downgrade(&state.shared) as Weak<dyn AvProgress>;
        let id = match eq.attach_av(progress) {
            Ok(id) => id,
            Err(e) => {
                if had_state {
                    self.events = Some(state);
                }
                return Err(e.within("fi_av_bind"));
            }
        };
        state.shared.lock().sink = Some(eq.clone());
        state.binding = Some(Binding { sink: eq, id });
        self.events = Some(state);
        debug!(av = self.id, "event queue bound");
        Ok(())
    }

    /// Whether an event queue is bound ([`AddressVector::bind`]).
    pub fn is_bound(&self) -> bool {
        self.events.as_ref().is_some_and(|e| e.binding.is_some())
    }

    /// The C `context` argument of the next insert call (`insert`, `insert_with_status`,
    /// `insert_str`, `insertsvc`, `insertsym`): on an AV opened with `FI_EVENT` its events
    /// carry it (calls without it pass 0). The call takes it, whatever it does, so it never
    /// carries over to a later one. Under `FI_SYNC_ERR` the C context is the status array,
    /// which the `status` argument carries instead; there are no events then. The same as
    /// [`crate::NamedAv::with_context`], so code serving both kinds of AV calls them alike.
    pub fn with_context(&mut self, context: u64) -> &mut Self {
        self.call_context = context;
        self
    }

    /// `FI_ENOEQ` for an insert on an `FI_EVENT` AV with no event queue bound.
    pub(super) fn check_bound(&self, call: &str) -> Result<(), FiError> {
        if self.is_event() && !self.is_bound() {
            return Err(FiError::new(
                FiErrno::FI_ENOEQ,
                format!(
                    "{call}: the AV was opened with FI_EVENT and no event queue is bound \
                     (fi_av_bind)"
                ),
            ));
        }
        Ok(())
    }

    /// Queue a finished asynchronous call; send its records unless `more` (`FI_MORE`).
    /// Whether an AV_WRITE could not be submitted (the call's own addresses in it are
    /// released already).
    pub(super) fn push_call(&mut self, b: CallBuilder, more: bool) -> bool {
        let Some(state) = self.events.as_deref() else {
            return false;
        };
        let (seq, sink) = {
            let mut inner = state.shared.lock();
            let seq = inner.next_seq;
            inner.next_seq += 1;
            inner
                .staged
                .extend(b.records.iter().map(|&(position, index, count)| Tag {
                    seq,
                    position,
                    index,
                    count,
                }));
            inner.calls.push_back(Call {
                seq,
                context: b.context,
                inserted: 0,
                waiting: b.records.len(),
                failed: b.failed,
            });
            (seq, inner.sink.clone())
        };
        let refused = !more && self.send_pending(Some(seq));
        // After the call is queued, where the queue's look at `in_flight` finds it, and after
        // its records went to the NIC, so that a reader woken by it asks to be woken by them.
        if let Some(sink) = sink {
            sink.inserts_queued();
        }
        refused
    }

    /// [`AddressVector::send_pending`], then tell the queue ([`AvEventSink::inserts_queued`]):
    /// a reader asleep until the writes it knew of progress knows nothing of these (nor of
    /// calls a refusal settled), and comes back to run progress.
    pub(super) fn submit_pending(&mut self) -> bool {
        let submitted = !self.pending.is_empty();
        let refused = self.send_pending(None);
        let sink = self
            .events
            .as_deref()
            .and_then(|e| e.shared.lock().sink.clone());
        if let (true, Some(sink)) = (submitted, sink) {
            sink.inserts_queued();
        }
        refused
    }

    /// Submit the pending records as AV_WRITEs ([`MAX_BATCH`] each) without waiting. A write
    /// the NIC does not take is settled at once: its addresses fail with `FI_EIO` (`FI_EAGAIN`
    /// when the NIC had no room for it). Those of call `own`, the insert sending them, leave
    /// the mirror at once (its `fi_addr` says so before it returns: see
    /// [`AddressVector::unmark_released`]); those of the `FI_MORE` calls before it, which
    /// have returned their indices, are revoked as a refused write's are, and leave the
    /// mirror once their events are posted (see [`AddressVector::reconcile`]). Whether that
    /// happened.
    fn send_pending(&mut self, own: Option<u64>) -> bool {
        let Some(state) = self.events.as_deref() else {
            return false;
        };
        if self.pending.is_empty() {
            return false;
        }
        let mut refused = false;
        let shared = state.shared.clone();
        let pending = core::mem::take(&mut self.pending);
        let mut inner = shared.lock();
        let tags = core::mem::take(&mut inner.staged);
        let mut records: Vec<AvWriteRecord> = Vec::new();
        for (chunk, chunk_tags) in pending
            .chunks(MAX_BATCH as usize)
            .zip(tags.chunks(MAX_BATCH as usize))
        {
            if inner.writes.len() >= MAX_WRITES_IN_FLIGHT {
                inner.reap(&shared, false);
                while inner.writes.len() >= MAX_WRITES_IN_FLIGHT {
                    if let Some(w) = inner.writes.front_mut() {
                        w.write.wait();
                    }
                    inner.reap(&shared, false);
                }
            }
            records.clear();
            records.extend(chunk.iter().map(|&index| AvWriteRecord {
                index: index.into(),
                reserved: Default::default(),
                entry: self.pending_record(index),
            }));
            match self.nic.submit_write(&records) {
                Ok(write) => inner.writes.push_back(InFlight {
                    write,
                    tags: chunk_tags.to_vec(),
                }),
                Err(e) => {
                    refused = true;
                    warn!(entries = chunk.len(), error = %e, "AV_WRITE not submitted");
                    let message = format!(
                        "the AV_WRITE of {} records could not be submitted: {e}",
                        chunk.len()
                    );
                    let failure = Some((e.errno(), 0, message.as_str()));
                    for (&index, tag) in chunk.iter().zip(chunk_tags) {
                        let own_record = Some(tag.seq) == own;
                        if own_record {
                            self.drop_record(index, false);
                        }
                        inner.settle(&shared, core::slice::from_ref(tag), failure, !own_record);
                    }
                }
            }
        }
        refused
    }

    /// After [`AddressVector::push_call`] reported an AV_WRITE not submitted: the entries of
    /// this call's `fi_addr` (its first `count`) whose indices went back say `FI_ADDR_NOTAVAIL` (fi_av(3): "the
    /// fi_addr buffer associated with a failed or aborted insertion will be set to
    /// FI_ADDR_NOTAVAIL"), so that none names an index a later insert takes.
    pub(super) fn unmark_released(&self, fi_addr: Option<&mut [FiAddr]>, count: usize) {
        for slot in fi_addr.into_iter().flatten().take(count) {
            if let Some(index) = self.decoder.index(*slot) {
                if !self.alloc.is_allocated(index) {
                    *slot = FI_ADDR_NOTAVAIL;
                }
            }
        }
    }

    /// Release from the mirror the indices the NIC refused whose calls' events are posted.
    /// The others stay revoked (unused for lookups, taken by no insert) until then: the
    /// application may still name an address by its index until the error entry that fails
    /// it is posted (the provider then sets its `fi_addr` to `FI_ADDR_NOTAVAIL`), so the index
    /// must not name another address meanwhile. Events are posted in call order, so a refusal
    /// taken in while an earlier call still waits for the NIC is posted only after that call.
    pub(super) fn reconcile(&mut self) {
        let Some(state) = self.events.as_deref() else {
            return;
        };
        if !state.shared.revoked_any.load(Ordering::Acquire) {
            return;
        }
        let (revoked, in_doubt) = {
            let mut inner = state.shared.lock();
            // Every call before the first one not reported has had its events posted.
            let posted_below = inner.calls.front().map_or(u64::MAX, |c| c.seq);
            let posted = |r: &Revoked| r.seq < posted_below;
            let (revoked, kept): (Vec<Revoked>, Vec<Revoked>) =
                inner.revoked.drain(..).partition(posted);
            inner.revoked = kept;
            let (in_doubt, kept): (Vec<Revoked>, Vec<Revoked>) =
                inner.revoked_in_doubt.drain(..).partition(posted);
            inner.revoked_in_doubt = kept;
            state
                .shared
                .revoked_any
                .store(!inner.revoked.is_empty(), Ordering::Release);
            (revoked, in_doubt)
        };
        for r in revoked {
            self.drop_record(r.index, false);
        }
        // A write that went unanswered may still land: the NIC is told again what the mirror
        // now holds there (nothing, or a later insert's entry) at the next settling call.
        for r in in_doubt {
            self.in_doubt.extend(r.index..r.index + r.count);
        }
    }

    /// [`AddressVector::reconcile`] before an insert takes indices, and then, on an `FI_EVENT`
    /// AV with entries in doubt, rewrite those entries ([`AddressVector::repair`]) so that the
    /// rewrite reaches the NIC ahead of the insert's AV_WRITE. An index freed after an
    /// unanswered write may be held on the NIC by that write, run late; an insert there would
    /// be refused as overlapping it. (A synchronous AV keeps such indices inserted, and
    /// repairs before it writes.) The pending `FI_MORE` records are not touched, and no insert
    /// takes an index in doubt before this runs. The AV_WRITEs in flight are waited for first
    /// (and what the NIC refused of them released): the rewrite of an index a range covers
    /// takes in the range's whole span, and with it the single entries in the range's holes,
    /// some of which may be in flight; rewritten before their outcome is known, one the NIC
    /// then refuses would stay on the NIC after the mirror lets it go. `FI_EIO` while the
    /// rewrite fails (`FI_EAGAIN` when the NIC had no room for it); nothing is inserted.
    pub(super) fn reconcile_before_insert(&mut self, call: &str) -> Result<(), FiError> {
        self.reconcile();
        if self.is_event() && !self.nothing_in_doubt() {
            if let Some(state) = self.events.as_deref() {
                let shared = state.shared.clone();
                let mut inner = shared.lock();
                inner.reap(&shared, true);
                // Every call sent is answered now: its events are posted, so that what the
                // NIC refused is released below, not rewritten from the mirror.
                inner.post_ready(shared.av);
            }
            self.reconcile();
            self.repair().map_err(|e| {
                FiError::new(
                    e.errno,
                    format!(
                        "{call}: nothing inserted: entries in doubt wait to be rewritten first: {}",
                        e.message
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// How many indices the NIC refused that the mirror has not released yet.
    pub(super) fn revoked_count(&self) -> u64 {
        match self.events.as_deref() {
            Some(state) if state.shared.revoked_any.load(Ordering::Acquire) => state
                .shared
                .lock()
                .revoked
                .iter()
                .map(|r| u64::from(r.count))
                .sum(),
            _ => 0,
        }
    }

    /// Whether `index` was refused by the NIC and awaits release (lookups treat it as unused).
    #[inline]
    pub(super) fn is_revoked(&self, index: u32) -> bool {
        match self.events.as_deref() {
            Some(state) if state.shared.revoked_any.load(Ordering::Acquire) => state.revoked(index),
            _ => false,
        }
    }

    /// Submit pending records, wait until every AV_WRITE in flight completed, post the
    /// events of every call (each is answered now), and release what the NIC refused: the
    /// NIC then holds what the mirror holds. Synchronous calls of an `FI_EVENT` AV (remove,
    /// set_user_id, verify) start with this, so they never race an insert in flight.
    pub(super) fn drain(&mut self) {
        self.submit_pending();
        if let Some(state) = self.events.as_deref() {
            let shared = state.shared.clone();
            let mut inner = shared.lock();
            inner.reap(&shared, true);
            // A refusal is released only once posted (see `reconcile`).
            inner.post_ready(shared.av);
        }
        self.reconcile();
    }

    /// The progress entry point of an AV (reading the bound event queue does the same):
    /// collect the NIC's completions without blocking, post the events of every insert that
    /// finished, in call order, and release from the mirror the addresses the NIC refused.
    /// Returns how many inserts completed (0 on an AV without `FI_EVENT`).
    pub fn progress(&mut self) -> usize {
        let n = match self.events.as_deref() {
            Some(state) => state.shared.progress(),
            None => 0,
        };
        self.reconcile();
        n
    }

    /// Insert calls of an `FI_EVENT` AV whose `FI_AV_COMPLETE` has not been posted yet.
    pub fn inserts_in_flight(&self) -> usize {
        self.events
            .as_deref()
            .map_or(0, |s| s.shared.lock().calls.len())
    }

    /// AV_WRITEs submitted and not yet known to have completed.
    pub fn writes_in_flight(&self) -> usize {
        self.events
            .as_deref()
            .map_or(0, |s| s.shared.lock().writes.len())
    }

    /// `fi_close`: close the AV and release its NIC table.
    ///
    /// `FI_EBUSY` while endpoints still use the table ([`NicAvTable::check_close`]); the AV
    /// comes back in the error, unchanged (nothing is waited for or cancelled). Otherwise:
    /// AV_WRITEs in flight are waited for (each bounded by the NIC's command timeout) and
    /// `FI_MORE` records not sent yet are cancelled, so every asynchronous insert gets its
    /// events (cancelled addresses fail with `FI_ECANCELED`) before the AV detaches from its
    /// event queue. Events already queued stay there, as fi_av(3) says. Pending `FI_MORE`
    /// records of a synchronous AV are dropped, as [`AddressVector::into_nic`] drops them.
    pub fn close(self) -> Result<(), AvCloseError<N>> {
        if let Err(error) = self.nic.check_close() {
            return Err(AvCloseError {
                error,
                av: Box::new(self),
            });
        }
        drop(self.into_nic());
        Ok(())
    }

    /// Finish every asynchronous insert before the AV goes away: cancel unsent records, wait
    /// for the AV_WRITEs in flight, post every remaining event.
    pub(super) fn shut_down_events(&mut self) {
        let Some(state) = self.events.as_deref().filter(|_| self.is_event()) else {
            return;
        };
        state.shared.finish();
        for index in core::mem::take(&mut self.pending) {
            self.drop_record(index, false);
        }
        self.reconcile();
    }
}

impl AsyncShared {
    /// The end of every insert, when the AV goes: unsent `FI_MORE` records fail with
    /// `FI_ECANCELED`, the AV_WRITEs in flight are waited for, and every event is posted.
    fn finish(self: &Arc<Self>) {
        let mut inner = self.lock();
        let staged = core::mem::take(&mut inner.staged);
        if !staged.is_empty() {
            debug!(
                records = staged.len(),
                "AV closed: unsent FI_MORE records cancelled"
            );
            inner.settle(
                self,
                &staged,
                Some((
                    FiErrno::FI_ECANCELED,
                    0,
                    "the AV was closed before the FI_MORE batch was sent",
                )),
                false,
            );
        }
        inner.reap(self, true);
        inner.post_ready(self.av);
    }
}

impl Drop for EventState {
    /// An AV dropped rather than closed (or dropped while a panic unwinds) still ends its
    /// inserts as fi_av(3) says: "There will always be one non-error completion event for
    /// each insert operation". Its events are posted before the binding detaches. After
    /// [`AddressVector::close`] there is nothing left to do here.
    ///
    /// A process forked from the one that opened the AV holds a copy of the parent's inserts:
    /// the parent finishes them. Its copy waits for none of them, nor for the lock a thread of
    /// the parent (a reader of the queue running the AV's progress) may have held at the fork,
    /// which no thread of the child would ever let go.
    fn drop(&mut self) {
        if std::process::id() != self.opener {
            return;
        }
        self.shared.finish();
    }
}
