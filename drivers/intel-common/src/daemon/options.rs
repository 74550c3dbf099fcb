//! Command line of a driver daemon (igcd, igbd): the same options for every family, with the
//! family's `--emulate` models and TX set count.

use std::ffi::OsString;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use ptp_ipc::rt::{self, RtConfig};

use super::Error;
use crate::family::Family;
use crate::irq::{IrqStyle, Napi};

/// The usage text of `Fam`'s daemon.
pub fn usage<Fam: Family>() -> String {
    USAGE
        .replace("igcd", Fam::DAEMON)
        .replace("MODELS", &format!("{:<16}", Fam::MODELS.join("|")))
        .replace("1..4 (default 4)", &{
            let n = Fam::MAX_TX_SETS;
            format!("1..{n} (default {n})")
        })
}

const USAGE: &str = "\
usage: igcd [options]
  --emulate MODELS run on an emulated NIC (host builds)
  --pci ADDR              Linux, as root: drive the PCI function at ADDR (0000:03:00.0) from
                          userspace, bound to vfio-pci (IOMMU) or uio_pci_generic (no IOMMU: needs
                          a free 2 MiB hugepage); it stays bound to that driver after exit.
                          Redox: open the function's pcid channel by path, as a driver
                          restarted by hand does (pcid-spawner passes it PCID_CLIENT_CHANNEL)
  --devhost PATH          drive the emulated NIC a device host serves at PATH (`ptplab devhost
                          --listen PATH`, Linux hosts): the model lives in that process and
                          outlives this daemon, so a restarted daemon finds its clock running
  --cold-start            always reset the PHC at start; without it a running, sane PHC (timer
                          enabled, advancing at a plausible rate, TX timestamping on) is kept
                          (warm attach) and only the MAC and the rings are re-initialised
  --unbind                with --pci: detach the function from the kernel driver holding it
  --channel PATH          driver channel socket ptpd connects to (required on Linux hosts)
  --clock-page PATH       publish the clock page at PATH
  --allow-uid UID         besides root and igcd's own uid, let UID drive the NIC over the
                          channel (ptpd's uid when it does not run as root); on Linux the
                          socket file is then owned by UID
  --allow-gid GID         also let members of GID drive the NIC; on Linux the socket file is
                          then group GID, mode 0660 (without: mode 0600)
  --name NAME             name used in logs
  --osc-ppm PPM           emulated oscillator frequency error (default 0)
  --wire WIRE             what the emulated port is cabled to: none (default: link up, frames
                          go nowhere), loopback, bind:PATH or connect:PATH (a Unix datagram
                          wire to another emulated NIC or a benchmark peer; Linux hosts)
  --cable-delay-ns NS     emulated cable delay towards this port, ≤ 1 s (default 50). Each end
                          delays the frames it receives, so two ends with different delays
                          make an asymmetric path
  --cable-jitter-ns NS    emulated cable jitter: each arrival moves by a uniform ±NS, never
                          before departure; ≤ 1 s (default 0)
  --cable-loss P          emulated random frame loss probability, 0 <= P < 1 (default 0)
  --stamp-quantum-ns NS   emulated timestamp resolution: TX/RX stamps truncated to multiples
                          of NS, ≤ 1000000 (default 0 = exact; e.g. 8 for a 125 MHz counter)
  --stamp-jitter-ns NS    emulated TX/RX timestamp jitter, uniform ±NS, ≤ 1000000 (default 0)
  --seed N                seed of the emulated noise and loss (u64; default: the process id,
                          logged at start); give each emulated NIC its own
  --truth PATH            with --emulate: publish the emulated PHC's exact law and the model's
                          BAR/cable-loss counters at PATH (the lab's ground truth, ptp_emu::truth)
  --pins PATH             with --emulate: wire the SDPs to a socket at PATH (mode 0600,
                          ptp_emu::pinwire): edges in (a lab GPS receiver), output edges to
                          whoever subscribes (a lab oscilloscope), each with its true instant
  --emu-faults PATH       with --emulate (igcd, Linux): serve fault injection into the emulated
                          NIC on a SOCK_SEQPACKET socket at PATH (mode 0600, root and igcd's
                          uid only; igcd::faults lists the commands). Test and lab use only
  --poll-irq              take no interrupt: poll the cause registers every --irq-poll-us
                          (without it igcd takes MSI-X, else MSI, else the legacy line, and
                          polls only when interrupts do not arrive)
  --irq-poll-us US        poll interval when polling, 50..=100000 (default 1000)
  --busy-poll-us US       after serving a message on a client's ring, keep polling it up to US
                          µs before sleeping, so at a high rate the next request needs no
                          wake-up (0..=1000; default 0: sleep at once). Costs CPU: tsperf
                          reports CPU per stamp beside it
  --ring-segments N       Redox: shared-memory ring segments for driver-channel clients,
                          0..=16 (default 4); 0: no rings, every client uses the scheme
                          channel. Linux hosts make one ring per connection and ignore it
  --irq-mode MODE         plain (default): an IRQ thread handles its causes once per
                          interrupt; napi: after an interrupt it keeps polling while work keeps
                          coming (and spins up to --napi-spin-us while a stamp it asked for is
                          due), re-arming the interrupt only when idle
  --napi-spin-us US       longest spin with nothing found before re-arming, 0..=1000 (default 30)
  --emu-tx MODE           with --emulate: sync (default): a TX tail write runs the emulated TX
                          engine on the writing thread; thread: it wakes the model thread
  --rt                    real-time service for the time path: the IRQ threads and the thread
                          serving the channel run SCHED_FIFO 50 (Linux's threaded-IRQ priority;
                          an emulated NIC's model thread 10 above); refused (no privilege, a
                          cgroup without a real-time budget, Redox): logged, normal priority.
                          Default: normal priority
  --rt-priority PRIO      --rt at PRIO, 1..=98
  --cpu N                 pin the time-path threads to CPU N
  --link-wait-ms MS       how long bring-up waits for link (default 2000)
  --tx-ts-sets N          TX timestamp register sets to use, 1..4 (default 4)
  --tx-ts-timeout-ms MS   free a TX timestamp set after MS without a stamp (default 1000)
  --tx-poll-us US         parts without a TX timestamp interrupt (82576): how often the
                          time-sync IRQ thread polls while a stamp is pending, 10..=10000
                          (default 100)
  --tx-inline-us US|off   the thread that posts a stamped frame looks for its stamp itself for
                          up to US µs (0..=1000; 0: one look), the TX stamp interrupt gated
                          meanwhile; a stamp not there by then is the IRQ thread's. Saves the
                          IRQ thread's wake-up when the stamp comes fast. off: every stamp is
                          the IRQ thread's (DESIGN.md's path). Default: 0
  --help
";

/// What an emulated port is cabled to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wire {
    None,
    Loopback,
    Bind(PathBuf),
    Connect(PathBuf),
}

impl std::str::FromStr for Wire {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "none" => Wire::None,
            "loopback" => Wire::Loopback,
            _ => match s.split_once(':') {
                Some(("bind", p)) if !p.is_empty() => Wire::Bind(p.into()),
                Some(("connect", p)) if !p.is_empty() => Wire::Connect(p.into()),
                _ => {
                    return Err(format!(
                        "bad --wire {s:?} (none, loopback, bind:PATH, connect:PATH)"
                    ));
                }
            },
        })
    }
}

/// Where an emulated NIC runs its TX engine after a tail write (`--emu-tx`; ptp_emu's
/// `TxEngine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmuTx {
    /// On the writing thread, inside the write.
    Sync,
    /// On the model thread, which the write wakes.
    Thread,
}

/// Largest `--stamp-quantum-ns` / `--stamp-jitter-ns`: 1 ms, far beyond any real part.
const MAX_STAMP_NOISE_NS: u32 = 1_000_000;

/// Ring segments a Redox driver makes before its sandbox by default: enough for ptpd and a tool
/// such as tsperf at once, with a spare while a replaced client lets go.
pub const RING_SEGMENTS: usize = 4;
/// The most `--ring-segments` takes (each is about 2 MB of shared memory and a sleeping thread).
pub const MAX_RING_SEGMENTS: usize = 16;

/// The options of `Fam`'s daemon.
#[derive(Debug, Clone)]
pub struct Options<Fam> {
    /// The model to emulate: one of the family's [`Family::MODELS`].
    pub emulate: Option<&'static str>,
    /// The PCI function to drive from Linux userspace (`--pci ADDR`).
    pub pci: Option<String>,
    /// With `--pci`: detach the function from its kernel driver (`--unbind`).
    pub unbind: bool,
    /// The device host serving the NIC (`--devhost PATH`).
    pub devhost: Option<PathBuf>,
    /// Reset the PHC at start even when it runs sanely (`--cold-start`).
    pub cold_start: bool,
    pub channel: Option<PathBuf>,
    pub clock_page: Option<PathBuf>,
    pub name: String,
    pub osc_ppm: f64,
    pub link_wait: Duration,
    pub tx_ts_sets: u8,
    pub tx_ts_timeout: Duration,
    pub wire: Wire,
    pub cable_delay_ns: u64,
    /// Emulated cable jitter, ± ns.
    pub cable_jitter_ns: u64,
    /// Emulated random loss probability per frame, in [0, 1).
    pub cable_loss: f64,
    /// Emulated timestamp quantum, ns (0: exact).
    pub stamp_quantum_ns: u32,
    /// Emulated timestamp jitter, ± ns.
    pub stamp_jitter_ns: u32,
    /// Seed of the emulated noise; `None`: derived from the process id.
    pub seed: Option<u64>,
    /// Real-time service for the time-path threads (`--rt`, `--rt-priority`, `--cpu`).
    pub rt: RtConfig,
    /// Take no interrupt: poll the cause registers (`--poll-irq`).
    pub poll_irq: bool,
    /// Poll interval when polling.
    pub irq_poll: Duration,
    /// The busy-poll window of the driver's end of each client ring (`--busy-poll-us`).
    pub busy_poll: Duration,
    /// Redox: ring segments made for driver-channel clients (`--ring-segments`; 0: none).
    pub ring_segments: usize,
    /// What an IRQ thread does after an interrupt (`--irq-mode`, `--napi-spin-us`).
    pub irq_style: IrqStyle,
    /// Where the emulated NIC runs its TX engine (`--emu-tx`).
    pub emu_tx: EmuTx,
    /// Ground-truth record of the emulated model (`--truth`, only with `--emulate`).
    pub truth: Option<PathBuf>,
    /// The emulated SDPs' socket (`--pins`, only with `--emulate`).
    pub pins: Option<PathBuf>,
    /// Fault-injection socket of the emulated model (`--emu-faults`, only with `--emulate`).
    pub emu_faults: Option<PathBuf>,
    /// A uid besides root and igcd's own that may use the driver channel (`--allow-uid`).
    pub allow_uid: Option<u32>,
    /// A group whose members may use the driver channel (`--allow-gid`).
    pub allow_gid: Option<u32>,
    /// Poll interval of a pending TX stamp on parts without its interrupt (`--tx-poll-us`).
    pub tx_poll: Duration,
    /// How long the posting thread looks for its own stamp (`--tx-inline-us`; `None`: never).
    pub tx_inline: Option<Duration>,
    _family: PhantomData<fn() -> Fam>,
}

impl<Fam: Family> Options<Fam> {
    /// Parses arguments; `Ok(None)` means `--help`.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Self>, Error> {
        let mut o = Self::defaults();
        let mut p = lexopt::Parser::from_args(args);
        let mut napi_spin = None;
        while let Some(arg) = p.next().map_err(bad)? {
            // An owned key, so the group parsers below can take values from `p`.
            let key = match arg {
                lexopt::Arg::Long(k) => k.to_owned(),
                lexopt::Arg::Short('h') => return Ok(None),
                other => return Err(bad(other.unexpected())),
            };
            let p = &mut p;
            let taken = o.device_arg(&key, p)?
                || o.channel_arg(&key, p)?
                || o.emulation_arg(&key, p)?
                || o.irq_arg(&key, p, &mut napi_spin)?;
            if !taken {
                if key == "help" {
                    return Ok(None);
                }
                return Err(bad(lexopt::Error::UnexpectedOption(format!("--{key}"))));
            }
        }
        o.finish(napi_spin).map(Some)
    }

    fn defaults() -> Self {
        Options {
            emulate: None,
            pci: None,
            unbind: false,
            devhost: None,
            cold_start: false,
            channel: None,
            clock_page: None,
            name: String::new(),
            osc_ppm: 0.0,
            link_wait: Duration::from_millis(2000),
            tx_ts_sets: Fam::MAX_TX_SETS,
            tx_ts_timeout: Duration::from_millis(1000),
            wire: Wire::None,
            cable_delay_ns: 50,
            cable_jitter_ns: 0,
            cable_loss: 0.0,
            stamp_quantum_ns: 0,
            stamp_jitter_ns: 0,
            seed: None,
            rt: RtConfig::default(),
            poll_irq: false,
            irq_poll: Duration::from_millis(1),
            busy_poll: ptp_ipc::transport::DRIVER_RING_BUSY_POLL,
            ring_segments: RING_SEGMENTS,
            // NAPI measured no better on the 2-core development machine (its spins and polls
            // compete for the cores the stamps' consumers need): opt-in.
            irq_style: IrqStyle::Plain,
            emu_tx: EmuTx::Sync,
            truth: None,
            pins: None,
            emu_faults: None,
            allow_uid: None,
            allow_gid: None,
            tx_poll: Duration::from_micros(100),
            tx_inline: Some(Duration::ZERO),
            _family: PhantomData,
        }
    }

    /// The device and how the daemon drives it; `Ok(false)`: not one of these options.
    fn device_arg(&mut self, key: &str, p: &mut lexopt::Parser) -> Result<bool, Error> {
        match key {
            "emulate" => {
                let m = string(p)?;
                match Fam::MODELS.iter().find(|&&k| k == m) {
                    Some(k) => self.emulate = Some(k),
                    None => return Err(Error::Usage(format!("unknown model {m:?}"))),
                }
            }
            "pci" => self.pci = Some(string(p)?),
            "unbind" => self.unbind = true,
            "devhost" => self.devhost = Some(path(p)?),
            "cold-start" => self.cold_start = true,
            "name" => self.name = string(p)?,
            "link-wait-ms" => self.link_wait = Duration::from_millis(value(p)?),
            "tx-ts-sets" => {
                let max = Fam::MAX_TX_SETS;
                self.tx_ts_sets = ranged(p, 1..=max, &format!("--tx-ts-sets must be 1..={max}"))?;
            }
            "tx-ts-timeout-ms" => {
                let ms = ranged(p, 1..=600_000, "--tx-ts-timeout-ms must be 1..=600000")?;
                self.tx_ts_timeout = Duration::from_millis(ms);
            }
            "tx-poll-us" => {
                let us = ranged(p, 10..=10_000, "--tx-poll-us must be 10..=10000")?;
                self.tx_poll = Duration::from_micros(us);
            }
            "tx-inline-us" => self.tx_inline = tx_inline(p)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The driver channel, the clock page and who may use them.
    fn channel_arg(&mut self, key: &str, p: &mut lexopt::Parser) -> Result<bool, Error> {
        match key {
            "channel" => self.channel = Some(path(p)?),
            "clock-page" => self.clock_page = Some(path(p)?),
            "allow-uid" => {
                if self.allow_uid.replace(value(p)?).is_some() {
                    return Err(Error::Usage(
                        "--allow-uid may be given once (a socket file has one owner; use \
                         --allow-gid for several users)"
                            .into(),
                    ));
                }
            }
            "allow-gid" => {
                if self.allow_gid.replace(value(p)?).is_some() {
                    return Err(Error::Usage("--allow-gid may be given once".into()));
                }
            }
            "busy-poll-us" => {
                let us = ranged(p, 0..=1000, "--busy-poll-us must be 0..=1000")?;
                self.busy_poll = Duration::from_micros(us);
            }
            "ring-segments" => {
                let what = format!("--ring-segments must be 0..={MAX_RING_SEGMENTS}");
                self.ring_segments = ranged(p, 0..=MAX_RING_SEGMENTS, &what)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The emulated NIC's oscillator, cable, stamps, truth record and faults.
    fn emulation_arg(&mut self, key: &str, p: &mut lexopt::Parser) -> Result<bool, Error> {
        const NOISE: std::ops::RangeInclusive<u32> = 0..=MAX_STAMP_NOISE_NS;
        match key {
            "osc-ppm" => self.osc_ppm = value(p)?,
            "wire" => self.wire = string(p)?.parse().map_err(Error::Usage)?,
            "cable-delay-ns" => {
                self.cable_delay_ns = ranged(p, 0..=ONE_S_NS, "--cable-delay-ns must be ≤ 1 s")?
            }
            "cable-jitter-ns" => {
                self.cable_jitter_ns = ranged(p, 0..=ONE_S_NS, "--cable-jitter-ns must be ≤ 1 s")?
            }
            "cable-loss" => {
                self.cable_loss = value(p)?;
                // Also rejects NaN.
                if !(0.0..1.0).contains(&self.cable_loss) {
                    return Err(Error::Usage(
                        "--cable-loss must be a probability, 0 <= P < 1".into(),
                    ));
                }
            }
            "stamp-quantum-ns" => {
                let what = "--stamp-quantum-ns must be ≤ 1000000 (1 ms)";
                self.stamp_quantum_ns = ranged(p, NOISE, what)?;
            }
            "stamp-jitter-ns" => {
                let what = "--stamp-jitter-ns must be ≤ 1000000 (1 ms)";
                self.stamp_jitter_ns = ranged(p, NOISE, what)?;
            }
            "truth" => self.truth = Some(path(p)?),
            "pins" => self.pins = Some(path(p)?),
            "emu-faults" => self.emu_faults = Some(path(p)?),
            "seed" => self.seed = Some(value(p)?),
            "emu-tx" => {
                let m = string(p)?;
                self.emu_tx = match m.as_str() {
                    "sync" => EmuTx::Sync,
                    "thread" => EmuTx::Thread,
                    _ => return Err(Error::Usage(format!("bad --emu-tx {m:?} (sync, thread)"))),
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// How interrupts are taken and served.
    fn irq_arg(
        &mut self,
        key: &str,
        p: &mut lexopt::Parser,
        napi_spin: &mut Option<Duration>,
    ) -> Result<bool, Error> {
        match key {
            "poll-irq" => self.poll_irq = true,
            "irq-poll-us" => {
                let us = ranged(p, 50..=100_000, "--irq-poll-us must be 50..=100000")?;
                self.irq_poll = Duration::from_micros(us);
            }
            "irq-mode" => {
                let m = string(p)?;
                self.irq_style = match m.as_str() {
                    "napi" => IrqStyle::Napi(Napi::default()),
                    "plain" => IrqStyle::Plain,
                    _ => return Err(Error::Usage(format!("bad --irq-mode {m:?} (napi, plain)"))),
                };
            }
            "napi-spin-us" => {
                let us = ranged(p, 0..=1000, "--napi-spin-us must be 0..=1000")?;
                *napi_spin = Some(Duration::from_micros(us));
            }
            "rt" => {
                self.rt.priority.get_or_insert(rt::DEFAULT_PRIORITY);
            }
            "rt-priority" => {
                self.rt.priority = Some(rt::parse_priority(&string(p)?).map_err(Error::Usage)?)
            }
            "cpu" => self.rt.cpu = Some(ranged(p, 0..=1023, "--cpu must be 0..=1023")?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The checks that span options.
    fn finish(mut self, napi_spin: Option<Duration>) -> Result<Self, Error> {
        let usage = |s: &str| Err(Error::Usage(s.into()));
        match (&mut self.irq_style, napi_spin) {
            (IrqStyle::Napi(n), Some(spin)) => n.spin = spin,
            (IrqStyle::Plain, Some(_)) => return usage("--napi-spin-us needs --irq-mode napi"),
            (_, None) => {}
        }
        if self.pci.is_some() && self.emulate.is_some() {
            return usage("--pci and --emulate exclude each other");
        }
        if self.devhost.is_some() && (self.pci.is_some() || self.emulate.is_some()) {
            return usage(
                "--devhost excludes --pci and --emulate (the device host runs the model)",
            );
        }
        if self.unbind && self.pci.is_none() {
            return usage("--unbind needs --pci ADDR");
        }
        if self.pins.is_some() && self.emulate.is_none() {
            return usage("--pins needs --emulate: a real NIC's pins are wires");
        }
        if self.truth.is_some() && self.emulate.is_none() {
            return usage("--truth needs --emulate: only an emulated NIC knows its exact clock");
        }
        if self.emu_faults.is_some() && self.emulate.is_none() {
            return usage("--emu-faults needs --emulate: faults are injected into the model only");
        }
        if !self.osc_ppm.is_finite() || self.osc_ppm.abs() > 1000.0 {
            return usage("--osc-ppm must be within ±1000");
        }
        Ok(self)
    }
}

const ONE_S_NS: u64 = 1_000_000_000;

fn bad(e: lexopt::Error) -> Error {
    Error::Usage(e.to_string())
}

fn string(p: &mut lexopt::Parser) -> Result<String, Error> {
    use lexopt::ValueExt;
    p.value().map_err(bad)?.string().map_err(bad)
}

fn path(p: &mut lexopt::Parser) -> Result<PathBuf, Error> {
    Ok(p.value().map_err(bad)?.into())
}

fn value<T>(p: &mut lexopt::Parser) -> Result<T, Error>
where
    T: std::str::FromStr,
    T::Err: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    use lexopt::ValueExt;
    p.value().map_err(bad)?.parse().map_err(bad)
}

/// `--tx-inline-us US|off`.
fn tx_inline(p: &mut lexopt::Parser) -> Result<Option<Duration>, Error> {
    parse_tx_inline(&value::<String>(p)?).map_err(|e| Error::Usage(e.into()))
}

/// A `--tx-inline-us` value: `off` (`None`) or 0..=1000 µs; shared with the lab, which passes
/// it on to every daemon.
pub fn parse_tx_inline(v: &str) -> Result<Option<Duration>, &'static str> {
    match v {
        "off" => Ok(None),
        us => match us.parse::<u64>() {
            Ok(us) if us <= 1000 => Ok(Some(Duration::from_micros(us))),
            _ => Err("--tx-inline-us must be 0..=1000 or off"),
        },
    }
}

/// The option's value, which must lie in `range`; else the usage error `what`.
fn ranged<T>(
    p: &mut lexopt::Parser,
    range: std::ops::RangeInclusive<T>,
    what: &str,
) -> Result<T, Error>
where
    T: std::str::FromStr + PartialOrd,
    T::Err: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    let v = value(p)?;
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(Error::Usage(what.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options<crate::igc::Igc>, String> {
        match Options::<crate::igc::Igc>::parse(args.iter().map(OsString::from)) {
            Ok(Some(o)) => Ok(o),
            Ok(None) => Err("help".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn real_time_service_is_off_unless_asked() {
        assert_eq!(parse(&[]).unwrap().rt, RtConfig::default());
        assert_eq!(parse(&["--rt"]).unwrap().rt, RtConfig::fifo(50));
        // --rt after --rt-priority keeps the priority given.
        let o = parse(&["--rt-priority", "70", "--rt", "--cpu", "1"]).unwrap();
        assert_eq!(
            o.rt,
            RtConfig {
                cpu: Some(1),
                ..RtConfig::fifo(70)
            }
        );
        for (args, msg) in [
            (&["--rt-priority", "99"][..], "must be 1..=98"),
            (&["--rt-priority", "0"], "must be 1..=98"),
            (&["--cpu", "-1"], "invalid"),
            (&["--cpu", "5000"], "--cpu must be 0..=1023"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(msg), "{args:?}: {e}");
        }
    }

    #[test]
    fn the_posting_thread_takes_its_stamp_unless_told_off() {
        assert_eq!(parse(&[]).unwrap().tx_inline, Some(Duration::ZERO));
        assert_eq!(parse(&["--tx-inline-us", "off"]).unwrap().tx_inline, None);
        assert_eq!(
            parse(&["--tx-inline-us", "off", "--tx-inline-us", "20"])
                .unwrap()
                .tx_inline,
            Some(Duration::from_micros(20))
        );
        for bad in ["1001", "-1", "on", ""] {
            let e = parse(&["--tx-inline-us", bad]).unwrap_err();
            assert!(e.contains("0..=1000 or off"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn irq_and_emulated_tx_modes() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.irq_style, IrqStyle::Plain);
        assert_eq!(o.emu_tx, EmuTx::Sync);
        let o = parse(&["--irq-mode", "napi", "--emu-tx", "thread"]).unwrap();
        assert_eq!(
            (o.irq_style, o.emu_tx),
            (IrqStyle::Napi(Napi::default()), EmuTx::Thread)
        );
        let o = parse(&["--napi-spin-us", "0", "--irq-mode", "napi"]).unwrap();
        let want = Napi {
            spin: Duration::ZERO,
            ..Napi::default()
        };
        assert_eq!(o.irq_style, IrqStyle::Napi(want));
        for (args, msg) in [
            (&["--irq-mode", "busy"][..], "bad --irq-mode"),
            (&["--emu-tx", "async"], "bad --emu-tx"),
            (&["--napi-spin-us", "1001"], "--napi-spin-us must be"),
            (
                &["--irq-mode", "plain", "--napi-spin-us", "5"],
                "needs --irq-mode napi",
            ),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(msg), "{args:?}: {e}");
        }
    }

    #[test]
    fn pci_options() {
        let o = parse(&["--pci", "0000:03:00.0", "--unbind"]).unwrap();
        assert_eq!((o.pci.as_deref(), o.unbind), (Some("0000:03:00.0"), true));
        let o = parse(&["--pci", "03:00.0"]).unwrap();
        assert!(!o.unbind);
        let e = parse(&["--unbind"]).unwrap_err();
        assert!(e.contains("--unbind needs --pci"), "{e}");
        let e = parse(&["--pci", "0000:03:00.0", "--emulate", "i225"]).unwrap_err();
        assert!(e.contains("exclude"), "{e}");
        assert!(parse(&["--pci"]).is_err());
    }

    #[test]
    fn emu_faults_needs_an_emulated_nic() {
        let o = parse(&["--emulate", "i225", "--emu-faults", "/tmp/f.sock"]).unwrap();
        assert_eq!(o.emu_faults, Some(PathBuf::from("/tmp/f.sock")));
        assert_eq!(parse(&["--emulate", "i225"]).unwrap().emu_faults, None);
        let e = parse(&["--emu-faults", "/tmp/f.sock"]).unwrap_err();
        assert!(e.contains("--emu-faults needs --emulate"), "{e}");
    }

    #[test]
    fn noise_options_default_to_exact() {
        let o = parse(&["--emulate", "i225"]).unwrap();
        assert_eq!(
            (o.cable_delay_ns, o.cable_jitter_ns, o.cable_loss),
            (50, 0, 0.0)
        );
        assert_eq!(
            (o.stamp_quantum_ns, o.stamp_jitter_ns, o.seed),
            (0, 0, None)
        );
    }

    #[test]
    fn noise_options_parse() {
        let o = parse(&[
            "--cable-delay-ns",
            "120",
            "--cable-jitter-ns",
            "15",
            "--cable-loss",
            "0.01",
            "--stamp-quantum-ns",
            "8",
            "--stamp-jitter-ns",
            "4",
            "--seed",
            "18446744073709551615",
        ])
        .unwrap();
        assert_eq!(
            (o.cable_delay_ns, o.cable_jitter_ns, o.cable_loss),
            (120, 15, 0.01)
        );
        assert_eq!(
            (o.stamp_quantum_ns, o.stamp_jitter_ns, o.seed),
            (8, 4, Some(u64::MAX))
        );
        assert_eq!(parse(&["--cable-loss", "0"]).unwrap().cable_loss, 0.0);
    }

    #[test]
    fn truth_needs_emulate() {
        let o = parse(&["--emulate", "i226", "--truth", "/tmp/t"]).unwrap();
        assert_eq!(o.truth, Some(PathBuf::from("/tmp/t")));
        assert_eq!(parse(&["--emulate", "i225"]).unwrap().truth, None);
        let e = parse(&["--truth", "/tmp/t"]).unwrap_err();
        assert!(e.contains("--truth needs --emulate"), "{e}");
        assert!(parse(&["--emulate", "i225", "--truth"]).is_err());
    }

    #[test]
    fn devhost_and_cold_start() {
        let o = parse(&["--devhost", "/run/nic.sock", "--cold-start"]).unwrap();
        assert_eq!(o.devhost, Some(PathBuf::from("/run/nic.sock")));
        assert!(o.cold_start);
        assert!(!parse(&[]).unwrap().cold_start);
        let e = parse(&["--devhost", "/a", "--emulate", "i225"]).unwrap_err();
        assert!(e.contains("--devhost excludes"), "{e}");
    }

    #[test]
    fn channel_access_options() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.allow_uid, o.allow_gid), (None, None));
        let o = parse(&["--allow-uid", "1000", "--allow-gid", "4242"]).unwrap();
        assert_eq!((o.allow_uid, o.allow_gid), (Some(1000), Some(4242)));
        for args in [
            &["--allow-uid", "-1"][..],
            &["--allow-uid", "ptpd"],
            &["--allow-gid", "4294967296"],
            &["--allow-uid"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
        let e = parse(&["--allow-uid", "1", "--allow-uid", "2"]).unwrap_err();
        assert!(e.contains("once"), "{e}");
        assert!(parse(&["--allow-gid", "1", "--allow-gid", "2"]).is_err());
    }

    #[test]
    fn noise_options_are_range_checked() {
        for (args, msg) in [
            (&["--cable-loss", "1"][..], "--cable-loss must be"),
            (&["--cable-loss", "-0.1"], "--cable-loss must be"),
            (&["--cable-loss", "NaN"], "--cable-loss must be"),
            (
                &["--cable-jitter-ns", "1000000001"],
                "--cable-jitter-ns must be",
            ),
            (
                &["--stamp-quantum-ns", "1000001"],
                "--stamp-quantum-ns must be",
            ),
            (
                &["--stamp-jitter-ns", "1000001"],
                "--stamp-jitter-ns must be",
            ),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(msg), "{args:?}: {e}");
        }
        for args in [
            &["--cable-loss", "often"][..],
            &["--stamp-jitter-ns", "-1"],
            &["--seed", "-1"],
            &["--seed"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
