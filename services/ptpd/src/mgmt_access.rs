//! What every management transport shares: SETs go to the engine thread with the requester's
//! privilege, everything else is answered from the snapshot the engine publishes; and, for a
//! transport where a write is answered by later reads (the Redox ptp scheme's `mgmt` handle),
//! a per-client queue of replies ([`MgmtSession`]).

use std::collections::VecDeque;
use std::time::Duration;

use crate::ptp::PtpStatusBoard;
use crate::ptp::engine::MgmtHandle;
use crate::ptp::manage::Outcome;
use crate::ptp::mgmt::{self, Action, MgmtError, MgmtRequest};
use crate::scheme::may_write;

/// How long a SET waits for the engine thread (pmc itself waits about 100 ms per answer).
pub const ENGINE_TIMEOUT: Duration = Duration::from_millis(500);
/// Replies a session keeps for a client that writes without reading; the oldest go first.
pub const MAX_QUEUED: usize = 32;

/// Who may SET, and who carries the SETs out.
#[derive(Clone)]
pub struct SetAccess {
    pub engine: MgmtHandle,
    /// Besides root (the configuration's `privileged_uids`, as for the clock scheme).
    pub privileged_uids: Vec<u32>,
}

/// Answers one decoded request from `uid` (`None`: not known, never privileged). Without
/// `set`, SETs are answered from the snapshot (NOT_SUPPORTED). `None`: the engine did not
/// answer a SET within [`ENGINE_TIMEOUT`].
pub fn answer(
    req: MgmtRequest,
    uid: Option<u32>,
    board: &PtpStatusBoard,
    set: Option<&SetAccess>,
) -> Option<Outcome> {
    match set {
        Some(set) if req.action == Action::Set => {
            let privileged = uid.is_some_and(|u| may_write(u, &set.privileged_uids));
            set.engine.request(req, privileged, ENGINE_TIMEOUT)
        }
        _ => Some(board.mgmt().map_or(Outcome::Ignore, |s| s.answer(&req))),
    }
}

/// Hands a SET from `uid` to the engine with that requester's privilege, without waiting: its
/// outcome comes on the receiver. `None` if the engine cannot take it now (queue full, or gone).
pub fn submit_set(
    req: MgmtRequest,
    uid: Option<u32>,
    set: &SetAccess,
) -> Option<crossbeam_channel::Receiver<Outcome>> {
    let privileged = uid.is_some_and(|u| may_write(u, &set.privileged_uids));
    set.engine.submit(req, privileged)
}

/// Why a session refused a write or a read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("malformed management message: {0}")]
    Malformed(#[from] MgmtError),
    #[error("no reply waiting")]
    Empty,
    #[error("the next reply has {0} bytes, more than the buffer")]
    TooSmall(usize),
    #[error("the PTP engine did not answer in time")]
    Busy,
}

/// One client of a write-then-read transport: its uid (taken when it opened the handle) and
/// the replies waiting for it.
#[derive(Debug)]
pub struct MgmtSession {
    uid: u32,
    replies: VecDeque<Vec<u8>>,
}

impl MgmtSession {
    pub fn new(uid: u32) -> Self {
        Self {
            uid,
            replies: VecDeque::new(),
        }
    }

    /// Takes one management message; its replies (none if it is not for this clock) wait for
    /// [`MgmtSession::read`]. Returns the bytes consumed.
    pub fn write(
        &mut self,
        msg: &[u8],
        board: &PtpStatusBoard,
        set: Option<&SetAccess>,
    ) -> Result<usize, SessionError> {
        let req = mgmt::parse(msg)?;
        let outcome = answer(req, Some(self.uid), board, set).ok_or(SessionError::Busy)?;
        if let Outcome::Reply(replies) = outcome {
            for r in replies {
                if self.replies.len() == MAX_QUEUED {
                    self.replies.pop_front();
                }
                self.replies.push_back(r);
            }
        }
        Ok(msg.len())
    }

    /// Moves the oldest waiting reply into `buf`; a buffer too small leaves it waiting.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, SessionError> {
        let next = self.replies.front().ok_or(SessionError::Empty)?;
        let n = next.len();
        let dst = buf.get_mut(..n).ok_or(SessionError::TooSmall(n))?;
        dst.copy_from_slice(next);
        self.replies.pop_front();
        Ok(n)
    }
}
