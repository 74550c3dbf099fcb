//! Interrupt vectors from the kernel `irq` scheme (reference §5).

use std::time::Duration;

use event::{EventFlags, EventQueue};
use libredox::Fd;
use libredox::flag::{O_CLOEXEC, O_CREAT, O_RDONLY, O_RDWR};
use ptp_ipc::redox::timer::{Timer, mono_ns};

use super::RedoxPciError;
use crate::{IrqVector, IrqWait};

/// How a vector reaches us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqKind {
    /// MSI-X table entry `entry`, delivered as CPU vector `vector` on APIC `apic`.
    MsiX { entry: u16, apic: u32, vector: u8 },
    /// The function's single MSI message.
    Msi { apic: u32, vector: u8 },
    /// The legacy INTx line (masked by the kernel until acknowledged, §5).
    Legacy { line: u8 },
}

const SRC_IRQ: usize = 0;
const SRC_TIMER: usize = 1;

/// One interrupt vector: the irq handle, and an event queue over it and a timer so that
/// [`IrqVector::wait`] is bounded (§5, §6, §12).
pub struct RedoxIrq {
    fd: Fd,
    queue: EventQueue<usize>,
    timer: Timer,
    kind: IrqKind,
    /// Legacy line: the count last reported and not yet acknowledged ([`IrqVector::ack`]).
    unacked: std::sync::Mutex<Option<[u8; 8]>>,
}

impl std::fmt::Debug for RedoxIrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedoxIrq")
            .field("fd", &self.fd.raw())
            .field("kind", &self.kind)
            .finish()
    }
}

fn os(what: &str, e: libredox::error::Error) -> RedoxPciError {
    RedoxPciError::Os {
        what: what.to_string(),
        err: e.to_string(),
    }
}

impl RedoxIrq {
    fn new(fd: Fd, kind: IrqKind) -> Result<Self, RedoxPciError> {
        let queue = EventQueue::new().map_err(|e| os("event queue", e))?;
        let timer = Timer::open().map_err(|e| os("/scheme/time", e))?;
        queue
            .subscribe(fd.raw(), SRC_IRQ, EventFlags::READ)
            .map_err(|e| os("subscribe irq", e))?;
        queue
            .subscribe(timer.raw(), SRC_TIMER, EventFlags::READ)
            .map_err(|e| os("subscribe timer", e))?;
        Ok(Self {
            fd,
            queue,
            timer,
            kind,
            unacked: std::sync::Mutex::new(None),
        })
    }

    pub fn kind(&self) -> IrqKind {
        self.kind
    }

    /// The irq handle, e.g. for an event loop of the caller's own.
    pub fn raw_fd(&self) -> usize {
        self.fd.raw()
    }

    /// Non-blocking check: reading 8 bytes returns the IRQ count if it changed since this
    /// handle's last acknowledgement, else 0 bytes; writing the count back acknowledges it
    /// (and unmasks a legacy line) (§5). MSI and MSI-X are acknowledged here; a legacy line
    /// only by [`IrqVector::ack`], once the driver saw its device's cause, as upstream's
    /// drivers do (a shared line's foreign interrupt stays masked). Until then the same count
    /// is reported once, not again on every poll.
    pub fn poll(&self) -> Result<bool, RedoxPciError> {
        let mut count = [0u8; 8];
        match self.fd.read(&mut count) {
            Ok(8) if matches!(self.kind, IrqKind::Legacy { .. }) => {
                let mut unacked = self.unacked.lock().unwrap_or_else(|e| e.into_inner());
                let new = *unacked != Some(count);
                *unacked = Some(count);
                Ok(new)
            }
            Ok(8) => {
                self.fd.write(&count).map_err(|e| os("irq ack", e))?;
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) if e.is_wouldblock() || e.is_interrupt() => Ok(false),
            Err(e) => Err(os("irq read", e)),
        }
    }
}

impl IrqVector for RedoxIrq {
    fn ack(&self) {
        let count = self
            .unacked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(count) = count
            && let Err(e) = self.fd.write(&count)
        {
            log::error!("irq ack: {e}");
        }
    }

    fn wait(&self, timeout: Duration) -> IrqWait {
        let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let deadline = mono_ns().saturating_add(timeout_ns);
        loop {
            // An interrupt that fired before the call is seen here, without waiting.
            match self.poll() {
                Ok(true) => return IrqWait::Fired,
                Ok(false) => {}
                Err(e) => {
                    log::error!("{e}");
                    return IrqWait::Closed;
                }
            }
            let now = mono_ns();
            if now >= deadline {
                return IrqWait::TimedOut;
            }
            if let Err(e) = self.timer.ensure_by(deadline, now) {
                log::error!("arming the irq wait timer: {e}");
                return IrqWait::Closed;
            }
            // Blocks until the irq or the timer posts EVENT_READ; a stale event from an earlier
            // wait only costs one more loop.
            match self.queue.next_event() {
                Ok(_) => {}
                Err(e) if e.is_interrupt() => {}
                Err(e) => {
                    log::error!("irq event queue: {e}");
                    return IrqWait::Closed;
                }
            }
        }
    }
}

/// The BSP's local APIC id: an 8-byte read of `/scheme/irq/bsp` (4 bytes on older kernels).
pub fn read_bsp_apic_id() -> Result<u32, RedoxPciError> {
    const PATH: &str = "/scheme/irq/bsp";
    let fd = Fd::open(PATH, O_RDONLY | O_CLOEXEC, 0).map_err(|e| os(PATH, e))?;
    let mut buf = [0u8; 8];
    let n = fd.read(&mut buf).map_err(|e| os(PATH, e))?;
    let id = match n {
        8 => u64::from_le_bytes(buf),
        4 => u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]).into(),
        n => {
            return Err(RedoxPciError::Os {
                what: PATH.into(),
                err: format!("read {n} bytes, expected 8"),
            });
        }
    };
    u32::try_from(id).map_err(|_| RedoxPciError::Os {
        what: PATH.into(),
        err: format!("APIC id {id} out of range"),
    })
}

/// Reserves one free CPU vector on `apic`: opens `/scheme/irq/cpu-XX/<n>` with `O_CREAT`
/// (EEXIST when taken meanwhile); the CPU vector is `n + 32` (§5).
pub fn alloc_cpu_vector(apic: u32) -> Result<(Fd, u8), RedoxPciError> {
    let dir = format!("/scheme/irq/cpu-{apic:02x}");
    let entries = std::fs::read_dir(&dir).map_err(|e| RedoxPciError::Os {
        what: dir.clone(),
        err: e.to_string(),
    })?;
    for entry in entries.flatten() {
        let Some(n) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u8>().ok())
        else {
            continue;
        };
        let Some(vector) = n.checked_add(32) else {
            continue;
        };
        let path = format!("{dir}/{n}");
        match Fd::open(&path, O_RDWR | O_CREAT | O_CLOEXEC, 0) {
            Ok(fd) => return Ok((fd, vector)),
            Err(e) if e.errno() == libredox::errno::EEXIST => continue,
            Err(e) => return Err(os(&path, e)),
        }
    }
    Err(RedoxPciError::NoInterrupts(format!(
        "no free interrupt vector on CPU {apic:#x}"
    )))
}

/// An MSI/MSI-X message for `vector` on `apic` (x86, §5): physical destination, no redirection
/// hint; data = the vector, fixed delivery, edge triggered.
pub fn msi_message(apic: u32, vector: u8) -> Result<(u64, u32), RedoxPciError> {
    let dest = u8::try_from(apic).map_err(|_| {
        RedoxPciError::NoInterrupts(format!(
            "APIC id {apic} does not fit an MSI address (needs interrupt remapping)"
        ))
    })?;
    Ok((0xFEE0_0000 | (u64::from(dest) << 12), u32::from(vector)))
}

/// Wraps a reserved vector.
pub fn vector(fd: Fd, kind: IrqKind) -> Result<RedoxIrq, RedoxPciError> {
    RedoxIrq::new(fd, kind)
}

/// Opens a legacy INTx line: `/scheme/irq/<n>` for n < 16 only (the kernel routes ISA lines
/// only, so a PCI line on GSI >= 16 cannot be opened, §5 [I]); device-tree lines by phandle.
pub fn open_legacy(
    line: &crate::pcid_proto::LegacyInterruptLine,
) -> Result<RedoxIrq, RedoxPciError> {
    let path = match line.phandled {
        Some((ph, cells, 1)) => format!("/scheme/irq/phandle-{ph}/{}", cells[0]),
        Some((ph, cells, 2)) => format!("/scheme/irq/phandle-{ph}/{},{}", cells[0], cells[1]),
        Some((ph, cells, 3)) => format!(
            "/scheme/irq/phandle-{ph}/{},{},{}",
            cells[0], cells[1], cells[2]
        ),
        Some((ph, _, n)) => {
            return Err(RedoxPciError::NoInterrupts(format!(
                "interrupt of phandle {ph} has {n} cells"
            )));
        }
        None if line.irq < 16 => format!("/scheme/irq/{}", line.irq),
        None => {
            return Err(RedoxPciError::NoInterrupts(format!(
                "INTx line {} is not an ISA IRQ the kernel can route; MSI/MSI-X needed",
                line.irq
            )));
        }
    };
    let flags = if line.phandled.is_some() {
        O_RDWR | O_CREAT | O_CLOEXEC
    } else {
        O_RDWR | O_CLOEXEC
    };
    let fd = Fd::open(&path, flags, 0).map_err(|e| os(&path, e))?;
    RedoxIrq::new(fd, IrqKind::Legacy { line: line.irq })
}
