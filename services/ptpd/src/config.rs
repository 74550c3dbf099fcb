//! ptpd's TOML configuration. Keys follow ptp4l's names where one exists.
//!
//! ```toml
//! socket = "/run/redox-ptp/ptp.sock"   # the clock scheme (Linux hosts)
//! privileged_uids = [1000]             # may set/adjust besides root
//! request_timeout_ms = 1000
//!
//! [[clock]]
//! name = "igc0"
//! channel = "/run/redox-ptp/igc0.sock" # the driver channel igcd serves
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse { path: PathBuf, err: toml::de::Error },
    #[error("{0}")]
    Invalid(String),
}

/// One driver whose PHC ptpd serves as a clock.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClockConfig {
    pub name: String,
    /// The driver channel (a SOCK_SEQPACKET path on Linux hosts).
    pub channel: PathBuf,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the clock scheme is served (Linux hosts).
    pub socket: PathBuf,
    /// Uids besides root that may set, step and steer clocks.
    #[serde(default)]
    pub privileged_uids: Vec<u32>,
    /// How long a request to a driver may take before the caller gets Timeout.
    #[serde(default = "default_timeout_ms")]
    pub request_timeout_ms: u64,
    #[serde(default, rename = "clock")]
    pub clocks: Vec<ClockConfig>,
}

fn default_timeout_ms() -> u64 {
    1000
}

impl Config {
    pub fn from_str(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: path.to_owned(),
            err,
        })?;
        c.validate()?;
        Ok(c)
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: path.to_owned(),
            err,
        })?;
        Self::from_str(&text, path)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.clocks.is_empty() {
            return Err(ConfigError::Invalid("no [[clock]] configured".into()));
        }
        if !(1..=60_000).contains(&self.request_timeout_ms) {
            return Err(ConfigError::Invalid(
                "request_timeout_ms must be within 1..=60000".into(),
            ));
        }
        for (i, c) in self.clocks.iter().enumerate() {
            if self.clocks[..i].iter().any(|o| o.name == c.name) {
                return Err(ConfigError::Invalid(format!(
                    "duplicate clock name {:?}",
                    c.name
                )));
            }
        }
        Ok(())
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_config() {
        let c = Config::from_str(
            "socket = \"/tmp/p.sock\"\nprivileged_uids = [7]\n[[clock]]\nname = \"a\"\nchannel = \"/tmp/a.sock\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(c.privileged_uids, vec![7]);
        assert_eq!(c.clocks[0].channel, PathBuf::from("/tmp/a.sock"));
        assert_eq!(c.request_timeout(), Duration::from_secs(1));
    }

    #[test]
    fn rejects_bad_configs() {
        let p = Path::new("t.toml");
        assert!(matches!(
            Config::from_str("socket = \"/x\"\n", p),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            Config::from_str("socket = \"/x\"\nbogus = 1\n", p),
            Err(ConfigError::Parse { .. })
        ));
        let dup = "socket = \"/x\"\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n[[clock]]\nname = \"a\"\nchannel = \"/b\"\n";
        assert!(matches!(
            Config::from_str(dup, p),
            Err(ConfigError::Invalid(_))
        ));
    }
}
