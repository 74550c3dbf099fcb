//! Issue 15, test 2 with our daemons: igbd --pci (the Linux userspace backend, uio_pci_generic,
//! polled or INTx) + ptpd inside Linux guests drive QEMU 10's own 82576 model (`-device igb`).
//!
//! 1. On one device, the phc_ctl verbs through Linux igb (the baseline) and then through
//!    igbd + ptpd + ptpctl, measured the same way (tests/vm_igb_common): set lands, adj moves
//!    by the amount, freq sets the rate against the guest's CLOCK_MONOTONIC. Linux igb's
//!    frequency writes step the clock (QEMU's TIMINCA rebase, see the README's findings);
//!    igbd's, kept in its timecounter, must not. ptpd's Sync messages get TX stamps.
//! 2. One guest with two 82576s cabled to each other, igbd + ptpd on each (master, slave) with
//!    `rx_filter = "per_role"`: the slave locks, and `ptpctl compare` reads both PHCs in one
//!    process (gettimex A, B, A) to judge the lock on the PHCs themselves, each sample within
//!    what its reads resolve plus a stated allowance. No model ground truth exists for QEMU's
//!    device: this is the truest judge available, both PHCs running on the one QEMU's virtual
//!    clock.

mod vm_igb_common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use redox_ptp::vm::GuestSetup;
use serde_json::Value;
use vm_igb_common::{
    FREQ_PPB, Guest, Step, Tool, classify_step, expected_rate_ppb, igb_modules, load_igb,
};

const SOCK: &str = "/tmp/ptp.sock";

/// The guest gets ptplab (igbd, ptpd, ptpctl) and 2 MiB pages for igbd's DMA memory.
fn setup() -> GuestSetup {
    GuestSetup {
        binaries: std::iter::once(PathBuf::from(env!("CARGO_BIN_EXE_ptplab")))
            .chain(igb_modules())
            .collect(),
        append: vec!["hugepages=8".into()],
    }
}

/// ptpd's [ptp] table: L2 E2E, 4 Sync and 4 Delay_Req a second; master (priority1 1) or slave
/// (250); `rx_filter`. Made for a TCG guest on a busy host, where four daemons share one
/// emulated CPU: TX stamps may take 200 ms to be polled, and Announces 4 s to be missed.
fn ptp_table(master: bool, rx_filter: &str) -> String {
    format!(
        "priority1 = {}\nlogSyncInterval = -2\nlogAnnounceInterval = -1\n\
         announceReceiptTimeout = 8\nlogMinDelayReqInterval = -2\ntx_timestamp_timeout = 200\n\
         network_transport = \"L2\"\ndelay_mechanism = \"E2E\"\nsummary_interval = 0\n\
         rx_filter = \"{rx_filter}\"\n",
        if master { 1 } else { 250 }
    )
}

/// One igbd + ptpd pair in a guest: igbd on `addr` with channel `/tmp/<name>-drv.sock`, ptpd with
/// clock socket `sock`, logs `/tmp/<name>-{igbd,ptpd}.log`.
struct Daemons<'a> {
    addr: &'a str,
    name: &'a str,
    sock: &'a str,
    master: bool,
    rx_filter: &'a str,
}

/// Starts igbd on `d.addr` (taking it from Linux igb with `--unbind` when bound) and ptpd on
/// its channel; waits until ptpctl answers.
fn start_daemons(g: &mut Guest, d: &Daemons) {
    let Daemons {
        addr, name, sock, ..
    } = *d;
    g.run_ok(&format!(
        "ptplab igbd --pci {addr} --unbind --name {name} --channel /tmp/{name}-drv.sock \
         > /tmp/{name}-igbd.log 2>&1 &"
    ));
    let toml = format!(
        "socket = \"{sock}\"\n[ptp]\n{}[[clock]]\nname = \"{name}\"\n\
         channel = \"/tmp/{name}-drv.sock\"\n",
        ptp_table(d.master, d.rx_filter)
    );
    let esc = toml.replace('\n', "\\n").replace('"', "\\\"");
    g.run_ok(&format!("printf \"{esc}\" > /tmp/{name}-ptpd.toml"));
    g.run_ok(&format!(
        "ptplab ptpd -f /tmp/{name}-ptpd.toml > /tmp/{name}-ptpd.log 2>&1 &"
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    while g.run(&format!("ptplab ptpctl --socket {sock} caps")).rc != 0 {
        if Instant::now() > deadline {
            let logs = g
                .run(&format!("cat /tmp/{name}-igbd.log /tmp/{name}-ptpd.log"))
                .text();
            panic!("[{}] ptpd never answered:\n{logs}", g.tag);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `ptpctl --json VERB` on `sock`, parsed.
fn json(g: &mut Guest, sock: &str, verb: &str) -> Value {
    let out = g.run_ok(&format!("ptplab ptpctl --socket {sock} --json {verb}"));
    serde_json::from_str(out.text().trim())
        .unwrap_or_else(|e| panic!("{verb}: {e}: {}", out.text()))
}

fn stat(g: &mut Guest, sock: &str, key: &str) -> u64 {
    json(g, sock, "stats")[key]
        .as_u64()
        .unwrap_or_else(|| panic!("stats has no {key}"))
}

/// The baseline and igbd on one device: both PHCs behave, and igbd's behaves as Linux igb's did.
#[test]
fn igbd_behaves_as_linux_igb_on_qemu_82576() {
    let _one = vm_igb_common::one_vm();
    let mut g = Guest::boot_with("igbd", None, &setup());
    g.run_ok(&load_igb(&igb_modules()));
    g.wait_netdev();
    let addr = g.igb_address();
    let linux = g.measure(&Tool::PhcCtl("/dev/ptp0".into()));
    eprintln!("[linux igb] {linux:#?}");
    let d = Daemons {
        addr: &addr,
        name: "igb0",
        sock: SOCK,
        master: true,
        rx_filter: "event",
    };
    start_daemons(&mut g, &d);
    let driver = g.run_ok(&format!(
        "basename $(readlink /sys/bus/pci/devices/{addr}/driver)"
    ));
    assert_eq!(driver.text().trim(), "uio_pci_generic");
    let ours = g.measure(&Tool::PtpCtl(SOCK.into()));
    eprintln!("[igbd] {ours:#?}");
    linux.assert_sane("Linux igb", expected_rate_ppb);
    // igbd's timecounter gives the request itself (no IncValue quantum).
    ours.assert_sane("igbd", |ppb| ppb as f64);
    for (what, l, o) in [
        ("0 -> +FREQ", linux.step_up, ours.step_up),
        ("+FREQ -> -FREQ", linux.step_down, ours.step_down),
    ] {
        eprintln!(
            "step at {what} ({FREQ_PPB} ppb): Linux igb {} ± {} ns, igbd {} ± {} ns",
            l.ns, l.tol_ns, o.ns, o.tol_ns
        );
        // Beyond what the rate change explains, under classify_step's threshold of none.
        let beyond = (o.ns.abs() - o.tol_ns).max(0);
        assert_eq!(
            classify_step(beyond),
            Step::None,
            "igbd's frequency write {what} stepped the clock by {} ± {} ns (Linux igb: {} ns)",
            o.ns,
            o.tol_ns,
            l.ns
        );
    }
    // A lone master sends Sync every 125 ms, each with a TX stamp.
    std::thread::sleep(Duration::from_secs(2));
    let (req, got) = (
        stat(&mut g, SOCK, "tx_requested"),
        stat(&mut g, SOCK, "tx_delivered"),
    );
    let lost = stat(&mut g, SOCK, "tx_lost");
    eprintln!("[igbd] TX stamps: requested {req}, delivered {got}, lost {lost}");
    assert!(got >= 5, "TX stamps delivered: {got} of {req}");
    eprintln!("{}", g.run("cat /tmp/igb0-igbd.log").text());
    g.finish();
}

/// Where the two ptpds of [`igbd_ptpd_lock_on_two_82576_in_one_guest`] serve their clocks.
const MASTER_SOCK: &str = "/tmp/master.sock";
const SLAVE_SOCK: &str = "/tmp/slave.sock";
/// How long the slave may take to report SLAVE (its servo locked).
const LOCK_WITHIN: Duration = Duration::from_secs(60);
/// How long the slave may take to be SLAVE again at the end. ptpd drops a slave to
/// UNCALIBRATED at the first measured offset beyond its lock threshold (SYNCHRONIZATION_FAULT)
/// and re-locks after four good ones; on a busy host QEMU's thread is sometimes preempted
/// between a frame's TX and RX stamps (tens to hundreds of µs), which does that while the
/// PHCs stay together (seen: SLAVE again within 3 s, the PHC comparisons within 4 µs).
const RELOCK_WITHIN: Duration = Duration::from_secs(15);
/// PHC comparisons after the lock, each the tightest of three `compare` sandwiches.
const SAMPLES: usize = 20;
/// What ptpd's SLAVE promises about the offsets its servo measures (ptpd's lock rule: the
/// last [`LOCK_COUNT`](ptpd::ptp::clock::LOCK_COUNT) measurements all within this).
const SERVO_LOCK_NS: i128 = ptpd::ptp::clock::LOCK_THRESHOLD_NS as i128;
/// The Sync interval of [`ptp_table`] (logSyncInterval −2), s.
const SYNC_INTERVAL_S: f64 = 0.25;

/// One `ptpctl compare` of the master's PHC against the slave's: (diff, uncertainty) of the
/// tightest of three sandwiches.
fn compare(g: &mut Guest) -> (i128, i128) {
    let v = json(g, MASTER_SOCK, &format!("compare {SLAVE_SOCK} -n 3"));
    let samples = v["samples"].as_array().expect("compare samples");
    samples
        .iter()
        .map(|s| {
            let f = |k: &str| i128::from(s[k].as_i64().unwrap_or_else(|| panic!("{k}: {s}")));
            (f("diff_ns"), f("uncertainty_ns"))
        })
        .min_by_key(|&(_, u)| u)
        .expect("three samples")
}

/// Waits until the slave's ptpd reports SLAVE; the time it took and the status then. Panics
/// with both ptpds' and igbds' logs and the slave NIC's time-sync registers when it does not
/// within `within`.
fn wait_for_lock(g: &mut Guest, slave_addr: &str, within: Duration) -> (Duration, Value) {
    let start = Instant::now();
    loop {
        let status = json(g, SLAVE_SOCK, "status");
        let state = status["port_state"].clone();
        if state == "SLAVE" {
            return (start.elapsed(), status);
        }
        std::thread::sleep(Duration::from_millis(500));
        if start.elapsed() > within {
            let rx_m = stat(g, MASTER_SOCK, "rx_timestamped");
            let rx_s = stat(g, SLAVE_SOCK, "rx_timestamped");
            let regs = regs_dump(g, slave_addr);
            let logs = g
                .run(
                    "grep -h 'rms ' /tmp/slave-ptpd.log | tail -n 30; tail -n 15 \
                     /tmp/master-ptpd.log /tmp/slave-ptpd.log /tmp/master-igbd.log \
                     /tmp/slave-igbd.log",
                )
                .text();
            panic!(
                "slave port {state} after {within:?} (RX stamps: master {rx_m}, slave \
                 {rx_s})\n{regs}\n{logs}"
            );
        }
    }
}

/// Issue 15 test 2's lock on QEMU's own 82576: one guest, two `-device igb` on one QEMU hub,
/// igbd + ptpd on each (master, slave; L2 E2E, 4 Sync/s, `rx_filter = "per_role"`). Asserts the
/// slave reports SLAVE within [`LOCK_WITHIN`] and again within [`RELOCK_WITHIN`] after the
/// samples, following the master (its grandmaster, one step removed); the master gets
/// Delay_Req stamps; and [`SAMPLES`] comparisons of the two PHCs after the lock (`ptpctl
/// compare`: gettimex master, slave, master in one process) are each within the bound its reads
/// resolve, plus what SLAVE promises about the servo's measured offsets ([`SERVO_LOCK_NS`]),
/// plus the slave's mean path delay — the most by which a measured offset can differ from the
/// true one when the two directions' delays differ (each is ≥ 0; they sum to twice the mean) —
/// plus the drift between two Syncs at the slave's final frequency correction.
/// Fails with `rx_filter = "event"` (QEMU stamps no Delay_Req: no lock in 60 s) and with the
/// frequency in TIMINCA (a write steps the PHC by 2^41 ns: seen in the comparisons).
#[test]
fn igbd_ptpd_lock_on_two_82576_in_one_guest() {
    let _one = vm_igb_common::one_vm();
    let mut g = Guest::boot_two_nics("loop", &setup());
    let addrs = g.igb_addresses();
    assert_eq!(addrs.len(), 2, "two 82576s: {addrs:?}");
    for (addr, name, sock, master) in [
        (&addrs[0], "master", MASTER_SOCK, true),
        (&addrs[1], "slave", SLAVE_SOCK, false),
    ] {
        let d = Daemons {
            addr,
            name,
            sock,
            master,
            rx_filter: "per_role",
        };
        start_daemons(&mut g, &d);
    }
    let (locked_after, _) = wait_for_lock(&mut g, &addrs[1], LOCK_WITHIN);
    let seen: Vec<(i128, i128)> = (0..SAMPLES).map(|_| compare(&mut g)).collect();
    let (relock, state) = wait_for_lock(&mut g, &addrs[1], RELOCK_WITHIN);
    let gm = json(&mut g, MASTER_SOCK, "status")["grandmaster"].clone();
    let delay_ns = i128::from(state["mean_path_delay_ns"].as_i64().expect("path delay")).abs();
    // Between two Syncs (250 ms) the PHCs, both on QEMU's one virtual clock, drift apart by
    // the slave's frequency correction alone.
    let freq_ppb = state["freq_ppb"].as_f64().expect("freq").abs();
    let drift_ns = (freq_ppb * SYNC_INTERVAL_S) as i128 + 1;
    let rx_master = stat(&mut g, MASTER_SOCK, "rx_timestamped");
    let faults = g.run("grep -c SYNCHRONIZATION_FAULT /tmp/slave-ptpd.log");
    report(
        locked_after,
        relock,
        &seen,
        &state,
        rx_master,
        faults.text().trim(),
    );
    let logs = g.run("tail -n 40 /tmp/slave-ptpd.log; tail -n 20 /tmp/master-ptpd.log");
    eprintln!("{}", logs.text());
    assert_eq!(
        state["grandmaster"], gm,
        "the slave follows another clock: {state}"
    );
    assert_eq!(state["steps_removed"], 1, "{state}");
    assert!(rx_master > 0, "the master got no Delay_Req stamp");
    for (i, &(diff, bound)) in seen.iter().enumerate() {
        assert!(
            diff.abs() <= bound + SERVO_LOCK_NS + delay_ns + drift_ns,
            "sample {i}: PHC master − slave = {diff} ns, beyond its read bound {bound} ns + \
             the lock's {SERVO_LOCK_NS} ns + the path delay {delay_ns} ns + the drift \
             between Syncs {drift_ns} ns (all: {seen:?})"
        );
    }
    g.finish();
}

/// Prints the lock test's figures: time to SLAVE, |PHC master − slave| over the samples with
/// their read bounds, the slave's servo state at the end and its SYNCHRONIZATION_FAULTs.
fn report(
    locked_after: Duration,
    relock: Duration,
    seen: &[(i128, i128)],
    state: &Value,
    rx_master: u64,
    faults: &str,
) {
    let n = seen.len();
    let max = seen.iter().map(|(d, _)| d.abs()).max().unwrap_or(0);
    let mean = seen.iter().map(|(d, _)| *d as f64).sum::<f64>() / n as f64;
    let rms = (seen.iter().map(|(d, _)| (*d as f64).powi(2)).sum::<f64>() / n as f64).sqrt();
    let mut unc: Vec<i128> = seen.iter().map(|(_, u)| *u).collect();
    unc.sort_unstable();
    eprintln!(
        "[loop] SLAVE after {:.1} s (from the daemons' start); PHC master − slave over {n} \
         samples: mean {mean:.0} ns, rms {rms:.0} ns, max |{max}| ns, read bound median {} ns, \
         max {} ns; SLAVE again {:.1} s after the last sample; slave servo offset {} ns, freq \
         {} ppb, mean path delay {} ns; SYNCHRONIZATION_FAULTs {faults}; master Delay_Req \
         stamps {rx_master}",
        locked_after.as_secs_f64(),
        unc[n / 2],
        unc[n - 1],
        relock.as_secs_f64(),
        state["offset_ns"],
        state["freq_ppb"],
        state["mean_path_delay_ns"],
    );
    eprintln!("[loop] samples (diff, bound): {seen:?}");
}

/// The time-sync registers through /dev/mem (busybox devmem), for a failure's message.
/// TSYNCRXCTL is read before RXSATRH, whose read releases QEMU's RX latch.
fn regs_dump(g: &mut Guest, addr: &str) -> String {
    let regs = [
        ("TSYNCRXCTL", 0xB620),
        ("TSYNCTXCTL", 0xB614),
        ("TSYNCRXCFG", 0x5F50),
        ("ETQF3", 0x5CBC),
        ("TIMINCA", 0xB608),
        ("RXSTMPL", 0xB624),
        ("RXSTMPH", 0xB628),
        ("RXSATRL", 0xB62C),
        ("RXSATRH", 0xB630),
    ];
    let cmd: Vec<String> = regs
        .iter()
        .map(|(n, o)| format!("echo {n} $(devmem $((B + {o})) 32)"))
        .collect();
    g.run(&format!(
        "B=$(head -c 18 /sys/bus/pci/devices/{addr}/resource); {}",
        cmd.join("; ")
    ))
    .text()
}
