//! The timer table: the five timers statime asks each port for, plus the engine's own (BMCA,
//! configuration retries, TX timestamp expiry, the summary line), and the next deadline.

use super::super::log::Cause;
use super::{Core, NS_PER_S};
use statime::port::NoForwardedTLVs;

/// Rounds of due timers handled per call (a handler may arm a timer for "now" again).
const TIMER_ROUNDS: usize = 16;

/// The five per-port timers statime asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerKind {
    Announce = 0,
    Sync = 1,
    DelayRequest = 2,
    AnnounceReceipt = 3,
    FilterUpdate = 4,
}

pub(super) const TIMERS: [TimerKind; 5] = [
    TimerKind::Announce,
    TimerKind::Sync,
    TimerKind::DelayRequest,
    TimerKind::AnnounceReceipt,
    TimerKind::FilterUpdate,
];

impl Core {
    /// The earliest time the core wants to be called again.
    pub fn next_deadline(&self) -> Option<u64> {
        let timers = self
            .ports
            .iter()
            .flat_map(|p| p.timers.iter().copied().chain([p.cfg_retry_at]))
            .flatten();
        let parked = self.parked.values().map(|p| p.deadline);
        timers
            .chain(parked)
            .chain(self.bmca_at)
            .chain(self.summary_at)
            .min()
    }

    pub(super) fn summary_interval_ns(&self) -> u64 {
        let e = i32::from(self.inst.summary_interval);
        (NS_PER_S as f64 * 2f64.powi(e)) as u64
    }

    /// Runs every timer that is due at `now`.
    pub fn on_timers(&mut self, now: u64) {
        for _ in 0..TIMER_ROUNDS {
            let mut fired = false;
            for i in 0..self.ports.len() {
                for k in TIMERS {
                    let due = self.ports[i].timers[k as usize].is_some_and(|t| t <= now);
                    if !due {
                        continue;
                    }
                    fired = true;
                    self.ports[i].timers[k as usize] = None;
                    match k {
                        TimerKind::Announce => dispatch!(self, i, now, Cause::Receive, |p| {
                            p.handle_announce_timer(&mut NoForwardedTLVs)
                        }),
                        TimerKind::Sync => {
                            dispatch!(self, i, now, Cause::Receive, |p| p.handle_sync_timer())
                        }
                        TimerKind::DelayRequest => dispatch!(self, i, now, Cause::Receive, |p| {
                            p.handle_delay_request_timer()
                        }),
                        TimerKind::AnnounceReceipt => {
                            dispatch!(self, i, now, Cause::AnnounceTimeout, |p| {
                                p.handle_announce_receipt_timer()
                            })
                        }
                        TimerKind::FilterUpdate => dispatch!(self, i, now, Cause::Servo, |p| {
                            p.handle_filter_update_timer()
                        }),
                    }
                }
            }
            if !fired {
                break;
            }
        }
        if self.bmca_at.is_some_and(|t| t <= now) {
            self.run_bmca(now);
        }
        self.expire_parked(now);
        for i in 0..self.ports.len() {
            if self.ports[i].cfg_retry_at.is_some_and(|t| t <= now) && !self.ports[i].cfg_pending {
                self.queue_configure(i);
            }
        }
        if self.summary_at.is_some_and(|t| t <= now) {
            self.summary();
            self.summary_at = Some(now + self.summary_interval_ns());
        }
    }
}
