#![no_main]
//! See redox_ptp_fuzz::mgmt_tlv.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::mgmt_tlv(data));
