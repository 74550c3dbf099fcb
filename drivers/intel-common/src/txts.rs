//! TX timestamp slots: the state the 2023 igc fixes put under one lock (reference §7.3, §7.4;
//! seed 000).
//!
//! Every piece of TX timestamp state — which sets are pending, for which request, since when,
//! whether timestamping is enabled — lives in [`TxTimestamps`] behind a single spin lock taken
//! by the transmit path, the IRQ thread and the watchdog. There is no separate "in progress"
//! flag to race with (patch 1/4), the enable check happens under the same lock as the slot
//! reservation (patch 2/4), retrieval runs on the IRQ thread (patch 3/4), and the TXSTMPH_0
//! interrupt-clear bug is worked around there (patch 4/4).
//!
//! The family supplies the registers through [`TsRegs`]; igc has four sets, igb one.

use intel_regs::e1000::{Reg, TsyncTxCtl};
use ptp_ipc::LostReason;
use ptp_pci::Mmio;

use crate::Regs;

/// Where a family's TX timestamp sets live.
#[derive(Debug, Clone, Copy)]
pub struct TsRegs {
    /// TSYNCTXCTL: valid bits (TXTT_n = bit n) and ENABLED.
    pub ctl: Reg<TsyncTxCtl>,
    /// TXSTMPL_n / TXSTMPH_n.
    pub low: &'static [u32],
    pub high: &'static [u32],
    /// Whether the TXSTMPH_0 interrupt-clear bug applies (i225/i226).
    pub txstmph0_quirk: bool,
    /// Whether a TXSTMPH_0 read clears every valid bit, not only TXTT_0 (igc driver comments,
    /// reference §7.1 [U]). When set, pending sets are checked for stamps whose bit was lost.
    pub h0_clears_all: bool,
    /// How TXSTMPL/H encode a stamp.
    pub format: StampFormat,
    /// Whether a set's TXSTMPL may be read with its valid bit clear and still shows the last
    /// stamp latched there (i225/i226: what the §7.2 workaround reads). Lets
    /// [`TxTimestamps::service`] find stamps without TSYNCTXCTL.
    pub probe_low: bool,
}

/// How a TXSTMPL/TXSTMPH pair encodes a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampFormat {
    /// L = ns, H = s (i225, i210): [`Delivered::raw_ns`] is the time in ns.
    SecNs,
    /// A raw counter, H:L (i350 40-bit ns, 82576 cycles): [`Delivered::raw_ns`] is that count,
    /// which the family's clock converts.
    Raw,
}

/// What the transmit path should do with a frame that wants a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// Stamp it in this set.
    Set(u8),
    /// Every set is busy: send unstamped; the request is lost (counted as skipped).
    Skipped,
    /// TX timestamping is off: send unstamped; not counted as skipped (patch 2/4).
    Disabled,
}

/// A timestamp retrieved for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Delivered {
    pub cookie: u64,
    /// The stamp in ns (or the raw count, see [`StampFormat`]), before latency compensation.
    pub raw_ns: u64,
    /// Host monotonic ns when the request was made (for latency figures).
    pub requested_mono_ns: u64,
}

/// A request that will get no timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    pub cookie: u64,
    pub reason: LostReason,
}

/// What one IRQ-thread pass found. Held inline (at most one stamp per set), so the interrupt
/// path allocates nothing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Retrieval {
    stamps: [Delivered; MAX_SETS],
    n: usize,
    /// Stamps recovered only thanks to the TXSTMPH_0 workaround (or the all-sets check).
    pub recovered: u64,
    /// Valid stamps nobody was waiting for (a freed slot's late stamp).
    pub stale: u64,
    /// Sets whose valid bit showed the stamp already consumed from them while a request waited:
    /// a bit that was not released (a stuck TXTT, or a late stamp the watchdog already passed
    /// over). The request keeps waiting; its own stamp never latched, so the watchdog reports
    /// it lost rather than hand it someone else's time.
    pub repeated: u64,
}

impl Retrieval {
    /// The stamps delivered, in the order they were read.
    pub fn delivered(&self) -> &[Delivered] {
        &self.stamps[..self.n]
    }

    fn push(&mut self, d: Delivered) {
        // Each set is taken at most once per pass, so this never overflows.
        if let Some(slot) = self.stamps.get_mut(self.n) {
            *slot = d;
            self.n += 1;
        }
    }
}

/// Timestamp register sets a family can have (i225: 4).
const MAX_SETS: usize = 4;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The request waiting on this set, if any.
    cookie: Option<u64>,
    /// When it was reserved (host monotonic ns).
    start_ns: u64,
    /// TXSTMPL of the last stamp read from this set, to detect one whose valid bit was lost.
    last_low: u32,
    /// Set when a request here was freed without its stamp (timeout, disable): until then
    /// (host monotonic ns) a late stamp may land in the set, so a changed TXSTMPL need not be
    /// the next request's, and [`TxTimestamps::service`] goes by the valid bits, which show
    /// such a stamp. One timeout after the request was given up on (`u64::MAX`: from the next
    /// [`TxTimestamps::expire`]), twice the driver's own bound for a stamp to come.
    late_until_ns: Option<u64>,
}

#[derive(Debug)]
pub struct SlotTable(State, TsCounters);

#[derive(Debug)]
struct State {
    enabled: bool,
    /// Sets in use (1..=max).
    sets: u8,
    slots: [Slot; MAX_SETS],
}

/// Counters kept by the slot table itself.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TsCounters {
    pub requested: u64,
    pub skipped: u64,
    pub timeouts: u64,
}

/// The lock the slot table lives under. The daemons use a spin lock (the IRQ thread takes it);
/// a test may substitute one that runs code each time a thread is about to take it, to put a
/// step of another path between two of one path's critical sections deterministically.
pub trait SlotLock: Send + Sync {
    type Guard<'a>: core::ops::DerefMut<Target = SlotTable>
    where
        Self: 'a;
    fn new(table: SlotTable) -> Self;
    fn lock(&self) -> Self::Guard<'_>;
}

impl SlotLock for spin::Mutex<SlotTable> {
    type Guard<'a> = spin::MutexGuard<'a, SlotTable>;
    fn new(table: SlotTable) -> Self {
        spin::Mutex::new(table)
    }
    fn lock(&self) -> Self::Guard<'_> {
        spin::Mutex::lock(self)
    }
}

/// The TX timestamp state of one port.
pub struct TxTimestamps<L: SlotLock = spin::Mutex<SlotTable>> {
    regs: TsRegs,
    state: L,
}

const NS_PER_S: u64 = 1_000_000_000;

impl TxTimestamps {
    /// `sets` = how many of the family's sets to use (1..=regs.low.len()).
    pub fn new(regs: TsRegs, sets: u8) -> Self {
        Self::with_lock(regs, sets)
    }
}

impl<L: SlotLock> TxTimestamps<L> {
    /// [`TxTimestamps::new`] under a lock of the caller's choice.
    pub fn with_lock(regs: TsRegs, sets: u8) -> Self {
        let max = regs.low.len().min(MAX_SETS) as u8;
        Self {
            regs,
            state: L::new(SlotTable(
                State {
                    enabled: false,
                    sets: sets.clamp(1, max),
                    slots: [Slot::default(); MAX_SETS],
                },
                TsCounters::default(),
            )),
        }
    }

    pub fn sets(&self) -> u8 {
        self.state.lock().0.sets
    }

    pub fn enabled(&self) -> bool {
        self.state.lock().0.enabled
    }

    pub fn counters(&self) -> TsCounters {
        self.state.lock().1
    }

    /// Whether TSYNCTXCTL shows a stamp in any set: one register read, for a thread polling
    /// between interrupts (the stamps themselves are taken by [`Self::retrieve`]).
    pub fn ready<M: Mmio>(&self, regs: &Regs<M>) -> bool {
        regs.get(self.regs.ctl).intersects(TsyncTxCtl::TXTT_ANY)
    }

    /// Requests waiting for a stamp.
    pub fn pending(&self) -> usize {
        self.state
            .lock()
            .0
            .slots
            .iter()
            .filter(|s| s.cookie.is_some())
            .count()
    }

    /// Turns TX timestamping on: TSYNCTXCTL = ENABLED (| igc's TXSYNSIG), then reads every set
    /// to discard stale stamps and release the sets (reference §7.4 "Enable").
    pub fn enable<M: Mmio>(&self, regs: &Regs<M>, ctl_value: TsyncTxCtl) {
        let mut g = self.state.lock();
        regs.set(self.regs.ctl, ctl_value);
        for (i, (&l, &h)) in self.regs.low.iter().zip(self.regs.high).enumerate() {
            g.0.slots[i].last_low = regs.read(l);
            let _ = regs.read(h);
        }
        g.0.enabled = true;
    }

    /// Turns TX timestamping off and frees every pending request, which is reported lost.
    pub fn disable<M: Mmio>(&self, regs: &Regs<M>) -> Vec<Lost> {
        let mut g = self.state.lock();
        regs.set(self.regs.ctl, TsyncTxCtl::empty());
        let st = &mut g.0;
        st.enabled = false;
        let mut lost = Vec::new();
        for s in st.slots.iter_mut() {
            if let Some(cookie) = s.cookie.take() {
                s.late_until_ns = Some(u64::MAX);
                lost.push(Lost {
                    cookie,
                    reason: LostReason::Disabled,
                });
            }
        }
        lost
    }

    /// Transmit path: reserves the first free set for `cookie`, recording the start time in the
    /// same critical section, so the watchdog can never see a reserved slot without its start.
    pub fn reserve(&self, cookie: u64, now_ns: u64) -> Reservation {
        let mut g = self.state.lock();
        let SlotTable(st, c) = &mut *g;
        if !st.enabled {
            return Reservation::Disabled;
        }
        let sets = st.sets as usize;
        match st.slots[..sets].iter().position(|s| s.cookie.is_none()) {
            Some(i) => {
                st.slots[i].cookie = Some(cookie);
                st.slots[i].start_ns = now_ns;
                c.requested += 1;
                Reservation::Set(i as u8)
            }
            None => {
                c.skipped += 1;
                Reservation::Skipped
            }
        }
    }

    /// Transmit path: the frame for a reservation could not be queued; free the set.
    pub fn cancel(&self, set: u8, cookie: u64) {
        let mut g = self.state.lock();
        let slot = &mut g.0.slots[set as usize];
        if slot.cookie == Some(cookie) {
            slot.cookie = None;
            g.1.requested -= 1;
        }
    }

    /// IRQ thread, on TSICR.TXTS: every available stamp, found by the valid bits. One
    /// TSYNCTXCTL read serves all sets. Set 0 is read last because reading TXSTMPH_0 may clear
    /// every valid bit (reference §7.1); that read is also what re-arms the i225 TXTS interrupt
    /// (§7.2).
    pub fn retrieve<M: Mmio>(&self, regs: &Regs<M>) -> Retrieval {
        self.scan(&mut self.state.lock().0, regs)
    }

    /// IRQ thread, on TSICR.TXTS: every available stamp, in as few register reads as is safe.
    ///
    /// Where the family allows it ([`TsRegs::probe_low`]) and no set may hold a stamp nobody
    /// asked for (see `Slot::late_until_ns`), only the pending sets are read: a TXSTMPL that
    /// differs from the last one taken from the set is a new stamp, the test the §7.2
    /// workaround already makes for set 0 (two stamps never share a nanosecond field), and
    /// only our request can have put it there. No TSYNCTXCTL read: a stamp in set 0 costs its
    /// L and H, the H read re-arming TXTS too. Otherwise [`Self::retrieve`].
    pub fn service<M: Mmio>(&self, regs: &Regs<M>) -> Retrieval {
        let mut g = self.state.lock();
        let st = &mut g.0;
        if self.regs.probe_low && st.slots.iter().all(|s| s.late_until_ns.is_none()) {
            self.probe(st, regs)
        } else {
            self.scan(st, regs)
        }
    }

    /// [`Self::service`] without TSYNCTXCTL: each pending set's TXSTMPL, and TXSTMPH where it
    /// changed.
    fn probe<M: Mmio>(&self, st: &mut State, regs: &Regs<M>) -> Retrieval {
        let mut out = Retrieval::default();
        let mut first = 0;
        if self.regs.txstmph0_quirk {
            // Set 0 first: its TXSTMPH read re-arms TXTS (§7.2), so each set probed after it
            // shows a stamp that landed before that read, and one landing later interrupts.
            first = 1;
            let h0 = self.regs.high[0];
            if st.slots[0].cookie.is_none() {
                // Nothing to take, and every free set's last stamp was taken (none may get a
                // late one): the read only re-arms; a valid bit it clears was consumed.
                let _ = regs.read(h0);
            } else if !self.probe_set(st, regs, 0, &mut out) {
                // Linux's L, H, L (§7.2 step 2): a stamp that landed between the two L reads
                // may have had its interrupt swallowed by the bug.
                let _ = regs.read(h0);
                out.recovered += u64::from(self.probe_set(st, regs, 0, &mut out));
            }
        }
        for i in first..st.sets as usize {
            if st.slots[i].cookie.is_some() {
                self.probe_set(st, regs, i, &mut out);
            }
        }
        out
    }

    /// Reads TXSTMPL of set `i`; a value other than the last one taken from it is a new stamp,
    /// completed by TXSTMPH and taken. Whether it was.
    fn probe_set<M: Mmio>(
        &self,
        st: &mut State,
        regs: &Regs<M>,
        i: usize,
        out: &mut Retrieval,
    ) -> bool {
        let l = regs.read(self.regs.low[i]);
        if l == st.slots[i].last_low {
            return false;
        }
        let h = regs.read(self.regs.high[i]);
        self.take(st, i, l, h, out);
        true
    }

    /// [`Self::retrieve`] under the lock.
    fn scan<M: Mmio>(&self, st: &mut State, regs: &Regs<M>) -> Retrieval {
        let mut out = Retrieval::default();
        let valid = regs.get(self.regs.ctl) & TsyncTxCtl::TXTT_ANY;
        let has = |i: usize| valid.contains(TsyncTxCtl::txtt(i as u32));
        let n = self.regs.low.len();

        // Sets 1.. whose valid bit is set.
        for i in 1..n {
            if has(i) {
                let l = regs.read(self.regs.low[i]);
                let h = regs.read(self.regs.high[i]);
                self.take(st, i, l, h, &mut out);
            }
        }

        // Set 0 and the interrupt-clear workaround.
        let pending0 = st.slots[0].cookie.is_some();
        if has(0) {
            let l = regs.read(self.regs.low[0]);
            let h = regs.read(self.regs.high[0]);
            self.take(st, 0, l, h, &mut out);
        } else if self.regs.txstmph0_quirk {
            if pending0 {
                // A stamp can land in set 0 after the TSYNCTXCTL read without its valid bit
                // being seen. Linux reads L, H (clearing the condition), L again and takes a
                // changed L as a new stamp; that misses one that landed before the first L read.
                // Comparing with the last stamp consumed from set 0 covers the whole window
                // (two stamps never share a nanosecond field), at the same cost.
                let l = regs.read(self.regs.low[0]);
                if l != st.slots[0].last_low {
                    let h = regs.read(self.regs.high[0]);
                    out.recovered += 1;
                    self.take(st, 0, l, h, &mut out);
                } else {
                    let _ = regs.read(self.regs.high[0]);
                    let again = regs.read(self.regs.low[0]);
                    if again != l {
                        let h = regs.read(self.regs.high[0]);
                        out.recovered += 1;
                        self.take(st, 0, again, h, &mut out);
                    }
                }
            } else {
                // Nobody waits on set 0: one read re-arms the interrupt, nothing to recover.
                let _ = regs.read(self.regs.high[0]);
            }
        }

        // If reading TXSTMPH_0 cleared every valid bit, a stamp that landed in a pending set
        // after the TSYNCTXCTL read has lost its bit. Its TXSTMPL differs from the last one read
        // from that set. (Linux's handler has this window; this closes it.)
        let h0_read = has(0) || self.regs.txstmph0_quirk;
        if h0_read && self.regs.h0_clears_all {
            for i in 1..n {
                if !has(i) && st.slots[i].cookie.is_some() {
                    let l = regs.read(self.regs.low[i]);
                    if l != st.slots[i].last_low {
                        let h = regs.read(self.regs.high[i]);
                        out.recovered += 1;
                        self.take(st, i, l, h, &mut out);
                    }
                }
            }
        }
        out
    }

    fn take(&self, st: &mut State, i: usize, low: u32, high: u32, out: &mut Retrieval) {
        let slot = &mut st.slots[i];
        // Two stamps never share a nanosecond field (as above): the same TXSTMPL is the stamp
        // this set last gave, not the waiting request's.
        if slot.cookie.is_some() && low == slot.last_low {
            out.repeated += 1;
            return;
        }
        slot.last_low = low;
        match slot.cookie.take() {
            Some(cookie) => out.push(Delivered {
                cookie,
                raw_ns: match self.regs.format {
                    StampFormat::SecNs => high as u64 * NS_PER_S + low as u64,
                    StampFormat::Raw => (high as u64) << 32 | low as u64,
                },
                requested_mono_ns: slot.start_ns,
            }),
            None => out.stale += 1,
        }
    }

    /// Watchdog: frees every request older than `timeout_ns`, reporting it lost. If any expired,
    /// reads TXSTMPH_0 to release the sets (and re-arm the interrupt), as Linux's igc_ptp_tx_hang.
    /// Also ends the wait for late stamps (`Slot::late_until_ns`) of sets whose time is up.
    pub fn expire<M: Mmio>(&self, regs: &Regs<M>, now_ns: u64, timeout_ns: u64) -> Vec<Lost> {
        let mut g = self.state.lock();
        let SlotTable(st, c) = &mut *g;
        let mut lost = Vec::new();
        for s in st.slots.iter_mut() {
            s.late_until_ns = match s.late_until_ns {
                Some(u64::MAX) => Some(now_ns.saturating_add(timeout_ns)),
                Some(t) if now_ns >= t => None,
                t => t,
            };
            if let Some(cookie) = s.cookie
                && now_ns.saturating_sub(s.start_ns) > timeout_ns
            {
                s.cookie = None;
                s.late_until_ns = Some(now_ns.saturating_add(timeout_ns));
                c.timeouts += 1;
                lost.push(Lost {
                    cookie,
                    reason: LostReason::Timeout,
                });
            }
        }
        if !lost.is_empty() {
            let l0 = regs.read(self.regs.low[0]);
            let _ = regs.read(self.regs.high[0]);
            // Whatever a free set holds now is stale: a late stamp for an expired request, whose
            // valid bit the TXSTMPH_0 read may just have cleared. Remember its TXSTMPL so the
            // lost-valid-bit check in `retrieve` never hands it to the set's next request. A set
            // still pending keeps its old value: its stamp, if it landed, is still to be found.
            let n = self.regs.low.len().min(MAX_SETS);
            for (i, slot) in st.slots[..n].iter_mut().enumerate() {
                if slot.cookie.is_none() {
                    slot.last_low = if i == 0 {
                        l0
                    } else {
                        regs.read(self.regs.low[i])
                    };
                }
            }
        }
        lost
    }
}
