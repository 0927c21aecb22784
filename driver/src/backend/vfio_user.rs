//! The vfio-user backend: a NIC function served by another process on a Unix socket (the
//! simulator daemon, `uetctl sim serve`), reached with the `vfio_user` crate's client.
//!
//! Opening follows what a driver does with a function bound to `vfio-pci`:
//!
//! 1. Connect and negotiate the protocol; the server lists the function's regions.
//! 2. Check that region 0 (BAR0) is readable, writable and at least
//!    [`uet_regs::BAR0_SIZE`] bytes, and that configuration space (region 7) names this
//!    NIC: vendor [`uet_regs::PCI_VENDOR_ID`], device [`uet_regs::PCI_DEVICE_ID`]
//!    (`uet_regs::pci`). Anything else is refused before a register is touched.
//! 3. Set memory-space and bus-master in the command register (PCI Local Bus Specification
//!    3.0, §6.2.2), as ixy and DPDK do through sysfs or VFIO: the function may now decode
//!    BAR0 and master DMA.
//!
//! Every register access is then one request and reply on the socket, made under a lock (the
//! client is one conversation). DMA regions are passed as their memfds, so the server maps the
//! driver's memory itself and the NIC reads and writes it directly: rings and buffers never
//! cross the socket.
//!
//! When the server goes away, register reads return all ones, as a PCIe read of a
//! surprise-removed function does, and writes are dropped; the driver notices through
//! `ID` and `DEV_STATUS`, as on hardware. The first failure is logged. A server that is
//! there but stops answering holds the access until it answers or goes, as a hung PCIe
//! function stalls the CPU's load: the client has no timeout once open.
//!
//! The `vfio_user` client does not report a DMA map or unmap that the server refused (it
//! reads the reply header and returns success). The server logs the refusal; a mapping that
//! did not take shows up on the NIC as a DMA fault (`DMA_FAULTS`, and the command or
//! descriptor that touched it fails).

use crate::device::{Device, DeviceError};
use crate::dma::DmaRegion;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use uet_regs::{pci, Mmio, BAR0_SIZE};
use vfio_bindings::bindings::vfio::{
    VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::Client;

/// How long [`VfioUserDevice::open`] waits for the server to answer the connection.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// A NIC function behind a vfio-user socket.
pub struct VfioUserDevice {
    client: Mutex<Client>,
    path: PathBuf,
    /// Whether a request has failed (the server is gone); logged once.
    lost: AtomicBool,
}

impl std::fmt::Debug for VfioUserDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioUserDevice")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl VfioUserDevice {
    /// Connect to the function served at `path` and prepare it for the driver (steps 1 to 3
    /// of the module documentation), waiting at most [`OPEN_TIMEOUT`] for the server to
    /// answer. `DeviceError::Open` says why a function is refused.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DeviceError> {
        Self::open_within(path, OPEN_TIMEOUT)
    }

    /// [`VfioUserDevice::open`], waiting at most `timeout` for the server's answer to the
    /// connection (its version and its regions).
    pub fn open_within(path: impl AsRef<Path>, timeout: Duration) -> Result<Self, DeviceError> {
        let path = path.as_ref().to_path_buf();
        let refuse = |reason: String| DeviceError::Open {
            name: format!("vfio-user:{}", path.display()),
            reason,
        };
        // 1. Connect and negotiate. The client blocks on the socket with no timeout of its
        // own, so it connects on a thread of its own: a socket whose owner accepts but never
        // answers (not a vfio-user server, or a hung one) is an error, not a hang. That
        // thread ends when the socket closes.
        let (tx, rx) = mpsc::channel();
        let at = path.clone();
        std::thread::Builder::new()
            .name("vfio-user-connect".into())
            .spawn(move || {
                let _ = tx.send(Client::new(&at));
            })
            .map_err(|e| refuse(format!("cannot start the connection: {e}")))?;
        let mut client = match rx.recv_timeout(timeout) {
            Ok(connected) => connected.map_err(|e| refuse(e.to_string()))?,
            Err(_) => {
                return Err(refuse(format!(
                "no vfio-user answer within {} ms (is a uet-nic simulator serving this socket?)",
                timeout.as_millis()
            )))
            }
        };
        // 2. BAR0 and identity.
        let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        match client.region(VFIO_PCI_BAR0_REGION_INDEX) {
            Some(r) if r.flags & rw == rw && r.size >= u64::from(BAR0_SIZE) => {}
            Some(r) => {
                return Err(refuse(format!(
                    "BAR0 is {} bytes with flags {:#x}; the NIC needs {BAR0_SIZE} bytes, readable and writable",
                    r.size, r.flags
                )))
            }
            None => return Err(refuse("the function has no BAR0".to_string())),
        }
        if client
            .region(VFIO_PCI_CONFIG_REGION_INDEX)
            .is_none_or(|r| r.size < pci::CONFIG_SPACE_SIZE as u64)
        {
            return Err(refuse(
                "the function has no configuration space".to_string(),
            ));
        }
        let mut id = [0u8; 4];
        client
            .region_read(VFIO_PCI_CONFIG_REGION_INDEX, pci::VENDOR_ID as u64, &mut id)
            .map_err(|e| refuse(e.to_string()))?;
        let id = u32::from_le_bytes(id);
        if id != pci::ID_DWORD {
            return Err(refuse(format!(
                "not a uet-nic function: vendor:device {:04x}:{:04x}, expected {:04x}:{:04x}",
                id & 0xFFFF,
                id >> 16,
                uet_regs::PCI_VENDOR_ID,
                uet_regs::PCI_DEVICE_ID
            )));
        }
        // 3. Memory space and bus master on.
        let mut command = [0u8; 2];
        client
            .region_read(
                VFIO_PCI_CONFIG_REGION_INDEX,
                pci::COMMAND as u64,
                &mut command,
            )
            .map_err(|e| refuse(e.to_string()))?;
        let command =
            u16::from_le_bytes(command) | pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER;
        client
            .region_write(
                VFIO_PCI_CONFIG_REGION_INDEX,
                pci::COMMAND as u64,
                &command.to_le_bytes(),
            )
            .map_err(|e| refuse(e.to_string()))?;
        Ok(VfioUserDevice {
            client: Mutex::new(client),
            path,
            lost: AtomicBool::new(false),
        })
    }

    /// Read `N` bytes of configuration space at `offset` (all ones when the server is gone).
    pub fn config_read<const N: usize>(&self, offset: usize) -> [u8; N] {
        self.region_read(VFIO_PCI_CONFIG_REGION_INDEX, offset as u64)
    }

    /// Write `data` to configuration space at `offset` (nothing when the server is gone). The
    /// driver needs no such write after [`VfioUserDevice::open`], which enables memory space
    /// and bus mastering; this is for tools and tests that change the command register.
    pub fn config_write(&self, offset: usize, data: &[u8]) {
        self.region_write(
            VFIO_PCI_CONFIG_REGION_INDEX,
            offset as u64,
            data,
            "configuration write",
        );
    }

    fn client(&self) -> MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self, what: &str, e: &vfio_user::Error) {
        if !self.lost.swap(true, Ordering::Relaxed) {
            tracing::error!(path = %self.path.display(), error = %e, "vfio-user {what} failed; the function reads as all ones from now on");
        }
    }

    /// `N` bytes of `region` at `offset`; all ones when the server is gone.
    fn region_read<const N: usize>(&self, region: u32, offset: u64) -> [u8; N] {
        let mut data = [0xFF; N];
        if let Err(e) = self.client().region_read(region, offset, &mut data) {
            self.failed("region read", &e);
            data = [0xFF; N];
        }
        data
    }

    fn bar_read<const N: usize>(&self, offset: u32) -> [u8; N] {
        self.region_read(VFIO_PCI_BAR0_REGION_INDEX, u64::from(offset))
    }

    fn bar_write(&self, offset: u32, data: &[u8]) {
        self.region_write(
            VFIO_PCI_BAR0_REGION_INDEX,
            u64::from(offset),
            data,
            "BAR0 write",
        );
    }

    fn region_write(&self, region: u32, offset: u64, data: &[u8], what: &str) {
        if let Err(e) = self.client().region_write(region, offset, data) {
            self.failed(what, &e);
        }
    }
}

impl Mmio for VfioUserDevice {
    fn read32(&self, offset: u32) -> u32 {
        u32::from_le_bytes(self.bar_read(offset))
    }

    fn write32(&self, offset: u32, value: u32) {
        self.bar_write(offset, &value.to_le_bytes());
    }

    fn read64(&self, offset: u32) -> u64 {
        u64::from_le_bytes(self.bar_read(offset))
    }

    fn write64(&self, offset: u32, value: u64) {
        self.bar_write(offset, &value.to_le_bytes());
    }

    /// One region write for the whole burst, as a write-combined line is one PCIe write.
    fn write64_burst(&self, offset: u32, words: &[u64]) {
        let mut bytes = [0u8; 64];
        let mut at = offset;
        // At most a 64-byte line per message, the size of a write-combining buffer.
        for line in words.chunks(8) {
            let n = line.len() * 8;
            for (dst, w) in bytes.chunks_exact_mut(8).zip(line) {
                dst.copy_from_slice(&w.to_le_bytes());
            }
            self.bar_write(at, bytes.get(..n).unwrap_or_default());
            at = at.wrapping_add(n as u32);
        }
    }
}

impl Device for VfioUserDevice {
    fn bar0(&self) -> &dyn Mmio {
        self
    }

    fn dma_map(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        self.client()
            .dma_map(
                0,
                region.iova(),
                region.len() as u64,
                region.fd().as_raw_fd(),
            )
            .map_err(|e| DeviceError::DmaMap {
                iova: region.iova(),
                len: region.len(),
                reason: e.to_string(),
            })
    }

    fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        self.client()
            .dma_unmap(region.iova(), region.len() as u64)
            .map_err(|e| DeviceError::DmaUnmap {
                iova: region.iova(),
                reason: e.to_string(),
            })
    }

    fn name(&self) -> String {
        format!("vfio-user:{}", self.path.display())
    }
}
