//! The machine's own floor for a delivery: one blocking wake-up of another process, measured
//! beside the stamps (issue 26: a stamp's p99.9 at 10 000/s is judged against 2× this
//! floor's p99.9 in the same run). A forked child echoes one byte over a pipe; each round trip
//! is two cross-process wake-ups, so a sample is half of it.

use std::time::{Duration, Instant};

use crate::stats::Latency;

/// A round trip slower than this means the echo is gone or stuck: the measurement stops.
const STALL: Duration = Duration::from_secs(2);

/// One-way cross-process wake-up latencies of `n` pipe ping-pongs with a forked child.
pub fn cross_process(n: usize) -> Result<Latency, String> {
    let (to_child, from_parent) = pipe()?;
    let (to_parent, from_child) = match pipe() {
        Ok(p) => p,
        Err(e) => {
            close(&[to_child, from_parent]);
            return Err(e);
        }
    };
    // Safety: the child runs only async-signal-safe calls (read, write, _exit) on descriptors
    // it inherited, so forking a multi-threaded process is sound here.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        close(&[to_child, from_parent, to_parent, from_child]);
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // The parent's ends must go, or the child's own write end keeps its read from EOF.
        close(&[to_child, from_child]);
        echo(from_parent, to_parent);
    }
    close(&[from_parent, to_parent]);
    let out = ping(to_child, from_child, n);
    // Closing our write end ends the child's loop.
    close(&[to_child, from_child]);
    let mut status = 0;
    // Safety: waits for our own child, which exits once its read end sees EOF.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    out
}

/// The child: echoes bytes until EOF, then exits without running the parent's destructors.
fn echo(rd: i32, wr: i32) -> ! {
    let mut b = 0u8;
    loop {
        // Safety: reads one byte into a live stack byte from an inherited descriptor.
        let r = unsafe { libc::read(rd, (&raw mut b).cast(), 1) };
        let w = if r == 1 {
            // Safety: writes that byte back on the other inherited descriptor.
            unsafe { libc::write(wr, (&raw const b).cast(), 1) }
        } else {
            0
        };
        if w != 1 {
            // Safety: _exit ends the child at once, as a forked child must.
            unsafe { libc::_exit(0) };
        }
    }
}

fn ping(wr: i32, rd: i32, n: usize) -> Result<Latency, String> {
    let mut h = Latency::default();
    let mut b = 1u8;
    for _ in 0..n {
        let t = Instant::now();
        // Safety: one byte from a live stack byte to our pipe's write end.
        if unsafe { libc::write(wr, (&raw const b).cast(), 1) } != 1 {
            return Err(format!("echo write: {}", std::io::Error::last_os_error()));
        }
        let mut p = libc::pollfd {
            fd: rd,
            events: libc::POLLIN,
            revents: 0,
        };
        // Safety: polls one valid pollfd for a bounded time.
        let ready = unsafe { libc::poll(&mut p, 1, STALL.as_millis() as i32) };
        // Safety: one byte into a live stack byte from our pipe's read end.
        if ready != 1 || unsafe { libc::read(rd, (&raw mut b).cast(), 1) } != 1 {
            return Err("the wake-up echo stopped answering".into());
        }
        h.record_ns(t.elapsed().as_nanos() as u64 / 2);
    }
    Ok(h)
}

fn pipe() -> Result<(i32, i32), String> {
    let mut fds = [0i32; 2];
    // Safety: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    Ok((fds[1], fds[0]))
}

fn close(fds: &[i32]) {
    for &fd in fds {
        // Safety: closes descriptors this module opened and owns.
        unsafe { libc::close(fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_measured() {
        let h = cross_process(200).expect("echo");
        assert_eq!(h.len(), 200);
        // A wake-up takes at least a syscall.
        assert!(h.quantile_ns(0.5) > 0);
    }
}
