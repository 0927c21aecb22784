//! Memory-region table: the regions remote WRITE and READ requests may touch.
//!
//! * MR_REGISTER adds a region: IOVA range, access (remote read / remote write), 64-bit memory
//!   key, owning endpoint (by handle and serial, so a region never outlives its endpoint) and
//!   the resource index in the endpoint's RMA space it is bound to. Keys are unique over the
//!   NIC (the libfabric domain). At most `NicConfig::memory_regions` regions exist at once.
//! * MR handles count up from 1 and are not reused before 2^32 registrations; after the
//!   counter wraps, a handle still naming a region is skipped.
//! * A request is checked by [`MrTable::check`]: a region with the key, owned by the target
//!   endpoint, bound to the request's resource index, granting the access, containing the
//!   whole request range, and reached through the owning endpoint's own JobID. Anything else
//!   is a permission violation; the request never learns which check failed.
//! * A region belongs to its endpoint's job: a JobID the endpoint also accepts through an
//!   auth-key grant reaches its receive buffers, never its memory regions. This is fi_mr(3)'s
//!   rule that only peers programmed with the region's authorization key may access it, the
//!   domain's key (the endpoint's own JobID) for a region registered without one;
//!   MR_REGISTER has no field naming another key.
//! * ENDPOINT_DESTROY removes the endpoint's regions; FUNCTION_RESET removes all.

use std::collections::HashMap;

/// What a remote request wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RmaAccess {
    Read,
    Write,
}

/// One registered region.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemoryRegion {
    pub handle: u32,
    pub iova: u64,
    pub len: u64,
    pub access: u8,
    /// Serial number of the owning endpoint.
    pub serial: u64,
    /// The owning endpoint's own JobID: the only one whose requests reach the region.
    pub job_id: u32,
    pub resource_index: u16,
}

/// Why a registration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MrError {
    KeyExists,
    Full,
}

/// The NIC's memory regions, by key.
#[derive(Debug)]
pub(crate) struct MrTable {
    max: u32,
    by_key: HashMap<u64, MemoryRegion>,
    key_of: HashMap<u32, u64>,
    next_handle: u32,
}

impl MrTable {
    pub(crate) fn new(max: u32) -> Self {
        MrTable {
            max,
            by_key: HashMap::new(),
            key_of: HashMap::new(),
            next_handle: 1,
        }
    }

    /// Add a region; returns its handle. Nothing changes on error.
    pub(crate) fn register(&mut self, key: u64, mut mr: MemoryRegion) -> Result<u32, MrError> {
        if self.by_key.contains_key(&key) {
            return Err(MrError::KeyExists);
        }
        if self.by_key.len() >= self.max as usize {
            return Err(MrError::Full);
        }
        // After the counter wraps, a handle still naming a region is skipped: there are fewer
        // regions than handles, so a free one is found.
        let mut handle = self.next_handle;
        while self.key_of.contains_key(&handle) {
            handle = handle.wrapping_add(1).max(1);
        }
        self.next_handle = handle.wrapping_add(1).max(1);
        mr.handle = handle;
        self.by_key.insert(key, mr);
        self.key_of.insert(handle, key);
        Ok(handle)
    }

    /// Remove the region `handle` if its key is `key`.
    pub(crate) fn deregister(&mut self, handle: u32, key: u64) -> bool {
        if self.key_of.get(&handle) != Some(&key) {
            return false;
        }
        self.key_of.remove(&handle);
        self.by_key.remove(&key);
        true
    }

    /// Remove every region of an endpoint.
    pub(crate) fn remove_endpoint(&mut self, serial: u64) {
        self.by_key.retain(|_, mr| mr.serial != serial);
        let by_key = &self.by_key;
        self.key_of.retain(|_, k| by_key.contains_key(k));
    }

    /// The handle of the region a request of `len` bytes at `offset` reaches and the IOVA it
    /// may use there, or `None`: a permission violation. `(serial, job_id)`: the endpoint the
    /// request reached and the JobID it carries.
    pub(crate) fn check(
        &self,
        key: u64,
        (serial, job_id): (u64, u32),
        resource_index: u16,
        access: RmaAccess,
        offset: u64,
        len: u64,
    ) -> Option<(u32, u64)> {
        let mr = self.by_key.get(&key)?;
        let want = match access {
            RmaAccess::Read => uet_fwif::admin::MR_ACCESS_REMOTE_READ,
            RmaAccess::Write => uet_fwif::admin::MR_ACCESS_REMOTE_WRITE,
        };
        let end = offset.checked_add(len)?;
        let ok = mr.serial == serial
            && mr.job_id == job_id
            && mr.resource_index == resource_index
            && mr.access & want != 0
            && end <= mr.len;
        if !ok {
            return None;
        }
        Some((mr.handle, mr.iova.checked_add(offset)?))
    }

    /// Regions registered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }

    pub(crate) fn clear(&mut self) {
        *self = MrTable::new(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uet_fwif::admin::{MR_ACCESS_REMOTE_READ, MR_ACCESS_REMOTE_WRITE};

    const JOB: u32 = 0x11;

    fn mr(access: u8) -> MemoryRegion {
        MemoryRegion {
            handle: 0,
            iova: 0x1000,
            len: 100,
            access,
            serial: 7,
            job_id: JOB,
            resource_index: 3,
        }
    }

    #[test]
    fn every_check_is_enforced() {
        let mut t = MrTable::new(2);
        let h = t.register(0xAB, mr(MR_ACCESS_REMOTE_WRITE)).unwrap();
        assert_eq!(
            t.register(0xAB, mr(MR_ACCESS_REMOTE_READ)),
            Err(MrError::KeyExists)
        );
        let w = RmaAccess::Write;
        assert_eq!(
            t.check(0xAB, (7, JOB), 3, w, 10, 90),
            Some((h, 0x1000 + 10))
        );
        assert_eq!(t.check(0xAC, (7, JOB), 3, w, 10, 90), None, "wrong key");
        assert_eq!(
            t.check(0xAB, (8, JOB), 3, w, 10, 90),
            None,
            "other endpoint"
        );
        assert_eq!(
            t.check(0xAB, (7, JOB + 1), 3, w, 10, 90),
            None,
            "a JobID the endpoint accepts through a grant"
        );
        assert_eq!(
            t.check(0xAB, (7, JOB), 4, w, 10, 90),
            None,
            "other resource index"
        );
        assert_eq!(t.check(0xAB, (7, JOB), 3, w, 10, 91), None, "past the end");
        assert_eq!(t.check(0xAB, (7, JOB), 3, w, u64::MAX, 2), None, "overflow");
        assert_eq!(
            t.check(0xAB, (7, JOB), 3, RmaAccess::Read, 0, 1),
            None,
            "write-only"
        );
        assert!(!t.deregister(h, 0xAC), "the key must match");
        t.register(0x01, mr(MR_ACCESS_REMOTE_READ)).unwrap();
        assert_eq!(
            t.register(0x02, mr(MR_ACCESS_REMOTE_READ)),
            Err(MrError::Full)
        );
        assert!(t.deregister(h, 0xAB));
        assert_eq!(t.check(0xAB, (7, JOB), 3, w, 0, 1), None, "gone");
        t.remove_endpoint(7);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn handles_wrapping_around_skip_a_region_still_registered() {
        let mut t = MrTable::new(4);
        let old = t.register(0x01, mr(MR_ACCESS_REMOTE_WRITE)).unwrap();
        assert_eq!(old, 1);
        // 2^32 - 1 registrations later the counter is back at the top of its range.
        t.next_handle = u32::MAX;
        let last = t.register(0x02, mr(MR_ACCESS_REMOTE_WRITE)).unwrap();
        assert_eq!(last, u32::MAX);
        let wrapped = t.register(0x03, mr(MR_ACCESS_REMOTE_WRITE)).unwrap();
        assert_ne!(
            wrapped, old,
            "handle {old} still names the region of key 0x01"
        );
        assert_ne!(wrapped, 0);
        // Each region is deregistered by its own handle and key.
        assert!(t.deregister(wrapped, 0x03));
        assert!(t.deregister(old, 0x01), "the first region keeps its handle");
        assert!(t.deregister(last, 0x02));
        assert_eq!(t.len(), 0);
        assert_eq!(
            t.check(0x01, (7, JOB), 3, RmaAccess::Write, 0, 1),
            None,
            "gone"
        );
    }
}
