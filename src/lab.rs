//! ptplab: starts emulated hosts as real processes — igcd on an emulated NIC and ptpd per host,
//! hosts joined pairwise by an emulated cable — shows live status, prints a summary, and stops
//! everything on exit or signal.
//!
//! Layout: `DIR/host<i>/` holds `igc0.sock` (driver channel), `clock0.page` (clock page),
//! `ptpd.toml`, `ptp.sock` (the clock scheme) and the daemons' logs; `DIR/wire<k>.sock` is the
//! cable of pair k (hosts 2k and 2k+1).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ptp_ipc::{ClockStatus, PortState};
use ptpd::client::Client;
use serde_json::json;

use crate::procs::Children;

pub const USAGE: &str = "\
usage: ptplab [options]          (cargo run --release -- [options])
Starts emulated hosts (igcd + ptpd each, real processes), hosts 2k and 2k+1 joined by a cable,
host 2k the better master (priority1), and runs PTP between them.
  --hosts N               hosts (default 2; 1 = a single clock, no PTP peer)
  --duration SECS         run SECS seconds, then print the summary (default: until Ctrl-C)
  --runtime-dir DIR       where sockets, clock pages and logs go (default: a fresh temporary
                          directory, removed at exit)
  --nic i225|i226         emulated NIC (default i225)
  --json                  per-second records and a final summary as JSON lines
  --plot FILE.svg         draw offset and frequency over time
  --transport L2|UDPv4    network_transport (default L2)
  --delay-mechanism E2E|P2P  (default E2E)
  --sync-interval LOG2    logSyncInterval, also used for delay requests (default -3)
  --cable-delay-ns NS     one-way cable delay (default 50)
  --asymmetry-ns NS       the master→slave direction is NS longer than slave→master (default 0)
  --cable-jitter-ns NS    uniform ± jitter per frame (default 0)
  --loss P                frame loss probability per direction (default 0)
  --quantum-ns NS         timestamp quantisation (default 8)
  --stamp-jitter-ns NS    timestamp jitter, uniform ± (default 0)
  --ppm-spread PPM        oscillators spread over ±PPM/2 (default 40)
  --initial-offset-ms MS  clocks start up to ±MS apart (default 1)
  --seed N                seed for oscillators, offsets and noise (default: from the time)
  --help
Each host i serves its clock scheme at DIR/host<i>/ptp.sock; try
  cargo run --release -- ptpctl --socket DIR/host1/ptp.sock status
";

/// Everything that shapes a lab.
#[derive(Debug, Clone, PartialEq)]
pub struct LabConfig {
    pub hosts: u32,
    pub nic: String,
    pub transport: String,
    pub delay_mechanism: String,
    pub sync_interval: i8,
    pub cable_delay_ns: u64,
    pub asymmetry_ns: i64,
    pub cable_jitter_ns: u64,
    pub loss: f64,
    pub quantum_ns: u32,
    pub stamp_jitter_ns: u32,
    pub ppm_spread: f64,
    pub initial_offset_ms: f64,
    pub seed: u64,
    /// Extra top-level lines for every host's ptpd.toml.
    pub extra_ptpd: String,
}

impl Default for LabConfig {
    fn default() -> Self {
        Self {
            hosts: 2,
            nic: "i225".into(),
            transport: "L2".into(),
            delay_mechanism: "E2E".into(),
            sync_interval: -3,
            cable_delay_ns: 50,
            asymmetry_ns: 0,
            cable_jitter_ns: 0,
            loss: 0.0,
            quantum_ns: 8,
            stamp_jitter_ns: 0,
            ppm_spread: 40.0,
            initial_offset_ms: 1.0,
            seed: ptp_ipc::time::realtime_ns(),
            extra_ptpd: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LabOptions {
    pub lab: LabConfig,
    pub duration: Option<Duration>,
    pub runtime_dir: Option<PathBuf>,
    pub json: bool,
    pub plot: Option<PathBuf>,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<LabOptions>, String> {
    use lexopt::prelude::*;
    let bad = |e: lexopt::Error| e.to_string();
    let mut o = LabOptions {
        lab: LabConfig::default(),
        duration: None,
        runtime_dir: None,
        json: false,
        plot: None,
    };
    let mut p = lexopt::Parser::from_args(args);
    macro_rules! val {
        () => {
            p.value().map_err(bad)?.parse().map_err(bad)?
        };
    }
    while let Some(arg) = p.next().map_err(bad)? {
        let l = &mut o.lab;
        match arg {
            Long("hosts") => l.hosts = val!(),
            Long("duration") => {
                let s: f64 = val!();
                if !(s.is_finite() && s > 0.0 && s < 1e7) {
                    return Err("--duration must be a positive number of seconds".into());
                }
                o.duration = Some(Duration::from_secs_f64(s));
            }
            Long("runtime-dir") => o.runtime_dir = Some(p.value().map_err(bad)?.into()),
            Long("nic") => l.nic = val!(),
            Long("json") => o.json = true,
            Long("plot") => o.plot = Some(p.value().map_err(bad)?.into()),
            Long("transport") => l.transport = val!(),
            Long("delay-mechanism") => l.delay_mechanism = val!(),
            Long("sync-interval") => l.sync_interval = val!(),
            Long("cable-delay-ns") => l.cable_delay_ns = val!(),
            Long("asymmetry-ns") => l.asymmetry_ns = val!(),
            Long("cable-jitter-ns") => l.cable_jitter_ns = val!(),
            Long("loss") => l.loss = val!(),
            Long("quantum-ns") => l.quantum_ns = val!(),
            Long("stamp-jitter-ns") => l.stamp_jitter_ns = val!(),
            Long("ppm-spread") => l.ppm_spread = val!(),
            Long("initial-offset-ms") => l.initial_offset_ms = val!(),
            Long("seed") => l.seed = val!(),
            Long("help") | Short('h') => return Ok(None),
            _ => return Err(bad(arg.unexpected())),
        }
    }
    o.lab.validate()?;
    Ok(Some(o))
}

impl LabConfig {
    pub fn validate(&self) -> Result<(), String> {
        let l = self;
        if !(1..=16).contains(&l.hosts) {
            return Err("--hosts must be within 1..=16".into());
        }
        if !matches!(l.nic.as_str(), "i225" | "i226") {
            return Err(format!("unknown NIC {:?} (i225 or i226)", l.nic));
        }
        if !matches!(l.transport.as_str(), "L2" | "UDPv4") {
            return Err("--transport must be L2 or UDPv4".into());
        }
        if !matches!(l.delay_mechanism.as_str(), "E2E" | "P2P") {
            return Err("--delay-mechanism must be E2E or P2P".into());
        }
        if !(-7..=4).contains(&l.sync_interval) {
            return Err("--sync-interval must be within -7..=4".into());
        }
        if l.asymmetry_ns.unsigned_abs() / 2 > l.cable_delay_ns {
            return Err("|--asymmetry-ns| / 2 must not exceed --cable-delay-ns".into());
        }
        if !(0.0..1.0).contains(&l.loss) {
            return Err("--loss must be within [0, 1)".into());
        }
        if !(0.0..=1000.0).contains(&l.ppm_spread) || !(0.0..=1000.0).contains(&l.initial_offset_ms)
        {
            return Err("--ppm-spread and --initial-offset-ms must be within 0..=1000".into());
        }
        Ok(())
    }

    /// The peer of host `i` on its cable, if any.
    pub fn peer(&self, i: u32) -> Option<u32> {
        let p = i ^ 1;
        (p < self.hosts).then_some(p)
    }
}

/// splitmix64: the lab's deterministic randomness (oscillators, offsets, per-host seeds).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // Safety: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let opts = match parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ptplab: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    install_signal_handlers();
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ptplab: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A runtime directory that is removed at exit if the lab created it.
pub struct RuntimeDir {
    pub path: PathBuf,
    owned: bool,
}

impl RuntimeDir {
    pub fn new(explicit: Option<&Path>) -> Result<Self, String> {
        match explicit {
            Some(p) => {
                std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
                Ok(Self {
                    path: p.to_owned(),
                    owned: false,
                })
            }
            None => {
                let base = std::env::temp_dir();
                for i in 0..100u32 {
                    let p = base.join(format!(
                        "ptplab-{}-{}",
                        std::process::id(),
                        (ptp_ipc::time::mono_ns() as u32).wrapping_add(i)
                    ));
                    if std::fs::create_dir(&p).is_ok() {
                        return Ok(Self {
                            path: p,
                            owned: true,
                        });
                    }
                }
                Err("cannot create a runtime directory".into())
            }
        }
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Paths of one host.
pub struct HostPaths {
    pub dir: PathBuf,
    pub channel: PathBuf,
    pub clock_page: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
}

impl HostPaths {
    pub fn new(root: &Path, i: u32) -> Self {
        let dir = root.join(format!("host{i}"));
        Self {
            channel: dir.join("igc0.sock"),
            clock_page: dir.join("clock0.page"),
            config: dir.join("ptpd.toml"),
            socket: dir.join("ptp.sock"),
            dir,
        }
    }
}

/// Opens a log file for a child's output (appending, so a restarted daemon keeps the history).
fn log_file(p: &Path) -> Result<Stdio, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map(Stdio::from)
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// Starts igcd for host `i` on an emulated `nic` whose oscillator is `osc_ppm` off, with
/// `extra` igcd arguments (the wire, noise).
pub fn spawn_igcd(
    kids: &mut Children,
    exe: &Path,
    paths: &HostPaths,
    i: u32,
    nic: &str,
    osc_ppm: f64,
    extra: &[String],
) -> Result<u32, String> {
    std::fs::create_dir_all(&paths.dir).map_err(|e| format!("{}: {e}", paths.dir.display()))?;
    let log = paths.dir.join("igcd.log");
    let mut igcd = Command::new(exe);
    igcd.arg("igcd")
        .args(["--emulate", nic, "--name", &format!("host{i}")])
        .arg("--channel")
        .arg(&paths.channel)
        .arg("--clock-page")
        .arg(&paths.clock_page)
        .args(["--osc-ppm", &osc_ppm.to_string()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log_file(&log)?)
        .stderr(log_file(&log)?);
    kids.spawn(&format!("host{i}/igcd"), igcd)
        .map_err(|e| format!("starting igcd: {e}"))
}

/// Writes host `i`'s ptpd config (`extra` TOML goes at the top level, before any table) and
/// starts ptpd.
pub fn spawn_ptpd(
    kids: &mut Children,
    exe: &Path,
    paths: &HostPaths,
    i: u32,
    extra: &str,
) -> Result<u32, String> {
    std::fs::create_dir_all(&paths.dir).map_err(|e| format!("{}: {e}", paths.dir.display()))?;
    let config = format!(
        "socket = {:?}\n{extra}\n[[clock]]\nname = \"igc0\"\nchannel = {:?}\n",
        paths.socket.display().to_string(),
        paths.channel.display().to_string()
    );
    std::fs::write(&paths.config, config)
        .map_err(|e| format!("{}: {e}", paths.config.display()))?;
    let log = paths.dir.join("ptpd.log");
    let mut ptpd = Command::new(exe);
    ptpd.arg("ptpd")
        .arg("-f")
        .arg(&paths.config)
        .stdin(Stdio::null())
        .stdout(log_file(&log)?)
        .stderr(log_file(&log)?);
    kids.spawn(&format!("host{i}/ptpd"), ptpd)
        .map_err(|e| format!("starting ptpd: {e}"))
}

/// Waits (bounded) until host's ptpd answers and its driver is connected.
pub fn wait_ready(paths: &HostPaths, timeout: Duration) -> Result<Client, String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline && !STOP.load(Ordering::SeqCst) {
        match Client::connect(&paths.socket).and_then(|c| c.status(0).map(|s| (c, s))) {
            Ok((c, s)) if s.driver_up => return Ok(c),
            Ok(_) => last = "driver not connected yet".into(),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("{} not ready: {last}", paths.dir.display()))
}

fn wait_for_file(p: &Path, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while !p.exists() {
        if Instant::now() > deadline {
            return Err(format!("{} did not appear", p.display()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A running lab.
pub struct Lab {
    pub cfg: LabConfig,
    pub hosts: Vec<HostPaths>,
    pub clients: Vec<Option<Client>>,
    /// Each host's oscillator error (ppm) and initial offset (ns).
    pub osc_ppm: Vec<f64>,
    exe: PathBuf,
    kids: Children,
    pub rt: RuntimeDir,
}

impl Lab {
    /// Starts every host, waits until each is ready, and sets the initial clock offsets.
    pub fn start(cfg: LabConfig, exe: &Path, dir: Option<&Path>) -> Result<Self, String> {
        cfg.validate()?;
        let rt = RuntimeDir::new(dir)?;
        let hosts: Vec<HostPaths> = (0..cfg.hosts)
            .map(|i| HostPaths::new(&rt.path, i))
            .collect();
        let mut rng = Rng::new(cfg.seed);
        let osc_ppm = (0..cfg.hosts)
            .map(|_| rng.unit() * cfg.ppm_spread / 2.0)
            .collect();
        let mut lab = Self {
            cfg,
            hosts,
            clients: Vec::new(),
            osc_ppm,
            exe: exe.to_owned(),
            kids: Children::default(),
            rt,
        };
        for i in 0..lab.cfg.hosts {
            lab.start_igcd(i)?;
            lab.spawn_ptpd(i)?;
        }
        for h in &lab.hosts {
            lab.clients
                .push(Some(wait_ready(h, Duration::from_secs(15))?));
        }
        // Clocks start apart by up to ±initial_offset_ms (through the real path: ptpctl adj).
        for (i, c) in lab.clients.iter().enumerate() {
            let off = (rng.unit() * lab.cfg.initial_offset_ms * 1e6) as i64;
            if i > 0 || lab.cfg.hosts == 1 {
                c.as_ref()
                    .expect("started")
                    .adj(0, off)
                    .map_err(|e| format!("host{i}: initial offset: {e}"))?;
            }
        }
        Ok(lab)
    }

    fn wire_path(&self, i: u32) -> PathBuf {
        self.rt.path.join(format!("wire{}.sock", i / 2))
    }

    /// The igcd arguments of host `i`: its end of the cable and the noise.
    fn igcd_args(&self, i: u32) -> Vec<String> {
        let c = &self.cfg;
        let mut a = Vec::new();
        if c.peer(i).is_some() {
            let w = self.wire_path(i).display().to_string();
            a.push("--wire".into());
            a.push(if i % 2 == 0 {
                format!("bind:{w}")
            } else {
                format!("connect:{w}")
            });
            // Each end delays what it receives: the master's peer (odd host) receives the
            // longer direction.
            let half = c.asymmetry_ns / 2;
            let delay = if i % 2 == 1 {
                c.cable_delay_ns as i64 + half
            } else {
                c.cable_delay_ns as i64 - (c.asymmetry_ns - half)
            };
            a.extend(["--cable-delay-ns".into(), delay.max(0).to_string()]);
            if c.cable_jitter_ns > 0 {
                a.extend(["--cable-jitter-ns".into(), c.cable_jitter_ns.to_string()]);
            }
            if c.loss > 0.0 {
                a.extend(["--cable-loss".into(), c.loss.to_string()]);
            }
        } else {
            a.extend(["--wire".into(), "none".into()]);
        }
        a.extend(["--stamp-quantum-ns".into(), c.quantum_ns.to_string()]);
        if c.stamp_jitter_ns > 0 {
            a.extend(["--stamp-jitter-ns".into(), c.stamp_jitter_ns.to_string()]);
        }
        a.extend([
            "--seed".into(),
            (c.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9)).to_string(),
        ]);
        a
    }

    /// Starts (or restarts) host `i`'s igcd. The bound end of a cable must exist before the
    /// connecting end starts.
    pub fn start_igcd(&mut self, i: u32) -> Result<(), String> {
        let args = self.igcd_args(i);
        let (nic, osc) = (self.cfg.nic.clone(), self.osc_ppm[i as usize]);
        if i % 2 == 1 {
            wait_for_file(&self.wire_path(i), Duration::from_secs(10))?;
        }
        spawn_igcd(
            &mut self.kids,
            &self.exe,
            &self.hosts[i as usize],
            i,
            &nic,
            osc,
            &args,
        )?;
        if i % 2 == 0 && self.cfg.peer(i).is_some() {
            wait_for_file(&self.wire_path(i), Duration::from_secs(10))?;
        }
        Ok(())
    }

    fn ptpd_config(&self, i: u32) -> String {
        let c = &self.cfg;
        // Root may always steer; the lab's own uid too, so a non-root lab can set offsets.
        // Safety: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        if c.peer(i).is_none() && c.hosts == 1 {
            return format!("privileged_uids = [{uid}]\n{}", c.extra_ptpd);
        }
        format!(
            "privileged_uids = [{uid}]\n{}\n[ptp]\npriority1 = {}\nlogSyncInterval = {}\nlogMinDelayReqInterval = {}\nlogMinPdelayReqInterval = {}\nlogAnnounceInterval = -1\nannounceReceiptTimeout = 3\nnetwork_transport = {:?}\ndelay_mechanism = {:?}\nsummary_interval = 0\n",
            c.extra_ptpd,
            if i % 2 == 0 { 100 } else { 128 },
            c.sync_interval,
            c.sync_interval,
            c.sync_interval,
            c.transport,
            c.delay_mechanism
        )
    }

    fn spawn_ptpd(&mut self, i: u32) -> Result<(), String> {
        let conf = self.ptpd_config(i);
        spawn_ptpd(&mut self.kids, &self.exe, &self.hosts[i as usize], i, &conf)?;
        Ok(())
    }

    /// Stops host `i` (ptpd and igcd).
    pub fn stop_host(&mut self, i: u32) {
        self.clients[i as usize] = None;
        self.kids.stop(&format!("host{i}/ptpd"));
        self.kids.stop(&format!("host{i}/igcd"));
    }

    /// Starts host `i` again after [`Self::stop_host`].
    pub fn restart_host(&mut self, i: u32) -> Result<(), String> {
        self.start_igcd(i)?;
        self.spawn_ptpd(i)?;
        self.clients[i as usize] = Some(wait_ready(
            &self.hosts[i as usize],
            Duration::from_secs(15),
        )?);
        Ok(())
    }

    pub fn status(&self, i: u32) -> Result<ClockStatus, String> {
        let c = self.clients[i as usize].as_ref().ok_or("host stopped")?;
        c.status(0).map_err(|e| e.to_string())
    }

    /// PHC(i) − PHC(j), in ns, and its uncertainty: both emulated PHCs run on this host's
    /// clock, so bracketing a read of each with CLOCK_REALTIME (gettimex, the exact path) gives
    /// the ground truth to within the two brackets.
    pub fn true_offset(&self, i: u32, j: u32) -> Result<(i64, u64), String> {
        let read = |k: u32| -> Result<(i128, u64), String> {
            let c = self.clients[k as usize].as_ref().ok_or("host stopped")?;
            let s = c.gettimex(0, 25).map_err(|e| format!("host{k}: {e}"))?;
            let b = s
                .iter()
                .min_by_key(|s| s.sys_after_ns - s.sys_before_ns)
                .ok_or("no samples")?;
            let mid = (b.sys_before_ns as i128 + b.sys_after_ns as i128) / 2;
            Ok((
                b.phc_ns as i128 - mid,
                (b.sys_after_ns - b.sys_before_ns) / 2,
            ))
        };
        let ((a, ea), (b, eb)) = (read(i)?, read(j)?);
        Ok(((a - b) as i64, ea + eb))
    }

    /// Names and exit statuses of daemons that died.
    pub fn exited(&mut self) -> Vec<(String, std::process::ExitStatus)> {
        self.kids.exited()
    }

    pub fn logs(&self) -> String {
        let mut s = String::new();
        for h in &self.hosts {
            for f in ["igcd.log", "ptpd.log"] {
                s += &format!(
                    "--- {}/{f}\n{}",
                    h.dir.display(),
                    std::fs::read_to_string(h.dir.join(f)).unwrap_or_default()
                );
            }
        }
        s
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.clients.clear();
        self.kids.stop_all();
    }
}

/// Per-host figures for the summary.
#[derive(Debug, Default, Clone)]
pub struct HostTrace {
    pub points: Vec<(f64, ClockStatus)>,
}

/// A slave is locked once its offset stays within this for the rest of the run.
pub const LOCK_NS: i64 = 100;

impl HostTrace {
    /// When this host, a SLAVE, came within ±[`LOCK_NS`] of its master and stayed there for the
    /// rest of the run (None if it never did, or is not a slave at the end).
    pub fn lock_time(&self) -> Option<f64> {
        let locked =
            |s: &ClockStatus| s.port_state == PortState::Slave && s.offset_ns.abs() <= LOCK_NS;
        if !self.points.last().is_some_and(|(_, s)| locked(s)) {
            return None;
        }
        let first_bad = self.points.iter().rposition(|(_, s)| !locked(s));
        match first_bad {
            Some(k) => self.points.get(k + 1).map(|p| p.0),
            None => self.points.first().map(|p| p.0),
        }
    }

    /// rms and max |offset| over the samples from `t0` on, if the host was SLAVE throughout.
    pub fn since(&self, t0: f64) -> Option<(f64, i64)> {
        let v: Vec<&ClockStatus> = self
            .points
            .iter()
            .filter(|(t, _)| *t >= t0)
            .map(|p| &p.1)
            .collect();
        if v.is_empty() || v.iter().any(|s| s.port_state != PortState::Slave) {
            return None;
        }
        let rms =
            (v.iter().map(|s| (s.offset_ns as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        Some((rms, v.iter().map(|s| s.offset_ns.abs()).max().unwrap_or(0)))
    }

    /// rms and max |offset| over the samples after lock.
    pub fn after_lock(&self) -> Option<(f64, i64)> {
        self.since(self.lock_time()?)
    }
}

fn run(opts: &LabOptions) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let mut lab = Lab::start(opts.lab.clone(), &exe, opts.runtime_dir.as_deref())?;
    if !opts.json {
        println!(
            "ptplab: {} host(s) in {} (seed {})",
            lab.hosts.len(),
            lab.rt.path.display(),
            lab.cfg.seed
        );
        for (i, h) in lab.hosts.iter().enumerate() {
            let caps = lab.clients[i]
                .as_ref()
                .expect("started")
                .caps(0)
                .map_err(|e| e.to_string())?;
            println!(
                "  host{i}: {} oscillator {:+.1} ppm — clock scheme {}",
                caps.part,
                lab.osc_ppm[i],
                h.socket.display()
            );
        }
        if lab.rt.owned {
            println!("  (the runtime directory is removed at exit; --runtime-dir keeps it)");
        }
    }
    let start = Instant::now();
    let mut traces = vec![HostTrace::default(); lab.hosts.len()];
    let mut next_print = start;
    while !STOP.load(Ordering::SeqCst) {
        if let Some(d) = opts.duration
            && start.elapsed() >= d
        {
            break;
        }
        if let Some((name, status)) = lab.exited().into_iter().next() {
            return Err(format!(
                "{name} exited unexpectedly ({status}); logs in {}",
                lab.rt.path.display()
            ));
        }
        let t = start.elapsed().as_secs_f64();
        // Sample every 100 ms, print every second.
        for (i, tr) in traces.iter_mut().enumerate() {
            if let Ok(s) = lab.status(i as u32) {
                tr.points.push((t, s));
            }
        }
        if Instant::now() >= next_print {
            next_print += Duration::from_secs(1);
            for (i, tr) in traces.iter().enumerate() {
                let Some((_, s)) = tr.points.last() else {
                    continue;
                };
                if opts.json {
                    println!(
                        "{}",
                        json!({"t": (t * 10.0).round() / 10.0, "host": i, "state": s.port_state.name(),
                            "offset_ns": s.offset_ns, "freq_ppb": s.freq_scaled_ppm as f64 / 65.536,
                            "mean_path_delay_ns": s.mean_path_delay_ns, "driver_up": s.driver_up,
                            "link_up": s.link_up})
                    );
                } else {
                    println!(
                        "[{t:6.1}s] host{i}: {:<12} offset {:>10} ns  freq {:>+10.1} ppb  path delay {:>6} ns",
                        s.port_state.name(),
                        s.offset_ns,
                        s.freq_scaled_ppm as f64 / 65.536,
                        s.mean_path_delay_ns
                    );
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut summary = Vec::new();
    for (i, tr) in traces.iter().enumerate() {
        let last = tr.points.last().map(|p| p.1.clone()).unwrap_or_default();
        let is_slave = last.port_state == PortState::Slave;
        let (rms, max) = tr.after_lock().unzip();
        // Steady state: the second half of the run (the Kalman filter's settling excluded).
        let (rms2, max2) = tr.since(elapsed / 2.0).unzip();
        let truth = lab
            .cfg
            .peer(i as u32)
            .filter(|_| is_slave)
            .and_then(|p| lab.true_offset(i as u32, p).ok());
        let (truth, truth_err) = truth.unzip();
        summary.push(json!({"host": i, "state": last.port_state.name(),
            "offset_rms_ns": rms, "offset_max_abs_ns": max, "lock_time_s": tr.lock_time(),
            "offset_rms_second_half_ns": rms2, "offset_max_abs_second_half_ns": max2,
            "mean_path_delay_ns": is_slave.then_some(last.mean_path_delay_ns),
            "freq_ppb": last.freq_scaled_ppm as f64 / 65.536,
            "oscillator_ppm": lab.osc_ppm[i], "true_offset_ns": truth,
            "true_offset_uncertainty_ns": truth_err}));
    }
    if opts.json {
        println!(
            "{}",
            json!({"summary": true, "duration_s": elapsed, "seed": lab.cfg.seed, "hosts": summary})
        );
    } else {
        println!(
            "ptplab: summary after {elapsed:.1} s (seed {})",
            lab.cfg.seed
        );
        for s in &summary {
            println!("  {s}");
        }
    }
    if let Some(p) = &opts.plot {
        let series: Vec<crate::plot::Series> = traces
            .iter()
            .enumerate()
            .filter(|(_, tr)| {
                tr.points
                    .iter()
                    .any(|(_, s)| s.port_state == PortState::Slave)
            })
            .map(|(i, tr)| crate::plot::Series {
                name: format!("host{i}"),
                points: tr
                    .points
                    .iter()
                    .filter(|(_, s)| {
                        matches!(s.port_state, PortState::Slave | PortState::Uncalibrated)
                    })
                    .map(|(t, s)| (*t, s.offset_ns as f64, s.freq_scaled_ppm as f64 / 65.536))
                    .collect(),
            })
            .collect();
        let title = format!(
            "ptplab: {} hosts, {} {}, sync 2^{} s, seed {}",
            lab.cfg.hosts,
            lab.cfg.transport,
            lab.cfg.delay_mechanism,
            lab.cfg.sync_interval,
            lab.cfg.seed
        );
        std::fs::write(p, crate::plot::render(&title, &series))
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if !opts.json {
            println!("ptplab: plot written to {}", p.display());
        }
    }
    Ok(())
}
