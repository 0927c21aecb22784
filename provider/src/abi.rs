//! libfabric's C ABI, as the provider sees it: the structures of `rdma/fabric.h`,
//! `rdma/fi_domain.h` and `rdma/providers/fi_prov.h` of libfabric 1.17 that this provider
//! fills in or reads, field for field, and the constants it uses.
//!
//! Only what the provider touches is declared; a structure it only passes on (an `fi_cq_attr`,
//! an `fi_mr_attr`) is a `c_void` pointer. `tests/libfabric.rs` checks every size and offset here
//! against the system's headers with the C compiler.
//!
//! Each object libfabric hands back to the provider starts with its `struct fid` (`fid_fabric`,
//! `fid_domain`, `fid_av` all do), and the provider's object starts with that structure, so a
//! `struct fid *` and the provider's object have one address.

// The fields are libfabric's, named as in its headers, where they are documented.
#![allow(missing_docs)]

use core::ffi::{c_char, c_int, c_void};

/// `fi_addr_t`.
pub type FiAddr = u64;

/// `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// `FI_MAJOR(version)`.
pub const fn fi_major(version: u32) -> u32 {
    version >> 16
}

/// `FI_MINOR(version)`.
pub const fn fi_minor(version: u32) -> u32 {
    version & 0xffff
}

/// The libfabric API this provider is built for: 1.17, the oldest libfabric with every call
/// it serves. libfabric loads a provider whose API is its own or older within one major
/// version, and offers it to an application that asks for this API or an older one.
pub const FI_PROVIDER_API: u32 = fi_version(1, 17);

// `enum fi_fclass` (fabric.h).
/// `FI_CLASS_FABRIC`.
pub const FI_CLASS_FABRIC: usize = 1;
/// `FI_CLASS_DOMAIN`.
pub const FI_CLASS_DOMAIN: usize = 2;
/// `FI_CLASS_AV`.
pub const FI_CLASS_AV: usize = 11;

// `enum fi_ep_type`.
/// `FI_EP_UNSPEC`.
pub const FI_EP_UNSPEC: c_int = 0;
/// `FI_EP_MSG`.
pub const FI_EP_MSG: c_int = 1;
/// `FI_EP_DGRAM`.
pub const FI_EP_DGRAM: c_int = 2;
/// `FI_EP_RDM`.
pub const FI_EP_RDM: c_int = 3;

/// `FI_SHARED_CONTEXT`: a context count asking for a shared context.
pub const FI_SHARED_CONTEXT: usize = usize::MAX;

// `enum fi_threading`, `enum fi_progress`, `enum fi_resource_mgmt`.
/// `FI_THREAD_SAFE`: every object may be used by any thread at any time.
pub const FI_THREAD_SAFE: c_int = 1;
/// `FI_PROGRESS_AUTO`.
pub const FI_PROGRESS_AUTO: c_int = 1;
/// `FI_RM_DISABLED`.
pub const FI_RM_DISABLED: c_int = 1;
/// `FI_RM_ENABLED`.
pub const FI_RM_ENABLED: c_int = 2;

// Address formats (`FI_FORMAT_UNSPEC`: the provider's own, here the 32-byte UET address).
/// `FI_FORMAT_UNSPEC`.
pub const FI_FORMAT_UNSPEC: u32 = 0;
/// `FI_ADDR_STR`.
pub const FI_ADDR_STR: u32 = 9;

/// `FI_MR_PROV_KEY` of `mr_mode`.
pub const FI_MR_PROV_KEY: c_int = 1 << 6;

/// `struct fi_context`.
#[repr(C)]
pub struct FiContext {
    pub internal: [*mut c_void; 4],
}

/// `struct fid`.
#[repr(C)]
pub struct Fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *mut FiOps,
}

/// `struct fi_ops`: what every object answers.
#[repr(C)]
pub struct FiOps {
    pub size: usize,
    pub close: unsafe extern "C" fn(fid: *mut Fid) -> c_int,
    pub bind: unsafe extern "C" fn(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int,
    pub control: unsafe extern "C" fn(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int,
    pub ops_open: unsafe extern "C" fn(
        fid: *mut Fid,
        name: *const c_char,
        flags: u64,
        ops: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
    pub tostr: unsafe extern "C" fn(fid: *const Fid, buf: *mut c_char, len: usize) -> c_int,
    pub ops_set: unsafe extern "C" fn(
        fid: *mut Fid,
        name: *const c_char,
        flags: u64,
        ops: *mut c_void,
        context: *mut c_void,
    ) -> c_int,
}

/// `struct fi_tx_attr`.
#[repr(C)]
pub struct FiTxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

/// `struct fi_rx_attr`.
#[repr(C)]
pub struct FiRxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

/// `struct fi_ep_attr`.
#[repr(C)]
pub struct FiEpAttr {
    pub ep_type: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
}

/// `struct fi_domain_attr`.
#[repr(C)]
pub struct FiDomainAttr {
    pub domain: *mut FidDomain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
}

/// `struct fi_fabric_attr`.
#[repr(C)]
pub struct FiFabricAttr {
    pub fabric: *mut FidFabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

/// `struct fi_info`.
#[repr(C)]
pub struct FiInfo {
    pub next: *mut FiInfo,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut Fid,
    pub tx_attr: *mut FiTxAttr,
    pub rx_attr: *mut FiRxAttr,
    pub ep_attr: *mut FiEpAttr,
    pub domain_attr: *mut FiDomainAttr,
    pub fabric_attr: *mut FiFabricAttr,
    pub nic: *mut c_void,
}

/// `fi_provider.getinfo`.
pub type GetinfoFn = unsafe extern "C" fn(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
    info: *mut *mut FiInfo,
) -> c_int;

/// `fi_provider.fabric`.
pub type FabricFn = unsafe extern "C" fn(
    attr: *mut FiFabricAttr,
    fabric: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int;

/// `struct fi_provider` (`rdma/providers/fi_prov.h`): what `fi_prov_ini` returns.
#[repr(C)]
pub struct FiProvider {
    pub version: u32,
    pub fi_version: u32,
    pub context: FiContext,
    pub name: *const c_char,
    pub getinfo: GetinfoFn,
    pub fabric: FabricFn,
    pub cleanup: unsafe extern "C" fn(),
}

/// `struct fi_ops_fabric`.
#[repr(C)]
pub struct FiOpsFabric {
    pub size: usize,
    pub domain: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        info: *mut FiInfo,
        domain: *mut *mut FidDomain,
        context: *mut c_void,
    ) -> c_int,
    pub passive_ep: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        info: *mut FiInfo,
        pep: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
    pub eq_open: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        attr: *mut FiEqAttr,
        eq: *mut *mut FidEq,
        context: *mut c_void,
    ) -> c_int,
    pub wait_open: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        attr: *mut c_void,
        waitset: *mut *mut c_void,
    ) -> c_int,
    pub trywait:
        unsafe extern "C" fn(fabric: *mut FidFabric, fids: *mut *mut Fid, count: c_int) -> c_int,
    pub domain2: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        info: *mut FiInfo,
        domain: *mut *mut FidDomain,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
}

/// `struct fid_fabric`.
#[repr(C)]
pub struct FidFabric {
    pub fid: Fid,
    pub ops: *mut FiOpsFabric,
    pub api_version: u32,
}

/// The signature of the `fi_ops_domain` entries this provider does not serve: every one takes
/// the domain, an attribute or info pointer, an out pointer and a context (or flags).
pub type DomainOpenFn = unsafe extern "C" fn(
    domain: *mut FidDomain,
    attr: *mut c_void,
    out: *mut *mut c_void,
    context: *mut c_void,
) -> c_int;

/// `struct fi_ops_domain`.
#[repr(C)]
pub struct FiOpsDomain {
    pub size: usize,
    pub av_open: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut FiAvAttr,
        av: *mut *mut FidAv,
        context: *mut c_void,
    ) -> c_int,
    pub cq_open: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut FiCqAttr,
        cq: *mut *mut FidCq,
        context: *mut c_void,
    ) -> c_int,
    pub endpoint: DomainOpenFn,
    pub scalable_ep: DomainOpenFn,
    pub cntr_open: DomainOpenFn,
    pub poll_open: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut c_void,
        pollset: *mut *mut c_void,
    ) -> c_int,
    pub stx_ctx: DomainOpenFn,
    pub srx_ctx: DomainOpenFn,
    pub query_atomic: unsafe extern "C" fn(
        domain: *mut FidDomain,
        datatype: c_int,
        op: c_int,
        attr: *mut c_void,
        flags: u64,
    ) -> c_int,
    pub query_collective: unsafe extern "C" fn(
        domain: *mut FidDomain,
        coll: c_int,
        attr: *mut c_void,
        flags: u64,
    ) -> c_int,
    pub endpoint2: unsafe extern "C" fn(
        domain: *mut FidDomain,
        info: *mut FiInfo,
        ep: *mut *mut c_void,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
}

/// `struct fi_ops_mr`.
#[repr(C)]
pub struct FiOpsMr {
    pub size: usize,
    pub reg: unsafe extern "C" fn(
        fid: *mut Fid,
        buf: *const c_void,
        len: usize,
        access: u64,
        offset: u64,
        requested_key: u64,
        flags: u64,
        mr: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
    pub regv: unsafe extern "C" fn(
        fid: *mut Fid,
        iov: *const c_void,
        count: usize,
        access: u64,
        offset: u64,
        requested_key: u64,
        flags: u64,
        mr: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
    pub regattr: unsafe extern "C" fn(
        fid: *mut Fid,
        attr: *const c_void,
        flags: u64,
        mr: *mut *mut c_void,
    ) -> c_int,
}

/// `struct fid_domain`.
#[repr(C)]
pub struct FidDomain {
    pub fid: Fid,
    pub ops: *mut FiOpsDomain,
    pub mr: *mut FiOpsMr,
}

/// `struct fi_av_attr`.
#[repr(C)]
pub struct FiAvAttr {
    pub av_type: c_int,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

/// `struct fi_ops_av`.
#[repr(C)]
pub struct FiOpsAv {
    pub size: usize,
    pub insert: unsafe extern "C" fn(
        av: *mut FidAv,
        addr: *const c_void,
        count: usize,
        fi_addr: *mut FiAddr,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
    pub insertsvc: unsafe extern "C" fn(
        av: *mut FidAv,
        node: *const c_char,
        service: *const c_char,
        fi_addr: *mut FiAddr,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
    pub insertsym: unsafe extern "C" fn(
        av: *mut FidAv,
        node: *const c_char,
        nodecnt: usize,
        service: *const c_char,
        svccnt: usize,
        fi_addr: *mut FiAddr,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
    pub remove: unsafe extern "C" fn(
        av: *mut FidAv,
        fi_addr: *mut FiAddr,
        count: usize,
        flags: u64,
    ) -> c_int,
    pub lookup: unsafe extern "C" fn(
        av: *mut FidAv,
        fi_addr: FiAddr,
        addr: *mut c_void,
        addrlen: *mut usize,
    ) -> c_int,
    pub straddr: unsafe extern "C" fn(
        av: *mut FidAv,
        addr: *const c_void,
        buf: *mut c_char,
        len: *mut usize,
    ) -> *const c_char,
    pub av_set: unsafe extern "C" fn(
        av: *mut FidAv,
        attr: *mut FiAvSetAttr,
        av_set: *mut *mut FidAvSet,
        context: *mut c_void,
    ) -> c_int,
}

/// `struct fid_av`.
#[repr(C)]
pub struct FidAv {
    pub fid: Fid,
    pub ops: *mut FiOpsAv,
}

/// `FI_CLASS_EQ`.
pub const FI_CLASS_EQ: usize = 13;

/// `fi_control` command `FI_GETWAIT`: the wait object (for `FI_WAIT_FD`, an `int` descriptor).
pub const FI_GETWAIT: c_int = 5;
/// `fi_control` command `FI_GETWAITOBJ`: the `enum fi_wait_obj` of the object.
pub const FI_GETWAITOBJ: c_int = 16;

// `enum fi_wait_obj`.
/// `FI_WAIT_NONE`.
pub const FI_WAIT_NONE: c_int = 0;
/// `FI_WAIT_UNSPEC`.
pub const FI_WAIT_UNSPEC: c_int = 1;
/// `FI_WAIT_SET`: a wait set (`wait_set`).
pub const FI_WAIT_SET: c_int = 2;
/// `FI_WAIT_FD`.
pub const FI_WAIT_FD: c_int = 3;
/// `FI_WAIT_MUTEX_COND`.
pub const FI_WAIT_MUTEX_COND: c_int = 4;
/// `struct fi_mutex_cond`: what `fi_control(FI_GETWAIT)` writes for `FI_WAIT_MUTEX_COND`.
#[repr(C)]
pub struct FiMutexCond {
    pub mutex: *mut libc::pthread_mutex_t,
    pub cond: *mut libc::pthread_cond_t,
}
/// `FI_WAIT_YIELD`.
pub const FI_WAIT_YIELD: c_int = 5;
/// `FI_WAIT_POLLFD`.
pub const FI_WAIT_POLLFD: c_int = 6;

/// `struct fi_eq_attr`.
#[repr(C)]
pub struct FiEqAttr {
    pub size: usize,
    pub flags: u64,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_set: *mut c_void,
}

/// `struct fi_eq_entry`.
#[repr(C)]
pub struct FiEqEntry {
    pub fid: *mut Fid,
    pub context: *mut c_void,
    pub data: u64,
}

/// `struct fi_eq_cm_entry`: the connection events' entry (`FI_CONNREQ`, `FI_CONNECTED`,
/// `FI_SHUTDOWN`); the connection's data follows it in the application's buffer.
#[repr(C)]
pub struct FiEqCmEntry {
    pub fid: *mut Fid,
    pub info: *mut FiInfo,
}

/// `FI_CLASS_PEP`.
pub const FI_CLASS_PEP: usize = 9;
/// `FI_CLASS_CONNREQ`.
pub const FI_CLASS_CONNREQ: usize = 18;

/// `struct fid_pep`.
#[repr(C)]
pub struct FidPep {
    pub fid: Fid,
    pub ops: *mut FiOpsEp,
    pub cm: *mut FiOpsCm,
}

/// `struct fi_eq_err_entry`.
#[repr(C)]
pub struct FiEqErrEntry {
    pub fid: *mut Fid,
    pub context: *mut c_void,
    pub data: u64,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

/// `struct fi_ops_eq`.
#[repr(C)]
pub struct FiOpsEq {
    pub size: usize,
    pub read: unsafe extern "C" fn(
        eq: *mut FidEq,
        event: *mut u32,
        buf: *mut c_void,
        len: usize,
        flags: u64,
    ) -> isize,
    pub readerr: unsafe extern "C" fn(eq: *mut FidEq, buf: *mut FiEqErrEntry, flags: u64) -> isize,
    pub write: unsafe extern "C" fn(
        eq: *mut FidEq,
        event: u32,
        buf: *const c_void,
        len: usize,
        flags: u64,
    ) -> isize,
    pub sread: unsafe extern "C" fn(
        eq: *mut FidEq,
        event: *mut u32,
        buf: *mut c_void,
        len: usize,
        timeout: c_int,
        flags: u64,
    ) -> isize,
    pub strerror: unsafe extern "C" fn(
        eq: *mut FidEq,
        prov_errno: c_int,
        err_data: *const c_void,
        buf: *mut c_char,
        len: usize,
    ) -> *const c_char,
}

/// `struct fid_eq`.
#[repr(C)]
pub struct FidEq {
    pub fid: Fid,
    pub ops: *mut FiOpsEq,
}

/// `FI_CLASS_AV_SET`.
pub const FI_CLASS_AV_SET: usize = 21;

/// `struct fi_av_set_attr`.
#[repr(C)]
pub struct FiAvSetAttr {
    pub count: usize,
    pub start_addr: FiAddr,
    pub end_addr: FiAddr,
    pub stride: u64,
    pub comm_key_size: usize,
    pub comm_key: *mut u8,
    pub flags: u64,
}

/// `struct fi_ops_av_set` (`rdma/fi_collective.h`).
#[repr(C)]
pub struct FiOpsAvSet {
    pub size: usize,
    pub set_union: unsafe extern "C" fn(dst: *mut FidAvSet, src: *const FidAvSet) -> c_int,
    pub intersect: unsafe extern "C" fn(dst: *mut FidAvSet, src: *const FidAvSet) -> c_int,
    pub diff: unsafe extern "C" fn(dst: *mut FidAvSet, src: *const FidAvSet) -> c_int,
    pub insert: unsafe extern "C" fn(set: *mut FidAvSet, addr: FiAddr) -> c_int,
    pub remove: unsafe extern "C" fn(set: *mut FidAvSet, addr: FiAddr) -> c_int,
    pub addr: unsafe extern "C" fn(set: *mut FidAvSet, coll_addr: *mut FiAddr) -> c_int,
}

/// `struct fid_av_set`.
#[repr(C)]
pub struct FidAvSet {
    pub fid: Fid,
    pub ops: *mut FiOpsAvSet,
}

/// `FI_CLASS_EP`.
pub const FI_CLASS_EP: usize = 3;
/// `FI_CLASS_SEP`: a scalable endpoint.
pub const FI_CLASS_SEP: usize = 4;
/// `FI_CLASS_RX_CTX`: a receive context of a scalable endpoint.
pub const FI_CLASS_RX_CTX: usize = 5;
/// `FI_CLASS_TX_CTX`: a transmit context of a scalable endpoint.
pub const FI_CLASS_TX_CTX: usize = 7;
/// `FI_NAMED_RX_CTX`: a sender names the receive context of a peer (`fi_rx_addr`).
pub const FI_NAMED_RX_CTX: u64 = 1 << 58;
/// `FI_CLASS_CQ`.
pub const FI_CLASS_CQ: usize = 14;

/// `FI_CLASS_CNTR`.
pub const FI_CLASS_CNTR: usize = 15;

/// `FI_ENABLE`, the `fi_control` command `fi_enable` sends.
pub const FI_ENABLE: c_int = 6;
/// `FI_BACKLOG`, the `fi_control` command setting a passive endpoint's request backlog.
pub const FI_BACKLOG: c_int = 7;

/// `FI_TRANSMIT` of `fi_ep_bind` (the same bit as `FI_SEND`).
pub const FI_TRANSMIT: u64 = 1 << 11;
/// `FI_RECV` of `fi_ep_bind`.
pub const FI_RECV: u64 = 1 << 10;
/// `FI_READ` of `fi_ep_bind` with a counter (RMA reads and atomic fetches initiated).
pub const FI_READ: u64 = 1 << 8;
/// `FI_WRITE` of `fi_ep_bind` with a counter (RMA writes and atomics initiated).
pub const FI_WRITE: u64 = 1 << 9;
/// `FI_REMOTE_READ` of `fi_ep_bind` with a counter (RMA reads targeting the endpoint).
pub const FI_REMOTE_READ: u64 = 1 << 12;
/// `FI_REMOTE_WRITE` of `fi_ep_bind` with a counter (RMA writes targeting the endpoint).
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
/// `FI_SELECTIVE_COMPLETION` of `fi_ep_bind`.
pub const FI_SELECTIVE_COMPLETION: u64 = 1 << 59;
/// `FI_COMPLETION` of an operation's flags.
pub const FI_COMPLETION: u64 = 1 << 24;
/// `FI_INJECT` of an operation's flags.
pub const FI_INJECT: u64 = 1 << 25;
/// `FI_PEEK`: see whether a matching message arrived (fi_tagged(3)).
pub const FI_PEEK: u64 = 1 << 19;
/// `FI_CLAIM`: with `FI_PEEK`, claim the message found; alone, take the message claimed.
pub const FI_CLAIM: u64 = 1 << 59;
/// `FI_DISCARD`: with `FI_PEEK` or `FI_CLAIM`, drop the message.
pub const FI_DISCARD: u64 = 1 << 58;
/// `FI_MULTI_RECV`: a capability (receives of several messages into one buffer), a
/// receive's flag (post such a buffer), and a completion's (the buffer's last).
pub const FI_MULTI_RECV: u64 = 1 << 16;
/// `FI_REMOTE_CQ_DATA`: an operation carries, and a completion reports, remote CQ data.
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
/// `FI_MSG`.
pub const FI_MSG: u64 = 1 << 1;
/// `FI_SEND`.
pub const FI_SEND: u64 = 1 << 11;
/// `FI_SOURCE` capability: receive completions name their source (`fi_cq_readfrom`).
pub const FI_SOURCE_CAP: u64 = 1 << 57;
/// `FI_MULTICAST` (a capability).
pub const FI_MULTICAST: u64 = 1 << 5;
/// `FI_FENCE` (a capability).
pub const FI_FENCE: u64 = 1 << 21;
/// `FI_VARIABLE_MSG` (a capability).
pub const FI_VARIABLE_MSG: u64 = 1 << 48;
/// `FI_SOURCE_ERR` (a capability).
pub const FI_SOURCE_ERR: u64 = 1 << 50;
/// `FI_RMA_EVENT` (a capability).
pub const FI_RMA_EVENT: u64 = 1 << 56;
/// `FI_DIRECTED_RECV` (a capability).
pub const FI_DIRECTED_RECV: u64 = 1 << 59;
/// `FI_ORDER_SAS`: sends are delivered in the order they were posted.
pub const FI_ORDER_SAS: u64 = 1 << 8;

// `enum fi_cq_format`.
/// `FI_CQ_FORMAT_UNSPEC`.
pub const FI_CQ_FORMAT_UNSPEC: c_int = 0;
/// `FI_CQ_FORMAT_CONTEXT`.
pub const FI_CQ_FORMAT_CONTEXT: c_int = 1;
/// `FI_CQ_FORMAT_MSG`.
pub const FI_CQ_FORMAT_MSG: c_int = 2;
/// `FI_CQ_FORMAT_DATA`.
pub const FI_CQ_FORMAT_DATA: c_int = 3;
/// `FI_CQ_FORMAT_TAGGED`.
pub const FI_CQ_FORMAT_TAGGED: c_int = 4;

/// `struct iovec`.
#[repr(C)]
pub struct IoVec {
    pub iov_base: *mut c_void,
    pub iov_len: usize,
}

/// `struct fi_msg`.
#[repr(C)]
pub struct FiMsg {
    pub msg_iov: *const IoVec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: FiAddr,
    pub context: *mut c_void,
    pub data: u64,
}

/// `struct fi_ops_ep`.
#[repr(C)]
pub struct FiOpsEp {
    pub size: usize,
    pub cancel: unsafe extern "C" fn(fid: *mut Fid, context: *mut c_void) -> isize,
    pub getopt: unsafe extern "C" fn(
        fid: *mut Fid,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: *mut usize,
    ) -> c_int,
    pub setopt: unsafe extern "C" fn(
        fid: *mut Fid,
        level: c_int,
        optname: c_int,
        optval: *const c_void,
        optlen: usize,
    ) -> c_int,
    pub tx_ctx: unsafe extern "C" fn(
        sep: *mut FidEp,
        index: c_int,
        attr: *mut FiTxAttr,
        tx_ep: *mut *mut FidEp,
        context: *mut c_void,
    ) -> c_int,
    pub rx_ctx: unsafe extern "C" fn(
        sep: *mut FidEp,
        index: c_int,
        attr: *mut FiRxAttr,
        rx_ep: *mut *mut FidEp,
        context: *mut c_void,
    ) -> c_int,
    pub rx_size_left: unsafe extern "C" fn(ep: *mut FidEp) -> isize,
    pub tx_size_left: unsafe extern "C" fn(ep: *mut FidEp) -> isize,
}

/// `struct fi_ops_cm` (`rdma/fi_cm.h`).
#[repr(C)]
pub struct FiOpsCm {
    pub size: usize,
    pub setname: unsafe extern "C" fn(fid: *mut Fid, addr: *mut c_void, addrlen: usize) -> c_int,
    pub getname:
        unsafe extern "C" fn(fid: *mut Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int,
    pub getpeer:
        unsafe extern "C" fn(ep: *mut FidEp, addr: *mut c_void, addrlen: *mut usize) -> c_int,
    pub connect: unsafe extern "C" fn(
        ep: *mut FidEp,
        addr: *const c_void,
        param: *const c_void,
        paramlen: usize,
    ) -> c_int,
    pub listen: unsafe extern "C" fn(pep: *mut c_void) -> c_int,
    pub accept:
        unsafe extern "C" fn(ep: *mut FidEp, param: *const c_void, paramlen: usize) -> c_int,
    pub reject: unsafe extern "C" fn(
        pep: *mut c_void,
        handle: *mut Fid,
        param: *const c_void,
        paramlen: usize,
    ) -> c_int,
    pub shutdown: unsafe extern "C" fn(ep: *mut FidEp, flags: u64) -> c_int,
    pub join: unsafe extern "C" fn(
        ep: *mut FidEp,
        addr: *const c_void,
        flags: u64,
        mc: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
}

/// `struct fi_ops_msg`.
#[repr(C)]
pub struct FiOpsMsg {
    pub size: usize,
    pub recv: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        src_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub recvv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const IoVec,
        desc: *mut *mut c_void,
        count: usize,
        src_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub recvmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> isize,
    pub send: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub sendv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const IoVec,
        desc: *mut *mut c_void,
        count: usize,
        dest_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub sendmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> isize,
    pub inject: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        dest_addr: FiAddr,
    ) -> isize,
    pub senddata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub injectdata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        data: u64,
        dest_addr: FiAddr,
    ) -> isize,
}

/// An operation table the provider does not serve (`fi_ops_rma`, `fi_ops_tagged`,
/// `fi_ops_atomic`, `fi_ops_collective`): its size, then `N` entries that each return
/// `-FI_ENOSYS` (the provider's `unsupported::any_op`, whose comment says why one function
/// serves every entry).
#[repr(C)]
pub struct FiOpsUnsupported<const N: usize> {
    pub size: usize,
    pub ops: [unsafe extern "C" fn() -> isize; N],
}

/// `struct fid_ep`.
#[repr(C)]
pub struct FidEp {
    pub fid: Fid,
    pub ops: *mut FiOpsEp,
    pub cm: *mut FiOpsCm,
    pub msg: *mut FiOpsMsg,
    pub rma: *mut FiOpsUnsupported<9>,
    pub tagged: *mut FiOpsTagged,
    pub atomic: *mut FiOpsUnsupported<13>,
    pub collective: *mut FiOpsUnsupported<11>,
}

/// `fi_eq_attr.flags` and `fi_cq_attr.flags` `FI_AFFINITY`: `signaling_vector` is set, a
/// hint a provider without interrupt affinity may ignore (fi_eq(3), fi_cq(3)).
pub const FI_AFFINITY: u64 = 1 << 29;

/// `struct fi_cq_attr`.
#[repr(C)]
pub struct FiCqAttr {
    pub size: usize,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

/// `struct fi_cq_tagged_entry`: the largest entry; the other formats are its first fields
/// (`fi_cq_entry` 8 bytes, `fi_cq_msg_entry` 24, `fi_cq_data_entry` 40).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiCqTaggedEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
}

/// `struct fi_cq_err_entry`.
#[repr(C)]
pub struct FiCqErrEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

/// `struct fi_ops_cq`.
#[repr(C)]
pub struct FiOpsCq {
    pub size: usize,
    pub read: unsafe extern "C" fn(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize,
    pub readfrom: unsafe extern "C" fn(
        cq: *mut FidCq,
        buf: *mut c_void,
        count: usize,
        src_addr: *mut FiAddr,
    ) -> isize,
    pub readerr: unsafe extern "C" fn(cq: *mut FidCq, buf: *mut FiCqErrEntry, flags: u64) -> isize,
    pub sread: unsafe extern "C" fn(
        cq: *mut FidCq,
        buf: *mut c_void,
        count: usize,
        cond: *const c_void,
        timeout: c_int,
    ) -> isize,
    pub sreadfrom: unsafe extern "C" fn(
        cq: *mut FidCq,
        buf: *mut c_void,
        count: usize,
        src_addr: *mut FiAddr,
        cond: *const c_void,
        timeout: c_int,
    ) -> isize,
    pub signal: unsafe extern "C" fn(cq: *mut FidCq) -> c_int,
    pub strerror: unsafe extern "C" fn(
        cq: *mut FidCq,
        prov_errno: c_int,
        err_data: *const c_void,
        buf: *mut c_char,
        len: usize,
    ) -> *const c_char,
}

/// `struct fid_cq`.
#[repr(C)]
pub struct FidCq {
    pub fid: Fid,
    pub ops: *mut FiOpsCq,
}

/// `FI_CNTR_EVENTS_COMP` (`enum fi_cntr_events`): a counter counts completions.
pub const FI_CNTR_EVENTS_COMP: c_int = 0;

/// `struct fi_cntr_attr`.
#[repr(C)]
pub struct FiCntrAttr {
    pub events: c_int,
    pub wait_obj: c_int,
    pub wait_set: *mut c_void,
    pub flags: u64,
}

/// `struct fi_ops_cntr`.
#[repr(C)]
pub struct FiOpsCntr {
    pub size: usize,
    pub read: unsafe extern "C" fn(cntr: *mut FidCntr) -> u64,
    pub readerr: unsafe extern "C" fn(cntr: *mut FidCntr) -> u64,
    pub add: unsafe extern "C" fn(cntr: *mut FidCntr, value: u64) -> c_int,
    pub set: unsafe extern "C" fn(cntr: *mut FidCntr, value: u64) -> c_int,
    pub wait: unsafe extern "C" fn(cntr: *mut FidCntr, threshold: u64, timeout: c_int) -> c_int,
    pub adderr: unsafe extern "C" fn(cntr: *mut FidCntr, value: u64) -> c_int,
    pub seterr: unsafe extern "C" fn(cntr: *mut FidCntr, value: u64) -> c_int,
}

/// `struct fid_cntr`.
#[repr(C)]
pub struct FidCntr {
    pub fid: Fid,
    pub ops: *mut FiOpsCntr,
}

/// `FI_TAGGED`.
pub const FI_TAGGED: u64 = 1 << 3;

/// `struct fi_msg_tagged` (`rdma/fi_tagged.h`).
#[repr(C)]
pub struct FiMsgTagged {
    pub msg_iov: *const IoVec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: FiAddr,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

/// `struct fi_ops_tagged`.
#[repr(C)]
pub struct FiOpsTagged {
    pub size: usize,
    pub recv: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        src_addr: FiAddr,
        tag: u64,
        ignore: u64,
        context: *mut c_void,
    ) -> isize,
    pub recvv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const IoVec,
        desc: *mut *mut c_void,
        count: usize,
        src_addr: FiAddr,
        tag: u64,
        ignore: u64,
        context: *mut c_void,
    ) -> isize,
    pub recvmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsgTagged, flags: u64) -> isize,
    pub send: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest_addr: FiAddr,
        tag: u64,
        context: *mut c_void,
    ) -> isize,
    pub sendv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const IoVec,
        desc: *mut *mut c_void,
        count: usize,
        dest_addr: FiAddr,
        tag: u64,
        context: *mut c_void,
    ) -> isize,
    pub sendmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsgTagged, flags: u64) -> isize,
    pub inject: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        dest_addr: FiAddr,
        tag: u64,
    ) -> isize,
    pub senddata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest_addr: FiAddr,
        tag: u64,
        context: *mut c_void,
    ) -> isize,
    pub injectdata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        data: u64,
        dest_addr: FiAddr,
        tag: u64,
    ) -> isize,
}
