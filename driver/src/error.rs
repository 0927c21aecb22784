//! Driver errors.

use crate::device::DeviceError;
use crate::dma::DmaError;
use std::time::Duration;
use uet_fwif::admin::Status;

/// Everything the driver can fail with.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A backend operation failed ([`DeviceError::Gone`] becomes
    /// [`DriverError::DeviceGone`]).
    #[error(transparent)]
    Device(DeviceError),
    /// DMA memory could not be allocated or accessed.
    #[error(transparent)]
    Dma(#[from] DmaError),
    /// The device is gone for this process: BAR0 reads all ones (surprise removal, failed
    /// reset), or the device belongs to the process this one was forked from.
    #[error("device gone: BAR0 reads all ones, or the device belongs to the process this one was forked from")]
    DeviceGone,
    /// The identity registers name another device.
    #[error("not a uet-nic function: vendor {vendor:#06x} device {device:#06x}")]
    NotOurDevice {
        /// Vendor ID read.
        vendor: u16,
        /// Device ID read.
        device: u16,
    },
    /// The device speaks another host-interface major version.
    #[error("device host interface v{device}.x, driver speaks v{driver}.x")]
    InterfaceVersion {
        /// The device's major version.
        device: u8,
        /// The driver's.
        driver: u8,
    },
    /// The device speaks an older minor version of the host interface than the driver needs.
    #[error("device host interface v1.{device}, driver needs v1.{required} or later")]
    InterfaceTooOld {
        /// The device's minor version.
        device: u8,
        /// The oldest the driver drives.
        required: u8,
    },
    /// The device did not become ready after reset.
    #[error("device not ready {waited:?} after function reset")]
    NotReady {
        /// How long the driver waited.
        waited: Duration,
    },
    /// [`crate::Nic::open`] of a device a `Nic` of this process already runs: the open would
    /// reset the function under it, taking its endpoints and AV tables. Nothing was done to
    /// the device.
    #[error("device {name} is already open in this process: use its Nic (clone it, or open another Domain on it)")]
    DeviceInUse {
        /// The device's name.
        name: String,
    },
    /// The device neither reported `DEV_STATUS.enabled` nor a fatal error in time after the
    /// driver set `DEV_CTRL.enable`.
    #[error("device not enabled {waited:?} after DEV_CTRL.enable was set (DEV_STATUS.enabled stayed 0, no fatal error)")]
    NotEnabled {
        /// How long the driver waited.
        waited: Duration,
    },
    /// Enabling the function failed; the device raised a fatal error.
    #[error("device refused enable: FATAL_ERROR = {fatal_error:#x}")]
    EnableFailed {
        /// Raw FATAL_ERROR register.
        fatal_error: u32,
    },
    /// An admin command did not complete in time.
    #[error("admin command {} timed out after {waited:?} (device enabled: {device_enabled})", crate::admin::opcode_name(*opcode))]
    AdminTimeout {
        /// The command's opcode byte.
        opcode: u8,
        /// How long the driver waited.
        waited: Duration,
        /// DEV_STATUS.enabled at the time.
        device_enabled: bool,
    },
    /// An admin command was given up on because the device stopped with a fatal error
    /// (`DEV_STATUS.fatal`): it completes nothing until the function is reset. When the
    /// command was `submitted` (it was outstanding when the device stopped), whether the
    /// device ran it is unknown, and it is handled as in doubt, like
    /// [`DriverError::AdminTimeout`]; otherwise it waited for room in a ring the stopped
    /// device will never drain, and was not submitted.
    #[error(
        "admin command {} {}: the device stopped with a fatal error (FATAL_ERROR = {fatal_error:#x}) after {waited:?}",
        crate::admin::opcode_name(*opcode),
        if *submitted { "failed" } else { "not submitted" }
    )]
    AdminDeviceFatal {
        /// The command's opcode byte.
        opcode: u8,
        /// How long the command was outstanding, or waited for room.
        waited: Duration,
        /// Raw FATAL_ERROR register: the causes.
        fatal_error: u32,
        /// Whether the command was in the ring when the device stopped.
        submitted: bool,
    },
    /// An admin command was given up on because the function was reset under the driver:
    /// the device is not enabled and `ADMIN_SQ_BASE` no longer holds the admin ring
    /// (`sq_base`, not `ring`). A reset forgets everything the function held (queues,
    /// endpoints, AV tables, memory regions, auth keys) and stops its DMA, so the command
    /// cannot run late; no command runs until the NIC is opened again, and every later one
    /// fails at once with this error (`submitted` false).
    #[error(
        "admin command {} {}: the function was reset (ADMIN_SQ_BASE reads {sq_base:#x}, not the admin ring at {ring:#x}); it lost its queues, endpoints and tables and runs no command until the NIC is opened again",
        crate::admin::opcode_name(*opcode),
        if *submitted { "failed" } else { "not submitted" }
    )]
    FunctionReset {
        /// The command's opcode byte.
        opcode: u8,
        /// `ADMIN_SQ_BASE` as read.
        sq_base: u64,
        /// The IOVA of the admin submission ring the driver programmed.
        ring: u64,
        /// Whether the command was in the ring when the reset was seen.
        submitted: bool,
    },
    /// An admin command was not submitted: the admin ring stayed full of commands the device
    /// had not completed for the whole admin timeout. The device never saw the command, so
    /// nothing of it can happen late (unlike [`DriverError::AdminTimeout`]); it may be
    /// submitted again once the device completes what it holds.
    #[error("admin command {} not submitted: the admin ring stayed full for {waited:?} (device enabled: {device_enabled})", crate::admin::opcode_name(*opcode))]
    AdminRingFull {
        /// The opcode byte of the command that was not submitted.
        opcode: u8,
        /// How long the driver waited for room.
        waited: Duration,
        /// DEV_STATUS.enabled at the time.
        device_enabled: bool,
    },
    /// An admin command completed with an error status.
    #[error("admin command {} failed: {status}", crate::admin::opcode_name(*opcode))]
    AdminStatus {
        /// The command's opcode byte.
        opcode: u8,
        /// The status the firmware returned.
        status: Status,
    },
    /// The device broke the admin-queue protocol.
    #[error("admin queue protocol error: {0}")]
    AdminProtocol(String),
    /// ENDPOINT_CREATE was refused: a live endpoint of the same JobID on this NIC has the
    /// initiator id (interface 1.11). A target's FI_SOURCE tells senders apart by fabric
    /// address, JobID and initiator, so two such endpoints would be taken for one.
    #[error(
        "initiator id {initiator:#x} is in use by another endpoint of JobID {job_id:#x} on this NIC"
    )]
    InitiatorInUse {
        /// The initiator id asked for.
        initiator: u32,
        /// The endpoint's JobID.
        job_id: u32,
    },
    /// A request the caller made is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A message is longer than the NIC's largest message (`CAP_MAX_MSG`).
    #[error("message of {len} bytes exceeds the {max}-byte maximum")]
    MessageTooLong {
        /// The message's length.
        len: usize,
        /// The largest message.
        max: usize,
    },
    /// A ring or pool is full: retry after polling completions.
    #[error("{0} is full; poll completions and retry")]
    Full(&'static str),
    /// A NIC resource is exhausted (the message names the capability register).
    #[error("{0}")]
    Exhausted(String),
    /// The operation is not supported by this kind of endpoint or context.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// An `FI_EP_MSG` endpoint is not connected (yet, or any more).
    #[error("not connected: {0}")]
    NotConnected(&'static str),
    /// The operation does not fit the connection's state (connect twice, accept twice…).
    #[error("wrong state: {0}")]
    BadState(String),
    /// The operation needs an event queue bound to the endpoint.
    #[error("no event queue: {0}")]
    NoEq(String),
    /// Before a send, the named AV the endpoint is bound to could not catch up with the
    /// changes other processes made (its NIC refused them); the send was not posted.
    #[error("{0}")]
    AvSync(uet_av::FiError),
    /// An AV or event-queue call the driver made for the operation failed, with its errno
    /// (a closed event queue is `FI_EBADF`, no AV table left `FI_ENOSPC`).
    #[error("{0}")]
    Fabric(uet_av::FiError),
}

impl DriverError {
    /// Whether the failed admin command may still have been run, or be run late, by the
    /// device: it timed out, or the device stopped with a fatal error while it was
    /// outstanding. What such a command made stays the device's until the admin queue's
    /// undo destroys it, so its memory is never handed back.
    pub fn in_doubt(&self) -> bool {
        matches!(
            self,
            DriverError::AdminTimeout { .. }
                | DriverError::AdminDeviceFatal {
                    submitted: true,
                    ..
                }
        )
    }
}

impl From<DeviceError> for DriverError {
    /// The backend's error; one of a device this process does not own (a forked child's) is
    /// the device gone, as every other call there reports it.
    fn from(e: DeviceError) -> Self {
        match e {
            DeviceError::Gone => DriverError::DeviceGone,
            e => DriverError::Device(e),
        }
    }
}
