//! Real-time service for the time path (issue 26). The threads a timestamp crosses — a driver's
//! IRQ thread and the thread serving its channel, ptpd's driver-link and engine threads,
//! tsperf's reader — may run SCHED_FIFO and be pinned to one CPU, as a production Linux
//! driver's threaded interrupt handlers run (SCHED_FIFO 50), so a CPU-bound process beside the
//! daemons cannot hold a stamp for a scheduler slice. Explicit: nothing changes without `--rt`
//! (ptpd: `rt = true`), and a request the OS refuses is logged with why, never silent.
//!
//! Redox: the kit's relibc exports no sched_setscheduler or sched_setaffinity (`nm` of its
//! libc.a: only sched_yield, setpriority and nice), and its kernel (56947e1a) offers no
//! real-time class to request; a request there is refused with that reason.

use std::io;

/// Linux's threaded-IRQ priority, the default of `--rt`.
pub const DEFAULT_PRIORITY: i32 = 50;
/// The highest priority taken; 99 is left to the kernel's own watchdog and migration threads.
pub const MAX_PRIORITY: i32 = 98;

/// What a daemon was asked for: `priority` None is normal scheduling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtConfig {
    pub priority: Option<i32>,
    /// Pin the time-path threads to this CPU (`--cpu`).
    pub cpu: Option<usize>,
}

impl RtConfig {
    /// SCHED_FIFO at `priority` (clamped to 1..=[`MAX_PRIORITY`]).
    pub fn fifo(priority: i32) -> Self {
        RtConfig {
            priority: Some(priority.clamp(1, MAX_PRIORITY)),
            cpu: None,
        }
    }

    pub fn is_on(&self) -> bool {
        self.priority.is_some()
    }

    /// The same request `offset` levels higher (an emulated NIC's model thread stands in for
    /// hardware, which no driver thread may preempt), clamped to 1..=[`MAX_PRIORITY`].
    pub fn raised(&self, offset: i32) -> Self {
        RtConfig {
            priority: self.priority.map(|p| (p + offset).clamp(1, MAX_PRIORITY)),
            cpu: self.cpu,
        }
    }

    /// The daemons' command-line form of this request, for whoever starts them (the lab,
    /// tsperf): `--rt-priority P` and `--cpu N`, or nothing.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(p) = self.priority {
            a.extend(["--rt-priority".to_string(), p.to_string()]);
        }
        if let Some(c) = self.cpu {
            a.extend(["--cpu".to_string(), c.to_string()]);
        }
        a
    }
}

/// Parses a `--rt-priority` value: 1..=[`MAX_PRIORITY`].
pub fn parse_priority(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(p) if (1..=MAX_PRIORITY).contains(&p) => Ok(p),
        _ => Err(format!(
            "real-time priority {s:?}: must be 1..={MAX_PRIORITY}"
        )),
    }
}

/// One part of a request and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant<T> {
    NotAsked,
    Granted(T),
    /// Asked for and refused (why): the thread goes on without it.
    Refused(String),
}

/// What a thread got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtOutcome {
    pub fifo: Grant<i32>,
    pub cpu: Grant<usize>,
}

impl RtOutcome {
    /// Whether any part of the request was refused.
    pub fn refused(&self) -> bool {
        matches!(self.fifo, Grant::Refused(_)) || matches!(self.cpu, Grant::Refused(_))
    }
}

/// What the OS does for the calling thread; a trait so the decision is tested without
/// privileges.
pub trait Scheduler {
    fn set_fifo(&mut self, priority: i32) -> io::Result<()>;
    fn pin(&mut self, cpu: usize) -> io::Result<()>;
}

/// The calling thread, through the OS.
pub struct ThisThread;

#[cfg(target_os = "linux")]
impl Scheduler for ThisThread {
    fn set_fifo(&mut self, priority: i32) -> io::Result<()> {
        let param = libc::sched_param {
            sched_priority: priority,
        };
        // RESET_ON_FORK: threads this one starts later (a per-job or per-client thread) begin
        // at normal priority instead of inheriting the real-time class.
        let policy = libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK;
        // Safety: pid 0 is the calling thread; `param` is a valid sched_param that outlives the
        // call.
        if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn pin(&mut self, cpu: usize) -> io::Result<()> {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // Safety: an all-zero cpu_set_t is the empty set; CPU_SET stays inside it (checked
        // above); pid 0 is the calling thread and the size is the set's own.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
impl Scheduler for ThisThread {
    fn set_fifo(&mut self, _priority: i32) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no real-time scheduling class on this OS (Redox: relibc has no sched_setscheduler)",
        ))
    }

    fn pin(&mut self, _cpu: usize) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no CPU affinity on this OS (Redox: relibc has no sched_setaffinity)",
        ))
    }
}

/// Applies `cfg` to the calling thread (named `role` in the log) and says what it got.
pub fn apply(cfg: &RtConfig, role: &str) -> RtOutcome {
    apply_with(cfg, role, &mut ThisThread)
}

/// [`apply`] through `os`: pins first (so the thread never runs real-time on a CPU it was not
/// meant for), then SCHED_FIFO; each refusal logged as a warning with what to do about it.
pub fn apply_with(cfg: &RtConfig, role: &str, os: &mut impl Scheduler) -> RtOutcome {
    let cpu = match cfg.cpu {
        None => Grant::NotAsked,
        Some(c) => match os.pin(c) {
            Ok(()) => Grant::Granted(c),
            Err(e) => Grant::Refused(format!("pinning to CPU {c}: {e}")),
        },
    };
    let fifo = match cfg.priority {
        None => Grant::NotAsked,
        Some(p) => match os.set_fifo(p) {
            Ok(()) => Grant::Granted(p),
            Err(e) => Grant::Refused(refusal(p, &e)),
        },
    };
    let out = RtOutcome { fifo, cpu };
    log_outcome(role, &out);
    out
}

/// Why SCHED_FIFO `p` was refused, with the usual fix for EPERM.
fn refusal(p: i32, e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::PermissionDenied {
        format!(
            "SCHED_FIFO {p}: {e} (needs root or CAP_SYS_NICE, or RLIMIT_RTPRIO ≥ {p}; a cgroup \
             without a real-time budget refuses even root)"
        )
    } else {
        format!("SCHED_FIFO {p}: {e}")
    }
}

fn log_outcome(role: &str, out: &RtOutcome) {
    for why in [out.cpu.refused_why(), out.fifo.refused_why()]
        .into_iter()
        .flatten()
    {
        log::warn!("{role} thread: {why}; it runs without it");
    }
    match (&out.fifo, &out.cpu) {
        (Grant::NotAsked, Grant::NotAsked) => {
            log::debug!("{role} thread: normal priority (no --rt)")
        }
        (Grant::Granted(p), Grant::Granted(c)) => {
            log::info!("{role} thread: SCHED_FIFO {p}, pinned to CPU {c}")
        }
        (Grant::Granted(p), _) => log::info!("{role} thread: SCHED_FIFO {p}"),
        (_, Grant::Granted(c)) => log::info!("{role} thread: pinned to CPU {c}"),
        _ => {}
    }
}

impl<T> Grant<T> {
    fn refused_why(&self) -> Option<&str> {
        match self {
            Grant::Refused(why) => Some(why),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scheduler that grants or refuses as told and records what was asked.
    #[derive(Default)]
    struct Fake {
        fifo: Option<io::ErrorKind>,
        pin: Option<io::ErrorKind>,
        calls: Vec<String>,
    }

    impl Scheduler for Fake {
        fn set_fifo(&mut self, p: i32) -> io::Result<()> {
            self.calls.push(format!("fifo {p}"));
            self.fifo.map_or(Ok(()), |k| Err(k.into()))
        }
        fn pin(&mut self, c: usize) -> io::Result<()> {
            self.calls.push(format!("pin {c}"));
            self.pin.map_or(Ok(()), |k| Err(k.into()))
        }
    }

    #[test]
    fn off_asks_the_os_nothing() {
        let mut os = Fake::default();
        let out = apply_with(&RtConfig::default(), "irq", &mut os);
        assert_eq!(
            out,
            RtOutcome {
                fifo: Grant::NotAsked,
                cpu: Grant::NotAsked
            }
        );
        assert!(os.calls.is_empty() && !out.refused());
    }

    #[test]
    fn permitted_is_granted_pin_first() {
        let mut os = Fake::default();
        let cfg = RtConfig {
            cpu: Some(1),
            ..RtConfig::fifo(50)
        };
        let out = apply_with(&cfg, "irq", &mut os);
        assert_eq!(out.fifo, Grant::Granted(50));
        assert_eq!(out.cpu, Grant::Granted(1));
        assert_eq!(os.calls, ["pin 1", "fifo 50"]);
    }

    #[test]
    fn refused_is_reported_with_the_fix_and_the_rest_still_applies() {
        let mut os = Fake {
            fifo: Some(io::ErrorKind::PermissionDenied),
            ..Fake::default()
        };
        let cfg = RtConfig {
            cpu: Some(0),
            ..RtConfig::fifo(50)
        };
        let out = apply_with(&cfg, "irq", &mut os);
        assert!(out.refused());
        assert_eq!(out.cpu, Grant::Granted(0));
        match &out.fifo {
            Grant::Refused(why) => assert!(why.contains("CAP_SYS_NICE"), "{why}"),
            g => panic!("{g:?}"),
        }
        // A refused pin does not stop the priority.
        let mut os = Fake {
            pin: Some(io::ErrorKind::InvalidInput),
            ..Fake::default()
        };
        let out = apply_with(&cfg, "irq", &mut os);
        assert!(matches!(out.cpu, Grant::Refused(_)));
        assert_eq!(out.fifo, Grant::Granted(50));
    }

    #[test]
    fn priorities_stay_in_range_and_pass_on_as_arguments() {
        assert_eq!(RtConfig::fifo(120).priority, Some(MAX_PRIORITY));
        assert_eq!(RtConfig::fifo(50).raised(10).priority, Some(60));
        assert_eq!(RtConfig::fifo(95).raised(10).priority, Some(MAX_PRIORITY));
        assert_eq!(RtConfig::default().raised(10), RtConfig::default());
        assert!(RtConfig::default().to_args().is_empty());
        let cfg = RtConfig {
            cpu: Some(1),
            ..RtConfig::fifo(40)
        };
        assert_eq!(cfg.to_args(), ["--rt-priority", "40", "--cpu", "1"]);
        assert_eq!(parse_priority("50"), Ok(50));
        for bad in ["0", "99", "-1", "x"] {
            assert!(parse_priority(bad).is_err(), "{bad}");
        }
    }

    /// The real call: granted as root (unless a cgroup refuses), refused with the fix
    /// otherwise; either way the outcome says which, and nothing panics.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_thread_gets_an_answer() {
        let h = std::thread::spawn(|| apply(&RtConfig::fifo(1), "test"));
        let out = h.join().unwrap();
        assert!(
            matches!(out.fifo, Grant::Granted(1) | Grant::Refused(_)),
            "{out:?}"
        );
    }
}
