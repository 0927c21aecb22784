//! IDENTIFY data: what the firmware reports that registers do not hold.
//!
//! Limits and profiles are in the capability registers (`uet-regs`); IDENTIFY adds the NIC's
//! own fabric address, MAC, serial number and model name. 128 bytes, little-endian.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bit of [`IdentifyData::addr_flags`]: the fabric address is IPv6.
pub const IDENTIFY_FA_IPV6: u8 = 1;

/// The IDENTIFY data page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct IdentifyData {
    /// PCI vendor ID (as in the `ID` register).
    pub vendor_id: U16,
    /// PCI device ID.
    pub device_id: U16,
    /// Firmware version (as in `FW_VERSION`).
    pub fw_version: U32,
    /// [`IDENTIFY_FA_IPV6`].
    pub addr_flags: u8,
    /// Reserved.
    pub reserved0: [u8; 7],
    /// The NIC's Fabric Address: IPv6, or IPv4 in the first 4 bytes.
    pub fabric_addr: [u8; 16],
    /// Station MAC address.
    pub mac: [u8; 6],
    /// Reserved.
    pub reserved1: [u8; 2],
    /// Port speed in Mb/s.
    pub port_speed_mbps: U32,
    /// Reserved.
    pub reserved2: [u8; 4],
    /// Serial number, NUL-padded ASCII.
    pub serial: [u8; 16],
    /// Model name, NUL-padded ASCII.
    pub model: [u8; 32],
    /// Reserved.
    pub reserved3: [u8; 32],
}

const _: () = assert!(core::mem::size_of::<IdentifyData>() == 128);

impl IdentifyData {
    /// The NIC's fabric address.
    pub fn fabric_ip(&self) -> IpAddr {
        if self.addr_flags & IDENTIFY_FA_IPV6 != 0 {
            IpAddr::V6(Ipv6Addr::from(self.fabric_addr))
        } else {
            let a = &self.fabric_addr;
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        }
    }

    /// Set the fabric address.
    pub fn set_fabric_ip(&mut self, ip: IpAddr) {
        self.fabric_addr = [0; 16];
        match ip {
            IpAddr::V4(a) => {
                self.addr_flags &= !IDENTIFY_FA_IPV6;
                self.fabric_addr[..4].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                self.addr_flags |= IDENTIFY_FA_IPV6;
                self.fabric_addr = a.octets();
            }
        }
    }

    /// The model name as text.
    pub fn model_str(&self) -> String {
        ascii_field(&self.model)
    }

    /// The serial number as text.
    pub fn serial_str(&self) -> String {
        ascii_field(&self.serial)
    }
}

/// Copy `s` into a NUL-padded ASCII field, truncating.
pub fn set_ascii_field(field: &mut [u8], s: &str) {
    field.fill(0);
    for (d, c) in field.iter_mut().zip(s.bytes().filter(u8::is_ascii)) {
        *d = c;
    }
}

fn ascii_field(b: &[u8]) -> String {
    b.iter()
        .take_while(|&&c| c != 0)
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                '?'
            }
        })
        .collect()
}
