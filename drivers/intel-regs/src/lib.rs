//! Register maps of the Intel parts redox-ptp drives, named as in the datasheets and in Linux's
//! `igc_regs.h`/`igc_defines.h` and `e1000_regs.h`/`e1000_defines.h`.
//!
//! One module per family, each re-exporting [`e1000`], the registers and bits both families
//! have in common, so `igc::CTRL` and `igb::CTRL` are the same constant. The driver
//! (`intel-common`, `igcd`, `igbd`) and the device models (`ptp-emu`) both use these
//! constants, so an offset is written once; behaviour is not shared —
//! each side implements it from the reference (`shared/reference/intel-timesync.md`).
//! Registers whose bits carry meaning are typed ([`fields`]): the offset `reg::CTRL` holds a
//! [`fields::Ctrl`], so a bit of one register cannot be written to another.

#![no_std]

pub mod e1000;
pub mod fields;
pub mod ids;
pub mod igb;
pub mod igc;
