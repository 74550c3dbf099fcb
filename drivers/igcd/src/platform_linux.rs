//! Linux host: the driver channel is a SOCK_SEQPACKET socket ptpd connects to, and the clock
//! page is a file in the runtime directory.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ptp_ipc::clockpage::ClockPageWriter;
use ptp_ipc::transport::{Channel, SeqpacketConn, SeqpacketListener, TransportError};
use ptp_ipc::{DriverEvent, DriverToPtpd, PtpdToDriver};
use ptp_pci::PciFunction;

use crate::daemon::{ClockPageSlot, Device, EventSink};
use crate::{Error, Options};

type DriverChannel = Channel<SeqpacketConn, DriverToPtpd, PtpdToDriver>;

/// How long an idle wait (for ptpd to connect, or for its next request) lasts before the loop
/// goes round again.
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Sends are bounded so a stuck ptpd cannot stall the IRQ thread or the main loop.
const SEND_TIMEOUT: Duration = Duration::from_millis(200);

/// The current ptpd connection, shared with the IRQ thread.
#[derive(Default)]
struct Sink {
    conn: Mutex<Option<Arc<DriverChannel>>>,
}

impl EventSink for Sink {
    fn send(&self, ev: DriverEvent) {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(c) = conn
            && let Err(e) = c.send(&DriverToPtpd::Event(ev), Some(SEND_TIMEOUT))
        {
            log::warn!("event not delivered: {e}");
        }
    }
}

pub fn run<F: PciFunction>(func: F, opts: Options) -> Result<(), Error> {
    let channel_path = opts
        .channel
        .clone()
        .ok_or_else(|| Error::Usage("--channel PATH is required".into()))?;
    let generation = ptp_ipc::time::realtime_ns() ^ (std::process::id() as u64) << 48;
    let page = match &opts.clock_page {
        Some(p) => ClockPageSlot::with(
            Arc::new(ClockPageWriter::create(p)?),
            p.display().to_string(),
        ),
        None => ClockPageSlot::default(),
    };
    let dev = Device::bring_up(func, &opts, Arc::new(page), generation)?;
    let sink = Arc::new(Sink::default());
    let stop = Arc::new(AtomicBool::new(false));
    let _threads = dev.start_threads(sink.clone(), stop);

    let listener = SeqpacketListener::bind(&channel_path)?;
    log::info!("serving ptpd on {}", channel_path.display());
    loop {
        let (conn, cred) = match listener.accept(Some(IDLE_WAIT)) {
            Ok(c) => c,
            Err(TransportError::Timeout) => continue,
            Err(e) => return Err(e.into()),
        };
        log::info!("ptpd connected (pid {}, uid {})", cred.pid, cred.uid);
        let chan = Arc::new(DriverChannel::new(conn));
        // Hello: the generation tells ptpd whether this is a new driver instance.
        let hello = [
            DriverEvent::Restarted { generation },
            DriverEvent::Link {
                up: dev.link().up,
                speed_mbps: dev.link().speed_mbps,
            },
        ];
        if hello.into_iter().any(|ev| {
            chan.send(&DriverToPtpd::Event(ev), Some(SEND_TIMEOUT))
                .is_err()
        }) {
            continue;
        }
        *sink.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(chan.clone());
        serve(&dev, &chan, &sink);
        *sink.conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
        log::info!("ptpd disconnected");
    }
}

/// Serves one ptpd connection until it closes.
fn serve<F: PciFunction>(dev: &Device<F>, chan: &DriverChannel, sink: &Sink) {
    use ptp_ipc::transport::ChannelError;
    loop {
        // Bounded like every wait; an idle ptpd just means another turn of the loop.
        match chan.recv(Some(IDLE_WAIT)) {
            Ok(PtpdToDriver { seq, request }) => {
                let Some(reply) = dev.handle(request, sink) else {
                    continue;
                };
                if let Err(e) = chan.send(&DriverToPtpd::Reply { seq, reply }, Some(SEND_TIMEOUT)) {
                    log::warn!("reply {seq} not delivered: {e}");
                    if matches!(e, ChannelError::Transport(TransportError::Disconnected)) {
                        return;
                    }
                }
            }
            // A malformed message is reported and skipped; the channel stays up.
            Err(ChannelError::Decode(e)) => log::warn!("malformed request dropped: {e}"),
            Err(ChannelError::Transport(TransportError::Disconnected)) => return,
            Err(ChannelError::Transport(TransportError::Timeout)) => {}
            Err(e) => {
                log::warn!("channel error: {e}");
                return;
            }
        }
    }
}
