use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::testutil::TempDir;

fn sample(k: u64) -> ClockSample {
    ClockSample {
        phc_ns: k,
        mono_ns: k * 3 + 1,
        rate_ppb: k as f64,
        generation: !k,
    }
}

#[test]
fn publish_and_read() {
    let dir = TempDir::new("cp");
    let path = dir.path().join("page");
    let w = ClockPageWriter::create(&path).unwrap();
    let r = ClockPageReader::open(&path).unwrap();
    assert_eq!(r.read(), Err(ClockPageError::Empty));
    let s = ClockSample {
        phc_ns: 1_000,
        mono_ns: 2_000,
        rate_ppb: -12.5,
        generation: 7,
    };
    w.publish(&s);
    assert_eq!(r.read(), Ok(s));
    assert_eq!(w.read(), Ok(s));
    w.publish(&sample(5));
    assert_eq!(r.read(), Ok(sample(5)));
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(m.len(), PAGE_SIZE as u64);
    assert_eq!(m.permissions().mode() & 0o777, 0o644);
    drop(w);
    assert_eq!(
        r.read(),
        Err(ClockPageError::Empty),
        "clean writer exit invalidates"
    );
}

#[test]
fn one_writer_at_a_time() {
    let dir = TempDir::new("cp2");
    let path = dir.path().join("page");
    let w = ClockPageWriter::create(&path).unwrap();
    assert!(matches!(
        ClockPageWriter::create(&path),
        Err(ClockPageError::InUse(_))
    ));
    drop(w);
    let w2 = ClockPageWriter::create(&path).unwrap();
    w2.publish(&sample(1));
    assert_eq!(ClockPageReader::open(&path).unwrap().read(), Ok(sample(1)));
}

/// Issue 23: the writer's "in use" lock was a flock on the page, which any reader may take
/// (flock needs only a read-only descriptor): a reader holding it kept igcd from starting.
#[test]
fn a_reader_holding_a_flock_on_the_page_does_not_keep_the_writer_out() {
    use std::os::fd::AsRawFd;
    let dir = TempDir::new("cp-flock");
    let path = dir.path().join("page");
    drop(ClockPageWriter::create(&path).unwrap());
    let reader = std::fs::File::open(&path).unwrap();
    // Safety: flock on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(reader.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(rc, 0, "a read-only descriptor may flock the page");
    let w =
        ClockPageWriter::create(&path).expect("the reader's flock must not keep the writer out");
    w.publish(&sample(2));
    assert_eq!(ClockPageReader::open(&path).unwrap().read(), Ok(sample(2)));
    let lock = super::platform::lock_path(&path);
    let mode = std::fs::metadata(&lock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the lock only its owner may open");
}

#[test]
fn restarted_writer_takes_over_mapped_page() {
    let dir = TempDir::new("cp3");
    let path = dir.path().join("page");
    let w = ClockPageWriter::create(&path).unwrap();
    w.publish(&sample(1));
    let r = ClockPageReader::open(&path).unwrap();
    drop(w);
    let w2 = ClockPageWriter::create(&path).unwrap();
    assert_eq!(
        r.read(),
        Err(ClockPageError::Empty),
        "no sample of the old epoch"
    );
    w2.publish(&sample(2));
    assert_eq!(r.read(), Ok(sample(2)), "old mapping sees the new writer");
}

#[test]
fn open_errors() {
    let dir = TempDir::new("cp4");
    assert!(matches!(
        ClockPageReader::open(dir.path().join("none")),
        Err(ClockPageError::Io(_))
    ));
    let short = dir.path().join("short");
    std::fs::write(&short, b"PTPCLKPG").unwrap();
    assert_eq!(
        ClockPageReader::open(&short).err(),
        Some(ClockPageError::BadMagic)
    );
    let zeros = dir.path().join("zeros");
    std::fs::write(&zeros, vec![0u8; PAGE_SIZE]).unwrap();
    assert_eq!(
        ClockPageReader::open(&zeros).err(),
        Some(ClockPageError::BadMagic)
    );
    let v2 = dir.path().join("v2");
    let mut page = vec![0u8; PAGE_SIZE];
    page[..8].copy_from_slice(&MAGIC.to_le_bytes());
    page[8..16].copy_from_slice(&2u64.to_le_bytes());
    std::fs::write(&v2, &page).unwrap();
    assert_eq!(
        ClockPageReader::open(&v2).err(),
        Some(ClockPageError::BadVersion {
            got: 2,
            want: LAYOUT_VERSION
        })
    );
    // A writer re-initialises a foreign file.
    let w = ClockPageWriter::create(&v2).unwrap();
    w.publish(&sample(3));
    assert_eq!(ClockPageReader::open(&v2).unwrap().read(), Ok(sample(3)));
}

#[test]
fn writer_refuses_a_file_it_did_not_make() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("cp-foreign");
    // A hard link to another file: sizing the page would truncate that file.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = dir.path().join("link");
    std::fs::hard_link(&victim, &link).unwrap();
    match ClockPageWriter::create(&link) {
        Err(ClockPageError::Io(msg)) => assert!(msg.contains("2 links"), "{msg}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // A fresh page is 0644 whatever the umask: readable by all, writable by its owner only.
    let page = dir.path().join("page");
    let _w = ClockPageWriter::create(&page).unwrap();
    let mode = std::fs::metadata(&page).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o644);
    // Another user's file (one they could chmod back or rewrite): only root can make one.
    // Safety: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = dir.path().join("theirs");
        std::fs::write(&theirs, b"").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        match ClockPageWriter::create(&theirs) {
            Err(ClockPageError::Io(msg)) => assert!(msg.contains("owner uid 65534"), "{msg}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
    } else {
        eprintln!("not root: the foreign-owner case is not checked");
    }
}

#[test]
fn stuck_writer_gives_busy_not_a_hang() {
    let dir = TempDir::new("cp5");
    let path = dir.path().join("page");
    let w = ClockPageWriter::create(&path).unwrap();
    w.publish(&sample(1));
    // A writer that died inside an update leaves the counter odd.
    w.map.page().seq.fetch_add(1, Ordering::Relaxed);
    let r = ClockPageReader::open(&path).unwrap();
    assert_eq!(r.read(), Err(ClockPageError::Busy));
    // The next publish repairs it.
    w.publish(&sample(2));
    assert_eq!(r.read(), Ok(sample(2)));
}

#[test]
fn phc_at_extrapolates_both_ways() {
    let s = ClockSample {
        phc_ns: 1_000_000_000,
        mono_ns: 500,
        rate_ppb: 100.0,
        generation: 1,
    };
    assert_eq!(s.phc_at(500), 1_000_000_000);
    // One second later the PHC has gained 100 ns.
    assert_eq!(s.phc_at(1_000_000_500), 2_000_000_100);
    // One second earlier it was 100 ns less ahead.
    let s2 = ClockSample {
        phc_ns: 5_000_000_000,
        mono_ns: 2_000_000_000,
        ..s
    };
    assert_eq!(s2.phc_at(1_000_000_000), 3_999_999_900);
    assert_eq!(s.phc_at(0), 1_000_000_000 - 500);
    // Saturation and a nonsense rate.
    let early = ClockSample {
        phc_ns: 10,
        mono_ns: 1_000,
        rate_ppb: 0.0,
        generation: 0,
    };
    assert_eq!(early.phc_at(0), 0);
    let nan = ClockSample {
        rate_ppb: f64::NAN,
        ..s
    };
    assert_eq!(nan.phc_at(1_000_000_500), 2_000_000_000);
    let late = ClockSample {
        phc_ns: u64::MAX - 5,
        mono_ns: 0,
        rate_ppb: 1e9,
        generation: 0,
    };
    assert_eq!(late.phc_at(u64::MAX), u64::MAX);
}

/// In-process smoke test of the seqlock (the cross-process proof is tests/clockpage_stress.rs).
#[test]
fn threads_never_see_torn_samples() {
    let dir = TempDir::new("cp6");
    let path = dir.path().join("page");
    let w = ClockPageWriter::create(&path).unwrap();
    w.publish(&sample(0));
    let r = ClockPageReader::open(&path).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for k in 1..200_000 {
                w.publish(&sample(k));
            }
            stop.store(true, Ordering::Relaxed);
        });
        let mut last = 0;
        while !stop.load(Ordering::Relaxed) {
            match r.read() {
                Ok(x) => {
                    assert_eq!(x, sample(x.phc_ns), "torn read");
                    assert!(x.phc_ns >= last);
                    last = x.phc_ns;
                }
                Err(ClockPageError::Busy) => {}
                Err(e) => panic!("{e}"),
            }
        }
    });
}

/// The page a Redox driver serves from its own memory: published samples read back through
/// the region a scheme would lend, which is page-aligned and holds the initialised header.
#[test]
fn a_private_page_is_published_at_its_region() {
    let w = ClockPageWriter::private().unwrap();
    assert_eq!(w.read(), Err(ClockPageError::Empty));
    w.publish(&sample(7));
    assert_eq!(w.read().unwrap(), sample(7));
    let at = w.region();
    assert_eq!(
        at % PAGE_SIZE,
        0,
        "page-aligned: mmap_prep returns it as a page"
    );
    // Safety: `at` is the writer's live page; Page is all atomics.
    let page = unsafe { &*(at as *const Page) };
    page.check_header().unwrap();
    assert_eq!(page.read().unwrap(), sample(7));
}
