//! The pin requests over the clock scheme: privileged, forwarded, remembered and re-applied to
//! a restarted driver; external timestamps kept for `Events` with their numbers.

use ptp_ipc::{ClockError, ExtTsEvent, MAX_EVENTS, PinFunction};

use super::*;

fn set_pin(pin: u8, func: PinFunction, chan: u8) -> ClockRequest {
    ClockRequest::SetPin {
        clock: 0,
        pin,
        func,
        chan,
    }
}

#[test]
fn pin_changes_are_privileged_and_reach_the_driver() {
    let r = rig(1);
    assert!(wait_for(Duration::from_secs(3), || r.scheme.links()[0]
        .status()
        .connected));
    let reqs = [
        set_pin(1, PinFunction::ExtTs, 0),
        ClockRequest::ExtTs {
            clock: 0,
            chan: 0,
            on: true,
        },
        ClockRequest::PerOut {
            clock: 0,
            chan: 1,
            start_ns: 5_000_000_000,
            period_ns: 1_000_000_000,
        },
        ClockRequest::Pps { clock: 0, on: true },
    ];
    for req in &reqs {
        assert_eq!(
            r.scheme.handle(req.clone(), 1000),
            ClockReply::Error(ClockError::PermissionDenied),
            "{req:?}"
        );
    }
    assert!(
        r.driver.st().pin_reqs.is_empty(),
        "refused requests reach nothing"
    );
    let answers: Vec<ClockReply> = reqs.iter().map(|q| r.scheme.handle(q.clone(), 0)).collect();
    assert_eq!(
        answers,
        [
            ClockReply::Done,
            ClockReply::Done,
            ClockReply::PerOut {
                first_ns: 5_000_000_000
            },
            ClockReply::Done
        ]
    );
    assert_eq!(r.driver.st().pin_reqs.len(), 4);
    // Reading events is not a change: any uid may.
    assert!(matches!(
        r.scheme
            .handle(ClockRequest::Events { clock: 0, after: 0 }, 1000),
        ClockReply::Events { .. }
    ));
}

#[test]
fn external_timestamps_are_numbered_and_held_for_any_reader() {
    let r = rig(1);
    assert!(wait_for(Duration::from_secs(3), || r.scheme.links()[0]
        .status()
        .connected));
    let n = MAX_EVENTS as u64 + 6;
    for i in 0..n {
        r.driver.event(DriverEvent::ExtTs(ExtTsEvent {
            chan: (i % 2) as u8,
            ns: 1_000 + i,
        }));
    }
    let events = |after| {
        r.scheme
            .handle(ClockRequest::Events { clock: 0, after }, 1000)
    };
    assert!(wait_for(Duration::from_secs(3), || matches!(
        events(n - 1),
        ClockReply::Events { ref events, .. } if events.len() == 1
    )));
    // From the start: numbered from 1, at most MAX_EVENTS per answer.
    let ClockReply::Events {
        first_seq,
        lost,
        events: e,
    } = events(0)
    else {
        panic!("not events")
    };
    assert_eq!((first_seq, lost, e.len()), (1, 0, MAX_EVENTS as usize));
    assert_eq!(e[3], ExtTsEvent { chan: 1, ns: 1_003 });
    // After the last one: nothing, and the number the next will get.
    assert_eq!(
        events(n),
        ClockReply::Events {
            first_seq: n + 1,
            lost: 0,
            events: vec![]
        }
    );
    assert_eq!(
        events(u64::MAX),
        ClockReply::Events {
            first_seq: n + 1,
            lost: 0,
            events: vec![]
        }
    );
}

#[test]
fn a_restarted_driver_gets_the_pins_back() {
    let epoch = Instant::now();
    let r = rig_with(
        settings(1, fast_port(NetworkTransport::L2)),
        MAC,
        SimPhc::new(1e12, 0.0),
        epoch,
    );
    assert!(wait_for(Duration::from_secs(3), || r.scheme.links()[0]
        .status()
        .connected));
    let made = [
        set_pin(1, PinFunction::ExtTs, 0),
        set_pin(2, PinFunction::PerOut, 0),
        // Pin 1 again: only its last assignment is replayed.
        set_pin(1, PinFunction::ExtTs, 1),
        ClockRequest::ExtTs {
            clock: 0,
            chan: 1,
            on: true,
        },
        ClockRequest::PerOut {
            clock: 0,
            chan: 0,
            start_ns: 7_000_000_000,
            period_ns: 500_000_000,
        },
    ];
    for q in &made {
        let reply = r.scheme.handle(q.clone(), 0);
        assert!(!matches!(reply, ClockReply::Error(_)), "{q:?}: {reply:?}");
    }
    let mut r = r;
    r.restart_driver(2, SimPhc::new(2e12, 0.0), epoch);
    assert!(wait_for(Duration::from_secs(5), || r
        .driver
        .st()
        .pin_reqs
        .len()
        >= 4));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        r.driver.st().pin_reqs,
        [
            DriverRequest::SetPin {
                pin: 2,
                func: PinFunction::PerOut,
                chan: 0
            },
            DriverRequest::SetPin {
                pin: 1,
                func: PinFunction::ExtTs,
                chan: 1
            },
            DriverRequest::ExtTs { chan: 1, on: true },
            DriverRequest::PerOut {
                chan: 0,
                start_ns: 7_000_000_000,
                period_ns: 500_000_000
            },
        ]
    );
}
