//! `ptplab devhost`: the emulated i225 served to a QEMU guest as a process of its own.
//!
//! ```text
//! ptplab devhost (--socket-fd N | --listen PATH) [--link-speed 10|100|1000|2500] [--report PATH]
//!                [--emulate i225|i226|i210|i211|i350|82576] [the driver's emulation options: --wire, --cable-delay-ns,
//!                 --cable-jitter-ns, --cable-loss, --stamp-quantum-ns, --stamp-jitter-ns,
//!                 --seed, --osc-ppm, --truth, --name] [--allow-uid UID] [--allow-gid GID]
//! ```
//! `N` is this process's end of the stream socket whose other end QEMU holds as
//! `-device x-pci-proxy-dev,fd=…`. The model is built exactly as `igcd --emulate` builds it
//! (same options, same cable, same ground-truth record), so a VM's NIC joins the lab's cable
//! like any igcd host; an igb part (`--emulate i210`, ...) is built as `igbd --emulate` builds
//! it, so a guest's Linux igb runs on our i210 (tests/vm_linux_tools.rs). With `--listen PATH` it serves drivers instead (`igcd --devhost PATH`),
//! one after another: a driver that dies leaves the model, its PHC, its cable and its truth
//! record running, and the next driver attaches to it (the lab's `--nic-process`).
//! Serving ends when QEMU closes the socket (not with --listen) or on SIGTERM/SIGINT; then the
//! report (JSON) is written: the proxy counters, the model's data-path counters, every BAR0
//! offset the guest touched, every access to an offset the model does not implement, and
//! under `not_carried_out` every frame the model dropped or sent without its offload, by
//! reason (all 0 in a healthy run).
//!
//! Who may drive the model (`--listen`): whoever connects can reset it, steer its PHC and
//! have it DMA into memory of theirs, so the rule is igcd's for its driver channel — root,
//! this process's uid, and `--allow-uid`/`--allow-gid`. The socket file is created at its final
//! mode whatever the umask (0600, or 0660 with group GID; owner UID if given), and each
//! connection's SO_PEERCRED/SO_PEERGROUPS is checked at accept: anyone else is closed unserved
//! (logged, at most once a second). An admitted driver must set up within 2 s and is dropped
//! after 10 s of silence ([`ServerOptions`]), so no peer can hold the one-client service.

use crate::signals::{StopFlag, stop_flag, stop_on};
use std::ffi::OsString;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use intel_common::daemon::access::ChannelAccess;
use ptp_ipc::transport::sockfile::{self, SocketFile};

use ptp_emu::igb::Igb;
use ptp_emu::igc::{BAR0_LEN, I225, LinkSpeed};
use ptp_emu::proxy::{ServeStats, ServedDevice, Server, ServerOptions};
use ptp_emu::{NicPort, NicStats};

/// Set by SIGTERM/SIGINT; the serving loop checks it after every wait.
static STOP: StopFlag = stop_flag();

/// The device host's own options; everything else goes to igcd's option parser.
#[derive(Debug)]
struct DevhostArgs {
    socket_fd: i32,
    listen: Option<PathBuf>,
    link_speed: Option<LinkSpeed>,
    report: Option<PathBuf>,
    igcd: Vec<OsString>,
}

const USAGE: &str = "usage: ptplab devhost (--socket-fd N | --listen PATH) [--link-speed 10|100|1000|2500] \
[--report PATH] [igcd/igbd --emulate options: --emulate i225|i226|i210|i211|i350|82576, --wire, --cable-*, --stamp-*, --seed, --osc-ppm, --truth, --name] \
[--allow-uid UID] [--allow-gid GID]";

fn parse_speed(s: &str) -> Result<LinkSpeed, String> {
    Ok(match s {
        "10" => LinkSpeed::Mbps10,
        "100" => LinkSpeed::Mbps100,
        "1000" => LinkSpeed::Mbps1000,
        "2500" => LinkSpeed::Mbps2500,
        _ => return Err(format!("bad --link-speed {s:?} (10, 100, 1000, 2500)")),
    })
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<DevhostArgs, String> {
    let mut it = args.into_iter();
    let mut out = DevhostArgs {
        socket_fd: -1,
        listen: None,
        link_speed: None,
        report: None,
        igcd: Vec::new(),
    };
    let mut emulate = false;
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.into_string().ok())
                .ok_or(format!("{name} needs a value"))
        };
        match a.to_str() {
            Some("--socket-fd") => {
                let v = value("--socket-fd")?;
                out.socket_fd = v.parse().map_err(|_| format!("bad --socket-fd {v:?}"))?;
            }
            Some("--listen") => out.listen = Some(value("--listen")?.into()),
            Some("--link-speed") => out.link_speed = Some(parse_speed(&value("--link-speed")?)?),
            Some("--report") => out.report = Some(value("--report")?.into()),
            Some("--channel" | "--clock-page" | "--poll-irq") => {
                return Err(format!("{a:?} is igcd's, not the device host's"));
            }
            _ => {
                emulate |= a == "--emulate";
                out.igcd.push(a);
            }
        }
    }
    if (out.socket_fd < 0) == out.listen.is_none() {
        return Err("one of --socket-fd and --listen is required".into());
    }
    if !emulate {
        out.igcd.splice(0..0, ["--emulate".into(), "i225".into()]);
    }
    Ok(out)
}

/// Entry point of `ptplab devhost`.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("devhost: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .try_init();
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("devhost: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The models `--emulate` may name that are igb parts (served with igbd's model builder);
/// every other name goes to igcd's.
const IGB_MODELS: &[&str] = &["i210", "i211", "i350", "82576"];

/// The value of `--emulate` in the model's arguments.
fn emulate_name(args: &[OsString]) -> Option<&str> {
    let i = args.iter().position(|a| a == "--emulate")?;
    args.get(i + 1)?.to_str()
}

fn run(a: DevhostArgs) -> Result<(), String> {
    if emulate_name(&a.igcd).is_some_and(|m| IGB_MODELS.contains(&m)) {
        let opts = match igbd::Options::parse(a.igcd.clone()) {
            Ok(Some(o)) => o,
            Ok(None) => return Err(USAGE.into()),
            Err(e) => return Err(e.to_string()),
        };
        let model = opts.emulate.ok_or("--emulate is required")?;
        let (nic, name) = igbd::options::emulated_model(model, &opts).map_err(|e| e.to_string())?;
        let access = ChannelAccess::for_this_process(&opts);
        return serve(&a, nic, &name, access);
    }
    let opts = match igcd::Options::parse(a.igcd.clone()) {
        Ok(Some(o)) => o,
        Ok(None) => return Err(USAGE.into()),
        Err(e) => return Err(e.to_string()),
    };
    let model = opts.emulate.ok_or("--emulate is required")?;
    let (nic, name) = igcd::options::emulated_model(model, &opts).map_err(|e| e.to_string())?;
    let access = ChannelAccess::for_this_process(&opts);
    serve(&a, nic, &name, access)
}

/// What the device host needs of a model beyond serving it: its name, its port's counters and
/// link, and its data-path counters, for the log and the report. Both families keep these in
/// their shared port (`ptp_emu::NicPort`).
trait Hosted: ServedDevice {
    fn part_name(&self) -> &'static str;
    fn port(&self) -> &NicPort;
    fn port_mut(&mut self) -> &mut NicPort;
    fn counters(&self) -> NicStats;
}

/// Both families have the same inherent methods under these names.
macro_rules! hosted {
    ($($model:ty),*) => {$(
        impl Hosted for $model {
            fn part_name(&self) -> &'static str {
                <$model>::part_name(self)
            }
            fn port(&self) -> &NicPort {
                self.nic()
            }
            fn port_mut(&mut self) -> &mut NicPort {
                self.nic_mut()
            }
            fn counters(&self) -> NicStats {
                self.stats()
            }
        }
    )*};
}

hosted!(I225, Igb);

/// Serves `nic` to QEMU (`--socket-fd`) or to drivers (`--listen`) until the end, then writes
/// the report.
fn serve<D: Hosted>(
    a: &DevhostArgs,
    mut nic: D,
    name: &str,
    access: ChannelAccess,
) -> Result<(), String> {
    if let Some(s) = a.link_speed {
        nic.port_mut()
            .set_link_speed(s, &mut ptp_emu::host::RecordingHost::new());
    }
    stop_on(&[libc::SIGTERM, libc::SIGINT], &STOP).map_err(|e| format!("signal handlers: {e}"))?;
    let (server, result) = match &a.listen {
        Some(path) => {
            let (listener, _file) = listen(path, &access)?;
            log::info!(
                "{name}: serving {} to drivers at {} ({access} may connect)",
                nic.part_name(),
                path.display()
            );
            let mut server = Server::detached(nic, ServerOptions::default());
            let mut admission = Admission::new(access);
            let r = server.run_listening(&listener, &STOP, &mut |s| admission.admit(s));
            (server, r)
        }
        None => {
            // Safety: the caller hands this process descriptor N as its end of the socket and
            // nothing else in the process uses it; from here the stream owns it.
            let sock = UnixStream::from(unsafe { OwnedFd::from_raw_fd(a.socket_fd) });
            log::info!(
                "{name}: serving {} to QEMU on fd {}",
                nic.part_name(),
                a.socket_fd
            );
            let mut server =
                Server::new(sock, nic, ServerOptions::default()).map_err(|e| e.to_string())?;
            let r = server.run(&STOP);
            (server, r)
        }
    };
    let stats = server.stats();
    log::info!("{name}: stopped: {stats:?}");
    if let Some(p) = &a.report {
        let text = report(&stats, server.device(), server.tx_stamp_latencies()).to_string();
        crate::lab::config_file(p, &text).map_err(|e| format!("--report {e}"))?;
    }
    result.map(|_| ()).map_err(|e| e.to_string())
}

/// Binds `path` at its final owner and mode (`access`), whatever the umask: through a private
/// directory ([`SocketFile::bind_private`]). A stale socket file of an earlier run is removed
/// first, but only if nothing answers there (a live device host is never displaced).
fn listen(path: &Path, access: &ChannelAccess) -> Result<(UnixListener, SocketFile), String> {
    sockfile::remove_stale(path, |p| UnixStream::connect(p).is_ok()).map_err(|e| e.to_string())?;
    let mut listener = None;
    let file = SocketFile::bind_private(path, access.socket_access(), |tmp| {
        listener = Some(UnixListener::bind(tmp)?);
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    let listener = listener.ok_or_else(|| format!("{}: not bound", path.display()))?;
    Ok((listener, file))
}

/// The admission check at accept: SO_PEERCRED (and SO_PEERGROUPS) against igcd's channel rule.
struct Admission {
    access: ChannelAccess,
    /// Refusals not yet logged, and when the last log line was written.
    unlogged: u64,
    last_log: Option<Instant>,
}

/// At most one log line per this interval about refused peers (a flood cannot fill the log).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);

impl Admission {
    fn new(access: ChannelAccess) -> Self {
        Self {
            access,
            unlogged: 0,
            last_log: None,
        }
    }

    fn admit(&mut self, s: &UnixStream) -> bool {
        let cred = match sockfile::peer_cred(s.as_fd()) {
            Ok(c) => c,
            Err(e) => {
                self.refused(format_args!("a peer whose credentials are unknown ({e})"));
                return false;
            }
        };
        let mut gids = sockfile::peer_groups(s.as_fd()).unwrap_or_default();
        gids.push(cred.gid);
        if self.access.permits(cred.uid, &gids) {
            log::info!("proxy: driver pid {} uid {} admitted", cred.pid, cred.uid);
            return true;
        }
        let access = self.access;
        self.refused(format_args!(
            "pid {} uid {} gid {} (only {access} may drive this NIC)",
            cred.pid, cred.uid, cred.gid
        ));
        false
    }

    /// Logs a refusal, rate-limited: the first at once, then at most one line per interval
    /// with the number refused since.
    fn refused(&mut self, who: std::fmt::Arguments<'_>) {
        self.unlogged += 1;
        let now = Instant::now();
        if self
            .last_log
            .is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL)
        {
            return;
        }
        log::warn!(
            "proxy: refused {who}; closed unserved ({} refused since the last such line)",
            self.unlogged
        );
        self.unlogged = 0;
        self.last_log = Some(now);
    }
}

/// The report: proxy counters, model counters, every BAR0 offset the guest touched and the
/// accesses to offsets the model does not implement.
fn report<D: Hosted>(s: &ServeStats, nic: &D, latencies: &[u64]) -> serde_json::Value {
    let port = nic.port();
    let touched: Vec<serde_json::Value> = (0..BAR0_LEN)
        .step_by(4)
        .filter(|&o| port.reads(o) + port.writes(o) > 0)
        .map(|o| serde_json::json!({"offset": o, "reads": port.reads(o), "writes": port.writes(o)}))
        .collect();
    let unimplemented: Vec<serde_json::Value> = port
        .unimplemented_accesses()
        .iter()
        .map(|u| serde_json::json!({"offset": u.offset, "reads": u.reads, "writes": u.writes}))
        .collect();
    let st = nic.counters();
    serde_json::json!({
        "messages": s.messages,
        "cfg_reads": s.cfg_reads,
        "cfg_writes": s.cfg_writes,
        "bar_reads": s.bar_reads,
        "bar_writes": s.bar_writes,
        "bar_misses": s.bar_misses,
        "malformed": s.malformed,
        "intx_edges": s.intx_edges,
        "resets": s.resets,
        "sysmem_syncs": s.sysmem_syncs,
        "dma_faults": s.dma_faults,
        "msix_dropped": s.msix_dropped,
        "msix_pending": s.msix_pending,
        "msi_dropped": s.msi_dropped,
        "bar_unmodelled": s.bar_unmodelled,
        "flrs": s.flrs,
        "peers_refused": s.peers_refused,
        "client_timeouts": s.client_timeouts,
        "ram_refused": s.ram_refused,
        "port_resets": port.port_resets(),
        "tx_frames": st.tx_frames,
        "rx_frames": st.rx_frames,
        "tx_tso_packets": st.tx_tso_packets,
        "tx_tso_segments": st.tx_tso_segments,
        "tx_csum_inserted": st.tx_csum_inserted,
        // Drops a part makes too, not model gaps: frames before the ring is ready, frames for
        // other addresses, frames that found no free descriptor.
        "rx_not_ready": st.rx_not_ready,
        // Frames the PHY looped back (BMCR.LOOPBACK: igb's offline self-test) instead of the wire.
        "tx_loopback": st.tx_loopback,
        "rx_filtered": st.rx_filtered,
        "rx_missed": st.rx_missed,
        "not_carried_out": not_carried_out(&st),
        "tx_stamps_latched": st.tx_stamps_latched,
        "link_up": port.link_up(),
        // The speed STATUS reports (with the link up): a VM test compares it with what the
        // guest asked for (tests/vm_linux_tools.rs).
        "link_speed_mbps": port.link_speed().mbps(),
        // Every valid stamp a TXSTMPH read released, in any set (the model's count): the
        // server's own count follows one release register only (set 0, for the latency), which
        // missed igcd's stamps in sets 1-3 (vm_userspace: 488 counted, igcd had read 491).
        "tx_stamps_delivered": st.tx_stamps_released,
        "tx_stamp_delivery_us": percentiles_us(latencies),
        "touched": touched,
        "unimplemented": unimplemented,
    })
}

/// Every frame the model did not carry out as posted or as it came, by reason: all 0 in a
/// healthy run, so a VM test can assert them (with `unimplemented` for register accesses).
fn not_carried_out(st: &NicStats) -> serde_json::Value {
    serde_json::json!({
        // TX frames dropped: malformed descriptors or buffers, a TSO request the model cannot
        // segment, no wire attached.
        "tx_malformed": st.tx_malformed,
        "tx_no_wire": st.tx_no_wire,
        // Polls at which the TX queue stalled on a descriptor DMA could not read.
        "tx_dma_errors": st.tx_dma_errors,
        // Checksum offloads sent without the checksum (SCTP, offsets outside the frame).
        "tx_csum_skipped": st.tx_csum_skipped,
        // RX frames dropped by the length limits (ROC / RUC) or for an unreachable buffer.
        "rx_oversize": st.rx_oversize,
        "rx_runt": st.rx_runt,
        "rx_dma_errors": st.rx_dma_errors,
    })
}

/// p50, p90, p99 and max of `ns` in µs (null when empty): the TX timestamp delivery latency,
/// from the model latching a stamp to the guest driver reading TXSTMPH_0. An HDR histogram (3
/// significant figures, as tsperf and ptpctl bench); latencies past a minute count as a minute.
fn percentiles_us(ns: &[u64]) -> serde_json::Value {
    const MAX_NS: u64 = 60_000_000_000;
    let Ok(mut h) = hdrhistogram::Histogram::<u64>::new_with_bounds(1, MAX_NS, 3) else {
        return serde_json::Value::Null;
    };
    for &v in ns {
        h.saturating_record(v.max(1));
    }
    if h.is_empty() {
        return serde_json::Value::Null;
    }
    let at = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    serde_json::json!({"n": h.len(), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": h.max() as f64 / 1e3})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<DevhostArgs, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn latency_percentiles() {
        // 1..=100 µs, shuffled: the order of arrival does not matter.
        let ns: Vec<u64> = (1..=100).map(|i| (i * 37 % 101) * 1000).collect();
        let p = percentiles_us(&ns);
        assert_eq!(p["n"].as_u64(), Some(100));
        // Nearest rank, within the histogram's 3 significant figures.
        for (q, want) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0)] {
            let got = p[q].as_f64().unwrap();
            assert!(
                (got - want).abs() <= want * 1e-3,
                "{q}: {got} µs, want {want}"
            );
        }
        assert!(percentiles_us(&[]).is_null());
        // A zero and an absurd latency are recorded, not dropped or a panic.
        let p = percentiles_us(&[0, u64::MAX]);
        assert_eq!(p["n"].as_u64(), Some(2));
        assert!(p["max"].as_f64().unwrap() >= 59.9e6, "{p}");
    }

    #[test]
    fn not_carried_out_names_every_drop_counter() {
        let st = NicStats {
            tx_malformed: 1,
            tx_no_wire: 2,
            tx_dma_errors: 3,
            tx_csum_skipped: 4,
            rx_oversize: 5,
            rx_runt: 6,
            rx_dma_errors: 7,
            ..NicStats::default()
        };
        let v = not_carried_out(&st);
        let got: Vec<(&str, u64)> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, n)| (k.as_str(), n.as_u64().unwrap()))
            .collect();
        let mut want = vec![
            ("tx_malformed", 1),
            ("tx_no_wire", 2),
            ("tx_dma_errors", 3),
            ("tx_csum_skipped", 4),
            ("rx_oversize", 5),
            ("rx_runt", 6),
            ("rx_dma_errors", 7),
        ];
        want.sort();
        let mut got = got;
        got.sort();
        assert_eq!(got, want);
        assert!(
            not_carried_out(&NicStats::default())
                .as_object()
                .unwrap()
                .values()
                .all(|n| n == 0)
        );
    }

    #[test]
    fn devhost_options() {
        let a = p(&[
            "--socket-fd",
            "5",
            "--wire",
            "bind:/x",
            "--link-speed",
            "1000",
        ])
        .unwrap();
        assert_eq!(a.socket_fd, 5);
        assert_eq!(a.link_speed, Some(LinkSpeed::Mbps1000));
        assert_eq!(a.igcd, ["--emulate", "i225", "--wire", "bind:/x"]);
        let a = p(&["--socket-fd", "5", "--emulate", "i226"]).unwrap();
        assert_eq!(a.igcd, ["--emulate", "i226"]);
        assert!(p(&["--wire", "none"]).unwrap_err().contains("--socket-fd"));
        let a = p(&["--listen", "/run/nic.sock", "--wire", "bind:/x"]).unwrap();
        assert_eq!(a.listen, Some(PathBuf::from("/run/nic.sock")));
        assert!(p(&["--listen", "/a", "--socket-fd", "3"]).is_err());
        assert!(p(&["--socket-fd", "3", "--link-speed", "5000"]).is_err());
        assert!(p(&["--socket-fd", "3", "--channel", "/c"]).is_err());
        let a = p(&["--socket-fd", "5", "--emulate", "i210", "--seed", "3"]).unwrap();
        assert_eq!(emulate_name(&a.igcd), Some("i210"));
        assert!(IGB_MODELS.contains(&"i210") && !IGB_MODELS.contains(&"i225"));
        assert_eq!(
            emulate_name(&p(&["--socket-fd", "5"]).unwrap().igcd),
            Some("i225")
        );
    }
}
