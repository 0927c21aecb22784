//! The auth-key table: which JobIDs a function's endpoints accept besides their own.
//!
//! UET carries a 24-bit JobID in every request (SES bytes 4–7). An endpoint always accepts its
//! own JobID (ENDPOINT_CREATE). The *auth-key table* of a function holds up to
//! `CAP_AUTH_KEY.slots` further JobIDs, one per slot; an endpoint granted a slot accepts that
//! slot's JobID too, and an AV entry with the `AUTH_KEY` flag sends with its slot's JobID
//! instead of the entry's `job_id`. This is libfabric's `FI_AV_AUTH_KEY` model: the AV holds
//! the keys, endpoints are enabled with the AV's keys, and each address is inserted against one
//! key.
//!
//! ## Auth-key byte form
//!
//! The `auth_key` of `fi_av_insert_auth_key`/`fi_av_lookup_auth_key` for this NIC is the JobID
//! as [`AUTH_KEY_BYTES`] = 4 bytes, little-endian, top byte zero ([`job_id_to_auth_key`],
//! [`job_id_from_auth_key`]).
//!
//! ## Commands
//!
//! | opcode | handle | body | result0 | checks (status) |
//! |---|---|---|---|---|
//! | `AUTH_KEY_ADD` 0x50 | AV that owns the slot | [`AuthKeyAddBody`] | slot | AV exists (InvalidHandle); JobID within 24 bits, reserved zero (InvalidField); a free slot (NoResources) |
//! | `AUTH_KEY_REMOVE` 0x51 | slot | [`AuthKeyRemoveBody`] | — | flags and reserved bytes defined (InvalidField); slot in use, and with [`AUTH_KEY_REMOVE_CHECK_OWNER`] owned by `av` and holding `job_id` (InvalidHandle); no endpoint granted it (Busy) |
//! | `AUTH_KEY_SOURCE` 0x52 | slot | [`AuthKeySourceBody`] | — | slot in use (InvalidHandle) |
//! | `AUTH_KEY_READ` 0x53 | 0 | `RangeBody`: `count` × [`AuthKeyEntry`] from slot `first` into `buf` | slots read | `first + count <= CAP_AUTH_KEY.slots` (IndexOutOfRange); written by DMA (DmaFault) |
//! | `ENDPOINT_AUTH_KEYS` 0x54 | endpoint | [`EndpointAuthKeysBody`] | slots granted | endpoint exists (InvalidHandle); no bit at or above `CAP_AUTH_KEY.slots` (InvalidField); every granted slot in use and owned by the endpoint's AV (InvalidHandle) |
//!
//! The NIC assigns the lowest free slot. A slot belongs to the AV table named at AUTH_KEY_ADD:
//! only endpoints bound to that AV may be granted it, only that AV's entries may name it
//! (AV_WRITE of an `AUTH_KEY` entry naming another slot completes InvalidField), and
//! AV_DESTROY frees the AV's slots. ENDPOINT_AUTH_KEYS *replaces* the endpoint's granted set
//! (an all-zero map revokes every grant); ENDPOINT_DESTROY revokes the endpoint's grants.
//! AUTH_KEY_REMOVE of a slot granted to any endpoint completes Busy.
//!
//! AUTH_KEY_REMOVE names a slot by number, and a freed slot goes to the next AUTH_KEY_ADD of
//! any AV. A remove sent when the sender cannot be sure the slot is still the one it means (the
//! undo of an AUTH_KEY_ADD that completed after the driver gave up on it, when the owning AV may
//! have been destroyed and its slot handed to another AV meanwhile) sets
//! [`AUTH_KEY_REMOVE_CHECK_OWNER`] with the owner and JobID it means: the NIC removes the slot
//! only if it still holds exactly that, and otherwise completes InvalidHandle having changed
//! nothing (since interface 1.9; an all-zero body removes whatever the slot holds, as before).
//! AUTH_KEY_REMOVE does not look at AV entries: a send through an entry whose slot was removed completes `AddrNotAvail` (the host
//! removes or rewrites such entries first). FUNCTION_RESET empties the table.
//!
//! ## Demultiplexing and the source of a request
//!
//! The RX engine accepts a request for an endpoint only when the request's JobID is the
//! endpoint's own or the JobID of a slot granted to it, in relative and absolute addressing
//! alike; otherwise RC_BAD_JOB_ID and `RX_BAD_JOB_ID`. A slot's `source` is what a receive
//! completion reports as `src_addr` for a request accepted through that slot whose sender is
//! in no entry of the endpoint's AV: the host sets it to the key's `fi_addr_t` handle, or to
//! the key's user id (`fi_av_set_user_id` with `FI_AUTH_KEY`), or `FI_ADDR_NOTAVAIL`.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::av_entry::MAX_JOB_ID;

/// Size of an auth key in the fi_av calls: a JobID, 4 bytes little-endian, top byte zero.
pub const AUTH_KEY_BYTES: usize = 4;

/// Most slots any function can have: [`EndpointAuthKeysBody::slots`] is a map of this many
/// bits. `CAP_AUTH_KEY.slots` is at most this.
pub const MAX_AUTH_KEY_SLOTS: u16 = 256;

/// Why bytes are not an auth key of this NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthKeyError {
    /// The key is not [`AUTH_KEY_BYTES`] long.
    #[error("an auth key of this NIC is a JobID of {AUTH_KEY_BYTES} bytes, not {0}")]
    Size(usize),
    /// The top byte is not zero: a JobID has 24 bits.
    #[error("JobID {0:#x} is wider than 24 bits (the auth key's top byte must be 0)")]
    TooWide(u32),
}

/// The JobID an auth key holds.
pub fn job_id_from_auth_key(key: &[u8]) -> Result<u32, AuthKeyError> {
    let bytes: [u8; AUTH_KEY_BYTES] = key.try_into().map_err(|_| AuthKeyError::Size(key.len()))?;
    let job = u32::from_le_bytes(bytes);
    if job > MAX_JOB_ID {
        return Err(AuthKeyError::TooWide(job));
    }
    Ok(job)
}

/// The auth key of `job_id` (its low 24 bits).
pub fn job_id_to_auth_key(job_id: u32) -> [u8; AUTH_KEY_BYTES] {
    (job_id & MAX_JOB_ID).to_le_bytes()
}

/// Body of AUTH_KEY_ADD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct AuthKeyAddBody {
    /// The JobID (24 bits).
    pub job_id: U32,
    /// Reserved, zero.
    pub reserved0: U32,
    /// Initial `source` of the slot (see the module docs).
    pub source: U64,
    /// Reserved, zero.
    pub reserved: [u8; 40],
}

/// Bit of [`AuthKeyRemoveBody::flags`]: remove the slot only if it is owned by
/// [`AuthKeyRemoveBody::av`] and holds [`AuthKeyRemoveBody::job_id`] (since interface 1.9).
pub const AUTH_KEY_REMOVE_CHECK_OWNER: u32 = 1 << 0;

/// Body of AUTH_KEY_REMOVE. All zero: remove the slot whatever it holds. With
/// [`AUTH_KEY_REMOVE_CHECK_OWNER`]: only the slot of AV table `av` holding `job_id`.
/// Without the flag `av` and `job_id` must be zero; other flag bits are InvalidField.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct AuthKeyRemoveBody {
    /// [`AUTH_KEY_REMOVE_CHECK_OWNER`], or 0.
    pub flags: U32,
    /// The AV table the slot must belong to (with the flag).
    pub av: U32,
    /// The JobID the slot must hold (with the flag).
    pub job_id: U32,
    /// Reserved, zero.
    pub reserved: [u8; 44],
}

impl AuthKeyRemoveBody {
    /// The body of a remove of whatever the slot holds.
    pub fn unchecked() -> Self {
        Self::new_zeroed()
    }

    /// The body of a remove of the slot only while AV table `av` owns it with `job_id`.
    pub fn owned_by(av: u32, job_id: u32) -> Self {
        let mut b = Self::new_zeroed();
        b.flags = U32::new(AUTH_KEY_REMOVE_CHECK_OWNER);
        b.av = U32::new(av);
        b.job_id = U32::new(job_id);
        b
    }

    /// The owner and JobID the slot must hold, when the body asks for the check.
    pub fn required_owner(&self) -> Option<(u32, u32)> {
        (self.flags.get() & AUTH_KEY_REMOVE_CHECK_OWNER != 0)
            .then(|| (self.av.get(), self.job_id.get()))
    }
}

/// Body of AUTH_KEY_SOURCE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct AuthKeySourceBody {
    /// The slot's new `source`.
    pub source: U64,
    /// Reserved, zero.
    pub reserved: [u8; 48],
}

/// Body of ENDPOINT_AUTH_KEYS: the slots granted to the endpoint, replacing its previous set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct EndpointAuthKeysBody {
    /// Bit `s % 8` of byte `s / 8` grants slot `s`.
    pub slots: [u8; 32],
    /// Reserved, zero.
    pub reserved: [u8; 24],
}

impl EndpointAuthKeysBody {
    /// A body granting `slots` (slots at or above [`MAX_AUTH_KEY_SLOTS`] are ignored).
    pub fn granting(slots: impl IntoIterator<Item = u16>) -> Self {
        let mut b = EndpointAuthKeysBody::new_zeroed();
        for s in slots {
            if let Some(byte) = b.slots.get_mut(usize::from(s / 8)) {
                *byte |= 1 << (s % 8);
            }
        }
        b
    }

    /// The granted slots, ascending.
    pub fn granted(&self) -> impl Iterator<Item = u16> + '_ {
        (0..MAX_AUTH_KEY_SLOTS).filter(|&s| {
            self.slots
                .get(usize::from(s / 8))
                .is_some_and(|b| b >> (s % 8) & 1 == 1)
        })
    }
}

/// Bit of [`AuthKeyEntry::flags`]: the slot is in use.
pub const AUTH_KEY_VALID: u16 = 1 << 0;

/// One slot as AUTH_KEY_READ returns it. 24 bytes, little-endian.
///
/// | bytes | field | meaning |
/// |---|---|---|
/// | 0–3 | `job_id` | the slot's JobID |
/// | 4–5 | `flags` | [`AUTH_KEY_VALID`] |
/// | 6–7 | `grants` | endpoints granted the slot |
/// | 8–11 | `av` | the AV table that owns the slot |
/// | 12–15 | reserved | 0 |
/// | 16–23 | `source` | reported as the source of requests accepted through the slot |
///
/// A free slot reads as all zero.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct AuthKeyEntry {
    /// JobID.
    pub job_id: U32,
    /// [`AUTH_KEY_VALID`].
    pub flags: U16,
    /// Endpoints granted the slot.
    pub grants: U16,
    /// Owning AV handle.
    pub av: U32,
    /// Reserved, zero.
    pub reserved: U32,
    /// Source reported for requests accepted through the slot.
    pub source: U64,
}

const _: () = assert!(core::mem::size_of::<AuthKeyEntry>() == 24);

impl AuthKeyEntry {
    /// Whether the slot is in use.
    pub fn is_valid(&self) -> bool {
        self.flags.get() & AUTH_KEY_VALID != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_key_bytes_are_a_little_endian_job_id() {
        assert_eq!(job_id_to_auth_key(0x12_3456), [0x56, 0x34, 0x12, 0]);
        assert_eq!(job_id_from_auth_key(&[0x56, 0x34, 0x12, 0]), Ok(0x12_3456));
        assert_eq!(job_id_from_auth_key(&[1, 2, 3]), Err(AuthKeyError::Size(3)));
        assert_eq!(
            job_id_from_auth_key(&[0, 0, 0, 1]),
            Err(AuthKeyError::TooWide(0x0100_0000))
        );
    }

    #[test]
    fn grant_map_round_trips() {
        let b = EndpointAuthKeysBody::granting([0, 9, 255, 300]);
        assert_eq!(b.granted().collect::<Vec<_>>(), vec![0, 9, 255]);
        assert_eq!(b.slots[1], 0b10);
    }
}
