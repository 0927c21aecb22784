//! The register reference table, generated from [`crate::REGISTERS`].

use crate::REGISTERS;
use std::fmt::Write;

/// Render the register map as the Markdown reference table checked in as `regs/REGISTERS.md`.
pub fn registers_markdown() -> String {
    let mut out = String::new();
    out.push_str("# uet-nic BAR0 register reference\n\n");
    out.push_str(
        "Generated from `regs/src/map.rs` by `uet_regs::registers_markdown()`; do not edit by hand.\n\
         Regenerate with `UET_BLESS=1 cargo test -p uet-regs`.\n\n\
         BAR0 is 16 KiB: the registers in the first 4 KiB (`REGISTERS_SIZE`; a device older than \
         interface 1.12 has only those), then the MSI-X table at `0x2000` and its pending bits at `0x3000` \
         (`uet_regs::pci`), each in a page of its own. Little-endian, naturally aligned 32/64-bit accesses. \
         Reserved bits read 0 and \
         ignore writes. An offset with no register reads all ones, and so does a register newer than the device's \
         interface (`REVISION.interface_minor` below the register's *since*). Capability reset values are those \
         of the reference model; a device reports its own.\n\n",
    );
    out.push_str("## Summary\n\n| offset | name | width | access | reset | section | since |\n|---|---|---|---|---|---|---|\n");
    for r in REGISTERS {
        let _ = writeln!(
            out,
            "| `{:#06x}` | [`{}`](#{}) | {} | {} | `{:#x}` | {} | 1.{} |",
            r.offset,
            r.name,
            r.name.to_ascii_lowercase(),
            r.width.bytes() * 8,
            r.access.abbrev(),
            r.reset,
            r.section,
            r.since_minor
        );
    }
    out.push_str("\n## Registers\n");
    for r in REGISTERS {
        let _ = write!(
            out,
            "\n### {}\n\n`{:#06x}`, {}-bit, {}, reset `{:#x}`, since interface 1.{}.\n\n",
            r.name,
            r.offset,
            r.width.bytes() * 8,
            r.access.abbrev(),
            r.reset,
            r.since_minor
        );
        for line in r.doc.lines() {
            out.push_str(line.trim());
            out.push('\n');
        }
        out.push_str("\n| bits | field | description |\n|---|---|---|\n");
        for f in r.fields {
            let bits = if f.bits == 1 {
                format!("{}", f.lsb)
            } else {
                format!("{}:{}", f.lsb + f.bits - 1, f.lsb)
            };
            let _ = writeln!(out, "| {} | `{}` | {} |", bits, f.name, f.doc);
        }
    }
    out
}
