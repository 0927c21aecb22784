//! Fabric errno values (`rdma/fi_errno.h`) and the error type every fi_av call returns.
//!
//! libfabric calls return `0` on success or a negative fabric errno. The values below 256 are
//! the Linux errno values libfabric maps directly; 256 and up are libfabric's own. [`FiErrno`]
//! is a newtype rather than an enum so that any value a peer or a provider reports survives a
//! round trip, named or not.

use core::fmt;

/// A fabric errno value, positive, as `rdma/fi_errno.h` defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiErrno(u32);

macro_rules! errnos {
    ($($name:ident = $value:expr, $text:expr;)*) => {
        impl FiErrno {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($value), "): ", $text, ".")]
                pub const $name: FiErrno = FiErrno($value);
            )*

            /// The libfabric name (`"FI_EINVAL"`), for a value `fi_errno.h` defines.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            /// What `fi_strerror` says about the value, for a value `fi_errno.h` defines.
            pub const fn description(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    FI_EPERM = 1, "Operation not permitted";
    FI_ENOENT = 2, "No such file or directory";
    FI_EINTR = 4, "Interrupted system call";
    FI_EIO = 5, "I/O error";
    FI_E2BIG = 7, "Argument list too long";
    FI_EBADF = 9, "Bad file number";
    FI_EAGAIN = 11, "Try again";
    FI_ENOMEM = 12, "Out of memory";
    FI_EACCES = 13, "Permission denied";
    FI_EFAULT = 14, "Bad address";
    FI_EBUSY = 16, "Device or resource busy";
    FI_ENODEV = 19, "No such device";
    FI_EINVAL = 22, "Invalid argument";
    FI_EMFILE = 24, "Too many open files";
    FI_ENOSPC = 28, "No space left on device";
    FI_ENOSYS = 38, "Function not implemented";
    FI_ENOMSG = 42, "No message of desired type";
    FI_ENODATA = 61, "No data available";
    FI_EOVERFLOW = 75, "Value too large for defined data type";
    FI_EMSGSIZE = 90, "Message too long";
    FI_ENOPROTOOPT = 92, "Protocol not available";
    FI_EOPNOTSUPP = 95, "Operation not supported on transport endpoint";
    FI_EADDRINUSE = 98, "Address already in use";
    FI_EADDRNOTAVAIL = 99, "Cannot assign requested address";
    FI_ENETDOWN = 100, "Network is down";
    FI_ENETUNREACH = 101, "Network is unreachable";
    FI_ECONNABORTED = 103, "Software caused connection abort";
    FI_ECONNRESET = 104, "Connection reset by peer";
    FI_ENOBUFS = 105, "No buffer space available";
    FI_EISCONN = 106, "Transport endpoint is already connected";
    FI_ENOTCONN = 107, "Transport endpoint is not connected";
    FI_ESHUTDOWN = 108, "Cannot send after transport endpoint shutdown";
    FI_ETIMEDOUT = 110, "Connection timed out";
    FI_ECONNREFUSED = 111, "Connection refused";
    FI_EHOSTDOWN = 112, "Host is down";
    FI_EHOSTUNREACH = 113, "No route to host";
    FI_EALREADY = 114, "Operation already in progress";
    FI_EINPROGRESS = 115, "Operation now in progress";
    FI_EREMOTEIO = 121, "Remote I/O error";
    FI_ECANCELED = 125, "Operation Canceled";
    FI_EKEYREJECTED = 129, "Key was rejected by service";
    FI_EOTHER = 256, "Unspecified error";
    FI_ETOOSMALL = 257, "Provided buffer is too small";
    FI_EOPBADSTATE = 258, "Operation not permitted in current state";
    FI_EAVAIL = 259, "Error available";
    FI_EBADFLAGS = 260, "Flags not supported";
    FI_ENOEQ = 261, "Missing or unavailable event queue";
    FI_EDOMAIN = 262, "Invalid resource domain";
    FI_ENOCQ = 263, "Missing or unavailable completion queue";
    FI_ECRC = 264, "CRC error";
    FI_ETRUNC = 265, "Truncation error";
    FI_ENOKEY = 266, "Required key not available";
    FI_ENOAV = 267, "Missing or unavailable address vector";
    FI_EOVERRUN = 268, "Queue has been overrun";
    FI_ENORX = 269, "Receiver not ready, no receive buffers available";
    FI_ENOMR = 270, "Memory registration limit exceeded";
}

impl FiErrno {
    /// `FI_EWOULDBLOCK`, the same value as [`FiErrno::FI_EAGAIN`].
    pub const FI_EWOULDBLOCK: FiErrno = FiErrno::FI_EAGAIN;
    /// First libfabric-specific value (`FI_ERRNO_OFFSET`).
    pub const FI_ERRNO_OFFSET: u32 = 256;

    /// Wrap a positive errno value.
    pub const fn new(value: u32) -> Self {
        FiErrno(value)
    }

    /// The positive value.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The value a provider entry point returns for this error: `-errno`.
    pub const fn to_neg_errno(self) -> isize {
        (self.0 as isize).wrapping_neg()
    }

    /// The C `int` a per-address status array of `FI_SYNC_ERR` holds for this error: the
    /// fabric errno itself, positive ("Failures will contain a fabric errno code", fi_av(3);
    /// libfabric's providers store `-ret` of their negative returns, and `FI_ECANCELED` for
    /// addresses they did not get to). A value beyond `int` gives `i32::MAX`.
    pub fn to_status(self) -> i32 {
        i32::try_from(self.0).unwrap_or(i32::MAX)
    }

    /// The errno a provider's negative return value stands for; `None` for 0 or a positive value.
    pub fn from_neg_errno(ret: isize) -> Option<Self> {
        if ret >= 0 {
            return None;
        }
        u32::try_from(ret.unsigned_abs()).ok().map(FiErrno)
    }
}

impl From<FiErrno> for u32 {
    fn from(e: FiErrno) -> u32 {
        e.0
    }
}

impl fmt::Display for FiErrno {
    /// `FI_EINVAL (Invalid argument)`, or `fabric errno 4242` for an unnamed value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.name(), self.description()) {
            (Some(n), Some(d)) => write!(f, "{n} ({d})"),
            _ => write!(f, "fabric errno {}", self.0),
        }
    }
}

/// The error of a libfabric-facing call: a fabric errno and a sentence saying what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{errno}: {message}")]
pub struct FiError {
    /// What the call returns, negated, through the C ABI.
    pub errno: FiErrno,
    /// What was wrong, for logs and people.
    pub message: String,
}

impl FiError {
    /// An error with `errno` and `message`.
    pub fn new(errno: FiErrno, message: impl Into<String>) -> Self {
        FiError {
            errno,
            message: message.into(),
        }
    }

    /// `FI_EINVAL` with `message`.
    pub fn inval(message: impl Into<String>) -> Self {
        Self::new(FiErrno::FI_EINVAL, message)
    }

    /// `FI_EBADFLAGS` with `message`.
    pub fn badflags(message: impl Into<String>) -> Self {
        Self::new(FiErrno::FI_EBADFLAGS, message)
    }

    /// `FI_EIO` with `message`.
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(FiErrno::FI_EIO, message)
    }

    /// This error with `context` put before its message (`"{context}: {message}"`), the
    /// errno unchanged: what a call adds when it passes on an error of a step it took.
    pub fn within(self, context: impl core::fmt::Display) -> Self {
        FiError {
            message: format!("{context}: {}", self.message),
            ..self
        }
    }

    /// The value a provider entry point returns for this error: `-errno`.
    pub fn to_neg_errno(&self) -> isize {
        self.errno.to_neg_errno()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_prefixes_the_message_and_keeps_the_errno() {
        let e = FiError::new(FiErrno::FI_ENOSPC, "full").within(format_args!("call {}", 7));
        assert_eq!(e.errno, FiErrno::FI_ENOSPC);
        assert_eq!(e.message, "call 7: full");
    }

    #[test]
    fn values_match_fi_errno_h() {
        let table = [
            (FiErrno::FI_EPERM, 1),
            (FiErrno::FI_ENOENT, 2),
            (FiErrno::FI_EIO, 5),
            (FiErrno::FI_E2BIG, 7),
            (FiErrno::FI_EAGAIN, 11),
            (FiErrno::FI_ENOMEM, 12),
            (FiErrno::FI_EACCES, 13),
            (FiErrno::FI_EBUSY, 16),
            (FiErrno::FI_ENODEV, 19),
            (FiErrno::FI_EINVAL, 22),
            (FiErrno::FI_EMFILE, 24),
            (FiErrno::FI_ENOSPC, 28),
            (FiErrno::FI_ENOSYS, 38),
            (FiErrno::FI_ENODATA, 61),
            (FiErrno::FI_EOVERFLOW, 75),
            (FiErrno::FI_EMSGSIZE, 90),
            (FiErrno::FI_ENOPROTOOPT, 92),
            (FiErrno::FI_EOPNOTSUPP, 95),
            (FiErrno::FI_EADDRINUSE, 98),
            (FiErrno::FI_EADDRNOTAVAIL, 99),
            (FiErrno::FI_ENETDOWN, 100),
            (FiErrno::FI_ENETUNREACH, 101),
            (FiErrno::FI_ECONNABORTED, 103),
            (FiErrno::FI_ECONNRESET, 104),
            (FiErrno::FI_ENOBUFS, 105),
            (FiErrno::FI_EISCONN, 106),
            (FiErrno::FI_ENOTCONN, 107),
            (FiErrno::FI_ESHUTDOWN, 108),
            (FiErrno::FI_ETIMEDOUT, 110),
            (FiErrno::FI_ECONNREFUSED, 111),
            (FiErrno::FI_EHOSTDOWN, 112),
            (FiErrno::FI_EHOSTUNREACH, 113),
            (FiErrno::FI_EALREADY, 114),
            (FiErrno::FI_EINPROGRESS, 115),
            (FiErrno::FI_EREMOTEIO, 121),
            (FiErrno::FI_ECANCELED, 125),
            (FiErrno::FI_EKEYREJECTED, 129),
            (FiErrno::FI_EOTHER, 256),
            (FiErrno::FI_ETOOSMALL, 257),
            (FiErrno::FI_EOPBADSTATE, 258),
            (FiErrno::FI_EAVAIL, 259),
            (FiErrno::FI_EBADFLAGS, 260),
            (FiErrno::FI_ENOEQ, 261),
            (FiErrno::FI_EDOMAIN, 262),
            (FiErrno::FI_ENOCQ, 263),
            (FiErrno::FI_ECRC, 264),
            (FiErrno::FI_ETRUNC, 265),
            (FiErrno::FI_ENOKEY, 266),
            (FiErrno::FI_ENOAV, 267),
            (FiErrno::FI_EOVERRUN, 268),
            (FiErrno::FI_ENORX, 269),
            (FiErrno::FI_ENOMR, 270),
        ];
        for (e, v) in table {
            assert_eq!(e.get(), v, "{e}");
            assert!(e.name().is_some());
        }
        assert_eq!(FiErrno::FI_EWOULDBLOCK, FiErrno::FI_EAGAIN);
    }

    #[test]
    fn negative_return_and_display() {
        let e = FiError::inval("fi_addr 7 is not in use");
        assert_eq!(e.to_neg_errno(), -22);
        assert_eq!(
            e.to_string(),
            "FI_EINVAL (Invalid argument): fi_addr 7 is not in use"
        );
        assert_eq!(FiErrno::FI_EBADFLAGS.to_neg_errno(), -260);
        assert_eq!(FiErrno::from_neg_errno(-260), Some(FiErrno::FI_EBADFLAGS));
        assert_eq!(FiErrno::from_neg_errno(0), None);
        assert_eq!(FiErrno::new(4242).to_string(), "fabric errno 4242");
        assert_eq!(FiErrno::new(4242).name(), None);
    }
}
