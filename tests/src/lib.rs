//! Shared scaffolding for the end-to-end tests: simulated fabrics, NICs and endpoints.

use std::net::IpAddr;
use std::sync::Arc;
use uet_av::{AvAttr, FiAddr};
use uet_driver::backend::sim::SimDevice;
use uet_driver::{Av, CqEvent, Device, DmaPool, Endpoint, EndpointAttr, Nic};
use uet_fwif::UetAddress;
use uet_sim::{Fabric, NicConfig, SimFunction};

/// The fabric address of NIC `i`: 10.1.0.1, 10.1.0.2, …
pub fn nic_addr(i: usize) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::from(0x0A01_0001 + i as u32))
}

/// Seeds per configuration of the model tests on the simulator: `UET_MODEL_SEEDS` when it is
/// set to a number, else `default`.
pub fn model_seed_count(default: usize) -> usize {
    std::env::var("UET_MODEL_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A fabric with `n` NICs.
pub fn fabric(n: usize) -> (Fabric, Vec<SimFunction>) {
    fabric_with(n, |_| {})
}

/// [`fabric`] of NICs whose configuration `configure` changes first (an older interface
/// version, for instance).
pub fn fabric_with(n: usize, configure: impl Fn(&mut NicConfig)) -> (Fabric, Vec<SimFunction>) {
    let fabric = Fabric::new();
    let fns = (0..n)
        .map(|i| {
            let mut cfg = NicConfig::new(nic_addr(i));
            configure(&mut cfg);
            fabric.add_nic(cfg).expect("add NIC")
        })
        .collect();
    (fabric, fns)
}

/// A NIC with an AV, an endpoint bound to it, and a buffer pool.
pub struct Node {
    /// The NIC.
    pub nic: Nic,
    /// Its AV.
    pub av: Av,
    /// Its endpoint.
    pub ep: Endpoint,
    /// Buffers.
    pub pool: DmaPool,
    /// The simulated function behind the NIC, for counters.
    pub function: SimFunction,
}

impl Node {
    /// Open NIC `function` with an AV of `av_count` entries and an endpoint, all in `job_id`.
    pub fn new(function: SimFunction, job_id: u32, av_count: usize) -> Node {
        Self::with_av_job(function, job_id, job_id, av_count)
    }

    /// As [`Node::new`], with the AV stamping `av_job` into its entries.
    pub fn with_av_job(function: SimFunction, job_id: u32, av_job: u32, av_count: usize) -> Node {
        let device = Arc::new(SimDevice::new(function.clone()));
        Self::on_device(device, function, job_id, av_job, av_count)
    }

    /// As [`Node::with_av_job`], the NIC reached through `device` (any backend) and
    /// `function` the simulated function behind it, for counters.
    pub fn on_device(
        device: Arc<dyn Device>,
        function: SimFunction,
        job_id: u32,
        av_job: u32,
        av_count: usize,
    ) -> Node {
        let nic = Nic::open(device).expect("open NIC");
        let av = nic
            .open_av(AvAttr {
                count: av_count,
                job_id: av_job,
                ..AvAttr::default()
            })
            .expect("open AV");
        let ep = nic
            .endpoint(
                EndpointAttr {
                    job_id,
                    ..EndpointAttr::default()
                },
                Some(&av),
            )
            .expect("create endpoint");
        let pool = DmaPool::new(&nic, 4096, 64).expect("pool");
        Node {
            nic,
            av,
            ep,
            pool,
            function,
        }
    }

    /// The endpoint's serialized address.
    pub fn addr(&self) -> [u8; 32] {
        self.ep.address().to_bytes().expect("valid address")
    }

    /// Insert one serialized address; returns its fi_addr.
    pub fn insert(&mut self, addr: &[u8]) -> FiAddr {
        let mut out = [0u64; 1];
        let n = self.av.insert(addr, 1, Some(&mut out), 0).expect("insert");
        assert_eq!(n, 1, "insert of a valid address");
        out[0]
    }

    /// Post `n` receive buffers.
    pub fn post_recvs(&mut self, n: u32) {
        for i in 0..n {
            let b = self.pool.alloc().expect("buffer");
            self.ep
                .post_recv(b, 1000 + u64::from(i))
                .expect("post recv");
        }
    }

    /// Send `data` to `dest`.
    pub fn send(&mut self, dest: FiAddr, data: &[u8], context: u64) {
        let mut b = self.pool.alloc().expect("buffer");
        b.fill(data).expect("fill");
        self.ep
            .post_send(dest, b, context, context)
            .expect("post send");
    }

    /// The next completion; the simulator completes work synchronously with the doorbell, so
    /// an empty queue after a bounded number of polls means nothing is coming.
    pub fn next_completion(&mut self) -> Option<CqEvent> {
        for _ in 0..16 {
            if let Some(ev) = self.ep.poll().expect("poll") {
                return Some(ev);
            }
        }
        None
    }

    /// The next completion, which must be a send's, successful.
    pub fn send_ok(&mut self) {
        let ev = self.next_completion().expect("a send completion");
        assert_eq!(ev.kind, uet_fwif::datapath::CompletionKind::Send);
        assert!(ev.error.is_none(), "{:?}", ev.error);
    }

    /// Send `data` to `dest` as a tagged message.
    pub fn tsend(&mut self, dest: FiAddr, data: &[u8], tag: u64, context: u64) {
        let mut b = self.pool.alloc().expect("buffer");
        b.fill(data).expect("fill");
        self.ep
            .post_tsend(dest, b, tag, context, context)
            .expect("post tagged send");
    }

    /// Post a tagged receive buffer.
    pub fn trecv(&mut self, tag: u64, ignore: u64, context: u64) {
        let b = self.pool.alloc().expect("buffer");
        self.ep
            .post_trecv(b, tag, ignore, context)
            .expect("post tagged recv");
    }

    /// A counter of the NIC.
    pub fn counter(&self, reg: uet_regs::Reg<u64>) -> u64 {
        self.function.counter(reg)
    }
}

/// Two nodes on a fresh fabric (the second NIC's configuration changed by `cfg_b`), in job
/// `job_id`, each in the other's AV at fi_addr 0.
pub fn pair_with(job_id: u32, cfg_b: impl FnOnce(&mut NicConfig)) -> (Fabric, Node, Node) {
    let fabric = Fabric::new();
    let fa = fabric
        .add_nic(NicConfig::new(nic_addr(0)))
        .expect("add NIC");
    let mut cfg = NicConfig::new(nic_addr(1));
    cfg_b(&mut cfg);
    let fb = fabric.add_nic(cfg).expect("add NIC");
    let mut a = Node::new(fa, job_id, 4);
    let mut b = Node::new(fb, job_id, 4);
    assert_eq!(a.insert(&b.addr()), 0);
    assert_eq!(b.insert(&a.addr()), 0);
    (fabric, a, b)
}

/// A deterministic test pattern of `len` bytes.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// `addr` with fields changed, serialized.
pub fn forged(addr: &UetAddress, f: impl FnOnce(&mut UetAddress)) -> [u8; 32] {
    let mut a = *addr;
    f(&mut a);
    a.to_bytes().expect("forged address still well-formed")
}

/// An event queue's attributes for readers that block (`fi_eq_sread`): `FI_WAIT_UNSPEC`, as
/// the default (`FI_WAIT_NONE`) refuses blocking reads.
pub const WAITABLE_EQ: uet_driver::EqAttr = uet_driver::EqAttr::WAITABLE;

/// Open the NIC behind `function`.
pub fn open_nic(function: &SimFunction) -> Nic {
    Nic::open(Arc::new(SimDevice::new(function.clone()))).expect("open NIC")
}

/// An AV of `count` entries stamping `job_id`, decoding `rx_ctx_bits` receive-context bits.
pub fn open_av(nic: &Nic, job_id: u32, count: usize, rx_ctx_bits: u8) -> Av {
    nic.open_av(AvAttr {
        count,
        job_id,
        rx_ctx_bits,
        ..AvAttr::default()
    })
    .expect("open AV")
}

/// An endpoint of `job_id` on `nic`, bound to `av`, with the default attributes otherwise.
pub fn job_endpoint(nic: &Nic, job_id: u32, av: &Av) -> Endpoint {
    nic.endpoint(
        EndpointAttr {
            job_id,
            ..EndpointAttr::default()
        },
        Some(av),
    )
    .expect("endpoint")
}

/// The next event of `eq`, waiting up to five seconds (connection management progresses in
/// a thread of its own).
pub fn wait_event(eq: &uet_driver::EventQueue) -> uet_driver::EqEvent {
    eq.sread(Some(std::time::Duration::from_secs(5)), 0)
        .expect("an event within 5 s")
}

/// The next error entry of `eq`, waiting up to five seconds.
pub fn wait_error(eq: &uet_driver::EventQueue) -> uet_driver::EqErrEntry {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Ok(e) = eq.readerr() {
            return e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no error event within 5 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Poll `ep` until a completion arrives (at most a bounded number of tries).
pub fn poll_one(ep: &mut Endpoint) -> Option<CqEvent> {
    (0..16).find_map(|_| ep.poll().expect("poll"))
}

/// What a [`HookedDevice`] does to the driver's BAR0 accesses: a device that misbehaves in one
/// precise way (a capability it reports, a doorbell it loses, a read that fails), or a path to
/// it that does (a 64-bit write split into two 32-bit halves).
pub trait BarHook: Send + Sync {
    /// The value the driver reads at `offset`, given what the device returned.
    fn read32(&self, _offset: u32, value: u32) -> u32 {
        value
    }
    /// Whether the driver's write of `value` at `offset` reaches the device.
    fn write32(&self, _offset: u32, _value: u32) -> bool {
        true
    }
    /// The value the driver reads from the 64-bit register at `offset`, given what the
    /// device returned.
    fn read64(&self, _offset: u32, value: u64) -> u64 {
        value
    }
    /// Make the driver's 64-bit write of `value` at `offset` on `bar`, the device: as it is,
    /// unless the hook makes it otherwise (say, as two 32-bit halves, as some PCIe paths do).
    fn write64(&self, bar: &dyn uet_regs::Mmio, offset: u32, value: u64) {
        bar.write64(offset, value)
    }
}

/// A simulated device whose BAR0 accesses pass through `hook`; DMA mappings go straight to
/// `inner`.
pub struct HookedDevice<H> {
    /// The simulated device.
    pub inner: SimDevice,
    /// What is done to the accesses.
    pub hook: H,
}

impl<H: BarHook> uet_regs::Mmio for HookedDevice<H> {
    fn read32(&self, offset: u32) -> u32 {
        self.hook.read32(offset, self.inner.bar0().read32(offset))
    }
    fn write32(&self, offset: u32, value: u32) {
        if self.hook.write32(offset, value) {
            self.inner.bar0().write32(offset, value)
        }
    }
    fn read64(&self, offset: u32) -> u64 {
        self.hook.read64(offset, self.inner.bar0().read64(offset))
    }
    fn write64(&self, offset: u32, value: u64) {
        self.hook.write64(self.inner.bar0(), offset, value)
    }
}

impl<H: BarHook> Device for HookedDevice<H> {
    fn bar0(&self) -> &dyn uet_regs::Mmio {
        self
    }
    fn dma_map(&self, region: &uet_driver::dma::DmaRegion) -> Result<(), uet_driver::DeviceError> {
        self.inner.dma_map(region)
    }
    fn dma_unmap(
        &self,
        region: &uet_driver::dma::DmaRegion,
    ) -> Result<(), uet_driver::DeviceError> {
        self.inner.dma_unmap(region)
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

/// A capture of the fabric into memory: hand a clone to `Fabric::capture_to_writer`, read the
/// frames back with [`CaptureBuffer::records`] after `Fabric::stop_capture`.
#[derive(Clone, Default)]
pub struct CaptureBuffer(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CaptureBuffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let mut v = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("capture buffer poisoned"))?;
        v.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CaptureBuffer {
    /// The pcap bytes written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The captured frames, in order; none when the bytes are not a whole pcap file.
    pub fn records(&self) -> Vec<Vec<u8>> {
        uet_sim::pcap::parse(&self.bytes())
            .map(|f| f.records.into_iter().map(|r| r.data).collect())
            .unwrap_or_default()
    }
}

/// Whether `fd` polls readable within `timeout` (`Duration::ZERO`: now, without waiting). A
/// descriptor that is not open is not readable.
pub fn readable_within(fd: std::os::fd::RawFd, timeout: std::time::Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd on the stack for the call, and the count passed is 1; poll(2)
    // writes only its `revents`, and reports a descriptor that is not open as POLLNVAL.
    unsafe { libc::poll(&mut pfd, 1, ms) == 1 && pfd.revents & libc::POLLIN != 0 }
}

/// Wait for the forked child `pid` for at most `limit`: its exit code, or `None` when it
/// was still running then (it is killed).
pub fn wait_child(pid: libc::pid_t, limit: std::time::Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: waits for (or polls) the child forked by the caller; `status` outlives it.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(got >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if got == pid {
            assert!(libc::WIFEXITED(status), "child status {status:#x}");
            return Some(libc::WEXITSTATUS(status));
        }
        if std::time::Instant::now() >= deadline {
            // SAFETY: ends and reaps the caller's child, still running.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
