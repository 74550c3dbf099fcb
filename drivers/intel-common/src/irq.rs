//! When interrupts do not arrive: an IRQ thread's pacing between waiting for its vector and
//! polling its cause registers (shared/reference/redox-platform.md §14: under QEMU TCG a device
//! served through `x-pci-proxy-dev` delivers no interrupt at all).
//!
//! An IRQ thread waits on its vector at most [`Pacer::timeout`], then handles its causes
//! whether or not the vector fired (a bounded wait that finds work is a missed interrupt). After
//! [`MISSES_TO_POLL`] missed interrupts with no working one in between, or from the start when
//! there is no vector or the driver is told to poll, it polls: it still waits on the vector,
//! but only for the poll interval, so a late interrupt costs nothing and a dead one costs at
//! most one interval of latency. The mode is logged when chosen and when it changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ptp_pci::{IrqVector, IrqWait};

/// What an IRQ thread does after an interrupt (`--irq-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqStyle {
    /// Handle the causes once, re-arm the vector, wait again.
    Plain,
    /// NAPI-style: keep polling while work keeps coming, re-arm only when idle ([`Napi`]).
    Napi(Napi),
}

/// The bounds of NAPI-style polling (Linux's NAPI polls a device with its interrupt masked
/// until a poll finds less than its budget; here a thread also spins briefly while it knows
/// work is due, e.g. a TX timestamp it asked for).
///
/// After an interrupt, the thread's polls run without waiting while they find work, at most
/// [`Napi::budget`] of them; a poll that finds nothing while a TX stamp the thread asked for is
/// due starts a spin of at most [`Napi::spin`] (polling every [`SPIN_GAP`]) that ends when work
/// comes (polling goes on) or runs out (the vector is re-armed and the thread sleeps); one that
/// finds nothing else ends the session. Frames are not predicted, so they get no spin. The vector stays masked (auto-masked when it
/// fired) throughout, so work that arrives meanwhile costs no interrupt; it is re-armed on every
/// exit, whatever the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Napi {
    /// Longest spin with nothing found before re-arming.
    pub spin: Duration,
    /// Most passes that find work before the thread re-arms anyway (and a pending interrupt
    /// wakes it again at once): the bound on one polling session.
    pub budget: u32,
}

/// How long a spinning thread waits between two polls: on hardware a poll is an MMIO read of
/// about a microsecond; on the emulated NIC it takes the bus lock the transmit path needs.
pub const SPIN_GAP: Duration = Duration::from_micros(1);

/// Default [`Napi::spin`].
pub const DEFAULT_SPIN: Duration = Duration::from_micros(30);
/// Default [`Napi::budget`].
pub const DEFAULT_BUDGET: u32 = 64;

impl Default for Napi {
    fn default() -> Self {
        Self {
            spin: DEFAULT_SPIN,
            budget: DEFAULT_BUDGET,
        }
    }
}

/// Missed interrupts (work found by a wait that timed out), with no delivered interrupt that
/// carried work in between, after which a thread polls. More than one, so that a cause raised
/// just as a wait timed out (its interrupt still in flight) does not switch a working vector.
pub const MISSES_TO_POLL: u32 = 2;

/// How a thread learns of its causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Waits for the vector, checking the causes when a bounded wait ends anyway.
    Interrupts,
    /// Checks the causes every poll interval (waking early if the vector fires).
    Polling,
}

/// One IRQ thread's pacing.
#[derive(Debug)]
pub struct Pacer {
    name: &'static str,
    pace: Pace,
    misses: u32,
    /// Longest wait for an interrupt before the causes are checked anyway.
    bound: Duration,
    interval: Duration,
    /// Set once this thread polls (shared with the device, for status and tests).
    polling: Arc<AtomicBool>,
}

impl Pacer {
    /// A pacer for thread `name`: polling from the start when it `has_vector` not or `poll` is
    /// set, else waiting up to `bound` for interrupts. Logs the mode.
    pub fn new(
        name: &'static str,
        has_vector: bool,
        poll: bool,
        bound: Duration,
        interval: Duration,
        polling: Arc<AtomicBool>,
    ) -> Self {
        let pace = if has_vector && !poll {
            log::info!(
                "{name}: interrupt-driven; polls every {interval:?} after {MISSES_TO_POLL} \
                 interrupts missing for {bound:?}"
            );
            Pace::Interrupts
        } else {
            let why = if poll {
                "as told"
            } else {
                "no interrupt vector"
            };
            log::info!("{name}: polling the cause registers every {interval:?} ({why})");
            polling.store(true, Ordering::Relaxed);
            Pace::Polling
        };
        Self {
            name,
            pace,
            misses: 0,
            bound,
            interval,
            polling,
        }
    }

    pub fn pace(&self) -> Pace {
        self.pace
    }

    /// How long the next wait may last.
    pub fn timeout(&self) -> Duration {
        match self.pace {
            Pace::Interrupts => self.bound,
            Pace::Polling => self.interval,
        }
    }

    /// Waits on `irq` (or sleeps, without a vector) for [`Self::timeout`].
    pub fn wait<I: IrqVector + ?Sized>(&self, irq: Option<&I>) -> IrqWait {
        self.wait_at_most(irq, None)
    }

    /// [`Self::wait`], but no longer than `cap` when given (a thread with a deadline of its
    /// own, such as a pending TX stamp it must poll for).
    pub fn wait_at_most<I: IrqVector + ?Sized>(
        &self,
        irq: Option<&I>,
        cap: Option<Duration>,
    ) -> IrqWait {
        let t = cap.map_or(self.timeout(), |c| c.min(self.timeout()));
        match irq {
            Some(v) => v.wait(t),
            None => {
                std::thread::sleep(t);
                IrqWait::TimedOut
            }
        }
    }

    /// Records one pass: how its wait ended and whether it found work. Returns true when this
    /// pass switched the thread to polling.
    pub fn record(&mut self, woke: IrqWait, work: bool) -> bool {
        if self.pace == Pace::Polling {
            return false;
        }
        match (woke, work) {
            (IrqWait::Fired, true) => self.misses = 0,
            (IrqWait::TimedOut, true) => self.misses += 1,
            _ => {}
        }
        if self.misses < MISSES_TO_POLL {
            return false;
        }
        log::warn!(
            "{}: causes pending with no interrupt within {:?} ({} times): polling the cause \
             registers every {:?} from now on",
            self.name,
            self.bound,
            self.misses,
            self.interval
        );
        self.pace = Pace::Polling;
        self.polling.store(true, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_millis(100);
    const EVERY: Duration = Duration::from_millis(1);

    fn pacer(has_vector: bool, poll: bool) -> (Pacer, Arc<AtomicBool>) {
        let flag = Arc::new(AtomicBool::new(false));
        (
            Pacer::new("t", has_vector, poll, BOUND, EVERY, flag.clone()),
            flag,
        )
    }

    #[test]
    fn a_working_vector_stays_interrupt_driven() {
        let (mut p, flag) = pacer(true, false);
        assert_eq!((p.pace(), p.timeout()), (Pace::Interrupts, BOUND));
        for _ in 0..100 {
            assert!(!p.record(IrqWait::Fired, true));
            // Idle bounded waits and interrupts that find nothing (a shared line) are no misses.
            assert!(!p.record(IrqWait::TimedOut, false));
            assert!(!p.record(IrqWait::Fired, false));
        }
        assert_eq!(p.pace(), Pace::Interrupts);
        assert!(!flag.load(Ordering::Relaxed));
    }

    #[test]
    fn a_single_miss_between_working_interrupts_does_not_switch() {
        let (mut p, _) = pacer(true, false);
        for _ in 0..100 {
            assert!(!p.record(IrqWait::TimedOut, true));
            assert!(!p.record(IrqWait::Fired, true));
        }
        assert_eq!(p.pace(), Pace::Interrupts);
    }

    #[test]
    fn repeated_misses_switch_to_polling_even_with_idle_waits_between() {
        let (mut p, flag) = pacer(true, false);
        assert!(!p.record(IrqWait::TimedOut, true));
        // Sparse traffic: idle waits and foreign interrupts do not reset the count.
        assert!(!p.record(IrqWait::TimedOut, false));
        assert!(!p.record(IrqWait::Fired, false));
        assert!(p.record(IrqWait::TimedOut, true));
        assert_eq!((p.pace(), p.timeout()), (Pace::Polling, EVERY));
        assert!(flag.load(Ordering::Relaxed));
        // Polling is for good; a late interrupt changes nothing.
        assert!(!p.record(IrqWait::Fired, true));
        assert_eq!(p.pace(), Pace::Polling);
    }

    #[test]
    fn no_vector_or_told_to_poll_polls_from_the_start() {
        for (has_vector, poll) in [(false, false), (true, true), (false, true)] {
            let (p, flag) = pacer(has_vector, poll);
            assert_eq!((p.pace(), p.timeout()), (Pace::Polling, EVERY));
            assert!(flag.load(Ordering::Relaxed));
        }
    }

    #[test]
    fn waiting_without_a_vector_sleeps_one_interval() {
        struct Never;
        impl IrqVector for Never {
            fn wait(&self, _: Duration) -> IrqWait {
                unreachable!("no vector to wait on")
            }
        }
        let (p, _) = pacer(false, false);
        let t = std::time::Instant::now();
        assert_eq!(p.wait(None::<&Never>), IrqWait::TimedOut);
        assert!(t.elapsed() >= EVERY);
    }
}
