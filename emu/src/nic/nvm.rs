//! NVM, semaphores and PHY power management: the registers Linux's igc probe touches before it
//! reaches the MAC (qemu-proxy.md "What Linux's igc driver needs to probe"), and the flash
//! path its self-test, `ethtool -e/-E/-i` take.
//!
//! Three NVMs:
//!
//! - [`Nvm::new`] (the flashless igb models: i211, the flashless i210 IDs 0x157B/0x157C, and
//!   the i350/82576, whose EEPROM the model keeps small): a 64-word shadow RAM. EECD reads PRES
//!   b8 and AUTO_RD b9 set, FLASH_DETECTED b19 clear.
//! - [`Nvm::i225_flash`] (the i225/i226): an I225-LM presents its flash (a blank-NVM part has
//!   another device ID, intel-timesync.md §11), so EECD also reads FLASH_DETECTED_I225 b19,
//!   FLUDONE_I225 b26 and SIZE_EX b14:11 (Linux igc_defines.h). igc then takes the flash path:
//!   `nvm.ops.validate` = igc_validate_nvm_checksum_i225, reads through
//!   igc_read_nvm_srrd_i225 (SW_FW_SYNC semaphore, then EERD), word_size =
//!   1 << (SIZE_EX + 6) (igc_base.c igc_init_nvm_params_base), and `ethtool -e` dumps
//!   word_size × 2 bytes (igc_ethtool.c igc_ethtool_get_eeprom_len). The shadow RAM is 4 KiB,
//!   2048 words (Intel's e1000 base code E1000_I225_SHADOW_RAM_SIZE = 4096 bytes; EDK2's
//!   Foxville module MODULE_SHADOW_RAM_SIZE = SIZE_4KB), so SIZE_EX = 5.
//! - [`Nvm::i210_flash`] (the i210 with its flash, 0x1533 and the other flash IDs): the same
//!   EECD bits under igb's names (Linux e1000_defines.h E1000_EECD_FLASH_DETECTED_I210 b19,
//!   E1000_EECD_FLUPD_I210 b23, E1000_EECD_FLUDONE_I210 b26, E1000_EECD_SIZE_EX b14:11). igb
//!   then takes its flash path (e1000_i210.c igb_init_nvm_params_i210: read
//!   igb_read_nvm_srrd_i210, validate igb_validate_nvm_checksum_i210, update
//!   igb_update_nvm_checksum_i210 with FLUPD), word_size = 1 << (SIZE_EX + 6)
//!   (e1000_82575.c igb_init_nvm_params_82575), firmware-version from NVM_VERSION and the
//!   EtrackID words (igb_main.c igb_set_fw_version, e1000_nvm.c igb_get_fw_version). The shadow
//!   RAM is the i225's 4 KiB \[U: the i210 datasheet's size is not in the reference; the I225
//!   is its successor with the same NVM interface\].
//!
//! Registers:
//!
//! - EERD (0x12014 on igc and i210, igc_nvm.c igc_read_nvm_eerd): a write with START b0
//!   reads the shadow-RAM word at b15:2 at once, DONE b1 set and the word in b31:16. Words
//!   past the shadow RAM read 0xFFFF \[U\] (Linux never asks: it bounds reads by word_size).
//! - SRWR (0x12018, igc_i225.c igc_write_nvm_srwr): a write with START stores b31:16 at the
//!   word at b15:2 of the shadow RAM and reads back DONE b1 at once.
//! - EECD.FLUPD_I225 b23 (igc_i225.c igc_update_flash_i225): commits the shadow RAM to the
//!   flash at once; it self-clears and FLUDONE stays set. A port reset reloads the shadow RAM
//!   from the flash \[U: the reset's NVM auto-read\], so words written without a commit are
//!   lost at the next reset.
//! - SWSM (0x5B50, Linux igc_i225.c igc_get_hw_semaphore_i225): a read returns SMBI b0 and then
//!   sets it (the driver owns the semaphore once it read it clear); SWESMBI b1 latches when
//!   written, since no firmware holds it; writing 0 releases both.
//! - PHPM (0x0E14, Linux igc_phy.c igc_phy_hw_reset): PHY_RST_COMP b8 reads as set (the model's
//!   PHY reset completes at once); the other bits are storage.

use intel_regs::igc::{Eecd, eerd, phpm, swsm};

/// The checksummed words: 0..=0x3F (Linux igc_defines.h NVM_CHECKSUM_REG = 0x3F).
const CHECKSUM_WORD: usize = 0x3F;
/// Checksum target of words 0..=0x3F (Linux igc_defines.h NVM_SUM).
pub(crate) const NVM_SUM: u16 = 0xBABA;

/// Shadow-RAM words of the i225 and i210 models (4 KiB, see the module docs).
pub(crate) const I225_WORDS: usize = 2048;
/// EECD.SIZE_EX for [`I225_WORDS`]: 1 << (5 + 6) = 2048.
const I225_SIZE_EX: u32 = 5;

/// NVM word offsets of the image (Linux igb e1000_defines.h / e1000e defines.h names; igc
/// reads word 5 itself).
mod word {
    /// Compatibility (NVM_COMPAT).
    pub(super) const COMPAT: usize = 0x03;
    /// ID LED settings (NVM_ID_LED_SETTINGS); 0xFFFF: use the default LED modes.
    pub(super) const ID_LED: usize = 0x04;
    /// Dev_starter / NVM image version (igc_defines.h IGC_NVM_DEV_STARTER); igc prints it in
    /// hex as the first half of `ethtool -i`'s firmware-version (igc_ethtool_get_drvinfo).
    pub(super) const DEV_STARTER: usize = 0x05;
    /// PBA: guard word, then the pointer to the PBA block (NVM_PBA_OFFSET_0/1).
    pub(super) const PBA_0: usize = 0x08;
    pub(super) const PBA_1: usize = 0x09;
    /// Initialization control 1 (NVM_INIT_CONTROL1_REG).
    pub(super) const INIT_CTRL_1: usize = 0x0A;
    /// Subsystem ID, subsystem vendor, device ID, vendor (NVM_SUB_DEV_ID .. NVM_VEN_ID).
    pub(super) const SUB_DEV_ID: usize = 0x0B;
    pub(super) const SUB_VEN_ID: usize = 0x0C;
    pub(super) const DEV_ID: usize = 0x0D;
    pub(super) const VEN_ID: usize = 0x0E;
    /// Initialization control 2 (NVM_INIT_CONTROL2_REG).
    pub(super) const INIT_CTRL_2: usize = 0x0F;
    /// Initialization control 4, LED 1 and LED 0/2 configuration (NVM_INIT_CTRL_4,
    /// NVM_LED_1_CFG, NVM_LED_0_2_CFG).
    pub(super) const INIT_CTRL_4: usize = 0x13;
    pub(super) const LED_1_CFG: usize = 0x1C;
    pub(super) const LED_0_2_CFG: usize = 0x1F;
    /// Alternate MAC address block pointer (NVM_ALT_MAC_ADDR_PTR); 0xFFFF: none.
    pub(super) const ALT_MAC_PTR: usize = 0x37;
    /// EtrackID low/high (NVM_ETRACK_WORD / NVM_ETRACK_HIWORD).
    pub(super) const ETRACK_LO: usize = 0x42;
    pub(super) const ETRACK_HI: usize = 0x43;
}

/// The PBA guard: word 8 holds it when word 9 points at a PBA block (NVM_PBA_PTR_GUARD).
const PBA_PTR_GUARD: u16 = 0xFAFA;
/// Where the PBA block sits \[U: the pointer seen in public I225 image dumps\].
const PBA_BLOCK: usize = 0x0125;

/// The shadow RAM behind EERD/SRWR and, on a part with flash, the flash it loads from.
#[derive(Debug, Clone)]
pub(crate) struct Nvm {
    /// The shadow RAM the driver reads and writes.
    words: Box<[u16]>,
    /// The flash contents a reset reloads the shadow RAM from.
    flash: Box<[u16]>,
    /// EECD.FLASH_DETECTED and the flash bits: the flash path.
    flash_present: bool,
    eerd: u32,
    srwr: u32,
}

/// `words` with the checksum word set so that words 0..=0x3F sum to [`NVM_SUM`].
fn seal(words: &mut [u16]) {
    let sum = words[..CHECKSUM_WORD]
        .iter()
        .fold(0u16, |a, &w| a.wrapping_add(w));
    words[CHECKSUM_WORD] = NVM_SUM.wrapping_sub(sum);
}

/// The MAC in words 0–2, little-endian pairs (NVM_MAC_ADDR).
fn put_mac(words: &mut [u16], mac: [u8; 6]) {
    for (i, w) in words.iter_mut().take(3).enumerate() {
        *w = u16::from_le_bytes([mac[2 * i], mac[2 * i + 1]]);
    }
}

/// What distinguishes one part's flash image from another's; the layout is shared.
struct ImageWords {
    compat: u16,
    /// Word 5: igc's dev_starter, igb's NVM_VERSION (major b15:12, minor b11:4, image b3:0).
    version: u16,
    init_ctrl_2: u16,
    /// Further (word, value) pairs of the checksummed area.
    extra: &'static [(usize, u16)],
    etrack: u32,
    /// The PBA string (not a real Intel board number).
    pba: &'static [u8; 10],
}

/// The i225 image. Values marked \[U\] are those of public I225 image dumps, not of a
/// datasheet: compatibility 0x0520, init control 2 0x8200, version 0x1057
/// (firmware-version "1057:…"), EtrackID 0x80000182.
const I225_IMAGE: ImageWords = ImageWords {
    compat: 0x0520,
    version: 0x1057,
    init_ctrl_2: 0x8200,
    extra: &[],
    etrack: 0x8000_0182,
    pba: b"EMU225-000",
};

/// The i210 image. Init control 2/4 and the LED words are the defaults Linux igb gives a
/// flashless i211 for them (e1000_i210.h NVM_INIT_CTRL_2_DEFAULT_I211 0x7243,
/// NVM_INIT_CTRL_4_DEFAULT_I211 0x00C1, NVM_LED_1_CFG_DEFAULT_I211 0x0184,
/// NVM_LED_0_2_CFG_DEFAULT_I211 0x200C). Version 0x3160 with EtrackID 0x800004D6 (igb prints
/// "3.16, 0x800004d6", the version commonly reported for i210 boards) and compatibility 0
/// \[U\].
const I210_IMAGE: ImageWords = ImageWords {
    compat: 0x0000,
    version: 0x3160,
    init_ctrl_2: 0x7243,
    extra: &[
        (word::INIT_CTRL_4, 0x00C1),
        (word::LED_1_CFG, 0x0184),
        (word::LED_0_2_CFG, 0x200C),
    ],
    etrack: 0x8000_04D6,
    pba: b"EMU210-000",
};

/// A flash image: the words a real image carries, with `p`'s values.
fn flash_image(mac: [u8; 6], device_id: u16, p: &ImageWords) -> Box<[u16]> {
    // Unprogrammed flash reads all ones \[U\]; the checksummed words the model gives no value
    // read 0.
    let mut w = vec![0xFFFFu16; I225_WORDS];
    w[..=CHECKSUM_WORD].fill(0);
    put_mac(&mut w, mac);
    w[word::COMPAT] = p.compat;
    w[word::ID_LED] = 0xFFFF;
    w[word::DEV_STARTER] = p.version;
    w[word::PBA_0] = PBA_PTR_GUARD;
    w[word::PBA_1] = PBA_BLOCK as u16;
    w[word::INIT_CTRL_1] = 0x0000;
    w[word::SUB_DEV_ID] = 0x0000;
    w[word::SUB_VEN_ID] = 0x8086;
    w[word::DEV_ID] = device_id;
    w[word::VEN_ID] = 0x8086;
    w[word::INIT_CTRL_2] = p.init_ctrl_2;
    for &(i, v) in p.extra {
        w[i] = v;
    }
    w[word::ALT_MAC_PTR] = 0xFFFF;
    w[word::ETRACK_LO] = p.etrack as u16;
    w[word::ETRACK_HI] = (p.etrack >> 16) as u16;
    // PBA block (e1000 igb_read_part_string): its length in words (itself included), then
    // the string, two characters a word, the first in the high byte.
    let chars: Vec<u16> = p
        .pba
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    w[PBA_BLOCK] = chars.len() as u16 + 1;
    w[PBA_BLOCK + 1..PBA_BLOCK + 1 + chars.len()].copy_from_slice(&chars);
    seal(&mut w);
    w.into_boxed_slice()
}

impl Nvm {
    /// No flash (the igb models): 64 words, the MAC in words 0–2, the checksum in word 0x3F,
    /// other words 0; words past 0x3F read 0xFFFF \[U\].
    pub(crate) fn new(mac: [u8; 6]) -> Self {
        let mut w = vec![0u16; CHECKSUM_WORD + 1];
        put_mac(&mut w, mac);
        seal(&mut w);
        Self::from_image(w.into_boxed_slice(), false)
    }

    /// The i225/i226 flash (module docs): [`I225_WORDS`] words of shadow RAM holding the MAC,
    /// the PBA, the init control and version words, the IDs and the checksum.
    pub(crate) fn i225_flash(mac: [u8; 6], device_id: u16) -> Self {
        Self::from_image(flash_image(mac, device_id, &I225_IMAGE), true)
    }

    /// The i210's flash (module docs): the same layout with the i210's words.
    pub(crate) fn i210_flash(mac: [u8; 6], device_id: u16) -> Self {
        Self::from_image(flash_image(mac, device_id, &I210_IMAGE), true)
    }

    fn from_image(image: Box<[u16]>, flash_present: bool) -> Self {
        Self {
            words: image.clone(),
            flash: image,
            flash_present,
            eerd: 0,
            srwr: 0,
        }
    }

    /// Shadow-RAM words.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.words.len()
    }

    /// The shadow-RAM word at `addr` (0xFFFF past the end).
    pub(crate) fn word(&self, addr: usize) -> u16 {
        self.words.get(addr).copied().unwrap_or(0xFFFF)
    }

    /// EERD write: a START reads the word at once.
    pub(crate) fn write_eerd(&mut self, v: u32) {
        if v & eerd::START == 0 {
            self.eerd = v & !eerd::DONE;
            return;
        }
        let addr = (v >> eerd::ADDR_SHIFT) & 0x3FFF;
        let w = self.word(addr as usize);
        self.eerd = u32::from(w) << eerd::DATA_SHIFT | addr << eerd::ADDR_SHIFT | eerd::DONE;
    }

    pub(crate) fn eerd(&self) -> u32 {
        self.eerd
    }

    /// SRWR write: a START stores the word at once (writes past the shadow RAM are dropped
    /// but still complete \[U\]).
    pub(crate) fn write_srwr(&mut self, v: u32) {
        if v & eerd::START == 0 {
            self.srwr = v & !eerd::DONE;
            return;
        }
        let addr = (v >> eerd::ADDR_SHIFT) & 0x3FFF;
        if let Some(w) = self.words.get_mut(addr as usize) {
            *w = (v >> eerd::DATA_SHIFT) as u16;
        }
        self.srwr = (v & !eerd::START) | eerd::DONE;
    }

    pub(crate) fn srwr(&self) -> u32 {
        self.srwr
    }

    /// The bits EECD reads as whatever was written: PRES, AUTO_RD, FLASH_DETECTED and, with
    /// flash, SIZE_EX, FLUPD and FLUDONE are the hardware's.
    fn eecd_hw_bits(&self) -> Eecd {
        let base = Eecd::PRES | Eecd::AUTO_RD | Eecd::FLASH_DETECTED;
        if self.flash_present {
            base | Eecd::SIZE_EX_MASK | Eecd::FLUPD | Eecd::FLUDONE
        } else {
            base
        }
    }

    /// EECD as read, from the value stored: PRES and AUTO_RD always set; with flash
    /// FLASH_DETECTED, FLUDONE and SIZE_EX too.
    pub(crate) fn eecd_value(&self, stored: Eecd) -> Eecd {
        let fixed = Eecd::PRES | Eecd::AUTO_RD;
        let flash = if self.flash_present {
            Eecd::FLASH_DETECTED | Eecd::FLUDONE | Eecd::size_ex(I225_SIZE_EX)
        } else {
            Eecd::empty()
        };
        (stored - self.eecd_hw_bits()) | fixed | flash
    }

    /// EECD write: returns the value to store. FLUPD on a part with flash commits the
    /// shadow RAM (the update completes at once, so FLUDONE stays set).
    pub(crate) fn write_eecd(&mut self, v: Eecd) -> Eecd {
        if self.flash_present && v.contains(Eecd::FLUPD) {
            self.flash.copy_from_slice(&self.words);
        }
        self.eecd_value(v)
    }

    /// A port reset: the NVM auto-read reloads the shadow RAM from the flash.
    pub(crate) fn reload(&mut self) {
        self.words.copy_from_slice(&self.flash);
        self.eerd = 0;
        self.srwr = 0;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(n: &Nvm) -> u16 {
        (0..=CHECKSUM_WORD).fold(0u16, |a, i| a.wrapping_add(n.word(i)))
    }

    #[test]
    fn images_are_checksummed_and_hold_the_mac() {
        let mac = [0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc];
        for n in [
            Nvm::new(mac),
            Nvm::i225_flash(mac, 0x15F2),
            Nvm::i210_flash(mac, 0x1533),
        ] {
            assert_eq!(sum(&n), NVM_SUM);
            assert_eq!([n.word(0), n.word(1), n.word(2)], [0x1b00, 0xaa21, 0xccbb]);
        }
    }

    #[test]
    fn i225_image_words() {
        let n = Nvm::i225_flash([2, 0, 0, 0, 2, 0x25], 0x15F2);
        assert_eq!(n.len(), 2048);
        assert_eq!(n.word(word::DEV_STARTER), 0x1057);
        assert_eq!(
            (n.word(word::DEV_ID), n.word(word::VEN_ID)),
            (0x15F2, 0x8086)
        );
        // PBA block as igb_read_part_string walks it.
        assert_eq!(n.word(word::PBA_0), PBA_PTR_GUARD);
        let p = n.word(word::PBA_1) as usize;
        let len = n.word(p) as usize;
        let s: Vec<u8> = (1..len).flat_map(|i| n.word(p + i).to_be_bytes()).collect();
        assert_eq!(&s, I225_IMAGE.pba);
        // EECD: word_size = 1 << (SIZE_EX + 6) is the shadow RAM.
        let e = n.eecd_value(Eecd::empty());
        let size_ex = (e & Eecd::SIZE_EX_MASK).bits() >> Eecd::SIZE_EX_SHIFT;
        assert_eq!(1usize << (size_ex + 6), n.len());
    }

    /// The i210 image as Linux igb reads it: igb_get_fw_version's NVM_VERSION decoding (major
    /// b15:12; minor b11:4 read as two decimal digits), the EtrackID, the PBA, the defaults.
    #[test]
    fn i210_image_words() {
        let n = Nvm::i210_flash([2, 0, 0, 0, 2, 0x10], 0x1533);
        assert_eq!(n.len(), 2048);
        let v = n.word(word::DEV_STARTER);
        let minor = (v & 0x0FF0) >> 4;
        assert_eq!((v >> 12, minor / 16 * 10 + minor % 16), (3, 16), "3.16");
        let etrack = u32::from(n.word(word::ETRACK_HI)) << 16 | u32::from(n.word(word::ETRACK_LO));
        assert_eq!(etrack, 0x8000_04D6, "NVM_ETRACK_VALID in the high word");
        assert_eq!(n.word(word::INIT_CTRL_2), 0x7243);
        assert_eq!(n.word(word::DEV_ID), 0x1533);
        let p = n.word(word::PBA_1) as usize;
        let s: Vec<u8> = (1..n.word(p) as usize)
            .flat_map(|i| n.word(p + i).to_be_bytes())
            .collect();
        assert_eq!(&s, b"EMU210-000");
    }

    #[test]
    fn srwr_flupd_and_reload() {
        let mut n = Nvm::i225_flash([2, 0, 0, 0, 2, 0x25], 0x15F2);
        n.write_srwr(0x1234 << 16 | 0x10 << 2 | 1);
        assert_ne!(n.srwr() & eerd::DONE, 0);
        assert_eq!(n.word(0x10), 0x1234);
        n.reload();
        assert_eq!(
            n.word(0x10),
            0,
            "not committed: the reset reloads the flash"
        );
        n.write_srwr(0x1234 << 16 | 0x10 << 2 | 1);
        assert!(!n.write_eecd(Eecd::FLUPD).contains(Eecd::FLUPD));
        n.reload();
        assert_eq!(n.word(0x10), 0x1234, "committed");
    }
}
