#![no_main]
//! See redox_ptp_fuzz::rx_ts_header.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::rx_ts_header(data));
