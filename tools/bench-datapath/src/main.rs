//! `bench-datapath`: the cost of a message, a tagged message, an RMA write and an RMA read,
//! from 8 bytes to 1 MiB, between two NICs of the in-process simulator.
//!
//! One operation is posted at a time and driven to its completion (and, for messages, to the
//! receive completion at the target), so `lat_ns` is the full cost of one operation through
//! driver, NIC model and fabric, and `msgs_per_s` its reciprocal. Each line:
//!
//! `bench=datapath op=<send|tsend|write|read> size=<bytes> msgs_per_s=<x> lat_ns=<y> gbps=<z>`
//!
//! `--ops wake` measures what a completion interrupt costs instead: a ping-pong of
//! `size`-byte messages between two threads, each asleep in `Endpoint::cq_sread` until its
//! message lands (the NIC raises the endpoint's MSI-X vector, an eventfd wakes the thread),
//! then sending the next. `lat_ns` is half a round trip: one message, its completion, the
//! interrupt and the wakeup; `op=wake_poll` is the same ping-pong with each thread reading
//! its ring without sleeping, so the difference is the price of sleeping.
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
    /// Operations, comma-separated: send, tsend, write, read, wake (a ping-pong between two
    /// threads asleep in cq_sread, and the same reading their rings: wake and wake_poll).
    #[arg(long, value_delimiter = ',', default_values_t = ["send".to_string(), "tsend".to_string(), "write".to_string(), "read".to_string()])]
    ops: Vec<String>,
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 64, 512, 4096, 65536, 1 << 20])]
    sizes: Vec<usize>,
    /// Bytes to move per measurement (bounds the iteration count; at least 200 operations).
    #[arg(long, default_value_t = 256 << 20)]
    volume: usize,
    /// Only post this many 8-byte sends (for instruction counting under callgrind): no
    /// measurement, so --ops, --sizes and --volume are refused beside it.
    #[arg(long, value_name = "N", conflicts_with_all = ["ops", "sizes", "volume"])]
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

/// One side of the ping-pong: `rounds` times, wait for the peer's message (asleep in
/// `cq_sread`, or reading the ring), then send one; the side that `starts` sends first. A
/// receive is always posted before the message it takes can be sent: one before the
/// threads start, the next before each send.
fn ping_pong(
    side: &mut Side,
    peer: u64,
    size: usize,
    rounds: u32,
    starts: bool,
    sleep: bool,
) -> Result<(), String> {
    const SEND: u64 = 1;
    const RECV: u64 = 2;
    let back = |(e, _): (uet_driver::DriverError, DmaBuffer)| e.to_string();
    let mut tx = Some(filled(&side.pool, size)?);
    // Completions of sends and receives come in any order: wait for the one wanted, keep
    // the others' effect (the send buffer back, a message early) for later.
    let mut received = 0u32;
    let mut next = |ep: &mut Endpoint,
                    tx: &mut Option<DmaBuffer>,
                    want: u64|
     -> Result<(), String> {
        loop {
            let ev = if sleep {
                ep.cq_sread(Some(std::time::Duration::from_secs(10)))
                    .map_err(|e| format!("cq_sread: {e}"))?
            } else {
                wait(ep)?
            };
            if let Some(err) = ev.error {
                return Err(format!("completion failed: {err}"));
            }
            match ev.context {
                SEND => *tx = ev.buffer,
                _ if ev.len != size => return Err(format!("received {} of {size} bytes", ev.len)),
                _ => received += 1,
            }
            let done = match want {
                SEND => tx.is_some(),
                _ => received > 0,
            };
            if done {
                if want == RECV {
                    received -= 1;
                }
                return Ok(());
            }
        }
    };
    for round in 0..rounds {
        if !(starts && round == 0) {
            next(&mut side.ep, &mut tx, RECV)?;
        }
        let rx = side.pool.alloc().ok_or("pool empty")?;
        side.ep.post_recv(rx, RECV).map_err(back)?;
        if tx.is_none() {
            next(&mut side.ep, &mut tx, SEND)?;
        }
        let buf = tx.take().ok_or("send buffer not returned")?;
        side.ep.post_send(peer, buf, SEND, 0).map_err(back)?;
    }
    if starts {
        next(&mut side.ep, &mut tx, RECV)?;
    }
    Ok(())
}

/// Half the round trip of a ping-pong between two threads (see the module docs).
fn wake(size: usize, rounds: u32, sleep: bool) -> Result<f64, String> {
    let Pair { mut a, mut b, peer } = pair()?;
    let addr = a.ep.address().to_bytes().map_err(|e| e.to_string())?;
    let mut out = [0u64; 1];
    b.av.insert(&addr, 1, Some(&mut out), 0)
        .map_err(|e| e.to_string())?;
    for side in [&mut a, &mut b] {
        let rx = side.pool.alloc().ok_or("pool empty")?;
        side.ep.post_recv(rx, 2).map_err(|(e, _)| e.to_string())?;
    }
    // Timed from when both threads run to when the last message is back: the other
    // thread's start and end are not the ping-pong's.
    let ready = std::sync::Barrier::new(2);
    let elapsed = std::thread::scope(|s| {
        let other = s.spawn(|| {
            ready.wait();
            ping_pong(&mut b, out[0], size, rounds, false, sleep)
        });
        ready.wait();
        let t = Instant::now();
        let mine = ping_pong(&mut a, peer, size, rounds, true, sleep);
        let elapsed = t.elapsed();
        let theirs = other
            .join()
            .unwrap_or_else(|_| Err("the other side panicked".into()));
        mine.and(theirs).map(|()| elapsed)
    })?;
    Ok(elapsed.as_secs_f64() * 1e9 / f64::from(2 * rounds))
}

/// Print one measurement line. `println!` panics when standard output fails: a reader that
/// has gone (`bench-datapath | head -1`) ends the run quietly instead, with status 0, as a
/// program killed by `SIGPIPE` stops; any other failure is a message and status 1.
fn emit(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(format_args!("{line}\n"))
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            // Standard error may be gone too; there is nothing more to do about it then.
            let _ = writeln!(
                std::io::stderr(),
                "bench-datapath: writing standard output: {e}"
            );
            std::process::exit(1)
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    for (op, sleep) in [("wake", true), ("wake_poll", false)] {
        if !args.ops.iter().any(|o| o == "wake") {
            break;
        }
        for &size in &args.sizes {
            if size == 0 || size > MAX_SIZE {
                return Err(format!("size {size} outside 1..={MAX_SIZE}"));
            }
            let rounds = (args.volume / size).clamp(200, 5_000) as u32;
            let lat = wake(size, rounds, sleep)?;
            emit(format_args!(
                "bench=datapath op={op} size={size} msgs_per_s={:.0} lat_ns={lat:.0} gbps={:.3}",
                1e9 / lat,
                1e9 / lat * size as f64 * 8.0 / 1e9
            ));
        }
    }
    let mut p = pair()?;
    if let Some(n) = args.callgrind_sends {
        let mut buf = filled(&p.a.pool, 8)?;
        for _ in 0..n {
            buf = one(&mut p, "send", 8, buf)?;
        }
        return Ok(());
    }
    for op in args.ops.iter().filter(|o| *o != "wake") {
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
            emit(format_args!(
                "bench=datapath op={op} size={size} msgs_per_s={rate:.0} lat_ns={:.0} gbps={:.3}",
                secs * 1e9 / iters as f64,
                rate * size as f64 * 8.0 / 1e9
            ));
        }
    }
    Ok(())
}

/// Every `--ops` value.
const OPS: [&str; 5] = ["send", "tsend", "write", "read", "wake"];

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    // Refused before anything is measured, not when their turn comes.
    if let Some(bad) = args.ops.iter().find(|o| !OPS.contains(&o.as_str())) {
        eprintln!("bench-datapath: unknown --ops {bad} ({})", OPS.join(", "));
        return std::process::ExitCode::from(2);
    }
    if let Some(bad) = args.sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
        eprintln!("bench-datapath: size {bad} outside 1..={MAX_SIZE}");
        return std::process::ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-datapath: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
