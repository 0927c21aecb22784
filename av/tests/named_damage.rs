//! A named AV's segment is memory another process writes: a bug or a stray write there must
//! not take this process down. Random words anywhere in a live segment (header, bitmap, change
//! log, range table, slots) are overwritten with values chosen to hurt (zero, all ones, the
//! capacity and just past it, counts in the high half, random), and then every kind of call
//! goes through the handle that was attached and through one that opens afterwards. Each call
//! answers, with a result or a fabric error that says what is wrong; none panics (in a debug
//! build that includes arithmetic overflow) and none hangs (nextest stops a test that does).
//! The segment is always removed at the end, whatever the damage did to its counters.
//!
//! `PROPTEST_CASES` sets the number of cases (512 by default); CI replays a fixed seed.

mod common;

use common::{open_named, pack, peer_bytes, proptest_cases, unique};
use proptest::prelude::*;
use uet_av::{AvAttr, AvName, FiError, MemoryNicTable, NamedAv, ADDR_LEN};

type Named = NamedAv<MemoryNicTable>;

/// Entries of the AV: a few bitmap words, slots beyond them.
const CAPACITY: usize = 80;

fn open(name: &str) -> Result<Named, FiError> {
    let attr = AvAttr {
        name: Some(AvName::new(name).map_err(|e| FiError::inval(e.to_string()))?),
        count: CAPACITY,
        job_id: 0x00ab_cdef,
        ..AvAttr::default()
    };
    open_named(attr)
}

/// Where a damaging write lands, by region of the segment's layout (`uet_av::named::segment`).
#[derive(Clone, Copy, Debug)]
enum Place {
    /// A header word (counters, offsets and sizes are the first 25).
    Header(u64),
    /// A word of the allocation bitmap.
    Bitmap(u64),
    /// A word of one of the change-log records written so far (the first 16).
    Log(u64),
    /// A word of one of the first range records (the live one among them).
    Range(u64),
    /// A word of one of the address slots.
    Slot(u64),
    /// Any word of the segment, as a fraction of its length.
    Anywhere(prop::sample::Index),
}

/// What a damaging write stores.
fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::from(u32::MAX)),
        Just(CAPACITY as u64),
        Just(CAPACITY as u64 + 1),
        (0u64..4).prop_map(|n| n << 32 | CAPACITY as u64),
        (0u64..(CAPACITY as u64 + 4)).prop_map(|n| u64::from(u32::MAX) << 32 | n),
        0u64..256,
        any::<u64>(),
    ]
}

fn place() -> impl Strategy<Value = Place> {
    prop_oneof![
        (0u64..25).prop_map(Place::Header),
        (0u64..2).prop_map(Place::Bitmap),
        (0u64..32).prop_map(Place::Log),
        (0u64..24).prop_map(Place::Range),
        (0u64..(CAPACITY as u64 * 4)).prop_map(Place::Slot),
        any::<prop::sample::Index>().prop_map(Place::Anywhere),
    ]
}

/// The segment file's word offsets of the regions, read from its header before any damage
/// (header words 6, 7, 20 and 8 hold the byte offsets of bitmap, log, range table and slots;
/// word 9 the size).
struct Geometry {
    bitmap: u64,
    log: u64,
    ranges: u64,
    slots: u64,
    words: u64,
}

fn geometry(path: &std::path::Path) -> Option<Geometry> {
    let bytes = std::fs::read(path).ok()?;
    let word = |w: usize| {
        let b = bytes.get(w * 8..w * 8 + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?) / 8)
    };
    Some(Geometry {
        bitmap: word(6)?,
        log: word(7)?,
        ranges: word(20)?,
        slots: word(8)?,
        words: bytes.len() as u64 / 8,
    })
}

/// Overwrite one little-endian word of the segment file.
fn poke(path: &std::path::Path, geo: &Geometry, place: Place, value: u64) {
    use std::os::unix::fs::FileExt;
    let word = match place {
        Place::Header(w) => w,
        Place::Bitmap(w) => geo.bitmap + w,
        Place::Log(w) => geo.log + w,
        Place::Range(w) => geo.ranges + w,
        Place::Slot(w) => geo.slots + w,
        Place::Anywhere(i) => i.index(geo.words.max(1) as usize) as u64,
    };
    if word < geo.words {
        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(path) {
            let _ = f.write_at(&value.to_le_bytes(), word * 8);
        }
    }
}

/// Every kind of call, each allowed to fail but not to panic; failures must say why.
fn exercise(av: &mut Named, round: u32) -> Result<(), TestCaseError> {
    let mut errors: Vec<FiError> = Vec::new();
    let mut note = |r: Result<(), FiError>| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    note(av.sync());
    note(av.len().map(drop));
    let mut addr = [0u8; ADDR_LEN];
    for fi_addr in (0..CAPACITY as u64 + 2).chain([u64::MAX]) {
        let mut len = ADDR_LEN;
        let r = av.lookup(fi_addr, &mut addr, &mut len);
        if r.is_ok() {
            let mut buf = [0u8; 128];
            let mut blen = buf.len();
            let _ = av.straddr(&addr, &mut buf, &mut blen);
        }
        note(r);
        note(av.address(fi_addr).map(drop));
    }
    let peers: Vec<_> = (0..4).map(|k| peer_bytes(1000 + round * 10 + k)).collect();
    let mut fi_addrs = [0u64; 4];
    note(
        av.insert(&pack(&peers), peers.len(), Some(&mut fi_addrs), 0)
            .map(drop),
    );
    note(av.remove(&fi_addrs[..2], 0));
    note(av.remove(&[3, 7], 0));
    note(av.insertsym("10.9.0.1", 3, "5", 2, None, 0, None).map(drop));
    note(av.insertsvc("10.9.1.1", Some("9"), None, 0, None).map(drop));
    note(av.verify_nic().map(drop));
    let _ = av.av().iter().count();
    for e in &errors {
        prop_assert!(!e.message.is_empty(), "an error without a message: {:?}", e);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(512), ..ProptestConfig::default() })]

    #[test]
    fn a_damaged_segment_gets_answers_not_panics(
        damage in prop::collection::vec((place(), value()), 1..6),
    ) {
        let name = unique("damage");
        let mut a = open(&name).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = a.segment_path().to_path_buf();
        // Singles, a removal and a symmetric range, so that every region holds something.
        let peers: Vec<_> = (0..6).map(peer_bytes).collect();
        a.insert(&pack(&peers), peers.len(), None, 0).map_err(|e| TestCaseError::fail(e.to_string()))?;
        a.remove(&[2], 0).map_err(|e| TestCaseError::fail(e.to_string()))?;
        a.insertsym("10.8.0.1", 4, "1", 4, None, 0, None).map_err(|e| TestCaseError::fail(e.to_string()))?;

        let geo = geometry(&path).ok_or_else(|| TestCaseError::fail("segment unreadable"))?;
        prop_assert!(geo.bitmap < geo.log && geo.log < geo.ranges && geo.ranges < geo.slots && geo.slots < geo.words);
        for &(place, value) in &damage {
            poke(&path, &geo, place, value);
        }
        let outcome: Result<(), TestCaseError> = (|| {
            exercise(&mut a, 0)?;
            if let Ok(mut b) = open(&name) {
                exercise(&mut b, 1)?;
                exercise(&mut a, 2)?;
                drop(b);
            }
            Ok(())
        })();
        drop(a);
        // Damage to the counters must not leave the segment behind, but if it did, the next
        // case must not find it.
        let left = path.exists();
        let _ = std::fs::remove_file(&path);
        outcome?;
        prop_assert!(!left, "the last close left {} behind", path.display());
    }
}
