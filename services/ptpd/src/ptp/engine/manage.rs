//! Management requests the engine answers itself: those arriving on a PTP port (linuxptp's
//! `pmc -2` / `pmc -4`, answered as ptp4l answers them, on the same port as general messages
//! to the primary multicast address), and SETs from any transport, which change the engine.
//! GETs are answered from the management snapshot ([`Core::mgmt_snapshot`]).
//!
//! statime 0.4 keeps its defaultDS private and has no setter, so a SET of priority1/priority2
//! replaces the instance and its ports ([`Core::restart_instance`]): the BMCA starts over
//! (ports go through LISTENING; the better clock wins within a few announce intervals) and a
//! slave's servo re-locks. ptp4l changes the value in place instead.

use super::super::manage::{Outcome, SetOp, decide_set};
use super::super::mgmt::{self, Action, MgmtRequest};
use super::{Core, bump};

impl Core {
    /// A MANAGEMENT message received on port `i`, its transport, version and domain already
    /// checked. Undecodable requests are dropped and counted; replies from other nodes, and
    /// requests for another clock, are ignored (counted). A SET counts as privileged only if
    /// the configuration says so (`management_network_set`): the network carries no
    /// credentials.
    pub(super) fn on_management(&mut self, i: usize, payload: &[u8], now: u64) {
        let req = match mgmt::parse(payload) {
            Ok(r) => r,
            Err(e) => {
                bump(&self.stats.mgmt_malformed);
                log::debug!("port {}: management message dropped: {e}", i + 1);
                return;
            }
        };
        let privileged = self.inst.management.network_set;
        let Outcome::Reply(replies) = self.manage(&req, privileged, now) else {
            bump(&self.stats.mgmt_ignored);
            return;
        };
        bump(&self.stats.mgmt_answered);
        for r in replies {
            self.send(i, &r, false, false, None, now);
        }
    }

    /// Answers a decoded management request from any transport; `privileged` is the
    /// transport's word on whether the requester may change the clock. `Ignore` before the
    /// instance has started.
    pub fn manage(&mut self, req: &MgmtRequest, privileged: bool, now: u64) -> Outcome {
        let Some(snap) = self.mgmt_snapshot() else {
            return Outcome::Ignore;
        };
        if req.action != Action::Set || !snap.for_us(req) {
            return snap.answer(req);
        }
        let clock = snap.clock_port();
        let reply = match decide_set(req, privileged, &self.inst.management) {
            Ok(op) => {
                self.apply(op, now);
                mgmt::build_response(req, clock, &op.data())
            }
            Err(e) => {
                log::info!(
                    "management SET {:#06x} from {} refused: {e:?}",
                    req.management_id,
                    super::super::config::format_clock_identity(&req.source.clock)
                );
                mgmt::build_error(req, clock, e)
            }
        };
        Outcome::Reply(vec![reply])
    }

    /// Carries out an allowed SET (nothing to do when the value is already in force).
    fn apply(&mut self, op: SetOp, now: u64) {
        let (name, slot) = match op {
            SetOp::Priority1(_) => ("priority1", &mut self.inst.priority1),
            SetOp::Priority2(_) => ("priority2", &mut self.inst.priority2),
        };
        let [v, _] = op.data();
        if *slot == v {
            return;
        }
        log::info!("management: {name} {} -> {v}", *slot);
        *slot = v;
        self.restart_instance(now);
    }
}
