//! Config space: IDs and the capability list.

/// Offsets in the type-0 config header.
pub mod offsets {
    pub const VENDOR_DEVICE: u16 = 0x00;
    pub const COMMAND_STATUS: u16 = 0x04;
    pub const CLASS_REV: u16 = 0x08;
    pub const BAR0: u16 = 0x10;
    pub const SUBSYSTEM: u16 = 0x2C;
    pub const CAP_PTR: u16 = 0x34;
    pub const INTERRUPT: u16 = 0x3C;
}

/// Status register bit 4: a capability list is present.
pub const STATUS_CAP_LIST: u32 = 1 << (16 + 4);
/// Capability ID of MSI.
pub const CAP_ID_MSI: u8 = 0x05;
/// Capability ID of MSI-X.
pub const CAP_ID_MSIX: u8 = 0x11;

/// The identity of a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PciIds {
    pub vendor: u16,
    pub device: u16,
    pub class: u8,
    pub subclass: u8,
    pub interface: u8,
    pub revision: u8,
    pub subsystem_vendor: u16,
    pub subsystem: u16,
}

impl PciIds {
    /// Decodes the IDs from the config header.
    pub fn from_config(read: impl Fn(u16) -> u32) -> Self {
        let vd = read(offsets::VENDOR_DEVICE);
        let cr = read(offsets::CLASS_REV);
        let ss = read(offsets::SUBSYSTEM);
        Self {
            vendor: vd as u16,
            device: (vd >> 16) as u16,
            revision: cr as u8,
            interface: (cr >> 8) as u8,
            subclass: (cr >> 16) as u8,
            class: (cr >> 24) as u8,
            subsystem_vendor: ss as u16,
            subsystem: (ss >> 16) as u16,
        }
    }
}

/// Where an MSI-X table and PBA live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsixInfo {
    /// Offset of the capability in config space (its Message Control word is at +2).
    pub cap_offset: u16,
    pub table_size: u16,
    pub table_bar: u8,
    pub table_offset: u32,
    pub pba_bar: u8,
    pub pba_offset: u32,
}

/// A capability found in the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    Msi { offset: u16 },
    MsiX(MsixInfo),
    Other { id: u8, offset: u16 },
}

/// Walks the capability list. Bounded: at most 48 entries (the list cannot be longer inside
/// 256 bytes of config space), so a looped list in a broken device cannot hang the driver.
pub fn parse_capabilities(read: impl Fn(u16) -> u32) -> Vec<Capability> {
    let mut caps = Vec::new();
    if read(offsets::COMMAND_STATUS) & STATUS_CAP_LIST == 0 {
        return caps;
    }
    let mut ptr = (read(offsets::CAP_PTR) & 0xFC) as u16;
    for _ in 0..48 {
        if ptr < 0x40 {
            break;
        }
        let head = read(ptr);
        let id = head as u8;
        let next = ((head >> 8) & 0xFC) as u16;
        caps.push(match id {
            CAP_ID_MSI => Capability::Msi { offset: ptr },
            CAP_ID_MSIX => {
                let table = read(ptr + 4);
                let pba = read(ptr + 8);
                Capability::MsiX(MsixInfo {
                    cap_offset: ptr,
                    table_size: (((head >> 16) & 0x7FF) + 1) as u16,
                    table_bar: (table & 7) as u8,
                    table_offset: table & !7,
                    pba_bar: (pba & 7) as u8,
                    pba_offset: pba & !7,
                })
            }
            _ => Capability::Other { id, offset: ptr },
        });
        ptr = next;
    }
    caps
}

/// The MSI-X capability, if any.
pub fn find_msix(caps: &[Capability]) -> Option<MsixInfo> {
    caps.iter().find_map(|c| match c {
        Capability::MsiX(m) => Some(*m),
        _ => None,
    })
}
