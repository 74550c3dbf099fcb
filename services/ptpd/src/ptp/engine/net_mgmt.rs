//! Management messages that arrive on a PTP port (linuxptp's `pmc -2` / `pmc -4`, answered as
//! ptp4l answers them): decoded, answered from the engine's management snapshot, and the
//! replies sent back on the same port as general messages to the primary multicast address.

use super::super::manage::Outcome;
use super::super::mgmt;
use super::{Core, bump};

impl Core {
    /// A MANAGEMENT message received on port `i`, its transport, version and domain already
    /// checked. Undecodable requests are dropped and counted; replies from other nodes, and
    /// requests for another clock, are ignored (counted).
    pub(super) fn on_management(&mut self, i: usize, payload: &[u8], now: u64) {
        let req = match mgmt::parse(payload) {
            Ok(r) => r,
            Err(e) => {
                bump(&self.stats.mgmt_malformed);
                log::debug!("port {}: management message dropped: {e}", i + 1);
                return;
            }
        };
        let outcome = self
            .mgmt_snapshot()
            .map_or(Outcome::Ignore, |s| s.answer(&req));
        let Outcome::Reply(replies) = outcome else {
            bump(&self.stats.mgmt_ignored);
            return;
        };
        bump(&self.stats.mgmt_answered);
        for r in replies {
            self.send(i, &r, false, false, None, now);
        }
    }
}
