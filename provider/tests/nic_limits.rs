//! The provider on a NIC whose limits are not the reference model's: a simulated NIC served
//! over vfio-user from a thread of the test's own process ([`common::ServedNic`]), which the
//! provider opens as `FI_UET_DEVICE` names it.

use core::ffi::c_int;
use core::ptr::{null, null_mut};
#[allow(dead_code)] // Not every helper is used here.
mod common;

use uet_av::FiErrno;
use uet_fi::abi::*;

fn provider() -> &'static FiProvider {
    // SAFETY: fi_prov_ini returns a structure that lives for the process.
    unsafe { &*uet_fi::fi_prov_ini() }
}

/// `fi_getinfo` of the provider for `FI_EP_RDM` with `max_ep_rx_ctx` asked of the domain
/// (0: any): the answer or the negative errno.
fn getinfo(max_ep_rx_ctx: usize) -> Result<*mut FiInfo, c_int> {
    // SAFETY: plain-data structures of `abi`, valid all zero.
    let (mut hints, mut ep, mut domain) = unsafe {
        (
            Box::new(core::mem::zeroed::<FiInfo>()),
            Box::new(core::mem::zeroed::<FiEpAttr>()),
            Box::new(core::mem::zeroed::<FiDomainAttr>()),
        )
    };
    ep.ep_type = FI_EP_RDM;
    domain.max_ep_rx_ctx = max_ep_rx_ctx;
    hints.caps = FI_MSG | FI_NAMED_RX_CTX;
    hints.ep_attr = &mut *ep;
    hints.domain_attr = &mut *domain;
    let mut info = null_mut();
    // SAFETY: the arguments are what libfabric's contract asks for.
    let ret =
        unsafe { (provider().getinfo)(fi_version(1, 17), null(), null(), 0, &*hints, &mut info) };
    if ret == 0 {
        Ok(info)
    } else {
        Err(ret)
    }
}

/// A receive context is a resource index of its endpoint: on a NIC whose endpoints have
/// fewer resource indices than receive contexts (`CAP_RESOURCE_INDEX.max_per_endpoint`
/// below `CAP_EP.max_rx_ctx`), the answer's `max_ep_rx_ctx` is what a scalable endpoint can
/// have, and a scalable endpoint of that many opens; hints asking more are refused.
#[test]
fn the_answer_offers_no_more_receive_contexts_than_an_endpoint_has_resource_indices() {
    const NAME: &str =
        "the_answer_offers_no_more_receive_contexts_than_an_endpoint_has_resource_indices";
    if !common::in_own_process(NAME) {
        return;
    }
    let _nic = common::ServedNic::serve_with("uet-provider-ri-per-endpoint", |cfg| {
        assert!(cfg.max_rx_ctx > 8);
        cfg.ri_per_endpoint = 8;
    });
    let info = getinfo(0).expect("fi_getinfo");
    // SAFETY: the provider's answer, used to open a fabric, domain and scalable endpoint,
    // each closed once, then freed once.
    unsafe {
        let max = (*(*info).domain_attr).max_ep_rx_ctx;
        assert_eq!(max, 8, "domain_attr->max_ep_rx_ctx");
        (*(*info).ep_attr).rx_ctx_cnt = max;
        let mut fabric = null_mut();
        assert_eq!(
            (provider().fabric)((*info).fabric_attr, &mut fabric, null_mut()),
            0
        );
        let mut domain: *mut FidDomain = null_mut();
        assert_eq!(
            ((*(*fabric).ops).domain)(fabric, info, &mut domain, null_mut()),
            0
        );
        let mut sep: *mut FidEp = null_mut();
        assert_eq!(
            ((*(*domain).ops).scalable_ep)(domain, info.cast(), (&raw mut sep).cast(), null_mut()),
            0,
            "fi_scalable_ep of {max} receive contexts"
        );
        for fid in [&mut (*sep).fid, &mut (*domain).fid, &mut (*fabric).fid] {
            assert_eq!(((*fid.ops).close)(fid), 0);
        }
        uet_fi::info::free_info(info);
    }
    assert_eq!(
        getinfo(9).err(),
        Some(-(FiErrno::FI_ENODATA.get() as c_int)),
        "hints asking more receive contexts per endpoint than an endpoint has"
    );
}

/// Receive context i of a scalable endpoint is named by the top `rx_ctx_bits` of an
/// `fi_addr_t`, which the NIC's AVs decode up to `CAP_AV.max_rx_ctx_bits`: on a NIC that
/// decodes 2 bits, the answer offers 4 receive contexts per endpoint, and hints asking 5 are
/// refused, as an endpoint of 5 could not be reached at its fifth.
#[test]
fn the_answer_offers_no_more_receive_contexts_than_an_av_can_name() {
    const NAME: &str = "the_answer_offers_no_more_receive_contexts_than_an_av_can_name";
    if !common::in_own_process(NAME) {
        return;
    }
    let _nic = common::ServedNic::serve_with("uet-provider-rx-ctx-bits", |cfg| {
        assert!(cfg.max_rx_ctx > 4 && cfg.ri_per_endpoint > 4);
        cfg.max_rx_ctx_bits = 2;
    });
    let info = getinfo(0).expect("fi_getinfo");
    // SAFETY: the provider's answer, read, then freed once.
    let max = unsafe {
        let max = (*(*info).domain_attr).max_ep_rx_ctx;
        uet_fi::info::free_info(info);
        max
    };
    assert_eq!(max, 4, "domain_attr->max_ep_rx_ctx");
    assert!(getinfo(4).is_ok());
    assert_eq!(
        getinfo(5).err(),
        Some(-(FiErrno::FI_ENODATA.get() as c_int)),
        "hints asking more receive contexts per endpoint than an AV can name"
    );
}
