#![no_main]
//! See redox_ptp_fuzz::ptpd_config.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::ptpd_config(data));
