//! The FI_SOURCE index of an AV table's range entries: which ranges may hold a sender.
//!
//! The source CAM ([`crate::source_cam`]) finds the single entries of a sender. A range entry
//! holds the members of a symmetric set, whose fabric addresses are consecutive: member `m`
//! is node `m / svc` at the range's fabric address plus the node. So the members of a range
//! span an interval of fabric addresses, from the node of its first member to the node of
//! its last, and only ranges whose interval holds the sender's address can hold the sender.
//!
//! The index keeps each range under the first address of its interval, in one ordered set
//! per *class*: the bit length of the interval's span (last − first address). A range of
//! class `k` spans less than 2^k addresses, so one holding address `a` starts in
//! `[a − (2^k − 1), a]`; a lookup reads that window of each class in use (at most 129
//! classes, in practice a few) and checks the candidates it finds. With ranges whose
//! intervals do not overlap (a node per `fi_av_insertsym`, or one set for the whole job) a
//! class gives at most two candidates; ranges of the same nodes (one set per service)
//! are all candidates, and all hold the sender's node. Adding or removing a range is one
//! set insertion or removal.
//!
//! A NIC would keep such an index in a second CAM keyed by the interval; the model keeps it
//! in ordered sets, which cost the same wherever a range lies.

use std::collections::BTreeSet;
use uet_fwif::av_entry::entry_flags;
use uet_fwif::NicAvEntry;

/// Where a range sits in the index: its class, and its key there (address family, first
/// address of its interval, first table index).
type Place = (usize, (bool, u128, u32));

/// Ranges by the interval of fabric addresses their members span.
#[derive(Debug, Default)]
pub(crate) struct RangeSources {
    /// Per class (bit length of the span, 0..=128): the ranges' keys.
    classes: Vec<BTreeSet<(bool, u128, u32)>>,
}

impl RangeSources {
    /// The place of the range `entry` written at `first`, holding `count` members: `None`
    /// for a range that can hold nobody (no services, no members, or an interval past the
    /// end of its address family).
    fn place(entry: &NicAvEntry, first: u32, count: u32) -> Option<Place> {
        let svc = entry.range_svc.get();
        let offset = entry.range_offset.get();
        if svc == 0 || count == 0 {
            return None;
        }
        let ipv6 = entry.flags.get() & entry_flags::IPV6 != 0;
        let base = if ipv6 {
            u128::from_be_bytes(entry.fabric_addr)
        } else {
            let b = &entry.fabric_addr;
            u128::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let first_node = u128::from(offset / svc);
        let last_member = u64::from(offset) + u64::from(count) - 1;
        let last_node = u128::from(last_member / u64::from(svc));
        let lo = base.checked_add(first_node)?;
        let hi = base.checked_add(last_node)?;
        if !ipv6 && hi > u128::from(u32::MAX) {
            return None;
        }
        let class = (u128::BITS - (hi - lo).leading_zeros()) as usize;
        Some((class, (ipv6, lo, first)))
    }

    /// Add the range `entry` written at `first` with `count` members.
    pub(crate) fn add(&mut self, entry: &NicAvEntry, first: u32, count: u32) {
        let Some((class, key)) = Self::place(entry, first, count) else {
            return;
        };
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, BTreeSet::new);
        }
        if let Some(set) = self.classes.get_mut(class) {
            set.insert(key);
        }
    }

    /// Remove the range `entry` at `first` with `count` members (as it was added).
    pub(crate) fn remove(&mut self, entry: &NicAvEntry, first: u32, count: u32) {
        if let Some((class, key)) = Self::place(entry, first, count) {
            if let Some(set) = self.classes.get_mut(class) {
                set.remove(&key);
            }
        }
    }

    /// Call `f` with the first index of every range whose interval may hold the sender at
    /// fabric address `fa` (IPv4 in its low 32 bits when not `ipv6`): every range that holds
    /// it is among them.
    pub(crate) fn candidates(&self, ipv6: bool, fa: u128, mut f: impl FnMut(u32)) {
        for (class, set) in self.classes.iter().enumerate() {
            if set.is_empty() {
                continue;
            }
            // The class's widest span, 2^class − 1.
            let widest = u32::try_from(class)
                .ok()
                .and_then(|c| 1u128.checked_shl(c))
                .map_or(u128::MAX, |p| p - 1);
            let lo = fa.saturating_sub(widest);
            for &(_, _, first) in set.range((ipv6, lo, 0)..=(ipv6, fa, u32::MAX)) {
                f(first);
            }
        }
    }

    /// Ranges indexed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.classes.iter().map(BTreeSet::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_fwif::address::{caps, AddressingMode, UetAddress};

    fn range(ip: &str, svc: u32, first: u32, offset: u32, count: u32) -> NicAvEntry {
        let base = UetAddress {
            caps: caps::AI_BASE,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 10,
            fabric_addr: ip.parse().unwrap(),
            ri_start: 1,
            ri_count: 1,
            initiator: 0,
        };
        NicAvEntry::range(&NicAvEntry::for_peer(&base, 7), svc, first, offset, count)
    }

    fn found(s: &RangeSources, ipv6: bool, fa: u128) -> Vec<u32> {
        let mut v = Vec::new();
        s.candidates(ipv6, fa, |f| v.push(f));
        v.sort_unstable();
        v
    }

    const NET: u128 = 0x0a00_0000; // 10.0.0.0

    /// Every range whose interval holds the address is a candidate, whatever its class; one
    /// whose interval does not, in a class of its own, is not; removal takes a range out.
    #[test]
    fn candidates_are_the_ranges_whose_addresses_hold_the_sender() {
        let mut s = RangeSources::default();
        // One node per range, 8 services each: 10.0.0.1 .. 10.0.0.4.
        let per_node: Vec<NicAvEntry> = (0..4)
            .map(|n| range(&format!("10.0.0.{}", n + 1), 8, n * 8, 0, 8))
            .collect();
        for (n, e) in per_node.iter().enumerate() {
            s.add(e, n as u32 * 8, 8);
        }
        // A wide range: 1,000 nodes from 10.0.1.0, 2 services, members 10..2,000.
        let wide = range("10.0.1.0", 2, 100, 10, 1990);
        s.add(&wide, 100, 1990);
        // An IPv6 range over the same low bits.
        let v6 = range("::a00:1", 1, 5000, 0, 4);
        s.add(&v6, 5000, 4);
        assert_eq!(s.len(), 6);
        assert_eq!(found(&s, false, NET + 3), [16]);
        assert_eq!(found(&s, false, NET + 5), Vec::<u32>::new());
        // 10.0.1.0 + 10/2 = 10.0.1.5 .. 10.0.1.0 + 1999/2 = 10.0.4.231.
        assert_eq!(found(&s, false, NET + 0x100 + 5), [100]);
        assert_eq!(found(&s, false, NET + 0x100 + 999), [100]);
        assert!(found(&s, false, NET + 0x100 + 1000).len() <= 1);
        assert_eq!(found(&s, true, NET + 2), [5000]);
        assert_eq!(found(&s, true, NET + 0x100 + 5), Vec::<u32>::new());
        s.remove(&per_node[2], 16, 8);
        assert_eq!(found(&s, false, NET + 3), Vec::<u32>::new());
        s.remove(&wide, 100, 1990);
        assert_eq!(found(&s, false, NET + 0x100 + 5), Vec::<u32>::new());
        assert_eq!(s.len(), 4);
    }

    /// Ranges that can hold nobody are not indexed; the widest interval of each family and
    /// one running past the end of IPv4 do not overflow.
    #[test]
    fn degenerate_and_extreme_ranges() {
        let mut s = RangeSources::default();
        s.add(&range("10.0.0.1", 0, 0, 0, 4), 0, 4);
        s.add(&range("10.0.0.1", 1, 0, 0, 0), 0, 0);
        s.add(&range("255.255.255.254", 1, 0, 0, 4), 0, 4);
        assert_eq!(s.len(), 0);
        s.add(&range("0.0.0.0", 1, 0, 0, u32::MAX), 0, u32::MAX);
        s.add(
            &range("ffff:ffff:ffff:ffff:ffff:ffff:0:0", 1, 1, 0, u32::MAX),
            1,
            u32::MAX,
        );
        assert_eq!(found(&s, false, u128::from(u32::MAX) - 1), [0]);
        assert_eq!(found(&s, true, u128::MAX - 1), [1]);
        assert_eq!(found(&s, false, 0), [0]);
    }
}
