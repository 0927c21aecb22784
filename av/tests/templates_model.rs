//! Templates against a model: random packs and releases, every live word read back.

use std::collections::HashSet;
use uet_av::mirror::templates::{template_id, Templates, SPILLED};
use uet_av::mirror::Slot;

fn rng(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn addr(k: u32, low: u32) -> Slot {
    let mut b = [0u8; 32];
    b[0] = 0x10;
    b[1] = 0x1F;
    b[2] = 1;
    b[5] = low as u8;
    b[16..20].copy_from_slice(&(0x0A00_0000u32 + (k << 16) + (low & 0xFFFF)).to_be_bytes());
    b
}

#[test]
fn random_packs_and_releases_read_back() {
    let mut x = 0x1234_5678_9ABC_DEF1u64;
    let mut t = Templates::default();
    let mut live: Vec<(u64, Slot, u32)> = Vec::new();
    for step in 0..60_000u32 {
        let r = rng(&mut x);
        if r % 5 < 3 || live.is_empty() {
            let k = (rng(&mut x) % 4_600) as u32;
            let b = addr(k, rng(&mut x) as u32);
            let w = t.pack(&b).unwrap();
            assert_eq!(t.unpack(w), Some(b), "{step}");
            live.push((w, b, k));
        } else {
            let i = (rng(&mut x) as usize) % live.len();
            let (w, _, _) = live.swap_remove(i);
            t.release(w);
        }
        if step % 997 == 0 {
            for &(w, b, _) in &live {
                assert_eq!(t.unpack(w), Some(b), "{step}");
            }
            let ids: HashSet<u16> = live
                .iter()
                .map(|&(w, _, _)| template_id(w))
                .filter(|&i| i != SPILLED)
                .collect();
            assert_eq!(t.len(), ids.len(), "{step}");
            let whole = live
                .iter()
                .filter(|&&(w, _, _)| template_id(w) == SPILLED)
                .count();
            assert_eq!(t.spilled(), whole, "{step}");
            // One template per image among the live words.
            let ks: HashSet<u32> = live
                .iter()
                .filter(|&&(w, _, _)| template_id(w) != SPILLED)
                .map(|&(_, _, k)| k)
                .collect();
            assert_eq!(ks.len(), ids.len(), "{step}");
        }
    }
}
