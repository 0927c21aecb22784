//! The driver and the simulated NIC in conversation over vfio-user, as a driver process and a
//! simulator daemon are: every register access a request on a Unix socket, DMA memory passed
//! as file descriptors and mapped by the server.
//!
//! The servers run on threads of this process, which lets the tests look at the simulated
//! functions directly; the bytes between driver and NIC cross the socket all the same.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use uet_driver::backend::vfio_user::VfioUserDevice;
use uet_driver::{Device, DeviceError};
use uet_regs::{
    pci, Mmio, ADMIN_CQ_BASE, ADMIN_SQ_BASE, BAD_REGISTER_ACCESSES, BAR0_SIZE, DMA_FAULTS, ID,
};
use uet_sim::vfio_user::VfioUserServer;
use uet_sim::{SimError, SimFunction};
use uet_tests::{pattern, Node};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{Client, DmaMapFlags, DmaUnmapFlags, Server, ServerBackend, ServerRegion};

const JOB: u32 = 0x0007_2000;

/// A fresh directory for the sockets of one test.
fn socket_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uet-vfio-user-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("socket directory");
    dir
}

/// Serve `function` at `path`; the thread serves one client.
fn serve(
    function: &SimFunction,
    path: &Path,
) -> (Arc<VfioUserServer>, JoinHandle<Result<(), SimError>>) {
    let server = Arc::new(VfioUserServer::bind(function.clone(), path).expect("bind"));
    (server.clone(), serve_next(&server))
}

/// A server thread serving one client.
type Serving = JoinHandle<Result<(), SimError>>;

fn serve_next(server: &Arc<VfioUserServer>) -> Serving {
    let s = server.clone();
    std::thread::spawn(move || s.serve_one())
}

fn node(server: &VfioUserServer, function: &SimFunction) -> Node {
    let device = Arc::new(VfioUserDevice::open(server.path()).expect("open over vfio-user"));
    Node::on_device(device, function.clone(), JOB, JOB, 64)
}

/// Two NICs on one fabric, each served on a socket of its own in a fresh directory, with a
/// node on each over vfio-user, each in the other's AV at fi_addr 0.
struct Served {
    fabric: uet_sim::Fabric,
    fns: Vec<SimFunction>,
    dir: PathBuf,
    servers: (Arc<VfioUserServer>, Arc<VfioUserServer>),
    threads: (Serving, Serving),
    a: Node,
    b: Node,
}

fn served_pair(test: &str) -> Served {
    let (fabric, fns) = uet_tests::fabric(2);
    let dir = socket_dir(test);
    let (sa, ta) = serve(&fns[0], &dir.join("a.sock"));
    let (sb, tb) = serve(&fns[1], &dir.join("b.sock"));
    let mut a = node(&sa, &fns[0]);
    let mut b = node(&sb, &fns[1]);
    assert_eq!(a.insert(&b.addr()), 0);
    assert_eq!(b.insert(&a.addr()), 0);
    Served {
        fabric,
        fns,
        dir,
        servers: (sa, sb),
        threads: (ta, tb),
        a,
        b,
    }
}

#[test]
fn the_driver_runs_the_av_and_the_datapath_over_vfio_user() {
    let Served {
        fabric: _fabric,
        fns,
        dir,
        servers: (sa, sb),
        threads: (ta, tb),
        mut a,
        mut b,
    } = served_pair("datapath");

    // The AV: single inserts (each in the other's AV at 0), a batch (one AV_WRITE), remove,
    // reinsert, all on the NIC.
    let peer = b.addr();
    let batch: Vec<u8> = std::iter::repeat_n(peer, 20).flatten().collect();
    let mut many = [0u64; 20];
    assert_eq!(a.av.insert(&batch, 20, Some(&mut many), 0).unwrap(), 20);
    assert_eq!(many.to_vec(), (1..21).collect::<Vec<_>>());
    a.av.remove(&[3, 20], 0).unwrap();
    let mut one = [0u64; 1];
    assert_eq!(a.av.insert(&peer, 1, Some(&mut one), 0).unwrap(), 1);
    assert_eq!(one[0], 3, "the lowest unused index");
    assert!(
        a.av.verify_nic().unwrap().is_empty(),
        "NIC and mirror agree"
    );

    // Messages both ways, the payload read and written by the NIC in the driver's memory.
    b.post_recvs(2);
    for (dest, context) in [(0, 1u64), (3, 2)] {
        a.send(dest, &pattern(1000, context as u8), context);
        let sent = a.next_completion().expect("send completion");
        assert!(sent.error.is_none(), "{:?}", sent.error);
        let got = b.next_completion().expect("receive completion");
        assert!(got.error.is_none(), "{:?}", got.error);
        assert_eq!(
            got.buffer.unwrap().to_vec().unwrap(),
            pattern(1000, context as u8)
        );
    }
    a.post_recvs(1);
    b.send(0, b"back", 9);
    assert!(b.next_completion().unwrap().error.is_none());
    let back = a.next_completion().unwrap();
    assert_eq!(back.buffer.unwrap().to_vec().unwrap(), b"back");
    for n in [&a, &b] {
        assert_eq!(n.counter(BAD_REGISTER_ACCESSES), 0);
        assert_eq!(n.counter(DMA_FAULTS), 0);
    }

    // Closing the driver ends the conversation; the server releases the function.
    drop(a);
    drop(b);
    ta.join().unwrap().expect("client A served to the end");
    tb.join().unwrap().expect("client B served to the end");

    // The next client finds the function as at power-on, and it works.
    let ta = serve_next(&sa);
    let tb = serve_next(&sb);
    let mut a = node(&sa, &fns[0]);
    let mut b = node(&sb, &fns[1]);
    assert_eq!(a.insert(&b.addr()), 0, "a fresh AV");
    assert_eq!(b.insert(&a.addr()), 0);
    b.post_recvs(1);
    a.send(0, b"again", 1);
    assert!(a.next_completion().unwrap().error.is_none());
    assert_eq!(
        b.next_completion()
            .unwrap()
            .buffer
            .unwrap()
            .to_vec()
            .unwrap(),
        b"again"
    );
    drop((a, b));
    ta.join().unwrap().unwrap();
    tb.join().unwrap().unwrap();
    drop((sa, sb));
    assert!(
        !dir.join("a.sock").exists(),
        "the socket goes with its server"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn opening_sets_memory_space_and_bus_master() {
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("command");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let device = VfioUserDevice::open(server.path()).unwrap();
    let command = u16::from_le_bytes(device.config_read::<2>(pci::COMMAND));
    assert_eq!(
        command & (pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER),
        pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER
    );
    assert_eq!(
        u32::from_le_bytes(device.config_read::<4>(pci::VENDOR_ID)),
        pci::ID_DWORD
    );
    assert_eq!(
        device.bar0().read32(ID.offset()),
        fns[0].read32(ID.offset())
    );
    assert!(device.name().contains("nic.sock"), "{}", device.name());
    drop(device);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Write the command register of the function `client` talks to.
fn set_command(client: &mut Client, command: u16) {
    client
        .region_write(
            VFIO_PCI_CONFIG_REGION_INDEX,
            pci::COMMAND as u64,
            &command.to_le_bytes(),
        )
        .unwrap();
}

/// The configuration space has a capability list with one PCI Express endpoint capability
/// advertising Function Level Reset, as a host (vfio-pci's device reset) looks for it; setting
/// Device Control's "Initiate Function Level Reset" resets the function: its registers, and
/// the configuration header, whose command register is cleared (BAR0 stops decoding).
#[test]
fn a_function_level_reset_from_configuration_space_resets_the_function() {
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("flr");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let mut client = Client::new(server.path()).unwrap();
    let config = VFIO_PCI_CONFIG_REGION_INDEX;
    let read = |client: &mut Client, at: usize| {
        let mut b = [0u8; 4];
        client.region_read(config, at as u64, &mut b).unwrap();
        u32::from_le_bytes(b)
    };
    assert_ne!(
        read(&mut client, pci::STATUS - 2) >> 16 & u32::from(pci::STATUS_CAPABILITIES_LIST),
        0
    );
    let cap = read(&mut client, pci::CAPABILITIES_POINTER) as usize & 0xFF;
    assert_eq!(cap, pci::PCIE_CAP);
    assert_eq!(read(&mut client, cap) & 0xFF, u32::from(pci::CAP_ID_PCIE));
    assert_ne!(
        read(&mut client, pci::PCIE_DEVICE_CAPABILITIES) & pci::PCIE_DEVCAP_FLR,
        0
    );

    set_command(&mut client, pci::COMMAND_MEMORY_SPACE);
    let sq = u64::from(ADMIN_SQ_BASE.offset());
    client
        .region_write(VFIO_PCI_BAR0_REGION_INDEX, sq, &0x10_0000u64.to_le_bytes())
        .unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0x10_0000);
    // A Device Control write without the bit changes nothing else.
    client
        .region_write(
            config,
            pci::PCIE_DEVICE_CONTROL as u64,
            &0x2000u16.to_le_bytes(),
        )
        .unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0x10_0000);
    client
        .region_write(
            config,
            pci::PCIE_DEVICE_CONTROL as u64,
            &(pci::PCIE_DEVCTL_INITIATE_FLR | 0x2000).to_le_bytes(),
        )
        .unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0, "registers reset");
    assert_eq!(
        read(&mut client, pci::COMMAND) & 0xFFFF,
        0,
        "command cleared"
    );
    assert_eq!(
        read(&mut client, pci::PCIE_DEVICE_CONTROL) & 0xFFFF,
        u32::from(pci::PCIE_DEVCTL_RESET)
    );
    let mut id = [0u8; 4];
    client
        .region_read(VFIO_PCI_BAR0_REGION_INDEX, u64::from(ID.offset()), &mut id)
        .unwrap();
    assert_eq!(id, [0xFF; 4], "BAR0 no longer decodes");
    drop(client);
    t.join().unwrap().unwrap();

    // The driver opens the function afterwards as any other.
    let t = serve_next(&server);
    let device = Arc::new(VfioUserDevice::open(server.path()).unwrap());
    let nic = uet_driver::Nic::open(device).unwrap();
    assert_eq!(nic.identity().fabric_addr, uet_tests::nic_addr(0));
    drop(nic);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The command register gates the function as on hardware: BAR0 answers only with memory
/// space enabled, and DMA works only with bus mastering enabled; both are clear at reset.
#[test]
fn the_command_register_gates_bar0_and_dma() {
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("gating");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let mut client = Client::new(server.path()).unwrap();
    let bar = VFIO_PCI_BAR0_REGION_INDEX;
    let id_at = u64::from(ID.offset());
    let sq = u64::from(ADMIN_SQ_BASE.offset());

    // At reset BAR0 does not decode: reads are all ones, writes go nowhere.
    let mut id = [0u8; 4];
    client.region_read(bar, id_at, &mut id).unwrap();
    assert_eq!(id, [0xFF; 4]);
    client
        .region_write(bar, sq, &0x10_0000u64.to_le_bytes())
        .unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0, "write dropped");
    set_command(&mut client, pci::COMMAND_MEMORY_SPACE);
    client.region_read(bar, id_at, &mut id).unwrap();
    assert_eq!(u32::from_le_bytes(id), fns[0].read32(ID.offset()));
    client
        .region_write(bar, sq, &0x10_0000u64.to_le_bytes())
        .unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0x10_0000);
    drop(client);
    t.join().unwrap().unwrap();

    // The driver enables both at open and works; with bus mastering cleared under it, the
    // next admin command cannot be fetched: a DMA fault stops the function, and the command
    // fails instead of waiting.
    let t = serve_next(&server);
    let device = Arc::new(VfioUserDevice::open(server.path()).unwrap());
    let nic = uet_driver::Nic::open(device.clone()).unwrap();
    let attr = uet_av::AvAttr {
        count: 8,
        ..uet_av::AvAttr::default()
    };
    nic.open_av(attr).expect("an AV with bus mastering on");
    assert_eq!(fns[0].read64(DMA_FAULTS.offset()), 0);
    device.config_write(pci::COMMAND, &pci::COMMAND_MEMORY_SPACE.to_le_bytes());
    let e = nic.open_av(attr).unwrap_err();
    assert_eq!(e.errno, uet_av::FiErrno::FI_EIO, "{e}");
    assert!(
        e.to_string().contains("stopped with a fatal error"),
        "given up on at once, not at the timeout: {e}"
    );
    assert!(fns[0].read64(DMA_FAULTS.offset()) > 0, "{e}");
    assert!(
        uet_regs::FatalError::from(fns[0].read32(uet_regs::FATAL_ERROR.offset())).dma_fault(),
        "{e}"
    );
    drop(nic);
    drop(device);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file of `len` zero bytes for DMA (the driver's memory is a memfd; any file maps alike).
fn dma_file(dir: &Path, len: u64) -> File {
    let path = dir.join("dma");
    let f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.set_len(len).unwrap();
    std::fs::remove_file(path).unwrap();
    f
}

#[test]
fn a_client_that_goes_leaves_no_dma_mapping_and_a_reset_function() {
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("release");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    // DMA memory as the driver's: a memfd sealed against shrinking.
    let memory = uet_driver::dma::DmaRegion::new_normal(8192, 0).unwrap();
    let mut client = Client::new(server.path()).unwrap();
    set_command(&mut client, pci::COMMAND_MEMORY_SPACE);
    client
        .dma_map(0, 0x10_0000, 8192, memory.fd().as_raw_fd())
        .unwrap();
    assert!(
        matches!(
            fns[0].dma_map(0x10_0000, 4096, memory.fd(), 0),
            Err(SimError::Overlap { .. })
        ),
        "the server mapped the client's memory"
    );
    client
        .region_write(
            VFIO_PCI_BAR0_REGION_INDEX,
            u64::from(ADMIN_SQ_BASE.offset()),
            &0x10_0000u64.to_le_bytes(),
        )
        .unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0x10_0000);

    // The client goes without unmapping or resetting anything.
    drop(client);
    t.join().unwrap().unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0, "function reset");
    fns[0]
        .dma_map(0x10_0000, 8192, memory.fd(), 0)
        .expect("the departed client's mapping was withdrawn");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn accesses_the_function_cannot_take_are_answered_in_band() {
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("bad-access");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let mut client = Client::new(server.path()).unwrap();
    set_command(&mut client, pci::COMMAND_MEMORY_SPACE);
    let bar = VFIO_PCI_BAR0_REGION_INDEX;
    let id_at = u64::from(ID.offset());
    let sq = u64::from(ADMIN_SQ_BASE.offset());

    // A 2-byte read, a read across the end of BAR0, a read of an absent BAR: all ones.
    let mut two = [0u8; 2];
    client.region_read(bar, id_at, &mut two).unwrap();
    assert_eq!(two, [0xFF; 2]);
    let mut eight = [0u8; 8];
    client
        .region_read(bar, u64::from(BAR0_SIZE) - 4, &mut eight)
        .unwrap();
    assert_eq!(eight, [0xFF; 8]);
    client.region_read(2, 0, &mut eight).unwrap();
    assert_eq!(eight, [0xFF; 8]);
    // A 3-byte write and a write past BAR0 are dropped.
    client.region_write(bar, sq, &[1, 2, 3]).unwrap();
    client
        .region_write(bar, u64::from(BAR0_SIZE), &[0xFF; 8])
        .unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0);
    // Configuration space: identity read-only, reads past the header 0.
    client
        .region_write(VFIO_PCI_CONFIG_REGION_INDEX, 0, &[0; 4])
        .unwrap();
    let mut id = [0u8; 4];
    client
        .region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut id)
        .unwrap();
    assert_eq!(u32::from_le_bytes(id), pci::ID_DWORD);
    client
        .region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0x1000, &mut id)
        .unwrap();
    assert_eq!(id, [0; 4]);

    // Whole words longer than one: a burst, each word to its register in order.
    let mut two_words = [0u8; 16];
    two_words[..8].copy_from_slice(&0x20_0000u64.to_le_bytes());
    two_words[8..].copy_from_slice(&0x30_0000u64.to_le_bytes());
    client.region_write(bar, sq, &two_words).unwrap();
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0x20_0000);
    assert_eq!(fns[0].read64(ADMIN_CQ_BASE.offset()), 0x30_0000);

    // The conversation is intact: a proper read still answers.
    let mut word = [0u8; 4];
    client.region_read(bar, id_at, &mut word).unwrap();
    assert_eq!(u32::from_le_bytes(word), fns[0].read32(ID.offset()));
    drop(client);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A BAR0 access the function cannot take over vfio-user counts in `BAD_REGISTER_ACCESSES`,
/// as the same access made in process does (the register file's rule for any offset or
/// width with no register): a width other than 4 or 8 bytes, an access across the end of
/// BAR0 or past it. Accesses with memory space disabled reach no function and count nothing.
#[test]
fn bad_bar0_accesses_over_vfio_user_count_as_bad_register_accesses() {
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("bad-access-count");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let mut client = Client::new(server.path()).unwrap();
    let bar = VFIO_PCI_BAR0_REGION_INDEX;
    let id_at = u64::from(ID.offset());
    let mut two = [0u8; 2];
    client.region_read(bar, id_at, &mut two).unwrap();
    assert_eq!(fns[0].counter(BAD_REGISTER_ACCESSES), 0, "memory space off");

    set_command(&mut client, pci::COMMAND_MEMORY_SPACE);
    client.region_read(bar, id_at, &mut two).unwrap();
    assert_eq!(two, [0xFF; 2]);
    assert_eq!(fns[0].counter(BAD_REGISTER_ACCESSES), 1, "a 2-byte read");
    let mut eight = [0u8; 8];
    client
        .region_read(bar, u64::from(BAR0_SIZE) - 4, &mut eight)
        .unwrap();
    assert_eq!(
        fns[0].counter(BAD_REGISTER_ACCESSES),
        2,
        "a read across the end"
    );
    client
        .region_write(bar, u64::from(ADMIN_SQ_BASE.offset()), &[1, 2, 3])
        .unwrap();
    assert_eq!(fns[0].counter(BAD_REGISTER_ACCESSES), 3, "a 3-byte write");
    client
        .region_write(bar, u64::from(BAR0_SIZE), &[0xFF; 4])
        .unwrap();
    assert_eq!(
        fns[0].counter(BAD_REGISTER_ACCESSES),
        4,
        "a write past BAR0"
    );
    // As in process: a 4-byte read of an offset with no register.
    let mut word = [0u8; 4];
    client.region_read(bar, 0x0ffc, &mut word).unwrap();
    assert_eq!(fns[0].counter(BAD_REGISTER_ACCESSES), 5);
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0, "nothing written");
    drop(client);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A vfio-user PCI function that is some other device: configuration space names another
/// vendor and device; every BAR access is recorded.
struct OtherDevice {
    bar_accesses: Arc<Mutex<u32>>,
}

impl ServerBackend for OtherDevice {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> std::io::Result<()> {
        data.fill(0);
        if region == VFIO_PCI_CONFIG_REGION_INDEX && offset == 0 {
            let id = 0x10FB_8086u32.to_le_bytes();
            for (d, s) in data.iter_mut().zip(id) {
                *d = s;
            }
        } else if region == VFIO_PCI_BAR0_REGION_INDEX {
            *self.bar_accesses.lock().unwrap() += 1;
        }
        Ok(())
    }
    fn region_write(&mut self, region: u32, _: u64, _: &[u8]) -> std::io::Result<()> {
        if region == VFIO_PCI_BAR0_REGION_INDEX {
            *self.bar_accesses.lock().unwrap() += 1;
        }
        Ok(())
    }
    fn dma_map(
        &mut self,
        _: DmaMapFlags,
        _: u64,
        _: u64,
        _: u64,
        _: Option<File>,
    ) -> std::io::Result<()> {
        Ok(())
    }
    fn dma_unmap(&mut self, _: DmaUnmapFlags, _: u64, _: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn reset(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn set_irqs(&mut self, _: u32, _: u32, _: u32, _: u32, _: Vec<File>) -> std::io::Result<()> {
        Ok(())
    }
}

fn regions(bar0_size: u64) -> Vec<ServerRegion> {
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| ServerRegion {
            region_info: vfio_region_info {
                argsz: std::mem::size_of::<vfio_region_info>() as u32,
                flags: VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
                index,
                cap_offset: 0,
                size: match index {
                    VFIO_PCI_BAR0_REGION_INDEX => bar0_size,
                    VFIO_PCI_CONFIG_REGION_INDEX => 256,
                    _ => 0,
                },
                offset: 0,
            },
            sparse_areas: Vec::new(),
            mmap_fd: None,
        })
        .collect()
}

/// Serve `OtherDevice` with a BAR0 of `bar0_size` to one client; returns the error the driver
/// gets and the number of BAR accesses it made.
fn open_other(test: &str, bar0_size: u64) -> (DeviceError, u32) {
    let dir = socket_dir(test);
    let path = dir.join("other.sock");
    let server = Server::new(&path, true, Vec::new(), regions(bar0_size)).unwrap();
    let accesses = Arc::new(Mutex::new(0));
    let mut backend = OtherDevice {
        bar_accesses: accesses.clone(),
    };
    let t = std::thread::spawn(move || server.run(&mut backend).map_err(|e| e.to_string()));
    let err = VfioUserDevice::open(&path).expect_err("another device is refused");
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let n = *accesses.lock().unwrap();
    (err, n)
}

#[test]
fn a_function_that_is_not_this_nic_is_refused_before_its_registers_are_touched() {
    let (err, accesses) = open_other("other-device", u64::from(BAR0_SIZE));
    let text = err.to_string();
    assert!(matches!(err, DeviceError::Open { .. }), "{err:?}");
    assert!(
        text.contains("not a uet-nic function: vendor:device 8086:10fb"),
        "{text}"
    );
    assert!(text.contains("other.sock"), "{text}");
    assert_eq!(accesses, 0);

    let (err, accesses) = open_other("small-bar", 0x100);
    assert!(err.to_string().contains("BAR0 is 256 bytes"), "{err}");
    assert_eq!(accesses, 0);
}

#[test]
fn a_socket_that_never_answers_is_an_error_not_a_hang() {
    let dir = socket_dir("silent");
    let path = dir.join("silent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // Accepts, reads nothing, answers nothing, until the test is done.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let conn = listener.accept().map(|(c, _)| c);
        let _ = done_rx.recv();
        drop(conn);
    });
    let err = VfioUserDevice::open_within(&path, std::time::Duration::from_millis(200))
        .expect_err("nothing answers");
    assert!(matches!(err, DeviceError::Open { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("no vfio-user answer within 200 ms"),
        "{err}"
    );
    assert!(err.to_string().contains("silent.sock"), "{err}");
    done_tx.send(()).unwrap();
    holder.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server whose answer to the connection is malformed (here a version reply with no
/// capabilities, which the `vfio_user` client does not survive) is refused as such, at once:
/// it answered, so the error does not say it did not.
#[test]
fn a_malformed_version_reply_is_an_error_that_says_so() {
    use std::io::{Read, Write};
    let dir = socket_dir("bad-version");
    let path = dir.join("bad.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut header = [0u8; 16];
        conn.read_exact(&mut header).unwrap();
        // Version 0.1 and nothing after it: no capabilities, not even their NUL.
        let mut reply = raw_message(0, 1, &[0, 0, 1, 0]);
        reply[8..12].copy_from_slice(&1u32.to_ne_bytes());
        conn.write_all(&reply).unwrap();
        let _ = done_rx.recv();
    });
    let err = VfioUserDevice::open_within(&path, std::time::Duration::from_secs(60))
        .expect_err("a malformed answer");
    assert!(matches!(err, DeviceError::Open { .. }), "{err:?}");
    assert!(!err.to_string().contains("no vfio-user answer"), "{err}");
    assert!(err.to_string().contains("malformed"), "{err}");
    done_tx.send(()).unwrap();
    peer.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_server_no_socket_clear_errors() {
    let dir = socket_dir("errors");
    let missing = dir.join("missing.sock");
    let err = VfioUserDevice::open(&missing).expect_err("nothing listens");
    assert!(matches!(err, DeviceError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("missing.sock"), "{err}");

    let (_fabric, fns) = uet_tests::fabric(1);
    let path = dir.join("taken.sock");
    std::fs::write(&path, b"").unwrap();
    let err = VfioUserServer::bind(fns[0].clone(), &path).expect_err("the path exists");
    assert!(matches!(err, SimError::VfioUser { .. }), "{err:?}");
    assert!(err.to_string().contains("taken.sock"), "{err}");
    assert!(path.exists(), "a socket path that was there stays");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A mapping the server refused (its IOVAs overlap memory the function already reaches) is
/// unmapped when the driver lets it go; the server refuses that too. The `vfio_user` client
/// reads an unmap's reply as a whole unmap message, so a refusal must not come back as a bare
/// error header: the client would wait for the rest of a reply that never comes, holding the
/// device's conversation, and every register access after it would hang.
#[test]
fn a_refused_unmap_leaves_the_conversation_intact() {
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("refused-unmap");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let device: Arc<dyn Device> =
        Arc::new(VfioUserDevice::open(server.path()).expect("open over vfio-user"));
    // The function already reaches [iova + 4 KiB, iova + 12 KiB): the driver's map of
    // [iova, iova + 8 KiB) overlaps it, and unmapping that range would cut it in two.
    let iova = 0x1_0000_0000;
    let other = dma_file(&dir, 8192);
    fns[0].dma_map(iova + 4096, 8192, other.as_fd(), 0).unwrap();
    let region = uet_driver::dma::DmaRegion::new_normal(8192, iova).unwrap();
    let mapped = uet_driver::MappedRegion::map(device.clone(), region)
        .expect("the client does not report a refused map");

    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let d = device.clone();
    std::thread::spawn(move || {
        drop(mapped);
        let _ = done_tx.send(d.bar0().read32(ID.offset()));
    });
    let id = done_rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the unmap and the register read after it answer");
    assert_eq!(id, fns[0].read32(ID.offset()));
    assert!(
        matches!(
            fns[0].dma_map(iova + 4096, 4096, other.as_fd(), 0),
            Err(SimError::Overlap { .. })
        ),
        "the refused unmap left the function's own mapping in place"
    );
    drop(device);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// One vfio-user message as the protocol lays it out: the 16-byte header, then `body`.
fn raw_message(id: u16, command: u16, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_ne_bytes());
    m.extend_from_slice(&command.to_ne_bytes());
    m.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
    m.extend_from_slice(&[0; 8]); // flags: a command; error: none
    m.extend_from_slice(body);
    m
}

/// A region write as raw bytes, and its 32-byte reply read back.
fn raw_region_write(
    stream: &mut std::os::unix::net::UnixStream,
    region: u32,
    at: u64,
    data: &[u8],
) {
    use std::io::{Read, Write};
    let mut body = Vec::new();
    body.extend_from_slice(&at.to_ne_bytes());
    body.extend_from_slice(&region.to_ne_bytes());
    body.extend_from_slice(&(data.len() as u32).to_ne_bytes());
    body.extend_from_slice(data);
    stream.write_all(&raw_message(0, 10, &body)).unwrap();
    let mut reply = [0u8; 32];
    stream.read_exact(&mut reply).unwrap();
}

/// `DMA_UNMAP` with `VFIO_DMA_UNMAP_FLAG_ALL` and address and size 0, as QEMU's vfio-user
/// client sends it when its whole address space goes (and as VFIO's type1 IOMMU takes it),
/// withdraws every mapping of the function; the flag with a range is refused and changes
/// nothing. Either way the reply is a whole unmap reply, as the client reads it.
#[test]
fn an_unmap_of_everything_withdraws_every_mapping() {
    use std::io::{Read, Write};
    use vfio_bindings::bindings::vfio::VFIO_DMA_UNMAP_FLAG_ALL;
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("unmap-all");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let memory = dma_file(&dir, 3 * 4096);
    // What the client mapped: two regions.
    fns[0].dma_map(0x10_0000, 4096, memory.as_fd(), 0).unwrap();
    fns[0]
        .dma_map(0x20_0000, 8192, memory.as_fd(), 4096)
        .unwrap();
    let mut stream = std::os::unix::net::UnixStream::connect(server.path()).unwrap();
    let mut unmap = |address: u64, size: u64| {
        let mut body = Vec::new();
        body.extend_from_slice(&24u32.to_ne_bytes()); // argsz
        body.extend_from_slice(&VFIO_DMA_UNMAP_FLAG_ALL.to_ne_bytes());
        body.extend_from_slice(&address.to_ne_bytes());
        body.extend_from_slice(&size.to_ne_bytes());
        stream.write_all(&raw_message(7, 3, &body)).unwrap();
        let mut reply = [0u8; 40];
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(reply[8..12], 1u32.to_ne_bytes(), "a reply, no error");
    };

    unmap(0, 0);
    fns[0]
        .dma_map(0x10_0000, 4096, memory.as_fd(), 0)
        .expect("the first mapping was withdrawn");
    fns[0]
        .dma_map(0x20_0000, 8192, memory.as_fd(), 4096)
        .expect("the second mapping was withdrawn");

    // With a range the flag is refused: both mappings stay.
    unmap(0x10_0000, 4096);
    for (iova, len) in [(0x10_0000, 4096), (0x20_0000, 8192)] {
        assert!(
            matches!(
                fns[0].dma_map(iova, len, memory.as_fd(), 0),
                Err(SimError::Overlap { .. })
            ),
            "{iova:#x} still mapped"
        );
    }
    drop(stream);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A region read of more bytes than one message carries (the protocol's default
/// `max_data_xfer_size`, 1 MiB, which the server's version reply announces) is refused with
/// an error reply, whatever the region: the server neither fills nor sends what was asked (a
/// count near 4 GiB would have it touch and write as much, for every NIC of its fabric to
/// wait on). The conversation goes on.
#[test]
fn a_region_read_longer_than_a_message_carries_is_refused() {
    use std::io::{Read, Write};
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("long-read");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let mut stream = std::os::unix::net::UnixStream::connect(server.path()).unwrap();
    let mut read = |region: u32, at: u64, count: u32| {
        let mut body = Vec::new();
        body.extend_from_slice(&at.to_ne_bytes());
        body.extend_from_slice(&region.to_ne_bytes());
        body.extend_from_slice(&count.to_ne_bytes());
        stream.write_all(&raw_message(9, 9, &body)).unwrap();
        let mut header = [0u8; 16];
        stream.read_exact(&mut header).unwrap();
        header
    };
    for region in [VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, 2] {
        let header = read(region, 0, (1 << 20) + 4);
        assert_eq!(header[4..8], 16u32.to_ne_bytes(), "a bare header");
        assert_eq!(header[8..12], 0x21u32.to_ne_bytes(), "an error reply");
    }
    // The largest read a message carries is answered.
    let header = read(VFIO_PCI_CONFIG_REGION_INDEX, 0, 1 << 20);
    assert_eq!(header[4..8], (32u32 + (1 << 20)).to_ne_bytes());
    let mut rest = vec![0u8; 16 + (1 << 20)];
    stream.read_exact(&mut rest).unwrap();
    assert_eq!(rest[16..20], pci::ID_DWORD.to_le_bytes());
    drop(stream);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `DMA_MAP` of memory with its descriptor, as raw bytes: flags (`VFIO_DMA_MAP_FLAG_*`), file
/// offset 0; returns the reply's header.
fn raw_dma_map(
    stream: &mut std::os::unix::net::UnixStream,
    flags: u32,
    iova: u64,
    len: u64,
    fd: std::os::fd::RawFd,
) -> [u8; 16] {
    use std::io::Read;
    use vmm_sys_util::sock_ctrl_msg::ScmSocket;
    let mut body = Vec::new();
    body.extend_from_slice(&32u32.to_ne_bytes()); // argsz
    body.extend_from_slice(&flags.to_ne_bytes());
    body.extend_from_slice(&0u64.to_ne_bytes()); // offset in the file
    body.extend_from_slice(&iova.to_ne_bytes());
    body.extend_from_slice(&len.to_ne_bytes());
    stream
        .send_with_fd(&raw_message(3, 2, &body)[..], fd)
        .unwrap();
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).unwrap();
    header
}

/// What `DMA_MAP` lets the device do with memory is what it may do, as an IOMMU enforces it:
/// memory mapped readable only is read (the admin submission ring) but never written (the
/// completion the NIC writes there is a DMA fault and changes nothing), and a mapping that
/// allows neither is refused, as VFIO refuses it.
#[test]
fn memory_mapped_readable_only_is_never_written() {
    use uet_regs::{
        AdminQueueSize, DevCtrl, RingIndex, ADMIN_QUEUE_SIZE, ADMIN_SQ_DOORBELL, DEV_CTRL,
    };
    use vfio_bindings::bindings::vfio::VFIO_DMA_MAP_FLAG_READ;
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("read-only");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let memory = uet_driver::dma::DmaRegion::new_normal(8192, 0).unwrap();
    let mut stream = std::os::unix::net::UnixStream::connect(server.path()).unwrap();
    let command = pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER;
    raw_region_write(
        &mut stream,
        VFIO_PCI_CONFIG_REGION_INDEX,
        pci::COMMAND as u64,
        &command.to_le_bytes(),
    );
    let fd = memory.fd().as_raw_fd();
    let neither = raw_dma_map(&mut stream, 0, 0x40_0000, 8192, fd);
    assert_eq!(neither[8..12], 0x21u32.to_ne_bytes(), "an error reply");
    fns[0]
        .dma_map(0x40_0000, 8192, memory.fd(), 0)
        .expect("a mapping with no access was not made");
    let read_only = raw_dma_map(&mut stream, VFIO_DMA_MAP_FLAG_READ, 0x10_0000, 8192, fd);
    assert_eq!(read_only[8..12], 1u32.to_ne_bytes(), "mapped");

    // The admin rings in the readable memory: commands at its start, completions after.
    let bar = |stream: &mut std::os::unix::net::UnixStream, at: u32, bytes: &[u8]| {
        raw_region_write(stream, VFIO_PCI_BAR0_REGION_INDEX, u64::from(at), bytes);
    };
    bar(
        &mut stream,
        ADMIN_SQ_BASE.offset(),
        &0x10_0000u64.to_le_bytes(),
    );
    bar(
        &mut stream,
        ADMIN_CQ_BASE.offset(),
        &0x10_1000u64.to_le_bytes(),
    );
    let size = AdminQueueSize::new().with_sq_log2(2).with_cq_log2(2);
    bar(
        &mut stream,
        ADMIN_QUEUE_SIZE.offset(),
        &u32::from(size).to_le_bytes(),
    );
    let enable = DevCtrl::new().with_enable(true);
    bar(
        &mut stream,
        DEV_CTRL.offset(),
        &u32::from(enable).to_le_bytes(),
    );
    let doorbell = RingIndex::new().with_index(1);
    bar(
        &mut stream,
        ADMIN_SQ_DOORBELL.offset(),
        &u32::from(doorbell).to_le_bytes(),
    );

    assert!(
        fns[0].read64(DMA_FAULTS.offset()) > 0,
        "the completion faults"
    );
    let mut completions = [0u8; 256];
    memory.read_bytes(4096, &mut completions).unwrap();
    assert_eq!(completions, [0; 256], "nothing written");
    drop(stream);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A peer that is no proper vfio-user client (here: a version message whose capabilities are
/// not a NUL-terminated string, which the protocol crate's server does not survive) breaks
/// its own conversation only: the server reports it, releases the function as for any client
/// that goes, and serves the next client.
#[test]
fn a_malformed_message_ends_that_client_and_the_server_serves_the_next() {
    use std::io::Write;
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("malformed");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let mut stream = std::os::unix::net::UnixStream::connect(server.path()).unwrap();
    raw_region_write(
        &mut stream,
        VFIO_PCI_CONFIG_REGION_INDEX,
        pci::COMMAND as u64,
        &pci::COMMAND_MEMORY_SPACE.to_le_bytes(),
    );
    raw_region_write(
        &mut stream,
        VFIO_PCI_BAR0_REGION_INDEX,
        u64::from(ADMIN_SQ_BASE.offset()),
        &0x10_0000u64.to_le_bytes(),
    );
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0x10_0000);
    // Version 0.1, then capabilities with no terminating NUL.
    let mut version = vec![0, 0, 1, 0];
    version.extend_from_slice(b"{}{}");
    stream.write_all(&raw_message(1, 1, &version)).unwrap();

    let served = t.join().expect("the server survives a malformed message");
    assert!(
        matches!(served, Err(SimError::VfioUser { .. })),
        "{served:?}"
    );
    assert_eq!(fns[0].read64(ADMIN_SQ_BASE.offset()), 0, "function reset");
    drop(stream);

    let t = serve_next(&server);
    let device = VfioUserDevice::open(server.path()).expect("the next client is served");
    assert_eq!(
        device.bar0().read32(ID.offset()),
        fns[0].read32(ID.offset())
    );
    drop(device);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// DMA memory a client could shrink after mapping it would fault the server (SIGBUS) on the
/// NIC's next access to it; the server maps only memory sealed against shrinking (the
/// driver's memfds are). A client that offers other memory gets no mapping: the NIC's access
/// is a DMA fault, and the server goes on.
#[test]
fn memory_a_client_could_shrink_is_not_mapped() {
    use uet_regs::{
        AdminQueueSize, DevCtrl, RingIndex, ADMIN_QUEUE_SIZE, ADMIN_SQ_DOORBELL, DEV_CTRL,
    };
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("shrink");
    let (server, t) = serve(&fns[0], &dir.join("nic.sock"));
    let memory = dma_file(&dir, 8192);
    let mut client = Client::new(server.path()).unwrap();
    set_command(
        &mut client,
        pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER,
    );
    client
        .dma_map(0, 0x10_0000, 8192, memory.as_raw_fd())
        .unwrap();
    let bar = VFIO_PCI_BAR0_REGION_INDEX;
    let write = |client: &mut Client, at: u32, bytes: &[u8]| {
        client.region_write(bar, u64::from(at), bytes).unwrap();
    };
    write(
        &mut client,
        ADMIN_SQ_BASE.offset(),
        &0x10_0000u64.to_le_bytes(),
    );
    write(
        &mut client,
        ADMIN_CQ_BASE.offset(),
        &0x10_1000u64.to_le_bytes(),
    );
    let size = AdminQueueSize::new().with_sq_log2(2).with_cq_log2(2);
    write(
        &mut client,
        ADMIN_QUEUE_SIZE.offset(),
        &u32::from(size).to_le_bytes(),
    );
    let enable = DevCtrl::new().with_enable(true);
    write(
        &mut client,
        DEV_CTRL.offset(),
        &u32::from(enable).to_le_bytes(),
    );
    // The memory goes, then the NIC is asked to read its first admin command from it.
    memory.set_len(0).unwrap();
    let doorbell = RingIndex::new().with_index(1);
    write(
        &mut client,
        ADMIN_SQ_DOORBELL.offset(),
        &u32::from(doorbell).to_le_bytes(),
    );
    assert!(fns[0].read64(DMA_FAULTS.offset()) > 0);
    let mut id = [0u8; 4];
    client
        .region_read(bar, u64::from(ID.offset()), &mut id)
        .unwrap();
    assert_eq!(u32::from_le_bytes(id), fns[0].read32(ID.offset()));
    drop(client);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Completion interrupts over vfio-user: the driver gives the server an eventfd per MSI-X
/// vector (`SET_IRQS`), and a thread asleep in `cq_sread` wakes when the server's NIC raises
/// the vector for a message sent through another client; the server's configuration space
/// shows MSI-X enabled, and when the client goes its eventfds are taken back.
#[test]
fn a_completion_wakes_a_driver_asleep_over_vfio_user() {
    let Served {
        fabric: _fabric,
        fns,
        dir,
        servers: (sa, sb),
        threads: (ta, tb),
        mut a,
        mut b,
    } = served_pair("interrupts");
    b.post_recvs(1);
    let raised = fns[1].debug_counters().msix_messages;
    std::thread::scope(|s| {
        let ep = &mut b.ep;
        let waiter = s.spawn(move || {
            ep.cq_sread(Some(std::time::Duration::from_secs(30)))
                .map(|ev| ev.buffer.and_then(|buf| buf.to_vec().ok()))
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "nothing has arrived");
        a.send(0, b"over the socket", 1);
        assert_eq!(
            waiter.join().expect("waiter"),
            Ok(Some(b"over the socket".to_vec()))
        );
    });
    assert!(fns[1].debug_counters().msix_messages > raised);
    assert_ne!(fns[1].msix_control() & pci::MSIX_CONTROL_ENABLE, 0);
    assert_eq!(fns[1].debug_counters().msix_unclaimed, 0);
    drop((a, b));
    ta.join().unwrap().unwrap();
    tb.join().unwrap().unwrap();
    assert_eq!(fns[1].msix_control(), 0, "released with the client");
    drop((sa, sb));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A NIC of interface 1.11 behind a server of its time: BAR0 is its registers alone
/// (`REGISTERS_SIZE`, no MSI-X pages), configuration space names the NIC, and the server
/// offers no interrupt index. Register accesses and DMA mappings reach the simulated function.
struct RegistersOnlyNic {
    function: SimFunction,
    command: [u8; 2],
}

impl ServerBackend for RegistersOnlyNic {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> std::io::Result<()> {
        data.fill(0);
        let at = offset as u32;
        let bytes = match (region, data.len()) {
            (VFIO_PCI_BAR0_REGION_INDEX, 4) => u64::from(self.function.read32(at)).to_le_bytes(),
            (VFIO_PCI_BAR0_REGION_INDEX, 8) => self.function.read64(at).to_le_bytes(),
            (VFIO_PCI_CONFIG_REGION_INDEX, _) if offset == pci::VENDOR_ID as u64 => {
                u64::from(pci::ID_DWORD).to_le_bytes()
            }
            (VFIO_PCI_CONFIG_REGION_INDEX, _) if offset == pci::COMMAND as u64 => {
                u64::from(u16::from_le_bytes(self.command)).to_le_bytes()
            }
            _ => [0xFF; 8],
        };
        for (d, s) in data.iter_mut().zip(bytes) {
            *d = s;
        }
        Ok(())
    }
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let at = offset as u32;
        match (region, data) {
            (VFIO_PCI_BAR0_REGION_INDEX, &[a, b, c, d]) => {
                self.function.write32(at, u32::from_le_bytes([a, b, c, d]))
            }
            (VFIO_PCI_BAR0_REGION_INDEX, words) if words.len() % 8 == 0 => {
                let words: Vec<u64> = words
                    .chunks_exact(8)
                    .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
                    .collect();
                match words.as_slice() {
                    [one] => self.function.write64(at, *one),
                    many => self.function.write64_burst(at, many),
                }
            }
            (VFIO_PCI_CONFIG_REGION_INDEX, &[a, b]) if offset == pci::COMMAND as u64 => {
                self.command = [a, b];
            }
            _ => {}
        }
        Ok(())
    }
    fn dma_map(
        &mut self,
        _: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> std::io::Result<()> {
        let fd = fd.ok_or_else(|| std::io::Error::other("no descriptor"))?;
        self.function
            .dma_map(address, size, fd.as_fd(), offset)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
    fn dma_unmap(&mut self, _: DmaUnmapFlags, address: u64, size: u64) -> std::io::Result<()> {
        let _ = self.function.dma_unmap(address, size);
        Ok(())
    }
    fn reset(&mut self) -> std::io::Result<()> {
        self.function.function_level_reset();
        Ok(())
    }
    fn set_irqs(&mut self, _: u32, _: u32, _: u32, _: u32, _: Vec<File>) -> std::io::Result<()> {
        Err(std::io::Error::other("no interrupts"))
    }
}

/// A NIC older than interface 1.12 has no MSI-X pages: its BAR0 is the registers alone. The
/// driver opens it over vfio-user as before, runs its datapath, and waits in `cq_sread` by
/// reading the ring (it asks the server nothing about interrupts, which it has none of).
#[test]
fn a_nic_of_interface_1_11_whose_bar0_is_its_registers_alone_opens_and_runs() {
    let fabric = uet_sim::Fabric::new();
    let fa = fabric
        .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(0)))
        .unwrap();
    let mut cfg = uet_sim::NicConfig::new(uet_tests::nic_addr(1));
    cfg.interface_minor = 11;
    let fb = fabric.add_nic(cfg).unwrap();
    let dir = socket_dir("registers-only-bar");
    let path = dir.join("old.sock");
    let server = Server::new(
        &path,
        true,
        Vec::new(),
        regions(u64::from(uet_regs::REGISTERS_SIZE)),
    )
    .unwrap();
    let mut backend = RegistersOnlyNic {
        function: fb.clone(),
        command: [0; 2],
    };
    let t = std::thread::spawn(move || server.run(&mut backend).map_err(|e| e.to_string()));
    let device = VfioUserDevice::open(&path).expect("a BAR0 of the registers alone opens");
    let mut b = Node::on_device(Arc::new(device), fb, JOB, JOB, 4);
    let mut a = Node::new(fa, JOB, 4);
    assert_eq!(a.insert(&b.addr()), 0);

    assert_eq!(b.insert(&a.addr()), 0);
    b.post_recvs(1);
    a.send(0, b"to an older NIC", 5);
    let ev =
        b.ep.cq_sread(Some(std::time::Duration::from_secs(10)))
            .expect("received");
    assert_eq!((ev.context, ev.len), (1000, 15));
    drop((ev, b));
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that gives, for an MSI-X vector, a descriptor that is no eventfd (here the write
/// end of a pipe nobody reads, whose buffer fills) is refused: had the server taken it, the
/// message that finds the pipe full would block the server, and with it every NIC of its
/// fabric, for good. The vector stays without a trigger and MSI-X stays disabled.
#[test]
fn a_descriptor_that_is_no_eventfd_is_refused_as_an_msix_trigger() {
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("pipe-trigger");
    let (server, t) = serve(&fns[0], &dir.join("a.sock"));
    let mut client = Client::new(server.path()).expect("connect");
    let (_reader, writer) = std::io::pipe().expect("pipe");
    client
        .set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            1,
            &[writer.as_raw_fd()],
        )
        .expect("answered");
    assert_eq!(fns[0].msix_control() & pci::MSIX_CONTROL_ENABLE, 0);
    // Raise the vector more often than a pipe holds messages (64 KiB, 8 bytes each).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..10_000 {
            let _ = client.set_irqs(
                VFIO_PCI_MSIX_IRQ_INDEX,
                VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
                0,
                1,
                &[],
            );
        }
        let _ = done_tx.send(client);
    });
    let client = done_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the server answers every request");
    assert_eq!(fns[0].debug_counters().msix_messages, 0);
    drop(client);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `SET_IRQS` of the MSI-X index is checked as vfio-pci checks it: vectors outside the table
/// (the first one even for a count of 0, or the last) are refused and change nothing; count
/// 0 with `DATA_NONE` from vector 0 disables MSI-X.
#[test]
fn set_irqs_outside_the_table_is_refused_and_count_0_disables() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let (_fabric, fns) = uet_tests::fabric(1);
    let dir = socket_dir("set-irqs");
    let (server, t) = serve(&fns[0], &dir.join("a.sock"));
    let mut client = Client::new(server.path()).expect("connect");
    // SAFETY: eventfd(2) takes no pointers; the descriptor it returns is owned here.
    let eventfd = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) };
    let set = |client: &mut Client, flags: u32, start: u32, count: u32, fds: &[i32]| {
        client
            .set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, start, count, fds)
            .expect("answered");
    };
    let trigger = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    let none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
    let vectors = u32::from(pci::MSIX_VECTORS);
    set(
        &mut client,
        trigger,
        vectors - 1,
        2,
        &[eventfd.as_raw_fd(), eventfd.as_raw_fd()],
    );
    assert_eq!(
        fns[0].msix_control(),
        0,
        "the last vector past the table: refused"
    );
    set(&mut client, trigger, 0, 1, &[eventfd.as_raw_fd()]);
    assert_ne!(fns[0].msix_control() & pci::MSIX_CONTROL_ENABLE, 0);
    set(&mut client, none, vectors, 0, &[]);
    assert_ne!(
        fns[0].msix_control() & pci::MSIX_CONTROL_ENABLE,
        0,
        "a first vector past the table is refused even for count 0"
    );
    set(&mut client, none, 0, 0, &[]);
    assert_eq!(fns[0].msix_control(), 0, "count 0 disables");
    drop(client);
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A NIC of today behind a server that offers no interrupt index and whose configuration
/// space has no MSI-X capability (the server of `RegistersOnlyNic`): the driver finds no
/// MSI-X capability, as a PCI driver looks for it, and polls; it never asks the server about
/// an index it does not have (`GET_IRQ_INFO`), whose refusal, a bare error header, the
/// `vfio_user` client would wait on for the rest of a reply that never comes, holding the
/// device's conversation for good.
#[test]
fn a_function_without_msix_behind_a_server_without_interrupts_is_polled() {
    let fabric = uet_sim::Fabric::new();
    let fa = fabric
        .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(0)))
        .unwrap();
    let fb = fabric
        .add_nic(uet_sim::NicConfig::new(uet_tests::nic_addr(1)))
        .unwrap();
    let dir = socket_dir("no-interrupt-index");
    let path = dir.join("nic.sock");
    let server = Server::new(&path, true, Vec::new(), regions(u64::from(BAR0_SIZE))).unwrap();
    let mut backend = RegistersOnlyNic {
        function: fb.clone(),
        command: [0; 2],
    };
    let t = std::thread::spawn(move || server.run(&mut backend).map_err(|e| e.to_string()));
    let device = VfioUserDevice::open(&path).expect("open over vfio-user");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let vectors = device.msix_vectors();
        let mut b = Node::on_device(Arc::new(device), fb, JOB, JOB, 4);
        let mut a = Node::new(fa, JOB, 4);
        assert_eq!(a.insert(&b.addr()), 0);
        b.post_recvs(1);
        a.send(0, b"polled", 5);
        let got =
            b.ep.cq_sread(Some(std::time::Duration::from_secs(10)))
                .map(|ev| (ev.context, ev.len));
        drop(b);
        let _ = done_tx.send((vectors, got));
    });
    let (vectors, got) = done_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the driver answers");
    assert_eq!(vectors, 0, "no MSI-X capability");
    assert_eq!(got, Ok((1000, 6)));
    t.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A process forked from one that runs a NIC (a helper started with fork that returns
/// through its destructors, or calls `exit`) does not reach the parent's NIC: its copies of
/// the parent's objects, dropped, send nothing over the socket it shares with the parent (no
/// ENDPOINT_DESTROY, AV_DESTROY, DMA unmap or function reset) and wait on none of the
/// parent's threads, which it does not have; used, they find the device gone (an error).
/// The parent's NIC runs on untouched.
#[test]
fn a_forked_child_dropping_its_copy_of_a_nic_leaves_the_parents_nic_alone() {
    let Served {
        fabric: _fabric,
        fns,
        dir,
        servers: _servers,
        threads: _threads,
        mut a,
        mut b,
    } = served_pair("fork");
    b.post_recvs(2);
    a.send(0, b"before", 1);
    assert!(a.next_completion().unwrap().error.is_none());
    assert!(b.next_completion().unwrap().error.is_none());
    let reset_before = fns[0].read32(ADMIN_SQ_BASE.offset());

    // SAFETY: the child only drops its copy of the parent's objects and ends with _exit; it
    // takes no lock another thread of the parent may have held at the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Used in the child, the copy finds the device gone: an error, not a hang.
            let peer = b.addr();
            let refused = a.av.insert(&peer, 1, None, 0).is_err();
            drop(a);
            refused
        })) {
            Ok(true) => 0,
            Ok(false) => 2,
            Err(_) => 3,
        };
        // SAFETY: ends the forked child at once, running nothing more of the parent's.
        unsafe { libc::_exit(code) };
    }
    assert_eq!(
        uet_tests::wait_child(pid, std::time::Duration::from_secs(20)),
        Some(0),
        "the child dropped its copy and ended"
    );
    assert_eq!(
        fns[0].read32(ADMIN_SQ_BASE.offset()),
        reset_before,
        "the function was not reset"
    );
    // The parent's NIC: its AV, its endpoint and its memory as they were.
    assert!(
        a.av.verify_nic().unwrap().is_empty(),
        "the AV is on the NIC"
    );
    a.send(0, b"after", 2);
    assert!(a.next_completion().unwrap().error.is_none());
    let got = b.next_completion().unwrap();
    assert_eq!(got.buffer.unwrap().to_vec().unwrap(), b"after");
    assert_eq!(a.counter(BAD_REGISTER_ACCESSES), 0);
    assert_eq!(a.counter(DMA_FAULTS), 0);
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
