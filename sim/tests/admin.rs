//! Admin queue and firmware: every opcode's success and error paths.

mod common;

use common::*;
use uet_fwif::admin::{BufferBody, RangeBody};
use uet_fwif::auth_key::AuthKeyRemoveBody;
use uet_fwif::av_entry::entry_flags;
use uet_fwif::identify::IdentifyData;
use uet_fwif::{AdminCommand, Command, NicAvEntry, Status, UetAddress};
use uet_regs::*;
use uet_sim::{Fabric, NicConfig};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

fn peer(ip: &str, pid: u16, initiator: u32) -> UetAddress {
    UetAddress {
        caps: 0,
        mode: uet_fwif::address::AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: pid,
        fabric_addr: addr(ip),
        ri_start: 1,
        ri_count: 4,
        initiator,
    }
}

const UNMAPPED: u64 = 0x7000_0000;

#[test]
fn identify() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.1.2.3");
    let buf = d.iova(SCRATCH_OFF);
    let c = d.submit(Command::Identify(BufferBody {
        buf: U64::new(buf),
        len: U32::new(128),
        ..FromZeros::new_zeroed()
    }));
    assert_eq!(c.status(), Status::Success);
    let id = IdentifyData::read_from_bytes(&d.mem.read(SCRATCH_OFF, 128)).unwrap();
    assert_eq!(id.vendor_id.get(), PCI_VENDOR_ID);
    assert_eq!(id.fabric_ip(), addr("10.1.2.3"));
    assert_eq!(id.serial_str(), "SIM-10.1.2.3");
    let c = d.submit(Command::Identify(BufferBody {
        buf: U64::new(buf),
        len: U32::new(127),
        ..FromZeros::new_zeroed()
    }));
    assert_eq!(c.status(), Status::InvalidField);
    let c = d.submit(Command::Identify(BufferBody {
        buf: U64::new(UNMAPPED),
        len: U32::new(128),
        ..FromZeros::new_zeroed()
    }));
    assert_eq!(c.status(), Status::DmaFault);
    // Straddling the end of the mapping is a fault too, and nothing is written.
    let c = d.submit(Command::Identify(BufferBody {
        buf: U64::new(MEM_IOVA + MEM_BYTES as u64 - 64),
        len: U32::new(128),
        ..FromZeros::new_zeroed()
    }));
    assert_eq!(c.status(), Status::DmaFault);
    assert_eq!(d.f.counter(DMA_FAULTS), 2);
    assert_eq!(d.f.counter(ADMIN_COMMANDS), 4);
    assert_eq!(d.f.counter(ADMIN_ERRORS), 3);
    assert!(d.f.read(INTR_CAUSE).admin());
    assert!(!d.f.read(DEV_STATUS).fatal());
}

#[test]
fn unknown_opcode_and_bad_layout() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let mut raw = AdminCommand::new_zeroed();
    raw.opcode = 0x7E;
    assert_eq!(d.submit_raw(raw).status(), Status::InvalidOpcode);
    let mut raw = Command::AvDestroy { av: 1 }.encode(0);
    raw.body[3] = 1;
    assert_eq!(d.submit_raw(raw).status(), Status::InvalidField);
    let mut raw = Command::AvDestroy { av: 1 }.encode(0);
    raw.flags = 1;
    assert_eq!(d.submit_raw(raw).status(), Status::InvalidField);
    assert_eq!(d.f.counter(ADMIN_ERRORS), 3);
}

#[test]
fn av_create_and_destroy() {
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(addr("10.0.0.1"));
    cfg.av_tables = 2;
    let mut d = Driver::with_config(&fabric, cfg);
    assert_eq!(d.av_create(0, 0), Err(Status::InvalidField));
    assert_eq!(d.av_create((1 << 20) + 1, 0), Err(Status::InvalidField));
    assert_eq!(d.av_create(8, 9), Err(Status::InvalidField));
    assert_eq!(d.av_create(1 << 20, 8), Ok(1));
    assert_eq!(d.av_create(8, 0), Ok(2));
    assert_eq!(d.av_create(8, 0), Err(Status::NoResources));
    assert_eq!(
        d.submit(Command::AvDestroy { av: 1 }).status(),
        Status::Success
    );
    assert_eq!(
        d.submit(Command::AvDestroy { av: 1 }).status(),
        Status::InvalidHandle
    );
    assert_eq!(
        d.submit(Command::AvDestroy { av: 0 }).status(),
        Status::InvalidHandle
    );
    assert_eq!(d.av_create(8, 0), Ok(1), "lowest free handle");
    // Busy while bound.
    let _ep = d.ep_create(2, 1, 0, 1).unwrap();
    assert_eq!(
        d.submit(Command::AvDestroy { av: 2 }).status(),
        Status::Busy
    );
}

/// A NIC's tables share its table memory (`NicConfig::av_table_memory_entries`): an
/// AV_CREATE whose table would take the live tables past it is NoResources, with a table
/// free; a table destroyed gives its entries back.
#[test]
fn av_create_is_no_resources_past_the_table_memory() {
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(addr("10.0.0.1"));
    cfg.av_table_memory_entries = Some(1000);
    let mut d = Driver::with_config(&fabric, cfg);
    assert_eq!(d.av_create(600, 0), Ok(1));
    assert_eq!(d.av_create(401, 0), Err(Status::NoResources));
    assert_eq!(d.av_create(400, 0), Ok(2), "exactly what is left");
    assert_eq!(d.av_create(1, 0), Err(Status::NoResources));
    assert_eq!(
        d.submit(Command::AvDestroy { av: 1 }).status(),
        Status::Success
    );
    assert_eq!(
        d.av_create(600, 0),
        Ok(1),
        "the destroyed table's memory is back"
    );

    let mut none = NicConfig::new(addr("10.0.0.2"));
    none.av_table_memory_entries = Some(0);
    assert!(fabric.add_nic(none).is_err(), "no table memory at all");
}

/// How a test stages an entry in the AV write window.
#[derive(Clone, Copy)]
enum Staging {
    /// Eight 64-bit writes.
    Words,
    /// Sixteen 32-bit writes, low half first.
    Halves,
    /// One burst of eight words (a write-combined line).
    Burst,
    /// Two bursts, of three and five words.
    TwoBursts,
}

/// Stage `e` in the AV write window as `how` says, and ring for `index`.
fn window_write(f: &uet_sim::SimFunction, av: u32, index: u32, e: &NicAvEntry, how: Staging) {
    let regs = [
        AV_WRITE_ENTRY_0,
        AV_WRITE_ENTRY_1,
        AV_WRITE_ENTRY_2,
        AV_WRITE_ENTRY_3,
        AV_WRITE_ENTRY_4,
        AV_WRITE_ENTRY_5,
        AV_WRITE_ENTRY_6,
        AV_WRITE_ENTRY_7,
    ];
    let words: Vec<u64> = e
        .as_bytes()
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .collect();
    match how {
        Staging::Words | Staging::Halves => {
            for (reg, &v) in regs.iter().zip(&words) {
                if matches!(how, Staging::Halves) {
                    f.write32(reg.offset(), v as u32);
                    f.write32(reg.offset() + 4, (v >> 32) as u32);
                } else {
                    f.write(*reg, v);
                }
            }
        }
        Staging::Burst => f.write64_burst(AV_WRITE_ENTRY_0.offset(), &words),
        Staging::TwoBursts => {
            f.write64_burst(AV_WRITE_ENTRY_0.offset(), &words[..3]);
            f.write64_burst(AV_WRITE_ENTRY_3.offset(), &words[3..]);
        }
    }
    f.write(
        AV_WRITE_DOORBELL,
        AvWriteDoorbell::new().with_av(av as u16).with_index(index),
    );
}

#[test]
fn av_write_window_stores_what_av_write_would_and_drops_what_it_would_refuse() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(16, 0).unwrap();
    let commands = rd(&d.f, ADMIN_COMMANDS);
    let a = NicAvEntry::for_peer(&peer("10.0.0.2", 5, 1), 7);
    let b = NicAvEntry::for_peer(&peer("10.0.0.3", 6, 2), 7).with_user_id(99);
    window_write(&d.f, av, 0, &a, Staging::Burst);
    window_write(&d.f, av, 15, &b, Staging::Halves);
    assert_eq!(rd(&d.f, ADMIN_COMMANDS), commands, "no admin command");
    let got = d.av_read(av, 0, 16).unwrap();
    assert_eq!((got[0], got[15]), (a, b));
    assert!(got[1..15].iter().all(|e| !e.is_valid()));
    assert_eq!(rd(&d.f, AV_WRITE_DROPS), 0);

    // A symmetric range through the window, then a single entry over one of its members.
    let r = NicAvEntry::range(&a, 8, 4, 0, 6);
    window_write(&d.f, av, 4, &r, Staging::TwoBursts);
    assert_eq!(
        d.av_read(av, 4, 6).unwrap(),
        (0..6)
            .map(|m| r.range_member(4 + m).unwrap())
            .collect::<Vec<_>>()
    );

    // What AV_WRITE refuses, the window drops and counts; nothing changes.
    let c = NicAvEntry::for_peer(&peer("10.0.0.4", 7, 3), 7);
    let mut bad = c;
    bad.reserved[0] = 1;
    let mut wide = c;
    wide.job_id = U32::new(1 << 24);
    let refused = [
        (av, 16, c),                 // index outside the table
        (av, 1, bad),                // reserved bytes set
        (av, 2, wide),               // JobID wider than 24 bits
        (av, 6, c),                  // inside the range
        (99, 1, c),                  // no such table
        (av, 3, c.with_auth_key(0)), // an auth-key slot this AV does not own
    ];
    let before = d.av_read(av, 0, 16).unwrap();
    for (n, (t, index, e)) in refused.iter().enumerate() {
        window_write(&d.f, *t, *index, e, Staging::Words);
        assert_eq!(rd(&d.f, AV_WRITE_DROPS), n as u64 + 1, "refusal {n}");
    }
    assert_eq!(d.av_read(av, 0, 16).unwrap(), before, "nothing changed");

    // A good write after the refusals still lands.
    window_write(&d.f, av, 1, &c, Staging::Burst);
    assert_eq!(d.av_read(av, 1, 1).unwrap()[0], c);
}

/// The AV doorbells change table memory directly, with no queue and no DMA: they act at once
/// whether or not the function runs (the tables are kept while it is stopped), unlike the
/// queue doorbells, which are latched until it runs again.
#[test]
fn av_doorbells_act_while_the_function_is_stopped() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(16, 0).unwrap();
    let a = NicAvEntry::for_peer(&peer("10.0.0.2", 5, 1), 7);
    let b = NicAvEntry::for_peer(&peer("10.0.0.3", 6, 2), 7);
    assert_eq!(d.av_write(av, &[(0, a)]), Ok(1));
    d.f.write(DEV_CTRL, DevCtrl::new());
    assert!(!rd(&d.f, DEV_STATUS).enabled());
    window_write(&d.f, av, 1, &b, Staging::Burst);
    d.f.write(
        AV_INVALIDATE_DOORBELL,
        AvInvalidateDoorbell::new().with_av(av as u16).with_index(0),
    );
    assert_eq!(rd(&d.f, AV_WRITE_DROPS), 0);
    assert_eq!(rd(&d.f, AV_INVALIDATE_DROPS), 0);
    d.f.write(DEV_CTRL, DevCtrl::new().with_enable(true));
    assert!(rd(&d.f, DEV_STATUS).enabled());
    let got = d.av_read(av, 0, 2).unwrap();
    assert!(!got[0].is_valid(), "invalidated while stopped");
    assert_eq!(got[1], b, "written while stopped");
}

/// An AV doorbell written as two 32-bit halves, low half first, rings once with both: the
/// entry it names changes, and entry 0 (the index a high half alone carries) does not. A
/// high half with no low half before it is a bad access and changes nothing.
#[test]
fn an_av_doorbell_written_in_halves_rings_once_for_the_entry_it_names() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(16, 0).unwrap();
    let a = NicAvEntry::for_peer(&peer("10.0.0.2", 5, 1), 7);
    let b = NicAvEntry::for_peer(&peer("10.0.0.3", 6, 2), 7);
    assert_eq!(d.av_write(av, &[(0, a), (5, a)]), Ok(2));
    let halves = |reg: u32, v: u64| {
        d.f.write32(reg, v as u32);
        d.f.write32(reg + 4, (v >> 32) as u32);
    };
    let invalidate = AvInvalidateDoorbell::new().with_av(av as u16).with_index(5);
    halves(AV_INVALIDATE_DOORBELL.offset(), invalidate.into_bits());
    window_write(&d.f, av, 9, &b, Staging::Words);
    // The window's own doorbell again, in halves, for index 7.
    let write = AvWriteDoorbell::new().with_av(av as u16).with_index(7);
    halves(AV_WRITE_DOORBELL.offset(), write.into_bits());
    let got = d.av_read(av, 0, 16).unwrap();
    assert_eq!(got[0], a, "entry 0 untouched");
    assert!(!got[5].is_valid(), "entry 5 invalidated");
    assert_eq!((got[7], got[9]), (b, b), "written at 7 as at 9");
    assert_eq!(rd(&d.f, AV_INVALIDATE_DROPS), 0);
    assert_eq!(rd(&d.f, AV_WRITE_DROPS), 0);

    let bad = rd(&d.f, BAD_REGISTER_ACCESSES);
    d.f.write32(AV_INVALIDATE_DOORBELL.offset() + 4, av);
    d.f.write32(AV_WRITE_DOORBELL.offset() + 4, av);
    assert_eq!(rd(&d.f, BAD_REGISTER_ACCESSES), bad + 2);
    assert_eq!(d.av_read(av, 0, 16).unwrap(), got, "nothing changed");
}

/// A full-width write of an AV doorbell rings on its own and ends any write in halves begun
/// before it: a high half after it, with no low half of its own, is a bad access and does
/// nothing; it does not ring with the low half held from before the full-width write.
#[test]
fn a_full_width_av_doorbell_write_drops_a_low_half_held_before_it() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(16, 0).unwrap();
    let a = NicAvEntry::for_peer(&peer("10.0.0.2", 5, 1), 7);
    assert_eq!(d.av_write(av, &[(3, a), (5, a)]), Ok(2));
    let at5 = AvInvalidateDoorbell::new().with_av(av as u16).with_index(5);
    let at3 = AvInvalidateDoorbell::new().with_av(av as u16).with_index(3);
    d.f.write32(AV_INVALIDATE_DOORBELL.offset(), at5.into_bits() as u32);
    d.f.write(AV_INVALIDATE_DOORBELL, at3);
    let bad = rd(&d.f, BAD_REGISTER_ACCESSES);
    d.f.write32(
        AV_INVALIDATE_DOORBELL.offset() + 4,
        (at5.into_bits() >> 32) as u32,
    );
    assert_eq!(
        rd(&d.f, BAD_REGISTER_ACCESSES),
        bad + 1,
        "a high half alone"
    );
    let got = d.av_read(av, 0, 16).unwrap();
    assert!(!got[3].is_valid(), "the full-width write rang");
    assert_eq!(got[5], a, "entry 5 untouched");
}

#[test]
fn av_write_read_is_all_or_nothing() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(16, 2).unwrap();
    let a = NicAvEntry::for_peer(&peer("10.0.0.2", 5, 1), 7);
    let b = NicAvEntry::for_peer(&peer("10.0.0.3", 6, 2), 7).with_user_id(99);
    assert_eq!(d.av_write(av, &[(0, a), (15, b)]), Ok(2));
    let got = d.av_read(av, 0, 16).unwrap();
    assert_eq!(got[0], a);
    assert_eq!(got[15], b);
    assert!(got[1..15].iter().all(|e| !e.is_valid()));
    // One bad record (index beyond the table) rejects the whole batch.
    let c = NicAvEntry::for_peer(&peer("10.0.0.4", 7, 3), 7);
    assert_eq!(
        d.av_write(av, &[(1, c), (16, c)]),
        Err(Status::IndexOutOfRange)
    );
    let mut bad = c;
    bad.reserved[0] = 1;
    assert_eq!(
        d.av_write(av, &[(1, c), (2, bad)]),
        Err(Status::InvalidField)
    );
    let mut wide = c;
    wide.job_id = U32::new(1 << 24);
    assert_eq!(
        d.av_write(av, &[(1, c), (2, wide)]),
        Err(Status::InvalidField)
    );
    assert!(
        !d.av_read(av, 1, 1).unwrap()[0].is_valid(),
        "nothing changed"
    );
    // A peer entry whose VALID bit was forgotten is no invalidation: refused, and the entry
    // at its index stays.
    let mut forgot = b;
    forgot.flags = zerocopy::little_endian::U16::new(0);
    assert_eq!(d.av_write(av, &[(15, forgot)]), Err(Status::InvalidField));
    assert_eq!(d.av_read(av, 15, 1).unwrap()[0], b);
    // Bad handle, buffer outside DMA memory.
    assert_eq!(d.av_write(99, &[(1, c)]), Err(Status::InvalidHandle));
    let cmd = Command::AvWrite {
        av,
        body: BufferBody {
            buf: U64::new(UNMAPPED),
            len: U32::new(72),
            count: U32::new(1),
            ..FromZeros::new_zeroed()
        },
    };
    assert_eq!(d.submit(cmd).status(), Status::DmaFault);
    // Read out of range and into unmapped memory.
    assert_eq!(d.av_read(av, 10, 7), Err(Status::IndexOutOfRange));
    assert_eq!(d.av_read(av, u32::MAX, 1), Err(Status::IndexOutOfRange));
    let cmd = Command::AvRead {
        av,
        body: RangeBody {
            buf: U64::new(UNMAPPED),
            len: U32::new(64),
            first: U32::new(0),
            count: U32::new(1),
            ..FromZeros::new_zeroed()
        },
    };
    assert_eq!(d.submit(cmd).status(), Status::DmaFault);
}

/// AV_WRITE checks each record's index before its reserved word, as it checks the index
/// before the entry's fields: a record past the table is IndexOutOfRange whatever else is
/// wrong with it, one inside it with its reserved word set InvalidField.
#[test]
fn av_write_checks_a_records_index_before_its_reserved_word() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(16, 0).unwrap();
    let e = NicAvEntry::for_peer(&peer("10.0.0.2", 5, 1), 7);
    let mut bad_entry = e;
    bad_entry.reserved[0] = 1;
    let mut write = |index: u32, reserved: u32, entry: NicAvEntry| {
        let r = uet_fwif::AvWriteRecord {
            index: U32::new(index),
            reserved: U32::new(reserved),
            entry,
        };
        d.mem.write(SCRATCH_OFF, r.as_bytes());
        let cmd = Command::AvWrite {
            av,
            body: BufferBody {
                buf: U64::new(d.iova(SCRATCH_OFF)),
                len: U32::new(72),
                count: U32::new(1),
                ..FromZeros::new_zeroed()
            },
        };
        d.submit(cmd).status()
    };
    assert_eq!(write(16, 0, bad_entry), Status::IndexOutOfRange);
    assert_eq!(write(16, 1, e), Status::IndexOutOfRange);
    assert_eq!(write(3, 1, e), Status::InvalidField);
    assert_eq!(write(3, 0, bad_entry), Status::InvalidField);
    assert_eq!(write(3, 0, e), Status::Success);
}

#[test]
fn av_write_peers_stores_what_av_write_of_their_entries_would_and_is_all_or_nothing() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(16, 0).unwrap();
    let mut v6 = peer("10.0.0.2", 9, 3);
    v6.fabric_addr = "fd00::7".parse().unwrap();
    v6.mode = uet_fwif::address::AddressingMode::Absolute;
    let mut one_mtu = peer("10.0.0.4", 6, 2);
    one_mtu.max_msg_mtu = true;
    let peers = [peer("10.0.0.3", 5, 1), v6, one_mtu];
    let bytes: Vec<[u8; 32]> = peers.iter().map(|p| p.to_bytes().unwrap()).collect();
    assert_eq!(d.av_write_peers(av, 2, &bytes, 0x00AB_CDEF), Ok(3));
    let got = d.av_read(av, 0, 16).unwrap();
    for (i, p) in peers.iter().enumerate() {
        assert_eq!(
            got[2 + i],
            NicAvEntry::for_peer(p, 0x00AB_CDEF),
            "entry {}",
            2 + i
        );
    }
    assert!(got[..2].iter().chain(&got[5..]).all(|e| !e.is_valid()));

    // Refused whole, nothing written: past the table, one malformed address among good ones,
    // a bad handle, addresses outside DMA memory.
    let fresh = [peer("10.0.0.9", 1, 9).to_bytes().unwrap(); 4];
    let unchanged = |d: &mut Driver| assert_eq!(d.av_read(av, 0, 16).unwrap(), got);
    assert_eq!(
        d.av_write_peers(av, 13, &fresh, 7),
        Err(Status::IndexOutOfRange)
    );
    assert_eq!(
        d.av_write_peers(av, u32::MAX, &fresh[..1], 7),
        Err(Status::IndexOutOfRange)
    );
    let mut malformed = fresh;
    malformed[2][3] = 1; // a reserved byte of the address
    assert_eq!(
        d.av_write_peers(av, 6, &malformed, 7),
        Err(Status::InvalidField)
    );
    unchanged(&mut d);
    assert_eq!(
        d.av_write_peers(99, 0, &fresh, 7),
        Err(Status::InvalidHandle)
    );
    let c = d.submit(Command::AvWritePeers {
        av,
        body: uet_fwif::admin::AvWritePeersBody {
            buf: U64::new(UNMAPPED),
            len: U32::new(32),
            first: U32::new(0),
            count: U32::new(1),
            ..FromZeros::new_zeroed()
        },
    });
    assert_eq!(c.status(), Status::DmaFault);
    unchanged(&mut d);

    // Single entries are overwritten; a live member of a symmetric range is not, a removed
    // one (a hole) is.
    assert_eq!(d.av_write_peers(av, 4, &fresh[..2], 7), Ok(2));
    let range = NicAvEntry::range(
        &NicAvEntry::for_peer(&peer("10.0.1.1", 1, 1), 7),
        1,
        8,
        0,
        4,
    );
    assert_eq!(d.av_write(av, &[(8, range)]), Ok(1));
    assert_eq!(
        d.av_write_peers(av, 6, &fresh[..3], 7),
        Err(Status::InvalidField)
    );
    let hole = d.submit(Command::AvInvalidate {
        av,
        body: RangeBody {
            first: U32::new(9),
            count: U32::new(1),
            ..FromZeros::new_zeroed()
        },
    });
    assert_eq!(hole.status(), Status::Success);
    assert_eq!(d.av_write_peers(av, 9, &fresh[..1], 7), Ok(1));
    let after = d.av_read(av, 0, 16).unwrap();
    let entry = NicAvEntry::for_peer(&peer("10.0.0.9", 1, 9), 7);
    assert_eq!((after[4], after[5], after[9]), (entry, entry, entry));
    assert!(
        !after[6].is_valid() && !after[7].is_valid(),
        "the refused run left nothing"
    );
}

#[test]
fn before_1_13_av_write_peers_is_an_unknown_opcode_whatever_its_body_or_flags() {
    for minor in uet_sim::OLDEST_INTERFACE_MINOR..since::AV_WRITE_PEERS {
        let fabric = Fabric::new();
        let mut cfg = NicConfig::new(addr("10.0.0.1"));
        cfg.interface_minor = minor;
        let mut d = Driver::with_config(&fabric, cfg);
        let av = d.av_create(16, 0).unwrap();
        let one = uet_fwif::admin::AvWritePeersBody {
            buf: U64::new(d.iova(SCRATCH_OFF)),
            len: U32::new(32),
            count: U32::new(1),
            ..FromZeros::new_zeroed()
        };
        let mut reserved = one;
        reserved.reserved[0] = 1;
        // What a NIC that knows the command refuses as malformed is, to one that does not,
        // an opcode it does not know: no address, a short buffer, a JobID wider than 24 bits,
        // a reserved byte, a command flag.
        let bodies = [
            uet_fwif::admin::AvWritePeersBody {
                count: U32::new(0),
                ..one
            },
            uet_fwif::admin::AvWritePeersBody {
                len: U32::new(31),
                ..one
            },
            uet_fwif::admin::AvWritePeersBody {
                job_id: U32::new(1 << 24),
                ..one
            },
            reserved,
        ];
        for body in bodies {
            let c = d.submit(Command::AvWritePeers { av, body });
            assert_eq!(c.status(), Status::InvalidOpcode, "1.{minor}: {body:?}");
        }
        let mut flagged = Command::AvWritePeers { av, body: one }.encode(0);
        flagged.flags = 1;
        assert_eq!(
            d.submit_raw(flagged).status(),
            Status::InvalidOpcode,
            "1.{minor}: a command flag"
        );
    }
}

#[test]
fn av_invalidate_range_and_list() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(8, 0).unwrap();
    let e = NicAvEntry::for_peer(&peer("10.0.0.2", 5, 1), 7);
    let all: Vec<_> = (0..8).map(|i| (i, e)).collect();
    assert_eq!(d.av_write(av, &all), Ok(8));
    let range = |first, count| Command::AvInvalidate {
        av,
        body: RangeBody {
            buf: U64::ZERO,
            len: U32::ZERO,
            first: U32::new(first),
            count: U32::new(count),
            ..FromZeros::new_zeroed()
        },
    };
    assert_eq!(d.submit(range(6, 3)).status(), Status::IndexOutOfRange);
    let c = d.submit(range(0, 2));
    assert_eq!((c.status(), c.result0.get()), (Status::Success, 2));
    // List: one bad index rejects all.
    let list = |d: &mut Driver, idx: &[u32]| {
        let bytes: Vec<u8> = idx.iter().flat_map(|i| i.to_le_bytes()).collect();
        d.mem.write(SCRATCH_OFF + 0x1000, &bytes);
        let buf = d.iova(SCRATCH_OFF + 0x1000);
        d.submit(Command::AvInvalidate {
            av,
            body: RangeBody {
                buf: U64::new(buf),
                len: U32::new(bytes.len() as u32),
                first: U32::ZERO,
                count: U32::new(idx.len() as u32),
                ..FromZeros::new_zeroed()
            },
        })
        .status()
    };
    assert_eq!(list(&mut d, &[3, 8]), Status::IndexOutOfRange);
    assert_eq!(list(&mut d, &[3, 5]), Status::Success);
    let valid: Vec<bool> = d
        .av_read(av, 0, 8)
        .unwrap()
        .iter()
        .map(|e| e.is_valid())
        .collect();
    assert_eq!(valid, [false, false, true, false, true, false, true, true]);
    let cmd = Command::AvInvalidate {
        av,
        body: RangeBody {
            buf: U64::new(UNMAPPED),
            len: U32::new(4),
            first: U32::ZERO,
            count: U32::new(1),
            ..FromZeros::new_zeroed()
        },
    };
    assert_eq!(d.submit(cmd).status(), Status::DmaFault);
}

#[test]
fn endpoint_create_and_destroy() {
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(addr("10.0.0.1"));
    cfg.endpoints = 3;
    cfg.pid_first = 100;
    cfg.pid_count = 2;
    cfg.ri_space = 64;
    cfg.ri_per_endpoint = 40;
    let mut d = Driver::with_config(&fabric, cfg);
    let av = d.av_create(8, 0).unwrap();
    assert_eq!(d.ep_create(5, 1, 0, 1).err(), Some(Status::InvalidHandle));
    assert_eq!(d.ep_create(av, 1, 0, 0).err(), Some(Status::InvalidField));
    assert_eq!(d.ep_create(av, 1, 0, 41).err(), Some(Status::InvalidField));
    assert_eq!(
        d.ep_create(av, 1 << 24, 0, 1).err(),
        Some(Status::InvalidField)
    );
    let (mut body, base) = d.ep_body(1, 0, 1);
    body.cq_log2 = 0;
    assert_eq!(
        d.ep_create_with(av, body, base).err(),
        Some(Status::InvalidField)
    );
    body.cq_log2 = 13; // 8192 entries > CAP_QUEUES.max_queue_entries
    assert_eq!(
        d.ep_create_with(av, body, base).err(),
        Some(Status::InvalidField)
    );
    body.cq_log2 = 3;
    body.rx_ring = U64::new(UNMAPPED);
    assert_eq!(
        d.ep_create_with(av, body, base).err(),
        Some(Status::DmaFault)
    );
    body.rx_ring = U64::new(MEM_IOVA + MEM_BYTES as u64 - 128); // ring runs off the mapping
    assert_eq!(
        d.ep_create_with(av, body, base).err(),
        Some(Status::DmaFault)
    );
    let a = d.ep_create(av, 1, 0, 40).unwrap();
    assert_eq!((a.handle, a.pid, a.ri_start, a.ri_count), (1, 100, 1, 40));
    assert_eq!(
        d.ep_create(av, 1, 0, 1).err(),
        Some(Status::InitiatorInUse),
        "job 1's initiator 0 is endpoint 1's"
    );
    assert_eq!(
        d.ep_create(av, 1, 1, 30).err(),
        Some(Status::RiExhausted),
        "RI space"
    );
    let b = d.ep_create(0, 2, 0, 20).unwrap(); // initiator 0 again, of another job
    assert_eq!((b.handle, b.pid, b.ri_start), (2, 101, 41));
    assert_eq!(
        d.ep_create(0, 1, 2, 1).err(),
        Some(Status::PidExhausted),
        "PIDs"
    );
    assert_eq!(
        d.submit(Command::EndpointDestroy { endpoint: 1 }).status(),
        Status::Success
    );
    assert_eq!(
        d.submit(Command::EndpointDestroy { endpoint: 1 }).status(),
        Status::InvalidHandle
    );
    assert_eq!(
        d.submit(Command::EndpointDestroy { endpoint: 0x1_0001 })
            .status(),
        Status::InvalidHandle
    );
    let c = d.ep_create(av, 3, 0, 10).unwrap();
    assert_eq!(
        (c.handle, c.pid, c.ri_start),
        (1, 100, 1),
        "lowest free everything"
    );
    assert_eq!(d.submit(Command::AvDestroy { av }).status(), Status::Busy);
    assert_eq!(
        d.submit(Command::EndpointDestroy { endpoint: 1 }).status(),
        Status::Success
    );
    assert_eq!(
        d.submit(Command::AvDestroy { av }).status(),
        Status::Success
    );
}

#[test]
fn admin_cq_full_stalls_until_head_moves() {
    use uet_fwif::admin::{AdminCompletion, COMMAND_BYTES};
    let fabric = Fabric::new();
    let d = Driver::new(&fabric, "10.0.0.1");
    // A CQ head past what the device wrote is ignored (the register keeps its value).
    d.f.write(ADMIN_CQ_HEAD, RingIndex::new().with_index(3));
    assert_eq!(d.f.read(ADMIN_CQ_HEAD).index(), 0);
    assert_eq!(d.f.debug_counters().bad_doorbells, 1);
    // Post 15 commands (SQ of 16) without consuming completions: the CQ holds 15.
    let n = 1u16 << ADMIN_LOG2;
    for i in 0..15u16 {
        let cmd = Command::AvCreate(uet_fwif::admin::AvCreateBody {
            capacity: U32::new(0), // InvalidField, harmless
            ..FromZeros::new_zeroed()
        })
        .encode(i);
        d.mem.write(
            SQ_OFF + usize::from(i) * COMMAND_BYTES,
            zerocopy::IntoBytes::as_bytes(&cmd),
        );
    }
    d.f.write(ADMIN_SQ_DOORBELL, RingIndex::new().with_index(15));
    assert_eq!(d.f.read(ADMIN_SQ_HEAD).index(), 15);
    // Out-of-range doorbell is ignored and counted.
    d.f.write(ADMIN_SQ_DOORBELL, RingIndex::new().with_index(n));
    assert_eq!(d.f.read(ADMIN_SQ_TAIL).index(), 15);
    assert_eq!(d.f.debug_counters().bad_doorbells, 2);
    // Wrap: post one more at slot 15 and one at slot 0; CQ is full (15 used) so nothing runs.
    for slot in [15usize, 0] {
        let cmd = Command::AvDestroy { av: 9 }.encode(100 + slot as u16);
        d.mem.write(
            SQ_OFF + slot * COMMAND_BYTES,
            zerocopy::IntoBytes::as_bytes(&cmd),
        );
    }
    d.f.write(ADMIN_SQ_DOORBELL, RingIndex::new().with_index(1));
    assert_eq!(d.f.read(ADMIN_SQ_HEAD).index(), 15, "stalled on a full CQ");
    d.f.write(ADMIN_CQ_HEAD, RingIndex::new().with_index(2));
    assert_eq!(
        d.f.read(ADMIN_SQ_HEAD).index(),
        1,
        "both ran after the head moved"
    );
    let at = |i: usize| AdminCompletion::read_from_bytes(&d.mem.read(CQ_OFF + i * 16, 16)).unwrap();
    assert_eq!(at(15).command_id.get(), 115);
    assert!(at(15).phase_bit());
    assert_eq!(at(0).command_id.get(), 100);
    assert!(!at(0).phase_bit(), "second pass writes phase 0");
    assert_eq!(at(0).status(), Status::InvalidHandle);
    assert_eq!(at(0).sq_head.get(), 1);
}

#[test]
fn contexts_follow_their_endpoint() {
    use uet_fwif::admin::{CTX_ROLE_CONTROL, CTX_ROLE_RX, CTX_ROLE_TX, EP_FLAG_PASSIVE};
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(8, 0).unwrap();
    // Receive contexts beyond CAP_EP.max_rx_ctx or beyond ri_count are refused.
    let (mut body, base) = d.ep_body(1, 0, 2);
    body.rx_ctx_cnt = 3;
    assert_eq!(
        d.ep_create_with(av, body, base).err(),
        Some(Status::InvalidField)
    );
    body.rx_ctx_cnt = 2;
    body.tx_ctx_cnt = 2;
    let ep = d.ep_create_with(av, body, base).unwrap();
    let endpoint = u32::from(ep.handle);
    for (index, role) in [(2, CTX_ROLE_RX), (0, CTX_ROLE_TX), (2, CTX_ROLE_TX)] {
        let body = d.context_body(index, role);
        let c = d.submit(Command::ContextCreate { endpoint, body });
        assert_eq!(
            c.status(),
            Status::InvalidField,
            "index {index} role {role}"
        );
    }
    let body = d.context_body(1, CTX_ROLE_TX | CTX_ROLE_RX);
    let c = d.submit(Command::ContextCreate { endpoint, body });
    assert_eq!(c.status(), Status::Success);
    let ctx = c.result0.get();
    assert_ne!(ctx, endpoint, "a handle of its own");
    let body = d.context_body(1, CTX_ROLE_RX);
    let c = d.submit(Command::ContextCreate { endpoint, body });
    assert_eq!(c.status(), Status::Busy, "receive context 1 exists");
    let body = d.context_body(0, CTX_ROLE_CONTROL);
    assert_eq!(
        d.submit(Command::ContextCreate { endpoint, body }).status(),
        Status::Success
    );
    let body = d.context_body(0, CTX_ROLE_CONTROL);
    assert_eq!(
        d.submit(Command::ContextCreate { endpoint, body }).status(),
        Status::Busy,
        "one control channel"
    );
    // A context has no contexts of its own.
    let body = d.context_body(1, CTX_ROLE_RX);
    assert_eq!(
        d.submit(Command::ContextCreate {
            endpoint: ctx,
            body
        })
        .status(),
        Status::InvalidHandle
    );
    // Auth keys are granted to the endpoint, never to a context; destroying a context
    // leaves the endpoint's grant (the slot stays in use).
    let mut add = uet_fwif::auth_key::AuthKeyAddBody::new_zeroed();
    add.job_id = U32::new(0x42);
    let c = d.submit(Command::AuthKeyAdd { av, body: add });
    assert_eq!(c.status(), Status::Success);
    let slot = c.result0.get() as u16;
    let grant = |d: &mut Driver, h: u32| {
        d.submit(Command::EndpointAuthKeys {
            endpoint: h,
            body: uet_fwif::auth_key::EndpointAuthKeysBody::granting([slot]),
        })
        .status()
    };
    assert_eq!(grant(&mut d, ctx), Status::InvalidHandle);
    assert_eq!(grant(&mut d, endpoint), Status::Success);
    // The endpoint goes only after its contexts.
    let destroy = |d: &mut Driver, h: u32| d.submit(Command::EndpointDestroy { endpoint: h });
    assert_eq!(destroy(&mut d, endpoint).status(), Status::Busy);
    assert_eq!(destroy(&mut d, ctx).status(), Status::Success);
    assert_eq!(destroy(&mut d, ctx + 1).status(), Status::Success);
    assert_eq!(
        d.submit(Command::AuthKeyRemove {
            slot: u32::from(slot),
            body: AuthKeyRemoveBody::unchecked(),
        })
        .status(),
        Status::Busy,
        "still granted to the endpoint"
    );
    assert_eq!(destroy(&mut d, endpoint).status(), Status::Success);
    // A passive endpoint cannot be scalable, and its control channel is itself.
    let (mut body, base) = d.ep_body(1, 0, 1);
    body.flags = EP_FLAG_PASSIVE;
    body.rx_ctx_cnt = 1;
    assert_eq!(
        d.ep_create_with(av, body, base).err(),
        Some(Status::InvalidField)
    );
    body.rx_ctx_cnt = 0;
    let pep = d.ep_create_with(av, body, base).unwrap();
    let body = d.context_body(0, CTX_ROLE_CONTROL);
    assert_eq!(
        d.submit(Command::ContextCreate {
            endpoint: u32::from(pep.handle),
            body
        })
        .status(),
        Status::Busy
    );
}

/// CONTEXT_CREATE checks, in the firmware's order: the rings' sizes and alignment
/// (InvalidField) before whether a context of the role and index exists (Busy), and that
/// before whether the rings are mapped (DmaFault).
#[test]
fn a_context_with_bad_rings_is_invalid_before_it_is_busy() {
    use uet_fwif::admin::{ContextCreateBody, CTX_ROLE_TX};
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(8, 0).unwrap();
    let (mut body, base) = d.ep_body(1, 0, 1);
    body.tx_ctx_cnt = 2;
    let ep = d.ep_create_with(av, body, base).unwrap();
    let endpoint = u32::from(ep.handle);
    let good = d.context_body(1, CTX_ROLE_TX);
    let create =
        |d: &mut Driver, body| d.submit(Command::ContextCreate { endpoint, body }).status();
    assert_eq!(create(&mut d, good), Status::Success);
    let small_cq = ContextCreateBody {
        cq_log2: uet_fwif::admin::MIN_CQ_LOG2 - 1,
        ..good
    };
    let misaligned = ContextCreateBody {
        rx_ring: U64::new(good.rx_ring.get() + 8),
        ..good
    };
    let too_big = ContextCreateBody {
        tx_log2: 16,
        ..good
    };
    for (what, body) in [
        ("small cq", small_cq),
        ("misaligned", misaligned),
        ("too big", too_big),
    ] {
        assert_eq!(create(&mut d, body), Status::InvalidField, "{what}");
    }
    let unmapped = ContextCreateBody {
        cq_ring: U64::new(UNMAPPED),
        ..good
    };
    assert_eq!(create(&mut d, unmapped), Status::Busy);
}

#[test]
fn a_completion_ring_of_two_entries_is_refused() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(8, 0).unwrap();
    let (mut body, base) = d.ep_body(1, 0, 1);
    body.cq_log2 = uet_fwif::admin::MIN_CQ_LOG2 - 1;
    assert_eq!(
        d.ep_create_with(av, body, base).err(),
        Some(Status::InvalidField)
    );
    body.cq_log2 = uet_fwif::admin::MIN_CQ_LOG2;
    assert!(d.ep_create_with(av, body, base).is_ok());
}

#[test]
fn a_context_rings_only_the_queues_of_its_role() {
    use uet_fwif::admin::CTX_ROLE_TX;
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(8, 0).unwrap();
    let (mut body, base) = d.ep_body(1, 0, 2);
    body.tx_ctx_cnt = 2;
    let ep = d.ep_create_with(av, body, base).unwrap();
    let body = d.context_body(1, CTX_ROLE_TX);
    let c = d.submit(Command::ContextCreate {
        endpoint: u32::from(ep.handle),
        body,
    });
    assert_eq!(c.status(), Status::Success);
    let ctx = c.result0.get() as u16;
    let before = d.f.debug_counters().doorbells_without_role;
    // A transmit-only context has no receive rings to read: both RX doorbells are ignored.
    for reg in [RXQ_DOORBELL, TRXQ_DOORBELL] {
        d.f.write(reg, QueueDoorbell::new().with_endpoint(ctx).with_index(1));
    }
    assert_eq!(d.f.debug_counters().doorbells_without_role, before + 2);
}

#[test]
fn av_create_checks_peer_groups_against_the_capability() {
    fn create(d: &mut Driver, max_group_id: u32, rx_ctx_bits: u8) -> Status {
        d.submit(Command::AvCreate(uet_fwif::admin::AvCreateBody {
            capacity: U32::new(16),
            rx_ctx_bits,
            max_group_id: U32::new(max_group_id),
            ..FromZeros::new_zeroed()
        }))
        .status()
    }
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(addr("10.0.0.9"));
    cfg.max_group_id = 0x0FFF;
    let mut d = Driver::with_config(&fabric, cfg);
    assert_eq!(d.f.read(CAP_PEER_GROUPS), 0x0FFF);
    // Up to the capability, with the receive-context bits within the high word.
    assert_eq!(create(&mut d, 0x0FFF, 8), Status::Success);
    assert_eq!(
        create(&mut d, 0x1000, 0),
        Status::InvalidField,
        "above CAP_PEER_GROUPS"
    );
    let mut wide = NicConfig::new(addr("10.0.0.10"));
    wide.max_group_id = u32::MAX;
    let mut w = Driver::with_config(&fabric, wide);
    assert_eq!(create(&mut w, 0x00FF_FFFF, 8), Status::Success);
    assert_eq!(
        create(&mut w, 0x01FF_FFFF, 8),
        Status::InvalidField,
        "33 bits"
    );
    assert_eq!(create(&mut w, u32::MAX, 0), Status::Success);
}

/// Every member of a range entry must be representable, not only its last: a range that
/// crosses a node boundary has its widest service (svc - 1) at an earlier member. Here member
/// 2 (node 0, service 2) would have PIDonFEP 0x1000: AV_WRITE refuses the entry.
#[test]
fn a_range_with_an_unrepresentable_member_is_refused() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let av = d.av_create(16, 0).unwrap();
    let base = NicAvEntry::for_peer(&peer("10.0.0.2", 0xFFE, 100), 7);
    // Members 2 (node 0, service 2: PIDonFEP 0x1000) and 3 (node 1, service 0).
    let r = NicAvEntry::range(&base, 3, 0, 2, 2);
    let got = d.av_write(av, &[(0, r)]);
    let read = d.av_read(av, 0, 2).unwrap();
    assert_eq!(got, Err(Status::InvalidField));
    assert!(
        !read[0].is_valid() && !read[1].is_valid(),
        "nothing written"
    );
    // The same range one PIDonFEP lower fits, and both members read back valid.
    let base = NicAvEntry::for_peer(&peer("10.0.0.2", 0xFFD, 100), 7);
    d.av_write(av, &[(0, NicAvEntry::range(&base, 3, 0, 2, 2))])
        .unwrap();
    let read = d.av_read(av, 0, 2).unwrap();
    assert!(read[0].is_valid() && read[1].is_valid());
}

/// Many range entries in one AV_WRITE, listed from the highest index down, then invalidated
/// from the lowest up: every member reads back in between, the table ends empty, and a
/// batch of ranges overlapping each other is refused whole. (The table keeps its ranges in a
/// map: with a sorted list each of these shifted all the others, and 65,536 one-member
/// ranges took 4.3 s to write and 10.1 s to invalidate in a debug build.)
#[test]
fn many_ranges_in_any_order_are_written_read_and_removed() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let n = 4096u32;
    let av = d.av_create(2 * n, 0).unwrap();
    let base = NicAvEntry::for_peer(&peer("10.0.0.2", 1, 100), 7);
    let records: Vec<(u32, NicAvEntry)> = (0..n)
        .rev()
        .map(|i| (2 * i, NicAvEntry::range(&base, 1, 2 * i, 0, 1)))
        .collect();
    assert_eq!(d.av_write(av, &records), Ok(n));
    let read = d.av_read(av, 0, 2 * n).unwrap();
    for (i, e) in read.iter().enumerate() {
        assert_eq!(e.is_valid(), i % 2 == 0, "index {i}");
    }
    // Overlapping each other (and the table's): refused, nothing written.
    let overlapping: Vec<(u32, NicAvEntry)> = (0..64)
        .map(|i| (1 + i, NicAvEntry::range(&base, 1, 1 + i, 0, 2 * n - 1 - i)))
        .collect();
    assert_eq!(d.av_write(av, &overlapping), Err(Status::InvalidField));
    let c = d.submit(Command::AvInvalidate {
        av,
        body: RangeBody {
            buf: U64::ZERO,
            len: U32::ZERO,
            first: U32::ZERO,
            count: U32::new(2 * n),
            ..FromZeros::new_zeroed()
        },
    });
    assert_eq!(c.status(), Status::Success);
    assert!(d
        .av_read(av, 0, 2 * n)
        .unwrap()
        .iter()
        .all(|e| !e.is_valid()));
}

/// A NIC configured for an older interface is a device of that version: what later versions
/// added is absent (registers), reserved (AUTH_KEY_REMOVE's body before 1.9) or undefined (the
/// AV entry's `MAX_MSG_MTU` before 1.10), and each refusal is the one that version makes.
#[test]
fn an_older_interface_lacks_what_later_versions_added() {
    for minor in uet_sim::OLDEST_INTERFACE_MINOR..=INTERFACE_MINOR {
        let fabric = Fabric::new();
        let mut cfg = NicConfig::new(addr("10.0.0.1"));
        cfg.interface_minor = minor;
        let mut d = Driver::with_config(&fabric, cfg);
        assert_eq!(rd(&d.f, REVISION).interface_minor(), minor);
        assert_eq!(rd(&d.f, REVISION).interface_major(), INTERFACE_MAJOR);

        // Registers: a later one reads all ones and counts as a bad access.
        for r in REGISTERS.iter().filter(|r| r.access != Access::Wo) {
            let bad = rd(&d.f, BAD_REGISTER_ACCESSES);
            let v = match r.width {
                Width::W32 => u64::from(d.f.read32(r.offset)),
                Width::W64 => d.f.read64(r.offset),
            };
            let counted = rd(&d.f, BAD_REGISTER_ACCESSES) - bad;
            if r.present_at(minor) {
                assert_eq!(counted, 0, "1.{minor}: {}", r.name);
            } else {
                let ones = if r.width == Width::W32 {
                    0xFFFF_FFFF
                } else {
                    u64::MAX
                };
                assert_eq!((v, counted), (ones, 1), "1.{minor}: {} is absent", r.name);
            }
        }

        // The AV write window: absent before 1.8, so nothing it stages or rings is stored.
        let av = d.av_create(16, 0).unwrap();
        let a = NicAvEntry::for_peer(&peer("10.0.0.2", 5, 1), 7);
        let bad = rd(&d.f, BAD_REGISTER_ACCESSES);
        window_write(&d.f, av, 0, &a, Staging::Burst);
        window_write(&d.f, av, 1, &a, Staging::Words);
        let stored = d
            .av_read(av, 0, 2)
            .unwrap()
            .iter()
            .filter(|e| e.is_valid())
            .count();
        let counted = rd(&d.f, BAD_REGISTER_ACCESSES) - bad;
        if minor >= since::AV_WRITE_WINDOW {
            assert_eq!((stored, counted), (2, 0), "1.{minor}");
        } else {
            // Two entries of eight words and a doorbell each, every one a bad access.
            assert_eq!((stored, counted), (0, 18), "1.{minor}");
        }

        // MAX_MSG_MTU: an undefined bit before 1.10, refused by AV_WRITE (and the window).
        let mut one_mtu = peer("10.0.0.3", 6, 2);
        one_mtu.max_msg_mtu = true;
        let e = NicAvEntry::for_peer(&one_mtu, 7);
        assert!(e.max_msg_mtu());
        let plain = e.with_flags_within(entry_flags::ALL_BEFORE_MAX_MSG_MTU);
        if minor >= since::AV_ENTRY_MAX_MSG_MTU {
            assert_eq!(d.av_write(av, &[(2, e)]), Ok(1));
            assert_eq!(d.av_read(av, 2, 1).unwrap()[0], e);
        } else {
            assert_eq!(d.av_write(av, &[(2, e)]), Err(Status::InvalidField));
            assert!(
                !d.av_read(av, 2, 1).unwrap()[0].is_valid(),
                "1.{minor}: nothing stored"
            );
            assert_eq!(
                d.av_write(av, &[(2, plain)]),
                Ok(1),
                "1.{minor}: without the bit"
            );
            if minor >= since::AV_WRITE_WINDOW {
                let drops = rd(&d.f, AV_WRITE_DROPS);
                window_write(&d.f, av, 3, &e, Staging::Burst);
                assert_eq!(rd(&d.f, AV_WRITE_DROPS), drops + 1, "1.{minor}");
            }
        }

        // AV_WRITE_PEERS: an unknown opcode before 1.13.
        let addrs = [peer("10.0.0.5", 7, 4).to_bytes().unwrap(); 2];
        if minor >= since::AV_WRITE_PEERS {
            assert_eq!(d.av_write_peers(av, 4, &addrs, 7), Ok(2), "1.{minor}");
        } else {
            assert_eq!(
                d.av_write_peers(av, 4, &addrs, 7),
                Err(Status::InvalidOpcode),
                "1.{minor}"
            );
            assert!(!d.av_read(av, 4, 1).unwrap()[0].is_valid(), "1.{minor}");
        }

        // RECV_CANCEL: an unknown opcode before 1.14; from 1.14 an endpoint with nothing
        // posted has nothing to withdraw.
        let ep = d.ep_create(av, 7, 1, 1).unwrap();
        let body = uet_fwif::admin::RecvCancelBody {
            context: U64::new(0),
            ring: uet_fwif::admin::RECV_CANCEL_RING_RX,
            ..FromZeros::new_zeroed()
        };
        let endpoint = u32::from(ep.handle);
        let cancel = d.submit(Command::RecvCancel { endpoint, body }).status();
        if minor >= since::RECV_CANCEL {
            assert_eq!(cancel, Status::NotPosted, "1.{minor}");
        } else {
            assert_eq!(cancel, Status::InvalidOpcode, "1.{minor}");
        }

        // Connected endpoints: before 1.20 EP_FLAG_CONNECTED is an undefined bit and
        // ENDPOINT_PEER an unknown opcode; from 1.20 only a connected endpoint takes a peer.
        let (mut body, base) = d.ep_body(7, 2, 1);
        body.flags = uet_fwif::admin::EP_FLAG_CONNECTED;
        let connected = d.ep_create_with(av, body, base);
        let peer = uet_fwif::admin::EndpointPeerBody::peer(addr("10.0.0.9"), 7, 3);
        let named = |d: &mut Driver, endpoint: u32, body| {
            d.submit(Command::EndpointPeer { endpoint, body }).status()
        };
        if minor >= since::CONNECTED_PEER {
            let c = u32::from(connected.expect("a connected endpoint").handle);
            assert_eq!(named(&mut d, c, peer), Status::Success, "1.{minor}");
            let none = uet_fwif::admin::EndpointPeerBody::none();
            assert_eq!(named(&mut d, c, none), Status::Success, "1.{minor}");
            assert_eq!(named(&mut d, endpoint, peer), Status::InvalidHandle);
            assert_eq!(named(&mut d, 0x7F, peer), Status::InvalidHandle);
            assert_eq!(
                d.submit(Command::EndpointDestroy { endpoint: c }).status(),
                Status::Success
            );
        } else {
            assert_eq!(connected.err(), Some(Status::InvalidField), "1.{minor}");
            assert_eq!(named(&mut d, endpoint, peer), Status::InvalidOpcode);
        }

        // AUTH_KEY_REMOVE: before 1.9 its body is reserved, so the owner check is refused and
        // the slot stays; an all-zero body removes it.
        let mut add = uet_fwif::auth_key::AuthKeyAddBody::new_zeroed();
        add.job_id = U32::new(0x42);
        let slot = d
            .submit(Command::AuthKeyAdd { av, body: add })
            .result0
            .get();
        let remove = |d: &mut Driver, body| d.submit(Command::AuthKeyRemove { slot, body });
        let checked = remove(&mut d, AuthKeyRemoveBody::owned_by(av, 0x42)).status();
        if minor >= since::AUTH_KEY_REMOVE_CHECK_OWNER {
            assert_eq!(checked, Status::Success, "1.{minor}");
        } else {
            assert_eq!(checked, Status::InvalidField, "1.{minor}");
            let unchecked = remove(&mut d, AuthKeyRemoveBody::unchecked()).status();
            assert_eq!(
                unchecked,
                Status::Success,
                "1.{minor}: the slot was still there"
            );
        }
        assert_eq!(
            remove(&mut d, AuthKeyRemoveBody::unchecked()).status(),
            Status::InvalidHandle,
            "1.{minor}: removed once"
        );
    }
}

#[test]
fn the_model_emulates_only_the_interfaces_it_implements() {
    let fabric = Fabric::new();
    for minor in [0, uet_sim::OLDEST_INTERFACE_MINOR - 1, INTERFACE_MINOR + 1] {
        let mut cfg = NicConfig::new(addr("10.0.0.1"));
        cfg.interface_minor = minor;
        assert!(
            matches!(
                fabric.add_nic(cfg),
                Err(uet_sim::SimError::InvalidConfig(_))
            ),
            "1.{minor}"
        );
    }
}

/// A command that completes at once and changes nothing (no such AV).
fn harmless() -> AdminCommand {
    Command::AvDestroy { av: 9 }.encode(0)
}

/// ADMIN_ARM (interface 1.15): the armed admin completion ring raises its vector once, when a
/// completion is written or at once when one is unconsumed; a stopped function's commands
/// raise it when it is enabled again; a bad vector arms nothing and is counted; a function
/// reset disarms.
#[test]
fn an_armed_admin_completion_ring_raises_its_vector_once() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    let (_tx, mut rx) = trigger_for(&d.f, 5);
    let arm = |d: &Driver, vector: u16| d.f.write(ADMIN_ARM, AdminArm::new().with_vector(vector));

    // Armed on a consumed ring: nothing until a completion is written, then one message.
    arm(&d, 5);
    assert_eq!(interrupts(&mut rx), 0);
    assert_eq!(d.submit_raw(harmless()).status(), Status::InvalidHandle);
    assert_eq!(interrupts(&mut rx), 1, "the completion raised the vector");
    // Disarmed by raising: the next completion raises nothing.
    d.submit_raw(harmless());
    assert_eq!(interrupts(&mut rx), 0);

    // Armed while a completion waits unconsumed: at once. Consumed: arming waits again.
    let id = d.post_raw(harmless());
    arm(&d, 5);
    assert_eq!(interrupts(&mut rx), 1);
    assert_eq!(d.take_completion().map(|c| c.command_id.get()), Some(id));
    arm(&d, 5);
    assert_eq!(interrupts(&mut rx), 0);

    // A stopped function runs nothing; the arm holds, and enabling it again runs the command,
    // whose completion raises the vector.
    d.f.write(DEV_CTRL, DevCtrl::new().with_enable(false));
    let id = d.post_raw(harmless());
    assert!(
        d.take_completion().is_none(),
        "a stopped function ran a command"
    );
    assert_eq!(interrupts(&mut rx), 0);
    d.f.write(DEV_CTRL, DevCtrl::new().with_enable(true));
    assert_eq!(
        interrupts(&mut rx),
        1,
        "the command run at enable raised the vector"
    );
    assert_eq!(d.take_completion().map(|c| c.command_id.get()), Some(id));

    // New rings, latched by an enable (smaller ones), keep the arm: their first completion
    // raises the vector.
    arm(&d, 5);
    d.f.write(DEV_CTRL, DevCtrl::new().with_enable(false));
    // The tail the new rings start from (the register keeps the last one written).
    d.f.write(ADMIN_SQ_DOORBELL, RingIndex::new());
    d.enable_with_rings(ADMIN_LOG2 - 1);
    assert_eq!(d.submit_raw(harmless()).status(), Status::InvalidHandle);
    assert_eq!(
        interrupts(&mut rx),
        1,
        "the new rings' completion raised the vector"
    );
    d.f.write(DEV_CTRL, DevCtrl::new().with_enable(false));
    d.f.write(ADMIN_SQ_DOORBELL, RingIndex::new());
    d.enable();

    // A vector outside the table arms nothing, and is counted; it leaves an earlier arm as
    // it was.
    arm(&d, 5);
    arm(&d, uet_regs::pci::MSIX_VECTORS);
    assert_eq!(d.f.debug_counters().bad_admin_arms, 1);
    assert_eq!(d.f.debug_counters().admin_arms, 5);
    d.submit_raw(harmless());
    assert_eq!(interrupts(&mut rx), 1, "the arm before the bad one held");
    assert_eq!(d.f.debug_counters().msix_messages, 5);

    // A function reset disarms: after it, the queue programmed again, a completion raises
    // nothing.
    arm(&d, 5);
    d.f.write(FUNCTION_RESET, FunctionReset::new().with_reset(true));
    d.enable();
    d.submit_raw(harmless());
    assert_eq!(interrupts(&mut rx), 0, "the reset left the ring armed");
}

/// A NIC of interface 1.14 has no ADMIN_ARM: the write is a bad access and arms nothing.
#[test]
fn admin_arm_is_no_register_before_interface_1_15() {
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(addr("10.0.0.9"));
    cfg.interface_minor = 14;
    let mut d = Driver::with_config(&fabric, cfg);
    let (_tx, mut rx) = trigger_for(&d.f, 5);
    let before = d.f.counter(BAD_REGISTER_ACCESSES);
    d.f.write(ADMIN_ARM, AdminArm::new().with_vector(5));
    assert_eq!(d.f.counter(BAD_REGISTER_ACCESSES), before + 1);
    d.submit_raw(harmless());
    assert_eq!(interrupts(&mut rx), 0);
}
