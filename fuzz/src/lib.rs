//! Fuzz targets for every parser of uet-nic that takes input from outside the process, as
//! DESIGN.md asks: the 32-byte UET address and its text forms, the AV calls that take them, the
//! simulated NIC's admin commands, BAR0 registers and datapath descriptors, frames off the
//! wire, the IOMMU's answer to `VFIO_IOMMU_GET_INFO`, and the requests of a telemetry client.
//!
//! Each target is a function `run(data)` here, so that it is built, linted and replayed on
//! stable Rust with the rest of the workspace (`tests/replay.rs` runs every input under
//! `corpus/` and `regressions/`, and inputs derived from them); the `fuzz_targets/` binaries
//! hand them to libFuzzer:
//!
//! ```text
//! cargo +nightly fuzz run --features libfuzzer <target> -- -max_total_time=600
//! ```
//!
//! A target fails by panicking, and it panics only where uet-nic broke a promise: an error
//! without a message, a mirror and NIC that disagree, a round trip that changes an address, a
//! NIC that stops answering. Refusing bad input is the expected outcome, not a failure.

pub mod address;
pub mod address_text;
pub mod admin_commands;
pub mod av_calls;
pub mod descriptors;
pub mod frames;
pub mod iommu_info;
pub mod registers;
pub mod telemetry_requests;

/// Check a refusal: every error a call returns says what was wrong.
pub fn refused(e: &uet_av::FiError) {
    assert!(!e.message.is_empty(), "{:?} without a message", e.errno);
}

/// The call's value, or `None` after [`refused`] checked its error.
pub fn answered<T>(r: Result<T, uet_av::FiError>) -> Option<T> {
    r.map_err(|e| refused(&e)).ok()
}

/// The fuzzer's bytes, read front to back; reads past the end give zeros, so every input
/// decodes to something.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Read `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        let (&b, rest) = self.data.split_first().unwrap_or((&0, &[]));
        self.data = rest;
        b
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// Up to `n` next bytes (fewer at the end).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// A string: a length byte (at most `max`), then that many bytes, invalid UTF-8 replaced.
    pub fn text(&mut self, max: usize) -> String {
        let n = usize::from(self.u8()) % (max + 1);
        String::from_utf8_lossy(self.bytes(n)).into_owned()
    }

    /// A number below `n` (`n` > 0), from one byte.
    pub fn below(&mut self, n: u8) -> u8 {
        self.u8() % n.max(1)
    }
}

/// The host names the targets resolve, without asking DNS: `node<n>` (n < 256, any zero
/// padding) is 10.7.0.n, `node<n>-v6` is fd00::7:n; no other name exists.
pub fn resolver(name: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let (digits, v6) = match name.strip_suffix("-v6") {
        Some(d) => (d, true),
        None => (name, false),
    };
    digits
        .strip_prefix("node")
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u8>().ok())
        .map(|n| {
            vec![if v6 {
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 7, u16::from(n)))
            } else {
                IpAddr::V4(Ipv4Addr::new(10, 7, 0, n))
            }]
        })
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"))
}

/// A target's `run`.
pub type Run = fn(&[u8]);

/// Every target: its name (as in `fuzz_targets/`) and its `run`.
pub const TARGETS: [(&str, Run); 10] = [
    ("address", address::run),
    ("address_text", address_text::run),
    ("av_calls", av_calls::run),
    ("admin_commands", admin_commands::run),
    (
        "admin_commands_any_interface",
        admin_commands::run_any_interface,
    ),
    ("descriptors", descriptors::run),
    ("frames", frames::run),
    ("iommu_info", iommu_info::run),
    ("registers", registers::run),
    ("telemetry_requests", telemetry_requests::run),
];

/// Each target's seed inputs, made from real values (addresses, texts, call sequences,
/// commands, captured frames) so the fuzzer starts past the first checks.
pub fn seeds() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    vec![
        ("address", address::seeds()),
        ("address_text", address_text::seeds()),
        ("av_calls", av_calls::seeds()),
        ("admin_commands", admin_commands::seeds()),
        (
            "admin_commands_any_interface",
            admin_commands::seeds_any_interface(),
        ),
        ("descriptors", descriptors::seeds()),
        ("frames", frames::seeds()),
        ("iommu_info", iommu_info::seeds()),
        ("registers", registers::seeds()),
        ("telemetry_requests", telemetry_requests::seeds()),
    ]
}

#[cfg(test)]
mod tests {
    /// Every target has its `[[bin]]` in `Cargo.toml`, for `cargo fuzz` alone, as
    /// cargo-fuzz writes one: left out of `cargo test`, `cargo doc` and `cargo bench`, which
    /// with the `libfuzzer` feature on would build it too, a test harness beside libFuzzer.
    #[test]
    fn every_target_is_a_bin_for_cargo_fuzz_alone() {
        let manifest = include_str!("../Cargo.toml");
        let bins: Vec<Vec<&str>> = manifest
            .split("[[bin]]")
            .skip(1)
            .map(|section| {
                section
                    .lines()
                    .skip(1)
                    .take_while(|l| !l.starts_with('['))
                    .map(str::trim)
                    .collect()
            })
            .collect();
        for (name, _) in super::TARGETS {
            let Some(bin) = bins
                .iter()
                .find(|b| b.contains(&format!("name = \"{name}\"").as_str()))
            else {
                panic!("no [[bin]] of {name}");
            };
            for key in ["test = false", "doc = false", "bench = false"] {
                assert!(bin.contains(&key), "[[bin]] {name} has no `{key}`: {bin:?}");
            }
        }
    }
}
