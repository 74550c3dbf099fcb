//! Redox helpers shared by the daemons (shared/reference/redox-platform.md): readiness
//! notification towards init or pcid-spawner (§9), bounded waits on the time scheme (§12), and
//! the handle bookkeeping of scheme servers (§8).

pub mod daemon;
pub mod scheme;
pub mod timer;
