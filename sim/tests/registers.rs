//! BAR0 behaviour: reset values, access kinds, bad accesses, enable and reset.

mod common;

use common::*;
use uet_regs::*;
use uet_sim::{Fabric, NicConfig};

#[test]
fn every_register_reads_its_reset_value() {
    let fabric = Fabric::new();
    let f = fabric.add_nic(NicConfig::new(addr("10.0.0.1"))).unwrap();
    for r in REGISTERS {
        let v = match r.width {
            Width::W32 => u64::from(f.read32(r.offset)),
            Width::W64 => f.read64(r.offset),
        };
        assert_eq!(v, r.reset, "{}", r.name);
    }
    assert_eq!(f.counter(BAD_REGISTER_ACCESSES), 0);
}

#[test]
fn access_kinds_are_enforced() {
    let fabric = Fabric::new();
    let f = fabric.add_nic(NicConfig::new(addr("10.0.0.1"))).unwrap();
    // RO: ignored.
    f.write32(ID.offset(), 0);
    assert_eq!(f.read32(ID.offset()), ID.info.reset as u32);
    f.write32(DEV_STATUS.offset(), 0xFFFF_FFFF);
    assert_eq!(f.read32(DEV_STATUS.offset()), 1);
    f.write64(TX_PACKETS.offset(), 77);
    assert_eq!(f.counter(TX_PACKETS), 0);
    // RW with reserved bits: only defined bits stick.
    f.write32(INTR_MASK.offset(), 0xFFFF_FFFF);
    assert_eq!(f.read32(INTR_MASK.offset()), 0x7);
    f.write32(ADMIN_QUEUE_SIZE.offset(), 0xFFFF_FFFF);
    assert_eq!(f.read32(ADMIN_QUEUE_SIZE.offset()), 0xFFFF);
    f.write64(ADMIN_SQ_BASE.offset(), 0x1234_5678_9ABC_DFFF);
    assert_eq!(f.read64(ADMIN_SQ_BASE.offset()), 0x1234_5678_9ABC_D000);
    // 32-bit halves of a 64-bit register.
    f.write32(ADMIN_CQ_BASE.offset(), 0x0000_3000);
    f.write32(ADMIN_CQ_BASE.offset() + 4, 0x1);
    assert_eq!(f.read64(ADMIN_CQ_BASE.offset()), 0x1_0000_3000);
    assert_eq!(f.read32(ADMIN_CQ_BASE.offset() + 4), 1);
    // WO reads 0.
    f.write32(ADMIN_SQ_DOORBELL.offset(), 5);
    assert_eq!(f.read32(ADMIN_SQ_DOORBELL.offset()), 0);
    assert_eq!(
        f.read32(ADMIN_SQ_TAIL.offset()),
        5,
        "latched while disabled"
    );
    assert_eq!(f.read32(FUNCTION_RESET.offset()), 0);
    assert_eq!(f.counter(BAD_REGISTER_ACCESSES), 0);
}

#[test]
fn bad_offsets_read_all_ones_and_count() {
    let fabric = Fabric::new();
    let f = fabric.add_nic(NicConfig::new(addr("10.0.0.1"))).unwrap();
    assert_eq!(f.read32(0x0ffc), u32::MAX);
    assert_eq!(f.read32(0x0002), u32::MAX); // misaligned
    assert_eq!(f.read64(CAP_AV.offset()), u64::MAX); // 64-bit access to a 32-bit register
    assert_eq!(f.read64(0x0204), u64::MAX); // misaligned 64-bit
    f.write32(0x0800, 1);
    f.write32(0x1_0000, 1); // beyond BAR0
    assert_eq!(f.counter(BAD_REGISTER_ACCESSES), 6);
}

#[test]
fn bad_admin_programming_is_fatal_and_w1c_clears() {
    let fabric = Fabric::new();
    let f = fabric.add_nic(NicConfig::new(addr("10.0.0.1"))).unwrap();
    f.write(ADMIN_SQ_BASE, 0x1234); // bits 11:0 are reserved: reads back 4 KiB aligned
    assert_eq!(f.read(ADMIN_SQ_BASE), 0x1000);
    f.write(
        ADMIN_QUEUE_SIZE,
        AdminQueueSize::new().with_sq_log2(4).with_cq_log2(0),
    );
    f.write(DEV_CTRL, DevCtrl::new().with_enable(true));
    let st = f.read(DEV_STATUS);
    assert!(st.fatal() && !st.enabled() && st.ready());
    assert!(f.read(FATAL_ERROR).admin_queue());
    assert!(f.read(INTR_CAUSE).fatal());
    // W1C: writing 0 keeps, writing 1 clears.
    f.write32(FATAL_ERROR.offset(), 0);
    assert!(f.read(FATAL_ERROR).admin_queue());
    f.write(FATAL_ERROR, FatalError::new().with_admin_queue(true));
    assert_eq!(f.read32(FATAL_ERROR.offset()), 0);
    f.write(INTR_CAUSE, Interrupts::new().with_fatal(true));
    assert_eq!(f.read32(INTR_CAUSE.offset()), 0);
    // Still stopped until reset.
    assert!(f.read(DEV_STATUS).fatal());
    f.write(FUNCTION_RESET, FunctionReset::new().with_reset(true));
    for r in REGISTERS {
        let v = match r.width {
            Width::W32 => u64::from(f.read32(r.offset)),
            Width::W64 => f.read64(r.offset),
        };
        assert_eq!(v, r.reset, "{} after reset", r.name);
    }
}

#[test]
fn size_limits_checked_at_enable() {
    for (sq, cq) in [(0u8, 4u8), (4, 16), (13, 4)] {
        let fabric = Fabric::new();
        let f = fabric.add_nic(NicConfig::new(addr("10.0.0.1"))).unwrap();
        f.write(ADMIN_SQ_BASE, 0x1000);
        f.write(ADMIN_CQ_BASE, 0x2000);
        f.write(
            ADMIN_QUEUE_SIZE,
            AdminQueueSize::new().with_sq_log2(sq).with_cq_log2(cq),
        );
        f.write(DEV_CTRL, DevCtrl::new().with_enable(true));
        assert!(f.read(DEV_STATUS).fatal(), "sq {sq} cq {cq}");
    }
}

#[test]
fn capabilities_follow_the_config() {
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(addr("10.0.0.1"));
    cfg.av_tables = 3;
    cfg.endpoints = 5;
    cfg.mtu = 1024;
    cfg.max_msg = 64 * 1024;
    let f = fabric.add_nic(cfg).unwrap();
    assert_eq!(f.read(CAP_AV).max_tables(), 3);
    assert_eq!(f.read(CAP_EP).max_endpoints(), 5);
    assert_eq!(f.read(CAP_PROFILES).mtu(), 1024);
    assert_eq!(f.read(CAP_MAX_MSG), 64 * 1024);
    assert_eq!(f.read(REVISION).interface_minor(), INTERFACE_MINOR);
    assert_eq!(f.read(CAP_AUTH_KEY).slots(), 64);
    let mut small = NicConfig::new(addr("10.0.0.4"));
    small.auth_key_slots = 3;
    assert_eq!(fabric.add_nic(small).unwrap().read(CAP_AUTH_KEY).slots(), 3);
    let mut too_many = NicConfig::new(addr("10.0.0.5"));
    too_many.auth_key_slots = 257;
    assert!(fabric.add_nic(too_many).is_err());
    let reference = fabric.add_nic(NicConfig::new(addr("10.0.0.3"))).unwrap();
    assert_eq!(reference.read(CAP_MAX_MSG), 0x0010_0000);
    assert!(
        fabric.add_nic(NicConfig::new(addr("10.0.0.1"))).is_err(),
        "duplicate address"
    );
    let mut bad = NicConfig::new(addr("10.0.0.2"));
    bad.pid_count = 4096;
    assert!(fabric.add_nic(bad).is_err());
    for (mtu, max_msg) in [(1024, 1023), (4096, (1 << 30) + 1), (16384, 1 << 20)] {
        let mut bad = NicConfig::new(addr("10.0.0.2"));
        bad.mtu = mtu;
        bad.max_msg = max_msg;
        assert!(fabric.add_nic(bad).is_err(), "mtu {mtu} max_msg {max_msg}");
    }
}

#[test]
fn doorbells_wait_for_enable_and_reset_keeps_dma() {
    let fabric = Fabric::new();
    let mut d = Driver::new(&fabric, "10.0.0.1");
    assert!(d.f.read(DEV_STATUS).enabled());
    // Disable: a command stays pending until re-enabled.
    d.f.write(DEV_CTRL, DevCtrl::new());
    assert!(!d.f.read(DEV_STATUS).enabled());
    d.f.write(DEV_CTRL, DevCtrl::new().with_enable(true));
    assert_eq!(d.av_create(16, 0), Ok(1));
    // Reset destroys objects but not DMA mappings: after re-enabling, commands run again.
    d.f.write(FUNCTION_RESET, FunctionReset::new().with_reset(true));
    assert!(!d.f.read(DEV_STATUS).enabled());
    assert_eq!(d.f.counter(ADMIN_COMMANDS), 0);
    d.enable();
    assert_eq!(d.av_create(16, 0), Ok(1), "handle 1 is free again");
    assert_eq!(d.f.counter(ADMIN_COMMANDS), 1);
}

#[test]
fn dma_map_rules() {
    use std::os::fd::AsFd;
    let fabric = Fabric::new();
    let f = fabric.add_nic(NicConfig::new(addr("10.0.0.1"))).unwrap();
    let m = DmaMem::new(0x4000, 0);
    let fd = m.fd.as_fd();
    assert!(f.dma_map(0x1000, 0, fd, 0).is_err(), "zero length");
    assert!(f.dma_map(0x1001, 0x1000, fd, 0).is_err(), "unaligned iova");
    assert!(f.dma_map(0x1000, 0x800, fd, 0).is_err(), "unaligned length");
    assert!(
        f.dma_map(0x1000, 0x8000, fd, 0).is_err(),
        "past end of file"
    );
    f.dma_map(0x10000, 0x2000, fd, 0).unwrap();
    assert!(f.dma_map(0x11000, 0x1000, fd, 0x2000).is_err(), "overlap");
    assert!(
        f.dma_map(0xF000, 0x2000, fd, 0x2000).is_err(),
        "overlap from below"
    );
    f.dma_map(0x12000, 0x2000, fd, 0x2000).unwrap();
    assert!(f.dma_unmap(0x10000, 0x1000).is_err(), "cuts a mapping");
    assert!(f.dma_unmap(0x40000, 0x1000).is_err(), "nothing mapped");
    f.dma_unmap(0x10000, 0x4000).unwrap();
    f.dma_map(0x10000, 0x4000, fd, 0).unwrap();
}

/// The IOMMU holds at most `dma_mappings` mappings: the next map is refused, and one
/// unmapped makes room again; a reset keeps the limit, as it keeps the mappings.
#[test]
fn dma_maps_past_the_iommus_limit_are_refused() {
    use std::os::fd::AsFd;
    let fabric = Fabric::new();
    let mut cfg = NicConfig::new(addr("10.0.0.1"));
    assert_eq!(cfg.dma_mappings, uet_sim::config::DEFAULT_DMA_MAPPINGS);
    cfg.dma_mappings = 3;
    let f = fabric.add_nic(cfg).unwrap();
    let m = DmaMem::new(0x4000, 0);
    let fd = m.fd.as_fd();
    for k in 0..3 {
        f.dma_map(0x10000 * (k + 1), 0x1000, fd, 0).unwrap();
    }
    assert!(matches!(
        f.dma_map(0x40000, 0x1000, fd, 0),
        Err(uet_sim::SimError::TooManyMappings { limit: 3 })
    ));
    f.dma_unmap(0x20000, 0x1000).unwrap();
    f.dma_map(0x40000, 0x1000, fd, 0).unwrap();
    f.dma_unmap_all();
    for k in 0..3 {
        f.dma_map(0x10000 * (k + 1), 0x1000, fd, 0).unwrap();
    }
    assert!(
        f.dma_map(0x40000, 0x1000, fd, 0).is_err(),
        "the limit stays"
    );
    let mut zero = NicConfig::new(addr("10.0.0.2"));
    zero.dma_mappings = 0;
    assert!(fabric.add_nic(zero).is_err(), "a NIC that maps nothing");
}

#[test]
fn av_doorbell_for_no_table_is_dropped_and_counted() {
    let fabric = Fabric::new();
    let f = fabric.add_nic(NicConfig::new(addr("10.0.0.1"))).unwrap();
    f.write(
        AV_INVALIDATE_DOORBELL,
        AvInvalidateDoorbell::new().with_av(7).with_index(3),
    );
    f.write(
        AV_INVALIDATE_DOORBELL,
        AvInvalidateDoorbell::new().with_av(0).with_index(u32::MAX),
    );
    f.write(
        AV_WRITE_DOORBELL,
        AvWriteDoorbell::new().with_av(7).with_index(0),
    );
    assert_eq!(f.read64(AV_INVALIDATE_DROPS.offset()), 2);
    assert_eq!(f.read64(AV_WRITE_DROPS.offset()), 1);
    assert_eq!(f.read64(AV_INVALIDATE_DOORBELL.offset()), 0, "write-only");
    f.write(AV_WRITE_ENTRY_3, 0x1234_5678_9abc_def0);
    assert_eq!(f.read64(AV_WRITE_ENTRY_3.offset()), 0, "write-only");
}
