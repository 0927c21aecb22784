//! `uetctl av dump`: a NIC's AV table read back with AV_READ, the host mirror beside it.

use serde_json::{json, Value};
use std::fmt::Write;
use uet_av::{FiError, NicAvTable};
use uet_driver::uet_fwif::NicAvEntry;
use uet_driver::Av;

/// Entries read per AV_READ.
const CHUNK: usize = 4096;

/// One index of the table, or a run of indices of one symmetric range on which NIC and
/// mirror agree: what the NIC holds and what the mirror says it should.
#[derive(Clone, Copy, Debug)]
pub struct DumpRow {
    /// `fi_addr_t` index (the first of the run).
    pub index: u32,
    /// Indices the row stands for: 1, or the length of a run of range members.
    pub span: u32,
    /// The NIC's entry at the last index of the run.
    pub last: NicAvEntry,
    /// The NIC's entry.
    pub nic: NicAvEntry,
    /// The mirror's entry.
    pub mirror: NicAvEntry,
}

impl DumpRow {
    /// Whether NIC and mirror disagree.
    pub fn differs(&self) -> bool {
        self.nic != self.mirror
    }
}

/// A dumped table.
#[derive(Clone, Debug)]
pub struct AvDump {
    /// Entries the table holds.
    pub capacity: u32,
    /// Indices where either side holds an entry, or the two differ.
    pub rows: Vec<DumpRow>,
}

impl AvDump {
    /// Indices where NIC and mirror disagree.
    pub fn differences(&self) -> usize {
        self.rows.iter().filter(|r| r.differs()).count()
    }
}

/// Read the whole NIC table back and pair it with the mirror.
pub fn collect(av: &mut Av) -> Result<AvDump, FiError> {
    let capacity = av.capacity() as u32;
    let mut rows: Vec<DumpRow> = Vec::new();
    let mut buf = vec![NicAvEntry::INVALID; CHUNK];
    let mut first = 0u32;
    while first < capacity {
        let n = (capacity - first).min(CHUNK as u32) as usize;
        av.nic_mut()
            .read_entries(first, &mut buf[..n])
            .map_err(|e| FiError::io(e.to_string()))?;
        for (i, nic) in buf[..n].iter().enumerate() {
            let index = first + i as u32;
            let mirror = av.mirror_entry(index).unwrap_or(NicAvEntry::INVALID);
            if !(nic.is_valid() || mirror.is_valid() || *nic != mirror) {
                continue;
            }
            // Fold a member of the same range as the previous row into it.
            if let Some(prev) = rows.last_mut() {
                let same_range = nic.is_range()
                    && *nic == mirror
                    && prev.nic == prev.mirror
                    && prev.nic.is_range()
                    && prev.nic.range_first == nic.range_first
                    && prev.index + prev.span == index;
                if same_range {
                    prev.span += 1;
                    prev.last = *nic;
                    continue;
                }
            }
            rows.push(DumpRow {
                index,
                span: 1,
                last: *nic,
                nic: *nic,
                mirror,
            });
        }
        first += n as u32;
    }
    Ok(AvDump { capacity, rows })
}

fn ri_range(e: &NicAvEntry) -> String {
    let start = e.ri_start.get();
    let count = e.ri_count.get();
    format!("{}..{}", start, u32::from(start) + u32::from(count))
}

fn auth_key(e: &NicAvEntry) -> String {
    if e.flags.get() & uet_driver::uet_fwif::av_entry::entry_flags::AUTH_KEY != 0 {
        e.auth_key.get().to_string()
    } else {
        "-".to_string()
    }
}

fn user_id(e: &NicAvEntry) -> String {
    e.user_id()
        .map_or_else(|| "-".to_string(), |u| format!("{u:#x}"))
}

/// The table as aligned text.
pub fn render_text(title: &str, dump: &AvDump) -> String {
    let header = [
        "INDEX",
        "VALID",
        "FABRIC ADDRESS",
        "PIDonFEP",
        "JOBID",
        "RI RANGE",
        "INITIATOR",
        "USER ID",
        "AUTH KEY",
        "KIND",
        "MIRROR",
    ];
    let mut rows: Vec<[String; 11]> = Vec::new();
    for r in &dump.rows {
        let e = if r.nic.is_valid() { &r.nic } else { &r.mirror };
        let valid = if r.nic.is_valid() { "yes" } else { "no" };
        let span = |a: String, b: String| {
            if r.span > 1 && a != b {
                format!("{a}..{b}")
            } else {
                a
            }
        };
        let (fa, pid, job, ri, init, uid, key) = if e.is_valid() {
            (
                span(e.fabric_ip().to_string(), r.last.fabric_ip().to_string()),
                span(
                    e.pid_on_fep.get().to_string(),
                    r.last.pid_on_fep.get().to_string(),
                ),
                format!("{:#x}", e.job_id.get()),
                ri_range(e),
                span(
                    format!("{:#x}", e.initiator.get()),
                    format!("{:#x}", r.last.initiator.get()),
                ),
                user_id(e),
                auth_key(e),
            )
        } else {
            Default::default()
        };
        let kind = if e.is_valid() && e.is_range() {
            format!(
                "range {}+{} ({} per node)",
                e.range_first.get(),
                e.range_count.get(),
                e.range_svc.get()
            )
        } else if e.is_valid() {
            "single".to_string()
        } else {
            String::new()
        };
        let index = if r.span > 1 {
            format!("{}..{}", r.index, u64::from(r.index) + u64::from(r.span))
        } else {
            r.index.to_string()
        };
        let mirror = if !r.differs() {
            "same".to_string()
        } else if r.mirror.is_valid() {
            match r.mirror.peer_address() {
                Some(a) => format!("DIFFERS: mirror holds {a}"),
                None => "DIFFERS".to_string(),
            }
        } else {
            "DIFFERS: mirror slot empty".to_string()
        };
        rows.push([
            index,
            valid.to_string(),
            fa,
            pid,
            job,
            ri,
            init,
            uid,
            key,
            kind,
            mirror,
        ]);
    }
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{title}: {} entries valid of {} capacity, {} differences between NIC and host mirror",
        dump.rows
            .iter()
            .filter(|r| r.nic.is_valid())
            .map(|r| r.span as usize)
            .sum::<usize>(),
        dump.capacity,
        dump.differences()
    );
    let line = |out: &mut String, cells: &[&str]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<w$}  ");
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut out, &header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    out
}

fn entry_json(e: &NicAvEntry) -> Value {
    if !e.is_valid() {
        return json!({ "valid": false });
    }
    json!({
        "valid": true,
        "fabric_addr": e.fabric_ip().to_string(),
        "pid_on_fep": e.pid_on_fep.get(),
        "job_id": e.job_id.get(),
        "ri_start": e.ri_start.get(),
        "ri_count": e.ri_count.get(),
        "initiator": e.initiator.get(),
        "user_id": e.user_id(),
        "auth_key": (e.flags.get() & uet_driver::uet_fwif::av_entry::entry_flags::AUTH_KEY != 0)
            .then(|| e.auth_key.get()),
        "range": e.is_range().then(|| json!({
            "first": e.range_first.get(),
            "count": e.range_count.get(),
            "services_per_node": e.range_svc.get(),
            "offset": e.range_offset.get(),
        })),
        "flags": e.flags.get(),
    })
}

/// The table as JSON.
pub fn render_json(dump: &AvDump) -> Value {
    json!({
        "capacity": dump.capacity,
        "differences": dump.differences(),
        "entries": dump.rows.iter().map(|r| json!({
            "index": r.index,
            "span": r.span,
            "nic": entry_json(&r.nic),
            "mirror": entry_json(&r.mirror),
            "match": !r.differs(),
        })).collect::<Vec<_>>(),
    })
}
