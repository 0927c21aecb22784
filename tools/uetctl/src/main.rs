//! `uetctl`: run the uet-nic demo job on the simulator and inspect NIC AV tables.

use clap::{Parser, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use uetctl::demo::{self, DemoConfig, DemoOutcome};
use uetctl::serve::{Daemon, ServeConfig};
use uetctl::{dump, stats};

#[derive(Parser)]
#[command(
    name = "uetctl",
    version,
    about = "Inspect and exercise uet-nic UET NICs"
)]
struct Cli {
    /// Print JSON for scripts instead of tables for people.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct JobArgs {
    /// Ranks in the job, each with its own simulated NIC.
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// Messages each rank sends to its right neighbour.
    #[arg(long, default_value_t = 8)]
    messages: u32,
    /// JobID of the job (24 bits).
    #[arg(long, default_value_t = 0x00_1234, value_parser = parse_u32)]
    job_id: u32,
    /// Tagged messages each rank sends to its right neighbour (half of them arrive before
    /// their receive is posted and wait on the NIC's unexpected list).
    #[arg(long, default_value_t = 4)]
    tagged: u32,
    /// Skip the RMA write and read into the right neighbour's memory region.
    #[arg(long)]
    no_rma: bool,
    /// Write every frame that crosses the simulated fabric to FILE (libpcap, Ethernet; UET is
    /// UDP port 4793 for Wireshark).
    #[arg(long, value_name = "FILE", conflicts_with = "vfio_user")]
    pcap: Option<PathBuf>,
    /// Host interface minor version of the simulated NICs (1.N): run the job on NICs older
    /// than the driver, from 7 to the current version.
    #[arg(long, default_value_t = uet_driver::uet_regs::INTERFACE_MINOR, conflicts_with = "vfio_user")]
    interface_minor: u8,
    /// Run on the NICs a simulator daemon serves in DIR (`uetctl sim serve --dir DIR`), rank
    /// i on DIR/nic<i>.sock over vfio-user, instead of NICs simulated in this process.
    #[arg(long, value_name = "DIR")]
    vfio_user: Option<PathBuf>,
}

impl From<JobArgs> for DemoConfig {
    fn from(a: JobArgs) -> Self {
        DemoConfig {
            ranks: a.ranks,
            messages: a.messages,
            job_id: a.job_id,
            tagged: a.tagged,
            rma: !a.no_rma,
            pcap: a.pcap,
            interface_minor: a.interface_minor,
            vfio_user: a.vfio_user,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the demo job: N ranks on simulated NICs exchange addresses (master-collect), fill
    /// their AVs and send to their right neighbour by fi_addr_t — messages, tagged messages,
    /// an RMA write and read; every byte is checked.
    Demo {
        #[command(flatten)]
        job: JobArgs,
    },
    /// Print NIC counters (BAR0) and the per-endpoint counters (COUNTERS_READ) of every rank.
    Stats {
        /// Run the demo job on the simulated fabric first and report its ranks.
        #[arg(long)]
        demo: bool,
        #[command(flatten)]
        job: JobArgs,
    },
    /// Print a NIC's BAR0 registers, decoded (reading has no side effects).
    Regs {
        /// Run the demo job on the simulated fabric first and read its NICs.
        #[arg(long)]
        demo: bool,
        /// Only this rank's NIC (default: every rank).
        #[arg(long)]
        rank: Option<usize>,
        #[command(flatten)]
        job: JobArgs,
    },
    /// Address vectors.
    Av {
        #[command(subcommand)]
        command: AvCommand,
    },
    /// The simulator.
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
}

#[derive(Subcommand)]
enum SimCommand {
    /// Serve simulated NICs on one fabric to drivers in other processes: NIC i (fabric
    /// address 10.0.0.(1 + i)) on the vfio-user socket DIR/nic<i>.sock, until stopped. Each
    /// line printed names a NIC and its socket; the last says the daemon is serving.
    Serve {
        /// Directory of the sockets (created if missing).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// NICs on the fabric.
        #[arg(long, default_value_t = 4)]
        nics: usize,
        /// Host interface minor version of the NICs (1.N), from 7 to the current version.
        #[arg(long, default_value_t = uet_driver::uet_regs::INTERFACE_MINOR)]
        interface_minor: u8,
    },
}

#[derive(Subcommand)]
enum AvCommand {
    /// Print NIC AV tables (read back with AV_READ) with the host mirror beside them.
    Dump {
        /// Dump the tables of the demo job's simulated fabric (run first).
        #[arg(long)]
        demo: bool,
        /// Only this rank's NIC (default: every rank).
        #[arg(long)]
        rank: Option<usize>,
        #[command(flatten)]
        job: JobArgs,
    },
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("UET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo { job } => run_demo(job.into(), cli.json),
        Command::Sim {
            command:
                SimCommand::Serve {
                    dir,
                    nics,
                    interface_minor,
                },
        } => serve(
            &ServeConfig {
                dir,
                nics,
                interface_minor,
            },
            cli.json,
        ),
        Command::Stats { demo, job } => {
            if !demo {
                eprintln!(
                    "uetctl stats: only the simulated demo job can be inspected so far \
                     (--demo); a live driver process needs its telemetry socket"
                );
                return ExitCode::from(2);
            }
            stats::run(&job.into(), cli.json)
        }
        Command::Regs { demo, rank, job } => {
            if !demo {
                eprintln!(
                    "uetctl regs: only the simulated demo fabric can be read so far (--demo); \
                     a NIC bound to vfio-pci needs the VFIO backend"
                );
                return ExitCode::from(2);
            }
            run_regs(job.into(), rank, cli.json)
        }
        Command::Av {
            command: AvCommand::Dump { demo, rank, job },
        } => {
            if !demo {
                eprintln!(
                    "uetctl av dump: only the simulated demo fabric can be dumped so far \
                     (--demo); dumping a live driver process needs its telemetry socket"
                );
                return ExitCode::from(2);
            }
            run_dump(job.into(), rank, cli.json)
        }
    }
}

fn run_regs(cfg: DemoConfig, rank: Option<usize>, as_json: bool) -> ExitCode {
    if let Err(code) = check_rank(&cfg, rank) {
        return code;
    }
    let outcome = match run_job(&cfg) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let captured = outcome.report_capture();
    let mut docs = Vec::new();
    for r in &outcome.ranks {
        if rank.is_some_and(|want| want != r.report.rank) {
            continue;
        }
        let values = uetctl::regs::read_all(r.nic.bar0());
        if as_json {
            docs.push(json!({
                "rank": r.report.rank,
                "nic": r.report.fabric_addr.to_string(),
                "registers": uetctl::regs::render_json(&values),
            }));
        } else {
            let title = format!("rank {} NIC {} BAR0", r.report.rank, r.report.fabric_addr);
            println!("{}", uetctl::regs::render_text(&title, &values));
        }
    }
    if as_json {
        println!(
            "{:#}",
            json!({ "nics": docs, "pcap": outcome.capture_json() })
        );
    }
    if captured {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Refuse a `--rank` the job will not have, before running it.
fn check_rank(cfg: &DemoConfig, rank: Option<usize>) -> Result<(), ExitCode> {
    match rank {
        Some(r) if r >= cfg.ranks => {
            eprintln!(
                "uetctl: --rank {r} out of range: the job has ranks 0..{}",
                cfg.ranks
            );
            Err(ExitCode::from(2))
        }
        _ => Ok(()),
    }
}

fn run_job(cfg: &DemoConfig) -> Result<DemoOutcome, ExitCode> {
    demo::run(cfg.clone()).map_err(|e| {
        eprintln!("uetctl: {e}");
        ExitCode::from(2)
    })
}

/// `uetctl sim serve`: bind every socket, say so, serve until the process is stopped.
fn serve(cfg: &ServeConfig, as_json: bool) -> ExitCode {
    let daemon = match Daemon::bind(cfg) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("uetctl sim serve: {e}");
            return ExitCode::from(2);
        }
    };
    if as_json {
        let nics: Vec<_> = daemon
            .nics()
            .iter()
            .enumerate()
            .map(|(i, (addr, path))| {
                json!({"nic": i, "fabric_addr": addr.to_string(), "socket": path.display().to_string()})
            })
            .collect();
        println!(
            "{}",
            json!({ "serving": nics, "interface_minor": cfg.interface_minor })
        );
    } else {
        for (i, (addr, path)) in daemon.nics().iter().enumerate() {
            println!("nic{i} {addr} {}", path.display());
        }
        println!(
            "serving {} NICs (interface 1.{}) in {}",
            cfg.nics,
            cfg.interface_minor,
            cfg.dir.display()
        );
    }
    // The lines are the readiness signal of whoever started the daemon.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    daemon.run()
}

fn run_demo(cfg: DemoConfig, as_json: bool) -> ExitCode {
    let mut outcome = match run_job(&cfg) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let captured = outcome.report_capture();
    let ok = outcome.ok(&cfg);
    // Every rank's NIC table is read back and compared; rank 0's is shown.
    let mut tables = Vec::with_capacity(outcome.ranks.len());
    for r in outcome.ranks.iter_mut() {
        match dump::collect(&mut r.av) {
            Ok(t) => tables.push(t),
            Err(e) => {
                eprintln!("uetctl: reading rank {}'s NIC AV table: {e}", r.report.rank);
                return ExitCode::FAILURE;
            }
        }
    }
    let Some(table) = tables.first() else {
        return ExitCode::FAILURE;
    };
    let differences: usize = tables.iter().map(dump::AvDump::differences).sum();
    let consistent = differences == 0;
    if as_json {
        let ranks: Vec<_> = outcome
            .ranks
            .iter()
            .map(|r| {
                let p = &r.report;
                json!({
                    "rank": p.rank,
                    "fabric_addr": p.fabric_addr.to_string(),
                    "pid_on_fep": p.pid_on_fep,
                    "ri_start": p.resource_indices.start,
                    "ri_end": p.resource_indices.end,
                    "initiator": p.initiator,
                    "av_size": p.av_size,
                    "sent": p.sent,
                    "received": p.received,
                    "tagged": {
                        "sent": p.tagged_sent,
                        "received": p.tagged_received,
                        "unexpected": p.tagged_unexpected,
                        "verified": p.tagged_received == cfg.tagged,
                    },
                    "rma": {
                        "bytes": p.rma_bytes,
                        "write_verified": p.rma_write_verified,
                        "read_verified": p.rma_read_verified,
                    },
                    "ok": p.ok(&cfg),
                    "errors": p.errors,
                })
            })
            .collect();
        let doc = json!({
            "ok": ok && consistent && captured,
            "job_id": cfg.job_id,
            "messages_per_rank": cfg.messages,
            "tagged_per_rank": cfg.tagged,
            "interface_minor": outcome.ranks.first().map_or(cfg.interface_minor, |r| r.nic.identity().interface_minor),
            "vfio_user": cfg.vfio_user.as_ref().map(|d| d.display().to_string()),
            "rma": cfg.rma,
            "ranks": ranks,
            "rank0_av": dump::render_json(table),
            "av_differences": differences,
            "pcap": outcome.capture_json(),
        });
        println!("{doc:#}");
    } else {
        println!(
            "uet-nic demo: {} ranks, job {:#x}, {} messages and {} tagged messages each to the right neighbour{}",
            cfg.ranks,
            cfg.job_id,
            cfg.messages,
            cfg.tagged,
            if cfg.rma {
                ", one RMA write and read of its memory region"
            } else {
                ""
            }
        );
        println!();
        println!(
            "{:<5} {:<15} {:>8} {:<10} {:>10} {:>7} {:>5} {:>9} {:>7} {:>8} {:>6} {:>9} {:>8}  STATUS",
            "RANK",
            "FABRIC ADDRESS",
            "PIDonFEP",
            "RI RANGE",
            "INITIATOR",
            "AV SIZE",
            "SENT",
            "RECEIVED",
            "TSENT",
            "TRECV",
            "UNEXP",
            "RMA WRITE",
            "RMA READ"
        );
        let rma_cell = |bytes: usize, ok: bool| {
            if !cfg.rma {
                "-".to_string()
            } else if ok {
                format!("{bytes} ok")
            } else {
                "FAILED".to_string()
            }
        };
        for r in &outcome.ranks {
            let p = &r.report;
            let status = if p.ok(&cfg) {
                "ok".to_string()
            } else {
                format!("FAILED: {}", p.errors.join("; "))
            };
            println!(
                "{:<5} {:<15} {:>8} {:<10} {:>10} {:>7} {:>5} {:>9} {:>7} {:>8} {:>6} {:>9} {:>8}  {}",
                p.rank,
                p.fabric_addr.to_string(),
                p.pid_on_fep,
                format!("{}..{}", p.resource_indices.start, p.resource_indices.end),
                format!("{:#x}", p.initiator),
                p.av_size,
                p.sent,
                p.received,
                p.tagged_sent,
                p.tagged_received,
                p.tagged_unexpected,
                rma_cell(p.rma_bytes, p.rma_write_verified),
                rma_cell(p.rma_bytes, p.rma_read_verified),
                status
            );
        }
        println!();
        print!("{}", dump::render_text("rank 0 NIC AV table", table));
        println!();
        let total: u32 = outcome.ranks.iter().map(|r| r.report.received).sum();
        let tagged: u32 = outcome.ranks.iter().map(|r| r.report.tagged_received).sum();
        let rma = outcome
            .ranks
            .iter()
            .filter(|r| r.report.rma_write_verified && r.report.rma_read_verified)
            .count();
        if ok && consistent {
            println!(
                "ok: {total} of {} messages delivered and verified; the NIC AV tables of all {} ranks match their host mirrors",
                cfg.messages as usize * cfg.ranks,
                cfg.ranks
            );
            println!(
                "ok: {tagged} of {} tagged messages matched and verified",
                cfg.tagged as usize * cfg.ranks
            );
            if cfg.rma {
                println!(
                    "ok: {rma} of {} RMA writes verified at the target and read back",
                    cfg.ranks
                );
            }
        } else {
            println!(
                "FAILED: {total} of {} messages, {tagged} of {} tagged messages, {rma} of {} RMA write/read pairs verified; {} NIC/mirror differences",
                cfg.messages as usize * cfg.ranks,
                cfg.tagged as usize * cfg.ranks,
                if cfg.rma { cfg.ranks } else { 0 },
                differences
            );
        }
    }
    if !as_json && !captured {
        println!("FAILED: the packet capture was not written completely");
    }
    if ok && consistent && captured {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_dump(cfg: DemoConfig, rank: Option<usize>, as_json: bool) -> ExitCode {
    if let Err(code) = check_rank(&cfg, rank) {
        return code;
    }
    let mut outcome = match run_job(&cfg) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let captured = outcome.report_capture();
    let mut docs = Vec::new();
    let mut differences = 0;
    for r in outcome.ranks.iter_mut() {
        if rank.is_some_and(|want| want != r.report.rank) {
            continue;
        }
        match dump::collect(&mut r.av) {
            Ok(table) => {
                differences += table.differences();
                let title = format!(
                    "rank {} NIC {} AV table",
                    r.report.rank, r.report.fabric_addr
                );
                if as_json {
                    docs.push(json!({
                        "rank": r.report.rank,
                        "nic": r.report.fabric_addr.to_string(),
                        "table": dump::render_json(&table),
                    }));
                } else {
                    println!("{}", dump::render_text(&title, &table));
                }
            }
            Err(e) => {
                eprintln!("uetctl: rank {}: {e}", r.report.rank);
                return ExitCode::FAILURE;
            }
        }
    }
    if as_json {
        println!(
            "{:#}",
            json!({
                "tables": docs,
                "differences": differences,
                "pcap": outcome.capture_json(),
            })
        );
    }
    if differences == 0 && captured {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
