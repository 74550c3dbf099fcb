//! Versioned little-endian wire format of every message in [`crate::msg`] (DESIGN.md §2).
//!
//! Every encoded message is an 8-byte header followed by the payload:
//!
//! | bytes | field |
//! |-------|-------|
//! | 0     | format version, [`WIRE_VERSION`] |
//! | 1     | channel id: [`PtpdToDriver`] = 1, [`DriverToPtpd`] = 2, [`ClockRequest`] = 3, [`ClockReply`] = 4 |
//! | 2..4  | kind (the variant), u16 LE |
//! | 4..8  | payload length, u32 LE |
//!
//! Kinds (the numbers are the format; the golden tests pin them):
//! - `PtpdToDriver` (payload starts with `seq: u32`): SendPtp 1, GetTime 2, GetTimeX 3, SetTime 4,
//!   AdjTime 5, AdjFine 6, SetTstampConfig 7, Caps 8, Stats 9, Hello 10, HelloRing 11,
//!   GetFreq 12, GetPins 13, SetPin 14, ExtTs 15, PerOut 16, Pps 17.
//! - `DriverToPtpd`: replies (payload starts with `seq: u32`) Done 0x001, Time 0x002, TimeX 0x003,
//!   TstampConfig 0x004, Caps 0x005, Stats 0x006, Error 0x007, Freq 0x008, Pins 0x009, PerOut
//!   0x00A; events TxTimestamp 0x101, TxTimestampLost 0x102, PtpFrame 0x103, Link 0x104,
//!   Restarted 0x105, Closed 0x106, ExtTs 0x107, Pps 0x108.
//! - `ClockRequest`: List 1, Get 2, GetTimeX 3, Set 4, Adj 5, Freq 6, Caps 7, Status 8, Stats 9,
//!   SetTstamp 10, Pins 11, SetPin 12, ExtTs 13, PerOut 14, Pps 15, Events 16, Source 17.
//! - `ClockReply`: Count 1, Time 2, TimeX 3, Done 4, Caps 5, Status 6, Stats 7, Error 8, Tstamp 9,
//!   Pins 10, PerOut 11, Events 12, Source 13.
//! - [`KIND_INVALID`] (0xFFFF) is never a valid kind; see [`Wire::encode`].
//!
//! Fields, in declaration order: integers little-endian at their width; `bool` one byte 0/1;
//! `Option<u64>` a u8 tag (0 none, 1 some) then the value; `#[repr(u8)]` enums their discriminant
//! as u8; [`DriverError`] a u8 tag (InvalidArgument 1, Unsupported 2, Timeout 3, Busy 4,
//! BadFrame 5, Other 6 and a string); frames a u16 length and the bytes (≤ [`MAX_FRAME`]);
//! strings a u8 length and UTF-8 (≤ [`MAX_TEXT`], or [`MAX_PATH`] for `Caps::clock_page`);
//! gettimex samples a u8 count (≤ [`MAX_SAMPLES`]) then 3 × u64 each; pins a u8 count
//! (≤ [`MAX_PINS`]) then pin, function, channel (u8 each); external timestamps a u8 count
//! (≤ [`MAX_EVENTS`]) then channel (u8) and ns (u64) each; `[u8; N]` raw.
//!
//! Decoders are total: any byte string yields a message or a typed [`DecodeError`], never a
//! panic, and they never allocate more than the input holds (every length is checked against its
//! bound and against the remaining bytes before anything is allocated). A receiver can therefore
//! decode bytes straight from an untrusted peer.

use crate::msg::*;

/// Version of this encoding (byte 0 of every message). Bump on any incompatible change; peers
/// with another version get [`DecodeError::Version`] rather than garbage.
pub const WIRE_VERSION: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 8;
/// Upper bound of one encoded message: every message whose bounded fields respect their bounds
/// fits (checked at compile time below); transports size their buffers with it.
pub const MAX_MESSAGE: usize = 4096;
/// Upper bound of a file-system path field (`Caps::clock_page`). Paths do not fit
/// [`MAX_TEXT`] (a runtime directory alone can take 40 bytes); 255 is what a u8 length holds and
/// well above the 107 bytes a Unix socket path may have next to it.
pub const MAX_PATH: usize = 255;
/// A kind no message has: what [`Wire::encode`] emits for a message it cannot encode.
pub const KIND_INVALID: u16 = 0xFFFF;

/// Channel ids (header byte 1).
pub mod channel {
    pub const PTPD_TO_DRIVER: u8 = 1;
    pub const DRIVER_TO_PTPD: u8 = 2;
    pub const CLOCK_REQUEST: u8 = 3;
    pub const CLOCK_REPLY: u8 = 4;
}

// The largest messages: SendPtp / PtpFrame with a full frame, Caps with full strings.
const _: () = {
    let send_ptp = HEADER_LEN + 4 + 8 + 1 + 2 + MAX_FRAME;
    let ptp_frame = HEADER_LEN + 1 + 8 + 2 + MAX_FRAME;
    let caps = HEADER_LEN + 4 + (1 + MAX_TEXT) + 2 + 2 + 4 + 1 + 4 + 1 + 1 + 1 + (1 + MAX_PATH);
    let timex = HEADER_LEN + 4 + 1 + 24 * MAX_SAMPLES as usize;
    assert!(send_ptp <= MAX_MESSAGE && ptp_frame <= MAX_MESSAGE);
    assert!(caps <= MAX_MESSAGE && timex <= MAX_MESSAGE);
    assert!(MAX_TEXT <= u8::MAX as usize);
    assert!(MAX_PATH <= u8::MAX as usize);
    assert!(MAX_FRAME <= u16::MAX as usize);
};

/// Why bytes are not a valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ended inside the header or inside a field.
    #[error("message truncated")]
    Truncated,
    /// The peer speaks another wire format version.
    #[error("wire version {got}, expected {want}")]
    Version { got: u8, want: u8 },
    /// A message of another channel (e.g. a request where a reply was expected).
    #[error("message for channel {got}, expected channel {want}")]
    WrongChannel { got: u8, want: u8 },
    #[error("unknown message kind {0:#06x}")]
    UnknownKind(u16),
    /// The header's payload length differs from the bytes received.
    #[error("header payload length does not match the message length")]
    LengthMismatch,
    /// The payload holds bytes after the last field of its kind.
    #[error("trailing bytes after the payload")]
    TrailingBytes,
    /// A bad enum discriminant, a bool not 0/1, a bad option tag; names the field.
    #[error("invalid value for {0}")]
    InvalidValue(&'static str),
    /// A length beyond its bound (MAX_FRAME, MAX_SAMPLES, MAX_TEXT, MAX_PATH); names the field.
    #[error("{0} longer than its bound")]
    TooLong(&'static str),
    #[error("string is not UTF-8")]
    BadUtf8,
}

/// Why a message cannot be encoded: a field beyond its bound. Encoding never truncates, because
/// a silently shortened frame or path is worse than a refused one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// Names the field (e.g. "frame", "Caps.part").
    #[error("{0} longer than its bound")]
    TooLong(&'static str),
}

/// A message type with a wire encoding, bound to one channel.
pub trait Wire: Sized {
    /// Channel id carried in header byte 1 (see [`channel`]).
    const CHANNEL: u8;

    /// Appends the encoding to `out` (existing contents are kept).
    ///
    /// Infallible for any message whose bounded fields (frames, strings, sample lists) respect
    /// their bounds. A message that does not is a bug of the caller — code that handles sizes
    /// it does not control uses [`Wire::try_encode`] (as `Channel::send` does). For such a
    /// message debug builds panic; release builds log an error and append a header-only message
    /// of kind [`KIND_INVALID`], which every decoder rejects as `UnknownKind`: never a truncated
    /// field the peer would take for real data.
    fn encode(&self, out: &mut Vec<u8>) {
        if let Err(e) = self.try_encode(out) {
            debug_assert!(false, "Wire::encode of an unencodable message: {e}");
            log::error!("refusing to encode a message: {e}; sending an invalid-kind message");
            put_header(out, Self::CHANNEL, KIND_INVALID, 0);
        }
    }

    /// Appends the encoding to `out`, or leaves `out` unchanged and names the first field
    /// beyond its bound.
    fn try_encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError>;

    /// The encoding as a new vector (see [`Wire::encode`]).
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes exactly one whole message. Total: never panics, whatever `bytes` holds.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError>;
}

fn put_header(out: &mut Vec<u8>, channel: u8, kind: u16, len: u32) {
    out.push(WIRE_VERSION);
    out.push(channel);
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
}

/// Append cursor. Bounded fields that exceed their bound record the first error instead of
/// writing; [`encode_msg`] then rolls the output back.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    err: Option<&'static str>,
}

impl Writer<'_> {
    fn put<F: Field>(&mut self, v: &F) {
        v.put(self);
    }
    fn raw(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }
    fn fail(&mut self, what: &'static str) {
        self.err.get_or_insert(what);
    }
    /// A byte string with a u16 length.
    fn bytes(&mut self, v: &[u8], max: usize, what: &'static str) {
        match u16::try_from(v.len()) {
            Ok(n) if v.len() <= max => {
                self.put(&n);
                self.raw(v);
            }
            _ => self.fail(what),
        }
    }
    /// A UTF-8 string with a u8 length.
    fn str(&mut self, v: &str, max: usize, what: &'static str) {
        match u8::try_from(v.len()) {
            Ok(n) if v.len() <= max => {
                self.put(&n);
                self.raw(v.as_bytes());
            }
            _ => self.fail(what),
        }
    }
}

/// Consuming cursor over one payload; every read checks the remaining length first.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn get<F: Field>(&mut self) -> Result<F, DecodeError> {
        F::get(self)
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.b.len() {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn bytes(&mut self, max: usize, what: &'static str) -> Result<Vec<u8>, DecodeError> {
        let n = usize::from(self.get::<u16>()?);
        if n > max {
            return Err(DecodeError::TooLong(what));
        }
        Ok(self.take(n)?.to_vec())
    }
    fn str(&mut self, max: usize, what: &'static str) -> Result<String, DecodeError> {
        let n = usize::from(self.get::<u8>()?);
        if n > max {
            return Err(DecodeError::TooLong(what));
        }
        let b = self.take(n)?;
        Ok(std::str::from_utf8(b)
            .map_err(|_| DecodeError::BadUtf8)?
            .to_owned())
    }
}

/// A value with a fixed place in a payload.
trait Field: Sized {
    fn put(&self, w: &mut Writer);
    fn get(r: &mut Reader) -> Result<Self, DecodeError>;
}

macro_rules! int_fields {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn put(&self, w: &mut Writer) {
                w.raw(&self.to_le_bytes());
            }
            fn get(r: &mut Reader) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.array()?))
            }
        }
    )*};
}
int_fields!(u8, u16, u32, u64, i64);

impl Field for bool {
    fn put(&self, w: &mut Writer) {
        w.put(&u8::from(*self));
    }
    fn get(r: &mut Reader) -> Result<Self, DecodeError> {
        match r.get::<u8>()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::InvalidValue("bool")),
        }
    }
}

impl<const N: usize> Field for [u8; N] {
    fn put(&self, w: &mut Writer) {
        w.raw(self);
    }
    fn get(r: &mut Reader) -> Result<Self, DecodeError> {
        r.array()
    }
}

impl Field for Option<u64> {
    fn put(&self, w: &mut Writer) {
        match self {
            None => w.put(&0u8),
            Some(v) => {
                w.put(&1u8);
                w.put(v);
            }
        }
    }
    fn get(r: &mut Reader) -> Result<Self, DecodeError> {
        match r.get::<u8>()? {
            0 => Ok(None),
            1 => Ok(Some(r.get()?)),
            _ => Err(DecodeError::InvalidValue("option tag")),
        }
    }
}

/// Fieldless `#[repr(u8)]` enums: the discriminant as one byte.
macro_rules! u8_enums {
    ($($t:ident { $($v:ident),* $(,)? })*) => {$(
        impl Field for $t {
            fn put(&self, w: &mut Writer) {
                w.put(&(*self as u8));
            }
            fn get(r: &mut Reader) -> Result<Self, DecodeError> {
                let d = r.get::<u8>()?;
                $(if d == $t::$v as u8 { return Ok($t::$v); })*
                Err(DecodeError::InvalidValue(stringify!($t)))
            }
        }
    )*};
}
u8_enums! {
    RxFilter {
        None, All, PtpV2Event, PtpV2L2Event, PtpV2L4Event, PtpV1L4Event, PtpV2L2Sync,
        PtpV2L2DelayReq, PtpV2L4Sync, PtpV2L4DelayReq,
    }
    LostReason { Timeout, Disabled, NoFreeSlot, Reset, NotSent }
    CloseReason { PermissionDenied, Replaced, NoHello, Busy }
    ClockError { InvalidArgument, PermissionDenied, NoDevice, Restarted, Timeout, Unsupported, Busy, Io }
    PortState { Initializing, Faulty, Disabled, Listening, PreMaster, Master, Passive, Uncalibrated, Slave }
    PinFunction { None, ExtTs, PerOut }
}

/// Plain structs: their fields in declaration order.
macro_rules! struct_fields {
    ($($t:ident { $($f:ident),* $(,)? })*) => {$(
        impl Field for $t {
            fn put(&self, w: &mut Writer) {
                $(w.put(&self.$f);)*
            }
            fn get(r: &mut Reader) -> Result<Self, DecodeError> {
                Ok($t { $($f: r.get()?),* })
            }
        }
    )*};
}
struct_fields! {
    TimeXSample { sys_before_ns, phc_ns, sys_after_ns }
    PinConfig { pin, func, chan }
    ExtTsEvent { chan, ns }
    SourceStatus { state, clock_class, offset_ns, pulses, steps }
    Stats {
        tx_requested, tx_delivered, tx_skipped, tx_timeouts, tx_lost, quirk_recoveries,
        interrupts, mmio_reads, mmio_writes, tx_frames, rx_frames, rx_timestamped, rx_other,
        irq_wakeups, ts_wakeups, napi_polls, spin_work, spin_idle,
    }
    ClockStatus {
        driver_up, generation, connects, link_up, link_speed_mbps, port_state, offset_ns,
        mean_path_delay_ns, freq_scaled_ppm, grandmaster, steps_removed, clients_refused,
        requests_malformed, requests_throttled,
    }
}

impl Field for Vec<TimeXSample> {
    fn put(&self, w: &mut Writer) {
        match u8::try_from(self.len()) {
            Ok(n) if n <= MAX_SAMPLES => {
                w.put(&n);
                self.iter().for_each(|s| w.put(s));
            }
            _ => w.fail("samples"),
        }
    }
    fn get(r: &mut Reader) -> Result<Self, DecodeError> {
        let n = r.get::<u8>()?;
        if n > MAX_SAMPLES {
            return Err(DecodeError::TooLong("samples"));
        }
        // Checked before allocating: the count must be backed by bytes.
        if usize::from(n) * 24 > r.b.len() {
            return Err(DecodeError::Truncated);
        }
        (0..n).map(|_| r.get()).collect()
    }
}

/// A list with a u8 count bounded by `MAX`, each element `SIZE` bytes on the wire (checked
/// against the input before anything is allocated).
macro_rules! bounded_lists {
    ($($t:ty, $max:expr, $size:expr, $what:literal;)*) => {$(
        impl Field for Vec<$t> {
            fn put(&self, w: &mut Writer) {
                match u8::try_from(self.len()) {
                    Ok(n) if n <= $max => {
                        w.put(&n);
                        self.iter().for_each(|x| w.put(x));
                    }
                    _ => w.fail($what),
                }
            }
            fn get(r: &mut Reader) -> Result<Self, DecodeError> {
                let n = r.get::<u8>()?;
                if n > $max {
                    return Err(DecodeError::TooLong($what));
                }
                if usize::from(n) * $size > r.b.len() {
                    return Err(DecodeError::Truncated);
                }
                (0..n).map(|_| r.get()).collect()
            }
        }
    )*};
}
bounded_lists! {
    PinConfig, MAX_PINS, 3, "pins";
    ExtTsEvent, MAX_EVENTS, 9, "events";
}

impl Field for Caps {
    fn put(&self, w: &mut Writer) {
        w.str(&self.part, MAX_TEXT, "Caps.part");
        w.put(&self.vendor_id);
        w.put(&self.device_id);
        w.put(&self.mac);
        w.put(&self.max_adj_ppb);
        w.put(&self.tx_ts_sets);
        w.put(&self.rx_filters);
        w.put(&self.n_ext_ts);
        w.put(&self.n_per_out);
        w.put(&self.cross_timestamp);
        w.str(&self.clock_page, MAX_PATH, "Caps.clock_page");
    }
    fn get(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Caps {
            part: r.str(MAX_TEXT, "Caps.part")?,
            vendor_id: r.get()?,
            device_id: r.get()?,
            mac: r.get()?,
            max_adj_ppb: r.get()?,
            tx_ts_sets: r.get()?,
            rx_filters: r.get()?,
            n_ext_ts: r.get()?,
            n_per_out: r.get()?,
            cross_timestamp: r.get()?,
            clock_page: r.str(MAX_PATH, "Caps.clock_page")?,
        })
    }
}

impl Field for DriverError {
    fn put(&self, w: &mut Writer) {
        let tag: u8 = match self {
            DriverError::InvalidArgument => 1,
            DriverError::Unsupported => 2,
            DriverError::Timeout => 3,
            DriverError::Busy => 4,
            DriverError::BadFrame => 5,
            DriverError::Other(_) => 6,
        };
        w.put(&tag);
        if let DriverError::Other(s) = self {
            w.str(s, MAX_TEXT, "DriverError.Other");
        }
    }
    fn get(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.get::<u8>()? {
            1 => DriverError::InvalidArgument,
            2 => DriverError::Unsupported,
            3 => DriverError::Timeout,
            4 => DriverError::Busy,
            5 => DriverError::BadFrame,
            6 => DriverError::Other(r.str(MAX_TEXT, "DriverError.Other")?),
            _ => return Err(DecodeError::InvalidValue("DriverError")),
        })
    }
}

/// One channel's messages: kind numbers and payloads. The header is handled once, generically.
trait Message: Sized {
    const CHANNEL: u8;
    fn kind(&self) -> u16;
    fn put_payload(&self, w: &mut Writer);
    /// Decodes the payload of `kind`; `UnknownKind` for a kind this channel does not have.
    fn get_payload(kind: u16, r: &mut Reader) -> Result<Self, DecodeError>;
}

fn encode_msg<M: Message>(m: &M, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let start = out.len();
    put_header(out, M::CHANNEL, m.kind(), 0);
    let mut w = Writer { out, err: None };
    m.put_payload(&mut w);
    if let Some(what) = w.err {
        out.truncate(start);
        return Err(EncodeError::TooLong(what));
    }
    // Bounded by MAX_MESSAGE (compile-time check above), so the cast cannot truncate.
    let len = (out.len() - start - HEADER_LEN) as u32;
    out[start + 4..start + HEADER_LEN].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

fn decode_msg<M: Message>(bytes: &[u8]) -> Result<M, DecodeError> {
    // Version first: a peer of another version may have changed anything after byte 0.
    let &version = bytes.first().ok_or(DecodeError::Truncated)?;
    if version != WIRE_VERSION {
        return Err(DecodeError::Version {
            got: version,
            want: WIRE_VERSION,
        });
    }
    let mut r = Reader { b: bytes };
    let header: [u8; HEADER_LEN] = r.array()?;
    if header[1] != M::CHANNEL {
        return Err(DecodeError::WrongChannel {
            got: header[1],
            want: M::CHANNEL,
        });
    }
    let kind = u16::from_le_bytes([header[2], header[3]]);
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if usize::try_from(len).ok() != Some(r.b.len()) {
        return Err(DecodeError::LengthMismatch);
    }
    let m = M::get_payload(kind, &mut r)?;
    if !r.b.is_empty() {
        return Err(DecodeError::TrailingBytes);
    }
    Ok(m)
}

macro_rules! impl_wire {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const CHANNEL: u8 = <$t as Message>::CHANNEL;
            fn try_encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
                encode_msg(self, out)
            }
            fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
                decode_msg(bytes)
            }
        }
    )*};
}
impl_wire!(PtpdToDriver, DriverToPtpd, ClockRequest, ClockReply);

impl Message for PtpdToDriver {
    const CHANNEL: u8 = channel::PTPD_TO_DRIVER;
    fn kind(&self) -> u16 {
        use DriverRequest::*;
        match self.request {
            SendPtp { .. } => 1,
            GetTime => 2,
            GetTimeX { .. } => 3,
            SetTime { .. } => 4,
            AdjTime { .. } => 5,
            AdjFine { .. } => 6,
            SetTstampConfig { .. } => 7,
            Caps => 8,
            Stats => 9,
            Hello => 10,
            HelloRing { .. } => 11,
            GetFreq => 12,
            GetPins => 13,
            SetPin { .. } => 14,
            ExtTs { .. } => 15,
            PerOut { .. } => 16,
            Pps { .. } => 17,
        }
    }
    fn put_payload(&self, w: &mut Writer) {
        use DriverRequest::*;
        w.put(&self.seq);
        match &self.request {
            SendPtp {
                cookie,
                want_ts,
                frame,
            } => {
                w.put(cookie);
                w.put(want_ts);
                w.bytes(frame, MAX_FRAME, "frame");
            }
            GetTime | Caps | Stats | Hello | GetFreq | GetPins => {}
            SetPin { pin, func, chan } => {
                w.put(pin);
                w.put(func);
                w.put(chan);
            }
            ExtTs { chan, on } => {
                w.put(chan);
                w.put(on);
            }
            PerOut {
                chan,
                start_ns,
                period_ns,
            } => {
                w.put(chan);
                w.put(start_ns);
                w.put(period_ns);
            }
            Pps { on } => w.put(on),
            GetTimeX { samples } => w.put(samples),
            SetTime { ns } => w.put(ns),
            AdjTime { delta_ns } => w.put(delta_ns),
            AdjFine { scaled_ppm } => w.put(scaled_ppm),
            SetTstampConfig { tx_on, rx_filter } => {
                w.put(tx_on);
                w.put(rx_filter);
            }
            HelloRing {
                slot_size,
                slot_count,
            } => {
                w.put(slot_size);
                w.put(slot_count);
            }
        }
    }
    fn get_payload(kind: u16, r: &mut Reader) -> Result<Self, DecodeError> {
        use DriverRequest::*;
        if !(1..=17).contains(&kind) {
            return Err(DecodeError::UnknownKind(kind));
        }
        let seq = r.get()?;
        let request = match kind {
            1 => SendPtp {
                cookie: r.get()?,
                want_ts: r.get()?,
                frame: r.bytes(MAX_FRAME, "frame")?,
            },
            2 => GetTime,
            3 => GetTimeX { samples: r.get()? },
            4 => SetTime { ns: r.get()? },
            5 => AdjTime { delta_ns: r.get()? },
            6 => AdjFine {
                scaled_ppm: r.get()?,
            },
            7 => SetTstampConfig {
                tx_on: r.get()?,
                rx_filter: r.get()?,
            },
            8 => Caps,
            9 => Stats,
            10 => Hello,
            12 => GetFreq,
            13 => GetPins,
            14 => SetPin {
                pin: r.get()?,
                func: r.get()?,
                chan: r.get()?,
            },
            15 => ExtTs {
                chan: r.get()?,
                on: r.get()?,
            },
            16 => PerOut {
                chan: r.get()?,
                start_ns: r.get()?,
                period_ns: r.get()?,
            },
            17 => Pps { on: r.get()? },
            _ => HelloRing {
                slot_size: r.get()?,
                slot_count: r.get()?,
            },
        };
        Ok(PtpdToDriver { seq, request })
    }
}

impl Message for DriverToPtpd {
    const CHANNEL: u8 = channel::DRIVER_TO_PTPD;
    fn kind(&self) -> u16 {
        use DriverEvent as E;
        use DriverReply as R;
        match self {
            DriverToPtpd::Reply { reply, .. } => match reply {
                R::Done => 0x001,
                R::Time { .. } => 0x002,
                R::TimeX { .. } => 0x003,
                R::TstampConfig { .. } => 0x004,
                R::Caps(_) => 0x005,
                R::Stats(_) => 0x006,
                R::Error(_) => 0x007,
                R::Freq { .. } => 0x008,
                R::Pins(_) => 0x009,
                R::PerOut { .. } => 0x00A,
            },
            DriverToPtpd::Event(event) => match event {
                E::TxTimestamp { .. } => 0x101,
                E::TxTimestampLost { .. } => 0x102,
                E::PtpFrame { .. } => 0x103,
                E::Link { .. } => 0x104,
                E::Restarted { .. } => 0x105,
                E::Closed { .. } => 0x106,
                E::ExtTs(_) => 0x107,
                E::Pps { .. } => 0x108,
            },
        }
    }
    fn put_payload(&self, w: &mut Writer) {
        use DriverEvent as E;
        use DriverReply as R;
        match self {
            DriverToPtpd::Reply { seq, reply } => {
                w.put(seq);
                match reply {
                    R::Done => {}
                    R::Time { ns } => w.put(ns),
                    R::TimeX { samples } => w.put(samples),
                    R::TstampConfig { tx_on, rx_filter } => {
                        w.put(tx_on);
                        w.put(rx_filter);
                    }
                    R::Caps(c) => w.put(c),
                    R::Stats(s) => w.put(s),
                    R::Error(e) => w.put(e),
                    R::Freq { scaled_ppm } => w.put(scaled_ppm),
                    R::Pins(p) => w.put(p),
                    R::PerOut { first_ns } => w.put(first_ns),
                }
            }
            DriverToPtpd::Event(event) => match event {
                E::TxTimestamp { cookie, ns } => {
                    w.put(cookie);
                    w.put(ns);
                }
                E::TxTimestampLost { cookie, reason } => {
                    w.put(cookie);
                    w.put(reason);
                }
                E::PtpFrame { rx_ns, frame } => {
                    w.put(rx_ns);
                    w.bytes(frame, MAX_FRAME, "frame");
                }
                E::Link { up, speed_mbps } => {
                    w.put(up);
                    w.put(speed_mbps);
                }
                E::Restarted { generation } => w.put(generation),
                E::Closed { reason } => w.put(reason),
                E::ExtTs(e) => w.put(e),
                E::Pps { sys_ns } => w.put(sys_ns),
            },
        }
    }
    fn get_payload(kind: u16, r: &mut Reader) -> Result<Self, DecodeError> {
        use DriverEvent as E;
        use DriverReply as R;
        if (0x001..=0x00A).contains(&kind) {
            let seq = r.get()?;
            let reply = match kind {
                0x001 => R::Done,
                0x002 => R::Time { ns: r.get()? },
                0x003 => R::TimeX { samples: r.get()? },
                0x004 => R::TstampConfig {
                    tx_on: r.get()?,
                    rx_filter: r.get()?,
                },
                0x005 => R::Caps(r.get()?),
                0x006 => R::Stats(r.get()?),
                0x008 => R::Freq {
                    scaled_ppm: r.get()?,
                },
                0x009 => R::Pins(r.get()?),
                0x00A => R::PerOut { first_ns: r.get()? },
                _ => R::Error(r.get()?),
            };
            return Ok(DriverToPtpd::Reply { seq, reply });
        }
        let event = match kind {
            0x101 => E::TxTimestamp {
                cookie: r.get()?,
                ns: r.get()?,
            },
            0x102 => E::TxTimestampLost {
                cookie: r.get()?,
                reason: r.get()?,
            },
            0x103 => E::PtpFrame {
                rx_ns: r.get()?,
                frame: r.bytes(MAX_FRAME, "frame")?,
            },
            0x104 => E::Link {
                up: r.get()?,
                speed_mbps: r.get()?,
            },
            0x105 => E::Restarted {
                generation: r.get()?,
            },
            0x106 => E::Closed { reason: r.get()? },
            0x107 => E::ExtTs(r.get()?),
            0x108 => E::Pps { sys_ns: r.get()? },
            k => return Err(DecodeError::UnknownKind(k)),
        };
        Ok(DriverToPtpd::Event(event))
    }
}

impl Message for ClockRequest {
    const CHANNEL: u8 = channel::CLOCK_REQUEST;
    fn kind(&self) -> u16 {
        use ClockRequest::*;
        match self {
            List => 1,
            Get { .. } => 2,
            GetTimeX { .. } => 3,
            Set { .. } => 4,
            Adj { .. } => 5,
            Freq { .. } => 6,
            Caps { .. } => 7,
            Status { .. } => 8,
            Stats { .. } => 9,
            SetTstamp { .. } => 10,
            Pins { .. } => 11,
            SetPin { .. } => 12,
            ExtTs { .. } => 13,
            PerOut { .. } => 14,
            Pps { .. } => 15,
            Events { .. } => 16,
            Source { .. } => 17,
        }
    }
    fn put_payload(&self, w: &mut Writer) {
        use ClockRequest::*;
        match self {
            List => {}
            Get { clock }
            | Caps { clock }
            | Status { clock }
            | Stats { clock }
            | Pins { clock }
            | Source { clock } => w.put(clock),
            SetPin {
                clock,
                pin,
                func,
                chan,
            } => {
                w.put(clock);
                w.put(pin);
                w.put(func);
                w.put(chan);
            }
            ExtTs { clock, chan, on } => {
                w.put(clock);
                w.put(chan);
                w.put(on);
            }
            PerOut {
                clock,
                chan,
                start_ns,
                period_ns,
            } => {
                w.put(clock);
                w.put(chan);
                w.put(start_ns);
                w.put(period_ns);
            }
            Pps { clock, on } => {
                w.put(clock);
                w.put(on);
            }
            Events { clock, after } => {
                w.put(clock);
                w.put(after);
            }
            GetTimeX { clock, samples } => {
                w.put(clock);
                w.put(samples);
            }
            Set { clock, ns } => {
                w.put(clock);
                w.put(ns);
            }
            Adj { clock, delta_ns } => {
                w.put(clock);
                w.put(delta_ns);
            }
            Freq { clock, scaled_ppm } => {
                w.put(clock);
                w.put(scaled_ppm);
            }
            SetTstamp {
                clock,
                tx_on,
                rx_filter,
            } => {
                w.put(clock);
                w.put(tx_on);
                w.put(rx_filter);
            }
        }
    }
    fn get_payload(kind: u16, r: &mut Reader) -> Result<Self, DecodeError> {
        use ClockRequest::*;
        Ok(match kind {
            1 => List,
            2 => Get { clock: r.get()? },
            3 => GetTimeX {
                clock: r.get()?,
                samples: r.get()?,
            },
            4 => Set {
                clock: r.get()?,
                ns: r.get()?,
            },
            5 => Adj {
                clock: r.get()?,
                delta_ns: r.get()?,
            },
            6 => Freq {
                clock: r.get()?,
                scaled_ppm: r.get()?,
            },
            7 => Caps { clock: r.get()? },
            8 => Status { clock: r.get()? },
            9 => Stats { clock: r.get()? },
            10 => SetTstamp {
                clock: r.get()?,
                tx_on: r.get()?,
                rx_filter: r.get()?,
            },
            11 => Pins { clock: r.get()? },
            12 => SetPin {
                clock: r.get()?,
                pin: r.get()?,
                func: r.get()?,
                chan: r.get()?,
            },
            13 => ExtTs {
                clock: r.get()?,
                chan: r.get()?,
                on: r.get()?,
            },
            14 => PerOut {
                clock: r.get()?,
                chan: r.get()?,
                start_ns: r.get()?,
                period_ns: r.get()?,
            },
            15 => Pps {
                clock: r.get()?,
                on: r.get()?,
            },
            16 => Events {
                clock: r.get()?,
                after: r.get()?,
            },
            17 => Source { clock: r.get()? },
            k => return Err(DecodeError::UnknownKind(k)),
        })
    }
}

impl Message for ClockReply {
    const CHANNEL: u8 = channel::CLOCK_REPLY;
    fn kind(&self) -> u16 {
        use ClockReply::*;
        match self {
            Count { .. } => 1,
            Time { .. } => 2,
            TimeX { .. } => 3,
            Done => 4,
            Caps(_) => 5,
            Status(_) => 6,
            Stats(_) => 7,
            Error(_) => 8,
            Tstamp { .. } => 9,
            Pins(_) => 10,
            PerOut { .. } => 11,
            Events { .. } => 12,
            Source(_) => 13,
        }
    }
    fn put_payload(&self, w: &mut Writer) {
        use ClockReply::*;
        match self {
            Count { clocks } => w.put(clocks),
            Time { ns } => w.put(ns),
            TimeX { samples } => w.put(samples),
            Done => {}
            Caps(c) => w.put(c),
            Status(s) => w.put(s),
            Stats(s) => w.put(s),
            Error(e) => w.put(e),
            Tstamp { tx_on, rx_filter } => {
                w.put(tx_on);
                w.put(rx_filter);
            }
            Pins(p) => w.put(p),
            PerOut { first_ns } => w.put(first_ns),
            Events {
                first_seq,
                lost,
                events,
            } => {
                w.put(first_seq);
                w.put(lost);
                w.put(events);
            }
            Source(s) => w.put(s),
        }
    }
    fn get_payload(kind: u16, r: &mut Reader) -> Result<Self, DecodeError> {
        use ClockReply::*;
        Ok(match kind {
            1 => Count { clocks: r.get()? },
            2 => Time { ns: r.get()? },
            3 => TimeX { samples: r.get()? },
            4 => Done,
            5 => Caps(r.get()?),
            6 => Status(r.get()?),
            7 => Stats(r.get()?),
            8 => Error(r.get()?),
            9 => Tstamp {
                tx_on: r.get()?,
                rx_filter: r.get()?,
            },
            10 => Pins(r.get()?),
            11 => PerOut { first_ns: r.get()? },
            12 => Events {
                first_seq: r.get()?,
                lost: r.get()?,
                events: r.get()?,
            },
            13 => Source(r.get()?),
            k => return Err(DecodeError::UnknownKind(k)),
        })
    }
}

#[cfg(test)]
mod tests;
