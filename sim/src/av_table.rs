//! NIC AV tables: the translation memory the TX engine reads and the RX engine reverse-maps.
//!
//! * Up to `CAP_AV.max_tables` tables; handles are 1-based (0 means "no AV") and the lowest free
//!   handle is reused first.
//! * A table of `capacity` entries ([`NicAvEntry`], 64 bytes each) starts all invalid. Its
//!   storage is allocated zeroed (`FromZeros::new_vec_zeroed`, i.e. `calloc`), so the pages of a
//!   1M-entry table cost nothing until an entry is written.
//! * `rx_ctx_bits`: a destination `fi_addr_t` carries the receive context in its top
//!   `rx_ctx_bits` bits (`fi_rx_addr`) and the table index in the rest.
//! * A reverse map `(fabric address, initiator id) -> indices` serves FI_SOURCE on receive: the
//!   lowest valid index holding the sender is reported (or its user id when the entry has one).
//! * A table cannot be destroyed while an endpoint is bound to it.
//!
//! Symmetric range entries (`RANGE`) are stored as written; translation treats every entry as a
//! single peer.

use std::collections::HashMap;
use std::net::IpAddr;
use uet_fwif::NicAvEntry;
use zerocopy::FromZeros;

/// One AV table.
#[derive(Debug)]
pub(crate) struct AvTable {
    pub capacity: u32,
    pub rx_ctx_bits: u8,
    entries: Vec<NicAvEntry>,
    reverse: HashMap<(IpAddr, u32), Vec<u32>>,
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
            reverse: HashMap::new(),
            bound: 0,
        })
    }

    /// The entry at `index`.
    pub(crate) fn get(&self, index: u32) -> Option<&NicAvEntry> {
        self.entries.get(usize::try_from(index).ok()?)
    }

    fn key(e: &NicAvEntry) -> Option<(IpAddr, u32)> {
        e.is_valid().then(|| (e.fabric_ip(), e.initiator.get()))
    }

    fn unlink(&mut self, index: u32) {
        let Some(old) = self.get(index).copied() else {
            return;
        };
        if let Some(k) = Self::key(&old) {
            if let Some(v) = self.reverse.get_mut(&k) {
                v.retain(|&i| i != index);
                if v.is_empty() {
                    self.reverse.remove(&k);
                }
            }
        }
    }

    /// Store `entry` at `index` (already validated).
    pub(crate) fn set(&mut self, index: u32, entry: NicAvEntry) {
        self.unlink(index);
        if let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|i| self.entries.get_mut(i))
        {
            *slot = entry;
            if let Some(k) = Self::key(&entry) {
                self.reverse.entry(k).or_default().push(index);
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
        let Some(index) = self
            .reverse
            .get(&(ip, initiator))
            .and_then(|v| v.iter().min().copied())
        else {
            return uet_fwif::FI_ADDR_NOTAVAIL;
        };
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
