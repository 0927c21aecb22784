//! Packet capture: classic libpcap files of what crosses the fabric.
//!
//! The fabric writes every frame it carries — requests and responses in both directions,
//! frames that the receiving NIC will reject, injected frames, frames no NIC owns — to a
//! [`PcapWriter`] when a capture is on (`Fabric::capture_to_file`). The file is the classic
//! libpcap format that Wireshark, tcpdump and tshark read; UDP port 4793 selects Wireshark's UET
//! dissector.
//!
//! ## File format
//!
//! | part | bytes | fields (little-endian) |
//! |---|---|---|
//! | global header | 24 | magic `0xa1b2c3d4` (microsecond timestamps), version 2.4, thiszone 0, sigfigs 0, snaplen 65535, linktype 1 (Ethernet) |
//! | record header | 16 | ts_sec, ts_usec, incl_len (bytes stored, at most snaplen), orig_len (frame length) |
//! | record data | incl_len | the Ethernet frame, from the destination MAC; no FCS |
//!
//! ## Timestamps
//!
//! Timestamps come from a simulated clock, never the host's, so a capture of a deterministic
//! run is byte-for-byte reproducible: the clock reads 0 (1970-01-01T00:00:00Z) when a capture
//! starts and advances by [`CAPTURE_TICK_US`] microseconds after each captured frame. Frame `k`
//! of a capture (counting from 0) therefore carries `k` µs. Frames are stamped in the order the
//! switch delivers them.
//!
//! ## Reading
//!
//! [`parse`] is a small strict reader (used by tests): it accepts only what the format allows —
//! the microsecond magic in either byte order, version 2.4, linktype Ethernet, `ts_usec` below
//! one million, `incl_len` no larger than `snaplen` or `orig_len`, and no partial record at the
//! end.

use std::io::{self, Write};

/// Magic number of a classic pcap file with microsecond timestamps.
pub const PCAP_MAGIC: u32 = 0xa1b2_c3d4;
/// Format version written and accepted: 2.4.
pub const PCAP_VERSION: (u16, u16) = (2, 4);
/// Largest frame stored whole.
pub const SNAPLEN: u32 = 65535;
/// Link type of every capture: Ethernet (DLT_EN10MB).
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Bytes of the global header.
pub const GLOBAL_HEADER_BYTES: usize = 24;
/// Bytes of a record header.
pub const RECORD_HEADER_BYTES: usize = 16;
/// Microseconds the capture clock advances per frame.
pub const CAPTURE_TICK_US: u64 = 1;

/// Writes a classic pcap stream.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Write the global header to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = Vec::with_capacity(GLOBAL_HEADER_BYTES);
        h.extend_from_slice(&PCAP_MAGIC.to_le_bytes());
        h.extend_from_slice(&PCAP_VERSION.0.to_le_bytes());
        h.extend_from_slice(&PCAP_VERSION.1.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Append one frame stamped `ts_us` microseconds after the epoch; a frame longer than
    /// [`SNAPLEN`] is stored truncated with its original length.
    pub fn write_frame(&mut self, ts_us: u64, frame: &[u8]) -> io::Result<()> {
        let stored = frame.len().min(SNAPLEN as usize);
        let secs = u32::try_from(ts_us / 1_000_000).unwrap_or(u32::MAX);
        let usecs = (ts_us % 1_000_000) as u32;
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let mut rec = Vec::with_capacity(RECORD_HEADER_BYTES + stored);
        rec.extend_from_slice(&secs.to_le_bytes());
        rec.extend_from_slice(&usecs.to_le_bytes());
        rec.extend_from_slice(&(stored as u32).to_le_bytes());
        rec.extend_from_slice(&orig.to_le_bytes());
        rec.extend_from_slice(frame.get(..stored).unwrap_or(frame));
        self.out.write_all(&rec)
    }

    /// Flush the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Why a capture could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PcapError {
    /// The file ends inside a header or a record.
    #[error("capture truncated at byte {0}")]
    Truncated(usize),
    /// Not a classic microsecond pcap file.
    #[error("bad magic {0:#010x}")]
    Magic(u32),
    /// Another format version.
    #[error("unsupported pcap version {0}.{1}")]
    Version(u16, u16),
    /// Not an Ethernet capture.
    #[error("unsupported link type {0}")]
    LinkType(u32),
    /// A header field outside what the format allows.
    #[error("bad {field} at byte {at}")]
    Field {
        /// The field.
        field: &'static str,
        /// Where its header starts.
        at: usize,
    },
}

/// One captured frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcapRecord {
    /// Seconds since the epoch.
    pub ts_sec: u32,
    /// Microseconds within the second.
    pub ts_usec: u32,
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// The stored bytes (`orig_len` or the first `snaplen` of them).
    pub data: Vec<u8>,
}

impl PcapRecord {
    /// The timestamp in microseconds since the epoch.
    pub fn ts_us(&self) -> u64 {
        u64::from(self.ts_sec) * 1_000_000 + u64::from(self.ts_usec)
    }
}

/// A parsed capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcapFile {
    /// Whether the file was written big-endian.
    pub big_endian: bool,
    /// Snapshot length.
    pub snaplen: u32,
    /// Link type (always [`LINKTYPE_ETHERNET`] once parsed).
    pub linktype: u32,
    /// Every record, in file order.
    pub records: Vec<PcapRecord>,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    big: bool,
}

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], PcapError> {
        let s = self
            .at
            .checked_add(N)
            .and_then(|end| self.b.get(self.at..end))
            .ok_or(PcapError::Truncated(self.at))?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        self.at += N;
        Ok(a)
    }

    fn u16(&mut self) -> Result<u16, PcapError> {
        let a = self.take::<2>()?;
        Ok(if self.big {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        })
    }

    fn u32(&mut self) -> Result<u32, PcapError> {
        let a = self.take::<4>()?;
        Ok(if self.big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        })
    }
}

/// Parse a whole capture strictly (see the module docs).
pub fn parse(bytes: &[u8]) -> Result<PcapFile, PcapError> {
    let mut c = Cursor {
        b: bytes,
        at: 0,
        big: false,
    };
    let magic = c.u32()?;
    c.big = match magic {
        PCAP_MAGIC => false,
        m if m.swap_bytes() == PCAP_MAGIC => true,
        m => return Err(PcapError::Magic(m)),
    };
    let (major, minor) = (c.u16()?, c.u16()?);
    if (major, minor) != PCAP_VERSION {
        return Err(PcapError::Version(major, minor));
    }
    if c.u32()? != 0 {
        return Err(PcapError::Field {
            field: "thiszone",
            at: 0,
        });
    }
    if c.u32()? != 0 {
        return Err(PcapError::Field {
            field: "sigfigs",
            at: 0,
        });
    }
    let snaplen = c.u32()?;
    if snaplen == 0 {
        return Err(PcapError::Field {
            field: "snaplen",
            at: 0,
        });
    }
    let linktype = c.u32()?;
    if linktype != LINKTYPE_ETHERNET {
        return Err(PcapError::LinkType(linktype));
    }
    let mut records = Vec::new();
    while c.at < bytes.len() {
        let at = c.at;
        let ts_sec = c.u32()?;
        let ts_usec = c.u32()?;
        let incl = c.u32()?;
        let orig_len = c.u32()?;
        if ts_usec >= 1_000_000 {
            return Err(PcapError::Field {
                field: "ts_usec",
                at,
            });
        }
        if incl > snaplen || incl > orig_len {
            return Err(PcapError::Field {
                field: "incl_len",
                at,
            });
        }
        let end =
            c.at.checked_add(incl as usize)
                .filter(|&e| e <= bytes.len())
                .ok_or(PcapError::Truncated(c.at))?;
        let data = bytes.get(c.at..end).ok_or(PcapError::Truncated(c.at))?;
        c.at = end;
        records.push(PcapRecord {
            ts_sec,
            ts_usec,
            orig_len,
            data: data.to_vec(),
        });
    }
    Ok(PcapFile {
        big_endian: c.big,
        snaplen,
        linktype,
        records,
    })
}

/// Read and parse a capture file.
pub fn read_file(path: impl AsRef<std::path::Path>) -> Result<PcapFile, ReadError> {
    let bytes = std::fs::read(path)?;
    Ok(parse(&bytes)?)
}

/// Why [`read_file`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The file is not a valid capture.
    #[error(transparent)]
    Format(#[from] PcapError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_records_round_trip() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(0, &[1, 2, 3]).unwrap();
        w.write_frame(1_000_001, &[4; 60]).unwrap();
        let b = w.into_inner();
        assert_eq!(&b[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(&b[4..8], &[2, 0, 4, 0]);
        assert_eq!(&b[16..20], &65535u32.to_le_bytes());
        assert_eq!(&b[20..24], &1u32.to_le_bytes());
        assert_eq!(b.len(), 24 + 16 + 3 + 16 + 60);
        let f = parse(&b).unwrap();
        assert!(!f.big_endian);
        assert_eq!(f.records.len(), 2);
        assert_eq!(f.records[0].data, vec![1, 2, 3]);
        assert_eq!(f.records[0].ts_us(), 0);
        assert_eq!((f.records[1].ts_sec, f.records[1].ts_usec), (1, 1));
        assert_eq!(f.records[1].orig_len, 60);
    }

    #[test]
    fn long_frames_are_stored_truncated_to_snaplen() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(5, &vec![7u8; 70_000]).unwrap();
        let f = parse(&w.into_inner()).unwrap();
        assert_eq!(f.records[0].data.len(), 65535);
        assert_eq!(f.records[0].orig_len, 70_000);
    }

    #[test]
    fn reader_is_strict() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(3, &[9; 20]).unwrap();
        let good = w.into_inner();
        // Any cut inside the file is an error, except right after the global header.
        for cut in 0..good.len() {
            let r = parse(&good[..cut]);
            if cut == GLOBAL_HEADER_BYTES {
                assert_eq!(r.unwrap().records.len(), 0);
            } else {
                assert!(r.is_err(), "cut at {cut}");
            }
        }
        let mut bad = good.clone();
        bad[0] = 0x4d; // nanosecond magic 0xa1b23c4d
        bad[1] = 0x3c;
        assert!(matches!(parse(&bad), Err(PcapError::Magic(_))));
        let mut bad = good.clone();
        bad[6] = 3;
        assert_eq!(parse(&bad), Err(PcapError::Version(2, 3)));
        let mut bad = good.clone();
        bad[20] = 101;
        assert_eq!(parse(&bad), Err(PcapError::LinkType(101)));
        let mut bad = good.clone();
        bad[28..32].copy_from_slice(&1_000_000u32.to_le_bytes());
        assert!(matches!(
            parse(&bad),
            Err(PcapError::Field {
                field: "ts_usec",
                ..
            })
        ));
        let mut bad = good.clone();
        bad[36..40].copy_from_slice(&10u32.to_le_bytes()); // orig_len below incl_len
        assert!(matches!(
            parse(&bad),
            Err(PcapError::Field {
                field: "incl_len",
                ..
            })
        ));
    }

    #[test]
    fn big_endian_files_are_read() {
        let mut b = Vec::new();
        b.extend_from_slice(&PCAP_MAGIC.to_be_bytes());
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&4u16.to_be_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&SNAPLEN.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&2u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        b.push(0xAB);
        let f = parse(&b).unwrap();
        assert!(f.big_endian);
        assert_eq!(f.records[0].ts_us(), 1_000_002);
        assert_eq!(f.records[0].data, vec![0xAB]);
    }
}
