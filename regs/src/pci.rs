//! The function's PCI configuration header, as far as the driver and the model agree on it.
//!
//! A type-0 header (PCI Local Bus Specification 3.0, §6.1, Figure 6-1): the identity the
//! driver checks before it touches BAR0, the command bits it sets to let the function decode
//! BAR0 and master DMA (§6.2.2), and BAR0 itself, a 64-bit non-prefetchable memory BAR of
//! [`crate::BAR0_SIZE`] bytes (§6.2.5.1). Its capability list (status bit 4 set, §6.7) holds
//! two capabilities:
//!
//! * the PCI Express capability of an endpoint (PCI Express Base Specification 4.0, §7.5.3),
//!   whose Device Capabilities advertise Function Level Reset (§6.6.2): a host (vfio-pci's
//!   device reset) resets the function by setting Device Control's "Initiate Function Level
//!   Reset";
//! * the MSI-X capability (PCI Local Bus Specification 3.0, §6.8.2) with [`MSIX_VECTORS`]
//!   vectors, its table and pending-bit array in BAR0 ([`MSIX_TABLE_OFFSET`],
//!   [`MSIX_PBA_OFFSET`]). The function raises a vector for a completion ring armed with
//!   `CQ_ARM` (since interface 1.12); it has no legacy interrupt pin and no MSI capability.
//!
//! Offsets are bytes into the 256-byte configuration space, or into BAR0 for the MSI-X
//! table and pending bits.

/// Bytes of configuration space (conventional PCI; no extended space).
pub const CONFIG_SPACE_SIZE: usize = 256;

/// Vendor ID, 16 bits, read-only: [`crate::PCI_VENDOR_ID`].
pub const VENDOR_ID: usize = 0x00;
/// Device ID, 16 bits, read-only: [`crate::PCI_DEVICE_ID`].
pub const DEVICE_ID: usize = 0x02;
/// Command register, 16 bits.
pub const COMMAND: usize = 0x04;
/// Status register, 16 bits, read-only here: [`STATUS_CAPABILITIES_LIST`].
pub const STATUS: usize = 0x06;
/// Revision ID, 8 bits: 0 (the host interface version is BAR0's `REVISION`).
pub const REVISION_ID: usize = 0x08;
/// Class code, 24 bits from the programming interface byte: [`CLASS_ETHERNET`].
pub const CLASS_CODE: usize = 0x09;
/// Header type, 8 bits: 0 (a single-function endpoint).
pub const HEADER_TYPE: usize = 0x0E;
/// BAR0, low dword: the address bits above the BAR's size, and the type bits below.
pub const BAR0: usize = 0x10;
/// BAR0, high dword (BAR1's slot, taken by the 64-bit BAR0).
pub const BAR0_HIGH: usize = 0x14;
/// Subsystem vendor ID, 16 bits: the vendor ID.
pub const SUBSYSTEM_VENDOR_ID: usize = 0x2C;
/// Subsystem ID, 16 bits: the device ID.
pub const SUBSYSTEM_ID: usize = 0x2E;
/// Capabilities pointer, 8 bits, read-only: [`PCIE_CAP`], the first capability.
pub const CAPABILITIES_POINTER: usize = 0x34;
/// Interrupt line, 8 bits, read-write scratch for the operating system.
pub const INTERRUPT_LINE: usize = 0x3C;

/// Command bit 1: the function responds to accesses of its memory BAR.
pub const COMMAND_MEMORY_SPACE: u16 = 1 << 1;
/// Command bit 2: the function may master DMA.
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// Command bit 10: legacy interrupts disabled.
pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
/// The command bits the function implements; the others read 0.
pub const COMMAND_WRITABLE: u16 = COMMAND_MEMORY_SPACE | COMMAND_BUS_MASTER | COMMAND_INTX_DISABLE;

/// Status bit 4: the function has a capability list at [`CAPABILITIES_POINTER`].
pub const STATUS_CAPABILITIES_LIST: u16 = 1 << 4;

/// The PCI Express capability structure (PCI Express Base Specification 4.0, §7.5.3): a
/// version-2 structure of 0x3C bytes, read-only but for [`PCIE_DEVICE_CONTROL`]. Its first
/// byte is the capability ID [`CAP_ID_PCIE`], its second the next capability's offset,
/// [`MSIX_CAP`].
pub const PCIE_CAP: usize = 0x40;
/// Bytes of the PCI Express capability structure (version 2, an endpoint).
pub const PCIE_CAP_BYTES: usize = 0x3C;
/// Capability ID of the PCI Express capability.
pub const CAP_ID_PCIE: u8 = 0x10;
/// PCI Express Capabilities register, 16 bits: [`PCIE_CAPABILITIES_VALUE`].
pub const PCIE_CAPABILITIES: usize = PCIE_CAP + 0x02;
/// Capability version 2 (bits 3:0), device/port type 0: a PCI Express endpoint (bits 7:4).
pub const PCIE_CAPABILITIES_VALUE: u16 = 0x0002;
/// Device Capabilities register, 32 bits: [`PCIE_DEVCAP_FLR`]; max payload 128 bytes.
pub const PCIE_DEVICE_CAPABILITIES: usize = PCIE_CAP + 0x04;
/// Device Capabilities bit 28: Function Level Reset capability.
pub const PCIE_DEVCAP_FLR: u32 = 1 << 28;
/// Device Control register, 16 bits: [`PCIE_DEVCTL_INITIATE_FLR`], and below it the
/// fields a host tunes (payload sizes, relaxed ordering, no snoop...), which read back as
/// written and do not change what the function does; reset value [`PCIE_DEVCTL_RESET`].
pub const PCIE_DEVICE_CONTROL: usize = PCIE_CAP + 0x08;
/// Device Control at reset (§7.5.3.4): Enable Relaxed Ordering (bit 4) and Enable No Snoop
/// (bit 11) set, Max_Read_Request_Size 512 bytes (bits 14:12 = 010b), the rest 0.
pub const PCIE_DEVCTL_RESET: u16 = 0x2810;
/// The Device Control bits that hold what is written (all but bit 15).
pub const PCIE_DEVCTL_WRITABLE: u16 = 0x7FFF;
/// Device Control bit 15: writing 1 starts a Function Level Reset: the function returns to
/// its reset state, configuration header included (command register cleared: BAR0 stops
/// decoding, DMA stops). The bit always reads 0.
pub const PCIE_DEVCTL_INITIATE_FLR: u16 = 1 << 15;

/// The MSI-X capability structure (PCI Local Bus Specification 3.0, §6.8.2), the last of
/// the list (next pointer 0): 12 bytes, read-only but for two bits of
/// [`MSIX_MESSAGE_CONTROL`].
pub const MSIX_CAP: usize = 0x80;
/// Bytes of the MSI-X capability structure.
pub const MSIX_CAP_BYTES: usize = 12;
/// Capability ID of MSI-X.
pub const CAP_ID_MSIX: u8 = 0x11;
/// Message Control, 16 bits: the table size less one (bits 10:0, read-only:
/// [`MSIX_VECTORS`] − 1), [`MSIX_CONTROL_FUNCTION_MASK`] and [`MSIX_CONTROL_ENABLE`]; 0 at
/// reset but for the table size.
pub const MSIX_MESSAGE_CONTROL: usize = MSIX_CAP + 0x02;
/// Message Control bit 14, Function Mask: while set, every vector is masked (a raised vector
/// sets its pending bit and is sent when the mask clears).
pub const MSIX_CONTROL_FUNCTION_MASK: u16 = 1 << 14;
/// Message Control bit 15, MSI-X Enable: while clear the function sends no MSI-X message
/// and sets no pending bit (it has no other interrupt to fall back on).
pub const MSIX_CONTROL_ENABLE: u16 = 1 << 15;
/// The Message Control bits a host writes.
pub const MSIX_CONTROL_WRITABLE: u16 = MSIX_CONTROL_FUNCTION_MASK | MSIX_CONTROL_ENABLE;
/// Table Offset/Table BIR, 32 bits, read-only: [`MSIX_TABLE_OFFSET`] in BAR0 (BIR 0).
pub const MSIX_TABLE: usize = MSIX_CAP + 0x04;
/// PBA Offset/PBA BIR, 32 bits, read-only: [`MSIX_PBA_OFFSET`] in BAR0 (BIR 0).
pub const MSIX_PBA: usize = MSIX_CAP + 0x08;

/// Vectors of the MSI-X table. A driver chooses the vector of each completion ring it arms
/// (`CQ_ARM`); none is tied to a source.
pub const MSIX_VECTORS: u16 = 64;
/// BAR0 offset of the MSI-X table: [`MSIX_VECTORS`] entries of [`MSIX_ENTRY_BYTES`], in a
/// 4 KiB page of its own.
pub const MSIX_TABLE_OFFSET: u32 = 0x2000;
/// BAR0 offset of the MSI-X pending-bit array: one bit per vector, in 64-bit words, in a
/// 4 KiB page of its own; read-only.
pub const MSIX_PBA_OFFSET: u32 = 0x3000;
/// Bytes of one MSI-X table entry.
pub const MSIX_ENTRY_BYTES: u32 = 16;
/// Table entry: Message Address, low dword (bits 1:0 read 0).
pub const MSIX_ENTRY_ADDR_LO: u32 = 0x0;
/// Table entry: Message Upper Address.
pub const MSIX_ENTRY_ADDR_HI: u32 = 0x4;
/// Table entry: Message Data.
pub const MSIX_ENTRY_DATA: u32 = 0x8;
/// Table entry: Vector Control; bit 0 is [`MSIX_VECTOR_MASKED`], the rest read 0.
pub const MSIX_ENTRY_VECTOR_CONTROL: u32 = 0xC;
/// Vector Control bit 0, Mask Bit: set at reset. While set, a raised vector sets its pending
/// bit, and clearing it sends the message.
pub const MSIX_VECTOR_MASKED: u32 = 1;

/// Class code of an Ethernet controller: base class 0x02 (network), subclass 0x00, interface 0.
pub const CLASS_ETHERNET: u32 = 0x02_00_00;

/// BAR0's type bits: memory space (bit 0 = 0), 64-bit (bits 2:1 = 0b10), not prefetchable.
pub const BAR0_TYPE_64BIT_MEMORY: u32 = 0b100;

/// The identity dword at [`VENDOR_ID`]: device ID above vendor ID, as a 32-bit read returns it.
pub const ID_DWORD: u32 = (crate::PCI_DEVICE_ID as u32) << 16 | crate::PCI_VENDOR_ID as u32;

// The table and the pending bits each fit their page of BAR0, above the registers.
const _: () = assert!(MSIX_TABLE_OFFSET >= crate::REGISTERS_SIZE);
const _: () =
    assert!(MSIX_TABLE_OFFSET + MSIX_VECTORS as u32 * MSIX_ENTRY_BYTES <= MSIX_PBA_OFFSET);
const _: () = assert!(MSIX_PBA_OFFSET + (MSIX_VECTORS as u32).div_ceil(64) * 8 <= crate::BAR0_SIZE);
const _: () = assert!(MSIX_CAP >= PCIE_CAP + PCIE_CAP_BYTES);
