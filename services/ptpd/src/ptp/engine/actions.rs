//! statime's side: starting the instance and its ports, the actions a port hands back
//! (sends and timer resets) and the periodic BMCA.

use std::time::Duration;

use statime::PtpInstance;
use statime::config::{
    AcceptAnyMaster, ClockIdentity, DelayMechanism as StDelay, InstanceConfig, LeapIndicator,
    PortConfig, PtpMinorVersion, SdoId, TimePropertiesDS, TimeSource,
};
use statime::filters::KalmanConfiguration;
use statime::port::{PortAction, PortActionIterator};
use statime::time::{Duration as PtpDuration, Interval};

use super::super::clock::{self, PhcClock, ServoConfig, ServoState, TracedConfig};
use super::super::config::{
    DelayMechanism, PortSettings, ServoKind, ServoSettings, TimeProperties, format_clock_identity,
};
use super::super::log::Cause;
use super::super::servo::PiConfig;
use super::timers::TimerKind;
use super::{BmcaPort, Core, Instance, bump, dur_ns};

/// A [`PortAction`] with its bytes copied out of the port's buffer, so the port can be called
/// again while earlier actions are still being carried out.
pub(super) enum Act {
    Event {
        ctx: statime::port::TimestampContext,
        data: Vec<u8>,
        link_local: bool,
    },
    General {
        data: Vec<u8>,
        link_local: bool,
    },
    Timer(TimerKind, Duration),
}

/// Drains an action iterator completely (statime's iterators borrow the port's send buffer).
pub(super) fn own(actions: PortActionIterator<'_>) -> Vec<Act> {
    let mut out = Vec::new();
    for a in actions {
        out.push(match a {
            PortAction::SendEvent {
                context,
                data,
                link_local,
            } => Act::Event {
                ctx: context,
                data: data.to_vec(),
                link_local,
            },
            PortAction::SendGeneral { data, link_local } => Act::General {
                data: data.to_vec(),
                link_local,
            },
            PortAction::ResetAnnounceTimer { duration } => {
                Act::Timer(TimerKind::Announce, duration)
            }
            PortAction::ResetSyncTimer { duration } => Act::Timer(TimerKind::Sync, duration),
            PortAction::ResetDelayRequestTimer { duration } => {
                Act::Timer(TimerKind::DelayRequest, duration)
            }
            PortAction::ResetAnnounceReceiptTimer { duration } => {
                Act::Timer(TimerKind::AnnounceReceipt, duration)
            }
            PortAction::ResetFilterUpdateTimer { duration } => {
                Act::Timer(TimerKind::FilterUpdate, duration)
            }
            // Only needed to relay TLVs between ports of a boundary clock; ptpd's ports each
            // sit on their own segment and forward nothing.
            PortAction::ForwardTLV { .. } => continue,
        });
    }
    out
}

fn time_source(v: u8) -> TimeSource {
    match v {
        0x10 => TimeSource::AtomicClock,
        0x20 => TimeSource::Gnss,
        0x30 => TimeSource::TerrestrialRadio,
        0x39 => TimeSource::SerialTimeCode,
        0x40 => TimeSource::Ptp,
        0x50 => TimeSource::Ntp,
        0x60 => TimeSource::HandSet,
        0x90 => TimeSource::Other,
        0xA0 => TimeSource::InternalOscillator,
        v => TimeSource::Unknown(v),
    }
}

fn time_properties_ds(tp: &TimeProperties) -> TimePropertiesDS {
    if tp.ptp_timescale {
        TimePropertiesDS::new_ptp_time(
            tp.utc_offset_valid.then_some(tp.utc_offset),
            LeapIndicator::NoLeap,
            tp.time_traceable,
            tp.frequency_traceable,
            time_source(tp.time_source),
        )
    } else {
        TimePropertiesDS::new_arbitrary_time(
            tp.time_traceable,
            tp.frequency_traceable,
            time_source(tp.time_source),
        )
    }
}

/// statime's configuration of one port.
fn port_config(s: &PortSettings) -> PortConfig<AcceptAnyMaster> {
    let delay_mechanism = match s.delay_mechanism {
        DelayMechanism::E2E => StDelay::E2E {
            interval: Interval::from_log_2(s.log_min_delay_req_interval),
        },
        DelayMechanism::P2P => StDelay::P2P {
            interval: Interval::from_log_2(s.log_min_pdelay_req_interval),
        },
    };
    PortConfig {
        acceptable_master_list: AcceptAnyMaster,
        delay_mechanism,
        announce_interval: Interval::from_log_2(s.log_announce_interval),
        announce_receipt_timeout: s.announce_receipt_timeout,
        sync_interval: Interval::from_log_2(s.log_sync_interval),
        master_only: s.master_only,
        delay_asymmetry: PtpDuration::from_nanos(s.delay_asymmetry_ns),
        minor_ptp_version: PtpMinorVersion::One,
    }
}

impl Core {
    /// Creates statime's instance and its ports once the clock identity is known.
    pub(super) fn start_instance(&mut self, now: u64) {
        let Some(id) = self.own_id else { return };
        if self.instance.is_some() {
            return;
        }
        let ic = InstanceConfig {
            clock_identity: ClockIdentity(id),
            priority_1: self.inst.priority1,
            priority_2: self.inst.priority2,
            domain_number: self.inst.domain_number,
            sdo_id: SdoId::default(),
            slave_only: self.inst.slave_only,
            path_trace: false,
        };
        // Leaked: statime's ports borrow their instance for as long as they live. A SET that
        // replaces it frees it (`restart_instance`); otherwise it lives as long as the
        // process (tests leak one per engine, a few KiB).
        let instance: &'static Instance = Box::leak(Box::new(PtpInstance::new(
            ic,
            time_properties_ds(&self.inst.time_properties),
        )));
        self.instance = Some(instance);
        log::info!(
            "clock identity {} (domain {}, priority1 {}, priority2 {}{})",
            format_clock_identity(&id),
            self.inst.domain_number,
            self.inst.priority1,
            self.inst.priority2,
            if self.inst.slave_only {
                ", slaveOnly"
            } else {
                ""
            }
        );
        for i in 0..self.ports.len() {
            let p = &self.ports[i];
            let fc = TracedConfig {
                servo: servo_config(&self.inst.servo, p.s.max_frequency_ppb),
                state: p.clock.clone(),
            };
            let rng = super::seed::port_rng(self.rng_base, i);
            let clock = PhcClock::new(&p.s.name, p.io.clone(), p.clock.clone());
            let (running, actions) = instance
                .add_port(port_config(&p.s), fc, clock, rng)
                .end_bmca();
            self.ports[i].port = Some(running);
            let acts = own(actions);
            self.execute(i, acts, now);
            self.note_state(i, Cause::Init);
        }
        self.bmca_at = Some(now + dur_ns(instance.bmca_interval()));
        self.summary_at = Some(now + self.summary_interval_ns());
    }

    /// Replaces statime's instance and its ports with new ones built from the current
    /// settings (statime 0.4 cannot change a running instance's defaultDS; see `manage.rs`).
    pub(super) fn restart_instance(&mut self, now: u64) {
        let Some(old) = self.instance.take() else {
            return;
        };
        for i in 0..self.ports.len() {
            let p = &mut self.ports[i];
            // The old port's timers, parked TX contexts and servo lock go with it.
            p.port = None;
            p.timers = [None; 5];
            p.last_sync_rx_ns = None;
            {
                let mut st = clock::lock(&p.clock);
                st.servo = ServoState::default();
                st.lock_run = 0;
            }
            self.drop_parked(i);
        }
        self.grandmaster = None;
        // Safety: `old` is the `Box::leak`ed instance of `start_instance`, and nothing borrows
        // it any more: its ports, the only other holders of the reference, were dropped above
        // and `self.instance` no longer holds it. So it is freed once, with no reference left.
        drop(unsafe { Box::from_raw(std::ptr::from_ref(old).cast_mut()) });
        self.start_instance(now);
    }

    /// Carries out a port's actions (already copied out of its buffer).
    pub(super) fn execute(&mut self, i: usize, acts: Vec<Act>, now: u64) {
        for a in acts {
            match a {
                Act::Timer(k, d) => {
                    self.ports[i].timers[k as usize] = Some(now.saturating_add(dur_ns(d)));
                }
                Act::Event {
                    ctx,
                    data,
                    link_local,
                } => self.send(i, &data, true, link_local, Some(ctx), now),
                Act::General { data, link_local } => {
                    self.send(i, &data, false, link_local, None, now)
                }
            }
        }
    }
    pub(super) fn run_bmca(&mut self, now: u64) {
        let Some(instance) = self.instance else {
            return;
        };
        if self.ports.iter().any(|p| p.port.is_none()) {
            return;
        }
        bump(&self.stats.bmca_runs);
        let mut in_bmca: Vec<BmcaPort> = self
            .ports
            .iter_mut()
            .filter_map(|p| p.port.take())
            .map(|p| p.start_bmca())
            .collect();
        {
            let mut refs: Vec<&mut BmcaPort> = in_bmca.iter_mut().collect();
            instance.bmca(&mut refs);
        }
        let mut pending = Vec::with_capacity(in_bmca.len());
        for (i, p) in in_bmca.into_iter().enumerate() {
            let (running, actions) = p.end_bmca();
            self.ports[i].port = Some(running);
            pending.push(own(actions));
        }
        self.bmca_at = Some(now + dur_ns(instance.bmca_interval()));
        self.note_grandmaster();
        for (i, acts) in pending.into_iter().enumerate() {
            self.execute(i, acts, now);
            self.note_state(i, Cause::Bmca);
        }
    }
}

/// A port's servo settings: the instance's, bounded by the port's `max_frequency`.
fn servo_config(s: &ServoSettings, max_frequency_ppb: u32) -> ServoConfig {
    let max_ppb = f64::from(max_frequency_ppb);
    let pi = PiConfig {
        kp: s.pi_proportional_const,
        ki: s.pi_integral_const,
        step_threshold_ns: s
            .step_threshold_s
            .map_or(PiConfig::default().step_threshold_ns, |t| t * 1e9),
        first_step_threshold_ns: s.first_step_threshold_s * 1e9,
        max_frequency_ppb: max_ppb,
        delay_filter_length: s.delay_filter_length,
    };
    let mut k = KalmanConfiguration::default();
    k.max_freq_offset = k.max_freq_offset.min(max_ppb / 1000.0);
    match s.kind {
        ServoKind::Pi => ServoConfig::Pi(pi),
        ServoKind::Kalman => {
            if let Some(t) = s.step_threshold_s {
                k.step_threshold = PtpDuration::from_seconds(t);
            }
            ServoConfig::Kalman(k)
        }
    }
}
