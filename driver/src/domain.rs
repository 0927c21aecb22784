//! `fi_domain`: the attributes an application opened its domain with, and the AVs and
//! endpoints opened in it.
//!
//! A [`Nic`] is the PCI function every libfabric object of the domain uses. A [`Domain`] adds
//! what the application asked of the domain (`fi_info.caps`, `domain_attr->av_type`,
//! `ep_cnt`, `max_ep_rx_ctx`: [`DomainAttr`]), and `fi_av_open` on it checks an AV's
//! attributes against both, each failure with an errno of its own (the table in
//! [`uet_av::domain`], and [`uet_av::AvAttr::resolve`] for the NIC's limits).
//!
//! `fi_endpoint` on a domain ([`Domain::endpoint`], [`Domain::scalable_endpoint`]) checks
//! what the domain bounds, before anything is asked of the NIC:
//!
//! | check | errno |
//! |---|---|
//! | the AV bound (`fi_ep_bind`) was opened in this domain | `FI_EINVAL` |
//! | at most `ep_cnt` endpoints of the domain at a time (a scalable endpoint is one) | `FI_ENOSPC` |
//! | a scalable endpoint's `rx_ctx_cnt` within `max_ep_rx_ctx` | `FI_EINVAL` |
//!
//! `fi_close` of the domain ([`Domain::close`]) is `FI_EBUSY` while AVs or endpoints of it
//! are open, as libfabric's domains are.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use uet_driver::uet_av::{AvAttr, AvType, DomainAttr, FI_AV_USER_ID};
//! use uet_driver::{backend::sim::SimDevice, Nic};
//! let fabric = uet_sim::Fabric::new();
//! let nic = Nic::open(Arc::new(SimDevice::new(fabric.add_nic(
//!     uet_sim::NicConfig::new("10.0.0.1".parse()?),
//! )?)))?;
//! let domain = nic.domain(DomainAttr {
//!     av_type: AvType::Table,
//!     caps: FI_AV_USER_ID,
//!     ..DomainAttr::default()
//! })?;
//! let av = domain.open_av(AvAttr { flags: FI_AV_USER_ID, ..AvAttr::default() })?;
//! # drop(av);
//! # Ok(()) }
//! ```

use crate::av::{Av, SharedAv};
use crate::endpoint::{Endpoint, EndpointAttr};
use crate::error::DriverError;
use crate::scalable::ScalableEndpoint;
use crate::Nic;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use uet_av::{AvAttr, AvLimits, DomainAttr, FiErrno, FiError};

/// An `fi_domain` opened on a NIC: [`DomainAttr`], the AV limits it gives
/// ([`DomainAttr::limits`]), and the count of the AVs and endpoints open in it.
pub struct Domain {
    nic: Nic,
    attr: DomainAttr,
    limits: AvLimits,
    record: Arc<DomainRecord>,
}

/// What a domain counts of the objects opened in it: each holds a [`DomainSeat`], and the
/// count goes down when the object goes, whether or not the [`Domain`] is still there.
pub(crate) struct DomainRecord {
    /// Distinct for every domain of the process (a domain's objects are told apart from
    /// another's by it, on any NIC).
    id: u64,
    avs: AtomicUsize,
    endpoints: AtomicUsize,
}

/// Which count of its domain a [`DomainSeat`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SeatKind {
    Av,
    Endpoint,
}

/// One AV or endpoint counted in its domain ([`DomainRecord`]); uncounted when dropped.
pub(crate) struct DomainSeat {
    domain: Arc<DomainRecord>,
    kind: SeatKind,
}

/// The next domain's [`DomainRecord::id`].
static NEXT_DOMAIN_ID: AtomicU64 = AtomicU64::new(1);

impl DomainRecord {
    fn count(&self, kind: SeatKind) -> &AtomicUsize {
        match kind {
            SeatKind::Av => &self.avs,
            SeatKind::Endpoint => &self.endpoints,
        }
    }

    /// A seat for an AV table created in this domain.
    pub(crate) fn av_seat(self: &Arc<Self>) -> DomainSeat {
        self.avs.fetch_add(1, Ordering::AcqRel);
        DomainSeat {
            domain: self.clone(),
            kind: SeatKind::Av,
        }
    }

    /// A seat for one more endpoint, `None` when `limit` endpoints (0: no limit) hold one.
    fn endpoint_seat(self: &Arc<Self>, limit: usize) -> Option<DomainSeat> {
        self.endpoints
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (limit == 0 || n < limit).then_some(n + 1)
            })
            .ok()?;
        Some(DomainSeat {
            domain: self.clone(),
            kind: SeatKind::Endpoint,
        })
    }
}

impl DomainSeat {
    /// Whether the seat is one of `domain`'s.
    pub(crate) fn is_of(&self, domain: &Arc<DomainRecord>) -> bool {
        self.domain.id == domain.id
    }
}

impl Drop for DomainSeat {
    fn drop(&mut self) {
        self.domain.count(self.kind).fetch_sub(1, Ordering::AcqRel);
    }
}

impl core::fmt::Debug for DomainSeat {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DomainSeat")
            .field("domain", &self.domain.id)
            .field("kind", &self.kind)
            .finish()
    }
}

/// `fi_close` of a [`Domain`] refused: the error (`FI_EBUSY`), and the domain given back.
pub struct DomainCloseError {
    /// Why: AVs or endpoints of the domain are still open.
    pub error: FiError,
    /// The domain, still open.
    pub domain: Box<Domain>,
}

impl core::fmt::Debug for DomainCloseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DomainCloseError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl core::fmt::Display for DomainCloseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for DomainCloseError {}

impl Nic {
    /// `fi_domain`: a domain on this NIC with `attr`. `FI_ENODATA` when the NIC cannot give
    /// it (`ep_cnt`, `max_ep_rx_ctx` or `max_group_id` above the NIC's, `FI_AV_AUTH_KEY` on a
    /// NIC without an auth-key table, or `FI_AV_AUTH_KEY` with the `FI_SHARED_AV` capability
    /// or with a `max_group_id` above [`uet_av::AUTH_KEY_MAX_GROUP_ID`], as `fi_getinfo`
    /// answers such hints); `FI_EINVAL` for an `auth_key_size` of another size than a
    /// JobID's, or a JobID wider than 24 bits ([`DomainAttr::limits`]).
    pub fn domain(&self, attr: DomainAttr) -> Result<Domain, FiError> {
        let limits = attr.limits(&self.av_limits())?;
        Ok(Domain {
            nic: self.clone(),
            attr,
            limits,
            record: Arc::new(DomainRecord {
                id: NEXT_DOMAIN_ID.fetch_add(1, Ordering::Relaxed),
                avs: AtomicUsize::new(0),
                endpoints: AtomicUsize::new(0),
            }),
        })
    }
}

impl Domain {
    /// The attributes the domain was opened with.
    pub fn attr(&self) -> &DomainAttr {
        &self.attr
    }

    /// The NIC the domain is on.
    pub fn nic(&self) -> &Nic {
        &self.nic
    }

    /// What the domain's AVs may hold: the NIC's limits narrowed by the domain's.
    pub fn av_limits(&self) -> AvLimits {
        self.limits
    }

    /// AVs of the domain whose NIC tables are still there (an AV's table stays while an
    /// endpoint is bound to it), and endpoints of the domain.
    pub fn open_objects(&self) -> (usize, usize) {
        (
            self.record.avs.load(Ordering::Acquire),
            self.record.endpoints.load(Ordering::Acquire),
        )
    }

    /// `fi_av_open` in this domain: [`DomainAttr::av_attr`] (type, capabilities, and the
    /// address format, peer groups, JobID and auth-key mode the AV takes from the domain),
    /// then [`Nic::open_av`] within the domain's limits. Nothing is asked of the NIC when a
    /// check fails.
    pub fn open_av(&self, attr: AvAttr) -> Result<Av, FiError> {
        let attr = self.attr.av_attr(&attr)?;
        self.nic
            .open_av_within(attr, self.limits, Some(&self.record))
    }

    /// `fi_av_open` with a name in this domain (which needs the `FI_SHARED_AV` capability):
    /// [`DomainAttr::av_attr`], then [`Nic::open_named_av`] within the domain's limits.
    pub fn open_named_av(&self, attr: AvAttr) -> Result<SharedAv, FiError> {
        let attr = self.attr.av_attr(&attr)?;
        self.nic
            .open_named_av_within(attr, self.limits, Some(&self.record))
    }

    /// The endpoint attributes `fi_getinfo` gives for this domain: the defaults within the
    /// NIC's limits, with the domain's JobID as the endpoint's (`ep_attr->auth_key` left NULL
    /// takes the domain's). A domain that names no JobID leaves the default.
    ///
    /// On a NIC whose rings are smaller than the defaults (`CAP_QUEUES.max_queue_entries`
    /// below 256), the completion ring is the largest the NIC has and each of the three
    /// descriptor rings a quarter of it, so that it holds them all (down to 8-entry rings;
    /// below that each descriptor ring keeps its smallest size, 2, and the attributes open no
    /// endpoint); resource indices are at most the NIC's per endpoint (`CAP_RESOURCE_INDEX`).
    pub fn endpoint_attr(&self) -> EndpointAttr {
        let within = self.nic.endpoint_defaults();
        EndpointAttr {
            job_id: match self.attr.job_id {
                0 => within.job_id,
                job_id => job_id,
            },
            ..within
        }
    }

    /// `fi_endpoint` in this domain, bound to `av` ([`Nic::endpoint`]), after the domain's
    /// checks (see the module docs): `av` opened in this domain (`FI_EINVAL`), and fewer than
    /// `ep_cnt` endpoints of the domain open (`FI_ENOSPC`,
    /// [`DriverError::Exhausted`]). The endpoint counts in the domain until it is dropped.
    pub fn endpoint(&self, attr: EndpointAttr, av: Option<&Av>) -> Result<Endpoint, DriverError> {
        let seat = self.endpoint_seat(av)?;
        let mut endpoint = self.nic.endpoint(attr, av)?;
        endpoint.domain_seat = Some(seat);
        Ok(endpoint)
    }

    /// `fi_scalable_ep` in this domain ([`Nic::scalable_endpoint`]), after the checks of
    /// [`Domain::endpoint`] and `rx_ctx_cnt` against the domain's `max_ep_rx_ctx`
    /// (`FI_EINVAL`). It counts as one endpoint of the domain, its contexts with it.
    pub fn scalable_endpoint(
        &self,
        attr: EndpointAttr,
        av: Option<&Av>,
    ) -> Result<ScalableEndpoint, DriverError> {
        let max = self.attr.max_ep_rx_ctx;
        if max != 0 && usize::from(attr.rx_ctx_cnt.max(1)) > max {
            return Err(DriverError::InvalidArgument(format!(
                "fi_scalable_ep: rx_ctx_cnt {} exceeds the domain's max_ep_rx_ctx {max}",
                attr.rx_ctx_cnt
            )));
        }
        let seat = self.endpoint_seat(av)?;
        let mut endpoint = self.nic.scalable_endpoint(attr, av)?;
        endpoint.set_domain_seat(seat);
        Ok(endpoint)
    }

    /// The domain's checks of a new endpoint bound to `av`, and its seat among the
    /// domain's endpoints.
    fn endpoint_seat(&self, av: Option<&Av>) -> Result<DomainSeat, DriverError> {
        if let Some(av) = av.filter(|a| !a.nic().table().is_in(&self.record)) {
            return Err(DriverError::InvalidArgument(format!(
                "fi_ep_bind: the AV (NIC table {}) was not opened in this domain: an endpoint \
                 binds an AV of its own domain",
                av.nic().table().handle()
            )));
        }
        self.record.endpoint_seat(self.attr.ep_cnt).ok_or_else(|| {
            DriverError::Exhausted(format!(
                "fi_endpoint: the domain's ep_cnt {} endpoints are open",
                self.attr.ep_cnt
            ))
        })
    }

    /// `fi_close`: close the domain. `FI_EBUSY` while AVs or endpoints of it are open (an
    /// AV's NIC table stays while endpoints are bound to it); the domain comes back in the
    /// error, unchanged.
    ///
    /// In a process forked from the one that opened the NIC, the domain closes whatever is
    /// open: it is the parent's domain, whose objects never run in this process, and one a
    /// thread of the parent was using at the fork may stay open for good ([`crate::fork`]).
    pub fn close(self) -> Result<(), DomainCloseError> {
        let (avs, endpoints) = self.open_objects();
        if avs + endpoints > 0 && !self.nic.opened_in_a_parent() {
            return Err(DomainCloseError {
                error: FiError::new(
                    FiErrno::FI_EBUSY,
                    format!(
                        "fi_close: {avs} AVs and {endpoints} endpoints of the domain are open; \
                         close them first"
                    ),
                ),
                domain: Box::new(self),
            });
        }
        Ok(())
    }
}
