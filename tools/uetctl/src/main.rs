//! `uetctl`: run the uet-nic demo job on the simulator and inspect NIC AV tables.

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use uet_driver::backend::sysfs::{Bound, PciAddress, Sysfs, Unbound, VFIO_PCI};
use uetctl::demo::{self, DemoConfig, DemoOutcome};
use uetctl::live::{self, Client, Target};
use uetctl::serve::{Daemon, ServeConfig};
use uetctl::{dump, out, outln, stats};

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
    /// Ranks in the job, each with its own NIC (default 4; with --vfio, one per function).
    #[arg(long)]
    ranks: Option<usize>,
    /// Messages each rank sends to its right neighbour.
    #[arg(long, default_value_t = 8)]
    messages: u32,
    /// JobID of the job (24 bits, not 0).
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
    /// Run on these NICs, PCI functions bound to vfio-pci (`uetctl bind`), comma-separated:
    /// rank i on the i-th, through kernel VFIO; they must share a fabric. (`regs --vfio`
    /// without --demo only reads their registers.)
    #[arg(long, value_name = "ADDRESS,...", value_delimiter = ',', conflicts_with_all = ["vfio_user", "pcap", "interface_minor"])]
    vfio: Vec<PciAddress>,
}

/// Where sysfs and procfs are mounted.
#[derive(clap::Args, Clone)]
struct SysRoots {
    /// Where sysfs is mounted.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs: PathBuf,
    /// Where procfs is mounted (to find processes holding the function open).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    procfs: PathBuf,
}

impl SysRoots {
    fn sysfs(&self) -> Sysfs {
        Sysfs::new(&self.sysfs, &self.procfs)
    }
}

/// Which live process to inspect, through its driver's telemetry socket.
#[derive(clap::Args, Clone)]
struct LiveArgs {
    /// Inspect the live process PID through its driver's telemetry socket
    /// (`$UET_NIC_TELEMETRY_DIR/<PID>.sock`; `uetctl ps` lists them).
    #[arg(long, conflicts_with_all = ["demo", "ranks", "messages", "job_id", "tagged", "no_rma", "pcap", "interface_minor", "vfio_user"])]
    pid: Option<u32>,
    /// Inspect the live process serving this telemetry socket.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["demo", "pid", "ranks", "messages", "job_id", "tagged", "no_rma", "pcap", "interface_minor", "vfio_user"])]
    socket: Option<PathBuf>,
    /// Only this NIC of the live process (its number in `uetctl ps`; default: every open
    /// NIC).
    #[arg(long)]
    nic: Option<u64>,
}

impl LiveArgs {
    fn target(&self) -> Option<Target> {
        match (&self.pid, &self.socket) {
            (Some(pid), _) => Some(Target::Pid(*pid)),
            (None, Some(path)) => Some(Target::Socket(path.clone())),
            (None, None) => None,
        }
    }
}

impl From<JobArgs> for DemoConfig {
    fn from(a: JobArgs) -> Self {
        DemoConfig {
            ranks: a.ranks.unwrap_or(if a.vfio.is_empty() {
                DemoConfig::default().ranks
            } else {
                a.vfio.len()
            }),
            messages: a.messages,
            job_id: a.job_id,
            tagged: a.tagged,
            rma: !a.no_rma,
            pcap: a.pcap,
            interface_minor: a.interface_minor,
            vfio_user: a.vfio_user,
            vfio: a.vfio,
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
        /// Serve the driver's telemetry socket from before the job (as `UET_NIC_TELEMETRY=1`
        /// does), so `uetctl ps`, `av dump --pid`, `ep list --pid`, `regs --pid` and `stats
        /// --pid` can inspect this process; its NICs are numbered in the order the ranks
        /// opened them.
        #[arg(long)]
        telemetry: bool,
        /// Stay alive this many seconds after the job, NICs and AVs open (to inspect it with
        /// --telemetry or `UET_NIC_TELEMETRY=1`).
        #[arg(long, value_name = "SECONDS")]
        linger: Option<u64>,
    },
    /// List the live processes whose driver answers a telemetry socket, with their NICs and
    /// AV tables.
    Ps {
        /// Directory of the telemetry sockets (default: `$UET_NIC_TELEMETRY_DIR`, else
        /// `$XDG_RUNTIME_DIR/uet-nic`, else `/run/uet-nic` for root, else
        /// `/tmp/uet-nic-<uid>`).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print NIC counters (BAR0) and the per-endpoint counters (COUNTERS_READ) of every rank
    /// of the demo job (--demo); of a live process (--pid, --socket), the counters of its NICs
    /// (`uetctl ep list` shows its endpoints' counters).
    Stats {
        /// Run the demo job on the simulated fabric first and report its ranks.
        #[arg(long)]
        demo: bool,
        #[command(flatten)]
        job: JobArgs,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// List the uet-nic PCI functions on this machine: address, driver, IOMMU group.
    Pci {
        #[command(flatten)]
        roots: SysRoots,
    },
    /// Give a NIC's PCI function to vfio-pci, so the driver can open it: set its
    /// driver_override, release it from its driver, probe it. Only a uet-nic function in an
    /// IOMMU group is taken; needs root.
    Bind {
        /// The function, domain:bus:device.function (as `lspci -D` prints it) or
        /// bus:device.function.
        address: PciAddress,
        #[command(flatten)]
        roots: SysRoots,
    },
    /// Release a NIC's PCI function from vfio-pci (refused while a process has it open).
    Unbind {
        /// The function, as for `bind`.
        address: PciAddress,
        #[command(flatten)]
        roots: SysRoots,
    },
    /// Print a NIC's BAR0 registers, decoded (reading has no side effects).
    Regs {
        /// Run the demo job on the simulated fabric first and read its NICs.
        #[arg(long)]
        demo: bool,
        /// Only this rank's NIC (default: every rank); of the demo job (a live process's NIC
        /// is --nic).
        #[arg(long, conflicts_with_all = ["pid", "socket"])]
        rank: Option<usize>,
        #[command(flatten)]
        job: JobArgs,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// Endpoints.
    Ep {
        #[command(subcommand)]
        command: EpCommand,
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
        /// Entries of AV table memory each NIC has, shared by its tables: an fi_av_open
        /// past it is FI_ENOSPC (a table of a million entries takes about 88 MiB of the
        /// daemon's memory).
        #[arg(long, value_name = "N", default_value_t = uetctl::serve::DEFAULT_AV_TABLE_ENTRIES)]
        av_table_entries: u64,
    },
}

#[derive(Subcommand)]
enum EpCommand {
    /// List the endpoints and contexts of a live process's NICs: address, JobID, AV table,
    /// message counters (the NIC's, read with COUNTERS_READ).
    List {
        /// The live process (its PID).
        #[arg(long, required_unless_present = "socket")]
        pid: Option<u32>,
        /// The live process serving this telemetry socket.
        #[arg(long, value_name = "PATH", conflicts_with = "pid")]
        socket: Option<PathBuf>,
        /// Only this NIC of the process (default: every open NIC).
        #[arg(long)]
        nic: Option<u64>,
    },
}

#[derive(Subcommand)]
enum AvCommand {
    /// Print NIC AV tables (read back with AV_READ): of the demo job with the host mirror
    /// beside them (--demo), or of a live process through its telemetry socket (--pid).
    /// Exits as diff(1) does: 0 when NIC and mirror (or named AV) agree, 1 when they differ
    /// (or a --pcap capture was not written completely), 2 when a table could not be dumped.
    Dump {
        /// Dump the tables of the demo job's simulated fabric (run first).
        #[arg(long)]
        demo: bool,
        /// Only this rank's NIC (default: every rank); of the demo job (a live process's NIC
        /// is --nic).
        #[arg(long, conflicts_with_all = ["pid", "socket"])]
        rank: Option<usize>,
        #[command(flatten)]
        job: JobArgs,
        #[command(flatten)]
        live: LiveArgs,
        /// Only this AV table of the live process (its NIC handle, as `uetctl ps` lists).
        #[arg(long)]
        table: Option<u32>,
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
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(code) = live_options_without_target(&cli.command) {
        return code;
    }
    if let Some(code) = vfio_with_live_target(&cli.command) {
        return code;
    }
    match cli.command {
        Command::Demo {
            job,
            telemetry,
            linger,
        } => run_demo(job.into(), telemetry, linger, cli.json),
        Command::Ps { dir } => run_ps(dir, cli.json),
        Command::Ep {
            command: EpCommand::List { pid, socket, nic },
        } => {
            let live = LiveArgs { pid, socket, nic };
            match live.target() {
                Some(target) => exit_code(live_endpoints(&target, nic, cli.json)),
                None => needs_target("ep list"),
            }
        }
        Command::Sim {
            command:
                SimCommand::Serve {
                    dir,
                    nics,
                    interface_minor,
                    av_table_entries,
                },
        } => serve(
            &ServeConfig {
                dir,
                nics,
                interface_minor,
                av_table_entries,
            },
            cli.json,
        ),
        Command::Stats { demo, job, live } => match live.target() {
            Some(target) => exit_code(live_stats(&target, live.nic, cli.json)),
            None if demo => stats::run(&job.into(), cli.json),
            None => needs_target("stats"),
        },
        Command::Pci { roots } => list_pci(&roots, cli.json),
        Command::Bind { address, roots } => bind(address, &roots, cli.json),
        Command::Unbind { address, roots } => unbind(address, &roots, cli.json),
        Command::Regs {
            demo: false,
            rank,
            job,
            live,
        } if !job.vfio.is_empty() => {
            let job_options = matches
                .subcommand_matches("regs")
                .map_or_else(Vec::new, job_options_given);
            if live.target().is_some() || rank.is_some() || !job_options.is_empty() {
                eprintln!(
                    "uetctl regs: --vfio without --demo reads the functions named; \
                     --pid, --socket, --nic, --rank and the job's options ({}) do not apply",
                    if job_options.is_empty() {
                        "--ranks, --messages, --job-id, --tagged, --no-rma".to_string()
                    } else {
                        job_options.join(", ")
                    }
                );
                return ExitCode::from(2);
            }
            vfio_regs(&job.vfio, cli.json)
        }
        Command::Regs {
            demo,
            rank,
            job,
            live,
        } => match live.target() {
            Some(target) => exit_code(live_regs(&target, live.nic, cli.json)),
            None if demo => run_regs(job.into(), rank, cli.json),
            None => needs_target("regs"),
        },
        Command::Av {
            command:
                AvCommand::Dump {
                    demo,
                    rank,
                    job,
                    live,
                    table,
                },
        } => match live.target() {
            Some(target) => exit_code(live_dump(&target, live.nic, table, cli.json)),
            None if demo => run_dump(job.into(), rank, cli.json),
            None => needs_target("av dump"),
        },
    }
}

/// `uetctl pci`.
fn list_pci(roots: &SysRoots, as_json: bool) -> ExitCode {
    let functions = match roots.sysfs().functions() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("uetctl pci: {e}");
            return ExitCode::FAILURE;
        }
    };
    if as_json {
        let list: Vec<_> = functions
            .iter()
            .map(|f| {
                json!({
                    "address": f.address.to_string(),
                    "driver": f.driver,
                    "iommu_group": f.iommu_group,
                })
            })
            .collect();
        outln!("{}", json!({ "functions": list }));
        return ExitCode::SUCCESS;
    }
    if functions.is_empty() {
        outln!("no uet-nic function on the PCI bus");
        return ExitCode::SUCCESS;
    }
    outln!("{:<14} {:<10} IOMMU GROUP", "ADDRESS", "DRIVER");
    for f in &functions {
        let group = f.iommu_group.map_or("-".to_string(), |g| g.to_string());
        outln!(
            "{:<14} {:<10} {group}",
            f.address.to_string(),
            f.driver.as_deref().unwrap_or("-")
        );
    }
    ExitCode::SUCCESS
}

/// `uetctl bind`.
fn bind(address: PciAddress, roots: &SysRoots, as_json: bool) -> ExitCode {
    match roots.sysfs().bind_vfio(address) {
        Ok(bound) => {
            let was = match &bound {
                Bound::Already => Some(VFIO_PCI.to_string()),
                Bound::Rebound { from } => from.clone(),
            };
            if as_json {
                outln!(
                    "{}",
                    json!({"address": address.to_string(), "driver": VFIO_PCI, "was": was})
                );
            } else if bound == Bound::Already {
                outln!("{address} is bound to {VFIO_PCI} already");
            } else {
                let was = was.as_deref().unwrap_or("no driver");
                outln!("{address} bound to {VFIO_PCI} (was {was})");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("uetctl bind: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `uetctl unbind`.
fn unbind(address: PciAddress, roots: &SysRoots, as_json: bool) -> ExitCode {
    match roots.sysfs().unbind_vfio(address) {
        Ok(unbound) => {
            let now = match &unbound {
                Unbound::NotBound => None,
                Unbound::Released { now } => now.clone(),
            };
            if as_json {
                outln!(
                    "{}",
                    json!({"address": address.to_string(), "released": unbound != Unbound::NotBound, "driver": now})
                );
            } else if unbound == Unbound::NotBound {
                outln!("{address} is bound to no driver already");
            } else {
                let now = now.as_deref().unwrap_or("no driver");
                outln!("{address} released from {VFIO_PCI} (now {now})");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("uetctl unbind: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `uetctl regs --vfio ADDRESS,...`: each function's BAR0, read through kernel VFIO. Opening
/// a function enables memory space and bus mastering, as the driver does; the registers are
/// only read. Every function is opened before anything is printed.
fn vfio_regs(addresses: &[PciAddress], as_json: bool) -> ExitCode {
    let mut devices = Vec::with_capacity(addresses.len());
    for &address in addresses {
        match uet_driver::backend::vfio::VfioDevice::open(address) {
            Ok(d) => devices.push(d),
            Err(e) => {
                eprintln!("uetctl regs: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    // Every function read before anything is printed, as each was opened: one that is no
    // uet-nic's to decode (reads all ones, another device) fails the command.
    let mut read = Vec::with_capacity(devices.len());
    for device in &devices {
        let address = device.address();
        match uetctl::regs::read_all(uet_driver::device::Device::bar0(device)) {
            Ok(values) => read.push((address, values)),
            Err(e) => {
                eprintln!("uetctl regs: {address}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut docs = Vec::new();
    for (address, values) in read {
        if as_json {
            docs.push(json!({"address": address.to_string(), "registers": uetctl::regs::render_json(&values)}));
        } else {
            outln!(
                "{}",
                uetctl::regs::render_text(&format!("NIC {address} BAR0"), &values)
            );
        }
    }
    if as_json {
        outln!("{}", json!({ "nics": docs }));
    }
    ExitCode::SUCCESS
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
        let values = match uetctl::regs::read_all(r.nic.bar0()) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("uetctl regs: rank {}: {e}", r.report.rank);
                return ExitCode::FAILURE;
            }
        };
        if as_json {
            docs.push(json!({
                "rank": r.report.rank,
                "nic": r.report.fabric_addr.to_string(),
                "registers": uetctl::regs::render_json(&values),
            }));
        } else {
            let title = format!("rank {} NIC {} BAR0", r.report.rank, r.report.fabric_addr);
            outln!("{}", uetctl::regs::render_text(&title, &values));
        }
    }
    if as_json {
        outln!(
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

/// `uetctl sim serve`: bind every socket, say so, serve until the process is stopped. The
/// lines are printed once a stop signal would remove the sockets ([`Daemon::run`]); lines
/// that cannot be written told no one that the daemon serves, and it does not: its sockets
/// are removed, and standard output's failure ends the process as for any command
/// ([`out`](mod@out)).
fn serve(cfg: &ServeConfig, as_json: bool) -> ExitCode {
    use std::io::Write;
    let daemon = match Daemon::bind(cfg) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("uetctl sim serve: {e}");
            return ExitCode::from(2);
        }
    };
    let failed = daemon.run(|served| {
        let mut stdout = std::io::stdout().lock();
        if as_json {
            let nics: Vec<_> = served
                .iter()
                .enumerate()
                .map(|(i, (addr, path))| {
                    json!({"nic": i, "fabric_addr": addr.to_string(), "socket": path.display().to_string()})
                })
                .collect();
            writeln!(
                stdout,
                "{}",
                json!({ "serving": nics, "interface_minor": cfg.interface_minor })
            )?;
        } else {
            for (i, (addr, path)) in served.iter().enumerate() {
                writeln!(stdout, "nic{i} {addr} {}", path.display())?;
            }
            writeln!(
                stdout,
                "serving {} NICs (interface 1.{}) in {}",
                cfg.nics,
                cfg.interface_minor,
                cfg.dir.display()
            )?;
        }
        // The lines are the readiness signal of whoever started the daemon.
        stdout.flush()
    });
    out::ended(&failed)
}

/// The options of the demo job (those `--vfio` leaves allowed) given on the command line of
/// a subcommand, `matches`: a default is not given.
fn job_options_given(matches: &ArgMatches) -> Vec<&'static str> {
    [
        ("ranks", "--ranks"),
        ("messages", "--messages"),
        ("job_id", "--job-id"),
        ("tagged", "--tagged"),
        ("no_rma", "--no-rma"),
    ]
    .into_iter()
    .filter(|(id, _)| matches.value_source(id) == Some(ValueSource::CommandLine))
    .map(|(_, option)| option)
    .collect()
}

/// `--nic` and `--table` name parts of a live process: refused (exit 2) without one.
fn live_options_without_target(command: &Command) -> Option<ExitCode> {
    let (live, table) = match command {
        Command::Stats { live, .. } | Command::Regs { live, .. } => (live, None),
        Command::Av {
            command: AvCommand::Dump { live, table, .. },
        } => (live, *table),
        _ => return None,
    };
    if live.target().is_some() {
        return None;
    }
    let option = if live.nic.is_some() {
        "--nic"
    } else if table.is_some() {
        "--table"
    } else {
        return None;
    };
    eprintln!("uetctl: {option} names a part of a live process: give --pid or --socket too");
    Some(ExitCode::from(2))
}

/// `--vfio` names the demo job's NICs: refused (exit 2) beside `--pid` or `--socket`, which
/// inspect a live process instead (the job's other options are refused by the parser; `regs
/// --vfio` without `--demo` says so itself).
fn vfio_with_live_target(command: &Command) -> Option<ExitCode> {
    let (what, job, live) = match command {
        Command::Stats { job, live, .. } => ("stats", job, live),
        Command::Av {
            command: AvCommand::Dump { job, live, .. },
        } => ("av dump", job, live),
        _ => return None,
    };
    if job.vfio.is_empty() || live.target().is_none() {
        return None;
    }
    eprintln!(
        "uetctl {what}: --vfio runs the demo job on those NICs; --pid and --socket inspect a \
         live process instead"
    );
    Some(ExitCode::from(2))
}

fn needs_target(what: &str) -> ExitCode {
    eprintln!(
        "uetctl {what}: say what to inspect: --pid PID or --socket PATH for a live process \
         (`uetctl ps` lists them), or --demo for the simulated demo job"
    );
    ExitCode::from(2)
}

/// A live process being inspected: the conversation, its PID and the NICs to inspect.
struct Live {
    client: Client,
    pid: u64,
    nics: Vec<u64>,
}

impl Live {
    /// Connect and choose the NICs (`nic`, or every open one); or say why not (exit 2).
    fn open(target: &Target, nic: Option<u64>) -> Result<Live, ExitCode> {
        let fail = |e: String| {
            eprintln!("uetctl: {e}");
            ExitCode::from(2)
        };
        let mut client = Client::connect(target).map_err(fail)?;
        let pid = client
            .hello
            .get("pid")
            .and_then(|p| p.as_u64())
            .unwrap_or(0);
        let nics = match nic {
            Some(n) => vec![n],
            None => client.open_nics().map_err(fail)?,
        };
        Ok(Live { client, pid, nics })
    }

    /// `ask` of NIC `n`; its error said, naming the process and the NIC (exit 2).
    fn on<T>(
        &mut self,
        n: u64,
        ask: impl FnOnce(&mut Client, u64) -> Result<T, String>,
    ) -> Result<T, ExitCode> {
        ask(&mut self.client, n).map_err(|e| {
            eprintln!("uetctl: process {} NIC {n}: {e}", self.pid);
            ExitCode::from(2)
        })
    }
}

/// What a live command returns, early exits included.
fn exit_code(r: Result<ExitCode, ExitCode>) -> ExitCode {
    r.unwrap_or_else(|code| code)
}

fn live_dump(
    target: &Target,
    nic: Option<u64>,
    table: Option<u32>,
    as_json: bool,
) -> Result<ExitCode, ExitCode> {
    let mut live = Live::open(target, nic)?;
    let pid = live.pid;
    let mut docs = Vec::new();
    let mut found = false;
    let mut differences = 0;
    for n in live.nics.clone() {
        let tables = live.on(n, live::tables)?;
        for listed in tables {
            let handle = listed.handle;
            if table.is_some_and(|t| t != handle) {
                continue;
            }
            found = true;
            let dump = match live::av_dump_listed(&mut live.client, n, &listed) {
                Ok(dump) => dump,
                // A table the process closed after it was listed is no longer one of its
                // tables: the dump is of the others. One asked for by number is an error.
                Err(live::DumpError::Closed(why)) if table.is_none() => {
                    eprintln!("uetctl: process {pid} NIC {n}: {why}; not dumped");
                    continue;
                }
                Err(e) => {
                    eprintln!("uetctl: process {pid} NIC {n}: {e}");
                    return Err(ExitCode::from(2));
                }
            };
            differences += dump.differences();
            if as_json {
                docs.push((n, handle, dump));
            } else {
                let title = format!("process {pid} NIC {n} AV table {handle}");
                outln!("{}", dump::render_text(&title, &dump));
            }
        }
    }
    if let (Some(t), false) = (table, found) {
        eprintln!("uetctl: process {pid} has no AV table {t} (uetctl ps lists its tables)");
        return Err(ExitCode::from(2));
    }
    if as_json {
        // Written as it is serialized: a table of a million entries, built as one JSON
        // value, would take gigabytes. Keys in alphabetical order, as `json!` prints them.
        #[derive(serde::Serialize)]
        struct Table<'a> {
            av: dump::Json<'a>,
            nic: u64,
            table: u32,
        }
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            pid: u64,
            tables: Vec<Table<'a>>,
        }
        let tables = docs
            .iter()
            .map(|(nic, table, d)| Table {
                av: dump::Json(d),
                nic: *nic,
                table: *table,
            })
            .collect();
        out::json_pretty(&Doc { pid, tables });
    } else if !found {
        outln!("process {pid}: no AV tables");
    }
    // As `av dump --demo` and diff(1): 1 when NIC and the other side differ.
    Ok(if differences == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn live_regs(target: &Target, nic: Option<u64>, as_json: bool) -> Result<ExitCode, ExitCode> {
    let mut live = Live::open(target, nic)?;
    let pid = live.pid;
    if live.nics.is_empty() && !as_json {
        outln!("process {pid}: no open NIC");
        return Ok(ExitCode::SUCCESS);
    }
    let mut docs = Vec::new();
    for n in live.nics.clone() {
        let values = live.on(n, live::regs)?;
        if as_json {
            docs.push(json!({ "nic": n, "registers": uetctl::regs::render_json(&values) }));
        } else {
            let title = format!("process {pid} NIC {n} BAR0");
            outln!("{}", uetctl::regs::render_text(&title, &values));
        }
    }
    if as_json {
        outln!("{:#}", json!({ "pid": pid, "nics": docs }));
    }
    Ok(ExitCode::SUCCESS)
}

fn live_stats(target: &Target, nic: Option<u64>, as_json: bool) -> Result<ExitCode, ExitCode> {
    let mut live = Live::open(target, nic)?;
    let pid = live.pid;
    if live.nics.is_empty() && !as_json {
        outln!("process {pid}: no open NIC");
        return Ok(ExitCode::SUCCESS);
    }
    let nics = live.nics.clone();
    let mut columns = Vec::new();
    for &n in &nics {
        columns.push(live.on(n, live::counters)?);
    }
    if as_json {
        let docs: Vec<_> = nics
            .iter()
            .zip(&columns)
            .map(|(n, c)| {
                let m: serde_json::Map<String, serde_json::Value> =
                    c.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                json!({ "nic": n, "counters": m })
            })
            .collect();
        outln!("{:#}", json!({ "pid": pid, "nics": docs }));
        return Ok(ExitCode::SUCCESS);
    }
    // Every NIC's counters, in the order first seen: NICs of different interface versions
    // have different counters, and one a NIC lacks is shown as "-".
    // Looked up by hash: a process may send any number of counters, and a search of the
    // list for each would take time of the square of their number.
    let mut names: Vec<&str> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (k, _) in columns.iter().flatten() {
        if seen.insert(k.as_str()) {
            names.push(k.as_str());
        }
    }
    let values: Vec<std::collections::HashMap<&str, u64>> = columns
        .iter()
        .map(|c| c.iter().map(|(k, v)| (k.as_str(), *v)).collect())
        .collect();
    let width = names
        .iter()
        .map(|n| out::printable(n).len())
        .max()
        .unwrap_or(7)
        .max(7);
    // Each NIC's column as wide as its widest figure (a byte counter may have 20 digits).
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| {
            c.iter()
                .map(|(_, v)| v.to_string().len())
                .max()
                .unwrap_or(0)
                .max(14)
        })
        .collect();
    out!("{:<width$}", "COUNTER");
    for (n, w) in nics.iter().zip(&widths) {
        out!(" {:>w$}", format!("NIC {n}"));
    }
    outln!();
    for name in names {
        out!("{:<width$}", out::printable(name));
        for (c, w) in values.iter().zip(&widths) {
            let v = c.get(name);
            out!(" {:>w$}", v.map_or("-".to_string(), |v| v.to_string()));
        }
        outln!();
    }
    Ok(ExitCode::SUCCESS)
}

fn live_endpoints(target: &Target, nic: Option<u64>, as_json: bool) -> Result<ExitCode, ExitCode> {
    let mut live = Live::open(target, nic)?;
    let pid = live.pid;
    let mut rows = Vec::new();
    for n in live.nics.clone() {
        let eps = live.on(n, live::endpoints)?;
        rows.extend(eps.into_iter().map(|e| (n, e)));
    }
    if as_json {
        let docs: Vec<_> = rows
            .iter()
            .map(|(n, e)| {
                let mut doc = e.info.clone();
                if let Some(o) = doc.as_object_mut() {
                    o.insert("nic".into(), json!(n));
                    o.insert(
                        "counters".into(),
                        match &e.counters {
                            Ok(c) => c.iter().map(|(k, v)| (k.clone(), json!(v))).collect(),
                            Err(_) => serde_json::Value::Null,
                        },
                    );
                }
                doc
            })
            .collect();
        outln!("{:#}", json!({ "pid": pid, "endpoints": docs }));
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        outln!("process {pid}: no endpoints");
        return Ok(ExitCode::SUCCESS);
    }
    let s = |e: &live::LiveEndpoint, k: &str| match e.info.get(k) {
        Some(serde_json::Value::String(v)) => out::printable(v).into_owned(),
        Some(serde_json::Value::Null) | None => "-".to_string(),
        Some(v) => v.to_string(),
    };
    outln!(
        "{:<4} {:<5} {:<6} {:<16} {:>8} {:<10} {:>10} {:>8} {:>8} {:>5} {:>10} {:>10}",
        "NIC",
        "EP",
        "TYPE",
        "FABRIC ADDRESS",
        "PIDonFEP",
        "RI RANGE",
        "INITIATOR",
        "JOBID",
        "AV TABLE",
        "MSI-X",
        "TX MSGS",
        "RX MSGS"
    );
    for (n, e) in &rows {
        let count = |name: &str| match &e.counters {
            Ok(c) => c
                .iter()
                .find(|(k, _)| k == name)
                .map_or("-".to_string(), |(_, v)| v.to_string()),
            Err(_) => "?".to_string(),
        };
        // A field the process did not send (or sent as other than a number) is shown as
        // `-`, as a missing string is: a 0 would read as a value the endpoint has.
        let num = |k: &str| e.info.get(k).and_then(serde_json::Value::as_u64);
        let hex = |k: &str| num(k).map_or("-".to_string(), |v| format!("{v:#x}"));
        let ri_range = match (num("ri_start"), num("ri_count")) {
            // Figures the process sent: a sum of two may pass 64 bits.
            (Some(start), Some(count)) => format!("{start}..{}", start.saturating_add(count)),
            _ => "-".to_string(),
        };
        outln!(
            "{:<4} {:<5} {:<6} {:<16} {:>8} {:<10} {:>10} {:>8} {:>8} {:>5} {:>10} {:>10}",
            n,
            s(e, "endpoint"),
            s(e, "type"),
            s(e, "fabric_addr"),
            s(e, "pid_on_fep"),
            ri_range,
            hex("initiator"),
            hex("job_id"),
            s(e, "av_table"),
            s(e, "msix_vector"),
            count("tx_messages"),
            count("rx_messages"),
        );
        if let Err(why) = &e.counters {
            outln!("     counters not read: {}", out::printable(why));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_ps(dir: Option<PathBuf>, as_json: bool) -> ExitCode {
    let dir = dir.unwrap_or_else(uet_driver::telemetry::default_dir);
    let procs = match live::processes(&dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("uetctl ps: {e}");
            return ExitCode::from(2);
        }
    };
    if as_json {
        // A process that is there but did not answer carries its `error`: exit 1, as below.
        let unanswered = procs.iter().any(|p| p.get("error").is_some());
        outln!(
            "{:#}",
            json!({ "dir": dir.display().to_string(), "processes": procs })
        );
        return if unanswered {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    // Processes that are there but did not answer (busy with other clients, or stuck) are
    // named, not taken for gone.
    let (procs, unanswered): (Vec<_>, Vec<_>) =
        procs.into_iter().partition(|p| p.get("error").is_none());
    for p in &unanswered {
        let socket = p.get("socket").and_then(|v| v.as_str()).unwrap_or("");
        let why = p.get("error").and_then(|v| v.as_str()).unwrap_or("");
        eprintln!("uetctl ps: {socket}: not listed: {why}");
    }
    let exit = if unanswered.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if procs.is_empty() {
        outln!("no uet-nic process answers in {}", dir.display());
        return exit;
    }
    outln!(
        "{:<8} {:<16} {:<4} {:<16} {:<10} AV TABLES (handle: capacity)",
        "PID",
        "PROGRAM",
        "NIC",
        "FABRIC ADDRESS",
        "INTERFACE"
    );
    for p in &procs {
        let pid = p.get("pid").and_then(|v| v.as_u64()).unwrap_or(0);
        let program = out::printable(p.get("program").and_then(|v| v.as_str()).unwrap_or(""));
        let nics = p
            .get("nics")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        if nics.is_empty() {
            outln!("{pid:<8} {program:<16} -");
        }
        for n in nics {
            let num = n.get("nic").and_then(|v| v.as_u64()).unwrap_or(0);
            if n.get("open").and_then(|v| v.as_bool()) != Some(true) {
                outln!("{pid:<8} {program:<16} {num:<4} (closed)");
                continue;
            }
            let addr = out::printable(n.get("fabric_addr").and_then(|v| v.as_str()).unwrap_or(""));
            let minor = n
                .get("interface_minor")
                .and_then(|v| v.as_u64())
                .unwrap_or(0);
            let tables: Vec<String> = n
                .get("av_tables")
                .and_then(|v| v.as_array())
                .map(|ts| {
                    ts.iter()
                        .map(|t| {
                            let named = t
                                .pointer("/named/name")
                                .and_then(|v| v.as_str())
                                .map_or(String::new(), |name| {
                                    format!(" named AV '{}'", out::printable(name))
                                });
                            format!(
                                "{}: {}{named}",
                                t.get("table").and_then(|v| v.as_u64()).unwrap_or(0),
                                t.get("capacity").and_then(|v| v.as_u64()).unwrap_or(0)
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            outln!(
                "{pid:<8} {program:<16} {num:<4} {addr:<16} {:<10} {}",
                format!("1.{minor}"),
                if tables.is_empty() {
                    "-".to_string()
                } else {
                    tables.join(", ")
                }
            );
        }
    }
    exit
}

fn run_demo(cfg: DemoConfig, telemetry: bool, linger: Option<u64>, as_json: bool) -> ExitCode {
    // Before the job, so that every NIC answers from the moment it is open.
    let telemetry_path = match telemetry.then(uet_driver::telemetry::enable) {
        None => uet_driver::telemetry::global_path(),
        Some(Ok(path)) => Some(path),
        Some(Err(e)) => {
            eprintln!("uetctl: {e}");
            return ExitCode::from(2);
        }
    };
    let mut outcome = match run_job(&cfg) {
        Ok(o) => o,
        Err(code) => return code,
    };
    // Or started by the first NIC the job opened (UET_NIC_TELEMETRY).
    let telemetry_path = telemetry_path
        .or_else(uet_driver::telemetry::global_path)
        .map(|p| p.display().to_string());
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
            "vfio": cfg.vfio.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            "rma": cfg.rma,
            "ranks": ranks,
            "rank0_av": dump::render_json(table),
            "av_differences": differences,
            "pcap": outcome.capture_json(),
            "telemetry": telemetry_path,
        });
        outln!("{doc:#}");
    } else {
        outln!(
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
        outln!();
        outln!(
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
            outln!(
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
        outln!();
        out!("{}", dump::render_text("rank 0 NIC AV table", table));
        outln!();
        let total: u32 = outcome.ranks.iter().map(|r| r.report.received).sum();
        let tagged: u32 = outcome.ranks.iter().map(|r| r.report.tagged_received).sum();
        let rma = outcome
            .ranks
            .iter()
            .filter(|r| r.report.rma_write_verified && r.report.rma_read_verified)
            .count();
        if ok && consistent {
            outln!(
                "ok: {total} of {} messages delivered and verified; the NIC AV tables of all {} ranks match their host mirrors",
                cfg.messages as usize * cfg.ranks,
                cfg.ranks
            );
            outln!(
                "ok: {tagged} of {} tagged messages matched and verified",
                cfg.tagged as usize * cfg.ranks
            );
            if cfg.rma {
                outln!(
                    "ok: {rma} of {} RMA writes verified at the target and read back",
                    cfg.ranks
                );
            }
        } else {
            outln!(
                "FAILED: {total} of {} messages, {tagged} of {} tagged messages, {rma} of {} RMA write/read pairs verified; {} NIC/mirror differences",
                cfg.messages as usize * cfg.ranks,
                cfg.tagged as usize * cfg.ranks,
                if cfg.rma { cfg.ranks } else { 0 },
                differences
            );
        }
    }
    if !as_json && !captured {
        outln!("FAILED: the packet capture was not written completely");
    }
    if let Some(linger) = linger {
        if !as_json {
            match &telemetry_path {
                Some(p) => outln!("telemetry: {p} (uetctl ps names its NICs), for {linger} s"),
                None => outln!("staying up for {linger} s (no telemetry socket)"),
            }
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::thread::sleep(std::time::Duration::from_secs(linger));
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
                    outln!("{}", dump::render_text(&title, &table));
                }
            }
            Err(e) => {
                eprintln!("uetctl: rank {}: {e}", r.report.rank);
                return ExitCode::from(2);
            }
        }
    }
    if as_json {
        outln!(
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

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// clap's own checks of every subcommand: unique names, conflicts that name real
    /// arguments, defaults that parse.
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
