//! NIC AV tables: the translation memory the TX engine reads and the RX engine reverse-maps.
//!
//! * Up to `CAP_AV.max_tables` tables; handles are 1-based (0 means "no AV") and the lowest free
//!   handle is reused first.
//! * A table of `capacity` entries ([`NicAvEntry`], 64 bytes each) starts all invalid. Its
//!   storage is allocated zeroed (`FromZeros::new_vec_zeroed`, i.e. `calloc`), so the pages of a
//!   1M-entry table cost nothing until an entry is written.
//! * `rx_ctx_bits`: a destination `fi_addr_t` carries the receive context in its top
//!   `rx_ctx_bits` bits (`fi_rx_addr`) and the table index in the rest.
//! * A reverse map `(fabric address, initiator id) -> index` serves FI_SOURCE on receive: the
//!   lowest valid index holding the sender is reported (or its user id when the entry has one).
//!   Like a NIC's CAM it is a hash table with one slot per key; entries that share a key (the
//!   same peer inserted twice) are chained through a per-entry link array, so programming an
//!   entry never allocates.
//! * A table cannot be destroyed while an endpoint is bound to it.
//!
//! Symmetric range entries (`RANGE`) are stored as written; translation treats every entry as a
//! single peer.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use uet_fwif::av_entry::entry_flags;
use uet_fwif::NicAvEntry;
use zerocopy::FromZeros;

/// End of a reverse-map chain.
const NO_LINK: u32 = u32::MAX;

/// The reverse-map key: a peer's fabric address (IPv6 or IPv4 in the low bytes, the address
/// type folded into bit 1 so the two families never collide) and its initiator id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ReverseKey {
    fabric_addr: u128,
    initiator: u32,
}

/// A multiply-rotate hasher for the reverse map: keys come from the driver, not from the wire,
/// and a table is private to one function, so hash flooding is not a concern and speed is.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
}

/// One AV table.
#[derive(Debug)]
pub(crate) struct AvTable {
    pub capacity: u32,
    pub rx_ctx_bits: u8,
    entries: Vec<NicAvEntry>,
    /// Key -> first index of its chain.
    reverse: HashMap<ReverseKey, u32, BuildHasherDefault<KeyHasher>>,
    /// Index -> next index with the same key, [`NO_LINK`] at the end. Allocated on first use.
    links: Vec<u32>,
    /// Endpoints bound to the table.
    pub bound: u32,
}

/// Why a destination did not translate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NotAvail;

impl AvTable {
    /// A table of `capacity` invalid entries; `None` when memory cannot be reserved.
    pub(crate) fn new(capacity: u32, rx_ctx_bits: u8) -> Option<Self> {
        let entries = NicAvEntry::new_vec_zeroed(usize::try_from(capacity).ok()?).ok()?;
        Some(AvTable {
            capacity,
            rx_ctx_bits,
            entries,
            reverse: HashMap::default(),
            links: Vec::new(),
            bound: 0,
        })
    }

    /// The entry at `index`.
    pub(crate) fn get(&self, index: u32) -> Option<&NicAvEntry> {
        self.entries.get(usize::try_from(index).ok()?)
    }

    fn key(e: &NicAvEntry) -> Option<ReverseKey> {
        e.is_valid().then(|| ReverseKey {
            fabric_addr: u128::from_le_bytes(e.fabric_addr)
                ^ u128::from(e.flags.get() & entry_flags::IPV6),
            initiator: e.initiator.get(),
        })
    }

    fn link(&self, index: u32) -> u32 {
        self.links.get(index as usize).copied().unwrap_or(NO_LINK)
    }

    fn set_link(&mut self, index: u32, next: u32) {
        let i = index as usize;
        if i >= self.links.len() {
            if next == NO_LINK {
                return;
            }
            self.links.resize(self.entries.len(), NO_LINK);
        }
        if let Some(l) = self.links.get_mut(i) {
            *l = next;
        }
    }

    fn unlink(&mut self, index: u32) {
        let Some(k) = self.get(index).and_then(Self::key) else {
            return;
        };
        let Some(&head) = self.reverse.get(&k) else {
            return;
        };
        let next = self.link(index);
        if head == index {
            if next == NO_LINK {
                self.reverse.remove(&k);
            } else if let Some(h) = self.reverse.get_mut(&k) {
                *h = next;
            }
        } else {
            let mut at = head;
            while at != NO_LINK {
                let after = self.link(at);
                if after == index {
                    self.set_link(at, next);
                    break;
                }
                at = after;
            }
        }
        self.set_link(index, NO_LINK);
    }

    /// Store `entry` at `index` (already validated).
    pub(crate) fn set(&mut self, index: u32, entry: NicAvEntry) {
        self.unlink(index);
        let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|i| self.entries.get_mut(i))
        else {
            return;
        };
        *slot = entry;
        if let Some(k) = Self::key(&entry) {
            let prev = self.reverse.insert(k, index);
            if let Some(prev) = prev {
                self.set_link(index, prev);
            }
        }
    }

    /// Invalidate the entry at `index`.
    pub(crate) fn invalidate(&mut self, index: u32) {
        self.set(index, NicAvEntry::INVALID);
    }

    /// Split a destination `fi_addr_t` into (index, rx_ctx).
    pub(crate) fn split(&self, dest: u64) -> (u64, u64) {
        let bits = u32::from(self.rx_ctx_bits);
        if bits == 0 {
            (dest, 0)
        } else {
            let shift = 64 - bits;
            (dest & ((1u64 << shift) - 1), dest >> shift)
        }
    }

    /// Translate a destination: the valid entry and the receive context.
    pub(crate) fn translate(&self, dest: u64) -> Result<(NicAvEntry, u64), NotAvail> {
        let (index, rx_ctx) = self.split(dest);
        let index = u32::try_from(index).map_err(|_| NotAvail)?;
        if index >= self.capacity {
            return Err(NotAvail);
        }
        let e = *self.get(index).ok_or(NotAvail)?;
        if !e.is_valid() {
            return Err(NotAvail);
        }
        Ok((e, rx_ctx))
    }

    /// Reverse translation for a receive completion's `src_addr`.
    pub(crate) fn source(&self, ip: IpAddr, initiator: u32) -> u64 {
        let mut fa = [0u8; 16];
        let ipv6 = match ip {
            IpAddr::V4(a) => {
                fa[..4].copy_from_slice(&a.octets());
                0
            }
            IpAddr::V6(a) => {
                fa = a.octets();
                u128::from(entry_flags::IPV6)
            }
        };
        let key = ReverseKey {
            fabric_addr: u128::from_le_bytes(fa) ^ ipv6,
            initiator,
        };
        let Some(&head) = self.reverse.get(&key) else {
            return uet_fwif::FI_ADDR_NOTAVAIL;
        };
        // The lowest index on the chain.
        let mut index = head;
        let mut at = self.link(head);
        while at != NO_LINK {
            index = index.min(at);
            at = self.link(at);
        }
        match self.get(index).and_then(NicAvEntry::user_id) {
            Some(uid) => uid,
            None => u64::from(index),
        }
    }
}

/// Every AV table of a NIC.
#[derive(Debug)]
pub(crate) struct AvTables {
    tables: Vec<Option<AvTable>>,
}

impl AvTables {
    pub(crate) fn new(max_tables: u16) -> Self {
        AvTables {
            tables: (0..max_tables).map(|_| None).collect(),
        }
    }

    fn slot(handle: u32) -> Option<usize> {
        usize::try_from(handle.checked_sub(1)?).ok()
    }

    /// Insert a table under the lowest free handle; `None` when all handles are taken.
    pub(crate) fn insert(&mut self, t: AvTable) -> Option<u32> {
        let i = self.tables.iter().position(Option::is_none)?;
        let slot = self.tables.get_mut(i)?;
        *slot = Some(t);
        u32::try_from(i + 1).ok()
    }

    /// Whether a handle could be allocated now.
    pub(crate) fn has_free(&self) -> bool {
        self.tables.iter().any(Option::is_none)
    }

    pub(crate) fn get(&self, handle: u32) -> Option<&AvTable> {
        self.tables.get(Self::slot(handle)?)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, handle: u32) -> Option<&mut AvTable> {
        self.tables.get_mut(Self::slot(handle)?)?.as_mut()
    }

    pub(crate) fn remove(&mut self, handle: u32) -> Option<AvTable> {
        self.tables.get_mut(Self::slot(handle)?)?.take()
    }

    pub(crate) fn clear(&mut self) {
        for t in &mut self.tables {
            *t = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_fwif::address::{AddressingMode, UetAddress};

    fn peer(ip: &str, initiator: u32) -> NicAvEntry {
        NicAvEntry::for_peer(
            &UetAddress {
                caps: 0,
                mode: AddressingMode::Relative,
                max_msg_mtu: false,
                pid_on_fep: 3,
                fabric_addr: ip.parse().unwrap(),
                ri_start: 1,
                ri_count: 4,
                initiator,
            },
            9,
        )
    }

    #[test]
    fn million_entry_table_is_lazy_and_translates() {
        let mut t = AvTable::new(1 << 20, 4).unwrap();
        t.set(1000, peer("10.0.0.2", 5));
        let dest = (3u64 << 60) | 1000;
        let (e, ctx) = t.translate(dest).unwrap();
        assert_eq!(ctx, 3);
        assert_eq!(e.pid_on_fep.get(), 3);
        assert_eq!(t.translate(999), Err(NotAvail));
        assert_eq!(t.translate(1 << 20), Err(NotAvail));
        assert_eq!(t.source("10.0.0.2".parse().unwrap(), 5), 1000);
        t.set(7, peer("10.0.0.2", 5).with_user_id(0xABC));
        assert_eq!(t.source("10.0.0.2".parse().unwrap(), 5), 0xABC);
        t.invalidate(7);
        t.invalidate(1000);
        assert_eq!(t.source("10.0.0.2".parse().unwrap(), 5), u64::MAX);
    }
}
