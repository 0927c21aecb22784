//! A minimal model driver for the simulator tests: DMA memory in a memfd, the admin queue
//! programmed through BAR0, endpoint rings, and volatile accesses only.

#![allow(dead_code)]

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use uet_fwif::admin::{
    AdminCompletion, AvCreateBody, AvWritePeersBody, BufferBody, ContextCreateBody,
    EndpointCreateBody, RangeBody, COMMAND_BYTES,
};
use uet_fwif::{
    AdminCommand, AvWriteRecord, Command, Completion, NicAvEntry, RxDescriptor, Status,
    TxDescriptor, UetAddress,
};
use uet_regs::{
    AdminQueueSize, DevCtrl, Mmio, QueueDoorbell, RegisterAccess, RingIndex, ADMIN_CQ_BASE,
    ADMIN_CQ_HEAD, ADMIN_QUEUE_SIZE, ADMIN_SQ_BASE, ADMIN_SQ_DOORBELL, CQ_DOORBELL, DEV_CTRL,
    RXQ_DOORBELL, TXQ_DOORBELL,
};
use uet_sim::{Fabric, NicConfig, SimFunction};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// DMA memory: a memfd mapped shared, as a real driver allocates it.
pub struct DmaMem {
    pub fd: OwnedFd,
    ptr: *mut u8,
    pub len: usize,
    pub iova: u64,
}

impl DmaMem {
    pub fn new(len: usize, iova: u64) -> Self {
        // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
        let raw = unsafe { libc::memfd_create(c"uet-sim-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0, "memfd_create failed");
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on the descriptor we own.
        let rc = unsafe { libc::ftruncate(raw, len as libc::off_t) };
        assert_eq!(rc, 0, "ftruncate failed");
        // SAFETY: a new shared mapping of the whole file; checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap failed");
        DmaMem {
            fd,
            ptr: ptr.cast(),
            len,
            iova,
        }
    }

    pub fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len);
        for (i, b) in bytes.iter().enumerate() {
            // SAFETY: in bounds (checked above); volatile because the device shares the page.
            unsafe { self.ptr.add(off + i).write_volatile(*b) };
        }
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        (0..len)
            // SAFETY: in bounds (checked above); volatile because the device shares the page.
            .map(|i| unsafe { self.ptr.add(off + i).read_volatile() })
            .collect()
    }

    pub fn fill(&self, off: usize, len: usize, v: u8) {
        self.write(off, &vec![v; len]);
    }
}

impl Drop for DmaMem {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

// Memory layout of a test driver (offsets in its DmaMem).
pub const MEM_BYTES: usize = 1 << 20;
pub const MEM_IOVA: u64 = 0x4000_0000;
pub const SQ_OFF: usize = 0x0000;
pub const CQ_OFF: usize = 0x1000;
pub const SCRATCH_OFF: usize = 0x2000; // 56 KiB of command buffers
pub const RINGS_OFF: usize = 0x10000; // endpoint rings, 16 KiB per endpoint
pub const BUFS_OFF: usize = 0x80000; // payload buffers
pub const ADMIN_LOG2: u8 = 4;
pub const EP_LOG2: u8 = 3;

pub struct Driver {
    pub f: SimFunction,
    pub mem: DmaMem,
    sq_tail: u16,
    cq_head: u16,
    cq_phase: bool,
    next_id: u16,
    next_ring_slot: usize,
}

pub struct Ep {
    pub handle: u16,
    pub pid: u16,
    pub ri_start: u16,
    pub ri_count: u16,
    pub tx_off: usize,
    pub rx_off: usize,
    pub cq_off: usize,
    pub tx_tail: u16,
    pub rx_tail: u16,
    pub cq_head: u16,
    pub cq_phase: bool,
}

pub fn addr(ip: &str) -> std::net::IpAddr {
    ip.parse().unwrap()
}

impl Driver {
    pub fn new(fabric: &Fabric, ip: &str) -> Self {
        Self::with_config(fabric, NicConfig::new(addr(ip)))
    }

    pub fn with_config(fabric: &Fabric, cfg: NicConfig) -> Self {
        let f = fabric.add_nic(cfg).unwrap();
        let mem = DmaMem::new(MEM_BYTES, MEM_IOVA);
        f.dma_map(MEM_IOVA, MEM_BYTES as u64, mem.fd.as_fd(), 0)
            .unwrap();
        let mut d = Driver {
            f,
            mem,
            sq_tail: 0,
            cq_head: 0,
            cq_phase: true,
            next_id: 1,
            next_ring_slot: 0,
        };
        d.enable();
        d
    }

    /// Program the admin queue and enable, as a driver does after reset.
    pub fn enable(&mut self) {
        self.enable_with_rings(ADMIN_LOG2);
    }

    /// [`Driver::enable`] with rings of `2^log2` entries (at most the usual size, whose
    /// memory they use; this driver wraps its indices at the usual size, so only the first
    /// entries of smaller rings are used).
    pub fn enable_with_rings(&mut self, log2: u8) {
        self.sq_tail = 0;
        self.cq_head = 0;
        self.cq_phase = true;
        self.mem.fill(CQ_OFF, 4096, 0);
        self.f.write(ADMIN_SQ_BASE, MEM_IOVA + SQ_OFF as u64);
        self.f.write(ADMIN_CQ_BASE, MEM_IOVA + CQ_OFF as u64);
        self.f.write(
            ADMIN_QUEUE_SIZE,
            AdminQueueSize::new().with_sq_log2(log2).with_cq_log2(log2),
        );
        self.f.write(DEV_CTRL, DevCtrl::new().with_enable(true));
    }

    pub fn iova(&self, off: usize) -> u64 {
        self.mem.iova + off as u64
    }

    /// Submit a raw command and wait for its completion.
    pub fn submit_raw(&mut self, cmd: AdminCommand) -> AdminCompletion {
        let id = self.post_raw(cmd);
        let cqe = self.take_completion().expect("no admin completion");
        assert_eq!(cqe.command_id.get(), id);
        cqe
    }

    /// Write a raw command at the SQ tail with a fresh id and ring the doorbell, leaving its
    /// completion (if the device wrote one) in the ring; returns the id.
    pub fn post_raw(&mut self, mut cmd: AdminCommand) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        cmd.command_id = U16::new(id);
        let n = 1u16 << ADMIN_LOG2;
        self.mem.write(
            SQ_OFF + usize::from(self.sq_tail) * COMMAND_BYTES,
            cmd.as_bytes(),
        );
        self.sq_tail = (self.sq_tail + 1) % n;
        self.f
            .write(ADMIN_SQ_DOORBELL, RingIndex::new().with_index(self.sq_tail));
        id
    }

    /// Consume the completion at the CQ head and write `ADMIN_CQ_HEAD` past it; `None` when
    /// the device has written none there.
    pub fn take_completion(&mut self) -> Option<AdminCompletion> {
        let raw = self.mem.read(CQ_OFF + usize::from(self.cq_head) * 16, 16);
        let cqe = AdminCompletion::read_from_bytes(&raw).ok()?;
        if cqe.phase_bit() != self.cq_phase {
            return None;
        }
        let n = 1u16 << ADMIN_LOG2;
        self.cq_head = (self.cq_head + 1) % n;
        if self.cq_head == 0 {
            self.cq_phase = !self.cq_phase;
        }
        self.f
            .write(ADMIN_CQ_HEAD, RingIndex::new().with_index(self.cq_head));
        Some(cqe)
    }

    pub fn submit(&mut self, cmd: Command) -> AdminCompletion {
        self.submit_raw(cmd.encode(0))
    }

    pub fn av_create(&mut self, capacity: u32, rx_ctx_bits: u8) -> Result<u32, Status> {
        let c = self.submit(Command::AvCreate(AvCreateBody {
            capacity: U32::new(capacity),
            rx_ctx_bits,
            ..FromZeros::new_zeroed()
        }));
        match c.status() {
            Status::Success => Ok(c.result0.get()),
            s => Err(s),
        }
    }

    pub fn av_write(&mut self, av: u32, records: &[(u32, NicAvEntry)]) -> Result<u32, Status> {
        let mut bytes = Vec::new();
        for (i, e) in records {
            let r = AvWriteRecord {
                index: U32::new(*i),
                reserved: U32::ZERO,
                entry: *e,
            };
            bytes.extend_from_slice(r.as_bytes());
        }
        self.mem.write(SCRATCH_OFF, &bytes);
        let c = self.submit(Command::AvWrite {
            av,
            body: BufferBody {
                buf: U64::new(self.iova(SCRATCH_OFF)),
                len: U32::new(bytes.len() as u32),
                count: U32::new(records.len() as u32),
                ..FromZeros::new_zeroed()
            },
        });
        match c.status() {
            Status::Success => Ok(c.result0.get()),
            s => Err(s),
        }
    }

    /// AV_WRITE_PEERS of `addrs` (raw, so that a test can pass a malformed one) to `first ..`.
    pub fn av_write_peers(
        &mut self,
        av: u32,
        first: u32,
        addrs: &[[u8; 32]],
        job_id: u32,
    ) -> Result<u32, Status> {
        let bytes = addrs.as_flattened();
        self.mem.write(SCRATCH_OFF, bytes);
        let c = self.submit(Command::AvWritePeers {
            av,
            body: AvWritePeersBody {
                buf: U64::new(self.iova(SCRATCH_OFF)),
                len: U32::new(bytes.len() as u32),
                first: U32::new(first),
                count: U32::new(addrs.len() as u32),
                job_id: U32::new(job_id),
                ..FromZeros::new_zeroed()
            },
        });
        match c.status() {
            Status::Success => Ok(c.result0.get()),
            s => Err(s),
        }
    }

    pub fn av_read(&mut self, av: u32, first: u32, count: u32) -> Result<Vec<NicAvEntry>, Status> {
        let c = self.submit(Command::AvRead {
            av,
            body: RangeBody {
                buf: U64::new(self.iova(SCRATCH_OFF)),
                len: U32::new(count * 64),
                first: U32::new(first),
                count: U32::new(count),
                ..FromZeros::new_zeroed()
            },
        });
        match c.status() {
            Status::Success => Ok(self
                .mem
                .read(SCRATCH_OFF, count as usize * 64)
                .chunks_exact(64)
                .map(|b| NicAvEntry::read_from_bytes(b).unwrap())
                .collect()),
            s => Err(s),
        }
    }

    pub fn ep_body(
        &mut self,
        job_id: u32,
        initiator: u32,
        ri_count: u16,
    ) -> (EndpointCreateBody, usize) {
        let base = RINGS_OFF + self.next_ring_slot * 0x4000;
        self.next_ring_slot += 1;
        self.mem.fill(base, 0x4000, 0);
        let body = EndpointCreateBody {
            tx_ring: U64::new(self.iova(base)),
            rx_ring: U64::new(self.iova(base + 0x1000)),
            cq_ring: U64::new(self.iova(base + 0x2000)),
            job_id: U32::new(job_id),
            initiator: U32::new(initiator),
            ri_count: U16::new(ri_count),
            tx_log2: EP_LOG2,
            rx_log2: EP_LOG2,
            cq_log2: EP_LOG2,
            flags: 0,
            trx_log2: 0,
            rx_ctx_cnt: 0,
            trx_ring: U64::new(0),
            tx_ctx_cnt: 0,
            reserved: [0; 7],
        };
        (body, base)
    }

    /// A CONTEXT_CREATE body of context `index` in `role`, its rings fresh ones as
    /// [`Driver::ep_body`] gives.
    pub fn context_body(&mut self, index: u8, role: u8) -> ContextCreateBody {
        let (b, _) = self.ep_body(1, 0, 1);
        ContextCreateBody {
            tx_ring: b.tx_ring,
            rx_ring: b.rx_ring,
            cq_ring: b.cq_ring,
            tx_log2: b.tx_log2,
            rx_log2: b.rx_log2,
            cq_log2: b.cq_log2,
            index,
            role,
            ..FromZeros::new_zeroed()
        }
    }

    pub fn ep_create_with(
        &mut self,
        av: u32,
        body: EndpointCreateBody,
        base: usize,
    ) -> Result<Ep, Status> {
        let c = self.submit(Command::EndpointCreate { av, body });
        if c.status() != Status::Success {
            return Err(c.status());
        }
        let r0 = c.result0.get();
        let r1 = c.result1.get();
        Ok(Ep {
            handle: r0 as u16,
            pid: (r0 >> 16) as u16,
            ri_start: r1 as u16,
            ri_count: (r1 >> 16) as u16,
            tx_off: base,
            rx_off: base + 0x1000,
            cq_off: base + 0x2000,
            tx_tail: 0,
            rx_tail: 0,
            cq_head: 0,
            cq_phase: true,
        })
    }

    pub fn ep_create(
        &mut self,
        av: u32,
        job_id: u32,
        initiator: u32,
        ri_count: u16,
    ) -> Result<Ep, Status> {
        let (body, base) = self.ep_body(job_id, initiator, ri_count);
        self.ep_create_with(av, body, base)
    }

    /// The UET address of an endpoint of this NIC.
    pub fn address_of(&self, ep: &Ep, initiator: u32) -> UetAddress {
        UetAddress {
            caps: 0,
            mode: uet_fwif::address::AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: ep.pid,
            fabric_addr: self.f.fabric_addr(),
            ri_start: ep.ri_start,
            ri_count: ep.ri_count,
            initiator,
        }
    }

    pub fn post_send_desc(&mut self, ep: &mut Ep, d: TxDescriptor) {
        let n = 1u16 << EP_LOG2;
        self.mem
            .write(ep.tx_off + usize::from(ep.tx_tail) * 64, d.as_bytes());
        ep.tx_tail = (ep.tx_tail + 1) % n;
        self.f.write(
            TXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(ep.handle)
                .with_index(ep.tx_tail),
        );
    }

    /// Send `payload` (copied to buffer slot `slot`) to `dest`.
    pub fn send(
        &mut self,
        ep: &mut Ep,
        dest: u64,
        slot: usize,
        payload: &[u8],
        context: u64,
        data: u64,
    ) {
        let off = BUFS_OFF + slot * 0x2000;
        self.mem.write(off, payload);
        let d = TxDescriptor {
            opcode: 1,
            len: U32::new(payload.len() as u32),
            buf: U64::new(self.iova(off)),
            dest: U64::new(dest),
            context: U64::new(context),
            data: U64::new(data),
            ..Default::default()
        };
        self.post_send_desc(ep, d);
    }

    /// Post a receive buffer of `len` bytes at buffer slot `slot`.
    pub fn post_recv(&mut self, ep: &mut Ep, slot: usize, len: u32, context: u64) {
        let off = BUFS_OFF + slot * 0x2000;
        self.post_recv_desc(
            ep,
            RxDescriptor {
                buf: U64::new(self.iova(off)),
                len: U32::new(len),
                context: U64::new(context),
                ..Default::default()
            },
        );
    }

    pub fn post_recv_desc(&mut self, ep: &mut Ep, d: RxDescriptor) {
        let n = 1u16 << EP_LOG2;
        self.mem
            .write(ep.rx_off + usize::from(ep.rx_tail) * 32, d.as_bytes());
        ep.rx_tail = (ep.rx_tail + 1) % n;
        self.f.write(
            RXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(ep.handle)
                .with_index(ep.rx_tail),
        );
    }

    pub fn buf(&self, slot: usize, len: usize) -> Vec<u8> {
        self.mem.read(BUFS_OFF + slot * 0x2000, len)
    }

    /// The next completion, without returning the slot to the NIC.
    pub fn peek_cq(&self, ep: &Ep) -> Option<Completion> {
        let n = uet_fwif::datapath::COMPLETION_BYTES;
        let raw = self.mem.read(ep.cq_off + usize::from(ep.cq_head) * n, n);
        let c = Completion::read_from_bytes(&raw).unwrap();
        ((c.phase & 1 != 0) == ep.cq_phase).then_some(c)
    }

    /// Take the next completion and return its slot with CQ_DOORBELL.
    pub fn poll_cq(&mut self, ep: &mut Ep) -> Option<Completion> {
        let c = self.peek_cq(ep)?;
        let n = 1u16 << EP_LOG2;
        ep.cq_head = (ep.cq_head + 1) % n;
        if ep.cq_head == 0 {
            ep.cq_phase = !ep.cq_phase;
        }
        self.f.write(
            CQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(ep.handle)
                .with_index(ep.cq_head),
        );
        Some(c)
    }
}

/// Read a register through the typed interface.
/// A socket pair standing in for an eventfd, its sending end given to `f` as MSI-X
/// `vector`'s trigger; the other end, non-blocking, reads the messages ([`interrupts`]).
pub fn trigger_for(
    f: &SimFunction,
    vector: u16,
) -> (
    std::os::unix::net::UnixStream,
    std::os::unix::net::UnixStream,
) {
    let (tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
    rx.set_nonblocking(true).unwrap();
    f.set_msix_eventfd(vector, Some(tx.as_fd())).unwrap();
    (tx, rx)
}

/// Messages that reached a trigger: each is 8 bytes (an eventfd's increment) on the other end
/// of a socket pair standing in for the eventfd.
pub fn interrupts(rx: &mut std::os::unix::net::UnixStream) -> usize {
    use std::io::Read;
    let mut buf = [0u8; 512];
    rx.read(&mut buf).map_or(0, |n| n / 8)
}

pub fn rd<T: uet_regs::RegValue>(f: &SimFunction, reg: uet_regs::Reg<T>) -> T {
    f.read(reg)
}

/// Raw 32-bit read.
pub fn rd32(f: &SimFunction, off: u32) -> u32 {
    f.read32(off)
}
