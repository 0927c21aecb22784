//! Endpoints: the NIC assigns a PIDonFEP and a resource-index range; the driver owns the rings.
//!
//! An endpoint has a TX ring, an RX ring and a completion ring in one DMA region, handed to the
//! NIC by ENDPOINT_CREATE together with the AV table the NIC translates through. Sending is:
//! write a [`TxDescriptor`] naming the destination by `fi_addr_t`, fence, ring `TXQ_DOORBELL`.
//! The host never looks the peer up: the NIC's TX engine reads its own AV table. Receiving is:
//! post buffers to the RX ring; the NIC's RX engine demultiplexes arriving packets by JobID,
//! PIDonFEP and resource index into them, and reverse-translates the sender into an `fi_addr_t`.
//!
//! Buffers are [`DmaBuffer`]s: they move into the endpoint when posted and come back in the
//! completion, so nothing is copied or allocated on the way.

use crate::av::{Av, AvTableHandle};
use crate::errno::completion_errno;
use crate::error::DriverError;
use crate::mapped::MappedRegion;
use crate::nic::{Nic, NicInner};
use crate::pool::DmaBuffer;
use std::net::IpAddr;
use std::ops::Range;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use uet_av::FiErrno;
use uet_fwif::address::{AddressingMode, UetAddress};
use uet_fwif::admin::{Command, EndpointCreateBody, EP_FLAG_ABSOLUTE};
use uet_fwif::datapath::{
    Completion, CompletionKind, LocalStatus, RxDescriptor, TxDescriptor, TxOpcode,
    COMPLETION_PHASE_OFFSET,
};
use uet_fwif::ring::RingGeometry;
use uet_fwif::ReturnCode;
use uet_regs::{QueueDoorbell, RegisterAccess, CQ_DOORBELL, RXQ_DOORBELL, TXQ_DOORBELL};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::FromZeros;

const TX_DESC: usize = core::mem::size_of::<TxDescriptor>();
const RX_DESC: usize = core::mem::size_of::<RxDescriptor>();
const CQE: usize = core::mem::size_of::<Completion>();

/// Endpoint attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointAttr {
    /// JobID (24 bits): what the endpoint accepts and, through the AV, what it sends with.
    pub job_id: u32,
    /// Resource indices to request.
    pub ri_count: u16,
    /// Initiator ID; `None` derives one: the low 16 bits of the NIC's fabric address, then the
    /// endpoint's sequence number on that NIC in this process. Jobs that number their ranks
    /// pass the rank instead.
    pub initiator: Option<u32>,
    /// log2 of the TX ring entries.
    pub tx_log2: u8,
    /// log2 of the RX ring entries.
    pub rx_log2: u8,
    /// log2 of the completion ring entries (must hold TX + RX in flight).
    pub cq_log2: u8,
    /// Addressing mode advertised in the endpoint address.
    pub mode: AddressingMode,
}

impl Default for EndpointAttr {
    fn default() -> Self {
        EndpointAttr {
            job_id: 1,
            ri_count: 4,
            initiator: None,
            tx_log2: 6,
            rx_log2: 6,
            cq_log2: 8,
            mode: AddressingMode::Relative,
        }
    }
}

/// Why a completion failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqError {
    /// The fabric errno (`fi_cq_err_entry.err`).
    pub errno: FiErrno,
    /// What the local NIC concluded.
    pub local: LocalStatus,
    /// The UET return code from the target, when it answered with an error.
    pub return_code: Option<ReturnCode>,
}

impl core::fmt::Display for CqError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?} ({:?})", self.errno, self.local)?;
        if let Some(rc) = self.return_code {
            write!(f, ", target returned {rc}")?;
        }
        Ok(())
    }
}

/// One completion, with the buffer it concerns.
#[derive(Debug)]
pub struct CqEvent {
    /// Send or receive.
    pub kind: CompletionKind,
    /// The context given when posting.
    pub context: u64,
    /// Bytes transferred.
    pub len: usize,
    /// Remote CQ data (receive).
    pub data: u64,
    /// Receive: the sender's `fi_addr_t` in the bound AV, its user id, or `FI_ADDR_NOTAVAIL`.
    pub src_addr: u64,
    /// `None` on success.
    pub error: Option<CqError>,
    /// The posted buffer, returned (`None` for a send posted by IOVA).
    pub buffer: Option<DmaBuffer>,
}

struct Posted {
    buffer: Option<DmaBuffer>,
    context: u64,
}

struct Ring {
    geometry: RingGeometry,
    offset: usize,
    tail: u16,
    slots: Vec<Option<Posted>>,
    in_flight: u32,
}

impl Ring {
    fn new(log2: u8, offset: usize) -> Option<Self> {
        let geometry = RingGeometry::new(log2)?;
        Some(Ring {
            geometry,
            offset,
            tail: 0,
            slots: (0..geometry.entries()).map(|_| None).collect(),
            in_flight: 0,
        })
    }

    fn can_post(&self) -> bool {
        self.in_flight < self.geometry.entries() - 1 && self.slots[usize::from(self.tail)].is_none()
    }

    fn take(&mut self, slot: u64) -> Option<Posted> {
        let p = self.slots.get_mut(usize::try_from(slot).ok()?)?.take()?;
        self.in_flight -= 1;
        Some(p)
    }
}

/// An active endpoint on a NIC.
pub struct Endpoint {
    nic: Arc<NicInner>,
    _av: Option<Arc<AvTableHandle>>,
    handle: u16,
    address: UetAddress,
    job_id: u32,
    rings: Option<MappedRegion>,
    tx: Ring,
    rx: Ring,
    cq_geometry: RingGeometry,
    cq_offset: usize,
    cq_head: u16,
    cq_phase: bool,
    mtu: usize,
    max_msg: usize,
}

fn align_page(x: usize) -> usize {
    x.div_ceil(4096) * 4096
}

impl Nic {
    /// Create an endpoint bound to `av` (ENDPOINT_CREATE): the NIC assigns its PIDonFEP and
    /// resource-index range, which together with the NIC's fabric address form its address.
    pub fn endpoint(&self, attr: EndpointAttr, av: Option<&Av>) -> Result<Endpoint, DriverError> {
        let caps = self.capabilities();
        let bad = |m: String| Err(DriverError::InvalidArgument(m));
        let max_log2 = 15 - caps.max_queue_entries.leading_zeros() as u8;
        for (name, v) in [
            ("tx_log2", attr.tx_log2),
            ("rx_log2", attr.rx_log2),
            ("cq_log2", attr.cq_log2),
        ] {
            if v == 0 || v > max_log2 {
                return bad(format!("{name} {v} outside 1..={max_log2}"));
            }
        }
        if (1u32 << attr.cq_log2) < (1u32 << attr.tx_log2) + (1u32 << attr.rx_log2) {
            return bad("the completion ring must hold every TX and RX descriptor".into());
        }
        if attr.ri_count == 0 || attr.ri_count > caps.ri_per_endpoint {
            return bad(format!(
                "ri_count {} outside 1..={}",
                attr.ri_count, caps.ri_per_endpoint
            ));
        }
        if attr.job_id > uet_fwif::av_entry::MAX_JOB_ID {
            return bad(format!("JobID {:#x} wider than 24 bits", attr.job_id));
        }
        let tx_off = 0;
        let rx_off = align_page(TX_DESC << attr.tx_log2);
        let cq_off = rx_off + align_page(RX_DESC << attr.rx_log2);
        let total = cq_off + align_page(CQE << attr.cq_log2);
        let rings = self.inner.map_new(total)?;
        rings.region().zero(0, total)?;
        let (Some(tx), Some(rx), Some(cq_geometry)) = (
            Ring::new(attr.tx_log2, tx_off),
            Ring::new(attr.rx_log2, rx_off),
            RingGeometry::new(attr.cq_log2),
        ) else {
            return bad("ring size out of range".into());
        };
        let fabric_addr = self.fabric_addr();
        let initiator = attr.initiator.unwrap_or_else(|| {
            let low = match fabric_addr {
                IpAddr::V4(a) => u32::from(a) & 0xFFFF,
                IpAddr::V6(a) => (u128::from(a) & 0xFFFF) as u32,
            };
            low << 16 | u32::from(self.inner.endpoint_seq.fetch_add(1, Ordering::Relaxed))
        });
        let mut body = EndpointCreateBody::new_zeroed();
        body.tx_ring = U64::new(rings.region().iova_at(tx_off));
        body.rx_ring = U64::new(rings.region().iova_at(rx_off));
        body.cq_ring = U64::new(rings.region().iova_at(cq_off));
        body.job_id = U32::new(attr.job_id);
        body.initiator = U32::new(initiator);
        body.ri_count = U16::new(attr.ri_count);
        body.tx_log2 = attr.tx_log2;
        body.rx_log2 = attr.rx_log2;
        body.cq_log2 = attr.cq_log2;
        body.flags = if attr.mode == AddressingMode::Absolute {
            EP_FLAG_ABSOLUTE
        } else {
            0
        };
        let av_table = av.map(|a| a.nic().table().clone());
        let result = self.inner.execute(Command::EndpointCreate {
            av: av_table.as_ref().map_or(0, |t| t.handle()),
            body,
        })?;
        let handle = (result.result0 & 0xFFFF) as u16;
        let address = UetAddress {
            caps: caps.address_caps(),
            mode: attr.mode,
            max_msg_mtu: caps.max_msg_size <= u32::from(caps.mtu),
            pid_on_fep: (result.result0 >> 16) as u16,
            fabric_addr,
            ri_start: (result.result1 & 0xFFFF) as u16,
            ri_count: (result.result1 >> 16) as u16,
            initiator,
        };
        let endpoint = Endpoint {
            nic: self.inner.clone(),
            _av: av_table,
            handle,
            address,
            job_id: attr.job_id,
            rings: Some(rings),
            tx,
            rx,
            cq_geometry,
            cq_offset: cq_off,
            cq_head: 0,
            cq_phase: true,
            mtu: usize::from(caps.mtu),
            max_msg: caps.max_msg_size as usize,
        };
        if let Err(e) = address.validate() {
            return Err(DriverError::AdminProtocol(format!(
                "ENDPOINT_CREATE returned an invalid address: {e}"
            )));
        }
        tracing::debug!(%address, handle, "endpoint created");
        Ok(endpoint)
    }
}

impl Endpoint {
    /// The endpoint's UET address, as `fi_getname` returns it.
    pub fn address(&self) -> &UetAddress {
        &self.address
    }

    /// `fi_getname`: the serialized address. When `buf` is shorter than the address, nothing
    /// is written, `*len` is set to the size needed, and the call fails with `FI_ETOOSMALL`.
    pub fn getname(&self, buf: &mut [u8], len: &mut usize) -> Result<(), uet_av::FiError> {
        let bytes = self.address.to_bytes().map_err(|e| {
            uet_av::FiError::new(FiErrno::FI_EOTHER, format!("endpoint address invalid: {e}"))
        })?;
        let avail = (*len).min(buf.len());
        *len = bytes.len();
        if avail < bytes.len() {
            return Err(uet_av::FiError::new(
                FiErrno::FI_ETOOSMALL,
                format!("fi_getname needs {} bytes, got {avail}", bytes.len()),
            ));
        }
        buf[..bytes.len()].copy_from_slice(&bytes);
        Ok(())
    }

    /// The NIC's handle for the endpoint.
    pub fn handle(&self) -> u16 {
        self.handle
    }

    /// The PIDonFEP the NIC assigned.
    pub fn pid_on_fep(&self) -> u16 {
        self.address.pid_on_fep
    }

    /// The resource indices the NIC assigned.
    pub fn resource_indices(&self) -> Range<u16> {
        self.address.ri_start..self.address.ri_start + self.address.ri_count
    }

    /// The endpoint's JobID.
    pub fn job_id(&self) -> u32 {
        self.job_id
    }

    /// Largest message (`fi_info.ep_attr.max_msg_size`): the NIC's `CAP_MAX_MSG`. A message
    /// longer than [`Endpoint::mtu`] travels as several packets and still completes once on
    /// each side.
    pub fn max_msg_size(&self) -> usize {
        self.max_msg
    }

    /// Payload bytes per packet.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    fn region(&self) -> Result<&crate::dma::DmaRegion, DriverError> {
        self.rings
            .as_ref()
            .map(MappedRegion::region)
            .ok_or(DriverError::InvalidArgument("endpoint is closed".into()))
    }

    /// `fi_senddata`: send the buffer's data to `dest` (an `fi_addr_t` of the bound AV,
    /// possibly carrying a receive context in its top bits). On error the buffer comes back.
    pub fn post_send(
        &mut self,
        dest: u64,
        buffer: DmaBuffer,
        context: u64,
        data: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        let (iova, len) = (buffer.iova(), buffer.len());
        self.post_tx(dest, iova, len, context, data, buffer)
    }

    /// Send `len` bytes at `iova` to `dest`. The memory is the caller's: the NIC checks it
    /// against what is mapped for DMA and completes the send with `FI_EFAULT` when it is not.
    pub fn post_send_iova(
        &mut self,
        dest: u64,
        iova: u64,
        len: usize,
        context: u64,
        data: u64,
    ) -> Result<(), DriverError> {
        self.post_tx(dest, iova, len, context, data, None::<DmaBuffer>)
            .map_err(|(e, _)| e)
    }

    fn post_tx<B: Into<Option<DmaBuffer>>>(
        &mut self,
        dest: u64,
        iova: u64,
        len: usize,
        context: u64,
        data: u64,
        buffer: B,
    ) -> Result<(), (DriverError, B)> {
        if len > self.max_msg {
            let e = DriverError::MessageTooLong {
                len,
                max: self.max_msg,
            };
            return Err((e, buffer));
        }
        if !self.tx.can_post() {
            return Err((DriverError::Full("TX ring"), buffer));
        }
        let slot = self.tx.tail;
        let mut d = TxDescriptor::new_zeroed();
        d.opcode = TxOpcode::Send as u8;
        d.len = U32::new(len as u32);
        d.buf = U64::new(iova);
        d.dest = U64::new(dest);
        d.context = U64::new(u64::from(slot));
        d.data = U64::new(data);
        let off = self.tx.offset + usize::from(slot) * TX_DESC;
        let written = self.region().and_then(|r| Ok(r.write_obj(off, &d)?));
        if let Err(e) = written {
            return Err((e, buffer));
        }
        self.tx.slots[usize::from(slot)] = Some(Posted {
            buffer: buffer.into(),
            context,
        });
        self.tx.in_flight += 1;
        self.tx.tail = self.tx.geometry.next(slot);
        fence(Ordering::SeqCst);
        self.nic.bar().write(
            TXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(self.handle)
                .with_index(self.tx.tail),
        );
        Ok(())
    }

    /// `fi_recv`: post a buffer for one incoming message. On error the buffer comes back.
    pub fn post_recv(
        &mut self,
        mut buffer: DmaBuffer,
        context: u64,
    ) -> Result<(), (DriverError, DmaBuffer)> {
        if !self.rx.can_post() {
            return Err((DriverError::Full("RX ring"), buffer));
        }
        let slot = self.rx.tail;
        buffer.set_len(0);
        let mut d = RxDescriptor::new_zeroed();
        d.buf = U64::new(buffer.iova());
        d.len = U32::new(buffer.capacity() as u32);
        d.context = U64::new(u64::from(slot));
        let off = self.rx.offset + usize::from(slot) * RX_DESC;
        let written = self.region().and_then(|r| Ok(r.write_obj(off, &d)?));
        if let Err(e) = written {
            return Err((e, buffer));
        }
        self.rx.slots[usize::from(slot)] = Some(Posted {
            buffer: Some(buffer),
            context,
        });
        self.rx.in_flight += 1;
        self.rx.tail = self.rx.geometry.next(slot);
        fence(Ordering::SeqCst);
        self.nic.bar().write(
            RXQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(self.handle)
                .with_index(self.rx.tail),
        );
        Ok(())
    }

    /// Descriptors posted and not yet completed: (TX, RX).
    pub fn in_flight(&self) -> (u32, u32) {
        (self.tx.in_flight, self.rx.in_flight)
    }

    /// `fi_cq_read` of one entry: the next completion, or `None` when there is none yet.
    pub fn poll(&mut self) -> Result<Option<CqEvent>, DriverError> {
        let region = self.region()?;
        let slot = self.cq_offset + usize::from(self.cq_head) * CQE;
        let phase = region.read_u8(slot + COMPLETION_PHASE_OFFSET)? & 1 != 0;
        if phase != self.cq_phase {
            return Ok(None);
        }
        fence(Ordering::Acquire);
        let c: Completion = region.read_obj(slot)?;
        self.cq_head = self.cq_geometry.next(self.cq_head);
        if self.cq_head == 0 {
            self.cq_phase = !self.cq_phase;
        }
        self.nic.bar().write(
            CQ_DOORBELL,
            QueueDoorbell::new()
                .with_endpoint(self.handle)
                .with_index(self.cq_head),
        );
        let (kind, ring) = match c.kind {
            k if k == CompletionKind::Send as u8 => (CompletionKind::Send, &mut self.tx),
            k if k == CompletionKind::Recv as u8 => (CompletionKind::Recv, &mut self.rx),
            k => {
                return Err(DriverError::AdminProtocol(format!(
                    "completion of unknown kind {k}"
                )))
            }
        };
        let Some(posted) = ring.take(c.context.get()) else {
            return Err(DriverError::AdminProtocol(format!(
                "{kind:?} completion for slot {} that holds no descriptor",
                c.context.get()
            )));
        };
        let mut buffer = posted.buffer;
        let len = c.len.get() as usize;
        if let (CompletionKind::Recv, Some(b)) = (kind, buffer.as_mut()) {
            b.set_len(len);
        }
        let local = LocalStatus::from_u8(c.status);
        let return_code = ReturnCode::from_u8(c.return_code);
        let error = (local != LocalStatus::Ok).then(|| CqError {
            errno: completion_errno(local, return_code),
            local,
            return_code: return_code.filter(|rc| !rc.is_ok() && *rc != ReturnCode::Null),
        });
        Ok(Some(CqEvent {
            kind,
            context: posted.context,
            len,
            data: c.data.get(),
            src_addr: c.src_addr.get(),
            error,
            buffer,
        }))
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        match self.nic.execute(Command::EndpointDestroy {
            endpoint: u32::from(self.handle),
        }) {
            Ok(_) => {}
            Err(e) => {
                // The NIC may still own the rings and posted buffers: never hand that memory
                // back while the device could write it. It is released with the NIC's reset.
                tracing::error!(
                    handle = self.handle,
                    "ENDPOINT_DESTROY failed: {e}; leaking its DMA memory"
                );
                std::mem::forget(self.rings.take());
                for s in self.tx.slots.drain(..).chain(self.rx.slots.drain(..)) {
                    std::mem::forget(s);
                }
            }
        }
    }
}
