//! MSI-X: the vector table, the pending bits and message delivery (PCI Local Bus
//! Specification 3.0, §6.8.2; the layout is `uet_regs::pci`).
//!
//! * **Table** (BAR0 [`MSIX_TABLE_OFFSET`]): [`MSIX_VECTORS`] entries of four dwords —
//!   message address low (bits 1:0 read 0) and high, message data, vector control (bit 0,
//!   the mask, set at reset; the other bits read 0). Dword or qword accesses, naturally
//!   aligned.
//! * **Pending bits** (BAR0 [`MSIX_PBA_OFFSET`]): one bit per vector, read-only.
//! * **Message Control** lives in configuration space, so the host side sets it
//!   ([`Msix::set_control`]): MSI-X Enable and Function Mask.
//! * **Raising a vector** (a completion ring armed with `CQ_ARM`, see `crate::nic`): while
//!   MSI-X is disabled nothing happens (the function has no other interrupt); while the
//!   vector or the function is masked, its pending bit is set, and clearing the mask that held
//!   it sends the message and clears the bit (§6.8.2.9); a pending bit whose event is over
//!   (the one ring that raised it was emptied by the driver; not when another ring or the
//!   host raised it too) is cleared without a message.
//!   Otherwise the message is sent at once.
//! * **Sending a message**: a model has no bus to write the message address on. What stands
//!   in for the interrupt controller is the vector's *trigger*, the eventfd a host gave for it
//!   (VFIO's `VFIO_DEVICE_SET_IRQS`, which the vfio-user server and the in-process backend
//!   mirror): the message adds 1 to it. A message for a vector with no trigger reaches no one,
//!   as a message to an address no one decodes, and is counted.
//!
//! Reset (a function-level reset from configuration space or a vfio-user reset, not the
//! `FUNCTION_RESET` register, which resets the NIC's engines and leaves the PCI function's
//! own state) masks every vector, clears the pending bits and Message Control. Triggers are
//! the host's plumbing, not device state: the host that set them removes them.

use std::fs::File;
use std::io::Write;
use std::os::fd::BorrowedFd;
use uet_regs::pci::{
    MSIX_CONTROL_ENABLE, MSIX_CONTROL_FUNCTION_MASK, MSIX_ENTRY_ADDR_HI, MSIX_ENTRY_ADDR_LO,
    MSIX_ENTRY_BYTES, MSIX_ENTRY_DATA, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET, MSIX_VECTORS,
    MSIX_VECTOR_MASKED,
};
use uet_regs::Width;

const VECTORS: usize = MSIX_VECTORS as usize;
const TABLE_END: u32 = MSIX_TABLE_OFFSET + MSIX_VECTORS as u32 * MSIX_ENTRY_BYTES;
const PBA_END: u32 = MSIX_PBA_OFFSET + (VECTORS.div_ceil(64) * 8) as u32;

/// One table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    addr_lo: u32,
    addr_hi: u32,
    data: u32,
    control: u32,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            addr_lo: 0,
            addr_hi: 0,
            data: 0,
            control: MSIX_VECTOR_MASKED,
        }
    }
}

/// A vector's pending bit, and what set it, so that it is withdrawn only when that event is
/// over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// Clear.
    No,
    /// Set by the completion ring of this endpoint alone.
    Ring(u16),
    /// Set by several rings, or by the host: it stays until the message is sent.
    Several,
}

/// What a BAR0 access to the MSI-X pages did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Not an MSI-X offset: the register decoder's.
    NotMsix,
    /// Taken (a read's value, 0 for a write).
    Done(u64),
    /// In the MSI-X pages but no field there (past the table or the bits, misaligned): a bad
    /// access.
    Bad,
}

/// Messages sent and lost, for the debug counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Messages that reached a trigger.
    pub delivered: u64,
    /// Messages for a vector with no trigger.
    pub unclaimed: u64,
}

/// The MSI-X block of one function.
#[derive(Debug)]
pub(crate) struct Msix {
    table: [Entry; VECTORS],
    pending: [Pending; VECTORS],
    enabled: bool,
    function_mask: bool,
    triggers: Vec<Option<File>>,
    pub sent: Sent,
}

impl Default for Msix {
    fn default() -> Self {
        Msix {
            table: [Entry::default(); VECTORS],
            pending: [Pending::No; VECTORS],
            enabled: false,
            function_mask: false,
            triggers: (0..VECTORS).map(|_| None).collect(),
            sent: Sent::default(),
        }
    }
}

impl Msix {
    /// Function-level reset: every vector masked, nothing pending, MSI-X disabled. The
    /// triggers stay (see the module documentation).
    pub(crate) fn reset(&mut self) {
        self.table = [Entry::default(); VECTORS];
        self.pending = [Pending::No; VECTORS];
        self.enabled = false;
        self.function_mask = false;
    }

    /// Message Control's two bits, as configuration space holds them. Clearing the function
    /// mask sends the pending messages of unmasked vectors.
    pub(crate) fn set_control(&mut self, control: u16) {
        self.enabled = control & MSIX_CONTROL_ENABLE != 0;
        self.function_mask = control & MSIX_CONTROL_FUNCTION_MASK != 0;
        self.send_pending();
    }

    /// Message Control's two bits as the function holds them.
    pub(crate) fn control(&self) -> u16 {
        let mut c = 0;
        if self.enabled {
            c |= MSIX_CONTROL_ENABLE;
        }
        if self.function_mask {
            c |= MSIX_CONTROL_FUNCTION_MASK;
        }
        c
    }

    /// Where vector `vector`'s messages go: an eventfd (duplicated), or none. Refused for a
    /// vector outside the table.
    pub(crate) fn set_trigger(
        &mut self,
        vector: u16,
        fd: Option<BorrowedFd<'_>>,
    ) -> std::io::Result<()> {
        let slot = self.triggers.get_mut(usize::from(vector)).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("MSI-X vector {vector} is outside the table of {MSIX_VECTORS}"),
            )
        })?;
        *slot = match fd {
            Some(fd) => Some(File::from(fd.try_clone_to_owned()?)),
            None => None,
        };
        Ok(())
    }

    /// Give vectors `start..start + fds.len()` the triggers `fds`, all or none: each
    /// descriptor is duplicated before any vector changes, so a duplication that fails (no
    /// descriptor left) leaves every vector as it was.
    pub(crate) fn set_triggers(
        &mut self,
        start: u16,
        fds: &[BorrowedFd<'_>],
    ) -> std::io::Result<()> {
        let end = usize::from(start).saturating_add(fds.len());
        if end > self.triggers.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("MSI-X vectors {start}..{end} are outside the table of {MSIX_VECTORS}"),
            ));
        }
        let files = fds
            .iter()
            .map(|fd| fd.try_clone_to_owned().map(File::from))
            .collect::<std::io::Result<Vec<File>>>()?;
        for (slot, file) in self.triggers[usize::from(start)..end].iter_mut().zip(files) {
            *slot = Some(file);
        }
        Ok(())
    }

    /// Whether any vector has a trigger.
    pub(crate) fn has_triggers(&self) -> bool {
        self.triggers.iter().any(Option::is_some)
    }

    /// Drop every trigger.
    pub(crate) fn clear_triggers(&mut self) {
        self.triggers.iter_mut().for_each(|t| *t = None);
    }

    /// Set or clear a vector's mask bit, as a write of its Vector Control would.
    pub(crate) fn set_masked(&mut self, vector: u16, masked: bool) {
        if let Some(e) = self.table.get_mut(usize::from(vector)) {
            e.control = if masked { MSIX_VECTOR_MASKED } else { 0 };
            self.send_pending();
        }
    }

    /// Raise `vector` (see the module documentation) for the host. A vector outside the
    /// table does nothing; the callers check.
    pub(crate) fn raise(&mut self, vector: u16) {
        self.raise_from(vector, None);
    }

    /// Raise `vector` for the completion ring of endpoint `ring`; a pending bit it sets is
    /// withdrawn by [`Msix::withdraw_ring`] when the ring is emptied.
    pub(crate) fn raise_for_ring(&mut self, vector: u16, ring: u16) {
        self.raise_from(vector, Some(ring));
    }

    fn raise_from(&mut self, vector: u16, ring: Option<u16>) {
        let v = usize::from(vector);
        let Some(entry) = self.table.get(v) else {
            return;
        };
        if !self.enabled {
            return;
        }
        if self.function_mask || entry.control & MSIX_VECTOR_MASKED != 0 {
            self.pending[v] = match (self.pending[v], ring) {
                (Pending::No, Some(r)) => Pending::Ring(r),
                (Pending::Ring(held), Some(r)) if held == r => Pending::Ring(r),
                _ => Pending::Several,
            };
        } else {
            self.send(v);
        }
    }

    /// The events for which the ring of endpoint `ring` raised vectors while they were masked
    /// are over (the driver consumed what the ring held): clear each pending bit that ring
    /// alone holds, so that unmasking sends no message for it (§6.8.2: the function must
    /// clear a pending bit whose events are satisfied). A bit another ring or the host set
    /// too, or set again since the ring's message was sent, stays.
    pub(crate) fn withdraw_ring(&mut self, ring: u16) {
        for p in self
            .pending
            .iter_mut()
            .filter(|p| **p == Pending::Ring(ring))
        {
            *p = Pending::No;
        }
    }

    /// Whether `vector`'s pending bit is set.
    #[cfg(test)]
    fn is_pending(&self, vector: usize) -> bool {
        self.pending[vector] != Pending::No
    }

    /// Word `word` of the pending-bit array, as BAR0 shows it.
    fn pending_word(&self, word: usize) -> u64 {
        self.pending
            .iter()
            .skip(word * 64)
            .take(64)
            .enumerate()
            .filter(|(_, p)| **p != Pending::No)
            .fold(0, |bits, (i, _)| bits | 1 << i)
    }

    fn send(&mut self, v: usize) {
        match self.triggers.get(v).and_then(Option::as_ref) {
            Some(mut f) => {
                // An eventfd counter: adding 1 wakes its readers. When the counter would pass
                // 2^64 - 2, a non-blocking eventfd refuses the write (its reader is woken
                // already) and a blocking one blocks until it is read (the vfio-user server
                // makes every eventfd a client gives non-blocking, so only a client that
                // clears the flag again on its own descriptor can stall this write; an
                // in-process host passes its own).
                let _ = f.write(&1u64.to_ne_bytes());
                self.sent.delivered += 1;
            }
            None => self.sent.unclaimed += 1,
        }
    }

    /// Send the pending message of every vector that is no longer masked.
    fn send_pending(&mut self) {
        if !self.enabled || self.function_mask {
            return;
        }
        for v in 0..VECTORS {
            if self.pending[v] != Pending::No && self.table[v].control & MSIX_VECTOR_MASKED == 0 {
                self.pending[v] = Pending::No;
                self.send(v);
            }
        }
    }

    /// A BAR0 read at `offset`.
    pub(crate) fn read(&self, offset: u32, width: Width) -> Access {
        match locate(offset, width) {
            Located::Table { vector, field } => {
                let e = &self.table[vector];
                let dword = |f: u32| match f {
                    MSIX_ENTRY_ADDR_LO => e.addr_lo,
                    MSIX_ENTRY_ADDR_HI => e.addr_hi,
                    MSIX_ENTRY_DATA => e.data,
                    _ => e.control,
                };
                Access::Done(match width {
                    Width::W32 => u64::from(dword(field)),
                    Width::W64 => u64::from(dword(field)) | u64::from(dword(field + 4)) << 32,
                })
            }
            Located::Pba { word } => Access::Done(match width {
                Width::W64 => self.pending_word(word),
                Width::W32 if offset.is_multiple_of(8) => self.pending_word(word) & 0xFFFF_FFFF,
                Width::W32 => self.pending_word(word) >> 32,
            }),
            Located::Bad => Access::Bad,
            Located::Elsewhere => Access::NotMsix,
        }
    }

    /// A BAR0 write at `offset`. Clearing a vector's mask sends its pending message.
    pub(crate) fn write(&mut self, offset: u32, width: Width, value: u64) -> Access {
        match locate(offset, width) {
            Located::Table { vector, field } => {
                let mut put = |f: u32, v: u32| {
                    let e = &mut self.table[vector];
                    match f {
                        MSIX_ENTRY_ADDR_LO => e.addr_lo = v & !3,
                        MSIX_ENTRY_ADDR_HI => e.addr_hi = v,
                        MSIX_ENTRY_DATA => e.data = v,
                        _ => e.control = v & MSIX_VECTOR_MASKED,
                    }
                };
                put(field, value as u32);
                if width == Width::W64 {
                    put(field + 4, (value >> 32) as u32);
                }
                self.send_pending();
                Access::Done(0)
            }
            // The pending bits are read-only.
            Located::Pba { .. } => Access::Done(0),
            Located::Bad => Access::Bad,
            Located::Elsewhere => Access::NotMsix,
        }
    }
}

/// Where a BAR0 access lands in the MSI-X pages.
enum Located {
    Table { vector: usize, field: u32 },
    Pba { word: usize },
    Bad,
    Elsewhere,
}

fn locate(offset: u32, width: Width) -> Located {
    let in_page = |start: u32| (start..start + 0x1000).contains(&offset);
    if !in_page(MSIX_TABLE_OFFSET) && !in_page(MSIX_PBA_OFFSET) {
        return Located::Elsewhere;
    }
    if !offset.is_multiple_of(width.bytes()) {
        return Located::Bad;
    }
    if (MSIX_TABLE_OFFSET..TABLE_END).contains(&offset) {
        let rel = offset - MSIX_TABLE_OFFSET;
        return Located::Table {
            vector: (rel / MSIX_ENTRY_BYTES) as usize,
            field: rel % MSIX_ENTRY_BYTES,
        };
    }
    if (MSIX_PBA_OFFSET..PBA_END).contains(&offset) {
        return Located::Pba {
            word: ((offset - MSIX_PBA_OFFSET) / 8) as usize,
        };
    }
    Located::Bad
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use uet_regs::pci::MSIX_ENTRY_VECTOR_CONTROL;

    /// A stand-in for an eventfd: each message arrives as 8 bytes on the other end.
    fn trigger() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().expect("socket pair");
        b.set_nonblocking(true).expect("non-blocking");
        (a, b)
    }

    fn messages(rx: &mut UnixStream) -> usize {
        let mut buf = [0u8; 256];
        match rx.read(&mut buf) {
            Ok(n) => n / 8,
            Err(_) => 0,
        }
    }

    fn entry(v: u32, field: u32) -> u32 {
        MSIX_TABLE_OFFSET + v * MSIX_ENTRY_BYTES + field
    }

    #[test]
    fn the_table_resets_masked_and_keeps_what_is_written() {
        let mut m = Msix::default();
        for v in 0..u32::from(MSIX_VECTORS) {
            assert_eq!(
                m.read(entry(v, MSIX_ENTRY_VECTOR_CONTROL), Width::W32),
                Access::Done(u64::from(MSIX_VECTOR_MASKED))
            );
        }
        assert_eq!(
            m.write(
                entry(3, MSIX_ENTRY_ADDR_LO),
                Width::W64,
                0x1234_5678_FEE0_0003
            ),
            Access::Done(0)
        );
        assert_eq!(
            m.read(entry(3, MSIX_ENTRY_ADDR_LO), Width::W32),
            Access::Done(0xFEE0_0000),
            "address bits 1:0 read 0"
        );
        assert_eq!(
            m.read(entry(3, MSIX_ENTRY_ADDR_HI), Width::W32),
            Access::Done(0x1234_5678)
        );
        m.write(entry(3, MSIX_ENTRY_DATA), Width::W32, 0x4021);
        m.write(entry(3, MSIX_ENTRY_VECTOR_CONTROL), Width::W32, 0xFFFF_FFFE);
        assert_eq!(
            m.read(entry(3, MSIX_ENTRY_DATA), Width::W64),
            Access::Done(0x4021),
            "control's reserved bits read 0, and so does the mask just cleared"
        );
        m.write(MSIX_PBA_OFFSET, Width::W64, u64::MAX);
        assert_eq!(m.read(MSIX_PBA_OFFSET, Width::W64), Access::Done(0));
        assert_eq!(m.read(TABLE_END, Width::W32), Access::Bad);
        assert_eq!(m.read(PBA_END, Width::W32), Access::Bad);
        assert_eq!(m.read(MSIX_TABLE_OFFSET + 2, Width::W32), Access::Bad);
        assert_eq!(m.read(MSIX_PBA_OFFSET + 4, Width::W64), Access::Bad);
        assert_eq!(m.read(0x40, Width::W32), Access::NotMsix);
        m.reset();
        assert_eq!(
            m.read(entry(3, MSIX_ENTRY_VECTOR_CONTROL), Width::W32),
            Access::Done(u64::from(MSIX_VECTOR_MASKED))
        );
    }

    #[test]
    fn a_masked_vector_is_held_pending_and_sent_when_unmasked() {
        let mut m = Msix::default();
        let (tx, mut rx) = trigger();
        m.set_trigger(5, Some(tx.as_fd())).expect("trigger");
        // Disabled: nothing at all.
        m.raise(5);
        assert_eq!(messages(&mut rx), 0);
        assert!(!m.is_pending(5));
        m.set_control(MSIX_CONTROL_ENABLE);
        // Masked at reset: pending.
        m.raise(5);
        assert!(m.is_pending(5));
        assert_eq!(m.read(MSIX_PBA_OFFSET, Width::W32), Access::Done(1 << 5));
        assert_eq!(messages(&mut rx), 0);
        m.write(entry(5, MSIX_ENTRY_VECTOR_CONTROL), Width::W32, 0);
        assert_eq!(messages(&mut rx), 1, "sent on unmask");
        assert!(!m.is_pending(5));
        // The function mask holds it too.
        m.set_control(MSIX_CONTROL_ENABLE | MSIX_CONTROL_FUNCTION_MASK);
        m.raise(5);
        m.raise(5);
        assert_eq!(messages(&mut rx), 0);
        m.set_control(MSIX_CONTROL_ENABLE);
        assert_eq!(messages(&mut rx), 1, "one pending bit, one message");
        m.raise(5);
        assert_eq!(messages(&mut rx), 1);
        assert_eq!(m.sent.delivered, 3);
        // No trigger: counted, lost.
        m.set_masked(6, false);
        m.raise(6);
        assert_eq!(m.sent.unclaimed, 1);
        m.set_trigger(5, None).expect("remove");
        m.raise(5);
        assert_eq!(m.sent.unclaimed, 2);
        assert!(m.set_trigger(MSIX_VECTORS, Some(tx.as_fd())).is_err());
        m.raise(MSIX_VECTORS);
        assert_eq!(
            m.sent.unclaimed, 2,
            "a vector outside the table does nothing"
        );
    }
}
