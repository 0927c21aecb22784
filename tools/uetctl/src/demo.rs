//! The demo job: N ranks, each with its own simulated NIC on one fabric.
//!
//! Every rank runs in its own thread, as a process of a job would:
//!
//! 1. open its NIC (`Nic::open`), an AV table and an endpoint bound to it;
//! 2. post its receive buffers;
//! 3. send its UET address to rank 0 over the bootstrap channel (the out-of-band control
//!    channel a launcher provides); rank 0 collects every address and broadcasts the list in
//!    rank order — the master-collect pattern;
//! 4. insert the whole list into its AV with one `fi_av_insert`, so `fi_addr_t` k is rank k;
//! 5. send `messages` messages to its right neighbour, naming it only by `fi_addr_t`;
//! 6. check every message that arrives: payload, CQ data, and the source `fi_addr_t` the NIC
//!    reverse-translated must all say "left neighbour", each sequence number exactly once.
//!
//! With [`DemoConfig::pcap`] set, the fabric writes every frame to a pcap file from before the
//! first rank starts until the last one has finished.

use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use uet_av::{AvAttr, FiAddr};
use uet_driver::backend::sim::SimDevice;
use uet_driver::uet_fwif::datapath::CompletionKind;
use uet_driver::{Av, DmaPool, Endpoint, EndpointAttr, Nic};
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
    /// Write every frame that crosses the fabric to this pcap file.
    pub pcap: Option<PathBuf>,
}

impl Default for DemoConfig {
    /// What `uetctl demo` runs without options.
    fn default() -> Self {
        DemoConfig {
            ranks: 4,
            messages: 8,
            job_id: 0x00_1234,
            pcap: None,
        }
    }
}

/// The part of the configuration every rank thread needs.
#[derive(Clone, Copy, Debug)]
struct RankConfig {
    ranks: usize,
    messages: u32,
    job_id: u32,
}

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
    /// What it did.
    pub report: RankReport,
}

/// The job after it ran.
pub struct DemoOutcome {
    /// The simulated fabric.
    pub fabric: Fabric,
    /// Every rank, in rank order.
    pub ranks: Vec<Rank>,
    /// The packet capture, when one was asked for (stopped: the file is complete).
    pub capture: Option<CaptureStatus>,
}

impl DemoOutcome {
    /// Whether every message arrived where it should and nothing failed.
    pub fn ok(&self, cfg: &DemoConfig) -> bool {
        self.ranks.iter().all(|r| {
            r.report.errors.is_empty()
                && r.report.sent == cfg.messages
                && r.report.received == cfg.messages
        })
    }
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
    if cfg.job_id > uet_driver::uet_fwif::av_entry::MAX_JOB_ID {
        return Err(DemoError::Config(format!(
            "--job-id {:#x} is wider than 24 bits",
            cfg.job_id
        )));
    }
    let fabric = Fabric::new();
    let mut functions = Vec::with_capacity(cfg.ranks);
    for r in 0..cfg.ranks {
        let f = fabric
            .add_nic(NicConfig::new(rank_fabric_addr(r)))
            .map_err(|e| DemoError::Fabric(e.to_string()))?;
        functions.push(f);
    }

    if let Some(path) = &cfg.pcap {
        fabric
            .capture_to_file(path)
            .map_err(|e| DemoError::Capture(e.to_string()))?;
    }
    let rank_cfg = RankConfig {
        ranks: cfg.ranks,
        messages: cfg.messages,
        job_id: cfg.job_id,
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
    for (rank, (function, inbox)) in functions.into_iter().zip(rank_rx).enumerate() {
        let to_master = to_master.clone();
        let barrier = barrier.clone();
        let master = if rank == 0 {
            master_rx.take().zip(from_master.take())
        } else {
            None
        };
        handles.push(std::thread::spawn(move || {
            run_rank(rank_cfg, rank, function, to_master, inbox, master, &barrier)
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
    let capture = cfg.pcap.as_ref().map(|_| {
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

type Master = (
    mpsc::Receiver<(usize, Vec<u8>)>,
    Vec<mpsc::Sender<Arc<Vec<u8>>>>,
);

fn run_rank(
    cfg: RankConfig,
    rank: usize,
    function: uet_sim::SimFunction,
    to_master: mpsc::Sender<(usize, Vec<u8>)>,
    inbox: mpsc::Receiver<Arc<Vec<u8>>>,
    master: Option<Master>,
    barrier: &Barrier,
) -> Result<Rank, String> {
    let n = cfg.ranks;
    // A rank that fails still takes part in every barrier, so the others never hang.
    let setup = (|| -> Result<_, String> {
        let nic = Nic::open(Arc::new(SimDevice::new(function))).map_err(|e| e.to_string())?;
        let av = nic
            .open_av(AvAttr {
                count: n,
                job_id: cfg.job_id,
                ..AvAttr::default()
            })
            .map_err(|e| e.to_string())?;
        let endpoint = nic
            .endpoint(
                EndpointAttr {
                    job_id: cfg.job_id,
                    ..EndpointAttr::default()
                },
                Some(&av),
            )
            .map_err(|e| e.to_string())?;
        // Demo payloads are short: one packet each.
        let pool =
            DmaPool::new(&nic, endpoint.mtu(), 2 * cfg.messages + 8).map_err(|e| e.to_string())?;
        Ok((nic, av, endpoint, pool))
    })();
    let (nic, mut av, mut endpoint, pool) = match setup {
        Ok(s) => s,
        Err(e) => {
            drop(to_master);
            if let Some((_, broadcast)) = master {
                // The master failed: tell every rank there is no list rather than let them wait.
                drop(broadcast);
            }
            barrier.wait();
            barrier.wait();
            return Err(e);
        }
    };
    let mut errors = Vec::new();

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
        let mut slots: Vec<Option<Vec<u8>>> = vec![None; n];
        let deadline = Instant::now() + PROGRESS_TIMEOUT;
        while slots.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            match collect.recv_timeout(left) {
                Ok((r, a)) if r < n => slots[r] = Some(a),
                Ok(_) => {}
                Err(_) => break,
            }
        }
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
    let list = inbox
        .recv_timeout(PROGRESS_TIMEOUT)
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

    let right = (rank + 1) % n;
    let left = (rank + n - 1) % n;
    let mut sent = 0;
    let mut received = 0;
    let mut seen = vec![false; cfg.messages as usize];
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
            if let Err((e, _)) = endpoint.post_send(right as FiAddr, buf, u64::from(seq), data) {
                errors.push(format!("fi_send: {e}"));
                break;
            }
        }
        let mut sends_done = 0;
        let mut last_progress = Instant::now();
        while sends_done + received < 2 * cfg.messages && errors.len() < 16 {
            match endpoint.poll() {
                Ok(Some(ev)) => {
                    last_progress = Instant::now();
                    match (ev.kind, ev.error) {
                        (CompletionKind::Send, None) => {
                            sends_done += 1;
                            sent += 1;
                        }
                        (CompletionKind::Send, Some(e)) => {
                            sends_done += 1;
                            errors.push(format!("send {} failed: {e}", ev.context));
                        }
                        (CompletionKind::Recv, Some(e)) => {
                            received += 1;
                            errors.push(format!("receive {} failed: {e}", ev.context));
                        }
                        (CompletionKind::Recv, None) => {
                            let data = ev
                                .buffer
                                .as_ref()
                                .and_then(|b| b.to_vec().ok())
                                .unwrap_or_default();
                            let seq = (ev.data & 0xFFFF_FFFF) as u32;
                            let from = (ev.data >> 32) as usize;
                            if from != left || seq >= cfg.messages {
                                errors.push(format!(
                                    "misrouted: CQ data says rank {from} message {seq}"
                                ));
                            } else if ev.src_addr != left as FiAddr {
                                errors.push(format!(
                                    "message {seq}: source fi_addr {} is not rank {left}",
                                    ev.src_addr as i64
                                ));
                            } else if data != payload(cfg.job_id, left, rank, seq) {
                                errors.push(format!("message {seq}: payload corrupted"));
                            } else if std::mem::replace(&mut seen[seq as usize], true) {
                                errors.push(format!("message {seq} delivered twice"));
                            } else {
                                received += 1;
                                continue;
                            }
                            received += 1;
                        }
                    }
                }
                Ok(None) => {
                    if last_progress.elapsed() > PROGRESS_TIMEOUT {
                        errors.push(format!(
                            "lost: {} sends and {} receives never completed",
                            cfg.messages - sends_done,
                            cfg.messages - received
                        ));
                        break;
                    }
                    std::thread::yield_now();
                }
                Err(e) => {
                    errors.push(format!("fi_cq_read: {e}"));
                    break;
                }
            }
        }
        // `received` counted failures too; report only verified deliveries.
        received = seen.iter().filter(|&&s| s).count() as u32;
    }
    barrier.wait();
    let address = *endpoint.address();
    let report = RankReport {
        rank,
        fabric_addr: nic.fabric_addr(),
        pid_on_fep: address.pid_on_fep,
        resource_indices: endpoint.resource_indices(),
        initiator: address.initiator,
        av_size: av.len(),
        sent,
        received,
        errors,
    };
    Ok(Rank {
        nic,
        av,
        endpoint,
        report,
    })
}
