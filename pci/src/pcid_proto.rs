//! The pcid channel protocol, re-implemented from its wire format (shared/reference/
//! redox-platform.md §3; `pcid_interface` is git-only, so it is not a dependency).
//!
//! Pinned to redox-os/base 9dd6901d (2026-06-05), the revision of the Redox test kit's pcid
//! (`drivers/pcid/src/driver_interface/mod.rs` there). Earlier pin: redox-os/drivers 20ffe4d7
//! (2025-11-29), whose `PciFunction` had no `rom` field — booting igcd under the kit's pcid
//! found the difference ("3 trailing bytes", issue 27). The protocol has no version field, so
//! the golden-byte tests below are what keeps this encoder and pcid in step: bump them together
//! with a new pin.
//!
//! Framing (§3): a request is one `write` of its bincode-1.x encoding, no length prefix; a
//! response is an 8-byte little-endian length, then that many bytes of encoded response.
//! bincode 1.x defaults: little-endian fixed-width integers, enum tag = u32, `Option` tag = u8,
//! `bool` = u8 (0/1 only), `usize` = u64, `Vec` = u64 length + items, arrays without a length,
//! struct fields in declaration order.
//!
//! The decoder is total: any byte string gives a value or a typed [`ProtoError`], never a panic,
//! and it never allocates more than the input can hold. This module compiles on every target so
//! the framing is tested on the host; only the channel I/O (`crate::redox`) is Redox-only.

/// Largest response length accepted (pcid's own client refuses more than 1 MiB too).
pub const MAX_RESPONSE: u64 = 0x10_0000;
/// Length of the response length prefix.
pub const LEN_PREFIX: usize = 8;

/// Why bytes from pcid are not a valid response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The input ended inside the named field.
    #[error("pcid message truncated in {0}")]
    Truncated(&'static str),
    /// An enum or option tag pcid does not define (at the pinned revision).
    #[error("pcid message: invalid tag {tag} for {what}")]
    InvalidTag { what: &'static str, tag: u32 },
    /// A bool that is neither 0 nor 1 (bincode 1.x rejects those too).
    #[error("pcid message: invalid bool {value} in {field}")]
    InvalidBool { field: &'static str, value: u8 },
    /// Bytes left after the response.
    #[error("pcid message: {0} trailing bytes")]
    TrailingBytes(usize),
    /// A sequence longer than the bytes that remain could hold.
    #[error("pcid message: {field} claims {len} items")]
    TooLong { field: &'static str, len: u64 },
    /// A response length prefix beyond [`MAX_RESPONSE`].
    #[error("pcid response of {0} bytes exceeds the 1 MiB limit")]
    FrameTooLarge(u64),
}

/// `pci_types::PciAddress` as pcid serialises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PciAddress {
    pub segment: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddress {
    /// A name usable in scheme names and log paths: `pci-SSSS-BB-DD.F` (no `:`, which scheme
    /// names cannot hold). Our own format, not pcid's `PciFunction::name()`, whose spelling
    /// changed with pci_types (§2): nothing here parses it back.
    pub fn scheme_name(&self) -> String {
        format!(
            "pci-{:04x}-{:02x}-{:02x}.{}",
            self.segment, self.bus, self.device, self.function
        )
    }
}

impl PciAddress {
    /// Parses `SSSS:BB:DD.F` or `BB:DD.F` (hex; function 0–7, device 0–31).
    pub fn parse(s: &str) -> Option<PciAddress> {
        let (rest, function) = s.rsplit_once('.')?;
        let mut parts: Vec<&str> = rest.split(':').collect();
        if parts.len() == 2 {
            parts.insert(0, "0000");
        }
        let [seg, bus, dev] = parts[..] else {
            return None;
        };
        let hex8 = |x: &str| {
            (x.len() <= 2)
                .then(|| u8::from_str_radix(x, 16).ok())
                .flatten()
        };
        let addr = PciAddress {
            segment: (seg.len() <= 4)
                .then(|| u16::from_str_radix(seg, 16).ok())
                .flatten()?,
            bus: hex8(bus)?,
            device: hex8(dev).filter(|d| *d < 32)?,
            function: function.parse().ok().filter(|f| *f < 8)?,
        };
        Some(addr)
    }

    /// The function's channel in pcid's scheme, as a driver pcid-spawner did not start opens
    /// it (base 9dd6901d `drivers/pcid/src/scheme.rs`: the address with `--` for `:`; pcid
    /// refuses a second open while a channel is held, ENOLCK, and frees it on close).
    pub fn pcid_channel_path(&self) -> String {
        format!(
            "/scheme/pci/{:04x}--{:02x}--{:02x}.{}/channel",
            self.segment, self.bus, self.device, self.function
        )
    }
}

impl std::fmt::Display for PciAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.segment, self.bus, self.device, self.function
        )
    }
}

/// One BAR as pcid reports it (`PciBar`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PciBar {
    #[default]
    None,
    Memory32 {
        addr: u32,
        size: u32,
    },
    Memory64 {
        addr: u64,
        size: u64,
    },
    Port(u16),
}

impl PciBar {
    /// Physical address and size of a memory BAR.
    pub fn memory(&self) -> Option<(u64, u64)> {
        match *self {
            PciBar::Memory32 { addr, size } => Some((addr.into(), size.into())),
            PciBar::Memory64 { addr, size } => Some((addr, size)),
            PciBar::None | PciBar::Port(_) => None,
        }
    }
}

/// Why the MSI-X table pcid described cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsixTableError {
    #[error("MSI-X table in BAR {0}, which does not exist")]
    NoSuchBar(u8),
    #[error("MSI-X table in BAR {0}, which is not a memory BAR")]
    NotMemoryBar(u8),
    /// Misaligned, past the BAR's end, or beyond the 4 GiB a 32-bit register offset reaches.
    #[error("MSI-X table {offset:#x}..{end:#x} outside BAR{bar} of {bar_len:#x} bytes")]
    Outside {
        bar: u8,
        offset: u32,
        end: u64,
        bar_len: u64,
    },
}

/// Where a function's MSI-X table lies, from pcid's `MsixInfo` and BARs: every one of its
/// entries lies inside its memory BAR at an offset the 32-bit register funnel reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixTable {
    pub bar: u8,
    pub offset: u32,
    pub entries: u16,
}

impl MsixTable {
    /// Bytes of one entry: address low, address high, data, vector control.
    pub const ENTRY_LEN: u32 = 16;

    /// Checks pcid's description of the table against the BARs it reported.
    pub fn locate(info: &PcidMsixInfo, bars: &[PciBar; 6]) -> Result<Self, MsixTableError> {
        let bar = info.table_bar;
        let b = bars
            .get(usize::from(bar))
            .ok_or(MsixTableError::NoSuchBar(bar))?;
        let (_, bar_len) = b.memory().ok_or(MsixTableError::NotMemoryBar(bar))?;
        let offset = info.table_offset;
        let end = u64::from(offset) + u64::from(Self::ENTRY_LEN) * u64::from(info.table_size);
        if offset % Self::ENTRY_LEN != 0 || end > bar_len || end > 1 << 32 {
            return Err(MsixTableError::Outside {
                bar,
                offset,
                end,
                bar_len,
            });
        }
        Ok(Self {
            bar,
            offset,
            entries: info.table_size,
        })
    }

    /// Offset of entry `i`'s first dword in the BAR; `None` past the table.
    pub fn entry(&self, i: u16) -> Option<u32> {
        // Cannot overflow: locate() checked the table's end against 2^32.
        (i < self.entries).then(|| self.offset + Self::ENTRY_LEN * u32::from(i))
    }
}

/// `LegacyInterruptLine`: the INTx line pcid routed, or a device-tree interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LegacyInterruptLine {
    pub irq: u8,
    /// (phandle, address cells, number of cells used) on device-tree systems.
    pub phandled: Option<(u32, [u32; 3], u64)>,
}

/// `FullDeviceId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FullDeviceId {
    pub vendor_id: u16,
    pub device_id: u16,
    pub class: u8,
    pub subclass: u8,
    pub interface: u8,
    pub revision: u8,
}

/// `PciRom`: the function's expansion ROM BAR (base commit 0fee2618, 2026).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PciRom {
    pub addr: u32,
    pub size: u32,
    pub enabled: bool,
}

/// pcid's `PciFunction` (inside `SubdriverArguments`): what `RequestConfig` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FunctionInfo {
    pub addr: PciAddress,
    pub bars: [PciBar; 6],
    /// The option ROM, if the function has one (the i225 has none).
    pub rom: Option<PciRom>,
    pub legacy_interrupt_line: Option<LegacyInterruptLine>,
    pub full_device_id: FullDeviceId,
}

/// `PciFeature`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    Msi,
    MsiX,
}

/// `MsiInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MsiInfo {
    pub log2_multiple_message_capable: u8,
    pub is_64bit: bool,
    pub has_per_vector_masking: bool,
}

/// `MsixInfo` (pcid's; the config-space parser's [`crate::MsixInfo`] also has the cap offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PcidMsixInfo {
    pub table_bar: u8,
    pub table_offset: u32,
    pub table_size: u16,
    pub pba_bar: u8,
    pub pba_offset: u32,
}

/// `PciFeatureInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FeatureInfo {
    Msi(MsiInfo),
    MsiX(PcidMsixInfo),
}

/// `MsiAddrAndData`: one MSI message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MsiAddrAndData {
    pub addr: u64,
    pub data: u32,
}

/// `SetFeatureInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetFeatureInfo {
    Msi {
        multi_message_enable: Option<u8>,
        message_address_and_data: Option<MsiAddrAndData>,
        mask_bits: Option<u32>,
    },
    MsiX {
        function_mask: Option<bool>,
    },
}

/// `PcidServerResponseError` (at the pinned revision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerError {
    NonexistentFeature(Feature),
    InvalidBitPattern,
}

/// `PcidClientRequest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    EnableDevice,
    RequestConfig,
    RequestFeatures,
    RequestVendorCapabilities,
    EnableFeature(Feature),
    FeatureInfo(Feature),
    SetFeatureInfo(SetFeatureInfo),
    ReadConfig(u16),
    WriteConfig(u16, u32),
}

/// `PcidClientResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Response {
    EnabledDevice,
    Config(FunctionInfo),
    AllFeatures(Vec<Feature>),
    /// `VendorSpecificCapability { data: Vec<u8> }` each.
    VendorCapabilities(Vec<Vec<u8>>),
    FeatureEnabled(Feature),
    /// The feature and whether it is enabled (`FeatureStatus::Enabled` = 0, `Disabled` = 1).
    FeatureStatus(Feature, bool),
    Error(ServerError),
    FeatureInfo(Feature, FeatureInfo),
    SetFeatureInfo(Feature),
    ReadConfig(u32),
    WriteConfig,
}

// ---------------------------------------------------------------------------------------------
// Encoding

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    fn tag(&mut self, t: u32) {
        self.u32(t);
    }
    fn option<T>(&mut self, v: &Option<T>, f: impl FnOnce(&mut Self, &T)) {
        match v {
            None => self.u8(0),
            Some(x) => {
                self.u8(1);
                f(self, x);
            }
        }
    }
    fn feature(&mut self, f: Feature) {
        self.tag(match f {
            Feature::Msi => 0,
            Feature::MsiX => 1,
        });
    }
    fn function(&mut self, f: &FunctionInfo) {
        self.u16(f.addr.segment);
        self.u8(f.addr.bus);
        self.u8(f.addr.device);
        self.u8(f.addr.function);
        for bar in &f.bars {
            match *bar {
                PciBar::None => self.tag(0),
                PciBar::Memory32 { addr, size } => {
                    self.tag(1);
                    self.u32(addr);
                    self.u32(size);
                }
                PciBar::Memory64 { addr, size } => {
                    self.tag(2);
                    self.u64(addr);
                    self.u64(size);
                }
                PciBar::Port(p) => {
                    self.tag(3);
                    self.u16(p);
                }
            }
        }
        self.option(&f.rom, |w, r| {
            w.u32(r.addr);
            w.u32(r.size);
            w.bool(r.enabled);
        });
        self.option(&f.legacy_interrupt_line, |w, l| {
            w.u8(l.irq);
            w.option(&l.phandled, |w, (ph, cells, n)| {
                w.u32(*ph);
                cells.iter().for_each(|c| w.u32(*c));
                w.u64(*n);
            });
        });
        let id = &f.full_device_id;
        self.u16(id.vendor_id);
        self.u16(id.device_id);
        self.u8(id.class);
        self.u8(id.subclass);
        self.u8(id.interface);
        self.u8(id.revision);
    }
}

impl Request {
    /// The bytes to `write` to the channel, in one call.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(32));
        match *self {
            Request::EnableDevice => w.tag(0),
            Request::RequestConfig => w.tag(1),
            Request::RequestFeatures => w.tag(2),
            Request::RequestVendorCapabilities => w.tag(3),
            Request::EnableFeature(f) => {
                w.tag(4);
                w.feature(f);
            }
            Request::FeatureInfo(f) => {
                w.tag(5);
                w.feature(f);
            }
            Request::SetFeatureInfo(info) => {
                w.tag(6);
                match info {
                    SetFeatureInfo::Msi {
                        multi_message_enable,
                        message_address_and_data,
                        mask_bits,
                    } => {
                        w.tag(0);
                        w.option(&multi_message_enable, |w, v| w.u8(*v));
                        w.option(&message_address_and_data, |w, m| {
                            w.u64(m.addr);
                            w.u32(m.data);
                        });
                        w.option(&mask_bits, |w, v| w.u32(*v));
                    }
                    SetFeatureInfo::MsiX { function_mask } => {
                        w.tag(1);
                        w.option(&function_mask, |w, v| w.bool(*v));
                    }
                }
            }
            Request::ReadConfig(off) => {
                w.tag(7);
                w.u16(off);
            }
            Request::WriteConfig(off, v) => {
                w.tag(8);
                w.u16(off);
                w.u32(v);
            }
        }
        w.0
    }
}

impl Response {
    /// The response payload (what follows the length prefix). pcid's side of the protocol; here
    /// for tests and fakes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(64));
        match self {
            Response::EnabledDevice => w.tag(0),
            Response::Config(f) => {
                w.tag(1);
                w.function(f);
            }
            Response::AllFeatures(fs) => {
                w.tag(2);
                w.u64(fs.len() as u64);
                fs.iter().for_each(|f| w.feature(*f));
            }
            Response::VendorCapabilities(caps) => {
                w.tag(3);
                w.u64(caps.len() as u64);
                for c in caps {
                    w.u64(c.len() as u64);
                    w.0.extend_from_slice(c);
                }
            }
            Response::FeatureEnabled(f) => {
                w.tag(4);
                w.feature(*f);
            }
            Response::FeatureStatus(f, enabled) => {
                w.tag(5);
                w.feature(*f);
                w.tag(if *enabled { 0 } else { 1 });
            }
            Response::Error(e) => {
                w.tag(6);
                match e {
                    ServerError::NonexistentFeature(f) => {
                        w.tag(0);
                        w.feature(*f);
                    }
                    ServerError::InvalidBitPattern => w.tag(1),
                }
            }
            Response::FeatureInfo(f, info) => {
                w.tag(7);
                w.feature(*f);
                match info {
                    FeatureInfo::Msi(m) => {
                        w.tag(0);
                        w.u8(m.log2_multiple_message_capable);
                        w.bool(m.is_64bit);
                        w.bool(m.has_per_vector_masking);
                    }
                    FeatureInfo::MsiX(m) => {
                        w.tag(1);
                        w.u8(m.table_bar);
                        w.u32(m.table_offset);
                        w.u16(m.table_size);
                        w.u8(m.pba_bar);
                        w.u32(m.pba_offset);
                    }
                }
            }
            Response::SetFeatureInfo(f) => {
                w.tag(8);
                w.feature(*f);
            }
            Response::ReadConfig(v) => {
                w.tag(9);
                w.u32(*v);
            }
            Response::WriteConfig => w.tag(10),
        }
        w.0
    }

    /// The whole frame as pcid writes it: length prefix and payload.
    pub fn encode_frame(&self) -> Vec<u8> {
        let payload = self.encode();
        let mut out = (payload.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&payload);
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::Truncated(field));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ProtoError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, ProtoError> {
        Ok(self.array::<1>(field)?[0])
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }
    fn bool(&mut self, field: &'static str) -> Result<bool, ProtoError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(ProtoError::InvalidBool { field, value }),
        }
    }
    fn tag(&mut self, what: &'static str, max: u32) -> Result<u32, ProtoError> {
        let tag = self.u32(what)?;
        if tag > max {
            return Err(ProtoError::InvalidTag { what, tag });
        }
        Ok(tag)
    }
    fn option<T>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&mut Self) -> Result<T, ProtoError>,
    ) -> Result<Option<T>, ProtoError> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => f(self).map(Some),
            tag => Err(ProtoError::InvalidTag {
                what,
                tag: tag.into(),
            }),
        }
    }
    /// A sequence length, checked against the bytes left (each item takes at least `min_item`).
    fn len(&mut self, field: &'static str, min_item: usize) -> Result<usize, ProtoError> {
        let len = self.u64(field)?;
        let fits = (self.buf.len() / min_item.max(1)) as u64;
        if len > fits {
            return Err(ProtoError::TooLong { field, len });
        }
        Ok(len as usize)
    }
    fn feature(&mut self) -> Result<Feature, ProtoError> {
        Ok(match self.tag("PciFeature", 1)? {
            0 => Feature::Msi,
            _ => Feature::MsiX,
        })
    }
    fn bar(&mut self) -> Result<PciBar, ProtoError> {
        Ok(match self.tag("PciBar", 3)? {
            0 => PciBar::None,
            1 => PciBar::Memory32 {
                addr: self.u32("PciBar.addr")?,
                size: self.u32("PciBar.size")?,
            },
            2 => PciBar::Memory64 {
                addr: self.u64("PciBar.addr")?,
                size: self.u64("PciBar.size")?,
            },
            _ => PciBar::Port(self.u16("PciBar.port")?),
        })
    }
    fn function(&mut self) -> Result<FunctionInfo, ProtoError> {
        let addr = PciAddress {
            segment: self.u16("PciAddress.segment")?,
            bus: self.u8("PciAddress.bus")?,
            device: self.u8("PciAddress.device")?,
            function: self.u8("PciAddress.function")?,
        };
        let mut bars = [PciBar::None; 6];
        for b in &mut bars {
            *b = self.bar()?;
        }
        let rom = self.option("rom", |r| {
            Ok(PciRom {
                addr: r.u32("PciRom.addr")?,
                size: r.u32("PciRom.size")?,
                enabled: r.bool("PciRom.enabled")?,
            })
        })?;
        let legacy_interrupt_line = self.option("legacy_interrupt_line", |r| {
            Ok(LegacyInterruptLine {
                irq: r.u8("LegacyInterruptLine.irq")?,
                phandled: r.option("LegacyInterruptLine.phandled", |r| {
                    let ph = r.u32("phandle")?;
                    let cells = [r.u32("cells")?, r.u32("cells")?, r.u32("cells")?];
                    Ok((ph, cells, r.u64("cell count")?))
                })?,
            })
        })?;
        let full_device_id = FullDeviceId {
            vendor_id: self.u16("FullDeviceId.vendor_id")?,
            device_id: self.u16("FullDeviceId.device_id")?,
            class: self.u8("FullDeviceId.class")?,
            subclass: self.u8("FullDeviceId.subclass")?,
            interface: self.u8("FullDeviceId.interface")?,
            revision: self.u8("FullDeviceId.revision")?,
        };
        Ok(FunctionInfo {
            addr,
            bars,
            rom,
            legacy_interrupt_line,
            full_device_id,
        })
    }
    fn finish(self) -> Result<(), ProtoError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::TrailingBytes(self.buf.len()))
        }
    }
}

/// Decodes the 8-byte length prefix of a response, refusing lengths beyond [`MAX_RESPONSE`].
pub fn frame_len(prefix: [u8; LEN_PREFIX]) -> Result<usize, ProtoError> {
    let len = u64::from_le_bytes(prefix);
    if len > MAX_RESPONSE {
        return Err(ProtoError::FrameTooLarge(len));
    }
    Ok(len as usize)
}

impl Response {
    /// Decodes a response payload (the bytes after the length prefix). Total: trailing bytes,
    /// unknown tags and truncation are typed errors.
    pub fn decode(payload: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader { buf: payload };
        let resp = match r.tag("PcidClientResponse", 10)? {
            0 => Response::EnabledDevice,
            1 => Response::Config(r.function()?),
            2 => {
                let n = r.len("AllFeatures", 4)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(r.feature()?);
                }
                Response::AllFeatures(v)
            }
            3 => {
                let n = r.len("VendorCapabilities", 8)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = r.len("VendorSpecificCapability.data", 1)?;
                    v.push(r.take(len, "VendorSpecificCapability.data")?.to_vec());
                }
                Response::VendorCapabilities(v)
            }
            4 => Response::FeatureEnabled(r.feature()?),
            5 => {
                let f = r.feature()?;
                Response::FeatureStatus(f, r.tag("FeatureStatus", 1)? == 0)
            }
            6 => Response::Error(match r.tag("PcidServerResponseError", 1)? {
                0 => ServerError::NonexistentFeature(r.feature()?),
                _ => ServerError::InvalidBitPattern,
            }),
            7 => {
                let f = r.feature()?;
                let info = match r.tag("PciFeatureInfo", 1)? {
                    0 => FeatureInfo::Msi(MsiInfo {
                        log2_multiple_message_capable: r.u8("MsiInfo.log2")?,
                        is_64bit: r.bool("MsiInfo.is_64bit")?,
                        has_per_vector_masking: r.bool("MsiInfo.has_per_vector_masking")?,
                    }),
                    _ => FeatureInfo::MsiX(PcidMsixInfo {
                        table_bar: r.u8("MsixInfo.table_bar")?,
                        table_offset: r.u32("MsixInfo.table_offset")?,
                        table_size: r.u16("MsixInfo.table_size")?,
                        pba_bar: r.u8("MsixInfo.pba_bar")?,
                        pba_offset: r.u32("MsixInfo.pba_offset")?,
                    }),
                };
                Response::FeatureInfo(f, info)
            }
            8 => Response::SetFeatureInfo(r.feature()?),
            9 => Response::ReadConfig(r.u32("ReadConfig")?),
            _ => Response::WriteConfig,
        };
        r.finish()?;
        Ok(resp)
    }

    /// Decodes a whole frame (length prefix and payload) held in one buffer.
    pub fn decode_frame(frame: &[u8]) -> Result<Self, ProtoError> {
        let Some((prefix, payload)) = frame.split_first_chunk::<LEN_PREFIX>() else {
            return Err(ProtoError::Truncated("length prefix"));
        };
        let len = frame_len(*prefix)?;
        if payload.len() < len {
            return Err(ProtoError::Truncated("response payload"));
        }
        if payload.len() > len {
            return Err(ProtoError::TrailingBytes(payload.len() - len));
        }
        Self::decode(payload)
    }
}

impl Request {
    /// Decodes a request (pcid's side; for tests and fakes). Total like [`Response::decode`].
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader { buf: bytes };
        let req = match r.tag("PcidClientRequest", 8)? {
            0 => Request::EnableDevice,
            1 => Request::RequestConfig,
            2 => Request::RequestFeatures,
            3 => Request::RequestVendorCapabilities,
            4 => Request::EnableFeature(r.feature()?),
            5 => Request::FeatureInfo(r.feature()?),
            6 => Request::SetFeatureInfo(match r.tag("SetFeatureInfo", 1)? {
                0 => SetFeatureInfo::Msi {
                    multi_message_enable: r.option("multi_message_enable", |r| r.u8("mme"))?,
                    message_address_and_data: r.option("message_address_and_data", |r| {
                        Ok(MsiAddrAndData {
                            addr: r.u64("MsiAddrAndData.addr")?,
                            data: r.u32("MsiAddrAndData.data")?,
                        })
                    })?,
                    mask_bits: r.option("mask_bits", |r| r.u32("mask_bits"))?,
                },
                _ => SetFeatureInfo::MsiX {
                    function_mask: r.option("function_mask", |r| r.bool("function_mask"))?,
                },
            }),
            7 => Request::ReadConfig(r.u16("ReadConfig.offset")?),
            _ => Request::WriteConfig(r.u16("WriteConfig.offset")?, r.u32("WriteConfig.value")?),
        };
        r.finish()?;
        Ok(req)
    }
}

#[cfg(test)]
mod tests;
