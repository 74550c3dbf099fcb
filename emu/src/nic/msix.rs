//! BAR3 of the i225/i226 and igb parts: the MSI-X table at 0 and the Pending Bit Array at
//! 0x2000 (a real I225-V, FreeBSD pciconf in opnsense/src#158: "Table in map 0x1c[0x0], PBA in
//! map 0x1c[0x2000]", BAR3 16 KiB; Linux igc takes 5 vectors: 4 queue pairs + "other",
//! igc_set_interrupt_capability), with the access rules of the PCIe Base Spec 3.0 §6.8.2:
//!
//! - an entry is four dwords: Message Address (bits 1:0 read 0, which the spec permits),
//!   Message Upper Address, Message Data, Vector Control (bit 0 Mask, set at reset; bits
//!   31:1 reserved, read 0);
//! - the PBA is read-only (one bit per entry, QWORD-granular); writes are ignored;
//! - a message signalled while its entry or the whole function is masked sets its Pending
//!   bit instead of going out; unmasking sends it and clears the bit (§6.8.2.6-2.7);
//! - the rest of the BAR is reserved: reads 0, writes ignored \[U\].
//!
//! The model never sees the MSI-X Enable or Function Mask bits (they live in config space,
//! which the PCI backend serves): the backend passes the function mask to
//! [`MsixTable::signal`] and [`MsixTable::release`].

/// Where the PBA starts in BAR3.
pub const PBA_OFFSET: u32 = 0x2000;
/// Bytes per table entry.
const ENTRY: u32 = 16;
/// Vector Control bit 0.
const MASK: u32 = 1;

/// One message as programmed by software.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixMessage {
    /// Message Address (upper:lower).
    pub address: u64,
    /// Message Data.
    pub data: u32,
}

/// What became of a signalled vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsixSignal {
    /// Not masked: the message goes out now.
    Sent(MsixMessage),
    /// Masked (entry or function): its Pending bit is set.
    Pending,
    /// The vector is past the table's end (nothing happens).
    NoSuchEntry,
}

/// The MSI-X table and PBA of one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsixTable {
    /// Address low, address high, data, vector control, per entry.
    entries: Vec<[u32; 4]>,
    pending: Vec<bool>,
}

impl MsixTable {
    /// A table of `vectors` entries in its reset state (every entry masked).
    pub fn new(vectors: u16) -> Self {
        let mut t = Self {
            entries: vec![[0; 4]; usize::from(vectors)],
            pending: vec![false; usize::from(vectors)],
        };
        t.reset();
        t
    }

    /// Entries in the table.
    pub fn vectors(&self) -> u16 {
        self.entries.len() as u16
    }

    /// Function reset: addresses and data 0, every entry masked, nothing pending.
    pub fn reset(&mut self) {
        self.entries.fill([0, 0, 0, MASK]);
        self.pending.fill(false);
    }

    /// A dword read at BAR3 `offset` (rounded down to its dword).
    pub fn read(&self, offset: u32) -> u32 {
        let offset = offset & !3;
        if let Some((e, field)) = self.entry_at(offset) {
            return self.entries[e][field];
        }
        let Some(bit0) = offset.checked_sub(PBA_OFFSET).map(|o| o * 8) else {
            return 0;
        };
        (0..32)
            .filter(|b| self.pending.get((bit0 + b) as usize) == Some(&true))
            .fold(0, |acc, b| acc | 1 << b)
    }

    /// A dword write at BAR3 `offset`: only table fields take it, within their writable bits.
    pub fn write(&mut self, offset: u32, value: u32) {
        if let Some((e, field)) = self.entry_at(offset & !3) {
            self.entries[e][field] = match field {
                0 => value & !3,
                3 => value & MASK,
                _ => value,
            };
        }
    }

    /// (entry, dword within it) of a table offset.
    fn entry_at(&self, offset: u32) -> Option<(usize, usize)> {
        let e = (offset / ENTRY) as usize;
        (e < self.entries.len()).then_some((e, (offset % ENTRY / 4) as usize))
    }

    /// Whether entry `v`'s Mask bit is set (true past the end).
    pub fn masked(&self, v: u16) -> bool {
        self.entries
            .get(usize::from(v))
            .is_none_or(|e| e[3] & MASK != 0)
    }

    /// Whether entry `v`'s Pending bit is set.
    pub fn pending(&self, v: u16) -> bool {
        self.pending.get(usize::from(v)) == Some(&true)
    }

    fn message(&self, v: usize) -> MsixMessage {
        let e = self.entries[v];
        MsixMessage {
            address: u64::from(e[1]) << 32 | u64::from(e[0]),
            data: e[2],
        }
    }

    /// The function signals vector `v` (MSI-X enabled; `function_masked`: the capability's
    /// Function Mask bit).
    pub fn signal(&mut self, v: u16, function_masked: bool) -> MsixSignal {
        let i = usize::from(v);
        if i >= self.entries.len() {
            return MsixSignal::NoSuchEntry;
        }
        if function_masked || self.masked(v) {
            self.pending[i] = true;
            return MsixSignal::Pending;
        }
        MsixSignal::Sent(self.message(i))
    }

    /// Sends every pending message whose entry is no longer masked (nothing while the function
    /// is), clearing its Pending bit; called after software changed a mask.
    pub fn release(&mut self, function_masked: bool) -> Vec<(u16, MsixMessage)> {
        if function_masked {
            return Vec::new();
        }
        let mut out = Vec::new();
        for v in 0..self.entries.len() {
            if self.pending[v] && self.entries[v][3] & MASK == 0 {
                self.pending[v] = false;
                out.push((v as u16, self.message(v)));
            }
        }
        out
    }
}

impl super::Port {
    /// BAR3's MSI-X table and PBA.
    pub fn msix_table(&self) -> &MsixTable {
        &self.msix
    }

    /// The table, for the PCI backend that signals through it.
    pub fn msix_table_mut(&mut self) -> &mut MsixTable {
        &mut self.msix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_their_writable_bits_only() {
        let mut t = MsixTable::new(5);
        for v in 0..5u32 {
            assert_eq!(t.read(v * 16 + 12), 1, "entry {v} masked at reset");
        }
        t.write(16, 0xFEE0_100F);
        t.write(20, 0x1234_5678);
        t.write(24, 0xFFFF_FFFF);
        t.write(28, 0xFFFF_FFFE);
        assert_eq!(t.read(16), 0xFEE0_100C, "address bits 1:0 read 0");
        assert_eq!(t.read(20), 0x1234_5678);
        assert_eq!(t.read(24), 0xFFFF_FFFF, "all 32 data bits");
        assert_eq!(t.read(28), 0, "mask cleared, reserved bits stay 0");
        assert!(!t.masked(1) && t.masked(0));
        t.write(28, 0xFFFF_FFFF);
        assert_eq!(t.read(28), 1, "only the mask bit sets");
        // Past the table (entry 5) and elsewhere in the BAR: reserved.
        t.write(5 * 16, 0xFFFF_FFFF);
        t.write(0x1000, 0xFFFF_FFFF);
        assert_eq!((t.read(5 * 16), t.read(0x1000), t.read(0x3FFC)), (0, 0, 0));
    }

    #[test]
    fn a_masked_vector_goes_pending_and_is_sent_on_unmask() {
        let mut t = MsixTable::new(5);
        t.write(2 * 16, 0xFEE0_0000);
        t.write(2 * 16 + 8, 0x41);
        assert_eq!(t.signal(2, false), MsixSignal::Pending, "masked at reset");
        assert_eq!(t.read(PBA_OFFSET), 1 << 2);
        t.write(PBA_OFFSET, 0);
        assert_eq!(t.read(PBA_OFFSET), 1 << 2, "the PBA is read-only");
        assert!(t.release(false).is_empty(), "still masked");
        t.write(2 * 16 + 12, 0);
        assert!(t.release(true).is_empty(), "the function mask holds it");
        let msg = MsixMessage {
            address: 0xFEE0_0000,
            data: 0x41,
        };
        assert_eq!(t.release(false), vec![(2, msg)]);
        assert_eq!(t.read(PBA_OFFSET), 0, "sent: no longer pending");
        assert_eq!(t.signal(2, false), MsixSignal::Sent(msg));
        assert_eq!(t.signal(2, true), MsixSignal::Pending, "function mask");
        assert_eq!(t.signal(5, false), MsixSignal::NoSuchEntry);
        t.reset();
        assert!(t.masked(2) && !t.pending(2) && t.read(2 * 16) == 0);
    }

    #[test]
    fn pba_bits_past_the_first_dword() {
        let mut t = MsixTable::new(40);
        assert_eq!(t.signal(33, false), MsixSignal::Pending);
        assert_eq!(t.read(PBA_OFFSET), 0);
        assert_eq!(t.read(PBA_OFFSET + 4), 1 << 1);
        assert_eq!(t.read(PBA_OFFSET + 8), 0, "past the last QWORD");
    }
}
