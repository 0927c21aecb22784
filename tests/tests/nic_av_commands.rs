//! The simulated NIC's AV commands take input from the host, which may be wrong: random
//! AV_WRITE batches (records near valid ones, with flipped bytes and indices around the end of
//! the table) and random raw AV and auth-key admin commands (any body, any handle). Every
//! command completes with a status; none panics or hangs the admin queue, which takes the next
//! command as before. A refused command changes nothing in the table (an AV_WRITE batch is
//! stored whole or not at all); an accepted AV_WRITE changes no entry its records do not name.
//!
//! `PROPTEST_CASES` sets the number of cases (64 by default); CI replays a fixed seed.

use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};
use uet_av::NicAvTable;
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::{AdminCommand, AvWriteRecord, NicAvEntry, UetAddress};
use uet_tests::{fabric, Node};
use zerocopy::little_endian::U32;
use zerocopy::{FromZeros, IntoBytes};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64)
}

/// Entries of the node's AV.
const CAPACITY: u32 = 16;

/// One NIC with an AV of [`CAPACITY`] entries and an endpoint bound to it.
fn node() -> (uet_sim::Fabric, Node) {
    let (f, fns) = fabric(1);
    let function = fns.into_iter().next().expect("one function");
    (f, Node::new(function, 1, CAPACITY as usize))
}

/// Every entry of the NIC table, read back with AV_READ.
fn table(node: &mut Node) -> Vec<NicAvEntry> {
    let mut out = vec![NicAvEntry::INVALID; node.av.capacity()];
    node.av
        .nic_mut()
        .read_entries(0, &mut out)
        .expect("AV_READ of the whole table");
    out
}

fn peer(n: u32) -> UetAddress {
    UetAddress {
        caps: caps::AI_BASE,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: (n % 4096) as u16,
        fabric_addr: IpAddr::V4(Ipv4Addr::from(0x0A00_0100 + n)),
        ri_start: 1,
        ri_count: 4,
        initiator: n,
    }
}

/// A record: a valid entry for a peer, sometimes with up to three bytes replaced, mostly at an
/// index in the table, else just past it or at the end of the integer; its reserved word
/// rarely set. About half the batches are good throughout.
fn record(cap: u32) -> impl Strategy<Value = AvWriteRecord> {
    (
        prop_oneof![20 => 0..cap, 1 => cap..cap + 2, 1 => Just(u32::MAX)],
        0u32..1000,
        prop_oneof![
            9 => Just(Vec::new()),
            1 => prop::collection::vec((0usize..64, any::<u8>()), 1..4),
        ],
        prop::bool::weighted(0.02),
    )
        .prop_map(|(index, n, flips, reserved)| {
            let mut r = AvWriteRecord::new_zeroed();
            r.index = U32::new(index);
            r.reserved = U32::new(u32::from(reserved));
            let mut entry = NicAvEntry::for_peer(&peer(n), 0x00ab_cdef);
            let bytes = entry.as_mut_bytes();
            for (at, v) in flips {
                if let Some(b) = bytes.get_mut(at) {
                    *b = v;
                }
            }
            r.entry = entry;
            r
        })
}

/// Opcodes of the AV and auth-key commands, and a few that are none.
const OPCODES: &[u8] = &[
    0x20, 0x21, 0x22, 0x23, 0x24, 0x50, 0x51, 0x52, 0x53, 0x54, 0x00, 0x25, 0x7f, 0xff,
];

/// A raw command: mostly zero bodies with a few bytes set, handles near the node's AV.
fn raw_command() -> impl Strategy<Value = (u8, u8, u32, Vec<(usize, u8)>)> {
    (
        prop::sample::select(OPCODES),
        prop_oneof![4 => Just(0u8), 1 => any::<u8>()],
        prop_oneof![Just(0u32), 1u32..4, Just(u32::MAX), any::<u32>()],
        prop_oneof![
            Just(Vec::new()),
            prop::collection::vec((0usize..56, any::<u8>()), 1..3),
            prop::collection::vec((0usize..56, any::<u8>()), 3..8),
        ],
    )
}

/// The table's indices a batch names: each record's own, and a range entry's members.
fn named_by(records: &[AvWriteRecord]) -> impl Fn(usize) -> bool + '_ {
    move |i| {
        records.iter().any(|r| {
            let first = r.index.get() as usize;
            let members = if r.entry.is_range() {
                r.entry.range_count.get() as usize
            } else {
                1
            };
            (first..first.saturating_add(members.max(1))).contains(&i)
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn av_write_batches_are_stored_whole_or_not_at_all(
        batch in prop::collection::vec(record(CAPACITY), 2..5),
    ) {
        let (_f, mut node) = node();
        prop_assert_eq!(node.av.capacity(), CAPACITY as usize);
        let before = table(&mut node);
        let r = node.av.nic_mut().write_entries(&batch);
        let after = table(&mut node);
        match r {
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                prop_assert!(after == before, "a refused AV_WRITE changed the table: {}", e);
            }
            Ok(()) => {
                let named = named_by(&batch);
                for (i, (a, b)) in after.iter().zip(&before).enumerate() {
                    prop_assert!(named(i) || a == b, "index {} changed, named by no record", i);
                }
                for rec in &batch {
                    prop_assert!((rec.index.get() as usize) < after.len());
                    prop_assert_eq!(rec.reserved.get(), 0);
                }
            }
        }
        // The queue takes the next command.
        let _ = table(&mut node);
    }

    #[test]
    fn raw_av_commands_get_a_status_and_refusals_change_nothing(
        (opcode, flags, handle, body) in raw_command(),
    ) {
        let (_f, mut node) = node();
        let before = table(&mut node);
        let mut raw = AdminCommand::new_zeroed();
        raw.opcode = opcode;
        raw.flags = flags;
        raw.handle = U32::new(match handle {
            1..=3 => node.av.nic_mut().table_handle().unwrap_or(1) + handle - 1,
            h => h,
        });
        for (at, v) in body {
            if let Some(b) = raw.body.get_mut(at) {
                *b = v;
            }
        }
        let r = node.nic.admin_raw(raw);
        if let Err(e) = &r {
            prop_assert!(!e.to_string().is_empty());
            prop_assert!(table(&mut node) == before, "a refused command changed the table: {}", e);
        }
        // The queue takes the next command (unless the command destroyed the AV, which an
        // endpoint holds: AV_DESTROY of it is refused).
        let _ = table(&mut node);
    }
}
