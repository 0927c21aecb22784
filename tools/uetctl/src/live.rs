//! Inspecting a live process: a client of the driver's telemetry socket
//! (`uet_driver::telemetry`, which describes the protocol), and what `uetctl ps`, `uetctl av
//! dump --pid`, `uetctl regs --pid` and `uetctl stats --pid` make of its answers.

use crate::dump::{self, AvDump, NamedSide};
use crate::regs::RegValue;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use uet_av::named::segment::Snapshot;
use uet_av::FiErrno;
use uet_driver::telemetry::{self, PROTOCOL};
use uet_driver::uet_fwif::auth_key::{AuthKeyEntry, MAX_AUTH_KEY_SLOTS};
use uet_driver::uet_fwif::counters::{EndpointCounterValues, EndpointCounters};
use uet_driver::uet_fwif::NicAvEntry;
use uet_driver::uet_regs::{Id, Revision, Width, ID, REGISTERS, REVISION};
use zerocopy::FromBytes;

/// How long uetctl waits for the process to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The longest answer line accepted (a full `av_dump` page is about 2.5 MB).
const MAX_ANSWER: u64 = 64 << 20;

/// Which process to ask.
#[derive(Clone, Debug)]
pub enum Target {
    /// The process with this PID, at its socket in the telemetry directory.
    Pid(u32),
    /// The socket at this path.
    Socket(PathBuf),
}

impl Target {
    /// The socket's path.
    pub fn path(&self) -> PathBuf {
        match self {
            Target::Pid(pid) => telemetry::socket_path(&telemetry::default_dir(), *pid),
            Target::Socket(p) => p.clone(),
        }
    }
}

/// A conversation with one process.
pub struct Client {
    path: PathBuf,
    input: BufReader<UnixStream>,
    output: UnixStream,
    /// The greeting.
    pub hello: Value,
}

impl Client {
    /// Connect and read the greeting. A process that serves as many clients as it may
    /// answers with an error instead (`FI_EBUSY`), and one that is stopped or stuck does not
    /// answer: each is an error saying so.
    pub fn connect(target: &Target) -> Result<Client, String> {
        let path = target.path();
        let stream = telemetry::connect(&path, TIMEOUT).map_err(|e| {
            if e.kind() == ErrorKind::TimedOut {
                return format!("{} at {} is unresponsive: {e}", who(target), path.display());
            }
            // A file or directory in the socket's place refuses any connection: say what it
            // is rather than that it refused.
            use std::os::unix::fs::FileTypeExt;
            if let Ok(meta) = std::fs::metadata(&path) {
                if !meta.file_type().is_socket() {
                    let what = if meta.is_dir() {
                        "a directory"
                    } else {
                        "a file"
                    };
                    return format!(
                        "{} is {what}, not a telemetry socket (a process's socket is \
                         <PID>.sock in its telemetry directory; `uetctl ps` lists them)",
                        path.display()
                    );
                }
            }
            format!(
                "cannot reach {} at {}: {e} (does it run the driver with its telemetry \
                 socket, and is {} the directory it uses?)",
                who(target),
                path.display(),
                path.parent().unwrap_or(Path::new("")).display()
            )
        })?;
        Client::greeted(stream, target)
    }

    /// The conversation on `stream`, connected to `target`: its greeting read.
    fn greeted(stream: UnixStream, target: &Target) -> Result<Client, String> {
        let path = target.path();
        let who = who(target);
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        stream.set_read_timeout(Some(TIMEOUT)).map_err(fail)?;
        stream.set_write_timeout(Some(TIMEOUT)).map_err(fail)?;
        let output = stream.try_clone().map_err(fail)?;
        let mut client = Client {
            path,
            input: BufReader::new(stream),
            output,
            hello: Value::Null,
        };
        let hello = match client.read_raw() {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(format!(
                    "{who} at {} did not greet uetctl within {} s: its telemetry socket is \
                     unresponsive (the process is stopped or stuck) or busy with other clients",
                    client.path.display(),
                    TIMEOUT.as_secs()
                ))
            }
            raw => client.parse_line(raw)?,
        };
        if let Some(e) = hello.get("error") {
            return Err(format!(
                "{who} at {} refused the connection: {}",
                client.path.display(),
                error_text(e)
            ));
        }
        match hello.get("uet_nic_telemetry").and_then(Value::as_u64) {
            Some(v) if v == u64::from(PROTOCOL) => {}
            Some(v) => {
                return Err(format!(
                    "{}: telemetry protocol {v}, uetctl speaks {PROTOCOL}",
                    client.path.display()
                ))
            }
            None => {
                return Err(format!(
                    "{}: not a uet-nic telemetry socket (greeting {hello})",
                    client.path.display()
                ))
            }
        }
        client.hello = hello;
        Ok(client)
    }

    /// The next line the process sends, as it came, at most [`MAX_ANSWER`] bytes of it: all
    /// of it within [`TIMEOUT`], however the process spreads its bytes. The socket's read
    /// timeout bounds each wait for more bytes only, and a process that trickles them, each in
    /// time, would keep uetctl for as long as it likes. `TimedOut` (or `WouldBlock`, the
    /// socket's own timeout) when the line does not come in time.
    fn read_raw(&mut self) -> std::io::Result<Vec<u8>> {
        let deadline = Instant::now() + TIMEOUT;
        let max = usize::try_from(MAX_ANSWER).unwrap_or(usize::MAX);
        let mut line = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    "the answer did not come whole in time",
                ));
            }
            self.input.get_ref().set_read_timeout(Some(left))?;
            let buf = match self.input.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                // The process closed the connection.
                return Ok(line);
            }
            let room = max - line.len();
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(end) if end < room => (end + 1, true),
                _ => (buf.len().min(room), buf.len() >= room),
            };
            line.extend_from_slice(&buf[..take]);
            self.input.consume(take);
            if done {
                return Ok(line);
            }
        }
    }

    fn read_line(&mut self) -> Result<Value, String> {
        let raw = self.read_raw();
        self.parse_line(raw)
    }

    /// A line read ([`Client::read_raw`]) as JSON; an error naming the socket otherwise.
    fn parse_line(&self, raw: std::io::Result<Vec<u8>>) -> Result<Value, String> {
        let line = raw.map_err(|e| {
            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
                format!(
                    "{}: the process did not answer within {} s (stopped, stuck or overloaded)",
                    self.path.display(),
                    TIMEOUT.as_secs()
                )
            } else {
                format!("{}: {e}", self.path.display())
            }
        })?;
        if line.is_empty() {
            return Err(format!(
                "{}: the process closed the connection",
                self.path.display()
            ));
        }
        // Every answer ends its line: one that does not was cut short, or is too long.
        if line.last() != Some(&b'\n') {
            return Err(if line.len() as u64 >= MAX_ANSWER {
                format!(
                    "{}: an answer longer than {} MiB",
                    self.path.display(),
                    MAX_ANSWER >> 20
                )
            } else {
                format!(
                    "{}: the process closed the connection in the middle of an answer",
                    self.path.display()
                )
            });
        }
        serde_json::from_slice(&line)
            .map_err(|e| format!("{}: answer is not JSON: {e}", self.path.display()))
    }

    /// Send `request` and return its `ok` value; an `error` answer is an error naming its
    /// fabric errno.
    pub fn call(&mut self, request: &Value) -> Result<Value, String> {
        self.call_errno(request).map_err(|(_, text)| text)
    }

    /// [`Client::call`], with the fabric errno of an `error` answer (`None` for a failure
    /// of the conversation itself).
    fn call_errno(&mut self, request: &Value) -> Result<Value, (Option<u64>, String)> {
        let mut line = serde_json::to_vec(request).map_err(|e| (None, e.to_string()))?;
        line.push(b'\n');
        self.output
            .write_all(&line)
            .map_err(|e| (None, format!("{}: {e}", self.path.display())))?;
        let answer = self.read_line().map_err(|e| (None, e))?;
        if let Some(ok) = answer.get("ok") {
            return Ok(ok.clone());
        }
        let error = answer.get("error").unwrap_or(&Value::Null);
        Err((
            error.get("errno").and_then(Value::as_u64),
            error_text(error),
        ))
    }

    /// NIC numbers of the process that are open.
    pub fn open_nics(&mut self) -> Result<Vec<u64>, String> {
        let info = self.call(&json!({"cmd": "info"}))?;
        Ok(info
            .get("nics")
            .and_then(Value::as_array)
            .map(|nics| {
                nics.iter()
                    .filter(|n| n.get("open").and_then(Value::as_bool) == Some(true))
                    .filter_map(|n| n.get("nic").and_then(Value::as_u64))
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// The process `target` names, in messages.
fn who(target: &Target) -> String {
    match target {
        Target::Pid(pid) => format!("process {pid}"),
        Target::Socket(_) => "a uet-nic process".to_string(),
    }
}

/// An `error` answer as "FI_ENAME: message", printable ([`crate::out::printable`]).
fn error_text(err: &Value) -> String {
    format!(
        "{}: {}",
        crate::out::printable(err.get("name").and_then(Value::as_str).unwrap_or("error")),
        crate::out::printable(err.get("message").and_then(Value::as_str).unwrap_or(""))
    )
}

/// The array `key` of an answer to `cmd`.
fn array<'a>(answer: &'a Value, key: &str, cmd: &str) -> Result<&'a Vec<Value>, String> {
    answer
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{cmd} answer lacks {key}: {answer}"))
}

fn u64_of(v: &Value, key: &str) -> Result<u64, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("answer lacks {key:?}: {v}"))
}

/// `key` of an answer to `cmd`, a figure of 32 bits: one past them is an error, not the
/// low bits of it (a table handle cut to 32 bits names another table).
fn u32_of(v: &Value, key: &str, cmd: &str) -> Result<u32, String> {
    let x = u64_of(v, key)?;
    u32::try_from(x).map_err(|_| format!("{cmd} answer with {key} {x}: past 32 bits"))
}

fn decode<T: FromBytes>(hex: &Value, what: &str) -> Result<T, String> {
    let bytes = hex
        .as_str()
        .and_then(|h| hex::decode(h).ok())
        .ok_or_else(|| format!("{what}: not hex: {hex}"))?;
    T::read_from_bytes(&bytes).map_err(|_| format!("{what}: {} bytes, not a {what}", bytes.len()))
}

/// An AV table of a live process, as `av_list` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveTable {
    /// The NIC's handle of the table.
    pub handle: u32,
    /// Entries.
    pub capacity: u32,
    /// The table's serial, which no later table of the NIC takes with its handle (`None`
    /// from a driver before serials).
    pub serial: Option<u64>,
    /// For a named AV's table: the AV name, and the generation of the AV the table reflects
    /// (`None` before the process first caught up).
    pub named: Option<(String, Option<u64>)>,
}

/// The tables of NIC `nic`.
pub fn tables(client: &mut Client, nic: u64) -> Result<Vec<LiveTable>, String> {
    let list = client.call(&json!({"cmd": "av_list", "nic": nic}))?;
    array(&list, "tables", "av_list")?
        .iter()
        .map(|t| {
            let named = match t.get("named") {
                None | Some(Value::Null) => None,
                Some(n) => Some(named_of(n)?),
            };
            Ok(LiveTable {
                handle: u32_of(t, "table", "av_list")?,
                capacity: u32_of(t, "capacity", "av_list")?,
                serial: t.get("serial").and_then(Value::as_u64),
                named,
            })
        })
        .collect()
}

/// `{name, generation}` of a named AV's table.
fn named_of(n: &Value) -> Result<(String, Option<u64>), String> {
    let name = n
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("a named table without a name: {n}"))?;
    Ok((
        name.to_string(),
        n.get("generation").and_then(Value::as_u64),
    ))
}

/// A table read page by page: the NIC's side.
struct NicSide {
    capacity: u32,
    /// The valid entries, ascending.
    entries: Vec<(u32, NicAvEntry)>,
    /// The auth-key slots the table owns.
    keys: Vec<(u16, AuthKeyEntry)>,
    /// For a named AV's table: its name, the generation it reflected through every page
    /// (`None` when it was not the same throughout), and the entry flags its NIC defines.
    named: Option<(String, Option<u64>, u16)>,
    /// Whether the process changed the table while it was read: a page read during a change
    /// (`changes` null), or pages of different `changes`. The pages then mix the table
    /// before and after. (A driver before `changes` answers without it: not known.)
    changed: bool,
}

/// Why a dump of a live table failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DumpError {
    /// The process closed the table before the dump was complete (before its first page,
    /// when the dump was asked with the serial `av_list` gave): there is no such table any
    /// more.
    Closed(String),
    /// Anything else: the dump could not be made.
    Failed(String),
}

impl core::fmt::Display for DumpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DumpError::Closed(why) | DumpError::Failed(why) => f.write_str(why),
        }
    }
}

impl From<String> for DumpError {
    fn from(why: String) -> Self {
        DumpError::Failed(why)
    }
}

/// Read NIC table `table` of NIC `nic`, every page. Each page names the table by its serial:
/// `serial` (from `av_list`) from the first, or the one the first answer gave, so a table
/// closed between two pages, whose handle another AV's table may have taken, is
/// [`DumpError::Closed`] and not one table spliced from two.
fn nic_side(
    client: &mut Client,
    nic: u64,
    table: u32,
    listed: Option<u64>,
) -> Result<NicSide, DumpError> {
    let mut side = NicSide {
        capacity: 0,
        entries: Vec::new(),
        keys: Vec::new(),
        named: None,
        changed: false,
    };
    let mut serial: Option<u64> = listed;
    // The `changes` of the first page that carried it.
    let mut changes: Option<u64> = None;
    // The auth-key slots given so far.
    let mut slots = std::collections::HashSet::new();
    let mut first = Some(0u64);
    while let Some(at) = first {
        let mut request = json!({
            "cmd": "av_dump", "nic": nic, "table": table, "first": at,
        });
        if let Some(s) = serial {
            request["serial"] = json!(s);
        }
        let page = client.call_errno(&request).map_err(|(errno, e)| {
            let e = if at == 0 {
                e
            } else {
                format!(
                    "AV table {table} of NIC {nic}: the dump stopped at index {at} and is \
                     incomplete: {e}"
                )
            };
            // What the driver answers for a page of a table closed since its serial was given.
            if serial.is_some() && errno == Some(u64::from(FiErrno::FI_ENOENT.get())) {
                DumpError::Closed(e)
            } else {
                DumpError::Failed(e)
            }
        })?;
        // A driver before serials answers without one; its pages cannot be checked.
        let answered = page.get("serial").and_then(Value::as_u64);
        match (serial, answered) {
            (None, _) => serial = answered,
            (Some(s), Some(a)) if s != a => {
                return Err(DumpError::Closed(format!(
                    "AV table {table} of NIC {nic} was closed and replaced by another table \
                     (serial {a}, was {s}) during the dump"
                )))
            }
            _ => {}
        }
        match page.get("changes") {
            None => {}
            Some(Value::Null) => side.changed = true,
            Some(c) => {
                let c = c
                    .as_u64()
                    .ok_or_else(|| format!("av_dump answer with changes {c}"))?;
                if *changes.get_or_insert(c) != c {
                    side.changed = true;
                }
            }
        }
        // Every page is of one table: its capacity, and entries in ascending order from the
        // index asked for, within it. A page that is not is no part of the table's dump.
        let capacity = u64_of(&page, "capacity")?;
        let capacity = u32::try_from(capacity)
            .map_err(|_| format!("av_dump answer with capacity {capacity}: past 32 bits"))?;
        if at > 0 && capacity != side.capacity {
            return Err(DumpError::Failed(format!(
                "AV table {table} of NIC {nic}: a page of capacity {capacity} after pages of \
                 capacity {}",
                side.capacity
            )));
        }
        side.capacity = capacity;
        for e in array(&page, "entries", "av_dump")? {
            let index = e
                .get(0)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("bad entry {e}"))?;
            let after = side
                .entries
                .last()
                .map_or(at, |&(last, _)| at.max(u64::from(last) + 1));
            if index < after || index >= u64::from(capacity) {
                return Err(DumpError::Failed(format!(
                    "AV table {table} of NIC {nic}: entry {index} of the page from {at} is \
                     out of order or outside the table's {capacity} entries"
                )));
            }
            let entry: NicAvEntry = decode(&e[1], "NicAvEntry")?;
            side.entries.push((index as u32, entry));
        }
        if let Some(keys) = page.get("auth_key_slots").and_then(Value::as_array) {
            for k in keys {
                // An auth-key slot number is below the most slots any NIC has: one past them
                // is no slot of the NIC's (nor, of 16 bits, one whose low bits name another).
                let slot = k
                    .get(0)
                    .and_then(Value::as_u64)
                    .and_then(|s| u16::try_from(s).ok())
                    .filter(|&s| s < MAX_AUTH_KEY_SLOTS)
                    .ok_or_else(|| {
                        format!("AV table {table} of NIC {nic}: bad auth-key slot {k}")
                    })?;
                // The NIC has one entry per slot: a slot given twice is not what it holds.
                if !slots.insert(slot) {
                    return Err(DumpError::Failed(format!(
                        "AV table {table} of NIC {nic}: auth-key slot {slot} given twice"
                    )));
                }
                let entry: AuthKeyEntry = decode(&k[1], "AuthKeyEntry")?;
                side.keys.push((slot, entry));
            }
        }
        if let Some(n) = page.get("named").filter(|n| !n.is_null()) {
            let (name, generation) = named_of(n)?;
            let flags = n
                .get("entry_flags")
                .and_then(Value::as_u64)
                .and_then(|f| u16::try_from(f).ok())
                .ok_or_else(|| format!("a named table's page without entry_flags: {n}"))?;
            side.named = match side.named.take() {
                // Every page must have seen the same generation.
                Some((_, seen, _)) if seen != generation => Some((name, None, flags)),
                _ => Some((name, generation, flags)),
            };
        }
        // Every page says where the dump goes on, `null` at the end: a page without it, or
        // with no index there, is no end of the table, whose later pages would be left out.
        let next = match page.get("next") {
            Some(Value::Null) => None,
            Some(n) => Some(n.as_u64().ok_or_else(|| {
                format!("AV table {table} of NIC {nic}: the page from {at} has next {n}, no index")
            })?),
            None => {
                return Err(DumpError::Failed(format!(
                    "AV table {table} of NIC {nic}: the page from {at} has no next (where the \
                     dump goes on)"
                )))
            }
        };
        if next.is_some_and(|n| n <= at) {
            return Err(DumpError::Failed(format!(
                "av_dump did not advance past {at}"
            )));
        }
        // The next page starts after this one's entries, within the table.
        let after = side
            .entries
            .last()
            .map_or(at, |&(last, _)| at.max(u64::from(last) + 1));
        if let Some(n) = next.filter(|&n| n < after || n >= u64::from(capacity)) {
            return Err(DumpError::Failed(format!(
                "AV table {table} of NIC {nic}: the page from {at} goes on at {n}, before its \
                 last entry or past the table's {capacity} entries"
            )));
        }
        first = next;
    }
    Ok(side)
}

/// Reads of a table before its dump gives up: a table the process changed while it was read
/// is read again (and one that changes at every read is an error), and a named AV's table
/// settles for the NIC's side alone: a process that is catching up is done in a moment, one
/// that makes no AV call stays behind.
const ATTEMPTS: u32 = 3;

/// Dump NIC table `table` of NIC `nic`, page by page. A table the process changed while its
/// pages were read is read again: its pages would mix the table before and after the change,
/// which no dump shows as one table; an error when it changed at each of `ATTEMPTS` (3) reads.
/// The table of a named AV is compared with the AV itself, read from its shared segment, when
/// the table reflected the segment's generation while it was read ([`dump::NamedSide`] says
/// whether it was and why not).
pub fn av_dump(client: &mut Client, nic: u64, table: u32) -> Result<AvDump, String> {
    dump_of(client, nic, table, None).map_err(|e| e.to_string())
}

/// [`av_dump`] of a table `av_list` listed, named by its serial from the first page: a table
/// the process closed since it was listed is [`DumpError::Closed`], and not another table
/// that took its handle.
pub fn av_dump_listed(
    client: &mut Client,
    nic: u64,
    table: &LiveTable,
) -> Result<AvDump, DumpError> {
    dump_of(client, nic, table.handle, table.serial)
}

fn dump_of(
    client: &mut Client,
    nic: u64,
    table: u32,
    serial: Option<u64>,
) -> Result<AvDump, DumpError> {
    let mut attempt = 1;
    loop {
        let side = nic_side(client, nic, table, serial)?;
        if side.changed {
            if attempt == ATTEMPTS {
                return Err(DumpError::Failed(format!(
                    "AV table {table} of NIC {nic} changed while it was read, at each of \
                     {ATTEMPTS} reads: its pages would mix the table before and after a change"
                )));
            }
            attempt += 1;
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let Some((name, reflected, flags)) = side.named.clone() else {
            return Ok(nic_only(side, None));
        };
        let snapshot = match Snapshot::read(&name) {
            Ok(s) => s,
            Err(e) => {
                let named = NamedSide {
                    name,
                    generation: None,
                    reflected,
                    handles: None,
                    interrupted_writer: None,
                    not_compared: Some(format!("the AV could not be read: {e}")),
                };
                return Ok(nic_only(side, Some(named)));
            }
        };
        let mut named = NamedSide {
            name,
            generation: Some(snapshot.generation),
            reflected,
            handles: Some(snapshot.handles),
            interrupted_writer: snapshot.interrupted_writer,
            not_compared: None,
        };
        let job_id = u32::try_from(snapshot.job_id);
        if let (true, Ok(job_id)) = (reflected == Some(snapshot.generation), job_id) {
            let rows = dump::rows_against_named(&side.entries, &snapshot.entries, job_id, flags);
            return Ok(AvDump {
                capacity: side.capacity,
                rows,
                keys: Vec::new(),
                stray: Vec::new(),
                mirror: true,
                nic_keys: side.keys,
                named: Some(named),
            });
        }
        if job_id.is_err() {
            named.not_compared = Some(format!(
                "the AV's segment holds JobID {:#x}, which no entry can carry",
                snapshot.job_id
            ));
            return Ok(nic_only(side, Some(named)));
        }
        if attempt == ATTEMPTS {
            named.not_compared = Some(match reflected {
                Some(r) => format!(
                    "the process's table reflects generation {r} of the AV, which is at \
                     generation {}; the process catches up at its next AV call, send or \
                     completion read",
                    snapshot.generation
                ),
                None => "the process caught up while its table was read, or never has".into(),
            });
            return Ok(nic_only(side, Some(named)));
        }
        attempt += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A dump of the NIC's side alone.
fn nic_only(side: NicSide, named: Option<NamedSide>) -> AvDump {
    let mut rows = Vec::new();
    for (index, entry) in side.entries {
        dump::push_row(&mut rows, index, entry, None);
    }
    AvDump {
        capacity: side.capacity,
        rows,
        keys: Vec::new(),
        stray: Vec::new(),
        mirror: false,
        nic_keys: side.keys,
        named,
    }
}

/// The registers of NIC `nic`, each matched with its definition by offset. A register this
/// uetctl's map does not have (a driver of a later minor version of the interface reads
/// registers it added) is listed by its offset and value, with no definition, rather than
/// fail the whole listing; a pair that is not `[offset, value]`, an offset past BAR0's 32
/// bits, or a value past the 32 bits of the register at its offset, is an error. An error too when its `ID` reads all ones: the process's NIC no
/// longer answers (removed, in reset, its link down), and every other figure read with it
/// is all ones too, not the NIC's; and, as for a function read here
/// ([`crate::regs::check_identity`]), when its `ID` names another device or its `REVISION`
/// another interface major version, whose registers this map would decode as others.
pub fn regs(client: &mut Client, nic: u64) -> Result<Vec<RegValue>, String> {
    let answer = client.call(&json!({"cmd": "regs", "nic": nic}))?;
    let values: Vec<RegValue> = array(&answer, "regs", "regs")?
        .iter()
        .map(|r| {
            let offset = r
                .get(0)
                .and_then(Value::as_u64)
                .and_then(|o| u32::try_from(o).ok());
            match (offset, r.get(1).and_then(Value::as_u64)) {
                (Some(offset), Some(value)) => {
                    let info = REGISTERS.iter().find(|i| i.offset == offset);
                    // A 32-bit register reads no value past 32 bits.
                    if let Some(i) = info.filter(|i| i.width == Width::W32) {
                        if u32::try_from(value).is_err() {
                            return Err(format!(
                                "register {} read as {value:#x}, past its 32 bits",
                                i.name
                            ));
                        }
                    }
                    Ok(RegValue {
                        offset,
                        info,
                        value,
                    })
                }
                _ => Err(format!(
                    "bad register {r}: not an [offset, value] pair of a 32-bit offset"
                )),
            }
        })
        .collect::<Result<_, String>>()?;
    let id = values.iter().find(|r| r.offset == ID.offset());
    if id.is_some_and(|r| r.value == u64::from(u32::MAX)) {
        return Err(
            "its BAR0 reads all ones: the NIC does not answer (removed, in reset, or its link \
             is down)"
                .to_string(),
        );
    }
    // Each as its 32-bit register reads; one the process did not send, as this map's reset
    // value has it, which it cannot then refute.
    let read =
        |offset: u32, name: &str, reset: u32| match values.iter().find(|r| r.offset == offset) {
            None => Ok(reset),
            Some(r) => u32::try_from(r.value)
                .map_err(|_| format!("its {name} reads {:#x}, past its 32 bits", r.value)),
        };
    let id = read(ID.offset(), "ID", ID.reset_value().into_bits())?;
    let revision = read(
        REVISION.offset(),
        "REVISION",
        REVISION.reset_value().into_bits(),
    )?;
    crate::regs::check_identity(Id::from_bits(id), Revision::from_bits(revision))?;
    Ok(values)
}

/// The counters of NIC `nic`: (name, value). A name the answer gives twice is an error: a
/// counter has one value, and the text (which shows a NIC's counters as rows) and the JSON
/// (an object keyed by name) would each show another of the two.
pub fn counters(client: &mut Client, nic: u64) -> Result<Vec<(String, u64)>, String> {
    let answer = client.call(&json!({"cmd": "counters", "nic": nic}))?;
    let mut counters: Vec<(String, u64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in array(&answer, "counters", "counters")? {
        match (
            c.get(0).and_then(Value::as_str),
            c.get(1).and_then(Value::as_u64),
        ) {
            (Some(n), Some(v)) if seen.insert(n) => counters.push((n.to_string(), v)),
            (Some(n), Some(_)) => return Err(format!("counters answer names {n} twice")),
            _ => return Err(format!("bad counter {c}")),
        }
    }
    Ok(counters)
}

/// The processes with a telemetry socket in `dir`, as their `info`. A socket nobody listens
/// on (left by a process that died) is skipped. One whose process is there but does not
/// answer (busy with other clients, stopped, stuck) is listed as `{"socket", "error"}`, the
/// reason in `error`, so that a caller does not take the process for gone.
pub fn processes(dir: &Path) -> Result<Vec<Value>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("sock") {
            continue;
        }
        // Nothing listens: a socket file left by a process that died. The connection made
        // here is the one asked: a second would take another of the process's places. A
        // process whose full backlog keeps the connection waiting is there but not answering.
        let socket = path.display().to_string();
        let stream = match telemetry::connect(&path, TIMEOUT) {
            Ok(stream) => stream,
            Err(e) if e.kind() == ErrorKind::TimedOut => {
                found.push(json!({ "socket": socket, "error": e.to_string() }));
                continue;
            }
            Err(_) => continue,
        };
        let info = Client::greeted(stream, &Target::Socket(path.clone()))
            .and_then(|mut client| client.call(&json!({"cmd": "info"})));
        match info {
            Ok(mut info) => {
                if let Some(o) = info.as_object_mut() {
                    o.insert("socket".into(), json!(socket));
                }
                found.push(info);
            }
            Err(why) => found.push(json!({ "socket": socket, "error": why })),
        }
    }
    found.sort_by_key(|i| i.get("pid").and_then(Value::as_u64));
    Ok(found)
}

/// An endpoint or context of a live process, as `ep_list` reports it.
#[derive(Clone, Debug)]
pub struct LiveEndpoint {
    /// What the driver reported (handle, type, roles, address, JobID, AV table).
    pub info: Value,
    /// Its counters by name, or why they could not be read.
    pub counters: Result<Vec<(String, u64)>, String>,
}

/// The endpoints and contexts of NIC `nic`.
pub fn endpoints(client: &mut Client, nic: u64) -> Result<Vec<LiveEndpoint>, String> {
    let answer = client.call(&json!({"cmd": "ep_list", "nic": nic}))?;
    array(&answer, "endpoints", "ep_list")?
        .iter()
        .map(|e| {
            let counters = match (e.get("counters"), e.get("counters_error")) {
                (Some(hex @ Value::String(_)), _) => {
                    let block: EndpointCounters = decode(hex, "EndpointCounters")?;
                    Ok(EndpointCounterValues::from(&block).named())
                }
                (_, Some(Value::String(why))) => Err(why.clone()),
                _ => return Err(format!("ep_list entry lacks counters: {e}")),
            };
            Ok(LiveEndpoint {
                info: e.clone(),
                counters,
            })
        })
        .collect()
}
