//! The UET endpoint address: what `fi_getname` returns and `fi_av_insert` accepts.
//!
//! No byte-exact layout is public (see `shared/UET-FACTS.md`), so uet-nic defines this one.
//! It is 32 bytes, big-endian, because it travels between hosts:
//!
//! | bytes | field | notes |
//! |---|---|---|
//! | 0 | `version` | high nibble: address format version ([`ADDRESS_VERSION`]); low nibble 0 |
//! | 1 | `flags` | [`flags`] bits: which fields are valid, addressing mode, address type |
//! | 2 | `caps` | Fabric Endpoint Capabilities ([`caps`] bits) |
//! | 3 | reserved | 0 |
//! | 4–5 | `pid_on_fep` | 12 bits used |
//! | 6–7 | `ri_start` | Start Resource Index, 12 bits used |
//! | 8–9 | `ri_count` | Num Resource Indices, at most 4096 |
//! | 10–11 | reserved | 0 |
//! | 12–15 | `initiator` | Initiator ID |
//! | 16–31 | `fabric_addr` | IPv6 address, or IPv4 in bytes 16–19 with 20–31 zero |
//!
//! Parsing is strict: a wrong length, an unknown version, reserved bits or bytes set, a field
//! out of its 12-bit range, a zero fabric address, or an IPv4 address with trailing bytes are
//! all rejected, so a corrupted address never reaches an AV.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Address format version carried in the high nibble of byte 0.
pub const ADDRESS_VERSION: u8 = 1;
/// Serialized size in bytes.
pub const ADDRESS_BYTES: usize = 32;
/// Largest value of a 12-bit wire field (PIDonFEP, resource index).
pub const MAX_12BIT: u16 = 0x0FFF;

/// Flag bits of byte 1 (from the UEC reference provider's `uet_addr.h`).
pub mod flags {
    /// `caps` is valid.
    pub const CAPS_VALID: u8 = 1 << 0;
    /// `fabric_addr` is valid.
    pub const FABRIC_ADDR_VALID: u8 = 1 << 1;
    /// `pid_on_fep` is valid.
    pub const PID_ON_FEP_VALID: u8 = 1 << 2;
    /// `ri_start` and `ri_count` are valid.
    pub const RESOURCE_INDEX_VALID: u8 = 1 << 3;
    /// `initiator` is valid.
    pub const INITIATOR_VALID: u8 = 1 << 4;
    /// Absolute addressing (JobID only authorises); clear: relative (JobID scopes PIDonFEP).
    pub const ABSOLUTE_ADDRESSING: u8 = 1 << 5;
    /// The fabric address is IPv6; clear: IPv4.
    pub const IPV6: u8 = 1 << 6;
    /// Messages to this endpoint are limited to one MTU.
    pub const MAX_MSG_MTU: u8 = 1 << 7;
}

/// Fabric Endpoint Capabilities bits of byte 2.
pub mod caps {
    /// AI Base profile.
    pub const AI_BASE: u8 = 1 << 0;
    /// AI Full profile.
    pub const AI_FULL: u8 = 1 << 1;
    /// HPC profile.
    pub const HPC: u8 = 1 << 2;
    /// Optimized non-matching SES header.
    pub const OPTIMIZED_NON_MATCHING: u8 = 1 << 7;
    /// Every defined bit.
    pub const ALL: u8 = AI_BASE | AI_FULL | HPC | OPTIMIZED_NON_MATCHING;
}

/// How the target interprets JobID and PIDonFEP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressingMode {
    /// JobID scopes PIDonFEP (the default).
    Relative,
    /// JobID only authorises.
    Absolute,
}

/// A UET endpoint address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UetAddress {
    /// Fabric Endpoint Capabilities ([`caps`]).
    pub caps: u8,
    /// Addressing mode.
    pub mode: AddressingMode,
    /// Messages limited to one MTU.
    pub max_msg_mtu: bool,
    /// PIDonFEP (12 bits).
    pub pid_on_fep: u16,
    /// Fabric Address of the FEP.
    pub fabric_addr: IpAddr,
    /// Start Resource Index (12 bits).
    pub ri_start: u16,
    /// Num Resource Indices.
    pub ri_count: u16,
    /// Initiator ID.
    pub initiator: u32,
}

/// Why a serialized address was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// The buffer is not [`ADDRESS_BYTES`] long.
    #[error("UET address must be {ADDRESS_BYTES} bytes, got {0}")]
    Length(usize),
    /// Unknown format version.
    #[error("unsupported UET address version {0}")]
    Version(u8),
    /// A required validity flag is clear.
    #[error("UET address lacks valid {0}")]
    MissingField(&'static str),
    /// Reserved bits or bytes are set.
    #[error("UET address has reserved {0} set")]
    Reserved(&'static str),
    /// A field is out of range.
    #[error("UET address field {field} out of range: {value}")]
    Range {
        /// Field name.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// The fabric address is unspecified, multicast or broadcast.
    #[error("UET address has an unusable fabric address {0}")]
    FabricAddr(IpAddr),
}

impl UetAddress {
    /// Check the field ranges every valid address satisfies.
    pub fn validate(&self) -> Result<(), AddressError> {
        if self.pid_on_fep > MAX_12BIT {
            return Err(AddressError::Range {
                field: "pid_on_fep",
                value: self.pid_on_fep.into(),
            });
        }
        if self.ri_start > MAX_12BIT {
            return Err(AddressError::Range {
                field: "ri_start",
                value: self.ri_start.into(),
            });
        }
        if self.ri_count == 0 || u32::from(self.ri_start) + u32::from(self.ri_count) > 4096 {
            return Err(AddressError::Range {
                field: "ri_count",
                value: self.ri_count.into(),
            });
        }
        if self.caps & !caps::ALL != 0 {
            return Err(AddressError::Reserved("capability bits"));
        }
        let v4_unusable = |a: Ipv4Addr| a.is_unspecified() || a.is_multicast() || a.is_broadcast();
        let unusable = match self.fabric_addr {
            IpAddr::V4(a) => v4_unusable(a),
            // An IPv4-mapped address (::ffff:a.b.c.d) reaches the IPv4 address it spells.
            IpAddr::V6(a) => {
                a.is_unspecified()
                    || a.is_multicast()
                    || a.to_ipv4_mapped().is_some_and(v4_unusable)
            }
        };
        if unusable {
            return Err(AddressError::FabricAddr(self.fabric_addr));
        }
        Ok(())
    }

    /// Member `m` of the symmetric set whose member 0 is `self`, with `svc` services per node
    /// (`fi_av_insertsym`; the rule of `uet_fwif::av_entry`'s symmetric ranges): node
    /// `m / svc` adds to the fabric address, service `m % svc` to PIDonFEP and initiator.
    /// `None` when `svc` is 0 or the member is not a valid address.
    pub fn symmetric_member(&self, svc: u32, m: u32) -> Option<UetAddress> {
        if svc == 0 {
            return None;
        }
        let (node, service) = (m / svc, m % svc);
        let fabric_addr = match self.fabric_addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a).checked_add(node)?)),
            IpAddr::V6(a) => {
                IpAddr::V6(Ipv6Addr::from(u128::from(a).checked_add(u128::from(node))?))
            }
        };
        let member = UetAddress {
            fabric_addr,
            pid_on_fep: self.pid_on_fep.checked_add(u16::try_from(service).ok()?)?,
            initiator: self.initiator.checked_add(service)?,
            ..*self
        };
        member.validate().ok()?;
        Some(member)
    }

    /// Serialize; fails only when [`UetAddress::validate`] does.
    pub fn to_bytes(&self) -> Result<[u8; ADDRESS_BYTES], AddressError> {
        self.validate()?;
        let mut b = [0u8; ADDRESS_BYTES];
        b[0] = ADDRESS_VERSION << 4;
        let mut fl = flags::CAPS_VALID
            | flags::FABRIC_ADDR_VALID
            | flags::PID_ON_FEP_VALID
            | flags::RESOURCE_INDEX_VALID
            | flags::INITIATOR_VALID;
        if self.mode == AddressingMode::Absolute {
            fl |= flags::ABSOLUTE_ADDRESSING;
        }
        if self.max_msg_mtu {
            fl |= flags::MAX_MSG_MTU;
        }
        match self.fabric_addr {
            IpAddr::V4(a) => b[16..20].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => {
                fl |= flags::IPV6;
                b[16..32].copy_from_slice(&a.octets());
            }
        }
        b[1] = fl;
        b[2] = self.caps;
        b[4..6].copy_from_slice(&self.pid_on_fep.to_be_bytes());
        b[6..8].copy_from_slice(&self.ri_start.to_be_bytes());
        b[8..10].copy_from_slice(&self.ri_count.to_be_bytes());
        b[12..16].copy_from_slice(&self.initiator.to_be_bytes());
        Ok(b)
    }

    /// Whether `b` is a well-formed address, checked on the raw bytes without building one:
    /// the AV's insert path stores addresses as bytes and only needs this answer. Exactly the
    /// addresses [`UetAddress::from_bytes`] accepts pass.
    #[inline]
    pub fn bytes_are_valid(b: &[u8; ADDRESS_BYTES]) -> bool {
        const REQUIRED: u8 = flags::CAPS_VALID
            | flags::FABRIC_ADDR_VALID
            | flags::PID_ON_FEP_VALID
            | flags::RESOURCE_INDEX_VALID
            | flags::INITIATOR_VALID;
        let fl = b[1];
        let pid = u16::from_be_bytes([b[4], b[5]]);
        let ri_start = u16::from_be_bytes([b[6], b[7]]);
        let ri_count = u16::from_be_bytes([b[8], b[9]]);
        let header_ok = b[0] == ADDRESS_VERSION << 4
            && fl & REQUIRED == REQUIRED
            && b[3] | b[10] | b[11] == 0
            && b[2] & !caps::ALL == 0
            && pid <= MAX_12BIT
            && ri_start <= MAX_12BIT
            && ri_count != 0
            && u32::from(ri_start) + u32::from(ri_count) <= 4096;
        // The fabric address as one 128-bit word: whole-word compares instead of byte loops.
        let mut fa = [0u8; 16];
        fa.copy_from_slice(&b[16..32]);
        let fa = u128::from_be_bytes(fa);
        // An IPv4 address that reaches a single node: not 0.0.0.0, broadcast or multicast.
        let v4_ok = |v4: u32| v4 != 0 && v4 != u32::MAX && v4 >> 28 != 0xE;
        let fa_ok = if fl & flags::IPV6 != 0 {
            // An IPv4-mapped address (::ffff:a.b.c.d) is judged as the IPv4 address it spells,
            // as `validate` judges it.
            fa != 0 && (fa >> 120) != 0xFF && (fa >> 32 != 0xFFFF || v4_ok(fa as u32))
        } else {
            fa << 32 == 0 && v4_ok((fa >> 96) as u32)
        };
        header_ok && fa_ok
    }

    /// Parse a serialized address, rejecting anything malformed.
    pub fn from_bytes(b: &[u8]) -> Result<Self, AddressError> {
        let b: &[u8; ADDRESS_BYTES] = b.try_into().map_err(|_| AddressError::Length(b.len()))?;
        if Self::bytes_are_valid(b) {
            return Ok(Self::from_valid_bytes(b));
        }
        Self::parse_slow(b)
    }

    /// Build from bytes already known to be valid.
    fn from_valid_bytes(b: &[u8; ADDRESS_BYTES]) -> Self {
        let fl = b[1];
        let fabric_addr = if fl & flags::IPV6 != 0 {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[16..32]);
            IpAddr::V6(Ipv6Addr::from(o))
        } else {
            IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19]))
        };
        UetAddress {
            caps: b[2],
            mode: if fl & flags::ABSOLUTE_ADDRESSING != 0 {
                AddressingMode::Absolute
            } else {
                AddressingMode::Relative
            },
            max_msg_mtu: fl & flags::MAX_MSG_MTU != 0,
            pid_on_fep: u16::from_be_bytes([b[4], b[5]]),
            ri_start: u16::from_be_bytes([b[6], b[7]]),
            ri_count: u16::from_be_bytes([b[8], b[9]]),
            initiator: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            fabric_addr,
        }
    }

    /// The field-by-field parse that names what is wrong.
    fn parse_slow(b: &[u8; ADDRESS_BYTES]) -> Result<Self, AddressError> {
        if b[0] >> 4 != ADDRESS_VERSION {
            return Err(AddressError::Version(b[0] >> 4));
        }
        if b[0] & 0x0F != 0 {
            return Err(AddressError::Reserved("version low nibble"));
        }
        let fl = b[1];
        for (bit, name) in [
            (flags::CAPS_VALID, "capabilities"),
            (flags::FABRIC_ADDR_VALID, "fabric address"),
            (flags::PID_ON_FEP_VALID, "PIDonFEP"),
            (flags::RESOURCE_INDEX_VALID, "resource indices"),
            (flags::INITIATOR_VALID, "initiator id"),
        ] {
            if fl & bit == 0 {
                return Err(AddressError::MissingField(name));
            }
        }
        if b[3] != 0 || b[10] != 0 || b[11] != 0 {
            return Err(AddressError::Reserved("bytes"));
        }
        let fabric_addr = if fl & flags::IPV6 != 0 {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[16..32]);
            IpAddr::V6(Ipv6Addr::from(o))
        } else {
            if b[20..32].iter().any(|&x| x != 0) {
                return Err(AddressError::Reserved("bytes after the IPv4 address"));
            }
            IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19]))
        };
        let a = UetAddress {
            caps: b[2],
            mode: if fl & flags::ABSOLUTE_ADDRESSING != 0 {
                AddressingMode::Absolute
            } else {
                AddressingMode::Relative
            },
            max_msg_mtu: fl & flags::MAX_MSG_MTU != 0,
            pid_on_fep: u16::from_be_bytes([b[4], b[5]]),
            ri_start: u16::from_be_bytes([b[6], b[7]]),
            ri_count: u16::from_be_bytes([b[8], b[9]]),
            initiator: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            fabric_addr,
        };
        a.validate()?;
        Ok(a)
    }
}

impl core::fmt::Display for UetAddress {
    /// `uet://<fabric address>/<pid_on_fep>?ri=<start>+<count>&init=<id>&caps=<hex>[&abs][&mtu]`:
    /// the string form `fi_av_straddr` prints. IPv6 addresses are bracketed.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.fabric_addr {
            IpAddr::V4(a) => write!(f, "uet://{a}")?,
            IpAddr::V6(a) => write!(f, "uet://[{a}]")?,
        }
        write!(
            f,
            "/{}?ri={}+{}&init={:#x}&caps={:#04x}",
            self.pid_on_fep, self.ri_start, self.ri_count, self.initiator, self.caps
        )?;
        if self.mode == AddressingMode::Absolute {
            f.write_str("&abs")?;
        }
        if self.max_msg_mtu {
            f.write_str("&mtu")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> UetAddress {
        UetAddress {
            caps: caps::AI_BASE | caps::HPC,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 0x123,
            fabric_addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)),
            ri_start: 16,
            ri_count: 16,
            initiator: 0xdead_beef,
        }
    }

    #[test]
    fn round_trip_v4_and_v6() {
        let a = sample();
        let b = a.to_bytes().unwrap();
        assert_eq!(b[0], 0x10);
        assert_eq!(&b[4..6], &[0x01, 0x23]);
        assert_eq!(UetAddress::from_bytes(&b).unwrap(), a);
        let v6 = UetAddress {
            fabric_addr: "fd00::1".parse().unwrap(),
            mode: AddressingMode::Absolute,
            ..a
        };
        assert_eq!(UetAddress::from_bytes(&v6.to_bytes().unwrap()).unwrap(), v6);
    }

    #[test]
    fn a_fabric_address_that_reaches_no_single_node_is_refused_in_either_family() {
        for bad in [
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "ff02::1",
            "::ffff:0.0.0.0",
            "::ffff:224.0.0.1",
            "::ffff:255.255.255.255",
        ] {
            let a = UetAddress {
                fabric_addr: bad.parse().unwrap(),
                ..sample()
            };
            assert_eq!(
                a.validate(),
                Err(AddressError::FabricAddr(a.fabric_addr)),
                "{bad}"
            );
        }
        for good in ["10.0.0.1", "fd00::1", "::ffff:10.0.0.1"] {
            let a = UetAddress {
                fabric_addr: good.parse().unwrap(),
                ..sample()
            };
            assert_eq!(a.validate(), Ok(()), "{good}");
        }
    }

    #[test]
    fn rejects_malformed() {
        let good = sample().to_bytes().unwrap();
        assert_eq!(
            UetAddress::from_bytes(&good[..31]),
            Err(AddressError::Length(31))
        );
        let mut b = good;
        b[0] = 0x20;
        assert_eq!(UetAddress::from_bytes(&b), Err(AddressError::Version(2)));
        let mut b = good;
        b[1] &= !flags::PID_ON_FEP_VALID;
        assert!(matches!(
            UetAddress::from_bytes(&b),
            Err(AddressError::MissingField(_))
        ));
        let mut b = good;
        b[4] = 0x10; // PIDonFEP 0x1023 > 12 bits
        assert!(matches!(
            UetAddress::from_bytes(&b),
            Err(AddressError::Range { .. })
        ));
        let mut b = good;
        b[25] = 1; // garbage after an IPv4 address
        assert!(matches!(
            UetAddress::from_bytes(&b),
            Err(AddressError::Reserved(_))
        ));
        let mut b = good;
        b[16..20].copy_from_slice(&[0, 0, 0, 0]);
        assert!(matches!(
            UetAddress::from_bytes(&b),
            Err(AddressError::FabricAddr(_))
        ));
    }

    #[test]
    fn fast_check_agrees_with_the_full_parse() {
        // Flip every bit of a v4 and a v6 address, and try every value of the bytes that
        // carry structure: the raw check and the parse must agree on every one.
        let v4 = sample().to_bytes().unwrap();
        let v6 = UetAddress {
            fabric_addr: "fd00::7".parse().unwrap(),
            ..sample()
        }
        .to_bytes()
        .unwrap();
        // IPv4-mapped: the bytes of the IPv4 address it spells decide, as for IPv4.
        let mapped = UetAddress {
            fabric_addr: "::ffff:10.0.0.1".parse().unwrap(),
            ..sample()
        }
        .to_bytes()
        .unwrap();
        for base in [v4, v6, mapped] {
            let mut cases = vec![base];
            for bit in 0..256 {
                let mut b = base;
                b[bit / 8] ^= 1 << (bit % 8);
                cases.push(b);
            }
            for at in [0usize, 1, 2, 4, 6, 8, 16, 19, 20, 27, 28, 31] {
                for v in 0..=255u8 {
                    let mut b = base;
                    b[at] = v;
                    cases.push(b);
                }
            }
            // The last 32 bits all zero and all ones (0.0.0.0 and broadcast when mapped).
            for word in [[0u8; 4], [0xFF; 4]] {
                let mut b = base;
                b[28..32].copy_from_slice(&word);
                cases.push(b);
            }
            for b in cases {
                let parsed = UetAddress::parse_slow(&b);
                assert_eq!(UetAddress::bytes_are_valid(&b), parsed.is_ok(), "{b:02x?}");
                if let Ok(a) = parsed {
                    assert_eq!(UetAddress::from_bytes(&b).unwrap(), a);
                    assert_eq!(a.to_bytes().unwrap(), b);
                }
            }
        }
    }
}
