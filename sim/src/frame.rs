//! Fabric port framing: Ethernet II + IPv4 or IPv6 + UDP to port 4793.
//!
//! Transmit builds one frame per packet:
//!
//! | layer | fields the model sets |
//! |---|---|
//! | Ethernet | destination MAC = the fabric's gateway ([`GATEWAY_MAC`]; the switch routes on IP), source MAC = the NIC's, EtherType 0x0800 or 0x86DD |
//! | IPv4 | version 4, IHL 5, DSCP/ECN 0, total length, ID 0, DF, TTL 64, protocol 17, header checksum |
//! | IPv6 | version 6, traffic class/flow label 0, payload length, next header 17, hop limit 64 |
//! | UDP | source port = entropy (from the PDC), destination port [`UET_UDP_PORT`], length, checksum over the pseudo-header |
//!
//! Receive parsing is strict and never trusts a length it has not checked: the EtherType must
//! be IPv4 or IPv6; IPv4 must have version 4, IHL >= 5, a correct header checksum, no
//! fragmentation, protocol UDP and a total length inside the frame (Ethernet padding after it is
//! allowed); IPv6 must have next header UDP (extension headers are not accepted) and a payload
//! length inside the frame; UDP must go to port 4793, its length must equal the IP payload
//! length, and its checksum must verify (zero — no checksum — is accepted for IPv4 only).
//! Anything else is an error and the frame is dropped by the caller.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// UDP destination port of UET (IANA assignment; Wireshark and xdp2 use it).
pub const UET_UDP_PORT: u16 = 4793;
/// Destination MAC of every transmitted frame: the fabric switch's router port.
pub const GATEWAY_MAC: [u8; 6] = [0x02, 0x55, 0x45, 0x54, 0x00, 0x01];
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// Ethernet header bytes.
pub const ETH_HDR: usize = 14;
/// IPv4 header bytes (no options).
pub const IPV4_HDR: usize = 20;
/// IPv6 header bytes.
pub const IPV6_HDR: usize = 40;
/// UDP header bytes.
pub const UDP_HDR: usize = 8;

/// Why a frame was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame ends before a header or the length a header declares.
    #[error("truncated frame")]
    Truncated,
    /// Not IPv4 or IPv6.
    #[error("unsupported EtherType {0:#06x}")]
    EtherType(u16),
    /// A malformed IP header.
    #[error("bad IP header: {0}")]
    Ip(&'static str),
    /// IPv4 header checksum mismatch.
    #[error("bad IPv4 header checksum")]
    IpChecksum,
    /// Not UDP.
    #[error("not UDP")]
    NotUdp,
    /// UDP length disagrees with IP.
    #[error("UDP length mismatch")]
    UdpLength,
    /// UDP checksum mismatch.
    #[error("bad UDP checksum")]
    UdpChecksum,
    /// Not port 4793.
    #[error("UDP destination port {0} is not UET")]
    Port(u16),
    /// Source and destination address families differ, or the packet is too long for IP.
    #[error("cannot frame: {0}")]
    Build(&'static str),
}

/// A parsed UDP datagram and the addresses around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Ethernet destination.
    pub dst_mac: [u8; 6],
    /// Ethernet source.
    pub src_mac: [u8; 6],
    /// IP source.
    pub src_ip: IpAddr,
    /// IP destination.
    pub dst_ip: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP payload (the UET packet).
    pub payload: &'a [u8],
}

fn be16(b: &[u8], at: usize) -> Result<u16, FrameError> {
    let s = b.get(at..at + 2).ok_or(FrameError::Truncated)?;
    Ok(u16::from_be_bytes([s[0], s[1]]))
}

fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
    }
    if let [last] = chunks.remainder() {
        acc = acc.wrapping_add(u32::from(*last) << 8);
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16)
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn internet_checksum(data: &[u8]) -> u16 {
    fold(sum16(data, 0))
}

fn pseudo_sum(src: IpAddr, dst: IpAddr, udp_len: usize) -> u32 {
    let mut acc = 0u32;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = sum16(&s.octets(), acc);
            acc = sum16(&d.octets(), acc);
        }
        _ => {
            let s6 = match src {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            };
            let d6 = match dst {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            };
            acc = sum16(&s6, acc);
            acc = sum16(&d6, acc);
        }
    }
    acc = acc.wrapping_add(17);
    acc = acc.wrapping_add((udp_len as u32) >> 16);
    acc.wrapping_add((udp_len as u32) & 0xFFFF)
}

fn udp_checksum(src: IpAddr, dst: IpAddr, udp: &[u8]) -> u16 {
    let c = fold(sum16(udp, pseudo_sum(src, dst, udp.len())));
    if c == 0 {
        0xFFFF
    } else {
        c
    }
}

/// Build an Ethernet/IP/UDP frame carrying `payload` to UDP port 4793.
pub fn build(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src_ip: IpAddr,
    dst_ip: IpAddr,
    src_port: u16,
    payload: &[u8],
) -> Result<Vec<u8>, FrameError> {
    let udp_len = UDP_HDR + payload.len();
    let udp_len16 = u16::try_from(udp_len).map_err(|_| FrameError::Build("too long"))?;
    let mut udp = Vec::with_capacity(udp_len);
    udp.extend_from_slice(&src_port.to_be_bytes());
    udp.extend_from_slice(&UET_UDP_PORT.to_be_bytes());
    udp.extend_from_slice(&udp_len16.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let ck = udp_checksum(src_ip, dst_ip, &udp);
    udp[6..8].copy_from_slice(&ck.to_be_bytes());

    let mut f = Vec::with_capacity(ETH_HDR + IPV6_HDR + udp_len);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    match (src_ip, dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total =
                u16::try_from(IPV4_HDR + udp_len).map_err(|_| FrameError::Build("too long"))?;
            f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let mut ip = [0u8; IPV4_HDR];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip[6] = 0x40; // DF
            ip[8] = 64;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let ck = internet_checksum(&ip);
            ip[10..12].copy_from_slice(&ck.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let mut ip = [0u8; IPV6_HDR];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&udp_len16.to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            f.extend_from_slice(&ip);
        }
        _ => return Err(FrameError::Build("mixed address families")),
    }
    f.extend_from_slice(&udp);
    Ok(f)
}

fn mac(b: &[u8], at: usize) -> Result<[u8; 6], FrameError> {
    let s = b.get(at..at + 6).ok_or(FrameError::Truncated)?;
    let mut m = [0u8; 6];
    m.copy_from_slice(s);
    Ok(m)
}

fn ip4(b: &[u8], at: usize) -> Result<IpAddr, FrameError> {
    let s = b.get(at..at + 4).ok_or(FrameError::Truncated)?;
    Ok(IpAddr::V4(Ipv4Addr::new(s[0], s[1], s[2], s[3])))
}

fn ip6(b: &[u8], at: usize) -> Result<IpAddr, FrameError> {
    let s = b.get(at..at + 16).ok_or(FrameError::Truncated)?;
    let mut o = [0u8; 16];
    o.copy_from_slice(s);
    Ok(IpAddr::V6(Ipv6Addr::from(o)))
}

/// The destination IP of a frame, for routing; `None` when it has no parsable IP header.
pub fn peek_dst_ip(frame: &[u8]) -> Option<IpAddr> {
    match be16(frame, 12).ok()? {
        ETHERTYPE_IPV4 => ip4(frame, ETH_HDR + 16).ok(),
        ETHERTYPE_IPV6 => ip6(frame, ETH_HDR + 24).ok(),
        _ => None,
    }
}

/// Parse a frame strictly (see the module docs).
pub fn parse(frame: &[u8]) -> Result<Datagram<'_>, FrameError> {
    let dst_mac = mac(frame, 0)?;
    let src_mac = mac(frame, 6)?;
    let ethertype = be16(frame, 12)?;
    let l3 = frame.get(ETH_HDR..).ok_or(FrameError::Truncated)?;
    let (src_ip, dst_ip, l4) = match ethertype {
        ETHERTYPE_IPV4 => {
            let v_ihl = *l3.first().ok_or(FrameError::Truncated)?;
            if v_ihl >> 4 != 4 {
                return Err(FrameError::Ip("version is not 4"));
            }
            let hlen = usize::from(v_ihl & 0x0F) * 4;
            if hlen < IPV4_HDR {
                return Err(FrameError::Ip("IHL below 5"));
            }
            let hdr = l3.get(..hlen).ok_or(FrameError::Truncated)?;
            if internet_checksum(hdr) != 0 {
                return Err(FrameError::IpChecksum);
            }
            let total = usize::from(be16(hdr, 2)?);
            if total < hlen {
                return Err(FrameError::Ip("total length below header length"));
            }
            let frag = be16(hdr, 6)?;
            if frag & 0x3FFF != 0 {
                return Err(FrameError::Ip("fragmented"));
            }
            if frag & 0x8000 != 0 {
                return Err(FrameError::Ip("reserved flag set"));
            }
            if hdr.get(9) != Some(&17) {
                return Err(FrameError::NotUdp);
            }
            let l4 = l3.get(hlen..total).ok_or(FrameError::Truncated)?;
            (ip4(hdr, 12)?, ip4(hdr, 16)?, l4)
        }
        ETHERTYPE_IPV6 => {
            let hdr = l3.get(..IPV6_HDR).ok_or(FrameError::Truncated)?;
            if hdr[0] >> 4 != 6 {
                return Err(FrameError::Ip("version is not 6"));
            }
            if hdr[6] != 17 {
                return Err(FrameError::NotUdp);
            }
            let plen = usize::from(be16(hdr, 4)?);
            let l4 = l3
                .get(IPV6_HDR..IPV6_HDR + plen)
                .ok_or(FrameError::Truncated)?;
            (ip6(hdr, 8)?, ip6(hdr, 24)?, l4)
        }
        other => return Err(FrameError::EtherType(other)),
    };
    if l4.len() < UDP_HDR {
        return Err(FrameError::Truncated);
    }
    let src_port = be16(l4, 0)?;
    let dst_port = be16(l4, 2)?;
    let ulen = usize::from(be16(l4, 4)?);
    let uck = be16(l4, 6)?;
    if ulen != l4.len() {
        return Err(FrameError::UdpLength);
    }
    if uck == 0 {
        if dst_ip.is_ipv6() {
            return Err(FrameError::UdpChecksum);
        }
    } else if fold(sum16(l4, pseudo_sum(src_ip, dst_ip, l4.len()))) != 0 {
        return Err(FrameError::UdpChecksum);
    }
    if dst_port != UET_UDP_PORT {
        return Err(FrameError::Port(dst_port));
    }
    Ok(Datagram {
        dst_mac,
        src_mac,
        src_ip,
        dst_ip,
        src_port,
        dst_port,
        payload: l4.get(UDP_HDR..).ok_or(FrameError::Truncated)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, a))
    }

    #[test]
    fn ipv4_round_trip_and_offsets() {
        let f = build([2; 6], GATEWAY_MAC, v4(1), v4(2), 0xC001, b"hello").unwrap();
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(f[14], 0x45);
        assert_eq!(f[14 + 9], 17);
        assert_eq!(&f[14 + 12..14 + 16], &[10, 0, 0, 1]);
        assert_eq!(&f[36..38], &4793u16.to_be_bytes());
        assert_eq!(internet_checksum(&f[14..34]), 0);
        let d = parse(&f).unwrap();
        assert_eq!(d.src_ip, v4(1));
        assert_eq!(d.dst_ip, v4(2));
        assert_eq!(d.src_port, 0xC001);
        assert_eq!(d.payload, b"hello");
        assert_eq!(peek_dst_ip(&f), Some(v4(2)));
        // Ethernet padding after the IP packet is allowed.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0; 20]);
        assert_eq!(parse(&padded).unwrap().payload, b"hello");
    }

    #[test]
    fn ipv6_round_trip() {
        let a: IpAddr = "fd00::1".parse().unwrap();
        let b: IpAddr = "fd00::2".parse().unwrap();
        let f = build([2; 6], GATEWAY_MAC, a, b, 7, b"x").unwrap();
        let d = parse(&f).unwrap();
        assert_eq!((d.src_ip, d.dst_ip, d.payload), (a, b, &b"x"[..]));
        assert!(build([2; 6], GATEWAY_MAC, a, v4(1), 7, b"x").is_err());
    }

    #[test]
    fn rejects_damage() {
        let f = build([2; 6], GATEWAY_MAC, v4(1), v4(2), 1, b"payload").unwrap();
        for cut in 0..f.len() {
            assert!(parse(&f[..cut]).is_err(), "cut at {cut}");
        }
        let mut g = f.clone();
        g[14 + 8] ^= 1; // TTL: IP checksum breaks
        assert_eq!(parse(&g), Err(FrameError::IpChecksum));
        let mut g = f.clone();
        let n = g.len();
        g[n - 1] ^= 0xFF;
        assert_eq!(parse(&g), Err(FrameError::UdpChecksum));
        let mut g = f.clone();
        g[12] = 0x88;
        assert!(matches!(parse(&g), Err(FrameError::EtherType(_))));
    }
}
