//! The NIC AV entry: what the NIC's TX engine reads to turn an `fi_addr_t` into a destination.
//!
//! 64 bytes, little-endian. The table index is the entry's position, so the entry itself does
//! not carry it; [`AvWriteRecord`] pairs an entry with its index for AV_WRITE.
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0–1 | `flags` | [`entry_flags`]: valid, IPv6, absolute addressing, range, auth key, user id, messages of one MTU |
//! | 2 | `version` | UET address version of the peer |
//! | 3 | `caps` | the peer's Fabric Endpoint Capabilities |
//! | 4–5 | `pid_on_fep` | destination PIDonFEP (12 bits) |
//! | 6–7 | `ri_start` | destination start resource index |
//! | 8–9 | `ri_count` | destination resource-index count |
//! | 10–11 | `auth_key` | auth-key table slot when `AUTH_KEY` is set |
//! | 12–15 | `job_id` | JobID stamped into every request to this peer (24 bits) |
//! | 16–19 | `initiator` | the peer's Initiator ID (used to reverse-translate its packets) |
//! | 20–23 | `range_count` | range entry: how many consecutive table indices it covers |
//! | 24–39 | `fabric_addr` | IPv6, or IPv4 in bytes 24–27 |
//! | 40–47 | `user_id` | reported as the source of receive completions when `USER_ID` is set |
//! | 48–51 | `range_svc` | range entry: services (endpoints) per node of the symmetric set |
//! | 52–55 | `range_offset` | range entry: the set member at the range's first index |
//! | 56–59 | `range_first` | range entry: the table index where the range starts |
//! | 60–63 | reserved | 0 |
//!
//! ## Symmetric ranges
//!
//! `fi_av_insertsym` (and `FI_SYMMETRIC` AVs) insert `nodecnt × svccnt` peers whose addresses
//! follow a rule; the NIC stores such a run of table indices as one *range entry* and computes
//! each member when it translates, so a million symmetric peers cost one entry. The set is
//! described by its member 0 (the entry's address fields: fabric address, PIDonFEP, initiator,
//! resource indices, JobID) and `range_svc`; member `m` is node `m / range_svc`, service
//! `m % range_svc`, and has
//!
//! * fabric address = member 0's + node (as an integer: IPv4 in 32 bits, IPv6 in 128),
//! * PIDonFEP = member 0's + service, initiator = member 0's + service,
//! * every other field as member 0.
//!
//! A member that would not be a valid address (`UetAddress::symmetric_member`, the rule the
//! host's mirror applies: a fabric address that is multicast, broadcast, unspecified, or an
//! IPv4-mapped one of those) does not exist: its index translates as an invalid entry
//! (`AddrNotAvail` at send) and reads back invalid. AV_WRITE refuses a range whose last
//! member, or first member of the widest service, is no such address.
//!
//! A range entry covers table indices `range_first .. range_first + range_count`; index
//! `range_first + i` holds member `range_offset + i` ([`NicAvEntry::range_member`]). AV_WRITE
//! takes a range entry as one record at index `range_first`. AV_INVALIDATE of an index inside
//! a range removes that one member (the NIC remembers the hole; a later single entry written
//! there fills it) and the range disappears with its last member. AV_READ returns, for every
//! index, the entry the TX engine would use: a range member comes back expanded, with its
//! range fields, so readers can tell ranges apart.

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
    /// The entry is a symmetric range covering `range_count` table indices (module docs).
    pub const RANGE: u16 = 1 << 3;
    /// `auth_key` names the auth-key slot to use.
    pub const AUTH_KEY: u16 = 1 << 4;
    /// `user_id` is reported as the source instead of the `fi_addr_t`.
    pub const USER_ID: u16 = 1 << 5;
    /// The peer takes messages of at most one MTU (its address's `MAX_MSG_MTU` flag, UET
    /// address byte 1 bit 7): the TX engine refuses a SEND, TAGGED_SEND or WRITE longer than
    /// the MTU to it with `LocalStatus::MsgTooLong` and sends nothing (since interface 1.10;
    /// an older NIC refuses an entry with this bit as it does any undefined bit).
    pub const MAX_MSG_MTU: u16 = 1 << 6;
    /// Every bit defined before interface 1.10: what a driver may set on an older NIC.
    pub const ALL_BEFORE_MAX_MSG_MTU: u16 = VALID | IPV6 | ABSOLUTE | RANGE | AUTH_KEY | USER_ID;
    /// Every defined bit.
    pub const ALL: u16 = ALL_BEFORE_MAX_MSG_MTU | MAX_MSG_MTU;
    /// The bits a peer's address implies, which
    /// [`NicAvEntry::for_valid_peer_bytes`](super::NicAvEntry::for_valid_peer_bytes) (and the
    /// NIC's AV_WRITE_PEERS) may set.
    pub const FROM_ADDRESS: u16 = VALID | IPV6 | ABSOLUTE | MAX_MSG_MTU;

    /// The bits a NIC of interface 1.`interface_minor` defines, for the interfaces a driver
    /// drives (1.7 and later, [`uet_regs::since::PEER_GROUPS`]): every bit from 1.10
    /// ([`uet_regs::since::AV_ENTRY_MAX_MSG_MTU`]), every bit but [`MAX_MSG_MTU`] before. A
    /// driver writes entries within them; the NIC refuses an entry with any other bit.
    pub const fn defined_at(interface_minor: u8) -> u16 {
        if interface_minor >= uet_regs::since::AV_ENTRY_MAX_MSG_MTU {
            ALL
        } else {
            ALL_BEFORE_MAX_MSG_MTU
        }
    }
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
    /// Range entry: services per node.
    pub range_svc: U32,
    /// Range entry: set member at `range_first`.
    pub range_offset: U32,
    /// Range entry: first table index of the range.
    pub range_first: U32,
    /// Reserved, zero.
    pub reserved: [u8; 4],
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
        range_svc: U32::ZERO,
        range_offset: U32::ZERO,
        range_first: U32::ZERO,
        reserved: [0; 4],
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
        if addr.max_msg_mtu {
            flags |= entry_flags::MAX_MSG_MTU;
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
            range_svc: U32::ZERO,
            range_offset: U32::ZERO,
            range_first: U32::ZERO,
            reserved: [0; 4],
        }
    }

    /// The entry for a serialized address (`uet_fwif::address` layout), built straight from
    /// its bytes: what [`NicAvEntry::for_peer`] makes of the parsed address, for the AV's insert
    /// path, which stores addresses as bytes. `None` when the bytes are not a valid address.
    #[inline]
    pub fn for_peer_bytes(b: &[u8; crate::address::ADDRESS_BYTES], job_id: u32) -> Option<Self> {
        UetAddress::bytes_are_valid(b).then(|| Self::for_valid_peer_bytes(b, job_id))
    }

    /// [`NicAvEntry::for_peer_bytes`] for bytes already known to pass
    /// `UetAddress::bytes_are_valid` (an AV's stored addresses): the fields are copied without
    /// checking them again. Bytes that do not pass make an entry the NIC refuses, never an
    /// unsafe one.
    #[inline]
    pub fn for_valid_peer_bytes(b: &[u8; crate::address::ADDRESS_BYTES], job_id: u32) -> Self {
        use crate::address::flags as af;
        let mut flags = entry_flags::VALID;
        let mut fa = [0u8; 16];
        if b[1] & af::IPV6 != 0 {
            flags |= entry_flags::IPV6;
            fa.copy_from_slice(&b[16..32]);
        } else {
            fa[..4].copy_from_slice(&b[16..20]);
        }
        if b[1] & af::ABSOLUTE_ADDRESSING != 0 {
            flags |= entry_flags::ABSOLUTE;
        }
        if b[1] & af::MAX_MSG_MTU != 0 {
            flags |= entry_flags::MAX_MSG_MTU;
        }
        NicAvEntry {
            flags: U16::new(flags),
            version: ADDRESS_VERSION,
            caps: b[2],
            pid_on_fep: U16::new(u16::from_be_bytes([b[4], b[5]])),
            ri_start: U16::new(u16::from_be_bytes([b[6], b[7]])),
            ri_count: U16::new(u16::from_be_bytes([b[8], b[9]])),
            auth_key: U16::ZERO,
            job_id: U32::new(job_id & MAX_JOB_ID),
            initiator: U32::new(u32::from_be_bytes([b[12], b[13], b[14], b[15]])),
            range_count: U32::ZERO,
            fabric_addr: fa,
            user_id: U64::ZERO,
            range_svc: U32::ZERO,
            range_offset: U32::ZERO,
            range_first: U32::ZERO,
            reserved: [0; 4],
        }
    }

    /// A range entry for the symmetric set whose member 0 is `base` (a single entry, as
    /// [`NicAvEntry::for_peer`] makes it), `svc` services per node, covering `count` table
    /// indices from `first` that hold members `offset ..`.
    pub fn range(base: &NicAvEntry, svc: u32, first: u32, offset: u32, count: u32) -> Self {
        let mut e = *base;
        e.flags = U16::new((base.flags.get() | entry_flags::RANGE) & !entry_flags::USER_ID);
        e.user_id = U64::ZERO;
        e.range_count = U32::new(count);
        e.range_svc = U32::new(svc);
        e.range_offset = U32::new(offset);
        e.range_first = U32::new(first);
        e
    }

    /// Whether this is a range entry.
    pub fn is_range(&self) -> bool {
        self.flags.get() & entry_flags::RANGE != 0
    }

    /// The table indices a range entry covers (empty for a single entry).
    pub fn range_indices(&self) -> core::ops::Range<u64> {
        if !self.is_range() {
            return 0..0;
        }
        let first = u64::from(self.range_first.get());
        first..first + u64::from(self.range_count.get())
    }

    /// Member `m` of this range's symmetric set, as the entry for one index: address fields
    /// computed by the rule in the module docs, range fields kept. `None` when this is not a
    /// range entry, a field of the member would overflow, or the member is not a valid address
    /// (as `UetAddress::symmetric_member` says).
    pub fn set_member(&self, m: u32) -> Option<NicAvEntry> {
        if !self.is_range() {
            return None;
        }
        let svc = self.range_svc.get();
        if svc == 0 {
            return None;
        }
        let (node, service) = (m / svc, m % svc);
        let mut e = *self;
        let service16 = u16::try_from(service).ok()?;
        let pid = self.pid_on_fep.get().checked_add(service16)?;
        if pid > 0x0FFF {
            return None;
        }
        e.pid_on_fep = U16::new(pid);
        e.initiator = U32::new(self.initiator.get().checked_add(service)?);
        if self.flags.get() & entry_flags::IPV6 != 0 {
            let fa = u128::from_be_bytes(self.fabric_addr).checked_add(u128::from(node))?;
            e.fabric_addr = fa.to_be_bytes();
        } else {
            let a = &self.fabric_addr;
            let fa = u32::from_be_bytes([a[0], a[1], a[2], a[3]]).checked_add(node)?;
            e.fabric_addr[..4].copy_from_slice(&fa.to_be_bytes());
        }
        // The member is the address `UetAddress::symmetric_member` gives — the rule the
        // host's mirror applies — or none: a node that lands on an address no peer can have
        // (multicast, broadcast, unspecified, or an IPv4-mapped one of those) is no member,
        // so the NIC never sends to an index its host holds no peer at.
        e.peer_address()?.validate().ok()?;
        Some(e)
    }

    /// The member at table index `index` of a range entry, or `None` outside the range.
    pub fn range_member(&self, index: u32) -> Option<NicAvEntry> {
        if !self.range_indices().contains(&u64::from(index)) {
            return None;
        }
        let position = index - self.range_first.get();
        self.set_member(self.range_offset.get().checked_add(position)?)
    }

    /// The single entry a range member stands for: `self` with its range flag and fields
    /// cleared (a single entry comes back as it is).
    pub fn without_range(mut self) -> Self {
        if self.is_range() {
            self.flags = U16::new(self.flags.get() & !entry_flags::RANGE);
            self.range_count = U32::ZERO;
            self.range_svc = U32::ZERO;
            self.range_offset = U32::ZERO;
            self.range_first = U32::ZERO;
        }
        self
    }

    /// Set the user id reported as the source of receive completions.
    pub fn with_user_id(mut self, user_id: u64) -> Self {
        self.flags = U16::new(self.flags.get() | entry_flags::USER_ID);
        self.user_id = U64::new(user_id);
        self
    }

    /// Whether the peer takes messages of at most one MTU ([`entry_flags::MAX_MSG_MTU`]).
    pub fn max_msg_mtu(&self) -> bool {
        self.flags.get() & entry_flags::MAX_MSG_MTU != 0
    }

    /// The entry with only the flags in `defined` kept: how a driver fits an entry to a NIC
    /// older than some flag (an invalid entry stays invalid: `VALID` is always defined).
    pub fn with_flags_within(mut self, defined: u16) -> Self {
        self.flags = U16::new(self.flags.get() & (defined | entry_flags::VALID));
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
            max_msg_mtu: self.max_msg_mtu(),
            pid_on_fep: self.pid_on_fep.get(),
            fabric_addr: self.fabric_ip(),
            ri_start: self.ri_start.get(),
            ri_count: self.ri_count.get(),
            initiator: self.initiator.get(),
        })
    }

    /// Bind the entry to auth-key slot `slot`: requests to the peer carry the slot's JobID
    /// (see [`crate::auth_key`]) instead of `job_id`.
    pub fn with_auth_key(mut self, slot: u16) -> Self {
        self.flags = U16::new(self.flags.get() | entry_flags::AUTH_KEY);
        self.auth_key = U16::new(slot);
        self
    }

    /// The auth-key slot, when the entry is bound to one.
    pub fn auth_key_slot(&self) -> Option<u16> {
        (self.flags.get() & entry_flags::AUTH_KEY != 0).then(|| self.auth_key.get())
    }

    /// The user id, when one is set.
    pub fn user_id(&self) -> Option<u64> {
        (self.flags.get() & entry_flags::USER_ID != 0).then(|| self.user_id.get())
    }

    /// Check what a NIC checks before accepting the entry from AV_WRITE: only defined flag
    /// bits, reserved bytes zero, JobID within 24 bits, 12-bit fields in range, IPv4 padding
    /// zero; an entry without VALID all zero.
    #[inline]
    pub fn check(&self) -> Result<(), &'static str> {
        self.check_within(entry_flags::ALL)
    }

    /// [`NicAvEntry::check`] as a NIC that defines only the flag bits in `defined` checks: a
    /// NIC of an older interface ([`entry_flags::defined_at`]) refuses a bit a later one
    /// defined as it does any undefined bit.
    #[inline]
    pub fn check_within(&self, defined: u16) -> Result<(), &'static str> {
        if self.flags.get() & !defined == 0 && self.is_plain_single() {
            return Ok(());
        }
        self.check_fields(defined)
    }

    /// Whether the entry is a valid single entry without an auth key that [`NicAvEntry::check`]
    /// accepts, tested on the eight little-endian words of the entry without a branch per
    /// field: what nearly every AV_WRITE record is, so the NIC's check of a batch costs a few
    /// instructions per record. `false` says nothing: [`NicAvEntry::check_fields`] decides.
    #[inline]
    fn is_plain_single(&self) -> bool {
        use entry_flags::{ABSOLUTE, IPV6, MAX_MSG_MTU, USER_ID, VALID};
        let w: [U64; 8] = zerocopy::transmute!(*self);
        let w = w.map(U64::get);
        let flags = w[0] as u16;
        // Flags: VALID set; nothing but IPV6, ABSOLUTE, USER_ID and MAX_MSG_MTU besides (no
        // RANGE, no AUTH_KEY, no undefined bit).
        let bad_flags = u64::from(
            flags & !(VALID | IPV6 | ABSOLUTE | USER_ID | MAX_MSG_MTU) | (!flags & VALID),
        );
        // IPv4: fabric_addr bytes 4-15 zero.
        let ipv4_padding = if flags & IPV6 == 0 {
            (w[3] >> 32) | w[4]
        } else {
            0
        };
        let bad = bad_flags
            // pid_on_fep and ri_start within 12 bits.
            | (w[0] >> 32) & 0xF000_F000
            // auth_key zero without the AUTH_KEY flag; job_id within 24 bits.
            | (w[1] >> 16) & 0xFFFF
            | w[1] >> 56
            // range_count, range_svc, range_offset, range_first and reserved zero.
            | w[2] >> 32
            | w[6]
            | w[7]
            | ipv4_padding;
        bad == 0
    }

    /// [`NicAvEntry::check`] field by field, naming what is wrong. Kept out of line, so that
    /// `check` inlines as the word test and a call.
    #[inline(never)]
    fn check_fields(&self, defined: u16) -> Result<(), &'static str> {
        let flags = self.flags.get();
        if flags & !(defined & entry_flags::ALL) != 0 {
            return Err("undefined flag bits");
        }
        if self.reserved != [0; 4] {
            return Err("reserved bytes set");
        }
        let range_fields = self.range_count.get()
            | self.range_svc.get()
            | self.range_offset.get()
            | self.range_first.get();
        // An entry without VALID is an invalidation, and all zero: a record whose VALID bit a
        // host forgot, its peer fields filled in, is refused rather than taken as one.
        if !self.is_valid() {
            return if self.as_bytes() != NicAvEntry::INVALID.as_bytes() {
                Err("an invalid entry must be all zero")
            } else {
                Ok(())
            };
        }
        if !self.is_range() && range_fields != 0 {
            return Err("range fields set on a single entry");
        }
        if self.job_id.get() > MAX_JOB_ID {
            return Err("JobID wider than 24 bits");
        }
        match self.auth_key_slot() {
            Some(slot) if slot >= crate::auth_key::MAX_AUTH_KEY_SLOTS => {
                return Err("auth-key slot beyond the largest table");
            }
            None if self.auth_key.get() != 0 => {
                return Err("auth-key slot set without the AUTH_KEY flag");
            }
            _ => {}
        }
        if self.pid_on_fep.get() > 0x0FFF || self.ri_start.get() > 0x0FFF {
            return Err("PIDonFEP or resource index wider than 12 bits");
        }
        if flags & entry_flags::IPV6 == 0 && self.fabric_addr[4..] != [0; 12] {
            return Err("bytes after the IPv4 address");
        }
        if self.is_range() {
            if flags & entry_flags::USER_ID != 0 {
                return Err("a range entry cannot carry a user id");
            }
            let (count, svc) = (self.range_count.get(), self.range_svc.get());
            if count == 0 || svc == 0 {
                return Err("a range entry needs range_count and range_svc");
            }
            if u64::from(self.range_first.get()) + u64::from(count) > u64::from(u32::MAX) {
                return Err("range extends past the largest index");
            }
            // Every member must be representable (and a valid address). The last member has the last node (the
            // widest fabric address); the widest service (PIDonFEP and initiator) is svc - 1
            // if any member has it — the first such member, which may come before the last
            // when the range crosses a node boundary — else the last member's.
            let offset = self.range_offset.get();
            let last = offset
                .checked_add(count - 1)
                .ok_or("range members overflow")?;
            let first_widest = offset.checked_add(svc - 1 - offset % svc);
            let overflow = "range members overflow PIDonFEP, initiator or fabric address";
            if self.set_member(last).is_none() {
                return Err(overflow);
            }
            if let Some(m) = first_widest.filter(|&m| m <= last) {
                if self.set_member(m).is_none() {
                    return Err(overflow);
                }
            }
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

    /// An entry without VALID is accepted only all zero: any other byte set (a peer entry
    /// whose VALID bit was forgotten) is refused, not taken as an invalidation.
    #[test]
    fn an_invalid_entry_is_accepted_only_all_zero() {
        assert_eq!(NicAvEntry::INVALID.check(), Ok(()));
        let peer = base("10.0.0.7", 5).with_user_id(9);
        let mut forgot = peer;
        forgot.flags = U16::new(0);
        assert_eq!(forgot.check(), Err("an invalid entry must be all zero"));
        let zero: [u8; 64] = zerocopy::transmute!(NicAvEntry::INVALID);
        for at in 0..64 {
            let mut b = zero;
            b[at] = 0x01;
            let e: NicAvEntry = zerocopy::transmute!(b);
            if !e.is_valid() {
                assert!(e.check().is_err(), "byte {at} set in an invalid entry");
            }
        }
    }

    /// The word-wise test of a plain single entry accepts only what the field-by-field check
    /// accepts, and accepts the entries AV_WRITE usually carries: every single-bit and
    /// two-byte change of an IPv4 and an IPv6 entry (with and without a user id) is judged
    /// alike by `check` and `check_fields`.
    #[test]
    fn the_plain_single_test_agrees_with_the_field_checks() {
        let bases = [
            base("10.0.0.7", 0xFFF),
            base("fd00::9", 3),
            base("10.0.0.7", 5).with_user_id(7),
        ];
        let mut fast = 0;
        for base in bases {
            assert!(base.is_plain_single(), "{base:?}");
            let bytes: [u8; 64] = zerocopy::transmute!(base);
            let mut judge = |b: [u8; 64]| {
                let e: NicAvEntry = zerocopy::transmute!(b);
                if e.is_plain_single() {
                    fast += 1;
                    assert_eq!(e.check_fields(entry_flags::ALL), Ok(()), "{e:?}");
                }
                assert_eq!(e.check(), e.check_fields(entry_flags::ALL), "{e:?}");
                let older = entry_flags::ALL_BEFORE_MAX_MSG_MTU;
                assert_eq!(e.check_within(older), e.check_fields(older), "{e:?}");
            };
            for bit in 0..512 {
                let mut b = bytes;
                b[bit / 8] ^= 1 << (bit % 8);
                judge(b);
            }
            for i in 0..64 {
                for j in i..64 {
                    for v in [0x01, 0x10, 0x80, 0xFF] {
                        let mut b = bytes;
                        b[i] = v;
                        b[j] = v;
                        judge(b);
                    }
                }
            }
        }
        assert!(fast > 1000, "the fast test took {fast} variants");
    }

    fn base(ip: &str, pid: u16) -> NicAvEntry {
        NicAvEntry::for_peer(
            &UetAddress {
                caps: caps::AI_BASE,
                mode: AddressingMode::Relative,
                max_msg_mtu: false,
                pid_on_fep: pid,
                fabric_addr: ip.parse().unwrap(),
                ri_start: 1,
                ri_count: 4,
                initiator: 100,
            },
            7,
        )
    }

    #[test]
    fn an_entry_made_from_an_address_carries_only_the_bits_an_address_implies() {
        let mut all = 0;
        for (ip, mode, max_msg_mtu) in [
            ("10.0.0.1", AddressingMode::Relative, false),
            ("fd00::1", AddressingMode::Absolute, true),
            ("10.0.0.2", AddressingMode::Absolute, true),
        ] {
            let a = UetAddress {
                caps: caps::AI_BASE,
                mode,
                max_msg_mtu,
                pid_on_fep: 3,
                fabric_addr: ip.parse().unwrap(),
                ri_start: 1,
                ri_count: 4,
                initiator: 5,
            };
            let bytes = a.to_bytes().unwrap();
            let flags = NicAvEntry::for_valid_peer_bytes(&bytes, 7).flags.get();
            assert_eq!(flags & !entry_flags::FROM_ADDRESS, 0, "{ip}");
            assert_ne!(flags & entry_flags::VALID, 0);
            all |= flags;
        }
        assert_eq!(all, entry_flags::FROM_ADDRESS, "every bit is reachable");
    }

    #[test]
    fn range_members_follow_the_symmetric_rule() {
        // 3 nodes x 2 services from 10.1.1.1:5, placed at indices 10..16.
        let r = NicAvEntry::range(&base("10.1.1.1", 5), 2, 10, 0, 6);
        assert!(r.check().is_ok());
        let m = |i| r.range_member(i).unwrap();
        assert_eq!(m(10).fabric_ip().to_string(), "10.1.1.1");
        assert_eq!(m(10).pid_on_fep.get(), 5);
        assert_eq!(m(11).pid_on_fep.get(), 6);
        assert_eq!(m(11).initiator.get(), 101);
        assert_eq!(m(12).fabric_ip().to_string(), "10.1.1.2");
        assert_eq!(m(12).pid_on_fep.get(), 5);
        assert_eq!(m(15).fabric_ip().to_string(), "10.1.1.3");
        assert!(r.range_member(9).is_none() && r.range_member(16).is_none());
        assert!(m(13).is_range() && m(13).check().is_ok());
        // A range that starts part-way into the set.
        let tail = NicAvEntry::range(&base("10.1.1.1", 5), 2, 40, 3, 3);
        assert_eq!(
            tail.range_member(40).unwrap().peer_address(),
            m(13).peer_address()
        );
        // IPv6 nodes carry into higher bytes.
        let v6 = NicAvEntry::range(&base("fd00::ff", 1), 1, 0, 0, 2);
        assert_eq!(
            v6.range_member(1).unwrap().fabric_ip().to_string(),
            "fd00::100"
        );
    }

    #[test]
    fn entries_from_bytes_equal_entries_from_parsed_addresses() {
        for (ip, mode, mtu) in [
            ("10.1.2.3", AddressingMode::Relative, false),
            ("fd00::9", AddressingMode::Absolute, true),
        ] {
            let a = UetAddress {
                caps: caps::AI_FULL | caps::HPC,
                mode,
                max_msg_mtu: mtu,
                pid_on_fep: 0xABC,
                fabric_addr: ip.parse().unwrap(),
                ri_start: 17,
                ri_count: 9,
                initiator: 0x1234_5678,
            };
            let b = a.to_bytes().unwrap();
            assert_eq!(
                NicAvEntry::for_peer_bytes(&b, 0x0102_0304),
                Some(NicAvEntry::for_peer(&a, 0x0102_0304))
            );
            let mut bad = b;
            bad[0] = 0;
            assert_eq!(NicAvEntry::for_peer_bytes(&bad, 1), None);
        }
    }

    #[test]
    fn nic_range_members_match_the_address_rule() {
        let a = UetAddress {
            caps: caps::AI_BASE,
            mode: AddressingMode::Absolute,
            max_msg_mtu: false,
            pid_on_fep: 40,
            fabric_addr: "10.3.255.250".parse().unwrap(),
            ri_start: 2,
            ri_count: 3,
            initiator: 9,
        };
        let r = NicAvEntry::range(&NicAvEntry::for_peer(&a, 5), 7, 100, 0, 70);
        for m in 0..70 {
            let nic = r.range_member(100 + m).unwrap();
            let host = a.symmetric_member(7, m).unwrap();
            assert_eq!(nic.peer_address(), Some(host), "member {m}");
        }
        assert!(a.symmetric_member(0, 1).is_none());
    }

    #[test]
    fn range_checks_reject_unrepresentable_members() {
        // PIDonFEP 0xFFE + 2 services overflows 12 bits.
        assert!(NicAvEntry::range(&base("10.0.0.1", 0xFFE), 3, 0, 0, 3)
            .check()
            .is_err());
        // 255.255.255.254 + 2 nodes overflows IPv4.
        assert!(NicAvEntry::range(&base("255.255.255.254", 1), 1, 0, 0, 3)
            .check()
            .is_err());
        // No services.
        assert!(NicAvEntry::range(&base("10.0.0.1", 1), 0, 0, 0, 3)
            .check()
            .is_err());
        // Range fields without the range flag.
        let mut e = base("10.0.0.1", 1);
        e.range_svc = U32::new(2);
        assert!(e.check().is_err());
        // A user id on a range.
        let r = NicAvEntry::range(&base("10.0.0.1", 1), 1, 0, 0, 2);
        let mut bad = r;
        bad.flags = U16::new(bad.flags.get() | entry_flags::USER_ID);
        assert!(bad.check().is_err());
    }

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
    fn an_older_interface_refuses_a_flag_a_later_one_defined() {
        let mut peer = UetAddress {
            caps: 0,
            mode: AddressingMode::Relative,
            max_msg_mtu: true,
            pid_on_fep: 5,
            fabric_addr: "10.0.0.9".parse().unwrap(),
            ri_start: 1,
            ri_count: 4,
            initiator: 2,
        };
        let one_mtu = NicAvEntry::for_peer(&peer, 7);
        let older = entry_flags::defined_at(uet_regs::since::AV_ENTRY_MAX_MSG_MTU - 1);
        assert_eq!(older, entry_flags::ALL_BEFORE_MAX_MSG_MTU);
        assert_eq!(one_mtu.check(), Ok(()));
        assert_eq!(one_mtu.check_within(older), Err("undefined flag bits"));
        let range = NicAvEntry::range(&one_mtu, 4, 0, 0, 2);
        assert_eq!(range.check_within(older), Err("undefined flag bits"));
        assert_eq!(one_mtu.with_flags_within(older).check_within(older), Ok(()));
        peer.max_msg_mtu = false;
        assert_eq!(NicAvEntry::for_peer(&peer, 7).check_within(older), Ok(()));
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
        e.range_count = U32::new(1);
        assert!(e.check().is_err(), "range fields on an invalid entry");
        let mut e = NicAvEntry::INVALID;
        e.flags = U16::new(entry_flags::VALID);
        e.job_id = U32::new(0x0100_0000);
        assert!(e.check().is_err());
        // Auth-key slots: only with the flag, and below 256.
        let good = base("10.0.0.1", 1).with_auth_key(255);
        assert!(good.check().is_ok());
        assert_eq!(good.auth_key_slot(), Some(255));
        assert!(base("10.0.0.1", 1).with_auth_key(256).check().is_err());
        let mut e = base("10.0.0.1", 1);
        e.auth_key = U16::new(3);
        assert!(e.check().is_err());
        assert_eq!(base("10.0.0.1", 1).auth_key_slot(), None);
    }
}
