//! The Redox backend (reference §2–§5): the pcid channel, BARs and DMA from the `memory`
//! scheme, vectors from the `irq` scheme.
//!
//! Everything that needs a resource outside the `memory` and `pipe` schemes (the irq files, the
//! translation handle, BAR mappings) must be opened before the driver calls `setrens(0, 0)`
//! (§10): map every BAR, allocate every vector and call [`RedoxPciFunction::prepare_dma`] first.

mod irq;
mod mem;

/// Bounded waits: the time-scheme timer the daemons share, from ptp-ipc.
pub use ptp_ipc::redox::timer as time;

use std::sync::{Arc, Mutex, MutexGuard};

use libredox::Fd;

pub use irq::{IrqKind, RedoxIrq};

use crate::pcid_proto::{
    self, Feature, FeatureInfo, FunctionInfo, MsiAddrAndData, MsixTable, ProtoError, Request,
    Response, SetFeatureInfo,
};
use crate::{DmaRegion, IrqMode, IrqSupport, Mmio, PciError, PciFunction, PciIds, VolatileMmio};

/// The environment variable pcid-spawner passes the channel fd in (§2).
pub const CHANNEL_ENV: &str = "PCID_CLIENT_CHANNEL";

/// Errors of the Redox backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedoxPciError {
    /// `PCID_CLIENT_CHANNEL` is missing or not a descriptor number.
    #[error("{CHANNEL_ENV}: {0} (is the driver started by pcid-spawner?)")]
    Env(String),
    /// Reading or writing the channel failed.
    #[error("pcid channel {op}: {err}")]
    Channel { op: &'static str, err: String },
    /// pcid sent bytes that are not a response.
    #[error("pcid protocol: {0}")]
    Proto(#[from] ProtoError),
    /// pcid answered a request with a response of another kind.
    #[error("pcid answered {req} with {got}")]
    Unexpected { req: &'static str, got: String },
    /// pcid refused a request.
    #[error("pcid refused {req}: {err:?}")]
    Refused {
        req: &'static str,
        err: pcid_proto::ServerError,
    },
    /// A BAR that cannot be mapped (absent, I/O port, zero-sized, table outside it).
    #[error("bad BAR: {0}")]
    BadBar(String),
    /// No interrupt mechanism fits the request.
    #[error("interrupts: {0}")]
    NoInterrupts(String),
    /// An OS call on a scheme path failed.
    #[error("{what}: {err}")]
    Os { what: String, err: String },
    /// The function's channel is held by another driver (pcid's ENOLCK).
    #[error("{0}: held by another driver (pcid lends one channel per function)")]
    Held(String),
}

impl From<RedoxPciError> for PciError {
    fn from(e: RedoxPciError) -> Self {
        match e {
            RedoxPciError::NoInterrupts(s) => PciError::Interrupts(s),
            RedoxPciError::Env(_) => PciError::NotFound(e.to_string()),
            RedoxPciError::Os { .. } | RedoxPciError::BadBar(_) => PciError::Io(e.to_string()),
            _ => PciError::Unavailable(e.to_string()),
        }
    }
}

/// The channel to pcid. pcid computes each response inside the `write` of the request and
/// queues it for the following reads, so a read never waits (drivers/pcid/src/scheme.rs at the
/// pinned revision: a read with no response pending is EINVAL, and so is a write while one is).
pub struct PcidChannel {
    fd: Fd,
}

impl PcidChannel {
    /// The channel whose fd number pcid-spawner put in [`CHANNEL_ENV`].
    pub fn from_env() -> Result<Self, RedoxPciError> {
        let v = std::env::var(CHANNEL_ENV).map_err(|e| RedoxPciError::Env(e.to_string()))?;
        let raw: usize = v
            .trim()
            .parse()
            .map_err(|_| RedoxPciError::Env(format!("{v:?} is not a descriptor")))?;
        // The fd is ours from here on; close it on exec. relibc's POSIX fcntl, not libredox's
        // (`redox_fcntl_v0` needs a 2026-07 relibc; README, minimum Redox).
        if let Ok(fd) = libc::c_int::try_from(raw) {
            // Safety: fcntl on a descriptor number; no memory is passed.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        Ok(Self { fd: Fd::new(raw) })
    }

    /// The channel of the function at `addr`, opened by path: how a driver pcid-spawner did not
    /// start (a restart by hand) reaches pcid.
    pub fn open(addr: &pcid_proto::PciAddress) -> Result<Self, RedoxPciError> {
        let path = addr.pcid_channel_path();
        match Fd::open(&path, libredox::flag::O_RDWR | libredox::flag::O_CLOEXEC, 0) {
            Ok(fd) => Ok(Self { fd }),
            Err(e) if e.errno() == libredox::errno::ENOLCK => Err(RedoxPciError::Held(path)),
            Err(e) => Err(RedoxPciError::Os {
                what: path,
                err: e.to_string(),
            }),
        }
    }

    /// One request, one response: the request in one `write` (§3), then the 8-byte length and
    /// the payload.
    pub fn call(&self, req: &Request) -> Result<Response, RedoxPciError> {
        let bytes = req.encode();
        let n = self.fd.write(&bytes).map_err(|e| RedoxPciError::Channel {
            op: "write",
            err: e.to_string(),
        })?;
        if n != bytes.len() {
            return Err(RedoxPciError::Channel {
                op: "write",
                err: format!("short write {n} of {}", bytes.len()),
            });
        }
        let mut prefix = [0u8; pcid_proto::LEN_PREFIX];
        self.read_exact(&mut prefix)?;
        let mut payload = vec![0u8; pcid_proto::frame_len(prefix)?];
        self.read_exact(&mut payload)?;
        Ok(Response::decode(&payload)?)
    }

    /// Reads exactly `buf.len()` bytes. Bounded: every read returns at least one byte of the
    /// queued response or fails (EOF = pcid closed the channel).
    fn read_exact(&self, buf: &mut [u8]) -> Result<(), RedoxPciError> {
        let mut done = 0;
        while done < buf.len() {
            match self.fd.read(&mut buf[done..]) {
                Ok(0) => {
                    return Err(RedoxPciError::Channel {
                        op: "read",
                        err: "end of file".into(),
                    });
                }
                Ok(n) => done = (done + n).min(buf.len()),
                Err(e) if e.is_interrupt() => {}
                Err(e) => {
                    return Err(RedoxPciError::Channel {
                        op: "read",
                        err: e.to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

fn unexpected(req: &'static str, got: Response) -> RedoxPciError {
    match got {
        Response::Error(err) => RedoxPciError::Refused { req, err },
        other => RedoxPciError::Unexpected {
            req,
            got: format!("{other:?}"),
        },
    }
}

/// A PCI function owned through pcid.
pub struct RedoxPciFunction {
    chan: Mutex<PcidChannel>,
    info: FunctionInfo,
    ids: PciIds,
    /// Mapped BARs, cached: the MSI-X table usually shares a BAR with registers (§4).
    bars: [Option<VolatileMmio>; 6],
    translation: Option<Arc<mem::Translation>>,
    vectors: Vec<IrqKind>,
}

impl RedoxPciFunction {
    /// Connects through [`CHANNEL_ENV`], enables the device (bus mastering, memory decoding;
    /// pcid-spawner already did, and pcid treats a repeat as harmless) and reads its
    /// configuration afterwards, so the legacy interrupt line is the one pcid routed.
    pub fn from_env() -> Result<Self, RedoxPciError> {
        Self::with_channel(PcidChannel::from_env()?)
    }

    /// The same through the channel opened by path (`igcd --pci ADDR` on Redox).
    pub fn open(addr: &pcid_proto::PciAddress) -> Result<Self, RedoxPciError> {
        Self::with_channel(PcidChannel::open(addr)?)
    }

    pub fn with_channel(chan: PcidChannel) -> Result<Self, RedoxPciError> {
        match chan.call(&Request::EnableDevice)? {
            Response::EnabledDevice => {}
            other => return Err(unexpected("EnableDevice", other)),
        }
        let info = match chan.call(&Request::RequestConfig)? {
            Response::Config(info) => info,
            other => return Err(unexpected("RequestConfig", other)),
        };
        let ss = match chan.call(&Request::ReadConfig(crate::config::offsets::SUBSYSTEM))? {
            Response::ReadConfig(v) => v,
            other => return Err(unexpected("ReadConfig", other)),
        };
        let id = info.full_device_id;
        let ids = PciIds {
            vendor: id.vendor_id,
            device: id.device_id,
            class: id.class,
            subclass: id.subclass,
            interface: id.interface,
            revision: id.revision,
            subsystem_vendor: ss as u16,
            subsystem: (ss >> 16) as u16,
        };
        Ok(Self {
            chan: Mutex::new(chan),
            info,
            ids,
            bars: Default::default(),
            translation: None,
            vectors: Vec::new(),
        })
    }

    /// What pcid reported for this function.
    pub fn info(&self) -> &FunctionInfo {
        &self.info
    }

    /// The name used for schemes and logs, e.g. `pci-0000-03-00.0`.
    pub fn name(&self) -> String {
        self.info.addr.scheme_name()
    }

    /// How each allocated vector is delivered.
    pub fn vector_kinds(&self) -> &[IrqKind] {
        &self.vectors
    }

    fn chan(&self) -> MutexGuard<'_, PcidChannel> {
        // The channel holds no invariant a panic could break between calls.
        self.chan.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn call(&self, req: Request) -> Result<Response, RedoxPciError> {
        self.chan().call(&req)
    }

    /// Opens the translation handle DMA allocation needs; call before `setrens` (§10).
    pub fn prepare_dma(&mut self) -> Result<(), RedoxPciError> {
        if self.translation.is_none() {
            self.translation = Some(Arc::new(mem::Translation::open()?));
        }
        Ok(())
    }

    fn bar(&mut self, bar: u8) -> Result<VolatileMmio, RedoxPciError> {
        let slot = self
            .bars
            .get_mut(usize::from(bar))
            .ok_or_else(|| RedoxPciError::BadBar(format!("no BAR {bar}")))?;
        if let Some(m) = slot {
            return Ok(m.clone());
        }
        let (phys, size) = self.info.bars[usize::from(bar)]
            .memory()
            .ok_or_else(|| RedoxPciError::BadBar(format!("BAR {bar} is not a memory BAR")))?;
        let (owner, ptr) = mem::map_physical(phys, size)?;
        let len = usize::try_from(size)
            .map_err(|_| RedoxPciError::BadBar(format!("BAR {bar} of {size:#x} bytes")))?;
        // Safety: `ptr..ptr+len` is an uncacheable mapping of this BAR's registers made just
        // now, kept alive by `owner` (unmapped only when the last clone drops it); BAR
        // addresses are at least 16-byte aligned, so 4-byte accesses are aligned.
        let mmio = unsafe { VolatileMmio::new(ptr, len, owner) };
        *slot = Some(mmio.clone());
        log::debug!("BAR{bar}: {phys:#x} ({size:#x} bytes) mapped");
        Ok(mmio)
    }

    /// MSI-X, programmed by us (§5): map the table, mask every entry, enable MSI-X, then write
    /// and unmask entries `0..count`, each to its own vector on the BSP.
    fn alloc_msix(&mut self, count: u16) -> Result<Vec<RedoxIrq>, RedoxPciError> {
        let info = match self.call(Request::FeatureInfo(Feature::MsiX))? {
            Response::FeatureInfo(Feature::MsiX, FeatureInfo::MsiX(i)) => i,
            other => return Err(unexpected("FeatureInfo(MsiX)", other)),
        };
        if info.table_size < count {
            return Err(RedoxPciError::NoInterrupts(format!(
                "{count} vectors requested, the MSI-X table has {}",
                info.table_size
            )));
        }
        let layout = MsixTable::locate(&info, &self.info.bars)
            .map_err(|e| RedoxPciError::BadBar(e.to_string()))?;
        let table = self.bar(layout.bar)?;
        // Entry i: addr_lo, addr_hi, msg_data, vec_ctl (bit 0 = masked); every i below
        // `entries` has one (locate checked the whole table).
        let entry = |i: u16| {
            layout
                .entry(i)
                .ok_or_else(|| RedoxPciError::BadBar(format!("no MSI-X entry {i}")))
        };
        for i in 0..layout.entries {
            let ctl = entry(i)? + 12;
            table.write32(ctl, table.read32(ctl) | 1);
        }
        match self.call(Request::EnableFeature(Feature::MsiX))? {
            Response::FeatureEnabled(Feature::MsiX) => {}
            other => return Err(unexpected("EnableFeature(MsiX)", other)),
        }
        let apic = irq::read_bsp_apic_id()?;
        let mut out = Vec::with_capacity(usize::from(count));
        for i in 0..count {
            let (fd, vector) = irq::alloc_cpu_vector(apic)?;
            let (addr, data) = irq::msi_message(apic, vector)?;
            let e = entry(i)?;
            table.write32(e, addr as u32);
            table.write32(e + 4, (addr >> 32) as u32);
            table.write32(e + 8, data);
            table.write32(e + 12, table.read32(e + 12) & !1);
            let kind = IrqKind::MsiX {
                entry: i,
                apic,
                vector,
            };
            out.push(irq::vector(fd, kind)?);
            self.vectors.push(kind);
        }
        Ok(out)
    }

    /// One MSI message on the BSP (multiple-message enable 0).
    fn alloc_msi(&mut self) -> Result<RedoxIrq, RedoxPciError> {
        let apic = irq::read_bsp_apic_id()?;
        let (fd, vector) = irq::alloc_cpu_vector(apic)?;
        let (addr, data) = irq::msi_message(apic, vector)?;
        let set = SetFeatureInfo::Msi {
            multi_message_enable: Some(0),
            message_address_and_data: Some(MsiAddrAndData { addr, data }),
            mask_bits: None,
        };
        match self.call(Request::SetFeatureInfo(set))? {
            Response::SetFeatureInfo(Feature::Msi) => {}
            other => return Err(unexpected("SetFeatureInfo(Msi)", other)),
        }
        match self.call(Request::EnableFeature(Feature::Msi))? {
            Response::FeatureEnabled(Feature::Msi) => {}
            other => return Err(unexpected("EnableFeature(Msi)", other)),
        }
        let kind = IrqKind::Msi { apic, vector };
        self.vectors.push(kind);
        irq::vector(fd, kind)
    }

    fn features(&self) -> Result<Vec<Feature>, RedoxPciError> {
        match self.call(Request::RequestFeatures)? {
            Response::AllFeatures(f) => Ok(f),
            other => Err(unexpected("RequestFeatures", other)),
        }
    }

    /// One vector for every cause, for drivers that can run without MSI-X: MSI-X entry 0, else
    /// MSI, else the legacy line (pcid's `pci_allocate_interrupt_vector` order, §5).
    pub fn alloc_shared_vector(&mut self) -> Result<RedoxIrq, RedoxPciError> {
        let features = self.features()?;
        if features.contains(&Feature::MsiX) {
            return self
                .alloc_msix(1)?
                .pop()
                .ok_or_else(|| RedoxPciError::NoInterrupts("MSI-X gave no vector".into()));
        }
        if features.contains(&Feature::Msi) {
            return self.alloc_msi();
        }
        let line = self.info.legacy_interrupt_line.ok_or_else(|| {
            RedoxPciError::NoInterrupts("no MSI-X, no MSI and no legacy interrupt line".into())
        })?;
        let v = irq::open_legacy(&line)?;
        self.vectors.push(v.kind());
        Ok(v)
    }

    /// `count` vectors, vector i firing for MSI-X entry i. Several vectors need MSI-X; a single
    /// one falls back to MSI, then INTx ([`Self::alloc_shared_vector`]).
    pub fn alloc_irqs(&mut self, count: u16) -> Result<Vec<RedoxIrq>, RedoxPciError> {
        if count == 0 {
            return Err(RedoxPciError::NoInterrupts("0 vectors requested".into()));
        }
        if !self.vectors.is_empty() {
            return Err(RedoxPciError::NoInterrupts(
                "vectors were already allocated for this function".into(),
            ));
        }
        if count == 1 {
            return Ok(vec![self.alloc_shared_vector()?]);
        }
        if !self.features()?.contains(&Feature::MsiX) {
            return Err(RedoxPciError::NoInterrupts(format!(
                "{count} vectors need MSI-X, which this function does not offer"
            )));
        }
        self.alloc_msix(count)
    }
}

/// Whether the kernel can open this legacy line (reference §5 [I]: ISA lines below 16, or a
/// device-tree line by phandle).
fn routable(line: &crate::pcid_proto::LegacyInterruptLine) -> bool {
    line.phandled.is_some() || line.irq < 16
}

impl PciFunction for RedoxPciFunction {
    type Bar = VolatileMmio;
    type Irq = RedoxIrq;

    /// From pcid: its feature list, the MSI-X table size, and the legacy line it routed. A
    /// channel error counts as "not offered" (the driver then falls back, down to polling).
    fn irq_support(&self) -> IrqSupport {
        let features = self.features().unwrap_or_else(|e| {
            log::warn!("pcid features: {e}");
            Vec::new()
        });
        let msix_entries = if features.contains(&Feature::MsiX) {
            match self.call(Request::FeatureInfo(Feature::MsiX)) {
                Ok(Response::FeatureInfo(Feature::MsiX, FeatureInfo::MsiX(i))) => i.table_size,
                other => {
                    log::warn!("pcid MSI-X info: {other:?}");
                    0
                }
            }
        } else {
            0
        };
        IrqSupport {
            msix_entries,
            msi: features.contains(&Feature::Msi),
            legacy_line: self
                .info
                .legacy_interrupt_line
                .filter(routable)
                .map(|l| l.irq),
        }
    }

    fn alloc_irq_mode(&mut self, mode: IrqMode) -> Result<Vec<RedoxIrq>, PciError> {
        if !self.vectors.is_empty() {
            return Err(PciError::Interrupts(
                "vectors were already allocated for this function".into(),
            ));
        }
        Ok(match mode {
            IrqMode::MsiX { vectors } => self.alloc_msix(vectors)?,
            IrqMode::Msi => vec![self.alloc_msi()?],
            IrqMode::Legacy { .. } => {
                let line = self
                    .info
                    .legacy_interrupt_line
                    .ok_or_else(|| PciError::Interrupts("no legacy interrupt line".into()))?;
                let v = irq::open_legacy(&line)?;
                self.vectors.push(v.kind());
                vec![v]
            }
            IrqMode::Polled => Vec::new(),
        })
    }

    fn ids(&self) -> PciIds {
        self.ids
    }

    fn address(&self) -> String {
        self.info.addr.to_string()
    }

    /// On a channel failure, logs it and returns all ones, as a read of an absent function does.
    fn config_read32(&self, offset: u16) -> u32 {
        match self.call(Request::ReadConfig(offset)) {
            Ok(Response::ReadConfig(v)) => v,
            Ok(other) => {
                log::error!("{}", unexpected("ReadConfig", other));
                u32::MAX
            }
            Err(e) => {
                log::error!("config read at {offset:#x}: {e}");
                u32::MAX
            }
        }
    }

    fn config_write32(&mut self, offset: u16, value: u32) {
        match self.call(Request::WriteConfig(offset, value)) {
            Ok(Response::WriteConfig) => {}
            Ok(other) => log::error!("{}", unexpected("WriteConfig", other)),
            Err(e) => log::error!("config write at {offset:#x}: {e}"),
        }
    }

    fn map_bar(&mut self, bar: u8) -> Result<VolatileMmio, PciError> {
        if bar > 5 {
            return Err(PciError::NoSuchBar(bar));
        }
        match self.info.bars[usize::from(bar)] {
            pcid_proto::PciBar::None => return Err(PciError::NoSuchBar(bar)),
            pcid_proto::PciBar::Port(_) => return Err(PciError::NotMemoryBar(bar)),
            _ => {}
        }
        Ok(self.bar(bar)?)
    }

    fn alloc_vectors(&mut self, count: u16) -> Result<Vec<RedoxIrq>, PciError> {
        Ok(self.alloc_irqs(count)?)
    }

    fn alloc_dma(&mut self, len: usize) -> Result<DmaRegion, PciError> {
        if len == 0 || len > 64 << 20 {
            return Err(PciError::Dma(len));
        }
        self.prepare_dma()?;
        let tr = self.translation.clone().ok_or(PciError::Dma(len))?;
        mem::alloc_dma(len, &tr).map_err(|e| {
            log::error!("DMA allocation of {len} bytes: {e}");
            PciError::Dma(len)
        })
    }
}
