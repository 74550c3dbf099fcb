#![no_main]
//! See redox_ptp_fuzz::wire_datagram.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::wire_datagram(data));
