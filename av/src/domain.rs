//! The domain an AV is opened in: what `fi_av_open` checks an AV's attributes against besides
//! the NIC's tables.
//!
//! libfabric opens an AV on a `struct fid_domain`, which was opened from an `fi_info`: its
//! `caps` and `domain_attr` bound what the domain's AVs may ask for. A provider checks
//! (fi_av(3), fi_domain(3), fi_getinfo(3)):
//!
//! | AV attribute | against | refused with |
//! |---|---|---|
//! | `type` | `domain_attr->av_type`: an AV of another type than the domain's (UNSPEC on either side matches any) | `FI_EINVAL` |
//! | `flags` `FI_AV_USER_ID` | `caps` `FI_AV_USER_ID` (libfabric 1.20: "requests that the provider support the association of a user specified identifier with each AV address") | `FI_EOPNOTSUPP` |
//! | `name` (a shared AV) | `caps` `FI_SHARED_AV` ("address vectors which may be shared among multiple processes") | `FI_EOPNOTSUPP` |
//! | `rx_ctx_bits` | `domain_attr->max_ep_rx_ctx`: no more bits than number an endpoint's receive contexts | `FI_EOVERFLOW` |
//! | `ep_per_node` | the endpoints one fabric address can have: the NIC's, not `ep_cnt` (see below) | `FI_E2BIG` |
//! | `count` | the NIC's table (not the domain's) | `FI_ENOSPC` |
//! | `addr_format` (the domain's, in [`AvAttr`]) | `fi_info.addr_format`: the default (binary) takes the domain's; `FI_ADDR_STR` in a binary domain is refused | `FI_EINVAL` |
//! | `max_group_id` (the domain's, in [`AvAttr`]) | `domain_attr->max_group_id`: 0 takes the domain's; another value is refused | `FI_EINVAL` |
//! | `job_id` (the domain's auth key, in [`AvAttr`]) | `domain_attr->auth_key`, a JobID: 0 takes the domain's; another JobID than the domain's is refused | `FI_EINVAL` |
//! | `auth_key_size` (the domain's, in [`AvAttr`]) | `domain_attr->auth_key_size`: 0 takes the domain's; `FI_AV_AUTH_KEY` in one and not the other is refused | `FI_EINVAL` |
//!
//! `ep_per_node` counts the endpoints at one fabric address, of every process there (fi_av(3):
//! "the number of processes allocated per node, times the number of endpoints each process
//! will open"), while `ep_cnt` counts those of one domain of one process: four processes of
//! one endpoint each have `ep_per_node` 4 with `ep_cnt` 1. So its bound is what one NIC can
//! hold, which every domain on the NIC shares.
//!
//! The type, capability, address-format, peer-group, JobID and auth-key rows are
//! [`DomainAttr::av_attr`], which also fills in what the AV leaves to its domain; the context
//! limits narrow the NIC's [`AvLimits`] ([`DomainAttr::limits`]), which [`AvAttr::resolve`]
//! checks as before, so each failure keeps one errno of its own.
//!
//! A domain opened with the `FI_AV_USER_ID` capability also refuses the per-insert
//! `FI_AV_USER_ID` flag (and `FI_AV_USER_ID` on remove): fi_av(3) "if ... the user requires
//! FI_AV_USER_ID support, using the FI_AV_USER_ID flag per fi_av_insert / fi_av_insertsvc /
//! fi_av_remove is not supported. fi_av_set_user_id must be used". [`AvLimits`] carries that
//! to the AV ([`AvLimits::per_insert_user_ids`]). A domain without the capability keeps the
//! per-insert flag libfabric had before 1.20.

use crate::av::{AddrFormat, AvAttr, AvLimits, AUTH_KEY_MAX_GROUP_ID};
use crate::errno::{FiErrno, FiError};
use crate::flags::{AvType, FI_AV_AUTH_KEY, FI_AV_USER_ID, FI_SHARED_AV};
use uet_fwif::av_entry::MAX_JOB_ID;

/// The capabilities (`fi_info.caps`) that concern an AV: [`FI_AV_USER_ID`] and
/// [`FI_SHARED_AV`]. A domain's other capabilities are its endpoints' concern.
pub const AV_DOMAIN_CAPS: u64 = FI_AV_USER_ID | FI_SHARED_AV;

/// What a domain bounds its AVs with: `fi_info.caps` and the `struct fi_domain_attr` fields
/// `fi_av_open` compares an AV's attributes with (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DomainAttr {
    /// `domain_attr->av_type`: the type of every AV of the domain; [`AvType::Unspec`]: any.
    pub av_type: AvType,
    /// `fi_info.caps` the domain was opened with. [`AV_DOMAIN_CAPS`] are the AV's concern.
    pub caps: u64,
    /// `domain_attr->ep_cnt`: endpoints of the domain open at a time; 0: as many as the NIC
    /// has.
    pub ep_cnt: usize,
    /// `domain_attr->max_ep_rx_ctx`: receive contexts one endpoint may have; 0: as many as the
    /// NIC's endpoints have.
    pub max_ep_rx_ctx: usize,
    /// `domain_attr->auth_key_size`: 0 or 4 (the domain's auth key is a JobID), or
    /// [`FI_AV_AUTH_KEY`] (`usize::MAX`): the domain's AVs hold the auth keys
    /// (`fi_av_insert_auth_key`), and its endpoints take theirs from the AV.
    pub auth_key_size: usize,
    /// `domain_attr->auth_key`: the domain's JobID (24 bits), the JobID of its AVs that name
    /// none, stamped into their entries, and the JobID its endpoints are given by default (as
    /// an endpoint whose `ep_attr->auth_key` is NULL takes the domain's); 0: none given (each
    /// AV and endpoint names its own).
    pub job_id: u32,
    /// `fi_info.addr_format`: what the domain's AVs take and return (binary UET addresses, or
    /// `FI_ADDR_STR` strings).
    pub addr_format: AddrFormat,
    /// `domain_attr->max_group_id` (libfabric 2.x peer groups): the largest group id the
    /// domain's `fi_addr_t` values may carry; 0: no peer groups. At most the NIC's.
    pub max_group_id: u32,
}

impl DomainAttr {
    /// A domain with every AV capability, any AV type and the NIC's context limits.
    pub const fn any() -> DomainAttr {
        DomainAttr {
            av_type: AvType::Unspec,
            caps: AV_DOMAIN_CAPS,
            ep_cnt: 0,
            max_ep_rx_ctx: 0,
            auth_key_size: 0,
            job_id: 0,
            addr_format: AddrFormat::Uet,
            max_group_id: 0,
        }
    }

    /// The limits of this domain's AVs on a NIC whose own are `nic`: an endpoint's receive
    /// contexts narrowed to `max_ep_rx_ctx`, and the per-insert user-id flag refused when the
    /// domain has the `FI_AV_USER_ID` capability. The endpoints per node stay the NIC's (see
    /// the module docs).
    ///
    /// `FI_ENODATA` (the NIC cannot give this domain, as `fi_getinfo` answers hints it cannot
    /// meet) when `ep_cnt`, `max_ep_rx_ctx` or `max_group_id` exceeds the NIC's, or
    /// `auth_key_size` is `FI_AV_AUTH_KEY` and the NIC has no auth-key table, or the domain asks for both
    /// `FI_AV_AUTH_KEY` and the `FI_SHARED_AV` capability (every AV of such a domain holds
    /// auth keys, and a named AV holds none: it could open no shared AV), or for
    /// `FI_AV_AUTH_KEY` with a `max_group_id` above [`AUTH_KEY_MAX_GROUP_ID`] (no AV holding
    /// auth keys has such groups); `FI_EINVAL` for an `auth_key_size` that is none of 0, 4
    /// and `FI_AV_AUTH_KEY`, or a JobID wider than 24 bits.
    pub fn limits(&self, nic: &AvLimits) -> Result<AvLimits, FiError> {
        crate::av::auth_keys::check_auth_key_size("fi_domain", self.auth_key_size)?;
        if self.auth_key_size == FI_AV_AUTH_KEY && nic.max_auth_keys == 0 {
            return Err(FiError::new(
                FiErrno::FI_ENODATA,
                "fi_domain: auth_key_size FI_AV_AUTH_KEY: the NIC has no auth-key table",
            ));
        }
        if self.auth_key_size == FI_AV_AUTH_KEY && self.caps & FI_SHARED_AV != 0 {
            return Err(FiError::new(
                FiErrno::FI_ENODATA,
                "fi_domain: caps FI_SHARED_AV with auth_key_size FI_AV_AUTH_KEY: every AV of \
                 the domain would hold auth keys, and a named AV holds none",
            ));
        }
        if self.job_id > MAX_JOB_ID {
            return Err(FiError::inval(format!(
                "fi_domain: auth key JobID {:#x} is wider than 24 bits",
                self.job_id
            )));
        }
        if self.auth_key_size == FI_AV_AUTH_KEY && self.max_group_id > AUTH_KEY_MAX_GROUP_ID {
            return Err(FiError::new(
                FiErrno::FI_ENODATA,
                format!(
                    "fi_domain: max_group_id {} with auth_key_size FI_AV_AUTH_KEY: an AV \
                     holding auth keys has groups up to {AUTH_KEY_MAX_GROUP_ID}",
                    self.max_group_id
                ),
            ));
        }
        if self.ep_cnt as u64 > u64::from(nic.max_endpoints) {
            return Err(FiError::new(
                FiErrno::FI_ENODATA,
                format!(
                    "fi_domain: ep_cnt {} exceeds the NIC's {} endpoints",
                    self.ep_cnt, nic.max_endpoints
                ),
            ));
        }
        if self.max_group_id > nic.max_group_id {
            return Err(FiError::new(
                FiErrno::FI_ENODATA,
                format!(
                    "fi_domain: max_group_id {} exceeds the NIC's {}",
                    self.max_group_id, nic.max_group_id
                ),
            ));
        }
        if self.max_ep_rx_ctx as u64 > nic.max_rx_ctx {
            return Err(FiError::new(
                FiErrno::FI_ENODATA,
                format!(
                    "fi_domain: max_ep_rx_ctx {} exceeds the {} receive contexts a NIC endpoint \
                     can have",
                    self.max_ep_rx_ctx, nic.max_rx_ctx
                ),
            ));
        }
        let mut limits = *nic;
        if self.max_ep_rx_ctx != 0 {
            limits.max_rx_ctx = self.max_ep_rx_ctx as u64;
        }
        limits.per_insert_user_ids = nic.per_insert_user_ids && self.caps & FI_AV_USER_ID == 0;
        Ok(limits)
    }

    /// `attr` checked against this domain (its `type`, `flags`, `name`, address format, peer
    /// groups and auth-key mode: see the module docs, on the attributes as the application
    /// gave them, before [`AvAttr::resolve`] reports UNSPEC and MAP as TABLE), with the
    /// domain's `addr_format`, `max_group_id` and `auth_key_size` where `attr` leaves them at
    /// their defaults, and its JobID where `attr` names none.
    pub fn av_attr(&self, attr: &AvAttr) -> Result<AvAttr, FiError> {
        if self.av_type != AvType::Unspec
            && attr.av_type != AvType::Unspec
            && attr.av_type != self.av_type
        {
            return Err(FiError::inval(format!(
                "fi_av_open: type {} differs from the domain's av_type {}",
                attr.av_type.name(),
                self.av_type.name()
            )));
        }
        if attr.flags & FI_AV_USER_ID != 0 && self.caps & FI_AV_USER_ID == 0 {
            return Err(FiError::new(
                FiErrno::FI_EOPNOTSUPP,
                "fi_av_open: flags FI_AV_USER_ID: the domain was opened without the \
                 FI_AV_USER_ID capability",
            ));
        }
        if let Some(name) = &attr.name {
            if self.caps & FI_SHARED_AV == 0 {
                return Err(FiError::new(
                    FiErrno::FI_EOPNOTSUPP,
                    format!(
                        "fi_av_open: name '{}': a named AV is shared between processes, and the \
                         domain was opened without the FI_SHARED_AV capability",
                        name.as_str()
                    ),
                ));
            }
        }
        let in_av = |size| size == FI_AV_AUTH_KEY;
        if attr.auth_key_size != 0 && in_av(attr.auth_key_size) != in_av(self.auth_key_size) {
            return Err(FiError::inval(format!(
                "fi_av_open: auth_key_size {} differs from the domain's {} (an AV holds auth \
                 keys exactly when its domain was opened with FI_AV_AUTH_KEY)",
                key_size_name(attr.auth_key_size),
                key_size_name(self.auth_key_size)
            )));
        }
        if attr.addr_format == AddrFormat::Str && self.addr_format != AddrFormat::Str {
            return Err(FiError::inval(
                "fi_av_open: addr_format FI_ADDR_STR differs from the domain's (binary UET \
                 addresses)",
            ));
        }
        if attr.job_id != 0 && self.job_id != 0 && attr.job_id != self.job_id {
            return Err(FiError::inval(format!(
                "fi_av_open: JobID {:#x} differs from the domain's auth key {:#x}",
                attr.job_id, self.job_id
            )));
        }
        if attr.max_group_id != 0 && attr.max_group_id != self.max_group_id {
            return Err(FiError::inval(format!(
                "fi_av_open: max_group_id {:#x} differs from the domain's {:#x}",
                attr.max_group_id, self.max_group_id
            )));
        }
        Ok(AvAttr {
            auth_key_size: match attr.auth_key_size {
                0 => self.auth_key_size,
                size => size,
            },
            job_id: match attr.job_id {
                0 => self.job_id,
                job => job,
            },
            addr_format: self.addr_format,
            max_group_id: self.max_group_id,
            ..*attr
        })
    }
}

/// An `auth_key_size` for messages.
fn key_size_name(size: usize) -> String {
    if size == FI_AV_AUTH_KEY {
        "FI_AV_AUTH_KEY".into()
    } else {
        size.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::av::AvName;

    const NIC: AvLimits = AvLimits::new(1 << 16, 8);

    fn nic() -> AvLimits {
        AvLimits {
            max_rx_ctx: 16,
            max_endpoints: 64,
            ..NIC
        }
    }

    #[test]
    fn a_type_other_than_the_domains_is_einval_and_unspec_matches_any() {
        let table = DomainAttr {
            av_type: AvType::Table,
            ..DomainAttr::any()
        };
        let map = AvAttr {
            av_type: AvType::Map,
            ..AvAttr::default()
        };
        let e = table.av_attr(&map).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(
            e.message.contains("FI_AV_MAP") && e.message.contains("FI_AV_TABLE"),
            "{e}"
        );
        for t in [AvType::Unspec, AvType::Table] {
            let attr = AvAttr {
                av_type: t,
                ..AvAttr::default()
            };
            assert!(table.av_attr(&attr).is_ok(), "{t:?}");
        }
        for t in [AvType::Unspec, AvType::Map, AvType::Table] {
            let attr = AvAttr {
                av_type: t,
                ..AvAttr::default()
            };
            assert!(DomainAttr::any().av_attr(&attr).is_ok(), "{t:?}");
        }
    }

    #[test]
    fn av_flags_and_names_need_their_capabilities() {
        let user_id = AvAttr {
            flags: FI_AV_USER_ID,
            ..AvAttr::default()
        };
        let named = AvAttr {
            name: Some(AvName::new("shared").unwrap()),
            ..AvAttr::default()
        };
        let bare = DomainAttr::default();
        let e = bare.av_attr(&user_id).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EOPNOTSUPP);
        assert!(e.message.contains("FI_AV_USER_ID capability"), "{e}");
        let e = bare.av_attr(&named).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EOPNOTSUPP);
        assert!(e.message.contains("FI_SHARED_AV"), "{e}");
        assert!(bare.av_attr(&AvAttr::default()).is_ok());
        let caps = |caps| DomainAttr {
            caps,
            ..DomainAttr::default()
        };
        assert!(caps(FI_AV_USER_ID).av_attr(&user_id).is_ok());
        assert!(caps(FI_SHARED_AV).av_attr(&named).is_ok());
        assert!(caps(FI_SHARED_AV).av_attr(&user_id).is_err());
    }

    #[test]
    fn context_limits_narrow_the_nics_and_more_than_the_nic_is_enodata() {
        let d = DomainAttr {
            ep_cnt: 4,
            max_ep_rx_ctx: 2,
            ..DomainAttr::any()
        };
        let l = d.limits(&nic()).unwrap();
        // ep_per_node counts every process's endpoints at a node: bounded by the NIC's.
        assert_eq!((l.max_endpoints, l.max_rx_ctx), (64, 2));
        assert_eq!(l.rx_ctx_bits_usable(), 1);
        let l = DomainAttr::any().limits(&nic()).unwrap();
        assert_eq!((l.max_endpoints, l.max_rx_ctx), (64, 16));
        let e = DomainAttr {
            ep_cnt: 65,
            ..DomainAttr::any()
        }
        .limits(&nic())
        .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ENODATA);
        assert!(e.message.contains("ep_cnt 65"), "{e}");
        let e = DomainAttr {
            max_ep_rx_ctx: 17,
            ..DomainAttr::any()
        }
        .limits(&nic())
        .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ENODATA);
        assert!(e.message.contains("max_ep_rx_ctx 17"), "{e}");
    }

    #[test]
    fn the_user_id_capability_takes_the_per_insert_flag_away() {
        assert!(nic().per_insert_user_ids);
        let with = DomainAttr::any().limits(&nic()).unwrap();
        assert!(!with.per_insert_user_ids);
        let without = DomainAttr {
            caps: FI_SHARED_AV,
            ..DomainAttr::any()
        }
        .limits(&nic())
        .unwrap();
        assert!(without.per_insert_user_ids);
    }

    #[test]
    fn an_av_takes_the_domains_auth_key_mode_and_may_not_contradict_it() {
        let keys = DomainAttr {
            auth_key_size: FI_AV_AUTH_KEY,
            caps: FI_AV_USER_ID,
            ..DomainAttr::any()
        };
        let sized = |auth_key_size| AvAttr {
            auth_key_size,
            ..AvAttr::default()
        };
        assert_eq!(
            keys.av_attr(&sized(0)).unwrap().auth_key_size,
            FI_AV_AUTH_KEY
        );
        assert!(keys.av_attr(&sized(FI_AV_AUTH_KEY)).is_ok());
        let e = keys.av_attr(&sized(4)).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(
            e.message
                .contains("auth_key_size 4 differs from the domain's FI_AV_AUTH_KEY"),
            "{e}"
        );
        let plain = DomainAttr::any();
        assert_eq!(plain.av_attr(&sized(0)).unwrap().auth_key_size, 0);
        assert_eq!(plain.av_attr(&sized(4)).unwrap().auth_key_size, 4);
        let e = plain.av_attr(&sized(FI_AV_AUTH_KEY)).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);

        let e = DomainAttr {
            auth_key_size: 3,
            ..DomainAttr::any()
        }
        .limits(&nic())
        .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.starts_with("fi_domain: auth_key_size 3"), "{e}");
        let no_table = AvLimits {
            max_auth_keys: 0,
            ..nic()
        };
        let e = keys.limits(&no_table).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ENODATA);
        assert!(keys.limits(&nic()).is_ok());
        assert!(plain.limits(&no_table).is_ok());
    }

    #[test]
    fn shared_avs_and_avs_holding_auth_keys_are_no_domain() {
        let both = DomainAttr {
            auth_key_size: FI_AV_AUTH_KEY,
            ..DomainAttr::any()
        };
        let e = both.limits(&nic()).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ENODATA);
        assert!(e.message.contains("FI_SHARED_AV"), "{e}");
        let shared = DomainAttr {
            caps: FI_SHARED_AV,
            ..DomainAttr::default()
        };
        assert!(shared.limits(&nic()).is_ok());
    }

    #[test]
    fn an_av_takes_the_domains_address_format_and_peer_groups() {
        let d = DomainAttr {
            addr_format: AddrFormat::Str,
            max_group_id: 0xFF,
            ..DomainAttr::any()
        };
        let a = d.av_attr(&AvAttr::default()).unwrap();
        assert_eq!((a.addr_format, a.max_group_id), (AddrFormat::Str, 0xFF));
        let same = AvAttr {
            addr_format: AddrFormat::Str,
            max_group_id: 0xFF,
            ..AvAttr::default()
        };
        assert_eq!(d.av_attr(&same).unwrap(), a);
        let e = d
            .av_attr(&AvAttr {
                max_group_id: 0x0F,
                ..AvAttr::default()
            })
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.contains("max_group_id 0xf differs"), "{e}");
        let binary = DomainAttr::any();
        let e = binary
            .av_attr(&AvAttr {
                addr_format: AddrFormat::Str,
                ..AvAttr::default()
            })
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.contains("FI_ADDR_STR"), "{e}");
        let plain = binary.av_attr(&AvAttr::default()).unwrap();
        assert_eq!(
            (plain.addr_format, plain.max_group_id),
            (AddrFormat::Uet, 0)
        );

        let few = AvLimits {
            max_group_id: 0x0F,
            ..nic()
        };
        let e = d.limits(&few).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ENODATA);
        assert!(e.message.contains("max_group_id 255"), "{e}");
    }

    /// A domain none of whose AVs could open is refused at `fi_domain`, as the
    /// `FI_SHARED_AV` and `FI_AV_AUTH_KEY` pair is, rather than at every `fi_av_open`.
    #[test]
    fn a_domain_no_av_could_open_in_is_refused_at_fi_domain() {
        let wide = DomainAttr {
            job_id: 0x0100_0000,
            ..DomainAttr::any()
        };
        let e = wide.limits(&nic()).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.starts_with("fi_domain: "), "{e}");
        assert!(wide
            .av_attr(&AvAttr::default())
            .unwrap()
            .resolve(&nic())
            .is_err());
        assert!(DomainAttr {
            job_id: 0x00FF_FFFF,
            ..DomainAttr::any()
        }
        .limits(&nic())
        .is_ok());

        let keys = |max_group_id| DomainAttr {
            auth_key_size: FI_AV_AUTH_KEY,
            caps: FI_AV_USER_ID,
            max_group_id,
            ..DomainAttr::any()
        };
        let e = keys(crate::AUTH_KEY_MAX_GROUP_ID + 1)
            .limits(&nic())
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ENODATA);
        assert!(e.message.contains("max_group_id"), "{e}");
        let l = keys(crate::AUTH_KEY_MAX_GROUP_ID).limits(&nic()).unwrap();
        let a = keys(crate::AUTH_KEY_MAX_GROUP_ID)
            .av_attr(&AvAttr::default())
            .unwrap();
        assert!(a.resolve(&l).is_ok());
    }

    #[test]
    fn an_av_takes_the_domains_jobid_unless_it_names_the_same() {
        let d = DomainAttr {
            job_id: 0x42,
            ..DomainAttr::any()
        };
        let job = |job_id| AvAttr {
            job_id,
            ..AvAttr::default()
        };
        assert_eq!(d.av_attr(&job(0)).unwrap().job_id, 0x42);
        assert_eq!(d.av_attr(&job(0x42)).unwrap().job_id, 0x42);
        let e = d.av_attr(&job(0x43)).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL);
        assert!(e.message.contains("JobID 0x43 differs"), "{e}");
        assert_eq!(DomainAttr::any().av_attr(&job(0x43)).unwrap().job_id, 0x43);
    }
}
