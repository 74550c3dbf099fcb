//! Frame I/O of the ports: driver events in (received frames, TX timestamps, link and restart
//! notices), framed messages out, and the TX contexts parked until their timestamps arrive.

use std::sync::atomic::Ordering;

use ptp_ipc::{DriverEvent, DriverRequest};
use statime::time::Time;

use super::super::clock;
use super::super::config::{NetworkTransport, format_clock_identity};
use super::super::log::Cause;
use super::super::net::{self, msg};
use super::{Core, bump, dur_ns};

/// Parked TX contexts beyond this are refused (a driver that never answers cannot grow the
/// table; each port parks a few per second and each expires within `tx_timestamp_timeout`).
const MAX_PARKED: usize = 1024;
/// Foreign masters remembered per port for the "new foreign master" log line.
const MAX_FOREIGN: usize = 64;

/// A TX timestamp context waiting for the driver's `TxTimestamp`.
pub(super) struct Parked {
    pub(super) port: usize,
    pub(super) ctx: statime::port::TimestampContext,
    pub(super) deadline: u64,
}

impl Core {
    /// Handles one event from port `i`'s driver.
    pub fn on_event(&mut self, i: usize, ev: DriverEvent, now: u64) {
        if i >= self.ports.len() {
            return;
        }
        match ev {
            DriverEvent::TxTimestamp { cookie, ns } => self.on_tx_timestamp(i, cookie, ns, now),
            DriverEvent::TxTimestampLost { cookie, reason } => {
                if self.parked.remove(&cookie).is_some() {
                    bump(&self.stats.tx_ts_lost);
                    log::warn!(
                        "port {} ({}): TX timestamp lost ({reason:?}); message context dropped",
                        self.ports[i].number,
                        self.ports[i].s.name
                    );
                } else {
                    bump(&self.stats.tx_ts_unknown);
                }
            }
            DriverEvent::PtpFrame { rx_ns, frame } => self.on_frame(i, rx_ns, &frame, now),
            // The end of a connection: the driver link reconnects (or not) and says so.
            DriverEvent::Closed { .. } => {}
            // Pin events are the driver link's (kept for the clock scheme's `Events`).
            DriverEvent::ExtTs(_) | DriverEvent::Pps { .. } => {}
            DriverEvent::Link { up, speed_mbps } => {
                let p = &mut self.ports[i];
                if p.link_up != up {
                    p.link_up = up;
                    if up {
                        p.warned_not_ready = false;
                        log::info!(
                            "port {} ({}): link up, {speed_mbps} Mb/s",
                            p.number,
                            p.s.name
                        );
                    } else {
                        log::warn!("port {} ({}): link down", p.number, p.s.name);
                        self.drop_parked(i);
                    }
                    self.note_state(i, Cause::Link);
                }
            }
            DriverEvent::Restarted { generation } => {
                let p = &mut self.ports[i];
                match p.generation {
                    Some(g) if g != generation => {
                        bump(&self.stats.driver_restarts);
                        log::warn!(
                            "port {} ({}): driver restarted (generation {generation:#x}); reconfiguring timestamping",
                            p.number,
                            p.s.name
                        );
                        clock::lock(&p.clock).new_epoch();
                    }
                    Some(_) => log::info!(
                        "port {} ({}): driver reconnected; reconfiguring timestamping",
                        p.number,
                        p.s.name
                    ),
                    None => {}
                }
                p.generation = Some(generation);
                p.configured = false;
                // A new driver generation or connection will not deliver stamps for frames
                // queued on the old one.
                self.drop_parked(i);
                self.queue_configure(i);
                self.publish(i);
            }
        }
    }

    pub(super) fn drop_parked(&mut self, i: usize) {
        let before = self.parked.len();
        self.parked.retain(|_, p| p.port != i);
        let n = (before - self.parked.len()) as u64;
        self.stats.tx_ts_reset.fetch_add(n, Ordering::Relaxed);
    }

    /// What our Announces carry as grandmaster: the time source's class and accuracy if a
    /// clock has one, and the time properties (its, or the configured ones).
    pub(super) fn announced(&self) -> (Option<(u8, u8)>, crate::ptp::config::TimeProperties) {
        let base = &self.inst.time_properties;
        match self.board.as_ref().and_then(|b| b.source()) {
            Some(src) => {
                let (class, acc, tp) =
                    crate::timesource::announced_properties(src.state, base, src.utc_offset_s);
                (Some((class, acc)), tp)
            }
            None => (None, *base),
        }
    }

    pub(super) fn ready(&self, i: usize) -> bool {
        let p = &self.ports[i];
        p.configured && p.link_up && p.builder.is_some()
    }

    pub(super) fn send(
        &mut self,
        i: usize,
        data: &[u8],
        event: bool,
        link_local: bool,
        ctx: Option<statime::port::TimestampContext>,
        now: u64,
    ) {
        if !self.ready(i) {
            self.not_ready(i, data);
            return;
        }
        let mut payload = data.to_vec();
        if !event
            && payload.first().map(|b| b & 0xF) == Some(msg::ANNOUNCE)
            && net::announce_grandmaster(&payload) == self.own_id
        {
            let (quality, tp) = self.announced();
            if net::rewrite_announce(&mut payload, &tp) {
                bump(&self.stats.announce_rewrites);
            }
            if let Some((class, accuracy)) = quality {
                net::rewrite_announce_quality(&mut payload, class, accuracy);
            }
        }
        let p = &mut self.ports[i];
        let Some(builder) = p.builder.as_mut() else {
            return;
        };
        let frame = match builder.build(&payload, event, link_local) {
            Ok(f) => f,
            Err(e) => {
                log::error!(
                    "port {} ({}): cannot frame a message: {e}",
                    p.number,
                    p.s.name
                );
                return;
            }
        };
        let cookie = if ctx.is_some() {
            let c = self.next_cookie;
            self.next_cookie = self.next_cookie.wrapping_add(1).max(1);
            c
        } else {
            0
        };
        let req = DriverRequest::SendPtp {
            cookie,
            want_ts: ctx.is_some(),
            frame,
        };
        if let Err(e) = p.io.post(req) {
            bump(&self.stats.tx_send_failed);
            log::debug!("port {} ({}): send failed: {e:?}", p.number, p.s.name);
            return;
        }
        bump(&self.stats.tx_sent);
        if let Some(ctx) = ctx {
            self.park(i, cookie, ctx, now);
        }
    }

    /// Counts a message a port could not send, logging it once until the port is ready again.
    fn not_ready(&mut self, i: usize, data: &[u8]) {
        bump(&self.stats.tx_not_ready);
        let p = &mut self.ports[i];
        if !p.warned_not_ready {
            p.warned_not_ready = true;
            log::info!(
                "port {} ({}): not sending {} (driver {}, link {})",
                p.number,
                p.s.name,
                msg::name(data.first().map_or(0xF, |b| b & 0xF)),
                if p.configured {
                    "ready"
                } else {
                    "not configured"
                },
                if p.link_up { "up" } else { "down" }
            );
        }
    }

    /// Keeps a sent event's context until its TX timestamp arrives (or its deadline passes).
    fn park(&mut self, i: usize, cookie: u64, ctx: statime::port::TimestampContext, now: u64) {
        let p = &self.ports[i];
        if self.parked.len() >= MAX_PARKED {
            bump(&self.stats.tx_ts_timeout);
            log::warn!(
                "port {} ({}): too many TX timestamps outstanding",
                p.number,
                p.s.name
            );
            return;
        }
        let deadline = now.saturating_add(dur_ns(p.s.tx_timestamp_timeout));
        self.parked.insert(
            cookie,
            Parked {
                port: i,
                ctx,
                deadline,
            },
        );
    }

    pub(super) fn on_tx_timestamp(&mut self, i: usize, cookie: u64, ns: u64, now: u64) {
        let Some(parked) = self.parked.remove(&cookie) else {
            // Late (already timed out) or duplicate: the context is gone, as statime requires
            // exactly one handle_send_timestamp per SendEvent.
            bump(&self.stats.tx_ts_unknown);
            log::debug!("port {}: TX timestamp for unknown cookie {cookie}", i + 1);
            return;
        };
        if parked.port != i {
            bump(&self.stats.tx_ts_unknown);
            return;
        }
        if !self.plausible(i, ns, now) {
            bump(&self.stats.tx_ts_implausible);
            log::warn!(
                "port {} ({}): implausible TX timestamp {ns} dropped",
                self.ports[i].number,
                self.ports[i].s.name
            );
            return;
        }
        bump(&self.stats.tx_ts_delivered);
        let ctx = parked.ctx;
        dispatch!(self, i, now, Cause::Receive, |p| {
            p.handle_send_timestamp(ctx, Time::from_nanos(ns))
        });
    }

    pub(super) fn plausible(&self, i: usize, stamp: u64, now: u64) -> bool {
        let p = &self.ports[i];
        clock::plausible(&p.s.name, &*p.io, &p.clock, stamp, now)
    }

    pub(super) fn on_frame(&mut self, i: usize, rx_ns: Option<u64>, frame: &[u8], now: u64) {
        bump(&self.stats.rx_frames);
        if self.instance.is_none() {
            bump(&self.stats.rx_before_start);
            return;
        }
        let m = match net::parse(frame) {
            Ok(m) => m,
            Err(e) => {
                bump(&self.stats.rx_malformed);
                log::debug!("port {}: malformed frame dropped: {e}", i + 1);
                return;
            }
        };
        let p = &self.ports[i];
        let transport_ok = matches!(
            (p.s.transport, m.transport),
            (NetworkTransport::L2, ptp_ipc::frame::Transport::L2)
                | (
                    NetworkTransport::UdpV4,
                    ptp_ipc::frame::Transport::Udp4 { .. }
                )
        );
        if !transport_ok {
            bump(&self.stats.rx_wrong_transport);
            return;
        }
        if m.version != 2 {
            bump(&self.stats.rx_bad_version);
            return;
        }
        if m.domain != self.inst.domain_number {
            bump(&self.stats.rx_foreign_domain);
            return;
        }
        if m.message_type == msg::MANAGEMENT {
            self.on_management(i, m.payload, now);
            return;
        }
        if m.message_type == msg::SIGNALING || m.message_type > msg::MANAGEMENT {
            // statime 0.4 has no use for Signaling: counted, not logged per frame.
            bump(&self.stats.rx_ignored);
            return;
        }
        self.on_protocol_message(i, &m, rx_ns, now);
    }

    /// A message for statime's port (already checked for transport, version and domain).
    fn on_protocol_message(
        &mut self,
        i: usize,
        m: &net::Received<'_>,
        rx_ns: Option<u64>,
        now: u64,
    ) {
        let Some((src_id, src_port)) = net::source_port_identity(m.payload) else {
            bump(&self.stats.rx_malformed);
            return;
        };
        if Some(src_id) == self.own_id && src_port == self.ports[i].number {
            bump(&self.stats.rx_own);
            return;
        }
        let rx = if m.is_event() {
            match rx_ns {
                Some(ns) => Some(ns),
                None => {
                    // Hardware stamping is the point of ptpd: an event message without an RX
                    // stamp cannot be used for a measurement.
                    bump(&self.stats.rx_no_timestamp);
                    return;
                }
            }
        } else {
            None
        };
        if let Err(e) = net::check_times(m, rx) {
            bump(&self.stats.rx_malformed);
            log::debug!("port {}: {} dropped: {e}", i + 1, msg::name(m.message_type));
            return;
        }
        if m.message_type == msg::ANNOUNCE {
            let pm = &mut self.ports[i];
            if pm.foreign.len() < MAX_FOREIGN && pm.foreign.insert((src_id, src_port)) {
                log::info!(
                    "port {} ({}): new foreign master {}-{src_port}",
                    pm.number,
                    pm.s.name,
                    format_clock_identity(&src_id)
                );
            }
        }
        let payload = m.payload;
        match rx {
            Some(ns) => {
                if !self.plausible(i, ns, now) {
                    bump(&self.stats.rx_implausible);
                    log::debug!("port {}: implausible RX timestamp {ns} dropped", i + 1);
                    return;
                }
                if m.message_type == msg::SYNC && self.is_parent(src_id, src_port) {
                    self.ports[i].last_sync_rx_ns = Some(ns);
                }
                dispatch!(self, i, now, Cause::Receive, |p| {
                    p.handle_event_receive(payload, Time::from_nanos(ns))
                });
            }
            None => dispatch!(self, i, now, Cause::Receive, |p| p
                .handle_general_receive(payload)),
        }
    }

    /// Whether a port identity is our parent's (the port we take time from).
    fn is_parent(&self, clock: [u8; 8], port: u16) -> bool {
        self.instance.is_some_and(|inst| {
            let p = inst.parent_ds().parent_port_identity;
            p.clock_identity.0 == clock && p.port_number == port
        })
    }

    pub(super) fn expire_parked(&mut self, now: u64) {
        let expired: Vec<u64> = self
            .parked
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(c, _)| *c)
            .collect();
        for cookie in expired {
            if let Some(p) = self.parked.remove(&cookie) {
                bump(&self.stats.tx_ts_timeout);
                let pc = &self.ports[p.port];
                log::warn!(
                    "port {} ({}): timed out waiting for a TX timestamp ({} ms); message context dropped",
                    pc.number,
                    pc.s.name,
                    pc.s.tx_timestamp_timeout.as_millis()
                );
            }
        }
    }
}
