#![no_main]
//! See redox_ptp_fuzz::ptp_frame.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::ptp_frame(data));
