//! The I225's config space as the device host serves it: the capability list walked as Linux
//! and our drivers walk it, the PCI Express link fields igc's probe reports, and which bits
//! software can change.

use ptp_pci::config::{CAP_ID_MSI, CAP_ID_MSIX, Capability, MsixInfo, parse_capabilities};

use super::config::{CAP_MSIX, CAP_PCIE, CAP_PM, ConfigSpace, D0, D3HOT, pcie};
use super::{I225_BAR0_LEN, ServedDevice};
use crate::clock::VirtualClock;
use crate::igc::{BAR3_LEN, I225};

fn i225_config() -> ConfigSpace {
    let dev = I225::new_i225(VirtualClock::new(0).source());
    ConfigSpace::new(&dev.pci_profile())
}

fn dword(c: &ConfigSpace, at: usize) -> u32 {
    c.read(at as u32, 4)
}

fn word(c: &ConfigSpace, at: usize) -> u16 {
    c.read(at as u32, 2) as u16
}

/// Linux's pcie_print_link_status line from Link Capabilities 2, Link Capabilities and Link
/// Status (drivers/pci/pci.c: pcie_get_speed_cap takes the highest bit of LNKCAP2's
/// Supported Link Speeds Vector, else LNKCAP's field; the available side reads LNKSTA), for a
/// function with no upstream bridge (QEMU's root bus).
fn linux_link_line(c: &ConfigSpace) -> String {
    let name = |s: u32| match s {
        1 => Some(("2.5 GT/s PCIe", 2000)),
        2 => Some(("5.0 GT/s PCIe", 4000)),
        3 => Some(("8.0 GT/s PCIe", 7877)),
        _ => None,
    };
    let sta = u32::from(word(c, CAP_PCIE + pcie::LNKSTA));
    let Some((speed, per_lane)) = name(sta & 0xf) else {
        return format!("Unknown x{} link", (sta >> 4) & 0x3f);
    };
    let width = (sta >> 4) & 0x3f;
    let cap2 = dword(c, CAP_PCIE + pcie::LNKCAP2) & 0xfe;
    let cap = dword(c, CAP_PCIE + pcie::LNKCAP);
    let cap_speed = if cap2 != 0 {
        31 - cap2.leading_zeros()
    } else {
        cap & 0xf
    };
    let capable = name(cap_speed).map_or(0, |(_, b)| b) * ((cap >> 4) & 0x3f);
    let avail = per_lane * width;
    assert!(avail >= capable, "limited: {avail} of {capable} Mb/s");
    format!(
        "{}.{:03} Gb/s available PCIe bandwidth ({speed} x{width} link)",
        avail / 1000,
        avail % 1000
    )
}

#[test]
fn the_capability_list_is_the_parts() {
    let c = i225_config();
    assert_ne!(word(&c, 0x06) & 0x10, 0, "status: capability list");
    assert_eq!(c.read(0x34, 1), 0x40);
    // Walk the list by hand: IDs, offsets, and the end.
    let mut at = c.read(0x34, 1) as usize;
    let mut seen = Vec::new();
    while at != 0 {
        assert!(at >= 0x40 && at % 4 == 0 && seen.len() < 8, "{at:#x}");
        seen.push((at, c.read(at as u32, 1) as u8));
        at = c.read(at as u32 + 1, 1) as usize;
    }
    assert_eq!(
        seen,
        [(0x40, 0x01), (0x50, 0x05), (0x70, 0x11), (0xa0, 0x10)],
        "PM, MSI, MSI-X, PCI Express (I225-V pciconf)"
    );
    // The same list as our drivers' parser reads it.
    let caps = parse_capabilities(|o| dword(&c, usize::from(o)));
    assert_eq!(caps.len(), 4);
    assert!(caps.contains(&Capability::Msi { offset: 0x50 }));
    assert!(caps.contains(&Capability::MsiX(MsixInfo {
        cap_offset: 0x70,
        table_size: 5,
        table_bar: 3,
        table_offset: 0,
        pba_bar: 3,
        pba_offset: 0x2000,
    })));
    assert_eq!(c.read(0x50, 1) as u8, CAP_ID_MSI);
    assert_eq!(c.read(0x70, 1) as u8, CAP_ID_MSIX);
    // PM: version 3, PME from D0/D3hot/D3cold, no D1/D2; NoSoftRst, D0.
    assert_eq!(word(&c, CAP_PM + 2), 0xc823);
    assert_eq!(word(&c, CAP_PM + 4), 0x2008);
    // MSI: one vector, 64-bit, per-vector mask, disabled.
    assert_eq!(word(&c, 0x52), 0x0180);
    // PCI Express v2 Endpoint; FLR and 512-byte payload capable.
    assert_eq!(word(&c, CAP_PCIE + 2), 0x0002);
    let devcap = dword(&c, CAP_PCIE + pcie::DEVCAP);
    assert_eq!((devcap & 7, devcap >> 28 & 1), (2, 1));
    assert_eq!(word(&c, CAP_PCIE + pcie::DEVCTL), 0x2810, "RO NS, MRRS 512");
    // Nothing past the PCI Express capability.
    assert!((0xdc..0x100).all(|a| c.read(a, 1) == 0));
}

#[test]
fn the_link_is_5_gts_x1_as_igc_reports_it() {
    let c = i225_config();
    let cap = dword(&c, CAP_PCIE + pcie::LNKCAP);
    assert_eq!(cap & 0xf, 2, "max speed 5 GT/s");
    assert_eq!(cap >> 4 & 0x3f, 1, "max width x1");
    assert_eq!(cap >> 10 & 3, 2, "ASPM L1 only");
    let sta = word(&c, CAP_PCIE + pcie::LNKSTA);
    assert_eq!((sta & 0xf, sta >> 4 & 0x3f), (2, 1), "trained 5 GT/s x1");
    assert_eq!(dword(&c, CAP_PCIE + pcie::LNKCAP2), 0b110, "2.5 and 5 GT/s");
    assert_eq!(word(&c, CAP_PCIE + pcie::LNKCTL2) & 0xf, 2, "target 5 GT/s");
    assert_eq!(
        linux_link_line(&c),
        "4.000 Gb/s available PCIe bandwidth (5.0 GT/s PCIe x1 link)"
    );
}

#[test]
fn bars_size_to_the_parts_1_mib_and_16_kib() {
    let mut c = i225_config();
    for (bar, len) in [(0x10, I225_BAR0_LEN), (0x1c, BAR3_LEN)] {
        c.write(bar, 0xffff_ffff, 4);
        let v = dword(&c, bar as usize);
        assert_eq!(v & 0xf, 0, "32-bit non-prefetchable memory");
        assert_eq!(!(v & !0xf) + 1, len, "BAR at {bar:#x}");
    }
    for bar in [0x14, 0x18, 0x20, 0x24] {
        c.write(bar, 0xffff_ffff, 4);
        assert_eq!(c.read(bar, 4), 0, "unused BAR {bar:#x}");
    }
    c.write(0x1c, 0xfeb0_4000, 4);
    assert_eq!((c.bar_base(3), c.bar_len(3)), (0xfeb0_4000, BAR3_LEN));
}

/// All ones written over the whole space, a byte, a word and a dword at a time: every
/// read-only field keeps its value, the writable ones take theirs, none beyond.
#[test]
fn only_writable_bits_change() {
    for len in [1u8, 2, 4] {
        let mut c = i225_config();
        let before = c.clone();
        for a in (0..256).step_by(usize::from(len)) {
            c.write(a as u32, u32::MAX, len);
        }
        assert!(c.take_flr(), "DevCtl bit 15 initiated an FLR");
        assert!(!c.take_flr(), "once");
        let same = |at: usize, n: u8| c.read(at as u32, n) == before.read(at as u32, n);
        for (at, what) in [
            (0x00, "IDs"),
            (0x08, "class/revision"),
            (0x2c, "subsystem"),
            (CAP_PM, "PM header + PMC"),
            (CAP_MSIX + 4, "MSI-X table offset/BIR"),
            (CAP_MSIX + 8, "MSI-X PBA offset/BIR"),
            (CAP_PCIE, "PCIe header + capabilities"),
            (CAP_PCIE + pcie::DEVCAP, "DevCap"),
            (CAP_PCIE + pcie::LNKCAP, "LnkCap"),
            (CAP_PCIE + pcie::LNKCAP2, "LnkCap2"),
            (0x64, "MSI pending bits"),
        ] {
            assert!(same(at, 4), "{what} at {at:#x} (writes of {len})");
        }
        assert!(same(0x50, 2), "MSI header");
        assert_eq!(c.read(0x34, 1), 0x40, "capability pointer");
        assert_eq!(c.read(0x3d, 1), 1, "interrupt pin");
        assert_eq!(word(&c, CAP_PCIE + pcie::LNKSTA), 0x1012, "LnkSta is RO");
        assert_eq!(
            word(&c, 0x72),
            0xc004,
            "MSI-X: enable, function mask; size 5 RO"
        );
        assert_eq!(
            word(&c, 0x52),
            0x01f1,
            "MSI: enable and MME take, 64-bit/mask stay"
        );
        assert_eq!(dword(&c, 0x54), 0xffff_fffc, "MSI address bits 1:0 read 0");
        assert_eq!(dword(&c, 0x5c), 0xffff, "16-bit MSI data");
        assert_eq!(dword(&c, 0x60), 1, "one mask bit");
        assert_eq!(
            word(&c, CAP_PCIE + pcie::DEVCTL),
            0x7cff,
            "no ExtTag, FLR reads 0"
        );
        assert_eq!(word(&c, CAP_PCIE + pcie::DEVSTA), 0, "error bits are RW1C");
        assert_eq!(word(&c, 0x06) & 0xf900, 0, "status error bits are RW1C");
        assert_eq!(word(&c, CAP_PCIE + pcie::LNKCTL), 0x00cb);
        assert_eq!(c.power_state(), D3HOT, "PowerState takes 3");
        assert_eq!(word(&c, CAP_PM + 4) & 0x8000, 0, "PME_Status RW1C");
        assert!(c.msix_enabled() && c.msix_function_masked() && c.msi_enabled());
        c.reset();
        assert!((0..256).all(|a| c.read(a, 1) == before.read(a, 1)), "reset");
    }
}

#[test]
fn power_states_d1_d2_are_refused_and_d3hot_stops_memory_decoding() {
    let mut c = i225_config();
    c.write(0x10, 0xfe00_0000, 4);
    c.write(0x04, 0x0006, 2);
    assert!(c.decodes_memory());
    for unsupported in [1, 2] {
        c.write(CAP_PM as u32 + 4, unsupported, 2);
        assert_eq!(c.power_state(), D0, "D{unsupported} is not supported");
    }
    c.write(CAP_PM as u32 + 4, 3, 2);
    assert_eq!(c.power_state(), D3HOT);
    assert!(
        c.memory_enabled() && !c.decodes_memory(),
        "D3hot: config only"
    );
    c.write(CAP_PM as u32 + 4, 0, 2);
    assert!(c.decodes_memory());
    assert_eq!(
        c.bar0_base(),
        0xfe00_0000,
        "NoSoftRst: D3hot→D0 keeps the BAR"
    );
}
