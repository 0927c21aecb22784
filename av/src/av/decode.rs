//! How an AV reads an `fi_addr_t`: which bits are the index, and which values are handles
//! rather than addresses.
//!
//! An `fi_addr_t` of an AV is an index in its low bits; the receive context
//! ([`crate::fi_rx_addr`]) takes its top `rx_ctx_bits` bits, and on an AV with peer groups the
//! group ([`crate::fi_group_addr`]) takes bits 32 and up below the receive context. Two kinds of
//! handle share the same 64 bits and are told apart by bits 48–63:
//!
//! * auth-key handles, [`AUTH_KEY_ADDR_BASE`](crate::AUTH_KEY_ADDR_BASE) plus the key's number (an AV holding auth keys);
//! * collective addresses of AV sets, [`AV_SET_ADDR_BASE`](crate::AV_SET_ADDR_BASE) plus the set's number.
//!
//! Both bases have bit 48 set. An address of an AV with at most
//! [`AUTH_KEY_MAX_RX_CTX_BITS`] receive-context bits and groups up to
//! [`AUTH_KEY_MAX_GROUP_ID`] never has: its receive context starts at bit 49 or above, its
//! group ends at bit 47, and its index is below 2^32. On such an AV a handle is never an
//! address, whatever its low bits. An AV with more receive-context or group bits may have
//! addresses of either form: it cannot hold auth keys (`fi_av_open` refuses that), and its
//! AV sets have no collective address ([`crate::AvSet::addr`] refuses that).

use super::auth_keys::{is_auth_key_addr, AUTH_KEY_MAX_RX_CTX_BITS};
use super::AUTH_KEY_MAX_GROUP_ID;
use crate::av_set::is_av_set_addr;
use crate::flags::{fi_addr_index, FiAddr, FI_ADDR_NOTAVAIL};

/// What an `fi_addr_t` is to one AV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FiAddrKind {
    /// An index below the AV's capacity (in use or not).
    Index(u32),
    /// `FI_ADDR_NOTAVAIL`.
    NotAvail,
    /// An auth-key handle of the AV.
    AuthKeyHandle,
    /// An AV set's collective address.
    CollectiveAddr,
    /// An index at or past the AV's capacity.
    OutOfRange(u64),
}

/// The decoding of one AV's `fi_addr_t` values; fixed when the AV opens, and copied into each
/// of its AV sets so that a set decodes its members as the AV does.
#[derive(Clone, Copy, Debug)]
pub struct FiAddrDecoder {
    /// Mask of the index bits: everything below the receive-context bits, or bits 0–31 on an
    /// AV with peer groups.
    index_mask: u64,
    capacity: u32,
    /// The AV holds auth keys: an `fi_addr_t` of auth-key handle form is one.
    key_handles: bool,
    /// No address of the AV has bit 48 set, so one of collective-address form is a handle.
    handles_apart: bool,
}

impl FiAddrDecoder {
    /// The decoder of an AV of `capacity` entries with `rx_ctx_bits` receive-context bits,
    /// groups up to `max_group_id` (0: no peer groups), holding auth keys or not.
    pub fn new(capacity: u32, rx_ctx_bits: u8, max_group_id: u32, key_handles: bool) -> Self {
        FiAddrDecoder {
            index_mask: fi_addr_index(u64::MAX, rx_ctx_bits, max_group_id != 0),
            capacity,
            key_handles,
            handles_apart: rx_ctx_bits <= AUTH_KEY_MAX_RX_CTX_BITS
                && max_group_id <= AUTH_KEY_MAX_GROUP_ID,
        }
    }

    /// Mask of the index bits of an `fi_addr_t`; a run of low ones.
    pub fn index_mask(&self) -> u64 {
        self.index_mask
    }

    /// Whether no address of the AV can take the form of a handle (see the module docs): an AV
    /// set of this AV may then have a collective address.
    pub fn handles_apart(&self) -> bool {
        self.handles_apart
    }

    /// What `fi_addr` is to the AV.
    #[inline]
    pub fn kind(&self, fi_addr: FiAddr) -> FiAddrKind {
        if fi_addr == FI_ADDR_NOTAVAIL {
            return FiAddrKind::NotAvail;
        }
        if self.key_handles && is_auth_key_addr(fi_addr) {
            return FiAddrKind::AuthKeyHandle;
        }
        if self.handles_apart && is_av_set_addr(fi_addr) {
            return FiAddrKind::CollectiveAddr;
        }
        let raw = fi_addr & self.index_mask;
        match u32::try_from(raw) {
            Ok(index) if index < self.capacity => FiAddrKind::Index(index),
            _ => FiAddrKind::OutOfRange(raw),
        }
    }

    /// The index `fi_addr` names, if it names one below the capacity (in use or not).
    #[inline]
    pub fn index(&self, fi_addr: FiAddr) -> Option<u32> {
        match self.kind(fi_addr) {
            FiAddrKind::Index(index) => Some(index),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::av_set::AV_SET_ADDR_BASE;
    use crate::flags::{fi_group_addr, fi_rx_addr};
    use crate::AUTH_KEY_ADDR_BASE;

    #[test]
    fn no_address_of_a_handle_safe_av_has_bit_48_set() {
        // The largest receive context and group such an AV can have, at every index.
        for (rx_bits, max_group) in [(AUTH_KEY_MAX_RX_CTX_BITS, 0), (15, 0xFFFF), (0, 0xFFFF)] {
            let rx_max = (1u32 << rx_bits) - 1;
            for index in [0u64, 1, u64::from(u32::MAX) - 1] {
                let mut a = index;
                if max_group != 0 {
                    a = fi_group_addr(a, max_group);
                }
                a = fi_rx_addr(a, rx_max, rx_bits);
                assert_eq!(a & (1 << 48), 0, "{a:#x}");
            }
        }
        assert_ne!(AV_SET_ADDR_BASE & (1 << 48), 0);
        assert_ne!(AUTH_KEY_ADDR_BASE & (1 << 48), 0);
    }

    #[test]
    fn handles_are_told_from_addresses_only_where_they_can_be() {
        let set_addr = AV_SET_ADDR_BASE | 3;
        let key = AUTH_KEY_ADDR_BASE | 3;
        // Peer groups: the index is bits 0-31, so without the check both would name index 3.
        let d = FiAddrDecoder::new(64, 0, 0xFF, true);
        assert_eq!(d.kind(set_addr), FiAddrKind::CollectiveAddr);
        assert_eq!(d.kind(key), FiAddrKind::AuthKeyHandle);
        assert_eq!(d.kind(fi_group_addr(3, 0xFF)), FiAddrKind::Index(3));
        // No auth keys: a key-handle form is a plain (group) address.
        let d = FiAddrDecoder::new(64, 0, 0xFF, false);
        assert_eq!(d.kind(key), FiAddrKind::Index(3));
        // 16 receive-context bits: an address may take the collective form, so it is one.
        let d = FiAddrDecoder::new(64, 16, 0, false);
        assert!(!d.handles_apart());
        assert_eq!(d.kind(set_addr), FiAddrKind::Index(3));
        assert_eq!(d.kind(FI_ADDR_NOTAVAIL), FiAddrKind::NotAvail);
        assert_eq!(d.kind(64), FiAddrKind::OutOfRange(64));
    }
}
