//! ptp4l-style log lines (linuxptp 3.1, shared/reference/ptp-and-benchmarks.md §2.3), so people
//! who know linuxptp can read ptpd's logs.

use ptp_ipc::PortState;

use super::clock::{Sample, ServoState};

/// ptp4l's state names.
pub fn state_name(s: PortState) -> &'static str {
    s.name()
}

/// What caused a state change, as far as statime lets ptpd tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The BMCA recommended the new state.
    Bmca,
    /// The announce receipt timer expired.
    AnnounceTimeout,
    /// A received message (statime forces Faulty on conflicting peer-delay responders).
    Receive,
    /// The servo locked or lost lock (UNCALIBRATED ⇄ SLAVE, derived by ptpd).
    Servo,
    /// The driver reported a link change.
    Link,
    /// Port creation.
    Init,
}

/// ptp4l's event name for a transition.
pub fn event_name(old: PortState, new: PortState, cause: Cause, grandmaster: bool) -> &'static str {
    use PortState as S;
    match (old, new) {
        (_, S::Faulty) => "FAULT_DETECTED",
        (S::Faulty, _) | (S::Initializing, _) => "INIT_COMPLETE",
        (S::Uncalibrated, S::Slave) => "MASTER_CLOCK_SELECTED",
        (S::Slave, S::Uncalibrated) => "SYNCHRONIZATION_FAULT",
        _ if cause == Cause::AnnounceTimeout => "ANNOUNCE_RECEIPT_TIMEOUT_EXPIRES",
        (_, S::Uncalibrated) | (_, S::Slave) => "RS_SLAVE",
        (_, S::Master) if grandmaster => "RS_GRAND_MASTER",
        (_, S::Master) => "RS_MASTER",
        (_, S::Passive) => "RS_PASSIVE",
        _ => "RS_LISTENING",
    }
}

/// ptp4l's servo state digit.
pub fn servo_digit(s: ServoState) -> u8 {
    match s {
        ServoState::Unlocked => 0,
        ServoState::Jump => 1,
        ServoState::Locked => 2,
    }
}

fn mean_sd(v: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = v.clone().count() as f64;
    if n == 0.0 {
        return (0.0, 0.0);
    }
    let mean = v.clone().sum::<f64>() / n;
    let var = if n > 1.0 {
        v.map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// The statistics of one summary interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub rms: f64,
    pub max_abs: f64,
    pub freq_mean: f64,
    pub freq_sd: f64,
    pub delay_mean: f64,
    pub delay_sd: f64,
}

pub fn summarize(samples: &[Sample]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let n = samples.len();
    let rms = (samples
        .iter()
        .map(|s| s.offset_ns * s.offset_ns)
        .sum::<f64>()
        / n as f64)
        .sqrt();
    let max_abs = samples
        .iter()
        .map(|s| s.offset_ns.abs())
        .fold(0.0f64, f64::max);
    let (freq_mean, freq_sd) = mean_sd(samples.iter().map(|s| s.freq_ppb));
    let (delay_mean, delay_sd) = mean_sd(samples.iter().map(|s| s.delay_ns));
    Some(Summary {
        n,
        rms,
        max_abs,
        freq_mean,
        freq_sd,
        delay_mean,
        delay_sd,
    })
}

/// ptp4l's summary line (`rms R max M freq F +/- S delay D +/- E`), or its per-sample line
/// (`master offset X sN freq Y path delay Z`) when the interval held one sample.
pub fn summary_line(samples: &[Sample], servo: ServoState) -> Option<String> {
    let s = summarize(samples)?;
    Some(if s.n == 1 {
        let x = samples[0];
        format!(
            "master offset {:10.0} s{} freq {:+7.0} path delay {:9.0}",
            x.offset_ns,
            servo_digit(servo),
            x.freq_ppb,
            x.delay_ns
        )
    } else {
        format!(
            "rms {:4.0} max {:4.0} freq {:+6.0} +/- {:3.0} delay {:5.0} +/- {:3.0}",
            s.rms, s.max_abs, s.freq_mean, s.freq_sd, s.delay_mean, s.delay_sd
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_matches_ptp4l_format() {
        let s = [
            Sample {
                offset_ns: 3.0,
                delay_ns: 100.0,
                freq_ppb: -10.0,
            },
            Sample {
                offset_ns: -4.0,
                delay_ns: 102.0,
                freq_ppb: -12.0,
            },
        ];
        let line = summary_line(&s, ServoState::Locked).unwrap();
        assert_eq!(
            line,
            "rms    4 max    4 freq    -11 +/-   1 delay   101 +/-   1"
        );
        let one = summary_line(&s[..1], ServoState::Locked).unwrap();
        assert_eq!(
            one,
            "master offset          3 s2 freq     -10 path delay       100"
        );
        assert!(summary_line(&[], ServoState::Unlocked).is_none());
    }

    #[test]
    fn event_names() {
        use PortState as S;
        assert_eq!(
            event_name(S::Listening, S::Uncalibrated, Cause::Bmca, false),
            "RS_SLAVE"
        );
        assert_eq!(
            event_name(S::Uncalibrated, S::Slave, Cause::Servo, false),
            "MASTER_CLOCK_SELECTED"
        );
        assert_eq!(
            event_name(S::Listening, S::Master, Cause::AnnounceTimeout, true),
            "ANNOUNCE_RECEIPT_TIMEOUT_EXPIRES"
        );
        assert_eq!(
            event_name(S::Slave, S::Master, Cause::Bmca, true),
            "RS_GRAND_MASTER"
        );
    }
}
