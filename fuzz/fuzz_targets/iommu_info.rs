#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uet_fuzz::iommu_info::run(data));
