//! The lab's supervisor (issue 17, the reincarnation-server idea): a driver daemon or ptpd
//! that dies is started again under a [`RestartPolicy`] (backoff, crash-loop limit), with the
//! reason logged; any other child (a device host, the TAP bridge) dying stops the lab, as a
//! NIC that vanishes would. With `--nic-process` a host's NIC is a device host of its own
//! (`ptplab devhost --listen`), so a restarted igcd finds the model — its PHC, cable and
//! ground-truth record — still running and keeps the clock (warm attach).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ptpd::client::Client;

use super::{Lab, log_file, spawn_igcd, wait_for_file};
use crate::procs::{Backoff, Decision, RestartPolicy, describe_exit};

/// One death the supervisor handled.
#[derive(Debug, Clone)]
pub struct Restart {
    /// The child, `host<i>/<daemon>`.
    pub name: String,
    /// How it ended ([`describe_exit`]).
    pub why: String,
    /// When the supervisor noticed.
    pub died: Instant,
    /// When it was started again (`None` while its backoff runs).
    pub restarted: Option<Instant>,
}

/// Restart state of a lab's daemons.
#[derive(Debug, Default)]
pub struct Supervisor {
    pub policy: RestartPolicy,
    backoff: HashMap<String, Backoff>,
    pending: Vec<(String, Instant)>,
    /// Every death handled, oldest first.
    pub restarts: Vec<Restart>,
}

/// Host index and role of a child name `host<i>/<role>`.
fn split_name(name: &str) -> Option<(u32, &str)> {
    let (host, role) = name.split_once('/')?;
    Some((host.strip_prefix("host")?.parse().ok()?, role))
}

impl Lab {
    /// Where host `i`'s device host listens (`--nic-process`).
    pub fn nic_socket(&self, i: u32) -> PathBuf {
        self.hosts[i as usize].dir.join("nic.sock")
    }

    /// Starts host `i`'s NIC as a device host (`args`: the cable and noise igcd would get),
    /// then igcd on it.
    pub(super) fn start_nic_process(&mut self, i: u32, args: &[String]) -> Result<(), String> {
        let paths = &self.hosts[i as usize];
        super::lab_dir(&paths.dir)?;
        let sock = self.nic_socket(i);
        let _ = std::fs::remove_file(&sock);
        let log = paths.dir.join("nic.log");
        let mut cmd = Command::new(&self.exe);
        cmd.arg("devhost")
            .arg("--listen")
            .arg(&sock)
            .args([
                "--emulate",
                self.cfg.nic_of(i),
                "--name",
                &format!("host{i}"),
            ])
            .arg("--truth")
            .arg(&paths.truth)
            .args(["--osc-ppm", &self.osc_ppm[i as usize].to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log_file(&log)?)
            .stderr(log_file(&log)?);
        self.kids
            .spawn(&format!("host{i}/nic"), cmd)
            .map_err(|e| format!("starting host{i}'s device host: {e}"))?;
        wait_for_file(&sock, Duration::from_secs(10))?;
        self.spawn_driver_on_devhost(i).map(drop)
    }

    /// Starts igcd on host `i`'s device host.
    fn spawn_driver_on_devhost(&mut self, i: u32) -> Result<u32, String> {
        let paths = &self.hosts[i as usize];
        let log = paths.dir.join("igcd.log");
        let mut cmd = Command::new(&self.exe);
        cmd.arg("igcd")
            .arg("--devhost")
            .arg(self.nic_socket(i))
            .args(["--name", &format!("host{i}")])
            .arg("--channel")
            .arg(&paths.channel)
            .arg("--clock-page")
            .arg(&paths.clock_page)
            .stdin(Stdio::null())
            .stdout(log_file(&log)?)
            .stderr(log_file(&log)?);
        self.kids
            .spawn(&format!("host{i}/igcd"), cmd)
            .map_err(|e| format!("starting igcd: {e}"))
    }

    /// Sends `sig` to host `i`'s child `role` (`igcd`, `igbd`, `ptpd`, `nic`); its pid.
    pub fn signal(&mut self, i: u32, role: &str, sig: i32) -> Result<u32, String> {
        self.kids
            .signal(&format!("host{i}/{role}"), sig)
            .map_err(|e| e.to_string())
    }

    /// The pid of host `i`'s child `role`, while it runs.
    pub fn pid(&self, i: u32, role: &str) -> Option<u32> {
        self.kids.pid(&format!("host{i}/{role}"))
    }

    /// One supervision pass, to run every ~100 ms: notes the daemons that died and schedules
    /// their restart (or fails on a crash loop, or on the death of any other child), starts
    /// those whose backoff has run out, and reconnects to restarted ptpds.
    pub fn supervise(&mut self) -> Result<(), String> {
        let now = Instant::now();
        for (name, status) in self.kids.take_exited() {
            let why = describe_exit(&status);
            let Some((i, role @ ("igcd" | "igbd" | "ptpd"))) = split_name(&name) else {
                return Err(format!("{name} exited unexpectedly ({why})"));
            };
            let policy = self.supervisor.policy;
            let b = self.supervisor.backoff.entry(name.clone()).or_default();
            let delay = match b.on_death(&policy, now) {
                Decision::RestartIn(d) => d,
                Decision::GiveUp => {
                    return Err(format!(
                        "{name} {why}, its {}th death within {:?}: a crash loop, not restarted",
                        policy.limit + 1,
                        policy.window
                    ));
                }
            };
            eprintln!("ptplab: {name} {why}; restarting it in {delay:?}");
            if role == "ptpd"
                && let Some(c) = self.clients.get_mut(i as usize)
            {
                *c = None;
            }
            self.supervisor.pending.push((name.clone(), now + delay));
            self.supervisor.restarts.push(Restart {
                name,
                why,
                died: now,
                restarted: None,
            });
        }
        self.restart_due(now)?;
        self.reconnect_clients();
        Ok(())
    }

    /// Starts the children whose backoff ended by `now`.
    fn restart_due(&mut self, now: Instant) -> Result<(), String> {
        let (due, later) = std::mem::take(&mut self.supervisor.pending)
            .into_iter()
            .partition(|(_, at)| *at <= now);
        self.supervisor.pending = later;
        for (name, _) in due {
            let Some((i, role)) = split_name(&name) else {
                continue;
            };
            match role {
                "ptpd" => self.spawn_ptpd(i)?,
                "igcd" if self.cfg.nic_process => {
                    self.spawn_driver_on_devhost(i)?;
                }
                // The NIC lived in the driver: a new model, its PHC started afresh.
                _ => {
                    let (args, nic) = (self.igcd_args(i), self.cfg.nic_of(i).to_string());
                    let osc = self.osc_ppm[i as usize];
                    let p = &self.hosts[i as usize];
                    spawn_igcd(&mut self.kids, &self.exe, p, i, &nic, osc, &args)?;
                }
            }
            eprintln!("ptplab: {name} restarted");
            if let Some(r) = self
                .supervisor
                .restarts
                .iter_mut()
                .rev()
                .find(|r| r.name == name)
            {
                r.restarted = Some(Instant::now());
            }
        }
        Ok(())
    }

    /// Connects to the clock scheme of each running host whose ptpd was restarted.
    fn reconnect_clients(&mut self) {
        for i in 0..self.clients.len() {
            let running = self.identities.get(i).is_some_and(Option::is_some);
            if self.clients[i].is_none() && running && self.guests[i].is_none() {
                self.clients[i] = Client::connect(&self.hosts[i].socket).ok();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split_name;

    #[test]
    fn child_names() {
        assert_eq!(split_name("host12/igcd"), Some((12, "igcd")));
        assert_eq!(split_name("host0/tap-bridge"), Some((0, "tap-bridge")));
        assert_eq!(split_name("ptpd"), None);
        assert_eq!(split_name("hostx/ptpd"), None);
    }
}
