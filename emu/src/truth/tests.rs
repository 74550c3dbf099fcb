use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use intel_regs::igc::{SYSTIMH, SYSTIML, TIMINCA, TSAUXC, Tsauxc};
use ptp_pci::emulated::Device;

use super::*;
use crate::clock::VirtualClock;
use crate::host::RecordingHost;
use crate::igc::{I225, I225Config};
use crate::phc::{NS_PER_S, Phc, SYSTIM_WRAP_NS};
use crate::rng::SplitMix64;

/// A fresh path in the temp dir, removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::AtomicU32;
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!("ptp-truth-{}-{tag}-{n}", std::process::id())))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Issue 23: `--truth` followed a planted symlink and chmod'ed and truncated its target; a
/// hard link to another file was taken over the same way. Both are refused, nothing changed.
#[test]
fn a_planted_symlink_or_hard_link_is_refused_and_its_target_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let target = TempPath::new("victim");
    std::fs::write(&target.0, b"precious").unwrap();
    std::fs::set_permissions(&target.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = TempPath::new("symlink");
    std::os::unix::fs::symlink(&target.0, &link.0).unwrap();
    let e = TruthWriter::create(&link.0).err();
    assert!(matches!(e, Some(TruthError::Foreign { .. })), "{e:?}");
    let hard = TempPath::new("hardlink");
    std::fs::hard_link(&target.0, &hard.0).unwrap();
    let e = TruthWriter::create(&hard.0).err();
    assert!(matches!(e, Some(TruthError::Foreign { .. })), "{e:?}");
    assert_untouched(&target.0, b"precious", 0o600);
}

/// `path` still holds `content` (not truncated) with permission bits `mode` (not chmod'ed).
fn assert_untouched(path: &std::path::Path, content: &[u8], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(path).unwrap();
    assert_eq!(
        std::fs::read(path).unwrap(),
        content,
        "{} truncated",
        path.display()
    );
    assert_eq!(
        m.permissions().mode() & 0o7777,
        mode,
        "{} chmod'ed",
        path.display()
    );
}

/// The attack above as issue 23 made it, by another user: uid 65534 plants, in a sticky
/// world-writable directory (as /tmp), a symlink to a file of root's and a file of its own;
/// root then creates the record at each. Both are refused as foreign, nothing is changed.
/// (With fs.protected_symlinks=0, as here, the pre-fix form followed the symlink.) Needs root
/// to plant as uid 65534.
#[test]
fn unprivileged_plants_in_a_sticky_directory_are_refused() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    const NOBODY: u32 = 65534;
    // Safety: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "needs root (plants files as uid {NOBODY}); run as root or skip with `-- --skip unprivileged`"
    );
    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = Dir(TempPath::new("sticky").0.clone());
    std::fs::create_dir(&dir.0).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = TempPath::new("root-victim");
    std::fs::write(&victim.0, b"root's").unwrap();
    std::fs::set_permissions(&victim.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    let as_nobody = |program: &str, args: &[&std::ffi::OsStr]| {
        let st = std::process::Command::new(program)
            .args(args)
            .uid(NOBODY)
            .gid(NOBODY)
            .status()
            .unwrap();
        assert!(st.success(), "{program} {args:?} as uid {NOBODY}: {st}");
    };
    let link = dir.0.join("truth-link");
    as_nobody(
        "ln",
        &["-s".as_ref(), victim.0.as_os_str(), link.as_os_str()],
    );
    let planted = dir.0.join("truth-file");
    as_nobody(
        "sh",
        &[
            "-c".as_ref(),
            "printf forged > \"$0\"".as_ref(),
            planted.as_os_str(),
        ],
    );
    let planted_mode = std::fs::metadata(&planted).unwrap().mode() & 0o7777;
    for (path, what) in [(&link, "symlink"), (&planted, "file")] {
        let m = std::fs::symlink_metadata(path).unwrap();
        assert_eq!(m.uid(), NOBODY, "the {what} is uid {NOBODY}'s");
        let e = TruthWriter::create(path).err();
        assert!(
            matches!(e, Some(TruthError::Foreign { .. })),
            "root creating the record at uid {NOBODY}'s {what}: {e:?}"
        );
    }
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_untouched(&victim.0, b"root's", 0o600);
    assert_untouched(&planted, b"forged", planted_mode);
}

#[test]
fn missing_wrong_size_and_wrong_magic_are_typed_errors() {
    let p = TempPath::new("bad");
    assert!(matches!(
        TruthReader::open(&p.0),
        Err(TruthError::Missing(_))
    ));
    std::fs::write(&p.0, b"short").unwrap();
    assert_eq!(
        TruthReader::open(&p.0).err(),
        Some(TruthError::BadSize {
            got: 5,
            want: TRUTH_FILE_LEN as u64
        })
    );
    std::fs::write(&p.0, vec![0u8; TRUTH_FILE_LEN]).unwrap();
    assert_eq!(TruthReader::open(&p.0).err(), Some(TruthError::BadMagic));
    let mut page = vec![0u8; TRUTH_FILE_LEN];
    page[..8].copy_from_slice(&TRUTH_MAGIC.to_le_bytes());
    page[8..16].copy_from_slice(&99u64.to_le_bytes());
    std::fs::write(&p.0, &page).unwrap();
    assert_eq!(
        TruthReader::open(&p.0).err(),
        Some(TruthError::BadVersion {
            got: 99,
            want: TRUTH_VERSION
        })
    );
}

#[test]
fn empty_busy_and_corrupt_records_are_typed_errors() {
    let p = TempPath::new("states");
    let w = TruthWriter::create(&p.0).unwrap();
    let r = TruthReader::open(&p.0).unwrap();
    assert_eq!(r.snapshot().err(), Some(TruthError::Empty));
    w.publish(&Phc::new(0, 5, 0).law());
    assert_eq!(r.snapshot().unwrap().generation, 1);
    // A law outside the model's range (base word 7 = high half of base, far beyond 2^32 s).
    {
        let f = std::fs::OpenOptions::new().write(true).open(&p.0).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&u64::MAX.to_le_bytes(), 7 * 8).unwrap();
    }
    assert_eq!(r.snapshot().err(), Some(TruthError::Corrupt));
    w.publish(&Phc::new(0, 5, 0).law());
    assert!(r.snapshot().is_ok());
    // A writer stuck inside an update: readers give up after a bounded number of tries.
    w.abandon_update();
    assert_eq!(r.snapshot().err(), Some(TruthError::Busy));
    assert_eq!(r.now().err(), Some(TruthError::Busy));
    // A writer that stops cleanly empties the record; a new one takes it over in place.
    drop(w);
    assert_eq!(r.snapshot().err(), Some(TruthError::Empty));
    let w2 = TruthWriter::create(&p.0).unwrap();
    w2.publish(&Phc::new(0, 7, 0).law());
    assert_eq!(r.snapshot().unwrap().law.ns_at(0), 7);
}

/// Drives `dev` with a random register write (settime, TIMINCA, stop/start) or a crystal change.
fn random_change(dev: &mut I225, rng: &mut SplitMix64, host: &mut RecordingHost) {
    match rng.below(5) {
        0 => {
            dev.write32(0, SYSTIML, rng.below(NS_PER_S) as u32, host);
            dev.write32(0, SYSTIMH, rng.next_u64() as u32, host);
        }
        1 | 2 => dev.write32(0, TIMINCA, rng.next_u64() as u32, host),
        3 => {
            let stop = if rng.chance(0.5) {
                Tsauxc::DISABLE0.bits()
            } else {
                0
            };
            dev.write32(0, TSAUXC, stop, host)
        }
        _ => dev.set_osc_error_ppb(rng.symmetric(2_000_000)),
    }
}

#[test]
fn record_evaluates_bit_for_bit_like_the_model_after_random_changes() {
    let p = TempPath::new("exact");
    let clock = VirtualClock::new(1_000);
    let mut dev = I225::new(I225Config::i225(clock.source()));
    let w = Arc::new(TruthWriter::create(&p.0).unwrap());
    dev.set_observer(Some(w.clone()));
    let r = TruthReader::open(&p.0).unwrap();
    let mut host = RecordingHost::new();
    let mut rng = SplitMix64::new(42);
    let mut checked = 0;
    for _ in 0..400 {
        clock.advance(rng.below(3 * NS_PER_S));
        random_change(&mut dev, &mut rng, &mut host);
        let law = r.snapshot().unwrap().law;
        // Many instants after the change, up to days later, without further rebases.
        let t0 = clock.now();
        for k in 0..20 {
            let t = t0 + rng.below(NS_PER_S << (k % 18));
            clock.set(t);
            assert_eq!(law.ns_at(t), dev.phc_now_ns(), "t {t}, law {law:?}");
            checked += 1;
        }
    }
    assert_eq!(checked, 8_000);
    // Every change was published (plus the law at attach time).
    assert!(r.snapshot().unwrap().generation > 400);
}

#[test]
fn bar_accesses_are_counted_in_the_record() {
    let p = TempPath::new("count");
    let mut dev = I225::new(I225Config::i225(VirtualClock::new(0).source()));
    let w = Arc::new(TruthWriter::create(&p.0).unwrap());
    dev.set_observer(Some(w));
    let r = TruthReader::open(&p.0).unwrap();
    let mut host = RecordingHost::new();
    for _ in 0..7 {
        dev.read32(0, SYSTIML, &mut host);
    }
    dev.write32(0, TIMINCA, 1, &mut host);
    dev.read32(3, 0, &mut host);
    let s = r.snapshot().unwrap();
    assert_eq!((s.bar_reads, s.bar_writes), (8, 1));
    assert_eq!((dev.total_reads(), dev.total_writes()), (8, 1));
}

#[test]
fn torn_reads_are_retried_under_a_busy_writer() {
    // The writer publishes laws whose every part derives from one counter k; a reader must
    // never see parts of two different k.
    let p = TempPath::new("torn");
    let w = Arc::new(TruthWriter::create(&p.0).unwrap());
    let r = TruthReader::open(&p.0).unwrap();
    let law = |k: u64| {
        PhcLaw::from_parts(LawParts {
            base_t: k,
            base: u128::from(k) << 40 | u128::from(k),
            rem: u128::from(k % 1000),
            timinca: k as u32,
            osc_ppb: -(k as i64 % 1000),
            running: k % 2 == 0,
            format: crate::phc::TimeFormat::Igc,
        })
        .unwrap()
    };
    w.publish(&law(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (w, stop) = (w.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 1u64;
            while !stop.load(Ordering::Relaxed) {
                w.publish(&law(k));
                k += 1;
            }
            k
        })
    };
    let mut seen = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
    while std::time::Instant::now() < deadline {
        match r.snapshot() {
            Ok(s) => {
                let k = s.law.parts().base_t;
                assert_eq!(s.law, law(k), "torn read");
                seen += 1;
            }
            // A reader may lose every one of its spins to a writer that never pauses.
            Err(TruthError::Busy) => {}
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let published = writer.join().unwrap();
    assert!(seen > 0 && published > 1, "{seen} reads, {published} laws");
}

#[test]
fn true_offset_is_the_exact_difference_and_handles_the_wrap() {
    let (pa, pb) = (TempPath::new("a"), TempPath::new("b"));
    let (wa, wb) = (
        TruthWriter::create(&pa.0).unwrap(),
        TruthWriter::create(&pb.0).unwrap(),
    );
    let (ra, rb) = (
        TruthReader::open(&pa.0).unwrap(),
        TruthReader::open(&pb.0).unwrap(),
    );
    // Two stopped clocks (so the instant does not matter): a just past the 2^32 s wrap, b just
    // before it. a − b is +30 ns the short way round.
    let mut a = Phc::new(0, 10, 0);
    a.set_running(0, false);
    let mut b = Phc::new(0, SYSTIM_WRAP_NS - 20, 0);
    b.set_running(0, false);
    wa.publish(&a.law());
    wb.publish(&b.law());
    assert_eq!(true_offset(&ra, &rb).unwrap().offset_ns, 30);
    assert_eq!(true_offset(&rb, &ra).unwrap().offset_ns, -30);
    // Running clocks on the host clock: 1 ms apart, +100 ppm vs nominal; the offset at the
    // returned instant is exactly what the two laws give there.
    let now = crate::clock::HostClock::new().now_ns();
    let a = Phc::new(now, 5 * NS_PER_S + 1_000_000, 100_000);
    let b = Phc::new(now, 5 * NS_PER_S, 0);
    wa.publish(&a.law());
    wb.publish(&b.law());
    let o = true_offset(&ra, &rb).unwrap();
    assert!(o.at_t >= now);
    assert_eq!(o.offset_ns, a.ns_at(o.at_t) as i64 - b.ns_at(o.at_t) as i64);
    assert!(o.offset_ns >= 1_000_000);
}

#[test]
fn igb_laws_carry_their_format_through_the_record() {
    use crate::igb::{Igb, IgbConfig, IgbPart};
    for part in [IgbPart::I210, IgbPart::I350, IgbPart::E82576] {
        let clock = VirtualClock::new(1_000);
        let mut cfg = IgbConfig::new(part, clock.source());
        cfg.osc_error_ppb = -300;
        let mut dev = Igb::new(cfg).unwrap();
        let p = TempPath::new(part.name());
        dev.set_observer(Some(Arc::new(TruthWriter::create(&p.0).unwrap())));
        let mut host = RecordingHost::new();
        // Start the clock as Linux's PTP reset does, then run at a corrected rate.
        let (reg, v) = match part {
            IgbPart::E82576 => (TIMINCA, 0x0180_0000 + 40),
            _ => (TSAUXC, 0),
        };
        dev.write32(0, reg, v, &mut host);
        clock.advance(5 * NS_PER_S);
        let s = TruthReader::open(&p.0).unwrap().snapshot().unwrap();
        assert_eq!(s.law.format(), part.time_format());
        let t = clock.now();
        assert_eq!(s.law.ns_at(t), dev.phc_now_ns(), "{part:?}");
        assert_eq!(s.law.raw_at(t), dev.phc_raw(), "{part:?}");
        assert_ne!(dev.phc_now_ns(), 0);
    }
}

#[test]
fn driver_clock_maps_counts_like_a_timecounter_wrap_and_stamps_behind_included() {
    // i350-like: 40-bit ns count, no fraction.
    let mask = (1u64 << 40) - 1;
    let d = DriverClock {
        count: mask - 9,
        fp: 1_000_000,
        mask,
        shift: 0,
        mult: 1,
        mult_shift: 0,
    };
    // 20 counts later, across the wrap.
    assert_eq!(d.ns_of(10), 1_000_020);
    // A stamp 5 counts before the base is earlier, not a wrap ahead.
    assert_eq!(d.ns_of(mask - 14), 999_995);
    // 82576-like: ns << 19, 64-bit count.
    let d = DriverClock {
        count: 7 << 19,
        fp: 100 << 19,
        mask: u64::MAX,
        shift: 19,
        mult: 1 << 40,
        mult_shift: 40,
    };
    assert_eq!(d.ns_of((7 + 50) << 19), 150);
    assert_eq!(d.ns_of(((7 + 50) << 19) + (1 << 18)), 150);
    // The same at +1000 ppm (the driver steering the rate; 2^40/1000 truncated, a hair under):
    // 1 s of counts reads just under 1.001 s, and a stamp 1 s behind the base just under
    // 1.001 s earlier (whole ns truncate down).
    let fast = DriverClock {
        mult: (1 << 40) + (1 << 40) / 1000,
        fp: 10_000_000_000 << 19,
        ..d
    };
    assert_eq!(
        fast.ns_of((7 << 19) + (1_000_000_000 << 19)),
        11_000_999_999
    );
    assert_eq!(
        fast.ns_of((7u64 << 19).wrapping_sub(1_000_000_000 << 19)),
        8_999_000_000
    );
}

#[test]
fn a_published_driver_clock_is_the_clock_readers_evaluate() {
    let (pa, pb) = (TempPath::new("drv-a"), TempPath::new("drv-b"));
    let (wa, wb) = (
        TruthWriter::create(&pa.0).unwrap(),
        TruthWriter::create(&pb.0).unwrap(),
    );
    let (ra, rb) = (
        TruthReader::open(&pa.0).unwrap(),
        TruthReader::open(&pb.0).unwrap(),
    );
    // a: an 82576 counter stopped at a known count; b: an i225 stopped at 5 s.
    let mut a = Phc::with_format(TimeFormat::E82576, 0, 3 * NS_PER_S, 0);
    a.set_running(0, false);
    let mut b = Phc::new(0, 5 * NS_PER_S, 0);
    b.set_running(0, false);
    wa.publish(&a.law());
    wb.publish(&b.law());
    // Without a driver clock the record is the raw counter's ns view (3 s).
    assert_eq!(
        true_offset(&ra, &rb).unwrap().offset_ns,
        -2 * NS_PER_S as i64
    );
    // The driver re-based its timecounter: the counter's current value now reads as 5 s + 7 ns.
    let raw = a.law().raw_at(0);
    let mut ran = false;
    wa.driver_clock_update(&mut || {
        ran = true;
        Some(DriverClock {
            count: raw,
            fp: u128::from(5 * NS_PER_S + 7) << 19,
            mask: u64::MAX,
            shift: 19,
            mult: 1,
            mult_shift: 0,
        })
    });
    assert!(ran, "the driver's change runs inside the update");
    assert_eq!(true_offset(&ra, &rb).unwrap().offset_ns, 7);
    assert_eq!(true_offset(&rb, &ra).unwrap().offset_ns, -7);
    assert_eq!(ra.now().unwrap().0, 5 * NS_PER_S + 7);
    let s = ra.snapshot().unwrap();
    assert!(s.driver.is_some());
    assert_eq!(s.ns_at(0), 5 * NS_PER_S + 7);
    // A model law change keeps the driver clock; the driver withdrawing it restores SYSTIM.
    wa.publish(&a.law());
    assert_eq!(true_offset(&ra, &rb).unwrap().offset_ns, 7);
    wa.driver_clock_update(&mut || None);
    assert_eq!(
        true_offset(&ra, &rb).unwrap().offset_ns,
        -2 * NS_PER_S as i64
    );
}

#[test]
fn a_corrupt_driver_clock_is_a_typed_error_and_a_new_writer_clears_it() {
    let p = TempPath::new("drv-corrupt");
    let w = TruthWriter::create(&p.0).unwrap();
    let r = TruthReader::open(&p.0).unwrap();
    w.publish(&Phc::with_format(TimeFormat::I350, 0, 5, 0).law());
    w.driver_clock_update(&mut || {
        Some(DriverClock {
            count: 0,
            fp: 0,
            mask: (1 << 40) - 1,
            shift: 0,
            mult: 1 << 40,
            mult_shift: 40,
        })
    });
    assert!(r.snapshot().unwrap().driver.is_some());
    // Word 21 = drv_mask: not of the form 2^k − 1.
    {
        let f = std::fs::OpenOptions::new().write(true).open(&p.0).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&0x1234u64.to_le_bytes(), 21 * 8).unwrap();
    }
    assert_eq!(r.snapshot().err(), Some(TruthError::Corrupt));
    // Words 23/24 = drv_mult / drv_mult_shift: a zero rate, a fraction of 64 bits or more.
    for (word, v) in [(23u64, 0u64), (24, 64)] {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&p.0).unwrap();
        f.write_all_at(&((1u64 << 40) - 1).to_le_bytes(), 21 * 8)
            .unwrap();
        f.write_all_at(&(1u64 << 40).to_le_bytes(), 23 * 8).unwrap();
        f.write_all_at(&40u64.to_le_bytes(), 24 * 8).unwrap();
        assert!(r.snapshot().unwrap().driver.is_some(), "restored");
        f.write_all_at(&v.to_le_bytes(), word * 8).unwrap();
        assert_eq!(r.snapshot().err(), Some(TruthError::Corrupt), "word {word}");
    }
    // A restarted daemon takes the record over without its predecessor's timecounter.
    drop(w);
    let w = TruthWriter::create(&p.0).unwrap();
    w.publish(&Phc::with_format(TimeFormat::I350, 0, 5, 0).law());
    assert_eq!(r.snapshot().unwrap().driver, None);
}
