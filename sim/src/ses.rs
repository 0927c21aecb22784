//! Semantic Sublayer headers (big-endian), as listed in `shared/UET-FACTS.md`.
//!
//! Standard request header, 44 bytes ([`StandardRequest`]):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | rsvd(2) opcode(6) — the model sends WRITE (0x01), READ (0x02), SEND (0x05), TAGGED_SEND (0x09) |
//! | 1 | version(2) flags(6): DC 0x20, IE 0x10, REL 0x08, HD 0x04, EOM 0x02, SOM 0x01 |
//! | 2–3 | message_id |
//! | 4–7 | ri_generation(8) JobID(24) |
//! | 8–9 | rsvd(4) PIDonFEP(12) |
//! | 10–11 | rsvd(4) resource index(12) |
//! | 12–19 | buffer_offset — WRITE, READ: byte offset within the target memory region · SEND, TAGGED_SEND: the peer group id in bytes 16–19, bytes 12–15 zero (`uet_fwif::datapath`, *Peer groups*) |
//! | 20–23 | initiator |
//! | 24–31 | match_bits (TAGGED_SEND) / memory key (WRITE, READ) |
//! | 32–39 | SOM = 1: header_data · SOM = 0: rsvd(18) payload_len(14) in bytes 32–35, message_offset(32) in bytes 36–39 |
//! | 40–43 | request_length (the whole message, in every packet) |
//!
//! Bytes 32–39 are kept raw in [`StandardRequest::header_data`]; a packet without SOM reads and
//! writes them through [`StandardRequest::segment`] and [`segment_word`] (the layout Wireshark's
//! UET dissector decodes).
//!
//! Response header, 12 bytes ([`Response`]): list(2) opcode(6) · version(2) return_code(6) ·
//! message_id(16) · ri_generation(8) JobID(24) · modified_length(32). The model answers with
//! opcode 0 (default response); `list` is 1 (overflow) when a tagged message was held on the
//! unexpected list, else 0 (expected). A successful READ is answered with opcode 0x02
//! (response with data, PDS next_hdr 5): the same 12-byte header, `modified_length` = the
//! bytes read, followed by exactly those bytes. (The specification's response-with-data
//! header carries more fields; the model keeps the 12-byte form.) A READ that fails is
//! answered with a default response and no data.
//!
//! Parsing rejects a short header and reserved bits that are set; the version must be 0.

/// SES opcode WRITE.
pub const OP_WRITE: u8 = 0x01;
/// SES opcode READ.
pub const OP_READ: u8 = 0x02;
/// SES opcode SEND.
pub const OP_SEND: u8 = 0x05;
/// SES opcode TAGGED_SEND.
pub const OP_TAGGED_SEND: u8 = 0x09;
/// SES response opcode: default response.
pub const OP_RESPONSE_DEFAULT: u8 = 0x00;
/// SES response opcode: response with data.
pub const OP_RESPONSE_WITH_DATA: u8 = 0x02;
/// Response list: the request met an expected (posted) buffer.
pub const LIST_EXPECTED: u8 = 0;
/// Response list: the request was held on the unexpected (overflow) list.
pub const LIST_OVERFLOW: u8 = 1;
/// Flag: delivery complete.
pub const FLAG_DC: u8 = 0x20;
/// Flag: initiator error.
pub const FLAG_IE: u8 = 0x10;
/// Flag: relative addressing.
pub const FLAG_REL: u8 = 0x08;
/// Flag: header data present.
pub const FLAG_HD: u8 = 0x04;
/// Flag: end of message.
pub const FLAG_EOM: u8 = 0x02;
/// Flag: start of message.
pub const FLAG_SOM: u8 = 0x01;
/// Bytes of the standard request header.
pub const STD_REQUEST_BYTES: usize = 44;
/// Bytes of the response header.
pub const RESPONSE_BYTES: usize = 12;
/// Largest `payload_len` of a packet without SOM (14 bits).
pub const MAX_PAYLOAD_LEN: u16 = 0x3FFF;

/// Bytes 32–39 of a packet without SOM: `payload_len` (14 bits) and `message_offset`.
pub const fn segment_word(payload_len: u16, message_offset: u32) -> u64 {
    ((payload_len & MAX_PAYLOAD_LEN) as u64) << 32 | message_offset as u64
}

/// Why an SES header was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SesError {
    /// Fewer bytes than the header.
    #[error("truncated SES header")]
    Truncated,
    /// Reserved bits set.
    #[error("reserved SES bits set in {0}")]
    Reserved(&'static str),
    /// Unknown header version.
    #[error("SES version {0} not supported")]
    Version(u8),
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// The SES standard request header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StandardRequest {
    /// Opcode (6 bits).
    pub opcode: u8,
    /// Flags (6 bits).
    pub flags: u8,
    /// Message id.
    pub message_id: u16,
    /// Resource-index generation.
    pub ri_generation: u8,
    /// JobID (24 bits).
    pub job_id: u32,
    /// Destination PIDonFEP (12 bits).
    pub pid_on_fep: u16,
    /// Destination resource index (12 bits).
    pub resource_index: u16,
    /// Buffer offset.
    pub buffer_offset: u64,
    /// Initiator ID.
    pub initiator: u32,
    /// Match bits or memory key.
    pub match_bits: u64,
    /// Bytes 32–39: header data when SOM is set, else [`segment_word`].
    pub header_data: u64,
    /// Request length.
    pub request_length: u32,
}

impl StandardRequest {
    /// Append the 44 header bytes. Fields wider than their wire width are truncated to it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.opcode & 0x3F);
        out.push(self.flags & 0x3F);
        out.extend_from_slice(&self.message_id.to_be_bytes());
        let w = (u32::from(self.ri_generation) << 24) | (self.job_id & 0x00FF_FFFF);
        out.extend_from_slice(&w.to_be_bytes());
        out.extend_from_slice(&(self.pid_on_fep & 0x0FFF).to_be_bytes());
        out.extend_from_slice(&(self.resource_index & 0x0FFF).to_be_bytes());
        out.extend_from_slice(&self.buffer_offset.to_be_bytes());
        out.extend_from_slice(&self.initiator.to_be_bytes());
        out.extend_from_slice(&self.match_bits.to_be_bytes());
        out.extend_from_slice(&self.header_data.to_be_bytes());
        out.extend_from_slice(&self.request_length.to_be_bytes());
    }

    /// `(payload_len, message_offset)` of a packet without SOM; `None` when SOM is set.
    pub fn segment(&self) -> Option<(u16, u32)> {
        if self.flags & FLAG_SOM != 0 {
            return None;
        }
        let len = ((self.header_data >> 32) as u16) & MAX_PAYLOAD_LEN;
        Some((len, self.header_data as u32))
    }

    /// Parse; returns the header and the bytes after it (the payload). Without SOM, the
    /// reserved bits above `payload_len` must be zero.
    pub fn parse(b: &[u8]) -> Result<(Self, &[u8]), SesError> {
        let h = b.get(..STD_REQUEST_BYTES).ok_or(SesError::Truncated)?;
        if h[0] & 0xC0 != 0 {
            return Err(SesError::Reserved("opcode byte"));
        }
        if h[1] >> 6 != 0 {
            return Err(SesError::Version(h[1] >> 6));
        }
        let pid = be16(h, 8);
        let ri = be16(h, 10);
        if pid & 0xF000 != 0 {
            return Err(SesError::Reserved("PIDonFEP"));
        }
        if ri & 0xF000 != 0 {
            return Err(SesError::Reserved("resource index"));
        }
        if h[1] & FLAG_SOM == 0 && be32(h, 32) & !u32::from(MAX_PAYLOAD_LEN) != 0 {
            return Err(SesError::Reserved("payload_len"));
        }
        let w = be32(h, 4);
        let r = StandardRequest {
            opcode: h[0] & 0x3F,
            flags: h[1] & 0x3F,
            message_id: be16(h, 2),
            ri_generation: (w >> 24) as u8,
            job_id: w & 0x00FF_FFFF,
            pid_on_fep: pid,
            resource_index: ri,
            buffer_offset: be64(h, 12),
            initiator: be32(h, 20),
            match_bits: be64(h, 24),
            header_data: be64(h, 32),
            request_length: be32(h, 40),
        };
        Ok((r, b.get(STD_REQUEST_BYTES..).unwrap_or(&[])))
    }
}

/// The SES response header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// List (2 bits).
    pub list: u8,
    /// Opcode (6 bits).
    pub opcode: u8,
    /// Return code (6 bits).
    pub return_code: u8,
    /// Message id of the request.
    pub message_id: u16,
    /// Resource-index generation.
    pub ri_generation: u8,
    /// JobID of the request (24 bits).
    pub job_id: u32,
    /// Bytes the target delivered.
    pub modified_length: u32,
}

impl Response {
    /// Append the 12 header bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(((self.list & 0x03) << 6) | (self.opcode & 0x3F));
        out.push(self.return_code & 0x3F);
        out.extend_from_slice(&self.message_id.to_be_bytes());
        let w = (u32::from(self.ri_generation) << 24) | (self.job_id & 0x00FF_FFFF);
        out.extend_from_slice(&w.to_be_bytes());
        out.extend_from_slice(&self.modified_length.to_be_bytes());
    }

    /// Parse; returns the header and the bytes after it.
    pub fn parse(b: &[u8]) -> Result<(Self, &[u8]), SesError> {
        let h = b.get(..RESPONSE_BYTES).ok_or(SesError::Truncated)?;
        if h[1] >> 6 != 0 {
            return Err(SesError::Version(h[1] >> 6));
        }
        let w = be32(h, 4);
        let r = Response {
            list: h[0] >> 6,
            opcode: h[0] & 0x3F,
            return_code: h[1] & 0x3F,
            message_id: be16(h, 2),
            ri_generation: (w >> 24) as u8,
            job_id: w & 0x00FF_FFFF,
            modified_length: be32(h, 8),
        };
        Ok((r, b.get(RESPONSE_BYTES..).unwrap_or(&[])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_request_offsets() {
        let r = StandardRequest {
            opcode: OP_SEND,
            flags: FLAG_SOM | FLAG_EOM | FLAG_REL,
            message_id: 0xBEEF,
            ri_generation: 0,
            job_id: 0x12_3456,
            pid_on_fep: 0x0ABC,
            resource_index: 0x0123,
            buffer_offset: 0,
            initiator: 0xDEAD_BEEF,
            match_bits: 0,
            header_data: 0x0102_0304_0506_0708,
            request_length: 300,
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(b.len(), 44);
        assert_eq!(b[0], 0x05);
        assert_eq!(b[1], 0x0B);
        assert_eq!(&b[2..4], &[0xBE, 0xEF]);
        assert_eq!(&b[4..8], &[0x00, 0x12, 0x34, 0x56]);
        assert_eq!(&b[8..10], &[0x0A, 0xBC]);
        assert_eq!(&b[10..12], &[0x01, 0x23]);
        assert_eq!(&b[20..24], &[0xDE, 0xAD, 0xBE, 0xEF]);
        assert_eq!(&b[32..40], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[40..44], &300u32.to_be_bytes());
        b.extend_from_slice(b"data");
        let (back, rest) = StandardRequest::parse(&b).unwrap();
        assert_eq!(back, r);
        assert_eq!(rest, b"data");
        let mut bad = b.clone();
        bad[8] |= 0x10;
        assert_eq!(
            StandardRequest::parse(&bad),
            Err(SesError::Reserved("PIDonFEP"))
        );
        assert_eq!(StandardRequest::parse(&b[..43]), Err(SesError::Truncated));
    }

    #[test]
    fn continuation_packet_carries_payload_len_and_offset() {
        let r = StandardRequest {
            opcode: OP_SEND,
            flags: FLAG_EOM | FLAG_REL,
            message_id: 9,
            header_data: segment_word(17, 3 * 4096),
            request_length: 3 * 4096 + 17,
            ..StandardRequest::default()
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(&b[32..36], &17u32.to_be_bytes());
        assert_eq!(&b[36..40], &(3u32 * 4096).to_be_bytes());
        let (back, _) = StandardRequest::parse(&b).unwrap();
        assert_eq!(back.segment(), Some((17, 3 * 4096)));
        let mut bad = b.clone();
        bad[33] = 0x40; // bit 14 of the payload_len word is reserved
        assert_eq!(
            StandardRequest::parse(&bad),
            Err(SesError::Reserved("payload_len"))
        );
        let som = StandardRequest {
            flags: FLAG_SOM,
            header_data: u64::MAX,
            ..r
        };
        assert_eq!(som.segment(), None);
        let mut b = Vec::new();
        som.encode(&mut b);
        assert!(
            StandardRequest::parse(&b).is_ok(),
            "header data is opaque with SOM"
        );
    }

    #[test]
    fn response_offsets() {
        let r = Response {
            list: 0,
            opcode: OP_RESPONSE_DEFAULT,
            return_code: 0x1B,
            message_id: 7,
            ri_generation: 0,
            job_id: 0xABCDEF,
            modified_length: 64,
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(b.len(), 12);
        assert_eq!(b[1], 0x1B);
        assert_eq!(&b[2..4], &[0, 7]);
        assert_eq!(&b[4..8], &[0x00, 0xAB, 0xCD, 0xEF]);
        assert_eq!(&b[8..12], &[0, 0, 0, 64]);
        assert_eq!(Response::parse(&b).unwrap().0, r);
    }
}
