//! The admin rings follow the device's `CAP_QUEUES.max_admin_entries`: a NIC that allows
//! fewer entries than the driver's usual 64 gets rings it accepts, and works through them; a
//! NIC that allows fewer than 2 is refused with the capability named.

use std::sync::Arc;
use uet_driver::backend::sim::SimDevice;
use uet_driver::{DriverError, Nic};
use uet_fwif::datapath::CompletionKind;
use uet_regs::{CapQueues, RegisterAccess, ADMIN_QUEUE_SIZE, CAP_QUEUES, DEV_STATUS};
use uet_sim::{Fabric, NicConfig, SimFunction};
use uet_tests::{nic_addr, pair_with, BarHook, HookedDevice, Node};

/// For rings of 2, 4 and 32 entries: the driver programs exactly that size, and more admin
/// commands than the ring holds (AV_WRITEs, AV_READs, endpoint creation) run through it,
/// with messages both ways translated by the NIC's table.
#[test]
fn a_device_with_a_small_admin_ring_gets_rings_it_accepts_and_works() {
    for (max, log2) in [(2u16, 1u8), (4, 2), (32, 5)] {
        let (_f, mut a, mut b) = pair_with(0x51, |c| c.max_admin_entries = max);
        let size = b.function.read(ADMIN_QUEUE_SIZE);
        assert_eq!((size.sq_log2(), size.cq_log2()), (log2, log2), "max {max}");
        assert!(b.function.read(DEV_STATUS).enabled());
        // Commands well past the ring's size: AV_WRITEs of two records each (a record alone
        // may take the register window instead of the admin queue).
        let peers: Vec<[u8; 32]> = (0..40u8)
            .map(|i| {
                let mut addr = *a.ep.address();
                addr.pid_on_fep = 0x100 + u16::from(i);
                addr.to_bytes().expect("valid address")
            })
            .collect();
        let mut av = uet_tests::open_av(&b.nic, 0x51, 64, 0);
        for pair in peers.chunks(2) {
            let flat: Vec<u8> = pair.concat();
            assert_eq!(av.insert(&flat, 2, None, 0).expect("insert"), 2);
        }
        assert_eq!(av.verify_nic().expect("AV_READ"), vec![], "max {max}");
        assert_eq!(av.len(), 40);
        for k in 0..3 {
            message(&mut a, &mut b, k);
            message(&mut b, &mut a, k);
        }
    }
}

/// A message from `from` to `to` (each other's fi_addr 0), delivered and completed.
fn message(from: &mut Node, to: &mut Node, k: u64) {
    to.post_recvs(1);
    from.send(0, b"ping", k);
    let sent = from.next_completion().expect("send completion");
    assert_eq!(sent.kind, CompletionKind::Send);
    let got = to.next_completion().expect("receive completion");
    assert_eq!(got.kind, CompletionKind::Recv);
    assert_eq!(got.buffer.expect("buffer").to_vec().expect("read"), b"ping");
}

/// A device hook making `CAP_QUEUES` report `max_admin_entries` as given.
struct SmallCapQueues {
    max_admin_entries: u16,
}

impl BarHook for SmallCapQueues {
    fn read32(&self, offset: u32, value: u32) -> u32 {
        if offset != CAP_QUEUES.offset() {
            return value;
        }
        CapQueues::from_bits(value)
            .with_max_admin_entries(self.max_admin_entries)
            .into_bits()
    }
}

/// The simulated NIC `function`, reporting `max_admin_entries` in `CAP_QUEUES`.
fn reporting(function: &SimFunction, max_admin_entries: u16) -> Arc<HookedDevice<SmallCapQueues>> {
    Arc::new(HookedDevice {
        inner: SimDevice::new(function.clone()),
        hook: SmallCapQueues { max_admin_entries },
    })
}

/// A device allowing fewer than 2 admin entries cannot be driven: the open fails with the
/// capability and its value, the device is left disabled, and a later open of the same
/// function (reporting a usable size) works.
#[test]
fn a_device_allowing_fewer_than_two_admin_entries_is_refused_by_name() {
    let function = Fabric::new()
        .add_nic(NicConfig::new(nic_addr(0)))
        .expect("add NIC");
    for max in [0u16, 1] {
        match Nic::open(reporting(&function, max)) {
            Err(DriverError::Unsupported(m)) => {
                assert!(
                    m.contains("CAP_QUEUES.max_admin_entries is ") && m.contains(&max.to_string()),
                    "{m}"
                );
            }
            Err(e) => panic!("max {max}: expected Unsupported, got {e}"),
            Ok(_) => panic!("max {max}: a ring of {max} entries cannot work"),
        }
        assert!(!function.read(DEV_STATUS).enabled());
    }
    // 3 entries: the driver uses 2.
    let nic = Nic::open(reporting(&function, 3)).expect("open with 3 admin entries allowed");
    assert_eq!(function.read(ADMIN_QUEUE_SIZE).sq_log2(), 1);
    let av = uet_tests::open_av(&nic, 7, 4, 0);
    drop(av);
}

/// A device that stopped with a fatal error (here a DMA fault: bus mastering is off) fails
/// every command within a poll or two of a millisecond, with `FI_EIO`, never `FI_EAGAIN`,
/// which would invite a retry that cannot succeed: a command in the ring as in doubt (the
/// device may have run it before it stopped), one that found the ring full as not submitted.
/// A command that waited out the timeout instead would fail the test by its variant.
#[test]
fn a_device_that_stopped_fails_commands_at_once_and_never_asks_for_a_retry() {
    use uet_av::FiErrno;
    use uet_driver::admin::ADMIN_RING_LOG2;
    use uet_driver::uet_fwif::admin::Command;
    let fabric = Fabric::new();
    let function = fabric.add_nic(NicConfig::new(nic_addr(0))).unwrap();
    let nic = Nic::open(Arc::new(SimDevice::new(function.clone()))).unwrap();
    nic.set_admin_timeout(std::time::Duration::from_secs(3));
    function.set_bus_master(false);
    let cmd = Command::EndpointDestroy { endpoint: 0xFFFF };
    for i in 0..(1usize << ADMIN_RING_LOG2) - 1 {
        let e = nic.admin_command(cmd).unwrap_err();
        assert!(
            matches!(
                e,
                DriverError::AdminDeviceFatal {
                    submitted: true,
                    ..
                }
            ),
            "command {i}: {e}"
        );
        assert!(e.in_doubt());
        assert_eq!(e.errno(), FiErrno::FI_EIO);
    }
    assert!(function.read(DEV_STATUS).fatal());
    let e = nic.admin_command(cmd).unwrap_err();
    assert!(
        matches!(
            e,
            DriverError::AdminDeviceFatal {
                submitted: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.in_doubt(), "never submitted: nothing of it can happen");
    assert_eq!(e.errno(), FiErrno::FI_EIO);
    assert!(
        e.to_string().contains("not submitted") && e.to_string().contains("FATAL_ERROR"),
        "{e}"
    );
}

/// A command with data that finds the scratch buffer held by one the stopped device never
/// completed fails because the device stopped, as not submitted, not as kept back by a late
/// device: the fatal error is what the caller is told, each time.
#[test]
fn a_command_with_data_after_the_device_stopped_is_told_of_the_fatal_error() {
    let fabric = Fabric::new();
    let function = fabric.add_nic(NicConfig::new(nic_addr(0))).expect("NIC");
    let nic = Nic::open(Arc::new(SimDevice::new(function.clone()))).expect("open");
    nic.set_admin_timeout(std::time::Duration::from_secs(3));
    let mut av = uet_tests::open_av(&nic, 7, 16, 0);
    function.set_bus_master(false);
    // The first AV_READ was in the ring when the device stopped: in doubt, and the scratch
    // buffer is its until a reset.
    let first = av.verify_nic().expect_err("the device stopped");
    assert!(first.to_string().contains("FATAL_ERROR"), "{first}");
    assert!(function.read(DEV_STATUS).fatal());
    for k in 0..2 {
        let e = av.verify_nic().expect_err("the device stopped");
        let m = e.to_string();
        assert!(
            m.contains("FATAL_ERROR") && m.contains("not submitted") && !m.contains("timed out"),
            "read {k}: {m}"
        );
    }
}
