//! What the driver channel's platforms share (DESIGN.md §2, issue 16): which ring a client's
//! `HelloRing` may get, and answering one request of the connection that drives the NIC. Linux
//! (`linux_channel`) and Redox (`platform_redox::channel`) receive requests their own way —
//! Linux's main loop polls sockets and ring bells together, a Redox ring connection has a
//! worker thread asleep on the ring's doorbell — and hand each to [`answer`].

use std::time::Duration;

use ptp_ipc::ring::Geometry;
use ptp_ipc::transport::{Channel, ChannelError, MAX_CLIENT_RING, Transport, TransportError};
use ptp_ipc::{DriverRequest, DriverToPtpd, PtpdToDriver};
use ptp_pci::PciFunction;

use super::{Device, EventSink};
use crate::family::Family;

/// Sends are bounded so a stuck ptpd cannot stall the IRQ thread or the thread serving
/// requests; a full ring past this drops the message (counted in the ring's `full_drops`).
pub const SEND_TIMEOUT: Duration = Duration::from_millis(200);

/// The ring a client's `HelloRing` asked for, if it is one the driver accepts: a valid
/// geometry of at most [`MAX_CLIENT_RING`] bytes per direction.
pub fn ring_geometry(slot_size: u32, slot_count: u32) -> Result<Geometry, String> {
    let g = Geometry::new(slot_size, slot_count).map_err(|e| format!("ring hello: {e}"))?;
    if slot_size as usize * slot_count as usize > MAX_CLIENT_RING {
        return Err(format!(
            "ring hello: {slot_size} B x {slot_count} slots exceeds {MAX_CLIENT_RING} B per \
             direction"
        ));
    }
    Ok(g)
}

/// What became of one receive on the current connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A request was answered (or skipped: a repeated hello, a malformed message).
    Served,
    /// Nothing was waiting (the receive timed out).
    Idle,
    /// The peer has gone: drop the connection.
    Gone,
    /// The connection failed otherwise (logged): shut it down and drop it.
    Failed,
}

/// The driver's end of a driver channel over transport `T`.
pub type DriverEnd<T> = Channel<T, DriverToPtpd, PtpdToDriver>;

/// Executes the request `received` from `chan` (the connection that drives the NIC) and sends
/// its reply; events it causes go to `sink`.
pub fn answer<T: Transport, F: PciFunction, Fam: Family, S: EventSink>(
    dev: &Device<F, Fam>,
    sink: &S,
    chan: &DriverEnd<T>,
    received: Result<PtpdToDriver, ChannelError>,
) -> Step {
    match received {
        // A repeated hello changes nothing.
        Ok(PtpdToDriver {
            request: DriverRequest::Hello | DriverRequest::HelloRing { .. },
            ..
        }) => Step::Served,
        Ok(PtpdToDriver { seq, request }) => {
            let Some(reply) = dev.handle(request, sink) else {
                return Step::Served;
            };
            match chan.send(&DriverToPtpd::Reply { seq, reply }, Some(SEND_TIMEOUT)) {
                Err(e) => {
                    log::warn!("reply {seq} not delivered: {e}");
                    if e.is_disconnected() {
                        Step::Gone
                    } else {
                        Step::Served
                    }
                }
                Ok(()) => Step::Served,
            }
        }
        Err(ChannelError::Transport(TransportError::Timeout)) => Step::Idle,
        // A malformed message is reported and skipped; the channel stays up.
        Err(ChannelError::Decode(e)) => {
            log::warn!("malformed request dropped: {e}");
            Step::Served
        }
        Err(ChannelError::Transport(TransportError::Disconnected)) => Step::Gone,
        Err(e) => {
            log::warn!("channel error: {e}");
            Step::Failed
        }
    }
}
