//! The real path: the driver daemon (igcd for i225/i226, igbd for i210/i211/i350/82576) on an
//! emulated NIC with a loopback wire, started as a separate process, driven over its driver
//! channel exactly as ptpd drives it: the connection is made by the same client function
//! ptpd's driver link uses (`ptp_ipc::transport::connect_driver`), in either channel mode
//! (socket, or the shared-memory ring).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use ptp_emu::truth::TruthReader;
use ptp_ipc::clockpage::{ClockPageReader, ClockSample};
use ptp_ipc::ring::RingStats;
use ptp_ipc::time::mono_ns;
use ptp_ipc::transport::{
    Channel, ChannelError, ChannelMode, DriverTransport, Transport, TransportError, connect_driver,
};
use ptp_ipc::{
    DriverEvent, DriverReply, DriverRequest, DriverToPtpd, LostReason, PtpdToDriver, RxFilter,
    Stats,
};

use crate::ramp::{Completion, Counters, Outcome, Target};

type Chan = Channel<DriverTransport, PtpdToDriver, DriverToPtpd>;
/// Requests waiting for their reply, by sequence number.
type Waiters = Mutex<Vec<(u32, Sender<DriverReply>)>>;

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Result<Self, String> {
        let p =
            std::env::temp_dir().join(format!("tsperf-{tag}-{}-{}", std::process::id(), mono_ns()));
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(Self(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How to start a daemon: a program and its leading arguments (`[igcd]` or `[ptplab, igcd]`).
pub type IgcdCommand = Vec<OsString>;

/// The daemon whose `--emulate` list has `nic` (igcd: i225, i226; igbd: i210, i211, i350,
/// 82576), `None` for a NIC no daemon emulates.
pub fn daemon_for(nic: &str) -> Option<&'static str> {
    use intel_common::family::Family;
    use intel_common::{igb::Igb, igc::Igc};
    [(Igc::DAEMON, Igc::MODELS), (Igb::DAEMON, Igb::MODELS)]
        .into_iter()
        .find(|(_, models)| models.contains(&nic))
        .map(|(daemon, _)| daemon)
}

/// A running igcd and the connection to it.
pub struct Driver {
    child: Child,
    chan: Arc<Chan>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    replies: Arc<Waiters>,
    seq: u32,
    completions: Receiver<Completion>,
    frames: Receiver<(u64, Option<u64>)>,
    frame: Vec<u8>,
    truth: TruthReader,
    pub sets: u8,
    nic: String,
    daemon: &'static str,
    mode: ChannelMode,
    /// The reader thread's kernel task id (its wake-ups are counted from /proc).
    reader_tid: Arc<std::sync::atomic::AtomicI32>,
    _dir: TempDir,
}

/// A PTPv2 Sync over L2 (58 bytes) padded to the 60-byte minimum as a sending MAC pads it
/// (the models drop shorter frames as runts); the sequenceId carries the request id.
pub fn sync_frame(id: u64) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[0x01, 0x1B, 0x19, 0, 0, 0]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x88F7u16.to_be_bytes());
    f[14] = 0x00; // Sync
    f[15] = 0x02; // PTPv2
    f[16..18].copy_from_slice(&44u16.to_be_bytes());
    f[14 + 30..14 + 32].copy_from_slice(&(id as u16).to_be_bytes());
    f
}

fn wait_for(daemon: &str, path: &Path, child: &mut Child, timeout: Duration) -> Result<(), String> {
    let t = Instant::now();
    while !path.exists() {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("{daemon} exited during start-up ({st})"));
        }
        if t.elapsed() > timeout {
            return Err(format!(
                "{daemon} did not create {} in {timeout:?}",
                path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Where a daemon tsperf starts keeps its driver channel, clock page, ground-truth record and
/// stderr.
struct DaemonFiles {
    sock: PathBuf,
    page: PathBuf,
    truth: PathBuf,
    log: PathBuf,
}

impl DaemonFiles {
    fn in_dir(dir: &Path, daemon: &str) -> Self {
        Self {
            sock: dir.join("drv.sock"),
            page: dir.join("clock.page"),
            truth: dir.join("truth"),
            log: dir.join(format!("{daemon}.log")),
        }
    }
}

/// The real-time service of the reader thread, which stands in for ptpd's driver link
/// (`--rt`), and the busy-poll window of tsperf's end of the ring (`--busy-poll-us`): set once
/// before the first driver starts.
static READER: std::sync::OnceLock<(ptp_ipc::rt::RtConfig, Duration)> = std::sync::OnceLock::new();

pub fn set_reader(rt: ptp_ipc::rt::RtConfig, busy_poll: Duration) {
    let _ = READER.set((rt, busy_poll));
}

fn reader_rt() -> ptp_ipc::rt::RtConfig {
    READER.get().copied().unwrap_or_default().0
}

fn reader_busy_poll() -> Duration {
    READER.get().copied().unwrap_or_default().1
}

/// Starts `daemon` (`cmd`) on an emulated `nic` with `sets` TX timestamp sets on `wire`, its
/// files where `files` says.
fn spawn(
    daemon: &str,
    cmd: &IgcdCommand,
    (nic, sets, wire): (&str, u8, &str),
    extra: &[&str],
    files: &DaemonFiles,
) -> Result<Child, String> {
    let (prog, pre) = cmd
        .split_first()
        .ok_or_else(|| format!("no {daemon} command"))?;
    let log = std::fs::File::create(&files.log).map_err(|e| e.to_string())?;
    Command::new(prog)
        .args(pre)
        .args(["--emulate", nic, "--wire", wire, "--name", "tsperf"])
        .args(["--tx-ts-sets", &sets.to_string()])
        .arg("--channel")
        .arg(&files.sock)
        .arg("--clock-page")
        .arg(&files.page)
        .arg("--truth")
        .arg(&files.truth)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {daemon} ({}): {e}", prog.to_string_lossy()))
}

/// Connects to the starting `daemon` in `mode` as ptpd does, and opens the model's own
/// counters (the daemon creates that record before it serves its channel).
fn connect(
    daemon: &str,
    files: &DaemonFiles,
    mode: ChannelMode,
    child: &mut Child,
) -> Result<(DriverTransport, TruthReader), String> {
    wait_for(daemon, &files.sock, child, Duration::from_secs(10))?;
    let t = Instant::now();
    let conn = loop {
        // Like ptpd: the daemon serves a connection only after its hello.
        match connect_driver(&files.sock, mode, 0, Duration::from_secs(2)) {
            Ok(c) => break c,
            Err(TransportError::NotFound(_)) if t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(format!("connecting to {daemon}: {e}")),
        }
    };
    let truth = TruthReader::open(&files.truth)
        .map_err(|e| format!("ground-truth record {}: {e}", files.truth.display()))?;
    Ok((conn, truth))
}

impl Driver {
    /// Starts the daemon `cmd` (igcd or igbd, as [`daemon_for`] names for `nic`) on an emulated
    /// `nic` with `sets` TX timestamp sets on `wire` (loopback or none), and connects.
    pub fn start(
        cmd: &IgcdCommand,
        nic: &str,
        sets: u8,
        wire: &str,
        mode: ChannelMode,
    ) -> Result<Self, String> {
        let dir = TempDir::new("drv")?;
        Self::start_in(dir, cmd, nic, sets, wire, &[], mode)
    }

    /// Like [`Self::start`] in `dir` with the given `--wire`.
    pub fn start_in(
        dir: TempDir,
        cmd: &IgcdCommand,
        nic: &str,
        sets: u8,
        wire: &str,
        extra: &[&str],
        mode: ChannelMode,
    ) -> Result<Self, String> {
        let daemon = daemon_for(nic).ok_or_else(|| format!("no emulated NIC {nic:?}"))?;
        let files = DaemonFiles::in_dir(&dir.0, daemon);
        let mut child = spawn(daemon, cmd, (nic, sets, wire), extra, &files)?;
        let (conn, truth) = match connect(daemon, &files, mode, &mut child) {
            Ok(c) => c,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        // What the daemon gave us (a driver without rings leaves the channel on the socket).
        let mode = conn.mode();
        if let Some(r) = conn.ring() {
            r.set_busy_poll(reader_busy_poll());
        }
        let chan = Arc::new(Channel::new(conn));
        let reader_tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let reader_page = files.page;
        let (ctx, crx) = unbounded();
        let (ftx, frx) = bounded(1 << 16);
        let replies: Arc<Waiters> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (chan, replies, stop) = (chan.clone(), replies.clone(), stop.clone());
            let tid = reader_tid.clone();
            std::thread::Builder::new()
                .name("tsperf-rx".into())
                .spawn(move || {
                    ptp_ipc::rt::apply(&reader_rt(), "tsperf-rx");
                    // Safety: gettid has no preconditions.
                    tid.store(unsafe { libc::gettid() }, Ordering::Release);
                    reader(&chan, &reader_page, &replies, &ctx, &ftx, &stop)
                })
                .map_err(|e| e.to_string())?
        };
        Ok(Self {
            child,
            chan,
            stop,
            reader: Some(reader),
            replies,
            seq: 1,
            completions: crx,
            frames: frx,
            frame: sync_frame(0),
            truth,
            sets,
            nic: nic.to_string(),
            daemon,
            mode,
            reader_tid,
            _dir: dir,
        })
    }

    pub fn mode(&self) -> ChannelMode {
        self.mode
    }

    /// Our end's ring counters (`None` over the socket).
    pub fn ring_stats(&self) -> Option<RingStats> {
        self.chan.transport().ring_stats()
    }

    /// The reader thread's task id (0 before it started).
    pub fn reader_tid(&self) -> i32 {
        self.reader_tid.load(Ordering::Acquire)
    }

    /// A request whose reply we wait for (bounded).
    pub fn request(&mut self, req: DriverRequest) -> Result<DriverReply, String> {
        // Register for the reply before sending it: the reader may see the reply first.
        let (tx, rx) = bounded(1);
        self.replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.seq, tx));
        self.post(req, Duration::from_secs(1))?;
        rx.recv_timeout(Duration::from_secs(2))
            .map_err(|_| format!("{} did not answer", self.daemon))
    }

    pub fn stats(&mut self) -> Result<Stats, String> {
        match self.request(DriverRequest::Stats)? {
            DriverReply::Stats(s) => Ok(s),
            other => Err(format!("unexpected {other:?}")),
        }
    }

    pub fn set_rx_filter(&mut self, f: RxFilter) -> Result<(), String> {
        match self.request(DriverRequest::SetTstampConfig {
            tx_on: true,
            rx_filter: f,
        })? {
            DriverReply::TstampConfig { .. } => Ok(()),
            other => Err(format!("unexpected {other:?}")),
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Received PTP frames: (arrival mono ns, RX stamp).
    pub fn frames(&self) -> &Receiver<(u64, Option<u64>)> {
        &self.frames
    }

    /// Sends one request under the next sequence number (the one `request` registered).
    fn post(&mut self, request: DriverRequest, timeout: Duration) -> Result<u32, String> {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.chan
            .send(&PtpdToDriver { seq, request }, Some(timeout))
            .map_err(|e| e.to_string())?;
        Ok(seq)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.chan.shutdown();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Target for Driver {
    fn name(&self) -> String {
        format!(
            "{}, emulated {}, {} TX timestamp set{}, {} channel",
            self.daemon,
            self.nic,
            self.sets,
            if self.sets == 1 { "" } else { "s" },
            self.mode.name()
        )
    }

    fn submit(&mut self, id: u64) -> Result<(), String> {
        self.frame[14 + 30..14 + 32].copy_from_slice(&(id as u16).to_be_bytes());
        let request = DriverRequest::SendPtp {
            cookie: id,
            want_ts: true,
            frame: self.frame.clone(),
        };
        self.post(request, Duration::from_millis(100)).map(|_| ())
    }

    fn completions(&self) -> &Receiver<Completion> {
        &self.completions
    }

    fn counters(&mut self) -> Counters {
        Counters {
            driver_reads: self.stats().ok().map(|s| s.mmio_reads),
            model_reads: self.truth.snapshot().ok().map(|s| s.bar_reads),
        }
    }
}

/// Maps a PHC time to host monotonic time through the clock page.
fn to_mono(s: &ClockSample, phc_ns: u64) -> u64 {
    let d = phc_ns as f64 - s.phc_ns as f64;
    (s.mono_ns as f64 + d / (1.0 + s.rate_ppb * 1e-9)).max(0.0) as u64
}

fn reader(
    chan: &Chan,
    page: &Path,
    replies: &Waiters,
    completions: &Sender<Completion>,
    frames: &Sender<(u64, Option<u64>)>,
    stop: &AtomicBool,
) {
    let page = ClockPageReader::open(page).ok();
    let mut sample: Option<ClockSample> = None;
    while !stop.load(Ordering::Acquire) {
        let msg = match chan.recv(Some(Duration::from_millis(100))) {
            Ok(m) => m,
            Err(ChannelError::Transport(TransportError::Timeout)) => continue,
            Err(ChannelError::Decode(_)) => continue,
            Err(_) => return,
        };
        let now = mono_ns();
        match msg {
            DriverToPtpd::Reply { seq, reply } => {
                let mut r = replies.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(i) = r.iter().position(|(s, _)| *s == seq) {
                    let (_, tx) = r.swap_remove(i);
                    let _ = tx.try_send(reply);
                }
            }
            DriverToPtpd::Event(DriverEvent::TxTimestamp { cookie, ns }) => {
                // The PHC→host mapping of every stamp from the page as it is now (a seqlock
                // read, tens of ns): a copy kept even 50 ms maps the stamps after a step of
                // the clock with the law from before it.
                if let Some(s) = page.as_ref().and_then(|p| p.read().ok()) {
                    sample = Some(s);
                }
                let latch = sample.map(|s| to_mono(&s, ns)).unwrap_or(0);
                let _ = completions.send(Completion {
                    id: cookie,
                    arrival_mono_ns: now,
                    outcome: Outcome::Stamp {
                        latch_mono_ns: latch,
                    },
                });
            }
            DriverToPtpd::Event(DriverEvent::TxTimestampLost { cookie, reason }) => {
                let _ = completions.send(Completion {
                    id: cookie,
                    arrival_mono_ns: now,
                    outcome: if reason == LostReason::NoFreeSlot {
                        Outcome::Skipped
                    } else {
                        Outcome::Lost
                    },
                });
            }
            DriverToPtpd::Event(DriverEvent::PtpFrame { rx_ns, .. }) => {
                let _ = frames.try_send((now, rx_ns));
            }
            DriverToPtpd::Event(_) => {}
        }
    }
}

impl Driver {
    /// The underlying transport (for tests that inject bytes).
    pub fn transport(&self) -> &impl Transport {
        self.chan.transport()
    }
}
