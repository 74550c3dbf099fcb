//! What the scenarios need from the guest, behind one trait (so the sequencing can run against
//! a fake on the host), and its implementation over real processes: every child waited on with a
//! deadline and killed after it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::report::LOG;

/// How a bounded child run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    /// Ended by a signal (or a status with no code).
    Other(String),
    /// Killed at the deadline.
    TimedOut(Duration),
}

/// One ptpctl run: its output and when it ran (guest monotonic and realtime, ns).
#[derive(Debug, Clone)]
pub struct Ran {
    pub exit: Exit,
    pub stdout: String,
    pub stderr: String,
    pub mono: (i128, i128),
    pub real: (i128, i128),
}

/// Who runs a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    Root,
    /// uid 1000, gid 1000.
    Unprivileged,
}

/// A daemon the check starts by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Daemon {
    Igcd,
    Ptpd,
    /// igbd with its emulator (an i210 on a loopback cable), started by hand.
    Igbd,
}

impl Daemon {
    /// Its program name in the initfs (and in `/scheme/sys/context`).
    pub fn program(self) -> &'static str {
        match self {
            Daemon::Igcd => "igcd-emu",
            Daemon::Ptpd => "ptpd",
            Daemon::Igbd => "igbd",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("cannot start {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("waiting for {what}: {source}")]
    Wait {
        what: String,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("kill({pid}, SIGKILL): {source}")]
    Kill { pid: u32, source: std::io::Error },
}

/// The guest as the scenarios see it.
pub trait Guest {
    /// Runs `ptpctl ARGS` as `user`, killed after `timeout`.
    fn ptpctl(&mut self, user: User, args: &[&str], timeout: Duration) -> Result<Ran, GuestError>;
    /// Starts `d` by hand (foreground, no INIT_NOTIFY), its output captured and forwarded.
    fn start(&mut self, d: Daemon, args: &[&str]) -> Result<(), GuestError>;
    /// The lines the hand-started `d` printed so far.
    fn log_of(&self, d: Daemon) -> Vec<String>;
    /// How the hand-started `d` ended, if it has.
    fn exited(&mut self, d: Daemon) -> Option<String>;
    /// Kills the hand-started `d` (bounded) and forgets it.
    fn stop(&mut self, d: Daemon);
    /// The text of `/scheme/sys/context`.
    fn processes(&mut self) -> Result<String, GuestError>;
    /// SIGKILL to `pid`.
    fn kill(&mut self, pid: u32) -> Result<(), GuestError>;
    /// Guest monotonic time since the check started, ns.
    fn mono_ns(&self) -> i128;
    /// CLOCK_REALTIME, ns.
    fn real_ns(&self) -> i128;
    fn sleep(&mut self, d: Duration);
    /// Prints one line on the console.
    fn emit(&mut self, line: &str);
    /// Opens `path` and maps its first page shared, writable or read-only: the page's first
    /// word, or the errno of the open or mmap that failed.
    fn map_probe(&mut self, path: &str, writable: bool) -> Result<u64, i32>;
}

/// The serial console (`/scheme/debug`), or stdout where it cannot be opened (host runs).
#[derive(Clone)]
pub struct Console(Arc<Mutex<Box<dyn Write + Send>>>);

impl Console {
    pub fn open(path: &str) -> Console {
        let w: Box<dyn Write + Send> = match std::fs::OpenOptions::new().write(true).open(path) {
            Ok(f) => Box::new(f),
            Err(_) => Box::new(std::io::stdout()),
        };
        Console(Arc::new(Mutex::new(w)))
    }

    /// One line in one write, so lines of other writers do not split it.
    pub fn line(&self, text: &str) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let _ = w.write_all(format!("{text}\n").as_bytes());
        let _ = w.flush();
    }
}

/// A daemon started by hand: the child and the lines it printed.
struct Hand {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The real guest: programs from `bin`, output on `console`.
pub struct System {
    pub bin: PathBuf,
    console: Console,
    t0: Instant,
    hands: HashMap<Daemon, Hand>,
}

/// How long a killed child may take to be reaped.
const REAP: Duration = Duration::from_secs(5);
/// How often a bounded wait polls.
const POLL: Duration = Duration::from_millis(10);

impl System {
    pub fn new(bin: impl Into<PathBuf>, console: Console) -> System {
        System {
            bin: bin.into(),
            console,
            t0: Instant::now(),
            hands: HashMap::new(),
        }
    }
}

/// An empty stdin. std's `Stdio::null()` opens `/dev/null`, which a Redox image without a root
/// file system lacks (spawn fails with ENODEV); `/scheme/null` is zerod's.
pub fn null_input() -> Stdio {
    if cfg!(target_os = "redox") {
        if let Ok(f) = std::fs::File::open("/scheme/null") {
            return Stdio::from(f);
        }
    }
    Stdio::null()
}

/// Waits for `child` until `timeout`, then kills it; `None` = killed at the deadline.
fn wait_bounded(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let reap = Instant::now() + REAP;
            while child.try_wait()?.is_none() && Instant::now() < reap {
                std::thread::sleep(POLL);
            }
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

fn describe(st: ExitStatus) -> Exit {
    match st.code() {
        Some(c) => Exit::Code(c),
        None => Exit::Other(format!("{st}")),
    }
}

/// Reads a pipe to its end on a thread.
fn drain(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut s);
        }
        String::from_utf8_lossy(&s).into_owned()
    })
}

/// Forwards each line of a daemon's pipe to the console (tagged) and keeps it.
fn forward(
    r: Option<impl Read + Send + 'static>,
    tag: String,
    lines: Arc<Mutex<Vec<String>>>,
    console: Console,
) {
    let Some(r) = r else { return };
    std::thread::spawn(move || {
        for line in BufReader::new(r).split(b'\n').map_while(Result::ok) {
            let text = crate::report::strip_ansi(&String::from_utf8_lossy(&line));
            console.line(&format!("{LOG} {tag}: {text}"));
            lock(&lines).push(text);
        }
    });
}

impl Guest for System {
    fn ptpctl(&mut self, user: User, args: &[&str], timeout: Duration) -> Result<Ran, GuestError> {
        use std::os::unix::process::CommandExt;
        let what = format!("ptpctl {}", args.join(" "));
        let mut cmd = Command::new(self.bin.join("ptpctl"));
        cmd.args(args)
            .stdin(null_input())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if user == User::Unprivileged {
            cmd.gid(1000).uid(1000);
        }
        let (m0, r0) = (self.mono_ns(), self.real_ns());
        let mut child = cmd.spawn().map_err(|source| GuestError::Spawn {
            what: what.clone(),
            source,
        })?;
        let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
        let st = wait_bounded(&mut child, timeout)
            .map_err(|source| GuestError::Wait { what, source })?;
        let (m1, r1) = (self.mono_ns(), self.real_ns());
        Ok(Ran {
            exit: st.map_or(Exit::TimedOut(timeout), describe),
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
            mono: (m0, m1),
            real: (r0, r1),
        })
    }

    fn start(&mut self, d: Daemon, args: &[&str]) -> Result<(), GuestError> {
        self.stop(d);
        let mut child = Command::new(self.bin.join(d.program()))
            .args(args)
            .env_remove("INIT_NOTIFY")
            .stdin(null_input())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| GuestError::Spawn {
                what: d.program().to_string(),
                source,
            })?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let tag = format!("{} (by hand)", d.program());
        forward(
            child.stdout.take(),
            tag.clone(),
            lines.clone(),
            self.console.clone(),
        );
        forward(
            child.stderr.take(),
            tag,
            lines.clone(),
            self.console.clone(),
        );
        self.hands.insert(d, Hand { child, lines });
        Ok(())
    }

    fn log_of(&self, d: Daemon) -> Vec<String> {
        self.hands
            .get(&d)
            .map(|h| lock(&h.lines).clone())
            .unwrap_or_default()
    }

    fn exited(&mut self, d: Daemon) -> Option<String> {
        let h = self.hands.get_mut(&d)?;
        match h.child.try_wait() {
            Ok(Some(st)) => Some(format!("{st}")),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    fn stop(&mut self, d: Daemon) {
        if let Some(mut h) = self.hands.remove(&d) {
            let _ = wait_bounded(&mut h.child, Duration::ZERO);
        }
    }

    fn processes(&mut self) -> Result<String, GuestError> {
        let path = "/scheme/sys/context";
        std::fs::read_to_string(path).map_err(|source| GuestError::Read {
            path: path.into(),
            source,
        })
    }

    fn kill(&mut self, pid: u32) -> Result<(), GuestError> {
        let Ok(p) = libc::pid_t::try_from(pid) else {
            return Err(GuestError::Kill {
                pid,
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        };
        // Safety: kill(2) takes plain integers and touches no memory of ours.
        if unsafe { libc::kill(p, libc::SIGKILL) } != 0 {
            return Err(GuestError::Kill {
                pid,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    fn mono_ns(&self) -> i128 {
        self.t0.elapsed().as_nanos() as i128
    }

    fn real_ns(&self) -> i128 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        }
    }

    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
    }

    fn emit(&mut self, line: &str) {
        self.console.line(line);
    }

    fn map_probe(&mut self, path: &str, writable: bool) -> Result<u64, i32> {
        use std::os::fd::AsRawFd;
        let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(errno)?;
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // Safety: a fresh shared mapping of an open descriptor at an address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                prot,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno(std::io::Error::last_os_error()));
        }
        // Safety: `p` is the page just mapped (readable, page-aligned); unmapped right after.
        let word = unsafe { p.cast::<u64>().read_volatile() };
        // Safety: exactly the mapping made above, not used after this.
        unsafe { libc::munmap(p, 4096) };
        Ok(word)
    }
}

/// Powers the guest off (`/scheme/sys/kstop`); returns only if that failed.
pub fn power_off() -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/scheme/sys/kstop")?
        .write_all(b"shutdown")
}
