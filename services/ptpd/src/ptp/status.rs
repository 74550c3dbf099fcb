//! What the engine publishes for the clock scheme's `status`: one snapshot per clock, written by
//! the engine thread after every port event and read by clock-scheme clients.

use std::sync::{Arc, Mutex};

use ptp_ipc::PortState;

use super::manage::MgmtSnapshot;

/// One PTP port's state as `ClockStatus` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortSnapshot {
    pub port_state: PortState,
    /// Offset from master (ns, local − master), the servo's estimate; 0 unless a slave.
    pub offset_ns: i64,
    /// Mean path delay (ns); 0 unless a slave.
    pub mean_path_delay_ns: i64,
    /// Frequency adjustment in force, absolute (the base ptpd found plus the servo's; scaled
    /// ppm).
    pub freq_scaled_ppm: i64,
    /// Grandmaster clock identity (EUI-64).
    pub grandmaster: [u8; 8],
    pub steps_removed: u16,
}

/// Snapshots indexed by clock (the `[[clock]]` order); `None` for clocks without a PTP port.
/// Also the management data sets of the whole PTP instance, once it has started.
#[derive(Debug, Clone, Default)]
pub struct PtpStatusBoard {
    ports: Arc<Mutex<Vec<Option<PortSnapshot>>>>,
    mgmt: Arc<Mutex<Option<Arc<MgmtSnapshot>>>>,
    /// The time source's board, when a clock has one (the engine announces its quality).
    source: Arc<Mutex<Option<crate::timesource::SourceBoard>>>,
}

impl PtpStatusBoard {
    pub fn new(clocks: usize) -> Self {
        Self {
            ports: Arc::new(Mutex::new(vec![None; clocks])),
            mgmt: Arc::default(),
            source: Arc::default(),
        }
    }

    /// Gives the engine the time source's board.
    pub fn set_source(&self, b: crate::timesource::SourceBoard) {
        *self.source.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
    }

    /// What the time source last reported, if a clock has one.
    pub fn source(&self) -> Option<crate::timesource::SourceSnapshot> {
        let b = self
            .source
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        b.and_then(|b| b.get())
    }

    pub fn get(&self, clock: usize) -> Option<PortSnapshot> {
        let v = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        v.get(clock).copied().flatten()
    }

    pub fn set(&self, clock: usize, snap: PortSnapshot) {
        let mut v = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = v.get_mut(clock) {
            *slot = Some(snap);
        }
    }

    /// The latest management snapshot; `None` before the PTP instance starts.
    pub fn mgmt(&self) -> Option<Arc<MgmtSnapshot>> {
        self.mgmt.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_mgmt(&self, snap: MgmtSnapshot) {
        *self.mgmt.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(snap));
    }
}
