//! Connection-management messages (`FI_EP_MSG`, `fi_cm(3)`), carried on the control channel.
//!
//! A connection is set up between hosts, not by the NIC: each message is the payload of one
//! SEND posted with `TX_FLAG_CONTROL`, so it reaches resource index 0 — the provider control
//! channel — of the destination endpoint (see [`crate::datapath`]). The NIC delivers it into
//! the channel's RX ring like any message; the host parses it with [`CmMessage::parse`].
//! Big-endian, because it travels between hosts:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0 | `version` | [`CM_VERSION`] |
//! | 1 | `kind` | [`CmKind`] |
//! | 2–3 | `param_len` | bytes of private data after the header, at most [`MAX_CM_DATA`] |
//! | 4–7 | `conn_id` | chosen by the connecting endpoint, echoed by every later message of the connection |
//! | 8–11 | reserved | 0 |
//! | 12–43 | `sender` | the sending endpoint's UET address ([`crate::address`]) |
//! | 44– | `param` | `param_len` bytes of private data (`fi_connect`, `fi_accept`, `fi_reject` param) |
//!
//! | kind | sent by | to | `sender` |
//! |---|---|---|---|
//! | CONNREQ 1 | the connecting endpoint (`fi_connect`) | a passive endpoint | the connecting endpoint: where the answer goes |
//! | ACCEPT 2 | the accepting endpoint (`fi_accept`) | the connecting endpoint | the accepting endpoint: the connection's peer |
//! | REJECT 3 | the passive endpoint (`fi_reject`) | the connecting endpoint | the passive endpoint |
//! | REJECT 3 | an endpoint an ACCEPT reached that made no such request (its requester closed, or its request timed out) | the accepting endpoint, which gives the accept up | that endpoint |
//! | REJECT 3 | an endpoint a READY reached that is not waiting for it (its deadline passed, or it accepted another requester) | the connecting endpoint, which ends the connection | that endpoint |
//! | SHUTDOWN 4 | either side (`fi_shutdown`) | its peer | the sender |
//! | READY 5 | the connecting endpoint, once it has taken the ACCEPT in | the accepting endpoint, which is connected from then on | the connecting endpoint |
//!
//! READY is the third step of the handshake, as InfiniBand's RTU ("ready to use") is of its
//! connection manager's: the NIC acknowledging the ACCEPT's delivery says only that it
//! reached a receive ring, not that the requester is still there to read it. Version 2 added
//! it; a version-1 peer would never send it, so its messages are malformed here.
//!
//! A message with another version, an unknown kind, reserved bytes set, a length that does
//! not match `param_len`, or an invalid address is malformed: the host drops and counts it.

use crate::address::{UetAddress, ADDRESS_BYTES};

/// Format version of byte 0.
pub const CM_VERSION: u8 = 2;
/// Bytes before the private data.
pub const CM_HEADER_BYTES: usize = 12 + ADDRESS_BYTES;
/// Largest private data (`fi_info.ep_attr.max_cm_data_size` hint, `FI_CM_DATA`).
pub const MAX_CM_DATA: usize = 256;
/// Largest message.
pub const MAX_CM_MESSAGE: usize = CM_HEADER_BYTES + MAX_CM_DATA;

/// What a control message asks or answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CmKind {
    /// A connection request.
    ConnReq = 1,
    /// The request was accepted.
    Accept = 2,
    /// The request was rejected.
    Reject = 3,
    /// The peer closed the connection.
    Shutdown = 4,
    /// The requester took the ACCEPT in: the connection is up at both ends.
    Ready = 5,
}

impl CmKind {
    /// Decode a kind byte.
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(CmKind::ConnReq),
            2 => Some(CmKind::Accept),
            3 => Some(CmKind::Reject),
            4 => Some(CmKind::Shutdown),
            5 => Some(CmKind::Ready),
            _ => None,
        }
    }
}

/// Why a control message was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// Shorter than the header, or its length disagrees with `param_len`.
    #[error("control message of {0} bytes has the wrong length")]
    Length(usize),
    /// Unknown version.
    #[error("control message version {0} unsupported")]
    Version(u8),
    /// Unknown kind.
    #[error("control message kind {0} unknown")]
    Kind(u8),
    /// Reserved bytes set.
    #[error("control message has reserved bytes set")]
    Reserved,
    /// More private data than [`MAX_CM_DATA`].
    #[error("control message carries {0} bytes of private data, at most {MAX_CM_DATA}")]
    TooLong(usize),
    /// The sender address is malformed.
    #[error("control message sender: {0}")]
    Address(#[from] crate::address::AddressError),
}

/// A parsed control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmMessage {
    /// What it is.
    pub kind: CmKind,
    /// The connection it belongs to.
    pub conn_id: u32,
    /// The sending endpoint.
    pub sender: UetAddress,
    /// Private data.
    pub param: Vec<u8>,
}

impl CmMessage {
    /// Serialize into `out` (cleared first); fails when the param is too long or the address
    /// invalid.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), CmError> {
        if self.param.len() > MAX_CM_DATA {
            return Err(CmError::TooLong(self.param.len()));
        }
        let addr = self.sender.to_bytes()?;
        out.clear();
        out.push(CM_VERSION);
        out.push(self.kind as u8);
        out.extend_from_slice(&(self.param.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.conn_id.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&addr);
        out.extend_from_slice(&self.param);
        Ok(())
    }

    /// Parse a received message, strictly.
    pub fn parse(b: &[u8]) -> Result<Self, CmError> {
        let h = b.get(..CM_HEADER_BYTES).ok_or(CmError::Length(b.len()))?;
        if h[0] != CM_VERSION {
            return Err(CmError::Version(h[0]));
        }
        let kind = CmKind::from_u8(h[1]).ok_or(CmError::Kind(h[1]))?;
        let param_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        if param_len > MAX_CM_DATA {
            return Err(CmError::TooLong(param_len));
        }
        if b.len() != CM_HEADER_BYTES + param_len {
            return Err(CmError::Length(b.len()));
        }
        if h[8..12].iter().any(|&x| x != 0) {
            return Err(CmError::Reserved);
        }
        let sender = UetAddress::from_bytes(&h[12..CM_HEADER_BYTES])?;
        Ok(CmMessage {
            kind,
            conn_id: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
            sender,
            param: b[CM_HEADER_BYTES..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::{caps, AddressingMode};

    fn msg() -> CmMessage {
        CmMessage {
            kind: CmKind::ConnReq,
            conn_id: 0xA1B2_C3D4,
            sender: UetAddress {
                caps: caps::AI_BASE,
                mode: AddressingMode::Relative,
                max_msg_mtu: false,
                pid_on_fep: 7,
                fabric_addr: "10.0.0.1".parse().unwrap(),
                ri_start: 1,
                ri_count: 4,
                initiator: 9,
            },
            param: b"hello".to_vec(),
        }
    }

    #[test]
    fn round_trip_and_layout() {
        let mut b = Vec::new();
        msg().encode(&mut b).unwrap();
        assert_eq!(b.len(), CM_HEADER_BYTES + 5);
        assert_eq!(&b[..8], &[2, 1, 0, 5, 0xA1, 0xB2, 0xC3, 0xD4]);
        assert_eq!(CmMessage::parse(&b).unwrap(), msg());
    }

    #[test]
    fn every_kind_round_trips_and_the_next_is_unknown() {
        let kinds = [
            CmKind::ConnReq,
            CmKind::Accept,
            CmKind::Reject,
            CmKind::Shutdown,
            CmKind::Ready,
        ];
        for (byte, kind) in (1u8..).zip(kinds) {
            assert_eq!(CmKind::from_u8(byte), Some(kind));
            let mut b = Vec::new();
            CmMessage { kind, ..msg() }.encode(&mut b).unwrap();
            assert_eq!((b[1], CmMessage::parse(&b).unwrap().kind), (byte, kind));
        }
        assert_eq!(CmKind::from_u8(6), None);
        assert_eq!(CmKind::from_u8(0), None);
    }

    #[test]
    fn rejects_malformed() {
        let mut good = Vec::new();
        msg().encode(&mut good).unwrap();
        assert!(matches!(
            CmMessage::parse(&good[..20]),
            Err(CmError::Length(_))
        ));
        let mut b = good.clone();
        b.push(0);
        assert!(matches!(CmMessage::parse(&b), Err(CmError::Length(_))));
        let mut b = good.clone();
        b[0] = 1;
        assert_eq!(
            CmMessage::parse(&b),
            Err(CmError::Version(1)),
            "before READY"
        );
        let mut b = good.clone();
        b[1] = 9;
        assert_eq!(CmMessage::parse(&b), Err(CmError::Kind(9)));
        let mut b = good.clone();
        b[9] = 1;
        assert_eq!(CmMessage::parse(&b), Err(CmError::Reserved));
        let mut b = good;
        b[12] = 0x70; // address version 7
        assert!(matches!(CmMessage::parse(&b), Err(CmError::Address(_))));
        let long = CmMessage {
            param: vec![0; MAX_CM_DATA + 1],
            ..msg()
        };
        assert!(matches!(
            long.encode(&mut Vec::new()),
            Err(CmError::TooLong(_))
        ));
    }
}
