//! `uetctl av dump` rendering: symmetric ranges fold into one row, user ids and auth-key slots
//! show, JSON carries them.

use std::sync::Arc;
use uet_av::{job_id_to_auth_key, AvAttr, FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID};
use uet_driver::backend::sim::SimDevice;
use uet_driver::Nic;
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

#[test]
fn ranges_fold_into_one_row_and_singles_stay_apart() {
    let (_f, nic) = nic();
    let mut av = nic
        .open_av(AvAttr {
            count: 64,
            job_id: 5,
            ..AvAttr::default()
        })
        .unwrap();
    av.insertsym("10.1.0.1", 3, "7?ri=1+4&init=9", 4, None, 0, None)
        .unwrap();
    av.insertsvc("10.2.0.9", Some("3?ri=1+2&init=1"), None, 0, None)
        .unwrap();
    let table = dump::collect(&mut av).unwrap();
    assert_eq!(table.differences(), 0);
    assert_eq!(table.rows.len(), 2, "{:?}", table.rows);
    assert_eq!((table.rows[0].index, table.rows[0].span), (0, 12));
    assert_eq!((table.rows[1].index, table.rows[1].span), (12, 1));
    let text = dump::render_text("t", &table);
    assert!(text.contains("13 entries valid of 64"), "{text}");
    assert!(text.contains("0..12"), "{text}");
    assert!(text.contains("10.1.0.1..10.1.0.3"), "{text}");
    assert!(text.contains("7..10"), "{text}");
    assert!(text.contains("range 0+12 (4 per node)"), "{text}");
    assert!(text.contains("single"), "{text}");
    let json = dump::render_json(&table);
    assert_eq!(json["entries"][0]["span"], 12);
    assert_eq!(json["entries"][0]["nic"]["range"]["services_per_node"], 4);
    assert_eq!(json["entries"][1]["nic"]["range"], serde_json::Value::Null);
}

#[test]
fn user_ids_show_in_text_and_json() {
    let (_f, nic) = nic();
    let mut av = nic
        .open_av(AvAttr {
            count: 8,
            job_id: 5,
            flags: FI_AV_USER_ID,
            ..AvAttr::default()
        })
        .unwrap();
    let mut fa = 0u64;
    av.insertsvc("10.3.0.1", Some("2?ri=1+1&init=4"), Some(&mut fa), 0, None)
        .unwrap();
    av.set_user_id(fa, 0xfeed, 0).unwrap();
    let table = dump::collect(&mut av).unwrap();
    let text = dump::render_text("t", &table);
    assert!(text.contains("0xfeed"), "{text}");
    assert_eq!(
        dump::render_json(&table)["entries"][0]["nic"]["user_id"],
        0xfeed
    );
}

#[test]
fn auth_key_slots_show_in_text_and_json() {
    let (_f, nic) = nic();
    let mut av = nic
        .open_av(AvAttr {
            count: 8,
            job_id: 5,
            auth_key_size: FI_AV_AUTH_KEY,
            ..AvAttr::default()
        })
        .unwrap();
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
}
