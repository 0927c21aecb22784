//! `fi_domain`: the attributes an application opened its domain with, and the AVs opened in
//! it.
//!
//! A [`Nic`] is the PCI function every libfabric object of the domain uses. A [`Domain`] adds
//! what the application asked of the domain (`fi_info.caps`, `domain_attr->av_type`,
//! `ep_cnt`, `max_ep_rx_ctx`: [`DomainAttr`]), and `fi_av_open` on it checks an AV's
//! attributes against both, each failure with an errno of its own (the table in
//! [`uet_av::domain`], and [`uet_av::AvAttr::resolve`] for the NIC's limits):
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
use crate::Nic;
use uet_av::{AvAttr, AvLimits, DomainAttr, FiError};

/// An `fi_domain` opened on a NIC: [`DomainAttr`] and the AV limits it gives
/// ([`DomainAttr::limits`]).
#[derive(Clone)]
pub struct Domain {
    nic: Nic,
    attr: DomainAttr,
    limits: AvLimits,
}

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

    /// `fi_av_open` in this domain: [`DomainAttr::av_attr`] (type, capabilities, and the
    /// address format, peer groups, JobID and auth-key mode the AV takes from the domain),
    /// then [`Nic::open_av`] within the domain's limits. Nothing is asked of the NIC when a
    /// check fails.
    pub fn open_av(&self, attr: AvAttr) -> Result<Av, FiError> {
        let attr = self.attr.av_attr(&attr)?;
        self.nic.open_av_within(attr, self.limits)
    }

    /// `fi_av_open` with a name in this domain (which needs the `FI_SHARED_AV` capability):
    /// [`DomainAttr::av_attr`], then [`Nic::open_named_av`] within the domain's limits.
    pub fn open_named_av(&self, attr: AvAttr) -> Result<SharedAv, FiError> {
        let attr = self.attr.av_attr(&attr)?;
        self.nic.open_named_av_within(attr, self.limits)
    }
}
