//! The one door to the device's registers.

use crate::{Reg, RegValue, Width};

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
