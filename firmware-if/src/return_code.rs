//! UET SES return codes (6 bits in the SES response header).
//!
//! Values as in the Wireshark UET dissector, xdp2's `ses.h` and the Linux "drivers/ultraeth" RFC
//! (see `shared/UET-FACTS.md`). A datapath completion carries the return code of the response
//! the initiator received, so an error completion says exactly what the target decided.

/// A UET SES return code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum ReturnCode {
    Null = 0x00,
    Ok = 0x01,
    BadGeneration = 0x02,
    Disabled = 0x03,
    DisabledGen = 0x04,
    NoMatch = 0x05,
    UnsupportedOp = 0x06,
    UnsupportedSize = 0x07,
    AtInvalid = 0x08,
    AtPerm = 0x09,
    AtAtsError = 0x0A,
    AtNoTrans = 0x0B,
    AtOutOfRange = 0x0C,
    HostPoisoned = 0x0D,
    HostUnsuccessfulCompletion = 0x0E,
    AmoUnsupportedOp = 0x0F,
    AmoUnsupportedDt = 0x10,
    AmoUnsupportedSize = 0x11,
    AmoUnaligned = 0x12,
    AmoFpNan = 0x13,
    AmoFpUnderflow = 0x14,
    AmoFpOverflow = 0x15,
    AmoFpInexact = 0x16,
    PermViolation = 0x17,
    OpViolation = 0x18,
    BadIndex = 0x19,
    BadPid = 0x1A,
    BadJobId = 0x1B,
    BadMkey = 0x1C,
    BadAddr = 0x1D,
    Cancelled = 0x1E,
    Undeliverable = 0x1F,
    Uncorrectable = 0x20,
    UncorrectableTransient = 0x21,
    TooLong = 0x22,
    InitiatorError = 0x23,
    Dropped = 0x24,
}

impl ReturnCode {
    /// Decode a 6-bit return code; `None` for values the specification does not define.
    pub const fn from_u8(v: u8) -> Option<Self> {
        use ReturnCode::*;
        Some(match v {
            0x00 => Null,
            0x01 => Ok,
            0x02 => BadGeneration,
            0x03 => Disabled,
            0x04 => DisabledGen,
            0x05 => NoMatch,
            0x06 => UnsupportedOp,
            0x07 => UnsupportedSize,
            0x08 => AtInvalid,
            0x09 => AtPerm,
            0x0A => AtAtsError,
            0x0B => AtNoTrans,
            0x0C => AtOutOfRange,
            0x0D => HostPoisoned,
            0x0E => HostUnsuccessfulCompletion,
            0x0F => AmoUnsupportedOp,
            0x10 => AmoUnsupportedDt,
            0x11 => AmoUnsupportedSize,
            0x12 => AmoUnaligned,
            0x13 => AmoFpNan,
            0x14 => AmoFpUnderflow,
            0x15 => AmoFpOverflow,
            0x16 => AmoFpInexact,
            0x17 => PermViolation,
            0x18 => OpViolation,
            0x19 => BadIndex,
            0x1A => BadPid,
            0x1B => BadJobId,
            0x1C => BadMkey,
            0x1D => BadAddr,
            0x1E => Cancelled,
            0x1F => Undeliverable,
            0x20 => Uncorrectable,
            0x21 => UncorrectableTransient,
            0x22 => TooLong,
            0x23 => InitiatorError,
            0x24 => Dropped,
            _ => return None,
        })
    }

    /// The specification's name, `RC_…`.
    pub const fn name(self) -> &'static str {
        use ReturnCode::*;
        match self {
            Null => "RC_NULL",
            Ok => "RC_OK",
            BadGeneration => "RC_BAD_GENERATION",
            Disabled => "RC_DISABLED",
            DisabledGen => "RC_DISABLED_GEN",
            NoMatch => "RC_NO_MATCH",
            UnsupportedOp => "RC_UNSUPPORTED_OP",
            UnsupportedSize => "RC_UNSUPPORTED_SIZE",
            AtInvalid => "RC_AT_INVALID",
            AtPerm => "RC_AT_PERM",
            AtAtsError => "RC_AT_ATS_ERROR",
            AtNoTrans => "RC_AT_NO_TRANS",
            AtOutOfRange => "RC_AT_OUT_OF_RANGE",
            HostPoisoned => "RC_HOST_POISONED",
            HostUnsuccessfulCompletion => "RC_HOST_UNSUCCESS_CMPL",
            AmoUnsupportedOp => "RC_AMO_UNSUPPORTED_OP",
            AmoUnsupportedDt => "RC_AMO_UNSUPPORTED_DT",
            AmoUnsupportedSize => "RC_AMO_UNSUPPORTED_SIZE",
            AmoUnaligned => "RC_AMO_UNALIGNED",
            AmoFpNan => "RC_AMO_FP_NAN",
            AmoFpUnderflow => "RC_AMO_FP_UNDERFLOW",
            AmoFpOverflow => "RC_AMO_FP_OVERFLOW",
            AmoFpInexact => "RC_AMO_FP_INEXACT",
            PermViolation => "RC_PERM_VIOLATION",
            OpViolation => "RC_OP_VIOLATION",
            BadIndex => "RC_BAD_INDEX",
            BadPid => "RC_BAD_PID",
            BadJobId => "RC_BAD_JOB_ID",
            BadMkey => "RC_BAD_MKEY",
            BadAddr => "RC_BAD_ADDR",
            Cancelled => "RC_CANCELLED",
            Undeliverable => "RC_UNDELIVERABLE",
            Uncorrectable => "RC_UNCOR",
            UncorrectableTransient => "RC_UNCOR_TRNSNT",
            TooLong => "RC_TOO_LONG",
            InitiatorError => "RC_INITIATOR_ERR",
            Dropped => "RC_DROPPED",
        }
    }

    /// Whether the code reports success.
    pub const fn is_ok(self) -> bool {
        matches!(self, ReturnCode::Ok)
    }
}

impl core::fmt::Display for ReturnCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({:#04x})", self.name(), *self as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_code() {
        for v in 0..64u8 {
            if let Some(rc) = ReturnCode::from_u8(v) {
                assert_eq!(rc as u8, v);
            } else {
                assert!(v > 0x24);
            }
        }
        assert_eq!(ReturnCode::BadJobId as u8, 0x1B);
        assert_eq!(ReturnCode::BadPid as u8, 0x1A);
        assert_eq!(ReturnCode::BadIndex as u8, 0x19);
        assert_eq!(ReturnCode::PermViolation as u8, 0x17);
        assert_eq!(ReturnCode::Undeliverable as u8, 0x1F);
    }
}
