//! Named AVs: one address vector shared by the processes of a node.
//!
//! fi_av(3): "Address vectors may be shared across multiple processes which access the same
//! named domain on the same node." A [`NamedAv`] is one process's handle on such an AV. The
//! authoritative table lives in a shared-memory segment named after the AV ([`segment`]
//! describes the layout, the lock and how a crash is survived); every process keeps its own
//! [`AddressVector`] mirror over its own NIC AV table (each process drives its own NIC
//! function) and keeps it in step with the segment. So an `fi_addr_t` names the same address
//! in every process, and each process's NIC translates it.
//!
//! ## How a call runs
//!
//! - **A change** (insert, remove) takes the segment's lock exclusively, first catches up with
//!   the changes other processes made, then chooses indices with the segment's lowest-free
//!   allocator, applies the change to its own mirror and NIC (placing each address at its
//!   index, [`AddressVector::insert_at`]), and only once the NIC has accepted it writes the
//!   slots, appends to the change log and bumps the generation. When the NIC refuses, nothing
//!   reaches the segment: other processes never see an index that is not in every NIC that
//!   caught up.
//! - **Catching up** ([`NamedAv::sync`], the first thing every call does, and what an
//!   endpoint bound to the mirror does before each send and completion read through
//!   [`AvSync`], so that a process that makes no AV call still sends where the AV says): when
//!   the segment's generation is the one this handle last saw, nothing happens (one atomic
//!   load).
//!   Otherwise, under the shared lock, the indices the log names since this handle's position
//!   are compared with the mirror, and every difference is applied to the mirror and the NIC
//!   (removals in one AV_INVALIDATE, inserts in one AV_WRITE). A handle that fell more than
//!   [`segment::LOG_RECORDS`] changes behind, or that opened, rescans every index up to the
//!   high-water mark (or up to the highest index in use, when the mark is below it). If its
//!   NIC refuses, the call fails with `FI_EIO` (`FI_EAGAIN` when the NIC had no room for the
//!   command) and the next call tries again from the same position.
//!
//! ## Choices where fi_av(3) leaves room
//!
//! - **Create or open.** Without `FI_READ` a name opens the AV, creating it when it does not
//!   exist. With `FI_READ` it must exist: `FI_ENOENT` otherwise (the man page names no errno;
//!   this is `shm_open`'s).
//! - **Attributes of an existing AV.** `count` must be its size, or 0 to take its size; its
//!   `rx_ctx_bits` and JobID must be the same. Each difference is `FI_EINVAL` naming the
//!   attribute. `ep_per_node` and `FI_SYMMETRIC` are hints, and `addr_format` belongs to each
//!   process's domain.
//! - **Read-only.** An AV opened with `FI_READ` catches up and answers lookups; every insert
//!   and remove is `FI_EPERM` ("operation not permitted": the man page names no errno; the
//!   operation is refused by how the AV was opened, not by the permissions of the segment,
//!   which are `FI_EACCES` when `fi_av_open` cannot open it).
//! - **`map_addr`.** Only named AVs look at it. Every `fi_addr_t` of this AV is a table index,
//!   the same in every process whatever its `map_addr` (fi_av(3): "The relationship between
//!   the map_addr and any returned fi_addr_t is not defined"). `map_addr` 0 gets 0 back in
//!   [`NamedAv::attr`] (fi_av(3): "the map_addr used by the provider will be returned"), the
//!   base of the indices; any other value is accepted and kept as given.
//! - **`FI_EVENT`**: an insert into a named AV runs under the segment's lock and completes
//!   before the call returns; on an AV opened with `FI_EVENT` it then posts what fi_av(3)
//!   asks of an asynchronous insert to the bound event queue (one error entry per address
//!   not inserted, then `FI_AV_COMPLETE` with the count) and returns 0. `FI_ENOEQ` before
//!   [`NamedAv::bind`], `FI_EBADFLAGS` with `FI_SYNC_ERR`, as for any `FI_EVENT` AV.
//! - **Not with a name**: `FI_AV_USER_ID` (fi_av(3): "This feature may be unavailable if
//!   shared AVs are requested") is `FI_EBADFLAGS` at open; so are the insert flags
//!   `FI_AV_USER_ID` and `FI_AUTH_KEY`. A domain with `auth_key_size` `FI_AV_AUTH_KEY` is `FI_ENOSYS`: a named
//!   AV holds no auth keys.
//! - **Symmetric sets** (`fi_av_insertsym` of IP-literal nodes) are ranges in every process's
//!   mirror and NIC, as in an unnamed AV: the segment records each range beside its members'
//!   slots (which stay the truth of what the AV holds, so a repair or a range table of
//!   [`segment::RANGE_RECORDS`] full only costs compactness), and a process that catches up
//!   places a recorded range as one range before it reconciles the indices one by one.
//! - **Between catch-ups.** This process's NIC translates with its own table, as of the last
//!   catch-up: every AV call, and every send and completion read of an endpoint bound to the
//!   mirror, makes one. A message that arrives before this process has caught up with a
//!   change another process made is attributed as the table had it then: a peer inserted
//!   since is `FI_ADDR_NOTAVAIL` (as fi_cq(3) allows for an unknown source), and a peer
//!   removed since carries the index it had, which may name another peer by the time the
//!   completion is read. As with any shared AV, processes that change it and use it agree on
//!   when (a barrier after the inserts, typically); a process that reads its completions
//!   catches up with every change committed before it reads.
//! - **`FI_MORE`** is accepted as the hint it is and every call completes on the NIC: a
//!   change reaches the segment only once every NIC record of it has been accepted.
//! - **Close.** The last handle to close, in any process, unlinks the segment; a process
//!   that dies is not counted (the kernel drops its locks). A handle belongs to the process
//!   that opened it: in a process forked from that one, every change and catch-up that needs
//!   the segment's lock is `FI_EINVAL`, and its close leaves the AV alone; nor does the fork
//!   keep the opener's locks or presence once the opener has closed the handle or died.

pub mod segment;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, Weak};

use tracing::debug;
use uet_fwif::UetAddress;

use crate::addr_str::{Resolver, SymRange};
use crate::av::{
    address_buffer, binary_addresses, check_out_arrays, insert_format, string_addresses, svc_item,
    sym_items, AddrFormat, AddressVector, AvAttr, AvLimits, ADDR_LEN,
};
use crate::errno::{FiErrno, FiError};
use crate::event::{AvEvent, AvEventSink, AvProgress};
use crate::flags::{
    flag_names, FiAddr, FI_ADDR_NOTAVAIL, FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID, FI_EVENT,
    FI_MORE, FI_READ, FI_SYNC_ERR,
};
use crate::nic::NicAvTable;
use segment::{Locked, Segment, SegmentParams, SharedRange, LOG_INSERT, LOG_REMOVE};

/// What an endpoint bound to a named AV's mirror calls before each send and each completion
/// read ([`AddressVector::sync_hook`]): bring this process's mirror and NIC table up to date
/// with the changes other processes made, so that the NIC translates an `fi_addr_t` as the AV
/// does now (fi_av(3): "an fi_addr_t returned as part of an fi_av_insert call on one process
/// is usable on another process"), both ways: a send reaches the peer the AV names, and a
/// message that arrives afterwards is attributed to its peer's index in the AV now. One load
/// of the segment's generation when nothing changed; otherwise the catch-up
/// [`NamedAv::sync`] does.
pub trait AvSync: Send + Sync {
    /// Catch up if another handle changed the AV. Never waits: when a call of this process
    /// holds the mirror (catching it up or changing it, in this thread or another), or another
    /// process holds the segment (a change, a catch-up while a repair is due, or a repair
    /// after a crash), the datapath goes on with the table as it is. A segment a writer left
    /// mid-change, with the lock free, is repaired here first (every index below the
    /// high-water mark is looked at once). `FI_EIO` when the NIC refuses the changes, `FI_EAGAIN` when it
    /// has no room for them (the next call tries again either way).
    fn catch_up(&self) -> Result<(), FiError>;
}

/// Insert flags a named AV takes.
const INSERT_FLAGS: u64 = FI_MORE | FI_SYNC_ERR;

/// One process's handle on a named AV: its own mirror and NIC table, kept in step with the
/// AV's shared segment. See the [module documentation](self).
pub struct NamedAv<N: NicAvTable> {
    shared: Arc<Shared<N>>,
    /// Opened with `FI_EVENT`: inserts report through the bound queue.
    event_mode: bool,
    /// The bound event queue (`fi_av_bind`).
    events: Option<Bound>,
    /// The `context` of the next insert call ([`NamedAv::with_context`]).
    call_context: u64,
}

/// An event queue bound to a named AV; detached when the handle goes.
struct Bound {
    sink: Arc<dyn AvEventSink>,
    attachment: u64,
    /// What the queue calls when read: nothing is ever in flight here.
    _progress: Arc<Completed>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        self.sink.detach_av(self.attachment);
    }
}

/// The progress of a named AV's inserts, which complete before their calls return.
struct Completed;

impl AvProgress for Completed {
    fn progress(&self) -> usize {
        0
    }
}

/// What a handle shares with the endpoints bound to its mirror ([`AvSync`]): the segment, and
/// this process's mirror and NIC table, which a send brings up to date.
struct Shared<N: NicAvTable> {
    seg: Segment,
    /// The attributes in effect.
    attr: AvAttr,
    local: Mutex<Local<N>>,
    /// The generation `local` reflects once it caught up (`u64::MAX` before): the send path
    /// compares it with the segment's without taking the lock.
    seen: AtomicU64,
}

/// This process's mirror of the AV, and how far it caught up.
struct Local<N: NicAvTable> {
    av: AddressVector<N>,
    /// Whether the mirror caught up once (the first catch-up rescans).
    synced: bool,
    /// The generation and log position the mirror reflects.
    seen_generation: u64,
    seen_log: u64,
}

impl<N: NicAvTable> core::fmt::Debug for NamedAv<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NamedAv")
            .field("attr", &self.shared.attr)
            .field("segment", &self.shared.seg)
            .field("seen_generation", &self.shared.seen.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// `fi_close` of a [`NamedAv`] refused (`FI_EBUSY` while endpoints use its NIC table): the
/// handle is given back unchanged.
pub type NamedAvCloseError<N> = crate::CloseError<NamedAv<N>>;

impl<N: NicAvTable + Send + 'static> NamedAv<N> {
    /// `fi_av_open` with a name: create the named AV or open the existing one, then build this
    /// process's mirror over the NIC table `nic` makes for the attributes in effect (`count`
    /// the AV's size), and catch up with the AV's contents.
    ///
    /// Errors (nothing created, the NIC table dropped): `FI_EINVAL` without a name, or with a
    /// `count`, `rx_ctx_bits` or JobID that differs from the
    /// existing AV's (naming the attribute; `max_group_id` too: every process of a named AV
    /// reads peer groups the same way); `FI_EBADFLAGS` for `FI_AV_USER_ID`;
    /// `FI_ENOENT` with `FI_READ` when the AV does not exist; `FI_EACCES` when the segment's
    /// permissions refuse this process; every error of [`AvAttr::resolve`]; what `nic` returns;
    /// `FI_EIO` when the NIC refuses the AV's entries.
    pub fn open(
        attr: AvAttr,
        limits: AvLimits,
        nic: impl FnOnce(&AvAttr) -> Result<N, FiError>,
    ) -> Result<Self, FiError> {
        let name = attr.name.ok_or_else(|| {
            FiError::inval(
                "fi_av_open: a named AV needs a name (an AV without one is opened with \
                 AddressVector::open)",
            )
        })?;
        let refused = attr.flags & FI_AV_USER_ID;
        if refused != 0 {
            return Err(FiError::badflags(format!(
                "fi_av_open: named AV '{}': flags {} are not supported on named AVs",
                name.as_str(),
                flag_names(refused)
            )));
        }
        if attr.auth_key_size == FI_AV_AUTH_KEY {
            return Err(FiError::new(
                FiErrno::FI_ENOSYS,
                format!(
                    "fi_av_open: named AV '{}': auth_key_size FI_AV_AUTH_KEY: a named AV holds \
                     no auth keys (the domain's JobID is every entry's)",
                    name.as_str()
                ),
            ));
        }
        let resolved = attr.resolve(&limits)?;
        let read_only = attr.flags & FI_READ != 0;
        let want = SegmentParams {
            capacity: u32::try_from(resolved.count)
                .map_err(|_| FiError::inval("fi_av_open: count does not fit in 32 bits"))?,
            rx_ctx_bits: resolved.rx_ctx_bits,
            job_id: resolved.job_id,
            max_group_id: resolved.max_group_id,
        };
        let (seg, created) = Segment::open(name.as_str(), !read_only, want)?;
        if !created {
            check_existing(name.as_str(), &attr, &seg, &limits)?;
        }
        let attr = AvAttr {
            count: seg.capacity() as usize,
            map_addr: attr.map_addr,
            ..resolved
        }
        .resolve(&limits)?;
        let local_attr = AvAttr {
            name: None,
            flags: attr.flags & !(FI_READ | FI_EVENT),
            ..attr
        };
        let table = nic(&attr)?;
        let av = AddressVector::open(table, local_attr, limits)?;
        debug!(
            name = name.as_str(),
            created,
            read_only,
            capacity = attr.count,
            "named AV opened"
        );
        let event_mode = attr.flags & FI_EVENT != 0;
        let shared = Arc::new(Shared {
            seg,
            attr,
            local: Mutex::new(Local {
                av,
                synced: false,
                seen_generation: 0,
                seen_log: 0,
            }),
            seen: AtomicU64::new(u64::MAX),
        });
        // Endpoints bound to the mirror catch it up before they send; the mirror holds the
        // hook weakly (the shared state holds the mirror).
        let hook: Weak<dyn AvSync> = Arc::downgrade(&shared) as Weak<dyn AvSync>;
        shared.local().av.set_sync_hook(hook);
        let mut named = NamedAv {
            shared,
            event_mode,
            events: None,
            call_context: 0,
        };
        named.sync()?;
        Ok(named)
    }

    /// The attributes in effect: the name, `count` the AV's size, `map_addr` as given (0 when
    /// 0 was given: the base `fi_addr_t`), the open flags.
    pub fn attr(&self) -> &AvAttr {
        &self.shared.attr
    }

    /// The AV's name.
    pub fn name(&self) -> &str {
        self.shared.name()
    }

    /// Opened with `FI_READ`.
    pub fn is_read_only(&self) -> bool {
        self.shared.attr.flags & FI_READ != 0
    }

    /// The shared-memory file of the AV.
    pub fn segment_path(&self) -> &Path {
        self.shared.seg.path()
    }

    /// The AV's generation: how many changes it has seen since it was created.
    pub fn generation(&self) -> u64 {
        self.shared.seg.generation()
    }

    /// Handles attached to the AV in every process (a handle of a process that died is
    /// counted until the last close).
    pub fn handles(&self) -> u64 {
        self.shared.seg.refcount()
    }

    /// This process's mirror as of its last catch-up: everything an [`AddressVector`]
    /// answers (`iter`, `mirror_entry`, the NIC table to bind endpoints to, AV sets). The
    /// mirror is locked while the guard lives, as a `std::sync::Mutex` is: one guard at a time
    /// in a thread (two in one expression wait for each other). Endpoints bound to the mirror
    /// do not wait for it: while a guard lives they send and read completions without
    /// catching up.
    pub fn av(&self) -> AvGuard<'_, N> {
        AvGuard(self.shared.local())
    }

    /// The NIC table, mutably (what [`NamedAv::verify_nic`] checks), locked as
    /// [`NamedAv::av`] is.
    pub fn nic_mut(&mut self) -> NicGuard<'_, N> {
        NicGuard(self.shared.local())
    }

    /// Number of indices (the AV's size).
    pub fn capacity(&self) -> usize {
        self.shared.attr.count
    }

    /// Resolve host names with `resolver` instead of std's resolver.
    pub fn set_resolver(&mut self, resolver: Resolver) {
        self.shared.local().av.set_resolver(resolver);
    }

    /// Catch up with the changes other handles made: afterwards this process's mirror and
    /// NIC table hold what the AV holds. Cheap when nothing changed. `FI_EIO` when the NIC
    /// refuses, `FI_EAGAIN` when it has no room for the commands (the next call tries again
    /// either way). Endpoints bound to the mirror do the same before
    /// each send ([`AvSync`]).
    pub fn sync(&mut self) -> Result<(), FiError> {
        let mut local = self.shared.local();
        self.shared.sync_locked(&mut local)
    }

    /// Addresses in the AV (after catching up).
    pub fn len(&mut self) -> Result<usize, FiError> {
        let mut local = self.shared.local();
        self.shared.sync_locked(&mut local)?;
        Ok(local.av.len())
    }

    /// The AV holds no address (after catching up).
    pub fn is_empty(&mut self) -> Result<bool, FiError> {
        Ok(self.len()? == 0)
    }

    /// `fi_av_lookup` after catching up: see [`AddressVector::lookup`].
    pub fn lookup(
        &mut self,
        fi_addr: FiAddr,
        addr: &mut [u8],
        addrlen: &mut usize,
    ) -> Result<(), FiError> {
        let mut local = self.shared.local();
        self.shared.sync_locked(&mut local)?;
        local.av.lookup(fi_addr, addr, addrlen)
    }

    /// The address at `fi_addr` after catching up, parsed.
    pub fn address(&mut self, fi_addr: FiAddr) -> Result<UetAddress, FiError> {
        let mut local = self.shared.local();
        self.shared.sync_locked(&mut local)?;
        local.av.address(fi_addr)
    }

    /// `fi_av_straddr`: see [`AddressVector::straddr`]. Needs no mirror (nor its lock).
    pub fn straddr(&self, addr: &[u8], buf: &mut [u8], len: &mut usize) -> String {
        crate::av::straddr_in(self.shared.attr.addr_format, addr, buf, len)
    }

    /// Catch up, then read this process's NIC table back and compare it with the mirror:
    /// see [`AddressVector::verify_nic`].
    pub fn verify_nic(&mut self) -> Result<Vec<crate::AvMismatch>, FiError> {
        let mut local = self.shared.local();
        self.shared.sync_locked(&mut local)?;
        local.av.verify_nic()
    }

    /// `fi_av_bind(av, eq, flags)`: post this handle's insert events to `eq` (see the module
    /// documentation on `FI_EVENT`); allowed, and merely held, on an AV opened without it.
    /// While bound, `eq` counts the AV as bound; the handle stays bound until it goes.
    /// Errors, nothing changed: `FI_EBADFLAGS` when `flags` is not 0; `FI_EINVAL` when an event
    /// queue is already bound; the queue's refusal (a closed queue: `FI_EBADF`).
    pub fn bind(&mut self, eq: Arc<dyn AvEventSink>, flags: u64) -> Result<(), FiError> {
        if flags != 0 {
            return Err(FiError::badflags(format!(
                "fi_av_bind: flags are reserved and must be 0, not {}",
                flag_names(flags)
            )));
        }
        if self.events.is_some() {
            return Err(FiError::inval(
                "fi_av_bind: an event queue is already bound to this AV",
            ));
        }
        let progress = Arc::new(Completed);
        let weak: std::sync::Weak<dyn AvProgress> =
            Arc::downgrade(&progress) as std::sync::Weak<dyn AvProgress>;
        let attachment = eq.attach_av(weak).map_err(|e| e.within("fi_av_bind"))?;
        self.events = Some(Bound {
            sink: eq,
            attachment,
            _progress: progress,
        });
        Ok(())
    }

    /// The C `context` argument of the next insert call: its events carry it on an AV opened
    /// with `FI_EVENT` (calls without it pass 0).
    pub fn with_context(&mut self, context: u64) -> &mut Self {
        self.call_context = context;
        self
    }

    /// An insert call refused before it reached the AV: see
    /// [`AddressVector::refuse_insert`]. Every call of a named AV completes on the NIC, so
    /// there is no batch to end: `error`, and the call's context is dropped.
    pub fn refuse_insert(&mut self, _flags: u64, error: FiError) -> Result<usize, FiError> {
        self.call_context = 0;
        Err(error)
    }

    /// The start of every insert call: take the call's context (so that it never carries over
    /// to a later call, whatever this one does), then refuse the call on a read-only handle
    /// before anything else is looked at.
    fn begin_insert(&mut self, call: &str) -> Result<u64, FiError> {
        let context = core::mem::take(&mut self.call_context);
        self.check_writable(call)?;
        Ok(context)
    }

    /// Run an insert call of `count` addresses on an `FI_EVENT` AV: synchronously, with a
    /// status array of its own, then post one error event per address not inserted and
    /// `FI_AV_COMPLETE`, and return 0. Errors of the call itself (arguments, the segment, a
    /// NIC that refused the batch) are returned, and post nothing.
    #[allow(clippy::too_many_arguments)]
    fn evented(
        &mut self,
        call: &str,
        context: u64,
        count: usize,
        flags: u64,
        with_status: bool,
        run: impl FnOnce(&mut Self, u64, Option<&mut [i32]>) -> Result<usize, FiError>,
    ) -> Result<usize, FiError> {
        if flags & FI_SYNC_ERR != 0 {
            return Err(FiError::badflags(format!(
                "{call}: FI_SYNC_ERR cannot be combined with FI_EVENT"
            )));
        }
        if with_status {
            return Err(FiError::inval(format!(
                "{call}: a status array is only written with FI_SYNC_ERR"
            )));
        }
        let Some(sink) = self.events.as_ref().map(|b| b.sink.clone()) else {
            return Err(FiError::new(
                FiErrno::FI_ENOEQ,
                format!(
                    "{call}: the AV was opened with FI_EVENT and no event queue is bound \
                     (fi_av_bind)"
                ),
            ));
        };
        let mut status = Vec::new();
        status
            .try_reserve_exact(count)
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, format!("{call}: no memory")))?;
        status.resize(count, 0);
        self.event_mode = false;
        let result = run(self, flags | FI_SYNC_ERR, Some(&mut status));
        self.event_mode = true;
        let inserted = result?;
        let av = self.shared.local().av.id();
        let post = |event| {
            if let Err(e) = sink.post_av_event(event) {
                tracing::warn!(error = %e, "named AV: an insert event was lost");
            }
        };
        for (position, &st) in status.iter().enumerate().filter(|(_, &st)| st != 0) {
            // The status holds the positive fabric errno ([`FiErrno::to_status`]).
            let errno = u32::try_from(st).map_or(FiErrno::FI_EIO, FiErrno::new);
            post(AvEvent::InsertError {
                av,
                context,
                position: position as u64,
                errno,
                prov_errno: 0,
                message: format!("{call}: address {position} not inserted: {errno}"),
            });
        }
        post(AvEvent::InsertComplete {
            av,
            context,
            inserted: inserted as u64,
        });
        Ok(0)
    }

    /// `fi_av_insert` into the named AV: as [`AddressVector::insert`], each address at the
    /// lowest index unused in the whole AV. `FI_EPERM` on a read-only handle.
    pub fn insert(
        &mut self,
        addr: &[u8],
        count: usize,
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
    ) -> Result<usize, FiError> {
        self.insert_with_status(addr, count, fi_addr, flags, None)
    }

    /// `fi_av_insert` with `FI_SYNC_ERR`'s status array: see
    /// [`AddressVector::insert_with_status`].
    pub fn insert_with_status(
        &mut self,
        addr: &[u8],
        count: usize,
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        const CALL: &str = "fi_av_insert";
        let context = self.begin_insert(CALL)?;
        if self.event_mode {
            // `count` sizes the call's status array: it must describe the buffer first.
            address_buffer(CALL, addr, count)?;
            return self.evented(
                CALL,
                context,
                count,
                flags,
                status.is_some(),
                |me, flags, st| me.insert_with_status(addr, count, fi_addr, flags, st),
            );
        }
        self.check_insert(CALL, count, fi_addr.as_deref(), flags, status.as_deref())?;
        insert_format(self.shared.attr.addr_format, AddrFormat::Uet)?;
        let items = binary_addresses(CALL, addr, count)?.collect();
        self.insert_items(CALL, items, fi_addr, status)
    }

    /// `fi_av_insert` of `FI_ADDR_STR` strings: see [`AddressVector::insert_str`].
    pub fn insert_str(
        &mut self,
        addrs: &[&str],
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        const CALL: &str = "fi_av_insert";
        let context = self.begin_insert(CALL)?;
        if self.event_mode {
            return self.evented(
                CALL,
                context,
                addrs.len(),
                flags,
                status.is_some(),
                |me, flags, st| me.insert_str(addrs, fi_addr, flags, st),
            );
        }
        self.check_insert(
            CALL,
            addrs.len(),
            fi_addr.as_deref(),
            flags,
            status.as_deref(),
        )?;
        insert_format(self.shared.attr.addr_format, AddrFormat::Str)?;
        let resolver = self.shared.local().av.resolver();
        let items = string_addresses(addrs, resolver).collect();
        self.insert_items(CALL, items, fi_addr, status)
    }

    /// `fi_av_insertsvc`: see [`AddressVector::insertsvc`].
    pub fn insertsvc(
        &mut self,
        node: &str,
        service: Option<&str>,
        fi_addr: Option<&mut FiAddr>,
        flags: u64,
        status: Option<&mut i32>,
    ) -> Result<usize, FiError> {
        const CALL: &str = "fi_av_insertsvc";
        let context = self.begin_insert(CALL)?;
        if self.event_mode {
            return self.evented(
                CALL,
                context,
                1,
                flags,
                status.is_some(),
                |me, flags, st| {
                    let st = st.and_then(|s| s.first_mut());
                    me.insertsvc(node, service, fi_addr, flags, st)
                },
            );
        }
        let fi_addr = fi_addr.map(core::slice::from_mut);
        let status = status.map(core::slice::from_mut);
        self.check_insert(CALL, 1, fi_addr.as_deref(), flags, status.as_deref())?;
        // The mirror is not held while the name resolves: a send or completion read may
        // catch it up meanwhile.
        let resolver = self.shared.local().av.resolver();
        let item = svc_item(CALL, node, service, resolver)?;
        self.insert_items(CALL, vec![item], fi_addr, status)
    }

    /// `fi_av_insertsym`: see [`AddressVector::insertsym`]. As there, a set of IP-literal
    /// nodes goes in as ranges — one per run of consecutive indices — in this process's
    /// mirror and NIC, and the segment records each range so that every other process holds
    /// it as a range too (its members' slots are written as well: they are what the AV holds).
    /// A host-name set, a run the mirror cannot hold as a range, or one past the segment's
    /// [`segment::RANGE_RECORDS`] range records goes in as single entries.
    #[allow(clippy::too_many_arguments)]
    pub fn insertsym(
        &mut self,
        node: &str,
        nodecnt: usize,
        service: &str,
        svccnt: usize,
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        const CALL: &str = "fi_av_insertsym";
        let context = self.begin_insert(CALL)?;
        // The count is checked next: on an FI_EVENT AV it sizes the call's status array.
        let total = nodecnt.checked_mul(svccnt).ok_or_else(|| {
            FiError::inval(format!(
                "{CALL}: nodecnt {nodecnt} × svccnt {svccnt} overflows"
            ))
        })?;
        if total > self.capacity() {
            return Err(FiError::inval(format!(
                "{CALL}: {nodecnt} nodes × {svccnt} services = {total} addresses, more than \
                 the AV's {} entries",
                self.capacity()
            )));
        }
        if self.event_mode {
            return self.evented(
                CALL,
                context,
                total,
                flags,
                status.is_some(),
                |me, flags, st| me.insertsym(node, nodecnt, service, svccnt, fi_addr, flags, st),
            );
        }
        let prefix = |e: FiError| e.within(CALL);
        self.check_insert(CALL, total, fi_addr.as_deref(), flags, status.as_deref())?;
        let range = SymRange::parse(node, nodecnt, service, svccnt).map_err(prefix)?;
        if let Some((base, svc, total)) = range.literal_set() {
            return self.insert_symmetric(CALL, base, svc, total, fi_addr, status);
        }
        let resolver = self.shared.local().av.resolver();
        let items = sym_items(CALL, &range, resolver)?;
        self.insert_items(CALL, items, fi_addr, status)
    }

    /// The `total` members of a symmetric set at the lowest unused indices of the AV, each
    /// run of consecutive indices as one range (see [`NamedAv::insertsym`]).
    fn insert_symmetric(
        &mut self,
        call: &str,
        base: UetAddress,
        svc: u32,
        total: u32,
        mut fi_addr: Option<&mut [FiAddr]>,
        mut status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        let no_memory = || FiError::new(FiErrno::FI_ENOMEM, format!("{call}: no memory"));
        let base_bytes = base
            .to_bytes()
            .map_err(|e| FiError::inval(format!("{call}: member 0: {e}")))?;
        let member = |m: u32| {
            base.symmetric_member(svc, m)
                .and_then(|a| a.to_bytes().ok())
                .ok_or_else(|| FiError::inval(format!("{call}: member {m} is not usable")))
        };
        let shared = &*self.shared;
        let mut local = shared.local();
        let locked = shared.seg.lock(true)?;
        local.catch_up(&locked, shared.name())?;
        let mut indices: Vec<u32> = Vec::new();
        indices
            .try_reserve_exact(total as usize)
            .map_err(|_| no_memory())?;
        locked.begin();
        // Why positions past the indices taken fail: a full AV, or no memory for the slots.
        let mut short = FiErrno::FI_ENOSPC;
        while indices.len() < total as usize {
            match locked.alloc() {
                Ok(i) => indices.push(i),
                Err(e) => {
                    short = e.errno;
                    break;
                }
            }
        }
        // Place each run of consecutive indices: as a range, or member by member.
        let av = &mut local.av;
        let mut ranges: Vec<(u32, u32, u32)> = Vec::new();
        let mut failed: Vec<(usize, FiError)> = Vec::new();
        let mut k = 0usize;
        while let Some(&first) = indices.get(k) {
            let mut len = 1usize;
            while indices
                .get(k + len)
                .is_some_and(|&i| Some(i) == first.checked_add(len as u32))
            {
                len += 1;
            }
            let m = k as u32;
            if len >= 2 && av.insert_range_at(first, len as u32, svc, m, base).is_ok() {
                ranges.push((first, len as u32, m));
            } else {
                for j in 0..len {
                    let index = first + j as u32;
                    let placed = member(m + j as u32).and_then(|b| av.insert_at(index, &b));
                    if let Err(e) = placed {
                        locked.free(index);
                        failed.push((k + j, e));
                    }
                }
            }
            k += len;
        }
        let flushed = av.flush();
        // What the mirror holds now (all of it, or after a failed flush what the NIC kept) is
        // written to the segment; the rest goes back.
        let mut placed = 0usize;
        for &(first, count, m) in &ranges {
            if av.address_bytes(first).is_some()
                && locked.add_range(first, count, svc, m, &base_bytes)
            {
                locked.log_range(first, count);
            } else {
                for i in first..first + count {
                    if av.address_bytes(i).is_some() {
                        locked.log(LOG_INSERT, i);
                    }
                }
            }
        }
        // Ranges and failures are in ascending position, as `indices` is walked: a cursor into
        // each says whether a position is a range member and why it failed.
        let (mut in_ranges, mut in_failed) = (ranges.iter().peekable(), failed.iter().peekable());
        for (pos, &index) in indices.iter().enumerate() {
            let m = pos as u32;
            while in_ranges
                .next_if(|&&(_, c, first_m)| first_m + c <= m)
                .is_some()
            {}
            let range_member = in_ranges
                .peek()
                .is_some_and(|&&(_, _, first_m)| first_m <= m);
            while in_failed.next_if(|&&(p, _)| p < pos).is_some() {}
            let failure = in_failed
                .peek()
                .filter(|&&(p, _)| *p == pos)
                .map(|(_, e)| e);
            let value = match av.address_bytes(index) {
                Some(bytes) => {
                    locked.store(index, &bytes);
                    if !range_member {
                        locked.log(LOG_INSERT, index);
                    }
                    placed += 1;
                    (FiAddr::from(index), 0)
                }
                None => {
                    locked.free(index);
                    let errno = match (&flushed, failure) {
                        (_, Some(e)) => e.errno,
                        (Err(e), None) => e.errno,
                        (Ok(()), None) => FiErrno::FI_EIO,
                    };
                    (FI_ADDR_NOTAVAIL, errno.to_status())
                }
            };
            if let Some(slot) = fi_addr.as_deref_mut().and_then(|o| o.get_mut(pos)) {
                *slot = value.0;
            }
            if let Some(slot) = status.as_deref_mut().and_then(|s| s.get_mut(pos)) {
                *slot = value.1;
            }
        }
        for pos in indices.len()..total as usize {
            if let Some(slot) = fi_addr.as_deref_mut().and_then(|o| o.get_mut(pos)) {
                *slot = FI_ADDR_NOTAVAIL;
            }
            if let Some(slot) = status.as_deref_mut().and_then(|s| s.get_mut(pos)) {
                *slot = short.to_status();
            }
        }
        local.finish_change(&locked, placed > 0);
        shared.publish(&local);
        flushed.map_err(|e| FiError {
            message: format!(
                "{call}: {}; {placed} of {} addresses stayed (the NIC kept them)",
                e.message,
                indices.len()
            ),
            ..e
        })?;
        Ok(placed)
    }

    /// `fi_av_remove` from the named AV: as [`AddressVector::remove`] (all or nothing,
    /// `FI_EINVAL` for an address not in use), and every process sees the indices free once it
    /// catches up. `FI_EPERM` on a read-only handle.
    pub fn remove(&mut self, fi_addrs: &[FiAddr], flags: u64) -> Result<(), FiError> {
        const CALL: &str = "fi_av_remove";
        self.check_writable(CALL)?;
        if flags != 0 {
            return Err(FiError::badflags(format!(
                "{CALL}: flags {} are not supported on named AVs",
                flag_names(flags)
            )));
        }
        if fi_addrs.is_empty() {
            return Ok(());
        }
        let shared = &*self.shared;
        let mut local = shared.local();
        let locked = shared.seg.lock(true)?;
        local.catch_up(&locked, shared.name())?;
        let av = &mut local.av;
        // (index, whether it is a range member): a single entry that filled a hole in a range's
        // span is no member, and must not count against the range's record.
        let mut indices = Vec::new();
        indices
            .try_reserve_exact(fi_addrs.len())
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, format!("{CALL}: no memory")))?;
        for (pos, &fa) in fi_addrs.iter().enumerate() {
            let index = av
                .index_of(fa)
                .map_err(|e| e.within(format_args!("{CALL}: fi_addr[{pos}]")))?;
            indices.push((index, av.is_range_member(index)));
        }
        locked.begin();
        let result = av.remove(fi_addrs, 0);
        // On a NIC failure the addresses of the commands before it are removed: they leave the
        // AV too, so it keeps holding what this NIC holds.
        let mut removed = 0;
        let mut members_gone = Vec::new();
        for &(index, member) in &indices {
            if av.address_bytes(index).is_none() {
                locked.free(index);
                locked.log(LOG_REMOVE, index);
                if member {
                    members_gone.push(index);
                }
                removed += 1;
            }
        }
        locked.range_members_removed(&members_gone);
        local.finish_change(&locked, removed > 0);
        shared.publish(&local);
        result
    }

    /// Refuse a change on a read-only handle.
    fn check_writable(&self, call: &str) -> Result<(), FiError> {
        if self.is_read_only() {
            return Err(FiError::new(
                FiErrno::FI_EPERM,
                format!(
                    "{call}: the named AV '{}' was opened read-only (FI_READ)",
                    self.name()
                ),
            ));
        }
        Ok(())
    }

    /// Check what every insert shares, as [`AddressVector::insert_with_status`] does.
    fn check_insert(
        &self,
        call: &str,
        count: usize,
        fi_addr: Option<&[FiAddr]>,
        flags: u64,
        status: Option<&[i32]>,
    ) -> Result<(), FiError> {
        let refused = flags & !INSERT_FLAGS;
        if refused & (FI_AV_USER_ID | FI_AUTH_KEY) != 0 {
            return Err(FiError::badflags(format!(
                "{call}: flags {} are not supported on named AVs",
                flag_names(refused & (FI_AV_USER_ID | FI_AUTH_KEY))
            )));
        }
        if refused != 0 {
            return Err(FiError::badflags(format!(
                "{call}: unsupported flags {}",
                flag_names(refused)
            )));
        }
        check_out_arrays(call, count, fi_addr, flags, status)
    }

    /// Insert checked addresses (or the error each failed with) at the lowest indices unused
    /// in the AV, reporting through `fi_addr` and `status` as fi_av(3) says.
    fn insert_items(
        &mut self,
        call: &str,
        items: Vec<Result<[u8; ADDR_LEN], FiError>>,
        mut fi_addr: Option<&mut [FiAddr]>,
        mut status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        let shared = &*self.shared;
        let mut local = shared.local();
        let locked = shared.seg.lock(true)?;
        local.catch_up(&locked, shared.name())?;
        let av = &mut local.av;
        let mut placed: Vec<(usize, u32, [u8; ADDR_LEN])> = Vec::new();
        placed
            .try_reserve_exact(items.len())
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, format!("{call}: no memory")))?;
        locked.begin();
        // Once the AV is full it stays full for the rest of the call (it only takes indices):
        // the remaining addresses fail without another search of the bitmap.
        let mut full: Option<FiError> = None;
        for (pos, item) in items.into_iter().enumerate() {
            let outcome = item.and_then(|bytes| {
                if let Some(e) = &full {
                    return Err(e.clone());
                }
                let index = locked.alloc().inspect_err(|e| {
                    if e.errno == FiErrno::FI_ENOSPC {
                        full = Some(e.clone());
                    }
                })?;
                match av.insert_at(index, &bytes) {
                    Ok(()) => Ok((index, bytes)),
                    Err(e) => {
                        locked.free(index);
                        Err(e)
                    }
                }
            });
            let (value, st) = match outcome {
                Ok((index, bytes)) => {
                    placed.push((pos, index, bytes));
                    (FiAddr::from(index), 0)
                }
                Err(e) => {
                    debug!(call, position = pos, error = %e, "address not inserted");
                    (FI_ADDR_NOTAVAIL, e.errno.to_status())
                }
            };
            if let Some(slot) = fi_addr.as_deref_mut().and_then(|o| o.get_mut(pos)) {
                *slot = value;
            }
            if let Some(slot) = status.as_deref_mut().and_then(|s| s.get_mut(pos)) {
                *slot = st;
            }
        }
        if let Err(e) = av.flush() {
            // The mirror rolled the batch back, and so does the named AV — except for entries
            // the NIC had accepted and then refused to invalidate: the mirror keeps those (it
            // holds what the NIC holds), so they stay in the named AV too, as with remove.
            let mut kept = 0;
            for &(pos, index, ref bytes) in &placed {
                if av.address_bytes(index).is_some() {
                    locked.store(index, bytes);
                    locked.log(LOG_INSERT, index);
                    kept += 1;
                    continue;
                }
                locked.free(index);
                if let Some(slot) = fi_addr.as_deref_mut().and_then(|o| o.get_mut(pos)) {
                    *slot = FI_ADDR_NOTAVAIL;
                }
                if let Some(slot) = status.as_deref_mut().and_then(|s| s.get_mut(pos)) {
                    *slot = e.errno.to_status();
                }
            }
            local.finish_change(&locked, kept > 0);
            shared.publish(&local);
            return Err(FiError {
                message: format!(
                    "{call}: {}; {kept} of {} addresses stayed (the NIC kept them)",
                    e.message,
                    placed.len()
                ),
                ..e
            });
        }
        for &(_, index, ref bytes) in &placed {
            locked.store(index, bytes);
            locked.log(LOG_INSERT, index);
        }
        local.finish_change(&locked, !placed.is_empty());
        shared.publish(&local);
        Ok(placed.len())
    }

    /// `fi_close`: `FI_EBUSY` while endpoints use the NIC table (the handle comes back
    /// unchanged); otherwise the NIC table goes, and the AV's segment with the last handle.
    pub fn close(self) -> Result<(), NamedAvCloseError<N>> {
        let busy = self.shared.local().av.nic().check_close();
        if let Err(error) = busy {
            return Err(NamedAvCloseError {
                error,
                av: Box::new(self),
            });
        }
        drop(self);
        Ok(())
    }

    /// Close the handle and hand the NIC table back; the handle itself when an endpoint still
    /// holds the mirror (to catch it up before it sends).
    pub fn into_nic(self) -> Result<N, Self> {
        let NamedAv {
            shared,
            event_mode,
            events,
            call_context,
        } = self;
        match Arc::try_unwrap(shared) {
            Ok(Shared { seg, local, .. }) => {
                drop(seg);
                let local = local.into_inner().unwrap_or_else(PoisonError::into_inner);
                Ok(local.av.into_nic())
            }
            Err(shared) => Err(NamedAv {
                shared,
                event_mode,
                events,
                call_context,
            }),
        }
    }
}

impl<N: NicAvTable> Shared<N> {
    /// This process's mirror, locked (a poisoned lock is taken over: every change to the
    /// mirror keeps it whole, and the next catch-up reconciles it with the segment).
    fn local(&self) -> MutexGuard<'_, Local<N>> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn name(&self) -> &str {
        self.attr.name.as_ref().map_or("", |n| n.as_str())
    }

    /// Catch `local` (this handle's mirror, locked) up with the segment: see
    /// [`NamedAv::sync`].
    fn sync_locked(&self, local: &mut Local<N>) -> Result<(), FiError> {
        if !(local.synced && self.seg.generation() == local.seen_generation) {
            let locked = self.seg.lock(false)?;
            local.catch_up(&locked, self.name())?;
        }
        self.publish(local);
        Ok(())
    }

    /// Note the generation `local` reflects for the send path's check (a store only when it
    /// moved: the datapath reads this word on every send).
    fn publish(&self, local: &Local<N>) {
        if local.synced && self.seen.load(Ordering::Relaxed) != local.seen_generation {
            self.seen.store(local.seen_generation, Ordering::Release);
            local.av.nic().reflects_generation(local.seen_generation);
        }
    }
}

impl<N: NicAvTable + Send> AvSync for Shared<N> {
    fn catch_up(&self) -> Result<(), FiError> {
        // One load of the segment's generation when nothing changed.
        if self.seg.generation() == self.seen.load(Ordering::Acquire) {
            return Ok(());
        }
        // Never wait for the mirror on the datapath: its holder is this process's own call
        // (perhaps in this very thread, through an AvGuard), which catches up itself.
        let mut local = match self.local.try_lock() {
            Ok(local) => local,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(()),
        };
        // Nor for the segment: a change another process is making is left to the next call
        // that may wait (a dead writer's, with the lock free, is repaired here).
        if local.synced && self.seg.generation() == local.seen_generation {
            self.publish(&local);
            return Ok(());
        }
        let Some(locked) = self.seg.try_lock_shared()? else {
            return Ok(());
        };
        local.catch_up(&locked, self.name())?;
        self.publish(&local);
        Ok(())
    }
}

/// [`NamedAv::av`]: this process's mirror, locked.
pub struct AvGuard<'a, N: NicAvTable>(MutexGuard<'a, Local<N>>);

impl<N: NicAvTable> core::ops::Deref for AvGuard<'_, N> {
    type Target = AddressVector<N>;
    fn deref(&self) -> &AddressVector<N> {
        &self.0.av
    }
}

/// [`NamedAv::nic_mut`]: this process's NIC table, its mirror locked.
pub struct NicGuard<'a, N: NicAvTable>(MutexGuard<'a, Local<N>>);

impl<N: NicAvTable> core::ops::Deref for NicGuard<'_, N> {
    type Target = N;
    fn deref(&self) -> &N {
        self.0.av.nic()
    }
}

impl<N: NicAvTable> core::ops::DerefMut for NicGuard<'_, N> {
    fn deref_mut(&mut self) -> &mut N {
        self.0.av.nic_mut()
    }
}

impl<N: NicAvTable> Local<N> {
    /// Bring the mirror and the NIC up to what the segment holds (the caller holds the lock).
    fn catch_up(&mut self, seg: &Locked<'_>, name: &str) -> Result<(), FiError> {
        let generation = seg.generation();
        if self.synced && generation == self.seen_generation {
            return Ok(());
        }
        let head = seg.log_head();
        let changed = if self.synced {
            seg.changes_since(self.seen_log)
        } else {
            None
        };
        let high_water = seg.high_water();
        let changed = changed.and_then(|changes| catch_up_plan(changes, &seg.ranges(), high_water));
        match changed {
            Some((indices, ranges)) => {
                let mut indices = indices;
                indices.sort_unstable();
                indices.dedup();
                self.reconcile(seg, indices.into_iter(), &ranges, name)?
            }
            None => {
                debug!(name, "named AV: rescanning every index");
                self.reconcile(seg, 0..seg.scan_end(), &seg.ranges(), name)?
            }
        }
        self.synced = true;
        self.seen_generation = generation;
        self.seen_log = head;
        Ok(())
    }

    /// Place each shared range whose indices the mirror holds none of as one range (the
    /// reconciliation that follows removes the members the segment no longer holds, and
    /// inserts what it holds in a range's holes). A range
    /// the mirror cannot place is left to that reconciliation, which inserts its members one
    /// by one.
    fn apply_ranges(&mut self, ranges: &[SharedRange]) {
        for r in ranges {
            let free = (r.first..r.first + r.count).all(|i| self.av.address_bytes(i).is_none());
            let placed = free
                .then(|| UetAddress::from_bytes(&r.base).ok())
                .flatten()
                .map(|base| {
                    self.av
                        .insert_range_at(r.first, r.count, r.svc, r.offset, base)
                });
            if let Some(Err(e)) = placed {
                debug!(first = r.first, count = r.count, error = %e, "shared range placed member by member");
            }
        }
    }

    /// Make the mirror hold what the segment holds at `indices`, and `ranges` (shared ranges
    /// whose indices are among them) as ranges where it can. What the mirror holds and the
    /// segment no longer does goes first: a mirror behind a remove of the indices a new range
    /// took would otherwise find them taken, and hold the range member by member.
    fn reconcile(
        &mut self,
        seg: &Segment,
        indices: impl Iterator<Item = u32> + Clone,
        ranges: &[SharedRange],
        name: &str,
    ) -> Result<(), FiError> {
        let prefix = |e: FiError| e.within(format_args!("named AV '{name}': catching up"));
        if !ranges.is_empty() {
            let gone: Vec<FiAddr> = indices
                .clone()
                .filter(|&index| {
                    let mine = self.av.address_bytes(index);
                    mine.is_some() && seg.slot(index) != mine
                })
                .map(FiAddr::from)
                .collect();
            if !gone.is_empty() {
                self.av.remove(&gone, 0).map_err(prefix)?;
            }
            self.apply_ranges(ranges);
        }
        let mut removals: Vec<FiAddr> = Vec::new();
        let mut inserts: Vec<(u32, [u8; ADDR_LEN])> = Vec::new();
        for index in indices {
            let shared = seg.slot(index);
            let mine = self.av.address_bytes(index);
            if shared == mine {
                continue;
            }
            if mine.is_some() {
                removals.push(FiAddr::from(index));
            }
            if let Some(bytes) = shared {
                inserts.push((index, bytes));
            }
        }
        if removals.is_empty() && inserts.is_empty() {
            // Ranges `apply_ranges` placed may wait for their NIC records.
            return self.av.flush().map_err(prefix);
        }
        if !removals.is_empty() {
            self.av.remove(&removals, 0).map_err(prefix)?;
        }
        let mut placed = Ok(());
        for (index, bytes) in &inserts {
            placed = self.av.insert_at(*index, bytes);
            if placed.is_err() {
                break;
            }
        }
        let flushed = self.av.flush();
        placed.and(flushed).map_err(prefix)
    }

    /// End a change under the exclusive lock: commit when something changed, and note that
    /// the mirror reflects the result.
    fn finish_change(&mut self, seg: &Locked<'_>, changed: bool) {
        if changed {
            self.seen_generation = seg.commit();
        } else {
            seg.end();
        }
        self.seen_log = seg.log_head();
    }
}

/// Check an existing AV's attributes against those of the open.
fn check_existing(
    name: &str,
    attr: &AvAttr,
    seg: &Segment,
    limits: &AvLimits,
) -> Result<(), FiError> {
    let capacity = seg.capacity();
    if attr.count != 0 && attr.count != capacity as usize {
        return Err(FiError::inval(format!(
            "fi_av_open: count {} differs from the named AV '{name}', which has {capacity} \
             entries (pass {capacity}, or 0 to take its size)",
            attr.count
        )));
    }
    if capacity > limits.max_entries {
        return Err(FiError::new(
            FiErrno::FI_ENOSPC,
            format!(
                "fi_av_open: count: the named AV '{name}' has {capacity} entries, more than \
                 this NIC's {} per AV",
                limits.max_entries
            ),
        ));
    }
    if u64::from(attr.rx_ctx_bits) != seg.rx_ctx_bits() {
        return Err(FiError::inval(format!(
            "fi_av_open: rx_ctx_bits {} differs from the named AV '{name}', which has {}",
            attr.rx_ctx_bits,
            seg.rx_ctx_bits()
        )));
    }
    if u64::from(attr.max_group_id) != seg.max_group_id() {
        return Err(FiError::inval(format!(
            "fi_av_open: max_group_id {} differs from the named AV '{name}', which has {}",
            attr.max_group_id,
            seg.max_group_id()
        )));
    }
    if u64::from(attr.job_id) != seg.job_id() {
        return Err(FiError::inval(format!(
            "fi_av_open: JobID {:#x} differs from the named AV '{name}', which has {:#x}",
            attr.job_id,
            seg.job_id()
        )));
    }
    Ok(())
}

/// What a handle behind the segment reconciles to catch up with `changes` (the log since it
/// last looked), given the segment's `live` range records and its `high_water` mark: the
/// indices, and the shared ranges to hold as ranges; `None` when every index is to be
/// rescanned instead.
///
/// A range inserted since is logged once, its members not one by one: they are the indices
/// its log record names. Its own record may be gone although members remain (counted down by
/// a process that held a refilled hole as a member), and another record may start at the same
/// index (it outlived its members: a process that held them one by one removed them without
/// counting them down), so the logged indices are reconciled whatever the records say; every
/// live record starting at the range's first index is taken too. A range logged without its
/// count (more members than [`segment::LOG_RANGE_MAX_COUNT`]) names no indices, and a live
/// record at its first index may be another range's, smaller, with its own record gone: every
/// index is rescanned, which costs what listing the range's members would.
fn catch_up_plan(
    changes: segment::Changes,
    live: &[SharedRange],
    high_water: u32,
) -> Option<(Vec<u32>, Vec<SharedRange>)> {
    let mut ranges: Vec<SharedRange> = Vec::new();
    let mut indices = changes.indices;
    // No more indices than the segment has are worth listing: past that (records logging
    // the same indices over and over, as only a damaged log holds), every index is rescanned
    // instead, which bounds the list by the high-water mark.
    let bound = usize::try_from(high_water).unwrap_or(usize::MAX);
    for &(first, count) in &changes.ranges {
        if count == 0 {
            return None;
        }
        ranges.extend(live.iter().filter(|r| r.first == first));
        indices.extend(first..first.saturating_add(count).min(high_water));
        if indices.len() > bound {
            return None;
        }
    }
    // A range inserted since: held as a range here too, and its indices are reconciled one by
    // one like any other change.
    for r in &ranges {
        indices.extend(r.first..r.first.saturating_add(r.count).min(high_water));
        if indices.len() > bound {
            return None;
        }
    }
    Some((indices, ranges))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u32, count: u32) -> SharedRange {
        SharedRange {
            record: 0,
            first,
            count,
            svc: 1,
            offset: 0,
            base: [0; segment::SLOT_BYTES],
        }
    }

    /// A range logged with its count: its indices and every live record starting where it
    /// does are reconciled, and nothing is rescanned.
    #[test]
    fn a_range_logged_with_its_count_is_caught_up_by_its_indices() {
        let changes = segment::Changes {
            indices: vec![9],
            ranges: vec![(2, 3)],
        };
        let (mut indices, ranges) =
            catch_up_plan(changes, &[range(2, 3), range(7, 1)], 100).expect("no rescan");
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices, vec![2, 3, 4, 9]);
        assert_eq!(ranges, vec![range(2, 3)]);
    }

    /// A range logged without its count (too many members for the log record) names no
    /// indices; a live record at its first index may be a later, smaller range's, the big
    /// one's own record gone with members left: only a rescan of every index finds them.
    #[test]
    fn a_range_logged_without_its_count_is_caught_up_by_a_rescan() {
        let changes = segment::Changes {
            indices: vec![],
            ranges: vec![(0, 0)],
        };
        assert_eq!(catch_up_plan(changes.clone(), &[], 100), None);
        assert_eq!(catch_up_plan(changes, &[range(0, 1)], 100), None);
    }
}
