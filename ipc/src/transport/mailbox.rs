//! The server side of a datagram handle: the messages a scheme server (a driver on Redox) has
//! for one client, read back one whole message per `read` (DESIGN.md §2, Redox transport).
//!
//! Transport-independent, so its semantics are tested on the host; the Redox scheme handlers
//! map [`ReadOutcome`] to a read result or an errno.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use super::TransportError;
use crate::wire::MAX_MESSAGE;

/// Messages queued for one client before further ones are dropped (and counted): the client is
/// not reading, and blocking the producer (an IRQ thread) would be worse.
pub const MAILBOX_DEPTH: usize = 1024;

/// What a `read` of the handle gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// One message of this many bytes was copied out.
    Message(usize),
    /// No message is queued: park the read, or EAGAIN for a non-blocking caller.
    Empty,
    /// The buffer is smaller than the next message (it stays queued): EMSGSIZE-like.
    TooSmall { need: usize },
    /// The mailbox was closed: end of file.
    Closed,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Vec<u8>>,
    closed: bool,
    dropped: u64,
}

/// A bounded queue of whole messages for one client.
#[derive(Default)]
pub struct Mailbox {
    state: Mutex<State>,
}

impl Mailbox {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A queue of byte strings holds no invariant a panic could break.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues one message. `Disconnected` once closed; `TooLarge`/`Io` as `Transport::send`;
    /// when [`MAILBOX_DEPTH`] messages wait, the message is dropped and counted, and `Timeout`
    /// says so (the same meaning as a send that found no room in time).
    pub fn push(&self, msg: &[u8]) -> Result<(), TransportError> {
        super::check_send_len(msg)?;
        let mut s = self.lock();
        if s.closed {
            return Err(TransportError::Disconnected);
        }
        if s.queue.len() >= MAILBOX_DEPTH {
            s.dropped += 1;
            return Err(TransportError::Timeout);
        }
        s.queue.push_back(msg.to_vec());
        Ok(())
    }

    /// Moves the next message into `buf`.
    pub fn pop_into(&self, buf: &mut [u8]) -> ReadOutcome {
        let mut s = self.lock();
        let Some(next) = s.queue.front() else {
            return if s.closed {
                ReadOutcome::Closed
            } else {
                ReadOutcome::Empty
            };
        };
        let n = next.len();
        if n > buf.len() {
            return ReadOutcome::TooSmall { need: n };
        }
        buf[..n].copy_from_slice(next);
        s.queue.pop_front();
        ReadOutcome::Message(n)
    }

    /// Whether a read would return at once (a message, or end of file).
    pub fn readable(&self) -> bool {
        let s = self.lock();
        s.closed || !s.queue.is_empty()
    }

    /// Ends the conversation: queued messages are discarded, reads return end of file, pushes
    /// fail with `Disconnected`.
    pub fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.queue.clear();
    }

    /// Ends the conversation after what is queued: reads return the queued messages, then end
    /// of file; pushes fail with `Disconnected`. (A closing reason queued just before must
    /// reach the client, which [`Self::close`] would discard.)
    pub fn finish(&self) {
        self.lock().closed = true;
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Messages dropped because the client did not read.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

const _: () = assert!(MAX_MESSAGE > 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_message_per_read_in_order() {
        let m = Mailbox::new();
        m.push(b"one").unwrap();
        m.push(b"second").unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(m.pop_into(&mut buf), ReadOutcome::Message(3));
        assert_eq!(&buf[..3], b"one");
        assert!(m.readable());
        assert_eq!(m.pop_into(&mut buf), ReadOutcome::Message(6));
        assert_eq!(&buf[..6], b"second");
        assert_eq!(m.pop_into(&mut buf), ReadOutcome::Empty);
        assert!(!m.readable());
    }

    #[test]
    fn short_buffer_keeps_the_message() {
        let m = Mailbox::new();
        m.push(b"0123456789").unwrap();
        let mut small = [0u8; 4];
        assert_eq!(m.pop_into(&mut small), ReadOutcome::TooSmall { need: 10 });
        let mut buf = [0u8; MAX_MESSAGE];
        assert_eq!(m.pop_into(&mut buf), ReadOutcome::Message(10));
    }

    #[test]
    fn bounds_and_close() {
        let m = Mailbox::new();
        assert!(matches!(m.push(&[]), Err(TransportError::Io(_))));
        assert_eq!(
            m.push(&vec![0; MAX_MESSAGE + 1]),
            Err(TransportError::TooLarge(MAX_MESSAGE + 1))
        );
        for _ in 0..MAILBOX_DEPTH {
            m.push(b"x").unwrap();
        }
        assert_eq!(m.push(b"x"), Err(TransportError::Timeout));
        assert_eq!(m.dropped(), 1);
        m.close();
        assert!(m.is_closed() && m.readable());
        let mut buf = [0u8; 8];
        assert_eq!(m.pop_into(&mut buf), ReadOutcome::Closed);
        assert_eq!(m.push(b"x"), Err(TransportError::Disconnected));
    }

    /// Issue 22, failure 3: the Redox driver refused a ring with `Closed { NoHello }` queued
    /// and then `close`d, which discarded it; the client read end of file, not the refusal.
    #[test]
    fn finish_delivers_what_is_queued_then_end_of_file() {
        let m = Mailbox::new();
        m.push(b"reason").unwrap();
        m.finish();
        assert!(m.is_closed() && m.readable());
        assert_eq!(m.push(b"late"), Err(TransportError::Disconnected));
        let mut buf = [0u8; 8];
        assert_eq!(m.pop_into(&mut buf), ReadOutcome::Message(6));
        assert_eq!(&buf[..6], b"reason");
        assert_eq!(m.pop_into(&mut buf), ReadOutcome::Closed);
    }
}
