//! Config space through a file: sysfs `config` (UIO) or the VFIO device's config region.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::config::offsets::COMMAND_STATUS;

/// COMMAND bit 1: memory space decoding.
pub const COMMAND_MEMORY: u16 = 1 << 1;
/// COMMAND bit 2: bus master (the device may do DMA).
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// COMMAND bit 10: INTx disable (uio_pci_generic's handler sets it; we clear it to re-arm).
pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;

/// A function's config space as a file at `base`.
#[derive(Debug)]
pub struct ConfigSpace {
    file: Arc<File>,
    base: u64,
}

impl ConfigSpace {
    pub fn new(file: Arc<File>, base: u64) -> Self {
        Self { file, base }
    }

    pub fn read32(&self, offset: u16) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        self.file
            .read_exact_at(&mut b, self.base + u64::from(offset))?;
        Ok(u32::from_le_bytes(b))
    }

    pub fn write32(&self, offset: u16, value: u32) -> std::io::Result<()> {
        self.file
            .write_all_at(&value.to_le_bytes(), self.base + u64::from(offset))
    }

    /// COMMAND alone: a 32-bit write would also hit STATUS, whose error bits clear on a 1.
    pub fn command(&self) -> std::io::Result<u16> {
        let mut b = [0u8; 2];
        self.file
            .read_exact_at(&mut b, self.base + u64::from(COMMAND_STATUS))?;
        Ok(u16::from_le_bytes(b))
    }

    pub fn set_command(&self, value: u16) -> std::io::Result<()> {
        self.file
            .write_all_at(&value.to_le_bytes(), self.base + u64::from(COMMAND_STATUS))
    }

    /// Sets or clears `bits` in COMMAND (read-modify-write).
    pub fn update_command(&self, bits: u16, on: bool) -> std::io::Result<()> {
        let cmd = self.command()?;
        let new = if on { cmd | bits } else { cmd & !bits };
        if new != cmd {
            self.set_command(new)?;
        }
        Ok(())
    }

    /// Bus mastering on or off; failures are logged (used on teardown paths too).
    pub fn set_bus_master(&self, on: bool) {
        if let Err(e) = self.update_command(COMMAND_BUS_MASTER, on) {
            log::error!("config COMMAND bus master {on}: {e}");
        }
    }
}
