//! The stop flag of a long-running subcommand (the lab, the device host, the TAP bridge): set
//! by a signal, looked at by the serving loop after every bounded wait.
//!
//! signal-hook installs the handlers (sigaction; the handler only stores to the atomic, which is
//! async-signal-safe). Its SA_RESTART does not delay a stop: poll/ppoll, which every loop here
//! waits in, are never restarted after a handler and return EINTR (signal(7)).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};

/// A stop flag a signal can set; a `static` of this type derefs to `AtomicBool`.
pub type StopFlag = LazyLock<Arc<AtomicBool>>;

/// A new, unset stop flag, for a `static`.
pub const fn stop_flag() -> StopFlag {
    LazyLock::new(|| Arc::new(AtomicBool::new(false)))
}

/// Makes each of `signals` set `flag` (and nothing else: the process no longer dies of them).
/// SIGKILL, SIGSTOP and the fault signals cannot be caught this way: an error, not a panic.
pub fn stop_on(signals: &[libc::c_int], flag: &StopFlag) -> std::io::Result<()> {
    if let Some(s) = signals
        .iter()
        .find(|s| signal_hook::consts::FORBIDDEN.contains(s))
    {
        let e = format!("signal {s} cannot be caught");
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, e));
    }
    for &s in signals {
        signal_hook::flag::register(s, Arc::clone(flag))?;
    }
    Ok(())
}

/// For a subcommand's `main`: SIGINT, SIGTERM and SIGHUP set `flag`; a failure is reported
/// as `cmd: …` and is the exit code to return.
pub fn stop_on_interrupt(cmd: &str, flag: &StopFlag) -> Result<(), std::process::ExitCode> {
    stop_on(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP], flag).map_err(|e| {
        eprintln!("{cmd}: signal handlers: {e}");
        std::process::ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    static FLAG: StopFlag = stop_flag();

    #[test]
    fn a_signal_sets_the_flag_and_does_not_kill() {
        stop_on(&[libc::SIGUSR2], &FLAG).unwrap();
        assert!(!FLAG.load(Ordering::SeqCst));
        // Safety: raise only delivers SIGUSR2 to this thread, whose handler is installed above.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
        assert!(FLAG.load(Ordering::SeqCst));
    }

    #[test]
    fn a_refused_signal_is_an_error() {
        let e = stop_on(&[libc::SIGKILL], &stop_flag()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    }
}
