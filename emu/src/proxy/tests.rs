//! The device host against a scripted QEMU peer on a socketpair: realize sequence, BAR
//! sizing, BAR accesses reaching the model, DMA into memfd-backed "guest RAM", INTx edges,
//! malformed messages answered with a typed failure; the decoder proptested.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use intel_regs::igc::{CTRL, Ctrl, ICR, IMS, IntCause, STATUS};
use proptest::prelude::*;

use super::proto::{self, Message, ProtoError, RamRegion, cmd};
use super::*;
use crate::clock::VirtualClock;
use crate::igc::I225;

proptest! {
    /// Any header, payload and descriptor count: a message or a typed error, never a panic.
    #[test]
    fn decoder_is_total(
        c in -2i32..10,
        payload in proptest::collection::vec(any::<u8>(), 0..=200),
        nfds in 0usize..11,
        hdr in proptest::array::uniform16(any::<u8>()),
    ) {
        let _ = proto::decode_header(&hdr);
        let fds: Vec<u32> = (0..nfds as u32).collect();
        let _ = proto::decode(c, &payload, fds);
    }

    /// Encoded BAR and config accesses decode to what was encoded.
    #[test]
    fn bar_and_config_round_trip(addr in any::<u64>(), val in any::<u64>(), size_pick in 0usize..4, memory: bool,
                                 caddr in 0u32..256, cval in any::<u32>()) {
        let size = [1u32, 2, 4, 8][size_pick];
        let m = proto::decode::<u32>(cmd::BAR_READ, &proto::encode_bar(addr, val, size, memory), vec![]);
        prop_assert_eq!(m, Ok(Message::BarRead { addr, size: size as u8, memory }));
        let m = proto::decode::<u32>(cmd::BAR_WRITE, &proto::encode_bar(addr, val, size, memory), vec![]);
        prop_assert_eq!(m, Ok(Message::BarWrite { addr, val, size: size as u8, memory }));
        let len = 1i32;
        let m = proto::decode::<u32>(cmd::PCI_CFGWRITE, &proto::encode_cfg(caddr, cval, len), vec![]);
        prop_assert_eq!(m, Ok(Message::CfgWrite { addr: caddr, val: cval, len: 1 }));
    }
}

#[test]
fn decoder_rejects_each_malformed_form() {
    let mut h = proto::encode_header(cmd::BAR_READ, 193);
    assert_eq!(
        proto::decode_header(&h),
        Err(ProtoError::PayloadTooLarge(193))
    );
    h = proto::encode_header(cmd::BAR_READ, 24);
    assert!(proto::decode_header(&h).is_ok());
    let bad =
        |c, p: &[u8], n: usize| proto::decode::<u32>(c, p, (0..n as u32).collect()).unwrap_err();
    assert_eq!(bad(42, &[], 0), ProtoError::UnknownCommand(42));
    assert_eq!(
        bad(cmd::RET, &[0; 8], 0),
        ProtoError::UnknownCommand(cmd::RET)
    );
    assert!(matches!(
        bad(cmd::BAR_READ, &[0; 23], 0),
        ProtoError::BadLength {
            got: 23,
            want: 24,
            ..
        }
    ));
    assert!(matches!(
        bad(cmd::BAR_READ, &proto::encode_bar(0, 0, 3, true), 0),
        ProtoError::BadBarAccess { size: 3, .. }
    ));
    assert!(matches!(
        bad(cmd::PCI_CFGREAD, &proto::encode_cfg(254, 0, 4), 0),
        ProtoError::BadConfigAccess { addr: 254, len: 4 }
    ));
    assert!(matches!(
        bad(cmd::PCI_CFGREAD, &proto::encode_cfg(0, 0, 4), 1),
        ProtoError::BadFdCount { got: 1, .. }
    ));
    assert!(matches!(
        bad(cmd::SET_IRQFD, &[], 1),
        ProtoError::BadFdCount { got: 1, .. }
    ));
    assert!(matches!(
        bad(cmd::SYNC_SYSMEM, &[0; 192], 0),
        ProtoError::BadFdCount { got: 0, .. }
    ));
    assert!(matches!(
        bad(cmd::SYNC_SYSMEM, &[0; 192], 9),
        ProtoError::BadFdCount { got: 9, .. }
    ));
    // Region 0 with size 0.
    assert!(matches!(
        bad(cmd::SYNC_SYSMEM, &[0; 192], 1),
        ProtoError::BadRegion { index: 0, .. }
    ));
    let r = RamRegion {
        gpa: u64::MAX - 1,
        size: 4,
        offset: 0,
    };
    assert!(matches!(
        bad(cmd::SYNC_SYSMEM, &proto::encode_sysmem(&[r]), 1),
        ProtoError::BadRegion { .. }
    ));
}

#[test]
fn a_conventional_header_sizes_bar0_and_keeps_read_only_fields() {
    let dev = I225::new_i225(VirtualClock::new(0).source());
    let p = config::PciProfile::conventional(dev.ids(), crate::igc::BAR0_LEN);
    let mut c = config::ConfigSpace::new(&p);
    assert_eq!(c.read(0, 2), 0x8086);
    assert_eq!(c.read(0x0b, 1), 0x02, "class: network");
    assert_eq!(c.read(0x34, 1), 0, "no capability list: no MSI/MSI-X");
    assert_eq!(c.read(0x06, 2) & 0x10, 0, "status: no capability list");
    assert_eq!(c.read(0x3d, 1), 1, "INTA");
    c.write(0x10, 0xFFFF_FFFF, 4);
    let v = c.read(0x10, 4);
    assert_eq!(!(v & !0xF) + 1, crate::igc::BAR0_LEN, "BAR sizing");
    for bar in [0x14, 0x18, 0x1c, 0x20, 0x24] {
        c.write(bar, 0xFFFF_FFFF, 4);
        assert_eq!(c.read(bar, 4), 0, "unused BAR {bar:#x} reads 0");
    }
    c.write(0x10, 0xFEB0_0000, 4);
    assert_eq!(c.bar0_base(), 0xFEB0_0000);
    c.write(0x00, 0x1234_5678, 4);
    assert_eq!(c.read(0, 2), 0x8086, "IDs are read-only");
    c.write(0x04, 0xFFFF, 2);
    assert_eq!(c.read(0x04, 2), 0x0547);
    c.reset();
    assert_eq!((c.bar0_base(), c.read(0x04, 2)), (0, 0));
}

/// A scripted QEMU: sends messages as QEMU does and reads RET replies.
struct FakeQemu {
    sock: UnixStream,
}

impl FakeQemu {
    fn send(&mut self, c: i32, payload: &[u8], fds: &[BorrowedFd<'_>]) {
        let mut m = proto::encode_header(c, payload.len()).to_vec();
        m.extend_from_slice(payload);
        // The driver side's sender (SCM_RIGHTS as QEMU sends them), one copy of that code.
        super::client::send_with_fds(&mut self.sock, &m, fds).expect("send to the device host");
    }

    fn ret(&mut self) -> u64 {
        let mut r = [0u8; 24];
        self.sock.read_exact(&mut r).unwrap();
        assert_eq!(i32::from_le_bytes(r[0..4].try_into().unwrap()), cmd::RET);
        u64::from_le_bytes(r[16..24].try_into().unwrap())
    }

    fn cfg_read(&mut self, addr: u32, len: i32) -> u64 {
        self.send(cmd::PCI_CFGREAD, &proto::encode_cfg(addr, 0, len), &[]);
        self.ret()
    }

    fn cfg_write(&mut self, addr: u32, val: u32, len: i32) {
        self.send(cmd::PCI_CFGWRITE, &proto::encode_cfg(addr, val, len), &[]);
        self.ret();
    }

    /// Assigns BAR0 and enables memory decoding (a listening server's set-up).
    fn set_up(&mut self) {
        self.cfg_write(0x10, BASE as u32, 4);
        self.cfg_write(0x04, 0x0006, 2);
    }

    /// Whether the device host dropped us now: a config read gets EOF or a reset within
    /// 250 ms (well inside the test's idle bound), not an answer.
    fn dropped(&mut self) -> bool {
        self.sock
            .set_read_timeout(Some(Duration::from_millis(250)))
            .unwrap();
        let p = proto::encode_cfg(0, 0, 2);
        let mut m = proto::encode_header(cmd::PCI_CFGREAD, p.len()).to_vec();
        m.extend_from_slice(&p);
        // A write after the close may fail already (EPIPE): that is a drop too.
        self.sock.write_all(&m).is_err() || closed(&mut self.sock)
    }

    fn bar_read(&mut self, addr: u64, size: u32) -> u64 {
        self.send(cmd::BAR_READ, &proto::encode_bar(addr, 0, size, true), &[]);
        self.ret()
    }

    fn bar_write(&mut self, addr: u64, val: u64, size: u32) {
        self.send(
            cmd::BAR_WRITE,
            &proto::encode_bar(addr, val, size, true),
            &[],
        );
        self.ret();
    }
}

/// A memfd of `len` bytes carrying `seals`.
fn memfd_sealed(len: u64, seals: libc::c_int) -> OwnedFd {
    // Safety: memfd_create with a static C string; ftruncate and F_ADD_SEALS on the fd we own.
    unsafe {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        let fd = libc::memfd_create(c"guest-ram".as_ptr(), flags);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
        assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, seals), 0);
        OwnedFd::from_raw_fd(fd)
    }
}

/// Guest RAM as QEMU's memory-backend-memfd makes it (seal=on).
fn memfd(len: u64) -> OwnedFd {
    memfd_sealed(
        len,
        libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
    )
}

fn eventfd() -> OwnedFd {
    // Safety: eventfd returns a new descriptor we own.
    unsafe {
        let fd = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
        assert!(fd >= 0);
        OwnedFd::from_raw_fd(fd)
    }
}

fn eventfd_count(fd: &OwnedFd) -> u64 {
    let mut v = 0u64;
    // Safety: reads 8 bytes into a live u64; the eventfd is non-blocking.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut v).cast(), 8) };
    if n == 8 { v } else { 0 }
}

const BASE: u64 = 0xFEB0_0000;

#[test]
fn serves_a_scripted_qemu_end_to_end() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let clock = VirtualClock::new(0);
    let dev = I225::new_i225(clock.source());
    let mut server = Server::new(ours, dev, ServerOptions::default()).unwrap();
    let t = std::thread::spawn(move || {
        let r = server.run(&AtomicBool::new(false));
        (r.map_err(|e| e.to_string()), server)
    });
    let mut q = FakeQemu { sock: theirs };
    q.sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    // Realize: RAM (two regions of one memfd, as below/above a hole), then the irqfds.
    let ram = memfd(2 << 20);
    let regions = [
        RamRegion {
            gpa: 0,
            size: 1 << 20,
            offset: 0,
        },
        RamRegion {
            gpa: 0x1_0000_0000,
            size: 1 << 20,
            offset: 1 << 20,
        },
    ];
    let fds = [ram.as_fd(), ram.as_fd()];
    q.send(cmd::SYNC_SYSMEM, &proto::encode_sysmem(&regions), &fds);
    let (irq, resample) = (eventfd(), eventfd());
    q.send(cmd::SET_IRQFD, &[], &[irq.as_fd(), resample.as_fd()]);

    assert_eq!(q.cfg_read(0, 2), 0x8086);
    q.cfg_write(0x10, 0xFFFF_FFFF, 4);
    let v = q.cfg_read(0x10, 4) as u32;
    assert_eq!(!(v & !0xF) + 1, I225_BAR0_LEN);
    // Before the BAR is assigned nothing reaches the model.
    assert_eq!(q.bar_read(STATUS as u64, 4), 0xFFFF_FFFF);
    q.cfg_write(0x10, BASE as u32, 4);
    q.cfg_write(0x04, 0x0006, 2);

    // STATUS through the BAR, at its guest-physical address; 2-byte and 8-byte forms agree.
    let status = q.bar_read(BASE + STATUS as u64, 4);
    assert_ne!(status, 0xFFFF_FFFF);
    assert_eq!(q.bar_read(BASE + STATUS as u64 + 2, 2), status >> 16);
    // Past BAR0's end: all ones. Inside the part's BAR0 but past the model's registers: 0.
    assert_eq!(q.bar_read(BASE + I225_BAR0_LEN as u64, 4), 0xFFFF_FFFF);
    assert_eq!(q.bar_read(BASE + crate::igc::BAR0_LEN as u64, 4), 0);

    // INTx: an enabled cause raised with ICS asserts the line (an eventfd write), ICR shows
    // INT_ASSERTED and clears on read, which drops the line.
    q.bar_write(BASE + CTRL as u64, Ctrl::SLU.bits() as u64, 4);
    q.bar_write(BASE + IMS as u64, IntCause::LSC.bits() as u64, 4);
    let _ = q.bar_read(BASE + ICR as u64, 4);
    // Link-up raised LSC; enabling it in IMS asserted the line once.
    assert_eq!(eventfd_count(&irq), 1);
    q.bar_write(
        BASE + intel_regs::igc::ICS as u64,
        IntCause::LSC.bits() as u64,
        4,
    );
    let _ = q.cfg_read(0, 2); // a round trip: the server has evaluated the level
    assert_eq!(eventfd_count(&irq), 1, "one rising edge, one eventfd write");
    assert_eq!(
        q.cfg_read(0x06, 2) & 0x8,
        0x8,
        "config status shows INTx asserted"
    );
    let icr_v = q.bar_read(BASE + ICR as u64, 4) as u32;
    assert_eq!(
        icr_v & (IntCause::LSC.bits() | IntCause::INT_ASSERTED.bits()),
        IntCause::LSC.bits() | IntCause::INT_ASSERTED.bits()
    );
    assert_eq!(
        q.cfg_read(0x06, 2) & 0x8,
        0,
        "read-to-clear dropped the line"
    );

    // A malformed access gets a failure reply and the stream stays in step.
    q.send(cmd::BAR_READ, &proto::encode_bar(BASE, 0, 3, true), &[]);
    assert_eq!(q.ret(), u64::MAX);
    assert_eq!(
        q.cfg_read(2, 2),
        u64::from(crate::igc::I225::new_i225(clock.source()).ids().device)
    );

    // The guest moves BAR0: the old addresses no longer reach the model, the new ones do.
    let moved = 0xFEC0_0000u64;
    q.cfg_write(0x10, moved as u32, 4);
    assert_eq!(q.bar_read(BASE + STATUS as u64, 4), 0xFFFF_FFFF);
    // STATUS now shows the link that CTRL.SLU brought up (LU, bit 1).
    let at_new = q.bar_read(moved + STATUS as u64, 4);
    assert!(at_new != 0xFFFF_FFFF && at_new & 0x2 != 0, "{at_new:#x}");

    // DEVICE_RESET clears the BAR assignment.
    q.send(cmd::DEVICE_RESET, &[], &[]);
    q.ret();
    assert_eq!(q.cfg_read(0x10, 4), 0);

    drop(q);
    let (r, server) = t.join().unwrap();
    let stats = r.expect("EOF ends serving cleanly");
    assert_eq!(stats.malformed, 1);
    assert_eq!(stats.sysmem_syncs, 1);
    assert_eq!(stats.resets, 1);
    assert_eq!(stats.intx_edges, 2);
    assert!(stats.bar_misses >= 2);
    assert_eq!(stats.bar_unmodelled, 1);
    // INTx throughout: the model's legacy signals are no MSI/MSI-X messages.
    assert_eq!((stats.msix_dropped, stats.msi_dropped), (0, 0));
    assert_eq!(
        server.ram_regions(),
        vec![(0, 1 << 20), (0x1_0000_0000, 1 << 20)]
    );
}

#[test]
fn guest_ram_dma_is_bounds_checked_and_replaced_on_resync() {
    let fd = memfd(3 * 4096);
    let dup = fd.try_clone().unwrap();
    let mut ram = guest_ram::GuestRam::default();
    // A region whose file offset is not page-aligned.
    let r = RamRegion {
        gpa: 0x10_0000,
        size: 8192,
        offset: 100,
    };
    ram.replace(vec![(r, dup)]).unwrap();
    assert!(ram.write(0x10_0000 + 8190, &[1, 2]));
    assert!(
        !ram.write(0x10_0000 + 8191, &[1, 2]),
        "crosses the region's end"
    );
    assert!(!ram.write(0x0F_FFFF, &[1]), "below the region");
    assert!(!ram.read(u64::MAX, &mut [0; 2]), "address overflow");
    let mut b = [0u8; 2];
    assert!(ram.read(0x10_0000 + 8190, &mut b));
    assert_eq!(b, [1, 2]);
    // The bytes landed at file offset 100 + 8190.
    let mut f = std::fs::File::from(fd);
    let mut all = Vec::new();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut all).unwrap();
    assert_eq!(&all[100 + 8190..100 + 8192], &[1, 2]);
    // A resync replaces the set: the old region is gone.
    let fd2 = memfd(4096);
    ram.replace(vec![(
        RamRegion {
            gpa: 0,
            size: 4096,
            offset: 0,
        },
        fd2,
    )])
    .unwrap();
    assert!(!ram.read(0x10_0000, &mut b));
    assert!(ram.read(0, &mut b));
    let _ = f.write(&[]);
}

/// `--listen`: one driver after another on the same model, through the driver-side client
/// (`client::ProxyFunction`), as igcd uses it. The first driver leaves without a word; the
/// second finds the model as the first left it.
#[test]
fn a_listening_server_serves_one_driver_after_another_and_keeps_the_model() {
    use std::os::unix::net::UnixListener;
    use std::sync::Arc;

    use intel_regs::igc::TIMINCA;
    use ptp_pci::{IrqMode, Mmio, PciFunction};

    use super::client::{self, ProxyFunction};

    let dir = std::env::temp_dir().join(format!(
        "proxy-listen-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nic.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let clock = VirtualClock::new(0);
    let dev = I225::new_i225(clock.source());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let t = std::thread::spawn(move || {
        let mut s = Server::detached(dev, ServerOptions::default());
        let r = s.run_listening(&listener, &stop2, &mut |_| true);
        (r.map_err(|e| e.to_string()), s)
    });
    {
        let mut f = ProxyFunction::connect(&path).unwrap();
        assert_eq!(f.ids().vendor, 0x8086);
        assert!(f.irq_support().legacy_line.is_some());
        assert!(f.alloc_vectors(2).is_err(), "no MSI-X behind the proxy");
        let irqs = f.alloc_irq_mode(IrqMode::Legacy { line: 0 }).unwrap();
        assert_eq!(irqs.len(), 1);
        let bar = f.map_bar(0).unwrap();
        bar.write32(TIMINCA, 0x1234);
        let dma = f.alloc_dma(100).unwrap();
        assert_eq!(dma.bus_addr(), client::DMA_BASE);
        assert_eq!(f.alloc_dma(1).unwrap().bus_addr(), client::DMA_BASE + 4096);
    }
    let mut f = ProxyFunction::connect(&path).unwrap();
    let bar = f.map_bar(0).unwrap();
    assert_eq!(
        bar.read32(TIMINCA),
        0x1234,
        "the model outlived its first driver"
    );
    drop((bar, f));
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (r, s) = t.join().unwrap();
    r.unwrap();
    assert_eq!(s.clients(), 2);
    assert_eq!(
        s.ram_regions(),
        [(client::DMA_BASE, client::DMA_ARENA as u64)]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A region is mapped only from a regular file that is long enough and sealed against
/// resizing; a refusal is typed and leaves the old mapping in place.
#[test]
fn guest_ram_refuses_short_unsealed_and_non_file_descriptors() {
    use guest_ram::RamRefused;

    let region = |size| RamRegion {
        gpa: 0x1000_0000,
        size,
        offset: 0,
    };
    let mut ram = guest_ram::GuestRam::default();
    ram.replace(vec![(region(4096), memfd(4096))]).unwrap();
    let refused = |r: Result<(), ProxyError>| match r {
        Err(ProxyError::RamRefused { why, .. }) => why,
        other => panic!("expected a RamRefused, got {other:?}"),
    };
    // Declared longer than the file: touching the tail would be a SIGBUS.
    let why = refused(ram.replace(vec![(region(2 * 4096), memfd(4096))]));
    assert_eq!(
        why,
        RamRefused::Short {
            file: 4096,
            needed: 8192
        }
    );
    // Long enough but free to shrink later.
    let why = refused(ram.replace(vec![(region(4096), memfd_sealed(4096, 0))]));
    assert_eq!(why, RamRefused::Unsealed(0));
    let why = refused(ram.replace(vec![(
        region(4096),
        memfd_sealed(4096, libc::F_SEAL_SHRINK),
    )]));
    assert_eq!(why, RamRefused::Unsealed(libc::F_SEAL_SHRINK));
    // Not a file at all.
    let why = refused(ram.replace(vec![(region(4096), eventfd())]));
    assert!(matches!(why, RamRefused::NotAFile(_)), "{why:?}");
    // One bad region refuses the whole set; the old RAM is still there.
    let r = ram.replace(vec![
        (region(4096), memfd(4096)),
        (
            RamRegion {
                gpa: 0,
                size: 4096,
                offset: 4096,
            },
            memfd(4096),
        ),
    ]);
    assert!(matches!(r, Err(ProxyError::RamRefused { index: 1, .. })));
    assert_eq!(ram.regions(), [(0x1000_0000, 4096)]);
    assert!(ram.write(0x1000_0000, &[1]));
}

/// A listening server on a fresh socket in a private temporary directory, with short bounds.
struct Listening {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
    stop: std::sync::Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Result<ServeStats, String>, Server<I225>)>,
}

impl Listening {
    fn start(tag: &str, opts: ServerOptions, admit_uid: Option<u32>) -> Self {
        let dir = std::env::temp_dir().join(format!("proxy-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nic.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let dev = I225::new_i225(VirtualClock::new(0).source());
        let thread = std::thread::spawn(move || {
            let mut s = Server::detached(dev, opts);
            // The test's stand-in for SO_PEERCRED: admit only when no uid is named.
            let mut admit = |_: &UnixStream| admit_uid.is_none();
            let r = s.run_listening(&listener, &stop2, &mut admit);
            (r.map_err(|e| e.to_string()), s)
        });
        Self {
            dir,
            path,
            stop,
            thread,
        }
    }

    fn finish(self) -> (ServeStats, Server<I225>) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let (r, s) = self.thread.join().unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
        (r.unwrap(), s)
    }
}

/// Whether the device host closed `sock` (EOF or reset; not a timeout, not an answer).
fn closed(sock: &mut UnixStream) -> bool {
    let mut b = [0u8; 24];
    match sock.read(&mut b) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

fn short_bounds() -> ServerOptions {
    ServerOptions {
        hello_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(800),
        ..ServerOptions::default()
    }
}

/// A peer that connects and says nothing, one that sets up and then falls silent, and one that
/// trickles its hello byte by byte are each dropped within their bound, and a driver behind
/// them attaches.
#[test]
fn silent_and_slow_peers_cannot_hold_the_listening_server() {
    use ptp_pci::{Mmio, PciFunction};

    let l = Listening::start("silent", short_bounds(), None);
    let t0 = std::time::Instant::now();
    let silent = UnixStream::connect(&l.path).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut f = client::ProxyFunction::connect(&l.path).expect("a driver behind a silent peer");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(2),
        "the driver got in after {waited:?}: the silent peer was dropped at its hello bound"
    );
    // The driver set up, then goes silent itself: dropped after the idle bound, and its
    // socket reads EOF.
    let bar = f.map_bar(0).unwrap();
    assert_ne!(bar.read32(intel_regs::igc::STATUS), u32::MAX);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        bar.read32(intel_regs::igc::STATUS),
        u32::MAX,
        "the idle driver was dropped"
    );
    drop((bar, f, silent));
    // A peer trickling one byte of its header every 100 ms never completes its set-up.
    let mut slow = UnixStream::connect(&l.path).unwrap();
    let t1 = std::time::Instant::now();
    let hdr = proto::encode_header(cmd::PCI_CFGREAD, 12);
    let mut dropped = false;
    for b in hdr.iter().cycle().take(64) {
        if slow.write_all(&[*b]).is_err() {
            dropped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        dropped && t1.elapsed() < Duration::from_secs(2),
        "the trickling peer was still served after {:?}",
        t1.elapsed()
    );
    let f = client::ProxyFunction::connect(&l.path).unwrap();
    assert_eq!(f.ids().vendor, 0x8086);
    drop(f);
    let (stats, s) = l.finish();
    assert_eq!(s.clients(), 4);
    assert_eq!(stats.client_timeouts, 3, "{stats:?}");
}

/// A connection `admit` refuses is closed unserved: its DEVICE_RESET never reaches the model.
#[test]
fn a_refused_peer_is_closed_unserved() {
    let l = Listening::start("refused", short_bounds(), Some(65534));
    let mut s = UnixStream::connect(&l.path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(&proto::encode_header(cmd::DEVICE_RESET, 0));
    assert!(closed(&mut s), "a refused peer got an answer");
    let (stats, srv) = l.finish();
    assert_eq!((stats.resets, stats.messages), (0, 0));
    assert_eq!(stats.peers_refused, 1);
    assert_eq!(srv.clients(), 0);
}

/// A driver whose SYNC_SYSMEM carries an unsealed memfd is dropped with the refusal; the
/// model lives and the next driver (with the client's own sealed arena) is served.
#[test]
fn an_unsealed_sysmem_drops_the_client_not_the_server() {
    use ptp_pci::PciFunction;

    let l = Listening::start("unsealed", short_bounds(), None);
    let mut q = FakeQemu {
        sock: UnixStream::connect(&l.path).unwrap(),
    };
    q.set_up();
    let region = RamRegion {
        gpa: 0x1_0000_0000,
        size: 4096,
        offset: 0,
    };
    let ram = memfd_sealed(4096, 0);
    q.send(
        cmd::SYNC_SYSMEM,
        &proto::encode_sysmem(&[region]),
        &[ram.as_fd()],
    );
    assert!(q.dropped(), "the client was dropped");
    let mut f = client::ProxyFunction::connect(&l.path).unwrap();
    let dma = f.alloc_dma(64).expect("the client's own arena is sealed");
    assert_eq!(dma.bus_addr(), client::DMA_BASE);
    // A round trip: SYNC_SYSMEM has no reply, so this makes sure it was handled.
    assert_eq!(f.config_read32(0) & 0xFFFF, 0x8086);
    drop((dma, f));
    let (stats, s) = l.finish();
    assert_eq!(stats.ram_refused, 1);
    assert_eq!(stats.sysmem_syncs, 1, "only the sealed arena was applied");
    assert_eq!(
        s.ram_regions(),
        [(client::DMA_BASE, client::DMA_ARENA as u64)]
    );
}

/// SET_IRQFD with a pipe instead of an eventfd (a full pipe would block the serving thread's
/// INTx write for good) drops the client; the next one is served.
#[test]
fn a_pipe_as_irqfd_drops_the_client() {
    let l = Listening::start("pipe-irqfd", short_bounds(), None);
    let mut q = FakeQemu {
        sock: UnixStream::connect(&l.path).unwrap(),
    };
    q.sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    q.set_up();
    let mut p = [0; 2];
    // Safety: pipe2 fills two descriptors we then own.
    let (r, w) = unsafe {
        assert_eq!(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC), 0);
        (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1]))
    };
    q.send(cmd::SET_IRQFD, &[], &[w.as_fd(), eventfd().as_fd()]);
    assert!(q.dropped(), "the client was dropped");
    let mut q = FakeQemu {
        sock: UnixStream::connect(&l.path).unwrap(),
    };
    q.sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(q.cfg_read(0, 2), 0x8086);
    drop((q, r));
    let (_, s) = l.finish();
    assert_eq!(s.clients(), 2);
}

/// MSI-X through the proxy: the table and PBA in BAR3 at its own base, masking and Pending as
/// the spec has them, every message that would go out counted (QEMU's proxy has no path for
/// it), no INTx while MSI or MSI-X is enabled, MSI counted alike, and an FLR that puts the
/// function back to power-on.
#[test]
fn msix_and_msi_signals_follow_the_config_space() {
    use intel_regs::e1000::{EIMS, GPIE, IVAR_MISC, IVAR_VALID, gpie};
    use intel_regs::igc::ICS;

    let (ours, theirs) = UnixStream::pair().unwrap();
    let dev = I225::new_i225(VirtualClock::new(0).source());
    let mut server = Server::new(ours, dev, ServerOptions::default()).unwrap();
    let t = std::thread::spawn(move || {
        let r = server.run(&AtomicBool::new(false));
        (r.map_err(|e| e.to_string()), server)
    });
    let mut q = FakeQemu { sock: theirs };
    q.sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (irq, resample) = (eventfd(), eventfd());
    q.send(cmd::SET_IRQFD, &[], &[irq.as_fd(), resample.as_fd()]);
    let bar3 = BASE + u64::from(I225_BAR0_LEN);
    q.cfg_write(0x1c, bar3 as u32, 4);
    q.set_up();
    let pba = bar3 + 0x2000;

    // The table at BAR3 + 0: masked at reset; an entry written whole and in halves.
    assert_eq!(q.bar_read(bar3 + 12, 4), 1);
    q.bar_write(bar3 + 16, 0xFEE0_0000, 4);
    q.bar_write(bar3 + 24, 0x4041, 2);
    q.bar_write(bar3 + 26, 0x0001, 2);
    assert_eq!(q.bar_read(bar3 + 24, 4), 0x0001_4041, "narrow writes merge");
    assert_eq!(q.bar_read(bar3 + 16, 8), 0xFEE0_0000, "8-byte read");

    // MSI-X mode in the model, vector 1 for the "other" causes; MSI-X enabled in config.
    q.bar_write(
        BASE + GPIE as u64,
        u64::from(gpie::MSIX_MODE | gpie::NSICR),
        4,
    );
    q.bar_write(BASE + IVAR_MISC as u64, u64::from((1 | IVAR_VALID) << 8), 4);
    q.bar_write(BASE + EIMS as u64, 1 << 1, 4);
    q.bar_write(BASE + IMS as u64, u64::from(IntCause::LSC.bits()), 4);
    q.cfg_write(0x72, 0x8000, 2);
    q.bar_write(BASE + ICS as u64, u64::from(IntCause::LSC.bits()), 4);
    assert_eq!(q.bar_read(pba, 4), 1 << 1, "entry 1 masked: pending");
    q.bar_write(pba, 0, 4);
    assert_eq!(q.bar_read(pba, 4), 1 << 1, "the PBA is read-only");
    q.bar_write(bar3 + 28, 0, 4);
    assert_eq!(q.bar_read(pba, 4), 0, "unmasked: sent");

    // The function mask holds a message the same way.
    q.cfg_write(0x72, 0xC000, 2);
    q.bar_write(BASE + EIMS as u64, 1 << 1, 4);
    q.bar_write(BASE + ICS as u64, u64::from(IntCause::LSC.bits()), 4);
    assert_eq!(q.bar_read(pba, 4), 1 << 1);
    q.cfg_write(0x72, 0x8000, 2);
    assert_eq!(q.bar_read(pba, 4), 0);
    let _ = q.cfg_read(0, 2);
    assert_eq!(eventfd_count(&irq), 0, "no INTx with MSI-X enabled");

    // MSI instead, the model in legacy mode: its message is counted, INTx stays low.
    q.cfg_write(0x72, 0, 2);
    q.cfg_write(0x52, 1, 2);
    q.bar_write(BASE + GPIE as u64, 0, 4);
    let _ = q.bar_read(BASE + ICR as u64, 4);
    q.bar_write(BASE + ICS as u64, u64::from(IntCause::LSC.bits()), 4);
    let _ = q.cfg_read(0, 2);
    assert_eq!(eventfd_count(&irq), 0, "no INTx with MSI enabled");
    assert_eq!(q.cfg_read(0x06, 2) & 0x8, 0, "INTx status stays clear");
    // MSI off: the pending cause asserts INTx.
    q.cfg_write(0x52, 0, 2);
    let _ = q.cfg_read(0, 2); // a round trip: the server has evaluated the level
    assert_eq!(eventfd_count(&irq), 1, "INTx once MSI is off");

    // FLR: config, table and model back to power-on.
    q.cfg_write(0xa8, 0x8000, 2);
    assert_eq!(q.cfg_read(0x10, 4), 0, "BAR0 unassigned");
    assert_eq!(q.cfg_read(0xa8, 2), 0x2810, "DevCtl at reset; FLR reads 0");

    drop(q);
    let (r, mut server) = t.join().unwrap();
    let stats = r.expect("EOF ends serving cleanly");
    assert_eq!(stats.msix_pending, 2);
    assert_eq!(
        stats.msix_dropped, 2,
        "two messages released, no path for either"
    );
    assert_eq!(stats.msi_dropped, 1);
    assert_eq!(stats.flrs, 1);
    assert_eq!(stats.bar_misses, 0);
    let table = server.device_host_mut().0.msix_table().unwrap();
    assert!(
        table.masked(1) && table.read(16) == 0,
        "FLR reset the table"
    );
}
