//! `ptplab --gps`: host 0 becomes a grandmaster disciplined to a lab GPS receiver. Its NIC's
//! SDP0 takes the receiver's pulse (`ptplab gps`, a pulse per true second), its ptpd runs the
//! time-source role (`[clock.ts2phc]`), and every PHC is judged against the lab's true time
//! (CLOCK_MONOTONIC + the receiver's epoch, crate::gps) as well as against host 0; the last
//! host puts out a 1 PPS on its SDP0 (through ptpd's clock scheme, as `ptpctl perout` does)
//! once its PHC has kept within the lock band of true time for 3 s (a PPS started earlier
//! would move with every step the servo still makes), watched on its pin wire: each rising
//! edge's true instant against the true second.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use ptp_emu::pinwire::PinClient;
use serde_json::json;

use super::{Lab, log_file};

/// The receiver's pulse width, and the ts2phc settings host 0's ptpd gets.
pub const PULSE_WIDTH_MS: u64 = 100;
/// `extts_correction`: the models' input latch delay (ptp_emu `PinsConfig::default`, chosen
/// [U]), which an installation calibrates as it calibrates its antenna cable.
pub const LATCH_CORRECTION_NS: i64 = -8;

/// The `[clock.ts2phc]` table of host 0.
pub fn ts2phc_table() -> String {
    format!(
        "[clock.ts2phc]\npin_index = 0\nchannel = 0\npulsewidth = {}\nextts_correction = \
         {LATCH_CORRECTION_NS}\nholdover = 60\n",
        PULSE_WIDTH_MS * 1_000_000
    )
}

/// Host `i`'s pin socket.
pub fn pins_path(lab_dir: &std::path::Path, i: u32) -> PathBuf {
    lab_dir.join(format!("host{i}")).join("pins.sock")
}

/// What `--gps` runs beside the lab.
pub struct GpsRig {
    /// True time = CLOCK_MONOTONIC + this, ns.
    pub epoch: i128,
    /// The last host's pin wire, if there are two hosts or more; its PPS starts once it holds
    /// the lock band.
    scope: Option<(u32, PinClient)>,
    pps_started: bool,
    /// Samples in a row the last host kept within the lock band of true time.
    in_band: u32,
    /// Rising-edge errors seen so far (true instant − nearest true second), ns.
    pub pps_errors: Vec<i64>,
}

impl GpsRig {
    /// Starts the receiver on host 0's pin wire and the PPS out of the last host.
    pub fn start(lab: &mut Lab) -> Result<Self, String> {
        let epoch = crate::gps::default_epoch_ns();
        let dir = lab.hosts[0].dir.clone();
        let log = dir.join("gps.log");
        let mut gps = Command::new(&lab.exe);
        gps.arg("gps")
            .arg("--pins")
            .arg(pins_path(&lab.rt.path, 0))
            .args(["--pin", "0", "--width-ms", &PULSE_WIDTH_MS.to_string()])
            .arg("--epoch-ns")
            .arg(epoch.to_string())
            .stdin(Stdio::null())
            .stdout(log_file(&log)?)
            .stderr(log_file(&log)?);
        lab.kids
            .spawn("host0/gps", gps)
            .map_err(|e| format!("starting the GPS receiver: {e}"))?;
        let last = lab.hosts.len() as u32 - 1;
        let scope = if last > 0 {
            let scope = PinClient::connect(pins_path(&lab.rt.path, last))
                .map_err(|e| format!("host{last}'s pin wire: {e}"))?;
            Some((last, scope))
        } else {
            None
        };
        Ok(Self {
            epoch,
            scope,
            pps_started: false,
            in_band: 0,
            pps_errors: Vec::new(),
        })
    }

    /// Starts the last host's 1 PPS once it has held the lock band for 3 s (30 samples).
    fn maybe_start_pps(&mut self, lab: &Lab) -> Result<(), String> {
        let Some((last, _)) = self.scope else {
            return Ok(());
        };
        if self.pps_started {
            return Ok(());
        }
        let within = self
            .true_error(lab, last)
            .is_some_and(|e| e.abs() <= crate::figures::LOCK_NS);
        self.in_band = if within { self.in_band + 1 } else { 0 };
        if self.in_band < 30 {
            return Ok(());
        }
        let c = lab.clients[last as usize]
            .as_ref()
            .ok_or(format!("host{last}: no clock scheme"))?;
        c.set_pin(0, 0, ptp_ipc::PinFunction::PerOut, 0)
            .map_err(|e| format!("host{last}: pin 0: {e}"))?;
        let now = c.get(0).map_err(|e| e.to_string())?;
        c.per_out(
            0,
            0,
            (now / 1_000_000_000 + 2) * 1_000_000_000,
            1_000_000_000,
        )
        .map_err(|e| format!("host{last}: PPS out: {e}"))?;
        self.pps_started = true;
        Ok(())
    }

    /// Host `i`'s PHC minus true time now, ns.
    pub fn true_error(&self, lab: &Lab, i: u32) -> Option<i64> {
        let (phc, t) = lab.truth.get(i as usize)?.as_ref()?.now().ok()?;
        i64::try_from(i128::from(phc) - (i128::from(t) + self.epoch)).ok()
    }

    /// Starts the PPS when due and takes the edges that came since the last call.
    pub fn poll_pps(&mut self, lab: &Lab) -> Result<(), String> {
        self.maybe_start_pps(lab)?;
        let Some((_, scope)) = &self.scope else {
            return Ok(());
        };
        while let Ok(Some(e)) = scope.recv(Duration::from_millis(1)) {
            if e.pin == 0 && e.high {
                let t = i128::from(e.t) + self.epoch;
                let s = (t + 500_000_000).div_euclid(1_000_000_000) * 1_000_000_000;
                self.pps_errors.push((t - s) as i64);
            }
        }
        Ok(())
    }

    /// The summary: each host's PHC against true time over the second half of the run
    /// (`errors[i]`: (seconds since start, error) samples), and every PPS edge since the PPS
    /// started.
    pub fn summary(&self, errors: &[Vec<(f64, i64)>], elapsed: f64) -> serde_json::Value {
        let stats = |v: &[i64]| {
            if v.is_empty() {
                return json!(null);
            }
            let n = v.len() as f64;
            let mean = v.iter().sum::<i64>() as f64 / n;
            let rms = (v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n).sqrt();
            let max = v.iter().map(|x| x.abs()).max().unwrap_or(0);
            json!({"n": v.len(), "mean_ns": mean, "rms_ns": rms, "max_abs_ns": max})
        };
        let hosts: Vec<serde_json::Value> = errors
            .iter()
            .map(|e| {
                let half: Vec<i64> = e
                    .iter()
                    .filter(|(t, _)| *t >= elapsed / 2.0)
                    .map(|&(_, x)| x)
                    .collect();
                // Within the lock band of true time to the end, from when (figures::lock_time).
                let points: Vec<crate::figures::Point> =
                    e.iter().map(|&(t, x)| (t, Some(x))).collect();
                let mut v = stats(&half);
                v["lock_s"] = json!(crate::figures::lock_time(&points));
                v
            })
            .collect();
        json!({
            "epoch_ns": self.epoch.to_string(),
            "vs_true_time": hosts,
            "pps_out": {"host": self.scope.as_ref().map(|s| s.0), "rising_edge_error": stats(&self.pps_errors)},
        })
    }
}
