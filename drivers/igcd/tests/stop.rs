//! A driver on its way out stops the NIC's DMA (`Device::stop_dma`, run on SIGTERM and after
//! a fatal error) and leaves the PHC running for the next driver's warm attach. On the emulated
//! i225 with a loopback cable: before the stop a frame goes out and comes back; after it
//! nothing moves through the rings (TDH and RDH stay, nothing is received), the queues read
//! disabled, and SYSTIM still advances. Without the stop the frame sent last comes back.

#![cfg(feature = "emulate")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use igcd::daemon::EventSink;
use intel_regs::igc as r;
use ptp_ipc::DriverEvent;

fn igc_mac() -> intel_common::mac::MacRegs {
    use intel_common::family::Family;
    intel_common::igc::Igc.mac_regs()
}

struct NoEvents;

impl EventSink for NoEvents {
    fn send(&self, _ev: DriverEvent) {}
}

fn arp(tag: u8) -> Vec<u8> {
    let mut f = vec![tag; 60];
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    f
}

/// Waits up to `within` for a frame on `port`.
fn received<M: ptp_pci::Mmio, F: intel_common::family::Family>(
    port: &intel_common::daemon::NetPort<M, F>,
    within: Duration,
) -> Option<Vec<u8>> {
    let mut buf = [0u8; 1500];
    let t = Instant::now();
    while t.elapsed() < within {
        if let Some(n) = port.recv(&mut buf) {
            return Some(buf[..n].to_vec());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

fn run(stop_first: bool) -> Option<Vec<u8>> {
    let args = ["--emulate", "i225", "--wire", "loopback"];
    let dev = common::device(&args);
    let stop = Arc::new(AtomicBool::new(false));
    let threads = dev.start_threads(Arc::new(NoEvents), stop.clone());
    let port = dev.attach_netstack(|| {}).unwrap();
    port.send(&arp(0xA1)).unwrap();
    assert_eq!(
        received(&port, Duration::from_secs(5)),
        Some(arp(0xA1)),
        "the data path works before the stop"
    );
    let regs = &dev.regs;
    let heads = |r: &intel_common::Regs<_>| (r.read(r::tdh(0)), r.read(r::rdh(0)));
    let before = heads(regs);
    let t0 = dev.phc.gettime();
    let running = |r: &intel_common::Regs<_>| intel_common::mac::dma_running(r, &igc_mac());
    assert!(running(regs), "a driver's NIC moves data");
    if stop_first {
        dev.stop_dma();
        assert!(!running(regs), "what the next driver's claim checks");
        assert_eq!(regs.read(r::RCTL) & r::rctl::EN, 0, "receiver off");
        for q in [r::rxdctl(0), r::txdctl(0)] {
            assert_eq!(regs.read(q) & r::xdctl::QUEUE_ENABLE, 0, "queue {q:#x} off");
        }
    }
    // A frame handed to the ring after the stop must not leave, nor come back.
    let _ = port.send(&arp(0xB2));
    // The stopped NIC gets 500 ms to show it still moves data; the control (running NIC) up to
    // 5 s to deliver, so a busy machine cannot fail it.
    let window = Duration::from_millis(if stop_first { 500 } else { 5_000 });
    let back = received(&port, window);
    if stop_first {
        assert_eq!(heads(regs), before, "TDH/RDH moved after the stop");
        let t1 = dev.phc.gettime();
        assert!(
            t1.phc_ns > t0.phc_ns + 100_000_000,
            "the PHC must keep running: {t0:?} then {t1:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    back
}

#[test]
fn a_stopped_driver_leaves_no_dma_running_and_the_phc_counting() {
    assert_eq!(run(true), None, "a frame went through a stopped NIC");
}

#[test]
fn without_the_stop_the_same_frame_goes_through() {
    // The control: the check above would pass vacuously if the frame could not come back.
    assert_eq!(run(false), Some(arp(0xB2)));
}

/// Every other way out (an error after bring-up, which returns through `?`): dropping the
/// driver stops the DMA. The registers outlive the device here, as the NIC outlives a driver.
/// Broken form: no `Drop` for `Device`, and the queues read enabled.
#[test]
fn a_dropped_driver_leaves_no_dma_running() {
    let dev = common::device(&["--emulate", "i225", "--wire", "loopback"]);
    let regs = dev.regs.clone();
    let running = |r: &intel_common::Regs<_>| intel_common::mac::dma_running(r, &igc_mac());
    assert!(running(&regs), "a driver's NIC moves data");
    drop(dev);
    assert!(
        !running(&regs),
        "the dropped driver left the NIC moving data"
    );
}

/// The daemon itself: SIGTERM ends it with status 0 after it stopped the DMA (the Linux serve
/// loop; Redox's is judged in tests/redox_device.rs), instead of killing it with the queues
/// running. Broken form: no handler, and the process dies of the signal.
#[test]
fn sigterm_stops_the_daemon_cleanly_after_its_dma() {
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("igcd-stop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("igcd.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_igcd"))
        .args(["--emulate", "i225", "--wire", "loopback", "--channel"])
        .arg(&sock)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("igcd runs");
    let t = Instant::now();
    while !sock.exists() {
        if t.elapsed() > Duration::from_secs(20) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "igcd did not serve its channel: {:?}",
                child.wait_with_output()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("igcd still running 10 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{:?}\n{err}", out.status);
    assert!(err.contains("stop signal: DMA stopped"), "{err}");
}

/// Writes log records to stderr (the child below has no daemon logging set up).
struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        eprintln!("{}: {}", r.level(), r.args());
    }
    fn flush(&self) {}
}

/// The child of the test below (run by it, with `IGCD_PANIC_CHILD` set; a no-op otherwise): a
/// driver with the daemon's panic hook whose worker thread panics.
#[test]
fn panic_child() {
    if std::env::var_os("IGCD_PANIC_CHILD").is_none() {
        return;
    }
    let _ = log::set_logger(&Stderr).map(|()| log::set_max_level(log::LevelFilter::Info));
    let args = ["--emulate", "i225", "--wire", "loopback"];
    let dev = common::device(&args);
    dev.stop_dma_on_panic();
    let _ = std::thread::spawn(|| panic!("injected worker panic")).join();
    eprintln!("still running after the worker's panic");
}

/// A panic on any thread of the daemon ends it with status 101 after stopping the NIC's DMA
/// (`Device::stop_dma_on_panic`), instead of unwinding past the stop or serving on without the
/// thread. Broken form: no hook, and the child prints "still running" and exits 0.
#[test]
fn a_panic_on_any_thread_stops_the_dma_and_ends_the_process() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "panic_child", "--nocapture", "--test-threads=1"])
        .env("IGCD_PANIC_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(101), "{err}");
    assert!(err.contains("injected worker panic"), "{err}");
    assert!(err.contains("panic: DMA stopped"), "{err}");
    assert!(!err.contains("still running"), "{err}");
}
