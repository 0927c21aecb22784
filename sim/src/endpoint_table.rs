//! Endpoint table: the NIC's endpoints, their PIDonFEP and resource-index ranges, and the
//! state of their rings.
//!
//! * Endpoint handles are 1-based u16 values, lowest free first, up to `CAP_EP.max_endpoints`.
//! * PIDonFEP: the lowest free value in `[CAP_PID_ON_FEP.first, first + count)`.
//! * Resource indices: a contiguous range of the requested size, first fit over the 12-bit
//!   space `[1, CAP_RESOURCE_INDEX.space)`; index 0 is reserved for the provider control
//!   channel and never handed out.
//! * Demultiplexing keys: JobID -> endpoints that accept it (their own JobID, or one of an
//!   auth-key slot granted to them), (JobID, PIDonFEP) -> endpoint, PIDonFEP -> endpoint.
//! * Each endpoint keeps the auth-key slots granted to it (ENDPOINT_AUTH_KEYS) and their
//!   JobIDs, so accepting a request is a compare against a short list.
//! * Each endpoint owns a TX ring, an RX ring, an optional tagged RX ring and a completion ring
//!   in host memory. The ring indices the NIC tracks are here; the engines that use them are
//!   in `tx_engine`, `rx_engine` and `tag_match` (which also keeps the endpoint's posted
//!   tagged receives and its unexpected list here, and `multi_recv` its multi-receive
//!   buffers).
//! * Each endpoint has its counter block (`uet_fwif::counters`), zeroed at creation.
//! * Contexts (CONTEXT_CREATE) are entries of the same table with handles of their own: they
//!   carry their owner's PIDonFEP, range, JobID, initiator, mode and AV, but are never in the
//!   demultiplexing maps; the owner lists them (`rx_ctx` by receive-context index, `control`,
//!   `contexts`). An endpoint is destroyed only after its contexts.

use crate::multi_recv::MultiRecvBuf;
use crate::tag_match::{PostedTagged, Unexpected};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use uet_fwif::admin::{CTX_ROLE_CONTROL, CTX_ROLE_RX, CTX_ROLE_TX};
use uet_fwif::ring::RingGeometry;
use uet_fwif::{Completion, RxDescriptor};

/// A producer/consumer ring the NIC reads (TX, RX).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InRing {
    pub base: u64,
    pub geom: RingGeometry,
    /// NIC consumer index.
    pub head: u16,
    /// Driver producer index (last doorbell).
    pub tail: u16,
}

impl InRing {
    pub(crate) fn new(base: u64, geom: RingGeometry) -> Self {
        InRing {
            base,
            geom,
            head: 0,
            tail: 0,
        }
    }

    pub(crate) fn pending(&self) -> bool {
        self.head != self.tail
    }
}

/// A completion ring the NIC writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CqRing {
    pub base: u64,
    pub geom: RingGeometry,
    /// Driver consumer index (last CQ doorbell).
    pub head: u16,
    /// NIC producer index.
    pub tail: u16,
    /// Completed passes over the ring (selects the phase).
    pub pass: u64,
    /// The MSI-X vector `CQ_ARM` asked for, raised (once) when the ring holds a completion
    /// the driver has not freed.
    pub armed: Option<u16>,
}

impl CqRing {
    pub(crate) fn free(&self) -> u32 {
        self.geom.free(self.head, self.tail)
    }
}

/// The counters of one endpoint (see `uet_fwif::counters` for their meaning).
pub(crate) type EpStats = uet_fwif::counters::EndpointCounterValues;

/// One endpoint.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub handle: u16,
    /// Unique over the NIC's lifetime: completions of a destroyed endpoint never reach a new
    /// endpoint that reuses its handle.
    pub serial: u64,
    pub pid_on_fep: u16,
    pub ri_start: u16,
    pub ri_count: u16,
    pub job_id: u32,
    pub initiator: u32,
    pub absolute: bool,
    /// Unreliable datagram endpoint (UUD).
    pub dgram: bool,
    /// Passive endpoint: its own rings are its control channel.
    pub passive: bool,
    /// Connected endpoint (`EP_FLAG_CONNECTED`, since interface 1.20): it takes data
    /// requests only from `peer`.
    pub connected: bool,
    /// A connected endpoint's peer (ENDPOINT_PEER): fabric address, JobID and initiator id
    /// its requests carry. `None`: no sender's data is taken.
    pub peer: Option<(IpAddr, u32, u32)>,
    /// Handle of the endpoint this entry belongs to: itself for an endpoint, the owner for a
    /// context.
    pub owner: u16,
    /// `CTX_ROLE_*` of a context; TX | RX for an endpoint's own rings.
    pub role: u8,
    /// Receive contexts declared at creation (0: a regular endpoint).
    pub rx_ctx_cnt: u8,
    /// Transmit contexts declared at creation (at least 1).
    pub tx_ctx_cnt: u8,
    /// Endpoint: handle serving receive context k (0: not created yet); entry 0 is itself.
    pub rx_ctx: Vec<u16>,
    /// Endpoint: (role, index) of every live context, by handle.
    pub contexts: BTreeMap<u16, (u8, u8)>,
    /// Endpoint: handle of its control channel (itself when passive).
    pub control: Option<u16>,
    /// Bound AV handle, 0 for none.
    pub av: u32,
    pub tx: InRing,
    pub rx: InRing,
    /// Tagged RX ring; `None`: the endpoint's TAGGED resource-index space is empty.
    pub trx: Option<InRing>,
    pub cq: CqRing,
    /// Tagged receives read from the ring and waiting for a message, in posting order.
    pub posted_tagged: VecDeque<PostedTagged>,
    /// Peer groups: the largest group id the endpoint receives (its AV's `max_group_id`);
    /// `None` when the AV has no peer groups (and for passive endpoints and control
    /// channels). Fixed at creation: an AV cannot be destroyed while an endpoint is bound.
    pub max_group: Option<u32>,
    /// With peer groups: RX descriptors read from the RX ring and waiting for a message of
    /// their group, in posting order (see `peer_groups`).
    pub posted_rx: VecDeque<RxDescriptor>,
    /// Without peer groups: RX ring positions between the head and the tail whose
    /// descriptors RECV_CANCEL withdrew; the head passes them (see `recv_cancel`).
    pub rx_withdrawn: BTreeSet<u16>,
    /// Messages that arrived before a receive took them, in arrival order: tagged ones, and
    /// untagged ones since interface 1.17 (see `tag_match`, `untagged_unexpected`).
    pub unexpected: VecDeque<Unexpected>,
    /// Payload bytes held on the unexpected list (whole `request_length` of each message).
    pub unexpected_bytes: u64,
    /// Untagged messages on the unexpected list (since interface 1.17).
    pub unexpected_untagged: usize,
    /// The multi-receive buffer messages are placed in (see `multi_recv`).
    pub mrecv: Option<MultiRecvBuf>,
    /// Retired multi-receive buffers with messages still in reassembly, by buffer id.
    pub mrecv_retired: BTreeMap<u64, MultiRecvBuf>,
    /// Id of the next multi-receive buffer read from the RX ring.
    pub next_mrecv: u64,
    /// Counters.
    pub stats: EpStats,
    /// Sends waiting for their response.
    pub outstanding: u32,
    /// Multi-packet messages being reassembled into this endpoint's receive buffers.
    pub reassembling: u32,
    /// Completions waiting for ring space, in order.
    pub pending_cqes: VecDeque<Completion>,
    /// Requests for this endpoint waiting for completion-ring space, in arrival order.
    pub rx_backlog: VecDeque<Vec<u8>>,
    /// Bytes of the frames in `rx_backlog` (at most `rx_engine::RX_BACKLOG_BYTES`).
    pub rx_backlog_bytes: usize,
    /// The endpoint's own rings faulted: its engines are stopped.
    pub faulted: bool,
    /// Auth-key slots granted to the endpoint, ascending.
    pub auth_slots: Vec<u16>,
    /// JobIDs of `auth_slots` other than `job_id`, each once.
    pub auth_jobs: Vec<u32>,
}

impl Endpoint {
    /// Whether the endpoint accepts requests carrying `job_id`: its own, or granted.
    #[inline]
    pub(crate) fn accepts(&self, job_id: u32) -> bool {
        self.job_id == job_id || self.auth_jobs.contains(&job_id)
    }

    /// Completion slots already promised (queued completions, sends awaiting a response and
    /// messages in reassembly).
    pub(crate) fn cq_reserved(&self) -> u64 {
        self.pending_cqes.len() as u64 + u64::from(self.outstanding) + u64::from(self.reassembling)
    }

    /// Whether one more completion can be promised without overrunning the ring.
    pub(crate) fn cq_has_room(&self) -> bool {
        self.cq_has_room_for(1)
    }

    /// Whether `n` more completions can be promised without overrunning the ring.
    pub(crate) fn cq_has_room_for(&self, n: u64) -> bool {
        u64::from(self.cq.free()) >= self.cq_reserved() + n
    }

    /// Whether an untagged message that finds no buffer here may wait on the unexpected list
    /// (since interface 1.17): not at a datagram endpoint, which drops it (fi_domain(3):
    /// datagrams without a buffer are dropped), nor at a control channel, whose connection
    /// protocol learns from the refusal that its peer no longer takes messages.
    pub(crate) fn holds_untagged(&self) -> bool {
        !self.dgram && !self.passive && self.role & CTX_ROLE_CONTROL == 0
    }

    /// Whether an untagged message of `group` from `sender` (fabric address, initiator)
    /// arriving here must queue behind messages of its group and sender already on the
    /// unexpected list (`untagged_unexpected`).
    pub(crate) fn holds_untagged_of(&self, group: u32, sender: (IpAddr, u32)) -> bool {
        self.unexpected_untagged > 0
            && self
                .unexpected
                .iter()
                .any(|u| !u.tagged && u.group == group && u.key.sender() == sender)
    }

    /// Whether a data request (not one to the control channel) of JobID `job_id` from
    /// `sender` (fabric address, initiator) may reach the endpoint: any may, unless it is a
    /// connected one, which takes its peer's only (none before ENDPOINT_PEER names one).
    #[inline]
    pub(crate) fn takes_data_from(&self, sender: (IpAddr, u32), job_id: u32) -> bool {
        !self.connected || self.peer == Some((sender.0, job_id, sender.1))
    }

    /// Whether this entry is a context of another endpoint.
    pub(crate) fn is_context(&self) -> bool {
        self.owner != self.handle
    }
}

/// Parameters of a new endpoint, already validated by the firmware.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewEndpoint {
    pub ri_count: u16,
    pub job_id: u32,
    pub initiator: u32,
    pub absolute: bool,
    pub dgram: bool,
    pub passive: bool,
    pub connected: bool,
    pub rx_ctx_cnt: u8,
    pub tx_ctx_cnt: u8,
    pub av: u32,
    /// The AV's `max_group_id` when it has peer groups.
    pub max_group: Option<u32>,
    pub tx: InRing,
    pub rx: InRing,
    pub trx: Option<InRing>,
    pub cq: CqRing,
}

/// The rings of a new context, already validated by the firmware.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewContext {
    pub role: u8,
    pub index: u8,
    pub tx: InRing,
    pub rx: InRing,
    pub trx: Option<InRing>,
    pub cq: CqRing,
}

/// Why an endpoint could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocError {
    TableFull,
    NoPid,
    NoResourceIndices,
}

/// All endpoints of a NIC and their allocators.
#[derive(Debug)]
pub(crate) struct EndpointTable {
    max: u16,
    pid_first: u16,
    pid_count: u16,
    ri_space: u16,
    eps: BTreeMap<u16, Endpoint>,
    /// ri_start -> ri_count of allocated ranges.
    ri_ranges: BTreeMap<u16, u16>,
    by_job_pid: HashMap<(u32, u16), u16>,
    by_pid: HashMap<u16, u16>,
    jobs: HashMap<u32, u32>,
    /// (JobID, initiator) of every endpoint (contexts carry their owner's).
    initiators: HashSet<(u32, u32)>,
    next_serial: u64,
}

impl EndpointTable {
    pub(crate) fn new(max: u16, pid_first: u16, pid_count: u16, ri_space: u16) -> Self {
        EndpointTable {
            max,
            pid_first,
            pid_count,
            ri_space,
            eps: BTreeMap::new(),
            ri_ranges: BTreeMap::new(),
            by_job_pid: HashMap::new(),
            by_pid: HashMap::new(),
            jobs: HashMap::new(),
            initiators: HashSet::new(),
            next_serial: 1,
        }
    }

    /// Whether an endpoint of JobID `job_id` has initiator id `initiator`.
    pub(crate) fn initiator_in_use(&self, job_id: u32, initiator: u32) -> bool {
        self.initiators.contains(&(job_id, initiator))
    }

    fn free_handle(&self) -> Option<u16> {
        (1..=self.max).find(|h| !self.eps.contains_key(h))
    }

    fn free_pid(&self) -> Option<u16> {
        let end = u32::from(self.pid_first) + u32::from(self.pid_count);
        (u32::from(self.pid_first)..end)
            .filter_map(|p| u16::try_from(p).ok())
            .find(|p| !self.by_pid.contains_key(p))
    }

    /// First fit of `count` contiguous indices in `[1, ri_space)`.
    fn free_ri(&self, count: u16) -> Option<u16> {
        let mut cursor: u32 = 1;
        for (&s, &c) in &self.ri_ranges {
            if u32::from(s) >= cursor + u32::from(count) {
                break;
            }
            cursor = cursor.max(u32::from(s) + u32::from(c));
        }
        if cursor + u32::from(count) <= u32::from(self.ri_space) {
            u16::try_from(cursor).ok()
        } else {
            None
        }
    }

    /// Create an endpoint; nothing changes on error.
    pub(crate) fn create(&mut self, p: NewEndpoint) -> Result<&Endpoint, AllocError> {
        let handle = self.free_handle().ok_or(AllocError::TableFull)?;
        let pid = self.free_pid().ok_or(AllocError::NoPid)?;
        let ri_start = self
            .free_ri(p.ri_count)
            .ok_or(AllocError::NoResourceIndices)?;
        let serial = self.next_serial;
        self.next_serial += 1;
        self.ri_ranges.insert(ri_start, p.ri_count);
        self.by_job_pid.insert((p.job_id, pid), handle);
        self.by_pid.insert(pid, handle);
        self.initiators.insert((p.job_id, p.initiator));
        *self.jobs.entry(p.job_id).or_insert(0) += 1;
        let mut rx_ctx = vec![0; usize::from(p.rx_ctx_cnt.max(1))];
        rx_ctx[0] = handle;
        let ep = Endpoint {
            handle,
            serial,
            pid_on_fep: pid,
            ri_start,
            ri_count: p.ri_count,
            job_id: p.job_id,
            initiator: p.initiator,
            absolute: p.absolute,
            dgram: p.dgram,
            passive: p.passive,
            connected: p.connected,
            peer: None,
            owner: handle,
            role: CTX_ROLE_TX | CTX_ROLE_RX,
            rx_ctx_cnt: p.rx_ctx_cnt,
            tx_ctx_cnt: p.tx_ctx_cnt.max(1),
            rx_ctx,
            contexts: BTreeMap::new(),
            control: p.passive.then_some(handle),
            av: p.av,
            tx: p.tx,
            rx: p.rx,
            trx: p.trx,
            cq: p.cq,
            posted_tagged: VecDeque::new(),
            max_group: p.max_group.filter(|_| !p.passive),
            posted_rx: VecDeque::new(),
            rx_withdrawn: BTreeSet::new(),
            unexpected: VecDeque::new(),
            unexpected_bytes: 0,
            unexpected_untagged: 0,
            mrecv: None,
            mrecv_retired: BTreeMap::new(),
            next_mrecv: 0,
            stats: EpStats::default(),
            outstanding: 0,
            reassembling: 0,
            pending_cqes: VecDeque::new(),
            rx_backlog: VecDeque::new(),
            rx_backlog_bytes: 0,
            faulted: false,
            auth_slots: Vec::new(),
            auth_jobs: Vec::new(),
        };
        Ok(self.eps.entry(handle).or_insert(ep))
    }

    /// Add a context to endpoint `owner` (already checked by the firmware: the owner exists,
    /// is no context, and has no context of this role and index).
    pub(crate) fn create_context(&mut self, owner: u16, c: NewContext) -> Result<u16, AllocError> {
        let handle = self.free_handle().ok_or(AllocError::TableFull)?;
        let serial = self.next_serial;
        let Some(o) = self.eps.get_mut(&owner) else {
            return Err(AllocError::TableFull);
        };
        self.next_serial += 1;
        o.contexts.insert(handle, (c.role, c.index));
        if c.role & CTX_ROLE_RX != 0 {
            if let Some(slot) = o.rx_ctx.get_mut(usize::from(c.index)) {
                *slot = handle;
            }
        }
        if c.role & CTX_ROLE_CONTROL != 0 {
            o.control = Some(handle);
        }
        let ep = Endpoint {
            handle,
            serial,
            pid_on_fep: o.pid_on_fep,
            ri_start: o.ri_start,
            ri_count: o.ri_count,
            job_id: o.job_id,
            initiator: o.initiator,
            absolute: o.absolute,
            dgram: o.dgram,
            passive: o.passive,
            // Requests are checked against the peer at the endpoint (demux), never at a
            // context.
            connected: false,
            peer: None,
            rx_ctx_cnt: o.rx_ctx_cnt,
            tx_ctx_cnt: o.tx_ctx_cnt,
            av: o.av,
            owner,
            // Requests are accepted or refused at the endpoint (demux), never at a context:
            // a context holds no grants of its own (ENDPOINT_AUTH_KEYS refuses it).
            auth_slots: Vec::new(),
            auth_jobs: Vec::new(),
            role: c.role,
            rx_ctx: Vec::new(),
            contexts: BTreeMap::new(),
            control: None,
            tx: c.tx,
            rx: c.rx,
            trx: c.trx,
            cq: c.cq,
            posted_tagged: VecDeque::new(),
            max_group: o.max_group.filter(|_| c.role != CTX_ROLE_CONTROL),
            posted_rx: VecDeque::new(),
            rx_withdrawn: BTreeSet::new(),
            unexpected: VecDeque::new(),
            unexpected_bytes: 0,
            unexpected_untagged: 0,
            mrecv: None,
            mrecv_retired: BTreeMap::new(),
            next_mrecv: 0,
            stats: EpStats::default(),
            outstanding: 0,
            reassembling: 0,
            pending_cqes: VecDeque::new(),
            rx_backlog: VecDeque::new(),
            rx_backlog_bytes: 0,
            faulted: false,
        };
        self.eps.insert(handle, ep);
        Ok(handle)
    }

    /// Destroy an endpoint, releasing its PIDonFEP and resource indices, or a context
    /// (the firmware refuses an endpoint whose contexts exist).
    pub(crate) fn destroy(&mut self, handle: u16) -> Option<Endpoint> {
        let ep = self.eps.remove(&handle)?;
        if ep.is_context() {
            if let Some(o) = self.eps.get_mut(&ep.owner) {
                o.contexts.remove(&handle);
                for slot in o.rx_ctx.iter_mut().filter(|s| **s == handle) {
                    *slot = 0;
                }
                if o.control == Some(handle) {
                    o.control = None;
                }
            }
            return Some(ep);
        }
        self.ri_ranges.remove(&ep.ri_start);
        self.by_job_pid.remove(&(ep.job_id, ep.pid_on_fep));
        self.by_pid.remove(&ep.pid_on_fep);
        self.initiators.remove(&(ep.job_id, ep.initiator));
        self.job_leaves(ep.job_id);
        for &job in &ep.auth_jobs {
            self.job_leaves(job);
        }
        Some(ep)
    }

    fn job_leaves(&mut self, job_id: u32) {
        if let Some(n) = self.jobs.get_mut(&job_id) {
            *n -= 1;
            if *n == 0 {
                self.jobs.remove(&job_id);
            }
        }
    }

    /// Replace the auth-key slots granted to endpoint `handle` with `slots` (ascending), whose
    /// JobIDs are `jobs` (same order). Returns the slots granted before.
    pub(crate) fn set_auth(&mut self, handle: u16, slots: Vec<u16>, jobs: &[u32]) -> Vec<u16> {
        let Some(ep) = self.eps.get_mut(&handle) else {
            return Vec::new();
        };
        let own = ep.job_id;
        let mut new_jobs: Vec<u32> = Vec::with_capacity(jobs.len());
        for &j in jobs {
            if j != own && !new_jobs.contains(&j) {
                new_jobs.push(j);
            }
        }
        let old_jobs = core::mem::replace(&mut ep.auth_jobs, new_jobs.clone());
        let old_slots = core::mem::replace(&mut ep.auth_slots, slots);
        for j in old_jobs {
            self.job_leaves(j);
        }
        for j in new_jobs {
            *self.jobs.entry(j).or_insert(0) += 1;
        }
        old_slots
    }

    pub(crate) fn get(&self, handle: u16) -> Option<&Endpoint> {
        self.eps.get(&handle)
    }

    pub(crate) fn get_mut(&mut self, handle: u16) -> Option<&mut Endpoint> {
        self.eps.get_mut(&handle)
    }

    /// Handles of every endpoint, in order.
    pub(crate) fn handles(&self) -> Vec<u16> {
        self.eps.keys().copied().collect()
    }

    /// The entry serving a SEND (`tagged` false) or TAGGED_SEND request with resource index
    /// `ri` for endpoint `ep` (see `uet_fwif::datapath`, *Resource-index spaces*).
    pub(crate) fn receiver(ep: &Endpoint, ri: u16, tagged: bool) -> Option<u16> {
        if ri == 0 {
            return if tagged { None } else { ep.control };
        }
        if ep.passive || !Self::in_range(ep, ri) {
            return None;
        }
        if ep.rx_ctx_cnt == 0 {
            return Some(ep.handle);
        }
        let k = usize::from(ri - ep.ri_start);
        ep.rx_ctx.get(k).copied().filter(|&h| h != 0)
    }

    /// Whether `ri` lies in the endpoint's range (the same range in every space).
    pub(crate) fn in_range(ep: &Endpoint, ri: u16) -> bool {
        let start = u32::from(ep.ri_start);
        let ri = u32::from(ri);
        ri >= start && ri < start + u32::from(ep.ri_count)
    }

    pub(crate) fn has_job(&self, job_id: u32) -> bool {
        self.jobs.contains_key(&job_id)
    }

    pub(crate) fn by_job_pid(&self, job_id: u32, pid: u16) -> Option<u16> {
        self.by_job_pid.get(&(job_id, pid)).copied()
    }

    pub(crate) fn by_pid(&self, pid: u16) -> Option<u16> {
        self.by_pid.get(&pid).copied()
    }

    pub(crate) fn clear(&mut self) {
        *self = EndpointTable::new(self.max, self.pid_first, self.pid_count, self.ri_space);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(ri: u16) -> NewEndpoint {
        let g = RingGeometry::new(2).unwrap();
        NewEndpoint {
            ri_count: ri,
            job_id: 1,
            initiator: 0,
            absolute: false,
            dgram: false,
            passive: false,
            connected: false,
            rx_ctx_cnt: 0,
            tx_ctx_cnt: 0,
            av: 0,
            max_group: None,
            tx: InRing::new(0, g),
            rx: InRing::new(0, g),
            trx: None,
            cq: CqRing {
                base: 0,
                geom: g,
                head: 0,
                tail: 0,
                pass: 0,
                armed: None,
            },
        }
    }

    #[test]
    fn allocators_first_fit_and_reuse() {
        let mut t = EndpointTable::new(8, 1, 3, 16);
        let a = t
            .create(params(4))
            .map(|e| (e.handle, e.pid_on_fep, e.ri_start));
        assert_eq!(a, Ok((1, 1, 1)));
        let b = t
            .create(params(4))
            .map(|e| (e.handle, e.pid_on_fep, e.ri_start));
        assert_eq!(b, Ok((2, 2, 5)));
        let c = t.create(params(8)).map(|e| e.ri_start);
        assert_eq!(c.err(), Some(AllocError::NoResourceIndices));
        t.destroy(1);
        // The 4-wide hole at 1 is reused first; a 6-wide range goes after the last one.
        let d = t
            .create(params(2))
            .map(|e| (e.handle, e.pid_on_fep, e.ri_start));
        assert_eq!(d, Ok((1, 1, 1)));
        let e = t.create(params(6)).map(|e| e.ri_start);
        assert_eq!(e, Ok(9));
        assert_eq!(t.create(params(1)).err(), Some(AllocError::NoPid));
    }
}
