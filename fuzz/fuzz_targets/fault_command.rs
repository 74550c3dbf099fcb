#![no_main]
//! See redox_ptp_fuzz::fault_command.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::fault_command(data));
