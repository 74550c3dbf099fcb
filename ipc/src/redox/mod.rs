//! Redox helpers shared by the daemons (shared/reference/redox-platform.md): readiness
//! notification towards init or pcid-spawner (§9), and bounded waits on the time scheme (§12).

pub mod daemon;
pub mod timer;
