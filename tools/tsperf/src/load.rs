//! `--load N`: N busy processes at normal priority (nice 0, SCHED_OTHER) beside the daemons
//! for the whole run, so the timestamp path is measured on a loaded host; and the CPU time they
//! got, for the report, so a reader can see the load was real.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ptp_ipc::rt::RtConfig;
use serde_json::Value;

use crate::rx::cpu_ns;

/// The most load processes `--load` takes: beyond that it measures the scheduler, not us.
pub const MAX_PROCS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadKind {
    /// A shell busy loop: user time only, no syscalls, no memory traffic.
    #[default]
    Cpu,
    /// dd zero-filling a 64 MiB buffer (past any cache) from /dev/zero over and over: memory
    /// write bandwidth, mostly system time.
    Mem,
}

impl LoadKind {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "mem" => Ok(Self::Mem),
            _ => Err(format!("--load-kind {s:?}: cpu or mem")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Mem => "mem",
        }
    }

    /// One load process. Absolute paths: both are in every Debian base system.
    fn command(self) -> Command {
        let (prog, args): (&str, &[&str]) = match self {
            Self::Cpu => ("/bin/sh", &["-c", "while :; do :; done"]),
            Self::Mem => ("/bin/dd", &["if=/dev/zero", "of=/dev/null", "bs=64M"]),
        };
        let mut c = Command::new(prog);
        c.args(args);
        c
    }
}

/// The conditions of the run: the load asked for and, once started, its processes' pids (for
/// their CPU time in reports; the pids stay theirs until [`LoadGuard`] reaps them, after every
/// report is out), and the real-time service of the time path (`--rt`).
#[derive(Debug, Clone, Default)]
pub struct Load {
    pub procs: usize,
    pub kind: LoadKind,
    pub pids: Vec<u32>,
    pub rt: RtConfig,
    /// The busy-poll window of both ends of the ring (`--busy-poll-us`).
    pub busy_poll: Duration,
}

impl Load {
    /// CPU seconds the load processes have had so far.
    pub fn cpu_s(&self) -> f64 {
        let ns: u64 = self.pids.iter().map(|&p| cpu_ns(p).unwrap_or(0)).sum();
        ns as f64 / 1e9
    }

    /// Adds `load`, `load_kind`, `load_cpu_s`, `rt_priority` and `rt_cpu` (null: off) to a
    /// JSON summary object.
    pub fn tag(&self, v: &mut Value) {
        v["load"] = self.procs.into();
        v["load_kind"] = self.kind.name().into();
        v["load_cpu_s"] = ((self.cpu_s() * 1000.0).round() / 1000.0).into();
        v["rt_priority"] = self.rt.priority.into();
        v["rt_cpu"] = self.rt.cpu.into();
        v["busy_poll_us"] = (self.busy_poll.as_micros() as u64).into();
    }

    /// Prints [`Self::line`], if any, under a table's heading.
    pub fn print_line(&self) {
        if let Some(l) = self.line() {
            println!("{l}");
        }
    }

    /// The line naming the load and the real-time service under a table; `None` with
    /// neither.
    pub fn line(&self) -> Option<String> {
        let rt = match self.rt.priority {
            Some(p) => format!("time path SCHED_FIFO {p} (--rt; refusals in the daemon's log)"),
            None => "time path at normal priority".into(),
        };
        let pin = self
            .rt
            .cpu
            .map(|c| format!(", pinned to CPU {c}"))
            .unwrap_or_default();
        if self.procs == 0 {
            return self.rt.is_on().then(|| format!("{rt}{pin}"));
        }
        Some(format!(
            "load: {} {}-bound process{} (nice 0, SCHED_OTHER) beside the daemons throughout, \
             {:.1} CPU s so far; {rt}{pin}",
            self.procs,
            self.kind.name(),
            if self.procs == 1 { "" } else { "es" },
            self.cpu_s()
        ))
    }
}

/// The running load processes, killed and reaped when dropped, whatever ends the run (an error
/// returned or a panic unwinding); if tsperf itself is killed, the kernel kills them
/// (PR_SET_PDEATHSIG).
pub struct LoadGuard {
    children: Vec<Child>,
}

impl LoadGuard {
    pub fn start(procs: usize, kind: LoadKind) -> Result<Self, String> {
        if procs > MAX_PROCS {
            return Err(format!("--load must be 0..={MAX_PROCS}"));
        }
        let mut g = LoadGuard {
            children: Vec::with_capacity(procs),
        };
        for _ in 0..procs {
            // On an error `g` drops here, taking the ones already started with it.
            g.children.push(spawn(kind)?);
        }
        Ok(g)
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Err unless every load process is still running and has been on a CPU: otherwise the
    /// figures were not measured under the load the report names.
    pub fn check(&mut self) -> Result<(), String> {
        for c in &mut self.children {
            let pid = c.id();
            if let Some(st) = c
                .try_wait()
                .map_err(|e| format!("load process {pid}: {e}"))?
            {
                return Err(format!("load process {pid} ended during the run ({st})"));
            }
            if cpu_ns(pid)? == 0 {
                return Err(format!("load process {pid} never ran"));
            }
        }
        Ok(())
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        // All signalled first, so none spins on while an earlier one is reaped.
        for c in &mut self.children {
            let _ = c.kill();
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

/// One load process, dying with tsperf, at normal priority whatever tsperf runs at.
fn spawn(kind: LoadKind) -> Result<Child, String> {
    let mut c = kind.command();
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let parent = std::process::id() as libc::pid_t;
    // Safety: the hook runs in the forked child before exec, where only async-signal-safe
    // calls are sound; `in_child` makes only plain syscalls (prctl, getppid, setpriority,
    // sched_setscheduler) that neither lock nor allocate, and captures only a pid.
    unsafe { c.pre_exec(move || in_child(parent)) };
    c.spawn()
        .map_err(|e| format!("--load: cannot start {:?}: {e}", c.get_program()))
}

/// Between fork and exec: ask for SIGKILL when tsperf dies, then reset the priority.
/// PR_SET_PDEATHSIG fires when the forking *thread* exits: tsperf forks from its main thread.
fn in_child(parent: libc::pid_t) -> io::Result<()> {
    // Safety: prctl(PR_SET_PDEATHSIG) only sets this process's death signal.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // tsperf died before the prctl: nobody would kill this child, so it must not start.
    // Safety: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // Safety: setpriority on this process only; which/who are valid constants.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let normal = libc::sched_param { sched_priority: 0 };
    // Safety: `normal` is a valid sched_param that outlives the call; this process only.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &normal) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;

    fn alive(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn the_guard_kills_and_reaps_its_processes() {
        for kind in [LoadKind::Cpu, LoadKind::Mem] {
            let mut g = LoadGuard::start(2, kind).unwrap();
            let pids = g.pids();
            assert_eq!(pids.len(), 2);
            std::thread::sleep(Duration::from_millis(100));
            assert!(pids.iter().all(|&p| alive(p)), "{kind:?}: not started");
            g.check().unwrap();
            let load = Load {
                procs: 2,
                kind,
                pids: pids.clone(),
                ..Load::default()
            };
            assert!(load.cpu_s() > 0.0);
            drop(g);
            // Reaped, not zombies: /proc/<pid> is gone only once waited for.
            assert!(pids.iter().all(|&p| !alive(p)), "{kind:?}: survived");
        }
    }

    #[test]
    fn a_load_process_that_ended_fails_the_check() {
        let mut g = LoadGuard::start(2, LoadKind::Cpu).unwrap();
        g.children[1].kill().unwrap();
        g.children[1].wait().unwrap();
        assert!(g.check().unwrap_err().contains("ended during the run"));
    }

    #[test]
    fn no_load_starts_nothing_and_too_much_is_refused() {
        let g = LoadGuard::start(0, LoadKind::Cpu).unwrap();
        assert!(g.pids().is_empty());
        assert!(LoadGuard::start(MAX_PROCS + 1, LoadKind::Cpu).is_err());
        assert_eq!(Load::default().line(), None);
    }
}
