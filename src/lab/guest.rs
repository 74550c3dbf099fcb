//! A lab host that is a Linux guest (`--linux-igc I`): the Debian kernel's igc driver and
//! linuxptp's `ptp4l -H` in a VM ([`crate::vm`]) whose NIC is our i225 model, served by
//! `ptplab devhost` with the same cable and noise options igcd gets, so it shares the lab's
//! cable with igcd + ptpd hosts. Its status comes from `pmc` and `phc_ctl` in the guest; its
//! true offset from the model's ground-truth record, like any other host.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use ptp_ipc::msg::{ClockStatus, PortState};

use super::HostPaths;
use crate::vm::{Vm, VmConfig};

/// Longest wait for one guest command.
const CMD: Duration = Duration::from_secs(30);

/// A running guest host.
pub struct GuestHost {
    vm: Mutex<Vm>,
    /// EUI-64 clock identity from the guest NIC's MAC.
    pub identity: [u8; 8],
}

/// How the guest's ptp4l runs, from the lab's configuration.
pub struct Ptp4lArgs<'a> {
    /// `priority1` (the lab's even hosts are the better masters).
    pub priority1: u8,
    /// `L2` or `UDPv4`.
    pub transport: &'a str,
    /// `E2E` or `P2P`.
    pub delay_mechanism: &'a str,
    /// logSyncInterval (and delay request interval).
    pub sync_interval: i8,
    /// The guest's IPv4 address for UDPv4 (`10.0.<cable>.<end>/24`).
    pub addr: String,
}

impl Ptp4lArgs<'_> {
    /// The ptp4l command line. tx_timestamp_timeout 50 ms: the guest takes igc's interrupt from
    /// its 4 ms timer tick (irqpoll), so a TX stamp arrives up to ~4 ms plus a work item late.
    fn command(&self) -> String {
        let transport = if self.transport == "UDPv4" {
            "-4"
        } else {
            "-2"
        };
        let delay = if self.delay_mechanism == "P2P" {
            "-P"
        } else {
            "-E"
        };
        format!(
            "ptp4l -i eth0 -H -m {transport} {delay} --priority1 {} --tx_timestamp_timeout 50 \
             --logSyncInterval {s} --logMinDelayReqInterval {s} --logMinPdelayReqInterval {s} \
             --logAnnounceInterval -1 --announceReceiptTimeout 3 > /tmp/ptp4l.log 2>&1 &",
            self.priority1,
            s = self.sync_interval
        )
    }
}

fn run(vm: &mut Vm, cmd: &str) -> Result<String, String> {
    let out = vm.run(cmd, CMD).map_err(|e| format!("guest: {cmd}: {e}"))?;
    if out.rc != 0 {
        return Err(format!("guest: {cmd}: exit {}: {}", out.rc, out.text()));
    }
    Ok(out.text())
}

impl GuestHost {
    /// Boots the guest with its device host (`devhost_args`: the cable, noise and oscillator
    /// igcd would get, `--truth` added here), brings eth0 up and starts ptp4l.
    pub fn start(
        exe: &Path,
        paths: &HostPaths,
        devhost_args: &[String],
        ptp4l: &Ptp4lArgs<'_>,
    ) -> Result<Self, String> {
        let mut args: Vec<OsString> = devhost_args.iter().map(OsString::from).collect();
        args.extend(["--truth".into(), paths.truth.clone().into_os_string()]);
        let cfg = VmConfig {
            devhost: vec![exe.into(), "devhost".into()],
            devhost_args: args,
            run_dir: paths.dir.join("vm"),
            cache_dir: paths.dir.join("..").join("vm-cache"),
            boot_timeout: Duration::from_secs(120),
        };
        let mut vm = Vm::boot(&cfg).map_err(|e| e.to_string())?;
        if ptp4l.transport == "UDPv4" {
            run(&mut vm, &format!("ip addr add {} dev eth0", ptp4l.addr))?;
        }
        let up = "ip link set eth0 up; for i in $(seq 150); do \
                  [ $(cat /sys/class/net/eth0/operstate) = up ] && break; sleep 0.2; done; \
                  cat /sys/class/net/eth0/operstate";
        let state = run(&mut vm, up)?;
        if state.trim() != "up" {
            return Err(format!("guest: eth0 stayed {}", state.trim()));
        }
        let mac = run(&mut vm, "cat /sys/class/net/eth0/address")?;
        let identity = eui64(&mac).ok_or_else(|| format!("guest: bad MAC {mac:?}"))?;
        run(&mut vm, &ptp4l.command())?;
        Ok(Self {
            vm: Mutex::new(vm),
            identity,
        })
    }

    fn run(&self, cmd: &str) -> Result<String, String> {
        let mut vm = self.vm.lock().unwrap_or_else(|e| e.into_inner());
        run(&mut vm, cmd)
    }

    /// Steps the guest's PHC by `ns` (phc_ctl adj, through igc).
    pub fn adj(&self, ns: i64) -> Result<(), String> {
        self.run(&format!(
            "phc_ctl /dev/ptp0 -q -- adj {:.9}",
            ns as f64 * 1e-9
        ))
        .map(|_| ())
    }

    /// ptp4l's view as a [`ClockStatus`]: port state, offset and path delay, grandmaster and
    /// steps removed from pmc; the PHC's frequency offset from phc_ctl.
    pub fn status(&self) -> Result<ClockStatus, String> {
        let text = self.run(
            "pmc -u -b 0 'GET PORT_DATA_SET' 'GET CURRENT_DATA_SET' 'GET PARENT_DATA_SET'; \
             phc_ctl /dev/ptp0 -q -- freq",
        )?;
        parse_status(&text)
    }

    /// Powers the guest off; its device host's report (src/devhost.rs), if it wrote one.
    pub fn shutdown(self) -> Option<serde_json::Value> {
        self.vm
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown()
    }

    /// The guest's ptp4l log (for the lab's logs).
    pub fn log(&self) -> String {
        self.run("tail -n 40 /tmp/ptp4l.log").unwrap_or_else(|e| e)
    }
}

fn eui64(mac: &str) -> Option<[u8; 8]> {
    let b: Vec<u8> = mac
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).ok())
        .collect::<Option<_>>()?;
    let m: [u8; 6] = b.try_into().ok()?;
    Some(ptpd::ptp::config::eui64_from_mac(m))
}

/// `021b21.fffe.0037c2` → the identity bytes.
fn parse_identity(s: &str) -> Option<[u8; 8]> {
    let hex: String = s.chars().filter(|c| *c != '.').collect();
    let v: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

fn port_state(s: &str) -> PortState {
    match s {
        "FAULTY" => PortState::Faulty,
        "DISABLED" => PortState::Disabled,
        "LISTENING" => PortState::Listening,
        "PRE_MASTER" => PortState::PreMaster,
        "MASTER" => PortState::Master,
        "PASSIVE" => PortState::Passive,
        "UNCALIBRATED" => PortState::Uncalibrated,
        "SLAVE" => PortState::Slave,
        _ => PortState::Initializing,
    }
}

/// Reads pmc's `key value` lines and phc_ctl's "frequency offset is X ppb" line. An answer that
/// lacks any of them (pmc times out on a busy guest and prints nothing for that GET) is an error,
/// not a status with defaults: a default port state (INITIALIZING) would count as a real loss of
/// lock, and a default offset or frequency as a real reading.
fn parse_status(text: &str) -> Result<ClockStatus, String> {
    let mut st = ClockStatus {
        driver_up: true,
        link_up: true,
        ..ClockStatus::default()
    };
    let num = |v: &str| v.parse::<f64>().map_or(0, |x| x.round() as i64);
    let mut seen = [false; 4]; // portState, offsetFromMaster, grandmasterIdentity, frequency
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        match k {
            "portState" => {
                st.port_state = port_state(v);
                seen[0] = true;
            }
            "offsetFromMaster" => {
                st.offset_ns = num(v);
                seen[1] = true;
            }
            "meanPathDelay" => st.mean_path_delay_ns = num(v),
            "stepsRemoved" => st.steps_removed = v.parse().unwrap_or(0),
            "grandmasterIdentity" => {
                st.grandmaster = parse_identity(v).unwrap_or_default();
                seen[2] = true;
            }
            _ => {}
        }
        if let Some(rest) = line.split("frequency offset is ").nth(1) {
            let ppb: f64 = rest.trim_end_matches("ppb").trim().parse().unwrap_or(0.0);
            st.freq_scaled_ppm = (ppb * 65.536).round() as i64;
            seen[3] = true;
        }
    }
    let names = [
        "PORT_DATA_SET",
        "CURRENT_DATA_SET",
        "PARENT_DATA_SET",
        "phc_ctl freq",
    ];
    let missing: Vec<&str> = names
        .iter()
        .zip(seen)
        .filter(|(_, s)| !s)
        .map(|(n, _)| *n)
        .collect();
    if missing.is_empty() {
        Ok(st)
    } else {
        Err(format!("no answer for {} in: {text:?}", missing.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pmc_and_phc_ctl() {
        let text = "sending: GET PORT_DATA_SET\n\
            \t021b21.fffe.0037c2-1 seq 0 RESPONSE MANAGEMENT PORT_DATA_SET\n\
            \t\tportIdentity            021b21.fffe.0037c2-1\n\
            \t\tportState               SLAVE\n\
            \t\tstepsRemoved     1\n\
            \t\toffsetFromMaster -12.0\n\
            \t\tmeanPathDelay    50.0\n\
            \t\tgrandmasterIdentity              021b21.fffe.004b97\n\
            phc_ctl[3.9]: clock frequency offset is -20012.5ppb\n";
        let st = parse_status(text).unwrap();
        assert_eq!(st.port_state, PortState::Slave);
        assert_eq!(
            (st.offset_ns, st.mean_path_delay_ns, st.steps_removed),
            (-12, 50, 1)
        );
        assert_eq!(
            st.grandmaster,
            [0x02, 0x1b, 0x21, 0xff, 0xfe, 0x00, 0x4b, 0x97]
        );
        assert_eq!(st.freq_scaled_ppm, (-20012.5f64 * 65.536).round() as i64);
        assert_eq!(eui64("02:1b:21:00:4b:97"), Some(st.grandmaster));
    }

    #[test]
    fn a_missing_pmc_answer_is_an_error_not_a_lost_lock() {
        // pmc printed the request but no PORT_DATA_SET answer (it timed out).
        let text = "sending: GET PORT_DATA_SET\n\
            \t\toffsetFromMaster -12.0\n\
            \t\tgrandmasterIdentity              021b21.fffe.004b97\n\
            phc_ctl[3.9]: clock frequency offset is -20012.5ppb\n";
        let e = parse_status(text).unwrap_err();
        assert!(e.contains("PORT_DATA_SET"), "{e}");
        assert!(parse_status("").is_err());
    }
}
