//! The wire format of QEMU's `x-pci-proxy-dev` (multi-process QEMU; `qemu-proxy.md`, "Wire
//! format"): a 16-byte header (`i32 cmd`, 4 bytes padding, `u64 size`), then `size` payload
//! bytes; file descriptors ride with the header as SCM_RIGHTS. x86_64 little-endian layout.
//!
//! Decoding is total: any byte string and any number of descriptors give a [`Message`] or a
//! typed [`ProtoError`], never a panic (proptested in `tests.rs`). The decoder is generic over
//! the descriptor type so that tests can feed it plain integers.

/// Header length on the wire.
pub const HEADER_LEN: usize = 16;
/// Largest payload QEMU sends (SYNC_SYSMEM's three arrays of eight `u64`s).
pub const MAX_PAYLOAD: usize = 192;
/// Most descriptors one message carries (SYNC_SYSMEM's RAM regions).
pub const MAX_FDS: usize = 8;

/// Command numbers (`MPQemuCmd`).
pub mod cmd {
    /// Guest RAM layout and its memfds.
    pub const SYNC_SYSMEM: i32 = 0;
    /// A reply carrying one `u64`.
    pub const RET: i32 = 1;
    /// Config space write.
    pub const PCI_CFGWRITE: i32 = 2;
    /// Config space read.
    pub const PCI_CFGREAD: i32 = 3;
    /// BAR write at a guest-physical address.
    pub const BAR_WRITE: i32 = 4;
    /// BAR read at a guest-physical address.
    pub const BAR_READ: i32 = 5;
    /// The INTx eventfd and its resample eventfd.
    pub const SET_IRQFD: i32 = 6;
    /// Device reset.
    pub const DEVICE_RESET: i32 = 7;
}

/// Payload lengths of the fixed-size messages.
const CFG_LEN: usize = 12;
const BAR_LEN: usize = 24;

/// A message the device host cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The header announces more payload than any message has.
    #[error("payload of {0} bytes announced, at most {MAX_PAYLOAD}")]
    PayloadTooLarge(u64),
    /// A command number this protocol does not have (or RET, which only the device sends).
    #[error("unknown or unexpected command {0}")]
    UnknownCommand(i32),
    /// The payload length does not match the command's structure.
    #[error("command {cmd}: payload of {got} bytes, expected {want}")]
    BadLength {
        /// Command number.
        cmd: i32,
        /// Bytes received.
        got: usize,
        /// Bytes the command's structure has.
        want: usize,
    },
    /// The message carries the wrong number of descriptors.
    #[error("command {cmd}: {got} file descriptors, expected {want}")]
    BadFdCount {
        /// Command number.
        cmd: i32,
        /// Descriptors received.
        got: usize,
        /// What the command needs (e.g. "2" or "1..=8").
        want: &'static str,
    },
    /// A RAM region with zero size, a negative file offset or an end past 2^64.
    #[error("SYNC_SYSMEM region {index}: gpa {gpa:#x} size {size:#x} offset {offset}")]
    BadRegion {
        /// Region index.
        index: usize,
        /// Guest-physical start.
        gpa: u64,
        /// Length.
        size: u64,
        /// Offset into its memfd.
        offset: i64,
    },
    /// A config access of a length other than 1, 2 or 4, or outside the 256-byte header.
    #[error("config access at {addr:#x} of {len} bytes")]
    BadConfigAccess {
        /// Config offset.
        addr: u32,
        /// Access length.
        len: i32,
    },
    /// A BAR access of a size other than 1, 2, 4 or 8.
    #[error("BAR access at {addr:#x} of {size} bytes")]
    BadBarAccess {
        /// Guest-physical address.
        addr: u64,
        /// Access size.
        size: u32,
    },
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Command number.
    pub cmd: i32,
    /// Payload length (≤ [`MAX_PAYLOAD`]).
    pub size: usize,
}

/// Decodes a header; the payload size is checked against [`MAX_PAYLOAD`] before anything
/// reads it, so a hostile size cannot make the reader allocate or wait for more.
pub fn decode_header(b: &[u8; HEADER_LEN]) -> Result<Header, ProtoError> {
    let cmd = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let size = u64::from_le_bytes(le8(&b[8..16]));
    if size > MAX_PAYLOAD as u64 {
        return Err(ProtoError::PayloadTooLarge(size));
    }
    Ok(Header {
        cmd,
        size: size as usize,
    })
}

/// One guest RAM region of a SYNC_SYSMEM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RamRegion {
    /// Guest-physical start.
    pub gpa: u64,
    /// Length in bytes (> 0).
    pub size: u64,
    /// Offset of `gpa` in the region's memfd (≥ 0).
    pub offset: u64,
}

/// A request from QEMU.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<F> {
    /// The guest's RAM: region `i` lives in descriptor `i`. No reply.
    SyncSysmem(Vec<(RamRegion, F)>),
    /// Config write of `len` bytes at `addr`. Reply RET.
    CfgWrite {
        /// Config offset.
        addr: u32,
        /// Value (low `len` bytes).
        val: u32,
        /// 1, 2 or 4.
        len: u8,
    },
    /// Config read. Reply RET = value.
    CfgRead {
        /// Config offset.
        addr: u32,
        /// 1, 2 or 4.
        len: u8,
    },
    /// BAR write at guest-physical `addr`. Reply RET.
    BarWrite {
        /// Guest-physical address.
        addr: u64,
        /// Value (low `size` bytes).
        val: u64,
        /// 1, 2, 4 or 8.
        size: u8,
        /// Memory (true) or I/O space.
        memory: bool,
    },
    /// BAR read. Reply RET = value.
    BarRead {
        /// Guest-physical address.
        addr: u64,
        /// 1, 2, 4 or 8.
        size: u8,
        /// Memory (true) or I/O space.
        memory: bool,
    },
    /// The INTx line's eventfd and its resample eventfd. No reply.
    SetIrqfd {
        /// Written to assert the line.
        irq: F,
        /// Signalled when the guest acknowledged a level interrupt (KVM).
        resample: F,
    },
    /// Reset the function. Reply RET.
    DeviceReset,
}

fn le8(b: &[u8]) -> [u8; 8] {
    let mut a = [0; 8];
    a.copy_from_slice(&b[..8]);
    a
}

fn u32_at(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(le8(&p[at..at + 8]))
}

fn want_len(cmd: i32, payload: &[u8], want: usize) -> Result<(), ProtoError> {
    if payload.len() == want {
        Ok(())
    } else {
        Err(ProtoError::BadLength {
            cmd,
            got: payload.len(),
            want,
        })
    }
}

fn want_fds<F>(cmd: i32, fds: &[F], n: usize, want: &'static str) -> Result<(), ProtoError> {
    if fds.len() == n {
        Ok(())
    } else {
        Err(ProtoError::BadFdCount {
            cmd,
            got: fds.len(),
            want,
        })
    }
}

/// Decodes the message with header command `cmd`, payload `payload` and descriptors `fds`.
pub fn decode<F>(cmd: i32, payload: &[u8], fds: Vec<F>) -> Result<Message<F>, ProtoError> {
    match cmd {
        cmd::SYNC_SYSMEM => decode_sysmem(payload, fds),
        cmd::PCI_CFGWRITE | cmd::PCI_CFGREAD => {
            want_len(cmd, payload, CFG_LEN)?;
            want_fds(cmd, &fds, 0, "0")?;
            let addr = u32_at(payload, 0);
            let val = u32_at(payload, 4);
            let len = u32_at(payload, 8) as i32;
            let ok =
                matches!(len, 1 | 2 | 4) && addr.checked_add(len as u32).is_some_and(|e| e <= 256);
            if !ok {
                return Err(ProtoError::BadConfigAccess { addr, len });
            }
            let len = len as u8;
            Ok(if cmd == cmd::PCI_CFGWRITE {
                Message::CfgWrite { addr, val, len }
            } else {
                Message::CfgRead { addr, len }
            })
        }
        cmd::BAR_WRITE | cmd::BAR_READ => {
            want_len(cmd, payload, BAR_LEN)?;
            want_fds(cmd, &fds, 0, "0")?;
            let addr = u64_at(payload, 0);
            let val = u64_at(payload, 8);
            let size = u32_at(payload, 16);
            let memory = payload[20] != 0;
            if !matches!(size, 1 | 2 | 4 | 8) {
                return Err(ProtoError::BadBarAccess { addr, size });
            }
            let size = size as u8;
            Ok(if cmd == cmd::BAR_WRITE {
                Message::BarWrite {
                    addr,
                    val,
                    size,
                    memory,
                }
            } else {
                Message::BarRead { addr, size, memory }
            })
        }
        cmd::SET_IRQFD => {
            want_len(cmd, payload, 0)?;
            want_fds(cmd, &fds, 2, "2")?;
            let mut it = fds.into_iter();
            match (it.next(), it.next()) {
                (Some(irq), Some(resample)) => Ok(Message::SetIrqfd { irq, resample }),
                _ => Err(ProtoError::BadFdCount {
                    cmd,
                    got: 0,
                    want: "2",
                }),
            }
        }
        cmd::DEVICE_RESET => {
            want_len(cmd, payload, 0)?;
            want_fds(cmd, &fds, 0, "0")?;
            Ok(Message::DeviceReset)
        }
        other => Err(ProtoError::UnknownCommand(other)),
    }
}

fn decode_sysmem<F>(payload: &[u8], fds: Vec<F>) -> Result<Message<F>, ProtoError> {
    let cmd = cmd::SYNC_SYSMEM;
    want_len(cmd, payload, MAX_PAYLOAD)?;
    if fds.is_empty() || fds.len() > MAX_FDS {
        return Err(ProtoError::BadFdCount {
            cmd,
            got: fds.len(),
            want: "1..=8",
        });
    }
    let mut out = Vec::with_capacity(fds.len());
    for (index, fd) in fds.into_iter().enumerate() {
        let gpa = u64_at(payload, index * 8);
        let size = u64_at(payload, 64 + index * 8);
        let offset = u64_at(payload, 128 + index * 8) as i64;
        if size == 0 || offset < 0 || gpa.checked_add(size).is_none() {
            return Err(ProtoError::BadRegion {
                index,
                gpa,
                size,
                offset,
            });
        }
        let region = RamRegion {
            gpa,
            size,
            offset: offset as u64,
        };
        out.push((region, fd));
    }
    Ok(Message::SyncSysmem(out))
}

/// Encodes a header.
pub fn encode_header(cmd: i32, size: usize) -> [u8; HEADER_LEN] {
    let mut h = [0; HEADER_LEN];
    h[0..4].copy_from_slice(&cmd.to_le_bytes());
    h[8..16].copy_from_slice(&(size as u64).to_le_bytes());
    h
}

/// The RET reply carrying `value`.
pub fn encode_ret(value: u64) -> [u8; HEADER_LEN + 8] {
    let mut r = [0; HEADER_LEN + 8];
    r[..HEADER_LEN].copy_from_slice(&encode_header(cmd::RET, 8));
    r[HEADER_LEN..].copy_from_slice(&value.to_le_bytes());
    r
}

/// A config access payload (what QEMU sends; for tests and clients).
pub fn encode_cfg(addr: u32, val: u32, len: i32) -> [u8; CFG_LEN] {
    let mut p = [0; CFG_LEN];
    p[0..4].copy_from_slice(&addr.to_le_bytes());
    p[4..8].copy_from_slice(&val.to_le_bytes());
    p[8..12].copy_from_slice(&len.to_le_bytes());
    p
}

/// A BAR access payload.
pub fn encode_bar(addr: u64, val: u64, size: u32, memory: bool) -> [u8; BAR_LEN] {
    let mut p = [0; BAR_LEN];
    p[0..8].copy_from_slice(&addr.to_le_bytes());
    p[8..16].copy_from_slice(&val.to_le_bytes());
    p[16..20].copy_from_slice(&size.to_le_bytes());
    p[20] = memory as u8;
    p
}

/// A SYNC_SYSMEM payload for up to eight regions.
pub fn encode_sysmem(regions: &[RamRegion]) -> [u8; MAX_PAYLOAD] {
    let mut p = [0; MAX_PAYLOAD];
    for (i, r) in regions.iter().take(MAX_FDS).enumerate() {
        p[i * 8..i * 8 + 8].copy_from_slice(&r.gpa.to_le_bytes());
        p[64 + i * 8..72 + i * 8].copy_from_slice(&r.size.to_le_bytes());
        p[128 + i * 8..136 + i * 8].copy_from_slice(&r.offset.to_le_bytes());
    }
    p
}
