//! Inspecting a live process: a client of the driver's telemetry socket
//! (`uet_driver::telemetry`, which describes the protocol), and what `uetctl ps`, `uetctl av
//! dump --pid`, `uetctl regs --pid` and `uetctl stats --pid` make of its answers.

use crate::dump::{self, AvDump};
use crate::regs::RegValue;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use uet_driver::telemetry::{self, PROTOCOL};
use uet_driver::uet_fwif::auth_key::AuthKeyEntry;
use uet_driver::uet_fwif::counters::{EndpointCounterValues, EndpointCounters};
use uet_driver::uet_fwif::NicAvEntry;
use uet_driver::uet_regs::REGISTERS;
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
    /// Connect and read the greeting.
    pub fn connect(target: &Target) -> Result<Client, String> {
        let path = target.path();
        let stream = UnixStream::connect(&path).map_err(|e| {
            let who = match target {
                Target::Pid(pid) => format!("process {pid}"),
                Target::Socket(_) => "a uet-nic process".to_string(),
            };
            format!(
                "cannot reach {who} at {}: {e} (does it run the driver with its telemetry \
                 socket, and is {} the directory it uses?)",
                path.display(),
                path.parent().unwrap_or(Path::new("")).display()
            )
        })?;
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
        let hello = client.read_line()?;
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

    fn read_line(&mut self) -> Result<Value, String> {
        let mut line = Vec::new();
        self.input
            .by_ref()
            .take(MAX_ANSWER)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        if line.is_empty() {
            return Err(format!(
                "{}: the process closed the connection",
                self.path.display()
            ));
        }
        serde_json::from_slice(&line)
            .map_err(|e| format!("{}: answer is not JSON: {e}", self.path.display()))
    }

    /// Send `request` and return its `ok` value; an `error` answer is an error naming its
    /// fabric errno.
    pub fn call(&mut self, request: &Value) -> Result<Value, String> {
        let mut line = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.output
            .write_all(&line)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let answer = self.read_line()?;
        if let Some(ok) = answer.get("ok") {
            return Ok(ok.clone());
        }
        let err = answer.get("error").cloned().unwrap_or(Value::Null);
        Err(format!(
            "{}: {}",
            err.get("name").and_then(Value::as_str).unwrap_or("error"),
            err.get("message").and_then(Value::as_str).unwrap_or("")
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

fn decode<T: FromBytes>(hex: &Value, what: &str) -> Result<T, String> {
    let bytes = hex
        .as_str()
        .and_then(|h| hex::decode(h).ok())
        .ok_or_else(|| format!("{what}: not hex: {hex}"))?;
    T::read_from_bytes(&bytes).map_err(|_| format!("{what}: {} bytes, not a {what}", bytes.len()))
}

/// The tables of NIC `nic`: (handle, capacity).
pub fn tables(client: &mut Client, nic: u64) -> Result<Vec<(u32, u32)>, String> {
    let list = client.call(&json!({"cmd": "av_list", "nic": nic}))?;
    array(&list, "tables", "av_list")?
        .iter()
        .map(|t| {
            let h = u64_of(t, "table")?;
            let c = u64_of(t, "capacity")?;
            Ok((h as u32, c as u32))
        })
        .collect()
}

/// Dump NIC table `table` of NIC `nic`, page by page.
pub fn av_dump(client: &mut Client, nic: u64, table: u32) -> Result<AvDump, String> {
    let mut rows = Vec::new();
    let mut nic_keys = Vec::new();
    let mut capacity = 0;
    let mut first = Some(0u64);
    while let Some(at) = first {
        let page = client.call(&json!({
            "cmd": "av_dump", "nic": nic, "table": table, "first": at,
        }))?;
        capacity = u64_of(&page, "capacity")? as u32;
        for e in array(&page, "entries", "av_dump")? {
            let index = e
                .get(0)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("bad entry {e}"))?;
            let entry: NicAvEntry = decode(&e[1], "NicAvEntry")?;
            dump::push_row(&mut rows, index as u32, entry, None);
        }
        if let Some(keys) = page.get("auth_key_slots").and_then(Value::as_array) {
            for k in keys {
                let slot = k
                    .get(0)
                    .and_then(Value::as_u64)
                    .ok_or_else(|| format!("bad slot {k}"))?;
                let entry: AuthKeyEntry = decode(&k[1], "AuthKeyEntry")?;
                nic_keys.push((slot as u16, entry));
            }
        }
        let next = page.get("next").and_then(Value::as_u64);
        if next.is_some_and(|n| n <= at) {
            return Err(format!("av_dump did not advance past {at}"));
        }
        first = next;
    }
    Ok(AvDump {
        capacity,
        rows,
        keys: Vec::new(),
        stray: Vec::new(),
        mirror: false,
        nic_keys,
    })
}

/// The registers of NIC `nic`, each matched with its definition by offset.
pub fn regs(client: &mut Client, nic: u64) -> Result<Vec<RegValue>, String> {
    let answer = client.call(&json!({"cmd": "regs", "nic": nic}))?;
    array(&answer, "regs", "regs")?
        .iter()
        .map(|r| {
            let offset = r.get(0).and_then(Value::as_u64);
            let value = r.get(1).and_then(Value::as_u64);
            let info = offset.and_then(|o| REGISTERS.iter().find(|i| u64::from(i.offset) == o));
            match (info, value) {
                (Some(info), Some(value)) => Ok(RegValue { info, value }),
                _ => Err(format!(
                    "register {r} is not one this uetctl knows (a newer driver?)"
                )),
            }
        })
        .collect()
}

/// The counters of NIC `nic`: (name, value).
pub fn counters(client: &mut Client, nic: u64) -> Result<Vec<(String, u64)>, String> {
    let answer = client.call(&json!({"cmd": "counters", "nic": nic}))?;
    array(&answer, "counters", "counters")?
        .iter()
        .map(|c| {
            match (
                c.get(0).and_then(Value::as_str),
                c.get(1).and_then(Value::as_u64),
            ) {
                (Some(n), Some(v)) => Ok((n.to_string(), v)),
                _ => Err(format!("bad counter {c}")),
            }
        })
        .collect()
}

/// The processes with a telemetry socket in `dir` that answer, as their `info`; sockets
/// nobody answers (left by processes that died) are skipped.
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
        let Ok(mut client) = Client::connect(&Target::Socket(path.clone())) else {
            continue;
        };
        if let Ok(mut info) = client.call(&json!({"cmd": "info"})) {
            if let Some(o) = info.as_object_mut() {
                o.insert("socket".into(), json!(path.display().to_string()));
            }
            found.push(info);
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
