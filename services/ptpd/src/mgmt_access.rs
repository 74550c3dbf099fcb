//! What every management transport shares: SETs go to the engine thread with the requester's
//! privilege, everything else is answered from the snapshot the engine publishes; and, for a
//! transport where a write is answered by later reads (the Redox ptp scheme's `mgmt` handle),
//! a per-client queue of replies ([`MgmtSession`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

use crate::ptp::PtpStatusBoard;
use crate::ptp::engine::MgmtHandle;
use crate::ptp::manage::Outcome;
use crate::ptp::mgmt::{self, Action, MgmtError, MgmtRequest};
use crate::scheme::may_write;

/// How long a SET waits for the engine thread (pmc itself waits about 100 ms per answer).
pub const ENGINE_TIMEOUT: Duration = Duration::from_millis(500);
/// Replies a session keeps for a client that writes without reading; the oldest go first.
pub const MAX_QUEUED: usize = 32;
/// Requests a session keeps behind its SET in flight (answered in order once it is).
pub const MAX_BEHIND: usize = 8;

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

/// One client of a write-then-read transport: its uid (taken when it opened the handle), the
/// replies waiting for it, and its SET in flight.
///
/// A SET is handed to the engine without waiting (issue 23: the scheme thread waited up to
/// [`ENGINE_TIMEOUT`] for it, answering no other client meanwhile); its answer is collected
/// when the client reads (EAGAIN until then, as for any reply not there yet). Requests the
/// client writes after it wait behind it, so a SET then GET sees what the SET did.
#[derive(Debug)]
pub struct MgmtSession {
    uid: u32,
    replies: VecDeque<Vec<u8>>,
    pending: Option<(Receiver<Outcome>, Instant)>,
    behind: VecDeque<MgmtRequest>,
    /// A SET the engine did not answer in time, to report once ([`SessionError::Busy`]).
    timed_out: bool,
}

impl MgmtSession {
    pub fn new(uid: u32) -> Self {
        Self {
            uid,
            replies: VecDeque::new(),
            pending: None,
            behind: VecDeque::new(),
            timed_out: false,
        }
    }

    /// Takes one management message; its replies (none if it is not for this clock) wait for
    /// [`MgmtSession::read`]. Returns the bytes consumed. Never waits for the engine.
    pub fn write(
        &mut self,
        msg: &[u8],
        board: &PtpStatusBoard,
        set: Option<&SetAccess>,
    ) -> Result<usize, SessionError> {
        let req = mgmt::parse(msg)?;
        self.settle(board, set);
        if self.pending.is_some() {
            if self.behind.len() == MAX_BEHIND {
                return Err(SessionError::Busy);
            }
            self.behind.push_back(req);
        } else {
            self.dispatch(req, board, set)?;
        }
        Ok(msg.len())
    }

    /// A SET goes to the engine (answered later); anything else is answered now.
    fn dispatch(
        &mut self,
        req: MgmtRequest,
        board: &PtpStatusBoard,
        set: Option<&SetAccess>,
    ) -> Result<(), SessionError> {
        match set {
            Some(set) if req.action == Action::Set => {
                let rx = submit_set(req, Some(self.uid), set).ok_or(SessionError::Busy)?;
                self.pending = Some((rx, Instant::now() + ENGINE_TIMEOUT));
            }
            _ => {
                let outcome = answer(req, Some(self.uid), board, None).ok_or(SessionError::Busy)?;
                self.queue(outcome);
            }
        }
        Ok(())
    }

    fn queue(&mut self, outcome: Outcome) {
        if let Outcome::Reply(replies) = outcome {
            for r in replies {
                if self.replies.len() == MAX_QUEUED {
                    self.replies.pop_front();
                }
                self.replies.push_back(r);
            }
        }
    }

    /// Collects the SET in flight if the engine answered (or gave up on it once its time has
    /// passed), then dispatches what waited behind it, up to the next SET.
    fn settle(&mut self, board: &PtpStatusBoard, set: Option<&SetAccess>) {
        while let Some((rx, deadline)) = &self.pending {
            match rx.try_recv() {
                Ok(outcome) => self.queue(outcome),
                Err(TryRecvError::Empty) if Instant::now() < *deadline => return,
                Err(_) => self.timed_out = true,
            }
            self.pending = None;
            while self.pending.is_none()
                && let Some(req) = self.behind.pop_front()
            {
                // A refusal here has nobody to go to but the read that follows: Busy.
                self.timed_out |= self.dispatch(req, board, set).is_err();
            }
        }
    }

    /// Moves the oldest waiting reply into `buf`; a buffer too small leaves it waiting.
    /// `Empty` (EAGAIN) while nothing is there yet, a SET in flight included; `Busy` once for a
    /// SET the engine did not answer within [`ENGINE_TIMEOUT`].
    pub fn read(
        &mut self,
        buf: &mut [u8],
        board: &PtpStatusBoard,
        set: Option<&SetAccess>,
    ) -> Result<usize, SessionError> {
        self.settle(board, set);
        if std::mem::take(&mut self.timed_out) {
            return Err(SessionError::Busy);
        }
        let next = self.replies.front().ok_or(SessionError::Empty)?;
        let n = next.len();
        let dst = buf.get_mut(..n).ok_or(SessionError::TooSmall(n))?;
        dst.copy_from_slice(next);
        self.replies.pop_front();
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptp::mgmt::id;

    fn request(action: Action, mid: u16, data: Vec<u8>, seq: u16) -> Vec<u8> {
        crate::ptp::mgmt::test_request(action, mid, data, seq).encode()
    }

    /// Issue 23 on Redox: a SET's write returned only once the engine answered (up to
    /// ENGINE_TIMEOUT), and the scheme thread served nobody meanwhile. Now the write returns at
    /// once, the read says EAGAIN (Empty) until the answer is there, and a GET written after
    /// the SET is answered after it.
    #[test]
    fn a_set_does_not_block_the_write_and_its_answer_comes_first() {
        let (engine, stalled) = MgmtHandle::stalled();
        let set = SetAccess {
            engine,
            privileged_uids: vec![],
        };
        let board = PtpStatusBoard::new(1);
        board.set_mgmt(crate::ptp::manage::tests::snap());
        let mut s = MgmtSession::new(0);
        let t = Instant::now();
        let set_req = request(Action::Set, id::PRIORITY1, vec![5, 0], 1);
        s.write(&set_req, &board, Some(&set)).unwrap();
        let get = request(Action::Get, id::CURRENT_DATA_SET, vec![], 2);
        s.write(&get, &board, Some(&set)).unwrap();
        let took = t.elapsed();
        assert!(
            took < ENGINE_TIMEOUT / 2,
            "two writes took {took:?} with the engine not answering"
        );
        let mut buf = [0u8; 1500];
        assert_eq!(
            s.read(&mut buf, &board, Some(&set)),
            Err(SessionError::Empty)
        );
        let answer = vec![0xAB; 60];
        assert!(stalled.answer_one(Duration::from_secs(5), Outcome::Reply(vec![answer.clone()])));
        let n = s.read(&mut buf, &board, Some(&set)).unwrap();
        assert_eq!(&buf[..n], answer, "the SET is answered first");
        let n = s.read(&mut buf, &board, Some(&set)).unwrap();
        assert_eq!(mgmt::parse(&buf[..n]).unwrap().sequence_id, 2);
    }

    /// A SET the engine never answers is reported once (Busy: ETIMEDOUT), then the session
    /// goes on.
    #[test]
    fn an_unanswered_set_is_reported_once_after_the_engine_timeout() {
        let (engine, _stalled) = MgmtHandle::stalled();
        let set = SetAccess {
            engine,
            privileged_uids: vec![],
        };
        let board = PtpStatusBoard::new(1);
        let mut s = MgmtSession::new(0);
        let set_req = request(Action::Set, id::PRIORITY1, vec![5, 0], 1);
        s.write(&set_req, &board, Some(&set)).unwrap();
        let mut buf = [0u8; 1500];
        std::thread::sleep(ENGINE_TIMEOUT + Duration::from_millis(50));
        assert_eq!(
            s.read(&mut buf, &board, Some(&set)),
            Err(SessionError::Busy)
        );
        assert_eq!(
            s.read(&mut buf, &board, Some(&set)),
            Err(SessionError::Empty)
        );
    }
}
