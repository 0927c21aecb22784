//! The vfio-user server: one simulated function served on a Unix socket.
//!
//! A driver in another process attaches to the function as it would to a PCI function bound
//! to `vfio-pci`, through the vfio-user protocol (the `vfio_user` crate speaks it on both
//! sides), so simulator and driver can be separate processes, and the simulator a daemon.
//! The server offers:
//!
//! * **region 0, BAR0** ([`uet_regs::BAR0_SIZE`] bytes): each access is the register access
//!   [`crate::SimFunction`] makes in process. A 4- or 8-byte access is one `read32`/`read64`
//!   or `write32`/`write64`; a longer write of whole 8-byte words is a burst
//!   (`Mmio::write64_burst`, the AV write window's write-combined line), one per 64 bytes. Any other access
//!   reads all ones, writes nothing and counts in `BAD_REGISTER_ACCESSES`, as a PCIe function
//!   that rejects the access (and as the same access made in process). A doorbell
//!   write runs the fabric until idle before the reply leaves, so, as in process, everything a
//!   doorbell caused has happened by the time the driver reads its completion ring;
//! * **region 7, configuration space** (`crate::pci_config`, 256 bytes), whose command
//!   register gates the function: BAR0 answers only with memory space enabled (all ones and
//!   dropped writes otherwise), and the function's DMA works only with bus mastering enabled
//!   (a DMA fault otherwise). Both are clear when the server starts and after a reset.
//!   Its PCI Express capability advertises Function Level Reset, and setting Device
//!   Control's "Initiate Function Level Reset" resets the function as a reset message does;
//! * **DMA**: each region the client maps arrives as a file descriptor (the driver's DMA
//!   memory is a memfd) and is mapped into the function's IOMMU view
//!   (`SimFunction::dma_map_for`), so the NIC reads and writes the driver's memory directly,
//!   as far as the map's flags allow (readable, writable: a DMA they do not allow is a DMA
//!   fault; a map that allows neither is refused). The memory must be sealed against
//!   shrinking (`F_SEAL_SHRINK`, as the driver seals its memfds): memory the client could
//!   shrink under a mapping would fault the server on the NIC's next access. The IOMMU's
//!   limits bound what one client maps (`NicConfig::dma_mappings` and `dma_bytes`: each
//!   mapping takes the server's address space, however sparse the client's memory);
//! * **device reset**: a function-level reset (the model's `FUNCTION_RESET`, and the
//!   configuration header's reset values);
//! * **interrupts**: the MSI-X index (`VFIO_PCI_MSIX_IRQ_INDEX`) has
//!   [`uet_regs::pci::MSIX_VECTORS`] vectors, each deliverable to an eventfd the client
//!   passes with `SET_IRQS` (`DATA_EVENTFD | ACTION_TRIGGER`), as vfio-pci's do: a vector
//!   with an eventfd is unmasked and MSI-X enabled, `DATA_NONE` with count 0 disables them
//!   all, and `DATA_NONE` with a count raises those vectors (a test of the wiring). The
//!   legacy and MSI indices have no vectors. Other requests (masking, `DATA_BOOL`, vectors
//!   outside the table, fewer descriptors than vectors, a descriptor that is no eventfd: a
//!   pipe or socket, which a message could block on) are refused and change nothing; an
//!   eventfd taken is made non-blocking (the flag is shared with the client's descriptor), so
//!   that a client that fills its counter loses a message rather than stalling the server; the
//!   `vfio_user` client does not pass the refusal on, so a client asks `GET_IRQ_INFO` first.
//!   A reset, and the client's going, take every eventfd back and disable MSI-X.
//!
//! A server serves one client at a time ([`VfioUserServer::serve_one`]). When the client goes
//! away, cleanly or not, the function is released as the kernel releases a VFIO device: its
//! DMA mappings are withdrawn (the client's memory is gone) and it is function-level reset,
//! so the next client finds it as at power-on and no DMA reaches freed memory.
//!
//! The protocol cannot carry a failed BAR access back to the `vfio_user` client (it expects a
//! reply of the access's shape), which is why a bad access is answered in band, never as an
//! error reply; only a read longer than one message carries (1 MiB, the protocol's default
//! `max_data_xfer_size`) is refused with one, unfilled. A failed DMA map is answered with an
//! error reply and logged; see the driver's backend for what a client learns of it. A refused
//! DMA unmap is logged and answered as done, for the same reason as a bad access: the client
//! reads an unmap's reply in full. An unmap with `VFIO_DMA_UNMAP_FLAG_ALL` (address and size
//! 0) withdraws every mapping.

use crate::pci_config::PciConfig;
use crate::{DmaAccess, SimError, SimFunction};
use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use uet_regs::pci::{CONFIG_SPACE_SIZE, MSIX_VECTORS};
use uet_regs::{Mmio, BAR0_SIZE};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_DMA_UNMAP_FLAG_ALL, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_NORESIZE,
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_REGIONS,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion};

/// A simulated function listening on a vfio-user socket.
pub struct VfioUserServer {
    server: Server,
    path: PathBuf,
    /// The function served (the backend's, which is locked while a client is served).
    function: SimFunction,
    backend: std::sync::Mutex<FunctionBackend>,
}

impl std::fmt::Debug for VfioUserServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioUserServer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl VfioUserServer {
    /// Listen for a client of `function` on a new socket at `path` (which must not exist).
    /// The socket is removed when the server is dropped.
    pub fn bind(function: SimFunction, path: impl AsRef<Path>) -> Result<Self, SimError> {
        let path = path.as_ref().to_path_buf();
        let fail = |e: vfio_user::Error| SimError::VfioUser {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let server = Server::new(&path, true, irqs(), regions()).map_err(fail)?;
        // The command register starts clear: no DMA until the client enables bus mastering.
        function.set_bus_master(false);
        Ok(VfioUserServer {
            server,
            path,
            function: function.clone(),
            backend: std::sync::Mutex::new(FunctionBackend {
                function,
                config: PciConfig::default(),
            }),
        })
    }

    /// The function served.
    pub fn function(&self) -> &SimFunction {
        &self.function
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wait for a client, serve it until it disconnects, then release the function (DMA
    /// unmapped, function-level reset). An error is a broken conversation (a malformed or
    /// unsupported message, a socket error); the function is released either way. The
    /// protocol crate panics on some malformed messages (a version message too short, or
    /// whose capabilities are not a NUL-terminated string); such a panic ends the
    /// conversation as an error, not the server.
    pub fn serve_one(&self) -> Result<(), SimError> {
        let mut backend = self
            .backend
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Unwind safety: whatever state the panic left in the backend, `release` below resets
        // the function and withdraws its mappings before anything else uses it.
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.server.run(&mut *backend)
        }));
        backend.release();
        let fail = |reason: String| SimError::VfioUser {
            path: self.path.display().to_string(),
            reason,
        };
        match served {
            Ok(served) => served.map_err(|e| fail(e.to_string())),
            Err(_) => Err(fail(
                "malformed message (the protocol crate panicked)".into(),
            )),
        }
    }

    /// Serve clients one after another, forever; a broken conversation is logged and the
    /// next client is served. After a failure the server waits a little before it accepts
    /// again, so a socket that keeps failing (no descriptors left to accept with) does not
    /// spin a core.
    pub fn serve(&self) -> ! {
        loop {
            if let Err(e) = self.serve_one() {
                tracing::warn!(error = %e, "vfio-user client dropped");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// The regions of a PCI function, by VFIO region index: BAR0 and configuration space; the
/// other BARs, the ROM and VGA are absent (size 0).
fn regions() -> Vec<ServerRegion> {
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let (size, flags) = match index {
                VFIO_PCI_BAR0_REGION_INDEX => (u64::from(BAR0_SIZE), READ_WRITE),
                VFIO_PCI_CONFIG_REGION_INDEX => (CONFIG_SPACE_SIZE as u64, READ_WRITE),
                _ => (0, 0),
            };
            ServerRegion {
                region_info: vfio_region_info {
                    argsz: core::mem::size_of::<vfio_region_info>() as u32,
                    flags,
                    index,
                    cap_offset: 0,
                    size,
                    offset: 0,
                },
                sparse_areas: Vec::new(),
                mmap_fd: None,
            }
        })
        .collect()
}

const READ_WRITE: u32 = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;

/// The interrupt indices of a PCI function: MSI-X with the table's vectors, each to an
/// eventfd; no legacy interrupt, no MSI.
fn irqs() -> Vec<IrqInfo> {
    (0..=VFIO_PCI_MSIX_IRQ_INDEX)
        .map(|index| match index {
            VFIO_PCI_MSIX_IRQ_INDEX => IrqInfo {
                index,
                flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
                count: u32::from(MSIX_VECTORS),
            },
            _ => IrqInfo {
                index,
                flags: 0,
                count: 0,
            },
        })
        .collect()
}

/// What the server does with each message: the function and its configuration header.
struct FunctionBackend {
    function: SimFunction,
    config: PciConfig,
}

impl FunctionBackend {
    /// The client is gone: withdraw its DMA mappings and reset the function.
    fn release(&mut self) {
        self.function.dma_unmap_all();
        self.reset_function();
    }

    fn reset_function(&mut self) {
        self.function.function_level_reset();
        self.function.clear_msix();
        self.config.reset();
        self.function.set_bus_master(self.config.bus_master());
    }

    /// Write configuration space; the command register's bus-master bit reaches the
    /// function's DMA at once, and Device Control's "Initiate Function Level Reset" resets
    /// the function and the header.
    fn config_write(&mut self, offset: u64, data: &[u8]) {
        if self.config.write(offset, data) {
            tracing::debug!("function-level reset from configuration space");
            return self.reset_function();
        }
        self.function.set_bus_master(self.config.bus_master());
        self.function.set_msix_control(self.config.msix_control());
    }

    /// `SET_IRQS` of the MSI-X index (see the module documentation).
    fn set_msix(&mut self, flags: u32, start: u32, count: u32, fds: &[File]) -> Result<(), String> {
        let data = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        let action = flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
        if action != VFIO_IRQ_SET_ACTION_TRIGGER {
            return Err(format!(
                "MSI-X action {action:#x} (only triggers are offered)"
            ));
        }
        // As vfio-pci checks every SET_IRQS: the first vector inside the table, even for
        // count 0, and the last.
        let in_table = start < u32::from(MSIX_VECTORS)
            && start
                .checked_add(count)
                .is_some_and(|end| end <= u32::from(MSIX_VECTORS));
        if !in_table {
            return Err(format!(
                "vectors {start}+{count} outside the table of {MSIX_VECTORS}"
            ));
        }
        let vectors = (start..start + count).map(|v| v as u16);
        match data {
            VFIO_IRQ_SET_DATA_NONE if count == 0 => self.function.clear_msix(),
            VFIO_IRQ_SET_DATA_NONE => vectors.for_each(|v| self.function.raise_msix(v)),
            VFIO_IRQ_SET_DATA_EVENTFD if !fds.iter().all(is_eventfd_like) => {
                return Err("a descriptor that is no eventfd (a pipe, socket or file)".into())
            }
            VFIO_IRQ_SET_DATA_EVENTFD if fds.len() == count as usize => {
                if !fds.iter().all(set_nonblocking) {
                    return Err("a descriptor that cannot be made non-blocking".into());
                }
                // All or none: a descriptor the server cannot duplicate changes no vector.
                let fds: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
                self.function
                    .set_msix_eventfds(start as u16, &fds)
                    .map_err(|e| e.to_string())?;
            }
            VFIO_IRQ_SET_DATA_EVENTFD => {
                return Err(format!("{} descriptors for {count} vectors", fds.len()))
            }
            _ => return Err(format!("MSI-X data type {data:#x}")),
        }
        self.config.set_msix_control(self.function.msix_control());
        Ok(())
    }

    /// `offset` as a BAR0 register offset, when `len` bytes from it lie inside BAR0.
    fn bar0_offset(offset: u64, len: usize) -> Option<u32> {
        let end = offset.checked_add(len as u64)?;
        (end <= u64::from(BAR0_SIZE)).then_some(offset as u32)
    }
}

/// Whether `file` may be a vector's trigger: an anonymous inode, as an eventfd is (no file
/// type in its mode). A pipe, socket or device the client passes instead could fill and block
/// the message written to it, and with it the server and every NIC of its fabric; a file
/// would grow by every message. The other anonymous inodes refuse the write at once.
fn is_eventfd_like(file: &File) -> bool {
    use std::os::unix::fs::FileTypeExt;
    file.metadata().is_ok_and(|m| {
        let t = m.file_type();
        !(t.is_file()
            || t.is_dir()
            || t.is_symlink()
            || t.is_fifo()
            || t.is_socket()
            || t.is_char_device()
            || t.is_block_device())
    })
}

/// Make `file`'s writes non-blocking; whether it is. A message adds 1 to an eventfd, and a
/// blocking eventfd whose counter the client has filled (2^64 - 2) would block that write, and
/// with it the server and every NIC of its fabric, until the client reads it. A non-blocking
/// one refuses the write instead (its reader is woken already), as the kernel's
/// `eventfd_signal` never waits. The flag belongs to the open file, which the client shares:
/// its own reads of the eventfd no longer block either (the driver's eventfds are
/// non-blocking from the start). For the same reason a client may clear the flag again on its
/// own descriptor, and then stall the write as before: this guards against a careless client,
/// not a hostile one (a file description of the server's own cannot be opened on an eventfd,
/// and eventfd writes take no `RWF_NOWAIT`).
#[allow(unsafe_code)]
fn set_nonblocking(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL only reads the file status flags of a descriptor this process owns
    // (`file` is borrowed for the call); it touches no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return false;
    }
    if flags & libc::O_NONBLOCK != 0 {
        return true;
    }
    // SAFETY: F_SETFL sets the status flags of the same descriptor, still borrowed; it
    // touches no memory.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0 }
}

/// Whether `file` carries the `F_SEAL_SHRINK` seal: its size can never go below what it is
/// now, so a mapping checked against that size stays backed (a memfd the driver sealed).
#[allow(unsafe_code)]
fn sealed_against_shrinking(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GET_SEALS only reads the seals of a descriptor this process owns (`file` is
    // borrowed for the call); it touches no memory and fails with EINVAL for files that
    // cannot be sealed.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}

/// The most bytes one region read or write carries: the vfio-user protocol's default
/// `max_data_xfer_size`, which the `vfio_user` crate's server announces in its version reply.
const MAX_DATA_XFER: usize = 1 << 20;

fn io_error(e: SimError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl ServerBackend for FunctionBackend {
    /// A read longer than [`MAX_DATA_XFER`] is refused (an error reply, no data), before a
    /// byte of it is filled: the protocol crate has set aside what the count asks, up to
    /// 4 GiB, untouched, and would send back whatever is filled.
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> std::io::Result<()> {
        if data.len() > MAX_DATA_XFER {
            tracing::warn!(
                region,
                offset,
                len = data.len(),
                "region read too long refused"
            );
            return Err(std::io::Error::other(format!(
                "a read of {} bytes; one message carries at most {MAX_DATA_XFER}",
                data.len()
            )));
        }
        match region {
            VFIO_PCI_BAR0_REGION_INDEX if !self.config.memory_space() => {
                tracing::debug!(offset, "BAR0 read with memory space disabled: all ones");
                data.fill(0xFF);
            }
            VFIO_PCI_BAR0_REGION_INDEX => {
                let value = match (Self::bar0_offset(offset, data.len()), data.len()) {
                    (Some(at), 4) => u64::from(self.function.read32(at)),
                    (Some(at), 8) => self.function.read64(at),
                    _ => {
                        tracing::warn!(offset, len = data.len(), "unsupported BAR0 read");
                        self.function.bad_register_access();
                        u64::MAX
                    }
                };
                let bytes = value.to_le_bytes();
                for (i, b) in data.iter_mut().enumerate() {
                    *b = bytes.get(i).copied().unwrap_or(0xFF);
                }
            }
            VFIO_PCI_CONFIG_REGION_INDEX => self.config.read(offset, data),
            _ => data.fill(0xFF),
        }
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
        match region {
            VFIO_PCI_BAR0_REGION_INDEX if !self.config.memory_space() => {
                tracing::debug!(offset, "BAR0 write with memory space disabled dropped");
            }
            VFIO_PCI_BAR0_REGION_INDEX => match (Self::bar0_offset(offset, data.len()), data) {
                (Some(at), &[a, b, c, d]) => {
                    self.function.write32(at, u32::from_le_bytes([a, b, c, d]))
                }
                (Some(at), &[a, b, c, d, e, f, g, h]) => {
                    self.function
                        .write64(at, u64::from_le_bytes([a, b, c, d, e, f, g, h]));
                }
                (Some(at), bytes) if !bytes.is_empty() && bytes.len() % 8 == 0 => {
                    // A burst, decoded a 64-byte line at a time on the stack (no allocation
                    // per access); each line is one burst, as a write-combined line is.
                    let mut line = [0u64; 8];
                    let mut line_at = at;
                    for chunk in bytes.chunks(64) {
                        let n = chunk.len() / 8;
                        for (word, raw) in line.iter_mut().zip(chunk.chunks_exact(8)) {
                            *word = raw.first_chunk::<8>().map_or(0, |w| u64::from_le_bytes(*w));
                        }
                        self.function
                            .write64_burst(line_at, line.get(..n).unwrap_or_default());
                        line_at = line_at.wrapping_add(chunk.len() as u32);
                    }
                }
                _ => {
                    tracing::warn!(offset, len = data.len(), "unsupported BAR0 write dropped");
                    self.function.bad_register_access();
                }
            },
            VFIO_PCI_CONFIG_REGION_INDEX => self.config_write(offset, data),
            _ => {}
        }
        Ok(())
    }

    /// The mapping allows what the flags do (`VFIO_DMA_MAP_FLAG_READ` and `_WRITE`); one
    /// that allows neither is refused.
    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> std::io::Result<()> {
        // Without a descriptor the client would have the server reach its memory by
        // DMA_READ/DMA_WRITE messages, which the protocol crate does not carry.
        let Some(fd) = fd else {
            tracing::warn!(address, size, "DMA map without a file descriptor refused");
            return Err(std::io::Error::other("DMA map needs a file descriptor"));
        };
        // Memory the client could still shrink would fault this process (SIGBUS) on the
        // NIC's next access past the new end: only memory sealed against shrinking is mapped.
        if !sealed_against_shrinking(&fd) {
            tracing::warn!(
                address,
                size,
                "DMA map of memory not sealed against shrinking refused"
            );
            return Err(std::io::Error::other(
                "DMA memory must be a memfd sealed against shrinking (F_SEAL_SHRINK)",
            ));
        }
        let access = DmaAccess {
            read: flags.contains(DmaMapFlags::READ),
            write: flags.contains(DmaMapFlags::WRITE),
        };
        self.function
            .dma_map_for(address, size, fd.as_fd(), offset, access)
            .inspect_err(|e| tracing::warn!(address, size, error = %e, "DMA map refused"))
            .map_err(io_error)
    }

    /// A refused unmap is logged and answered as done: the `vfio_user` client reads an
    /// unmap's reply as a whole unmap message, and an error reply (a bare header) would leave
    /// it waiting for the rest, and the conversation stuck.
    ///
    /// `VFIO_DMA_UNMAP_FLAG_ALL` (linux/vfio.h's bit, which QEMU's vfio-user client sends when
    /// its whole address space goes) with address and size 0 withdraws every mapping, as
    /// VFIO's type1 IOMMU does; with a range it is refused. Taken as a range of length 0 it
    /// would be refused and answered as done, leaving the NIC reaching memory the client
    /// then frees.
    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> std::io::Result<()> {
        if flags.bits() & VFIO_DMA_UNMAP_FLAG_ALL != 0 {
            if address == 0 && size == 0 {
                self.function.dma_unmap_all();
            } else {
                tracing::warn!(
                    address,
                    size,
                    "DMA unmap of everything with a range refused"
                );
            }
            return Ok(());
        }
        if let Err(e) = self.function.dma_unmap(address, size) {
            tracing::warn!(address, size, error = %e, "DMA unmap refused");
        }
        Ok(())
    }

    fn reset(&mut self) -> std::io::Result<()> {
        self.reset_function();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> std::io::Result<()> {
        let done = match index {
            VFIO_PCI_MSIX_IRQ_INDEX => self.set_msix(flags, start, count, &fds),
            _ => Err(format!("interrupt index {index} has no vectors")),
        };
        done.map_err(|reason| {
            tracing::warn!(index, flags, start, count, %reason, "SET_IRQS refused");
            std::io::Error::other(reason)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fabric, NicConfig};
    use std::io::{Read, Write};
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::sync::mpsc;
    use std::time::Duration;

    fn backend() -> FunctionBackend {
        let fabric = Fabric::new();
        let function = fabric
            .add_nic(NicConfig::new("10.0.0.1".parse().unwrap()))
            .unwrap();
        FunctionBackend {
            function,
            config: PciConfig::default(),
        }
    }

    /// A blocking eventfd, as a client may create one.
    #[allow(unsafe_code)]
    fn blocking_eventfd() -> File {
        // SAFETY: eventfd creates a descriptor; the result is checked before it is owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd");
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        unsafe { File::from_raw_fd(fd) }
    }

    /// A memfd of `len` bytes, sparse (nothing allocated), sealed against shrinking as the
    /// server asks.
    #[allow(unsafe_code)]
    fn sealed_memfd(len: u64) -> File {
        // SAFETY: memfd_create with a NUL-terminated name; the result is checked before it is
        // owned.
        let fd = unsafe {
            libc::memfd_create(
                c"uet-vfio-user-test".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        assert!(fd >= 0, "memfd_create");
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len).unwrap();
        // SAFETY: F_ADD_SEALS on the descriptor owned above; it touches no memory.
        let sealed = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        assert_eq!(sealed, 0, "F_ADD_SEALS");
        file
    }

    /// The lowest two descriptor numbers not open in this process (asked of each number
    /// with F_GETFD, which opens nothing).
    #[allow(unsafe_code)]
    fn two_free_descriptors() -> (i32, i32) {
        // SAFETY: F_GETFD reads a descriptor's flags, or fails with EBADF for a number not
        // open; it touches no memory.
        let mut free = (0..).filter(|&n| unsafe { libc::fcntl(n, libc::F_GETFD) } < 0);
        (free.next().unwrap(), free.next().unwrap())
    }

    /// Whether this is the process of its own that test `name` runs in: `false` in the
    /// process that started it (which checked that it passed). For a test that changes what
    /// the whole process may do, which tests on other threads of a shared process would feel.
    fn in_own_process(name: &str) -> bool {
        const OWN: &str = "UET_SIM_TEST_IN_OWN_PROCESS";
        if std::env::var_os(OWN).is_some_and(|n| n == name) {
            return true;
        }
        let program = std::env::current_exe().expect("the test program");
        let out = std::process::Command::new(program)
            .args([name, "--exact", "--test-threads=1"])
            .env(OWN, name)
            .output()
            .expect("the test program runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{name} in a process of its own: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        false
    }

    /// A SET_IRQS whose descriptors the server cannot all duplicate (one descriptor left in
    /// the process for two) is refused and changes no vector: vector 0 still raises the
    /// eventfd it had, vector 1 none. (On a process of its own: the descriptor limit is the
    /// process's.)
    #[test]
    #[allow(unsafe_code)]
    fn a_set_irqs_the_server_cannot_take_whole_changes_no_vector() {
        const NAME: &str =
            "vfio_user::tests::a_set_irqs_the_server_cannot_take_whole_changes_no_vector";
        if !in_own_process(NAME) {
            return;
        }
        let mut b = backend();
        let trigger = VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_EVENTFD;
        let mut before = blocking_eventfd();
        let copy = before.try_clone().unwrap();
        b.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, trigger, 0, 1, vec![copy])
            .expect("vector 0's eventfd");
        let (mut e1, e2) = (blocking_eventfd(), blocking_eventfd());
        let passed = vec![e1.try_clone().unwrap(), e2.try_clone().unwrap()];
        let mut saved = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the `rlimit` it is given, which outlives the call.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut saved) },
            0
        );
        // One descriptor number left below the limit: the first duplicate takes it.
        let (_, second) = two_free_descriptors();
        let tight = libc::rlimit {
            rlim_cur: second as libc::rlim_t,
            rlim_max: saved.rlim_max,
        };
        // SAFETY: setrlimit reads the `rlimit` it is given, which outlives the call.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &tight) }, 0);
        let refused = b.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, trigger, 0, 2, passed);
        // SAFETY: as above; the limit as it was.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &saved) }, 0);
        assert!(refused.is_err(), "two duplicates with room for one");
        b.function.raise_msix(0);
        b.function.raise_msix(1);
        let mut count = [0u8; 8];
        before.read_exact(&mut count).unwrap();
        assert_eq!(
            u64::from_ne_bytes(count),
            1,
            "vector 0 raises its old eventfd"
        );
        // Vector 1 has none: nothing reached the eventfd passed for it.
        let flags = {
            // SAFETY: F_GETFL/F_SETFL of a descriptor `e1` owns; no memory is touched.
            let f = unsafe { libc::fcntl(e1.as_raw_fd(), libc::F_GETFL) };
            // SAFETY: as above.
            unsafe { libc::fcntl(e1.as_raw_fd(), libc::F_SETFL, f | libc::O_NONBLOCK) }
        };
        assert_eq!(flags, 0);
        assert!(
            e1.read_exact(&mut count).is_err(),
            "vector 1 raised nothing"
        );
    }

    /// A SET_IRQS of eventfds for no vector (count 0) changes nothing: MSI-X that the client
    /// disabled in configuration space stays disabled, though a vector has an eventfd.
    #[test]
    fn a_set_irqs_of_eventfds_for_no_vector_leaves_msix_disabled() {
        use uet_regs::pci::{MSIX_CONTROL_ENABLE, MSIX_MESSAGE_CONTROL};
        let mut b = backend();
        let trigger = VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_EVENTFD;
        let e = blocking_eventfd();
        b.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, trigger, 0, 1, vec![e])
            .expect("vector 0's eventfd");
        assert_ne!(b.function.msix_control() & MSIX_CONTROL_ENABLE, 0);
        b.config_write(MSIX_MESSAGE_CONTROL as u64, &0u16.to_le_bytes());
        assert_eq!(b.function.msix_control() & MSIX_CONTROL_ENABLE, 0);
        b.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, trigger, 0, 0, Vec::new())
            .expect("no vector");
        assert_eq!(b.function.msix_control() & MSIX_CONTROL_ENABLE, 0);
        assert_eq!(b.config.msix_control() & MSIX_CONTROL_ENABLE, 0);
    }

    #[test]
    fn a_client_cannot_map_more_than_the_functions_dma_memory() {
        let mut b = backend();
        // Sparse memory costs the client nothing, but each mapping takes the server as much
        // address space: 128 of these would take all of it, and the server could allocate
        // nothing more, for any of its functions.
        const TIB: u64 = 1 << 40;
        let huge = sealed_memfd(TIB);
        let rw = DmaMapFlags::READ | DmaMapFlags::WRITE;
        let err = b
            .dma_map(rw, 0, 0, TIB, Some(huge.try_clone().unwrap()))
            .expect_err("a terabyte mapped");
        assert!(err.to_string().contains("DMA memory"), "{err}");
        // What the function may map still maps, and counts against the total.
        let limit = crate::config::DEFAULT_DMA_BYTES;
        b.dma_map(rw, 0, 0, limit - 4096, Some(huge.try_clone().unwrap()))
            .expect("inside the limit");
        b.dma_map(rw, 0, TIB, 8192, Some(huge.try_clone().unwrap()))
            .expect_err("past the limit with the first mapping");
        b.dma_map(rw, 0, TIB, 4096, Some(huge.try_clone().unwrap()))
            .expect("up to the limit");
        // An unmap gives its bytes back; so does the client's going.
        b.dma_unmap(DmaUnmapFlags::empty(), TIB, 4096).unwrap();
        b.dma_map(rw, 0, TIB, 4096, Some(huge.try_clone().unwrap()))
            .expect("the unmapped bytes again");
        b.release();
        b.dma_map(rw, 0, 0, limit, Some(huge))
            .expect("the whole limit after a release");
    }

    #[test]
    fn a_full_blocking_eventfd_never_blocks_the_server() {
        let mut b = backend();
        let mut client = blocking_eventfd();
        let server_copy = client.try_clone().unwrap();
        let trigger = VFIO_IRQ_SET_ACTION_TRIGGER;
        b.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            trigger | VFIO_IRQ_SET_DATA_EVENTFD,
            0,
            1,
            vec![server_copy],
        )
        .expect("eventfd taken");
        // The client fills its counter to the most an eventfd holds: one more would block.
        client.write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap();
        let (done, finished) = mpsc::channel();
        let raising = std::thread::spawn(move || {
            let raised = b.set_irqs(
                VFIO_PCI_MSIX_IRQ_INDEX,
                trigger | VFIO_IRQ_SET_DATA_NONE,
                0,
                1,
                Vec::new(),
            );
            let _ = done.send(raised.is_ok());
            b
        });
        let raised = finished.recv_timeout(Duration::from_secs(5));
        if raised.is_err() {
            // Unblock the server's write so the thread ends, then fail.
            let mut drain = [0u8; 8];
            client.read_exact(&mut drain).unwrap();
            raising.join().unwrap();
            panic!("raising a vector blocked on the client's full eventfd");
        }
        assert_eq!(raised, Ok(true));
        raising.join().unwrap();
        let mut count = [0u8; 8];
        client.read_exact(&mut count).unwrap();
        assert_eq!(
            u64::from_ne_bytes(count),
            u64::MAX - 1,
            "the message was dropped"
        );
    }
}
