//! The AV doorbells: `AV_INVALIDATE_DOORBELL` and the AV write window (`AV_WRITE_ENTRY_0..7`,
//! `AV_WRITE_DOORBELL`), which change one AV entry with register writes instead of an admin
//! command.
//!
//! A register write is posted: it has no completion to carry a status. So the window does
//! exactly what AV_WRITE (or AV_INVALIDATE) of one record would, with the same checks, and a
//! write that AV_WRITE would refuse changes nothing and is counted: `AV_WRITE_DROPS`, which the
//! driver reads back after ringing for the outcome of its write, or `AV_INVALIDATE_DROPS`
//! (the driver checks an invalidation's table and index first; a drop is a driver bug).
//! Register writes are executed in order, so a TX doorbell written after an AV doorbell
//! translates with the change.
//!
//! The staged entry belongs to the function, not to a table: the eight words stay until they
//! are written again or the function is reset, so the driver serializes stage-ring-read.
//!
//! A doorbell is one 64-bit write. A host that splits it into two 32-bit writes, low half
//! first (some PCIe paths do), rings it once: the low half is held and the doorbell acts
//! when the high half comes, with both. A full-width write rings alone and drops a low half
//! held before it. A high half with no low half held is a bad access
//! (`BAD_REGISTER_ACCESSES`) and does nothing. Acting on each half alone would ring twice,
//! the second time at index 0 of the table (the index is the low half): another entry than
//! the one named.

use crate::nic::Nic;
use crate::regfile::Part;
use uet_fwif::NicAvEntry;
use uet_regs::{
    AvInvalidateDoorbell, AvWriteDoorbell, RegInfo, AV_INVALIDATE_DOORBELL, AV_INVALIDATE_DROPS,
    AV_WRITE_DOORBELL, AV_WRITE_DROPS, AV_WRITE_ENTRY_0, AV_WRITE_ENTRY_7, BAD_REGISTER_ACCESSES,
};
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, IntoBytes};

/// The word of the staged entry that a write at BAR offset `offset` fills, if it is one of
/// `AV_WRITE_ENTRY_0..7`.
pub(crate) fn entry_word(offset: u32) -> Option<usize> {
    let first = AV_WRITE_ENTRY_0.offset();
    (first..=AV_WRITE_ENTRY_7.offset())
        .contains(&offset)
        .then(|| ((offset - first) / 8) as usize)
}

/// The first staged word a burst of `len` 64-bit writes from `offset` fills, when every write
/// of it lands in `AV_WRITE_ENTRY_0..7` (these registers are write-only and have no bit
/// reserved, so staging is all such a write does).
pub(crate) fn burst_words(offset: u32, len: usize) -> Option<usize> {
    let first = entry_word(offset)?;
    (offset.is_multiple_of(8) && len >= 1 && first + len <= 8).then_some(first)
}

/// The two AV doorbells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AvDoorbell {
    /// `AV_INVALIDATE_DOORBELL`.
    Invalidate,
    /// `AV_WRITE_DOORBELL`.
    Write,
}

impl AvDoorbell {
    /// The AV doorbell at BAR offset `offset`, if it is one.
    #[inline]
    pub(crate) fn at(offset: u32) -> Option<Self> {
        if offset == AV_INVALIDATE_DOORBELL.offset() {
            Some(AvDoorbell::Invalidate)
        } else if offset == AV_WRITE_DOORBELL.offset() {
            Some(AvDoorbell::Write)
        } else {
            None
        }
    }

    /// The register.
    #[inline]
    pub(crate) fn info(self) -> &'static RegInfo {
        match self {
            AvDoorbell::Invalidate => &AV_INVALIDATE_DOORBELL.info,
            AvDoorbell::Write => &AV_WRITE_DOORBELL.info,
        }
    }

    /// The register's defined bits: what a write acts with (both registers are write-only,
    /// so a write stores nothing).
    #[inline]
    pub(crate) fn mask(self) -> u64 {
        const INVALIDATE: u64 = AV_INVALIDATE_DOORBELL.info.defined_mask();
        const WRITE: u64 = AV_WRITE_DOORBELL.info.defined_mask();
        match self {
            AvDoorbell::Invalidate => INVALIDATE,
            AvDoorbell::Write => WRITE,
        }
    }
}

/// `AV_WRITE_ENTRY_0..7`: the 64-byte entry being staged, as eight little-endian words; and
/// the low half of each AV doorbell written alone, held for its high half.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AvWriteWindow {
    words: [u64; 8],
    /// `AV_INVALIDATE_DOORBELL`'s low half, written alone, held for its high half.
    held_invalidate: Option<u32>,
    /// `AV_WRITE_DOORBELL`'s, likewise.
    held_write: Option<u32>,
}

/// What a write to an AV doorbell does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HalfDoorbell {
    /// The low half, held for the high one.
    Held,
    /// A full-width write, or the high half after a low one: ring with this whole value.
    Ring(u64),
    /// A high half with no low half held.
    Bad,
}

impl AvWriteWindow {
    /// A driver write to word `word` (the whole word, or one 32-bit half of it).
    pub(crate) fn stage(&mut self, word: usize, part: Part, value: u64) {
        const LOW: u64 = 0xFFFF_FFFF;
        if let Some(w) = self.words.get_mut(word) {
            *w = match part {
                Part::Full => value,
                Part::Low => (*w & !LOW) | (value & LOW),
                Part::High => (*w & LOW) | (value << 32),
            };
        }
    }

    /// A write of `part` of `doorbell` (see the module documentation): a full-width write
    /// rings on its own and drops a low half held before it; a low half is held; a high half
    /// rings with the low half held, if any.
    #[inline]
    pub(crate) fn doorbell_write(
        &mut self,
        doorbell: AvDoorbell,
        part: Part,
        value: u64,
    ) -> HalfDoorbell {
        let held = match doorbell {
            AvDoorbell::Invalidate => &mut self.held_invalidate,
            AvDoorbell::Write => &mut self.held_write,
        };
        match part {
            Part::Full => {
                *held = None;
                HalfDoorbell::Ring(value)
            }
            Part::Low => {
                *held = Some(value as u32);
                HalfDoorbell::Held
            }
            Part::High => match held.take() {
                Some(low) => HalfDoorbell::Ring(u64::from(low) | (value << 32)),
                None => HalfDoorbell::Bad,
            },
        }
    }

    /// Whole-word writes to the words from `first` on (see [`burst_words`]).
    pub(crate) fn stage_words(&mut self, first: usize, words: &[u64]) {
        if let Some(dst) = self.words.get_mut(first..first + words.len()) {
            dst.copy_from_slice(words);
        }
    }

    /// The staged entry.
    fn entry(&self) -> NicAvEntry {
        let words = self.words.map(U64::new);
        // 64 bytes into a 64-byte plain-data entry cannot fail; INVALID never stores anything.
        NicAvEntry::read_from_bytes(words.as_bytes()).unwrap_or(NicAvEntry::INVALID)
    }
}

impl Nic {
    /// A write of `part` of `doorbell` ([`AvWriteWindow::doorbell_write`]); a high half
    /// with no low half before it is a bad access.
    #[inline]
    pub(crate) fn av_doorbell_written(&mut self, doorbell: AvDoorbell, part: Part, value: u64) {
        match self.av_window.doorbell_write(doorbell, part, value) {
            HalfDoorbell::Held => {}
            HalfDoorbell::Bad => self.counters.inc(BAD_REGISTER_ACCESSES),
            HalfDoorbell::Ring(whole) => {
                let whole = whole & doorbell.mask();
                match doorbell {
                    AvDoorbell::Invalidate => {
                        self.av_invalidate_doorbell(AvInvalidateDoorbell::from_bits(whole));
                    }
                    AvDoorbell::Write => self.av_write_doorbell(AvWriteDoorbell::from_bits(whole)),
                }
            }
        }
    }

    /// `AV_INVALIDATE_DOORBELL`: invalidate one entry, as AV_INVALIDATE does for a list.
    /// Out of line, as [`Nic::av_write_doorbell`], so that ringing either stays a few
    /// instructions where the register write is decoded.
    #[inline(never)]
    fn av_invalidate_doorbell(&mut self, d: AvInvalidateDoorbell) {
        match self.avs.get_mut(u32::from(d.av())) {
            Some(t) if d.index() < t.capacity => t.invalidate(d.index()),
            _ => self.counters.inc(AV_INVALIDATE_DROPS),
        }
    }

    /// `AV_WRITE_DOORBELL`: store the staged entry at one index, as an AV_WRITE of that one
    /// record would.
    #[inline(never)]
    fn av_write_doorbell(&mut self, d: AvWriteDoorbell) {
        let av = u32::from(d.av());
        let (index, entry) = (d.index(), self.av_window.entry());
        let stored = match self.avs.get(av).map(|t| t.capacity) {
            None => false,
            Some(capacity) => self
                .check_av_record(av, capacity, index, &entry)
                .and_then(|()| self.store_av_records(av, &[(index, entry)]))
                .is_ok(),
        };
        if !stored {
            self.counters.inc(AV_WRITE_DROPS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_staged_whole_only_inside_the_window() {
        let w0 = AV_WRITE_ENTRY_0.offset();
        assert_eq!(burst_words(w0, 8), Some(0));
        assert_eq!(burst_words(w0 + 24, 5), Some(3));
        assert_eq!(burst_words(AV_WRITE_ENTRY_7.offset(), 1), Some(7));
        assert_eq!(burst_words(w0 + 8, 8), None, "runs past word 7");
        assert_eq!(burst_words(w0, 0), None);
        assert_eq!(burst_words(w0 - 8, 2), None, "starts before the window");
        assert_eq!(burst_words(w0 + 4, 1), None, "not 64-bit aligned");
        let mut window = AvWriteWindow::default();
        window.stage_words(3, &[1, 2]);
        window.stage(5, Part::High, 7);
        assert_eq!(window.words, [0, 0, 0, 1, 2, 7 << 32, 0, 0]);
    }
}
