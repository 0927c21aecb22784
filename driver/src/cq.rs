//! Completion formats: a [`CqEvent`] as libfabric's `fi_cq_read`/`fi_cq_readerr` report it.
//!
//! An endpoint's completion format ([`CqFormat`], `fi_cq_attr.format`) selects which entry
//! [`CqEvent::entry`] produces:
//!
//! | [`CqFormat`] | `enum fi_cq_format` | entry | fields |
//! |---|---|---|---|
//! | `Context` | `FI_CQ_FORMAT_CONTEXT` (1) | [`FiCqEntry`] | `op_context` |
//! | `Msg` | `FI_CQ_FORMAT_MSG` (2) | [`FiCqMsgEntry`] | + `flags`, `len` |
//! | `Data` | `FI_CQ_FORMAT_DATA` (3) | [`FiCqDataEntry`] | + `buf`, `data` |
//! | `Tagged` (default) | `FI_CQ_FORMAT_TAGGED` (4) | [`FiCqTaggedEntry`] | + `tag` |
//!
//! The entries are `#[repr(C)]` with the field order and sizes of `rdma/fi_eq.h` on LP64
//! (`void *` and `size_t` are 64 bits): a provider copies them out as they are.
//!
//! ## Fields
//!
//! | field | value |
//! |---|---|
//! | `op_context` | the context given when posting |
//! | `flags` | see the table below |
//! | `len` | bytes transferred: received (receives), sent (sends, writes) or read (reads) |
//! | `buf` | multi-receive completions: the IOVA of the message's first byte in the buffer (buffer IOVA + [`crate::endpoint::MultiRecv::offset`]); otherwise 0 |
//! | `data` | remote CQ data when `FI_REMOTE_CQ_DATA` is set; otherwise 0 |
//! | `tag` | tagged receives: the message's match bits; otherwise 0 |
//!
//! | operation | `flags` |
//! |---|---|
//! | send, inject | `FI_SEND \| FI_MSG` |
//! | tagged send, tagged inject | `FI_SEND \| FI_TAGGED` |
//! | RMA write | `FI_RMA \| FI_WRITE` |
//! | RMA read | `FI_RMA \| FI_READ` |
//! | receive | `FI_RECV \| FI_MSG`, `\| FI_REMOTE_CQ_DATA` with non-zero remote CQ data, `\| FI_MULTI_RECV` on a multi-receive buffer's last completion |
//! | tagged receive | `FI_RECV \| FI_TAGGED`, `\| FI_REMOTE_CQ_DATA` as above |
//! | multi-receive buffer released, no message | `FI_MULTI_RECV` alone (`fi_cq(3)`: "if other flag bits are zero, the provider is reporting that the multi-recv buffer has been released") |
//!
//! The NIC sets the SES header-data flag only for non-zero remote CQ data, so a message sent
//! with data 0 and one sent without data are the same on the wire: neither reports
//! `FI_REMOTE_CQ_DATA`.
//!
//! ## Errors (`fi_cq_readerr`)
//!
//! A failed completion is an error entry, [`CqErrEntry`] (`struct fi_cq_err_entry`): the
//! fields above plus `olen` (truncated receives: the bytes that did not fit, as the NIC
//! counted them), `err` (the fabric errno, see [`crate::errno::completion_errno`]),
//! `prov_errno` and `err_data`, a readable description.
//!
//! | outcome | `prov_errno` |
//! |---|---|
//! | the target answered with an error | the UET return code (`RC_BAD_PID` = 0x1A, …) |
//! | the target answered with a return code this driver does not know (a newer NIC's) | [`PROV_ERRNO_LOCAL_BASE`] + `Remote` (0x101), `err` `FI_EREMOTEIO` |
//! | anything the local NIC concluded | [`PROV_ERRNO_LOCAL_BASE`] + the NIC's `LocalStatus` (`AddrNotAvail` = 0x102, `Truncated` = 0x104, …) |
//!
//! [`crate::Endpoint::cq_read`] fails with `FI_EAVAIL` while the next completion is an error,
//! and [`crate::Endpoint::cq_readerr`] returns it: libfabric's read/readerr split.

use crate::endpoint::{CqEvent, CqOp};
use uet_av::FiErrno;
use uet_fwif::datapath::LocalStatus;
use uet_fwif::ReturnCode;

/// `FI_MSG` (`rdma/fabric.h`).
pub const FI_MSG: u64 = 1 << 1;
/// `FI_RMA`.
pub const FI_RMA: u64 = 1 << 2;
/// `FI_TAGGED`.
pub const FI_TAGGED: u64 = 1 << 3;
/// `FI_READ`.
pub const FI_READ: u64 = 1 << 8;
/// `FI_WRITE`.
pub const FI_WRITE: u64 = 1 << 9;
/// `FI_RECV`.
pub const FI_RECV: u64 = 1 << 10;
/// `FI_SEND`.
pub const FI_SEND: u64 = 1 << 11;
/// `FI_MULTI_RECV`: as a receive flag, a multi-receive buffer; as a completion flag, the
/// buffer was released.
pub const FI_MULTI_RECV: u64 = 1 << 16;
/// `FI_REMOTE_CQ_DATA`.
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;

const _: () = assert!(FI_READ == uet_av::flags::FI_READ);
const _: () = assert!(FI_WRITE == uet_av::flags::FI_WRITE);

/// `prov_errno` of an error the local NIC concluded: this base + the `LocalStatus` value.
/// Values below it are UET return codes from the target.
pub const PROV_ERRNO_LOCAL_BASE: i32 = 0x100;

/// `enum fi_cq_format`: which entry an endpoint's completions are read as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CqFormat {
    /// `FI_CQ_FORMAT_CONTEXT`: [`FiCqEntry`].
    Context,
    /// `FI_CQ_FORMAT_MSG`: [`FiCqMsgEntry`].
    Msg,
    /// `FI_CQ_FORMAT_DATA`: [`FiCqDataEntry`].
    Data,
    /// `FI_CQ_FORMAT_TAGGED`: [`FiCqTaggedEntry`], every field.
    #[default]
    Tagged,
}

impl CqFormat {
    /// The `enum fi_cq_format` value.
    pub const fn fi_value(self) -> u32 {
        match self {
            CqFormat::Context => 1,
            CqFormat::Msg => 2,
            CqFormat::Data => 3,
            CqFormat::Tagged => 4,
        }
    }

    /// Bytes of one entry (`sizeof` the C structure on LP64).
    pub const fn entry_size(self) -> usize {
        match self {
            CqFormat::Context => core::mem::size_of::<FiCqEntry>(),
            CqFormat::Msg => core::mem::size_of::<FiCqMsgEntry>(),
            CqFormat::Data => core::mem::size_of::<FiCqDataEntry>(),
            CqFormat::Tagged => core::mem::size_of::<FiCqTaggedEntry>(),
        }
    }
}

/// `struct fi_cq_entry`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FiCqEntry {
    /// `op_context`.
    pub op_context: u64,
}

/// `struct fi_cq_msg_entry`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FiCqMsgEntry {
    /// `op_context`.
    pub op_context: u64,
    /// `flags`.
    pub flags: u64,
    /// `len`.
    pub len: usize,
}

/// `struct fi_cq_data_entry`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FiCqDataEntry {
    /// `op_context`.
    pub op_context: u64,
    /// `flags`.
    pub flags: u64,
    /// `len`.
    pub len: usize,
    /// `buf` (multi-receive completions only; an address, never dereferenced here).
    pub buf: u64,
    /// `data`.
    pub data: u64,
}

/// `struct fi_cq_tagged_entry`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FiCqTaggedEntry {
    /// `op_context`.
    pub op_context: u64,
    /// `flags`.
    pub flags: u64,
    /// `len`.
    pub len: usize,
    /// `buf`.
    pub buf: u64,
    /// `data`.
    pub data: u64,
    /// `tag`.
    pub tag: u64,
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(core::mem::size_of::<FiCqEntry>() == 8);
    assert!(core::mem::size_of::<FiCqMsgEntry>() == 24);
    assert!(core::mem::size_of::<FiCqDataEntry>() == 40);
    assert!(core::mem::size_of::<FiCqTaggedEntry>() == 48);
};

/// One completion in an endpoint's [`CqFormat`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqEntry {
    /// `FI_CQ_FORMAT_CONTEXT`.
    Context(FiCqEntry),
    /// `FI_CQ_FORMAT_MSG`.
    Msg(FiCqMsgEntry),
    /// `FI_CQ_FORMAT_DATA`.
    Data(FiCqDataEntry),
    /// `FI_CQ_FORMAT_TAGGED`.
    Tagged(FiCqTaggedEntry),
}

impl CqEntry {
    /// The format of the entry.
    pub const fn format(&self) -> CqFormat {
        match self {
            CqEntry::Context(_) => CqFormat::Context,
            CqEntry::Msg(_) => CqFormat::Msg,
            CqEntry::Data(_) => CqFormat::Data,
            CqEntry::Tagged(_) => CqFormat::Tagged,
        }
    }

    /// `op_context`, in every format.
    pub const fn op_context(&self) -> u64 {
        match self {
            CqEntry::Context(e) => e.op_context,
            CqEntry::Msg(e) => e.op_context,
            CqEntry::Data(e) => e.op_context,
            CqEntry::Tagged(e) => e.op_context,
        }
    }
}

/// `struct fi_cq_err_entry`, as `fi_cq_readerr` returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqErrEntry {
    /// `op_context`.
    pub op_context: u64,
    /// `flags`: the operation's completion flags.
    pub flags: u64,
    /// `len`: a truncated receive: the bytes delivered; a receive refused before any byte
    /// landed (a bad descriptor): 0; a failed send, write or read: the length it was posted
    /// with, whatever part of it moved (fi_cq(3) defines `len` of an error entry only for
    /// receives).
    pub len: usize,
    /// `buf`: as in [`FiCqDataEntry::buf`].
    pub buf: u64,
    /// `data`: remote CQ data of a receive.
    pub data: u64,
    /// `tag`: the match bits of a tagged receive.
    pub tag: u64,
    /// `olen`: a truncated receive's bytes that did not fit the buffer; otherwise 0.
    pub olen: usize,
    /// `err`: the fabric errno (positive).
    pub err: FiErrno,
    /// `prov_errno`: the UET return code, or [`PROV_ERRNO_LOCAL_BASE`] + the local status.
    pub prov_errno: i32,
    /// `err_data`: what happened, readable (`fi_cq_strerror`).
    pub err_data: &'static str,
}

impl CqEvent {
    /// The libfabric completion flags of the event (see the module docs).
    pub fn flags(&self) -> u64 {
        if self.multi_recv.is_some_and(|m| !m.has_message) {
            return FI_MULTI_RECV;
        }
        let mut flags = match self.op {
            CqOp::Send => FI_SEND | FI_MSG,
            CqOp::TaggedSend => FI_SEND | FI_TAGGED,
            CqOp::Write => FI_RMA | FI_WRITE,
            CqOp::Read => FI_RMA | FI_READ,
            CqOp::Recv => FI_RECV | FI_MSG,
            CqOp::TaggedRecv => FI_RECV | FI_TAGGED,
        };
        let receive = matches!(self.op, CqOp::Recv | CqOp::TaggedRecv);
        if receive && self.data != 0 {
            flags |= FI_REMOTE_CQ_DATA;
        }
        if self.multi_recv.is_some_and(|m| m.released) {
            flags |= FI_MULTI_RECV;
        }
        flags
    }

    fn buf_field(&self) -> u64 {
        self.multi_recv.map_or(0, |m| m.iova)
    }

    fn data_field(&self) -> u64 {
        if self.flags() & FI_REMOTE_CQ_DATA != 0 {
            self.data
        } else {
            0
        }
    }

    fn tag_field(&self) -> u64 {
        if self.op == CqOp::TaggedRecv {
            self.tag
        } else {
            0
        }
    }

    /// The event as an entry of `format` (`fi_cq_read`).
    pub fn entry(&self, format: CqFormat) -> CqEntry {
        let tagged = FiCqTaggedEntry {
            op_context: self.context,
            flags: self.flags(),
            len: self.len,
            buf: self.buf_field(),
            data: self.data_field(),
            tag: self.tag_field(),
        };
        match format {
            CqFormat::Context => CqEntry::Context(FiCqEntry {
                op_context: tagged.op_context,
            }),
            CqFormat::Msg => CqEntry::Msg(FiCqMsgEntry {
                op_context: tagged.op_context,
                flags: tagged.flags,
                len: tagged.len,
            }),
            CqFormat::Data => CqEntry::Data(FiCqDataEntry {
                op_context: tagged.op_context,
                flags: tagged.flags,
                len: tagged.len,
                buf: tagged.buf,
                data: tagged.data,
            }),
            CqFormat::Tagged => CqEntry::Tagged(tagged),
        }
    }

    /// The error entry of a failed event (`fi_cq_readerr`); `None` for a success.
    pub fn err_entry(&self) -> Option<CqErrEntry> {
        let e = self.error?;
        let prov_errno = match e.return_code {
            Some(rc) if e.local == LocalStatus::Remote => i32::from(rc as u8),
            _ => PROV_ERRNO_LOCAL_BASE + i32::from(e.local as u8),
        };
        Some(CqErrEntry {
            op_context: self.context,
            flags: self.flags(),
            len: self.len,
            buf: self.buf_field(),
            data: self.data_field(),
            tag: self.tag_field(),
            olen: e.olen,
            err: e.errno,
            prov_errno,
            err_data: err_text(e.local, e.return_code),
        })
    }
}

/// A readable description of a failed completion (`fi_cq_strerror`).
pub fn err_text(local: LocalStatus, rc: Option<ReturnCode>) -> &'static str {
    match local {
        LocalStatus::Ok => "success",
        LocalStatus::AddrNotAvail => {
            "the destination fi_addr names no valid entry of the bound AV (never inserted, removed or out of range)"
        }
        LocalStatus::DmaFault => "the buffer lies outside memory mapped for DMA",
        LocalStatus::Truncated => {
            "the message was longer than the receive buffer: olen bytes were discarded"
        }
        LocalStatus::BadDescriptor => "the NIC refused a malformed descriptor",
        LocalStatus::Unreachable => "no NIC answers at the destination fabric address",
        LocalStatus::BadGroup => {
            "the destination fi_addr names a peer group above the AV's max_group_id; nothing was sent"
        }
        LocalStatus::MsgTooLong => {
            "the destination peer takes messages of at most one MTU (its address's MAX_MSG_MTU flag); nothing was sent"
        }
        LocalStatus::Cancelled => {
            "the receive was cancelled before a message took it (fi_cancel), or the NIC ended the message that took it, which its sender had given up"
        }
        LocalStatus::NoMessage => {
            "no message matched the probe (FI_PEEK), or none holds the claim (FI_CLAIM)"
        }
        LocalStatus::KeyNotGranted => {
            "the destination's auth key was inserted after the endpoint was enabled, and was not granted to it; nothing was sent"
        }
        LocalStatus::Remote => match rc {
            Some(ReturnCode::BadJobId) => "target: RC_BAD_JOB_ID, no endpoint of this JobID there",
            Some(ReturnCode::BadPid) => {
                "target: RC_BAD_PID, no endpoint with this PIDonFEP in the job"
            }
            Some(ReturnCode::BadIndex) => {
                "target: RC_BAD_INDEX, the resource index is outside the endpoint's range"
            }
            Some(ReturnCode::PermViolation) => {
                "target: RC_PERM_VIOLATION, no memory region grants this key, range and access"
            }
            Some(ReturnCode::BadMkey) => "target: RC_BAD_MKEY, unknown memory key",
            Some(ReturnCode::Undeliverable) => {
                "target: RC_UNDELIVERABLE, no receive buffer posted or the unexpected list is full"
            }
            Some(ReturnCode::TooLong) => "target: RC_TOO_LONG, the message exceeds CAP_MAX_MSG",
            Some(ReturnCode::UnsupportedOp) => {
                "target: RC_UNSUPPORTED_OP, the endpoint does not take this operation or delivery mode"
            }
            Some(ReturnCode::Disabled) => "target: RC_DISABLED, the target function is stopped",
            Some(ReturnCode::HostUnsuccessfulCompletion) => {
                "target: RC_HOST_UNSUCCESS_CMPL, the target could not write its host memory"
            }
            Some(_) => "target: answered with an error return code (see prov_errno)",
            None => "target: answered with an error",
        },
    }
}
