//! The engine's state as management data sets ([`MgmtSnapshot`]): statime's data sets, with
//! what ptpd itself decides on top (the derived port state that `ptpctl status` shows, and
//! the time properties ptpd announces as grandmaster).

use statime::config::{ClockQuality as StQuality, LeapIndicator, TimePropertiesDS};
use statime::observability::parent::ParentDS;

use super::super::config::DelayMechanism;
use super::super::config::TimeProperties;
use super::super::manage::{MgmtSnapshot, PortEntry};
use super::super::mgmt::{
    ClockQuality, CurrentDataSet, DefaultDataSet, ParentDataSet, PortDataSet, PortIdentity,
    PortPropertiesNp, TimePropertiesDataSet, TimeStatusNp,
};
use super::Core;
use super::status::clamp_i64;

/// linuxptp's `timestamping` value for hardware time stamps (PORT_PROPERTIES_NP).
const TS_HARDWARE: u8 = 1;

fn quality(q: StQuality) -> ClockQuality {
    ClockQuality {
        class: q.clock_class,
        accuracy: q.clock_accuracy.to_primitive(),
        offset_scaled_log_variance: q.offset_scaled_log_variance,
    }
}

/// statime's time properties (a slave's, copied from the grandmaster's Announce); the flags
/// octet in IEEE 1588 Table 37 bit order. statime keeps no currentUtcOffset it was not told is
/// valid, so that one reads 0.
fn time_properties(tp: &TimePropertiesDS) -> TimePropertiesDataSet {
    let flags = u8::from(tp.leap_indicator == LeapIndicator::Leap61)
        | u8::from(tp.leap_indicator == LeapIndicator::Leap59) << 1
        | u8::from(tp.current_utc_offset.is_some()) << 2
        | u8::from(tp.ptp_timescale) << 3
        | u8::from(tp.time_traceable) << 4
        | u8::from(tp.frequency_traceable) << 5;
    TimePropertiesDataSet {
        current_utc_offset: tp.current_utc_offset.unwrap_or(0),
        flags,
        time_source: tp.time_source.to_primitive(),
    }
}

fn parent(pds: &ParentDS) -> ParentDataSet {
    ParentDataSet {
        parent_port: PortIdentity {
            clock: pds.parent_port_identity.clock_identity.0,
            port: pds.parent_port_identity.port_number,
        },
        // statime 0.4 computes none of the observed parent statistics (its ParentDS leaves
        // them out); these are IEEE 1588's "not computed" values, which ptp4l reports too.
        parent_stats: false,
        observed_offset_scaled_log_variance: 0xFFFF,
        observed_phase_change_rate: 0x7FFF_FFFF,
        gm_priority1: pds.grandmaster_priority_1,
        gm_quality: quality(pds.grandmaster_clock_quality),
        gm_priority2: pds.grandmaster_priority_2,
        gm_identity: pds.grandmaster_identity.0,
    }
}

/// What [`super::super::net::rewrite_announce`] puts in our Announces as grandmaster.
fn announced(tp: &TimeProperties) -> TimePropertiesDataSet {
    let flags = u8::from(tp.utc_offset_valid) << 2
        | u8::from(tp.ptp_timescale) << 3
        | u8::from(tp.time_traceable) << 4
        | u8::from(tp.frequency_traceable) << 5;
    TimePropertiesDataSet {
        current_utc_offset: tp.utc_offset,
        flags,
        time_source: tp.time_source,
    }
}

impl Core {
    /// The management snapshot; `None` until the PTP instance has started.
    pub fn mgmt_snapshot(&self) -> Option<MgmtSnapshot> {
        let instance = self.instance?;
        let own = self.own_id?;
        let dds = instance.default_ds();
        let pds = instance.parent_ds();
        let gm = pds.grandmaster_identity.0;
        // The slave port's estimate feeds currentDS, as `snapshot` does for ptpctl status.
        let (est, ingress) = self
            .ports
            .iter()
            .find_map(|p| {
                let est = p.port.as_ref()?.port_current_ds_contribution()?;
                Some((Some(est), p.last_sync_rx_ns))
            })
            .unwrap_or((None, None));
        let slave = est.is_some();
        let cur = instance.current_ds(est);
        let (offset, delay) = if slave {
            (
                clamp_i64(cur.offset_from_master.nanos_rounded()),
                clamp_i64(cur.mean_delay.nanos_rounded()),
            )
        } else {
            (0, 0)
        };
        // As grandmaster ptpd announces its configured time properties (mod.rs, "Timescale"),
        // not the ones statime keeps for itself.
        let (source_quality, own_tp) = self.announced();
        let tp = if gm == own {
            announced(&own_tp)
        } else {
            time_properties(&instance.time_properties_ds())
        };
        let mut own_quality = quality(dds.clock_quality);
        if let Some((class, accuracy)) = source_quality {
            own_quality.class = class;
            own_quality.accuracy = accuracy;
        }
        let mut parent_ds = parent(&pds);
        if gm == own {
            parent_ds.gm_quality = own_quality;
        }
        Some(MgmtSnapshot {
            default: DefaultDataSet {
                two_step: true,
                slave_only: dds.slave_only,
                number_ports: dds.number_ports,
                priority1: dds.priority_1,
                quality: own_quality,
                priority2: dds.priority_2,
                clock_identity: own,
                domain: dds.domain_number,
            },
            current: CurrentDataSet {
                steps_removed: cur.steps_removed,
                offset_from_master_ns: offset,
                mean_path_delay_ns: delay,
            },
            parent: parent_ds,
            time_properties: tp,
            time_status: TimeStatusNp {
                master_offset_ns: offset,
                // The slave port's last Sync from its parent, on its PHC (0 unless a slave).
                ingress_time_ns: ingress.map_or(0, |ns| i64::try_from(ns).unwrap_or(i64::MAX)),
                gm_present: gm != own,
                gm_identity: gm,
            },
            ports: (0..self.ports.len())
                .map(|i| self.port_entry(i, own))
                .collect(),
        })
    }

    fn port_entry(&self, i: usize, own: [u8; 8]) -> PortEntry {
        let p = &self.ports[i];
        let port = PortIdentity {
            clock: own,
            port: p.number,
        };
        let state = self.derived_state(i);
        let version = p.port.as_ref().map_or(0x02, |r| {
            let ds = r.port_ds();
            ds.minor_version_number << 4 | (ds.version_number & 0x0F)
        });
        PortEntry {
            ds: PortDataSet {
                port,
                state,
                log_min_delay_req_interval: p.s.log_min_delay_req_interval,
                peer_mean_path_delay_ns: 0,
                log_announce_interval: p.s.log_announce_interval,
                announce_receipt_timeout: p.s.announce_receipt_timeout,
                log_sync_interval: p.s.log_sync_interval,
                delay_mechanism: match p.s.delay_mechanism {
                    DelayMechanism::E2E => 1,
                    DelayMechanism::P2P => 2,
                },
                log_min_pdelay_req_interval: p.s.log_min_pdelay_req_interval,
                version,
            },
            properties: PortPropertiesNp {
                port,
                state,
                timestamping: TS_HARDWARE,
                interface: p.s.name.clone(),
            },
        }
    }
}
