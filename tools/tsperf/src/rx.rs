//! `tsperf --rx`: received-frame throughput through igcd with the RX filter at NONE,
//! PTP_V2_EVENT and ALL, in one run (seed 002: a Microchip driver lost 8 % throughput when
//! stamping every frame).

use crate::Options;

pub fn run(_o: &Options) -> Result<(), String> {
    Err("--rx needs the emulated wire peer; not built yet".into())
}
