#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uet_fuzz::address_text::run(data));
