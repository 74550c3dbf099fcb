//! `ptplab --scenario NAME`: the servo scenario matrix on the emulated hosts (issue 28). A
//! scenario is a preset of the lab's cable and clock options, and at most one disturbance at
//! [`EVENT_AT_S`]; the summary adds, per slave, its true time to lock, its steady state and the
//! largest excursion after the disturbance, all on the ground truth and against the offset the
//! cable dictates (an asymmetric cable leaves the slave half the asymmetry behind: PTP cannot
//! see it).
//!
//! Cable-only scenarios run with Linux guests too (`--linux-igc 0 --linux-igc 1`: ptp4l on both
//! ends); the disturbances need what only igcd hosts have (fault injection, restarts).

use std::time::Duration;

use serde_json::json;

use crate::figures::{OffsetStats, Point, Sample, lock_time};

use super::{Lab, LabConfig};

/// When a scenario's disturbance happens, s after the lab started.
pub const EVENT_AT_S: f64 = 20.0;
/// A scenario's run when `--duration` is not given, s.
pub const DURATION_S: f64 = 40.0;

/// What a scenario does to the running lab.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// Host 1's link goes down for `down_s` (fault injection into its NIC).
    LinkFlap { down_s: f64 },
    /// Host 1's daemon is killed; the lab's supervisor starts it again.
    Kill { role: Role },
    /// The grandmaster (host 0) goes away for `down_s` and comes back with a fresh NIC: a new
    /// clock, whose time is not the old one's.
    GrandmasterChange { down_s: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Driver,
    Ptpd,
}

#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    preset: fn(&mut LabConfig),
    pub event: Option<Event>,
}

/// Scenarios are told apart by name (the preset is a function).
impl PartialEq for Scenario {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Scenario {
    /// Whether a pair of Linux guests can run it: cable and clock options only.
    pub fn linux_can(&self) -> bool {
        self.event.is_none()
    }

    /// Applies the scenario's options (before the command line's own, which win).
    pub fn apply(&self, c: &mut LabConfig) {
        (self.preset)(c);
        match self.event {
            Some(Event::LinkFlap { .. }) => c.faults = true,
            // A driver restart keeps the PHC (warm attach), as on real hardware.
            Some(Event::Kill { role: Role::Driver }) => c.nic_process = true,
            _ => {}
        }
    }

    /// Whether `c` can run it.
    pub fn check(&self, c: &LabConfig) -> Result<(), String> {
        if c.hosts != 2 {
            return Err(format!("--scenario {}: needs --hosts 2", self.name));
        }
        if self.event.is_some() && !c.linux_igc.is_empty() {
            return Err(format!(
                "--scenario {}: its disturbance needs igcd hosts (not --linux-igc)",
                self.name
            ));
        }
        Ok(())
    }
}

/// Every scenario, in the order the matrix lists them.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "start-1us",
        about: "clocks start up to 1 µs apart",
        preset: |c| c.initial_offset_ms = 0.001,
        event: None,
    },
    Scenario {
        name: "start-1ms",
        about: "clocks start up to 1 ms apart (the lab's default)",
        preset: |c| c.initial_offset_ms = 1.0,
        event: None,
    },
    Scenario {
        name: "start-1s",
        about: "clocks start up to 1 s apart",
        preset: |c| c.initial_offset_ms = 1000.0,
        event: None,
    },
    Scenario {
        name: "ppm-100",
        about: "oscillators spread over ±100 ppm",
        preset: |c| c.ppm_spread = 200.0,
        event: None,
    },
    Scenario {
        name: "asymmetry-20us",
        about: "master→slave 20 µs longer than slave→master (30 µs and 10 µs)",
        preset: |c| {
            c.cable_delay_ns = 20_000;
            c.asymmetry_ns = 20_000;
        },
        event: None,
    },
    Scenario {
        name: "loss-1pct",
        about: "1 % of frames lost in each direction",
        preset: |c| c.loss = 0.01,
        event: None,
    },
    Scenario {
        name: "loss-10pct",
        about: "10 % of frames lost in each direction",
        preset: |c| c.loss = 0.1,
        event: None,
    },
    Scenario {
        name: "jitter-500ns",
        about: "each frame delayed by a further ±500 ns",
        preset: |c| c.cable_jitter_ns = 500,
        event: None,
    },
    Scenario {
        name: "link-flap",
        about: "the slave's link down for 3 s at 20 s",
        preset: |_| {},
        event: Some(Event::LinkFlap { down_s: 3.0 }),
    },
    Scenario {
        name: "driver-restart",
        about: "the slave's igcd killed at 20 s (NIC in its own process: warm attach)",
        preset: |_| {},
        event: Some(Event::Kill { role: Role::Driver }),
    },
    Scenario {
        name: "ptpd-restart",
        about: "the slave's ptpd killed at 20 s",
        preset: |_| {},
        event: Some(Event::Kill { role: Role::Ptpd }),
    },
    Scenario {
        name: "gm-change",
        about: "the grandmaster gone for 3 s at 20 s, back as a new clock",
        preset: |_| {},
        event: Some(Event::GrandmasterChange { down_s: 3.0 }),
    },
];

/// The scenario called `name`.
pub fn find(name: &str) -> Result<&'static Scenario, String> {
    ALL.iter().find(|s| s.name == name).ok_or_else(|| {
        let names: Vec<&str> = ALL.iter().map(|s| s.name).collect();
        format!("no scenario {name:?}; the scenarios: {}", names.join(", "))
    })
}

/// Runs a scenario's disturbance over the lab's main loop: [`Self::step`] each pass.
#[derive(Debug)]
pub struct Timeline {
    event: Option<Event>,
    /// When the disturbance started, and when its second half (link up, master back) is due.
    started: Option<f64>,
    undo_at: Option<f64>,
}

impl Timeline {
    pub fn new(s: &Scenario) -> Self {
        Self {
            event: s.event,
            started: None,
            undo_at: None,
        }
    }

    /// When the disturbance happened, s after the lab started.
    pub fn event_at(&self) -> Option<f64> {
        self.started
    }

    /// Carries out what is due at `t` (s after the lab started).
    pub fn step(&mut self, lab: &mut Lab, t: f64) -> Result<(), String> {
        let Some(ev) = self.event else { return Ok(()) };
        if self.started.is_none() && t >= EVENT_AT_S {
            self.started = Some(t);
            match ev {
                Event::LinkFlap { down_s } => {
                    lab.fault(1, "link down")?;
                    self.undo_at = Some(t + down_s);
                }
                Event::Kill { role } => {
                    let name = match role {
                        Role::Driver => lab.cfg.driver_of(1),
                        Role::Ptpd => "ptpd",
                    };
                    lab.signal(1, name, libc::SIGKILL)?;
                }
                Event::GrandmasterChange { down_s } => {
                    lab.stop_host(0);
                    self.undo_at = Some(t + down_s);
                }
            }
        } else if self.undo_at.is_some_and(|at| t >= at) {
            self.undo_at = None;
            match ev {
                Event::LinkFlap { .. } => {
                    lab.fault(1, "link up")?;
                }
                Event::GrandmasterChange { .. } => lab.restart_host(0)?,
                Event::Kill { .. } => {}
            }
        }
        Ok(())
    }
}

/// The true offset a locked slave shows on this cable: −asymmetry / 2, ns.
pub fn expected_offset_ns(c: &LabConfig) -> i64 {
    -c.asymmetry_ns / 2
}

/// A slave's scenario figures from its trace, against [`expected_offset_ns`].
pub fn figures(
    trace: &[Sample],
    expected: i64,
    event_at: Option<f64>,
    end: f64,
) -> serde_json::Value {
    // Non-SLAVE samples are unlocked; SLAVE samples without truth say nothing.
    let pts: Vec<Point> = trace
        .iter()
        .filter_map(|p| {
            if p.status.port_state != ptp_ipc::PortState::Slave {
                return Some((p.t, None));
            }
            p.true_offset_ns.map(|o| (p.t, Some(o - expected)))
        })
        .collect();
    let lock_at = |from: usize| lock_time(&pts[from..]);
    let vals = |from: f64| -> Vec<i64> {
        pts.iter()
            .filter(|p| p.0 >= from)
            .filter_map(|p| p.1)
            .collect()
    };
    let steady_from = match event_at {
        Some(at) => at.max(end - (end - at) / 2.0),
        None => end / 2.0,
    };
    let steady = OffsetStats::of(&vals(steady_from));
    let mut out = json!({
        "expected_offset_ns": expected,
        "true_lock_time_s": lock_at(0),
        "steady_from_s": steady_from,
        "steady_rms_ns": steady.map(|s| s.rms_ns),
        "steady_max_abs_ns": steady.map(|s| s.max_abs_ns),
    });
    if let Some(at) = event_at {
        // Before the event: the lock it had; from it: the excursion, unlocked samples (the
        // slave no longer SLAVE) counted as such, and when it was back for good.
        let k = pts.iter().position(|p| p.0 >= at).unwrap_or(pts.len());
        let exc = vals(at).iter().map(|o| o.abs()).max();
        let unlocked = pts[k..].iter().filter(|p| p.1.is_none()).count();
        out["event_at_s"] = json!(at);
        out["lock_before_event_s"] = json!(lock_time(&pts[..k]));
        out["excursion_ns"] = json!(exc);
        out["samples_not_slave_after_event"] = json!(unlocked);
        out["relock_after_event_s"] = json!(lock_at(k).map(|l| (l - at).max(0.0)));
    }
    out
}

/// The scenario summary line of every host that ended SLAVE.
pub fn summary(
    s: &Scenario,
    lab: &Lab,
    traces: &[Vec<Sample>],
    timeline: &Timeline,
    end: f64,
) -> serde_json::Value {
    let expected = expected_offset_ns(&lab.cfg);
    let slaves: Vec<serde_json::Value> = traces
        .iter()
        .enumerate()
        .filter(|(_, tr)| {
            tr.last()
                .is_some_and(|p| p.status.port_state == ptp_ipc::PortState::Slave)
        })
        .map(|(i, tr)| {
            let mut f = figures(tr, expected, timeline.event_at(), end);
            f["host"] = json!(i);
            f["stack"] = json!(if lab.is_guest(i as u32) {
                "ptp4l"
            } else {
                "ptpd"
            });
            f
        })
        .collect();
    json!({"scenario": s.name, "about": s.about, "slaves": slaves})
}

/// How long a scenario runs unless `--duration` says otherwise.
pub fn default_duration() -> Duration {
    Duration::from_secs_f64(DURATION_S)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptp_ipc::{ClockStatus, PortState};

    fn pt(t: f64, state: PortState, truth: Option<i64>) -> Sample {
        Sample {
            t,
            status: ClockStatus {
                port_state: state,
                ..ClockStatus::default()
            },
            true_offset_ns: truth,
            true_gm_offset_ns: truth,
        }
    }

    #[test]
    fn every_scenario_is_found_by_name_and_a_typo_lists_them() {
        for s in ALL {
            assert_eq!(find(s.name).unwrap().name, s.name);
        }
        let e = find("start-2ms").unwrap_err();
        assert!(e.contains("start-1ms") && e.contains("gm-change"), "{e}");
    }

    #[test]
    fn presets_set_their_option_and_disturbances_what_they_need() {
        let mut c = LabConfig::default();
        find("asymmetry-20us").unwrap().apply(&mut c);
        assert_eq!((c.asymmetry_ns, expected_offset_ns(&c)), (20_000, -10_000));
        c.validate().expect("a cable the lab accepts");
        for s in ALL {
            let mut c = LabConfig::default();
            s.apply(&mut c);
            c.validate().unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
        let mut c = LabConfig::default();
        find("link-flap").unwrap().apply(&mut c);
        assert!(c.faults);
        let mut c = LabConfig::default();
        find("driver-restart").unwrap().apply(&mut c);
        assert!(c.nic_process);
        c.linux_igc = vec![0, 1];
        assert!(find("driver-restart").unwrap().check(&c).is_err());
        assert!(find("loss-10pct").unwrap().check(&c).is_ok());
        assert!(find("loss-10pct").unwrap().linux_can());
    }

    #[test]
    fn figures_judge_against_the_expected_offset_and_time_the_relock() {
        // Locked at −10 µs (an asymmetric cable) from 2 s; at 20 s off by 5 µs for 1 s, and
        // not SLAVE for 0.5 s.
        let mut tr = vec![pt(0.0, PortState::Listening, None)];
        for k in 1..400 {
            let t = k as f64 * 0.1;
            let off = if t < 2.0 {
                Some(-500_000)
            } else if (20.0..21.0).contains(&t) {
                Some(-15_000)
            } else {
                Some(-10_000)
            };
            let st = if (21.0..21.5).contains(&t) {
                PortState::Listening
            } else {
                PortState::Slave
            };
            tr.push(pt(t, st, off));
        }
        let f = figures(&tr, -10_000, Some(20.0), 40.0);
        assert!(
            (f["true_lock_time_s"].as_f64().unwrap() - 21.5).abs() < 1e-9,
            "{f}"
        );
        assert_eq!(f["excursion_ns"], 5_000);
        assert!(
            (f["relock_after_event_s"].as_f64().unwrap() - 1.5).abs() < 1e-9,
            "{f}"
        );
        assert_eq!(f["steady_max_abs_ns"], 0);
        assert_eq!(f["samples_not_slave_after_event"], 5);
        assert!(
            (f["lock_before_event_s"].as_f64().unwrap() - 2.0).abs() < 1e-9,
            "{f}"
        );
        // Without an event: the lock from the start, the second half steady.
        let f = figures(&tr[..200], -10_000, None, 20.0);
        assert!(
            (f["true_lock_time_s"].as_f64().unwrap() - 2.0).abs() < 1e-9,
            "{f}"
        );
        assert!(f.get("excursion_ns").is_none());
    }
}
