//! `uetctl av dump` rendering: symmetric ranges fold into one row, user ids and auth-key slots
//! show, JSON carries them.

use std::sync::Arc;
use uet_av::{
    job_id_to_auth_key, AvAttr, NicAvTable, FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID, FI_MORE,
};
use uet_driver::backend::sim::SimDevice;
use uet_driver::Nic;
use uet_fwif::AvWriteRecord;
use uet_sim::{Fabric, NicConfig};
use uetctl::dump;

fn nic() -> (Fabric, Nic) {
    let fabric = Fabric::new();
    let f = fabric
        .add_nic(NicConfig::new("10.42.0.1".parse().unwrap()))
        .unwrap();
    let nic = Nic::open(Arc::new(SimDevice::new(f))).unwrap();
    (fabric, nic)
}

/// An AV of `count` entries stamping JobID 5, with the other attributes of `attr`.
fn av_of(nic: &Nic, count: usize, attr: AvAttr) -> uet_driver::Av {
    nic.open_av(AvAttr {
        count,
        job_id: 5,
        ..attr
    })
    .unwrap()
}

#[test]
fn ranges_fold_into_one_row_and_singles_stay_apart() {
    let (_f, nic) = nic();
    let mut av = av_of(&nic, 64, AvAttr::default());
    av.insertsym("10.1.0.1", 3, "7?ri=1+4&init=9", 4, None, 0, None)
        .unwrap();
    av.insertsvc("10.2.0.9", Some("3?ri=1+2&init=1&mtu"), None, 0, None)
        .unwrap();
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.differences(), 0);
    assert_eq!(table.rows.len(), 2, "{:?}", table.rows);
    assert_eq!((table.rows[0].index, table.rows[0].span), (0, 12));
    assert_eq!((table.rows[1].index, table.rows[1].span), (12, 1));
    let text = dump::render_text("t", &table);
    assert!(text.contains("13 entries valid of 64"), "{text}");
    assert!(text.contains("0..12"), "{text}");
    assert!(text.contains("10.1.0.1..=10.1.0.3"), "{text}");
    assert!(text.contains("7..=10"), "{text}");
    assert!(text.contains("0x9..=0xc"), "{text}");
    assert!(text.contains("range 0+12 (4 per node)"), "{text}");
    assert!(text.contains("single, one-MTU messages"), "{text}");
    assert!(!text.contains("(4 per node), one-MTU"), "{text}");
    let json = dump::render_json(&table);
    assert_eq!(json["entries"][1]["nic"]["max_msg_mtu"], true);
    assert_eq!(json["entries"][0]["nic"]["max_msg_mtu"], false);
    assert_eq!(json["entries"][0]["span"], 12);
    assert_eq!(json["entries"][0]["nic"]["range"]["services_per_node"], 4);
    assert_eq!(json["entries"][1]["nic"]["range"], serde_json::Value::Null);
}

/// An AV opened with FI_AV_USER_ID holding one peer, whose user id is 0xfeed; its fi_addr.
fn one_peer_with_user_id(nic: &Nic) -> (uet_driver::Av, u64) {
    let mut av = av_of(
        nic,
        8,
        AvAttr {
            flags: FI_AV_USER_ID,
            ..AvAttr::default()
        },
    );
    let mut fa = 0u64;
    av.insertsvc("10.3.0.1", Some("2?ri=1+1&init=4"), Some(&mut fa), 0, None)
        .unwrap();
    av.set_user_id(fa, 0xfeed, 0).unwrap();
    (av, fa)
}

#[test]
fn user_ids_show_in_text_and_json() {
    let (_f, nic) = nic();
    let (mut av, _) = one_peer_with_user_id(&nic);
    let table = dump::collect(&mut av).unwrap();
    let text = dump::render_text("t", &table);
    assert!(text.contains("0xfeed"), "{text}");
    assert_eq!(
        dump::render_json(&table)["entries"][0]["nic"]["user_id"],
        "0xfeed"
    );
}

#[test]
fn auth_key_slots_show_in_text_and_json() {
    let (_f, nic) = nic();
    let mut av = av_of(
        &nic,
        8,
        AvAttr {
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        },
    );
    av.insert_auth_key(&job_id_to_auth_key(0x50), 0).unwrap();
    let k1 = av.insert_auth_key(&job_id_to_auth_key(0x51), 0).unwrap();
    let mut keyed = k1;
    av.insertsvc("10.2.0.9", Some("3"), Some(&mut keyed), FI_AUTH_KEY, None)
        .unwrap();
    let mut plain = 0;
    av.insertsvc("10.2.0.10", Some("4"), Some(&mut plain), 0, None)
        .unwrap();
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.differences(), 0);
    let text = dump::render_text("t", &table);
    let mut lines = text.lines().skip(1);
    let header = lines.next().unwrap();
    let col = header.find("AUTH KEY").expect("AUTH KEY column");
    let cell = |index: u64| {
        let line = text
            .lines()
            .skip(2)
            .find(|l| l.split_whitespace().next() == Some(index.to_string().as_str()))
            .unwrap();
        line[col..].split_whitespace().next().unwrap().to_string()
    };
    assert_eq!(cell(keyed), "1", "{text}");
    assert_eq!(cell(plain), "-", "{text}");
    let json = dump::render_json(&table);
    assert_eq!(json["entries"][0]["nic"]["auth_key"], 1);
    assert_eq!(json["entries"][0]["mirror"]["auth_key"], 1);
    assert!(json["entries"][1]["nic"]["auth_key"].is_null());
    // An auth-key handle is past 2^53, where a reader that holds JSON numbers as doubles
    // (jq 1.6, JavaScript) would round it to another value: it is a string, exact.
    assert!(k1 > 1 << 53);
    let handle = json["auth_keys"][1]["handle"].as_str().expect("a string");
    assert_eq!(
        u64::from_str_radix(handle.trim_start_matches("0x"), 16),
        Ok(k1)
    );
    assert_eq!(json["auth_keys"][1]["source"], handle, "its own handle");
}

/// The row of `index` in a text dump.
fn row_line<'a>(text: &'a str, index: &str) -> &'a str {
    text.lines()
        .skip(2)
        .find(|l| l.split_whitespace().next() == Some(index))
        .unwrap_or_else(|| panic!("no row {index}:\n{text}"))
}

/// Write `entry` at `index` of the NIC table behind the AV's back.
fn overwrite(av: &mut uet_driver::Av, index: u64, entry: uet_fwif::NicAvEntry) {
    av.nic_mut()
        .write_entries(&[AvWriteRecord {
            index: (index as u32).into(),
            reserved: 0.into(),
            entry,
        }])
        .unwrap();
}

/// A folded range row shows the PIDonFEPs and initiators its members use: services wrap at
/// each node, so the first and last members' values are not the set.
#[test]
fn a_range_row_shows_the_services_its_members_use() {
    let (_f, nic) = nic();
    let mut av = av_of(&nic, 64, AvAttr::default());
    // 3 nodes x 4 services, PIDonFEP 7..=10, initiators 9..=12; indices 0..12.
    av.insertsym("10.1.0.1", 3, "7?ri=1+4&init=9", 4, None, 0, None)
        .unwrap();
    av.remove(&[5, 8, 9, 10], 0).unwrap(); // rows 0..5, 6..8, 11
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.differences(), 0);
    let text = dump::render_text("t", &table);
    // Members 0..=4: node 0 services 0..=3 and node 1 service 0: every PIDonFEP.
    let line = row_line(&text, "0..5");
    assert!(
        line.contains(" 7..=10 ") && line.contains(" 0x9..=0xc "),
        "{line}"
    );
    assert!(line.contains("10.1.0.1..=10.1.0.2"), "{line}");
    // Members 6 and 7: node 1, services 2 and 3.
    let line = row_line(&text, "6..8");
    assert!(
        line.contains(" 9..=10 ") && line.contains(" 0xb..=0xc "),
        "{line}"
    );
    // Member 11 alone: node 2, service 3.
    let line = row_line(&text, "11");
    assert!(line.contains(" 10 ") && line.contains(" 0xc "), "{line}");
}

/// A row where NIC and mirror differ names each field that differs, with both values.
#[test]
fn a_difference_names_the_fields_and_both_values() {
    let (_f, nic) = nic();
    let (mut av, fa) = one_peer_with_user_id(&nic);
    let mut wrong = av.mirror_entry(fa as u32).unwrap();
    wrong.user_id = 0xbeef.into();
    wrong.caps ^= 1;
    overwrite(&mut av, fa, wrong);
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.differences(), 1);
    let text = dump::render_text("t", &table);
    let line = row_line(&text, "0");
    assert!(
        line.contains("user id: mirror 0xfeed, NIC 0xbeef") && line.contains("caps: mirror"),
        "{line}"
    );
    let json = dump::render_json(&table);
    let e = &json["entries"][0];
    assert_eq!(e["match"], false);
    assert_ne!(e["nic"]["caps"], e["mirror"]["caps"]);
}

/// The AV's auth keys are read back from the NIC's auth-key table: a slot that no longer
/// holds the key's source is a difference, and an entry bound to a key shows the key's JobID
/// (what the NIC sends with) rather than its own job_id field.
#[test]
fn auth_keys_are_read_back_and_keyed_entries_show_the_keys_job() {
    let (_f, nic) = nic();
    let mut av = av_of(
        &nic,
        8,
        AvAttr {
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        },
    );
    let k = av.insert_auth_key(&job_id_to_auth_key(0x51), 0).unwrap();
    let slot = av.auth_keys().next().unwrap().slot;
    let mut keyed = k;
    av.insertsvc("10.2.0.9", Some("3"), Some(&mut keyed), FI_AUTH_KEY, None)
        .unwrap();
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.differences(), 0);
    let text = dump::render_text("t", &table);
    assert!(
        row_line(&text, &keyed.to_string()).contains("0x51 (key)"),
        "{text}"
    );
    assert!(text.contains("KEY") && text.contains("0x51"), "{text}");
    // Behind the AV's back: the slot reports another source.
    av.nic_mut().set_auth_key_source(slot, 0xdead).unwrap();
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.differences(), 1);
    let text = dump::render_text("t", &table);
    assert!(
        text.contains("DIFFERS: JobID 0x51, source 0xdead"),
        "{text}"
    );
    assert!(
        row_line(&text, &keyed.to_string()).contains("0x51 (key)"),
        "the NIC still sends with the slot's JobID: {text}"
    );
    let json = dump::render_json(&table);
    assert_eq!(json["auth_keys"][0]["match"], false);
    assert_eq!(json["auth_keys"][0]["nic"]["source"], "0xdead");
}

/// A pending FI_MORE insert is sent before the table is read: it is no difference.
#[test]
fn a_pending_fi_more_batch_is_sent_before_the_table_is_read() {
    let (_f, nic) = nic();
    let mut av = av_of(&nic, 8, AvAttr::default());
    av.insertsvc("10.3.0.1", Some("2"), None, FI_MORE, None)
        .unwrap();
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.differences(), 0);
    assert_eq!(av.pending_len(), 0);
    assert!(table.rows[0].nic.is_valid());
}

/// An AV of 8 entries holding auth keys.
fn keyed_av(nic: &Nic) -> uet_driver::Av {
    av_of(
        nic,
        8,
        AvAttr {
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        },
    )
}

/// The NIC uses an auth-key slot only for the AV that owns it: a slot removed behind an AV's
/// back and given to another AV (same JobID, same source) is a difference for the first, and
/// its keyed entries show no key.
#[test]
fn a_key_slot_owned_by_another_av_is_a_difference() {
    let (_f, nic) = nic();
    let (mut a, mut b) = (keyed_av(&nic), keyed_av(&nic));
    let k = a.insert_auth_key(&job_id_to_auth_key(0x51), 0).unwrap();
    let slot = a.auth_keys().next().unwrap().slot;
    let mut keyed = k;
    a.insertsvc("10.2.0.9", Some("3"), Some(&mut keyed), FI_AUTH_KEY, None)
        .unwrap();
    assert_eq!(dump::collect(&mut a).unwrap().differences(), 0);
    a.nic_mut().remove_auth_key(slot, 0x51).unwrap();
    b.insert_auth_key(&job_id_to_auth_key(0x51), 0).unwrap();
    assert_eq!(
        b.auth_keys().next().unwrap().slot,
        slot,
        "the slot went to b"
    );
    let table = dump::collect(&mut a).unwrap();
    assert_eq!(table.differences(), 1);
    let text = dump::render_text("t", &table);
    assert!(
        row_line(&text, &keyed.to_string()).contains("(no key)"),
        "{text}"
    );
    assert_eq!(dump::collect(&mut b).unwrap().differences(), 0);
}

/// An auth-key slot the AV's table owns on the NIC that no key of the AV names (here added
/// behind the AV's back, as a late AUTH_KEY_ADD the driver could not undo would leave it) is
/// a difference, shown in its own section and in the JSON; another AV's slot is not.
#[test]
fn a_stray_key_slot_of_the_table_is_a_difference() {
    let (_f, nic) = nic();
    let (mut a, mut b) = (keyed_av(&nic), keyed_av(&nic));
    a.insert_auth_key(&job_id_to_auth_key(0x51), 0).unwrap();
    b.insert_auth_key(&job_id_to_auth_key(0x52), 0).unwrap();
    assert_eq!(dump::collect(&mut a).unwrap().differences(), 0);
    let stray = a.nic_mut().add_auth_key(0x53, 7).unwrap();
    let table = dump::collect(&mut a).unwrap();
    assert_eq!(table.differences(), 1);
    assert_eq!(table.stray.len(), 1);
    assert_eq!(table.stray[0].0, stray);
    let text = dump::render_text("t", &table);
    assert!(text.contains("STRAY SLOT"), "{text}");
    assert!(text.contains("0x53"), "{text}");
    let json = dump::render_json(&table);
    assert_eq!(json["stray_auth_key_slots"][0]["slot"], u64::from(stray));
    assert_eq!(json["stray_auth_key_slots"][0]["job_id"], 0x53);
    assert_eq!(json["differences"], 1);
    assert_eq!(dump::collect(&mut b).unwrap().differences(), 0, "not b's");
    a.nic_mut().remove_auth_key(stray, 0x53).unwrap();
    assert_eq!(dump::collect(&mut a).unwrap().differences(), 0);
}

/// The JSON `av dump --pid` writes entry by entry, as it serializes, is the document
/// `render_json` builds, key for key and in the same order: ranges, user ids, auth keys, a
/// difference and an empty NIC slot included.
#[test]
fn the_json_written_entry_by_entry_is_the_json_built() {
    let (_f, nic) = nic();
    let mut av = av_of(
        &nic,
        64,
        AvAttr {
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        },
    );
    let k = av.insert_auth_key(&job_id_to_auth_key(0x51), 0).unwrap();
    let mut keyed = k;
    av.insertsvc("10.2.0.9", Some("3"), Some(&mut keyed), FI_AUTH_KEY, None)
        .unwrap();
    av.insertsym("10.1.0.1", 3, "7?ri=1+4&init=9", 4, None, 0, None)
        .unwrap();
    let mut fa = 0u64;
    av.insertsvc("10.3.0.1", Some("2"), Some(&mut fa), 0, None)
        .unwrap();
    let mut wrong = av.mirror_entry(fa as u32).unwrap();
    wrong.caps ^= 1;
    overwrite(&mut av, fa, wrong);
    let elsewhere = av.mirror_entry(fa as u32).unwrap();
    overwrite(&mut av, 40, elsewhere);
    let (mut with_user_id, _) = one_peer_with_user_id(&nic);
    let tables = [
        dump::collect(&mut av).unwrap(),
        dump::collect(&mut with_user_id).unwrap(),
    ];
    assert_eq!(tables[0].differences(), 2);
    for table in &tables {
        let built = format!("{:#}", dump::render_json(table));
        let written = serde_json::to_string_pretty(&dump::Json(table)).unwrap();
        assert_eq!(written, built);
    }
    assert!(format!("{:#}", dump::render_json(&tables[0])).contains("\"services_per_node\": 4"));
    assert!(format!("{:#}", dump::render_json(&tables[1])).contains("\"user_id\": \"0xfeed\""));
}

/// A live dump (no mirror read) folds range members into one row only when each is the
/// member the range's rule gives its index: a member whose fields differ from its
/// neighbours' (here a JobID, and a PIDonFEP out of step) is a row of its own, showing what
/// the NIC holds, not hidden inside a row that shows the first member's.
#[test]
fn a_live_range_member_off_its_rule_is_not_folded_away() {
    use uet_fwif::NicAvEntry;
    let (_f, nic) = nic();
    let mut av = av_of(&nic, 64, AvAttr::default());
    av.insertsym("10.1.0.1", 2, "7?ri=1+4&init=9", 4, None, 0, None)
        .unwrap();
    let mut members: Vec<NicAvEntry> = (0..8u32)
        .map(|i| {
            let mut e = NicAvEntry::INVALID;
            av.nic_mut()
                .read_entries(i, std::slice::from_mut(&mut e))
                .unwrap();
            e
        })
        .collect();
    let live = |members: &[NicAvEntry]| {
        let mut rows = Vec::new();
        for (i, e) in members.iter().enumerate() {
            dump::push_row(&mut rows, i as u32, *e, None);
        }
        rows
    };
    // As the NIC holds it: one row.
    assert_eq!(live(&members).len(), 1, "{:?}", live(&members));
    members[2].job_id.set(0x77);
    let pid = members[5].pid_on_fep.get();
    members[5].pid_on_fep.set(pid + 1);
    let rows = live(&members);
    let spans: Vec<(u32, u32)> = rows.iter().map(|r| (r.index, r.span)).collect();
    assert_eq!(spans, [(0, 2), (2, 1), (3, 2), (5, 1), (6, 2)]);
    let table = dump::AvDump {
        capacity: 64,
        rows,
        keys: Vec::new(),
        stray: Vec::new(),
        mirror: false,
        nic_keys: Vec::new(),
        named: None,
    };
    let text = dump::render_text("t", &table);
    assert!(row_line(&text, "2").contains("0x77"), "{text}");
    assert!(text.contains("8 entries valid of 64"), "{text}");
}

/// An entry the NIC holds bound to a stray slot of the AV's table (one the table owns but no
/// key of the AV names) is sent with that slot's JobID: its row shows it ("0x53 (key)"), as
/// a live dump shows the slots the table owns, not "(no key)".
#[test]
fn an_entry_bound_to_a_stray_slot_shows_the_slots_jobid() {
    let (_f, nic) = nic();
    let mut av = keyed_av(&nic);
    av.insert_auth_key(&job_id_to_auth_key(0x51), 0).unwrap();
    let mut fa = 0;
    av.insertsvc("10.2.0.9", Some("3"), Some(&mut fa), 0, None)
        .unwrap();
    let stray = av.nic_mut().add_auth_key(0x53, 7).unwrap();
    let bound = av.mirror_entry(fa as u32).unwrap().with_auth_key(stray);
    overwrite(&mut av, fa, bound);
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.stray.len(), 1);
    let text = dump::render_text("t", &table);
    let line = row_line(&text, &fa.to_string());
    assert!(line.contains("0x53 (key)"), "{text}");
}
