//! Shared by tests/vm_igb*.rs: guests on QEMU 10's `-device igb` and the phc_ctl-style
//! measurement run the same way through Linux's phc_ctl and through our ptpctl.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redox_ptp::vm::{
    CmdOutput, GuestSetup, NicVmConfig, Packages, Qemu10, Vm, dgram_pair, hub_loop,
};

/// One test's guests at a time: TCG guests on a 2-core machine starve each other.
static ONE_VM: Mutex<()> = Mutex::new(());

pub fn one_vm() -> MutexGuard<'static, ()> {
    ONE_VM.lock().unwrap_or_else(|e| e.into_inner())
}

const CMD: Duration = Duration::from_secs(60);
pub const NS: i128 = 1_000_000_000;
/// The frequency offset the measurement requests, up then down (ppb).
pub const FREQ_PPB: i64 = 100_000;
/// The settime target (s, ns).
const SET_TO_NS: i128 = 1000 * NS + 500_000_000;
/// The adjtime step (ns).
const ADJ_NS: i128 = 2_250_000_000;
/// How long a rate is measured over (s).
const RATE_SECS: u32 = 3;

/// The QEMU 10 tree, provisioned if absent (or a panic naming the command).
pub fn qemu10() -> Qemu10 {
    Qemu10::find_or_provision(&Qemu10::default_root()).unwrap_or_else(|e| panic!("{e}"))
}

/// Linux's igb module and its dependencies (dca, i2c-algo-bit) from the guest kernel's tree,
/// dependencies first: shipped as plain files into the guest's /usr/bin and loaded by
/// [`load_igb`].
pub fn igb_modules() -> Vec<PathBuf> {
    let pkgs = Packages::find().unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(format!("/lib/modules/{}", pkgs.kernel_release));
    let dep = std::fs::read_to_string(dir.join("modules.dep")).unwrap();
    let line = dep
        .lines()
        .find(|l| l.contains("/igb/igb.ko"))
        .expect("igb.ko in modules.dep");
    let (module, deps) = line.split_once(':').unwrap();
    let mut v: Vec<PathBuf> = deps.split_whitespace().rev().map(|d| dir.join(d)).collect();
    v.push(dir.join(module));
    v
}

/// Loads Linux's igb in a guest given [`igb_modules`].
pub fn load_igb(mods: &[PathBuf]) -> String {
    mods.iter()
        .map(|m| {
            let name = m.file_name().unwrap().to_string_lossy();
            format!("insmod /usr/bin/{name}")
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

pub struct Guest {
    pub vm: Vm,
    pub tag: String,
    pub dir: PathBuf,
}

/// A fresh directory for a test's guests (logs, sockets).
pub fn run_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "redox-ptp-vmigb-{tag}-{}-{}",
        std::process::id(),
        ptp_ipc::time::mono_ns()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Guest {
    /// Boots a guest on `-device igb`; `net` is (netdev, MAC's last byte, run dir), else the
    /// guest's NIC is cabled to nobody.
    pub fn boot(tag: &str, net: Option<(String, u8, PathBuf)>) -> Self {
        Self::boot_with(tag, net, &GuestSetup::default())
    }

    pub fn boot_with(tag: &str, net: Option<(String, u8, PathBuf)>, setup: &GuestSetup) -> Self {
        Self::boot_machine(tag, net, setup, false)
    }

    /// [`Self::boot_with`], with a virtual Intel IOMMU in front of the NIC when `iommu` (the
    /// guest's command line needs `intel_iommu=on` too).
    pub fn boot_machine(
        tag: &str,
        net: Option<(String, u8, PathBuf)>,
        setup: &GuestSetup,
        iommu: bool,
    ) -> Self {
        let (netdev, mac, dir) = net.unwrap_or_else(|| {
            let dir = run_dir(tag);
            (dgram_pair(&dir).0, 0x56, dir)
        });
        let device = format!("igb,netdev=n0,mac=52:54:00:12:34:{mac:02x}");
        Self::boot_nics(tag, &dir, (netdev, device), Vec::new(), setup, iommu)
    }

    /// A guest with two 82576s whose netdevs are cabled to each other ([`dgram_loop`]; MACs
    /// ending 0x61 and 0x62): both PHCs run on the one QEMU's virtual clock and a process in
    /// the guest can read both.
    pub fn boot_two_nics(tag: &str, setup: &GuestSetup) -> Self {
        let dir = run_dir(tag);
        let (n0, n1) = hub_loop();
        // Explicit slots two apart: QEMU's igb reserves the functions of its SR-IOV VFs at
        // realize (devfn + 0x80, stride 2), so with automatic slots the second 82576's VFs
        // would collide with the first's ("slot 19 function 0 not available for igbvf").
        let dev = |id: u8, slot: u8, mac: u8| {
            format!("igb,netdev=n{id},addr={slot:#x},mac=52:54:00:12:34:{mac:02x}")
        };
        let (a, b) = (dev(0, 4, 0x61), dev(1, 6, 0x62));
        Self::boot_nics(tag, &dir, (n0, a), vec![(n1, b)], setup, false)
    }

    fn boot_nics(
        tag: &str,
        dir: &std::path::Path,
        first: (String, String),
        more_nics: Vec<(String, String)>,
        setup: &GuestSetup,
        iommu: bool,
    ) -> Self {
        let gdir = dir.join(tag);
        let cfg = NicVmConfig {
            qemu: qemu10(),
            netdev: first.0,
            device: first.1,
            more_nics,
            iommu,
            run_dir: gdir.clone(),
            cache_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-cache"),
            boot_timeout: Duration::from_secs(120),
        };
        let t0 = Instant::now();
        let vm = Vm::boot_qemu_nic(&cfg, setup).unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "[{tag}] QEMU {} guest ready in {:.1} s ({})",
            cfg.qemu.version,
            t0.elapsed().as_secs_f64(),
            gdir.display()
        );
        Self {
            vm,
            tag: tag.into(),
            dir: gdir,
        }
    }

    /// Powers the guest off and removes the test's run directory (kept when the test fails,
    /// for its logs).
    pub fn finish(self) {
        self.vm.shutdown();
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }

    pub fn run(&mut self, cmd: &str) -> CmdOutput {
        let out = self
            .vm
            .run(cmd, CMD)
            .unwrap_or_else(|e| panic!("[{}] {cmd}: {e}", self.tag));
        eprintln!("[{}] $ {cmd}  (rc {})\n{}", self.tag, out.rc, out.text());
        out
    }

    pub fn run_ok(&mut self, cmd: &str) -> CmdOutput {
        let out = self.run(cmd);
        assert_eq!(out.rc, 0, "[{}] {cmd} failed:\n{}", self.tag, out.text());
        out
    }

    /// The PCI address of the guest's 82576 (8086:10c9).
    pub fn igb_address(&mut self) -> String {
        let mut all = self.igb_addresses();
        assert_eq!(all.len(), 1, "one 82576 in the guest: {all:?}");
        all.remove(0)
    }

    /// The PCI addresses of the guest's 82576s (8086:10c9), in bus order.
    pub fn igb_addresses(&mut self) -> Vec<String> {
        let out = self.run_ok(
            "for d in /sys/bus/pci/devices/*; do \
             [ \"$(cat $d/vendor):$(cat $d/device)\" = 0x8086:0x10c9 ] && basename $d; done; true",
        );
        let all: Vec<String> = out.text().split_whitespace().map(str::to_string).collect();
        assert!(
            !all.is_empty() && all.iter().all(|a| a.starts_with("0000:")),
            "no 82576 in the guest: {all:?}"
        );
        all
    }

    /// The interface igb made, brought up (the link of QEMU's model is up at once).
    pub fn wait_netdev(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self.run("ls /sys/bus/pci/drivers/igb/*/net/ 2>/dev/null");
            if let Some(ifc) = out.lines.iter().map(|l| l.trim()).find(|l| !l.is_empty()) {
                let ifc = ifc.to_string();
                self.run_ok(&format!("ip link set {ifc} up"));
                return ifc;
            }
            assert!(Instant::now() < deadline, "igb made no interface");
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// One `cmp` bracketed by CLOCK_MONOTONIC reads.
    fn sample(&mut self, tool: &Tool) -> Sample {
        let now = "awk 'NR==3{print $3; exit}' /proc/timer_list";
        let out = self.run_ok(&format!(
            "echo \"@@M0 $({now})\"; {}; echo \"@@M1 $({now})\"",
            tool.cmd("cmp")
        ));
        let text = out.text();
        let mono = |k: &str| -> i128 {
            let v = text
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap_or_else(|| panic!("{k} missing in {text:?}"));
            v.trim().parse().unwrap_or_else(|_| panic!("{k} {v:?}"))
        };
        let (m0, m1) = (mono("@@M0 "), mono("@@M1 "));
        Sample {
            mono_ns: (m0 + m1) / 2,
            bracket_ns: m1 - m0,
            offset_ns: tool.phc_minus_realtime(&text),
            window_ns: window_ns(&text),
        }
    }

    /// The phc_ctl-style measurement (see [`Measured`]), at nominal frequency first.
    pub fn measure(&mut self, tool: &Tool) -> Measured {
        self.run_ok(&tool.cmd("freq 0"));
        let rest: Vec<Sample> = (0..3).map(|_| self.sample(tool)).collect();
        let noise_ns = rest.iter().map(|s| s.offset_ns).max().unwrap()
            - rest.iter().map(|s| s.offset_ns).min().unwrap();
        let (set_error_ns, set_bracket_ns) = self.set_lands(tool);
        let a = self.sample(tool);
        self.run_ok(&tool.cmd(&format!("adj {}", fmt_s(ADJ_NS))));
        let b = self.sample(tool);
        let adj_error_ns = b.offset_ns - a.offset_ns - ADJ_NS;
        let adj_windows_ns = (a.window_ns + b.window_ns) / 2;
        // The rate at nominal first: the guest's CLOCK_MONOTONIC runs off QEMU's virtual clock
        // by its boot-time TSC calibration error (0.75 ppm seen), the same for both drivers.
        let (_, rate_zero_ppb, w_zero) = self.freq_step(tool, 0, 0.0);
        let (step_up, rate_up_ppb, w_up) = self.freq_step(tool, FREQ_PPB, rate_zero_ppb);
        let (step_down, rate_down_ppb, w_down) = self.freq_step(tool, -FREQ_PPB, rate_up_ppb);
        self.run_ok(&tool.cmd("freq 0"));
        Measured {
            noise_ns,
            set_error_ns,
            set_bracket_ns,
            adj_error_ns,
            adj_windows_ns,
            rate_zero_ppb,
            rate_zero_tol_ppb: w_zero,
            step_up,
            rate_up_ppb,
            rate_up_tol_ppb: w_up,
            step_down,
            rate_down_ppb,
            rate_down_tol_ppb: w_down,
        }
        .with_noise()
    }

    /// set then get: how far the read lies past the set value, and the bracket it must lie in.
    fn set_lands(&mut self, tool: &Tool) -> (i128, i128) {
        let now = "awk 'NR==3{print $3; exit}' /proc/timer_list";
        let out = self.run_ok(&format!(
            "echo \"@@M0 $({now})\"; {}; {}; echo \"@@M1 $({now})\"",
            tool.cmd(&format!("set {}", fmt_s(SET_TO_NS))),
            tool.cmd("get")
        ));
        let text = out.text();
        let get = seconds_after_ns(&text, "clock time is");
        let mono = |k: &str| -> i128 {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{k} missing in {text:?}"))
        };
        (get - SET_TO_NS, mono("@@M1 ") - mono("@@M0 "))
    }

    /// Requests `ppb`; returns the step the write made (beyond the drift between the samples
    /// around it), the rate over [`RATE_SECS`] after it, and that rate's uncertainty from the
    /// samples' brackets.
    fn freq_step(&mut self, tool: &Tool, ppb: i64, prev_rate: f64) -> (FreqStep, f64, f64) {
        let a = self.sample(tool);
        self.run_ok(&tool.cmd(&format!("freq {ppb}")));
        let b = self.sample(tool);
        self.run_ok(&format!("sleep {RATE_SECS}"));
        let c = self.sample(tool);
        let dt = (c.mono_ns - b.mono_ns) as f64;
        let rate = (c.offset_ns - b.offset_ns) as f64 / dt * 1e9;
        // Each sample's instant is known within half its bracket, over which the offset moves
        // by the rate itself.
        let tol = rate.abs() * ((b.bracket_ns + c.bracket_ns) as f64 / 2.0) / dt;
        // The write landed somewhere between a and b: before it the clock drifted at the old
        // rate, after it at the new one. Taking the mean of both leaves half their difference
        // over the span unknown.
        let span = (b.mono_ns - a.mono_ns) as f64 * 1e-9;
        let drift = (prev_rate + rate) / 2.0 * span;
        let step = FreqStep {
            ns: b.offset_ns - a.offset_ns - drift as i128,
            tol_ns: ((rate - prev_rate).abs() / 2.0 * span) as i128 + 1,
        };
        (step, rate, tol)
    }
}

/// How far a frequency write moved the clock at once, and what that is known within (the rate
/// changed at an unknown instant between the two samples around the write).
#[derive(Debug, Clone, Copy)]
pub struct FreqStep {
    pub ns: i128,
    pub tol_ns: i128,
}

/// One `cmp`: PHC − CLOCK_REALTIME and the CLOCK_MONOTONIC instant (mid-bracket).
#[derive(Debug, Clone, Copy)]
struct Sample {
    mono_ns: i128,
    bracket_ns: i128,
    offset_ns: i128,
    /// ptpctl's gettimex window (the offset is known within half of it); 0 for phc_ctl, which
    /// does not print one.
    window_ns: i128,
}

/// "(window Wns)" in ptpctl's cmp line, else 0.
fn window_ns(text: &str) -> i128 {
    text.split("(window ")
        .nth(1)
        .and_then(|r| r.split("ns").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// What a driver's PHC did under the phc_ctl verbs on QEMU's 82576.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Spread of three `cmp` offsets at rest (the offset reading's own uncertainty).
    pub noise_ns: i128,
    /// `get` right after `set 1000.5` minus 1000.5 s, and the CLOCK_MONOTONIC span of both.
    pub set_error_ns: i128,
    pub set_bracket_ns: i128,
    /// The offset's change across `adj 2.25` minus 2.25 s.
    pub adj_error_ns: i128,
    /// Half the two cmp windows around the adj, summed.
    pub adj_windows_ns: i128,
    /// The rate at freq 0 (ppb vs CLOCK_MONOTONIC) and its uncertainty.
    pub rate_zero_ppb: f64,
    pub rate_zero_tol_ppb: f64,
    /// The PHC's step when the frequency went 0 → +FREQ_PPB, and the rate after (ppb vs
    /// CLOCK_MONOTONIC) with its uncertainty.
    pub step_up: FreqStep,
    pub rate_up_ppb: f64,
    pub rate_up_tol_ppb: f64,
    /// The same for +FREQ_PPB → −FREQ_PPB.
    pub step_down: FreqStep,
    pub rate_down_ppb: f64,
    pub rate_down_tol_ppb: f64,
}

impl Measured {
    /// Adds the offset noise (twice, over the rate's span) to the rate tolerances.
    fn with_noise(mut self) -> Self {
        let n = 2.0 * self.noise_ns as f64 / (f64::from(RATE_SECS) * 1e9) * 1e9;
        self.rate_zero_tol_ppb += n;
        self.rate_up_tol_ppb += n;
        self.rate_down_tol_ppb += n;
        self
    }

    /// What any working PHC does: set lands, adj moves by the amount, freq changes the rate
    /// (from the rate at freq 0) by what `want(ppb)` says the driver gives for a request.
    pub fn assert_sane(&self, who: &str, want: impl Fn(i64) -> f64) {
        assert!(
            (0..=self.set_bracket_ns).contains(&self.set_error_ns),
            "{who}: get after set is {} ns past the set value, outside [0, {}]",
            self.set_error_ns,
            self.set_bracket_ns
        );
        // Two offsets, each within the rest noise and half its window, plus 1 µs for a TCG
        // guest's reads (Linux igb and igbd both landed within 20 ns in the runs seen).
        let adj_tol = 2 * self.noise_ns + self.adj_windows_ns + 1_000;
        assert!(
            self.adj_error_ns.abs() <= adj_tol,
            "{who}: adj {ADJ_NS} ns moved the offset by {} ns more (tolerance {adj_tol})",
            self.adj_error_ns
        );
        for (rate, tol, ppb) in [
            (self.rate_up_ppb, self.rate_up_tol_ppb, FREQ_PPB),
            (self.rate_down_ppb, self.rate_down_tol_ppb, -FREQ_PPB),
        ] {
            let want = want(ppb);
            let (change, tol) = (rate - self.rate_zero_ppb, tol + self.rate_zero_tol_ppb);
            assert!(
                (change - want).abs() <= tol,
                "{who}: freq {ppb} changed the rate against CLOCK_MONOTONIC by {change:.1} ppb \
                 (from {:.1}), want {want:.1} ± {tol:.1}",
                self.rate_zero_ppb
            );
        }
    }
}

/// The rate a freq request gives on an 82576 through TIMINCA (Linux igb): IncValue 16·2^19 ±
/// (ppb << 14) / 1953125 (Linux's integer division), relative to 16·2^19. igbd steers its
/// timecounter instead and gives the request itself (within 2^-40).
pub fn expected_rate_ppb(ppb: i64) -> f64 {
    let d = ((ppb.unsigned_abs() << 14) / 1_953_125) as f64;
    d.copysign(ppb as f64) / f64::from(16u32 << 19) * 1e9
}

/// What a frequency write did to the PHC's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Below 10 µs: continuous.
    None,
    /// Forward, under a second (QEMU: 2 × the IncValue change × its virtual time).
    SmallForward,
    /// Backward, under a second.
    SmallBackward,
    /// 2^41 ns (2^60 SYSTIM counts of 2^-19 ns) ± 1 s: QEMU's unsigned TIMADJ rebase when
    /// IncValue decreases.
    Wrap41,
    /// Anything else.
    Other,
}

pub fn classify_step(ns: i128) -> Step {
    const WRAP: i128 = 1 << 41;
    match ns {
        n if n.abs() < 10_000 => Step::None,
        n if n > 0 && n < NS => Step::SmallForward,
        n if n < 0 && -n < NS => Step::SmallBackward,
        n if (n.abs() - WRAP).abs() < NS => Step::Wrap41,
        _ => Step::Other,
    }
}

/// Which tool runs the verbs.
#[derive(Debug, Clone)]
pub enum Tool {
    /// linuxptp's phc_ctl on this device node.
    PhcCtl(String),
    /// Our ptpctl on ptpd's clock socket.
    PtpCtl(String),
}

impl Tool {
    pub fn cmd(&self, verb: &str) -> String {
        match self {
            Tool::PhcCtl(dev) => format!("phc_ctl {dev} -- {verb}"),
            Tool::PtpCtl(sock) => format!("ptplab ptpctl --socket {sock} {verb}"),
        }
    }

    /// PHC − CLOCK_REALTIME from `cmp`'s output: phc_ctl prints CLOCK_REALTIME − PHC (its
    /// sysoff convention), ptpctl PHC − CLOCK_REALTIME.
    fn phc_minus_realtime(&self, text: &str) -> i128 {
        let key = "offset from CLOCK_REALTIME is ";
        let rest = &text[text
            .find(key)
            .unwrap_or_else(|| panic!("no cmp result in {text:?}"))
            + key.len()..];
        let num: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        let v: i128 = num.parse().unwrap_or_else(|_| panic!("cmp {rest:?}"));
        match self {
            Tool::PhcCtl(_) => -v,
            Tool::PtpCtl(_) => v,
        }
    }
}

/// ns as "S.NNNNNNNNN" (signed).
pub fn fmt_s(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    format!("{sign}{}.{:09}", ns.abs() / NS, ns.abs() % NS)
}

/// The first decimal seconds value after `key`, as ns.
pub fn seconds_after_ns(text: &str, key: &str) -> i128 {
    let rest = &text[text
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} not in {text:?}"))
        + key.len()..];
    let num: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-')
        .collect();
    let (s, frac) = num.split_once('.').unwrap_or((&num, "0"));
    let frac = format!("{frac:0<9}");
    let sign = if s.starts_with('-') { -1 } else { 1 };
    let s: i128 = s.trim_start_matches('-').parse().unwrap();
    sign * (s * NS + frac[..9].parse::<i128>().unwrap())
}
