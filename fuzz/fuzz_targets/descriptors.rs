#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uet_fuzz::descriptors::run(data));
