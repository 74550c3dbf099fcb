//! The 256-byte conventional PCI header the device host serves (`qemu-proxy.md`, "Realize
//! sequence and config-space rules"): IDs from the model, one 32-bit non-prefetchable memory
//! BAR0 sized to the model's register space, no capability list (so no MSI/MSI-X: the guest
//! takes the INTx line), interrupt pin INTA. QEMU forwards every guest config access here.

use ptp_pci::PciIds;

/// Command register bits software may set: I/O, memory, bus master, parity, SERR, INTx disable
/// (PCI 3.0 §6.2.2).
const COMMAND_WRITABLE: u16 = 0x0001 | 0x0002 | 0x0004 | 0x0040 | 0x0100 | 0x0400;
/// Status bit 3: the function's INTx is asserted (PCI 3.0 §6.2.3).
const STATUS_INTX: u16 = 1 << 3;
/// Offsets in the header (PCI 3.0 §6.1).
const COMMAND: usize = 0x04;
const STATUS: usize = 0x06;
const BAR0: usize = 0x10;
const INTERRUPT_LINE: usize = 0x3c;
const INTERRUPT_PIN: usize = 0x3d;
/// Interrupt pin INTA.
const PIN_INTA: u8 = 1;

/// The config header of a function with one memory BAR.
#[derive(Debug, Clone)]
pub struct ConfigSpace {
    bytes: [u8; 256],
    /// BAR0 size in bytes, a power of two ≥ 16.
    bar0_len: u32,
    bar0: u32,
}

impl ConfigSpace {
    /// A header for `ids` with BAR0 of `bar0_len` bytes (rounded up to a power of two ≥ 16).
    pub fn new(ids: PciIds, bar0_len: u32) -> Self {
        let mut bytes = [0u8; 256];
        bytes[0..2].copy_from_slice(&ids.vendor.to_le_bytes());
        bytes[2..4].copy_from_slice(&ids.device.to_le_bytes());
        bytes[0x08] = ids.revision;
        bytes[0x09] = ids.interface;
        bytes[0x0a] = ids.subclass;
        bytes[0x0b] = ids.class;
        // Header type 0, single function.
        bytes[0x0e] = 0;
        bytes[0x2c..0x2e].copy_from_slice(&ids.subsystem_vendor.to_le_bytes());
        bytes[0x2e..0x30].copy_from_slice(&ids.subsystem.to_le_bytes());
        bytes[INTERRUPT_PIN] = PIN_INTA;
        Self {
            bytes,
            bar0_len: bar0_len.max(16).next_power_of_two(),
            bar0: 0,
        }
    }

    /// Back to the power-on state: command, BAR0 and interrupt line cleared.
    pub fn reset(&mut self) {
        self.bar0 = 0;
        self.bytes[COMMAND..COMMAND + 2].fill(0);
        self.bytes[INTERRUPT_LINE] = 0;
    }

    /// The guest-physical base of BAR0 (0 until the guest assigns it).
    pub fn bar0_base(&self) -> u64 {
        u64::from(self.bar0 & !0xF)
    }

    /// BAR0's size in bytes.
    pub fn bar0_len(&self) -> u32 {
        self.bar0_len
    }

    /// Whether the guest enabled memory decoding (command bit 1).
    pub fn memory_enabled(&self) -> bool {
        self.bytes[COMMAND] & 0x2 != 0
    }

    /// Whether the guest disabled INTx (command bit 10).
    pub fn intx_disabled(&self) -> bool {
        self.bytes[COMMAND + 1] & 0x4 != 0
    }

    /// Reflects the INTx level in the status register.
    pub fn set_intx_status(&mut self, asserted: bool) {
        let mut s = u16::from_le_bytes([self.bytes[STATUS], self.bytes[STATUS + 1]]);
        s = if asserted {
            s | STATUS_INTX
        } else {
            s & !STATUS_INTX
        };
        self.bytes[STATUS..STATUS + 2].copy_from_slice(&s.to_le_bytes());
    }

    fn dword(&self, at: usize) -> u32 {
        if at == BAR0 {
            // Bits 3:0 = 0: 32-bit, non-prefetchable memory.
            return self.bar0;
        }
        u32::from_le_bytes([
            self.bytes[at],
            self.bytes[at + 1],
            self.bytes[at + 2],
            self.bytes[at + 3],
        ])
    }

    /// Reads `len` (1, 2 or 4) bytes at `addr`; the caller has checked `addr + len ≤ 256`.
    pub fn read(&self, addr: u32, len: u8) -> u32 {
        let at = addr as usize;
        let dw = self.dword(at & !3);
        let shifted = dw >> ((at & 3) * 8);
        match len {
            1 => shifted & 0xFF,
            2 => shifted & 0xFFFF,
            _ => shifted,
        }
    }

    /// Writes `len` bytes of `val` at `addr`, keeping read-only fields: only the command
    /// register, BAR0 (address bits above its size) and the interrupt line are writable.
    pub fn write(&mut self, addr: u32, val: u32, len: u8) {
        for i in 0..u32::from(len) {
            let at = (addr + i) as usize;
            let byte = (val >> (i * 8)) as u8;
            self.write_byte(at, byte);
        }
    }

    fn write_byte(&mut self, at: usize, byte: u8) {
        match at {
            COMMAND | 0x05 => {
                let mask = COMMAND_WRITABLE.to_le_bytes()[at - COMMAND];
                self.bytes[at] = (self.bytes[at] & !mask) | (byte & mask);
            }
            0x10..=0x13 => {
                let shift = (at - BAR0) * 8;
                let mut v = self.bar0 & !(0xFF << shift);
                v |= u32::from(byte) << shift;
                // Address bits below the size read 0: that is how the guest sizes the BAR.
                self.bar0 = v & !(self.bar0_len - 1) & !0xF;
            }
            INTERRUPT_LINE => self.bytes[at] = byte,
            _ => {}
        }
    }
}
