//! The one door to the device's registers.

use crate::{Reg, RegInfo, RegValue, Width, REGISTERS, REVISION};

/// Access to a device's BAR0 at byte offsets.
///
/// Every register access of the driver goes through this trait; a backend (kernel VFIO, vfio-user,
/// the in-process simulator) implements it once. Offsets are BAR0 byte offsets and must be
/// naturally aligned for the access width. Implementations must not fail: a device that is gone
/// reads as all ones, exactly as a PCIe read of a surprise-removed function does, and the driver
/// detects that through the [`crate::ID`] register.
pub trait Mmio {
    /// Read a 32-bit register.
    fn read32(&self, offset: u32) -> u32;
    /// Write a 32-bit register.
    fn write32(&self, offset: u32, value: u32);
    /// Read a 64-bit register in one transaction.
    fn read64(&self, offset: u32) -> u64;
    /// Write a 64-bit register in one transaction.
    fn write64(&self, offset: u32, value: u64);

    /// Write consecutive 64-bit registers from `offset` (8-byte aligned) in order, as one
    /// burst where the backend can: on hardware, stores to a write-combining mapping of a
    /// 64-byte line leave as one posted PCIe write. The device must not depend on the words
    /// arriving together (a WC buffer may flush early); the default writes them one by one.
    fn write64_burst(&self, offset: u32, words: &[u64]) {
        let mut at = offset;
        for &w in words {
            self.write64(at, w);
            at = at.wrapping_add(8);
        }
    }
}

/// Typed register access on top of [`Mmio`]: `bar.write(ADMIN_SQ_DOORBELL, v)` reads like the
/// datasheet. Implemented for every `Mmio`, including trait objects.
pub trait RegisterAccess: Mmio {
    /// Read a register as its typed value.
    fn read<T: RegValue>(&self, reg: Reg<T>) -> T {
        let raw = match reg.info.width {
            Width::W32 => self.read32(reg.info.offset) as u64,
            Width::W64 => self.read64(reg.info.offset),
        };
        T::from_raw(raw)
    }

    /// Write a register from its typed value.
    fn write<T: RegValue>(&self, reg: Reg<T>, value: T) {
        match reg.info.width {
            Width::W32 => self.write32(reg.info.offset, value.to_raw() as u32),
            Width::W64 => self.write64(reg.info.offset, value.to_raw()),
        }
    }
}

impl<M: Mmio + ?Sized> RegisterAccess for M {}

/// Every register of [`REGISTERS`] the device's interface version has
/// (`REVISION.interface_minor`), with its value, in offset order. A register added by a later
/// version is not read, so a dump leaves `BAD_REGISTER_ACCESSES` as it was; no register has a
/// read side effect, so this is safe on a running device (`uetctl regs`, the telemetry socket).
pub fn read_registers(bar: &dyn Mmio) -> Vec<(&'static RegInfo, u64)> {
    let minor = bar.read(REVISION).interface_minor();
    REGISTERS
        .iter()
        .filter(|info| info.present_at(minor))
        .map(|info| {
            let value = match info.width {
                Width::W32 => u64::from(bar.read32(info.offset)),
                Width::W64 => bar.read64(info.offset),
            };
            (info, value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Records every access.
    #[derive(Default)]
    struct Recorder(RefCell<Vec<(u32, u64)>>);

    impl Mmio for Recorder {
        fn read32(&self, _: u32) -> u32 {
            0
        }
        fn write32(&self, offset: u32, value: u32) {
            self.0.borrow_mut().push((offset, u64::from(value)));
        }
        fn read64(&self, _: u32) -> u64 {
            0
        }
        fn write64(&self, offset: u32, value: u64) {
            self.0.borrow_mut().push((offset, value));
        }
    }

    #[test]
    fn a_burst_is_its_words_in_order_by_default() {
        let r = Recorder::default();
        r.write64_burst(0x140, &[1, 2, 3]);
        assert_eq!(*r.0.borrow(), [(0x140, 1), (0x148, 2), (0x150, 3)]);
        r.write64_burst(0x200, &[]);
        assert_eq!(r.0.borrow().len(), 3, "an empty burst writes nothing");
    }
}
