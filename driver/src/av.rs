//! The AV on the NIC: `uet-av`'s host mirror over a NIC AV table programmed by admin commands.
//!
//! `uet-av` owns the fi_av(3) semantics and the host mirror; this module gives it a
//! [`NicAvTable`] that turns each batch into one AV_WRITE, AV_INVALIDATE or AV_READ through the
//! admin queue's scratch buffer.

use crate::error::DriverError;
use crate::nic::{Nic, NicInner};
use std::sync::Arc;
use uet_av::{AddressVector, AvAttr, AvLimits, FiError, NicAvTable, NicError};
use uet_fwif::admin::{AvCreateBody, BufferBody, Command, RangeBody, MAX_BATCH};
use uet_fwif::{AvWriteRecord, NicAvEntry};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromZeros, IntoBytes};

/// A NIC AV table: created by AV_CREATE, destroyed by AV_DESTROY when the last user (the AV
/// itself or an endpoint bound to it) lets go.
pub struct AvTableHandle {
    nic: Arc<NicInner>,
    handle: u32,
    capacity: u32,
}

impl AvTableHandle {
    /// The NIC's handle for the table.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Entries the table holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

impl Drop for AvTableHandle {
    fn drop(&mut self) {
        if let Err(e) = self.nic.execute(Command::AvDestroy { av: self.handle }) {
            tracing::warn!(av = self.handle, "AV_DESTROY failed: {e}");
        }
    }
}

/// The [`NicAvTable`] of one NIC AV table.
pub struct NicAv {
    table: Arc<AvTableHandle>,
}

impl NicAv {
    /// The table handle, shared with endpoints bound to this AV.
    pub fn table(&self) -> &Arc<AvTableHandle> {
        &self.table
    }
}

fn nic_error(op: &'static str, e: DriverError) -> NicError {
    NicError {
        op,
        source: Box::new(e),
    }
}

impl NicAvTable for NicAv {
    fn write_entries(&mut self, records: &[AvWriteRecord]) -> Result<(), NicError> {
        const OP: &str = "AV_WRITE";
        for chunk in records.chunks(MAX_BATCH as usize) {
            let nic = &self.table.nic;
            let mut admin = nic.admin();
            let bytes = chunk.as_bytes();
            admin
                .scratch()
                .write_bytes(0, bytes)
                .map_err(|e| nic_error(OP, e.into()))?;
            let mut body = BufferBody::new_zeroed();
            body.buf = U64::new(admin.scratch().iova());
            body.len = U32::new(bytes.len() as u32);
            body.count = U32::new(chunk.len() as u32);
            admin
                .execute(
                    nic.bar(),
                    Command::AvWrite {
                        av: self.table.handle,
                        body,
                    },
                )
                .map_err(|e| nic_error(OP, e))?;
        }
        Ok(())
    }

    fn invalidate(&mut self, indices: &[u32]) -> Result<(), NicError> {
        const OP: &str = "AV_INVALIDATE";
        for chunk in indices.chunks(MAX_BATCH as usize) {
            let nic = &self.table.nic;
            let mut admin = nic.admin();
            let bytes: Vec<u8> = chunk.iter().flat_map(|i| i.to_le_bytes()).collect();
            admin
                .scratch()
                .write_bytes(0, &bytes)
                .map_err(|e| nic_error(OP, e.into()))?;
            let mut body = RangeBody::new_zeroed();
            body.buf = U64::new(admin.scratch().iova());
            body.len = U32::new(bytes.len() as u32);
            body.count = U32::new(chunk.len() as u32);
            admin
                .execute(
                    nic.bar(),
                    Command::AvInvalidate {
                        av: self.table.handle,
                        body,
                    },
                )
                .map_err(|e| nic_error(OP, e))?;
        }
        Ok(())
    }

    fn read_entries(&mut self, first: u32, out: &mut [NicAvEntry]) -> Result<(), NicError> {
        const OP: &str = "AV_READ";
        let mut at = first;
        for chunk in out.chunks_mut(MAX_BATCH as usize) {
            let nic = &self.table.nic;
            let mut admin = nic.admin();
            let len = core::mem::size_of_val(chunk);
            let mut body = RangeBody::new_zeroed();
            body.buf = U64::new(admin.scratch().iova());
            body.len = U32::new(len as u32);
            body.first = U32::new(at);
            body.count = U32::new(chunk.len() as u32);
            admin
                .execute(
                    nic.bar(),
                    Command::AvRead {
                        av: self.table.handle,
                        body,
                    },
                )
                .map_err(|e| nic_error(OP, e))?;
            admin
                .scratch()
                .read_bytes(0, chunk.as_mut_bytes())
                .map_err(|e| nic_error(OP, e.into()))?;
            at = at.saturating_add(chunk.len() as u32);
        }
        Ok(())
    }
}

/// An address vector whose entries live in a NIC AV table.
pub type Av = AddressVector<NicAv>;

impl Nic {
    /// `fi_av_open`: create a NIC AV table and the host mirror over it. The attributes are
    /// checked against the NIC's capability registers before the NIC is asked for anything.
    pub fn open_av(&self, attr: AvAttr) -> Result<Av, FiError> {
        let caps = self.capabilities();
        let limits = AvLimits {
            max_entries: caps.av_entries,
            max_rx_ctx_bits: caps.max_rx_ctx_bits,
        };
        let attr = attr.resolve(&limits)?;
        let mut body = AvCreateBody::new_zeroed();
        body.capacity = U32::new(attr.count as u32);
        body.rx_ctx_bits = attr.rx_ctx_bits;
        let result = self
            .inner
            .execute(Command::AvCreate(body))
            .map_err(crate::errno::admin_to_fi)?;
        let table = Arc::new(AvTableHandle {
            nic: self.inner.clone(),
            handle: result.result0,
            capacity: attr.count as u32,
        });
        // On failure the table handle drops here and AV_DESTROY removes the NIC table.
        AddressVector::open(NicAv { table }, attr, limits)
    }
}
