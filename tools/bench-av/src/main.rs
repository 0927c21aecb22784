//! `bench-av`: the cost of every AV operation at 1,000, 100,000 and 1,000,000 entries.
//!
//! Two implementations are measured in the same run:
//!
//! * `uet-nic`: the driver's AV on a NIC of the in-process simulator: every insert and remove
//!   programs the NIC table (AV_WRITE / AV_INVALIDATE through the admin queue), as in
//!   production;
//! * `uet-host`: the same AV over an in-memory NIC table, i.e. the host's own cost;
//! * `flat-slots`: no AV, the floor the memory system sets: the same operations on the
//!   mirror's slot storage alone (`uet_av::mirror::Slots`, the same mapping, page and
//!   hugepage policy), with no check, index allocator or NIC. Insert stores each address at
//!   the next index (batched: `batch` at a time), lookup copies slot `fi_addr` in the same
//!   scattered order (into a buffer the compiler must keep whole, as it must the AV's, or it
//!   would rebuild only the byte the loop sums), remove zeroes slot `fi_addr`. Its first-touch page faults and cache
//!   misses are the AV's too; the rest of the AV's time is its own.
//!
//! The workload mirrors `shared/anchors/libfabric_av_bench.c` so the lines compare with it:
//! `n` peers, 8 per fabric address; insert one address per call (`op=insert`) or 256 per call
//! (`op=insert_batch`); look every entry up in a scattered order (stride 7919, or 7907 when
//! `n` is a multiple of 7919, where the anchor's order looks up only every 7919th entry, each
//! 7919 times); remove one entry per call in index order. Each line:
//!
//! `bench=av impl=<name> op=<op> n=<entries> ns_per_op=<x> bytes_per_entry=<y>`
//!
//! where `bytes_per_entry` is the host memory the AV holds per entry (its mirror, allocator
//! and buffers; the NIC's table lives on the NIC). `op=insertsym` inserts the `n` peers (8
//! per node; whole nodes, so a count that is not a multiple of 8 is rounded up, and the line's
//! `n` says how many) with one `fi_av_insertsym`, stored as a symmetric range on host and NIC;
//! its `bytes_per_entry` is the growth of the AV's host memory divided by that `n`.
//!
//! `op=source_catch_up` (`impl=uet-nic` only) is the NIC's cost that AV_WRITE leaves for
//! later: the simulated NIC takes the indices an AV_WRITE wrote into its source CAM (the
//! reverse map FI_SOURCE reads on receive) before the next receive's lookup, not on the
//! command path. After a first message between two NICs (which pays for what any first
//! message does), the bench inserts the `n` peers (in batches, the last one the sender) into
//! an AV of the receiving NIC that no endpoint uses and times a message (the control), then
//! inserts them into the receiver's own AV and times the next message, whose receive takes
//! all `n` in; `ns_per_op` is the difference per entry (negative when the catch-up is lost in
//! the noise of one message, which the median over `--rounds` evens out). Added to
//! `op=insert_batch`, it gives what the NIC spends per entry in all. The receive reports the
//! sender's index (`n - 1`) as its source, or the bench fails.
//!
//! `op=lookup_cached` is a second pass of the same lookups right after the first (`op=lookup`,
//! which comes right after the inserts, as in the anchor). The first pass pays for what the
//! inserts left in the caches: at 100,000 entries the mirror (800 KB) and the `fi_addr` array
//! the lookups read (800 KB) do not both fit a core's L2, and the inserts' input, and the NIC
//! table and source CAM the in-process simulator keeps in host memory (a NIC keeps them in its
//! own), push them further out; the second finds the slots the first brought in. Their
//! difference is cache misses, not work of the AV's.
//!
//! `op=insert_batch_unshared` and `op=lookup_unshared` (`--ops unshared`, not in the
//! anchor) measure the mirror's worst case: peers whose addresses share nothing but what a
//! slot holds (each its own IPv6 /112), so that each of the first 4,094 takes a template of
//! its own and every later one is kept whole beside its slot
//! (`uet_av::mirror::templates`): a lookup then takes two dependent cache misses, and an
//! entry about 41.5 bytes at 100,000 entries and 40.3 at 1,000,000: its 8-byte slot, the
//! 32 bytes kept whole (`uet_av::mirror::whole`, grown a 32 KiB chunk at a time, with one bit
//! an entry of bookkeeping), and the templates' share, which at 1,000 entries (all of them
//! templates, 60-odd bytes each with their hash table) is most of it.
//!
//! `op=av_set_insert` and `op=av_set_remove` (`--ops av_set`, not in the anchor and not run by
//! default) measure fi_av_set(3)'s member calls on a large set: the `n` peers are inserted
//! into the AV (in batches, untimed), then each is inserted into an empty set of that AV with
//! one `fi_av_set_insert` in index order, then each is removed with one `fi_av_set_remove` in
//! the lookups' scattered order (stride 7919; 7907 when `n` is a multiple of it), so that a
//! removal lands anywhere in the set. `ns_per_op` is per member, `bytes_per_entry` the set's
//! heap memory per member when it holds all `n` (`AvSet::heap_bytes`; the AV's is not
//! counted). `impl=flat-slots` has no counterpart.
//!
//! `op=insertsym_node` and `op=remove_node` (`--ops ranges`, not in the anchor and not run by
//! default) measure an AV of many small symmetric ranges, as an application that adds nodes
//! one by one makes: `fi_av_insertsym` of one node of 8 services per call, each stored as a
//! range of its own, then `fi_av_remove` of each node's 8 members per call, in index order.
//! `ns_per_op` is per entry; flat as `n` grows, since each range is found, stored and
//! dropped on its own.
//!
//! `--ops` picks the operations (`insert`, which also measures lookup and remove;
//! `insert_batch`; `insertsym`; `source_catch_up`; `unshared`; `av_set`; `ranges`), the first
//! five by default. An unreported warm-up round at 1,000 entries of each implementation comes first.
//! `--rounds R` measures everything R times (a fresh AV each time) and prints the median,
//! with `rounds=R min=<x> max=<y>` after it: on a shared 2-core machine one round can be off
//! by a third either way.

use clap::Parser;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;
use uet_av::mirror::Slots;
use uet_av::{AddressVector, AvAttr, AvSetAttr, MemoryNicTable, NicAvTable};
use uet_driver::backend::sim::SimDevice;
use uet_driver::{Av, DmaBuffer, DmaPool, Endpoint, EndpointAttr, Nic};
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::UetAddress;
use uet_sim::{Fabric, NicConfig};

#[derive(Parser)]
#[command(name = "bench-av", about = "Benchmark the uet-nic AV")]
struct Args {
    /// Entry counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000usize, 100_000, 1_000_000])]
    counts: Vec<usize>,
    /// Implementations: uet-nic, uet-host, flat-slots.
    #[arg(long = "impl", value_delimiter = ',', default_values_t = ["uet-nic".to_string(), "uet-host".to_string(), "flat-slots".to_string()])]
    impls: Vec<String>,
    /// Addresses per insert call for op=insert_batch.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Operations to measure: insert (with lookup and remove), insert_batch, insertsym,
    /// source_catch_up (uet-nic only), unshared (the mirror's worst case), av_set (AV set
    /// member insert and remove; not by default), ranges (one insertsym per node, then the
    /// removal of each node; not by default).
    #[arg(long, value_delimiter = ',', default_values_t = ["insert".to_string(), "insert_batch".to_string(), "insertsym".to_string(), "source_catch_up".to_string(), "unshared".to_string()])]
    ops: Vec<String>,
    /// Rounds per entry count and implementation (1 to 1000); the median is printed.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

fn peer(i: usize) -> [u8; 32] {
    let node = (i / 8) as u32 + 1;
    UetAddress {
        caps: caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 1 + (i % 8) as u16,
        fabric_addr: IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + node)),
        ri_start: 1,
        ri_count: 4,
        initiator: i as u32,
    }
    .to_bytes()
    .unwrap_or([0; 32]) // every generated address is valid; an invalid one fails its insert
}

/// One measured figure of one round.
#[derive(Clone, Debug)]
struct Figure {
    op: &'static str,
    /// Entries the figure is for (insertsym: the peers inserted).
    n: usize,
    ns: f64,
    bytes: f64,
}

/// The most rounds a run measures: each keeps its figures until the medians are taken.
const MAX_ROUNDS: usize = 1000;

/// Every `--ops` value.
const OPS: [&str; 7] = [
    "insert",
    "insert_batch",
    "insertsym",
    "source_catch_up",
    "unshared",
    "av_set",
    "ranges",
];

/// Every `--impl` value.
const IMPLS: [&str; 3] = ["uet-nic", "uet-host", "flat-slots"];

/// Entries of the warm-up round.
const WARMUP_ENTRIES: usize = 1_000;

/// Print the median of every op's figures (time and bytes) over the rounds, in the order
/// first measured.
/// Stops quietly when standard output is closed (`bench-av | head`).
fn report(imp: &str, rounds: &[Vec<Figure>]) {
    use std::io::Write;
    let Some(first) = rounds.first() else {
        return;
    };
    let mut stdout = std::io::stdout().lock();
    for f in first {
        let sorted = |field: fn(&Figure) -> f64| {
            let mut v: Vec<f64> = rounds
                .iter()
                .flat_map(|r| r.iter().filter(|g| g.op == f.op).map(field))
                .collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let median = |v: &[f64]| v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
        let ns = sorted(|g| g.ns);
        let (op, n, bytes) = (f.op, f.n, median(&sorted(|g| g.bytes)));
        let median = median(&ns);
        let spread = match (ns.len() > 1, ns.first(), ns.last()) {
            (true, Some(min), Some(max)) => {
                format!(" rounds={} min={min:.1} max={max:.1}", ns.len())
            }
            _ => String::new(),
        };
        if writeln!(
            stdout,
            "bench=av impl={imp} op={op} n={n} ns_per_op={median:.1} bytes_per_entry={}{spread}",
            per_entry_text(bytes)
        )
        .is_err()
        {
            return;
        }
    }
}

/// Bytes per entry as a line prints them: one decimal from 1 byte up, and three significant
/// digits below it, where one decimal would read 0.0 (`op=insertsym`: a few hundred bytes for
/// a million entries) and the whole AV's bytes, which a reader gets back by multiplying by `n`,
/// would be off by up to 0.05 bytes an entry.
fn per_entry_text(bytes: f64) -> String {
    if bytes > 0.0 && bytes < 1.0 {
        let decimals = (2 - bytes.log10().floor() as i32).clamp(1, 12) as usize;
        format!("{bytes:.decimals$}")
    } else {
        format!("{bytes:.1}")
    }
}

fn run<N: NicAvTable>(
    n: usize,
    batch: usize,
    ops: &[String],
    addrs: &[u8],
    mut open: impl FnMut(usize) -> Result<AddressVector<N>, String>,
) -> Result<Vec<Figure>, String> {
    let wanted = |op: &str| ops.iter().any(|o| o == op);
    let mut fi_addrs = vec![0u64; n];
    let mut out = Vec::new();
    if wanted("insert") {
        unbatched(n, addrs, &mut fi_addrs, open(n)?, &mut out)?;
    }
    if wanted("insert_batch") {
        batched(n, batch, addrs, &mut fi_addrs, open(n)?, &mut out)?;
    }
    if wanted("unshared") {
        unshared(n, batch, open(n)?, &mut out)?;
    }
    if wanted("insertsym") {
        // Whole nodes of 8: the AV holds the last one, however few of it the count needs.
        symmetric(n, open(n.next_multiple_of(SYM_SERVICES))?, &mut out)?;
    }
    if wanted("av_set") {
        av_set(n, batch, addrs, open(n)?, &mut out)?;
    }
    if wanted("ranges") {
        node_ranges(n, open(n.next_multiple_of(SYM_SERVICES))?, &mut out)?;
    }
    Ok(out)
}

/// The two passes of lookups over every entry: `lookup` right after the inserts, as the anchor
/// measures it, when what the inserts touched besides the mirror (the NIC's table in the
/// simulator, its CAM, the input) may have pushed the mirror's slots out of the caches; then
/// `lookup_cached`, the same lookups again with the slots the first pass brought in. The
/// difference is the cache misses the first pass took, not work of the AV's.
const LOOKUP_PASSES: [&str; 2] = ["lookup", "lookup_cached"];

/// The step of the lookups' scattered order through `n` entries: the anchor's 7919, or at a
/// count that is a multiple of it, where the anchor's order visits only every 7919th entry
/// (entry 0 alone, `n` times, at 7919), the prime below it, 7907, so that every entry is
/// still looked up once (no count a bench holds is a multiple of both).
fn lookup_stride(n: usize) -> usize {
    let n = n.max(1);
    if n.is_multiple_of(7919) {
        7907 % n
    } else {
        7919 % n
    }
}

/// Nanoseconds per lookup of every `fi_addrs` entry by `lookup` (which copies the address
/// into its buffer), in the anchor's scattered order, `(i * 7919) % n` (see
/// [`lookup_stride`] for a count that is a multiple of 7919).
fn scattered_lookups(
    fi_addrs: &[u64],
    mut lookup: impl FnMut(u64, &mut [u8; 32]) -> Result<(), String>,
) -> Result<f64, String> {
    let n = fi_addrs.len();
    let mut addr = [0u8; 32];
    let mut sum = 0u64;
    // Stepped by addition: a 64-bit division per lookup would cost as much as the lookup
    // itself.
    let stride = lookup_stride(n);
    let mut at = 0usize;
    let t = Instant::now();
    for _ in 0..n {
        let fa = fi_addrs.get(at).copied().unwrap_or(u64::MAX);
        lookup(fa, &mut addr)?;
        // The whole address, as a lookup writes it for its caller: without this the compiler
        // may rebuild only the byte the loop sums of a lookup it inlines.
        std::hint::black_box(&mut addr);
        sum = sum.wrapping_add(u64::from(addr[5]));
        // Wrapped without a branch: at small n the wrap is taken often and at random, and a
        // mispredicted branch would squash the loads already in flight for later lookups.
        at += stride;
        at -= n & usize::from(at >= n).wrapping_neg();
    }
    let ns = t.elapsed().as_nanos() as f64 / n.max(1) as f64;
    std::hint::black_box(sum);
    Ok(ns)
}

/// `fi_addrs` in the lookups' scattered order (the stride of [`lookup_stride`]): every entry
/// once, whatever the count.
fn scattered_order(fi_addrs: &[u64]) -> Vec<u64> {
    let n = fi_addrs.len();
    let stride = lookup_stride(n);
    let mut order = Vec::with_capacity(n);
    let mut at = 0usize;
    for _ in 0..n {
        order.push(fi_addrs.get(at).copied().unwrap_or(u64::MAX));
        at = (at + stride) % n;
    }
    order
}

/// Unbatched insert, then lookup and remove of every entry.
fn unbatched<N: NicAvTable>(
    n: usize,
    addrs: &[u8],
    fi_addrs: &mut [u64],
    mut av: AddressVector<N>,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let t = Instant::now();
    for (i, a) in addrs.chunks_exact(32).enumerate() {
        let k = av
            .insert(a, 1, Some(&mut fi_addrs[i..i + 1]), 0)
            .map_err(|e| e.to_string())?;
        if k != 1 {
            return Err(format!("insert {i} failed"));
        }
    }
    let insert_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let bytes = av.host_bytes() as f64 / n as f64;
    out.push(Figure {
        op: "insert",
        n,
        ns: insert_ns,
        bytes,
    });

    for op in LOOKUP_PASSES {
        let ns = scattered_lookups(fi_addrs, |fa, addr| {
            let mut len = addr.len();
            av.lookup(fa, addr, &mut len).map_err(|e| e.to_string())
        })?;
        out.push(Figure { op, n, ns, bytes });
    }

    let t = Instant::now();
    for a in fi_addrs.iter() {
        av.remove(std::slice::from_ref(a), 0)
            .map_err(|e| e.to_string())?;
    }
    let remove_ns = t.elapsed().as_nanos() as f64 / n as f64;
    out.push(Figure {
        op: "remove",
        n,
        ns: remove_ns,
        bytes,
    });
    Ok(())
}

/// Batched insert: `batch` addresses per call, one NIC write per call.
fn batched<N: NicAvTable>(
    n: usize,
    batch: usize,
    addrs: &[u8],
    fi_addrs: &mut [u64],
    mut av: AddressVector<N>,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let t = Instant::now();
    let mut done = 0;
    for (c, chunk) in addrs.chunks(batch.saturating_mul(32)).enumerate() {
        let count = chunk.len() / 32;
        let at = c * batch;
        done += av
            .insert(chunk, count, Some(&mut fi_addrs[at..at + count]), 0)
            .map_err(|e| e.to_string())?;
    }
    if done != n {
        return Err(format!("batched insert stored {done} of {n}"));
    }
    let batch_ns = t.elapsed().as_nanos() as f64 / n as f64;
    out.push(Figure {
        op: "insert_batch",
        n,
        ns: batch_ns,
        bytes: av.host_bytes() as f64 / n as f64,
    });
    Ok(())
}

/// Peer `i` of `op=unshared`: an IPv6 address of a /112 of its own, so that nothing but
/// what a mirror slot holds is shared with another peer.
fn unshared_peer(i: usize) -> [u8; 32] {
    let i = i as u32;
    UetAddress {
        caps: caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 1 + (i % 8) as u16,
        fabric_addr: IpAddr::V6(std::net::Ipv6Addr::new(
            0xfd00,
            0,
            0,
            0,
            0,
            (i >> 16) as u16,
            i as u16,
            1,
        )),
        ri_start: 1,
        ri_count: 4,
        initiator: i,
    }
    .to_bytes()
    .unwrap_or([0; 32]) // every generated address is valid; an invalid one fails its insert
}

/// The mirror's worst case: `n` unshared peers inserted `batch` at a time, then looked up
/// in the anchor's scattered order.
fn unshared<N: NicAvTable>(
    n: usize,
    batch: usize,
    mut av: AddressVector<N>,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let addrs: Vec<u8> = (0..n).flat_map(unshared_peer).collect();
    let mut fi_addrs = vec![0u64; n];
    let t = Instant::now();
    let mut done = 0;
    for (chunk, fa) in addrs
        .chunks(batch.max(1).saturating_mul(32))
        .zip(fi_addrs.chunks_mut(batch.max(1)))
    {
        done += av
            .insert(chunk, chunk.len() / 32, Some(fa), 0)
            .map_err(|e| e.to_string())?;
    }
    if done != n {
        return Err(format!("unshared insert stored {done} of {n}"));
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    let bytes = av.host_bytes() as f64 / n as f64;
    out.push(Figure {
        op: "insert_batch_unshared",
        n,
        ns,
        bytes,
    });
    let ns = scattered_lookups(&fi_addrs, |fa, addr| {
        let mut len = addr.len();
        av.lookup(fa, addr, &mut len).map_err(|e| e.to_string())
    })?;
    out.push(Figure {
        op: "lookup_unshared",
        n,
        ns,
        bytes,
    });
    Ok(())
}

/// `op=av_set_insert` and `op=av_set_remove`: the `n` peers into `av` (untimed), then each
/// into an empty set of it in index order, then each out of it in a scattered order (see the
/// crate documentation).
fn av_set<N: NicAvTable>(
    n: usize,
    batch: usize,
    addrs: &[u8],
    mut av: AddressVector<N>,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let batch = batch.max(1);
    let mut fi_addrs = vec![0u64; n];
    let mut done = 0;
    for (chunk, fa) in addrs
        .chunks(batch.saturating_mul(32))
        .zip(fi_addrs.chunks_mut(batch))
    {
        done += av
            .insert(chunk, chunk.len() / 32, Some(fa), 0)
            .map_err(|e| e.to_string())?;
    }
    if done != n {
        return Err(format!("av_set: the AV stored {done} of {n}"));
    }
    let mut set = av
        .av_set(&AvSetAttr {
            count: n,
            ..AvSetAttr::default()
        })
        .map_err(|e| e.to_string())?;

    let t = Instant::now();
    for &fa in &fi_addrs {
        set.insert(&av, fa).map_err(|e| e.to_string())?;
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    if set.len() != n {
        return Err(format!("av_set: the set holds {} of {n}", set.len()));
    }
    let bytes = set.heap_bytes() as f64 / n as f64;
    out.push(Figure {
        op: "av_set_insert",
        n,
        ns,
        bytes,
    });

    let order = scattered_order(&fi_addrs);
    let t = Instant::now();
    for &fa in &order {
        set.remove(fa).map_err(|e| e.to_string())?;
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    if !set.is_empty() {
        return Err(format!(
            "av_set: {} members left after removing all",
            set.len()
        ));
    }
    out.push(Figure {
        op: "av_set_remove",
        n,
        ns,
        bytes,
    });
    Ok(())
}

/// Services per node of `op=insertsym`.
const SYM_SERVICES: usize = 8;

/// Symmetric insert: n peers, 8 per node, in one fi_av_insertsym (stored as a range); the
/// nodes that cover n when it is not a multiple of 8, into an AV opened for them.
fn symmetric<N: NicAvTable>(
    n: usize,
    mut av: AddressVector<N>,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let empty = av.host_bytes();
    let svc = SYM_SERVICES;
    let nodes = n.div_ceil(svc);
    let t = Instant::now();
    let k = av
        .insertsym("10.128.0.1", nodes, "1?ri=1+4", svc, None, 0, None)
        .map_err(|e| e.to_string())?;
    let sym_ns = t.elapsed().as_nanos() as f64 / k.max(1) as f64;
    out.push(Figure {
        op: "insertsym",
        n: k,
        ns: sym_ns,
        bytes: av.host_bytes().saturating_sub(empty) as f64 / k.max(1) as f64,
    });
    Ok(())
}

/// `op=insertsym_node` and `op=remove_node`: one `fi_av_insertsym` per node of
/// [`SYM_SERVICES`] services, then one `fi_av_remove` per node in index order (see the crate
/// documentation).
fn node_ranges<N: NicAvTable>(
    n: usize,
    mut av: AddressVector<N>,
    out: &mut Vec<Figure>,
) -> Result<(), String> {
    let svc = SYM_SERVICES;
    let nodes = n.div_ceil(svc);
    let mut fi_addrs = vec![0u64; nodes * svc];
    // Each node's address as the application hands it over, written before the clock starts:
    // formatting it is the caller's work, not the AV's.
    let node_texts: Vec<String> = (0..nodes)
        .map(|node| std::net::Ipv4Addr::from(0x0a80_0001 + node as u32).to_string())
        .collect();
    let t = Instant::now();
    for (node, (fa, text)) in fi_addrs.chunks_mut(svc).zip(&node_texts).enumerate() {
        let added = av
            .insertsym(text, 1, "1?ri=1+4", svc, Some(fa), 0, None)
            .map_err(|e| e.to_string())?;
        if added != svc {
            return Err(format!("insertsym of node {node}: {added} of {svc}"));
        }
    }
    let k = fi_addrs.len();
    let insert_ns = t.elapsed().as_nanos() as f64 / k as f64;
    let bytes = av.host_bytes() as f64 / k as f64;
    if av.ranges().count() != nodes {
        return Err(format!("{} ranges for {nodes} nodes", av.ranges().count()));
    }
    out.push(Figure {
        op: "insertsym_node",
        n: k,
        ns: insert_ns,
        bytes,
    });
    let t = Instant::now();
    for fa in fi_addrs.chunks(svc) {
        av.remove(fa, 0).map_err(|e| e.to_string())?;
    }
    let remove_ns = t.elapsed().as_nanos() as f64 / k as f64;
    if av.ranges().count() != 0 {
        return Err(format!("{} ranges left", av.ranges().count()));
    }
    out.push(Figure {
        op: "remove_node",
        n: k,
        ns: remove_ns,
        bytes,
    });
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.batch == 0 || args.counts.contains(&0) {
        eprintln!("bench-av: --batch and every --counts value must be positive");
        return std::process::ExitCode::from(2);
    }
    if let Some(bad) = args.ops.iter().find(|o| !OPS.contains(&o.as_str())) {
        eprintln!("bench-av: unknown --ops {bad} ({})", OPS.join(", "));
        return std::process::ExitCode::from(2);
    }
    if let Some(bad) = args.impls.iter().find(|i| !IMPLS.contains(&i.as_str())) {
        eprintln!("bench-av: unknown --impl {bad} ({})", IMPLS.join(", "));
        return std::process::ExitCode::from(2);
    }
    if !(1..=MAX_ROUNDS).contains(&args.rounds) {
        eprintln!("bench-av: --rounds must be 1 to {MAX_ROUNDS}");
        return std::process::ExitCode::from(2);
    }
    // Warm-up: one unreported round at 1,000 entries of each implementation, so the first
    // reported figures do not include page faults of a fresh process and a cold CPU.
    let warm: Vec<u8> = (0..WARMUP_ENTRIES).flat_map(peer).collect();
    for imp in &args.impls {
        if let Err(e) = measure(imp, WARMUP_ENTRIES, &args, &warm) {
            eprintln!("bench-av: {imp} warm-up: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    for &n in &args.counts {
        let addrs: Vec<u8> = (0..n).flat_map(peer).collect();
        for imp in &args.impls {
            let mut rounds = Vec::with_capacity(args.rounds);
            for _ in 0..args.rounds {
                match measure(imp, n, &args, &addrs) {
                    Ok(figures) => rounds.push(figures),
                    Err(e) => {
                        eprintln!("bench-av: {imp} n={n}: {e}");
                        return std::process::ExitCode::FAILURE;
                    }
                }
            }
            report(imp, &rounds);
        }
    }
    std::process::ExitCode::SUCCESS
}

/// Every requested operation of `imp` at `n` entries (`addrs`: the `n` peers' addresses).
fn measure(imp: &str, n: usize, args: &Args, addrs: &[u8]) -> Result<Vec<Figure>, String> {
    match imp {
        "uet-host" => run(n, args.batch, &args.ops, addrs, |count| {
            let attr = AvAttr {
                count,
                ..AvAttr::default()
            };
            AddressVector::open(
                MemoryNicTable::new(count as u32),
                attr,
                uet_av::AvLimits::new(count as u32, 0),
            )
            .map_err(|e| e.to_string())
        }),
        "uet-nic" => {
            let fabric = Fabric::new();
            let nic = fabric
                .add_nic(NicConfig::new(IpAddr::V4(Ipv4Addr::new(10, 255, 0, 1))))
                .map_err(|e| e.to_string())
                .and_then(|f| Nic::open(Arc::new(SimDevice::new(f))).map_err(|e| e.to_string()));
            let mut figures = match nic {
                Ok(nic) => run(n, args.batch, &args.ops, addrs, |count| {
                    nic.open_av(AvAttr {
                        count,
                        ..AvAttr::default()
                    })
                    .map_err(|e| e.to_string())
                }),
                Err(e) => Err(e),
            }?;
            if args.ops.iter().any(|o| o == "source_catch_up") {
                figures.push(source_catch_up(n, args.batch, addrs)?);
            }
            Ok(figures)
        }
        "flat-slots" => flat_slots(n, args.batch, &args.ops, addrs),
        other => Err(format!("unknown --impl {other}")),
    }
}

/// `op=source_catch_up`: see the crate documentation.
fn source_catch_up(n: usize, batch: usize, addrs: &[u8]) -> Result<Figure, String> {
    const JOB: u32 = 9;
    let fabric = Fabric::new();
    let open = |ip: Ipv4Addr, count: usize| -> Result<(Nic, Av, Endpoint, DmaPool), String> {
        let f = fabric
            .add_nic(NicConfig::new(IpAddr::V4(ip)))
            .map_err(|e| e.to_string())?;
        let nic = Nic::open(Arc::new(SimDevice::new(f))).map_err(|e| e.to_string())?;
        let av = nic
            .open_av(AvAttr {
                count,
                job_id: JOB,
                ..AvAttr::default()
            })
            .map_err(|e| e.to_string())?;
        let ep = nic
            .endpoint(
                EndpointAttr {
                    job_id: JOB,
                    ..EndpointAttr::default()
                },
                Some(&av),
            )
            .map_err(|e| e.to_string())?;
        let pool = DmaPool::new(&nic, 64, 4).map_err(|e| e.to_string())?;
        Ok((nic, av, ep, pool))
    };
    let (_nic_a, mut av_a, mut ep_a, pool_a) = open(Ipv4Addr::new(10, 254, 0, 1), 1)?;
    let (nic_b, mut av_b, mut ep_b, pool_b) = open(Ipv4Addr::new(10, 254, 0, 2), n)?;
    let b = ep_b.address().to_bytes().map_err(|e| e.to_string())?;
    let mut to_b = [0u64; 1];
    av_a.insert(&b, 1, Some(&mut to_b), 0)
        .map_err(|e| e.to_string())?;
    let wait = |ep: &mut Endpoint| -> Result<uet_driver::CqEvent, String> {
        for _ in 0..1_000_000 {
            if let Some(ev) = ep.poll().map_err(|e| e.to_string())? {
                return match ev.error {
                    Some(err) => Err(format!("completion failed: {err}")),
                    None => Ok(ev),
                };
            }
        }
        Err("no completion".into())
    };
    let back = |(e, _): (uet_driver::DriverError, DmaBuffer)| e.to_string();
    // The sender's address, for B's AV.
    let a = ep_a.address().to_bytes().map_err(|e| e.to_string())?;
    let mut message = |want_source: Option<u64>| -> Result<f64, String> {
        let rx = pool_b.alloc().ok_or("pool empty")?;
        let mut tx = pool_a.alloc().ok_or("pool empty")?;
        tx.fill(&[0xa5; 8]).map_err(|e| e.to_string())?;
        ep_b.post_recv(rx, 1).map_err(back)?;
        let t = Instant::now();
        ep_a.post_send(to_b[0], tx, 1, 0).map_err(back)?;
        let got = wait(&mut ep_b)?;
        let ns = t.elapsed().as_nanos() as f64;
        wait(&mut ep_a)?;
        match want_source {
            Some(want) if got.src_addr != want => Err(format!(
                "the receive reported source {:#x}, not the sender's index {want}",
                got.src_addr
            )),
            _ => Ok(ns),
        }
    };
    // A first message before the inserts pays what a first message costs anyway (the
    // packet delivery context between the two NICs, cold caches).
    message(None)?;
    // n - 1 of the bench's peers, then A, in batches.
    let mut peers = addrs.get(..32 * (n - 1)).unwrap_or_default().to_vec();
    peers.extend_from_slice(&a);
    let fill = |av: &mut Av| -> Result<(), String> {
        for chunk in peers.chunks(batch.saturating_mul(32)) {
            let count = chunk.len() / 32;
            let done = av
                .insert(chunk, count, None, 0)
                .map_err(|e| e.to_string())?;
            if done != count {
                return Err(format!("inserted {done} of {count}"));
            }
        }
        Ok(())
    };
    // The control: the same inserts into an AV of B's NIC that no endpoint uses, then a
    // message, whose receive finds B's own AV as empty as before (nothing to catch up).
    // It pays what follows any n inserts (caches filled with the tables) and is subtracted.
    let mut control = nic_b
        .open_av(AvAttr {
            count: n,
            job_id: JOB,
            ..AvAttr::default()
        })
        .map_err(|e| e.to_string())?;
    fill(&mut control)?;
    let after_control = message(None)?;
    drop(control);
    // The measured: the same inserts into B's AV, then a message whose receive takes all n
    // into the CAM before its lookup, and reports A's index.
    fill(&mut av_b)?;
    let first = message(Some((n - 1) as u64))?;
    Ok(Figure {
        op: "source_catch_up",
        n,
        ns: (first - after_control) / n as f64,
        // The work is the NIC's: no host memory is involved.
        bytes: 0.0,
    })
}

/// `impl=flat-slots`: the bench's operations on the mirror's slot storage alone (see the
/// crate documentation). insertsym has no counterpart.
fn flat_slots(n: usize, batch: usize, ops: &[String], addrs: &[u8]) -> Result<Vec<Figure>, String> {
    let wanted = |op: &str| ops.iter().any(|o| o == op);
    let capacity = u32::try_from(n).map_err(|_| format!("{n} entries exceed the index space"))?;
    let fresh = || Slots::new(capacity).map_err(|e| e.to_string());
    let mut out = Vec::new();
    let figure = |op, t: Instant, slots: &Slots| Figure {
        op,
        n,
        ns: t.elapsed().as_nanos() as f64 / n as f64,
        bytes: slots.heap_bytes() as f64 / n as f64,
    };
    let addresses = || {
        addrs
            .chunks_exact(32)
            .filter_map(|a| a.first_chunk::<32>())
            .zip(0u32..)
    };
    if wanted("insert") {
        let mut slots = fresh()?;
        let mut fi_addrs = vec![0u64; n];
        let t = Instant::now();
        for ((a, i), fa) in addresses().zip(fi_addrs.iter_mut()) {
            if slots.set(i, *a) {
                *fa = u64::from(i);
            }
            std::hint::black_box(&mut slots);
        }
        out.push(figure("insert", t, &slots));

        for op in LOOKUP_PASSES {
            let ns = scattered_lookups(&fi_addrs, |fa, addr| {
                if let Some(s) = slots.get(fa as u32) {
                    *addr = s;
                }
                Ok(())
            })?;
            out.push(Figure {
                op,
                n,
                ns,
                bytes: slots.heap_bytes() as f64 / n as f64,
            });
        }

        let t = Instant::now();
        for &fa in &fi_addrs {
            slots.set(fa as u32, [0; 32]);
            std::hint::black_box(&mut slots);
        }
        out.push(figure("remove", t, &slots));
    }
    if wanted("insert_batch") {
        let mut slots = fresh()?;
        let t = Instant::now();
        let mut next = addresses();
        for _ in 0..n.div_ceil(batch) {
            for (a, i) in next.by_ref().take(batch) {
                slots.set(i, *a);
            }
            std::hint::black_box(&mut slots);
        }
        out.push(figure("insert_batch", t, &slots));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_av::mirror::templates::MAX_TEMPLATES;

    fn args(ops: &[&str]) -> Args {
        Args {
            counts: vec![],
            impls: vec![],
            batch: 256,
            ops: ops.iter().map(|o| o.to_string()).collect(),
            rounds: 1,
        }
    }

    /// `op=insertsym` inserts whole nodes of 8: at a count that is not a multiple of 8 it
    /// inserts the nodes that cover the count, into an AV that holds them, and says how many.
    #[test]
    fn insertsym_measures_a_count_that_is_not_a_multiple_of_8() {
        let n = 1001;
        let addrs: Vec<u8> = (0..n).flat_map(peer).collect();
        for imp in ["uet-host", "uet-nic"] {
            let figures = measure(imp, n, &args(&["insertsym"]), &addrs)
                .unwrap_or_else(|e| panic!("{imp}: {e}"));
            let sym = figures.iter().find(|f| f.op == "insertsym").unwrap();
            assert_eq!(sym.n, 1008, "{imp}: 126 nodes of 8");
        }
    }

    /// `op=unshared` is the mirror's worst case: each peer takes a template of its own, and
    /// past the last template every peer is kept whole. Its peers are valid addresses, and
    /// read back.
    #[test]
    fn unshared_peers_each_take_a_template_then_are_kept_whole() {
        let n = MAX_TEMPLATES + 1_000;
        let mut slots = Slots::new(n as u32).unwrap();
        for i in 0..n {
            let a = unshared_peer(i);
            assert!(UetAddress::from_bytes(&a).is_ok(), "peer {i}");
            assert!(slots.set(i as u32, a));
        }
        assert_eq!(slots.templates(), (MAX_TEMPLATES, 1_000));
        for i in (0..n).step_by(97) {
            assert_eq!(slots.get(i as u32), Some(unshared_peer(i)));
        }
    }

    /// `--ops av_set` measures a set's member insert and remove at every count, a multiple
    /// of 7919 (whose scattered order steps by 7907) too; it is not
    /// among the default operations, and flat-slots has no counterpart.
    #[test]
    fn av_set_ops_insert_and_remove_every_member() {
        for (imp, n) in [
            ("uet-host", 1000),
            ("uet-nic", 1000),
            ("uet-host", 7919),
            ("uet-host", 1),
        ] {
            let addrs: Vec<u8> = (0..n).flat_map(peer).collect();
            let figures = measure(imp, n, &args(&["av_set"]), &addrs)
                .unwrap_or_else(|e| panic!("{imp} n={n}: {e}"));
            let ops: Vec<&str> = figures.iter().map(|f| f.op).collect();
            assert_eq!(ops, ["av_set_insert", "av_set_remove"], "{imp} n={n}");
            assert!(
                figures.iter().all(|f| f.n == n && f.bytes > 0.0),
                "{figures:?}"
            );
        }
        let addrs: Vec<u8> = (0..1000).flat_map(peer).collect();
        let flat = measure("flat-slots", 1000, &args(&["av_set"]), &addrs).unwrap();
        assert!(flat.is_empty(), "{flat:?}");
        let default = Args::parse_from(["bench-av"]);
        assert!(
            !default.ops.iter().any(|o| o == "av_set"),
            "{:?}",
            default.ops
        );
    }

    /// `--ops ranges` inserts whole nodes one per call, each a range of its own, and removes
    /// them all; at a count that is not a multiple of 8 the line's `n` says how many. Not
    /// among the default operations; flat-slots has no counterpart.
    #[test]
    fn ranges_ops_insert_a_node_per_call_and_remove_every_node() {
        for (imp, n, k) in [("uet-host", 1000, 1000), ("uet-nic", 1001, 1008)] {
            let addrs: Vec<u8> = (0..n).flat_map(peer).collect();
            let figures = measure(imp, n, &args(&["ranges"]), &addrs)
                .unwrap_or_else(|e| panic!("{imp} n={n}: {e}"));
            let ops: Vec<&str> = figures.iter().map(|f| f.op).collect();
            assert_eq!(ops, ["insertsym_node", "remove_node"], "{imp} n={n}");
            assert!(
                figures.iter().all(|f| f.n == k && f.bytes > 0.0),
                "{figures:?}"
            );
        }
        let addrs: Vec<u8> = (0..1000).flat_map(peer).collect();
        let flat = measure("flat-slots", 1000, &args(&["ranges"]), &addrs).unwrap();
        assert!(flat.is_empty(), "{flat:?}");
        let default = Args::parse_from(["bench-av"]);
        assert!(!default.ops.iter().any(|o| o == "ranges"));
    }

    /// The set's removals visit every member once in the lookups' scattered order, at a
    /// count that is a multiple of 7919 too, instead of falling back to index order there.
    #[test]
    fn av_set_removals_are_scattered_at_any_count() {
        for n in [1, 2, 1000, 7919, 2 * 7919] {
            let fi_addrs: Vec<u64> = (0..n as u64).collect();
            let order = scattered_order(&fi_addrs);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, fi_addrs, "n={n}: every member once");
            if n > 2 {
                assert_eq!(order[1], lookup_stride(n) as u64, "n={n}");
                assert_ne!(order[1], 1, "n={n}: not index order");
            }
        }
    }

    /// The lookups visit every entry once, whatever the count: a multiple of 7919 too, at
    /// which a stride of 7919 would look one entry up `n` times (or `n / 7919` entries each
    /// 7919 times) and time the cache holding it.
    #[test]
    fn scattered_lookups_visit_every_entry_at_any_count() {
        for n in [1, 2, 1000, 7919, 2 * 7919, 100_000] {
            let fi_addrs: Vec<u64> = (0..n as u64).collect();
            let mut seen = vec![false; n];
            scattered_lookups(&fi_addrs, |fa, _| {
                seen[fa as usize] = true;
                Ok(())
            })
            .unwrap();
            assert!(seen.iter().all(|&s| s), "n={n}: {} of {n} visited", {
                seen.iter().filter(|&&s| s).count()
            });
        }
    }

    /// A figure below one byte an entry keeps three significant digits, so that the whole
    /// AV's bytes (the figure times `n`) are not read as 0, nor off by 50 KB at a million
    /// entries; from one byte up, one decimal.
    #[test]
    fn bytes_per_entry_below_one_keep_three_significant_digits() {
        for (bytes, text) in [
            (0.0, "0.0"),
            (0.000_572, "0.000572"),
            (0.000_1, "0.000100"),
            (0.049_99, "0.0500"),
            (0.96, "0.960"),
            (1.0, "1.0"),
            (9.375, "9.4"),
            (41.53, "41.5"),
        ] {
            assert_eq!(per_entry_text(bytes), text, "{bytes}");
        }
        let total: f64 = per_entry_text(572.0 / 1e6).parse::<f64>().unwrap() * 1e6;
        assert!((total - 572.0).abs() < 1.0, "{total}");
    }

    /// A `--batch` larger than the count (however large: its bytes overflow a `usize`)
    /// inserts every address in one call, in each implementation, instead of panicking.
    #[test]
    fn a_batch_of_any_size_inserts_the_count_in_one_call() {
        let n = 1000;
        let addrs: Vec<u8> = (0..n).flat_map(peer).collect();
        for batch in [n + 1, usize::MAX / 16, usize::MAX] {
            let mut a = args(&["insert_batch", "source_catch_up"]);
            a.batch = batch;
            for imp in ["uet-host", "uet-nic", "flat-slots"] {
                let figures = measure(imp, n, &a, &addrs)
                    .unwrap_or_else(|e| panic!("{imp} batch {batch}: {e}"));
                assert!(
                    figures.iter().any(|f| f.op == "insert_batch"),
                    "{imp}: {figures:?}"
                );
            }
        }
    }
}
