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

const fn igb(device: u16, name: &'static str, family: Family) -> Part {
    Part {
        device,
        name,
        family,
    }
}

/// Every igb-family device igbd claims (reference §11; virtual functions are igbvf's, not
/// listed).
pub const IGB_PARTS: &[Part] = &[
    igb(0x10C9, "Intel 82576", Family::I82576),
    igb(0x10E6, "Intel 82576 fiber", Family::I82576),
    igb(0x10E7, "Intel 82576 SerDes", Family::I82576),
    igb(0x10E8, "Intel 82576 quad copper", Family::I82576),
    igb(0x1526, "Intel 82576 quad copper ET2", Family::I82576),
    igb(0x150A, "Intel 82576NS", Family::I82576),
    igb(0x1518, "Intel 82576NS SerDes", Family::I82576),
    igb(0x150D, "Intel 82576 SerDes quad", Family::I82576),
    igb(0x1521, "Intel i350 copper", Family::I350),
    igb(0x1522, "Intel i350 fiber", Family::I350),
    igb(0x1523, "Intel i350 SerDes", Family::I350),
    igb(0x1524, "Intel i350 SGMII", Family::I350),
    igb(0x1546, "Intel i350 DA4", Family::I350),
    igb(0x1F40, "Intel i354 backplane 1G", Family::I350),
    igb(0x1F41, "Intel i354 SGMII", Family::I350),
    igb(0x1F45, "Intel i354 backplane 2.5G", Family::I350),
    igb(0x1533, "Intel i210 copper", Family::I210),
    igb(0x1534, "Intel i210 copper OEM1", Family::I210),
    igb(0x1535, "Intel i210 copper IT", Family::I210),
    igb(0x1536, "Intel i210 fiber", Family::I210),
    igb(0x1537, "Intel i210 SerDes", Family::I210),
    igb(0x1538, "Intel i210 SGMII", Family::I210),
    igb(0x157B, "Intel i210 copper (flashless)", Family::I210),
    igb(0x157C, "Intel i210 SerDes (flashless)", Family::I210),
    igb(0x1539, "Intel i211 copper", Family::I210),
];

/// Looks up an igb-family device.
pub fn igb_part(vendor: u16, device: u16) -> Option<&'static Part> {
    if vendor != VENDOR_INTEL {
        return None;
    }
    IGB_PARTS.iter().find(|p| p.device == device)
}

/// The default device ID of the emulated i225 and i226.
pub const EMU_I225: u16 = 0x15F2;
pub const EMU_I226: u16 = 0x125B;
