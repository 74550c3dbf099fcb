//! What the engine shows: port states as ptpd reports them (statime's, with UNCALIBRATED and
//! FAULTY derived), ptp4l-style log lines for transitions, the summary line, and the snapshots
//! published on the status board.

use ptp_ipc::PortState;

use super::super::clock::{self, ServoState};
use super::super::config::format_clock_identity;
use super::super::log::{Cause, event_name, state_name, summary_line};
use super::super::status::PortSnapshot;
use super::Core;

fn map_state(s: statime::observability::port::PortState, servo: ServoState) -> PortState {
    use statime::observability::port::PortState as St;
    match s {
        St::Initializing => PortState::Initializing,
        St::Faulty => PortState::Faulty,
        St::Disabled => PortState::Disabled,
        St::Listening => PortState::Listening,
        St::PreMaster => PortState::PreMaster,
        St::Master => PortState::Master,
        St::Passive => PortState::Passive,
        St::Uncalibrated => PortState::Uncalibrated,
        // statime has no UNCALIBRATED: a slave whose servo has not locked is reported as one,
        // as ptp4l does.
        St::Slave if servo == ServoState::Locked => PortState::Slave,
        St::Slave => PortState::Uncalibrated,
    }
}

pub(super) fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl Core {
    /// Logs a change of grandmaster the way ptp4l does.
    pub(super) fn note_grandmaster(&mut self) {
        let Some(instance) = self.instance else {
            return;
        };
        let gm = instance.parent_ds().grandmaster_identity.0;
        if self.grandmaster == Some(gm) {
            return;
        }
        self.grandmaster = Some(gm);
        if Some(gm) == self.own_id {
            log::info!(
                "selected local clock {} as best master",
                format_clock_identity(&gm)
            );
        } else {
            log::info!("selected best master clock {}", format_clock_identity(&gm));
        }
    }

    pub(super) fn derived_state(&self, i: usize) -> PortState {
        let p = &self.ports[i];
        let Some(port) = &p.port else {
            return PortState::Initializing;
        };
        if !p.link_up {
            // statime cannot be told about the link; ptpd reports the port as ptp4l would.
            return PortState::Faulty;
        }
        map_state(port.port_ds().port_state, clock::lock(&p.clock).servo)
    }

    /// Logs a state transition (ptp4l style) and publishes the port's snapshot.
    pub(super) fn note_state(&mut self, i: usize, cause: Cause) {
        let new = self.derived_state(i);
        let old = self.ports[i].shown;
        if new != old {
            if new == PortState::Master {
                self.note_grandmaster();
            }
            let gm = self
                .instance
                .map(|inst| inst.parent_ds().grandmaster_identity.0);
            let is_gm = gm.is_some() && gm == self.own_id;
            let p = &mut self.ports[i];
            p.shown = new;
            log::info!(
                "port {} ({}): {} to {} on {}",
                p.number,
                p.s.name,
                state_name(old),
                state_name(new),
                event_name(old, new, cause, is_gm)
            );
            if new == PortState::Master && is_gm {
                log::info!("assuming the grand master role");
            }
            self.follow_role(i);
        }
        self.publish(i);
    }

    /// Writes port `i`'s snapshot for the clock scheme.
    pub(super) fn publish(&self, i: usize) {
        if let Some(board) = &self.board {
            board.set(self.ports[i].s.clock, self.snapshot(i));
            if let Some(m) = self.mgmt_snapshot() {
                board.set_mgmt(m);
            }
        }
    }

    /// The once-per-summary_interval line of each slave port.
    pub(super) fn summary(&mut self) {
        for i in 0..self.ports.len() {
            let slave = self.ports[i].port.as_ref().is_some_and(|p| p.is_steering());
            let p = &self.ports[i];
            let (samples, servo) = {
                let mut st = clock::lock(&p.clock);
                (std::mem::take(&mut st.samples), st.servo)
            };
            if !slave {
                continue;
            }
            if let Some(line) = summary_line(&samples, servo) {
                log::info!("port {} ({}): {line}", p.number, p.s.name);
            }
        }
        // A servo that locked or unlocked since the last call shows up as UNCALIBRATED ⇄ SLAVE.
        for i in 0..self.ports.len() {
            self.note_state(i, Cause::Servo);
        }
    }

    /// The current snapshot of port `k` (tests and diagnostics).
    pub fn snapshot(&self, k: usize) -> PortSnapshot {
        let p = &self.ports[k];
        let mut snap = PortSnapshot {
            port_state: self.derived_state(k),
            freq_scaled_ppm: clock::lock(&p.clock).freq_scaled_ppm,
            ..PortSnapshot::default()
        };
        if let (Some(instance), Some(port)) = (self.instance, &p.port) {
            let est = port.port_current_ds_contribution();
            let slave = est.is_some();
            let cur = instance.current_ds(est);
            if slave {
                snap.offset_ns = clamp_i64(cur.offset_from_master.nanos_rounded());
                snap.mean_path_delay_ns = clamp_i64(cur.mean_delay.nanos_rounded());
            }
            snap.steps_removed = cur.steps_removed;
            snap.grandmaster = instance.parent_ds().grandmaster_identity.0;
        }
        snap
    }

    /// The last measured offset of port `k` (ns), if it is a slave with measurements.
    pub fn last_offset_ns(&self, k: usize) -> Option<f64> {
        clock::lock(&self.ports[k].clock).last_offset_ns
    }
}
