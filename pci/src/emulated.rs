//! The emulated backend: a device model behind the same [`PciFunction`] traits as hardware.
//!
//! A model implements [`Device`]: a plain state machine driven by register reads and writes and
//! by [`Device::poll`], which runs whatever work has come due on the model's own clock. The
//! backend serialises every access under one lock (a bus transaction at a time, like a PCIe
//! link), delivers MSI-X messages to the [`EmuIrq`] vectors, and resolves bus addresses of DMA
//! memory for the model.
//!
//! Two modes:
//! - real time ([`EmuFunction::start_model_thread`]): a model thread polls the device when its
//!   next deadline comes, or as soon as a register write may have created work (the model
//!   says which writes can, [`Device::write_wakes_model`]);
//! - deterministic (no thread): a test calls [`EmuFunction::poll`] after advancing the model's
//!   virtual clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::{self, PciIds};
use crate::dma::{DmaRegion, HeapDma};
use crate::{IrqMode, IrqSupport, IrqVector, IrqWait, Mmio, PciError, PciFunction};

/// Bus addresses of emulated DMA start here (so 0 is never a valid address).
const DMA_BUS_BASE: u64 = 0x1_0000_0000;

/// What a model can do to the host side during an access.
pub trait DeviceHost {
    /// Sends MSI-X message `vector` (a no-op for an unallocated vector, as for a masked entry).
    fn raise_msix(&mut self, vector: u16);
    /// DMA read from bus address `bus`; false if the range is not DMA memory.
    fn dma_read(&mut self, bus: u64, out: &mut [u8]) -> bool;
    /// DMA write to bus address `bus`; false if the range is not DMA memory.
    fn dma_write(&mut self, bus: u64, data: &[u8]) -> bool;
}

/// A register-level device model.
pub trait Device: Send + 'static {
    /// Vendor/device/class IDs presented in config space.
    fn ids(&self) -> PciIds;
    /// Size in bytes of memory BAR `bar`, or `None` if absent.
    fn bar_len(&self, bar: u8) -> Option<u32>;
    /// Number of MSI-X table entries.
    fn msix_vectors(&self) -> u16;
    /// A 32-bit register read (may have side effects).
    fn read32(&mut self, bar: u8, offset: u32, host: &mut dyn DeviceHost) -> u32;
    /// A 32-bit register write.
    fn write32(&mut self, bar: u8, offset: u32, value: u32, host: &mut dyn DeviceHost);
    /// Whether a write to `offset` may give [`Device::poll`] new work (a ring tail, an enable
    /// bit), so the real-time model thread must be woken. Every write takes effect in
    /// `write32` whatever this says; the default is to wake for all of them. A model answers
    /// false for registers applied entirely at the write: waking the model thread then only
    /// costs the writer its core on a busy host, between two writes that belong together.
    fn write_wakes_model(&self, bar: u8, offset: u32) -> bool {
        let _ = (bar, offset);
        true
    }
    /// Runs work that is due on the model's clock; returns how long until the next work is due
    /// (`None`: nothing scheduled until the next register access).
    fn poll(&mut self, host: &mut dyn DeviceHost) -> Option<Duration>;
}

/// Interrupt vector state shared by the backend and the waiting thread.
#[derive(Default)]
struct VectorState {
    fired: u64,
    seen: u64,
    closed: bool,
}

#[derive(Default)]
struct VectorInner {
    state: Mutex<VectorState>,
    cond: Condvar,
}

/// An emulated interrupt vector.
#[derive(Clone)]
pub struct EmuIrq {
    inner: Arc<VectorInner>,
}

impl std::fmt::Debug for EmuIrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmuIrq")
    }
}

impl EmuIrq {
    fn fire(&self) {
        let mut s = lock(&self.inner.state);
        s.fired += 1;
        self.inner.cond.notify_all();
    }

    fn close(&self) {
        lock(&self.inner.state).closed = true;
        self.inner.cond.notify_all();
    }

    /// Times this vector has fired since allocation.
    pub fn count(&self) -> u64 {
        lock(&self.inner.state).fired
    }
}

impl IrqVector for EmuIrq {
    fn wait(&self, timeout: Duration) -> IrqWait {
        let s = lock(&self.inner.state);
        let (mut s, _) = self
            .inner
            .cond
            .wait_timeout_while(s, timeout, |s| s.fired == s.seen && !s.closed)
            .unwrap_or_else(|e| e.into_inner());
        if s.fired != s.seen {
            s.seen = s.fired;
            IrqWait::Fired
        } else if s.closed {
            IrqWait::Closed
        } else {
            IrqWait::TimedOut
        }
    }
}

struct DmaMap {
    bus: u64,
    mem: Arc<HeapDma>,
}

/// A fault in the path from the device's messages to the driver's vectors, as on a platform
/// that does not deliver a device's interrupts (a proxied device under QEMU TCG, reference
/// §14) or delivers them late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IrqFault {
    /// Every message arrives at once.
    #[default]
    None,
    /// No message ever arrives (the device still sends them: its registers behave as usual).
    Never,
    /// Every message arrives this much later.
    Late(Duration),
}

/// The host side the model sees: vectors and DMA memory.
struct Host {
    vectors: Vec<EmuIrq>,
    /// MSI-X messages raised under the bus lock, delivered after it is released.
    pending: Vec<EmuIrq>,
    dma: Vec<DmaMap>,
    next_bus: u64,
    /// Message delivery on (MSI-X enabled, or the single MSI/INTx vector allocated).
    msix_enabled: bool,
    fault: IrqFault,
}

impl Host {
    fn find(&self, bus: u64, len: usize) -> Option<(&Arc<HeapDma>, usize)> {
        self.dma.iter().find_map(|m| {
            let off = bus.checked_sub(m.bus)? as usize;
            (off.checked_add(len)? <= m.mem.len()).then_some((&m.mem, off))
        })
    }
}

impl DeviceHost for Host {
    fn raise_msix(&mut self, vector: u16) {
        if self.msix_enabled
            && self.fault != IrqFault::Never
            && let Some(v) = self.vectors.get(vector as usize)
        {
            // Delivered once the bus lock is released (see `deliver`): a woken IRQ thread's
            // first act is a register read, which would otherwise block on the lock the model
            // still holds — one more sleep and wake-up on every interrupt.
            self.pending.push(v.clone());
        }
    }

    fn dma_read(&mut self, bus: u64, out: &mut [u8]) -> bool {
        match self.find(bus, out.len()) {
            Some((mem, off)) => mem.region(0, mem.len()).read_bytes(off, out),
            None => false,
        }
    }

    fn dma_write(&mut self, bus: u64, data: &[u8]) -> bool {
        match self.find(bus, data.len()) {
            Some((mem, off)) => mem.region(0, mem.len()).write_bytes(off, data),
            None => false,
        }
    }
}

struct Bus<D> {
    device: D,
    host: Host,
    /// Config space writes that stick (command register, BAR sizing is not modelled).
    command: u32,
}

struct Shared<D> {
    bus: Mutex<Bus<D>>,
    /// What the function offers beyond its MSI-X table ([`EmuFunction::offer_irqs`]).
    support: Mutex<Option<IrqSupport>>,
    /// Wakes the model thread after a write that may have created work.
    kick: Condvar,
    stop: AtomicBool,
    reads: AtomicU64,
    writes: AtomicU64,
}

/// Delivers the MSI-X messages raised while the lock was held; call after releasing it.
fn deliver(pending: Vec<EmuIrq>, fault: IrqFault) {
    match fault {
        IrqFault::Late(d) if !pending.is_empty() => {
            // A fault-injection path only: one short-lived thread per late batch.
            std::thread::spawn(move || {
                std::thread::sleep(d);
                pending.iter().for_each(EmuIrq::fire);
            });
        }
        _ => pending.iter().for_each(EmuIrq::fire),
    }
}

/// Takes the messages raised under the lock, with the fault to deliver them under.
fn take_pending(host: &mut Host) -> (Vec<EmuIrq>, IrqFault) {
    (std::mem::take(&mut host.pending), host.fault)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock is a model bug; keep serving so the driver sees it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A BAR of an emulated device: the [`Mmio`] funnel ends in the model's `read32`/`write32`.
pub struct EmuBar<D> {
    shared: Arc<Shared<D>>,
    bar: u8,
    len: u32,
}

impl<D> std::fmt::Debug for EmuBar<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EmuBar{}({:#x})", self.bar, self.len)
    }
}

impl<D> Clone for EmuBar<D> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            bar: self.bar,
            len: self.len,
        }
    }
}

impl<D: Device> Mmio for EmuBar<D> {
    fn read32(&self, offset: u32) -> u32 {
        assert!(
            offset % 4 == 0 && offset < self.len,
            "MMIO read at {offset:#x} outside BAR{} ({:#x} bytes)",
            self.bar,
            self.len
        );
        self.shared.reads.fetch_add(1, Ordering::Relaxed);
        let mut bus = lock(&self.shared.bus);
        let Bus { device, host, .. } = &mut *bus;
        let v = device.read32(self.bar, offset, host);
        let (pending, fault) = take_pending(host);
        drop(bus);
        deliver(pending, fault);
        v
    }

    fn write32(&self, offset: u32, value: u32) {
        assert!(
            offset % 4 == 0 && offset < self.len,
            "MMIO write at {offset:#x} outside BAR{} ({:#x} bytes)",
            self.bar,
            self.len
        );
        self.shared.writes.fetch_add(1, Ordering::Relaxed);
        let mut bus = lock(&self.shared.bus);
        let Bus { device, host, .. } = &mut *bus;
        device.write32(self.bar, offset, value, host);
        let wake = device.write_wakes_model(self.bar, offset);
        let (pending, fault) = take_pending(host);
        drop(bus);
        deliver(pending, fault);
        if wake {
            self.shared.kick.notify_one();
        }
    }
}

/// The model of a running [`EmuFunction`], reachable from another thread
/// ([`EmuFunction::control`]): each call takes the bus lock, as one bus transaction would.
pub struct EmuControl<D> {
    shared: Arc<Shared<D>>,
}

impl<D> Clone for EmuControl<D> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<D: Device> EmuControl<D> {
    /// [`EmuFunction::with_device_host`] through the handle: messages the model raises are
    /// delivered and the model thread is woken afterwards.
    pub fn with_device_host<R>(&self, f: impl FnOnce(&mut D, &mut dyn DeviceHost) -> R) -> R {
        let mut bus = lock(&self.shared.bus);
        let Bus { device, host, .. } = &mut *bus;
        let r = f(device, host);
        let (pending, fault) = take_pending(host);
        drop(bus);
        deliver(pending, fault);
        self.shared.kick.notify_one();
        r
    }

    /// [`EmuFunction::set_irq_fault`] through the handle.
    pub fn set_irq_fault(&self, fault: IrqFault) {
        lock(&self.shared.bus).host.fault = fault;
    }
}

/// An emulated PCI function wrapping a device model.
pub struct EmuFunction<D: Device> {
    shared: Arc<Shared<D>>,
    name: String,
    thread: Option<JoinHandle<()>>,
}

/// Offset of the synthetic MSI-X capability in emulated config space.
const MSIX_CAP: u16 = 0x70;

impl<D: Device> EmuFunction<D> {
    /// Plugs `device` into a new emulated function named `name` (for logs).
    pub fn new(device: D, name: impl Into<String>) -> Self {
        Self {
            shared: Arc::new(Shared {
                bus: Mutex::new(Bus {
                    device,
                    host: Host {
                        vectors: Vec::new(),
                        pending: Vec::new(),
                        dma: Vec::new(),
                        next_bus: DMA_BUS_BASE,
                        msix_enabled: false,
                        fault: IrqFault::None,
                    },
                    command: 0,
                }),
                support: Mutex::new(None),
                kick: Condvar::new(),
                stop: AtomicBool::new(false),
                reads: AtomicU64::new(0),
                writes: AtomicU64::new(0),
            }),
            name: name.into(),
            thread: None,
        }
    }

    /// Runs the model's due work once (deterministic mode); returns the model's next deadline.
    pub fn poll(&self) -> Option<Duration> {
        let mut bus = lock(&self.shared.bus);
        let Bus { device, host, .. } = &mut *bus;
        let next = device.poll(host);
        let (pending, fault) = take_pending(host);
        drop(bus);
        deliver(pending, fault);
        next
    }

    /// Gives a test direct access to the model (to advance its clock, inject faults, read its
    /// counters), holding the bus lock for the duration of `f`.
    pub fn with_device<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
        f(&mut lock(&self.shared.bus).device)
    }

    /// Like [`Self::with_device`], with the host side too, so a test or the lab can trigger
    /// model events that raise interrupts or touch DMA (cable pulls, fault injection). Wakes the
    /// model thread afterwards, since the event may have scheduled work.
    pub fn with_device_host<R>(&self, f: impl FnOnce(&mut D, &mut dyn DeviceHost) -> R) -> R {
        self.control().with_device_host(f)
    }

    /// Injects a fault in interrupt delivery from now on.
    pub fn set_irq_fault(&self, fault: IrqFault) {
        self.control().set_irq_fault(fault);
    }

    /// A handle that reaches the model while the function is in use elsewhere (a driver owns
    /// it): for fault injection into a running emulated NIC, never part of a driver's path.
    pub fn control(&self) -> EmuControl<D> {
        EmuControl {
            shared: self.shared.clone(),
        }
    }

    /// Makes the function offer `support` instead of just its MSI-X table, e.g. MSI or a legacy
    /// line only. An MSI or INTx vector receives the model's non-MSI-X message (vector 0).
    pub fn offer_irqs(&self, support: IrqSupport) {
        *lock(&self.shared.support) = Some(support);
    }

    /// MMIO reads and writes that went through this function's BARs.
    pub fn mmio_counts(&self) -> (u64, u64) {
        (
            self.shared.reads.load(Ordering::Relaxed),
            self.shared.writes.load(Ordering::Relaxed),
        )
    }

    /// Starts the real-time model thread: it polls the device when the device's next deadline
    /// comes (at most `max_sleep` apart) or right after a register write.
    pub fn start_model_thread(&mut self, max_sleep: Duration) {
        self.start_model_thread_with(max_sleep, ptp_ipc::rt::RtConfig::default())
    }

    /// Like [`Self::start_model_thread`], with the real-time service `rt` asks for (see
    /// [`ptp_ipc::rt`]), so the emulated hardware is not descheduled behind ordinary work.
    pub fn start_model_thread_with(&mut self, max_sleep: Duration, rt: ptp_ipc::rt::RtConfig) {
        if self.thread.is_some() {
            return;
        }
        let shared = self.shared.clone();
        let name = format!("model:{}", self.name);
        self.thread = Some(
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    ptp_ipc::rt::apply(&rt, "model");
                    let mut bus = lock(&shared.bus);
                    while !shared.stop.load(Ordering::Acquire) {
                        let Bus { device, host, .. } = &mut *bus;
                        let next = device.poll(host).unwrap_or(max_sleep).min(max_sleep);
                        if !host.pending.is_empty() {
                            let (pending, fault) = take_pending(host);
                            drop(bus);
                            deliver(pending, fault);
                            bus = lock(&shared.bus);
                            // A kick sent while the lock was free would be missed by a wait:
                            // poll again instead.
                            continue;
                        }
                        bus = shared
                            .kick
                            .wait_timeout(bus, next)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                })
                .expect("spawn model thread"),
        );
    }

    fn synth_config(&self, offset: u16) -> u32 {
        let bus = lock(&self.shared.bus);
        let ids = bus.device.ids();
        let msix = bus.device.msix_vectors();
        use config::offsets::*;
        match offset & !3 {
            VENDOR_DEVICE => ids.vendor as u32 | (ids.device as u32) << 16,
            COMMAND_STATUS => {
                bus.command & 0xFFFF | if msix > 0 { config::STATUS_CAP_LIST } else { 0 }
            }
            CLASS_REV => {
                ids.revision as u32
                    | (ids.interface as u32) << 8
                    | (ids.subclass as u32) << 16
                    | (ids.class as u32) << 24
            }
            SUBSYSTEM => ids.subsystem_vendor as u32 | (ids.subsystem as u32) << 16,
            CAP_PTR if msix > 0 => MSIX_CAP as u32,
            o if o == MSIX_CAP && msix > 0 => {
                let enable = if bus.host.msix_enabled { 1 << 31 } else { 0 };
                config::CAP_ID_MSIX as u32 | ((msix as u32 - 1) << 16) | enable
            }
            // Table in BAR3 at 0, PBA in BAR3 at 0x2000, as on i225/i210.
            o if o == MSIX_CAP + 4 && msix > 0 => 3,
            o if o == MSIX_CAP + 8 && msix > 0 => 0x2000 | 3,
            o if (BAR0..BAR0 + 24).contains(&o) => {
                let n = ((o - BAR0) / 4) as u8;
                match bus.device.bar_len(n) {
                    // A fake 32-bit non-prefetchable address; only presence matters here.
                    Some(_) => 0xF000_0000 | (n as u32) << 24,
                    None => 0,
                }
            }
            _ => 0,
        }
    }
}

impl<D: Device> Drop for EmuFunction<D> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for v in &lock(&self.shared.bus).host.vectors {
            v.close();
        }
    }
}

impl<D: Device> PciFunction for EmuFunction<D> {
    type Bar = EmuBar<D>;
    type Irq = EmuIrq;

    fn ids(&self) -> PciIds {
        PciIds::from_config(|o| self.synth_config(o))
    }

    fn address(&self) -> String {
        format!("emu:{}", self.name)
    }

    fn config_read32(&self, offset: u16) -> u32 {
        self.synth_config(offset)
    }

    fn config_write32(&mut self, offset: u16, value: u32) {
        let mut bus = lock(&self.shared.bus);
        if offset & !3 == config::offsets::COMMAND_STATUS {
            bus.command = value & 0xFFFF;
        } else if offset & !3 == MSIX_CAP {
            bus.host.msix_enabled = value & (1 << 31) != 0;
        }
    }

    fn map_bar(&mut self, bar: u8) -> Result<Self::Bar, PciError> {
        let len = lock(&self.shared.bus)
            .device
            .bar_len(bar)
            .ok_or(PciError::NoSuchBar(bar))?;
        Ok(EmuBar {
            shared: self.shared.clone(),
            bar,
            len,
        })
    }

    fn alloc_vectors(&mut self, count: u16) -> Result<Vec<Self::Irq>, PciError> {
        let mut bus = lock(&self.shared.bus);
        let have = bus.device.msix_vectors();
        if count == 0 || count > have {
            return Err(PciError::Interrupts(format!(
                "{count} vectors requested, the device has {have} MSI-X entries"
            )));
        }
        let vectors: Vec<EmuIrq> = (0..count)
            .map(|_| EmuIrq {
                inner: Arc::new(VectorInner::default()),
            })
            .collect();
        bus.host.vectors = vectors.clone();
        bus.host.msix_enabled = true;
        Ok(vectors)
    }

    fn irq_support(&self) -> IrqSupport {
        let offered = *lock(&self.shared.support);
        offered.unwrap_or_else(|| IrqSupport {
            msix_entries: lock(&self.shared.bus).device.msix_vectors(),
            ..IrqSupport::default()
        })
    }

    fn alloc_irq_mode(&mut self, mode: IrqMode) -> Result<Vec<Self::Irq>, PciError> {
        let s = self.irq_support();
        let offered = match mode {
            IrqMode::MsiX { vectors } => vectors <= s.msix_entries,
            IrqMode::Msi => s.msi,
            IrqMode::Legacy { line } => s.legacy_line == Some(line),
            IrqMode::Polled => true,
        };
        if !offered {
            return Err(PciError::Interrupts(format!("{mode} is not offered")));
        }
        match mode {
            IrqMode::MsiX { vectors } => self.alloc_vectors(vectors),
            IrqMode::Polled => Ok(Vec::new()),
            // One vector that the model's non-MSI-X message (vector 0) reaches.
            IrqMode::Msi | IrqMode::Legacy { .. } => {
                let v = EmuIrq {
                    inner: Arc::new(VectorInner::default()),
                };
                let mut bus = lock(&self.shared.bus);
                bus.host.vectors = vec![v.clone()];
                bus.host.msix_enabled = true;
                Ok(vec![v])
            }
        }
    }

    fn alloc_dma(&mut self, len: usize) -> Result<DmaRegion, PciError> {
        if len == 0 || len > 64 << 20 {
            return Err(PciError::Dma(len));
        }
        let mem = HeapDma::new(len.next_multiple_of(4096));
        let mut bus = lock(&self.shared.bus);
        let addr = bus.host.next_bus;
        bus.host.next_bus += mem.len() as u64;
        bus.host.dma.push(DmaMap {
            bus: addr,
            mem: mem.clone(),
        });
        Ok(mem.region(addr, len))
    }
}

#[cfg(test)]
mod tests;
