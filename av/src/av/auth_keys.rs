//! Auth keys in the AV: `FI_AV_AUTH_KEY` domains, `fi_av_insert_auth_key`,
//! `fi_av_lookup_auth_key`, and `FI_AUTH_KEY` on insert, remove and `fi_av_set_user_id`.
//!
//! An AV whose domain was opened with `auth_key_size` = [`FI_AV_AUTH_KEY`]
//! ([`AvAttr::auth_key_size`](super::AvAttr::auth_key_size)) holds auth keys. For this NIC an
//! auth key is a JobID: [`AUTH_KEY_BYTES`] = 4 bytes, little-endian, top byte zero
//! (`uet_fwif::auth_key`). Each key takes one slot of the NIC's auth-key table
//! ([`NicAvTable::add_auth_key`]); endpoints enabled with the AV are granted the slots of the
//! keys it holds at that moment (the driver does this at endpoint creation), and accept
//! requests carrying those JobIDs besides their own.
//!
//! ## Handles
//!
//! [`AddressVector::insert_auth_key`] returns an *auth-key handle*: [`AUTH_KEY_ADDR_BASE`]
//! plus the key's number (the lowest unused, from 0). As fi_av(3) says, a call that takes an
//! auth-key handle needs `FI_AUTH_KEY`; without it the value is taken as an address
//! `fi_addr_t`, which it never is (bits 48–63 are `0xFFFD`: no index has them, and an
//! auth-key AV keeps at most 15 receive-context bits, so no receive context sets them either),
//! so such a call fails with `FI_EINVAL` rather than touching an address.
//! [`AddressVector::lookup_auth_key`], which takes no flags, tells the two apart by value.
//!
//! ## Calls
//!
//! | call | what | errors (nothing changes) |
//! |---|---|---|
//! | `insert_auth_key(key, 0)` | a new key: one AUTH_KEY_ADD; a key already held returns its handle again and counts the insert | `FI_EBADFLAGS` flags; `FI_EINVAL` AV without auth keys, key not 4 bytes, JobID wider than 24 bits; `FI_ENOSPC` AV's keys or NIC's slots all in use; `FI_EIO` NIC refused; `FI_EAGAIN` NIC had no room for the command |
//! | `insert*(…, FI_AUTH_KEY)` | `fi_addr[i]` holds on input the handle of the key address `i` is inserted against; on output its `fi_addr_t`. Its NIC entry carries the key's slot (`AUTH_KEY`), so requests to it carry the key's JobID | `FI_EINVAL` AV without auth keys, no `fi_addr` array, a slot that is not a held key's handle (its position named), `FI_AV_USER_ID` beside it |
//! | `insert*` without `FI_AUTH_KEY` | the address is bound to no key; requests to it carry the AV's JobID | — |
//! | `lookup_auth_key(fi_addr, key, size)` | the key of an auth-key handle, or of the key an address was inserted against; at most `*size` bytes written (truncated), `*size` set to 4 | `FI_EINVAL` AV without auth keys, `fi_addr` neither a held key nor an inserted address; `FI_ENOKEY` an address inserted without a key |
//! | `remove(handles, FI_AUTH_KEY)` | drops one insert of each key; a key goes (AUTH_KEY_REMOVE) with its last | `FI_EINVAL` AV without auth keys, a value that is no held key, a key listed twice; `FI_EBUSY` (for the last insert of a key only) an endpoint enabled with it is still open, or addresses inserted against it remain; `FI_EIO` NIC refused (keys before it in the list are removed, or lost an insert); `FI_EAGAIN` NIC had no room for the command of a key when nothing of the list had changed before it (no key removed or left with one insert less; else `FI_EIO`) |
//! | `set_user_id(handle, id, FI_AUTH_KEY)` | the key's user id: what a receive completion reports as the source of a request that arrived through the key from an address not in the AV | `FI_EINVAL` AV without `FI_AV_USER_ID` or without auth keys, no such key; `FI_EIO` NIC refused, `FI_EAGAIN` NIC had no room for the command (old id kept either way) |
//!
//! Without `FI_AV_USER_ID` a key reports its handle as that source; with it, `FI_ADDR_NOTAVAIL`
//! until a user id is set (fi_av(3), `FI_SOURCE_ERR`). The per-insert `FI_AV_USER_ID` flag is
//! `FI_EINVAL` on an auth-key AV, as fi_av(3) says.
//!
//! A key costs about 32 bytes on the host; the key bound to each index is kept in an array of
//! 2 bytes per index, allocated the first time an address is inserted against a key.

use uet_fwif::auth_key::{job_id_from_auth_key, job_id_to_auth_key, AuthKeyEntry, AUTH_KEY_BYTES};

use super::AddressVector;
use crate::errno::{FiErrno, FiError};
use crate::flags::{FiAddr, FI_ADDR_NOTAVAIL, FI_AV_AUTH_KEY, FI_AV_USER_ID};
use crate::nic::NicAvTable;

/// First auth-key handle: [`AddressVector::insert_auth_key`] returns this plus the key's
/// number.
pub const AUTH_KEY_ADDR_BASE: FiAddr = 0xFFFD_0000_0000_0000;

/// Whether `fi_addr` has the form of an auth-key handle.
pub const fn is_auth_key_addr(fi_addr: FiAddr) -> bool {
    fi_addr >> 48 == AUTH_KEY_ADDR_BASE >> 48
}

/// Most receive-context bits an auth-key AV may have: more would let an address with a
/// receive context take the form of an auth-key handle.
pub const AUTH_KEY_MAX_RX_CTX_BITS: u8 = 15;

/// The `auth_key_size` values a domain may have: 0 (the domain's key is the AV's JobID),
/// [`AUTH_KEY_BYTES`] (likewise, given as a key) or [`FI_AV_AUTH_KEY`].
pub(crate) fn check_auth_key_size(call: &str, size: usize) -> Result<(), FiError> {
    if size == 0 || size == AUTH_KEY_BYTES || size == FI_AV_AUTH_KEY {
        return Ok(());
    }
    Err(FiError::inval(format!(
        "{call}: auth_key_size {size}: an auth key of this NIC is a {AUTH_KEY_BYTES}-byte \
         JobID (or FI_AV_AUTH_KEY puts the keys in the AV)"
    )))
}

/// One key of the AV.
#[derive(Clone, Copy, Debug)]
struct Key {
    job_id: u32,
    /// NIC auth-key slot.
    slot: u16,
    /// Set with `set_user_id(FI_AUTH_KEY)`.
    user_id: Option<u64>,
    /// `insert_auth_key` calls not yet matched by a remove.
    inserts: u32,
    /// Addresses inserted against the key and not removed.
    bound: u32,
}

/// The auth keys of an AV opened in an `FI_AV_AUTH_KEY` domain.
#[derive(Debug, Default)]
pub(super) struct AuthKeys {
    keys: Vec<Option<Key>>,
    /// Per index: 1 + the number of the key the address was inserted against, 0 for none.
    by_index: Vec<u16>,
    /// Most keys (the NIC's slots).
    max: u16,
    /// Keys whose AUTH_KEY_SOURCE went unanswered: the NIC may report another source for
    /// them until the AV sends theirs again ([`AddressVector::repair`]).
    pub(super) source_in_doubt: Vec<u16>,
}

impl AuthKeys {
    pub(super) fn new(max: u16) -> Self {
        AuthKeys {
            keys: Vec::new(),
            by_index: Vec::new(),
            max,
            source_in_doubt: Vec::new(),
        }
    }

    fn key(&self, n: u16) -> Option<&Key> {
        self.keys.get(usize::from(n))?.as_ref()
    }

    fn key_mut(&mut self, n: u16) -> Option<&mut Key> {
        self.keys.get_mut(usize::from(n))?.as_mut()
    }

    /// The key number a handle names, when the AV holds that key.
    fn number(&self, handle: FiAddr) -> Option<u16> {
        if !is_auth_key_addr(handle) {
            return None;
        }
        let n = u16::try_from(handle & !AUTH_KEY_ADDR_BASE).ok()?;
        self.key(n).map(|_| n)
    }

    /// The key number bound to `index`.
    #[inline]
    pub(super) fn bound_to(&self, index: u32) -> Option<u16> {
        match self.by_index.get(index as usize).copied() {
            Some(k) if k > 0 => Some(k - 1),
            _ => None,
        }
    }

    /// The NIC slot of the key bound to `index`.
    #[inline]
    pub(super) fn slot_of_index(&self, index: u32) -> Option<u16> {
        self.bound_to(index)
            .and_then(|k| self.key(k))
            .map(|k| k.slot)
    }

    /// Make room to bind `index`.
    pub(super) fn reserve(&mut self, index: u32, cap: u32) -> Result<(), FiError> {
        let len = index as usize + 1;
        if len > self.by_index.len() {
            let step = (self.by_index.len() / 4).max(1024);
            let want = (self.by_index.len() + step)
                .max(len)
                .min(cap as usize)
                .max(len);
            self.by_index
                .try_reserve_exact(want - self.by_index.len())
                .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, "no memory for auth-key bindings"))?;
            self.by_index.resize(want, 0);
        }
        Ok(())
    }

    /// Bind `index` (reserved) to key `n`.
    pub(super) fn bind(&mut self, index: u32, n: u16) {
        if let Some(k) = self.key_mut(n) {
            k.bound = k.bound.saturating_add(1);
        }
        if let Some(b) = self.by_index.get_mut(index as usize) {
            *b = n.saturating_add(1);
        }
    }

    /// Forget the binding of `index` (the address was removed).
    pub(super) fn unbind(&mut self, index: u32) {
        if let Some(n) = self.bound_to(index) {
            if let Some(k) = self.key_mut(n) {
                k.bound = k.bound.saturating_sub(1);
            }
            if let Some(b) = self.by_index.get_mut(index as usize) {
                *b = 0;
            }
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.keys.capacity() * core::mem::size_of::<Option<Key>>()
            + self.by_index.capacity() * core::mem::size_of::<u16>()
            + self.source_in_doubt.capacity() * core::mem::size_of::<u16>()
    }
}

/// An auth key of the AV, as [`AddressVector::auth_keys`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthKeyInfo {
    /// Its handle (`fi_addr_t`).
    pub handle: FiAddr,
    /// The JobID.
    pub job_id: u32,
    /// The NIC auth-key slot.
    pub slot: u16,
    /// The user id set with `set_user_id(FI_AUTH_KEY)`.
    pub user_id: Option<u64>,
    /// Addresses inserted against it.
    pub bound: u32,
    /// What the NIC slot should report as the source.
    pub source: u64,
}

/// A key whose NIC slot does not hold what the AV says it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthKeyMismatch {
    /// The key.
    pub key: AuthKeyInfo,
    /// What the NIC's slot holds.
    pub nic: AuthKeyEntry,
}

impl<N: NicAvTable> AddressVector<N> {
    /// Whether the AV holds auth keys (its domain's `auth_key_size` is `FI_AV_AUTH_KEY`).
    pub fn has_auth_keys(&self) -> bool {
        self.auth.is_some()
    }

    fn auth_keys_of(&self, call: &str) -> Result<&AuthKeys, FiError> {
        self.auth.as_deref().ok_or_else(|| {
            FiError::inval(format!(
                "{call}: the AV's domain was not opened with auth_key_size FI_AV_AUTH_KEY"
            ))
        })
    }

    /// The source a key's NIC slot reports: its user id, or with `FI_AV_USER_ID`
    /// `FI_ADDR_NOTAVAIL` until one is set, or without it the key's handle.
    fn key_source(&self, n: u16, user_id: Option<u64>) -> u64 {
        match user_id {
            Some(u) => u,
            None if self.attr.flags & FI_AV_USER_ID != 0 => FI_ADDR_NOTAVAIL,
            None => AUTH_KEY_ADDR_BASE | u64::from(n),
        }
    }

    /// `fi_av_insert_auth_key`: add the auth key `auth_key` (a JobID, see the module docs) and
    /// return its handle. Flags are reserved: any is `FI_EBADFLAGS`.
    pub fn insert_auth_key(&mut self, auth_key: &[u8], flags: u64) -> Result<FiAddr, FiError> {
        const CALL: &str = "fi_av_insert_auth_key";
        if flags != 0 {
            return Err(FiError::badflags(format!(
                "{CALL}: flags are reserved and must be 0, not {}",
                crate::flags::flag_names(flags)
            )));
        }
        let keys = self.auth_keys_of(CALL)?;
        let job_id =
            job_id_from_auth_key(auth_key).map_err(|e| FiError::inval(format!("{CALL}: {e}")))?;
        let existing = keys
            .keys
            .iter()
            .position(|k| k.is_some_and(|k| k.job_id == job_id));
        if let Some(n) = existing.and_then(|n| u16::try_from(n).ok()) {
            if let Some(k) = self.auth.as_deref_mut().and_then(|a| a.key_mut(n)) {
                k.inserts = k.inserts.saturating_add(1);
            }
            return Ok(AUTH_KEY_ADDR_BASE | u64::from(n));
        }
        let free = keys
            .keys
            .iter()
            .position(Option::is_none)
            .unwrap_or(keys.keys.len());
        let n = u16::try_from(free)
            .ok()
            .filter(|&n| n < keys.max)
            .ok_or_else(|| {
                FiError::new(
                    FiErrno::FI_ENOSPC,
                    format!(
                        "{CALL}: the AV holds {} auth keys, all the NIC's auth-key table allows",
                        keys.max
                    ),
                )
            })?;
        if free == keys.keys.len() {
            self.auth
                .as_deref_mut()
                .map(|a| a.keys.try_reserve(1))
                .transpose()
                .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, format!("{CALL}: no memory")))?;
        }
        let source = self.key_source(n, None);
        let slot = self
            .nic
            .add_auth_key(job_id, source)
            .map_err(|e| e.within(format_args!("{CALL}: JobID {job_id:#x}")))?;
        let key = Key {
            job_id,
            slot,
            user_id: None,
            inserts: 1,
            bound: 0,
        };
        if let Some(a) = self.auth.as_deref_mut() {
            match a.keys.get_mut(free) {
                Some(k) => *k = Some(key),
                None => a.keys.push(Some(key)),
            }
        }
        tracing::debug!(job_id, slot, key = n, "auth key inserted");
        Ok(AUTH_KEY_ADDR_BASE | u64::from(n))
    }

    /// `fi_av_lookup_auth_key`: the auth key of `fi_addr` — an auth-key handle, or an address
    /// inserted against a key — into `auth_key`, at most `*auth_key_size` bytes (truncated),
    /// and `*auth_key_size` set to its full size, [`AUTH_KEY_BYTES`]. Errors (nothing
    /// written) in the module docs.
    pub fn lookup_auth_key(
        &self,
        fi_addr: FiAddr,
        auth_key: &mut [u8],
        auth_key_size: &mut usize,
    ) -> Result<(), FiError> {
        const CALL: &str = "fi_av_lookup_auth_key";
        let keys = self.auth_keys_of(CALL)?;
        let n = if is_auth_key_addr(fi_addr) {
            keys.number(fi_addr).ok_or_else(|| {
                FiError::inval(format!(
                    "{CALL}: fi_addr {fi_addr:#x} is no auth key of this AV (never inserted, \
                     or removed)"
                ))
            })?
        } else {
            let index = self.index_of(fi_addr).map_err(|e| e.within(CALL))?;
            keys.bound_to(index).ok_or_else(|| {
                FiError::new(
                    FiErrno::FI_ENOKEY,
                    format!(
                        "{CALL}: the address at index {index} was inserted without FI_AUTH_KEY \
                         and has no auth key"
                    ),
                )
            })?
        };
        let job_id = keys.key(n).map_or(0, |k| k.job_id);
        let bytes = job_id_to_auth_key(job_id);
        let len = (*auth_key_size).min(auth_key.len()).min(AUTH_KEY_BYTES);
        if let (Some(dst), Some(src)) = (auth_key.get_mut(..len), bytes.get(..len)) {
            dst.copy_from_slice(src);
        }
        *auth_key_size = AUTH_KEY_BYTES;
        Ok(())
    }

    /// Check the `fi_addr` array of an insert with `FI_AUTH_KEY`: every one of the first
    /// `count` values must be the handle of a key the AV holds.
    pub(super) fn check_insert_keys(
        &self,
        call: &str,
        count: usize,
        fi_addr: Option<&[FiAddr]>,
    ) -> Result<(), FiError> {
        // FI_AV_USER_ID beside it never gets here: check_insert refuses it on an auth-key AV.
        let keys = self.auth_keys_of(call)?;
        let Some(handles) = fi_addr else {
            return Err(FiError::inval(format!(
                "{call}: FI_AUTH_KEY needs the fi_addr array (it holds the auth-key handles)"
            )));
        };
        for (i, &h) in handles.iter().take(count).enumerate() {
            if keys.number(h).is_none() {
                return Err(FiError::inval(format!(
                    "{call}: FI_AUTH_KEY: fi_addr[{i}] = {h:#x} is no auth key of this AV"
                )));
            }
        }
        Ok(())
    }

    /// The key number an insert with `FI_AUTH_KEY` binds its address to (checked already).
    pub(super) fn insert_key(&self, handle: FiAddr) -> Option<u16> {
        self.auth.as_deref().and_then(|a| a.number(handle))
    }

    /// `fi_av_remove` with `FI_AUTH_KEY`: see the module docs.
    pub(super) fn remove_auth_keys(&mut self, handles: &[FiAddr]) -> Result<(), FiError> {
        const CALL: &str = "fi_av_remove";
        self.auth_keys_of(CALL)?;
        // As for any remove: inserts pending or in flight are settled first, and those the NIC
        // refused released, so that only addresses the AV holds count as bound to a key.
        self.settle_nic()?;
        let keys = self.auth_keys_of(CALL)?;
        let mut numbers: Vec<u16> = Vec::new();
        numbers
            .try_reserve(handles.len())
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, format!("{CALL}: no memory")))?;
        for (pos, &h) in handles.iter().enumerate() {
            let n = keys.number(h).ok_or_else(|| {
                FiError::inval(format!(
                    "{CALL}: FI_AUTH_KEY: fi_addr[{pos}] = {h:#x} is no auth key of this AV"
                ))
            })?;
            if numbers.contains(&n) {
                return Err(FiError::inval(format!(
                    "{CALL}: auth key {h:#x} is listed more than once"
                )));
            }
            let Some(k) = keys.key(n) else {
                continue;
            };
            if k.inserts > 1 {
                // Only one of its inserts goes: the key stays, and with it what uses it.
                numbers.push(n);
                continue;
            }
            let users = self.nic.auth_key_users(k.slot);
            if users > 0 {
                return Err(FiError::new(
                    FiErrno::FI_EBUSY,
                    format!(
                        "{CALL}: auth key {h:#x} (JobID {:#x}): {users} endpoints enabled with \
                         it are still open; close them first",
                        k.job_id
                    ),
                ));
            }
            if k.bound > 0 {
                return Err(FiError::new(
                    FiErrno::FI_EBUSY,
                    format!(
                        "{CALL}: auth key {h:#x} (JobID {:#x}): {} addresses inserted against \
                         it remain; remove them first",
                        k.job_id, k.bound
                    ),
                ));
            }
            numbers.push(n);
        }
        for (done, &n) in numbers.iter().enumerate() {
            let Some(k) = self.auth.as_deref().and_then(|a| a.key(n)).copied() else {
                continue;
            };
            if k.inserts > 1 {
                if let Some(k) = self.auth.as_deref_mut().and_then(|a| a.key_mut(n)) {
                    k.inserts -= 1;
                }
                continue;
            }
            if let Err(e) = self.nic.remove_auth_key(k.slot, k.job_id) {
                let handle = AUTH_KEY_ADDR_BASE | u64::from(n);
                if e.errno != FiErrno::FI_ETIMEDOUT {
                    let mut err = e.within(format_args!(
                        "{CALL}: removing auth key {handle:#x} ({done} of {} removed before it, \
                         the rest kept)",
                        numbers.len(),
                    ));
                    if done > 0 {
                        // The keys before it are removed (or lost an insert): retrying the
                        // call is not what `FI_EAGAIN` promises.
                        err.errno = FiErrno::FI_EIO;
                    }
                    return Err(err);
                }
                // Unanswered: the NIC may still free the slot, and could then give it to a
                // key added later, so the AV must not keep naming it. Nothing is bound to the
                // key (checked above), so it goes from the AV now; if the NIC never runs the
                // command, the slot stays the AV table's until AV_DESTROY frees it.
                self.forget_auth_key(n);
                return Err(e.within(format_args!(
                    "{CALL}: the NIC did not answer the removal of auth key {handle:#x}, which \
                     is removed from the AV all the same ({} of {} removed, the rest kept)",
                    done + 1,
                    numbers.len(),
                )));
            }
            self.forget_auth_key(n);
            tracing::debug!(key = n, slot = k.slot, "auth key removed");
        }
        Ok(())
    }

    /// `fi_av_set_user_id` with `FI_AUTH_KEY` (the AV's `FI_AV_USER_ID` was checked).
    pub(super) fn set_auth_key_user_id(
        &mut self,
        handle: FiAddr,
        user_id: FiAddr,
    ) -> Result<(), FiError> {
        const CALL: &str = "fi_av_set_user_id";
        let keys = self.auth_keys_of(CALL)?;
        let n = keys.number(handle).ok_or_else(|| {
            FiError::inval(format!(
                "{CALL}: FI_AUTH_KEY: {handle:#x} is no auth key of this AV"
            ))
        })?;
        let slot = keys.key(n).map_or(0, |k| k.slot);
        let source = self.key_source(n, Some(user_id));
        if let Err(e) = self.nic.set_auth_key_source(slot, source) {
            let resent = if e.errno == FiErrno::FI_ETIMEDOUT {
                // The NIC may still take the new source: the old one is sent again.
                // Noted once however often it goes unanswered: what is resent is the key's
                // source as the AV holds it then.
                if let Some(a) = self
                    .auth
                    .as_deref_mut()
                    .filter(|a| !a.source_in_doubt.contains(&n))
                {
                    a.source_in_doubt.push(n);
                }
                " (the NIC is sent it again at the next call that sends it anything)"
            } else {
                ""
            };
            return Err(e.within(format_args!(
                "{CALL}: the user id of auth key {handle:#x} is unchanged{resent}"
            )));
        }
        if let Some(k) = self.auth.as_deref_mut().and_then(|a| a.key_mut(n)) {
            k.user_id = Some(user_id);
        }
        Ok(())
    }

    /// Drop key `n` from the AV (its NIC slot is removed, or may be).
    fn forget_auth_key(&mut self, n: u16) {
        if let Some(a) = self.auth.as_deref_mut() {
            if let Some(slot) = a.keys.get_mut(usize::from(n)) {
                *slot = None;
            }
            a.source_in_doubt.retain(|&k| k != n);
        }
    }

    /// Send the NIC the source of every key whose AUTH_KEY_SOURCE went unanswered; those not
    /// sent stay in doubt. `FI_EIO` when the NIC leaves one unanswered again, the table's
    /// errno when it refuses one.
    pub(super) fn resend_auth_key_sources(&mut self) -> Result<(), FiError> {
        let Some(mut doubt) = self
            .auth
            .as_deref_mut()
            .map(|a| core::mem::take(&mut a.source_in_doubt))
        else {
            return Ok(());
        };
        doubt.sort_unstable();
        doubt.dedup();
        while let Some(&n) = doubt.last() {
            if let Some(k) = self.auth.as_deref().and_then(|a| a.key(n)).copied() {
                let source = self.key_source(n, k.user_id);
                if let Err(e) = self.nic.set_auth_key_source(k.slot, source) {
                    if let Some(a) = self.auth.as_deref_mut() {
                        a.source_in_doubt.extend(doubt);
                    }
                    // The call itself sent nothing: as for entries in doubt, an unanswered
                    // resend is `FI_EIO`, and a refusal keeps the table's errno.
                    let mut e = e.within(
                        "the source of an auth key is in doubt since a command went \
                         unanswered, and sending it again failed",
                    );
                    if e.errno == FiErrno::FI_ETIMEDOUT {
                        e.errno = FiErrno::FI_EIO;
                    }
                    return Err(e);
                }
            }
            doubt.pop();
        }
        Ok(())
    }

    /// The AV's auth keys, by handle.
    pub fn auth_keys(&self) -> impl Iterator<Item = AuthKeyInfo> + '_ {
        self.auth
            .as_deref()
            .into_iter()
            .flat_map(|a| a.keys.iter().enumerate())
            .filter_map(move |(n, k)| {
                let k = (*k)?;
                let n = u16::try_from(n).ok()?;
                Some(AuthKeyInfo {
                    handle: AUTH_KEY_ADDR_BASE | u64::from(n),
                    job_id: k.job_id,
                    slot: k.slot,
                    user_id: k.user_id,
                    bound: k.bound,
                    source: self.key_source(n, k.user_id),
                })
            })
    }

    /// The handle of the key the address at `fi_addr` was inserted against (`None`: no key).
    /// `FI_EINVAL` when `fi_addr` names no inserted address.
    pub fn auth_key_of(&self, fi_addr: FiAddr) -> Result<Option<FiAddr>, FiError> {
        let index = self.index_of(fi_addr)?;
        Ok(self
            .auth
            .as_deref()
            .and_then(|a| a.bound_to(index))
            .map(|n| AUTH_KEY_ADDR_BASE | u64::from(n)))
    }

    /// Slots of the NIC's auth-key table that this AV's table owns and no key of the AV names,
    /// read back whole (AUTH_KEY_READ): what an AUTH_KEY_ADD the NIC ran after the driver gave
    /// up on it left behind where the driver could not undo it (a device older than interface
    /// 1.9), or an undo the NIC refused. Such a slot is harmless, since no entry of the AV
    /// names it, but holds a place of the table until AV_DESTROY frees it. Empty for an AV
    /// without auth keys, or a table that does not know its handle. A read that fails fails
    /// the call as for [`AddressVector::verify_auth_keys`].
    pub fn stray_auth_key_slots(&mut self) -> Result<Vec<(u16, AuthKeyEntry)>, FiError> {
        let (Some(keys), Some(owner)) = (self.auth.as_deref(), self.nic.table_handle()) else {
            return Ok(Vec::new());
        };
        let mut nic = Vec::new();
        nic.try_reserve_exact(usize::from(keys.max))
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, "stray auth-key slots: no memory"))?;
        nic.resize(usize::from(keys.max), AuthKeyEntry::default());
        if !nic.is_empty() {
            self.nic
                .read_auth_keys(0, &mut nic)
                .map_err(|e| e.within("stray auth-key slots: reading the auth-key table"))?;
        }
        Ok((0..keys.max)
            .zip(nic)
            .filter(|(slot, e)| {
                e.is_valid()
                    && e.av.get() == owner
                    && !keys.keys.iter().flatten().any(|k| k.slot == *slot)
            })
            .collect())
    }

    /// Read the NIC's slot of every key back (AUTH_KEY_READ) and compare it with what the AV
    /// says it should hold: in use, owned by this AV's table (when the table knows its handle,
    /// [`NicAvTable::table_handle`]), the key's JobID, the key's source. A read that fails
    /// fails the call with the table's errno (`FI_EIO` refused, `FI_EAGAIN` no room for it,
    /// `FI_ETIMEDOUT` unanswered).
    pub fn verify_auth_keys(&mut self) -> Result<Vec<AuthKeyMismatch>, FiError> {
        let keys: Vec<AuthKeyInfo> = self.auth_keys().collect();
        let mut out = Vec::new();
        for key in keys {
            let mut e = [AuthKeyEntry::default()];
            self.nic.read_auth_keys(key.slot, &mut e).map_err(|err| {
                err.within(format_args!("verify: reading auth-key slot {}", key.slot))
            })?;
            let nic = e[0];
            let owner = self.nic.table_handle();
            let same = nic.is_valid()
                && owner.is_none_or(|h| nic.av.get() == h)
                && nic.job_id.get() == key.job_id
                && nic.source.get() == key.source;
            if !same {
                out.push(AuthKeyMismatch { key, nic });
            }
        }
        Ok(out)
    }
}
