//! `uetctl regs`: a NIC's BAR0, register by register, decoded field by field.
//!
//! Every register of `uet_regs::REGISTERS` is read through the driver's `Mmio` (no register has
//! a read side effect, so this is safe on a running NIC). Write-only registers (doorbells,
//! commands) read as zero and are listed as `WO`.

use serde_json::{json, Value};
use std::fmt::Write;
use uet_driver::uet_regs::{
    read_registers, Access, Id, Mmio, RegInfo, RegisterAccess, Revision, ID, INTERFACE_MAJOR,
    PCI_DEVICE_ID, PCI_VENDOR_ID, REVISION,
};

/// One register read back.
#[derive(Clone, Debug)]
pub struct RegValue {
    /// Its offset in BAR0.
    pub offset: u32,
    /// Its definition: `None` for a register this uetctl's map does not have, which a live
    /// process's driver (of a later minor version of the interface) read and sent.
    pub info: Option<&'static RegInfo>,
    /// Its value.
    pub value: u64,
}

impl RegValue {
    /// A register of the map, read back.
    pub fn known(info: &'static RegInfo, value: u64) -> Self {
        RegValue {
            offset: info.offset,
            info: Some(info),
            value,
        }
    }

    /// Its name in the map, if the map has it.
    pub fn name(&self) -> Option<&'static str> {
        self.info.map(|i| i.name)
    }

    /// The value of each field: (name, value). None for a register the map does not have.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        self.info
            .map(|i| i.fields)
            .unwrap_or_default()
            .iter()
            .map(|f| (f.name, (self.value & f.mask()) >> f.lsb))
            .collect()
    }

    /// Whether it is write-only (reads as zero, shown as `-`).
    fn write_only(&self) -> bool {
        self.info.is_some_and(|i| i.access == Access::Wo)
    }
}

/// Every register the NIC's interface version has, read back (`uet_regs::read_registers`).
/// An error, as the driver's open refuses the function, when the BAR is no uet-nic's to
/// decode ([`check_identity`]).
pub fn read_all(bar: &dyn Mmio) -> Result<Vec<RegValue>, String> {
    check_identity(bar.read(ID), bar.read(REVISION))?;
    Ok(read_registers(bar)
        .into_iter()
        .map(|(info, value)| RegValue::known(info, value))
        .collect())
}

/// Whether a BAR whose `ID` reads `id` and `REVISION` `revision` is a uet-nic's to decode
/// with this map: an error saying what was read when `ID` reads all ones (nothing answers:
/// the function was removed, is in reset or its link is down), names another device, or
/// `REVISION` another interface major version, whose registers this map does not describe.
pub fn check_identity(id: Id, revision: Revision) -> Result<(), String> {
    if id.into_bits() == u32::MAX {
        return Err(
            "BAR0 reads all ones: the function does not answer (removed, in reset, \
                    or its link is down)"
                .to_string(),
        );
    }
    if id.vendor_id() != PCI_VENDOR_ID || id.device_id() != PCI_DEVICE_ID {
        return Err(format!(
            "not a uet-nic function: its ID register reads vendor {:#06x} device {:#06x} \
             ({PCI_VENDOR_ID:#06x}:{PCI_DEVICE_ID:#06x} expected)",
            id.vendor_id(),
            id.device_id()
        ));
    }
    let major = revision.interface_major();
    if major != INTERFACE_MAJOR {
        return Err(format!(
            "host interface {major}.x, whose registers uetctl does not know (it reads \
             {INTERFACE_MAJOR}.x)"
        ));
    }
    Ok(())
}

/// The registers as an aligned table; fields of multi-field registers decoded.
pub fn render_text(title: &str, regs: &[RegValue]) -> String {
    let mut out = format!("{title}\n");
    let _ = writeln!(
        out,
        "{:<8} {:<24} {:<6} {:>18}  FIELDS",
        "OFFSET", "REGISTER", "ACCESS", "VALUE"
    );
    for r in regs {
        let fields = match r.info {
            Some(info) if info.fields.len() > 1 && !r.write_only() => r
                .fields()
                .iter()
                .map(|(n, v)| format!("{n}={v:#x}"))
                .collect::<Vec<_>>()
                .join(" "),
            Some(_) => String::new(),
            None => "(not in this uetctl's register map)".to_string(),
        };
        let value = if r.write_only() {
            "-".to_string()
        } else {
            format!("{:#x}", r.value)
        };
        let _ = writeln!(
            out,
            "{:<8} {:<24} {:<6} {:>18}  {}",
            format!("{:#06x}", r.offset),
            r.name().unwrap_or("?"),
            r.info.map_or("?", |i| i.access.abbrev()),
            value,
            fields
        );
    }
    // Trim trailing spaces of rows without fields.
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The registers as JSON: {name, offset, access, value, fields}, `name` and `access` null
/// for a register the map does not have.
pub fn render_json(regs: &[RegValue]) -> Value {
    Value::Array(
        regs.iter()
            .map(|r| {
                let fields: serde_json::Map<String, Value> = r
                    .fields()
                    .into_iter()
                    .map(|(n, v)| (n.to_string(), json!(v)))
                    .collect();
                json!({
                    "name": r.name(),
                    "offset": r.offset,
                    "access": r.info.map(|i| i.access.abbrev()),
                    "value": r.value,
                    "fields": fields,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use uet_driver::backend::sim::SimDevice;
    use uet_driver::uet_regs::REGISTERS;
    use uet_driver::Nic;

    #[test]
    fn a_running_nic_reads_back_enabled_and_identified() {
        let fabric = uet_sim::Fabric::new();
        let f = fabric
            .add_nic(uet_sim::NicConfig::new("10.9.9.9".parse().unwrap()))
            .unwrap();
        let nic = Nic::open(Arc::new(SimDevice::new(f))).unwrap();
        let regs = read_all(nic.bar0()).unwrap();
        assert_eq!(regs.len(), REGISTERS.len());
        let get = |name: &str| regs.iter().find(|r| r.name() == Some(name)).unwrap();
        assert_eq!(get("ID").value, 0x0001_fffe);
        assert!(get("DEV_STATUS").fields().contains(&("enabled", 1)));
        assert!(get("ADMIN_COMMANDS").value >= 1, "IDENTIFY ran");
        assert_eq!(get("BAD_REGISTER_ACCESSES").value, 0);
        let text = render_text("nic", &regs);
        assert!(text.contains("DEV_CTRL"), "{text}");
        assert!(text.contains("vendor_id=0xfffe device_id=0x1"), "{text}");
        let json = render_json(&regs);
        assert_eq!(json[0]["name"], "ID");
        assert_eq!(json[0]["fields"]["vendor_id"], 0xfffe);
    }

    /// A BAR whose every read gives `value`, but `ID` and `REVISION`, which give theirs.
    struct Answering {
        id: u32,
        revision: u32,
        value: u32,
    }

    impl Mmio for Answering {
        fn read32(&self, offset: u32) -> u32 {
            match offset {
                0 => self.id,
                4 => self.revision,
                _ => self.value,
            }
        }
        fn write32(&self, _: u32, _: u32) {}
        fn read64(&self, offset: u32) -> u64 {
            u64::from(self.read32(offset)) | u64::from(self.read32(offset + 4)) << 32
        }
        fn write64(&self, _: u32, _: u64) {}
    }

    /// A function that reads all ones (gone, in reset), another device's, or one of another
    /// interface major version is refused with what it read, not decoded as a uet-nic's.
    #[test]
    fn a_bar_that_is_no_uet_nics_is_refused_not_decoded() {
        let ours = 0x0001_fffe;
        let revision = u32::from(INTERFACE_MAJOR) << 8 | 7 << 16;
        assert_eq!(
            uet_driver::uet_regs::Revision::from_bits(revision).interface_major(),
            INTERFACE_MAJOR
        );
        let gone = Answering {
            id: u32::MAX,
            revision: u32::MAX,
            value: u32::MAX,
        };
        let e = read_all(&gone).unwrap_err();
        assert!(e.contains("all ones"), "{e}");
        let other = Answering {
            id: 0x1234_8086,
            revision,
            value: 0,
        };
        let e = read_all(&other).unwrap_err();
        assert!(e.contains("0x8086") && e.contains("0x1234"), "{e}");
        let newer = Answering {
            id: ours,
            revision: revision + (1 << 8),
            value: 0,
        };
        let e = read_all(&newer).unwrap_err();
        assert!(e.contains("2.x"), "{e}");
        let fine = Answering {
            id: ours,
            revision,
            value: 0,
        };
        assert!(!read_all(&fine).unwrap().is_empty());
    }

    #[test]
    fn an_older_nic_is_dumped_without_the_registers_it_lacks() {
        let fabric = uet_sim::Fabric::new();
        let mut cfg = uet_sim::NicConfig::new("10.9.9.8".parse().unwrap());
        cfg.interface_minor = 7;
        let nic = Nic::open(Arc::new(SimDevice::new(fabric.add_nic(cfg).unwrap()))).unwrap();
        let regs = read_all(nic.bar0()).unwrap();
        let names: Vec<&str> = regs.iter().filter_map(RegValue::name).collect();
        assert!(names.contains(&"CAP_PEER_GROUPS") && names.contains(&"TX_BAD_GROUP"));
        for absent in [
            "AV_WRITE_ENTRY_0",
            "AV_WRITE_DOORBELL",
            "AV_WRITE_DROPS",
            "TX_MSG_TOO_LONG",
        ] {
            assert!(!names.contains(&absent), "{absent} listed");
        }
        let get = |name: &str| regs.iter().find(|r| r.name() == Some(name)).unwrap();
        assert_eq!(get("REVISION").fields()[2], ("interface_minor", 7));
        assert_eq!(
            get("BAD_REGISTER_ACCESSES").value,
            0,
            "nothing absent was read"
        );
    }
}
