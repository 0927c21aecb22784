//! Every fuzz target over its seeds, the corpus libFuzzer kept (`corpus/<target>/`), the
//! inputs that once failed (`regressions/<target>/`), and inputs derived from them all by
//! small random edits: the fuzzers' findings stay fixed on stable Rust, in CI.
//!
//! `UET_FUZZ_EDITS` sets the derived inputs per input (8 by default).

use std::path::Path;

/// Files of `dir`, sorted by name; none when it does not exist.
fn inputs_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), bytes)
        })
        .collect()
}

/// A few bytes of `input` replaced, inserted or removed, or a piece of `other` spliced in.
fn edit(input: &[u8], other: &[u8], rng: &mut u64) -> Vec<u8> {
    let mut next = |n: usize| {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        (*rng % n.max(1) as u64) as usize
    };
    let mut out = input.to_vec();
    for _ in 0..1 + next(4) {
        let at = next(out.len() + 1);
        match next(5) {
            0 if at < out.len() => out[at] = next(256) as u8,
            1 => out.insert(at, next(256) as u8),
            2 if at < out.len() => {
                out.remove(at);
            }
            3 if at < out.len() => out[at] ^= 1 << next(8),
            _ => {
                let from = next(other.len() + 1);
                let len = next(16).min(other.len() - from);
                out.splice(at..at, other[from..from + len].iter().copied());
            }
        }
    }
    out
}

/// Replay `target`'s seeds, corpus and regressions, and `UET_FUZZ_EDITS` edits of each.
fn replay(target: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let edits: usize = std::env::var("UET_FUZZ_EDITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let Some(&(_, run)) = uet_fuzz::TARGETS.iter().find(|(t, _)| *t == target) else {
        panic!("no fuzz target {target}");
    };
    let mut inputs: Vec<(String, Vec<u8>)> = uet_fuzz::seeds()
        .into_iter()
        .filter(|(t, _)| *t == target)
        .flat_map(|(_, s)| s.into_iter().enumerate())
        .map(|(i, s)| (format!("seed {i}"), s))
        .collect();
    assert!(!inputs.is_empty(), "{target} has no seeds");
    inputs.extend(inputs_in(&root.join("corpus").join(target)));
    inputs.extend(inputs_in(&root.join("regressions").join(target)));
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut derived = Vec::new();
    for (i, (name, input)) in inputs.iter().enumerate() {
        let other = &inputs[(i + 1) % inputs.len()].1;
        for k in 0..edits {
            derived.push((format!("edit {k} of {name}"), edit(input, other, &mut rng)));
        }
    }
    for (name, input) in inputs.iter().chain(&derived) {
        let r = std::panic::catch_unwind(|| run(input));
        assert!(
            r.is_ok(),
            "{target}: {name} ({} bytes: {input:02x?}) failed",
            input.len()
        );
    }
    eprintln!("{target}: {} inputs", inputs.len() + derived.len());
}

#[test]
fn address_replays() {
    replay("address");
}

#[test]
fn address_text_replays() {
    replay("address_text");
}

#[test]
fn av_calls_replays() {
    replay("av_calls");
}

#[test]
fn admin_commands_replays() {
    replay("admin_commands");
}

#[test]
fn admin_commands_any_interface_replays() {
    replay("admin_commands_any_interface");
}

#[test]
fn descriptors_replays() {
    replay("descriptors");
}

#[test]
fn frames_replays() {
    replay("frames");
}

#[test]
fn iommu_info_replays() {
    replay("iommu_info");
}

#[test]
fn registers_replays() {
    replay("registers");
}

#[test]
fn telemetry_requests_replays() {
    replay("telemetry_requests");
}

#[test]
fn every_target_has_a_replay_test() {
    let names: Vec<&str> = uet_fuzz::TARGETS.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        names,
        [
            "address",
            "address_text",
            "av_calls",
            "admin_commands",
            "admin_commands_any_interface",
            "descriptors",
            "frames",
            "iommu_info",
            "registers",
            "telemetry_requests"
        ]
    );
}
