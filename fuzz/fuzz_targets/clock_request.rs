#![no_main]
//! See redox_ptp_fuzz::clock_request.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::clock_request(data));
