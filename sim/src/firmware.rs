//! Firmware: the admin command handlers.
//!
//! An opcode newer than the NIC's interface (`Opcode::since_minor` above
//! `NicConfig::interface_minor`) completes InvalidOpcode, whatever its flags and body.
//!
//! Every handler validates completely before it changes anything, so a command that fails
//! completes with its status and leaves the NIC as it was. Layout errors (unknown opcode,
//! reserved fields, handle where none is taken, batch sizes) come from
//! `AdminCommand::decode`.
//!
//! | opcode | checks, in order | result0 / result1 |
//! |---|---|---|
//! | IDENTIFY | `len >= 128` else InvalidField; page written by DMA else DmaFault | — |
//! | AV_CREATE | `capacity` in 1..=`CAP_AV_ENTRIES`, `rx_ctx_bits <= CAP_AV.max_rx_ctx_bits`, `max_group_id <= CAP_PEER_GROUPS.max_group_id` and the group and receive-context bits within 32 else InvalidField; a free table, and table memory for `capacity` more entries (`NicConfig::av_table_memory_entries`), else NoResources | AV handle (from 1) |
//! | AV_DESTROY | AV exists else InvalidHandle; no endpoint bound else Busy; frees the AV's auth-key slots | — |
//! | AV_WRITE | AV exists else InvalidHandle; the `count` records read by DMA else DmaFault; every record: `index < capacity` else IndexOutOfRange, reserved word 0 and `NicAvEntry::check_within(entry_flags::defined_at(interface_minor))` else InvalidField, an `AUTH_KEY` entry's slot in use and owned by this AV else InvalidField; a range entry written at its own first index, not overlapping another range or a single entry of the table or the batch, else InvalidField, and not running past the table else IndexOutOfRange — then all are written | records written |
//! | AV_WRITE_PEERS | before interface 1.13 InvalidOpcode; AV exists else InvalidHandle; `[first, first+count)` inside the table else IndexOutOfRange, and no index of it a live member of a range else InvalidField; the `count` addresses read by DMA else DmaFault; every address valid (`UetAddress::bytes_are_valid`) else InvalidField — then entry `first + i` is `NicAvEntry::for_valid_peer_bytes(address i, job_id)` for every `i` | entries written |
//! | AV_INVALIDATE | AV exists else InvalidHandle; a listed index buffer read by DMA else DmaFault; range `[first, first+count)` inside the table, or every listed u32 index inside it, else IndexOutOfRange — then all are invalidated | entries invalidated |
//! | AV_READ | AV exists else InvalidHandle; `[first, first+count)` inside the table else IndexOutOfRange; entries written by DMA else DmaFault | entries read |
//! | ENDPOINT_CREATE | handle = AV to bind (0: none) exists else InvalidHandle; ring log2 sizes in 1..=15 and at most `CAP_QUEUES.max_queue_entries` entries (the tagged RX ring's may also be 0: none), ring bases aligned to their entry size, `ri_count` in 1..=`CAP_RESOURCE_INDEX.max_per_endpoint`, JobID within 24 bits, `rx_ctx_cnt` at most `CAP_EP.max_rx_ctx` and `ri_count`, `tx_ctx_cnt` at most `CAP_EP.max_tx_ctx`, a datagram or passive endpoint not scalable, `EP_FLAG_CONNECTED` not before interface 1.20 (decode: not with DGRAM or PASSIVE), else InvalidField; every ring entirely DMA-mapped else DmaFault; since interface 1.11, no live endpoint of the JobID with the initiator id, else InitiatorInUse; a free endpoint else NoResources, a free PIDonFEP else PidExhausted, a contiguous resource-index range else RiExhausted | endpoint handle \| PIDonFEP << 16 / ri_start \| ri_count << 16 |
//! | ENDPOINT_PEER | before interface 1.20 InvalidOpcode; (decode: defined flags, reserved zero, NONE alone, JobID within 24 bits, an IPv4 address's bytes 4–15 zero, else InvalidField); endpoint exists, is not a context and was created with `EP_FLAG_CONNECTED` else InvalidHandle — then its peer is the body's (fabric address, JobID, initiator), or none | — |
//! | ENDPOINT_DESTROY | endpoint or context exists else InvalidHandle; an endpoint with live contexts else Busy; releases its PIDonFEP and indices, unbinds its AV, revokes its auth-key grants, removes its memory regions, drops its posted tagged receives and unexpected list | — |
//! | CONTEXT_CREATE | endpoint exists and is not a context else InvalidHandle; the role's index constraint (`uet_fwif::admin`, *Contexts*) and rings as for ENDPOINT_CREATE else InvalidField; no live context with the same role and index (CONTROL: no control channel, not passive) else Busy; rings DMA-mapped else DmaFault; a free table entry else NoResources | context handle |
//! | MR_REGISTER | endpoint exists else InvalidHandle; `resource_index` 0 (assign `ri_start`) or inside the endpoint's range else IndexOutOfRange; the whole region DMA-mapped, for the device to write it if it grants remote write and to read it if it grants remote read, else DmaFault; key not registered on the NIC else KeyExists; a free region else NoResources | MR handle / resource index |
//! | MR_DEREGISTER | a region with the handle and the body's key exists else InvalidHandle | — |
//! | COUNTERS_READ | endpoint exists else InvalidHandle; the block written by DMA else DmaFault | bytes written |
//! | AUTH_KEY_ADD | AV exists else InvalidHandle; (decode: JobID within 24 bits, reserved zero, else InvalidField); a free slot else NoResources | slot |
//! | AUTH_KEY_REMOVE | before interface 1.9 a body of zeros else InvalidField; slot in use else InvalidHandle; granted to no endpoint else Busy | — |
//! | AUTH_KEY_SOURCE | slot in use else InvalidHandle | — |
//! | AUTH_KEY_READ | `first + count <= CAP_AUTH_KEY.slots` else IndexOutOfRange; entries written by DMA else DmaFault | slots read |
//! | ENDPOINT_AUTH_KEYS | endpoint exists else InvalidHandle; no bit at or above `CAP_AUTH_KEY.slots` else InvalidField; every granted slot in use and owned by the endpoint's AV else InvalidHandle — then the grant set is replaced | slots granted |
//!
//! A DmaFault status also counts in `DMA_FAULTS`.

use crate::auth_table::RemoveError;
use crate::av_table::{AvTable, TableRecord, WriteConflict};
use crate::endpoint_table::{AllocError, CqRing, EndpointTable, InRing, NewContext, NewEndpoint};
use crate::mr_table::{MemoryRegion, MrError};
use crate::nic::Nic;
use uet_fwif::address::ADDRESS_BYTES;
use uet_fwif::admin::{
    AvCreateBody, AvWritePeersBody, BufferBody, ContextCreateBody, EndpointCreateBody,
    EndpointPeerBody, MrDeregisterBody, MrRegisterBody, RangeBody, CTX_ROLE_CONTROL, CTX_ROLE_RX,
    CTX_ROLE_TX, EP_FLAG_ABSOLUTE, EP_FLAG_CONNECTED, EP_FLAG_DGRAM, EP_FLAG_PASSIVE, MIN_CQ_LOG2,
    MR_ACCESS_REMOTE_READ, MR_ACCESS_REMOTE_WRITE,
};
use uet_fwif::auth_key::{
    AuthKeyAddBody, AuthKeyRemoveBody, AuthKeySourceBody, EndpointAuthKeysBody,
};
use uet_fwif::av_entry::{entry_flags, MAX_JOB_ID};
use uet_fwif::datapath::{
    COMPLETION_BYTES, RX_DESCRIPTOR_BYTES, TAGGED_RX_DESCRIPTOR_BYTES, TX_DESCRIPTOR_BYTES,
};
use uet_fwif::identify::{set_ascii_field, IdentifyData};
use uet_fwif::ring::RingGeometry;
use uet_fwif::{AdminCommand, AvWriteRecord, Command, NicAvEntry, Opcode, Status, UetAddress};
use uet_regs::since;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

type FwResult = Result<(u32, u32), Status>;

/// The rings of an endpoint or context, checked.
struct Rings {
    tx: InRing,
    rx: InRing,
    trx: Option<InRing>,
    cq: CqRing,
}

/// The bases and sizes of a set of rings whose sizes and alignment are checked
/// ([`Nic::ring_layout`]), not yet that they are mapped.
struct RingLayout {
    tx: (u64, RingGeometry),
    rx: (u64, RingGeometry),
    cq: (u64, RingGeometry),
    trx: Option<(u64, RingGeometry)>,
}

const IDENTIFY_BYTES: u32 = core::mem::size_of::<IdentifyData>() as u32;
const RECORD_BYTES: usize = core::mem::size_of::<AvWriteRecord>();
const ENTRY_BYTES: usize = core::mem::size_of::<NicAvEntry>();
/// Entries AV_WRITE_PEERS composes before it stores them (4 KiB of stack).
const PEERS_BLOCK: usize = 64;
/// Bytes of staging buffer kept between AV commands (a batch of 256 records is 18 KiB).
const FW_BUF_KEEP: usize = 64 << 10;

impl Nic {
    /// Execute one admin command: (status, result0, result1).
    pub(crate) fn execute(&mut self, raw: &AdminCommand) -> (Status, u32, u32) {
        // An opcode a later interface added is unknown here, whatever its flags and body: the
        // layout checks of a command the NIC does not have are not made.
        let unknown = Opcode::from_u8(raw.opcode)
            .is_some_and(|op| op.since_minor() > self.cfg.interface_minor);
        let r = match raw.decode() {
            _ if unknown => Err(Status::InvalidOpcode),
            Err(s) => Err(s),
            Ok(cmd) => match cmd {
                Command::Identify(b) => self.fw_identify(&b),
                Command::AvCreate(b) => self.fw_av_create(&b),
                Command::AvDestroy { av } => self.fw_av_destroy(av),
                Command::AvWrite { av, body } => self.fw_av_write(av, &body),
                Command::AvWritePeers { av, body } => self.fw_av_write_peers(av, &body),
                Command::AvInvalidate { av, body } => self.fw_av_invalidate(av, &body),
                Command::AvRead { av, body } => self.fw_av_read(av, &body),
                Command::EndpointCreate { av, body } => self.fw_endpoint_create(av, &body),
                Command::EndpointDestroy { endpoint } => self.fw_endpoint_destroy(endpoint),
                Command::RecvCancel { endpoint, body } => self.fw_recv_cancel(endpoint, &body),
                Command::EndpointPeer { endpoint, body } => self.fw_endpoint_peer(endpoint, &body),
                Command::ContextCreate { endpoint, body } => {
                    self.fw_context_create(endpoint, &body)
                }
                Command::MrRegister { endpoint, body } => self.fw_mr_register(endpoint, &body),
                Command::MrDeregister { mr, body } => self.fw_mr_deregister(mr, &body),
                Command::CountersRead { endpoint, body } => self.fw_counters_read(endpoint, &body),
                Command::AuthKeyAdd { av, body } => self.fw_auth_key_add(av, &body),
                Command::AuthKeyRemove { slot, body } => self.fw_auth_key_remove(slot, &body),
                Command::AuthKeySource { slot, body } => self.fw_auth_key_source(slot, &body),
                Command::AuthKeyRead(body) => self.fw_auth_key_read(&body),
                Command::EndpointAuthKeys { endpoint, body } => {
                    self.fw_endpoint_auth_keys(endpoint, &body)
                }
            },
        };
        match r {
            Ok((a, b)) => (Status::Success, a, b),
            Err(s) => (s, 0, 0),
        }
    }

    pub(crate) fn dma_status(&mut self) -> Status {
        self.dma_fault();
        Status::DmaFault
    }

    /// The `bytes` of host memory at `iova`, read by DMA into the staging buffer `buf` (grown,
    /// never cleared: DMA overwrites what a command uses). DmaFault when they are not mapped.
    fn dma_stage<'b>(
        &mut self,
        iova: u64,
        bytes: usize,
        buf: &'b mut Vec<u8>,
    ) -> Result<&'b mut [u8], Status> {
        if buf.len() < bytes {
            buf.resize(bytes, 0);
        }
        let staged = buf.get_mut(..bytes).ok_or(Status::Internal)?;
        if self.iommu.read(iova, staged).is_err() {
            return Err(self.dma_status());
        }
        Ok(staged)
    }

    fn fw_identify(&mut self, b: &BufferBody) -> FwResult {
        if b.len.get() < IDENTIFY_BYTES {
            return Err(Status::InvalidField);
        }
        let mut id = IdentifyData::new_zeroed();
        id.vendor_id.set(uet_regs::PCI_VENDOR_ID);
        id.device_id.set(uet_regs::PCI_DEVICE_ID);
        id.fw_version.set(uet_regs::FW_VERSION.info.reset as u32);
        id.set_fabric_ip(self.cfg.fabric_addr);
        id.mac = self.cfg.mac;
        id.port_speed_mbps.set(self.cfg.port_speed_mbps);
        set_ascii_field(&mut id.serial, &self.cfg.serial);
        set_ascii_field(&mut id.model, &self.cfg.model);
        if self.iommu.write(b.buf.get(), id.as_bytes()).is_err() {
            return Err(self.dma_status());
        }
        Ok((0, 0))
    }

    fn fw_av_create(&mut self, b: &AvCreateBody) -> FwResult {
        let cap = b.capacity.get();
        let max_group_id = b.max_group_id.get();
        if cap == 0
            || cap > self.cfg.av_entries
            || b.rx_ctx_bits > self.cfg.max_rx_ctx_bits
            || max_group_id > self.cfg.max_group_id
            || !AvCreateBody::groups_fit(max_group_id, b.rx_ctx_bits)
        {
            return Err(Status::InvalidField);
        }
        if !self.avs.has_free() {
            return Err(Status::NoResources);
        }
        if let Some(memory) = self.cfg.av_table_memory_entries {
            if self.avs.entries().saturating_add(u64::from(cap)) > memory {
                return Err(Status::NoResources);
            }
        }
        let t = AvTable::new(cap, b.rx_ctx_bits, max_group_id).ok_or(Status::NoResources)?;
        let h = self.avs.insert(t).ok_or(Status::NoResources)?;
        Ok((h, 0))
    }

    fn fw_av_destroy(&mut self, av: u32) -> FwResult {
        let t = self.avs.get(av).ok_or(Status::InvalidHandle)?;
        if t.bound > 0 {
            return Err(Status::Busy);
        }
        self.avs.remove(av);
        self.auths.remove_av(av);
        Ok((0, 0))
    }

    fn fw_av_write(&mut self, av: u32, b: &BufferBody) -> FwResult {
        let capacity = self.avs.get(av).ok_or(Status::InvalidHandle)?.capacity;
        let count = b.count.get();
        let bytes = usize::try_from(count).map_err(|_| Status::InvalidField)? * RECORD_BYTES;
        self.with_fw_buf(|nic, buf| nic.fw_av_write_staged(av, capacity, b.buf.get(), bytes, buf))?;
        Ok((count, 0))
    }

    fn fw_av_write_peers(&mut self, av: u32, b: &AvWritePeersBody) -> FwResult {
        let (first, count) = (b.first.get(), b.count.get());
        self.avs
            .get(av)
            .ok_or(Status::InvalidHandle)?
            .check_run(first, count)
            .map_err(|c| match c {
                WriteConflict::OutOfRange => Status::IndexOutOfRange,
                WriteConflict::Overlap => Status::InvalidField,
            })?;
        let bytes = usize::try_from(count).map_err(|_| Status::InvalidField)? * ADDRESS_BYTES;
        self.with_fw_buf(|nic, buf| {
            let staged = nic.dma_stage(b.buf.get(), bytes, buf)?;
            let addrs =
                <[[u8; ADDRESS_BYTES]]>::ref_from_bytes(staged).map_err(|_| Status::Internal)?;
            if !addrs.iter().all(UetAddress::bytes_are_valid) {
                return Err(Status::InvalidField);
            }
            let t = nic.avs.get_mut(av).ok_or(Status::InvalidHandle)?;
            let job_id = b.job_id.get();
            // Composed a block at a time on the stack, and stored a block at a time.
            let mut block = [NicAvEntry::INVALID; PEERS_BLOCK];
            for (chunk, at) in addrs
                .chunks(PEERS_BLOCK)
                .zip((first..).step_by(PEERS_BLOCK))
            {
                for (e, a) in block.iter_mut().zip(chunk) {
                    *e = NicAvEntry::for_valid_peer_bytes(a, job_id);
                }
                t.set_singles(at, block.get(..chunk.len()).unwrap_or_default());
            }
            Ok(())
        })?;
        self.counters.debug.av_write_peers_entries += u64::from(count);
        Ok((count, 0))
    }

    /// Run `f` with the firmware's staging buffer, which lives across commands: no
    /// allocation per AV command once it has grown to a batch's size. The buffer is kept
    /// afterwards unless an unusually large command grew it past [`FW_BUF_KEEP`] bytes.
    fn with_fw_buf<R>(&mut self, f: impl FnOnce(&mut Self, &mut Vec<u8>) -> R) -> R {
        let mut buf = core::mem::take(&mut self.fw_buf);
        let result = f(self, &mut buf);
        if buf.capacity() <= FW_BUF_KEEP {
            self.fw_buf = buf;
        }
        result
    }

    /// Read the records into the staging buffer ([`Nic::dma_stage`]), check each where it
    /// lies, then store them all or none.
    fn fw_av_write_staged(
        &mut self,
        av: u32,
        capacity: u32,
        iova: u64,
        bytes: usize,
        buf: &mut Vec<u8>,
    ) -> Result<(), Status> {
        let staged = self.dma_stage(iova, bytes, buf)?;
        let records = <[AvWriteRecord]>::ref_from_bytes(staged).map_err(|_| Status::Internal)?;
        for r in records {
            // In the documented order: the index (IndexOutOfRange, `check_av_record`), then
            // the record's reserved word and its entry's fields (InvalidField).
            let index = r.index.get();
            if index < capacity && r.reserved.get() != 0 {
                return Err(Status::InvalidField);
            }
            self.check_av_record(av, capacity, index, &r.entry)?;
        }
        self.store_av_records(av, records)
    }

    /// The checks AV_WRITE (and `AV_WRITE_DOORBELL`) makes of one record on its own: the index
    /// lies in the table, the entry passes its field checks, and an auth-key slot it names
    /// belongs to the same AV.
    pub(crate) fn check_av_record(
        &self,
        av: u32,
        capacity: u32,
        index: u32,
        entry: &NicAvEntry,
    ) -> Result<(), Status> {
        if index >= capacity {
            return Err(Status::IndexOutOfRange);
        }
        // A bit a later interface defined is an undefined bit here (MAX_MSG_MTU before 1.10).
        if entry
            .check_within(entry_flags::defined_at(self.cfg.interface_minor))
            .is_err()
        {
            return Err(Status::InvalidField);
        }
        if let Some(slot) = entry.auth_key_slot() {
            if self.auths.get(slot).is_none_or(|s| s.av != av) {
                return Err(Status::InvalidField);
            }
        }
        Ok(())
    }

    /// Store records that passed [`Nic::check_av_record`] after checking them against the
    /// table and each other (ranges never overlap): all of them, or none.
    pub(crate) fn store_av_records<R: TableRecord>(
        &mut self,
        av: u32,
        records: &[R],
    ) -> Result<(), Status> {
        let t = self.avs.get_mut(av).ok_or(Status::InvalidHandle)?;
        t.check_batch(records).map_err(|c| match c {
            WriteConflict::OutOfRange => Status::IndexOutOfRange,
            WriteConflict::Overlap => Status::InvalidField,
        })?;
        t.set_batch(records);
        Ok(())
    }

    fn fw_av_invalidate(&mut self, av: u32, b: &RangeBody) -> FwResult {
        let capacity = self.avs.get(av).ok_or(Status::InvalidHandle)?.capacity;
        let count = b.count.get();
        if b.buf.get() == 0 {
            let first = b.first.get();
            if u64::from(first) + u64::from(count) > u64::from(capacity) {
                return Err(Status::IndexOutOfRange);
            }
            let t = self.avs.get_mut(av).ok_or(Status::InvalidHandle)?;
            (first..first + count).for_each(|i| t.invalidate(i));
            return Ok((count, 0));
        }
        let bytes = usize::try_from(count).map_err(|_| Status::InvalidField)? * 4;
        self.with_fw_buf(|nic, buf| {
            nic.fw_av_invalidate_listed(av, capacity, b.buf.get(), bytes, buf)
        })?;
        Ok((count, 0))
    }

    /// AV_INVALIDATE of the little-endian indices DMA'd from `iova` into the staging buffer:
    /// all of them, or none when one is outside the table.
    fn fw_av_invalidate_listed(
        &mut self,
        av: u32,
        capacity: u32,
        iova: u64,
        bytes: usize,
        buf: &mut Vec<u8>,
    ) -> Result<(), Status> {
        let staged = self.dma_stage(iova, bytes, buf)?;
        let indices = <[U32]>::ref_from_bytes(staged).map_err(|_| Status::Internal)?;
        if indices.iter().any(|i| i.get() >= capacity) {
            return Err(Status::IndexOutOfRange);
        }
        let t = self.avs.get_mut(av).ok_or(Status::InvalidHandle)?;
        indices.iter().for_each(|i| t.invalidate(i.get()));
        Ok(())
    }

    fn fw_av_read(&mut self, av: u32, b: &RangeBody) -> FwResult {
        let (first, count) = (b.first.get(), b.count.get());
        self.with_fw_buf(|nic, out| {
            let t = nic.avs.get(av).ok_or(Status::InvalidHandle)?;
            if u64::from(first) + u64::from(count) > u64::from(t.capacity) {
                return Err(Status::IndexOutOfRange);
            }
            out.clear();
            out.reserve(count as usize * ENTRY_BYTES);
            for i in first..first + count {
                out.extend_from_slice(t.effective(i).as_bytes());
            }
            match nic.iommu.write(b.buf.get(), out) {
                Ok(()) => Ok((count, 0)),
                Err(_) => Err(nic.dma_status()),
            }
        })
    }

    /// Check a set of rings (TX, RX, completion, optional tagged RX): sizes and alignment
    /// (InvalidField, [`Nic::ring_layout`]), then that each is DMA-mapped (DmaFault).
    fn check_rings(
        &mut self,
        tx: (u64, u8),
        rx: (u64, u8),
        cq: (u64, u8),
        trx: (u64, u8),
    ) -> Result<Rings, Status> {
        let layout = self.ring_layout(tx, rx, cq, trx)?;
        let mut rings = vec![
            (layout.tx.0, layout.tx.1, TX_DESCRIPTOR_BYTES as u64),
            (layout.rx.0, layout.rx.1, RX_DESCRIPTOR_BYTES as u64),
            (layout.cq.0, layout.cq.1, COMPLETION_BYTES as u64),
        ];
        if let Some((base, g)) = layout.trx {
            rings.push((base, g, TAGGED_RX_DESCRIPTOR_BYTES as u64));
        }
        for &(base, g, size) in &rings {
            if self
                .iommu
                .check(base, u64::from(g.entries()) * size)
                .is_err()
            {
                return Err(self.dma_status());
            }
        }
        let (tx, tx_g) = layout.tx;
        let (rx, rx_g) = layout.rx;
        let (cq, cq_g) = layout.cq;
        Ok(Rings {
            tx: InRing::new(tx, tx_g),
            rx: InRing::new(rx, rx_g),
            trx: layout.trx.map(|(trx, g)| InRing::new(trx, g)),
            cq: CqRing {
                base: cq,
                geom: cq_g,
                head: 0,
                tail: 0,
                pass: 0,
                armed: None,
            },
        })
    }

    /// The sizes and alignment of a set of rings, the checks that need no memory: each log2
    /// size in 1..=15 and at most `CAP_QUEUES.max_queue_entries` entries (the completion
    /// ring's at least [`MIN_CQ_LOG2`], the tagged RX ring's 0 for none), each base aligned to
    /// its entry size. InvalidField otherwise.
    fn ring_layout(
        &self,
        (tx, tx_log2): (u64, u8),
        (rx, rx_log2): (u64, u8),
        (cq, cq_log2): (u64, u8),
        (trx, trx_log2): (u64, u8),
    ) -> Result<RingLayout, Status> {
        let max = u32::from(self.cfg.max_queue_entries);
        let geom = |log2: u8| {
            RingGeometry::new(log2)
                .filter(|g| g.entries() <= max)
                .ok_or(Status::InvalidField)
        };
        if cq_log2 < MIN_CQ_LOG2 {
            return Err(Status::InvalidField);
        }
        let (tx_g, rx_g, cq_g) = (geom(tx_log2)?, geom(rx_log2)?, geom(cq_log2)?);
        let trx_g = match trx_log2 {
            0 => None,
            n => Some(geom(n)?),
        };
        let aligned = [
            (tx, TX_DESCRIPTOR_BYTES as u64),
            (rx, RX_DESCRIPTOR_BYTES as u64),
            (cq, COMPLETION_BYTES as u64),
        ]
        .into_iter()
        .chain(trx_g.map(|_| (trx, TAGGED_RX_DESCRIPTOR_BYTES as u64)))
        .all(|(base, size)| base % size == 0);
        if !aligned {
            return Err(Status::InvalidField);
        }
        Ok(RingLayout {
            tx: (tx, tx_g),
            rx: (rx, rx_g),
            cq: (cq, cq_g),
            trx: trx_g.map(|g| (trx, g)),
        })
    }

    fn fw_endpoint_create(&mut self, av: u32, b: &EndpointCreateBody) -> FwResult {
        if av != 0 && self.avs.get(av).is_none() {
            return Err(Status::InvalidHandle);
        }
        let ri_count = b.ri_count.get();
        if ri_count == 0 || ri_count > self.cfg.ri_per_endpoint {
            return Err(Status::InvalidField);
        }
        let job_id = b.job_id.get();
        if job_id > MAX_JOB_ID {
            return Err(Status::InvalidField);
        }
        let (dgram, passive) = (b.flags & EP_FLAG_DGRAM != 0, b.flags & EP_FLAG_PASSIVE != 0);
        let connected = b.flags & EP_FLAG_CONNECTED != 0;
        if connected && self.cfg.interface_minor < since::CONNECTED_PEER {
            return Err(Status::InvalidField);
        }
        let scalable = b.rx_ctx_cnt > 0 || b.tx_ctx_cnt > 1;
        if b.rx_ctx_cnt > self.cfg.max_rx_ctx
            || u16::from(b.rx_ctx_cnt) > ri_count
            || b.tx_ctx_cnt > self.cfg.max_tx_ctx
            || (scalable && (dgram || passive))
        {
            return Err(Status::InvalidField);
        }
        let Rings { tx, rx, trx, cq } = self.check_rings(
            (b.tx_ring.get(), b.tx_log2),
            (b.rx_ring.get(), b.rx_log2),
            (b.cq_ring.get(), b.cq_log2),
            (b.trx_ring.get(), b.trx_log2),
        )?;
        let initiator = b.initiator.get();
        if self.cfg.interface_minor >= since::UNIQUE_INITIATORS
            && self.eps.initiator_in_use(job_id, initiator)
        {
            return Err(Status::InitiatorInUse);
        }
        let params = NewEndpoint {
            ri_count,
            job_id,
            initiator,
            absolute: b.flags & EP_FLAG_ABSOLUTE != 0,
            dgram,
            passive,
            connected,
            rx_ctx_cnt: b.rx_ctx_cnt,
            tx_ctx_cnt: b.tx_ctx_cnt,
            av,
            max_group: self.avs.get(av).map(|t| t.max_group_id).filter(|&m| m > 0),
            tx,
            rx,
            trx,
            cq,
        };
        let (handle, pid, ri_start) = match self.eps.create(params) {
            Ok(ep) => (ep.handle, ep.pid_on_fep, ep.ri_start),
            Err(AllocError::TableFull) => return Err(Status::NoResources),
            Err(AllocError::NoPid) => return Err(Status::PidExhausted),
            Err(AllocError::NoResourceIndices) => return Err(Status::RiExhausted),
        };
        if let Some(t) = self.avs.get_mut(av) {
            t.bound += 1;
        }
        tracing::debug!(nic = %self.cfg.fabric_addr, handle, pid, ri_start, ri_count, job_id, "endpoint created");
        Ok((
            u32::from(handle) | u32::from(pid) << 16,
            u32::from(ri_start) | u32::from(ri_count) << 16,
        ))
    }

    fn fw_context_create(&mut self, endpoint: u32, b: &ContextCreateBody) -> FwResult {
        let h = u16::try_from(endpoint).map_err(|_| Status::InvalidHandle)?;
        let ep = self.eps.get(h).ok_or(Status::InvalidHandle)?;
        if ep.is_context() {
            return Err(Status::InvalidHandle);
        }
        let index_ok = |role: u8, n: u8| b.role & role == 0 || (b.index >= 1 && b.index < n);
        if !index_ok(CTX_ROLE_TX, ep.tx_ctx_cnt) || !index_ok(CTX_ROLE_RX, ep.rx_ctx_cnt) {
            return Err(Status::InvalidField);
        }
        // The rings' sizes and alignment are the command's layout: checked before whether the
        // context exists (Busy), as their mapping is after it (DmaFault).
        let rings = (
            (b.tx_ring.get(), b.tx_log2),
            (b.rx_ring.get(), b.rx_log2),
            (b.cq_ring.get(), b.cq_log2),
            (b.trx_ring.get(), b.trx_log2),
        );
        self.ring_layout(rings.0, rings.1, rings.2, rings.3)?;
        let taken = if b.role == CTX_ROLE_CONTROL {
            ep.control.is_some()
        } else {
            ep.contexts
                .values()
                .any(|&(role, index)| role & b.role != 0 && index == b.index)
        };
        if taken {
            return Err(Status::Busy);
        }
        let av = ep.av;
        let Rings { tx, rx, trx, cq } = self.check_rings(rings.0, rings.1, rings.2, rings.3)?;
        let ctx = NewContext {
            role: b.role,
            index: b.index,
            tx,
            rx,
            trx,
            cq,
        };
        let handle = self
            .eps
            .create_context(h, ctx)
            .map_err(|_| Status::NoResources)?;
        if let Some(t) = self.avs.get_mut(av) {
            t.bound += 1;
        }
        tracing::debug!(nic = %self.cfg.fabric_addr, endpoint, handle, role = b.role, index = b.index, "context created");
        Ok((u32::from(handle), 0))
    }

    /// ENDPOINT_PEER: the one sender a connected endpoint takes data from, or none.
    fn fw_endpoint_peer(&mut self, endpoint: u32, b: &EndpointPeerBody) -> FwResult {
        let h = u16::try_from(endpoint).map_err(|_| Status::InvalidHandle)?;
        let ep = self.eps.get_mut(h).ok_or(Status::InvalidHandle)?;
        if ep.is_context() || !ep.connected {
            return Err(Status::InvalidHandle);
        }
        ep.peer = b.named();
        tracing::debug!(nic = %self.cfg.fabric_addr, endpoint, peer = ?ep.peer, "endpoint peer set");
        Ok((0, 0))
    }

    fn fw_endpoint_destroy(&mut self, endpoint: u32) -> FwResult {
        let h = u16::try_from(endpoint).map_err(|_| Status::InvalidHandle)?;
        let target = self.eps.get(h).ok_or(Status::InvalidHandle)?;
        if !target.is_context() && !target.contexts.is_empty() {
            return Err(Status::Busy);
        }
        let ep = self.eps.destroy(h).ok_or(Status::InvalidHandle)?;
        if let Some(t) = self.avs.get_mut(ep.av) {
            t.bound = t.bound.saturating_sub(1);
        }
        self.auths.revoke(&ep.auth_slots);
        self.mrs.remove_endpoint(ep.serial);
        // Requests that waited for this endpoint's completion ring are answered by the
        // receive path again (now without the endpoint).
        self.rx_replay.extend(ep.rx_backlog);
        Ok((0, 0))
    }

    fn fw_mr_register(&mut self, endpoint: u32, b: &MrRegisterBody) -> FwResult {
        let h = u16::try_from(endpoint).map_err(|_| Status::InvalidHandle)?;
        let ep = self.eps.get(h).ok_or(Status::InvalidHandle)?;
        let ri = match b.resource_index.get() {
            0 => ep.ri_start,
            ri if EndpointTable::in_range(ep, ri) => ri,
            _ => return Err(Status::IndexOutOfRange),
        };
        // RMA requests reach the endpoint, not one of its contexts: a region registered
        // through a context belongs to the context's endpoint.
        // It belongs to that endpoint's job (`mr_table`).
        let (serial, job_id) = match self.eps.get(ep.owner) {
            Some(owner) => (owner.serial, owner.job_id),
            None => return Err(Status::InvalidHandle),
        };
        let mr = MemoryRegion {
            handle: 0,
            iova: b.iova.get(),
            len: b.len.get(),
            access: b.access,
            serial,
            job_id,
            resource_index: ri,
        };
        // The device must be let do what the region grants: write it for remote WRITE, read
        // it for remote READ (decode refuses a region granting neither).
        let grants = [
            (MR_ACCESS_REMOTE_READ, false),
            (MR_ACCESS_REMOTE_WRITE, true),
        ];
        let faults = grants.iter().any(|&(bit, write)| {
            b.access & bit != 0 && self.iommu.check_access(mr.iova, mr.len, write).is_err()
        });
        if faults {
            return Err(self.dma_status());
        }
        let handle = match self.mrs.register(b.key.get(), mr) {
            Ok(handle) => handle,
            Err(MrError::KeyExists) => return Err(Status::KeyExists),
            Err(MrError::Full) => return Err(Status::NoResources),
        };
        tracing::debug!(nic = %self.cfg.fabric_addr, handle, endpoint, ri, "memory region registered");
        Ok((handle, u32::from(ri)))
    }

    fn fw_mr_deregister(&mut self, mr: u32, b: &MrDeregisterBody) -> FwResult {
        if self.mrs.deregister(mr, b.key.get()) {
            Ok((0, 0))
        } else {
            Err(Status::InvalidHandle)
        }
    }

    fn fw_counters_read(&mut self, endpoint: u32, b: &BufferBody) -> FwResult {
        let h = u16::try_from(endpoint).map_err(|_| Status::InvalidHandle)?;
        let block = self.eps.get(h).ok_or(Status::InvalidHandle)?.stats;
        let block = uet_fwif::EndpointCounters::from(&block);
        if self.iommu.write(b.buf.get(), block.as_bytes()).is_err() {
            return Err(self.dma_status());
        }
        Ok((uet_fwif::EndpointCounters::BYTES as u32, 0))
    }

    fn fw_auth_key_add(&mut self, av: u32, b: &AuthKeyAddBody) -> FwResult {
        if self.avs.get(av).is_none() {
            return Err(Status::InvalidHandle);
        }
        let job_id = b.job_id.get();
        let slot = self
            .auths
            .add(av, job_id, b.source.get())
            .ok_or(Status::NoResources)?;
        tracing::debug!(nic = %self.cfg.fabric_addr, slot, av, job_id, "auth key added");
        Ok((u32::from(slot), 0))
    }

    fn fw_auth_key_remove(&mut self, slot: u32, body: &AuthKeyRemoveBody) -> FwResult {
        // Before 1.9 every byte of the body is reserved.
        if self.cfg.interface_minor < since::AUTH_KEY_REMOVE_CHECK_OWNER
            && *body != AuthKeyRemoveBody::unchecked()
        {
            return Err(Status::InvalidField);
        }
        let slot = u16::try_from(slot).map_err(|_| Status::InvalidHandle)?;
        match self.auths.remove(slot, body.required_owner()) {
            Ok(()) => Ok((0, 0)),
            Err(RemoveError::NoSlot) => Err(Status::InvalidHandle),
            Err(RemoveError::Granted) => Err(Status::Busy),
        }
    }

    fn fw_auth_key_source(&mut self, slot: u32, b: &AuthKeySourceBody) -> FwResult {
        let slot = u16::try_from(slot).map_err(|_| Status::InvalidHandle)?;
        if self.auths.set_source(slot, b.source.get()) {
            Ok((0, 0))
        } else {
            Err(Status::InvalidHandle)
        }
    }

    fn fw_auth_key_read(&mut self, b: &RangeBody) -> FwResult {
        let (first, count) = (b.first.get(), b.count.get());
        if u64::from(first) + u64::from(count) > u64::from(self.auths.capacity()) {
            return Err(Status::IndexOutOfRange);
        }
        let mut out = Vec::with_capacity(count as usize * 24);
        for slot in first..first + count {
            let slot = u16::try_from(slot).map_err(|_| Status::IndexOutOfRange)?;
            out.extend_from_slice(self.auths.entry(slot).as_bytes());
        }
        if self.iommu.write(b.buf.get(), &out).is_err() {
            return Err(self.dma_status());
        }
        Ok((count, 0))
    }

    fn fw_endpoint_auth_keys(&mut self, endpoint: u32, b: &EndpointAuthKeysBody) -> FwResult {
        let h = u16::try_from(endpoint).map_err(|_| Status::InvalidHandle)?;
        // Grants belong to an endpoint; its contexts are reached through it.
        let av = match self.eps.get(h) {
            Some(ep) if !ep.is_context() => ep.av,
            _ => return Err(Status::InvalidHandle),
        };
        let slots: Vec<u16> = b.granted().collect();
        if slots.iter().any(|&s| s >= self.auths.capacity()) {
            return Err(Status::InvalidField);
        }
        let mut jobs = Vec::with_capacity(slots.len());
        for &s in &slots {
            match self.auths.get(s) {
                Some(slot) if slot.av == av && av != 0 => jobs.push(slot.job_id),
                _ => return Err(Status::InvalidHandle),
            }
        }
        let granted = slots.len() as u32;
        self.auths.grant(&slots);
        let old = self.eps.set_auth(h, slots, &jobs);
        self.auths.revoke(&old);
        tracing::debug!(nic = %self.cfg.fabric_addr, endpoint, granted, "auth keys granted");
        Ok((granted, 0))
    }
}
