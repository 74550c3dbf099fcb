//! The statistics block 0x4000–0x4138, and the EEE/BMC counters after it up to 0x415C (TLPIC,
//! RLPIC, B2OGPRC, O2BSPC) (Linux igc_regs.h; igc_main.c igc_update_stats reads it every
//! watchdog tick): read-only, clear-on-read counters.
//!
//! Counted by the model: GPRC/GORC, TPR/TOR, BPRC/MPRC, PRC64..PRC1522 (frames accepted by
//! the address filter, written to the host or not), MPC (missed: no free descriptors), RNBC
//! (same event \[U\]), RUC (shorter than 64 bytes with FCS) and ROC (longer than the
//! long-packet limit, RCTL.LPE/RLPML: igc_rx_fifo_flush_base reads ROC to flush the errors its
//! RLPML = 0 trick causes; Linux reports RUC and ROC as rx_length_errors), GPTC/GOTC, TPT/TOT,
//! BPTC/MPTC, PTC64..PTC1522 (every TSO segment is a frame here), TSCTC (TSO frames
//! segmented: igc_regs.h "TCP Segmentation Context Tx"). Octet counts include the 4-byte FCS
//! \[U\]. Every other counter in the block
//! reads 0. The 64-bit octet counters are pairs: the low dword reads the low half, the high
//! dword reads the high half and then clears both (low first, as Linux reads them) \[U\].

/// First and last offsets of the block.
pub(crate) const FIRST: u32 = 0x4000;
pub(crate) const LAST: u32 = 0x415C;

const MPC: u32 = 0x4010;
const PRC64: u32 = 0x405C;
const GPRC: u32 = 0x4074;
const BPRC: u32 = 0x4078;
const MPRC: u32 = 0x407C;
const GPTC: u32 = 0x4080;
const GORCL: u32 = 0x4088;
const GOTCL: u32 = 0x4090;
const RNBC: u32 = 0x40A0;
const RUC: u32 = 0x40A4;
const ROC: u32 = 0x40AC;
const TORL: u32 = 0x40C0;
const TOTL: u32 = 0x40C8;
const TPR: u32 = 0x40D0;
const TPT: u32 = 0x40D4;
const PTC64: u32 = 0x40D8;
const MPTC: u32 = 0x40F0;
const BPTC: u32 = 0x40F4;
const TSCTC: u32 = 0x40F8;
/// Low dwords of the 64-bit pairs (the high dword follows at +4).
const PAIRS: [u32; 6] = [GORCL, GOTCL, TORL, TOTL, 0x4128, 0x4130];

/// Ethernet FCS bytes counted in octet counters.
const FCS: u64 = 4;

/// Counter values, one u64 per dword of the block (pairs live in their low slot).
#[derive(Debug, Clone)]
pub(crate) struct HwStats {
    slots: [u64; ((LAST - FIRST) / 4 + 1) as usize],
}

impl Default for HwStats {
    fn default() -> Self {
        Self {
            slots: [0; ((LAST - FIRST) / 4 + 1) as usize],
        }
    }
}

/// PRC64/PTC64-based size bucket of a frame of `len` bytes with FCS.
fn bucket(first: u32, len: u64) -> u32 {
    let i = match len {
        ..=64 => 0,
        65..=127 => 1,
        128..=255 => 2,
        256..=511 => 3,
        512..=1023 => 4,
        _ => 5,
    };
    first + 4 * i
}

impl HwStats {
    fn add(&mut self, offset: u32, n: u64) {
        if let Some(s) = self.slots.get_mut(((offset - FIRST) / 4) as usize) {
            *s = s.wrapping_add(n);
        }
    }

    /// A frame (without FCS) that passed the address filter; `dst` its destination MAC.
    pub(crate) fn rx_accepted(&mut self, len: usize, dst: [u8; 6]) {
        let octets = len as u64 + FCS;
        for (c, n) in [(GPRC, 1), (TPR, 1), (GORCL, octets), (TORL, octets)] {
            self.add(c, n);
        }
        if dst == [0xFF; 6] {
            self.add(BPRC, 1);
        } else if dst[0] & 1 != 0 {
            self.add(MPRC, 1);
        }
        if len as u64 + FCS <= 1522 {
            self.add(bucket(PRC64, octets), 1);
        }
    }

    /// A frame dropped for want of a descriptor.
    pub(crate) fn rx_missed(&mut self) {
        self.add(MPC, 1);
        self.add(RNBC, 1);
    }

    /// A frame dropped as longer than the long-packet limit.
    pub(crate) fn rx_oversize(&mut self) {
        self.add(ROC, 1);
    }

    /// A frame dropped as shorter than the 64-byte minimum.
    pub(crate) fn rx_undersize(&mut self) {
        self.add(RUC, 1);
    }

    /// A TSO frame segmented (its segments are counted by [`Self::tx_sent`]).
    pub(crate) fn tso_sent(&mut self) {
        self.add(TSCTC, 1);
    }

    /// A frame (without FCS) that left the MAC.
    pub(crate) fn tx_sent(&mut self, frame: &[u8]) {
        let octets = frame.len() as u64 + FCS;
        for (c, n) in [(GPTC, 1), (TPT, 1), (GOTCL, octets), (TOTL, octets)] {
            self.add(c, n);
        }
        match frame.get(..6) {
            Some(d) if d == [0xFF; 6] => self.add(BPTC, 1),
            Some(d) if d[0] & 1 != 0 => self.add(MPTC, 1),
            _ => {}
        }
        if octets <= 1522 {
            self.add(bucket(PTC64, octets), 1);
        }
    }

    /// A read of `offset` in the block: its value, cleared (pairs: see the module docs).
    pub(crate) fn read(&mut self, offset: u32) -> u32 {
        let idx = |o: u32| ((o - FIRST) / 4) as usize;
        if PAIRS.contains(&offset) {
            return self.slots[idx(offset)] as u32;
        }
        if PAIRS.contains(&(offset.wrapping_sub(4))) {
            let lo = idx(offset - 4);
            return (std::mem::take(&mut self.slots[lo]) >> 32) as u32;
        }
        self.slots
            .get_mut(idx(offset))
            .map_or(0, |s| std::mem::take(s) as u32)
    }

    /// What a read would return, without clearing.
    pub(crate) fn peek(&self, offset: u32) -> u32 {
        let idx = |o: u32| ((o - FIRST) / 4) as usize;
        if PAIRS.contains(&(offset.wrapping_sub(4))) {
            return (self.slots[idx(offset - 4)] >> 32) as u32;
        }
        self.slots.get(idx(offset)).map_or(0, |&s| s as u32)
    }
}
