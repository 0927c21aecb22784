//! The vfio-user backend: a NIC function served by another process on a Unix socket (the
//! simulator daemon, `uetctl sim serve`), reached with the `vfio_user` crate's client.
//!
//! Opening follows what a driver does with a function bound to `vfio-pci`:
//!
//! 1. Connect and negotiate the protocol; the server lists the function's regions.
//! 2. Check that region 0 (BAR0) is readable, writable and holds at least the registers,
//!    [`uet_regs::REGISTERS_SIZE`] bytes (a NIC older than interface 1.12 has no MSI-X pages
//!    after them, [`uet_regs::BAR0_SIZE`]), and that configuration space (region 7) names this
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
//! `ID` and `DEV_STATUS`, as on hardware. The first failure is logged. No access raises
//! `SIGPIPE` on the way (the program hosting the driver may not ignore it). A server that is
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
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use uet_regs::{pci, Mmio, REGISTERS_SIZE};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::Client;
use vmm_sys_util::eventfd::EventFd;

/// How long [`VfioUserDevice::open`] waits, in all, for the server's answers while it opens
/// the function (steps 1 to 3 of the module documentation).
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

    /// [`VfioUserDevice::open`], waiting at most `timeout` for the server's answers while the
    /// function is opened: its version and regions, its identity and its command register
    /// (steps 1 to 3). An open that gives up sets nothing on the function, whenever the
    /// server's answers come.
    pub fn open_within(path: impl AsRef<Path>, timeout: Duration) -> Result<Self, DeviceError> {
        let path = path.as_ref().to_path_buf();
        let refuse = |reason: String| DeviceError::Open {
            name: format!("vfio-user:{}", path.display()),
            reason,
        };
        // The client blocks on the socket with no timeout of its own, so steps 1 to 3 run on
        // a thread of their own: a socket whose owner accepts but never answers, or stops
        // answering before the function is ready (not a vfio-user server, or a hung one), is
        // an error, not a hang. That thread ends when the socket closes. An open that gave up
        // leaves the function as it found it: the thread sets nothing in its command register
        // once the wait is over (`OpenState`).
        let (tx, rx) = mpsc::channel();
        let at = path.clone();
        let state = Arc::new(AtomicU8::new(OpenState::Waiting as u8));
        let thread_state = state.clone();
        std::thread::Builder::new()
            .name("vfio-user-connect".into())
            .spawn(move || {
                let opened = without_sigpipe(|| Client::new(&at))
                    .map_err(|e| e.to_string())
                    .and_then(|client| prepare(client, &thread_state));
                let _ = tx.send(opened);
            })
            .map_err(|e| refuse(format!("cannot start the connection: {e}")))?;
        // The thread ends without a word when the client panicked on the server's answer (it
        // does on some malformed version replies): the server answered, wrongly.
        let answer = match rx.recv_timeout(timeout) {
            Err(mpsc::RecvTimeoutError::Timeout) if !OpenState::give_up(&state) => {
                // The command register is being written: the open is as good as done, and
                // giving up now could leave the function set up with nobody to drive it.
                rx.recv_timeout(timeout)
            }
            answer => answer,
        };
        let client = match answer {
            Ok(opened) => opened.map_err(refuse)?,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(refuse(format!(
                "no vfio-user answer within {} ms (is a uet-nic simulator serving this socket?)",
                timeout.as_millis()
            )))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(refuse(
                    "malformed vfio-user answer to the connection (version or regions)".into(),
                ))
            }
        };
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

    /// The Table Size of the function's MSI-X capability, found in configuration space's
    /// capability list as a PCI driver finds it (PCI Local Bus Specification 3.0, §6.7 and
    /// §6.8.2.3); `None` when the function has none (or the server is gone).
    fn msix_table_size(&self) -> Option<u16> {
        let status = u16::from_le_bytes(self.config_read::<2>(pci::STATUS));
        if status == u16::MAX || status & pci::STATUS_CAPABILITIES_LIST == 0 {
            return None;
        }
        let [first] = self.config_read::<1>(pci::CAPABILITIES_POINTER);
        let mut at = usize::from(first & !3);
        // Capabilities lie past the 64-byte header, 4-byte aligned: at most 48 of them, so a
        // longer list loops.
        for _ in 0..48 {
            if at < 0x40 {
                return None;
            }
            let [id, next] = self.config_read::<2>(at);
            if id == pci::CAP_ID_MSIX {
                let control = u16::from_le_bytes(self.config_read::<2>(at + 2));
                return Some((control & MSIX_TABLE_SIZE_MASK) + 1);
            }
            at = usize::from(next & !3);
        }
        None
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
        let mut client = self.client();
        if let Err(e) = without_sigpipe(|| client.region_read(region, offset, &mut data)) {
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
        let mut client = self.client();
        if let Err(e) = without_sigpipe(|| client.region_write(region, offset, data)) {
            self.failed(what, &e);
        }
    }
}

/// Where [`VfioUserDevice::open_within`] is with a function: `state` of the thread that opens
/// it, shared with the caller that waits for it.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum OpenState {
    /// The caller waits; nothing is set on the function yet.
    Waiting = 0,
    /// The thread sets memory space and bus master: the caller waits for the outcome.
    Setting = 1,
    /// The caller gave up: the thread sets nothing on the function.
    GivenUp = 2,
}

impl OpenState {
    /// The thread is about to set the command register: whether it may (the caller has not
    /// given up).
    fn set(state: &AtomicU8) -> bool {
        state
            .compare_exchange(
                OpenState::Waiting as u8,
                OpenState::Setting as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The caller's wait is over: whether it gave up before the thread began setting the
    /// command register.
    fn give_up(state: &AtomicU8) -> bool {
        state
            .compare_exchange(
                OpenState::Waiting as u8,
                OpenState::GivenUp as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// Steps 2 and 3 of opening (see the module documentation) on a connected `client`: BAR0 and
/// the function's identity checked, then memory space and bus master set, unless the caller
/// has given up waiting by then (`state`). The reason a function is refused, when it is.
fn prepare(mut client: Client, state: &AtomicU8) -> Result<Client, String> {
    // 2. BAR0 and identity.
    let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    match client.region(VFIO_PCI_BAR0_REGION_INDEX) {
        Some(r) if r.flags & rw == rw && r.size >= u64::from(REGISTERS_SIZE) => {}
        Some(r) => {
            return Err(format!(
                "BAR0 is {} bytes with flags {:#x}; the NIC needs {REGISTERS_SIZE} bytes, readable and writable",
                r.size, r.flags
            ))
        }
        None => return Err("the function has no BAR0".to_string()),
    }
    if client
        .region(VFIO_PCI_CONFIG_REGION_INDEX)
        .is_none_or(|r| r.size < pci::CONFIG_SPACE_SIZE as u64)
    {
        return Err("the function has no configuration space".to_string());
    }
    let mut id = [0u8; 4];
    without_sigpipe(|| {
        client.region_read(VFIO_PCI_CONFIG_REGION_INDEX, pci::VENDOR_ID as u64, &mut id)
    })
    .map_err(|e| e.to_string())?;
    let id = u32::from_le_bytes(id);
    if id != pci::ID_DWORD {
        return Err(format!(
            "not a uet-nic function: vendor:device {:04x}:{:04x}, expected {:04x}:{:04x}",
            id & 0xFFFF,
            id >> 16,
            uet_regs::PCI_VENDOR_ID,
            uet_regs::PCI_DEVICE_ID
        ));
    }
    // 3. Memory space and bus master on, unless the open has given up by now.
    if !OpenState::set(state) {
        return Err("the open gave up before the function was ready".to_string());
    }
    let mut command = [0u8; 2];
    without_sigpipe(|| {
        client.region_read(
            VFIO_PCI_CONFIG_REGION_INDEX,
            pci::COMMAND as u64,
            &mut command,
        )
    })
    .map_err(|e| e.to_string())?;
    let command = u16::from_le_bytes(command) | pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER;
    without_sigpipe(|| {
        client.region_write(
            VFIO_PCI_CONFIG_REGION_INDEX,
            pci::COMMAND as u64,
            &command.to_le_bytes(),
        )
    })
    .map_err(|e| e.to_string())?;
    Ok(client)
}

/// Run `f`, a conversation on the socket, with `SIGPIPE` blocked on this thread: the
/// `vfio_user` client writes some messages with writev(2), which raises `SIGPIPE` when the
/// server has gone, and the signal's default action would end a program that hosts the
/// driver and does not ignore it (a C program). The write fails with `EPIPE` instead, and a
/// `SIGPIPE` it left pending is taken off before the thread's mask is put back.
fn without_sigpipe<T, E>(f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let mut quiet = SigpipeBlocked::new();
    let r = f();
    quiet.failed = r.is_err();
    r
}

/// `SIGPIPE` blocked on this thread while the value lives (see [`without_sigpipe`]).
struct SigpipeBlocked {
    /// Just `SIGPIPE`.
    pipe: libc::sigset_t,
    /// The thread's mask before, when this value blocked `SIGPIPE` (it was not blocked).
    old: Option<libc::sigset_t>,
    /// Whether the conversation failed (a write may have raised `SIGPIPE`); true while it
    /// runs, so that a panic in it also takes a raised signal off.
    failed: bool,
}

impl SigpipeBlocked {
    fn new() -> Self {
        // SAFETY: sigset_t is plain data; sigemptyset and sigaddset write the set they are
        // given, a live local, and read nothing else.
        let pipe = unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            set
        };
        // SAFETY: as above, for the mask pthread_sigmask fills in.
        let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
        // SAFETY: pthread_sigmask reads `pipe` and writes `old`, both live locals; it changes
        // only this thread's mask, which Drop puts back.
        let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old) } == 0;
        // SAFETY: sigismember reads the set it is given, a live local.
        let was_blocked = unsafe { libc::sigismember(&old, libc::SIGPIPE) } == 1;
        SigpipeBlocked {
            pipe,
            // Already blocked: the program's own choice, left as it is.
            old: (blocked && !was_blocked).then_some(old),
            failed: true,
        }
    }
}

impl Drop for SigpipeBlocked {
    fn drop(&mut self) {
        let Some(old) = self.old else {
            return;
        };
        if self.failed {
            // SAFETY: sigset_t is plain data; sigpending writes the set it is given, a live
            // local.
            let mut pending: libc::sigset_t = unsafe { core::mem::zeroed() };
            // SAFETY: as above; sigismember reads a live local.
            let raised = unsafe {
                libc::sigpending(&mut pending) == 0
                    && libc::sigismember(&pending, libc::SIGPIPE) == 1
            };
            if raised {
                let now = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: sigtimedwait reads the set and the timeout, live values, and takes
                // the pending SIGPIPE (blocked on this thread) without waiting; no siginfo.
                unsafe { libc::sigtimedwait(&self.pipe, core::ptr::null_mut(), &now) };
            }
        }
        // SAFETY: pthread_sigmask reads `old`, the mask this thread had, and writes nothing
        // back (null).
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
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
        let mut client = self.client();
        without_sigpipe(|| {
            client.dma_map(
                0,
                region.iova(),
                region.len() as u64,
                region.fd().as_raw_fd(),
            )
        })
        .map_err(|e| DeviceError::DmaMap {
            iova: region.iova(),
            len: region.len(),
            reason: e.to_string(),
            errno: None,
        })
    }

    fn dma_unmap(&self, region: &DmaRegion) -> Result<(), DeviceError> {
        let mut client = self.client();
        without_sigpipe(|| client.dma_unmap(region.iova(), region.len() as u64)).map_err(|e| {
            DeviceError::DmaUnmap {
                iova: region.iova(),
                reason: e.to_string(),
            }
        })
    }

    fn name(&self) -> String {
        format!("vfio-user:{}", self.path.display())
    }

    /// The MSI-X index's vectors, as `GET_IRQ_INFO` gives them, when they take eventfds; at
    /// most the table of this NIC's register map, and of the function's MSI-X capability. A
    /// function without the capability has none, and the server is not asked: a server
    /// without the index refuses `GET_IRQ_INFO` with a bare error header, and the `vfio_user`
    /// client would wait for the rest of a reply that never comes, holding the conversation
    /// (and every register access after it) for good.
    fn msix_vectors(&self) -> u16 {
        let Some(table) = self.msix_table_size() else {
            return 0;
        };
        let mut client = self.client();
        match without_sigpipe(|| client.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX)) {
            Ok(info) if info.flags & VFIO_IRQ_INFO_EVENTFD != 0 => u16::try_from(info.count)
                .map_or(pci::MSIX_VECTORS, |n| n.min(pci::MSIX_VECTORS))
                .min(table),
            Ok(_) => 0,
            Err(e) => {
                tracing::warn!(device = %self.path.display(), error = %e, "GET_IRQ_INFO failed");
                0
            }
        }
    }

    /// One `SET_IRQS` per `SET_IRQS_FDS` (16) vectors: the most descriptors one message carries.
    /// The `vfio_user` client does not pass a refusal on; [`Device::msix_vectors`] bounds
    /// what is asked.
    fn set_msix_eventfds(&self, eventfds: &[EventFd]) -> Result<(), DeviceError> {
        let fail = |reason: String| DeviceError::Interrupts {
            name: self.name(),
            reason,
        };
        if eventfds.len() > usize::from(pci::MSIX_VECTORS) {
            return Err(fail(format!("{} vectors asked for", eventfds.len())));
        }
        for (i, chunk) in eventfds.chunks(SET_IRQS_FDS).enumerate() {
            // The client does not pass a refusal on; the server enables MSI-X in
            // configuration space once it took the eventfds, as vfio-pci does. Enable is
            // cleared before each block, so that it says whether this block was taken: one
            // taken before would leave it on over a refused one, whose vectors then deliver
            // nothing, and a waiter given one would sleep for good.
            let control = u16::from_le_bytes(self.config_read::<2>(pci::MSIX_MESSAGE_CONTROL));
            self.config_write(
                pci::MSIX_MESSAGE_CONTROL,
                &(control & !pci::MSIX_CONTROL_ENABLE).to_le_bytes(),
            );
            let fds: Vec<i32> = chunk.iter().map(AsRawFd::as_raw_fd).collect();
            let start = (i * SET_IRQS_FDS) as u32;
            let mut client = self.client();
            without_sigpipe(|| {
                client.set_irqs(
                    VFIO_PCI_MSIX_IRQ_INDEX,
                    VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                    start,
                    fds.len() as u32,
                    &fds,
                )
            })
            .map_err(|e| fail(e.to_string()))?;
            drop(client);
            let control = u16::from_le_bytes(self.config_read::<2>(pci::MSIX_MESSAGE_CONTROL));
            if control & pci::MSIX_CONTROL_ENABLE == 0 {
                let _ = self.clear_msix();
                return Err(fail(format!(
                    "the server did not enable MSI-X: it refused the eventfds of vectors \
                     {start}..{}",
                    start as usize + fds.len()
                )));
            }
        }
        Ok(())
    }

    fn clear_msix(&self) -> Result<(), DeviceError> {
        let mut client = self.client();
        without_sigpipe(|| {
            client.set_irqs(
                VFIO_PCI_MSIX_IRQ_INDEX,
                VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
                0,
                0,
                &[],
            )
        })
        .map_err(|e| DeviceError::Interrupts {
            name: self.name(),
            reason: e.to_string(),
        })
    }
}

/// MSI-X Message Control's Table Size field: the number of vectors less 1.
const MSIX_TABLE_SIZE_MASK: u16 = 0x7FF;

/// The most file descriptors the `vfio_user` crate receives with one message.
const SET_IRQS_FDS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use uet_regs::BAR0_SIZE;
    use vfio_bindings::bindings::vfio::{vfio_region_info, VFIO_PCI_NUM_REGIONS};
    use vfio_user::{DmaMapFlags, DmaUnmapFlags, Server, ServerBackend, ServerRegion};

    /// A function that passes the driver's checks at open, then goes away (its server
    /// thread ends, closing the socket) at the first BAR0 write. It lists MSI-X vectors (and
    /// has an MSI-X capability of 64) but refuses their eventfds, recording the flags of each
    /// `SET_IRQS`, and so never enables MSI-X.
    #[derive(Default)]
    struct StubFunction(std::sync::Arc<std::sync::Mutex<Vec<u32>>>);

    /// The `ServerBackend` methods of a test server whose function takes DMA mappings and
    /// resets without doing anything.
    macro_rules! no_dma_and_no_reset {
        () => {
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
        };
    }

    impl ServerBackend for StubFunction {
        fn region_read(
            &mut self,
            region: u32,
            offset: u64,
            data: &mut [u8],
        ) -> std::io::Result<()> {
            data.fill(0);
            if region != VFIO_PCI_CONFIG_REGION_INDEX {
                return Ok(());
            }
            let mut config = [0u8; pci::CONFIG_SPACE_SIZE];
            let mut put = |at: usize, bytes: &[u8]| {
                config[at..at + bytes.len()].copy_from_slice(bytes);
            };
            put(pci::VENDOR_ID, &pci::ID_DWORD.to_le_bytes());
            put(pci::STATUS, &pci::STATUS_CAPABILITIES_LIST.to_le_bytes());
            put(pci::CAPABILITIES_POINTER, &[pci::MSIX_CAP as u8]);
            put(pci::MSIX_CAP, &[pci::CAP_ID_MSIX, 0]);
            put(pci::MSIX_MESSAGE_CONTROL, &63u16.to_le_bytes());
            let at = offset as usize;
            for (d, s) in data.iter_mut().zip(config.iter().skip(at)) {
                *d = *s;
            }
            Ok(())
        }

        fn region_write(&mut self, region: u32, _: u64, _: &[u8]) -> std::io::Result<()> {
            assert_ne!(region, VFIO_PCI_BAR0_REGION_INDEX, "the function goes away");
            Ok(())
        }

        no_dma_and_no_reset!();

        fn set_irqs(
            &mut self,
            _: u32,
            flags: u32,
            _: u32,
            _: u32,
            _: Vec<File>,
        ) -> std::io::Result<()> {
            self.0.lock().unwrap().push(flags);
            Err(std::io::Error::other("no eventfds taken"))
        }
    }

    fn regions() -> Vec<ServerRegion> {
        (0..VFIO_PCI_NUM_REGIONS)
            .map(|index| {
                let size = match index {
                    VFIO_PCI_BAR0_REGION_INDEX => u64::from(BAR0_SIZE),
                    VFIO_PCI_CONFIG_REGION_INDEX => pci::CONFIG_SPACE_SIZE as u64,
                    _ => 0,
                };
                ServerRegion {
                    region_info: vfio_region_info {
                        argsz: core::mem::size_of::<vfio_region_info>() as u32,
                        flags: VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
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

    /// A server that answers the connection but stops answering before the function is ready
    /// (here at the identity read in configuration space) makes the open an error once the
    /// timeout has passed, not a hang: the timeout covers every answer the open waits for.
    #[test]
    fn a_server_that_stops_answering_while_the_function_opens_is_an_error_not_a_hang() {
        let dir = std::env::temp_dir().join(format!("uet-vfio-user-stall-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stall.sock");
        let server = Server::new(&path, true, Vec::new(), regions()).unwrap();
        let (release, stalled) = mpsc::channel::<()>();
        let mut function = SlowFunction {
            go: stalled,
            waited: false,
            writes: std::sync::Arc::new(Mutex::new(Vec::new())),
        };
        let t = std::thread::spawn(move || {
            let _ = server.run(&mut function);
        });
        let (opened_tx, opened) = mpsc::channel();
        let at = path.clone();
        std::thread::spawn(move || {
            let r = VfioUserDevice::open_within(&at, Duration::from_millis(200)).map(|_| ());
            let _ = opened_tx.send(r);
        });
        let r = opened
            .recv_timeout(Duration::from_secs(10))
            .expect("the open returns");
        let e = r.expect_err("the function never got ready").to_string();
        assert!(e.contains("no vfio-user answer within 200 ms"), "{e}");
        // Let the server go on: the open's thread finishes, drops its client, and the
        // server's conversation ends.
        drop(release);
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A server that refuses the eventfds never enables MSI-X: the refusal, which the
    /// `vfio_user` client does not pass on, is seen in configuration space, reported, and the
    /// vectors are cleared again.
    #[test]
    fn eventfds_the_server_refuses_are_reported_and_cleared() {
        use vfio_bindings::bindings::vfio::VFIO_IRQ_INFO_NORESIZE;
        let dir = std::env::temp_dir().join(format!("uet-vfio-user-irqs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("irqs.sock");
        let irqs = (0..=VFIO_PCI_MSIX_IRQ_INDEX)
            .map(|index| vfio_user::IrqInfo {
                index,
                flags: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                    VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE
                } else {
                    0
                },
                count: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                    64
                } else {
                    0
                },
            })
            .collect();
        let server = Server::new(&path, true, irqs, regions()).unwrap();
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut backend = StubFunction(asked.clone());
        let t = std::thread::spawn(move || {
            let _ = server.run(&mut backend);
        });
        let device = VfioUserDevice::open(&path).unwrap();
        assert_eq!(device.msix_vectors(), 64);
        let fds: Vec<EventFd> = (0..20).map(|_| EventFd::new(0).unwrap()).collect();
        let e = device.set_msix_eventfds(&fds).unwrap_err().to_string();
        assert!(e.contains("did not enable MSI-X"), "{e}");
        drop(device);
        t.join().unwrap();
        let asked = asked.lock().unwrap().clone();
        let eventfds = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        let none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
        assert_eq!(
            asked,
            [eventfds, none],
            "the first block of 16, refused, then the clear"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A function that takes the eventfds of the first block of vectors (from vector 0),
    /// turning MSI-X on as a vfio-user server does, and refuses every other block; its
    /// configuration space's MSI-X Enable follows what the client writes there. Records the
    /// flags and first vector of each `SET_IRQS`.
    #[derive(Default)]
    struct FirstBlockOnly {
        enabled: bool,
        asked: std::sync::Arc<std::sync::Mutex<Vec<(u32, u32)>>>,
    }

    impl ServerBackend for FirstBlockOnly {
        fn region_read(
            &mut self,
            region: u32,
            offset: u64,
            data: &mut [u8],
        ) -> std::io::Result<()> {
            let enable = if self.enabled {
                pci::MSIX_CONTROL_ENABLE
            } else {
                0
            };
            let mut stub = StubFunction::default();
            stub.region_read(region, offset, data)?;
            if region == VFIO_PCI_CONFIG_REGION_INDEX
                && offset == pci::MSIX_MESSAGE_CONTROL as u64
                && data.len() == 2
            {
                data.copy_from_slice(&(63 | enable).to_le_bytes());
            }
            Ok(())
        }

        fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
            if region == VFIO_PCI_CONFIG_REGION_INDEX
                && offset == pci::MSIX_MESSAGE_CONTROL as u64
                && data.len() == 2
            {
                let control = u16::from_le_bytes([data[0], data[1]]);
                self.enabled = control & pci::MSIX_CONTROL_ENABLE != 0;
            }
            Ok(())
        }

        no_dma_and_no_reset!();

        fn set_irqs(
            &mut self,
            _: u32,
            flags: u32,
            start: u32,
            count: u32,
            _: Vec<File>,
        ) -> std::io::Result<()> {
            self.asked.lock().unwrap().push((flags, start));
            if flags & VFIO_IRQ_SET_DATA_NONE != 0 && count == 0 {
                self.enabled = false;
                return Ok(());
            }
            if start != 0 {
                return Err(std::io::Error::other(
                    "no eventfds taken past the first block",
                ));
            }
            self.enabled = true;
            Ok(())
        }
    }

    /// A server that takes the first block of eventfds and refuses a later one has MSI-X on
    /// (from the first block) though vectors past it have no eventfd, and a waiter given one
    /// of them would sleep for good: the refusal of any block is reported and the vectors
    /// are cleared again.
    #[test]
    fn eventfds_refused_past_the_first_block_are_reported_and_cleared() {
        use vfio_bindings::bindings::vfio::VFIO_IRQ_INFO_NORESIZE;
        let dir =
            std::env::temp_dir().join(format!("uet-vfio-user-irqs-part-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("irqs.sock");
        let irqs = (0..=VFIO_PCI_MSIX_IRQ_INDEX)
            .map(|index| vfio_user::IrqInfo {
                index,
                flags: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                    VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE
                } else {
                    0
                },
                count: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                    64
                } else {
                    0
                },
            })
            .collect();
        let server = Server::new(&path, true, irqs, regions()).unwrap();
        let mut backend = FirstBlockOnly::default();
        let asked = backend.asked.clone();
        let t = std::thread::spawn(move || {
            let _ = server.run(&mut backend);
        });
        let device = VfioUserDevice::open(&path).unwrap();
        let fds: Vec<EventFd> = (0..20).map(|_| EventFd::new(0).unwrap()).collect();
        let refused = device.set_msix_eventfds(&fds).map_err(|e| e.to_string());
        let enabled = u16::from_le_bytes(device.config_read::<2>(pci::MSIX_MESSAGE_CONTROL))
            & pci::MSIX_CONTROL_ENABLE;
        drop(device);
        t.join().unwrap();
        let e = refused.expect_err("vectors 16 to 19 have no eventfd");
        assert!(e.contains("did not enable MSI-X"), "{e}");
        assert_eq!(enabled, 0, "MSI-X left on");
        let none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
        assert_eq!(
            asked.lock().unwrap().last(),
            Some(&(none, 0)),
            "the vectors cleared"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Register accesses after the server went away fail as on a surprise-removed function
    /// (reads all ones, writes dropped), never with a `SIGPIPE`, whose default action would
    /// end a C program that hosts the driver. The `vfio_user` client writes a register write
    /// with writev(2), which raises the signal on a socket whose peer has closed.
    #[test]
    fn accesses_after_the_server_went_away_raise_no_sigpipe() {
        let dir = std::env::temp_dir().join(format!("uet-vfio-user-gone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("gone.sock");
        let server = Server::new(&path, true, Vec::new(), regions()).unwrap();
        let t = std::thread::spawn(move || {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                server.run(&mut StubFunction::default())
            }));
            // The server, its listener and the connection go with this thread.
        });
        let device = VfioUserDevice::open(&path).unwrap();
        // SIGPIPE's default action, as in a C program that hosts the driver (each test runs
        // in a process of its own under nextest).
        // SAFETY: sets the disposition of SIGPIPE to a value libc defines; no handler.
        let before = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        device.write32(0, 1);
        t.join().unwrap();
        device.write32(0, 2);
        device.write64_burst(0, &[1, 2, 3]);
        let id = device.read32(0);
        // SAFETY: as above, putting back the disposition read there.
        unsafe { libc::signal(libc::SIGPIPE, before) };
        assert_eq!(id, u32::MAX);
        assert!(device.lost.load(Ordering::Relaxed));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A uet-nic function that answers the connection (version and regions, which the
    /// protocol crate answers itself) and then stalls: its first region read waits until the
    /// test lets it go (drops the sender); every write is recorded, as (region, offset).
    struct SlowFunction {
        go: std::sync::mpsc::Receiver<()>,
        waited: bool,
        writes: std::sync::Arc<Mutex<Vec<(u32, u64)>>>,
    }

    impl ServerBackend for SlowFunction {
        fn region_read(&mut self, _: u32, offset: u64, data: &mut [u8]) -> std::io::Result<()> {
            if !self.waited {
                self.waited = true;
                let _ = self.go.recv();
            }
            data.fill(0);
            if offset == pci::VENDOR_ID as u64 && data.len() == 4 {
                data.copy_from_slice(&pci::ID_DWORD.to_le_bytes());
            }
            Ok(())
        }

        fn region_write(&mut self, index: u32, offset: u64, _: &[u8]) -> std::io::Result<()> {
            self.writes.lock().unwrap().push((index, offset));
            Ok(())
        }

        no_dma_and_no_reset!();

        fn set_irqs(
            &mut self,
            _: u32,
            _: u32,
            _: u32,
            _: u32,
            _: Vec<File>,
        ) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An open that gave up on a server too slow to answer leaves the function as it found
    /// it: when the server answers after all, memory space and bus master are not set in the
    /// command register of a function nobody opened.
    #[test]
    fn an_open_that_timed_out_sets_nothing_on_the_function_when_the_answer_comes_late() {
        let dir = std::env::temp_dir().join(format!("uet-vfio-user-late-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("late.sock");
        let server = Server::new(&path, true, Vec::new(), regions()).unwrap();
        let (go, wait) = mpsc::channel::<()>();
        let writes = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut function = SlowFunction {
            go: wait,
            waited: false,
            writes: writes.clone(),
        };
        let t = std::thread::spawn(move || {
            let _ = server.run(&mut function);
        });
        let e = VfioUserDevice::open_within(&path, Duration::from_millis(200))
            .map(|_| ())
            .expect_err("no answer in time");
        assert!(
            e.to_string().contains("no vfio-user answer within 200 ms"),
            "{e}"
        );
        // The answer comes: the open's thread goes on, then drops its client, which ends the
        // server's conversation.
        drop(go);
        t.join().unwrap();
        assert_eq!(
            *writes.lock().unwrap(),
            Vec::new(),
            "written after the open gave up"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
