use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::linux::{new_region, send_fds};
use super::setup_message;
use super::*;
use crate::msg::{DriverRequest, PtpdToDriver};
use crate::transport::{Channel, SeqpacketConn, TransportError};

const LONG: Duration = Duration::from_secs(10);

fn cfg(slot_size: u32, slot_count: u32) -> RingConfig {
    RingConfig {
        geometry: Geometry::new(slot_size, slot_count).unwrap(),
        busy_poll: Duration::from_micros(20),
    }
}

/// (side A, side B, the two control connections, kept open).
fn pair(c: RingConfig) -> (RingEndpoint, RingEndpoint, SeqpacketConn, SeqpacketConn) {
    let (ca, cb) = SeqpacketConn::pair().unwrap();
    let a = offer_ring(&ca, c).unwrap();
    let b = accept_ring(&cb, LONG, c.busy_poll).unwrap();
    (a, b, ca, cb)
}

/// Deterministic message `i`: 1..=max bytes, content derived from `i`.
fn message(i: u64, max: usize) -> Vec<u8> {
    let len = 1 + (i.wrapping_mul(2654435761) % max as u64) as usize;
    (0..len).map(|k| (i as usize * 31 + k) as u8).collect()
}

#[test]
fn messages_arrive_in_order_across_many_wraps() {
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    let max = a.max_message();
    assert_eq!(max, 60);
    let mut buf = Vec::new();
    // 4 slots, 1000 messages of every length up to the slot's payload: 250 wraps each way.
    for i in 0..1000u64 {
        let m = message(i, max);
        a.send_bytes(&m, Some(LONG)).unwrap();
        b.send_bytes(&m, Some(LONG)).unwrap();
        b.recv_bytes(&mut buf, Some(LONG)).unwrap();
        assert_eq!(buf, m, "A -> B message {i}");
        a.recv_bytes(&mut buf, Some(LONG)).unwrap();
        assert_eq!(buf, m, "B -> A message {i}");
    }
    assert_eq!(a.stats().sent, 1000);
    assert_eq!(b.stats().received, 1000);
    assert!(!b.try_recv(&mut buf).unwrap(), "ring drained");
}

#[test]
fn typed_channel_over_a_ring_pair() {
    let (a, b, _ca, _cb) = pair(RingConfig::default());
    let ptpd = Channel::<_, PtpdToDriver, crate::msg::DriverToPtpd>::new(b);
    let driver = Channel::<_, crate::msg::DriverToPtpd, PtpdToDriver>::new(a);
    let req = PtpdToDriver {
        seq: 7,
        request: DriverRequest::SendPtp {
            cookie: 0xfeed,
            want_ts: true,
            frame: vec![0x5a; 300],
        },
    };
    ptpd.send(&req, Some(LONG)).unwrap();
    assert_eq!(driver.recv(Some(LONG)).unwrap(), req);
    // A frame beyond the 508-byte slot payload is refused whole, never cut.
    let big = PtpdToDriver {
        seq: 8,
        request: DriverRequest::SendPtp {
            cookie: 1,
            want_ts: false,
            frame: vec![0; 600],
        },
    };
    let e = ptpd.send(&big, Some(LONG)).unwrap_err();
    assert!(
        matches!(e, ChannelError::Transport(TransportError::TooLarge(n)) if n > 600),
        "{e:?}"
    );
    assert!(
        matches!(driver.recv(Some(Duration::from_millis(20))), Err(e) if e == ChannelError::Transport(TransportError::Timeout))
    );
}

use crate::transport::ChannelError;

#[test]
fn full_ring_is_back_pressure_then_frees() {
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    for i in 0..4u64 {
        a.try_send(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(a.try_send(b"x"), Err(RingError::Full));
    let t0 = Instant::now();
    assert_eq!(
        a.send_bytes(b"x", Some(Duration::from_millis(30))),
        Err(RingError::Timeout)
    );
    assert!(t0.elapsed() >= Duration::from_millis(30));
    assert_eq!(
        Transport::send(&a, b"x", Some(Duration::ZERO)),
        Err(TransportError::Timeout)
    );
    assert!(a.stats().full_events >= 3, "{:?}", a.stats());
    assert_eq!(a.stats().sent, 4, "nothing was sent while full");
    // The two sends that gave up are counted as drops; a plain try_send is not one.
    assert_eq!(a.stats().full_drops, 2, "{:?}", a.stats());
    let mut buf = Vec::new();
    b.recv_bytes(&mut buf, Some(LONG)).unwrap();
    assert_eq!(buf, 0u64.to_le_bytes());
    a.try_send(b"y").unwrap();
    for want in [
        1u64.to_le_bytes().to_vec(),
        2u64.to_le_bytes().to_vec(),
        3u64.to_le_bytes().to_vec(),
        b"y".to_vec(),
    ] {
        b.recv_bytes(&mut buf, Some(LONG)).unwrap();
        assert_eq!(buf, want);
    }
}

#[test]
fn blocked_producer_is_woken_by_the_consumer() {
    let (a, b, _ca, _cb) = pair(cfg(64, 2));
    let a = Arc::new(a);
    let tx = {
        let a = a.clone();
        std::thread::spawn(move || {
            for i in 0..2000u64 {
                a.send_bytes(&i.to_le_bytes(), Some(LONG)).unwrap();
            }
        })
    };
    let mut buf = Vec::new();
    for i in 0..2000u64 {
        b.recv_bytes(&mut buf, Some(LONG)).unwrap();
        assert_eq!(buf, i.to_le_bytes());
        if i % 500 == 0 {
            // Let the producer fill the ring and go to sleep on it.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    tx.join().unwrap();
    let (sa, sb) = (a.stats(), b.stats());
    assert!(sa.full_events > 0 && sa.sleeps > 0, "{sa:?}");
    // Every producer sleep that was not already satisfied needed the consumer's signal.
    assert!(sb.signals > 0, "consumer never woke the producer: {sb:?}");
}

#[test]
fn oversize_message_is_refused_whole() {
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    let max = a.max_message();
    assert_eq!(
        a.try_send(&vec![1; max + 1]),
        Err(RingError::TooLarge { len: max + 1, max })
    );
    assert_eq!(
        Transport::send(&a, &vec![1; max + 1], None),
        Err(TransportError::TooLarge(max + 1))
    );
    let mut buf = Vec::new();
    assert!(!b.try_recv(&mut buf).unwrap(), "nothing was sent");
    a.try_send(&vec![2; max]).unwrap();
    b.recv_bytes(&mut buf, Some(LONG)).unwrap();
    assert_eq!(buf, vec![2; max]);
}

/// Offers a hand-made region with `setup` written into its header; returns what accept says.
fn accept_hostile(len: usize, sealed: bool, write: impl FnOnce(&Mapping)) -> RingError {
    let (ca, cb) = SeqpacketConn::pair().unwrap();
    let region = new_region(len, sealed).unwrap();
    let map = Mapping::map(region.as_fd(), len).unwrap();
    write(&map);
    let e: Vec<_> = (0..4)
        .map(|_| super::linux::new_eventfd().unwrap())
        .collect();
    let fds = [
        region.as_fd(),
        e[0].as_fd(),
        e[1].as_fd(),
        e[2].as_fd(),
        e[3].as_fd(),
    ];
    send_fds(super::linux::sock(&ca), &setup_message(len), &fds).unwrap();
    match accept_ring(&cb, LONG, Duration::ZERO) {
        Ok(_) => panic!("hostile region accepted"),
        Err(e) => e,
    }
}

#[test]
fn hostile_headers_are_typed_errors() {
    let g = Geometry::new(64, 4).unwrap();
    let len = g.region_len();
    let good = |m: &Mapping| layout::init(m.control(), g);
    let e = accept_hostile(len, true, |_| {});
    assert_eq!(e, RingError::BadMagic(0));
    let e = accept_hostile(len, true, |m| {
        good(m);
        m.control().header.version.store(9, Ordering::Relaxed);
    });
    assert_eq!(e, RingError::BadVersion(9));
    for (size, count) in [
        (63, 4),
        (72, 3),
        (64, 0),
        (64, 1 << 20),
        (1 << 20, 4),
        (60, 4),
    ] {
        let e = accept_hostile(len, true, |m| {
            good(m);
            m.control().header.slot_size.store(size, Ordering::Relaxed);
            m.control()
                .header
                .slot_count
                .store(count, Ordering::Relaxed);
        });
        assert_eq!(
            e,
            RingError::BadGeometry {
                slot_size: size,
                slot_count: count
            }
        );
    }
    // A header claiming more slots than the region holds (a read past the end would fault).
    let e = accept_hostile(len, true, |m| {
        good(m);
        m.control().header.slot_count.store(8, Ordering::Relaxed);
    });
    assert_eq!(
        e,
        RingError::RegionTooSmall {
            have: len,
            need: Geometry::new(64, 8).unwrap().region_len()
        }
    );
    // A region its creator could still shrink under us.
    let e = accept_hostile(len, false, good);
    assert!(
        matches!(e, RingError::Setup(ref s) if s.contains("sealed")),
        "{e:?}"
    );
}

#[test]
fn bad_setup_messages_are_refused() {
    let (ca, cb) = SeqpacketConn::pair().unwrap();
    Transport::send(&ca, b"hello there", None).unwrap();
    // Not an offer: its bytes come back for the caller to decode (a driver's refusal).
    assert_eq!(
        accept_ring(&cb, LONG, Duration::ZERO).err(),
        Some(RingError::NotOffered(b"hello there".to_vec()))
    );
    // The right message without descriptors.
    Transport::send(&ca, &setup_message(4096), None).unwrap();
    assert!(
        matches!(accept_ring(&cb, LONG, Duration::ZERO), Err(RingError::Setup(ref s)) if s.contains("0 descriptors"))
    );
    // Nothing at all within the timeout; a closed peer.
    let t0 = Instant::now();
    assert_eq!(
        accept_ring(&cb, Duration::from_millis(30), Duration::ZERO).err(),
        Some(RingError::Timeout)
    );
    assert!(t0.elapsed() < LONG);
    drop(ca);
    assert_eq!(
        accept_ring(&cb, LONG, Duration::ZERO).err(),
        Some(RingError::PeerGone)
    );
}

#[test]
fn hostile_indices_and_lengths_are_typed_errors() {
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    let ctl_a = a.ctl();
    let mut buf = Vec::new();
    // The producer's published head jumps beyond the ring.
    ctl_a.rings[0].head.0.store(1000, Ordering::Release);
    assert_eq!(
        b.try_recv(&mut buf),
        Err(RingError::Corrupt("producer's head is beyond the ring"))
    );
    ctl_a.rings[0].head.0.store(0, Ordering::Release);
    // A slot whose length exceeds the slot: skipped with an error, the next message still comes.
    a.try_send(b"first").unwrap();
    a.try_send(b"second").unwrap();
    // Safety: slot 0 of ring 0 starts right after the control part; the test owns both sides.
    unsafe {
        let p = a.map.base().add(layout::CONTROL_LEN);
        std::ptr::copy_nonoverlapping(u32::MAX.to_le_bytes().as_ptr(), p, 4);
    }
    assert_eq!(
        b.try_recv(&mut buf),
        Err(RingError::Corrupt("slot length exceeds the slot"))
    );
    assert!(b.try_recv(&mut buf).unwrap());
    assert_eq!(buf, b"second");
    // The consumer's published tail runs ahead of the producer's head.
    b.ctl().rings[0].tail.0.store(77, Ordering::Release);
    assert!(matches!(a.try_send(b"x"), Err(RingError::Corrupt(_))));
    assert!(matches!(
        Transport::send(&a, b"x", None),
        Err(TransportError::Io(_))
    ));
}

#[test]
fn random_scribbles_never_panic_the_consumer() {
    let (a, b, _ca, _cb) = pair(cfg(64, 8));
    let len = a.map.len();
    let mut x = 0x9e3779b97f4a7c15u64;
    let mut buf = Vec::new();
    for round in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Scribble one byte of ring 0's control lines or slots (never the header: attach
        // already checked that, and the geometry is copied out).
        let lo = std::mem::offset_of!(layout::Control, rings);
        let off = lo + (x as usize % (len - lo));
        // Safety: `off` < len, inside the mapping; the test owns both sides.
        unsafe { *a.map.base().add(off) = (x >> 32) as u8 };
        let _ = b.try_recv(&mut buf);
        let _ = a.try_send(&message(round, 60));
        assert!(buf.len() <= b.max_message());
    }
}

#[test]
fn closing_either_side_is_seen_by_the_other() {
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    a.try_send(b"last words").unwrap();
    drop(a);
    let mut buf = Vec::new();
    // What was queued still arrives, then PeerGone (a typed error, not a wait).
    b.recv_bytes(&mut buf, Some(LONG)).unwrap();
    assert_eq!(buf, b"last words");
    let t0 = Instant::now();
    assert_eq!(b.recv_bytes(&mut buf, Some(LONG)), Err(RingError::PeerGone));
    assert_eq!(b.try_send(b"x"), Err(RingError::PeerGone));
    assert!(t0.elapsed() < Duration::from_secs(1));

    // A receiver already asleep is woken by the peer's shutdown.
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    let b = Arc::new(b);
    let rx = {
        let b = b.clone();
        std::thread::spawn(move || b.recv_bytes(&mut Vec::new(), Some(LONG)))
    };
    std::thread::sleep(Duration::from_millis(50));
    Transport::shutdown(&a);
    assert_eq!(rx.join().unwrap(), Err(RingError::PeerGone));
    assert_eq!(
        Transport::recv(&*b, &mut buf, Some(LONG)),
        Err(TransportError::Disconnected)
    );
}

#[test]
fn a_consumer_that_never_sleeps_gets_no_signals() {
    let (a, b, _ca, _cb) = pair(cfg(64, 256));
    const N: u64 = 100_000;
    let rx = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut next = 0u64;
        // Busy-drains with try_recv: never announces sleep.
        while next < N {
            if b.try_recv(&mut buf).unwrap() {
                assert_eq!(buf, next.to_le_bytes());
                next += 1;
            } else {
                std::hint::spin_loop();
            }
        }
        b.stats()
    });
    for i in 0..N {
        a.send_bytes(&i.to_le_bytes(), Some(LONG)).unwrap();
    }
    let sb = rx.join().unwrap();
    let sa = a.stats();
    assert_eq!(sa.sent, N);
    assert_eq!(sb.received, N);
    assert_eq!(
        sa.signals, 0,
        "producer signalled a consumer that never slept: {sa:?}"
    );

    // And one that does sleep is signalled, at most once per sleep.
    let (a, b, _ca, _cb) = pair(cfg(64, 256));
    let rx = std::thread::spawn(move || {
        let mut buf = Vec::new();
        for _ in 0..20 {
            b.recv_bytes(&mut buf, Some(LONG)).unwrap();
        }
        b.stats()
    });
    for i in 0..20u64 {
        std::thread::sleep(Duration::from_millis(5));
        a.send_bytes(&i.to_le_bytes(), Some(LONG)).unwrap();
    }
    let sb = rx.join().unwrap();
    let sa = a.stats();
    assert!(sa.signals >= 1 && sa.signals <= sb.sleeps, "{sa:?} {sb:?}");
    assert_eq!(sb.wait_timeouts, 0, "{sb:?}");
}

#[test]
fn sleep_handshake_in_both_orders() {
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    let mut buf = Vec::new();
    let soon = Some(Duration::from_millis(200));
    // The producer publishes between the consumer's empty check and its announcement: nobody
    // is asleep, so no signal; the consumer's re-check must then see the message.
    assert!(!b.try_recv(&mut buf).unwrap());
    a.try_send(b"m1").unwrap();
    assert_eq!(a.stats().signals, 0);
    assert!(
        !b.rx.consumer_may_sleep(0),
        "re-check missed a published message"
    );
    // The consumer announces first: the producer's publish must ring its bell, once.
    assert!(b.try_recv(&mut buf).unwrap());
    assert!(b.rx.consumer_may_sleep(1));
    a.try_send(b"m2").unwrap();
    a.try_send(b"m3").unwrap();
    assert_eq!(a.stats().signals, 1, "one signal per announced sleep");
    assert_eq!(b.bell.wait(Wake::Data, soon), Ok(Woken::Signal));
    assert_eq!(
        b.bell.wait(Wake::Space, Some(Duration::from_millis(1))),
        Ok(Woken::Timeout)
    );
    b.rx.consumer_awake();
    // The same for a producer waiting for space: the consumer's release must wake it.
    while a.try_send(b"fill").is_ok() {}
    let head = *lock(&a.head);
    assert!(a.tx.producer_may_sleep(head));
    assert!(b.try_recv(&mut buf).unwrap());
    assert_eq!(b.stats().signals, 1);
    assert_eq!(a.bell.wait(Wake::Space, soon), Ok(Woken::Signal));
    assert_eq!(
        a.bell.wait(Wake::Data, Some(Duration::from_millis(1))),
        Ok(Woken::Timeout)
    );
    // And a producer whose re-check finds space does not sleep.
    a.tx.producer_awake();
    assert!(!a.tx.producer_may_sleep(head));
    a.tx.producer_awake();
}

#[test]
fn a_sender_and_a_receiver_asleep_on_one_endpoint_each_get_their_wakeup() {
    let (a, b, _ca, _cb) = pair(cfg(64, 2));
    while a.try_send(b"fill").is_ok() {}
    let a = Arc::new(a);
    let t0 = Instant::now();
    let sender = {
        let a = a.clone();
        std::thread::spawn(move || (a.send_bytes(b"late", Some(LONG)), t0.elapsed()))
    };
    let receiver = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            (
                a.recv_bytes(&mut buf, Some(LONG)).map(|()| buf),
                t0.elapsed(),
            )
        })
    };
    // Both asleep (bounded: the threads' own timeouts end this too).
    while a.stats().sleeps < 2 && t0.elapsed() < LONG {
        std::thread::sleep(Duration::from_millis(1));
    }
    b.send_bytes(b"for the receiver", Some(LONG)).unwrap();
    let (got, when) = receiver.join().unwrap();
    assert_eq!(got.unwrap(), b"for the receiver");
    let mut buf = Vec::new();
    b.recv_bytes(&mut buf, Some(LONG)).unwrap();
    let (sent, when_sent) = sender.join().unwrap();
    sent.unwrap();
    // Each woke on its own bell, not by its 10 s timeout.
    assert!(
        when < LONG / 2 && when_sent < LONG / 2,
        "{when:?} {when_sent:?}"
    );
    assert_eq!(a.stats().wait_timeouts, 0, "{:?}", a.stats());
}

use proptest::strategy::Strategy;

proptest::proptest! {
    /// Any header a peer may write: attach either refuses it with a typed error or accepts a
    /// geometry within bounds that fits the region; never a panic.
    #[test]
    fn any_header_is_checked(
        magic_ok: bool,
        version in proptest::prop_oneof![proptest::prelude::Just(VERSION), proptest::prelude::any::<u32>()],
        size in proptest::prop_oneof![(0u32..=600).prop_map(|x| x * 8), proptest::prelude::any::<u32>()],
        count in proptest::prop_oneof![(0u32..=17).prop_map(|k| 1 << k), proptest::prelude::any::<u32>()],
        extra in 0usize..70_000,
    ) {
        let len = layout::CONTROL_LEN + extra;
        let region = new_region(len, true).unwrap();
        let map = Mapping::map(region.as_fd(), len).unwrap();
        let h = &map.control().header;
        h.version.store(version, Ordering::Relaxed);
        h.slot_size.store(size, Ordering::Relaxed);
        h.slot_count.store(count, Ordering::Relaxed);
        h.magic.store(if magic_ok { MAGIC } else { MAGIC ^ 1 }, Ordering::Relaxed);
        match layout::validate(map.control(), len) {
            Ok(g) => {
                proptest::prop_assert!(magic_ok && version == VERSION);
                proptest::prop_assert_eq!(g, Geometry::new(size, count).unwrap());
                proptest::prop_assert!(g.region_len() <= len);
            }
            Err(RingError::BadMagic(_)) => proptest::prop_assert!(!magic_ok),
            Err(RingError::BadVersion(v)) => proptest::prop_assert_eq!(v, version),
            Err(RingError::BadGeometry { .. }) => proptest::prop_assert!(Geometry::new(size, count).is_err()),
            Err(RingError::RegionTooSmall { need, .. }) => proptest::prop_assert!(need > len),
            Err(e) => proptest::prop_assert!(false, "unexpected {e:?}"),
        }
    }
}

/// Polls one descriptor for readability, at most `ms`; whether it turned readable.
fn readable_within(fd: i32, ms: i32) -> bool {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    // Safety: one valid pollfd for the call.
    unsafe { libc::poll(p.as_mut_ptr(), 1, ms) > 0 }
}

#[test]
fn poll_style_sleep_handshake() {
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    let mut buf = Vec::new();
    let fd = b.readable_fd().expect("an eventfd on Linux");
    // A message already waiting: no sleep, no announcement left behind.
    a.try_send(b"m1").unwrap();
    assert!(!b.prepare_sleep().unwrap());
    assert!(!a.tx.take_consumer_sleeping(), "announcement withdrawn");
    assert!(b.try_recv(&mut buf).unwrap());
    // Empty: announce, then a publish rings the descriptor the caller polls.
    assert!(b.prepare_sleep().unwrap());
    assert!(!readable_within(fd, 0), "readable before any signal");
    a.try_send(b"m2").unwrap();
    assert_eq!(a.stats().signals, 1);
    assert!(
        readable_within(fd, 2000),
        "the publish did not ring the bell"
    );
    assert!(b.end_sleep(), "the signal is consumed and counted");
    assert!(!readable_within(fd, 0), "end_sleep left the bell readable");
    assert!(b.try_recv(&mut buf).unwrap());
    assert_eq!(buf, b"m2");
    // A wait that ends for another reason (another descriptor, a timeout): no wake-up counted,
    // and the withdrawn announcement costs the producer no signal.
    assert!(b.prepare_sleep().unwrap());
    assert!(!b.end_sleep());
    a.try_send(b"m3").unwrap();
    assert_eq!(a.stats().signals, 1);
    let s = b.stats();
    assert_eq!((s.sleeps, s.wakeups), (2, 1), "{s:?}");
    // A closed peer: prepare_sleep does not sleep, the next receive drains and says so.
    drop(a);
    assert!(!b.prepare_sleep().unwrap());
    assert!(b.try_recv(&mut buf).unwrap());
    assert_eq!(buf, b"m3");
    assert_eq!(b.try_recv(&mut buf), Err(RingError::PeerGone));
}

#[test]
fn a_poll_style_consumer_never_misses_a_wakeup() {
    // A producer thread in bursts with pauses; the consumer drains with try_recv and sleeps
    // only through prepare_sleep / poll / end_sleep, as the driver's main loop does. A lost
    // wake-up shows as a poll that runs to its (long) timeout while a message waits.
    let (a, b, _ca, _cb) = pair(cfg(64, 16));
    const N: u64 = 100_000;
    let producer = std::thread::spawn(move || {
        for i in 0..N {
            a.send_bytes(&i.to_le_bytes(), Some(LONG)).unwrap();
            if i % 97 == 0 {
                std::thread::sleep(Duration::from_micros(i % 300));
            }
        }
        a
    });
    let fd = b.readable_fd().unwrap();
    let (mut next, mut buf, mut slow) = (0u64, Vec::new(), 0u32);
    let t0 = Instant::now();
    while next < N {
        while b.try_recv(&mut buf).unwrap() {
            assert_eq!(buf, next.to_le_bytes(), "out of order");
            next += 1;
        }
        if next == N || !b.prepare_sleep().unwrap() {
            continue;
        }
        let t = Instant::now();
        let woke = readable_within(fd, 3000);
        b.end_sleep();
        if !woke && b.rx.pending(*lock(&b.tail)).unwrap() > 0 {
            slow += 1;
        }
        assert!(
            t.elapsed() < Duration::from_secs(3) || next == N,
            "lost wake-up at {next}"
        );
        assert!(t0.elapsed() < Duration::from_secs(60), "stalled at {next}");
    }
    let a = producer.join().unwrap();
    assert_eq!(slow, 0);
    let s = b.stats();
    assert!(s.sleeps > 10 && s.wakeups > 10, "the sleep path ran: {s:?}");
    assert_eq!(a.stats().sent, N);
}

#[test]
fn two_producer_threads_share_one_sending_endpoint() {
    // The driver's IRQ thread (events) and main thread (replies) both send on its endpoint:
    // every message of each arrives once, each thread's in its order, through a ring small
    // enough that both meet it full.
    let (a, b, _ca, _cb) = pair(cfg(64, 8));
    let a = Arc::new(a);
    const N: u64 = 50_000;
    let senders: Vec<_> = (0..2u64)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut worst = Duration::ZERO;
                for i in 0..N {
                    let m = [t.to_le_bytes(), i.to_le_bytes()].concat();
                    let t0 = Instant::now();
                    a.send_bytes(&m, Some(LONG)).unwrap();
                    worst = worst.max(t0.elapsed());
                }
                worst
            })
        })
        .collect();
    let (mut next, mut buf) = ([0u64; 2], Vec::new());
    for _ in 0..2 * N {
        b.recv_bytes(&mut buf, Some(LONG)).unwrap();
        let t = u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize;
        let i = u64::from_le_bytes(buf[8..16].try_into().unwrap());
        assert_eq!(i, next[t], "thread {t}'s messages out of order or lost");
        next[t] += 1;
    }
    for s in senders {
        // A waiter whose wake-up the other thread consumed sleeps to its timeout (LONG).
        let worst = s.join().unwrap();
        assert!(
            worst < Duration::from_secs(2),
            "a send waited {worst:?} on a freed ring"
        );
    }
    assert_eq!(next, [N, N]);
    let s = a.stats();
    assert_eq!((s.sent, s.full_drops), (2 * N, 0), "{s:?}");
    assert!(s.full_events > 0, "the ring was never full: {s:?}");
}

#[test]
fn the_largest_slot_is_valid_and_carries_the_largest_message() {
    let g = Geometry::new(MAX_SLOT, 4).expect("MAX_SLOT is a valid slot size");
    assert!(g.max_payload() >= crate::wire::MAX_MESSAGE, "{g:?}");
    let (a, b, _ca, _cb) = pair(RingConfig {
        geometry: g,
        busy_poll: Duration::ZERO,
    });
    let big = vec![0xA5u8; crate::wire::MAX_MESSAGE];
    a.try_send(&big).unwrap();
    let mut buf = Vec::new();
    b.recv_bytes(&mut buf, Some(LONG)).unwrap();
    assert_eq!(buf, big);
}

#[test]
fn mapped_offers_round_trip_and_refuse_anything_else() {
    let len = Geometry::new(256, 64).unwrap().region_len();
    assert_eq!(parse_mapped_offer(&mapped_offer(len)), Some(len));
    let mut long = mapped_offer(len);
    long.push(0);
    for bad in [
        mapped_offer(0),
        mapped_offer(layout::MAX_REGION + 1),
        mapped_offer(usize::MAX),
        long,
        mapped_offer(len)[..12].to_vec(),
        b"PTPRINGN\x00\x10\x00\x00\x00\x00\x00\x00".to_vec(),
        b"hello".to_vec(),
    ] {
        assert_eq!(parse_mapped_offer(&bad), None, "{bad:?}");
    }
}

#[test]
fn wait_readable_takes_nothing_and_times_out_on_an_empty_ring() {
    let (a, b, _ca, _cb) = pair(cfg(64, 4));
    let t = Instant::now();
    assert_eq!(b.wait_readable(Some(Duration::from_millis(30))), Ok(false));
    assert!(t.elapsed() >= Duration::from_millis(30));
    a.try_send(b"x").unwrap();
    assert_eq!(b.wait_readable(Some(LONG)), Ok(true));
    assert_eq!(b.wait_readable(Some(LONG)), Ok(true), "still there");
    let mut buf = Vec::new();
    assert!(b.try_recv(&mut buf).unwrap());
    assert_eq!(buf, b"x");
    drop(a);
    assert_eq!(b.wait_readable(Some(LONG)), Ok(true), "the close is news");
    assert_eq!(b.try_recv(&mut buf), Err(RingError::PeerGone));
    b.close();
    assert_eq!(b.wait_readable(Some(LONG)), Err(RingError::PeerGone));
}

#[test]
fn a_watcher_thread_wakes_its_drainer_for_every_burst() {
    // The Redox driver's arrangement: a watcher thread sleeps on the ring (wait_readable) and
    // hands over to the drainer, which takes everything with try_recv and only then lets the
    // watcher sleep again. A lost wake-up shows as a watcher wait that runs to its timeout.
    let (a, b, _ca, _cb) = pair(cfg(64, 16));
    let b = Arc::new(b);
    const N: u64 = 50_000;
    let producer = std::thread::spawn(move || {
        for i in 0..N {
            a.send_bytes(&i.to_le_bytes(), Some(LONG)).unwrap();
            if i % 89 == 0 {
                std::thread::sleep(Duration::from_micros(i % 250));
            }
        }
        a
    });
    let (raised, settled) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let watcher = {
        let b = b.clone();
        std::thread::spawn(move || {
            let mut slow = 0u32;
            loop {
                let t = Instant::now();
                match b.wait_readable(Some(Duration::from_secs(3))) {
                    Ok(true) => {}
                    Ok(false) => slow += 1,
                    Err(_) => return slow,
                }
                if raised.0.send(()).is_err() || settled.1.recv().is_err() {
                    return slow;
                }
                assert!(t.elapsed() < Duration::from_secs(3) || slow > 0);
            }
        })
    };
    let (mut next, mut buf) = (0u64, Vec::new());
    let t0 = Instant::now();
    while next < N {
        raised
            .1
            .recv_timeout(Duration::from_secs(10))
            .expect("watcher woke");
        while b.try_recv(&mut buf).unwrap() {
            assert_eq!(buf, next.to_le_bytes(), "out of order");
            next += 1;
        }
        settled.0.send(()).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(60), "stalled at {next}");
    }
    let a = producer.join().unwrap();
    b.close();
    drop(settled.0);
    assert_eq!(watcher.join().unwrap(), 0, "a burst waited for the timeout");
    assert!(b.stats().sleeps > 10, "the watcher slept: {:?}", b.stats());
    assert_eq!(a.stats().sent, N);
}

/// The busy-poll window: none at zero, only within the window after the last work, never past
/// it, whatever time the poll starts.
#[test]
fn busy_poll_window_is_bounded_and_adaptive() {
    assert_eq!(busy_poll_deadline(100, 0, 100), None, "zero: pure blocking");
    assert_eq!(busy_poll_deadline(100, 50, 120), Some(150));
    assert_eq!(
        busy_poll_deadline(100, 50, 150),
        None,
        "the window has passed"
    );
    assert_eq!(
        busy_poll_deadline(100, 50, 10_000),
        None,
        "idle: no spin at all"
    );
    assert_eq!(busy_poll_deadline(u64::MAX - 1, 50, 0), Some(u64::MAX));
    for now in [0, 100, 120, 149] {
        let end = busy_poll_deadline(100, 50, now).unwrap();
        assert!(end <= 150 && end > now);
    }
}

/// A receiver that just worked polls to the end of its window, counts the miss and sleeps (tried
/// until one attempt is not preempted past its window, which a busy machine may do); one idle
/// for longer than its window sleeps at once (no miss counted, no CPU spent); with the window
/// at zero it never polls. Every message is delivered either way.
#[test]
fn an_endpoint_polls_only_after_work_and_then_sleeps() {
    let (a, b, _ca, _cb) = pair(cfg(64, 8));
    b.set_busy_poll(Duration::from_micros(300));
    let mut buf = Vec::new();
    let misses = || b.stats().busy_poll_misses;
    let polled = (0..20).any(|_| {
        a.send_bytes(b"work", Some(LONG)).unwrap();
        b.recv_bytes(&mut buf, Some(LONG)).unwrap();
        let before = misses();
        let r = b.recv_bytes(&mut buf, Some(Duration::from_millis(2)));
        assert_eq!(r, Err(RingError::Timeout));
        assert!(
            misses() - before <= 1,
            "polled twice after one piece of work"
        );
        misses() == before + 1
    });
    assert!(polled, "20 times work then an empty ring, and not one poll");
    assert_eq!(b.stats().busy_poll_hits, 0);
    // Idle past the window (the last work was > 2 ms ago): no poll.
    let before = misses();
    let r = b.recv_bytes(&mut buf, Some(Duration::from_millis(5)));
    assert_eq!(r, Err(RingError::Timeout));
    assert_eq!(misses(), before, "an idle endpoint polled");
    b.set_busy_poll(Duration::ZERO);
    a.send_bytes(b"two", Some(LONG)).unwrap();
    b.recv_bytes(&mut buf, Some(LONG)).unwrap();
    let _ = b.recv_bytes(&mut buf, Some(Duration::from_millis(5)));
    assert_eq!(misses(), before, "window zero polled");
    // The clamp.
    b.set_busy_poll(Duration::from_secs(5));
    assert_eq!(b.busy_poll(), MAX_BUSY_POLL);
}
