//! ptplab: starts emulated hosts as real processes — a driver daemon on an emulated NIC (igcd
//! for i225/i226, igbd for i210/i211/i350/82576: `--nic LIST`, one per host) and ptpd per host,
//! hosts joined pairwise by an emulated cable — shows live status, prints a summary, and stops
//! everything on exit or signal. Every host is judged on its ground-truth record, which for
//! every family is the clock ptpd reads (`ptp_emu::truth`: SYSTIM, or igbd's timecounter over
//! it on i350/82576).
//!
//! Layout: `DIR/host<i>/` holds `igc0.sock` (driver channel, whatever the family), `clock0.page`
//! (clock page),
//! `truth` (the emulated PHC's ground-truth record, `ptp_emu::truth`), `ptpd.toml`, `ptp.sock`
//! (the clock scheme) and the daemons' logs; `DIR/wire<k>.sock` is the
//! cable of pair k (hosts 2k and 2k+1).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ptp_emu::truth::{TruthReader, TruthSnapshot, true_offset};
use ptp_ipc::{ClockStatus, PortState, TimeXSample};
use ptpd::client::Client;
use serde_json::json;

use crate::figures::{Figures, Sample, Source};
use crate::procs::Children;
use crate::signals::{StopFlag, stop_flag, stop_on_interrupt};

pub mod gps;
mod guest;
pub mod scenario;
mod supervise;
pub use guest::GuestHost;
pub use supervise::{Restart, Supervisor};

pub const USAGE: &str = "\
usage: ptplab [options]          (cargo run --release -- [options])
Starts emulated hosts (a driver daemon + ptpd each, real processes), hosts 2k and 2k+1 joined
by a cable, host 2k the better master (priority1), and runs PTP between them.
  --hosts N               hosts (default 2; 1 = a single clock, no PTP peer)
  --duration SECS         run SECS seconds, then print the summary (default: until Ctrl-C)
  --runtime-dir DIR       where sockets, clock pages and logs go (default: a fresh temporary
                          directory, removed at exit)
  --nic LIST              emulated NIC per host, comma-separated, the last one repeated
                          (default i225): i225|i226 run igcd, i210|i211|i350|82576 run igbd;
                          e.g. --hosts 4 --nic i225,i210,i225,82576
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
  --gps                   host 0 is a grandmaster disciplined to a lab GPS receiver on its SDP0
                          (ptplab gps; ptpd's [clock.ts2phc]); every PHC is also judged against
                          true time, and the last host's 1 PPS out against the true second
                          (i225, i226, i210 or i211 on host 0)
  --faults                each igcd host serves fault injection into its emulated NIC at
                          DIR/host<i>/faults.sock (igcd --emu-faults: drop-tx-stamps N,
                          stick-txtt SET, clear-txtt SET, drop-ts-irqs N, link down|up, stats)
  --tap NETNS             with --hosts 1: host0's cable ends in a TAP device, tap0, inside the
                          existing network namespace NETNS (root only; `ptplab tap-bridge`),
                          for Linux software such as ptp4l -S; with --transport UDPv4 the TAP
                          is 10.213.0.1/24 and host0 sends from 10.213.0.2. The true offset
                          of host0 is then PHC − CLOCK_REALTIME (the clock of ptp4l -S)
  --linux-igc I           host I is a Linux guest instead: the kernel's igc driver and ptp4l -H
                          in a QEMU VM whose NIC is the same emulated i225 on the same cable
                          (repeatable; needs qemu-system-x86 7.2, linux-image-amd64,
                          busybox-static, linuxptp, ethtool)
  --rt                    real-time service for every daemon's time path (igcd/igbd --rt, ptpd
                          rt = true): SCHED_FIFO 50; refused: each daemon logs it
  --rt-priority PRIO      --rt at PRIO (1..=98)
  --cpu N                 pin every daemon's time-path threads to CPU N
  --busy-poll-us US       both ends of every driver ring poll US µs after each message before
                          sleeping (igcd/igbd --busy-poll-us, ptpd busy_poll_us; default 0)
  --tx-inline-us US|off   the thread that sends a stamped frame looks for its stamp itself for
                          up to US µs before leaving it to the IRQ thread (igcd/igbd
                          --tx-inline-us; default 0: one look); off: the IRQ thread takes all
  --nic-process           each igcd host's NIC runs in a device host of its own (ptplab devhost
                          --listen; igcd --devhost), so it outlives igcd: a restarted igcd
                          finds its PHC running and keeps it (warm attach)
  --ptpd-servo pi|kalman  every ptpd's clock_servo (default: ptpd's, pi)
  --scenario NAME         a servo scenario: its options (options after it win) and at most one
                          disturbance at 20 s; runs 40 s unless --duration; the summary adds
                          each slave's true lock, steady state and excursion (docs/servo.md):
                          start-1us start-1ms start-1s ppm-100 asymmetry-20us loss-1pct
                          loss-10pct jitter-500ns link-flap driver-restart ptpd-restart gm-change
  --help
A driver or ptpd that dies is restarted after 100 ms, doubling to 5 s, and the lab stops
after 5 restarts of one daemon within 30 s (any other child's death stops it at once).
Each host i serves its clock scheme at DIR/host<i>/ptp.sock; try
  cargo run --release -- ptpctl --socket DIR/host1/ptp.sock status
";

/// Everything that shapes a lab.
#[derive(Debug, Clone, PartialEq)]
pub struct LabConfig {
    pub hosts: u32,
    /// The emulated NIC of each host, comma-separated; the last one is repeated (`--nic`).
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
    /// ptpd's `clock_servo` (`--ptpd-servo`); `None`: ptpd's default.
    pub ptpd_servo: Option<String>,
    /// Hosts that are Linux guests (igc + ptp4l -H in a VM) instead of igcd + ptpd.
    pub linux_igc: Vec<u32>,
    /// A network namespace whose TAP device `tap0` host 0's cable ends in (`--tap`).
    pub tap: Option<String>,
    /// announceReceiptTimeout of every ptpd (default 3): a lossy cable loses that many
    /// Announces in a row now and then, and the slave then takes over as master.
    pub announce_receipt_timeout: u8,
    /// Each igcd host serves fault injection into its emulated NIC at `host<i>/faults.sock`
    /// (`--emu-faults`; [`Lab::fault`]).
    pub faults: bool,
    /// Each igcd host's NIC in a device host of its own (`--nic-process`).
    pub nic_process: bool,
    /// Real-time service for every daemon's time path (`--rt`, `--rt-priority`, `--cpu`).
    pub rt: ptp_ipc::rt::RtConfig,
    /// The busy-poll window of both ends of every driver ring (`--busy-poll-us`), µs.
    pub busy_poll_us: u64,
    /// How long the thread that posts a stamped frame looks for its stamp itself, µs
    /// (igcd/igbd `--tx-inline-us`); `None`: every stamp is the IRQ thread's.
    pub tx_inline_us: Option<u64>,
    /// Host 0 follows a lab GPS receiver (`--gps`, [`gps`]).
    pub gps: bool,
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
            ptpd_servo: None,
            linux_igc: Vec::new(),
            tap: None,
            announce_receipt_timeout: 3,
            faults: false,
            nic_process: false,
            rt: ptp_ipc::rt::RtConfig::default(),
            busy_poll_us: 0,
            tx_inline_us: Some(0),
            gps: false,
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
    /// `--scenario NAME` (its options are applied where it stands on the command line).
    pub scenario: Option<&'static scenario::Scenario>,
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
        scenario: None,
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
            Long("linux-igc") => l.linux_igc.push(val!()),
            Long("tap") => l.tap = Some(val!()),
            Long("faults") => l.faults = true,
            Long("gps") => l.gps = true,
            Long("ptpd-servo") => {
                let v: String = val!();
                if !matches!(v.as_str(), "pi" | "kalman") {
                    return Err(format!("--ptpd-servo {v}: pi or kalman"));
                }
                l.ptpd_servo = Some(v);
            }
            Long("nic-process") => l.nic_process = true,
            Long("rt") => {
                l.rt.priority.get_or_insert(ptp_ipc::rt::DEFAULT_PRIORITY);
            }
            Long("rt-priority") => {
                let v: String = val!();
                l.rt.priority = Some(ptp_ipc::rt::parse_priority(&v)?);
            }
            Long("cpu") => l.rt.cpu = Some(val!()),
            Long("busy-poll-us") => {
                l.busy_poll_us = val!();
                if l.busy_poll_us > 1000 {
                    return Err("--busy-poll-us must be 0..=1000".into());
                }
            }
            Long("tx-inline-us") => {
                let v: String = val!();
                l.tx_inline_us = intel_common::daemon::options::parse_tx_inline(&v)?
                    .map(|d| d.as_micros() as u64);
            }
            Long("scenario") => {
                let name: String = val!();
                let sc = scenario::find(&name)?;
                sc.apply(l);
                o.scenario = Some(sc);
            }
            Long("help") | Short('h') => return Ok(None),
            _ => return Err(bad(arg.unexpected())),
        }
    }
    o.lab.validate()?;
    if let Some(sc) = o.scenario {
        sc.check(&o.lab)?;
        o.duration.get_or_insert_with(scenario::default_duration);
    }
    Ok(Some(o))
}

impl LabConfig {
    pub fn validate(&self) -> Result<(), String> {
        let l = self;
        if !(1..=16).contains(&l.hosts) {
            return Err("--hosts must be within 1..=16".into());
        }
        if l.linux_igc.iter().any(|&i| i >= l.hosts) {
            return Err("--linux-igc names a host beyond --hosts".into());
        }
        if let Some(ns) = &l.tap {
            if l.hosts != 1 || !l.linux_igc.is_empty() {
                return Err("--tap needs --hosts 1 (and no --linux-igc)".into());
            }
            if !crate::tap::valid_ifname(ns) {
                return Err(format!("--tap {ns:?}: not a namespace name"));
            }
        }
        for n in l.nic.split(',') {
            if driver_for(n).is_none() {
                return Err(format!(
                    "unknown NIC {n:?} in --nic (i225, i226, i210, i211, i350 or 82576)"
                ));
            }
        }
        if let Some(&i) = l
            .linux_igc
            .iter()
            .find(|&&i| driver_for(l.nic_of(i)) != Some("igcd"))
        {
            return Err(format!(
                "--linux-igc {i}: host{i}'s NIC is {}, the guest's igc needs i225 or i226",
                l.nic_of(i)
            ));
        }
        if let Some(i) = (0..l.hosts).find(|&i| l.nic_process && l.driver_of(i) != "igcd") {
            return Err(format!(
                "--nic-process: host{i}'s NIC is {}; the device host serves i225/i226 only",
                l.nic_of(i)
            ));
        }
        if l.gps
            && (l.linux_igc.contains(&0)
                || !matches!(l.nic_of(0), "i225" | "i226" | "i210" | "i211"))
        {
            return Err(format!(
                "--gps: host0's NIC is {}; its pins are served on i225, i226, i210 and i211",
                l.nic_of(0)
            ));
        }
        if l.faults && l.nic_process {
            // The fault socket lives in the process that holds the model; with --nic-process
            // that is the device host, which does not serve one.
            return Err("--faults and --nic-process cannot be combined yet".into());
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

    /// Host `i`'s emulated NIC: the `i`-th of `--nic`, or its last.
    pub fn nic_of(&self, i: u32) -> &str {
        let mut it = self.nic.split(',');
        let last = self.nic.rsplit(',').next().unwrap_or("");
        it.nth(i as usize).unwrap_or(last)
    }

    /// The daemon host `i` runs (`igcd` or `igbd`).
    pub fn driver_of(&self, i: u32) -> &'static str {
        driver_for(self.nic_of(i)).unwrap_or("igcd")
    }

    /// The peer of host `i` on its cable, if any.
    pub fn peer(&self, i: u32) -> Option<u32> {
        let p = i ^ 1;
        (p < self.hosts).then_some(p)
    }

    /// Whether host `i` has a cable (to a peer host or, with `--tap`, to the TAP bridge).
    pub fn cabled(&self, i: u32) -> bool {
        self.peer(i).is_some() || (i == 0 && self.tap.is_some())
    }
}

/// The driver daemon for an emulated NIC name (from the daemons' own `--emulate` lists),
/// `None` if there is no model of it.
pub use tsperf::driver::daemon_for as driver_for;

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

static STOP: StopFlag = stop_flag();

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
    if let Err(code) = stop_on_interrupt("ptplab", &STOP) {
        return code;
    }
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ptplab: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Creates directory `p` (and its parents) and gives it mode 0755 whatever the umask (issue 23:
/// under umask 000 the lab's directories were 0777, so anyone could plant a file or symlink
/// where a daemon binds a socket or writes its log). Other users may still reach the sockets
/// inside, whose own modes and peer checks decide who may use them.
pub fn lab_dir(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .and_then(|()| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)))
        .map_err(|e| format!("{}: {e}", p.display()))
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
                lab_dir(p)?;
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
                    let made = std::fs::create_dir(&p).is_ok();
                    if made {
                        lab_dir(&p)?;
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
    pub truth: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
}

impl HostPaths {
    pub fn new(root: &Path, i: u32) -> Self {
        let dir = root.join(format!("host{i}"));
        Self {
            channel: dir.join("igc0.sock"),
            clock_page: dir.join("clock0.page"),
            truth: dir.join("truth"),
            config: dir.join("ptpd.toml"),
            socket: dir.join("ptp.sock"),
            dir,
        }
    }
}

/// Writes a daemon's configuration file or a report: mode 0644 whatever the umask (under umask
/// 000 it was 0666, and anyone could rewrite ptpd's `privileged_uids` before a restart), never
/// through a symlink.
pub fn config_file(p: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let err = |e: std::io::Error| format!("{}: {e}", p.display());
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
        .map_err(err)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

/// Opens a log file for a child's output (appending, so a restarted daemon keeps the history):
/// mode 0644 whatever the umask, never through a symlink.
fn log_file(p: &Path) -> Result<Stdio, String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
        .map(Stdio::from)
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// Starts the driver daemon for host `i` (igcd or igbd, as [`driver_for`] says) on an emulated
/// `nic` whose oscillator is `osc_ppm` off, with `extra` daemon arguments (the wire, noise).
/// Its child name is `host<i>/<daemon>`, its log `<daemon>.log`.
pub fn spawn_igcd(
    kids: &mut Children,
    exe: &Path,
    paths: &HostPaths,
    i: u32,
    nic: &str,
    osc_ppm: f64,
    extra: &[String],
) -> Result<u32, String> {
    let daemon = driver_for(nic).ok_or_else(|| format!("no emulated NIC {nic:?}"))?;
    lab_dir(&paths.dir)?;
    let log = paths.dir.join(format!("{daemon}.log"));
    let mut igcd = Command::new(exe);
    igcd.arg(daemon)
        .args(["--emulate", nic, "--name", &format!("host{i}")])
        .arg("--channel")
        .arg(&paths.channel)
        .arg("--clock-page")
        .arg(&paths.clock_page)
        .arg("--truth")
        .arg(&paths.truth)
        .args(["--osc-ppm", &osc_ppm.to_string()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log_file(&log)?)
        .stderr(log_file(&log)?);
    kids.spawn(&format!("host{i}/{daemon}"), igcd)
        .map_err(|e| format!("starting {daemon}: {e}"))
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
    spawn_ptpd_with_clock(kids, exe, paths, i, extra, "")
}

/// [`spawn_ptpd`] with `clock_ptp` lines for the clock's own `[clock.ptp]` table (e.g. its
/// UDPv4 `source_ip`); none if empty.
pub fn spawn_ptpd_with_clock(
    kids: &mut Children,
    exe: &Path,
    paths: &HostPaths,
    i: u32,
    extra: &str,
    clock_ptp: &str,
) -> Result<u32, String> {
    let clock_ptp = if clock_ptp.is_empty() {
        String::new()
    } else {
        format!("[clock.ptp]\n{clock_ptp}\n")
    };
    spawn_ptpd_with_tables(kids, exe, paths, i, extra, &clock_ptp)
}

/// [`spawn_ptpd`] with `clock_tables`, TOML tables of the clock (`[clock.ptp]`,
/// `[clock.ts2phc]`) written after its `[[clock]]` entry as they are.
pub fn spawn_ptpd_with_tables(
    kids: &mut Children,
    exe: &Path,
    paths: &HostPaths,
    i: u32,
    extra: &str,
    clock_tables: &str,
) -> Result<u32, String> {
    lab_dir(&paths.dir)?;
    let config = format!(
        "socket = {:?}\n{extra}\n[[clock]]\nname = \"igc0\"\nchannel = {:?}\n{clock_tables}",
        paths.socket.display().to_string(),
        paths.channel.display().to_string()
    );
    config_file(&paths.config, &config)?;
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

/// Waits until the host is ready, then opens its ground-truth record (igcd creates it before
/// it serves ptpd, so it exists by now) and learns its clock identity.
fn ready_host(paths: &HostPaths) -> Result<(Client, TruthReader, [u8; 8]), String> {
    let client = wait_ready(paths, Duration::from_secs(15))?;
    let truth = TruthReader::open(&paths.truth).map_err(|e| format!("truth record: {e}"))?;
    truth.snapshot().map_err(|e| format!("truth record: {e}"))?;
    let mac = client
        .caps(0)
        .map_err(|e| format!("{}: caps: {e}", paths.dir.display()))?
        .mac;
    Ok((client, truth, ptpd::ptp::config::eui64_from_mac(mac)))
}

/// The narrowest usable gettimex bracket: (PHC − bracket midpoint, half-width), ns. Brackets
/// whose end precedes their start (CLOCK_REALTIME stepped back) are skipped, not subtracted.
pub fn best_bracket(samples: &[TimeXSample]) -> Option<(i128, u64)> {
    let s = TimeXSample::tightest(samples)?;
    Some((s.offset_ns(), s.bracket_ns()? / 2))
}

/// A running lab.
pub struct Lab {
    pub cfg: LabConfig,
    pub hosts: Vec<HostPaths>,
    pub clients: Vec<Option<Client>>,
    /// Each host's oscillator error (ppm).
    pub osc_ppm: Vec<f64>,
    /// Each running host's ground-truth record (`None` while the host is stopped).
    truth: Vec<Option<TruthReader>>,
    /// Each running host's PTP clock identity (EUI-64 of its MAC), to find a slave's
    /// grandmaster among the hosts.
    identities: Vec<Option<[u8; 8]>>,
    /// Hosts that are Linux guests (`--linux-igc`); `None` for igcd + ptpd hosts.
    guests: Vec<Option<GuestHost>>,
    exe: PathBuf,
    kids: Children,
    /// Restarts of daemons that died.
    pub supervisor: Supervisor,
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
            truth: Vec::new(),
            identities: Vec::new(),
            guests: Vec::new(),
            exe: exe.to_owned(),
            kids: Children::default(),
            supervisor: Supervisor::default(),
            rt,
        };
        for i in 0..lab.cfg.hosts {
            if lab.is_guest(i) {
                let g = lab.start_guest(i)?;
                lab.guests.push(Some(g));
            } else {
                lab.guests.push(None);
                lab.start_igcd(i)?;
                if i == 0 && lab.cfg.tap.is_some() {
                    lab.start_tap_bridge()?;
                }
                lab.spawn_ptpd(i)?;
            }
        }
        for i in 0..lab.cfg.hosts {
            let paths = &lab.hosts[i as usize];
            if let Some(g) = &lab.guests[i as usize] {
                let truth =
                    TruthReader::open(&paths.truth).map_err(|e| format!("truth record: {e}"))?;
                lab.clients.push(None);
                lab.truth.push(Some(truth));
                lab.identities.push(Some(g.identity));
                continue;
            }
            let (client, truth, id) = ready_host(paths)?;
            lab.clients.push(Some(client));
            lab.truth.push(Some(truth));
            lab.identities.push(Some(id));
        }
        // Clocks start apart by up to ±initial_offset_ms (through the real path: ptpctl adj,
        // or phc_ctl adj in a guest).
        for i in 0..lab.cfg.hosts as usize {
            let off = (rng.unit() * lab.cfg.initial_offset_ms * 1e6) as i64;
            if i > 0 || lab.cfg.hosts == 1 {
                let r = match (&lab.guests[i], &lab.clients[i]) {
                    (Some(g), _) => g.adj(off),
                    (None, Some(c)) => c.adj(0, off).map_err(|e| e.to_string()),
                    (None, None) => Err("not started".into()),
                };
                r.map_err(|e| format!("host{i}: initial offset: {e}"))?;
            }
        }
        Ok(lab)
    }

    /// Whether host `i` is a Linux guest (`--linux-igc`).
    pub fn is_guest(&self, i: u32) -> bool {
        self.cfg.linux_igc.contains(&i)
    }

    /// Boots host `i` as a Linux guest on its end of the cable, with the cable, noise and
    /// oscillator igcd would get; ptp4l takes the lab's PTP settings.
    fn start_guest(&mut self, i: u32) -> Result<GuestHost, String> {
        let c = &self.cfg;
        let mut args = self.igcd_args(i);
        args.extend([
            "--emulate".into(),
            c.nic_of(i).to_string(),
            "--name".into(),
            format!("host{i}"),
        ]);
        args.extend(["--osc-ppm".into(), self.osc_ppm[i as usize].to_string()]);
        let ptp4l = guest::Ptp4lArgs {
            priority1: if i % 2 == 0 { 100 } else { 128 },
            transport: &c.transport,
            delay_mechanism: &c.delay_mechanism,
            sync_interval: c.sync_interval,
            addr: format!("10.0.{}.{}/24", i / 2, i % 2 + 1),
        };
        if i % 2 == 1 {
            wait_for_file(&self.wire_path(i), Duration::from_secs(10))?;
        }
        let paths = &self.hosts[i as usize];
        lab_dir(&paths.dir)?;
        let g = GuestHost::start(&self.exe, paths, &args, &ptp4l)
            .map_err(|e| format!("host{i} (linux-igc): {e}"))?;
        if i % 2 == 0 && c.peer(i).is_some() {
            wait_for_file(&self.wire_path(i), Duration::from_secs(10))?;
        }
        Ok(g)
    }

    fn wire_path(&self, i: u32) -> PathBuf {
        self.rt.path.join(format!("wire{}.sock", i / 2))
    }

    /// The igcd arguments of host `i`: its end of the cable and the noise.
    fn igcd_args(&self, i: u32) -> Vec<String> {
        let c = &self.cfg;
        let mut a = Vec::new();
        if c.cabled(i) {
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
        a.extend(c.rt.to_args());
        if c.busy_poll_us > 0 {
            a.extend(["--busy-poll-us".into(), c.busy_poll_us.to_string()]);
        }
        a.push("--tx-inline-us".into());
        a.push(c.tx_inline_us.map_or("off".into(), |us| us.to_string()));
        if c.gps {
            a.push("--pins".into());
            a.push(gps::pins_path(&self.rt.path, i).display().to_string());
        }
        a
    }

    /// Starts (or restarts) host `i`'s igcd. The bound end of a cable must exist before the
    /// connecting end starts.
    pub fn start_igcd(&mut self, i: u32) -> Result<(), String> {
        let mut args = self.igcd_args(i);
        if self.cfg.faults && self.cfg.driver_of(i) == "igcd" {
            args.push("--emu-faults".into());
            args.push(self.fault_socket(i).display().to_string());
        }
        let (nic, osc) = (self.cfg.nic_of(i).to_string(), self.osc_ppm[i as usize]);
        if i % 2 == 1 {
            wait_for_file(&self.wire_path(i), Duration::from_secs(10))?;
        }
        if self.cfg.nic_process {
            self.start_nic_process(i, &args)?;
        } else {
            spawn_igcd(
                &mut self.kids,
                &self.exe,
                &self.hosts[i as usize],
                i,
                &nic,
                osc,
                &args,
            )?;
        }
        if i % 2 == 0 && self.cfg.cabled(i) {
            wait_for_file(&self.wire_path(i), Duration::from_secs(10))?;
        }
        Ok(())
    }

    /// Starts `ptplab tap-bridge` on the other end of host 0's cable (`--tap`) and waits until
    /// its TAP is up; an error with the bridge's log if it exits instead.
    fn start_tap_bridge(&mut self) -> Result<(), String> {
        let Some(ns) = self.cfg.tap.clone() else {
            return Ok(());
        };
        let dir = &self.hosts[0].dir;
        let (log, ready) = (dir.join("tap-bridge.log"), dir.join("tap.ready"));
        let mut cmd = Command::new(&self.exe);
        cmd.arg("tap-bridge")
            .arg("--wire")
            .arg(format!("connect:{}", self.wire_path(0).display()))
            .args(["--netns", &ns, "--tap", "tap0"])
            .args(["--cable-delay-ns", &self.cfg.cable_delay_ns.to_string()])
            // Its wake-up latency is part of every frame's path (see crate::tap).
            .args(["--rt-priority", "10"])
            .arg("--ready-file")
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(log_file(&log)?)
            .stderr(log_file(&log)?);
        if self.cfg.transport == "UDPv4" {
            let a = format!("{}/{}", crate::tap::TAP_ADDR, crate::tap::PREFIX_LEN);
            cmd.args(["--addr", &a]);
        }
        self.kids
            .spawn("host0/tap-bridge", cmd)
            .map_err(|e| format!("starting tap-bridge: {e}"))?;
        self.kids
            .wait_for_path(&ready, Duration::from_secs(10))
            .map_err(|e| {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                format!("tap-bridge did not come up ({e}): {}", text.trim())
            })
    }

    fn ptpd_config(&self, i: u32) -> String {
        let rt = ptpd_time_path_keys(&self.cfg.rt, self.cfg.busy_poll_us);
        format!("{rt}{}", self.ptpd_config_rest(i))
    }

    fn ptpd_config_rest(&self, i: u32) -> String {
        let c = &self.cfg;
        // Root may always steer; the lab's own uid too, so a non-root lab can set offsets.
        // Safety: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        if !c.cabled(i) && c.hosts == 1 {
            return format!("privileged_uids = [{uid}]\n{}", c.extra_ptpd);
        }
        // Towards Linux on the TAP: software timestamps there, so a descheduled bridge or ptp4l
        // delays a frame by milliseconds now and then, and one such sample must not step the
        // clock (ptp4l's own step_threshold defaults to never); and an ARB timescale, as the
        // emulated PHC starts from CLOCK_REALTIME (UTC): announcing PTP (TAI) would make a
        // ptp4l -S slave subtract its 37 s UTC offset.
        let mut step = if c.tap.is_some() {
            "step_threshold = 0.1\nptpTimescale = false\n".to_string()
        } else {
            String::new()
        };
        if let Some(servo) = &c.ptpd_servo {
            step.push_str(&format!("clock_servo = {servo:?}\n"));
        }
        format!(
            "privileged_uids = [{uid}]\nmanagement_socket = {:?}\n{}\n[ptp]\n{step}priority1 = {}\nlogSyncInterval = {}\nlogMinDelayReqInterval = {}\nlogMinPdelayReqInterval = {}\nlogAnnounceInterval = -1\nannounceReceiptTimeout = {}\nnetwork_transport = {:?}\ndelay_mechanism = {:?}\nsummary_interval = 0\n",
            self.hosts[i as usize].dir.join("ptp4l"),
            c.extra_ptpd,
            if i % 2 == 0 { 100 } else { 128 },
            c.sync_interval,
            c.sync_interval,
            c.sync_interval,
            c.announce_receipt_timeout,
            c.transport,
            c.delay_mechanism
        )
    }

    fn spawn_ptpd(&mut self, i: u32) -> Result<(), String> {
        let conf = self.ptpd_config(i);
        // On the TAP's subnet, so Linux's reverse-path filter accepts the host's UDPv4 frames.
        let clock_ptp = if i == 0 && self.cfg.tap.is_some() && self.cfg.transport == "UDPv4" {
            format!("source_ip = \"{}\"", crate::tap::HOST_ADDR)
        } else {
            String::new()
        };
        let paths = &self.hosts[i as usize];
        let mut tables = if clock_ptp.is_empty() {
            String::new()
        } else {
            format!("[clock.ptp]\n{clock_ptp}\n")
        };
        if i == 0 && self.cfg.gps {
            tables.push_str(&gps::ts2phc_table());
        }
        spawn_ptpd_with_tables(&mut self.kids, &self.exe, paths, i, &conf, &tables)?;
        Ok(())
    }

    /// Stops guest host `i` (`--linux-igc`) and returns its device host's report; None if host
    /// `i` is no guest or its device host wrote none.
    pub fn stop_guest(&mut self, i: u32) -> Option<serde_json::Value> {
        let g = self.guests.get_mut(i as usize)?.take()?;
        self.clients[i as usize] = None;
        self.truth[i as usize] = None;
        self.identities[i as usize] = None;
        g.shutdown()
    }

    /// Stops host `i` (ptpd and igcd).
    pub fn stop_host(&mut self, i: u32) {
        if let Some(g) = self.guests.get_mut(i as usize) {
            g.take();
        }
        self.clients[i as usize] = None;
        self.truth[i as usize] = None;
        self.identities[i as usize] = None;
        self.kids.stop(&format!("host{i}/ptpd"));
        self.kids
            .stop(&format!("host{i}/{}", self.cfg.driver_of(i)));
        self.kids.stop(&format!("host{i}/nic"));
    }

    /// Starts host `i` again after [`Self::stop_host`].
    pub fn restart_host(&mut self, i: u32) -> Result<(), String> {
        if self.is_guest(i) {
            return Err(format!("host{i} is a Linux guest: not restartable"));
        }
        self.start_igcd(i)?;
        self.spawn_ptpd(i)?;
        let (client, truth, id) = ready_host(&self.hosts[i as usize])?;
        self.clients[i as usize] = Some(client);
        self.truth[i as usize] = Some(truth);
        self.identities[i as usize] = Some(id);
        Ok(())
    }

    /// Host `i`'s fault-injection socket (with [`LabConfig::faults`]).
    pub fn fault_socket(&self, i: u32) -> PathBuf {
        self.hosts[i as usize].dir.join("faults.sock")
    }

    /// Sends one fault command to host `i`'s emulated NIC (`igcd::faults`); its reply's
    /// `key=value` fields.
    pub fn fault(&self, i: u32, cmd: &str) -> Result<Vec<(String, String)>, String> {
        use ptp_ipc::transport::{SeqpacketConn, Transport};
        let p = self.fault_socket(i);
        let c = SeqpacketConn::connect(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let t = Some(Duration::from_secs(5));
        c.send(cmd.as_bytes(), t).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        c.recv(&mut buf, t).map_err(|e| e.to_string())?;
        let reply = String::from_utf8_lossy(&buf).into_owned();
        let fields = reply
            .strip_prefix("ok")
            .ok_or_else(|| format!("host{i}: {cmd:?}: {reply}"))?;
        Ok(fields
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    pub fn status(&self, i: u32) -> Result<ClockStatus, String> {
        if let Some(g) = self.guests.get(i as usize).and_then(Option::as_ref) {
            return g.status();
        }
        let c = self.clients[i as usize].as_ref().ok_or("host stopped")?;
        c.status(0).map_err(|e| e.to_string())
    }

    /// PHC(i) − PHC(j), in ns, exactly: both records' laws evaluated at one host instant
    /// (`ptp_emu::truth::true_offset`). An error if either host is stopped.
    pub fn true_offset(&self, i: u32, j: u32) -> Result<i64, String> {
        let rec = |k: u32| {
            self.truth
                .get(k as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| format!("host{k} stopped"))
        };
        true_offset(rec(i)?, rec(j)?)
            .map(|o| o.offset_ns)
            .map_err(|e| e.to_string())
    }

    /// Host `i`'s ground-truth record now: its PHC law and the model's BAR and cable-loss
    /// counters.
    pub fn truth_snapshot(&self, i: u32) -> Result<TruthSnapshot, String> {
        let r = self.truth[i as usize].as_ref().ok_or("host stopped")?;
        r.snapshot().map_err(|e| e.to_string())
    }

    /// A cross-check of [`Self::true_offset`] through the driver path, not a figure: each PHC
    /// read by gettimex (the best of 25 CLOCK_REALTIME brackets), PHC(i) − PHC(j) and the sum
    /// of the two brackets' half-widths.
    pub fn gettimex_offset(&self, i: u32, j: u32) -> Result<(i64, u64), String> {
        let read = |k: u32| -> Result<(i128, u64), String> {
            let c = self.clients[k as usize].as_ref().ok_or("host stopped")?;
            let s = c.gettimex(0, 25).map_err(|e| format!("host{k}: {e}"))?;
            best_bracket(&s).ok_or_else(|| format!("host{k}: no usable gettimex bracket"))
        };
        let ((a, ea), (b, eb)) = (read(i)?, read(j)?);
        Ok(((a - b) as i64, ea + eb))
    }

    /// The host a port of host `i` can follow: its cable peer (each host has one port; the
    /// lab has no boundary clocks, so a slave's parent is its peer).
    pub fn parent(&self, i: u32) -> Option<u32> {
        self.cfg.peer(i)
    }

    /// Host `i`'s clock identity, while it runs.
    pub fn identity(&self, i: u32) -> Option<[u8; 8]> {
        self.identities.get(i as usize).copied().flatten()
    }

    /// Host `i`'s PHC − CLOCK_REALTIME now, exactly up to the half-width returned (ns):
    /// the true offset from `ptp4l -S` on the TAP (`--tap`).
    pub fn phc_minus_realtime(&self, i: u32) -> Result<(i64, u64), String> {
        let r = self.truth[i as usize].as_ref().ok_or("host stopped")?;
        crate::tap::phc_minus_realtime(r).map_err(|e| e.to_string())
    }

    /// The running host whose clock identity is `id`.
    pub fn host_with_identity(&self, id: [u8; 8]) -> Option<u32> {
        self.identities
            .iter()
            .position(|x| *x == Some(id))
            .map(|k| k as u32)
    }

    /// One sample of host `i` at lab time `t`: its status and its true offsets against its
    /// parent and its grandmaster.
    pub fn sample(&self, i: u32, t: f64) -> Result<Sample, String> {
        let status = self.status(i)?;
        // Only a slave (or a port calibrating towards a master) has a parent.
        let parent = self.parent(i).filter(|_| {
            matches!(
                status.port_state,
                PortState::Slave | PortState::Uncalibrated
            )
        });
        let mut true_offset_ns = parent.and_then(|p| self.true_offset(i, p).ok());
        // A slave of ptp4l -S on the TAP follows CLOCK_REALTIME. UNCALIBRATED too: with
        // software timestamps on the other side, ptpd's lock criterion (4 Syncs within 20 µs
        // in a row) comes and goes while the port keeps following.
        let following = matches!(
            status.port_state,
            PortState::Slave | PortState::Uncalibrated
        );
        if i == 0 && self.cfg.tap.is_some() && following {
            true_offset_ns = self.phc_minus_realtime(0).ok().map(|(o, _)| o);
        }
        let gm = self
            .host_with_identity(status.grandmaster)
            .filter(|&g| g != i);
        let true_gm_offset_ns = match gm {
            Some(g) if Some(g) == parent => true_offset_ns,
            Some(g) => self.true_offset(i, g).ok(),
            None if self.cfg.tap.is_some() => true_offset_ns,
            None => None,
        };
        Ok(Sample {
            t,
            status,
            true_offset_ns,
            true_gm_offset_ns,
        })
    }

    /// Names and exit statuses of daemons that died.
    pub fn exited(&mut self) -> Vec<(String, std::process::ExitStatus)> {
        self.kids.exited()
    }

    pub fn logs(&self) -> String {
        let mut s = String::new();
        for (i, g) in self.guests.iter().enumerate() {
            if let Some(g) = g {
                s += &format!("--- host{i} (linux-igc) ptp4l\n{}\n", g.log());
            }
        }
        for h in &self.hosts {
            for f in [
                "nic.log",
                "igcd.log",
                "igbd.log",
                "ptpd.log",
                "tap-bridge.log",
            ] {
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
        self.guests.clear();
        self.clients.clear();
        self.kids.stop_all();
    }
}

fn run(opts: &LabOptions) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let lab = Lab::start(opts.lab.clone(), &exe, opts.runtime_dir.as_deref())?;
    if !opts.json {
        print_header(&lab)?;
    }
    let start = Instant::now();
    let mut traces: Vec<Vec<Sample>> = vec![Vec::new(); lab.hosts.len()];
    let mut next_print = start;
    let mut lab = lab;
    let mut gps = if lab.cfg.gps {
        Some(gps::GpsRig::start(&mut lab)?)
    } else {
        None
    };
    let mut vs_true: Vec<Vec<(f64, i64)>> = vec![Vec::new(); lab.hosts.len()];
    let mut timeline = opts.scenario.map(scenario::Timeline::new);
    while !STOP.load(Ordering::SeqCst) {
        if opts.duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        if let Err(e) = lab.supervise() {
            return Err(format!("{e}; logs in {}", lab.rt.path.display()));
        }
        // Sample every 100 ms (monotonic time), print every second.
        let t = start.elapsed().as_secs_f64();
        if let Some(tl) = &mut timeline {
            tl.step(&mut lab, t)
                .map_err(|e| format!("scenario: {e}; logs in {}", lab.rt.path.display()))?;
        }
        for (i, tr) in traces.iter_mut().enumerate() {
            if let Ok(s) = lab.sample(i as u32, t) {
                tr.push(s);
            }
        }
        if let Some(g) = &mut gps {
            g.poll_pps(&lab)?;
            for (i, v) in vs_true.iter_mut().enumerate() {
                if let Some(e) = g.true_error(&lab, i as u32) {
                    v.push((t, e));
                }
            }
        }
        if Instant::now() >= next_print {
            next_print += Duration::from_secs(1);
            for (i, tr) in traces.iter().enumerate() {
                if let Some(s) = tr.last() {
                    print_live(i, s, opts.json);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let summary: Vec<serde_json::Value> = (0..lab.hosts.len())
        .map(|i| host_summary(&lab, i as u32, &traces[i], elapsed))
        .collect();
    let sc = opts
        .scenario
        .zip(timeline.as_ref())
        .map(|(s, tl)| scenario::summary(s, &lab, &traces, tl, elapsed));
    let gps_summary = gps.as_ref().map(|g| g.summary(&vs_true, elapsed));
    if opts.json {
        println!(
            "{}",
            json!({"summary": true, "duration_s": elapsed, "seed": lab.cfg.seed, "hosts": summary, "scenario": sc, "gps": gps_summary})
        );
    } else {
        print_summary(&lab, &traces, elapsed);
        if let Some(sc) = &sc {
            println!("ptplab: scenario {sc}");
        }
        if let Some(g) = &gps_summary {
            println!("ptplab: against true time (GPS, second half): {g}");
        }
    }
    if let Some(p) = &opts.plot {
        write_plot(&lab, &traces, p)?;
        if !opts.json {
            println!("ptplab: plot written to {}", p.display());
        }
    }
    Ok(())
}

fn print_header(lab: &Lab) -> Result<(), String> {
    println!(
        "ptplab: {} host(s) in {} (seed {})",
        lab.hosts.len(),
        lab.rt.path.display(),
        lab.cfg.seed
    );
    for (i, h) in lab.hosts.iter().enumerate() {
        if lab.is_guest(i as u32) {
            println!(
                "  host{i}: Linux igc + ptp4l -H in a VM on an emulated {}, oscillator {:+.1} ppm \
                 — logs in {}",
                lab.cfg.nic_of(i as u32),
                lab.osc_ppm[i],
                h.dir.join("vm").display()
            );
            continue;
        }
        let caps = lab.clients[i]
            .as_ref()
            .ok_or("host not started")?
            .caps(0)
            .map_err(|e| e.to_string())?;
        println!(
            "  host{i}: {} ({}) oscillator {:+.1} ppm — clock scheme {}",
            caps.part,
            lab.cfg.driver_of(i as u32),
            lab.osc_ppm[i],
            h.socket.display()
        );
    }
    println!(
        "  offsets: \"true\" = PHC(host) − PHC(master) exactly, from the emulated clocks' laws; \
         \"servo\" = ptpd's (or a guest ptp4l's) own estimate (offset_from_master)"
    );
    if let Some(ns) = &lab.cfg.tap {
        let dir = &lab.hosts[0].dir;
        let t = if lab.cfg.transport == "UDPv4" {
            "-4"
        } else {
            "-2"
        };
        println!(
            "  host0's cable ends in tap0 in netns {ns}; e.g. (as root)\n    \
             ip netns exec {ns} ptp4l -i tap0 -S -m {t} --free_running 1 --priority1 50 \
             --logSyncInterval {s} --logMinDelayReqInterval {s} --logAnnounceInterval -1 \
             --uds_address {}\n    pmc -u -b 0 -s {} 'GET TIME_STATUS_NP'",
            lab.rt.path.join("ptp4l-uds").display(),
            dir.join("ptp4l").display(),
            s = lab.cfg.sync_interval
        );
    }
    if lab.rt.owned {
        println!("  (the runtime directory is removed at exit; --runtime-dir keeps it)");
    }
    Ok(())
}

/// The live per-second line (or JSON record) of one host.
fn print_live(i: usize, s: &Sample, as_json: bool) {
    let st = &s.status;
    let freq = st.freq_scaled_ppm as f64 / 65.536;
    if as_json {
        println!(
            "{}",
            json!({"t": (s.t * 10.0).round() / 10.0, "host": i, "state": st.port_state.name(),
                "true_offset_ns": s.true_offset_ns, "true_offset_gm_ns": s.true_gm_offset_ns,
                "servo_offset_ns": st.offset_ns, "freq_ppb": freq,
                "mean_path_delay_ns": st.mean_path_delay_ns, "driver_up": st.driver_up,
                "link_up": st.link_up})
        );
        return;
    }
    let truth = s.true_offset_ns.map_or("—".to_string(), |o| o.to_string());
    println!(
        "[{:6.1}s] host{i}: {:<12} true offset {:>10} ns  servo offset {:>10} ns  freq {:>+10.1} ppb  path delay {:>6} ns",
        s.t,
        st.port_state.name(),
        truth,
        st.offset_ns,
        freq,
        st.mean_path_delay_ns
    );
}

/// The JSON summary of host `i`: true and servo figures, path delay, and the model counters.
fn host_summary(lab: &Lab, i: u32, trace: &[Sample], elapsed: f64) -> serde_json::Value {
    let last = trace.last().map(|p| p.status.clone()).unwrap_or_default();
    let is_slave = last.port_state == PortState::Slave;
    let mut m = serde_json::Map::new();
    m.insert("host".into(), json!(i));
    m.insert("nic".into(), json!(lab.cfg.nic_of(i)));
    m.insert("state".into(), json!(last.port_state.name()));
    Figures::of(trace, Source::True, elapsed).json_fields("true", &mut m);
    Figures::of(trace, Source::Servo, elapsed).json_fields("servo", &mut m);
    let truth_missing = trace
        .iter()
        .filter(|p| p.status.port_state == PortState::Slave && p.true_offset_ns.is_none())
        .count();
    m.insert("true_samples_missing".into(), json!(truth_missing));
    m.insert(
        "mean_path_delay_ns".into(),
        json!(is_slave.then_some(last.mean_path_delay_ns)),
    );
    m.insert(
        "freq_ppb".into(),
        json!(last.freq_scaled_ppm as f64 / 65.536),
    );
    m.insert("oscillator_ppm".into(), json!(lab.osc_ppm[i as usize]));
    if let Ok(t) = lab.truth_snapshot(i) {
        m.insert("true_clock".into(), json!(served_clock(&t)));
        m.insert("model_bar_reads".into(), json!(t.bar_reads));
        m.insert("model_bar_writes".into(), json!(t.bar_writes));
        m.insert("cable_frames_lost".into(), json!(t.wire_lost));
    }
    // The driver-path measurement beside the truth, labelled as the cross-check it is.
    if let Some(p) = lab.parent(i).filter(|_| is_slave)
        && let Ok((off, err)) = lab.gettimex_offset(i, p)
    {
        m.insert("gettimex_crosscheck_offset_ns".into(), json!(off));
        m.insert("gettimex_crosscheck_uncertainty_ns".into(), json!(err));
    }
    serde_json::Value::Object(m)
}

/// What the true offsets of a host are taken of: the clock its ptpd reads.
fn served_clock(t: &TruthSnapshot) -> &'static str {
    if t.driver.is_some() {
        "igbd's timecounter over SYSTIM"
    } else {
        "SYSTIM"
    }
}

fn print_summary(lab: &Lab, traces: &[Vec<Sample>], elapsed: f64) {
    println!(
        "ptplab: summary after {elapsed:.1} s (seed {}); locked = |offset| ≤ {} ns to the end",
        lab.cfg.seed,
        crate::figures::LOCK_NS
    );
    for (i, tr) in traces.iter().enumerate() {
        let last = tr.last().map(|p| p.status.clone()).unwrap_or_default();
        println!(
            "  host{i} ({}): {}",
            lab.cfg.nic_of(i as u32),
            last.port_state.name()
        );
        if last.port_state != PortState::Slave {
            continue;
        }
        let t = Figures::of(tr, Source::True, elapsed);
        let s = Figures::of(tr, Source::Servo, elapsed);
        println!("    true offset:     {}", t.describe());
        println!("    servo estimate:  {}", s.describe());
        println!("    mean path delay: {} ns", last.mean_path_delay_ns);
        if let Ok(snap) = lab.truth_snapshot(i as u32) {
            println!(
                "    model: {} BAR reads, {} BAR writes, {} frames lost on the cable; true \
                 offsets of {}",
                snap.bar_reads,
                snap.bar_writes,
                snap.wire_lost,
                served_clock(&snap)
            );
        }
    }
}

fn write_plot(lab: &Lab, traces: &[Vec<Sample>], path: &Path) -> Result<(), String> {
    use crate::plot::Series;
    let mut offsets = Vec::new();
    let mut freqs = Vec::new();
    for (i, tr) in traces.iter().enumerate() {
        let pts: Vec<&Sample> = tr
            .iter()
            .filter(|s| {
                matches!(
                    s.status.port_state,
                    PortState::Slave | PortState::Uncalibrated
                )
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let series = |name: String, dashed, f: &dyn Fn(&Sample) -> Option<f64>| Series {
            name,
            dashed,
            points: pts.iter().filter_map(|s| Some((s.t, f(s)?))).collect(),
        };
        offsets.push(series(format!("host{i} true offset"), false, &|s| {
            s.true_offset_ns.map(|o| o as f64)
        }));
        // ptpd reports offset 0 until the port is SLAVE: no estimate before that.
        offsets.push(series(format!("host{i} servo estimate"), true, &|s| {
            (s.status.port_state == PortState::Slave).then_some(s.status.offset_ns as f64)
        }));
        freqs.push(series(format!("host{i}"), false, &|s| {
            Some(s.status.freq_scaled_ppm as f64 / 65.536)
        }));
    }
    let c = &lab.cfg;
    let title = format!(
        "ptplab: {} hosts, {} {}, sync 2^{} s, seed {}",
        c.hosts, c.transport, c.delay_mechanism, c.sync_interval, c.seed
    );
    let svg = crate::plot::render(&title, &offsets, &freqs)?;
    std::fs::write(path, svg).map_err(|e| format!("{}: {e}", path.display()))
}

/// ptpd's top-level keys for the lab's `--rt`, `--rt-priority`, `--cpu` and `--busy-poll-us`.
fn ptpd_time_path_keys(rt: &ptp_ipc::rt::RtConfig, busy_poll_us: u64) -> String {
    let mut t = String::new();
    if busy_poll_us > 0 {
        t += &format!("busy_poll_us = {busy_poll_us}\n");
    }
    if let Some(p) = rt.priority {
        t += &format!("rt_priority = {p}\n");
    }
    if let Some(c) = rt.cpu {
        t += &format!("cpu = {c}\n");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--rt` reaches every daemon: the drivers' arguments and ptpd's keys.
    #[test]
    fn rt_options_pass_to_every_daemon() {
        let args = |a: &[&str]| parse(a.iter().map(OsString::from)).unwrap().unwrap().lab.rt;
        let rt = args(&["--rt", "--cpu", "1"]);
        assert_eq!(rt.to_args(), ["--rt-priority", "50", "--cpu", "1"]);
        assert_eq!(ptpd_time_path_keys(&rt, 0), "rt_priority = 50\ncpu = 1\n");
        assert_eq!(
            ptpd_time_path_keys(&rt, 20),
            "busy_poll_us = 20\nrt_priority = 50\ncpu = 1\n"
        );
        assert_eq!(args(&["--rt-priority", "70"]).priority, Some(70));
        assert_eq!(ptpd_time_path_keys(&args(&[]), 0), "");
        assert!(parse(["--rt-priority", "99"].map(OsString::from)).is_err());
    }

    #[test]
    fn the_inline_stamp_is_on_unless_told_off() {
        let lab = |args: &[&str]| {
            parse(args.iter().map(OsString::from)).map(|o| o.unwrap().lab.tx_inline_us)
        };
        assert_eq!(lab(&[]), Ok(Some(0)));
        assert_eq!(lab(&["--tx-inline-us", "off"]), Ok(None));
        assert_eq!(lab(&["--tx-inline-us", "50"]), Ok(Some(50)));
        for bad in ["1001", "on", "-1"] {
            assert!(lab(&["--tx-inline-us", bad]).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn nic_list_names_one_nic_per_host_and_repeats_the_last() {
        let c = LabConfig {
            hosts: 4,
            nic: "i225,i210,82576".into(),
            ..LabConfig::default()
        };
        c.validate().unwrap();
        let nics: Vec<&str> = (0..4).map(|i| c.nic_of(i)).collect();
        assert_eq!(nics, ["i225", "i210", "82576", "82576"]);
        let drivers: Vec<&str> = (0..4).map(|i| c.driver_of(i)).collect();
        assert_eq!(drivers, ["igcd", "igbd", "igbd", "igbd"]);
        assert_eq!(LabConfig::default().nic_of(7), "i225");
        for bad in ["i225,e1000", "", "i225,"] {
            let c = LabConfig {
                nic: bad.into(),
                ..LabConfig::default()
            };
            assert!(c.validate().is_err(), "{bad:?} accepted");
        }
        // A Linux guest runs igc: its host must have an igc part.
        let c = LabConfig {
            nic: "i225,i350".into(),
            linux_igc: vec![1],
            ..LabConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.contains("--linux-igc 1"), "{e}");
    }

    #[test]
    fn best_bracket_is_the_tightest_samples_offset_and_half_width() {
        // Which sample is tightest (a stepped-back bracket never is) is TimeXSample::tightest's,
        // tested in ptp-ipc; here: the offset at its midpoint and half its width.
        let s = |b, p, a| TimeXSample {
            sys_before_ns: b,
            phc_ns: p,
            sys_after_ns: a,
        };
        let got = best_bracket(&[s(1_000, 5_000, 1_100), s(3_000, 7_000, 3_040)]);
        assert_eq!(got, Some((7_000 - 3_020, 20)));
        assert_eq!(best_bracket(&[s(10, 0, 5)]), None);
    }
}
