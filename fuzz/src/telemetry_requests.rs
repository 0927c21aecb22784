//! Request lines to a process's telemetry socket (`uet_driver::telemetry`), as any client of
//! its user may send them, right or wrong: the commands with arguments of every JSON type
//! and size (NIC numbers, AV table handles, serials, `first` and `max` of a dump), unknown
//! commands, and lines that are not JSON at all, to a process with a NIC, an AV table and an
//! endpoint. Every request line is answered with one line of JSON: `{"ok": …}`, or
//! `{"error": …}` with a fabric errno, its name and a message; a line that is not JSON is
//! answered so and the connection closed; an `av_dump` page lists valid entries in order,
//! from `first`, no more than `max`, and names where the next page starts past them.
//!
//! Input: requests until the input ends (at most [`MAX_REQUESTS`]), each a kind byte and
//! its operands.

use crate::Input;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use uet_av::NicAvTable;
use uet_driver::telemetry::{self, Telemetry, COMMANDS};
use uet_tests::{fabric, Node};

/// Requests per input.
pub const MAX_REQUESTS: usize = 16;

/// Entries of the AV table the requests may dump.
const AV_COUNT: usize = 16;

/// A directory of its own for each run's socket.
fn socket_dir() -> PathBuf {
    static RUN: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "uet-fuzz-telemetry.{}.{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A number argument: small (a NIC, a handle, a serial, an index), near a limit, any, or a
/// JSON value that is no unsigned integer.
fn number(input: &mut Input<'_>, known: u64) -> Value {
    match input.below(10) {
        0 | 1 => json!(known),
        2 | 3 => json!(input.u8()),
        4 => json!(input.u32()),
        5 => json!(input.u64()),
        6 => json!(u64::from(telemetry::AV_DUMP_MAX) + u64::from(input.below(3)) - 1),
        7 => json!(-i64::from(input.u8())),
        8 => json!(f64::from(input.u8()) + 0.5),
        _ => match input.below(4) {
            0 => Value::Null,
            1 => json!(input.text(8)),
            2 => json!([input.u8()]),
            _ => json!(true),
        },
    }
}

/// The next request line, without its newline.
fn request(input: &mut Input<'_>, table: u32) -> String {
    if input.below(6) == 0 {
        // Any text on one line.
        return input.text(64).replace(['\n', '\r'], " ");
    }
    let cmd = match input.below(8) {
        0 => input.text(8),
        k => COMMANDS[usize::from(k) % COMMANDS.len()].0.to_string(),
    };
    let mut request = json!({ "cmd": cmd });
    for (name, known) in [
        ("nic", 0),
        ("table", u64::from(table)),
        ("serial", 0),
        ("first", 0),
        ("max", 4),
    ] {
        if input.below(3) != 0 {
            request[name] = number(input, known);
        }
    }
    if input.below(8) == 0 {
        // Not an object.
        request = json!([request]);
    }
    request.to_string()
}

/// Check the answer to `line`; returns whether the connection goes on.
fn check_answer(line: &str, answer: &str) -> bool {
    let reply: Value = serde_json::from_str(answer)
        .unwrap_or_else(|e| panic!("{line}: the answer {answer:?} is not JSON: {e}"));
    let object = reply
        .as_object()
        .filter(|o| o.len() == 1)
        .unwrap_or_else(|| panic!("{line}: the answer {answer} is not ok or error"));
    if let Some(e) = object.get("error") {
        let errno = e["errno"].as_u64().unwrap_or(0);
        assert!(errno > 0, "{line}: error without an errno: {answer}");
        let name = e["name"].as_str().unwrap_or("");
        assert!(name.starts_with("FI_"), "{line}: errno name {name:?}");
        let message = e["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "{line}: error without a message");
        // A line that is not JSON ends the conversation.
        return serde_json::from_slice::<Value>(line.as_bytes().trim_ascii()).is_ok();
    }
    let ok = object
        .get("ok")
        .unwrap_or_else(|| panic!("{line}: the answer {answer} is not ok or error"));
    assert!(
        serde_json::from_slice::<Value>(line.as_bytes().trim_ascii()).is_ok(),
        "{line}: a line that is not JSON answered {answer}"
    );
    if let Some(entries) = ok.get("entries").and_then(Value::as_array) {
        check_page(line, ok, entries);
    }
    true
}

/// An `av_dump` page: valid entries in ascending order from `first`, at most `max`, inside
/// the table, and `next` past them.
fn check_page(line: &str, page: &Value, entries: &[Value]) {
    let request: Value = serde_json::from_str(line).unwrap_or(Value::Null);
    let first = request["first"].as_u64().unwrap_or(0);
    let max = request["max"]
        .as_u64()
        .unwrap_or(u64::from(telemetry::AV_DUMP_MAX));
    let capacity = page["capacity"].as_u64().unwrap_or(0);
    assert!(
        entries.len() as u64 <= max,
        "{line}: {} entries",
        entries.len()
    );
    let mut last = None;
    for e in entries {
        let index = e[0].as_u64().unwrap_or(u64::MAX);
        assert!(
            index >= first && index < capacity,
            "{line}: entry {index} outside {first}..{capacity}"
        );
        assert!(last < Some(index), "{line}: entry {index} after {last:?}");
        last = Some(index);
        let bytes = e[1].as_str().unwrap_or("");
        assert_eq!(
            bytes.len(),
            128,
            "{line}: entry {index} is not 64 bytes of hex"
        );
    }
    if let Some(next) = page["next"].as_u64() {
        assert!(
            Some(next) > last && next < capacity,
            "{line}: next {next} after {last:?} of {capacity}"
        );
    }
}

/// Run the target on `data`.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let (_fabric, functions) = fabric(1);
    let Some(function) = functions.into_iter().next() else {
        panic!("a fabric of one NIC has none");
    };
    let mut node = Node::new(function, 1, AV_COUNT);
    let table = node.av.nic_mut().table_handle().unwrap_or(0);
    node.insert(&node.addr());
    let dir = socket_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("{}: {e}", dir.display());
    }
    let path = dir.join("t.sock");
    let served = match Telemetry::bind(&path) {
        Ok(t) => t,
        Err(e) => panic!("telemetry on {}: {e}", path.display()),
    };
    served.add_nic(&node.nic);
    let stream = match telemetry::connect(&path, Duration::from_secs(10)) {
        Ok(s) => s,
        Err(e) => panic!("connecting to {}: {e}", path.display()),
    };
    let mut replies = BufReader::new(&stream);
    let mut answer = String::new();
    let greeted = replies.read_line(&mut answer);
    assert!(
        matches!(greeted, Ok(1..)) && answer.contains("uet_nic_telemetry"),
        "greeting {answer:?}: {greeted:?}"
    );
    for _ in 0..MAX_REQUESTS {
        if input.is_empty() {
            break;
        }
        let line = request(&mut input, table);
        if line.as_bytes().trim_ascii().is_empty() {
            continue; // Blank lines are skipped, not answered.
        }
        if let Err(e) = (&stream).write_all(format!("{line}\n").as_bytes()) {
            panic!("{line}: sending: {e}");
        }
        answer.clear();
        match replies.read_line(&mut answer) {
            Ok(1..) => {}
            r => panic!("{line}: no answer: {r:?}"),
        }
        if !check_answer(&line, answer.trim_end()) {
            answer.clear();
            let after = replies.read_line(&mut answer);
            assert!(
                matches!(after, Ok(0) | Err(_)),
                "{line}: the connection goes on after a line that is not JSON: {answer:?}"
            );
            break;
        }
    }
    drop(replies);
    drop(stream);
    drop(served);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Seeds: each command with its arguments right; a dump of a page of one entry and its
/// next page; an unknown command; a line that is not JSON.
pub fn seeds() -> Vec<Vec<u8>> {
    // A request of command `k` with each argument at its known value.
    let command = |k: u8| vec![1, k, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1];
    let mut all = Vec::new();
    for k in 1..8 {
        all.extend_from_slice(&command(k));
    }
    // av_dump from index 1 with max 1.
    let dump = [1u8, 6, 1, 0, 1, 0, 0, 1, 2, 1, 1, 2, 1, 1];
    all.extend_from_slice(&dump);
    let mut unknown = command(0);
    unknown.insert(2, 4);
    unknown.splice(3..3, *b"warp");
    let not_json = [0u8, 5, b'{', b'c', b'm', b'd', b'"'];
    vec![all, dump.to_vec(), unknown, not_json.to_vec()]
}
