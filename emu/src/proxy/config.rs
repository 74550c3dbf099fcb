//! The 256-byte config space the device host serves (`qemu-proxy.md`, "Realize sequence and
//! config-space rules"): QEMU's `x-pci-proxy-dev` forwards every guest config access here.
//!
//! Bytes are kept with a write mask and a write-1-to-clear mask (PCIe Base Spec 3.0 §7.4:
//! RO, RW, RW1C, HwInit): a write changes only the bits its register lets software change.
//! What the function offers comes from its [`PciProfile`]:
//!
//! - [`PciProfile::conventional`]: a header with one BAR and no capability list (INTx only);
//! - [`PciProfile::intel_gbe`]: the capability list of Intel's PCIe GbE parts — Power
//!   Management at 0x40, MSI at 0x50, MSI-X at 0x70, PCI Express at 0xA0 — as a real I225-V
//!   shows it (FreeBSD pciconf in opnsense/src#158; an I226-LM's `lspci -vvv` in
//!   geerlingguy/raspberry-pi-pcie-devices#674; an I350 has the same offsets, #315 there).
//!
//! Only the first 256 bytes exist here: QEMU's proxy is a conventional PCI device
//! (`pci_proxy_dev_type_info`, INTERFACE_CONVENTIONAL_PCI_DEVICE, hw/remote/proxy.c), so the
//! part's extended capabilities (AER 0x100, DSN 0x140, LTR 0x1C0, L1 PM Substates 0x1E0, PTM
//! 0x1F0 on the real I225-V) cannot be reached and are not advertised.

use ptp_pci::PciIds;

/// Command register bits software may set: I/O, memory, bus master, parity, SERR, INTx disable
/// (PCI 3.0 §6.2.2).
const COMMAND_WRITABLE: u16 = 0x0001 | 0x0002 | 0x0004 | 0x0040 | 0x0100 | 0x0400;
/// Status bits software clears by writing 1: master data parity error, signalled/received
/// target abort, received master abort, signalled system error, detected parity error.
const STATUS_W1C: u16 = 0xF900;
/// Status bit 3: the function's INTx is asserted (PCI 3.0 §6.2.3); bit 4: capability list.
const STATUS_INTX: u16 = 1 << 3;
const STATUS_CAP_LIST: u16 = 1 << 4;
/// Offsets in the header (PCI 3.0 §6.1).
const COMMAND: usize = 0x04;
const STATUS: usize = 0x06;
const CACHE_LINE: usize = 0x0c;
const BAR0: usize = 0x10;
const CAP_PTR: usize = 0x34;
const INTERRUPT_LINE: usize = 0x3c;
const INTERRUPT_PIN: usize = 0x3d;
/// Interrupt pin INTA.
const PIN_INTA: u8 = 1;

/// Where each capability sits on the Intel GbE parts.
pub const CAP_PM: usize = 0x40;
/// MSI capability.
pub const CAP_MSI: usize = 0x50;
/// MSI-X capability.
pub const CAP_MSIX: usize = 0x70;
/// PCI Express capability.
pub const CAP_PCIE: usize = 0xa0;

/// Register offsets inside the PCI Express capability (PCIe 3.0 §7.8).
pub mod pcie {
    /// Device Capabilities.
    pub const DEVCAP: usize = 0x04;
    /// Device Control.
    pub const DEVCTL: usize = 0x08;
    /// Device Status.
    pub const DEVSTA: usize = 0x0a;
    /// Link Capabilities.
    pub const LNKCAP: usize = 0x0c;
    /// Link Control.
    pub const LNKCTL: usize = 0x10;
    /// Link Status.
    pub const LNKSTA: usize = 0x12;
    /// Link Capabilities 2.
    pub const LNKCAP2: usize = 0x2c;
    /// Link Control 2.
    pub const LNKCTL2: usize = 0x30;
    /// Device Control bit 15: Initiate Function Level Reset.
    pub const DEVCTL_FLR: u16 = 1 << 15;
}

/// PMCSR PowerState values (PCI PM 1.2 §3.2.4).
pub const D0: u8 = 0;
/// D3hot.
pub const D3HOT: u8 = 3;

/// What a function's PCI Express side offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieProfile {
    /// MSI-X table entries (table at BAR3 + 0, PBA at BAR3 + 0x2000).
    pub msix_vectors: u16,
    /// Link speed as Link Capabilities encodes it (1: 2.5 GT/s, 2: 5 GT/s).
    pub link_speed: u8,
    /// Link width (lanes).
    pub link_width: u8,
}

/// What config space a served function presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciProfile {
    /// Vendor, device, class, subsystem.
    pub ids: PciIds,
    /// BAR0 (32-bit non-prefetchable memory) in bytes.
    pub bar0_len: u32,
    /// BAR3, the MSI-X BAR, if any.
    pub bar3_len: Option<u32>,
    /// The capability list, if any.
    pub pcie: Option<PcieProfile>,
}

impl PciProfile {
    /// A conventional header: BAR0 only, no capability list, INTA.
    pub fn conventional(ids: PciIds, bar0_len: u32) -> Self {
        Self {
            ids,
            bar0_len,
            bar3_len: None,
            pcie: None,
        }
    }

    /// An Intel PCIe GbE function: BAR0 registers, BAR3 the MSI-X table, the PM, MSI, MSI-X
    /// and PCI Express capabilities.
    pub fn intel_gbe(ids: PciIds, bar0_len: u32, bar3_len: u32, pcie: PcieProfile) -> Self {
        Self {
            ids,
            bar0_len,
            bar3_len: Some(bar3_len),
            pcie: Some(pcie),
        }
    }
}

/// A BAR length as the header can express it: a power of two ≥ 16.
fn bar_size(len: u32) -> u32 {
    len.max(16).checked_next_power_of_two().unwrap_or(1 << 31)
}

/// The config space of one function.
#[derive(Debug, Clone)]
pub struct ConfigSpace {
    /// The power-on image, restored by [`Self::reset`].
    init: [u8; 256],
    bytes: [u8; 256],
    /// Bits software may write.
    wmask: [u8; 256],
    /// Bits software clears by writing 1.
    w1c: [u8; 256],
    /// BAR sizes by index (0: absent).
    bar_len: [u32; 6],
    /// A Function Level Reset was initiated and not yet carried out.
    flr: bool,
}

impl ConfigSpace {
    /// The config space of `p` at power-on.
    pub fn new(p: &PciProfile) -> Self {
        let mut c = Self {
            init: [0; 256],
            bytes: [0; 256],
            wmask: [0; 256],
            w1c: [0; 256],
            bar_len: [0; 6],
            flr: false,
        };
        c.header(p);
        if let Some(e) = p.pcie {
            c.capabilities(&e);
        }
        c.init = c.bytes;
        c
    }

    fn put16(&mut self, at: usize, v: u16, wmask: u16) {
        self.bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
        self.wmask[at..at + 2].copy_from_slice(&wmask.to_le_bytes());
    }

    fn put32(&mut self, at: usize, v: u32, wmask: u32) {
        self.bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        self.wmask[at..at + 4].copy_from_slice(&wmask.to_le_bytes());
    }

    fn header(&mut self, p: &PciProfile) {
        let ids = &p.ids;
        self.put16(0, ids.vendor, 0);
        self.put16(2, ids.device, 0);
        self.put16(COMMAND, 0, COMMAND_WRITABLE);
        self.w1c[STATUS..STATUS + 2].copy_from_slice(&STATUS_W1C.to_le_bytes());
        self.bytes[0x08] = ids.revision;
        self.bytes[0x09] = ids.interface;
        self.bytes[0x0a] = ids.subclass;
        self.bytes[0x0b] = ids.class;
        // Cache Line Size: RW with no effect on PCIe (PCIe 3.0 §7.5.1.3); header type 0.
        self.wmask[CACHE_LINE] = 0xff;
        for (n, len) in [(0, Some(p.bar0_len)), (3, p.bar3_len)] {
            if let Some(len) = len {
                let size = bar_size(len);
                self.bar_len[n] = size;
                // Bits 3:0 = 0: 32-bit non-prefetchable memory; address bits below the size
                // read 0, which is how software sizes the BAR.
                self.put32(BAR0 + 4 * n, 0, !(size - 1) & !0xf);
            }
        }
        self.put16(0x2c, ids.subsystem_vendor, 0);
        self.put16(0x2e, ids.subsystem, 0);
        self.wmask[INTERRUPT_LINE] = 0xff;
        self.bytes[INTERRUPT_PIN] = PIN_INTA;
    }

    fn capabilities(&mut self, e: &PcieProfile) {
        self.bytes[STATUS] |= STATUS_CAP_LIST as u8;
        self.bytes[CAP_PTR] = CAP_PM as u8;
        self.power_management();
        self.msi();
        self.msix(e.msix_vectors);
        self.express(e);
    }

    /// PCI PM 1.2 §3.2, as the I226-LM reports it: version 3, DSI, no D1/D2, PME from D0,
    /// D3hot and D3cold; PMCSR NoSoftRst (D3hot→D0 keeps the function's state), DScale 1.
    fn power_management(&mut self) {
        let at = CAP_PM;
        self.bytes[at] = 0x01;
        self.bytes[at + 1] = CAP_MSI as u8;
        self.put16(at + 2, 0x0003 | 1 << 5 | 1 << 11 | 1 << 14 | 1 << 15, 0);
        // PowerState (1:0) and PME_En (8) RW; Data_Select RO 0 and Data 0 [U]; PME_Status
        // (15) RW1C, never set: the model signals no PME.
        self.put16(at + 4, 1 << 3 | 1 << 13, 0x0103);
        self.w1c[at + 5] = 0x80;
    }

    /// PCI 3.0 §6.8.1, "MSI: Count=1/1 Maskable+ 64bit+" (I225-V and I226-LM): Enable and
    /// Multiple Message Enable RW, 64-bit address (bits 1:0 zero), 16-bit data, one mask bit,
    /// pending bits read-only.
    fn msi(&mut self) {
        let at = CAP_MSI;
        self.bytes[at] = 0x05;
        self.bytes[at + 1] = CAP_MSIX as u8;
        self.put16(at + 2, 1 << 7 | 1 << 8, 0x0071);
        self.put32(at + 4, 0, 0xffff_fffc);
        self.put32(at + 8, 0, 0xffff_ffff);
        self.put16(at + 12, 0, 0xffff);
        self.put32(at + 16, 0, 0x1);
    }

    /// PCIe 3.0 §7.7: Table Size N-1 (RO), Function Mask (14) and Enable (15) RW; table at
    /// BAR3 + 0, PBA at BAR3 + 0x2000 (BIR 3), as on the I225-V.
    fn msix(&mut self, vectors: u16) {
        let at = CAP_MSIX;
        self.bytes[at] = 0x11;
        self.bytes[at + 1] = CAP_PCIE as u8;
        self.put16(at + 2, vectors.saturating_sub(1) & 0x7ff, 0xc000);
        self.put32(at + 4, 3, 0);
        self.put32(at + 8, crate::nic::msix::PBA_OFFSET | 3, 0);
    }

    /// PCIe 3.0 §7.8, a version 2 Endpoint, end of the list. Values from the I225-V's pciconf
    /// ("PCI-Express 2 endpoint max data 256(512) FLR RO NS max read 512 link x1(x1) speed
    /// 5.0(5.0) ASPM disabled(L1)") unless marked \[U\].
    fn express(&mut self, e: &PcieProfile) {
        use pcie::*;
        let at = CAP_PCIE;
        self.bytes[at] = 0x10;
        self.bytes[at + 1] = 0;
        self.put16(at + 2, 0x0002, 0);
        // Max_Payload_Size Supported 512 B (2); L0s/L1 acceptable latency <512 ns / <64 µs
        // [U: the I350's values, #315 above]; Role-Based Error Reporting; FLR capable.
        self.put32(at + DEVCAP, 2 | 3 << 6 | 6 << 9 | 1 << 15 | 1 << 28, 0);
        // Reset value: Relaxed Ordering and No Snoop enabled, Max_Read_Request 512 B, MPS 128 B.
        // RW: error reporting enables (3:0), RO (4), MPS (7:5), AUX PM (10), NS (11), MRRS
        // (14:12). Extended tags and phantom functions are not supported: RO 0. Bit 15
        // (Initiate FLR) always reads 0 (`write_byte`).
        self.put16(at + DEVCTL, 1 << 4 | 1 << 11 | 2 << 12, 0x7cff);
        // Error detected bits RW1C (never set: the model reports no errors).
        self.w1c[at + DEVSTA] = 0x0f;
        // Max link speed and width; ASPM L1 only (10b); L0s/L1 exit latency [U]; ASPM
        // optionality compliance [U]; port 0.
        let speed = u32::from(e.link_speed & 0xf);
        let width = u32::from(e.link_width & 0x3f);
        let lnkcap = speed | width << 4 | 2 << 10 | 6 << 15 | 1 << 22;
        self.put32(at + LNKCAP, lnkcap, 0);
        // ASPM control, RCB, common clock, extended synch RW; clock PM not offered.
        self.put16(at + LNKCTL, 0, 0x00cb);
        // Trained at its maximum; slot clock configuration [U].
        self.put16(at + LNKSTA, (speed | width << 4 | 1 << 12) as u16, 0);
        // Supported Link Speeds Vector: every speed up to the maximum (bit 1: 2.5 GT/s,
        // bit 2: 5 GT/s). Linux's pcie_get_speed_cap reads this first.
        let speeds = (1u32 << (speed + 1)) - 2;
        self.put32(at + LNKCAP2, speeds, 0);
        // Target Link Speed = maximum; the compliance/margin fields RW (6 is HwInit).
        self.put16(at + LNKCTL2, speed as u16, 0xffbf);
    }

    /// Back to the power-on state (a PCI reset or FLR): every register as at power-on.
    pub fn reset(&mut self) {
        self.bytes = self.init;
        self.flr = false;
    }

    fn word(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.bytes[at], self.bytes[at + 1]])
    }

    /// The guest-physical base of BAR `n` (0 while unassigned or absent).
    pub fn bar_base(&self, n: usize) -> u64 {
        if n >= 6 || self.bar_len[n] == 0 {
            return 0;
        }
        let at = BAR0 + 4 * n;
        let v = u32::from_le_bytes([
            self.bytes[at],
            self.bytes[at + 1],
            self.bytes[at + 2],
            self.bytes[at + 3],
        ]);
        u64::from(v & !0xf)
    }

    /// The size of BAR `n` in bytes (0 if absent).
    pub fn bar_len(&self, n: usize) -> u32 {
        self.bar_len.get(n).copied().unwrap_or(0)
    }

    /// The guest-physical base of BAR0.
    pub fn bar0_base(&self) -> u64 {
        self.bar_base(0)
    }

    /// BAR0's size in bytes.
    pub fn bar0_len(&self) -> u32 {
        self.bar_len[0]
    }

    /// Whether the guest enabled memory decoding (command bit 1).
    pub fn memory_enabled(&self) -> bool {
        self.bytes[COMMAND] & 0x2 != 0
    }

    /// Whether the function answers memory accesses: decoding on and in D0 (in D3hot a
    /// function takes configuration accesses only, PCI PM 1.2 §5.4.1).
    pub fn decodes_memory(&self) -> bool {
        self.memory_enabled() && self.power_state() == D0
    }

    /// Whether the guest disabled INTx (command bit 10).
    pub fn intx_disabled(&self) -> bool {
        self.bytes[COMMAND + 1] & 0x4 != 0
    }

    /// Whether the list has capabilities.
    fn has_caps(&self) -> bool {
        self.bytes[STATUS] & STATUS_CAP_LIST as u8 != 0
    }

    /// PMCSR PowerState (D0 without a PM capability).
    pub fn power_state(&self) -> u8 {
        if self.has_caps() {
            self.bytes[CAP_PM + 4] & 3
        } else {
            D0
        }
    }

    /// MSI Enable.
    pub fn msi_enabled(&self) -> bool {
        self.has_caps() && self.bytes[CAP_MSI + 2] & 1 != 0
    }

    /// MSI-X Enable.
    pub fn msix_enabled(&self) -> bool {
        self.has_caps() && self.word(CAP_MSIX + 2) & 0x8000 != 0
    }

    /// MSI-X Function Mask.
    pub fn msix_function_masked(&self) -> bool {
        self.has_caps() && self.word(CAP_MSIX + 2) & 0x4000 != 0
    }

    /// Whether a Function Level Reset was initiated since the last call (the caller carries
    /// it out: the function's state and this config space back to power-on).
    pub fn take_flr(&mut self) -> bool {
        std::mem::take(&mut self.flr)
    }

    /// Reflects the INTx level in the status register.
    pub fn set_intx_status(&mut self, asserted: bool) {
        if asserted {
            self.bytes[STATUS] |= STATUS_INTX as u8;
        } else {
            self.bytes[STATUS] &= !(STATUS_INTX as u8);
        }
    }

    /// Reads `len` (1, 2 or 4) bytes at `addr`; the caller has checked `addr + len ≤ 256`.
    pub fn read(&self, addr: u32, len: u8) -> u32 {
        let at = addr as usize;
        (0..usize::from(len))
            .filter_map(|i| self.bytes.get(at + i))
            .rev()
            .fold(0, |acc, &b| acc << 8 | u32::from(b))
    }

    /// Writes `len` bytes of `val` at `addr`; each bit changes only as its register allows.
    pub fn write(&mut self, addr: u32, val: u32, len: u8) {
        let pm_before = self.power_state();
        for i in 0..u32::from(len) {
            let at = (addr + i) as usize;
            if at < 256 {
                self.write_byte(at, (val >> (i * 8)) as u8);
            }
        }
        // D1 and D2 are not supported: such a write completes and changes nothing (PCI PM 1.2
        // §3.2.4).
        if self.has_caps() && matches!(self.power_state(), 1 | 2) {
            self.bytes[CAP_PM + 4] = (self.bytes[CAP_PM + 4] & !3) | pm_before;
        }
    }

    fn write_byte(&mut self, at: usize, byte: u8) {
        if self.has_caps() && at == CAP_PCIE + pcie::DEVCTL + 1 && byte & 0x80 != 0 {
            self.flr = true;
        }
        let m = self.wmask[at];
        self.bytes[at] = (self.bytes[at] & !m) | (byte & m);
        self.bytes[at] &= !(byte & self.w1c[at]);
    }
}
