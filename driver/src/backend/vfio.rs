//! The kernel VFIO backend: a NIC function bound to `vfio-pci` (`uetctl bind`), reached
//! through `/dev/vfio` with the `vfio-ioctls` crate (no KVM).
//!
//! Opening follows the kernel's `Documentation/driver-api/vfio.rst`, "VFIO Usage Example":
//!
//! 1. sysfs: the function is there, is this NIC ([`uet_regs::PCI_VENDOR_ID`]:
//!    [`uet_regs::PCI_DEVICE_ID`]), is bound to `vfio-pci`, and has an IOMMU group
//!    ([`Sysfs::vfio_function`]). Each failure is named before any device file is opened, as
//!    is a group this process has open already, for another function of it or for this one
//!    (the kernel opens a group file once at a time, and each device has its own container).
//! 2. A container (`/dev/vfio/vfio`): the VFIO API version is checked and the Type 1 v2
//!    IOMMU must be supported.
//! 3. The group (`/dev/vfio/<group>`) joins the container, which then takes the Type 1 v2
//!    IOMMU, and the device file is taken from the group (`VFIO_GROUP_GET_DEVICE_FD`).
//! 4. The IOMMU (`VFIO_IOMMU_GET_INFO`, [`crate::backend::iommu_info`]): the
//!    IOVA ranges it translates, the page sizes it maps and how many mappings it still
//!    takes. Its smallest page must be at most [`PAGE`] (the driver's DMA memory comes in
//!    4 KiB pages); [`Device::iova_ranges`] gives the ranges, and the driver places its DMA
//!    memory inside them.
//! 5. BAR0 (region 0) must be readable, writable, mappable and hold at least the registers,
//!    [`uet_regs::REGISTERS_SIZE`] bytes (a NIC older than interface 1.12 has no MSI-X pages
//!    after them, [`uet_regs::BAR0_SIZE`]), and where it has a sparse-mmap capability, one of the
//!    areas it lists must hold the registers; its registers ([`uet_regs::REGISTERS_SIZE`]
//!    bytes, not the MSI-X pages, which are the kernel's) are mapped from the device file, and every
//!    register access is one `read_volatile`/`write_volatile` of the register's width on that
//!    mapping, as one PCIe memory read or write ([`BarMapping`]).
//! 6. Configuration space (region 7) is read through the device file: the identity dword must
//!    be this NIC's (a second check, by the device itself rather than by sysfs).
//! 7. Memory-space and bus-master are set in the command register (PCI Local Bus
//!    Specification 3.0, §6.2.2), as `vfio-pci` leaves them clear.
//!
//! DMA memory ([`DmaRegion`]) is mapped into the IOMMU at its IOVA with `VFIO_IOMMU_MAP_DMA`
//! (read and write) and unmapped with `VFIO_IOMMU_UNMAP_DMA`. MSI-X vectors are given
//! eventfds with `VFIO_DEVICE_SET_IRQS` when the driver first waits for a completion
//! (vfio-pci programs the table, which the driver never maps). [`VfioDevice::function_reset`] is `VFIO_DEVICE_RESET`. Dropping the device unmaps
//! BAR0, closes the device file (its group leaves the container) and closes the container;
//! the driver unmaps its DMA memory before that.
//!
//! This code runs for real only with a NIC and an IOMMU. Without them, opening fails at the
//! step that finds the lack, with the reason; the register mapping and the sysfs steps are
//! tested on memory and on a sysfs tree of their own.

use crate::backend::iommu_info::{self, IommuInfo};
use crate::backend::sysfs::{PciAddress, Sysfs};
use crate::device::{Device, DeviceError, FunctionId};
use crate::dma::{DmaRegion, IovaRange, PAGE};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use uet_regs::{pci, Mmio, REGISTERS_SIZE};
use vfio_bindings::bindings::vfio::{
    VFIO_BASE, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE, VFIO_TYPE,
};
use vfio_ioctls::{VfioContainer, VfioOps, VfioRegionInfoCap};
use vmm_sys_util::eventfd::EventFd;

/// A BAR mapped into this process: register reads and writes as single volatile accesses.
///
/// An access outside the mapping, or not aligned to its width, is not made: a read returns
/// all ones (what PCIe returns for a read nothing answers) and a write is dropped, and the
/// first such access is logged. The driver's registers all lie inside BAR0, so this happens
/// only through a bug; it never touches memory past the BAR.
pub struct BarMapping {
    base: NonNull<u8>,
    len: usize,
    /// Whether a bad access was logged.
    warned: AtomicBool,
}

// SAFETY: the mapping is device (or shared) memory reached only through raw pointers with
// volatile accesses, never through Rust references; such accesses from several threads are
// what MMIO is, and the mapping itself lives until `drop`.
unsafe impl Send for BarMapping {}
// SAFETY: as for `Send`: `&BarMapping` only allows volatile accesses through raw pointers.
unsafe impl Sync for BarMapping {}

impl std::fmt::Debug for BarMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BarMapping")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl BarMapping {
    /// Map `len` bytes of `fd` from `offset`, shared, readable and writable (a VFIO device
    /// file at a region's offset maps that region).
    pub(crate) fn map(fd: BorrowedFd<'_>, offset: u64, len: usize) -> std::io::Result<BarMapping> {
        let offset = libc::off_t::try_from(offset).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("region offset {offset:#x} does not fit off_t"),
            )
        })?;
        if len == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an empty BAR mapping",
            ));
        }
        // SAFETY: a fresh shared mapping chosen by the kernel (no fixed address), so no
        // existing memory is replaced; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| std::io::Error::other("mmap returned a null mapping"))?;
        Ok(BarMapping {
            base,
            len,
            warned: AtomicBool::new(false),
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: an empty mapping is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of a `T` at `offset`, when it lies inside the mapping and is aligned.
    fn at<T>(&self, offset: u32, what: &str) -> Option<*mut T> {
        let size = core::mem::size_of::<T>();
        let offset = offset as usize;
        let inside = offset.checked_add(size).is_some_and(|end| end <= self.len);
        if inside && offset.is_multiple_of(size) {
            // SAFETY: offset + size <= len, so the pointer stays inside the mapping.
            return Some(unsafe { self.base.as_ptr().add(offset) }.cast::<T>());
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                offset,
                size,
                len = self.len,
                "{what} outside the BAR or misaligned: not made (reads return all ones)"
            );
        }
        None
    }
}

impl Drop for BarMapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping `map` made, and no pointer into it
        // outlives `self` (accesses are made and finished within each call).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

impl Mmio for BarMapping {
    fn read32(&self, offset: u32) -> u32 {
        match self.at::<u32>(offset, "32-bit read") {
            // SAFETY: `at` checked the pointer lies inside the mapping and is aligned.
            Some(p) => u32::from_le(unsafe { p.read_volatile() }),
            None => u32::MAX,
        }
    }

    fn write32(&self, offset: u32, value: u32) {
        if let Some(p) = self.at::<u32>(offset, "32-bit write") {
            // SAFETY: as in `read32`.
            unsafe { p.write_volatile(value.to_le()) };
        }
    }

    fn read64(&self, offset: u32) -> u64 {
        match self.at::<u64>(offset, "64-bit read") {
            // SAFETY: as in `read32`.
            Some(p) => u64::from_le(unsafe { p.read_volatile() }),
            None => u64::MAX,
        }
    }

    fn write64(&self, offset: u32, value: u64) {
        if let Some(p) = self.at::<u64>(offset, "64-bit write") {
            // SAFETY: as in `read32`.
            unsafe { p.write_volatile(value.to_le()) };
        }
    }
}

/// A NIC function bound to `vfio-pci`.
///
/// Fields drop in order: BAR0 is unmapped first (the mapping holds the device file), then
/// the device file is closed and its group leaves the container, then the container goes.
pub struct VfioDevice {
    bar0: BarMapping,
    device: vfio_ioctls::VfioDevice,
    container: Arc<VfioContainer>,
    address: PciAddress,
    iommu: IommuInfo,
    /// The function's IOMMU group, held for this process until the group file is closed.
    _group: GroupHold,
}

/// The IOMMU groups this process has open through a [`VfioDevice`], each with the function
/// it was opened for. The kernel opens a group file once at a time (`EBUSY` for a second
/// open), and each device has a container of its own, so a second function of a group, or
/// the same function again, cannot be opened while the first is.
static OPEN_GROUPS: std::sync::Mutex<Vec<(u32, PciAddress)>> = std::sync::Mutex::new(Vec::new());

/// A group of [`OPEN_GROUPS`], given up when dropped.
#[derive(Debug)]
struct GroupHold {
    group: u32,
}

impl GroupHold {
    /// Hold `group` for `address`; the function it is held for already, if it is.
    fn take(group: u32, address: PciAddress) -> Result<GroupHold, PciAddress> {
        let mut open = OPEN_GROUPS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&(_, other)) = open.iter().find(|(g, _)| *g == group) {
            return Err(other);
        }
        open.push((group, address));
        Ok(GroupHold { group })
    }
}

impl Drop for GroupHold {
    fn drop(&mut self) {
        let mut open = OPEN_GROUPS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        open.retain(|(g, _)| *g != self.group);
    }
}

impl std::fmt::Debug for VfioDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioDevice")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl VfioDevice {
    /// Open the function at `address` (steps 1 to 7 of the module documentation).
    /// `DeviceError::Open` names the step that refused it and why.
    pub fn open(address: PciAddress) -> Result<Self, DeviceError> {
        Self::open_in(&Sysfs::system(), address)
    }

    /// [`VfioDevice::open`], with sysfs read from `sysfs`.
    pub fn open_in(sysfs: &Sysfs, address: PciAddress) -> Result<Self, DeviceError> {
        let refuse = |reason: String| DeviceError::Open {
            name: format!("vfio:{address}"),
            reason,
        };
        // 1. sysfs.
        let function = sysfs
            .vfio_function(address)
            .map_err(|e| refuse(e.to_string()))?;
        // vfio-ioctls reads the group link under this path again when the device is
        // dropped, and panics if it cannot: give it the absolute path of the real directory.
        let sysfs_path = std::fs::canonicalize(&function.sysfs_path)
            .map_err(|e| refuse(format!("resolving {}: {e}", function.sysfs_path.display())))?;
        // Declared before the container and device, so dropped after them on every error.
        let group = GroupHold::take(function.iommu_group, address).map_err(|other| {
            let group = function.iommu_group;
            refuse(if other == address {
                format!("{address} is open in this process already (IOMMU group {group})")
            } else {
                format!(
                    "{address} is in IOMMU group {group} with {other}, which this process has \
                     open: the kernel opens a group once at a time, so functions sharing a \
                     group cannot be opened as two devices (put the NICs in separate IOMMU \
                     groups, behind ACS-capable ports)"
                )
            })
        })?;
        // 2. The container.
        let container = VfioContainer::new(None).map_err(|e| {
            refuse(format!(
                "opening /dev/vfio/vfio: {e} (is the vfio-pci module loaded, and the IOMMU \
                 on with Type 1 v2 support?)"
            ))
        })?;
        let container = Arc::new(container);
        // 3. Group and device file.
        let ops: Arc<dyn VfioOps> = container.clone();
        let device = vfio_ioctls::VfioDevice::new(&sysfs_path, ops, false).map_err(|e| {
            refuse(format!(
                "opening the device through /dev/vfio/{}: {e} (every function of the IOMMU \
                 group must be bound to vfio-pci, and no other process may hold the group)",
                function.iommu_group
            ))
        })?;
        // 4. The IOMMU.
        let iommu = iommu_info::query(
            // SAFETY: the container's descriptor stays open while `container` lives, past
            // this call.
            unsafe { BorrowedFd::borrow_raw(container.as_raw_fd()) },
        )
        .map_err(|e| refuse(format!("asking the IOMMU what it translates: {e}")))?;
        if let Some(page) = iommu.min_page().filter(|&p| p > PAGE as u64) {
            return Err(refuse(format!(
                "the IOMMU's smallest page is {page} bytes; the driver maps DMA memory in \
                 {PAGE}-byte pages"
            )));
        }
        tracing::debug!(
            function = %address,
            iova_ranges = ?iommu.iova_ranges,
            page_sizes = ?iommu.page_sizes.map(|p| format!("{p:#x}")),
            dma_avail = ?iommu.dma_avail,
            "IOMMU"
        );
        // 5. BAR0.
        bar0_mappable(
            device.get_region_flags(VFIO_PCI_BAR0_REGION_INDEX),
            device.get_region_size(VFIO_PCI_BAR0_REGION_INDEX),
            &device.get_region_caps(VFIO_PCI_BAR0_REGION_INDEX),
        )
        .map_err(refuse)?;
        let bar0 = BarMapping::map(
            // SAFETY: the device file stays open while `device` lives, past this call; the
            // mapping takes a reference of its own to the file.
            unsafe { BorrowedFd::borrow_raw(device.as_raw_fd()) },
            device.get_region_offset(VFIO_PCI_BAR0_REGION_INDEX),
            REGISTERS_SIZE as usize,
        )
        .map_err(|e| refuse(format!("mapping BAR0: {e}")))?;
        let nic = VfioDevice {
            bar0,
            device,
            container,
            address,
            iommu,
            _group: group,
        };
        // 6. Identity, from the device.
        let mut id = [0u8; 4];
        nic.config()
            .read(pci::VENDOR_ID, &mut id)
            .map_err(|e| refuse(format!("reading configuration space: {e}")))?;
        let id = u32::from_le_bytes(id);
        if id != pci::ID_DWORD {
            return Err(refuse(format!(
                "configuration space reads vendor:device {:04x}:{:04x}, expected {:04x}:{:04x}",
                id & 0xFFFF,
                id >> 16,
                uet_regs::PCI_VENDOR_ID,
                uet_regs::PCI_DEVICE_ID
            )));
        }
        // 7. Memory space and bus master.
        nic.enable().map_err(refuse)?;
        Ok(nic)
    }

    /// The function's PCI address.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// What the IOMMU reported when the function was opened.
    pub fn iommu(&self) -> &IommuInfo {
        &self.iommu
    }

    /// Whether `len` bytes at `offset` lie inside the configuration space.
    fn in_config(offset: usize, len: usize) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= pci::CONFIG_SPACE_SIZE)
    }

    /// The device file.
    fn device_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the device file stays open while `self.device` lives, which outlives the
        // borrow (tied to `&self`).
        unsafe { BorrowedFd::borrow_raw(self.device.as_raw_fd()) }
    }

    /// The configuration region (region 7) of the device file, as
    /// `VFIO_DEVICE_GET_REGION_INFO` placed it.
    fn config(&self) -> RegionFile<'_> {
        RegionFile {
            fd: self.device_fd(),
            offset: self.device.get_region_offset(VFIO_PCI_CONFIG_REGION_INDEX),
            size: self
                .device
                .get_region_size(VFIO_PCI_CONFIG_REGION_INDEX)
                .min(pci::CONFIG_SPACE_SIZE as u64),
        }
    }

    /// `N` bytes of configuration space at `offset`; all ones where the read fails or lies
    /// outside the 256 bytes.
    pub fn config_read<const N: usize>(&self, offset: usize) -> [u8; N] {
        let mut data = [0xFF; N];
        if Self::in_config(offset, N) && self.config().read(offset, &mut data).is_err() {
            data = [0xFF; N];
        }
        data
    }

    /// Function-level reset (`VFIO_DEVICE_RESET`), then memory space and bus master on
    /// again, which the reset cleared. Every DMA mapping stays. The kernel's error when the
    /// function cannot be reset (no FLR, nor another reset the kernel knows for it).
    pub fn function_reset(&self) -> std::io::Result<()> {
        // _IO(VFIO_TYPE, VFIO_BASE + 11), linux/vfio.h.
        const VFIO_DEVICE_RESET: libc::c_ulong =
            (VFIO_TYPE as libc::c_ulong) << 8 | (VFIO_BASE as libc::c_ulong + 11);
        // SAFETY: VFIO_DEVICE_RESET takes no argument; the descriptor is the device file,
        // open while `self.device` lives.
        let r = unsafe { libc::ioctl(self.device.as_raw_fd(), VFIO_DEVICE_RESET as _) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.enable().map_err(std::io::Error::other)
    }

    /// Set memory-space and bus-master in the command register, and read it back.
    fn enable(&self) -> Result<(), String> {
        enable_command(&self.config())
    }
}

/// Configuration space as the driver reads and writes it: bytes at an offset, each access
/// failing with the reason.
trait ConfigSpace {
    /// Fill `buf` from `offset`.
    fn read(&self, offset: usize, buf: &mut [u8]) -> std::io::Result<()>;
    /// Write `data` at `offset`.
    fn write(&self, offset: usize, data: &[u8]) -> std::io::Result<()>;
}

/// A region of a VFIO device file, reached with `pread`/`pwrite` at the region's offset in
/// the file (`VFIO_DEVICE_GET_REGION_INFO`), `size` bytes long.
struct RegionFile<'a> {
    fd: BorrowedFd<'a>,
    offset: u64,
    size: u64,
}

impl RegionFile<'_> {
    /// The file position of `len` bytes at `at` of the region; an error when they do not
    /// lie inside it.
    fn position(&self, at: usize, len: usize) -> std::io::Result<u64> {
        let inside = u64::try_from(at)
            .ok()
            .zip(u64::try_from(len).ok())
            .and_then(|(at, len)| Some((at, at.checked_add(len)?)))
            .filter(|&(_, end)| end <= self.size);
        inside
            .and_then(|(at, _)| self.offset.checked_add(at))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{len} bytes at {at:#x} lie outside the region's {} bytes",
                        self.size
                    ),
                )
            })
    }

    /// The device file, as a `File` of its own for one access.
    fn file(&self) -> std::io::Result<std::fs::File> {
        self.fd.try_clone_to_owned().map(std::fs::File::from)
    }
}

impl ConfigSpace for RegionFile<'_> {
    fn read(&self, offset: usize, buf: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let at = self.position(offset, buf.len())?;
        self.file()?.read_exact_at(buf, at)
    }

    fn write(&self, offset: usize, data: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let at = self.position(offset, data.len())?;
        self.file()?.write_all_at(data, at)
    }
}

/// Set memory-space and bus-master in the command register of `config`, keeping its other
/// bits, and read it back. A command register that cannot be read, or reads all ones (a
/// function that does not answer), is not written: its value would be made up.
fn enable_command(config: &dyn ConfigSpace) -> Result<(), String> {
    let want = pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER;
    let read = |what: &str| -> Result<u16, String> {
        let mut raw = [0u8; 2];
        config
            .read(pci::COMMAND, &mut raw)
            .map_err(|e| format!("reading the command register {what}: {e}"))?;
        Ok(u16::from_le_bytes(raw))
    };
    let command = read("before setting memory space and bus master")?;
    if command == u16::MAX {
        return Err(
            "the command register reads 0xffff: the function does not answer configuration \
             reads"
                .to_string(),
        );
    }
    config
        .write(pci::COMMAND, &(command | want).to_le_bytes())
        .map_err(|e| format!("writing the command register: {e}"))?;
    let now = read("after setting memory space and bus master")?;
    if now & want != want || now == u16::MAX {
        return Err(format!(
            "the command register reads {now:#06x} after memory space and bus master were \
             set"
        ));
    }
    Ok(())
}

/// The argument of `VFIO_DEVICE_SET_IRQS` (`struct vfio_irq_set`, `linux/vfio.h`) as u32
/// words in host byte order: `argsz`, `flags`, `index`, `start`, `count`, then the data.
/// With descriptors, vectors 0 to `fds.len() - 1` of `index` signal them
/// (`DATA_EVENTFD | ACTION_TRIGGER`); with none, every vector of `index` stops and the index
/// is disabled (`DATA_NONE | ACTION_TRIGGER`, count 0).
fn irq_set(index: u32, fds: &[i32]) -> std::io::Result<Vec<u32>> {
    const HEADER_WORDS: usize = 5;
    let too_many = || std::io::Error::other(format!("{} eventfds are too many", fds.len()));
    let count = u32::try_from(fds.len()).map_err(|_| too_many())?;
    let argsz = fds
        .len()
        .checked_add(HEADER_WORDS)
        .and_then(|w| w.checked_mul(4))
        .and_then(|b| u32::try_from(b).ok())
        .ok_or_else(too_many)?;
    let data = if fds.is_empty() {
        VFIO_IRQ_SET_DATA_NONE
    } else {
        VFIO_IRQ_SET_DATA_EVENTFD
    };
    let mut words = vec![argsz, data | VFIO_IRQ_SET_ACTION_TRIGGER, index, 0, count];
    // Descriptors are non-negative, so each is its own bit pattern as a u32.
    words.extend(fds.iter().map(|&fd| fd as u32));
    Ok(words)
}

/// `VFIO_DEVICE_SET_IRQS` on the device file `device` ([`irq_set`]); the kernel's error
/// when it refuses.
fn set_irqs(device: BorrowedFd<'_>, index: u32, fds: &[i32]) -> std::io::Result<()> {
    // _IO(VFIO_TYPE, VFIO_BASE + 10), linux/vfio.h.
    const VFIO_DEVICE_SET_IRQS: libc::c_ulong =
        (VFIO_TYPE as libc::c_ulong) << 8 | (VFIO_BASE as libc::c_ulong + 10);
    let words = irq_set(index, fds)?;
    // SAFETY: the kernel reads at most `argsz` bytes (the first word) from the buffer, which
    // holds exactly that many, aligned for `struct vfio_irq_set` (u32 fields), and writes
    // nothing to it; the descriptor is borrowed, so open for the call.
    let r = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            VFIO_DEVICE_SET_IRQS as _,
            words.as_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether BAR0, as `VFIO_DEVICE_GET_REGION_INFO` describes it (`flags`, `size` and the
/// region's capabilities), can be mapped whole for the driver: readable, writable, mappable
/// (`VFIO_REGION_INFO_FLAG_MMAP`), at least the [`REGISTERS_SIZE`] bytes of the registers (the
/// MSI-X pages of a NIC of interface 1.12, up to [`uet_regs::BAR0_SIZE`], are not the driver's, and an
/// older NIC has none), and, when the region has the
/// sparse-mmap capability (`VFIO_REGION_INFO_CAP_SPARSE_MMAP`: only the areas it lists may be
/// mapped; vfio-pci leaves out the MSI-X table's page), with one listed area that holds the
/// registers, bytes 0 to [`REGISTERS_SIZE`]. Only the registers are mapped: the MSI-X table
/// is the kernel's to program.
fn bar0_mappable(flags: u32, size: u64, caps: &[VfioRegionInfoCap]) -> Result<(), String> {
    let need =
        VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP;
    if flags & need != need || size < u64::from(REGISTERS_SIZE) {
        return Err(format!(
            "BAR0 is {size} bytes with flags {flags:#x}; the NIC needs {REGISTERS_SIZE} bytes, \
             readable, writable and mappable"
        ));
    }
    for cap in caps {
        let VfioRegionInfoCap::SparseMmap(sparse) = cap else {
            continue;
        };
        let holds_registers = sparse
            .areas
            .iter()
            .any(|a| a.offset == 0 && a.size >= u64::from(REGISTERS_SIZE));
        if !holds_registers {
            let areas: Vec<String> = sparse
                .areas
                .iter()
                .map(|a| format!("{:#x}+{:#x}", a.offset, a.size))
                .collect();
            return Err(format!(
                "BAR0 may be mapped only in the areas its sparse-mmap capability lists ({}), \
                 and none holds the NIC's {REGISTERS_SIZE} bytes of registers from offset 0",
                if areas.is_empty() {
                    "none".to_string()
                } else {
                    areas.join(", ")
                }
            ));
        }
    }
    Ok(())
}

impl Device for VfioDevice {
    fn bar0(&self) -> &dyn Mmio {
        &self.bar0
    }

    fn dma_map(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        // SAFETY: vfio-ioctls' contract: while mapped, the region's memory is reached only
        // through raw pointers with volatile or atomic accesses, or by system calls. That is
        // `DmaRegion`'s own rule: it never hands out a Rust reference into its memory (every
        // access copies in or out through `volatile_copy_*`, `read_obj`/`write_obj`). The
        // memory stays mapped in this process until the region is dropped, after the driver
        // has unmapped it from the device.
        unsafe {
            self.container
                .vfio_dma_map(region.iova(), region.len(), region.as_mut_ptr())
        }
        .map_err(|e| DeviceError::DmaMap {
            iova: region.iova(),
            len: region.len(),
            reason: match &e {
                // The IOMMU pins the pages, and pinned memory counts against the process's
                // locked-memory limit.
                vfio_ioctls::VfioError::IommuDmaMap(errno) if errno.errno() == libc::ENOMEM => {
                    format!("{e}: {errno} (pinned DMA memory counts against RLIMIT_MEMLOCK; raise `ulimit -l`)")
                }
                // The container's count of mappings is at its limit.
                vfio_ioctls::VfioError::IommuDmaMap(errno) if errno.errno() == libc::ENOSPC => {
                    format!(
                        "{e}: {errno} (the IOMMU takes no more DMA mappings: {} were left when the \
                         function was opened; the limit is vfio_iommu_type1's dma_entry_limit)",
                        self.iommu.dma_avail.map_or("an unreported number".to_string(), |n| n.to_string())
                    )
                }
                _ => format!("{e}: {}", std::error::Error::source(&e).map_or(String::new(), |s| s.to_string())),
            },
            errno: match &e {
                vfio_ioctls::VfioError::IommuDmaMap(errno) => Some(errno.errno()),
                _ => None,
            },
        })
    }

    fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        self.container
            .vfio_dma_unmap(region.iova(), region.len())
            .map_err(|e| DeviceError::DmaUnmap {
                iova: region.iova(),
                reason: e.to_string(),
            })
    }

    fn name(&self) -> String {
        format!("vfio:{}", self.address)
    }

    /// The MSI-X index's vectors as vfio-pci reports them (the capability's table size), at
    /// most the table of this NIC's register map.
    fn msix_vectors(&self) -> u16 {
        self.device
            .get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX)
            .filter(|irq| irq.flags & VFIO_IRQ_INFO_EVENTFD != 0)
            .map_or(0, |irq| {
                u16::try_from(irq.count).map_or(pci::MSIX_VECTORS, |n| n.min(pci::MSIX_VECTORS))
            })
    }

    /// `VFIO_DEVICE_SET_IRQS` of the MSI-X index: vfio-pci programs the table and enables
    /// MSI-X, and the kernel's interrupt handler signals each vector's eventfd. The kernel's
    /// error, when it refuses, is kept in the reason.
    fn set_msix_eventfds(&self, eventfds: &[EventFd]) -> Result<(), DeviceError> {
        let fail = |reason: String| DeviceError::Interrupts {
            name: self.name(),
            reason,
        };
        let vectors = self.msix_vectors();
        if eventfds.is_empty() || eventfds.len() > usize::from(vectors) {
            return Err(fail(format!(
                "{} eventfds for the MSI-X index's {vectors} vectors",
                eventfds.len()
            )));
        }
        let fds: Vec<i32> = eventfds.iter().map(AsRawFd::as_raw_fd).collect();
        set_irqs(self.device_fd(), VFIO_PCI_MSIX_IRQ_INDEX, &fds)
            .map_err(|e| fail(format!("VFIO_DEVICE_SET_IRQS giving eventfds: {e}")))
    }

    fn clear_msix(&self) -> Result<(), DeviceError> {
        set_irqs(self.device_fd(), VFIO_PCI_MSIX_IRQ_INDEX, &[]).map_err(|e| {
            DeviceError::Interrupts {
                name: self.name(),
                reason: format!("VFIO_DEVICE_SET_IRQS disabling MSI-X: {e}"),
            }
        })
    }

    fn function_id(&self) -> Option<FunctionId> {
        Some(FunctionId::Pci(self.address))
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.iommu.usable_ranges()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::FileExt;
    use uet_regs::BAR0_SIZE;

    /// A memfd of `len` bytes standing in for a device file's BAR region.
    fn memfd(len: u64) -> std::fs::File {
        // SAFETY: memfd_create with a valid C string; the result is checked.
        let raw = unsafe { libc::memfd_create(c"uet-bar-test".as_ptr(), 0) };
        assert!(
            raw >= 0,
            "memfd_create: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        file.set_len(len).expect("set_len");
        file
    }

    #[test]
    fn registers_are_single_little_endian_accesses_at_their_offsets() {
        let file = memfd(2 * 4096);
        // The region at offset 4096 of the file, as a BAR region lies in a device file.
        let bar = BarMapping::map(file.as_fd(), 4096, BAR0_SIZE as usize).expect("map");
        bar.write32(0x10, 0x1122_3344);
        bar.write64(0x18, 0x0102_0304_0506_0708);
        let mut raw = [0u8; 16];
        file.read_exact_at(&mut raw, 4096 + 0x10).unwrap();
        assert_eq!(raw[..4], [0x44, 0x33, 0x22, 0x11]);
        assert_eq!(raw[8..], [8, 7, 6, 5, 4, 3, 2, 1]);
        file.write_all_at(&[0xAA, 0xBB, 0xCC, 0xDD], 4096 + 0x20)
            .unwrap();
        assert_eq!(bar.read32(0x20), 0xDDCC_BBAA);
        assert_eq!(bar.read64(0x18), 0x0102_0304_0506_0708);
        assert_eq!(bar.len(), BAR0_SIZE as usize);
    }

    #[test]
    fn an_access_outside_the_bar_or_misaligned_is_not_made() {
        let file = memfd(8192);
        let bar = BarMapping::map(file.as_fd(), 0, 4096).expect("map");
        for offset in [4096, 4094, u32::MAX - 1, 0x11] {
            assert_eq!(bar.read32(offset), u32::MAX, "{offset:#x}");
        }
        for offset in [4096, 4092, 0x1C, u32::MAX] {
            assert_eq!(bar.read64(offset), u64::MAX, "{offset:#x}");
        }
        bar.write32(4096, 0x5A5A_5A5A);
        bar.write32(0x11, 0x5A5A_5A5A);
        bar.write64(4092, u64::MAX);
        bar.write64(0x1C, u64::MAX);
        let mut all = vec![0u8; 8192];
        file.read_exact_at(&mut all, 0).unwrap();
        assert!(all.iter().all(|&b| b == 0), "nothing was written");
        // The last word of the BAR is inside.
        bar.write32(4092, 7);
        assert_eq!(bar.read32(4092), 7);
        bar.write64(4088, 9);
        assert_eq!(bar.read64(4088), 9);
    }

    #[test]
    fn a_mapping_that_cannot_be_made_is_an_error() {
        let file = memfd(4096);
        assert!(BarMapping::map(file.as_fd(), 0, 0).is_err());
        assert!(
            BarMapping::map(file.as_fd(), 1, 4096).is_err(),
            "unaligned offset"
        );
        assert!(BarMapping::map(file.as_fd(), u64::MAX, 4096).is_err());
    }

    /// BAR0 is mapped whole only where the region says it can be: the flags and size, and a
    /// sparse-mmap capability, whose areas are the only parts that may be mapped.
    #[test]
    fn bar0_is_mapped_only_where_its_region_allows() {
        use vfio_ioctls::{VfioRegionInfoCapSparseMmap, VfioRegionSparseMmapArea};
        let rwm =
            VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP;
        let bar = u64::from(BAR0_SIZE);
        let regs = u64::from(REGISTERS_SIZE);
        let sparse = |areas: &[(u64, u64)]| {
            VfioRegionInfoCap::SparseMmap(VfioRegionInfoCapSparseMmap {
                areas: areas
                    .iter()
                    .map(|&(offset, size)| VfioRegionSparseMmapArea { offset, size })
                    .collect(),
            })
        };
        assert_eq!(bar0_mappable(rwm, bar, &[]), Ok(()));
        assert_eq!(
            bar0_mappable(rwm, 4 * bar, &[VfioRegionInfoCap::MsixMappable]),
            Ok(())
        );
        assert_eq!(
            bar0_mappable(rwm, 4 * bar, &[sparse(&[(0, bar), (2 * bar, bar)])]),
            Ok(())
        );
        // vfio-pci's areas around the MSI-X table's page: the registers are in the first.
        let msix_page = u64::from(pci::MSIX_TABLE_OFFSET);
        assert_eq!(
            bar0_mappable(
                rwm,
                bar,
                &[sparse(&[
                    (0, msix_page),
                    (msix_page + 4096, bar - msix_page - 4096)
                ])]
            ),
            Ok(())
        );
        let e = bar0_mappable(rwm & !VFIO_REGION_INFO_FLAG_MMAP, bar, &[]).unwrap_err();
        assert!(e.contains("readable, writable and mappable"), "{e}");
        assert!(bar0_mappable(rwm, regs - 1, &[]).is_err());
        // A NIC older than interface 1.12: BAR0 is its registers alone, no MSI-X pages.
        assert_eq!(bar0_mappable(rwm, regs, &[]), Ok(()));
        assert_eq!(bar0_mappable(rwm, regs, &[sparse(&[(0, regs)])]), Ok(()));
        // The registers lie outside every area that may be mapped, or only partly inside one.
        for areas in [
            &[][..],
            &[(regs, 3 * bar)],
            &[(0, regs / 2), (regs / 2, regs / 2)],
        ] {
            let e = bar0_mappable(rwm, 4 * bar, &[sparse(areas)]).unwrap_err();
            assert!(e.contains("sparse-mmap"), "{areas:?}: {e}");
        }
    }

    /// Configuration space standing in for a function's: 256 bytes, or reads that fail.
    struct FakeConfig {
        bytes: std::sync::Mutex<[u8; 256]>,
        reads_fail: bool,
        writes: std::sync::Mutex<Vec<(usize, Vec<u8>)>>,
    }

    impl FakeConfig {
        fn new(command: u16, reads_fail: bool) -> FakeConfig {
            let mut bytes = [0u8; 256];
            bytes[pci::COMMAND..pci::COMMAND + 2].copy_from_slice(&command.to_le_bytes());
            FakeConfig {
                bytes: std::sync::Mutex::new(bytes),
                reads_fail,
                writes: std::sync::Mutex::new(Vec::new()),
            }
        }

        fn command(&self) -> u16 {
            let b = self.bytes.lock().unwrap();
            u16::from_le_bytes([b[pci::COMMAND], b[pci::COMMAND + 1]])
        }
    }

    impl ConfigSpace for FakeConfig {
        fn read(&self, offset: usize, buf: &mut [u8]) -> std::io::Result<()> {
            if self.reads_fail {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            buf.copy_from_slice(&self.bytes.lock().unwrap()[offset..offset + buf.len()]);
            Ok(())
        }

        fn write(&self, offset: usize, data: &[u8]) -> std::io::Result<()> {
            self.writes.lock().unwrap().push((offset, data.to_vec()));
            self.bytes.lock().unwrap()[offset..offset + data.len()].copy_from_slice(data);
            Ok(())
        }
    }

    /// Memory space and bus master are added to the command register's other bits; a
    /// command register that cannot be read, or reads all ones, is not written with a value
    /// made from it, and the error says why.
    #[test]
    fn the_command_register_is_written_only_from_a_value_read() {
        let intx_disable = 1 << 10;
        let ok = FakeConfig::new(intx_disable, false);
        assert_eq!(enable_command(&ok), Ok(()));
        assert_eq!(
            ok.command(),
            intx_disable | pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER
        );

        let failing = FakeConfig::new(0, true);
        let e = enable_command(&failing).unwrap_err();
        assert!(e.contains("reading the command register"), "{e}");
        assert!(e.contains("os error 5"), "the reason is kept: {e}");
        assert!(failing.writes.lock().unwrap().is_empty(), "nothing written");

        let gone = FakeConfig::new(u16::MAX, false);
        let e = enable_command(&gone).unwrap_err();
        assert!(e.contains("0xffff"), "{e}");
        assert!(gone.writes.lock().unwrap().is_empty(), "nothing written");
    }

    /// A device file's region is read and written at the region's offset in the file,
    /// only inside the region, and a short read is an error, not bytes made up.
    #[test]
    fn a_region_of_the_device_file_is_reached_at_its_offset_only() {
        let file = memfd(0x1000 + 0x100);
        file.write_all_at(&[0x34, 0x12, 0x78, 0x56], 0x1000)
            .unwrap();
        let region = RegionFile {
            fd: file.as_fd(),
            offset: 0x1000,
            size: 0x100,
        };
        let mut id = [0u8; 4];
        region.read(0, &mut id).unwrap();
        assert_eq!(u32::from_le_bytes(id), 0x5678_1234);
        region.write(4, &[6, 0]).unwrap();
        let mut raw = [0u8; 2];
        file.read_exact_at(&mut raw, 0x1004).unwrap();
        assert_eq!(raw, [6, 0]);
        for (at, len) in [(0x100, 1), (0xFF, 2), (usize::MAX, 2)] {
            let mut buf = vec![0u8; len];
            let e = region.read(at, &mut buf).unwrap_err();
            assert!(e.to_string().contains("outside the region"), "{at:#x}: {e}");
            assert!(region.write(at, &buf).is_err());
        }
        // The file ends before the region does: the read fails with the reason.
        let short = RegionFile {
            fd: file.as_fd(),
            offset: 0x1080,
            size: 0x100,
        };
        let mut buf = [0u8; 4];
        let e = short.read(0x80, &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
        // The offset plus the position would pass 2^64.
        let top = RegionFile {
            fd: file.as_fd(),
            offset: u64::MAX - 1,
            size: 0x100,
        };
        assert!(top.read(4, &mut buf).is_err());
    }

    /// `struct vfio_irq_set` as `linux/vfio.h` lays it out: eventfds for vectors 0 up, or
    /// none to disable the index.
    #[test]
    fn set_irqs_arguments_are_laid_out_as_the_kernel_reads_them() {
        let msix = VFIO_PCI_MSIX_IRQ_INDEX;
        assert_eq!(
            irq_set(msix, &[7, 9, 11]).unwrap(),
            [20 + 12, (1 << 2) | (1 << 5), 2, 0, 3, 7, 9, 11]
        );
        assert_eq!(irq_set(msix, &[]).unwrap(), [20, 1 | (1 << 5), 2, 0, 0]);
    }

    /// The kernel's refusal of `VFIO_DEVICE_SET_IRQS` is kept, errno included (here the
    /// ioctl is made on a file that is no VFIO device, which refuses it with ENOTTY).
    #[test]
    fn a_refused_set_irqs_keeps_the_kernels_reason() {
        let file = memfd(4096);
        let fd = EventFd::new(0).unwrap();
        for fds in [&[fd.as_raw_fd()][..], &[]] {
            let e = set_irqs(file.as_fd(), VFIO_PCI_MSIX_IRQ_INDEX, fds).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
        }
    }

    #[test]
    fn opening_names_the_step_that_refused() {
        use crate::backend::sysfs::tests::Tree;
        let t = Tree::this_nic(Some(crate::backend::sysfs::VFIO_PCI));
        // sysfs refuses first: no such function in the tree.
        let missing: PciAddress = "0000:3b:00.1".parse().unwrap();
        let e = VfioDevice::open_in(&t.sysfs(), missing)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot open device vfio:0000:3b:00.1") && e.contains("no PCI function"),
            "{e}"
        );

        // A function sysfs accepts: what refuses next is the machine's VFIO (here, without
        // /dev/vfio, the container; on a machine with VFIO, the group of a function that is
        // not really there, in a group number no machine of ours has).
        t.set_group(4097);
        let address: PciAddress = "0000:3b:00.0".parse().unwrap();
        let e = VfioDevice::open_in(&t.sysfs(), address)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/vfio/vfio") || e.contains("/dev/vfio/4097"),
            "{e}"
        );
    }

    /// A function whose IOMMU group this process has open already, for another function or
    /// for this one, is refused naming that, before any VFIO file is opened: the kernel would
    /// refuse the second open of the group file with EBUSY, which the open reported as the
    /// group held by another process.
    #[test]
    fn a_group_this_process_has_open_is_named_as_such() {
        use crate::backend::sysfs::tests::Tree;
        let t = Tree::this_nic(Some(crate::backend::sysfs::VFIO_PCI));
        t.set_group(4098);
        let address: PciAddress = "0000:3b:00.0".parse().unwrap();
        let other: PciAddress = "0000:3c:00.0".parse().unwrap();
        let held = GroupHold::take(4098, other).expect("group 4098 free");
        let e = VfioDevice::open_in(&t.sysfs(), address)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("in IOMMU group 4098 with 0000:3c:00.0, which this process has open"),
            "{e}"
        );
        drop(held);
        let held = GroupHold::take(4098, address).expect("group 4098 free again");
        let e = VfioDevice::open_in(&t.sysfs(), address)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("0000:3b:00.0 is open in this process already"),
            "{e}"
        );
        drop(held);
        // Given up again: what refuses now is the machine's VFIO, as for any function.
        let e = VfioDevice::open_in(&t.sysfs(), address)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/vfio/vfio") || e.contains("/dev/vfio/4098"),
            "{e}"
        );
        assert!(
            GroupHold::take(4098, address).is_ok(),
            "a failed open holds nothing"
        );
    }
}
