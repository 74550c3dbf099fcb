//! Command line of igcd.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::Error;

pub const USAGE: &str = "\
usage: igcd [options]
  --emulate i225|i226     run on an emulated NIC (host builds)
  --channel PATH          driver channel socket ptpd connects to (required on Linux hosts)
  --clock-page PATH       publish the clock page at PATH
  --name NAME             name used in logs
  --osc-ppm PPM           emulated oscillator frequency error (default 0)
  --link-wait-ms MS       how long bring-up waits for link (default 2000)
  --tx-ts-sets N          TX timestamp register sets to use, 1..4 (default 4)
  --tx-ts-timeout-ms MS   free a TX timestamp set after MS without a stamp (default 1000)
  --help
";

/// Which model to emulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    I225,
    I226,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub emulate: Option<Model>,
    pub channel: Option<PathBuf>,
    pub clock_page: Option<PathBuf>,
    pub name: String,
    pub osc_ppm: f64,
    pub link_wait: Duration,
    pub tx_ts_sets: u8,
    pub tx_ts_timeout: Duration,
}

impl Options {
    /// Parses arguments; `Ok(None)` means `--help`.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Self>, Error> {
        use lexopt::prelude::*;
        let mut o = Options {
            emulate: None,
            channel: None,
            clock_page: None,
            name: String::new(),
            osc_ppm: 0.0,
            link_wait: Duration::from_millis(2000),
            tx_ts_sets: 4,
            tx_ts_timeout: Duration::from_millis(1000),
        };
        let mut p = lexopt::Parser::from_args(args);
        let bad = |e: lexopt::Error| Error::Usage(e.to_string());
        while let Some(arg) = p.next().map_err(bad)? {
            match arg {
                Long("emulate") => {
                    o.emulate = Some(
                        match p.value().map_err(bad)?.string().map_err(bad)?.as_str() {
                            "i225" => Model::I225,
                            "i226" => Model::I226,
                            other => return Err(Error::Usage(format!("unknown model {other:?}"))),
                        },
                    )
                }
                Long("channel") => o.channel = Some(p.value().map_err(bad)?.into()),
                Long("clock-page") => o.clock_page = Some(p.value().map_err(bad)?.into()),
                Long("name") => o.name = p.value().map_err(bad)?.string().map_err(bad)?,
                Long("osc-ppm") => o.osc_ppm = p.value().map_err(bad)?.parse().map_err(bad)?,
                Long("link-wait-ms") => {
                    o.link_wait =
                        Duration::from_millis(p.value().map_err(bad)?.parse().map_err(bad)?)
                }
                Long("tx-ts-sets") => {
                    o.tx_ts_sets = p.value().map_err(bad)?.parse().map_err(bad)?;
                    if !(1..=4).contains(&o.tx_ts_sets) {
                        return Err(Error::Usage("--tx-ts-sets must be 1..=4".into()));
                    }
                }
                Long("tx-ts-timeout-ms") => {
                    let ms: u64 = p.value().map_err(bad)?.parse().map_err(bad)?;
                    if !(1..=600_000).contains(&ms) {
                        return Err(Error::Usage("--tx-ts-timeout-ms must be 1..=600000".into()));
                    }
                    o.tx_ts_timeout = Duration::from_millis(ms);
                }
                Long("help") | Short('h') => return Ok(None),
                _ => return Err(bad(arg.unexpected())),
            }
        }
        if !o.osc_ppm.is_finite() || o.osc_ppm.abs() > 1000.0 {
            return Err(Error::Usage("--osc-ppm must be within ±1000".into()));
        }
        Ok(Some(o))
    }
}

/// Builds the emulated PCI function for `model`, with its model thread running in real time.
#[cfg(feature = "emulate")]
pub fn emulated_function(
    model: Model,
    opts: &Options,
) -> ptp_pci::emulated::EmuFunction<ptp_emu::igc::I225> {
    use ptp_emu::clock::HostClock;
    use ptp_emu::igc::{I225, I225Config};

    // A locally administered MAC derived from the process id, so two emulated hosts differ.
    let pid = std::process::id();
    let mac = [
        0x02,
        0x1b,
        0x21,
        (pid >> 16) as u8,
        (pid >> 8) as u8,
        pid as u8,
    ];
    let mut cfg = match model {
        Model::I225 => I225Config::i225(HostClock::new().source()),
        Model::I226 => I225Config::i226(HostClock::new().source()),
    };
    cfg.mac = mac;
    cfg.osc_error_ppb = (opts.osc_ppm * 1000.0).round() as i64;
    let name = if opts.name.is_empty() {
        format!("{model:?}").to_lowercase()
    } else {
        opts.name.clone()
    };
    let mut f = ptp_pci::emulated::EmuFunction::new(I225::new(cfg), name);
    f.start_model_thread(Duration::from_millis(10));
    f
}
