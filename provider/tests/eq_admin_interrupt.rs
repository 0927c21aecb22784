//! `fi_trywait` of an `FI_WAIT_FD` event queue whose `FI_EVENT` AV has an insert in flight,
//! through the C ABI, on NICs of both interfaces: with the admin completion interrupt
//! (interface 1.15) the application may sleep on the queue's descriptor, which the NIC's
//! answer makes readable; without it (1.14), `-FI_EAGAIN` until the insert's event was read.
//!
//! The provider opens one NIC per process (`FI_UET_DEVICE`): this test has a process of its
//! own, and serves each NIC over vfio-user from a simulated function it keeps a hand on.

use core::ffi::c_int;
mod common;

use common::fd_readable;
use core::ptr::{null, null_mut};
use std::time::{Duration, Instant};
use uet_av::{AvType, FiErrno};
use uet_fi::abi::*;
use uet_regs::RegisterAccess;

const FI_AV_COMPLETE: u32 = 5;

/// The address of an endpoint on another NIC, for an insert the NIC answers.
fn a_peer() -> [u8; 32] {
    uet_fwif::UetAddress {
        caps: 0,
        mode: uet_fwif::address::AddressingMode::Relative,
        max_msg_mtu: false,
        pid_on_fep: 5,
        fabric_addr: "10.0.0.2".parse().unwrap(),
        ri_start: 1,
        ri_count: 4,
        initiator: 0x100,
    }
    .to_bytes()
    .unwrap()
}

/// `fi_trywait(fabric, fids, count)`.
fn trywait_on(fabric: *mut FidFabric, fids: &[*mut Fid]) -> c_int {
    let mut fids = fids.to_vec();
    let count = c_int::try_from(fids.len()).unwrap();
    // SAFETY: an open fabric; open objects of it.
    unsafe { ((*(*fabric).ops).trywait)(fabric, fids.as_mut_ptr(), count) }
}

/// One round on a NIC of interface `1.minor`, served over vfio-user at `path`.
fn round(minor: u8, path: &std::path::Path) {
    let fabric = uet_sim::Fabric::new();
    let mut config = uet_sim::NicConfig::new("10.0.0.1".parse().unwrap());
    config.interface_minor = minor;
    let function = fabric.add_nic(config).unwrap();
    let server =
        std::sync::Arc::new(uet_sim::vfio_user::VfioUserServer::bind(function, path).unwrap());
    let serving = std::thread::spawn(move || server.serve_one());
    std::env::set_var(
        uet_fi::device::DEVICE_VAR,
        format!("vfio-user:{}", path.display()),
    );
    let nic = uet_fi::device::nic().expect("the NIC");
    assert_eq!(nic.identity().interface_minor, minor);
    // Long enough that no poll gives the insert up while the test runs.
    nic.set_admin_timeout(Duration::from_secs(60));

    // SAFETY: fi_prov_ini returns a structure that lives for the process.
    let provider = unsafe { &*uet_fi::fi_prov_ini() };
    let mut info = null_mut();
    let (mut fab, mut domain, mut eq, mut av, mut cq) =
        (null_mut(), null_mut(), null_mut(), null_mut(), null_mut());
    let mut eq_attr = FiEqAttr {
        size: 0,
        flags: 0,
        wait_obj: FI_WAIT_FD,
        signaling_vector: 0,
        wait_set: null_mut(),
    };
    let mut av_attr = FiAvAttr {
        av_type: AvType::Table.to_raw(),
        rx_ctx_bits: 0,
        count: 8,
        ep_per_node: 0,
        name: null(),
        map_addr: null_mut(),
        flags: uet_av::FI_EVENT,
    };
    let mut cq_attr = FiCqAttr {
        size: 0,
        flags: 0,
        format: FI_CQ_FORMAT_CONTEXT,
        wait_obj: FI_WAIT_FD,
        signaling_vector: 0,
        wait_cond: 0,
        wait_set: null_mut(),
    };
    let mut fd: c_int = -1;
    // SAFETY: the provider's entry points, called as libfabric's contract says: valid
    // attributes and out pointers, open objects.
    unsafe {
        assert_eq!(
            (provider.getinfo)(fi_version(1, 17), null(), null(), 0, null(), &mut info),
            0
        );
        assert_eq!(
            (provider.fabric)((*info).fabric_attr, &mut fab, null_mut()),
            0
        );
        assert_eq!(
            ((*(*fab).ops).domain)(fab, info, &mut domain, null_mut()),
            0
        );
        assert_eq!(
            ((*(*fab).ops).eq_open)(fab, &mut eq_attr, &mut eq, null_mut()),
            0
        );
        assert_eq!(
            ((*(*domain).ops).av_open)(domain, &mut av_attr, &mut av, null_mut()),
            0
        );
        assert_eq!(
            ((*(*domain).ops).cq_open)(domain, &mut cq_attr, &mut cq, null_mut()),
            0
        );
        assert_eq!(
            ((*(*av).fid.ops).bind)(&mut (*av).fid, &mut (*eq).fid, 0),
            0
        );
        assert_eq!(
            ((*(*eq).fid.ops).control)(&mut (*eq).fid, FI_GETWAIT, (&raw mut fd).cast()),
            0
        );
    }
    // SAFETY: open objects; only the fields' addresses are taken.
    let (eq_fid, av_fid, cq_fid) =
        unsafe { (&raw mut (*eq).fid, &raw mut (*av).fid, &raw mut (*cq).fid) };
    let again = -(FiErrno::FI_EAGAIN.get() as c_int);
    assert_eq!(trywait_on(fab, &[cq_fid, eq_fid]), 0, "1.{minor}: idle");

    // The NIC stopped: the insert's AV_WRITE waits in its admin queue.
    nic.bar0()
        .write(uet_regs::DEV_CTRL, uet_regs::DevCtrl::new());
    let peer = a_peer();
    let mut out: FiAddr = 0;
    // SAFETY: an open AV; a valid address and out pointer; the context is a number.
    let ret =
        unsafe { ((*(*av).ops).insert)(av, peer.as_ptr().cast(), 1, &mut out, 0, 7 as *mut _) };
    assert_eq!(ret, 0, "1.{minor}: fi_av_insert");
    let before_answer = trywait_on(fab, &[cq_fid, eq_fid]);
    if minor >= uet_regs::INTERFACE_MINOR {
        // The queue and the CQ may be slept on: the NIC's answer wakes the queue.
        assert_eq!(before_answer, 0, "1.{minor}: an insert in flight");
        assert_eq!(trywait_on(fab, &[eq_fid, cq_fid]), 0, "1.{minor}: again");
        assert!(
            !fd_readable(fd, 100),
            "1.{minor}: readable before the NIC answered"
        );
    } else {
        // Nothing would announce the answer: read instead.
        assert_eq!(before_answer, again, "1.{minor}: an insert in flight");
        assert_eq!(trywait_on(fab, &[eq_fid]), again, "1.{minor}: again");
    }
    nic.bar0().write(
        uet_regs::DEV_CTRL,
        uet_regs::DevCtrl::new().with_enable(true),
    );
    if minor >= uet_regs::INTERFACE_MINOR {
        assert!(
            fd_readable(fd, 10_000),
            "1.{minor}: the NIC's answer left the descriptor unreadable"
        );
    }
    // The application's loop: try to sleep; while told to read, read.
    let end = Instant::now() + Duration::from_secs(10);
    let mut complete = None;
    while trywait_on(fab, &[cq_fid, eq_fid]) == again {
        assert!(
            Instant::now() < end,
            "1.{minor}: fi_trywait kept saying to read"
        );
        let mut event = 0u32;
        // SAFETY: a plain-data structure.
        let mut entry: FiEqEntry = unsafe { core::mem::zeroed() };
        let len = core::mem::size_of::<FiEqEntry>();
        // SAFETY: an open EQ; valid out pointers.
        let ret = unsafe { ((*(*eq).ops).read)(eq, &mut event, (&raw mut entry).cast(), len, 0) };
        if ret == len as isize {
            assert_eq!((event, entry.context as usize), (FI_AV_COMPLETE, 7));
            complete = Some(entry.data);
        } else {
            assert_eq!(ret, -(FiErrno::FI_EAGAIN.get() as isize), "1.{minor}");
        }
    }
    assert_eq!(complete, Some(1), "1.{minor}: the insert's FI_AV_COMPLETE");
    assert!(!fd_readable(fd, 0), "1.{minor}: readable once read");

    // SAFETY: ours, open, closed once.
    unsafe {
        for f in [
            av_fid,
            cq_fid,
            eq_fid,
            &raw mut (*domain).fid,
            &raw mut (*fab).fid,
        ] {
            assert_eq!(
                ((*(*f).ops).close)(f),
                0,
                "fi_close of class {}",
                (*f).fclass
            );
        }
    }
    drop(nic);
    uet_fi::device::close();
    serving
        .join()
        .expect("the server")
        .expect("the conversation");
}

#[test]
fn fi_trywait_lets_an_fi_event_avs_queue_be_slept_on_only_where_the_nic_announces_answers() {
    let dir = std::env::temp_dir().join(format!("uet-eq-admin-irq-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for minor in [14, uet_regs::INTERFACE_MINOR] {
        round(minor, &dir.join(format!("nic-1.{minor}.sock")));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
