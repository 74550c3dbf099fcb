//! ptpd's side of one driver channel: connects, reconnects after a driver restart, matches
//! replies to requests by sequence number, and forwards unsolicited events.
//!
//! A request never waits on a dead driver: while disconnected it fails at once with
//! `NoDevice` (`PermissionDenied` while the driver refuses this process); a request in flight
//! when the driver dies fails as soon as the channel closes.
//!
//! Every connection starts with `Hello`; the session is up when the driver's own hello
//! (`Restarted`) arrives. A driver that ends a connection says why (`Closed`): a refused link
//! retries every `REFUSED_RETRY` (the driver's rule may change), and a link a newer ptpd
//! replaced stays down, so two ptpds never take a NIC from each other in turn.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};
use ptp_ipc::transport::{Channel, ChannelError, Transport, TransportError};
use ptp_ipc::{
    ClockError, CloseReason, DriverError, DriverEvent, DriverReply, DriverRequest, DriverToPtpd,
    EVENT_HISTORY, ExtTsEvent, MAX_EVENTS, PinFunction, PtpdToDriver, Seq,
};

/// Opens a new connection to the driver.
pub trait Connector: Send + Sync + 'static {
    type T: Transport + 'static;
    fn connect(&self) -> Result<Self::T, TransportError>;
    /// Connects and sends the hello (sequence number `seq`). The default sends a plain `Hello`
    /// after [`Self::connect`]; a connector whose hello sets up the transport itself (a ring,
    /// `ptp_ipc::transport::connect_driver`) overrides it. A hello that was not delivered is
    /// not an error: a driver that refused us at once has closed, and its reason waits to be
    /// read.
    fn connect_hello(&self, seq: Seq) -> Result<Self::T, TransportError> {
        let t = self.connect()?;
        let hello = PtpdToDriver {
            seq,
            request: DriverRequest::Hello,
        };
        if let Err(e) = t.send(&ptp_ipc::Wire::to_bytes(&hello), Some(SEND_TIMEOUT)) {
            log::debug!("hello to {} not delivered: {e}", self.describe());
        }
        Ok(t)
    }
    /// For logs.
    fn describe(&self) -> String;
    /// For logs, once connected: what the connection is (a ring asked for may have become the
    /// socket when the driver refused it).
    fn describe_connected(&self, _t: &Self::T) -> String {
        self.describe()
    }
}

/// What ptpd knows about the driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStatus {
    pub connected: bool,
    pub generation: u64,
    pub connects: u64,
    pub link_up: bool,
    pub speed_mbps: u32,
    /// The driver refused this process (its channel's file mode or its uid/gid rule).
    pub refused: bool,
}

type Chan<T> = Channel<T, PtpdToDriver, DriverToPtpd>;

struct Shared<T: Transport> {
    name: String,
    conn: Mutex<Option<Arc<Chan<T>>>>,
    pending: Mutex<HashMap<Seq, Sender<DriverReply>>>,
    next_seq: AtomicU32,
    status: Mutex<LinkStatus>,
    stop: AtomicBool,
    events: Option<Sender<DriverEvent>>,
    /// Events the engine's full queue refused.
    events_dropped: AtomicU64,
    pins: Mutex<PinMemory>,
}

/// The pins' side of a link: the external timestamps received (the last [`EVENT_HISTORY`],
/// numbered from 1), and the pin settings that succeeded, re-applied when the driver restarts
/// (a new driver process starts with every pin off).
#[derive(Debug, Default)]
struct PinMemory {
    /// Each event with CLOCK_REALTIME when it arrived (the time-of-day the time source needs).
    log: VecDeque<(ExtTsEvent, u64)>,
    /// The number the next event gets.
    next_seq: u64,
    pps_events: u64,
    /// `SetPin`s, the last per pin, in the order they were made (replaying them in order
    /// repeats the moves of a channel between pins).
    set_pins: Vec<(u8, PinFunction, u8)>,
    extts: BTreeMap<u8, bool>,
    perout: BTreeMap<u8, (u64, u64)>,
    pps: Option<bool>,
}

impl PinMemory {
    fn record(&mut self, e: ExtTsEvent, sys_ns: u64) {
        if self.log.len() == EVENT_HISTORY {
            self.log.pop_front();
        }
        self.log.push_back((e, sys_ns));
        self.next_seq = self.next_seq.max(1) + 1;
    }

    /// Events numbered above `after`: (the first's number, how many of those were no longer
    /// held, at most [`MAX_EVENTS`] events).
    fn after(&self, after: u64) -> (u64, u64, Vec<(ExtTsEvent, u64)>) {
        let next = self.next_seq.max(1);
        let first_held = next - self.log.len() as u64;
        let want = after.saturating_add(1).min(next);
        let start = want.max(first_held);
        let skip = (start - first_held) as usize;
        let events = self
            .log
            .iter()
            .skip(skip)
            .take(MAX_EVENTS.into())
            .copied()
            .collect();
        (start, start - want, events)
    }

    /// Remembers a pin request the driver accepted.
    fn remember(&mut self, req: &DriverRequest) {
        match *req {
            DriverRequest::SetPin { pin, func, chan } => {
                self.set_pins.retain(|&(p, ..)| p != pin);
                self.set_pins.push((pin, func, chan));
            }
            DriverRequest::ExtTs { chan, on } => {
                self.extts.insert(chan, on);
            }
            DriverRequest::PerOut {
                chan,
                start_ns,
                period_ns,
            } => {
                self.perout.insert(chan, (start_ns, period_ns));
            }
            DriverRequest::Pps { on } => self.pps = Some(on),
            _ => {}
        }
    }

    /// The requests that put a fresh driver's pins back as they were.
    fn replay(&self) -> Vec<DriverRequest> {
        let pins = self
            .set_pins
            .iter()
            .map(|&(pin, func, chan)| DriverRequest::SetPin { pin, func, chan });
        let extts = self
            .extts
            .iter()
            .filter(|(_, on)| **on)
            .map(|(&chan, &on)| DriverRequest::ExtTs { chan, on });
        let perout = self
            .perout
            .iter()
            .filter(|(_, p)| p.1 > 0)
            .map(|(&chan, &(s, p))| DriverRequest::PerOut {
                chan,
                start_ns: s,
                period_ns: p,
            });
        let pps = self
            .pps
            .filter(|on| *on)
            .map(|on| DriverRequest::Pps { on });
        pins.chain(extts).chain(perout).chain(pps).collect()
    }
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One driver channel.
pub struct DriverLink<C: Connector> {
    shared: Arc<Shared<C::T>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Retry interval while the driver is absent: short, so a restarted driver is picked up within
/// a fraction of a second.
const RECONNECT_INTERVAL: Duration = Duration::from_millis(50);
/// Retry interval while the driver refuses us: its rule changes only when it restarts.
const REFUSED_RETRY: Duration = Duration::from_secs(1);
/// Sends to a driver are bounded like every other wait.
const SEND_TIMEOUT: Duration = Duration::from_millis(200);

impl<C: Connector> DriverLink<C> {
    /// Starts the connection thread. Events (timestamps, frames, link) go to `events`.
    pub fn start(name: &str, connector: C, events: Option<Sender<DriverEvent>>) -> Self {
        let shared = Arc::new(Shared {
            name: name.to_string(),
            conn: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            next_seq: AtomicU32::new(1),
            status: Mutex::new(LinkStatus::default()),
            stop: AtomicBool::new(false),
            events,
            events_dropped: AtomicU64::new(0),
            pins: Mutex::new(PinMemory::default()),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("link:{name}"))
            .spawn(move || link_thread(&s, &connector))
            .expect("spawn link thread");
        Self {
            shared,
            thread: Some(thread),
        }
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn status(&self) -> LinkStatus {
        *lock(&self.shared.status)
    }

    /// Sends `req` and waits at most `timeout` for its reply.
    pub fn request(
        &self,
        req: DriverRequest,
        timeout: Duration,
    ) -> Result<DriverReply, ClockError> {
        let Some(chan) = lock(&self.shared.conn).clone() else {
            return Err(self.down_error());
        };
        let generation = self.status().generation;
        let seq = self.shared.next_seq.fetch_add(1, Ordering::Relaxed);
        let (tx, rx): (Sender<DriverReply>, Receiver<DriverReply>) = bounded(1);
        lock(&self.shared.pending).insert(seq, tx);
        let sent = chan.send(&PtpdToDriver { seq, request: req }, Some(SEND_TIMEOUT));
        let result = match sent {
            Ok(()) => match rx.recv_timeout(timeout) {
                Ok(reply) => Ok(reply),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(ClockError::Timeout),
                // The link thread dropped our sender: the driver went away mid-request.
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    if self.status().generation != generation {
                        Err(ClockError::Restarted)
                    } else {
                        Err(ClockError::NoDevice)
                    }
                }
            },
            Err(ChannelError::Transport(TransportError::Timeout)) => Err(ClockError::Timeout),
            Err(ChannelError::Transport(TransportError::TooLarge(_))) => {
                Err(ClockError::InvalidArgument)
            }
            Err(_) => {
                // The driver is gone; say so at once rather than when the link thread notices.
                self.mark_down(&chan);
                Err(ClockError::NoDevice)
            }
        };
        lock(&self.shared.pending).remove(&seq);
        result
    }

    /// A pin request (`SetPin`, `ExtTs`, `PerOut`, `Pps`, `GetPins`): sent like any request,
    /// and remembered when the driver accepts it, to be re-applied if the driver restarts.
    pub fn pin_request(
        &self,
        req: DriverRequest,
        timeout: Duration,
    ) -> Result<DriverReply, ClockError> {
        let reply = self.request(req.clone(), timeout)?;
        if matches!(reply, DriverReply::Done | DriverReply::PerOut { .. }) {
            lock(&self.shared.pins).remember(&req);
        }
        Ok(reply)
    }

    /// External timestamps numbered above `after` ([`PinMemory`]): the first's number, how
    /// many after `after` were no longer held, and the events.
    pub fn ext_ts_after(&self, after: u64) -> (u64, u64, Vec<ExtTsEvent>) {
        let (first, lost, ev) = lock(&self.shared.pins).after(after);
        (first, lost, ev.into_iter().map(|(e, _)| e).collect())
    }

    /// [`Self::ext_ts_after`] with each event's arrival (CLOCK_REALTIME, ns).
    pub fn ext_ts_after_timed(&self, after: u64) -> (u64, u64, Vec<(ExtTsEvent, u64)>) {
        lock(&self.shared.pins).after(after)
    }

    /// PPS events received so far.
    pub fn pps_events(&self) -> u64 {
        lock(&self.shared.pins).pps_events
    }

    /// What a request gets while no session is up.
    fn down_error(&self) -> ClockError {
        if self.status().refused {
            ClockError::PermissionDenied
        } else {
            ClockError::NoDevice
        }
    }

    /// Marks the session over `chan` down, unless the link thread has already replaced it.
    fn mark_down(&self, chan: &Arc<Chan<C::T>>) {
        let mut conn = lock(&self.shared.conn);
        if conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, chan)) {
            *conn = None;
            lock(&self.shared.status).connected = false;
        }
    }

    /// Sends a request whose reply nobody waits for (fire-and-forget frames); the reply, if any,
    /// is discarded by the link thread.
    pub fn post(&self, req: DriverRequest) -> Result<(), ClockError> {
        let Some(chan) = lock(&self.shared.conn).clone() else {
            return Err(self.down_error());
        };
        let seq = self.shared.next_seq.fetch_add(1, Ordering::Relaxed);
        chan.send(&PtpdToDriver { seq, request: req }, Some(SEND_TIMEOUT))
            .map_err(|_| ClockError::NoDevice)
    }
}

impl<C: Connector> Drop for DriverLink<C> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(c) = lock(&self.shared.conn).take() {
            c.shutdown();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Maps a driver's error to the clock scheme's.
pub fn clock_error(e: &DriverError) -> ClockError {
    match e {
        DriverError::InvalidArgument | DriverError::BadFrame => ClockError::InvalidArgument,
        DriverError::Unsupported => ClockError::Unsupported,
        DriverError::Timeout => ClockError::Timeout,
        DriverError::Busy => ClockError::Busy,
        DriverError::Other(_) => ClockError::Io,
    }
}

fn link_thread<C: Connector>(s: &Shared<C::T>, connector: &C) {
    // TX/RX stamps reach ptpd on this thread.
    ptp_ipc::rt::apply(&crate::service::time_path_rt(), &format!("link:{}", s.name));
    // The last connect error logged: each different one once (a ring client learns why the
    // driver refused it from the connect itself), not every retry.
    let mut logged: Option<String> = None;
    let mut told_refused = false;
    while !s.stop.load(Ordering::Acquire) {
        let seq = s.next_seq.fetch_add(1, Ordering::Relaxed);
        let t = match connector.connect_hello(seq) {
            Ok(t) => t,
            Err(e) => {
                let refused = matches!(e, TransportError::PermissionDenied(_));
                let text = e.to_string();
                if logged.as_ref() != Some(&text) {
                    let what = if refused {
                        "refused by"
                    } else {
                        "not reachable at"
                    };
                    log::warn!("{}: driver {what} {}: {text}", s.name, connector.describe());
                    logged = Some(text);
                }
                lock(&s.status).refused = refused;
                std::thread::sleep(if refused {
                    REFUSED_RETRY
                } else {
                    RECONNECT_INTERVAL
                });
                continue;
            }
        };
        logged = None;
        // The session counts as up only when the driver's hello (`Restarted`) arrives: a dying
        // driver's listener can still accept a connection it will never serve.
        let describe = connector.describe_connected(&t);
        let chan = Arc::new(Chan::new(t));
        let closed = read_loop(s, &chan, &describe);
        *lock(&s.conn) = None;
        lock(&s.status).connected = false;
        // Dropping the senders wakes every waiter at once.
        lock(&s.pending).clear();
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        match closed {
            Some(CloseReason::Replaced) => {
                log::error!(
                    "{}: another ptpd took over the driver at {}; this link stays down",
                    s.name,
                    connector.describe()
                );
                return;
            }
            Some(CloseReason::PermissionDenied) => {
                lock(&s.status).refused = true;
                // Logged once, not at every retry.
                if !std::mem::replace(&mut told_refused, true) {
                    log::error!(
                        "{}: driver at {} refuses this process's uid; retrying every \
                         {REFUSED_RETRY:?}",
                        s.name,
                        connector.describe()
                    );
                }
                std::thread::sleep(REFUSED_RETRY);
            }
            reason => {
                told_refused = false;
                log::warn!(
                    "{}: driver channel closed{}; reconnecting",
                    s.name,
                    reason.map_or(String::new(), |r| format!(" ({r:?})"))
                );
                std::thread::sleep(RECONNECT_INTERVAL);
            }
        }
    }
}

/// Sends a restarted driver the pin settings its predecessor had. Fire-and-forget on the link
/// thread (which is the one that would read the replies): a refused one is logged by the
/// driver, and shows in `Pins`.
fn replay_pins<T: Transport>(s: &Shared<T>, chan: &Chan<T>) {
    let reqs = lock(&s.pins).replay();
    if !reqs.is_empty() {
        log::info!("{}: re-applying {} pin setting(s)", s.name, reqs.len());
    }
    for request in reqs {
        let seq = s.next_seq.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = chan.send(&PtpdToDriver { seq, request }, Some(SEND_TIMEOUT)) {
            log::warn!("{}: pin setting not re-applied: {e}", s.name);
        }
    }
}

/// How long a read blocks before re-checking the stop flag.
const READ_POLL: Duration = Duration::from_millis(200);

/// Reads replies and events until the channel closes; returns why, if the driver said.
fn read_loop<T: Transport>(
    s: &Shared<T>,
    chan: &Arc<Chan<T>>,
    describe: &str,
) -> Option<CloseReason> {
    while !s.stop.load(Ordering::Acquire) {
        match chan.recv(Some(READ_POLL)) {
            Ok(DriverToPtpd::Reply { seq, reply }) => {
                if let Some(tx) = lock(&s.pending).remove(&seq) {
                    let _ = tx.try_send(reply);
                }
            }
            // The driver's last word on this connection; the engine has no use for it.
            Ok(DriverToPtpd::Event(DriverEvent::Closed { reason })) => return Some(reason),
            Ok(DriverToPtpd::Event(ev)) => {
                match &ev {
                    DriverEvent::Restarted { generation } => {
                        let mut st = lock(&s.status);
                        if st.generation != 0 && st.generation != *generation {
                            log::warn!("{}: driver restarted (generation {generation:#x})", s.name);
                            replay_pins(s, chan);
                        }
                        st.generation = *generation;
                        st.connected = true;
                        st.refused = false;
                        st.connects += 1;
                        drop(st);
                        *lock(&s.conn) = Some(chan.clone());
                        log::info!("{}: connected to driver at {describe}", s.name);
                    }
                    DriverEvent::Link { up, speed_mbps } => {
                        let mut st = lock(&s.status);
                        st.link_up = *up;
                        st.speed_mbps = *speed_mbps;
                    }
                    DriverEvent::ExtTs(e) => lock(&s.pins).record(*e, ptp_ipc::time::realtime_ns()),
                    DriverEvent::Pps { .. } => lock(&s.pins).pps_events += 1,
                    _ => {}
                }
                if let Some(tx) = &s.events {
                    // Never block the reader on a slow consumer; dropped events are logged at
                    // the 1st, 2nd, 4th, 8th... so a stalled engine cannot flood the log.
                    if tx.try_send(ev).is_err() {
                        let n = s.events_dropped.fetch_add(1, Ordering::Relaxed) + 1;
                        if n.is_power_of_two() {
                            log::warn!("{}: event queue full, {n} event(s) dropped so far", s.name);
                        }
                    }
                }
            }
            Err(ChannelError::Transport(TransportError::Timeout)) => {}
            Err(ChannelError::Decode(e)) => {
                log::warn!("{}: malformed message from driver: {e}", s.name)
            }
            Err(_) => return None,
        }
    }
    None
}
