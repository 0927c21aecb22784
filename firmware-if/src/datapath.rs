//! Datapath rings: TX descriptors, RX descriptors, tagged RX descriptors and completions.
//!
//! Each endpoint owns up to four rings in host memory, given to the NIC by ENDPOINT_CREATE:
//!
//! * TX ring of 64-byte [`TxDescriptor`]s. The driver writes descriptors and rings
//!   `TXQ_DOORBELL` with the new tail. A descriptor names its destination by `fi_addr_t` only:
//!   the NIC translates it through the AV table bound to the endpoint. The host never looks a
//!   peer up on the send path. The NIC reads the descriptors in ring order as the doorbell
//!   announces them, and a ring entry is the host's again once read; each operation then
//!   completes when its target has answered, in any order, with the descriptor's `context`.
//!   So a context is no ring position: one operation a slow target holds must not keep the
//!   ring from the others (the driver's contexts are the ring's entry numbers, each taken
//!   until its operation completes, and never more in flight than the ring's entries less one,
//!   so the tail never reaches a descriptor the NIC has not read).
//! * RX ring of 32-byte [`RxDescriptor`]s: receive buffers for untagged messages, consumed in
//!   order (a multi-receive buffer takes several messages, see *Multi-receive buffers*).
//!   `RXQ_DOORBELL` carries the new tail.
//! * Tagged RX ring of 64-byte [`TaggedRxDescriptor`]s (optional, since interface 1.2):
//!   tagged receives. `TRXQ_DOORBELL` carries the new tail. The NIC moves each descriptor
//!   onto the endpoint's posted-receive list as soon as it reads it (see *Tag matching*); the
//!   ring entry is then free, but a receive completes only when a message matches it, so
//!   tagged receives complete in matching order, not in posting order.
//! * Completion ring of 64-byte [`Completion`]s, written by the NIC with a phase bit (see
//!   [`crate::ring`]); the driver returns entries with `CQ_DOORBELL`. A full completion ring
//!   stalls the endpoint's engines; nothing is overwritten.
//!
//! ## Operations
//!
//! | [`TxOpcode`] | SES request opcode | `buf`, `len` | `match_bits` | `remote_offset` | `data` |
//! |---|---|---|---|---|---|
//! | `SEND` 0x01 | SEND 0x05 | payload | 0 | 0; SES bytes 12–19 carry the peer group | remote CQ data |
//! | `TAGGED_SEND` 0x02 | TAGGED_SEND 0x09 | payload | tag (SES bytes 24–31) | 0; SES bytes 12–19 carry the peer group | remote CQ data |
//! | `WRITE` 0x03 | WRITE 0x01 | payload | memory key (SES bytes 24–31) | offset in the region (SES bytes 12–19) | 0 |
//! | `READ` 0x04 | READ 0x02 | local destination | memory key | offset in the region | 0 |
//!
//! A message is at most `CAP_MAX_MSG` bytes (interface 1.1; in 1.0 it was one MTU). The NIC
//! segments a SEND, TAGGED_SEND or WRITE longer than the MTU (`CAP_PROFILES.mtu`) into
//! MTU-sized UET packets — SOM on the first, EOM on the last, one message id — and the target
//! reassembles (messages) or places (writes) them, in whatever order they arrive. A READ of
//! `len` bytes travels as `max(1, ceil(len / mtu))` single-packet READ requests of at most one
//! MTU each (SOM|EOM, `buffer_offset` advancing by the MTU); each is answered by one response
//! with data that the NIC writes into `buf` at the same offset. Either side still sees one
//! descriptor and one completion per operation: the initiator's completes when every packet
//! has been answered (with the first error, if any).
//!
//! The target tells the packets of a message from those of a later message with the same id
//! (message ids count per PDC in 16 bits, and wrap) by their PSNs: a packet joins a message
//! in reassembly only when its PSN is within 65,536 of that of the last packet accepted into
//! it, so the bytes of two messages are never mixed. A message in reassembly whose sender
//! gave up on one of its packets never finishes; when a packet with its id comes whose PSN is
//! 65,536 or more ahead of it, the sender has given the id to a new message, and the NIC
//! ends the old one: it frees what the message held, completes the receive it took
//! [`LocalStatus::Cancelled`] with `len` 0 (the buffer may hold some of its bytes; a message
//! placed in a multi-receive buffer completes nothing, and its space stays unused), refuses
//! the rest of its packets RC_UNDELIVERABLE, and takes the packet as a new message's.
//!
//! ## Inject
//!
//! A SEND or TAGGED_SEND with [`TX_FLAG_INJECT`] carries at most [`MAX_INJECT_BYTES`] of
//! payload (`fi_info.tx_attr.inject_size`); a longer one completes `BadDescriptor`. Its
//! payload lives in a driver-owned slot (one per completion context), so the caller's buffer is
//! free when the post returns. Its completion carries [`COMPLETION_FLAG_INJECT`]: a successful
//! one only returns the ring slot to the driver and is never reported to the application
//! (`fi_inject`: no completion on success); an error is reported as usual.
//!
//! ## Multi-receive buffers (`FI_MULTI_RECV`, since interface 1.6)
//!
//! An RX descriptor with [`RX_FLAG_MULTI_RECV`] posts one buffer for several untagged
//! messages. When the NIC reads it from the RX ring it becomes the endpoint's *current*
//! multi-receive buffer (the ring entry is free again, but the buffer stays the NIC's), with
//! a next-free offset of 0:
//!
//! * Each arriving message (single- or multi-packet; its size is the `request_length` every
//!   packet carries) is placed whole at the next free offset, and the next free offset moves
//!   to the end of the message rounded up to [`MULTI_RECV_ALIGN`] bytes (at most the buffer
//!   length). Offsets are relative to the buffer's first byte: a buffer whose IOVA is
//!   64-byte aligned gets every message 64-byte aligned.
//! * Each message gets its own `Recv` completion: the descriptor's `context`, `len` = the
//!   message's bytes, `buf_offset` = where it starts in the buffer, and
//!   [`COMPLETION_FLAG_MULTI_RECV`].
//! * When the space left after a placement (buffer length minus next free offset) is below the
//!   descriptor's `min_free` (`FI_OPT_MIN_MULTI_RECV`), the buffer is *retired*: it takes no
//!   more messages and the next message uses the next RX descriptor.
//! * A message is never split across buffers. One longer than the space left in the current
//!   buffer retires it and goes to the next RX descriptor; when there is none, the buffer
//!   stays current and the message finds no buffer (see *Untagged messages before their
//!   receive*). One longer than a buffer that holds
//!   no message yet is truncated into it (status `Truncated`, `overflow` = the bytes that did
//!   not fit) and retires it — so a message that fits no buffer consumes one, not all.
//! * The buffer's last completion — the one written after it is retired and its last message
//!   in reassembly has completed — carries [`COMPLETION_FLAG_BUFFER_RELEASED`]: the NIC never
//!   writes the buffer again, and the host may reuse it. When a message retires the buffer
//!   by not fitting and no message of the buffer is still in reassembly, the release is a
//!   completion of its own: [`COMPLETION_FLAG_MULTI_RECV`] | [`COMPLETION_FLAG_BUFFER_RELEASED`]
//!   | [`COMPLETION_FLAG_NO_MESSAGE`], `len` 0, `buf_offset` = the next free offset. Such a
//!   message therefore needs two completion-ring slots; it waits for both like any request.
//! * A completion never reports bytes the NIC may still write: each message's bytes are final
//!   when its completion is written, so the host may read them while the buffer is still the
//!   NIC's.
//!
//! Tagged receives have no multi-receive form (`fi_tagged(3)` gives `fi_trecvmsg` no
//! `FI_MULTI_RECV` flag): a [`TaggedRxDescriptor`] with any flag set completes
//! `BadDescriptor`. An RX descriptor without [`RX_FLAG_MULTI_RECV`] must have `min_free` 0;
//! undefined flag bits or reserved bytes set also complete it `BadDescriptor`.
//!
//! ## Resource-index spaces
//!
//! UET gives RMA, SEND and TAGGED separate resource-index spaces. ENDPOINT_CREATE assigns an
//! endpoint one range `[ri_start, ri_start + ri_count)` of 12-bit indices, advertised once in
//! its address; the range is the endpoint's in each of the three spaces, and the request's SES
//! opcode selects the space:
//!
//! | space | opcodes | index `ri_start + k` names | valid when |
//! |---|---|---|---|
//! | SEND | SEND | receive context `k`, served by an RX ring | inside the range (scalable: `k < rx_ctx_cnt` and context `k` exists) |
//! | TAGGED | TAGGED_SEND | tagged receive context `k`, served by a tagged RX ring | as SEND, and the serving context has a tagged RX ring (else the space is empty) |
//! | RMA | WRITE, READ | the memory regions bound to index `ri_start + k` by MR_REGISTER | inside the range |
//!
//! A regular endpoint (`rx_ctx_cnt` 0) has one receive context: its RX and tagged RX rings
//! serve every index of its range. A scalable endpoint (`rx_ctx_cnt` = n, since interface 1.3)
//! has n: receive context `k` is resource index `ri_start + k`, served by the rings of context
//! `k` (context 0: the endpoint's own rings; the others: CONTEXT_CREATE with the RX role, see
//! [`crate::admin`]), and completes in that context's completion ring. Indices
//! `ri_start + n .. ri_start + ri_count` are outside its SEND and TAGGED spaces (RC_BAD_INDEX)
//! but remain in its RMA space.
//!
//! An initiator names index `entry.ri_start + rx_ctx` (the AV entry of `dest` and the receive
//! context in its top `rx_ctx_bits`, as `fi_rx_addr` puts it) in every space. A request whose
//! index is outside its space's range is answered RC_BAD_INDEX and counted in `RX_BAD_INDEX`.
//!
//! ## The control channel (resource index 0)
//!
//! Resource index 0 is never assigned to an endpoint: it is the provider-to-provider control
//! channel of every endpoint. A SEND descriptor with [`TX_FLAG_CONTROL`] addresses index 0 of
//! the destination endpoint (JobID and PIDonFEP from the AV entry; the entry's range and the
//! receive context are ignored). No other descriptor reaches it: one whose entry and receive
//! context name index 0 completes `AddrNotAvail` at the sending NIC, and nothing is sent. At the target a SEND with index 0 goes to the endpoint's
//! control channel — the RX ring of a passive endpoint, or of the context an endpoint created
//! with the CONTROL role — and is refused RC_BAD_INDEX when it has none; TAGGED_SEND, WRITE
//! and READ to index 0 are always RC_BAD_INDEX. The host gives the messages their meaning
//! (connection management, see [`crate::cm`]).
//!
//! ## Connected endpoints (since interface 1.20)
//!
//! An endpoint created with `EP_FLAG_CONNECTED` takes SEND, TAGGED_SEND, WRITE and READ
//! requests only from the peer ENDPOINT_PEER named (source Fabric Address, JobID and
//! Initiator ID; none before it names one), and its control channel's SENDs from anyone; any
//! other request is refused RC_PERM_VIOLATION, so the sender's operation completes `Remote`
//! with that return code (libfabric `FI_EACCES`) and nothing reaches the endpoint's buffers,
//! unexpected list or memory regions. See [`crate::admin`], *Connected endpoints*.
//!
//! ## Datagram endpoints (UUD)
//!
//! An endpoint created with `EP_FLAG_DGRAM` sends every SEND and TAGGED_SEND as one PDS
//! UUD_REQ packet (SOM|EOM, no PDC, no PSN) and completes the descriptor `Ok` as soon as the
//! packet is handed to the fabric: no response ever comes back. A message longer than the MTU,
//! a WRITE or a READ completes `BadDescriptor`. At the target a UUD request goes through the
//! same demultiplexing and delivery as a RUD request but is never answered: whatever the
//! outcome (no posted buffer, wrong JobID, PIDonFEP or index, a reliable endpoint that does
//! not take datagrams) the packet is dropped and counted — in the NIC counter of the check
//! (`RX_NO_BUFFER`, `RX_BAD_JOB_ID`, …) and, once the endpoint is known, its
//! `rejected[return code]` — and nothing reaches the sender. A RUD request to a datagram
//! endpoint is refused RC_UNSUPPORTED_OP.
//!
//! ## Tag matching
//!
//! A tagged receive matches a TAGGED_SEND whose match bits `t` satisfy
//! `(recv.tag ^ t) & !recv.ignore == 0`. An arriving tagged message takes the first matching
//! receive in posting order. When none matches, the NIC holds the message on the endpoint's
//! *unexpected list* — at most `CAP_TAGGED.unexpected_entries` messages and
//! `CAP_TAGGED.unexpected_kib` KiB of payload per endpoint — and answers it RC_OK with the SES
//! response `list` = 1 (overflow list); a message that would exceed either bound is answered
//! RC_UNDELIVERABLE and counted (`RX_UNEXPECTED_OVERFLOW`). A newly posted tagged receive first
//! takes the oldest matching message of the unexpected list (in arrival order); only when none
//! matches does it join the posted list. At most as many receives as the tagged RX ring has
//! entries wait on the posted list; the NIC stops reading the ring while it is full.
//!
//! ## Untagged messages before their receive (since interface 1.17)
//!
//! An untagged message that finds no buffer — no current multi-receive buffer it fits and an
//! empty RX ring, or with peer groups no posted descriptor of its group — is held on the
//! endpoint's unexpected list like a tagged message (same bounds, shared by both kinds) and
//! answered RC_OK with `list` = 1: the sender's send completes. A message that would exceed a
//! bound is refused RC_UNDELIVERABLE (libfabric `FI_ENORX`) and counted in
//! `RX_UNEXPECTED_OVERFLOW`. Every such message counts in `RX_NO_BUFFER`; held ones also in
//! `RX_UNEXPECTED` and the endpoint's `rx_unexpected`.
//!
//! Untagged messages of one peer group and one sender (fabric address and initiator) take
//! buffers in arrival order: while the list holds one, a later message of its group and
//! sender joins the list behind it even when a buffer is posted. Messages of different
//! senders have no order between them: one still arriving holds up no other sender's.
//! When a buffer is posted (or completion-ring room frees up), the NIC gives the oldest
//! complete message of the list — a multi-packet one once its last byte arrived, those of
//! its group and sender waiting for it — the buffer
//! an arriving message would take: the current multi-receive buffer when it fits, else the
//! next RX descriptor (a multi-receive one becomes current and takes it; a message longer
//! than a whole buffer is truncated into it), or with peer groups the oldest posted
//! descriptor of its group. The completion is the `Recv` an arriving message gets, with its
//! remote CQ data, group and source (looked up then). A descriptor that fails its checks
//! completes `BadDescriptor` and the message waits for the next: its sender was already
//! answered.
//!
//! Before 1.17, an untagged message that finds no buffer is refused RC_UNDELIVERABLE at once
//! and counted in `RX_NO_BUFFER`. So it still is at a datagram endpoint (which drops it,
//! unanswered, as every datagram that finds no buffer) and at a control channel (resource
//! index 0, and a passive endpoint's rings), whose connection protocol learns from the
//! refusal that its peer no longer takes messages.
//!
//! ## Probing the unexpected list (since interface 1.18)
//!
//! A [`TaggedRxDescriptor`] with a flag set is not a receive: the NIC handles it when it reads
//! it from the tagged RX ring (while the completion ring has room) and writes its one
//! `TaggedRecv` completion at once; it never joins the posted list. fi_tagged(3)'s `FI_PEEK`,
//! `FI_CLAIM` and `FI_DISCARD`:
//!
//! | `flags` | the NIC |
//! |---|---|
//! | [`TRX_FLAG_PEEK`] | finds the oldest unclaimed message of the descriptor's group on the unexpected list whose tag the descriptor matches, and reports it, leaving it there |
//! | `PEEK` \| [`TRX_FLAG_CLAIM`] | as `PEEK`, and marks the message with `claim`: no receive or probe takes or finds it but a `CLAIM` naming that claim |
//! | `PEEK` \| [`TRX_FLAG_DISCARD`] | as `PEEK`, and drops the message |
//! | `CLAIM` | takes the message marked with `claim` into the buffer, as a receive that matched it would (truncated to the buffer) |
//! | `CLAIM` \| `DISCARD` | drops the message marked with `claim` |
//!
//! Any other combination, or `claim` not zero without `CLAIM`, completes `BadDescriptor`. A
//! report (`PEEK`, and the `DISCARD`s) writes nothing into the buffer: its completion carries
//! [`COMPLETION_FLAG_REPORT`], the message's tag, remote CQ data, group and source, and
//! `len` = the message's length. It counts in no receive counter of the endpoint.
//! When no message is found — none matches, the oldest that matches is a multi-packet
//! message whose last byte has not arrived (a later one would report messages out of
//! order), or no message holds the claim — the completion's status is
//! [`LocalStatus::NoMessage`] (libfabric `FI_ENOMSG`), `len` 0. Untagged messages are never
//! found: a probe is tagged. The claim is the host's to choose (the provider uses the
//! `fi_context` fi_tagged(3) requires for a claim); claims are per endpoint, and a message
//! keeps its claim until a `CLAIM` takes or drops it, or its endpoint is destroyed.
//!
//! Before 1.18 a flag set, or a byte of `claim`, completes `BadDescriptor`.
//!
//! ## Peer groups (since interface 1.7)
//!
//! An AV created with `max_group_id` > 0 (AV_CREATE, at most `CAP_PEER_GROUPS.max_group_id`;
//! libfabric 2.x peer groups, the domain attribute `max_group_id`) gives every `fi_addr_t` of
//! its endpoints a group field, which `fi_group_addr(fi_addr, group)` fills:
//!
//! | bits | field |
//! |---|---|
//! | 0–31 | AV index |
//! | 32 to 63 − `rx_ctx_bits` | group id |
//! | 64 − `rx_ctx_bits` to 63 | receive context (`fi_rx_addr`) |
//!
//! The receive-context bits come out of the top of the group field, so the bits that number
//! `max_group_id` plus `rx_ctx_bits` must not exceed 32: AV_CREATE refuses more with
//! InvalidField (and the host's `fi_av_open` with `FI_EINVAL`). An AV with `max_group_id` 0
//! has no group field and decodes an `fi_addr_t` as before 1.7: one with any bit of 32 to
//! 63 − `rx_ctx_bits` set names an index beyond the table (`AddrNotAvail`).
//!
//! **Sending.** The TX engine takes the index from bits 0–31, ignoring the group, and the
//! group from its field. An index that does not translate completes `AddrNotAvail` as before;
//! then a group above the AV's `max_group_id` completes the descriptor [`LocalStatus::BadGroup`]
//! (libfabric `FI_EINVAL`) and counts in `TX_BAD_GROUP`, `TX_ERRORS` and the endpoint's
//! `tx_errors`: nothing is sent. Every packet of a SEND or TAGGED_SEND carries the group id in
//! the SES standard request's `buffer_offset` field:
//!
//! | SES bytes | SEND, TAGGED_SEND | WRITE, READ |
//! |---|---|---|
//! | 12–15 | zero | `buffer_offset` bits 63–32 |
//! | 16–19 | group id (big-endian, like every SES field) | `buffer_offset` bits 31–0 |
//!
//! Messages have no buffer offset of their own, and a sender without peer groups puts 0
//! there: its messages are group 0. The tag (bytes 24–31) and the remote CQ data (bytes
//! 32–39) are untouched, so tagged messages match on their full 64-bit tag within a group.
//! WRITE and READ check the group like any descriptor but do not carry it (RMA does not
//! match receive buffers). A control-channel SEND ([`TX_FLAG_CONTROL`]) carries group 0.
//!
//! **Receiving.** An endpoint, and each of its receive contexts, has peer groups when the AV
//! bound to it at ENDPOINT_CREATE has (a passive endpoint and a control channel never have).
//! For a SEND or TAGGED_SEND at the target:
//!
//! * SES bytes 12–15 not zero: malformed (`RX_MALFORMED`, dropped unanswered); a packet whose
//!   group differs from the one its message opened with: malformed.
//! * An endpoint without peer groups accepts group 0 only, an endpoint with peer groups the
//!   groups 0 to its AV's `max_group_id`. Any other group is refused RC_UNDELIVERABLE and
//!   counted in `RX_BAD_GROUP` and the endpoint's `rejected[RC_UNDELIVERABLE]`.
//! * **Untagged.** An endpoint with peer groups reads its RX ring as soon as the doorbell
//!   moves its tail (while its completion ring has room): each [`RxDescriptor`] joins the
//!   endpoint's posted list, in posting order, and frees its ring entry. A message takes the
//!   oldest posted descriptor whose `group` equals its own, whatever descriptors of other
//!   groups were posted before it, so groups never hold each other up. A message of a group
//!   with no posted descriptor is handled as an untagged message that finds no buffer (see
//!   *Untagged messages before their receive*): it waits on the unexpected list for a
//!   descriptor of its group (before interface 1.17: refused RC_UNDELIVERABLE). A descriptor whose `group` is above the AV's `max_group_id`, that has
//!   [`RX_FLAG_MULTI_RECV`] (multi-receive buffers and peer groups do not combine in 1.7), or
//!   whose undefined bits are set completes `BadDescriptor` when the NIC reads it.
//! * **Tagged.** A [`TaggedRxDescriptor`] matches a message when the tags match and
//!   `group` equals the message's. Unexpected messages keep their group; a newly posted
//!   tagged receive takes the oldest unexpected message of its group whose tag it matches. A
//!   tagged message of a group with no matching posted receive waits on the unexpected list
//!   (`RX_UNEXPECTED`) within its bounds, as any tagged message does. A tagged receive whose
//!   `group` is above the AV's `max_group_id` completes `BadDescriptor`.
//! * A receive posted without a group (`group` 0) takes messages of group 0 only. fi_av(3)
//!   says posted receive buffers must have a matching group id: the driver therefore gives a
//!   receive without a group the group id 0, never "any group", so a message of group 2
//!   cannot land in a buffer that was not posted for it. Messages of a sender whose AV has no
//!   peer groups are group 0 and reach such receives.
//! * The receive completion reports the message's group in [`Completion::group`] (0 at an
//!   endpoint without peer groups).
//!
//! On an endpoint without peer groups the descriptors' `group` fields must be zero (they
//! were reserved before 1.7), else the descriptor completes `BadDescriptor`.
//!
//! ## RMA
//!
//! A WRITE or READ is checked against the memory regions of the target endpoint (MR_REGISTER,
//! see [`crate::admin`]): a region with the request's memory key must be bound to the request's
//! resource index, grant the access (remote write for WRITE, remote read for READ), and
//! contain `[buffer_offset, buffer_offset + request_length)`. Every packet checks the whole
//! request range, so a request that fails writes or reads nothing at all; it is answered
//! RC_PERM_VIOLATION and counted in `RX_PERM_VIOLATION`. The initiator's completion is then
//! `Remote` with that return code. RMA produces no completion at the target.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Largest payload of a descriptor with [`TX_FLAG_INJECT`], in bytes.
pub const MAX_INJECT_BYTES: usize = 256;

/// [`TxDescriptor::flags`]: the payload is inline in a driver-owned slot and a successful
/// completion is not reported (`fi_inject`). SEND and TAGGED_SEND only.
pub const TX_FLAG_INJECT: u8 = 1 << 0;

/// [`TxDescriptor::flags`]: the SEND addresses resource index 0 of the destination endpoint,
/// its control channel (since interface 1.3). SEND only.
pub const TX_FLAG_CONTROL: u8 = 1 << 1;

/// [`Completion::flags`]: the completion of a descriptor posted with [`TX_FLAG_INJECT`].
pub const COMPLETION_FLAG_INJECT: u8 = 1 << 0;

/// [`Completion::flags`]: the completion concerns a multi-receive buffer (an RX descriptor
/// posted with [`RX_FLAG_MULTI_RECV`]); [`Completion::buf_offset`] is valid. Since interface
/// 1.6.
pub const COMPLETION_FLAG_MULTI_RECV: u8 = 1 << 1;

/// [`Completion::flags`]: the multi-receive buffer's last completion: the NIC has released the
/// buffer and never writes it again (libfabric's `FI_MULTI_RECV` completion flag). Since
/// interface 1.6.
pub const COMPLETION_FLAG_BUFFER_RELEASED: u8 = 1 << 2;

/// [`Completion::flags`]: the completion reports only the release of a multi-receive buffer,
/// no message (`len` 0). Since interface 1.6.
pub const COMPLETION_FLAG_NO_MESSAGE: u8 = 1 << 3;

/// [`Completion::flags`]: the completion of a probe that reports a message it did not
/// deliver (`PEEK`, the `DISCARD`s; *Probing the unexpected list*): `len` is the message's
/// length and nothing was written. Since interface 1.18.
pub const COMPLETION_FLAG_REPORT: u8 = 1 << 4;

/// [`RxDescriptor::flags`]: a multi-receive buffer (`FI_MULTI_RECV`): it takes messages until
/// less than [`RxDescriptor::min_free`] bytes are left. Since interface 1.6.
pub const RX_FLAG_MULTI_RECV: u32 = 1 << 0;

/// [`TaggedRxDescriptor::flags`]: a probe of the unexpected list (`FI_PEEK`), not a receive:
/// see *Probing the unexpected list*. Since interface 1.18.
pub const TRX_FLAG_PEEK: u32 = 1 << 0;
/// [`TaggedRxDescriptor::flags`]: with [`TRX_FLAG_PEEK`], mark the message found with
/// [`TaggedRxDescriptor::claim`]; alone, take the message marked with it (`FI_CLAIM`). Since
/// interface 1.18.
pub const TRX_FLAG_CLAIM: u32 = 1 << 1;
/// [`TaggedRxDescriptor::flags`]: with [`TRX_FLAG_PEEK`] or [`TRX_FLAG_CLAIM`], drop the
/// message found or claimed instead of delivering it (`FI_DISCARD`). Since interface 1.18.
pub const TRX_FLAG_DISCARD: u32 = 1 << 2;

/// Alignment, in bytes from the buffer's start, of every message placed in a multi-receive
/// buffer.
pub const MULTI_RECV_ALIGN: u32 = 64;

/// The next free offset after a message of `len` bytes placed at `offset` in a multi-receive
/// buffer of `buf_len` bytes: the end of the message rounded up to [`MULTI_RECV_ALIGN`], at
/// most `buf_len`.
pub const fn multi_recv_next(offset: u32, len: u32, buf_len: u32) -> u32 {
    let end = offset as u64 + len as u64;
    let align = MULTI_RECV_ALIGN as u64;
    let next = end.div_ceil(align) * align;
    if next > buf_len as u64 {
        buf_len
    } else {
        next as u32
    }
}

/// TX descriptor opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TxOpcode {
    /// Send a message to `dest`, delivered into the peer's RX ring.
    Send = 0x01,
    /// Send a tagged message to `dest`, matched against the peer's tagged receives.
    TaggedSend = 0x02,
    /// Write the payload into a memory region of `dest` (RMA write).
    Write = 0x03,
    /// Read from a memory region of `dest` into `buf` (RMA read).
    Read = 0x04,
}

impl TxOpcode {
    /// Decode an opcode byte.
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            0x01 => Some(TxOpcode::Send),
            0x02 => Some(TxOpcode::TaggedSend),
            0x03 => Some(TxOpcode::Write),
            0x04 => Some(TxOpcode::Read),
            _ => None,
        }
    }

    /// Whether the operation is RMA (WRITE or READ).
    pub const fn is_rma(self) -> bool {
        matches!(self, TxOpcode::Write | TxOpcode::Read)
    }
}

/// A TX ring entry.
///
/// | bytes | field |
/// |---|---|
/// | 0 | `opcode` ([`TxOpcode`]) |
/// | 1 | `flags` ([`TX_FLAG_INJECT`], [`TX_FLAG_CONTROL`]) |
/// | 2–3 | reserved |
/// | 4–7 | `len` |
/// | 8–15 | `buf` |
/// | 16–23 | `dest` |
/// | 24–31 | `context` |
/// | 32–39 | `data` |
/// | 40–47 | `match_bits` |
/// | 48–55 | `remote_offset` |
/// | 56–63 | reserved |
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct TxDescriptor {
    /// [`TxOpcode`].
    pub opcode: u8,
    /// `TX_FLAG_*`; undefined bits must be zero.
    pub flags: u8,
    /// Reserved, zero.
    pub reserved0: [u8; 2],
    /// Payload (SEND, TAGGED_SEND, WRITE) or read length (READ) in bytes, at most
    /// `CAP_MAX_MSG`.
    pub len: U32,
    /// IOVA of the payload, or of the READ destination.
    pub buf: U64,
    /// Destination `fi_addr_t`: AV index in the low bits, receive context in the top
    /// `rx_ctx_bits` of the bound AV, and with peer groups the group id in bits 32 and up
    /// (*Peer groups*).
    pub dest: U64,
    /// Returned in the completion.
    pub context: U64,
    /// Remote CQ data delivered with a message; zero for WRITE and READ.
    pub data: U64,
    /// TAGGED_SEND: the tag. WRITE, READ: the memory key. SEND: zero.
    pub match_bits: U64,
    /// WRITE, READ: byte offset within the target memory region. Otherwise zero.
    pub remote_offset: U64,
    /// Reserved, zero.
    pub reserved1: [u8; 8],
}

/// An RX ring entry.
///
/// | bytes | field |
/// |---|---|
/// | 0–7 | `buf` |
/// | 8–11 | `len` |
/// | 12–15 | `flags` ([`RX_FLAG_MULTI_RECV`]) |
/// | 16–23 | `context` |
/// | 24–27 | `min_free` (since 1.6; reserved before) |
/// | 28–31 | `group` (since 1.7; reserved before) |
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct RxDescriptor {
    /// IOVA of the buffer.
    pub buf: U64,
    /// Buffer length.
    pub len: U32,
    /// `RX_FLAG_*`; undefined bits must be zero.
    pub flags: U32,
    /// Returned in the completion.
    pub context: U64,
    /// With [`RX_FLAG_MULTI_RECV`]: the buffer is retired when less than this many bytes are
    /// left after a message (`FI_OPT_MIN_MULTI_RECV`). Otherwise zero.
    pub min_free: U32,
    /// The peer group whose messages the buffer takes (*Peer groups*); zero on an endpoint
    /// without peer groups.
    pub group: U32,
}

/// A tagged RX ring entry (`fi_trecv`).
///
/// | bytes | field |
/// |---|---|
/// | 0–7 | `buf` |
/// | 8–11 | `len` |
/// | 12–15 | `flags` (`TRX_FLAG_*`, since 1.18; reserved before) |
/// | 16–23 | `context` |
/// | 24–31 | `tag` |
/// | 32–39 | `ignore` |
/// | 40–43 | `group` (since 1.7; reserved before) |
/// | 44–51 | `claim` (since 1.18; reserved before) |
/// | 52–63 | reserved, zero |
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct TaggedRxDescriptor {
    /// IOVA of the buffer.
    pub buf: U64,
    /// Buffer length.
    pub len: U32,
    /// `TRX_FLAG_*` (since interface 1.18; *Probing the unexpected list*); undefined bits
    /// must be zero.
    pub flags: U32,
    /// Returned in the completion.
    pub context: U64,
    /// Tag to match.
    pub tag: U64,
    /// Bits of the tag that are ignored when matching.
    pub ignore: U64,
    /// The peer group whose messages the receive takes (*Peer groups*); zero on an endpoint
    /// without peer groups.
    pub group: U32,
    /// With [`TRX_FLAG_CLAIM`]: the claim the message is marked with (`PEEK | CLAIM`) or
    /// taken by (`CLAIM` alone). Otherwise zero.
    pub claim: U64,
    /// Reserved, zero.
    pub reserved: [u8; 12],
}

impl TaggedRxDescriptor {
    /// Whether a message with match bits `tag` matches this receive.
    pub fn matches(&self, tag: u64) -> bool {
        tag_matches(self.tag.get(), self.ignore.get(), tag)
    }

    /// Whether a message of peer group `group` with match bits `tag` matches this receive.
    pub fn matches_in_group(&self, group: u32, tag: u64) -> bool {
        self.group.get() == group && self.matches(tag)
    }
}

/// The matching rule: `(recv_tag ^ msg_tag) & !ignore == 0`.
pub const fn tag_matches(recv_tag: u64, ignore: u64, msg_tag: u64) -> bool {
    (recv_tag ^ msg_tag) & !ignore == 0
}

/// What the local NIC concluded about a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LocalStatus {
    /// Completed successfully.
    Ok = 0,
    /// The target answered with an error: see the completion's return code.
    Remote = 1,
    /// `dest` names no valid entry of the bound AV (out of range, never inserted, removed).
    AddrNotAvail = 2,
    /// The descriptor's buffer lies outside memory mapped for DMA.
    DmaFault = 3,
    /// The message was longer than the receive buffer; `len` bytes were delivered.
    Truncated = 4,
    /// The descriptor is malformed (unknown opcode, reserved fields set, length above
    /// `CAP_MAX_MSG`, inject above [`MAX_INJECT_BYTES`]).
    BadDescriptor = 5,
    /// No NIC answers at the destination fabric address.
    Unreachable = 6,
    /// `dest` names a peer group above the bound AV's `max_group_id` (since interface 1.7;
    /// libfabric `FI_EINVAL`). Nothing was sent.
    BadGroup = 7,
    /// The destination peer takes messages of at most one MTU (its AV entry has
    /// `entry_flags::MAX_MSG_MTU`) and the SEND, TAGGED_SEND or WRITE was longer (since
    /// interface 1.10; libfabric `FI_EMSGSIZE`). Nothing was sent.
    MsgTooLong = 8,
    /// A receive withdrawn by RECV_CANCEL before any message took it (since interface 1.14;
    /// libfabric `FI_ECANCELED`): `len` 0, the buffer untouched. See [`crate::admin`],
    /// *RECV_CANCEL*. Also a receive whose message the NIC ended before its last byte came,
    /// because the sender gave the message's id to a new one (see *Operations*): `len` 0, the
    /// buffer may hold some of the ended message's bytes.
    Cancelled = 9,
    /// `dest` names an entry bound to an auth key (`entry_flags::AUTH_KEY`) whose NIC slot
    /// was not granted to the sending endpoint by ENDPOINT_AUTH_KEYS (a context's grants are
    /// its scalable endpoint's), and whose JobID is not the endpoint's own (since interface
    /// 1.16; libfabric `FI_EACCES`): fi_av(3) configures an endpoint with the AV's keys when it
    /// is enabled, and keys inserted later do not reach it. Nothing was sent.
    KeyNotGranted = 10,
    /// A probe of the unexpected list ([`TRX_FLAG_PEEK`], or [`TRX_FLAG_CLAIM`] naming a
    /// claim no message holds) found no message (since interface 1.18; libfabric
    /// `FI_ENOMSG`): `len` 0, the buffer untouched.
    NoMessage = 11,
}

impl LocalStatus {
    /// Decode; unknown values decode as `BadDescriptor`, never as success.
    pub const fn from_u8(v: u8) -> Self {
        match v {
            0 => LocalStatus::Ok,
            1 => LocalStatus::Remote,
            2 => LocalStatus::AddrNotAvail,
            3 => LocalStatus::DmaFault,
            4 => LocalStatus::Truncated,
            6 => LocalStatus::Unreachable,
            7 => LocalStatus::BadGroup,
            8 => LocalStatus::MsgTooLong,
            9 => LocalStatus::Cancelled,
            10 => LocalStatus::KeyNotGranted,
            11 => LocalStatus::NoMessage,
            _ => LocalStatus::BadDescriptor,
        }
    }
}

/// Which ring a completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CompletionKind {
    /// A TX descriptor completed (any [`TxOpcode`]; the completion's `opcode` says which).
    Send = 1,
    /// An RX descriptor was filled.
    Recv = 2,
    /// A tagged RX descriptor was filled; `tag` holds the message's match bits.
    TaggedRecv = 3,
}

impl CompletionKind {
    /// Decode a kind byte.
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(CompletionKind::Send),
            2 => Some(CompletionKind::Recv),
            3 => Some(CompletionKind::TaggedRecv),
            _ => None,
        }
    }
}

/// A completion ring entry (64 bytes since interface 1.2).
///
/// | bytes | field |
/// |---|---|
/// | 0–7 | `context` |
/// | 8–15 | `data` |
/// | 16–23 | `src_addr` |
/// | 24–31 | `tag` |
/// | 32–35 | `len` |
/// | 36 | `status` |
/// | 37 | `return_code` |
/// | 38 | `kind` |
/// | 39 | `flags` |
/// | 40 | `opcode` |
/// | 41–43 | reserved, zero |
/// | 44–47 | `buf_offset` (since 1.6) |
/// | 48–51 | `overflow` (since 1.6) |
/// | 52–55 | `group` (since 1.7) |
/// | 56–62 | reserved, zero |
/// | 63 | `phase`, written last |
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct Completion {
    /// The descriptor's context.
    pub context: U64,
    /// Remote CQ data (receive).
    pub data: U64,
    /// Receive: the sender as an `fi_addr_t` of the bound AV (the NIC's reverse translation),
    /// its user id when the entry has one, or `FI_ADDR_NOTAVAIL`.
    pub src_addr: U64,
    /// Tagged receive: the match bits the message carried. Otherwise zero.
    pub tag: U64,
    /// Bytes transferred.
    pub len: U32,
    /// [`LocalStatus`].
    pub status: u8,
    /// [`crate::ReturnCode`] of the target's response (send) or of the delivery (receive).
    pub return_code: u8,
    /// [`CompletionKind`].
    pub kind: u8,
    /// `COMPLETION_FLAG_*`.
    pub flags: u8,
    /// TX completion: the descriptor's [`TxOpcode`]. Receive: zero.
    pub opcode: u8,
    /// Reserved, zero.
    pub reserved0: [u8; 3],
    /// With [`COMPLETION_FLAG_MULTI_RECV`]: byte offset of the message in the multi-receive
    /// buffer (release only: the buffer's next free offset). Otherwise zero.
    pub buf_offset: U32,
    /// Receive with status `Truncated`: bytes of the message that did not fit the buffer and
    /// were discarded (`fi_cq_err_entry.olen`). Otherwise zero.
    pub overflow: U32,
    /// Receive: the peer group of the message (*Peer groups*; 0 at an endpoint without peer
    /// groups). Otherwise zero.
    pub group: U32,
    /// Reserved, zero.
    pub reserved: [u8; 7],
    /// Bit 0: phase. Written last.
    pub phase: u8,
}

/// Bytes of one completion entry.
pub const COMPLETION_BYTES: usize = 64;
/// Byte offset of [`Completion::phase`].
pub const COMPLETION_PHASE_OFFSET: usize = 63;
/// Bytes of one TX descriptor.
pub const TX_DESCRIPTOR_BYTES: usize = 64;
/// Bytes of one RX descriptor.
pub const RX_DESCRIPTOR_BYTES: usize = 32;
/// Bytes of one tagged RX descriptor.
pub const TAGGED_RX_DESCRIPTOR_BYTES: usize = 64;

const _: () = assert!(core::mem::size_of::<TxDescriptor>() == TX_DESCRIPTOR_BYTES);
const _: () = assert!(core::mem::size_of::<RxDescriptor>() == RX_DESCRIPTOR_BYTES);
const _: () = assert!(core::mem::size_of::<TaggedRxDescriptor>() == TAGGED_RX_DESCRIPTOR_BYTES);
const _: () = assert!(core::mem::size_of::<Completion>() == COMPLETION_BYTES);
const _: () = assert!(core::mem::offset_of!(Completion, phase) == COMPLETION_PHASE_OFFSET);
const _: () = assert!(core::mem::offset_of!(Completion, tag) == 24);
const _: () = assert!(core::mem::offset_of!(Completion, opcode) == 40);
const _: () = assert!(core::mem::offset_of!(Completion, buf_offset) == 44);
const _: () = assert!(core::mem::offset_of!(Completion, overflow) == 48);
const _: () = assert!(core::mem::offset_of!(Completion, group) == 52);
const _: () = assert!(core::mem::offset_of!(RxDescriptor, min_free) == 24);
const _: () = assert!(core::mem::offset_of!(RxDescriptor, group) == 28);
const _: () = assert!(core::mem::offset_of!(TaggedRxDescriptor, group) == 40);
const _: () = assert!(core::mem::offset_of!(TxDescriptor, match_bits) == 40);
const _: () = assert!(core::mem::offset_of!(TxDescriptor, remote_offset) == 48);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_matching_rule() {
        assert!(tag_matches(0x1234, 0, 0x1234));
        assert!(!tag_matches(0x1234, 0, 0x1235));
        assert!(tag_matches(0x1234, 0xF, 0x123F));
        assert!(!tag_matches(0x1234, 0xF, 0x1334));
        assert!(tag_matches(0, u64::MAX, 0xDEAD_BEEF));
    }

    #[test]
    fn opcodes_round_trip() {
        for op in [
            TxOpcode::Send,
            TxOpcode::TaggedSend,
            TxOpcode::Write,
            TxOpcode::Read,
        ] {
            assert_eq!(TxOpcode::from_u8(op as u8), Some(op));
        }
        assert_eq!(TxOpcode::from_u8(0), None);
        assert_eq!(TxOpcode::from_u8(5), None);
        for k in 1..=3 {
            assert_eq!(CompletionKind::from_u8(k).map(|k| k as u8), Some(k));
        }
        assert_eq!(CompletionKind::from_u8(4), None);
        assert_eq!(LocalStatus::from_u8(7), LocalStatus::BadGroup);
        assert_eq!(LocalStatus::from_u8(8), LocalStatus::MsgTooLong);
        assert_eq!(LocalStatus::from_u8(9), LocalStatus::Cancelled);
        assert_eq!(LocalStatus::from_u8(10), LocalStatus::KeyNotGranted);
        assert_eq!(LocalStatus::from_u8(11), LocalStatus::NoMessage);
        assert_eq!(LocalStatus::from_u8(12), LocalStatus::BadDescriptor);
    }

    #[test]
    fn multi_recv_placement_is_aligned_and_bounded() {
        assert_eq!(multi_recv_next(0, 0, 4096), 0);
        assert_eq!(multi_recv_next(0, 1, 4096), 64);
        assert_eq!(multi_recv_next(64, 64, 4096), 128);
        assert_eq!(multi_recv_next(128, 65, 4096), 256);
        assert_eq!(multi_recv_next(4032, 64, 4096), 4096);
        assert_eq!(multi_recv_next(4000, 90, 4090), 4090);
        assert_eq!(multi_recv_next(u32::MAX - 1, u32::MAX, u32::MAX), u32::MAX);
    }
}
