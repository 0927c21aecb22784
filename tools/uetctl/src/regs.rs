//! `uetctl regs`: a NIC's BAR0, register by register, decoded field by field.
//!
//! Every register of `uet_regs::REGISTERS` is read through the driver's `Mmio` (no register has
//! a read side effect, so this is safe on a running NIC). Write-only registers (doorbells,
//! commands) read as zero and are listed as `WO`.

use serde_json::{json, Value};
use std::fmt::Write;
use uet_driver::uet_regs::{read_registers, Access, Mmio, RegInfo};

/// One register read back.
#[derive(Clone, Debug)]
pub struct RegValue {
    /// The register.
    pub info: &'static RegInfo,
    /// Its value.
    pub value: u64,
}

impl RegValue {
    /// The value of each field: (name, value).
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        self.info
            .fields
            .iter()
            .map(|f| (f.name, (self.value & f.mask()) >> f.lsb))
            .collect()
    }
}

/// Every register the NIC's interface version has, read back (`uet_regs::read_registers`).
pub fn read_all(bar: &dyn Mmio) -> Vec<RegValue> {
    read_registers(bar)
        .into_iter()
        .map(|(info, value)| RegValue { info, value })
        .collect()
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
        let fields = if r.info.fields.len() > 1 && r.info.access != Access::Wo {
            r.fields()
                .iter()
                .map(|(n, v)| format!("{n}={v:#x}"))
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            String::new()
        };
        let value = if r.info.access == Access::Wo {
            "-".to_string()
        } else {
            format!("{:#x}", r.value)
        };
        let _ = writeln!(
            out,
            "{:<8} {:<24} {:<6} {:>18}  {}",
            format!("{:#06x}", r.info.offset),
            r.info.name,
            r.info.access.abbrev(),
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

/// The registers as JSON: name → {offset, access, value, fields}.
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
                    "name": r.info.name,
                    "offset": r.info.offset,
                    "access": r.info.access.abbrev(),
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
        let regs = read_all(nic.bar0());
        assert_eq!(regs.len(), REGISTERS.len());
        let get = |name: &str| regs.iter().find(|r| r.info.name == name).unwrap();
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

    #[test]
    fn an_older_nic_is_dumped_without_the_registers_it_lacks() {
        let fabric = uet_sim::Fabric::new();
        let mut cfg = uet_sim::NicConfig::new("10.9.9.8".parse().unwrap());
        cfg.interface_minor = 7;
        let nic = Nic::open(Arc::new(SimDevice::new(fabric.add_nic(cfg).unwrap()))).unwrap();
        let regs = read_all(nic.bar0());
        let names: Vec<&str> = regs.iter().map(|r| r.info.name).collect();
        assert!(names.contains(&"CAP_PEER_GROUPS") && names.contains(&"TX_BAD_GROUP"));
        for absent in [
            "AV_WRITE_ENTRY_0",
            "AV_WRITE_DOORBELL",
            "AV_WRITE_DROPS",
            "TX_MSG_TOO_LONG",
        ] {
            assert!(!names.contains(&absent), "{absent} listed");
        }
        let get = |name: &str| regs.iter().find(|r| r.info.name == name).unwrap();
        assert_eq!(get("REVISION").fields()[2], ("interface_minor", 7));
        assert_eq!(
            get("BAD_REGISTER_ACCESSES").value,
            0,
            "nothing absent was read"
        );
    }
}
