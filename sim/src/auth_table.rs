//! Auth-key table: the JobIDs a function's endpoints may be granted besides their own.
//!
//! * `CAP_AUTH_KEY.slots` slots (at most `MAX_AUTH_KEY_SLOTS`); AUTH_KEY_ADD takes the lowest
//!   free one. Each slot holds a JobID, the AV table that owns it, the `source` reported for
//!   requests accepted through it, and how many endpoints are granted it.
//! * A slot granted to an endpoint cannot be removed (Busy); the endpoint table keeps, per
//!   endpoint, the granted slots and their JobIDs, so the RX engine's check is a compare against
//!   a short list, never a walk of this table.
//! * AV_DESTROY frees the slots of the AV (no endpoint can hold them: endpoints bound to the AV
//!   keep it from being destroyed, and only they can be granted its slots).
//!
//! The contract is `uet_fwif::auth_key`.

use uet_fwif::auth_key::{AuthKeyEntry, AUTH_KEY_VALID};
use zerocopy::little_endian::{U16, U32, U64};

/// One slot in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AuthSlot {
    pub job_id: u32,
    /// Owning AV handle.
    pub av: u32,
    pub source: u64,
    /// Endpoints granted the slot.
    pub grants: u16,
}

/// Why AUTH_KEY_REMOVE failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoveError {
    /// No such slot in use, or (owner-checked) not the named AV's slot with the named JobID.
    NoSlot,
    /// An endpoint is granted the slot.
    Granted,
}

/// The function's auth-key table.
#[derive(Debug)]
pub(crate) struct AuthTable {
    slots: Vec<Option<AuthSlot>>,
}

impl AuthTable {
    pub(crate) fn new(slots: u16) -> Self {
        AuthTable {
            slots: vec![None; usize::from(slots)],
        }
    }

    /// Number of slots (`CAP_AUTH_KEY.slots`).
    pub(crate) fn capacity(&self) -> u16 {
        u16::try_from(self.slots.len()).unwrap_or(u16::MAX)
    }

    /// Put `job_id` into the lowest free slot, owned by AV `av`.
    pub(crate) fn add(&mut self, av: u32, job_id: u32, source: u64) -> Option<u16> {
        let (i, slot) = self
            .slots
            .iter_mut()
            .enumerate()
            .find(|(_, s)| s.is_none())?;
        *slot = Some(AuthSlot {
            job_id,
            av,
            source,
            grants: 0,
        });
        u16::try_from(i).ok()
    }

    pub(crate) fn get(&self, slot: u16) -> Option<&AuthSlot> {
        self.slots.get(usize::from(slot))?.as_ref()
    }

    fn get_mut(&mut self, slot: u16) -> Option<&mut AuthSlot> {
        self.slots.get_mut(usize::from(slot))?.as_mut()
    }

    /// The JobID of slot `slot` when AV `av` owns it: the only key an entry of `av` may
    /// send with or be matched by (a slot freed and given to another AV is not `av`'s).
    #[inline]
    pub(crate) fn job_of_av(&self, slot: u16, av: u32) -> Option<u32> {
        self.get(slot).filter(|s| s.av == av).map(|s| s.job_id)
    }

    /// Free a slot no endpoint is granted; with `owner` = (AV, JobID), only while it is that
    /// AV's slot holding that JobID.
    pub(crate) fn remove(
        &mut self,
        slot: u16,
        owner: Option<(u32, u32)>,
    ) -> Result<(), RemoveError> {
        let s = self
            .get(slot)
            .filter(|s| owner.is_none_or(|(av, job_id)| s.av == av && s.job_id == job_id))
            .ok_or(RemoveError::NoSlot)?;
        if s.grants > 0 {
            return Err(RemoveError::Granted);
        }
        if let Some(s) = self.slots.get_mut(usize::from(slot)) {
            *s = None;
        }
        Ok(())
    }

    /// Set the source of a slot in use; `false` if it is free.
    pub(crate) fn set_source(&mut self, slot: u16, source: u64) -> bool {
        match self.get_mut(slot) {
            Some(s) => {
                s.source = source;
                true
            }
            None => false,
        }
    }

    /// Count a grant of each slot in `slots` (all in use).
    pub(crate) fn grant(&mut self, slots: &[u16]) {
        for &slot in slots {
            if let Some(s) = self.get_mut(slot) {
                s.grants = s.grants.saturating_add(1);
            }
        }
    }

    /// Drop a grant of each slot in `slots`.
    pub(crate) fn revoke(&mut self, slots: &[u16]) {
        for &slot in slots {
            if let Some(s) = self.get_mut(slot) {
                s.grants = s.grants.saturating_sub(1);
            }
        }
    }

    /// Free every slot of AV `av`.
    pub(crate) fn remove_av(&mut self, av: u32) {
        for s in &mut self.slots {
            if s.is_some_and(|s| s.av == av) {
                *s = None;
            }
        }
    }

    /// The source of AV `av`'s slot for `job_id` (the lowest such slot), if any.
    pub(crate) fn source_for(&self, av: u32, job_id: u32) -> Option<u64> {
        self.slots
            .iter()
            .flatten()
            .find(|s| s.av == av && s.job_id == job_id)
            .map(|s| s.source)
    }

    /// Slot `slot` as AUTH_KEY_READ returns it (all zero when free).
    pub(crate) fn entry(&self, slot: u16) -> AuthKeyEntry {
        match self.get(slot) {
            Some(s) => AuthKeyEntry {
                job_id: U32::new(s.job_id),
                flags: U16::new(AUTH_KEY_VALID),
                grants: U16::new(s.grants),
                av: U32::new(s.av),
                reserved: U32::ZERO,
                source: U64::new(s.source),
            },
            None => AuthKeyEntry::default(),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_slot_grants_and_owners() {
        let mut t = AuthTable::new(3);
        assert_eq!(t.add(1, 0x10, 0), Some(0));
        assert_eq!(t.add(1, 0x11, 0), Some(1));
        assert_eq!(t.add(2, 0x12, 5), Some(2));
        assert_eq!(t.add(2, 0x13, 0), None);
        t.grant(&[1]);
        assert_eq!(t.remove(1, None), Err(RemoveError::Granted));
        t.revoke(&[1]);
        // Owner-checked: another AV, another JobID, then the right pair.
        assert_eq!(t.remove(1, Some((2, 0x11))), Err(RemoveError::NoSlot));
        assert_eq!(t.remove(1, Some((1, 0x10))), Err(RemoveError::NoSlot));
        assert!(t.entry(1).is_valid(), "a refused remove changes nothing");
        assert_eq!(t.remove(1, Some((1, 0x11))), Ok(()));
        assert_eq!(t.remove(1, None), Err(RemoveError::NoSlot));
        assert_eq!(t.add(2, 0x14, 0), Some(1));
        assert_eq!(t.source_for(2, 0x12), Some(5));
        assert_eq!(t.source_for(1, 0x12), None);
        t.remove_av(2);
        assert_eq!(t.job_of_av(1, 2), None);
        assert_eq!(t.job_of_av(0, 1), Some(0x10));
        assert_eq!(t.job_of_av(0, 2), None, "AV 1's slot is not AV 2's");
        assert!(!t.entry(2).is_valid());
        assert!(t.entry(0).is_valid());
    }
}
