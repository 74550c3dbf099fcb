//! Deterministic interleaving: model work held back until the driver has performed a given
//! register read.
//!
//! Races between hardware and a driver's register sequence (§7.2: a stamp landing between
//! the driver's TSYNCTXCTL read and its TXSTMPH_0 read) depend on where in that sequence the
//! hardware acts. In deterministic mode a test pins it down: it arms an action for "right
//! after the nth read of register X returns", and the model runs the action inside that
//! read, after the value was produced and before the driver's next access. The model thread
//! cannot interfere, since the whole access holds the bus lock.

/// What the model does when an armed read comes round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadAction {
    /// Run the TX engine, which stays paused while this action is armed: frames posted in
    /// the meantime go out (and latch their stamps) right after the read.
    ReleaseTx,
}

#[derive(Debug, Clone, Copy)]
struct Armed {
    offset: u32,
    remaining: u32,
    action: ReadAction,
}

/// Armed actions, in the order they were armed.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadHooks {
    armed: Vec<Armed>,
}

/// Actions one model holds armed at most; arming more is refused (a test bug, not a
/// reason to grow without bound).
pub const MAX_ARMED_READS: usize = 64;

impl ReadHooks {
    /// Arms `action` for after the `nth` (≥ 1; 0 counts as 1) next read of `offset`.
    /// False if [`MAX_ARMED_READS`] are already armed.
    pub(crate) fn arm(&mut self, offset: u32, nth: u32, action: ReadAction) -> bool {
        if self.armed.len() >= MAX_ARMED_READS {
            return false;
        }
        self.armed.push(Armed {
            offset: offset & !3,
            remaining: nth.max(1),
            action,
        });
        true
    }

    /// Whether the TX engine is held (a [`ReadAction::ReleaseTx`] is armed).
    pub(crate) fn tx_held(&self) -> bool {
        self.armed.iter().any(|a| a.action == ReadAction::ReleaseTx)
    }

    /// Actions armed and not yet run.
    pub(crate) fn len(&self) -> usize {
        self.armed.len()
    }

    /// Drops every armed action (the engine is no longer held).
    pub(crate) fn clear(&mut self) {
        self.armed.clear();
    }

    /// Counts a read of `offset`; returns the actions due now, in arming order.
    pub(crate) fn on_read(&mut self, offset: u32) -> Vec<ReadAction> {
        if self.armed.is_empty() {
            return Vec::new();
        }
        let mut due = Vec::new();
        self.armed.retain_mut(|a| {
            if a.offset != offset {
                return true;
            }
            a.remaining -= 1;
            if a.remaining == 0 {
                due.push(a.action);
                false
            } else {
                true
            }
        });
        due
    }
}
