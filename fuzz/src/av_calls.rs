//! Sequences of fi_av(3) calls with fuzzed arguments (addresses, texts, counts, flags, array
//! lengths, `fi_addr_t` values) on an AV over an in-memory NIC table whose commands the input
//! may make fail (refused, unanswered, busy). Every call answers; every error has a message;
//! once the faults stop, the NIC table reads back identical to the mirror
//! (`AddressVector::verify_nic`) and every index the AV lists looks up.
//!
//! Input: the open attributes (count, rx_ctx_bits, flags, address format), then calls, one
//! opcode byte and its arguments each, until the input ends (at most [`MAX_CALLS`]).

use crate::{answered, resolver, Input};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use uet_av::{
    AddrFormat, AddressVector, AvAttr, AvLimits, Fault, MemoryNicTable, NicOp, FI_ADDR_NOTAVAIL,
    FI_AUTH_KEY, FI_AV_USER_ID, FI_MORE, FI_SYMMETRIC, FI_SYNC_ERR,
};
use uet_fwif::address::{caps, AddressingMode};
use uet_fwif::UetAddress;

/// Calls per input.
pub const MAX_CALLS: usize = 64;

type Av = AddressVector<MemoryNicTable>;

/// A valid peer address, one per `n`: IPv4 and IPv6 nodes, 4 PIDonFEPs per node.
fn peer(n: u8) -> [u8; 32] {
    let fabric_addr = if n & 0x80 != 0 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 1, u16::from(n >> 2)))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 1, 0, (n >> 2).max(1)))
    };
    UetAddress {
        caps: caps::HPC,
        mode: AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: u16::from(n & 3),
        fabric_addr,
        ri_start: 1,
        ri_count: 2,
        initiator: u32::from(n),
    }
    .to_bytes()
    .unwrap_or([0; 32])
}

/// Insert flags: the meaningful ones and their mixes, or any bits.
fn flags(input: &mut Input<'_>) -> u64 {
    match input.below(8) {
        0 | 1 => 0,
        2 => FI_MORE,
        3 => FI_SYNC_ERR,
        4 => FI_AV_USER_ID,
        5 => FI_MORE | FI_SYNC_ERR,
        6 => FI_AUTH_KEY,
        _ => input.u64(),
    }
}

/// An `fi_addr_t`: one the AV holds, a near one, a range or rx-context form, or any value.
fn fi_addr(input: &mut Input<'_>, av: &Av) -> u64 {
    match input.below(5) {
        0 | 1 => {
            let k = usize::from(input.u8());
            let held: Vec<u32> = av.indices().collect();
            held.get(k % held.len().max(1)).map_or(0, |&i| u64::from(i))
        }
        2 => u64::from(input.u8()),
        3 => FI_ADDR_NOTAVAIL,
        _ => input.u64(),
    }
}

/// An output array of the length the input says, or none.
fn out_array<T: Clone>(input: &mut Input<'_>, fill: T) -> Option<Vec<T>> {
    match input.below(9) {
        0 => None,
        n => Some(vec![fill; usize::from(n - 1)]),
    }
}

/// A NIC fault to inject, from the input.
fn arm_fault(input: &mut Input<'_>, av: &mut Av) -> String {
    let op = match input.below(4) {
        0 => NicOp::Write,
        1 => NicOp::Invalidate,
        2 => NicOp::Read,
        _ => NicOp::AuthKey,
    };
    let after = u64::from(input.below(4));
    let fault = match input.below(4) {
        0 => Fault::Refused,
        1 => Fault::InDoubt { applied: true },
        2 => Fault::InDoubt { applied: false },
        _ => Fault::Busy,
    };
    av.nic_mut().inject(op, after, fault);
    format!("fault {fault:?} of {op:?} after {after}")
}

/// The NIC table is the mirror, and every index the AV lists looks up.
fn check_consistent(av: &mut Av, what: &str) {
    av.nic_mut().clear_faults();
    match av.verify_nic() {
        Ok(m) => assert!(m.is_empty(), "after {what}: NIC and mirror differ: {m:?}"),
        Err(e) => panic!("after {what}: verify_nic with no fault: {e}"),
    }
    let held: Vec<u32> = av.indices().collect();
    assert!(held.len() <= av.capacity(), "after {what}");
    for i in held {
        let mut buf = [0u8; 64];
        let mut len = buf.len();
        if let Err(e) = av.lookup(u64::from(i), &mut buf, &mut len) {
            panic!("after {what}: index {i} is listed but does not look up: {e}");
        }
    }
}

/// Run the target on `data`; with `UET_FUZZ_TRACE` set, print each call and its outcome.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let attr = AvAttr {
        count: usize::from(input.below(64)) + 1,
        rx_ctx_bits: input.below(3),
        flags: match input.below(4) {
            0 => FI_AV_USER_ID,
            1 => FI_SYMMETRIC,
            _ => 0,
        },
        addr_format: if input.below(4) == 0 {
            AddrFormat::Str
        } else {
            AddrFormat::Uet
        },
        job_id: 1,
        ..AvAttr::default()
    };
    let nic = MemoryNicTable::new(attr.count as u32);
    let Some(mut av) = answered(Av::open(nic, attr, AvLimits::new(1 << 20, 8))) else {
        return;
    };
    av.set_resolver(resolver);
    let trace = std::env::var_os("UET_FUZZ_TRACE").is_some();
    if trace {
        eprintln!("open {attr:?}");
    }
    for call in 0..MAX_CALLS {
        if input.is_empty() {
            break;
        }
        let what = match input.below(12) {
            0 | 1 => {
                let k = usize::from(input.below(6));
                let mut addrs = Vec::with_capacity(32 * k);
                for _ in 0..k {
                    if input.below(4) == 0 {
                        let mut raw = [0u8; 32];
                        let got = input.bytes(32);
                        raw[..got.len()].copy_from_slice(got);
                        addrs.extend_from_slice(&raw);
                    } else {
                        addrs.extend_from_slice(&peer(input.u8()));
                    }
                }
                let count = if input.below(4) == 0 {
                    usize::from(input.below(8))
                } else {
                    k
                };
                let flags = flags(&mut input);
                let user_id = input_user_id(&mut input);
                let mut out = out_array(&mut input, user_id);
                let mut status = out_array(&mut input, 0i32);
                let r = av.insert_with_status(
                    &addrs,
                    count,
                    out.as_deref_mut(),
                    flags,
                    status.as_deref_mut(),
                );
                if let Ok(n) = r {
                    assert!(n <= count, "insert of {count} reported {n}");
                }
                let addrs: Vec<String> = addrs.chunks(32).map(uet_av::address_string).collect();
                let r = answered(r);
                format!("insert({addrs:?}, {count}, flags {flags:#x}) = {r:?}, fi_addr {out:x?}, status {status:?}")
            }
            2 | 3 => {
                let n = usize::from(input.below(4));
                let targets: Vec<u64> = (0..n).map(|_| fi_addr(&mut input, &av)).collect();
                let flags = flags(&mut input);
                let r = answered(av.remove(&targets, flags));
                format!("remove({targets:x?}, flags {flags:#x}) = {r:?}")
            }
            4 => {
                let at = fi_addr(&mut input, &av);
                let mut buf = vec![0u8; usize::from(input.below(48))];
                let mut len = if input.below(4) == 0 {
                    usize::from(input.u8())
                } else {
                    buf.len()
                };
                let r = answered(av.lookup(at, &mut buf, &mut len));
                format!("lookup({at:#x}) = {r:?}, len {len}")
            }
            5 => {
                let node = input.text(48);
                let service = (input.below(4) != 0).then(|| input.text(48));
                let flags = flags(&mut input);
                let mut out = input_user_id(&mut input);
                let mut status = 0i32;
                let with_out = input.below(2) == 0;
                let r = answered(av.insertsvc(
                    &node,
                    service.as_deref(),
                    with_out.then_some(&mut out),
                    flags,
                    Some(&mut status),
                ));
                format!("insertsvc({node:?}, {service:?}, flags {flags:#x}) = {r:?}, fi_addr {out:#x}, status {status}")
            }
            6 => {
                let node = input.text(48);
                let nodecnt = usize::from(input.below(9));
                let service = input.text(48);
                let svccnt = usize::from(input.below(9));
                let flags = flags(&mut input);
                let mut out = out_array(&mut input, 0u64);
                let mut status = out_array(&mut input, 0i32);
                let r = av.insertsym(
                    &node,
                    nodecnt,
                    &service,
                    svccnt,
                    out.as_deref_mut(),
                    flags,
                    status.as_deref_mut(),
                );
                if let Ok(n) = r {
                    assert!(
                        n <= nodecnt * svccnt,
                        "insertsym of {nodecnt} × {svccnt}: {n}"
                    );
                }
                let r = answered(r);
                format!("insertsym({node:?}, {nodecnt}, {service:?}, {svccnt}, flags {flags:#x}) = {r:?}, fi_addr {out:x?}, status {status:?}")
            }
            7 => {
                let at = fi_addr(&mut input, &av);
                let user_id = input.u64();
                let flags = flags(&mut input);
                let r = answered(av.set_user_id(at, user_id, flags));
                format!("set_user_id({at:#x}, {user_id:#x}, flags {flags:#x}) = {r:?}")
            }
            8 => {
                let r = answered(av.flush());
                format!("flush() = {r:?}")
            }
            9 => {
                let raw_len = usize::from(input_len(&mut input));
                let raw = input.bytes(raw_len);
                let mut buf = vec![0u8; usize::from(input.below(96))];
                let mut len = if input.below(4) == 0 {
                    usize::from(input.u8())
                } else {
                    buf.len()
                };
                let room = len.min(buf.len());
                let text = av.straddr(raw, &mut buf, &mut len);
                // What is written: an FI_ADDR_STR AV's string as its bytes are, up to a NUL
                // (the text returned replaces what is not UTF-8); else the text printed.
                let written = if av.attr().addr_format == uet_av::AddrFormat::Str {
                    raw.split(|&b| b == 0).next().unwrap_or_default()
                } else {
                    text.as_bytes()
                };
                assert_eq!(len, written.len() + 1, "fi_av_straddr's size of {text:?}");
                if room > 0 {
                    // The string, truncated to the room, and its NUL.
                    let n = written.len().min(room - 1);
                    assert_eq!(buf.get(..n), written.get(..n), "{text:?}");
                    assert_eq!(buf.get(n), Some(&0), "{text:?} unterminated");
                }
                format!("straddr({raw:02x?}) = {text:?}")
            }
            10 => {
                let k = usize::from(input.below(4));
                let texts: Vec<String> = (0..k).map(|_| input.text(96)).collect();
                let strs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let flags = flags(&mut input);
                let mut out = out_array(&mut input, 0u64);
                let mut status = out_array(&mut input, 0i32);
                let r = answered(av.insert_str(
                    &strs,
                    out.as_deref_mut(),
                    flags,
                    status.as_deref_mut(),
                ));
                format!("insert_str({strs:?}, flags {flags:#x}) = {r:?}, fi_addr {out:x?}, status {status:?}")
            }
            _ => {
                if input.below(3) == 0 {
                    check_consistent(&mut av, &format!("call {call}"));
                    "verify".to_string()
                } else {
                    arm_fault(&mut input, &mut av)
                }
            }
        };
        if trace {
            eprintln!("{call}: {what}");
        }
        assert!(
            av.len() <= av.capacity(),
            "after {what}: {} entries",
            av.len()
        );
    }
    check_consistent(&mut av, "the last call");
}

/// A user id for an `FI_AV_USER_ID` insert: small, or any value.
fn input_user_id(input: &mut Input<'_>) -> u64 {
    if input.below(2) == 0 {
        u64::from(input.u8())
    } else {
        input.u64()
    }
}

/// The length of a raw address for `fi_av_straddr`: mostly 32, or any up to 64.
fn input_len(input: &mut Input<'_>) -> u8 {
    if input.below(4) == 0 {
        input.below(65)
    } else {
        32
    }
}

/// Call sequences in the input's encoding: inserts of valid peers with every output array,
/// removes, lookups, insertsym and insertsvc (a host name), an injected fault, a flush, and
/// string inserts on an `FI_ADDR_STR` AV with user ids.
pub fn seeds() -> Vec<Vec<u8>> {
    fn text(out: &mut Vec<u8>, t: &str) {
        out.push(t.len() as u8);
        out.extend_from_slice(t.as_bytes());
    }
    let mut binary = vec![15, 0, 2, 1];
    binary.extend_from_slice(&[0, 3, 1, 5, 1, 6, 1, 7, 1, 0, 0, 1, 4, 4]);
    binary.extend_from_slice(&[2, 1, 0, 0, 0]);
    binary.extend_from_slice(&[4, 0, 1, 40, 1]);
    binary.push(6);
    text(&mut binary, "10.0.0.1");
    binary.push(3);
    text(&mut binary, "1?ri=1+2");
    binary.extend_from_slice(&[2, 0, 7, 7]);
    binary.push(5);
    text(&mut binary, "node02");
    binary.push(1);
    text(&mut binary, "9");
    binary.extend_from_slice(&[2, 0, 3, 0]);
    binary.extend_from_slice(&[11, 0, 11, 1, 0, 0, 1]);
    binary.extend_from_slice(&[0, 1, 1, 9, 1, 0, 0, 0, 0, 0]);
    binary.extend_from_slice(&[8, 11, 0]);
    let mut strings = vec![15, 0, 0, 0, 10, 2];
    text(&mut strings, "uet://10.0.0.3/2");
    text(&mut strings, "uet://node07/3?ri=1+4");
    strings.extend_from_slice(&[0, 3, 3, 7, 0, 5, 9, 9, 9, 9, 9, 9, 9, 9, 0]);
    vec![binary, strings]
}
