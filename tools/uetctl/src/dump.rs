//! `uetctl av dump`: a NIC's AV table read back with AV_READ, the host mirror beside it, the
//! AV's auth keys read back from the NIC's auth-key table, and the slots of that table the AV's
//! table owns but no key of the AV names (stray slots, each a difference).
//!
//! Ranges of values are written as in Rust: `a..b` excludes `b` (indices, resource indices),
//! `a..=b` includes it (addresses, PIDonFEPs, initiators of range members).
//!
//! In JSON, the 64-bit identifiers an application or the AV chooses (user ids, auth-key
//! handles, the `source` a key reports) are hex strings, `"0xfffd000000000001"`, as the text
//! shows them: an auth-key handle and `FI_ADDR_NOTAVAIL` are past 2^53, where a JSON number
//! is rounded by the readers that hold numbers as doubles (jq 1.6, JavaScript), and a user id
//! is often a pointer. Every other figure is a number.

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write;
use uet_av::{AuthKeyInfo, FiError, NicAvTable};
use uet_driver::uet_fwif::auth_key::AuthKeyEntry;
use uet_driver::uet_fwif::av_entry::entry_flags;
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
    /// The mirror's entry; `None` when the mirror was not read (a live process's dump).
    pub mirror: Option<NicAvEntry>,
}

impl DumpRow {
    /// Whether NIC and mirror disagree (never, when the mirror was not read).
    pub fn differs(&self) -> bool {
        self.mirror.is_some_and(|m| m != self.nic)
    }

    /// Whether NIC and mirror do not disagree (also when the mirror was not read).
    fn agrees(&self) -> bool {
        !self.differs()
    }
}

/// One auth key of the AV: the mirror's record and the NIC's slot.
#[derive(Clone, Copy, Debug)]
pub struct KeyRow {
    /// The mirror's key.
    pub key: AuthKeyInfo,
    /// The NIC's auth-key slot `key.slot`.
    pub nic: AuthKeyEntry,
    /// The NIC's handle of the AV's table: the owner the slot must name.
    pub av: u32,
}

impl KeyRow {
    /// Whether the NIC's slot holds something else than the key (JobID, source, owner), or
    /// nothing: the NIC uses a slot only for entries of the AV that owns it.
    pub fn differs(&self) -> bool {
        !(self.nic.is_valid()
            && self.nic.av.get() == self.av
            && self.nic.job_id.get() == self.key.job_id
            && self.nic.source.get() == self.key.source)
    }
}

/// A dumped table.
#[derive(Clone, Debug)]
pub struct AvDump {
    /// Entries the table holds.
    pub capacity: u32,
    /// Indices where either side holds an entry, or the two differ.
    pub rows: Vec<DumpRow>,
    /// The AV's auth keys (none unless its domain has `FI_AV_AUTH_KEY`).
    pub keys: Vec<KeyRow>,
    /// Auth-key slots the AV's table owns on the NIC that no key of the AV names
    /// (`AddressVector::stray_auth_key_slots`): each is a difference.
    pub stray: Vec<(u16, AuthKeyEntry)>,
    /// Whether the host mirror was read: false for a live process's dump, which has the
    /// NIC's side only (`keys` and `stray` are then empty and `nic_keys` lists the slots).
    pub mirror: bool,
    /// A live dump's auth-key slots the table owns on the NIC.
    pub nic_keys: Vec<(u16, AuthKeyEntry)>,
    /// A live dump of a named AV's table: the AV, read from its shared segment. When it was
    /// compared, `mirror` is true and each row's `mirror` is the entry the segment implies.
    pub named: Option<NamedSide>,
}

/// A named AV beside a live process's table of it (`uetctl av dump --pid`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedSide {
    /// The AV name.
    pub name: String,
    /// The generation of the AV read from its segment (`None`: not read).
    pub generation: Option<u64>,
    /// The generation of the AV the process's table reflected while it was read (`None`:
    /// not caught up yet, or it caught up during the read).
    pub reflected: Option<u64>,
    /// Handles attached to the AV, in every process.
    pub handles: Option<u64>,
    /// A writer that died in the middle of a change, not yet repaired.
    pub interrupted_writer: Option<u64>,
    /// Why the table was not compared with the AV; `None` when it was.
    pub not_compared: Option<String>,
}

/// The rows of a named AV's table: `nic`, the table's valid entries (ascending index),
/// beside `av`, the addresses the AV's segment holds (ascending index), each as the entry the
/// process's AV makes of it (JobID `job_id`, the flags of `defined_flags`). A NIC entry
/// agrees when it translates its index to the same peer: a member of a symmetric range
/// stands for the single entry of its member's address.
pub fn rows_against_named(
    nic: &[(u32, NicAvEntry)],
    av: &[(u32, [u8; 32])],
    job_id: u32,
    defined_flags: u16,
) -> Vec<DumpRow> {
    let mut rows = Vec::new();
    let (mut n, mut a) = (nic.iter().peekable(), av.iter().peekable());
    loop {
        let index = match (n.peek(), a.peek()) {
            (Some(x), Some(y)) => x.0.min(y.0),
            (Some(x), None) => x.0,
            (None, Some(y)) => y.0,
            (None, None) => break,
        };
        let held = n.next_if(|x| x.0 == index).map(|x| x.1);
        let expected = a
            .next_if(|y| y.0 == index)
            .and_then(|y| NicAvEntry::for_peer_bytes(&y.1, job_id))
            .map_or(NicAvEntry::INVALID, |e| e.with_flags_within(defined_flags));
        let nic = held.unwrap_or(NicAvEntry::INVALID);
        let mirror = if nic.is_valid() && nic.without_range() == expected {
            nic
        } else {
            expected
        };
        push_row(&mut rows, index, nic, Some(mirror));
    }
    rows
}

/// Add what index `index` holds to `rows`: nothing when neither side holds an entry and they
/// agree; folded into the previous row when both are members of one symmetric range on which
/// NIC and mirror (when read) agree.
pub fn push_row(rows: &mut Vec<DumpRow>, index: u32, nic: NicAvEntry, mirror: Option<NicAvEntry>) {
    let row = DumpRow {
        index,
        span: 1,
        last: nic,
        nic,
        mirror,
    };
    if !(nic.is_valid() || mirror.is_some_and(|m| m.is_valid()) || row.differs()) {
        return;
    }
    if let Some(prev) = rows.last_mut() {
        let same_range = nic.is_range()
            && row.agrees()
            && prev.agrees()
            && prev.nic.is_range()
            && prev.nic.range_first == nic.range_first
            && prev.index + prev.span == index
            && member_after(prev, index) == Some(nic);
        if same_range {
            prev.span += 1;
            prev.last = nic;
            return;
        }
    }
    rows.push(row);
}

/// The entry the range rule gives index `index` of the range whose member at `row.index` is
/// `row.nic`: member 0 worked back from it, then forward to `index`. `None` when `row.nic`
/// is no member the rule can give (its PIDonFEP, initiator or fabric address below what its
/// service or node adds). A row folds only the members the rule gives: a live dump has no
/// mirror to flag one that differs, and a folded row shows its first member's fields.
fn member_after(row: &DumpRow, index: u32) -> Option<NicAvEntry> {
    let e = row.nic;
    let svc = e.range_svc.get();
    if svc == 0 {
        return None;
    }
    let m = e
        .range_offset
        .get()
        .checked_add(row.index.checked_sub(e.range_first.get())?)?;
    let (node, service) = (m / svc, m % svc);
    let mut base = e;
    base.pid_on_fep.set(
        e.pid_on_fep
            .get()
            .checked_sub(u16::try_from(service).ok()?)?,
    );
    base.initiator.set(e.initiator.get().checked_sub(service)?);
    if e.flags.get() & entry_flags::IPV6 != 0 {
        let fa = u128::from_be_bytes(e.fabric_addr).checked_sub(u128::from(node))?;
        base.fabric_addr = fa.to_be_bytes();
    } else {
        let a = &e.fabric_addr;
        let fa = u32::from_be_bytes([a[0], a[1], a[2], a[3]]).checked_sub(node)?;
        base.fabric_addr[..4].copy_from_slice(&fa.to_be_bytes());
    }
    // The row's own member must come back as it is, or `base` is not its member 0.
    (base.range_member(row.index) == Some(e))
        .then(|| base.range_member(index))
        .flatten()
}

impl AvDump {
    /// What the other side of the comparison is, in messages: the host mirror, or the AV.
    fn side(&self) -> &'static str {
        if self.named.is_some() {
            "AV"
        } else {
            "mirror"
        }
    }

    /// Indices and auth keys where NIC and mirror disagree.
    pub fn differences(&self) -> usize {
        self.rows.iter().filter(|r| r.differs()).count()
            + self.keys.iter().filter(|k| k.differs()).count()
            + self.stray.len()
    }

    /// The JobID the NIC sends an entry with: its auth-key slot's, or its own.
    fn job_id_of(&self, e: &NicAvEntry) -> String {
        let Some(slot) = e.auth_key_slot() else {
            return format!("{:#x}", e.job_id.get());
        };
        // What the NIC sends with: the slot's JobID while the slot is the AV's, whatever else
        // about it differs; nothing when it is free or another AV's. A dump with the mirror
        // knows the AV's keys, and the slots the table owns that no key names (`stray`, which
        // the NIC uses for the table's entries all the same); a live dump has only the slots
        // the NIC says the table owns (`nic_keys`, which the driver lists by owner), so those
        // stand in for the keys.
        let held = match self.keys.iter().find(|k| k.key.slot == slot) {
            Some(k) => Some(k.nic).filter(|n| n.av.get() == k.av),
            None => self
                .nic_keys
                .iter()
                .chain(&self.stray)
                .find(|(s, _)| *s == slot)
                .map(|(_, n)| *n),
        };
        match held.filter(AuthKeyEntry::is_valid) {
            Some(n) => format!("{:#x} (key)", n.job_id.get()),
            None => "(no key)".to_string(),
        }
    }
}

/// Settle the AV (pending `FI_MORE` records sent, writes in flight completed), then read the
/// whole NIC table and the AV's auth-key slots back and pair them with the mirror.
pub fn collect(av: &mut Av) -> Result<AvDump, FiError> {
    av.settle()?;
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
            push_row(&mut rows, index, *nic, Some(mirror));
        }
        first += n as u32;
    }
    let infos: Vec<AuthKeyInfo> = av.auth_keys().collect();
    let owner = av.nic().table().handle();
    let mut keys = Vec::with_capacity(infos.len());
    for key in infos {
        let mut slot = [AuthKeyEntry::default()];
        av.nic_mut()
            .read_auth_keys(key.slot, &mut slot)
            .map_err(|e| e.within(format_args!("reading auth-key slot {}", key.slot)))?;
        keys.push(KeyRow {
            key,
            nic: slot[0],
            av: owner,
        });
    }
    let stray = av.stray_auth_key_slots()?;
    Ok(AvDump {
        capacity,
        rows,
        keys,
        stray,
        mirror: true,
        nic_keys: Vec::new(),
        named: None,
    })
}

fn ri_range(e: &NicAvEntry) -> String {
    let start = e.ri_start.get();
    let count = e.ri_count.get();
    format!("{}..{}", start, u32::from(start) + u32::from(count))
}

fn auth_key(e: &NicAvEntry) -> String {
    e.auth_key_slot()
        .map_or_else(|| "-".to_string(), |s| s.to_string())
}

fn user_id(e: &NicAvEntry) -> String {
    e.user_id()
        .map_or_else(|| "-".to_string(), |u| format!("{u:#x}"))
}

/// The service (member number mod services per node) of the row's first range member.
fn first_service(r: &DumpRow) -> u32 {
    let e = &r.nic;
    let svc = e.range_svc.get().max(1);
    let m0 =
        u64::from(e.range_offset.get()) + u64::from(r.index.saturating_sub(e.range_first.get()));
    (m0 % u64::from(svc)) as u32
}

/// The services of the range members a row stands for, as at most two runs
/// `(first, last)`: a run of members crossing into the next node starts over at service 0.
fn services(r: &DumpRow) -> Vec<(u32, u32)> {
    let svc = r.nic.range_svc.get().max(1);
    let s0 = first_service(r);
    let span = r.span.max(1);
    if span >= svc {
        return vec![(0, svc - 1)];
    }
    // In 64 bits: `s0` and `span` are each below `svc`, but their sum may pass 32 bits (a
    // live process's entries are what it sends).
    let end = u64::from(s0) + u64::from(span) - 1;
    match u32::try_from(end) {
        Ok(end) if end < svc => vec![(s0, end)],
        _ => {
            // Wrapped: s0..svc and 0..=end - svc, joined when they touch; `end - svc` is
            // below `s0`, so within 32 bits.
            let tail = u32::try_from(end - u64::from(svc)).unwrap_or(u32::MAX);
            if u64::from(tail) + 1 >= u64::from(s0) {
                vec![(0, svc - 1)]
            } else {
                vec![(0, tail), (s0, svc - 1)]
            }
        }
    }
}

/// A value that counts up with the service, over the row's members: `first_value` is the
/// row's first member's.
fn by_service(r: &DumpRow, first_value: u64, hex: bool) -> String {
    let runs = services(r);
    let base = first_value.saturating_sub(u64::from(first_service(r)));
    let show = |v: u64| {
        if hex {
            format!("{v:#x}")
        } else {
            v.to_string()
        }
    };
    runs.iter()
        .map(|&(a, b)| {
            let (a, b) = (base + u64::from(a), base + u64::from(b));
            if a == b {
                show(a)
            } else {
                format!("{}..={}", show(a), show(b))
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What differs between the NIC's entry and the mirror's (or the named AV's: `side` names
/// which), field by field: `field: mirror M, NIC N`.
fn describe_difference(nic: &NicAvEntry, mirror: &NicAvEntry, side: &str) -> String {
    if !mirror.is_valid() {
        return format!("{side} slot empty");
    }
    if !nic.is_valid() {
        return match mirror.peer_address() {
            Some(a) => format!("NIC entry invalid; {side} holds {a}"),
            None => "NIC entry invalid".to_string(),
        };
    }
    let mut parts = Vec::new();
    let mut field = |name: &str, m: String, n: String| {
        if m != n {
            parts.push(format!("{name}: {side} {m}, NIC {n}"));
        }
    };
    let addr = |e: &NicAvEntry| e.peer_address().map_or("?".into(), |a| a.to_string());
    field("address", addr(mirror), addr(nic));
    field(
        "JobID",
        format!("{:#x}", mirror.job_id.get()),
        format!("{:#x}", nic.job_id.get()),
    );
    field("user id", user_id(mirror), user_id(nic));
    field("auth key", auth_key(mirror), auth_key(nic));
    let range = |e: &NicAvEntry| {
        if e.is_range() {
            format!(
                "{}+{} svc {} offset {}",
                e.range_first.get(),
                e.range_count.get(),
                e.range_svc.get(),
                e.range_offset.get()
            )
        } else {
            "-".into()
        }
    };
    field("range", range(mirror), range(nic));
    field(
        "flags",
        format!("{:#x}", mirror.flags.get()),
        format!("{:#x}", nic.flags.get()),
    );
    field("caps", mirror.caps.to_string(), nic.caps.to_string());
    field(
        "version",
        mirror.version.to_string(),
        nic.version.to_string(),
    );
    if parts.is_empty() {
        // Bytes no field above shows (reserved ones).
        "raw bytes".to_string()
    } else {
        parts.join("; ")
    }
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
        if dump.named.is_some() {
            "NAMED AV"
        } else {
            "MIRROR"
        },
    ];
    let mut rows: Vec<[String; 11]> = Vec::new();
    for r in &dump.rows {
        let e = match r.mirror {
            Some(m) if !r.nic.is_valid() => m,
            _ => r.nic,
        };
        let e = &e;
        let valid = if r.nic.is_valid() { "yes" } else { "no" };
        let folded = r.span > 1 && e.is_range();
        let (fa, pid, job, ri, init, uid, key) = if e.is_valid() {
            let fa = if folded && r.last.fabric_ip() != e.fabric_ip() {
                format!("{}..={}", e.fabric_ip(), r.last.fabric_ip())
            } else {
                e.fabric_ip().to_string()
            };
            let (pid, init) = if folded {
                (
                    by_service(r, u64::from(e.pid_on_fep.get()), false),
                    by_service(r, u64::from(e.initiator.get()), true),
                )
            } else {
                (
                    e.pid_on_fep.get().to_string(),
                    format!("{:#x}", e.initiator.get()),
                )
            };
            (
                fa,
                pid,
                dump.job_id_of(e),
                ri_range(e),
                init,
                user_id(e),
                auth_key(e),
            )
        } else {
            Default::default()
        };
        let mut kind = if e.is_valid() && e.is_range() {
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
        if e.is_valid() && e.max_msg_mtu() {
            kind.push_str(", one-MTU messages");
        }
        let index = if r.span > 1 {
            format!("{}..{}", r.index, u64::from(r.index) + u64::from(r.span))
        } else {
            r.index.to_string()
        };
        let mirror = match r.mirror {
            Some(m) if m != r.nic => {
                format!("DIFFERS: {}", describe_difference(&r.nic, &m, dump.side()))
            }
            Some(_) => "same".to_string(),
            None => "-".to_string(),
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
    let mut out = String::new();
    let valid = dump
        .rows
        .iter()
        .filter(|r| r.nic.is_valid())
        .map(|r| r.span as usize)
        .sum::<usize>();
    let _ = if let Some(named) = &dump.named {
        let state = match (&named.not_compared, named.generation) {
            (None, Some(g)) => format!(
                "{} differences between NIC and the AV (generation {g}, {} handles)",
                dump.differences(),
                named.handles.unwrap_or(0)
            ),
            // The reason may quote the name.
            (reason, _) => format!(
                "the NIC's side only: {}",
                crate::out::printable(reason.as_deref().unwrap_or("the AV was not read"))
            ),
        };
        let dead = named.interrupted_writer.map_or(String::new(), |pid| {
            format!(
                "\nprocess {pid} died in the middle of a change; the next process to change \
                 the AV repairs it"
            )
        });
        writeln!(
            out,
            "{title} (named AV '{}'): {valid} entries valid of {} capacity, {state}{dead}",
            crate::out::printable(&named.name),
            dump.capacity,
        )
    } else if dump.mirror {
        writeln!(
            out,
            "{title}: {valid} entries valid of {} capacity, {} differences between NIC and host \
             mirror",
            dump.capacity,
            dump.differences()
        )
    } else {
        writeln!(
            out,
            "{title}: {valid} entries valid of {} capacity (the NIC's side: the host mirror \
             belongs to the process and is not read)",
            dump.capacity,
        )
    };
    write_table(&mut out, &header, &rows);
    if !dump.keys.is_empty() {
        let header = ["KEY", "SLOT", "JOBID", "SOURCE", "BOUND", "NIC SLOT"];
        let keys: Vec<[String; 6]> = dump
            .keys
            .iter()
            .map(|k| {
                let nic = if !k.differs() {
                    "same".to_string()
                } else if k.nic.is_valid() {
                    format!(
                        "DIFFERS: JobID {:#x}, source {:#x}, AV {}",
                        k.nic.job_id.get(),
                        k.nic.source.get(),
                        k.nic.av.get()
                    )
                } else {
                    "DIFFERS: slot empty".to_string()
                };
                [
                    format!("{:#x}", k.key.handle),
                    k.key.slot.to_string(),
                    format!("{:#x}", k.key.job_id),
                    format!("{:#x}", k.key.source),
                    k.key.bound.to_string(),
                    nic,
                ]
            })
            .collect();
        out.push('\n');
        write_table(&mut out, &header, &keys);
    }
    if !dump.nic_keys.is_empty() {
        let header = ["AUTH-KEY SLOT", "JOBID", "SOURCE", "GRANTS"];
        let slots: Vec<[String; 4]> = dump
            .nic_keys
            .iter()
            .map(|(slot, e)| slot_cells(*slot, e))
            .collect();
        out.push('\n');
        write_table(&mut out, &header, &slots);
    }
    if !dump.stray.is_empty() {
        let header = ["STRAY SLOT", "JOBID", "SOURCE", "GRANTS", "NIC SLOT"];
        let stray: Vec<[String; 5]> = dump
            .stray
            .iter()
            .map(|(slot, e)| {
                let [slot, job, source, grants] = slot_cells(*slot, e);
                [
                    slot,
                    job,
                    source,
                    grants,
                    "DIFFERS: the AV's table owns it, no key of the AV names it".to_string(),
                ]
            })
            .collect();
        out.push('\n');
        write_table(&mut out, &header, &stray);
    }
    out
}

/// An auth-key slot of the NIC as cells: slot, JobID, source, grants.
fn slot_cells(slot: u16, e: &AuthKeyEntry) -> [String; 4] {
    [
        slot.to_string(),
        format!("{:#x}", e.job_id.get()),
        format!("{:#x}", e.source.get()),
        e.grants.get().to_string(),
    ]
}

/// `rows` under `header`, columns aligned (the last one as it is).
fn write_table<const N: usize>(out: &mut String, header: &[&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
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
    line(out, header);
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(out, &cells);
    }
}

/// A 64-bit identifier as the JSON documents hold it (see the module's documentation).
fn id_json(id: u64) -> String {
    format!("{id:#x}")
}

/// An entry as JSON. Keys in alphabetical order, as a `serde_json` map prints them: the
/// same document whether the dump is written entry by entry ([`Json`]) or built first
/// ([`render_json`]).
struct EntryJson<'a>(&'a NicAvEntry);

impl Serialize for EntryJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        if !e.is_valid() {
            let mut m = s.serialize_map(Some(1))?;
            m.serialize_entry("valid", &false)?;
            return m.end();
        }
        let mut m = s.serialize_map(Some(15))?;
        m.serialize_entry("absolute", &(e.flags.get() & entry_flags::ABSOLUTE != 0))?;
        m.serialize_entry("auth_key", &e.auth_key_slot())?;
        m.serialize_entry("caps", &e.caps)?;
        m.serialize_entry("fabric_addr", &e.fabric_ip().to_string())?;
        m.serialize_entry("flags", &e.flags.get())?;
        m.serialize_entry("initiator", &e.initiator.get())?;
        m.serialize_entry("job_id", &e.job_id.get())?;
        m.serialize_entry("max_msg_mtu", &e.max_msg_mtu())?;
        m.serialize_entry("pid_on_fep", &e.pid_on_fep.get())?;
        m.serialize_entry(
            "range",
            &e.is_range().then(|| {
                json!({
                    "first": e.range_first.get(),
                    "count": e.range_count.get(),
                    "services_per_node": e.range_svc.get(),
                    "offset": e.range_offset.get(),
                })
            }),
        )?;
        m.serialize_entry("ri_count", &e.ri_count.get())?;
        m.serialize_entry("ri_start", &e.ri_start.get())?;
        m.serialize_entry("user_id", &e.user_id().map(id_json))?;
        m.serialize_entry("valid", &true)?;
        m.serialize_entry("version", &e.version)?;
        m.end()
    }
}

/// A row of the table as JSON (keys in alphabetical order, as [`EntryJson`]).
struct RowJson<'a>(&'a DumpRow);

impl Serialize for RowJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("index", &r.index)?;
        m.serialize_entry("match", &r.mirror.is_some().then(|| !r.differs()))?;
        m.serialize_entry("mirror", &r.mirror.as_ref().map(EntryJson))?;
        m.serialize_entry("nic", &EntryJson(&r.nic))?;
        m.serialize_entry("span", &r.span)?;
        m.end()
    }
}

/// The rows of a table as a JSON array, written one by one.
struct RowsJson<'a>(&'a [DumpRow]);

impl Serialize for RowsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for r in self.0 {
            seq.serialize_element(&RowJson(r))?;
        }
        seq.end()
    }
}

/// The table as JSON, written entry by entry when serialized (`serde_json::to_writer`): the
/// document [`render_json`] builds, without all of it in memory at once. Built as one
/// `serde_json::Value`, each entry takes a few KiB, gigabytes for a table of a million.
pub struct Json<'a>(pub &'a AvDump);

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Everything but the entries, whose place the map's order keeps.
        let head = head_json(self.0);
        let mut m = s.serialize_map(Some(head.len()))?;
        for (k, v) in &head {
            if k == "entries" {
                m.serialize_entry(k, &RowsJson(&self.0.rows))?;
            } else {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// The table as JSON, built ([`Json`] writes it without building it).
pub fn render_json(dump: &AvDump) -> Value {
    // Serializing plain values into a `Value` does not fail.
    serde_json::to_value(Json(dump)).unwrap_or_default()
}

/// The table's document as [`render_json`] has it, with `entries` null.
fn head_json(dump: &AvDump) -> serde_json::Map<String, Value> {
    let head = json!({
        "capacity": dump.capacity,
        "mirror_read": dump.mirror,
        "compared_with": match (&dump.named, dump.mirror) {
            (Some(_), true) => Some("named_av"),
            (None, true) => Some("mirror"),
            _ => None,
        },
        "named_av": dump.named.as_ref().map(|n| json!({
            "name": n.name,
            "generation": n.generation,
            "reflected_generation": n.reflected,
            "handles": n.handles,
            "interrupted_writer": n.interrupted_writer,
            "not_compared": n.not_compared,
        })),
        "differences": dump.mirror.then(|| dump.differences()),
        "entries": null,
        "auth_keys": dump.keys.iter().map(|k| json!({
            "handle": id_json(k.key.handle),
            "slot": k.key.slot,
            "job_id": k.key.job_id,
            "source": id_json(k.key.source),
            "user_id": k.key.user_id.map(id_json),
            "bound": k.key.bound,
            "nic": {
                "valid": k.nic.is_valid(),
                "av": k.nic.av.get(),
                "job_id": k.nic.job_id.get(),
                "source": id_json(k.nic.source.get()),
                "grants": k.nic.grants.get(),
            },
            "match": !k.differs(),
        })).collect::<Vec<_>>(),
        "nic_auth_key_slots": dump.nic_keys.iter().map(|(slot, e)| json!({
            "slot": slot,
            "job_id": e.job_id.get(),
            "source": id_json(e.source.get()),
            "grants": e.grants.get(),
        })).collect::<Vec<_>>(),
        "stray_auth_key_slots": dump.stray.iter().map(|(slot, e)| json!({
            "slot": slot,
            "job_id": e.job_id.get(),
            "source": id_json(e.source.get()),
            "grants": e.grants.get(),
        })).collect::<Vec<_>>(),
    });
    match head {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}
