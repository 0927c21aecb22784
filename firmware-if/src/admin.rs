//! The admin queue pair.
//!
//! The driver places 64-byte [`AdminCommand`]s in the submission ring (base `ADMIN_SQ_BASE`),
//! then writes the new tail to `ADMIN_SQ_DOORBELL`. The device executes them in order and
//! writes one 16-byte [`AdminCompletion`] per command to the completion ring (base
//! `ADMIN_CQ_BASE`), phase bit last (see [`crate::ring`]). The driver matches completions to
//! commands by `command_id`.
//!
//! ## Command layout
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0 | `opcode` | [`Opcode`] |
//! | 1 | `flags` | reserved, 0 |
//! | 2–3 | `command_id` | echoed in the completion |
//! | 4–7 | `handle` | the object the command acts on (AV or endpoint handle), opcode-specific |
//! | 8–63 | `body` | opcode-specific, one of the `*Body` types below |
//!
//! ## Opcodes
//!
//! | opcode | handle | body | result0 / result1 |
//! |---|---|---|---|
//! | `IDENTIFY` 0x01 | 0 | [`BufferBody`]: page of [`crate::identify::IdentifyData`] | — |
//! | `ENDPOINT_CREATE` 0x10 | AV handle bound for TX translation and RX source lookup | [`EndpointCreateBody`] | endpoint handle \| PIDonFEP<<16 / ri_start \| ri_count<<16 |
//! | `ENDPOINT_DESTROY` 0x11 | endpoint or context | — | — |
//! | `CONTEXT_CREATE` 0x12 | endpoint the context belongs to | [`ContextCreateBody`] | context handle / — |
//! | `RECV_CANCEL` 0x13 (since 1.14) | endpoint or context whose rings hold the receive | [`RecvCancelBody`]: the ring and the descriptor's `context` | — |
//! | `ENDPOINT_PEER` 0x14 (since 1.20) | endpoint created with [`EP_FLAG_CONNECTED`] | [`EndpointPeerBody`]: the one sender whose data it takes, or none | — |
//! | `AV_CREATE` 0x20 | 0 | [`AvCreateBody`] | AV handle |
//! | `AV_DESTROY` 0x21 | AV | — | — |
//! | `AV_WRITE` 0x22 | AV | [`BufferBody`]: `count` × [`crate::AvWriteRecord`] | entries written |
//! | `AV_INVALIDATE` 0x23 | AV | [`RangeBody`]: `count` entries from `first`, or a list of `count` u32 indices at `buf` | entries invalidated |
//! | `AV_READ` 0x24 | AV | [`RangeBody`]: `count` × [`crate::NicAvEntry`] from `first` into `buf` | entries read |
//! | `AV_WRITE_PEERS` 0x25 (since 1.13) | AV | [`AvWritePeersBody`]: `count` × 32-byte [`crate::UetAddress`] at `buf`, written to entries `first ..` | entries written |
//! | `MR_REGISTER` 0x30 | endpoint the region is bound to (a context's: its endpoint) | [`MrRegisterBody`] | MR handle / resource index (RMA space) |
//! | `MR_DEREGISTER` 0x31 | MR | [`MrDeregisterBody`]: the region's memory key | — |
//! | `COUNTERS_READ` 0x40 | endpoint | [`BufferBody`]: one [`crate::counters::EndpointCounters`] into `buf` (`len` at least its size, `count` 0) | bytes written |
//! | `AUTH_KEY_ADD` 0x50 | AV owning the slot | [`crate::auth_key::AuthKeyAddBody`] | slot |
//! | `AUTH_KEY_REMOVE` 0x51 | slot | [`crate::auth_key::AuthKeyRemoveBody`] | — |
//! | `AUTH_KEY_SOURCE` 0x52 | slot | [`crate::auth_key::AuthKeySourceBody`] | — |
//! | `AUTH_KEY_READ` 0x53 | 0 | [`RangeBody`]: `count` × [`crate::auth_key::AuthKeyEntry`] from slot `first` into `buf` | slots read |
//! | `ENDPOINT_AUTH_KEYS` 0x54 | endpoint (not a context: InvalidHandle) | [`crate::auth_key::EndpointAuthKeysBody`] | slots granted |
//!
//! The auth-key commands (since interface 1.5) are described in [`crate::auth_key`].
//!
//! ## AV_WRITE_PEERS
//!
//! AV_WRITE carries each entry whole, as the NIC stores it (72 bytes with its index), which
//! the host must compose field by field from the peer's address. AV_WRITE_PEERS carries what
//! an insert is given, the peers' UET addresses in their 32-byte form
//! ([`crate::address`]), for a run of consecutive indices: entry `first + i` becomes
//! [`crate::NicAvEntry::for_valid_peer_bytes`] of address `i` with the body's JobID, a single
//! entry with no auth key and no user id. The NIC converts them as it stores them; the host
//! hands over the addresses its mirror holds, and the command moves 32 bytes per entry instead of
//! 72. Entries with an auth key, a user id, or symmetric ranges still take AV_WRITE. Every
//! address must be one [`crate::UetAddress::bytes_are_valid`] accepts, and no index of the
//! run may hold a live member of a symmetric range (a single entry may be overwritten), else
//! InvalidField; the run must lie in the table, else IndexOutOfRange. Like AV_WRITE, it is
//! applied entirely or not at all.
//!
//! ## RECV_CANCEL
//!
//! Withdraws a receive the host posted and no message has taken (libfabric's `fi_cancel`).
//! The body names the ring (`ring`: [`RECV_CANCEL_RING_RX`] or [`RECV_CANCEL_RING_TAGGED`])
//! and the `context` the descriptor was posted with; the NIC withdraws the oldest still-posted
//! descriptor of that ring with that context:
//!
//! * **RX ring, endpoint without peer groups.** The NIC reads the ring from its head to the
//!   tail (descriptors not yet taken by a message). It does not reorder the ring: the
//!   descriptor is marked withdrawn and every later delivery skips it; one at the head is
//!   passed at once, so the head never rests on a withdrawn descriptor. A withdrawn ring
//!   entry is free again only once the NIC's head has passed it, which the host knows when
//!   every receive it posted before that entry has completed (or been withdrawn), or when its
//!   tail comes round to it.
//! * **RX ring, endpoint with peer groups; tagged RX ring.** The descriptor is removed from
//!   the posted list (the NIC reads these rings eagerly; its ring entry was free already).
//!
//! The receive then completes like any other: a `Recv` or `TaggedRecv` completion with the
//! descriptor's `context`, status [`crate::LocalStatus::Cancelled`], `len` 0, written into the
//! completion ring of the endpoint or context named by `handle`, and counted in its
//! `rx_errors`; the buffer is the host's again. The command completes Success once the
//! completion is queued (it is written before any later completion of that ring).
//!
//! Refusals change nothing:
//!
//! | condition | status |
//! |---|---|
//! | `handle` names no endpoint or context, or one that does not receive (a transmit context) | InvalidHandle |
//! | `ring` undefined, reserved bytes set, or the tagged ring of an endpoint without one | InvalidField |
//! | no descriptor with `context` is posted on the ring (never posted, already completed, or withdrawn) | [`Status::NotPosted`] |
//! | a message has taken the descriptor and is still in reassembly (the receive completes with the message, or `Cancelled` if the NIC ends the message, see `crate::datapath`, *Operations*), or it is a multi-receive buffer (`RX_FLAG_MULTI_RECV`) that a message is still arriving into, or one at all before interface 1.19 | [`Status::InProgress`] |
//! | the completion ring has no room for the completion, or no descriptor with `context` is on the posted list but the ring (tagged, or RX with peer groups) holds descriptors the NIC left unread for want of that room (read completions, then retry) | [`Status::Busy`] |
//!
//! **Multi-receive buffers** (since interface 1.19; before, every one is InProgress). A
//! multi-receive descriptor still in the ring is withdrawn as any descriptor is. The current
//! multi-receive buffer (see `crate::datapath`, *Multi-receive buffers*) is withdrawn by
//! retiring it, when no message placed in it is still arriving (else InProgress: the last
//! such message's completion releases it once it retires on its own): it takes no more
//! messages, and the next message takes the next RX descriptor. The current buffer is older
//! than any descriptor in the ring, so it is the one a context names first. Either way the
//! completion is the buffer's release: status `Cancelled`, flags `COMPLETION_FLAG_MULTI_RECV`
//! \| `COMPLETION_FLAG_BUFFER_RELEASED` \| `COMPLETION_FLAG_NO_MESSAGE`, `len` 0,
//! `buf_offset` the buffer's next free offset (0 for one never read); the messages placed in
//! it before are the host's already. Like any release it counts in no counter.
//!
//! ## Endpoint kinds
//!
//! [`EndpointCreateBody::flags`] selects how the endpoint is reached and what it delivers:
//!
//! | flags | endpoint | libfabric |
//! |---|---|---|
//! | none | reliable (RUD): messages up to `CAP_MAX_MSG`, tagged messages, RMA | `FI_EP_RDM`, and `FI_EP_MSG` once connected (the host keeps the connection) |
//! | [`EP_FLAG_DGRAM`] | unreliable (UUD): single-packet SEND and TAGGED_SEND of at most one MTU, no PDS ACK, no RMA | `FI_EP_DGRAM` |
//! | [`EP_FLAG_PASSIVE`] | listener: its own RX ring is its control channel (resource index 0); every other request is refused RC_BAD_INDEX | passive endpoint (`fi_passive_ep`) |
//! | [`EP_FLAG_CONNECTED`] (since 1.20) | reliable, and takes data from one peer only (*Connected endpoints*) | `FI_EP_MSG` |
//!
//! [`EP_FLAG_ABSOLUTE`] combines with any of them (see `uet_fwif::datapath`, *Demultiplexing*).
//! [`EP_FLAG_CONNECTED`] combines with neither [`EP_FLAG_DGRAM`] nor [`EP_FLAG_PASSIVE`]
//! (InvalidField), and before interface 1.20 is an undefined bit (InvalidField).
//!
//! ## Connected endpoints (since interface 1.20)
//!
//! fi_endpoint(3) and fi_cm(3) have a connected endpoint communicate with its peer only. The
//! host keeps the connection; the NIC keeps who the peer is, so that nobody else's data
//! lands in the endpoint's buffers or memory regions. An endpoint created with
//! [`EP_FLAG_CONNECTED`] has no peer: it refuses every SEND, TAGGED_SEND, WRITE and READ
//! request, except a SEND to its control channel (resource index 0), with RC_PERM_VIOLATION
//! (libfabric `FI_EACCES` at the sender), counted in `RX_PERM_VIOLATION` and the endpoint's
//! `rejected[RC_PERM_VIOLATION]`. ENDPOINT_PEER names its peer: from then on it takes those
//! requests from that sender, and still refuses everyone else's.
//!
//! A request names its sender by the source Fabric Address of its packet, the JobID and the
//! Initiator ID its SES header carries (the sender's PIDonFEP does not travel), so the peer
//! is that triple: [`EndpointPeerBody`] carries the peer's Fabric Address (its UET address's),
//! the JobID its requests carry (the JobID of the entry the peer's AV holds for this
//! endpoint: this endpoint's own, or a JobID it accepts through a granted auth key) and its
//! Initiator ID (its UET address's). Since interface 1.11 no two live endpoints of one JobID
//! on a function share an initiator id, so the triple names one endpoint.
//!
//! The check is made where a request becomes a new message (the first of its packets to
//! arrive) and on every RMA packet: the packets of a message the endpoint took before its
//! peer changed still complete it. ENDPOINT_PEER changes nothing already received: messages
//! in receive buffers or on the unexpected list stay. With [`ENDPOINT_PEER_NONE`] it takes the
//! peer away, and the endpoint refuses all data again. Control-channel traffic (connection
//! requests and answers, from anyone) is never checked.
//!
//! | condition | status |
//! |---|---|
//! | before interface 1.20 | InvalidOpcode |
//! | undefined flags, reserved bytes set, [`ENDPOINT_PEER_NONE`] with any other field set, JobID wider than 24 bits, an IPv4 address with bytes 4–15 set | InvalidField |
//! | `handle` names no endpoint, a context, or an endpoint created without [`EP_FLAG_CONNECTED`] | InvalidHandle |
//!
//! ## Contexts
//!
//! An endpoint's rings given to ENDPOINT_CREATE are its context 0. CONTEXT_CREATE adds a
//! context: a set of rings of its own (TX, RX, optional tagged RX, completion) with its own
//! handle, which is the index its doorbells carry (`QueueDoorbell.endpoint`). A context shares
//! the endpoint's PIDonFEP, resource-index range, JobID, initiator ID, addressing mode and AV;
//! it has its own completion ring, counters and message state. Its `role`:
//!
//! | role | context | constraint |
//! |---|---|---|
//! | [`CTX_ROLE_TX`] | transmit context `index` of a scalable endpoint | `1 <= index < tx_ctx_cnt` |
//! | [`CTX_ROLE_RX`] | receive context `index`: serves resource index `ri_start + index` in the SEND and TAGGED spaces | `1 <= index < rx_ctx_cnt` |
//! | TX \| RX | both | both |
//! | [`CTX_ROLE_CONTROL`] (alone, `index` 0) | the endpoint's control channel: SEND requests with resource index 0 are delivered to its RX ring; its TX ring sends control messages | at most one per endpoint; not on a passive endpoint (its own rings are the channel) |
//!
//! A ring the role does not use must still be programmed (the smallest ring will do); the NIC
//! never reads the RX ring of a context without RX or CONTROL, and ignores (and counts) TX
//! doorbells of a context without TX or CONTROL. Each `(endpoint, role, index)` exists once.
//! ENDPOINT_DESTROY of a context destroys only it; ENDPOINT_DESTROY of an endpoint whose
//! contexts still exist completes [`Status::Busy`]. Contexts count against
//! `CAP_EP.max_endpoints` (they take endpoint-table entries) but never take a PIDonFEP or
//! resource indices.
//!
//! ## Allocation failures
//!
//! ENDPOINT_CREATE completes [`Status::NoResources`] when the endpoint table is full,
//! [`Status::PidExhausted`] when every PIDonFEP of `CAP_PID_ON_FEP` is assigned, and
//! [`Status::RiExhausted`] when no contiguous run of `ri_count` indices is free in
//! `CAP_RESOURCE_INDEX.space` (index 0, the provider control channel, is never assigned).
//! Since interface 1.11 it completes [`Status::InitiatorInUse`] when a live endpoint of the
//! same JobID on the function has the initiator id asked for: a target's FI_SOURCE tells
//! senders apart by (fabric address, JobID, initiator), so two such endpoints would be taken
//! for one.
//! ENDPOINT_DESTROY returns the PIDonFEP and the indices at once. Once it completes, the NIC
//! never touches a buffer the endpoint's descriptors named: the data of a READ response that
//! arrives later is dropped, so the host may reuse or unmap those buffers at once.
//!
//! ## Memory regions
//!
//! MR_REGISTER makes `[iova, iova + len)` of host memory reachable by remote WRITE and/or READ
//! requests (`access`: [`MR_ACCESS_REMOTE_READ`], [`MR_ACCESS_REMOTE_WRITE`]) that carry
//! `key` and name `resource_index` in the RMA space of the endpoint (see
//! [`crate::datapath`]). `resource_index` 0 lets the NIC assign the endpoint's first index;
//! any other value must lie inside the endpoint's range. Memory keys are unique on the NIC
//! (the libfabric domain): registering a key in use completes [`Status::KeyExists`]. The whole
//! range must be mapped for DMA when the region is registered, with the device let write it
//! if the region grants remote write and read it if it grants remote read; otherwise the
//! command completes [`Status::DmaFault`]. MR handles are not reused
//! before 2^32 registrations, and MR_DEREGISTER must name the region's key as well as its
//! handle, so a stale handle never removes another region.
//!
//! MR_DEREGISTER while RMA requests to the region are in flight: the region is removed when
//! the command completes. Packets already accepted stay written or read; every packet that
//! arrives afterwards — including later packets of a multi-packet WRITE or later READ
//! requests of a segmented READ — is answered RC_PERM_VIOLATION, so the initiator's operation
//! completes with that error and never reports success for bytes that did not land. That
//! holds when a region registered with the same key has taken the removed one's place: an
//! operation reaches only the region its first packet to arrive reached. After the
//! completion the NIC never touches the memory again, and the host may unmap it. ENDPOINT_DESTROY
//! removes the endpoint's regions.
//!
//! Every reserved field must be zero; a command that violates its layout completes with
//! [`Status::InvalidField`] and changes nothing. A batch command (AV_WRITE, AV_INVALIDATE) is
//! validated whole before any entry changes: it is applied entirely or not at all.

use crate::auth_key::{
    AuthKeyAddBody, AuthKeyRemoveBody, AuthKeySourceBody, EndpointAuthKeysBody,
    AUTH_KEY_REMOVE_CHECK_OWNER,
};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Size of one submission entry.
pub const COMMAND_BYTES: usize = 64;
/// Size of one completion entry.
pub const COMPLETION_BYTES: usize = 16;
/// Largest batch one AV_WRITE, AV_INVALIDATE or AV_READ may carry.
pub const MAX_BATCH: u32 = 1 << 16;

/// The smallest completion ring (log2) ENDPOINT_CREATE and CONTEXT_CREATE accept: 4 entries.
/// A multi-receive message that releases its buffer writes two completions at once, and a ring
/// of `n` entries holds at most `n - 1`, so a 2-entry ring could never take them.
pub const MIN_CQ_LOG2: u8 = 2;

/// Admin opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Write the IDENTIFY page.
    Identify = 0x01,
    /// Create an endpoint: the NIC assigns a PIDonFEP and a resource-index range.
    EndpointCreate = 0x10,
    /// Destroy an endpoint, releasing its PIDonFEP and resource indices, or one context.
    EndpointDestroy = 0x11,
    /// Add a context (its own rings and handle) to an endpoint.
    ContextCreate = 0x12,
    /// Withdraw a posted receive (since 1.14).
    RecvCancel = 0x13,
    /// Name the one peer a connected endpoint takes data from (since 1.20).
    EndpointPeer = 0x14,
    /// Create an AV table.
    AvCreate = 0x20,
    /// Destroy an AV table (fails while an endpoint is bound to it).
    AvDestroy = 0x21,
    /// Write a batch of AV entries.
    AvWrite = 0x22,
    /// Invalidate AV entries.
    AvInvalidate = 0x23,
    /// Read AV entries back.
    AvRead = 0x24,
    /// Write a run of AV entries from the peers' UET addresses (since 1.13).
    AvWritePeers = 0x25,
    /// Register a memory region for remote access.
    MrRegister = 0x30,
    /// Deregister a memory region.
    MrDeregister = 0x31,
    /// Read an endpoint's counters.
    CountersRead = 0x40,
    /// Put a JobID into a free auth-key slot.
    AuthKeyAdd = 0x50,
    /// Free an auth-key slot.
    AuthKeyRemove = 0x51,
    /// Set the source an auth-key slot reports.
    AuthKeySource = 0x52,
    /// Read auth-key slots back.
    AuthKeyRead = 0x53,
    /// Set the auth-key slots granted to an endpoint.
    EndpointAuthKeys = 0x54,
}

impl Opcode {
    /// Decode an opcode byte.
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x01 => Opcode::Identify,
            0x10 => Opcode::EndpointCreate,
            0x11 => Opcode::EndpointDestroy,
            0x12 => Opcode::ContextCreate,
            0x13 => Opcode::RecvCancel,
            0x14 => Opcode::EndpointPeer,
            0x20 => Opcode::AvCreate,
            0x21 => Opcode::AvDestroy,
            0x22 => Opcode::AvWrite,
            0x23 => Opcode::AvInvalidate,
            0x24 => Opcode::AvRead,
            0x25 => Opcode::AvWritePeers,
            0x30 => Opcode::MrRegister,
            0x31 => Opcode::MrDeregister,
            0x40 => Opcode::CountersRead,
            0x50 => Opcode::AuthKeyAdd,
            0x51 => Opcode::AuthKeyRemove,
            0x52 => Opcode::AuthKeySource,
            0x53 => Opcode::AuthKeyRead,
            0x54 => Opcode::EndpointAuthKeys,
            _ => return None,
        })
    }

    /// The host interface minor version that added the opcode (`uet_regs::INTERFACE_MINOR`'s
    /// table): a NIC of an older interface does not know it and answers InvalidOpcode,
    /// whatever its flags and body.
    pub const fn since_minor(self) -> u8 {
        use uet_regs::since;
        match self {
            Opcode::MrRegister | Opcode::MrDeregister | Opcode::CountersRead => {
                since::TAGGED_AND_RMA
            }
            Opcode::ContextCreate => since::ENDPOINT_KINDS,
            Opcode::AuthKeyAdd
            | Opcode::AuthKeyRemove
            | Opcode::AuthKeySource
            | Opcode::AuthKeyRead
            | Opcode::EndpointAuthKeys => since::AUTH_KEYS,
            Opcode::AvWritePeers => since::AV_WRITE_PEERS,
            Opcode::RecvCancel => since::RECV_CANCEL,
            Opcode::EndpointPeer => since::CONNECTED_PEER,
            Opcode::Identify
            | Opcode::EndpointCreate
            | Opcode::EndpointDestroy
            | Opcode::AvCreate
            | Opcode::AvDestroy
            | Opcode::AvWrite
            | Opcode::AvInvalidate
            | Opcode::AvRead => 0,
        }
    }

    /// The datasheet name.
    pub const fn name(self) -> &'static str {
        match self {
            Opcode::Identify => "IDENTIFY",
            Opcode::EndpointCreate => "ENDPOINT_CREATE",
            Opcode::EndpointDestroy => "ENDPOINT_DESTROY",
            Opcode::ContextCreate => "CONTEXT_CREATE",
            Opcode::RecvCancel => "RECV_CANCEL",
            Opcode::EndpointPeer => "ENDPOINT_PEER",
            Opcode::AvCreate => "AV_CREATE",
            Opcode::AvDestroy => "AV_DESTROY",
            Opcode::AvWrite => "AV_WRITE",
            Opcode::AvInvalidate => "AV_INVALIDATE",
            Opcode::AvRead => "AV_READ",
            Opcode::AvWritePeers => "AV_WRITE_PEERS",
            Opcode::MrRegister => "MR_REGISTER",
            Opcode::MrDeregister => "MR_DEREGISTER",
            Opcode::CountersRead => "COUNTERS_READ",
            Opcode::AuthKeyAdd => "AUTH_KEY_ADD",
            Opcode::AuthKeyRemove => "AUTH_KEY_REMOVE",
            Opcode::AuthKeySource => "AUTH_KEY_SOURCE",
            Opcode::AuthKeyRead => "AUTH_KEY_READ",
            Opcode::EndpointAuthKeys => "ENDPOINT_AUTH_KEYS",
        }
    }
}

/// Completion status of an admin command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u16)]
pub enum Status {
    /// The command succeeded.
    #[error("success")]
    Success = 0x00,
    /// The opcode is not one the firmware implements.
    #[error("invalid opcode")]
    InvalidOpcode = 0x01,
    /// A field is out of range or a reserved field is not zero.
    #[error("invalid field")]
    InvalidField = 0x02,
    /// The handle names no object of the right kind.
    #[error("invalid handle")]
    InvalidHandle = 0x03,
    /// A table or allocator of the NIC is exhausted.
    #[error("no resources")]
    NoResources = 0x04,
    /// An AV index lies outside the table.
    #[error("index out of range")]
    IndexOutOfRange = 0x05,
    /// A buffer the command names lies outside memory mapped for DMA.
    #[error("DMA fault")]
    DmaFault = 0x06,
    /// The object is in use (an AV bound to an endpoint).
    #[error("busy")]
    Busy = 0x07,
    /// The device failed internally.
    #[error("internal device error")]
    Internal = 0x08,
    /// The memory key is already registered on the NIC.
    #[error("memory key in use")]
    KeyExists = 0x09,
    /// Every PIDonFEP of `CAP_PID_ON_FEP` is assigned (since interface 1.3).
    #[error("no free PIDonFEP: every value of CAP_PID_ON_FEP is assigned")]
    PidExhausted = 0x0A,
    /// No contiguous run of the requested resource indices is free in
    /// `CAP_RESOURCE_INDEX.space` (since interface 1.3).
    #[error("no free resource-index range of the requested size in CAP_RESOURCE_INDEX")]
    RiExhausted = 0x0B,
    /// A live endpoint of the same JobID on the function already has the initiator id
    /// ENDPOINT_CREATE asks for (since interface 1.11).
    #[error("initiator id in use by another endpoint of the same JobID")]
    InitiatorInUse = 0x0C,
    /// RECV_CANCEL: no receive with the context is posted on the ring: never posted, already
    /// completed, or withdrawn (since interface 1.14).
    #[error("no receive with that context is posted")]
    NotPosted = 0x0D,
    /// RECV_CANCEL: a message has taken the receive and is still arriving, or it is a
    /// multi-receive buffer a message is still arriving into (any multi-receive buffer before
    /// interface 1.19; since interface 1.14).
    #[error("the receive is in use by a message")]
    InProgress = 0x0E,
}

impl Status {
    /// Decode a status word; unknown values decode as [`Status::Internal`] so a newer device's
    /// status is never mistaken for success.
    pub const fn from_u16(v: u16) -> Self {
        match v {
            0x00 => Status::Success,
            0x01 => Status::InvalidOpcode,
            0x02 => Status::InvalidField,
            0x03 => Status::InvalidHandle,
            0x04 => Status::NoResources,
            0x05 => Status::IndexOutOfRange,
            0x06 => Status::DmaFault,
            0x07 => Status::Busy,
            0x09 => Status::KeyExists,
            0x0A => Status::PidExhausted,
            0x0B => Status::RiExhausted,
            0x0C => Status::InitiatorInUse,
            0x0D => Status::NotPosted,
            0x0E => Status::InProgress,
            _ => Status::Internal,
        }
    }
}

/// A submission entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct AdminCommand {
    /// [`Opcode`] byte.
    pub opcode: u8,
    /// Reserved, zero.
    pub flags: u8,
    /// Echoed in the completion.
    pub command_id: U16,
    /// Object handle.
    pub handle: U32,
    /// Opcode-specific body.
    pub body: [u8; 56],
}

const _: () = assert!(core::mem::size_of::<AdminCommand>() == COMMAND_BYTES);

/// A completion entry.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct AdminCompletion {
    /// First result word (see the opcode table).
    pub result0: U32,
    /// Second result word.
    pub result1: U32,
    /// The device's SQ head after consuming this command.
    pub sq_head: U16,
    /// The command's `command_id`.
    pub command_id: U16,
    /// [`Status`] word.
    pub status: U16,
    /// Bit 0: phase. The device writes this word last.
    pub phase: U16,
}

const _: () = assert!(core::mem::size_of::<AdminCompletion>() == COMPLETION_BYTES);

/// Byte offset of [`AdminCompletion::phase`], the word the device writes last.
pub const COMPLETION_PHASE_OFFSET: usize = 14;

/// Body of commands that pass one DMA buffer: IDENTIFY, AV_WRITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct BufferBody {
    /// IOVA of the buffer.
    pub buf: U64,
    /// Buffer length in bytes.
    pub len: U32,
    /// Number of records (AV_WRITE) or 0.
    pub count: U32,
    /// Reserved, zero.
    pub reserved: [u8; 40],
}

/// Body of AV_INVALIDATE and AV_READ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct RangeBody {
    /// IOVA of the buffer: AV_READ's destination, AV_INVALIDATE's index list (0 for a range).
    pub buf: U64,
    /// Buffer length in bytes.
    pub len: U32,
    /// First index of the range.
    pub first: U32,
    /// Number of entries.
    pub count: U32,
    /// Reserved, zero.
    pub reserved: [u8; 36],
}

/// Body of AV_WRITE_PEERS (see the module documentation, *AV_WRITE_PEERS*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct AvWritePeersBody {
    /// IOVA of the addresses, `count` × [`AV_WRITE_PEERS_ADDRESS_BYTES`].
    pub buf: U64,
    /// Buffer length in bytes, at least `count` × [`AV_WRITE_PEERS_ADDRESS_BYTES`].
    pub len: U32,
    /// Table index of the first address.
    pub first: U32,
    /// Number of addresses, 1 to [`MAX_BATCH`].
    pub count: U32,
    /// JobID of requests to these peers, within 24 bits.
    pub job_id: U32,
    /// Reserved, zero.
    pub reserved: [u8; 32],
}

/// Bytes of one address of AV_WRITE_PEERS: a UET address ([`crate::address::ADDRESS_BYTES`]).
pub const AV_WRITE_PEERS_ADDRESS_BYTES: usize = crate::address::ADDRESS_BYTES;

/// [`RecvCancelBody::ring`]: the RX ring (untagged receives).
pub const RECV_CANCEL_RING_RX: u8 = 1;
/// [`RecvCancelBody::ring`]: the tagged RX ring.
pub const RECV_CANCEL_RING_TAGGED: u8 = 2;

/// Body of RECV_CANCEL (see the module documentation, *RECV_CANCEL*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct RecvCancelBody {
    /// The `context` the descriptor was posted with.
    pub context: U64,
    /// [`RECV_CANCEL_RING_RX`] or [`RECV_CANCEL_RING_TAGGED`].
    pub ring: u8,
    /// Reserved, zero.
    pub reserved: [u8; 47],
}

/// Body of AV_CREATE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct AvCreateBody {
    /// Number of entries (at most `CAP_AV_ENTRIES`).
    pub capacity: U32,
    /// Top bits of an `fi_addr_t` that select the peer's receive context (`fi_rx_addr`).
    pub rx_ctx_bits: u8,
    /// Reserved, zero.
    pub reserved0: [u8; 3],
    /// Peer groups (since interface 1.7): the largest group id the table accepts in a
    /// destination `fi_addr_t`, at most `CAP_PEER_GROUPS.max_group_id`. 0: the table has no
    /// peer groups and decodes `fi_addr_t` values as before 1.7. Otherwise the group id sits in
    /// bits 32 to `63 - rx_ctx_bits` and the table index in bits 0–31; the bits that number
    /// `max_group_id` plus `rx_ctx_bits` must not exceed 32 (else InvalidField). See
    /// [`crate::datapath`], *Peer groups*.
    pub max_group_id: U32,
    /// Reserved, zero.
    pub reserved: [u8; 44],
}

impl AvCreateBody {
    /// Bits of the group field an AV created with `max_group_id` needs: the bits that number
    /// `max_group_id` (0 for an AV without peer groups).
    pub const fn group_bits(max_group_id: u32) -> u32 {
        32 - max_group_id.leading_zeros()
    }

    /// Whether `max_group_id` and `rx_ctx_bits` fit together in the top 32 bits of an
    /// `fi_addr_t` (always true without peer groups).
    pub const fn groups_fit(max_group_id: u32, rx_ctx_bits: u8) -> bool {
        max_group_id == 0 || Self::group_bits(max_group_id) + rx_ctx_bits as u32 <= 32
    }
}

/// Bit of [`EndpointCreateBody::flags`]: the endpoint uses absolute addressing.
pub const EP_FLAG_ABSOLUTE: u8 = 1 << 0;
/// Bit of [`EndpointCreateBody::flags`]: unreliable datagram endpoint (UUD delivery,
/// `FI_EP_DGRAM`; since interface 1.3).
pub const EP_FLAG_DGRAM: u8 = 1 << 1;
/// Bit of [`EndpointCreateBody::flags`]: passive endpoint; its rings are its control channel
/// (since interface 1.3). Not with [`EP_FLAG_DGRAM`].
pub const EP_FLAG_PASSIVE: u8 = 1 << 2;
/// Bit of [`EndpointCreateBody::flags`]: connected endpoint; it takes data only from the
/// peer ENDPOINT_PEER names, none before (since interface 1.20; see *Connected endpoints*).
/// Not with [`EP_FLAG_DGRAM`] or [`EP_FLAG_PASSIVE`].
pub const EP_FLAG_CONNECTED: u8 = 1 << 3;
/// Every defined `EP_FLAG_*` bit.
pub const EP_FLAGS_DEFINED: u8 =
    EP_FLAG_ABSOLUTE | EP_FLAG_DGRAM | EP_FLAG_PASSIVE | EP_FLAG_CONNECTED;

/// [`EndpointPeerBody::flags`]: the peer's Fabric Address is IPv6 (else IPv4, in bytes 0–3).
pub const ENDPOINT_PEER_IPV6: u8 = 1 << 0;
/// [`EndpointPeerBody::flags`]: take the peer away; the endpoint refuses all data again. Every
/// other field zero.
pub const ENDPOINT_PEER_NONE: u8 = 1 << 1;

/// Body of ENDPOINT_PEER (since interface 1.20; see *Connected endpoints*).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct EndpointPeerBody {
    /// The peer's Fabric Address: IPv6, or IPv4 in bytes 0–3 and zeros.
    pub fabric_addr: [u8; 16],
    /// The JobID the peer's requests carry, within 24 bits.
    pub job_id: U32,
    /// The peer's Initiator ID.
    pub initiator: U32,
    /// `ENDPOINT_PEER_*`.
    pub flags: u8,
    /// Reserved, zero.
    pub reserved: [u8; 31],
}

impl EndpointPeerBody {
    /// The body naming the sender at `fabric_addr` with `job_id` and `initiator`.
    pub fn peer(fabric_addr: core::net::IpAddr, job_id: u32, initiator: u32) -> Self {
        let mut b = EndpointPeerBody {
            job_id: U32::new(job_id),
            initiator: U32::new(initiator),
            ..Default::default()
        };
        match fabric_addr {
            core::net::IpAddr::V4(a) => b.fabric_addr[..4].copy_from_slice(&a.octets()),
            core::net::IpAddr::V6(a) => {
                b.fabric_addr = a.octets();
                b.flags = ENDPOINT_PEER_IPV6;
            }
        }
        b
    }

    /// The body that takes the peer away.
    pub fn none() -> Self {
        EndpointPeerBody {
            flags: ENDPOINT_PEER_NONE,
            ..Default::default()
        }
    }

    /// The peer the body names: (Fabric Address, JobID, initiator); `None` for
    /// [`ENDPOINT_PEER_NONE`]. Only of a body [`AdminCommand::decode`] accepted.
    pub fn named(&self) -> Option<(core::net::IpAddr, u32, u32)> {
        if self.flags & ENDPOINT_PEER_NONE != 0 {
            return None;
        }
        let ip = if self.flags & ENDPOINT_PEER_IPV6 != 0 {
            core::net::IpAddr::V6(core::net::Ipv6Addr::from(self.fabric_addr))
        } else {
            let a = &self.fabric_addr;
            core::net::IpAddr::V4(core::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        };
        Some((ip, self.job_id.get(), self.initiator.get()))
    }
}

/// [`ContextCreateBody::role`]: a transmit context.
pub const CTX_ROLE_TX: u8 = 1 << 0;
/// [`ContextCreateBody::role`]: a receive context.
pub const CTX_ROLE_RX: u8 = 1 << 1;
/// [`ContextCreateBody::role`]: the endpoint's control channel (resource index 0).
pub const CTX_ROLE_CONTROL: u8 = 1 << 2;

/// Body of ENDPOINT_CREATE.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct EndpointCreateBody {
    /// IOVA of the TX ring ([`crate::TxDescriptor`] entries).
    pub tx_ring: U64,
    /// IOVA of the RX ring ([`crate::RxDescriptor`] entries).
    pub rx_ring: U64,
    /// IOVA of the completion ring ([`crate::Completion`] entries).
    pub cq_ring: U64,
    /// JobID of the endpoint (24 bits): stamped on what it receives' checks.
    pub job_id: U32,
    /// Initiator ID the endpoint's requests carry.
    pub initiator: U32,
    /// Resource indices requested.
    pub ri_count: U16,
    /// log2 of the TX ring size.
    pub tx_log2: u8,
    /// log2 of the RX ring size.
    pub rx_log2: u8,
    /// log2 of the completion ring size, at least [`MIN_CQ_LOG2`].
    pub cq_log2: u8,
    /// `EP_FLAG_*`.
    pub flags: u8,
    /// log2 of the tagged RX ring size; 0: the endpoint has no tagged RX ring (its TAGGED
    /// resource-index space is empty).
    pub trx_log2: u8,
    /// Receive contexts (since interface 1.3): 0 for a regular endpoint, whose RX rings serve
    /// every index of its range; `n` in 1..=`CAP_EP.max_rx_ctx` for a scalable endpoint whose
    /// receive context `k < n` serves resource index `ri_start + k` (needs `ri_count >= n`).
    pub rx_ctx_cnt: u8,
    /// IOVA of the tagged RX ring ([`crate::datapath::TaggedRxDescriptor`] entries); zero
    /// when `trx_log2` is 0.
    pub trx_ring: U64,
    /// Transmit contexts (since interface 1.3): 0 or 1 for one, up to `CAP_EP.max_tx_ctx`.
    pub tx_ctx_cnt: u8,
    /// Reserved, zero.
    pub reserved: [u8; 7],
}

/// Body of CONTEXT_CREATE (since interface 1.3).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct ContextCreateBody {
    /// IOVA of the TX ring.
    pub tx_ring: U64,
    /// IOVA of the RX ring.
    pub rx_ring: U64,
    /// IOVA of the completion ring.
    pub cq_ring: U64,
    /// IOVA of the tagged RX ring; zero when `trx_log2` is 0.
    pub trx_ring: U64,
    /// log2 of the TX ring size.
    pub tx_log2: u8,
    /// log2 of the RX ring size.
    pub rx_log2: u8,
    /// log2 of the completion ring size, at least [`MIN_CQ_LOG2`].
    pub cq_log2: u8,
    /// log2 of the tagged RX ring size; 0: none.
    pub trx_log2: u8,
    /// Context index (see the role table).
    pub index: u8,
    /// `CTX_ROLE_*`.
    pub role: u8,
    /// Reserved, zero.
    pub reserved: [u8; 18],
}

/// [`MrRegisterBody::access`]: remote READ requests may read the region (`FI_REMOTE_READ`).
pub const MR_ACCESS_REMOTE_READ: u8 = 1 << 0;
/// [`MrRegisterBody::access`]: remote WRITE requests may write the region (`FI_REMOTE_WRITE`).
pub const MR_ACCESS_REMOTE_WRITE: u8 = 1 << 1;

/// Body of MR_REGISTER. The region belongs to the endpoint's job: only requests carrying the
/// endpoint's own JobID reach it, not those of a JobID it accepts through an auth-key grant.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct MrRegisterBody {
    /// IOVA of the region's first byte.
    pub iova: U64,
    /// Length in bytes (at least 1).
    pub len: U64,
    /// Memory key remote requests carry (SES bytes 24–31).
    pub key: U64,
    /// `MR_ACCESS_*`, at least one.
    pub access: u8,
    /// Reserved, zero.
    pub reserved0: u8,
    /// Resource index in the endpoint's RMA space; 0: the NIC assigns the endpoint's first.
    pub resource_index: U16,
    /// Reserved, zero.
    pub reserved: [u8; 28],
}

/// Body of MR_DEREGISTER.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct MrDeregisterBody {
    /// The region's memory key.
    pub key: U64,
    /// Reserved, zero.
    pub reserved: [u8; 48],
}

macro_rules! body_size {
    ($($t:ty),*) => {$(const _: () = assert!(core::mem::size_of::<$t>() == 56);)*};
}
body_size!(
    BufferBody,
    RangeBody,
    AvWritePeersBody,
    RecvCancelBody,
    EndpointPeerBody,
    AvCreateBody,
    EndpointCreateBody,
    ContextCreateBody,
    MrRegisterBody,
    MrDeregisterBody,
    AuthKeyAddBody,
    AuthKeyRemoveBody,
    AuthKeySourceBody,
    EndpointAuthKeysBody
);

/// A decoded admin command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// IDENTIFY into `body.buf`.
    Identify(BufferBody),
    /// ENDPOINT_CREATE bound to AV `av`.
    EndpointCreate {
        /// AV handle.
        av: u32,
        /// Parameters.
        body: EndpointCreateBody,
    },
    /// ENDPOINT_DESTROY.
    EndpointDestroy {
        /// Endpoint handle.
        endpoint: u32,
    },
    /// CONTEXT_CREATE for endpoint `endpoint`.
    ContextCreate {
        /// Endpoint handle.
        endpoint: u32,
        /// The context's rings, index and role.
        body: ContextCreateBody,
    },
    /// RECV_CANCEL on endpoint or context `endpoint`.
    RecvCancel {
        /// Endpoint or context handle.
        endpoint: u32,
        /// The ring and the descriptor's context.
        body: RecvCancelBody,
    },
    /// ENDPOINT_PEER of endpoint `endpoint`.
    EndpointPeer {
        /// Endpoint handle.
        endpoint: u32,
        /// The peer, or none.
        body: EndpointPeerBody,
    },
    /// AV_CREATE.
    AvCreate(AvCreateBody),
    /// AV_DESTROY.
    AvDestroy {
        /// AV handle.
        av: u32,
    },
    /// AV_WRITE.
    AvWrite {
        /// AV handle.
        av: u32,
        /// Buffer of records.
        body: BufferBody,
    },
    /// AV_INVALIDATE.
    AvInvalidate {
        /// AV handle.
        av: u32,
        /// Range or list.
        body: RangeBody,
    },
    /// AV_READ.
    AvRead {
        /// AV handle.
        av: u32,
        /// Range and destination.
        body: RangeBody,
    },
    /// AV_WRITE_PEERS.
    AvWritePeers {
        /// AV handle.
        av: u32,
        /// The run and its addresses.
        body: AvWritePeersBody,
    },
    /// MR_REGISTER bound to endpoint `endpoint`.
    MrRegister {
        /// Endpoint handle.
        endpoint: u32,
        /// The region.
        body: MrRegisterBody,
    },
    /// MR_DEREGISTER.
    MrDeregister {
        /// MR handle.
        mr: u32,
        /// The region's key.
        body: MrDeregisterBody,
    },
    /// COUNTERS_READ of endpoint `endpoint`.
    CountersRead {
        /// Endpoint handle.
        endpoint: u32,
        /// Destination buffer.
        body: BufferBody,
    },
    /// AUTH_KEY_ADD into the table, owned by AV `av`.
    AuthKeyAdd {
        /// AV handle.
        av: u32,
        /// JobID and initial source.
        body: AuthKeyAddBody,
    },
    /// AUTH_KEY_REMOVE of slot `slot`.
    AuthKeyRemove {
        /// Slot.
        slot: u32,
        /// Unchecked, or the owner and JobID the slot must hold.
        body: AuthKeyRemoveBody,
    },
    /// AUTH_KEY_SOURCE of slot `slot`.
    AuthKeySource {
        /// Slot.
        slot: u32,
        /// The new source.
        body: AuthKeySourceBody,
    },
    /// AUTH_KEY_READ of `body.count` slots from `body.first`.
    AuthKeyRead(RangeBody),
    /// ENDPOINT_AUTH_KEYS of endpoint `endpoint`.
    EndpointAuthKeys {
        /// Endpoint handle.
        endpoint: u32,
        /// The granted slots.
        body: EndpointAuthKeysBody,
    },
}

fn body_of<T: IntoBytes + Immutable>(b: &T) -> [u8; 56] {
    let mut out = [0u8; 56];
    out.copy_from_slice(b.as_bytes());
    out
}

fn reserved_clear(b: &[u8]) -> Result<(), Status> {
    if b.iter().all(|&x| x == 0) {
        Ok(())
    } else {
        Err(Status::InvalidField)
    }
}

impl Command {
    /// The opcode of the command.
    pub fn opcode(&self) -> Opcode {
        match self {
            Command::Identify(_) => Opcode::Identify,
            Command::EndpointCreate { .. } => Opcode::EndpointCreate,
            Command::EndpointDestroy { .. } => Opcode::EndpointDestroy,
            Command::ContextCreate { .. } => Opcode::ContextCreate,
            Command::RecvCancel { .. } => Opcode::RecvCancel,
            Command::EndpointPeer { .. } => Opcode::EndpointPeer,
            Command::AvCreate(_) => Opcode::AvCreate,
            Command::AvDestroy { .. } => Opcode::AvDestroy,
            Command::AvWrite { .. } => Opcode::AvWrite,
            Command::AvInvalidate { .. } => Opcode::AvInvalidate,
            Command::AvRead { .. } => Opcode::AvRead,
            Command::AvWritePeers { .. } => Opcode::AvWritePeers,
            Command::MrRegister { .. } => Opcode::MrRegister,
            Command::MrDeregister { .. } => Opcode::MrDeregister,
            Command::CountersRead { .. } => Opcode::CountersRead,
            Command::AuthKeyAdd { .. } => Opcode::AuthKeyAdd,
            Command::AuthKeyRemove { .. } => Opcode::AuthKeyRemove,
            Command::AuthKeySource { .. } => Opcode::AuthKeySource,
            Command::AuthKeyRead(_) => Opcode::AuthKeyRead,
            Command::EndpointAuthKeys { .. } => Opcode::EndpointAuthKeys,
        }
    }

    /// Encode as a submission entry with `command_id`.
    pub fn encode(&self, command_id: u16) -> AdminCommand {
        let (handle, body) = match self {
            Command::Identify(b) => (0, body_of(b)),
            Command::EndpointCreate { av, body } => (*av, body_of(body)),
            Command::EndpointDestroy { endpoint } => (*endpoint, [0; 56]),
            Command::ContextCreate { endpoint, body } => (*endpoint, body_of(body)),
            Command::RecvCancel { endpoint, body } => (*endpoint, body_of(body)),
            Command::EndpointPeer { endpoint, body } => (*endpoint, body_of(body)),
            Command::AvCreate(b) => (0, body_of(b)),
            Command::AvDestroy { av } => (*av, [0; 56]),
            Command::AvWrite { av, body } => (*av, body_of(body)),
            Command::AvInvalidate { av, body } | Command::AvRead { av, body } => {
                (*av, body_of(body))
            }
            Command::AvWritePeers { av, body } => (*av, body_of(body)),
            Command::MrRegister { endpoint, body } => (*endpoint, body_of(body)),
            Command::MrDeregister { mr, body } => (*mr, body_of(body)),
            Command::CountersRead { endpoint, body } => (*endpoint, body_of(body)),
            Command::AuthKeyAdd { av, body } => (*av, body_of(body)),
            Command::AuthKeyRemove { slot, body } => (*slot, body_of(body)),
            Command::AuthKeySource { slot, body } => (*slot, body_of(body)),
            Command::AuthKeyRead(b) => (0, body_of(b)),
            Command::EndpointAuthKeys { endpoint, body } => (*endpoint, body_of(body)),
        };
        AdminCommand {
            opcode: self.opcode() as u8,
            flags: 0,
            command_id: U16::new(command_id),
            handle: U32::new(handle),
            body,
        }
    }
}

impl AdminCommand {
    /// Decode and check the layout rules every command obeys (opcode known, reserved fields
    /// zero, handle zero where the command takes none). Object-level checks (does the handle
    /// exist, is the range inside the table) are the firmware's.
    pub fn decode(&self) -> Result<Command, Status> {
        let op = Opcode::from_u8(self.opcode).ok_or(Status::InvalidOpcode)?;
        if self.flags != 0 {
            return Err(Status::InvalidField);
        }
        let handle = self.handle.get();
        let no_handle = || {
            if handle == 0 {
                Ok(())
            } else {
                Err(Status::InvalidField)
            }
        };
        let cmd = match op {
            Opcode::Identify => {
                no_handle()?;
                let b = BufferBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                if b.count.get() != 0 {
                    return Err(Status::InvalidField);
                }
                Command::Identify(b)
            }
            Opcode::EndpointCreate => {
                let b = EndpointCreateBody::read_from_bytes(&self.body)
                    .map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                if b.flags & !EP_FLAGS_DEFINED != 0
                    || b.flags & (EP_FLAG_DGRAM | EP_FLAG_PASSIVE)
                        == EP_FLAG_DGRAM | EP_FLAG_PASSIVE
                    || (b.flags & EP_FLAG_CONNECTED != 0
                        && b.flags & (EP_FLAG_DGRAM | EP_FLAG_PASSIVE) != 0)
                {
                    return Err(Status::InvalidField);
                }
                if b.trx_log2 == 0 && b.trx_ring.get() != 0 {
                    return Err(Status::InvalidField);
                }
                Command::EndpointCreate {
                    av: handle,
                    body: b,
                }
            }
            Opcode::EndpointDestroy => {
                reserved_clear(&self.body)?;
                Command::EndpointDestroy { endpoint: handle }
            }
            Opcode::ContextCreate => {
                let b =
                    ContextCreateBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let roles = CTX_ROLE_TX | CTX_ROLE_RX | CTX_ROLE_CONTROL;
                let control_ok = b.role != CTX_ROLE_CONTROL || b.index == 0;
                let mixed = b.role & CTX_ROLE_CONTROL != 0 && b.role != CTX_ROLE_CONTROL;
                if b.role == 0 || b.role & !roles != 0 || mixed || !control_ok {
                    return Err(Status::InvalidField);
                }
                if b.trx_log2 == 0 && b.trx_ring.get() != 0 {
                    return Err(Status::InvalidField);
                }
                Command::ContextCreate {
                    endpoint: handle,
                    body: b,
                }
            }
            Opcode::RecvCancel => {
                let b =
                    RecvCancelBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                if !matches!(b.ring, RECV_CANCEL_RING_RX | RECV_CANCEL_RING_TAGGED) {
                    return Err(Status::InvalidField);
                }
                Command::RecvCancel {
                    endpoint: handle,
                    body: b,
                }
            }
            Opcode::EndpointPeer => {
                let b =
                    EndpointPeerBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let none = b.flags & ENDPOINT_PEER_NONE != 0;
                let ipv4_clear = b.flags & ENDPOINT_PEER_IPV6 != 0
                    || b.fabric_addr
                        .get(4..)
                        .is_some_and(|r| r.iter().all(|&x| x == 0));
                let none_clear = !none
                    || (b.flags == ENDPOINT_PEER_NONE
                        && b.fabric_addr == [0; 16]
                        && b.job_id.get() == 0
                        && b.initiator.get() == 0);
                if b.flags & !(ENDPOINT_PEER_IPV6 | ENDPOINT_PEER_NONE) != 0
                    || !ipv4_clear
                    || !none_clear
                    || b.job_id.get() > crate::av_entry::MAX_JOB_ID
                {
                    return Err(Status::InvalidField);
                }
                Command::EndpointPeer {
                    endpoint: handle,
                    body: b,
                }
            }
            Opcode::AvCreate => {
                no_handle()?;
                let b = AvCreateBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved0)?;
                reserved_clear(&b.reserved)?;
                if !AvCreateBody::groups_fit(b.max_group_id.get(), b.rx_ctx_bits) {
                    return Err(Status::InvalidField);
                }
                Command::AvCreate(b)
            }
            Opcode::AvDestroy => {
                reserved_clear(&self.body)?;
                Command::AvDestroy { av: handle }
            }
            Opcode::AvWrite => {
                let b = BufferBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let need =
                    u64::from(b.count.get()) * core::mem::size_of::<crate::AvWriteRecord>() as u64;
                if b.count.get() == 0 || b.count.get() > MAX_BATCH || u64::from(b.len.get()) < need
                {
                    return Err(Status::InvalidField);
                }
                Command::AvWrite {
                    av: handle,
                    body: b,
                }
            }
            Opcode::AvWritePeers => {
                let b =
                    AvWritePeersBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let count = b.count.get();
                let need = u64::from(count) * AV_WRITE_PEERS_ADDRESS_BYTES as u64;
                if count == 0
                    || count > MAX_BATCH
                    || u64::from(b.len.get()) < need
                    || b.job_id.get() > crate::av_entry::MAX_JOB_ID
                {
                    return Err(Status::InvalidField);
                }
                Command::AvWritePeers {
                    av: handle,
                    body: b,
                }
            }
            Opcode::AvInvalidate | Opcode::AvRead => {
                let b = RangeBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let count = b.count.get();
                if count == 0 || count > MAX_BATCH {
                    return Err(Status::InvalidField);
                }
                let per = if op == Opcode::AvRead {
                    core::mem::size_of::<crate::NicAvEntry>() as u64
                } else {
                    4
                };
                let need = u64::from(count) * per;
                let listed = op == Opcode::AvRead || b.buf.get() != 0;
                if listed && u64::from(b.len.get()) < need {
                    return Err(Status::InvalidField);
                }
                if op == Opcode::AvInvalidate && b.buf.get() != 0 && b.first.get() != 0 {
                    return Err(Status::InvalidField);
                }
                if op == Opcode::AvRead {
                    Command::AvRead {
                        av: handle,
                        body: b,
                    }
                } else {
                    Command::AvInvalidate {
                        av: handle,
                        body: b,
                    }
                }
            }
            Opcode::MrRegister => {
                let b =
                    MrRegisterBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let access = MR_ACCESS_REMOTE_READ | MR_ACCESS_REMOTE_WRITE;
                if b.reserved0 != 0
                    || b.access == 0
                    || b.access & !access != 0
                    || b.len.get() == 0
                    || b.iova.get().checked_add(b.len.get()).is_none()
                {
                    return Err(Status::InvalidField);
                }
                Command::MrRegister {
                    endpoint: handle,
                    body: b,
                }
            }
            Opcode::MrDeregister => {
                let b =
                    MrDeregisterBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                Command::MrDeregister {
                    mr: handle,
                    body: b,
                }
            }
            Opcode::CountersRead => {
                let b = BufferBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let need = core::mem::size_of::<crate::counters::EndpointCounters>() as u64;
                if b.count.get() != 0 || u64::from(b.len.get()) < need {
                    return Err(Status::InvalidField);
                }
                Command::CountersRead {
                    endpoint: handle,
                    body: b,
                }
            }
            Opcode::AuthKeyAdd => {
                let b =
                    AuthKeyAddBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                if b.reserved0.get() != 0 || b.job_id.get() > crate::av_entry::MAX_JOB_ID {
                    return Err(Status::InvalidField);
                }
                Command::AuthKeyAdd {
                    av: handle,
                    body: b,
                }
            }
            Opcode::AuthKeyRemove => {
                let b =
                    AuthKeyRemoveBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let flags = b.flags.get();
                if flags & !AUTH_KEY_REMOVE_CHECK_OWNER != 0
                    || (flags == 0 && (b.av.get() | b.job_id.get()) != 0)
                {
                    return Err(Status::InvalidField);
                }
                Command::AuthKeyRemove {
                    slot: handle,
                    body: b,
                }
            }
            Opcode::AuthKeySource => {
                let b =
                    AuthKeySourceBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                Command::AuthKeySource {
                    slot: handle,
                    body: b,
                }
            }
            Opcode::AuthKeyRead => {
                no_handle()?;
                let b = RangeBody::read_from_bytes(&self.body).map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                let count = b.count.get();
                let need =
                    u64::from(count) * core::mem::size_of::<crate::auth_key::AuthKeyEntry>() as u64;
                if count == 0
                    || count > u32::from(crate::auth_key::MAX_AUTH_KEY_SLOTS)
                    || u64::from(b.len.get()) < need
                {
                    return Err(Status::InvalidField);
                }
                Command::AuthKeyRead(b)
            }
            Opcode::EndpointAuthKeys => {
                let b = EndpointAuthKeysBody::read_from_bytes(&self.body)
                    .map_err(|_| Status::Internal)?;
                reserved_clear(&b.reserved)?;
                Command::EndpointAuthKeys {
                    endpoint: handle,
                    body: b,
                }
            }
        };
        Ok(cmd)
    }
}

impl AdminCompletion {
    /// The phase bit.
    pub fn phase_bit(&self) -> bool {
        self.phase.get() & 1 != 0
    }

    /// The decoded status.
    pub fn status(&self) -> Status {
        Status::from_u16(self.status.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn encode_decode_round_trip() {
        let cmds = [
            Command::Identify(BufferBody {
                buf: U64::new(0x1000),
                len: U32::new(128),
                ..FromZeros::new_zeroed()
            }),
            Command::AvCreate(AvCreateBody {
                capacity: U32::new(1024),
                rx_ctx_bits: 2,
                ..FromZeros::new_zeroed()
            }),
            Command::AvCreate(AvCreateBody {
                capacity: U32::new(64),
                rx_ctx_bits: 4,
                max_group_id: U32::new(0x0FFF_FFFF),
                ..FromZeros::new_zeroed()
            }),
            Command::AvWrite {
                av: 3,
                body: BufferBody {
                    buf: U64::new(0x2000),
                    len: U32::new(72 * 4),
                    count: U32::new(4),
                    ..FromZeros::new_zeroed()
                },
            },
            Command::AvRead {
                av: 3,
                body: RangeBody {
                    buf: U64::new(0x3000),
                    len: U32::new(64),
                    first: U32::new(9),
                    count: U32::new(1),
                    ..FromZeros::new_zeroed()
                },
            },
            Command::AvWritePeers {
                av: 3,
                body: AvWritePeersBody {
                    buf: U64::new(0x3000),
                    len: U32::new(32 * 256),
                    first: U32::new(1024),
                    count: U32::new(256),
                    job_id: U32::new(0x00FF_FFFF),
                    ..FromZeros::new_zeroed()
                },
            },
            Command::EndpointDestroy { endpoint: 7 },
            Command::ContextCreate {
                endpoint: 7,
                body: ContextCreateBody {
                    tx_ring: U64::new(0x5000),
                    rx_ring: U64::new(0x6000),
                    cq_ring: U64::new(0x7000),
                    tx_log2: 2,
                    rx_log2: 2,
                    cq_log2: 3,
                    index: 3,
                    role: CTX_ROLE_RX,
                    ..FromZeros::new_zeroed()
                },
            },
            Command::MrRegister {
                endpoint: 2,
                body: MrRegisterBody {
                    iova: U64::new(0x10_0000),
                    len: U64::new(4096),
                    key: U64::new(0xC0FFEE),
                    access: MR_ACCESS_REMOTE_WRITE,
                    resource_index: U16::new(5),
                    ..FromZeros::new_zeroed()
                },
            },
            Command::MrDeregister {
                mr: 9,
                body: MrDeregisterBody {
                    key: U64::new(0xC0FFEE),
                    ..FromZeros::new_zeroed()
                },
            },
            Command::CountersRead {
                endpoint: 2,
                body: BufferBody {
                    buf: U64::new(0x4000),
                    len: U32::new(1024),
                    ..FromZeros::new_zeroed()
                },
            },
            Command::AuthKeyAdd {
                av: 1,
                body: AuthKeyAddBody {
                    job_id: U32::new(0x42),
                    source: U64::new(7),
                    ..FromZeros::new_zeroed()
                },
            },
            Command::AuthKeyRemove {
                slot: 3,
                body: AuthKeyRemoveBody::unchecked(),
            },
            Command::AuthKeyRemove {
                slot: 4,
                body: AuthKeyRemoveBody::owned_by(2, 0x42),
            },
            Command::AuthKeySource {
                slot: 3,
                body: AuthKeySourceBody {
                    source: U64::new(u64::MAX),
                    ..FromZeros::new_zeroed()
                },
            },
            Command::AuthKeyRead(RangeBody {
                buf: U64::new(0x5000),
                len: U32::new(24 * 4),
                first: U32::new(2),
                count: U32::new(4),
                ..FromZeros::new_zeroed()
            }),
            Command::EndpointAuthKeys {
                endpoint: 2,
                body: EndpointAuthKeysBody::granting([0, 5]),
            },
            Command::RecvCancel {
                endpoint: 3,
                body: RecvCancelBody {
                    context: U64::new(u64::MAX),
                    ring: RECV_CANCEL_RING_TAGGED,
                    ..FromZeros::new_zeroed()
                },
            },
        ];
        for (i, c) in cmds.iter().enumerate() {
            let e = c.encode(i as u16);
            assert_eq!(e.command_id.get(), i as u16);
            assert_eq!(e.decode().unwrap(), *c);
        }
    }

    #[test]
    fn every_opcode_is_of_an_interface_no_newer_than_the_current_one() {
        let known: Vec<Opcode> = (0..=u8::MAX).filter_map(Opcode::from_u8).collect();
        assert_eq!(known.len(), 20);
        for op in known {
            assert!(
                op.since_minor() <= uet_regs::INTERFACE_MINOR,
                "{}",
                op.name()
            );
        }
        assert_eq!(
            Opcode::AvWritePeers.since_minor(),
            uet_regs::since::AV_WRITE_PEERS
        );
        assert_eq!(Opcode::AuthKeyAdd.since_minor(), uet_regs::since::AUTH_KEYS);
        assert_eq!(
            Opcode::RecvCancel.since_minor(),
            uet_regs::since::RECV_CANCEL
        );
        assert_eq!(
            Opcode::EndpointPeer.since_minor(),
            uet_regs::since::CONNECTED_PEER
        );
    }

    #[test]
    fn endpoint_peer_names_one_sender_or_none_and_keeps_its_layout() {
        let v4 = EndpointPeerBody::peer("10.0.0.2".parse().unwrap(), 0x42, 7);
        let v6 = EndpointPeerBody::peer("fd00::2".parse().unwrap(), MAX_JOB, 9);
        for body in [v4, v6, EndpointPeerBody::none()] {
            let c = Command::EndpointPeer { endpoint: 3, body };
            assert_eq!(c.encode(1).decode(), Ok(c));
        }
        assert_eq!(v4.named(), Some(("10.0.0.2".parse().unwrap(), 0x42, 7)));
        assert_eq!(v6.named(), Some(("fd00::2".parse().unwrap(), MAX_JOB, 9)));
        assert_eq!(EndpointPeerBody::none().named(), None);
        let mut bad = Vec::new();
        let mut b = v4;
        b.fabric_addr[4] = 1;
        bad.push(b);
        let mut b = v4;
        b.job_id = U32::new(MAX_JOB + 1);
        bad.push(b);
        let mut b = v4;
        b.flags = 1 << 2;
        bad.push(b);
        let mut b = EndpointPeerBody::none();
        b.initiator = U32::new(1);
        bad.push(b);
        let mut b = EndpointPeerBody::none();
        b.flags |= ENDPOINT_PEER_IPV6;
        bad.push(b);
        let mut b = v6;
        b.reserved[30] = 1;
        bad.push(b);
        for body in bad {
            let e = Command::EndpointPeer { endpoint: 3, body }.encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField), "{body:?}");
        }
        // A connected endpoint is neither a datagram nor a passive one.
        for flags in [
            EP_FLAG_CONNECTED | EP_FLAG_DGRAM,
            EP_FLAG_CONNECTED | EP_FLAG_PASSIVE,
        ] {
            let e = Command::EndpointCreate {
                av: 0,
                body: EndpointCreateBody {
                    flags,
                    ..FromZeros::new_zeroed()
                },
            }
            .encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField));
        }
        let ok = Command::EndpointCreate {
            av: 0,
            body: EndpointCreateBody {
                flags: EP_FLAG_CONNECTED | EP_FLAG_ABSOLUTE,
                ..FromZeros::new_zeroed()
            },
        };
        assert_eq!(ok.encode(0).decode(), Ok(ok));
    }

    const MAX_JOB: u32 = crate::av_entry::MAX_JOB_ID;

    #[test]
    fn recv_cancel_names_a_known_ring_and_keeps_its_reserved_bytes_clear() {
        let good = RecvCancelBody {
            context: U64::new(7),
            ring: RECV_CANCEL_RING_RX,
            ..FromZeros::new_zeroed()
        };
        let ok = Command::RecvCancel {
            endpoint: 1,
            body: good,
        };
        assert_eq!(ok.encode(0).decode(), Ok(ok));
        for ring in [0, 3, 0xff] {
            let body = RecvCancelBody { ring, ..good };
            let e = Command::RecvCancel { endpoint: 1, body }.encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField), "ring {ring}");
        }
        let mut e = ok.encode(0);
        e.body[55] = 1;
        assert_eq!(e.decode(), Err(Status::InvalidField));
        assert_eq!(Status::from_u16(0x0D), Status::NotPosted);
        assert_eq!(Status::from_u16(0x0E), Status::InProgress);
    }

    #[test]
    fn decode_rejects_bad_commands() {
        let mut e = Command::EndpointDestroy { endpoint: 1 }.encode(0);
        e.opcode = 0x7f;
        assert_eq!(e.decode(), Err(Status::InvalidOpcode));
        let mut e = Command::EndpointDestroy { endpoint: 1 }.encode(0);
        e.body[55] = 1;
        assert_eq!(e.decode(), Err(Status::InvalidField));
        // A control context with another role or index, and an unknown role.
        for (role, index) in [
            (CTX_ROLE_CONTROL | CTX_ROLE_RX, 0),
            (CTX_ROLE_CONTROL, 1),
            (8, 1),
        ] {
            let e = Command::ContextCreate {
                endpoint: 1,
                body: ContextCreateBody {
                    role,
                    index,
                    ..FromZeros::new_zeroed()
                },
            }
            .encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField));
        }
        // A datagram endpoint cannot be passive.
        let e = Command::EndpointCreate {
            av: 0,
            body: EndpointCreateBody {
                flags: EP_FLAG_DGRAM | EP_FLAG_PASSIVE,
                ..FromZeros::new_zeroed()
            },
        }
        .encode(0);
        assert_eq!(e.decode(), Err(Status::InvalidField));
        let e = Command::AvWrite {
            av: 1,
            body: BufferBody {
                buf: U64::new(0x2000),
                len: U32::new(71),
                count: U32::new(1),
                ..FromZeros::new_zeroed()
            },
        }
        .encode(0);
        assert_eq!(e.decode(), Err(Status::InvalidField));
        // AV_WRITE_PEERS with no address, more than a batch, a buffer one byte short, a JobID
        // wider than 24 bits, or a reserved byte set.
        let peers = AvWritePeersBody {
            buf: U64::new(0x2000),
            len: U32::new(32 * 4),
            count: U32::new(4),
            ..FromZeros::new_zeroed()
        };
        let bad = [
            AvWritePeersBody {
                count: U32::new(0),
                ..peers
            },
            AvWritePeersBody {
                count: U32::new(MAX_BATCH + 1),
                len: U32::new(u32::MAX),
                ..peers
            },
            AvWritePeersBody {
                len: U32::new(32 * 4 - 1),
                ..peers
            },
            AvWritePeersBody {
                job_id: U32::new(1 << 24),
                ..peers
            },
            AvWritePeersBody {
                reserved: [
                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                    0, 0, 0, 0, 0, 1,
                ],
                ..peers
            },
        ];
        for body in bad {
            let e = Command::AvWritePeers { av: 1, body }.encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField), "{body:?}");
        }
        assert!(Command::AvWritePeers { av: 1, body: peers }
            .encode(0)
            .decode()
            .is_ok());
        // A region with no access, with undefined access bits, or empty.
        for (access, len) in [(0, 16), (4, 16), (MR_ACCESS_REMOTE_READ, 0)] {
            let e = Command::MrRegister {
                endpoint: 1,
                body: MrRegisterBody {
                    iova: U64::new(0x1000),
                    len: U64::new(len),
                    access,
                    ..FromZeros::new_zeroed()
                },
            }
            .encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField));
        }
        // AUTH_KEY_ADD with a JobID wider than 24 bits or reserved bits set; AUTH_KEY_READ of
        // no slots or into a short buffer.
        for (job, r0) in [(0x0100_0000, 0), (1, 1)] {
            let e = Command::AuthKeyAdd {
                av: 1,
                body: AuthKeyAddBody {
                    job_id: U32::new(job),
                    reserved0: U32::new(r0),
                    ..FromZeros::new_zeroed()
                },
            }
            .encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField));
        }
        for (count, len) in [(0, 0), (2, 47), (257, 24 * 257)] {
            let e = Command::AuthKeyRead(RangeBody {
                buf: U64::new(0x1000),
                len: U32::new(len),
                count: U32::new(count),
                ..FromZeros::new_zeroed()
            })
            .encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField));
        }
        // Peer groups and receive contexts that do not fit together in bits 32-63.
        for (max_group_id, rx_ctx_bits) in [(0x1_0000, 17), (u32::MAX, 1)] {
            let e = Command::AvCreate(AvCreateBody {
                capacity: U32::new(8),
                rx_ctx_bits,
                max_group_id: U32::new(max_group_id),
                ..FromZeros::new_zeroed()
            })
            .encode(0);
            assert_eq!(e.decode(), Err(Status::InvalidField));
        }
        assert!(AvCreateBody::groups_fit(0xFFFF, 16));
        assert!(AvCreateBody::groups_fit(0, 64));
        let mut e = Command::EndpointAuthKeys {
            endpoint: 1,
            body: EndpointAuthKeysBody::new_zeroed(),
        }
        .encode(0);
        e.body[40] = 1;
        assert_eq!(e.decode(), Err(Status::InvalidField));
        // AUTH_KEY_REMOVE: an undefined flag, an owner or JobID without the check flag, a
        // reserved byte.
        let remove = |body| Command::AuthKeyRemove { slot: 1, body }.encode(0);
        let mut b = AuthKeyRemoveBody::owned_by(1, 2);
        b.flags = U32::new(AUTH_KEY_REMOVE_CHECK_OWNER | 2);
        assert_eq!(remove(b).decode(), Err(Status::InvalidField));
        for (av, job_id) in [(1, 0), (0, 1)] {
            let mut b = AuthKeyRemoveBody::unchecked();
            b.av = U32::new(av);
            b.job_id = U32::new(job_id);
            assert_eq!(remove(b).decode(), Err(Status::InvalidField));
        }
        let mut e = remove(AuthKeyRemoveBody::owned_by(1, 2));
        e.body[55] = 1;
        assert_eq!(e.decode(), Err(Status::InvalidField));
        // The check may name AV 0 and JobID 0.
        let b = AuthKeyRemoveBody::owned_by(0, 0);
        assert_eq!(b.required_owner(), Some((0, 0)));
        assert_eq!(
            remove(b).decode(),
            Ok(Command::AuthKeyRemove { slot: 1, body: b })
        );
        assert_eq!(AuthKeyRemoveBody::unchecked().required_owner(), None);
        for v in 0..=u16::MAX {
            let s = Status::from_u16(v);
            if v <= 0x0E {
                assert_eq!(s as u16, v);
            } else {
                assert_eq!(s, Status::Internal);
            }
        }
    }
}
