#![no_main]
//! See redox_ptp_fuzz::ring_setup.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::ring_setup(data));
