//! The serving loop: one thread, the model owned outright (no lock), QEMU's synchronous
//! accesses answered first and the model's due work run between them.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::config::ConfigSpace;
use super::guest_ram::GuestRam;
use super::proto::{self, HEADER_LEN, MAX_FDS, Message, ProtoError};
use super::{ProxyError, ServedDevice};
use crate::nic::MsixSignal;

/// Counters of what the guest did through the proxy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Messages received.
    pub messages: u64,
    /// Config reads and writes.
    pub cfg_reads: u64,
    /// Config writes.
    pub cfg_writes: u64,
    /// BAR reads that reached the model (BAR0 and the MSI-X BAR).
    pub bar_reads: u64,
    /// BAR writes that reached the model.
    pub bar_writes: u64,
    /// BAR accesses outside every BAR, to I/O space, or while the function does not decode
    /// memory (answered all ones / dropped).
    pub bar_misses: u64,
    /// BAR0 dwords inside the part's BAR but past the model's register space (reads answered
    /// 0, writes dropped) \[U\]: the I225's BAR0 is 1 MiB, the model's registers 128 KiB.
    pub bar_unmodelled: u64,
    /// Malformed messages (answered with a failure where a reply was due).
    pub malformed: u64,
    /// Rising edges of the INTx line (eventfd writes, resamples included).
    pub intx_edges: u64,
    /// DEVICE_RESETs.
    pub resets: u64,
    /// SYNC_SYSMEMs applied.
    pub sysmem_syncs: u64,
    /// DMA accesses outside guest RAM.
    pub dma_faults: u64,
    /// MSI-X messages the function sent, MSI-X enabled and the vector unmasked (QEMU's proxy
    /// has no path for them: dropped), and signals with MSI-X enabled that the table could not
    /// take (past its end).
    pub msix_dropped: u64,
    /// MSI-X signals held as Pending by a mask (sent, and counted dropped, on unmask).
    pub msix_pending: u64,
    /// MSI messages the function sent with MSI enabled (no path for them either: dropped).
    pub msi_dropped: u64,
    /// Function Level Resets the guest initiated (PCIe Device Control bit 15).
    pub flrs: u64,
    /// TX timestamps the driver read (TXSTMPH_0) after the model latched them.
    pub tx_stamps_delivered: u64,
    /// Listening: connections the admission check refused (closed unserved).
    pub peers_refused: u64,
    /// Listening: clients dropped for not setting up in time or for going silent.
    pub client_timeouts: u64,
    /// SYNC_SYSMEM messages refused for a descriptor that could not back its region.
    pub ram_refused: u64,
}

/// Most delivery latencies kept (the first ones; a long run's later ones are only counted).
const MAX_LATENCIES: usize = 100_000;

/// How the server runs.
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    /// Longest sleep between model polls when the model names no earlier deadline (it bounds
    /// how late an arriving frame is noticed, as igcd's model thread does).
    pub max_sleep: Duration,
    /// Longest wait for the rest of a message once its first byte has arrived.
    pub message_timeout: Duration,
    /// Listening: how long a new client has to set up (assign BAR0 and enable memory
    /// decoding; igcd's client does so in its first four messages) before it is dropped. Below
    /// the client's own 5 s access timeout, so a driver queued behind a silent peer still
    /// gets its first answer in time.
    pub hello_timeout: Duration,
    /// Listening: longest silence of a set-up client before it is dropped, so a hung or
    /// stopped driver cannot hold the one-client service. A live igcd reads the PHC every
    /// 100 ms (its watchdog), so this is far above any gap of a working driver.
    pub idle_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_sleep: Duration::from_millis(1),
            message_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(10),
        }
    }
}

/// A listening server's watch over its current client.
#[derive(Debug, Clone, Copy)]
struct Watch {
    accepted: Instant,
    last_message: Instant,
    set_up: bool,
    longest_silence: Duration,
}

impl Watch {
    fn new(now: Instant) -> Self {
        Self {
            accepted: now,
            last_message: now,
            set_up: false,
            longest_silence: Duration::ZERO,
        }
    }

    /// Why the client is to be dropped at `now`, if it is.
    fn overdue(&self, now: Instant, opts: &ServerOptions) -> Option<String> {
        if !self.set_up && now >= self.accepted + opts.hello_timeout {
            return Some(format!("no set-up within {:?}", opts.hello_timeout));
        }
        let silent = now.saturating_duration_since(self.last_message);
        (silent >= opts.idle_timeout).then(|| format!("silent for {silent:?}"))
    }

    /// Until when the message now arriving may take: the message timeout, cut short by the
    /// set-up deadline (a peer trickling bytes cannot stretch its hello).
    fn message_deadline(&self, now: Instant, opts: &ServerOptions) -> Instant {
        let d = now + opts.message_timeout;
        if self.set_up {
            d
        } else {
            d.min(self.accepted + opts.hello_timeout)
        }
    }
}

/// The INTx eventfds from SET_IRQFD.
struct Intx {
    irq: OwnedFd,
    resample: OwnedFd,
}

/// Serves one model to one QEMU over one connected stream socket, or to one client after
/// another on a listening socket ([`Server::run_listening`]): the model outlives its clients.
pub struct Server<D> {
    /// The client now served (`None` between clients of a listener).
    sock: Option<UnixStream>,
    /// Listening: the current client's set-up and silence (`None` when serving QEMU).
    watch: Option<Watch>,
    /// Clients served so far.
    clients: u64,
    dev: D,
    cfg: ConfigSpace,
    ram: GuestRam,
    intx: Option<Intx>,
    level: bool,
    stats: ServeStats,
    opts: ServerOptions,
    next_poll: Instant,
    /// TX stamps latched as of the last check, and when the oldest undelivered one was seen.
    stamps_seen: u64,
    stamp_since: Option<Instant>,
    /// Host time from a TX stamp latching to the driver's releasing read, ns.
    stamp_latencies: Vec<u64>,
}

/// How one received message ended.
enum Step {
    Served,
    Eof,
}

impl<D: ServedDevice> Server<D> {
    /// A server for `dev` on `sock` (QEMU's `x-pci-proxy-dev,fd=` peer).
    pub fn new(sock: UnixStream, dev: D, opts: ServerOptions) -> Result<Self, ProxyError> {
        let mut s = Self::detached(dev, opts);
        s.attach(sock)?;
        Ok(s)
    }

    /// A server for `dev` with no client yet ([`Self::run_listening`] accepts them).
    pub fn detached(dev: D, opts: ServerOptions) -> Self {
        let cfg = ConfigSpace::new(&dev.pci_profile());
        Self {
            sock: None,
            watch: None,
            clients: 0,
            dev,
            cfg,
            ram: GuestRam::default(),
            intx: None,
            level: false,
            stats: ServeStats::default(),
            opts,
            next_poll: Instant::now(),
            stamps_seen: 0,
            stamp_since: None,
            stamp_latencies: Vec::new(),
        }
    }

    /// Serves `sock` from now on. The new client starts from a fresh config header and no
    /// INTx eventfds; the model, its guest RAM mapping (its rings may still point there until
    /// the client reprograms them) and its clock carry on.
    fn attach(&mut self, sock: UnixStream) -> Result<(), ProxyError> {
        sock.set_read_timeout(Some(self.opts.message_timeout))?;
        sock.set_write_timeout(Some(self.opts.message_timeout))?;
        self.sock = Some(sock);
        self.clients += 1;
        self.intx = None;
        self.level = false;
        self.cfg.reset();
        Ok(())
    }

    /// Clients served so far (the current one included).
    pub fn clients(&self) -> u64 {
        self.clients
    }

    /// The model.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// The model, mutably (and the DMA host), e.g. for a model-side event.
    pub fn device_host_mut(&mut self) -> (&mut D, &mut GuestRam) {
        (&mut self.dev, &mut self.ram)
    }

    /// The config header as served.
    pub fn config(&self) -> &ConfigSpace {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> ServeStats {
        ServeStats {
            sysmem_syncs: self.ram.syncs,
            dma_faults: self.ram.dma_faults,
            ..self.stats
        }
    }

    /// TX timestamp delivery latencies so far (host ns from the model latching a stamp to the
    /// driver reading the releasing register), oldest first. The latch time is when the
    /// device host saw it: right after the model's poll that ran the TX engine, which follows
    /// the driver's tail write at once.
    pub fn tx_stamp_latencies(&self) -> &[u64] {
        &self.stamp_latencies
    }

    /// The guest RAM regions mapped now (gpa, len).
    pub fn ram_regions(&self) -> Vec<(u64, u64)> {
        self.ram.regions()
    }

    /// Serves until QEMU closes the socket (Ok) or `stop` is set; a broken stream is an error.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<ServeStats, ProxyError> {
        while !stop.load(Ordering::Acquire) {
            if self.step(None)?.is_some()
                && let Step::Eof = self.serve_one()?
            {
                break;
            }
        }
        Ok(self.stats())
    }

    /// Serves one client of `listener` after another until `stop` is set: a client that
    /// closes its socket or breaks the stream (a driver killed mid-message) is dropped and the
    /// next one accepted, while the model keeps running — as a NIC outlives its driver.
    ///
    /// Each accepted connection is first put to `admit` (e.g. a check of its SO_PEERCRED); a
    /// refused one is closed unserved. An admitted one must set up within
    /// [`ServerOptions::hello_timeout`] and is dropped after [`ServerOptions::idle_timeout`]
    /// of silence, so no peer can hold the service by saying nothing.
    pub fn run_listening(
        &mut self,
        listener: &UnixListener,
        stop: &AtomicBool,
        admit: &mut dyn FnMut(&UnixStream) -> bool,
    ) -> Result<ServeStats, ProxyError> {
        // poll said readable, but the peer may be gone by accept: never block there.
        listener.set_nonblocking(true)?;
        while !stop.load(Ordering::Acquire) {
            let overdue = self
                .watch
                .and_then(|w| w.overdue(Instant::now(), &self.opts));
            if let Some(why) = overdue {
                self.stats.client_timeouts += 1;
                self.drop_client(&why);
                continue;
            }
            if self.step(Some(listener))?.is_none() {
                continue;
            }
            if self.sock.is_none() {
                self.accept_client(listener, admit)?;
                continue;
            }
            match self.serve_one() {
                Ok(Step::Served) => {}
                Ok(Step::Eof) => self.drop_client("closed its socket"),
                Err(e) => {
                    if let ProxyError::MessageTimeout { .. } = e {
                        self.stats.client_timeouts += 1;
                    }
                    self.drop_client(&e.to_string());
                }
            }
        }
        Ok(self.stats())
    }

    /// Accepts one pending connection if there is one and, if `admit` lets it in, serves it.
    fn accept_client(
        &mut self,
        listener: &UnixListener,
        admit: &mut dyn FnMut(&UnixStream) -> bool,
    ) -> Result<(), ProxyError> {
        let sock = match listener.accept() {
            Ok((sock, _)) => sock,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::Interrupted
                        | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if !admit(&sock) {
            self.stats.peers_refused += 1;
            return Ok(());
        }
        let attached = sock
            .set_nonblocking(false)
            .map_err(ProxyError::from)
            .and_then(|()| self.attach(sock));
        match attached {
            Ok(()) => {
                self.watch = Some(Watch::new(Instant::now()));
                log::info!("proxy: client {} connected", self.clients);
            }
            Err(e) => log::warn!("proxy: a new client could not be set up: {e}"),
        }
        Ok(())
    }

    /// Drops the current client (`why` for the log); the model keeps running.
    fn drop_client(&mut self, why: &str) {
        let silence = self.watch.map_or(Duration::ZERO, |w| w.longest_silence);
        log::info!(
            "proxy: client {} gone ({why}; longest silence {silence:?}); the model keeps running",
            self.clients
        );
        self.sock = None;
        self.watch = None;
        self.intx = None;
    }

    /// Polls the model when due, else waits for the client (or `listener` when there is no
    /// client) and handles a resample; `Some(())` when the socket (or listener) is readable.
    fn step(&mut self, listener: Option<&UnixListener>) -> Result<Option<()>, ProxyError> {
        let now = Instant::now();
        if now >= self.next_poll {
            self.poll_model();
            return Ok(None);
        }
        let fd = match (&self.sock, listener) {
            (Some(s), _) => Some(s.as_fd()),
            (None, Some(l)) => Some(l.as_fd()),
            (None, None) => None,
        };
        let (ready, resample_ready) = self.wait(fd, self.next_poll - now)?;
        if resample_ready {
            self.on_resample();
        }
        Ok(ready.then_some(()))
    }

    /// Waits for `fd` (the client socket or the listener) or the resample eventfd, at most
    /// `timeout` (EINTR ends the wait).
    fn wait(
        &self,
        fd: Option<BorrowedFd<'_>>,
        timeout: Duration,
    ) -> Result<(bool, bool), ProxyError> {
        use ptp_ipc::poll::{PollFd, PollFlags, poll_once};
        let resample = self.intx.as_ref().map(|i| i.resample.as_fd());
        let mut fds: Vec<PollFd<'_>> = [&fd, &resample]
            .into_iter()
            .flatten()
            .map(|f| PollFd::new(f, PollFlags::IN))
            .collect();
        poll_once(&mut fds, timeout)?;
        let hit = |p: &PollFd<'_>| {
            p.revents()
                .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
        };
        let mut it = fds.iter();
        let sock = fd.is_some() && it.next().is_some_and(hit);
        let resample = resample.is_some() && it.next().is_some_and(hit);
        Ok((sock, resample))
    }

    /// Runs the model's due work and schedules the next poll.
    fn poll_model(&mut self) {
        let next = self.dev.poll(&mut self.ram).unwrap_or(self.opts.max_sleep);
        self.next_poll = Instant::now() + next.min(self.opts.max_sleep);
        self.note_stamps();
        self.update_interrupts();
    }

    /// Notes when a new TX stamp was latched (the oldest undelivered one counts).
    fn note_stamps(&mut self) {
        let n = self.dev.tx_stamps_latched();
        if n != self.stamps_seen {
            self.stamps_seen = n;
            self.stamp_since.get_or_insert_with(Instant::now);
        }
    }

    /// A read of `offset` released the pending TX stamp, if it is the releasing register.
    fn note_release(&mut self, offset: u32) {
        if self.dev.tx_stamp_release() != Some(offset) {
            return;
        }
        if let Some(since) = self.stamp_since.take() {
            self.stats.tx_stamps_delivered += 1;
            if self.stamp_latencies.len() < MAX_LATENCIES {
                self.stamp_latencies.push(since.elapsed().as_nanos() as u64);
            }
        }
    }

    /// Routes the vectors the model signalled, sends MSI-X messages a changed mask released,
    /// then re-evaluates the INTx level.
    fn update_interrupts(&mut self) {
        for v in std::mem::take(&mut self.ram.raised) {
            self.route(v);
        }
        self.stats.msix_dropped += std::mem::take(&mut self.ram.raised_overflow);
        if self.cfg.msix_enabled() {
            let fmask = self.cfg.msix_function_masked();
            if let Some(t) = self.dev.msix_table() {
                self.stats.msix_dropped += t.release(fmask).len() as u64;
            }
        }
        self.update_intx();
    }

    /// One signal of the model's, by the function's interrupt mode: an MSI-X message through
    /// the table (masked: Pending), an MSI message, or nothing under INTx (the level carries
    /// it). A message that would go out has no path through QEMU's proxy: counted.
    fn route(&mut self, v: u16) {
        if self.cfg.msix_enabled() {
            let fmask = self.cfg.msix_function_masked();
            match self.dev.msix_table().map(|t| t.signal(v, fmask)) {
                Some(MsixSignal::Pending) => self.stats.msix_pending += 1,
                _ => self.stats.msix_dropped += 1,
            }
        } else if self.cfg.msi_enabled() {
            self.stats.msi_dropped += 1;
        }
    }

    /// A PCI reset (DEVICE_RESET) or FLR: the function, its MSI-X table and its config space
    /// back to power-on.
    fn reset_function(&mut self) {
        self.dev.reset_function(&mut self.ram);
        if let Some(t) = self.dev.msix_table() {
            t.reset();
        }
        self.cfg.reset();
        // What the reset itself signalled went nowhere: the function is in INTx mode now.
        self.ram.raised.clear();
    }

    /// Re-evaluates the INTx level; a rising edge writes the eventfd. A function with MSI or
    /// MSI-X enabled does not use INTx (PCI 3.0 §6.8).
    fn update_intx(&mut self) {
        let level = self.dev.intx_level()
            && !self.cfg.intx_disabled()
            && !self.cfg.msi_enabled()
            && !self.cfg.msix_enabled();
        if level && !self.level {
            self.signal_intx();
        }
        self.level = level;
        self.cfg.set_intx_status(level);
    }

    fn signal_intx(&mut self) {
        self.stats.intx_edges += 1;
        if let Some(i) = &self.intx {
            eventfd_write(i.irq.as_raw_fd());
        }
    }

    /// The guest acknowledged the level interrupt (KVM's resample): assert again if still high.
    fn on_resample(&mut self) {
        if let Some(i) = &self.intx {
            eventfd_read(i.resample.as_raw_fd());
        }
        if self.level {
            self.signal_intx();
        }
    }

    /// Receives, decodes and answers one message.
    fn serve_one(&mut self) -> Result<Step, ProxyError> {
        let Some(sock) = self.sock.as_mut() else {
            return Ok(Step::Eof);
        };
        let now = Instant::now();
        let deadline = match self.watch {
            Some(w) => w.message_deadline(now, &self.opts),
            None => now + self.opts.message_timeout,
        };
        let Some((hdr, fds)) = recv_header(sock, deadline)? else {
            return Ok(Step::Eof);
        };
        let cmd = i32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        // An impossible size leaves no way to find the next header: fatal.
        let header = proto::decode_header(&hdr)?;
        let mut payload = [0u8; proto::MAX_PAYLOAD];
        read_full(sock, &mut payload[..header.size], deadline)?;
        self.stats.messages += 1;
        if let Some(w) = self.watch.as_mut() {
            w.longest_silence = w.longest_silence.max(now - w.last_message);
            w.last_message = Instant::now();
        }
        match proto::decode(cmd, &payload[..header.size], fds) {
            Ok(msg) => self.dispatch(msg)?,
            Err(e) => self.malformed(cmd, e)?,
        }
        if let Some(w) = self.watch.as_mut() {
            w.set_up |= self.cfg.bar0_base() != 0 && self.cfg.memory_enabled();
        }
        Ok(Step::Served)
    }

    fn malformed(&mut self, cmd: i32, e: ProtoError) -> Result<(), ProxyError> {
        self.stats.malformed += 1;
        log::warn!("proxy: malformed message: {e}");
        let wants_reply = matches!(
            cmd,
            proto::cmd::PCI_CFGWRITE
                | proto::cmd::PCI_CFGREAD
                | proto::cmd::BAR_WRITE
                | proto::cmd::BAR_READ
                | proto::cmd::DEVICE_RESET
        );
        if wants_reply {
            // QEMU's convention for a failed access.
            self.reply(u64::MAX)?;
        }
        Ok(())
    }

    fn dispatch(&mut self, msg: Message<OwnedFd>) -> Result<(), ProxyError> {
        match msg {
            // Never answered.
            Message::SyncSysmem(regions) => match self.ram.replace(regions) {
                Ok(()) => {}
                // A descriptor that could not back its region (short, unsealed): this peer
                // is not trusted with the model's DMA; the old RAM stays mapped.
                Err(e @ ProxyError::RamRefused { .. }) => {
                    self.stats.ram_refused += 1;
                    return Err(e);
                }
                // A failed mapping leaves no RAM: DMA then fails visibly.
                Err(e) => log::error!("proxy: {e}"),
            },
            Message::SetIrqfd { irq, resample } => {
                // We write and read these in the serving thread: a pipe or socket here could
                // block it for good (a full pipe), so only eventfds are taken.
                for (which, fd) in [("irq", &irq), ("resample", &resample)] {
                    if let Err(what) = check_eventfd(fd) {
                        return Err(ProxyError::NotEventfd { which, what });
                    }
                }
                self.intx = Some(Intx { irq, resample });
                self.level = false;
                self.update_interrupts();
            }
            Message::CfgRead { addr, len } => {
                self.stats.cfg_reads += 1;
                let v = self.cfg.read(addr, len);
                self.reply(u64::from(v))?;
            }
            Message::CfgWrite { addr, val, len } => {
                self.stats.cfg_writes += 1;
                self.cfg.write(addr, val, len);
                if self.cfg.take_flr() {
                    self.stats.flrs += 1;
                    self.reset_function();
                }
                self.reply(0)?;
                self.update_interrupts();
            }
            Message::BarRead { addr, size, memory } => {
                let v = self.bar_read(addr, size, memory);
                self.reply(v)?;
                self.update_interrupts();
            }
            Message::BarWrite {
                addr,
                val,
                size,
                memory,
            } => {
                self.bar_write(addr, val, size, memory);
                // Answer first: the vCPU waits for it; the model's work can follow. Every write
                // polls the model, even one it applied itself (`write_wakes_model` false, e.g.
                // the interrupt registers since 82f0295): here no thread is woken for it, and
                // skipping the poll after those writes left TX stamps latched that the guest's
                // igc never read as far as the host's count goes (tests/vm_ptp.rs: 4-14 of ~200
                // per run; not isolated whether a stamp went unread or only uncounted: the poll
                // both runs due work and notes latched stamps). A poll costs little beside a
                // TCG vCPU's access.
                self.reply(0)?;
                self.poll_model();
            }
            Message::DeviceReset => {
                self.stats.resets += 1;
                self.reset_function();
                self.reply(0)?;
                self.update_interrupts();
            }
        }
        Ok(())
    }

    /// The BAR (0 or 3) and offset of a memory access of `size` bytes at `addr`, if it lies
    /// inside an assigned BAR of a function that decodes memory.
    fn bar_target(&self, addr: u64, size: u8, memory: bool) -> Option<(u8, u32)> {
        if !memory || !self.cfg.decodes_memory() {
            return None;
        }
        [0u8, 3].into_iter().find_map(|n| {
            let base = self.cfg.bar_base(usize::from(n));
            let off = addr.checked_sub(base)?;
            let end = off.checked_add(u64::from(size))?;
            (base != 0 && end <= u64::from(self.cfg.bar_len(usize::from(n))))
                .then_some((n, off as u32))
        })
    }

    /// Whether BAR0 dword `dw` lies past the model's register space (counted, see
    /// [`ServeStats::bar_unmodelled`]).
    fn unmodelled(&mut self, bar: u8, dw: u32) -> bool {
        let past = bar == 0 && dw >= self.dev.bar_len(0).unwrap_or(0);
        self.stats.bar_unmodelled += u64::from(past);
        past
    }

    /// A dword read of the model.
    fn read_dword(&mut self, bar: u8, dw: u32) -> u32 {
        if self.unmodelled(bar, dw) {
            return 0;
        }
        let v = self.dev.read32(bar, dw, &mut self.ram);
        if bar == 0 {
            self.note_release(dw);
        }
        v
    }

    /// A read of 1, 2, 4 or 8 bytes: dword reads of the model (an 8-byte read is the low
    /// dword then the high one), narrowed to the bytes asked for.
    fn bar_read(&mut self, addr: u64, size: u8, memory: bool) -> u64 {
        let Some((bar, off)) = self.bar_target(addr, size, memory) else {
            self.stats.bar_misses += 1;
            return u64::MAX >> (64 - 8 * u32::from(size));
        };
        self.stats.bar_reads += 1;
        let lo = u64::from(self.read_dword(bar, off & !3));
        if size == 8 {
            let hi = u64::from(self.read_dword(bar, (off & !3) + 4));
            return lo | hi << 32;
        }
        let shifted = lo >> ((off & 3) * 8);
        shifted & (u64::MAX >> (64 - 8 * u32::from(size)))
    }

    /// A write of 1, 2, 4 or 8 bytes (8: low dword, then high). On BAR0 a narrow write reaches
    /// the model as a dword write with the other bytes zero: merging would need a read, which
    /// has side effects on this part \[assumption: igc writes registers 32 bits wide\]. On the
    /// MSI-X BAR, whose reads have none, the other bytes are kept (PCIe 3.0 §6.8.2 lets
    /// software write the table's fields narrower than a dword).
    fn bar_write(&mut self, addr: u64, val: u64, size: u8, memory: bool) {
        let Some((bar, off)) = self.bar_target(addr, size, memory) else {
            self.stats.bar_misses += 1;
            return;
        };
        self.stats.bar_writes += 1;
        let dw = off & !3;
        let shift = (off & 3) * 8;
        let mut v = (val << shift) as u32;
        if bar == 3 && size < 4 {
            let keep = !((u32::MAX >> (32 - 8 * u32::from(size))) << shift);
            v |= self.dev.read32(3, dw, &mut self.ram) & keep;
        }
        if !self.unmodelled(bar, dw) {
            self.dev.write32(bar, dw, v, &mut self.ram);
        }
        if size == 8 && !self.unmodelled(bar, dw + 4) {
            self.dev
                .write32(bar, dw + 4, (val >> 32) as u32, &mut self.ram);
        }
    }

    fn reply(&mut self, v: u64) -> Result<(), ProxyError> {
        if let Some(s) = self.sock.as_mut() {
            s.write_all(&proto::encode_ret(v))?;
        }
        Ok(())
    }
}

/// Whether `fd` is an eventfd (what /proc says it is otherwise).
fn check_eventfd(fd: &OwnedFd) -> Result<(), String> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| format!("/proc/self/fd: {e}"))?;
    match link.to_str() {
        Some("anon_inode:[eventfd]") => Ok(()),
        _ => Err(link.display().to_string()),
    }
}

/// Writes 1 to an eventfd (a full counter only delays the edge; nothing to report).
fn eventfd_write(fd: RawFd) {
    let one: u64 = 1;
    // Safety: writes 8 bytes from a live u64 to a descriptor we own.
    unsafe {
        libc::write(fd, (&raw const one).cast(), 8);
    }
}

/// Drains an eventfd (non-blocking use: only called when poll said it is readable).
fn eventfd_read(fd: RawFd) {
    let mut v: u64 = 0;
    // Safety: reads at most 8 bytes into a live u64 from a descriptor we own.
    unsafe {
        libc::read(fd, (&raw mut v).cast(), 8);
    }
}

/// Reads exactly `buf.len()` bytes, all of them by `deadline`.
fn read_full(sock: &UnixStream, buf: &mut [u8], deadline: Instant) -> Result<(), ProxyError> {
    let mut got = 0;
    let mut rest = sock;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let late = ProxyError::MessageTimeout {
            got,
            want: buf.len(),
        };
        if left.is_zero() {
            return Err(late);
        }
        sock.set_read_timeout(Some(left))?;
        match rest.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(ProxyError::Truncated {
                    got,
                    want: buf.len(),
                });
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Err(late),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A raw header with the descriptors that came with it.
type RawHeader = ([u8; HEADER_LEN], Vec<OwnedFd>);

/// Receives a 16-byte header with the descriptors sent alongside it (the rest of it by
/// `deadline`); `None` on a clean EOF. Called when the socket is readable.
fn recv_header(sock: &UnixStream, deadline: Instant) -> Result<Option<RawHeader>, ProxyError> {
    let mut hdr = [0u8; HEADER_LEN];
    // Room for MAX_FDS descriptors (CMSG_SPACE), u64-aligned.
    let mut cbuf = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: hdr.as_mut_ptr().cast(),
        iov_len: HEADER_LEN,
    };
    // Safety: an all-zero msghdr is valid; the fields set below point at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // poll said readable, so this wait is short; bounded by the deadline all the same.
    let left = deadline.saturating_duration_since(Instant::now());
    sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    let n = loop {
        // Safety: `msg` points at `iov` (into `hdr`) and `cbuf`, all live for the call;
        // MSG_CMSG_CLOEXEC keeps the descriptors out of any child we start.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e.into());
        }
    };
    let fds = take_fds(&msg);
    if n == 0 {
        return Ok(None);
    }
    // Counts in the error are of the whole header.
    read_full(sock, &mut hdr[n..], deadline).map_err(|e| match e {
        ProxyError::Truncated { got, .. } => ProxyError::Truncated {
            got: n + got,
            want: HEADER_LEN,
        },
        ProxyError::MessageTimeout { got, .. } => ProxyError::MessageTimeout {
            got: n + got,
            want: HEADER_LEN,
        },
        e => e,
    })?;
    Ok(Some((hdr, fds)))
}

/// Takes ownership of every SCM_RIGHTS descriptor in `msg` (at most [`MAX_FDS`] are kept;
/// extra ones are closed at once).
fn take_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut out = Vec::new();
    // Safety: `msg` was filled by recvmsg; CMSG_FIRSTHDR/NXTHDR walk its control buffer
    // within msg_controllen, and CMSG_DATA of an SCM_RIGHTS header holds the descriptors
    // the kernel installed for us, which nothing else owns.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if out.len() < MAX_FDS + 1 {
                        out.push(fd);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    out
}
