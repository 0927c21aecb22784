//! What the IOMMU behind a VFIO container translates: the answer to `VFIO_IOMMU_GET_INFO`
//! (`linux/vfio.h`, Type 1 IOMMU), which the kernel VFIO backend asks once the function's
//! group has joined the container (the container has no IOMMU before that).
//!
//! The answer is `struct vfio_iommu_type1_info`, in host byte order, then a chain of
//! capabilities when `flags` has `VFIO_IOMMU_INFO_CAPS`:
//!
//! | offset | field | |
//! |---|---|---|
//! | 0 | `argsz` (u32) | bytes the full answer needs; the caller asks again with that much room |
//! | 4 | `flags` (u32) | bit 0 `VFIO_IOMMU_INFO_PGSIZES`, bit 1 `VFIO_IOMMU_INFO_CAPS` |
//! | 8 | `iova_pgsizes` (u64) | bitmap of the page sizes the IOMMU maps |
//! | 16 | `cap_offset` (u32) | first capability, from byte 0 of the answer; 0: none |
//!
//! Each capability starts with `struct vfio_info_cap_header`: `id` (u16), `version` (u16),
//! `next` (u32, the next capability's offset from byte 0; 0 ends the chain). Two are read,
//! and any other is skipped:
//!
//! * `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE` (1, Linux 5.4): `nr_iovas` (u32), a reserved
//!   u32, then `nr_iovas` × `struct vfio_iova_range { u64 start; u64 end; }`, `end`
//!   inclusive: the IOVAs the IOMMU translates, less its reserved regions (the x86 interrupt
//!   window, AMD's HyperTransport window, a platform's RMRRs). `VFIO_IOMMU_MAP_DMA` refuses
//!   anything outside them with `EINVAL`.
//! * `VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL` (3, Linux 5.10): `avail` (u32), how many more DMA
//!   mappings the container may hold (module parameter `vfio_iommu_type1.dma_entry_limit`,
//!   65,535 by default); past it `VFIO_IOMMU_MAP_DMA` fails with `ENOSPC`.
//!
//! An older kernel reports neither; the driver then assumes every IOVA and no limit, as the
//! kernel's own checks did then.
//!
//! The answer comes from the kernel, but it is parsed as untrusted bytes all the same: every
//! offset is bounds-checked, the chain must move forward (so it ends), and a malformed answer
//! is an error naming what is wrong, never a panic.

use crate::dma::IovaRange;
use std::os::fd::BorrowedFd;
use vfio_bindings::bindings::vfio::{
    VFIO_BASE, VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE,
    VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL, VFIO_TYPE,
};
use zerocopy::byteorder::native_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `struct vfio_iommu_type1_info`, host byte order.
#[derive(Clone, Copy, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct InfoHeader {
    argsz: U32,
    flags: U32,
    iova_pgsizes: U64,
    cap_offset: U32,
    pad: U32,
}

/// `struct vfio_info_cap_header`.
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct CapHeader {
    id: U16,
    version: U16,
    /// The next capability's offset from byte 0 of the answer; 0 ends the chain.
    next: U32,
}

/// The fixed part of `struct vfio_iommu_type1_info_cap_iova_range`, before its ranges.
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct IovaRangeCap {
    nr_iovas: U32,
    reserved: U32,
}

/// `struct vfio_iova_range`: both ends inclusive.
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawIovaRange {
    start: U64,
    end: U64,
}

/// Bytes of `struct vfio_iommu_type1_info` (without capabilities).
const INFO_BYTES: usize = core::mem::size_of::<InfoHeader>();
/// The most the driver lets the kernel's answer be (4,000 IOVA ranges): a bound on what a
/// corrupted `argsz` can make it allocate.
const MAX_INFO_BYTES: usize = 64 * 1024;

/// What the IOMMU reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IommuInfo {
    /// The page sizes the IOMMU maps (a bitmap of sizes), when reported.
    pub page_sizes: Option<u64>,
    /// The IOVAs it translates, when reported (`None`: every IOVA, as far as is known).
    pub iova_ranges: Option<Vec<IovaRange>>,
    /// How many more DMA mappings the container may hold, when reported.
    pub dma_avail: Option<u32>,
}

impl IommuInfo {
    /// The smallest page the IOMMU maps, when reported: every DMA mapping's IOVA and length
    /// must be a multiple of it.
    pub fn min_page(&self) -> Option<u64> {
        self.page_sizes
            .filter(|&p| p != 0)
            .map(|p| 1u64 << p.trailing_zeros())
    }

    /// The IOVA ranges to place DMA memory in: those reported, or every IOVA.
    pub fn usable_ranges(&self) -> Vec<IovaRange> {
        self.iova_ranges
            .clone()
            .unwrap_or_else(|| vec![IovaRange::ALL])
    }

    /// Parse an answer of `VFIO_IOMMU_GET_INFO` (the bytes the kernel filled, `argsz` of
    /// them at most). Errors name the malformed field.
    pub fn parse(answer: &[u8]) -> Result<IommuInfo, String> {
        let argsz = U32::read_from_prefix(answer)
            .map_err(|_| "the answer is shorter than its argsz field")?
            .0
            .get();
        let len = usize::try_from(argsz).unwrap_or(usize::MAX);
        if len < INFO_BYTES {
            return Err(format!(
                "argsz {argsz} is below the {INFO_BYTES} bytes of vfio_iommu_type1_info"
            ));
        }
        let answer = answer.get(..len).ok_or_else(|| {
            format!(
                "argsz {argsz} is more than the {} bytes given for the answer",
                answer.len()
            )
        })?;
        // At least INFO_BYTES, checked above.
        let (head, _) = InfoHeader::ref_from_prefix(answer)
            .map_err(|_| "the answer is shorter than vfio_iommu_type1_info")?;
        let flags = head.flags.get();
        let mut info = IommuInfo {
            page_sizes: (flags & VFIO_IOMMU_INFO_PGSIZES != 0).then(|| head.iova_pgsizes.get()),
            ..IommuInfo::default()
        };
        if flags & VFIO_IOMMU_INFO_CAPS == 0 {
            return Ok(info);
        }
        let mut at = head.cap_offset.get() as usize;
        let mut previous = INFO_BYTES - 1;
        while at != 0 {
            // Forward only, past the fixed part: the chain ends however the offsets are set.
            if at <= previous {
                return Err(format!(
                    "capability at offset {at} does not follow the one at {previous}"
                ));
            }
            let (cap, body) = answer
                .get(at..)
                .and_then(|c| CapHeader::ref_from_prefix(c).ok())
                .ok_or_else(|| format!("capability header at offset {at} past argsz {argsz}"))?;
            match u32::from(cap.id.get()) {
                VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE if info.iova_ranges.is_none() => {
                    info.iova_ranges = Some(iova_ranges(body, at, cap.version.get())?);
                }
                VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL if info.dma_avail.is_none() => {
                    let avail = U32::read_from_prefix(body).map_err(|_| {
                        format!("DMA_AVAIL capability at offset {at} past argsz {argsz}")
                    })?;
                    info.dma_avail = Some(avail.0.get());
                }
                _ => {}
            }
            previous = at;
            at = cap.next.get() as usize;
        }
        Ok(info)
    }
}

impl IommuInfo {
    /// The answer a kernel gives for this: the fixed part (`VFIO_IOMMU_INFO_PGSIZES` when
    /// there are page sizes), then the IOVA_RANGE and DMA_AVAIL capabilities there are, each
    /// 8-byte aligned as the kernel places them. [`IommuInfo::parse`] reads it back
    /// unchanged: for tests and fuzzing seeds.
    pub fn encode(&self) -> Vec<u8> {
        let mut head = InfoHeader::default();
        let mut caps: Vec<(u32, Vec<u8>)> = Vec::new();
        if let Some(p) = self.page_sizes {
            head.flags = U32::new(head.flags.get() | VFIO_IOMMU_INFO_PGSIZES);
            head.iova_pgsizes = U64::new(p);
        }
        if let Some(ranges) = &self.iova_ranges {
            let mut body = IovaRangeCap {
                nr_iovas: U32::new(ranges.len() as u32),
                reserved: U32::new(0),
            }
            .as_bytes()
            .to_vec();
            for r in ranges {
                let raw = RawIovaRange {
                    start: U64::new(r.start),
                    end: U64::new(r.last),
                };
                body.extend_from_slice(raw.as_bytes());
            }
            caps.push((VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, body));
        }
        if let Some(avail) = self.dma_avail {
            caps.push((
                VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL,
                avail.to_ne_bytes().to_vec(),
            ));
        }
        if !caps.is_empty() {
            head.flags = U32::new(head.flags.get() | VFIO_IOMMU_INFO_CAPS);
            head.cap_offset = U32::new(INFO_BYTES as u32);
        }
        let mut b = head.as_bytes().to_vec();
        let last = caps.len().saturating_sub(1);
        for (k, (id, body)) in caps.into_iter().enumerate() {
            // Each capability 8-byte aligned; `next` is where the following one will start.
            let end =
                (b.len() + core::mem::size_of::<CapHeader>() + body.len()).next_multiple_of(8);
            let cap = CapHeader {
                id: U16::new(id as u16),
                version: U16::new(1),
                next: U32::new(if k == last { 0 } else { end as u32 }),
            };
            b.extend_from_slice(cap.as_bytes());
            b.extend_from_slice(&body);
            b.resize(end, 0);
        }
        let len = b.len() as u32;
        b[..4].copy_from_slice(&len.to_ne_bytes());
        b
    }
}

/// The ranges of an IOVA_RANGE capability whose header is at `at`.
fn iova_ranges(body: &[u8], at: usize, version: u16) -> Result<Vec<IovaRange>, String> {
    if version == 0 {
        return Err(format!(
            "IOVA_RANGE capability at offset {at} has version 0"
        ));
    }
    let (cap, rest) = IovaRangeCap::ref_from_prefix(body)
        .map_err(|_| format!("IOVA_RANGE capability at offset {at} ends in its header"))?;
    let count = cap.nr_iovas.get();
    let (raw, _) =
        <[RawIovaRange]>::ref_from_prefix_with_elems(rest, count as usize).map_err(|_| {
            format!(
                "IOVA_RANGE capability at offset {at} lists {count} ranges, more than its {} \
                 bytes hold",
                body.len()
            )
        })?;
    let ranges: Vec<IovaRange> = raw
        .iter()
        .map(|r| IovaRange {
            start: r.start.get(),
            last: r.end.get(),
        })
        .collect();
    if let Some(bad) = ranges.iter().find(|r| r.start > r.last) {
        return Err(format!(
            "IOVA_RANGE capability at offset {at} has a range ending before it starts ({:#x} \
             to {:#x})",
            bad.start, bad.last
        ));
    }
    Ok(ranges)
}

/// Ask the IOMMU of the container `container` (which has a group, so an IOMMU type):
/// `VFIO_IOMMU_GET_INFO` with the fixed part first, then again with the room the kernel
/// asked for when it has capabilities to give.
pub(crate) fn query(container: BorrowedFd<'_>) -> std::io::Result<IommuInfo> {
    // _IO(VFIO_TYPE, VFIO_BASE + 12), linux/vfio.h.
    const VFIO_IOMMU_GET_INFO: libc::c_ulong =
        (VFIO_TYPE as libc::c_ulong) << 8 | (VFIO_BASE as libc::c_ulong + 12);
    use std::os::fd::AsRawFd;
    let mut len = INFO_BYTES;
    // The answer can grow between two calls (a group joining adds reserved regions): a few
    // tries, each with the room the last one asked for.
    for _ in 0..4 {
        // u64 words: the struct's alignment.
        let mut words = vec![0u64; len.div_ceil(8)];
        let argsz = u32::try_from(len).map_err(std::io::Error::other)?;
        if let Some(field) = words.as_mut_bytes().get_mut(..4) {
            field.copy_from_slice(&argsz.to_ne_bytes());
        }
        // SAFETY: VFIO_IOMMU_GET_INFO writes at most `argsz` bytes (the value just stored in
        // the buffer's first u32) into the buffer, which holds `len` = `argsz` bytes or more
        // and is aligned for u64 as `struct vfio_iommu_type1_info` needs; the descriptor is
        // the container's, open for the call.
        let r = unsafe {
            libc::ioctl(
                container.as_raw_fd(),
                VFIO_IOMMU_GET_INFO as _,
                words.as_mut_ptr(),
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let bytes = words.as_bytes();
        let asked = U32::read_from_prefix(bytes).map_or(0, |(a, _)| a.get() as usize);
        if asked <= len {
            // The kernel may have filled less than it had room for: parse what argsz says.
            return IommuInfo::parse(bytes.get(..asked.max(INFO_BYTES)).unwrap_or(bytes))
                .map_err(std::io::Error::other);
        }
        if asked > MAX_INFO_BYTES {
            return Err(std::io::Error::other(format!(
                "the IOMMU's answer needs {asked} bytes, more than the {MAX_INFO_BYTES} allowed"
            )));
        }
        len = asked;
    }
    Err(std::io::Error::other(
        "the IOMMU's answer kept growing between calls",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer: the fixed part with `flags` and `pgsizes`, then `caps` (id, version,
    /// body) chained in order, each 8-byte aligned as the kernel places them.
    fn answer(flags: u32, pgsizes: u64, caps: &[(u16, u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![0u8; INFO_BYTES];
        b[4..8].copy_from_slice(&flags.to_ne_bytes());
        b[8..16].copy_from_slice(&pgsizes.to_ne_bytes());
        let mut link = 16;
        for (id, version, body) in caps {
            let at = b.len();
            b[link..link + 4].copy_from_slice(&(at as u32).to_ne_bytes());
            b.extend_from_slice(&id.to_ne_bytes());
            b.extend_from_slice(&version.to_ne_bytes());
            b.extend_from_slice(&0u32.to_ne_bytes());
            link = at + 4;
            b.extend_from_slice(body);
            b.resize(b.len().next_multiple_of(8), 0);
        }
        let len = b.len() as u32;
        b[..4].copy_from_slice(&len.to_ne_bytes());
        b
    }

    fn iova_range_cap(ranges: &[(u64, u64)]) -> (u16, u16, Vec<u8>) {
        let mut body = (ranges.len() as u32).to_ne_bytes().to_vec();
        body.extend_from_slice(&0u32.to_ne_bytes());
        for (s, e) in ranges {
            body.extend_from_slice(&s.to_ne_bytes());
            body.extend_from_slice(&e.to_ne_bytes());
        }
        (VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16, 1, body)
    }

    fn dma_avail_cap(avail: u32) -> (u16, u16, Vec<u8>) {
        (
            VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL as u16,
            1,
            avail.to_ne_bytes().to_vec(),
        )
    }

    /// An Intel IOMMU's answer: 48-bit aperture less the interrupt window, 4 KiB, 2 MiB and
    /// 1 GiB pages, the default mapping limit; an unknown capability (migration) between.
    #[test]
    fn ranges_page_sizes_and_the_mapping_limit_are_read() {
        let a = answer(
            VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS,
            0x4020_1000,
            &[
                iova_range_cap(&[(0, 0xfedf_ffff), (0xfef0_0000, (1 << 48) - 1)]),
                (2, 1, vec![0; 24]),
                dma_avail_cap(65_535),
            ],
        );
        let info = IommuInfo::parse(&a).unwrap();
        assert_eq!(info.min_page(), Some(4096));
        assert_eq!(
            info.usable_ranges(),
            [
                IovaRange {
                    start: 0,
                    last: 0xfedf_ffff
                },
                IovaRange {
                    start: 0xfef0_0000,
                    last: (1 << 48) - 1
                }
            ]
        );
        assert_eq!(info.dma_avail, Some(65_535));
    }

    /// What `encode` writes, `parse` reads back; the hand-built answer above is what it
    /// writes.
    #[test]
    fn encoded_answers_parse_back() {
        let info = IommuInfo {
            page_sizes: Some(0x4020_1000),
            iova_ranges: Some(vec![
                IovaRange {
                    start: 0,
                    last: 0xfedf_ffff,
                },
                IovaRange {
                    start: 0xfef0_0000,
                    last: 0xfc_ffff_ffff,
                },
                IovaRange {
                    start: 0x100_0000_0000,
                    last: (1 << 48) - 1,
                },
            ]),
            dma_avail: Some(65_535),
        };
        assert_eq!(IommuInfo::parse(&info.encode()), Ok(info.clone()));
        for partial in [
            IommuInfo::default(),
            IommuInfo {
                iova_ranges: Some(vec![]),
                ..info.clone()
            },
            IommuInfo {
                page_sizes: None,
                dma_avail: None,
                ..info.clone()
            },
        ] {
            assert_eq!(IommuInfo::parse(&partial.encode()), Ok(partial));
        }
        let ranges = info.iova_ranges.clone().unwrap_or_default();
        let pairs: Vec<(u64, u64)> = ranges.iter().map(|r| (r.start, r.last)).collect();
        assert_eq!(
            info.encode(),
            answer(
                VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS,
                0x4020_1000,
                &[iova_range_cap(&pairs), dma_avail_cap(65_535)]
            )
        );
    }

    /// A kernel before 5.4 reports no capability, or no capability flag: every IOVA.
    #[test]
    fn an_answer_without_capabilities_allows_every_iova() {
        for flags in [0, VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_INFO_CAPS] {
            let info = IommuInfo::parse(&answer(flags, 0x1000, &[])).unwrap();
            assert_eq!(info.usable_ranges(), [IovaRange::ALL]);
            assert_eq!(info.dma_avail, None);
            let pages = (flags & VFIO_IOMMU_INFO_PGSIZES != 0).then_some(0x1000);
            assert_eq!(info.page_sizes, pages, "flags {flags:#x}");
        }
        // Capabilities present but the flag clear: not read.
        let mut a = answer(VFIO_IOMMU_INFO_CAPS, 0, &[dma_avail_cap(7)]);
        a[4..8].copy_from_slice(&0u32.to_ne_bytes());
        assert_eq!(IommuInfo::parse(&a).unwrap().dma_avail, None);
    }

    #[test]
    fn malformed_answers_are_errors_naming_what_is_wrong() {
        let good = answer(
            VFIO_IOMMU_INFO_CAPS,
            0,
            &[iova_range_cap(&[(1 << 32, 1 << 40)]), dma_avail_cap(3)],
        );
        assert!(IommuInfo::parse(&good).is_ok());
        let with = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut a = good.clone();
            edit(&mut a);
            IommuInfo::parse(&a).unwrap_err()
        };
        let first = INFO_BYTES;
        let second = INFO_BYTES + 8 + 8 + 16;
        type Edit<'a> = &'a dyn Fn(&mut Vec<u8>);
        let cases: [(Edit, &str); 9] = [
            (&|a| a.truncate(3), "shorter than its argsz"),
            (
                &|a| a[..4].copy_from_slice(&8u32.to_ne_bytes()),
                "below the 24",
            ),
            (&|a| a.truncate(40), "more than the 40 bytes"),
            // The chain loops back onto itself, or onto the fixed part.
            (
                &|a| a[second + 4..second + 8].copy_from_slice(&(first as u32).to_ne_bytes()),
                "does not follow",
            ),
            (
                &|a| a[16..20].copy_from_slice(&8u32.to_ne_bytes()),
                "does not follow",
            ),
            (
                &|a| a[16..20].copy_from_slice(&u32::MAX.to_ne_bytes()),
                "past argsz",
            ),
            // More ranges than the bytes hold.
            (
                &|a| a[first + 8..first + 12].copy_from_slice(&u32::MAX.to_ne_bytes()),
                "more than its",
            ),
            // A range that ends before it starts.
            (
                &|a| a[first + 24..first + 32].copy_from_slice(&1u64.to_ne_bytes()),
                "ending before it starts",
            ),
            (
                &|a| a[first + 2..first + 4].copy_from_slice(&0u16.to_ne_bytes()),
                "version 0",
            ),
        ];
        for (edit, says) in cases {
            let e = with(edit);
            assert!(e.contains(says), "{e:?} should say {says:?}");
        }
        // DMA_AVAIL cut off by argsz.
        let mut cut = good.clone();
        cut.truncate(second + 8);
        cut[..4].copy_from_slice(&((second + 8) as u32).to_ne_bytes());
        assert!(IommuInfo::parse(&cut).unwrap_err().contains("DMA_AVAIL"));
    }

    /// Every truncation and every single-byte corruption of a good answer parses or is an
    /// error; none panics or loops.
    #[test]
    fn no_answer_panics() {
        let good = answer(
            VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS,
            0x1000,
            &[
                iova_range_cap(&[(0, 0xfedf_ffff), (0xfef0_0000, u64::MAX)]),
                dma_avail_cap(1),
            ],
        );
        for n in 0..=good.len() {
            let _ = IommuInfo::parse(&good[..n]);
        }
        for at in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut a = good.clone();
                a[at] = v;
                let _ = IommuInfo::parse(&a);
            }
        }
    }
}
