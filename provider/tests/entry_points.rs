//! The provider's C entry points called directly, as libfabric calls them, through the
//! function pointers `fi_prov_ini` hands out: what the C program of `libfabric.rs` cannot
//! easily set up (hints, AV types and flags, user ids).

use core::ffi::{c_int, CStr};
mod common;

use common::fd_readable;
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
        Open::with_hints_at(hints, FI_PROVIDER_API)
    }

    /// [`Open::with_hints`], the fabric opened with API `version`
    /// (`fabric_attr->api_version`).
    fn with_hints_at(hints: &Hints, version: u32) -> Open {
        let info = getinfo(None, None, 0, Some(hints)).expect("getinfo");
        let mut fabric = null_mut();
        let mut domain = null_mut();
        // SAFETY: an info the provider gave; out pointers valid.
        unsafe {
            (*(*info).fabric_attr).api_version = version;
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

impl Open {
    /// A CQ of the domain in `format`, waited on as `wait_obj` says.
    fn cq_open(&self, format: c_int, wait_obj: c_int) -> *mut FidCq {
        let mut cq = null_mut();
        let mut attr = FiCqAttr {
            size: 0,
            flags: 0,
            format,
            wait_obj,
            signaling_vector: 0,
            wait_cond: 0,
            wait_set: null_mut(),
        };
        // SAFETY: an open domain; valid attributes and out pointer.
        let ret =
            unsafe { ((*(*self.domain).ops).cq_open)(self.domain, &mut attr, &mut cq, null_mut()) };
        assert_eq!(ret, 0, "fi_cq_open");
        cq
    }

    /// A counter of the domain counting completions, waited on as `wait_obj` says: the
    /// counter or `fi_cntr_open`'s return.
    fn cntr_open(&self, wait_obj: c_int) -> Result<*mut FidCntr, c_int> {
        let mut attr = FiCntrAttr {
            events: FI_CNTR_EVENTS_COMP,
            wait_obj,
            wait_set: null_mut(),
            flags: 0,
        };
        self.cntr_open_with(&mut attr)
    }

    /// `fi_cntr_open` with `attr`.
    fn cntr_open_with(&self, attr: *mut FiCntrAttr) -> Result<*mut FidCntr, c_int> {
        let mut cntr: *mut FidCntr = null_mut();
        // SAFETY: an open domain; NULL or valid attributes, a valid out pointer.
        let ret = unsafe {
            ((*(*self.domain).ops).cntr_open)(
                self.domain,
                attr.cast(),
                (&raw mut cntr).cast(),
                null_mut(),
            )
        };
        if ret == 0 {
            Ok(cntr)
        } else {
            assert!(cntr.is_null());
            Err(ret)
        }
    }

    /// An endpoint of the domain opened with `self.info`, not yet bound.
    fn endpoint(&self) -> *mut FidEp {
        let mut ep: *mut FidEp = null_mut();
        // SAFETY: an open domain and its provider's info; valid out pointer.
        let ret = unsafe {
            ((*(*self.domain).ops).endpoint)(
                self.domain,
                self.info.cast(),
                (&raw mut ep).cast(),
                null_mut(),
            )
        };
        assert_eq!(ret, 0, "fi_endpoint");
        ep
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
fn fi_av_open_of_fi_av_unspec_returns_the_type_it_chose_and_a_refused_open_leaves_it() {
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    let mut attr = av_attr(16);
    attr.av_type = AvType::Unspec.to_raw();
    attr.flags = 1 << 30;
    assert_eq!(
        open.av_open(&mut attr).err(),
        Some(-(FiErrno::FI_EBADFLAGS.get() as c_int))
    );
    assert_eq!(
        attr.av_type,
        AvType::Unspec.to_raw(),
        "a refused open changes nothing"
    );
    attr.flags = 0;
    let av = open.av_open(&mut attr).expect("fi_av_open(FI_AV_UNSPEC)");
    assert_eq!(attr.av_type, AvType::Table.to_raw());
    // SAFETY: ours, closed once.
    assert_eq!(unsafe { close(&mut (*av).fid) }, 0);
    // A type the application named comes back as it gave it.
    let mut attr = av_attr(16);
    attr.av_type = AvType::Map.to_raw();
    let av = open.av_open(&mut attr).expect("fi_av_open(FI_AV_MAP)");
    assert_eq!(attr.av_type, AvType::Map.to_raw());
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

/// An enabled endpoint, its CQ and its address in the shared AV.
struct Peer {
    ep: *mut FidEp,
    cq: *mut FidCq,
    addr: FiAddr,
}

/// Two endpoints of one domain, each with its own CQ (`FI_CQ_FORMAT_DATA`, waitable) bound
/// for both directions with `cq_flags`, and each the other's peer in one AV.
struct Pair {
    p: [Peer; 2],
    av: *mut FidAv,
    /// Counters of the domain ([`Pair::with_counters`]), closed after the endpoints.
    cntrs: Vec<*mut FidCntr>,
    /// The domain and fabric, closed after the endpoints, CQs and AV.
    _open: Open,
}

impl Pair {
    fn new(cq_flags: u64) -> Pair {
        Pair::with_info(cq_flags, |_| {})
    }

    /// An endpoint of the pair's domain opened with `caps` in place of the info's, bound to
    /// the pair's AV, not enabled.
    fn endpoint_with_caps(&self, caps: u64) -> *mut FidEp {
        let info = self._open.info;
        // SAFETY: the provider's info, its caps restored at once; an open AV and endpoint.
        unsafe {
            let saved = (*info).caps;
            (*info).caps = caps;
            let ep = self._open.endpoint();
            (*info).caps = saved;
            assert_eq!(bind(&mut (*ep).fid, &mut (*self.av).fid, 0), 0);
            ep
        }
    }

    /// Insert the address of an endpoint no NIC holds ([`nobody`]) into the pair's AV: a
    /// destination every transfer to fails.
    fn nobody(&self) -> FiAddr {
        let addr = nobody(self.av);
        let mut fake = 0;
        // SAFETY: an open AV; one address, one fi_addr_t.
        let inserted = unsafe {
            ((*(*self.av).ops).insert)(self.av, addr.as_ptr().cast(), 1, &mut fake, 0, null_mut())
        };
        assert_eq!(inserted, 1);
        fake
    }

    /// Inject four bytes from endpoint 0 to `to`, which accepts the call.
    fn inject_lost(&self, to: FiAddr) {
        // SAFETY: an open endpoint; the message is copied at the call.
        let ret = unsafe { (self.msg(0).inject)(self.p[0].ep, b"lost".as_ptr().cast(), 4, to) };
        assert_eq!(ret, 0);
    }

    /// [`Pair::new`], the endpoints opened with the provider's `fi_info` as `edit` leaves it.
    fn with_info(cq_flags: u64, edit: impl Fn(&mut FiInfo)) -> Pair {
        Pair::with(cq_flags, FI_WAIT_UNSPEC, edit)
    }

    /// [`Pair::new`] with CQs of wait object `wait_obj`.
    fn with_wait_obj(wait_obj: c_int) -> Pair {
        Pair::with(0, wait_obj, |_| {})
    }

    fn with(cq_flags: u64, wait_obj: c_int, edit: impl Fn(&mut FiInfo)) -> Pair {
        Pair::with_counters(cq_flags, wait_obj, edit, 0, [&[], &[]])
    }

    /// [`Pair::with`], and `count` counters of the domain (waited on as the CQs), bound before
    /// each peer `i` is enabled as `binds[i]` lists them: (counter, `fi_ep_bind` flags).
    fn with_counters(
        cq_flags: u64,
        wait_obj: c_int,
        edit: impl Fn(&mut FiInfo),
        count: usize,
        binds: [&[(usize, u64)]; 2],
    ) -> Pair {
        let open = Open::new(FI_MSG | FI_TAGGED | FI_SOURCE_CAP, FI_FORMAT_UNSPEC);
        Pair::on(open, cq_flags, wait_obj, edit, count, binds)
    }

    /// [`Pair::new`] in a fabric opened with API `version`.
    fn at_api(version: u32) -> Pair {
        let hints = Hints::new(FI_MSG | FI_TAGGED | FI_SOURCE_CAP, FI_FORMAT_UNSPEC);
        let open = Open::with_hints_at(&hints, version);
        Pair::on(open, 0, FI_WAIT_UNSPEC, |_| {}, 0, [&[], &[]])
    }

    /// [`Pair::with_counters`] in the fabric and domain of `open`.
    fn on(
        open: Open,
        cq_flags: u64,
        wait_obj: c_int,
        edit: impl Fn(&mut FiInfo),
        count: usize,
        binds: [&[(usize, u64)]; 2],
    ) -> Pair {
        let cntrs: Vec<_> = (0..count)
            .map(|_| open.cntr_open(wait_obj).expect("fi_cntr_open"))
            .collect();
        let mut attr = av_attr(16);
        let av = open.av_open(&mut attr).unwrap();
        // SAFETY: the provider's own info, restored after the endpoints are opened.
        let (tx_flags, rx_flags) = unsafe {
            (
                (*(*open.info).tx_attr).op_flags,
                (*(*open.info).rx_attr).op_flags,
            )
        };
        // SAFETY: the provider's own info.
        edit(unsafe { &mut *open.info });
        let p = [0, 1].map(|i| {
            let cq = open.cq_open(FI_CQ_FORMAT_DATA, wait_obj);
            let ep = open.endpoint();
            // SAFETY: an open AV, CQ and endpoint.
            unsafe {
                let fops = &*(*ep).fid.ops;
                assert_eq!((fops.bind)(&mut (*ep).fid, &mut (*av).fid, 0), 0);
                assert_eq!(
                    (fops.bind)(
                        &mut (*ep).fid,
                        &mut (*cq).fid,
                        FI_TRANSMIT | FI_RECV | cq_flags
                    ),
                    0
                );
                for &(c, flags) in binds[i] {
                    let cntr = cntrs[c];
                    assert_eq!((fops.bind)(&mut (*ep).fid, &mut (*cntr).fid, flags), 0);
                }
                assert_eq!((fops.control)(&mut (*ep).fid, FI_ENABLE, null_mut()), 0);
                let addr = insert_name_of(av, ep);
                Peer { ep, cq, addr }
            }
        });
        // SAFETY: as above.
        unsafe {
            (*(*open.info).tx_attr).op_flags = tx_flags;
            (*(*open.info).rx_attr).op_flags = rx_flags;
        }
        Pair {
            p,
            av,
            cntrs,
            _open: open,
        }
    }

    /// `fi_recv` on peer `i` into `buf`, from any source, with `context`: its return.
    ///
    /// # Safety
    /// `buf` outlives the receive's completion.
    unsafe fn post_recv(&self, i: usize, buf: &mut [u8], context: usize) -> isize {
        // SAFETY: an open endpoint; the caller keeps `buf` for the NIC.
        unsafe {
            (self.msg(i).recv)(
                self.p[i].ep,
                buf.as_mut_ptr().cast(),
                buf.len(),
                null_mut(),
                u64::MAX, // FI_ADDR_UNSPEC
                context as _,
            )
        }
    }

    /// `fi_send` of `msg` from peer `i` to the other peer, with `context`: its return (the
    /// message is copied at the call).
    fn send(&self, i: usize, msg: &[u8], context: usize) -> isize {
        // SAFETY: an open endpoint; `msg` is read during the call.
        unsafe {
            (self.msg(i).send)(
                self.p[i].ep,
                msg.as_ptr().cast(),
                msg.len(),
                null_mut(),
                self.p[1 - i].addr,
                context as _,
            )
        }
    }

    fn msg(&self, i: usize) -> &FiOpsMsg {
        // SAFETY: an open endpoint's operations.
        unsafe { &*(*self.p[i].ep).msg }
    }

    fn cq(&self, i: usize) -> &FiOpsCq {
        // SAFETY: an open CQ's operations.
        unsafe { &*(*self.p[i].cq).ops }
    }

    /// `fi_cq_read` of one entry from peer `i`'s CQ: the entry, or the negative errno.
    fn read(&self, i: usize) -> Result<FiCqTaggedEntry, isize> {
        let mut e = FiCqTaggedEntry {
            op_context: null_mut(),
            flags: 0,
            len: 0,
            buf: null_mut(),
            data: 0,
            tag: 0,
        };
        // SAFETY: an open CQ; room for one entry of any format.
        let ret = unsafe { (self.cq(i).read)(self.p[i].cq, (&raw mut e).cast(), 1) };
        if ret == 1 {
            Ok(e)
        } else {
            Err(ret)
        }
    }

    /// The next entry of peer `i`'s CQ, waiting up to a second.
    fn wait(&self, i: usize) -> Result<FiCqTaggedEntry, isize> {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match self.read(i) {
                Err(e)
                    if e == -(FiErrno::FI_EAGAIN.get() as isize)
                        && std::time::Instant::now() < end =>
                {
                    std::thread::yield_now()
                }
                other => return other,
            }
        }
    }

    /// `fi_cq_readerr` of peer `i`'s CQ.
    fn readerr(&self, i: usize) -> Result<FiCqErrEntry, isize> {
        // SAFETY: a plain-data structure.
        let mut e: FiCqErrEntry = unsafe { core::mem::zeroed() };
        // SAFETY: an open CQ; a valid entry.
        let ret = unsafe { (self.cq(i).readerr)(self.p[i].cq, &mut e, 0) };
        if ret == 1 {
            Ok(e)
        } else {
            Err(ret)
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // SAFETY: ours, open, closed once.
        let closed = unsafe {
            let mut closed = Vec::new();
            for p in &self.p {
                closed.push(close(&mut (*p.ep).fid));
                closed.push(close(&mut (*p.cq).fid));
            }
            closed.push(close(&mut (*self.av).fid));
            for &c in &self.cntrs {
                closed.push(close(&mut (*c).fid));
            }
            closed
        };
        if !std::thread::panicking() {
            assert!(closed.iter().all(|&c| c == 0), "fi_close: {closed:?}");
        }
    }
}

/// `-errno` as a data call returns it.
fn neg(e: FiErrno) -> isize {
    -(e.get() as isize)
}

/// The 32-byte address of an endpoint no one opened on this NIC.
fn nobody(av: *mut FidAv) -> [u8; 32] {
    address_of(av, c"10.0.0.1", c"4000")
}

#[test]
fn a_receive_scatters_past_a_zero_length_iovec() {
    let pair = Pair::new(0);
    let mut rbuf = [0u8; 16];
    let iov = [
        IoVec {
            iov_base: null_mut(),
            iov_len: 0,
        },
        IoVec {
            iov_base: rbuf.as_mut_ptr().cast(),
            iov_len: rbuf.len(),
        },
    ];
    // SAFETY: open endpoints; the buffers outlive their completions.
    unsafe {
        assert_eq!(
            (pair.msg(1).recvv)(pair.p[1].ep, iov.as_ptr(), null_mut(), 2, 0, 7 as _),
            0
        );
    }
    assert_eq!(pair.send(0, b"hello", 9), 0);
    let e = pair.wait(1).unwrap_or_else(|ret| {
        panic!(
            "fi_cq_read: {ret}, error entry {:?}",
            pair.readerr(1).map(|e| (e.err, e.olen))
        )
    });
    assert_eq!((e.op_context as usize, e.len), (7, 5));
    assert_eq!(&rbuf[..5], b"hello");
    assert_eq!(pair.wait(0).unwrap().op_context as usize, 9);
}

/// fi_cq(3): a truncated message's entry says how many bytes were placed in the buffer
/// (`len`) and how many were dropped (`olen`). A message longer than the receive's buffer,
/// which the NIC itself cuts (here from an endpoint of the driver, the receive taking a
/// buffer as large as its iovecs: 32 KiB), or which the provider cuts as it copies out of
/// a small buffer, still delivers what fits, with its remote CQ data.
#[test]
fn a_message_the_nic_truncates_delivers_what_fits_and_counts_the_rest_in_olen() {
    let pair = Pair::new(0);
    let nic = uet_fi::device::nic().expect("the provider's NIC");
    let attr = uet_driver::EndpointAttr::default();
    let mut av = nic
        .open_av(uet_av::AvAttr {
            count: 4,
            job_id: attr.job_id,
            ..uet_av::AvAttr::default()
        })
        .expect("an AV");
    let mut ep = nic.endpoint(attr, Some(&av)).expect("an endpoint");
    let pool = uet_driver::pool::DmaPool::new(&nic, 64 * 1024, 4).expect("buffers");
    let name = name_of(pair.p[1].ep.cast());
    let mut to = [0u64; 1];
    assert_eq!(av.insert(&name, 1, Some(&mut to), 0), Ok(1));
    let message: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    // (receive buffer sizes, bytes placed)
    for (sizes, placed) in [([10_000, 22_768], 32_768), ([600, 400], 1000)] {
        let mut rbuf = vec![0u8; sizes[0] + sizes[1]];
        let (a, b) = rbuf.split_at_mut(sizes[0]);
        let iov = [a, b].map(|part| IoVec {
            iov_base: part.as_mut_ptr().cast(),
            iov_len: part.len(),
        });
        // SAFETY: an open endpoint; the buffers outlive the receive, whose completion is
        // read below.
        let ret =
            unsafe { (pair.msg(1).recvv)(pair.p[1].ep, iov.as_ptr(), null_mut(), 2, 0, 5 as _) };
        assert_eq!(ret, 0);
        let mut sent = pool.alloc().expect("a buffer");
        sent.fill(&message).expect("the message fits");
        assert!(ep.post_send(to[0], sent, 9, 0x5151).is_ok());
        assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
        let e = pair.readerr(1).expect("the truncated receive");
        assert_eq!(
            (e.err as u32, e.op_context as usize, e.len, e.olen),
            (FiErrno::FI_ETRUNC.get(), 5, placed, message.len() - placed),
            "buffers of {sizes:?} bytes"
        );
        assert_eq!(
            (e.flags, e.data),
            (FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA, 0x5151)
        );
        assert_eq!(
            &rbuf[..placed],
            &message[..placed],
            "buffers of {sizes:?} bytes"
        );
    }
}

/// fi_cq(3): source addresses are available only on endpoints configured with the
/// `FI_SOURCE` capability; `fi_cq_readfrom` on another gives `FI_ADDR_NOTAVAIL` as the
/// source of its receives.
#[test]
fn fi_cq_readfrom_names_a_source_only_on_an_endpoint_opened_with_fi_source() {
    for source in [true, false] {
        let pair = Pair::with_info(0, |info| {
            if !source {
                info.caps &= !FI_SOURCE_CAP;
            }
        });
        let mut rbuf = [0u8; 8];
        // SAFETY: open endpoints; the buffer outlives its completion, read below.
        assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 3) }, 0);
        assert_eq!(pair.send(0, b"from", 4), 0);
        assert_eq!(pair.wait(0).unwrap().op_context as usize, 4);
        let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut e = [0u8; 64];
        let mut src = 0;
        let ret = loop {
            // SAFETY: an open CQ; room for one entry and one address.
            let ret =
                unsafe { (pair.cq(1).readfrom)(pair.p[1].cq, e.as_mut_ptr().cast(), 1, &mut src) };
            if ret != neg(FiErrno::FI_EAGAIN) || std::time::Instant::now() >= end {
                break ret;
            }
            std::thread::yield_now();
        };
        assert_eq!(ret, 1, "FI_SOURCE {source}");
        let want = if source {
            pair.p[0].addr
        } else {
            FI_ADDR_NOTAVAIL
        };
        assert_eq!(src, want, "FI_SOURCE {source}");
    }
}

#[test]
fn a_failed_inject_is_reported_as_an_error_completion() {
    let pair = Pair::new(0);
    let fake = pair.nobody();
    pair.inject_lost(fake);
    // fi_msg(3): no entry for an inject that completes successfully; fi_cq(3): error
    // completions are generated for all operations.
    assert_eq!(pair.wait(0).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair.readerr(0).unwrap();
    assert_eq!(e.err as u32, FiErrno::FI_EADDRNOTAVAIL.get());
    assert!(e.op_context.is_null());
    assert_eq!(e.flags, FI_SEND | FI_MSG);
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// fi_msg(3), fi_tagged(3): an inject is limited to `inject_size` bytes. One whose length
/// no buffer could hold is refused as any longer one is, before its buffer is looked at:
/// `-FI_EMSGSIZE` on an enabled endpoint, `-FI_EOPBADSTATE` on one not enabled, and
/// nothing is sent or reported.
#[test]
fn an_inject_of_a_length_no_buffer_holds_is_refused_and_sends_nothing() {
    let pair = Pair::new(0);
    let buf = [7u8; 8];
    let to = pair.p[1].addr;
    // SAFETY: open endpoints; each call is refused for its length before reading `buf`.
    let injects = |ep: *mut FidEp, len: usize| unsafe {
        let (msg, tagged) = (&*(*ep).msg, &*(*ep).tagged);
        let b = buf.as_ptr().cast();
        [
            (msg.inject)(ep, b, len, to),
            (msg.injectdata)(ep, b, len, 9, to),
            (tagged.inject)(ep, b, len, to, 5),
            (tagged.injectdata)(ep, b, len, 9, to, 5),
        ]
    };
    for len in [usize::MAX, isize::MAX as usize + 1] {
        assert_eq!(
            injects(pair.p[0].ep, len),
            [neg(FiErrno::FI_EMSGSIZE); 4],
            "{len} bytes"
        );
        // SAFETY: the provider's own info.
        let caps = unsafe { (*pair._open.info).caps };
        let idle = pair.endpoint_with_caps(caps);
        assert_eq!(
            injects(idle, len),
            [neg(FiErrno::FI_EOPBADSTATE); 4],
            "{len} bytes, not enabled"
        );
        // SAFETY: ours, open, closed once.
        assert_eq!(unsafe { close(&mut (*idle).fid) }, 0);
    }
    // Nothing left either endpoint: no error entry at the sender, no message at the peer.
    let mut rbuf = [0u8; 8];
    // SAFETY: an open endpoint; the buffer outlives the receive, cancelled below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 4) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!(cancel(pair.p[1].ep, 4), 0);
    assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
}

/// Post a receive on peer 1 and a send from peer 0 to it through the flagless calls, and
/// say whether each produced a successful completion.
fn flagless_completions(pair: &Pair) -> (bool, bool) {
    let mut rbuf = [0u8; 8];
    // SAFETY: open endpoints; the buffer outlives its completion, read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 1) }, 0);
    assert_eq!(pair.send(0, b"x", 2), 0);
    // A marker with FI_COMPLETION behind each: once it is read, the first has completed.
    let iov = IoVec {
        iov_base: rbuf.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let msg = |context: usize, addr| FiMsg {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr,
        context: context as _,
        data: 0,
    };
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            (pair.msg(1).recvmsg)(pair.p[1].ep, &msg(3, 0), FI_COMPLETION),
            0
        );
        assert_eq!(
            (pair.msg(0).sendmsg)(pair.p[0].ep, &msg(4, pair.p[1].addr), FI_COMPLETION),
            0
        );
    }
    let seen = |i: usize, marker: usize| {
        let first = pair.wait(i).unwrap().op_context as usize;
        if first == marker {
            return false;
        }
        assert_eq!(pair.wait(i).unwrap().op_context as usize, marker);
        true
    };
    let recv = seen(1, 3);
    let send = seen(0, 4);
    (send, recv)
}

#[test]
fn with_selective_completion_the_flagless_calls_report_as_the_endpoints_op_flags_say() {
    // op_flags without FI_COMPLETION (the provider's default): fi_send and fi_recv report
    // no success, as fi_endpoint(3) has it.
    let pair = Pair::new(FI_SELECTIVE_COMPLETION);
    assert_eq!(flagless_completions(&pair), (false, false));
    drop(pair);
    // op_flags with FI_COMPLETION: they do.
    let pair = Pair::with_info(FI_SELECTIVE_COMPLETION, |info| {
        // SAFETY: the provider's info has both attributes.
        unsafe {
            (*info.tx_attr).op_flags = FI_COMPLETION;
            (*info.rx_attr).op_flags = FI_COMPLETION;
        }
    });
    assert_eq!(flagless_completions(&pair), (true, true));
    drop(pair);
    // Without selective completion every operation reports.
    let pair = Pair::new(0);
    assert_eq!(flagless_completions(&pair), (true, true));
}

/// fi_msg(3): `FI_TRANSMIT_COMPLETE` applies to `fi_recvmsg` too (a completion may come as
/// soon as the provider has processed the message): the receive is posted and takes a
/// message, which its completion reports. A flag fi_recvmsg(3) does not list is still
/// `-FI_EBADFLAGS`, posting nothing.
#[test]
fn fi_recvmsg_takes_fi_transmit_complete() {
    const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
    const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
    let pair = Pair::new(FI_SELECTIVE_COMPLETION);
    let mut rbuf = [0u8; 8];
    let iov = IoVec {
        iov_base: rbuf.as_mut_ptr().cast(),
        iov_len: rbuf.len(),
    };
    let msg = |context: usize| FiMsg {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: FI_ADDR_NOTAVAIL,
        context: context as _,
        data: 0,
    };
    // SAFETY: an open endpoint; the buffer outlives the receive, whose completion is read
    // below.
    unsafe {
        assert_eq!(
            (pair.msg(1).recvmsg)(pair.p[1].ep, &msg(1), FI_DELIVERY_COMPLETE),
            neg(FiErrno::FI_EBADFLAGS)
        );
        assert_eq!(
            (pair.msg(1).recvmsg)(pair.p[1].ep, &msg(2), FI_TRANSMIT_COMPLETE | FI_COMPLETION),
            0
        );
    }
    assert_eq!(pair.send(0, b"tc", 3), 0);
    let e = pair.wait(1).expect("the receive completes");
    assert_eq!(
        (e.op_context as usize, e.len, e.flags),
        (2, 2, FI_RECV | FI_MSG)
    );
    assert_eq!(&rbuf[..2], b"tc");
    // Nothing else was posted: the next message waits for the next receive.
    assert_eq!(pair.send(0, b"x", 4), 0);
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            (pair.msg(1).recvmsg)(pair.p[1].ep, &msg(5), FI_TRANSMIT_COMPLETE | FI_COMPLETION),
            0
        );
    }
    let e = pair.wait(1).expect("the receive takes the waiting message");
    assert_eq!((e.op_context as usize, e.len), (5, 1));
    assert_eq!(&rbuf[..1], b"x");
}

/// fi_domain(3): a reliable endpoint with resource management (`FI_RM_ENABLED`, which
/// `fi_getinfo` reports) does not fail a message that arrives before a receive is posted for
/// it. A sender that runs ahead of its receiver loses nothing: every send succeeds, and the
/// receives posted afterwards take the messages in the order they were sent.
#[test]
fn a_sender_that_runs_ahead_of_its_receiver_loses_nothing() {
    const N: usize = 48;
    let pair = Pair::new(0);
    for i in 0..N {
        let msg = format!("message {i:02}");
        assert_eq!(pair.send(0, msg.as_bytes(), i), 0);
    }
    for i in 0..N {
        let e = pair.wait(0).expect("every send succeeds");
        assert_eq!(e.op_context as usize, i);
    }
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
    let mut bufs = vec![[0u8; 16]; N];
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: an open endpoint; `bufs` outlives the receives, read below.
        let ret = unsafe {
            (pair.msg(1).recv)(
                pair.p[1].ep,
                b.as_mut_ptr().cast(),
                b.len(),
                null_mut(),
                u64::MAX, // FI_ADDR_UNSPEC
                (100 + i) as _,
            )
        };
        assert_eq!(ret, 0);
    }
    for i in 0..N {
        let e = pair.wait(1).expect("a receive completes");
        assert_eq!((e.op_context as usize, e.len), (100 + i, 10));
    }
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(&b[..10], format!("message {i:02}").as_bytes());
    }
}

/// fi_tagged(3) probes through `fi_trecvmsg`: `FI_PEEK` reports a tagged message that
/// arrived before its receive (its length, no data: `buf` NULL) or `FI_ENOMSG`;
/// `FI_PEEK | FI_CLAIM` claims it for the `FI_CLAIM` receive with the same `fi_context`;
/// `FI_PEEK | FI_DISCARD` drops it. `FI_DISCARD` alone is `-FI_EBADFLAGS`, and a claim without
/// a context `-FI_EINVAL`.
#[test]
fn fi_trecvmsg_peeks_claims_and_discards_tagged_messages_that_arrived_first() {
    let pair = Pair::new(0);
    let to_1 = pair.p[1].addr;
    assert_eq!(tsend(pair.p[0].ep, b"peeked", to_1, 7, 1), 0);
    assert_eq!(tsend(pair.p[0].ep, b"dropped", to_1, 8, 2), 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(1));
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(2));
    let mut rbuf = [0u8; 16];
    let iov = IoVec {
        iov_base: rbuf.as_mut_ptr().cast(),
        iov_len: rbuf.len(),
    };
    // The claim's `struct fi_context`.
    let mut fi_context = [0u64; 4];
    let claim: *mut core::ffi::c_void = fi_context.as_mut_ptr().cast();
    let msg = |tag: u64, context: *mut core::ffi::c_void| FiMsgTagged {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: u64::MAX, // FI_ADDR_UNSPEC
        tag,
        ignore: 0,
        context,
        data: 0,
    };
    let trecvmsg = |m: &FiMsgTagged, flags: u64| {
        // SAFETY: an open endpoint; `rbuf` outlives every receive, read below.
        unsafe { ((*(*pair.p[1].ep).tagged).recvmsg)(pair.p[1].ep, m, flags) }
    };
    let no_message = |context: usize| {
        assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
        let e = pair.readerr(1).unwrap();
        assert_eq!(
            (e.op_context as usize, e.err as u32),
            (context, FiErrno::FI_ENOMSG.get())
        );
    };
    assert_eq!(trecvmsg(&msg(7, 10 as _), FI_PEEK), 0);
    let e = pair.wait(1).expect("the peek completes");
    assert_eq!((e.op_context as usize, e.len), (10, 6));
    assert!(e.buf.is_null(), "no data is returned");
    assert_eq!(e.flags & (FI_RECV | FI_TAGGED), FI_RECV | FI_TAGGED);
    assert_eq!(trecvmsg(&msg(9, 11 as _), FI_PEEK), 0);
    no_message(11);

    assert_eq!(trecvmsg(&msg(7, claim), FI_PEEK | FI_CLAIM), 0);
    let e = pair.wait(1).expect("the claim completes");
    assert_eq!((e.op_context, e.len), (claim, 6));
    // Claimed: a peek passes it over.
    assert_eq!(trecvmsg(&msg(7, 12 as _), FI_PEEK), 0);
    no_message(12);
    assert_eq!(trecvmsg(&msg(0, claim), FI_CLAIM), 0);
    let e = pair.wait(1).expect("the claimed message");
    assert_eq!((e.op_context, e.len), (claim, 6));
    assert_eq!(&rbuf[..6], b"peeked");

    assert_eq!(trecvmsg(&msg(8, 13 as _), FI_PEEK | FI_DISCARD), 0);
    let e = pair.wait(1).expect("the discard completes");
    assert_eq!((e.op_context as usize, e.len), (13, 7));
    assert_eq!(trecvmsg(&msg(8, 14 as _), FI_PEEK), 0);
    no_message(14);

    assert_eq!(
        trecvmsg(&msg(8, 15 as _), FI_DISCARD),
        neg(FiErrno::FI_EBADFLAGS)
    );
    assert_eq!(
        trecvmsg(&msg(8, 16 as _), FI_PEEK | FI_CLAIM | FI_DISCARD),
        neg(FiErrno::FI_EBADFLAGS)
    );
    assert_eq!(
        trecvmsg(&msg(8, null_mut()), FI_CLAIM),
        neg(FiErrno::FI_EINVAL)
    );
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// fi_tagged(3): with `FI_DISCARD` the input buffers and length are ignored: a discard whose
/// `msg_iov` is NULL with a count, or names more iovecs than `iov_limit`, drops the message
/// all the same.
#[test]
fn fi_discard_ignores_the_iovecs() {
    let pair = Pair::new(0);
    let to_1 = pair.p[1].addr;
    assert_eq!(tsend(pair.p[0].ep, b"dropped", to_1, 8, 1), 0);
    assert_eq!(tsend(pair.p[0].ep, b"claimed, dropped", to_1, 9, 2), 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(1));
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(2));
    let mut fi_context = [0u64; 4];
    let claim: *mut core::ffi::c_void = fi_context.as_mut_ptr().cast();
    let msg = |tag: u64, context: *mut core::ffi::c_void, iov_count: usize| FiMsgTagged {
        msg_iov: null(),
        desc: null_mut(),
        iov_count,
        addr: u64::MAX, // FI_ADDR_UNSPEC
        tag,
        ignore: 0,
        context,
        data: 0,
    };
    let trecvmsg = |m: &FiMsgTagged, flags: u64| {
        // SAFETY: an open endpoint; a discard reads no iovec.
        unsafe { ((*(*pair.p[1].ep).tagged).recvmsg)(pair.p[1].ep, m, flags) }
    };
    assert_eq!(trecvmsg(&msg(8, 10 as _, 1), FI_PEEK | FI_DISCARD), 0);
    let e = pair.wait(1).expect("the discard completes");
    assert_eq!((e.op_context as usize, e.len), (10, 7));
    assert_eq!(trecvmsg(&msg(9, claim, 0), FI_PEEK | FI_CLAIM), 0);
    let e = pair.wait(1).expect("the claim completes");
    assert_eq!((e.op_context, e.len), (claim, 16));
    assert_eq!(trecvmsg(&msg(0, claim, 1000), FI_CLAIM | FI_DISCARD), 0);
    let e = pair.wait(1).expect("the discard completes");
    assert_eq!((e.op_context, e.len), (claim, 16));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// A probe (`fi_trecvmsg` with `FI_PEEK`, `FI_CLAIM` or `FI_DISCARD`) on an endpoint not
/// enabled is refused as a receive is: `-FI_EOPBADSTATE`.
#[test]
fn a_probe_on_an_endpoint_not_enabled_is_refused_as_a_receive_is() {
    let pair = Pair::new(0);
    // SAFETY: the provider's own info.
    let caps = unsafe { (*pair._open.info).caps };
    let idle = pair.endpoint_with_caps(caps);
    let mut rbuf = [0u8; 8];
    let iov = IoVec {
        iov_base: rbuf.as_mut_ptr().cast(),
        iov_len: rbuf.len(),
    };
    let mut fi_context = [0u64; 4];
    let msg = FiMsgTagged {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: u64::MAX, // FI_ADDR_UNSPEC
        tag: 7,
        ignore: 0,
        context: fi_context.as_mut_ptr().cast(),
        data: 0,
    };
    for flags in [
        FI_PEEK,
        FI_PEEK | FI_CLAIM,
        FI_PEEK | FI_DISCARD,
        FI_CLAIM | FI_DISCARD,
        FI_CLAIM,
    ] {
        // SAFETY: an open endpoint; the call is refused before it reads the buffer.
        let ret = unsafe { ((*(*idle).tagged).recvmsg)(idle, &msg, flags) };
        assert_eq!(ret, neg(FiErrno::FI_EOPBADSTATE), "flags {flags:#x}");
    }
    // SAFETY: ours, open, closed once.
    assert_eq!(unsafe { close(&mut (*idle).fid) }, 0);
}

#[test]
fn a_cq_read_of_no_entries_and_no_buffer_returns_0() {
    let pair = Pair::new(0);
    // fi_cq(3): a count of 0 may be used to drive progress.
    // SAFETY: an open CQ; no entry is written.
    let ret = unsafe { (pair.cq(0).read)(pair.p[0].cq, null_mut(), 0) };
    assert_eq!(ret, 0);
}

#[test]
fn an_endpoint_refuses_to_bind_an_av_of_another_provider() {
    let pair = Pair::new(0);
    // Another provider's AV: class FI_CLASS_AV, its own operations (here a CQ's, which are
    // not the uet AV's), and nothing of a uet AV behind its fid.
    let mut foreign = vec![0u64; 512];
    // SAFETY: an open domain; the foreign object is big enough for a `struct fid` and is
    // only read through it.
    unsafe {
        foreign.as_mut_ptr().cast::<Fid>().write(Fid {
            fclass: FI_CLASS_AV,
            context: null_mut(),
            ops: (*pair.p[0].cq).fid.ops,
        });
        let ep = pair._open.endpoint();
        let bind = (*(*ep).fid.ops).bind;
        assert_eq!(
            bind(&mut (*ep).fid, foreign.as_mut_ptr().cast(), 0),
            -(FiErrno::FI_EINVAL.get() as c_int)
        );
        assert!(
            foreign[3..].iter().all(|&w| w == 0),
            "the foreign object was written"
        );
        assert_eq!(close(&mut (*ep).fid), 0);
    }
}

#[test]
fn fi_cq_sread_takes_a_wait_condition_as_the_hint_fi_cq_makes_it() {
    let pair = Pair::new(0);
    let mut rbuf = [0u8; 8];
    // SAFETY: open endpoints; the receive buffer outlives its completion, read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 6) }, 0);
    // SAFETY: open endpoints; the message is copied at the call.
    assert_eq!(pair.send(0, b"x", 5), 0);
    // A threshold of one entry: met by the send's completion, and a provider may wake before
    // a condition is met anyway (fi_cq(3)), so it never makes the read fail.
    let threshold: usize = 1;
    let mut e = [0u8; 64];
    // SAFETY: an open CQ; room for one entry; the condition is a size_t.
    let ret = unsafe {
        (pair.cq(0).sread)(
            pair.p[0].cq,
            e.as_mut_ptr().cast(),
            1,
            (&raw const threshold).cast(),
            1000,
        )
    };
    assert_eq!(ret, 1);
    assert_eq!(pair.wait(1).unwrap().op_context as usize, 6);
}

#[test]
fn an_endpoint_without_a_cq_for_a_direction_it_serves_is_not_enabled() {
    let pair = Pair::new(0);
    let no_cq = -(FiErrno::FI_ENOCQ.get() as c_int);
    // (caps, CQ bindings, fi_enable's answer); FI_RECV and FI_SEND as bind flags and caps
    // have the same bits.
    let cases = [
        (FI_MSG, 0, no_cq),
        (FI_MSG, FI_TRANSMIT, no_cq),
        (FI_MSG, FI_RECV, no_cq),
        (FI_MSG | FI_SEND, FI_TRANSMIT, 0),
        (FI_MSG | FI_RECV, FI_RECV, 0),
        (FI_MSG | FI_RECV, FI_TRANSMIT, no_cq),
        (FI_MSG, FI_TRANSMIT | FI_RECV, 0),
    ];
    for (caps, bind, want) in cases {
        // SAFETY: an open endpoint, AV and CQ.
        unsafe {
            let ep = pair.endpoint_with_caps(caps);
            let fops = &*(*ep).fid.ops;
            if bind != 0 {
                assert_eq!(
                    (fops.bind)(&mut (*ep).fid, &mut (*pair.p[0].cq).fid, bind),
                    0
                );
            }
            assert_eq!(
                (fops.control)(&mut (*ep).fid, FI_ENABLE, null_mut()),
                want,
                "caps {caps:#x}, CQ bound with {bind:#x}"
            );
            assert_eq!(close(&mut (*ep).fid), 0);
        }
    }
}

/// An endpoint whose caps leave a direction out needs no CQ for it (`fi_enable`), so a
/// transfer of that direction would complete where no CQ reports it: a receive would take
/// a message and drop it unreported, the sender told it was delivered. Such a transfer is
/// refused, and the message finds no receive.
#[test]
fn an_endpoint_refuses_transfers_of_a_direction_its_caps_leave_out() {
    let pair = Pair::new(0);
    let not_served = neg(FiErrno::FI_EOPNOTSUPP);
    // (caps, the CQ's binding)
    for (caps, bind) in [(FI_MSG | FI_SEND, FI_TRANSMIT), (FI_MSG | FI_RECV, FI_RECV)] {
        // SAFETY: an open domain, endpoint, AV and CQ; the
        // buffers outlive the calls, which are refused or read by the end of the loop.
        unsafe {
            let ep = pair.endpoint_with_caps(caps);
            let fops = &*(*ep).fid.ops;
            let cq = pair._open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
            assert_eq!((fops.bind)(&mut (*ep).fid, &mut (*cq).fid, bind), 0);
            assert_eq!((fops.control)(&mut (*ep).fid, FI_ENABLE, null_mut()), 0);
            let msg = &*(*ep).msg;
            let tagged = &*(*ep).tagged;
            let addr = insert_name_of(pair.av, ep);
            let mut rbuf = [0u8; 8];
            let to = pair.p[0].addr;
            if caps & FI_SEND != 0 {
                let rb = rbuf.as_mut_ptr().cast();
                assert_eq!((msg.recv)(ep, rb, 8, null_mut(), 0, 1 as _), not_served);
                assert_eq!(
                    (tagged.recv)(ep, rb, 8, null_mut(), 0, 5, 0, 1 as _),
                    not_served
                );
                // A message sent to it finds no receive: it waits on the NIC's unexpected
                // list, and its send succeeds, but no receive of this endpoint takes it.
                assert_eq!(
                    (pair.msg(0).send)(
                        pair.p[0].ep,
                        b"x".as_ptr().cast(),
                        1,
                        null_mut(),
                        addr,
                        2 as _
                    ),
                    0
                );
                assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(2));
            } else {
                let sb = b"x".as_ptr().cast();
                assert_eq!((msg.send)(ep, sb, 1, null_mut(), to, 3 as _), not_served);
                assert_eq!((msg.inject)(ep, sb, 1, to), not_served);
                assert_eq!(
                    (tagged.send)(ep, sb, 1, null_mut(), to, 5, 3 as _),
                    not_served
                );
                assert_eq!((tagged.inject)(ep, sb, 1, to, 5), not_served);
            }
            assert_eq!(close(&mut (*ep).fid), 0);
            assert_eq!(close(&mut (*cq).fid), 0);
            let mut gone = addr;
            assert_eq!(((*(*pair.av).ops).remove)(pair.av, &mut gone, 1, 0), 0);
        }
    }
}

/// Every successful completion context in peer `i`'s CQ up to and including `marker`, and
/// whatever follows it shortly after.
fn contexts_through(pair: &Pair, i: usize, marker: usize) -> Vec<usize> {
    let mut seen = Vec::new();
    loop {
        let c = pair.wait(i).unwrap().op_context as usize;
        seen.push(c);
        if c == marker {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    while let Ok(e) = pair.read(i) {
        seen.push(e.op_context as usize);
    }
    seen.sort_unstable();
    seen
}

/// Post tagged receives on peer 1 and tagged sends from peer 0 to them through the calls
/// that take no flags (`fi_trecv`, `fi_trecvv`; `fi_tsend`, `fi_tsendv`, `fi_tsenddata`),
/// then a marker with `FI_COMPLETION` each way: the contexts each side reported (receives,
/// sends), markers 10 and 20 included.
fn flagless_tagged_completions(pair: &Pair) -> (Vec<usize>, Vec<usize>) {
    let mut rbuf = [[0u8; 8]; 4];
    let tagged = |i: usize| {
        // SAFETY: an open endpoint's operations.
        unsafe { &*(*pair.p[i].ep).tagged }
    };
    let (rx, tx) = (tagged(1), tagged(0));
    let dest = pair.p[1].addr;
    // SAFETY: open endpoints; the buffers outlive their completions, read below.
    unsafe {
        let iov = IoVec {
            iov_base: rbuf[1].as_mut_ptr().cast(),
            iov_len: 8,
        };
        let iov2 = IoVec {
            iov_base: rbuf[2].as_mut_ptr().cast(),
            iov_len: 8,
        };
        let ep = pair.p[1].ep;
        let buf = rbuf[0].as_mut_ptr().cast();
        assert_eq!((rx.recv)(ep, buf, 8, null_mut(), 0, 1, 0, 1 as _), 0);
        assert_eq!((rx.recvv)(ep, &iov, null_mut(), 1, 0, 2, 0, 2 as _), 0);
        assert_eq!((rx.recvv)(ep, &iov2, null_mut(), 1, 0, 3, 0, 3 as _), 0);
        let ep = pair.p[0].ep;
        let x = b"x".as_ptr();
        assert_eq!((tx.send)(ep, x.cast(), 1, null_mut(), dest, 1, 11 as _), 0);
        let siov = IoVec {
            iov_base: x.cast_mut().cast(),
            iov_len: 1,
        };
        assert_eq!((tx.sendv)(ep, &siov, null_mut(), 1, dest, 2, 12 as _), 0);
        assert_eq!(
            (tx.senddata)(ep, x.cast(), 1, null_mut(), 5, dest, 3, 13 as _),
            0
        );
        let riov = IoVec {
            iov_base: rbuf[3].as_mut_ptr().cast(),
            iov_len: 8,
        };
        let msg = |iov: &IoVec, addr, context: usize| FiMsgTagged {
            msg_iov: iov,
            desc: null_mut(),
            iov_count: 1,
            addr,
            tag: 4,
            ignore: 0,
            context: context as _,
            data: 0,
        };
        assert_eq!(
            (rx.recvmsg)(pair.p[1].ep, &msg(&riov, 0, 10), FI_COMPLETION),
            0
        );
        assert_eq!(
            (tx.sendmsg)(pair.p[0].ep, &msg(&siov, dest, 20), FI_COMPLETION),
            0
        );
    }
    (contexts_through(pair, 1, 10), contexts_through(pair, 0, 20))
}

#[test]
fn with_selective_completion_the_flagless_tagged_calls_report_as_the_endpoints_op_flags_say() {
    // op_flags without FI_COMPLETION: fi_trecv, fi_trecvv, fi_tsend, fi_tsendv and
    // fi_tsenddata report no success, as their untagged counterparts.
    let pair = Pair::new(FI_SELECTIVE_COMPLETION);
    assert_eq!(flagless_tagged_completions(&pair), (vec![10], vec![20]));
    drop(pair);
    // op_flags with FI_COMPLETION: they do.
    let pair = Pair::with_info(FI_SELECTIVE_COMPLETION, |info| {
        // SAFETY: the provider's info has both attributes.
        unsafe {
            (*info.tx_attr).op_flags = FI_COMPLETION;
            (*info.rx_attr).op_flags = FI_COMPLETION;
        }
    });
    assert_eq!(
        flagless_tagged_completions(&pair),
        (vec![1, 2, 3, 10], vec![11, 12, 13, 20])
    );
}

#[test]
fn a_tagged_send_asking_for_match_complete_is_refused_as_it_completes_before_its_match() {
    let pair = Pair::new(0);
    // SAFETY: an open endpoint's operations.
    let tagged = unsafe { &*(*pair.p[0].ep).tagged };
    let iov = IoVec {
        iov_base: b"early".as_ptr().cast_mut().cast(),
        iov_len: 5,
    };
    let msg = FiMsgTagged {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: pair.p[1].addr,
        tag: 9,
        ignore: 0,
        context: 30 as _,
        data: 0,
    };
    // No receive is posted at peer 1: the NIC holds the message on its unexpected list and
    // answers at once, so a completion could only come before the match fi_cq(3)'s
    // FI_MATCH_COMPLETE waits for.
    // SAFETY: an open endpoint; the message is copied at the call.
    let ret = unsafe { (tagged.sendmsg)(pair.p[0].ep, &msg, FI_COMPLETION | (1 << 31)) };
    if ret == 0 {
        panic!(
            "accepted, and completed with no receive posted: {:?}",
            pair.wait(0).map(|e| e.op_context as usize)
        );
    }
    assert_eq!(ret, neg(FiErrno::FI_EBADFLAGS));
    // Nothing was sent.
    let mut rbuf = [0u8; 8];
    // SAFETY: an open endpoint; the buffer outlives the receive, cancelled by the close.
    unsafe {
        let rx = &*(*pair.p[1].ep).tagged;
        let buf = rbuf.as_mut_ptr().cast();
        assert_eq!(
            (rx.recv)(pair.p[1].ep, buf, 8, null_mut(), 0, 9, 0, 31 as _),
            0
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// Receive capabilities in `tx_attr->caps`, and send capabilities in `rx_attr->caps`, mean
/// nothing for that context and are passed over, as libfabric's own providers do: hints that
/// copy the whole `caps` into both attributes are answered, with each context's own only.
#[test]
fn hints_copying_caps_into_both_contexts_are_answered_with_each_contexts_own() {
    let all = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_SOURCE_CAP | FI_MULTI_RECV;
    let hints = Hints::new(all, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes; the provider's answer, read, then freed once.
    unsafe {
        (*hints.info.tx_attr).caps = all | FI_DIRECTED_RECV | FI_REMOTE_READ;
        (*hints.info.rx_attr).caps = all | FI_READ | FI_FENCE;
        let info = getinfo(None, None, 0, Some(&hints)).expect("answered");
        let (tx, rx) = ((*(*info).tx_attr).caps, (*(*info).rx_attr).caps);
        uet_fi::info::free_info(info);
        assert_eq!(tx & (FI_RECV | FI_SOURCE_CAP | FI_MULTI_RECV), 0, "{tx:#x}");
        assert_eq!(
            tx & (FI_SEND | FI_MSG | FI_TAGGED),
            FI_SEND | FI_MSG | FI_TAGGED
        );
        assert_eq!(rx & FI_SEND, 0, "{rx:#x}");
        assert_eq!(
            rx & (FI_RECV | FI_MSG | FI_TAGGED),
            FI_RECV | FI_MSG | FI_TAGGED
        );
    }
    // A capability no context of the provider has is still refused.
    let hints = Hints::new(all, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.tx_attr).caps = FI_MSG | FI_SEND | FI_RMA };
    assert_eq!(getinfo(None, None, 0, Some(&hints)).err(), Some(ENODATA));
}

#[test]
fn the_answer_enables_only_the_primary_capabilities_and_directions_the_hints_name() {
    // SAFETY: the provider's answers, read, then freed once.
    let caps = |hint: u64| unsafe {
        let info = getinfo(None, None, 0, Some(&Hints::new(hint, FI_FORMAT_UNSPEC))).unwrap();
        let caps = (
            (*info).caps,
            (*(*info).tx_attr).caps,
            (*(*info).rx_attr).caps,
        );
        uet_fi::info::free_info(info);
        caps
    };
    let primary = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV;
    // fi_getinfo(3): primary capabilities must be requested, and only those are enabled;
    // with no modifier every direction is assumed.
    for (hint, want) in [
        (0, primary),
        (FI_MSG, FI_MSG | FI_SEND | FI_RECV),
        (FI_TAGGED | FI_SOURCE_CAP, FI_TAGGED | FI_SEND | FI_RECV),
        (FI_MSG | FI_SEND, FI_MSG | FI_SEND),
        (FI_MSG | FI_TAGGED | FI_RECV, FI_MSG | FI_TAGGED | FI_RECV),
    ] {
        let (info, tx, rx) = caps(hint);
        assert_eq!(info & primary, want, "caps of the answer to {hint:#x}");
        assert_eq!(tx & !info, 0, "tx_attr caps of the answer to {hint:#x}");
        assert_eq!(rx & !info, 0, "rx_attr caps of the answer to {hint:#x}");
        assert_eq!(info & hint, hint, "secondary caps asked for are kept");
    }
    // A send-only endpoint, opened with the answer to send-only hints, needs no receive CQ.
    let open = Open::new(FI_MSG | FI_SEND, FI_FORMAT_UNSPEC);
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let cq = open.cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE);
    let ep = open.endpoint();
    // SAFETY: an open AV, CQ and endpoint; each closed once.
    unsafe {
        let fops = &*(*ep).fid.ops;
        assert_eq!((fops.bind)(&mut (*ep).fid, &mut (*av).fid, 0), 0);
        assert_eq!((fops.bind)(&mut (*ep).fid, &mut (*cq).fid, FI_TRANSMIT), 0);
        assert_eq!((fops.control)(&mut (*ep).fid, FI_ENABLE, null_mut()), 0);
        assert_eq!(close(&mut (*ep).fid), 0);
        assert_eq!(close(&mut (*cq).fid), 0);
        assert_eq!(close(&mut (*av).fid), 0);
    }
}

#[test]
fn the_answer_keeps_the_op_flags_the_hints_ask_for_and_refuses_those_it_cannot_honour() {
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe {
        (*hints.info.tx_attr).op_flags = FI_COMPLETION | FI_INJECT;
        (*hints.info.rx_attr).op_flags = FI_COMPLETION;
    }
    let info = getinfo(None, None, 0, Some(&hints)).expect("fi_getinfo with op_flags");
    // SAFETY: the provider's answer, read, then freed once.
    let (tx, rx) = unsafe {
        let flags = ((*(*info).tx_attr).op_flags, (*(*info).rx_attr).op_flags);
        uet_fi::info::free_info(info);
        flags
    };
    // An endpoint opened with the answer takes its flagless calls' flags from these
    // (fi_endpoint(3)): without FI_COMPLETION, FI_SELECTIVE_COMPLETION would hide them.
    assert_eq!((tx, rx), (FI_COMPLETION | FI_INJECT, FI_COMPLETION));
    // FI_TRANSMIT_COMPLETE as a receive default: fi_recvmsg takes it (fi_msg(3)), and the
    // answer keeps it.
    const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.rx_attr).op_flags = FI_COMPLETION | FI_TRANSMIT_COMPLETE };
    let info = getinfo(None, None, 0, Some(&hints)).expect("rx op_flags FI_TRANSMIT_COMPLETE");
    // SAFETY: the provider's answer, read, then freed once.
    let rx = unsafe {
        let rx = (*(*info).rx_attr).op_flags;
        uet_fi::info::free_info(info);
        rx
    };
    assert_eq!(rx, FI_COMPLETION | FI_TRANSMIT_COMPLETE);
    // FI_MULTI_RECV as a receive default: flagless untagged receives post multi-receive
    // buffers, and the answer keeps it; as a send default it means nothing.
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.rx_attr).op_flags = FI_COMPLETION | (1 << 16) };
    let info = getinfo(None, None, 0, Some(&hints)).expect("rx op_flags FI_MULTI_RECV");
    // SAFETY: the provider's answer, read, then freed once.
    let rx = unsafe {
        let rx = (*(*info).rx_attr).op_flags;
        uet_fi::info::free_info(info);
        rx
    };
    assert_eq!(rx, FI_COMPLETION | (1 << 16));
    // SAFETY: the hints' own attributes.
    unsafe {
        (*hints.info.rx_attr).op_flags = 0;
        (*hints.info.tx_attr).op_flags = 1 << 16;
    }
    assert_eq!(
        getinfo(None, None, 0, Some(&hints)).err(),
        Some(-(FiErrno::FI_ENODATA.get() as c_int))
    );
}

#[test]
fn the_answer_gives_the_eight_bytes_of_remote_cq_data_a_message_carries() {
    // SAFETY: the provider's answer, read, then freed once.
    let size = |hints: &Hints| unsafe {
        getinfo(None, None, 0, Some(hints)).map(|info| {
            let size = (*(*info).domain_attr).cq_data_size;
            uet_fi::info::free_info(info);
            size
        })
    };
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // fi_senddata and fi_injectdata carry 64 bits; fi_domain(3): 0 would say none.
    assert_eq!(size(&hints), Ok(8));
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.domain_attr).cq_data_size = 4 };
    assert_eq!(size(&hints), Ok(8));
    // SAFETY: as above.
    unsafe { (*hints.info.domain_attr).cq_data_size = 16 };
    assert_eq!(size(&hints), Err(-(FiErrno::FI_ENODATA.get() as c_int)));
}

#[test]
fn hints_asking_for_an_ordering_are_refused_as_messages_travel_unordered() {
    // Messages go as reliable unordered deliveries (RUD) and complete as their responses
    // come back: the provider guarantees no order (FI_ORDER_SAS, FI_ORDER_STRICT 0x1ff),
    // and fi_getinfo(3) has a hint it cannot meet fail with -FI_ENODATA.
    let no_data = Err(-(FiErrno::FI_ENODATA.get() as c_int));
    for field in 0..4 {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe {
            let tx = &mut *hints.info.tx_attr;
            let rx = &mut *hints.info.rx_attr;
            match field {
                0 => tx.msg_order = FI_ORDER_SAS,
                1 => rx.msg_order = FI_ORDER_SAS,
                2 => tx.comp_order = 0x1ff,
                _ => rx.comp_order = 0x1ff,
            }
        }
        let got = getinfo(None, None, 0, Some(&hints));
        if let Ok(info) = got {
            // SAFETY: the provider's answer, freed once.
            unsafe { uet_fi::info::free_info(info) };
        }
        assert_eq!(got, no_data, "hint {field}");
    }
}

/// `fi_cq_readerr` of an error completion with `err_data_size` 0: fi_cq(3) says the buffer is
/// ignored and `err_data` set to one the provider owns, valid until the next read.
/// The answer names the provider's protocol (UET, a provider-specific value) and its
/// version; hints asking for another protocol, a later version, or RMA and atomic data
/// ordering (`max_order_*_size`, which it answers 0) are `-FI_ENODATA`, as for any hint it
/// cannot meet; `FI_PROTO_UNSPEC` (0) takes any protocol.
#[test]
fn hints_asking_for_another_protocol_or_ordered_data_are_refused() {
    let ask = |edit: &dyn Fn(&mut FiEpAttr)| -> Result<(u32, u32, [usize; 3]), c_int> {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        edit(unsafe { &mut *hints.info.ep_attr });
        let info = getinfo(None, None, 0, Some(&hints))?;
        // SAFETY: the provider's answer, read, then freed once.
        unsafe {
            let ep = &*(*info).ep_attr;
            let got = (
                ep.protocol,
                ep.protocol_version,
                [
                    ep.max_order_raw_size,
                    ep.max_order_war_size,
                    ep.max_order_waw_size,
                ],
            );
            uet_fi::info::free_info(info);
            Ok(got)
        }
    };
    let ours = uet_fi::info::PROTOCOL;
    assert_eq!(ours & (1 << 31), 1 << 31, "a provider-specific protocol");
    let answer = Ok((ours, 1, [0, 0, 0]));
    assert_eq!(ask(&|_| ()), answer);
    assert_eq!(ask(&|ep| ep.protocol = ours), answer);
    assert_eq!(ask(&|ep| ep.protocol_version = 1), answer);
    let no_data = Err(-(FiErrno::FI_ENODATA.get() as c_int));
    // FI_PROTO_UDP (5), FI_PROTO_RXM (16), and another provider's own.
    for protocol in [5, 16, (1 << 31) | 1] {
        assert_eq!(
            ask(&|ep| ep.protocol = protocol),
            no_data,
            "protocol {protocol:#x}"
        );
    }
    assert_eq!(ask(&|ep| ep.protocol_version = 2), no_data);
    for size in [1, 64, usize::MAX] {
        assert_eq!(ask(&|ep| ep.max_order_raw_size = size), no_data);
        assert_eq!(ask(&|ep| ep.max_order_war_size = size), no_data);
        assert_eq!(ask(&|ep| ep.max_order_waw_size = size), no_data);
    }
}

/// fi_fabric(3), fi_domain(3): hints may name "an opened fabric instance to restrict output
/// to the given fabric", and likewise a domain. An answer to hints naming the provider's
/// own fabric and domain names them (`fabric_attr->fabric`, `domain_attr->domain`); hints
/// naming another's (another provider's, as an application with several open passes them
/// to every provider) get `-FI_ENODATA`.
#[test]
fn hints_naming_an_open_fabric_or_domain_are_answered_for_it_alone() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let answer = |fabric: *mut FidFabric, domain: *mut FidDomain| {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe {
            (*hints.info.fabric_attr).fabric = fabric;
            (*hints.info.domain_attr).domain = domain;
        }
        let info = getinfo(None, None, 0, Some(&hints))?;
        // SAFETY: the provider's answers, read, then freed once.
        unsafe {
            let mut named = Vec::new();
            let mut i = info;
            while !i.is_null() {
                named.push(((*(*i).fabric_attr).fabric, (*(*i).domain_attr).domain));
                i = (*i).next;
            }
            uet_fi::info::free_info(info);
            Ok(named)
        }
    };
    let ours = answer(open.fabric, open.domain).expect("our fabric and domain");
    assert!(!ours.is_empty());
    assert!(ours.iter().all(|&n| n == (open.fabric, open.domain)));
    let ours = answer(open.fabric, null_mut()).expect("our fabric");
    assert!(ours.iter().all(|&(f, _)| f == open.fabric));
    let ours = answer(null_mut(), open.domain).expect("our domain");
    assert!(ours.iter().all(|&(_, d)| d == open.domain));
    // Another provider's: objects of the classes, with their own operations (here the
    // other class's of this provider, which are not a uet fabric's or domain's), and nothing
    // of the provider's behind their fids.
    let mut foreign = [vec![0u64; 64], vec![0u64; 64]];
    // SAFETY: the foreign objects are big enough for a `struct fid`, only read through it.
    let (other_fabric, other_domain) = unsafe {
        for (o, (fclass, ops)) in foreign.iter_mut().zip([
            (FI_CLASS_FABRIC, (*open.domain).fid.ops),
            (FI_CLASS_DOMAIN, (*open.fabric).fid.ops),
        ]) {
            o.as_mut_ptr().cast::<Fid>().write(Fid {
                fclass,
                context: null_mut(),
                ops,
            });
        }
        (
            foreign[0].as_mut_ptr().cast::<FidFabric>(),
            foreign[1].as_mut_ptr().cast::<FidDomain>(),
        )
    };
    let no_data = Err(-(FiErrno::FI_ENODATA.get() as c_int));
    assert_eq!(answer(other_fabric, null_mut()), no_data);
    assert_eq!(answer(null_mut(), other_domain), no_data);
    assert_eq!(answer(open.fabric, other_domain), no_data);
    assert!(foreign.iter().all(|o| o[3..].iter().all(|&w| w == 0)));
}

/// Hints naming an open fabric and an open domain of another fabric name no domain of that
/// fabric: nothing answers both (fi_fabric(3), fi_domain(3) restrict the answer to each).
#[test]
fn hints_naming_a_fabric_and_a_domain_of_another_fabric_are_refused() {
    let (first, second) = (
        Open::new(FI_MSG, FI_FORMAT_UNSPEC),
        Open::new(FI_MSG, FI_FORMAT_UNSPEC),
    );
    let answer = |fabric: *mut FidFabric, domain: *mut FidDomain| {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe {
            (*hints.info.fabric_attr).fabric = fabric;
            (*hints.info.domain_attr).domain = domain;
        }
        getinfo(None, None, 0, Some(&hints)).map(|info| {
            // SAFETY: the provider's answer, freed once.
            unsafe { uet_fi::info::free_info(info) }
        })
    };
    assert_eq!(answer(first.fabric, first.domain), Ok(()));
    assert_eq!(answer(second.fabric, second.domain), Ok(()));
    let no_data = Err(-(FiErrno::FI_ENODATA.get() as c_int));
    assert_eq!(answer(first.fabric, second.domain), no_data);
    assert_eq!(answer(second.fabric, first.domain), no_data);
}

/// fi_fabric(3), fi_domain(3): "On output from fi_getinfo, if no fabric was specified, but
/// the user has an opened instance of the named fabric, this will reference the first opened
/// instance. If no instance has been opened, this field will be NULL", and likewise the
/// domain: the first open domain of the answer's fabric, and the fabric of a domain the hints
/// name alone.
#[test]
fn the_answer_names_the_first_open_fabric_and_domain() {
    let named = |fabric: *mut FidFabric, domain: *mut FidDomain| {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe {
            (*hints.info.fabric_attr).fabric = fabric;
            (*hints.info.domain_attr).domain = domain;
        }
        let info = getinfo(None, None, 0, Some(&hints)).expect("getinfo");
        // SAFETY: the provider's answers, read, then freed once.
        unsafe {
            let mut named = Vec::new();
            let mut i = info;
            while !i.is_null() {
                named.push(((*(*i).fabric_attr).fabric, (*(*i).domain_attr).domain));
                i = (*i).next;
            }
            uet_fi::info::free_info(info);
            assert!(!named.is_empty());
            assert!(named.iter().all(|&n| n == named[0]), "{named:?}");
            named[0]
        }
    };
    assert_eq!(named(null_mut(), null_mut()), (null_mut(), null_mut()));
    let first = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let second = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let (f1, d1, f2, d2) = (first.fabric, first.domain, second.fabric, second.domain);
    assert_eq!(named(null_mut(), null_mut()), (f1, d1));
    assert_eq!(named(f2, null_mut()), (f2, d2));
    assert_eq!(named(null_mut(), d2), (f2, d2));
    assert_eq!(named(f1, d1), (f1, d1));
    drop(first);
    assert_eq!(named(null_mut(), null_mut()), (f2, d2));
    drop(second);
    assert_eq!(named(null_mut(), null_mut()), (null_mut(), null_mut()));
}

/// The fields of a `mem_tag_format` (fi_endpoint(3)): its alternating runs of 1 and 0 bits
/// below the leading 0 bits, from the top, by width.
fn tag_fields(format: u64) -> Vec<u32> {
    let mut fields = Vec::new();
    let mut bit = 64 - format.leading_zeros();
    while bit > 0 {
        let ones = (format >> (bit - 1)) & 1 == 1;
        let mut width = 0;
        while bit > 0 && ((format >> (bit - 1)) & 1 == 1) == ones {
            width += 1;
            bit -= 1;
        }
        fields.push(width);
    }
    fields
}

#[test]
fn the_answer_gives_a_tag_format_with_the_fields_the_hints_ask_for() {
    let answer = |format: u64| {
        let hints = Hints::new(FI_TAGGED, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe { (*hints.info.ep_attr).mem_tag_format = format };
        let info = getinfo(None, None, 0, Some(&hints)).unwrap();
        // SAFETY: the provider's answer, read, then freed once.
        unsafe {
            let got = (*(*info).ep_attr).mem_tag_format;
            uet_fi::info::free_info(info);
            got
        }
    };
    // None asked: one field of every bit, all matched.
    assert_eq!(answer(0), u64::MAX);
    // fi_endpoint(3): "A provider must return a tag format that supports the requested
    // number of fields, with each field being at least the size requested"; and no bit is
    // ignored, for the provider matches every one.
    for format in [
        0x30FF,
        0xFFFF,
        0x0F0F_0F0F,
        1 << 63,
        0xFFFF_0000_0000_0000,
        0xAAAA,
    ] {
        let got = answer(format);
        let (asked, given) = (tag_fields(format), tag_fields(got));
        assert_eq!(
            given.len(),
            asked.len(),
            "{got:#x} answers the fields of {format:#x}"
        );
        for (a, g) in asked.iter().zip(&given) {
            assert!(g >= a, "{got:#x} answers the fields of {format:#x}");
        }
        assert_eq!(got.leading_zeros(), 0, "{got:#x}: no bit is ignored");
    }
}

#[test]
fn an_error_read_without_a_buffer_points_err_data_at_the_cqs_copy_of_the_message() {
    let pair = Pair::new(0);
    let fake = pair.nobody();
    for _ in 0..2 {
        pair.inject_lost(fake);
    }
    assert_eq!(pair.wait(0).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair.readerr(0).unwrap();
    assert!(
        !e.err_data.is_null() && e.err_data_size > 0,
        "{:?}",
        e.err_data
    );
    // SAFETY: the CQ's NUL-terminated copy, valid until the next read of the CQ.
    let message = unsafe { CStr::from_ptr(e.err_data.cast()) };
    assert_eq!(message.to_bytes().len(), e.err_data_size);
    assert!(!message.to_string_lossy().trim().is_empty());
    let owned = message.to_owned();

    // With a buffer of its own (API 1.5 and later), the application gets the message there,
    // truncated to fit.
    assert_eq!(pair.wait(0).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let mut buf = [0u8; 8];
    // SAFETY: a plain-data structure.
    let mut e: FiCqErrEntry = unsafe { core::mem::zeroed() };
    e.err_data = buf.as_mut_ptr().cast();
    e.err_data_size = buf.len();
    // SAFETY: an open CQ; a valid entry whose err_data holds err_data_size bytes.
    assert_eq!(unsafe { (pair.cq(0).readerr)(pair.p[0].cq, &mut e, 0) }, 1);
    assert_eq!(e.err_data, buf.as_mut_ptr().cast());
    assert_eq!(e.err_data_size, buf.len());
    assert_eq!(&buf[..], &owned.to_bytes()[..buf.len()]);
}

/// On a fabric opened with an API before 1.5, `fi_eq_readerr` ignores the application's
/// `err_data` buffer and points it at the queue's own copy (fi_eq(3), compatibility note).
#[test]
fn before_api_1_5_an_eq_error_read_ignores_the_applications_buffer() {
    let info = getinfo(None, None, 0, Some(&Hints::new(0, FI_FORMAT_UNSPEC))).expect("getinfo");
    let mut fabric = null_mut();
    let mut domain = null_mut();
    let mut eq = null_mut();
    let mut eq_attr = FiEqAttr {
        size: 0,
        flags: 0,
        wait_obj: FI_WAIT_UNSPEC,
        signaling_vector: 0,
        wait_set: null_mut(),
    };
    // SAFETY: the provider's info, its fabric attributes set to API 1.4; out pointers valid.
    unsafe {
        (*(*info).fabric_attr).api_version = fi_version(1, 4);
        assert_eq!(
            (provider().fabric)((*info).fabric_attr, &mut fabric, null_mut()),
            0
        );
        assert_eq!(
            ((*(*fabric).ops).domain)(fabric, info, &mut domain, null_mut()),
            0
        );
        assert_eq!(
            ((*(*fabric).ops).eq_open)(fabric, &mut eq_attr, &mut eq, null_mut()),
            0
        );
    }
    let mut attr = av_attr(4);
    attr.flags = uet_av::FI_EVENT;
    let mut av = null_mut();
    let zeros = [0u8; 32];
    let mut out = 0;
    let mut buf = [0x55u8; 64];
    // SAFETY: open objects; valid attributes, addresses and out pointers.
    unsafe {
        assert_eq!(
            ((*(*domain).ops).av_open)(domain, &mut attr, &mut av, null_mut()),
            0
        );
        assert_eq!(
            ((*(*av).fid.ops).bind)(&mut (*av).fid, &mut (*eq).fid, 0),
            0
        );
        assert_eq!(
            ((*(*av).ops).insert)(av, zeros.as_ptr().cast(), 1, &mut out, 0, null_mut()),
            0
        );
        let mut event = 0u32;
        let mut entry: FiEqEntry = core::mem::zeroed();
        let len = core::mem::size_of::<FiEqEntry>();
        let ret = ((*(*eq).ops).sread)(eq, &mut event, (&raw mut entry).cast(), len, 2000, 0);
        assert_eq!(ret, neg(FiErrno::FI_EAVAIL));
        let mut e: FiEqErrEntry = core::mem::zeroed();
        e.err_data = buf.as_mut_ptr().cast();
        e.err_data_size = buf.len();
        assert_eq!(
            ((*(*eq).ops).readerr)(eq, &mut e, 0),
            core::mem::size_of::<FiEqErrEntry>() as isize
        );
        assert!(e.err > 0);
        assert!(!e.err_data.is_null() && e.err_data != buf.as_mut_ptr().cast());
        let message = CStr::from_ptr(e.err_data.cast());
        assert_eq!(message.to_bytes().len(), e.err_data_size);
        assert!(e.err_data_size > 0);
        assert!(
            buf.iter().all(|&b| b == 0x55),
            "the application's buffer is untouched"
        );
        for fid in [
            &raw mut (*av).fid,
            &raw mut (*eq).fid,
            &raw mut (*domain).fid,
            &raw mut (*fabric).fid,
        ] {
            assert_eq!(close(fid), 0);
        }
        uet_fi::info::free_info(info);
    }
}

/// On a fabric opened with an API before 1.5, `fi_cq_readerr` writes the entry as those
/// versions define `struct fi_cq_err_entry`, which ends at `err_data`: the `err_data_size`
/// of later versions lies past the application's structure, and is left as it was. The
/// message is the CQ's NUL-terminated copy (fi_cq(3), compatibility note).
#[test]
fn before_api_1_5_a_cq_error_read_writes_nothing_past_err_data() {
    let pair = Pair::at_api(fi_version(1, 4));
    let fake = pair.nobody();
    pair.inject_lost(fake);
    assert_eq!(pair.wait(0).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let mut buf = [0x55u8; 16];
    // SAFETY: a plain-data structure.
    let mut e: FiCqErrEntry = unsafe { core::mem::zeroed() };
    e.err_data = buf.as_mut_ptr().cast();
    // What follows the application's 1.4 structure in memory.
    e.err_data_size = 0x5a5a;
    // SAFETY: an open CQ; a valid entry.
    assert_eq!(unsafe { (pair.cq(0).readerr)(pair.p[0].cq, &mut e, 0) }, 1);
    assert_eq!(
        e.err_data_size, 0x5a5a,
        "written past the 1.4 fi_cq_err_entry"
    );
    assert!(e.err > 0);
    assert!(!e.err_data.is_null() && e.err_data != buf.as_mut_ptr().cast());
    // SAFETY: the CQ's NUL-terminated copy, valid until the next read of the CQ.
    let message = unsafe { CStr::from_ptr(e.err_data.cast()) };
    assert!(!message.to_bytes().is_empty());
    assert!(
        buf.iter().all(|&b| b == 0x55),
        "the application's buffer is untouched"
    );
}

/// `fi_getinfo` with `FI_MSG` hints as `edit` leaves their endpoint and domain attributes:
/// the answer's domain attributes as `read` finds them, or the negative errno.
fn answer_to<R>(
    edit: impl FnOnce(&mut FiEpAttr, &mut FiDomainAttr),
    read: impl FnOnce(&FiDomainAttr) -> R,
) -> Result<R, c_int> {
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes, boxed beside them.
    unsafe { edit(&mut *hints.info.ep_attr, &mut *hints.info.domain_attr) };
    let info = getinfo(None, None, 0, Some(&hints))?;
    // SAFETY: the provider's own answer, read, then freed once.
    unsafe {
        let r = read(&*(*info).domain_attr);
        uet_fi::info::free_info(info);
        Ok(r)
    }
}

const ENODATA: c_int = -(FiErrno::FI_ENODATA.get() as c_int);

/// A shared context is not served: `fi_getinfo` answers `-FI_ENODATA` for hints asking for
/// one, and `fi_endpoint` refuses an info that asks for several contexts (a scalable
/// endpoint, `fi_scalable_ep`'s); several contexts are answered on `FI_EP_RDM`.
#[test]
fn hints_and_endpoints_asking_for_several_or_shared_contexts_are_refused() {
    for (tx, rx) in [(FI_SHARED_CONTEXT, 1), (1, FI_SHARED_CONTEXT)] {
        let answer = answer_to(
            |ep, _| {
                ep.tx_ctx_cnt = tx;
                ep.rx_ctx_cnt = rx;
            },
            |_| (),
        );
        assert_eq!(answer, Err(ENODATA), "tx_ctx_cnt {tx}, rx_ctx_cnt {rx}");
    }
    for (tx, rx) in [(2, 0), (0, 4)] {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own ep_attr.
        unsafe {
            (*hints.info.ep_attr).tx_ctx_cnt = tx;
            (*hints.info.ep_attr).rx_ctx_cnt = rx;
        }
        let info = getinfo(None, None, 0, Some(&hints)).expect("several contexts are served");
        // SAFETY: the provider's own answer, read, then freed once.
        unsafe {
            assert!((*info).next.is_null(), "on FI_EP_RDM only");
            let ep = &*(*info).ep_attr;
            assert_eq!(
                (ep.ep_type, ep.tx_ctx_cnt, ep.rx_ctx_cnt),
                (FI_EP_RDM, tx.max(1), rx.max(1))
            );
            uet_fi::info::free_info(info);
        }
    }
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own ep_attr.
    unsafe {
        (*hints.info.ep_attr).tx_ctx_cnt = 1;
        (*hints.info.ep_attr).rx_ctx_cnt = 0;
    }
    let open = Open::with_hints(&hints);
    // SAFETY: the provider's own info, restored before it is freed.
    unsafe {
        assert_eq!((*(*open.info).ep_attr).tx_ctx_cnt, 1);
        (*(*open.info).ep_attr).rx_ctx_cnt = 4;
        let mut ep = null_mut();
        let ret =
            ((*(*open.domain).ops).endpoint)(open.domain, open.info.cast(), &mut ep, null_mut());
        assert_eq!(ret, -(FiErrno::FI_EINVAL.get() as c_int));
        assert!(ep.is_null());
        (*(*open.info).ep_attr).rx_ctx_cnt = 1;
    }
}

/// Edit the provider's `FI_EP_RDM` answer `i` into the `FI_EP_DGRAM` one `fi_getinfo` gives:
/// its type, and its largest message and inject size within one packet of the simulated NIC.
fn as_dgram(i: &mut FiInfo) {
    let mtu = usize::from(uet_sim::NicConfig::new([10, 0, 0, 1].into()).mtu);
    // SAFETY: the info's own attributes.
    unsafe {
        (*i.ep_attr).ep_type = FI_EP_DGRAM;
        (*i.ep_attr).max_msg_size = (*i.ep_attr).max_msg_size.min(mtu);
        (*i.tx_attr).inject_size = (*i.tx_attr).inject_size.min(mtu);
    }
}

/// `fi_endpoint` and `fi_scalable_ep`, by the `scalable` flag [`open_edited`] takes, and name.
const OPENERS: [(bool, &str); 2] = [(false, "fi_endpoint"), (true, "fi_scalable_ep")];

/// Each edit `edit(info, k)` of `open`'s info, named `names[k]`, opens no endpoint (or
/// scalable endpoint, `what` says which): `-FI_EINVAL`.
fn each_edit_refused(
    open: &Open,
    scalable: bool,
    what: &str,
    names: &[&str],
    edit: impl Fn(&mut FiInfo, usize),
) {
    let einval = -(FiErrno::FI_EINVAL.get() as c_int);
    for (which, name) in names.iter().enumerate() {
        let ret = open_edited(open, scalable, |i| edit(i, which));
        assert_eq!(ret, einval, "{what}: {name}");
    }
}

/// `fi_endpoint` (or `fi_scalable_ep`) on `open`'s domain with its info as `edit` leaves it,
/// the info restored after: 0 (the object closed at once) or the negative errno, and then no
/// object.
fn open_edited(open: &Open, scalable: bool, edit: impl Fn(&mut FiInfo)) -> c_int {
    // SAFETY: the provider's own info and attributes, edited and restored bit for bit; an
    // open domain; a valid out pointer; an endpoint opened is closed once.
    unsafe {
        let info = open.info;
        let (tx, rx, ep_attr) = ((*info).tx_attr, (*info).rx_attr, (*info).ep_attr);
        let saved = (
            core::ptr::read(info),
            core::ptr::read(tx),
            core::ptr::read(rx),
            core::ptr::read(ep_attr),
        );
        edit(&mut *info);
        let mut ep: *mut FidEp = null_mut();
        let ops = &*(*open.domain).ops;
        let ret = if scalable {
            (ops.scalable_ep)(open.domain, info.cast(), (&raw mut ep).cast(), null_mut())
        } else {
            (ops.endpoint)(open.domain, info.cast(), (&raw mut ep).cast(), null_mut())
        };
        core::ptr::write(tx, saved.1);
        core::ptr::write(rx, saved.2);
        core::ptr::write(ep_attr, saved.3);
        core::ptr::write(info, saved.0);
        if ret == 0 {
            assert_eq!(close(&mut (*ep).fid), 0);
        } else {
            assert!(ep.is_null());
        }
        ret
    }
}

/// `FI_RMA` (`rdma/fabric.h`): a capability the provider does not serve.
const FI_RMA: u64 = 1 << 2;

/// An `fi_info` edited after `fi_getinfo` to ask for capabilities the provider does not
/// serve, in `caps` or a context's, opens no endpoint (`-FI_EINVAL`, as `fi_tx_context`
/// refuses them): with `FI_DIRECTED_RECV` a receive would take messages of any source.
#[test]
fn fi_endpoint_and_fi_scalable_ep_refuse_capabilities_the_provider_does_not_serve() {
    let open = Open::with_hints(&sep_hints(1, 1));
    let einval = -(FiErrno::FI_EINVAL.get() as c_int);
    for (scalable, what) in OPENERS {
        assert_eq!(
            open_edited(&open, scalable, |_| ()),
            0,
            "{what} as answered"
        );
        assert_eq!(
            open_edited(&open, scalable, |i| i.caps |= FI_DIRECTED_RECV),
            einval,
            "{what}: caps FI_DIRECTED_RECV"
        );
        assert_eq!(
            open_edited(&open, scalable, |i| i.caps |= FI_RMA),
            einval,
            "{what}: caps FI_RMA"
        );
        assert_eq!(
            // SAFETY: the info's own rx_attr.
            open_edited(&open, scalable, |i| unsafe {
                (*i.rx_attr).caps |= FI_DIRECTED_RECV
            }),
            einval,
            "{what}: rx_attr->caps FI_DIRECTED_RECV"
        );
        assert_eq!(
            // SAFETY: the info's own tx_attr.
            open_edited(&open, scalable, |i| unsafe { (*i.tx_attr).caps |= FI_RMA }),
            einval,
            "{what}: tx_attr->caps FI_RMA"
        );
        assert_eq!(
            // SAFETY: the info's own tx_attr.
            open_edited(&open, scalable, |i| unsafe { (*i.tx_attr).caps |= FI_RECV }),
            einval,
            "{what}: tx_attr->caps FI_RECV"
        );
    }
}

/// An `fi_info` edited after `fi_getinfo` into another endpoint type keeps only the
/// capabilities that type has, as `fi_getinfo` answers them: named receive contexts are
/// `FI_EP_RDM`'s (a datagram or connected domain's AV names none), and an `FI_EP_MSG`
/// endpoint binds no AV and reports no source. Others open no endpoint (`-FI_EINVAL`).
#[test]
fn fi_endpoint_refuses_capabilities_its_endpoint_type_lacks() {
    let open = Open::new(FI_MSG | FI_TAGGED, FI_FORMAT_UNSPEC);
    let einval = -(FiErrno::FI_EINVAL.get() as c_int);
    let base = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV;
    for (ep_type, caps, want) in [
        (FI_EP_RDM, base | FI_NAMED_RX_CTX | FI_SOURCE_CAP, 0),
        (FI_EP_DGRAM, base | FI_SOURCE_CAP | uet_av::FI_SHARED_AV, 0),
        (FI_EP_DGRAM, base | FI_NAMED_RX_CTX, einval),
        (FI_EP_MSG, base, 0),
        (FI_EP_MSG, base | FI_NAMED_RX_CTX, einval),
        (FI_EP_MSG, base | FI_SOURCE_CAP, einval),
        (FI_EP_MSG, base | uet_av::FI_SHARED_AV, einval),
        (FI_EP_MSG, base | FI_AV_USER_ID, einval),
    ] {
        let ret = open_edited(&open, false, |i| {
            if ep_type == FI_EP_DGRAM {
                as_dgram(i);
            }
            // SAFETY: the info's own ep_attr.
            unsafe { (*i.ep_attr).ep_type = ep_type };
            i.caps = caps;
        });
        assert_eq!(ret, want, "type {ep_type}, caps {caps:#x}");
    }
}

/// An `fi_info` edited after `fi_getinfo` to give the flagless calls default flags the
/// provider does not honour opens no endpoint (`-FI_EINVAL`), as `fi_getinfo` refuses hints
/// asking them: `FI_MATCH_COMPLETE`, which a flagless `fi_tsend` would not meet, and
/// `FI_MULTI_RECV`, which no receive serves. The flags it honours open one.
#[test]
fn fi_endpoint_and_fi_scalable_ep_refuse_default_flags_the_provider_does_not_honour() {
    const FI_MATCH_COMPLETE: u64 = 1 << 31;
    const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
    const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
    let open = Open::with_hints(&sep_hints(1, 1));
    let einval = -(FiErrno::FI_EINVAL.get() as c_int);
    for (scalable, what) in OPENERS {
        let with = |tx: u64, rx: u64| {
            // SAFETY: the info's own attributes.
            open_edited(&open, scalable, |i| unsafe {
                (*i.tx_attr).op_flags = tx;
                (*i.rx_attr).op_flags = rx;
            })
        };
        assert_eq!(
            with(
                FI_COMPLETION | FI_DELIVERY_COMPLETE,
                FI_COMPLETION | FI_TRANSMIT_COMPLETE
            ),
            0,
            "{what}: honoured flags"
        );
        assert_eq!(
            with(FI_COMPLETION | FI_MATCH_COMPLETE, 0),
            einval,
            "{what}: tx_attr->op_flags FI_MATCH_COMPLETE"
        );
        assert_eq!(
            with(0, FI_COMPLETION | FI_MULTI_RECV),
            0,
            "{what}: rx_attr->op_flags FI_MULTI_RECV, which flagless receives honour"
        );
        assert_eq!(
            with(FI_MULTI_RECV, 0),
            einval,
            "{what}: tx_attr->op_flags FI_MULTI_RECV"
        );
    }
}

/// An `fi_info` edited after `fi_getinfo` to ask for more than the sizes it answered (ring
/// entries, iovecs, inject and message sizes, RMA iovecs) opens no endpoint (`-FI_EINVAL`):
/// the endpoint would not have them, and `fi_getinfo` refuses hints asking them. The answered
/// sizes, and smaller ones, open one.
#[test]
fn fi_endpoint_and_fi_scalable_ep_refuse_sizes_beyond_those_fi_getinfo_answers() {
    let open = Open::with_hints(&sep_hints(1, 1));
    let names = [
        "tx_attr->size",
        "tx_attr->iov_limit",
        "tx_attr->inject_size",
        "tx_attr->rma_iov_limit",
        "rx_attr->size",
        "rx_attr->iov_limit",
        "ep_attr->max_msg_size",
    ];
    // The size `names[which]` of `i`, one more than answered (`rma_iov_limit`: 1).
    let bump = |i: &mut FiInfo, which: usize| {
        // SAFETY: the info's own attributes.
        let (tx, rx, ep) = unsafe { (&mut *i.tx_attr, &mut *i.rx_attr, &mut *i.ep_attr) };
        match which {
            0 => tx.size += 1,
            1 => tx.iov_limit += 1,
            2 => tx.inject_size += 1,
            3 => tx.rma_iov_limit = 1,
            4 => rx.size += 1,
            5 => rx.iov_limit += 1,
            _ => ep.max_msg_size += 1,
        }
    };
    for (scalable, what) in OPENERS {
        assert_eq!(
            open_edited(&open, scalable, |_| ()),
            0,
            "{what} as answered"
        );
        // SAFETY: the info's own attributes.
        let smaller = open_edited(&open, scalable, |i| unsafe {
            (*i.tx_attr).size = 1;
            (*i.tx_attr).inject_size = 0;
            (*i.rx_attr).iov_limit = 1;
            (*i.ep_attr).max_msg_size = 64;
        });
        assert_eq!(smaller, 0, "{what}: smaller sizes");
        each_edit_refused(&open, scalable, what, &names, bump);
    }
}

/// An `fi_info` edited after `fi_getinfo` to ask for an ordering (`msg_order`, `comp_order`,
/// `max_order_*_size`) or another protocol opens no endpoint (`-FI_EINVAL`): messages travel
/// unordered over UET, and `fi_getinfo` refuses hints asking otherwise.
#[test]
fn fi_endpoint_and_fi_scalable_ep_refuse_an_ordering_or_another_protocol() {
    let open = Open::with_hints(&sep_hints(1, 1));
    let names = [
        "tx_attr->msg_order",
        "tx_attr->comp_order",
        "rx_attr->msg_order",
        "rx_attr->comp_order",
        "ep_attr->max_order_raw_size",
        "ep_attr->max_order_waw_size",
        "ep_attr->protocol",
        "ep_attr->protocol_version",
    ];
    let edit = |i: &mut FiInfo, which: usize| {
        // SAFETY: the info's own attributes.
        let (tx, rx, ep) = unsafe { (&mut *i.tx_attr, &mut *i.rx_attr, &mut *i.ep_attr) };
        match which {
            0 => tx.msg_order = FI_ORDER_SAS,
            1 => tx.comp_order = 1,
            2 => rx.msg_order = FI_ORDER_SAS,
            3 => rx.comp_order = 1,
            4 => ep.max_order_raw_size = 8,
            5 => ep.max_order_waw_size = 8,
            6 => ep.protocol = 1,
            _ => ep.protocol_version += 1,
        }
    };
    for (scalable, what) in OPENERS {
        // SAFETY: the info's own ep_attr.
        let any = open_edited(&open, scalable, |i| unsafe {
            ((*i.ep_attr).protocol, (*i.ep_attr).protocol_version) = (0, 0)
        });
        assert_eq!(any, 0, "{what}: FI_PROTO_UNSPEC");
        each_edit_refused(&open, scalable, what, &names, edit);
    }
}

/// An `fi_info` edited after `fi_getinfo` to name an address format the provider does not
/// serve (`FI_SOCKADDR_IN`) opens no endpoint (`-FI_EINVAL`, as `fi_passive_ep` refuses it):
/// its `fi_getname` would give a UET address where a `sockaddr_in` is expected.
#[test]
fn fi_endpoint_and_fi_scalable_ep_refuse_an_address_format_the_provider_does_not_serve() {
    const FI_SOCKADDR_IN: u32 = 2;
    let open = Open::with_hints(&sep_hints(1, 1));
    let einval = -(FiErrno::FI_EINVAL.get() as c_int);
    for (scalable, what) in OPENERS {
        for (format, want) in [
            (FI_FORMAT_UNSPEC, 0),
            (FI_ADDR_STR, 0),
            (FI_SOCKADDR_IN, einval),
        ] {
            let ret = open_edited(&open, scalable, |i| i.addr_format = format);
            assert_eq!(ret, want, "{what}: addr_format {format}");
        }
    }
}

/// The domain's side of the same request: hints asking for a domain that shares contexts
/// among endpoints (`max_ep_stx_ctx`, `max_ep_srx_ctx` > 0) are `-FI_ENODATA`; several
/// transmit contexts per endpoint (`max_ep_tx_ctx`) are served up to the NIC's.
#[test]
fn hints_asking_the_domain_for_several_or_shared_contexts_per_endpoint_are_refused() {
    for (stx, srx) in [(1, 0), (0, 4)] {
        let answer = answer_to(
            |_, d| {
                d.max_ep_stx_ctx = stx;
                d.max_ep_srx_ctx = srx;
            },
            |_| (),
        );
        assert_eq!(
            answer,
            Err(ENODATA),
            "max_ep_stx_ctx {stx}, max_ep_srx_ctx {srx}"
        );
    }
    let served = answer_to(
        |_, d| d.max_ep_tx_ctx = 2,
        |d| (d.max_ep_tx_ctx, d.max_ep_stx_ctx, d.max_ep_srx_ctx),
    );
    assert_eq!(served, Ok((2, 0, 0)), "two transmit contexts are served");
}

/// The provider registers no memory (`fi_mr_reg` is `-FI_ENOSYS`) and serves no RMA: hints
/// asking a domain for memory registrations (`mr_key_size`, `mr_cnt`, `mr_iov_limit`) or a
/// transmit context for RMA vectors (`rma_iov_limit`) are `-FI_ENODATA`, as fi_getinfo(3) has
/// a hint the provider cannot meet, rather than answered with 0 of what they asked.
#[test]
fn hints_asking_for_memory_registrations_or_rma_vectors_are_refused() {
    let answered = answer_to(|_, _| (), |d| (d.mr_key_size, d.mr_cnt, d.mr_iov_limit));
    assert_eq!(answered, Ok((0, 0, 0)));
    let asks: [fn(&mut FiDomainAttr); 3] = [
        |d| d.mr_key_size = 8,
        |d| d.mr_cnt = 1,
        |d| d.mr_iov_limit = 1,
    ];
    for ask in asks {
        assert_eq!(answer_to(|_, d| ask(d), |_| ()), Err(ENODATA));
    }
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own tx_attr.
    unsafe { (*hints.info.tx_attr).rma_iov_limit = 1 };
    assert_eq!(getinfo(None, None, 0, Some(&hints)).err(), Some(ENODATA));
}

/// `domain_attr->max_err_data` is the provider's bound on error data: answered, and a hint
/// asking for more is `-FI_ENODATA`.
#[test]
fn the_answer_bounds_error_data_and_hints_asking_for_more_are_refused() {
    let bound = answer_to(|_, _| (), |d| d.max_err_data).unwrap();
    assert!(bound > 0);
    for (asked, ok) in [(bound, true), (bound + 1, false), (usize::MAX, false)] {
        let answer = answer_to(|_, d| d.max_err_data = asked, |_| ());
        assert_eq!(answer.is_ok(), ok, "max_err_data {asked}: {answer:?}");
        if !ok {
            assert_eq!(answer, Err(ENODATA));
        }
    }
}

/// The threading, progress and resource management models of the hints: any of their
/// enumerations is served (`FI_THREAD_SAFE`, `FI_PROGRESS_AUTO` serve every model an
/// application may ask, and `FI_RM_ENABLED` `FI_RM_DISABLED`), and a value none has is
/// `-FI_ENODATA`: no model of the provider is one the hints name.
#[test]
fn hints_naming_no_threading_progress_or_resource_model_are_refused() {
    type Set = fn(&mut FiDomainAttr, c_int);
    let fields: [(&str, Set, c_int); 4] = [
        ("threading", |d, v| d.threading = v, 5),
        ("control_progress", |d, v| d.control_progress = v, 2),
        ("data_progress", |d, v| d.data_progress = v, 2),
        ("resource_mgmt", |d, v| d.resource_mgmt = v, 2),
    ];
    for (name, set, last) in fields {
        for v in 0..=last {
            let answer = answer_to(|_, d| set(d, v), |_| ());
            assert_eq!(answer, Ok(()), "{name} {v}");
        }
        for v in [last + 1, 1000, -1] {
            let answer = answer_to(|_, d| set(d, v), |_| ());
            assert_eq!(answer, Err(ENODATA), "{name} {v}");
        }
    }
}

/// A raw pointer handed to other threads: the provider's objects are `FI_THREAD_SAFE`.
struct Shared<T>(*mut T);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Shared<T> {}

// SAFETY: the domain is FI_THREAD_SAFE: its objects may be used from any thread at once.
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as for `Send`.
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer (a method, so that a closure captures the whole wrapper).
    fn get(self) -> *mut T {
        self.0
    }
}

#[test]
fn fi_cq_signal_wakes_every_thread_waiting_in_fi_cq_sread() {
    let pair = Pair::new(0);
    let cq = Shared(pair.p[0].cq);
    let sread = pair.cq(0).sread;
    for _ in 0..3 {
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut e = [0u8; 64];
                    let start = std::time::Instant::now();
                    // SAFETY: an open, waitable CQ; room for one entry.
                    let ret = unsafe { sread(cq.get(), e.as_mut_ptr().cast(), 1, null(), 5000) };
                    (ret, start.elapsed())
                })
            })
            .collect();
        // Every waiter is blocked before the signal.
        std::thread::sleep(std::time::Duration::from_millis(100));
        // SAFETY: an open CQ with a wait object.
        assert_eq!(unsafe { (pair.cq(0).signal)(pair.p[0].cq) }, 0);
        for w in waiters {
            let (ret, waited) = w.join().unwrap();
            assert_eq!(ret, neg(FiErrno::FI_EAGAIN));
            assert!(
                waited < std::time::Duration::from_millis(2500),
                "a waiter slept {waited:?} through fi_cq_signal"
            );
        }
    }
}

/// Have SIGUSR2 run a handler that does nothing, so that a signal sent to a thread only
/// interrupts the system call it sleeps in.
fn catch_sigusr2() {
    extern "C" fn ignore(_: c_int) {}
    // SAFETY: a plain-data structure, then filled in; the handler does nothing, and the tests
    // send SIGUSR2 to their own waiting threads alone.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = ignore as extern "C" fn(c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, null_mut()), 0);
    }
}

/// Send SIGUSR2 ([`catch_sigusr2`]) to `thread` again and again, for up to two seconds, until
/// it sends its call's return on `ended`: the return, or `None` when the call went on. Again,
/// since a signal that lands between two of the call's sleeps interrupts none.
fn signal_until_it_returns(
    thread: libc::pthread_t,
    ended: &std::sync::mpsc::Receiver<isize>,
) -> Option<isize> {
    for _ in 0..40 {
        // SAFETY: the waiting thread, alive until it sends its return.
        assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGUSR2) }, 0);
        if let Ok(ret) = ended.recv_timeout(std::time::Duration::from_millis(50)) {
            return Some(ret);
        }
    }
    None
}

/// Run `wait`, a call that blocks, in a thread of its own, and after 100 ms signal that thread
/// until the call returns ([`signal_until_it_returns`]): the return, or `None` when it slept
/// through the signals; and the receiver its return comes on later.
fn signal_a_waiting_call(
    wait: impl FnOnce() -> isize + Send + 'static,
) -> (Option<isize>, std::sync::mpsc::Receiver<isize>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (thread_tx, thread_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: no argument.
        let _ = thread_tx.send(unsafe { libc::pthread_self() });
        let _ = tx.send(wait());
    });
    let thread = thread_rx.recv().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    (signal_until_it_returns(thread, &rx), rx)
}

/// A thread blocked in `fi_cq_sread` without end returns `-FI_EAGAIN` when a signal is
/// delivered to it: fi_cq(3) has threads blocking there return when "signaled by some external
/// source", "even if the timeout ... was specified as infinite".
#[test]
fn a_signal_delivered_to_a_thread_in_fi_cq_sread_ends_its_wait() {
    catch_sigusr2();
    let pair = Pair::new(0);
    let cq = Shared(pair.p[0].cq);
    let sread = pair.cq(0).sread;
    let (ended, rx) = signal_a_waiting_call(move || {
        let mut e = [0u8; 64];
        // SAFETY: an open, waitable CQ; room for one entry.
        unsafe { sread(cq.get(), e.as_mut_ptr().cast(), 1, null(), -1) }
    });
    if ended.is_none() {
        // SAFETY: an open CQ with a wait object: ends the wait, so the pair can close.
        assert_eq!(unsafe { (pair.cq(0).signal)(pair.p[0].cq) }, 0);
        let _ = rx.recv_timeout(std::time::Duration::from_secs(10));
    }
    assert_eq!(
        ended,
        Some(neg(FiErrno::FI_EAGAIN)),
        "fi_cq_sread slept through signals"
    );
}

/// A thread blocked in `fi_eq_sread` without end returns `-FI_EAGAIN` when a signal is
/// delivered to it, as fi_eq(3) has it ("signaled by some external source", "even if the
/// timeout ... was specified as infinite"), on each wait object that sleeps.
#[test]
fn a_signal_delivered_to_a_thread_in_fi_eq_sread_ends_its_wait() {
    catch_sigusr2();
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    for wait_obj in [FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_MUTEX_COND] {
        let eq = Shared(eq_open_on(open.fabric, wait_obj, 0).expect("fi_eq_open"));
        // SAFETY: an open EQ's operations, static.
        let sread = unsafe { (*(*eq.get()).ops).sread };
        let (ended, rx) = signal_a_waiting_call(move || {
            let mut event = 0u32;
            // SAFETY: a plain-data structure.
            let mut entry: FiEqEntry = unsafe { core::mem::zeroed() };
            let len = core::mem::size_of::<FiEqEntry>();
            // SAFETY: an open, waitable EQ; valid out pointers.
            unsafe { sread(eq.get(), &mut event, (&raw mut entry).cast(), len, -1, 0) }
        });
        // SAFETY: an open EQ nothing is bound to; a thread still waiting wakes with FI_EBADF.
        assert_eq!(unsafe { close(&mut (*eq.get()).fid) }, 0);
        if ended.is_none() {
            let _ = rx.recv_timeout(std::time::Duration::from_secs(10));
        }
        assert_eq!(
            ended,
            Some(neg(FiErrno::FI_EAGAIN)),
            "fi_eq_sread of wait object {wait_obj} slept through signals"
        );
    }
}

/// `fi_cq_sread` and `fi_cntr_wait` without end (a negative timeout) when the NIC stops under
/// them — here its function is reset — end with `-FI_EIO`: a stopped NIC writes no completion
/// and raises no vector, so nothing else would end them. (The test resets the process's NIC:
/// it runs in a process of its own.)
#[test]
fn fi_cq_sread_and_fi_cntr_wait_without_end_end_with_eio_once_the_nic_stops() {
    if !common::in_own_process(
        "fi_cq_sread_and_fi_cntr_wait_without_end_end_with_eio_once_the_nic_stops",
    ) {
        return;
    }
    let pair = Pair::with_counters(0, FI_WAIT_UNSPEC, |_| {}, 1, [&[(0, FI_RECV)], &[]]);
    let cq = Shared(pair.p[0].cq);
    let cntr = Shared(pair.cntrs[0]);
    let sread = pair.cq(0).sread;
    let (tx, rx) = std::sync::mpsc::channel();
    let cq_tx = tx.clone();
    std::thread::spawn(move || {
        let mut e = [0u8; 64];
        // SAFETY: an open, waitable CQ; room for one entry.
        let ret = unsafe { sread(cq.get(), e.as_mut_ptr().cast(), 1, null(), -1) };
        let _ = cq_tx.send(("fi_cq_sread", ret));
    });
    std::thread::spawn(move || {
        let ret = cntr_wait(cntr.get(), 1, -1) as isize;
        let _ = tx.send(("fi_cntr_wait", ret));
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(rx.try_recv().is_err(), "nothing to read yet");
    reset_the_process_nic();
    // A generous bound, only so that a wait without end fails the test.
    let mut ended: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(std::time::Duration::from_secs(60)))
        .collect();
    ended.sort_by_key(|r| r.map(|(call, _)| call).ok());
    assert_eq!(
        ended,
        [
            Ok(("fi_cntr_wait", neg(FiErrno::FI_EIO))),
            Ok(("fi_cq_sread", neg(FiErrno::FI_EIO)))
        ]
    );
    // Its endpoints, CQs and counter are left to the process's end: the NIC answers nothing.
    std::mem::forget(pair);
}

#[test]
fn a_cq_is_not_closed_under_a_thread_waiting_in_fi_cq_sread() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let cq = Shared(open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC));
    // SAFETY: an open CQ's operations, static.
    let ops = unsafe { &*(*cq.get()).ops };
    let sread = ops.sread;
    let waiter = std::thread::spawn(move || {
        let mut e = [0u8; 64];
        // SAFETY: an open, waitable CQ; room for one entry.
        unsafe { sread(cq.get(), e.as_mut_ptr().cast(), 1, null(), 2000) }
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    // SAFETY: an open CQ, which the waiting thread still reads.
    let ret = unsafe { close(&mut (*cq.get()).fid) };
    assert_eq!(
        ret as isize,
        neg(FiErrno::FI_EBUSY),
        "fi_close of a CQ a thread waits on"
    );
    // SAFETY: the CQ is still open.
    assert_eq!(unsafe { (ops.signal)(cq.get()) }, 0);
    assert_eq!(waiter.join().unwrap(), neg(FiErrno::FI_EAGAIN));
    // SAFETY: open, and no thread uses it any more.
    assert_eq!(unsafe { close(&mut (*cq.get()).fid) }, 0);
}

#[test]
fn a_thread_waiting_in_fi_eq_sread_wakes_cleanly_when_the_eq_is_closed() {
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    for _ in 0..20 {
        let mut eq = null_mut();
        let mut attr = FiEqAttr {
            size: 0,
            flags: 0,
            wait_obj: FI_WAIT_UNSPEC,
            signaling_vector: 0,
            wait_set: null_mut(),
        };
        // SAFETY: an open fabric; valid attributes and out pointer.
        unsafe {
            assert_eq!(
                ((*(*open.fabric).ops).eq_open)(open.fabric, &mut attr, &mut eq, null_mut()),
                0
            );
        }
        let eq = Shared(eq);
        // SAFETY: an open EQ's operations, static.
        let sread = unsafe { (*(*eq.get()).ops).sread };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut event = 0u32;
            // SAFETY: a plain-data structure.
            let mut entry: FiEqEntry = unsafe { core::mem::zeroed() };
            let len = core::mem::size_of::<FiEqEntry>();
            // SAFETY: an open, waitable EQ; valid out pointers.
            let ret = unsafe { sread(eq.get(), &mut event, (&raw mut entry).cast(), len, -1, 0) };
            let _ = tx.send(ret);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        // SAFETY: an open EQ nothing is bound to; the waiting thread is woken by the close.
        assert_eq!(unsafe { close(&mut (*eq.get()).fid) }, 0);
        // Memory the process allocates next may take the freed queue's place.
        let scribble: Vec<Vec<u8>> = (1..=64).map(|k| vec![0xff; k * 16]).collect();
        let woke = rx.recv_timeout(std::time::Duration::from_secs(2));
        drop(scribble);
        assert_eq!(
            woke,
            Ok(neg(FiErrno::FI_EBADF)),
            "fi_eq_sread across fi_close of its EQ"
        );
    }
}

/// `FI_WAIT_FD`: `fi_control(FI_GETWAIT)` gives a descriptor that, once `fi_trywait` says the
/// CQ may be slept on, polls readable when a completion lands or `fi_cq_signal` comes, and
/// not before; `fi_trywait` is `-FI_EAGAIN` while there is something to read.
#[test]
fn an_fi_wait_fd_cq_gives_a_descriptor_that_polls_readable_when_a_completion_lands() {
    let pair = Pair::with_wait_obj(FI_WAIT_FD);
    let fabric = pair._open.fabric;
    let control = |cq: *mut FidCq, command: c_int| -> (c_int, c_int) {
        let mut value: c_int = -1;
        // SAFETY: an open CQ; an int for the answer.
        let ret =
            unsafe { ((*(*cq).fid.ops).control)(&mut (*cq).fid, command, (&raw mut value).cast()) };
        (ret, value)
    };
    let trywait = |cq: *mut FidCq| -> c_int {
        // SAFETY: an open CQ and the fabric it was opened under.
        unsafe {
            let mut fids = [&raw mut (*cq).fid];
            ((*(*fabric).ops).trywait)(fabric, fids.as_mut_ptr(), 1)
        }
    };
    let cq = pair.p[1].cq;
    let (ret, fd) = control(cq, FI_GETWAIT);
    assert_eq!(ret, 0);
    assert!(fd >= 0);
    assert_eq!(control(cq, FI_GETWAITOBJ), (0, FI_WAIT_FD));
    let readable = |ms: c_int| fd_readable(fd, ms);
    let again = -(FiErrno::FI_EAGAIN.get() as c_int);

    assert_eq!(trywait(cq), 0);
    assert!(!readable(0), "readable with nothing to read");
    let mut rbuf = [0u8; 8];
    // SAFETY: open endpoints; the buffer outlives its completion, read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 0) }, 0);
    assert_eq!(pair.send(0, b"wake", 0), 0);
    assert!(
        readable(5000),
        "a completion landed and the descriptor stayed unreadable"
    );
    assert_eq!(trywait(cq), again, "a completion waits to be read");
    assert!(pair.read(1).is_ok());
    assert_eq!(&rbuf[..4], b"wake");
    assert_eq!(trywait(cq), 0);
    assert!(!readable(0), "readable again after the completion was read");

    // SAFETY: an open CQ with a wait object.
    assert_eq!(unsafe { (pair.cq(1).signal)(cq) }, 0);
    assert!(
        readable(5000),
        "fi_cq_signal left the descriptor unreadable"
    );
    assert_eq!(trywait(cq), again, "the signal is there to see");
    assert_eq!(trywait(cq), 0);
    assert!(!readable(0));

    // A CQ without a descriptor, and the fid array's bad input.
    let other = pair._open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
    let inval = -(FiErrno::FI_EINVAL.get() as c_int);
    assert_eq!(trywait(other), inval);
    assert_eq!(
        control(other, FI_GETWAIT).0,
        -(FiErrno::FI_ENODATA.get() as c_int)
    );
    assert_eq!(control(other, FI_GETWAITOBJ), (0, FI_WAIT_UNSPEC));
    // SAFETY: the fabric; NULL fids with a count, then none.
    unsafe {
        assert_eq!(((*(*fabric).ops).trywait)(fabric, null_mut(), 1), inval);
        assert_eq!(((*(*fabric).ops).trywait)(fabric, null_mut(), 0), 0);
        assert_eq!(close(&mut (*other).fid), 0);
    }
}

/// An endpoint whose sends complete in one `FI_WAIT_FD` CQ and whose receives in another,
/// and a peer (one waitable CQ for both directions) it sends to.
struct Split {
    /// The endpoint of the two CQs, and the peer.
    ep: [*mut FidEp; 2],
    /// The endpoint's send CQ, its receive CQ, and the peer's CQ.
    cq: [*mut FidCq; 3],
    /// The peer's address.
    peer: FiAddr,
    av: *mut FidAv,
    open: Open,
}

impl Split {
    fn new() -> Split {
        let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
        let mut attr = av_attr(16);
        let av = open.av_open(&mut attr).unwrap();
        let cq = [
            open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_FD),
            open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_FD),
            open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC),
        ];
        let ep = [open.endpoint(), open.endpoint()];
        let binds: [&[(usize, u64)]; 2] = [
            &[(0, FI_TRANSMIT), (1, FI_RECV)],
            &[(2, FI_TRANSMIT | FI_RECV)],
        ];
        let mut peer = 0;
        for (i, &e) in ep.iter().enumerate() {
            // SAFETY: an open AV, CQs and endpoint.
            unsafe {
                let fops = &*(*e).fid.ops;
                assert_eq!((fops.bind)(&mut (*e).fid, &mut (*av).fid, 0), 0);
                for &(c, flags) in binds[i] {
                    assert_eq!((fops.bind)(&mut (*e).fid, &mut (*cq[c]).fid, flags), 0);
                }
                assert_eq!((fops.control)(&mut (*e).fid, FI_ENABLE, null_mut()), 0);
                let mut name = [0u8; 32];
                let mut len = name.len();
                assert_eq!(
                    ((*(*e).cm).getname)(&mut (*e).fid, name.as_mut_ptr().cast(), &mut len),
                    0
                );
                let mut addr = 0;
                assert_eq!(
                    ((*(*av).ops).insert)(av, name.as_ptr().cast(), 1, &mut addr, 0, null_mut()),
                    1
                );
                peer = addr;
            }
        }
        Split {
            ep,
            cq,
            peer,
            av,
            open,
        }
    }

    /// `fi_trywait` of CQ `i`.
    fn trywait(&self, i: usize) -> c_int {
        let fabric = self.open.fabric;
        // SAFETY: an open CQ and the fabric it was opened under.
        unsafe {
            let mut fids = [&raw mut (*self.cq[i]).fid];
            ((*(*fabric).ops).trywait)(fabric, fids.as_mut_ptr(), 1)
        }
    }

    /// `fi_control(FI_GETWAIT)` of CQ `i`.
    fn wait_fd(&self, i: usize) -> c_int {
        let cq = self.cq[i];
        let mut fd: c_int = -1;
        // SAFETY: an open CQ; an int for the answer.
        let ret =
            unsafe { ((*(*cq).fid.ops).control)(&mut (*cq).fid, FI_GETWAIT, (&raw mut fd).cast()) };
        assert_eq!(ret, 0, "fi_control(FI_GETWAIT)");
        fd
    }

    /// A message from the endpoint to the peer, which receives it into `rbuf`.
    fn send(&self, rbuf: &mut [u8; 8]) {
        // SAFETY: open endpoints; the buffer outlives its completion, read by the caller.
        unsafe {
            let ret = ((*self.ep[1]).msg.as_ref().unwrap().recv)(
                self.ep[1],
                rbuf.as_mut_ptr().cast(),
                rbuf.len(),
                null_mut(),
                u64::MAX,
                null_mut(),
            );
            assert_eq!(ret, 0);
            let ret = ((*self.ep[0]).msg.as_ref().unwrap().send)(
                self.ep[0],
                b"wake".as_ptr().cast(),
                4,
                null_mut(),
                self.peer,
                null_mut(),
            );
            assert_eq!(ret, 0);
        }
    }

    /// `fi_cq_read` of one entry of CQ `i`: its count, or the negative errno.
    fn read(&self, i: usize) -> isize {
        let mut e = [0u8; 64];
        // SAFETY: an open CQ; room for one entry.
        unsafe { ((*(*self.cq[i]).ops).read)(self.cq[i], e.as_mut_ptr().cast(), 1) }
    }
}

impl Drop for Split {
    fn drop(&mut self) {
        // SAFETY: ours, open, closed once.
        let closed = unsafe {
            let mut closed = Vec::new();
            for &e in &self.ep {
                closed.push(close(&mut (*e).fid));
            }
            for &c in &self.cq {
                closed.push(close(&mut (*c).fid));
            }
            closed.push(close(&mut (*self.av).fid));
            closed
        };
        if !std::thread::panicking() {
            assert!(closed.iter().all(|&c| c == 0), "fi_close: {closed:?}");
        }
    }
}

/// An endpoint's send and receive CQs share its ring and its vector: a wait on the receive
/// CQ, which reads the ring (moving a send completion to the send CQ) and re-arms the vector,
/// leaves the send CQ's descriptor readable, as its completion is still to be read.
#[test]
fn a_wait_on_an_endpoints_receive_cq_leaves_its_send_cqs_descriptor_readable() {
    let s = Split::new();
    let tx_fd = s.wait_fd(0);
    assert_eq!(s.trywait(0), 0);
    let mut rbuf = [0u8; 8];
    s.send(&mut rbuf);
    assert!(
        fd_readable(tx_fd, 5000),
        "the send completed and the send CQ's descriptor stayed unreadable"
    );
    // The receive CQ has nothing to read: it arms the endpoint's ring for its own sleep.
    assert_eq!(s.trywait(1), 0);
    assert!(
        fd_readable(tx_fd, 2000),
        "the send CQ holds a completion and its descriptor is unreadable"
    );
    assert_eq!(s.read(0), 1);
    assert_eq!(s.read(2), 1, "the peer's receive");
    assert_eq!(&rbuf[..4], b"wake");
}

/// An endpoint enabled after `fi_trywait` said its CQ may be slept on: the CQ's descriptor
/// still polls readable when a completion lands there.
#[test]
fn an_fi_wait_fd_descriptor_wakes_for_an_endpoint_enabled_after_fi_trywait() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let cq = [
        open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_FD),
        open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC),
    ];
    let ep = [open.endpoint(), open.endpoint()];
    let fabric = open.fabric;
    let mut fd: c_int = -1;
    // SAFETY: open objects of the domain; valid out pointers, and a receive buffer that
    // outlives its completion, read below.
    unsafe {
        for (e, c) in ep.iter().zip(cq) {
            let fops = &*(**e).fid.ops;
            assert_eq!((fops.bind)(&mut (**e).fid, &mut (*av).fid, 0), 0);
            assert_eq!(
                (fops.bind)(&mut (**e).fid, &mut (*c).fid, FI_TRANSMIT | FI_RECV),
                0
            );
        }
        let ret =
            ((*(*cq[0]).fid.ops).control)(&mut (*cq[0]).fid, FI_GETWAIT, (&raw mut fd).cast());
        assert_eq!(ret, 0);
        let mut fids = [&raw mut (*cq[0]).fid];
        assert_eq!(((*(*fabric).ops).trywait)(fabric, fids.as_mut_ptr(), 1), 0);
        let mut addr = [0; 2];
        for (i, &e) in ep.iter().enumerate() {
            let fops = &*(*e).fid.ops;
            assert_eq!((fops.control)(&mut (*e).fid, FI_ENABLE, null_mut()), 0);
            let mut name = [0u8; 32];
            let mut len = name.len();
            assert_eq!(
                ((*(*e).cm).getname)(&mut (*e).fid, name.as_mut_ptr().cast(), &mut len),
                0
            );
            assert_eq!(
                ((*(*av).ops).insert)(av, name.as_ptr().cast(), 1, &mut addr[i], 0, null_mut()),
                1
            );
        }
        let mut rbuf = [0u8; 8];
        let msg = |e: *mut FidEp| &*(*e).msg;
        let ret = (msg(ep[0]).recv)(
            ep[0],
            rbuf.as_mut_ptr().cast(),
            rbuf.len(),
            null_mut(),
            u64::MAX,
            null_mut(),
        );
        assert_eq!(ret, 0);
        let ret = (msg(ep[1]).send)(
            ep[1],
            b"wake".as_ptr().cast(),
            4,
            null_mut(),
            addr[0],
            null_mut(),
        );
        assert_eq!(ret, 0);
        assert!(
            fd_readable(fd, 5000),
            "a completion landed on an endpoint enabled after fi_trywait, and the CQ's \
             descriptor stayed unreadable"
        );
        let mut e = [0u8; 64];
        assert_eq!(((*(*cq[0]).ops).read)(cq[0], e.as_mut_ptr().cast(), 1), 1);
        assert_eq!(&rbuf[..4], b"wake");
        assert_eq!(((*(*cq[1]).ops).read)(cq[1], e.as_mut_ptr().cast(), 1), 1);
        for e in ep {
            assert_eq!(close(&mut (*e).fid), 0);
        }
        for c in cq {
            assert_eq!(close(&mut (*c).fid), 0);
        }
        assert_eq!(close(&mut (*av).fid), 0);
    }
}

/// A domain is not closed under its CQs (which wait on its NIC's vectors): `fi_close` of the
/// domain is `-FI_EBUSY` while a CQ of it is open, and the domain is intact; once the CQ is
/// closed, the domain closes.
#[test]
fn a_domain_is_not_closed_under_an_open_cq() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let cq = open.cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD);
    // SAFETY: the open domain and CQ, each closed once (the domain by `open`'s drop).
    unsafe {
        assert_eq!(
            close(&mut (*open.domain).fid),
            -(FiErrno::FI_EBUSY.get() as c_int)
        );
        let (mut fd, cq_fid) = (-1, &raw mut (*cq).fid);
        let ret = ((*(*cq_fid).ops).control)(cq_fid, FI_GETWAIT, (&raw mut fd).cast());
        assert_eq!((ret, fd >= 0), (0, true), "the CQ still works");
        assert_eq!(close(cq_fid), 0);
    }
}

/// fi_fabric(3): "All items associated with the opened fabric must be released prior to
/// calling fi_close." `fi_close` of a fabric is `-FI_EBUSY` while an event queue or a passive
/// endpoint of it is open, as while a domain is, and the fabric and its objects are intact;
/// once they are closed, the fabric closes.
#[test]
fn a_fabric_is_not_closed_under_an_open_event_queue_or_passive_endpoint() {
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.ep_attr).ep_type = FI_EP_MSG };
    let info = getinfo(None, None, 0, Some(&hints)).expect("FI_EP_MSG");
    let busy = -(FiErrno::FI_EBUSY.get() as c_int);
    let mut fabric = null_mut();
    let mut pep: *mut FidPep = null_mut();
    // SAFETY: the provider's info, freed once; the fabric and its objects, each closed once.
    unsafe {
        let fabric_fid = |fabric: *mut FidFabric| &raw mut (*fabric).fid;
        assert_eq!(
            (provider().fabric)((*info).fabric_attr, &mut fabric, null_mut()),
            0
        );
        let eq = eq_open_on(fabric, FI_WAIT_UNSPEC, FI_WRITE).expect("fi_eq_open");
        let ops = &*(*fabric).ops;
        let ret = (ops.passive_ep)(fabric, info, (&raw mut pep).cast(), null_mut());
        assert_eq!(ret, 0, "fi_passive_ep");
        assert_eq!(close(fabric_fid(fabric)), busy, "an EQ and a listener open");
        assert_eq!(close(&mut (*pep).fid), 0);
        assert_eq!(close(fabric_fid(fabric)), busy, "an EQ open");
        assert_eq!(eq_write(eq, 7), core::mem::size_of::<FiEqEntry>() as isize);
        assert_eq!(close(&mut (*eq).fid), 0);
        assert_eq!(close(fabric_fid(fabric)), 0);
        uet_fi::info::free_info(info);
    }
}

/// `fi_domain` opens the domain its `fi_info` describes: an info of another fabric or
/// provider (`fabric_attr->name`, `prov_name`) is `-FI_EINVAL`, as one naming another domain
/// is, even without a domain name; the provider's own name is taken in any case, as
/// libfabric matches provider names.
#[test]
fn fi_domain_refuses_an_info_of_another_fabric_or_provider() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let names: [(&CStr, &CStr, c_int); 4] = [
        (c"uet", c"uet", 0),
        (c"uet", c"UET", 0),
        (c"other", c"uet", EINVAL),
        (c"uet", c"tcp", EINVAL),
    ];
    // SAFETY: the provider's own info, its names restored before anything is asserted (the
    // strings outlive the calls); an open fabric; a valid out pointer; a domain that opens
    // is closed once.
    let answers = unsafe {
        let (d, f) = (
            &mut *(*open.info).domain_attr,
            &mut *(*open.info).fabric_attr,
        );
        let (domain_name, fabric_name, prov_name) = (d.name, f.name, f.prov_name);
        d.name = null_mut();
        let answers = names.map(|(fabric, prov, _)| {
            (f.name, f.prov_name) = (fabric.as_ptr().cast_mut(), prov.as_ptr().cast_mut());
            let mut domain = null_mut();
            let ops = &*(*open.fabric).ops;
            let ret = (ops.domain)(open.fabric, open.info, &mut domain, null_mut());
            let closed = if ret == 0 {
                close(&mut (*domain).fid)
            } else {
                0
            };
            (ret, closed)
        });
        (d.name, f.name, f.prov_name) = (domain_name, fabric_name, prov_name);
        answers
    };
    for ((fabric, prov, want), answer) in names.into_iter().zip(answers) {
        assert_eq!(answer, (want, 0), "fabric {fabric:?}, provider {prov:?}");
    }
}

/// `fi_domain` opens no domain whose limits per endpoint are above what the NIC's endpoints
/// have (`-FI_ENODATA`, as `fi_getinfo` answers hints asking them): endpoints (`ep_cnt`),
/// receive contexts (`max_ep_rx_ctx`) and transmit contexts (`max_ep_tx_ctx`) alike; the
/// NIC's own limits open one.
#[test]
fn fi_domain_refuses_limits_per_endpoint_above_the_nics() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the provider's own info, each limit restored; an open fabric; a valid out
    // pointer; a domain that opens is closed once.
    unsafe {
        let d = &mut *(*open.info).domain_attr;
        let nic = (d.ep_cnt, d.max_ep_tx_ctx, d.max_ep_rx_ctx);
        let fields: [(&str, *mut usize, usize); 3] = [
            ("ep_cnt", &raw mut d.ep_cnt, nic.0),
            ("max_ep_tx_ctx", &raw mut d.max_ep_tx_ctx, nic.1),
            ("max_ep_rx_ctx", &raw mut d.max_ep_rx_ctx, nic.2),
        ];
        for (name, field, limit) in fields {
            for (value, want) in [(limit, 0), (limit + 1, ENODATA)] {
                *field = value;
                let mut domain = null_mut();
                let ops = &*(*open.fabric).ops;
                let ret = (ops.domain)(open.fabric, open.info, &mut domain, null_mut());
                assert_eq!(ret, want, "{name} {value} (the NIC's {limit})");
                if ret == 0 {
                    assert_eq!(close(&mut (*domain).fid), 0);
                }
                *field = limit;
            }
        }
    }
}

/// The endpoint types of a chain of answers, with each one's `max_msg_size`, or the
/// negative errno; the chain is freed.
fn answered_types(hints: &Hints) -> Result<Vec<(c_int, usize)>, c_int> {
    let info = getinfo(None, None, 0, Some(hints))?;
    let mut types = Vec::new();
    // SAFETY: the provider's answer: a chain of valid infos, read, then freed once.
    unsafe {
        let mut i = info;
        while !i.is_null() {
            let ep = &*(*i).ep_attr;
            assert!(
                (*(*i).tx_attr).inject_size <= ep.max_msg_size,
                "inject_size within max_msg_size"
            );
            types.push((ep.ep_type, ep.max_msg_size));
            i = (*i).next;
        }
        uet_fi::info::free_info(info);
    }
    Ok(types)
}

/// `fi_getinfo` answers one `fi_info` per endpoint type it serves, reliable first: an
/// `FI_EP_RDM` of messages up to the NIC's largest (`CAP_MAX_MSG`, 1 MiB), an `FI_EP_DGRAM`
/// of one packet (the NIC's MTU) and an `FI_EP_MSG` (connected) of up to 1 MiB. The hints choose between them by type, message
/// size, completion level and AV capabilities (which a connected endpoint, binding no AV,
/// lacks), and a type libfabric does not define is `-FI_ENODATA`.
#[test]
fn fi_getinfo_answers_reliable_datagram_and_connected_endpoints_and_the_hints_choose() {
    let mtu = usize::from(uet_sim::NicConfig::new([10, 0, 0, 1].into()).mtu);
    let largest = 1 << 20;
    let rdm = (FI_EP_RDM, largest);
    let dgram = (FI_EP_DGRAM, mtu);
    let msg = (FI_EP_MSG, largest);
    assert!(mtu < largest);
    let with = |edit: &dyn Fn(&mut FiInfo)| {
        let mut hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        edit(&mut hints.info);
        answered_types(&hints)
    };
    // SAFETY: called on the hints' own attributes only, boxed beside them.
    let set_type = |t: c_int| move |i: &mut FiInfo| unsafe { (*i.ep_attr).ep_type = t };
    assert_eq!(with(&|_| {}), Ok(vec![rdm, dgram, msg]));
    assert_eq!(with(&set_type(FI_EP_RDM)), Ok(vec![rdm]));
    assert_eq!(with(&set_type(FI_EP_DGRAM)), Ok(vec![dgram]));
    assert_eq!(with(&set_type(FI_EP_MSG)), Ok(vec![msg]));
    // A type libfabric does not define is not served.
    assert_eq!(with(&set_type(99)), Err(ENODATA));
    // A connected endpoint binds no AV: hints asking for an AV capability leave it out.
    assert_eq!(
        with(&|i| i.caps |= uet_av::FI_SHARED_AV),
        Ok(vec![rdm, dgram])
    );
    assert_eq!(
        with(&|i| {
            i.caps |= uet_av::FI_SHARED_AV;
            set_type(FI_EP_MSG)(i)
        }),
        Err(ENODATA)
    );
    // Nor does it report a receive's source: the peer is the connection's.
    assert_eq!(with(&|i| i.caps |= FI_SOURCE_CAP), Ok(vec![rdm, dgram]));
    // SAFETY: the provider's answer to hints of type FI_EP_MSG, read, then freed once.
    unsafe {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        (*hints.info.ep_attr).ep_type = FI_EP_MSG;
        let info = getinfo(None, None, 0, Some(&hints)).expect("FI_EP_MSG");
        let caps = [(*info).caps, (*(*info).rx_attr).caps];
        uet_fi::info::free_info(info);
        assert_eq!(caps.map(|c| c & FI_SOURCE_CAP), [0, 0], "{caps:x?}");
    }
    // A message larger than a packet leaves only the reliable endpoints.
    // SAFETY: as for `set_type`.
    let size = |n: usize| move |i: &mut FiInfo| unsafe { (*i.ep_attr).max_msg_size = n };
    assert_eq!(with(&size(mtu)), Ok(vec![rdm, dgram, msg]));
    assert_eq!(with(&size(mtu + 1)), Ok(vec![rdm, msg]));
    assert_eq!(with(&size(largest)), Ok(vec![rdm, msg]));
    assert_eq!(with(&size(largest + 1)), Err(ENODATA));
    assert_eq!(
        with(&|i| {
            size(mtu + 1)(i);
            set_type(FI_EP_DGRAM)(i)
        }),
        Err(ENODATA)
    );
    // Delivery complete applies to reliable endpoints only (fi_cq(3)); transmit complete is
    // what a datagram's send gives.
    // SAFETY: as for `set_type`.
    let flags = |f: u64| move |i: &mut FiInfo| unsafe { (*i.tx_attr).op_flags = f };
    assert_eq!(with(&flags(1 << 28)), Ok(vec![rdm, msg]));
    assert_eq!(with(&flags(1 << 27)), Ok(vec![rdm, dgram, msg]));
    assert_eq!(
        with(&|i| {
            flags(1 << 28)(i);
            set_type(FI_EP_DGRAM)(i)
        }),
        Err(ENODATA)
    );
}

/// fi_domain(3): "All domain capabilities are considered secondary capabilities", which a
/// provider, fi_getinfo(3) says, "must support ... or fail the fi_getinfo request
/// (FI_ENODATA)". An answer's `domain_attr->caps` are what a domain opened with it serves:
/// peers on this NIC and others, and named AVs but on `FI_EP_MSG` (a domain of its `fi_info`
/// opens none); hints asking the domain for more than it serves are refused, or answered
/// without the endpoint types that do not serve it.
#[test]
fn the_answers_domain_capabilities_are_those_its_domain_serves() {
    const COMM: u64 = (1 << 51) | (1 << 52); // FI_LOCAL_COMM | FI_REMOTE_COMM
    let shared = uet_av::FI_SHARED_AV;
    let answer = |domain_caps: u64, ep_type: c_int| {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe {
            (*hints.info.domain_attr).caps = domain_caps;
            (*hints.info.ep_attr).ep_type = ep_type;
        }
        let info = getinfo(None, None, 0, Some(&hints))?;
        let mut caps = Vec::new();
        // SAFETY: the provider's answer: a chain of valid infos, read, then freed once.
        unsafe {
            let mut i = info;
            while !i.is_null() {
                caps.push(((*(*i).ep_attr).ep_type, (*(*i).domain_attr).caps));
                i = (*i).next;
            }
            uet_fi::info::free_info(info);
        }
        Ok::<_, c_int>(caps)
    };
    let all = vec![
        (FI_EP_RDM, COMM | shared),
        (FI_EP_DGRAM, COMM | shared),
        (FI_EP_MSG, COMM),
    ];
    assert_eq!(answer(0, FI_EP_UNSPEC), Ok(all.clone()));
    assert_eq!(answer(COMM, FI_EP_UNSPEC), Ok(all.clone()));
    assert_eq!(answer(shared, FI_EP_UNSPEC), Ok(all[..2].to_vec()));
    assert_eq!(answer(shared, FI_EP_MSG), Err(ENODATA));
    assert_eq!(answer(FI_TAGGED, FI_EP_UNSPEC), Err(ENODATA));
    // What the FI_EP_MSG answer leaves out its domain does not serve.
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.ep_attr).ep_type = FI_EP_MSG };
    let open = Open::with_hints(&hints);
    let mut attr = av_attr(4);
    attr.name = c"domain_caps_of_fi_ep_msg".as_ptr();
    assert_eq!(
        open.av_open(&mut attr).err(),
        Some(-(FiErrno::FI_EOPNOTSUPP.get() as c_int))
    );
}

/// fi_endpoint(3): a context's capabilities "must be a subset of those requested of the
/// associated endpoint". Hints whose `tx_attr->caps` or `rx_attr->caps` ask for what an
/// endpoint type's answer leaves out (a receive's source on `FI_EP_MSG`, tagged messages
/// when the caps name `FI_MSG` alone, receives on a send-only endpoint) are not answered
/// with that type, rather than answered with contexts that lack what was asked.
#[test]
fn hints_asking_contexts_for_what_the_answer_leaves_out_exclude_its_type() {
    let types = |caps: u64, tx_caps: u64, rx_caps: u64| {
        let hints = Hints::new(caps, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe {
            (*hints.info.tx_attr).caps = tx_caps;
            (*hints.info.rx_attr).caps = rx_caps;
        }
        answered_types(&hints).map(|t| t.into_iter().map(|(ty, _)| ty).collect::<Vec<_>>())
    };
    let all = vec![FI_EP_RDM, FI_EP_DGRAM, FI_EP_MSG];
    let source = FI_MSG | FI_RECV | FI_SOURCE_CAP;
    assert_eq!(
        types(FI_MSG, FI_MSG | FI_SEND, FI_MSG | FI_RECV),
        Ok(all.clone())
    );
    assert_eq!(types(0, FI_TAGGED, source), Ok(all[..2].to_vec()));
    assert_eq!(types(FI_MSG, 0, source), Ok(all[..2].to_vec()));
    assert_eq!(types(FI_MSG, FI_TAGGED, 0), Err(ENODATA));
    assert_eq!(types(FI_MSG, 0, FI_TAGGED), Err(ENODATA));
    assert_eq!(types(FI_MSG | FI_SEND, 0, FI_MSG | FI_RECV), Err(ENODATA));
}

/// Two `FI_EP_DGRAM` endpoints (UET's unreliable datagrams): a datagram of up to one MTU is
/// delivered with its tag or not, a send completes once its packet is on the wire even when
/// no receive waits for it (the datagram is dropped at the target and never reported), a
/// longer one is `-FI_EMSGSIZE`, and a completion level only a reliable endpoint meets is
/// `-FI_EBADFLAGS`. `fi_endpoint` refuses an info of a type that is no endpoint type.
#[test]
fn datagram_endpoints_deliver_one_packet_and_never_report_a_lost_datagram() {
    let mtu = usize::from(uet_sim::NicConfig::new([10, 0, 0, 1].into()).mtu);
    let pair = Pair::with_info(0, as_dgram);

    // No receive posted: the sender's completion is a success, and the target sees nothing.
    assert_eq!(pair.send(0, b"into the void", 1), 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(1));
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));

    // One MTU, delivered whole.
    let full: Vec<u8> = (0..mtu).map(|i| (i * 7) as u8).collect();
    let mut rbuf = vec![0u8; mtu];
    // SAFETY: `rbuf` outlives the receive's completion, read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 2) }, 0);
    assert_eq!(pair.send(0, &full, 3), 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(3));
    let got = pair.wait(1).expect("delivered");
    assert_eq!((got.op_context as usize, got.len), (2, mtu));
    assert_eq!(rbuf, full);

    // One byte more than a packet: refused at the call, nothing sent.
    let long = vec![1u8; mtu + 1];
    assert_eq!(pair.send(0, &long, 4), neg(FiErrno::FI_EMSGSIZE));
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));

    // Completion levels: delivery and match complete cannot be met; transmit complete is.
    let iov = IoVec {
        iov_base: b"levels".as_ptr().cast_mut().cast(),
        iov_len: 6,
    };
    let msg = FiMsg {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: pair.p[1].addr,
        context: 5 as _,
        data: 0,
    };
    for level in [1u64 << 28, 1 << 31] {
        // SAFETY: an open endpoint; the message is read during the call.
        let ret = unsafe { (pair.msg(0).sendmsg)(pair.p[0].ep, &msg, FI_COMPLETION | level) };
        assert_eq!(ret, neg(FiErrno::FI_EBADFLAGS), "level {level:#x}");
    }
    // SAFETY: as above.
    let tagged = unsafe { &*(*pair.p[0].ep).tagged };
    let tmsg = FiMsgTagged {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: pair.p[1].addr,
        tag: 0x77,
        ignore: 0,
        context: 6 as _,
        data: 0,
    };
    // SAFETY: as above.
    let ret = unsafe { (tagged.sendmsg)(pair.p[0].ep, &tmsg, FI_COMPLETION | (1 << 28)) };
    assert_eq!(ret, neg(FiErrno::FI_EBADFLAGS));
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));

    // A tagged datagram, sent with transmit complete, matches its tagged receive.
    let mut tbuf = [0u8; 16];
    // SAFETY: an open endpoint; `tbuf` outlives the receive's completion, read below.
    unsafe {
        let rx = &*(*pair.p[1].ep).tagged;
        let buf = tbuf.as_mut_ptr().cast();
        assert_eq!(
            (rx.recv)(pair.p[1].ep, buf, 16, null_mut(), 0, 0x77, 0, 7 as _),
            0
        );
    }
    // SAFETY: an open endpoint; the message is read during the call.
    let ret = unsafe { (tagged.sendmsg)(pair.p[0].ep, &tmsg, FI_COMPLETION | (1 << 27)) };
    assert_eq!(ret, 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(6));
    // (The pair's CQs are of FI_CQ_FORMAT_DATA, which carries no tag.)
    let got = pair.wait(1).expect("tagged datagram delivered");
    assert_eq!((got.op_context as usize, got.len), (7, 6));
    assert_eq!(&tbuf[..6], b"levels");

    // fi_endpoint with an info of a type that is no endpoint type.
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    {
        let t = 99;
        // SAFETY: the provider's own info; a valid out pointer.
        let ret = unsafe {
            (*(*open.info).ep_attr).ep_type = t;
            let mut ep: *mut FidEp = null_mut();
            ((*(*open.domain).ops).endpoint)(
                open.domain,
                open.info.cast(),
                (&raw mut ep).cast(),
                null_mut(),
            )
        };
        assert_eq!(ret, -(FiErrno::FI_EINVAL.get() as c_int), "type {t}");
    }
}

/// The domain's queue counts are the NIC's: one completion, transmit and receive ring per
/// endpoint, so `cq_cnt`, `tx_ctx_cnt` and `rx_ctx_cnt` equal `ep_cnt` (never 0, which would
/// say there are none), and hints asking for more are `-FI_ENODATA`.
#[test]
fn the_domain_counts_the_nics_completion_transmit_and_receive_queues() {
    let counts = |d: &FiDomainAttr| (d.ep_cnt, d.cq_cnt, d.tx_ctx_cnt, d.rx_ctx_cnt);
    let (ep_cnt, cq_cnt, tx, rx) = answer_to(|_, _| {}, counts).unwrap();
    assert!(ep_cnt > 0);
    assert_eq!((cq_cnt, tx, rx), (ep_cnt, ep_cnt, ep_cnt));
    for field in 0..3 {
        for (n, ok) in [(1, true), (ep_cnt, true), (ep_cnt + 1, false)] {
            let got = answer_to(
                |_, d| match field {
                    0 => d.cq_cnt = n,
                    1 => d.tx_ctx_cnt = n,
                    _ => d.rx_ctx_cnt = n,
                },
                counts,
            );
            assert_eq!(got.is_ok(), ok, "field {field} at {n}: {got:?}");
            if !ok {
                assert_eq!(got, Err(ENODATA));
            }
        }
    }
}

/// `-errno` as an `int` call returns it.
fn ineg(e: FiErrno) -> c_int {
    -(e.get() as c_int)
}

const FI_CONNREQ: u32 = 1;
const FI_CONNECTED: u32 = 2;
const FI_SHUTDOWN: u32 = 3;

/// A connection event read from an EQ: its code, the entry's `fid` and `info`, and the
/// connection data after it.
#[derive(Debug)]
struct CmEvent {
    event: u32,
    fid: *mut Fid,
    info: *mut FiInfo,
    data: Vec<u8>,
}

/// A domain of an `FI_EP_MSG` answer, where connected endpoints and listeners are opened.
struct Msg {
    open: Open,
}

impl Msg {
    fn new() -> Msg {
        Msg::with_caps(FI_MSG | FI_TAGGED)
    }

    /// An `FI_EP_MSG` answer to hints asking for `caps`, opened.
    fn with_caps(caps: u64) -> Msg {
        let hints = Hints::new(caps, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe { (*hints.info.ep_attr).ep_type = FI_EP_MSG };
        let open = Open::with_hints(&hints);
        // SAFETY: the provider's answer.
        assert_eq!(unsafe { (*(*open.info).ep_attr).ep_type }, FI_EP_MSG);
        Msg { open }
    }

    /// A waitable EQ of the fabric.
    fn eq(&self) -> *mut FidEq {
        self.eq_with(0, 0)
    }

    /// An EQ of `size` entries (0: the provider's) opened with `flags`.
    fn eq_with(&self, size: usize, flags: u64) -> *mut FidEq {
        let mut eq = null_mut();
        let mut attr = FiEqAttr {
            size,
            flags,
            wait_obj: FI_WAIT_UNSPEC,
            signaling_vector: 0,
            wait_set: null_mut(),
        };
        // SAFETY: an open fabric; valid attributes and out pointer.
        let ret = unsafe {
            ((*(*self.open.fabric).ops).eq_open)(self.open.fabric, &mut attr, &mut eq, null_mut())
        };
        assert_eq!(ret, 0, "fi_eq_open");
        eq
    }

    /// `fi_passive_ep` with `info`: the pep, or the negative errno.
    fn passive_ep(&self, info: *mut FiInfo) -> Result<*mut FidPep, c_int> {
        let mut pep: *mut FidPep = null_mut();
        // SAFETY: an open fabric; `info` the provider's; a valid out pointer.
        let ret = unsafe {
            ((*(*self.open.fabric).ops).passive_ep)(
                self.open.fabric,
                info,
                (&raw mut pep).cast(),
                null_mut(),
            )
        };
        if ret == 0 {
            Ok(pep)
        } else {
            Err(ret)
        }
    }

    /// A listener reporting to `eq`.
    fn listen(&self, eq: *mut FidEq) -> *mut FidPep {
        let pep = self.passive_ep(self.open.info).expect("fi_passive_ep");
        // SAFETY: an open pep and EQ.
        unsafe {
            assert_eq!(bind(&mut (*pep).fid, &mut (*eq).fid, 0), 0, "fi_pep_bind");
            assert_eq!(((*(*pep).cm).listen)(pep.cast()), 0, "fi_listen");
        }
        pep
    }

    /// `fi_endpoint` with `info`: the endpoint, or the negative errno.
    fn endpoint(&self, info: *mut FiInfo) -> Result<*mut FidEp, c_int> {
        let mut ep: *mut FidEp = null_mut();
        // SAFETY: an open domain; `info` the provider's; a valid out pointer.
        let ret = unsafe {
            ((*(*self.open.domain).ops).endpoint)(
                self.open.domain,
                info.cast(),
                (&raw mut ep).cast(),
                null_mut(),
            )
        };
        if ret == 0 {
            Ok(ep)
        } else {
            Err(ret)
        }
    }

    /// An endpoint opened with `info`, bound to `eq` and a CQ of its own, enabled.
    fn ep(&self, info: *mut FiInfo, eq: *mut FidEq) -> (*mut FidEp, *mut FidCq) {
        self.ep_counted(info, eq, None)
    }

    /// [`Msg::ep`], its receives counted by `rx_cntr` if given.
    fn ep_counted(
        &self,
        info: *mut FiInfo,
        eq: *mut FidEq,
        rx_cntr: Option<*mut FidCntr>,
    ) -> (*mut FidEp, *mut FidCq) {
        self.ep_waited(info, eq, FI_WAIT_UNSPEC, rx_cntr)
    }

    /// [`Msg::ep_counted`], its CQ waited on as `cq_wait` says.
    fn ep_waited(
        &self,
        info: *mut FiInfo,
        eq: *mut FidEq,
        cq_wait: c_int,
        rx_cntr: Option<*mut FidCntr>,
    ) -> (*mut FidEp, *mut FidCq) {
        let ep = self.endpoint(info).expect("fi_endpoint");
        let cq = self.open.cq_open(FI_CQ_FORMAT_DATA, cq_wait);
        // SAFETY: an open endpoint, EQ, CQ and counter.
        unsafe {
            assert_eq!(bind(&mut (*ep).fid, &mut (*eq).fid, 0), 0);
            assert_eq!(
                bind(&mut (*ep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
                0
            );
            if let Some(c) = rx_cntr {
                assert_eq!(bind(&mut (*ep).fid, &mut (*c).fid, FI_RECV), 0);
            }
            assert_eq!(
                ((*(*ep).fid.ops).control)(&mut (*ep).fid, FI_ENABLE, null_mut()),
                0
            );
        }
        (ep, cq)
    }
}

/// `fi_ep_bind`, `fi_pep_bind`.
///
/// # Safety
/// Both are open objects.
unsafe fn bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { ((*(*fid).ops).bind)(fid, bfid, flags) }
}

/// `fi_getname` of an endpoint or pep.
fn name_of(fid: *mut Fid) -> [u8; 32] {
    let mut name = [0u8; 32];
    let mut len = name.len();
    // SAFETY: an open endpoint or pep (their `cm` is at the same place); valid buffers.
    let ret = unsafe {
        let cm = (*fid.cast::<FidEp>()).cm;
        ((*cm).getname)(fid, name.as_mut_ptr().cast(), &mut len)
    };
    assert_eq!((ret, len), (0, 32), "fi_getname");
    name
}

/// Insert endpoint `ep`'s name (`fi_getname`) into `av`: its `fi_addr_t` there.
fn insert_name_of(av: *mut FidAv, ep: *mut FidEp) -> FiAddr {
    let name = name_of(ep.cast());
    let mut addr = 0;
    // SAFETY: an open AV; one address, one fi_addr_t.
    let inserted =
        unsafe { ((*(*av).ops).insert)(av, name.as_ptr().cast(), 1, &mut addr, 0, null_mut()) };
    assert_eq!(inserted, 1, "fi_av_insert of the endpoint's name");
    addr
}

/// `fi_eq_read` (waiting up to 5 s for an event) into a buffer of `len` bytes, with `flags`.
fn eq_event(eq: *mut FidEq, len: usize, flags: u64) -> Result<CmEvent, isize> {
    let mut buf = vec![0u8; len.max(64)];
    let mut event = 0u32;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        // SAFETY: an open EQ; `buf` holds at least `len` bytes.
        let ret =
            unsafe { ((*(*eq).ops).read)(eq, &mut event, buf.as_mut_ptr().cast(), len, flags) };
        if ret == neg(FiErrno::FI_EAGAIN) && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        let n = usize::try_from(ret).map_err(|_| ret)?;
        assert!(n >= 16, "a cm entry is 16 bytes, read {n}");
        // SAFETY: the provider wrote a struct fi_eq_cm_entry at the buffer's start.
        let entry = unsafe { buf.as_ptr().cast::<FiEqCmEntry>().read_unaligned() };
        return Ok(CmEvent {
            event,
            fid: entry.fid,
            info: entry.info,
            data: buf[16..n].to_vec(),
        });
    }
}

/// `fi_eq_sread` of a connection event (5 s at most) into a buffer of 256 bytes.
fn cm_event(eq: *mut FidEq) -> Result<CmEvent, isize> {
    let mut buf = [0u8; 256];
    let mut event = 0u32;
    // SAFETY: an open EQ; a valid buffer.
    let ret = unsafe {
        ((*(*eq).ops).sread)(eq, &mut event, buf.as_mut_ptr().cast(), buf.len(), 5000, 0)
    };
    let n = usize::try_from(ret).map_err(|_| ret)?;
    // SAFETY: the provider wrote a struct fi_eq_cm_entry at the buffer's start.
    let entry = unsafe { buf.as_ptr().cast::<FiEqCmEntry>().read_unaligned() };
    Ok(CmEvent {
        event,
        fid: entry.fid,
        info: entry.info,
        data: buf[16..n].to_vec(),
    })
}

/// `fi_eq_readerr` with an error-data buffer of the application's: the entry and its data.
fn eq_error(eq: *mut FidEq) -> (FiEqErrEntry, Vec<u8>) {
    let mut data = [0u8; 128];
    // SAFETY: a plain-data structure.
    let mut e: FiEqErrEntry = unsafe { core::mem::zeroed() };
    e.err_data = data.as_mut_ptr().cast();
    e.err_data_size = data.len();
    // SAFETY: an open EQ; a valid entry and buffer.
    let ret = unsafe { ((*(*eq).ops).readerr)(eq, &mut e, 0) };
    assert_eq!(
        ret as usize,
        core::mem::size_of::<FiEqErrEntry>(),
        "fi_eq_readerr"
    );
    let n = e.err_data_size;
    (e, data[..n].to_vec())
}

/// Wait for an error on `eq` (5 s at most), then read it.
fn wait_eq_error(eq: *mut FidEq) -> (FiEqErrEntry, Vec<u8>) {
    let got = cm_event(eq).err();
    assert_eq!(got, Some(neg(FiErrno::FI_EAVAIL)), "an error waits");
    eq_error(eq)
}

/// The next entry of `cq`, waiting up to 5 s.
fn cq_wait(cq: *mut FidCq) -> Result<FiCqTaggedEntry, isize> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        // SAFETY: a plain-data structure.
        let mut e: FiCqTaggedEntry = unsafe { core::mem::zeroed() };
        // SAFETY: an open CQ; room for one entry of any format.
        let ret = unsafe { ((*(*cq).ops).read)(cq, (&raw mut e).cast(), 1) };
        match ret {
            1 => return Ok(e),
            r if r == neg(FiErrno::FI_EAGAIN) && std::time::Instant::now() < end => {
                std::thread::yield_now()
            }
            r => return Err(r),
        }
    }
}

/// `fi_send` of `msg` on `ep`, to an `fi_addr_t` that names no one (a connected endpoint
/// ignores it).
fn send_on(ep: *mut FidEp, msg: &[u8]) -> isize {
    // SAFETY: an open endpoint; `msg` is read during the call.
    unsafe {
        ((*(*ep).msg).send)(
            ep,
            msg.as_ptr().cast(),
            msg.len(),
            null_mut(),
            12345,
            null_mut(),
        )
    }
}

/// `fi_recv` on `ep` into `buf`.
///
/// # Safety
/// `buf` outlives the receive's completion.
unsafe fn recv_on(ep: *mut FidEp, buf: &mut [u8]) -> isize {
    // SAFETY: an open endpoint; the caller keeps `buf`.
    unsafe {
        ((*(*ep).msg).recv)(
            ep,
            buf.as_mut_ptr().cast(),
            buf.len(),
            null_mut(),
            0,
            null_mut(),
        )
    }
}

/// `fi_connect` of `ep` to `addr`, sending `param`.
fn connect(ep: *mut FidEp, addr: &[u8; 32], param: &[u8]) -> c_int {
    // SAFETY: an open endpoint; valid address and param.
    unsafe { ((*(*ep).cm).connect)(ep, addr.as_ptr().cast(), param.as_ptr().cast(), param.len()) }
}

/// Close every object, first to last; all must succeed.
///
/// # Safety
/// Each is an open object of the provider, closed once.
unsafe fn close_all(fids: &[*mut Fid]) {
    for &f in fids {
        // SAFETY: the caller's promise.
        assert_eq!(unsafe { close(f) }, 0, "fi_close of class {}", unsafe {
            (*f).fclass
        });
    }
}

/// Reject every request of `infos` at `pep`, and free its `fi_info`.
///
/// # Safety
/// `pep` is open; each info is an `FI_CONNREQ`'s of it, unanswered, freed here once.
unsafe fn reject_all(pep: *mut FidPep, infos: &[*mut FiInfo]) {
    // SAFETY: the caller's promise.
    unsafe {
        let reject = (*(*pep).cm).reject;
        for &info in infos {
            assert_eq!(reject(pep.cast(), (*info).handle, null(), 0), 0);
            uet_fi::info::free_info(info);
        }
    }
}

/// Close each of `endpoints` and its CQ, then each of `rest`; all must succeed.
///
/// # Safety
/// Each is an open object of the provider, closed once.
unsafe fn close_endpoints_then(endpoints: &[(*mut FidEp, *mut FidCq)], rest: &[*mut Fid]) {
    // SAFETY: the caller's promise.
    unsafe {
        let mut fids: Vec<*mut Fid> = Vec::new();
        for &(ep, cq) in endpoints {
            fids.extend([&raw mut (*ep).fid, &raw mut (*cq).fid]);
        }
        fids.extend_from_slice(rest);
        close_all(&fids);
    }
}

/// Two `FI_EP_MSG` endpoints of the provider connect as fi_cm(3) has it: the listener's EQ
/// gets `FI_CONNREQ` (its fid the pep's, an `fi_info` whose `handle` is the request and whose
/// `dest_addr` is the requester, and the requester's data after the entry, cut to the
/// buffer); an endpoint opened with that `fi_info` accepts; both sides get `FI_CONNECTED`
/// (the requester with the acceptor's data); messages go both ways whatever `fi_addr_t` the
/// sends name; `fi_getpeer` gives each the other; `fi_shutdown` reaches the peer as
/// `FI_SHUTDOWN`, after which neither side sends (`-FI_ENOTCONN`).
#[test]
fn connected_endpoints_connect_accept_exchange_messages_and_shut_down() {
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    // fi_getname with a short buffer: -FI_ETOOSMALL and the size.
    let mut short = [0u8; 8];
    let mut len = short.len();
    // SAFETY: an open pep; valid buffers.
    let ret = unsafe { ((*(*pep).cm).getname)(pep_fid, short.as_mut_ptr().cast(), &mut len) };
    assert_eq!((ret, len), (ineg(FiErrno::FI_ETOOSMALL), 32));
    let listener = name_of(pep_fid);
    assert_eq!(&short, &listener[..8], "the address truncated");

    let (client, cq_c) = m.ep(m.open.info, eq_c);
    // SAFETY: `client` is open; only the field's address is taken.
    let client_fid: *mut Fid = unsafe { &mut (*client).fid };
    // Not connected yet: nothing is sent.
    assert_eq!(send_on(client, b"early"), neg(FiErrno::FI_ENOTCONN));
    assert_eq!(connect(client, &listener, b"hello listener"), 0);

    // A buffer smaller than the entry: -FI_ETOOSMALL, the event stays; a peek with room for
    // two bytes of data gets the entry and those two bytes.
    let small = eq_event(eq_l, 8, 0).err();
    assert_eq!(small, Some(neg(FiErrno::FI_ETOOSMALL)));
    let peeked = eq_event(eq_l, 18, 1 << 19).expect("FI_PEEK");
    assert_eq!(
        (peeked.event, peeked.data.as_slice()),
        (FI_CONNREQ, &b"he"[..])
    );
    let req = cm_event(eq_l).expect("FI_CONNREQ");
    assert_eq!((req.event, req.fid), (FI_CONNREQ, pep_fid));
    assert_eq!(req.data, b"hello listener");
    // SAFETY: the provider's infos, read then freed once (the peeked one now).
    unsafe {
        let i = &*req.info;
        assert!(!i.handle.is_null());
        assert_eq!((*i.handle).fclass, FI_CLASS_CONNREQ);
        assert_eq!((*peeked.info).handle, i.handle, "one request, one handle");
        assert_eq!((*i.ep_attr).ep_type, FI_EP_MSG);
        assert_eq!(i.dest_addrlen, 32);
        let requester = core::slice::from_raw_parts(i.dest_addr.cast::<u8>(), 32);
        assert_eq!(requester, name_of(client_fid), "dest_addr is the requester");
        uet_fi::info::free_info(peeked.info);
    }

    let (server, cq_s) = m.ep(req.info, eq_l);
    // SAFETY: `server` is open; only the field's address is taken.
    let server_fid: *mut Fid = unsafe { &mut (*server).fid };
    let (mut at_server, mut at_client) = ([0u8; 64], [0u8; 64]);
    // SAFETY: open endpoints; the buffers outlive their completions, read below.
    unsafe {
        assert_eq!(recv_on(server, &mut at_server), 0);
        assert_eq!(recv_on(client, &mut at_client), 0);
        let accept = (*(*server).cm).accept;
        assert_eq!(accept(server, b"welcome".as_ptr().cast(), 7), 0);
        // The request is answered: its handle is gone.
        assert_eq!(accept(server, null(), 0), ineg(FiErrno::FI_EINVAL));
    }
    let ev = cm_event(eq_c).expect("FI_CONNECTED at the requester");
    assert_eq!(
        (ev.event, ev.fid, ev.info),
        (FI_CONNECTED, client_fid, null_mut())
    );
    assert_eq!(ev.data, b"welcome");
    let ev = cm_event(eq_l).expect("FI_CONNECTED at the acceptor");
    assert_eq!(
        (ev.event, ev.fid, ev.data.len()),
        (FI_CONNECTED, server_fid, 0)
    );

    // fi_getpeer: each side's peer is the other endpoint.
    for (ep, peer) in [(client, server_fid), (server, client_fid)] {
        let mut got = [0u8; 32];
        let mut len = got.len();
        // SAFETY: an open endpoint; valid buffers.
        let ret = unsafe { ((*(*ep).cm).getpeer)(ep, got.as_mut_ptr().cast(), &mut len) };
        assert_eq!((ret, got), (0, name_of(peer)));
    }

    // Messages both ways.
    assert_eq!(send_on(client, b"ping"), 0);
    assert!(cq_wait(cq_c).is_ok(), "the send completes");
    let got = cq_wait(cq_s).expect("the server receives");
    assert_eq!(&at_server[..got.len], b"ping");
    assert_eq!(send_on(server, b"pong"), 0);
    assert!(cq_wait(cq_s).is_ok());
    let got = cq_wait(cq_c).expect("the client receives");
    assert_eq!(&at_client[..got.len], b"pong");

    // Shutdown reaches the peer; neither side sends any more.
    // SAFETY: open endpoints.
    unsafe {
        assert_eq!(((*(*client).cm).shutdown)(client, 0), 0);
        let ev = cm_event(eq_l).expect("FI_SHUTDOWN");
        assert_eq!((ev.event, ev.fid), (FI_SHUTDOWN, server_fid));
        assert_eq!(
            ((*(*client).cm).shutdown)(client, 0),
            ineg(FiErrno::FI_ENOTCONN)
        );
        assert_eq!(
            ((*(*server).cm).shutdown)(server, 0),
            ineg(FiErrno::FI_ENOTCONN)
        );
    }
    assert_eq!(send_on(client, b"late"), neg(FiErrno::FI_ENOTCONN));
    assert_eq!(send_on(server, b"late"), neg(FiErrno::FI_ENOTCONN));

    // SAFETY: ours, open, closed once; the event's info freed once.
    unsafe {
        uet_fi::info::free_info(req.info);
        close_all(&[
            server_fid,
            client_fid,
            &mut (*cq_s).fid,
            &mut (*cq_c).fid,
            pep_fid,
            &mut (*eq_l).fid,
            &mut (*eq_c).fid,
        ]);
    }
}

/// `fi_trecv` on `ep` into `buf`, with `tag` and `context`.
///
/// # Safety
/// `buf` outlives the receive's completion.
unsafe fn trecv_on(ep: *mut FidEp, buf: &mut [u8], tag: u64, context: usize) -> isize {
    // SAFETY: an open endpoint; the caller keeps `buf`.
    unsafe {
        ((*(*ep).tagged).recv)(
            ep,
            buf.as_mut_ptr().cast(),
            buf.len(),
            null_mut(),
            0,
            tag,
            0,
            context as _,
        )
    }
}

/// `fi_recv` on `ep` into `buf`, with `context`.
///
/// # Safety
/// `buf` outlives the receive's completion.
unsafe fn recv_ctx(ep: *mut FidEp, buf: &mut [u8], context: usize) -> isize {
    // SAFETY: an open endpoint; the caller keeps `buf`.
    unsafe {
        ((*(*ep).msg).recv)(
            ep,
            buf.as_mut_ptr().cast(),
            buf.len(),
            null_mut(),
            0,
            context as _,
        )
    }
}

/// `fi_cq_readerr` of `cq` now, no waiting: the entry, or the read's return.
fn cq_error_now(cq: *mut FidCq) -> Result<FiCqErrEntry, isize> {
    // SAFETY: a plain-data structure.
    let mut e: FiCqErrEntry = unsafe { core::mem::zeroed() };
    // SAFETY: an open CQ; a valid entry.
    let ret = unsafe { ((*(*cq).ops).readerr)(cq, &mut e, 0) };
    if ret == 1 {
        Ok(e)
    } else {
        Err(ret)
    }
}

/// A connection's end flushes the receives still posted (fi_cm(3): `fi_shutdown` cancels
/// them, their completions written before it returns): on the side that shuts down, as soon
/// as `fi_shutdown` returns; on the peer, once its `FI_SHUTDOWN` has come, at the next read
/// of its CQ or counter. Each is an `FI_ECANCELED` error entry with its context and buffer,
/// counted as an error; a receive posted after the shutdown is flushed the same way.
#[test]
fn a_connections_shutdown_flushes_the_posted_receives_as_ecanceled() {
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let (client, cq_c) = m.ep(m.open.info, eq_c);
    assert_eq!(connect(client, &name_of(pep_fid), b""), 0);
    let req = cm_event(eq_l).expect("FI_CONNREQ");
    let rx_cntr = m.open.cntr_open(FI_WAIT_UNSPEC).expect("fi_cntr_open");
    let (server, cq_s) = m.ep_counted(req.info, eq_l, Some(rx_cntr));
    // SAFETY: an open endpoint.
    assert_eq!(unsafe { ((*(*server).cm).accept)(server, null(), 0) }, 0);
    assert_eq!(cm_event(eq_c).expect("FI_CONNECTED").event, FI_CONNECTED);
    assert_eq!(cm_event(eq_l).expect("FI_CONNECTED").event, FI_CONNECTED);

    let mut bufs = [[0xEEu8; 16]; 4];
    let [c_untagged, c_tagged, s_before, s_after] = &mut bufs;
    // SAFETY: open endpoints; the buffers outlive their completions, read below.
    unsafe {
        assert_eq!(recv_ctx(client, c_untagged, 0xA1), 0);
        assert_eq!(trecv_on(client, c_tagged, 7, 0xA2), 0);
        assert_eq!(recv_ctx(server, s_before, 0xB1), 0);
    }
    let (c_untagged, c_tagged) = (c_untagged.as_ptr(), c_tagged.as_ptr());

    // The peer waits on its receive counter meanwhile.
    let waiting = Shared(rx_cntr);
    let waiter = std::thread::spawn(move || cntr_wait(waiting.get(), 1, 5000));
    std::thread::sleep(std::time::Duration::from_millis(50));
    // The side that shuts down: its entries are in the CQ when fi_shutdown returns.
    // SAFETY: an open endpoint.
    assert_eq!(unsafe { ((*(*client).cm).shutdown)(client, 0) }, 0);
    let mut flushed = Vec::new();
    for _ in 0..2 {
        let e = cq_error_now(cq_c).expect("a flushed receive, without waiting");
        assert_eq!(e.err, FiErrno::FI_ECANCELED.get() as c_int);
        assert_eq!((e.len, e.olen), (0, 0));
        flushed.push((
            e.op_context as usize,
            e.flags,
            e.buf.cast_const().cast::<u8>(),
        ));
    }
    flushed.sort();
    assert_eq!(
        flushed,
        [
            (0xA1, FI_RECV | FI_MSG, c_untagged),
            (0xA2, FI_RECV | FI_TAGGED, c_tagged)
        ]
    );
    // SAFETY: a plain-data structure.
    let mut e: FiCqTaggedEntry = unsafe { core::mem::zeroed() };
    // SAFETY: an open CQ; room for one entry.
    let ret = unsafe { ((*(*cq_c).ops).read)(cq_c, (&raw mut e).cast(), 1) };
    assert_eq!(ret, neg(FiErrno::FI_EAGAIN), "nothing more");

    // The peer: FI_SHUTDOWN, and its receive flushes as the waiter next looks at the
    // counter (or at the next read of the CQ or counter).
    assert_eq!(cm_event(eq_l).expect("FI_SHUTDOWN").event, FI_SHUTDOWN);
    assert_eq!(waiter.join().unwrap(), neg_int(FiErrno::FI_EAVAIL));
    assert_eq!((cntr_readerr(rx_cntr), cntr_read(rx_cntr)), (1, 0));
    let e = cq_error(cq_s);
    assert_eq!(e.err, FiErrno::FI_ECANCELED.get() as c_int);
    assert_eq!(e.op_context as usize, 0xB1);
    // A receive posted after the shutdown: nothing can arrive, it is flushed too.
    // SAFETY: an open endpoint; the buffer outlives its completion, read below.
    assert_eq!(unsafe { recv_ctx(server, s_after, 0xB2) }, 0);
    let e = cq_error(cq_s);
    assert_eq!(
        (e.err, e.op_context as usize),
        (FiErrno::FI_ECANCELED.get() as c_int, 0xB2)
    );
    assert_eq!(cntr_readerr(rx_cntr), 2);
    assert!(
        bufs.iter().flatten().all(|&b| b == 0xEE),
        "buffers untouched"
    );

    // SAFETY: ours, open, closed once; the event's info freed once.
    unsafe {
        uet_fi::info::free_info(req.info);
        close_all(&[
            &mut (*server).fid,
            &mut (*client).fid,
            &mut (*cq_s).fid,
            &mut (*cq_c).fid,
            &mut (*rx_cntr).fid,
            pep_fid,
            &mut (*eq_l).fid,
            &mut (*eq_c).fid,
        ]);
    }
}

/// A connection whose accepting side (`server`) waits for its receives: its CQ is waited on
/// as `cq_wait` says, and a counter waited on as `cntr_wait` says counts its receives if
/// given. For the tests of a peer's shutdown waking those waits.
struct Connected {
    m: Msg,
    eq_l: *mut FidEq,
    eq_c: *mut FidEq,
    pep: *mut FidPep,
    req_info: *mut FiInfo,
    client: *mut FidEp,
    cq_c: *mut FidCq,
    server: *mut FidEp,
    cq_s: *mut FidCq,
    rx_cntr: Option<*mut FidCntr>,
}

impl Connected {
    fn new(cq_wait: c_int, cntr_wait: Option<c_int>) -> Connected {
        Connected::with_caps(FI_MSG | FI_TAGGED, cq_wait, cntr_wait)
    }

    /// [`Connected::new`] on the answer to hints asking for `caps`.
    fn with_caps(caps: u64, cq_wait: c_int, cntr_wait: Option<c_int>) -> Connected {
        let m = Msg::with_caps(caps);
        let (eq_l, eq_c) = (m.eq(), m.eq());
        let pep = m.listen(eq_l);
        // SAFETY: `pep` is open; only the field's address is taken.
        let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
        let (client, cq_c) = m.ep(m.open.info, eq_c);
        assert_eq!(connect(client, &name_of(pep_fid), b""), 0);
        let req = cm_event(eq_l).expect("FI_CONNREQ");
        let rx_cntr = cntr_wait.map(|w| m.open.cntr_open(w).expect("fi_cntr_open"));
        let (server, cq_s) = m.ep_waited(req.info, eq_l, cq_wait, rx_cntr);
        // SAFETY: an open endpoint.
        assert_eq!(unsafe { ((*(*server).cm).accept)(server, null(), 0) }, 0);
        assert_eq!(cm_event(eq_c).expect("FI_CONNECTED").event, FI_CONNECTED);
        assert_eq!(cm_event(eq_l).expect("FI_CONNECTED").event, FI_CONNECTED);
        Connected {
            m,
            eq_l,
            eq_c,
            pep,
            req_info: req.info,
            client,
            cq_c,
            server,
            cq_s,
            rx_cntr,
        }
    }

    /// The client's `fi_shutdown`: the server gets `FI_SHUTDOWN`.
    fn shut_down_by_client(&self) {
        // SAFETY: an open endpoint.
        let ret = unsafe { ((*(*self.client).cm).shutdown)(self.client, 0) };
        assert_eq!(ret, 0, "fi_shutdown");
    }

    /// Run `wait` on a thread of its own, shut the connection down from the client 20 ms
    /// into it (the waiter not returned by then), and return what `wait` returned, and
    /// whether it came late: 60 ms or more after the shutdown, which a wait's periodic look
    /// at the rings 100 ms into it would have noticed (round `round` of the caller, for the
    /// messages). A caller runs several rounds and allows one late one, which a loaded
    /// machine may make; a wait the shutdown does not wake is late in every round.
    fn wait_woken_by_shutdown<T: Send + 'static>(
        &self,
        round: usize,
        wait: impl FnOnce() -> T + Send + 'static,
    ) -> (T, bool) {
        use std::time::{Duration, Instant};
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(Instant::now());
            (wait(), Instant::now())
        });
        let entered = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the waiter started");
        std::thread::sleep(Duration::from_millis(20).saturating_sub(entered.elapsed()));
        assert!(
            !waiter.is_finished(),
            "the waiter returned before the shutdown"
        );
        let shut = Instant::now();
        self.shut_down_by_client();
        let (ret, woke) = waiter.join().expect("the waiter");
        let slept = woke.saturating_duration_since(shut);
        let late = slept >= Duration::from_millis(60);
        if late {
            eprintln!("round {round}: the waiter slept {slept:?} after the peer's shutdown");
        }
        (ret, late)
    }

    /// The server's receive was flushed: `FI_SHUTDOWN` came, and its CQ holds the
    /// `FI_ECANCELED` entry of the receive posted with `context`.
    fn assert_flushed(&self, context: usize) {
        assert_eq!(cm_event(self.eq_l).expect("FI_SHUTDOWN").event, FI_SHUTDOWN);
        let e = cq_error_now(self.cq_s).expect("the flushed receive");
        assert_eq!(
            (e.err, e.op_context as usize),
            (FiErrno::FI_ECANCELED.get() as c_int, context)
        );
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        // SAFETY: ours, open, closed once; the event's info freed once.
        unsafe {
            uet_fi::info::free_info(self.req_info);
            let mut fids: Vec<*mut Fid> = vec![
                &mut (*self.server).fid,
                &mut (*self.client).fid,
                &mut (*self.cq_s).fid,
                &mut (*self.cq_c).fid,
            ];
            if let Some(c) = self.rx_cntr {
                fids.push(&mut (*c).fid);
            }
            fids.extend([
                &mut (*self.pep).fid as *mut Fid,
                &mut (*self.eq_l).fid,
                &mut (*self.eq_c).fid,
            ]);
            if std::thread::panicking() {
                for f in fids {
                    let _ = close(f);
                }
            } else {
                close_all(&fids);
            }
        }
    }
}

/// A thread asleep in `fi_cq_sread` on the receive CQ when the peer shuts the connection
/// down wakes at once with the flushed receive (`-FI_EAVAIL`, then its `FI_ECANCELED` entry),
/// not at the wait's periodic look at the rings (`WAIT_RECHECK`, 100 ms): the shutdown comes
/// 20 ms into the wait, and the waiter returns well before the look 100 ms into it would.
#[test]
fn a_thread_in_cq_sread_wakes_at_once_when_the_peer_shuts_the_connection_down() {
    let mut late = 0;
    for round in 0..5 {
        let c = Connected::new(FI_WAIT_UNSPEC, None);
        let mut buf = [0xEEu8; 16];
        // SAFETY: an open endpoint; the buffer outlives its completion (flushed below).
        assert_eq!(unsafe { recv_ctx(c.server, &mut buf, 0xC1) }, 0);
        let cq = Shared(c.cq_s);
        let (ret, slow) = c.wait_woken_by_shutdown(round, move || {
            // SAFETY: a plain-data structure.
            let mut e: FiCqTaggedEntry = unsafe { core::mem::zeroed() };
            let cq = cq.get();
            // SAFETY: an open CQ (closed after this thread is joined); room for one entry.
            unsafe { ((*(*cq).ops).sread)(cq, (&raw mut e).cast(), 1, null(), 10_000) }
        });
        assert_eq!(ret, neg(FiErrno::FI_EAVAIL), "round {round}");
        c.assert_flushed(0xC1);
        assert!(buf.iter().all(|&b| b == 0xEE), "buffer untouched");
        late += usize::from(slow);
    }
    assert!(
        late <= 1,
        "{late} of 5 waits woke late, not at the shutdown"
    );
}

/// As for `fi_cq_sread`: a thread asleep in `fi_cntr_wait` on the receive counter when the
/// peer shuts the connection down returns at once with `-FI_EAVAIL`, the flushed receive
/// counted as an error, not at the wait's periodic look 100 ms into it.
#[test]
fn a_thread_in_cntr_wait_wakes_at_once_when_the_peer_shuts_the_connection_down() {
    let mut late = 0;
    for round in 0..5 {
        let c = Connected::new(FI_WAIT_UNSPEC, Some(FI_WAIT_UNSPEC));
        let cntr = c.rx_cntr.expect("the receive counter");
        let mut buf = [0xEEu8; 16];
        // SAFETY: an open endpoint; the buffer outlives its completion (flushed below).
        assert_eq!(unsafe { recv_ctx(c.server, &mut buf, 0xC4) }, 0);
        let waiting = Shared(cntr);
        let (ret, slow) =
            c.wait_woken_by_shutdown(round, move || cntr_wait(waiting.get(), 1, 10_000));
        assert_eq!(ret, neg_int(FiErrno::FI_EAVAIL), "round {round}");
        assert_eq!((cntr_readerr(cntr), cntr_read(cntr)), (1, 0));
        c.assert_flushed(0xC4);
        assert!(buf.iter().all(|&b| b == 0xEE), "buffer untouched");
        late += usize::from(slow);
    }
    assert!(
        late <= 1,
        "{late} of 5 waits woke late, not at the shutdown"
    );
}

/// An application asleep on the receive CQ's `FI_WAIT_FD` descriptor after `fi_trywait`
/// said it may sleep is woken by the peer's shutdown: the descriptor polls readable, and the
/// read that follows finds the flushed receive.
#[test]
fn a_cq_descriptor_polls_readable_when_the_peer_shuts_the_connection_down() {
    let c = Connected::new(FI_WAIT_FD, None);
    let mut buf = [0xEEu8; 16];
    // SAFETY: an open endpoint; the buffer outlives its completion (flushed below).
    assert_eq!(unsafe { recv_ctx(c.server, &mut buf, 0xC2) }, 0);
    // SAFETY: an open CQ; only the field's address is taken.
    let cq_fid: *mut Fid = unsafe { &mut (*c.cq_s).fid };
    let (ret, fd) = control_int(cq_fid, FI_GETWAIT);
    assert_eq!(ret, 0, "fi_control(FI_GETWAIT)");
    assert_eq!(trywait_on(c.m.open.fabric, &[cq_fid]), 0, "fi_trywait");
    assert!(!fd_readable(fd, 0), "nothing to read yet");
    c.shut_down_by_client();
    assert!(
        fd_readable(fd, 2000),
        "the descriptor stays unreadable after the peer's shutdown"
    );
    c.assert_flushed(0xC2);
    assert!(buf.iter().all(|&b| b == 0xEE), "buffer untouched");
}

/// As for a CQ: an application asleep on the receive counter's `FI_WAIT_FD` descriptor after
/// `fi_trywait` is woken by the peer's shutdown, and the counter then counts the flushed
/// receive as an error.
#[test]
fn a_counter_descriptor_polls_readable_when_the_peer_shuts_the_connection_down() {
    let c = Connected::new(FI_WAIT_UNSPEC, Some(FI_WAIT_FD));
    let cntr = c.rx_cntr.expect("the receive counter");
    let mut buf = [0xEEu8; 16];
    // SAFETY: an open endpoint; the buffer outlives its completion (flushed below).
    assert_eq!(unsafe { recv_ctx(c.server, &mut buf, 0xC3) }, 0);
    // SAFETY: an open counter; only the field's address is taken.
    let cntr_fid: *mut Fid = unsafe { &mut (*cntr).fid };
    let (ret, fd) = control_int(cntr_fid, FI_GETWAIT);
    assert_eq!(ret, 0, "fi_control(FI_GETWAIT)");
    assert_eq!(trywait_on(c.m.open.fabric, &[cntr_fid]), 0, "fi_trywait");
    assert!(!fd_readable(fd, 0), "nothing to read yet");
    c.shut_down_by_client();
    assert!(
        fd_readable(fd, 2000),
        "the descriptor stays unreadable after the peer's shutdown"
    );
    assert_eq!((cntr_readerr(cntr), cntr_read(cntr)), (1, 0));
    c.assert_flushed(0xC3);
    assert!(buf.iter().all(|&b| b == 0xEE), "buffer untouched");
}

/// `fi_close` of an endpoint whose peer shut the connection down, its receives still posted
/// and its CQ not read since: the receives are discarded with no completion, as
/// fi_endpoint(3) has it for every operation outstanding at `fi_close` (the flush a read
/// would have made is not made by the close).
#[test]
fn closing_an_endpoint_its_peer_shut_down_reports_no_completion_of_its_receives() {
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let (client, cq_c) = m.ep(m.open.info, eq_c);
    assert_eq!(connect(client, &name_of(pep_fid), b""), 0);
    let req = cm_event(eq_l).expect("FI_CONNREQ");
    let rx_cntr = m.open.cntr_open(FI_WAIT_UNSPEC).expect("fi_cntr_open");
    let (server, cq_s) = m.ep_counted(req.info, eq_l, Some(rx_cntr));
    // SAFETY: an open endpoint.
    assert_eq!(unsafe { ((*(*server).cm).accept)(server, null(), 0) }, 0);
    assert_eq!(cm_event(eq_c).expect("FI_CONNECTED").event, FI_CONNECTED);
    assert_eq!(cm_event(eq_l).expect("FI_CONNECTED").event, FI_CONNECTED);

    let mut buf = [0xEEu8; 16];
    // SAFETY: an open endpoint; the buffer outlives the endpoint.
    assert_eq!(unsafe { recv_ctx(server, &mut buf, 0xB1) }, 0);
    // SAFETY: an open endpoint.
    assert_eq!(unsafe { ((*(*client).cm).shutdown)(client, 0) }, 0);
    assert_eq!(cm_event(eq_l).expect("FI_SHUTDOWN").event, FI_SHUTDOWN);
    // SAFETY: open, closed once.
    assert_eq!(unsafe { close(&mut (*server).fid) }, 0);
    assert_eq!(cq_read(cq_s).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!((cntr_readerr(rx_cntr), cntr_read(rx_cntr)), (0, 0));
    assert!(buf.iter().all(|&b| b == 0xEE), "buffer untouched");

    // SAFETY: ours, open, closed once; the event's info freed once.
    unsafe {
        uet_fi::info::free_info(req.info);
        close_all(&[
            &mut (*client).fid,
            &mut (*cq_s).fid,
            &mut (*cq_c).fid,
            &mut (*rx_cntr).fid,
            pep_fid,
            &mut (*eq_l).fid,
            &mut (*eq_c).fid,
        ]);
    }
}

/// `fi_reject` refuses a request: the requester's EQ gets an `FI_ECONNREFUSED` error whose
/// error data is the reject's param; the handle is answered (a second reject, an endpoint
/// opened with its `fi_info`, are `-FI_EINVAL`). Closing a listener refuses the requests it
/// leaves unanswered.
#[test]
fn a_rejected_connection_is_refused_with_the_rejects_param() {
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let listener = name_of(pep_fid);
    let (client, cq_c) = m.ep(m.open.info, eq_c);
    assert_eq!(connect(client, &listener, b"please"), 0);
    let req = cm_event(eq_l).expect("FI_CONNREQ");
    // SAFETY: an open pep; the event's handle; a valid param.
    unsafe {
        let reject = (*(*pep).cm).reject;
        let handle = (*req.info).handle;
        assert_eq!(reject(pep.cast(), handle, b"go away".as_ptr().cast(), 7), 0);
        assert_eq!(
            reject(pep.cast(), handle, null(), 0),
            ineg(FiErrno::FI_EINVAL)
        );
    }
    let (e, data) = wait_eq_error(eq_c);
    // SAFETY: `client` is open; only the field's address is taken.
    let client_fid = unsafe { &raw mut (*client).fid };
    assert_eq!(
        (e.err, e.fid),
        (FiErrno::FI_ECONNREFUSED.get() as c_int, client_fid)
    );
    assert_eq!(data, b"go away", "the reject's param is the error data");
    assert_eq!(m.endpoint(req.info).err(), Some(ineg(FiErrno::FI_EINVAL)));

    // A request the listener never answers is refused when it closes.
    let (other, cq_o) = m.ep(m.open.info, eq_c);
    assert_eq!(connect(other, &listener, b""), 0);
    let req2 = cm_event(eq_l).expect("FI_CONNREQ");
    // SAFETY: ours, open, closed once.
    unsafe { assert_eq!(close(pep_fid), 0) };
    let (e, data) = wait_eq_error(eq_c);
    assert_eq!(e.err, FiErrno::FI_ECONNREFUSED.get() as c_int);
    assert!(data.is_empty(), "{data:?}");
    assert_eq!(m.endpoint(req2.info).err(), Some(ineg(FiErrno::FI_EINVAL)));

    // SAFETY: ours, open, closed once; the events' infos freed once.
    unsafe {
        uet_fi::info::free_info(req.info);
        uet_fi::info::free_info(req2.info);
        close_all(&[
            &mut (*client).fid,
            &mut (*other).fid,
            &mut (*cq_c).fid,
            &mut (*cq_o).fid,
            &mut (*eq_l).fid,
            &mut (*eq_c).fid,
        ]);
    }
}

/// Connection requests come from peers, in numbers the application cannot bound: one that
/// finds the listener's EQ full is refused (its requester gets `FI_ECONNREFUSED`), and the
/// queue is not overrun, which would make it unusable (fi_eq(3): overrun queues are fatal)
/// for every object reporting to it. The requests it holds are read, then `-FI_EAGAIN`, and
/// it goes on taking events.
#[test]
fn a_connection_request_finding_the_listeners_eq_full_is_refused_and_overruns_nothing() {
    const SIZE: usize = 2;
    let m = Msg::new();
    let eq_l = m.eq_with(SIZE, uet_av::flags::FI_WRITE);
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let listener = name_of(pep_fid);
    let eq_c = m.eq();
    let clients: Vec<_> = (0..=SIZE).map(|_| m.ep(m.open.info, eq_c)).collect();
    for &(client, _) in &clients {
        assert_eq!(connect(client, &listener, b""), 0);
    }
    // The one that did not fit is refused.
    let (e, _) = wait_eq_error(eq_c);
    assert_eq!(e.err, FiErrno::FI_ECONNREFUSED.get() as c_int);
    let mut infos = Vec::new();
    for _ in 0..SIZE {
        let req = eq_event(eq_l, 64, 0).expect("FI_CONNREQ");
        assert_eq!(req.event, FI_CONNREQ);
        infos.push(req.info);
    }
    let mut event = 0u32;
    let mut buf = [0u8; 64];
    // SAFETY: an open EQ; a valid buffer.
    let n = unsafe { ((*(*eq_l).ops).read)(eq_l, &mut event, buf.as_mut_ptr().cast(), 64, 0) };
    assert_eq!(
        n,
        neg(FiErrno::FI_EAGAIN),
        "the listener's EQ after its requests"
    );
    assert_eq!(
        eq_write(eq_l, 7),
        core::mem::size_of::<FiEqEntry>() as isize,
        "fi_eq_write to the listener's EQ"
    );
    assert_eq!(eq_read_entry(eq_l).map(|(_, e)| e.data), Ok(7));
    // SAFETY: an open pep; the events' handles and infos, answered and freed once; ours,
    // open, closed once.
    unsafe {
        reject_all(pep, &infos);
        for _ in 0..SIZE {
            let (e, _) = wait_eq_error(eq_c);
            assert_eq!(e.err, FiErrno::FI_ECONNREFUSED.get() as c_int);
        }
        close_endpoints_then(
            &clients,
            &[pep_fid, &raw mut (*eq_l).fid, &raw mut (*eq_c).fid],
        );
    }
}

/// fi_endpoint(3): `fi_control(FI_BACKLOG)` sets a listener's connection request backlog.
/// Set before `fi_listen` to 1, the listener holds one request unanswered and refuses the
/// next (`FI_ECONNREFUSED`); raised to 2 after, it holds one more. A value below 1 or a NULL
/// argument is `-FI_EINVAL`, with the backlog unchanged; other commands are `-FI_ENOSYS`.
#[test]
fn fi_control_fi_backlog_bounds_the_requests_a_listener_holds() {
    const FI_BACKLOG: c_int = 7;
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.passive_ep(m.open.info).expect("fi_passive_ep");
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let control = |command: c_int, arg: *mut core::ffi::c_void| -> c_int {
        // SAFETY: an open pep; `arg` NULL or an int.
        unsafe { ((*(*pep_fid).ops).control)(pep_fid, command, arg) }
    };
    let einval = ineg(FiErrno::FI_EINVAL);
    for bad in [0, -1] {
        let mut v: c_int = bad;
        assert_eq!(control(FI_BACKLOG, (&raw mut v).cast()), einval, "{bad}");
    }
    assert_eq!(control(FI_BACKLOG, null_mut()), einval);
    const FI_GETOPSFLAG: c_int = 2;
    assert_eq!(control(FI_GETOPSFLAG, null_mut()), ineg(FiErrno::FI_ENOSYS));
    let mut one: c_int = 1;
    assert_eq!(control(FI_BACKLOG, (&raw mut one).cast()), 0);
    // SAFETY: an open pep and EQ.
    unsafe {
        assert_eq!(bind(&mut (*pep).fid, &mut (*eq_l).fid, 0), 0, "fi_pep_bind");
        assert_eq!(((*(*pep).cm).listen)(pep.cast()), 0, "fi_listen");
    }
    let listener = name_of(pep_fid);
    let clients: Vec<_> = (0..4).map(|_| m.ep(m.open.info, eq_c)).collect();
    let ask = |k: usize| assert_eq!(connect(clients[k].0, &listener, b""), 0);
    ask(0);
    let held = eq_event(eq_l, 64, 0).expect("the first request");
    assert_eq!(held.event, FI_CONNREQ);
    ask(1);
    let (e, _) = wait_eq_error(eq_c);
    assert_eq!(
        e.err,
        FiErrno::FI_ECONNREFUSED.get() as c_int,
        "past a backlog of 1"
    );
    let mut two: c_int = 2;
    assert_eq!(control(FI_BACKLOG, (&raw mut two).cast()), 0);
    ask(2);
    let second = eq_event(eq_l, 64, 0).expect("a second request, within a backlog of 2");
    assert_eq!(second.event, FI_CONNREQ);
    ask(3);
    let (e, _) = wait_eq_error(eq_c);
    assert_eq!(
        e.err,
        FiErrno::FI_ECONNREFUSED.get() as c_int,
        "past a backlog of 2"
    );
    // SAFETY: an open pep; the events' handles and infos, answered and freed once; ours,
    // open, closed once.
    unsafe {
        reject_all(pep, &[held.info, second.info]);
        close_endpoints_then(
            &clients,
            &[pep_fid, &raw mut (*eq_l).fid, &raw mut (*eq_c).fid],
        );
    }
}

/// A request's handle, once the request is answered (accepted or rejected), names no
/// request ever again, not even the next one to arrive, whose handle is made right after
/// (where a freed heap block would be given again): `fi_reject` of it and `fi_endpoint` of
/// its `fi_info` are `-FI_EINVAL`, and the newer request, under a handle of its own, is
/// still there to answer.
#[test]
fn a_stale_connection_request_handle_never_names_a_newer_request() {
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let listener = name_of(pep_fid);
    let reject = |handle: *mut Fid| -> c_int {
        // SAFETY: an open pep; the handle is looked up, never read through.
        unsafe { ((*(*pep).cm).reject)(pep.cast(), handle, null(), 0) }
    };
    let einval = ineg(FiErrno::FI_EINVAL);
    let mut objects: Vec<*mut Fid> = Vec::new();
    let mut infos = Vec::new();
    let request = |objects: &mut Vec<*mut Fid>| {
        let (client, cq_c) = m.ep(m.open.info, eq_c);
        assert_eq!(connect(client, &listener, b""), 0);
        // SAFETY: open objects; only the fields' addresses are taken.
        unsafe { objects.extend([&raw mut (*client).fid, &raw mut (*cq_c).fid]) };
        // The request reaches the listener's EQ, where it waits unread.
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    request(&mut objects);
    let mut req = cm_event(eq_l).expect("FI_CONNREQ");
    for accept in [false, true, false, true] {
        request(&mut objects);
        // SAFETY: the provider's info.
        let handle = unsafe { (*req.info).handle };
        if accept {
            let (server, cq_s) = m.ep(req.info, eq_l);
            // SAFETY: an open endpoint.
            assert_eq!(unsafe { ((*(*server).cm).accept)(server, null(), 0) }, 0);
            // SAFETY: open objects; only the fields' addresses are taken.
            unsafe { objects.extend([&raw mut (*server).fid, &raw mut (*cq_s).fid]) };
        } else {
            assert_eq!(reject(handle), 0);
        }
        // The next request's handle is made as its event is read, right after.
        let next = cm_event(eq_l).expect("FI_CONNREQ");
        // SAFETY: the provider's info.
        let next_handle = unsafe { (*next.info).handle };
        assert_ne!(next_handle, handle, "a new request has a handle of its own");
        assert_eq!(reject(handle), einval, "a stale handle rejects nothing");
        assert_eq!(m.endpoint(req.info).err(), Some(einval));
        infos.push(std::mem::replace(&mut req, next).info);
        if accept {
            assert_eq!(cm_event(eq_c).expect("FI_CONNECTED").event, FI_CONNECTED);
            assert_eq!(cm_event(eq_l).expect("FI_CONNECTED").event, FI_CONNECTED);
        } else {
            let (e, _) = wait_eq_error(eq_c);
            assert_eq!(e.err, FiErrno::FI_ECONNREFUSED.get() as c_int);
        }
    }
    // The last request is still there to answer.
    // SAFETY: the provider's info.
    assert_eq!(reject(unsafe { (*req.info).handle }), 0);
    let (e, _) = wait_eq_error(eq_c);
    assert_eq!(e.err, FiErrno::FI_ECONNREFUSED.get() as c_int);
    infos.push(req.info);
    // SAFETY: ours, open, closed once; the events' infos freed once.
    unsafe {
        for info in infos {
            uet_fi::info::free_info(info);
        }
        close_all(&objects);
        close_all(&[pep_fid, &mut (*eq_l).fid, &mut (*eq_c).fid]);
    }
}

/// `fi_accept` and `fi_reject` of one request, racing in two threads: one answers it, the
/// other is `-FI_EINVAL` (the request is answered: its handle names none), as a use of the
/// handle after the answer is; the requester sees the answer that won.
#[test]
fn an_accept_racing_a_reject_of_one_request_loses_with_einval() {
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let listener = name_of(pep_fid);
    let einval = ineg(FiErrno::FI_EINVAL);
    for _ in 0..40 {
        let (client, cq_c) = m.ep(m.open.info, eq_c);
        assert_eq!(connect(client, &listener, b""), 0);
        let req = cm_event(eq_l).expect("FI_CONNREQ");
        let (server, cq_s) = m.ep(req.info, eq_l);
        // SAFETY: the provider's info, freed below.
        let handle = unsafe { (*req.info).handle } as usize;
        let barrier = std::sync::Barrier::new(2);
        let (accepted, rejected) = std::thread::scope(|s| {
            let (b, ep) = (&barrier, server as usize);
            let a = s.spawn(move || {
                b.wait();
                let ep = ep as *mut FidEp;
                // SAFETY: an open endpoint, not closed before the thread ends.
                unsafe { ((*(*ep).cm).accept)(ep, null(), 0) }
            });
            let (b, p) = (&barrier, pep as usize);
            let r = s.spawn(move || {
                b.wait();
                let pep = p as *mut FidPep;
                // SAFETY: an open pep, not closed before the thread ends; the handle is
                // looked up, never read through.
                unsafe { ((*(*pep).cm).reject)(pep.cast(), handle as *mut Fid, null(), 0) }
            });
            (a.join().unwrap(), r.join().unwrap())
        });
        match (accepted, rejected) {
            (0, e) => {
                assert_eq!(e, einval, "the reject that lost");
                assert_eq!(cm_event(eq_c).expect("FI_CONNECTED").event, FI_CONNECTED);
                assert_eq!(cm_event(eq_l).expect("FI_CONNECTED").event, FI_CONNECTED);
            }
            (e, 0) => {
                assert_eq!(e, einval, "the accept that lost");
                let (e, _) = wait_eq_error(eq_c);
                assert_eq!(e.err, FiErrno::FI_ECONNREFUSED.get() as c_int);
            }
            other => panic!("one answer wins: {other:?}"),
        }
        // SAFETY: ours, open, closed once; the event's info freed once.
        unsafe {
            uet_fi::info::free_info(req.info);
            close_all(&[
                &mut (*server).fid,
                &mut (*client).fid,
                &mut (*cq_s).fid,
                &mut (*cq_c).fid,
            ]);
        }
    }
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[pep_fid, &mut (*eq_l).fid, &mut (*eq_c).fid]) };
}

/// fi_cm(3): `fi_connect` is called once in an endpoint's lifetime. One that failed —
/// refused by the listener, or unreachable (no listener at the address) — leaves the
/// endpoint refused: another `fi_connect`, and `fi_accept`, are `-FI_EOPBADSTATE`, sends
/// and `fi_shutdown` `-FI_ENOTCONN`, and its EQ gets nothing more.
#[test]
fn a_failed_fi_connect_is_not_retried_on_the_same_endpoint() {
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let listener = name_of(pep_fid);
    let mut attr = av_attr(4);
    let av = m.open.av_open(&mut attr).unwrap();
    let unreachable = name_of_nobody(av);

    // Refused by the listener.
    let (refused, cq_r) = m.ep(m.open.info, eq_c);
    assert_eq!(connect(refused, &listener, b""), 0);
    let req = cm_event(eq_l).expect("FI_CONNREQ");
    // SAFETY: an open pep; the event's handle.
    unsafe {
        let reject = (*(*pep).cm).reject;
        assert_eq!(reject(pep.cast(), (*req.info).handle, null(), 0), 0);
    }
    let (e, _) = wait_eq_error(eq_c);
    assert_eq!(e.err, FiErrno::FI_ECONNREFUSED.get() as c_int);

    // Unreachable: no listener at the address.
    let (lost, cq_x) = m.ep(m.open.info, eq_c);
    assert_eq!(connect(lost, &unreachable, b""), 0);
    let (e, _) = wait_eq_error(eq_c);
    assert_eq!(e.err, FiErrno::FI_ECONNREFUSED.get() as c_int);

    for ep in [refused, lost] {
        for to in [&listener, &unreachable] {
            assert_eq!(connect(ep, to, b""), ineg(FiErrno::FI_EOPBADSTATE));
        }
        assert_eq!(send_on(ep, b"x"), neg(FiErrno::FI_ENOTCONN));
        // SAFETY: an open endpoint.
        unsafe {
            assert_eq!(
                ((*(*ep).cm).accept)(ep, null(), 0),
                ineg(FiErrno::FI_EINVAL)
            );
            assert_eq!(((*(*ep).cm).shutdown)(ep, 0), ineg(FiErrno::FI_ENOTCONN));
        }
    }
    // Nothing reached the listener, nor the EQ of the refused endpoints.
    let mut buf = [0u8; 64];
    let mut event = 0u32;
    std::thread::sleep(std::time::Duration::from_millis(20));
    for q in [eq_l, eq_c] {
        // SAFETY: an open EQ; a valid buffer.
        let n = unsafe { ((*(*q).ops).read)(q, &mut event, buf.as_mut_ptr().cast(), 64, 0) };
        assert_eq!(n, neg(FiErrno::FI_EAGAIN));
    }
    // SAFETY: ours, open, closed once; the event's info freed once.
    unsafe {
        uet_fi::info::free_info(req.info);
        close_all(&[
            &mut (*refused).fid,
            &mut (*lost).fid,
            &mut (*cq_r).fid,
            &mut (*cq_x).fid,
            pep_fid,
            &mut (*eq_l).fid,
            &mut (*eq_c).fid,
            &mut (*av).fid,
        ]);
    }
}

/// `FI_UET_CONNECT_TIMEOUT`: milliseconds, `0` for no deadline, unset for the driver's
/// default; a value that is not a number is logged and the default taken, never a panic.
#[test]
fn the_connect_timeout_variable_is_milliseconds_and_falls_back_on_bad_values() {
    use std::time::Duration;
    use uet_fi::ep::connect_timeout;
    let default = Some(uet_driver::CM_CONNECT_TIMEOUT);
    assert_eq!(default, Some(Duration::from_secs(5)));
    assert_eq!(connect_timeout(None), default);
    assert_eq!(
        connect_timeout(Some("250")),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        connect_timeout(Some(" 10000 ")),
        Some(Duration::from_secs(10))
    );
    assert_eq!(connect_timeout(Some("0")), None);
    for bad in ["", "5s", "-1", "1.5", "soon"] {
        assert_eq!(connect_timeout(Some(bad)), default, "{bad:?}");
    }
}

/// A number of milliseconds too large for 64 bits is a number all the same, and a timeout
/// longer than any deadline the clock can hold: no deadline, not the 5 s default.
#[test]
fn a_connect_timeout_beyond_64_bits_of_milliseconds_is_no_deadline() {
    use std::time::Duration;
    use uet_fi::ep::connect_timeout;
    assert_eq!(
        connect_timeout(Some("18446744073709551615")),
        Some(Duration::from_millis(u64::MAX))
    );
    for huge in ["18446744073709551616", " 99999999999999999999999999 "] {
        assert_eq!(connect_timeout(Some(huge)), None, "{huge:?}");
    }
}

/// Misuse of the connection calls is a fabric errno, and leaves nothing half done: an
/// `FI_EP_MSG` endpoint binds no AV; `fi_connect` and `fi_accept` need an EQ (and leave the
/// endpoint unenabled without one); `fi_accept` needs an endpoint opened with a request;
/// a listener needs an EQ, binds nothing else, has its address once listening; a passive
/// endpoint is of `FI_EP_MSG`; the connection calls of another type's endpoint are
/// `-FI_EOPNOTSUPP`.
#[test]
fn connection_calls_misused_return_fabric_errnos_and_change_nothing() {
    let m = Msg::new();
    let eq = m.eq();
    let mut attr = av_attr(4);
    let av = m.open.av_open(&mut attr).unwrap();
    let ep = m.endpoint(m.open.info).unwrap();
    // SAFETY: `ep` is open; only the field's address is taken.
    let ep_fid: *mut Fid = unsafe { &mut (*ep).fid };
    let cq = m.open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
    let listener = [0u8; 32];
    // SAFETY: open objects; valid arguments.
    unsafe {
        assert_eq!(bind(ep_fid, &mut (*av).fid, 0), ineg(FiErrno::FI_EINVAL));
        assert_eq!(bind(ep_fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV), 0);
        assert_eq!(
            connect(ep, &name_of_nobody(av), b""),
            ineg(FiErrno::FI_ENOEQ)
        );
        assert_eq!(
            ((*(*ep).cm).accept)(ep, null(), 0),
            ineg(FiErrno::FI_EINVAL)
        );
        // Still not enabled: it has no address.
        let mut len = 32;
        let mut name = [0u8; 32];
        let ret = ((*(*ep).cm).getname)(ep_fid, name.as_mut_ptr().cast(), &mut len);
        assert_eq!(ret, ineg(FiErrno::FI_EOPBADSTATE));
        assert_eq!(((*(*ep).cm).shutdown)(ep, 0), ineg(FiErrno::FI_ENOTCONN));
    }
    // A listener: no EQ, no listen; an EQ only; an address once listening.
    let pep = m.passive_ep(m.open.info).unwrap();
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    // SAFETY: open objects; valid arguments.
    unsafe {
        assert_eq!(((*(*pep).cm).listen)(pep.cast()), ineg(FiErrno::FI_ENOEQ));
        let mut len = 32;
        let mut name = [0u8; 32];
        let ret = ((*(*pep).cm).getname)(pep_fid, name.as_mut_ptr().cast(), &mut len);
        assert_eq!(ret, ineg(FiErrno::FI_EOPBADSTATE));
        assert_eq!(bind(pep_fid, &mut (*cq).fid, 0), ineg(FiErrno::FI_EINVAL));
        assert_eq!(bind(pep_fid, &mut (*eq).fid, 0), 0);
        assert_eq!(bind(pep_fid, &mut (*eq).fid, 0), ineg(FiErrno::FI_EINVAL));
        assert_eq!(((*(*pep).cm).listen)(pep.cast()), 0);
        assert_eq!(
            bind(pep_fid, &mut (*eq).fid, 0),
            ineg(FiErrno::FI_EOPBADSTATE)
        );
        // The EQ is bound: it does not close.
        assert_eq!(close(&mut (*eq).fid), ineg(FiErrno::FI_EBUSY));
    }
    let _ = name_of(pep_fid);
    // A passive endpoint of another type's fi_info.
    // SAFETY: the provider's own info, restored after.
    unsafe {
        (*(*m.open.info).ep_attr).ep_type = FI_EP_RDM;
        assert_eq!(
            m.passive_ep(m.open.info).err(),
            Some(ineg(FiErrno::FI_EINVAL))
        );
        (*(*m.open.info).ep_attr).ep_type = FI_EP_MSG;
    }
    // SAFETY: ours, open, closed once.
    unsafe {
        close_all(&[
            ep_fid,
            &mut (*cq).fid,
            pep_fid,
            &mut (*eq).fid,
            &mut (*av).fid,
        ]);
    }

    // An FI_EP_RDM endpoint has no connection.
    let pair = Pair::new(0);
    // SAFETY: open endpoints; valid arguments.
    unsafe {
        let ep = pair.p[0].ep;
        assert_eq!(connect(ep, &listener, b""), ineg(FiErrno::FI_EOPNOTSUPP));
        assert_eq!(
            ((*(*ep).cm).accept)(ep, null(), 0),
            ineg(FiErrno::FI_EOPNOTSUPP)
        );
        assert_eq!(((*(*ep).cm).shutdown)(ep, 0), ineg(FiErrno::FI_EOPNOTSUPP));
    }
}

/// A well-formed address no listener has.
fn name_of_nobody(av: *mut FidAv) -> [u8; 32] {
    nobody(av)
}

/// With `FI_SOURCE` and a node and service, the `FI_EP_MSG` answer is a listener's, with
/// `src_addr`; without, `dest_addr` is the listener's address. The NIC assigns PIDonFEPs: a
/// listener asked to be at one the NIC does not give it is refused at `fi_listen`
/// (`-FI_EADDRNOTAVAIL`), and listens once asked for none.
#[test]
fn a_listeners_fi_getinfo_gives_src_addr_and_a_connectors_dest_addr() {
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.ep_attr).ep_type = FI_EP_MSG };
    let m = Msg::new();
    let eq = m.eq();
    let at = |flags| getinfo(Some(c"10.0.0.1"), Some(c"4000"), flags, Some(&hints)).unwrap();
    let (src, dest) = (at(1 << 57), at(0));
    // SAFETY: the provider's answers, read then freed once; open objects.
    unsafe {
        for (info, source) in [(src, true), (dest, false)] {
            let i = &*info;
            assert!(i.next.is_null(), "only FI_EP_MSG");
            assert_eq!((*i.ep_attr).ep_type, FI_EP_MSG);
            let (given, absent) = if source {
                ((i.src_addr, i.src_addrlen), i.dest_addr)
            } else {
                ((i.dest_addr, i.dest_addrlen), i.src_addr)
            };
            assert!(!given.0.is_null() && given.1 == 32 && absent.is_null());
        }
        let pep = m.passive_ep(src).expect("fi_passive_ep");
        let pep_fid: *mut Fid = &mut (*pep).fid;
        assert_eq!(bind(pep_fid, &mut (*eq).fid, 0), 0);
        let listen = (*(*pep).cm).listen;
        assert_eq!(listen(pep.cast()), ineg(FiErrno::FI_EADDRNOTAVAIL));
        let mut len = 32;
        let mut name = [0u8; 32];
        let ret = ((*(*pep).cm).getname)(pep_fid, name.as_mut_ptr().cast(), &mut len);
        assert_eq!(ret, ineg(FiErrno::FI_EOPBADSTATE), "not listening");
        assert_eq!(close(pep_fid), 0);
        // A length no buffer has: refused, no slice made of it.
        (*src).src_addrlen = usize::MAX;
        assert_eq!(m.passive_ep(src).err(), Some(ineg(FiErrno::FI_EINVAL)));
        // Asked for no address: it listens.
        (*src).src_addrlen = 0;
        let pep = m.passive_ep(src).expect("fi_passive_ep");
        let pep_fid: *mut Fid = &mut (*pep).fid;
        assert_eq!(bind(pep_fid, &mut (*eq).fid, 0), 0);
        assert_eq!(listen(pep.cast()), 0);
        (*src).src_addrlen = 32;
        uet_fi::info::free_info(src);
        uet_fi::info::free_info(dest);
        close_all(&[pep_fid, &mut (*eq).fid]);
    }
}

/// A listener is on this NIC: one whose `fi_info` asks for a source at another fabric
/// address, with any PIDonFEP, is refused at `fi_listen` (`-FI_EADDRNOTAVAIL`), as one asked
/// to be at a PIDonFEP the NIC does not give it is, rather than listening where its
/// requesters do not look.
#[test]
fn a_listener_asked_to_be_at_another_fabric_address_is_refused_at_fi_listen() {
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.ep_attr).ep_type = FI_EP_MSG };
    let m = Msg::new();
    let eq = m.eq();
    let src = getinfo(Some(c"10.0.0.1"), Some(c"0"), 1 << 57, Some(&hints)).unwrap();
    let elsewhere = getinfo(Some(c"10.0.0.99"), Some(c"0"), 0, Some(&hints)).unwrap();
    // SAFETY: the provider's answers, edited, then freed once; open objects.
    unsafe {
        let listen_at = |info: *mut FiInfo| {
            let pep = m.passive_ep(info).expect("fi_passive_ep");
            let pep_fid: *mut Fid = &mut (*pep).fid;
            assert_eq!(bind(pep_fid, &mut (*eq).fid, 0), 0);
            let ret = ((*(*pep).cm).listen)(pep.cast());
            let mut len = 32;
            let mut name = [0u8; 32];
            let named = ((*(*pep).cm).getname)(pep_fid, name.as_mut_ptr().cast(), &mut len);
            assert_eq!(close(pep_fid), 0);
            (ret, named)
        };
        // This NIC's fabric address, any PIDonFEP: it listens.
        assert_eq!(listen_at(src), (0, 0));
        // Another's.
        assert_eq!((*src).src_addrlen, (*elsewhere).dest_addrlen);
        core::ptr::copy_nonoverlapping(
            (*elsewhere).dest_addr.cast::<u8>(),
            (*src).src_addr.cast::<u8>(),
            (*src).src_addrlen,
        );
        assert_eq!(
            listen_at(src),
            (
                ineg(FiErrno::FI_EADDRNOTAVAIL),
                ineg(FiErrno::FI_EOPBADSTATE)
            )
        );
        uet_fi::info::free_info(src);
        uet_fi::info::free_info(elsewhere);
        close_all(&[&mut (*eq).fid]);
    }
}

/// The auth keys of an answer: its domain's and its endpoint's, `None` where it has none.
type AuthKeys = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The auth keys of `fi_getinfo`'s answer to hints with `domain_key` as
/// `domain_attr->auth_key` and `ep_key` as `ep_attr->auth_key` (empty: none): the answer's
/// domain and endpoint keys, or the negative errno.
fn answered_auth_keys(domain_key: &[u8], ep_key: &[u8]) -> Result<AuthKeys, c_int> {
    let (mut domain_key, mut ep_key) = (domain_key.to_vec(), ep_key.to_vec());
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes; the keys outlive the call.
    unsafe {
        let (d, e) = (&mut *hints.info.domain_attr, &mut *hints.info.ep_attr);
        if !domain_key.is_empty() {
            (d.auth_key, d.auth_key_size) = (domain_key.as_mut_ptr(), domain_key.len());
        }
        if !ep_key.is_empty() {
            (e.auth_key, e.auth_key_size) = (ep_key.as_mut_ptr(), ep_key.len());
        }
    }
    let info = getinfo(None, None, 0, Some(&hints))?;
    let key = |p: *const u8, len: usize| {
        // SAFETY: the answer's key holds its size in bytes.
        (!p.is_null()).then(|| unsafe { core::slice::from_raw_parts(p, len) }.to_vec())
    };
    // SAFETY: the provider's answer, read, then freed once.
    unsafe {
        let (d, e) = (&*(*info).domain_attr, &*(*info).ep_attr);
        let keys = (
            key(d.auth_key, d.auth_key_size),
            key(e.auth_key, e.auth_key_size),
        );
        uet_fi::info::free_info(info);
        Ok(keys)
    }
}

/// fi_getinfo(3): a non-zero hint "indicates that a provider must support the requested value
/// or fail the operation with -FI_ENODATA". An endpoint takes its domain's auth key (its
/// JobID): hints asking for an endpoint auth key get it when it is the domain's, answered in
/// both, and `-FI_ENODATA` otherwise (another JobID, none in the domain, or a key that is no
/// JobID), never an answer whose endpoints would be of another job than the one asked.
#[test]
fn hints_asking_for_an_endpoint_auth_key_get_it_only_as_the_domains() {
    let (a, b) = (
        uet_av::job_id_to_auth_key(0x42),
        uet_av::job_id_to_auth_key(0x43),
    );
    let some = |k: &[u8]| Some(k.to_vec());
    assert_eq!(answered_auth_keys(&a, &[]), Ok((some(&a), None)));
    assert_eq!(answered_auth_keys(&a, &a), Ok((some(&a), some(&a))));
    assert_eq!(answered_auth_keys(&a, &b), Err(ENODATA));
    assert_eq!(answered_auth_keys(&[], &a), Err(ENODATA));
    assert_eq!(answered_auth_keys(&a, &a[..3]), Err(ENODATA));
}

/// An endpoint takes its domain's JobID, and `fi_endpoint`, `fi_scalable_ep` and
/// `fi_passive_ep` read no key of their own: an `fi_info` whose `ep_attr->auth_key` is another
/// JobID, or no JobID, is refused (`-FI_EINVAL`) rather than opened into the domain's job;
/// one that names the domain's opens.
#[test]
fn an_endpoint_is_not_opened_with_an_auth_key_other_than_its_domains() {
    let domain_key = uet_av::job_id_to_auth_key(0x42);
    let (mut ours, mut other) = (domain_key, uet_av::job_id_to_auth_key(0x43));
    let opened = |ep_type: c_int, edit: &mut dyn FnMut(&mut FiEpAttr)| {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        let mut key = domain_key;
        // SAFETY: the hints' own attributes; the key outlives the call.
        unsafe {
            let d = &mut *hints.info.domain_attr;
            (d.auth_key, d.auth_key_size) = (key.as_mut_ptr(), key.len());
            (*hints.info.ep_attr).ep_type = ep_type;
        }
        let open = Open::with_hints(&hints);
        let mut ep: *mut Fid = null_mut();
        // SAFETY: the provider's own info, its key restored before it is freed; an open
        // fabric and domain; a valid out pointer; what opens is closed once.
        unsafe {
            let ep_attr = &mut *(*open.info).ep_attr;
            let (key, size) = (ep_attr.auth_key, ep_attr.auth_key_size);
            edit(ep_attr);
            let out = (&raw mut ep).cast();
            let ret = match ep_type {
                FI_EP_MSG => {
                    let ops = &*(*open.fabric).ops;
                    (ops.passive_ep)(open.fabric, open.info, out, null_mut())
                }
                _ => {
                    let ops = &*(*open.domain).ops;
                    let scalable = ep_attr.rx_ctx_cnt > 1;
                    let open_ep = if scalable {
                        ops.scalable_ep
                    } else {
                        ops.endpoint
                    };
                    open_ep(open.domain, open.info.cast(), out, null_mut())
                }
            };
            (ep_attr.auth_key, ep_attr.auth_key_size) = (key, size);
            if ret == 0 {
                assert_eq!(close(ep), 0);
            }
            ret
        }
    };
    for (ep_type, rx_ctx_cnt) in [(FI_EP_RDM, 1), (FI_EP_RDM, 2), (FI_EP_MSG, 1)] {
        let with_key = |key: *mut u8, size: usize| {
            opened(ep_type, &mut |ep: &mut FiEpAttr| {
                ep.rx_ctx_cnt = rx_ctx_cnt;
                (ep.auth_key, ep.auth_key_size) = (key, size);
            })
        };
        let what = format!("type {ep_type}, {rx_ctx_cnt} receive contexts");
        assert_eq!(with_key(null_mut(), 0), 0, "{what}: the domain's key");
        assert_eq!(
            with_key(ours.as_mut_ptr(), 4),
            0,
            "{what}: the domain's key"
        );
        assert_eq!(
            with_key(other.as_mut_ptr(), 4),
            EINVAL,
            "{what}: another JobID"
        );
        assert_eq!(with_key(ours.as_mut_ptr(), 3), EINVAL, "{what}: no JobID");
    }
}

/// fi_endpoint(3): `ep_attr->auth_key_size` and `auth_key` are "ignored unless the fabric is
/// opened with API version 1.5 or greater". On a fabric of API 1.4 (whose `struct fi_ep_attr`
/// has no such fields) `fi_endpoint`, `fi_scalable_ep` and `fi_passive_ep` open an endpoint
/// whatever they hold.
#[test]
fn before_api_1_5_an_endpoints_auth_key_is_ignored() {
    let mut other = uet_av::job_id_to_auth_key(0x43);
    for (ep_type, rx_ctx_cnt) in [(FI_EP_RDM, 1), (FI_EP_RDM, 2), (FI_EP_MSG, 1)] {
        for size in [4, 3] {
            let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
            // SAFETY: the hints' own attributes.
            unsafe { (*hints.info.ep_attr).ep_type = ep_type };
            let open = Open::with_hints_at(&hints, fi_version(1, 4));
            let mut ep: *mut Fid = null_mut();
            // SAFETY: the provider's own info, its key restored before it is freed; an open
            // fabric and domain; a valid out pointer; what opens is closed once.
            let ret = unsafe {
                let ep_attr = &mut *(*open.info).ep_attr;
                let saved = (ep_attr.auth_key, ep_attr.auth_key_size, ep_attr.rx_ctx_cnt);
                (ep_attr.auth_key, ep_attr.auth_key_size) = (other.as_mut_ptr(), size);
                ep_attr.rx_ctx_cnt = rx_ctx_cnt;
                let out = (&raw mut ep).cast();
                let ret = if ep_type == FI_EP_MSG {
                    let ops = &*(*open.fabric).ops;
                    (ops.passive_ep)(open.fabric, open.info, out, null_mut())
                } else {
                    let ops = &*(*open.domain).ops;
                    let open_ep = if rx_ctx_cnt > 1 {
                        ops.scalable_ep
                    } else {
                        ops.endpoint
                    };
                    open_ep(open.domain, open.info.cast(), out, null_mut())
                };
                (ep_attr.auth_key, ep_attr.auth_key_size, ep_attr.rx_ctx_cnt) = saved;
                if ret == 0 {
                    assert_eq!(close(ep), 0);
                }
                ret
            };
            assert_eq!(
                ret, 0,
                "type {ep_type}, {rx_ctx_cnt} receive contexts, a key of {size} bytes"
            );
        }
    }
}

/// The address of the answer `info` to `fi_getinfo`: its `src_addr` with `source`, else its
/// `dest_addr`. The answer is freed.
fn answered_address(info: *mut FiInfo, source: bool) -> Vec<u8> {
    // SAFETY: the provider's answer, read, then freed once.
    unsafe {
        let i = &*info;
        let (p, len) = if source {
            (i.src_addr, i.src_addrlen)
        } else {
            (i.dest_addr, i.dest_addrlen)
        };
        assert!(!p.is_null() && len > 0, "an address in the answer");
        let bytes = core::slice::from_raw_parts(p.cast::<u8>(), len).to_vec();
        uet_fi::info::free_info(info);
        bytes
    }
}

/// fi_getinfo(3): "Applications may also pass in an FI_ADDR_STR formatted address as the node
/// parameter. In such cases, the service parameter must be NULL." Such a node names the
/// address its node and service name apart, as the destination or, with `FI_SOURCE`, the
/// source (on this NIC only); a service beside it is `-FI_EINVAL`.
#[test]
fn fi_getinfo_takes_an_fi_addr_str_address_as_node_with_a_null_service() {
    use uet_fi::info::FI_SOURCE;
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    let at = |node: &CStr, service: Option<&CStr>, flags| {
        getinfo(Some(node), service, flags, Some(&hints))
    };
    let apart = answered_address(at(c"10.0.0.2", Some(c"7?ri=3+2"), 0).unwrap(), false);
    let whole = at(c"uet://10.0.0.2/7?ri=3+2", None, 0).expect("an FI_ADDR_STR node");
    assert_eq!(answered_address(whole, false), apart);
    let apart = answered_address(at(c"10.0.0.1", Some(c"9"), FI_SOURCE).unwrap(), true);
    let whole = at(c"uet://10.0.0.1/9", None, FI_SOURCE).expect("an FI_ADDR_STR source");
    assert_eq!(answered_address(whole, true), apart);
    assert_eq!(
        at(c"uet://10.0.0.2/7", None, FI_SOURCE).err(),
        Some(ENODATA)
    );
    assert_eq!(at(c"uet://10.0.0.2/7", Some(c"7"), 0).err(), Some(EINVAL));
    assert_eq!(at(c"uet://10.0.0.2", None, 0).err(), Some(EINVAL));
}

/// fi_getinfo(3): `FI_NUMERICHOST` "indicates that the node parameter is a numeric string
/// representation of a fabric address ... Use of this flag will suppress any lengthy name
/// resolution protocol". With it a host name is refused (`-FI_EINVAL`) and never looked up,
/// as a node or as the node of an `FI_ADDR_STR` address; an IP literal is taken as without it.
#[test]
fn with_fi_numerichost_fi_getinfo_resolves_no_host_name() {
    use uet_fi::info::FI_SOURCE;
    const FI_NUMERICHOST: u64 = 1 << 55;
    let at = |node: &CStr, service: Option<&CStr>, flags| getinfo(Some(node), service, flags, None);
    let resolved = at(c"localhost", Some(c"7"), 0).expect("localhost resolves");
    let literal = at(c"127.0.0.1", Some(c"7"), FI_NUMERICHOST).expect("an IP literal");
    assert_eq!(
        answered_address(resolved, false),
        answered_address(literal, false)
    );
    let whole = at(c"uet://127.0.0.1/7", None, FI_NUMERICHOST).expect("an IP literal");
    // SAFETY: the provider's answer, freed once.
    unsafe { uet_fi::info::free_info(whole) };
    for flags in [FI_NUMERICHOST, FI_NUMERICHOST | FI_SOURCE] {
        assert_eq!(at(c"localhost", Some(c"7"), flags).err(), Some(EINVAL));
        assert_eq!(at(c"uet://localhost/7", None, flags).err(), Some(EINVAL));
    }
}

/// fi_getinfo(3): with `FI_SOURCE`, "either the node and/or service parameter must be
/// non-NULL": the flag with neither is an invalid call (`-FI_EINVAL`), as libfabric's own
/// providers answer it, never an answer that takes no source from them.
#[test]
fn fi_getinfo_with_fi_source_and_neither_node_nor_service_is_einval() {
    use uet_fi::info::FI_SOURCE;
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    assert_eq!(getinfo(None, None, FI_SOURCE, None).err(), Some(EINVAL));
    assert_eq!(
        getinfo(None, None, FI_SOURCE, Some(&hints)).err(),
        Some(EINVAL)
    );
    for (node, service) in [(Some(c"10.0.0.1"), None), (None, Some(c"9"))] {
        let info = getinfo(node, service, FI_SOURCE, Some(&hints)).expect("a source named");
        // SAFETY: the provider's answer, freed once.
        unsafe { uet_fi::info::free_info(info) };
    }
}

/// fi_getinfo(3): the hints' `src_addr` "will be ignored in hints if FI_SOURCE flag is set",
/// and their `dest_addr` "unless the node and service parameters are NULL or FI_SOURCE flag is
/// set". An address the call reads is refused when it does not parse (`-FI_EINVAL`) or, as a
/// source, is not on this NIC (`-FI_ENODATA`); one it ignores is never refused, and the
/// answer has what node and service name in its place.
#[test]
fn fi_getinfo_ignores_the_hints_addresses_that_node_service_and_fi_source_replace() {
    use uet_fi::info::FI_SOURCE;
    let mut hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    let plain = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    let mut malformed = [0xffu8; 32];
    let other_nic = {
        let info = getinfo(Some(c"10.0.0.2"), Some(c"9"), 0, Some(&plain)).unwrap();
        answered_address(info, false)
    };
    let source = |hints: &Hints| getinfo(Some(c"10.0.0.1"), Some(c"9"), FI_SOURCE, Some(hints));
    let dest = |hints: &Hints| getinfo(Some(c"10.0.0.2"), Some(c"9"), 0, Some(hints));
    let want_src = answered_address(source(&plain).unwrap(), true);
    let want_dest = answered_address(dest(&plain).unwrap(), false);
    for (src_addr, refused) in [
        (malformed.as_mut_ptr(), EINVAL),
        (other_nic.as_ptr().cast_mut(), ENODATA),
    ] {
        hints.info.src_addr = src_addr.cast();
        hints.info.src_addrlen = 32;
        assert_eq!(getinfo(None, None, 0, Some(&hints)).err(), Some(refused));
        let info = source(&hints).expect("src_addr ignored with FI_SOURCE");
        assert_eq!(answered_address(info, true), want_src);
    }
    hints.info.src_addr = null_mut();
    hints.info.src_addrlen = 0;
    hints.info.dest_addr = malformed.as_mut_ptr().cast();
    hints.info.dest_addrlen = 32;
    assert_eq!(getinfo(None, None, 0, Some(&hints)).err(), Some(EINVAL));
    assert_eq!(source(&hints).err(), Some(EINVAL), "read with FI_SOURCE");
    let info = dest(&hints).expect("dest_addr ignored beside a node and service");
    assert_eq!(answered_address(info, false), want_dest);
    // A length no buffer has (an `ssize_t` meant negative, passed as a `size_t`) is refused,
    // no slice made of it.
    for len in [usize::MAX, (isize::MAX as usize) + 1] {
        hints.info.dest_addrlen = len;
        assert_eq!(getinfo(None, None, 0, Some(&hints)).err(), Some(EINVAL));
    }
    hints.info.dest_addr = null_mut();
    hints.info.dest_addrlen = 0;
    hints.info.src_addr = malformed.as_mut_ptr().cast();
    hints.info.src_addrlen = usize::MAX;
    assert_eq!(getinfo(None, None, 0, Some(&hints)).err(), Some(EINVAL));
}

/// An `FI_EP_DGRAM` endpoint's flagless sends take the completion level of its `fi_info`'s
/// `tx_attr->op_flags`; a datagram send cannot meet `FI_DELIVERY_COMPLETE` or
/// `FI_MATCH_COMPLETE` (`fi_cq(3)`), so `fi_endpoint` refuses an info asking either for a
/// datagram endpoint, as `fi_getinfo` never answers one so, and takes transmit complete.
#[test]
fn a_datagram_endpoint_is_not_opened_with_a_reliable_completion_level_as_its_default() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let endpoint = |op_flags: u64| {
        let mut ep: *mut FidEp = null_mut();
        // SAFETY: the provider's own info, edited; a valid out pointer.
        let ret = unsafe {
            as_dgram(&mut *open.info);
            (*(*open.info).tx_attr).op_flags = op_flags;
            ((*(*open.domain).ops).endpoint)(
                open.domain,
                open.info.cast(),
                (&raw mut ep).cast(),
                null_mut(),
            )
        };
        if ret == 0 {
            // SAFETY: the endpoint just opened, closed once.
            assert_eq!(unsafe { close(&mut (*ep).fid) }, 0);
        }
        ret
    };
    let einval = -(FiErrno::FI_EINVAL.get() as c_int);
    assert_eq!(
        endpoint(FI_COMPLETION | (1 << 28)),
        einval,
        "FI_DELIVERY_COMPLETE"
    );
    assert_eq!(
        endpoint(FI_COMPLETION | (1 << 31)),
        einval,
        "FI_MATCH_COMPLETE"
    );
    assert_eq!(
        endpoint(FI_COMPLETION | (1 << 27)),
        0,
        "FI_TRANSMIT_COMPLETE"
    );
    assert_eq!(endpoint(FI_COMPLETION | (1 << 26)), 0, "FI_INJECT_COMPLETE");
}

/// A datagram that arrives before its receive: an untagged one is dropped (a receive posted
/// later never sees it), a tagged one waits on the NIC's unexpected list for its tagged
/// receive, as on a reliable endpoint.
#[test]
fn an_early_tagged_datagram_waits_for_its_receive_and_an_untagged_one_is_dropped() {
    let pair = Pair::with_info(0, as_dgram);
    // SAFETY: open endpoints' operations.
    let (tx, rx) = unsafe { (&*(*pair.p[0].ep).tagged, &*(*pair.p[1].ep).tagged) };
    assert_eq!(pair.send(0, b"untagged", 1), 0);
    // SAFETY: an open endpoint; the message is copied at the call.
    let ret = unsafe {
        (tx.send)(
            pair.p[0].ep,
            b"tagged".as_ptr().cast(),
            6,
            null_mut(),
            pair.p[1].addr,
            0x42,
            2 as _,
        )
    };
    assert_eq!(ret, 0);
    let mut sent: Vec<usize> = (0..2)
        .map(|_| pair.wait(0).expect("sent").op_context as usize)
        .collect();
    sent.sort_unstable();
    assert_eq!(sent, [1, 2]);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));

    let mut ubuf = [0u8; 16];
    let mut tbuf = [0u8; 16];
    // SAFETY: open endpoints; the buffers outlive the receives (the untagged one is dropped
    // unreported at the close).
    unsafe {
        assert_eq!(pair.post_recv(1, &mut ubuf, 3), 0);
        let buf = tbuf.as_mut_ptr().cast();
        assert_eq!(
            (rx.recv)(pair.p[1].ep, buf, 16, null_mut(), 0, 0x42, 0, 4 as _),
            0
        );
    }
    let got = pair
        .wait(1)
        .expect("the tagged datagram, held for its receive");
    assert_eq!((got.op_context as usize, got.len), (4, 6));
    assert_eq!(&tbuf[..6], b"tagged");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!(ubuf, [0; 16]);
}

/// A utility provider asking for a core to build on (libfabric's `OFI_CORE_PROV_ONLY`, as
/// ofi_rxd asks for datagram endpoints and ofi_rxm for connected ones) is answered
/// `-FI_ENODATA`: the provider's own `FI_EP_RDM` is the NIC's, and no software RDM goes in
/// front of it. The same hints without the flag are answered.
#[test]
fn utility_providers_get_no_core_to_layer_an_rdm_on() {
    for t in [FI_EP_DGRAM, FI_EP_MSG, FI_EP_UNSPEC] {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe { (*hints.info.ep_attr).ep_type = t };
        assert_eq!(
            getinfo(None, None, uet_fi::info::OFI_CORE_PROV_ONLY, Some(&hints)).err(),
            Some(ENODATA),
            "type {t}"
        );
    }
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.ep_attr).ep_type = FI_EP_DGRAM };
    let info = getinfo(None, None, 0, Some(&hints)).expect("the datagram endpoint");
    // SAFETY: the provider's answer, freed once.
    unsafe { uet_fi::info::free_info(info) };
}

/// In an `FI_ADDR_STR` domain an endpoint's `fi_getname` is its address as a string (with its
/// NUL), which an AV of the same format inserts as it is, so two endpoints that swap names
/// reach each other; a buffer too short gets `-FI_ETOOSMALL` and the size.
#[test]
fn in_a_string_domain_fi_getname_gives_the_string_an_av_inserts() {
    let open = Open::new(FI_MSG, FI_ADDR_STR);
    let mut attr = av_attr(4);
    let av = open.av_open(&mut attr).unwrap();
    let eps = [0, 1].map(|_| {
        let cq = open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
        let ep = open.endpoint();
        // SAFETY: an open AV, CQ and endpoint.
        unsafe {
            let fops = &*(*ep).fid.ops;
            assert_eq!((fops.bind)(&mut (*ep).fid, &mut (*av).fid, 0), 0);
            assert_eq!(
                (fops.bind)(&mut (*ep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
                0
            );
            assert_eq!((fops.control)(&mut (*ep).fid, FI_ENABLE, null_mut()), 0);
        }
        (ep, cq)
    });
    let name = |ep: *mut FidEp| {
        let mut buf = [0u8; 128];
        let mut len = 4;
        // SAFETY: an open endpoint; `buf` holds `len` bytes.
        let short =
            unsafe { ((*(*ep).cm).getname)(&mut (*ep).fid, buf.as_mut_ptr().cast(), &mut len) };
        assert_eq!(short, -(FiErrno::FI_ETOOSMALL.get() as c_int));
        assert!(len > 4 && len < buf.len(), "the size: {len}");
        let want = len;
        // SAFETY: as above.
        let ret =
            unsafe { ((*(*ep).cm).getname)(&mut (*ep).fid, buf.as_mut_ptr().cast(), &mut len) };
        assert_eq!((ret, len), (0, want));
        assert_eq!(buf[len - 1], 0, "NUL-terminated");
        CStr::from_bytes_with_nul(&buf[..len]).unwrap().to_owned()
    };
    let (a, b) = (name(eps[0].0), name(eps[1].0));
    assert!(a.to_str().unwrap().contains("10.0.0.1"), "{a:?}");
    assert_ne!(a, b);
    let mut fi = [0u64; 2];
    // An FI_ADDR_STR AV takes an array of string pointers (fi_av(3)).
    let names = [a.as_ptr(), b.as_ptr()];
    // SAFETY: an open AV; two pointers to NUL-terminated strings, two fi_addr slots.
    let inserted = unsafe {
        ((*(*av).ops).insert)(av, names.as_ptr().cast(), 2, fi.as_mut_ptr(), 0, null_mut())
    };
    assert_eq!((inserted, fi), (2, [0, 1]));
    // A message from the first endpoint to the second, by the fi_addr of its name.
    let mut rbuf = [0u8; 8];
    // SAFETY: open endpoints; `rbuf` outlives the receive's completion, read below; the
    // message is copied at the call.
    unsafe {
        let rx = &*(*eps[1].0).msg;
        let buf = rbuf.as_mut_ptr().cast();
        assert_eq!((rx.recv)(eps[1].0, buf, 8, null_mut(), u64::MAX, 7 as _), 0);
        let tx = &*(*eps[0].0).msg;
        let msg = b"by name";
        let ret = (tx.send)(eps[0].0, msg.as_ptr().cast(), 7, null_mut(), fi[1], 8 as _);
        assert_eq!(ret, 0);
    }
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    // Room for an entry of any format; the CQ writes its FI_CQ_FORMAT_DATA prefix.
    let mut e = FiCqTaggedEntry {
        op_context: null_mut(),
        flags: 0,
        len: 0,
        buf: null_mut(),
        data: 0,
        tag: 0,
    };
    loop {
        // SAFETY: an open CQ; room for one entry of its format.
        let ret = unsafe { ((*(*eps[1].1).ops).read)(eps[1].1, (&raw mut e).cast(), 1) };
        if ret == 1 || std::time::Instant::now() > end {
            assert_eq!(ret, 1, "delivered");
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!((e.op_context as usize, e.len), (7, 7));
    assert_eq!(&rbuf[..7], b"by name");
    // SAFETY: ours, open, closed once.
    unsafe {
        for (ep, cq) in eps {
            assert_eq!(close(&mut (*ep).fid), 0);
            assert_eq!(close(&mut (*cq).fid), 0);
        }
        assert_eq!(close(&mut (*av).fid), 0);
    }
}

/// An application's own events name its objects by their addresses; the provider's objects
/// (listeners, endpoints, AVs) have fabric ids no address has. So an `FI_CONNREQ` an
/// application writes into a queue a listener reports to is read back as written, whatever
/// its `fid`: it is never taken for the listener's own request, nor dropped with it.
#[test]
fn written_events_are_never_taken_for_the_providers_own_whatever_their_fid() {
    let m = Msg::new();
    let mut eq = null_mut();
    let mut attr = FiEqAttr {
        size: 0,
        flags: uet_av::flags::FI_WRITE,
        wait_obj: FI_WAIT_UNSPEC,
        signaling_vector: 0,
        wait_set: null_mut(),
    };
    // SAFETY: an open fabric; valid attributes and out pointer.
    unsafe {
        assert_eq!(
            ((*(*m.open.fabric).ops).eq_open)(m.open.fabric, &mut attr, &mut eq, null_mut()),
            0
        );
    }
    let pep = m.listen(eq);
    // Every small value, where a counter of the process's objects would be.
    const WRITTEN: usize = 256;
    for fid in 1..=WRITTEN {
        let mut b = Vec::new();
        b.extend_from_slice(&fid.to_ne_bytes());
        b.extend_from_slice(&0usize.to_ne_bytes());
        // SAFETY: an open EQ opened with FI_WRITE; `b` is read during the call.
        let n = unsafe { ((*(*eq).ops).write)(eq, FI_CONNREQ, b.as_ptr().cast(), b.len(), 0) };
        assert_eq!(n, 16, "fid {fid}");
    }
    for fid in 1..=WRITTEN {
        let ev = eq_event(eq, 64, 0).unwrap_or_else(|e| panic!("written event {fid}: {e}"));
        assert_eq!(
            (ev.event, ev.fid as usize, ev.info as usize),
            (FI_CONNREQ, fid, 0),
            "written event {fid}"
        );
    }
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[&raw mut (*pep).fid, &raw mut (*eq).fid]) };
}

/// `fi_eq_write` of a queue opened with `FI_WRITE` takes any event in the entry fi_eq(3)
/// gives it: a connection event's `struct fi_eq_cm_entry` and its data after it, another
/// event's `struct fi_eq_entry`; a read gives each back as written. Another length, a code
/// that is no event, or a flag (1.17 defines none for the call) is refused and writes
/// nothing.
#[test]
fn fi_eq_write_takes_each_event_in_its_own_entry() {
    let m = Msg::new();
    let mut eq = null_mut();
    let mut attr = FiEqAttr {
        size: 0,
        flags: uet_av::flags::FI_WRITE,
        wait_obj: FI_WAIT_UNSPEC,
        signaling_vector: 0,
        wait_set: null_mut(),
    };
    // SAFETY: an open fabric; valid attributes and out pointer.
    unsafe {
        assert_eq!(
            ((*(*m.open.fabric).ops).eq_open)(m.open.fabric, &mut attr, &mut eq, null_mut()),
            0
        );
    }
    let write = |event: u32, bytes: &[u8], flags: u64| -> isize {
        // SAFETY: an open EQ opened with FI_WRITE; `bytes` is read during the call.
        unsafe { ((*(*eq).ops).write)(eq, event, bytes.as_ptr().cast(), bytes.len(), flags) }
    };
    let cm = |fid: usize, info: usize, data: &[u8]| -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&fid.to_ne_bytes());
        b.extend_from_slice(&info.to_ne_bytes());
        b.extend_from_slice(data);
        b
    };
    let plain = |fid: usize, context: usize, data: u64| -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&fid.to_ne_bytes());
        b.extend_from_slice(&context.to_ne_bytes());
        b.extend_from_slice(&data.to_ne_bytes());
        b
    };
    let connected = cm(0xF1D0, 0x1FF0, b"app data");
    assert_eq!(write(FI_CONNECTED, &connected, 0), connected.len() as isize);
    let shutdown = cm(0xF1D1, 0, b"");
    assert_eq!(write(FI_SHUTDOWN, &shutdown, 0), 16);
    let connreq = cm(0xF1D2, 0x2FF0, b"r");
    assert_eq!(write(FI_CONNREQ, &connreq, 0), 17);
    const FI_AV_COMPLETE: u32 = 5;
    let av_complete = plain(0xF1D3, 0xC0, 42);
    assert_eq!(write(FI_AV_COMPLETE, &av_complete, 0), 24);
    // Refused: a connection event shorter than its entry, another event not its entry's
    // length, a code that is no event, a flag.
    let einval = neg(FiErrno::FI_EINVAL);
    assert_eq!(write(FI_CONNECTED, &connected[..12], 0), einval);
    assert_eq!(write(FI_AV_COMPLETE, &connreq, 0), einval);
    assert_eq!(write(FI_AV_COMPLETE, &av_complete[..16], 0), einval);
    assert_eq!(write(99, &av_complete, 0), einval);
    assert_eq!(write(FI_SHUTDOWN, &shutdown, 1), neg(FiErrno::FI_EBADFLAGS));

    let ev = eq_event(eq, 64, 0).expect("FI_CONNECTED");
    assert_eq!(
        (
            ev.event,
            ev.fid as usize,
            ev.info as usize,
            ev.data.as_slice()
        ),
        (FI_CONNECTED, 0xF1D0, 0x1FF0, &b"app data"[..])
    );
    let ev = eq_event(eq, 64, 0).expect("FI_SHUTDOWN");
    assert_eq!(
        (ev.event, ev.fid as usize, ev.info as usize, ev.data.len()),
        (FI_SHUTDOWN, 0xF1D1, 0, 0)
    );
    let ev = eq_event(eq, 64, 0).expect("FI_CONNREQ");
    assert_eq!(
        (
            ev.event,
            ev.fid as usize,
            ev.info as usize,
            ev.data.as_slice()
        ),
        (FI_CONNREQ, 0xF1D2, 0x2FF0, &b"r"[..])
    );
    let mut buf = [0u8; 64];
    let mut event = 0u32;
    // SAFETY: an open EQ; a valid buffer.
    let n = unsafe { ((*(*eq).ops).read)(eq, &mut event, buf.as_mut_ptr().cast(), 64, 0) };
    assert_eq!((n, event), (24, FI_AV_COMPLETE));
    assert_eq!(&buf[..24], av_complete.as_slice());
    // SAFETY: an open EQ; a valid buffer.
    let n = unsafe { ((*(*eq).ops).read)(eq, &mut event, buf.as_mut_ptr().cast(), 64, 0) };
    assert_eq!(
        n,
        neg(FiErrno::FI_EAGAIN),
        "the refused writes wrote nothing"
    );
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[&mut (*eq).fid]) };
}

/// Requests that reach a listener while `fi_listen` is still making it (requesters that
/// know the address it will have), read by a thread reading the EQ meanwhile, are reported
/// as any: `FI_CONNREQ` names the passive endpoint and carries an `fi_info` whose `handle`
/// is the request, never a NULL `info`. The NIC gives a new endpoint the lowest PIDonFEP
/// free: the requesters name the first listener's, where each next one will be. A race:
/// each round may or may not land a request in the moment the listener is made and not yet
/// known to the EQ; the rounds together often do. In a process of its own, where no other
/// test makes endpoints on the simulated NIC.
#[test]
fn a_request_arriving_during_fi_listen_is_reported_with_its_fi_info() {
    if !common::in_own_process("a_request_arriving_during_fi_listen_is_reported_with_its_fi_info") {
        return;
    }
    const ROUNDS: usize = 18;
    const PER_ROUND: usize = 2;
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    // Every requester first, so that no endpoint but the listeners takes a PIDonFEP.
    let clients: Vec<_> = (0..ROUNDS * PER_ROUND)
        .map(|_| m.ep(m.open.info, eq_c))
        .collect();
    let first = m.listen(eq_l);
    // SAFETY: `first` is open; only the field's address is taken.
    let first_fid: *mut Fid = unsafe { &mut (*first).fid };
    let listener = name_of(first_fid);
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[first_fid]) };
    for round in clients.chunks(PER_ROUND) {
        let pep = m.passive_ep(m.open.info).expect("fi_passive_ep");
        // SAFETY: `pep` is open; only the field's address is taken.
        let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
        // SAFETY: an open pep and EQ.
        assert_eq!(unsafe { bind(pep_fid, &mut (*eq_l).fid, 0) }, 0);
        let eps: Vec<_> = round.iter().map(|&(c, _)| Shared(c)).collect();
        let (eq, pep_id) = (Shared(eq_l), pep_fid as usize);
        let listened = std::sync::atomic::AtomicBool::new(false);
        let barrier = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                for c in &eps {
                    // Refused while no one listens there, a request otherwise.
                    assert_eq!(connect(c.get(), &listener, b""), 0);
                }
            });
            let reader = s.spawn(|| {
                barrier.wait();
                let eq = eq.get();
                let mut idle_since = None;
                loop {
                    let mut buf = [0u8; 64];
                    let mut event = 0u32;
                    // SAFETY: an open EQ; a valid buffer.
                    let n = unsafe {
                        ((*(*eq).ops).read)(eq, &mut event, buf.as_mut_ptr().cast(), 64, 0)
                    };
                    if n == neg(FiErrno::FI_EAGAIN) {
                        // Done a while after the listener is made.
                        if listened.load(std::sync::atomic::Ordering::Acquire) {
                            let t = *idle_since.get_or_insert_with(std::time::Instant::now);
                            if t.elapsed() > std::time::Duration::from_millis(20) {
                                return;
                            }
                        }
                        continue;
                    }
                    assert!(n >= 16, "fi_eq_read: {n}");
                    // SAFETY: the provider wrote a struct fi_eq_cm_entry.
                    let e = unsafe { buf.as_ptr().cast::<FiEqCmEntry>().read_unaligned() };
                    assert_eq!(
                        (event, e.fid as usize),
                        (FI_CONNREQ, pep_id),
                        "a request to the listener"
                    );
                    assert!(!e.info.is_null(), "the request's fi_info");
                    // SAFETY: the provider's info, freed once.
                    unsafe {
                        assert_eq!((*(*e.info).handle).fclass, FI_CLASS_CONNREQ);
                        uet_fi::info::free_info(e.info);
                    }
                }
            });
            // The CPU kept busy: a thread that starts meanwhile may run before this one.
            s.spawn(|| {
                barrier.wait();
                while !listened.load(std::sync::atomic::Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            });
            barrier.wait();
            // SAFETY: an open pep.
            assert_eq!(unsafe { ((*(*pep).cm).listen)(pep.cast()) }, 0);
            listened.store(true, std::sync::atomic::Ordering::Release);
            reader.join().unwrap();
        });
        let at = |a: &[u8; 32]| uet_fwif::UetAddress::from_bytes(a).unwrap().pid_on_fep;
        assert_eq!(
            at(&name_of(pep_fid)),
            at(&listener),
            "where the requesters looked"
        );
        // SAFETY: ours, open, closed once: its requests are refused.
        unsafe { close_all(&[pep_fid]) };
    }
    // SAFETY: ours, open, closed once.
    unsafe {
        for &(c, cq) in &clients {
            close_all(&[&mut (*c).fid, &mut (*cq).fid]);
        }
        close_all(&[&mut (*eq_l).fid, &mut (*eq_c).fid]);
    }
}

/// A listener closed while another thread reads the EQ it shares with other objects: the
/// listener's events go, and no one else's is lost with them, nor reported with a `fid`
/// that is no object's.
#[test]
fn closing_a_listener_during_an_eq_read_loses_no_other_objects_event() {
    let m = Msg::new();
    let eq_c = m.eq();
    let mut lost = 0;
    for round in 0..10 {
        let eq = m.eq_with(0, uet_av::flags::FI_WRITE);
        let pep = m.listen(eq);
        // SAFETY: `pep` is open; only the field's address is taken.
        let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
        let listener = name_of(pep_fid);
        let clients: Vec<_> = (0..8).map(|_| m.ep(m.open.info, eq_c)).collect();
        for &(c, _) in &clients {
            assert_eq!(connect(c, &listener, b"x"), 0);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        // The application's own event, behind the requests.
        let marker = 0x5eed_0000usize + round;
        let entry = FiEqEntry {
            fid: marker as *mut Fid,
            context: null_mut(),
            data: 77,
        };
        let len = core::mem::size_of::<FiEqEntry>();
        // SAFETY: an open EQ opened with FI_WRITE; a valid entry.
        let wrote = unsafe { ((*(*eq).ops).write)(eq, 0, (&raw const entry).cast(), len, 0) };
        assert_eq!(wrote, len as isize);
        let closing = Shared(pep_fid);
        let closer = std::thread::spawn(move || {
            // SAFETY: an open pep, closed once, by this thread.
            unsafe { close(closing.get()) }
        });
        let mut seen = false;
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let mut buf = [0u8; 64];
            let mut event = 0u32;
            // SAFETY: an open EQ; a valid buffer.
            let ret = unsafe {
                ((*(*eq).ops).read)(eq, &mut event, buf.as_mut_ptr().cast(), buf.len(), 0)
            };
            if ret == neg(FiErrno::FI_EAGAIN) {
                if closer.is_finished() || std::time::Instant::now() > end {
                    break;
                }
                continue;
            }
            assert!(ret > 0, "fi_eq_read: {ret}");
            // SAFETY: the provider wrote an entry at the buffer's start.
            let fid = unsafe { buf.as_ptr().cast::<*mut Fid>().read_unaligned() };
            if event == FI_CONNREQ {
                assert_eq!(fid, pep_fid, "a request names its listener");
                // SAFETY: the provider wrote a struct fi_eq_cm_entry; its info is ours.
                unsafe {
                    let e = buf.as_ptr().cast::<FiEqCmEntry>().read_unaligned();
                    uet_fi::info::free_info(e.info);
                }
            } else {
                assert_eq!((event, fid as usize), (0, marker), "the written event");
                seen = true;
            }
        }
        assert_eq!(closer.join().unwrap(), 0, "fi_close(pep)");
        // Anything left is the written event.
        if !seen {
            let mut buf = [0u8; 64];
            let mut event = 0u32;
            // SAFETY: an open EQ; a valid buffer.
            let ret = unsafe {
                ((*(*eq).ops).read)(eq, &mut event, buf.as_mut_ptr().cast(), buf.len(), 0)
            };
            if ret > 0 {
                seen = true;
            }
        }
        if !seen {
            lost += 1;
        }
        for &(c, cq) in &clients {
            // SAFETY: ours, open, closed once.
            unsafe { close_all(&[&mut (*c).fid, &mut (*cq).fid]) };
        }
        // Drain the clients' refusals.
        // SAFETY: an open EQ; a plain-data error entry.
        while unsafe {
            let mut e: FiEqErrEntry = core::mem::zeroed();
            ((*(*eq_c).ops).readerr)(eq_c, &mut e, 0)
        } > 0
        {}
        // SAFETY: ours, open, closed once.
        unsafe { close_all(&[&mut (*eq).fid]) };
    }
    assert_eq!(lost, 0, "rounds whose written event was lost");
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[&mut (*eq_c).fid]) };
}

/// An `FI_EP_MSG` endpoint reports its connection on its EQ, which cannot be bound once it
/// is enabled: `fi_enable` without one is `-FI_ENOEQ` and leaves it unenabled, so that the EQ
/// may still be bound (before, the endpoint was enabled, could bind no EQ, and could never
/// connect).
#[test]
fn a_connected_endpoint_is_not_enabled_without_an_eq() {
    let m = Msg::new();
    let eq = m.eq();
    let ep = m.endpoint(m.open.info).unwrap();
    // SAFETY: `ep` is open; only the field's address is taken.
    let ep_fid: *mut Fid = unsafe { &mut (*ep).fid };
    let cq = m.open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
    // SAFETY: open objects; valid arguments.
    unsafe {
        assert_eq!(bind(ep_fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV), 0);
        let enable = (*(*ep_fid).ops).control;
        assert_eq!(
            enable(ep_fid, FI_ENABLE, null_mut()),
            ineg(FiErrno::FI_ENOEQ)
        );
        assert_eq!(bind(ep_fid, &mut (*eq).fid, 0), 0, "the EQ is still bound");
        assert_eq!(enable(ep_fid, FI_ENABLE, null_mut()), 0);
        close_all(&[ep_fid, &mut (*cq).fid, &mut (*eq).fid]);
    }
}

/// With `FI_ADDR_STR`, the addresses of a connection are strings, as the listener's
/// `fi_getname` and `fi_connect` have them: an endpoint's `fi_getname` and `fi_getpeer`
/// give each side's string (before, the 32 binary bytes of `FI_FORMAT_UNSPEC`).
#[test]
fn with_fi_addr_str_a_connected_endpoints_name_and_peer_are_strings() {
    let hints = Hints::new(FI_MSG, FI_ADDR_STR);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.ep_attr).ep_type = FI_EP_MSG };
    let m = Msg {
        open: Open::with_hints(&hints),
    };
    let (eq_l, eq_c) = (m.eq(), m.eq());
    let pep = m.listen(eq_l);
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let mut listener = [0u8; 128];
    let mut len = listener.len();
    // SAFETY: an open pep; valid buffers.
    let ret = unsafe { ((*(*pep).cm).getname)(pep_fid, listener.as_mut_ptr().cast(), &mut len) };
    assert_eq!(ret, 0);
    let (client, cq_c) = m.ep(m.open.info, eq_c);
    // SAFETY: an open endpoint; the listener's NUL-terminated string.
    let ret = unsafe { ((*(*client).cm).connect)(client, listener.as_ptr().cast(), null(), 0) };
    assert_eq!(ret, 0);
    let req = cm_event(eq_l).expect("FI_CONNREQ");
    assert_eq!(req.event, FI_CONNREQ);
    let (server, cq_s) = m.ep(req.info, eq_l);
    // SAFETY: an open endpoint.
    assert_eq!(unsafe { ((*(*server).cm).accept)(server, null(), 0) }, 0);
    assert_eq!(cm_event(eq_c).expect("FI_CONNECTED").event, FI_CONNECTED);
    assert_eq!(cm_event(eq_l).expect("FI_CONNECTED").event, FI_CONNECTED);

    let (client_name, server_name) = (str_address(client, false), str_address(server, false));
    assert!(client_name.starts_with("uet://"), "{client_name:?}");
    assert_eq!(str_address(client, true), server_name);
    assert_eq!(str_address(server, true), client_name);
    // A short buffer: -FI_ETOOSMALL and the string's size.
    let mut short = [0u8; 8];
    let mut len = short.len();
    // SAFETY: an open endpoint; valid buffers.
    let ret = unsafe { ((*(*client).cm).getpeer)(client, short.as_mut_ptr().cast(), &mut len) };
    assert_eq!(
        (ret, len),
        (ineg(FiErrno::FI_ETOOSMALL), server_name.len() + 1)
    );

    // SAFETY: ours, open, closed once; the event's info freed once.
    unsafe {
        uet_fi::info::free_info(req.info);
        close_all(&[
            &mut (*server).fid,
            &mut (*client).fid,
            &mut (*cq_s).fid,
            &mut (*cq_c).fid,
            pep_fid,
            &mut (*eq_l).fid,
            &mut (*eq_c).fid,
        ]);
    }
}

/// `fi_getname` of a connected endpoint opened with `FI_ADDR_STR`, or `fi_getpeer` of it.
fn str_address(ep: *mut FidEp, peer: bool) -> String {
    let mut got = [0u8; 128];
    let mut len = got.len();
    // SAFETY: an open endpoint; valid buffers.
    let ret = unsafe {
        if peer {
            ((*(*ep).cm).getpeer)(ep, got.as_mut_ptr().cast(), &mut len)
        } else {
            ((*(*ep).cm).getname)(&mut (*ep).fid, got.as_mut_ptr().cast(), &mut len)
        }
    };
    assert_eq!(ret, 0);
    let text = CStr::from_bytes_until_nul(&got[..len]).expect("a NUL-terminated string");
    assert_eq!(
        text.to_bytes_with_nul().len(),
        len,
        "the string and its NUL"
    );
    text.to_str().expect("UTF-8").to_owned()
}

/// `fi_getopt(FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE)` of a listener and of a connected
/// endpoint is the connection data a connection message carries (256 bytes, a `size_t`); a
/// buffer shorter than a `size_t` gets `-FI_ETOOSMALL` and the size. Other options, and the
/// option on an endpoint of another type, are `-FI_ENOPROTOOPT`, but for an endpoint's
/// `FI_OPT_MIN_MULTI_RECV`.
#[test]
fn fi_getopt_gives_the_connection_data_size_of_listeners_and_connected_endpoints() {
    let m = Msg::new();
    let eq = m.eq();
    let pep = m.listen(eq);
    let ep = m.endpoint(m.open.info).expect("fi_endpoint");
    // SAFETY: open objects of the provider; only their fields' addresses are taken.
    let (pep_fid, ep_fid): (*mut Fid, *mut Fid) =
        unsafe { (&raw mut (*pep).fid, &raw mut (*ep).fid) };
    // SAFETY: open objects; their own getopt; valid buffers of the lengths given.
    let getopt = |fid: *mut Fid, ops: *mut FiOpsEp, optname: c_int, room: usize| unsafe {
        let mut val = [0u8; 16];
        let mut len = room;
        let ret = ((*ops).getopt)(fid, 0, optname, val.as_mut_ptr().cast(), &mut len);
        (ret, len, usize::from_ne_bytes(val[..8].try_into().unwrap()))
    };
    let enoprotoopt = ineg(FiErrno::FI_ENOPROTOOPT);
    // SAFETY: open objects' operations.
    let (pep_ops, ep_ops) = unsafe { ((*pep).ops, (*ep).ops) };
    let mtu = usize::from(uet_sim::NicConfig::new([10, 0, 0, 1].into()).mtu);
    for (fid, ops) in [(pep_fid, pep_ops), (ep_fid, ep_ops)] {
        assert_eq!(getopt(fid, ops, 1, 8), (0, 8, 256));
        let (ret, len, _) = getopt(fid, ops, 1, 4);
        assert_eq!((ret, len), (ineg(FiErrno::FI_ETOOSMALL), 8));
        // An option no libfabric defines.
        assert_eq!(getopt(fid, ops, 999, 8).0, enoprotoopt);
    }
    // FI_OPT_MIN_MULTI_RECV: an endpoint's (one MTU by default, not yet enabled), not a
    // listener's, which receives nothing.
    assert_eq!(getopt(pep_fid, pep_ops, 0, 8).0, enoprotoopt);
    assert_eq!(getopt(ep_fid, ep_ops, 0, 8), (0, 8, mtu));
    // A reliable endpoint has no connection data.
    let pair = Pair::new(0);
    // SAFETY: an open endpoint of the pair; only its field's address is taken.
    let (rdm_fid, rdm_ops) = unsafe { (&raw mut (*pair.p[0].ep).fid, (*pair.p[0].ep).ops) };
    assert_eq!(getopt(rdm_fid, rdm_ops, 1, 8).0, enoprotoopt);
    assert_eq!(getopt(rdm_fid, rdm_ops, 0, 8), (0, 8, mtu));
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[ep_fid, pep_fid, &mut (*eq).fid]) };
}

/// The operations of an open counter.
fn cntr_ops(c: *mut FidCntr) -> &'static FiOpsCntr {
    // SAFETY: an open counter's operations, a static table of the provider.
    unsafe { &*(*c).ops }
}

/// `fi_cntr_read`.
fn cntr_read(c: *mut FidCntr) -> u64 {
    // SAFETY: an open counter.
    unsafe { (cntr_ops(c).read)(c) }
}

/// `fi_cntr_readerr`.
fn cntr_readerr(c: *mut FidCntr) -> u64 {
    // SAFETY: an open counter.
    unsafe { (cntr_ops(c).readerr)(c) }
}

/// `fi_cntr_wait`.
fn cntr_wait(c: *mut FidCntr, threshold: u64, timeout: c_int) -> c_int {
    // SAFETY: an open counter.
    unsafe { (cntr_ops(c).wait)(c, threshold, timeout) }
}

/// `-errno` as a call returning `int` gives it.
fn neg_int(e: FiErrno) -> c_int {
    -(e.get() as c_int)
}

/// `fi_ep_bind` of a counter.
fn bind_cntr(ep: *mut FidEp, c: *mut FidCntr, flags: u64) -> c_int {
    // SAFETY: an open endpoint and counter.
    unsafe { ((*(*ep).fid.ops).bind)(&mut (*ep).fid, &mut (*c).fid, flags) }
}

#[test]
fn counters_count_the_sends_and_receives_of_their_endpoints_whether_or_not_a_cq_entry_is_written() {
    // Counter `tx` counts peer 0's sends; `both` peer 0's receives and peer 1's sends and
    // receives (two endpoints, and both directions of one). Under FI_SELECTIVE_COMPLETION
    // with the default op_flags, fi_send and fi_recv write no CQ entry, and an fi_inject
    // never reports its success.
    let pair = Pair::with_counters(
        FI_SELECTIVE_COMPLETION,
        FI_WAIT_UNSPEC,
        |_| {},
        2,
        [&[(0, FI_TRANSMIT), (1, FI_RECV)], &[(1, FI_SEND | FI_RECV)]],
    );
    let [tx, both] = [pair.cntrs[0], pair.cntrs[1]];
    let mut rbufs = [[0u8; 8]; 3];
    for (n, rbuf) in rbufs.iter_mut().enumerate() {
        // SAFETY: the buffers outlive their completions, waited for below.
        assert_eq!(unsafe { pair.post_recv(1, rbuf, 10 + n) }, 0);
    }
    assert_eq!(pair.send(0, b"one", 1), 0);
    // SAFETY: an open endpoint; the payload is copied at the call.
    let injected =
        unsafe { (pair.msg(0).inject)(pair.p[0].ep, b"two".as_ptr().cast(), 3, pair.p[1].addr) };
    assert_eq!(injected, 0);
    // Only the counter is read: the read drives the rings (FI_PROGRESS_AUTO).
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while cntr_read(tx) < 2 && std::time::Instant::now() < end {
        std::thread::yield_now();
    }
    assert_eq!(
        cntr_read(tx),
        2,
        "fi_send and fi_inject, counted by fi_cntr_read alone"
    );
    // One more, with FI_COMPLETION: the only send that writes a CQ entry.
    let iov = IoVec {
        iov_base: b"three".as_ptr().cast_mut().cast(),
        iov_len: 5,
    };
    let msg = FiMsg {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: pair.p[1].addr,
        context: 3 as _,
        data: 0,
    };
    // SAFETY: an open endpoint; the message is copied at the call.
    let sent = unsafe { (pair.msg(0).sendmsg)(pair.p[0].ep, &msg, FI_COMPLETION) };
    assert_eq!(sent, 0);
    assert_eq!(cntr_wait(tx, 3, 2000), 0);
    assert_eq!(cntr_wait(both, 3, 2000), 0);
    assert_eq!(&rbufs.map(|b| b[0]), b"ott");
    // And one back, from peer 1 to peer 0: its send and its receive count in `both`.
    let mut back = [0u8; 8];
    // SAFETY: the buffer outlives its completion, waited for below.
    assert_eq!(unsafe { pair.post_recv(0, &mut back, 20) }, 0);
    assert_eq!(pair.send(1, b"four", 21), 0);
    assert_eq!(cntr_wait(both, 5, 2000), 0);
    assert_eq!(
        [tx, both].map(|c| (cntr_read(c), cntr_readerr(c))),
        [(3, 0), (5, 0)]
    );
    assert_eq!(&back[..4], b"four");
    // The CQs hold the one entry asked for, and no other.
    assert_eq!(pair.read(0).map(|e| e.op_context as usize), Ok(3));
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

#[test]
fn counters_count_failed_sends_and_truncated_receives_as_errors_which_end_a_wait() {
    let pair = Pair::with_counters(
        0,
        FI_WAIT_UNSPEC,
        |_| {},
        2,
        [&[(0, FI_SEND)], &[(1, FI_RECV)]],
    );
    let [tx, rx] = [pair.cntrs[0], pair.cntrs[1]];
    let fake = pair.nobody();
    // A send to an address no endpoint holds fails; a thread waiting for a success wakes
    // when the error count changes.
    let msg = b"lost";
    // SAFETY: an open endpoint; the message is copied at the call.
    let sent = unsafe {
        (pair.msg(0).send)(
            pair.p[0].ep,
            msg.as_ptr().cast(),
            msg.len(),
            null_mut(),
            fake,
            1 as _,
        )
    };
    assert_eq!(sent, 0);
    assert_eq!(cntr_wait(tx, 1, 2000), neg_int(FiErrno::FI_EAVAIL));
    assert_eq!((cntr_read(tx), cntr_readerr(tx)), (0, 1));
    // So does an inject, whose failure is reported with no context.
    // SAFETY: as above.
    let injected = unsafe { (pair.msg(0).inject)(pair.p[0].ep, msg.as_ptr().cast(), 4, fake) };
    assert_eq!(injected, 0);
    assert_eq!(cntr_wait(tx, 1, 2000), neg_int(FiErrno::FI_EAVAIL));
    assert_eq!((cntr_read(tx), cntr_readerr(tx)), (0, 2));
    // A message longer than its receive's buffer: the receive fails (FI_ETRUNC), the send
    // succeeds.
    let mut rbuf = [0u8; 2];
    // SAFETY: the buffer outlives its completion, waited for below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 5) }, 0);
    assert_eq!(pair.send(0, b"hello", 6), 0);
    assert_eq!(cntr_wait(tx, 1, 2000), 0);
    assert_eq!(cntr_wait(rx, 1, 200), neg_int(FiErrno::FI_EAVAIL));
    assert_eq!((cntr_read(tx), cntr_readerr(tx)), (1, 2));
    assert_eq!((cntr_read(rx), cntr_readerr(rx)), (0, 1));
    // The CQs report the errors as before.
    assert_eq!(
        pair.readerr(1).map(|e| e.err as u32),
        Ok(FiErrno::FI_ETRUNC.get())
    );
    for _ in 0..2 {
        assert_eq!(
            pair.readerr(0).map(|e| e.err as u32),
            Ok(FiErrno::FI_EADDRNOTAVAIL.get())
        );
    }
    assert_eq!(pair.read(0).map(|e| e.op_context as usize), Ok(6));
}

/// CPU time this thread has used.
fn thread_cpu_time() -> std::time::Duration {
    // SAFETY: a plain-data structure.
    let mut ts: libc::timespec = unsafe { core::mem::zeroed() };
    // SAFETY: a valid timespec to write.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(ret, 0);
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[test]
fn a_counters_values_change_as_asked_and_a_wait_ends_at_its_threshold_or_times_out_asleep() {
    let pair = Pair::with_counters(0, FI_WAIT_UNSPEC, |_| {}, 1, [&[(0, FI_SEND)], &[]]);
    let c = pair.cntrs[0];
    let ops = cntr_ops(c);
    // SAFETY: an open counter.
    unsafe {
        assert_eq!((ops.add)(c, 5), 0);
        assert_eq!(cntr_read(c), 5);
        assert_eq!((ops.set)(c, 2), 0);
        assert_eq!(cntr_read(c), 2);
        assert_eq!((ops.adderr)(c, 3), 0);
        assert_eq!(cntr_readerr(c), 3);
        assert_eq!((ops.seterr)(c, 1), 0);
        assert_eq!((cntr_read(c), cntr_readerr(c)), (2, 1));
    }
    // Reached already: at once, even with no time to wait.
    assert_eq!(cntr_wait(c, 2, 0), 0);
    assert_eq!(cntr_wait(c, 3, 0), neg_int(FiErrno::FI_ETIMEDOUT));
    // A wait that times out sleeps meanwhile (its endpoint is idle) and leaves the error
    // count as it was.
    let (start, cpu) = (std::time::Instant::now(), thread_cpu_time());
    assert_eq!(cntr_wait(c, 3, 300), neg_int(FiErrno::FI_ETIMEDOUT));
    let (took, used) = (start.elapsed(), thread_cpu_time() - cpu);
    assert!(took >= std::time::Duration::from_millis(300), "{took:?}");
    assert!(
        used < std::time::Duration::from_millis(100),
        "a 300 ms wait used {used:?} of CPU"
    );
    assert_eq!(cntr_readerr(c), 1);
    // Another thread's fi_cntr_add ends a wait without end, and so does a completion.
    let shared = Shared(c);
    let adder = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let c = shared.get();
        // SAFETY: an open counter, FI_THREAD_SAFE.
        unsafe { (cntr_ops(c).add)(c, 1) }
    });
    assert_eq!(cntr_wait(c, 3, -1), 0);
    assert_eq!(adder.join().unwrap(), 0);
    let mut rbuf = [0u8; 8];
    // SAFETY: the buffer outlives its completion, waited for below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 1) }, 0);
    let sender = Shared(pair.p[0].ep);
    let (to, send) = (pair.p[1].addr, pair.msg(0).send);
    let sending = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        // SAFETY: an open endpoint, FI_THREAD_SAFE; the message is copied at the call.
        unsafe {
            send(
                sender.get(),
                b"x".as_ptr().cast(),
                1,
                null_mut(),
                to,
                null_mut(),
            )
        }
    });
    assert_eq!(cntr_wait(c, 4, 5000), 0);
    assert_eq!(sending.join().unwrap(), 0);
    assert_eq!(cntr_read(c), 4);
    assert_eq!(pair.wait(1).map(|e| e.len), Ok(1));
    // A counter without a wait object is not waited on.
    let none = pair._open.cntr_open(FI_WAIT_NONE).unwrap();
    assert_eq!(cntr_wait(none, 0, 0), neg_int(FiErrno::FI_EINVAL));
    // SAFETY: ours, closed once.
    assert_eq!(unsafe { close(&mut (*none).fid) }, 0);
}

#[test]
fn a_counter_binds_for_sends_and_receives_only_and_does_not_close_while_bound() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let c = open.cntr_open(FI_WAIT_UNSPEC).unwrap();
    let ep = open.endpoint();
    for flags in [
        0,
        FI_READ,
        FI_WRITE,
        FI_REMOTE_READ,
        FI_REMOTE_WRITE,
        FI_SEND | FI_WRITE,
        FI_SELECTIVE_COMPLETION | FI_RECV,
    ] {
        assert_eq!(
            bind_cntr(ep, c, flags),
            neg_int(FiErrno::FI_EBADFLAGS),
            "flags {flags:#x}"
        );
    }
    assert_eq!(bind_cntr(ep, c, FI_TRANSMIT), 0);
    // FI_TRANSMIT is FI_SEND: that direction has its counter.
    assert_eq!(bind_cntr(ep, c, FI_SEND), neg_int(FiErrno::FI_EINVAL));
    assert_eq!(bind_cntr(ep, c, FI_RECV), 0);
    // SAFETY: ours, open.
    unsafe {
        assert_eq!(close(&mut (*c).fid), neg_int(FiErrno::FI_EBUSY));
        assert_eq!(
            close(&mut (*open.domain).fid),
            neg_int(FiErrno::FI_EBUSY),
            "the domain's endpoint and counter are open"
        );
        assert_eq!(close(&mut (*ep).fid), 0);
        assert_eq!(close(&mut (*c).fid), 0);
    }
    // Bound after fi_enable: refused, as a CQ is.
    let pair = Pair::new(0);
    let late = pair._open.cntr_open(FI_WAIT_NONE).unwrap();
    assert_eq!(
        bind_cntr(pair.p[0].ep, late, FI_SEND),
        neg_int(FiErrno::FI_EOPBADSTATE)
    );
    // SAFETY: ours, never bound, closed once.
    assert_eq!(unsafe { close(&mut (*late).fid) }, 0);
}

#[test]
fn fi_cntr_open_takes_completion_counters_of_the_wait_objects_it_serves_up_to_cntr_cnt() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let attr = |events, wait_obj, flags| FiCntrAttr {
        events,
        wait_obj,
        wait_set: null_mut(),
        flags,
    };
    for (mut a, errno) in [
        (attr(1, FI_WAIT_NONE, 0), FiErrno::FI_ENOSYS), // FI_CNTR_EVENTS_BYTES
        (attr(7, FI_WAIT_NONE, 0), FiErrno::FI_EINVAL),
        (
            attr(FI_CNTR_EVENTS_COMP, FI_WAIT_SET, 0),
            FiErrno::FI_ENOSYS,
        ),
        (
            attr(FI_CNTR_EVENTS_COMP, FI_WAIT_POLLFD, 0),
            FiErrno::FI_ENOSYS,
        ),
        // No enum fi_wait_obj: invalid, not a wait object the provider lacks.
        (attr(FI_CNTR_EVENTS_COMP, 7, 0), FiErrno::FI_EINVAL),
        (attr(FI_CNTR_EVENTS_COMP, -1, 0), FiErrno::FI_EINVAL),
        (
            attr(FI_CNTR_EVENTS_COMP, FI_WAIT_NONE, 1),
            FiErrno::FI_EBADFLAGS,
        ),
    ] {
        assert_eq!(open.cntr_open_with(&mut a), Err(neg_int(errno)));
    }
    let mut cntrs = Vec::new();
    cntrs.push(
        open.cntr_open_with(null_mut())
            .expect("NULL attr: the defaults"),
    );
    for wait_obj in [
        FI_WAIT_UNSPEC,
        FI_WAIT_MUTEX_COND,
        FI_WAIT_YIELD,
        FI_WAIT_FD,
    ] {
        cntrs.push(open.cntr_open(wait_obj).unwrap());
    }
    // SAFETY: an info the provider gave.
    let cntr_cnt = unsafe { (*(*open.info).domain_attr).cntr_cnt };
    assert_eq!(cntr_cnt, 1024);
    while cntrs.len() < cntr_cnt {
        cntrs.push(open.cntr_open(FI_WAIT_NONE).unwrap());
    }
    assert_eq!(
        open.cntr_open(FI_WAIT_NONE),
        Err(neg_int(FiErrno::FI_ENOSPC))
    );
    for c in cntrs {
        // SAFETY: ours, closed once.
        assert_eq!(unsafe { close(&mut (*c).fid) }, 0);
    }
}

/// `fi_cq_open` answers a wait object as `fi_cntr_open` does: one it does not serve (a wait
/// set, `FI_WAIT_POLLFD`) is `-FI_ENOSYS`, a value that is no `enum fi_wait_obj`
/// `-FI_EINVAL`, and no CQ is made.
#[test]
fn fi_cq_open_refuses_a_wait_obj_it_does_not_serve_and_one_that_is_none() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    for (wait_obj, errno) in [
        (FI_WAIT_SET, FiErrno::FI_ENOSYS),
        (FI_WAIT_POLLFD, FiErrno::FI_ENOSYS),
        (7, FiErrno::FI_EINVAL),
        (-1, FiErrno::FI_EINVAL),
    ] {
        let mut attr = FiCqAttr {
            size: 0,
            flags: 0,
            format: FI_CQ_FORMAT_DATA,
            wait_obj,
            signaling_vector: 0,
            wait_cond: 0,
            wait_set: null_mut(),
        };
        let mut cq: *mut FidCq = null_mut();
        // SAFETY: an open domain; valid attributes and out pointer.
        let ret =
            unsafe { ((*(*open.domain).ops).cq_open)(open.domain, &mut attr, &mut cq, null_mut()) };
        assert_eq!(ret, neg_int(errno), "wait_obj {wait_obj}");
        assert!(cq.is_null());
    }
}

/// `fi_eq_open` answers a wait object as `fi_cq_open` and `fi_cntr_open` do: one it does
/// not serve (a wait set, `FI_WAIT_POLLFD`) is `-FI_ENOSYS`, a value that is no
/// `enum fi_wait_obj` `-FI_EINVAL`, and no queue is made.
#[test]
fn fi_eq_open_refuses_a_wait_obj_it_does_not_serve_and_one_that_is_none() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    for (wait_obj, errno) in [
        (FI_WAIT_SET, FiErrno::FI_ENOSYS),
        (FI_WAIT_POLLFD, FiErrno::FI_ENOSYS),
        (7, FiErrno::FI_EINVAL),
        (-1, FiErrno::FI_EINVAL),
    ] {
        assert_eq!(
            eq_open_on(open.fabric, wait_obj, 0).err(),
            Some(neg_int(errno)),
            "wait_obj {wait_obj}"
        );
    }
}

/// fi_eq(3): `FI_AFFINITY` says `signaling_vector` is valid, a hint "the provider ... may
/// ignore if [it] does not support interrupt affinity". A queue opened with it opens, as one
/// without it, and works; a flag fi_eq(3) does not define is still refused.
#[test]
fn fi_eq_open_takes_fi_affinity_as_the_hint_it_is() {
    const FI_AFFINITY: u64 = 1 << 29;
    const FI_WRITE: u64 = 1 << 9;
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let eq = eq_open_on(open.fabric, FI_WAIT_UNSPEC, FI_AFFINITY | FI_WRITE)
        .expect("fi_eq_open with FI_AFFINITY");
    assert_eq!(eq_write(eq, 5), core::mem::size_of::<FiEqEntry>() as isize);
    assert_eq!(eq_read_entry(eq).map(|(_, e)| e.data), Ok(5));
    // SAFETY: ours, open, closed once.
    assert_eq!(unsafe { close(&raw mut (*eq).fid) }, 0);
    assert_eq!(
        eq_open_on(open.fabric, FI_WAIT_UNSPEC, FI_AFFINITY | 1 << 40).err(),
        Some(neg_int(FiErrno::FI_EBADFLAGS))
    );
}

/// fi_cq(3): `FI_AFFINITY` says `signaling_vector` is set, a hint a provider without interrupt
/// affinity may ignore: the CQ opens and works; another flag is still `-FI_EBADFLAGS`.
#[test]
fn fi_cq_open_takes_fi_affinity_as_the_hint_it_is() {
    const FI_AFFINITY: u64 = 1 << 29;
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let cq_open = |flags: u64| {
        let mut cq = null_mut();
        let mut attr = FiCqAttr {
            size: 0,
            flags,
            format: FI_CQ_FORMAT_CONTEXT,
            wait_obj: FI_WAIT_NONE,
            signaling_vector: 3,
            wait_cond: 0,
            wait_set: null_mut(),
        };
        // SAFETY: an open domain; valid attributes and out pointer.
        let ret =
            unsafe { ((*(*open.domain).ops).cq_open)(open.domain, &mut attr, &mut cq, null_mut()) };
        (ret, cq)
    };
    let (ret, cq) = cq_open(FI_AFFINITY);
    assert_eq!(ret, 0, "fi_cq_open with FI_AFFINITY");
    let mut entry = [0u8; 8];
    // SAFETY: an open CQ; a buffer of one context entry.
    let n = unsafe { ((*(*cq).ops).read)(cq, entry.as_mut_ptr().cast(), 1) };
    assert_eq!(n, neg(FiErrno::FI_EAGAIN), "an empty CQ");
    // SAFETY: ours, open, closed once.
    assert_eq!(unsafe { close(&raw mut (*cq).fid) }, 0);
    let (ret, cq) = cq_open(FI_AFFINITY | 1 << 40);
    assert_eq!(ret, neg_int(FiErrno::FI_EBADFLAGS));
    assert!(cq.is_null(), "a refused open made no CQ");
}

#[test]
fn the_answer_offers_cntr_cnt_counters_and_hints_asking_for_more_are_refused() {
    assert_eq!(answer_to(|_, _| (), |d| d.cntr_cnt), Ok(1024));
    assert_eq!(answer_to(|_, d| d.cntr_cnt = 16, |d| d.cntr_cnt), Ok(1024));
    assert_eq!(answer_to(|_, d| d.cntr_cnt = 1025, |_| ()), Err(ENODATA));
}

/// `FI_CLASS_SEP`, `FI_CLASS_TX_CTX`, `FI_CLASS_RX_CTX`.
const CLASSES: (usize, usize, usize) = (4, 7, 5);

/// Hints for a scalable `FI_EP_RDM` endpoint of `tx` transmit and `rx` receive contexts.
fn sep_hints(tx: usize, rx: usize) -> Hints {
    let hints = Hints::new(FI_MSG | FI_TAGGED | FI_NAMED_RX_CTX, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own ep_attr.
    unsafe {
        (*hints.info.ep_attr).ep_type = FI_EP_RDM;
        (*hints.info.ep_attr).tx_ctx_cnt = tx;
        (*hints.info.ep_attr).rx_ctx_cnt = rx;
    }
    hints
}

/// `fi_scalable_ep` on `open`'s domain with its info: the endpoint or the negative errno.
fn scalable_ep(open: &Open) -> Result<*mut FidEp, c_int> {
    let mut sep: *mut FidEp = null_mut();
    // SAFETY: an open domain and its provider's info; a valid out pointer.
    let ret = unsafe {
        ((*(*open.domain).ops).scalable_ep)(
            open.domain,
            open.info.cast(),
            (&raw mut sep).cast(),
            null_mut(),
        )
    };
    if ret == 0 {
        Ok(sep)
    } else {
        assert!(sep.is_null());
        Err(ret)
    }
}

/// `fi_tx_context` (`tx`) or `fi_rx_context` of `sep` at `index`: the context or the
/// negative errno.
fn context(sep: *mut FidEp, tx: bool, index: c_int) -> Result<*mut FidEp, c_int> {
    let mut ctx: *mut FidEp = null_mut();
    // SAFETY: an open scalable endpoint; no attributes; a valid out pointer.
    let ret = unsafe {
        let ops = &*(*sep).ops;
        if tx {
            (ops.tx_ctx)(sep, index, null_mut(), &mut ctx, null_mut())
        } else {
            (ops.rx_ctx)(sep, index, null_mut(), &mut ctx, null_mut())
        }
    };
    if ret == 0 {
        Ok(ctx)
    } else {
        assert!(ctx.is_null());
        Err(ret)
    }
}

/// `fi_enable`.
fn enable(fid: *mut FidEp) -> c_int {
    // SAFETY: an open endpoint, context or scalable endpoint.
    unsafe { ((*(*fid).fid.ops).control)(&mut (*fid).fid, FI_ENABLE, null_mut()) }
}

/// `fi_insert` of one address into `av`: its `fi_addr_t`.
fn insert(av: *mut FidAv, addr: &[u8; 32]) -> FiAddr {
    let mut fi_addr = 0;
    // SAFETY: an open AV; one address and one fi_addr_t.
    let ret =
        unsafe { ((*(*av).ops).insert)(av, addr.as_ptr().cast(), 1, &mut fi_addr, 0, null_mut()) };
    assert_eq!(ret, 1, "fi_av_insert");
    fi_addr
}

/// `fi_tsend` of `msg` with `tag` on `ep` to `dest`, with `context`.
fn tsend(ep: *mut FidEp, msg: &[u8], dest: FiAddr, tag: u64, context: usize) -> isize {
    // SAFETY: an open endpoint; `msg` is read during the call.
    unsafe {
        ((*(*ep).tagged).send)(
            ep,
            msg.as_ptr().cast(),
            msg.len(),
            null_mut(),
            dest,
            tag,
            context as _,
        )
    }
}

/// `fi_send` of `msg` on `ep` to `dest`, with `context`.
fn send_to(ep: *mut FidEp, msg: &[u8], dest: FiAddr, context: usize) -> isize {
    // SAFETY: an open endpoint; `msg` is read during the call.
    unsafe {
        ((*(*ep).msg).send)(
            ep,
            msg.as_ptr().cast(),
            msg.len(),
            null_mut(),
            dest,
            context as _,
        )
    }
}

/// `fi_recv` (or with `tag`, `fi_trecv` matching it exactly) on `ep` into `buf`.
///
/// # Safety
/// `buf` outlives the receive's completion.
unsafe fn post(ep: *mut FidEp, buf: &mut [u8], tag: Option<u64>, context: usize) -> isize {
    // SAFETY: an open endpoint; the caller keeps `buf`.
    unsafe {
        match tag {
            None => ((*(*ep).msg).recv)(
                ep,
                buf.as_mut_ptr().cast(),
                buf.len(),
                null_mut(),
                u64::MAX,
                context as _,
            ),
            Some(tag) => ((*(*ep).tagged).recv)(
                ep,
                buf.as_mut_ptr().cast(),
                buf.len(),
                null_mut(),
                u64::MAX,
                tag,
                0,
                context as _,
            ),
        }
    }
}

/// `fi_cq_read` of one entry, or the negative errno (no wait).
fn cq_read(cq: *mut FidCq) -> Result<FiCqTaggedEntry, isize> {
    // SAFETY: a plain-data structure.
    let mut e: FiCqTaggedEntry = unsafe { core::mem::zeroed() };
    // SAFETY: an open CQ; room for one entry of any format.
    let ret = unsafe { ((*(*cq).ops).read)(cq, (&raw mut e).cast(), 1) };
    if ret == 1 {
        Ok(e)
    } else {
        Err(ret)
    }
}

/// `fi_cq_readerr` of `cq`, waiting up to 5 s for the error.
fn cq_error(cq: *mut FidCq) -> FiCqErrEntry {
    let got = cq_wait(cq).err();
    assert_eq!(got, Some(neg(FiErrno::FI_EAVAIL)), "an error waits");
    // SAFETY: a plain-data structure.
    let mut e: FiCqErrEntry = unsafe { core::mem::zeroed() };
    // SAFETY: an open CQ; a valid entry.
    assert_eq!(unsafe { ((*(*cq).ops).readerr)(cq, &mut e, 0) }, 1);
    e
}

/// A scalable endpoint of 2 transmit and 4 receive contexts, each context with a CQ of its
/// own, and an endpoint of one context, its peer, in an AV whose `rx_ctx_bits` (3) name
/// more receive contexts than the scalable endpoint has.
struct Scalable {
    sep: *mut FidEp,
    tx: Vec<(*mut FidEp, *mut FidCq)>,
    rx: Vec<(*mut FidEp, *mut FidCq)>,
    peer: (*mut FidEp, *mut FidCq),
    /// The scalable endpoint's and the peer's `fi_addr_t` in the AV.
    sep_addr: FiAddr,
    peer_addr: FiAddr,
    av: *mut FidAv,
    open: Open,
}

const RX_CTX_BITS: u8 = 3;

impl Scalable {
    fn new() -> Scalable {
        Scalable::with(0, |_| 0)
    }

    /// As [`Scalable::new`], the hints asking for `caps` too, and receive context `i` opened
    /// with `rx_caps(i)` in its attributes (none for 0).
    fn with(caps: u64, rx_caps: impl Fn(c_int) -> u64) -> Scalable {
        let mut hints = sep_hints(2, 4);
        hints.info.caps |= caps;
        let open = Open::with_hints(&hints);
        let mut attr = av_attr(16);
        attr.rx_ctx_bits = c_int::from(RX_CTX_BITS);
        let av = open
            .av_open(&mut attr)
            .expect("fi_av_open with rx_ctx_bits 3");
        let sep = scalable_ep(&open).expect("fi_scalable_ep");
        // SAFETY: an open scalable endpoint and AV.
        let bound = unsafe { ((*(*sep).fid.ops).bind)(&mut (*sep).fid, &mut (*av).fid, 0) };
        assert_eq!(bound, 0, "fi_scalable_ep_bind");
        let open_ctx = |tx: bool, i: c_int| {
            let ctx = match rx_caps(i) {
                caps if tx || caps == 0 => {
                    context(sep, tx, i).expect("fi_tx_context / fi_rx_context")
                }
                caps => {
                    // SAFETY: a plain-data structure.
                    let mut attr: FiRxAttr = unsafe { core::mem::zeroed() };
                    attr.caps = caps;
                    let mut ctx: *mut FidEp = null_mut();
                    // SAFETY: an open scalable endpoint; valid attributes and out pointer.
                    let ret =
                        unsafe { ((*(*sep).ops).rx_ctx)(sep, i, &mut attr, &mut ctx, null_mut()) };
                    assert_eq!(ret, 0, "fi_rx_context with caps {caps:#x}");
                    ctx
                }
            };
            let cq = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
            let flags = if tx { FI_TRANSMIT } else { FI_RECV };
            // SAFETY: an open context and CQ.
            assert_eq!(unsafe { bind(&mut (*ctx).fid, &mut (*cq).fid, flags) }, 0);
            assert_eq!(enable(ctx), 0, "fi_enable of a context");
            (ctx, cq)
        };
        let tx: Vec<_> = (0..2).map(|i| open_ctx(true, i)).collect();
        let rx: Vec<_> = (0..4).map(|i| open_ctx(false, i)).collect();
        assert_eq!(enable(sep), 0, "fi_enable of the scalable endpoint");
        // The peer: an endpoint of one context, opened with the info's counts at 1.
        // SAFETY: the provider's own info, restored after.
        let peer_ep = unsafe {
            let ep_attr = &mut *(*open.info).ep_attr;
            assert_eq!((ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt), (2, 4));
            (ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt) = (1, 1);
            let ep = open.endpoint();
            (ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt) = (2, 4);
            ep
        };
        let peer_cq = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
        // SAFETY: an open endpoint, AV and CQ.
        unsafe {
            assert_eq!(bind(&mut (*peer_ep).fid, &mut (*av).fid, 0), 0);
            assert_eq!(
                bind(
                    &mut (*peer_ep).fid,
                    &mut (*peer_cq).fid,
                    FI_TRANSMIT | FI_RECV
                ),
                0
            );
        }
        assert_eq!(enable(peer_ep), 0);
        let sep_name = name_of(sep.cast());
        // Every context has the scalable endpoint's one address.
        for &(ctx, _) in tx.iter().chain(&rx) {
            assert_eq!(name_of(ctx.cast()), sep_name, "fi_getname of a context");
        }
        let sep_addr = insert(av, &sep_name);
        let peer_addr = insert(av, &name_of(peer_ep.cast()));
        Scalable {
            sep,
            tx,
            rx,
            peer: (peer_ep, peer_cq),
            sep_addr,
            peer_addr,
            av,
            open,
        }
    }

    /// Receive context `i` of the scalable endpoint, as a sender names it.
    fn rx_addr(&self, i: u32) -> FiAddr {
        uet_av::flags::fi_rx_addr(self.sep_addr, i, RX_CTX_BITS)
    }
}

impl Drop for Scalable {
    fn drop(&mut self) {
        // SAFETY: ours, open, closed once: contexts before the scalable endpoint, endpoints
        // before their CQs and AV.
        let closed = unsafe {
            let mut closed = Vec::new();
            for &(ctx, _) in self.tx.iter().chain(&self.rx) {
                closed.push(close(&mut (*ctx).fid));
            }
            closed.push(close(&mut (*self.sep).fid));
            closed.push(close(&mut (*self.peer.0).fid));
            for &(_, cq) in self.tx.iter().chain(&self.rx) {
                closed.push(close(&mut (*cq).fid));
            }
            closed.push(close(&mut (*self.peer.1).fid));
            closed.push(close(&mut (*self.av).fid));
            closed
        };
        let _ = &self.open;
        if !std::thread::panicking() {
            assert!(closed.iter().all(|&c| c == 0), "fi_close: {closed:?}");
        }
    }
}

/// A peer sending to each receive context of a scalable endpoint with `fi_rx_addr`: each
/// message (untagged and tagged) completes on that context's CQ, and on no other; the
/// scalable endpoint's transmit contexts each complete their own sends on their own CQ.
#[test]
fn a_message_to_a_named_receive_context_completes_on_that_contexts_cq_only() {
    let s = Scalable::new();
    let mut bufs = vec![[0u8; 64]; 8];
    let (plain, tagged) = bufs.split_at_mut(4);
    for (i, (&(ctx, _), (p, t))) in
        s.rx.iter()
            .zip(plain.iter_mut().zip(tagged.iter_mut()))
            .enumerate()
    {
        // SAFETY: the buffers outlive their completions, read below.
        unsafe {
            assert_eq!(post(ctx, p, None, 10 + i), 0, "fi_recv on context {i}");
            assert_eq!(
                post(ctx, t, Some(0x700 + i as u64), 20 + i),
                0,
                "fi_trecv on {i}"
            );
        }
    }
    // Backwards, so that arrival order is no help.
    for i in (0..4u32).rev() {
        let msg = format!("to context {i}");
        assert_eq!(send_to(s.peer.0, msg.as_bytes(), s.rx_addr(i), 0), 0);
        let tmsg = format!("tagged to context {i}");
        let tag = 0x700 + u64::from(i);
        assert_eq!(tsend(s.peer.0, tmsg.as_bytes(), s.rx_addr(i), tag, 0), 0);
    }
    for _ in 0..8 {
        let e = cq_wait(s.peer.1).expect("the peer's send completes");
        assert_eq!(e.flags & FI_SEND, FI_SEND);
    }
    for (i, &(_, cq)) in s.rx.iter().enumerate() {
        let mut got = Vec::new();
        for _ in 0..2 {
            let e = cq_wait(cq).unwrap_or_else(|e| panic!("context {i}: {e}"));
            got.push((e.op_context as usize, e.flags & (FI_MSG | FI_TAGGED), e.len));
        }
        got.sort();
        let plain_len = format!("to context {i}").len();
        let tagged_len = format!("tagged to context {i}").len();
        assert_eq!(
            got,
            vec![(10 + i, FI_MSG, plain_len), (20 + i, FI_TAGGED, tagged_len)],
            "receive context {i}"
        );
        assert_eq!(
            cq_read(cq).err(),
            Some(neg(FiErrno::FI_EAGAIN)),
            "context {i}"
        );
    }
    for (i, (p, t)) in plain.iter().zip(tagged.iter()).enumerate() {
        assert!(p.starts_with(format!("to context {i}").as_bytes()));
        assert!(t.starts_with(format!("tagged to context {i}").as_bytes()));
    }
    // Nothing landed on a transmit context's CQ, nor came back to the peer.
    for &(_, cq) in &s.tx {
        assert_eq!(cq_read(cq).err(), Some(neg(FiErrno::FI_EAGAIN)));
    }
    // Each transmit context sends to the peer and completes on its own CQ.
    let mut back = [[0u8; 32]; 2];
    for b in back.iter_mut() {
        // SAFETY: the buffers outlive their completions, read below.
        assert_eq!(unsafe { post(s.peer.0, b, None, 0) }, 0);
    }
    for (t, &(ctx, _)) in s.tx.iter().enumerate() {
        assert_eq!(send_to(ctx, b"from a context", s.peer_addr, 30 + t), 0);
    }
    for (t, &(_, cq)) in s.tx.iter().enumerate() {
        let e = cq_wait(cq).expect("a transmit context's send completes");
        assert_eq!(e.op_context as usize, 30 + t, "transmit context {t}");
        assert_eq!(e.flags & FI_SEND, FI_SEND);
        assert_eq!(cq_read(cq).err(), Some(neg(FiErrno::FI_EAGAIN)));
    }
    for _ in 0..2 {
        let e = cq_wait(s.peer.1).expect("the peer receives");
        assert_eq!(e.len, b"from a context".len());
    }
    for &(_, cq) in &s.rx {
        assert_eq!(cq_read(cq).err(), Some(neg(FiErrno::FI_EAGAIN)));
    }
}

/// fi_cq(3): source addresses are available only where the `FI_SOURCE` capability was asked
/// for. A receive context opened with capabilities without it gives `FI_ADDR_NOTAVAIL` as
/// the source of its receives, where its scalable endpoint, opened with it, names the
/// sender on the receive contexts opened without attributes.
#[test]
fn a_receive_context_opened_without_fi_source_reports_no_source() {
    let s = Scalable::with(FI_SOURCE_CAP, |i| if i == 1 { FI_MSG | FI_RECV } else { 0 });
    let mut bufs = [[0u8; 16]; 2];
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: the buffers outlive their completions, read below.
        assert_eq!(unsafe { post(s.rx[i].0, b, None, 10 + i) }, 0);
        assert_eq!(send_to(s.peer.0, b"hello", s.rx_addr(i as u32), 0), 0);
    }
    for (i, want) in [(0, s.peer_addr), (1, FI_ADDR_NOTAVAIL)] {
        let cq = s.rx[i].1;
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut e = [0u8; 64];
        let mut src = 0;
        let ret = loop {
            // SAFETY: an open CQ; room for one entry and one address.
            let ret = unsafe { ((*(*cq).ops).readfrom)(cq, e.as_mut_ptr().cast(), 1, &mut src) };
            if ret != neg(FiErrno::FI_EAGAIN) || std::time::Instant::now() >= end {
                break ret;
            }
            std::thread::yield_now();
        };
        assert_eq!(ret, 1, "receive context {i}");
        assert_eq!(src, want, "the source on receive context {i}");
    }
}

/// A context index the AV's `rx_ctx_bits` name but beyond the target's receive contexts is
/// refused at the target: the sender's completion is an error with the NIC's reason, and no
/// receive context sees anything.
#[test]
fn a_send_to_a_receive_context_the_target_does_not_have_fails_at_the_sender() {
    let s = Scalable::new();
    let mut buf = [0u8; 16];
    // SAFETY: the buffer outlives the test's reads.
    unsafe { assert_eq!(post(s.rx[0].0, &mut buf, None, 1), 0) };
    for (k, i) in [5u32, 7].into_iter().enumerate() {
        assert_eq!(send_to(s.peer.0, b"nowhere", s.rx_addr(i), 40 + k), 0);
        let e = cq_error(s.peer.1);
        assert_eq!(e.op_context as usize, 40 + k, "context {i}");
        assert_eq!(
            e.err,
            FiErrno::FI_EADDRNOTAVAIL.get() as c_int,
            "context {i}"
        );
        assert_ne!(e.prov_errno, 0, "the NIC's reason");
    }
    for &(_, cq) in &s.rx {
        assert_eq!(cq_read(cq).err(), Some(neg(FiErrno::FI_EAGAIN)));
    }
}

const EINVAL: c_int = -(FiErrno::FI_EINVAL.get() as c_int);

/// The scalable endpoint's calls misused: each a fabric errno, none leaving a partial state
/// (the endpoint still enables and works after them).
#[test]
fn scalable_endpoint_calls_misused_return_fabric_errnos_and_change_nothing() {
    let open = Open::with_hints(&sep_hints(2, 4));
    let ieq = |e: FiErrno| -(e.get() as c_int);
    // fi_scalable_ep of what it cannot open.
    // SAFETY: the provider's own info, restored after each change.
    unsafe {
        let ep_attr = &mut *(*open.info).ep_attr;
        for (tx, rx) in [
            (FI_SHARED_CONTEXT, 1),
            (1, FI_SHARED_CONTEXT),
            (1, 4096),
            (256, 1),
        ] {
            (ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt) = (tx, rx);
            assert_eq!(scalable_ep(&open).err(), Some(EINVAL), "tx {tx}, rx {rx}");
        }
        (ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt) = (2, 4);
        ep_attr.ep_type = FI_EP_DGRAM;
        assert_eq!(scalable_ep(&open).err(), Some(EINVAL), "FI_EP_DGRAM");
        ep_attr.ep_type = FI_EP_RDM;
        // And fi_endpoint of an info of several contexts.
        let mut ep = null_mut();
        let ret =
            ((*(*open.domain).ops).endpoint)(open.domain, open.info.cast(), &mut ep, null_mut());
        assert_eq!(ret, EINVAL, "fi_endpoint of several contexts");
    }
    let sep = scalable_ep(&open).unwrap();
    // SAFETY: an open scalable endpoint.
    assert_eq!(unsafe { (*sep).fid.fclass }, CLASSES.0);
    // Indices out of range.
    for (tx, i) in [(true, 2), (true, -1), (false, 4), (false, c_int::MAX)] {
        assert_eq!(
            context(sep, tx, i).err(),
            Some(EINVAL),
            "tx {tx}, index {i}"
        );
    }
    let t0 = context(sep, true, 0).unwrap();
    let r0 = context(sep, false, 0).unwrap();
    // SAFETY: open contexts.
    unsafe {
        assert_eq!((*t0).fid.fclass, CLASSES.1);
        assert_eq!((*r0).fid.fclass, CLASSES.2);
    }
    assert_eq!(
        context(sep, true, 0).err(),
        Some(ieq(FiErrno::FI_EBUSY)),
        "opened twice"
    );
    // Its address comes with fi_enable.
    let mut name = [0u8; 32];
    let mut len = name.len();
    // SAFETY: an open scalable endpoint; valid buffers.
    let ret =
        unsafe { ((*(*sep).cm).getname)(&mut (*sep).fid, name.as_mut_ptr().cast(), &mut len) };
    assert_eq!(ret, ieq(FiErrno::FI_EOPBADSTATE));
    // Transfers before fi_enable, in the wrong direction, or on the scalable endpoint.
    let mut buf = [0u8; 8];
    assert_eq!(send_to(t0, b"x", 0, 0), neg(FiErrno::FI_EOPBADSTATE));
    // SAFETY: refused calls; `buf` outlives them.
    unsafe {
        assert_eq!(post(t0, &mut buf, None, 0), neg(FiErrno::FI_EOPNOTSUPP));
        assert_eq!(post(t0, &mut buf, Some(1), 0), neg(FiErrno::FI_EOPNOTSUPP));
        assert_eq!(post(sep, &mut buf, None, 0), neg(FiErrno::FI_EOPNOTSUPP));
    }
    assert_eq!(send_to(r0, b"x", 0, 0), neg(FiErrno::FI_EOPNOTSUPP));
    assert_eq!(tsend(r0, b"x", 0, 1, 0), neg(FiErrno::FI_EOPNOTSUPP));
    assert_eq!(send_to(sep, b"x", 0, 0), neg(FiErrno::FI_EOPNOTSUPP));
    // SAFETY: an open context; refused.
    let inj = unsafe { ((*(*r0).msg).inject)(r0, b"x".as_ptr().cast(), 1, 0) };
    assert_eq!(inj, neg(FiErrno::FI_EOPNOTSUPP));
    // Bindings: a context binds its own direction's CQ, no AV; the sep an AV only.
    let mut small = av_attr(16);
    small.rx_ctx_bits = 1;
    let av_small = open.av_open(&mut small).unwrap();
    let cq_t = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    let cq_r = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    // SAFETY: open objects.
    unsafe {
        assert_eq!(
            bind(&mut (*t0).fid, &mut (*cq_t).fid, FI_RECV),
            ieq(FiErrno::FI_EBADFLAGS)
        );
        assert_eq!(
            bind(&mut (*r0).fid, &mut (*cq_r).fid, FI_TRANSMIT),
            ieq(FiErrno::FI_EBADFLAGS)
        );
        assert_eq!(bind(&mut (*t0).fid, &mut (*av_small).fid, 0), EINVAL);
        assert_eq!(bind(&mut (*sep).fid, &mut (*cq_t).fid, FI_TRANSMIT), EINVAL);
        assert_eq!(
            bind(&mut (*sep).fid, &mut (*av_small).fid, 1),
            ieq(FiErrno::FI_EBADFLAGS)
        );
    }
    // fi_enable: without an AV, without a context's CQ, with an AV too narrow; a context's
    // fi_enable, which puts the scalable endpoint on the NIC, needs them as the endpoint's.
    assert_eq!(enable(sep), ieq(FiErrno::FI_ENOAV));
    assert_eq!(enable(t0), ieq(FiErrno::FI_ENOCQ));
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*t0).fid, &mut (*cq_t).fid, FI_TRANSMIT), 0) };
    assert_eq!(
        enable(t0),
        ieq(FiErrno::FI_ENOAV),
        "the context's AV is its sep's"
    );
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av_small).fid, 0), 0);
        assert_eq!(
            bind(&mut (*sep).fid, &mut (*av_small).fid, 0),
            EINVAL,
            "bound twice"
        );
    }
    assert_eq!(
        enable(sep),
        ieq(FiErrno::FI_ENOCQ),
        "receive context 0 has no CQ"
    );
    assert_eq!(enable(r0), ieq(FiErrno::FI_ENOCQ));
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*r0).fid, &mut (*cq_r).fid, FI_RECV), 0) };
    assert_eq!(
        enable(sep),
        EINVAL,
        "rx_ctx_bits 1 cannot name 4 receive contexts"
    );
    assert_eq!(enable(t0), EINVAL, "nor from a context's fi_enable");
    assert_eq!(enable(r0), EINVAL);
    assert_eq!(
        send_to(t0, b"x", 0, 0),
        neg(FiErrno::FI_EOPBADSTATE),
        "still not enabled"
    );
    // fi_close of the scalable endpoint while contexts are open.
    // SAFETY: open objects, each closed once.
    unsafe {
        assert_eq!(close(&mut (*sep).fid), ieq(FiErrno::FI_EBUSY));
        assert_eq!(close(&mut (*t0).fid), 0);
        assert_eq!(close(&mut (*sep).fid), ieq(FiErrno::FI_EBUSY));
        assert_eq!(close(&mut (*r0).fid), 0);
        assert_eq!(close(&mut (*sep).fid), 0);
    }
    // A scalable endpoint bound to an AV that names its contexts enables; no context opens
    // after that.
    let mut wide = av_attr(16);
    wide.rx_ctx_bits = 2;
    let av = open.av_open(&mut wide).unwrap();
    let sep = scalable_ep(&open).unwrap();
    let r3 = context(sep, false, 3).unwrap();
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*r3).fid, &mut (*cq_r).fid, FI_RECV), 0);
    }
    assert_eq!(enable(sep), 0);
    assert_eq!(enable(sep), 0, "enabled again: nothing to do");
    // SAFETY: open objects; refused after fi_enable.
    unsafe {
        assert_eq!(
            bind(&mut (*r3).fid, &mut (*cq_t).fid, FI_RECV),
            ieq(FiErrno::FI_EOPBADSTATE)
        );
    }
    // SAFETY: a receive on an enabled receive context; `buf` outlives the endpoint.
    unsafe { assert_eq!(post(r3, &mut buf, None, 0), 0) };
    // A context opened after fi_enable(sep) binds and is enabled on its own, and carries
    // nothing before.
    let t1 = context(sep, true, 1).expect("a context opened after fi_enable(sep)");
    assert_eq!(send_to(t1, b"x", 0, 0), neg(FiErrno::FI_EOPBADSTATE));
    assert_eq!(enable(t1), ieq(FiErrno::FI_ENOCQ));
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*t1).fid, &mut (*cq_t).fid, FI_TRANSMIT), 0) };
    assert_eq!(enable(t1), 0);
    assert_eq!(enable(t1), 0, "enabled again: nothing to do");
    // SAFETY: open objects; refused after its fi_enable.
    unsafe {
        assert_eq!(
            bind(&mut (*t1).fid, &mut (*cq_r).fid, FI_TRANSMIT),
            ieq(FiErrno::FI_EOPBADSTATE)
        );
    }
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t1).fid,
            &mut (*r3).fid,
            &mut (*sep).fid,
            &mut (*cq_t).fid,
            &mut (*cq_r).fid,
            &mut (*av).fid,
            &mut (*av_small).fid,
        ]);
    }
}

/// A context enabled before its scalable endpoint (fi_endpoint(3) asks only that each be
/// bound before it is enabled, and enabled before it takes transfers) has the endpoint's
/// address and takes a receive at once, which a message fills after `fi_enable(sep)`; a
/// context open but not enabled takes nothing until `fi_enable(sep)` enables it.
#[test]
fn a_receive_context_enabled_before_its_scalable_endpoint_takes_receives_at_once() {
    let open = Open::with_hints(&sep_hints(1, 2));
    let mut attr = av_attr(16);
    attr.rx_ctx_bits = 1;
    let av = open.av_open(&mut attr).unwrap();
    let cqs = [0, 1, 2].map(|_| open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC));
    let sep = scalable_ep(&open).unwrap();
    let (t0, r0, r1) = (
        context(sep, true, 0).unwrap(),
        context(sep, false, 0).unwrap(),
        context(sep, false, 1).unwrap(),
    );
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*r1).fid, &mut (*cqs[1]).fid, FI_RECV), 0);
    }
    let (mut early, mut late) = ([0u8; 16], [0u8; 16]);
    // SAFETY: refused: the context is not enabled.
    let ret = unsafe { post(r1, &mut early, None, 1) };
    assert_eq!(ret, neg(FiErrno::FI_EOPBADSTATE), "before any fi_enable");
    assert_eq!(
        enable(r1),
        0,
        "the context's enable puts the endpoint on the NIC"
    );
    assert_eq!(
        name_of(r1.cast()),
        name_of(sep.cast()),
        "its address is the sep's"
    );
    // SAFETY: `early` outlives the receive's completion, read below.
    assert_eq!(unsafe { post(r1, &mut early, None, 1) }, 0);
    // SAFETY: open objects; the others bind after the endpoint is on the NIC.
    unsafe {
        assert_eq!(bind(&mut (*r0).fid, &mut (*cqs[0]).fid, FI_RECV), 0);
        assert_eq!(bind(&mut (*t0).fid, &mut (*cqs[2]).fid, FI_TRANSMIT), 0);
    }
    // SAFETY: refused: bound but not enabled.
    let ret = unsafe { post(r0, &mut late, None, 2) };
    assert_eq!(ret, neg(FiErrno::FI_EOPBADSTATE), "r0 is not enabled yet");
    assert_eq!(send_to(t0, b"x", 0, 0), neg(FiErrno::FI_EOPBADSTATE));
    assert_eq!(enable(sep), 0, "enables r0 and t0");
    // SAFETY: `late` outlives the receive's completion, read below.
    assert_eq!(unsafe { post(r0, &mut late, None, 2) }, 0);
    let me = insert(av, &name_of(sep.cast()));
    for (i, msg) in [(1u32, &b"early"[..]), (0, &b"late"[..])] {
        let to = uet_av::flags::fi_rx_addr(me, i, 1);
        assert_eq!(send_to(t0, msg, to, 10 + i as usize), 0);
        assert!(cq_wait(cqs[2]).is_ok(), "the send to context {i} completes");
    }
    let e = cq_wait(cqs[1]).expect("the receive posted before fi_enable(sep)");
    assert_eq!((e.op_context as usize, e.len), (1, 5));
    assert_eq!(&early[..5], b"early");
    let e = cq_wait(cqs[0]).expect("the receive posted after");
    assert_eq!((e.op_context as usize, e.len), (2, 4));
    assert_eq!(&late[..4], b"late");
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t0).fid,
            &mut (*r0).fid,
            &mut (*r1).fid,
            &mut (*sep).fid,
            &mut (*cqs[0]).fid,
            &mut (*cqs[1]).fid,
            &mut (*cqs[2]).fid,
            &mut (*av).fid,
        ]);
    }
}

/// A receive context bound to an `FI_WAIT_FD` CQ after a thread armed it (`fi_trywait`),
/// on an endpoint already on the NIC, and enabled by `fi_enable` of the scalable endpoint:
/// its ring set was not armed, so the enable makes the descriptor readable, as the
/// context's own `fi_enable` does, and the waiter arms it on its next `fi_trywait`.
#[test]
fn a_context_enabled_by_its_scalable_endpoints_fi_enable_wakes_a_waiter_on_its_cq() {
    let open = Open::with_hints(&sep_hints(1, 2));
    let mut attr = av_attr(16);
    attr.rx_ctx_bits = 1;
    let av = open.av_open(&mut attr).unwrap();
    let cq = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_FD);
    let peer_cq = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    let sep = scalable_ep(&open).unwrap();
    let r0 = context(sep, false, 0).unwrap();
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*r0).fid, &mut (*cq).fid, FI_RECV), 0);
    }
    assert_eq!(enable(r0), 0, "the endpoint is on the NIC from here");
    let mut fd: c_int = -1;
    // SAFETY: an open CQ; an int for the answer.
    let ret =
        unsafe { ((*(*cq).fid.ops).control)(&mut (*cq).fid, FI_GETWAIT, (&raw mut fd).cast()) };
    assert_eq!(ret, 0);
    let trywait = || -> c_int {
        // SAFETY: an open CQ and the fabric it was opened under.
        unsafe {
            let mut fids = [&raw mut (*cq).fid];
            ((*(*open.fabric).ops).trywait)(open.fabric, fids.as_mut_ptr(), 1)
        }
    };
    assert_eq!(trywait(), 0, "nothing to read: the waiter may sleep");
    let r1 = context(sep, false, 1).unwrap();
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*r1).fid, &mut (*cq).fid, FI_RECV), 0) };
    assert_eq!(enable(sep), 0, "enables r1");
    let mut buf = [0u8; 16];
    // SAFETY: `buf` outlives the receive's completion, read below.
    assert_eq!(unsafe { post(r1, &mut buf, None, 7) }, 0);
    // The peer: an endpoint of one context.
    // SAFETY: the provider's own info, restored after.
    let peer = unsafe {
        let ep_attr = &mut *(*open.info).ep_attr;
        (ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt) = (1, 1);
        let ep = open.endpoint();
        (ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt) = (1, 2);
        ep
    };
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*peer).fid, &mut (*av).fid, 0), 0);
        assert_eq!(
            bind(&mut (*peer).fid, &mut (*peer_cq).fid, FI_TRANSMIT | FI_RECV),
            0
        );
    }
    assert_eq!(enable(peer), 0);
    let to = uet_av::flags::fi_rx_addr(insert(av, &name_of(sep.cast())), 1, 1);
    assert_eq!(send_to(peer, b"wake", to, 1), 0);
    assert!(cq_wait(peer_cq).is_ok(), "the send to context 1 completes");
    // A bound only so that a descriptor never made readable fails the test.
    assert!(
        common::fd_readable(fd, 5000),
        "context 1's receive completed and the descriptor stayed unreadable"
    );
    let e = cq_wait(cq).expect("context 1's receive");
    assert_eq!((e.op_context as usize, e.len), (7, 4));
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*r0).fid,
            &mut (*r1).fid,
            &mut (*sep).fid,
            &mut (*peer).fid,
            &mut (*cq).fid,
            &mut (*peer_cq).fid,
            &mut (*av).fid,
        ]);
    }
}

/// fi_getinfo answers a scalable `FI_EP_RDM` endpoint of up to the NIC's contexts, with
/// the counts asked for, and the NIC's transmit contexts per endpoint in the domain; an
/// `FI_EP_DGRAM` or `FI_EP_MSG` endpoint keeps one context of each direction, which its
/// domain's `max_ep_tx_ctx` and `max_ep_rx_ctx` say, and hints asking more of the domain are
/// not answered with it.
#[test]
fn fi_getinfo_offers_scalable_reliable_endpoints_up_to_the_nics_contexts() {
    let (max_tx, max_rx) = answer_to(|_, _| (), |d| (d.max_ep_tx_ctx, d.max_ep_rx_ctx)).unwrap();
    assert!(max_tx >= 2 && max_rx >= 4, "the NIC's: {max_tx}, {max_rx}");
    let hints = sep_hints(2, 4);
    let info = getinfo(None, None, 0, Some(&hints)).unwrap();
    // SAFETY: the provider's own answer, read, then freed once.
    unsafe {
        assert!(
            (*info).next.is_null(),
            "only FI_EP_RDM has several contexts"
        );
        let ep = &*(*info).ep_attr;
        assert_eq!(
            (ep.ep_type, ep.tx_ctx_cnt, ep.rx_ctx_cnt),
            (FI_EP_RDM, 2, 4)
        );
        assert_eq!((*info).caps & FI_NAMED_RX_CTX, FI_NAMED_RX_CTX);
        assert_eq!((*(*info).domain_attr).max_ep_tx_ctx, max_tx);
        uet_fi::info::free_info(info);
    }
    for ep_type in [FI_EP_DGRAM, FI_EP_MSG] {
        let hints = sep_hints(1, 2);
        // SAFETY: the hints' own ep_attr.
        unsafe { (*hints.info.ep_attr).ep_type = ep_type };
        assert_eq!(
            getinfo(None, None, 0, Some(&hints)).err(),
            Some(ENODATA),
            "type {ep_type}"
        );
        let answer = answer_to(
            |ep, _| ep.ep_type = ep_type,
            |d| (d.max_ep_tx_ctx, d.max_ep_rx_ctx),
        );
        assert_eq!(
            answer,
            Ok((1, 1)),
            "type {ep_type} has one transmit and one receive context"
        );
        for (max_tx, max_rx) in [(2, 0), (0, 2)] {
            let answer = answer_to(
                |ep, d| {
                    ep.ep_type = ep_type;
                    (d.max_ep_tx_ctx, d.max_ep_rx_ctx) = (max_tx, max_rx);
                },
                |_| (),
            );
            assert_eq!(
                answer,
                Err(ENODATA),
                "type {ep_type}, max_ep_tx_ctx {max_tx}, max_ep_rx_ctx {max_rx}"
            );
        }
    }
    // A domain asked several receive contexts per endpoint is one of reliable endpoints.
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own domain_attr.
    unsafe { (*hints.info.domain_attr).max_ep_rx_ctx = 2 };
    assert_eq!(answered_types(&hints).map(|t| t.len()), Ok(1));
    for (tx, rx) in [(max_tx + 1, 1), (1, max_rx + 1)] {
        assert_eq!(
            getinfo(None, None, 0, Some(&sep_hints(tx, rx))).err(),
            Some(ENODATA),
            "tx {tx}, rx {rx}"
        );
    }
    let answer = answer_to(|_, d| d.max_ep_tx_ctx = max_tx, |d| d.max_ep_tx_ctx);
    assert_eq!(answer, Ok(max_tx));
    let answer = answer_to(|_, d| d.max_ep_tx_ctx = max_tx + 1, |_| ());
    assert_eq!(answer, Err(ENODATA));
}

/// The transmit and receive context of one index share the NIC's ring set: closing one of
/// them leaves the other reading its completions through the CQ they both bound.
#[test]
fn a_receive_context_keeps_its_cq_when_the_transmit_context_of_its_index_closes() {
    let open = Open::with_hints(&sep_hints(2, 4));
    let mut attr = av_attr(16);
    attr.rx_ctx_bits = 2;
    let av = open.av_open(&mut attr).unwrap();
    let cq = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    let sep = scalable_ep(&open).unwrap();
    let (t0, r0) = (
        context(sep, true, 0).unwrap(),
        context(sep, false, 0).unwrap(),
    );
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*t0).fid, &mut (*cq).fid, FI_TRANSMIT), 0);
        assert_eq!(bind(&mut (*r0).fid, &mut (*cq).fid, FI_RECV), 0);
    }
    assert_eq!(enable(sep), 0);
    let me = insert(av, &name_of(sep.cast()));
    let mut buf = [0u8; 16];
    // SAFETY: `buf` outlives the receive's completion, read below; `t0` is closed once.
    unsafe {
        assert_eq!(post(r0, &mut buf, None, 7), 0);
        assert_eq!(close(&mut (*t0).fid), 0);
    }
    // A closed context's index opens again, the receive context of the index untouched.
    let t1 = context(sep, true, 0).expect("transmit context 0 opened again");
    let peer = {
        // SAFETY: the provider's own info, restored after.
        unsafe {
            let ep_attr = &mut *(*open.info).ep_attr;
            (ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt) = (1, 1);
            let ep = open.endpoint();
            (ep_attr.tx_ctx_cnt, ep_attr.rx_ctx_cnt) = (2, 4);
            ep
        }
    };
    let peer_cq = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*peer).fid, &mut (*av).fid, 0), 0);
        assert_eq!(
            bind(&mut (*peer).fid, &mut (*peer_cq).fid, FI_TRANSMIT | FI_RECV),
            0
        );
    }
    assert_eq!(enable(peer), 0);
    let to = uet_av::flags::fi_rx_addr(me, 0, 2);
    assert_eq!(send_to(peer, b"still here", to, 0), 0);
    assert!(cq_wait(peer_cq).is_ok());
    let e = cq_wait(cq).expect("receive context 0 still reads its CQ");
    assert_eq!((e.op_context as usize, e.len), (7, 10));
    assert_eq!(&buf[..10], b"still here");
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t1).fid,
            &mut (*r0).fid,
            &mut (*sep).fid,
            &mut (*peer).fid,
            &mut (*cq).fid,
            &mut (*peer_cq).fid,
            &mut (*av).fid,
        ]);
    }
}

/// A context binds a counter of its own direction: a transmit context's counts its sends, a
/// receive context's its receives (the other direction is `-FI_EBADFLAGS`). Here transmit
/// context 1 sends to the scalable endpoint's own receive context 2.
#[test]
fn each_context_counts_its_own_directions_completions() {
    let open = Open::with_hints(&sep_hints(2, 4));
    let mut attr = av_attr(16);
    attr.rx_ctx_bits = 2;
    let av = open.av_open(&mut attr).unwrap();
    let cqs = [0, 1].map(|_| open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC));
    let cntrs = [0, 1].map(|_| open.cntr_open(FI_WAIT_UNSPEC).unwrap());
    let sep = scalable_ep(&open).unwrap();
    let (t1, r2) = (
        context(sep, true, 1).unwrap(),
        context(sep, false, 2).unwrap(),
    );
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*t1).fid, &mut (*cqs[0]).fid, FI_TRANSMIT), 0);
        assert_eq!(bind(&mut (*r2).fid, &mut (*cqs[1]).fid, FI_RECV), 0);
        let bad = -(FiErrno::FI_EBADFLAGS.get() as c_int);
        assert_eq!(bind(&mut (*t1).fid, &mut (*cntrs[0]).fid, FI_RECV), bad);
        assert_eq!(bind(&mut (*r2).fid, &mut (*cntrs[1]).fid, FI_SEND), bad);
        assert_eq!(bind(&mut (*t1).fid, &mut (*cntrs[0]).fid, FI_SEND), 0);
        assert_eq!(bind(&mut (*r2).fid, &mut (*cntrs[1]).fid, FI_RECV), 0);
    }
    assert_eq!(enable(sep), 0);
    let me = insert(av, &name_of(sep.cast()));
    let mut buf = [0u8; 16];
    // SAFETY: `buf` outlives the receive's completion, waited for below.
    unsafe { assert_eq!(post(r2, &mut buf, None, 0), 0) };
    let to = uet_av::flags::fi_rx_addr(me, 2, 2);
    assert_eq!(send_to(t1, b"to myself", to, 0), 0);
    assert_eq!(cntr_wait(cntrs[0], 1, 5000), 0, "the send is counted");
    assert_eq!(cntr_wait(cntrs[1], 1, 5000), 0, "the receive is counted");
    assert_eq!((cntr_read(cntrs[0]), cntr_read(cntrs[1])), (1, 1));
    assert!(cq_wait(cqs[0]).is_ok() && cq_wait(cqs[1]).is_ok());
    assert_eq!(&buf[..9], b"to myself");
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t1).fid,
            &mut (*r2).fid,
            &mut (*sep).fid,
            &mut (*cqs[0]).fid,
            &mut (*cqs[1]).fid,
            &mut (*cntrs[0]).fid,
            &mut (*cntrs[1]).fid,
            &mut (*av).fid,
        ]);
    }
}

/// A receive context's `fi_close` withdraws its receives still posted on the NIC
/// (RECV_CANCEL): a message sent to its index while it is closed finds no receive, rather
/// than landing in one that is discarded, and the buffers the application had given the
/// closed context and got back are never written. The message waits on the NIC's unexpected
/// list, its send a success, and a context opened again on the index takes it with its own
/// receive: untagged or tagged alike.
#[test]
fn a_closed_receive_contexts_posted_receive_writes_nothing_into_its_buffer() {
    let open = Open::with_hints(&sep_hints(1, 1));
    let (av, cq_t, cq_r, sep, t0, r0) = one_context_each(&open);
    let me = insert(av, &name_of(sep.cast()));
    let (mut buf, mut tbuf) = (vec![0xaau8; 32], vec![0xaau8; 32]);
    // SAFETY: the buffers outlive the scalable endpoint; `r0` is closed once.
    unsafe {
        assert_eq!(post(r0, &mut buf, None, 9), 0);
        assert_eq!(post(r0, &mut tbuf, Some(0x55), 10), 0);
        assert_eq!(close(&mut (*r0).fid), 0);
    }
    assert_eq!(send_to(t0, b"after the close", me, 5), 0);
    let e = cq_wait(cq_t).expect("the send completes: its message waits unexpected");
    assert_eq!(e.op_context as usize, 5);
    assert_eq!(tsend(t0, b"tagged, closed", me, 0x55, 6), 0);
    let e = cq_wait(cq_t).expect("the tagged send completes: its message waits unexpected");
    assert_eq!(e.op_context as usize, 6);
    // Whatever else the ring set holds is read too.
    for _ in 0..50 {
        assert_eq!(cq_read(cq_t).err(), Some(neg(FiErrno::FI_EAGAIN)));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(
        buf.iter().chain(&tbuf).all(|&b| b == 0xaa),
        "the closed context's buffers were written: {buf:?} {tbuf:?}"
    );
    // The index opens again at once: nothing of the old context is left on the NIC.
    let r0 = context(sep, false, 0).expect("receive context 0 opened again");
    let cq_new = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*r0).fid, &mut (*cq_new).fid, FI_RECV), 0) };
    assert_eq!(enable(r0), 0);
    let mut new_buf = [0u8; 32];
    // SAFETY: `new_buf` outlives the receive's completion, read below.
    unsafe { assert_eq!(post(r0, &mut new_buf, Some(0x55), 11), 0) };
    let e = cq_wait(cq_new).expect("the waiting tagged message");
    assert_eq!((e.op_context as usize, e.len), (11, 14));
    assert_eq!(&new_buf[..14], b"tagged, closed");
    let mut untagged_buf = [0u8; 32];
    // SAFETY: `untagged_buf` outlives the receive's completion, read below.
    unsafe { assert_eq!(post(r0, &mut untagged_buf, None, 12), 0) };
    let e = cq_wait(cq_new).expect("the waiting untagged message");
    assert_eq!((e.op_context as usize, e.len), (12, 15));
    assert_eq!(&untagged_buf[..15], b"after the close");
    assert_eq!(cq_read(cq_new).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!(cq_read(cq_r).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert!(buf.iter().chain(&tbuf).all(|&b| b == 0xaa));
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t0).fid,
            &mut (*r0).fid,
            &mut (*sep).fid,
            &mut (*cq_t).fid,
            &mut (*cq_r).fid,
            &mut (*cq_new).fid,
            &mut (*av).fid,
        ]);
    }
}

/// A scalable endpoint of one transmit and one receive context on `open`'s domain, bound to
/// an AV of 16 entries and enabled, each context with a tagged-format CQ of its own:
/// (AV, transmit CQ, receive CQ, scalable endpoint, transmit context, receive context).
#[allow(clippy::type_complexity)]
fn one_context_each(
    open: &Open,
) -> (
    *mut FidAv,
    *mut FidCq,
    *mut FidCq,
    *mut FidEp,
    *mut FidEp,
    *mut FidEp,
) {
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let (cq_t, cq_r) = (
        open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC),
        open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC),
    );
    let sep = scalable_ep(open).unwrap();
    let (t0, r0) = (
        context(sep, true, 0).unwrap(),
        context(sep, false, 0).unwrap(),
    );
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*t0).fid, &mut (*cq_t).fid, FI_TRANSMIT), 0);
        assert_eq!(bind(&mut (*r0).fid, &mut (*cq_r).fid, FI_RECV), 0);
    }
    assert_eq!(enable(sep), 0);
    (av, cq_t, cq_r, sep, t0, r0)
}

/// A receive context's `fi_close` drops the messages it claimed (`FI_PEEK | FI_CLAIM`) and
/// did not take: only the `FI_CLAIM` receive given the closed context's `fi_context` could
/// take one, and a context opened again on the index finds none, so each would hold its
/// place on the NIC's unexpected list for as long as the scalable endpoint lives. The list
/// has room for as many messages for the new context as it had before the claim.
#[test]
fn a_closed_receive_contexts_claims_leave_the_unexpected_list() {
    let entries = usize::from(uet_regs::CAP_TAGGED.reset_value().unexpected_entries());
    let open = Open::with_hints(&sep_hints(1, 1));
    let (av, cq_t, cq_r, sep, t0, r0) = one_context_each(&open);
    let me = insert(av, &name_of(sep.cast()));
    assert_eq!(tsend(t0, b"claimed", me, 0x33, 1), 0);
    assert!(cq_wait(cq_t).is_ok(), "the message waits unexpected");
    let mut fi_context = [0u64; 4];
    let claim: *mut core::ffi::c_void = fi_context.as_mut_ptr().cast();
    let msg = FiMsgTagged {
        msg_iov: null(),
        desc: null_mut(),
        iov_count: 0,
        addr: u64::MAX, // FI_ADDR_UNSPEC
        tag: 0x33,
        ignore: 0,
        context: claim,
        data: 0,
    };
    // SAFETY: an open receive context; the probe takes no buffer.
    let ret = unsafe { ((*(*r0).tagged).recvmsg)(r0, &msg, FI_PEEK | FI_CLAIM) };
    assert_eq!(ret, 0);
    let e = cq_wait(cq_r).expect("the claim completes");
    assert_eq!((e.op_context, e.len), (claim, 7));
    // SAFETY: open, closed once.
    assert_eq!(unsafe { close(&mut (*r0).fid) }, 0);
    let r0 = context(sep, false, 0).expect("receive context 0 opened again");
    let cq_new = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*r0).fid, &mut (*cq_new).fid, FI_RECV), 0) };
    assert_eq!(enable(r0), 0);
    for i in 0..entries {
        assert_eq!(tsend(t0, b"m", me, 0x44, 100 + i), 0);
        let e = cq_wait(cq_t);
        assert_eq!(
            e.map(|e| e.op_context as usize),
            Ok(100 + i),
            "message {i} of {entries} finds room on the unexpected list"
        );
    }
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t0).fid,
            &mut (*r0).fid,
            &mut (*sep).fid,
            &mut (*cq_t).fid,
            &mut (*cq_r).fid,
            &mut (*cq_new).fid,
            &mut (*av).fid,
        ]);
    }
}

/// A context closed after its scalable endpoint is enabled opens again on its index
/// (fi_endpoint(3) forbids it nowhere): a new context on the same ring set, which binds a CQ
/// of its own and is enabled on its own, and starts clean: the old context's receives are
/// withdrawn from the NIC, so a message for the index lands in the new context's receive,
/// and nothing of the old context (receives, sends, completions) reaches the new CQ.
#[test]
fn a_context_closed_after_enable_opens_again_on_its_index_clean_of_the_old_ones_operations() {
    let open = Open::with_hints(&sep_hints(1, 1));
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let cqs = [0, 1, 2, 3].map(|_| open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC));
    let sep = scalable_ep(&open).unwrap();
    let (t0, r0) = (
        context(sep, true, 0).unwrap(),
        context(sep, false, 0).unwrap(),
    );
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*t0).fid, &mut (*cqs[0]).fid, FI_TRANSMIT), 0);
        assert_eq!(bind(&mut (*r0).fid, &mut (*cqs[1]).fid, FI_RECV), 0);
    }
    assert_eq!(enable(sep), 0);
    let me = insert(av, &name_of(sep.cast()));
    let (mut old_plain, mut old_tagged) = (vec![0xaau8; 32], vec![0xaau8; 32]);
    // SAFETY: the buffers outlive the scalable endpoint; each context is closed once.
    unsafe {
        assert_eq!(post(r0, &mut old_plain, None, 1), 0);
        assert_eq!(post(r0, &mut old_tagged, Some(0x77), 2), 0);
        assert_eq!(
            context(sep, false, 0).err(),
            Some(-(FiErrno::FI_EBUSY.get() as c_int))
        );
        assert_eq!(close(&mut (*r0).fid), 0);
    }
    let r0 = context(sep, false, 0).expect("receive context 0 opened again");
    assert_eq!(name_of(r0.cast()), name_of(sep.cast()));
    let mut buf = [0u8; 32];
    // SAFETY: refused: the new context is not enabled.
    let ret = unsafe { post(r0, &mut buf, None, 3) };
    assert_eq!(
        ret,
        neg(FiErrno::FI_EOPBADSTATE),
        "a new context starts disabled"
    );
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*r0).fid, &mut (*cqs[2]).fid, FI_RECV), 0) };
    assert_eq!(enable(r0), 0);
    // SAFETY: `buf` outlives the receive's completion, read below.
    unsafe { assert_eq!(post(r0, &mut buf, None, 3), 0) };
    assert_eq!(send_to(t0, b"for the new one", me, 4), 0);
    let e = cq_wait(cqs[0]).expect("the send completes");
    assert_eq!(e.op_context as usize, 4);
    let e = cq_wait(cqs[2]).expect("the new context's receive");
    assert_eq!((e.op_context as usize, e.len), (3, 15));
    assert_eq!(&buf[..15], b"for the new one");
    // A tagged message finds no old tagged receive either: it waits for the new one's.
    assert_eq!(tsend(t0, b"tagged", me, 0x77, 5), 0);
    assert!(cq_wait(cqs[0]).is_ok(), "the tagged send completes");
    let mut tbuf = [0u8; 32];
    // SAFETY: `tbuf` outlives the receive's completion, read below.
    unsafe { assert_eq!(post(r0, &mut tbuf, Some(0x77), 6), 0) };
    let e = cq_wait(cqs[2]).expect("the new context's tagged receive");
    assert_eq!((e.op_context as usize, e.len), (6, 6));
    assert_eq!(&tbuf[..6], b"tagged");
    assert!(old_plain.iter().chain(&old_tagged).all(|&b| b == 0xaa));
    for cq in [cqs[1], cqs[2]] {
        assert_eq!(
            cq_read(cq).err(),
            Some(neg(FiErrno::FI_EAGAIN)),
            "nothing of the old"
        );
    }
    // The transmit context too: a send of the old one, closed at once, completes nowhere
    // the new one reads.
    let mut xbuf = [0u8; 8];
    // SAFETY: `xbuf` outlives the receive's completion, read below; `t0` is closed once.
    unsafe {
        assert_eq!(post(r0, &mut xbuf, None, 10), 0);
        assert_eq!(send_to(t0, b"x", me, 7), 0);
        assert_eq!(close(&mut (*t0).fid), 0);
    }
    let t0 = context(sep, true, 0).expect("transmit context 0 opened again");
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*t0).fid, &mut (*cqs[3]).fid, FI_TRANSMIT), 0) };
    assert_eq!(enable(t0), 0);
    let e = cq_wait(cqs[2]).expect("the old transmit context's message arrives");
    assert_eq!((e.op_context as usize, e.len), (10, 1));
    // SAFETY: `buf` outlives the receive's completion, read below.
    unsafe { assert_eq!(post(r0, &mut buf, None, 8), 0) };
    assert_eq!(send_to(t0, b"y", me, 9), 0);
    let e = cq_wait(cqs[3]).expect("the new transmit context's send");
    assert_eq!(e.op_context as usize, 9);
    assert_eq!(cq_read(cqs[3]).err(), Some(neg(FiErrno::FI_EAGAIN)));
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t0).fid,
            &mut (*r0).fid,
            &mut (*sep).fid,
            &mut (*cqs[0]).fid,
            &mut (*cqs[1]).fid,
            &mut (*cqs[2]).fid,
            &mut (*cqs[3]).fid,
            &mut (*av).fid,
        ]);
    }
}

/// A transmit context closed with `fi_inject`s posted: its index opens again once the NIC
/// has completed them (`-FI_EBUSY` until then: try again), and the new context's counter
/// counts only its own injects, which carry no context to tell them apart by.
#[test]
fn a_transmit_contexts_injects_count_on_no_context_opened_again_on_its_index() {
    let open = Open::with_hints(&sep_hints(1, 1));
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let cqs = [0, 1, 2].map(|_| open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC));
    let cntrs = [0, 1].map(|_| open.cntr_open(FI_WAIT_UNSPEC).unwrap());
    let sep = scalable_ep(&open).unwrap();
    let (t0, r0) = (
        context(sep, true, 0).unwrap(),
        context(sep, false, 0).unwrap(),
    );
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*t0).fid, &mut (*cqs[0]).fid, FI_TRANSMIT), 0);
        assert_eq!(bind(&mut (*t0).fid, &mut (*cntrs[0]).fid, FI_SEND), 0);
        assert_eq!(bind(&mut (*r0).fid, &mut (*cqs[1]).fid, FI_RECV), 0);
    }
    assert_eq!(enable(sep), 0);
    let me = insert(av, &name_of(sep.cast()));
    let mut bufs = [[0u8; 8]; 3];
    // SAFETY: the buffers outlive the receives' completions, read below; `t0` is closed once.
    unsafe {
        for (k, b) in bufs.iter_mut().enumerate() {
            assert_eq!(post(r0, b, None, 20 + k), 0);
        }
        for _ in 0..2 {
            assert_eq!(((*(*t0).msg).inject)(t0, b"old".as_ptr().cast(), 3, me), 0);
        }
        assert_eq!(close(&mut (*t0).fid), 0);
    }
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let t0 = loop {
        match context(sep, true, 0) {
            Ok(t) => break t,
            Err(e) if e == neg_int(FiErrno::FI_EBUSY) && std::time::Instant::now() < end => {
                std::thread::yield_now()
            }
            Err(e) => panic!("fi_tx_context: {e}"),
        }
    };
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*t0).fid, &mut (*cqs[2]).fid, FI_TRANSMIT), 0);
        assert_eq!(bind(&mut (*t0).fid, &mut (*cntrs[1]).fid, FI_SEND), 0);
    }
    assert_eq!(enable(t0), 0);
    // SAFETY: an open context.
    unsafe { assert_eq!(((*(*t0).msg).inject)(t0, b"new".as_ptr().cast(), 3, me), 0) };
    for k in 0..3 {
        let e = cq_wait(cqs[1]).expect("each message arrives");
        assert_eq!((e.op_context as usize, e.len), (20 + k, 3));
    }
    assert_eq!(cntr_wait(cntrs[1], 1, 5000), 0);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!((cntr_read(cntrs[1]), cntr_readerr(cntrs[1])), (1, 0));
    assert_eq!(cq_read(cqs[2]).err(), Some(neg(FiErrno::FI_EAGAIN)));
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t0).fid,
            &mut (*r0).fid,
            &mut (*sep).fid,
            &mut (*cqs[0]).fid,
            &mut (*cqs[1]).fid,
            &mut (*cqs[2]).fid,
            &mut (*cntrs[0]).fid,
            &mut (*cntrs[1]).fid,
            &mut (*av).fid,
        ]);
    }
}

/// `fi_close` of a context and `fi_enable` of its scalable endpoint on two threads at once
/// (`FI_THREAD_SAFE`): whichever comes first, the enable succeeds, for the context is
/// either open with its CQ bound or closed; it is never found half closed, open without
/// its CQ (`-FI_ENOCQ`).
#[test]
fn a_context_closing_while_its_scalable_endpoint_is_enabled_leaves_the_enable_to_succeed() {
    let open = Open::with_hints(&sep_hints(2, 2));
    let mut attr = av_attr(64);
    attr.rx_ctx_bits = 1;
    let av = open.av_open(&mut attr).unwrap();
    let cqs = [0, 1, 2, 3].map(|_| open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC));
    let mut failed = Vec::new();
    for round in 0..40 {
        let sep = scalable_ep(&open).unwrap();
        let (t0, t1, r0, r1) = (
            context(sep, true, 0).unwrap(),
            context(sep, true, 1).unwrap(),
            context(sep, false, 0).unwrap(),
            context(sep, false, 1).unwrap(),
        );
        // SAFETY: open objects.
        unsafe {
            assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
            assert_eq!(bind(&mut (*t0).fid, &mut (*cqs[0]).fid, FI_TRANSMIT), 0);
            assert_eq!(bind(&mut (*t1).fid, &mut (*cqs[1]).fid, FI_TRANSMIT), 0);
            assert_eq!(bind(&mut (*r0).fid, &mut (*cqs[2]).fid, FI_RECV), 0);
            assert_eq!(bind(&mut (*r1).fid, &mut (*cqs[3]).fid, FI_RECV), 0);
        }
        // The endpoint goes on the NIC with t1, which fills the completion ring of index 1
        // that r1's close then drains: the close takes a while.
        assert_eq!(enable(t1), 0);
        let me = insert(av, &name_of(sep.cast()));
        while send_to(t1, b"to nobody yet", me, 1) == 0 {}
        let closing = Shared(r1);
        let start = std::sync::Arc::new(std::sync::Barrier::new(2));
        let go = start.clone();
        let closer = std::thread::spawn(move || {
            go.wait();
            // SAFETY: an open context, closed once, on this thread only.
            unsafe { close(&mut (*closing.get()).fid) }
        });
        start.wait();
        let ret = enable(sep);
        assert_eq!(closer.join().unwrap(), 0);
        if ret != 0 {
            failed.push((round, ret));
        }
        // SAFETY: open objects, each closed once, contexts first.
        unsafe {
            close_all(&[
                &mut (*t0).fid,
                &mut (*t1).fid,
                &mut (*r0).fid,
                &mut (*sep).fid,
            ]);
        }
    }
    assert!(
        failed.is_empty(),
        "fi_enable(sep) failed beside a context's fi_close: {failed:?}"
    );
    // SAFETY: open objects, each closed once.
    unsafe {
        close_all(&[
            &mut (*cqs[0]).fid,
            &mut (*cqs[1]).fid,
            &mut (*cqs[2]).fid,
            &mut (*cqs[3]).fid,
            &mut (*av).fid,
        ]);
    }
}

/// Hints asking an endpoint more contexts than they ask the domain to allow an endpoint
/// (`ep_attr->tx_ctx_cnt` above `domain_attr->max_ep_tx_ctx`, or `rx_ctx_cnt` above
/// `max_ep_rx_ctx`) are `-FI_ENODATA`: no answer holds both. And `fi_scalable_ep` keeps to
/// the transmit contexts per endpoint of the domain it is opened on, as to its receive ones.
#[test]
fn an_endpoint_gets_no_more_contexts_than_its_domain_allows_an_endpoint() {
    for (tx, max_tx, rx, max_rx) in [(4, 2, 1, 0), (1, 0, 4, 2), (2, 1, 2, 2)] {
        let answer = answer_to(
            |ep, d| {
                (ep.tx_ctx_cnt, ep.rx_ctx_cnt) = (tx, rx);
                (d.max_ep_tx_ctx, d.max_ep_rx_ctx) = (max_tx, max_rx);
            },
            |d| (d.max_ep_tx_ctx, d.max_ep_rx_ctx),
        );
        assert_eq!(
            answer,
            Err(ENODATA),
            "tx_ctx_cnt {tx} of max_ep_tx_ctx {max_tx}, rx_ctx_cnt {rx} of {max_rx}"
        );
    }
    let answer = answer_to(
        |ep, d| {
            (ep.tx_ctx_cnt, ep.rx_ctx_cnt) = (2, 2);
            (d.max_ep_tx_ctx, d.max_ep_rx_ctx) = (2, 2);
        },
        |d| (d.max_ep_tx_ctx, d.max_ep_rx_ctx),
    );
    assert_eq!(answer, Ok((2, 2)));
    // A domain of one transmit context per endpoint.
    let hints = sep_hints(1, 2);
    // SAFETY: the hints' own domain_attr.
    unsafe { (*hints.info.domain_attr).max_ep_tx_ctx = 1 };
    let open = Open::with_hints(&hints);
    // SAFETY: the provider's own info, restored after.
    unsafe {
        let ep_attr = &mut *(*open.info).ep_attr;
        ep_attr.tx_ctx_cnt = 2;
        assert_eq!(
            scalable_ep(&open).err(),
            Some(EINVAL),
            "two transmit contexts"
        );
        ep_attr.tx_ctx_cnt = 1;
    }
    let sep = scalable_ep(&open).expect("one transmit context");
    // SAFETY: open, closed once.
    assert_eq!(unsafe { close(&mut (*sep).fid) }, 0);
}

/// `FI_NAMED_RX_CTX` is a primary capability (fi_getinfo(3)): hints that name capabilities
/// get it only when they name it, as they get `FI_MSG` and `FI_TAGGED` with no primary
/// capability named.
#[test]
fn the_answer_names_receive_contexts_only_for_hints_that_ask_it() {
    // SAFETY: the provider's answers, read, then freed once.
    let caps = |hint: u64| unsafe {
        let info = getinfo(None, None, 0, Some(&Hints::new(hint, FI_FORMAT_UNSPEC))).unwrap();
        let caps = (*info).caps;
        uet_fi::info::free_info(info);
        caps
    };
    for hint in [
        FI_SOURCE_CAP,
        FI_SEND,
        FI_RECV | FI_SOURCE_CAP,
        FI_MSG,
        FI_TAGGED,
    ] {
        let got = caps(hint);
        assert_eq!(
            got & FI_NAMED_RX_CTX,
            0,
            "caps {got:#x} answering {hint:#x}"
        );
        assert_ne!(
            got & (FI_MSG | FI_TAGGED),
            0,
            "caps {got:#x} answering {hint:#x}"
        );
    }
    for hint in [FI_NAMED_RX_CTX, FI_MSG | FI_NAMED_RX_CTX] {
        let got = caps(hint);
        assert_ne!(
            got & FI_NAMED_RX_CTX,
            0,
            "caps {got:#x} answering {hint:#x}"
        );
    }
}

/// `FI_NAMED_RX_CTX` is a transmit capability (fi_endpoint(3)): hints' `tx_attr` may ask
/// it of `FI_EP_RDM` (the others have one receive context), the answer's `tx_attr` carries
/// it, and `fi_tx_context` takes those attributes.
#[test]
fn a_transmit_context_asks_for_and_gets_named_receive_contexts() {
    let hints = sep_hints(2, 4);
    // SAFETY: the hints' own tx_attr.
    unsafe { (*hints.info.tx_attr).caps = FI_MSG | FI_SEND | FI_NAMED_RX_CTX };
    let open = Open::with_hints(&hints);
    // SAFETY: the provider's own answer.
    let tx_caps = unsafe { (*(*open.info).tx_attr).caps };
    assert_eq!(tx_caps & FI_NAMED_RX_CTX, FI_NAMED_RX_CTX, "{tx_caps:#x}");
    let sep = scalable_ep(&open).unwrap();
    // SAFETY: a plain-data structure.
    let mut attr: FiTxAttr = unsafe { core::mem::zeroed() };
    attr.caps = FI_MSG | FI_SEND | FI_NAMED_RX_CTX;
    let mut ctx: *mut FidEp = null_mut();
    // SAFETY: an open scalable endpoint; valid attributes and out pointer.
    let ret = unsafe { ((*(*sep).ops).tx_ctx)(sep, 1, &mut attr, &mut ctx, null_mut()) };
    assert_eq!(ret, 0, "fi_tx_context with FI_NAMED_RX_CTX");
    assert_eq!(attr.caps & FI_NAMED_RX_CTX, FI_NAMED_RX_CTX);
    // SAFETY: open objects, each closed once, the context first.
    unsafe { close_all(&[&mut (*ctx).fid, &mut (*sep).fid]) };
    for ep_type in [FI_EP_DGRAM, FI_EP_MSG] {
        let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
        // SAFETY: the hints' own attributes.
        unsafe {
            (*hints.info.ep_attr).ep_type = ep_type;
            (*hints.info.tx_attr).caps = FI_MSG | FI_NAMED_RX_CTX;
        }
        assert_eq!(
            getinfo(None, None, 0, Some(&hints)).err(),
            Some(ENODATA),
            "type {ep_type}"
        );
    }
}

/// `fi_cancel` on `ep` of the operation posted with `context`.
fn cancel(ep: *mut FidEp, context: usize) -> isize {
    // SAFETY: an open endpoint (or context, or scalable endpoint) and its operations.
    unsafe { ((*(*ep).ops).cancel)(&mut (*ep).fid, context as _) }
}

#[test]
fn fi_cancel_of_a_posted_receive_reports_ecanceled_and_the_next_message_takes_the_next_receive() {
    // Peer 1's receives are counted by a counter.
    let pair = Pair::with_counters(0, FI_WAIT_UNSPEC, |_| {}, 1, [&[], &[(0, FI_RECV)]]);
    let rx_cntr = pair.cntrs[0];
    let mut rbufs = [[0xEEu8; 8]; 2];
    let first = rbufs[0].as_ptr();
    for (n, rbuf) in rbufs.iter_mut().enumerate() {
        // SAFETY: the buffers outlive their completions, read below.
        assert_eq!(unsafe { pair.post_recv(1, rbuf, 10 + n) }, 0);
    }
    assert_eq!(cancel(pair.p[1].ep, 10), 0, "fi_cancel of a posted receive");
    assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair
        .readerr(1)
        .expect("the cancelled receive's error entry");
    assert_eq!(e.err, FiErrno::FI_ECANCELED.get() as c_int);
    assert_eq!(e.op_context as usize, 10);
    assert_eq!((e.len, e.olen), (0, 0));
    assert_eq!(e.flags, FI_RECV | FI_MSG);
    assert_eq!(e.buf.cast_const().cast::<u8>(), first);
    assert_eq!(cntr_readerr(rx_cntr), 1, "counted as an error");
    assert_eq!(cntr_read(rx_cntr), 0);
    // Once cancelled it is no longer posted; unknown contexts and sends are not found.
    assert_eq!(cancel(pair.p[1].ep, 10), neg(FiErrno::FI_ENOENT));
    assert_eq!(cancel(pair.p[1].ep, 99), neg(FiErrno::FI_ENOENT));
    assert_eq!(pair.send(0, b"hello", 1), 0);
    assert_eq!(cancel(pair.p[0].ep, 1), neg(FiErrno::FI_ENOENT), "a send");
    let got = pair.wait(1).expect("the message");
    assert_eq!((got.op_context as usize, got.len), (11, 5));
    assert_eq!(&rbufs[1][..5], b"hello");
    assert_eq!(rbufs[0], [0xEE; 8], "the cancelled buffer is untouched");
    assert_eq!(cntr_read(rx_cntr), 1);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(1));
    // A completed receive is not found either.
    assert_eq!(cancel(pair.p[1].ep, 11), neg(FiErrno::FI_ENOENT));
}

#[test]
fn fi_cancel_of_a_tagged_receive_leaves_the_message_to_the_next_matching_one() {
    let pair = Pair::new(0);
    let mut rbufs = [[0xEEu8; 8]; 2];
    // SAFETY: open endpoints; the buffers outlive their completions, read below.
    unsafe {
        for (n, rbuf) in rbufs.iter_mut().enumerate() {
            assert_eq!(post(pair.p[1].ep, rbuf, Some(0x77), 20 + n), 0);
        }
    }
    assert_eq!(cancel(pair.p[1].ep, 20), 0);
    assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair
        .readerr(1)
        .expect("the cancelled receive's error entry");
    assert_eq!(e.err, FiErrno::FI_ECANCELED.get() as c_int);
    assert_eq!((e.op_context as usize, e.flags), (20, FI_RECV | FI_TAGGED));
    assert_eq!(tsend(pair.p[0].ep, b"tag", pair.p[1].addr, 0x77, 2), 0);
    let got = pair.wait(1).expect("the tagged message");
    // A CQ of FI_CQ_FORMAT_DATA: no tag in the entry.
    assert_eq!((got.op_context as usize, got.len), (21, 3));
    assert_eq!(got.flags & FI_TAGGED, FI_TAGGED);
    assert_eq!(&rbufs[1][..3], b"tag");
    assert_eq!(rbufs[0], [0xEE; 8]);
}

/// A cancelled tagged receive took no message: its error entry reports the tag it was
/// posted with (whatever its ignore mask), its context, `FI_RECV | FI_TAGGED`, its buffer,
/// and no length, data or overrun, as fi_cq(3) defines the fields.
#[test]
fn a_cancelled_tagged_receives_error_entry_reports_the_tag_it_was_posted_with() {
    let pair = Pair::new(0);
    let mut rbuf = [0xEEu8; 8];
    let tag = 0x0123_4567_89ab_cdef;
    // SAFETY: an open endpoint; the buffer outlives its completion, read below.
    let posted = unsafe {
        ((*(*pair.p[1].ep).tagged).recv)(
            pair.p[1].ep,
            rbuf.as_mut_ptr().cast(),
            rbuf.len(),
            null_mut(),
            u64::MAX,
            tag,
            0xffff,
            40 as _,
        )
    };
    assert_eq!(posted, 0);
    assert_eq!(cancel(pair.p[1].ep, 40), 0);
    assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair
        .readerr(1)
        .expect("the cancelled receive's error entry");
    assert_eq!(e.err, FiErrno::FI_ECANCELED.get() as c_int);
    assert_eq!((e.op_context as usize, e.flags), (40, FI_RECV | FI_TAGGED));
    assert_eq!((e.tag, e.len, e.olen, e.data), (tag, 0, 0, 0));
    assert_eq!(e.buf.cast_const().cast::<u8>(), rbuf.as_ptr());
    assert_eq!(rbuf, [0xEE; 8], "the buffer is untouched");
}

#[test]
fn fi_cancel_on_a_receive_context_cancels_its_receive_and_finds_nothing_elsewhere() {
    let s = Scalable::new();
    let (rx, rx_cq) = s.rx[1];
    let mut rbuf = [0u8; 8];
    // SAFETY: an open context; the buffer outlives its completion, read below.
    assert_eq!(unsafe { post(rx, &mut rbuf, None, 30) }, 0);
    assert_eq!(
        cancel(s.sep, 30),
        neg(FiErrno::FI_ENOENT),
        "the scalable endpoint"
    );
    assert_eq!(
        cancel(s.tx[1].0, 30),
        neg(FiErrno::FI_ENOENT),
        "a transmit context"
    );
    assert_eq!(
        cancel(s.rx[2].0, 30),
        neg(FiErrno::FI_ENOENT),
        "another one"
    );
    assert_eq!(cancel(rx, 30), 0);
    let e = cq_error(rx_cq);
    assert_eq!(e.err, FiErrno::FI_ECANCELED.get() as c_int);
    assert_eq!(e.op_context as usize, 30);
    assert_eq!(cancel(rx, 30), neg(FiErrno::FI_ENOENT));
}

/// fi_endpoint(3): an operation posted without a context cannot be cancelled, so
/// `fi_cancel(ep, NULL)` finds nothing and the receive posted with no context stays posted.
#[test]
fn fi_cancel_with_no_context_cancels_no_receive_posted_without_one() {
    let pair = Pair::new(0);
    let mut rbuf = [0xEEu8; 8];
    // SAFETY: the buffer outlives its completion, read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 0) }, 0);
    assert_eq!(cancel(pair.p[1].ep, 0), neg(FiErrno::FI_ENOENT));
    assert_eq!(pair.send(0, b"kept", 1), 0);
    let got = pair.wait(1).expect("the message reaches the receive");
    assert_eq!((got.op_context as usize, got.len), (0, 4));
    assert_eq!(&rbuf[..4], b"kept");
}

/// `fi_tx_context` and `fi_rx_context` refuse attributes asking a context for what its
/// direction does not serve (a receive capability of a transmit context, a send one of a
/// receive context, default flags it does not honour, an order), with `-FI_EINVAL` and no
/// context; the same index then opens with attributes it serves, which it gets back.
/// A context that does not open leaves the application's attributes as they were: only an
/// open context's come back filled (caps, mode, sizes, iov limits).
#[test]
fn a_context_that_does_not_open_leaves_its_attributes_untouched() {
    let open = Open::with_hints(&sep_hints(2, 4));
    let sep = scalable_ep(&open).unwrap();
    // SAFETY: a plain-data structure, valid all zero.
    let mut tx: FiTxAttr = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let mut rx: FiRxAttr = unsafe { core::mem::zeroed() };
    (tx.mode, tx.iov_limit) = (7, 99);
    (rx.mode, rx.iov_limit) = (7, 99);
    for index in [4, 64, -1] {
        let mut ctx: *mut FidEp = null_mut();
        // SAFETY: an open scalable endpoint; valid attributes and out pointer.
        let t = unsafe { ((*(*sep).ops).tx_ctx)(sep, index, &mut tx, &mut ctx, null_mut()) };
        assert_eq!((t, ctx.is_null()), (EINVAL, true), "tx index {index}");
        // SAFETY: as above.
        let r = unsafe { ((*(*sep).ops).rx_ctx)(sep, index, &mut rx, &mut ctx, null_mut()) };
        assert_eq!((r, ctx.is_null()), (EINVAL, true), "rx index {index}");
    }
    assert_eq!(
        (tx.caps, tx.mode, tx.iov_limit),
        (0, 7, 99),
        "tx attributes"
    );
    assert_eq!(
        (rx.caps, rx.mode, rx.iov_limit),
        (0, 7, 99),
        "rx attributes"
    );
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[&raw mut (*sep).fid]) };
}

#[test]
fn a_context_is_not_opened_with_attributes_its_direction_does_not_serve() {
    let open = Open::with_hints(&sep_hints(2, 4));
    let sep = scalable_ep(&open).unwrap();
    // SAFETY: a plain-data structure, valid all zero.
    let mut tx: FiTxAttr = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let mut rx: FiRxAttr = unsafe { core::mem::zeroed() };
    let open_tx = |a: &mut FiTxAttr| {
        let mut ctx: *mut FidEp = null_mut();
        // SAFETY: an open scalable endpoint; valid attributes and out pointer.
        let ret = unsafe { ((*(*sep).ops).tx_ctx)(sep, 0, a, &mut ctx, null_mut()) };
        (ret, ctx)
    };
    let open_rx = |a: &mut FiRxAttr| {
        let mut ctx: *mut FidEp = null_mut();
        // SAFETY: as above.
        let ret = unsafe { ((*(*sep).ops).rx_ctx)(sep, 0, a, &mut ctx, null_mut()) };
        (ret, ctx)
    };
    for (caps, op_flags, order) in [
        (FI_MSG | FI_RECV, 0, 0),
        (FI_MSG, 1 << 16, 0), // FI_MULTI_RECV
        (FI_MSG, 0, FI_ORDER_SAS),
    ] {
        (tx.caps, tx.op_flags, tx.msg_order) = (caps, op_flags, order);
        let (ret, ctx) = open_tx(&mut tx);
        assert_eq!(
            (ret, ctx.is_null()),
            (EINVAL, true),
            "tx {caps:#x} {op_flags:#x}"
        );
    }
    for (caps, op_flags, order) in [
        (FI_MSG | FI_SEND, 0, 0),
        (FI_MSG, FI_INJECT, 0),
        (FI_MSG, 0, FI_ORDER_SAS),
    ] {
        (rx.caps, rx.op_flags, rx.msg_order) = (caps, op_flags, order);
        let (ret, ctx) = open_rx(&mut rx);
        assert_eq!(
            (ret, ctx.is_null()),
            (EINVAL, true),
            "rx {caps:#x} {op_flags:#x}"
        );
    }
    (tx.caps, tx.op_flags, tx.msg_order) = (FI_MSG | FI_SEND, FI_COMPLETION, 0);
    (rx.caps, rx.op_flags, rx.msg_order) = (0, FI_COMPLETION, 0);
    let (t, tctx) = open_tx(&mut tx);
    let (r, rctx) = open_rx(&mut rx);
    assert_eq!((t, r), (0, 0));
    assert_eq!(tx.iov_limit, 4, "the attributes come back filled");
    assert_ne!(rx.caps & FI_RECV, 0, "caps 0: every receive capability");
    // SAFETY: ours, open, closed once (contexts first).
    unsafe {
        close_all(&[
            &raw mut (*tctx).fid,
            &raw mut (*rctx).fid,
            &raw mut (*sep).fid,
        ])
    };
}

/// fi_endpoint(3): "Providers will return the actual attributes assigned to the context
/// through the attr parameter". A context's inject size and queue sizes are the scalable
/// endpoint's, whatever the attributes ask: they come back as the `fi_info` has them, not as
/// asked.
#[test]
fn a_context_returns_its_actual_inject_and_queue_sizes_in_its_attributes() {
    let open = Open::with_hints(&sep_hints(2, 4));
    let sep = scalable_ep(&open).unwrap();
    // SAFETY: the provider's own info.
    let (inject_size, tx_size, rx_size) = unsafe {
        let (tx, rx) = (&*(*open.info).tx_attr, &*(*open.info).rx_attr);
        (tx.inject_size, tx.size, rx.size)
    };
    assert!(inject_size > 0 && tx_size > 0 && rx_size > 0);
    for (i, asked) in [0, usize::MAX].into_iter().enumerate() {
        // SAFETY: a plain-data structure, valid all zero.
        let mut tx: FiTxAttr = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        let mut rx: FiRxAttr = unsafe { core::mem::zeroed() };
        (tx.inject_size, tx.size, rx.size) = (asked, asked, asked);
        let (mut tctx, mut rctx): (*mut FidEp, *mut FidEp) = (null_mut(), null_mut());
        // SAFETY: an open scalable endpoint; valid attributes and out pointers.
        let (t, r) = unsafe {
            (
                ((*(*sep).ops).tx_ctx)(sep, i as c_int, &mut tx, &mut tctx, null_mut()),
                ((*(*sep).ops).rx_ctx)(sep, i as c_int, &mut rx, &mut rctx, null_mut()),
            )
        };
        assert_eq!((t, r), (0, 0));
        assert_eq!(
            (tx.inject_size, tx.size, rx.size),
            (inject_size, tx_size, rx_size),
            "asked {asked}"
        );
        // SAFETY: ours, open, closed once.
        unsafe { close_all(&[&raw mut (*tctx).fid, &raw mut (*rctx).fid]) };
    }
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[&raw mut (*sep).fid]) };
}

/// fi_msg(3) limits `FI_INJECT` to messages of at most `inject_size` bytes: an `fi_sendmsg`
/// or `fi_tsendmsg` with it and a longer message is `-FI_EMSGSIZE`, as `fi_inject` is, on
/// reliable and datagram endpoints alike, even with the transmit ring full; nothing is sent.
/// `inject_size` bytes are sent.
#[test]
fn a_sendmsg_with_fi_inject_longer_than_inject_size_is_refused_and_sends_nothing() {
    for ep_type in [FI_EP_RDM, FI_EP_DGRAM] {
        let pair = Pair::with_info(0, |i| {
            // SAFETY: the provider's own info, edited before the endpoints are opened.
            unsafe { (*i.ep_attr).ep_type = ep_type };
            if ep_type == FI_EP_DGRAM {
                as_dgram(i);
            }
        });
        // SAFETY: the info the endpoints were opened with.
        let inject_size = unsafe { (*(*pair._open.info).tx_attr).inject_size };
        assert!(inject_size > 0);
        let long = vec![7u8; inject_size + 1];
        let fits = vec![9u8; inject_size];
        let iov = |b: &[u8]| IoVec {
            iov_base: b.as_ptr().cast_mut().cast(),
            iov_len: b.len(),
        };
        let sendmsg = |iov: &IoVec, context: usize| {
            let msg = FiMsg {
                msg_iov: iov,
                desc: null_mut(),
                iov_count: 1,
                addr: pair.p[1].addr,
                context: context as _,
                data: 0,
            };
            // SAFETY: an open endpoint; the message is read during the call.
            unsafe { (pair.msg(0).sendmsg)(pair.p[0].ep, &msg, FI_INJECT | FI_COMPLETION) }
        };
        let tsendmsg = |iov: &IoVec, context: usize| {
            let msg = FiMsgTagged {
                msg_iov: iov,
                desc: null_mut(),
                iov_count: 1,
                addr: pair.p[1].addr,
                tag: 0x5,
                ignore: 0,
                context: context as _,
                data: 0,
            };
            // SAFETY: an open endpoint; the message is read during the call.
            unsafe {
                ((*(*pair.p[0].ep).tagged).sendmsg)(pair.p[0].ep, &msg, FI_INJECT | FI_COMPLETION)
            }
        };
        let (long_iov, fits_iov) = (iov(&long), iov(&fits));
        let emsgsize = neg(FiErrno::FI_EMSGSIZE);
        assert_eq!(sendmsg(&long_iov, 1), emsgsize, "type {ep_type}");
        assert_eq!(tsendmsg(&long_iov, 2), emsgsize, "type {ep_type}");
        // Nothing was sent: the receives posted now take the messages that fit.
        let mut rbuf = vec![0u8; inject_size + 1];
        let mut tbuf = vec![0u8; inject_size + 1];
        // SAFETY: the buffers outlive their completions, waited for below.
        unsafe {
            assert_eq!(pair.post_recv(1, &mut rbuf, 10), 0);
            assert_eq!(post(pair.p[1].ep, &mut tbuf, Some(0x5), 11), 0);
        }
        assert_eq!(sendmsg(&fits_iov, 3), 0, "type {ep_type}");
        assert_eq!(tsendmsg(&fits_iov, 4), 0, "type {ep_type}");
        let mut sent: Vec<usize> = (0..2)
            .map(|_| pair.wait(0).expect("a send completes").op_context as usize)
            .collect();
        sent.sort();
        assert_eq!(sent, [3, 4], "type {ep_type}: only the sends that fit");
        let mut got: Vec<(usize, usize)> = (0..2)
            .map(|_| {
                pair.wait(1)
                    .map(|e| (e.op_context as usize, e.len))
                    .expect("delivered")
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [(10, inject_size), (11, inject_size)],
            "type {ep_type}"
        );
        assert_eq!(&rbuf[..inject_size], &fits[..]);
        assert_eq!(&tbuf[..inject_size], &fits[..]);
        // With the transmit ring full, the answer is the same.
        let mut n = 0;
        while pair.send(0, b"x", 100 + n) == 0 {
            n += 1;
            assert!(n < 100_000, "the transmit ring never fills");
        }
        assert_eq!(pair.send(0, b"x", 1), neg(FiErrno::FI_EAGAIN));
        assert_eq!(sendmsg(&long_iov, 5), emsgsize, "type {ep_type}, ring full");
        assert_eq!(
            tsendmsg(&long_iov, 6),
            emsgsize,
            "type {ep_type}, ring full"
        );
    }
}

/// Endpoints closed before their counters and CQs were read: the operations the NIC had
/// completed reach them at the close, counted and reported (a receive's message in its
/// buffer), so nothing is lost to the close.
#[test]
fn closing_an_endpoint_counts_and_reports_what_the_nic_completed_before() {
    let open = Open::new(FI_MSG | FI_TAGGED | FI_SOURCE_CAP, FI_FORMAT_UNSPEC);
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let [tx, rx] = [0, 1].map(|_| open.cntr_open(FI_WAIT_UNSPEC).expect("fi_cntr_open"));
    let cqs = [0, 1].map(|_| open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC));
    let eps = [0, 1].map(|_| open.endpoint());
    for (ep, cq) in eps.into_iter().zip(cqs) {
        // SAFETY: open objects of the provider.
        unsafe {
            assert_eq!(bind(&mut (*ep).fid, &mut (*av).fid, 0), 0);
            assert_eq!(
                bind(&mut (*ep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
                0
            );
        }
    }
    assert_eq!(bind_cntr(eps[0], tx, FI_SEND), 0);
    assert_eq!(bind_cntr(eps[1], rx, FI_RECV), 0);
    for ep in eps {
        assert_eq!(enable(ep), 0);
    }
    let peer = insert(av, &name_of(eps[1].cast()));
    let mut rbufs = [[0u8; 8]; 2];
    for (n, rbuf) in rbufs.iter_mut().enumerate() {
        // SAFETY: an open endpoint; the buffers outlive their completions, read below.
        assert_eq!(unsafe { post(eps[1], rbuf, None, 10 + n) }, 0);
    }
    assert_eq!(send_to(eps[0], b"one", peer, 1), 0);
    // SAFETY: an open endpoint; the payload is copied at the call.
    let injected = unsafe { ((*(*eps[0]).msg).inject)(eps[0], b"two".as_ptr().cast(), 3, peer) };
    assert_eq!(injected, 0);
    // The simulated NIC completes all four at once; nothing has read them. Close both.
    for ep in eps {
        // SAFETY: ours, open, closed once.
        assert_eq!(unsafe { close(&mut (*ep).fid) }, 0);
    }
    assert_eq!(
        (cntr_read(tx), cntr_readerr(tx)),
        (2, 0),
        "fi_send and fi_inject"
    );
    assert_eq!((cntr_read(rx), cntr_readerr(rx)), (2, 0), "both receives");
    assert_eq!(cq_read(cqs[0]).map(|e| e.op_context as usize), Ok(1));
    assert_eq!(cq_read(cqs[0]).err(), Some(neg(FiErrno::FI_EAGAIN)));
    let got: Vec<(usize, usize)> = (0..2)
        .map(|_| cq_read(cqs[1]).map(|e| (e.op_context as usize, e.len)))
        .collect::<Result<_, _>>()
        .expect("the receives' completions");
    assert_eq!(got, [(10, 3), (11, 3)]);
    assert_eq!(cq_read(cqs[1]).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!((&rbufs[0][..3], &rbufs[1][..3]), (&b"one"[..], &b"two"[..]));
    // SAFETY: ours, open, no longer bound, closed once.
    unsafe {
        for cq in cqs {
            assert_eq!(close(&mut (*cq).fid), 0);
        }
        for c in [tx, rx] {
            assert_eq!(close(&mut (*c).fid), 0);
        }
        assert_eq!(close(&mut (*av).fid), 0);
    }
}

/// A scalable endpoint's contexts closed before their counters and CQs were read: each
/// context's close brings what the NIC completed on its ring set to its own direction's
/// counter and CQ first.
#[test]
fn closing_a_context_counts_and_reports_what_the_nic_completed_before() {
    let open = Open::with_hints(&sep_hints(2, 4));
    let mut attr = av_attr(16);
    attr.rx_ctx_bits = 2;
    let av = open.av_open(&mut attr).unwrap();
    let cqs = [0, 1].map(|_| open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC));
    let cntrs = [0, 1].map(|_| open.cntr_open(FI_WAIT_UNSPEC).unwrap());
    let sep = scalable_ep(&open).unwrap();
    let (t1, r2) = (
        context(sep, true, 1).unwrap(),
        context(sep, false, 2).unwrap(),
    );
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*t1).fid, &mut (*cqs[0]).fid, FI_TRANSMIT), 0);
        assert_eq!(bind(&mut (*r2).fid, &mut (*cqs[1]).fid, FI_RECV), 0);
        assert_eq!(bind(&mut (*t1).fid, &mut (*cntrs[0]).fid, FI_SEND), 0);
        assert_eq!(bind(&mut (*r2).fid, &mut (*cntrs[1]).fid, FI_RECV), 0);
    }
    assert_eq!(enable(sep), 0);
    let me = insert(av, &name_of(sep.cast()));
    let mut buf = [0u8; 16];
    // SAFETY: `buf` outlives the receive's completion, read below.
    unsafe { assert_eq!(post(r2, &mut buf, None, 7), 0) };
    assert_eq!(
        send_to(t1, b"to myself", uet_av::flags::fi_rx_addr(me, 2, 2), 3),
        0
    );
    // Nothing has read the rings: the contexts close first.
    // SAFETY: ours, open, closed once.
    unsafe {
        assert_eq!(close(&mut (*t1).fid), 0);
        assert_eq!(close(&mut (*r2).fid), 0);
    }
    assert_eq!((cntr_read(cntrs[0]), cntr_read(cntrs[1])), (1, 1));
    assert_eq!(cq_read(cqs[0]).map(|e| e.op_context as usize), Ok(3));
    assert_eq!(
        cq_read(cqs[1]).map(|e| (e.op_context as usize, e.len)),
        Ok((7, 9))
    );
    assert_eq!(&buf[..9], b"to myself");
    // SAFETY: open objects, each closed once.
    unsafe {
        close_all(&[
            &mut (*sep).fid,
            &mut (*cqs[0]).fid,
            &mut (*cqs[1]).fid,
            &mut (*cntrs[0]).fid,
            &mut (*cntrs[1]).fid,
            &mut (*av).fid,
        ]);
    }
}

/// `fi_eq_open` on `fabric` with `wait_obj` and `flags`: the queue, or the negative errno.
fn eq_open_on(fabric: *mut FidFabric, wait_obj: c_int, flags: u64) -> Result<*mut FidEq, c_int> {
    let mut eq = null_mut();
    let mut attr = FiEqAttr {
        size: 0,
        flags,
        wait_obj,
        signaling_vector: 0,
        wait_set: null_mut(),
    };
    // SAFETY: an open fabric; valid attributes and out pointer.
    let ret = unsafe { ((*(*fabric).ops).eq_open)(fabric, &mut attr, &mut eq, null_mut()) };
    if ret == 0 {
        Ok(eq)
    } else {
        Err(ret)
    }
}

/// `fi_control(fid, command, &int)`: its return and the `int` it wrote (-1 if none).
fn control_int(fid: *mut Fid, command: c_int) -> (c_int, c_int) {
    let mut value: c_int = -1;
    // SAFETY: an open object of the provider; an int for the answer.
    let ret = unsafe { ((*(*fid).ops).control)(fid, command, (&raw mut value).cast()) };
    (ret, value)
}

/// `fi_trywait(fabric, fids, count)`.
fn trywait_on(fabric: *mut FidFabric, fids: &[*mut Fid]) -> c_int {
    let mut fids = fids.to_vec();
    let count = c_int::try_from(fids.len()).unwrap();
    // SAFETY: an open fabric; open objects of it.
    unsafe { ((*(*fabric).ops).trywait)(fabric, fids.as_mut_ptr(), count) }
}

/// `fi_eq_write` of an `fi_eq_entry` whose `data` is `data`.
fn eq_write(eq: *mut FidEq, data: u64) -> isize {
    let entry = FiEqEntry {
        fid: null_mut(),
        context: null_mut(),
        data,
    };
    let len = core::mem::size_of::<FiEqEntry>();
    // SAFETY: an open EQ; the entry is read during the call.
    unsafe { ((*(*eq).ops).write)(eq, 0, (&raw const entry).cast(), len, 0) }
}

/// `fi_eq_read` of an `fi_eq_entry`: the event code and the entry, or the negative errno.
fn eq_read_entry(eq: *mut FidEq) -> Result<(u32, FiEqEntry), isize> {
    let mut event = 0u32;
    // SAFETY: a plain-data structure.
    let mut entry: FiEqEntry = unsafe { core::mem::zeroed() };
    let len = core::mem::size_of::<FiEqEntry>();
    // SAFETY: an open EQ; valid out pointers.
    let ret = unsafe { ((*(*eq).ops).read)(eq, &mut event, (&raw mut entry).cast(), len, 0) };
    if ret == len as isize {
        Ok((event, entry))
    } else {
        Err(ret)
    }
}

/// `FI_WAIT_FD` event queues: `fi_control(FI_GETWAIT)` gives a descriptor that polls readable
/// while an event waits — an event another thread writes wakes both a thread polling it and
/// one blocked in `fi_eq_sread` — and not once the queue is drained and `fi_trywait` returned
/// 0; `fi_trywait` is `-FI_EAGAIN` while an event waits. Queues of other wait objects answer
/// `fi_control` as CQs do, and `fi_trywait` refuses them.
#[test]
fn an_fi_wait_fd_eq_gives_a_descriptor_readable_while_an_event_waits() {
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    let fabric = open.fabric;
    let eq = eq_open_on(fabric, FI_WAIT_FD, uet_av::flags::FI_WRITE).expect("fi_eq_open");
    // SAFETY: `eq` is open; only the field's address is taken.
    let eq_fid = unsafe { &raw mut (*eq).fid };
    let (ret, fd) = control_int(eq_fid, FI_GETWAIT);
    assert_eq!(ret, 0, "fi_control(FI_GETWAIT)");
    assert!(fd >= 0);
    assert_eq!(control_int(eq_fid, FI_GETWAITOBJ), (0, FI_WAIT_FD));
    let again = ineg(FiErrno::FI_EAGAIN);

    assert_eq!(trywait_on(fabric, &[eq_fid]), 0);
    assert!(!fd_readable(fd, 0), "readable with nothing to read");
    for round in 0..3u64 {
        // A thread polling the descriptor and one blocked in fi_eq_sread, woken by two
        // events another thread writes.
        let poller = std::thread::spawn(move || fd_readable(fd, 5000));
        let shared = Shared(eq);
        let sreader = std::thread::spawn(move || {
            let mut event = 0u32;
            // SAFETY: a plain-data structure.
            let mut entry: FiEqEntry = unsafe { core::mem::zeroed() };
            let len = core::mem::size_of::<FiEqEntry>();
            let eq = shared.get();
            // SAFETY: an open, waitable EQ; valid out pointers.
            let ret = unsafe {
                ((*(*eq).ops).sread)(eq, &mut event, (&raw mut entry).cast(), len, 5000, 0)
            };
            (ret, entry.data)
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        let writer = std::thread::spawn(move || {
            [
                eq_write(shared.get(), 2 * round),
                eq_write(shared.get(), 2 * round + 1),
            ]
        });
        let len = core::mem::size_of::<FiEqEntry>() as isize;
        assert_eq!(writer.join().unwrap(), [len, len]);
        assert!(
            poller.join().unwrap(),
            "fi_eq_write left the descriptor unreadable"
        );
        let (ret, data) = sreader.join().unwrap();
        assert_eq!(
            (ret, data),
            (len, 2 * round),
            "fi_eq_sread beside the descriptor"
        );
        // One event is left: readable, and fi_trywait says to read it.
        assert!(fd_readable(fd, 0));
        assert_eq!(trywait_on(fabric, &[eq_fid]), again, "an event waits");
        assert!(
            fd_readable(fd, 0),
            "fi_trywait does not take the event's readiness"
        );
        let (_, entry) = eq_read_entry(eq).expect("the second event");
        assert_eq!(entry.data, 2 * round + 1);
        assert_eq!(eq_read_entry(eq).err(), Some(neg(FiErrno::FI_EAGAIN)));
        assert_eq!(trywait_on(fabric, &[eq_fid]), 0);
        assert!(!fd_readable(fd, 0), "readable after the queue was drained");
    }

    // Other wait objects: no descriptor; fi_trywait refuses them, and an EQ among CQs.
    let unspec = eq_open_on(fabric, FI_WAIT_UNSPEC, 0).unwrap();
    let none = eq_open_on(fabric, FI_WAIT_NONE, 0).unwrap();
    // SAFETY: open queues; only the fields' addresses are taken.
    let (unspec_fid, none_fid) = unsafe { (&raw mut (*unspec).fid, &raw mut (*none).fid) };
    let enodata = ineg(FiErrno::FI_ENODATA);
    assert_eq!(control_int(unspec_fid, FI_GETWAIT).0, enodata);
    assert_eq!(control_int(unspec_fid, FI_GETWAITOBJ), (0, FI_WAIT_UNSPEC));
    assert_eq!(control_int(none_fid, FI_GETWAITOBJ).0, enodata);
    assert_eq!(control_int(eq_fid, 1234).0, ineg(FiErrno::FI_ENOSYS));
    let inval = ineg(FiErrno::FI_EINVAL);
    assert_eq!(trywait_on(fabric, &[unspec_fid]), inval);
    assert_eq!(trywait_on(fabric, &[eq_fid, none_fid]), inval);
    let cq = open.cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD);
    // SAFETY: `cq` is open; only the field's address is taken.
    let cq_fid = unsafe { &raw mut (*cq).fid };
    assert_eq!(trywait_on(fabric, &[cq_fid, eq_fid]), 0);
    assert_eq!(eq_write(eq, 7), core::mem::size_of::<FiEqEntry>() as isize);
    assert_eq!(trywait_on(fabric, &[cq_fid, eq_fid]), again);
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[cq_fid, eq_fid, unspec_fid, none_fid]) };
}

/// fi_eq(3): `fi_control(FI_GETWAIT)` of a queue opened with `FI_WAIT_MUTEX_COND` gives its
/// `struct fi_mutex_cond`. An application that reads the queue under the mutex and, once
/// `fi_trywait` says it may, sleeps on the condition is woken, well before its own timeout,
/// by an event another thread writes, and by the completion of an `FI_EVENT` AV's insert
/// another thread makes.
#[test]
fn an_fi_wait_mutex_cond_eq_gives_a_mutex_and_condition_an_event_signals() {
    const FI_AV_COMPLETE: u32 = 5;
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let fabric = open.fabric;
    let plain = open.av_open(&mut av_attr(4)).unwrap();
    let addr = nobody(plain);
    let eq = eq_open_on(fabric, FI_WAIT_MUTEX_COND, uet_av::flags::FI_WRITE).expect("fi_eq_open");
    let mut attr = av_attr(4);
    attr.flags = uet_av::FI_EVENT;
    let av = open.av_open(&mut attr).unwrap();
    // SAFETY: open objects; only the fields' addresses are taken.
    let (eq_fid, av_fid) = unsafe { (&raw mut (*eq).fid, &raw mut (*av).fid) };
    // SAFETY: an open AV and EQ.
    assert_eq!(unsafe { ((*(*av).fid.ops).bind)(av_fid, eq_fid, 0) }, 0);
    let mut mc = FiMutexCond {
        mutex: null_mut(),
        cond: null_mut(),
    };
    // SAFETY: an open EQ; a struct fi_mutex_cond for the answer.
    let ret = unsafe { ((*(*eq_fid).ops).control)(eq_fid, FI_GETWAIT, (&raw mut mc).cast()) };
    assert_eq!(
        ret, 0,
        "fi_control(FI_GETWAIT) of an FI_WAIT_MUTEX_COND queue"
    );
    assert!(!mc.mutex.is_null() && !mc.cond.is_null());
    assert_eq!(control_int(eq_fid, FI_GETWAITOBJ), (0, FI_WAIT_MUTEX_COND));
    let again = ineg(FiErrno::FI_EAGAIN);
    for round in 0..4u64 {
        let (eq_s, av_s) = (Shared(eq), Shared(av));
        // Rounds 0 to 2: an event written; round 3: an insert.
        let other = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            if round < 3 {
                return eq_write(eq_s.get(), round);
            }
            let mut out: FiAddr = 0;
            let av = av_s.get();
            // SAFETY: an open AV; a valid address and out pointer; the context is a number.
            unsafe {
                ((*(*av).ops).insert)(av, addr.as_ptr().cast(), 1, &mut out, 0, 77 as *mut _)
                    as isize
            }
        });
        let start = std::time::Instant::now();
        // SAFETY: a timespec for the clock's answer.
        let mut until: libc::timespec = unsafe { core::mem::zeroed() };
        // SAFETY: a valid clock and out pointer.
        let clock = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut until) };
        assert_eq!(clock, 0);
        until.tv_sec += 5;
        // SAFETY: the queue's mutex, from FI_GETWAIT.
        assert_eq!(unsafe { libc::pthread_mutex_lock(mc.mutex) }, 0);
        let got = loop {
            match eq_read_entry(eq) {
                Ok((event, entry)) => break Ok((event, entry.context as usize, entry.data)),
                Err(e) if e == neg(FiErrno::FI_EAGAIN) => {}
                Err(e) => break Err(e),
            }
            match trywait_on(fabric, &[eq_fid]) {
                0 => {
                    // SAFETY: the queue's condition and mutex, the mutex held.
                    let r = unsafe { libc::pthread_cond_timedwait(mc.cond, mc.mutex, &until) };
                    if r == libc::ETIMEDOUT {
                        break Err(-(libc::ETIMEDOUT as isize));
                    }
                }
                r => assert_eq!(r, again, "fi_trywait"),
            }
        };
        // SAFETY: held by this thread.
        assert_eq!(unsafe { libc::pthread_mutex_unlock(mc.mutex) }, 0);
        let (want, ret) = if round < 3 {
            ((0, 0, round), core::mem::size_of::<FiEqEntry>() as isize)
        } else {
            ((FI_AV_COMPLETE, 77, 1), 0)
        };
        assert_eq!(got, Ok(want), "round {round}");
        assert!(
            start.elapsed() < std::time::Duration::from_secs(4),
            "round {round}: woken only by the timeout"
        );
        assert_eq!(other.join().unwrap(), ret, "round {round}");
    }
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[av_fid, eq_fid, &mut (*plain).fid]) };
}

/// `fi_control(FI_GETWAIT)` of an `FI_WAIT_MUTEX_COND` object: its mutex and condition.
fn mutex_cond_of(fid: *mut Fid) -> FiMutexCond {
    let mut mc = FiMutexCond {
        mutex: null_mut(),
        cond: null_mut(),
    };
    // SAFETY: an open object of the provider; a struct fi_mutex_cond for the answer.
    let ret = unsafe { ((*(*fid).ops).control)(fid, FI_GETWAIT, (&raw mut mc).cast()) };
    assert_eq!(
        ret, 0,
        "fi_control(FI_GETWAIT) of an FI_WAIT_MUTEX_COND object"
    );
    assert!(!mc.mutex.is_null() && !mc.cond.is_null());
    mc
}

/// What an application asleep on an `FI_WAIT_MUTEX_COND` object saw last ([`sleep_on_cond`]).
#[derive(Clone, Copy, PartialEq, Debug)]
enum CondSaw {
    /// Nothing yet: its first look.
    First,
    /// It woke from the condition.
    Woken,
    /// `fi_trywait` said to read first.
    TryAgain,
}

/// An application asleep on the condition of `fid` as fi_cq(3) and fi_cntr(3) say: under the
/// mutex, it `look`s at the object (told what it saw last) until that gives something,
/// calling `fi_trywait` each time it gives nothing and waiting on the condition when that
/// gives 0. `None` when a wait ran out: 5 s, a bound only so that a sleep without end fails.
fn sleep_on_cond<T>(
    fabric: *mut FidFabric,
    fid: *mut Fid,
    mc: &FiMutexCond,
    mut look: impl FnMut(CondSaw) -> Option<T>,
) -> Option<T> {
    // SAFETY: a timespec for the clock's answer.
    let mut until: libc::timespec = unsafe { core::mem::zeroed() };
    // SAFETY: a valid clock and out pointer.
    let clock = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut until) };
    assert_eq!(clock, 0);
    until.tv_sec += 5;
    // SAFETY: the object's mutex, from FI_GETWAIT.
    assert_eq!(unsafe { libc::pthread_mutex_lock(mc.mutex) }, 0);
    let mut saw = CondSaw::First;
    let got = loop {
        if let Some(got) = look(saw) {
            break Some(got);
        }
        match trywait_on(fabric, &[fid]) {
            0 => {
                // SAFETY: the object's condition and mutex, the mutex held.
                match unsafe { libc::pthread_cond_timedwait(mc.cond, mc.mutex, &until) } {
                    libc::ETIMEDOUT => break None,
                    r => assert_eq!(r, 0, "pthread_cond_timedwait"),
                }
                saw = CondSaw::Woken;
            }
            r => {
                assert_eq!(r, ineg(FiErrno::FI_EAGAIN), "fi_trywait");
                saw = CondSaw::TryAgain;
            }
        }
    };
    // SAFETY: held by this thread.
    assert_eq!(unsafe { libc::pthread_mutex_unlock(mc.mutex) }, 0);
    got
}

/// fi_cq(3): `fi_control(FI_GETWAIT)` of a CQ opened with `FI_WAIT_MUTEX_COND` gives its
/// `struct fi_mutex_cond`. An application that reads the CQ under the mutex and, once
/// `fi_trywait` says it may, sleeps on the condition is woken, well before its own timeout,
/// by a message the peer sends it, and by an `fi_cq_signal` of another thread.
#[test]
fn an_fi_wait_mutex_cond_cq_gives_a_mutex_and_condition_a_completion_signals() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let pair = Pair::with_wait_obj(FI_WAIT_MUTEX_COND);
    let fabric = pair._open.fabric;
    let cq = pair.p[1].cq;
    // SAFETY: an open CQ; only the field's address is taken.
    let fid = unsafe { &raw mut (*cq).fid };
    let mc = mutex_cond_of(fid);
    assert_eq!(control_int(fid, FI_GETWAITOBJ), (0, FI_WAIT_MUTEX_COND));
    let mut rbufs = [[0u8; 8]; 3];
    // Rounds 0 to 2: a message from the peer; round 3: fi_cq_signal.
    for round in 0..4usize {
        if let Some(rbuf) = rbufs.get_mut(round) {
            // SAFETY: the buffer outlives its completion, read below.
            assert_eq!(unsafe { pair.post_recv(1, rbuf, round + 1) }, 0);
        }
        let (ep, to, cq_s) = (Shared(pair.p[0].ep), pair.p[1].addr, Shared(cq));
        let sent = std::sync::Arc::new(AtomicBool::new(false));
        let other = std::thread::spawn({
            let sent = std::sync::Arc::clone(&sent);
            move || {
                std::thread::sleep(Duration::from_millis(50));
                sent.store(true, Ordering::SeqCst);
                if round < 3 {
                    return send_to(ep.get(), b"wake", to, 0);
                }
                let cq = cq_s.get();
                // SAFETY: an open CQ with a wait object.
                unsafe { ((*(*cq).ops).signal)(cq) as isize }
            }
        });
        let start = Instant::now();
        let got = sleep_on_cond(fabric, fid, &mc, |saw| {
            if round == 3 {
                // The signal leaves nothing to read: it is seen as a wakeup, or as fi_trywait
                // saying to read.
                return (saw != CondSaw::First && sent.load(Ordering::SeqCst)).then_some(0);
            }
            match pair.read(1) {
                Ok(e) => Some(e.op_context as usize),
                Err(e) => {
                    assert_eq!(e, neg(FiErrno::FI_EAGAIN), "round {round}: fi_cq_read");
                    None
                }
            }
        });
        let want = if round < 3 { round + 1 } else { 0 };
        assert_eq!(got, Some(want), "round {round}");
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "round {round}: woken only by the timeout"
        );
        assert_eq!(other.join().unwrap(), 0, "round {round}");
    }
    assert_eq!(&rbufs.map(|b| b[0]), b"www");
}

/// fi_cntr(3): `fi_control(FI_GETWAIT)` of a counter opened with `FI_WAIT_MUTEX_COND` gives
/// its `struct fi_mutex_cond`. An application that reads the counter under the mutex and,
/// once `fi_trywait` says it may, sleeps on the condition is woken, well before its own
/// timeout, by a receive completing on the bound endpoint (which the counter counts), and by
/// an `fi_cntr_add` and an `fi_cntr_adderr` of another thread.
#[test]
fn an_fi_wait_mutex_cond_counter_gives_a_mutex_and_condition_a_count_signals() {
    use std::time::{Duration, Instant};
    let pair = Pair::with_counters(0, FI_WAIT_MUTEX_COND, |_| {}, 1, [&[], &[(0, FI_RECV)]]);
    let rx = pair.cntrs[0];
    let fabric = pair._open.fabric;
    // SAFETY: an open counter; only the field's address is taken.
    let fid = unsafe { &raw mut (*rx).fid };
    let mc = mutex_cond_of(fid);
    assert_eq!(control_int(fid, FI_GETWAITOBJ), (0, FI_WAIT_MUTEX_COND));
    let mut rbufs = [[0u8; 8]; 3];
    // Rounds 0 to 2: a receive counted; round 3: fi_cntr_add; round 4: fi_cntr_adderr.
    for round in 0..5usize {
        if let Some(rbuf) = rbufs.get_mut(round) {
            // SAFETY: the buffer outlives its completion, counted below.
            assert_eq!(unsafe { pair.post_recv(1, rbuf, round + 1) }, 0);
        }
        let (ep, to, c) = (Shared(pair.p[0].ep), pair.p[1].addr, Shared(rx));
        let other = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let c = c.get();
            match round {
                0..=2 => send_to(ep.get(), b"counted", to, 0),
                // SAFETY: an open counter.
                3 => unsafe { (cntr_ops(c).add)(c, 10) as isize },
                // SAFETY: an open counter.
                _ => unsafe { (cntr_ops(c).adderr)(c, 1) as isize },
            }
        });
        let want = match round {
            0..=2 => (round as u64 + 1, 0),
            3 => (13, 0),
            _ => (13, 1),
        };
        let start = Instant::now();
        let got = sleep_on_cond(fabric, fid, &mc, |_| {
            let now = (cntr_read(rx), cntr_readerr(rx));
            (now == want).then_some(now)
        });
        assert_eq!(got, Some(want), "round {round}");
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "round {round}: woken only by the timeout"
        );
        assert_eq!(other.join().unwrap(), 0, "round {round}");
    }
    assert_eq!(&rbufs.map(|b| b[0]), b"ccc");
}

/// The descriptors open in this process.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Closing an `FI_WAIT_FD` queue closes its descriptor, also while a thread waits in
/// `fi_eq_sread` (which wakes with `-FI_EBADF`): opening and closing many leaks none.
/// (Counted over the whole process: the test runs in a process of its own.)
#[test]
fn closing_fi_wait_fd_eqs_leaks_no_descriptor() {
    if !common::in_own_process("closing_fi_wait_fd_eqs_leaks_no_descriptor") {
        return;
    }
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    let before = open_descriptors();
    let eqs: Vec<_> = (0..32)
        .map(|_| eq_open_on(open.fabric, FI_WAIT_FD, 0).unwrap())
        .collect();
    assert_eq!(open_descriptors(), before + 32, "one descriptor per queue");
    for (k, eq) in eqs.into_iter().enumerate() {
        // SAFETY: `eq` is open; only the field's address is taken.
        let eq_fid = unsafe { &raw mut (*eq).fid };
        let (_, fd) = control_int(eq_fid, FI_GETWAIT);
        if k % 4 != 0 {
            // SAFETY: ours, open, closed once.
            assert_eq!(unsafe { close(eq_fid) }, 0);
            continue;
        }
        let shared = Shared(eq);
        let sreader = std::thread::spawn(move || {
            let mut event = 0u32;
            // SAFETY: a plain-data structure.
            let mut entry: FiEqEntry = unsafe { core::mem::zeroed() };
            let len = core::mem::size_of::<FiEqEntry>();
            let eq = shared.get();
            // SAFETY: an open, waitable EQ; valid out pointers.
            unsafe { ((*(*eq).ops).sread)(eq, &mut event, (&raw mut entry).cast(), len, 5000, 0) }
        });
        // Long enough for the thread to be waiting (it must not call in after the close).
        std::thread::sleep(std::time::Duration::from_millis(50));
        // SAFETY: ours, open, closed once; the waiting thread holds the queue of its own.
        assert_eq!(unsafe { close(eq_fid) }, 0);
        // SAFETY: F_GETFD reads only the descriptor's flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(
            flags, -1,
            "the descriptor outlived fi_close, held by the waiting thread"
        );
        assert_eq!(sreader.join().unwrap(), neg(FiErrno::FI_EBADF));
    }
    assert_eq!(
        open_descriptors(),
        before,
        "a closed queue's descriptor stayed open"
    );
}

/// An `FI_WAIT_FD` listener's queue wakes a thread asleep on its descriptor when a
/// connection request arrives (posted by the listener's progress thread).
#[test]
fn an_fi_wait_fd_eq_wakes_for_a_connection_request() {
    let m = Msg::new();
    let fabric = m.open.fabric;
    let eq_l = eq_open_on(fabric, FI_WAIT_FD, 0).expect("fi_eq_open");
    let eq_c = m.eq();
    let pep = m.listen(eq_l);
    // SAFETY: open objects; only the fields' addresses are taken.
    let (pep_fid, eq_l_fid) = unsafe { (&raw mut (*pep).fid, &raw mut (*eq_l).fid) };
    let (_, fd) = control_int(eq_l_fid, FI_GETWAIT);
    assert_eq!(trywait_on(fabric, &[eq_l_fid]), 0);
    assert!(!fd_readable(fd, 0));
    let poller = std::thread::spawn(move || fd_readable(fd, 5000));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (client, cq_c) = m.ep(m.open.info, eq_c);
    assert_eq!(connect(client, &name_of(pep_fid), b"knock"), 0);
    assert!(
        poller.join().unwrap(),
        "a connection request left the descriptor unreadable"
    );
    assert_eq!(trywait_on(fabric, &[eq_l_fid]), ineg(FiErrno::FI_EAGAIN));
    let req = eq_event(eq_l, 256, 0).expect("FI_CONNREQ");
    assert_eq!(
        (req.event, req.fid, req.data.as_slice()),
        (FI_CONNREQ, pep_fid, &b"knock"[..])
    );
    assert_eq!(trywait_on(fabric, &[eq_l_fid]), 0);
    assert!(!fd_readable(fd, 0), "readable after the request was read");
    // SAFETY: an open pep; the event's handle; ours, open, closed once.
    unsafe {
        assert_eq!(
            ((*(*pep).cm).reject)(pep.cast(), (*req.info).handle, null(), 0),
            0
        );
        let _ = wait_eq_error(eq_c);
        uet_fi::info::free_info(req.info);
        close_all(&[
            pep_fid,
            &mut (*client).fid,
            &mut (*cq_c).fid,
            eq_l_fid,
            &mut (*eq_c).fid,
        ]);
    }
}

/// A datagram longer than the MTU (`max_msg_size` of `FI_EP_DGRAM`) is `-FI_EMSGSIZE`
/// whatever the state of the endpoint's rings and buffers: with its transmit, receive and
/// tagged receive rings all full, the answer is the same as with them empty, not
/// `-FI_EAGAIN`.
#[test]
fn a_datagram_longer_than_the_mtu_is_refused_as_such_with_every_ring_full() {
    let pair = Pair::with_info(0, as_dgram);
    // SAFETY: the info the endpoints were opened with.
    let mtu = unsafe { (*(*pair._open.info).ep_attr).max_msg_size };
    let long = vec![1u8; mtu + 1];
    let emsgsize = neg(FiErrno::FI_EMSGSIZE);
    assert_eq!(pair.send(0, &long, 1), emsgsize, "rings empty");
    let eagain = neg(FiErrno::FI_EAGAIN);
    let mut n = 0;
    while pair.send(0, b"x", 100 + n) == 0 {
        n += 1;
        assert!(n < 100_000, "the transmit ring never fills");
    }
    assert_eq!(pair.send(0, b"x", 2), eagain);
    assert_eq!(pair.send(0, &long, 3), emsgsize, "transmit ring full");
    let mut bufs = vec![[0u8; 8]; 100_000];
    let mut slots = bufs.iter_mut();
    for tag in [None, Some(1)] {
        let posted = slots.by_ref().enumerate().find_map(|(k, b)| {
            // SAFETY: an open endpoint; the buffers outlive the pair, which closes first.
            let r = unsafe { post(pair.p[0].ep, b, tag, 1000 + k) };
            (r != 0).then_some(r)
        });
        assert_eq!(posted, Some(eagain), "the {tag:?} receive ring fills");
        assert_eq!(
            pair.send(0, &long, 4),
            emsgsize,
            "{tag:?} receive ring full too"
        );
    }
    drop(pair);
    drop(bufs);
}

/// An `FI_EVENT` AV's insert made by another thread wakes a thread asleep on its queue's
/// descriptor; `fi_trywait` is `-FI_EAGAIN` until the insert's events were read, and the
/// descriptor is unreadable once they were. An insert that fails reports an error entry,
/// which makes the descriptor readable too.
#[test]
fn an_fi_wait_fd_eq_wakes_for_an_fi_event_av_insert_from_another_thread() {
    const FI_AV_COMPLETE: u32 = 5;
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let fabric = open.fabric;
    let plain = open.av_open(&mut av_attr(4)).unwrap();
    let addr = nobody(plain);
    let eq = eq_open_on(fabric, FI_WAIT_FD, 0).expect("fi_eq_open");
    let mut attr = av_attr(4);
    attr.flags = uet_av::FI_EVENT;
    let av = open.av_open(&mut attr).unwrap();
    // SAFETY: open objects; only the fields' addresses are taken.
    let (eq_fid, av_fid) = unsafe { (&raw mut (*eq).fid, &raw mut (*av).fid) };
    // SAFETY: an open AV and EQ.
    assert_eq!(unsafe { ((*(*av).fid.ops).bind)(av_fid, eq_fid, 0) }, 0);
    let (_, fd) = control_int(eq_fid, FI_GETWAIT);
    let again = ineg(FiErrno::FI_EAGAIN);
    for (round, address) in [addr, [0u8; 32]].into_iter().enumerate() {
        assert_eq!(trywait_on(fabric, &[eq_fid]), 0);
        assert!(!fd_readable(fd, 0));
        let shared = Shared(av);
        let inserter = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut out: FiAddr = 0;
            let av = shared.get();
            // SAFETY: an open AV; a valid address and out pointer; the context is a number.
            unsafe {
                ((*(*av).ops).insert)(
                    av,
                    address.as_ptr().cast(),
                    1,
                    &mut out,
                    0,
                    (round + 40) as *mut _,
                )
            }
        });
        assert!(
            fd_readable(fd, 5000),
            "an insert left the descriptor unreadable"
        );
        assert_eq!(inserter.join().unwrap(), 0);
        // The application's loop: try to sleep; while told to read, read.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let (mut errors, mut complete) = (0, None);
        while trywait_on(fabric, &[eq_fid]) == again {
            assert!(
                std::time::Instant::now() < end,
                "fi_trywait kept saying to read"
            );
            match eq_read_entry(eq) {
                Ok((event, entry)) => {
                    assert_eq!(
                        (event, entry.context as usize),
                        (FI_AV_COMPLETE, round + 40)
                    );
                    complete = Some(entry.data);
                }
                Err(e) if e == neg(FiErrno::FI_EAVAIL) => {
                    let (err, _) = eq_error(eq);
                    assert_eq!(err.context as usize, round + 40);
                    errors += 1;
                }
                Err(e) => assert_eq!(e, neg(FiErrno::FI_EAGAIN)),
            }
        }
        let inserted = if round == 0 { 1 } else { 0 };
        assert_eq!(
            (complete, errors),
            (Some(inserted), 1 - inserted),
            "round {round}"
        );
        assert!(
            !fd_readable(fd, 0),
            "readable after the insert's events were read"
        );
    }
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[av_fid, eq_fid, &mut (*plain).fid]) };
}

/// `FI_WAIT_FD` counters: `fi_control(FI_GETWAIT)` gives a descriptor that, once `fi_trywait`
/// returned 0, polls readable when a receive completes on the bound endpoint (and
/// `fi_cntr_read` then shows it) or another thread changes the counter; `fi_trywait` is
/// `-FI_EAGAIN` once after each change. Counters of other wait objects answer `fi_control`
/// as CQs do, and `fi_trywait` refuses them.
#[test]
fn an_fi_wait_fd_counter_gives_a_descriptor_readable_when_the_counter_may_have_changed() {
    let pair = Pair::with_counters(0, FI_WAIT_FD, |_| {}, 1, [&[], &[(0, FI_RECV)]]);
    let rx = pair.cntrs[0];
    let fabric = pair._open.fabric;
    // SAFETY: `rx` is open; only the field's address is taken.
    let fid = unsafe { &raw mut (*rx).fid };
    let (ret, fd) = control_int(fid, FI_GETWAIT);
    assert_eq!(ret, 0, "fi_control(FI_GETWAIT)");
    assert!(fd >= 0);
    assert_eq!(control_int(fid, FI_GETWAITOBJ), (0, FI_WAIT_FD));
    let again = ineg(FiErrno::FI_EAGAIN);
    assert_eq!(trywait_on(fabric, &[fid]), 0);
    assert!(!fd_readable(fd, 0), "readable with nothing counted");

    let mut rbufs = [[0u8; 8]; 3];
    for (round, rbuf) in (1..).zip(rbufs.iter_mut()) {
        // SAFETY: the buffer outlives its completion, counted below.
        assert_eq!(unsafe { pair.post_recv(1, rbuf, round as usize) }, 0);
        let poller = std::thread::spawn(move || fd_readable(fd, 5000));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(pair.send(0, b"counted", 0), 0);
        assert!(
            poller.join().unwrap(),
            "a receive completed and the descriptor stayed unreadable"
        );
        assert_eq!(cntr_read(rx), round, "the count after the wakeup");
        assert_eq!(trywait_on(fabric, &[fid]), again, "the counter changed");
        assert_eq!(trywait_on(fabric, &[fid]), 0);
        assert!(!fd_readable(fd, 0), "readable after the change was seen");
    }
    assert_eq!(&rbufs.map(|b| b[0]), b"ccc");

    // Another thread's changes: fi_cntr_add, fi_cntr_seterr.
    let shared = Shared(rx);
    for (k, change) in [0usize, 1].into_iter().enumerate() {
        let changer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let c = shared.get();
            // SAFETY: an open counter.
            unsafe {
                match change {
                    0 => (cntr_ops(c).add)(c, 10),
                    _ => (cntr_ops(c).seterr)(c, 4),
                }
            }
        });
        assert!(
            fd_readable(fd, 5000),
            "change {k} left the descriptor unreadable"
        );
        assert_eq!(changer.join().unwrap(), 0);
        assert_eq!(trywait_on(fabric, &[fid]), again);
        assert_eq!(trywait_on(fabric, &[fid]), 0);
        assert!(!fd_readable(fd, 0));
    }
    assert_eq!((cntr_read(rx), cntr_readerr(rx)), (13, 4));
    // fi_trywait takes the counter beside the CQs.
    // SAFETY: open CQs; only the fields' addresses are taken.
    let cqs = unsafe { [&raw mut (*pair.p[0].cq).fid, &raw mut (*pair.p[1].cq).fid] };
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while trywait_on(fabric, &[cqs[0], cqs[1], fid]) == again {
        assert!(
            std::time::Instant::now() < end,
            "fi_trywait kept saying to read"
        );
        let _ = (pair.read(0), pair.read(1));
    }
    assert_eq!(trywait_on(fabric, &[cqs[0], cqs[1], fid]), 0);

    // Other wait objects: no descriptor; fi_trywait refuses them.
    let open = &pair._open;
    let enodata = ineg(FiErrno::FI_ENODATA);
    let unspec = open.cntr_open(FI_WAIT_UNSPEC).unwrap();
    let none = open.cntr_open(FI_WAIT_NONE).unwrap();
    // SAFETY: open counters; only the fields' addresses are taken.
    let (unspec_fid, none_fid) = unsafe { (&raw mut (*unspec).fid, &raw mut (*none).fid) };
    assert_eq!(control_int(unspec_fid, FI_GETWAIT).0, enodata);
    assert_eq!(control_int(unspec_fid, FI_GETWAITOBJ), (0, FI_WAIT_UNSPEC));
    assert_eq!(control_int(none_fid, FI_GETWAIT).0, enodata);
    assert_eq!(control_int(none_fid, FI_GETWAITOBJ).0, enodata);
    assert_eq!(control_int(fid, 1234).0, ineg(FiErrno::FI_ENOSYS));
    let inval = ineg(FiErrno::FI_EINVAL);
    assert_eq!(trywait_on(fabric, &[unspec_fid]), inval);
    assert_eq!(trywait_on(fabric, &[fid, none_fid]), inval);
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[unspec_fid, none_fid]) };
}

/// Closing an `FI_WAIT_FD` counter closes its descriptors (its eventfds and epoll set):
/// opening and closing many leaks none. (Counted over the whole process: the test runs in a
/// process of its own.)
#[test]
fn closing_fi_wait_fd_counters_leaks_no_descriptor() {
    if !common::in_own_process("closing_fi_wait_fd_counters_leaks_no_descriptor") {
        return;
    }
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let before = open_descriptors();
    let cntrs: Vec<_> = (0..32)
        .map(|_| open.cntr_open(FI_WAIT_FD).unwrap())
        .collect();
    assert_eq!(
        open_descriptors(),
        before + 96,
        "two eventfds (its own and the descriptor's kick) and an epoll set per counter"
    );
    for c in cntrs {
        // SAFETY: `c` is open; only the field's address is taken.
        let fid = unsafe { &raw mut (*c).fid };
        assert_eq!(trywait_on(open.fabric, &[fid]), 0);
        // SAFETY: ours, open, closed once.
        assert_eq!(unsafe { close(fid) }, 0);
    }
    assert_eq!(
        open_descriptors(),
        before,
        "a closed counter's descriptors stayed open"
    );
}

/// How long a waiter may take to wake for a change that concerns it: well under the 100 ms
/// after which a waiter looks again whatever woke it, so that a wakeup another waiter took
/// from it shows.
const PROMPT_WAKE: std::time::Duration = std::time::Duration::from_millis(50);

/// Several threads in `fi_cntr_wait` on one counter: one change wakes every one of them at
/// once, not only the one that took the counter's wakeup (each round, after they all sleep).
#[test]
fn every_thread_waiting_on_a_counter_wakes_at_its_change() {
    let pair = Pair::with_counters(0, FI_WAIT_UNSPEC, |_| {}, 1, [&[], &[(0, FI_RECV)]]);
    let c = Shared(pair.cntrs[0]);
    for round in 1..=3u64 {
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let ret = cntr_wait(c.get(), round, 1000);
                    (ret, std::time::Instant::now())
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let changed = std::time::Instant::now();
        // SAFETY: an open counter.
        assert_eq!(unsafe { (cntr_ops(c.get()).add)(c.get(), 1) }, 0);
        for w in waiters {
            let (ret, woke) = w.join().unwrap();
            assert_eq!(ret, 0, "round {round}");
            let took = woke.saturating_duration_since(changed);
            assert!(
                took < PROMPT_WAKE,
                "round {round}: a waiter woke {took:?} late"
            );
        }
    }
}

/// A thread in `fi_cq_sread` that takes the CQ's wakeup (here for an endpoint enabled during
/// the wait, which the sleepers have yet to arm) leaves the CQ's `FI_WAIT_FD` descriptor
/// readable, for the application asleep on it, which must arm the endpoint too.
#[test]
fn a_thread_waiting_on_a_cq_leaves_its_descriptor_woken_for_an_endpoint_enabled() {
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let cq = Shared(open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_FD));
    let ep = open.endpoint();
    // SAFETY: open objects of the domain; valid out pointers.
    unsafe {
        let fops = &*(*ep).fid.ops;
        assert_eq!((fops.bind)(&mut (*ep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(
            (fops.bind)(&mut (*ep).fid, &mut (*cq.get()).fid, FI_TRANSMIT | FI_RECV),
            0
        );
    }
    // SAFETY: the CQ is open; only the field's address is taken.
    let fid = unsafe { &raw mut (*cq.get()).fid };
    let (ret, fd) = control_int(fid, FI_GETWAIT);
    assert_eq!(ret, 0);
    assert_eq!(trywait_on(open.fabric, &[fid]), 0);
    // SAFETY: an open CQ's operations, static.
    let sread = unsafe { (*(*cq.get()).ops).sread };
    let waiter = std::thread::spawn(move || {
        let mut e = [0u8; 64];
        // SAFETY: an open, waitable CQ; room for one entry.
        unsafe { sread(cq.get(), e.as_mut_ptr().cast(), 1, null(), 300) }
    });
    // The thread sleeps before the endpoint is enabled, which it reads from the CQ's eventfd.
    std::thread::sleep(std::time::Duration::from_millis(50));
    // SAFETY: an open endpoint, bound.
    let enabled = unsafe { ((*(*ep).fid.ops).control)(&mut (*ep).fid, FI_ENABLE, null_mut()) };
    assert_eq!(enabled, 0);
    // Looked at once the thread is done with every wakeup it could take.
    assert_eq!(waiter.join().unwrap(), neg(FiErrno::FI_EAGAIN));
    assert!(
        fd_readable(fd, 0),
        "the waiting thread took the descriptor's wakeup for the endpoint enabled"
    );
    assert_eq!(trywait_on(open.fabric, &[fid]), 0, "nothing to read");
    // SAFETY: ours, open, no thread uses them any more; closed once.
    unsafe {
        assert_eq!(close(&mut (*ep).fid), 0);
        assert_eq!(close(&mut (*cq.get()).fid), 0);
        assert_eq!(close(&mut (*av).fid), 0);
    }
}

/// A thread in `fi_cntr_wait` that takes the counter's wakeup leaves the counter's
/// `FI_WAIT_FD` descriptor readable, for the application asleep on it; and a `fi_trywait`
/// that takes the wakeup leaves the waiting thread woken.
#[test]
fn a_counters_descriptor_and_a_thread_waiting_on_it_take_no_wakeup_from_each_other() {
    let pair = Pair::with_counters(0, FI_WAIT_FD, |_| {}, 1, [&[], &[(0, FI_RECV)]]);
    let c = Shared(pair.cntrs[0]);
    let fabric = pair._open.fabric;
    // SAFETY: the counter is open; only the field's address is taken.
    let fid = unsafe { &raw mut (*c.get()).fid };
    let (ret, fd) = control_int(fid, FI_GETWAIT);
    assert_eq!(ret, 0);
    for round in 1..=3u64 {
        assert_eq!(trywait_on(fabric, &[fid]), 0);
        let waiter = std::thread::spawn(move || cntr_wait(c.get(), round, 5000));
        // The thread sleeps before the change, which it reads from the counter's eventfd.
        std::thread::sleep(std::time::Duration::from_millis(50));
        // SAFETY: an open counter.
        assert_eq!(unsafe { (cntr_ops(c.get()).add)(c.get(), 1) }, 0);
        assert_eq!(waiter.join().unwrap(), 0);
        assert!(
            fd_readable(fd, 1000),
            "round {round}: the waiting thread took the descriptor's wakeup"
        );
        assert_eq!(trywait_on(fabric, &[fid]), ineg(FiErrno::FI_EAGAIN));
    }
    // The other way: fi_trywait takes the wakeup a thread sleeps on.
    let round = 4;
    assert_eq!(trywait_on(fabric, &[fid]), 0);
    let waiter = std::thread::spawn(move || {
        let ret = cntr_wait(c.get(), round, 1000);
        (ret, std::time::Instant::now())
    });
    std::thread::sleep(std::time::Duration::from_millis(20));
    let changed = std::time::Instant::now();
    // SAFETY: an open counter.
    assert_eq!(unsafe { (cntr_ops(c.get()).add)(c.get(), 1) }, 0);
    let _ = trywait_on(fabric, &[fid]);
    let (ret, woke) = waiter.join().unwrap();
    assert_eq!(ret, 0);
    let took = woke.saturating_duration_since(changed);
    assert!(took < PROMPT_WAKE, "the waiter woke {took:?} late");
}

/// The events of an `FI_EVENT` AV's inserts, read until `calls` `FI_AV_COMPLETE`s came:
/// `(context, position, errno)` per error entry and `(context, inserted)` per completion.
#[allow(clippy::type_complexity)]
fn av_events(eq: *mut FidEq, calls: usize) -> (Vec<(usize, u64, c_int)>, Vec<(usize, u64)>) {
    const FI_AV_COMPLETE: u32 = 5;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (mut errors, mut completions) = (Vec::new(), Vec::new());
    while completions.len() < calls {
        assert!(
            std::time::Instant::now() < end,
            "the inserts did not complete"
        );
        match eq_read_entry(eq) {
            Ok((event, entry)) => {
                assert_eq!(event, FI_AV_COMPLETE);
                completions.push((entry.context as usize, entry.data));
            }
            Err(e) if e == neg(FiErrno::FI_EAVAIL) => {
                let (err, _) = eq_error(eq);
                errors.push((err.context as usize, err.data, err.err));
            }
            Err(e) => {
                assert_eq!(e, neg(FiErrno::FI_EAGAIN));
                std::thread::yield_now();
            }
        }
    }
    (errors, completions)
}

/// fi_av(3): "In both the synchronous and asynchronous modes of operation, the fi_addr buffer
/// associated with a failed or aborted insertion will be set to FI_ADDR_NOTAVAIL", and the
/// application keeps that buffer valid until the insert's completion event. An `FI_EVENT`
/// insert whose addresses fail after the call returned (here its `FI_MORE` batch, cancelled
/// by `fi_close`) finds `FI_ADDR_NOTAVAIL` in their slots once its events are posted; a call
/// refused outright (before the bind: `-FI_ENOEQ`) posts nothing and its array is untouched
/// by the events of the calls after it.
#[test]
fn an_fi_event_insert_that_fails_after_it_returned_gets_fi_addr_notavail_in_its_fi_addr_slots() {
    fi_event_insert_fails_after_it_returned(None);
}

/// The same on a named AV, which completes every call on the NIC before it returns
/// (`FI_MORE` included): a refused address says `FI_ADDR_NOTAVAIL` in its slot, and the
/// call's events go out as it returns.
#[test]
fn an_fi_event_insert_into_a_named_av_reports_failures_in_its_fi_addr_slots() {
    let name = std::ffi::CString::new(format!("uet-av-event-test-{}", std::process::id()))
        .expect("no NUL");
    fi_event_insert_fails_after_it_returned(Some(&name));
}

/// On an `FI_EVENT` AV an insert's `context` is its events' context, whatever the
/// application makes it (NULL, a number): `FI_SYNC_ERR` there is `-FI_EBADFLAGS` (fi_av(3):
/// it "applies to synchronous insertions only"), for every insert call, and the context is
/// never taken for a status array.
#[test]
fn fi_sync_err_on_an_fi_event_av_is_ebadflags_whatever_the_context() {
    let sync_err = uet_av::FI_SYNC_ERR;
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    let plain = open.av_open(&mut av_attr(4)).unwrap();
    let good = address_of(plain, c"10.0.0.2", c"7");
    let eq = eq_open_on(open.fabric, FI_WAIT_UNSPEC, 0).expect("fi_eq_open");
    let mut attr = av_attr(4);
    attr.flags = uet_av::FI_EVENT;
    let av = open.av_open(&mut attr).unwrap();
    // SAFETY: open objects; only the fields' addresses are taken.
    let (eq_fid, av_fid) = unsafe { (&raw mut (*eq).fid, &raw mut (*av).fid) };
    // SAFETY: an open AV and EQ.
    assert_eq!(unsafe { ((*(*av).fid.ops).bind)(av_fid, eq_fid, 0) }, 0);
    let ebadflags = ineg(FiErrno::FI_EBADFLAGS);
    for context in [
        null_mut::<core::ffi::c_void>(),
        43 as *mut core::ffi::c_void,
    ] {
        let mut out = [7 as FiAddr; 2];
        // SAFETY: an open AV; one address and two fi_addr slots (one used); the context is
        // an opaque value.
        let ret = unsafe {
            ((*(*av).ops).insert)(
                av,
                good.as_ptr().cast(),
                1,
                out.as_mut_ptr(),
                sync_err,
                context,
            )
        };
        assert_eq!(ret, ebadflags, "fi_av_insert, context {context:?}");
        // SAFETY: as above, strings valid.
        let ret = unsafe {
            ((*(*av).ops).insertsvc)(
                av,
                c"10.0.0.3".as_ptr(),
                c"7".as_ptr(),
                out.as_mut_ptr(),
                sync_err,
                context,
            )
        };
        assert_eq!(ret, ebadflags, "fi_av_insertsvc, context {context:?}");
        // SAFETY: as above; two addresses, two slots.
        let ret = unsafe {
            ((*(*av).ops).insertsym)(
                av,
                c"10.0.0.3".as_ptr(),
                2,
                c"7".as_ptr(),
                1,
                out.as_mut_ptr(),
                sync_err,
                context,
            )
        };
        assert_eq!(ret, ebadflags, "fi_av_insertsym, context {context:?}");
        assert_eq!(out, [7, 7], "nothing inserted");
    }
    assert_eq!(eq_read_entry(eq).err(), Some(neg(FiErrno::FI_EAGAIN)));
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[av_fid, eq_fid, &mut (*plain).fid]) };
}

/// An insert call refused for a C argument it cannot be read with (a NULL node or service,
/// a node that is not UTF-8, a NULL address array) ends the `FI_MORE` batch before it when it
/// has no `FI_MORE` itself, as a call the AV refuses does (fi_av(3): such a call "signifies to
/// the provider that the insertion list is complete"): on an `FI_EVENT` AV the earlier calls
/// then complete, instead of waiting for an insert that may never come.
#[test]
fn an_insert_refused_for_its_c_arguments_ends_the_fi_more_batch_before_it() {
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    let plain = open.av_open(&mut av_attr(8)).unwrap();
    let good: Vec<[u8; 32]> = [
        c"10.0.8.1",
        c"10.0.8.2",
        c"10.0.8.3",
        c"10.0.8.4",
        c"10.0.8.5",
    ]
    .iter()
    .map(|&node| address_of(plain, node, c"7"))
    .collect();
    let eq = eq_open_on(open.fabric, FI_WAIT_UNSPEC, 0).expect("fi_eq_open");
    let mut attr = av_attr(8);
    attr.flags = uet_av::FI_EVENT;
    let av = open.av_open(&mut attr).unwrap();
    // SAFETY: open objects; only the fields' addresses are taken.
    let (eq_fid, av_fid) = unsafe { (&raw mut (*eq).fid, &raw mut (*av).fid) };
    // SAFETY: an open AV and EQ.
    assert_eq!(unsafe { ((*(*av).fid.ops).bind)(av_fid, eq_fid, 0) }, 0);
    let mut outs = [[7 as FiAddr; 1]; 4];
    let more = |k: usize, out: &mut [FiAddr; 1]| {
        // SAFETY: an open AV; one address and one fi_addr slot, kept until the call's
        // completion is read.
        unsafe {
            ((*(*av).ops).insert)(
                av,
                good[k].as_ptr().cast(),
                1,
                out.as_mut_ptr(),
                uet_av::FI_MORE,
                (k + 1) as *mut _,
            )
        }
    };
    let einval = ineg(FiErrno::FI_EINVAL);
    let not_utf8 = [0xffu8, 0];
    let refused = |which: usize, flags: u64| -> c_int {
        // SAFETY: an open AV; each call passes the argument under test, every other one valid.
        unsafe {
            let ops = &*(*av).ops;
            match which {
                0 => (ops.insertsvc)(av, null(), c"7".as_ptr(), null_mut(), flags, null_mut()),
                1 => (ops.insertsvc)(
                    av,
                    not_utf8.as_ptr().cast(),
                    c"7".as_ptr(),
                    null_mut(),
                    flags,
                    null_mut(),
                ),
                2 => (ops.insertsym)(
                    av,
                    c"10.0.9.1".as_ptr(),
                    1,
                    null(),
                    1,
                    null_mut(),
                    flags,
                    null_mut(),
                ),
                _ => (ops.insert)(av, null(), 1, null_mut(), flags, null_mut()),
            }
        }
    };
    let whats = [
        "fi_av_insertsvc, NULL node",
        "fi_av_insertsvc, node not UTF-8",
        "fi_av_insertsym, NULL service",
        "fi_av_insert, NULL addr",
    ];
    for (k, what) in whats.into_iter().enumerate() {
        assert_eq!(more(k, &mut outs[k]), 0, "{what}");
        assert_eq!(outs[k], [k as FiAddr], "{what}");
        // With FI_MORE the refused call leaves the batch open.
        assert_eq!(refused(k, uet_av::FI_MORE), einval, "{what}");
        assert_eq!(
            eq_read_entry(eq).err(),
            Some(neg(FiErrno::FI_EAGAIN)),
            "{what}: the batch is not over"
        );
        assert_eq!(refused(k, 0), einval, "{what}");
        let (errors, completions) = av_events(eq, 1);
        assert!(errors.is_empty(), "{what}: {errors:?}");
        assert_eq!(completions, [(k + 1, 1)], "{what}");
    }
    assert_eq!(eq_read_entry(eq).err(), Some(neg(FiErrno::FI_EAGAIN)));
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[av_fid, eq_fid, &mut (*plain).fid]) };
}

/// The FI_EVENT insert test, on an AV of `name` (`None`: unnamed).
fn fi_event_insert_fails_after_it_returned(name: Option<&CStr>) {
    let ecanceled = FiErrno::FI_ECANCELED.get() as c_int;
    let open = Open::new(
        if name.is_some() {
            uet_av::FI_SHARED_AV
        } else {
            0
        },
        FI_FORMAT_UNSPEC,
    );
    let plain = open.av_open(&mut av_attr(4)).unwrap();
    let good = [
        address_of(plain, c"10.0.0.2", c"7"),
        address_of(plain, c"10.0.0.3", c"7"),
    ];
    let eq = eq_open_on(open.fabric, FI_WAIT_UNSPEC, 0).expect("fi_eq_open");
    let mut attr = av_attr(4);
    attr.flags = uet_av::FI_EVENT;
    if let Some(name) = name {
        attr.name = name.as_ptr();
    }
    let av = open.av_open(&mut attr).unwrap();
    // SAFETY: open objects; only the fields' addresses are taken.
    let (eq_fid, av_fid) = unsafe { (&raw mut (*eq).fid, &raw mut (*av).fid) };
    let insert = |addrs: &[[u8; 32]], out: &mut [FiAddr], flags: u64, context: usize| {
        assert_eq!(addrs.len(), out.len());
        // SAFETY: an open AV; `addrs.len()` addresses and as many fi_addr slots, kept until
        // the call's completion is read below.
        unsafe {
            ((*(*av).ops).insert)(
                av,
                addrs.as_ptr().cast(),
                addrs.len(),
                out.as_mut_ptr(),
                flags,
                context as *mut _,
            )
        }
    };
    let mut early = [7 as FiAddr; 1];
    assert_eq!(
        insert(&good[..1], &mut early, 0, 1),
        ineg(FiErrno::FI_ENOEQ)
    );
    // SAFETY: an open AV and EQ.
    assert_eq!(unsafe { ((*(*av).fid.ops).bind)(av_fid, eq_fid, 0) }, 0);

    // A malformed address beside a good one: the host refuses it within the call.
    let mut first = [7 as FiAddr; 2];
    assert_eq!(insert(&[[0; 32], good[0]], &mut first, 0, 2), 0);
    assert_eq!(first, [FI_ADDR_NOTAVAIL, 0]);
    let (errors, completions) = av_events(eq, 1);
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].0, errors[0].1), (2, 0));
    assert_eq!(completions, [(2, 1)]);
    assert_eq!(first, [FI_ADDR_NOTAVAIL, 0]);
    assert_eq!(
        early,
        [7],
        "a refused call's array is not one of the calls'"
    );

    // An FI_MORE insert returns its index; fi_close cancels its batch, never sent.
    let mut more = [7 as FiAddr; 1];
    assert_eq!(insert(&good[1..], &mut more, uet_av::FI_MORE, 3), 0);
    assert_eq!(more, [1]);
    if name.is_some() {
        // A named AV completes every call on the NIC, FI_MORE or not: the close has nothing
        // to cancel.
        let (errors, completions) = av_events(eq, 1);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(completions, [(3, 1)]);
        // SAFETY: ours, open, closed once.
        assert_eq!(unsafe { close(av_fid) }, 0);
        assert_eq!(more, [1], "inserted");
        // SAFETY: ours, open, closed once.
        unsafe { close_all(&[eq_fid, &mut (*plain).fid]) };
        return;
    }
    // SAFETY: ours, open, closed once.
    assert_eq!(unsafe { close(av_fid) }, 0);
    let (errors, completions) = av_events(eq, 1);
    assert_eq!(errors, [(3, 0, ecanceled)]);
    assert_eq!(completions, [(3, 0)]);
    assert_eq!(
        more,
        [FI_ADDR_NOTAVAIL],
        "an aborted insertion's fi_addr slot says FI_ADDR_NOTAVAIL"
    );
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[eq_fid, &mut (*plain).fid]) };
}

/// `fi_av_set`: the set, or the negative errno.
fn av_set_open(av: *mut FidAv, attr: &mut FiAvSetAttr) -> Result<*mut FidAvSet, c_int> {
    let mut set: *mut FidAvSet = null_mut();
    // SAFETY: an open AV; valid attributes and out pointer.
    let ret = unsafe { ((*(*av).ops).av_set)(av, attr, &mut set, null_mut()) };
    if ret == 0 {
        Ok(set)
    } else {
        assert!(set.is_null(), "a failed fi_av_set wrote a set");
        Err(ret)
    }
}

/// `fi_av_set_attr` of an empty set with `flags`.
fn av_set_attr(flags: u64) -> FiAvSetAttr {
    FiAvSetAttr {
        count: 0,
        start_addr: FI_ADDR_NOTAVAIL,
        end_addr: FI_ADDR_NOTAVAIL,
        stride: 0,
        comm_key_size: 0,
        comm_key: null_mut(),
        flags,
    }
}

/// The operations of an open AV set.
fn set_ops(set: *mut FidAvSet) -> &'static FiOpsAvSet {
    // SAFETY: an open set of the provider, whose operations are static.
    unsafe { &*(*set).ops }
}

/// `fi_av_insertsvc` of one address: its `fi_addr_t`.
fn insert_svc(av: *mut FidAv, node: &CStr, service: &CStr) -> u64 {
    let mut fi_addr = FI_ADDR_NOTAVAIL;
    // SAFETY: an open AV; valid strings and out pointer.
    let ret = unsafe {
        ((*(*av).ops).insertsvc)(
            av,
            node.as_ptr(),
            service.as_ptr(),
            &mut fi_addr,
            0,
            null_mut(),
        )
    };
    assert_eq!(ret, 1, "fi_av_insertsvc {node:?}");
    fi_addr
}

/// fi_av_set(3) on a named AV: a set made through one handle reads the AV, not what that
/// handle last saw of it, so the addresses another handle inserted are members of an
/// `FI_UNIVERSE` set and may be inserted, and a member another handle removed is no longer
/// one the set's collective address may name.
#[test]
fn av_sets_of_a_named_av_see_what_its_other_handles_did() {
    let open = Open::new(uet_av::FI_SHARED_AV, FI_FORMAT_UNSPEC);
    let name =
        std::ffi::CString::new(format!("uet-av-set-test-{}", std::process::id())).expect("no NUL");
    let mut w = av_attr(16);
    w.name = name.as_ptr();
    let writer = open.av_open(&mut w).expect("the named AV");
    let mut r = av_attr(16);
    r.name = name.as_ptr();
    r.flags = uet_av::FI_READ;
    let reader = open.av_open(&mut r).expect("a read-only handle on it");

    let a = insert_svc(writer, c"10.0.6.1", c"1");
    let b = insert_svc(writer, c"10.0.6.2", c"1");
    let universe = av_set_open(reader, &mut av_set_attr(uet_av::FI_UNIVERSE)).unwrap();
    let chosen = av_set_open(reader, &mut av_set_attr(0)).unwrap();
    // SAFETY: open sets; valid out pointer.
    unsafe {
        assert_eq!(
            (set_ops(universe).remove)(universe, a),
            0,
            "FI_UNIVERSE holds the address the writer inserted"
        );
        assert_eq!(
            (set_ops(chosen).insert)(chosen, b),
            0,
            "the reader's set takes the writer's address"
        );
        let mut coll = FI_ADDR_NOTAVAIL;
        assert_eq!((set_ops(chosen).addr)(chosen, &mut coll), 0);
        let mut gone = b;
        assert_eq!(((*(*writer).ops).remove)(writer, &mut gone, 1, 0), 0);
        assert_eq!(
            (set_ops(chosen).addr)(chosen, &mut coll),
            EINVAL,
            "the member the writer removed is no address of the AV"
        );
        for fid in [
            &raw mut (*universe).fid,
            &raw mut (*chosen).fid,
            &raw mut (*reader).fid,
            &raw mut (*writer).fid,
        ] {
            assert_eq!(close(fid), 0);
        }
    }
}

/// `fi_av_set_diff` of a set with itself empties it (at once: member by member, a set of a
/// million took 28.5 s), and the set takes members again.
#[test]
fn a_set_diffed_with_itself_is_emptied() {
    const NODES: usize = 16;
    const SERVICES: usize = 4;
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    let av = open
        .av_open(&mut av_attr(NODES * SERVICES))
        .expect("fi_av_open");
    let mut fi_addrs = vec![FI_ADDR_NOTAVAIL; NODES * SERVICES];
    // SAFETY: an open AV; valid strings and an array of NODES * SERVICES fi_addr_t.
    let ret = unsafe {
        ((*(*av).ops).insertsym)(
            av,
            c"10.1.0.1".as_ptr(),
            NODES,
            c"1".as_ptr(),
            SERVICES,
            fi_addrs.as_mut_ptr(),
            0,
            null_mut(),
        )
    };
    assert_eq!(ret as usize, NODES * SERVICES, "fi_av_insertsym");
    let set = av_set_open(av, &mut av_set_attr(uet_av::FI_UNIVERSE)).unwrap();
    // SAFETY: an open set.
    unsafe {
        assert_eq!((set_ops(set).remove)(set, fi_addrs[5]), 0, "5 is a member");
        assert_eq!((set_ops(set).insert)(set, fi_addrs[5]), 0);
    }
    // SAFETY: an open set, given as both operands.
    assert_eq!(unsafe { (set_ops(set).diff)(set, set) }, 0);
    let mut coll = FI_ADDR_NOTAVAIL;
    // SAFETY: open objects; valid out pointer.
    unsafe {
        assert_eq!(
            (set_ops(set).addr)(set, &mut coll),
            EINVAL,
            "an empty set has no collective address"
        );
        assert_eq!((set_ops(set).insert)(set, fi_addrs[7]), 0, "7 is no member");
        assert_eq!(close(&raw mut (*set).fid), 0);
        assert_eq!(close(&raw mut (*av).fid), 0);
    }
}

/// fi_av_set(3) at the C ABI: NULL pointers, another object where a set belongs, bad
/// attributes and sets of two AVs are `-FI_EINVAL` (unknown flags `-FI_EBADFLAGS`) and change
/// nothing; a communication key is copied; a receive-context address names its member; the
/// AV stays open (`-FI_EBUSY`) and whole while a set of it is.
#[test]
fn av_set_calls_refuse_bad_input_and_change_nothing() {
    let open = Open::new(0, FI_FORMAT_UNSPEC);
    let mut attr = av_attr(8);
    attr.rx_ctx_bits = 2;
    let av = open.av_open(&mut attr).expect("fi_av_open");
    let other = open.av_open(&mut av_attr(8)).expect("fi_av_open");
    let a = insert_svc(av, c"10.0.7.1", c"1");
    let b = insert_svc(av, c"10.0.7.2", c"1");
    let x = insert_svc(other, c"10.0.7.3", c"1");
    // SAFETY: open AVs, sets and valid attributes, or the NULL pointers under test.
    unsafe {
        let open_set = (*(*av).ops).av_set;
        let mut set: *mut FidAvSet = null_mut();
        let mut empty = av_set_attr(0);
        assert_eq!(
            open_set(null_mut(), &mut empty, &mut set, null_mut()),
            EINVAL
        );
        assert_eq!(open_set(av, null_mut(), &mut set, null_mut()), EINVAL);
        assert_eq!(open_set(av, &mut empty, null_mut(), null_mut()), EINVAL);
        assert!(set.is_null());
        let mut keyless = FiAvSetAttr {
            comm_key_size: 4,
            ..av_set_attr(0)
        };
        assert_eq!(av_set_open(av, &mut keyless).err(), Some(EINVAL));
        let mut unknown = av_set_attr(1 << 30);
        assert_eq!(
            av_set_open(av, &mut unknown).err(),
            Some(ineg(FiErrno::FI_EBADFLAGS))
        );
        let mut both = FiAvSetAttr {
            start_addr: a,
            end_addr: b,
            stride: 1,
            ..av_set_attr(uet_av::FI_UNIVERSE)
        };
        assert_eq!(av_set_open(av, &mut both).err(), Some(EINVAL));

        let mut key = [7u8, 6, 5];
        let mut keyed = FiAvSetAttr {
            comm_key_size: key.len(),
            comm_key: key.as_mut_ptr(),
            ..av_set_attr(0)
        };
        let k = av_set_open(av, &mut keyed).expect("a set named by its key");
        key = [0; 3];
        let mut coll = FI_ADDR_NOTAVAIL;
        assert_eq!((set_ops(k).addr)(k, &mut coll), 0, "{key:?}");
        assert!(uet_av::is_av_set_addr(coll), "{coll:#x}");

        let s = av_set_open(av, &mut av_set_attr(0)).unwrap();
        let t = av_set_open(other, &mut av_set_attr(0)).unwrap();
        let ops = set_ops(s);
        assert_eq!((ops.insert)(s, uet_av::fi_rx_addr(a, 3, 2)), 0);
        assert_eq!((ops.insert)(s, a), EINVAL, "the same member");
        assert_eq!((set_ops(t).insert)(t, x), 0);
        assert_eq!((ops.set_union)(s, t), EINVAL, "a set of another AV");
        assert_eq!((ops.intersect)(s, t), EINVAL);
        assert_eq!((ops.diff)(s, t), EINVAL);
        assert_eq!((ops.insert)(s, 5), EINVAL, "no address of the AV");
        for (call, ret) in [
            ("union dst", (ops.set_union)(null_mut(), s)),
            ("union src", (ops.set_union)(s, null())),
            ("intersect dst", (ops.intersect)(null_mut(), s)),
            ("intersect src", (ops.intersect)(s, null())),
            ("diff dst", (ops.diff)(null_mut(), s)),
            ("diff src", (ops.diff)(s, null())),
            ("insert", (ops.insert)(null_mut(), b)),
            ("remove", (ops.remove)(null_mut(), a)),
            ("addr", (ops.addr)(null_mut(), &mut coll)),
            ("addr out", (ops.addr)(s, null_mut())),
            ("an AV as the set", (ops.insert)(av.cast(), b)),
            ("an AV as the source", (ops.set_union)(s, av.cast())),
        ] {
            assert_eq!(ret, EINVAL, "{call}");
        }
        assert_eq!(close(&raw mut (*av).fid), ineg(FiErrno::FI_EBUSY));
        // Nothing changed: a is the one member, and the AV still serves the set.
        assert_eq!((ops.remove)(s, b), EINVAL, "b is no member");
        assert_eq!((ops.remove)(s, uet_av::fi_rx_addr(a, 1, 2)), 0);
        assert_eq!((ops.addr)(s, &mut coll), EINVAL, "now empty");
        assert_eq!((ops.insert)(s, b), 0);
        assert_eq!((ops.addr)(s, &mut coll), 0);
        for fid in [&raw mut (*s).fid, &raw mut (*k).fid, &raw mut (*t).fid] {
            assert_eq!(close(fid), 0);
        }
        assert_eq!(close(&raw mut (*av).fid), 0);
        assert_eq!(close(&raw mut (*other).fid), 0);
    }
}

/// `fi_trywait` takes only objects of the fabric it is called on (fi_poll(3): the fabric
/// descriptors of that fabric): a CQ, counter or event queue of another fabric is
/// `-FI_EINVAL`, alone or beside the fabric's own, and nothing is armed; each still answers
/// on its own fabric.
#[test]
fn fi_trywait_refuses_objects_of_another_fabric() {
    let (a, b) = (
        Open::new(FI_MSG, FI_FORMAT_UNSPEC),
        Open::new(FI_MSG, FI_FORMAT_UNSPEC),
    );
    let own = a.cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD);
    let cq = b.cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD);
    let cntr = b.cntr_open(FI_WAIT_FD).unwrap();
    let eq = eq_open_on(b.fabric, FI_WAIT_FD, 0).expect("fi_eq_open");
    // SAFETY: open objects; only the fields' addresses are taken.
    let (own, cq, cntr, eq) = unsafe {
        (
            &raw mut (*own).fid,
            &raw mut (*cq).fid,
            &raw mut (*cntr).fid,
            &raw mut (*eq).fid,
        )
    };
    let inval = ineg(FiErrno::FI_EINVAL);
    for other in [cq, cntr, eq] {
        assert_eq!(trywait_on(a.fabric, &[other]), inval);
        assert_eq!(trywait_on(a.fabric, &[own, other]), inval);
        assert_eq!(trywait_on(b.fabric, &[other]), 0);
    }
    assert_eq!(trywait_on(a.fabric, &[own]), 0);
    // SAFETY: ours, open, closed once.
    unsafe { close_all(&[own, cq, cntr, eq]) };
}

/// A pair whose first endpoint's CQ and receive counter are `FI_WAIT_FD`: the pair, its
/// fabric, and the CQ's and counter's fids.
fn fd_waited_pair() -> (Pair, *mut FidFabric, *mut Fid, *mut Fid) {
    let pair = Pair::with_counters(0, FI_WAIT_FD, |_| {}, 1, [&[(0, FI_RECV)], &[]]);
    let fabric = pair._open.fabric;
    // SAFETY: open objects; only the fields' addresses are taken.
    let (cq, cntr) = unsafe {
        let rx = pair.cntrs[0];
        (&raw mut (*pair.p[0].cq).fid, &raw mut (*rx).fid)
    };
    (pair, fabric, cq, cntr)
}

/// Reset the function of the process's NIC under its driver: the NIC stops.
fn reset_the_process_nic() {
    use uet_regs::RegisterAccess;
    let nic = uet_fi::device::nic().expect("the NIC");
    nic.bar0().write(
        uet_regs::FUNCTION_RESET,
        uet_regs::FunctionReset::new().with_reset(true),
    );
}

/// `fi_trywait` of an `FI_WAIT_FD` CQ or counter whose NIC stopped — here its function is
/// reset — is `-FI_EIO`, as `fi_cq_sread` and `fi_cntr_wait` are: a stopped NIC writes no
/// completion and raises no vector, so the descriptor would never poll readable and an
/// application told it may sleep would sleep for good. (The test resets the process's NIC:
/// it runs in a process of its own.)
#[test]
fn fi_trywait_of_a_cq_or_counter_whose_nic_stopped_is_eio() {
    if !common::in_own_process("fi_trywait_of_a_cq_or_counter_whose_nic_stopped_is_eio") {
        return;
    }
    let (pair, fabric, cq, cntr) = fd_waited_pair();
    assert_eq!(trywait_on(fabric, &[cq, cntr]), 0, "a running NIC");
    reset_the_process_nic();
    let eio = ineg(FiErrno::FI_EIO);
    assert_eq!(trywait_on(fabric, &[cq]), eio, "the CQ");
    assert_eq!(trywait_on(fabric, &[cntr]), eio, "the counter");
    // Its endpoints, CQs and counter are left to the process's end: the NIC answers nothing.
    std::mem::forget(pair);
}

/// An application already asleep on the `FI_WAIT_FD` descriptor of a CQ or counter when its
/// NIC stops — here its function is reset — is woken: the NIC writes no completion and raises
/// no vector, and the descriptor polls readable all the same, within a few of the NIC's
/// status looks; then `fi_trywait` says why (`-FI_EIO`). (The test resets the process's NIC:
/// it runs in a process of its own.)
#[test]
fn an_application_asleep_on_a_descriptor_wakes_when_the_nic_stops() {
    if !common::in_own_process("an_application_asleep_on_a_descriptor_wakes_when_the_nic_stops") {
        return;
    }
    let (pair, fabric, cq, cntr) = fd_waited_pair();
    let wait_fd = |fid: *mut Fid| -> c_int {
        let mut fd: c_int = -1;
        // SAFETY: an open CQ or counter; an int for the answer.
        let ret = unsafe { ((*(*fid).ops).control)(fid, FI_GETWAIT, (&raw mut fd).cast()) };
        assert_eq!(ret, 0, "FI_GETWAIT");
        fd
    };
    let fds = [wait_fd(cq), wait_fd(cntr)];
    assert_eq!(trywait_on(fabric, &[cq, cntr]), 0, "a running NIC");
    assert!(
        !fds.iter().any(|&fd| fd_readable(fd, 300)),
        "nothing to wake for"
    );
    reset_the_process_nic();
    for (fd, what) in fds.into_iter().zip(["the CQ", "the counter"]) {
        // A generous bound, only so that a sleep without end fails the test.
        assert!(
            fd_readable(fd, 10_000),
            "{what}'s descriptor stayed unreadable"
        );
    }
    let eio = ineg(FiErrno::FI_EIO);
    assert_eq!(trywait_on(fabric, &[cq]), eio, "the CQ");
    assert_eq!(trywait_on(fabric, &[cntr]), eio, "the counter");
    // Its endpoints, CQs and counter are left to the process's end: the NIC answers nothing.
    std::mem::forget(pair);
}

/// Under `mutex`, `fi_trywait` of `fid` (0: its NIC runs), `asleep`, and the wait on `cond`
/// until `fi_trywait` says the NIC stopped (`-FI_EIO`): true then, false when a wait ran out
/// (10 s, a bound only so that a sleep without end fails).
fn sleep_on_cond_until_eio(
    fabric: *mut FidFabric,
    fid: *mut Fid,
    mutex: *mut libc::pthread_mutex_t,
    cond: *mut libc::pthread_cond_t,
    asleep: impl FnOnce(),
) -> bool {
    // SAFETY: a timespec for the clock's answer.
    let mut until: libc::timespec = unsafe { core::mem::zeroed() };
    // SAFETY: a valid clock and out pointer.
    let clock = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut until) };
    assert_eq!(clock, 0);
    until.tv_sec += 10;
    // SAFETY: the object's mutex, from FI_GETWAIT.
    assert_eq!(unsafe { libc::pthread_mutex_lock(mutex) }, 0);
    assert_eq!(trywait_on(fabric, &[fid]), 0, "a running NIC");
    asleep();
    let (again, eio) = (ineg(FiErrno::FI_EAGAIN), ineg(FiErrno::FI_EIO));
    let woke = 'sleep: loop {
        // SAFETY: the object's condition and mutex, the mutex held.
        match unsafe { libc::pthread_cond_timedwait(cond, mutex, &until) } {
            libc::ETIMEDOUT => break false,
            r => assert_eq!(r, 0, "pthread_cond_timedwait"),
        }
        // Nothing comes to read: fi_trywait says to sleep again, or why not.
        for _ in 0..100 {
            match trywait_on(fabric, &[fid]) {
                0 => continue 'sleep,
                r if r == again => {}
                r => {
                    assert_eq!(r, eio, "fi_trywait");
                    break 'sleep true;
                }
            }
        }
        panic!("fi_trywait kept saying to read");
    };
    // SAFETY: held by this thread.
    assert_eq!(unsafe { libc::pthread_mutex_unlock(mutex) }, 0);
    woke
}

/// An application asleep on the condition of an `FI_WAIT_MUTEX_COND` CQ or counter when its
/// NIC stops — here its function is reset — is woken, as one asleep on a descriptor is, and
/// `fi_trywait` then says why (`-FI_EIO`). (The test resets the process's NIC: it runs in a
/// process of its own.)
#[test]
fn an_application_asleep_on_a_condition_wakes_when_the_nic_stops() {
    if !common::in_own_process("an_application_asleep_on_a_condition_wakes_when_the_nic_stops") {
        return;
    }
    use uet_regs::RegisterAccess;
    let pair = Pair::with_counters(0, FI_WAIT_MUTEX_COND, |_| {}, 1, [&[(0, FI_RECV)], &[]]);
    let fabric = Shared(pair._open.fabric);
    let (cq, cntr) = (pair.p[0].cq, pair.cntrs[0]);
    // SAFETY: an open CQ and counter; only the fields' addresses are taken.
    let objects = unsafe {
        [
            (&raw mut (*cq).fid, "the CQ"),
            (&raw mut (*cntr).fid, "the counter"),
        ]
    };
    let (asleep_tx, asleep) = std::sync::mpsc::channel();
    let sleepers: Vec<_> = objects
        .iter()
        .map(|&(fid, what)| {
            let mc = mutex_cond_of(fid);
            let (fid, mutex, cond) = (Shared(fid), Shared(mc.mutex), Shared(mc.cond));
            let tx = asleep_tx.clone();
            let sleeper = std::thread::spawn(move || {
                sleep_on_cond_until_eio(fabric.get(), fid.get(), mutex.get(), cond.get(), || {
                    tx.send(()).unwrap()
                })
            });
            (sleeper, what)
        })
        .collect();
    for _ in &sleepers {
        asleep
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("fi_trywait under the mutex");
    }
    // Each lets go of its mutex only as it sleeps on the condition.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let nic = uet_fi::device::nic().expect("the NIC");
    nic.bar0().write(
        uet_regs::FUNCTION_RESET,
        uet_regs::FunctionReset::new().with_reset(true),
    );
    for (sleeper, what) in sleepers {
        assert!(sleeper.join().unwrap(), "{what}: woken only by the timeout");
    }
    // Its endpoints, CQs and counter are left to the process's end: the NIC answers nothing.
    std::mem::forget(pair);
}

/// The threads of this process.
fn process_threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// The process's thread count once it has settled at `want` (within 5 s), or whatever it is
/// then: a joined thread has returned, but the kernel may list it in `/proc/self/task` a
/// moment longer.
fn process_threads_settled_at(want: usize) -> usize {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let n = process_threads();
        if n == want || std::time::Instant::now() >= end {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// `fi_control` commands other than `FI_GETWAIT` of an `FI_WAIT_MUTEX_COND` EQ, CQ or
/// counter (`FI_GETWAITOBJ`, and a command it does not serve) start no signaling thread:
/// only `FI_GETWAIT` gives the application the mutex and condition. Nor does an
/// `FI_GETWAIT` with a NULL argument, which is `-FI_EINVAL`. (Counted over the whole
/// process: the test runs in a process of its own.)
#[test]
fn fi_getwaitobj_of_fi_wait_mutex_cond_objects_starts_no_thread() {
    if !common::in_own_process("fi_getwaitobj_of_fi_wait_mutex_cond_objects_starts_no_thread") {
        return;
    }
    const FI_GETOPSFLAG: c_int = 3;
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let cq = open.cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_MUTEX_COND);
    let cntr = open.cntr_open(FI_WAIT_MUTEX_COND).unwrap();
    let eq = eq_open_on(open.fabric, FI_WAIT_MUTEX_COND, 0).expect("fi_eq_open");
    // SAFETY: open objects; only the fields' addresses are taken.
    let fids = unsafe { [&raw mut (*cq).fid, &raw mut (*cntr).fid, &raw mut (*eq).fid] };
    let threads = process_threads();
    for fid in fids {
        assert_eq!(control_int(fid, FI_GETWAITOBJ), (0, FI_WAIT_MUTEX_COND));
        assert_eq!(control_int(fid, FI_GETOPSFLAG).0, ineg(FiErrno::FI_ENOSYS));
        // SAFETY: an open object; a NULL argument, refused before anything is written.
        let ret = unsafe { ((*(*fid).ops).control)(fid, FI_GETWAIT, null_mut()) };
        assert_eq!(ret, ineg(FiErrno::FI_EINVAL), "FI_GETWAIT into NULL");
    }
    assert_eq!(
        process_threads(),
        threads,
        "a command other than FI_GETWAIT, or one into NULL, started a signaling thread"
    );
    for fid in fids {
        // SAFETY: ours, open, closed once.
        assert_eq!(unsafe { close(fid) }, 0);
    }
}

/// An `FI_WAIT_MUTEX_COND` CQ or counter starts its signaling thread at the first
/// `fi_control(FI_GETWAIT)`, which gives the application the mutex and condition, and not
/// before (an application waiting in `fi_cq_sread` never needs it); a second `FI_GETWAIT`
/// starts no other. Closing them ends their threads and closes their descriptors, whether
/// `fi_trywait` armed them or not: opening and closing many leaks neither. (Counted over the
/// whole process: the test runs in a process of its own.)
#[test]
fn closing_fi_wait_mutex_cond_objects_leaks_no_descriptor_or_thread() {
    if !common::in_own_process("closing_fi_wait_mutex_cond_objects_leaks_no_descriptor_or_thread") {
        return;
    }
    let open = Open::new(FI_MSG, FI_FORMAT_UNSPEC);
    let (descriptors, threads) = (open_descriptors(), process_threads());
    let mut fids = Vec::new();
    for _ in 0..16 {
        let cq = open.cq_open(FI_CQ_FORMAT_CONTEXT, FI_WAIT_MUTEX_COND);
        // SAFETY: an open CQ; only the field's address is taken.
        fids.push(unsafe { &raw mut (*cq).fid });
        let cntr = open.cntr_open(FI_WAIT_MUTEX_COND).unwrap();
        // SAFETY: an open counter; only the field's address is taken.
        fids.push(unsafe { &raw mut (*cntr).fid });
    }
    assert_eq!(process_threads(), threads, "no thread before FI_GETWAIT");
    for &fid in &fids {
        for _ in 0..2 {
            let mut pair = [0usize; 2];
            // SAFETY: an open CQ or counter; room for a struct fi_mutex_cond.
            let ret = unsafe { ((*(*fid).ops).control)(fid, FI_GETWAIT, pair.as_mut_ptr().cast()) };
            assert_eq!(ret, 0, "FI_GETWAIT");
        }
    }
    assert_eq!(
        process_threads(),
        threads + fids.len(),
        "a signaling thread per object"
    );
    assert_eq!(
        open_descriptors(),
        descriptors + 5 * fids.len(),
        "per object: its eventfd, its kick, its epoll set, the thread's descriptor of that set \
         and the thread's bell"
    );
    for (i, &fid) in fids.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(trywait_on(open.fabric, &[fid]), 0);
        }
        // SAFETY: ours, open, closed once.
        assert_eq!(unsafe { close(fid) }, 0);
    }
    assert_eq!(
        process_threads_settled_at(threads),
        threads,
        "a closed object's thread runs on"
    );
    assert_eq!(
        open_descriptors(),
        descriptors,
        "a closed object's descriptors stayed open"
    );
}

/// fi_domain(3)'s resource management is what the NIC gives: `FI_RM_DISABLED` on one older
/// than host interface 1.17, where a message that arrives before its receive fails at the
/// sender, so hints asking `FI_RM_ENABLED` find nothing there. (The provider opens one NIC
/// per process, here one of interface 1.16 served over vfio-user: the test runs in a process
/// of its own.)
#[test]
fn fi_getinfo_answers_fi_rm_disabled_on_a_nic_that_refuses_early_messages() {
    if !common::in_own_process(
        "fi_getinfo_answers_fi_rm_disabled_on_a_nic_that_refuses_early_messages",
    ) {
        return;
    }
    const FI_RM_DISABLED: c_int = 1;
    const FI_RM_ENABLED: c_int = 2;
    let _nic = common::ServedNic::serve("uet-rm", uet_regs::since::UNTAGGED_UNEXPECTED - 1);
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    let info = getinfo(None, None, 0, Some(&hints)).expect("fi_getinfo");
    // SAFETY: the provider's answer, read, then freed once.
    let rm = unsafe {
        let rm = (*(*info).domain_attr).resource_mgmt;
        uet_fi::info::free_info(info);
        rm
    };
    assert_eq!(rm, FI_RM_DISABLED);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.domain_attr).resource_mgmt = FI_RM_ENABLED };
    assert_eq!(
        getinfo(None, None, 0, Some(&hints)).err(),
        Some(-(FiErrno::FI_ENODATA.get() as c_int)),
        "resource management this NIC does not give"
    );
}

/// On a NIC whose rings are smaller than the defaults (`CAP_QUEUES.max_queue_entries` 32),
/// `fi_getinfo` answers the ring sizes an endpoint opened with its answer gets (8-entry
/// transmit and receive rings, a quarter of the completion ring), not the defaults, and
/// refuses hints asking for more. (The provider opens one NIC per process, here one served
/// over vfio-user with small rings: the test runs in a process of its own.)
#[test]
fn fi_getinfo_answers_the_ring_sizes_of_a_nic_with_small_rings() {
    if !common::in_own_process("fi_getinfo_answers_the_ring_sizes_of_a_nic_with_small_rings") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("uet-small-rings-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nic.sock");
    let fabric = uet_sim::Fabric::new();
    let mut config = uet_sim::NicConfig::new("10.0.0.1".parse().unwrap());
    config.max_queue_entries = 32;
    let function = fabric.add_nic(config).unwrap();
    let server =
        std::sync::Arc::new(uet_sim::vfio_user::VfioUserServer::bind(function, &path).unwrap());
    let _serving = std::thread::spawn(move || server.serve_one());
    std::env::set_var(
        uet_fi::device::DEVICE_VAR,
        format!("vfio-user:{}", path.display()),
    );
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    let info = getinfo(None, None, 0, Some(&hints)).expect("fi_getinfo");
    // SAFETY: the provider's answer, read, then freed once.
    let sizes = unsafe {
        let sizes = ((*(*info).tx_attr).size, (*(*info).rx_attr).size);
        uet_fi::info::free_info(info);
        sizes
    };
    assert_eq!(sizes, (8, 8), "the rings an endpoint gets on this NIC");
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.rx_attr).size = 16 };
    assert_eq!(
        getinfo(None, None, 0, Some(&hints)).err(),
        Some(-(FiErrno::FI_ENODATA.get() as c_int)),
        "a receive ring larger than the NIC gives"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A message of `len` bytes whose bytes differ from their neighbours'.
fn patterned(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + seed) % 253) as u8).collect()
}

/// `ep_attr->max_msg_size` of a reliable endpoint is the NIC's largest message (1 MiB), and
/// every message up to it travels whole, longer than an endpoint's small buffers
/// (`MSG_BUF_BYTES`): untagged ones gathered from two iovecs and scattered into three,
/// tagged ones, and one of exactly `max_msg_size`. One byte more is `-FI_EMSGSIZE`, nothing
/// sent.
#[test]
fn messages_longer_than_a_small_buffer_up_to_max_msg_size_travel_whole() {
    let pair = Pair::new(0);
    // SAFETY: the provider's answer, read only.
    let max = unsafe { (*(*pair._open.info).ep_attr).max_msg_size };
    assert_eq!(max, 1 << 20);
    let small = uet_fi::ep::MSG_BUF_BYTES;
    for (n, len) in [small + 1, 100_000, max].into_iter().enumerate() {
        let message = patterned(len, n);
        let mut rbuf = vec![0u8; len];
        let (a, rest) = rbuf.split_at_mut(len / 3);
        let (b, c) = rest.split_at_mut(len / 3);
        let riov = [a, b, c].map(|part| IoVec {
            iov_base: part.as_mut_ptr().cast(),
            iov_len: part.len(),
        });
        // SAFETY: an open endpoint; the buffers outlive the receive, read below.
        let ret =
            unsafe { (pair.msg(1).recvv)(pair.p[1].ep, riov.as_ptr(), null_mut(), 3, 0, 5 as _) };
        assert_eq!(ret, 0, "{len}");
        let (x, y) = message.split_at(len / 2);
        let siov = [x, y].map(|part| IoVec {
            iov_base: part.as_ptr().cast_mut().cast(),
            iov_len: part.len(),
        });
        let to = pair.p[1].addr;
        // SAFETY: an open endpoint; the iovecs are read during the call.
        let ret =
            unsafe { (pair.msg(0).sendv)(pair.p[0].ep, siov.as_ptr(), null_mut(), 2, to, 6 as _) };
        assert_eq!(ret, 0, "{len}");
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(6), "{len}");
        let e = pair.wait(1).expect("the receive");
        assert_eq!((e.op_context as usize, e.len), (5, len));
        assert_eq!(e.flags, FI_RECV | FI_MSG);
        assert!(rbuf == message, "{len} bytes arrived changed");
    }
    // Tagged: 300,000 bytes.
    let message = patterned(300_000, 9);
    let mut rbuf = vec![0u8; message.len()];
    // SAFETY: an open endpoint; `rbuf` outlives the receive, read below.
    assert_eq!(unsafe { trecv_on(pair.p[1].ep, &mut rbuf, 0x77, 7) }, 0);
    assert_eq!(tsend(pair.p[0].ep, &message, pair.p[1].addr, 0x77, 8), 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(8));
    // The pair's CQs are of FI_CQ_FORMAT_DATA: no tag in the entry.
    let e = pair.wait(1).expect("the tagged receive");
    assert_eq!(
        (e.op_context as usize, e.len, e.flags),
        (7, message.len(), FI_RECV | FI_TAGGED)
    );
    assert!(rbuf == message);
    // One byte more than max_msg_size.
    let long = vec![1u8; max + 1];
    assert_eq!(pair.send(0, &long, 9), neg(FiErrno::FI_EMSGSIZE));
    assert_eq!(
        tsend(pair.p[0].ep, &long, pair.p[1].addr, 1, 9),
        neg(FiErrno::FI_EMSGSIZE)
    );
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// A receive takes a buffer as large as its iovecs, from the class of large buffers that
/// holds it: `LARGE_CLASS_BYTES` of them per class, four of 1 MiB, of which receives take
/// all but one, left to a send. With every buffer of a size receives may take posted, a
/// receive of that size is `-FI_EAGAIN` and posts nothing, while smaller
/// ones still find theirs; once a receive completes (here withdrawn by `fi_cancel`), the
/// next one is posted and a message fills it.
#[test]
fn with_every_buffer_of_its_size_in_use_a_receive_is_eagain_until_one_completes() {
    let pair = Pair::new(0);
    let max = 1 << 20;
    let room = uet_fi::ep::LARGE_CLASS_BYTES / max - 1;
    assert_eq!(room, 3);
    let mut bufs: Vec<Vec<u8>> = (0..=room).map(|_| vec![0u8; max]).collect();
    for (k, buf) in bufs.iter_mut().enumerate().take(room) {
        // SAFETY: an open endpoint; the buffers outlive their receives (the pair closes
        // first).
        assert_eq!(unsafe { pair.post_recv(1, buf, 10 + k) }, 0, "receive {k}");
    }
    let (held, spare) = bufs.split_at_mut(room);
    // SAFETY: as above; refused, so nothing keeps the buffer.
    let ret = unsafe { pair.post_recv(1, &mut spare[0], 99) };
    assert_eq!(ret, neg(FiErrno::FI_EAGAIN));
    // 600 KiB needs a buffer of the same class: none is free either.
    // SAFETY: as above.
    let ret = unsafe { pair.post_recv(1, &mut spare[0][..600 << 10], 98) };
    assert_eq!(ret, neg(FiErrno::FI_EAGAIN));
    // 300,000 bytes fit the 512 KiB class.
    let mut mid = vec![0u8; 300_000];
    // SAFETY: as above.
    assert_eq!(unsafe { pair.post_recv(1, &mut mid, 20) }, 0);
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
    // The first receive withdrawn, its buffer is free again.
    assert_eq!(cancel(pair.p[1].ep, 10), 0);
    assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair.readerr(1).expect("the canceled receive");
    assert_eq!(
        (e.err as u32, e.op_context as usize),
        (FiErrno::FI_ECANCELED.get(), 10)
    );
    // SAFETY: as above.
    assert_eq!(unsafe { pair.post_recv(1, &mut spare[0], 14) }, 0);
    // Messages take the receives in order: the two still posted, then the 300,000-byte
    // one (the first message that fits it), then the new one.
    let messages: Vec<Vec<u8>> = (0..4)
        .map(|k| patterned(if k == 2 { 300_000 } else { max }, k))
        .collect();
    let mut order = Vec::new();
    for (k, m) in messages.iter().enumerate() {
        assert_eq!(pair.send(0, m, 30 + k), 0, "send {k}");
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(30 + k));
        let e = pair.wait(1).expect("a receive");
        assert_eq!(e.len, m.len());
        order.push(e.op_context as usize);
    }
    assert_eq!(order, [11, 12, 20, 14]);
    assert!(held[1] == messages[0] && held[2] == messages[1]);
    assert!(mid == messages[2] && spare[0] == messages[3]);
}

/// A connected endpoint (`FI_EP_MSG`) carries messages up to its `max_msg_size` as an
/// `FI_EP_RDM` one does, both ways.
#[test]
fn a_connection_carries_messages_up_to_max_msg_size_both_ways() {
    let c = Connected::new(FI_WAIT_UNSPEC, None);
    for (from, to, cq_to, cq_from, len) in [
        (c.client, c.server, c.cq_s, c.cq_c, 200_000),
        (c.server, c.client, c.cq_c, c.cq_s, 1 << 20),
    ] {
        let message = patterned(len, len);
        let mut rbuf = vec![0u8; len];
        // SAFETY: an open endpoint; `rbuf` outlives the receive, read below.
        assert_eq!(unsafe { recv_on(to, &mut rbuf) }, 0);
        assert_eq!(send_on(from, &message), 0);
        assert!(cq_wait(cq_from).is_ok(), "the send of {len}");
        assert_eq!(cq_wait(cq_to).map(|e| e.len), Ok(len));
        assert!(rbuf == message, "{len} bytes");
    }
}

/// `fi_recvmsg` on peer `i` of one buffer `buf` with `flags` and `context`: its return.
///
/// # Safety
/// `buf` outlives the receive's completions.
unsafe fn recvmsg_one(pair: &Pair, i: usize, buf: &mut [u8], flags: u64, context: usize) -> isize {
    // SAFETY: the caller's promise.
    unsafe { recvmsg_on(pair.p[i].ep, buf, flags, context) }
}

/// `fi_recvmsg` on `ep` (an endpoint or receive context) of one buffer `buf` with `flags`
/// and `context`: its return.
///
/// # Safety
/// `ep` is open; `buf` outlives the receive's completions.
unsafe fn recvmsg_on(ep: *mut FidEp, buf: &mut [u8], flags: u64, context: usize) -> isize {
    let iov = IoVec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let m = FiMsg {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: u64::MAX,
        context: context as _,
        data: 0,
    };
    // SAFETY: an open endpoint (the caller's promise); the message is read during the call,
    // the buffer kept by the caller.
    unsafe { ((*(*ep).msg).recvmsg)(ep, &m, flags) }
}

/// `fi_setopt(FI_OPT_ENDPOINT, optname)` of a `size_t` on `ep`, `optlen` as given.
fn setopt_size(ep: *mut FidEp, optname: c_int, value: usize, optlen: usize) -> c_int {
    // SAFETY: an open endpoint and its operations; `value` is read during the call.
    unsafe {
        ((*(*ep).ops).setopt)(
            &mut (*ep).fid,
            0,
            optname,
            (&raw const value).cast(),
            optlen,
        )
    }
}

/// `fi_getopt(FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV)` of `ep`.
fn min_multi_recv(ep: *mut FidEp) -> usize {
    let mut value = 0usize;
    let mut len = core::mem::size_of::<usize>();
    // SAFETY: an open endpoint and its operations; room for a size_t.
    let ret =
        unsafe { ((*(*ep).ops).getopt)(&mut (*ep).fid, 0, 0, (&raw mut value).cast(), &mut len) };
    assert_eq!(ret, 0);
    value
}

/// Where the NIC places the message after one that ended at `end` in a multi-receive buffer.
fn next_multi_offset(end: usize) -> usize {
    end.next_multiple_of(uet_fwif::datapath::MULTI_RECV_ALIGN as usize)
}

/// fi_msg(3) `FI_MULTI_RECV`: one buffer takes several messages, each completing on its own
/// with `buf` pointing where it lies in the application's buffer (one after another, each
/// 64-byte aligned) and its remote CQ data; the completion after which less than
/// `FI_OPT_MIN_MULTI_RECV` bytes are left carries `FI_MULTI_RECV`, and the next message
/// takes the next receive.
#[test]
fn a_multi_receive_buffer_takes_messages_one_after_another_until_min_multi_recv_is_left() {
    let pair = Pair::new(0);
    assert_eq!(setopt_size(pair.p[1].ep, 0, 200, 8), 0);
    assert_eq!(min_multi_recv(pair.p[1].ep), 200);
    let mut buf = vec![0u8; 1000];
    let base = buf.as_ptr() as usize;
    // SAFETY: `buf` outlives the receive, whose completions are read below.
    let ret = unsafe { recvmsg_one(&pair, 1, &mut buf, FI_MULTI_RECV, 7) };
    assert_eq!(ret, 0);
    let mut after = [0u8; 64];
    // SAFETY: as above.
    assert_eq!(unsafe { pair.post_recv(1, &mut after, 8) }, 0);
    let messages = [
        patterned(300, 1),
        patterned(200, 2),
        patterned(300, 3),
        patterned(40, 4),
    ];
    let mut at = 0;
    let mut offsets = Vec::new();
    for (k, m) in messages.iter().enumerate() {
        let to = pair.p[1].addr;
        // SAFETY: an open endpoint; the message is read during the call.
        let ret = unsafe {
            (pair.msg(0).senddata)(
                pair.p[0].ep,
                m.as_ptr().cast(),
                m.len(),
                null_mut(),
                0x100 + k as u64,
                to,
                20 as _,
            )
        };
        assert_eq!(ret, 0, "send {k}");
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
        let e = pair.wait(1).expect("a receive");
        assert_eq!((e.len, e.data), (m.len(), 0x100 + k as u64), "message {k}");
        if k < 3 {
            let released = if k == 2 { FI_MULTI_RECV } else { 0 };
            assert_eq!(
                (e.op_context as usize, e.buf as usize - base, e.flags),
                (7, at, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA | released),
                "message {k}"
            );
            offsets.push(at);
            at = next_multi_offset(at + m.len());
        } else {
            // 1000 - 876 = 124 bytes were left after the third: below 200, released.
            assert_eq!(e.op_context as usize, 8, "the next receive");
            assert!(after[..40] == m[..]);
        }
    }
    for (k, &offset) in offsets.iter().enumerate() {
        assert!(
            buf[offset..offset + messages[k].len()] == messages[k][..],
            "message {k} at {offset}"
        );
    }
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// A message longer than what a multi-receive buffer has left releases it with a completion
/// of no message (`len` 0, `FI_MULTI_RECV` alone, fi_cq(3)) and takes the next receive.
/// Under `FI_SELECTIVE_COMPLETION` a multi-receive buffer posted without `FI_COMPLETION`
/// reports none of its messages, but still its release: the application learns from it
/// that the buffer is its own again.
#[test]
fn a_message_that_does_not_fit_releases_the_buffer_which_selective_completion_still_reports() {
    for selective in [false, true] {
        let pair = Pair::new(if selective {
            FI_SELECTIVE_COMPLETION
        } else {
            0
        });
        assert_eq!(setopt_size(pair.p[1].ep, 0, 64, 8), 0);
        let flags = if selective { 0 } else { FI_COMPLETION };
        let mut buf = vec![0u8; 1000];
        let base = buf.as_ptr() as usize;
        // SAFETY: `buf` outlives the receive, whose completions are read below.
        let ret = unsafe { recvmsg_one(&pair, 1, &mut buf, FI_MULTI_RECV | flags, 7) };
        assert_eq!(ret, 0);
        let mut after = [0u8; 1000];
        // SAFETY: as above.
        let ret = unsafe { recvmsg_one(&pair, 1, &mut after, FI_COMPLETION, 8) };
        assert_eq!(ret, 0);
        let (first, second) = (patterned(600, 1), patterned(600, 2));
        // The flagless sends are reported only without selective completion.
        assert_eq!(pair.send(0, &first, 20), 0);
        if !selective {
            assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
            let e = pair.wait(1).expect("the first message");
            assert_eq!(
                (e.op_context as usize, e.len, e.buf as usize, e.flags),
                (7, 600, base, FI_RECV | FI_MSG)
            );
        }
        assert_eq!(pair.send(0, &second, 21), 0);
        if !selective {
            assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(21));
        }
        let release = pair.wait(1).expect("the release");
        assert_eq!(
            (release.op_context as usize, release.len, release.flags),
            (7, 0, FI_MULTI_RECV),
            "selective {selective}"
        );
        let e = pair.wait(1).expect("the second message");
        assert_eq!((e.op_context as usize, e.len), (8, 600));
        assert!(buf[..600] == first[..] && after[..600] == second[..]);
        assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
        assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
    }
}

/// An endpoint whose `rx_attr->op_flags` hold `FI_MULTI_RECV` posts a multi-receive buffer
/// with every flagless untagged receive (`fi_recv`).
#[test]
fn rx_op_flags_with_fi_multi_recv_make_fi_recv_post_a_multi_receive_buffer() {
    let pair = Pair::with_info(0, |i| {
        // SAFETY: the provider's own info, edited before the endpoints open.
        unsafe { (*i.rx_attr).op_flags |= FI_MULTI_RECV };
    });
    // Released once less than 64 bytes are left (by default, less than one MTU).
    assert_eq!(setopt_size(pair.p[1].ep, 0, 64, 8), 0);
    let mut buf = vec![0u8; 4096];
    let base = buf.as_ptr() as usize;
    // SAFETY: `buf` outlives the receive, whose completions are read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut buf, 7) }, 0);
    for (k, len) in [100usize, 100].into_iter().enumerate() {
        assert_eq!(pair.send(0, &patterned(len, k), 20), 0);
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
        let e = pair.wait(1).expect("a message");
        assert_eq!(
            (e.op_context as usize, e.buf as usize - base, e.len),
            (7, next_multi_offset(100) * k, 100),
            "message {k}"
        );
    }
    assert!(buf[..100] == patterned(100, 0)[..]);
    assert!(buf[128..228] == patterned(100, 1)[..]);
}

/// `fi_cancel` withdraws a multi-receive buffer: its one completion is an `FI_ECANCELED`
/// error entry carrying `FI_MULTI_RECV`, and what was placed in the buffer stays.
#[test]
fn fi_cancel_withdraws_a_multi_receive_buffer_keeping_what_was_placed_in_it() {
    let pair = Pair::new(0);
    assert_eq!(setopt_size(pair.p[1].ep, 0, 64, 8), 0);
    let mut buf = vec![0u8; 1000];
    // SAFETY: `buf` outlives the receive, whose completions are read below.
    let ret = unsafe { recvmsg_one(&pair, 1, &mut buf, FI_MULTI_RECV, 7) };
    assert_eq!(ret, 0);
    let message = patterned(100, 5);
    assert_eq!(pair.send(0, &message, 20), 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
    assert_eq!(
        pair.wait(1).map(|e| (e.op_context as usize, e.len)),
        Ok((7, 100))
    );
    assert_eq!(cancel(pair.p[1].ep, 7), 0);
    assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair.readerr(1).expect("the cancel");
    assert_eq!(
        (e.err as u32, e.op_context as usize, e.len),
        (FiErrno::FI_ECANCELED.get(), 7, 0)
    );
    assert_ne!(e.flags & FI_MULTI_RECV, 0, "flags {:#x}", e.flags);
    assert!(buf[..100] == message[..]);
    // Withdrawn: nothing more to cancel, and the next message waits for a receive.
    assert_eq!(cancel(pair.p[1].ep, 7), neg(FiErrno::FI_ENOENT));
}

/// What `FI_MULTI_RECV` and `FI_OPT_MIN_MULTI_RECV` refuse, each posting or changing
/// nothing: more than one iovec or an empty buffer (`-FI_EINVAL`), an endpoint opened
/// without the capability (`-FI_EBADFLAGS`), an option value of the wrong size or above
/// the NIC's 32 bits (`-FI_EINVAL`), and setting the read-only `FI_OPT_CM_DATA_SIZE` or an
/// unknown option (`-FI_ENOPROTOOPT`).
#[test]
fn fi_multi_recv_and_its_option_refuse_what_they_cannot_serve() {
    let pair = Pair::new(0);
    let ep = pair.p[1].ep;
    let mut a = [0u8; 64];
    let mut b = [0u8; 64];
    let iov = [&mut a, &mut b].map(|p| IoVec {
        iov_base: p.as_mut_ptr().cast(),
        iov_len: p.len(),
    });
    let m = FiMsg {
        msg_iov: iov.as_ptr(),
        desc: null_mut(),
        iov_count: 2,
        addr: u64::MAX,
        context: 7 as _,
        data: 0,
    };
    // SAFETY: an open endpoint; refused, so nothing keeps the buffers.
    let ret = unsafe { (pair.msg(1).recvmsg)(ep, &m, FI_MULTI_RECV) };
    assert_eq!(ret, neg(FiErrno::FI_EINVAL));
    // SAFETY: as above.
    let ret = unsafe { recvmsg_one(&pair, 1, &mut a[..0], FI_MULTI_RECV, 7) };
    assert_eq!(ret, neg(FiErrno::FI_EINVAL));
    let einval = ineg(FiErrno::FI_EINVAL);
    assert_eq!(setopt_size(ep, 0, 100, 4), einval);
    assert_eq!(setopt_size(ep, 0, (u32::MAX as usize) + 1, 8), einval);
    let mtu = usize::from(uet_sim::NicConfig::new([10, 0, 0, 1].into()).mtu);
    assert_eq!(min_multi_recv(ep), mtu, "unchanged");
    let enoprotoopt = ineg(FiErrno::FI_ENOPROTOOPT);
    assert_eq!(
        setopt_size(ep, 1, 100, 8),
        enoprotoopt,
        "FI_OPT_CM_DATA_SIZE"
    );
    assert_eq!(setopt_size(ep, 999, 100, 8), enoprotoopt);
    // Nothing was posted: a message finds no receive and waits.
    assert_eq!(pair.send(0, b"x", 20), 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
    // An endpoint opened with receive capabilities that leave FI_MULTI_RECV out.
    let plain = pair.endpoint_with_caps(FI_MSG | FI_RECV);
    let cq = pair._open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
    // SAFETY: an open endpoint and CQ; the buffer outlives nothing posted.
    unsafe {
        assert_eq!(bind(&mut (*plain).fid, &mut (*cq).fid, FI_RECV), 0);
        assert_eq!(
            ((*(*plain).fid.ops).control)(&mut (*plain).fid, FI_ENABLE, null_mut()),
            0
        );
        let ret = recvmsg_on(plain, &mut a, FI_MULTI_RECV, 7);
        assert_eq!(ret, neg(FiErrno::FI_EBADFLAGS));
        close_all(&[&mut (*plain).fid, &mut (*cq).fid]);
    }
}

/// The messages the NIC's unexpected list holds per endpoint (`CAP_TAGGED.unexpected_entries`
/// of the simulated NIC).
const UNEXPECTED_ENTRIES: usize = 64;

/// Fill peer 1's unexpected list with one-byte messages from peer 0 (contexts from 1000):
/// the next message that finds no receive is refused at the target (`RC_UNDELIVERABLE`).
fn fill_unexpected_list(pair: &Pair) {
    for k in 0..UNEXPECTED_ENTRIES {
        assert_eq!(pair.send(0, &[k as u8], 1000 + k), 0);
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(1000 + k));
    }
}

/// Take the messages of [`fill_unexpected_list`] with one-byte receives on peer 1, each
/// completing in turn with its message. Peer 0's CQ is not read, so no refused send of its
/// is posted again meanwhile.
fn take_unexpected_list(pair: &Pair) {
    for k in 0..UNEXPECTED_ENTRIES {
        let mut b = [0u8; 1];
        // SAFETY: `b` outlives the receive, whose completion is read before it goes.
        assert_eq!(unsafe { pair.post_recv(1, &mut b, 2000 + k) }, 0);
        let e = pair.wait(1).expect("a waiting message");
        assert_eq!((e.op_context as usize, e.len, b[0]), (2000 + k, 1, k as u8));
    }
}

/// Once [`take_unexpected_list`] has emptied the list, a receive on peer 1 takes the
/// seven-byte message peer 0 sent with context 20 and kept retrying: both complete.
fn the_retried_message_is_taken(pair: &Pair) {
    take_unexpected_list(pair);
    let mut rbuf = [0u8; 16];
    // SAFETY: `rbuf` outlives the receive, whose completion is read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 7) }, 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
    assert_eq!(pair.wait(1).map(|e| e.len), Ok(7));
}

/// fi_domain(3), `FI_RM_ENABLED`: a reliable endpoint's message that finds no receive buffer
/// is "retried", not a transmit error. One that finds the target's unexpected list full is
/// refused there (`RC_UNDELIVERABLE`), and its sender posts it again, later and later, as its
/// CQ is read: its send completes once a receive is posted and takes it, whole.
#[test]
fn a_message_that_finds_the_unexpected_list_full_is_retried_until_a_receive_takes_it() {
    let pair = Pair::new(0);
    fill_unexpected_list(&pair);
    let message = patterned(200_000, 3);
    assert_eq!(pair.send(0, &message, 20), 0);
    // Refused and retried for a while: no completion on either side.
    let end = std::time::Instant::now() + std::time::Duration::from_millis(50);
    while std::time::Instant::now() < end {
        assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
    take_unexpected_list(&pair);
    let mut rbuf = vec![0u8; message.len()];
    // SAFETY: `rbuf` outlives the receive, whose completion is read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 7) }, 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
    let e = pair.wait(1).expect("the retried message");
    assert_eq!((e.op_context as usize, e.len), (7, message.len()));
    assert!(rbuf == message);
}

/// A sender that runs far ahead of its receiver, beyond what the unexpected list holds
/// (100 messages against 64), loses nothing: each message waits on the list or at its
/// sender, and all arrive once the receives are posted.
#[test]
fn a_sender_far_ahead_of_its_receiver_loses_nothing_beyond_the_unexpected_list() {
    const N: usize = 100;
    let pair = Pair::new(0);
    let messages: Vec<Vec<u8>> = (0..N).map(|k| patterned(20_000, k)).collect();
    let mut sent = Vec::new();
    for (k, m) in messages.iter().enumerate() {
        let ret = loop {
            let ret = pair.send(0, m, 100 + k);
            if ret != neg(FiErrno::FI_EAGAIN) {
                break ret;
            }
            sent.extend(pair.read(0).ok().map(|e| e.op_context as usize - 100));
        };
        assert_eq!(ret, 0, "send {k}");
    }
    // Some are refused and retried as the sender's CQ is read.
    for _ in 0..20 {
        match pair.read(0) {
            Ok(e) => sent.push(e.op_context as usize - 100),
            Err(e) => assert_eq!(e, neg(FiErrno::FI_EAGAIN), "a send failed"),
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(
        sent.len() < N,
        "the list holds {UNEXPECTED_ENTRIES}, not {N}"
    );
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; 20_000]).collect();
    let mut received = Vec::new();
    for (k, b) in bufs.iter_mut().enumerate() {
        loop {
            // SAFETY: the buffers outlive their receives, whose completions are read below.
            let ret = unsafe { pair.post_recv(1, b, k) };
            if ret == 0 {
                break;
            }
            assert_eq!(ret, neg(FiErrno::FI_EAGAIN), "receive {k}");
            received.extend(pair.read(1).ok().map(|e| e.op_context as usize));
            sent.extend(pair.read(0).ok().map(|e| e.op_context as usize - 100));
        }
    }
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while (sent.len() < N || received.len() < N) && std::time::Instant::now() < end {
        match pair.read(0) {
            Ok(e) => sent.push(e.op_context as usize - 100),
            Err(e) => assert_eq!(e, neg(FiErrno::FI_EAGAIN), "a send failed"),
        }
        match pair.read(1) {
            Ok(e) => {
                assert_eq!(e.len, 20_000);
                received.push(e.op_context as usize);
            }
            Err(e) => assert_eq!(e, neg(FiErrno::FI_EAGAIN), "a receive failed"),
        }
    }
    sent.sort_unstable();
    received.sort_unstable();
    assert_eq!(sent, (0..N).collect::<Vec<_>>());
    assert_eq!(received, (0..N).collect::<Vec<_>>());
    // Each message whole, in some receive: messages travel unordered.
    let mut got: Vec<&Vec<u8>> = bufs.iter().collect();
    let mut want: Vec<&Vec<u8>> = messages.iter().collect();
    got.sort();
    want.sort();
    assert!(got == want, "the messages arrived changed");
}

/// `FI_UET_RNR_TIMEOUT` bounds the retries: a message no receive takes within that many
/// milliseconds completes with the target's refusal, `FI_ENORX` (`RC_UNDELIVERABLE`), and a
/// later one is tried afresh.
#[test]
fn fi_uet_rnr_timeout_bounds_how_long_a_refused_message_is_retried() {
    // The variable is the process's: no other test may see it.
    if !common::in_own_process("fi_uet_rnr_timeout_bounds_how_long_a_refused_message_is_retried") {
        return;
    }
    std::env::set_var(uet_fi::ep::RETRY_TIMEOUT_VAR, "100");
    let pair = Pair::new(0);
    fill_unexpected_list(&pair);
    let message = patterned(200_000, 4);
    let start = std::time::Instant::now();
    assert_eq!(pair.send(0, &message, 20), 0);
    let ret = loop {
        match pair.read(0) {
            Err(e) if e == neg(FiErrno::FI_EAGAIN) => {
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(10),
                    "no end"
                );
                std::thread::yield_now();
            }
            other => break other,
        }
    };
    assert!(start.elapsed() >= std::time::Duration::from_millis(100));
    assert_eq!(ret.err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair.readerr(0).expect("the refusal");
    assert_eq!(
        (e.err as u32, e.op_context as usize),
        (FiErrno::FI_ENORX.get(), 20)
    );
    // The bound is per message: the next one is tried afresh, and taken once the list's
    // messages have receives and its own is posted.
    assert_eq!(pair.send(0, &message, 21), 0);
    take_unexpected_list(&pair);
    let mut rbuf = vec![0u8; message.len()];
    // SAFETY: `rbuf` outlives the receive, whose completion is read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 7) }, 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(21));
    assert_eq!(
        pair.wait(1).map(|e| (e.op_context as usize, e.len)),
        Ok((7, message.len()))
    );
    assert!(rbuf == message);
}

/// `FI_UET_RNR_TIMEOUT`'s values: milliseconds; unset, `0` or beyond 64 bits for no bound;
/// anything else taken as unset.
#[test]
fn fi_uet_rnr_timeout_is_milliseconds_or_no_bound() {
    use std::time::Duration;
    use uet_fi::ep::retry_timeout;
    assert_eq!(retry_timeout(None), None);
    assert_eq!(retry_timeout(Some("0")), None);
    assert_eq!(
        retry_timeout(Some(" 250 ")),
        Some(Duration::from_millis(250))
    );
    assert_eq!(retry_timeout(Some("99999999999999999999999")), None);
    assert_eq!(retry_timeout(Some("soon")), None);
}

/// A send whose length no buffer holds, up to lengths no memory could, is `-FI_EMSGSIZE`
/// before anything of the application's is read: `fi_send`, `fi_sendv` (iovecs whose total
/// overflows too) and `fi_inject`, nothing posted.
#[test]
fn a_send_of_a_length_no_memory_holds_is_emsgsize_and_reads_nothing() {
    let pair = Pair::new(0);
    let byte = [0u8; 1];
    for len in [(1 << 20) + 1, isize::MAX as usize, usize::MAX] {
        // SAFETY: an open endpoint; the length is refused before the buffer is read.
        let ret = unsafe {
            (pair.msg(0).send)(
                pair.p[0].ep,
                byte.as_ptr().cast(),
                len,
                null_mut(),
                pair.p[1].addr,
                null_mut(),
            )
        };
        assert_eq!(ret, neg(FiErrno::FI_EMSGSIZE), "fi_send of {len}");
        // SAFETY: as above.
        let ret = unsafe {
            (pair.msg(0).inject)(pair.p[0].ep, byte.as_ptr().cast(), len, pair.p[1].addr)
        };
        assert_eq!(ret, neg(FiErrno::FI_EMSGSIZE), "fi_inject of {len}");
    }
    let iov = [usize::MAX, 2].map(|len| IoVec {
        iov_base: byte.as_ptr().cast_mut().cast(),
        iov_len: len,
    });
    // SAFETY: an open endpoint; the lengths are refused before the buffers are read.
    let ret = unsafe {
        (pair.msg(0).sendv)(
            pair.p[0].ep,
            iov.as_ptr(),
            null_mut(),
            2,
            pair.p[1].addr,
            null_mut(),
        )
    };
    assert_eq!(ret, neg(FiErrno::FI_EMSGSIZE));
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// Under `FI_RM_ENABLED` an `fi_inject` that finds its target's unexpected list full is
/// retried as a send is: the endpoint kept its message, which arrives once a receive is
/// posted, and its success is reported nowhere, as an inject's never is.
#[test]
fn an_inject_that_finds_the_unexpected_list_full_is_retried_and_reports_nothing() {
    let pair = Pair::new(0);
    fill_unexpected_list(&pair);
    let payload = b"late inject";
    // SAFETY: an open endpoint; the payload is copied at the call.
    let ret = unsafe {
        (pair.msg(0).inject)(
            pair.p[0].ep,
            payload.as_ptr().cast(),
            payload.len(),
            pair.p[1].addr,
        )
    };
    assert_eq!(ret, 0);
    for _ in 0..20 {
        assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    take_unexpected_list(&pair);
    let mut rbuf = [0u8; 32];
    // SAFETY: `rbuf` outlives the receive, whose completion is read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 7) }, 0);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let e = loop {
        assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
        match pair.read(1) {
            Ok(e) => break e,
            Err(e) => assert_eq!(e, neg(FiErrno::FI_EAGAIN)),
        }
        assert!(std::time::Instant::now() < end, "the inject never arrived");
    };
    assert_eq!((e.op_context as usize, e.len), (7, payload.len()));
    assert_eq!(&rbuf[..payload.len()], payload);
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// A receive context of a scalable endpoint posts multi-receive buffers as an endpoint does,
/// with its own `FI_OPT_MIN_MULTI_RECV`.
#[test]
fn a_receive_context_of_a_scalable_endpoint_posts_a_multi_receive_buffer() {
    let s = Scalable::new();
    let (ctx, cq) = s.rx[1];
    assert_eq!(setopt_size(ctx, 0, 64, 8), 0);
    assert_eq!(min_multi_recv(ctx), 64);
    let mut buf = vec![0u8; 1024];
    let base = buf.as_ptr() as usize;
    // SAFETY: an open receive context; `buf` outlives the receive, whose completions are
    // read below.
    assert_eq!(unsafe { recvmsg_on(ctx, &mut buf, FI_MULTI_RECV, 9) }, 0);
    for (k, text) in [&b"first"[..], b"second"].into_iter().enumerate() {
        assert_eq!(send_to(s.peer.0, text, s.rx_addr(1), 0), 0);
        assert!(cq_wait(s.peer.1).is_ok());
        let e = cq_wait(cq).expect("a message of the multi-receive buffer");
        assert_eq!(
            (e.op_context as usize, e.buf as usize - base, e.len),
            (9, next_multi_offset(5) * k, text.len())
        );
        assert_eq!(&buf[e.buf as usize - base..][..text.len()], text);
    }
}

/// A datagram endpoint posts multi-receive buffers too: datagrams land one after another in
/// one buffer, each completing on its own.
#[test]
fn a_datagram_endpoint_takes_datagrams_into_a_multi_receive_buffer() {
    let pair = Pair::with_info(0, as_dgram);
    assert_eq!(setopt_size(pair.p[1].ep, 0, 64, 8), 0);
    let mut buf = vec![0u8; 2048];
    let base = buf.as_ptr() as usize;
    // SAFETY: `buf` outlives the receive, whose completions are read below.
    let ret = unsafe { recvmsg_one(&pair, 1, &mut buf, FI_MULTI_RECV, 7) };
    assert_eq!(ret, 0);
    for k in 0..3 {
        let d = patterned(300, k);
        assert_eq!(pair.send(0, &d, 20), 0);
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
        let e = pair.wait(1).expect("a datagram");
        assert_eq!(
            (e.op_context as usize, e.buf as usize - base, e.len),
            (7, next_multi_offset(300) * k, 300)
        );
        let at = e.buf as usize - base;
        assert!(buf[at..at + 300] == d[..]);
    }
}

/// A receive counter counts each message of a multi-receive buffer, as it counts a
/// receive's, and not the buffer's release without a message, which transfers nothing;
/// a cancel of the buffer counts as an error, as a cancelled receive's does.
#[test]
fn a_receive_counter_counts_each_message_of_a_multi_receive_buffer_not_its_release() {
    let pair = Pair::with_counters(0, FI_WAIT_UNSPEC, |_| {}, 1, [&[], &[(0, FI_RECV)]]);
    let rx = pair.cntrs[0];
    assert_eq!(setopt_size(pair.p[1].ep, 0, 64, 8), 0);
    let mut buf = vec![0u8; 1000];
    // SAFETY: `buf` outlives the receive, whose completions are read below.
    let ret = unsafe { recvmsg_one(&pair, 1, &mut buf, FI_MULTI_RECV, 7) };
    assert_eq!(ret, 0);
    let mut after = [0u8; 1000];
    // SAFETY: as above.
    let ret = unsafe { recvmsg_one(&pair, 1, &mut after, FI_MULTI_RECV, 8) };
    assert_eq!(ret, 0);
    for (k, len) in [600usize, 600].into_iter().enumerate() {
        assert_eq!(pair.send(0, &patterned(len, k), 20), 0);
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(20));
    }
    // The first message, the first buffer's release (the second did not fit), the second.
    let seen: Vec<_> = (0..3)
        .map(|_| {
            pair.wait(1)
                .map(|e| (e.op_context as usize, e.len, e.flags & FI_MULTI_RECV))
        })
        .collect();
    assert_eq!(
        seen,
        [Ok((7, 600, 0)), Ok((7, 0, FI_MULTI_RECV)), Ok((8, 600, 0))]
    );
    assert_eq!((cntr_read(rx), cntr_readerr(rx)), (2, 0));
    assert_eq!(cancel(pair.p[1].ep, 8), 0);
    assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
    assert!(pair.readerr(1).is_ok());
    assert_eq!((cntr_read(rx), cntr_readerr(rx)), (2, 1));
}

/// A thread asleep in `fi_cq_sread` on the CQ of a send being retried drives the retries:
/// the send completes, and the thread wakes with it, once the receiver posts a receive,
/// though no other call reads the sender's CQ.
#[test]
fn a_thread_in_fi_cq_sread_carries_a_refused_send_to_its_completion() {
    let pair = Pair::new(0);
    fill_unexpected_list(&pair);
    let message = patterned(100_000, 6);
    assert_eq!(pair.send(0, &message, 20), 0);
    let cq = Shared(pair.p[0].cq);
    let waiter = std::thread::spawn(move || {
        let cq = cq.get();
        // SAFETY: a plain-data structure.
        let mut e: FiCqTaggedEntry = unsafe { core::mem::zeroed() };
        // SAFETY: an open CQ, which the pair closes after this thread is joined; room for
        // one entry of any format.
        let ret = unsafe { ((*(*cq).ops).sread)(cq, (&raw mut e).cast(), 1, null(), 10_000) };
        (ret, e.op_context as usize)
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    take_unexpected_list(&pair);
    let mut rbuf = vec![0u8; message.len()];
    // SAFETY: `rbuf` outlives the receive, whose completion is read below.
    assert_eq!(unsafe { pair.post_recv(1, &mut rbuf, 7) }, 0);
    let (ret, context) = waiter.join().expect("the waiter");
    assert_eq!((ret, context), (1, 20));
    assert_eq!(
        pair.wait(1).map(|e| (e.op_context as usize, e.len)),
        Ok((7, message.len()))
    );
    assert!(rbuf == message);
}

/// A send its target refused for want of a receive buffer, waiting to be posted again when
/// its connection is shut down, completes with the error the post gets (`FI_ENOTCONN`): it
/// is not retried for good, and completes once.
#[test]
fn a_refused_send_waiting_for_its_retry_completes_once_its_connection_is_shut_down() {
    let c = Connected::new(FI_WAIT_UNSPEC, None);
    for k in 0..UNEXPECTED_ENTRIES {
        assert_eq!(send_on(c.client, &[k as u8]), 0);
        assert!(cq_wait(c.cq_c).is_ok(), "message {k} waits at the server");
    }
    assert_eq!(send_on(c.client, b"refused"), 0);
    // Refused and retried for a while: no completion.
    let end = std::time::Instant::now() + std::time::Duration::from_millis(30);
    while std::time::Instant::now() < end {
        assert_eq!(cq_read(c.cq_c).err(), Some(neg(FiErrno::FI_EAGAIN)));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    c.shut_down_by_client();
    let e = cq_error(c.cq_c);
    assert_eq!(e.err as u32, FiErrno::FI_ENOTCONN.get());
    assert_eq!(cq_read(c.cq_c).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// A scalable endpoint opened with `FI_MULTI_RECV` serves multi-receive buffers on its
/// receive contexts, opened with no attributes or with `rx_attr->caps` naming the
/// capability: each takes several messages into one buffer, as an endpoint does.
#[test]
fn a_receive_context_of_a_scalable_endpoint_with_fi_multi_recv_takes_multi_receive_buffers() {
    let s = Scalable::with(FI_MULTI_RECV, |i| {
        if i == 1 {
            FI_MSG | FI_RECV | FI_MULTI_RECV
        } else {
            0
        }
    });
    for i in [0usize, 1] {
        let (ctx, cq) = s.rx[i];
        // Released once less than 64 bytes are left (by default, less than one MTU).
        assert_eq!(setopt_size(ctx, 0, 64, 8), 0);
        let mut buf = vec![0u8; 1000];
        let base = buf.as_ptr() as usize;
        // SAFETY: an open context; `buf` outlives the receive, whose completions are read
        // below.
        let ret = unsafe { recvmsg_on(ctx, &mut buf, FI_MULTI_RECV, 7) };
        assert_eq!(
            ret, 0,
            "fi_recvmsg with FI_MULTI_RECV on receive context {i}"
        );
        let messages = [patterned(100, i), patterned(100, i + 10)];
        for (k, msg) in messages.iter().enumerate() {
            assert_eq!(send_to(s.peer.0, msg, s.rx_addr(i as u32), 20), 0);
            assert!(cq_wait(s.peer.1).is_ok(), "the send of {k}");
            let e = cq_wait(cq).unwrap_or_else(|r| panic!("context {i}, message {k}: {r}"));
            assert_eq!(
                (e.op_context as usize, e.len, e.buf as usize - base),
                (7, 100, next_multi_offset(100) * k),
                "context {i}, message {k}"
            );
        }
        assert!(buf[..100] == messages[0][..] && buf[128..228] == messages[1][..]);
        assert_eq!(cancel(ctx, 7), 0);
        let e = cq_error(cq);
        assert_eq!(e.err as u32, FiErrno::FI_ECANCELED.get());
        assert_ne!(e.flags & FI_MULTI_RECV, 0);
    }
}

/// Send one-byte messages from peer 0 (contexts from 5000) until `refusals` sends in a row
/// are `-FI_EAGAIN` (each after a read of peer 0's CQ, which finds nothing): the sends
/// taken, each refused at peer 1 (its unexpected list full) and waiting for its retry.
fn send_until_refused(pair: &Pair, refusals: usize) -> usize {
    let mut accepted = 0usize;
    let mut refused = 0;
    while refused < refusals {
        assert!(accepted < 100_000, "sends are never refused");
        match pair.send(0, b"x", 5000 + accepted) {
            0 => {
                accepted += 1;
                refused = 0;
            }
            r => {
                assert_eq!(r, neg(FiErrno::FI_EAGAIN), "send {accepted}");
                assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
                refused += 1;
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }
    accepted
}

/// Sends waiting to be posted again after their target refused them are outstanding sends:
/// no more are taken than the transmit queue holds (`tx_attr->size`), `-FI_EAGAIN` beyond,
/// so they never take the buffers the endpoint's receives need: a receive is still posted.
#[test]
fn sends_waiting_for_a_retry_fill_the_transmit_queue_and_leave_receives_their_buffers() {
    let pair = Pair::new(0);
    // SAFETY: the info the endpoints were opened with.
    let tx_size = unsafe { (*(*pair._open.info).tx_attr).size };
    fill_unexpected_list(&pair);
    // Peer 0 sends until the sends are refused for good: each is refused at peer 1 and
    // waits for its retry.
    let accepted = send_until_refused(&pair, 50);
    assert!(
        accepted <= tx_size,
        "{accepted} sends outstanding, tx_attr->size {tx_size}"
    );
    let mut rbuf = [0u8; 8];
    // SAFETY: `rbuf` outlives the pair, which closes first.
    assert_eq!(unsafe { pair.post_recv(0, &mut rbuf, 1) }, 0, "a receive");
    drop(pair);
}

/// fi_endpoint(3): the operations outstanding when an endpoint closes are discarded. A
/// transmit context's send refused by its target and waiting for its retry is one: closing
/// the context does not post it again, so it never reaches the target, even once the
/// target has room for it.
#[test]
fn closing_a_transmit_context_discards_its_sends_waiting_for_a_retry() {
    let mut s = Scalable::new();
    let (tx, cq) = s.tx[0];
    let (peer, peer_cq) = s.peer;
    for k in 0..UNEXPECTED_ENTRIES {
        assert_eq!(send_to(tx, &[k as u8], s.peer_addr, 1000 + k), 0);
        assert!(cq_wait(cq).is_ok(), "message {k} waits at the peer");
    }
    assert_eq!(send_to(tx, b"refused", s.peer_addr, 20), 0);
    // Refused and retried for a while; the last reads leave it waiting for its next try.
    let end = std::time::Instant::now() + std::time::Duration::from_millis(30);
    while std::time::Instant::now() < end {
        assert_eq!(cq_read(cq).err(), Some(neg(FiErrno::FI_EAGAIN)));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for _ in 0..2 {
        assert_eq!(cq_read(cq).err(), Some(neg(FiErrno::FI_EAGAIN)));
    }
    // The peer makes room for one message, and the retry comes due.
    let mut first = [0u8; 16];
    // SAFETY: `first` outlives the receive, whose completion is read below.
    assert_eq!(unsafe { post(peer, &mut first, None, 2000) }, 0);
    assert_eq!(cq_wait(peer_cq).map(|e| e.len), Ok(1));
    std::thread::sleep(std::time::Duration::from_millis(40));
    // SAFETY: ours, open, closed once; its index opens again for the scalable endpoint's
    // close.
    unsafe {
        assert_eq!(close(&mut (*tx).fid), 0);
        let again = context(s.sep, true, 0).expect("fi_tx_context again");
        assert_eq!(bind(&mut (*again).fid, &mut (*cq).fid, FI_TRANSMIT), 0);
        assert_eq!(enable(again), 0);
        s.tx[0].0 = again;
    }
    // The peer takes what waits for it: the 63 messages sent before, and nothing more.
    let mut bufs = vec![[0u8; 16]; UNEXPECTED_ENTRIES];
    for (k, b) in bufs.iter_mut().enumerate() {
        // SAFETY: the buffers outlive the scalable endpoint's peer, which closes first.
        assert_eq!(unsafe { post(peer, b, None, 3000 + k) }, 0);
        if k + 1 < UNEXPECTED_ENTRIES {
            let e = cq_wait(peer_cq).expect("a message sent before the close");
            assert_eq!(e.len, 1, "receive {k}");
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let late = cq_read(peer_cq).map(|e| (e.len, e.op_context as usize));
    assert_eq!(
        late,
        Err(neg(FiErrno::FI_EAGAIN)),
        "the discarded send arrived"
    );
    drop(s);
    drop(bufs);
}

/// Receives of the longest messages take no more of the endpoint's buffers of that size than
/// leaves one to a send: two peers that each post as many such receives as they are given
/// (`-FI_EAGAIN` past them) still send each other such a message, rather than each send
/// being `-FI_EAGAIN` until a receive completes, which only the other's send would make.
#[test]
fn receives_of_the_longest_messages_leave_a_buffer_to_send_one() {
    let pair = Pair::new(0);
    // SAFETY: the info the endpoints were opened with.
    let len = unsafe { (*(*pair._open.info).ep_attr).max_msg_size };
    let mut bufs: Vec<Vec<Vec<u8>>> = vec![Vec::new(), Vec::new()];
    for (i, held) in bufs.iter_mut().enumerate() {
        for k in 0..64 {
            let mut b = vec![0u8; len];
            // SAFETY: each buffer is kept (moved, its heap block unchanged) until the pair,
            // which closes first, is dropped.
            let r = unsafe { pair.post_recv(i, &mut b, 100 + k) };
            if r != 0 {
                assert_eq!(r, neg(FiErrno::FI_EAGAIN), "peer {i}, receive {k}");
                break;
            }
            held.push(b);
        }
        assert!(!held.is_empty(), "peer {i} posts a receive");
    }
    for i in 0..2 {
        let message = patterned(len, i);
        assert_eq!(pair.send(i, &message, 20 + i), 0, "peer {i} sends");
        assert_eq!(pair.wait(i).map(|e| e.op_context as usize), Ok(20 + i));
        let e = pair.wait(1 - i).expect("the message");
        assert_eq!((e.op_context as usize, e.len), (100, len));
        assert!(bufs[1 - i][0] == message);
    }
    drop(pair);
    drop(bufs);
}

/// fi_poll(3) `fi_trywait`: while a send waits for its retry there is nothing to read, so
/// an application may sleep on its CQ's `FI_WAIT_FD` descriptor: `fi_trywait` succeeds,
/// and the descriptor polls readable when the retry comes due, for the read that posts it
/// again. The application neither spins on `-FI_EAGAIN` nor sleeps through the retry; the
/// send completes once a receive takes it.
#[test]
fn an_fi_wait_fd_cq_sleeps_while_a_send_waits_for_its_retry_and_wakes_when_it_is_due() {
    let (pair, fabric, cq, _) = fd_waited_pair();
    let (ret, fd) = control_int(cq, FI_GETWAIT);
    assert_eq!(ret, 0, "fi_control(FI_GETWAIT)");
    fill_unexpected_list(&pair);
    assert_eq!(pair.send(0, b"refused", 20), 0);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut slept = 0;
    let mut spins = 0;
    while slept < 3 {
        assert!(
            std::time::Instant::now() < end,
            "fi_trywait kept the application from sleeping ({spins} times -FI_EAGAIN)"
        );
        match trywait_on(fabric, &[cq]) {
            0 => {
                assert!(
                    fd_readable(fd, 1000),
                    "the descriptor stayed unreadable while the retry came due"
                );
                slept += 1;
            }
            r => {
                assert_eq!(r, ineg(FiErrno::FI_EAGAIN));
                spins += 1;
            }
        }
        assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
    }
    the_retried_message_is_taken(&pair);
}

/// `rx_attr->op_flags` holding `FI_MULTI_RECV` make every flagless receive a multi-receive
/// buffer: `fi_endpoint` and `fi_scalable_ep` refuse them (`-FI_EINVAL`, nothing opened)
/// with capabilities that leave `FI_MULTI_RECV` out, and take them with capabilities that
/// name it.
#[test]
fn default_receive_flags_asking_fi_multi_recv_need_the_capability() {
    let open = Open::with_hints(&sep_hints(1, 1));
    for (scalable, what) in OPENERS {
        let with = |caps: u64| {
            // SAFETY: the info's own attributes.
            open_edited(&open, scalable, |i| unsafe {
                i.caps = caps;
                (*i.tx_attr).caps = 0;
                (*i.rx_attr).caps = 0;
                (*i.rx_attr).op_flags = FI_COMPLETION | FI_MULTI_RECV;
            })
        };
        assert_eq!(
            with(FI_MSG | FI_RECV | FI_SEND),
            ineg(FiErrno::FI_EINVAL),
            "{what}"
        );
        assert_eq!(
            with(FI_MSG | FI_RECV | FI_SEND | FI_MULTI_RECV),
            0,
            "{what} with the capability"
        );
    }
}

/// `FI_OPT_MIN_MULTI_RECV` is a receive context's: a transmit context of a scalable
/// endpoint sets no option and reads none (`-FI_ENOPROTOOPT`, not its receive context's
/// value as if its own), and the receive context of its index keeps its value.
#[test]
fn a_transmit_context_sets_and_gets_no_fi_opt_min_multi_recv() {
    let s = Scalable::new();
    let (tx, rx) = (s.tx[0].0, s.rx[0].0);
    assert_eq!(setopt_size(rx, 0, 300, 8), 0);
    assert_eq!(setopt_size(tx, 0, 77, 8), ineg(FiErrno::FI_ENOPROTOOPT));
    assert_eq!(min_multi_recv(rx), 300);
    let mut value = 0usize;
    let mut len = core::mem::size_of::<usize>();
    // SAFETY: an open context and its operations; room for a size_t.
    let ret =
        unsafe { ((*(*tx).ops).getopt)(&mut (*tx).fid, 0, 0, (&raw mut value).cast(), &mut len) };
    assert_eq!(ret, ineg(FiErrno::FI_ENOPROTOOPT));
    assert_eq!(value, 0, "nothing written");
}

/// On a NIC older than host interface 1.19, which cannot withdraw a multi-receive buffer, a
/// receive context closed with one posted leaves its index closed until messages fill it:
/// `fi_rx_context` of the index says so with `-FI_EOPBADSTATE`, not a `-FI_EBUSY` that
/// asks for a retry no retry can answer. (On its own process: the provider's NIC is the
/// process's.)
#[test]
fn an_index_whose_closed_context_left_a_multi_receive_buffer_an_old_nic_keeps_is_eopbadstate() {
    const NAME: &str =
        "an_index_whose_closed_context_left_a_multi_receive_buffer_an_old_nic_keeps_is_eopbadstate";
    if !common::in_own_process(NAME) {
        return;
    }
    let _nic = common::ServedNic::serve("uet-mrecv-old", uet_regs::since::MULTI_RECV_CANCEL - 1);
    let open = Open::with_hints(&sep_hints(1, 1));
    let mut attr = av_attr(16);
    let av = open.av_open(&mut attr).unwrap();
    let cq = open.cq_open(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
    let sep = scalable_ep(&open).unwrap();
    let r0 = context(sep, false, 0).unwrap();
    // SAFETY: open objects.
    unsafe {
        assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(bind(&mut (*r0).fid, &mut (*cq).fid, FI_RECV), 0);
    }
    assert_eq!(enable(sep), 0);
    let mut buf = vec![0u8; 4096];
    // SAFETY: an open receive context; `buf` outlives the scalable endpoint, closed below.
    assert_eq!(unsafe { recvmsg_on(r0, &mut buf, FI_MULTI_RECV, 1) }, 0);
    // SAFETY: the context, closed once.
    assert_eq!(unsafe { close(&mut (*r0).fid) }, 0);
    for _ in 0..3 {
        assert_eq!(
            context(sep, false, 0).err(),
            Some(ineg(FiErrno::FI_EOPBADSTATE)),
            "no retry opens the index"
        );
    }
    // SAFETY: ours, open, closed once, the scalable endpoint first.
    unsafe { close_all(&[&mut (*sep).fid, &mut (*cq).fid, &mut (*av).fid]) };
}

/// fi_msg(3): a message longer than `max_msg_size`, or an inject longer than
/// `inject_size`, is `-FI_EMSGSIZE` whatever the state of the transmit queue: with the queue
/// full of sends waiting for their retry (where a send that fits is `-FI_EAGAIN`), such a
/// call is still refused for its length, and nothing is sent.
#[test]
fn a_message_too_long_is_emsgsize_while_sends_waiting_for_a_retry_fill_the_queue() {
    let pair = Pair::new(0);
    // SAFETY: the info the endpoints were opened with.
    let (inject_size, max_msg) = unsafe {
        (
            (*(*pair._open.info).tx_attr).inject_size,
            (*(*pair._open.info).ep_attr).max_msg_size,
        )
    };
    fill_unexpected_list(&pair);
    // Peer 0 sends until its queue is full of refused sends waiting for their retry.
    assert!(send_until_refused(&pair, 20) > 0, "sends were taken");
    let long = vec![7u8; inject_size + 1];
    let byte = [0u8; 1];
    // The refused sends are posted again, and refused again, as peer 0's CQ is read: for a
    // while, each read followed by both calls.
    let end = std::time::Instant::now() + std::time::Duration::from_millis(100);
    while std::time::Instant::now() < end {
        assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
        // SAFETY: an open endpoint; `long` is read during the call at most.
        let ret = unsafe {
            (pair.msg(0).inject)(
                pair.p[0].ep,
                long.as_ptr().cast(),
                long.len(),
                pair.p[1].addr,
            )
        };
        assert_eq!(
            ret,
            neg(FiErrno::FI_EMSGSIZE),
            "fi_inject of {}",
            long.len()
        );
        // SAFETY: an open endpoint; the length is refused before the buffer is read.
        let ret = unsafe {
            (pair.msg(0).send)(
                pair.p[0].ep,
                byte.as_ptr().cast(),
                max_msg + 1,
                null_mut(),
                pair.p[1].addr,
                null_mut(),
            )
        };
        assert_eq!(ret, neg(FiErrno::FI_EMSGSIZE), "fi_send of {}", max_msg + 1);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(pair.read(1).err(), Some(neg(FiErrno::FI_EAGAIN)));
}

/// `rx_attr->op_flags` holding `FI_MULTI_RECV` make every flagless receive a multi-receive
/// buffer: `fi_rx_context` refuses them (`-FI_EINVAL`, nothing opened) with `rx_attr->caps`
/// that leave `FI_MULTI_RECV` out, as `fi_endpoint` and `fi_scalable_ep` refuse such
/// default flags, rather than open a context each of whose `fi_recv` is refused; it takes
/// them with caps that name it.
#[test]
fn fi_rx_context_refuses_default_flags_asking_fi_multi_recv_without_the_capability() {
    let mut hints = sep_hints(1, 1);
    hints.info.caps |= FI_MULTI_RECV;
    let open = Open::with_hints(&hints);
    let sep = scalable_ep(&open).expect("fi_scalable_ep");
    let rx_context = |caps: u64| {
        // SAFETY: a plain-data structure.
        let mut attr: FiRxAttr = unsafe { core::mem::zeroed() };
        attr.caps = caps;
        attr.op_flags = FI_COMPLETION | FI_MULTI_RECV;
        let mut ctx: *mut FidEp = null_mut();
        // SAFETY: an open scalable endpoint; valid attributes and out pointer.
        let ret = unsafe { ((*(*sep).ops).rx_ctx)(sep, 0, &mut attr, &mut ctx, null_mut()) };
        (ret, ctx)
    };
    let (ret, ctx) = rx_context(FI_MSG | FI_RECV);
    assert_eq!(ret, ineg(FiErrno::FI_EINVAL), "caps without FI_MULTI_RECV");
    assert!(ctx.is_null());
    let (ret, ctx) = rx_context(FI_MSG | FI_RECV | FI_MULTI_RECV);
    assert_eq!(ret, 0, "caps with FI_MULTI_RECV");
    // SAFETY: ours, open, closed once: the context before its scalable endpoint.
    unsafe {
        assert_eq!(close(&mut (*ctx).fid), 0);
        assert_eq!(close(&mut (*sep).fid), 0);
    }
}

/// A receive context opened again on an index whose previous context set
/// `FI_OPT_MIN_MULTI_RECV` starts from the default (one MTU), as every newly opened
/// context does: the closed context's option goes with it.
#[test]
fn a_receive_context_opened_again_starts_from_the_default_min_multi_recv() {
    let mut s = Scalable::new();
    let default = min_multi_recv(s.rx[1].0);
    assert_ne!(default, 300);
    let (rx, cq) = s.rx[0];
    assert_eq!(setopt_size(rx, 0, 300, 8), 0);
    assert_eq!(min_multi_recv(rx), 300);
    // SAFETY: ours, open, closed once; its index opens again for the scalable endpoint's
    // close.
    unsafe {
        assert_eq!(close(&mut (*rx).fid), 0);
        let again = context(s.sep, false, 0).expect("fi_rx_context again");
        assert_eq!(bind(&mut (*again).fid, &mut (*cq).fid, FI_RECV), 0);
        assert_eq!(enable(again), 0);
        s.rx[0].0 = again;
    }
    assert_eq!(
        min_multi_recv(s.rx[0].0),
        default,
        "the closed context's value"
    );
}

/// fi_poll(3) `fi_trywait`: once it returns 0 for a CQ, the CQ's `FI_WAIT_FD` descriptor
/// polls readable whenever a read of the CQ is needed, whoever drains the endpoint's ring.
/// A send refused while the application sleeps on the CQ, whose refusal another call takes
/// off the ring (here the `fi_trywait` of a counter of the same endpoint, which also clears
/// the vector that announced it), waits for a retry only a read posts: the CQ's descriptor
/// polls readable for it, and the send completes once a receive takes it.
#[test]
fn a_cq_descriptor_wakes_for_a_retry_whose_refusal_another_call_drained() {
    let (pair, fabric, cq, cntr) = fd_waited_pair();
    let (ret, fd) = control_int(cq, FI_GETWAIT);
    assert_eq!(ret, 0, "fi_control(FI_GETWAIT)");
    fill_unexpected_list(&pair);
    assert_eq!(pair.read(0).err(), Some(neg(FiErrno::FI_EAGAIN)));
    assert_eq!(
        trywait_on(fabric, &[cq]),
        0,
        "nothing to read: the CQ may be slept on"
    );
    assert_eq!(pair.send(0, b"refused", 20), 0);
    // The refusal lands on the endpoint's ring.
    std::thread::sleep(std::time::Duration::from_millis(100));
    // Another look at the endpoint takes the refusal off the ring (the send is kept for a
    // retry) and arms the ring: 0 or -FI_EAGAIN, as the retry is due or not.
    let r = trywait_on(fabric, &[cntr]);
    assert!(
        r == 0 || r == ineg(FiErrno::FI_EAGAIN),
        "fi_trywait(cntr): {r}"
    );
    assert!(
        fd_readable(fd, 2000),
        "the CQ's descriptor stayed unreadable while a retry only a read posts came due"
    );
    the_retried_message_is_taken(&pair);
}

/// From the next message's second packet on, every frame on `nic`'s fabric is held: its
/// first packet (the first frame longer than any control message or acknowledgement)
/// passes, and the acknowledgements and control messages after it are held too.
fn hold_after_the_first_packet(nic: &common::ServedNic) {
    let mut packets = 0;
    nic.fabric.hold_frames(move |f| {
        packets += usize::from(f.len() > 1024);
        packets > 1
    });
}

/// Wait until `nic`'s fabric holds a frame (at most 5 s): the message is part-way in.
fn wait_part_way(nic: &common::ServedNic) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while nic.fabric.held_frames() == 0 {
        assert!(std::time::Instant::now() < deadline, "the message part-way");
        std::thread::yield_now();
    }
}

/// A multi-receive buffer a message is arriving into when the connection shuts down cannot
/// be withdrawn then (that message completes on its own): it stays posted until the message
/// is in, and is withdrawn at the read after it. The message's completion comes, then the
/// buffer's `FI_ECANCELED` release with `FI_MULTI_RECV`, not a buffer left posted for good.
/// (On its own process: the provider's NIC is served from it, on a fabric that holds the
/// message's packets after the first back until the shutdown is done.)
#[test]
fn a_multi_receive_buffer_a_message_was_arriving_into_at_shutdown_is_withdrawn_after_it() {
    const NAME: &str =
        "a_multi_receive_buffer_a_message_was_arriving_into_at_shutdown_is_withdrawn_after_it";
    if !common::in_own_process(NAME) {
        return;
    }
    let nic = common::ServedNic::serve("uet-mrecv-arriving", uet_regs::INTERFACE_MINOR);
    let c = Connected::with_caps(FI_MSG | FI_MULTI_RECV, FI_WAIT_UNSPEC, None);
    let (client, server, cq_s) = (c.client, c.server, c.cq_s);
    assert_eq!(setopt_size(server, 0, 64, 8), 0);
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: an open endpoint; `buf` outlives the receive, whose completions are read below.
    assert_eq!(
        unsafe { recvmsg_on(server, &mut buf, FI_MULTI_RECV, 0xB1) },
        0
    );
    hold_after_the_first_packet(&nic);
    let message = patterned(20_000, 3);
    assert_eq!(send_on(client, &message), 0);
    wait_part_way(&nic);
    // SAFETY: an open endpoint.
    assert_eq!(unsafe { ((*(*server).cm).shutdown)(server, 0) }, 0);
    // SAFETY: a plain-data structure.
    let mut e: FiCqTaggedEntry = unsafe { core::mem::zeroed() };
    // SAFETY: an open CQ; room for one entry.
    let ret = unsafe { ((*(*cq_s).ops).read)(cq_s, (&raw mut e).cast(), 1) };
    assert_eq!(
        ret,
        neg(FiErrno::FI_EAGAIN),
        "the buffer a message is arriving into stays posted"
    );
    assert!(nic.fabric.release_held() > 0);
    let e = cq_wait(cq_s).expect("the message");
    assert_eq!((e.op_context as usize, e.len), (0xB1, message.len()));
    assert_eq!(e.flags & FI_MULTI_RECV, 0, "not the release");
    assert!(buf[..message.len()] == message[..]);
    assert_eq!(cq_wait(cq_s).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = cq_error_now(cq_s).expect("the withdrawn buffer");
    assert_eq!(
        (e.err, e.op_context as usize, e.len),
        (FiErrno::FI_ECANCELED.get() as c_int, 0xB1, 0)
    );
    assert_ne!(e.flags & FI_MULTI_RECV, 0, "released: flags {:#x}", e.flags);
}

/// fi_endpoint(3): `fi_cancel` of an operation still pending completes it as cancelled,
/// asynchronously. A multi-receive buffer a message is arriving into stays posted once the
/// message is in: `fi_cancel` returns 0, the message completes, then the buffer's
/// `FI_ECANCELED` release with `FI_MULTI_RECV` hands it back, rather than `-FI_ENOENT` with
/// the buffer left posted. (On its own process: the provider's NIC is served from it, on a
/// fabric that holds the message's packets after the first back until the cancel is made.)
#[test]
fn fi_cancel_of_a_multi_receive_buffer_a_message_is_arriving_into_withdraws_it_after_it() {
    const NAME: &str =
        "fi_cancel_of_a_multi_receive_buffer_a_message_is_arriving_into_withdraws_it_after_it";
    if !common::in_own_process(NAME) {
        return;
    }
    let nic = common::ServedNic::serve("uet-mrecv-cancel-arriving", uet_regs::INTERFACE_MINOR);
    let pair = Pair::new(0);
    assert_eq!(setopt_size(pair.p[1].ep, 0, 64, 8), 0);
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: `buf` outlives the receive, whose completions are read below.
    assert_eq!(
        unsafe { recvmsg_one(&pair, 1, &mut buf, FI_MULTI_RECV, 0xB1) },
        0
    );
    hold_after_the_first_packet(&nic);
    let message = patterned(20_000, 5);
    assert_eq!(pair.send(0, &message, 9), 0);
    wait_part_way(&nic);
    assert_eq!(cancel(pair.p[1].ep, 0xB1), 0, "the buffer is pending");
    assert!(nic.fabric.release_held() > 0);
    let e = pair.wait(1).expect("the message");
    assert_eq!((e.op_context as usize, e.len), (0xB1, message.len()));
    assert_eq!(e.flags & FI_MULTI_RECV, 0, "not the release");
    assert!(buf[..message.len()] == message[..]);
    assert_eq!(pair.wait(1).err(), Some(neg(FiErrno::FI_EAVAIL)));
    let e = pair.readerr(1).expect("the withdrawn buffer");
    assert_eq!(
        (e.err, e.op_context as usize, e.len),
        (FiErrno::FI_ECANCELED.get() as c_int, 0xB1, 0)
    );
    assert_ne!(e.flags & FI_MULTI_RECV, 0, "released: flags {:#x}", e.flags);
    assert_eq!(cancel(pair.p[1].ep, 0xB1), neg(FiErrno::FI_ENOENT));
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(9));
}

/// A receive context's `fi_close` withdraws its receives, so that a message sent to its
/// index while it is closed waits on the unexpected list for a context opened again there.
/// A multi-receive buffer a message was arriving into at the close stays posted after that
/// message: it is withdrawn at the read after it (here the transmit context's), and the next
/// message sent to the index reaches the context opened again, rather than landing in the
/// closed context's buffer and being discarded. (On its own process: the provider's NIC is
/// served from it, on a fabric that holds the message's packets after the first back until
/// the close is done.)
#[test]
fn a_closed_receive_contexts_multi_receive_buffer_a_message_was_arriving_into_is_withdrawn_after_it(
) {
    const NAME: &str = "a_closed_receive_contexts_multi_receive_buffer_a_message_was_arriving_into_is_withdrawn_after_it";
    if !common::in_own_process(NAME) {
        return;
    }
    let nic = common::ServedNic::serve("uet-mrecv-closed-arriving", uet_regs::INTERFACE_MINOR);
    let open = Open::with_hints(&sep_hints(1, 1));
    let (av, cq_t, cq_r, sep, t0, r0) = one_context_each(&open);
    let me = insert(av, &name_of(sep.cast()));
    assert_eq!(setopt_size(r0, 0, 64, 8), 0);
    let mut buf = vec![0xaau8; 64 * 1024];
    // SAFETY: an open receive context; `buf` outlives the scalable endpoint.
    assert_eq!(unsafe { recvmsg_on(r0, &mut buf, FI_MULTI_RECV, 9) }, 0);
    hold_after_the_first_packet(&nic);
    assert_eq!(send_to(t0, &patterned(20_000, 7), me, 1), 0);
    wait_part_way(&nic);
    // SAFETY: an open context, closed once.
    assert_eq!(unsafe { close(&mut (*r0).fid) }, 0);
    assert!(nic.fabric.release_held() > 0);
    let e = cq_wait(cq_t).expect("the message arriving at the close is in");
    assert_eq!(e.op_context as usize, 1);
    assert_eq!(send_to(t0, b"after the close", me, 2), 0);
    let e = cq_wait(cq_t).expect("the send completes: its message waits unexpected");
    assert_eq!(e.op_context as usize, 2);
    let r0 = context(sep, false, 0).expect("receive context 0 opened again");
    let cq_new = open.cq_open(FI_CQ_FORMAT_TAGGED, FI_WAIT_UNSPEC);
    // SAFETY: open objects.
    unsafe { assert_eq!(bind(&mut (*r0).fid, &mut (*cq_new).fid, FI_RECV), 0) };
    assert_eq!(enable(r0), 0);
    let mut new_buf = [0u8; 32];
    // SAFETY: `new_buf` outlives the receive's completion, read below.
    unsafe { assert_eq!(post(r0, &mut new_buf, None, 11), 0) };
    let e = cq_wait(cq_new).expect("the message sent while the index was closed");
    assert_eq!((e.op_context as usize, e.len), (11, 15));
    assert_eq!(&new_buf[..15], b"after the close");
    assert_eq!(cq_read(cq_r).err(), Some(neg(FiErrno::FI_EAGAIN)));
    // SAFETY: open objects, each closed once, contexts first.
    unsafe {
        close_all(&[
            &mut (*t0).fid,
            &mut (*r0).fid,
            &mut (*sep).fid,
            &mut (*cq_t).fid,
            &mut (*cq_r).fid,
            &mut (*cq_new).fid,
            &mut (*av).fid,
        ]);
    }
}

/// Fork a child that closes its copies of `pair`'s objects (the pair's drop asserts that every
/// close returned 0), and then the provider when `provider` (as an `exit` that runs
/// libfabric's cleanup does), and ends with `_exit`: its exit status (3 when a close failed),
/// `None` when it has not ended within `limit`. The caller runs alone in its process.
fn child_closing_copies_of(pair: &Pair, provider: bool, limit: std::time::Duration) -> Option<i32> {
    // SAFETY: the child only closes its copies of the objects (and the provider), then ends
    // with _exit; the caller runs alone in its process.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: moves the pair out of the parent's frame into this child's drop, once;
            // the parent's `pair` is never used in the child after.
            drop(unsafe { core::ptr::read(pair) });
            if provider {
                uet_fi::device::close();
            }
        }));
        // SAFETY: ends the forked child at once, running nothing more of the parent's.
        unsafe { libc::_exit(if closed.is_ok() { 0 } else { 3 }) };
    }
    uet_tests::wait_child(pid, limit)
}

/// A process forked from one that runs the provider, closing its copies of the provider's
/// objects and then the provider (as an `exit` that runs libfabric's cleanup does), leaves
/// the parent's NIC alone: the parent's endpoints, AV and CQs carry on. (On its own process:
/// its NIC is served from it, so that what the child sent would reach the NIC.)
#[test]
fn a_forked_child_closing_its_copies_of_the_providers_objects_leaves_the_parents_alone() {
    const NAME: &str =
        "a_forked_child_closing_its_copies_of_the_providers_objects_leaves_the_parents_alone";
    if !common::in_own_process(NAME) {
        return;
    }
    let _nic = common::ServedNic::serve("uet-fork", uet_regs::INTERFACE_MINOR);
    let pair = Pair::new(0);
    let mut buf = [0u8; 16];
    for round in 0..2 {
        // SAFETY: an open endpoint; `buf` outlives the receive, completed below.
        assert_eq!(unsafe { pair.post_recv(1, &mut buf, 7) }, 0);
        assert_eq!(pair.send(0, b"message", 9), 0);
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(9));
        assert_eq!(
            pair.wait(1).map(|e| (e.op_context as usize, e.len)),
            Ok((7, 7))
        );
        assert_eq!(&buf[..7], b"message");
        if round == 1 {
            break;
        }
        assert_eq!(
            child_closing_copies_of(&pair, true, std::time::Duration::from_secs(20)),
            Some(0),
            "the child closed its copies and ended"
        );
        buf = [0; 16];
    }
}

/// A thread of the parent waiting in `fi_cq_sread` at the fork is no thread of the child:
/// the child's `fi_close` of its copy of that CQ (after its endpoints') succeeds, where it was
/// `FI_EBUSY` for good for a waiter that will never return in the child; and the parent's
/// waiter still takes its message. (On its own process: its NIC is served from it.)
#[test]
fn a_forked_child_closes_a_cq_a_thread_of_its_parent_waited_on_at_the_fork() {
    const NAME: &str = "a_forked_child_closes_a_cq_a_thread_of_its_parent_waited_on_at_the_fork";
    if !common::in_own_process(NAME) {
        return;
    }
    let _nic = common::ServedNic::serve("uet-fork-waiter", uet_regs::INTERFACE_MINOR);
    let pair = Pair::new(0);
    let mut buf = [0u8; 16];
    // SAFETY: an open endpoint; `buf` outlives the receive, completed below.
    assert_eq!(unsafe { pair.post_recv(1, &mut buf, 7) }, 0);
    let cq = Shared(pair.p[1].cq);
    let waiter = std::thread::spawn(move || {
        // SAFETY: a plain-data structure.
        let mut e: FiCqTaggedEntry = unsafe { core::mem::zeroed() };
        let cq = cq.get();
        // SAFETY: an open CQ (closed after this thread is joined); room for one entry.
        let ret = unsafe { ((*(*cq).ops).sread)(cq, (&raw mut e).cast(), 1, null(), 20_000) };
        (ret, e.op_context as usize)
    });
    // Time for the waiter to be in its wait.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        child_closing_copies_of(&pair, false, std::time::Duration::from_secs(20)),
        Some(0),
        "the child closed its copies, the waited-on CQ among them"
    );
    assert_eq!(pair.send(0, b"message", 9), 0);
    assert_eq!(waiter.join().expect("the waiter"), (1, 7));
    assert_eq!(&buf[..7], b"message");
}

/// A thread of the parent reading a CQ holds, now and then, the lock of an endpoint whose
/// ring it drains. A child forked while it held it closes its copies of that endpoint and of
/// everything else all the same, where it waited for good for a thread it does not have
/// (the child's wait below then runs out). Forked many times, so that some forks come while
/// the lock is held. (On its own process: its NIC is served from it.)
#[test]
fn a_forked_child_closes_an_endpoint_whose_lock_a_thread_of_its_parent_held_at_the_fork() {
    const NAME: &str =
        "a_forked_child_closes_an_endpoint_whose_lock_a_thread_of_its_parent_held_at_the_fork";
    if !common::in_own_process(NAME) {
        return;
    }
    let _nic = common::ServedNic::serve("uet-fork-reader", uet_regs::INTERFACE_MINOR);
    let pair = Pair::new(0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (cq, stop) = (Shared(pair.p[1].cq), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            // SAFETY: a plain-data structure.
            let mut e: FiCqTaggedEntry = unsafe { core::mem::zeroed() };
            let cq = cq.get();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: an open CQ (closed after this thread is joined); room for one entry.
                unsafe { ((*(*cq).ops).read)(cq, (&raw mut e).cast(), 1) };
            }
        })
    };
    for fork in 0..40 {
        assert_eq!(
            child_closing_copies_of(&pair, false, std::time::Duration::from_secs(10)),
            Some(0),
            "fork {fork}: the child closed its copies and ended"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().expect("the reader");
    let mut buf = [0u8; 16];
    // SAFETY: an open endpoint; `buf` outlives the receive, completed below.
    assert_eq!(unsafe { pair.post_recv(1, &mut buf, 7) }, 0);
    assert_eq!(pair.send(0, b"message", 9), 0);
    assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(9));
    assert_eq!(
        pair.wait(1).map(|e| (e.op_context as usize, e.len)),
        Ok((7, 7))
    );
}

/// After its NIC stops (here its function is reset under the provider), what runs on it
/// fails; once the application has closed every object of it, a new fabric, domain and
/// endpoints run on the NIC brought up again, as an application that recovers from the
/// reset without a restart expects. (On its own process: the provider's NIC is served from
/// it.)
#[test]
fn once_every_object_of_a_stopped_nic_is_closed_new_objects_run_on_it_again() {
    const NAME: &str = "once_every_object_of_a_stopped_nic_is_closed_new_objects_run_on_it_again";
    if !common::in_own_process(NAME) {
        return;
    }
    let nic = common::ServedNic::serve("uet-reopen", uet_regs::INTERFACE_MINOR);
    let exchange = |pair: &Pair, context: usize| {
        let mut buf = [0u8; 16];
        // SAFETY: an open endpoint; `buf` outlives the receive, completed below.
        assert_eq!(unsafe { pair.post_recv(1, &mut buf, context) }, 0);
        assert_eq!(pair.send(0, b"message", context + 1), 0);
        assert_eq!(pair.wait(0).map(|e| e.op_context as usize), Ok(context + 1));
        assert_eq!(
            pair.wait(1).map(|e| (e.op_context as usize, e.len)),
            Ok((context, 7))
        );
        assert_eq!(&buf[..7], b"message");
    };
    let pair = Pair::new(0);
    exchange(&pair, 10);
    nic.function.function_level_reset();
    assert!(
        pair.send(0, b"lost", 20) != 0 || pair.wait(0).is_err(),
        "nothing runs on the stopped NIC"
    );
    drop(pair);
    let pair = Pair::new(0);
    exchange(&pair, 30);
}

/// In a process forked from one whose provider opened a NIC, the provider keeps the
/// parent's NIC (which the child leaves alone) rather than open the function again: the
/// child's next call answers at once, where opening a function the parent holds would wait
/// for the vfio-user server that serves the parent. (On its own process: its NIC is served
/// from it.)
#[test]
fn a_forked_child_does_not_open_again_the_nic_its_parent_holds() {
    const NAME: &str = "a_forked_child_does_not_open_again_the_nic_its_parent_holds";
    if !common::in_own_process(NAME) {
        return;
    }
    let _nic = common::ServedNic::serve("uet-fork-reopen", uet_regs::INTERFACE_MINOR);
    drop(uet_fi::device::nic().expect("the NIC opens"));
    // SAFETY: the child only asks the provider for its NIC and ends with _exit; the test
    // runs alone in its process.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let started = std::time::Instant::now();
        let answered = std::panic::catch_unwind(uet_fi::device::nic).is_ok_and(|n| n.is_ok());
        let quick = started.elapsed() < std::time::Duration::from_secs(2);
        // SAFETY: ends the forked child at once, running nothing more of the parent's.
        unsafe { libc::_exit(if answered && quick { 0 } else { 2 }) };
    }
    assert_eq!(
        uet_tests::wait_child(pid, std::time::Duration::from_secs(20)),
        Some(0),
        "the child was answered at once, with its parent's NIC"
    );
    // The parent's NIC is as it was.
    let pair = Pair::new(0);
    let mut buf = [0u8; 8];
    // SAFETY: an open endpoint; `buf` outlives the receive, completed below.
    assert_eq!(unsafe { pair.post_recv(1, &mut buf, 1) }, 0);
    assert_eq!(pair.send(0, b"parent", 2), 0);
    assert_eq!(pair.wait(1).map(|e| e.len), Ok(6));
}

/// The 32 bytes of three addresses `fi_getinfo` answers to `hints`: as sources
/// (`FI_SOURCE`), this NIC's at any PIDonFEP (service 0) and at PIDonFEP 4000, and as a
/// destination, one at another fabric address.
fn asked_addresses(hints: &Hints) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    const FI_SOURCE: u64 = 1 << 57;
    let address = |node: &CStr, service: &CStr, flags: u64| -> Vec<u8> {
        let info = getinfo(Some(node), Some(service), flags, Some(hints)).unwrap();
        // SAFETY: the provider's answer, read, then freed once.
        unsafe {
            let (p, len) = if flags != 0 {
                ((*info).src_addr, (*info).src_addrlen)
            } else {
                ((*info).dest_addr, (*info).dest_addrlen)
            };
            let bytes = core::slice::from_raw_parts(p.cast::<u8>(), len).to_vec();
            uet_fi::info::free_info(info);
            bytes
        }
    };
    (
        address(c"10.0.0.1", c"0", FI_SOURCE),
        address(c"10.0.0.1", c"4000", FI_SOURCE),
        address(c"10.0.0.99", c"0", 0),
    )
}

/// An `FI_EP_RDM` endpoint asked to be at an address (`src_addr`, as `fi_getinfo` gives it
/// for `FI_SOURCE` with a node and a service) is at that address or is refused: at another
/// fabric address than its NIC's, by `fi_endpoint`; at a PIDonFEP the NIC does not assign
/// it, by `fi_enable`, which leaves it closable. Any PIDonFEP (service 0) is taken.
#[test]
fn an_endpoint_asked_for_an_address_the_nic_does_not_give_it_is_refused() {
    let pair = Pair::new(0);
    let hints = Hints::new(FI_MSG, FI_FORMAT_UNSPEC);
    // SAFETY: the hints' own attributes.
    unsafe { (*hints.info.ep_attr).ep_type = FI_EP_RDM };
    let (any, pid_4000, elsewhere) = asked_addresses(&hints);
    let info = pair._open.info;
    // SAFETY: the provider's info, its src_addr restored at once; open objects, each
    // endpoint closed once.
    unsafe {
        let saved = ((*info).src_addr, (*info).src_addrlen);
        let mut open_at = |src: &[u8]| {
            let mut src = src.to_vec();
            ((*info).src_addr, (*info).src_addrlen) = (src.as_mut_ptr().cast(), src.len());
            let mut ep: *mut FidEp = null_mut();
            let ret = ((*(*pair._open.domain).ops).endpoint)(
                pair._open.domain,
                info.cast(),
                (&raw mut ep).cast(),
                null_mut(),
            );
            ((*info).src_addr, (*info).src_addrlen) = saved;
            if ret != 0 {
                assert!(ep.is_null());
                return (ret, None);
            }
            let fops = &*(*ep).fid.ops;
            assert_eq!((fops.bind)(&mut (*ep).fid, &mut (*pair.av).fid, 0), 0);
            let cq = &mut (*pair.p[0].cq).fid;
            assert_eq!((fops.bind)(&mut (*ep).fid, cq, FI_TRANSMIT | FI_RECV), 0);
            let enabled = (fops.control)(&mut (*ep).fid, FI_ENABLE, null_mut());
            assert_eq!(close(&mut (*ep).fid), 0);
            (0, Some(enabled))
        };
        let not_avail = ineg(FiErrno::FI_EADDRNOTAVAIL);
        assert_eq!(open_at(&any), (0, Some(0)));
        assert_eq!(open_at(&pid_4000), (0, Some(not_avail)));
        assert_eq!(open_at(&elsewhere), (not_avail, None));
        // Refused, and nothing of it left: one more takes any address.
        assert_eq!(open_at(&any), (0, Some(0)));
    }
}

/// A scalable endpoint asked to be at an address (`src_addr`) is at that address or is
/// refused, as an endpoint is: at another fabric address than its NIC's, by
/// `fi_scalable_ep`; at a PIDonFEP the NIC does not assign it, by its `fi_enable`, which
/// leaves it closable and the NIC's endpoint gone.
#[test]
fn a_scalable_endpoint_asked_for_an_address_the_nic_does_not_give_it_is_refused() {
    let hints = sep_hints(1, 2);
    let open = Open::with_hints(&hints);
    let (any, pid_4000, elsewhere) = asked_addresses(&hints);
    let mut attr = av_attr(16);
    attr.rx_ctx_bits = 1;
    let av = open.av_open(&mut attr).expect("fi_av_open");
    let not_avail = -(FiErrno::FI_EADDRNOTAVAIL.get() as c_int);
    let info = open.info;
    // SAFETY: the provider's info, its src_addr restored at once; open objects, each closed
    // once.
    unsafe {
        let saved = ((*info).src_addr, (*info).src_addrlen);
        let open_at = |src: &[u8]| {
            let mut src = src.to_vec();
            ((*info).src_addr, (*info).src_addrlen) = (src.as_mut_ptr().cast(), src.len());
            let sep = scalable_ep(&open);
            ((*info).src_addr, (*info).src_addrlen) = saved;
            let sep = match sep {
                Ok(sep) => sep,
                Err(e) => return (e, None),
            };
            assert_eq!(bind(&mut (*sep).fid, &mut (*av).fid, 0), 0);
            let enabled = enable(sep);
            assert_eq!(close(&mut (*sep).fid), 0);
            (0, Some(enabled))
        };
        assert_eq!(open_at(&any), (0, Some(0)));
        assert_eq!(open_at(&pid_4000), (0, Some(not_avail)));
        assert_eq!(open_at(&elsewhere), (not_avail, None));
        assert_eq!(
            open_at(&any),
            (0, Some(0)),
            "nothing of the refused one left"
        );
        assert_eq!(close(&mut (*av).fid), 0);
    }
}

/// A connection request's `fi_info` answers the listener's tag format (`ep_attr->
/// mem_tag_format`) as `fi_getinfo` did, not a format of its own: the endpoint opened with
/// it matches tags as the application asked.
#[test]
fn a_connection_requests_info_keeps_the_listeners_tag_format() {
    const FORMAT: u64 = 0x8000_0000_FFFF_FFFF;
    let m = Msg::new();
    let (eq_l, eq_c) = (m.eq(), m.eq());
    // SAFETY: the provider's info, its format restored once the listener is made.
    let pep = unsafe {
        let ep_attr = (*m.open.info).ep_attr;
        let saved = (*ep_attr).mem_tag_format;
        (*ep_attr).mem_tag_format = FORMAT;
        let pep = m.listen(eq_l);
        (*ep_attr).mem_tag_format = saved;
        pep
    };
    // SAFETY: `pep` is open; only the field's address is taken.
    let pep_fid: *mut Fid = unsafe { &mut (*pep).fid };
    let listener = name_of(pep_fid);
    let (client, cq_c) = m.ep(m.open.info, eq_c);
    assert_eq!(connect(client, &listener, b"x"), 0);
    let req = cm_event(eq_l).expect("FI_CONNREQ");
    // SAFETY: the request's info, read, then rejected and freed once; ours, open, closed once.
    unsafe {
        assert_eq!((*(*req.info).ep_attr).mem_tag_format, FORMAT);
        reject_all(pep, &[req.info]);
        close_endpoints_then(
            &[(client, cq_c)],
            &[pep_fid, &mut (*eq_l).fid, &mut (*eq_c).fid],
        );
    }
}
