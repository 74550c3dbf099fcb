//! In-process transport: two bounded crossbeam channels, one per direction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Select, Sender, bounded};

use super::{Transport, TransportError, check_send_len};

/// Messages queued per direction before `send` waits (or times out).
const DEPTH: usize = 1024;

/// Shutdown state shared by both endpoints of a pair.
struct Shared {
    down: AtomicBool,
    /// Dropping this sender disconnects `kill_rx`, which wakes every `Select` waiting on it:
    /// crossbeam has no other way to interrupt a blocked operation.
    kill_tx: Mutex<Option<Sender<()>>>,
    kill_rx: Receiver<()>,
}

/// One end of an in-process pair (see [`inproc_pair`]).
///
/// Dropping an endpoint disconnects the other: its `recv` returns the messages already queued,
/// then `Disconnected`; its `send` fails with `Disconnected` at once. `shutdown` on either end
/// makes every call on both ends return `Disconnected`, including ones already blocked.
pub struct InProc {
    tx: Sender<Vec<u8>>,
    rx: Receiver<Vec<u8>>,
    shared: Arc<Shared>,
}

/// Two connected endpoints, each queueing up to 1024 messages towards the other.
pub fn inproc_pair() -> (InProc, InProc) {
    let (a_tx, b_rx) = bounded(DEPTH);
    let (b_tx, a_rx) = bounded(DEPTH);
    let (kill_tx, kill_rx) = bounded(0);
    let shared = Arc::new(Shared {
        down: AtomicBool::new(false),
        kill_tx: Mutex::new(Some(kill_tx)),
        kill_rx,
    });
    (
        InProc {
            tx: a_tx,
            rx: a_rx,
            shared: shared.clone(),
        },
        InProc {
            tx: b_tx,
            rx: b_rx,
            shared,
        },
    )
}

impl InProc {
    fn check_up(&self) -> Result<(), TransportError> {
        if self.shared.down.load(Ordering::Acquire) {
            Err(TransportError::Disconnected)
        } else {
            Ok(())
        }
    }

    /// Waits until one of `sel`'s operations is ready, or the timeout expires.
    fn wait<'a>(
        sel: &mut Select<'a>,
        timeout: Option<Duration>,
    ) -> Result<crossbeam_channel::SelectedOperation<'a>, TransportError> {
        match timeout {
            None => Ok(sel.select()),
            Some(t) => sel.select_timeout(t).map_err(|_| TransportError::Timeout),
        }
    }
}

impl Transport for InProc {
    fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), TransportError> {
        check_send_len(msg)?;
        self.check_up()?;
        let mut sel = Select::new();
        let send_op = sel.send(&self.tx);
        let kill_op = sel.recv(&self.shared.kill_rx);
        let op = Self::wait(&mut sel, timeout)?;
        if op.index() == send_op {
            op.send(&self.tx, msg.to_vec())
                .map_err(|_| TransportError::Disconnected)
        } else {
            debug_assert_eq!(op.index(), kill_op);
            let _ = op.recv(&self.shared.kill_rx);
            Err(TransportError::Disconnected)
        }
    }

    fn recv(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        buf.clear();
        self.check_up()?;
        let mut sel = Select::new();
        let recv_op = sel.recv(&self.rx);
        let kill_op = sel.recv(&self.shared.kill_rx);
        let op = Self::wait(&mut sel, timeout)?;
        if op.index() == recv_op {
            let msg = op
                .recv(&self.rx)
                .map_err(|_| TransportError::Disconnected)?;
            // Check again: a message raced with a shutdown is not delivered after it.
            self.check_up()?;
            *buf = msg;
            Ok(())
        } else {
            debug_assert_eq!(op.index(), kill_op);
            let _ = op.recv(&self.shared.kill_rx);
            Err(TransportError::Disconnected)
        }
    }

    fn shutdown(&self) {
        self.shared.down.store(true, Ordering::Release);
        // A poisoned lock only means another thread panicked mid-shutdown; take the sender anyway.
        let mut kill = self
            .shared
            .kill_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        kill.take();
    }
}
