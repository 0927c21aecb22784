//! `uetctl av dump`: a NIC's AV table read back with AV_READ, the host mirror beside it.

use serde_json::{json, Value};
use std::fmt::Write;
use uet_av::{FiError, NicAvTable};
use uet_driver::uet_fwif::NicAvEntry;
use uet_driver::Av;

/// Entries read per AV_READ.
const CHUNK: usize = 4096;

/// One index of the table: what the NIC holds and what the mirror says it should.
#[derive(Clone, Copy, Debug)]
pub struct DumpRow {
    /// `fi_addr_t` index.
    pub index: u32,
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
    let mut rows = Vec::new();
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
            if nic.is_valid() || mirror.is_valid() || *nic != mirror {
                rows.push(DumpRow {
                    index,
                    nic: *nic,
                    mirror,
                });
            }
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
        "MIRROR",
    ];
    let mut rows: Vec<[String; 9]> = Vec::new();
    for r in &dump.rows {
        let e = if r.nic.is_valid() { &r.nic } else { &r.mirror };
        let valid = if r.nic.is_valid() { "yes" } else { "no" };
        let (fa, pid, job, ri, init, uid) = if e.is_valid() {
            (
                e.fabric_ip().to_string(),
                e.pid_on_fep.get().to_string(),
                format!("{:#x}", e.job_id.get()),
                ri_range(e),
                format!("{:#x}", e.initiator.get()),
                user_id(e),
            )
        } else {
            Default::default()
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
            r.index.to_string(),
            valid.to_string(),
            fa,
            pid,
            job,
            ri,
            init,
            uid,
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
        dump.rows.iter().filter(|r| r.nic.is_valid()).count(),
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
            "nic": entry_json(&r.nic),
            "mirror": entry_json(&r.mirror),
            "match": !r.differs(),
        })).collect::<Vec<_>>(),
    })
}
