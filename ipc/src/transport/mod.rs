//! Datagram transports behind one trait, and the typed [`Channel`] on top (DESIGN.md §2).
//!
//! A transport moves whole messages (byte strings up to [`MAX_MESSAGE`]) between two endpoints,
//! preserving boundaries, so the wire format needs no framing. Implementations:
//! - [`InProc`]: between threads of one process (crossbeam-channel);
//! - `SeqpacketConn` / `SeqpacketListener` (Linux hosts): Unix-domain SOCK_SEQPACKET sockets;
//! - `SchemeConn` (Redox): a handle on a scheme whose reads and writes carry one whole message
//!   each; the server side queues per-client messages in a [`mailbox::Mailbox`].
//!
//! Every blocking call takes `timeout: Option<Duration>` (`None` blocks, `Some(ZERO)` polls), and
//! [`Transport::shutdown`] wakes any thread blocked on the endpoint, so no daemon thread can hang
//! on a peer.

use std::marker::PhantomData;
use std::sync::{Mutex, TryLockError};
use std::time::Duration;

use crate::msg::{ClockReply, ClockRequest, DriverToPtpd, PtpdToDriver};
use crate::wire::{DecodeError, EncodeError, MAX_MESSAGE, Wire};

mod inproc;
pub use inproc::{InProc, inproc_pair};
pub mod mailbox;

#[cfg(target_os = "redox")]
mod redox;
#[cfg(target_os = "redox")]
pub use redox::SchemeConn;

#[cfg(any(target_os = "linux", target_os = "redox"))]
mod driver;
#[cfg(any(target_os = "linux", target_os = "redox"))]
pub use driver::{
    ChannelMode, DRIVER_RING_BUSY_POLL, DriverConn, DriverTransport, MAX_CLIENT_RING, client_ring,
    connect_driver,
};
#[cfg(target_os = "linux")]
pub mod sockfile;
#[cfg(target_os = "linux")]
mod unix;
#[cfg(target_os = "linux")]
pub use unix::{PeerCred, SeqpacketConn, SeqpacketListener, SocketAccess};

/// Why a transport operation failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TransportError {
    /// The peer is gone (closed, crashed) or either side called `shutdown`. Final: every later
    /// call on the endpoint fails the same way.
    #[error("peer disconnected")]
    Disconnected,
    /// The timeout expired first; the endpoint is unchanged and the call may be retried.
    #[error("timed out")]
    Timeout,
    /// A message of this many bytes exceeds [`MAX_MESSAGE`] (on send: nothing was sent; on
    /// receive: that message was discarded, the endpoint stays usable).
    #[error("message of {0} bytes exceeds the transport limit")]
    TooLarge(usize),
    /// Nothing listens at the address: the path does not exist, or it is a stale socket file
    /// (ECONNREFUSED). Separate from `Io` so a client can simply retry later (e.g. ptpd waiting
    /// for a driver to come up).
    #[error("no listener: {0}")]
    NotFound(String),
    /// The OS refused the connection (EACCES/EPERM): the socket file's mode, or a scheme's
    /// check of the caller's uid. Separate from `Io` so a client can say so and back off.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// Any other OS error, with the operation, the address where there is one, and the errno text.
    #[error("{0}")]
    Io(String),
}

/// A bidirectional datagram endpoint.
pub trait Transport: Send + Sync {
    /// Sends one whole message. `timeout: None` blocks.
    ///
    /// Empty messages are refused with `Io` (a zero-length read from a SOCK_SEQPACKET socket
    /// means EOF, so a socket transport could not tell them apart); messages above
    /// [`MAX_MESSAGE`] with `TooLarge`.
    fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), TransportError>;
    /// Receives one whole message into `buf` (cleared first). `timeout: None` blocks.
    fn recv(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError>;
    /// Unblocks any thread in send/recv on this endpoint; both sides then see Disconnected.
    fn shutdown(&self);
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), TransportError> {
        (**self).send(msg, timeout)
    }
    fn recv(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        (**self).recv(buf, timeout)
    }
    fn shutdown(&self) {
        (**self).shutdown()
    }
}

impl<T: Transport + ?Sized> Transport for std::sync::Arc<T> {
    fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), TransportError> {
        (**self).send(msg, timeout)
    }
    fn recv(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        (**self).recv(buf, timeout)
    }
    fn shutdown(&self) {
        (**self).shutdown()
    }
}

/// Checks common to every transport's send.
fn check_send_len(msg: &[u8]) -> Result<(), TransportError> {
    if msg.is_empty() {
        return Err(TransportError::Io("empty messages cannot be sent".into()));
    }
    if msg.len() > MAX_MESSAGE {
        return Err(TransportError::TooLarge(msg.len()));
    }
    Ok(())
}

/// Why a typed channel operation failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ChannelError {
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// The peer sent bytes that are not a valid message. Only that message is lost: the channel
    /// stays usable, and whether to drop the peer is the caller's policy.
    #[error("malformed message: {0}")]
    Decode(#[from] DecodeError),
    /// The message to send has a field beyond its bound; nothing was sent.
    #[error("cannot encode: {0}")]
    Encode(#[from] EncodeError),
}

impl ChannelError {
    /// Whether the peer is gone for good (reconnect rather than retry).
    pub fn is_disconnected(&self) -> bool {
        matches!(self, ChannelError::Transport(TransportError::Disconnected))
    }
}

/// A transport carrying typed messages: `Out` is sent, `In` received.
///
/// `send` takes `&self` and may be called from several threads at once (each call encodes into
/// its own buffer). `recv` is meant for one receiving thread: it reuses one buffer; a concurrent
/// second receiver does not wait for it (that would be an unbounded wait) but uses a temporary.
pub struct Channel<T: Transport, Out: Wire, In: Wire> {
    transport: T,
    rx_buf: Mutex<Vec<u8>>,
    // fn(Out) -> In: the channel neither owns nor shares messages, so it stays Send + Sync
    // whatever `Out` and `In` are.
    _msgs: PhantomData<fn(Out) -> In>,
}

/// The driver's end of its ptpd channel.
pub type DriverSide<T> = Channel<T, DriverToPtpd, PtpdToDriver>;
/// ptpd's end of a driver channel.
pub type PtpdDriverSide<T> = Channel<T, PtpdToDriver, DriverToPtpd>;
/// An application's end of the clock scheme.
pub type ClientSide<T> = Channel<T, ClockRequest, ClockReply>;
/// ptpd's end of a clock-scheme connection.
pub type ServerSide<T> = Channel<T, ClockReply, ClockRequest>;

impl<T: Transport, Out: Wire, In: Wire> Channel<T, Out, In> {
    pub fn new(transport: T) -> Self {
        Channel {
            transport,
            rx_buf: Mutex::new(Vec::with_capacity(MAX_MESSAGE)),
            _msgs: PhantomData,
        }
    }

    /// Encodes and sends one message. A message with an oversized field fails with
    /// `ChannelError::Encode` before anything is sent.
    pub fn send(&self, msg: &Out, timeout: Option<Duration>) -> Result<(), ChannelError> {
        let mut buf = Vec::with_capacity(256);
        msg.try_encode(&mut buf)?;
        self.transport.send(&buf, timeout)?;
        Ok(())
    }

    /// Receives and decodes one message.
    pub fn recv(&self, timeout: Option<Duration>) -> Result<In, ChannelError> {
        let mut spare = Vec::new();
        let mut guard = match self.rx_buf.try_lock() {
            Ok(g) => Some(g),
            // The buffer holds no invariant, so a panic while it was held leaves nothing broken.
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        let buf = match guard.as_deref_mut() {
            Some(b) => b,
            None => &mut spare,
        };
        self.transport.recv(buf, timeout)?;
        Ok(In::decode(buf)?)
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Shuts the transport down: blocked senders and receivers on both sides see
    /// `Disconnected`.
    pub fn shutdown(&self) {
        self.transport.shutdown();
    }

    pub fn into_transport(self) -> T {
        self.transport
    }
}

/// Two connected in-process channels, e.g. `inproc_channels::<PtpdToDriver, DriverToPtpd>()`
/// gives (ptpd's end, the driver's end).
pub fn inproc_channels<A: Wire, B: Wire>() -> (Channel<InProc, A, B>, Channel<InProc, B, A>) {
    let (a, b) = inproc_pair();
    (Channel::new(a), Channel::new(b))
}

#[cfg(test)]
mod tests;
