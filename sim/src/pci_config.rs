//! PCI configuration space: the function's type-0 header (`uet_regs::pci`).
//!
//! What a host sees of the function before it maps BAR0: the identity (vendor, device,
//! class), the command register, and BAR0, which sizes the way PCI Local Bus Specification
//! 3.0 §6.2.5.1 says (write all ones, read back the size mask). Every byte has a write mask;
//! a write changes only the bits its mask allows, so read-only fields, reserved bytes and the
//! BAR's low bits (its type, and the address bits inside its size) keep their values, and an
//! access of any width at any offset inside the 256 bytes behaves as the same bytes accessed
//! one at a time. The capability list holds the PCI Express capability (`uet_regs::pci`,
//! [`PCIE_CAP`]), read-only but for Device Control; writing Device Control's "Initiate
//! Function Level Reset" bit asks for a function-level reset ([`PciConfig::write`] says so;
//! the bit itself reads 0). Then the MSI-X capability ([`MSIX_CAP`]): the table size and
//! the table's and pending bits' places in BAR0 are read-only, Message Control's Enable and
//! Function Mask are written by the host, and the function acts on them (the caller hands
//! them on, [`PciConfig::msix_control`]). Elsewhere, reads return 0 and writes do nothing. A
//! function-level reset returns the header to its reset values.
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
        c.put(STATUS, &STATUS_CAPABILITIES_LIST.to_le_bytes());
        c.put(CAPABILITIES_POINTER, &[PCIE_CAP as u8]);
        c.put(PCIE_CAP, &[CAP_ID_PCIE, MSIX_CAP as u8]);
        c.put(PCIE_CAPABILITIES, &PCIE_CAPABILITIES_VALUE.to_le_bytes());
        c.put(PCIE_DEVICE_CAPABILITIES, &PCIE_DEVCAP_FLR.to_le_bytes());
        c.put(PCIE_DEVICE_CONTROL, &PCIE_DEVCTL_RESET.to_le_bytes());
        c.allow(PCIE_DEVICE_CONTROL, &PCIE_DEVCTL_WRITABLE.to_le_bytes());
        c.put(MSIX_CAP, &[CAP_ID_MSIX, 0]);
        c.put(MSIX_MESSAGE_CONTROL, &(MSIX_VECTORS - 1).to_le_bytes());
        c.allow(MSIX_MESSAGE_CONTROL, &MSIX_CONTROL_WRITABLE.to_le_bytes());
        c.put(MSIX_TABLE, &MSIX_TABLE_OFFSET.to_le_bytes());
        c.put(MSIX_PBA, &MSIX_PBA_OFFSET.to_le_bytes());
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
    /// dropped. Returns whether the write set Device Control's "Initiate Function Level
    /// Reset": the caller resets the function (and this header, [`PciConfig::reset`]).
    #[must_use = "a write may ask for a function-level reset"]
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> bool {
        const FLR_BYTE: usize = PCIE_DEVICE_CONTROL + 1;
        let flr_bit = (PCIE_DEVCTL_INITIATE_FLR >> 8) as u8;
        let mut flr = false;
        for (i, &v) in data.iter().enumerate() {
            let Some(at) = offset
                .checked_add(i as u64)
                .and_then(|at| usize::try_from(at).ok())
            else {
                break;
            };
            if at == FLR_BYTE && v & flr_bit != 0 {
                flr = true;
            }
            if let (Some(b), Some(&m)) = (self.bytes.get_mut(at), self.writable.get(at)) {
                *b = (*b & !m) | (v & m);
            }
        }
        flr
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

    /// MSI-X Message Control's Enable and Function Mask bits as written.
    pub(crate) fn msix_control(&self) -> u16 {
        let mut b = [0; 2];
        self.read(MSIX_MESSAGE_CONTROL as u64, &mut b);
        u16::from_le_bytes(b) & MSIX_CONTROL_WRITABLE
    }

    /// Set Message Control's Enable and Function Mask bits, as the host side of the function
    /// changed them (VFIO's `SET_IRQS` enables MSI-X).
    pub(crate) fn set_msix_control(&mut self, control: u16) {
        let keep = (MSIX_VECTORS - 1) & !MSIX_CONTROL_WRITABLE;
        let value = keep | (control & MSIX_CONTROL_WRITABLE);
        self.put(MSIX_MESSAGE_CONTROL, &value.to_le_bytes());
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
        assert!(!c.write(0, &[0xFF; 4]));
        assert!(!c.write(REVISION_ID as u64, &[0xFF; 4]));
        assert_eq!(dword(&c, VENDOR_ID), ID_DWORD);
        assert_eq!(dword(&c, REVISION_ID) >> 8, CLASS_ETHERNET);
        assert_eq!(dword(&c, SUBSYSTEM_VENDOR_ID), ID_DWORD);
        assert_eq!(dword(&c, CAPABILITIES_POINTER), PCIE_CAP as u32);
        assert_eq!(
            dword(&c, STATUS - 2) >> 16,
            u32::from(STATUS_CAPABILITIES_LIST),
            "a capability list"
        );
    }

    /// The capability list, walked as a host does (PCI Local Bus Specification 3.0 §6.7):
    /// a PCI Express endpoint capability advertising Function Level Reset, read-only but for
    /// Device Control, which holds its tunable fields and never shows the FLR bit; then MSI-X.
    #[test]
    fn the_capability_list_is_pcie_with_flr_then_msix() {
        let mut c = PciConfig::default();
        let mut at = dword(&c, CAPABILITIES_POINTER) as usize & 0xFF;
        let mut seen = Vec::new();
        while at != 0 {
            assert!(at >= 0x40 && at.is_multiple_of(4), "capability at {at:#x}");
            let head = dword(&c, at);
            seen.push((at, head as u8));
            at = (head >> 8) as usize & 0xFF;
            assert!(seen.len() < 48, "the list ends");
        }
        assert_eq!(seen, [(PCIE_CAP, CAP_ID_PCIE), (MSIX_CAP, CAP_ID_MSIX)]);
        assert_eq!(
            dword(&c, PCIE_CAP) >> 16,
            u32::from(PCIE_CAPABILITIES_VALUE)
        );
        assert_ne!(dword(&c, PCIE_DEVICE_CAPABILITIES) & PCIE_DEVCAP_FLR, 0);
        assert_eq!(
            dword(&c, PCIE_DEVICE_CONTROL) & 0xFFFF,
            u32::from(PCIE_DEVCTL_RESET)
        );
        // Read-only: the capability's header, capabilities and device capabilities.
        let before: Vec<u32> = (PCIE_CAP..PCIE_CAP + PCIE_CAP_BYTES)
            .step_by(4)
            .map(|a| dword(&c, a))
            .collect();
        for a in (PCIE_CAP..PCIE_CAP + PCIE_CAP_BYTES).step_by(4) {
            if a != PCIE_DEVICE_CONTROL {
                assert!(!c.write(a as u64, &[0xFF; 4]));
            }
        }
        assert!(!c.write(CAPABILITIES_POINTER as u64, &[0x80]));
        assert!(!c.write(STATUS as u64, &[0; 2]));
        let after: Vec<u32> = (PCIE_CAP..PCIE_CAP + PCIE_CAP_BYTES)
            .step_by(4)
            .map(|a| dword(&c, a))
            .collect();
        assert_eq!(before, after);
        assert_eq!(dword(&c, CAPABILITIES_POINTER), PCIE_CAP as u32);
        // Device Control keeps what is written below bit 15; bit 15 asks for an FLR and
        // reads 0, whatever the width of the write that carries it.
        assert!(!c.write(PCIE_DEVICE_CONTROL as u64, &0x1234u16.to_le_bytes()));
        assert_eq!(dword(&c, PCIE_DEVICE_CONTROL) & 0xFFFF, 0x1234);
        assert!(c.write(
            PCIE_DEVICE_CONTROL as u64,
            &(PCIE_DEVCTL_INITIATE_FLR | 0x1234).to_le_bytes()
        ));
        assert!(c.write(PCIE_DEVICE_CONTROL as u64 + 1, &[0x80]));
        assert!(c.write(PCIE_DEVICE_CONTROL as u64 - 4, &[0, 0, 0, 0, 0x34, 0x92]));
        assert_eq!(dword(&c, PCIE_DEVICE_CONTROL) & 0xFFFF, 0x1234);
        c.reset();
        assert_eq!(
            dword(&c, PCIE_DEVICE_CONTROL) & 0xFFFF,
            u32::from(PCIE_DEVCTL_RESET)
        );
    }

    /// MSI-X (PCI Local Bus Specification 3.0 §6.8.2): the table size and the places of the
    /// table and pending bits in BAR0 are read-only; Message Control keeps Enable and
    /// Function Mask, the function's side can set them, and a reset clears them.
    #[test]
    fn the_msix_capability_names_its_table_and_keeps_two_control_bits() {
        let mut c = PciConfig::default();
        let head = dword(&c, MSIX_CAP);
        assert_eq!(head & 0xFF, u32::from(CAP_ID_MSIX));
        assert_eq!((head >> 8) & 0xFF, 0, "the last capability");
        assert_eq!(
            head >> 16,
            u32::from(MSIX_VECTORS - 1),
            "table size less one"
        );
        assert_eq!(dword(&c, MSIX_TABLE), MSIX_TABLE_OFFSET, "BIR 0");
        assert_eq!(dword(&c, MSIX_PBA), MSIX_PBA_OFFSET, "BIR 0");
        assert!(!c.write(MSIX_CAP as u64, &[0xFF; MSIX_CAP_BYTES]));
        assert_eq!(dword(&c, MSIX_TABLE), MSIX_TABLE_OFFSET);
        assert_eq!(dword(&c, MSIX_PBA), MSIX_PBA_OFFSET);
        assert_eq!(
            dword(&c, MSIX_CAP),
            head | u32::from(MSIX_CONTROL_WRITABLE) << 16
        );
        assert_eq!(c.msix_control(), MSIX_CONTROL_WRITABLE);
        c.set_msix_control(MSIX_CONTROL_ENABLE);
        assert_eq!(c.msix_control(), MSIX_CONTROL_ENABLE);
        assert_eq!(
            dword(&c, MSIX_CAP) >> 16,
            u32::from(MSIX_CONTROL_ENABLE | (MSIX_VECTORS - 1))
        );
        c.reset();
        assert_eq!(c.msix_control(), 0);
        assert_eq!(dword(&c, MSIX_CAP), head);
    }

    #[test]
    fn the_command_register_keeps_only_its_implemented_bits() {
        let mut c = PciConfig::default();
        assert_eq!(c.command(), 0);
        assert!(!c.write(COMMAND as u64, &0xFFFFu16.to_le_bytes()));
        assert_eq!(c.command(), COMMAND_WRITABLE);
        // A byte write reaches only its byte.
        assert!(!c.write(COMMAND as u64, &[0]));
        assert_eq!(c.command(), COMMAND_INTX_DISABLE);
        c.reset();
        assert_eq!(c.command(), 0);
    }

    #[test]
    fn bar0_sizes_as_a_64_bit_memory_bar_of_bar0_size() {
        let mut c = PciConfig::default();
        assert_eq!(dword(&c, BAR0), BAR0_TYPE_64BIT_MEMORY);
        assert!(!c.write(BAR0 as u64, &u32::MAX.to_le_bytes()));
        assert!(!c.write(BAR0_HIGH as u64, &u32::MAX.to_le_bytes()));
        let low = dword(&c, BAR0);
        assert_eq!(low & 0xF, BAR0_TYPE_64BIT_MEMORY);
        assert_eq!(!(low & !0xF) + 1, BAR0_SIZE, "size from the mask");
        assert_eq!(dword(&c, BAR0_HIGH), u32::MAX);
        // An address is kept to the BAR's alignment.
        assert!(!c.write(BAR0 as u64, &0xFEDC_B123u32.to_le_bytes()));
        assert_eq!(
            dword(&c, BAR0),
            (0xFEDC_B123 & !(BAR0_SIZE - 1)) | BAR0_TYPE_64BIT_MEMORY
        );
        // BAR2..5 are not implemented.
        assert!(!c.write(0x18, &[0xFF; 16]));
        assert!((0x18..0x28).step_by(4).all(|at| dword(&c, at) == 0));
    }

    #[test]
    fn accesses_past_the_header_read_zero_and_change_nothing() {
        let mut c = PciConfig::default();
        let before = c.bytes;
        assert!(!c.write(250, &[0xFF; 16]));
        assert!(!c.write(u64::MAX - 1, &[0xFF; 4]));
        assert_eq!(c.bytes, before);
        let mut b = [0xAA; 8];
        c.read(252, &mut b);
        assert_eq!(b, [0; 8]);
        c.read(u64::MAX, &mut b);
        assert_eq!(b, [0; 8]);
    }
}
