//! Address templates: what the addresses of one fabric share, kept once, so that a mirror
//! slot is one 8-byte word.
//!
//! The peers of one job differ in few bits of their 32-byte serialized address
//! ([`UetAddress::to_bytes`](uet_fwif::UetAddress::to_bytes)): the PIDonFEP, the low bits of
//! the Initiator ID and the low bits of the Fabric Address. Version, flags, capabilities,
//! resource indices and the high bits of both are the same for every peer of a subnet and
//! job. A slot therefore holds the varying bits and the id of a *template*: the address with
//! them cleared. A lookup rebuilds the address from the two: one load from the slot table,
//! which at a million entries misses the caches, and one from the template table, a few
//! cache lines that stay in L1.
//!
//! Why it matters: a scattered `fi_av_lookup` costs one cache miss, and how often it misses
//! is a matter of how much of the table the caches hold. At 8 bytes per slot, a table of
//! 100,000 entries (800 KB) fits in a core's L2 of 1 MB and one of a million (8 MB) in a
//! shared L3 of 32 MB, beside what else the application reads, where 32-byte slots (3.2 MB
//! and 32 MB) did not. The mirror also holds a quarter of the memory.
//!
//! ## The slot word
//!
//! | bits   | field                                                                |
//! |--------|----------------------------------------------------------------------|
//! | 63..52 | template id: 0 an empty slot, [`SPILLED`] an address kept whole       |
//! | 47..40 | PIDonFEP, low 8 bits (byte 5)                                        |
//! | 35..32 | PIDonFEP, high 4 bits (low nibble of byte 4)                         |
//! | 31..16 | Initiator ID, low 16 bits (bytes 14–15)                              |
//! | 15..0  | Fabric Address, low 16 bits (bytes 18–19 for IPv4, 30–31 for IPv6)   |
//!
//! Bits 51..48 and 39..36 are 0. PIDonFEP sits where it sits in the address's first word
//! (the address read as four little-endian words), and each other field one shift from its
//! place, so that a lookup rebuilds an address in a dozen instructions: at a million
//! scattered lookups, how many are in flight at once, and so the time per lookup, depends on
//! how few instructions each takes.
//!
//! A spilled word holds, in bits 31..0, the index of the address in a table of whole
//! addresses ([`super::whole`]). An address is spilled only when [`MAX_TEMPLATES`] templates
//! are in use, or when memory for a new template cannot be had: two cache misses per lookup
//! instead of one, 40 bytes instead of 8, and nothing lost.
//!
//! Which bits vary is a choice of layout, not of validity: any 32 bytes pack and unpack to
//! themselves (the bits a slot does not hold belong to the template). So the packing needs
//! no knowledge of which addresses are well formed.
//!
//! A template lives while slots use it: the last slot that releases it frees its id. An
//! address kept whole stays so until it is removed, even once a template id is free again.

use super::whole::WholeAddresses;
use core::hash::BuildHasher;
use std::collections::TryReserveError;
use uet_fwif::address::{flags, ADDRESS_BYTES};

/// A serialized address.
pub type Slot = [u8; ADDRESS_BYTES];

/// Bit of a slot word where the template id starts.
const ID_SHIFT: u32 = 52;

/// The template id of a word holding the index of a whole address (a spilled one).
pub const SPILLED: u16 = 0xFFF;

/// Templates a mirror keeps at most: ids 1 to 4,094 (0 is an empty slot, 4,095
/// [`SPILLED`]).
pub const MAX_TEMPLATES: usize = SPILLED as usize - 1;

/// The bits of a word below the template id.
const FIELDS: u64 = (1 << ID_SHIFT) - 1;

/// An address as four little-endian words: byte `k` of the address is bits `8 * (k % 8)..`
/// of word `k / 8`. Packing works on words, so that an address is rebuilt in registers and
/// stored whole, not byte by byte.
type Words = [u64; 4];

/// The bits of each word that a slot holds (the rest is the template's): PIDonFEP's low
/// nibble of byte 4 and byte 5; bytes 14–15; bytes 18–19 of an IPv4 address, or bytes 30–31
/// of an IPv6 one.
const PID_ON_FEP: u64 = 0x0000_FF0F_0000_0000;
const INITIATOR: u64 = 0xFFFF_0000_0000_0000;
const FABRIC_ADDR_V4: u64 = 0x0000_0000_FFFF_0000;
const FABRIC_ADDR_V6: u64 = 0xFFFF_0000_0000_0000;

#[inline(always)]
fn words(bytes: &Slot) -> Words {
    let w: Words = zerocopy::transmute!(*bytes);
    w.map(u64::from_le)
}

#[inline(always)]
fn bytes(words: Words) -> Slot {
    zerocopy::transmute!(words.map(u64::to_le))
}

/// All ones when the address is an IPv6 one (the flag in byte 1), else 0.
#[inline(always)]
fn ipv6_mask(w0: u64) -> u64 {
    let ipv6 = (w0 >> 8) & u64::from(flags::IPV6);
    0u64.wrapping_sub(u64::from(ipv6 != 0))
}

/// `bytes` as its template (the varying bits cleared) and the varying bits, placed as in
/// the slot word.
#[inline]
fn split(bytes: &Slot) -> (Words, u64) {
    let [w0, w1, w2, w3] = words(bytes);
    let v6 = ipv6_mask(w0);
    let initiator = w1 >> 48;
    let fabric_addr = ((w2 >> 16) & 0xFFFF & !v6) | ((w3 >> 48) & v6);
    let image = [
        w0 & !PID_ON_FEP,
        w1 & !INITIATOR,
        w2 & !(FABRIC_ADDR_V4 & !v6),
        w3 & !(FABRIC_ADDR_V6 & v6),
    ];
    (image, (w0 & PID_ON_FEP) | (initiator << 16) | fabric_addr)
}

/// Whether two templates are one, compared in registers: an array comparison is done in
/// vector registers from memory, and loading 16 bytes that were just stored as two words
/// stalls on store forwarding (a third of an insert's time in `Slots::set`).
#[inline(always)]
fn same(a: &Words, b: &Words) -> bool {
    ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0
}

/// A template as a lookup reads it: the image, and where the Fabric Address bits go (the
/// bits of words 2 and 3 they take: one mask is 0), so that joining needs no test of the
/// address family.
#[derive(Clone, Copy, Debug, Default)]
struct Row {
    image: Words,
    fabric_addr: [u64; 2],
}

impl Row {
    fn new(image: Words) -> Row {
        let v6 = ipv6_mask(image[0]);
        Row {
            image,
            fabric_addr: [FABRIC_ADDR_V4 & !v6, FABRIC_ADDR_V6 & v6],
        }
    }
}

/// The address a template and the varying bits of a word make.
#[inline(always)]
fn join(row: &Row, word: u64) -> Slot {
    let Row {
        image: [w0, w1, w2, w3],
        fabric_addr: [v4, v6],
    } = *row;
    bytes([
        w0 | (word & PID_ON_FEP),
        w1 | ((word << 32) & INITIATOR),
        w2 | ((word << 16) & v4),
        w3 | ((word << 48) & v6),
    ])
}

/// The template id of a slot word.
#[inline(always)]
pub fn template_id(word: u64) -> u16 {
    (word >> ID_SHIFT) as u16
}

/// Whether template `id` of `rows` is `image`.
#[inline]
fn is_row(rows: &[Row], id: u16, image: &Words) -> bool {
    rows.get(usize::from(id))
        .is_some_and(|r| same(&r.image, image))
}

/// The hash of template `id`'s image (what the table rehashes with as it grows).
fn hash_row(hasher: &foldhash::fast::RandomState, rows: &[Row], id: u16) -> u64 {
    rows.get(usize::from(id))
        .map_or(0, |r| hasher.hash_one(r.image))
}

/// The templates of one mirror, and the addresses it keeps whole.
#[derive(Debug, Default)]
pub struct Templates {
    /// Templates by id; id 0 (an empty slot) holds no template. Never longer than
    /// `MAX_TEMPLATES + 1`, so that [`SPILLED`] indexes nothing.
    rows: Vec<Row>,
    /// Slots using each template; 0 for a free id.
    users: Vec<u32>,
    /// The ids of the templates in use, hashed by image: the table holds only ids (the image
    /// is the row's), three bytes a bucket where a map keyed by image would hold forty.
    by_image: hashbrown::HashTable<u16>,
    /// How images are hashed.
    hasher: foldhash::fast::RandomState,
    /// Ids freed, to be given again. Room for every id is reserved as ids are made, so a
    /// release never allocates.
    free_ids: Vec<u16>,
    /// The template the last pack used (id 0: none): consecutive inserts of one job's peers
    /// use one template, and then find it without hashing.
    last: (Words, u16),
    /// Addresses kept whole, for slots of [`SPILLED`].
    whole: WholeAddresses,
}

impl Templates {
    /// The word for a slot holding `bytes`, taking a use of its template (or of a whole
    /// entry). `None` only when no memory can be had for either: nothing changed then.
    #[inline]
    pub fn pack(&mut self, bytes: &Slot) -> Option<u64> {
        let (image, fields) = split(bytes);
        let hit = self.last.1 != 0 && same(&self.last.0, &image);
        let id = if hit {
            Some(self.last.1)
        } else {
            self.find_or_add(&image)
        };
        // A template whose count of users is full (a table of 2^32 - 1 slots, every one of
        // them its address, and one rewritten: the new use is taken before the old one is
        // given back) takes no more: the address is kept whole.
        let users = &mut self.users;
        match id.and_then(|id| {
            let u = users.get_mut(usize::from(id)).filter(|u| **u < u32::MAX)?;
            Some((id, u))
        }) {
            Some((id, users)) => {
                *users += 1;
                // Only a template found by hashing is remembered: on the common path the
                // image is the last one already, and storing it again would write it to
                // memory only to read it back as wider loads on the next insert, which
                // stalls on store forwarding (half of `Slots::set`'s time at 100,000
                // entries).
                if !hit {
                    self.last = (image, id);
                }
                Some((u64::from(id) << ID_SHIFT) | fields)
            }
            None => self.spill(bytes),
        }
    }

    /// The id of template `image`, made if it is new; `None` when none can be made.
    #[cold]
    fn find_or_add(&mut self, image: &Words) -> Option<u16> {
        let hash = self.hasher.hash_one(image);
        let rows = &self.rows;
        if let Some(&id) = self.by_image.find(hash, |&id| is_row(rows, id, image)) {
            return Some(id);
        }
        if self.by_image.len() >= MAX_TEMPLATES || self.reserve_one().is_err() {
            return None;
        }
        let id = match self.free_ids.pop() {
            Some(id) => {
                *self.rows.get_mut(usize::from(id))? = Row::new(*image);
                id
            }
            None => {
                if self.rows.is_empty() {
                    // Id 0 is an empty slot, never a template.
                    self.rows.push(Row::default());
                    self.users.push(0);
                }
                self.rows.push(Row::new(*image));
                self.users.push(0);
                u16::try_from(self.rows.len() - 1).ok()?
            }
        };
        let (rows, hasher) = (&self.rows, &self.hasher);
        self.by_image
            .insert_unique(hash, id, |&id| hash_row(hasher, rows, id));
        Some(id)
    }

    /// Room for one more template everywhere it is kept (and for its id on the free list),
    /// so that adding it cannot fail half way.
    fn reserve_one(&mut self) -> Result<(), ()> {
        let (rows, hasher) = (&self.rows, &self.hasher);
        self.by_image
            .try_reserve(1, |&id| hash_row(hasher, rows, id))
            .map_err(|_| ())?;
        self.reserve_rows().map_err(|_| ())
    }

    /// Room for one more row, and for every id on the free list.
    fn reserve_rows(&mut self) -> Result<(), TryReserveError> {
        if self.free_ids.is_empty() {
            self.rows.try_reserve(2)?;
            self.users.try_reserve(2)?;
            let ids = self.rows.len() + 2;
            self.free_ids
                .try_reserve(ids.saturating_sub(self.free_ids.len()))?;
        }
        Ok(())
    }

    /// Keep `bytes` whole: the word of a [`SPILLED`] slot.
    #[cold]
    fn spill(&mut self, bytes: &Slot) -> Option<u64> {
        let at = self.whole.add(bytes)?;
        Some((u64::from(SPILLED) << ID_SHIFT) | u64::from(at))
    }

    /// The address a slot word holds; `None` for an empty slot.
    #[inline(always)]
    pub fn unpack(&self, word: u64) -> Option<Slot> {
        let id = template_id(word);
        if id == 0 {
            return None;
        }
        // SPILLED indexes past every template.
        match self.rows.get(usize::from(id)) {
            Some(row) => Some(join(row, word)),
            None => self.unpack_spilled(word),
        }
    }

    #[cold]
    fn unpack_spilled(&self, word: u64) -> Option<Slot> {
        self.whole.get(u32::try_from(word & FIELDS).ok()?).copied()
    }

    /// Give back the use a slot word took ([`Templates::pack`]); a template's last use frees
    /// its id. Nothing for an empty slot, nor for a word whose use was already given back (a
    /// free template id, or a whole entry already freed), so that a second release cannot
    /// put an id or entry on a free list twice and have two addresses share it.
    pub fn release(&mut self, word: u64) {
        let id = template_id(word);
        if id == 0 {
            return;
        }
        if id == SPILLED {
            // Nothing for an entry already free.
            if let Ok(at) = u32::try_from(word & FIELDS) {
                self.whole.remove(at);
            }
            return;
        }
        let Some(users) = self.users.get_mut(usize::from(id)).filter(|u| **u > 0) else {
            return;
        };
        *users -= 1;
        if *users == 0 {
            if let Some(row) = self.rows.get(usize::from(id)) {
                let hash = self.hasher.hash_one(row.image);
                if let Ok(entry) = self.by_image.find_entry(hash, |&other| other == id) {
                    entry.remove();
                }
            }
            // Room for every id was reserved when it was made.
            self.free_ids.push(id);
            if self.last.1 == id {
                self.last.1 = 0;
            }
        }
    }

    /// Templates in use.
    pub fn len(&self) -> usize {
        self.by_image.len()
    }

    /// No template in use.
    pub fn is_empty(&self) -> bool {
        self.by_image.is_empty()
    }

    /// Addresses kept whole.
    pub fn spilled(&self) -> usize {
        self.whole.len()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        use core::mem::size_of;
        self.rows.capacity() * size_of::<Row>()
            + self.users.capacity() * size_of::<u32>()
            + self.by_image.allocation_size()
            + self.free_ids.capacity() * size_of::<u16>()
            + self.whole.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use uet_fwif::address::{caps, AddressingMode};
    use uet_fwif::UetAddress;

    fn peer(fabric_addr: IpAddr, pid_on_fep: u16, initiator: u32) -> Slot {
        UetAddress {
            caps: caps::AI_BASE,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep,
            fabric_addr,
            ri_start: 1,
            ri_count: 4,
            initiator,
        }
        .to_bytes()
        .unwrap()
    }

    #[test]
    fn any_bytes_pack_and_unpack_to_themselves() {
        let mut t = Templates::default();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2_000 {
            let mut b = [0u8; 32];
            for byte in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x as u8;
            }
            let w = t.pack(&b).unwrap();
            assert_ne!(template_id(w), 0);
            assert_eq!(t.unpack(w), Some(b));
        }
        assert_eq!(t.unpack(0), None, "an empty slot");
    }

    #[test]
    fn peers_of_one_subnet_share_a_template_whatever_their_low_bits() {
        let mut t = Templates::default();
        let v4 = |i: u32| {
            peer(
                IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + i)),
                (i % 4096) as u16,
                i,
            )
        };
        let words: Vec<u64> = (0..65_536).map(|i| t.pack(&v4(i)).unwrap()).collect();
        assert_eq!(
            t.len(),
            1,
            "10.0.0.0/16, initiators below 2^16, any PIDonFEP"
        );
        for (i, &w) in words.iter().enumerate() {
            assert_eq!(t.unpack(w), Some(v4(i as u32)));
        }
        // The next /16 is another template; so is another initiator block.
        let w = t.pack(&v4(65_536)).unwrap();
        assert_eq!((t.len(), t.unpack(w)), (2, Some(v4(65_536))));
        let far = peer(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 1, 1 << 16);
        let w = t.pack(&far).unwrap();
        assert_eq!((t.len(), t.unpack(w)), (3, Some(far)));
        // IPv6: the low 16 bits of the address vary within a template.
        let v6 = |i: u16| {
            let a = Ipv6Addr::new(0xfd00, 0, 0, 7, 0x0211, 0x22ff, 0xfe33, i);
            peer(IpAddr::V6(a), 5, 9)
        };
        let (a, b) = (t.pack(&v6(1)).unwrap(), t.pack(&v6(0xFFFF)).unwrap());
        assert_eq!(t.len(), 4);
        assert_eq!((t.unpack(a), t.unpack(b)), (Some(v6(1)), Some(v6(0xFFFF))));
    }

    #[test]
    fn peers_on_several_rails_inserted_host_by_host_share_a_template_per_rail() {
        let mut t = Templates::default();
        // Rail r is 10.r.0.0/16 and host h is 10.r.0.h on each: the peers of one host differ
        // in the rail's group alone, and those of one rail in the low bits. Inserted host by
        // host, as an application inserts its ranks, they take a template per rail.
        let peer_at = |h: u32, r: u32| {
            peer(
                IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + (r << 16) + h)),
                1,
                r,
            )
        };
        let mut words = Vec::new();
        for h in 1..5_000 {
            for r in 0..8 {
                words.push(t.pack(&peer_at(h, r)).unwrap());
            }
        }
        assert_eq!((t.len(), t.spilled()), (8, 0));
        for (i, &w) in words.iter().enumerate() {
            let (h, r) = (1 + i as u32 / 8, i as u32 % 8);
            assert_eq!(t.unpack(w), Some(peer_at(h, r)), "{i}");
        }
        // IPv6, a /64 per rail.
        let mut t = Templates::default();
        let peer_at = |h: u16, r: u16| {
            let a = Ipv6Addr::new(0xfd00, 0, 0, r, 0, 0, 0, h);
            peer(IpAddr::V6(a), 1, 0)
        };
        for h in 1..5_000 {
            for r in 0..4 {
                let w = t.pack(&peer_at(h, r)).unwrap();
                assert_eq!(t.unpack(w), Some(peer_at(h, r)));
            }
        }
        assert_eq!((t.len(), t.spilled()), (4, 0));
    }

    #[test]
    fn a_template_whose_count_of_users_is_full_takes_no_more() {
        let mut t = Templates::default();
        let a = peer(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 1, 0);
        let first = t.pack(&a).unwrap();
        let id = usize::from(template_id(first));
        t.users[id] = u32::MAX - 1;
        let last = t.pack(&a).unwrap();
        assert_eq!(
            (template_id(last), t.users[id]),
            (template_id(first), u32::MAX)
        );
        let whole = t.pack(&a).unwrap();
        assert_eq!(
            template_id(whole),
            SPILLED,
            "kept whole, the count not wrapped"
        );
        assert_eq!((t.unpack(whole), t.users[id]), (Some(a), u32::MAX));
        t.release(last);
        assert_eq!(template_id(t.pack(&a).unwrap()), template_id(first));
    }

    #[test]
    fn a_templates_last_release_frees_its_id_for_another() {
        let mut t = Templates::default();
        let a = peer(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 1, 0);
        let b = peer(IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)), 1, 0);
        let (w1, w2) = (t.pack(&a).unwrap(), t.pack(&a).unwrap());
        t.release(w1);
        assert_eq!((t.len(), t.unpack(w2)), (1, Some(a)), "one use left");
        t.release(w2);
        assert!(t.is_empty());
        let w = t.pack(&b).unwrap();
        assert_eq!(
            template_id(w),
            template_id(w1),
            "the freed id is given again"
        );
        assert_eq!(t.unpack(w), Some(b));
        // The last-used shortcut forgot the freed template: `a` makes a new one.
        let w = t.pack(&a).unwrap();
        assert_ne!(template_id(w), template_id(w1));
        assert_eq!((t.len(), t.unpack(w)), (2, Some(a)));
    }

    #[test]
    fn a_second_release_of_a_word_frees_nothing_twice() {
        let mut t = Templates::default();
        let a = peer(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 1, 0);
        let w = t.pack(&a).unwrap();
        t.release(w);
        t.release(w);
        let b = peer(IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)), 1, 0);
        let c = peer(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)), 1, 0);
        let (wb, wc) = (t.pack(&b).unwrap(), t.pack(&c).unwrap());
        assert_ne!(template_id(wb), template_id(wc), "one freed id, given once");
        assert_eq!((t.unpack(wb), t.unpack(wc)), (Some(b), Some(c)));

        // The same for an address kept whole.
        let mut t = Templates::default();
        let subnet = |k: u32| peer(IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + (k << 16))), 1, 0);
        for k in 0..MAX_TEMPLATES as u32 {
            t.pack(&subnet(k)).unwrap();
        }
        let whole = t.pack(&subnet(5_000)).unwrap();
        assert_eq!(template_id(whole), SPILLED);
        t.release(whole);
        t.release(whole);
        assert_eq!(t.spilled(), 0);
        let (x, y) = (
            t.pack(&subnet(5_001)).unwrap(),
            t.pack(&subnet(5_002)).unwrap(),
        );
        assert_ne!(x, y, "one freed entry, given once");
        assert_eq!(
            (t.unpack(x), t.unpack(y)),
            (Some(subnet(5_001)), Some(subnet(5_002)))
        );
        assert_eq!(t.spilled(), 2);
    }

    #[test]
    fn an_all_zero_address_kept_whole_is_freed_by_its_release() {
        let mut t = Templates::default();
        let subnet = |k: u32| peer(IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + (k << 16))), 1, 0);
        for k in 0..MAX_TEMPLATES as u32 {
            t.pack(&subnet(k)).unwrap();
        }
        let zero = t.pack(&[0; 32]).unwrap();
        assert_eq!(template_id(zero), SPILLED);
        assert_eq!(t.unpack(zero), Some([0; 32]));
        t.release(zero);
        assert_eq!(t.spilled(), 0, "nothing kept whole once it is released");
        // An entry freed before it is not taken by it, nor freed twice.
        let a = t.pack(&subnet(5_000)).unwrap();
        t.release(a);
        let (z, b) = (t.pack(&[0; 32]).unwrap(), t.pack(&subnet(5_001)).unwrap());
        t.release(z);
        t.release(z);
        assert_eq!((t.spilled(), t.unpack(b)), (1, Some(subnet(5_001))));
        let c = t.pack(&subnet(5_002)).unwrap();
        assert_ne!(b, c);
        assert_eq!(
            (t.unpack(b), t.unpack(c)),
            (Some(subnet(5_001)), Some(subnet(5_002)))
        );
    }

    #[test]
    fn past_the_last_template_addresses_are_kept_whole_and_their_entries_reused() {
        let mut t = Templates::default();
        // Each /16 of 10.0.0.0/8 and 11.0.0.0/8 is a template of its own.
        let subnet = |k: u32| peer(IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + (k << 16))), 1, 0);
        let words: Vec<u64> = (0..MAX_TEMPLATES as u32 + 3)
            .map(|k| t.pack(&subnet(k)).unwrap())
            .collect();
        assert_eq!(t.len(), MAX_TEMPLATES);
        assert_eq!(t.spilled(), 3);
        for (k, &w) in words.iter().enumerate() {
            assert_eq!(t.unpack(w), Some(subnet(k as u32)), "{k}");
        }
        assert!(words[MAX_TEMPLATES..]
            .iter()
            .all(|&w| template_id(w) == SPILLED));
        // A spilled entry is reused; a freed template id takes the next new template.
        let spilled = words[MAX_TEMPLATES];
        t.release(spilled);
        assert_eq!(t.spilled(), 2);
        let w = t.pack(&subnet(9_000)).unwrap();
        assert_eq!(
            (w, t.unpack(w)),
            (spilled, Some(subnet(9_000))),
            "the freed entry"
        );
        t.release(words[0]);
        let w = t.pack(&subnet(9_001)).unwrap();
        assert_eq!(template_id(w), template_id(words[0]));
        assert_eq!(t.unpack(w), Some(subnet(9_001)));
        let held = t.heap_bytes();
        assert!(
            held < 640 << 10,
            "{held} bytes for every template: at most 640 KiB, the hash table counted whole"
        );
    }
}
