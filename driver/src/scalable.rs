//! Scalable endpoints (`fi_scalable_ep`, `fi_tx_context`, `fi_rx_context`).
//!
//! A scalable endpoint is one NIC endpoint — one PIDonFEP, one resource-index range, one
//! address — with several transmit and receive contexts, each a ring set of its own with its
//! own doorbell index and its own completion ring, so each can be driven by its own thread
//! without a lock:
//!
//! | context | rings | NIC |
//! |---|---|---|
//! | 0 | the endpoint's own (ENDPOINT_CREATE with `tx_ctx_cnt`, `rx_ctx_cnt`) | TX context 0 and receive context 0 |
//! | `k >= 1` | CONTEXT_CREATE, role TX if `k < tx_ctx_cnt`, RX if `k < rx_ctx_cnt` | TX context `k` and/or receive context `k` |
//!
//! Receive context `i` is resource index `ri_start + i` (so `ri_count >= rx_ctx_cnt`): a
//! sender reaches it with `uet_av::flags::fi_rx_addr(fi_addr, i, rx_ctx_bits)` in an AV opened with
//! `rx_ctx_bits` large enough, and the sending NIC puts `entry.ri_start + i` in the request.
//! A send or tagged send for `i >= rx_ctx_cnt` is refused RC_BAD_INDEX by the target NIC; an
//! RMA request there reaches the endpoint's RMA space, as at any index of its range.
//! Completions are per context: each context's [`Endpoint::poll`] returns its own sends and
//! receives only.
//!
//! The counts are checked against `CAP_EP.max_tx_ctx` and `CAP_EP.max_rx_ctx` before the NIC
//! is asked. Dropping the scalable endpoint destroys the contexts, then the endpoint: the
//! endpoint's own ring set, dropped while contexts of it live (in whatever order
//! [`ScalableEndpoint::contexts_mut`] left them, or moved out of it), is destroyed on the NIC
//! when the last of them goes.

use crate::av::Av;
use crate::endpoint::{Endpoint, EndpointAttr, EpType, RingSizes};
use crate::error::DriverError;
use crate::nic::Nic;
use uet_fwif::address::UetAddress;
use uet_fwif::admin::{CTX_ROLE_RX, CTX_ROLE_TX};

/// A scalable endpoint and its contexts.
pub struct ScalableEndpoint {
    /// Ring set `k` serves TX context `k` and/or receive context `k`; 0 is the endpoint. The
    /// application may reorder them ([`ScalableEndpoint::contexts_mut`]).
    lanes: Vec<Endpoint>,
    /// The fid of ring set `k`, by `k`: how context `k` is found wherever it was moved.
    fids: Vec<u64>,
    tx_ctx_cnt: u8,
    rx_ctx_cnt: u8,
}

impl Nic {
    /// `fi_scalable_ep`: an `FI_EP_RDM` endpoint with `attr.tx_ctx_cnt` transmit and
    /// `attr.rx_ctx_cnt` receive contexts (0 counts as 1), bound to `av`. Every context gets
    /// the ring sizes of `attr` (a context's unused direction gets the smallest ring). `av`
    /// must be on this NIC, as for [`Nic::endpoint`].
    pub fn scalable_endpoint(
        &self,
        attr: EndpointAttr,
        av: Option<&Av>,
    ) -> Result<ScalableEndpoint, DriverError> {
        let caps = *self.capabilities();
        if attr.ep_type != EpType::Rdm {
            return Err(DriverError::Unsupported(format!(
                "scalable endpoints are FI_EP_RDM, not {:?}",
                attr.ep_type
            )));
        }
        let tx = attr.tx_ctx_cnt.max(1);
        let rx = attr.rx_ctx_cnt.max(1);
        if tx > caps.max_tx_ctx {
            return Err(DriverError::InvalidArgument(format!(
                "tx_ctx_cnt {tx} exceeds CAP_EP.max_tx_ctx {}",
                caps.max_tx_ctx
            )));
        }
        if rx > caps.max_rx_ctx {
            return Err(DriverError::InvalidArgument(format!(
                "rx_ctx_cnt {rx} exceeds CAP_EP.max_rx_ctx {}",
                caps.max_rx_ctx
            )));
        }
        if u16::from(rx) > attr.ri_count {
            return Err(DriverError::InvalidArgument(format!(
                "rx_ctx_cnt {rx} needs ri_count >= {rx} (receive context i is resource index \
                 ri_start + i), got ri_count {}",
                attr.ri_count
            )));
        }
        let table = self.av_table_of(av)?;
        let mut base = self.create_endpoint(&attr, table, 0, tx, rx)?;
        // On failure the endpoint drops here and ENDPOINT_DESTROY removes it.
        base.enable_with_av(av)?;
        let mut lanes = vec![base];
        let full = RingSizes::of(&attr);
        for k in 1..tx.max(rx) {
            let mut role = 0;
            // The completion ring of `attr`, which holds every ring of the endpoint's own set
            // and so every ring of a context's.
            let mut z = RingSizes {
                tx_log2: 1,
                rx_log2: 1,
                trx_log2: 0,
                cq_log2: full.cq_log2,
            };
            if k < tx {
                role |= CTX_ROLE_TX;
                z.tx_log2 = full.tx_log2;
            }
            if k < rx {
                role |= CTX_ROLE_RX;
                z.rx_log2 = full.rx_log2;
                z.trx_log2 = full.trx_log2;
            }
            let lane = match lanes.first() {
                Some(owner) => self.create_context(owner, z, role, k),
                None => Err(DriverError::InvalidArgument("no endpoint".into())),
            };
            match lane {
                Ok(l) => lanes.push(l),
                Err(e) => {
                    // Contexts before the endpoint.
                    while let Some(l) = lanes.pop() {
                        drop(l);
                    }
                    return Err(e);
                }
            }
        }
        let fids = lanes.iter().map(Endpoint::fid).collect();
        Ok(ScalableEndpoint {
            lanes,
            fids,
            tx_ctx_cnt: tx,
            rx_ctx_cnt: rx,
        })
    }
}

impl ScalableEndpoint {
    /// Count the endpoint in its domain ([`crate::Domain::scalable_endpoint`]) until it
    /// goes: the seat is the endpoint's own ring set's, which goes after its contexts.
    pub(crate) fn set_domain_seat(&mut self, seat: crate::domain::DomainSeat) {
        if let Some(base) = self.lanes.first_mut() {
            base.domain_seat = Some(seat);
        }
    }

    /// The endpoint's address (`fi_getname`), shared by every context: `None` once no
    /// context of it is left in [`ScalableEndpoint::contexts_mut`].
    pub fn address(&self) -> Option<&UetAddress> {
        self.lanes
            .iter()
            .find(|l| self.fids.contains(&l.fid()))
            .map(Endpoint::address)
    }

    /// Transmit contexts.
    pub fn tx_ctx_cnt(&self) -> u8 {
        self.tx_ctx_cnt
    }

    /// Receive contexts.
    pub fn rx_ctx_cnt(&self) -> u8 {
        self.rx_ctx_cnt
    }

    /// `fi_tx_context`: transmit context `index`.
    pub fn tx_context(&mut self, index: u8) -> Result<&mut Endpoint, DriverError> {
        if index >= self.tx_ctx_cnt {
            return Err(DriverError::InvalidArgument(format!(
                "transmit context {index} of {}",
                self.tx_ctx_cnt
            )));
        }
        self.lane(index)
    }

    /// `fi_rx_context`: receive context `index`.
    pub fn rx_context(&mut self, index: u8) -> Result<&mut Endpoint, DriverError> {
        if index >= self.rx_ctx_cnt {
            return Err(DriverError::InvalidArgument(format!(
                "receive context {index} of {}",
                self.rx_ctx_cnt
            )));
        }
        self.lane(index)
    }

    /// Ring set `index`, wherever [`ScalableEndpoint::contexts_mut`] left it; `FI_EINVAL` when
    /// it was moved out of this endpoint.
    fn lane(&mut self, index: u8) -> Result<&mut Endpoint, DriverError> {
        let fid = self.fids.get(usize::from(index)).copied();
        self.lanes
            .iter_mut()
            .find(|l| Some(l.fid()) == fid)
            .ok_or_else(|| {
                DriverError::InvalidArgument(format!(
                    "context {index} is no longer in this scalable endpoint"
                ))
            })
    }

    /// Every ring set, owned, by index: element `k` is TX context `k` if `k < tx_ctx_cnt` and
    /// receive context `k` if `k < rx_ctx_cnt`, wherever [`ScalableEndpoint::contexts_mut`]
    /// had moved it. Each may then go to an owner of its own (a provider's context object);
    /// the endpoint is destroyed on the NIC after the last of them is dropped (see the module
    /// docs), and counts in its domain until then.
    pub fn into_contexts(mut self) -> Vec<Endpoint> {
        let mut out = Vec::with_capacity(self.lanes.len());
        for fid in &self.fids {
            if let Some(at) = self.lanes.iter().position(|l| l.fid() == *fid) {
                out.push(self.lanes.swap_remove(at));
            }
        }
        // Ring sets of another endpoint swapped in through `contexts_mut` keep their place
        // after this one's.
        out.append(&mut self.lanes);
        out
    }

    /// Every ring set, by index (set `k` is TX context `k` if `k < tx_ctx_cnt` and receive
    /// context `k` if `k < rx_ctx_cnt`): split them across threads. The endpoint is destroyed
    /// after its contexts wherever they were moved in the slice (see the module docs), and
    /// [`ScalableEndpoint::tx_context`] and [`ScalableEndpoint::rx_context`] find a context
    /// wherever it was moved in the slice.
    pub fn contexts_mut(&mut self) -> &mut [Endpoint] {
        &mut self.lanes
    }
}
