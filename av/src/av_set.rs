//! AV sets, per fi_av_set(3): ordered subsets of an AV's addresses, the members of a
//! collective.
//!
//! An [`AvSet`] holds `fi_addr_t` values (AV indices) in order, never references into the AV:
//! calls that must check members against the AV take the [`AddressVector`], and a set knows
//! which AV it was made from ([`AddressVector::id`]), so mixing sets of two AVs is
//! `FI_EINVAL`.
//!
//! ## Rules (the man page's, where libfabric's util code differs)
//!
//! - **Order.** Creation lists members by ascending index (start_addr, start_addr + stride, …
//!   or every address of the AV). `insert` and `union` append at the end, `union` in the
//!   source's order; `intersect`, `diff` and `remove` keep the order of the remaining members.
//! - **Receive-context bits** are not part of a member: an `fi_addr_t` built with
//!   [`crate::fi_rx_addr`] names the same member as its index, as a member and as a bound of
//!   the creation range alike.
//! - **Capacity.** `count` bounds the members (0: the AV's capacity; more than that: the
//!   AV's capacity too, since a set holds each address once). At creation the range may name
//!   at most `count` addresses, as the man page requires, else `FI_EINVAL`; an `insert` or
//!   `union` that would exceed the capacity is `FI_ENOSPC` and changes nothing.
//! - **Errors.** `insert` of a member already present, or of an `fi_addr_t` the AV does not
//!   hold, and `remove` of a non-member are `FI_EINVAL`; nothing changes.
//! - **Addresses removed from the AV.** A set is not told: its members are `fi_addr_t`
//!   values, as in libfabric. A member whose address was removed is *stale*:
//!   [`AvSet::stale`] lists such members, [`AvSet::prune`] drops them (order kept), and
//!   [`AvSet::addr`] refuses a set with stale members (`FI_EINVAL` naming the first). If the
//!   AV reuses the index for a new address, the member names the new address: fi_av(3) says a
//!   removed `fi_addr_t` is invalid until an insert returns it again.
//! - **The collective address** ([`AvSet::addr`]) is a handle for `fi_join_collective`:
//!   [`AV_SET_ADDR_BASE`] plus a number unique to the set in this process. No address of the
//!   AV takes its form (bit 48 set; see [`crate::av::decode`]), so the AV's calls and the
//!   set's own refuse it as an address, and it stays the same while the set changes. An empty
//!   set has none unless it has a communication key (whose members the fabric's manager knows,
//!   not the AV), and neither has a set of an AV with more than 15 receive-context bits or
//!   groups above 0xFFFF, whose addresses may take any form (`FI_EINVAL`).
//! - **Flags.** `FI_UNIVERSE` and the collective kinds `FI_BARRIER_SET` … `FI_GATHER_SET` are
//!   accepted and kept (`AvSet::flags`) for `fi_join_collective`, which this provider does
//!   not offer yet (the collectives themselves are refused where they would be called); any
//!   other bit is `FI_EBADFLAGS`.
//! - **Communication key.** Kept as given; with a key, start/end must be `FI_ADDR_NOTAVAIL`
//!   and `FI_UNIVERSE` clear (the key, not the AV, says who the members are).
//!
//! ## Cost
//!
//! The members sit in order in a list with holes: `remove` leaves a hole where the member
//! was (and drops holes at the end at once), and when holes outnumber members the list is
//! compacted, order kept, which the removes that made the holes pay for. Beside it a hash
//! table holds each member's place in the list, found by the member's index. So `contains`,
//! `insert` (its duplicate check included) and `remove` take O(1) amortized time, whatever the
//! set's size; `union` is O(source members), `intersect`, `diff` and `prune` O(this set's
//! list), and iteration O(members + holes), with at most one hole per member.
//!
//! Memory per member: 4 bytes a slot of the list, and 5 bytes (a 4-byte place and a control
//! byte) a slot of the table, which has a power of two of slots, 8/7 to 16/7 of what it holds.
//! A set filled by inserts holds 12 to 15 bytes per member ([`AvSet::heap_bytes`] tells).
//! The room stays as a set shrinks until a remove finds the list or the table able to hold
//! over four times the members (and over 64); the set is then compacted into smaller
//! storage, so a set holds at most about 40 bytes per member, or under 4 KiB when it has
//! fewer than 64 members. The AV's size does not enter.

use core::hash::BuildHasher;
use core::sync::atomic::{AtomicU64, Ordering};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::av::decode::FiAddrDecoder;
use crate::av::{AddressVector, AUTH_KEY_MAX_GROUP_ID};
use crate::errno::{FiErrno, FiError};
use crate::flags::{
    FiAddr, FI_ADDR_NOTAVAIL, FI_ALLGATHER_SET, FI_ALLREDUCE_SET, FI_ALLTOALL_SET, FI_BARRIER_SET,
    FI_BROADCAST_SET, FI_GATHER_SET, FI_REDUCE_SCATTER_SET, FI_REDUCE_SET, FI_SCATTER_SET,
    FI_UNIVERSE,
};
use crate::nic::NicAvTable;
use crate::AUTH_KEY_MAX_RX_CTX_BITS;

/// First collective address: [`AvSet::addr`] is this plus the set's number (below 2^48). Bit
/// 48 is set, which no address of an AV that may have collective addresses has (see
/// [`crate::av::decode`]).
pub const AV_SET_ADDR_BASE: FiAddr = 0xFFFB_0000_0000_0000;

/// Bits of a collective address that number the set.
const AV_SET_NUMBER_MASK: FiAddr = (1 << 48) - 1;

/// The collective-kind flags of `fi_av_set_attr`.
pub const AV_SET_COLLECTIVE_FLAGS: u64 = FI_BARRIER_SET
    | FI_BROADCAST_SET
    | FI_ALLTOALL_SET
    | FI_ALLREDUCE_SET
    | FI_ALLGATHER_SET
    | FI_REDUCE_SCATTER_SET
    | FI_REDUCE_SET
    | FI_SCATTER_SET
    | FI_GATHER_SET;

/// Every flag `fi_av_set` accepts.
pub const AV_SET_FLAGS: u64 = FI_UNIVERSE | AV_SET_COLLECTIVE_FLAGS;

static NEXT_SET_ID: AtomicU64 = AtomicU64::new(1);

/// A hole in [`AvSet`]'s member list: no AV index takes this value (an AV has at most
/// `u32::MAX` entries, indices `0..u32::MAX`).
const VACANT: u32 = u32::MAX;

/// The least list or table room (in members) a compaction leaves a set: below it, giving
/// room back is not worth a reallocation.
const MIN_KEPT_ROOM: usize = 64;

/// Whether `fi_addr` is a collective address from [`AvSet::addr`].
pub const fn is_av_set_addr(fi_addr: FiAddr) -> bool {
    fi_addr >> 48 == AV_SET_ADDR_BASE >> 48
}

/// `struct fi_av_set_attr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvSetAttr {
    /// Expected (and most) members; 0: the AV's capacity.
    pub count: usize,
    /// First index of the initial range, or `FI_ADDR_NOTAVAIL` for none.
    pub start_addr: FiAddr,
    /// Last index of the initial range (inclusive), or `FI_ADDR_NOTAVAIL` for none.
    pub end_addr: FiAddr,
    /// Step of the initial range: 0 without one, at least 1 with one.
    pub stride: u64,
    /// Communication key (`comm_key_size` bytes of `comm_key`); empty for none.
    pub comm_key: Vec<u8>,
    /// `FI_UNIVERSE` and collective-kind flags.
    pub flags: u64,
}

impl Default for AvSetAttr {
    /// An empty set: no range, no key, no flags.
    fn default() -> Self {
        AvSetAttr {
            count: 0,
            start_addr: FI_ADDR_NOTAVAIL,
            end_addr: FI_ADDR_NOTAVAIL,
            stride: 0,
            comm_key: Vec::new(),
            flags: 0,
        }
    }
}

/// An ordered set of an AV's addresses. Not `Clone`: each set has its own collective address.
#[derive(Debug)]
pub struct AvSet {
    av_id: u64,
    id: u64,
    /// The AV's decoding of `fi_addr_t` values, so that members are read as the AV reads them.
    decoder: FiAddrDecoder,
    capacity: usize,
    flags: u64,
    comm_key: Box<[u8]>,
    /// Members in order, as AV indices, with [`VACANT`] where a member was removed since the
    /// last compaction. Never ends with a hole, and has no more holes than members.
    order: Vec<u32>,
    /// Members: the non-[`VACANT`] slots of `order`.
    len: usize,
    /// The place in `order` of every member, hashed by the member's index (so found by it).
    places: HashTable<u32>,
    /// Hashes member indices for `places`.
    hasher: RandomState,
}

/// The hash of the member at `place` of `order`, for `places` to rehash with.
fn hash_at(hasher: &RandomState, order: &[u32], place: u32) -> u64 {
    hasher.hash_one(order.get(place as usize).copied().unwrap_or(VACANT))
}

/// [`AvSet::members`]: the non-[`VACANT`] slots of a member list, `left` of them.
struct Members<'a> {
    slots: core::slice::Iter<'a, u32>,
    left: usize,
}

impl Iterator for Members<'_> {
    type Item = FiAddr;

    fn next(&mut self) -> Option<FiAddr> {
        let &index = self.slots.find(|&&i| i != VACANT)?;
        self.left = self.left.saturating_sub(1);
        Some(FiAddr::from(index))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Members<'_> {}

fn set_flag_names(flags: u64) -> String {
    const NAMES: &[(u64, &str)] = &[
        (FI_UNIVERSE, "FI_UNIVERSE"),
        (FI_BARRIER_SET, "FI_BARRIER_SET"),
        (FI_BROADCAST_SET, "FI_BROADCAST_SET"),
        (FI_ALLTOALL_SET, "FI_ALLTOALL_SET"),
        (FI_ALLREDUCE_SET, "FI_ALLREDUCE_SET"),
        (FI_ALLGATHER_SET, "FI_ALLGATHER_SET"),
        (FI_REDUCE_SCATTER_SET, "FI_REDUCE_SCATTER_SET"),
        (FI_REDUCE_SET, "FI_REDUCE_SET"),
        (FI_SCATTER_SET, "FI_SCATTER_SET"),
        (FI_GATHER_SET, "FI_GATHER_SET"),
    ];
    let mut parts: Vec<String> = NAMES
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, n)| (*n).to_string())
        .collect();
    let rest = flags & !AV_SET_FLAGS;
    if rest != 0 || parts.is_empty() {
        parts.push(format!("{rest:#x}"));
    }
    parts.join("|")
}

impl AvSet {
    /// `fi_av_set`: a set of `av`'s addresses as `attr` describes (see the module notes).
    ///
    /// Errors: `FI_EBADFLAGS` for flags other than `FI_UNIVERSE` and the collective kinds;
    /// `FI_EINVAL` when only one of start/end is `FI_ADDR_NOTAVAIL`, start > end, end outside
    /// the AV, stride 0 with a range or non-zero without one, a range or `FI_UNIVERSE` beside a
    /// communication key, `FI_UNIVERSE` beside a range, or initial members more than `count`.
    pub fn new<N: NicAvTable>(av: &AddressVector<N>, attr: &AvSetAttr) -> Result<AvSet, FiError> {
        let unknown = attr.flags & !AV_SET_FLAGS;
        if unknown != 0 {
            return Err(FiError::badflags(format!(
                "fi_av_set: unsupported flags {}",
                set_flag_names(unknown)
            )));
        }
        let universe = attr.flags & FI_UNIVERSE != 0;
        let range = match (attr.start_addr, attr.end_addr) {
            (FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL) => None,
            (FI_ADDR_NOTAVAIL, _) | (_, FI_ADDR_NOTAVAIL) => {
                return Err(FiError::inval(format!(
                    "fi_av_set: start_addr {:#x} and end_addr {:#x} must both be \
                     FI_ADDR_NOTAVAIL or both be indices",
                    attr.start_addr, attr.end_addr
                )))
            }
            // Bounds are members like any other: receive-context and group bits aside.
            (s, e) => {
                let index = |which: &str, a: FiAddr| {
                    av.decoder().index(a).map(u64::from).ok_or_else(|| {
                        FiError::inval(format!(
                            "fi_av_set: {which} {a:#x} names no index of the AV's {} entries",
                            av.capacity()
                        ))
                    })
                };
                Some((index("start_addr", s)?, index("end_addr", e)?))
            }
        };
        if !attr.comm_key.is_empty() && (range.is_some() || universe) {
            return Err(FiError::inval(
                "fi_av_set: with a communication key, start_addr and end_addr must be \
                 FI_ADDR_NOTAVAIL and FI_UNIVERSE clear",
            ));
        }
        if universe && range.is_some() {
            return Err(FiError::inval(
                "fi_av_set: FI_UNIVERSE takes every address; start_addr and end_addr must be \
                 FI_ADDR_NOTAVAIL",
            ));
        }
        if range.is_none() && attr.stride != 0 {
            return Err(FiError::inval(format!(
                "fi_av_set: stride {} without start_addr and end_addr (it must be 0)",
                attr.stride
            )));
        }
        let av_cap = av.capacity();
        let capacity = if attr.count == 0 {
            av_cap
        } else {
            attr.count.min(av_cap)
        };
        let mut set = AvSet {
            av_id: av.id(),
            id: NEXT_SET_ID.fetch_add(1, Ordering::Relaxed),
            decoder: *av.decoder(),
            capacity,
            flags: attr.flags,
            comm_key: attr.comm_key.clone().into_boxed_slice(),
            order: Vec::new(),
            len: 0,
            places: HashTable::new(),
            hasher: RandomState::default(),
        };
        if let Some((start, end)) = range {
            if start > end {
                return Err(FiError::inval(format!(
                    "fi_av_set: start_addr {start} is after end_addr {end}"
                )));
            }
            if end >= av_cap as u64 {
                return Err(FiError::inval(format!(
                    "fi_av_set: end_addr {end} is outside the AV's {av_cap} entries"
                )));
            }
            if attr.stride == 0 {
                return Err(FiError::inval(
                    "fi_av_set: stride must be at least 1 with start_addr and end_addr",
                ));
            }
            let named = (end - start) / attr.stride + 1;
            if named > attr.count as u64 && attr.count != 0 {
                return Err(FiError::inval(format!(
                    "fi_av_set: start_addr {start}..=end_addr {end} by {} names {named} \
                     addresses, more than count {}",
                    attr.stride, attr.count
                )));
            }
            let mut i = start;
            while i <= end {
                if av.index_of(i).is_ok() {
                    // i <= end < av capacity <= u32::MAX
                    set.push(i as u32)?;
                }
                match i.checked_add(attr.stride) {
                    Some(next) => i = next,
                    None => break,
                }
            }
        } else if universe {
            // Every address the AV holds: its indices in use, less any whose asynchronous
            // insert the NIC refused (av.len() leaves those out too).
            let stored = av.indices().count();
            if stored > capacity {
                return Err(FiError::inval(format!(
                    "fi_av_set: FI_UNIVERSE names the AV's {stored} addresses, more than count {}",
                    attr.count
                )));
            }
            set.reserve(stored)
                .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, "fi_av_set: no memory"))?;
            for index in av.indices() {
                set.push(index)?;
            }
        }
        Ok(set)
    }

    /// Room for `more` members past the list's end (holes are not reused), in the list and
    /// the table; nothing else changes.
    fn reserve(&mut self, more: usize) -> Result<(), ()> {
        let AvSet {
            order,
            places,
            hasher,
            ..
        } = self;
        order.try_reserve(more).map_err(|_| ())?;
        places
            .try_reserve(more, |&p| hash_at(hasher, order, p))
            .map_err(|_| ())
    }

    /// Append `index`, a non-member; the caller checked the capacity.
    fn push(&mut self, index: u32) -> Result<(), FiError> {
        if index == VACANT {
            // No AV index takes this value; refused rather than stored as a hole.
            return Err(FiError::inval(format!(
                "AV set: index {index:#x} names no address"
            )));
        }
        if u32::try_from(self.order.len()).is_err() {
            // Places are u32: a list this long has holes (members are fewer than 2^32), and
            // compacting it leaves its members at places below 2^32.
            self.compact();
        }
        let place = u32::try_from(self.order.len())
            .map_err(|_| FiError::new(FiErrno::FI_ENOSPC, "AV set: too many members"))?;
        self.reserve(1)
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, "AV set: no memory"))?;
        let AvSet {
            order,
            places,
            hasher,
            len,
            ..
        } = self;
        order.push(index);
        // Room was reserved: this does not reallocate.
        places.insert_unique(hasher.hash_one(index), place, |&p| {
            hash_at(hasher, order, p)
        });
        *len += 1;
        Ok(())
    }

    /// The place in the list of the member `index`, if it is one.
    fn place(&self, index: u32) -> Option<u32> {
        let order = &self.order;
        self.places
            .find(self.hasher.hash_one(index), |&p| {
                order.get(p as usize) == Some(&index)
            })
            .copied()
    }

    #[inline]
    fn has(&self, index: u32) -> bool {
        self.place(index).is_some()
    }

    /// The members in order, as AV indices.
    fn live(&self) -> impl Iterator<Item = u32> + '_ {
        self.order.iter().copied().filter(|&i| i != VACANT)
    }

    /// Whether the list or the table could hold over four times the members (and over
    /// [`MIN_KEPT_ROOM`]): a compaction then gives the room back.
    fn oversized(&self) -> bool {
        let room = self.len.max(MIN_KEPT_ROOM);
        self.order.capacity() > 4 * room || self.places.capacity() > 4 * room
    }

    /// Drop the holes from the list, order kept, and record every member's new place; give
    /// back room the members are far from needing.
    fn compact(&mut self) {
        self.order.retain(|&i| i != VACANT);
        self.reindex();
    }

    /// After the list lost its holes: count the members and record their places anew.
    fn reindex(&mut self) {
        let AvSet {
            order,
            places,
            hasher,
            len,
            ..
        } = self;
        *len = order.len();
        let room = (*len).max(MIN_KEPT_ROOM);
        // Smaller storage only if it can be had: without it the set keeps what it has.
        if order.capacity() > 4 * room {
            let mut smaller = Vec::new();
            if smaller.try_reserve_exact(2 * room).is_ok() {
                smaller.extend_from_slice(order);
                *order = smaller;
            }
        }
        places.clear();
        if places.capacity() > 4 * room {
            let mut smaller = HashTable::new();
            // Empty: no member's hash is needed.
            if smaller.try_reserve(room, |_: &u32| 0).is_ok() {
                *places = smaller;
            }
        }
        // The table holds room for as many members as it held, or for `room`: no growth.
        for (place, &index) in (0u32..).zip(order.iter()) {
            places.insert_unique(hasher.hash_one(index), place, |&p| {
                hash_at(hasher, order, p)
            });
        }
    }

    /// The member index `fi_addr` names (receive-context and group bits stripped), if it could
    /// be one: an index of the AV, not `FI_ADDR_NOTAVAIL` or a handle.
    fn member_index(&self, fi_addr: FiAddr) -> Option<u32> {
        self.decoder.index(fi_addr)
    }

    fn same_av(&self, call: &str, other_av: u64) -> Result<(), FiError> {
        if self.av_id == other_av {
            Ok(())
        } else {
            Err(FiError::inval(format!(
                "{call}: the sets belong to different AVs"
            )))
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No members.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap memory the set holds, in bytes: its member list (holes and spare room included)
    /// and the table of members' places.
    pub fn heap_bytes(&self) -> usize {
        self.order.capacity() * core::mem::size_of::<u32>() + self.places.allocation_size()
    }

    /// Most members the set may hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The flags the set was created with.
    pub fn flags(&self) -> u64 {
        self.flags
    }

    /// The communication key (empty for none).
    pub fn comm_key(&self) -> &[u8] {
        &self.comm_key
    }

    /// [`AddressVector::id`] of the AV the set belongs to.
    pub fn av_id(&self) -> u64 {
        self.av_id
    }

    /// Members in order, as `fi_addr_t` values.
    pub fn members(&self) -> impl ExactSizeIterator<Item = FiAddr> + '_ {
        Members {
            slots: self.order.iter(),
            left: self.len,
        }
    }

    /// Whether `fi_addr` (receive-context bits ignored) is a member.
    pub fn contains(&self, fi_addr: FiAddr) -> bool {
        self.member_index(fi_addr).is_some_and(|i| self.has(i))
    }

    /// `fi_av_set_union`: append `src`'s members that are not members here, in `src`'s order.
    /// `FI_EINVAL` for a set of another AV; `FI_ENOSPC` (nothing added) beyond the capacity.
    pub fn union(&mut self, src: &AvSet) -> Result<(), FiError> {
        self.same_av("fi_av_set_union", src.av_id)?;
        let new = src.live().filter(|&i| !self.has(i)).count();
        if self.len + new > self.capacity {
            return Err(FiError::new(
                FiErrno::FI_ENOSPC,
                format!(
                    "fi_av_set_union: {} members + {new} new exceed the set's capacity of {}",
                    self.len, self.capacity
                ),
            ));
        }
        // All the room first, so that a failure adds nothing.
        self.reserve(new)
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, "fi_av_set_union: no memory"))?;
        for i in src.live() {
            if !self.has(i) {
                // Room was reserved above: this does not fail.
                self.push(i)?;
            }
        }
        Ok(())
    }

    /// `fi_av_set_intersect`: keep only members that are also `src`'s, in this set's order.
    /// `FI_EINVAL` for a set of another AV.
    pub fn intersect(&mut self, src: &AvSet) -> Result<(), FiError> {
        self.same_av("fi_av_set_intersect", src.av_id)?;
        self.retain(|i| src.has(i));
        Ok(())
    }

    /// `fi_av_set_diff`: drop members that are also `src`'s, keeping this set's order.
    /// `FI_EINVAL` for a set of another AV.
    pub fn diff(&mut self, src: &AvSet) -> Result<(), FiError> {
        self.same_av("fi_av_set_diff", src.av_id)?;
        self.retain(|i| !src.has(i));
        Ok(())
    }

    /// Drop every member: `fi_av_set_diff` of a set with itself.
    pub fn clear(&mut self) {
        self.order.clear();
        self.reindex();
    }

    /// Keep the members `keep` takes, in order (the list loses its holes too).
    fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let slots = self.order.len();
        self.order.retain(|&i| i != VACANT && keep(i));
        if self.order.len() != slots {
            self.reindex();
        }
    }

    /// `fi_av_set_insert`: append the address at `fi_addr`, which `av` (the set's AV) must
    /// hold. `FI_EINVAL` for another AV, an `fi_addr` the AV does not hold, or a member;
    /// `FI_ENOSPC` when the set is full.
    pub fn insert<N: NicAvTable>(
        &mut self,
        av: &AddressVector<N>,
        fi_addr: FiAddr,
    ) -> Result<(), FiError> {
        if self.av_id != av.id() {
            return Err(FiError::inval(
                "fi_av_set_insert: the set belongs to a different AV",
            ));
        }
        let index = av
            .index_of(fi_addr)
            .map_err(|e| e.within("fi_av_set_insert"))?;
        if self.has(index) {
            return Err(FiError::inval(format!(
                "fi_av_set_insert: fi_addr {fi_addr:#x} (index {index}) is already a member"
            )));
        }
        if self.len >= self.capacity {
            return Err(FiError::new(
                FiErrno::FI_ENOSPC,
                format!(
                    "fi_av_set_insert: the set is full ({} members)",
                    self.capacity
                ),
            ));
        }
        self.push(index)
    }

    /// `fi_av_set_remove`: remove the member `fi_addr`, keeping the others' order (stale
    /// members too: no AV needed). `FI_EINVAL` when it is not a member.
    pub fn remove(&mut self, fi_addr: FiAddr) -> Result<(), FiError> {
        let not_member = || {
            FiError::inval(format!(
                "fi_av_set_remove: fi_addr {fi_addr:#x} is not a member of the set"
            ))
        };
        let index = self.member_index(fi_addr).ok_or_else(not_member)?;
        let AvSet {
            order,
            places,
            hasher,
            len,
            ..
        } = self;
        let Ok(entry) = places.find_entry(hasher.hash_one(index), |&p| {
            order.get(p as usize) == Some(&index)
        }) else {
            return Err(not_member());
        };
        let (place, _) = entry.remove();
        if let Some(slot) = order.get_mut(place as usize) {
            *slot = VACANT;
        }
        while order.last() == Some(&VACANT) {
            order.pop();
        }
        *len = len.saturating_sub(1);
        if order.len() - *len > *len || self.oversized() {
            self.compact();
        }
        Ok(())
    }

    /// Members whose addresses `av` no longer holds, in order. `FI_EINVAL` for another AV
    /// than the set's, whose indices name other addresses.
    pub fn stale<'a, N: NicAvTable>(
        &'a self,
        av: &'a AddressVector<N>,
    ) -> Result<impl Iterator<Item = FiAddr> + 'a, FiError> {
        self.same_av("AV set stale", av.id())?;
        Ok(self
            .live()
            .map(FiAddr::from)
            .filter(move |&fa| av.index_of(fa).is_err()))
    }

    /// Drop the members `av` no longer holds, keeping the others' order; how many were
    /// dropped. `FI_EINVAL` for another AV.
    pub fn prune<N: NicAvTable>(&mut self, av: &AddressVector<N>) -> Result<usize, FiError> {
        self.same_av("AV set prune", av.id())?;
        let before = self.len;
        self.retain(|i| av.index_of(FiAddr::from(i)).is_ok());
        Ok(before - self.len)
    }

    /// `fi_av_set_addr`: the set's collective address ([`AV_SET_ADDR_BASE`] + its number),
    /// for `fi_join_collective`. `FI_EINVAL` for another AV, an empty set without a
    /// communication key (a key names its members through the fabric's manager), or a set
    /// with stale members (see [`AvSet::stale`]).
    pub fn addr<N: NicAvTable>(&self, av: &AddressVector<N>) -> Result<FiAddr, FiError> {
        self.same_av("fi_av_set_addr", av.id())?;
        if self.len == 0 && self.comm_key.is_empty() {
            return Err(FiError::inval(
                "fi_av_set_addr: the set is empty and has no communication key; a collective \
                 needs members",
            ));
        }
        let mut stale = self.stale(av)?;
        if let Some(first) = stale.next() {
            let more = stale.count();
            return Err(FiError::inval(format!(
                "fi_av_set_addr: member fi_addr {first} (and {more} more) was removed from the AV"
            )));
        }
        if !self.decoder.handles_apart() {
            return Err(FiError::inval(format!(
                "fi_av_set_addr: the AV has more than {AUTH_KEY_MAX_RX_CTX_BITS} receive-context \
                 bits or groups above {AUTH_KEY_MAX_GROUP_ID:#x}, so any fi_addr_t may be one of \
                 its addresses and none is left to name a collective"
            )));
        }
        Ok(AV_SET_ADDR_BASE | (self.id & AV_SET_NUMBER_MASK))
    }
}

impl<N: NicAvTable> AddressVector<N> {
    /// `fi_av_set`: see [`AvSet::new`].
    pub fn av_set(&self, attr: &AvSetAttr) -> Result<AvSet, FiError> {
        AvSet::new(self, attr)
    }
}
