//! The lab: emulated hosts as real processes (DESIGN.md §7).
pub mod devhost;
pub mod figures;
pub mod gps;
pub mod lab;
pub mod plot;
pub mod procs;
pub mod redox_kit;
pub mod signals;
pub mod tap;
pub mod vm;
