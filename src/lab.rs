//! ptplab: starts each emulated host as real processes (igcd on an emulated NIC, and ptpd)
//! under a runtime directory, shows live status, and stops everything on exit or signal.
//!
//! Layout: `DIR/host<i>/` holds `igc0.sock` (driver channel), `clock0.page` (clock page),
//! `ptpd.toml`, `ptp.sock` (the clock scheme) and the daemons' logs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ptpd::client::Client;

use crate::procs::Children;

pub const USAGE: &str = "\
usage: ptplab [options]          (cargo run --release -- [options])
  --hosts N           emulated hosts to start (default 1)
  --duration SECS     run for SECS seconds, then stop (default: until Ctrl-C)
  --runtime-dir DIR   where sockets, clock pages and logs go (default: a fresh temporary dir,
                      removed at exit)
  --nic i225|i226     emulated NIC model (default i225)
  --json              print per-second records as JSON lines
  --help
Each host i serves its clock scheme at DIR/host<i>/ptp.sock; try
  PTP_SOCKET=DIR/host0/ptp.sock cargo run --release -- ptpctl status
";

#[derive(Debug, Clone, PartialEq)]
pub struct LabOptions {
    pub hosts: u32,
    pub duration: Option<Duration>,
    pub runtime_dir: Option<PathBuf>,
    pub nic: String,
    pub json: bool,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<LabOptions>, String> {
    use lexopt::prelude::*;
    let bad = |e: lexopt::Error| e.to_string();
    let mut o = LabOptions {
        hosts: 1,
        duration: None,
        runtime_dir: None,
        nic: "i225".into(),
        json: false,
    };
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next().map_err(bad)? {
        match arg {
            Long("hosts") => o.hosts = p.value().map_err(bad)?.parse().map_err(bad)?,
            Long("duration") => {
                let s: f64 = p.value().map_err(bad)?.parse().map_err(bad)?;
                if !(s.is_finite() && s > 0.0 && s < 1e7) {
                    return Err("--duration must be a positive number of seconds".into());
                }
                o.duration = Some(Duration::from_secs_f64(s));
            }
            Long("runtime-dir") => o.runtime_dir = Some(p.value().map_err(bad)?.into()),
            Long("nic") => {
                o.nic = p.value().map_err(bad)?.string().map_err(bad)?;
                if !matches!(o.nic.as_str(), "i225" | "i226") {
                    return Err(format!("unknown NIC {:?} (i225 or i226)", o.nic));
                }
            }
            Long("json") => o.json = true,
            Long("help") | Short('h') => return Ok(None),
            _ => return Err(bad(arg.unexpected())),
        }
    }
    if !(1..=16).contains(&o.hosts) {
        return Err("--hosts must be within 1..=16".into());
    }
    Ok(Some(o))
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
struct RuntimeDir {
    path: PathBuf,
    owned: bool,
}

impl RuntimeDir {
    fn new(explicit: Option<&Path>) -> Result<Self, String> {
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
fn log_file(p: &Path, append: bool) -> Result<Stdio, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .open(p)
        .map(Stdio::from)
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// Starts igcd for host `i` on an emulated `nic` whose oscillator is `osc_ppm` off.
pub fn spawn_igcd(
    kids: &mut Children,
    exe: &Path,
    paths: &HostPaths,
    i: u32,
    nic: &str,
    osc_ppm: f64,
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
        .stdin(Stdio::null())
        .stdout(log_file(&log, true)?)
        .stderr(log_file(&log, true)?);
    kids.spawn(&format!("host{i}/igcd"), igcd)
        .map_err(|e| format!("starting igcd: {e}"))
}

/// Writes host `i`'s ptpd config (plus `extra` TOML lines at the top level) and starts ptpd.
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
        .stdout(log_file(&log, true)?)
        .stderr(log_file(&log, true)?);
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

fn run(opts: &LabOptions) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let rt = RuntimeDir::new(opts.runtime_dir.as_deref())?;
    let mut kids = Children::default();
    let hosts: Vec<HostPaths> = (0..opts.hosts)
        .map(|i| HostPaths::new(&rt.path, i))
        .collect();
    for (i, h) in hosts.iter().enumerate() {
        // Oscillators a few ppm apart, as crystals are.
        let osc_ppm = i as f64 * 7.5 - 3.0;
        spawn_igcd(&mut kids, &exe, h, i as u32, &opts.nic, osc_ppm)?;
        spawn_ptpd(&mut kids, &exe, h, i as u32, "")?;
    }
    let clients = hosts
        .iter()
        .map(|h| wait_ready(h, Duration::from_secs(10)))
        .collect::<Result<Vec<_>, _>>()?;

    if !opts.json {
        println!("ptplab: {} host(s) in {}", hosts.len(), rt.path.display());
        for (i, (h, c)) in hosts.iter().zip(&clients).enumerate() {
            let caps = c.caps(0).map_err(|e| e.to_string())?;
            println!(
                "  host{i}: {} — clock scheme {}  (PTP_SOCKET={} ptpctl status)",
                caps.part,
                h.socket.display(),
                h.socket.display()
            );
        }
        if rt.owned {
            println!("  (the runtime directory is removed at exit; --runtime-dir keeps it)");
        }
    }

    let start = Instant::now();
    let mut next = start;
    while !STOP.load(Ordering::SeqCst) {
        if let Some(d) = opts.duration
            && start.elapsed() >= d
        {
            break;
        }
        if let Some((name, status)) = kids.exited().into_iter().next() {
            return Err(format!(
                "{name} exited unexpectedly ({status}); logs in {}",
                rt.path.display()
            ));
        }
        if Instant::now() >= next {
            next += Duration::from_secs(1);
            for (i, c) in clients.iter().enumerate() {
                print_status(i, c, start.elapsed(), opts.json);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(clients);
    kids.stop_all();
    if !opts.json {
        println!(
            "ptplab: stopped after {:.1} s",
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn print_status(i: usize, c: &Client, t: Duration, json: bool) {
    let st = c.status(0);
    let time = c.get(0);
    match (st, time) {
        (Ok(s), Ok(ns)) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"t": t.as_secs_f64(), "host": i, "driver_up": s.driver_up,
                        "link_up": s.link_up, "port_state": format!("{:?}", s.port_state),
                        "phc_ns": ns, "offset_ns": s.offset_ns, "freq_ppb": s.freq_scaled_ppm as f64 / 65.536,
                        "mean_path_delay_ns": s.mean_path_delay_ns})
                );
            } else {
                println!(
                    "[{:6.1}s] host{i}: driver {} link {} port {:?} phc {}.{:09}",
                    t.as_secs_f64(),
                    if s.driver_up { "up" } else { "DOWN" },
                    if s.link_up { "up" } else { "down" },
                    s.port_state,
                    ns / 1_000_000_000,
                    ns % 1_000_000_000
                );
            }
        }
        (Err(e), _) | (_, Err(e)) => println!("[{:6.1}s] host{i}: {e}", t.as_secs_f64()),
    }
}
