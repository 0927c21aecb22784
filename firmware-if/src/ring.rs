//! Ring arithmetic shared by every ring (admin SQ/CQ, TX, RX, completion).
//!
//! A ring has a power-of-two number of fixed-size entries. The producer owns the tail, the
//! consumer owns the head; one entry is always left empty so that `head == tail` means empty.
//! Completion rings (written by the device) carry a phase bit: the device writes phase 1 on its
//! first pass over the ring, 0 on the second, and so on; the host knows an entry is new when its
//! phase equals the phase it expects, and flips its expectation each time its head wraps. The
//! host therefore never has to clear completion entries, as in NVMe.

/// Largest log2 ring size any ring may have (the index registers are 16 bits).
pub const MAX_RING_LOG2: u8 = 15;

/// Geometry of one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    log2: u8,
}

impl RingGeometry {
    /// A ring of `2^log2` entries; `None` when `log2` is 0 or above [`MAX_RING_LOG2`].
    pub const fn new(log2: u8) -> Option<Self> {
        if log2 == 0 || log2 > MAX_RING_LOG2 {
            None
        } else {
            Some(RingGeometry { log2 })
        }
    }

    /// log2 of the entry count.
    pub const fn log2(self) -> u8 {
        self.log2
    }

    /// Number of entries.
    pub const fn entries(self) -> u32 {
        1 << self.log2
    }

    /// `index + 1`, wrapped.
    pub const fn next(self, index: u16) -> u16 {
        ((index as u32 + 1) & (self.entries() - 1)) as u16
    }

    /// Whether `index` is a valid slot.
    pub const fn contains(self, index: u16) -> bool {
        (index as u32) < self.entries()
    }

    /// Entries between `head` and `tail` (the producer is at `tail`).
    pub const fn used(self, head: u16, tail: u16) -> u32 {
        (tail as u32).wrapping_sub(head as u32) & (self.entries() - 1)
    }

    /// Entries the producer may still add.
    pub const fn free(self, head: u16, tail: u16) -> u32 {
        self.entries() - 1 - self.used(head, tail)
    }
}

/// The phase a completion entry at position `pass` (how many times the ring wrapped) carries.
pub const fn phase_for_pass(pass: u64) -> bool {
    pass.is_multiple_of(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_limits() {
        assert!(RingGeometry::new(0).is_none());
        assert!(RingGeometry::new(16).is_none());
        let g = RingGeometry::new(3).unwrap();
        assert_eq!(g.entries(), 8);
        assert_eq!(g.next(7), 0);
        assert_eq!(g.used(6, 2), 4);
        assert_eq!(g.free(0, 0), 7);
        assert_eq!(g.free(1, 0), 0);
        assert!(!g.contains(8));
    }
}
