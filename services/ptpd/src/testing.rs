//! Test support for the pmc tests of this crate and of the workspace's system tests (Linux
//! only): how linuxptp's `pmc` is found and asked, and how its output is read.

use std::path::{Path, PathBuf};
use std::process::Command;

/// linuxptp's `pmc`; panics with the package to install when it is missing (the tests that use
/// it fail rather than skip: CI installs linuxptp).
pub fn pmc_path() -> PathBuf {
    ["/usr/sbin/pmc", "/usr/bin/pmc", "/usr/local/sbin/pmc"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("pmc not found: sudo apt-get install -y linuxptp")
}

/// `pmc -u -b 0 -d DOMAIN -s SERVER -i CLIENT CMDS…`, not yet run. `client` is the path pmc
/// binds for the answers (its default under /var/run may not be writable).
pub fn pmc_command(domain: u8, server: &Path, client: &Path, cmds: &[&str]) -> Command {
    let mut c = Command::new(pmc_path());
    c.args(["-u", "-b", "0", "-d"])
        .arg(domain.to_string())
        .arg("-s")
        .arg(server)
        .arg("-i")
        .arg(client)
        .args(cmds);
    c
}

/// Runs [`pmc_command`] and returns pmc's stdout.
pub fn run_pmc(domain: u8, server: &Path, client: &Path, cmds: &[&str]) -> String {
    let out = pmc_command(domain, server, client, cmds)
        .output()
        .expect("running pmc");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The first token after `name` on the first line of pmc's output that starts with it.
pub fn pmc_field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(name)).then(|| it.next()).flatten()
        })
        .unwrap_or_else(|| panic!("no {name} in pmc output:\n{out}"))
}

/// How pmc and ptp4l write a clock identity: `021b21.fffe.0037c2`.
pub fn pmc_identity(id: [u8; 8]) -> String {
    let h: Vec<String> = id.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}.{}.{}",
        h[..3].concat(),
        h[3..5].concat(),
        h[5..].concat()
    )
}
