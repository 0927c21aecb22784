//! `fi_getinfo`: what the provider offers on its NIC, matched against the application's hints.
//!
//! The provider answers with one `fi_info` per endpoint type the hints allow ([`EpKind`]:
//! `FI_EP_RDM`, `FI_EP_DGRAM`, `FI_EP_MSG`, in that order), or `-FI_ENODATA` when the hints ask for what it does not offer:
//!
//! | hint | offered |
//! |---|---|
//! | `caps` | `FI_MSG`, `FI_TAGGED`, `FI_SEND`, `FI_RECV`, `FI_SOURCE`, `FI_MULTI_RECV`, `FI_LOCAL_COMM`, `FI_REMOTE_COMM`, `FI_SHARED_AV`, `FI_AV_USER_ID` (not on `FI_EP_MSG`, which binds no AV), `FI_NAMED_RX_CTX` (`FI_EP_RDM` only); of `FI_MSG`, `FI_TAGGED` and `FI_NAMED_RX_CTX` only those the hints name, in the directions (`FI_SEND`, `FI_RECV`) they name |
//! | `addr_format` | `FI_FORMAT_UNSPEC` (the 32-byte UET address) or `FI_ADDR_STR` |
//! | `ep_attr->type` | `FI_EP_RDM`, `FI_EP_DGRAM`, `FI_EP_MSG` (connected: [`crate::pep`], [`crate::ep`]) |
//! | `domain_attr->av_type` | `FI_AV_TABLE` (`FI_AV_MAP` behaves as a table, as in libfabric 2.x, and is answered so) |
//! | `domain_attr->threading`, `control_progress`, `data_progress` | `FI_THREAD_SAFE`, `FI_PROGRESS_AUTO`, which serve any model asked; a value no model has excludes the provider |
//! | `domain_attr->resource_mgmt` | `FI_RM_ENABLED` on a NIC of host interface 1.17 or later, which holds a message that arrives before its receive; `FI_RM_DISABLED` before, whose hints asking `FI_RM_ENABLED` exclude it |
//! | `domain_attr->name`, `fabric_attr->name`, `fabric_attr->prov_name` | the NIC's, `uet`, `uet` |
//! | `fabric_attr->fabric`, `domain_attr->domain` | an open fabric and domain of the provider, answered as given; another's, or a domain of another fabric than the one named, excludes the provider. Not named, the first opened of those open (the domain of the answer's fabric; the fabric of a domain named alone), or NULL |
//! | `domain_attr->caps` | `FI_LOCAL_COMM`, `FI_REMOTE_COMM`, `FI_SHARED_AV` (not on `FI_EP_MSG`, whose domain opens no named AV) |
//! | `domain_attr->ep_cnt` | up to the NIC's endpoints |
//! | `domain_attr->max_ep_rx_ctx` | up to the NIC's receive contexts per endpoint (`CAP_EP.max_rx_ctx`, and no more than an endpoint's resource indices, or than an AV can name: `CAP_AV.max_rx_ctx_bits`) on `FI_EP_RDM`; 1 on `FI_EP_DGRAM` and `FI_EP_MSG`, whose hints asking more exclude them (and whose domains' AVs then have no `rx_ctx_bits`) |
//! | `domain_attr->cq_cnt`, `tx_ctx_cnt`, `rx_ctx_cnt` | up to the NIC's endpoints: a completion, transmit and receive ring each |
//! | `domain_attr->cntr_cnt` | up to 1024 ([`crate::cntr::CNTR_CNT`]): counters are host objects, counting the completions the provider drains from the NIC's rings |
//! | `domain_attr->max_ep_tx_ctx` | up to the NIC's transmit contexts per endpoint (`CAP_EP.max_tx_ctx`) on `FI_EP_RDM`; 1 on `FI_EP_DGRAM` and `FI_EP_MSG`, whose hints asking more exclude them |
//! | `domain_attr->max_ep_stx_ctx`, `max_ep_srx_ctx` | 0: no shared contexts |
//! | `domain_attr->max_err_data` | up to 1024 bytes: an error's message in `err_data` is at most that |
//! | `domain_attr->auth_key` | a 4-byte JobID (24 bits), or none |
//! | `ep_attr->auth_key` | the domain's (`domain_attr->auth_key`), or none: an endpoint takes its domain's JobID |
//! | `domain_attr->cq_data_size` | up to 8 bytes |
//! | `domain_attr->mr_key_size`, `mr_cnt`, `mr_iov_limit`, `tx_attr->rma_iov_limit` | 0: no memory is registered, no RMA served |
//! | `tx_attr`, `rx_attr` | caps `FI_MSG`, `FI_TAGGED` with `FI_SEND` (and `FI_NAMED_RX_CTX` on `FI_EP_RDM`), or with `FI_RECV`, `FI_SOURCE` and `FI_MULTI_RECV` (receive capabilities in `tx_attr`, and send capabilities in `rx_attr`, are passed over, as libfabric's providers do); sizes, `iov_limit`, `inject_size` up to the provider's; `op_flags` returned, those the provider honours (`FI_COMPLETION`; for sends `FI_INJECT`, `FI_INJECT_COMPLETE`, `FI_TRANSMIT_COMPLETE`, and on `FI_EP_RDM` `FI_DELIVERY_COMPLETE`; for receives `FI_TRANSMIT_COMPLETE` and `FI_MULTI_RECV`); no `msg_order` or `comp_order` (messages travel unordered) |
//! | `ep_attr->max_msg_size` | up to the NIC's `CAP_MAX_MSG` (1 MiB on the simulated NIC), at most 16 MiB (`FI_EP_RDM`, `FI_EP_MSG`); up to the NIC's MTU (`FI_EP_DGRAM`) |
//! | `ep_attr->protocol`, `protocol_version` | `FI_PROTO_UNSPEC` or the provider's own, UET ([`PROTOCOL`], a provider-specific value: libfabric 1.17 names no UET protocol), up to version [`PROTOCOL_VERSION`] (0: any) |
//! | `ep_attr->mem_tag_format` | every bit matched: the fields the hints ask for, the top one widened to the top bit (0: one field of 64 bits) |
//! | `ep_attr->max_order_raw_size`, `max_order_war_size`, `max_order_waw_size` | 0: no RMA or atomic data is ordered (neither is served, and no message order is offered) |
//! | `ep_attr->tx_ctx_cnt`, `rx_ctx_cnt` | up to the NIC's (`CAP_EP.max_tx_ctx`, `max_rx_ctx`, and no more receive contexts than an endpoint's resource indices or an AV can name; no more than the hints' `domain_attr->max_ep_tx_ctx`, `max_ep_rx_ctx` when they name them), answered as asked (0: 1); more than 1 only on `FI_EP_RDM`, as a scalable endpoint ([`crate::sep`]); no shared contexts (`FI_SHARED_CONTEXT`) |
//! | `src_addr`, `dest_addr` | returned; a source must be on this NIC, and an endpoint opened with one is at it or refused ([`crate::ep`]) |
//!
//! `node` and `service` are a UET address in the form `fi_av_insertsvc` takes (an IP address
//! or host name, and the PIDonFEP with its parameters; or an `FI_ADDR_STR` address as node and
//! a NULL service, as fi_getinfo(3) allows): the destination (`dest_addr`), or with
//! `FI_SOURCE` the source (`src_addr`), whose node must be this NIC's fabric address. For
//! `FI_EP_MSG` the destination is the listener `fi_connect` names, the source a listener's
//! own (the NIC assigns its PIDonFEP at `fi_listen`: `fi_getname` gives it); `FI_SOURCE`
//! with neither node nor service is `-FI_EINVAL`, as fi_getinfo(3) has one of them given. A node
//! or service that does not parse is `-FI_EINVAL`; a host name that does not resolve,
//! `-FI_EADDRNOTAVAIL`; with `FI_NUMERICHOST`, a host name is `-FI_EINVAL`, never resolved.
//!
//! libfabric's utility providers that build `FI_EP_RDM` over a core's datagram or connected
//! endpoints (ofi_rxd, ofi_rxm) get `-FI_ENODATA` ([`OFI_CORE_PROV_ONLY`]): the provider's
//! `FI_EP_RDM` is the NIC's own, and no software RDM is layered in front of it.
//!
//! Everything the answer points to is allocated with `malloc`, as `fi_freeinfo` frees it.

use crate::abi::*;
use crate::ep::{
    FI_DELIVERY_COMPLETE, FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE, IOV_LIMIT, MAX_MSG_BYTES,
    MSG_BUF_BYTES,
};
use crate::{entry, null, PROVIDER_NAME, PROVIDER_VERSION};
use core::ffi::{c_char, c_int, c_void, CStr};
use std::net::IpAddr;
use uet_av::addr_str::{AddrStr, Node, Service, ADDR_STR_SCHEME};
use uet_av::{
    job_id_from_auth_key, system_resolver, AddrFormat, AvType, DomainAttr, FiErrno, FiError,
    AUTH_KEY_BYTES, FI_AV_USER_ID, FI_SHARED_AV,
};
use uet_driver::Nic;
use uet_fwif::datapath::MAX_INJECT_BYTES;
use uet_fwif::UetAddress;

/// `FI_RECV`.
const FI_RECV_CAP: u64 = 1 << 10;
/// `FI_LOCAL_COMM`: peers on the same NIC.
const FI_LOCAL_COMM: u64 = 1 << 51;
/// `FI_REMOTE_COMM`: peers on other NICs.
const FI_REMOTE_COMM: u64 = 1 << 52;

/// `fi_info.caps` the provider offers: messages (`FI_MSG`, `FI_TAGGED`, `FI_SEND`, `FI_RECV`), their
/// sources (`FI_SOURCE`), multi-receive buffers (`FI_MULTI_RECV`), peers on this NIC and
/// others, the AV's capabilities, and on
/// `FI_EP_RDM` receive contexts a sender names (`FI_NAMED_RX_CTX`: [`crate::sep`]).
pub const PROVIDER_CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_SEND
    | FI_RECV_CAP
    | FI_SOURCE_CAP
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM
    | FI_SHARED_AV
    | FI_AV_USER_ID
    | FI_NAMED_RX_CTX
    | FI_MULTI_RECV;

/// Default transmit flags (`tx_attr->op_flags`) the provider honours: `FI_COMPLETION`
/// (the flag an endpoint's flagless sends take), `FI_INJECT` (every send copies its buffer)
/// and the completion levels a send always meets.
pub(crate) const TX_OP_FLAGS: u64 =
    FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
/// The completion levels only a reliable endpoint meets (`fi_cq(3)`): a datagram's send
/// completes once the packet is on the wire, `FI_TRANSMIT_COMPLETE` as it is for unreliable
/// endpoints.
pub(crate) const RELIABLE_ONLY_FLAGS: u64 = FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE;
/// `FI_MATCH_COMPLETE`.
pub(crate) const FI_MATCH_COMPLETE: u64 = 1 << 31;
/// Default receive flags (`rx_attr->op_flags`) the provider honours: `FI_COMPLETION`,
/// `FI_TRANSMIT_COMPLETE`, which fi_msg(3) gives receives and which every receive meets (its
/// completion is written once the data is in the buffer), as `fi_recvmsg` takes it, and
/// `FI_MULTI_RECV`: the flagless untagged receives (`fi_recv`, `fi_recvv`) post
/// multi-receive buffers (fi_tagged(3) has no multi-receive tagged receive, so `fi_trecv`
/// ignores it).
pub(crate) const RX_OP_FLAGS: u64 = FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_MULTI_RECV;

/// `FI_THREAD_ENDPOINT`: the last `enum fi_threading` value.
const FI_THREAD_ENDPOINT: c_int = 5;
/// `FI_PROGRESS_MANUAL`: the last `enum fi_progress` value.
const FI_PROGRESS_MANUAL: c_int = 2;

/// `FI_PROV_SPECIFIC` (`rdma/fabric.h`): the bit that marks a provider's own value of a
/// libfabric enumeration.
const FI_PROV_SPECIFIC: u32 = 1 << 31;
/// `FI_PROTO_UNSPEC`: any protocol.
const FI_PROTO_UNSPEC: u32 = 0;
/// `ep_attr->protocol`: UET (PDS and SES over UDP, as the NIC speaks it). libfabric 1.17's
/// `FI_PROTO_*` values name no UET protocol, so it is a provider-specific one, its top bit
/// `FI_PROV_SPECIFIC` as fi_endpoint(3) has it, and "UET" in ASCII below.
pub const PROTOCOL: u32 = FI_PROV_SPECIFIC | 0x0055_4554;
/// `ep_attr->protocol_version`: the first.
pub const PROTOCOL_VERSION: u32 = 1;

/// Bytes of remote CQ data a message carries (`domain_attr->cq_data_size`): the 64 bits of
/// `fi_senddata` and `fi_injectdata`.
const CQ_DATA_SIZE: usize = 8;

/// The primary capabilities the provider offers (`FI_MSG`, `FI_TAGGED`, `FI_NAMED_RX_CTX`).
const PRIMARY_CAPS: u64 = FI_MSG | FI_TAGGED | FI_NAMED_RX_CTX;
/// The capabilities of a transmit context (`tx_attr->caps`, fi_endpoint(3)) the provider
/// offers: sending messages, and naming a peer's receive context (`FI_EP_RDM`).
pub(crate) const TX_CAPS: u64 = FI_MSG | FI_TAGGED | FI_SEND | FI_NAMED_RX_CTX;
/// The capabilities of a receive context (`rx_attr->caps`) the provider offers: receiving
/// messages, their sources, and multi-receive buffers.
const RX_CAPS: u64 = FI_MSG | FI_TAGGED | FI_RECV_CAP | FI_SOURCE_CAP | FI_MULTI_RECV;
/// Receive capabilities in `tx_attr->caps` that mean nothing for a transmit context, and which
/// fi_getinfo passes over, as libfabric's own providers do: applications that copy the whole
/// `caps` into both attributes (older libfabric code did) are answered.
const IGNORED_TX_CAPS: u64 = FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_RECV_CAP
    | FI_DIRECTED_RECV
    | FI_VARIABLE_MSG
    | FI_MULTI_RECV
    | FI_SOURCE_CAP
    | FI_RMA_EVENT
    | FI_SOURCE_ERR;
/// Send capabilities in `rx_attr->caps` that mean nothing for a receive context, passed over
/// as [`IGNORED_TX_CAPS`] are.
const IGNORED_RX_CAPS: u64 =
    FI_READ | FI_WRITE | FI_SEND | FI_FENCE | FI_MULTICAST | FI_NAMED_RX_CTX;
/// The primary capabilities of messages of either kind.
const MESSAGE_CAPS: u64 = FI_MSG | FI_TAGGED;
/// Their modifiers: the directions (`FI_SEND`, `FI_RECV`).
const DIRECTION_CAPS: u64 = FI_SEND | FI_RECV_CAP;

/// The answer's `caps` for hints asking `wanted`: every capability when they ask none;
/// otherwise only the primary capabilities they name, as `fi_getinfo(3)` has it (messages
/// of both kinds, `FI_MSG` and `FI_TAGGED`, when they name none of those), in the directions
/// they name (both when they name neither), and the secondary capabilities, which a
/// provider may report unasked. `FI_NAMED_RX_CTX` is there only when named.
fn answer_caps(wanted: u64) -> u64 {
    if wanted == 0 {
        return PROVIDER_CAPS;
    }
    // Named receive contexts modify messages: asked alone, they are of every kind.
    let primary = match wanted & PRIMARY_CAPS {
        0 => MESSAGE_CAPS,
        FI_NAMED_RX_CTX => MESSAGE_CAPS | FI_NAMED_RX_CTX,
        named => named,
    };
    let directions = match wanted & DIRECTION_CAPS {
        0 => DIRECTION_CAPS,
        named => named,
    };
    primary | directions | (PROVIDER_CAPS & !(PRIMARY_CAPS | DIRECTION_CAPS))
}

/// The domain capabilities (`domain_attr->caps`) the provider offers: peers on this NIC and
/// others, and named AVs. fi_domain(3) lists these three, and has every domain capability a
/// secondary one: answered when served (on `FI_EP_MSG` without `FI_SHARED_AV`, as the
/// `fi_info`'s caps, from which `fi_domain` takes the domain's), and refused when asked and
/// not served.
const DOMAIN_CAPS: u64 = FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV;

/// The answer's `caps` for an endpoint of `kind` and hints asking `wanted`: [`answer_caps`]
/// without what the type lacks (an AV's capabilities on `FI_EP_MSG`, named receive contexts
/// but on `FI_EP_RDM`).
fn kind_caps(kind: EpKind, wanted: u64) -> u64 {
    let mut caps = answer_caps(wanted);
    if kind == EpKind::Msg {
        caps &= !AV_CAPS;
    }
    if kind != EpKind::Rdm {
        caps &= !FI_NAMED_RX_CTX;
    }
    caps
}

/// What `FI_EP_MSG` endpoints lack: an AV's capabilities (they bind none) and a receive's
/// source (`FI_SOURCE`: the peer is the connection's, in no AV of the application's).
const AV_CAPS: u64 = FI_SHARED_AV | FI_AV_USER_ID | FI_SOURCE_CAP;

/// `FI_SOURCE` of `fi_getinfo`'s flags.
pub const FI_SOURCE: u64 = 1 << 57;

/// `FI_NUMERICHOST` of `fi_getinfo`'s flags: the node is an address, never a host name to
/// resolve.
pub const FI_NUMERICHOST: u64 = 1 << 55;

/// libfabric's own `OFI_CORE_PROV_ONLY` flag of `fi_getinfo` (`include/ofi.h`, the same bit
/// since 1.x began): a utility provider asking for a core provider to build on, as ofi_rxd
/// builds `FI_EP_RDM` over a core's `FI_EP_DGRAM` and ofi_rxm over its `FI_EP_MSG`.
pub const OFI_CORE_PROV_ONLY: u64 = 1 << 59;

/// The fabric's name (`fabric_attr->name`).
pub const FABRIC_NAME: &str = "uet";

/// The resource management `nic` gives (`domain_attr->resource_mgmt`): `FI_RM_ENABLED` from
/// host interface 1.17, whose NIC holds a message that arrives before its receive on its
/// unexpected list, and whose endpoints retry one that finds that list full
/// ([`crate::ep::retry_policy`]; fi_domain(3): with resource management a reliable
/// endpoint's message that finds no receive buffer is retried, not a transmit error);
/// `FI_RM_DISABLED` before,
/// when an untagged one fails at the sender with `FI_ENORX`.
pub(crate) fn resource_mgmt(nic: &Nic) -> c_int {
    if nic.identity().interface_minor >= uet_driver::nic::UNTAGGED_UNEXPECTED_INTERFACE_MINOR {
        FI_RM_ENABLED
    } else {
        FI_RM_DISABLED
    }
}

/// The domain's name on `nic` (`domain_attr->name`): `uet_` and its fabric address.
pub fn domain_name(nic: &Nic) -> String {
    format!("uet_{}", nic.fabric_addr())
}

/// The endpoint types the provider serves, in the order `fi_getinfo` answers them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EpKind {
    /// `FI_EP_RDM`: reliable unordered messages (UET's RUD) of up to the NIC's largest
    /// (`CAP_MAX_MSG`, at most [`MAX_MSG_BYTES`]), several packets each.
    #[default]
    Rdm,
    /// `FI_EP_DGRAM`: unreliable datagrams (UET's UUD) of one packet: at most the NIC's MTU.
    /// A send completes when its packet is on the wire; an untagged datagram that finds no
    /// receive buffer (or any that finds no endpoint, or a full unexpected list) is dropped
    /// at the target and never reported to the sender; a tagged one waits on the NIC's
    /// unexpected list for its receive.
    Dgram,
    /// `FI_EP_MSG`: a connected endpoint ([`crate::pep`], `fi_connect`, `fi_accept`), reliable
    /// messages of up to the NIC's largest (as `FI_EP_RDM`) to its one peer; it binds an EQ
    /// and no AV.
    Msg,
}

impl EpKind {
    /// Every type, in answer order.
    pub const ALL: [EpKind; 3] = [EpKind::Rdm, EpKind::Dgram, EpKind::Msg];

    /// The type an `ep_attr->type` names: `Ok(None)` for `FI_EP_UNSPEC` (any), `Err` for
    /// one that is no endpoint type.
    pub fn from_raw(raw: c_int) -> Result<Option<EpKind>, String> {
        match raw {
            FI_EP_UNSPEC => Ok(None),
            FI_EP_RDM => Ok(Some(EpKind::Rdm)),
            FI_EP_DGRAM => Ok(Some(EpKind::Dgram)),
            FI_EP_MSG => Ok(Some(EpKind::Msg)),
            t => Err(format!("ep_attr->type {t} is no fi_ep_type")),
        }
    }

    /// Its `enum fi_ep_type`.
    pub fn to_raw(self) -> c_int {
        match self {
            EpKind::Rdm => FI_EP_RDM,
            EpKind::Dgram => FI_EP_DGRAM,
            EpKind::Msg => FI_EP_MSG,
        }
    }

    /// The driver's endpoint type.
    pub fn driver(self) -> uet_driver::EpType {
        match self {
            EpKind::Rdm => uet_driver::EpType::Rdm,
            EpKind::Dgram => uet_driver::EpType::Dgram,
            EpKind::Msg => uet_driver::EpType::Msg,
        }
    }

    /// Its name in `fi_info` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            EpKind::Rdm => "FI_EP_RDM",
            EpKind::Dgram => "FI_EP_DGRAM",
            EpKind::Msg => "FI_EP_MSG",
        }
    }

    /// The largest message (`ep_attr->max_msg_size`) on `nic`: the NIC's (`CAP_MAX_MSG`), at
    /// most [`MAX_MSG_BYTES`]; for a datagram one packet, within a small message buffer.
    pub fn max_msg_size(self, nic: &Nic) -> usize {
        match self {
            EpKind::Rdm | EpKind::Msg => {
                MAX_MSG_BYTES.min(nic.capabilities().max_msg_size as usize)
            }
            EpKind::Dgram => MSG_BUF_BYTES.min(usize::from(nic.capabilities().mtu)),
        }
    }

    /// `tx_attr->inject_size` on `nic`: an inject slot's payload, within one message.
    pub fn inject_size(self, nic: &Nic) -> usize {
        MAX_INJECT_BYTES.min(self.max_msg_size(nic))
    }

    /// The transmit flags (`tx_attr->op_flags`) it honours.
    fn tx_op_flags(self) -> u64 {
        match self {
            EpKind::Rdm | EpKind::Msg => TX_OP_FLAGS,
            EpKind::Dgram => TX_OP_FLAGS & !RELIABLE_ONLY_FLAGS,
        }
    }
}

/// What an application asked for, read from its hints (all optional).
#[derive(Debug, Default)]
struct Wanted {
    /// `ep_attr->type`: `None` for any.
    ep_type: Option<EpKind>,
    /// `ep_attr->max_msg_size` and `tx_attr->inject_size`: 0 for any.
    max_msg_size: usize,
    /// `ep_attr->mem_tag_format`: 0 for any.
    mem_tag_format: u64,
    /// `fabric_attr->fabric`, `domain_attr->domain`: the open fabric and domain of the
    /// provider the answer is restricted to, and names.
    fabric: Option<core::ptr::NonNull<FidFabric>>,
    domain: Option<core::ptr::NonNull<FidDomain>>,
    inject_size: usize,
    caps: u64,
    /// `tx_attr->caps`, `rx_attr->caps`.
    tx_caps: u64,
    rx_caps: u64,
    /// `domain_attr->caps`.
    domain_caps: u64,
    addr_format: AddrFormat,
    av_type: AvType,
    ep_cnt: usize,
    max_ep_rx_ctx: usize,
    /// `domain_attr->max_ep_tx_ctx`: 0 for any.
    max_ep_tx_ctx: usize,
    /// `ep_attr->tx_ctx_cnt`, `rx_ctx_cnt`: 0 for one.
    tx_ctx_cnt: usize,
    rx_ctx_cnt: usize,
    job_id: Option<u32>,
    /// `ep_attr->auth_key` was asked (the domain's JobID, `job_id`): the answer's endpoint
    /// attributes carry it too.
    ep_auth_key: bool,
    /// `tx_attr->op_flags` and `rx_attr->op_flags`: the answer carries them, and an
    /// endpoint opened with it takes them as its flagless calls' flags.
    tx_op_flags: u64,
    rx_op_flags: u64,
}

/// A C string argument, `None` when NULL. `FI_EINVAL` when it is not UTF-8.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that stays valid for the returned lifetime.
pub(crate) unsafe fn c_str<'a>(s: *const c_char, what: &str) -> Result<Option<&'a str>, FiError> {
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: `s` is non-NULL and NUL-terminated, as the caller promises.
    let s = unsafe { CStr::from_ptr(s) };
    s.to_str()
        .map(Some)
        .map_err(|_| FiError::inval(format!("{what} is not UTF-8")))
}

/// Why the context counts of `ep` ask for what `fi_endpoint` does not open: more than one
/// transmit or receive context (a scalable endpoint: `fi_scalable_ep`) or a shared one
/// (`FI_SHARED_CONTEXT`, `SIZE_MAX`). 0 is the default, one context.
pub(crate) fn context_counts_refused(ep: &FiEpAttr) -> Option<String> {
    if let Some(why) = shared_context_refused(ep) {
        return Some(why);
    }
    let counts = [("tx_ctx_cnt", ep.tx_ctx_cnt), ("rx_ctx_cnt", ep.rx_ctx_cnt)];
    let (name, n) = counts.into_iter().find(|&(_, n)| n > 1)?;
    Some(format!(
        "ep_attr->{name} {n}: an endpoint of several contexts is a scalable endpoint \
         (fi_scalable_ep)"
    ))
}

/// Why the capabilities of `info` (`caps`, `tx_attr->caps`, `rx_attr->caps`) ask for more
/// than the provider serves on an endpoint of `kind`, which `fi_getinfo` never answers: an
/// `fi_info` edited since would open an endpoint that does not honour them (with
/// `FI_DIRECTED_RECV`, a receive would take messages of any source; with `FI_NAMED_RX_CTX`
/// on `FI_EP_DGRAM`, whose domain's AVs name no receive context, a send could name none).
///
/// # Safety
/// `info.tx_attr` and `info.rx_attr` are NULL or valid.
pub(crate) unsafe fn endpoint_caps_refused(info: &FiInfo, kind: EpKind) -> Option<String> {
    let lacks = info.caps & PROVIDER_CAPS & !kind_caps(kind, 0);
    if lacks != 0 {
        return Some(format!(
            "caps {:#x}: {} endpoints lack {lacks:#x} (FI_NAMED_RX_CTX is FI_EP_RDM's; \
             FI_EP_MSG endpoints bind no AV and report no source)",
            info.caps,
            kind.name()
        ));
    }
    if info.caps & !PROVIDER_CAPS != 0 {
        return Some(format!(
            "caps {:#x}: the provider serves {PROVIDER_CAPS:#x} (FI_MSG, FI_SEND, FI_RECV, \
             FI_SOURCE, FI_MULTI_RECV, FI_TAGGED, FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SHARED_AV, \
             FI_AV_USER_ID, FI_NAMED_RX_CTX)",
            info.caps
        ));
    }
    // SAFETY: NULL or valid, as the caller promises.
    let tx = unsafe { info.tx_attr.as_ref() }.map_or(0, |a| a.caps);
    // SAFETY: as above.
    let rx = unsafe { info.rx_attr.as_ref() }.map_or(0, |a| a.caps);
    if tx & !TX_CAPS != 0 || rx & !RX_CAPS != 0 {
        return Some(format!(
            "tx_attr->caps {tx:#x}, rx_attr->caps {rx:#x}: a transmit context serves \
             {TX_CAPS:#x}, a receive context {RX_CAPS:#x}"
        ));
    }
    None
}

/// Why the default flags of `info` (`tx_attr->op_flags`, `rx_attr->op_flags`), which an
/// endpoint of `kind` gives its flagless calls, are more than it honours, as `fi_getinfo`
/// refuses hints asking them: `FI_MATCH_COMPLETE`, which a flagless `fi_tsend` does not
/// meet.
///
/// # Safety
/// `info.tx_attr` and `info.rx_attr` are NULL or valid.
pub(crate) unsafe fn endpoint_op_flags_refused(info: &FiInfo, kind: EpKind) -> Option<String> {
    // SAFETY: NULL or valid, as the caller promises.
    let tx = unsafe { info.tx_attr.as_ref() }.map_or(0, |a| a.op_flags);
    let served = kind.tx_op_flags();
    if tx & !served != 0 {
        return Some(format!(
            "tx_attr->op_flags {tx:#x}: {} sends honour {served:#x}",
            kind.name()
        ));
    }
    // SAFETY: NULL or valid, as the caller promises.
    let rx = unsafe { info.rx_attr.as_ref() }.map_or(0, |a| a.op_flags);
    if rx & !RX_OP_FLAGS != 0 {
        return Some(format!(
            "rx_attr->op_flags {rx:#x}: receives honour {RX_OP_FLAGS:#x}"
        ));
    }
    // Every flagless receive would post a multi-receive buffer, which the endpoint's
    // capabilities then refuse.
    if rx & FI_MULTI_RECV != 0 && info.caps != 0 && info.caps & FI_MULTI_RECV == 0 {
        return Some(format!(
            "rx_attr->op_flags {rx:#x} hold FI_MULTI_RECV, which caps {:#x} leave out",
            info.caps
        ));
    }
    None
}

/// Why the sizes of `info` ask for more than an endpoint of `kind` on `nic` has, as
/// `fi_getinfo` answers them and refuses hints asking more: `tx_attr->size`, `iov_limit`,
/// `inject_size`, `rma_iov_limit` (no RMA), `rx_attr->size`, `iov_limit`,
/// `ep_attr->max_msg_size`. 0 asks for the provider's.
///
/// # Safety
/// `info.tx_attr`, `info.rx_attr` and `info.ep_attr` are NULL or valid.
pub(crate) unsafe fn endpoint_sizes_refused(
    info: &FiInfo,
    kind: EpKind,
    nic: &Nic,
) -> Option<String> {
    let defaults = nic.endpoint_defaults();
    let (tx_size, rx_size) = (1usize << defaults.tx_log2, 1usize << defaults.rx_log2);
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(tx) = unsafe { info.tx_attr.as_ref() } {
        let inject_size = kind.inject_size(nic);
        if tx.size > tx_size
            || tx.iov_limit > IOV_LIMIT
            || tx.inject_size > inject_size
            || tx.rma_iov_limit > 0
        {
            return Some(format!(
                "tx_attr (size {}, iov_limit {}, inject_size {}, rma_iov_limit {}) asks for \
                 more than {}'s (size {tx_size}, iov_limit {IOV_LIMIT}, inject_size \
                 {inject_size}, rma_iov_limit 0: no RMA)",
                tx.size,
                tx.iov_limit,
                tx.inject_size,
                tx.rma_iov_limit,
                kind.name()
            ));
        }
    }
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(rx) = unsafe { info.rx_attr.as_ref() } {
        if rx.size > rx_size || rx.iov_limit > IOV_LIMIT {
            return Some(format!(
                "rx_attr (size {}, iov_limit {}) asks for more than the provider's (size \
                 {rx_size}, iov_limit {IOV_LIMIT})",
                rx.size, rx.iov_limit
            ));
        }
    }
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(ep) = unsafe { info.ep_attr.as_ref() } {
        let max = kind.max_msg_size(nic);
        if ep.max_msg_size > max {
            return Some(format!(
                "ep_attr->max_msg_size {} is more than {}'s {max}",
                ep.max_msg_size,
                kind.name()
            ));
        }
    }
    None
}

/// Why `info` asks for an order (`tx_attr`, `rx_attr` `msg_order` and `comp_order`,
/// `ep_attr->max_order_*_size`) or a protocol (`ep_attr->protocol`, `protocol_version`) the
/// provider's endpoints do not have, as `fi_getinfo` refuses hints asking them: messages
/// travel unordered (RUD) over UET, and no RMA or atomic data is ordered.
///
/// # Safety
/// `info.tx_attr`, `info.rx_attr` and `info.ep_attr` are NULL or valid.
pub(crate) unsafe fn endpoint_order_refused(info: &FiInfo) -> Option<String> {
    // SAFETY: NULL or valid, as the caller promises.
    let tx = unsafe { info.tx_attr.as_ref() }.map_or((0, 0), |a| (a.msg_order, a.comp_order));
    // SAFETY: as above.
    let rx = unsafe { info.rx_attr.as_ref() }.map_or((0, 0), |a| (a.msg_order, a.comp_order));
    if tx != (0, 0) || rx != (0, 0) {
        return Some(format!(
            "tx_attr msg_order {:#x}, comp_order {:#x}, rx_attr msg_order {:#x}, comp_order \
             {:#x}: messages travel unordered (RUD) and complete as they are done",
            tx.0, tx.1, rx.0, rx.1
        ));
    }
    // SAFETY: NULL or valid, as the caller promises.
    let ep = unsafe { info.ep_attr.as_ref() }?;
    ep_protocol_or_order_refused(ep)
}

/// Why `ep` asks for a protocol other than UET, or an ordering of RMA or atomic data: what
/// both `fi_getinfo`'s hints and `fi_endpoint`'s info are refused for.
fn ep_protocol_or_order_refused(ep: &FiEpAttr) -> Option<String> {
    if ep.protocol != FI_PROTO_UNSPEC && ep.protocol != PROTOCOL {
        return Some(format!(
            "ep_attr->protocol {:#x}: the provider speaks UET ({PROTOCOL:#x})",
            ep.protocol
        ));
    }
    if ep.protocol_version > PROTOCOL_VERSION {
        return Some(format!(
            "ep_attr->protocol_version {} is more than the provider's {PROTOCOL_VERSION}",
            ep.protocol_version
        ));
    }
    let orders = [
        ("max_order_raw_size", ep.max_order_raw_size),
        ("max_order_war_size", ep.max_order_war_size),
        ("max_order_waw_size", ep.max_order_waw_size),
    ];
    let (name, n) = orders.into_iter().find(|&(_, n)| n > 0)?;
    Some(format!(
        "ep_attr->{name} {n}: no RMA or atomic data is ordered (the provider serves neither, \
         and its messages travel unordered)"
    ))
}

/// Why `ep` asks for a shared context (`FI_SHARED_CONTEXT`), which the provider does not
/// serve.
fn shared_context_refused(ep: &FiEpAttr) -> Option<String> {
    let counts = [("tx_ctx_cnt", ep.tx_ctx_cnt), ("rx_ctx_cnt", ep.rx_ctx_cnt)];
    let (name, _) = counts.into_iter().find(|&(_, n)| n == FI_SHARED_CONTEXT)?;
    Some(format!(
        "ep_attr->{name} is FI_SHARED_CONTEXT: the uet provider shares no contexts"
    ))
}

/// The most transmit and receive contexts a scalable endpoint on `nic` has: `CAP_EP`'s
/// (receive context `i` is resource index `ri_start + i`, so no more than an endpoint's
/// resource indices).
pub(crate) fn context_limits(nic: &Nic) -> (usize, usize) {
    let caps = nic.capabilities();
    // A peer names receive context i with the top `rx_ctx_bits` of an fi_addr_t
    // (fi_rx_addr), which an AV of this NIC decodes up to `CAP_AV.max_rx_ctx_bits`: a context
    // past them could be reached by no address.
    let addressable = 1usize
        .checked_shl(u32::from(caps.max_rx_ctx_bits))
        .unwrap_or(usize::MAX);
    (
        usize::from(caps.max_tx_ctx.max(1)),
        usize::from(caps.max_rx_ctx.max(1))
            .min(usize::from(caps.ri_per_endpoint.max(1)))
            .min(addressable),
    )
}

fn nodata(why: String) -> FiError {
    FiError::new(FiErrno::FI_ENODATA, format!("fi_getinfo: {why}"))
}

/// The address format an `fi_info.addr_format` names, `None` for one the provider does not
/// serve.
pub(crate) fn addr_format_of(raw: u32) -> Option<AddrFormat> {
    match raw {
        FI_FORMAT_UNSPEC => Some(AddrFormat::Uet),
        FI_ADDR_STR => Some(AddrFormat::Str),
        _ => None,
    }
}

/// What `fi_endpoint` and `fi_scalable_ep` (a `kind` endpoint, of a domain whose endpoints
/// are in `job_id`, on `nic`, opened at `api_version`) refuse of the `fi_info` they are
/// given, in one place: capabilities ([`endpoint_caps_refused`]), an order or a protocol
/// ([`endpoint_order_refused`]), sizes ([`endpoint_sizes_refused`]), the auth key
/// ([`endpoint_key_refused`]), default flags ([`endpoint_op_flags_refused`]) and the address
/// format. The address format it names when nothing is refused.
///
/// # Safety
/// `info.tx_attr`, `info.rx_attr` and `info.ep_attr` are NULL or valid.
pub(crate) unsafe fn endpoint_info_refused(
    info: &FiInfo,
    kind: EpKind,
    nic: &Nic,
    job_id: u32,
    api_version: u32,
) -> Result<AddrFormat, String> {
    // SAFETY: NULL or valid, as the caller promises, for each.
    let refused = unsafe {
        endpoint_caps_refused(info, kind)
            .or_else(|| endpoint_order_refused(info))
            .or_else(|| endpoint_sizes_refused(info, kind, nic))
            .or_else(|| endpoint_key_refused(info, job_id, api_version))
            .or_else(|| endpoint_op_flags_refused(info, kind))
    };
    match refused {
        Some(why) => Err(why),
        None => addr_format_of(info.addr_format).ok_or_else(|| {
            format!(
                "addr_format {} is not served (FI_FORMAT_UNSPEC, FI_ADDR_STR)",
                info.addr_format
            )
        }),
    }
}

/// The JobID a `domain_attr`'s auth key gives: `None` without a key; the reason, for the
/// caller's errno, when the key is not a 4-byte JobID of 24 bits.
///
/// # Safety
/// `d.auth_key` is NULL or holds `d.auth_key_size` bytes.
unsafe fn domain_job_id(d: &FiDomainAttr) -> Result<Option<u32>, String> {
    // SAFETY: the caller's promise.
    unsafe { auth_key_job_id("domain_attr", d.auth_key, d.auth_key_size) }
}

/// The JobID the auth key `key` of `size` bytes of `what` (`domain_attr`, `ep_attr`) gives:
/// `None` without a key; the reason, for the caller's errno, when the key is not a 4-byte
/// JobID of 24 bits.
///
/// # Safety
/// `key` is NULL or holds `size` bytes.
unsafe fn auth_key_job_id(what: &str, key: *const u8, size: usize) -> Result<Option<u32>, String> {
    match (size, key.is_null()) {
        (0, _) => Ok(None),
        (AUTH_KEY_BYTES, false) => {
            let mut bytes = [0u8; AUTH_KEY_BYTES];
            // SAFETY: `key` is non-NULL and holds `size` bytes (4), as the caller promises.
            unsafe { core::ptr::copy_nonoverlapping(key, bytes.as_mut_ptr(), bytes.len()) };
            job_id_from_auth_key(&bytes)
                .map(Some)
                .map_err(|e| format!("{what}->auth_key is no JobID: {e}"))
        }
        (size, _) => Err(format!(
            "{what}->auth_key_size {size} with auth_key {key:p}: the auth key is a \
             {AUTH_KEY_BYTES}-byte JobID"
        )),
    }
}

/// The first API version whose `struct fi_ep_attr` has an auth key (1.5): fi_endpoint(3) has
/// the field "ignored unless the fabric is opened with API version 1.5 or greater".
const EP_AUTH_KEY_API: u32 = fi_version(1, 5);

/// Why the endpoint auth key of `info` (`ep_attr->auth_key`) is none an endpoint of a domain
/// whose endpoints are given `job_id` may have: an endpoint takes its domain's JobID (fi_endpoint(3):
/// "The domain authorization key will be used if auth_key_size is set to 0"), so a key of its
/// own is served only when it is that one. `None` for no key or that one, and on a fabric
/// opened with an API (`api_version`) before 1.5, which has no such key to read.
///
/// # Safety
/// `info.ep_attr` is NULL or valid, its key NULL or holding its size in bytes.
pub(crate) unsafe fn endpoint_key_refused(
    info: &FiInfo,
    job_id: u32,
    api_version: u32,
) -> Option<String> {
    if api_version < EP_AUTH_KEY_API {
        return None;
    }
    // SAFETY: NULL or valid, as the caller promises.
    let ep = unsafe { info.ep_attr.as_ref() }?;
    // SAFETY: the key holds its size in bytes, as the caller promises.
    match unsafe { auth_key_job_id("ep_attr", ep.auth_key, ep.auth_key_size) } {
        Ok(None) => None,
        Ok(Some(own)) if own == job_id => None,
        Ok(Some(own)) => Some(format!(
            "ep_attr->auth_key JobID {own:#x}: an endpoint takes its domain's JobID {job_id:#x}"
        )),
        Err(why) => Some(why),
    }
}

/// Read the hints. `FI_ENODATA` for what the provider does not offer.
///
/// # Safety
/// `hints` is NULL or a valid `fi_info` whose attribute pointers are NULL or valid.
unsafe fn wanted(hints: *const FiInfo, nic: &Nic) -> Result<Wanted, FiError> {
    let mut w = Wanted::default();
    // SAFETY: NULL or valid, as the caller promises.
    let Some(h) = (unsafe { hints.as_ref() }) else {
        return Ok(w);
    };
    if h.caps & !PROVIDER_CAPS != 0 {
        return Err(nodata(format!(
            "caps {:#x} ask for more than {PROVIDER_CAPS:#x} (FI_MSG, FI_SEND, FI_RECV, \
             FI_SOURCE, FI_MULTI_RECV, FI_TAGGED, FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SHARED_AV, \
             FI_AV_USER_ID, FI_NAMED_RX_CTX)",
            h.caps
        )));
    }
    w.caps = h.caps;
    w.addr_format = addr_format_of(h.addr_format)
        .ok_or_else(|| nodata(format!("addr_format {} is not served", h.addr_format)))?;
    let defaults = nic.endpoint_defaults();
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(tx) = unsafe { h.tx_attr.as_ref() } {
        let served = TX_CAPS;
        let tx_caps = tx.caps & !IGNORED_TX_CAPS;
        if tx_caps & !served != 0
            || tx.size > 1 << defaults.tx_log2
            || tx.iov_limit > IOV_LIMIT
            || tx.inject_size > MAX_INJECT_BYTES.min(MSG_BUF_BYTES)
        {
            return Err(nodata(format!(
                "tx_attr (caps {:#x}, size {}, iov_limit {}, inject_size {}) asks for more \
                 than the provider's (caps {served:#x}, size {}, iov_limit {IOV_LIMIT}, \
                 inject_size {MAX_INJECT_BYTES})",
                tx.caps,
                tx.size,
                tx.iov_limit,
                tx.inject_size,
                1 << defaults.tx_log2
            )));
        }
        if tx.rma_iov_limit > 0 {
            return Err(nodata(format!(
                "tx_attr->rma_iov_limit {}: the provider serves no RMA",
                tx.rma_iov_limit
            )));
        }
        if tx.op_flags & !TX_OP_FLAGS != 0 {
            return Err(nodata(format!(
                "tx_attr->op_flags {:#x}: the provider honours {TX_OP_FLAGS:#x}",
                tx.op_flags
            )));
        }
        w.tx_op_flags = tx.op_flags;
        w.tx_caps = tx_caps;
        w.inject_size = tx.inject_size;
        if tx.msg_order != 0 || tx.comp_order != 0 {
            return Err(nodata(format!(
                "tx_attr msg_order {:#x}, comp_order {:#x}: messages travel unordered (RUD) \
                 and complete as their responses come back",
                tx.msg_order, tx.comp_order
            )));
        }
    }
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(rx) = unsafe { h.rx_attr.as_ref() } {
        let served = RX_CAPS;
        let rx_caps = rx.caps & !IGNORED_RX_CAPS;
        if rx_caps & !served != 0 || rx.size > 1 << defaults.rx_log2 || rx.iov_limit > IOV_LIMIT {
            return Err(nodata(format!(
                "rx_attr (caps {:#x}, size {}, iov_limit {}) asks for more than the \
                 provider's (caps {served:#x}, size {}, iov_limit {IOV_LIMIT})",
                rx.caps,
                rx.size,
                rx.iov_limit,
                1 << defaults.rx_log2
            )));
        }
        if rx.op_flags & !RX_OP_FLAGS != 0 {
            return Err(nodata(format!(
                "rx_attr->op_flags {:#x}: the provider honours {RX_OP_FLAGS:#x}",
                rx.op_flags
            )));
        }
        w.rx_op_flags = rx.op_flags;
        w.rx_caps = rx_caps;
        if rx.msg_order != 0 || rx.comp_order != 0 {
            return Err(nodata(format!(
                "rx_attr msg_order {:#x}, comp_order {:#x}: messages travel unordered (RUD)",
                rx.msg_order, rx.comp_order
            )));
        }
    }
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(ep) = unsafe { h.ep_attr.as_ref() } {
        if ep.max_msg_size > MAX_MSG_BYTES {
            return Err(nodata(format!(
                "ep_attr->max_msg_size {} is more than the provider's {MAX_MSG_BYTES}",
                ep.max_msg_size
            )));
        }
        w.ep_type = EpKind::from_raw(ep.ep_type).map_err(nodata)?;
        w.max_msg_size = ep.max_msg_size;
        w.mem_tag_format = ep.mem_tag_format;
        if let Some(why) = ep_protocol_or_order_refused(ep) {
            return Err(nodata(why));
        }
        if let Some(why) = shared_context_refused(ep) {
            return Err(nodata(why));
        }
        let (max_tx, max_rx) = context_limits(nic);
        if ep.tx_ctx_cnt > max_tx || ep.rx_ctx_cnt > max_rx {
            return Err(nodata(format!(
                "ep_attr->tx_ctx_cnt {}, rx_ctx_cnt {}: the NIC's endpoints have at most {max_tx} \
                 transmit and {max_rx} receive contexts",
                ep.tx_ctx_cnt, ep.rx_ctx_cnt
            )));
        }
        w.tx_ctx_cnt = ep.tx_ctx_cnt;
        w.rx_ctx_cnt = ep.rx_ctx_cnt;
    }
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(f) = unsafe { h.fabric_attr.as_ref() } {
        // fi_fabric(3): an opened fabric instance restricts the answer to that fabric.
        if let Some(fabric) = core::ptr::NonNull::new(f.fabric) {
            // SAFETY: an opened fabric instance (libfabric's contract), of any provider: a
            // live object starting with its `struct fid`, which alone is read of another's.
            unsafe { crate::fabric::fabric_ref(fabric.as_ptr()) }.map_err(|_| {
                nodata(format!(
                    "fabric_attr->fabric {fabric:p} is no open fabric of the uet provider"
                ))
            })?;
            w.fabric = Some(fabric);
        }
        // SAFETY: NULL or NUL-terminated strings of the hints.
        let name = unsafe { c_str(f.name, "fabric_attr->name") }?;
        if name.is_some_and(|n| n != FABRIC_NAME) {
            return Err(nodata(format!("fabric {name:?} is not {FABRIC_NAME}")));
        }
        // SAFETY: as above.
        let prov = unsafe { c_str(f.prov_name, "fabric_attr->prov_name") }?;
        // libfabric matches provider names without regard to case, and calls this provider
        // for "UET" as for "uet".
        if prov.is_some_and(|p| !p.eq_ignore_ascii_case(PROVIDER_NAME)) {
            return Err(nodata(format!("provider {prov:?} is not {PROVIDER_NAME}")));
        }
    }
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(d) = unsafe { h.domain_attr.as_ref() } {
        // fi_domain(3): an opened domain instance restricts the answer to that domain.
        if let Some(domain) = core::ptr::NonNull::new(d.domain) {
            // SAFETY: an opened domain instance (libfabric's contract), of any provider: a
            // live object starting with its `struct fid`, which alone is read of another's.
            let open = unsafe { crate::domain::domain_ref(domain.as_ptr(), "fi_getinfo") }
                .map_err(|_| {
                    nodata(format!(
                        "domain_attr->domain {domain:p} is no open domain of the uet provider"
                    ))
                })?;
            // A domain of another fabric than the one named is none of that fabric's.
            if let Some(fabric) = w.fabric {
                // SAFETY: checked above to be an open fabric of the provider.
                let f = unsafe { crate::fabric::fabric_ref(fabric.as_ptr()) }?;
                if !f.is(&open.fabric_tag()) {
                    return Err(nodata(format!(
                        "domain_attr->domain {domain:p} is no domain of fabric_attr->fabric \
                         {fabric:p}"
                    )));
                }
            }
            w.domain = Some(domain);
        }
        // SAFETY: NULL or a NUL-terminated string of the hints.
        let name = unsafe { c_str(d.name, "domain_attr->name") }?;
        let ours = domain_name(nic);
        if name.is_some_and(|n| n != ours) {
            return Err(nodata(format!("domain {name:?} is not {ours}")));
        }
        w.av_type = AvType::from_raw(d.av_type)
            .ok_or_else(|| nodata(format!("av_type {} is no fi_av_type", d.av_type)))?;
        // FI_THREAD_SAFE and FI_PROGRESS_AUTO serve every model the hints may name, and
        // either resource management model is served (FI_RM_ENABLED where the NIC holds
        // early messages, below): a value no model has names none the provider serves.
        let models = [
            ("threading", d.threading, FI_THREAD_ENDPOINT),
            ("control_progress", d.control_progress, FI_PROGRESS_MANUAL),
            ("data_progress", d.data_progress, FI_PROGRESS_MANUAL),
            ("resource_mgmt", d.resource_mgmt, FI_RM_ENABLED),
        ];
        if let Some((name, v, _)) = models
            .into_iter()
            .find(|&(_, v, last)| !(0..=last).contains(&v))
        {
            return Err(nodata(format!(
                "domain_attr->{name} {v} is no value of its enumeration"
            )));
        }
        if d.resource_mgmt == FI_RM_ENABLED && resource_mgmt(nic) != FI_RM_ENABLED {
            return Err(nodata(format!(
                "resource_mgmt FI_RM_ENABLED: the NIC (host interface 1.{}) refuses a message \
                 that arrives before its receive, where 1.{} holds it",
                nic.identity().interface_minor,
                uet_driver::nic::UNTAGGED_UNEXPECTED_INTERFACE_MINOR
            )));
        }
        if d.caps & !DOMAIN_CAPS != 0 {
            return Err(nodata(format!(
                "domain_attr->caps {:#x} ask for more than {DOMAIN_CAPS:#x} (FI_LOCAL_COMM, \
                 FI_REMOTE_COMM, FI_SHARED_AV)",
                d.caps
            )));
        }
        w.domain_caps = d.caps;
        let limits = nic.av_limits();
        w.ep_cnt = d.ep_cnt;
        w.max_ep_rx_ctx = d.max_ep_rx_ctx;
        if w.ep_cnt as u64 > u64::from(limits.max_endpoints) {
            return Err(nodata(format!(
                "ep_cnt {} is more than the NIC's {} endpoints",
                w.ep_cnt, limits.max_endpoints
            )));
        }
        let queues = hardware_queues(nic);
        let counts = [
            ("cq_cnt", d.cq_cnt),
            ("tx_ctx_cnt", d.tx_ctx_cnt),
            ("rx_ctx_cnt", d.rx_ctx_cnt),
        ];
        if let Some((name, n)) = counts.into_iter().find(|&(_, n)| n > queues) {
            return Err(nodata(format!(
                "domain_attr->{name} {n} is more than the NIC's {queues} (one completion, \
                 transmit and receive ring per endpoint)"
            )));
        }
        if d.cntr_cnt > crate::cntr::CNTR_CNT {
            return Err(nodata(format!(
                "domain_attr->cntr_cnt {} is more than the provider's {} counters per domain",
                d.cntr_cnt,
                crate::cntr::CNTR_CNT
            )));
        }
        // `fi_mr_reg` is -FI_ENOSYS: a domain of the provider registers no memory.
        let registrations = [
            ("mr_key_size", d.mr_key_size),
            ("mr_cnt", d.mr_cnt),
            ("mr_iov_limit", d.mr_iov_limit),
        ];
        if let Some((name, n)) = registrations.into_iter().find(|&(_, n)| n > 0) {
            return Err(nodata(format!(
                "domain_attr->{name} {n}: the provider registers no memory regions"
            )));
        }
        if d.cq_data_size > CQ_DATA_SIZE {
            return Err(nodata(format!(
                "cq_data_size {} is more than the provider's {CQ_DATA_SIZE}",
                d.cq_data_size
            )));
        }
        if d.max_err_data > crate::MAX_ERR_DATA {
            return Err(nodata(format!(
                "max_err_data {} is more than the provider's {}",
                d.max_err_data,
                crate::MAX_ERR_DATA
            )));
        }
        if d.max_ep_stx_ctx > 0 || d.max_ep_srx_ctx > 0 {
            return Err(nodata(format!(
                "max_ep_stx_ctx {}, max_ep_srx_ctx {}: the uet provider shares no contexts",
                d.max_ep_stx_ctx, d.max_ep_srx_ctx
            )));
        }
        let (max_tx, _) = context_limits(nic);
        if d.max_ep_tx_ctx > max_tx {
            return Err(nodata(format!(
                "max_ep_tx_ctx {} is more than the NIC's {max_tx}",
                d.max_ep_tx_ctx
            )));
        }
        w.max_ep_tx_ctx = d.max_ep_tx_ctx;
        // Receive context i is resource index ri_start + i: no more than an endpoint has.
        let (_, max_rx) = context_limits(nic);
        if w.max_ep_rx_ctx > max_rx {
            return Err(nodata(format!(
                "max_ep_rx_ctx {} is more than the {max_rx} receive contexts a NIC endpoint \
                 can have",
                w.max_ep_rx_ctx
            )));
        }
        // SAFETY: the hints' key holds its size in bytes (libfabric's contract).
        w.job_id = unsafe { domain_job_id(d) }.map_err(nodata)?;
    }
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(ep) = unsafe { h.ep_attr.as_ref() } {
        // SAFETY: the hints' key holds its size in bytes (libfabric's contract).
        let ep_job_id =
            unsafe { auth_key_job_id("ep_attr", ep.auth_key, ep.auth_key_size) }.map_err(nodata)?;
        // An endpoint is given its domain's JobID (`fi_endpoint` reads no key of its own):
        // an endpoint key is served when it is that one, and answered as asked.
        if let Some(job_id) = ep_job_id {
            if w.job_id != Some(job_id) {
                return Err(nodata(format!(
                    "ep_attr->auth_key JobID {job_id:#x}: an endpoint takes its domain's auth \
                     key, and domain_attr->auth_key names {}",
                    w.job_id
                        .map_or_else(|| "none".to_owned(), |d| format!("JobID {d:#x}"))
                )));
            }
            w.ep_auth_key = true;
        }
    }
    // An endpoint of more contexts than the domain lets an endpoint have: no answer is both.
    for (name, n, max_name, max) in [
        ("tx_ctx_cnt", w.tx_ctx_cnt, "max_ep_tx_ctx", w.max_ep_tx_ctx),
        ("rx_ctx_cnt", w.rx_ctx_cnt, "max_ep_rx_ctx", w.max_ep_rx_ctx),
    ] {
        if max != 0 && n > max {
            return Err(nodata(format!(
                "ep_attr->{name} {n} is more than domain_attr->{max_name} {max}"
            )));
        }
    }
    Ok(w)
}

/// The NIC's completion, transmit and receive queues (`domain_attr->cq_cnt`, `tx_ctx_cnt`,
/// `rx_ctx_cnt`): one of each per endpoint the NIC holds (`CAP_EP`). A CQ of the provider
/// gathers the completion rings of the endpoints bound to it, so more CQs than this may be
/// opened; fi_domain(3) has these counts say what the hardware serves without sharing.
fn hardware_queues(nic: &Nic) -> usize {
    usize::from(nic.capabilities().endpoints)
}

/// Why `kind` cannot answer `w` on `nic`: what the hints ask of the endpoint type itself.
fn kind_refused(kind: EpKind, w: &Wanted, nic: &Nic) -> Option<String> {
    let name = kind.name();
    if w.ep_type.is_some_and(|t| t != kind) {
        return Some(format!("{name} is not the ep_attr->type asked for"));
    }
    if w.max_msg_size > kind.max_msg_size(nic) {
        return Some(format!(
            "ep_attr->max_msg_size {} is more than {name}'s {}",
            w.max_msg_size,
            kind.max_msg_size(nic)
        ));
    }
    if w.inject_size > kind.inject_size(nic) {
        return Some(format!(
            "tx_attr->inject_size {} is more than {name}'s {}",
            w.inject_size,
            kind.inject_size(nic)
        ));
    }
    let several = [w.tx_ctx_cnt, w.rx_ctx_cnt, w.max_ep_tx_ctx, w.max_ep_rx_ctx]
        .into_iter()
        .any(|n| n > 1);
    if kind != EpKind::Rdm && (several || (w.caps | w.tx_caps) & FI_NAMED_RX_CTX != 0) {
        return Some(format!(
            "{name} endpoints have one transmit and one receive context (scalable endpoints \
             and FI_NAMED_RX_CTX are FI_EP_RDM's)"
        ));
    }
    // fi_endpoint(3): a context's capabilities "must be a subset of those requested of the
    // associated endpoint"; what the answer's endpoint leaves out, its contexts cannot have.
    let caps = kind_caps(kind, w.caps);
    let (tx, rx) = (w.tx_caps & !(TX_CAPS & caps), w.rx_caps & !(RX_CAPS & caps));
    if tx | rx != 0 {
        return Some(format!(
            "tx_attr->caps {:#x}, rx_attr->caps {:#x}: {name}'s answer to caps {:#x} leaves \
             out {tx:#x} of the transmit and {rx:#x} of the receive capabilities",
            w.tx_caps, w.rx_caps, w.caps
        ));
    }
    if kind == EpKind::Msg && (w.caps | w.domain_caps) & AV_CAPS != 0 {
        return Some(format!(
            "caps {:#x}: {name} endpoints bind no AV (FI_SHARED_AV, FI_AV_USER_ID) and \
             report no source (FI_SOURCE)",
            (w.caps | w.domain_caps) & AV_CAPS
        ));
    }
    let flags = w.tx_op_flags & !kind.tx_op_flags();
    if flags != 0 {
        return Some(format!(
            "tx_attr->op_flags {flags:#x}: {name} sends do not meet them (FI_DELIVERY_COMPLETE \
             applies to reliable endpoints only)"
        ));
    }
    None
}

/// The tag format (`ep_attr->mem_tag_format`) answering `asked` (0: any). Every bit of the
/// 64-bit tag is matched, so none is ignored: the fields asked for are kept, the first (top)
/// widened to the top bit, as fi_endpoint(3) lets a provider widen fields, so that the
/// answer has as many fields as asked, each at least as wide.
fn tag_format(asked: u64) -> u64 {
    match asked.leading_zeros() {
        0 => asked,
        64 => u64::MAX,
        n => asked | !(u64::MAX >> n),
    }
}

/// The AV type the provider serves for `t`: `FI_AV_MAP` is a table, in a domain and in
/// `fi_av_open` alike, so that an application that asked for a map and was answered
/// `FI_AV_TABLE` opens the `FI_AV_MAP` AV it asked for, and one that names either type in one
/// place and the other in the other is not refused for a difference that does not exist.
pub(crate) fn served_av_type(t: AvType) -> AvType {
    match t {
        AvType::Map => AvType::Table,
        t => t,
    }
}

/// The domain an `fi_info` the provider gave describes (`fi_domain` opens it).
///
/// # Safety
/// `info` is a valid `fi_info` whose attribute pointers are NULL or valid.
pub(crate) unsafe fn domain_attr(info: &FiInfo) -> Result<DomainAttr, FiError> {
    let addr_format = addr_format_of(info.addr_format).ok_or_else(|| {
        FiError::inval(format!(
            "fi_domain: addr_format {} is not served",
            info.addr_format
        ))
    })?;
    // Without an auth key the domain's endpoints and AVs share the driver's default JobID,
    // so that its AV entries name the job its endpoints accept.
    let mut attr = DomainAttr {
        // Not FI_AV_USER_ID: the driver's domain takes that capability as libfabric 1.20
        // does (user ids set with fi_av_set_user_id only, the per-insert flag refused), and
        // the 1.17 ABI this provider serves has no fi_av_set_user_id: there the capability
        // means the per-insert flag, which a domain without it keeps.
        caps: info.caps & PROVIDER_CAPS & !FI_AV_USER_ID,
        addr_format,
        job_id: uet_driver::EndpointAttr::default().job_id,
        ..DomainAttr::default()
    };
    // SAFETY: NULL or valid, as the caller promises.
    if let Some(d) = unsafe { info.domain_attr.as_ref() } {
        attr.av_type = AvType::from_raw(d.av_type)
            .map(served_av_type)
            .ok_or_else(|| {
                FiError::inval(format!("fi_domain: av_type {} is no fi_av_type", d.av_type))
            })?;
        attr.ep_cnt = d.ep_cnt;
        attr.max_ep_rx_ctx = d.max_ep_rx_ctx;
        // SAFETY: the info's key holds its size in bytes (libfabric's contract).
        let job_id = unsafe { domain_job_id(d) }
            .map_err(|why| FiError::inval(format!("fi_domain: {why}")))?;
        if let Some(job_id) = job_id {
            attr.job_id = job_id;
            attr.auth_key_size = AUTH_KEY_BYTES;
        }
    }
    Ok(attr)
}

/// Whether `node` is an address in the `FI_ADDR_STR` form (`uet://<node>/<service>`), which
/// fi_getinfo(3) lets an application pass as the node, with a NULL service.
fn is_addr_str(node: &str) -> bool {
    node.starts_with(ADDR_STR_SCHEME)
}

/// The address `node` and `service` name: an IP address or host name and a service, or an
/// `FI_ADDR_STR` address and no service, as `fi_av_insertsvc` takes them. `FI_EINVAL` when
/// either is missing or malformed, or a service is given beside an `FI_ADDR_STR` node; with
/// `numeric` (`FI_NUMERICHOST`), for a host name, which fi_getinfo(3) has the flag keep from
/// any "lengthy name resolution protocol".
fn address(
    node: Option<&str>,
    service: Option<&str>,
    numeric: bool,
) -> Result<UetAddress, FiError> {
    if let Some(node) = node.filter(|n| is_addr_str(n)) {
        if let Some(service) = service {
            return Err(FiError::inval(format!(
                "fi_getinfo: node {node} is an FI_ADDR_STR address, so service must be NULL, \
                 not {service:?}"
            )));
        }
        if numeric {
            // The strict form: IP literals only, the resolver never asked.
            return node.parse::<AddrStr>().map(|a| a.0);
        }
        return uet_av::addr_str::parse_addr_str_with(node, system_resolver);
    }
    let (Some(node), Some(service)) = (node, service) else {
        return Err(FiError::inval(format!(
            "fi_getinfo: node {node:?} and service {service:?}: a UET address needs both \
             (an IP address or host name, and the PIDonFEP)"
        )));
    };
    let ip = match Node::parse(node)? {
        Node::Name(name) if numeric => {
            return Err(FiError::inval(format!(
                "fi_getinfo: node {name} is a host name, and FI_NUMERICHOST asks for a numeric \
                 address"
            )))
        }
        n => n.resolve(system_resolver)?,
    };
    Service::parse(service)?.at(ip)
}

/// `a` in `format`, in `malloc`'d memory: its 32 bytes, or its NUL-terminated string.
fn c_address(a: &UetAddress, format: AddrFormat) -> Result<(*mut c_void, usize), FiError> {
    let bytes: Vec<u8> = match format {
        AddrFormat::Uet => a
            .to_bytes()
            .map_err(|e| FiError::inval(format!("address {a}: {e}")))?
            .to_vec(),
        AddrFormat::Str => {
            let mut s = a.to_string().into_bytes();
            s.push(0);
            s
        }
    };
    let p = c_alloc_bytes(&bytes)?;
    Ok((p, bytes.len()))
}

/// `bytes` copied into `malloc`'d memory. `FI_ENOMEM` when there is none.
pub(crate) fn c_alloc_bytes(bytes: &[u8]) -> Result<*mut c_void, FiError> {
    // SAFETY: malloc of at least one byte; NULL is checked.
    let p = unsafe { libc::malloc(bytes.len().max(1)) };
    if p.is_null() {
        return Err(FiError::new(
            FiErrno::FI_ENOMEM,
            "fi_getinfo: out of memory",
        ));
    }
    // SAFETY: `p` holds `bytes.len()` bytes and does not overlap `bytes`.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len()) };
    Ok(p)
}

/// `s` as a `malloc`'d C string.
fn c_strdup(s: &str) -> Result<*mut c_char, FiError> {
    let mut bytes = s.as_bytes().to_vec();
    bytes.push(0);
    c_alloc_bytes(&bytes).map(|p| p.cast())
}

/// A zeroed `T` from `calloc`. `FI_ENOMEM` when there is none.
fn c_zeroed<T>() -> Result<*mut T, FiError> {
    // SAFETY: calloc of one T; NULL is checked. Every structure of `abi` is valid all zero
    // (integers and NULL pointers).
    let p = unsafe { libc::calloc(1, core::mem::size_of::<T>()) };
    if p.is_null() {
        return Err(FiError::new(
            FiErrno::FI_ENOMEM,
            "fi_getinfo: out of memory",
        ));
    }
    Ok(p.cast())
}

/// Free an `fi_info` chain as `fi_freeinfo` does, for the provider's own error paths and
/// tests (an application calls `fi_freeinfo`).
///
/// # Safety
/// `info` is NULL or a chain this module allocated, not freed yet.
pub unsafe fn free_info(mut info: *mut FiInfo) {
    while !info.is_null() {
        // SAFETY: a valid fi_info of ours; every pointer in it is NULL or malloc'd by us.
        unsafe {
            let i = &mut *info;
            let next = i.next;
            libc::free(i.src_addr);
            libc::free(i.dest_addr);
            libc::free(i.tx_attr.cast());
            libc::free(i.rx_attr.cast());
            if let Some(ep) = i.ep_attr.as_mut() {
                libc::free(ep.auth_key.cast());
            }
            libc::free(i.ep_attr.cast());
            if let Some(d) = i.domain_attr.as_mut() {
                libc::free(d.name.cast());
                libc::free(d.auth_key.cast());
            }
            libc::free(i.domain_attr.cast());
            if let Some(f) = i.fabric_attr.as_mut() {
                libc::free(f.name.cast());
                libc::free(f.prov_name.cast());
            }
            libc::free(i.fabric_attr.cast());
            libc::free(info.cast());
            info = next;
        }
    }
}

/// Fill `info` (zeroed, ours) with what the provider offers on `nic` for `w`.
///
/// # Safety
/// `info` is a zeroed `fi_info` this module allocated.
unsafe fn fill(
    info: *mut FiInfo,
    nic: &Nic,
    kind: EpKind,
    w: &Wanted,
    src: Option<&UetAddress>,
    dest: Option<&UetAddress>,
) -> Result<(), FiError> {
    // SAFETY: valid and ours, as the caller promises.
    let i = unsafe { &mut *info };
    i.caps = kind_caps(kind, w.caps);
    i.mode = 0;
    i.addr_format = match w.addr_format {
        AddrFormat::Uet => FI_FORMAT_UNSPEC,
        AddrFormat::Str => FI_ADDR_STR,
    };
    if let Some(a) = src {
        (i.src_addr, i.src_addrlen) = c_address(a, w.addr_format)?;
    }
    if let Some(a) = dest {
        (i.dest_addr, i.dest_addrlen) = c_address(a, w.addr_format)?;
    }
    i.tx_attr = c_zeroed()?;
    i.rx_attr = c_zeroed()?;
    i.ep_attr = c_zeroed()?;
    i.domain_attr = c_zeroed()?;
    i.fabric_attr = c_zeroed()?;
    let limits = nic.av_limits();
    // SAFETY: all five were just allocated, zeroed, and are ours.
    unsafe {
        let defaults = nic.endpoint_defaults();
        let tx = &mut *i.tx_attr;
        tx.caps = TX_CAPS & i.caps;
        tx.inject_size = kind.inject_size(nic);
        tx.size = 1 << defaults.tx_log2;
        tx.iov_limit = IOV_LIMIT;
        tx.op_flags = w.tx_op_flags;
        let rx = &mut *i.rx_attr;
        rx.caps = RX_CAPS & i.caps;
        rx.size = 1 << defaults.rx_log2;
        rx.iov_limit = IOV_LIMIT;
        rx.op_flags = w.rx_op_flags;
        let ep = &mut *i.ep_attr;
        ep.ep_type = kind.to_raw();
        ep.protocol = PROTOCOL;
        ep.protocol_version = PROTOCOL_VERSION;
        ep.max_msg_size = kind.max_msg_size(nic);
        ep.mem_tag_format = tag_format(w.mem_tag_format);
        ep.tx_ctx_cnt = w.tx_ctx_cnt.max(1);
        ep.rx_ctx_cnt = w.rx_ctx_cnt.max(1);
        if let Some(job_id) = w.job_id.filter(|_| w.ep_auth_key) {
            let key = uet_av::job_id_to_auth_key(job_id);
            ep.auth_key = c_alloc_bytes(&key)?.cast();
            ep.auth_key_size = key.len();
        }
        let d = &mut *i.domain_attr;
        d.domain = w
            .domain
            .map_or(core::ptr::null_mut(), core::ptr::NonNull::as_ptr);
        d.name = c_strdup(&domain_name(nic))?;
        d.threading = FI_THREAD_SAFE;
        d.control_progress = FI_PROGRESS_AUTO;
        d.data_progress = FI_PROGRESS_AUTO;
        d.resource_mgmt = resource_mgmt(nic);
        d.av_type = AvType::Table.to_raw();
        // No mode bit: messages go through the provider's own buffers, so nothing needs to be
        // registered, and the provider serves no memory regions yet.
        d.mr_mode = 0;
        d.cq_data_size = CQ_DATA_SIZE;
        d.ep_cnt = if w.ep_cnt == 0 {
            limits.max_endpoints as usize
        } else {
            w.ep_cnt
        };
        d.max_ep_tx_ctx = match (kind, w.max_ep_tx_ctx) {
            (EpKind::Rdm, 0) => context_limits(nic).0,
            (EpKind::Rdm, n) => n,
            _ => 1,
        };
        let queues = hardware_queues(nic);
        (d.cq_cnt, d.tx_ctx_cnt, d.rx_ctx_cnt) = (queues, queues, queues);
        d.cntr_cnt = crate::cntr::CNTR_CNT;
        d.max_err_data = crate::MAX_ERR_DATA;
        d.max_ep_rx_ctx = match (kind, w.max_ep_rx_ctx) {
            (EpKind::Rdm, 0) => context_limits(nic).1,
            (EpKind::Rdm, n) => n,
            _ => 1,
        };
        d.caps = i.caps & DOMAIN_CAPS;
        if let Some(job_id) = w.job_id {
            let key = uet_av::job_id_to_auth_key(job_id);
            d.auth_key = c_alloc_bytes(&key)?.cast();
            d.auth_key_size = key.len();
        }
        let f = &mut *i.fabric_attr;
        f.fabric = w
            .fabric
            .map_or(core::ptr::null_mut(), core::ptr::NonNull::as_ptr);
        f.name = c_strdup(FABRIC_NAME)?;
        // Left NULL: libfabric names the provider that answered. A provider that names
        // itself here is taken for a layered one, and its name prefixed again ("uet;uet").
        f.prov_version = PROVIDER_VERSION;
        f.api_version = FI_PROVIDER_API;
    }
    Ok(())
}

/// What a passive endpoint's `fi_info` asked for, which the `fi_info` of each of its
/// `FI_CONNREQ` events repeats, so that the accepting endpoint is opened as the listener was.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListenInfo {
    caps: u64,
    addr_format: AddrFormat,
    job_id: Option<u32>,
    tx_op_flags: u64,
    rx_op_flags: u64,
    /// `ep_attr->mem_tag_format` (0: any), which the requests' `fi_info` answer as
    /// `fi_getinfo` did.
    mem_tag_format: u64,
    /// `src_addr`: the address the application asked the listener to have.
    src: Option<UetAddress>,
}

impl ListenInfo {
    /// The address the listener's `fi_info` asked for (`src_addr`), if any.
    pub(crate) fn src(&self) -> Option<&UetAddress> {
        self.src.as_ref()
    }

    /// The JobID the listener takes connection requests in: the `fi_info`'s auth key, or the
    /// driver's default (the one a domain without an auth key gives its endpoints).
    pub(crate) fn job_id(&self) -> u32 {
        self.job_id
            .unwrap_or(uet_driver::EndpointAttr::default().job_id)
    }

    /// The address format of the listener's `fi_info`.
    pub(crate) fn addr_format(&self) -> AddrFormat {
        self.addr_format
    }
}

/// `len` when a buffer may be that long: none is above `isize::MAX` bytes, which a length
/// an application meant as negative (an `ssize_t` passed as a `size_t`) is, and of which no
/// slice may be made.
fn buffer_len(len: usize) -> Option<usize> {
    isize::try_from(len).is_ok().then_some(len)
}

/// The address `info` asks its endpoint to have (`src_addr`, as `fi_getinfo` gives it for
/// `FI_SOURCE` with a node or service), read in `addr_format`; `None` when it names none.
/// `FI_EINVAL` for one that does not parse.
///
/// # Safety
/// `info` is a valid `fi_info`: `src_addrlen` readable bytes at `src_addr`, or NULL.
pub(crate) unsafe fn src_addr(
    info: &FiInfo,
    addr_format: AddrFormat,
    call: &str,
) -> Result<Option<UetAddress>, FiError> {
    Ok(if info.src_addr.is_null() || info.src_addrlen == 0 {
        None
    } else {
        let len = buffer_len(info.src_addrlen)
            .ok_or_else(|| FiError::inval(format!("{call}: src_addrlen {}", info.src_addrlen)))?;
        // SAFETY: `src_addrlen` readable bytes at `src_addr` (the caller's promise), which no
        // buffer holds above `isize::MAX` (checked).
        let bytes = unsafe { core::slice::from_raw_parts(info.src_addr.cast::<u8>(), len) };
        let a = match addr_format {
            AddrFormat::Uet => UetAddress::from_bytes(bytes)
                .map_err(|e| FiError::inval(format!("{call}: src_addr: {e}")))?,
            AddrFormat::Str => {
                let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
                let text = core::str::from_utf8(text)
                    .map_err(|_| FiError::inval(format!("{call}: src_addr is not UTF-8")))?;
                uet_av::addr_str::parse_addr_str_with(text, system_resolver)?
            }
        };
        Some(a)
    })
}

/// `fi_passive_ep`: what `info` asks of a listener. `FI_EINVAL` for an `fi_info` that is not
/// of `FI_EP_MSG`, or whose address format or auth key the provider does not serve.
///
/// # Safety
/// `info` is a valid `fi_info` whose attribute pointers are NULL or valid.
pub(crate) unsafe fn listen_info(
    info: &FiInfo,
    api_version: u32,
    call: &str,
) -> Result<ListenInfo, FiError> {
    // SAFETY: NULL or valid (the caller's promise).
    let ep_attr = unsafe { info.ep_attr.as_ref() };
    let ep_type = ep_attr.map_or(FI_EP_UNSPEC, |a| a.ep_type);
    if EpKind::from_raw(ep_type).map_err(|why| FiError::inval(format!("{call}: {why}")))?
        != Some(EpKind::Msg)
    {
        return Err(FiError::inval(format!(
            "{call}: ep_attr->type {ep_type}: a passive endpoint is of FI_EP_MSG"
        )));
    }
    let addr_format = addr_format_of(info.addr_format).ok_or_else(|| {
        FiError::inval(format!(
            "{call}: addr_format {} is not served",
            info.addr_format
        ))
    })?;
    // SAFETY: NULL or valid (the caller's promise).
    let job_id = match unsafe { info.domain_attr.as_ref() } {
        Some(d) => {
            // SAFETY: the info's key holds its size in bytes (libfabric's contract).
            unsafe { domain_job_id(d) }.map_err(|why| FiError::inval(format!("{call}: {why}")))?
        }
        None => None,
    };
    let listener_job = job_id.unwrap_or(uet_driver::EndpointAttr::default().job_id);
    // SAFETY: as above.
    if let Some(why) = unsafe { endpoint_key_refused(info, listener_job, api_version) } {
        return Err(FiError::inval(format!("{call}: {why}")));
    }
    // SAFETY: as above.
    let src = unsafe { src_addr(info, addr_format, call) }?;
    Ok(ListenInfo {
        src,
        caps: info.caps & PROVIDER_CAPS & !AV_CAPS,
        addr_format,
        job_id,
        // SAFETY: NULL or valid (the caller's promise).
        tx_op_flags: unsafe { info.tx_attr.as_ref() }.map_or(0, |a| a.op_flags) & TX_OP_FLAGS,
        // SAFETY: as above.
        rx_op_flags: unsafe { info.rx_attr.as_ref() }.map_or(0, |a| a.op_flags) & RX_OP_FLAGS,
        mem_tag_format: ep_attr.map_or(0, |a| a.mem_tag_format),
    })
}

/// The `fi_info` of an `FI_CONNREQ` event: an `FI_EP_MSG` answer as the listener's `fi_info`
/// asked (`listen`), `dest_addr` the requester's address, `handle` the request. Allocated as
/// `fi_getinfo`'s answers are (the application frees it with `fi_freeinfo`); unlike theirs,
/// it names the provider (`fabric_attr->prov_name`), which libfabric fills only in the
/// answers of `fi_getinfo`.
pub(crate) fn connreq_info(
    nic: &Nic,
    listen: &ListenInfo,
    requester: &UetAddress,
    handle: *mut Fid,
) -> Result<*mut FiInfo, FiError> {
    let w = Wanted {
        caps: listen.caps,
        addr_format: listen.addr_format,
        job_id: listen.job_id,
        tx_op_flags: listen.tx_op_flags,
        rx_op_flags: listen.rx_op_flags,
        mem_tag_format: listen.mem_tag_format,
        ..Wanted::default()
    };
    let info = c_zeroed::<FiInfo>()?;
    // SAFETY: `info` was just allocated, zeroed, and is ours.
    let filled =
        unsafe { fill(info, nic, EpKind::Msg, &w, None, Some(requester)) }.and_then(|()| {
            // SAFETY: filled: its fabric_attr is ours, allocated.
            unsafe {
                (*info).handle = handle;
                (*(*info).fabric_attr).prov_name = c_strdup(PROVIDER_NAME)?;
            }
            Ok(())
        });
    if let Err(e) = filled {
        // SAFETY: ours, partly filled, not handed out.
        unsafe { free_info(info) };
        return Err(e);
    }
    Ok(info)
}

/// `fi_provider.getinfo`.
///
/// # Safety
/// libfabric's contract: `node`, `service` NULL or strings, `hints` NULL or a valid `fi_info`,
/// `info` a valid place for the answer.
pub(crate) unsafe extern "C" fn uet_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
    info: *mut *mut FiInfo,
) -> c_int {
    entry("fi_getinfo", || {
        if info.is_null() {
            return Err(null("fi_getinfo", "info"));
        }
        if fi_major(version) != fi_major(FI_PROVIDER_API) {
            return Err(nodata(format!(
                "API {}.{} is not this provider's major version",
                fi_major(version),
                fi_minor(version)
            )));
        }
        // The provider's FI_EP_RDM is the NIC's: reliability, tag matching and the AV's
        // translation on the NIC. A utility provider's RDM over its datagram or connected
        // endpoints would put software reliability and a host-side peer table in front of
        // that, and would offer what the NIC's RDM does not (RMA emulated over datagrams) to
        // applications that should be told -FI_ENODATA.
        if flags & OFI_CORE_PROV_ONLY != 0 {
            return Err(nodata(
                "a utility provider asks for a core to layer FI_EP_RDM on; the uet provider's \
                 FI_EP_RDM is the NIC's own, and it is no core for ofi_rxd or ofi_rxm"
                    .into(),
            ));
        }
        // fi_getinfo(3): with FI_SOURCE, "either the node and/or service parameter must be
        // non-NULL".
        if flags & FI_SOURCE != 0 && node.is_null() && service.is_null() {
            return Err(FiError::inval(
                "fi_getinfo: FI_SOURCE with neither node nor service: the source is named by \
                 one of them",
            ));
        }
        let nic = crate::device::nic()?;
        // SAFETY: libfabric's contract on `hints`.
        let mut w = unsafe { wanted(hints, &nic) }?;
        (w.fabric, w.domain) = crate::domain::answer_instances(w.fabric, w.domain);
        // SAFETY: libfabric's contract on `node` and `service`.
        let (node, service) = unsafe { (c_str(node, "node")?, c_str(service, "service")?) };
        // fi_getinfo(3): the hints' src_addr "will be ignored in hints if FI_SOURCE flag is
        // set", and their dest_addr "unless the node and service parameters are NULL or
        // FI_SOURCE flag is set": what node and service name instead is never refused for
        // the address it replaces.
        let named = node.is_some() || service.is_some();
        let numeric = flags & FI_NUMERICHOST != 0;
        let read = Read {
            src: flags & FI_SOURCE == 0,
            dest: !named || flags & FI_SOURCE != 0,
        };
        // SAFETY: libfabric's contract on `hints`.
        let (mut src, mut dest) = unsafe { hint_addresses(hints, read, &w, &nic) }?;
        if named {
            if flags & FI_SOURCE != 0 {
                let ours = nic.fabric_addr();
                let node = node.map(str::to_owned).unwrap_or_else(|| ours.to_string());
                // An FI_ADDR_STR node is a whole address (its service is NULL); an IP address
                // or host name is one with the service, or names this NIC alone without one.
                let whole = is_addr_str(&node) || service.is_some();
                let service = if is_addr_str(&node) {
                    service
                } else {
                    service.or(Some("0"))
                };
                let a = address(Some(&node), service, numeric)?;
                if a.fabric_addr != ours && !same_ip(a.fabric_addr, ours) {
                    return Err(nodata(format!(
                        "FI_SOURCE node {node} is not this NIC's fabric address {ours}"
                    )));
                }
                src = whole.then_some(a);
            } else {
                dest = Some(address(node, service, numeric)?);
            }
        }
        let (kinds, refused): (Vec<_>, Vec<_>) = EpKind::ALL
            .iter()
            .map(|&k| (k, kind_refused(k, &w, &nic)))
            .partition(|(_, why)| why.is_none());
        if kinds.is_empty() {
            let why: Vec<String> = refused.into_iter().filter_map(|(_, why)| why).collect();
            return Err(nodata(why.join("; ")));
        }
        // One answer per endpoint type, linked in the order of `EpKind::ALL`.
        let mut out: *mut FiInfo = core::ptr::null_mut();
        for &(kind, _) in kinds.iter().rev() {
            let filled = c_zeroed::<FiInfo>().and_then(|i| {
                // SAFETY: `i` was just allocated, zeroed; `out` is NULL or our chain.
                unsafe { (*i).next = out };
                out = i;
                // SAFETY: as above.
                unsafe { fill(i, &nic, kind, &w, src.as_ref(), dest.as_ref()) }
            });
            if let Err(e) = filled {
                // SAFETY: ours, partly filled, not handed out.
                unsafe { free_info(out) };
                return Err(e);
            }
        }
        // SAFETY: `info` is non-NULL and writable (libfabric's contract).
        unsafe { *info = out };
        Ok(0)
    })
}

/// Which of the hints' addresses `fi_getinfo` reads: those its flags, node and service leave
/// in force.
#[derive(Clone, Copy, Debug)]
struct Read {
    /// `src_addr`.
    src: bool,
    /// `dest_addr`.
    dest: bool,
}

/// The source and destination addresses the hints give (`src_addr`, `dest_addr`, each only
/// where `read` says), in the hints' address format: `FI_ENODATA` for a source that is not on
/// this NIC, `FI_EINVAL` for an address that does not parse or a length that is not its
/// format's.
///
/// # Safety
/// `hints` is NULL or a valid `fi_info` whose addresses hold their lengths in bytes.
unsafe fn hint_addresses(
    hints: *const FiInfo,
    read: Read,
    w: &Wanted,
    nic: &Nic,
) -> Result<(Option<UetAddress>, Option<UetAddress>), FiError> {
    // SAFETY: NULL or valid (the caller's promise).
    let Some(h) = (unsafe { hints.as_ref() }) else {
        return Ok((None, None));
    };
    let parse = |p: *mut c_void, len: usize, what: &str| -> Result<Option<UetAddress>, FiError> {
        if p.is_null() || len == 0 {
            return Ok(None);
        }
        let len = buffer_len(len)
            .ok_or_else(|| FiError::inval(format!("fi_getinfo: hints {what}len {len}")))?;
        // SAFETY: `len` readable bytes at `p` (the caller's promise), which no buffer holds
        // above `isize::MAX` (checked).
        let bytes = unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) };
        let a = match w.addr_format {
            AddrFormat::Uet => UetAddress::from_bytes(bytes)
                .map_err(|e| FiError::inval(format!("fi_getinfo: hints {what}: {e}")))?,
            AddrFormat::Str => {
                let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
                let text = core::str::from_utf8(text).map_err(|_| {
                    FiError::inval(format!("fi_getinfo: hints {what} is not UTF-8"))
                })?;
                uet_av::addr_str::parse_addr_str_with(text, system_resolver)?
            }
        };
        Ok(Some(a))
    };
    let src = if read.src {
        parse(h.src_addr, h.src_addrlen, "src_addr")?
    } else {
        None
    };
    if let Some(a) = &src {
        let ours = nic.fabric_addr();
        if !same_ip(a.fabric_addr, ours) {
            return Err(nodata(format!(
                "hints src_addr {a} is not on this NIC ({ours})"
            )));
        }
    }
    let dest = if read.dest {
        parse(h.dest_addr, h.dest_addrlen, "dest_addr")?
    } else {
        None
    };
    Ok((src, dest))
}

/// Whether `a` and `b` are one address (an IPv4 address and its IPv6-mapped form are).
pub(crate) fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}
