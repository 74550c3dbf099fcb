//! Which readiness protocol a daemon speaks (shared/reference/redox-platform.md §9), decided
//! from what its starter left in the environment. Pure, so the choice is tested on the host;
//! the Redox side (`redox::daemon`) carries it out.
//!
//! - `INIT_NOTIFY=<fd>` (init's `type = "notify"` units, newer pcid-spawner): write one byte to
//!   that descriptor when ready, no fork.
//! - A starter that waits for the process to exit (the 2025-11 pcid-spawner: a driver with a
//!   `PCID_CLIENT_CHANNEL` and no `INIT_NOTIFY`): fork; the parent exits once the child is ready.
//! - Anything else is a daemon started by hand: it runs in the foreground and signals nothing.
//!   Forking there only loses the process's output to a detached child and, when the shell
//!   closes the pipe, fails the child's readiness write (seen on a Redox boot: "readiness write:
//!   Broken pipe", exit 1).

/// The environment variable of the notify protocol.
pub const INIT_NOTIFY: &str = "INIT_NOTIFY";

/// How readiness is signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadinessMode {
    /// Write one `0` byte to this descriptor.
    Notify(i32),
    /// Fork; the parent waits on a private pipe and exits with the child's byte.
    Fork,
    /// Nobody waits: run in the foreground.
    Foreground,
}

impl std::fmt::Display for ReadinessMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Notify(fd) => write!(f, "{INIT_NOTIFY} (fd {fd})"),
            Self::Fork => f.write_str("fork (the starter waits for the first process to exit)"),
            Self::Foreground => {
                f.write_str("none (not started by init or pcid-spawner: running in the foreground)")
            }
        }
    }
}

/// The decision, and why a present `INIT_NOTIFY` was not used (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub mode: ReadinessMode,
    pub ignored: Option<String>,
}

/// Chooses the protocol. `init_notify` is the variable's value, `fd_is_open` tells whether a
/// descriptor number is open in this process, and `starter_waits_for_exit` whether the starter
/// is one that waits for the process to exit (see the module documentation).
///
/// An `INIT_NOTIFY` that is not an open descriptor (inherited by a shell and passed on to a
/// daemon run by hand) is ignored, not fatal: such a daemon must still run.
pub fn choose(
    init_notify: Option<&str>,
    fd_is_open: impl Fn(i32) -> bool,
    starter_waits_for_exit: bool,
) -> Choice {
    let mut ignored = None;
    if let Some(v) = init_notify {
        match v.trim().parse::<i32>() {
            Ok(fd) if fd >= 0 && fd_is_open(fd) => {
                return Choice {
                    mode: ReadinessMode::Notify(fd),
                    ignored: None,
                };
            }
            Ok(fd) if fd >= 0 => ignored = Some(format!("{INIT_NOTIFY}={fd} is not open")),
            _ => ignored = Some(format!("{INIT_NOTIFY}={v:?} is not a descriptor")),
        }
    }
    let mode = if starter_waits_for_exit {
        ReadinessMode::Fork
    } else {
        ReadinessMode::Foreground
    };
    Choice { mode, ignored }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_3(fd: i32) -> bool {
        fd == 3
    }

    #[test]
    fn init_notify_wins_when_its_descriptor_is_open() {
        for waits in [false, true] {
            let c = choose(Some("3"), open_3, waits);
            assert_eq!(c.mode, ReadinessMode::Notify(3));
            assert_eq!(c.ignored, None);
        }
        assert_eq!(
            choose(Some(" 3\n"), open_3, false).mode,
            ReadinessMode::Notify(3)
        );
    }

    #[test]
    fn started_by_hand_runs_in_the_foreground() {
        let c = choose(None, open_3, false);
        assert_eq!(c.mode, ReadinessMode::Foreground);
        assert_eq!(c.ignored, None);
    }

    #[test]
    fn a_starter_that_waits_for_exit_gets_the_fork_protocol() {
        assert_eq!(choose(None, open_3, true).mode, ReadinessMode::Fork);
    }

    #[test]
    fn a_stale_or_malformed_init_notify_is_ignored_not_fatal() {
        for (v, why) in [
            ("7", "is not open"),
            ("-1", "is not a descriptor"),
            ("pipe", "is not a descriptor"),
            ("", "is not a descriptor"),
        ] {
            let c = choose(Some(v), open_3, false);
            assert_eq!(c.mode, ReadinessMode::Foreground, "{v:?}");
            assert!(
                c.ignored.as_deref().is_some_and(|s| s.contains(why)),
                "{v:?}: {c:?}"
            );
            assert_eq!(choose(Some(v), open_3, true).mode, ReadinessMode::Fork);
        }
    }

    #[test]
    fn every_mode_says_what_it_is() {
        assert!(ReadinessMode::Notify(5).to_string().contains("fd 5"));
        assert!(ReadinessMode::Fork.to_string().starts_with("fork"));
        assert!(ReadinessMode::Foreground.to_string().contains("foreground"));
    }
}
