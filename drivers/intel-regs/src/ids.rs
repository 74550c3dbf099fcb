//! PCI device IDs (vendor 0x8086) the drivers claim, with the part names they log
//! (reference §11). The pcid match files under `recipes/` must list the same IDs; a test checks.

pub const VENDOR_INTEL: u16 = 0x8086;

/// Which family a device belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// i225/i226 and i220/i221 (driver igcd).
    Igc,
    /// i210/i211 (driver igbd).
    I210,
    /// i350/i354 (driver igbd).
    I350,
    /// 82576 (driver igbd).
    I82576,
}

/// One supported device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Part {
    pub device: u16,
    pub name: &'static str,
    pub family: Family,
}

const fn igc(device: u16, name: &'static str) -> Part {
    Part {
        device,
        name,
        family: Family::Igc,
    }
}

/// Every i225/i226-class device igcd claims.
pub const IGC_PARTS: &[Part] = &[
    igc(0x15F2, "Intel i225-LM"),
    igc(0x15F3, "Intel i225-V"),
    igc(0x15F8, "Intel i225-I"),
    igc(0x0D9F, "Intel i225-IT"),
    igc(0x3100, "Intel i225-K"),
    igc(0x3101, "Intel i225-K2"),
    igc(0x5502, "Intel i225-LMvP"),
    igc(0x15FD, "Intel i225 (blank NVM)"),
    igc(0x125B, "Intel i226-LM"),
    igc(0x125C, "Intel i226-V"),
    igc(0x125D, "Intel i226-IT"),
    igc(0x3102, "Intel i226-K"),
    igc(0x5503, "Intel i226-LMvP"),
    igc(0x125F, "Intel i226 (blank NVM)"),
    igc(0x15F7, "Intel i220-V"),
    igc(0x125E, "Intel i221-V"),
];

/// Looks up an igc-family device.
pub fn igc_part(vendor: u16, device: u16) -> Option<&'static Part> {
    if vendor != VENDOR_INTEL {
        return None;
    }
    IGC_PARTS.iter().find(|p| p.device == device)
}

/// The default device ID of the emulated i225 and i226.
pub const EMU_I225: u16 = 0x15F2;
pub const EMU_I226: u16 = 0x125B;
