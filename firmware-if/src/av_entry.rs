//! The NIC AV entry: what the NIC's TX engine reads to turn an `fi_addr_t` into a destination.
//!
//! 64 bytes, little-endian. The table index is the entry's position, so the entry itself does
//! not carry it; [`AvWriteRecord`] pairs an entry with its index for AV_WRITE.
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0–1 | `flags` | [`entry_flags`]: valid, IPv6, absolute addressing, range, auth key, user id |
//! | 2 | `version` | UET address version of the peer |
//! | 3 | `caps` | the peer's Fabric Endpoint Capabilities |
//! | 4–5 | `pid_on_fep` | destination PIDonFEP (12 bits) |
//! | 6–7 | `ri_start` | destination start resource index |
//! | 8–9 | `ri_count` | destination resource-index count |
//! | 10–11 | `auth_key` | auth-key table slot when `AUTH_KEY` is set |
//! | 12–15 | `job_id` | JobID stamped into every request to this peer (24 bits) |
//! | 16–19 | `initiator` | the peer's Initiator ID (used to reverse-translate its packets) |
//! | 20–23 | `range_count` | for a symmetric range entry: how many consecutive peers it stands for |
//! | 24–39 | `fabric_addr` | IPv6, or IPv4 in bytes 24–27 |
//! | 40–47 | `user_id` | reported as the source of receive completions when `USER_ID` is set |
//! | 48–63 | reserved | 0 |

use crate::address::{AddressingMode, UetAddress, ADDRESS_VERSION};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bits of [`NicAvEntry::flags`].
pub mod entry_flags {
    /// The entry holds a peer; the TX engine refuses an invalid entry.
    pub const VALID: u16 = 1 << 0;
    /// `fabric_addr` is IPv6.
    pub const IPV6: u16 = 1 << 1;
    /// The peer uses absolute addressing.
    pub const ABSOLUTE: u16 = 1 << 2;
    /// The entry is a symmetric range of `range_count` peers.
    pub const RANGE: u16 = 1 << 3;
    /// `auth_key` names the auth-key slot to use.
    pub const AUTH_KEY: u16 = 1 << 4;
    /// `user_id` is reported as the source instead of the `fi_addr_t`.
    pub const USER_ID: u16 = 1 << 5;
    /// Every defined bit.
    pub const ALL: u16 = VALID | IPV6 | ABSOLUTE | RANGE | AUTH_KEY | USER_ID;
}

/// Largest JobID (24 bits on the wire).
pub const MAX_JOB_ID: u32 = 0x00FF_FFFF;

/// One entry of a NIC AV table.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct NicAvEntry {
    /// [`entry_flags`].
    pub flags: U16,
    /// Address version of the peer.
    pub version: u8,
    /// Fabric Endpoint Capabilities of the peer.
    pub caps: u8,
    /// Destination PIDonFEP.
    pub pid_on_fep: U16,
    /// Destination start resource index.
    pub ri_start: U16,
    /// Destination resource-index count.
    pub ri_count: U16,
    /// Auth-key slot.
    pub auth_key: U16,
    /// JobID for requests to this peer.
    pub job_id: U32,
    /// Initiator ID of the peer.
    pub initiator: U32,
    /// Peers in a symmetric range entry (0 for a single peer).
    pub range_count: U32,
    /// Fabric address.
    pub fabric_addr: [u8; 16],
    /// User id reported as the source.
    pub user_id: U64,
    /// Reserved, zero.
    pub reserved: [u8; 16],
}

const _: () = assert!(core::mem::size_of::<NicAvEntry>() == 64);

impl NicAvEntry {
    /// The all-zero entry: not valid.
    pub const INVALID: NicAvEntry = NicAvEntry {
        flags: U16::ZERO,
        version: 0,
        caps: 0,
        pid_on_fep: U16::ZERO,
        ri_start: U16::ZERO,
        ri_count: U16::ZERO,
        auth_key: U16::ZERO,
        job_id: U32::ZERO,
        initiator: U32::ZERO,
        range_count: U32::ZERO,
        fabric_addr: [0; 16],
        user_id: U64::ZERO,
        reserved: [0; 16],
    };

    /// A valid entry for `addr`, stamping requests with `job_id`.
    pub fn for_peer(addr: &UetAddress, job_id: u32) -> Self {
        let mut flags = entry_flags::VALID;
        let mut fa = [0u8; 16];
        match addr.fabric_addr {
            IpAddr::V4(a) => fa[..4].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => {
                flags |= entry_flags::IPV6;
                fa = a.octets();
            }
        }
        if addr.mode == AddressingMode::Absolute {
            flags |= entry_flags::ABSOLUTE;
        }
        NicAvEntry {
            flags: U16::new(flags),
            version: ADDRESS_VERSION,
            caps: addr.caps,
            pid_on_fep: U16::new(addr.pid_on_fep),
            ri_start: U16::new(addr.ri_start),
            ri_count: U16::new(addr.ri_count),
            auth_key: U16::ZERO,
            job_id: U32::new(job_id & MAX_JOB_ID),
            initiator: U32::new(addr.initiator),
            range_count: U32::ZERO,
            fabric_addr: fa,
            user_id: U64::ZERO,
            reserved: [0; 16],
        }
    }

    /// Set the user id reported as the source of receive completions.
    pub fn with_user_id(mut self, user_id: u64) -> Self {
        self.flags = U16::new(self.flags.get() | entry_flags::USER_ID);
        self.user_id = U64::new(user_id);
        self
    }

    /// Whether the entry holds a peer.
    pub fn is_valid(&self) -> bool {
        self.flags.get() & entry_flags::VALID != 0
    }

    /// The fabric address, as the flags say how to read it.
    pub fn fabric_ip(&self) -> IpAddr {
        if self.flags.get() & entry_flags::IPV6 != 0 {
            IpAddr::V6(Ipv6Addr::from(self.fabric_addr))
        } else {
            let a = &self.fabric_addr;
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        }
    }

    /// The peer address the entry was made from, for a valid entry.
    pub fn peer_address(&self) -> Option<UetAddress> {
        if !self.is_valid() {
            return None;
        }
        Some(UetAddress {
            caps: self.caps,
            mode: if self.flags.get() & entry_flags::ABSOLUTE != 0 {
                AddressingMode::Absolute
            } else {
                AddressingMode::Relative
            },
            max_msg_mtu: false,
            pid_on_fep: self.pid_on_fep.get(),
            fabric_addr: self.fabric_ip(),
            ri_start: self.ri_start.get(),
            ri_count: self.ri_count.get(),
            initiator: self.initiator.get(),
        })
    }

    /// The user id, when one is set.
    pub fn user_id(&self) -> Option<u64> {
        (self.flags.get() & entry_flags::USER_ID != 0).then(|| self.user_id.get())
    }

    /// Check what a NIC checks before accepting the entry from AV_WRITE: only defined flag
    /// bits, reserved bytes zero, JobID within 24 bits, 12-bit fields in range, IPv4 padding zero.
    pub fn check(&self) -> Result<(), &'static str> {
        let flags = self.flags.get();
        if flags & !entry_flags::ALL != 0 {
            return Err("undefined flag bits");
        }
        if self.reserved != [0; 16] {
            return Err("reserved bytes set");
        }
        if !self.is_valid() {
            return Ok(());
        }
        if self.job_id.get() > MAX_JOB_ID {
            return Err("JobID wider than 24 bits");
        }
        if self.pid_on_fep.get() > 0x0FFF || self.ri_start.get() > 0x0FFF {
            return Err("PIDonFEP or resource index wider than 12 bits");
        }
        if flags & entry_flags::IPV6 == 0 && self.fabric_addr[4..] != [0; 12] {
            return Err("bytes after the IPv4 address");
        }
        Ok(())
    }
}

/// One record of an AV_WRITE buffer: the table index and the entry to store there.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct AvWriteRecord {
    /// Table index.
    pub index: U32,
    /// Reserved, zero.
    pub reserved: U32,
    /// The entry.
    pub entry: NicAvEntry,
}

const _: () = assert!(core::mem::size_of::<AvWriteRecord>() == 72);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::caps;

    #[test]
    fn entry_round_trips_the_address() {
        let addr = UetAddress {
            caps: caps::AI_FULL,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 42,
            fabric_addr: "192.168.7.9".parse().unwrap(),
            ri_start: 1,
            ri_count: 8,
            initiator: 7,
        };
        let e = NicAvEntry::for_peer(&addr, 0x1234).with_user_id(99);
        assert!(e.check().is_ok());
        assert_eq!(e.peer_address(), Some(addr));
        assert_eq!(e.user_id(), Some(99));
        assert_eq!(e.as_bytes().len(), 64);
        let back = NicAvEntry::read_from_bytes(e.as_bytes()).unwrap();
        assert_eq!(back, e);
        assert!(!NicAvEntry::INVALID.is_valid());
    }

    #[test]
    fn check_rejects_garbage() {
        let mut e = NicAvEntry::INVALID;
        e.flags = U16::new(0x8000);
        assert!(e.check().is_err());
        let mut e = NicAvEntry::INVALID;
        e.reserved[3] = 1;
        assert!(e.check().is_err());
        let mut e = NicAvEntry::INVALID;
        e.flags = U16::new(entry_flags::VALID);
        e.job_id = U32::new(0x0100_0000);
        assert!(e.check().is_err());
    }
}
