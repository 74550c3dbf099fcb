//! Test support shared by the workspace's crates (Linux only): nothing here is used at run time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Runs `f` on a thread named `name` (≤ 15 bytes, unique per test) and returns once that thread
/// is asleep in the kernel after announcing it is about to make the blocking call: its
/// /proc/self/task/<tid>/stat state is 'S'. Between the announcement and the call nothing
/// sleeps, so a test that then wakes it proves it woke a blocked waiter, not one that had not
/// reached the call yet. Bounded: panics after `timeout`, or if `f` returns without blocking.
pub fn spawn_blocked<T: Send + 'static>(
    name: &str,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let armed = Arc::new(AtomicBool::new(false));
    let a = armed.clone();
    let h = thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            a.store(true, Ordering::SeqCst);
            f()
        })
        .expect("spawn a test thread");
    let deadline = Instant::now() + timeout;
    while !(armed.load(Ordering::SeqCst) && thread_state(name) == Some('S')) {
        assert!(!h.is_finished(), "{name}: returned without blocking");
        assert!(Instant::now() < deadline, "{name}: never blocked");
        thread::sleep(Duration::from_micros(200));
    }
    h
}

/// The scheduler state of this process's thread named `name`, from /proc/self/task/*/stat.
pub fn thread_state(name: &str) -> Option<char> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // "tid (comm) S ...": the state follows the last ')'.
            return stat[stat.rfind(')')? + 1..].trim_start().chars().next();
        }
    }
    None
}
