//! The demo job: N ranks, each with its own simulated NIC on one fabric.
//!
//! Every rank runs in its own thread, as a process of a job would:
//!
//! 1. open its NIC (`Nic::open`), a domain on it (`Nic::domain`: `FI_AV_TABLE`, the job's
//!    JobID as its auth key), an AV table in the domain and an endpoint bound to it;
//! 2. post its receive buffers;
//! 3. send its UET address to rank 0 over the bootstrap channel (the out-of-band control
//!    channel a launcher provides); rank 0 collects every address and broadcasts the list in
//!    rank order — the master-collect pattern;
//! 4. insert the whole list into its AV with one `fi_av_insert`, so `fi_addr_t` k is rank k;
//! 5. send `messages` messages to its right neighbour, naming it only by `fi_addr_t`;
//! 6. check every message that arrives: payload, CQ data, and the source `fi_addr_t` the NIC
//!    reverse-translated must all say "left neighbour", each sequence number exactly once;
//! 7. tagged messages (`tagged` per rank, tag = sender rank << 16 | sequence): the first half
//!    of the tagged receives is posted before anything is sent, the rest only after every
//!    rank's tagged sends have completed — so those messages wait on the NIC's unexpected
//!    list and complete their receive the moment it is posted. Every tagged message is
//!    checked like an untagged one, plus its tag, and the endpoint's `rx_unexpected` counter
//!    must equal the number of late receives;
//! 8. RMA (unless disabled): every rank registers a memory region of MTU + 1 bytes (two
//!    packets) with remote read and write, under the memory key [`rma_key`]`(rank)` — keys
//!    are agreed by rank, as a job's launcher would hand them out — writes a rank-specific
//!    pattern into its right neighbour's region, and after a barrier checks that its own
//!    region holds exactly its left neighbour's pattern (verified at the target), then reads
//!    its right neighbour's region back and compares it with what it wrote.
//!
//! With [`DemoConfig::pcap`] set, the fabric writes every frame to a pcap file from before the
//! first rank starts until the last one has finished.

use crate::serve::nic_socket;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use uet_av::{AvAttr, AvType, DomainAttr, FiAddr, FiErrno};
use uet_driver::backend::sim::SimDevice;
use uet_driver::backend::sysfs::PciAddress;
use uet_driver::backend::vfio::VfioDevice;
use uet_driver::backend::vfio_user::VfioUserDevice;
use uet_driver::Device;
use uet_driver::{
    Av, CqEvent, CqOp, DmaBuffer, DmaPool, DriverError, Endpoint, MemoryRegion, MrAccess, Nic,
};
use uet_sim::{CaptureStatus, Fabric, NicConfig};

/// How long a rank waits for its traffic before declaring it lost.
pub const PROGRESS_TIMEOUT: Duration = Duration::from_secs(10);

/// Demo parameters.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Ranks, each with its own NIC.
    pub ranks: usize,
    /// Messages each rank sends to its right neighbour.
    pub messages: u32,
    /// JobID of the job.
    pub job_id: u32,
    /// Tagged messages each rank sends to its right neighbour (0: none).
    pub tagged: u32,
    /// Whether each rank does an RMA write and read against its right neighbour's region.
    pub rma: bool,
    /// Write every frame that crosses the fabric to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Host interface minor version of every simulated NIC (`uet_sim::OLDEST_INTERFACE_MINOR`
    /// to `uet_regs::INTERFACE_MINOR`): the job on NICs older than the driver.
    pub interface_minor: u8,
    /// Run on the NICs a simulator daemon serves in this directory (`uetctl sim serve`):
    /// rank `i` opens `nic<i>.sock` over vfio-user. `None`: NICs of a fabric in this process.
    pub vfio_user: Option<PathBuf>,
    /// Run on these PCI functions, bound to `vfio-pci`, through kernel VFIO: rank `i` on the
    /// `i`-th; as many as there are ranks. Empty: not on hardware.
    pub vfio: Vec<PciAddress>,
}

impl Default for DemoConfig {
    /// What `uetctl demo` runs without options.
    fn default() -> Self {
        DemoConfig {
            ranks: 4,
            messages: 8,
            job_id: 0x00_1234,
            tagged: 4,
            rma: true,
            pcap: None,
            interface_minor: uet_driver::uet_regs::INTERFACE_MINOR,
            vfio_user: None,
            vfio: Vec::new(),
        }
    }
}

/// The part of the configuration every rank thread needs.
#[derive(Clone, Copy, Debug)]
struct RankConfig {
    ranks: usize,
    messages: u32,
    job_id: u32,
    tagged: u32,
    rma: bool,
}

/// Barriers every rank passes, whatever happens to it.
const BARRIERS: usize = 4;

/// What one rank did.
#[derive(Clone, Debug)]
pub struct RankReport {
    /// Rank.
    pub rank: usize,
    /// Its NIC's fabric address.
    pub fabric_addr: IpAddr,
    /// PIDonFEP of its endpoint.
    pub pid_on_fep: u16,
    /// Resource indices of its endpoint.
    pub resource_indices: Range<u16>,
    /// Initiator ID of its endpoint.
    pub initiator: u32,
    /// Valid entries in its AV.
    pub av_size: usize,
    /// Messages sent and completed successfully.
    pub sent: u32,
    /// Messages received and verified.
    pub received: u32,
    /// Tagged messages sent and completed successfully.
    pub tagged_sent: u32,
    /// Tagged messages received and verified (payload, tag, CQ data, source).
    pub tagged_received: u32,
    /// Tagged messages that waited on the NIC's unexpected list (the endpoint's counter).
    pub tagged_unexpected: u64,
    /// Bytes of the RMA write and of the read (0 when RMA is off).
    pub rma_bytes: usize,
    /// The left neighbour's RMA write landed byte-exact in this rank's region.
    pub rma_write_verified: bool,
    /// The RMA read of the right neighbour's region returned what this rank wrote there.
    pub rma_read_verified: bool,
    /// Everything that went wrong.
    pub errors: Vec<String>,
}

/// A rank after the job: its objects stay open so tools can inspect them.
pub struct Rank {
    /// The NIC.
    pub nic: Nic,
    /// The AV.
    pub av: Av,
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The memory region its left neighbour wrote (when RMA ran).
    pub region: Option<MemoryRegion>,
    /// What it did.
    pub report: RankReport,
}

/// The job after it ran.
pub struct DemoOutcome {
    /// The simulated fabric, when it is in this process (not with `vfio_user`).
    pub fabric: Option<Fabric>,
    /// Every rank, in rank order.
    pub ranks: Vec<Rank>,
    /// The packet capture, when one was asked for (stopped: the file is complete).
    pub capture: Option<CaptureStatus>,
}

impl DemoOutcome {
    /// Whether every message arrived where it should and nothing failed.
    pub fn ok(&self, cfg: &DemoConfig) -> bool {
        self.ranks.iter().all(|r| r.report.ok(cfg))
    }

    /// Report the packet capture on stderr (when there is one); whether it was written
    /// completely. Every command that takes `--pcap` fails when it was not.
    pub fn report_capture(&self) -> bool {
        let Some(c) = &self.capture else {
            return true;
        };
        let file = c
            .path
            .as_ref()
            .map_or_else(|| "the capture".to_string(), |p| p.display().to_string());
        if c.write_errors > 0 {
            eprintln!(
                "uetctl: writing {file} failed after {} frames: {}",
                c.frames,
                c.last_error.as_deref().unwrap_or("unknown error")
            );
            false
        } else {
            eprintln!("uetctl: {} frames written to {file}", c.frames);
            true
        }
    }

    /// The capture as JSON (`null` without one).
    pub fn capture_json(&self) -> serde_json::Value {
        match &self.capture {
            Some(c) => serde_json::json!({
                "file": c.path.as_ref().map(|p| p.display().to_string()),
                "frames": c.frames,
                "write_errors": c.write_errors,
                "error": c.last_error,
            }),
            None => serde_json::Value::Null,
        }
    }
}

impl RankReport {
    /// Whether this rank did everything the job asked, and verified it.
    pub fn ok(&self, cfg: &DemoConfig) -> bool {
        self.errors.is_empty()
            && self.sent == cfg.messages
            && self.received == cfg.messages
            && self.tagged_sent == cfg.tagged
            && self.tagged_received == cfg.tagged
            && (!cfg.rma || (self.rma_write_verified && self.rma_read_verified))
    }
}

/// The memory key of rank `rank`'s region.
pub fn rma_key(job_id: u32, rank: usize) -> u64 {
    0x5545_5400_0000_0000 | u64::from(job_id) << 16 | rank as u64
}

/// The bytes rank `from` writes into rank `to`'s region.
pub fn rma_pattern(job: u32, from: usize, to: usize, len: usize) -> Vec<u8> {
    let seed = (job as usize).wrapping_mul(31) ^ from.wrapping_mul(7919) ^ to.wrapping_mul(104_729);
    (0..len)
        .map(|i| (i.wrapping_mul(131).wrapping_add(seed) ^ (i >> 7)) as u8)
        .collect()
}

/// The tag of message `seq` from rank `from`.
pub fn demo_tag(from: usize, seq: u32) -> u64 {
    (from as u64) << 16 | u64::from(seq)
}

/// The fabric address of a rank's NIC: 10.0.0.1, 10.0.0.2, …
pub fn rank_fabric_addr(rank: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(
        u32::from(Ipv4Addr::new(10, 0, 0, 1)) + rank as u32,
    ))
}

/// Errors that stop the job before it runs.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Bad parameters.
    #[error("{0}")]
    Config(String),
    /// The fabric could not be built.
    #[error("building the simulated fabric: {0}")]
    Fabric(String),
    /// A daemon's NIC could not be opened.
    #[error("{0}")]
    Device(String),
    /// The packet capture could not be started.
    #[error("{0}")]
    Capture(String),
    /// A rank failed to set up.
    #[error("rank {rank}: {message}")]
    Rank {
        /// Which rank.
        rank: usize,
        /// What failed.
        message: String,
    },
}

fn payload(job: u32, from: usize, to: usize, seq: u32) -> Vec<u8> {
    format!("uet-demo job {job:#x}: rank {from} -> rank {to}, message {seq}").into_bytes()
}

fn tagged_payload(job: u32, from: usize, to: usize, seq: u32) -> Vec<u8> {
    format!("uet-demo job {job:#x}: rank {from} -> rank {to}, tagged message {seq}").into_bytes()
}

/// Run the job.
pub fn run(cfg: DemoConfig) -> Result<DemoOutcome, DemoError> {
    if cfg.ranks < 2 || cfg.ranks > 1024 {
        return Err(DemoError::Config(format!(
            "--ranks must be 2..=1024, got {}",
            cfg.ranks
        )));
    }
    if cfg.messages == 0 || cfg.messages > 32 {
        return Err(DemoError::Config(format!(
            "--messages must be 1..=32, got {}",
            cfg.messages
        )));
    }
    if cfg.tagged > 32 {
        return Err(DemoError::Config(format!(
            "--tagged must be 0..=32, got {}",
            cfg.tagged
        )));
    }
    if cfg.job_id == 0 {
        // A domain of JobID 0 has none of its own: its endpoints take the NIC's default
        // JobID while the AV's entries carry 0, and every message would be refused.
        return Err(DemoError::Config(
            "--job-id 0 is no JobID: the job needs one, 0x1..=0xffffff".into(),
        ));
    }
    if cfg.job_id > uet_driver::uet_fwif::av_entry::MAX_JOB_ID {
        return Err(DemoError::Config(format!(
            "--job-id {:#x} is wider than 24 bits",
            cfg.job_id
        )));
    }
    let newest = uet_driver::uet_regs::INTERFACE_MINOR;
    if !(uet_sim::OLDEST_INTERFACE_MINOR..=newest).contains(&cfg.interface_minor) {
        return Err(DemoError::Config(format!(
            "--interface-minor must be {}..={newest} (the interfaces the simulator emulates), got {}",
            uet_sim::OLDEST_INTERFACE_MINOR,
            cfg.interface_minor
        )));
    }
    let (fabric, devices) = match &cfg.vfio_user {
        _ if !cfg.vfio.is_empty() => (None, vfio_devices(&cfg)?),
        Some(dir) => (None, daemon_devices(dir, &cfg)?),
        None => {
            let (fabric, devices) = embedded_devices(&cfg)?;
            (Some(fabric), devices)
        }
    };
    let rank_cfg = RankConfig {
        ranks: cfg.ranks,
        messages: cfg.messages,
        job_id: cfg.job_id,
        tagged: cfg.tagged,
        rma: cfg.rma,
    };

    // The bootstrap channel: every rank to rank 0, and rank 0 back to each rank.
    let (to_master, master_rx) = mpsc::channel::<(usize, Vec<u8>)>();
    let mut from_master = Vec::new();
    let mut rank_rx = Vec::new();
    for _ in 0..cfg.ranks {
        let (tx, rx) = mpsc::channel::<Arc<Vec<u8>>>();
        from_master.push(tx);
        rank_rx.push(rx);
    }
    let barrier = Arc::new(Barrier::new(cfg.ranks));
    let mut master_rx = Some(master_rx);
    let mut from_master = Some(from_master);

    let mut handles = Vec::new();
    for (rank, (device, inbox)) in devices.into_iter().zip(rank_rx).enumerate() {
        let to_master = to_master.clone();
        let barrier = barrier.clone();
        let master = if rank == 0 {
            master_rx.take().zip(from_master.take())
        } else {
            None
        };
        handles.push(std::thread::spawn(move || {
            run_rank(rank_cfg, rank, device, to_master, inbox, master, &barrier)
        }));
    }
    drop(to_master);
    let mut ranks = Vec::with_capacity(cfg.ranks);
    let mut first_error = None;
    for (rank, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(r)) => ranks.push(r),
            Ok(Err(message)) => {
                first_error.get_or_insert(DemoError::Rank { rank, message });
            }
            Err(_) => {
                first_error.get_or_insert(DemoError::Rank {
                    rank,
                    message: "rank thread panicked".into(),
                });
            }
        }
    }
    let capture = cfg.pcap.as_ref().zip(fabric.as_ref()).map(|(_, fabric)| {
        fabric.stop_capture();
        fabric.capture_status()
    });
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(DemoOutcome {
        fabric,
        ranks,
        capture,
    })
}

/// A fabric in this process with a NIC per rank (and the capture, when asked for).
fn embedded_devices(cfg: &DemoConfig) -> Result<(Fabric, Vec<Arc<dyn Device>>), DemoError> {
    let fabric = Fabric::new();
    let mut devices: Vec<Arc<dyn Device>> = Vec::with_capacity(cfg.ranks);
    for r in 0..cfg.ranks {
        let mut nic = NicConfig::new(rank_fabric_addr(r));
        nic.interface_minor = cfg.interface_minor;
        let f = fabric
            .add_nic(nic)
            .map_err(|e| DemoError::Fabric(e.to_string()))?;
        devices.push(Arc::new(SimDevice::new(f)));
    }
    if let Some(path) = &cfg.pcap {
        fabric
            .capture_to_file(path)
            .map_err(|e| DemoError::Capture(e.to_string()))?;
    }
    Ok((fabric, devices))
}

/// The NICs a daemon serves in `dir`, rank `i` on `nic<i>.sock`, opened before any rank
/// starts so that a missing one fails the job at once.
fn daemon_devices(dir: &Path, cfg: &DemoConfig) -> Result<Vec<Arc<dyn Device>>, DemoError> {
    if cfg.pcap.is_some() {
        return Err(DemoError::Config(
            "--pcap captures the fabric of the embedded simulator; a daemon's fabric is in its own process".into(),
        ));
    }
    (0..cfg.ranks)
        .map(|r| {
            VfioUserDevice::open(nic_socket(dir, r))
                .map(|d| Arc::new(d) as Arc<dyn Device>)
                .map_err(|e| DemoError::Device(format!("rank {r}: {e}")))
        })
        .collect()
}

/// The NICs at `cfg.vfio`, rank `i` on the `i`-th, opened before any rank starts.
fn vfio_devices(cfg: &DemoConfig) -> Result<Vec<Arc<dyn Device>>, DemoError> {
    if cfg.vfio.len() != cfg.ranks {
        return Err(DemoError::Config(format!(
            "--vfio names {} functions for {} ranks: one function per rank",
            cfg.vfio.len(),
            cfg.ranks
        )));
    }
    if cfg.vfio_user.is_some() || cfg.pcap.is_some() {
        return Err(DemoError::Config(
            "--vfio runs on NICs on the PCI bus: no daemon directory or pcap of a simulated fabric"
                .into(),
        ));
    }
    if let Some(twice) = cfg
        .vfio
        .iter()
        .enumerate()
        .find_map(|(i, a)| cfg.vfio[..i].contains(a).then_some(a))
    {
        return Err(DemoError::Config(format!(
            "--vfio names {twice} twice: each rank needs a NIC of its own"
        )));
    }
    cfg.vfio
        .iter()
        .enumerate()
        .map(|(r, &a)| {
            VfioDevice::open(a)
                .map(|d| Arc::new(d) as Arc<dyn Device>)
                .map_err(|e| DemoError::Device(format!("rank {r}: {e}")))
        })
        .collect()
}

type Master = (
    mpsc::Receiver<(usize, Vec<u8>)>,
    Vec<mpsc::Sender<Arc<Vec<u8>>>>,
);

fn run_rank(
    cfg: RankConfig,
    rank: usize,
    device: Arc<dyn Device>,
    to_master: mpsc::Sender<(usize, Vec<u8>)>,
    inbox: mpsc::Receiver<Arc<Vec<u8>>>,
    master: Option<Master>,
    barrier: &Barrier,
) -> Result<Rank, String> {
    let n = cfg.ranks;
    // A rank that fails still takes part in every barrier, so the others never hang.
    let setup = (|| -> Result<_, String> {
        let nic = Nic::open(device).map_err(|e| e.to_string())?;
        let domain = nic
            .domain(DomainAttr {
                av_type: AvType::Table,
                job_id: cfg.job_id,
                ..DomainAttr::default()
            })
            .map_err(|e| e.to_string())?;
        let av = domain
            .open_av(AvAttr {
                count: n,
                ..AvAttr::default()
            })
            .map_err(|e| e.to_string())?;
        // The domain's endpoint attributes carry its JobID, as fi_getinfo's ep_attr does.
        let endpoint = domain
            .endpoint(domain.endpoint_attr(), Some(&av))
            .map_err(|e| e.to_string())?;
        // Demo payloads are short: one packet each.
        let count = 2 * (cfg.messages + cfg.tagged) + 8;
        let pool = DmaPool::new(&nic, endpoint.mtu(), count).map_err(|e| e.to_string())?;
        // RMA: the region peers write (two packets' worth), a write source, a read target.
        let rma_pool = DmaPool::new(&nic, endpoint.mtu() + 1, 3).map_err(|e| e.to_string())?;
        Ok((nic, av, endpoint, pool, rma_pool))
    })();
    let (nic, mut av, mut endpoint, pool, rma_pool) = match setup {
        Ok(s) => s,
        Err(e) => {
            drop(to_master);
            if let Some((_, broadcast)) = master {
                // The master failed: tell every rank there is no list rather than let them wait.
                drop(broadcast);
            }
            for _ in 0..BARRIERS {
                barrier.wait();
            }
            return Err(e);
        }
    };
    let mut errors = Vec::new();

    let right = (rank + 1) % n;
    let left = (rank + n - 1) % n;
    // Receive buffers first: nothing may arrive before a buffer waits for it.
    for seq in 0..cfg.messages {
        let Some(buf) = pool.alloc() else {
            errors.push("receive buffer pool exhausted".to_string());
            break;
        };
        if let Err((e, _)) = endpoint.post_recv(buf, u64::from(seq)) {
            errors.push(format!("fi_recv: {e}"));
        }
    }
    // The early half of the tagged receives; the rest are posted after the messages arrived.
    let early = cfg.tagged.div_ceil(2);
    post_trecvs(&mut endpoint, &pool, left, 0..early, &mut errors);
    // The region the left neighbour writes.
    let rma_len = endpoint.mtu() + 1;
    let mut region = None;
    if cfg.rma {
        match rma_pool.alloc().map(|b| {
            endpoint.register_mr(b, MrAccess::REMOTE_READ_WRITE, rma_key(cfg.job_id, rank))
        }) {
            Some(Ok(mr)) => region = Some(mr),
            Some(Err(e)) => errors.push(format!("fi_mr_reg: {e}")),
            None => errors.push("RMA pool exhausted".to_string()),
        }
    }

    // Master-collect: every rank's address to rank 0, the full list back.
    let mut name = [0u8; 64];
    let mut len = name.len();
    match endpoint.getname(&mut name, &mut len) {
        Ok(()) => {
            let _ = to_master.send((rank, name[..len].to_vec()));
        }
        Err(e) => errors.push(format!("fi_getname: {e}")),
    }
    drop(to_master);
    if let Some((collect, broadcast)) = master {
        let slots = collect_addresses(&collect, n, PROGRESS_TIMEOUT);
        let missing: Vec<usize> = (0..n).filter(|&r| slots[r].is_none()).collect();
        if !missing.is_empty() {
            errors.push(format!("rank 0 never heard from ranks {missing:?}"));
        }
        let list: Vec<u8> = slots.into_iter().flatten().flatten().collect();
        let list = Arc::new(list);
        for tx in &broadcast {
            let _ = tx.send(list.clone());
        }
    }
    // Rank 0 sends the list once its collection ends, which takes as long as the ranks keep
    // coming, or drops its senders (it failed, or its thread is gone): no wait of a fixed
    // length, which a large job's collection may outlast.
    let list = inbox
        .recv()
        .map_err(|_| "no address list from rank 0".to_string());
    let mut fi_addrs: Vec<FiAddr> = vec![0; n];
    match list {
        Ok(list) if list.len() == n * uet_driver::uet_fwif::address::ADDRESS_BYTES => {
            match av.insert(&list, n, Some(&mut fi_addrs), 0) {
                Ok(k) if k == n => {
                    for (r, &a) in fi_addrs.iter().enumerate() {
                        if a != r as FiAddr {
                            errors.push(format!("rank {r} inserted at fi_addr {a}"));
                        }
                    }
                }
                Ok(k) => errors.push(format!("fi_av_insert inserted {k} of {n}")),
                Err(e) => errors.push(format!("fi_av_insert: {e}")),
            }
        }
        Ok(list) => errors.push(format!(
            "address list of {} bytes for {n} ranks",
            list.len()
        )),
        Err(e) => errors.push(e),
    }
    barrier.wait();

    let mut t = Traffic::new(cfg, rank, left);
    if errors.is_empty() {
        for seq in 0..cfg.messages {
            let Some(mut buf) = pool.alloc() else {
                errors.push("send buffer pool exhausted".to_string());
                break;
            };
            if let Err(e) = buf.fill(&payload(cfg.job_id, rank, right, seq)) {
                errors.push(e.to_string());
                break;
            }
            let data = (rank as u64) << 32 | u64::from(seq);
            if let Err(e) = t.post_with_room(&mut endpoint, buf, "fi_send", |ep, b| {
                ep.post_send(right as FiAddr, b, u64::from(seq), data)
            }) {
                errors.push(e);
                break;
            }
        }
        for seq in 0..cfg.tagged {
            let Some(mut buf) = pool.alloc() else {
                errors.push("send buffer pool exhausted".to_string());
                break;
            };
            if let Err(e) = buf.fill(&tagged_payload(cfg.job_id, rank, right, seq)) {
                errors.push(e.to_string());
                break;
            }
            let data = (rank as u64) << 32 | u64::from(seq);
            let tag = demo_tag(rank, seq);
            if let Err(e) = t.post_with_room(&mut endpoint, buf, "fi_tsend", |ep, b| {
                ep.post_tsend(right as FiAddr, b, tag, u64::from(seq), data)
            }) {
                errors.push(e);
                break;
            }
        }
        // Every send answered, every untagged message and every early tagged one in.
        t.pump(&mut endpoint, &mut errors, |t| {
            t.sends_done == cfg.messages
                && t.received == cfg.messages
                && t.tagged_sends_done == cfg.tagged
                && t.tagged_received == early
        });
    }
    // Every rank's tagged messages have been answered: the late ones wait unexpected.
    barrier.wait();
    if errors.is_empty() {
        post_trecvs(&mut endpoint, &pool, left, early..cfg.tagged, &mut errors);
        t.pump(&mut endpoint, &mut errors, |t| {
            t.tagged_received == cfg.tagged
        });
        match endpoint.counters() {
            Ok(c) => {
                t.unexpected = c.rx_unexpected;
                if c.rx_unexpected != u64::from(cfg.tagged - early) {
                    errors.push(format!(
                        "{} tagged messages waited unexpected, expected {}",
                        c.rx_unexpected,
                        cfg.tagged - early
                    ));
                }
            }
            Err(e) => errors.push(format!("COUNTERS_READ: {e}")),
        }
        if cfg.rma {
            t.rma_write(&mut endpoint, &rma_pool, right, rma_len, &mut errors);
        }
    }
    // Every write has landed.
    barrier.wait();
    if errors.is_empty() && cfg.rma {
        if let Some(mr) = &region {
            match mr.to_vec() {
                Ok(v)
                    if v.get(..rma_len)
                        == Some(&rma_pattern(cfg.job_id, left, rank, rma_len)[..]) =>
                {
                    t.rma_write_verified = true;
                }
                Ok(_) => errors.push(format!("RMA write from rank {left}: region corrupted")),
                Err(e) => errors.push(format!("reading the region: {e}")),
            }
        }
        t.rma_read(&mut endpoint, &rma_pool, right, rma_len, &mut errors);
    }
    errors.append(&mut t.errors);
    // Reads of this rank's region are over before it may go away.
    barrier.wait();
    let address = *endpoint.address();
    let report = RankReport {
        rank,
        fabric_addr: nic.fabric_addr(),
        pid_on_fep: address.pid_on_fep,
        resource_indices: endpoint.resource_indices(),
        initiator: address.initiator,
        av_size: av.len(),
        sent: t.sent,
        received: t.seen.iter().filter(|&&s| s).count() as u32,
        tagged_sent: t.tagged_sent,
        tagged_received: t.tagged_seen.iter().filter(|&&s| s).count() as u32,
        tagged_unexpected: t.unexpected,
        rma_bytes: if cfg.rma { rma_len } else { 0 },
        rma_write_verified: t.rma_write_verified,
        rma_read_verified: t.rma_read_verified,
        errors,
    };
    Ok(Rank {
        nic,
        av,
        endpoint,
        region,
        report,
    })
}

/// Rank 0's side of master-collect: the address each of `n` ranks sent on `collect`, by rank
/// (`None` for a rank that sent none). Every rank sends its address or drops its sender once
/// set up, and a large job's ranks finish setting up one after another, all of them later
/// than any fixed time after the first on a busy machine: the wait goes on while addresses
/// keep coming, and gives up when none has come for `quiet`, or every sender is gone.
fn collect_addresses(
    collect: &mpsc::Receiver<(usize, Vec<u8>)>,
    n: usize,
    quiet: Duration,
) -> Vec<Option<Vec<u8>>> {
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; n];
    let mut missing = n;
    while missing > 0 {
        match collect.recv_timeout(quiet) {
            Ok((r, a)) => {
                if let Some(slot) = slots.get_mut(r) {
                    if slot.replace(a).is_none() {
                        missing -= 1;
                    }
                }
            }
            Err(_) => break,
        }
    }
    slots
}

fn post_trecvs(
    endpoint: &mut Endpoint,
    pool: &DmaPool,
    left: usize,
    seqs: Range<u32>,
    errors: &mut Vec<String>,
) {
    for seq in seqs {
        let Some(buf) = pool.alloc() else {
            errors.push("tagged receive buffer pool exhausted".to_string());
            return;
        };
        if let Err((e, _)) = endpoint.post_trecv(buf, demo_tag(left, seq), 0, u64::from(seq)) {
            errors.push(format!("fi_trecv: {e}"));
            return;
        }
    }
}

/// What a rank has seen of its traffic so far.
struct Traffic {
    cfg: RankConfig,
    rank: usize,
    left: usize,
    sends_done: u32,
    sent: u32,
    received: u32,
    seen: Vec<bool>,
    tagged_sends_done: u32,
    tagged_sent: u32,
    tagged_received: u32,
    tagged_seen: Vec<bool>,
    unexpected: u64,
    rma: Option<CqEvent>,
    rma_write_verified: bool,
    rma_read_verified: bool,
    errors: Vec<String>,
}

impl Traffic {
    fn new(cfg: RankConfig, rank: usize, left: usize) -> Self {
        Traffic {
            cfg,
            rank,
            left,
            sends_done: 0,
            sent: 0,
            received: 0,
            seen: vec![false; cfg.messages as usize],
            tagged_sends_done: 0,
            tagged_sent: 0,
            tagged_received: 0,
            tagged_seen: vec![false; cfg.tagged as usize],
            unexpected: 0,
            rma: None,
            rma_write_verified: false,
            rma_read_verified: false,
            errors: Vec::new(),
        }
    }

    /// Post `buf` with `post` (`what` names the call in errors). While the TX ring is full
    /// (`FI_EAGAIN`), completions are read to make room and the post tried again, as
    /// fi_send(3) asks: the job's sends outnumber the ring's entries. A ring that stays full
    /// for [`PROGRESS_TIMEOUT`] without a completion is an error.
    fn post_with_room(
        &mut self,
        ep: &mut Endpoint,
        mut buf: DmaBuffer,
        what: &str,
        post: impl Fn(&mut Endpoint, DmaBuffer) -> Result<(), (DriverError, DmaBuffer)>,
    ) -> Result<(), String> {
        let mut last_progress = Instant::now();
        loop {
            match post(ep, buf) {
                Ok(()) => return Ok(()),
                Err((e, back))
                    if e.errno() == FiErrno::FI_EAGAIN
                        && last_progress.elapsed() <= PROGRESS_TIMEOUT =>
                {
                    buf = back;
                    match ep.poll() {
                        Ok(Some(ev)) => {
                            last_progress = Instant::now();
                            self.event(ev);
                        }
                        Ok(None) => std::thread::yield_now(),
                        Err(e) => return Err(format!("fi_cq_read: {e}")),
                    }
                }
                Err((e, _)) => return Err(format!("{what}: {e}")),
            }
        }
    }

    /// Poll completions until `done` holds, an error stops the job, or nothing moves for
    /// [`PROGRESS_TIMEOUT`].
    fn pump(&mut self, ep: &mut Endpoint, errors: &mut Vec<String>, done: impl Fn(&Self) -> bool) {
        let mut last_progress = Instant::now();
        while !done(self) && self.errors.len() < 16 {
            match ep.poll() {
                Ok(Some(ev)) => {
                    last_progress = Instant::now();
                    self.event(ev);
                }
                Ok(None) => {
                    if last_progress.elapsed() > PROGRESS_TIMEOUT {
                        errors.push(format!(
                            "lost: {}/{} sends, {}/{} receives, {}/{} tagged sends, {}/{} \
                             tagged receives completed",
                            self.sends_done,
                            self.cfg.messages,
                            self.received,
                            self.cfg.messages,
                            self.tagged_sends_done,
                            self.cfg.tagged,
                            self.tagged_received,
                            self.cfg.tagged
                        ));
                        return;
                    }
                    std::thread::yield_now();
                }
                Err(e) => {
                    errors.push(format!("fi_cq_read: {e}"));
                    return;
                }
            }
        }
    }

    fn event(&mut self, ev: CqEvent) {
        match (ev.op, ev.error) {
            (CqOp::Send, None) => {
                self.sends_done += 1;
                self.sent += 1;
            }
            (CqOp::TaggedSend, None) => {
                self.tagged_sends_done += 1;
                self.tagged_sent += 1;
            }
            (CqOp::Send, Some(e)) => {
                self.sends_done += 1;
                self.errors.push(format!("send {} failed: {e}", ev.context));
            }
            (CqOp::TaggedSend, Some(e)) => {
                self.tagged_sends_done += 1;
                self.errors
                    .push(format!("tagged send {} failed: {e}", ev.context));
            }
            (CqOp::Write | CqOp::Read, _) => self.rma = Some(ev),
            (CqOp::Recv, Some(e)) => {
                self.received += 1;
                self.errors
                    .push(format!("receive {} failed: {e}", ev.context));
            }
            (CqOp::TaggedRecv, Some(e)) => {
                self.tagged_received += 1;
                self.errors
                    .push(format!("tagged receive {} failed: {e}", ev.context));
            }
            (CqOp::Recv, None) => {
                self.received += 1;
                let (seq, check) = self.check_message(&ev, false);
                match check {
                    Err(e) => self.errors.push(e),
                    Ok(()) if std::mem::replace(&mut self.seen[seq as usize], true) => {
                        self.errors.push(format!("message {seq} delivered twice"));
                    }
                    Ok(()) => {}
                }
            }
            (CqOp::TaggedRecv, None) => {
                self.tagged_received += 1;
                let (seq, check) = self.check_message(&ev, true);
                match check {
                    Err(e) => self.errors.push(e),
                    Ok(()) if std::mem::replace(&mut self.tagged_seen[seq as usize], true) => {
                        self.errors
                            .push(format!("tagged message {seq} delivered twice"));
                    }
                    Ok(()) => {}
                }
            }
        }
    }

    /// The sequence number a received message claims, and whether everything about it says
    /// "left neighbour, that message".
    fn check_message(&self, ev: &CqEvent, tagged: bool) -> (u32, Result<(), String>) {
        let job = self.cfg.job_id;
        let (left, rank) = (self.left, self.rank);
        let data = ev
            .buffer
            .as_ref()
            .and_then(|b| b.to_vec().ok())
            .unwrap_or_default();
        let seq = (ev.data & 0xFFFF_FFFF) as u32;
        let from = (ev.data >> 32) as usize;
        let limit = if tagged {
            self.cfg.tagged
        } else {
            self.cfg.messages
        };
        let kind = if tagged { "tagged message" } else { "message" };
        let expected = if tagged {
            tagged_payload(job, left, rank, seq)
        } else {
            payload(job, left, rank, seq)
        };
        let r = if from != left || seq >= limit {
            Err(format!("misrouted: CQ data says rank {from} {kind} {seq}"))
        } else if ev.src_addr != left as FiAddr {
            Err(format!(
                "{kind} {seq}: source fi_addr {} is not rank {left}",
                ev.src_addr as i64
            ))
        } else if tagged && ev.tag != demo_tag(left, seq) {
            Err(format!(
                "{kind} {seq}: tag {:#x} is not {:#x}",
                ev.tag,
                demo_tag(left, seq)
            ))
        } else if data != expected {
            Err(format!("{kind} {seq}: payload corrupted"))
        } else {
            Ok(())
        };
        (seq, r)
    }

    /// Wait for the completion of the RMA operation just posted.
    fn rma_wait(&mut self, ep: &mut Endpoint, errors: &mut Vec<String>) -> Option<CqEvent> {
        self.rma = None;
        self.pump(ep, errors, |t| t.rma.is_some());
        self.rma.take()
    }

    fn rma_write(
        &mut self,
        ep: &mut Endpoint,
        pool: &DmaPool,
        right: usize,
        len: usize,
        errors: &mut Vec<String>,
    ) {
        let job = self.cfg.job_id;
        let Some(mut buf) = pool.alloc() else {
            return errors.push("RMA pool exhausted".to_string());
        };
        if let Err(e) = buf.fill(&rma_pattern(job, self.rank, right, len)) {
            return errors.push(e.to_string());
        }
        let key = rma_key(job, right);
        if let Err((e, _)) = ep.post_write(right as FiAddr, buf, 0, key, 1) {
            return errors.push(format!("fi_write: {e}"));
        }
        match self.rma_wait(ep, errors) {
            Some(ev) if ev.error.is_none() && ev.op == CqOp::Write => {}
            Some(ev) => errors.push(format!("fi_write to rank {right} failed: {:?}", ev.error)),
            None => errors.push("fi_write never completed".to_string()),
        }
    }

    fn rma_read(
        &mut self,
        ep: &mut Endpoint,
        pool: &DmaPool,
        right: usize,
        len: usize,
        errors: &mut Vec<String>,
    ) {
        let job = self.cfg.job_id;
        let Some(buf) = pool.alloc() else {
            return errors.push("RMA pool exhausted".to_string());
        };
        let key = rma_key(job, right);
        if let Err((e, _)) = ep.post_read(right as FiAddr, buf, len, 0, key, 2) {
            return errors.push(format!("fi_read: {e}"));
        }
        match self.rma_wait(ep, errors) {
            Some(ev) if ev.error.is_none() && ev.op == CqOp::Read => {
                let got = ev.buffer.as_ref().and_then(|b| b.to_vec().ok());
                if got.as_deref() == Some(&rma_pattern(job, self.rank, right, len)[..]) {
                    self.rma_read_verified = true;
                } else {
                    errors.push(format!("fi_read from rank {right}: data differs"));
                }
            }
            Some(ev) => errors.push(format!("fi_read from rank {right} failed: {:?}", ev.error)),
            None => errors.push("fi_read never completed".to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks that finish setting up one after another, each soon after the last but all of
    /// them later than `quiet` after the first (a large job on a busy machine), are all
    /// heard from: the wait gives up only when no address comes for `quiet`, or every rank
    /// has sent its address or gone.
    #[test]
    fn rank_0_hears_from_every_rank_that_keeps_coming() {
        let quiet = Duration::from_secs(1);
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || {
            for r in 0..6 {
                std::thread::sleep(Duration::from_millis(300));
                let _ = tx.send((r, vec![r as u8]));
            }
        });
        let slots = collect_addresses(&rx, 6, quiet);
        let _ = sender.join();
        let heard: Vec<usize> = (0..6).filter(|&r| slots[r].is_some()).collect();
        assert_eq!(heard, (0..6).collect::<Vec<_>>());
        assert_eq!(slots[5], Some(vec![5]));
        // A rank that goes without a word (its sender dropped) is not waited for, and one
        // that never answers is given up on after `quiet`.
        let (tx, rx) = mpsc::channel::<(usize, Vec<u8>)>();
        let _ = tx.send((0, vec![0]));
        drop(tx);
        let t = Instant::now();
        assert_eq!(collect_addresses(&rx, 2, quiet), vec![Some(vec![0]), None]);
        assert!(t.elapsed() < quiet, "{:?}", t.elapsed());
        let (tx, rx) = mpsc::channel::<(usize, Vec<u8>)>();
        let _ = tx.send((1, vec![1]));
        let t = Instant::now();
        assert_eq!(collect_addresses(&rx, 2, quiet), vec![None, Some(vec![1])]);
        assert!(t.elapsed() >= quiet, "{:?}", t.elapsed());
        drop(tx);
    }
}
