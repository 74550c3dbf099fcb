//! Typed IPC for redox-ptp (DESIGN.md §2).
//!
//! - [`msg`]: every message type, defined once;
//! - [`wire`]: their versioned little-endian encoding, with total decoders;
//! - [`transport`]: datagram transports (in-process, Unix SOCK_SEQPACKET on Linux hosts, scheme
//!   handles on Redox) behind one trait, and the typed [`transport::Channel`] on top;
//! - [`clockpage`]: the seqlock-protected read-only clock page;
//! - [`ring`] (Unix): shared-memory SPSC ring pairs with signal suppression, a `Transport` for
//!   the hot path;
//! - [`shm`] (Unix): a shared mapping that unmaps itself, and the sealed memfd behind it;
//! - [`time`]: the host clocks the whole project uses;
//! - [`fdpass`] (Linux): descriptors passed with SCM_RIGHTS, each owned on arrival;
//! - [`poll`] (Linux): every bounded wait on a descriptor, to an absolute deadline;
//! - [`readiness`]: which readiness protocol a daemon speaks, decided from its environment;
//! - `redox` (Redox only): readiness towards init/pcid-spawner, time-scheme timers and the
//!   handle table of scheme servers.
pub mod clockpage;
pub mod deadline;
#[cfg(target_os = "linux")]
pub mod fdpass;
pub mod frame;
pub mod msg;
#[cfg(target_os = "linux")]
pub mod poll;
pub mod readiness;
#[cfg(target_os = "redox")]
pub mod redox;
#[cfg(unix)]
pub mod ring;
pub mod rt;
#[cfg(unix)]
pub mod shm;
pub mod sys_context;
#[cfg(target_os = "linux")]
#[doc(hidden)]
pub mod testing;
#[cfg(unix)]
pub mod time;
pub mod transport;
pub mod wire;

pub use msg::*;
pub use wire::{DecodeError, EncodeError, Wire};

#[cfg(test)]
pub(crate) mod testutil {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh directory under the system temp dir, removed on drop. Short, because Unix socket
    /// paths are limited to 107 bytes.
    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new(tag: &str) -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("ptpipc-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("create temp dir");
            TempDir(p)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
