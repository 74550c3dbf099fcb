//! The general frame path a network stack uses (smolnetd on Redox), on the emulated i225 with
//! a loopback cable: any frame goes out; non-PTP frames come back to the stack, PTP frames
//! still go to ptpd.

#![cfg(feature = "emulate")]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use igcd::daemon::EventSink;
use ptp_ipc::DriverEvent;

#[derive(Default)]
struct Events(Mutex<Vec<DriverEvent>>);

impl EventSink for Events {
    fn send(&self, ev: DriverEvent) {
        self.0.lock().unwrap().push(ev);
    }
}

fn frame(ethertype: u16, tag: u8) -> Vec<u8> {
    let mut f = vec![tag; 60];
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    if ethertype == 0x88F7 {
        f[14] = 0x0B; // Announce
        f[15] = 2;
    }
    f
}

#[test]
fn netstack_frames_loop_back_and_ptp_frames_still_go_to_ptpd() {
    let args = [
        "--emulate",
        "i225",
        "--wire",
        "loopback",
        "--link-wait-ms",
        "500",
    ];
    let dev = common::device(&args);
    let events = Arc::new(Events::default());
    let stop = Arc::new(AtomicBool::new(false));
    let threads = dev.start_threads(events.clone(), stop.clone());
    let woken = Arc::new(AtomicUsize::new(0));
    let w = woken.clone();
    let port = dev
        .attach_netstack(move || {
            w.fetch_add(1, Ordering::Relaxed);
        })
        .expect("first attach");
    assert!(
        dev.attach_netstack(|| {}).is_none(),
        "only one network stack"
    );

    let arp = frame(0x0806, 0xA5);
    port.send(&arp).unwrap();
    port.send(&frame(0x88F7, 0x5A)).unwrap();
    assert_eq!(
        port.send(&[0u8; 10]),
        Err(igcd::daemon::NetSendError::BadFrame)
    );

    let mut buf = [0u8; 1500];
    let t = Instant::now();
    let n = loop {
        if let Some(n) = port.recv(&mut buf) {
            break n;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the ARP frame never came back"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    // The model pads to 60 bytes; ours already is.
    assert_eq!(&buf[..n], &arp[..]);
    assert!(woken.load(Ordering::Relaxed) >= 1);
    // The PTP frame went to ptpd's sink, not to the network stack.
    let t = Instant::now();
    while !events
        .0
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, DriverEvent::PtpFrame { frame, .. } if frame[0] == 0x5A))
    {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "PTP frame not delivered"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(!port.rx_pending());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
}
