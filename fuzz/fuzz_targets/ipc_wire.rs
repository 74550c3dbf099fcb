#![no_main]
//! See redox_ptp_fuzz::ipc_wire.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redox_ptp_fuzz::ipc_wire(data));
