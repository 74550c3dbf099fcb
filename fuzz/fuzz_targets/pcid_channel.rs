#![no_main]
//! See redox_ptp_fuzz::pcid_channel.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::pcid_channel(data));
