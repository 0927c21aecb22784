//! How driver outcomes become fabric errno values, as a libfabric provider reports them.

use crate::device::DeviceError;
use crate::dma::DmaError;
use crate::error::DriverError;
use uet_av::{FiErrno, FiError};
use uet_fwif::admin::Status;
use uet_fwif::datapath::LocalStatus;
use uet_fwif::ReturnCode;

/// The errno of a failed completion (`fi_cq_err_entry.err`).
///
/// | outcome | errno |
/// |---|---|
/// | `fi_addr` not in the AV (never inserted, removed, out of range) | `FI_EADDRNOTAVAIL` |
/// | target: RC_BAD_JOB_ID, RC_PERM_VIOLATION (RMA: wrong key, range or access), RC_BAD_MKEY | `FI_EACCES` |
/// | target: RC_BAD_PID, RC_BAD_INDEX (no such endpoint or resource there) | `FI_EADDRNOTAVAIL` |
/// | target: RC_UNDELIVERABLE (no receive buffer, unexpected list full) | `FI_ENORX` |
/// | target: RC_TOO_LONG | `FI_EMSGSIZE` |
/// | target: any other error code | `FI_EREMOTEIO` |
/// | message longer than the receive buffer | `FI_ETRUNC` |
/// | message longer than one MTU to a peer whose address limits it to one (`MAX_MSG_MTU`) | `FI_EMSGSIZE` |
/// | buffer outside DMA memory | `FI_EFAULT` |
/// | malformed descriptor | `FI_EINVAL` |
/// | no NIC at the destination fabric address | `FI_EHOSTUNREACH` |
/// | a receive withdrawn by [`crate::Endpoint::cancel_recv`] (`fi_cancel`), or whose message the NIC ended unfinished | `FI_ECANCELED` |
/// | a probe ([`crate::Endpoint::post_tprobe`]) that found no message, or a claim no message holds | `FI_ENOMSG` |
pub fn completion_errno(local: LocalStatus, rc: Option<ReturnCode>) -> FiErrno {
    match local {
        LocalStatus::Ok => FiErrno::new(0),
        LocalStatus::AddrNotAvail => FiErrno::FI_EADDRNOTAVAIL,
        LocalStatus::DmaFault => FiErrno::FI_EFAULT,
        LocalStatus::Truncated => FiErrno::FI_ETRUNC,
        LocalStatus::BadDescriptor | LocalStatus::BadGroup => FiErrno::FI_EINVAL,
        LocalStatus::Unreachable => FiErrno::FI_EHOSTUNREACH,
        LocalStatus::MsgTooLong => FiErrno::FI_EMSGSIZE,
        LocalStatus::Cancelled => FiErrno::FI_ECANCELED,
        LocalStatus::NoMessage => FiErrno::FI_ENOMSG,
        LocalStatus::KeyNotGranted => FiErrno::FI_EACCES,
        LocalStatus::Remote => match rc {
            Some(ReturnCode::BadJobId | ReturnCode::PermViolation | ReturnCode::BadMkey) => {
                FiErrno::FI_EACCES
            }
            Some(ReturnCode::BadPid | ReturnCode::BadIndex) => FiErrno::FI_EADDRNOTAVAIL,
            Some(ReturnCode::Undeliverable) => FiErrno::FI_ENORX,
            Some(ReturnCode::TooLong) => FiErrno::FI_EMSGSIZE,
            _ => FiErrno::FI_EREMOTEIO,
        },
    }
}

/// The errno of a failed admin command, as the libfabric call that issued it reports it.
pub fn admin_to_fi(e: DriverError) -> FiError {
    FiError::new(e.errno(), e.to_string())
}

impl DriverError {
    /// The fabric errno a libfabric call returns for this error.
    pub fn errno(&self) -> FiErrno {
        match self {
            DriverError::AdminStatus { status, .. } => match status {
                Status::NoResources | Status::PidExhausted | Status::RiExhausted => {
                    FiErrno::FI_ENOSPC
                }
                Status::Busy => FiErrno::FI_EBUSY,
                Status::InvalidOpcode => FiErrno::FI_ENOSYS,
                Status::KeyExists => FiErrno::FI_ENOKEY,
                Status::InitiatorInUse => FiErrno::FI_EADDRINUSE,
                Status::NotPosted => FiErrno::FI_ENOENT,
                Status::InProgress => FiErrno::FI_EBUSY,
                Status::InvalidField | Status::InvalidHandle | Status::IndexOutOfRange => {
                    FiErrno::FI_EINVAL
                }
                _ => FiErrno::FI_EIO,
            },
            DriverError::AdminTimeout { .. } => FiErrno::FI_ETIMEDOUT,
            DriverError::AdminDeviceFatal { .. } => FiErrno::FI_EIO,
            DriverError::FunctionReset { .. } => FiErrno::FI_EIO,
            DriverError::AdminRingFull { .. } => FiErrno::FI_EAGAIN,
            DriverError::DeviceInUse { .. } => FiErrno::FI_EBUSY,
            DriverError::InvalidArgument(_) => FiErrno::FI_EINVAL,
            DriverError::InitiatorInUse { .. } => FiErrno::FI_EADDRINUSE,
            DriverError::MessageTooLong { .. } => FiErrno::FI_EMSGSIZE,
            DriverError::Full(_) => FiErrno::FI_EAGAIN,
            DriverError::Exhausted(_) => FiErrno::FI_ENOSPC,
            DriverError::Unsupported(_) => FiErrno::FI_EOPNOTSUPP,
            DriverError::NotConnected(_) => FiErrno::FI_ENOTCONN,
            DriverError::BadState(_) => FiErrno::FI_EOPBADSTATE,
            DriverError::NoEq(_) => FiErrno::FI_ENOEQ,
            DriverError::AvSync(e) | DriverError::Fabric(e) => e.errno,
            // A zero length, or an access outside the region, is the caller's argument;
            // anything else is memory the system could not give.
            DriverError::Dma(DmaError::Empty | DmaError::OutOfBounds { .. }) => FiErrno::FI_EINVAL,
            DriverError::Dma(_) => FiErrno::FI_ENOMEM,
            DriverError::Device(DeviceError::DmaMap {
                errno: Some(libc::ENOMEM),
                ..
            }) => FiErrno::FI_ENOMEM,
            DriverError::Device(DeviceError::DmaMap {
                errno: Some(libc::ENOSPC),
                ..
            }) => FiErrno::FI_ENOSPC,
            DriverError::DeviceGone
            | DriverError::NotOurDevice { .. }
            | DriverError::InterfaceVersion { .. }
            | DriverError::InterfaceTooOld { .. } => FiErrno::FI_ENODEV,
            _ => FiErrno::FI_EIO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused DMA mapping reports what the system ran out of when it says so: pinned
    /// memory (`ENOMEM`) or IOMMU mappings (`ENOSPC`); any other refusal is `FI_EIO`.
    #[test]
    fn a_refused_dma_mapping_reports_what_ran_out() {
        let refused = |errno| {
            DriverError::Device(DeviceError::DmaMap {
                iova: 1 << 32,
                len: 4096,
                reason: "refused".into(),
                errno,
            })
            .errno()
        };
        assert_eq!(refused(Some(libc::ENOMEM)), FiErrno::FI_ENOMEM);
        assert_eq!(refused(Some(libc::ENOSPC)), FiErrno::FI_ENOSPC);
        assert_eq!(refused(Some(libc::EINVAL)), FiErrno::FI_EIO);
        assert_eq!(refused(None), FiErrno::FI_EIO);
    }
}
