//! phc-pins: a Linux PTP clock's pins from the command line, for the VM tests (the guest has
//! no testptp: that tool ships only in the kernel's source tree). The ioctls and structures of
//! `<linux/ptp_clock.h>`, written from the UAPI header's layout (x86_64), printing what testptp
//! prints:
//!
//! ```text
//! phc-pins -d /dev/ptp0 [-i CHAN] [-L PIN,FUNC] [-p PERIOD_NS] [-e N]
//! ```
//!
//! `-L` sets a pin's function (PTP_PIN_SETFUNC), `-p` starts a periodic output at the PHC's
//! next whole second + 2 (PTP_PEROUT_REQUEST2, as `testptp -p`), `-e N` enables external
//! timestamps (PTP_EXTTS_REQUEST2, both edges) and prints N events (`event index C at S.N`).

use std::process::ExitCode;

fn main() -> ExitCode {
    match imp::run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("phc-pins: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::os::fd::AsRawFd;

    /// `_IOW('=', nr, size)` and friends on x86_64.
    const fn ioc(dir: u64, nr: u64, size: u64) -> u64 {
        (dir << 30) | (size << 16) | (0x3D << 8) | nr
    }
    const W: u64 = 1;
    const PTP_PIN_SETFUNC: u64 = ioc(W, 7, 96);
    const PTP_EXTTS_REQUEST2: u64 = ioc(W, 11, 16);
    const PTP_PEROUT_REQUEST2: u64 = ioc(W, 12, 56);
    const PTP_ENABLE_FEATURE: u32 = 1;
    const PTP_RISING_EDGE: u32 = 1 << 1;
    const PTP_FALLING_EDGE: u32 = 1 << 2;

    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct ClockTime {
        sec: i64,
        nsec: u32,
        reserved: u32,
    }

    #[repr(C)]
    struct PinDesc {
        name: [u8; 64],
        index: u32,
        func: u32,
        chan: u32,
        rsv: [u32; 5],
    }

    #[repr(C)]
    #[derive(Default)]
    struct PeroutRequest {
        start: ClockTime,
        period: ClockTime,
        index: u32,
        flags: u32,
        rsv: [u32; 4],
    }

    #[repr(C)]
    #[derive(Default)]
    struct ExttsRequest {
        index: u32,
        flags: u32,
        rsv: [u32; 2],
    }

    #[repr(C)]
    #[derive(Default)]
    struct ExttsEvent {
        t: ClockTime,
        index: u32,
        flags: u32,
        rsv: [u32; 2],
    }

    const _: () = {
        assert!(size_of::<PinDesc>() == 96);
        assert!(size_of::<PeroutRequest>() == 56);
        assert!(size_of::<ExttsRequest>() == 16);
        assert!(size_of::<ExttsEvent>() == 32);
    };

    fn ioctl<T>(fd: i32, req: u64, arg: &mut T, what: &str) -> Result<(), String> {
        // Safety: `arg` is a live, properly sized repr(C) value of the type the request
        // encodes (sizes checked above); the kernel reads or writes only within it.
        let r = unsafe { libc::ioctl(fd, req as _, std::ptr::from_mut(arg)) };
        if r < 0 {
            return Err(format!("{what}: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The PHC's time (clock_gettime on the dynamic clock of `fd`).
    fn phc_now(fd: i32) -> Result<libc::timespec, String> {
        let clk = ((!fd) << 3) | 3;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // Safety: `ts` is a valid timespec the call writes.
        if unsafe { libc::clock_gettime(clk, &raw mut ts) } != 0 {
            return Err(format!(
                "clock_gettime: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(ts)
    }

    fn num(s: &str, what: &str) -> Result<u64, String> {
        s.parse().map_err(|_| format!("bad {what} {s:?}"))
    }

    pub fn run(args: Vec<String>) -> Result<(), String> {
        let (mut dev, mut chan, mut pin, mut period, mut events) =
            ("/dev/ptp0".to_string(), 0u32, None, None, None);
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            let mut v = || it.next().ok_or(format!("{a} needs a value"));
            match a.as_str() {
                "-d" => dev = v()?,
                "-i" => chan = num(&v()?, "channel")? as u32,
                "-L" => {
                    let s = v()?;
                    let (p, f) = s.split_once(',').ok_or("-L PIN,FUNC")?;
                    pin = Some((num(p, "pin")? as u32, num(f, "function")? as u32));
                }
                "-p" => period = Some(num(&v()?, "period")?),
                "-e" => events = Some(num(&v()?, "count")?),
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dev)
            .map_err(|e| format!("{dev}: {e}"))?;
        let fd = f.as_raw_fd();
        if let Some((index, func)) = pin {
            let mut d = PinDesc {
                name: [0; 64],
                index,
                func,
                chan,
                rsv: [0; 5],
            };
            ioctl(fd, PTP_PIN_SETFUNC, &mut d, "PTP_PIN_SETFUNC")?;
            println!("set pin function okay");
        }
        if let Some(n) = events {
            let mut r = ExttsRequest {
                index: chan,
                flags: PTP_ENABLE_FEATURE | PTP_RISING_EDGE | PTP_FALLING_EDGE,
                rsv: [0; 2],
            };
            ioctl(fd, PTP_EXTTS_REQUEST2, &mut r, "PTP_EXTTS_REQUEST2")?;
            println!("external time stamp request okay");
            for _ in 0..n {
                let mut e = ExttsEvent::default();
                // Safety: `e` is a 32-byte repr(C) buffer, the size of one event.
                let got = unsafe {
                    libc::read(
                        fd,
                        std::ptr::from_mut(&mut e).cast(),
                        size_of::<ExttsEvent>(),
                    )
                };
                if got != size_of::<ExttsEvent>() as isize {
                    return Err(format!("read: {}", std::io::Error::last_os_error()));
                }
                println!("event index {} at {}.{:09}", e.index, e.t.sec, e.t.nsec);
            }
        }
        if let Some(p) = period {
            let now = phc_now(fd)?;
            let mut r = PeroutRequest {
                start: ClockTime {
                    sec: now.tv_sec + 2,
                    ..ClockTime::default()
                },
                period: ClockTime {
                    sec: (p / 1_000_000_000) as i64,
                    nsec: (p % 1_000_000_000) as u32,
                    reserved: 0,
                },
                index: chan,
                ..PeroutRequest::default()
            };
            ioctl(fd, PTP_PEROUT_REQUEST2, &mut r, "PTP_PEROUT_REQUEST2")?;
            println!(
                "periodic output request okay, start {}.000000000",
                r.start.sec
            );
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn run(_: Vec<String>) -> Result<(), String> {
        Err("Linux's PTP clock ioctls need Linux".into())
    }
}
