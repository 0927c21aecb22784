//! `uetctl stats`: the NIC counters (BAR0 registers) and the per-endpoint counters
//! (COUNTERS_READ) of every rank of the demo job, as an aligned table or JSON.
//!
//! The table has one row per counter and one column per rank; a counter that is zero on
//! every rank is still printed, so the layout does not change with the traffic. Per-endpoint
//! refusals appear as `rejected_RC_…` rows for the return codes that occurred.

use crate::demo::{self, DemoConfig};
use crate::outln;
use serde_json::{json, Map, Value};
use std::process::ExitCode;

/// Run the demo job, then print its counters.
pub fn run(cfg: &DemoConfig, as_json: bool) -> ExitCode {
    let outcome = match demo::run(cfg.clone()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("uetctl: {e}");
            return ExitCode::from(2);
        }
    };
    let captured = outcome.report_capture();
    let ok = outcome.ok(cfg);
    let mut nic_rows: Vec<(String, Vec<u64>)> = Vec::new();
    let mut ep_rows: Vec<(String, Vec<u64>)> = Vec::new();
    let n = outcome.ranks.len();
    for (i, r) in outcome.ranks.iter().enumerate() {
        for (name, v) in r.nic.counters() {
            add(&mut nic_rows, name, i, v, n);
        }
        match r.endpoint.counters() {
            Ok(c) => {
                for (name, v) in c.named() {
                    add(&mut ep_rows, &name, i, v, n);
                }
            }
            Err(e) => {
                eprintln!("uetctl: rank {}: COUNTERS_READ: {e}", r.report.rank);
                return ExitCode::FAILURE;
            }
        }
    }
    if as_json {
        let ranks: Vec<Value> = outcome
            .ranks
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let pick = |rows: &[(String, Vec<u64>)]| {
                    let m: Map<String, Value> = rows
                        .iter()
                        .map(|(k, v)| (k.clone(), json!(v.get(i).copied().unwrap_or(0))))
                        .collect();
                    Value::Object(m)
                };
                json!({
                    "rank": r.report.rank,
                    "fabric_addr": r.report.fabric_addr.to_string(),
                    "endpoint": r.endpoint.handle(),
                    "nic": pick(&nic_rows),
                    "endpoint_counters": pick(&ep_rows),
                })
            })
            .collect();
        outln!(
            "{:#}",
            json!({
                "ok": ok && captured,
                "job_id": cfg.job_id,
                "ranks": ranks,
                "pcap": outcome.capture_json(),
            })
        );
    } else {
        let header: Vec<String> = outcome
            .ranks
            .iter()
            .map(|r| format!("rank {}", r.report.rank))
            .collect();
        print_table("NIC counters (BAR0)", &header, &nic_rows);
        outln!();
        print_table("endpoint counters (COUNTERS_READ)", &header, &ep_rows);
        if !ok {
            outln!();
            outln!("FAILED: the demo job did not verify; see `uetctl demo`");
        }
    }
    if ok && captured {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn add(rows: &mut Vec<(String, Vec<u64>)>, name: &str, rank: usize, v: u64, n: usize) {
    let at = match rows.iter().position(|(k, _)| k == name) {
        Some(at) => at,
        None => {
            rows.push((name.to_string(), vec![0; n]));
            rows.len() - 1
        }
    };
    if let Some(slot) = rows.get_mut(at).and_then(|(_, v)| v.get_mut(rank)) {
        *slot = v;
    }
}

fn print_table(title: &str, header: &[String], rows: &[(String, Vec<u64>)]) {
    outln!("{title}");
    let name_w = rows
        .iter()
        .map(|(k, _)| k.len())
        .chain(std::iter::once("COUNTER".len()))
        .max()
        .unwrap_or(7);
    let col_w: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .map(|(_, v)| v.get(i).map_or(1, |x| x.to_string().len()))
                .chain(std::iter::once(h.len()))
                .max()
                .unwrap_or(1)
        })
        .collect();
    let mut line = format!("{:<name_w$}", "COUNTER");
    for (h, w) in header.iter().zip(&col_w) {
        line.push_str(&format!("  {h:>w$}"));
    }
    outln!("{line}");
    for (k, v) in rows {
        let mut line = format!("{k:<name_w$}");
        for (x, w) in v.iter().zip(&col_w) {
            line.push_str(&format!("  {x:>w$}"));
        }
        outln!("{line}");
    }
}
