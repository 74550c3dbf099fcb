#![no_main]
//! See redox_ptp_fuzz::proxy_proto.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::proxy_proto(data));
