//! # uet-av — libfabric address vectors whose entries live in the NIC
//!
//! The host side of `fi_av(3)` for the uet-nic UET NIC. An [`AddressVector`] keeps a mirror of
//! every entry on the host and pushes the same entries into one NIC AV table through the
//! [`NicAvTable`] trait, which the driver implements with admin commands (AV_WRITE,
//! AV_INVALIDATE, AV_READ). The datapath names peers by `fi_addr_t` and the NIC translates it;
//! the mirror answers `fi_av_lookup`/`fi_av_straddr`, dumps and verification, and is what the
//! NIC table is rebuilt from.
//!
//! | module | contents |
//! |---|---|
//! | [`errno`] | fabric errno values ([`FiErrno`]) and the error type [`FiError`] |
//! | [`flags`] | libfabric flag bits, [`FiAddr`], [`fi_rx_addr`], [`fi_group_addr`], [`AvType`] |
//! | [`nic`] | the [`NicAvTable`] trait (with asynchronous [`PendingWrite`]s), [`NicError`], and the in-memory [`MemoryNicTable`] |
//! | [`event`] | the `FI_EVENT` seam: [`AvEventSink`] (an event queue), [`AvProgress`], [`AvEvent`] |
//! | [`index_alloc`] | lowest-free index allocation in O(log64 n) |
//! | [`av`] | [`AddressVector`]: open, insert (binary, `FI_ADDR_STR`, insertsvc, insertsym, `FI_SYNC_ERR`), user ids, auth keys ([`av::auth_keys`]), remove, lookup, straddr, verification |
//! | [`addr_str`] | the string form of UET addresses: `FI_ADDR_STR`, node and service syntax, symmetric ranges |
//! | [`av_set`] | [`AvSet`]: fi_av_set(3) |
//! | [`domain`] | [`DomainAttr`]: what an AV is checked against in the domain it is opened in (type, capabilities, context limits) |
//! | [`named`] | [`NamedAv`]: a named AV shared by the processes of a node, its table in a shared-memory segment ([`named::segment`]) |
//!
//! Semantics are `FI_AV_TABLE` throughout; where fi_av(3) leaves a choice, [`av`] (and for
//! named AVs [`named`]) documents the one made.
//!
//! The crate denies `unsafe` code except in [`named::segment`], which maps and locks the
//! shared-memory segment of a named AV (and, in a forked child, gives up its share of it).
//!
//! ```
//! use uet_av::{AddressVector, AvAttr, AvLimits, MemoryNicTable, FI_MORE};
//! use uet_fwif::address::{caps, AddressingMode};
//! use uet_fwif::UetAddress;
//!
//! let limits = AvLimits::new(1 << 20, 8);
//! let attr = AvAttr { count: 64, job_id: 0x42, ..AvAttr::default() };
//! let size = attr.resolve(&limits)?.count as u32;
//! let mut av = AddressVector::open(MemoryNicTable::new(size), attr, limits)?;
//!
//! let peer = UetAddress {
//!     caps: caps::HPC,
//!     mode: AddressingMode::Relative,
//!     max_msg_mtu: false,
//!     pid_on_fep: 7,
//!     fabric_addr: std::net::Ipv4Addr::new(10, 0, 0, 2).into(),
//!     ri_start: 1,
//!     ri_count: 4,
//!     initiator: 2,
//! };
//! let bytes = peer.to_bytes()?;
//! let mut fi_addr = [0u64; 1];
//! assert_eq!(av.insert(&bytes, 1, Some(&mut fi_addr), 0)?, 1);
//! assert_eq!(fi_addr[0], 0);
//!
//! let mut out = [0u8; 32];
//! let mut len = out.len();
//! av.lookup(fi_addr[0], &mut out, &mut len)?;
//! assert_eq!(out, bytes);
//! assert!(av.verify_nic()?.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod addr_str;
pub mod av;
pub mod av_set;
pub mod domain;
pub mod errno;
pub mod event;
pub mod flags;
pub mod index_alloc;
pub mod mirror;
pub mod named;
pub mod nic;

pub use addr_str::{
    system_resolver, AddrStr, Resolver, Service, SymRange, ADDR_STR_MAX, ADDR_STR_SCHEME,
};
pub use av::{
    address_string, av_type_from_c, is_auth_key_addr, rx_ctx_bits_from_c, straddr, AddrFormat,
    AddressVector, AuthKeyInfo, AuthKeyMismatch, AvAttr, AvCloseError, AvLimits, AvMismatch,
    AvName, CloseError, ADDR_LEN, AUTH_KEY_ADDR_BASE, AUTH_KEY_MAX_GROUP_ID,
    AUTH_KEY_MAX_RX_CTX_BITS, AV_NAME_MAX, DEFAULT_AV_COUNT, MAX_WRITES_IN_FLIGHT,
};
pub use av_set::{is_av_set_addr, AvSet, AvSetAttr, AV_SET_ADDR_BASE, AV_SET_FLAGS};
pub use domain::{DomainAttr, AV_DOMAIN_CAPS};
pub use errno::{FiErrno, FiError};
pub use event::{next_fid, AvEvent, AvEventSink, AvProgress};
pub use flags::{
    fi_addr_index, fi_addr_strip_rx, fi_group_addr, fi_group_id, fi_rx_addr, fi_rx_index, AvType,
    FiAddr, FI_ADDR_NOTAVAIL, FI_ADDR_UNSPEC, FI_ALLGATHER_SET, FI_ALLREDUCE_SET, FI_ALLTOALL_SET,
    FI_AUTH_KEY, FI_AV_AUTH_KEY, FI_AV_USER_ID, FI_BARRIER_SET, FI_BROADCAST_SET, FI_EVENT,
    FI_GATHER_SET, FI_MORE, FI_READ, FI_REDUCE_SCATTER_SET, FI_REDUCE_SET, FI_SCATTER_SET,
    FI_SHARED_AV, FI_SYMMETRIC, FI_SYNC_ERR, FI_UNIVERSE,
};
pub use index_alloc::IndexAllocator;
pub use named::{AvGuard, AvSync, NamedAv, NamedAvCloseError, NicGuard};
pub use nic::{
    CompletedWrite, Fault, MemoryNicTable, NicAvTable, NicCounters, NicError, NicOp, PendingWrite,
};
pub use uet_fwif::auth_key::{job_id_from_auth_key, job_id_to_auth_key, AUTH_KEY_BYTES};
