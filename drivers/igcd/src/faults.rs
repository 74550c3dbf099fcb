//! Fault injection into a running igcd's emulated i225 (`--emu-faults PATH`, Linux host builds
//! with `--emulate` only): the lab and the fault tests reach the model while the driver runs on
//! it. The production driver never sees this: it is a thread beside the daemon that touches the
//! model through [`ptp_pci::emulated::EmuControl`], as a cable or a broken part would.
//!
//! The socket is SOCK_SEQPACKET, mode 0600; a peer that is neither root nor the socket's owner
//! is dropped at accept. One text command per message, one reply per command (`ok` plus
//! `key=value` fields, or `error: …`):
//!
//! | command | the model |
//! |---|---|
//! | `drop-tx-stamps N` | the next N TX stamp requests latch nothing (the frames still leave) |
//! | `stick-txtt SET` | TXTT_SET reads as set and survives releasing reads; new stamps into the set are lost |
//! | `clear-txtt SET` | ends it: TXTT_SET clear, the set latches again |
//! | `drop-ts-irqs N` | the next N time-sync interrupt edges send no MSI-X message (ICR.TS still shows) |
//! | `link down` / `link up` | cable pulled / plugged: STATUS.LU follows and ICR.LSC is raised (§10, the link-status-change cause) |
//! | `stats` | `latched= lost= dropped= stuck_reads= ts_irqs_dropped= per_set=a,b,c,d link=up\|down link_changes= port_resets= datapath_writes= tx_frames= rx_frames= rx_dropped=` |
//!
//! `datapath_writes` counts the writes to the registers that reset or re-arm the link and the
//! queue-0 rings (CTRL, RCTL, TCTL, RXDCTL/TXDCTL, the ring bases and lengths): what a reconfiguration
//! must not touch (seed 003). SRRCTL is not among them: its TIMESTAMP bit is how RX stamps in
//! the buffer are switched (Linux's igc sets the same bit when it enables RX timestamps);
//! the buffer size in it stays. `rx_dropped` sums every RX drop the model counts
//! (no descriptor, RX disabled or link down, too big, runt, address filter, DMA error).

use std::path::Path;
use std::time::Duration;

use ptp_emu::igc::I225;
use ptp_ipc::transport::{SeqpacketConn, SeqpacketListener, SocketAccess, Transport};
use ptp_pci::emulated::{DeviceHost, EmuControl};

/// One fault command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultCommand {
    DropTxStamps(u64),
    StickTxtt(usize),
    ClearTxtt(usize),
    DropTsIrqs(u64),
    Link(bool),
    Stats,
}

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    #[error("unknown command {0:?}")]
    Unknown(String),
    #[error("{0}: bad or missing argument")]
    BadArgument(&'static str),
    #[error("TX timestamp set {0} does not exist (0..=3)")]
    NoSuchSet(usize),
}

impl std::str::FromStr for FaultCommand {
    type Err = FaultError;
    fn from_str(s: &str) -> Result<Self, FaultError> {
        let mut w = s.split_whitespace();
        let verb = w.next().unwrap_or("");
        let arg = w.next();
        if w.next().is_some() {
            return Err(FaultError::BadArgument("too many arguments"));
        }
        let num = |what: &'static str| -> Result<u64, FaultError> {
            arg.and_then(|a| a.parse().ok())
                .ok_or(FaultError::BadArgument(what))
        };
        let set = |what: &'static str| -> Result<usize, FaultError> {
            let n = num(what)? as usize;
            if n < ptp_emu::igc::TX_STAMP_SETS {
                Ok(n)
            } else {
                Err(FaultError::NoSuchSet(n))
            }
        };
        Ok(match verb {
            "drop-tx-stamps" => Self::DropTxStamps(num("drop-tx-stamps")?),
            "stick-txtt" => Self::StickTxtt(set("stick-txtt")?),
            "clear-txtt" => Self::ClearTxtt(set("clear-txtt")?),
            "drop-ts-irqs" => Self::DropTsIrqs(num("drop-ts-irqs")?),
            "link" => match arg {
                Some("down") => Self::Link(false),
                Some("up") => Self::Link(true),
                _ => return Err(FaultError::BadArgument("link (up|down)")),
            },
            "stats" if arg.is_none() => Self::Stats,
            _ => return Err(FaultError::Unknown(s.trim().to_string())),
        })
    }
}

/// Applies `cmd` to the model; the reply's fields (empty but for `stats`).
pub fn apply(nic: &mut I225, host: &mut dyn DeviceHost, cmd: FaultCommand) -> String {
    match cmd {
        FaultCommand::DropTxStamps(n) => nic.drop_tx_stamps(n),
        FaultCommand::StickTxtt(s) => nic.stick_txtt(s, None),
        FaultCommand::ClearTxtt(s) => nic.clear_stuck_txtt(s),
        FaultCommand::DropTsIrqs(n) => nic.drop_ts_interrupts(n),
        FaultCommand::Link(up) => nic.set_cable(up, host),
        FaultCommand::Stats => {
            let st = nic.stats();
            let per: Vec<String> = nic
                .tx_stamps_latched_per_set()
                .iter()
                .map(u64::to_string)
                .collect();
            return format!(
                "latched={} lost={} dropped={} stuck_reads={} ts_irqs_dropped={} per_set={} \
                 link={} link_changes={} port_resets={} datapath_writes={} tx_frames={} \
                 rx_frames={} rx_dropped={}",
                st.tx_stamps_latched,
                st.tx_stamps_lost,
                st.tx_stamps_dropped,
                st.txtt_stuck_reads,
                st.ts_irqs_dropped,
                per.join(","),
                if nic.link_up() { "up" } else { "down" },
                nic.link_changes(),
                nic.port_resets(),
                datapath_writes(nic),
                st.tx_frames,
                st.rx_frames,
                st.rx_missed
                    + st.rx_not_ready
                    + st.rx_oversize
                    + st.rx_runt
                    + st.rx_filtered
                    + st.rx_dma_errors,
            );
        }
    }
    String::new()
}

/// Writes to the registers that reset or re-arm the link and queue 0's rings (not SRRCTL, the
/// RX timestamp switch).
fn datapath_writes(nic: &I225) -> u64 {
    use intel_regs::igc::*;
    [
        CTRL,
        RCTL,
        TCTL,
        rxdctl(0),
        txdctl(0),
        rdbal(0),
        rdbah(0),
        rdlen(0),
        tdbal(0),
        tdbah(0),
        tdlen(0),
    ]
    .into_iter()
    .map(|r| nic.writes(r))
    .sum()
}

/// Binds the fault socket at `path` and serves it on a thread of its own for the life of the
/// process.
pub fn serve(path: &Path, nic: EmuControl<I225>) -> Result<(), crate::Error> {
    let listener = SeqpacketListener::bind_with(path, SocketAccess::OWNER_ONLY)?;
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(path)
            .map_err(|e| crate::Error::Other(format!("{}: {e}", path.display())))?,
    );
    log::warn!(
        "fault injection into the emulated NIC served at {} (--emu-faults)",
        path.display()
    );
    std::thread::Builder::new()
        .name("emu-faults".into())
        .spawn(move || {
            loop {
                match listener.accept(None) {
                    Ok((conn, cred)) if cred.uid == 0 || cred.uid == owner => {
                        session(&conn, IDLE, |cmd| {
                            nic.with_device_host(|d, h| apply(d, h, cmd))
                        })
                    }
                    Ok((_, cred)) => log::warn!("emu-faults: uid {} refused", cred.uid),
                    Err(e) => {
                        log::error!("emu-faults: {e}; no more fault injection");
                        return;
                    }
                }
            }
        })
        .map_err(|e| crate::Error::Other(format!("emu-faults thread: {e}")))?;
    Ok(())
}

/// How long a fault client may stay silent before it is dropped: clients are served one at a
/// time, so a silent one would keep every other out (issue 23).
pub const IDLE: Duration = Duration::from_secs(30);

/// Answers one client's commands with `apply` until it hangs up or stays silent for `idle`.
fn session(conn: &SeqpacketConn, idle: Duration, mut apply: impl FnMut(FaultCommand) -> String) {
    let mut buf = Vec::new();
    loop {
        match conn.recv(&mut buf, Some(idle)) {
            Ok(_) => {}
            Err(ptp_ipc::transport::TransportError::Timeout) => {
                log::warn!("emu-faults: client silent for {idle:?}; dropped");
                return;
            }
            Err(_) => return,
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        let reply = match text.parse::<FaultCommand>() {
            Ok(cmd) => {
                if cmd != FaultCommand::Stats {
                    log::warn!("emu-faults: injecting {cmd:?}");
                }
                let fields = apply(cmd);
                if fields.is_empty() {
                    "ok".to_string()
                } else {
                    format!("ok {fields}")
                }
            }
            Err(e) => format!("error: {e}"),
        };
        if conn
            .send(reply.as_bytes(), Some(Duration::from_secs(1)))
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that connects and says nothing is dropped after the idle bound, so the
    /// one-at-a-time service is free again (it waited forever before issue 23); one that talks
    /// is answered.
    #[test]
    fn a_silent_fault_client_is_dropped_after_the_idle_bound() {
        let (server, client) = SeqpacketConn::pair().unwrap();
        let idle = Duration::from_millis(100);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            session(&server, idle, |_| "applied".into());
            let _ = tx.send(());
        });
        client.send(b"stats", Some(Duration::from_secs(1))).unwrap();
        let mut buf = Vec::new();
        client.recv(&mut buf, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(buf, b"ok applied");
        // Then silence: the session ends, bounded well beyond `idle`.
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "a silent client kept the fault session for 10 s (idle bound {idle:?})"
        );
    }

    #[test]
    fn commands_parse_and_bad_ones_are_typed_errors() {
        let ok = [
            ("drop-tx-stamps 3", FaultCommand::DropTxStamps(3)),
            ("stick-txtt 0", FaultCommand::StickTxtt(0)),
            ("clear-txtt 3", FaultCommand::ClearTxtt(3)),
            ("drop-ts-irqs 20", FaultCommand::DropTsIrqs(20)),
            ("link down", FaultCommand::Link(false)),
            (" link  up ", FaultCommand::Link(true)),
            ("stats", FaultCommand::Stats),
        ];
        for (s, c) in ok {
            assert_eq!(s.parse::<FaultCommand>(), Ok(c), "{s:?}");
        }
        assert_eq!(
            "stick-txtt 4".parse::<FaultCommand>(),
            Err(FaultError::NoSuchSet(4))
        );
        for bad in [
            "",
            "drop-tx-stamps",
            "drop-tx-stamps -1",
            "link sideways",
            "stats now",
            "reboot",
            "drop-ts-irqs 1 2",
        ] {
            assert!(bad.parse::<FaultCommand>().is_err(), "{bad:?} accepted");
        }
    }
}
