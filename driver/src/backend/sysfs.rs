//! A NIC's PCI function as Linux shows it in sysfs: finding it, checking it is this NIC, and
//! handing it to `vfio-pci` (and back).
//!
//! The files, as `Documentation/ABI/testing/sysfs-bus-pci` and
//! `Documentation/driver-api/vfio.rst` ("VFIO Usage Example") describe them:
//!
//! * `bus/pci/devices/<address>/vendor`, `.../device`: the function's identity, `0x%04x`;
//! * `.../driver`: a link to its driver, `bus/pci/drivers/<name>`; absent when none is bound;
//! * `.../iommu_group`: a link to `kernel/iommu_groups/<n>`; `/dev/vfio/<n>` is the group's
//!   VFIO file, and the link is absent when the IOMMU is off;
//! * `.../driver_override`: the one driver that may bind the function (a newline clears it);
//! * `bus/pci/drivers/<name>/unbind`: writing the address releases the function;
//! * `bus/pci/drivers_probe`: writing the address binds it to a driver that matches.
//!
//! Binding takes only a function whose identity is this NIC's ([`uet_regs::PCI_VENDOR_ID`]:
//! [`uet_regs::PCI_DEVICE_ID`]): a mistyped address must not take another device from its
//! driver. Unbinding refuses while a process holds the function's group open (the group file
//! `/dev/vfio/<n>` cannot be opened, `EBUSY`), or its VFIO device file
//! (`/dev/vfio/devices/vfio<m>`, named by `.../vfio-dev/vfio<m>` on kernels with VFIO device
//! files, through which a process reaches the function with iommufd and no group), because
//! the kernel's `vfio-pci` would otherwise block the unbind until that process lets go. A
//! device file is shared, so its holders are found in procfs only: one whose descriptors
//! cannot be read (another user's, without root) is not seen.
//!
//! The roots of sysfs, procfs and `/dev` are parameters ([`Sysfs::new`],
//! [`Sysfs::with_dev`]): tests point them at trees of their own, and a container may mount
//! them elsewhere.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The kernel driver that gives a function to userspace.
pub const VFIO_PCI: &str = "vfio-pci";

/// A PCI function's address, `domain:bus:device.function` (`0000:3b:00.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI segment (domain).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0 to 31.
    pub device: u8,
    /// Function number, 0 to 7.
    pub function: u8,
}

impl fmt::Display for PciAddress {
    /// The form sysfs names the function by: `%04x:%02x:%02x.%x`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for PciAddress {
    type Err = String;

    /// `domain:bus:device.function` or `bus:device.function` (domain 0), in hex, as `lspci -D`
    /// and `lspci` print them.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!("bad PCI address '{s}': {why} (expected domain:bus:device.function, as 0000:3b:00.0)")
        };
        let hex = |part: &str, digits: usize, what: &str| {
            if part.is_empty()
                || part.len() > digits
                || !part.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Err(bad(&format!("{what} is not 1 to {digits} hex digits")));
            }
            u32::from_str_radix(part, 16).map_err(|_| bad(&format!("{what} is not hex")))
        };
        let (slot, function) = s
            .rsplit_once('.')
            .ok_or_else(|| bad("no '.' before the function"))?;
        let parts: Vec<&str> = slot.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, v] => (hex(d, 8, "the domain")?, *b, *v),
            [b, v] => (0, *b, *v),
            _ => return Err(bad("not two or three ':'-separated parts before the '.'")),
        };
        let bus = hex(bus, 2, "the bus")?;
        let device = hex(device, 2, "the device")?;
        let function = hex(function, 1, "the function")?;
        if device > 0x1F {
            return Err(bad("the device is above 1f"));
        }
        if function > 7 {
            return Err(bad("the function is above 7"));
        }
        // Each below 256 (two hex digits at most; device and function checked above).
        Ok(PciAddress {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

/// Why sysfs refused.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// No function at the address.
    #[error("no PCI function {address} (no {})", path.display())]
    NoFunction {
        /// The address asked for.
        address: PciAddress,
        /// The directory that is not there.
        path: PathBuf,
    },
    /// The function is another device.
    #[error(
        "{address} is {vendor:04x}:{device:04x}, not a uet-nic function ({:04x}:{:04x})",
        uet_regs::PCI_VENDOR_ID,
        uet_regs::PCI_DEVICE_ID
    )]
    NotThisNic {
        /// The function.
        address: PciAddress,
        /// Its vendor ID.
        vendor: u16,
        /// Its device ID.
        device: u16,
    },
    /// The function is not bound to `vfio-pci`.
    #[error("{address} is bound to {}, not vfio-pci: run `uetctl bind {address}` first", driver.as_deref().unwrap_or("no driver"))]
    NotBoundToVfio {
        /// The function.
        address: PciAddress,
        /// Its driver, if any.
        driver: Option<String>,
    },
    /// The function has another driver than `vfio-pci`, so `vfio-pci` has nothing to release.
    #[error(
        "{address} is bound to {driver}, not vfio-pci: there is nothing to release from \
         vfio-pci, and it was left with {driver}"
    )]
    NothingToRelease {
        /// The function.
        address: PciAddress,
        /// Its driver.
        driver: String,
    },
    /// No IOMMU group: the IOMMU is off.
    #[error(
        "{address} is in no IOMMU group: the IOMMU is off (boot with intel_iommu=on or \
         amd_iommu=on) or the platform has none"
    )]
    NoIommuGroup {
        /// The function.
        address: PciAddress,
    },
    /// A process holds the function's VFIO group open.
    #[error(
        "{address} is in use: {} holds {} open; stop it first",
        holder.as_ref().map_or("a process".to_string(), |(pid, name)| format!("process {pid} ({name})")),
        file.display()
    )]
    InUse {
        /// The function.
        address: PciAddress,
        /// The file held: the group's, or the function's VFIO device file.
        file: PathBuf,
        /// The process and its command name, when it could be found.
        holder: Option<(u32, String)>,
    },
    /// The `vfio-pci` driver is not there to take the function.
    #[error(
        "the vfio-pci driver is not loaded (no {}): run `modprobe vfio-pci`; {address} was \
         left as it was",
        path.display()
    )]
    NoVfioPci {
        /// The function.
        address: PciAddress,
        /// The driver's directory that is missing.
        path: PathBuf,
    },
    /// `vfio-pci` did not take the function.
    #[error(
        "vfio-pci did not take {address} (now bound to {}); {}",
        now.as_deref().unwrap_or("no driver"),
        if *given_back {
            "its driver_override was restored and it was probed again"
        } else {
            "restoring its driver_override failed too (see the log): check it by hand"
        }
    )]
    NotTaken {
        /// The function.
        address: PciAddress,
        /// Its driver after the attempt.
        now: Option<String>,
        /// Whether its `driver_override` was restored.
        given_back: bool,
    },
    /// A sysfs file could not be read or written.
    #[error("{op} {}: {source}{}", path.display(), permission_hint(source))]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn permission_hint(e: &io::Error) -> &'static str {
    if e.kind() == io::ErrorKind::PermissionDenied {
        " (binding a PCI function needs root)"
    } else {
        ""
    }
}

/// What [`Sysfs::bind_vfio`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The function was bound to `vfio-pci` already; nothing was written.
    Already,
    /// The function was taken from `from` (or from no driver) and is now `vfio-pci`'s.
    Rebound {
        /// The driver it had.
        from: Option<String>,
    },
}

/// What [`Sysfs::unbind_vfio`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unbound {
    /// No driver had the function; nothing was written.
    NotBound,
    /// `vfio-pci` released it; `now` is the driver that took it after (usually none: no kernel
    /// driver knows this NIC).
    Released {
        /// Its driver after the release.
        now: Option<String>,
    },
}

/// A function ready for VFIO: this NIC, bound to `vfio-pci`, in an IOMMU group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfioFunction {
    /// The function.
    pub address: PciAddress,
    /// Its sysfs directory (what `vfio-ioctls` opens the device by).
    pub sysfs_path: PathBuf,
    /// Its IOMMU group: `/dev/vfio/<group>`.
    pub iommu_group: u32,
}

/// A uet-nic function on the PCI bus, as [`Sysfs::functions`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicFunction {
    /// Its address.
    pub address: PciAddress,
    /// Its driver, if any.
    pub driver: Option<String>,
    /// Its IOMMU group, if it is in one.
    pub iommu_group: Option<u32>,
}

/// sysfs, procfs and devtmpfs, at their roots.
#[derive(Clone, Debug)]
pub struct Sysfs {
    sys: PathBuf,
    proc: PathBuf,
    dev: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::system()
    }
}

impl Sysfs {
    /// The system's: `/sys` and `/proc`.
    pub fn system() -> Self {
        Self::new("/sys", "/proc")
    }

    /// sysfs mounted at `sys` and procfs at `proc`; device files in `/dev`.
    pub fn new(sys: impl Into<PathBuf>, proc: impl Into<PathBuf>) -> Self {
        Sysfs {
            sys: sys.into(),
            proc: proc.into(),
            dev: PathBuf::from("/dev"),
        }
    }

    /// The same, with device files in `dev`.
    pub fn with_dev(mut self, dev: impl Into<PathBuf>) -> Self {
        self.dev = dev.into();
        self
    }

    /// The function's directory, `bus/pci/devices/<address>`.
    pub fn function_dir(&self, address: PciAddress) -> PathBuf {
        self.sys.join("bus/pci/devices").join(address.to_string())
    }

    /// The uet-nic functions on the PCI bus, by address. A function whose files cannot be
    /// read is passed over; no `bus/pci/devices` at all is an error.
    pub fn functions(&self) -> Result<Vec<NicFunction>, SysfsError> {
        let dir = self.sys.join("bus/pci/devices");
        let entries = fs::read_dir(&dir).map_err(|source| SysfsError::Io {
            op: "listing",
            path: dir.clone(),
            source,
        })?;
        let mut found: Vec<NicFunction> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<PciAddress>().ok())
            .filter(|&address| self.check_this_nic(address).is_ok())
            .map(|address| NicFunction {
                address,
                driver: self.driver(address).ok().flatten(),
                iommu_group: self.iommu_group(address).ok(),
            })
            .collect();
        found.sort_by_key(|f| f.address);
        Ok(found)
    }

    /// The function's vendor and device IDs; [`SysfsError::NoFunction`] when it is not there.
    pub fn identity(&self, address: PciAddress) -> Result<(u16, u16), SysfsError> {
        let dir = self.function_dir(address);
        if !dir.is_dir() {
            return Err(SysfsError::NoFunction { address, path: dir });
        }
        let id = |name: &str| -> Result<u16, SysfsError> {
            let path = dir.join(name);
            let text = fs::read_to_string(&path).map_err(|source| SysfsError::Io {
                op: "reading",
                path: path.clone(),
                source,
            })?;
            let digits = text.trim();
            let digits = digits.strip_prefix("0x").unwrap_or(digits);
            u16::from_str_radix(digits, 16).map_err(|_| SysfsError::Io {
                op: "reading",
                path,
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("'{}' is not a 16-bit hex ID", text.trim()),
                ),
            })
        };
        Ok((id("vendor")?, id("device")?))
    }

    /// Whether `address` is there and is this NIC.
    pub fn check_this_nic(&self, address: PciAddress) -> Result<(), SysfsError> {
        let (vendor, device) = self.identity(address)?;
        if (vendor, device) != (uet_regs::PCI_VENDOR_ID, uet_regs::PCI_DEVICE_ID) {
            return Err(SysfsError::NotThisNic {
                address,
                vendor,
                device,
            });
        }
        Ok(())
    }

    /// The driver bound to the function, if any.
    pub fn driver(&self, address: PciAddress) -> Result<Option<String>, SysfsError> {
        let link = self.function_dir(address).join("driver");
        match fs::read_link(&link) {
            Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(SysfsError::Io {
                op: "reading the link",
                path: link,
                source,
            }),
        }
    }

    /// The function's IOMMU group.
    pub fn iommu_group(&self, address: PciAddress) -> Result<u32, SysfsError> {
        let link = self.function_dir(address).join("iommu_group");
        let target = match fs::read_link(&link) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SysfsError::NoIommuGroup { address })
            }
            Err(source) => {
                return Err(SysfsError::Io {
                    op: "reading the link",
                    path: link,
                    source,
                })
            }
        };
        target
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| SysfsError::Io {
                op: "reading the link",
                path: link,
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("'{}' names no group number", target.display()),
                ),
            })
    }

    /// Everything opening the function through VFIO needs from sysfs, checked in the order of
    /// `vfio.rst`: the function is there, is this NIC, is bound to `vfio-pci`, and has an
    /// IOMMU group.
    pub fn vfio_function(&self, address: PciAddress) -> Result<VfioFunction, SysfsError> {
        self.check_this_nic(address)?;
        let driver = self.driver(address)?;
        if driver.as_deref() != Some(VFIO_PCI) {
            return Err(SysfsError::NotBoundToVfio { address, driver });
        }
        Ok(VfioFunction {
            address,
            sysfs_path: self.function_dir(address),
            iommu_group: self.iommu_group(address)?,
        })
    }

    /// Give the function to `vfio-pci`: set its `driver_override`, release it from its driver,
    /// and probe it. Only this NIC is taken, and only in an IOMMU group. If `vfio-pci` does
    /// not end up with it, the override is cleared and the function probed again, so its
    /// driver takes it back, and the error says where it is.
    pub fn bind_vfio(&self, address: PciAddress) -> Result<Bound, SysfsError> {
        self.check_this_nic(address)?;
        let from = self.driver(address)?;
        if from.as_deref() == Some(VFIO_PCI) {
            return Ok(Bound::Already);
        }
        let vfio_pci = self.driver_dir(VFIO_PCI);
        if !vfio_pci.is_dir() {
            return Err(SysfsError::NoVfioPci {
                address,
                path: vfio_pci,
            });
        }
        // vfio-pci's probe refuses a function in no IOMMU group (the IOMMU is off), and the
        // driver needs the group's IOMMU: refused before the function leaves its driver.
        self.iommu_group(address)?;
        let name = address.to_string();
        let dir = self.function_dir(address);
        let override_path = dir.join("driver_override");
        // What to put back if vfio-pci does not take it.
        let previous = self.driver_override(&override_path)?;
        self.write(&override_path, VFIO_PCI)?;
        let taken = (|| {
            if let Some(d) = &from {
                self.write(&self.driver_dir(d).join("unbind"), &name)?;
            }
            self.write(&self.sys.join("bus/pci/drivers_probe"), &name)
        })();
        let now = match taken.and_then(|()| self.driver(address)) {
            Ok(now) => now,
            Err(e) => {
                self.give_back(address, &previous);
                return Err(e);
            }
        };
        if now.as_deref() == Some(VFIO_PCI) {
            return Ok(Bound::Rebound { from });
        }
        let given_back = self.give_back(address, &previous);
        Err(SysfsError::NotTaken {
            address,
            now: self.driver(address).unwrap_or(now),
            given_back,
        })
    }

    /// Release the function from `vfio-pci`: clear its `driver_override`, unbind it, and
    /// probe it (a kernel driver that knows it may take it). Refused while a process holds
    /// its VFIO group or VFIO device file open, and for a function another driver has.
    pub fn unbind_vfio(&self, address: PciAddress) -> Result<Unbound, SysfsError> {
        self.check_this_nic(address)?;
        let driver = self.driver(address)?;
        match driver.as_deref() {
            None => return Ok(Unbound::NotBound),
            Some(VFIO_PCI) => {}
            Some(other) => {
                return Err(SysfsError::NothingToRelease {
                    address,
                    driver: other.to_string(),
                })
            }
        }
        if let Ok(group) = self.iommu_group(address) {
            self.check_idle(address, group)?;
        }
        let name = address.to_string();
        let override_path = self.function_dir(address).join("driver_override");
        // What to put back if vfio-pci keeps the function: the override it was bound with.
        let previous = self.driver_override(&override_path)?;
        self.write(&override_path, "\n")?;
        if let Err(e) = self.write(&self.driver_dir(VFIO_PCI).join("unbind"), &name) {
            // Still vfio-pci's: as it was, override included, so that a probe (a hotplug, a
            // rescan) gives it to vfio-pci again and not to whichever driver claims it.
            if let Err(r) = self.write(&override_path, &previous) {
                tracing::warn!(%address, error = %r, "could not restore driver_override");
            }
            return Err(e);
        }
        // Released: a probe that cannot be written leaves the function with no driver, which
        // is what a release is for this NIC (no kernel driver knows it), so it is logged only.
        if let Err(e) = self.write(&self.sys.join("bus/pci/drivers_probe"), &name) {
            tracing::warn!(%address, error = %e, "released, but could not probe the function");
        }
        Ok(Unbound::Released {
            now: self.driver(address)?,
        })
    }

    /// A function's `driver_override` at `path`, as what writing it back restores: sysfs
    /// shows an empty override as "(null)", which a newline restores.
    fn driver_override(&self, path: &Path) -> Result<String, SysfsError> {
        let text = fs::read_to_string(path).map_err(|source| SysfsError::Io {
            op: "reading",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(match text.trim() {
            "" | "(null)" => "\n".to_string(),
            d => d.to_string(),
        })
    }

    /// A driver's directory, `bus/pci/drivers/<name>`.
    fn driver_dir(&self, name: &str) -> PathBuf {
        self.sys.join("bus/pci/drivers").join(name)
    }

    /// Refuse when a process holds the group's file open: the kernel opens a group file only
    /// once at a time, and a process's device files and BAR mappings keep it open, so
    /// opening it here fails with `EBUSY` exactly then. The holder is named from procfs
    /// when it can be found there (a process with the group, not only its device, open).
    fn check_idle(&self, address: PciAddress, group: u32) -> Result<(), SysfsError> {
        for name in [group.to_string(), format!("noiommu-{group}")] {
            let shown = Path::new("/dev/vfio").join(&name);
            let busy = match fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.dev.join("vfio").join(&name))
            {
                // Opened, so nobody holds it; closed again at once.
                Ok(_) => false,
                Err(e) => e.raw_os_error() == Some(libc::EBUSY),
            };
            let holder = self.holder_of(&shown);
            if busy || holder.is_some() {
                return Err(SysfsError::InUse {
                    address,
                    file: shown,
                    holder,
                });
            }
        }
        if let Some(cdev) = self.vfio_device_file(address) {
            if let Some(holder) = self.holder_of(&cdev) {
                return Err(SysfsError::InUse {
                    address,
                    file: cdev,
                    holder: Some(holder),
                });
            }
        }
        Ok(())
    }

    /// The function's VFIO device file, `/dev/vfio/devices/vfio<m>`, as `.../vfio-dev/`
    /// names it (kernels with `CONFIG_VFIO_DEVICE_CDEV`); `None` without one.
    pub fn vfio_device_file(&self, address: PciAddress) -> Option<PathBuf> {
        let dir = fs::read_dir(self.function_dir(address).join("vfio-dev")).ok()?;
        dir.flatten().find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let m = name.strip_prefix("vfio")?;
            (!m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
                .then(|| Path::new("/dev/vfio/devices").join(&name))
        })
    }

    /// A process with `file` open, from its `fd` links: its PID and command name. Processes
    /// whose descriptors cannot be read (another user's, without root) are passed over.
    pub fn holder_of(&self, file: &Path) -> Option<(u32, String)> {
        let procs = fs::read_dir(&self.proc).ok()?;
        for p in procs.flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(fds) = fs::read_dir(p.path().join("fd")) else {
                continue;
            };
            let holds = fds
                .flatten()
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t == file));
            if holds {
                let name = fs::read_to_string(p.path().join("comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_else(|_| "?".to_string());
                return Some((pid, name));
            }
        }
        None
    }

    /// Restore the override `previous` and, when no driver has the function, probe it again
    /// so its own driver takes it back: on the way out of a failed bind. Whether the
    /// override was restored; what failed is logged.
    fn give_back(&self, address: PciAddress, previous: &str) -> bool {
        let dir = self.function_dir(address);
        if let Err(e) = self.write(&dir.join("driver_override"), previous) {
            tracing::warn!(%address, error = %e, "could not restore driver_override");
            return false;
        }
        if self.driver(address).ok().flatten().is_none() {
            if let Err(e) = self.write(
                &self.sys.join("bus/pci/drivers_probe"),
                &address.to_string(),
            ) {
                tracing::warn!(%address, error = %e, "could not probe the function again");
            }
        }
        true
    }

    /// Write `text` to the existing sysfs attribute `path` (never creating a file).
    fn write(&self, path: &Path, text: &str) -> Result<(), SysfsError> {
        use std::io::Write;
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|source| SysfsError::Io {
                op: "writing",
                path: path.to_path_buf(),
                source,
            })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const NIC: &str = "0000:3b:00.0";

    fn addr(s: &str) -> PciAddress {
        s.parse().expect("valid address")
    }

    #[test]
    fn addresses_parse_in_both_forms_and_print_as_sysfs_names_them() {
        assert_eq!(
            addr("0000:3b:00.0"),
            PciAddress {
                domain: 0,
                bus: 0x3b,
                device: 0,
                function: 0
            }
        );
        assert_eq!(addr("3b:1f.7").to_string(), "0000:3b:1f.7");
        assert_eq!(addr("10000:00:02.1").to_string(), "10000:00:02.1");
        assert_eq!(addr("0000:AF:00.1").to_string(), "0000:af:00.1");
        for bad in [
            "",
            "3b:00",
            "0000:3b:20.0",
            "0000:3b:00.8",
            "0000:3b:00.",
            "0000:3b:000.0",
            "0000:100:00.0",
            "x:3b:00.0",
            "1:2:3:4.0",
            "123456789:00:00.0",
            "+0:00:00.0",
        ] {
            let e = bad.parse::<PciAddress>().expect_err(bad);
            assert!(e.contains("bad PCI address"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_address_prints_and_parses_back_and_no_string_panics() {
        for domain in [0, 1, 0xffff, 0x1_0000, u32::MAX] {
            for bus in (0..=255u8).step_by(17) {
                for device in 0..32u8 {
                    for function in 0..8u8 {
                        let a = PciAddress {
                            domain,
                            bus,
                            device,
                            function,
                        };
                        assert_eq!(a.to_string().parse::<PciAddress>(), Ok(a));
                    }
                }
            }
        }
        // Strings made of the characters an address has, and a few it has not, in every
        // length up to 14: parsed or refused, never a panic.
        let alphabet = b"0a:.f7Z-1 ";
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 15) as usize;
            let s: String = (0..len)
                .map(|k| alphabet[((seed >> (4 * k)) % alphabet.len() as u64) as usize] as char)
                .collect();
            if let Ok(a) = s.parse::<PciAddress>() {
                assert!(a.device < 32 && a.function < 8, "{s}");
                assert_eq!(a.to_string().parse::<PciAddress>(), Ok(a), "{s}");
            }
        }
    }

    /// A sysfs and procfs of their own: one function at [`NIC`], with `ids`, bound to
    /// `driver`, in IOMMU group 42.
    pub(crate) struct Tree {
        dir: PathBuf,
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    impl Tree {
        pub(crate) fn new(ids: (&str, &str), driver: Option<&str>) -> Tree {
            use std::sync::atomic::{AtomicU32, Ordering};
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "uet-sysfs-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let t = Tree { dir };
            let f = t.sys().join("bus/pci/devices").join(NIC);
            fs::create_dir_all(&f).unwrap();
            fs::write(f.join("vendor"), format!("{}\n", ids.0)).unwrap();
            fs::write(f.join("device"), format!("{}\n", ids.1)).unwrap();
            fs::write(f.join("driver_override"), "(null)\n").unwrap();
            fs::write(t.sys().join("bus/pci/drivers_probe"), "").unwrap();
            fs::create_dir_all(t.sys().join("kernel/iommu_groups/42")).unwrap();
            symlink("../../../kernel/iommu_groups/42", f.join("iommu_group")).unwrap();
            for d in [VFIO_PCI, "ixgbe"] {
                let d = t.sys().join("bus/pci/drivers").join(d);
                fs::create_dir_all(&d).unwrap();
                fs::write(d.join("unbind"), "").unwrap();
            }
            if let Some(d) = driver {
                t.set_driver(d);
            }
            fs::create_dir_all(t.proc()).unwrap();
            // The group's file, which nobody holds: it opens.
            fs::create_dir_all(t.dir.join("dev/vfio")).unwrap();
            fs::write(t.dir.join("dev/vfio/42"), "").unwrap();
            t
        }

        pub(crate) fn this_nic(driver: Option<&str>) -> Tree {
            Tree::new(("0xfffe", "0x0001"), driver)
        }

        pub(crate) fn sys(&self) -> PathBuf {
            self.dir.join("sys")
        }

        pub(crate) fn proc(&self) -> PathBuf {
            self.dir.join("proc")
        }

        pub(crate) fn sysfs(&self) -> Sysfs {
            Sysfs::new(self.sys(), self.proc()).with_dev(self.dir.join("dev"))
        }

        pub(crate) fn function(&self) -> PathBuf {
            self.sys().join("bus/pci/devices").join(NIC)
        }

        pub(crate) fn set_driver(&self, d: &str) {
            let link = self.function().join("driver");
            let _ = fs::remove_file(&link);
            symlink(format!("../../../bus/pci/drivers/{d}"), link).unwrap();
        }

        /// Put the function in IOMMU group `n` instead.
        pub(crate) fn set_group(&self, n: u32) {
            let link = self.function().join("iommu_group");
            let _ = fs::remove_file(&link);
            symlink(format!("../../../kernel/iommu_groups/{n}"), link).unwrap();
        }

        pub(crate) fn read(&self, rel: &str) -> String {
            fs::read_to_string(self.sys().join(rel)).unwrap()
        }
    }

    #[test]
    fn only_uet_nic_functions_are_listed() {
        let t = Tree::this_nic(Some(VFIO_PCI));
        let other = t.sys().join("bus/pci/devices/0000:00:1f.0");
        fs::create_dir_all(&other).unwrap();
        fs::write(other.join("vendor"), "0x8086\n").unwrap();
        fs::write(other.join("device"), "0x1234\n").unwrap();
        let second = t.sys().join("bus/pci/devices/0000:3a:00.0");
        fs::create_dir_all(&second).unwrap();
        fs::write(second.join("vendor"), "0xfffe\n").unwrap();
        fs::write(second.join("device"), "0x0001\n").unwrap();
        fs::create_dir_all(t.sys().join("bus/pci/devices/not-an-address")).unwrap();
        let list = t.sysfs().functions().unwrap();
        assert_eq!(
            list,
            vec![
                NicFunction {
                    address: addr("0000:3a:00.0"),
                    driver: None,
                    iommu_group: None
                },
                NicFunction {
                    address: addr(NIC),
                    driver: Some(VFIO_PCI.to_string()),
                    iommu_group: Some(42)
                },
            ]
        );
        let none = Sysfs::new(t.dir.join("nowhere"), t.proc());
        assert!(matches!(
            none.functions(),
            Err(SysfsError::Io { op: "listing", .. })
        ));
    }

    #[test]
    fn a_bound_function_is_ready_for_vfio() {
        let t = Tree::this_nic(Some(VFIO_PCI));
        let f = t.sysfs().vfio_function(addr(NIC)).expect("ready");
        assert_eq!(f.iommu_group, 42);
        assert_eq!(f.sysfs_path, t.function());
    }

    #[test]
    fn each_reason_a_function_is_not_ready_is_named() {
        let s = |t: &Tree, a: &str| t.sysfs().vfio_function(addr(a)).unwrap_err().to_string();
        let t = Tree::this_nic(Some(VFIO_PCI));
        let e = s(&t, "0000:3b:00.1");
        assert!(e.contains("no PCI function 0000:3b:00.1"), "{e}");

        let t = Tree::new(("0x8086", "0x10fb"), Some("ixgbe"));
        let e = s(&t, NIC);
        assert!(
            e.contains("is 8086:10fb, not a uet-nic function (fffe:0001)"),
            "{e}"
        );

        let t = Tree::this_nic(None);
        let e = s(&t, NIC);
        assert!(
            e.contains("bound to no driver, not vfio-pci: run `uetctl bind 0000:3b:00.0`"),
            "{e}"
        );
        t.set_driver("ixgbe");
        assert!(s(&t, NIC).contains("bound to ixgbe"));

        let t = Tree::this_nic(Some(VFIO_PCI));
        fs::remove_file(t.function().join("iommu_group")).unwrap();
        assert!(s(&t, NIC).contains("in no IOMMU group: the IOMMU is off"));

        let t = Tree::this_nic(Some(VFIO_PCI));
        fs::write(t.function().join("vendor"), "fffe-ish\n").unwrap();
        let e = s(&t, NIC);
        assert!(
            e.contains("vendor") && e.contains("not a 16-bit hex ID"),
            "{e}"
        );
    }

    #[test]
    fn bind_writes_the_override_unbinds_and_probes_then_checks() {
        let t = Tree::this_nic(Some("ixgbe"));
        // The tree is not a kernel: nothing takes the function, so the bind must say so and
        // give the function back.
        let e = t.sysfs().bind_vfio(addr(NIC)).unwrap_err();
        assert!(
            matches!(&e, SysfsError::NotTaken { now: Some(d), .. } if d == "ixgbe"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("its driver_override was restored and it was probed again"),
            "{e}"
        );
        assert_eq!(t.read("bus/pci/drivers/ixgbe/unbind"), NIC);
        assert_eq!(t.read("bus/pci/drivers_probe"), NIC);
        assert_eq!(t.read("bus/pci/devices/0000:3b:00.0/driver_override"), "\n");

        // No driver before: probed, and probed again after; an override that was set is put
        // back as it was.
        let t = Tree::this_nic(None);
        fs::write(t.function().join("driver_override"), "uet-stub\n").unwrap();
        let e = t.sysfs().bind_vfio(addr(NIC)).unwrap_err();
        assert!(
            matches!(
                e,
                SysfsError::NotTaken {
                    now: None,
                    given_back: true,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(t.read("bus/pci/drivers_probe"), NIC);
        assert_eq!(
            t.read("bus/pci/devices/0000:3b:00.0/driver_override"),
            "uet-stub"
        );

        // No vfio-pci driver: refused before anything is written.
        let t = Tree::this_nic(Some("ixgbe"));
        fs::remove_dir_all(t.sys().join("bus/pci/drivers/vfio-pci")).unwrap();
        let e = t.sysfs().bind_vfio(addr(NIC)).unwrap_err();
        assert!(matches!(e, SysfsError::NoVfioPci { .. }), "{e}");
        assert!(e.to_string().contains("modprobe vfio-pci"), "{e}");
        assert_eq!(t.read("bus/pci/drivers/ixgbe/unbind"), "");
        assert_eq!(t.read("bus/pci/drivers_probe"), "");
        assert_eq!(
            t.read("bus/pci/devices/0000:3b:00.0/driver_override"),
            "(null)\n"
        );

        // Bound already: nothing is written.
        let t = Tree::this_nic(Some(VFIO_PCI));
        assert_eq!(t.sysfs().bind_vfio(addr(NIC)).unwrap(), Bound::Already);
        assert_eq!(t.read("bus/pci/drivers_probe"), "");
        assert_eq!(
            t.read("bus/pci/devices/0000:3b:00.0/driver_override"),
            "(null)\n"
        );
    }

    #[test]
    fn bind_takes_only_this_nic_and_reports_what_it_cannot_write() {
        let t = Tree::new(("0x8086", "0x10fb"), Some("ixgbe"));
        let e = t.sysfs().bind_vfio(addr(NIC)).unwrap_err();
        assert!(matches!(e, SysfsError::NotThisNic { .. }), "{e}");
        assert_eq!(
            t.read("bus/pci/drivers/ixgbe/unbind"),
            "",
            "another device is left alone"
        );
        assert_eq!(
            t.read("bus/pci/devices/0000:3b:00.0/driver_override"),
            "(null)\n"
        );

        // No drivers_probe: the error names it, and the override is cleared again.
        let t = Tree::this_nic(None);
        fs::remove_file(t.sys().join("bus/pci/drivers_probe")).unwrap();
        let e = t.sysfs().bind_vfio(addr(NIC)).unwrap_err();
        assert!(
            matches!(&e, SysfsError::Io { op: "writing", path, .. } if path.ends_with("drivers_probe")),
            "{e}"
        );
        assert_eq!(t.read("bus/pci/devices/0000:3b:00.0/driver_override"), "\n");
    }

    /// Without an IOMMU group vfio-pci cannot take the function: bind says the IOMMU is off
    /// and writes nothing, rather than release the function from its driver, probe it, give
    /// it back and report only that vfio-pci did not take it.
    #[test]
    fn bind_of_a_function_in_no_iommu_group_says_so_and_writes_nothing() {
        let t = Tree::this_nic(Some("ixgbe"));
        fs::remove_file(t.function().join("iommu_group")).unwrap();
        let e = t.sysfs().bind_vfio(addr(NIC)).unwrap_err();
        assert!(matches!(e, SysfsError::NoIommuGroup { .. }), "{e}");
        assert!(e.to_string().contains("the IOMMU is off"), "{e}");
        assert_eq!(t.read("bus/pci/drivers/ixgbe/unbind"), "");
        assert_eq!(t.read("bus/pci/drivers_probe"), "");
        assert_eq!(
            t.read("bus/pci/devices/0000:3b:00.0/driver_override"),
            "(null)\n"
        );
    }

    #[test]
    fn unbind_releases_only_an_idle_vfio_function() {
        let t = Tree::this_nic(Some(VFIO_PCI));
        // A process holding the group open (its fd link, as procfs shows it).
        let p = t.proc().join("4242");
        fs::create_dir_all(p.join("fd")).unwrap();
        fs::write(p.join("comm"), "fi_pingpong\n").unwrap();
        symlink("/dev/null", p.join("fd/0")).unwrap();
        symlink("/dev/vfio/42", p.join("fd/7")).unwrap();
        // Unbind is refused naming the process and `file`, and writes nothing.
        let refused_for_holding = |file: &str| {
            let e = t.sysfs().unbind_vfio(addr(NIC)).unwrap_err();
            let says = format!("in use: process 4242 (fi_pingpong) holds {file} open");
            assert!(e.to_string().contains(&says), "{e}");
            assert_eq!(
                t.read("bus/pci/drivers/vfio-pci/unbind"),
                "",
                "nothing written"
            );
        };
        refused_for_holding("/dev/vfio/42");

        fs::remove_file(p.join("fd/7")).unwrap();
        // The same process holding only the function's VFIO device file (iommufd, no group).
        fs::create_dir_all(t.sys().join("bus/pci/devices/0000:3b:00.0/vfio-dev/vfio3")).unwrap();
        assert_eq!(
            t.sysfs().vfio_device_file(addr(NIC)),
            Some(PathBuf::from("/dev/vfio/devices/vfio3"))
        );
        symlink("/dev/vfio/devices/vfio3", p.join("fd/9")).unwrap();
        refused_for_holding("/dev/vfio/devices/vfio3");
        fs::remove_file(p.join("fd/9")).unwrap();
        let r = t.sysfs().unbind_vfio(addr(NIC)).unwrap();
        // The tree does not react: the link still names vfio-pci.
        assert_eq!(
            r,
            Unbound::Released {
                now: Some(VFIO_PCI.to_string())
            }
        );
        assert_eq!(t.read("bus/pci/drivers/vfio-pci/unbind"), NIC);
        assert_eq!(t.read("bus/pci/drivers_probe"), NIC);
        assert_eq!(t.read("bus/pci/devices/0000:3b:00.0/driver_override"), "\n");

        // The release took effect even where the probe after it cannot be written.
        let t = Tree::this_nic(Some(VFIO_PCI));
        fs::remove_file(t.sys().join("bus/pci/drivers_probe")).unwrap();
        assert!(matches!(
            t.sysfs().unbind_vfio(addr(NIC)),
            Ok(Unbound::Released { .. })
        ));
        assert_eq!(t.read("bus/pci/drivers/vfio-pci/unbind"), NIC);

        let t = Tree::this_nic(None);
        assert_eq!(t.sysfs().unbind_vfio(addr(NIC)).unwrap(), Unbound::NotBound);
        let t = Tree::this_nic(Some("ixgbe"));
        let e = t.sysfs().unbind_vfio(addr(NIC)).unwrap_err();
        assert!(matches!(e, SysfsError::NothingToRelease { .. }), "{e}");
        assert_eq!(t.read("bus/pci/drivers/ixgbe/unbind"), "");
    }

    /// An unbind the kernel refuses leaves the function as it was, bound to vfio-pci with the
    /// override it had, and not bound with no override.
    #[test]
    fn an_unbind_refused_keeps_the_override() {
        let t = Tree::this_nic(Some(VFIO_PCI));
        fs::write(t.function().join("driver_override"), "vfio-pci\n").unwrap();
        fs::remove_file(t.sys().join("bus/pci/drivers/vfio-pci/unbind")).unwrap();
        let e = t.sysfs().unbind_vfio(addr(NIC)).unwrap_err();
        assert!(matches!(e, SysfsError::Io { .. }), "{e}");
        assert_eq!(
            t.read("bus/pci/devices/0000:3b:00.0/driver_override"),
            "vfio-pci"
        );
        assert_eq!(t.read("bus/pci/drivers_probe"), "", "no probe");
    }

    /// Unbinding a function another driver has is refused saying so, not with the advice to
    /// bind it to vfio-pci first, which would take it from that driver.
    #[test]
    fn unbind_of_a_function_another_driver_has_does_not_advise_binding_it() {
        let t = Tree::this_nic(Some("ixgbe"));
        let e = t.sysfs().unbind_vfio(addr(NIC)).unwrap_err().to_string();
        assert!(
            e.contains("0000:3b:00.0 is bound to ixgbe, not vfio-pci"),
            "{e}"
        );
        assert!(!e.contains("uetctl bind"), "{e}");
        assert!(e.contains("left with ixgbe"), "{e}");
        assert_eq!(t.read("bus/pci/drivers/ixgbe/unbind"), "");
        assert_eq!(
            t.read("bus/pci/devices/0000:3b:00.0/driver_override"),
            "(null)\n"
        );
    }
}
