//! Child processes that never outlive the lab: each child gets PR_SET_PDEATHSIG, and
//! [`Children`] stops them (SIGTERM, then SIGKILL after a grace period) on drop.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

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
