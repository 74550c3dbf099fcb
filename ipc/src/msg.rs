//! Every message that crosses a process boundary, defined once.
//!
//! Two channels exist (DESIGN.md §2):
//! - driver ⇄ ptpd, one per NIC: [`DriverRequest`] down, [`DriverToPtpd`] up;
//! - app ⇄ ptpd (the clock scheme): [`ClockRequest`] down, [`ClockReply`] up.
//!
//! Times are nanoseconds. Absolute PHC times are `u64` (the i225 SYSTIM holds a `u32` second
//! count, so every PHC time fits); offsets are `i64`. Frequencies are Linux's `scaled_ppm`
//! (ppm with a 16-bit binary fraction), so a value passes through without rounding.

/// Upper bound of a PTP frame carried over IPC (statime uses 1024-byte buffers; a full
/// Ethernet frame without FCS is 1514 bytes).
pub const MAX_FRAME: usize = 2048;
/// Upper bound of samples in one `GetTimeX` (Linux's PTP_MAX_SAMPLES is 25).
pub const MAX_SAMPLES: u8 = 25;
/// Upper bound of a text field (part names, reasons, identities).
pub const MAX_TEXT: usize = 64;

/// Request id chosen by the sender of a request and echoed in its reply.
pub type Seq = u32;

/// Receive timestamp filter (Linux `HWTSTAMP_FILTER_*` subset the Intel parts can do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RxFilter {
    /// No receive timestamps (the default, see seed 002: timestamping ALL costs throughput).
    None = 0,
    /// Every received frame.
    All = 1,
    /// PTPv2 event messages over L2 and L4.
    PtpV2Event = 2,
    /// PTPv2 event messages over L2 (ethertype 0x88F7) only.
    PtpV2L2Event = 3,
    /// PTPv2 event messages over UDP (ports 319) only.
    PtpV2L4Event = 4,
    /// PTPv1 over UDP: named so that a request for it gets a typed "unsupported" answer.
    PtpV1L4Event = 5,
    /// PTPv2 Sync messages over L2 only (Linux `HWTSTAMP_FILTER_PTP_V2_L2_SYNC`): what an E2E
    /// slave needs; the 82576's register-mode latch (one stamp at a time) is then never held by
    /// a message nobody uses.
    PtpV2L2Sync = 6,
    /// PTPv2 Delay_Req messages over L2 only (`HWTSTAMP_FILTER_PTP_V2_L2_DELAY_REQ`): what an
    /// E2E master needs.
    PtpV2L2DelayReq = 7,
    /// PTPv2 Sync messages over UDP (port 319) only (`HWTSTAMP_FILTER_PTP_V2_L4_SYNC`).
    PtpV2L4Sync = 8,
    /// PTPv2 Delay_Req messages over UDP (port 319) only (`HWTSTAMP_FILTER_PTP_V2_L4_DELAY_REQ`).
    PtpV2L4DelayReq = 9,
}

impl RxFilter {
    /// Every filter, in discriminant order.
    pub const ALL: [RxFilter; 10] = [
        RxFilter::None,
        RxFilter::All,
        RxFilter::PtpV2Event,
        RxFilter::PtpV2L2Event,
        RxFilter::PtpV2L4Event,
        RxFilter::PtpV1L4Event,
        RxFilter::PtpV2L2Sync,
        RxFilter::PtpV2L2DelayReq,
        RxFilter::PtpV2L4Sync,
        RxFilter::PtpV2L4DelayReq,
    ];

    /// The filter whose discriminant is `code` (the wire byte, a Caps bit index).
    pub fn from_code(code: u8) -> Option<RxFilter> {
        Self::ALL.into_iter().find(|f| *f as u8 == code)
    }

    /// The name Linux's `HWTSTAMP_FILTER_*` gives it, lower case (`ptp_v2_l2_event`).
    pub fn name(self) -> &'static str {
        match self {
            RxFilter::None => "none",
            RxFilter::All => "all",
            RxFilter::PtpV2Event => "ptp_v2_event",
            RxFilter::PtpV2L2Event => "ptp_v2_l2_event",
            RxFilter::PtpV2L4Event => "ptp_v2_l4_event",
            RxFilter::PtpV1L4Event => "ptp_v1_l4_event",
            RxFilter::PtpV2L2Sync => "ptp_v2_l2_sync",
            RxFilter::PtpV2L2DelayReq => "ptp_v2_l2_delay_req",
            RxFilter::PtpV2L4Sync => "ptp_v2_l4_sync",
            RxFilter::PtpV2L4DelayReq => "ptp_v2_l4_delay_req",
        }
    }

    /// The filter [`RxFilter::name`] names (case-insensitive).
    pub fn from_name(name: &str) -> Option<RxFilter> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
    }
}

/// Why a driver ends a driver-channel connection ([`DriverEvent::Closed`], its last message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CloseReason {
    /// The peer's credentials are not allowed on this channel (not root, not the driver's own
    /// uid, not a configured uid or gid).
    PermissionDenied = 1,
    /// A newer connection said hello and now drives the NIC.
    Replaced = 2,
    /// No [`DriverRequest::Hello`] came first, within the driver's hello timeout.
    NoHello = 3,
    /// Too many connections are waiting for their hello; try again later.
    Busy = 4,
}

/// Why a TX timestamp did not arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LostReason {
    /// The watchdog freed the slot after the configured timeout.
    Timeout = 1,
    /// TX timestamping was disabled while the request was pending.
    Disabled = 2,
    /// No timestamp set was free when the frame was queued.
    NoFreeSlot = 3,
    /// The driver was reset (link reconfiguration, restart).
    Reset = 4,
    /// The frame could not be queued (ring full, link down).
    NotSent = 5,
}

/// Typed errors a driver returns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DriverError {
    /// A value out of range (adjfine beyond max_adj, settime beyond the SYSTIM range, ...).
    InvalidArgument,
    /// The hardware cannot do it (an RX filter the part lacks).
    Unsupported,
    /// A register poll exceeded its bound.
    Timeout,
    /// The link or device is not in a state to do it (ring full, device in reset).
    Busy,
    /// The frame is malformed or too long.
    BadFrame,
    /// Anything else, with a short reason.
    Other(String),
}

/// One gettimex sample: host clock before, PHC, host clock after. The host clock is
/// CLOCK_REALTIME (as Linux's PTP_SYS_OFFSET_EXTENDED), and the pre/post pair brackets exactly
/// the register read that latches the PHC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TimeXSample {
    pub sys_before_ns: u64,
    pub phc_ns: u64,
    pub sys_after_ns: u64,
}

impl TimeXSample {
    /// The CLOCK_REALTIME bracket's width; `None` when it ends before it starts (the wall
    /// clock stepped back between the two readings, so it says nothing about when the PHC
    /// was read).
    pub fn bracket_ns(&self) -> Option<u64> {
        self.sys_after_ns.checked_sub(self.sys_before_ns)
    }

    /// The bracket's midpoint on CLOCK_REALTIME, ns.
    pub fn mid_ns(&self) -> i128 {
        (i128::from(self.sys_before_ns) + i128::from(self.sys_after_ns)) / 2
    }

    /// PHC − CLOCK_REALTIME at the bracket's midpoint, ns (known within half the bracket).
    pub fn offset_ns(&self) -> i128 {
        i128::from(self.phc_ns) - self.mid_ns()
    }

    /// The sample with the narrowest usable bracket (the first of equals); `None` if there
    /// is none (no samples, or the wall clock stepped back inside every bracket).
    pub fn tightest(samples: &[TimeXSample]) -> Option<&TimeXSample> {
        samples
            .iter()
            .filter_map(|s| Some((s.bracket_ns()?, s)))
            .min_by_key(|&(width, _)| width)
            .map(|(_, s)| s)
    }
}

/// What a clock can do.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Caps {
    /// Human-readable part name ("Intel i225-LM").
    pub part: String,
    pub vendor_id: u16,
    pub device_id: u16,
    /// The port's MAC address (the PTP clock identity and L2 source address derive from it).
    pub mac: [u8; 6],
    /// Largest |frequency adjustment| in ppb.
    pub max_adj_ppb: u32,
    /// TX timestamp register sets in use.
    pub tx_ts_sets: u8,
    /// Bit i set ⇔ `RxFilter` with discriminant i is supported.
    pub rx_filters: u32,
    /// External timestamp and periodic output channels (0 when not wired).
    pub n_ext_ts: u8,
    pub n_per_out: u8,
    /// Whether gettimex brackets the latching read (always true for our drivers).
    pub cross_timestamp: bool,
    /// Where the driver's clock page lives (a file path on Linux hosts); empty if none.
    pub clock_page: String,
}

/// Driver counters (DESIGN.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stats {
    /// TX timestamp requests accepted into a slot.
    pub tx_requested: u64,
    /// TX timestamps delivered.
    pub tx_delivered: u64,
    /// Frames that asked for a timestamp while every set was busy.
    pub tx_skipped: u64,
    /// Slots freed by the watchdog.
    pub tx_timeouts: u64,
    /// Requests reported lost for any reason (timeouts included).
    pub tx_lost: u64,
    /// Timestamps recovered by the TXSTMPH_0 interrupt-clear workaround.
    pub quirk_recoveries: u64,
    /// Time-sync interrupts handled.
    pub interrupts: u64,
    /// MMIO register reads issued by the driver since it started.
    pub mmio_reads: u64,
    /// MMIO register writes issued by the driver since it started.
    pub mmio_writes: u64,
    /// Frames sent and received.
    pub tx_frames: u64,
    pub rx_frames: u64,
    /// Received PTP frames that carried an RX timestamp.
    pub rx_timestamped: u64,
    /// Received frames that were not PTP (counted, dropped until a netstack consumes them).
    pub rx_other: u64,
    /// IRQ-thread waits that an interrupt ended (every IRQ thread of the driver).
    pub irq_wakeups: u64,
    /// Of those, the time-sync thread's: the wake-ups of the TX timestamp path.
    pub ts_wakeups: u64,
    /// Passes an IRQ thread ran after an interrupt without waiting again (NAPI-style polling,
    /// `--irq-mode napi`).
    pub napi_polls: u64,
    /// Spins (polling on after a pass that found nothing) that ended because work came.
    pub spin_work: u64,
    /// Spins that ran out with nothing found: the thread re-armed its interrupt and slept.
    pub spin_idle: u64,
}

/// What an SDP pin does (Linux `enum ptp_pin_function`; PHYSYNC has no use here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum PinFunction {
    #[default]
    None = 0,
    /// External timestamps: each edge on the pin is stamped (channel `chan`).
    ExtTs = 1,
    /// Periodic output (channel `chan`).
    PerOut = 2,
}

impl PinFunction {
    /// Linux's number for it (`ptp_pin_desc.func`, testptp `-L pin,func`).
    pub fn from_linux(n: u32) -> Option<Self> {
        match n {
            0 => Some(Self::None),
            1 => Some(Self::ExtTs),
            2 => Some(Self::PerOut),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ExtTs => "extts",
            Self::PerOut => "perout",
        }
    }

    /// The function [`Self::name`] names, or Linux's number for it (`"1"` is `ExtTs`).
    pub fn parse(s: &str) -> Option<Self> {
        [Self::None, Self::ExtTs, Self::PerOut]
            .into_iter()
            .find(|f| f.name() == s)
            .or_else(|| s.parse().ok().and_then(Self::from_linux))
    }
}

/// One pin's assignment (Linux `struct ptp_pin_desc` without the name: pins are SDP0..).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PinConfig {
    pub pin: u8,
    pub func: PinFunction,
    pub chan: u8,
}

/// One external timestamp: the channel and the PHC time of the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtTsEvent {
    pub chan: u8,
    pub ns: u64,
}

/// Most pins a clock reports, and most events one `Events` reply carries.
pub const MAX_PINS: u8 = 8;
pub const MAX_EVENTS: u8 = 64;
/// External timestamps ptpd keeps per clock for `Events`.
pub const EVENT_HISTORY: usize = 1024;

/// ptpd → driver.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DriverRequest {
    /// The first message on every connection: the driver serves nothing before it, answers it
    /// with its own hello (`Restarted`, then `Link`), and then lets this connection replace any
    /// older one. Never answered with a reply.
    Hello,
    /// `Hello`, asking that this connection's traffic go over a shared-memory ring pair
    /// (`ring`, issue 16) of `slot_count` slots of `slot_size` bytes per direction. A driver
    /// that can offers the ring as its first answer on the connection (the region and bells
    /// passed over it), then sends its hello and everything else over the ring; the connection
    /// itself then carries nothing but its liveness. An older driver refuses this hello
    /// (`Closed { NoHello }`), so a client may fall back to a plain `Hello`.
    HelloRing {
        slot_size: u32,
        slot_count: u32,
    },
    /// Queue a PTP frame; with `want_ts` its TX timestamp comes back as a `TxTimestamp` (or
    /// `TxTimestampLost`) event carrying `cookie`. Answered only on error (`Error`), so a
    /// timestamping workload costs one message each way per frame, not two.
    SendPtp {
        cookie: u64,
        want_ts: bool,
        frame: Vec<u8>,
    },
    GetTime,
    GetTimeX {
        samples: u8,
    },
    SetTime {
        ns: u64,
    },
    AdjTime {
        delta_ns: i64,
    },
    AdjFine {
        scaled_ppm: i64,
    },
    SetTstampConfig {
        tx_on: bool,
        rx_filter: RxFilter,
    },
    Caps,
    Stats,
    /// The PHC's current frequency adjustment, answered with `Freq`. A ptpd that starts (or
    /// reconnects) while the PHC already runs corrected takes it as its base instead of
    /// resetting it (issue 17: a restarted ptpd must not undo the drivers' state).
    GetFreq,
    /// Every pin's assignment, answered with `Pins` (none: the part has no pins).
    GetPins,
    /// Assigns `func` on channel `chan` to `pin` (PTP_PIN_SETFUNC): a pin that had this
    /// function and channel loses it, and the pin's previous function stops.
    SetPin {
        pin: u8,
        func: PinFunction,
        chan: u8,
    },
    /// External timestamps on channel `chan` on or off (PTP_EXTTS_REQUEST); events come as
    /// `ExtTs`.
    ExtTs {
        chan: u8,
        on: bool,
    },
    /// A periodic output on channel `chan` from PHC time `start_ns` every `period_ns`
    /// (PTP_PEROUT_REQUEST; period 0 stops it). Answered with `PerOut`.
    PerOut {
        chan: u8,
        start_ns: u64,
        period_ns: u64,
    },
    /// PPS events (`Pps`, at each PHC second) on or off (PTP_ENABLE_PPS).
    Pps {
        on: bool,
    },
}

/// driver → ptpd: the answer to one request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DriverReply {
    /// SetTime, AdjTime, AdjFine succeeded (SendPtp succeeds silently).
    Done,
    Time {
        ns: u64,
    },
    TimeX {
        samples: Vec<TimeXSample>,
    },
    /// The filter actually applied (a part may widen a request, e.g. to ALL).
    TstampConfig {
        tx_on: bool,
        rx_filter: RxFilter,
    },
    Caps(Caps),
    Stats(Stats),
    Error(DriverError),
    /// The frequency adjustment in force (`GetFreq`), scaled ppm like `AdjFine`.
    Freq {
        scaled_ppm: i64,
    },
    /// Every pin (`GetPins`).
    Pins(Vec<PinConfig>),
    /// The PHC time of a periodic output's first edge (a start already passed moves on by
    /// whole periods); 0 when stopped.
    PerOut {
        first_ns: u64,
    },
}

/// driver → ptpd, unsolicited.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DriverEvent {
    TxTimestamp {
        cookie: u64,
        ns: u64,
    },
    TxTimestampLost {
        cookie: u64,
        reason: LostReason,
    },
    /// A received PTP frame, with its RX timestamp if the filter stamped it.
    PtpFrame {
        rx_ns: Option<u64>,
        frame: Vec<u8>,
    },
    Link {
        up: bool,
        speed_mbps: u32,
    },
    /// Sent first on every connection, in answer to its `Hello`; `generation` changes each time the driver process
    /// (or its device) is restarted, so ptpd can tell a reconnect from a restart.
    Restarted {
        generation: u64,
    },
    /// The driver's last message on a connection it ends; the connection closes after it.
    Closed {
        reason: CloseReason,
    },
    /// An edge on the pin of external-timestamp channel `chan`, stamped `ns` (PHC).
    ExtTs(ExtTsEvent),
    /// The PHC's seconds rolled over (PPS on); `sys_ns` is CLOCK_REALTIME when the driver
    /// took the interrupt (as Linux's PPS event timestamps the system clock).
    Pps {
        sys_ns: u64,
    },
}

/// Everything that flows driver → ptpd.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DriverToPtpd {
    Reply { seq: Seq, reply: DriverReply },
    Event(DriverEvent),
}

/// Everything that flows ptpd → driver.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PtpdToDriver {
    pub seq: Seq,
    pub request: DriverRequest,
}

/// Index of a clock served by ptpd (one per driver, in config order).
pub type ClockId = u32;

/// app → ptpd (the clock scheme).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClockRequest {
    /// How many clocks ptpd serves.
    List,
    Get {
        clock: ClockId,
    },
    GetTimeX {
        clock: ClockId,
        samples: u8,
    },
    Set {
        clock: ClockId,
        ns: u64,
    },
    Adj {
        clock: ClockId,
        delta_ns: i64,
    },
    Freq {
        clock: ClockId,
        scaled_ppm: i64,
    },
    Caps {
        clock: ClockId,
    },
    Status {
        clock: ClockId,
    },
    Stats {
        clock: ClockId,
    },
    /// Privileged: turn TX timestamping on or off and select the RX filter on a running clock
    /// (the driver's `SetTstampConfig`); answered with what the driver applied (`Tstamp`). For
    /// reconfiguration while locked (issue 17): the change never touches the link or the rings,
    /// and ptpd re-applies its own configuration when the driver reconnects.
    SetTstamp {
        clock: ClockId,
        tx_on: bool,
        rx_filter: RxFilter,
    },
    /// Every pin's assignment (`Pins`).
    Pins {
        clock: ClockId,
    },
    /// Privileged: `DriverRequest::SetPin`. ptpd remembers it and re-applies it when the
    /// driver restarts.
    SetPin {
        clock: ClockId,
        pin: u8,
        func: PinFunction,
        chan: u8,
    },
    /// Privileged: `DriverRequest::ExtTs` (remembered like `SetPin`).
    ExtTs {
        clock: ClockId,
        chan: u8,
        on: bool,
    },
    /// Privileged: `DriverRequest::PerOut`, answered with `PerOut` (remembered like `SetPin`).
    PerOut {
        clock: ClockId,
        chan: u8,
        start_ns: u64,
        period_ns: u64,
    },
    /// Privileged: `DriverRequest::Pps` (remembered like `SetPin`).
    Pps {
        clock: ClockId,
        on: bool,
    },
    /// External timestamps ptpd received with sequence numbers above `after` (at most
    /// [`MAX_EVENTS`]), answered with `Events`. Read-only, like reading /dev/ptpN.
    Events {
        clock: ClockId,
        after: u64,
    },
    /// The clock's time source (`[clock.ts2phc]`), answered with `Source`; `Unsupported` when
    /// the clock has none.
    Source {
        clock: ClockId,
    },
}

/// What `Source` reports: the time source's state (1 free-running, 2 locked, 3 holdover), the
/// clockClass it gives the grandmaster, the last on-time offset, pulses used and steps made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SourceStatus {
    pub state: u8,
    pub clock_class: u8,
    pub offset_ns: i64,
    pub pulses: u64,
    pub steps: u64,
}

impl ClockRequest {
    /// The clock the request addresses (`None` for `List`).
    pub fn clock(&self) -> Option<ClockId> {
        use ClockRequest::*;
        match *self {
            List => None,
            Get { clock }
            | GetTimeX { clock, .. }
            | Set { clock, .. }
            | Adj { clock, .. }
            | Freq { clock, .. }
            | Caps { clock }
            | Status { clock }
            | Stats { clock }
            | SetTstamp { clock, .. }
            | Pins { clock }
            | SetPin { clock, .. }
            | ExtTs { clock, .. }
            | PerOut { clock, .. }
            | Pps { clock, .. }
            | Events { clock, .. }
            | Source { clock } => Some(clock),
        }
    }
}

/// Typed errors of the clock scheme (DESIGN.md §2), each mapping to an errno on Redox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ClockError {
    /// EINVAL: a value out of range, or a malformed request.
    InvalidArgument = 1,
    /// EPERM: the caller may only read.
    PermissionDenied = 2,
    /// ENODEV: no such clock, or its driver is gone.
    NoDevice = 3,
    /// The driver restarted while the request was in flight; retry.
    Restarted = 4,
    /// ETIMEDOUT: the driver did not answer in time.
    Timeout = 5,
    /// EOPNOTSUPP.
    Unsupported = 6,
    /// EBUSY.
    Busy = 7,
    /// EIO: anything else.
    Io = 8,
}

/// PTP port state as IEEE 1588 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum PortState {
    #[default]
    Initializing = 0,
    Faulty = 1,
    Disabled = 2,
    Listening = 3,
    PreMaster = 4,
    Master = 5,
    Passive = 6,
    Uncalibrated = 7,
    Slave = 8,
}

impl PortState {
    /// The state's name as IEEE 1588 and ptp4l's logs write it.
    pub fn name(self) -> &'static str {
        match self {
            PortState::Initializing => "INITIALIZING",
            PortState::Faulty => "FAULTY",
            PortState::Disabled => "DISABLED",
            PortState::Listening => "LISTENING",
            PortState::PreMaster => "PRE_MASTER",
            PortState::Master => "MASTER",
            PortState::Passive => "PASSIVE",
            PortState::Uncalibrated => "UNCALIBRATED",
            PortState::Slave => "SLAVE",
        }
    }
}

/// What `status` reports for one clock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ClockStatus {
    /// Whether the driver channel is connected.
    pub driver_up: bool,
    /// The driver generation last seen (changes on each driver restart).
    pub generation: u64,
    /// How many times ptpd (re)connected to this driver.
    pub connects: u64,
    pub link_up: bool,
    pub link_speed_mbps: u32,
    pub port_state: PortState,
    /// Offset from master in ns (0 when not a slave).
    pub offset_ns: i64,
    pub mean_path_delay_ns: i64,
    /// Current frequency adjustment, scaled ppm.
    pub freq_scaled_ppm: i64,
    /// Grandmaster clock identity (8 bytes, EUI-64).
    pub grandmaster: [u8; 8],
    pub steps_removed: u16,
    /// The clock scheme's own counters (the same in every clock's status; Linux hosts):
    /// connections refused at the client limits, each answered EBUSY before it is closed.
    pub clients_refused: u64,
    /// Requests that did not decode (answered EINVAL, acted on by no driver).
    pub requests_malformed: u64,
    /// Requests held back by the per-client flood limit (answered once it allowed them).
    pub requests_throttled: u64,
}

/// ptpd → app.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClockReply {
    Count {
        clocks: u32,
    },
    Time {
        ns: u64,
    },
    TimeX {
        samples: Vec<TimeXSample>,
    },
    Done,
    Caps(Caps),
    Status(ClockStatus),
    Stats(Stats),
    Error(ClockError),
    /// The timestamping configuration the driver applied (answers `SetTstamp`).
    Tstamp {
        tx_on: bool,
        rx_filter: RxFilter,
    },
    /// Every pin (answers `Pins`).
    Pins(Vec<PinConfig>),
    /// A periodic output's first edge, PHC ns (answers `PerOut`).
    PerOut {
        first_ns: u64,
    },
    /// External timestamps numbered `first_seq`, `first_seq + 1`, ... (sequence numbers start
    /// at 1); `lost` counts those after the asked-for number that ptpd no longer held (it keeps
    /// the last [`EVENT_HISTORY`]).
    Events {
        first_seq: u64,
        lost: u64,
        events: Vec<ExtTsEvent>,
    },
    /// The time source (answers `Source`).
    Source(SourceStatus),
}

#[cfg(test)]
mod tests {
    use super::TimeXSample;

    fn x(before: u64, phc: u64, after: u64) -> TimeXSample {
        TimeXSample {
            sys_before_ns: before,
            phc_ns: phc,
            sys_after_ns: after,
        }
    }

    #[test]
    fn a_bracket_the_wall_clock_stepped_back_in_is_never_the_tightest() {
        // The second sample's CLOCK_REALTIME went back 1 s between its readings: a u64
        // subtraction would overflow (panic in debug, a huge width in release), and a
        // saturating one would make it the tightest.
        let s = [
            x(5_000, 7, 5_400),
            x(2_000_000_000, 7, 1_000_000_100),
            x(6_000, 7, 6_250),
        ];
        assert_eq!(TimeXSample::tightest(&s), Some(&s[2]));
        assert_eq!(TimeXSample::tightest(&s[1..2]), None);
        assert_eq!(TimeXSample::tightest(&[]), None);
        // A zero-width bracket (coarse clock) is a valid, tightest one.
        let z = [x(10, 7, 20), x(30, 7, 30)];
        assert_eq!(TimeXSample::tightest(&z), Some(&z[1]));
    }

    #[test]
    fn offset_is_taken_at_the_bracket_midpoint_without_overflow() {
        let s = x(400, 1_350, 420);
        assert_eq!(
            (s.mid_ns(), s.offset_ns(), s.bracket_ns()),
            (410, 940, Some(20))
        );
        let top = x(u64::MAX - 2, 0, u64::MAX);
        assert_eq!(top.mid_ns(), i128::from(u64::MAX) - 1);
        assert_eq!(top.offset_ns(), 1 - i128::from(u64::MAX));
    }
}
