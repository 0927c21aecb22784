//! The address vector: fi_av(3) semantics over a host mirror and a NIC AV table.
//!
//! The mirror answers `fi_av_lookup` and `fi_av_straddr`, dumps and verification, and is what
//! the NIC table is rebuilt from; the NIC table is what the datapath reads. Every change goes to
//! both, and a command the NIC refuses is undone on the host, so the two never disagree
//! (pending `FI_MORE` records aside, which exist only until the batch is sent). A command the
//! NIC does not answer may still run late: its entries are rewritten from the mirror at the
//! next call (see "When the NIC does not answer").
//!
//! ## Choices where fi_av(3) leaves room
//!
//! - **Type.** Every AV is `FI_AV_TABLE`: `FI_AV_MAP` and `FI_AV_UNSPEC` are accepted and
//!   behave as TABLE (as libfabric 2.x specifies for MAP); [`AddressVector::av_type`] and
//!   [`AddressVector::attr`] report `Table`.
//! - **Size.** `count` is the size of the NIC table, fixed at open (the NIC allocates it with
//!   AV_CREATE). `count` 0 means [`DEFAULT_AV_COUNT`] entries rounded up to whole nodes of
//!   `ep_per_node` endpoints, or the NIC's maximum if smaller. A `count` above
//!   [`AvLimits::max_entries`] is `FI_ENOSPC`: the NIC has no table that large.
//! - **Open attributes** are all checked, each failure with an errno of its own
//!   ([`AvAttr::resolve`] lists them): `rx_ctx_bits` against the NIC's decode limit and the
//!   receive contexts an endpoint can have (`FI_EOVERFLOW`), `ep_per_node` (a sizing hint)
//!   against the endpoints (`FI_E2BIG`), `flags` against `FI_EVENT`, `FI_AV_USER_ID`,
//!   `FI_SYMMETRIC` (accepted as the hint it is) and `FI_READ` (which needs a name;
//!   `FI_EBADFLAGS` for any other). The domain the AV is opened in narrows the context limits
//!   and checks `type` and `flags` against its `av_type` and capabilities
//!   ([`crate::domain`]). A `name` opens a named AV shared by the processes of a node:
//!   [`crate::NamedAv`] (see [`crate::named`]); [`AddressVector::open`] itself refuses a name
//!   (`FI_EINVAL`) rather than ignore it. `map_addr` is ignored without a name, as fi_av(3)
//!   says.
//! - **Full table.** An address that finds no free index fails alone, like a malformed one: its
//!   `fi_addr` slot gets `FI_ADDR_NOTAVAIL` and it is not counted in the return value, which is
//!   how fi_av(3) reports per-address failures. The call itself never fails for it.
//! - **`FI_MORE`.** Honoured: the mirror changes at once (lookup works immediately), the NIC
//!   records wait, and the next insert without `FI_MORE` sends every waiting record in one
//!   write command (in [`MAX_BATCH`] chunks only when larger): AV_WRITE_PEERS, the peers'
//!   addresses as the mirror holds them, when they are new single entries at consecutive
//!   indices with no user id or auth key (what a fresh AV's inserts are), AV_WRITE otherwise.
//!   Below, "AV_WRITE" stands for either. A remove, [`AddressVector::flush`] or
//!   [`AddressVector::verify_nic`] also sends them first.
//! - **A refused AV_WRITE** rolls back every insert of the batch, including those of earlier
//!   `FI_MORE` calls that already returned their indices, and the call returns `FI_EIO` with the
//!   NIC's message (`FI_EAGAIN` when the NIC had no room for the command, nothing was kept and
//!   the batch was this call's alone: the same call may succeed later; rolling back what
//!   earlier calls reported is a change, so `FI_EIO`); this call's rolled-back `fi_addr` slots
//!   are reset to `FI_ADDR_NOTAVAIL` and their status slots get the call's errno, and its
//!   indices are free again. The earlier calls' indices are *lost* ([`lost`]): they hold no
//!   address, and no insert takes them until `fi_av_remove` frees them, so a `fi_addr_t` the
//!   application still holds never comes to name another peer.
//!   Chunks of the batch that the NIC had already accepted are invalidated again; should that
//!   fail too, those entries stay inserted on both sides. An AV_WRITE that goes unanswered
//!   instead keeps the whole batch, every chunk of it (see "When the NIC does not answer").
//! - **A refused AV_INVALIDATE** leaves the addresses inserted on both sides and returns
//!   `FI_EIO` (`FI_EAGAIN` when the NIC had no room for the command and nothing was removed).
//!   A remove on a synchronous AV sends pending `FI_MORE` records first; if they are rolled
//!   back, the remove removes nothing and fails with `FI_EIO` (earlier calls' addresses are
//!   gone). (On an `FI_EVENT` AV those records fail through their own calls' events, and the
//!   remove goes ahead.)
//!   A removal of more than [`MAX_BATCH`] addresses takes several commands; if a later
//!   one fails, the addresses of the earlier ones are removed and the rest stay. For commands
//!   that go unanswered instead, see "When the NIC does not answer".
//! - **Receive-context bits.** `remove` and `lookup` accept an `fi_addr_t` built with
//!   [`crate::fi_rx_addr`]: the top `rx_ctx_bits` bits are ignored.
//! - **Peer groups** (libfabric 2.x). An AV opened with [`AvAttr::max_group_id`] > 0 (the
//!   domain's `max_group_id`, at most the NIC's `CAP_PEER_GROUPS`) has peer groups: an
//!   `fi_addr_t` is the index in bits 0–31 and the group in bits 32 to 63 − `rx_ctx_bits`
//!   ([`crate::fi_group_addr`]), the receive context (if any) taking the top of the group field.
//!   The bits that number `max_group_id` plus `rx_ctx_bits` must fit in 32, else `fi_av_open`
//!   is `FI_EINVAL`. Inserts return group-0 addresses (the index); every call that takes an
//!   `fi_addr_t` (`lookup`, `remove`, `straddr` of a looked-up address, user ids, AV sets)
//!   ignores the group as it ignores the receive context, without checking it against
//!   `max_group_id` — the NIC checks the group of every send. An AV without peer groups
//!   (`max_group_id` 0) treats bits 32 and up as before: an `fi_addr_t` with them set names
//!   an index beyond the table (`FI_EINVAL` from lookup and remove, `FI_EADDRNOTAVAIL` from a
//!   send). A named AV records its `max_group_id` in the shared segment: every process's
//!   handle must open it with the same one (`FI_EINVAL` otherwise).
//! - **Unknown flag bits** are refused with `FI_EBADFLAGS` naming them. Bad arguments take no
//!   index and insert nothing; a call without `FI_MORE` still ends the batch of the `FI_MORE`
//!   calls before it (their records are sent), as fi_av(3) says such a call does.
//!
//! ## Auth keys
//!
//! An AV of a domain opened with `auth_key_size` = `FI_AV_AUTH_KEY` ([`AvAttr::auth_key_size`])
//! holds auth keys (JobIDs) in the NIC's auth-key table: [`AddressVector::insert_auth_key`],
//! [`AddressVector::lookup_auth_key`], `FI_AUTH_KEY` on insert, remove and
//! [`AddressVector::set_user_id`]. See [`auth_keys`] for the handles, the byte form of a key
//! and every error.
//!
//! ## `FI_EVENT`: asynchronous inserts
//!
//! An AV opened with `FI_EVENT` must be bound to an event queue ([`AddressVector::bind`],
//! `fi_av_bind`) before it inserts: until then every insert is `FI_ENOEQ`. An insert then does
//! its host work at once (mirror, indices, `fi_addr`), submits its AV_WRITE without waiting
//! ([`NicAvTable::submit_write`]) and returns `Ok(0)`, `FI_SUCCESS`. The insert's `context`
//! comes with [`AddressVector::with_context`]. When the NIC has completed the write, progress
//! posts one error entry per address that failed (`data` its index in the caller's array) and
//! then one `FI_AV_COMPLETE` whose `data` is the number inserted ([`crate::event`]); calls
//! complete in call order. An AV_WRITE the NIC refuses, or does not answer, fails all of its
//! addresses (`FI_EIO`, `prov_errno` 0 when unanswered; `FI_EAGAIN` for a write the NIC had no
//! room for, never sent) and removes them from the mirror, as
//! the synchronous path does for a refusal (an unanswered one's indices are then rewritten,
//! see "When the NIC does not answer").
//!
//! **Progress** is manual and happens on the application's calls, never on a thread of the
//! AV's own: reading the bound event queue (the driver's `fi_eq_read`, `fi_eq_readerr`, and a
//! blocked `fi_eq_sread`, which polls), or [`AddressVector::progress`]. Inserts only submit.
//! Synchronous calls of the AV (remove, `set_user_id`, `verify_nic`) first wait for the writes
//! in flight, so they never race one; at most [`MAX_WRITES_IN_FLIGHT`] writes are in flight,
//! beyond which an insert waits for the oldest. An insert that finds entries in doubt waits
//! for every write in flight before it rewrites them (see "When the NIC does not answer").
//!
//! **Meanwhile** (insert returned, `FI_AV_COMPLETE` not yet posted), `fi_av_lookup` returns
//! the address (the mirror has it), and the NIC entry is valid only once the NIC has executed
//! the AV_WRITE: a send to the `fi_addr_t` before that completes with `FI_EADDRNOTAVAIL`, and
//! after `FI_AV_COMPLETE` it is translated. After a refusal is reported, lookup and remove
//! treat the addresses as never inserted, and `len` and `iter` leave them out; the AV's next
//! call releases their indices.
//! `fi_addr` slots are written when the call returns (`FI_ADDR_NOTAVAIL` for addresses the host
//! refused); a later NIC refusal is reported by the error entries only, since the slice is no
//! longer borrowed (a C shim, which keeps the array valid until completion as fi_av(3)
//! requires, rewrites those slots when it reads the entries).
//!
//! **`fi_close`** ([`AddressVector::close`]) is `FI_EBUSY` while endpoints use the NIC table,
//! and hands the AV back unchanged. Otherwise it waits for the writes in flight, cancels
//! `FI_MORE` records not sent yet (`FI_ECANCELED`), posts every remaining event, and detaches
//! from the event queue.
//!
//! ## `FI_SYNC_ERR`
//!
//! The C call passes the status array through `context` when `FI_SYNC_ERR` is set; here it is
//! the `status` argument of [`AddressVector::insert_with_status`], [`AddressVector::insert_str`],
//! [`AddressVector::insertsvc`] and [`AddressVector::insertsym`] (a C shim passes
//! `Some(slice::from_raw_parts_mut(context as *mut c_int, count))` when the flag is set, `None`
//! otherwise). Slot `i` gets 0 when address `i` was inserted and the fabric errno, positive as
//! fi_av(3) and libfabric's providers have it, when it was not (`FI_EINVAL` malformed,
//! `FI_ENOSPC` table full, `FI_EADDRNOTAVAIL` host name that does not resolve, `FI_ENOMEM`); the return value is still the number inserted. When a
//! failed AV_WRITE rolls the call back (`FI_EIO`, or `FI_EAGAIN`), the slots of its rolled-back
//! addresses are set to the call's errno. The array is not touched when the call
//! itself is refused. Refused: `FI_SYNC_ERR` without an array, or an array shorter than the addresses (`FI_EINVAL`, as libfabric's util
//! AV does for a NULL context); an array without `FI_SYNC_ERR` (`FI_EINVAL`: the C context would
//! not be an array); `FI_SYNC_ERR` on an AV opened with `FI_EVENT` (`FI_EBADFLAGS`: the man page
//! limits it to synchronous inserts).
//!
//! ## User ids
//!
//! - **AV opened with `FI_AV_USER_ID`**: every address starts with user id `FI_ADDR_NOTAVAIL`
//!   (so a receive completion reports `FI_ADDR_NOTAVAIL` until one is set), and
//!   [`AddressVector::set_user_id`] sets it: pending `FI_MORE` records are sent first, then one
//!   AV_WRITE rewrites that entry; if it is refused, the old user id stays on both sides
//!   (`FI_EIO`, `FI_EAGAIN` when the NIC had no room for it; if it goes unanswered, the NIC's
//!   entry is rewritten with the old id later).
//!   The per-insert `FI_AV_USER_ID` flag (and `FI_AV_USER_ID` on remove) is `FI_EINVAL` on such
//!   an AV, as fi_av(3) 1.20 says and CXI does.
//! - **AV of an `FI_AV_AUTH_KEY` domain, or of a domain opened with the `FI_AV_USER_ID`
//!   capability** ([`AvLimits::per_insert_user_ids`], [`crate::domain`]): the per-insert flag
//!   (and `FI_AV_USER_ID` on remove) is `FI_EINVAL` there too, on every insert form: fi_av(3)
//!   has `fi_av_set_user_id` used instead, on an AV opened with `FI_AV_USER_ID`.
//! - **Other AVs**: an insert with `FI_AV_USER_ID` reads `fi_addr[i]` as the user id of address
//!   `i` (`fi_addr` is then required, `FI_EINVAL` without it) and overwrites it with the
//!   `fi_addr_t` as usual. [`AddressVector::set_user_id`] is `FI_EINVAL` there (CXI does the same).
//! - The NIC entry carries the user id ([`NicAvEntry::with_user_id`]); removing the address
//!   clears it. The mirror keeps user ids in two parallel arrays (8 bytes and 1 bit per index)
//!   allocated the first time an AV needs them, so AVs without user ids pay nothing.
//!
//! ## Address formats
//!
//! [`AvAttr::addr_format`] is the domain's `addr_format`. [`AddrFormat::Uet`] (the default)
//! takes the 32-byte serialized address in [`AddressVector::insert`] and returns it from
//! `lookup`. [`AddrFormat::Str`] is `FI_ADDR_STR`: addresses are strings
//! ([`crate::addr_str`]) inserted with [`AddressVector::insert_str`] (the C `char **` form of
//! `fi_av_insert`), and `lookup` returns the NUL-terminated string, as fi_av(3) wants lookup to
//! return addresses in the AV's format. Passing one format to an AV of the other is
//! `FI_EINVAL`. [`AddressVector::insertsvc`] takes a node and service, or an `FI_ADDR_STR`
//! address as node with no service, on either kind. Host names are resolved with std's resolver
//! ([`AddressVector::set_resolver`] replaces it).
//!
//! ## `fi_av_insertsym`
//!
//! [`AddressVector::insertsym`] checks and resolves the whole range first ([`SymRange`]), so a
//! bad node or service inserts nothing; then the nodecnt × svccnt addresses go in, in the man
//! page's order, each at the lowest unused index, as ordinary entries. A range larger than the
//! AV's capacity is `FI_EINVAL`.
//!
//! ## When the NIC does not answer
//!
//! A command that times out ([`NicError::in_doubt`](crate::nic::NicError)) may still be run by
//! the NIC, later, whole. The AV does not guess: the call fails with `FI_EIO`, the mirror keeps
//! what it then holds — the records of an unanswered AV_WRITE stay inserted, with the rest of
//! its `FI_MORE` batch, sent or not (their `fi_addr` values stand, and the error says how many
//! stayed), the addresses of an unanswered
//! AV_INVALIDATE stay inserted, an unanswered user-id write leaves the old id — and the indices
//! concerned are in doubt. The next call that sends the NIC anything (an insert, remove,
//! set_user_id, settle, verify_nic; on an `FI_EVENT` AV, whose inserts do not wait, its
//! synchronous calls) first rewrites them from the mirror, with commands the NIC runs after
//! the unanswered one; until that succeeds it fails with `FI_EIO` saying how many wait (an
//! insert rolls its addresses back).
//!
//! Auth-key commands (`FI_ETIMEDOUT` from the table when unanswered): an AUTH_KEY_REMOVE that
//! goes unanswered removes the key from the AV all the same (nothing is bound to it, and the
//! NIC, which may still free the slot, could give it to a later key), and the call fails with
//! `FI_ETIMEDOUT`; an unanswered AUTH_KEY_SOURCE leaves the old user id and the key's source is
//! sent again at the next call, as entries are rewritten; an unanswered AUTH_KEY_ADD fails
//! (the NIC picks the slot, so the AV cannot know it), and a slot it makes late is freed by
//! the driver ahead of its next admin command (an AUTH_KEY_REMOVE the NIC runs only while the
//! slot is still this table's with that JobID; on a device older than interface 1.9 the slot
//! stays the AV table's until AV_DESTROY frees it). An `FI_EVENT` insert whose AV_WRITE goes unanswered
//! fails its addresses, as a refused one does, and frees their indices in the mirror; the next
//! insert waits for the writes still in flight, then rewrites them as empty before it takes
//! any index (and fails with `FI_EIO`,
//! inserting nothing, while that rewrite fails), so the NIC never sees a new entry where the
//! late write may have put one.
//!
//! ## Memory
//!
//! The mirror keeps each address in one 8-byte word: the bits in which the peers of a job
//! differ, and the id of a template holding the rest ([`crate::mirror::templates`]; a zero
//! word is empty). With the index allocator's bit per index, that is ~8.2 host bytes per
//! entry for one job's peers; an address past the last template costs 32 bytes more. The
//! mirror's memory grows with the highest index used, not with `count`, at most a quarter
//! ahead of use ([`crate::mirror::Slots`]), so it stays under ~10.5 bytes per entry while
//! growing.

use core::fmt::Write as _;
use std::sync::{Arc, Weak};

use crate::named::AvSync;

use tracing::{debug, warn};
use uet_fwif::address::{ADDRESS_BYTES, ADDRESS_VERSION};
use uet_fwif::admin::{AvCreateBody, MAX_BATCH};
use uet_fwif::av_entry::{entry_flags, MAX_JOB_ID};
use uet_fwif::{AvWriteRecord, NicAvEntry, UetAddress};

use crate::addr_str::{
    parse_addr_str_looked_up, parse_addr_str_with, system_resolver, Node, Resolver, Service,
    SymRange, ADDR_STR_MAX, ADDR_STR_SCHEME,
};
use crate::errno::{FiErrno, FiError};
use crate::flags::{
    flag_names, AvType, FiAddr, FI_ADDR_NOTAVAIL, FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID,
    FI_EVENT, FI_MORE, FI_READ, FI_SYMMETRIC, FI_SYNC_ERR,
};
use crate::index_alloc::IndexAllocator;
use crate::mirror::{Range, Ranges, Slot, Slots};
use crate::nic::NicAvTable;

pub mod auth_keys;
pub mod decode;
mod events;
pub mod lost;

pub use auth_keys::{
    is_auth_key_addr, AuthKeyInfo, AuthKeyMismatch, AUTH_KEY_ADDR_BASE, AUTH_KEY_MAX_RX_CTX_BITS,
};
use decode::{FiAddrDecoder, FiAddrKind};
pub use events::{AvCloseError, CloseError, MAX_WRITES_IN_FLIGHT};
use lost::LostIndices;

/// Size of one address in `fi_av_insert`'s buffer and `fi_av_lookup`'s output.
pub const ADDR_LEN: usize = ADDRESS_BYTES;

/// Entries of an AV opened with `count` 0 (libfabric's util AV uses the same default).
pub const DEFAULT_AV_COUNT: usize = 1024;

const _: () = assert!(
    ADDRESS_VERSION != 0,
    "an all-zero mirror slot must mean empty"
);

/// Open flags this AV supports (`FI_READ` only together with a name: [`crate::NamedAv`]).
const OPEN_FLAGS: u64 = FI_AV_USER_ID | FI_EVENT | FI_SYMMETRIC | FI_READ;
/// Insert flags this AV supports.
const INSERT_FLAGS: u64 = FI_MORE | FI_SYNC_ERR | FI_AV_USER_ID | FI_AUTH_KEY;

/// Scratch buffers larger than this many elements are released after use.
const SCRATCH_KEEP: usize = 4096;

/// `struct fi_av_attr`, plus the JobID stamped into NIC entries and the domain's address
/// format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AvAttr {
    /// `type`. Every type behaves as [`AvType::Table`].
    pub av_type: AvType,
    /// `count`: table size; 0 for [`DEFAULT_AV_COUNT`] (see `ep_per_node`).
    pub count: usize,
    /// `rx_ctx_bits`: top bits of an `fi_addr_t` naming the receive context. A C provider
    /// converts the `int` with [`rx_ctx_bits_from_c`].
    pub rx_ctx_bits: u8,
    /// `ep_per_node`: endpoints per fabric address, 0 when unknown. A sizing hint: at most
    /// the NIC's endpoints ([`AvLimits::max_endpoints`]); with `count` 0 the default table
    /// size is rounded up to whole nodes. It never limits what may be inserted.
    pub ep_per_node: usize,
    /// `name`: the system name of an AV shared by the processes of a node, opened with
    /// [`crate::NamedAv::open`] ([`AddressVector::open`] refuses it).
    pub name: Option<AvName>,
    /// `map_addr`: base `fi_addr_t` of a shared AV. Ignored when `name` is `None`, as fi_av(3)
    /// says; for a named AV see [`crate::named`] (0 is the only base, and what is returned).
    pub map_addr: u64,
    /// `flags` of `fi_av_open`: `FI_EVENT`, `FI_AV_USER_ID`, `FI_SYMMETRIC` (a hint; accepted),
    /// `FI_READ` (needs a name).
    pub flags: u64,
    /// JobID (24 bits) stamped into every NIC entry, from the domain's auth key. Entries
    /// inserted against an AV auth key (`FI_AUTH_KEY`) carry that key's JobID instead.
    pub job_id: u32,
    /// The domain's `auth_key_size`: 0 or 4 (the domain's key is `job_id`), or
    /// [`FI_AV_AUTH_KEY`] (`usize::MAX`): the AV holds auth keys ([`auth_keys`]).
    pub auth_key_size: usize,
    /// The domain's `addr_format`: binary UET addresses or `FI_ADDR_STR` strings.
    pub addr_format: AddrFormat,
    /// The domain's `max_group_id` (libfabric 2.x peer groups): the largest group id an
    /// `fi_addr_t` of this AV may carry ([`crate::fi_group_addr`]). 0: no peer groups. At most
    /// [`AvLimits::max_group_id`]; the bits that number it plus `rx_ctx_bits` must not exceed
    /// 32 (see the module docs, *Peer groups*).
    pub max_group_id: u32,
}

/// Longest [`AvName`] in bytes (`NAME_MAX`, the longest POSIX shared-memory name).
pub const AV_NAME_MAX: usize = 255;

/// The `name` of `fi_av_attr`: 1 to [`AV_NAME_MAX`] bytes of UTF-8 without NUL, stored inline
/// so [`AvAttr`] stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct AvName {
    len: u8,
    bytes: [u8; AV_NAME_MAX],
}

impl AvName {
    /// The name `name`; `FI_EINVAL` when it is empty, longer than [`AV_NAME_MAX`] bytes or
    /// holds a NUL.
    pub fn new(name: &str) -> Result<Self, FiError> {
        let len = u8::try_from(name.len())
            .ok()
            .filter(|&l| l > 0 && usize::from(l) <= AV_NAME_MAX)
            .ok_or_else(|| {
                FiError::inval(format!(
                    "fi_av_open: name of {} bytes (must be 1..={AV_NAME_MAX})",
                    name.len()
                ))
            })?;
        if name.contains('\0') {
            return Err(FiError::inval("fi_av_open: name holds a NUL byte"));
        }
        let mut bytes = [0; AV_NAME_MAX];
        if let Some(dst) = bytes.get_mut(..name.len()) {
            dst.copy_from_slice(name.as_bytes());
        }
        Ok(AvName { len, bytes })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        let b = self.bytes.get(..usize::from(self.len)).unwrap_or_default();
        // Built from a &str in new().
        core::str::from_utf8(b).unwrap_or_default()
    }
}

impl core::fmt::Debug for AvName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// `fi_av_attr.rx_ctx_bits` from its C `int`: `FI_EINVAL` when negative or above 64.
pub fn rx_ctx_bits_from_c(rx_ctx_bits: i32) -> Result<u8, FiError> {
    u8::try_from(rx_ctx_bits)
        .ok()
        .filter(|&b| b <= 64)
        .ok_or_else(|| {
            FiError::inval(format!(
                "fi_av_open: rx_ctx_bits {rx_ctx_bits} is outside 0..=64"
            ))
        })
}

/// `fi_av_attr.type` from its C `enum fi_av_type` value: `FI_EINVAL` for a value that names
/// no type.
pub fn av_type_from_c(raw: i32) -> Result<AvType, FiError> {
    AvType::from_raw(raw).ok_or_else(|| {
        FiError::inval(format!(
            "fi_av_open: type {raw} is not an fi_av_type (FI_AV_UNSPEC 0, FI_AV_MAP 1, \
             FI_AV_TABLE 2)"
        ))
    })
}

/// `addr_format` of the domain an AV belongs to: what `insert` takes and `lookup` returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AddrFormat {
    /// The 32-byte serialized [`UetAddress`] (`fi_getname`'s output).
    #[default]
    Uet,
    /// `FI_ADDR_STR`: the string form ([`crate::addr_str`]).
    Str,
}

impl AddrFormat {
    /// `FI_ADDR_STR` in libfabric's address-format enum.
    pub const FI_ADDR_STR: u32 = 9;
}

/// What the NIC and its domain can hold (from the capability registers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvLimits {
    /// Entries one NIC AV table can hold (`CAP_AV_ENTRIES`).
    pub max_entries: u32,
    /// Largest `rx_ctx_bits` a NIC AV table decodes (`CAP_AV.max_rx_ctx_bits`).
    pub max_rx_ctx_bits: u8,
    /// Receive contexts an endpoint can have (`CAP_EP.max_rx_ctx`): `rx_ctx_bits` may not
    /// exceed the bits that number them, `ceil(log2(max_rx_ctx))`. A domain's
    /// `max_ep_rx_ctx` narrows it ([`crate::DomainAttr::limits`]).
    pub max_rx_ctx: u64,
    /// Endpoints the NIC can hold (`CAP_EP.max_endpoints`): the bound of `ep_per_node`, which
    /// counts the endpoints of every process at one fabric address (not one domain's
    /// `ep_cnt`).
    pub max_endpoints: u32,
    /// Auth keys an AV can hold: the slots of the NIC's auth-key table (`CAP_AUTH_KEY.slots`).
    pub max_auth_keys: u16,
    /// Largest `max_group_id` an AV may have (`CAP_PEER_GROUPS.max_group_id`); 0: the NIC has
    /// no peer groups.
    pub max_group_id: u32,
    /// The NIC entry flags the NIC defines ([`entry_flags`]): `entry_flags::ALL`, or
    /// `ALL_BEFORE_MAX_MSG_MTU` on a NIC older than interface 1.10, which would refuse an entry
    /// with the `MAX_MSG_MTU` bit. Entries are written with their other flags cleared; the
    /// mirror keeps every address byte either way.
    pub entry_flags: u16,
    /// Whether inserts may carry user ids (the per-insert `FI_AV_USER_ID` flag, and that flag
    /// on remove): false in a domain opened with the `FI_AV_USER_ID` capability, which sets
    /// user ids with `fi_av_set_user_id` only ([`crate::domain`]).
    pub per_insert_user_ids: bool,
}

impl AvLimits {
    /// Limits with `max_entries` and `max_rx_ctx_bits`, and no bound on receive contexts,
    /// endpoints or peer groups beyond what those imply.
    pub const fn new(max_entries: u32, max_rx_ctx_bits: u8) -> Self {
        AvLimits {
            max_entries,
            max_rx_ctx_bits,
            max_rx_ctx: u64::MAX,
            max_endpoints: u32::MAX,
            max_auth_keys: uet_fwif::auth_key::MAX_AUTH_KEY_SLOTS,
            max_group_id: u32::MAX,
            entry_flags: entry_flags::ALL,
            per_insert_user_ids: true,
        }
    }

    /// Receive-context bits the endpoints can use: `ceil(log2(max_rx_ctx))`.
    pub const fn rx_ctx_bits_usable(&self) -> u8 {
        if self.max_rx_ctx <= 1 {
            0
        } else {
            (64 - (self.max_rx_ctx - 1).leading_zeros()) as u8
        }
    }
}

impl AvAttr {
    /// The attributes an AV opened with these would have (type `Table`, `count` the table
    /// size), or the error `fi_av_open` returns, naming the attribute:
    ///
    /// | attribute | refused when | errno |
    /// |---|---|---|
    /// | `flags` | a bit other than `FI_EVENT`, `FI_AV_USER_ID`, `FI_SYMMETRIC`, `FI_READ` | `FI_EBADFLAGS` |
    /// | `flags` | `FI_READ` without a name (a read-only AV must be named) | `FI_EINVAL` |
    /// | `count` | the NIC has no AV entries, or `count` exceeds `max_entries` | `FI_ENOSPC` |
    /// | `rx_ctx_bits` | above `max_rx_ctx_bits`, above the bits of `max_rx_ctx`, or leaving too few index bits for `count` | `FI_EOVERFLOW` |
    /// | `ep_per_node` | above `max_endpoints` | `FI_E2BIG` |
    /// | JobID | wider than 24 bits | `FI_EINVAL` |
    /// | `auth_key_size` | not 0, 4 or `FI_AV_AUTH_KEY` | `FI_EINVAL` |
    /// | `rx_ctx_bits` | above [`AUTH_KEY_MAX_RX_CTX_BITS`] with `FI_AV_AUTH_KEY` | `FI_EOVERFLOW` |
    /// | `max_group_id` | above the NIC's [`AvLimits::max_group_id`] | `FI_EINVAL` |
    /// | `max_group_id`, `rx_ctx_bits` | the bits that number `max_group_id` plus `rx_ctx_bits` above 32 | `FI_EINVAL` |
    /// | `max_group_id` | above [`AUTH_KEY_MAX_GROUP_ID`] with `FI_AV_AUTH_KEY` | `FI_EINVAL` |
    ///
    /// `type` is always valid here ([`av_type_from_c`] checks a C value); `map_addr` is
    /// ignored without a name. A name passes here; what a named AV checks besides is
    /// [`crate::NamedAv::open`]'s. The driver calls this to size the NIC table (AV_CREATE)
    /// before [`AddressVector::open`].
    pub fn resolve(&self, limits: &AvLimits) -> Result<AvAttr, FiError> {
        let unknown = self.flags & !OPEN_FLAGS;
        if unknown != 0 {
            return Err(FiError::badflags(format!(
                "fi_av_open: unknown flags {}",
                flag_names(unknown)
            )));
        }
        if self.flags & FI_READ != 0 && self.name.is_none() {
            return Err(FiError::inval(
                "fi_av_open: FI_READ opens an existing named AV read-only, and name is NULL",
            ));
        }
        if limits.max_entries == 0 {
            return Err(FiError::new(
                FiErrno::FI_ENOSPC,
                "fi_av_open: count: the NIC has no AV entries",
            ));
        }
        if self.rx_ctx_bits > limits.max_rx_ctx_bits {
            return Err(FiError::new(
                FiErrno::FI_EOVERFLOW,
                format!(
                    "fi_av_open: rx_ctx_bits {} exceeds the NIC's maximum of {}",
                    self.rx_ctx_bits, limits.max_rx_ctx_bits
                ),
            ));
        }
        let usable = limits.rx_ctx_bits_usable();
        if self.rx_ctx_bits > usable {
            return Err(FiError::new(
                FiErrno::FI_EOVERFLOW,
                format!(
                    "fi_av_open: rx_ctx_bits {} exceeds the {usable} bits that number the {} \
                     receive contexts an endpoint can have",
                    self.rx_ctx_bits, limits.max_rx_ctx
                ),
            ));
        }
        if self.ep_per_node > limits.max_endpoints as usize {
            return Err(FiError::new(
                FiErrno::FI_E2BIG,
                format!(
                    "fi_av_open: ep_per_node {} exceeds the {} endpoints a NIC (one fabric address) \
                     can have",
                    self.ep_per_node, limits.max_endpoints
                ),
            ));
        }
        if self.job_id > MAX_JOB_ID {
            return Err(FiError::inval(format!(
                "fi_av_open: JobID {:#x} is wider than 24 bits",
                self.job_id
            )));
        }
        auth_keys::check_auth_key_size("fi_av_open", self.auth_key_size)?;
        if self.auth_key_size == FI_AV_AUTH_KEY && self.rx_ctx_bits > AUTH_KEY_MAX_RX_CTX_BITS {
            return Err(FiError::new(
                FiErrno::FI_EOVERFLOW,
                format!(
                    "fi_av_open: rx_ctx_bits {} exceeds {AUTH_KEY_MAX_RX_CTX_BITS} in an \
                     FI_AV_AUTH_KEY domain (auth-key handles must stay apart from addresses)",
                    self.rx_ctx_bits
                ),
            ));
        }
        self.check_groups(limits)?;
        let max = limits.max_entries as usize;
        let count = match self.count {
            0 => default_count(self.ep_per_node, max),
            c if c > max => {
                return Err(FiError::new(
                    FiErrno::FI_ENOSPC,
                    format!("fi_av_open: count {c} exceeds the NIC's {max} entries per AV"),
                ))
            }
            c => c,
        };
        // The index must fit below the receive-context bits, and never look like
        // FI_ADDR_NOTAVAIL once a receive context is added.
        let index_field = if self.rx_ctx_bits >= 64 {
            0
        } else {
            u64::MAX >> self.rx_ctx_bits
        };
        if count as u64 > index_field {
            return Err(FiError::new(
                FiErrno::FI_EOVERFLOW,
                format!(
                    "fi_av_open: rx_ctx_bits {}: {count} entries do not fit in the {} index bits \
                     left",
                    self.rx_ctx_bits,
                    64u32.saturating_sub(u32::from(self.rx_ctx_bits))
                ),
            ));
        }
        Ok(AvAttr {
            av_type: AvType::Table,
            count,
            ..*self
        })
    }
}

impl AvAttr {
    /// Whether the AV has peer groups (`max_group_id` > 0).
    pub const fn peer_groups(&self) -> bool {
        self.max_group_id != 0
    }

    /// The peer-group rows of [`AvAttr::resolve`].
    fn check_groups(&self, limits: &AvLimits) -> Result<(), FiError> {
        if !self.peer_groups() {
            return Ok(());
        }
        if self.max_group_id > limits.max_group_id {
            return Err(FiError::inval(if limits.max_group_id == 0 {
                format!(
                    "fi_av_open: max_group_id {}: the NIC has no peer groups (CAP_PEER_GROUPS)",
                    self.max_group_id
                )
            } else {
                format!(
                    "fi_av_open: max_group_id {} exceeds the NIC's maximum of {} \
                     (CAP_PEER_GROUPS)",
                    self.max_group_id, limits.max_group_id
                )
            }));
        }
        let group_bits = AvCreateBody::group_bits(self.max_group_id);
        if !AvCreateBody::groups_fit(self.max_group_id, self.rx_ctx_bits) {
            return Err(FiError::inval(format!(
                "fi_av_open: max_group_id {} needs {group_bits} group bits and rx_ctx_bits is \
                 {}: together they exceed the 32 bits above the AV index (the receive context \
                 takes the top of the group field)",
                self.max_group_id, self.rx_ctx_bits
            )));
        }
        if self.auth_key_size == FI_AV_AUTH_KEY && self.max_group_id > AUTH_KEY_MAX_GROUP_ID {
            return Err(FiError::inval(format!(
                "fi_av_open: max_group_id {} exceeds {AUTH_KEY_MAX_GROUP_ID} in an \
                 FI_AV_AUTH_KEY domain (auth-key handles must stay apart from addresses)",
                self.max_group_id
            )));
        }
        Ok(())
    }
}

/// Largest `max_group_id` of an AV that holds auth keys (`FI_AV_AUTH_KEY`): a group of at most
/// 16 bits leaves bits 48–63 to the receive context (at most [`AUTH_KEY_MAX_RX_CTX_BITS`]), so
/// no address with a group up to `max_group_id` takes the form of an auth-key handle.
pub const AUTH_KEY_MAX_GROUP_ID: u32 = 0xFFFF;

/// The table size of an AV opened with `count` 0: [`DEFAULT_AV_COUNT`] rounded up to whole
/// nodes of `ep_per_node` endpoints, at most `max` (rounded down to whole nodes when that
/// leaves at least one).
fn default_count(ep_per_node: usize, max: usize) -> usize {
    let node = ep_per_node.max(1);
    let count = DEFAULT_AV_COUNT.div_ceil(node).saturating_mul(node);
    if count <= max {
        count
    } else if max >= node {
        max / node * node
    } else {
        max
    }
}

/// An index where the NIC holds something other than what the mirror says it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvMismatch {
    /// Table index.
    pub index: u32,
    /// What the NIC should hold ([`AddressVector::mirror_entry`]).
    pub mirror: NicAvEntry,
    /// What it holds.
    pub nic: NicAvEntry,
}

/// User ids of the mirror, allocated the first time an AV needs them: one per index below the
/// mirror's length, and one bit saying whether the index has one.
#[derive(Debug, Default)]
struct UserIds {
    ids: Vec<u64>,
    has: Vec<u64>,
}

impl UserIds {
    #[inline]
    fn get(&self, index: u32) -> Option<u64> {
        let i = index as usize;
        let set = self
            .has
            .get(i / 64)
            .is_some_and(|w| (w >> (i % 64)) & 1 == 1);
        if set {
            self.ids.get(i).copied()
        } else {
            None
        }
    }

    fn set(&mut self, index: u32, user_id: Option<u64>) {
        let i = index as usize;
        if let (Some(id), Some(word)) = (self.ids.get_mut(i), self.has.get_mut(i / 64)) {
            let bit = 1u64 << (i % 64);
            match user_id {
                Some(u) => {
                    *id = u;
                    *word |= bit;
                }
                None => {
                    *id = 0;
                    *word &= !bit;
                }
            }
        }
    }

    /// Make room for `len` indices, reserving up to `cap` (the mirror's capacity) at once.
    fn grow(&mut self, len: usize, cap: usize) -> Result<(), std::collections::TryReserveError> {
        if len > self.ids.capacity() {
            self.ids.try_reserve_exact(cap.max(len) - self.ids.len())?;
        }
        let words = len.div_ceil(64);
        if words > self.has.capacity() {
            self.has
                .try_reserve_exact(cap.max(len).div_ceil(64) - self.has.len())?;
        }
        if self.ids.len() < len {
            self.ids.resize(len, 0);
        }
        if self.has.len() < words {
            self.has.resize(words, 0);
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        (self.ids.capacity() + self.has.capacity()) * core::mem::size_of::<u64>()
    }
}

/// An `fi_av` of type `FI_AV_TABLE` whose entries live in a NIC AV table.
pub struct AddressVector<N: NicAvTable> {
    nic: N,
    attr: AvAttr,
    capacity: u32,
    /// Identity, so an [`crate::AvSet`] can tell which AV it belongs to.
    id: u64,
    /// How the AV reads an `fi_addr_t`: its index bits, and which values are handles.
    decoder: FiAddrDecoder,
    /// Every `fi_addr_t` below this is a plain index, the whole of it (no receive-context,
    /// group or auth-key bits), within the capacity; 0 on an `FI_ADDR_STR` AV, whose lookups
    /// format a string, and on an `FI_EVENT` AV, whose lookups also ask whether the NIC refused
    /// the index's insert. [`AddressVector::lookup`] takes its short path below it.
    plain_index_end: u64,
    /// The address of every single entry, a word per index in one flat mapping; zero = empty.
    slots: Slots,
    /// Symmetric ranges: indices whose addresses follow a rule rather than a slot.
    ranges: Ranges,
    alloc: IndexAllocator,
    /// User ids, once the AV has any (opened with `FI_AV_USER_ID`, or a per-insert user id).
    user_ids: Option<Box<UserIds>>,
    /// Auth keys, when the domain was opened with `FI_AV_AUTH_KEY`.
    auth: Option<Box<auth_keys::AuthKeys>>,
    /// Indices inserted with `FI_MORE` whose NIC records are not sent yet, in insertion order.
    pending: Vec<u32>,
    /// How many records at the front of `pending` belong to insert calls that have returned
    /// (with `FI_MORE`): their `fi_addr` values are out, so rolling them back changes what an
    /// earlier call reported (the flush that does so fails with `FI_EIO` whatever the NIC's
    /// reason), and their indices are lost rather than freed (see [`lost`]).
    returned_pending: usize,
    /// Indices rolled back for insert calls that had returned them (see [`lost`]).
    lost: LostIndices,
    index_buf: Vec<u32>,
    /// Indices whose NIC entry is unknown: a command concerning them went unanswered
    /// ([`NicError::in_doubt`](crate::nic::NicError)) and may still be applied. The mirror
    /// keeps what it holds there, and [`AddressVector::repair`] rewrites them on the NIC.
    in_doubt: Vec<u32>,
    resolver: Resolver,
    /// `FI_EVENT` inserts and the event-queue binding (see [`events`]).
    events: Option<Box<events::EventState>>,
    /// The `context` of the insert call in progress ([`AddressVector::with_context`]).
    call_context: u64,
    /// A named AV's catch-up, for endpoints bound to this mirror ([`AddressVector::sync_hook`]).
    sync_hook: Option<Weak<dyn AvSync>>,
    /// [`AvLimits::entry_flags`].
    entry_flags: u16,
    /// [`AvLimits::per_insert_user_ids`].
    per_insert_user_ids: bool,
}

impl<N: NicAvTable> core::fmt::Debug for AddressVector<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AddressVector")
            .field("attr", &self.attr)
            .field("len", &self.alloc.len())
            .field("high_water", &self.alloc.high_water())
            .field("pending", &self.pending.len())
            .field("user_ids", &self.user_ids.is_some())
            .finish_non_exhaustive()
    }
}

/// The [`EntrySource`] of an AV, borrowed field by field: a method would borrow the whole AV,
/// and [`AddressVector::flush`] builds records from it while the NIC table is borrowed.
macro_rules! entry_source {
    ($av:expr) => {
        EntrySource {
            slots: &$av.slots,
            ranges: &$av.ranges,
            alloc: &$av.alloc,
            lost: &$av.lost,
            user_ids: $av.user_ids.as_deref(),
            auth: $av.auth.as_deref(),
            job_id: $av.attr.job_id,
            entry_flags: $av.entry_flags,
        }
    };
}

/// The parts of the mirror a NIC entry is made of, borrowed apart from the NIC table, so that
/// records can be built while the table takes them ([`NicAvTable::write_entries_with`]).
#[derive(Clone, Copy)]
struct EntrySource<'a> {
    slots: &'a Slots,
    ranges: &'a Ranges,
    alloc: &'a IndexAllocator,
    lost: &'a LostIndices,
    user_ids: Option<&'a UserIds>,
    auth: Option<&'a auth_keys::AuthKeys>,
    job_id: u32,
    /// [`AvLimits::entry_flags`]: the flags an entry may carry to this NIC.
    entry_flags: u16,
}

impl<'a> EntrySource<'a> {
    /// Whether `index` is in use: allocated and not lost (see [`lost`]).
    #[inline]
    fn in_use(&self, index: u32) -> bool {
        self.alloc.is_allocated(index) && !self.lost.contains(index)
    }

    /// The pending inserts `chunk` as one run [`NicAvTable::write_peers`] can carry: consecutive
    /// indices of single entries without auth key or user id. Their first index.
    fn peer_run(&self, chunk: &[u32]) -> Option<u32> {
        let first = *chunk.first()?;
        if !chunk
            .iter()
            .copied()
            .eq(first..first.checked_add(chunk.len() as u32)?)
        {
            return None;
        }
        let plain = |index| {
            self.user_ids.is_none_or(|u| u.get(index).is_none())
                && self.auth.is_none_or(|k| k.slot_of_index(index).is_none())
        };
        let extras = self.user_ids.is_some() || self.auth.is_some();
        let single = self.slots.all_filled(first, chunk.len());
        (single && (!extras || chunk.iter().all(|&i| plain(i)))).then_some(first)
    }

    /// The NIC record of a pending insert at `index`: the single entry, or the range record.
    fn pending_record(&self, index: u32) -> NicAvEntry {
        match self.single(index) {
            Some(slot) => self.single_entry(index, &slot),
            None => match self.ranges.starting_at(index) {
                Some(r) => self.range_record(r),
                None => self.nic_entry(index),
            },
        }
    }

    /// The NIC entry for `index` (INVALID when unused).
    fn nic_entry(&self, index: u32) -> NicAvEntry {
        if let Some(slot) = self.single(index) {
            return self.single_entry(index, &slot);
        }
        if self.in_use(index) {
            if let Some(e) = self
                .ranges
                .covering(index)
                .and_then(|r| self.range_record(r).range_member(index))
            {
                return e;
            }
        }
        NicAvEntry::INVALID
    }

    /// The record AV_WRITE carries for range `r`, with only the flags this NIC defines (its
    /// members, [`NicAvEntry::range_member`], keep them).
    fn range_record(&self, r: &Range) -> NicAvEntry {
        r.record(self.job_id).with_flags_within(self.entry_flags)
    }

    /// The slot of the single entry at `index`, if there is one.
    #[inline]
    fn single(&self, index: u32) -> Option<[u8; ADDR_LEN]> {
        self.slots.get(index)
    }

    /// The NIC entry of the single entry at `index`, whose address is `slot`.
    #[inline]
    fn single_entry(&self, index: u32, slot: &[u8; ADDR_LEN]) -> NicAvEntry {
        // Slots hold only addresses that were valid when inserted.
        let mut e =
            NicAvEntry::for_valid_peer_bytes(slot, self.job_id).with_flags_within(self.entry_flags);
        if let Some(key) = self.auth.and_then(|k| k.slot_of_index(index)) {
            e = e.with_auth_key(key);
        }
        match self.user_ids.and_then(|u| u.get(index)) {
            Some(user_id) => e.with_user_id(user_id),
            None => e,
        }
    }
}

/// The per-call arguments every insert shares, checked.
struct InsertCall<'a> {
    call: &'static str,
    count: usize,
    fi_addr: Option<&'a mut [FiAddr]>,
    flags: u64,
    status: Option<&'a mut [i32]>,
}

impl<N: NicAvTable> AddressVector<N> {
    /// `fi_av_open`: an empty AV over `nic`, a NIC table of at least
    /// [`AvAttr::resolve`]`(..).count` entries, all invalid.
    pub fn open(nic: N, attr: AvAttr, limits: AvLimits) -> Result<Self, FiError> {
        if let Some(name) = &attr.name {
            return Err(FiError::inval(format!(
                "fi_av_open: name '{}': a named AV is shared between processes and opened with \
                 NamedAv::open",
                name.as_str()
            )));
        }
        let attr = attr.resolve(&limits)?;
        let capacity = u32::try_from(attr.count)
            .map_err(|_| FiError::inval("fi_av_open: count does not fit in 32 bits"))?;
        // The bits of an fi_addr_t that are its index: resolve() keeps rx_ctx_bits below 64,
        // and with peer groups within 32.
        let decoder = FiAddrDecoder::new(
            capacity,
            attr.rx_ctx_bits,
            attr.max_group_id,
            attr.auth_key_size == FI_AV_AUTH_KEY,
        );
        // The index mask is a run of low ones, so fi_addr <= it leaves fi_addr unmasked; a
        // handle and FI_ADDR_NOTAVAIL lie above any 32-bit capacity.
        let plain_index_end = match attr.addr_format {
            _ if attr.flags & FI_EVENT != 0 => 0,
            AddrFormat::Str => 0,
            _ => u64::from(capacity).min(decoder.index_mask().saturating_add(1)),
        };
        debug!(
            capacity,
            rx_ctx_bits = attr.rx_ctx_bits,
            max_group_id = attr.max_group_id,
            job_id = attr.job_id,
            "AV opened"
        );
        let user_ids = (attr.flags & FI_AV_USER_ID != 0).then(Box::default);
        let slots = Slots::new(capacity).map_err(|e| {
            FiError::new(
                FiErrno::FI_ENOMEM,
                format!("cannot map the mirror of a {capacity}-entry AV: {e}"),
            )
        })?;
        // The process's fabric ids: an event's fid names this AV and no endpoint or queue.
        let id = crate::event::next_fid();
        Ok(AddressVector {
            nic,
            attr,
            capacity,
            id,
            decoder,
            plain_index_end,
            slots,
            ranges: Ranges::default(),
            alloc: IndexAllocator::new(capacity),
            user_ids,
            auth: (attr.auth_key_size == FI_AV_AUTH_KEY)
                .then(|| Box::new(auth_keys::AuthKeys::new(limits.max_auth_keys))),
            pending: Vec::new(),
            returned_pending: 0,
            lost: LostIndices::default(),
            index_buf: Vec::new(),
            in_doubt: Vec::new(),
            resolver: system_resolver,
            events: (attr.flags & FI_EVENT != 0).then(|| events::EventState::new(id)),
            call_context: 0,
            sync_hook: None,
            entry_flags: limits.entry_flags,
            per_insert_user_ids: limits.per_insert_user_ids,
        })
    }

    /// The attributes in effect: type `Table`, `count` the table size.
    pub fn attr(&self) -> &AvAttr {
        &self.attr
    }

    /// Always [`AvType::Table`].
    pub fn av_type(&self) -> AvType {
        self.attr.av_type
    }

    /// Number of indices (the NIC table size).
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Number of addresses inserted and not removed (pending `FI_MORE` ones included; lost
    /// indices, which hold none, not, nor on an `FI_EVENT` AV the indices of an AV_WRITE the
    /// NIC refused, which lookups already treat as unused and the next call releases).
    pub fn len(&self) -> usize {
        let held = u64::from(self.alloc.len()) - self.lost.len();
        held.saturating_sub(self.revoked_count()) as usize
    }

    /// No address is inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lost indices: returned by `FI_MORE` inserts whose batch the NIC then refused, held
    /// until `fi_av_remove` frees them (see [`lost`]).
    pub fn lost_len(&self) -> usize {
        self.lost.len() as usize
    }

    /// Size of one address as `fi_av_lookup` returns it: [`ADDR_LEN`], or for an
    /// `FI_ADDR_STR` AV the longest string form with its NUL ([`ADDR_STR_MAX`]).
    pub fn addrlen(&self) -> usize {
        match self.attr.addr_format {
            AddrFormat::Uet => ADDR_LEN,
            AddrFormat::Str => ADDR_STR_MAX,
        }
    }

    /// `rx_ctx_bits` of the AV.
    pub fn rx_ctx_bits(&self) -> u8 {
        self.attr.rx_ctx_bits
    }

    /// The largest peer group id its `fi_addr_t` values may carry; 0 without peer groups.
    pub fn max_group_id(&self) -> u32 {
        self.attr.max_group_id
    }

    /// Whether the AV has peer groups (see the module docs).
    pub fn peer_groups(&self) -> bool {
        self.attr.peer_groups()
    }

    /// JobID stamped into NIC entries.
    pub fn job_id(&self) -> u32 {
        self.attr.job_id
    }

    /// The AV's fabric id ([`crate::next_fid`]): no other object of this process that reports
    /// to an event queue has it; its events carry it as `fid`.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Addresses inserted with `FI_MORE` whose NIC records are not sent yet (a pending
    /// symmetric range counts each of its members).
    pub fn pending_len(&self) -> usize {
        self.pending
            .iter()
            .map(|&i| {
                let single = self.slots.is_filled(i);
                match self.ranges.starting_at(i) {
                    Some(r) if !single => r.count as usize,
                    _ => 1,
                }
            })
            .sum()
    }

    /// Resolve host names with `resolver` instead of std's resolver (tests, or a resolver that
    /// knows the fabric's names).
    pub fn set_resolver(&mut self, resolver: Resolver) {
        self.resolver = resolver;
    }

    /// The resolver host names go through ([`AddressVector::set_resolver`]).
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// `fi_av_insert`: insert `count` addresses packed in `addr` ([`ADDR_LEN`] bytes each).
    ///
    /// Each address takes the lowest unused index, written to `fi_addr[i]` when given. A
    /// malformed address, or one that finds the table full, gets `FI_ADDR_NOTAVAIL` and the
    /// others go ahead. Returns how many were inserted. Flags: `FI_MORE`, `FI_AV_USER_ID` (see
    /// the module notes); `FI_SYNC_ERR` needs [`AddressVector::insert_with_status`]. Errors
    /// (nothing inserted, nothing sent): `FI_EBADFLAGS` for other flags; `FI_EINVAL` when `addr`
    /// is shorter than `count` addresses, `fi_addr` shorter than `count`, or the AV takes
    /// `FI_ADDR_STR` addresses. `FI_EIO` when the NIC refused the batch this call sent, did not
    /// answer it, or the entries in doubt before it could not be rewritten (see the module
    /// notes on roll-back and on the NIC not answering); `FI_EAGAIN` instead when the NIC had
    /// no room for the command and the call changed nothing.
    pub fn insert(
        &mut self,
        addr: &[u8],
        count: usize,
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
    ) -> Result<usize, FiError> {
        self.insert_with_status(addr, count, fi_addr, flags, None)
    }

    /// `fi_av_insert` with `FI_SYNC_ERR`'s status array: as [`AddressVector::insert`], and
    /// `status[i]` gets 0 or the fabric errno (positive) of address `i` when `flags` has `FI_SYNC_ERR`.
    pub fn insert_with_status(
        &mut self,
        addr: &[u8],
        count: usize,
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        let r = self.insert_binary(addr, count, fi_addr, flags, status);
        self.end_batch_if_refused(flags, r)
    }

    /// [`AddressVector::insert_with_status`] before [`AddressVector::end_batch_if_refused`].
    fn insert_binary(
        &mut self,
        addr: &[u8],
        count: usize,
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        let call = self.check_insert("fi_av_insert", count, fi_addr, flags, status)?;
        insert_format(self.attr.addr_format, AddrFormat::Uet)?;
        let addrs = address_buffer("fi_av_insert", addr, count)?;
        if call.flags & (FI_AV_USER_ID | FI_AUTH_KEY | FI_SYNC_ERR) == 0
            && self.user_ids.is_none()
            && !self.is_event()
            // Room for a record per address that can take an index, at most the free ones.
            && self
                .pending
                .try_reserve(count.min(self.capacity.saturating_sub(self.alloc.len()) as usize))
                .is_ok()
        {
            return self.insert_plain(call, addrs);
        }
        self.insert_items(call, addrs.chunks_exact(ADDR_LEN).map(checked_address))
    }

    /// [`AddressVector::insert_items`] for the common case, a synchronous insert of binary
    /// addresses with nothing beside them (no user ids, no auth key bound, no status array;
    /// the AV may hold auth keys), room for
    /// every pending record reserved: each address is checked, takes the lowest free index,
    /// and is stored; one NIC write at the end. The same outcome as the general loop, without
    /// its per-address questions.
    fn insert_plain(&mut self, c: InsertCall<'_>, addrs: &[u8]) -> Result<usize, FiError> {
        let InsertCall {
            call,
            count,
            mut fi_addr,
            flags,
            ..
        } = c;
        let mut inserted = 0;
        let fresh = self.pending.is_empty();
        for (i, raw) in addrs.chunks_exact(ADDR_LEN).enumerate() {
            // checked_address's fast check, spelled out: calling it here builds its Result for
            // every address, 22 instructions more per entry (callgrind).
            let checked = match raw.first_chunk::<ADDR_LEN>() {
                Some(bytes) if UetAddress::bytes_are_valid(bytes) => Ok(*bytes),
                _ => checked_address(raw),
            };
            let value = match checked.and_then(|bytes| self.insert_plain_one(bytes)) {
                Ok(index) => {
                    inserted += 1;
                    FiAddr::from(index)
                }
                Err(e) => {
                    debug!(call, position = i, error = %e, "address not inserted");
                    FI_ADDR_NOTAVAIL
                }
            };
            if let Some(slot) = fi_addr.as_deref_mut().and_then(|o| o.get_mut(i)) {
                *slot = value;
            }
        }
        // With nothing pending before the call and every address inserted, the pending
        // inserts are the call's addresses, in order.
        let input = (fresh && inserted == count)
            .then(|| <[Slot] as zerocopy::FromBytes>::ref_from_bytes(addrs).ok())
            .flatten();
        self.end_batch(flags, count, fi_addr, &mut [], None, input)?;
        Ok(inserted)
    }

    /// [`AddressVector::insert_one`] without user id or auth key, the pending record's room
    /// reserved by the caller.
    #[inline]
    fn insert_plain_one(&mut self, bytes: [u8; ADDR_LEN]) -> Result<u32, FiError> {
        let index = self.alloc.alloc().ok_or_else(|| {
            FiError::new(
                FiErrno::FI_ENOSPC,
                format!("all {} AV entries are in use", self.capacity),
            )
        })?;
        if !self.slots.set(index, bytes) {
            self.alloc.free(index);
            return Err(no_slot_memory());
        }
        self.pending.push(index);
        Ok(index)
    }

    /// `fi_av_insert` on an `FI_ADDR_STR` AV: the strings of the C `char **` array, each in
    /// the form [`crate::addr_str`] describes (a host name node is resolved). A string that
    /// does not parse fails alone (`FI_EINVAL` in its status slot, `FI_EADDRNOTAVAIL` for a
    /// host name that does not resolve), like a malformed binary address; the reason is logged.
    /// Otherwise as [`AddressVector::insert_with_status`]; `FI_EINVAL` on a binary AV.
    pub fn insert_str(
        &mut self,
        addrs: &[&str],
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        let r = self.insert_strings(addrs, fi_addr, flags, status);
        self.end_batch_if_refused(flags, r)
    }

    /// [`AddressVector::insert_str`] before [`AddressVector::end_batch_if_refused`].
    fn insert_strings(
        &mut self,
        addrs: &[&str],
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        let call = self.check_insert("fi_av_insert", addrs.len(), fi_addr, flags, status)?;
        insert_format(self.attr.addr_format, AddrFormat::Str)?;
        let items = string_addresses(addrs, self.resolver);
        self.insert_items(call, items)
    }

    /// `fi_av_insertsvc`: insert the address `node` and `service` name (see
    /// [`crate::addr_str`]): node an IP literal or a host name (resolved), service the PIDonFEP
    /// with optional parameters; or `node` an `FI_ADDR_STR` address and `service` `None`.
    /// Returns 1, or 0 when the address fails: `FI_ENOSPC` (table full), `FI_EADDRNOTAVAIL`
    /// (a host name that does not resolve) or `FI_EINVAL` (a host name that resolves to an
    /// unusable fabric address) in `status`, `FI_ADDR_NOTAVAIL` in `fi_addr`, as for one
    /// address of [`AddressVector::insert_with_status`]. Errors, nothing inserted:
    /// `FI_EINVAL` for a bad node or service, a missing service, or a service beside an
    /// `FI_ADDR_STR` node; flag and argument errors as
    /// [`AddressVector::insert_with_status`]. Accepted on both formats.
    pub fn insertsvc(
        &mut self,
        node: &str,
        service: Option<&str>,
        fi_addr: Option<&mut FiAddr>,
        flags: u64,
        status: Option<&mut i32>,
    ) -> Result<usize, FiError> {
        let r = self.insert_svc(node, service, fi_addr, flags, status);
        self.end_batch_if_refused(flags, r)
    }

    /// [`AddressVector::insertsvc`] before [`AddressVector::end_batch_if_refused`].
    fn insert_svc(
        &mut self,
        node: &str,
        service: Option<&str>,
        fi_addr: Option<&mut FiAddr>,
        flags: u64,
        status: Option<&mut i32>,
    ) -> Result<usize, FiError> {
        let call = self.check_insert(
            "fi_av_insertsvc",
            1,
            fi_addr.map(core::slice::from_mut),
            flags,
            status.map(core::slice::from_mut),
        )?;
        let item = svc_item("fi_av_insertsvc", node, service, self.resolver)?;
        self.insert_items(call, core::iter::once(item))
    }

    /// `fi_av_insertsym`: insert `nodecnt` × `svccnt` addresses: for each node from `node`,
    /// each service from `service` (see [`crate::addr_str`] for how they count up). The range
    /// is checked and resolved before anything is inserted; then each address takes the
    /// lowest unused index, reported in `fi_addr` (and `status`) in that order. Errors, nothing
    /// inserted: `FI_EINVAL` for a bad node or service, a host name without numeric suffix when
    /// `nodecnt > 1`, a range that runs out of PIDonFEPs, IP addresses or suffix values, or one
    /// larger than the AV; flag and argument errors as [`AddressVector::insert_with_status`]
    /// with `count` = nodecnt × svccnt. A node whose name does not resolve fails only its own
    /// `svccnt` addresses (`FI_EADDRNOTAVAIL` in their status, `FI_ADDR_NOTAVAIL` in their
    /// `fi_addr`), and the others are inserted, as fi_av(3) reports failed addresses; so does
    /// a node whose name resolves to an unusable fabric address (`FI_EINVAL` in their status).
    #[allow(clippy::too_many_arguments)]
    pub fn insertsym(
        &mut self,
        node: &str,
        nodecnt: usize,
        service: &str,
        svccnt: usize,
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        let r = self.insert_sym(node, nodecnt, service, svccnt, fi_addr, flags, status);
        self.end_batch_if_refused(flags, r)
    }

    /// [`AddressVector::insertsym`] before [`AddressVector::end_batch_if_refused`].
    #[allow(clippy::too_many_arguments)]
    fn insert_sym(
        &mut self,
        node: &str,
        nodecnt: usize,
        service: &str,
        svccnt: usize,
        fi_addr: Option<&mut [FiAddr]>,
        flags: u64,
        status: Option<&mut [i32]>,
    ) -> Result<usize, FiError> {
        let prefix = |e: FiError| e.within("fi_av_insertsym");
        let total = nodecnt.checked_mul(svccnt).ok_or_else(|| {
            FiError::inval(format!(
                "fi_av_insertsym: nodecnt {nodecnt} × svccnt {svccnt} overflows"
            ))
        })?;
        let call = self.check_insert("fi_av_insertsym", total, fi_addr, flags, status)?;
        // A range larger than the whole AV can never be inserted whole, and refusing it here
        // bounds the work of a call whose fi_addr and status may be absent (nodecnt × svccnt
        // is not bounded by any buffer, as an insert's count is by its addresses).
        if total > self.capacity as usize {
            return Err(FiError::inval(format!(
                "fi_av_insertsym: {nodecnt} nodes × {svccnt} services = {total} addresses, \
                 more than the AV's {} entries",
                self.capacity
            )));
        }
        let range = SymRange::parse(node, nodecnt, service, svccnt).map_err(prefix)?;
        // Sequential addresses without per-address user ids or auth keys are stored as ranges:
        // on an AV opened without FI_AV_USER_ID, members inserted without the flag have no
        // user id, whatever earlier inserts carried (a freed index keeps none).
        if self.attr.flags & FI_AV_USER_ID == 0 && call.flags & (FI_AV_USER_ID | FI_AUTH_KEY) == 0 {
            if let Some((base, svc, total)) = range.literal_set() {
                return self.insert_symmetric(call, base, svc, total);
            }
        }
        let items = sym_items("fi_av_insertsym", &range, self.resolver)?;
        self.insert_items(call, items)
    }

    /// An insert call refused before it reached the AV, by a C shim that cannot read its
    /// arguments (a NULL node or address array, a string that is not UTF-8): it ends as a call
    /// the AV refuses itself does. Without `FI_MORE` it ends the batch of the `FI_MORE` calls
    /// before it, whose records are sent (see `AddressVector::end_batch_if_refused`). Always
    /// an error: `error`, or `FI_EIO` naming it when the NIC fails that batch.
    pub fn refuse_insert(&mut self, flags: u64, error: FiError) -> Result<usize, FiError> {
        self.end_batch_if_refused(flags, Err(error))
    }

    /// The end of every insert call: one made without `FI_MORE` ends the batch of the
    /// `FI_MORE` calls before it (fi_av(3): it "signifies to the provider that the insertion
    /// list is complete") even when it is refused itself — an argument error, a host name
    /// that does not resolve. Their records are sent, and the call's own error is returned.
    /// When the NIC fails the batch (see [`AddressVector::flush`]), the inserts of those
    /// earlier calls are rolled back (or in doubt): the call then fails with `FI_EIO`, its
    /// message giving both its own error and the batch's, since the call's own errno would
    /// say that nothing changed.
    #[inline]
    fn end_batch_if_refused(
        &mut self,
        flags: u64,
        result: Result<usize, FiError>,
    ) -> Result<usize, FiError> {
        // Every insert call ends here: its context (`with_context`), taken or not, ends too.
        self.call_context = 0;
        if flags & FI_MORE != 0 {
            // The call returns with its records pending: the next flush sends them after it.
            self.returned_pending = self.pending.len();
            return result;
        }
        match result {
            Err(e) if !self.pending.is_empty() => Err(self.end_refused_batch(e)),
            r => r,
        }
    }

    #[cold]
    fn end_refused_batch(&mut self, e: FiError) -> FiError {
        match self.flush() {
            Ok(()) => e,
            Err(f) => FiError::new(
                FiErrno::FI_EIO,
                format!(
                    "{} ({}); and the FI_MORE batch before this call was not sent: {}",
                    e.message, e.errno, f.message
                ),
            ),
        }
    }

    /// Check what every insert shares: flags, and the lengths of `fi_addr` and `status`.
    fn check_insert<'a>(
        &self,
        call: &'static str,
        count: usize,
        fi_addr: Option<&'a mut [FiAddr]>,
        flags: u64,
        status: Option<&'a mut [i32]>,
    ) -> Result<InsertCall<'a>, FiError> {
        check_flags(call, flags, INSERT_FLAGS)?;
        if flags & FI_SYNC_ERR != 0 && self.attr.flags & FI_EVENT != 0 {
            return Err(FiError::badflags(format!(
                "{call}: FI_SYNC_ERR applies to synchronous inserts only, and this AV was opened \
                 with FI_EVENT"
            )));
        }
        self.check_bound(call)?;
        if flags & FI_AV_USER_ID != 0 {
            self.check_per_call_user_ids(call)?;
            if fi_addr.is_none() {
                return Err(FiError::inval(format!(
                    "{call}: FI_AV_USER_ID needs the fi_addr array (it holds the user ids)"
                )));
            }
        }
        if flags & FI_AUTH_KEY != 0 {
            self.check_insert_keys(call, count, fi_addr.as_deref())?;
        }
        check_out_arrays(call, count, fi_addr.as_deref(), flags, status.as_deref())?;
        Ok(InsertCall {
            call,
            count,
            fi_addr,
            flags,
            status,
        })
    }

    /// The per-call `FI_AV_USER_ID` flag (of an insert, or of remove): `FI_EINVAL` on an AV
    /// opened with `FI_AV_USER_ID`, in an `FI_AV_AUTH_KEY` domain and in a domain with the
    /// `FI_AV_USER_ID` capability (fi_av(3): there "fi_av_set_user_id must be used").
    fn check_per_call_user_ids(&self, call: &str) -> Result<(), FiError> {
        let where_ = if self.attr.flags & FI_AV_USER_ID != 0 {
            "on an AV opened with FI_AV_USER_ID"
        } else if self.auth.is_some() {
            "in an FI_AV_AUTH_KEY domain"
        } else if !self.per_insert_user_ids {
            "in a domain opened with the FI_AV_USER_ID capability"
        } else {
            return Ok(());
        };
        Err(FiError::inval(format!(
            "{call}: the FI_AV_USER_ID flag is invalid {where_}; use set_user_id \
             (fi_av_set_user_id), on an AV opened with FI_AV_USER_ID"
        )))
    }

    /// Insert checked addresses (or the error each one failed with), reporting through
    /// `fi_addr` and `status`, then end the batch unless `FI_MORE`. The insert loop of every form
    /// and flag; [`AddressVector::insert_plain`] is its common case, which must stay equivalent
    /// (`plain_and_general_insert_loops_agree` in `av/tests/av_rules.rs` runs both side by
    /// side).
    fn insert_items<I>(&mut self, c: InsertCall<'_>, items: I) -> Result<usize, FiError>
    where
        I: IntoIterator<Item = Result<[u8; ADDR_LEN], FiError>>,
    {
        let InsertCall {
            call,
            count,
            mut fi_addr,
            flags,
            mut status,
        } = c;
        self.reconcile_before_insert(call)?;
        let mut event_call = self
            .is_event()
            .then(|| events::CallBuilder::new(core::mem::take(&mut self.call_context)));
        let per_insert_user_id = flags & FI_AV_USER_ID != 0;
        if per_insert_user_id && self.user_ids.is_none() {
            let mut u = Box::<UserIds>::default();
            let high_water = self.alloc.high_water() as usize;
            u.grow(high_water, high_water).map_err(|_| {
                FiError::new(
                    FiErrno::FI_ENOMEM,
                    format!("{call}: no memory for user ids"),
                )
            })?;
            self.user_ids = Some(u);
        }
        let open_user_id = (self.attr.flags & FI_AV_USER_ID != 0).then_some(FI_ADDR_NOTAVAIL);
        let mut own_out = own_fi_addrs(call, count, fi_addr.is_none() && status.is_some())?;

        let with_key = flags & FI_AUTH_KEY != 0;
        let mut inserted = 0;
        for (i, item) in items.into_iter().take(count).enumerate() {
            let user_id = if per_insert_user_id {
                fi_addr.as_deref().and_then(|o| o.get(i)).copied()
            } else {
                open_user_id
            };
            let key = if with_key {
                fi_addr
                    .as_deref()
                    .and_then(|o| o.get(i))
                    .and_then(|&h| self.insert_key(h))
            } else {
                None
            };
            let (value, st) = match item.and_then(|bytes| self.insert_one(bytes, user_id, key)) {
                Ok(index) => {
                    inserted += 1;
                    if let Some(b) = event_call.as_mut() {
                        b.staged(i, index);
                    }
                    (FiAddr::from(index), 0)
                }
                Err(e) => {
                    debug!(call, position = i, error = %e, "address not inserted");
                    if let Some(b) = event_call.as_mut() {
                        b.failed(i, &e);
                    }
                    (FI_ADDR_NOTAVAIL, e.errno.to_status())
                }
            };
            if let Some(slot) = fi_addr.as_deref_mut().and_then(|o| o.get_mut(i)) {
                *slot = value;
            }
            if let Some(slot) = own_out.get_mut(i) {
                *slot = value;
            }
            if let Some(slot) = status.as_deref_mut().and_then(|s| s.get_mut(i)) {
                *slot = st;
            }
        }

        if let Some(b) = event_call {
            // FI_SUCCESS: the call was initiated; its outcome comes as events.
            if self.push_call(b, flags & FI_MORE != 0) {
                self.unmark_released(fi_addr, count);
            }
            return Ok(0);
        }
        self.end_batch(flags, count, fi_addr, &mut own_out, status, None)?;
        Ok(inserted)
    }

    /// End an insert call: unless `FI_MORE`, send the pending records; if the NIC refuses
    /// them, mark every address of this call that was rolled back as failed (`fi_addr`
    /// `FI_ADDR_NOTAVAIL`, status the error's errno) and return the error.
    fn end_batch(
        &mut self,
        flags: u64,
        count: usize,
        fi_addr: Option<&mut [FiAddr]>,
        own_out: &mut [FiAddr],
        mut status: Option<&mut [i32]>,
        input: Option<&[Slot]>,
    ) -> Result<(), FiError> {
        if flags & FI_MORE != 0 {
            return Ok(());
        }
        let Err(e) = self.flush_with(input) else {
            return Ok(());
        };
        let out = match fi_addr {
            Some(out) => out,
            None => own_out,
        };
        for (i, slot) in out.iter_mut().take(count).enumerate() {
            if *slot != FI_ADDR_NOTAVAIL && self.index_of(*slot).is_err() {
                *slot = FI_ADDR_NOTAVAIL;
                if let Some(st) = status.as_deref_mut().and_then(|s| s.get_mut(i)) {
                    *st = e.errno.to_status();
                }
            }
        }
        Err(e)
    }

    /// Insert the `total` members of a symmetric set (member 0 `base`, `svc` services per
    /// node) as ranges: each run of consecutive lowest-free indices becomes one range record
    /// (a lone index, a single entry), so the mirror and the NIC hold one record per run, not
    /// one per peer. Index assignment is exactly that of inserting the members one by one.
    fn insert_symmetric(
        &mut self,
        c: InsertCall<'_>,
        base: UetAddress,
        svc: u32,
        total: u32,
    ) -> Result<usize, FiError> {
        let InsertCall {
            call,
            count,
            mut fi_addr,
            flags,
            mut status,
        } = c;
        self.reconcile_before_insert(call)?;
        let mut event_call = self
            .is_event()
            .then(|| events::CallBuilder::new(core::mem::take(&mut self.call_context)));
        let mut own_out = own_fi_addrs(call, count, fi_addr.is_none() && status.is_some())?;
        let mut m = 0u32;
        let mut failure = FiErrno::FI_ENOSPC;
        while m < total {
            let Some((first, n)) = self.alloc.alloc_run(total - m) else {
                break;
            };
            // Cut the run where it crosses the span of an older range (whose removed members
            // left holes): there each index is a single entry, a range never covers another.
            let mut done = 0u32;
            while done < n {
                let at = first + done;
                let in_old_range = |i: u32| self.ranges.covering(i).is_some();
                let piece = if in_old_range(at) {
                    1
                } else {
                    let mut len = 1;
                    while done + len < n && !in_old_range(at + len) {
                        len += 1;
                    }
                    len
                };
                let member = m + done;
                let stored = if self.pending.try_reserve(1).is_err() {
                    Err(())
                } else if piece >= 2 {
                    self.ranges.insert(Range {
                        first: at,
                        count: piece,
                        svc,
                        offset: member,
                        base,
                        live: piece,
                    });
                    Ok(())
                } else {
                    match base.symmetric_member(svc, member).map(|a| a.to_bytes()) {
                        Some(Ok(bytes)) => self
                            .reserve_index(at)
                            .map_err(|_| ())
                            .and_then(|()| self.slots.set(at, bytes).then_some(()).ok_or(())),
                        _ => Err(()),
                    }
                };
                if stored.is_err() {
                    for i in at..first + n {
                        self.alloc.free(i);
                    }
                    failure = FiErrno::FI_ENOMEM;
                    break;
                }
                self.pending.push(at);
                if let Some(b) = event_call.as_mut() {
                    b.staged_run(member as usize, at, piece);
                }
                for j in 0..piece {
                    let k = (member + j) as usize;
                    let value = FiAddr::from(at + j);
                    if let Some(slot) = fi_addr.as_deref_mut().and_then(|o| o.get_mut(k)) {
                        *slot = value;
                    }
                    if let Some(slot) = own_out.get_mut(k) {
                        *slot = value;
                    }
                    if let Some(slot) = status.as_deref_mut().and_then(|s| s.get_mut(k)) {
                        *slot = 0;
                    }
                }
                done += piece;
            }
            m += done;
            if done < n {
                break;
            }
        }
        for k in m as usize..count {
            if let Some(b) = event_call.as_mut() {
                let why = match failure {
                    FiErrno::FI_ENOSPC => format!("all {} AV entries are in use", self.capacity),
                    _ => "no memory to grow the AV mirror".to_string(),
                };
                b.failed(k, &FiError::new(failure, why));
            }
            if let Some(slot) = fi_addr.as_deref_mut().and_then(|o| o.get_mut(k)) {
                *slot = FI_ADDR_NOTAVAIL;
            }
            if let Some(slot) = status.as_deref_mut().and_then(|s| s.get_mut(k)) {
                *slot = failure.to_status();
            }
        }
        if (m as usize) < count {
            debug!(
                call,
                inserted = m,
                count,
                "symmetric insert stopped: {failure}"
            );
        }
        if let Some(b) = event_call {
            // FI_SUCCESS: the call was initiated; its outcome comes as events.
            if self.push_call(b, flags & FI_MORE != 0) {
                self.unmark_released(fi_addr, count);
            }
            return Ok(0);
        }
        self.end_batch(flags, count, fi_addr, &mut own_out, status, None)?;
        Ok(m as usize)
    }

    /// Insert one checked serialized address into the mirror (bound to auth key `key`) and
    /// queue its NIC record. The error carries the errno `FI_SYNC_ERR` reports for the address.
    fn insert_one(
        &mut self,
        bytes: [u8; ADDR_LEN],
        user_id: Option<u64>,
        key: Option<u16>,
    ) -> Result<u32, FiError> {
        let index = self.alloc.alloc().ok_or_else(|| {
            FiError::new(
                FiErrno::FI_ENOSPC,
                format!("all {} AV entries are in use", self.capacity),
            )
        })?;
        let capacity = self.capacity;
        let key_room = match (key, self.auth.as_deref_mut()) {
            (Some(_), Some(a)) => a.reserve(index, capacity).is_ok(),
            _ => true,
        };
        if !key_room || self.pending.try_reserve(1).is_err() || self.reserve_index(index).is_err() {
            self.alloc.free(index);
            return Err(FiError::new(
                FiErrno::FI_ENOMEM,
                "no memory to grow the AV mirror",
            ));
        }
        if !self.slots.set(index, bytes) {
            self.alloc.free(index);
            return Err(no_slot_memory());
        }
        if let Some(u) = self.user_ids.as_deref_mut() {
            u.set(index, user_id);
        }
        if let (Some(k), Some(a)) = (key, self.auth.as_deref_mut()) {
            a.bind(index, k);
        }
        self.pending.push(index);
        Ok(index)
    }

    /// Make room for `index` in the user ids, when the AV has them (they grow by a quarter at
    /// a time, never past the capacity). The slots need none: they are mapped whole at open.
    fn reserve_index(&mut self, index: u32) -> Result<(), std::collections::TryReserveError> {
        if let Some(u) = self.user_ids.as_deref_mut() {
            let len = index as usize + 1;
            let have = u.ids.len();
            if len > have {
                let step = (have / 4).max(1024);
                let cap = (have + step).max(len).min(self.capacity as usize).max(len);
                u.grow(len, cap)?;
            }
        }
        Ok(())
    }

    /// Place `count` (at least 2) members of a symmetric set — member 0 `base`, `svc` services
    /// per node — from member `offset` on, at the unused indices `first..first + count`, as
    /// one range, as [`AddressVector::insert_at`] places one address: a named AV's processes
    /// each hold the range as a range. The NIC record waits until [`AddressVector::flush`].
    /// Errors, nothing changed: `FI_EINVAL` when the indices leave the table, one is in use or
    /// lies in the span of a range (whose removed members are holes a range may not cover),
    /// a member is not a usable address, `count` is below 2, or the AV was opened with
    /// `FI_EVENT` or keeps user ids; `FI_ENOMEM`.
    pub fn insert_range_at(
        &mut self,
        first: u32,
        count: u32,
        svc: u32,
        offset: u32,
        base: UetAddress,
    ) -> Result<(), FiError> {
        let refuse = |why: String| Err(FiError::inval(format!("insert_range_at: {why}")));
        if self.is_event() || self.user_ids.is_some() {
            return refuse("ranges are placed only in synchronous AVs without user ids".into());
        }
        let end = u64::from(first) + u64::from(count);
        if count < 2 || end > u64::from(self.capacity) {
            return refuse(format!(
                "indices {first}..{end} are not a range of at least 2 in the AV's {} entries",
                self.capacity
            ));
        }
        let last_member = offset.checked_add(count - 1);
        let usable = |m: Option<u32>| {
            m.and_then(|m| base.symmetric_member(svc, m))
                .is_some_and(|a| a.to_bytes().is_ok())
        };
        if svc == 0 || !usable(Some(offset)) || !usable(last_member) {
            return refuse(format!(
                "members {offset}..+{count} of the set are not all usable addresses"
            ));
        }
        // Every node's first and last service must be usable; between them only PIDonFEP and
        // initiator change, within range (as `SymRange::literal_set` reasons).
        let mut node_start = offset - offset % svc;
        while let Some(m) = last_member.filter(|&l| node_start <= l) {
            let lo = node_start.max(offset);
            let hi = (node_start.saturating_add(svc - 1)).min(m);
            if !usable(Some(lo)) || !usable(Some(hi)) {
                return refuse(format!("member {lo} or {hi} of the set is not usable"));
            }
            match node_start.checked_add(svc) {
                Some(n) => node_start = n,
                None => break,
            }
        }
        if self.ranges.meets(first, end) {
            return refuse(format!("indices {first}..{end} meet the span of a range"));
        }
        if let Some(used) = (first..first + count).find(|&i| self.alloc.is_allocated(i)) {
            return refuse(format!("index {used} is in use"));
        }
        if self.pending.try_reserve(1).is_err() {
            return Err(FiError::new(
                FiErrno::FI_ENOMEM,
                "insert_range_at: no memory",
            ));
        }
        let range = Range {
            first,
            count,
            svc,
            offset,
            base,
            live: count,
        };
        self.ranges.insert(range);
        for i in first..first + count {
            // Cannot fail: every index was checked free and lies in the table.
            let _ = self.alloc.alloc_at(i);
        }
        self.pending.push(first);
        Ok(())
    }

    /// Place the checked address `bytes` at `index`, an unused index of the table, instead of
    /// the lowest unused one: the indices of a named AV are chosen by the allocator its
    /// processes share ([`crate::NamedAv`]), and each process places them in its own mirror.
    /// The NIC record waits like an `FI_MORE` insert's until [`AddressVector::flush`] (whose
    /// failure rolls it back with the rest of the batch). On an AV opened with
    /// `FI_AV_USER_ID` the user id starts as `FI_ADDR_NOTAVAIL`. Errors, nothing changed:
    /// `FI_EINVAL` when `index` is outside the table or in use, `bytes` is not a valid address,
    /// or the AV was opened with `FI_EVENT`; `FI_ENOMEM`.
    pub fn insert_at(&mut self, index: u32, bytes: &[u8; ADDR_LEN]) -> Result<(), FiError> {
        if self.is_event() {
            return Err(FiError::inval(
                "insert_at: the AV was opened with FI_EVENT; placed inserts are synchronous",
            ));
        }
        if index >= self.capacity {
            return Err(FiError::inval(format!(
                "insert_at: index {index} is outside the AV's {} entries",
                self.capacity
            )));
        }
        if self.alloc.is_allocated(index) {
            return Err(FiError::inval(format!(
                "insert_at: index {index} is in use"
            )));
        }
        if !UetAddress::bytes_are_valid(bytes) {
            let why = UetAddress::from_bytes(bytes).err().map(|e| e.to_string());
            return Err(FiError::inval(format!(
                "insert_at: index {index}: {}",
                why.unwrap_or_else(|| "malformed address".into())
            )));
        }
        if self.pending.try_reserve(1).is_err() || self.reserve_index(index).is_err() {
            return Err(FiError::new(
                FiErrno::FI_ENOMEM,
                "insert_at: no memory to grow the AV mirror",
            ));
        }
        if !self.alloc.alloc_at(index) {
            return Err(FiError::new(
                FiErrno::FI_ENOMEM,
                "insert_at: the index allocator refused the index",
            ));
        }
        if !self.slots.set(index, *bytes) {
            self.alloc.free(index);
            return Err(no_slot_memory());
        }
        if let Some(u) = self.user_ids.as_deref_mut() {
            let open_user_id = (self.attr.flags & FI_AV_USER_ID != 0).then_some(FI_ADDR_NOTAVAIL);
            u.set(index, open_user_id);
        }
        self.pending.push(index);
        Ok(())
    }

    /// The serialized address at `index` as the mirror holds it; `None` when `index` is unused
    /// or outside the table.
    pub fn address_bytes(&self, index: u32) -> Option<[u8; ADDR_LEN]> {
        self.slot_of(u64::from(index)).ok().map(|(_, bytes)| bytes)
    }

    /// Whether no NIC state is in doubt: no entry, and no auth key's source.
    #[inline]
    fn nothing_in_doubt(&self) -> bool {
        self.in_doubt.is_empty()
            && self
                .auth
                .as_deref()
                .is_none_or(|a| a.source_in_doubt.is_empty())
    }

    /// Indices whose NIC entry is in doubt since a command concerning them went unanswered,
    /// waiting to be rewritten (see "When the NIC does not answer" above); 0 normally.
    pub fn entries_in_doubt(&self) -> usize {
        // Listed as they came (an index may be listed twice until the repair sorts them).
        let mut indices = self.in_doubt.clone();
        indices.sort_unstable();
        indices.dedup();
        indices.len()
    }

    /// Whether `index` is in use as a member of a symmetric range (not a single entry, such as
    /// one inserted later into a hole of a range's span).
    pub fn is_range_member(&self, index: u32) -> bool {
        !self.slots.is_filled(index)
            && self.entry_source().in_use(index)
            && self.ranges.covering(index).is_some()
    }

    /// Send the NIC records of every pending `FI_MORE` insert: one write command (or one per
    /// [`MAX_BATCH`] records): AV_WRITE_PEERS ([`NicAvTable::write_peers`]) for a run of new
    /// peers at consecutive indices with nothing beside their addresses, AV_WRITE otherwise.
    /// A refused write rolls the whole batch back; an unanswered one keeps the whole batch inserted, the records the NIC may lack in doubt. Entries in
    /// doubt (and the sources of auth keys in doubt) are rewritten first; if that fails,
    /// nothing is sent and the batch is rolled back.
    ///
    /// The error is `FI_EAGAIN` only when the NIC had no room for a command and the flush
    /// changed nothing a call has reported: every record rolled back (none the NIC kept)
    /// and none of them from an insert call that has already returned — the records of the
    /// call that ends the batch, or of no call (a named AV's). Otherwise `FI_EIO`.
    pub fn flush(&mut self) -> Result<(), FiError> {
        self.flush_with(None)
    }

    /// [`AddressVector::flush`], given the addresses of the pending inserts when the caller
    /// has them in order (a synchronous insert of nothing but binary addresses, all inserted,
    /// with nothing pending before it), so that a run of new peers goes to the NIC without
    /// being unpacked from the mirror. Ignored unless there are as many as pending inserts.
    fn flush_with(&mut self, input: Option<&[Slot]>) -> Result<(), FiError> {
        // Records of calls that have returned come first (see `returned_pending`); the rest,
        // if any, are the flushing call's own.
        let returned = core::mem::take(&mut self.returned_pending).min(self.pending.len());
        let own = returned == 0;
        if self.is_event() {
            self.submit_pending();
            return Ok(());
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        // Entries and auth-key sources in doubt alike, as every call that sends the NIC
        // anything rewrites them first.
        if !self.nothing_in_doubt() {
            if let Err(e) = self.repair() {
                let pending = core::mem::take(&mut self.pending);
                let total = pending.len();
                let lost_before = self.lost.len();
                self.roll_back(&pending, 0, returned);
                return Err(FiError::new(
                    if own { e.errno } else { FiErrno::FI_EIO },
                    format!(
                        "{total} pending inserts not sent, all rolled back{}: {}",
                        lost_note(self.lost.len() - lost_before),
                        e.message
                    ),
                ));
            }
        }
        let mut pending = core::mem::take(&mut self.pending);
        let mut written = 0;
        let mut failure = None;
        let mut failed_len = 0;
        let entries = entry_source!(self);
        // The addresses of a run of new peers, unpacked from the mirror for the NIC; made once
        // per flush (an allocation per batch, a fraction of a nanosecond per entry) and not
        // kept, so an AV holds no copy of its largest batch.
        let mut peers: Vec<Slot> = Vec::new();
        // The caller's addresses, when they are exactly the pending inserts, in order.
        let input = input.filter(|i| i.len() == pending.len());
        for (k, chunk) in pending.chunks(MAX_BATCH as usize).enumerate() {
            // A fresh AV fills from index 0, so a batch is usually one run of new peers: the
            // NIC is handed just their addresses, the caller's own when it gave them,
            // else unpacked from the mirror. Without memory for them, their records are built
            // one by one below.
            let at = k * MAX_BATCH as usize;
            let given = input.and_then(|i| i.get(at..at + chunk.len()));
            let run = entries.peer_run(chunk).and_then(|first| match given {
                Some(given) => Some((first, given)),
                None => {
                    peers.clear();
                    peers.try_reserve_exact(chunk.len()).ok()?;
                    peers.extend(
                        (first..)
                            .take(chunk.len())
                            .filter_map(|i| entries.slots.get(i)),
                    );
                    Some((first, &peers[..]))
                }
            });
            if let Some((first, addrs)) = run {
                debug_assert!(
                    addrs
                        .iter()
                        .zip(first..)
                        .all(|(a, i)| entries.slots.get(i).as_ref() == Some(a)),
                    "the addresses handed to the NIC are the mirror's"
                );
                let sent = self
                    .nic
                    .write_peers(first, addrs, entries.job_id, entries.entry_flags);
                if let Err(e) = sent {
                    failed_len = chunk.len();
                    failure = Some(e);
                    break;
                }
                written += chunk.len();
                continue;
            }
            // Each record is built where the NIC table takes it (for the driver, in the DMA
            // memory AV_WRITE reads).
            let mut record = |i: usize| {
                // Always within the chunk (exactly that many are asked for); past it, an index
                // outside every table, so that a miscount fails the whole write.
                let index = chunk.get(i).copied().unwrap_or(u32::MAX);
                AvWriteRecord {
                    index: index.into(),
                    reserved: Default::default(),
                    entry: entries.pending_record(index),
                }
            };
            if let Err(e) = self.nic.write_entries_with(chunk.len(), &mut record) {
                failed_len = chunk.len();
                failure = Some(e);
                break;
            }
            written += chunk.len();
        }
        let total = pending.len();
        let result = match failure {
            None => Ok(()),
            Some(e) if e.in_doubt => {
                // The unanswered AV_WRITE may yet be applied, after anything sent now: the
                // whole batch stays inserted, every `fi_addr` it returned stands. What the NIC
                // accepted is there; the unanswered records and the unsent ones after them
                // are rewritten at the next call.
                let doubtful = &pending[written.min(total)..];
                for &index in doubtful {
                    self.doubt_record(index);
                }
                warn!(entries = total, error = %e, "NIC write unanswered, batch kept");
                Err(FiError::io(format!(
                    "the NIC did not answer the write of {failed_len} of {total} pending \
                     inserts; all {total} stay inserted ({} are rewritten at the next call that \
                     sends the NIC anything): {e}",
                    doubtful.len()
                )))
            }
            Some(e) => {
                let lost_before = self.lost.len();
                let kept = self.roll_back(&pending, written, returned);
                let lost = lost_note(self.lost.len() - lost_before);
                warn!(entries = total, kept, error = %e, "NIC write refused, batch rolled back");
                // Retrying is safe only when the call changed nothing.
                let errno = if kept == 0 && own {
                    e.errno()
                } else {
                    FiErrno::FI_EIO
                };
                Err(FiError::new(
                    errno,
                    format!(
                        "the NIC refused the write of {total} pending inserts; {} rolled back, \
                     {kept} stay inserted (the NIC did not take back what it had accepted of \
                     them){lost}: {e}",
                        total - kept
                    ),
                ))
            }
        };
        pending.clear();
        if pending.capacity() <= SCRATCH_KEEP {
            self.pending = pending;
        }
        result
    }

    /// Make the NIC hold what the mirror holds: rewrite the entries in doubt (see "When the
    /// NIC does not answer"), send the records of pending `FI_MORE` inserts and, on an
    /// `FI_EVENT` AV, wait for the AV_WRITEs in flight, post the events of the calls they
    /// finish, and release what the NIC refused. What a tool that reads the NIC table back
    /// calls first; every synchronous call of the AV does the same.
    pub fn settle(&mut self) -> Result<(), FiError> {
        self.settle_nic()
    }

    /// [`AddressVector::settle`], inlined where the AV's own calls start.
    #[inline]
    fn settle_nic(&mut self) -> Result<(), FiError> {
        if !self.is_event() && self.pending.is_empty() && self.nothing_in_doubt() {
            // Nothing to send, nothing in flight, nothing to repair: the common case, without
            // a call.
            return Ok(());
        }
        self.settle_pending()
    }

    /// [`AddressVector::settle_nic`] before a synchronous call on `indices`, which were in use
    /// when it started. On an `FI_EVENT` AV settling takes in the NIC's answers, which may
    /// take an index back (its asynchronous insert failed): then `FI_EINVAL`, and the call
    /// does nothing. (A synchronous AV's flush either succeeded, taking nothing back, or
    /// returned its error.)
    #[inline(always)]
    fn settle_keeping(&mut self, call: &str, indices: &[u32]) -> Result<(), FiError> {
        self.settle_nic()?;
        if self.is_event() {
            if let Some(&gone) = indices
                .iter()
                .find(|&&i| self.index_of(u64::from(i)).is_err())
            {
                return Err(FiError::inval(format!(
                    "{call}: index {gone} was taken back: its asynchronous insert failed"
                )));
            }
        }
        Ok(())
    }

    /// [`AddressVector::settle_nic`] when there may be something to send or wait for.
    #[inline(never)]
    fn settle_pending(&mut self) -> Result<(), FiError> {
        if self.is_event() {
            // Draining takes in the NIC's answers, which may put entries in doubt.
            self.drain();
            if !self.nothing_in_doubt() {
                self.repair()?;
            }
            return Ok(());
        }
        // Entries in doubt before this call first; a flush that goes unanswered now adds
        // its own for the next call (the NIC just did not answer).
        if !self.nothing_in_doubt() {
            self.repair()?;
        }
        self.flush()
    }

    /// Undo a batch whose AV_WRITE was refused after `written` of its records were accepted.
    /// The first `returned` records are of insert calls that have returned their indices:
    /// those indices are lost, not freed (see [`lost`]). Returns how many entries stay
    /// inserted: accepted ones the NIC then failed to invalidate.
    fn roll_back(&mut self, batch: &[u32], written: usize, returned: usize) -> usize {
        let written = written.min(batch.len());
        for (pos, &index) in batch.iter().enumerate().skip(written) {
            self.drop_record(index, pos < returned);
        }
        let mut stayed = 0;
        // Records the NIC accepted are invalidated index by index (a range member by member);
        // the indices of returned records follow the others.
        let (sent_returned, sent_own) = batch[..written].split_at(returned.min(written));
        let mut indices = Vec::new();
        for &index in sent_own {
            indices.extend(self.record_span(index));
        }
        let first_returned = indices.len();
        for &index in sent_returned {
            indices.extend(self.record_span(index));
        }
        for (k, chunk) in indices.chunks(MAX_BATCH as usize).enumerate() {
            let at = k * MAX_BATCH as usize;
            match self.nic.invalidate(chunk) {
                Ok(()) => {
                    for (j, &index) in chunk.iter().enumerate() {
                        if at + j >= first_returned {
                            self.lose(index);
                        } else {
                            self.release(index);
                        }
                    }
                }
                Err(e) => {
                    warn!(
                        entries = chunk.len(),
                        error = %e,
                        "AV_INVALIDATE during roll-back failed; those entries stay inserted"
                    );
                    if e.in_doubt {
                        self.in_doubt.extend_from_slice(chunk);
                    }
                    stayed += chunk.len();
                }
            }
        }
        stayed
    }

    /// The indices the NIC record at `index` covers: the single entry's, or the whole span of
    /// the range that starts there.
    fn record_span(&self, index: u32) -> core::ops::Range<u32> {
        let is_single = self.slots.is_filled(index);
        match self.ranges.starting_at(index).filter(|_| !is_single) {
            Some(r) => r.first..r.first + r.count,
            None => index..index + 1,
        }
    }

    /// Mark the NIC entries of the record at `index` (a single entry, or a whole range) in
    /// doubt.
    fn doubt_record(&mut self, index: u32) {
        let span = self.record_span(index);
        self.in_doubt.extend(span);
    }

    /// Make the NIC hold what the mirror holds at every index in doubt, with commands that
    /// land after the unanswered ones (see [`crate::nic::NicAvTable`]); see
    /// [`AddressVector::rewrite`]. Runs before every call that settles the NIC
    /// ([`AddressVector::settle`]). `FI_EIO` if the NIC still does not answer, or refuses
    /// (`FI_EAGAIN` when it had no room for a command; the table's errno for an auth key's
    /// source it refuses); then what is in doubt stays so, for the next call to try again. Either way the
    /// AV is unchanged: the entries in doubt hold what they held.
    #[cold]
    fn repair(&mut self) -> Result<(), FiError> {
        self.resend_auth_key_sources()?;
        let mut doubt = core::mem::take(&mut self.in_doubt);
        doubt.sort_unstable();
        doubt.dedup();
        let result = self.rewrite(&doubt);
        if result.is_err() {
            self.in_doubt = doubt;
        } else {
            debug!(
                entries = doubt.len(),
                "entries in doubt rewritten on the NIC"
            );
        }
        result
    }

    /// Rewrite `doubt` (ascending, distinct) on the NIC from the mirror. A symmetric range is
    /// one record on the NIC, so an index a range covers brings the range's whole span in.
    /// Four commands (each in [`MAX_BATCH`] pieces), in this order:
    /// 1. AV_INVALIDATE every index: whatever a late command left there goes;
    /// 2. AV_WRITE each range's record, all its members live again;
    /// 3. AV_INVALIDATE the members the mirror no longer holds (holes);
    /// 4. AV_WRITE each single entry (one in a range's hole included).
    fn rewrite(&mut self, doubt: &[u32]) -> Result<(), FiError> {
        // Records not sent yet (FI_MORE) are not the NIC's to hold: the flush sends them, or
        // rolls them back without telling the NIC.
        let mut unsent = self.pending.clone();
        unsent.sort_unstable();
        let sent = |i: &u32| unsent.binary_search(i).is_err();
        let entries = entry_source!(self);
        // A range's record is unsent when its first index is pending and holds no single
        // entry; a single entry pending there sits in a hole of a range the NIC has.
        let mut spans: Vec<(u32, u32)> = doubt
            .iter()
            .filter_map(|&i| entries.ranges.covering(i).map(|r| (r.first, r.count)))
            .filter(|(first, _)| sent(first) || entries.single(*first).is_some())
            .collect();
        spans.dedup();
        let mut all = doubt.to_vec();
        for &(first, count) in &spans {
            all.extend(first..first + count);
        }
        all.sort_unstable();
        all.dedup();
        let record = |index: u32, entry: NicAvEntry| AvWriteRecord {
            index: index.into(),
            reserved: Default::default(),
            entry,
        };
        let ranges: Vec<AvWriteRecord> = spans
            .iter()
            .filter_map(|&(first, _)| {
                let r = entries.ranges.starting_at(first)?;
                Some(record(first, entries.range_record(r)))
            })
            .collect();
        // A member is live when its index is in use and holds no single entry of its own.
        let holes: Vec<u32> = spans
            .iter()
            .flat_map(|&(first, count)| first..first + count)
            .filter(|&i| !entries.in_use(i) || entries.single(i).is_some())
            .collect();
        let singles: Vec<AvWriteRecord> = all
            .iter()
            .filter(|i| sent(i))
            .filter_map(|&i| {
                entries
                    .single(i)
                    .map(|slot| record(i, entries.single_entry(i, &slot)))
            })
            .collect();
        /// One step of the repair: a command over all of its list, in MAX_BATCH pieces.
        enum Step<'a> {
            Invalidate(&'a [u32]),
            Write(&'a [AvWriteRecord]),
        }
        let steps = [
            ("invalidating", Step::Invalidate(&all)),
            ("rewriting the ranges of", Step::Write(&ranges)),
            ("reopening the holes of", Step::Invalidate(&holes)),
            ("rewriting", Step::Write(&singles)),
        ];
        for (what, step) in steps {
            let pieces = MAX_BATCH as usize;
            match step {
                Step::Invalidate(indices) => indices
                    .chunks(pieces)
                    .try_for_each(|chunk| self.nic.invalidate(chunk)),
                Step::Write(records) => records
                    .chunks(pieces)
                    .try_for_each(|chunk| self.nic.write_entries(chunk)),
            }
            .map_err(|e| {
                FiError::new(
                    e.errno(),
                    format!(
                        "{} NIC entries are in doubt since a command went unanswered, and {what} \
                         them failed: {e}",
                        doubt.len()
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// Drop `index` (and its user id) from the mirror and free it.
    #[inline]
    fn release(&mut self, index: u32) {
        self.forget(index);
        self.alloc.free(index);
    }

    /// Drop `index` (and its user id) from the mirror and keep it allocated, lost (see
    /// [`lost`]); freed instead when there is no memory to note it.
    #[cold]
    fn lose(&mut self, index: u32) {
        self.forget(index);
        if self.lost.add(index).is_err() {
            self.alloc.free(index);
        }
    }

    /// Drop `index` (and its user id) from the mirror; the allocator is the caller's.
    #[inline]
    fn forget(&mut self, index: u32) {
        if !self.slots.clear(index) && self.alloc.is_allocated(index) {
            // No slot: a member of a symmetric range.
            self.ranges.member_removed(index);
        }
        if let Some(u) = self.user_ids.as_deref_mut() {
            u.set(index, None);
        }
        if let Some(a) = self.auth.as_deref_mut() {
            a.unbind(index);
        }
    }

    /// Drop a whole pending record that was never sent: the single entry at `index`, or the
    /// range starting there. Its indices are freed, or lost when `lost` (the record was
    /// returned by an insert call).
    fn drop_record(&mut self, index: u32, lost: bool) {
        let is_single = self.slots.is_filled(index);
        if !is_single {
            if let Some(r) = self.ranges.remove_at(index) {
                if lost && self.lost.add_run(r.first, r.count).is_ok() {
                    return;
                }
                for i in r.first..r.first + r.count {
                    self.alloc.free(i);
                }
                return;
            }
        }
        if lost {
            self.lose(index);
        } else {
            self.release(index);
        }
    }

    /// The NIC record of a pending insert at `index`: the single entry, or the range record.
    fn pending_record(&self, index: u32) -> NicAvEntry {
        self.entry_source().pending_record(index)
    }

    /// The parts of the mirror NIC entries are made of.
    fn entry_source(&self) -> EntrySource<'_> {
        entry_source!(self)
    }

    /// `fi_av_remove`: remove every address in `fi_addrs`, or none.
    ///
    /// `FI_EINVAL` (nothing removed) if any is `FI_ADDR_NOTAVAIL`, outside the table, not in
    /// use (never inserted, or removed), or listed twice. Receive-context bits are ignored. A
    /// lost index ([`lost`]) is removed like an address: it is freed, with no NIC command of
    /// its own.
    /// Pending `FI_MORE` inserts are sent first; then one AV_INVALIDATE removes the addresses
    /// from the NIC, and their indices (and user ids) become free (the lowest is reused first).
    /// `FI_AV_USER_ID` is `FI_EINVAL` on an AV opened with it, in an `FI_AV_AUTH_KEY` domain
    /// and in a domain with the `FI_AV_USER_ID` capability (fi_av(3): the flag "per
    /// fi_av_insert / fi_av_insertsvc / fi_av_remove is not supported" there, as for inserts),
    /// and `FI_EBADFLAGS` elsewhere, like every other flag. With `FI_AUTH_KEY`, `fi_addrs` are
    /// auth-key handles (see [`auth_keys`]).
    pub fn remove(&mut self, fi_addrs: &[FiAddr], flags: u64) -> Result<(), FiError> {
        if flags & FI_AV_USER_ID != 0 {
            self.check_per_call_user_ids("fi_av_remove")?;
        }
        check_flags("fi_av_remove", flags, FI_AUTH_KEY)?;
        if flags & FI_AUTH_KEY != 0 {
            return self.remove_auth_keys(fi_addrs);
        }
        match fi_addrs {
            [] => return Ok(()),
            [one] => return self.remove_one(*one),
            _ => {}
        }
        let mut list = core::mem::take(&mut self.index_buf);
        list.clear();
        let result = self.remove_listed(fi_addrs, &mut list);
        list.clear();
        if list.capacity() <= SCRATCH_KEEP {
            self.index_buf = list;
        }
        result
    }

    /// [`AddressVector::remove`] of one address, without the list a batch needs: the checks,
    /// errors and NIC command `remove_listed` makes for one index.
    fn remove_one(&mut self, fi_addr: FiAddr) -> Result<(), FiError> {
        let named = |e: FiError| e.within("fi_av_remove: fi_addr[0]");
        let index = match self.index_of(fi_addr) {
            Ok(index) => index,
            Err(e) => {
                return match self.lost_index(fi_addr) {
                    Some(index) => self.remove_lost_one(index),
                    None => Err(named(e)),
                };
            }
        };
        self.settle_keeping("fi_av_remove", &[index])?;
        if let Err(e) = self.nic.invalidate(&[index]) {
            if e.in_doubt {
                self.in_doubt.push(index);
            }
            return Err(invalidate_refused(&[index], 0, 1, &e));
        }
        self.release(index);
        Ok(())
    }

    fn remove_listed(&mut self, fi_addrs: &[FiAddr], list: &mut Vec<u32>) -> Result<(), FiError> {
        let no_memory = || FiError::new(FiErrno::FI_ENOMEM, "fi_av_remove: no memory");
        list.try_reserve(fi_addrs.len()).map_err(|_| no_memory())?;
        let mut lost_listed = 0;
        for (pos, &fa) in fi_addrs.iter().enumerate() {
            let index = match self.index_of(fa) {
                Ok(index) => index,
                Err(e) => {
                    let Some(index) = self.lost_index(fa) else {
                        return Err(e.within(format_args!("fi_av_remove: fi_addr[{pos}]")));
                    };
                    lost_listed += 1;
                    index
                }
            };
            list.push(index);
        }
        if list.len() > 1 {
            list.sort_unstable();
            if let Some(w) = list.windows(2).find(|w| w[0] == w[1]) {
                return Err(FiError::inval(format!(
                    "fi_av_remove: index {} is listed more than once",
                    w[0]
                )));
            }
        }
        // Lost indices hold nothing on the NIC: they are freed once the others are removed.
        let mut lost = Vec::new();
        if lost_listed > 0 {
            lost.try_reserve(lost_listed).map_err(|_| no_memory())?;
            self.lost.reserve(lost_listed).map_err(|_| no_memory())?;
            lost.extend(list.iter().copied().filter(|&i| self.lost.contains(i)));
            list.retain(|&i| !self.lost.contains(i));
        }
        self.settle_keeping("fi_av_remove", list)?;
        let mut removed = 0;
        for chunk in list.chunks(MAX_BATCH as usize) {
            if let Err(e) = self.nic.invalidate(chunk) {
                if e.in_doubt {
                    self.in_doubt.extend_from_slice(chunk);
                }
                return Err(invalidate_refused(chunk, removed, list.len(), &e));
            }
            for &index in chunk {
                self.release(index);
            }
            removed += chunk.len();
        }
        for index in lost {
            self.free_lost(index);
        }
        Ok(())
    }

    /// The index `fi_addr` names when it is lost (see [`lost`]).
    #[cold]
    fn lost_index(&self, fi_addr: FiAddr) -> Option<u32> {
        if self.lost.is_empty() {
            return None;
        }
        self.decoder
            .index(fi_addr)
            .filter(|&index| self.lost.contains(index))
    }

    /// [`AddressVector::remove`] of one lost index: pending records are sent first, as for
    /// any remove; then the index is free.
    #[cold]
    fn remove_lost_one(&mut self, index: u32) -> Result<(), FiError> {
        self.lost
            .reserve(1)
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, "fi_av_remove: no memory"))?;
        self.settle_keeping("fi_av_remove", &[])?;
        self.free_lost(index);
        Ok(())
    }

    /// Free a lost index; room for splitting its run was reserved.
    fn free_lost(&mut self, index: u32) {
        if let Ok(true) = self.lost.take(index) {
            self.alloc.free(index);
        }
    }

    /// `fi_av_set_user_id`: make `user_id` the user id of the address at `fi_addr` (what
    /// receive completions report as its source). Needs an AV opened with `FI_AV_USER_ID`
    /// (`FI_EINVAL` otherwise). `FI_EINVAL` when `fi_addr` names no inserted address;
    /// `FI_EBADFLAGS` for any flag but `FI_AUTH_KEY`, with which `fi_addr` is an auth-key
    /// handle and `user_id` becomes the key's (see [`auth_keys`]). Pending `FI_MORE`
    /// records are sent first; then one AV_WRITE rewrites the entry. `FI_EIO` if either
    /// command fails, and the user id is unchanged (`FI_EAGAIN` when the NIC had no room for
    /// the command and nothing changed; rolled-back `FI_MORE` records are a change).
    pub fn set_user_id(
        &mut self,
        fi_addr: FiAddr,
        user_id: FiAddr,
        flags: u64,
    ) -> Result<(), FiError> {
        check_flags("fi_av_set_user_id", flags, FI_AUTH_KEY)?;
        if self.attr.flags & FI_AV_USER_ID == 0 {
            return Err(FiError::inval(
                "fi_av_set_user_id: the AV was not opened with FI_AV_USER_ID",
            ));
        }
        if flags & FI_AUTH_KEY != 0 {
            return self.set_auth_key_user_id(fi_addr, user_id);
        }
        let index = self
            .index_of(fi_addr)
            .map_err(|e| e.within("fi_av_set_user_id"))?;
        self.settle_keeping("fi_av_set_user_id", &[index])?;
        let old = self.user_ids.as_deref().and_then(|u| u.get(index));
        if let Some(u) = self.user_ids.as_deref_mut() {
            u.set(index, Some(user_id));
        }
        let record = AvWriteRecord {
            index: index.into(),
            reserved: Default::default(),
            entry: self.nic_entry(index),
        };
        if let Err(e) = self.nic.write_entries(core::slice::from_ref(&record)) {
            if let Some(u) = self.user_ids.as_deref_mut() {
                u.set(index, old);
            }
            let rewritten = if e.in_doubt {
                self.in_doubt.push(index);
                " (the NIC's entry is rewritten at the next call that sends it anything)"
            } else {
                ""
            };
            warn!(index, error = %e, "AV_WRITE of a user id failed");
            return Err(FiError::new(
                e.errno(),
                format!(
                    "fi_av_set_user_id: the NIC {} the AV_WRITE of index {index}; the user id \
                 is unchanged{rewritten}: {e}",
                    e.verb()
                ),
            ));
        }
        Ok(())
    }

    /// The user id of the address at `fi_addr`: `Some` on an AV opened with `FI_AV_USER_ID`
    /// (`FI_ADDR_NOTAVAIL` until set) or for an address inserted with the `FI_AV_USER_ID`
    /// flag, `None` otherwise. `FI_EINVAL` when `fi_addr` names no inserted address.
    pub fn user_id(&self, fi_addr: FiAddr) -> Result<Option<FiAddr>, FiError> {
        let index = self.index_of(fi_addr)?;
        Ok(self.user_ids.as_deref().and_then(|u| u.get(index)))
    }

    /// The index `fi_addr` names, if it is in use. Receive-context bits, and on an AV with peer
    /// groups the group, are ignored.
    pub fn index_of(&self, fi_addr: FiAddr) -> Result<u32, FiError> {
        if let Some(index) = self.decoder.index(fi_addr) {
            if self.slots.is_filled(index) && !self.is_revoked(index) {
                // A single entry in use: its index, without reading its address.
                return Ok(index);
            }
        }
        self.slot_of(fi_addr).map(|(index, _)| index)
    }

    fn slot_of(&self, fi_addr: FiAddr) -> Result<(u32, [u8; ADDR_LEN]), FiError> {
        if let Some(index) = self.decoder.index(fi_addr) {
            if !self.is_revoked(index) {
                if let Some(slot) = self.slots.get(index) {
                    return Ok((index, slot));
                }
                if let Some(bytes) = self.range_bytes(index) {
                    return Ok((index, bytes));
                }
            }
        }
        Err(self.bad_fi_addr(fi_addr))
    }

    /// The address of an inserted symmetric-range member at `index`.
    #[cold]
    fn range_bytes(&self, index: u32) -> Option<[u8; ADDR_LEN]> {
        if !self.entry_source().in_use(index) {
            return None;
        }
        self.ranges.covering(index)?.member(index)?.to_bytes().ok()
    }

    /// What an endpoint bound to this AV calls before each send: the catch-up of the named AV
    /// this is a process's mirror of ([`crate::named`]); `None` for an AV of this process
    /// alone, whose NIC table every change reaches before the call returns.
    pub fn sync_hook(&self) -> Option<Arc<dyn AvSync>> {
        self.sync_hook.as_ref().and_then(Weak::upgrade)
    }

    /// Make this the mirror of a named AV whose catch-up is `hook`.
    pub(crate) fn set_sync_hook(&mut self, hook: Weak<dyn AvSync>) {
        self.sync_hook = Some(hook);
    }

    /// How the AV reads an `fi_addr_t` (see [`decode`]).
    pub fn decoder(&self) -> &FiAddrDecoder {
        &self.decoder
    }

    #[cold]
    fn bad_fi_addr(&self, fi_addr: FiAddr) -> FiError {
        match self.decoder.kind(fi_addr) {
            FiAddrKind::NotAvail => FiError::inval("fi_addr is FI_ADDR_NOTAVAIL"),
            FiAddrKind::AuthKeyHandle => FiError::inval(format!(
                "fi_addr {fi_addr:#x} is an auth-key handle, not an address (pass FI_AUTH_KEY \
                 to calls that take one)"
            )),
            FiAddrKind::CollectiveAddr => FiError::inval(format!(
                "fi_addr {fi_addr:#x} is an AV set's collective address, not an address"
            )),
            FiAddrKind::OutOfRange(raw) => FiError::inval(format!(
                "fi_addr {fi_addr:#x}: index {raw} is outside the AV's {} entries",
                self.capacity
            )),
            FiAddrKind::Index(i) if self.lost.contains(i) => FiError::inval(format!(
                "fi_addr {fi_addr:#x}: index {i} holds no address: its FI_MORE insert was \
                 rolled back when the NIC refused the batch (fi_av_remove frees the index)"
            )),
            FiAddrKind::Index(i) if self.is_revoked(i) => FiError::inval(format!(
                "fi_addr {fi_addr:#x}: index {i} is not in use (the NIC refused its \
                 asynchronous insert)"
            )),
            FiAddrKind::Index(i) => FiError::inval(format!(
                "fi_addr {fi_addr:#x}: index {i} is not in use (never inserted, or removed)"
            )),
        }
    }

    /// `fi_av_lookup`: copy the address at `fi_addr` into `addr`, at most `*addrlen` bytes
    /// (truncating), and set `*addrlen` to its full size, [`ADDR_LEN`]. On an `FI_ADDR_STR`
    /// AV the address is its NUL-terminated string form, as [`straddr`] writes it, and
    /// `*addrlen` the string's size with the NUL. `FI_EINVAL` (nothing written) when `fi_addr`
    /// names no inserted address.
    #[inline]
    pub fn lookup(
        &self,
        fi_addr: FiAddr,
        addr: &mut [u8],
        addrlen: &mut usize,
    ) -> Result<(), FiError> {
        // The common case, kept to a few instructions so that the CPU has many scattered
        // lookups, and their cache misses, in flight at once: a plain index (no receive-context,
        // group or auth-key bits) of a single entry on a binary-address AV, copied whole.
        if fi_addr < self.plain_index_end && *addrlen >= ADDR_LEN {
            // fi_addr < plain_index_end <= capacity <= u32::MAX
            let index = fi_addr as u32;
            if let (Some(slot), Some(dst)) =
                (self.slots.get(index), addr.first_chunk_mut::<ADDR_LEN>())
            {
                *dst = slot;
                *addrlen = ADDR_LEN;
                return Ok(());
            }
        }
        self.lookup_general(fi_addr, addr, addrlen)
    }

    /// [`AddressVector::lookup`] of everything but a whole single entry at a plain index:
    /// receive-context and group bits, symmetric-range members, string AVs, truncation and
    /// errors. Out of line, so the plain case stays small where it is inlined.
    #[inline(never)]
    fn lookup_general(
        &self,
        fi_addr: FiAddr,
        addr: &mut [u8],
        addrlen: &mut usize,
    ) -> Result<(), FiError> {
        let (_, slot) = self.slot_of(fi_addr)?;
        if self.attr.addr_format == AddrFormat::Str {
            straddr(&slot, addr, addrlen);
            return Ok(());
        }
        let n = (*addrlen).min(addr.len()).min(ADDR_LEN);
        if let Some(dst) = addr.first_chunk_mut::<ADDR_LEN>().filter(|_| n == ADDR_LEN) {
            // The common case: a whole address, copied without a length-dependent memcpy.
            *dst = slot;
        } else if let (Some(dst), Some(src)) = (addr.get_mut(..n), slot.get(..n)) {
            dst.copy_from_slice(src);
        }
        *addrlen = ADDR_LEN;
        Ok(())
    }

    /// The address at `fi_addr`, parsed.
    pub fn address(&self, fi_addr: FiAddr) -> Result<UetAddress, FiError> {
        let (_, slot) = self.slot_of(fi_addr)?;
        UetAddress::from_bytes(&slot).map_err(|e| FiError::io(format!("mirror slot: {e}")))
    }

    /// `fi_av_straddr`: see [`straddr`]. On an `FI_ADDR_STR` AV `addr` is already a string
    /// (up to its first NUL, if any), written out as it is.
    pub fn straddr(&self, addr: &[u8], buf: &mut [u8], len: &mut usize) -> String {
        straddr_in(self.attr.addr_format, addr, buf, len)
    }

    /// Valid entries, ascending: `(index, address)`. Pending `FI_MORE` inserts included.
    pub fn iter(&self) -> impl Iterator<Item = (u32, UetAddress)> + '_ {
        self.indices().filter_map(|index| {
            let (_, slot) = self.slot_of(u64::from(index)).ok()?;
            UetAddress::from_bytes(&slot).ok().map(|a| (index, a))
        })
    }

    /// Indices in use, ascending: pending `FI_MORE` inserts included, indices whose
    /// asynchronous insert the NIC refused not (as for [`AddressVector::lookup`] and
    /// [`AddressVector::len`]), though the AV's next call is what releases them.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.alloc
            .iter()
            .filter(|&i| !self.is_revoked(i) && !self.lost.contains(i))
    }

    /// Symmetric ranges: `(first index, indices covered, live members)`, ascending.
    pub fn ranges(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.ranges.iter().map(|r| (r.first, r.count, r.live))
    }

    /// What the NIC should hold at `index` once pending records are sent: the peer's entry
    /// with its user id, or [`NicAvEntry::INVALID`] for an unused index. `None` outside the
    /// table.
    pub fn mirror_entry(&self, index: u32) -> Option<NicAvEntry> {
        (index < self.capacity).then(|| self.nic_entry(index))
    }

    /// The NIC entry for `index` (INVALID when unused).
    fn nic_entry(&self, index: u32) -> NicAvEntry {
        self.entry_source().nic_entry(index)
    }

    /// The NIC table.
    pub fn nic(&self) -> &N {
        &self.nic
    }

    /// The NIC table, mutably. Changing it behind the AV's back is what
    /// [`AddressVector::verify_nic`] detects.
    pub fn nic_mut(&mut self) -> &mut N {
        &mut self.nic
    }

    /// Send pending records (and rewrite entries in doubt), then read the whole NIC table back
    /// (AV_READ in [`MAX_BATCH`] chunks) and compare every index with
    /// [`AddressVector::mirror_entry`]. Two invalid
    /// entries match whatever their other bytes hold. `FI_EIO` if a command fails
    /// (`FI_EAGAIN` when the NIC had no room for it and nothing changed; `FI_ETIMEDOUT` when
    /// it did not answer a read).
    pub fn verify_nic(&mut self) -> Result<Vec<AvMismatch>, FiError> {
        self.settle_nic()?;
        let mut mismatches = Vec::new();
        let chunk_len = self.capacity.min(MAX_BATCH);
        let mut buf = vec![NicAvEntry::INVALID; chunk_len as usize];
        let mut first = 0u32;
        while first < self.capacity {
            let n = (self.capacity - first).min(MAX_BATCH);
            let Some(chunk) = buf.get_mut(..n as usize) else {
                break;
            };
            self.nic.read_entries(first, chunk).map_err(|e| {
                // An unanswered read changes nothing, unlike an unanswered write (FI_EIO): it
                // is only late, as for verify_auth_keys.
                let errno = if e.in_doubt {
                    FiErrno::FI_ETIMEDOUT
                } else {
                    e.errno()
                };
                FiError::new(
                    errno,
                    format!("verify: reading {n} NIC entries from {first}: {e}"),
                )
            })?;
            for (index, nic) in (first..).zip(chunk.iter()) {
                let mirror = self.nic_entry(index);
                let same = if mirror.is_valid() || nic.is_valid() {
                    mirror == *nic
                } else {
                    true
                };
                if !same {
                    mismatches.push(AvMismatch {
                        index,
                        mirror,
                        nic: *nic,
                    });
                }
            }
            first += n;
        }
        Ok(mismatches)
    }

    /// Host bytes the mirror holds (slots, allocator, user ids, scratch), for memory
    /// accounting.
    pub fn host_bytes(&self) -> usize {
        core::mem::size_of::<Self>()
            + self.slots.heap_bytes()
            + self.ranges.heap_bytes()
            + self.alloc.heap_bytes()
            + self
                .user_ids
                .as_deref()
                .map_or(0, |u| core::mem::size_of::<UserIds>() + u.heap_bytes())
            + self.auth.as_deref().map_or(0, |a| {
                core::mem::size_of::<auth_keys::AuthKeys>() + a.heap_bytes()
            })
            + self.pending.capacity() * core::mem::size_of::<u32>()
            + self.index_buf.capacity() * core::mem::size_of::<u32>()
            + self.in_doubt.capacity() * core::mem::size_of::<u32>()
            + self.lost.heap_bytes()
    }

    /// Close the AV and hand the NIC table back. Pending `FI_MORE` records are dropped, not
    /// sent: call [`AddressVector::flush`] first if the NIC should hold them.
    pub fn into_nic(mut self) -> N {
        self.shut_down_events();
        if !self.pending.is_empty() {
            debug!(
                pending = self.pending.len(),
                "AV closed with unsent FI_MORE records"
            );
        }
        self.nic
    }
}

/// The error of an insert that found no memory for its slot's template, nor for the address
/// whole (see [`crate::mirror::templates`]).
#[cold]
fn no_slot_memory() -> FiError {
    FiError::new(
        FiErrno::FI_ENOMEM,
        "no memory for the address in the AV mirror",
    )
}

/// The part of a rolled-back batch's message that counts the indices lost (see [`lost`]).
fn lost_note(lost: u64) -> String {
    if lost == 0 {
        return String::new();
    }
    format!(
        "; {lost} of the indices were returned by earlier FI_MORE calls and are lost, holding \
         no address, until fi_av_remove frees them"
    )
}

/// Refuse flags outside `supported`.
fn check_flags(call: &str, flags: u64, supported: u64) -> Result<(), FiError> {
    let refused = flags & !supported;
    if refused == 0 {
        return Ok(());
    }
    Err(FiError::badflags(format!(
        "{call}: unsupported flags {}",
        flag_names(refused)
    )))
}

/// The printable form of a serialized address: [`UetAddress`]'s `Display`
/// (`uet://10.0.0.7/291?ri=16+16&init=0xdeadbeef&caps=0x05`), or for bytes that do not parse,
/// `uet-raw[<len>]:<hex>` (at most 64 bytes shown, then `...`).
pub fn address_string(addr: &[u8]) -> String {
    match UetAddress::from_bytes(addr) {
        Ok(a) => a.to_string(),
        Err(_) => {
            const SHOWN: usize = 64;
            let mut s = format!("uet-raw[{}]:", addr.len());
            for b in addr.iter().take(SHOWN) {
                let _ = write!(s, "{b:02x}");
            }
            if addr.len() > SHOWN {
                s.push_str("...");
            }
            s
        }
    }
}

/// `fi_av_straddr`: write [`address_string`]`(addr)` into `buf` as a NUL-terminated string,
/// truncated to fit `min(*len, buf.len())` bytes (nothing written when that is 0), set `*len` to
/// the size the whole string needs including its NUL, and return the whole string.
pub fn straddr(addr: &[u8], buf: &mut [u8], len: &mut usize) -> String {
    let s = address_string(addr);
    write_c_string(s.as_bytes(), buf, len);
    s
}

/// `fi_av_straddr` of an AV whose addresses are in `format`: [`straddr`], or on an
/// `FI_ADDR_STR` AV the string `addr` already is (up to its first NUL, if any).
pub(crate) fn straddr_in(
    format: AddrFormat,
    addr: &[u8],
    buf: &mut [u8],
    len: &mut usize,
) -> String {
    if format == AddrFormat::Str {
        // The string's bytes as they are (libfabric's providers copy it), also where they are
        // not UTF-8; only the returned copy replaces what is not.
        let end = addr.iter().position(|&b| b == 0).unwrap_or(addr.len());
        let bytes = addr.get(..end).unwrap_or(addr);
        write_c_string(bytes, buf, len);
        return String::from_utf8_lossy(bytes).into_owned();
    }
    straddr(addr, buf, len)
}

/// Write `s` NUL-terminated into `buf`, truncated to `min(*len, buf.len())` bytes (nothing
/// written when that is 0), and set `*len` to the size the whole string needs with its NUL.
fn write_c_string(s: &[u8], buf: &mut [u8], len: &mut usize) {
    let room = (*len).min(buf.len());
    if room > 0 {
        let n = s.len().min(room - 1);
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), s.get(..n)) {
            dst.copy_from_slice(src);
        }
        if let Some(nul) = buf.get_mut(n) {
            *nul = 0;
        }
    }
    *len = s.len() + 1;
}

/// The fi_addr array an insert call keeps for itself when `needed`: without the caller's,
/// `FI_SYNC_ERR` still has to learn which inserts a failed AV_WRITE rolled back. Empty when
/// not needed.
fn own_fi_addrs(call: &str, count: usize, needed: bool) -> Result<Vec<FiAddr>, FiError> {
    let mut own = Vec::new();
    if needed {
        own.try_reserve_exact(count)
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, format!("{call}: no memory")))?;
        own.resize(count, FI_ADDR_NOTAVAIL);
    }
    Ok(own)
}

/// The `count` serialized addresses at the start of `addr` (fi_av_insert's binary form), each
/// checked: a malformed one is its own `FI_EINVAL`, naming what is wrong. `FI_EINVAL` for the
/// call when `addr` is shorter than `count` addresses.
pub(crate) fn binary_addresses<'a>(
    call: &str,
    addr: &'a [u8],
    count: usize,
) -> Result<impl Iterator<Item = Result<[u8; ADDR_LEN], FiError>> + 'a, FiError> {
    Ok(address_buffer(call, addr, count)?
        .chunks_exact(ADDR_LEN)
        .map(checked_address))
}

/// fi_av_remove's error when the NIC refuses the AV_INVALIDATE of `chunk`, `removed` of the
/// `total` listed entries having been removed by earlier commands; logged here.
fn invalidate_refused(
    chunk: &[u32],
    removed: usize,
    total: usize,
    e: &crate::nic::NicError,
) -> FiError {
    warn!(removed, total, error = %e, "AV_INVALIDATE failed");
    let what = match chunk {
        [index] if total == 1 => format!("index {index}, which stays inserted"),
        [_] => format!("1 entry ({removed} of {total} removed before it, the rest stay inserted)"),
        _ => format!(
            "{} entries ({removed} of {total} removed before them, the rest stay inserted)",
            chunk.len()
        ),
    };
    let how = if e.in_doubt {
        "did not answer the command to invalidate"
    } else {
        "refused to invalidate"
    };
    // (Not NicError::verb: "refused to invalidate" reads better than "refused the command to".)
    // Retrying is safe only when the call changed nothing.
    let errno = if removed == 0 {
        e.errno()
    } else {
        FiErrno::FI_EIO
    };
    FiError::new(errno, format!("fi_av_remove: the NIC {how} {what}: {e}"))
}

/// The arrays every insert reports through: `fi_addr` (when given) and, with `FI_SYNC_ERR`
/// only, `status`, each with room for `count` addresses. `FI_EINVAL` naming what is wrong.
pub(crate) fn check_out_arrays(
    call: &str,
    count: usize,
    fi_addr: Option<&[FiAddr]>,
    flags: u64,
    status: Option<&[i32]>,
) -> Result<(), FiError> {
    if let Some(out) = fi_addr {
        if out.len() < count {
            return Err(FiError::inval(format!(
                "{call}: fi_addr has room for {} of {count} addresses",
                out.len()
            )));
        }
    }
    match (flags & FI_SYNC_ERR != 0, status) {
        (true, None) => Err(FiError::inval(format!(
            "{call}: FI_SYNC_ERR needs the status array (the C context)"
        ))),
        (false, Some(_)) => Err(FiError::inval(format!(
            "{call}: a status array is only written with FI_SYNC_ERR"
        ))),
        (true, Some(st)) if st.len() < count => Err(FiError::inval(format!(
            "{call}: the FI_SYNC_ERR status array has room for {} of {count} addresses",
            st.len()
        ))),
        _ => Ok(()),
    }
}

/// fi_av_insert's check that the AV, whose format is `format`, takes addresses in the form
/// `given` (binary UET addresses or `FI_ADDR_STR` strings): `FI_EINVAL` naming the other call.
pub(crate) fn insert_format(format: AddrFormat, given: AddrFormat) -> Result<(), FiError> {
    match (format == given, given) {
        (true, _) => Ok(()),
        (false, AddrFormat::Uet) => Err(FiError::inval(
            "fi_av_insert: this AV takes FI_ADDR_STR addresses (insert_str), not binary ones",
        )),
        (false, AddrFormat::Str) => Err(FiError::inval(
            "fi_av_insert: this AV takes binary UET addresses, not FI_ADDR_STR strings (open it \
             with addr_format Str, or use insertsvc)",
        )),
    }
}

/// The first `count` addresses of `addr`, `FI_EINVAL` when it is shorter.
pub(crate) fn address_buffer<'a>(
    call: &str,
    addr: &'a [u8],
    count: usize,
) -> Result<&'a [u8], FiError> {
    let need = count
        .checked_mul(ADDR_LEN)
        .ok_or_else(|| FiError::inval(format!("{call}: count {count} is too large")))?;
    addr.get(..need).ok_or_else(|| {
        FiError::inval(format!(
            "{call}: {count} addresses need {need} bytes, the buffer has {}",
            addr.len()
        ))
    })
}

/// One serialized address, checked: itself, or `FI_EINVAL` naming what is wrong.
#[inline]
fn checked_address(raw: &[u8]) -> Result<[u8; ADDR_LEN], FiError> {
    let bytes: [u8; ADDR_LEN] = raw
        .try_into()
        .map_err(|_| FiError::inval("address has the wrong length"))?;
    if !UetAddress::bytes_are_valid(&bytes) {
        return Err(address_error(&bytes));
    }
    Ok(bytes)
}

/// What is wrong with an address that failed `UetAddress::bytes_are_valid`: the full parse
/// names it.
#[cold]
fn address_error(bytes: &[u8; ADDR_LEN]) -> FiError {
    match UetAddress::from_bytes(bytes) {
        Err(e) => FiError::inval(e.to_string()),
        Ok(_) => FiError::inval("address refused"),
    }
}

/// `FI_ADDR_STR` strings (fi_av_insert's string form), each parsed (a host name node resolved
/// with `resolver`) and serialized, or its own error.
pub(crate) fn string_addresses<'a>(
    addrs: &'a [&str],
    resolver: Resolver,
) -> impl Iterator<Item = Result<[u8; ADDR_LEN], FiError>> + 'a {
    addrs.iter().map(move |s| {
        parse_addr_str_with(s, resolver).and_then(|a| {
            a.to_bytes()
                .map_err(|e| FiError::inval(format!("address '{s}': {e}")))
        })
    })
}

/// fi_av_insertsvc's one address, serialized, for the insert: the outer error is the call's
/// (a node or service that is not well formed, `FI_EINVAL`, nothing inserted), the inner one
/// the address's. A host name that does not resolve, or resolves to an unusable fabric
/// address, fails the address, as an FI_ADDR_STR string naming it fails in fi_av_insert:
/// `FI_EADDRNOTAVAIL` (or `FI_EINVAL`) in its status, `FI_ADDR_NOTAVAIL` in its `fi_addr`,
/// and 0 inserted.
pub(crate) fn svc_item(
    call: &str,
    node: &str,
    service: Option<&str>,
    resolver: Resolver,
) -> Result<Result<[u8; ADDR_LEN], FiError>, FiError> {
    match svc_address(node, service, resolver) {
        Ok(Ok(addr)) => Ok(Ok(addr
            .to_bytes()
            .map_err(|e| FiError::inval(format!("{call}: {e}")))?)),
        Ok(Err(e)) => Ok(Err(e.within(call))),
        Err(e) => Err(e.within(call)),
    }
}

/// fi_av_insertsym's addresses of a range that is not stored as one, serialized in insertion
/// order, for the insert: the outer error is the call's (the range itself is wrong), the
/// inner ones the addresses' (`FI_EADDRNOTAVAIL` for the members of a node whose name does
/// not resolve, `FI_EINVAL` for those of one whose name resolves to an unusable address,
/// [`SymRange::expand_each`]).
pub(crate) fn sym_items(
    call: &str,
    range: &SymRange<'_>,
    resolver: Resolver,
) -> Result<Vec<Result<[u8; ADDR_LEN], FiError>>, FiError> {
    let prefix = |e: FiError| e.within(call);
    let addrs = range.expand_each(resolver).map_err(prefix)?;
    Ok(addrs
        .into_iter()
        .map(|a| {
            a.map_err(prefix).and_then(|a| {
                a.to_bytes()
                    .map_err(|e| FiError::inval(format!("address {a}: {e}")))
            })
        })
        .collect())
}

/// The address fi_av_insertsvc's `node` and `service` name: an IP literal or host name
/// (resolved with `resolver`) and a service; or an `FI_ADDR_STR` node and no service. The
/// outer error is the texts', the inner one a host name's lookup's ([`Service::at_node`]).
pub(crate) fn svc_address(
    node: &str,
    service: Option<&str>,
    resolver: Resolver,
) -> Result<Result<UetAddress, FiError>, FiError> {
    if node.starts_with(ADDR_STR_SCHEME) {
        if let Some(s) = service {
            return Err(FiError::inval(format!(
                "node is an FI_ADDR_STR address, so service must be NULL, not '{s}'"
            )));
        }
        return parse_addr_str_looked_up(node, resolver);
    }
    let service = service.ok_or_else(|| {
        FiError::inval(format!(
            "service (the PIDonFEP) is required with node '{node}'"
        ))
    })?;
    let service = Service::parse(service)?;
    service.at_node(Node::parse(node)?, resolver)
}
