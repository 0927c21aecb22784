//! The provider's C entry points called directly, as libfabric calls them, through the
//! function pointers `fi_prov_ini` hands out: what the C program of `libfabric.rs` cannot
//! easily set up (hints, AV types and flags, user ids).

use core::ffi::{c_int, CStr};
use core::ptr::{null, null_mut};
use uet_av::{AvType, FiErrno, FI_ADDR_NOTAVAIL, FI_AV_USER_ID};
use uet_fi::abi::*;

/// A zeroed `T` (every structure of `abi` that holds no function pointer is valid so).
fn zeroed<T>() -> Box<T> {
    // SAFETY: only used for the plain-data structures of `abi` (integers and raw pointers).
    Box::new(unsafe { core::mem::zeroed() })
}

/// Hints with every attribute present and zeroed, as `fi_allocinfo` gives them.
struct Hints {
    info: Box<FiInfo>,
    _tx: Box<FiTxAttr>,
    _rx: Box<FiRxAttr>,
    _ep: Box<FiEpAttr>,
    _domain: Box<FiDomainAttr>,
    _fabric: Box<FiFabricAttr>,
}

impl Hints {
    fn new(caps: u64, addr_format: u32) -> Hints {
        let mut info = zeroed::<FiInfo>();
        let mut tx = zeroed::<FiTxAttr>();
        let mut rx = zeroed::<FiRxAttr>();
        let mut ep = zeroed::<FiEpAttr>();
        let mut domain = zeroed::<FiDomainAttr>();
        let mut fabric = zeroed::<FiFabricAttr>();
        info.caps = caps;
        info.addr_format = addr_format;
        info.tx_attr = &mut *tx;
        info.rx_attr = &mut *rx;
        info.ep_attr = &mut *ep;
        info.domain_attr = &mut *domain;
        info.fabric_attr = &mut *fabric;
        Hints {
            info,
            _tx: tx,
            _rx: rx,
            _ep: ep,
            _domain: domain,
            _fabric: fabric,
        }
    }
}

fn provider() -> &'static FiProvider {
    // SAFETY: fi_prov_ini returns a structure that lives for the process.
    unsafe { &*uet_fi::fi_prov_ini() }
}

/// `fi_getinfo` of the provider; the answer or the negative errno.
fn getinfo(
    node: Option<&CStr>,
    service: Option<&CStr>,
    flags: u64,
    hints: Option<&Hints>,
) -> Result<*mut FiInfo, c_int> {
    let mut info = null_mut();
    // SAFETY: the arguments are what libfabric's contract asks for.
    let ret = unsafe {
        (provider().getinfo)(
            fi_version(1, 17),
            node.map_or(null(), |n| n.as_ptr()),
            service.map_or(null(), |s| s.as_ptr()),
            flags,
            hints.map_or(null(), |h| &*h.info as *const FiInfo),
            &mut info,
        )
    };
    if ret == 0 {
        Ok(info)
    } else {
        assert!(info.is_null());
        Err(ret)
    }
}

/// A fabric, a domain and what they were opened with.
struct Open {
    info: *mut FiInfo,
    fabric: *mut FidFabric,
    domain: *mut FidDomain,
}

impl Open {
    fn new(caps: u64, addr_format: u32) -> Open {
        Open::with_hints(&Hints::new(caps, addr_format))
    }

    fn with_hints(hints: &Hints) -> Open {
        let info = getinfo(None, None, 0, Some(hints)).expect("getinfo");
        let mut fabric = null_mut();
        let mut domain = null_mut();
        // SAFETY: an info the provider gave; out pointers valid.
        unsafe {
            assert_eq!(
                (provider().fabric)((*info).fabric_attr, &mut fabric, null_mut()),
                0
            );
            assert_eq!(
                ((*(*fabric).ops).domain)(fabric, info, &mut domain, null_mut()),
                0
            );
        }
        Open {
            info,
            fabric,
            domain,
        }
    }

    fn av_open(&self, attr: &mut FiAvAttr) -> Result<*mut FidAv, c_int> {
        let mut av = null_mut();
        // SAFETY: an open domain; valid attributes and out pointer.
        let ret =
            unsafe { ((*(*self.domain).ops).av_open)(self.domain, attr, &mut av, null_mut()) };
        if ret == 0 {
            Ok(av)
        } else {
            Err(ret)
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        // SAFETY: ours, open, closed once.
        let closed = unsafe {
            let closed = [
                close(&mut (*self.domain).fid),
                close(&mut (*self.fabric).fid),
            ];
            uet_fi::info::free_info(self.info);
            closed
        };
        if !std::thread::panicking() {
            assert_eq!(closed, [0, 0], "fi_close of the domain and the fabric");
        }
    }
}

/// `fi_close`.
///
/// # Safety
/// `fid` is an open object of the provider.
unsafe fn close(fid: *mut Fid) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { ((*(*fid).ops).close)(fid) }
}

/// `fi_av_attr` of an `FI_AV_TABLE` of `count` entries.
fn av_attr(count: usize) -> FiAvAttr {
    FiAvAttr {
        av_type: AvType::Table.to_raw(),
        rx_ctx_bits: 0,
        count,
        ep_per_node: 0,
        name: null(),
        map_addr: null_mut(),
        flags: 0,
    }
}

/// The 32-byte address `node`/`service` name, as `fi_av_lookup` gives it back.
fn address_of(av: *mut FidAv, node: &CStr, service: &CStr) -> [u8; 32] {
    // SAFETY: an open AV; valid strings and out pointers.
    unsafe {
        let ops = &*(*av).ops;
        let mut fi_addr = 0;
        assert_eq!(
            (ops.insertsvc)(
                av,
                node.as_ptr(),
                service.as_ptr(),
                &mut fi_addr,
                0,
                null_mut()
            ),
            1
        );
        let mut addr = [0u8; 32];
        let mut len = addr.len();
        assert_eq!(
            (ops.lookup)(av, fi_addr, addr.as_mut_ptr().cast(), &mut len),
            0
        );
        assert_eq!((ops.remove)(av, &mut fi_addr, 1, 0), 0);
        addr
    }
}

#[test]
fn an_insert_with_user_ids_succeeds_in_a_domain_that_asked_for_fi_av_user_id() {
    let open = Open::new(FI_AV_USER_ID, FI_FORMAT_UNSPEC);
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let addr = address_of(av, c"10.0.0.2", c"7");
    let mut fi_addr = [0x1234u64];
    // SAFETY: an open AV; one address and one fi_addr_t.
    let ret = unsafe {
        ((*(*av).ops).insert)(
            av,
            addr.as_ptr().cast(),
            1,
            fi_addr.as_mut_ptr(),
            FI_AV_USER_ID,
            null_mut(),
        )
    };
    assert_eq!(
        ret, 1,
        "libfabric 1.17 gives user ids with FI_AV_USER_ID on insert"
    );
    assert_ne!(fi_addr[0], FI_ADDR_NOTAVAIL);
    // SAFETY: ours, closed once.
    assert_eq!(unsafe { close(&mut (*av).fid) }, 0);
    // The fi_av_open flag of later versions pairs with fi_av_set_user_id, which the 1.17 ABI
    // does not have: such an AV could never be given a user id.
    let mut attr = av_attr(16);
    attr.flags = FI_AV_USER_ID;
    assert_eq!(
        open.av_open(&mut attr).err(),
        Some(-(FiErrno::FI_EBADFLAGS.get() as c_int))
    );
}

#[test]
fn an_application_that_asked_for_fi_av_map_opens_an_fi_av_map_av() {
    let hints = Hints::new(0, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.domain_attr).av_type = AvType::Map.to_raw() };
    let open = Open::with_hints(&hints);
    let mut attr = av_attr(16);
    attr.av_type = AvType::Map.to_raw();
    let av = open
        .av_open(&mut attr)
        .expect("fi_av_open(FI_AV_MAP) after fi_getinfo accepted FI_AV_MAP");
    let addr = address_of(av, c"10.0.0.2", c"7");
    assert_ne!(addr, [0; 32]);
    // SAFETY: ours, closed once.
    assert_eq!(unsafe { close(&mut (*av).fid) }, 0);
}

#[test]
fn hints_name_the_provider_in_any_case_as_libfabric_matches_provider_names() {
    let hints = Hints::new(0, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes; the string outlives the call.
    unsafe { (*hints.info.fabric_attr).prov_name = c"UET".as_ptr().cast_mut() };
    let info = getinfo(None, None, 0, Some(&hints)).expect("fi_getinfo with prov_name UET");
    // SAFETY: the provider's answer, freed once.
    unsafe { uet_fi::info::free_info(info) };
}
