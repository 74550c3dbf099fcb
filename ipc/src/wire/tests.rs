use super::*;
use proptest::prelude::*;

// ---- strategies -------------------------------------------------------------------------------

fn frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(any::<u8>(), MAX_FRAME - 2..=MAX_FRAME),
    ]
}

/// Strings up to `max` bytes, non-ASCII included (a char takes up to 4 bytes).
fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..=max).prop_map(move |cs| {
        let mut s = String::new();
        for c in cs {
            if s.len() + c.len_utf8() > max {
                break;
            }
            s.push(c);
        }
        s
    })
}

fn samples() -> impl Strategy<Value = Vec<TimeXSample>> {
    prop::collection::vec(
        any::<(u64, u64, u64)>().prop_map(|(a, b, c)| TimeXSample {
            sys_before_ns: a,
            phc_ns: b,
            sys_after_ns: c,
        }),
        0..=usize::from(MAX_SAMPLES),
    )
}

fn rx_filter() -> impl Strategy<Value = RxFilter> {
    use RxFilter::*;
    prop::sample::select(vec![
        None,
        All,
        PtpV2Event,
        PtpV2L2Event,
        PtpV2L4Event,
        PtpV1L4Event,
        PtpV2L2Sync,
        PtpV2L2DelayReq,
        PtpV2L4Sync,
        PtpV2L4DelayReq,
    ])
}

fn lost_reason() -> impl Strategy<Value = LostReason> {
    use LostReason::*;
    prop::sample::select(vec![Timeout, Disabled, NoFreeSlot, Reset, NotSent])
}

fn close_reason() -> impl Strategy<Value = CloseReason> {
    use CloseReason::*;
    prop::sample::select(vec![PermissionDenied, Replaced, NoHello, Busy])
}

fn clock_error() -> impl Strategy<Value = ClockError> {
    use ClockError::*;
    prop::sample::select(vec![
        InvalidArgument,
        PermissionDenied,
        NoDevice,
        Restarted,
        Timeout,
        Unsupported,
        Busy,
        Io,
    ])
}

fn port_state() -> impl Strategy<Value = PortState> {
    use PortState::*;
    prop::sample::select(vec![
        Initializing,
        Faulty,
        Disabled,
        Listening,
        PreMaster,
        Master,
        Passive,
        Uncalibrated,
        Slave,
    ])
}

fn caps() -> impl Strategy<Value = Caps> {
    (
        text(MAX_TEXT),
        any::<(u16, u16, u32, u8, u32, u8, u8, bool)>(),
        text(MAX_PATH),
        any::<[u8; 6]>(),
    )
        .prop_map(
            |(part, (v, d, adj, sets, filt, ext, per, cross), page, mac)| Caps {
                part,
                vendor_id: v,
                device_id: d,
                mac,
                max_adj_ppb: adj,
                tx_ts_sets: sets,
                rx_filters: filt,
                n_ext_ts: ext,
                n_per_out: per,
                cross_timestamp: cross,
                clock_page: page,
            },
        )
}

fn stats() -> impl Strategy<Value = Stats> {
    prop::array::uniform18(any::<u64>()).prop_map(|a| Stats {
        tx_requested: a[0],
        tx_delivered: a[1],
        tx_skipped: a[2],
        tx_timeouts: a[3],
        tx_lost: a[4],
        quirk_recoveries: a[5],
        interrupts: a[6],
        mmio_reads: a[7],
        mmio_writes: a[8],
        tx_frames: a[9],
        rx_frames: a[10],
        rx_timestamped: a[11],
        rx_other: a[12],
        irq_wakeups: a[13],
        ts_wakeups: a[14],
        napi_polls: a[15],
        spin_work: a[16],
        spin_idle: a[17],
    })
}

fn status() -> impl Strategy<Value = ClockStatus> {
    (
        any::<(bool, u64, u64, bool, u32)>(),
        port_state(),
        any::<(i64, i64, i64, [u8; 8], u16)>(),
        any::<(u64, u64, u64)>(),
    )
        .prop_map(
            |((du, g, c, lu, sp), ps, (o, d, f, gm, sr), (cr, rm, rt))| ClockStatus {
                driver_up: du,
                generation: g,
                connects: c,
                link_up: lu,
                link_speed_mbps: sp,
                port_state: ps,
                offset_ns: o,
                mean_path_delay_ns: d,
                freq_scaled_ppm: f,
                grandmaster: gm,
                steps_removed: sr,
                clients_refused: cr,
                requests_malformed: rm,
                requests_throttled: rt,
            },
        )
}

fn driver_error() -> impl Strategy<Value = DriverError> {
    use DriverError::*;
    prop_oneof![
        Just(InvalidArgument),
        Just(Unsupported),
        Just(Timeout),
        Just(Busy),
        Just(BadFrame),
        text(MAX_TEXT).prop_map(Other),
    ]
}

fn ptpd_to_driver() -> impl Strategy<Value = PtpdToDriver> {
    use DriverRequest::*;
    let request = prop_oneof![
        (any::<u64>(), any::<bool>(), frame()).prop_map(|(cookie, want_ts, frame)| SendPtp {
            cookie,
            want_ts,
            frame
        }),
        Just(GetTime),
        any::<u8>().prop_map(|samples| GetTimeX { samples }),
        any::<u64>().prop_map(|ns| SetTime { ns }),
        any::<i64>().prop_map(|delta_ns| AdjTime { delta_ns }),
        any::<i64>().prop_map(|scaled_ppm| AdjFine { scaled_ppm }),
        (any::<bool>(), rx_filter())
            .prop_map(|(tx_on, rx_filter)| SetTstampConfig { tx_on, rx_filter }),
        Just(Caps),
        Just(Stats),
        Just(Hello),
        Just(GetFreq),
        Just(GetPins),
        (any::<u8>(), pin_function(), any::<u8>()).prop_map(|(pin, func, chan)| SetPin {
            pin,
            func,
            chan
        }),
        any::<(u8, bool)>().prop_map(|(chan, on)| ExtTs { chan, on }),
        any::<(u8, u64, u64)>().prop_map(|(chan, start_ns, period_ns)| PerOut {
            chan,
            start_ns,
            period_ns
        }),
        any::<bool>().prop_map(|on| Pps { on }),
        (any::<u32>(), any::<u32>()).prop_map(|(slot_size, slot_count)| HelloRing {
            slot_size,
            slot_count
        }),
    ];
    (any::<u32>(), request).prop_map(|(seq, request)| PtpdToDriver { seq, request })
}

fn driver_to_ptpd() -> impl Strategy<Value = DriverToPtpd> {
    use DriverEvent as E;
    use DriverReply as R;
    let reply = prop_oneof![
        Just(R::Done),
        any::<u64>().prop_map(|ns| R::Time { ns }),
        samples().prop_map(|samples| R::TimeX { samples }),
        (any::<bool>(), rx_filter())
            .prop_map(|(tx_on, rx_filter)| R::TstampConfig { tx_on, rx_filter }),
        caps().prop_map(R::Caps),
        stats().prop_map(R::Stats),
        driver_error().prop_map(R::Error),
        any::<i64>().prop_map(|scaled_ppm| R::Freq { scaled_ppm }),
        pins().prop_map(R::Pins),
        any::<u64>().prop_map(|first_ns| R::PerOut { first_ns }),
    ];
    let event = prop_oneof![
        any::<(u64, u64)>().prop_map(|(cookie, ns)| E::TxTimestamp { cookie, ns }),
        (any::<u64>(), lost_reason())
            .prop_map(|(cookie, reason)| E::TxTimestampLost { cookie, reason }),
        (any::<Option<u64>>(), frame()).prop_map(|(rx_ns, frame)| E::PtpFrame { rx_ns, frame }),
        any::<(bool, u32)>().prop_map(|(up, speed_mbps)| E::Link { up, speed_mbps }),
        any::<u64>().prop_map(|generation| E::Restarted { generation }),
        close_reason().prop_map(|reason| E::Closed { reason }),
        ext_ts().prop_map(E::ExtTs),
        any::<u64>().prop_map(|sys_ns| E::Pps { sys_ns }),
    ];
    prop_oneof![
        (any::<u32>(), reply).prop_map(|(seq, reply)| DriverToPtpd::Reply { seq, reply }),
        event.prop_map(DriverToPtpd::Event),
    ]
}

fn clock_request() -> impl Strategy<Value = ClockRequest> {
    use ClockRequest::*;
    prop_oneof![
        Just(List),
        any::<u32>().prop_map(|clock| Get { clock }),
        any::<(u32, u8)>().prop_map(|(clock, samples)| GetTimeX { clock, samples }),
        any::<(u32, u64)>().prop_map(|(clock, ns)| Set { clock, ns }),
        any::<(u32, i64)>().prop_map(|(clock, delta_ns)| Adj { clock, delta_ns }),
        any::<(u32, i64)>().prop_map(|(clock, scaled_ppm)| Freq { clock, scaled_ppm }),
        any::<u32>().prop_map(|clock| Caps { clock }),
        any::<u32>().prop_map(|clock| Status { clock }),
        any::<u32>().prop_map(|clock| Stats { clock }),
        (any::<(u32, bool)>(), rx_filter()).prop_map(|((clock, tx_on), rx_filter)| SetTstamp {
            clock,
            tx_on,
            rx_filter
        }),
        any::<u32>().prop_map(|clock| Pins { clock }),
        (any::<(u32, u8, u8)>(), pin_function()).prop_map(|((clock, pin, chan), func)| SetPin {
            clock,
            pin,
            func,
            chan
        }),
        any::<(u32, u8, bool)>().prop_map(|(clock, chan, on)| ExtTs { clock, chan, on }),
        any::<(u32, u8, u64, u64)>().prop_map(|(clock, chan, start_ns, period_ns)| PerOut {
            clock,
            chan,
            start_ns,
            period_ns
        }),
        any::<(u32, bool)>().prop_map(|(clock, on)| Pps { clock, on }),
        any::<(u32, u64)>().prop_map(|(clock, after)| Events { clock, after }),
        any::<u32>().prop_map(|clock| Source { clock }),
    ]
}

fn pin_function() -> impl Strategy<Value = PinFunction> {
    prop_oneof![
        Just(PinFunction::None),
        Just(PinFunction::ExtTs),
        Just(PinFunction::PerOut)
    ]
}

fn pins() -> impl Strategy<Value = Vec<PinConfig>> {
    prop::collection::vec(
        (any::<u8>(), pin_function(), any::<u8>()).prop_map(|(pin, func, chan)| PinConfig {
            pin,
            func,
            chan,
        }),
        0..=MAX_PINS as usize,
    )
}

fn ext_ts() -> impl Strategy<Value = ExtTsEvent> {
    any::<(u8, u64)>().prop_map(|(chan, ns)| ExtTsEvent { chan, ns })
}

fn clock_reply() -> impl Strategy<Value = ClockReply> {
    use ClockReply::*;
    prop_oneof![
        any::<u32>().prop_map(|clocks| Count { clocks }),
        any::<u64>().prop_map(|ns| Time { ns }),
        samples().prop_map(|samples| TimeX { samples }),
        Just(Done),
        caps().prop_map(Caps),
        status().prop_map(Status),
        stats().prop_map(Stats),
        clock_error().prop_map(Error),
        (any::<bool>(), rx_filter()).prop_map(|(tx_on, rx_filter)| Tstamp { tx_on, rx_filter }),
        pins().prop_map(Pins),
        any::<u64>().prop_map(|first_ns| PerOut { first_ns }),
        (
            any::<(u64, u64)>(),
            prop::collection::vec(ext_ts(), 0..=MAX_EVENTS as usize)
        )
            .prop_map(|((first_seq, lost), events)| Events {
                first_seq,
                lost,
                events
            }),
        any::<(u8, u8, i64, u64, u64)>().prop_map(
            |(state, clock_class, offset_ns, pulses, steps)| {
                Source(SourceStatus {
                    state,
                    clock_class,
                    offset_ns,
                    pulses,
                    steps,
                })
            }
        ),
    ]
}

/// Any message of any channel, already encoded.
fn any_encoding() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        ptpd_to_driver().prop_map(|m| m.to_bytes()),
        driver_to_ptpd().prop_map(|m| m.to_bytes()),
        clock_request().prop_map(|m| m.to_bytes()),
        clock_reply().prop_map(|m| m.to_bytes()),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip(usize, u8),
    Insert(usize, u8),
    Remove(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1..=255u8).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<(usize, u8)>().prop_map(|(i, x)| Mutation::Insert(i, x)),
        any::<usize>().prop_map(Mutation::Remove),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len();
    match *m {
        Mutation::Truncate(i) => bytes.truncate(i % (n + 1)),
        Mutation::Flip(i, x) if n > 0 => bytes[i % n] ^= x,
        Mutation::Insert(i, x) => bytes.insert(i % (n + 1), x),
        Mutation::Remove(i) if n > 0 => {
            bytes.remove(i % n);
        }
        _ => {}
    }
}

/// Decodes `bytes` as every message type: none may panic (the assertion is that we return).
fn decode_all(bytes: &[u8]) {
    let _ = PtpdToDriver::decode(bytes);
    let _ = DriverToPtpd::decode(bytes);
    let _ = ClockRequest::decode(bytes);
    let _ = ClockReply::decode(bytes);
}

fn roundtrip<M: Wire + PartialEq + std::fmt::Debug>(m: &M) -> Result<(), TestCaseError> {
    let bytes = m.to_bytes();
    prop_assert!(bytes.len() <= MAX_MESSAGE);
    prop_assert_eq!(bytes[0], WIRE_VERSION);
    prop_assert_eq!(bytes[1], M::CHANNEL);
    prop_assert_eq!(&M::decode(&bytes)?, m);
    // encode appends: a prefix is kept and the result is the same bytes.
    let mut out = vec![0xEE];
    m.encode(&mut out);
    prop_assert_eq!(&out[1..], &bytes[..]);
    Ok(())
}

proptest! {
    #[test]
    fn roundtrip_ptpd_to_driver(m in ptpd_to_driver()) { roundtrip(&m)?; }

    #[test]
    fn roundtrip_driver_to_ptpd(m in driver_to_ptpd()) { roundtrip(&m)?; }

    #[test]
    fn roundtrip_clock_request(m in clock_request()) { roundtrip(&m)?; }

    #[test]
    fn roundtrip_clock_reply(m in clock_reply()) { roundtrip(&m)?; }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    /// Arbitrary payloads behind a plausible header, so decoding gets past the header checks.
    #[test]
    fn arbitrary_payloads_never_panic(
        channel in 1..=4u8,
        kind in prop_oneof![0..14u16, 0x100..0x108u16, any::<u16>()],
        payload in prop::collection::vec(any::<u8>(), 0..128),
    ) {
        let mut bytes = vec![WIRE_VERSION, channel];
        bytes.extend_from_slice(&kind.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&payload);
        decode_all(&bytes);
    }

    #[test]
    fn mutated_encodings_never_panic(
        mut bytes in any_encoding(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        for m in &mutations {
            apply(&mut bytes, m);
        }
        decode_all(&bytes);
        // Fixing up the length field reaches the field decoders with the mutated payload.
        if bytes.len() >= HEADER_LEN {
            let len = (bytes.len() - HEADER_LEN) as u32;
            bytes[4..8].copy_from_slice(&len.to_le_bytes());
            decode_all(&bytes);
        }
    }

    #[test]
    fn every_truncation_is_an_error(bytes in any_encoding()) {
        for n in 0..bytes.len() {
            let t = &bytes[..n];
            prop_assert!(PtpdToDriver::decode(t).is_err());
            prop_assert!(DriverToPtpd::decode(t).is_err());
            prop_assert!(ClockRequest::decode(t).is_err());
            prop_assert!(ClockReply::decode(t).is_err());
        }
    }
}

// ---- golden bytes: the format must not drift silently ------------------------------------------

#[test]
fn golden_get_time() {
    let m = PtpdToDriver {
        seq: 7,
        request: DriverRequest::GetTime,
    };
    let want = [1, 1, 2, 0, 4, 0, 0, 0, 7, 0, 0, 0];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(PtpdToDriver::decode(&want), Ok(m));
}

#[test]
fn golden_send_ptp() {
    let m = PtpdToDriver {
        seq: 1,
        request: DriverRequest::SendPtp {
            cookie: 0x1122_3344_5566_7788,
            want_ts: true,
            frame: vec![0xAA, 0xBB, 0xCC],
        },
    };
    #[rustfmt::skip]
    let want = [
        1, 1, 1, 0, 18, 0, 0, 0,                          // v1, ptpd→driver, SendPtp, len 18
        1, 0, 0, 0,                                       // seq
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,   // cookie
        1,                                                // want_ts
        3, 0, 0xAA, 0xBB, 0xCC,                           // frame
    ];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(PtpdToDriver::decode(&want), Ok(m));
}

#[test]
fn golden_tx_timestamp() {
    let m = DriverToPtpd::Event(DriverEvent::TxTimestamp {
        cookie: 5,
        ns: 1_000_000_001,
    });
    #[rustfmt::skip]
    let want = [
        1, 2, 0x01, 0x01, 16, 0, 0, 0,
        5, 0, 0, 0, 0, 0, 0, 0,
        0x01, 0xCA, 0x9A, 0x3B, 0, 0, 0, 0,
    ];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(DriverToPtpd::decode(&want), Ok(m));
}

#[test]
fn golden_reply_error_other() {
    let m = DriverToPtpd::Reply {
        seq: 0x0102_0304,
        reply: DriverReply::Error(DriverError::Other("hw".into())),
    };
    let want = [1, 2, 7, 0, 8, 0, 0, 0, 4, 3, 2, 1, 6, 2, b'h', b'w'];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(DriverToPtpd::decode(&want), Ok(m));
}

#[test]
fn golden_adj_negative() {
    let m = ClockRequest::Adj {
        clock: 2,
        delta_ns: -1000,
    };
    #[rustfmt::skip]
    let want = [
        1, 3, 5, 0, 12, 0, 0, 0,
        2, 0, 0, 0,
        0x18, 0xFC, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    ];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(ClockRequest::decode(&want), Ok(m));
}

#[test]
fn golden_get_freq() {
    let m = PtpdToDriver {
        seq: 3,
        request: DriverRequest::GetFreq,
    };
    let want = [1, 1, 12, 0, 4, 0, 0, 0, 3, 0, 0, 0];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(PtpdToDriver::decode(&want), Ok(m));
    // -4 ppm = -262144 scaled ppm.
    let m = DriverToPtpd::Reply {
        seq: 3,
        reply: DriverReply::Freq {
            scaled_ppm: -262_144,
        },
    };
    #[rustfmt::skip]
    let want = [
        1, 2, 0x08, 0, 12, 0, 0, 0,
        3, 0, 0, 0,
        0x00, 0x00, 0xFC, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    ];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(DriverToPtpd::decode(&want), Ok(m));
}

/// The pin messages' numbers and layouts (kinds 13–17, 0x009/0x00A, 0x107, ClockRequest 12
/// and 16, ClockReply 12).
#[test]
fn golden_pins() {
    let m = PtpdToDriver {
        seq: 2,
        request: DriverRequest::SetPin {
            pin: 1,
            func: PinFunction::ExtTs,
            chan: 0,
        },
    };
    let want = [1, 1, 14, 0, 7, 0, 0, 0, 2, 0, 0, 0, 1, 1, 0];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(PtpdToDriver::decode(&want), Ok(m));
    let m = DriverToPtpd::Event(DriverEvent::ExtTs(ExtTsEvent {
        chan: 1,
        ns: 0x0102,
    }));
    let want = [1, 2, 0x07, 1, 9, 0, 0, 0, 1, 2, 1, 0, 0, 0, 0, 0, 0];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(DriverToPtpd::decode(&want), Ok(m));
    let m = DriverToPtpd::Reply {
        seq: 5,
        reply: DriverReply::Pins(vec![PinConfig {
            pin: 3,
            func: PinFunction::PerOut,
            chan: 1,
        }]),
    };
    let want = [1, 2, 0x09, 0, 8, 0, 0, 0, 5, 0, 0, 0, 1, 3, 2, 1];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(DriverToPtpd::decode(&want), Ok(m));
    let m = ClockRequest::Events { clock: 0, after: 7 };
    let want = [1, 3, 16, 0, 12, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(ClockRequest::decode(&want), Ok(m));
    // A pin function outside Linux's three, and a count beyond its bound, are refused.
    let mut bad = [1, 1, 14, 0, 7, 0, 0, 0, 2, 0, 0, 0, 1, 3, 0];
    assert_eq!(
        PtpdToDriver::decode(&bad),
        Err(DecodeError::InvalidValue("PinFunction"))
    );
    bad[13] = 1;
    assert!(PtpdToDriver::decode(&bad).is_ok());
    let mut many = vec![1, 2, 0x09, 0, 5, 0, 0, 0, 5, 0, 0, 0, MAX_PINS + 1];
    assert_eq!(
        DriverToPtpd::decode(&many),
        Err(DecodeError::TooLong("pins"))
    );
    many[12] = 2;
    assert_eq!(DriverToPtpd::decode(&many), Err(DecodeError::Truncated));
}

#[test]
fn golden_hello_and_closed() {
    let hello = PtpdToDriver {
        seq: 1,
        request: DriverRequest::Hello,
    };
    let want = [1, 1, 10, 0, 4, 0, 0, 0, 1, 0, 0, 0];
    assert_eq!(hello.to_bytes(), want);
    assert_eq!(PtpdToDriver::decode(&want), Ok(hello));
    let ring = PtpdToDriver {
        seq: 2,
        request: DriverRequest::HelloRing {
            slot_size: 512,
            slot_count: 256,
        },
    };
    let want = [1, 1, 11, 0, 12, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0];
    assert_eq!(ring.to_bytes(), want);
    assert_eq!(PtpdToDriver::decode(&want), Ok(ring));
    assert_eq!(
        PtpdToDriver::decode(&[1, 1, 18, 0, 4, 0, 0, 0, 1, 0, 0, 0]),
        Err(DecodeError::UnknownKind(18))
    );
    for (reason, byte) in [
        (CloseReason::PermissionDenied, 1),
        (CloseReason::Replaced, 2),
        (CloseReason::NoHello, 3),
        (CloseReason::Busy, 4),
    ] {
        let m = DriverToPtpd::Event(DriverEvent::Closed { reason });
        let want = [1, 2, 0x06, 0x01, 1, 0, 0, 0, byte];
        assert_eq!(m.to_bytes(), want);
        assert_eq!(DriverToPtpd::decode(&want), Ok(m));
    }
    assert_eq!(
        DriverToPtpd::decode(&[1, 2, 0x06, 0x01, 1, 0, 0, 0, 0]),
        Err(DecodeError::InvalidValue("CloseReason"))
    );
}

#[test]
fn golden_permission_denied() {
    let m = ClockReply::Error(ClockError::PermissionDenied);
    let want = [1, 4, 8, 0, 1, 0, 0, 0, 2];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(ClockReply::decode(&want), Ok(m));
}

#[test]
fn golden_status() {
    let m = ClockReply::Status(ClockStatus {
        driver_up: true,
        generation: 3,
        connects: 2,
        link_up: true,
        link_speed_mbps: 1000,
        port_state: PortState::Slave,
        offset_ns: -5,
        mean_path_delay_ns: 300,
        freq_scaled_ppm: 65536,
        grandmaster: [0, 1, 2, 3, 4, 5, 6, 7],
        steps_removed: 1,
        clients_refused: 4,
        requests_malformed: 0x105,
        requests_throttled: 6,
    });
    #[rustfmt::skip]
    let want = [
        1, 4, 6, 0, 81, 0, 0, 0,
        1,                                                  // driver_up
        3, 0, 0, 0, 0, 0, 0, 0,                             // generation
        2, 0, 0, 0, 0, 0, 0, 0,                             // connects
        1,                                                  // link_up
        0xE8, 0x03, 0, 0,                                   // link_speed_mbps
        8,                                                  // port_state Slave
        0xFB, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,     // offset_ns -5
        0x2C, 0x01, 0, 0, 0, 0, 0, 0,                       // mean_path_delay_ns 300
        0, 0, 1, 0, 0, 0, 0, 0,                             // freq_scaled_ppm 65536
        0, 1, 2, 3, 4, 5, 6, 7,                             // grandmaster
        1, 0,                                               // steps_removed
        4, 0, 0, 0, 0, 0, 0, 0,                             // clients_refused
        5, 1, 0, 0, 0, 0, 0, 0,                             // requests_malformed 0x105
        6, 0, 0, 0, 0, 0, 0, 0,                             // requests_throttled
    ];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(ClockReply::decode(&want), Ok(m));
}

#[test]
fn golden_caps() {
    let m = ClockReply::Caps(Caps {
        part: "i225".into(),
        vendor_id: 0x8086,
        device_id: 0x15F3,
        mac: [0x02, 0, 0, 0, 0, 0x01],
        max_adj_ppb: 62_499_999,
        tx_ts_sets: 4,
        rx_filters: 0b111,
        n_ext_ts: 0,
        n_per_out: 0,
        cross_timestamp: true,
        clock_page: "/c".into(),
    });
    #[rustfmt::skip]
    let want = [
        1, 4, 5, 0, 30, 0, 0, 0,
        4, b'i', b'2', b'2', b'5',
        0x86, 0x80, 0xF3, 0x15,
        0x02, 0, 0, 0, 0, 0x01,
        0x9F, 0xAC, 0xB9, 0x03,                             // 62_499_999 = 0x03B9AC9F
        4,
        7, 0, 0, 0,
        0, 0, 1,
        2, b'/', b'c',
    ];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(ClockReply::decode(&want), Ok(m));
}

// ---- typed errors -------------------------------------------------------------------------------

#[test]
fn version_mismatch_is_typed_and_checked_first() {
    let mut b = PtpdToDriver {
        seq: 7,
        request: DriverRequest::GetTime,
    }
    .to_bytes();
    b[0] = 2;
    assert_eq!(
        PtpdToDriver::decode(&b),
        Err(DecodeError::Version { got: 2, want: 1 })
    );
    // Even a lone version byte, or a wrong channel after it, reports the version.
    assert_eq!(
        ClockReply::decode(&[9]),
        Err(DecodeError::Version { got: 9, want: 1 })
    );
    assert_eq!(
        ClockReply::decode(&[0, 1]),
        Err(DecodeError::Version { got: 0, want: 1 })
    );
    assert_eq!(ClockReply::decode(&[]), Err(DecodeError::Truncated));
}

#[test]
fn wrong_channel() {
    let b = ClockRequest::List.to_bytes();
    assert_eq!(
        ClockReply::decode(&b),
        Err(DecodeError::WrongChannel { got: 3, want: 4 })
    );
    let b = PtpdToDriver {
        seq: 1,
        request: DriverRequest::Caps,
    }
    .to_bytes();
    assert_eq!(
        DriverToPtpd::decode(&b),
        Err(DecodeError::WrongChannel { got: 1, want: 2 })
    );
}

#[test]
fn structural_errors() {
    use DecodeError::*;
    // Header cut short.
    assert_eq!(ClockRequest::decode(&[1, 3, 1, 0]), Err(Truncated));
    // Unknown kinds, also ahead of a missing seq.
    assert_eq!(
        ClockRequest::decode(&[1, 3, 99, 0, 0, 0, 0, 0]),
        Err(UnknownKind(99))
    );
    assert_eq!(
        PtpdToDriver::decode(&[1, 1, 0, 0, 0, 0, 0, 0]),
        Err(UnknownKind(0))
    );
    assert_eq!(
        DriverToPtpd::decode(&[1, 2, 0x0B, 0, 0, 0, 0, 0]),
        Err(UnknownKind(0x0B))
    );
    assert_eq!(
        ClockReply::decode(&[1, 4, 0xFF, 0xFF, 0, 0, 0, 0]),
        Err(UnknownKind(KIND_INVALID))
    );
    // Header length disagrees with the bytes.
    assert_eq!(
        ClockRequest::decode(&[1, 3, 2, 0, 5, 0, 0, 0, 1, 0, 0, 0]),
        Err(LengthMismatch)
    );
    assert_eq!(
        ClockRequest::decode(&[1, 3, 2, 0, 3, 0, 0, 0, 1, 0, 0, 0]),
        Err(LengthMismatch)
    );
    // Consistent length but a field cut short, or bytes left over.
    assert_eq!(
        ClockRequest::decode(&[1, 3, 2, 0, 3, 0, 0, 0, 1, 0, 0]),
        Err(Truncated)
    );
    assert_eq!(
        ClockRequest::decode(&[1, 3, 1, 0, 1, 0, 0, 0, 0]),
        Err(TrailingBytes)
    );
}

#[test]
fn value_errors() {
    use DecodeError::*;
    // bool 2 in SetTstampConfig.tx_on; bad RxFilter; bad option tag; bad DriverError tag.
    let p = |kind: u16, payload: &[u8], ch: u8| {
        let mut b = vec![1, ch];
        b.extend_from_slice(&kind.to_le_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(payload);
        b
    };
    assert_eq!(
        PtpdToDriver::decode(&p(7, &[0, 0, 0, 0, 2, 0], 1)),
        Err(InvalidValue("bool"))
    );
    assert_eq!(
        PtpdToDriver::decode(&p(7, &[0, 0, 0, 0, 1, 10], 1)),
        Err(InvalidValue("RxFilter"))
    );
    assert_eq!(
        PtpdToDriver::decode(&p(7, &[0, 0, 0, 0, 1, 0xFF], 1)),
        Err(InvalidValue("RxFilter"))
    );
    assert_eq!(
        DriverToPtpd::decode(&p(0x103, &[2], 2)),
        Err(InvalidValue("option tag"))
    );
    assert_eq!(
        DriverToPtpd::decode(&p(7, &[0, 0, 0, 0, 0], 2)),
        Err(InvalidValue("DriverError"))
    );
    assert_eq!(
        ClockReply::decode(&p(8, &[0], 4)),
        Err(InvalidValue("ClockError"))
    );
    assert_eq!(
        ClockReply::decode(&p(8, &[9], 4)),
        Err(InvalidValue("ClockError"))
    );
    // Lengths beyond their bounds are refused before any allocation or byte check.
    let big = (MAX_FRAME as u16 + 1).to_le_bytes();
    assert_eq!(
        DriverToPtpd::decode(&p(0x103, &[0, big[0], big[1]], 2)),
        Err(TooLong("frame"))
    );
    assert_eq!(
        ClockReply::decode(&p(3, &[MAX_SAMPLES + 1], 4)),
        Err(TooLong("samples"))
    );
    assert_eq!(ClockReply::decode(&p(3, &[MAX_SAMPLES], 4)), Err(Truncated));
    assert_eq!(
        ClockReply::decode(&p(5, &[65], 4)),
        Err(TooLong("Caps.part"))
    );
    // Invalid UTF-8 in a string.
    assert_eq!(
        DriverToPtpd::decode(&p(7, &[0, 0, 0, 0, 6, 2, 0xC3, 0x28], 2)),
        Err(BadUtf8)
    );
}

#[test]
fn oversized_fields_are_refused_not_truncated() {
    let m = PtpdToDriver {
        seq: 1,
        request: DriverRequest::SendPtp {
            cookie: 1,
            want_ts: false,
            frame: vec![0; MAX_FRAME + 1],
        },
    };
    let mut out = vec![1, 2, 3];
    assert_eq!(m.try_encode(&mut out), Err(EncodeError::TooLong("frame")));
    assert_eq!(out, [1, 2, 3], "output rolled back");

    let caps = Caps {
        part: "x".repeat(MAX_TEXT + 1),
        ..Default::default()
    };
    let m = ClockReply::Caps(caps);
    assert_eq!(
        m.try_encode(&mut Vec::new()),
        Err(EncodeError::TooLong("Caps.part"))
    );
    let m = ClockReply::TimeX {
        samples: vec![TimeXSample::default(); 26],
    };
    assert_eq!(
        m.try_encode(&mut Vec::new()),
        Err(EncodeError::TooLong("samples"))
    );
    let m = DriverToPtpd::Reply {
        seq: 0,
        reply: DriverReply::Error(DriverError::Other("é".repeat(33))),
    };
    assert_eq!(
        m.try_encode(&mut Vec::new()),
        Err(EncodeError::TooLong("DriverError.Other"))
    );
}

/// `encode` of an unencodable message is a caller bug: debug builds panic, release builds emit a
/// message every decoder rejects.
#[test]
fn encode_of_oversized_message() {
    let m = ClockReply::TimeX {
        samples: vec![TimeXSample::default(); 26],
    };
    let r = std::panic::catch_unwind(|| m.to_bytes());
    if cfg!(debug_assertions) {
        assert!(r.is_err());
    } else {
        let b = r.expect("release encode does not panic");
        assert_eq!(b, [1, 4, 0xFF, 0xFF, 0, 0, 0, 0]);
        assert_eq!(
            ClockReply::decode(&b),
            Err(DecodeError::UnknownKind(KIND_INVALID))
        );
    }
}

#[test]
fn rx_filter_codes_round_trip_and_unknown_codes_are_refused() {
    for f in RxFilter::ALL {
        assert_eq!(RxFilter::from_code(f as u8), Some(f));
    }
    // The per-message filters keep Linux's order and the bits Caps advertises them by.
    assert_eq!(RxFilter::PtpV2L2Sync as u8, 6);
    assert_eq!(RxFilter::PtpV2L2DelayReq as u8, 7);
    assert_eq!(RxFilter::PtpV2L4Sync as u8, 8);
    assert_eq!(RxFilter::PtpV2L4DelayReq as u8, 9);
    for code in 10..=u8::MAX {
        assert_eq!(RxFilter::from_code(code), None);
    }
}

#[test]
fn golden_set_tstamp_and_its_reply() {
    let m = ClockRequest::SetTstamp {
        clock: 1,
        tx_on: false,
        rx_filter: RxFilter::All,
    };
    let want = [1, 3, 10, 0, 6, 0, 0, 0, 1, 0, 0, 0, 0, 1];
    assert_eq!(m.to_bytes(), want);
    assert_eq!(ClockRequest::decode(&want), Ok(m));
    let r = ClockReply::Tstamp {
        tx_on: true,
        rx_filter: RxFilter::PtpV2L2Event,
    };
    let want = [1, 4, 9, 0, 2, 0, 0, 0, 1, 3];
    assert_eq!(r.to_bytes(), want);
    assert_eq!(ClockReply::decode(&want), Ok(r));
    // An unknown filter code or a bool other than 0/1 is a typed error, not a request.
    assert_eq!(
        ClockRequest::decode(&[1, 3, 10, 0, 6, 0, 0, 0, 1, 0, 0, 0, 0, 10]),
        Err(DecodeError::InvalidValue("RxFilter"))
    );
    assert!(ClockRequest::decode(&[1, 3, 10, 0, 6, 0, 0, 0, 1, 0, 0, 0, 2, 1]).is_err());
}

#[test]
fn rx_filter_names_round_trip() {
    for f in RxFilter::ALL {
        assert_eq!(RxFilter::from_name(f.name()), Some(f));
    }
    assert_eq!(
        RxFilter::from_name("PTP_V2_EVENT"),
        Some(RxFilter::PtpV2Event)
    );
    assert_eq!(RxFilter::from_name("ptp_v2"), None);
}
