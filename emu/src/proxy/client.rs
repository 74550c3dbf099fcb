//! The driver's side of the device host: a [`PciFunction`] whose model lives in another
//! process (`ptplab devhost --listen PATH`), reached over the same `x-pci-proxy-dev` protocol
//! QEMU speaks. So igcd drives a NIC that outlives it, as hardware does: kill igcd, start it
//! again, and the model — its PHC, its cable, its ground-truth record — has kept running.
//!
//! - BAR0 accesses are BAR_READ/BAR_WRITE messages at a fixed bus address the client assigns
//!   in config space; one access at a time (a lock around the socket, like the emulated bus);
//! - DMA memory is one memfd arena the client creates, seals against resizing and hands over
//!   as SYNC_SYSMEM, at the first allocation: by then bring-up has stopped the previous driver's DMA (its rings point
//!   into the old arena, which the device host keeps mapped until it is replaced);
//! - interrupts: the header has no MSI/MSI-X capability, so the function offers its INTx line,
//!   an eventfd pair (SET_IRQFD); [`IrqVector::ack`] writes the resample eventfd, after which
//!   the device host asserts again if the line is still high.
//!
//! A broken socket (the device host gone) makes reads return all ones, as a removed device
//! does, and is logged once.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ptp_pci::{DmaRegion, IrqMode, IrqSupport, IrqVector, IrqWait, Mmio, PciError, PciFunction};
use ptp_pci::{PciIds, config::offsets};

use super::proto::{self, HEADER_LEN, RamRegion, cmd};

/// Where the client places BAR0 on its bus.
pub const BAR0_BASE: u64 = 0xFEB0_0000;
/// The bus address of the DMA arena's first byte (never 0).
pub const DMA_BASE: u64 = 0x1_0000_0000;
/// The DMA arena: enough for the driver's rings and buffers (a memfd: pages appear on use).
pub const DMA_ARENA: usize = 16 << 20;
/// How long one access may wait for the device host.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Command register: memory space and bus master.
const COMMAND_MEM_MASTER: u32 = 0x0006;

/// The connection, shared by the BAR handles.
struct Conn {
    sock: Mutex<UnixStream>,
    broken: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Conn {
    /// Sends one message and, for an access, waits for its RET value. `None` once the socket
    /// is broken.
    fn call(&self, c: i32, payload: &[u8], fds: &[BorrowedFd<'_>], reply: bool) -> Option<u64> {
        if self.broken.load(Ordering::Relaxed) {
            return None;
        }
        let mut sock = lock(&self.sock);
        let r = exchange(&mut sock, c, payload, fds, reply);
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                if !self.broken.swap(true, Ordering::Relaxed) {
                    log::error!("device host: {e}; the device reads all ones from now on");
                }
                None
            }
        }
    }
}

/// Sends command `c` with `payload` and `fds`; with `reply`, reads the RET and returns its value
/// (an error if anything but a RET of 8 bytes came, or the connection closed instead).
pub fn exchange(
    sock: &mut UnixStream,
    c: i32,
    payload: &[u8],
    fds: &[BorrowedFd<'_>],
    reply: bool,
) -> std::io::Result<u64> {
    let mut m = proto::encode_header(c, payload.len()).to_vec();
    m.extend_from_slice(payload);
    send_with_fds(sock, &m, fds)?;
    if !reply {
        return Ok(0);
    }
    let mut r = [0u8; HEADER_LEN + 8];
    sock.read_exact(&mut r)?;
    let head: &[u8; HEADER_LEN] = r[..HEADER_LEN].try_into().unwrap_or(&[0; HEADER_LEN]);
    match proto::decode_header(head) {
        Ok(h) if h.cmd == cmd::RET && h.size == 8 => {}
        _ => return Err(std::io::Error::other("reply is not a RET of 8 bytes")),
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(&r[HEADER_LEN..]);
    Ok(u64::from_le_bytes(v))
}

/// Sends `bytes` with `fds` as SCM_RIGHTS ([`ptp_ipc::fdpass`]; none: a plain write). The
/// socket's write timeout bounds each send.
pub fn send_with_fds(
    sock: &mut UnixStream,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    if fds.is_empty() {
        return sock.write_all(bytes);
    }
    if fds.len() > proto::MAX_FDS {
        return Err(std::io::Error::other("too many descriptors"));
    }
    // The descriptors go with the first byte; a short send leaves the rest as plain data.
    let n = loop {
        match ptp_ipc::fdpass::send_with_fds(&*sock, bytes, fds, false) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => break r?,
        }
    };
    sock.write_all(&bytes[n..])
}

/// BAR0 of a proxied function.
#[derive(Clone)]
pub struct ProxyBar {
    conn: Arc<Conn>,
    len: u32,
}

impl std::fmt::Debug for ProxyBar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProxyBar0({:#x})", self.len)
    }
}

impl Mmio for ProxyBar {
    fn read32(&self, offset: u32) -> u32 {
        assert!(offset % 4 == 0 && offset < self.len, "read at {offset:#x}");
        let p = proto::encode_bar(BAR0_BASE + u64::from(offset), 0, 4, true);
        self.conn
            .call(cmd::BAR_READ, &p, &[], true)
            .map_or(u32::MAX, |v| v as u32)
    }

    fn write32(&self, offset: u32, value: u32) {
        assert!(offset % 4 == 0 && offset < self.len, "write at {offset:#x}");
        let p = proto::encode_bar(BAR0_BASE + u64::from(offset), value.into(), 4, true);
        self.conn.call(cmd::BAR_WRITE, &p, &[], true);
    }
}

/// The INTx line: an eventfd the device host writes on a rising edge, and its resample
/// eventfd.
pub struct ProxyIrq {
    irq: OwnedFd,
    resample: OwnedFd,
}

impl IrqVector for ProxyIrq {
    fn wait(&self, timeout: Duration) -> IrqWait {
        use ptp_ipc::poll::{PollFlags, deadline_after, wait_fd};
        // EINTR restarts with the time left; a poll error is as good as no firing.
        if !matches!(
            wait_fd(&self.irq, PollFlags::IN, deadline_after(timeout)),
            Ok(Some(_))
        ) {
            return IrqWait::TimedOut;
        }
        // Resets the counter (non-blocking: a racing reader leaves EAGAIN, as good).
        let _ = rustix::io::read(&self.irq, &mut [0u8; 8]);
        IrqWait::Fired
    }

    fn ack(&self) {
        // A full counter (EAGAIN) already means "resample".
        let _ = rustix::io::write(&self.resample, &1u64.to_ne_bytes());
    }
}

/// The DMA arena: a memfd mapped here and handed to the device host (our descriptor is
/// closed once sent: the mapping and the device host's copy keep the memory).
struct Arena {
    base: NonNull<u8>,
    next: usize,
}

/// Keeps the arena's mapping alive while any region of it lives.
type Mapping = ptp_ipc::shm::Mapping;

/// A PCI function served by a device host.
pub struct ProxyFunction {
    conn: Arc<Conn>,
    name: String,
    bar0_len: u32,
    arena: Option<(Arena, Arc<Mapping>)>,
}

impl ProxyFunction {
    /// Connects to the device host listening at `path` and assigns BAR0 and the command
    /// register, as firmware would.
    pub fn connect(path: &Path) -> Result<Self, PciError> {
        let io = |e: std::io::Error| PciError::Unavailable(format!("{}: {e}", path.display()));
        let sock = UnixStream::connect(path).map_err(io)?;
        sock.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        sock.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        let mut f = Self {
            conn: Arc::new(Conn {
                sock: Mutex::new(sock),
                broken: AtomicBool::new(false),
            }),
            name: path.display().to_string(),
            bar0_len: 0,
            arena: None,
        };
        f.config_write32(offsets::BAR0, u32::MAX);
        let size = !(f.config_read32(offsets::BAR0) & !0xF);
        if f.conn.broken.load(Ordering::Relaxed) || size == u32::MAX {
            return Err(PciError::Unavailable(format!("{}: no BAR0", f.name)));
        }
        f.bar0_len = size.wrapping_add(1);
        f.config_write32(offsets::BAR0, BAR0_BASE as u32);
        f.config_write32(offsets::COMMAND_STATUS, COMMAND_MEM_MASTER);
        Ok(f)
    }

    /// Creates the arena and sends it to the device host (once).
    fn arena(&mut self) -> Result<&mut Arena, PciError> {
        if self.arena.is_none() {
            let (fd, mapping) = create_arena()?;
            let base = mapping.base();
            let region = RamRegion {
                gpa: DMA_BASE,
                size: DMA_ARENA as u64,
                offset: 0,
            };
            let p = proto::encode_sysmem(&[region]);
            self.conn
                .call(cmd::SYNC_SYSMEM, &p, &[fd.as_fd()], false)
                .ok_or(PciError::Dma(DMA_ARENA))?;
            drop(fd);
            let mapping = Arc::new(mapping);
            self.arena = Some((Arena { base, next: 0 }, mapping));
        }
        self.arena
            .as_mut()
            .map(|(a, _)| a)
            .ok_or(PciError::Dma(DMA_ARENA))
    }
}

/// A zeroed memfd of [`DMA_ARENA`] bytes, mapped shared. Its size is sealed for good before
/// anyone else sees it ([`ptp_ipc::shm::memfd`]): the device host maps only sealed memory,
/// since a file shrunk under its mapping would kill it with SIGBUS.
fn create_arena() -> Result<(OwnedFd, Mapping), PciError> {
    let fail = |what: &str, e: std::io::Error| PciError::Io(format!("DMA arena {what}: {e}"));
    let fd = ptp_ipc::shm::memfd("igcd-dma", DMA_ARENA, true).map_err(|e| fail("memfd", e))?;
    let map = Mapping::shared(fd.as_fd(), 0, DMA_ARENA).map_err(|e| fail("mmap", e))?;
    Ok((fd, map))
}

fn eventfd() -> Result<OwnedFd, PciError> {
    use rustix::event::EventfdFlags;
    rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| PciError::Interrupts(format!("eventfd: {e}")))
}

impl PciFunction for ProxyFunction {
    type Bar = ProxyBar;
    type Irq = ProxyIrq;

    fn ids(&self) -> PciIds {
        PciIds::from_config(|o| self.config_read32(o))
    }

    fn address(&self) -> String {
        format!("devhost:{}", self.name)
    }

    fn config_read32(&self, offset: u16) -> u32 {
        let p = proto::encode_cfg(u32::from(offset & !3), 0, 4);
        self.conn
            .call(cmd::PCI_CFGREAD, &p, &[], true)
            .map_or(u32::MAX, |v| v as u32)
    }

    fn config_write32(&mut self, offset: u16, value: u32) {
        let p = proto::encode_cfg(u32::from(offset & !3), value, 4);
        self.conn.call(cmd::PCI_CFGWRITE, &p, &[], true);
    }

    fn map_bar(&mut self, bar: u8) -> Result<ProxyBar, PciError> {
        if bar != 0 {
            return Err(PciError::NoSuchBar(bar));
        }
        Ok(ProxyBar {
            conn: self.conn.clone(),
            len: self.bar0_len,
        })
    }

    fn alloc_vectors(&mut self, count: u16) -> Result<Vec<ProxyIrq>, PciError> {
        Err(PciError::Interrupts(format!(
            "{count} MSI-X vectors requested; a proxied function has the INTx line only"
        )))
    }

    fn irq_support(&self) -> IrqSupport {
        IrqSupport {
            legacy_line: Some((self.config_read32(0x3c) & 0xFF) as u8),
            ..IrqSupport::default()
        }
    }

    fn alloc_irq_mode(&mut self, mode: IrqMode) -> Result<Vec<ProxyIrq>, PciError> {
        match mode {
            IrqMode::Polled => Ok(Vec::new()),
            IrqMode::Legacy { .. } => {
                let (irq, resample) = (eventfd()?, eventfd()?);
                let fds = [irq.as_fd(), resample.as_fd()];
                self.conn
                    .call(cmd::SET_IRQFD, &[], &fds, false)
                    .ok_or_else(|| PciError::Interrupts("device host gone".into()))?;
                Ok(vec![ProxyIrq { irq, resample }])
            }
            other => Err(PciError::Interrupts(format!("{other} is not offered"))),
        }
    }

    fn alloc_dma(&mut self, len: usize) -> Result<DmaRegion, PciError> {
        let rounded = len.next_multiple_of(4096);
        let arena = self.arena()?;
        if len == 0 || arena.next + rounded > DMA_ARENA {
            return Err(PciError::Dma(len));
        }
        let off = arena.next;
        arena.next += rounded;
        // Safety: in bounds of the arena (checked above), so the pointer is non-null.
        let ptr = unsafe { NonNull::new_unchecked(arena.base.as_ptr().add(off)) };
        let owner = self.arena.as_ref().map(|(_, m)| m.clone());
        let owner = owner.ok_or(PciError::Dma(len))?;
        // Safety: `ptr..ptr+len` lies in the shared mapping `owner` keeps alive; the memfd is
        // zeroed at creation and each range is handed out once; page-aligned, so 8-aligned.
        Ok(unsafe { DmaRegion::new(ptr, len, DMA_BASE + off as u64, owner) })
    }
}
