#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uet_fuzz::admin_commands::run_any_interface(data));
