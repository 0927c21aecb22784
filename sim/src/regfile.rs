//! Register file: BAR0 storage that enforces the datasheet (`uet_regs::REGISTERS`).
//!
//! * Every register holds its reset value after power-on and after FUNCTION_RESET. The
//!   capability registers reset to the values of this NIC's [`NicConfig`] (the reference
//!   configuration reproduces the `uet-regs` reset values exactly).
//! * Accesses are naturally aligned 32- or 64-bit transactions. A 64-bit register may also be
//!   accessed as two 32-bit halves (low half at its offset, high half at offset + 4), as NVMe
//!   allows for its 64-bit base registers. Any other offset or width — no register there, a
//!   misaligned offset, a 64-bit access to a 32-bit register — reads all ones, drops the write,
//!   and counts in `BAD_REGISTER_ACCESSES`. So does a register newer than the NIC's interface
//!   version; the NIC filters those after [`RegFile::decode`] (see `crate::nic`).
//! * RO: writes are ignored. RW: defined bits take the written value, reserved bits stay 0.
//!   W1C: a 1 written to a defined bit clears it. WO: the write acts (see the owning block);
//!   reads return 0. Reserved bits always read 0.
//! * No read has a side effect.
//!
//! Counters (`0x200`–`0x2ff`) are stored by the statistics block ([`crate::counters`]); the
//! register file only decodes their offsets.

use crate::config::NicConfig;
use uet_regs::{
    Access, Reg, RegInfo, RegValue, Width, BAR0_SIZE, CAP_AUTH_KEY, CAP_AV, CAP_AV_ENTRIES, CAP_EP,
    CAP_MAX_MSG, CAP_PEER_GROUPS, CAP_PID_ON_FEP, CAP_PROFILES, CAP_QUEUES, CAP_RESOURCE_INDEX,
    CAP_TAGGED, REGISTERS, REVISION,
};

/// Which part of a register an access covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The whole register, at its own width.
    Full,
    /// Bits 31:0 of a 64-bit register.
    Low,
    /// Bits 63:32 of a 64-bit register.
    High,
}

/// A decoded BAR0 access.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decoded {
    /// Index in [`REGISTERS`].
    pub index: usize,
    /// Part of the register accessed.
    pub part: Part,
    /// The register's datasheet entry.
    pub info: &'static RegInfo,
    /// The register's defined bits (`info.defined_mask()`, from the decode table).
    pub mask: u64,
}

/// A driver write after the access kind has been applied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Written {
    /// The register written.
    pub info: &'static RegInfo,
    /// Stored value before the write.
    pub old: u64,
    /// Stored value after the write.
    pub new: u64,
    /// The full-width value the write carried, restricted to defined bits (what a WO register
    /// acts on).
    pub value: u64,
}

/// BAR0 storage.
#[derive(Clone, Debug)]
pub(crate) struct RegFile {
    values: Vec<u64>,
    reset: Vec<u64>,
}

/// 32-bit words of BAR0.
const BAR0_WORDS: usize = BAR0_SIZE as usize / 4;

/// What the address decoder knows, built from [`REGISTERS`] when the simulator is compiled:
/// the register index of every 32-bit word of BAR0 where a register starts (2 KiB), so that
/// an access costs one table load, not a search.
static WORD_REGISTER: [u16; BAR0_WORDS] = word_registers();

/// Each register's defined bits (`RegInfo::defined_mask`), by index in [`REGISTERS`], so that a
/// write is masked without a walk over the register's fields.
static DEFINED_MASK: [u64; REGISTERS.len()] = defined_masks();

const fn word_registers() -> [u16; BAR0_WORDS] {
    // More registers than a u16 index holds, or one outside BAR0, fails the build here.
    assert!(REGISTERS.len() < NO_REGISTER as usize);
    let mut table = [NO_REGISTER; BAR0_WORDS];
    let mut i = 0;
    while i < REGISTERS.len() {
        table[REGISTERS[i].offset as usize / 4] = i as u16;
        i += 1;
    }
    table
}

const fn defined_masks() -> [u64; REGISTERS.len()] {
    let mut masks = [0; REGISTERS.len()];
    let mut i = 0;
    while i < REGISTERS.len() {
        masks[i] = REGISTERS[i].defined_mask();
        i += 1;
    }
    masks
}

/// The index in [`REGISTERS`] of the register starting at `offset`: one load from the decode
/// table.
#[inline]
fn index_of(offset: u32) -> Option<usize> {
    if !offset.is_multiple_of(4) {
        return None;
    }
    let i = usize::from(*WORD_REGISTER.get(offset as usize / 4)?);
    // Registers are naturally aligned (a uet-regs test checks it); check the match anyway.
    REGISTERS.get(i).filter(|r| r.offset == offset).map(|_| i)
}

/// A BAR0 word where no register starts.
const NO_REGISTER: u16 = u16::MAX;

impl RegFile {
    /// A register file at its reset values, capabilities taken from `cfg`.
    pub(crate) fn new(cfg: &NicConfig) -> Self {
        let mut reset: Vec<u64> = REGISTERS.iter().map(|r| r.reset).collect();
        let mut put = |reg: &RegInfo, v: u64| {
            if let Some(i) = index_of(reg.offset) {
                if let Some(slot) = reset.get_mut(i) {
                    *slot = v & reg.defined_mask();
                }
            }
        };
        let cap_av = CAP_AV
            .reset_value()
            .with_max_tables(cfg.av_tables)
            .with_max_rx_ctx_bits(cfg.max_rx_ctx_bits);
        put(&CAP_AV.info, cap_av.to_raw());
        put(&CAP_AV_ENTRIES.info, u64::from(cfg.av_entries));
        let cap_ep = CAP_EP
            .reset_value()
            .with_max_endpoints(cfg.endpoints)
            .with_max_tx_ctx(cfg.max_tx_ctx)
            .with_max_rx_ctx(cfg.max_rx_ctx);
        put(&CAP_EP.info, cap_ep.to_raw());
        let pid = CAP_PID_ON_FEP
            .reset_value()
            .with_first(cfg.pid_first)
            .with_count(cfg.pid_count);
        put(&CAP_PID_ON_FEP.info, pid.to_raw());
        let ri = CAP_RESOURCE_INDEX
            .reset_value()
            .with_max_per_endpoint(cfg.ri_per_endpoint)
            .with_space(cfg.ri_space);
        put(&CAP_RESOURCE_INDEX.info, ri.to_raw());
        let prof = CAP_PROFILES
            .reset_value()
            .with_ai_base(cfg.profiles & 1 != 0)
            .with_ai_full(cfg.profiles & 2 != 0)
            .with_hpc(cfg.profiles & 4 != 0)
            .with_mtu(cfg.mtu);
        put(&CAP_PROFILES.info, prof.to_raw());
        let q = CAP_QUEUES
            .reset_value()
            .with_max_admin_entries(cfg.max_admin_entries)
            .with_max_queue_entries(cfg.max_queue_entries);
        put(&CAP_QUEUES.info, q.to_raw());
        put(&CAP_MAX_MSG.info, u64::from(cfg.max_msg));
        let tagged = CAP_TAGGED
            .reset_value()
            .with_unexpected_entries(cfg.unexpected_entries)
            .with_unexpected_kib(cfg.unexpected_kib);
        put(&CAP_TAGGED.info, tagged.to_raw());
        let auth = CAP_AUTH_KEY.reset_value().with_slots(cfg.auth_key_slots);
        put(&CAP_AUTH_KEY.info, auth.to_raw());
        put(&CAP_PEER_GROUPS.info, u64::from(cfg.max_group_id));
        let revision = REVISION
            .reset_value()
            .with_interface_minor(cfg.interface_minor);
        put(&REVISION.info, revision.to_raw());
        RegFile {
            values: reset.clone(),
            reset,
        }
    }

    /// Every register back to its reset value.
    pub(crate) fn reset(&mut self) {
        self.values.clone_from(&self.reset);
    }

    /// Decode a driver access; `None` is a bad access (no register, misaligned, wrong width).
    #[inline]
    pub(crate) fn decode(offset: u32, width: Width) -> Option<Decoded> {
        if !offset.is_multiple_of(width.bytes()) {
            return None;
        }
        if let Some(index) = index_of(offset) {
            let info = REGISTERS.get(index)?;
            let part = match (info.width, width) {
                (Width::W32, Width::W32) | (Width::W64, Width::W64) => Part::Full,
                (Width::W64, Width::W32) => Part::Low,
                (Width::W32, Width::W64) => return None,
            };
            let mask = *DEFINED_MASK.get(index)?;
            return Some(Decoded {
                index,
                part,
                info,
                mask,
            });
        }
        if width == Width::W32 && offset >= 4 {
            let index = index_of(offset - 4)?;
            let info = REGISTERS.get(index)?;
            if info.width == Width::W64 {
                return Some(Decoded {
                    index,
                    part: Part::High,
                    info,
                    mask: *DEFINED_MASK.get(index)?,
                });
            }
        }
        None
    }

    /// The stored value of register `index` (device view; WO registers hold 0).
    pub(crate) fn raw(&self, index: usize) -> u64 {
        self.values.get(index).copied().unwrap_or(0)
    }

    /// What the driver reads: WO registers read 0, halves are extracted.
    pub(crate) fn driver_read(&self, d: &Decoded) -> u64 {
        let v = if d.info.access == Access::Wo {
            0
        } else {
            self.raw(d.index)
        };
        match d.part {
            Part::Full => v,
            Part::Low => v & 0xFFFF_FFFF,
            Part::High => v >> 32,
        }
    }

    /// Apply a driver write according to the register's access kind.
    #[inline]
    pub(crate) fn driver_write(&mut self, d: &Decoded, value: u64) -> Written {
        let info = d.info;
        if info.access == Access::Wo && d.part == Part::Full {
            // A write-only register stores nothing (it holds 0): a whole write only acts, with
            // its defined bits. Doorbells and the AV write window are such registers, written
            // once or eight times per AV entry.
            return Written {
                info,
                old: 0,
                new: 0,
                value: value & d.mask,
            };
        }
        let mask = d.mask;
        let old = self.raw(d.index);
        // The full-width value this write carries; the other half of a 64-bit register keeps
        // its stored value (RW) or reads as 0 (W1C, WO: writing 0 has no effect).
        let base = if info.access == Access::Rw { old } else { 0 };
        let full = match d.part {
            Part::Full => value,
            Part::Low => (base & !0xFFFF_FFFF) | (value & 0xFFFF_FFFF),
            Part::High => (base & 0xFFFF_FFFF) | (value << 32),
        } & mask;
        let new = match info.access {
            Access::Ro => old,
            Access::Rw => full,
            Access::W1c => old & !full,
            Access::Wo => 0,
        };
        if let Some(slot) = self.values.get_mut(d.index) {
            *slot = new;
        }
        Written {
            info,
            old,
            new,
            value: full,
        }
    }

    /// Read a register as its typed value (device view).
    pub(crate) fn get<T: RegValue>(&self, reg: Reg<T>) -> T {
        T::from_raw(index_of(reg.info.offset).map_or(0, |i| self.raw(i)))
    }

    /// Set a register from the device side (status, mirrors), keeping reserved bits 0.
    pub(crate) fn set<T: RegValue>(&mut self, reg: Reg<T>, value: T) {
        if let Some(slot) = index_of(reg.info.offset).and_then(|i| self.values.get_mut(i)) {
            *slot = value.to_raw() & reg.info.defined_mask();
        }
    }

    /// Update a register from the device side with a closure over its typed value.
    pub(crate) fn update<T: RegValue>(&mut self, reg: Reg<T>, f: impl FnOnce(T) -> T) {
        let v = f(self.get(reg));
        self.set(reg, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn reference_config_resets_to_datasheet_values() {
        let rf = RegFile::new(&NicConfig::new(Ipv4Addr::new(10, 0, 0, 1).into()));
        for (i, r) in REGISTERS.iter().enumerate() {
            assert_eq!(rf.raw(i), r.reset, "{}", r.name);
        }
    }

    #[test]
    fn decode_rules() {
        assert!(RegFile::decode(0x0002, Width::W32).is_none());
        assert!(RegFile::decode(0x0010, Width::W64).is_none());
        assert!(RegFile::decode(0x0ffc, Width::W32).is_none());
        let d = RegFile::decode(0x0084, Width::W32).unwrap_or_else(|| panic!("high half"));
        assert_eq!(d.part, Part::High);
        assert_eq!(d.info.name, "ADMIN_SQ_BASE");
        assert!(RegFile::decode(0x0084, Width::W64).is_none());
    }

    /// The compile-time decode tables against the datasheet, over every word of BAR0: each
    /// register decodes at its offset (and a 64-bit one's high half at offset + 4) with its
    /// defined bits, and no other offset decodes.
    #[test]
    fn every_bar0_word_decodes_as_the_datasheet_says() {
        let mut regs = RegFile::new(&NicConfig::new(Ipv4Addr::new(10, 0, 0, 1).into()));
        let mut decoded = 0;
        for offset in (0..BAR0_SIZE).step_by(4) {
            let start = REGISTERS.iter().position(|r| r.offset == offset);
            let high = REGISTERS
                .iter()
                .position(|r| r.width == Width::W64 && r.offset + 4 == offset);
            match (RegFile::decode(offset, Width::W32), start, high) {
                (Some(d), Some(i), _) => {
                    assert_eq!(d.index, i);
                    let r = &REGISTERS[i];
                    assert_eq!(
                        d.part,
                        if r.width == Width::W32 {
                            Part::Full
                        } else {
                            Part::Low
                        }
                    );
                    assert_eq!(d.mask, r.defined_mask(), "{}", r.name);
                    decoded += 1;
                }
                (Some(d), None, Some(i)) => assert_eq!((d.index, d.part), (i, Part::High)),
                (None, None, None) => {}
                (d, start, high) => panic!("{offset:#x}: {d:?} {start:?} {high:?}"),
            }
            let wide = RegFile::decode(offset, Width::W64);
            match start.map(|i| &REGISTERS[i]) {
                Some(r) if r.width == Width::W64 => {
                    let d = wide.unwrap_or_else(|| panic!("{}", r.name));
                    assert_eq!(d.part, Part::Full);
                    // A whole write keeps the defined bits only, and a write-only register
                    // stores none of them.
                    let w = regs.driver_write(&d, u64::MAX);
                    assert_eq!(w.value, r.defined_mask(), "{}", r.name);
                    if r.access == Access::Wo {
                        assert_eq!(regs.raw(d.index), 0, "{}", r.name);
                    }
                }
                _ => assert!(wide.is_none(), "{offset:#x}"),
            }
        }
        assert_eq!(decoded, REGISTERS.len());
    }
}
