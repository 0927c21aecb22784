//! libfabric flag bits, `fi_addr_t` and its helpers, and `enum fi_av_type`, with the values of
//! libfabric's headers (`rdma/fabric.h`, `rdma/fi_domain.h`), so a C provider can pass them
//! through unchanged.

use core::fmt::Write as _;

/// `fi_addr_t`: an AV index in the low bits, optionally a receive context in the top
/// `rx_ctx_bits` ([`fi_rx_addr`]) or a v2 peer group in bits 32–63 ([`fi_group_addr`]).
pub type FiAddr = u64;

/// `FI_ADDR_NOTAVAIL`: no address; what a failed insert writes to its `fi_addr` slot.
pub const FI_ADDR_NOTAVAIL: FiAddr = uet_fwif::FI_ADDR_NOTAVAIL;
/// `FI_ADDR_UNSPEC`, the same value as [`FI_ADDR_NOTAVAIL`].
pub const FI_ADDR_UNSPEC: FiAddr = FI_ADDR_NOTAVAIL;

/// `FI_READ`: on `fi_av_open`, open a named AV read-only.
pub const FI_READ: u64 = 1 << 8;
/// `FI_WRITE`.
pub const FI_WRITE: u64 = 1 << 9;
/// `FI_MORE`: more inserts follow; the provider may aggregate them.
pub const FI_MORE: u64 = 1 << 18;
/// `FI_COMPLETION`.
pub const FI_COMPLETION: u64 = 1 << 24;
/// `FI_EVENT` (= `FI_COMPLETION`): on `fi_av_open`, inserts complete asynchronously on an EQ.
pub const FI_EVENT: u64 = FI_COMPLETION;
/// `FI_AV_USER_ID`: user ids for AV entries (open flag, or per insert).
pub const FI_AV_USER_ID: u64 = 1 << 41;
/// `FI_SHARED_AV`: the capability of AVs shared between processes (named AVs).
pub const FI_SHARED_AV: u64 = 1 << 53;
/// `FI_SOURCE` (same bit as [`FI_AUTH_KEY`] and [`FI_UNIVERSE`]).
pub const FI_SOURCE: u64 = 1 << 57;
/// `FI_UNIVERSE` (`fi_av_set`).
pub const FI_UNIVERSE: u64 = 1 << 57;
/// `FI_AUTH_KEY`: the `fi_addr_t` is (or is derived from) an auth-key handle.
pub const FI_AUTH_KEY: u64 = 1 << 57;
/// `FI_SYNC_ERR`: per-address insert status through the context array.
pub const FI_SYNC_ERR: u64 = 1 << 58;
/// `FI_SYMMETRIC`: symmetric, sequential addressing on every node.
pub const FI_SYMMETRIC: u64 = 1 << 59;

/// `FI_BARRIER_SET` (`fi_av_set` collective capability).
pub const FI_BARRIER_SET: u64 = 1 << 40;
/// `FI_BROADCAST_SET`.
pub const FI_BROADCAST_SET: u64 = 1 << 41;
/// `FI_ALLTOALL_SET`.
pub const FI_ALLTOALL_SET: u64 = 1 << 42;
/// `FI_ALLREDUCE_SET`.
pub const FI_ALLREDUCE_SET: u64 = 1 << 43;
/// `FI_ALLGATHER_SET`.
pub const FI_ALLGATHER_SET: u64 = 1 << 44;
/// `FI_REDUCE_SCATTER_SET`.
pub const FI_REDUCE_SCATTER_SET: u64 = 1 << 45;
/// `FI_REDUCE_SET`.
pub const FI_REDUCE_SET: u64 = 1 << 46;
/// `FI_SCATTER_SET`.
pub const FI_SCATTER_SET: u64 = 1 << 47;
/// `FI_GATHER_SET`.
pub const FI_GATHER_SET: u64 = 1 << 48;

/// `FI_AV_AUTH_KEY`: the domain attribute `auth_key_size` value that puts auth keys in the AV.
pub const FI_AV_AUTH_KEY: usize = usize::MAX;

/// Names of the flag bits an fi_av call may meet, for error messages. Bits that several names
/// share are listed under the name the AV calls use.
const AV_FLAG_NAMES: &[(u64, &str)] = &[
    (FI_READ, "FI_READ"),
    (FI_WRITE, "FI_WRITE"),
    (FI_MORE, "FI_MORE"),
    (FI_EVENT, "FI_EVENT"),
    (FI_AV_USER_ID, "FI_AV_USER_ID"),
    (FI_AUTH_KEY, "FI_AUTH_KEY"),
    (FI_SYNC_ERR, "FI_SYNC_ERR"),
    (FI_SYMMETRIC, "FI_SYMMETRIC"),
];

/// `flags` as `FI_MORE|FI_SYNC_ERR|0x4`: known AV flag names, then any other bits in hex.
pub fn flag_names(flags: u64) -> String {
    let mut out = String::new();
    let mut rest = flags;
    for &(bit, name) in AV_FLAG_NAMES {
        if rest & bit != 0 {
            if !out.is_empty() {
                out.push('|');
            }
            out.push_str(name);
            rest &= !bit;
        }
    }
    if rest != 0 || out.is_empty() {
        if !out.is_empty() {
            out.push('|');
        }
        let _ = write!(out, "{rest:#x}");
    }
    out
}

/// `fi_rx_addr`: `fi_addr` with receive context `rx_index` in its top `rx_ctx_bits` bits,
/// `((uint64_t)rx_index << (64 - rx_ctx_bits)) | fi_addr`. `rx_ctx_bits` 0 means the AV has no
/// receive-context bits and returns `fi_addr` unchanged (the C macro's shift by 64 is undefined
/// there); values above 64 count as 64. As in the C macro, the bits of `rx_index` that do not
/// fit in `rx_ctx_bits` are lost: `fi_rx_addr(a, 16, 4)` is `fi_rx_addr(a, 0, 4)`, so a caller
/// keeps `rx_index` below the peer's receive contexts.
pub const fn fi_rx_addr(fi_addr: FiAddr, rx_index: u32, rx_ctx_bits: u8) -> FiAddr {
    let bits = if rx_ctx_bits > 64 {
        64
    } else {
        rx_ctx_bits as u32
    };
    if bits == 0 {
        return fi_addr;
    }
    ((rx_index as u64) << (64 - bits)) | fi_addr
}

/// `fi_group_addr` (libfabric 2.x): `fi_addr` with peer group `group_id` in bits 32–63.
pub const fn fi_group_addr(fi_addr: FiAddr, group_id: u32) -> FiAddr {
    ((group_id as u64) << 32) | fi_addr
}

/// The receive context an `fi_addr_t` names, with `rx_ctx_bits` receive-context bits.
pub const fn fi_rx_index(fi_addr: FiAddr, rx_ctx_bits: u8) -> u64 {
    if rx_ctx_bits == 0 {
        return 0;
    }
    if rx_ctx_bits >= 64 {
        return fi_addr;
    }
    fi_addr >> (64 - rx_ctx_bits as u32)
}

/// The `fi_addr_t` without its top `rx_ctx_bits` receive-context bits: the AV index part.
pub const fn fi_addr_strip_rx(fi_addr: FiAddr, rx_ctx_bits: u8) -> FiAddr {
    if rx_ctx_bits == 0 {
        return fi_addr;
    }
    if rx_ctx_bits >= 64 {
        return 0;
    }
    fi_addr & (u64::MAX >> rx_ctx_bits)
}

/// The peer group an `fi_addr_t` names on an AV with peer groups and `rx_ctx_bits`
/// receive-context bits: bits 32 to 63 − `rx_ctx_bits` (the receive context takes the top of
/// the group field; see [`fi_addr_index`]).
pub const fn fi_group_id(fi_addr: FiAddr, rx_ctx_bits: u8) -> u32 {
    let rest = fi_addr_strip_rx(fi_addr, rx_ctx_bits);
    (rest >> 32) as u32
}

/// The AV index part of an `fi_addr_t`. Without peer groups: everything below the top
/// `rx_ctx_bits` receive-context bits ([`fi_addr_strip_rx`]). With peer groups: bits 0–31; bits
/// 32–63 hold the group ([`fi_group_addr`]) with the receive context in their top
/// `rx_ctx_bits`, which an AV with peer groups keeps within 32 bits together with the group.
pub const fn fi_addr_index(fi_addr: FiAddr, rx_ctx_bits: u8, peer_groups: bool) -> FiAddr {
    if peer_groups {
        fi_addr & (u32::MAX as u64)
    } else {
        fi_addr_strip_rx(fi_addr, rx_ctx_bits)
    }
}

/// `enum fi_av_type`, with libfabric's values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum AvType {
    /// `FI_AV_UNSPEC`: the provider chooses (this one chooses [`AvType::Table`]).
    #[default]
    Unspec = 0,
    /// `FI_AV_MAP`: in libfabric 2.x aligned with TABLE; here it behaves as TABLE.
    Map = 1,
    /// `FI_AV_TABLE`: `fi_addr_t` is the index; an insert takes the lowest unused one.
    Table = 2,
}

impl AvType {
    /// The type for a C `enum fi_av_type` value.
    pub const fn from_raw(raw: i32) -> Option<Self> {
        match raw {
            0 => Some(AvType::Unspec),
            1 => Some(AvType::Map),
            2 => Some(AvType::Table),
            _ => None,
        }
    }

    /// The C `enum fi_av_type` value.
    pub const fn to_raw(self) -> i32 {
        self as i32
    }

    /// The C name: `FI_AV_UNSPEC`, `FI_AV_MAP` or `FI_AV_TABLE`.
    pub const fn name(self) -> &'static str {
        match self {
            AvType::Unspec => "FI_AV_UNSPEC",
            AvType::Map => "FI_AV_MAP",
            AvType::Table => "FI_AV_TABLE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_match_the_headers() {
        assert_eq!(FI_READ, 0x100);
        assert_eq!(FI_MORE, 0x4_0000);
        assert_eq!(FI_EVENT, 0x100_0000);
        assert_eq!(FI_AV_USER_ID, 1 << 41);
        assert_eq!(FI_SHARED_AV, 0x20_0000_0000_0000);
        assert_eq!(FI_AUTH_KEY, FI_SOURCE);
        assert_eq!(FI_SYNC_ERR, 0x0400_0000_0000_0000);
        assert_eq!(FI_SYMMETRIC, 0x0800_0000_0000_0000);
        assert_eq!(FI_ADDR_NOTAVAIL, u64::MAX);
    }

    #[test]
    fn rx_addr_puts_the_context_in_the_top_bits() {
        assert_eq!(fi_rx_addr(5, 3, 4), (3u64 << 60) | 5);
        assert_eq!(fi_rx_addr(5, 3, 0), 5);
        assert_eq!(fi_rx_addr(0, 1, 64), 1);
        assert_eq!(fi_rx_index(fi_rx_addr(5, 3, 4), 4), 3);
        assert_eq!(fi_addr_strip_rx(fi_rx_addr(5, 15, 4), 4), 5);
        assert_eq!(fi_addr_strip_rx(7, 0), 7);
        assert_eq!(fi_group_addr(9, 0xabc), (0xabcu64 << 32) | 9);
    }

    #[test]
    fn group_and_receive_context_share_the_high_word() {
        // 4 receive-context bits on top, the group below them, the index in bits 0-31.
        let a = fi_rx_addr(fi_group_addr(9, 0x0ABC_DEF1), 5, 4);
        assert_eq!(fi_group_id(a, 4), 0x0ABC_DEF1);
        assert_eq!(fi_rx_index(a, 4), 5);
        assert_eq!(fi_addr_index(a, 4, true), 9);
        // Without peer groups the high bits are index bits, as before.
        assert_eq!(fi_addr_index(fi_group_addr(9, 1), 0, false), (1 << 32) | 9);
        assert_eq!(fi_addr_index(fi_group_addr(9, 1), 0, true), 9);
    }

    #[test]
    fn av_type_names() {
        assert_eq!(AvType::Unspec.name(), "FI_AV_UNSPEC");
        assert_eq!(AvType::Map.name(), "FI_AV_MAP");
        assert_eq!(AvType::Table.name(), "FI_AV_TABLE");
    }

    #[test]
    fn av_type_raw_values() {
        for t in [AvType::Unspec, AvType::Map, AvType::Table] {
            assert_eq!(AvType::from_raw(t.to_raw()), Some(t));
        }
        assert_eq!(AvType::Table.to_raw(), 2);
        assert_eq!(AvType::from_raw(3), None);
    }

    #[test]
    fn names_of_flags() {
        assert_eq!(flag_names(FI_MORE | FI_SYNC_ERR), "FI_MORE|FI_SYNC_ERR");
        assert_eq!(flag_names(FI_MORE | 4), "FI_MORE|0x4");
        assert_eq!(flag_names(0), "0x0");
    }
}
