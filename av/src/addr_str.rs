//! UET addresses as text: the `FI_ADDR_STR` form, `fi_av_insertsvc`'s node and service, and
//! `fi_av_insertsym`'s node and service ranges.
//!
//! ## The `FI_ADDR_STR` form
//!
//! What `fi_av_straddr` prints ([`UetAddress`]'s `Display`) is also what the AV accepts:
//!
//! ```text
//! uet://<node>/<service>
//! ```
//!
//! `<node>` is an IPv4 literal (`10.0.0.7`) or a bracketed IPv6 literal (`[fd00::7]`); where an
//! AV resolves names ([`crate::AddressVector::insert_str`], `insertsvc`) it may also be a host
//! name. [`AddrStr`] (the strict `FromStr`) takes literals only: parsing never touches the
//! resolver.
//!
//! ## The service
//!
//! `<service>` is the PIDonFEP in decimal, optionally followed by parameters:
//!
//! ```text
//! <pid>[?<param>[&<param>...]]
//! param = ri=<start>+<count>   resource indices, decimal     (default 1+1)
//!       | init=<id>            Initiator ID, decimal or 0x-hex (default 0)
//!       | caps=<bits>          capabilities, decimal or 0x-hex (default 0)
//!       | abs                  absolute addressing           (default relative)
//!       | mtu                  messages limited to one MTU   (default unlimited)
//! ```
//!
//! Each parameter may appear once, in any order. So `fi_av_straddr`'s output splits into a
//! node and a service at the first `/` after `uet://`, and `insertsvc(node, service)` inserts
//! exactly the address `uet://<node>/<service>` names. The parser is strict: no blanks, no
//! signs, no empty or unknown parameters, no value on `abs`/`mtu`, every number within its
//! field (PIDonFEP and start index 12 bits, start + count at most 4096, capability bits that
//! are defined). Errors are `FI_EINVAL` naming the part that is wrong.
//!
//! ## Symmetric ranges (`fi_av_insertsym`)
//!
//! Service `k` of a range (0-based) is the base service with PIDonFEP + k and Initiator ID + k
//! (each endpoint of a node has its own PIDonFEP and initiator; resource indices, capabilities
//! and mode are the same for all). Node `n` is the base IP literal + n (as a 32- or 128-bit
//! number), or for a host name, its numeric suffix + n with the suffix's zero padding kept
//! (`node001` + 2 = `node003`, `node099` + 1 = `node100`, `n9` + 1 = `n10`). [`SymRange`] is
//! the one place where a range turns into addresses.

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};

use uet_fwif::address::{caps, AddressingMode, MAX_12BIT};
use uet_fwif::UetAddress;

use crate::errno::{FiErrno, FiError};

/// The scheme of the `FI_ADDR_STR` form.
pub const ADDR_STR_SCHEME: &str = "uet://";

/// Longest `FI_ADDR_STR` form of an address, NUL included: what a string AV's
/// [`crate::AddressVector::addrlen`] reports.
pub const ADDR_STR_MAX: usize = 6 + 41 + 1 + 4 + 4 + 9 + 6 + 10 + 6 + 4 + 8 + 1;

/// Resource indices of a service without `ri=`: start 1 (index 0 is the provider's control
/// channel), one index.
pub const DEFAULT_RI: (u16, u16) = (1, 1);

/// Longest host name a node may be (RFC 1035).
const MAX_HOST_NAME: usize = 253;

/// Resolves a host name to its addresses, in preference order. The default,
/// [`system_resolver`], is std's resolver (`getaddrinfo`).
pub type Resolver = fn(&str) -> std::io::Result<Vec<IpAddr>>;

/// std's resolver: `(name, 0).to_socket_addrs()`.
pub fn system_resolver(name: &str) -> std::io::Result<Vec<IpAddr>> {
    Ok((name, 0u16).to_socket_addrs()?.map(|sa| sa.ip()).collect())
}

fn inval(what: &str, s: &str, why: impl fmt::Display) -> FiError {
    FiError::inval(format!("{what} '{s}': {why}"))
}

// ---------------------------------------------------------------------------------------------
// service

/// A parsed service: everything of a UET address but the fabric address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Service {
    /// PIDonFEP.
    pub pid_on_fep: u16,
    /// Start Resource Index.
    pub ri_start: u16,
    /// Num Resource Indices.
    pub ri_count: u16,
    /// Initiator ID.
    pub initiator: u32,
    /// Fabric Endpoint Capabilities.
    pub caps: u8,
    /// Addressing mode.
    pub mode: AddressingMode,
    /// Messages limited to one MTU.
    pub max_msg_mtu: bool,
}

impl Service {
    /// Parse `<pid>[?<param>&...]` (see the module notes).
    pub fn parse(s: &str) -> Result<Service, FiError> {
        let (pid, query) = match s.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (s, None),
        };
        let pid_on_fep = parse_dec(pid)
            .filter(|&v| v <= u64::from(MAX_12BIT))
            .ok_or_else(|| {
                inval(
                    "service",
                    s,
                    format!("bad PIDonFEP '{pid}' (decimal 0..=4095)"),
                )
            })? as u16;
        let mut svc = Service {
            pid_on_fep,
            ri_start: DEFAULT_RI.0,
            ri_count: DEFAULT_RI.1,
            initiator: 0,
            caps: 0,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
        };
        let Some(query) = query else {
            return Ok(svc);
        };
        let mut seen = [false; 5];
        for param in query.split('&') {
            let (key, value) = match param.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (param, None),
            };
            let slot = match key {
                "ri" => 0,
                "init" => 1,
                "caps" => 2,
                "abs" => 3,
                "mtu" => 4,
                "" => return Err(inval("service", s, "empty parameter")),
                _ => return Err(inval("service", s, format!("unknown parameter '{key}'"))),
            };
            if core::mem::replace(&mut seen[slot], true) {
                return Err(inval(
                    "service",
                    s,
                    format!("parameter '{key}' given twice"),
                ));
            }
            match (key, value) {
                ("ri", Some(v)) => {
                    let (start, count) = parse_ri(v).ok_or_else(|| {
                        inval(
                            "service",
                            s,
                            format!("bad ri '{v}' (expected <start>+<count>, decimal)"),
                        )
                    })?;
                    if start > MAX_12BIT || count == 0 || u32::from(start) + u32::from(count) > 4096
                    {
                        return Err(inval(
                            "service",
                            s,
                            format!("resource indices {start}+{count} do not fit in 0..4096 (start 0..=4095, count 1 or more)"),
                        ));
                    }
                    svc.ri_start = start;
                    svc.ri_count = count;
                }
                ("init", Some(v)) => {
                    svc.initiator = parse_num(v)
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            inval(
                                "service",
                                s,
                                format!("bad init '{v}' (32-bit decimal or 0x-hex)"),
                            )
                        })?;
                }
                ("caps", Some(v)) => {
                    let c = parse_num(v)
                        .and_then(|n| u8::try_from(n).ok())
                        .ok_or_else(|| {
                            inval(
                                "service",
                                s,
                                format!("bad caps '{v}' (8-bit decimal or 0x-hex)"),
                            )
                        })?;
                    if c & !caps::ALL != 0 {
                        return Err(inval(
                            "service",
                            s,
                            format!(
                                "caps '{v}' sets undefined capability bits {:#04x}",
                                c & !caps::ALL
                            ),
                        ));
                    }
                    svc.caps = c;
                }
                ("abs", None) => svc.mode = AddressingMode::Absolute,
                ("mtu", None) => svc.max_msg_mtu = true,
                ("abs" | "mtu", Some(_)) => {
                    return Err(inval(
                        "service",
                        s,
                        format!("parameter '{key}' takes no value"),
                    ))
                }
                (_, None) => {
                    return Err(inval(
                        "service",
                        s,
                        format!("parameter '{key}' needs a value"),
                    ))
                }
                _ => return Err(inval("service", s, format!("unknown parameter '{key}'"))),
            }
        }
        Ok(svc)
    }

    /// The service of an address.
    pub fn of(a: &UetAddress) -> Service {
        Service {
            pid_on_fep: a.pid_on_fep,
            ri_start: a.ri_start,
            ri_count: a.ri_count,
            initiator: a.initiator,
            caps: a.caps,
            mode: a.mode,
            max_msg_mtu: a.max_msg_mtu,
        }
    }

    /// The address of this service at `fabric_addr`, checked.
    pub fn at(&self, fabric_addr: IpAddr) -> Result<UetAddress, FiError> {
        let a = UetAddress {
            caps: self.caps,
            mode: self.mode,
            max_msg_mtu: self.max_msg_mtu,
            pid_on_fep: self.pid_on_fep,
            fabric_addr,
            ri_start: self.ri_start,
            ri_count: self.ri_count,
            initiator: self.initiator,
        };
        a.validate()
            .map_err(|e| FiError::inval(format!("address {a}: {e}")))?;
        Ok(a)
    }

    /// The address of this service at `node`, checked, with the node's faults apart from its
    /// lookup's: an IP literal that is no usable fabric address is the outer error (the text
    /// names it), while a host name's lookup is the inner result, `FI_EADDRNOTAVAIL` when the
    /// name does not resolve and `FI_EINVAL` when it resolves to an address no peer can have
    /// (the name is well formed; its answer is what fails, as for one address among others).
    pub fn at_node(
        &self,
        node: Node<'_>,
        resolver: Resolver,
    ) -> Result<Result<UetAddress, FiError>, FiError> {
        match node {
            Node::Ip(ip) => self.at(ip).map(Ok),
            Node::Name(_) => Ok(node.resolve(resolver).and_then(|ip| self.at(ip))),
        }
    }

    /// Service `k` of a symmetric range starting here: PIDonFEP + k, Initiator ID + k.
    pub fn nth(&self, k: u64) -> Option<Service> {
        let pid = u64::from(self.pid_on_fep).checked_add(k)?;
        if pid > u64::from(MAX_12BIT) {
            return None;
        }
        let init = u64::from(self.initiator).checked_add(k)?;
        Some(Service {
            pid_on_fep: pid as u16,
            initiator: u32::try_from(init).ok()?,
            ..*self
        })
    }
}

impl fmt::Display for Service {
    /// The form [`UetAddress`]'s `Display` prints after the node: every parameter spelled out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}?ri={}+{}&init={:#x}&caps={:#04x}",
            self.pid_on_fep, self.ri_start, self.ri_count, self.initiator, self.caps
        )?;
        if self.mode == AddressingMode::Absolute {
            f.write_str("&abs")?;
        }
        if self.max_msg_mtu {
            f.write_str("&mtu")?;
        }
        Ok(())
    }
}

/// Decimal digits only, no sign, no blanks.
fn parse_dec(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Decimal, or `0x`/`0X` followed by hex digits.
fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None => parse_dec(s),
    }
}

fn parse_ri(v: &str) -> Option<(u16, u16)> {
    let (start, count) = v.split_once('+')?;
    let start = u16::try_from(parse_dec(start)?).ok()?;
    let count = u16::try_from(parse_dec(count)?).ok()?;
    Some((start, count))
}

// ---------------------------------------------------------------------------------------------
// node

/// A parsed node: an IP literal, or a host name still to resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node<'a> {
    /// An IPv4 or IPv6 literal.
    Ip(IpAddr),
    /// A host name (RFC 1123 syntax).
    Name(&'a str),
}

impl<'a> Node<'a> {
    /// Parse a node: `10.0.0.7`, `fd00::7`, `[fd00::7]`, or a host name. A string of digits
    /// and dots must be a full IPv4 literal (the resolver would read `10.1` as `10.0.0.1`), and
    /// so must any name the resolver would read as a number, `inet_aton(3)`'s forms with
    /// hexadecimal parts (`0x0a000009`, `10.0.0.0x9`): given as a name, it would resolve to
    /// an address whose count-up `insertsym` could not follow.
    pub fn parse(s: &'a str) -> Result<Node<'a>, FiError> {
        if let Some(inner) = s.strip_prefix('[') {
            let v6 = inner
                .strip_suffix(']')
                .and_then(|v| v.parse::<Ipv6Addr>().ok())
                .ok_or_else(|| inval("node", s, "not a bracketed IPv6 literal"))?;
            return Ok(Node::Ip(IpAddr::V6(v6)));
        }
        if s.contains(':') {
            return s
                .parse::<Ipv6Addr>()
                .map(|a| Node::Ip(IpAddr::V6(a)))
                .map_err(|_| inval("node", s, "not an IPv6 literal"));
        }
        let last_label = s.rsplit('.').next().unwrap_or(s);
        if !last_label.is_empty() && last_label.bytes().all(|b| b.is_ascii_digit()) {
            return s
                .parse::<Ipv4Addr>()
                .map(|a| Node::Ip(IpAddr::V4(a)))
                .map_err(|_| inval("node", s, "not an IPv4 literal (four decimal octets)"));
        }
        if s.split('.').count() <= 4 && s.split('.').all(is_inet_aton_part) {
            return Err(inval(
                "node",
                s,
                "not an IPv4 literal (four decimal octets); the resolver would read it as a \
                 number",
            ));
        }
        check_host_name(s)?;
        Ok(Node::Name(s))
    }

    /// The fabric address: the literal, or the resolver's first answer for the name.
    /// `FI_EADDRNOTAVAIL` when the name does not resolve.
    pub fn resolve(&self, resolver: Resolver) -> Result<IpAddr, FiError> {
        match *self {
            Node::Ip(ip) => Ok(ip),
            Node::Name(name) => match resolver(name) {
                Ok(ips) => ips.first().copied().ok_or_else(|| {
                    FiError::new(
                        FiErrno::FI_EADDRNOTAVAIL,
                        format!("host name '{name}' has no addresses"),
                    )
                }),
                Err(e) => Err(FiError::new(
                    FiErrno::FI_EADDRNOTAVAIL,
                    format!("host name '{name}' does not resolve: {e}"),
                )),
            },
        }
    }
}

/// Whether `part` is one part of an address `inet_aton(3)` reads (and `getaddrinfo` with it):
/// decimal, octal (leading 0: decimal digits here too) or hexadecimal (`0x`, possibly with
/// no digits).
fn is_inet_aton_part(part: &str) -> bool {
    match part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()),
    }
}

fn check_host_name(s: &str) -> Result<(), FiError> {
    if s.is_empty() {
        return Err(FiError::inval("node is empty"));
    }
    if s.len() > MAX_HOST_NAME {
        return Err(inval(
            "node",
            s,
            format!("longer than {MAX_HOST_NAME} characters"),
        ));
    }
    for label in s.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok {
            return Err(inval(
                "node",
                s,
                format!("bad host name label '{label}' (1-63 letters, digits or inner '-')"),
            ));
        }
    }
    Ok(())
}

/// Node `n` of a range: the IP + n, or the host name's numeric suffix + n, zero padding kept.
pub fn nth_node(base: &str, node: Node<'_>, n: u64) -> Result<NodeName, FiError> {
    match node {
        Node::Ip(IpAddr::V4(a)) => u32::try_from(n)
            .ok()
            .and_then(|n| u32::from(a).checked_add(n))
            .map(|v| NodeName::Ip(IpAddr::V4(Ipv4Addr::from(v))))
            .ok_or_else(|| inval("node", base, format!("+{n} runs past 255.255.255.255"))),
        Node::Ip(IpAddr::V6(a)) => u128::from(a)
            .checked_add(u128::from(n))
            .map(|v| NodeName::Ip(IpAddr::V6(Ipv6Addr::from(v))))
            .ok_or_else(|| {
                inval(
                    "node",
                    base,
                    format!("+{n} runs past the last IPv6 address"),
                )
            }),
        Node::Name(name) => {
            if n == 0 {
                return Ok(NodeName::Name(name.to_string()));
            }
            let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
            let (prefix, suffix) = name.split_at(name.len() - digits);
            if suffix.is_empty() {
                return Err(inval(
                    "node",
                    name,
                    "a host name needs a numeric suffix when nodecnt > 1",
                ));
            }
            let value = suffix
                .parse::<u64>()
                .ok()
                .and_then(|v| v.checked_add(n))
                .ok_or_else(|| inval("node", name, format!("numeric suffix + {n} overflows")))?;
            let next = format!("{prefix}{value:0width$}", width = suffix.len());
            check_host_name(&next)?;
            Ok(NodeName::Name(next))
        }
    }
}

/// One node of a range, before resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeName {
    /// An IP literal.
    Ip(IpAddr),
    /// A host name.
    Name(String),
}

impl NodeName {
    fn resolve(&self, resolver: Resolver) -> Result<IpAddr, FiError> {
        match self {
            NodeName::Ip(ip) => Ok(*ip),
            NodeName::Name(name) => Node::Name(name).resolve(resolver),
        }
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeName::Ip(ip) => write!(f, "{ip}"),
            NodeName::Name(n) => f.write_str(n),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// FI_ADDR_STR

/// Split `uet://<node>/<service>` into node and service text, brackets of an IPv6 node kept.
pub fn split_addr_str(s: &str) -> Result<(&str, &str), FiError> {
    let rest = s.strip_prefix(ADDR_STR_SCHEME).ok_or_else(|| {
        inval(
            "FI_ADDR_STR address",
            s,
            format!("does not start with '{ADDR_STR_SCHEME}'"),
        )
    })?;
    let (node, service) = if rest.starts_with('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| inval("FI_ADDR_STR address", s, "IPv6 node lacks its ']'"))?;
        let (node, after) = rest.split_at(close + 1);
        let service = after.strip_prefix('/').ok_or_else(|| {
            inval(
                "FI_ADDR_STR address",
                s,
                "expected '/' and a service after the node",
            )
        })?;
        (node, service)
    } else {
        rest.split_once('/').ok_or_else(|| {
            inval(
                "FI_ADDR_STR address",
                s,
                "expected '/' and a service after the node",
            )
        })?
    };
    if node.is_empty() {
        return Err(inval("FI_ADDR_STR address", s, "node is empty"));
    }
    if service.is_empty() {
        return Err(inval(
            "FI_ADDR_STR address",
            s,
            "service (PIDonFEP) is empty",
        ));
    }
    Ok((node, service))
}

/// Parse the `FI_ADDR_STR` form, resolving a host name node with `resolver`.
pub fn parse_addr_str_with(s: &str, resolver: Resolver) -> Result<UetAddress, FiError> {
    parse_addr_str_looked_up(s, resolver)?
}

/// [`parse_addr_str_with`], with the text's faults apart from its host name's lookup: the
/// outer error is the text's (`FI_EINVAL`: not the form, a bad node or service, an IP literal
/// that is no usable fabric address), the inner one the lookup's, as
/// [`Service::at_node`] gives it.
pub fn parse_addr_str_looked_up(
    s: &str,
    resolver: Resolver,
) -> Result<Result<UetAddress, FiError>, FiError> {
    let (node, service) = split_addr_str(s)?;
    if node.starts_with('[') != node.contains(':') {
        return Err(inval(
            "FI_ADDR_STR address",
            s,
            "an IPv6 node must be bracketed, and only an IPv6 node",
        ));
    }
    let node = Node::parse(node)?;
    let service = Service::parse(service)?;
    service.at_node(node, resolver)
}

/// A [`UetAddress`] read from its `FI_ADDR_STR` form, strictly and without resolving names:
/// the `FromStr` of the address ([`UetAddress`] lives in uet-fwif, so the impl is on this
/// wrapper). `addr.to_string().parse::<AddrStr>()` gives back `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddrStr(pub UetAddress);

impl FromStr for AddrStr {
    type Err = FiError;

    fn from_str(s: &str) -> Result<Self, FiError> {
        fn no_names(name: &str) -> std::io::Result<Vec<IpAddr>> {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("'{name}' is a host name; the FI_ADDR_STR form takes IP literals only"),
            ))
        }
        parse_addr_str_with(s, no_names)
            .map_err(|e| {
                if e.errno == FiErrno::FI_EADDRNOTAVAIL {
                    FiError::inval(e.message)
                } else {
                    e
                }
            })
            .map(AddrStr)
    }
}

impl fmt::Display for AddrStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

// ---------------------------------------------------------------------------------------------
// symmetric ranges

/// What `fi_av_insertsym` names: `nodecnt` nodes from `node`, `svccnt` services from
/// `service`, in the man page's order (every service of a node before the next node).
#[derive(Clone, Debug)]
pub struct SymRange<'a> {
    node_text: &'a str,
    node: Node<'a>,
    nodecnt: usize,
    service: Service,
    svccnt: usize,
}

impl<'a> SymRange<'a> {
    /// Parse and check the range: every node name and service it names must exist (a host
    /// name needs a numeric suffix when `nodecnt > 1`, PIDonFEP + svccnt - 1 must stay within
    /// 12 bits, the initiator within 32); an empty range (a count of 0) names none, and only
    /// the strings are checked. Nothing is resolved yet.
    pub fn parse(
        node: &'a str,
        nodecnt: usize,
        service: &str,
        svccnt: usize,
    ) -> Result<SymRange<'a>, FiError> {
        if node.starts_with(ADDR_STR_SCHEME) {
            return Err(inval(
                "node",
                node,
                "a range starts at a host name or IP literal, not an FI_ADDR_STR address",
            ));
        }
        let parsed = Node::parse(node)?;
        let service = Service::parse(service)?;
        // An empty range (fi_av(3): "The total number of inserted addresses will be nodecnt x
        // svccnt") names no member to check: only the strings themselves must be well formed.
        let empty = nodecnt == 0 || svccnt == 0;
        if !empty && svccnt > 1 && service.nth(svccnt as u64 - 1).is_none() {
            return Err(inval(
                "service",
                &service.to_string(),
                format!("{svccnt} services run past PIDonFEP 4095 or Initiator ID 0xffffffff"),
            ));
        }
        if !empty && nodecnt > 1 {
            nth_node(node, parsed, nodecnt as u64 - 1)?;
        }
        Ok(SymRange {
            node_text: node,
            node: parsed,
            nodecnt,
            service,
            svccnt,
        })
    }

    /// nodecnt × svccnt, or `None` on overflow.
    pub fn len(&self) -> Option<usize> {
        self.nodecnt.checked_mul(self.svccnt)
    }

    /// The range names no address.
    pub fn is_empty(&self) -> bool {
        self.nodecnt == 0 || self.svccnt == 0
    }

    /// For a range whose node is an IP literal: `(member 0, services per node, members)`, the
    /// description a symmetric range entry stores, when every member is a usable address.
    /// `None` for a host name (each node resolves on its own, so the addresses need not be
    /// sequential) or when some member is unusable ([`SymRange::expand`] then says which).
    pub fn literal_set(&self) -> Option<(UetAddress, u32, u32)> {
        let Node::Ip(ip) = self.node else {
            return None;
        };
        let base = self.service.at(ip).ok()?;
        let svc = u32::try_from(self.svccnt).ok()?;
        let total = u32::try_from(self.len()?).ok()?;
        if svc == 0 || total == 0 {
            return None;
        }
        // Every node's first and last service must be a valid address; services in between
        // differ only in PIDonFEP and initiator, which stay in range between those two.
        let nodes = total / svc;
        for n in 0..nodes {
            let first = n.checked_mul(svc)?;
            base.symmetric_member(svc, first)?;
            base.symmetric_member(svc, first.checked_add(svc - 1)?)?;
        }
        Some((base, svc, total))
    }

    /// Every address of the range, in insertion order, each resolved and checked: the path
    /// for host-name ranges and AVs with user ids; IP-literal ranges are stored as symmetric
    /// range entries instead ([`SymRange::literal_set`]). The first member that fails fails
    /// the whole range; [`SymRange::expand_each`] keeps the members of nodes that resolve.
    pub fn expand(&self, resolver: Resolver) -> Result<Vec<UetAddress>, FiError> {
        self.expand_each(resolver)?.into_iter().collect()
    }

    /// [`SymRange::expand`], with a node whose name does not resolve failing only its own
    /// `svccnt` members (`FI_EADDRNOTAVAIL` each), as fi_av(3) reports a failed address
    /// among others that succeed; so does a node whose name resolves to an address no peer
    /// can have (unspecified, multicast, broadcast: `FI_EINVAL` each), which is the answer of
    /// that node's lookup, as a name that does not resolve is, not a fault of the range. What
    /// makes the range itself wrong (a suffix, PIDonFEP or fabric address that runs out, an IP
    /// literal range that reaches an unusable address) is still the error of the whole.
    pub fn expand_each(
        &self,
        resolver: Resolver,
    ) -> Result<Vec<Result<UetAddress, FiError>>, FiError> {
        let total = self
            .len()
            .ok_or_else(|| FiError::inval("nodecnt × svccnt overflows"))?;
        let mut out = Vec::new();
        if self.is_empty() {
            // No member: nothing to resolve (a node without services is looked up for none).
            return Ok(out);
        }
        out.try_reserve_exact(total)
            .map_err(|_| FiError::new(FiErrno::FI_ENOMEM, "no memory to expand the range"))?;
        for n in 0..self.nodecnt as u64 {
            let node = nth_node(self.node_text, self.node, n)?;
            // A literal is the range's own arithmetic; a name's address is its lookup's.
            let looked_up = matches!(node, NodeName::Name(_));
            let ip = node.resolve(resolver);
            for k in 0..self.svccnt as u64 {
                let svc = self.service.nth(k).ok_or_else(|| {
                    FiError::inval(format!("service {} + {k} is out of range", self.service))
                })?;
                out.push(match &ip {
                    Ok(ip) => match svc.at(*ip) {
                        Ok(a) => Ok(a),
                        // The service is checked above: only the looked-up address is wrong.
                        Err(e) if looked_up => Err(e),
                        Err(e) => return Err(e),
                    },
                    Err(e) => Err(e.clone()),
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ip: &str) -> UetAddress {
        UetAddress {
            caps: caps::AI_BASE | caps::HPC,
            mode: AddressingMode::Relative,
            max_msg_mtu: false,
            pid_on_fep: 0x123,
            fabric_addr: ip.parse().unwrap(),
            ri_start: 16,
            ri_count: 16,
            initiator: 0xdead_beef,
        }
    }

    fn err(r: Result<impl fmt::Debug, FiError>) -> FiError {
        r.expect_err("should fail")
    }

    #[test]
    fn display_round_trips_through_addr_str() {
        for a in [
            addr("10.0.0.7"),
            UetAddress {
                mode: AddressingMode::Absolute,
                max_msg_mtu: true,
                ..addr("fd00::7")
            },
            UetAddress {
                caps: 0,
                initiator: 0,
                pid_on_fep: 4095,
                ri_start: 4095,
                ri_count: 1,
                ..addr("::ffff:10.1.2.3")
            },
        ] {
            let s = a.to_string();
            assert_eq!(s.parse::<AddrStr>().unwrap().0, a, "{s}");
            assert_eq!(s.parse::<AddrStr>().unwrap().to_string(), s);
            assert!(s.len() < ADDR_STR_MAX, "{s}");
            let (node, service) = split_addr_str(&s).unwrap();
            assert_eq!(Service::parse(service).unwrap(), Service::of(&a));
            assert_eq!(Service::of(&a).to_string(), service);
            assert!(matches!(Node::parse(node).unwrap(), Node::Ip(ip) if ip == a.fabric_addr));
        }
    }

    #[test]
    fn longest_string_fits_addr_str_max() {
        let a = UetAddress {
            caps: caps::ALL,
            mode: AddressingMode::Absolute,
            max_msg_mtu: true,
            pid_on_fep: 4095,
            fabric_addr: "fd00:1111:2222:3333:4444:5555:6666:7777".parse().unwrap(),
            ri_start: 1000,
            ri_count: 3096,
            initiator: u32::MAX,
        };
        assert_eq!(a.to_string().len() + 1, ADDR_STR_MAX);
    }

    #[test]
    fn service_defaults_and_any_order() {
        let s = Service::parse("7").unwrap();
        assert_eq!(
            (s.pid_on_fep, s.ri_start, s.ri_count, s.initiator, s.caps),
            (7, 1, 1, 0, 0)
        );
        assert_eq!(s.mode, AddressingMode::Relative);
        assert!(!s.max_msg_mtu);
        let s = Service::parse("7?mtu&init=42&abs&caps=5&ri=0+4096").unwrap();
        assert_eq!(
            (s.ri_start, s.ri_count, s.initiator, s.caps),
            (0, 4096, 42, 5)
        );
        assert_eq!(s.mode, AddressingMode::Absolute);
        assert!(s.max_msg_mtu);
        assert_eq!(Service::parse("7?init=0XFF").unwrap().initiator, 255);
    }

    #[test]
    fn service_errors_name_the_bad_part() {
        for (s, part) in [
            ("", "bad PIDonFEP ''"),
            ("4096", "bad PIDonFEP '4096'"),
            ("+5", "bad PIDonFEP '+5'"),
            (" 5", "bad PIDonFEP ' 5'"),
            ("5?", "empty parameter"),
            ("5?ri=1+2&", "empty parameter"),
            ("5?port=9", "unknown parameter 'port'"),
            ("5?ri=1+1&ri=2+2", "parameter 'ri' given twice"),
            ("5?ri=1-2", "bad ri '1-2'"),
            ("5?ri=1+0", "resource indices 1+0"),
            ("5?ri=4000+97", "resource indices 4000+97"),
            ("5?ri=4096+0", "resource indices 4096+0"),
            ("5?init=0x1_0000_0000", "bad init"),
            ("5?init=4294967296", "bad init '4294967296'"),
            ("5?init=", "bad init ''"),
            ("5?init=0x", "bad init '0x'"),
            ("5?caps=0x100", "bad caps '0x100'"),
            ("5?caps=0x08", "undefined capability bits 0x08"),
            ("5?abs=1", "parameter 'abs' takes no value"),
            ("5?init", "parameter 'init' needs a value"),
        ] {
            let e = err(Service::parse(s));
            assert_eq!(e.errno, FiErrno::FI_EINVAL, "{s}");
            assert!(e.message.contains(part), "{s}: {e}");
            assert!(e.message.contains(&format!("'{s}'")), "{s}: {e}");
        }
    }

    #[test]
    fn addr_str_errors_name_the_bad_part() {
        for (s, part) in [
            ("10.0.0.1/5", "does not start with 'uet://'"),
            ("UET://10.0.0.1/5", "does not start with 'uet://'"),
            ("uet://10.0.0.1", "expected '/' and a service"),
            ("uet:///5", "node is empty"),
            ("uet://10.0.0.1/", "service (PIDonFEP) is empty"),
            ("uet://[fd00::1/5", "lacks its ']'"),
            ("uet://[fd00::1]5", "expected '/'"),
            ("uet://fd00::1/5", "must be bracketed"),
            ("uet://[10.0.0.1]/5", "must be bracketed"),
            ("uet://10.0.0/5", "not an IPv4 literal"),
            ("uet://10.0.0.256/5", "not an IPv4 literal"),
            ("uet://[fd00::g]/5", "not a bracketed IPv6 literal"),
            ("uet://0.0.0.0/5", "unusable fabric address"),
            ("uet://224.0.0.1/5", "unusable fabric address"),
            ("uet://10.0.0.1/5?ri=2+", "bad ri"),
            ("uet://localhost/5", "takes IP literals only"),
            ("uet://bad_host/5", "bad host name label 'bad_host'"),
        ] {
            let e = err(s.parse::<AddrStr>());
            assert_eq!(e.errno, FiErrno::FI_EINVAL, "{s}");
            assert!(e.message.contains(part), "{s}: {e}");
        }
    }

    #[test]
    fn nodes() {
        assert_eq!(
            Node::parse("10.1.1.1").unwrap(),
            Node::Ip("10.1.1.1".parse().unwrap())
        );
        assert_eq!(
            Node::parse("fd00::1").unwrap(),
            Node::Ip("fd00::1".parse().unwrap())
        );
        assert_eq!(
            Node::parse("[fd00::1]").unwrap(),
            Node::Ip("fd00::1".parse().unwrap())
        );
        assert_eq!(Node::parse("node001").unwrap(), Node::Name("node001"));
        assert_eq!(
            Node::parse("a-1.example.org").unwrap(),
            Node::Name("a-1.example.org")
        );
        for bad in [
            "",
            "10.1",
            "1234",
            "-a",
            "a-",
            "a..b",
            "a b",
            "é",
            "fd00::1%eth0",
            // Numbers to the resolver (inet_aton), not host names.
            "0x0a000009",
            "10.0.0.0x9",
            "1.0xa",
            "0X7F.1",
            "0x",
            "10.0x0.0.0xff",
        ] {
            assert_eq!(err(Node::parse(bad)).errno, FiErrno::FI_EINVAL, "{bad:?}");
        }
        // Names that only look like one: more than four parts, or a part not a number.
        for name in ["1.2.3.4.0x5", "0xg1", "x0a", "node0x1"] {
            assert_eq!(Node::parse(name).unwrap(), Node::Name(name), "{name}");
        }
        assert!(Node::parse(&"a".repeat(254)).is_err());
        assert!(Node::parse(&format!("{}.b", "a".repeat(64))).is_err());
    }

    #[test]
    fn node_ranges_count_up() {
        let name =
            |base: &str, n| nth_node(base, Node::parse(base).unwrap(), n).map(|x| x.to_string());
        assert_eq!(name("node001", 0).unwrap(), "node001");
        assert_eq!(name("node001", 2).unwrap(), "node003");
        assert_eq!(name("node099", 1).unwrap(), "node100");
        assert_eq!(name("host10", 1).unwrap(), "host11");
        assert_eq!(name("n9", 1).unwrap(), "n10");
        assert_eq!(name("rack1.n01", 0).unwrap(), "rack1.n01");
        assert_eq!(name("localhost", 0).unwrap(), "localhost");
        let e = err(name("localhost", 1));
        assert!(e.message.contains("numeric suffix"), "{e}");
        assert!(name("n18446744073709551615", 1).is_err());
        assert_eq!(name("10.1.1.255", 1).unwrap(), "10.1.2.0");
        assert!(name("255.255.255.255", 1).is_err());
        assert_eq!(name("fd00::ffff", 1).unwrap(), "fd00::1:0");
    }

    #[test]
    fn service_ranges_count_pid_and_initiator() {
        let s = Service::parse("4094?init=7").unwrap();
        let n = s.nth(1).unwrap();
        assert_eq!((n.pid_on_fep, n.initiator), (4095, 8));
        assert!(s.nth(2).is_none());
        assert!(Service::parse("1?init=0xffffffff")
            .unwrap()
            .nth(1)
            .is_none());
        let e = err(SymRange::parse("10.0.0.1", 1, "4094", 3));
        assert!(e.message.contains("run past PIDonFEP 4095"), "{e}");
    }

    #[test]
    fn sym_range_expands_node_major() {
        let r = SymRange::parse("10.1.1.1", 2, "5000?ri=1+8", 0).unwrap_err();
        assert!(r.message.contains("bad PIDonFEP '5000'"), "{r}");
        let r = SymRange::parse("10.1.1.1", 2, "500?ri=1+8", 2).unwrap();
        assert_eq!(r.len(), Some(4));
        let got: Vec<(String, u16)> = r
            .expand(system_resolver)
            .unwrap()
            .iter()
            .map(|a| (a.fabric_addr.to_string(), a.pid_on_fep))
            .collect();
        let want = [
            ("10.1.1.1", 500),
            ("10.1.1.1", 501),
            ("10.1.1.2", 500),
            ("10.1.1.2", 501),
        ];
        assert_eq!(got, want.map(|(ip, p)| (ip.to_string(), p)));
        fn fake(name: &str) -> std::io::Result<Vec<IpAddr>> {
            match name.strip_prefix("node") {
                Some(n) => Ok(vec![IpAddr::V4(Ipv4Addr::new(
                    10,
                    9,
                    0,
                    n.parse().unwrap(),
                ))]),
                None => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "unknown")),
            }
        }
        let r = SymRange::parse("node007", 3, "1", 1).unwrap();
        let ips: Vec<IpAddr> = r
            .expand(fake)
            .unwrap()
            .iter()
            .map(|a| a.fabric_addr)
            .collect();
        assert_eq!(
            ips,
            ["10.9.0.7", "10.9.0.8", "10.9.0.9"].map(|s| s.parse::<IpAddr>().unwrap())
        );
        let e = SymRange::parse("other1", 1, "1", 1)
            .unwrap()
            .expand(fake)
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EADDRNOTAVAIL);
        assert!(e.message.contains("'other1' does not resolve"), "{e}");
        let e = SymRange::parse("uet://10.0.0.1/1", 1, "1", 1).unwrap_err();
        assert!(e.message.contains("not an FI_ADDR_STR address"), "{e}");
        // A range into an unusable address fails as a whole.
        let e = SymRange::parse("223.255.255.255", 2, "1", 1)
            .unwrap()
            .expand(system_resolver)
            .unwrap_err();
        assert!(e.message.contains("unusable fabric address"), "{e}");
    }

    #[test]
    fn localhost_resolves_to_loopback() {
        let ip = Node::parse("localhost")
            .unwrap()
            .resolve(system_resolver)
            .unwrap();
        assert!(ip.is_loopback(), "{ip}");
    }
}
