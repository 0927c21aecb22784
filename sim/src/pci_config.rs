//! PCI configuration space: the function's type-0 header (`uet_regs::pci`).
//!
//! What a host sees of the function before it maps BAR0: the identity (vendor, device,
//! class), the command register, and BAR0, which sizes the way PCI Local Bus Specification
//! 3.0 §6.2.5.1 says (write all ones, read back the size mask). Every byte has a write mask;
//! a write changes only the bits its mask allows, so read-only fields, reserved bytes and the
//! BAR's low bits (its type, and the address bits inside its size) keep their values, and an
//! access of any width at any offset inside the 256 bytes behaves as the same bytes accessed
//! one at a time. Past the header, reads return 0 and writes do nothing, as for a function
//! without capabilities. A function-level reset returns the header to its reset values.
//!
//! The command register gates the function as on hardware (PCI Local Bus Specification 3.0
//! §6.2.2): BAR0 decodes accesses only with memory space enabled (bit 1; otherwise reads
//! are all ones and writes are dropped, as an access no function claims), and the function
//! issues DMA only with bus mastering enabled (bit 2; otherwise every DMA faults, see
//! `crate::iommu`). Both are clear at reset, so a driver that forgets to set them finds a
//! function that does not answer, as it would on hardware.

use uet_regs::pci::*;
use uet_regs::{BAR0_SIZE, PCI_DEVICE_ID, PCI_VENDOR_ID};

/// The configuration header of one function.
#[derive(Clone, Debug)]
pub(crate) struct PciConfig {
    bytes: [u8; CONFIG_SPACE_SIZE],
    writable: [u8; CONFIG_SPACE_SIZE],
}

impl Default for PciConfig {
    fn default() -> Self {
        let mut c = PciConfig {
            bytes: [0; CONFIG_SPACE_SIZE],
            writable: [0; CONFIG_SPACE_SIZE],
        };
        c.put(VENDOR_ID, &PCI_VENDOR_ID.to_le_bytes());
        c.put(DEVICE_ID, &PCI_DEVICE_ID.to_le_bytes());
        c.put(CLASS_CODE, &CLASS_ETHERNET.to_le_bytes()[..3]);
        c.put(BAR0, &BAR0_TYPE_64BIT_MEMORY.to_le_bytes());
        c.put(SUBSYSTEM_VENDOR_ID, &PCI_VENDOR_ID.to_le_bytes());
        c.put(SUBSYSTEM_ID, &PCI_DEVICE_ID.to_le_bytes());
        c.allow(COMMAND, &COMMAND_WRITABLE.to_le_bytes());
        // BAR0 decodes BAR0_SIZE bytes: the address bits from log2(size) up are writable.
        let size_mask = !(BAR0_SIZE - 1) & !0xF;
        c.allow(BAR0, &size_mask.to_le_bytes());
        c.allow(BAR0_HIGH, &u32::MAX.to_le_bytes());
        c.allow(INTERRUPT_LINE, &[0xFF]);
        c
    }
}

impl PciConfig {
    fn put(&mut self, at: usize, value: &[u8]) {
        if let Some(dst) = self.bytes.get_mut(at..at + value.len()) {
            dst.copy_from_slice(value);
        }
    }

    fn allow(&mut self, at: usize, mask: &[u8]) {
        if let Some(dst) = self.writable.get_mut(at..at + mask.len()) {
            dst.copy_from_slice(mask);
        }
    }

    /// Read `data.len()` bytes from `offset`; bytes past the header read 0.
    pub(crate) fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = offset
                .checked_add(i as u64)
                .and_then(|at| usize::try_from(at).ok())
                .and_then(|at| self.bytes.get(at))
                .copied()
                .unwrap_or(0);
        }
    }

    /// Write `data` at `offset`, each byte through its write mask; bytes past the header are
    /// dropped.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        for (i, &v) in data.iter().enumerate() {
            let Some(at) = offset
                .checked_add(i as u64)
                .and_then(|at| usize::try_from(at).ok())
            else {
                return;
            };
            if let (Some(b), Some(&m)) = (self.bytes.get_mut(at), self.writable.get(at)) {
                *b = (*b & !m) | (v & m);
            }
        }
    }

    /// The command register.
    pub(crate) fn command(&self) -> u16 {
        let mut b = [0; 2];
        self.read(COMMAND as u64, &mut b);
        u16::from_le_bytes(b)
    }

    /// Whether BAR0 decodes accesses (command register, memory space).
    pub(crate) fn memory_space(&self) -> bool {
        self.command() & COMMAND_MEMORY_SPACE != 0
    }

    /// Whether the function may issue DMA (command register, bus master).
    pub(crate) fn bus_master(&self) -> bool {
        self.command() & COMMAND_BUS_MASTER != 0
    }

    /// Function-level reset: the header's reset values.
    pub(crate) fn reset(&mut self) {
        *self = PciConfig::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dword(c: &PciConfig, at: usize) -> u32 {
        let mut b = [0; 4];
        c.read(at as u64, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn identity_and_class_are_read_only() {
        let mut c = PciConfig::default();
        assert_eq!(dword(&c, VENDOR_ID), ID_DWORD);
        assert_eq!(dword(&c, REVISION_ID) >> 8, CLASS_ETHERNET);
        c.write(0, &[0xFF; 4]);
        c.write(REVISION_ID as u64, &[0xFF; 4]);
        assert_eq!(dword(&c, VENDOR_ID), ID_DWORD);
        assert_eq!(dword(&c, REVISION_ID) >> 8, CLASS_ETHERNET);
        assert_eq!(dword(&c, SUBSYSTEM_VENDOR_ID), ID_DWORD);
        assert_eq!(dword(&c, CAPABILITIES_POINTER), 0);
        assert_eq!(dword(&c, STATUS - 2) >> 16, 0, "no capability list");
    }

    #[test]
    fn the_command_register_keeps_only_its_implemented_bits() {
        let mut c = PciConfig::default();
        assert_eq!(c.command(), 0);
        c.write(COMMAND as u64, &0xFFFFu16.to_le_bytes());
        assert_eq!(c.command(), COMMAND_WRITABLE);
        // A byte write reaches only its byte.
        c.write(COMMAND as u64, &[0]);
        assert_eq!(c.command(), COMMAND_INTX_DISABLE);
        c.reset();
        assert_eq!(c.command(), 0);
    }

    #[test]
    fn bar0_sizes_as_a_64_bit_memory_bar_of_bar0_size() {
        let mut c = PciConfig::default();
        assert_eq!(dword(&c, BAR0), BAR0_TYPE_64BIT_MEMORY);
        c.write(BAR0 as u64, &u32::MAX.to_le_bytes());
        c.write(BAR0_HIGH as u64, &u32::MAX.to_le_bytes());
        let low = dword(&c, BAR0);
        assert_eq!(low & 0xF, BAR0_TYPE_64BIT_MEMORY);
        assert_eq!(!(low & !0xF) + 1, BAR0_SIZE, "size from the mask");
        assert_eq!(dword(&c, BAR0_HIGH), u32::MAX);
        // An address is kept to the BAR's alignment.
        c.write(BAR0 as u64, &0xFEDC_B123u32.to_le_bytes());
        assert_eq!(dword(&c, BAR0), 0xFEDC_B000 | BAR0_TYPE_64BIT_MEMORY);
        // BAR2..5 are not implemented.
        c.write(0x18, &[0xFF; 16]);
        assert!((0x18..0x28).step_by(4).all(|at| dword(&c, at) == 0));
    }

    #[test]
    fn accesses_past_the_header_read_zero_and_change_nothing() {
        let mut c = PciConfig::default();
        let before = c.bytes;
        c.write(250, &[0xFF; 16]);
        c.write(u64::MAX - 1, &[0xFF; 4]);
        assert_eq!(c.bytes, before);
        let mut b = [0xAA; 8];
        c.read(252, &mut b);
        assert_eq!(b, [0; 8]);
        c.read(u64::MAX, &mut b);
        assert_eq!(b, [0; 8]);
    }
}
