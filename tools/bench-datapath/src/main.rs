//! `bench-datapath`: the cost of a message, a tagged message, an RMA write and an RMA read,
//! from 8 bytes to 1 MiB, between two NICs of the in-process simulator.
//!
//! One operation is posted at a time and driven to its completion (and, for messages, to the
//! receive completion at the target), so `lat_ns` is the full cost of one operation through
//! driver, NIC model and fabric, and `msgs_per_s` its reciprocal. Each line:
//!
//! `bench=datapath op=<send|tsend|write|read> size=<bytes> msgs_per_s=<x> lat_ns=<y> gbps=<z>`
//!
//! `--callgrind-sends N` instead posts N 8-byte sends and nothing else after setup, for
//! `tools/callgrind-send`, which counts the instructions the driver spends per send.

use clap::Parser;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;
use uet_av::AvAttr;
use uet_driver::backend::sim::SimDevice;
use uet_driver::mr::{MemoryRegion, MrAccess};
use uet_driver::{Av, DmaBuffer, DmaPool, Endpoint, EndpointAttr, Nic};
use uet_sim::{Fabric, NicConfig};

#[derive(Parser)]
#[command(
    name = "bench-datapath",
    about = "Benchmark the uet-nic datapath on the simulator"
)]
struct Args {
    /// Operations, comma-separated: send, tsend, write, read.
    #[arg(long, value_delimiter = ',', default_values_t = ["send".to_string(), "tsend".to_string(), "write".to_string(), "read".to_string()])]
    ops: Vec<String>,
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 64, 512, 4096, 65536, 1 << 20])]
    sizes: Vec<usize>,
    /// Bytes to move per measurement (bounds the iteration count; at least 200 operations).
    #[arg(long, default_value_t = 256 << 20)]
    volume: usize,
    /// Only post this many 8-byte sends (for instruction counting under callgrind).
    #[arg(long)]
    callgrind_sends: Option<u32>,
}

const MAX_SIZE: usize = 1 << 20;
const TAG: u64 = 0x7a6;
const KEY: u64 = 0xbeef_0001;

struct Side {
    // Field order: the endpoint and region go before the NIC they live on.
    mr: Option<MemoryRegion>,
    ep: Endpoint,
    av: Av,
    pool: DmaPool,
    _nic: Nic,
}

fn side(fabric: &Fabric, ip: Ipv4Addr) -> Result<Side, String> {
    let f = fabric
        .add_nic(NicConfig::new(IpAddr::V4(ip)))
        .map_err(|e| e.to_string())?;
    let nic = Nic::open(Arc::new(SimDevice::new(f))).map_err(|e| e.to_string())?;
    let av = nic
        .open_av(AvAttr {
            count: 16,
            job_id: 9,
            ..AvAttr::default()
        })
        .map_err(|e| e.to_string())?;
    let ep = nic
        .endpoint(
            EndpointAttr {
                job_id: 9,
                ..EndpointAttr::default()
            },
            Some(&av),
        )
        .map_err(|e| e.to_string())?;
    let pool = DmaPool::new(&nic, MAX_SIZE, 8).map_err(|e| e.to_string())?;
    Ok(Side {
        mr: None,
        ep,
        av,
        pool,
        _nic: nic,
    })
}

struct Pair {
    a: Side,
    b: Side,
    peer: u64,
}

fn pair() -> Result<Pair, String> {
    let fabric = Fabric::new();
    let a = side(&fabric, Ipv4Addr::new(10, 200, 0, 1))?;
    let mut b = side(&fabric, Ipv4Addr::new(10, 200, 0, 2))?;
    let target = b.pool.alloc().ok_or("pool empty")?;
    b.mr = Some(
        b.ep.register_mr(target, MrAccess::REMOTE_READ_WRITE, KEY)
            .map_err(|e| e.to_string())?,
    );
    let addr = b.ep.address().to_bytes().map_err(|e| e.to_string())?;
    let mut a = a;
    let mut out = [0u64; 1];
    a.av.insert(&addr, 1, Some(&mut out), 0)
        .map_err(|e| e.to_string())?;
    Ok(Pair { a, b, peer: out[0] })
}

fn wait(ep: &mut Endpoint) -> Result<uet_driver::CqEvent, String> {
    for _ in 0..1_000_000 {
        if let Some(ev) = ep.poll().map_err(|e| e.to_string())? {
            if let Some(err) = ev.error {
                return Err(format!("completion failed: {err}"));
            }
            return Ok(ev);
        }
    }
    Err("no completion".into())
}

fn filled(pool: &DmaPool, size: usize) -> Result<DmaBuffer, String> {
    let mut b = pool.alloc().ok_or("pool empty")?;
    b.fill(&vec![0xa5; size]).map_err(|e| e.to_string())?;
    Ok(b)
}

/// One operation of `op` and its completions; returns the buffers for the next round.
fn one(p: &mut Pair, op: &str, size: usize, src: DmaBuffer) -> Result<DmaBuffer, String> {
    let back = |(e, _): (uet_driver::DriverError, DmaBuffer)| e.to_string();
    match op {
        "send" | "tsend" => {
            let rx = p.b.pool.alloc().ok_or("pool empty")?;
            if op == "send" {
                p.b.ep.post_recv(rx, 1).map_err(back)?;
                p.a.ep.post_send(p.peer, src, 1, 0).map_err(back)?;
            } else {
                p.b.ep.post_trecv(rx, TAG, 0, 1).map_err(back)?;
                p.a.ep.post_tsend(p.peer, src, TAG, 1, 0).map_err(back)?;
            }
            let done = wait(&mut p.a.ep)?;
            let got = wait(&mut p.b.ep)?;
            if got.len != size {
                return Err(format!("received {} of {size} bytes", got.len));
            }
            done.buffer
                .ok_or_else(|| "send buffer not returned".to_string())
        }
        "write" => {
            p.a.ep.post_write(p.peer, src, 0, KEY, 1).map_err(back)?;
            let done = wait(&mut p.a.ep)?;
            done.buffer
                .ok_or_else(|| "write buffer not returned".to_string())
        }
        "read" => {
            p.a.ep
                .post_read(p.peer, src, size, 0, KEY, 1)
                .map_err(back)?;
            let done = wait(&mut p.a.ep)?;
            if done.len != size {
                return Err(format!("read {} of {size} bytes", done.len));
            }
            done.buffer
                .ok_or_else(|| "read buffer not returned".to_string())
        }
        other => Err(format!("unknown op {other}")),
    }
}

fn run(args: &Args) -> Result<(), String> {
    let mut p = pair()?;
    if let Some(n) = args.callgrind_sends {
        let mut buf = filled(&p.a.pool, 8)?;
        for _ in 0..n {
            buf = one(&mut p, "send", 8, buf)?;
        }
        return Ok(());
    }
    for op in &args.ops {
        for &size in &args.sizes {
            if size == 0 || size > MAX_SIZE {
                return Err(format!("size {size} outside 1..={MAX_SIZE}"));
            }
            let iters = (args.volume / size).clamp(200, 20_000);
            let mut buf = filled(&p.a.pool, size)?;
            // Warm up, then measure.
            for _ in 0..20 {
                buf = one(&mut p, op, size, buf)?;
            }
            let t = Instant::now();
            for _ in 0..iters {
                buf = one(&mut p, op, size, buf)?;
            }
            let secs = t.elapsed().as_secs_f64();
            let rate = iters as f64 / secs;
            println!(
                "bench=datapath op={op} size={size} msgs_per_s={rate:.0} lat_ns={:.0} gbps={:.3}",
                secs * 1e9 / iters as f64,
                rate * size as f64 * 8.0 / 1e9
            );
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run(&Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-datapath: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
