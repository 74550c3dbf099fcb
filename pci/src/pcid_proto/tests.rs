//! Golden bytes of the pcid channel (pinned revision, see the module docs), and totality.

use super::*;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).expect("test hex"))
        .collect()
}

/// The i225-V of the tests: BAR0 registers, BAR3 the MSI-X table, INTx 11 after EnableDevice.
fn i225() -> FunctionInfo {
    let mut bars = [PciBar::None; 6];
    bars[0] = PciBar::Memory32 {
        addr: 0xFC20_0000,
        size: 0x10_0000,
    };
    bars[3] = PciBar::Memory32 {
        addr: 0xFC30_0000,
        size: 0x4000,
    };
    FunctionInfo {
        addr: PciAddress {
            segment: 0,
            bus: 3,
            device: 0,
            function: 0,
        },
        bars,
        rom: None,
        legacy_interrupt_line: Some(LegacyInterruptLine {
            irq: 11,
            phandled: None,
        }),
        full_device_id: FullDeviceId {
            vendor_id: 0x8086,
            device_id: 0x15F3,
            class: 0x02,
            subclass: 0x00,
            interface: 0x00,
            revision: 0x03,
        },
    }
}

/// As base 9dd6901d's pcid sends it: the `rom` option (`00`, none) between the BARs and the
/// interrupt line. The frame of the earlier pin (drivers 20ffe4d7) lacked that byte.
const I225_CONFIG_FRAME: &str = "
    3d 00 00 00 00 00 00 00
    01 00 00 00
    00 00 03 00 00
    01 00 00 00 00 00 20 fc 00 00 10 00
    00 00 00 00
    00 00 00 00
    01 00 00 00 00 00 30 fc 00 40 00 00
    00 00 00 00
    00 00 00 00
    00
    01 0b 00
    86 80 f3 15 02 00 00 03";

#[test]
fn read_config_request_and_reply_golden() {
    // The reference's example (§3): 6 request bytes; the reply's prefix counts the 8 payload
    // bytes (4 tag + 4 value), not itself.
    assert_eq!(Request::ReadConfig(0x10).encode(), hex("07 00 00 00 10 00"));
    let frame = hex("08 00 00 00 00 00 00 00  09 00 00 00  00 00 20 fc");
    assert_eq!(
        Response::decode_frame(&frame),
        Ok(Response::ReadConfig(0xFC20_0000))
    );
    assert_eq!(Response::ReadConfig(0xFC20_0000).encode_frame(), frame);
    assert_eq!(frame_len([8, 0, 0, 0, 0, 0, 0, 0]), Ok(8));
}

#[test]
fn enable_device_golden() {
    assert_eq!(Request::EnableDevice.encode(), hex("00 00 00 00"));
    let frame = hex("04 00 00 00 00 00 00 00  00 00 00 00");
    assert_eq!(Response::decode_frame(&frame), Ok(Response::EnabledDevice));
    assert_eq!(Response::EnabledDevice.encode_frame(), frame);
}

#[test]
fn request_config_golden() {
    assert_eq!(Request::RequestConfig.encode(), hex("01 00 00 00"));
    let frame = hex(I225_CONFIG_FRAME);
    assert_eq!(frame.len(), 8 + 0x3d);
    let got = Response::decode_frame(&frame).expect("decodes");
    assert_eq!(got, Response::Config(i225()));
    assert_eq!(Response::Config(i225()).encode_frame(), frame);
    assert_eq!(i225().addr.scheme_name(), "pci-0000-03-00.0");
    assert_eq!(i225().bars[0].memory(), Some((0xFC20_0000, 0x10_0000)));
}

/// The earlier pin's frame (no `rom` byte) is refused with a typed error, not misread: pcid
/// and this decoder disagreeing is what the first boot under the kit's pcid showed.
#[test]
fn the_frame_without_the_rom_field_is_refused() {
    let mut old = hex(I225_CONFIG_FRAME);
    // Prefix, response tag, address, BARs (two Memory32 of 12 bytes, four None of 4).
    let rom_at = 8 + 4 + 5 + 2 * 12 + 4 * 4;
    assert_eq!(old[rom_at], 0);
    old.remove(rom_at);
    old[0] = 0x3c;
    assert!(Response::decode_frame(&old).is_err(), "{old:02x?}");
}

#[test]
fn an_option_rom_is_carried() {
    let mut f = i225();
    f.rom = Some(PciRom {
        addr: 0xFEB0_0000,
        size: 0x4_0000,
        enabled: true,
    });
    let frame = Response::Config(f).encode_frame();
    // Tag 1, addr, size, enabled: 10 bytes where `None` took 1.
    assert_eq!(frame.len(), hex(I225_CONFIG_FRAME).len() + 9);
    assert_eq!(Response::decode_frame(&frame), Ok(Response::Config(f)));
}

#[test]
fn device_tree_interrupt_line_and_memory64_bar() {
    let mut f = i225();
    f.bars[0] = PciBar::Memory64 {
        addr: 0x1_0000_0000,
        size: 0x2_0000,
    };
    f.bars[1] = PciBar::Port(0xE000);
    f.legacy_interrupt_line = Some(LegacyInterruptLine {
        irq: 0,
        phandled: Some((7, [1, 2, 3], 2)),
    });
    let r = Response::Config(f);
    assert_eq!(Response::decode_frame(&r.encode_frame()), Ok(r));
}

#[test]
fn feature_info_msix_golden() {
    assert_eq!(
        Request::FeatureInfo(Feature::MsiX).encode(),
        hex("05 00 00 00 01 00 00 00")
    );
    // i225: 5 MSI-X entries in BAR3 at 0, PBA in BAR3 at 0x2000.
    let frame = hex(
        "18 00 00 00 00 00 00 00  07 00 00 00  01 00 00 00  01 00 00 00
         03  00 00 00 00  05 00  03  00 20 00 00",
    );
    let want = Response::FeatureInfo(
        Feature::MsiX,
        FeatureInfo::MsiX(PcidMsixInfo {
            table_bar: 3,
            table_offset: 0,
            table_size: 5,
            pba_bar: 3,
            pba_offset: 0x2000,
        }),
    );
    assert_eq!(Response::decode_frame(&frame), Ok(want.clone()));
    assert_eq!(want.encode_frame(), frame);
}

#[test]
fn error_reply_golden() {
    let frame = hex("0c 00 00 00 00 00 00 00  06 00 00 00  00 00 00 00  01 00 00 00");
    assert_eq!(
        Response::decode_frame(&frame),
        Ok(Response::Error(ServerError::NonexistentFeature(
            Feature::MsiX
        )))
    );
    let frame = hex("08 00 00 00 00 00 00 00  06 00 00 00  01 00 00 00");
    assert_eq!(
        Response::decode_frame(&frame),
        Ok(Response::Error(ServerError::InvalidBitPattern))
    );
}

#[test]
fn other_requests_golden() {
    assert_eq!(
        Request::WriteConfig(0x04, 0x0406).encode(),
        hex("08 00 00 00 04 00 06 04 00 00")
    );
    assert_eq!(
        Request::EnableFeature(Feature::MsiX).encode(),
        hex("04 00 00 00 01 00 00 00")
    );
    assert_eq!(Request::RequestFeatures.encode(), hex("02 00 00 00"));
    assert_eq!(
        Request::SetFeatureInfo(SetFeatureInfo::Msi {
            multi_message_enable: Some(0),
            message_address_and_data: Some(MsiAddrAndData {
                addr: 0xFEE0_0000,
                data: 0x41,
            }),
            mask_bits: None,
        })
        .encode(),
        hex("06 00 00 00 00 00 00 00  01 00  01 00 00 e0 fe 00 00 00 00 41 00 00 00  00")
    );
    assert_eq!(
        Request::SetFeatureInfo(SetFeatureInfo::MsiX {
            function_mask: Some(false)
        })
        .encode(),
        hex("06 00 00 00 01 00 00 00 01 00")
    );
    let frame = hex(
        "14 00 00 00 00 00 00 00  02 00 00 00  02 00 00 00 00 00 00 00  00 00 00 00  01 00 00 00",
    );
    assert_eq!(
        Response::decode_frame(&frame),
        Ok(Response::AllFeatures(vec![Feature::Msi, Feature::MsiX]))
    );
    let frame = hex("04 00 00 00 00 00 00 00  0a 00 00 00");
    assert_eq!(Response::decode_frame(&frame), Ok(Response::WriteConfig));
}

/// Every golden frame cut short anywhere, or extended by a byte, is a typed error.
#[test]
fn every_truncation_is_a_typed_error() {
    let frames = [
        hex(I225_CONFIG_FRAME),
        Response::ReadConfig(7).encode_frame(),
        Response::VendorCapabilities(vec![vec![1, 2, 3], vec![]]).encode_frame(),
        Response::FeatureInfo(
            Feature::Msi,
            FeatureInfo::Msi(MsiInfo {
                log2_multiple_message_capable: 3,
                is_64bit: true,
                has_per_vector_masking: false,
            }),
        )
        .encode_frame(),
    ];
    for frame in &frames {
        assert!(Response::decode_frame(frame).is_ok());
        for cut in 0..frame.len() {
            let e = Response::decode_frame(&frame[..cut]).unwrap_err();
            assert!(matches!(e, ProtoError::Truncated(_)), "cut {cut}: {e:?}");
            // The payload alone, cut: a typed error too (a length that no longer fits is
            // `TooLong`, which is also how a lying length is refused).
            if cut >= LEN_PREFIX {
                assert!(matches!(
                    Response::decode(&frame[LEN_PREFIX..cut]),
                    Err(ProtoError::Truncated(_) | ProtoError::TooLong { .. })
                ));
            }
        }
        let mut longer = frame.clone();
        longer.push(0);
        assert_eq!(
            Response::decode_frame(&longer),
            Err(ProtoError::TrailingBytes(1))
        );
    }
}

#[test]
fn garbage_gives_typed_errors() {
    assert_eq!(
        Response::decode(&hex("0b 00 00 00")),
        Err(ProtoError::InvalidTag {
            what: "PcidClientResponse",
            tag: 11
        })
    );
    assert_eq!(
        Response::decode(&hex("04 00 00 00 02 00 00 00")),
        Err(ProtoError::InvalidTag {
            what: "PciFeature",
            tag: 2
        })
    );
    // MsiInfo.is_64bit = 2.
    assert_eq!(
        Response::decode(&hex("07 00 00 00 00 00 00 00 00 00 00 00 03 02 00")),
        Err(ProtoError::InvalidBool {
            field: "MsiInfo.is_64bit",
            value: 2
        })
    );
    // A vector claiming 2^60 features allocates nothing.
    assert_eq!(
        Response::decode(&hex("02 00 00 00 00 00 00 00 00 00 00 10")),
        Err(ProtoError::TooLong {
            field: "AllFeatures",
            len: 1 << 60
        })
    );
    assert_eq!(
        frame_len(u64::MAX.to_le_bytes()),
        Err(ProtoError::FrameTooLarge(u64::MAX))
    );
    // Option tag 2 in the legacy interrupt line.
    let mut f = hex(I225_CONFIG_FRAME);
    let at = f.len() - 8 - 3;
    f[at] = 2;
    assert!(matches!(
        Response::decode_frame(&f),
        Err(ProtoError::InvalidTag {
            what: "legacy_interrupt_line",
            tag: 2
        })
    ));
}

fn feature() -> impl Strategy<Value = Feature> {
    prop_oneof![Just(Feature::Msi), Just(Feature::MsiX)]
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        Just(Response::EnabledDevice),
        Just(Response::WriteConfig),
        any::<u32>().prop_map(Response::ReadConfig),
        feature().prop_map(Response::FeatureEnabled),
        (feature(), any::<bool>()).prop_map(|(f, e)| Response::FeatureStatus(f, e)),
        proptest::collection::vec(feature(), 0..4).prop_map(Response::AllFeatures),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 0..3)
            .prop_map(Response::VendorCapabilities),
        (
            any::<u8>(),
            any::<u32>(),
            any::<u16>(),
            any::<u8>(),
            any::<u32>()
        )
            .prop_map(
                |(table_bar, table_offset, table_size, pba_bar, pba_offset)| Response::FeatureInfo(
                    Feature::MsiX,
                    FeatureInfo::MsiX(PcidMsixInfo {
                        table_bar,
                        table_offset,
                        table_size,
                        pba_bar,
                        pba_offset
                    })
                )
            ),
        (any::<u16>(), any::<u8>(), any::<u32>(), any::<u64>()).prop_map(|(seg, irq, a, b)| {
            let mut f = i225();
            f.addr.segment = seg;
            f.bars[2] = PciBar::Memory64 {
                addr: b,
                size: a.into(),
            };
            f.legacy_interrupt_line = (irq % 2 == 0).then_some(LegacyInterruptLine {
                irq,
                phandled: (irq % 4 == 0).then_some((a, [a, 1, 2], b)),
            });
            Response::Config(f)
        }),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        Just(Request::EnableDevice),
        Just(Request::RequestConfig),
        Just(Request::RequestFeatures),
        Just(Request::RequestVendorCapabilities),
        feature().prop_map(Request::EnableFeature),
        feature().prop_map(Request::FeatureInfo),
        any::<u16>().prop_map(Request::ReadConfig),
        (any::<u16>(), any::<u32>()).prop_map(|(o, v)| Request::WriteConfig(o, v)),
        (any::<Option<bool>>())
            .prop_map(|m| Request::SetFeatureInfo(SetFeatureInfo::MsiX { function_mask: m })),
        (
            any::<Option<u8>>(),
            any::<Option<(u64, u32)>>(),
            any::<Option<u32>>()
        )
            .prop_map(
                |(mme, ad, mask)| Request::SetFeatureInfo(SetFeatureInfo::Msi {
                    multi_message_enable: mme,
                    message_address_and_data: ad.map(|(addr, data)| MsiAddrAndData { addr, data }),
                    mask_bits: mask,
                })
            ),
    ]
}

proptest! {
    #[test]
    fn responses_round_trip(r in response()) {
        prop_assert_eq!(Response::decode_frame(&r.encode_frame()), Ok(r));
    }

    #[test]
    fn requests_round_trip(r in request()) {
        prop_assert_eq!(Request::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = Response::decode(&bytes);
        let _ = Response::decode_frame(&bytes);
        let _ = Request::decode(&bytes);
    }

    #[test]
    fn corrupted_golden_frames_never_panic(at in 0usize..84, byte in any::<u8>()) {
        let mut f = hex(I225_CONFIG_FRAME);
        let at = at % f.len();
        f[at] = byte;
        let _ = Response::decode_frame(&f);
    }
}

fn msix(table_bar: u8, table_offset: u32, table_size: u16) -> PcidMsixInfo {
    PcidMsixInfo {
        table_bar,
        table_offset,
        table_size,
        pba_bar: table_bar,
        pba_offset: 0,
    }
}

#[test]
fn the_i225_msix_table_is_located_and_its_entries_lie_in_bar3() {
    let t = MsixTable::locate(&msix(3, 0, 5), &i225().bars).unwrap();
    assert_eq!((t.bar, t.offset, t.entries), (3, 0, 5));
    assert_eq!(
        (t.entry(0), t.entry(4), t.entry(5)),
        (Some(0), Some(64), None)
    );
    // The whole 0x4000-byte BAR is 1024 entries; one more is outside.
    assert!(MsixTable::locate(&msix(3, 0, 1024), &i225().bars).is_ok());
    let e = MsixTable::locate(&msix(3, 16, 1024), &i225().bars).unwrap_err();
    assert!(
        matches!(e, MsixTableError::Outside { end: 0x4010, .. }),
        "{e:?}"
    );
}

/// Regression (issue 23, pcid channel fuzzing): a table near 4 GiB in a 64-bit BAR passed the
/// old end-within-BAR check, and entry 1's offset then overflowed the u32 register offset
/// (a panic in a debug build, a write at the wrapped offset in release).
#[test]
fn an_msix_table_beyond_a_32_bit_offset_is_refused() {
    let mut bars = [PciBar::None; 6];
    bars[2] = PciBar::Memory64 {
        addr: 0x40_0000_0000,
        size: 8 << 30,
    };
    let info = msix(2, 0xFFFF_FFF0, 2);
    assert_eq!(
        MsixTable::locate(&info, &bars),
        Err(MsixTableError::Outside {
            bar: 2,
            offset: 0xFFFF_FFF0,
            end: 0x1_0000_0010,
            bar_len: 8 << 30
        })
    );
    // The last entry that still has a 32-bit offset is fine.
    let t = MsixTable::locate(&msix(2, 0xFFFF_FFF0, 1), &bars).unwrap();
    assert_eq!(t.entry(0), Some(0xFFFF_FFF0));
}

#[test]
fn an_msix_table_in_a_missing_io_or_unaligned_place_is_refused() {
    let bars = i225().bars;
    assert_eq!(
        MsixTable::locate(&msix(6, 0, 1), &bars),
        Err(MsixTableError::NoSuchBar(6))
    );
    assert_eq!(
        MsixTable::locate(&msix(1, 0, 1), &bars),
        Err(MsixTableError::NotMemoryBar(1))
    );
    assert!(matches!(
        MsixTable::locate(&msix(3, 8, 1), &bars),
        Err(MsixTableError::Outside { offset: 8, .. })
    ));
}

#[test]
fn addresses_parse_and_name_their_pcid_channel() {
    let a = PciAddress::parse("0000:00:04.0").unwrap();
    assert_eq!(
        a,
        PciAddress {
            segment: 0,
            bus: 0,
            device: 4,
            function: 0
        }
    );
    assert_eq!(a.pcid_channel_path(), "/scheme/pci/0000--00--04.0/channel");
    assert_eq!(
        PciAddress::parse("3a:1f.7").unwrap().to_string(),
        "0000:3a:1f.7"
    );
    for bad in [
        "",
        "04.0",
        "0000:00:04",
        "0000:00:20.0",
        "0000:00:04.8",
        "x:00:04.0",
        "00000:00:04.0",
        "0:0:0:0.0",
    ] {
        assert_eq!(PciAddress::parse(bad), None, "{bad}");
    }
}
