//! NVM, semaphores and PHY power management: the registers Linux's igc probe touches before it
//! reaches the MAC (qemu-proxy.md "What Linux's igc driver needs to probe").
//!
//! - EECD (Linux igc_defines.h): PRES b8 and AUTO_RD b9 read as set, read-only; FLASH_DETECTED
//!   b19 reads clear: the model advertises no flash, so igc takes the iNVM path, whose
//!   checksum check is a no-op (igc_i225.c igc_init_nvm_params_i225) and reads the MAC from
//!   RAL0/RAH0. EECD = 0x300 probes (qemu-proxy.md, checked on QEMU with Linux 6.1).
//! - EERD (0x12014, Linux igc_nvm.c/igc_i225.c igc_read_nvm_srrd_i225): a write with START
//!   b0 reads the shadow-RAM word at b15:2 at once, DONE b1 set and the word in b31:16. The
//!   shadow holds the MAC in words 0–2 and a checksum in word 0x3F that makes words 0..=0x3F
//!   sum to 0xBABA (IGC_NVM_SUM); other words read 0, words past 0x3F read 0xFFFF \[U\].
//! - SWSM (0x5B50, Linux igc_i225.c igc_get_hw_semaphore_i225): a read returns SMBI b0 and then
//!   sets it (the driver owns the semaphore once it read it clear); SWESMBI b1 latches when
//!   written, since no firmware holds it; writing 0 releases both.
//! - PHPM (0x0E14, Linux igc_phy.c igc_phy_hw_reset): PHY_RST_COMP b8 reads as set (the model's
//!   PHY reset completes at once); the other bits are storage.

use intel_regs::igc::{eecd, eerd, phpm, swsm};

/// Shadow-RAM words the model holds (0..=0x3F: the checksummed area).
const NVM_WORDS: usize = 0x40;
/// Checksum target of words 0..=0x3F (Linux igc_defines.h NVM_SUM).
pub(crate) const NVM_SUM: u16 = 0xBABA;

/// The shadow RAM, loaded from the NVM MAC.
#[derive(Debug, Clone)]
pub(crate) struct Nvm {
    words: [u16; NVM_WORDS],
    eerd: u32,
}

impl Nvm {
    pub(crate) fn new(mac: [u8; 6]) -> Self {
        let mut words = [0u16; NVM_WORDS];
        for (i, w) in words.iter_mut().take(3).enumerate() {
            *w = u16::from_le_bytes([mac[2 * i], mac[2 * i + 1]]);
        }
        let sum = words[..NVM_WORDS - 1]
            .iter()
            .fold(0u16, |a, &w| a.wrapping_add(w));
        words[NVM_WORDS - 1] = NVM_SUM.wrapping_sub(sum);
        Self { words, eerd: 0 }
    }

    /// EERD write: a START reads the word at once.
    pub(crate) fn write_eerd(&mut self, v: u32) {
        if v & eerd::START == 0 {
            self.eerd = v & !eerd::DONE;
            return;
        }
        let addr = ((v >> eerd::ADDR_SHIFT) & 0x3FFF) as usize;
        let word = self.words.get(addr).copied().unwrap_or(0xFFFF);
        self.eerd =
            (word as u32) << eerd::DATA_SHIFT | (addr as u32) << eerd::ADDR_SHIFT | eerd::DONE;
    }

    pub(crate) fn eerd(&self) -> u32 {
        self.eerd
    }
}

/// EECD as read: PRES and AUTO_RD always set, FLASH_DETECTED never.
pub(crate) fn eecd_value(stored: u32) -> u32 {
    (stored & !eecd::FLASH_DETECTED) | eecd::PRES | eecd::AUTO_RD
}

/// SWSM read: (value returned, value left behind).
pub(crate) fn swsm_read(stored: u32) -> (u32, u32) {
    (stored, stored | swsm::SMBI)
}

/// SWSM write: only the two semaphore bits are kept.
pub(crate) fn swsm_write(v: u32) -> u32 {
    v & (swsm::SMBI | swsm::SWESMBI)
}

/// PHPM as read: the PHY reset is always complete.
pub(crate) fn phpm_value(stored: u32) -> u32 {
    stored | phpm::RST_COMP
}
