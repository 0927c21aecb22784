//! The IOMMU's answer to `VFIO_IOMMU_GET_INFO`, which the kernel VFIO backend parses at open:
//! any bytes parse or are refused with a reason, never a panic or an endless capability
//! chain; what parses encodes back to bytes that parse the same; and the DMA memory placed
//! in the ranges it names lies inside them, hugepage-aligned, never overlapping, or the
//! device is refused because none of them can hold any.

use uet_driver::backend::iommu_info::IommuInfo;
use uet_driver::dma::{IovaAllocator, IovaRange, HUGE_PAGE};

/// Run the target on `data`: the first byte picks the request sizes, the rest is the answer.
pub fn run(data: &[u8]) {
    let (&sizes, answer) = data.split_first().unwrap_or((&0, &[]));
    let info = match IommuInfo::parse(answer) {
        Ok(info) => info,
        Err(e) => {
            assert!(!e.is_empty(), "a refusal without a reason");
            return;
        }
    };
    assert_eq!(
        IommuInfo::parse(&info.encode()).as_ref(),
        Ok(&info),
        "{info:?} does not encode back"
    );
    if let Some(page) = info.min_page() {
        assert!(page.is_power_of_two(), "{page:#x}");
    }
    let ranges = info.usable_ranges();
    assert!(ranges.iter().all(|r| r.start <= r.last), "{ranges:x?}");
    let Some(iovas) = IovaAllocator::within(&ranges) else {
        // Refused: no range holds an aligned hugepage at or above 4 GiB.
        assert!(!ranges.iter().any(holds_a_hugepage), "{ranges:x?} refused");
        return;
    };
    let mut given: Vec<(u64, u64)> = Vec::new();
    for k in 0..64u64 {
        let len = ((u64::from(sizes) >> (k % 8)) & 3) as usize * HUGE_PAGE + 1 + k as usize;
        let Ok(at) = iovas.alloc(len) else {
            continue;
        };
        let last = at + len as u64 - 1;
        assert_eq!(at % HUGE_PAGE as u64, 0, "{at:#x} unaligned");
        assert!(at >= IovaAllocator::BASE, "{at:#x} below 4 GiB");
        assert!(
            ranges.iter().any(|r| at >= r.start && last <= r.last),
            "{at:#x}+{len} outside {ranges:x?}"
        );
        assert!(
            given.iter().all(|&(s, e)| last < s || at > e),
            "{at:#x}+{len} overlaps {given:x?}"
        );
        given.push((at, last));
    }
}

/// Whether `r` holds a hugepage-aligned hugepage at or above 4 GiB.
fn holds_a_hugepage(r: &IovaRange) -> bool {
    let hp = HUGE_PAGE as u64;
    r.start
        .max(IovaAllocator::BASE)
        .checked_next_multiple_of(hp)
        .and_then(|at| at.checked_add(hp - 1))
        .is_some_and(|end| end <= r.last)
}

/// Answers of real IOMMUs: Intel (48-bit, the interrupt window out), AMD (the HyperTransport
/// window out), an old kernel's (no capabilities), a narrow aperture; each with a first byte
/// of request sizes.
pub fn seeds() -> Vec<Vec<u8>> {
    let r = |start: u64, last: u64| IovaRange { start, last };
    let answers = [
        IommuInfo {
            page_sizes: Some(0x4020_1000),
            iova_ranges: Some(vec![r(0, 0xfedf_ffff), r(0xfef0_0000, (1 << 48) - 1)]),
            dma_avail: Some(65_535),
        },
        IommuInfo {
            page_sizes: Some(!0xfff),
            iova_ranges: Some(vec![
                r(0, 0xfedf_ffff),
                r(0xfef0_0000, 0xfc_ffff_ffff),
                r(0x100_0000_0000, (1 << 48) - 1),
            ]),
            dma_avail: Some(1000),
        },
        IommuInfo {
            page_sizes: Some(0x1000),
            ..IommuInfo::default()
        },
        IommuInfo {
            page_sizes: Some(0x1000),
            iova_ranges: Some(vec![r(0x1_0000_1000, 0x1_00ff_ffff)]),
            dma_avail: None,
        },
    ];
    answers
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut input = vec![0x1b_u8.wrapping_mul(i as u8 + 1)];
            input.extend_from_slice(&a.encode());
            input
        })
        .collect()
}
