//! The function's PCI configuration header, as far as the driver and the model agree on it.
//!
//! A type-0 header (PCI Local Bus Specification 3.0, §6.1, Figure 6-1): the identity the
//! driver checks before it touches BAR0, the command bits it sets to let the function decode
//! BAR0 and master DMA (§6.2.2), and BAR0 itself, a 64-bit non-prefetchable memory BAR of
//! [`crate::BAR0_SIZE`] bytes (§6.2.5.1). The function has no capability list (status bit 4
//! clear) and no legacy interrupt pin: completions are polled. Offsets are bytes into the
//! 256-byte configuration space.

/// Bytes of configuration space (conventional PCI; no extended space).
pub const CONFIG_SPACE_SIZE: usize = 256;

/// Vendor ID, 16 bits, read-only: [`crate::PCI_VENDOR_ID`].
pub const VENDOR_ID: usize = 0x00;
/// Device ID, 16 bits, read-only: [`crate::PCI_DEVICE_ID`].
pub const DEVICE_ID: usize = 0x02;
/// Command register, 16 bits.
pub const COMMAND: usize = 0x04;
/// Status register, 16 bits, read-only here.
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
/// Capabilities pointer, 8 bits: 0 (none).
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

/// Class code of an Ethernet controller: base class 0x02 (network), subclass 0x00, interface 0.
pub const CLASS_ETHERNET: u32 = 0x02_00_00;

/// BAR0's type bits: memory space (bit 0 = 0), 64-bit (bits 2:1 = 0b10), not prefetchable.
pub const BAR0_TYPE_64BIT_MEMORY: u32 = 0b100;

/// The identity dword at [`VENDOR_ID`]: device ID above vendor ID, as a 32-bit read returns it.
pub const ID_DWORD: u32 = (crate::PCI_DEVICE_ID as u32) << 16 | crate::PCI_VENDOR_ID as u32;
