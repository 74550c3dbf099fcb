//! Typed IPC for redox-ptp (DESIGN.md §2).
pub mod msg;
pub use msg::*;
