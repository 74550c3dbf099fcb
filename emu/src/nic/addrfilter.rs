//! RX destination-address filtering: which frames the MAC accepts (Linux igc_mac.c,
//! igc_main.c; the i225 keeps the 8254x-family scheme).
//!
//! - Broadcast (ff:ff:ff:ff:ff:ff): accepted with RCTL.BAM (b15) only \[U: UPE/MPE not
//!   consulted for it; igc always sets BAM\].
//! - Exact match: RAL(n)/RAH(n), n = 0..15, with RAH.AV (b31) and RAH.ASEL (b17:16) = 0
//!   (destination address; Linux igc_defines.h IGC_RAH_ASEL_SRC_ADDR is b16). Any address,
//!   unicast or multicast, may sit in an entry \[U\].
//! - Multicast: accepted with RCTL.MPE (b4), or when the MTA bit its hash selects is set. The
//!   hash is 12 bits of the destination's last two bytes, chosen by RCTL.MO (b13:12): MO 0
//!   takes address bits 47:36, 1 → 46:35, 2 → 45:34, 3 → 43:32; MTA register = hash b11:5,
//!   bit = hash b4:0 (Linux igc_mac.c igc_hash_mc_addr and igc_update_mc_addr_list).
//! - Unicast: accepted with RCTL.UPE (b3) or an exact match.
//!
//! Frames not accepted are dropped before DMA and counted (`I225Stats::rx_filtered`).

use intel_regs::e1000::{MTA, rah, ral, rctl};

use super::regfile::RegFile;

/// Receive-address entries of the i225 (Linux igc_hw.h IGC_RAR_ENTRIES).
pub(crate) const RAR_ENTRIES: u32 = 16;
/// RCTL.MO, the multicast offset (b13:12).
const RCTL_MO_SHIFT: u32 = 12;
/// RAH.ASEL, address select (b17:16): 0 = destination.
const RAH_ASEL_MASK: u32 = 3 << 16;

/// The 12-bit MTA hash of multicast address `a` under RCTL.MO `mo`.
pub(crate) fn mta_hash(a: &[u8; 6], mo: u32) -> u32 {
    let shift = match mo & 3 {
        0 => 4,
        1 => 5,
        2 => 6,
        _ => 8,
    };
    ((a[4] as u32 >> (8 - shift)) | (a[5] as u32) << shift) & 0xFFF
}

fn exact_match(regs: &RegFile, a: &[u8; 6]) -> bool {
    let lo = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
    let hi = u32::from_le_bytes([a[4], a[5], 0, 0]);
    (0..RAR_ENTRIES).any(|n| {
        let h = regs.get(rah(n));
        h & rah::AV != 0 && h & RAH_ASEL_MASK == 0 && regs.get(ral(n)) == lo && h & 0xFFFF == hi
    })
}

/// Whether the MAC accepts a frame to destination `a`.
pub(crate) fn accepts(regs: &RegFile, a: &[u8; 6]) -> bool {
    let r = regs.get(intel_regs::igc::RCTL);
    if *a == [0xFF; 6] {
        return r & rctl::BAM != 0;
    }
    if exact_match(regs, a) {
        return true;
    }
    if a[0] & 1 == 0 {
        return r & rctl::UPE != 0;
    }
    if r & rctl::MPE != 0 {
        return true;
    }
    let h = mta_hash(a, r >> RCTL_MO_SHIFT);
    regs.get(MTA + 4 * (h >> 5)) & (1 << (h & 0x1F)) != 0
}
