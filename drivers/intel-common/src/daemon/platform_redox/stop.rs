//! SIGTERM and SIGINT as a request to stop: the handler only records the signal and wakes the
//! event loop through the wake pipe (write(2) is async-signal-safe; nothing else is done in the
//! handler), and the loop then stops the NIC's DMA and returns ([`super::serve`]). SIGKILL
//! cannot be caught: a killed driver leaves the DMA running, which the next driver stops first
//! ([`crate::daemon::Device::claim`]).

use std::sync::atomic::{AtomicI32, Ordering};

use libc::c_int;

/// The wake pipe's write end, for the handler (-1: none yet).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// The signal received (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let b = [2u8];
        // Safety: write(2) of one byte from `b`, alive for the call, to the non-blocking wake
        // pipe; async-signal-safe. A full pipe already holds a wake-up.
        let _ = unsafe { libc::write(fd, b.as_ptr().cast(), 1) };
    }
}

/// Installs the handler for SIGTERM and SIGINT, waking through `wake_fd`.
pub fn catch(wake_fd: c_int) -> std::io::Result<()> {
    WAKE_FD.store(wake_fd, Ordering::SeqCst);
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // Safety: a zeroed sigaction is a valid "no flags, empty mask" value to fill in.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        // Safety: sigemptyset on the mask of our own `sa`; sigaction with a handler that only
        // touches atomics and write(2), and no old action asked for.
        let rc = unsafe {
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The stop signal received so far, by name.
pub fn requested() -> Option<&'static str> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGINT => Some("SIGINT"),
        _ => Some("a stop signal"),
    }
}
