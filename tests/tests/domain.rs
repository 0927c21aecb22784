//! `fi_av_open` in a domain: an AV's type, flags and context attributes are checked against
//! what the application opened the domain with, each failure with an errno of its own and
//! nothing asked of the NIC; the `FI_AV_USER_ID` capability trades the per-insert flag for
//! `fi_av_set_user_id`, end to end through the NIC. An endpoint binds only an AV of its
//! own NIC and domain, a domain holds at most `ep_cnt` endpoints and closes only when its
//! objects are gone, and a buffer or memory region is only for the NIC it was mapped for.

use std::sync::Arc;
use uet_av::{
    AvAttr, AvName, AvType, DomainAttr, FiErrno, FI_AV_USER_ID, FI_SHARED_AV, FI_SYMMETRIC,
};
use uet_driver::backend::sim::SimDevice;
use uet_driver::{Domain, EndpointAttr, Nic};
use uet_regs::ADMIN_COMMANDS;
use uet_sim::{Fabric, NicConfig, SimFunction};
use uet_tests::nic_addr;

const JOB: u32 = 0x21;

fn nic(fabric: &Fabric, i: usize) -> (Nic, SimFunction) {
    let function = fabric
        .add_nic(NicConfig::new(nic_addr(i)))
        .expect("add NIC");
    let nic = Nic::open(Arc::new(SimDevice::new(function.clone()))).expect("open NIC");
    (nic, function)
}

/// The error of an `fi_av_open` in `domain` that must fail, checking that it sent the NIC
/// (`function`) no admin command.
fn refused_open(domain: &Domain, function: &SimFunction, attr: AvAttr) -> uet_av::FiError {
    let before = function.counter(ADMIN_COMMANDS);
    let e = domain.open_av(attr).map(|_| ()).unwrap_err();
    assert_eq!(
        function.counter(ADMIN_COMMANDS),
        before,
        "a refused fi_av_open sends the NIC nothing: {e}"
    );
    e
}

fn attr() -> AvAttr {
    AvAttr {
        count: 16,
        job_id: JOB,
        ..AvAttr::default()
    }
}

#[test]
fn each_domain_check_fails_with_an_errno_of_its_own_and_asks_nothing_of_the_nic() {
    let fabric = Fabric::new();
    let (nic, function) = nic(&fabric, 0);
    let limits = nic.av_limits();
    assert!(
        limits.max_endpoints > 2 && limits.max_rx_ctx >= 4,
        "the simulated NIC has room beyond the domain's limits: {limits:?}"
    );
    let domain = nic
        .domain(DomainAttr {
            av_type: AvType::Table,
            caps: 0,
            ep_cnt: 2,
            max_ep_rx_ctx: 2,
            ..DomainAttr::default()
        })
        .expect("domain");
    let before = function.counter(ADMIN_COMMANDS);
    let refused = |a: AvAttr| refused_open(&domain, &function, a);
    let cases = [
        (
            AvAttr {
                av_type: AvType::Map,
                ..attr()
            },
            FiErrno::FI_EINVAL,
            "domain's av_type FI_AV_TABLE",
        ),
        (
            AvAttr {
                flags: FI_AV_USER_ID,
                ..attr()
            },
            FiErrno::FI_EOPNOTSUPP,
            "FI_AV_USER_ID capability",
        ),
        (
            // Two bits number four contexts; the domain's endpoints have two.
            AvAttr {
                rx_ctx_bits: 2,
                ..attr()
            },
            FiErrno::FI_EOVERFLOW,
            "rx_ctx_bits 2",
        ),
        (
            // ep_per_node counts the endpoints of every process at a node: above the domain's
            // ep_cnt is fine, above what one NIC can hold is not.
            AvAttr {
                ep_per_node: limits.max_endpoints as usize + 1,
                ..attr()
            },
            FiErrno::FI_E2BIG,
            "ep_per_node",
        ),
        (
            AvAttr {
                count: limits.max_entries as usize + 1,
                ..attr()
            },
            FiErrno::FI_ENOSPC,
            "count",
        ),
        (
            AvAttr {
                flags: 1 << 30,
                ..attr()
            },
            FiErrno::FI_EBADFLAGS,
            "unknown flags",
        ),
    ];
    for (a, errno, says) in cases {
        let e = refused(a);
        assert_eq!(e.errno, errno, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
    let e = domain
        .open_named_av(AvAttr {
            name: Some(AvName::new(&format!("test-domain-{}", std::process::id())).unwrap()),
            ..attr()
        })
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EOPNOTSUPP, "{e}");
    assert!(e.message.contains("FI_SHARED_AV"), "{e}");
    assert_eq!(
        function.counter(ADMIN_COMMANDS),
        before,
        "a refused fi_av_open sends the NIC nothing"
    );

    // Within every limit: the domain's own type, one context bit, more endpoints per node than
    // the domain's ep_cnt (other processes' endpoints at the node).
    for t in [AvType::Unspec, AvType::Table] {
        let av = domain
            .open_av(AvAttr {
                av_type: t,
                rx_ctx_bits: 1,
                ep_per_node: 3,
                flags: FI_SYMMETRIC,
                ..attr()
            })
            .expect("an AV the domain allows");
        assert_eq!(av.av_type(), AvType::Table);
    }
    // The receive-context bits the domain refuses pass the NIC's limits alone.
    assert!(nic
        .open_av(AvAttr {
            rx_ctx_bits: 2,
            ..attr()
        })
        .is_ok());
}

#[test]
fn a_domain_the_nic_cannot_give_is_enodata() {
    let fabric = Fabric::new();
    let (nic, _function) = nic(&fabric, 0);
    let limits = nic.av_limits();
    for (d, says) in [
        (
            DomainAttr {
                ep_cnt: limits.max_endpoints as usize + 1,
                ..DomainAttr::any()
            },
            "ep_cnt",
        ),
        (
            DomainAttr {
                max_ep_rx_ctx: limits.max_rx_ctx as usize + 1,
                ..DomainAttr::any()
            },
            "max_ep_rx_ctx",
        ),
    ] {
        let e = nic.domain(d).map(|_| ()).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_ENODATA, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
    let all = nic
        .domain(DomainAttr {
            ep_cnt: limits.max_endpoints as usize,
            max_ep_rx_ctx: limits.max_rx_ctx as usize,
            ..DomainAttr::any()
        })
        .expect("the NIC's own limits");
    assert_eq!(
        all.av_limits(),
        Domain::av_limits(&nic.domain(DomainAttr::any()).unwrap())
    );
}

#[test]
fn a_shared_av_opens_in_a_domain_with_the_capability() {
    let fabric = Fabric::new();
    let (nic, _function) = nic(&fabric, 0);
    let domain = nic
        .domain(DomainAttr {
            caps: FI_SHARED_AV,
            ..DomainAttr::default()
        })
        .expect("domain");
    let name = format!("test-domain-shared-{}", std::process::id());
    let av = domain
        .open_named_av(AvAttr {
            name: Some(AvName::new(&name).unwrap()),
            ..attr()
        })
        .expect("named AV");
    assert_eq!(av.name(), name);
}

/// fi_av(3): with the FI_AV_USER_ID capability, "using the FI_AV_USER_ID flag per fi_av_insert
/// / fi_av_insertsvc / fi_av_remove is not supported. fi_av_set_user_id must be used"; the
/// user id it sets is what a receive reports as the source.
#[test]
fn the_user_id_capability_refuses_per_insert_ids_and_set_user_id_reaches_the_nic() {
    let fabric = Fabric::new();
    let (nic_a, _fa) = nic(&fabric, 0);
    let (nic_b, _fb) = nic(&fabric, 1);
    let domain = nic_b
        .domain(DomainAttr {
            caps: FI_AV_USER_ID,
            ..DomainAttr::default()
        })
        .expect("domain");
    let mut av_a = nic_a.open_av(attr()).expect("AV");
    let ep_attr = EndpointAttr {
        job_id: JOB,
        ..EndpointAttr::default()
    };
    let mut ea = nic_a.endpoint(ep_attr, Some(&av_a)).expect("endpoint");

    // A plain AV of the domain: the per-insert flag is refused, and nothing is inserted.
    let mut plain = domain.open_av(attr()).expect("AV");
    let a_addr = ea.address().to_bytes().unwrap();
    let mut ids = [0x77u64];
    let e = plain
        .insert(&a_addr, 1, Some(&mut ids), FI_AV_USER_ID)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    assert!(e.message.contains("FI_AV_USER_ID capability"), "{e}");
    assert_eq!(plain.len(), 0);
    let mut fi = [0];
    assert_eq!(plain.insert(&a_addr, 1, Some(&mut fi), 0).unwrap(), 1);
    let e = plain.remove(&fi, FI_AV_USER_ID).unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    assert_eq!(plain.len(), 1, "the refused remove removed nothing");
    drop(plain);

    // An AV opened with FI_AV_USER_ID: set_user_id, and the receive reports the id.
    let mut av_b = domain
        .open_av(AvAttr {
            flags: FI_AV_USER_ID,
            ..attr()
        })
        .expect("AV with user ids");
    let mut eb = nic_b.endpoint(ep_attr, Some(&av_b)).expect("endpoint");
    let mut a_in_b = [0];
    av_b.insert(&a_addr, 1, Some(&mut a_in_b), 0).unwrap();
    av_b.set_user_id(a_in_b[0], 0xabc, 0).unwrap();
    let mut b_in_a = [0];
    av_a.insert(&eb.address().to_bytes().unwrap(), 1, Some(&mut b_in_a), 0)
        .unwrap();
    let pool_a = uet_driver::DmaPool::new(&nic_a, 4096, 4).unwrap();
    let pool_b = uet_driver::DmaPool::new(&nic_b, 4096, 4).unwrap();
    eb.post_recv(pool_b.alloc().unwrap(), 1).unwrap();
    let mut buf = pool_a.alloc().unwrap();
    buf.fill(b"id").unwrap();
    ea.post_send(b_in_a[0], buf, 2, 0).unwrap();
    let next = |ep: &mut uet_driver::Endpoint| (0..64).find_map(|_| ep.poll().unwrap());
    let sent = next(&mut ea).expect("send completion");
    assert!(sent.error.is_none(), "{:?}", sent.error);
    let got = next(&mut eb).expect("receive completion");
    assert!(got.error.is_none(), "{:?}", got.error);
    assert_eq!(
        got.src_addr, 0xabc,
        "the source is the user id set in the domain's AV"
    );
}

/// A domain in FI_AV_AUTH_KEY mode: its AVs hold auth keys without asking, and an AV that
/// names another mode is refused before the NIC is asked for a table.
#[test]
fn an_auth_key_domain_gives_its_avs_auth_keys() {
    let fabric = Fabric::new();
    let (nic, function) = nic(&fabric, 0);
    let domain = nic
        .domain(DomainAttr {
            auth_key_size: uet_av::FI_AV_AUTH_KEY,
            ..DomainAttr::default()
        })
        .expect("domain");
    let mut av = domain.open_av(attr()).expect("AV");
    let handle = av
        .insert_auth_key(&uet_av::job_id_to_auth_key(0x33), 0)
        .expect("an auth key in the domain's AV");
    assert!(uet_av::is_auth_key_addr(handle), "{handle:#x}");
    let e = refused_open(
        &domain,
        &function,
        AvAttr {
            auth_key_size: 4,
            ..attr()
        },
    );
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    // A plain domain's AV holds no keys.
    let mut plain = nic
        .domain(DomainAttr::any())
        .unwrap()
        .open_av(attr())
        .unwrap();
    let e = plain
        .insert_auth_key(&uet_av::job_id_to_auth_key(0x33), 0)
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
}

/// fi_getinfo(3): a secondary capability an application asks for "must" be supported by the
/// provider, which otherwise fails "the fi_getinfo request (FI_ENODATA)". Every AV of an
/// FI_AV_AUTH_KEY domain holds auth keys and a named AV holds none, so such a domain can
/// open no shared AV: asking for FI_SHARED_AV with it is FI_ENODATA at fi_domain, as other
/// domains the NIC cannot give are, rather than a capability every named fi_av_open refuses.
#[test]
fn shared_avs_in_an_auth_key_domain_are_enodata() {
    let fabric = Fabric::new();
    let (nic, _function) = nic(&fabric, 0);
    let e = nic
        .domain(DomainAttr {
            caps: FI_SHARED_AV,
            auth_key_size: uet_av::FI_AV_AUTH_KEY,
            ..DomainAttr::default()
        })
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.errno, FiErrno::FI_ENODATA, "{e}");
    assert!(
        e.message.contains("FI_SHARED_AV") && e.message.contains("FI_AV_AUTH_KEY"),
        "{e}"
    );
    // Either alone is a domain the NIC gives.
    assert!(nic
        .domain(DomainAttr {
            caps: FI_SHARED_AV,
            ..DomainAttr::default()
        })
        .is_ok());
    assert!(nic
        .domain(DomainAttr {
            caps: FI_AV_USER_ID,
            auth_key_size: uet_av::FI_AV_AUTH_KEY,
            ..DomainAttr::default()
        })
        .is_ok());
}

/// fi_av(3): "If the domain has been configured with FI_AV_AUTH_KEY or the user requires
/// FI_AV_USER_ID support, using the FI_AV_USER_ID flag per fi_av_insert / fi_av_insertsvc /
/// fi_av_remove is not supported." The rule refuses the flag alike on every call it names,
/// in a domain of either kind: the insert forms and remove are all FI_EINVAL.
#[test]
fn per_call_user_ids_are_refused_alike_on_inserts_and_removes_in_both_kinds_of_domain() {
    let fabric = Fabric::new();
    let (nic, _function) = nic(&fabric, 0);
    for d in [
        DomainAttr {
            caps: FI_AV_USER_ID,
            ..DomainAttr::default()
        },
        DomainAttr {
            auth_key_size: uet_av::FI_AV_AUTH_KEY,
            ..DomainAttr::default()
        },
    ] {
        let domain = nic.domain(d).expect("domain");
        let mut av = domain.open_av(attr()).expect("AV");
        let mut fa = 7;
        let e = av
            .insertsvc("10.0.0.9", Some("1"), Some(&mut fa), FI_AV_USER_ID, None)
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{d:?}: {e}");
        let mut fas = [7; 2];
        let e = av
            .insertsym("10.0.0.9", 2, "1", 1, Some(&mut fas), FI_AV_USER_ID, None)
            .unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{d:?}: {e}");
        assert_eq!(av.len(), 0);
        let mut fa = 0;
        assert_eq!(
            av.insertsvc("10.0.0.9", Some("1"), Some(&mut fa), 0, None)
                .unwrap(),
            1
        );
        let e = av.remove(&[fa], FI_AV_USER_ID).unwrap_err();
        assert_eq!(e.errno, FiErrno::FI_EINVAL, "{d:?}: {e}");
        assert_eq!(av.len(), 1, "the refused remove removed nothing");
    }
}

/// A domain of FI_ADDR_STR addresses and peer groups: its AVs take strings and decode group
/// ids without asking; an AV that names another format or group limit is refused.
#[test]
fn an_av_takes_the_domains_address_format_and_peer_groups() {
    let fabric = Fabric::new();
    let (peer_nic, _f) = nic(&fabric, 1);
    let (nic, function) = nic(&fabric, 0);
    let max_group_id = nic.av_limits().max_group_id.min(0xFF);
    assert!(max_group_id > 0, "the simulated NIC has peer groups");
    let domain = nic
        .domain(DomainAttr {
            addr_format: uet_av::AddrFormat::Str,
            max_group_id,
            ..DomainAttr::default()
        })
        .expect("domain");
    let mut av = domain.open_av(attr()).expect("AV");
    assert_eq!(av.attr().addr_format, uet_av::AddrFormat::Str);
    assert_eq!(av.attr().max_group_id, max_group_id);
    let peer = peer_nic
        .endpoint(
            EndpointAttr {
                job_id: JOB,
                ..EndpointAttr::default()
            },
            None,
        )
        .expect("endpoint")
        .address()
        .to_string();
    let mut fi = [0];
    assert_eq!(av.insert_str(&[&peer], Some(&mut fi), 0, None).unwrap(), 1);
    let mut out = [0u8; 128];
    let mut len = out.len();
    av.lookup(
        uet_av::fi_group_addr(fi[0], max_group_id),
        &mut out,
        &mut len,
    )
    .expect("a group of the domain's range names the entry");
    assert_eq!(&out[..len - 1], peer.as_bytes());
    let e = refused_open(
        &domain,
        &function,
        AvAttr {
            max_group_id: max_group_id - 1,
            ..attr()
        },
    );
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
    let e = refused_open(
        &nic.domain(DomainAttr::any()).unwrap(),
        &function,
        AvAttr {
            addr_format: uet_av::AddrFormat::Str,
            ..attr()
        },
    );
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
}

/// The domain's auth key (a JobID) is its AVs' when they name none: the NIC entries carry it.
#[test]
fn the_domains_jobid_is_stamped_into_its_avs_entries() {
    let fabric = Fabric::new();
    let (peer_nic, _f) = nic(&fabric, 1);
    let (nic, function) = nic(&fabric, 0);
    let domain = nic
        .domain(DomainAttr {
            job_id: 0x77,
            ..DomainAttr::default()
        })
        .expect("domain");
    let mut av = domain
        .open_av(AvAttr {
            count: 4,
            ..AvAttr::default()
        })
        .expect("AV");
    assert_eq!(av.attr().job_id, 0x77);
    let peer = peer_nic
        .endpoint(EndpointAttr::default(), None)
        .expect("endpoint")
        .address()
        .to_bytes()
        .unwrap();
    assert_eq!(av.insert(&peer, 1, None, 0).unwrap(), 1);
    let mut on_nic = [uet_fwif::NicAvEntry::INVALID];
    av.nic().table().read_entries(0, &mut on_nic).unwrap();
    assert_eq!(on_nic[0].job_id.get(), 0x77, "AV_READ: {:?}", on_nic[0]);
    let e = refused_open(
        &domain,
        &function,
        AvAttr {
            job_id: 0x78,
            ..attr()
        },
    );
    assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
}

/// An endpoint binds an AV of its own NIC. A table handle is a number each NIC gives from 1,
/// so another NIC's AV would name whatever table this NIC holds under the same number: it
/// is refused (`FI_EINVAL`) before anything is asked of the NIC, and both AVs close after.
#[test]
fn an_endpoint_refuses_an_av_of_another_nic() {
    let fabric = Fabric::new();
    let (nic_a, function_a) = nic(&fabric, 0);
    let (nic_b, _function_b) = nic(&fabric, 1);
    let av_a = nic_a.open_av(attr()).expect("AV on A");
    let av_b = nic_b.open_av(attr()).expect("AV on B");
    assert_eq!(
        av_a.nic().table().handle(),
        av_b.nic().table().handle(),
        "each NIC numbers its tables alike, so a handle alone cannot tell them apart"
    );
    let ep_attr = EndpointAttr {
        job_id: JOB,
        ..EndpointAttr::default()
    };
    let before = function_a.counter(ADMIN_COMMANDS);
    let e = nic_a
        .endpoint(ep_attr, Some(&av_b))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{e}");
    assert!(e.to_string().contains("another NIC"), "{e}");
    let e = nic_a
        .scalable_endpoint(
            EndpointAttr {
                tx_ctx_cnt: 2,
                rx_ctx_cnt: 2,
                ..ep_attr
            },
            Some(&av_b),
        )
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{e}");
    assert_eq!(
        function_a.counter(ADMIN_COMMANDS),
        before,
        "a refused bind sends the NIC nothing"
    );
    av_a.close()
        .map_err(|e| e.error)
        .expect("A's AV has no endpoint");
    av_b.close()
        .map_err(|e| e.error)
        .expect("B's AV has no endpoint");
    // The AV of the endpoint's own NIC still binds.
    let av = nic_a.open_av(attr()).expect("AV on A");
    let ep = nic_a
        .endpoint(ep_attr, Some(&av))
        .expect("endpoint on A's AV");
    let e = av.close().map(|_| ()).unwrap_err();
    assert_eq!(e.error.errno, FiErrno::FI_EBUSY, "{}", e.error);
    drop(ep);
}

/// `fi_endpoint` in a domain: the AV it binds must be one of the domain's, and at most
/// `ep_cnt` endpoints of the domain are open at a time (a scalable endpoint is one). Each
/// refusal has its errno and asks nothing of the NIC; a refused or failed endpoint takes no
/// place among the `ep_cnt`.
#[test]
fn a_domains_endpoints_bind_only_its_avs_and_stay_within_ep_cnt() {
    let fabric = Fabric::new();
    let (nic, function) = nic(&fabric, 0);
    let domain = nic
        .domain(DomainAttr {
            ep_cnt: 2,
            max_ep_rx_ctx: 2,
            job_id: JOB,
            ..DomainAttr::default()
        })
        .expect("domain");
    let other = nic.domain(DomainAttr::default()).expect("another domain");
    let av = domain.open_av(AvAttr::default()).expect("AV of the domain");
    let av_of_other = other.open_av(attr()).expect("AV of the other domain");
    let av_of_nic = nic.open_av(attr()).expect("AV of no domain");
    let ep_attr = domain.endpoint_attr();
    assert_eq!(ep_attr.job_id, JOB, "the domain's JobID is its endpoints'");

    let before = function.counter(ADMIN_COMMANDS);
    for foreign in [&av_of_other, &av_of_nic] {
        let e = domain
            .endpoint(ep_attr, Some(foreign))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{e}");
        assert!(e.to_string().contains("not opened in this domain"), "{e}");
    }
    let e = domain
        .scalable_endpoint(
            EndpointAttr {
                rx_ctx_cnt: 3,
                ..ep_attr
            },
            Some(&av),
        )
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{e}");
    assert!(e.to_string().contains("max_ep_rx_ctx 2"), "{e}");
    assert_eq!(
        function.counter(ADMIN_COMMANDS),
        before,
        "refusals send nothing"
    );

    let first = domain.endpoint(ep_attr, Some(&av)).expect("first endpoint");
    assert_eq!(first.job_id(), JOB);
    // A failure on the way (a ring size the NIC cannot have) gives its place back.
    let bad = EndpointAttr {
        tx_log2: 60,
        ..ep_attr
    };
    assert!(domain.endpoint(bad, Some(&av)).is_err());
    let scalable = domain
        .scalable_endpoint(
            EndpointAttr {
                tx_ctx_cnt: 2,
                rx_ctx_cnt: 2,
                ..ep_attr
            },
            Some(&av),
        )
        .expect("a scalable endpoint is the second endpoint");
    assert_eq!(domain.open_objects(), (1, 2));
    let before = function.counter(ADMIN_COMMANDS);
    let e = domain.endpoint(ep_attr, None).map(|_| ()).unwrap_err();
    assert_eq!(e.errno(), FiErrno::FI_ENOSPC, "{e}");
    assert!(e.to_string().contains("ep_cnt 2"), "{e}");
    assert_eq!(
        function.counter(ADMIN_COMMANDS),
        before,
        "refused: sends nothing"
    );
    // The other domain and the NIC have endpoints of their own.
    let theirs = other
        .endpoint(EndpointAttr::default(), Some(&av_of_other))
        .expect("the other domain's endpoint");
    let nics = nic
        .endpoint(EndpointAttr::default(), Some(&av_of_nic))
        .expect("an endpoint of no domain");
    drop(scalable);
    assert_eq!(domain.open_objects(), (1, 1));
    let again = domain
        .endpoint(ep_attr, Some(&av))
        .expect("a place is free again");
    drop((first, again, theirs, nics));
    assert_eq!(domain.open_objects(), (1, 0));
    assert_eq!(other.open_objects(), (1, 0));
}

/// `fi_close` of a domain is `FI_EBUSY` while an AV or endpoint of it is open, the domain
/// given back; an AV whose table an endpoint still holds counts until the endpoint goes.
#[test]
fn a_domain_closes_only_when_its_avs_and_endpoints_are_gone() {
    let fabric = Fabric::new();
    let (nic, _function) = nic(&fabric, 0);
    let domain = nic
        .domain(DomainAttr {
            caps: FI_SHARED_AV,
            ..DomainAttr::default()
        })
        .expect("domain");
    let name = AvName::new(&format!("/uet-domain-close-{}", std::process::id())).unwrap();
    let shared = domain
        .open_named_av(AvAttr {
            name: Some(name),
            ..attr()
        })
        .expect("named AV");
    let av = domain.open_av(attr()).expect("AV");
    let ep = domain
        .endpoint(domain.endpoint_attr(), Some(&av))
        .expect("endpoint");
    assert_eq!(domain.open_objects(), (2, 1));
    let refused = |domain: Domain, avs: usize, endpoints: usize| {
        let e = domain.close().map(|_| ()).unwrap_err();
        assert_eq!(e.error.errno, FiErrno::FI_EBUSY, "{e}");
        assert!(
            e.to_string()
                .contains(&format!("{avs} AVs and {endpoints} endpoints")),
            "{e}"
        );
        *e.domain
    };
    let domain = refused(domain, 2, 1);
    // Dropped with its endpoint bound: the table stays, and counts, until the endpoint goes.
    drop(av);
    let domain = refused(domain, 2, 1);
    drop(ep);
    let domain = refused(domain, 1, 0);
    shared
        .close()
        .map_err(|e| e.error)
        .expect("close the named AV");
    assert_eq!(domain.open_objects(), (0, 0));
    domain.close().expect("nothing of the domain is open");
}

/// A DMA buffer or memory region is for the NIC its pool was made for. Each NIC has an IOVA
/// space of its own and numbers it alike, so another NIC's buffer names memory of this NIC
/// at the same IOVA: every post and registration refuses it (`FI_EINVAL`, the buffer given
/// back), and a message then lands in the buffer of the receiver's own pool, not in memory
/// the receive did not name.
#[test]
fn a_buffer_or_memory_of_another_nic_is_refused() {
    use uet_driver::{DmaBuffer, DriverError, MrAccess, MrMemory};
    use uet_tests::{fabric, Node};
    let (_fabric, functions) = fabric(3);
    let mut a = Node::new(functions[0].clone(), JOB, 8);
    let b = Node::new(functions[1].clone(), JOB, 8);
    let mut c = Node::new(functions[2].clone(), JOB, 8);
    let theirs = || {
        let mut buf = b.pool.alloc().expect("B's buffer");
        buf.fill(&[0x5A; 64]).unwrap();
        buf
    };
    let refused = |r: Result<(), (DriverError, DmaBuffer)>, what: &str| {
        let (e, back) = r.unwrap_err();
        assert_eq!(e.errno(), FiErrno::FI_EINVAL, "{what}: {e}");
        assert!(e.to_string().contains("another NIC"), "{what}: {e}");
        assert_eq!(back.to_vec().unwrap(), vec![0x5A; 64], "{what}: given back");
    };
    let dest = a.insert(&c.addr());
    refused(a.ep.post_recv(theirs(), 1), "fi_recv");
    refused(a.ep.post_trecv(theirs(), 7, 0, 1), "fi_trecv");
    refused(
        a.ep.post_recv_multi(theirs(), None, 1),
        "fi_recv FI_MULTI_RECV",
    );
    refused(a.ep.post_send(dest, theirs(), 1, 0), "fi_send");
    refused(a.ep.post_tsend(dest, theirs(), 7, 1, 0), "fi_tsend");
    refused(a.ep.post_write(dest, theirs(), 0, 9, 1), "fi_write");
    refused(a.ep.post_read(dest, theirs(), 64, 0, 9, 1), "fi_read");
    for (memory, what) in [
        (MrMemory::from(theirs()), "a buffer"),
        (MrMemory::Pool(b.pool.clone(), 0..4096), "a pool range"),
    ] {
        let e =
            a.ep.register_mr(memory, MrAccess::REMOTE_READ_WRITE, 0x99)
                .map(|_| ())
                .unwrap_err();
        assert_eq!(e.errno(), FiErrno::FI_EINVAL, "fi_mr_reg of {what}: {e}");
        assert!(
            e.memory.is_some(),
            "fi_mr_reg of {what} hands the memory back"
        );
    }
    assert_eq!(a.ep.in_flight(), (0, 0), "nothing was posted");
    // A's own buffer takes the message.
    a.post_recvs(1);
    let to_a = c.insert(&a.addr());
    c.send(to_a, &[0xC3; 48], 5);
    let got = (0..1000)
        .find_map(|_| a.next_completion())
        .expect("A's receive completes");
    assert_eq!(
        got.buffer.expect("buffer").to_vec().unwrap(),
        vec![0xC3; 48],
        "the message is in A's own buffer"
    );
}

#[test]
fn a_device_already_open_is_refused_and_its_nic_goes_on() {
    // A second Nic::open of the device a Nic of this process runs (an application opening
    // "another domain" on its device) must be refused before it touches the device: its
    // function reset would take every endpoint and AV table from the first Nic.
    let fabric = Fabric::new();
    let fa = fabric.add_nic(NicConfig::new(nic_addr(0))).unwrap();
    let fb = fabric.add_nic(NicConfig::new(nic_addr(1))).unwrap();
    let device: Arc<dyn uet_driver::Device> = Arc::new(SimDevice::new(fa.clone()));
    let mut a = uet_tests::Node::on_device(device.clone(), fa.clone(), JOB, JOB, 4);
    let mut b = uet_tests::Node::new(fb, JOB, 4);
    let to_a = b.insert(&a.addr());
    a.insert(&b.addr());
    let before = fa.counter(ADMIN_COMMANDS);
    let e = Nic::open(device.clone())
        .err()
        .expect("a second open is refused");
    assert_eq!(e.errno(), FiErrno::FI_EBUSY, "{e}");
    // Another device object on the same function (a second handle on the simulated
    // function, as two opens of one PCI function would be) is the same device.
    let same_function: Arc<dyn uet_driver::Device> = Arc::new(SimDevice::new(fa.clone()));
    let e = Nic::open(same_function.clone())
        .err()
        .expect("an open of another object driving the same function is refused");
    assert_eq!(e.errno(), FiErrno::FI_EBUSY, "{e}");
    assert_eq!(
        fa.counter(ADMIN_COMMANDS),
        before,
        "nothing reached the NIC"
    );
    // The first Nic's endpoint still receives.
    a.post_recvs(1);
    b.send(to_a, b"still here", 1);
    let sent = b.next_completion().expect("send completes");
    assert!(sent.error.is_none(), "{:?}", sent.error);
    let got = a.next_completion().expect("message arrives");
    assert_eq!(got.buffer.unwrap().to_vec().unwrap(), b"still here");
    // Once the first Nic is gone the device opens again, through either object, one at a
    // time.
    drop(a);
    let again = Nic::open(same_function).expect("the function is free again");
    assert_eq!(
        Nic::open(device.clone()).err().map(|e| e.errno()),
        Some(FiErrno::FI_EBUSY)
    );
    drop(again);
    assert!(Nic::open(device).is_ok());
}

/// A scalable endpoint of the domain whose own ring set was dropped while a context of it
/// lives stays on the NIC until the context goes, and counts in its domain until then: the
/// domain does not close under it.
#[test]
fn an_endpoint_left_on_the_nic_for_its_contexts_keeps_its_domain_open() {
    let fabric = Fabric::new();
    let (nic, _function) = nic(&fabric, 0);
    let domain = nic.domain(DomainAttr::default()).expect("domain");
    let av = domain.open_av(attr()).expect("AV");
    let mut scalable = domain
        .scalable_endpoint(
            EndpointAttr {
                tx_ctx_cnt: 2,
                rx_ctx_cnt: 2,
                ..domain.endpoint_attr()
            },
            Some(&av),
        )
        .expect("scalable endpoint");
    let stand_in = nic
        .endpoint(EndpointAttr::default(), Some(&av))
        .expect("an endpoint of no domain");
    let own = std::mem::replace(&mut scalable.contexts_mut()[0], stand_in);
    drop(own);
    assert_eq!(
        domain.open_objects().1,
        1,
        "the endpoint is still on the NIC for its context"
    );
    drop(scalable);
    assert_eq!(domain.open_objects().1, 0);
    drop(av);
    domain.close().expect("nothing of the domain is left");
}

/// A pool of a Nic is mapped for its device until the pool goes, however long it outlives the
/// Nic. The IOVAs of a Nic opened on the device after it are numbered alike: while such a pool
/// lives, its mapping stands where the new Nic puts its own memory, and dropping the pool
/// would unmap the new Nic's. The device is refused (`FI_EBUSY`) until the pool is gone.
#[test]
fn a_device_whose_memory_outlives_its_nic_opens_again_only_once_it_is_gone() {
    use uet_driver::DmaPool;
    let fabric = Fabric::new();
    let function = fabric
        .add_nic(NicConfig::new(nic_addr(0)))
        .expect("add NIC");
    let device: Arc<dyn uet_driver::Device> = Arc::new(SimDevice::new(function.clone()));
    let first = Nic::open(device.clone()).expect("open");
    let old = DmaPool::new(&first, 4096, 8).expect("pool of the first Nic");
    drop(first);
    let e = Nic::open(device.clone())
        .err()
        .expect("refused while the first Nic's pool is mapped");
    assert_eq!(e.errno(), FiErrno::FI_EBUSY, "{e}");
    drop(old);
    let second = Nic::open(device).expect("opens once the pool is gone");
    let pool = DmaPool::new(&second, 4096, 8).expect("pool of the second Nic");
    let av = second.open_av(attr()).expect("AV");
    let ep = second
        .endpoint(
            EndpointAttr {
                job_id: JOB,
                ..EndpointAttr::default()
            },
            Some(&av),
        )
        .expect("endpoint");
    drop((ep, av, pool));
}

/// The endpoint attributes a domain gives (`fi_getinfo`'s) open an endpoint on any NIC: on one
/// with smaller rings and fewer resource indices than the defaults they stay within its
/// limits, and a message goes through the endpoint they opened.
#[test]
fn a_domains_endpoint_attributes_stay_within_a_small_nics_limits() {
    let fabric = Fabric::new();
    let small = fabric
        .add_nic(NicConfig {
            max_queue_entries: 32,
            ri_per_endpoint: 2,
            ..NicConfig::new(nic_addr(0))
        })
        .expect("add NIC");
    let small_nic = Nic::open(Arc::new(SimDevice::new(small))).expect("open NIC");
    let domain = small_nic
        .domain(DomainAttr {
            job_id: JOB,
            ..DomainAttr::default()
        })
        .expect("domain");
    let ep_attr = domain.endpoint_attr();
    assert!(ep_attr.cq_log2 <= 5 && ep_attr.tx_log2 <= 5 && ep_attr.ri_count <= 2);
    let av = domain.open_av(attr()).expect("AV");
    let mut ep = domain
        .endpoint(ep_attr, Some(&av))
        .expect("the domain's own attributes open an endpoint");

    let mut peer = uet_tests::Node::new(
        fabric.add_nic(NicConfig::new(nic_addr(1))).unwrap(),
        JOB,
        16,
    );
    let to_ep = peer.insert(&ep.address().to_bytes().unwrap());
    let pool = uet_driver::DmaPool::new(&small_nic, 256, 2).unwrap();
    ep.post_recv(pool.alloc().unwrap(), 1).unwrap();
    peer.send(to_ep, b"small", 2);
    let got = (0..100)
        .find_map(|_| ep.poll().unwrap())
        .expect("the message arrives");
    assert_eq!(got.buffer.unwrap().to_vec().unwrap(), b"small");
}
