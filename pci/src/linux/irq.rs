//! Interrupt vectors on Linux: UIO's INTx (`read` of `/dev/uioN`, re-armed by clearing
//! COMMAND.INTX_DISABLE through config space, as uio_pci_generic expects) and VFIO eventfds
//! (MSI-X, MSI, or INTx re-armed with an UNMASK). The driver sees one [`LinuxIrq`] type.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::config::{COMMAND_INTX_DISABLE, ConfigSpace};
use super::vfio::VfioDevice;
use crate::{IrqVector, IrqWait};

/// How a vector is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinuxIrqKind {
    /// uio_pci_generic's INTx.
    UioIntx,
    /// A VFIO eventfd for MSI-X entry `entry`.
    VfioMsix { entry: u32 },
    /// A VFIO eventfd for the single MSI message.
    VfioMsi,
    /// A VFIO eventfd for INTx (automasked; unmasked through VFIO).
    VfioIntx,
}

/// How a level-triggered line is re-armed after it fired.
enum Rearm {
    /// Edge-like messages (MSI, MSI-X): nothing to do.
    None,
    /// Clear COMMAND.INTX_DISABLE, which uio_pci_generic's handler set.
    Command(Arc<ConfigSpace>),
    /// VFIO_DEVICE_SET_IRQS ACTION_UNMASK on the INTx index.
    VfioUnmask(Arc<VfioDevice>),
}

/// One interrupt vector.
pub struct LinuxIrq {
    file: File,
    kind: LinuxIrqKind,
    rearm: Rearm,
    /// The line fired and is still masked.
    masked: AtomicBool,
}

impl std::fmt::Debug for LinuxIrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxIrq")
            .field("fd", &self.file.as_raw_fd())
            .field("kind", &self.kind)
            .finish()
    }
}

impl LinuxIrq {
    pub(crate) fn uio(file: File, config: Arc<ConfigSpace>) -> Self {
        Self::new(file, LinuxIrqKind::UioIntx, Rearm::Command(config))
    }

    pub(crate) fn vfio(file: File, kind: LinuxIrqKind, dev: &Arc<VfioDevice>) -> Self {
        let rearm = match kind {
            LinuxIrqKind::VfioIntx => Rearm::VfioUnmask(dev.clone()),
            _ => Rearm::None,
        };
        Self::new(file, kind, rearm)
    }

    fn new(file: File, kind: LinuxIrqKind, rearm: Rearm) -> Self {
        Self {
            file,
            kind,
            rearm,
            masked: AtomicBool::new(false),
        }
    }

    pub fn kind(&self) -> LinuxIrqKind {
        self.kind
    }

    /// Re-arms a line that fired (no-op otherwise).
    fn rearm(&self) {
        if !self.masked.swap(false, Ordering::AcqRel) {
            return;
        }
        let r = match &self.rearm {
            Rearm::None => Ok(()),
            Rearm::Command(cfg) => cfg
                .update_command(COMMAND_INTX_DISABLE, false)
                .map_err(|e| e.to_string()),
            Rearm::VfioUnmask(dev) => dev.unmask_intx().map_err(|e| e.to_string()),
        };
        if let Err(e) = r {
            log::error!("re-arming {:?}: {e}", self.kind);
        }
    }

    /// Consumes the pending count (UIO: 4 bytes, eventfd: 8); false if none was pending.
    fn consume(&self) -> std::io::Result<bool> {
        let mut buf = [0u8; 8];
        let want = if self.kind == LinuxIrqKind::UioIntx {
            4
        } else {
            8
        };
        match (&self.file).read(&mut buf[..want]) {
            Ok(n) if n == want => Ok(true),
            Ok(n) => Err(std::io::Error::other(format!(
                "read {n} bytes, expected {want}"
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Waits until `fd` is readable or `timeout` passes (EINTR restarts with the time left). An
/// error or hang-up without data is an error: the next read would only fail.
pub(crate) fn wait_readable(fd: impl AsFd, timeout: Duration) -> std::io::Result<bool> {
    use ptp_ipc::poll::{PollFlags, deadline_after, wait_fd};
    match wait_fd(fd, PollFlags::IN, deadline_after(timeout))? {
        None => Ok(false),
        Some(r) if r.contains(PollFlags::IN) => Ok(true),
        Some(r) => Err(std::io::Error::other(format!("poll revents {r:?}"))),
    }
}

impl IrqVector for LinuxIrq {
    fn wait(&self, timeout: Duration) -> IrqWait {
        // The driver has handled what the last firing reported: a level line may fire again.
        self.rearm();
        match wait_readable(&self.file, timeout)
            .and_then(|r| if r { self.consume() } else { Ok(false) })
        {
            Ok(true) => {
                if !matches!(self.rearm, Rearm::None) {
                    self.masked.store(true, Ordering::Release);
                }
                IrqWait::Fired
            }
            Ok(false) => IrqWait::TimedOut,
            Err(e) => {
                log::error!("{:?} vector: {e}", self.kind);
                IrqWait::Closed
            }
        }
    }

    fn ack(&self) {
        self.rearm();
    }
}
