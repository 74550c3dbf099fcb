//! Child processes that never outlive the lab: each child gets PR_SET_PDEATHSIG, and
//! [`Children`] stops them (SIGTERM, then SIGKILL after a grace period) on drop. A child that
//! dies may be restarted under a [`RestartPolicy`] ([`Backoff`] decides when, and when to give
//! up), as a reincarnation server does.

use std::collections::VecDeque;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How a supervisor restarts a child that died: after a delay doubling from `first` up to
/// `max` with each restart inside `window`, and not at all once `limit` restarts happened
/// inside `window` (a crash loop: restarting again would only hide it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    pub first: Duration,
    pub max: Duration,
    pub limit: usize,
    pub window: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            first: Duration::from_millis(100),
            max: Duration::from_secs(5),
            limit: 5,
            window: Duration::from_secs(30),
        }
    }
}

/// What to do about a child that died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after this delay.
    RestartIn(Duration),
    /// It died `limit` times within `window` already: stop.
    GiveUp,
}

/// One child's restart history.
#[derive(Debug, Default, Clone)]
pub struct Backoff {
    restarts: VecDeque<Instant>,
}

impl Backoff {
    /// The child died at `now`: restart it (when), or give up.
    pub fn on_death(&mut self, p: &RestartPolicy, now: Instant) -> Decision {
        while self
            .restarts
            .front()
            .is_some_and(|t| now.duration_since(*t) >= p.window)
        {
            self.restarts.pop_front();
        }
        if self.restarts.len() >= p.limit {
            return Decision::GiveUp;
        }
        let doublings = self.restarts.len().min(20) as u32;
        let delay = p.first.saturating_mul(1 << doublings).min(p.max);
        self.restarts.push_back(now);
        Decision::RestartIn(delay)
    }
}

/// Why a child ended, for a log line ("killed by signal 9 (SIGKILL)", "exit status 1").
pub fn describe_exit(s: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig} ({})", signal_name(sig)),
        _ => s.to_string(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGBUS => "SIGBUS",
        _ => "other",
    }
}

/// A set of running children, stopped in reverse start order on drop.
#[derive(Default)]
pub struct Children {
    procs: Vec<(String, Child)>,
}

impl Children {
    /// Starts `cmd`, arranging for the kernel to kill it if this process dies first.
    pub fn spawn(&mut self, name: &str, mut cmd: Command) -> std::io::Result<u32> {
        // Safety: the closure runs in the forked child before exec and only calls
        // async-signal-safe functions (prctl, getppid, _exit).
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl.
                if libc::getppid() == 1 {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        let pid = child.id();
        self.procs.push((name.to_string(), child));
        Ok(pid)
    }

    /// Names of children that have exited, with their status.
    pub fn exited(&mut self) -> Vec<(String, std::process::ExitStatus)> {
        self.procs
            .iter_mut()
            .filter_map(|(n, c)| c.try_wait().ok().flatten().map(|s| (n.clone(), s)))
            .collect()
    }

    /// Waits up to `timeout` for `path` to exist (a ready file, a socket a child binds); an
    /// error naming any child that exited meanwhile, or the timeout.
    pub fn wait_for_path(
        &mut self,
        path: &std::path::Path,
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while !path.exists() {
            let gone = self.exited();
            if !gone.is_empty() {
                return Err(format!(
                    "{} did not appear: exited {gone:?}",
                    path.display()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not appear within {timeout:?}",
                    path.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Children that have exited, with their status, forgotten (so one restarted under the same
    /// name is not reported again).
    pub fn take_exited(&mut self) -> Vec<(String, ExitStatus)> {
        let mut out = Vec::new();
        self.procs.retain_mut(|(n, c)| match c.try_wait() {
            Ok(Some(s)) => {
                out.push((n.clone(), s));
                false
            }
            _ => true,
        });
        out
    }

    /// The pid of a running child.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.procs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.id())
    }

    /// Sends `sig` to a child (not reaped yet, so its pid is still its own).
    pub fn signal(&mut self, name: &str, sig: i32) -> std::io::Result<u32> {
        let (_, c) = self
            .procs
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| std::io::Error::other(format!("no child {name}")))?;
        if matches!(c.try_wait(), Ok(Some(_))) {
            return Err(std::io::Error::other(format!("{name} has exited")));
        }
        // Safety: kill(2) on the pid of a child we have not reaped, so it cannot be reused.
        if unsafe { libc::kill(c.id() as i32, sig) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(c.id())
    }

    /// Stops one child by name (SIGTERM, bounded wait, SIGKILL) and forgets it.
    pub fn stop(&mut self, name: &str) {
        if let Some(i) = self.procs.iter().position(|(n, _)| n == name) {
            let (_, mut c) = self.procs.remove(i);
            stop_child(&mut c);
        }
    }

    /// Stops every child.
    pub fn stop_all(&mut self) {
        while let Some((_, mut c)) = self.procs.pop() {
            stop_child(&mut c);
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.stop_all();
    }
}

const GRACE: Duration = Duration::from_secs(2);

fn stop_child(c: &mut Child) {
    if matches!(c.try_wait(), Ok(Some(_))) {
        return;
    }
    // Safety: kill(2) on the pid of a child we have not yet reaped, so it cannot be reused.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        if matches!(c.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = c.kill();
    let _ = c.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_gives_up_on_a_crash_loop() {
        let p = RestartPolicy::default();
        let t0 = Instant::now();
        let mut b = Backoff::default();
        let ms = |n| Decision::RestartIn(Duration::from_millis(n));
        let seen: Vec<Decision> = (0..6)
            .map(|k| b.on_death(&p, t0 + Duration::from_secs(k)))
            .collect();
        assert_eq!(
            seen,
            [
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1600),
                Decision::GiveUp
            ]
        );
        // Deaths spread out beyond the window start over.
        let mut b = Backoff::default();
        for k in 0..10 {
            assert_eq!(b.on_death(&p, t0 + Duration::from_secs(31 * k)), ms(100));
        }
        // The cap.
        let p = RestartPolicy { limit: 100, ..p };
        let mut b = Backoff::default();
        let last = (0..10).map(|_| b.on_death(&p, t0)).last();
        assert_eq!(last, Some(Decision::RestartIn(Duration::from_secs(5))));
    }

    #[test]
    fn exit_descriptions_name_the_signal() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            describe_exit(&ExitStatus::from_raw(9)),
            "killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            describe_exit(&ExitStatus::from_raw(1 << 8)),
            "exit status 1"
        );
    }
}
