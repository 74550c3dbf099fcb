//! Behaviour every transport must have, run against each implementation.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::msg::*;

type Pair = (Box<dyn Transport>, Box<dyn Transport>);
type Factory = Box<dyn Fn() -> Pair>;

/// (name, factory) for every transport available on this OS.
fn transports() -> Vec<(&'static str, Factory)> {
    let mut v: Vec<(&'static str, Factory)> = vec![(
        "inproc",
        Box::new(|| {
            let (a, b) = inproc_pair();
            (Box::new(a), Box::new(b))
        }),
    )];
    #[cfg(target_os = "linux")]
    {
        v.push((
            "socketpair",
            Box::new(|| {
                let (a, b) = SeqpacketConn::pair().unwrap();
                (Box::new(a), Box::new(b))
            }),
        ));
        v.push((
            "listener",
            Box::new(|| {
                let dir = crate::testutil::TempDir::new("t");
                let l = SeqpacketListener::bind(dir.path().join("s")).unwrap();
                let c = SeqpacketConn::connect(l.path()).unwrap();
                let (s, _) = l.accept(Some(Duration::from_secs(5))).unwrap();
                (Box::new(c), Box::new(s))
            }),
        ));
    }
    v
}

const SHORT: Duration = Duration::from_millis(50);
const LONG: Duration = Duration::from_secs(5);

fn req(seq: u32) -> PtpdToDriver {
    PtpdToDriver {
        seq,
        request: DriverRequest::AdjTime {
            delta_ns: -(seq as i64),
        },
    }
}

/// See [`crate::testing::spawn_blocked`].
fn spawn_blocked<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    crate::testing::spawn_blocked(name, LONG, f)
}

/// Joins `h`, failing the test if the thread has not finished within `LONG` (it stays blocked:
/// the wake-up under test did not happen).
fn join_within<T>(h: thread::JoinHandle<T>, what: &str) -> T {
    let deadline = Instant::now() + LONG;
    while !h.is_finished() {
        assert!(
            Instant::now() < deadline,
            "{what}: the blocked thread was not woken"
        );
        thread::sleep(Duration::from_millis(1));
    }
    h.join().unwrap()
}

#[test]
fn typed_roundtrip() {
    for (name, make) in transports() {
        let (a, b) = make();
        let ptpd: PtpdDriverSide<_> = Channel::new(a);
        let drv: DriverSide<_> = Channel::new(b);
        let frame = vec![0x5A; crate::msg::MAX_FRAME];
        let m = PtpdToDriver {
            seq: 9,
            request: DriverRequest::SendPtp {
                cookie: 3,
                want_ts: true,
                frame,
            },
        };
        ptpd.send(&m, Some(LONG)).unwrap();
        assert_eq!(drv.recv(Some(LONG)).unwrap(), m, "{name}");
        let ev = DriverToPtpd::Event(DriverEvent::TxTimestamp { cookie: 3, ns: 42 });
        drv.send(&ev, None).unwrap();
        assert_eq!(ptpd.recv(None).unwrap(), ev, "{name}");

        let (a, b) = make();
        let (client, server): (ClientSide<_>, ServerSide<_>) = (Channel::new(a), Channel::new(b));
        client
            .send(
                &ClockRequest::Adj {
                    clock: 0,
                    delta_ns: -5,
                },
                None,
            )
            .unwrap();
        assert_eq!(
            server.recv(Some(LONG)).unwrap(),
            ClockRequest::Adj {
                clock: 0,
                delta_ns: -5
            }
        );
        server
            .send(&ClockReply::Error(ClockError::PermissionDenied), None)
            .unwrap();
        assert_eq!(
            client.recv(Some(LONG)).unwrap(),
            ClockReply::Error(ClockError::PermissionDenied)
        );
    }
}

#[test]
fn inproc_channels_helper() {
    let (ptpd, drv) = inproc_channels::<PtpdToDriver, DriverToPtpd>();
    ptpd.send(&req(1), None).unwrap();
    assert_eq!(drv.recv(Some(LONG)).unwrap(), req(1));
}

#[test]
fn peer_drop_is_disconnected_both_directions() {
    for (name, make) in transports() {
        let (a, b) = make();
        a.send(b"queued", None).unwrap();
        drop(a);
        let t = Instant::now();
        let mut buf = Vec::new();
        // Sockets and InProc both deliver what was queued before the close, then EOF.
        b.recv(&mut buf, Some(LONG)).unwrap();
        assert_eq!(buf, b"queued", "{name}");
        assert_eq!(
            b.recv(&mut buf, Some(LONG)),
            Err(TransportError::Disconnected),
            "{name}"
        );
        assert_eq!(
            b.send(b"x", Some(LONG)),
            Err(TransportError::Disconnected),
            "{name}"
        );
        assert!(t.elapsed() < Duration::from_secs(1), "{name}: not prompt");
    }
}

#[test]
fn peer_drop_wakes_blocked_recv() {
    for (name, make) in transports() {
        let (a, b) = make();
        let h = spawn_blocked("t-peerdrop", move || b.recv(&mut Vec::new(), None));
        drop(a);
        assert_eq!(
            join_within(h, name),
            Err(TransportError::Disconnected),
            "{name}"
        );
    }
}

#[test]
fn recv_timeout() {
    for (name, make) in transports() {
        let (_a, b) = make();
        let mut buf = vec![1, 2, 3];
        let t = Instant::now();
        assert_eq!(
            b.recv(&mut buf, Some(SHORT)),
            Err(TransportError::Timeout),
            "{name}"
        );
        let e = t.elapsed();
        assert!(e >= SHORT && e < Duration::from_secs(2), "{name}: {e:?}");
        assert!(buf.is_empty(), "{name}: buffer cleared");
        assert_eq!(
            b.recv(&mut buf, Some(Duration::ZERO)),
            Err(TransportError::Timeout)
        );
    }
}

/// Fills the peer's queue with non-blocking sends (bounded) and returns how many fit.
fn fill(t: &dyn Transport) -> usize {
    let msg = vec![7u8; MAX_MESSAGE];
    for n in 0..100_000 {
        match t.send(&msg, Some(Duration::ZERO)) {
            Ok(()) => {}
            Err(TransportError::Timeout) => return n,
            Err(e) => panic!("fill: {e}"),
        }
    }
    panic!("queue never filled");
}

#[test]
fn send_timeout_when_full() {
    for (name, make) in transports() {
        let (a, _b) = make();
        assert!(fill(&*a) > 0, "{name}");
        let t = Instant::now();
        assert_eq!(
            a.send(b"more", Some(SHORT)),
            Err(TransportError::Timeout),
            "{name}"
        );
        assert!(t.elapsed() >= SHORT, "{name}");
    }
}

#[test]
fn shutdown_unblocks_recv_and_both_sides_see_disconnected() {
    for (name, make) in transports() {
        let (a, b) = make();
        let b = Arc::new(b);
        let b2 = b.clone();
        let h = spawn_blocked("t-shutrecv", move || b2.recv(&mut Vec::new(), None));
        let t = Instant::now();
        b.shutdown();
        assert_eq!(
            join_within(h, name),
            Err(TransportError::Disconnected),
            "{name}"
        );
        assert!(t.elapsed() < Duration::from_secs(1), "{name}");
        assert_eq!(
            b.send(b"x", Some(LONG)),
            Err(TransportError::Disconnected),
            "{name}"
        );
        assert_eq!(
            a.recv(&mut Vec::new(), Some(LONG)),
            Err(TransportError::Disconnected)
        );
        assert_eq!(
            a.send(b"x", Some(LONG)),
            Err(TransportError::Disconnected),
            "{name}"
        );
    }
}

#[test]
fn shutdown_unblocks_send() {
    for (name, make) in transports() {
        let (a, _b) = make();
        fill(&*a);
        let a = Arc::new(a);
        let a2 = a.clone();
        let h = spawn_blocked("t-shutsend", move || a2.send(b"blocked", None));
        a.shutdown();
        assert_eq!(
            join_within(h, name),
            Err(TransportError::Disconnected),
            "{name}"
        );
    }
}

#[test]
fn size_limits() {
    for (name, make) in transports() {
        let (a, b) = make();
        let big = vec![0u8; MAX_MESSAGE + 1];
        assert_eq!(
            a.send(&big, None),
            Err(TransportError::TooLarge(MAX_MESSAGE + 1)),
            "{name}"
        );
        assert!(
            matches!(a.send(&[], None), Err(TransportError::Io(_))),
            "{name}"
        );
        a.send(&big[..MAX_MESSAGE], None).unwrap();
        let mut buf = Vec::new();
        b.recv(&mut buf, Some(LONG)).unwrap();
        assert_eq!(buf.len(), MAX_MESSAGE, "{name}");
    }
}

/// A malformed message is reported as Decode and does not kill the channel.
#[test]
fn malformed_message_then_good_one() {
    for (name, make) in transports() {
        let (a, b) = make();
        let drv: DriverSide<_> = Channel::new(b);
        a.send(&[0xde, 0xad, 0xbe, 0xef], None).unwrap();
        let mut wrong_version = req(1).to_bytes();
        wrong_version[0] = 9;
        a.send(&wrong_version, None).unwrap();
        a.send(&req(2).to_bytes(), None).unwrap();
        assert_eq!(
            drv.recv(Some(LONG)),
            Err(ChannelError::Decode(DecodeError::Version {
                got: 0xde,
                want: 1
            })),
            "{name}"
        );
        assert_eq!(
            drv.recv(Some(LONG)),
            Err(ChannelError::Decode(DecodeError::Version {
                got: 9,
                want: 1
            })),
            "{name}"
        );
        assert_eq!(drv.recv(Some(LONG)), Ok(req(2)), "{name}");
    }
}

#[test]
fn oversized_field_is_refused_before_sending() {
    for (name, make) in transports() {
        let (a, b) = make();
        let ptpd: PtpdDriverSide<_> = Channel::new(a);
        let frame = vec![0; crate::msg::MAX_FRAME + 1];
        let m = PtpdToDriver {
            seq: 1,
            request: DriverRequest::SendPtp {
                cookie: 1,
                want_ts: true,
                frame,
            },
        };
        assert_eq!(
            ptpd.send(&m, None),
            Err(ChannelError::Encode(EncodeError::TooLong("frame"))),
            "{name}"
        );
        assert_eq!(
            b.recv(&mut Vec::new(), Some(SHORT)),
            Err(TransportError::Timeout)
        );
    }
}

/// Several threads send on one `&Channel`; every message arrives, each sender's in order.
#[test]
fn concurrent_senders() {
    const THREADS: u32 = 4;
    const EACH: u32 = 300;
    for (name, make) in transports() {
        let (a, b) = make();
        let tx: PtpdDriverSide<_> = Channel::new(a);
        let rx: DriverSide<_> = Channel::new(b);
        thread::scope(|s| {
            for t in 0..THREADS {
                let tx = &tx;
                s.spawn(move || {
                    for i in 0..EACH {
                        tx.send(&req(t << 16 | i), Some(LONG)).unwrap();
                    }
                });
            }
            let mut next = [0u32; THREADS as usize];
            for _ in 0..THREADS * EACH {
                let m = rx.recv(Some(LONG)).unwrap();
                let (t, i) = ((m.seq >> 16) as usize, m.seq & 0xFFFF);
                assert_eq!(i, next[t], "{name}: thread {t} out of order");
                next[t] += 1;
            }
        });
    }
}

#[test]
fn channel_is_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<PtpdDriverSide<InProc>>();
    check::<ServerSide<Box<dyn Transport>>>();
    #[cfg(target_os = "linux")]
    check::<ClientSide<SeqpacketConn>>();
}
