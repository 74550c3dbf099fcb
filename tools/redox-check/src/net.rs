//! `ptp-redox-check net ADDR/LEN PORT SECONDS`: the guest's half of the network check of
//! `tests/redox_device.rs` (issue 27). smolnetd (the kit's netstack) runs on igcd's `network.*`
//! scheme with only placeholder addresses; this gives its `eth0` an address through
//! `/scheme/netcfg` (a DHCP client would, and the kit has none), then echoes every UDP datagram
//! sent to PORT until SECONDS have passed, one console line per datagram:
//!
//! ```text
//! REDOX-NET addr 10.213.0.2/24 set
//! REDOX-NET listening 0.0.0.0:7777 for 60 s
//! REDOX-NET echo 1 12 B from 10.213.0.1:40000
//! REDOX-NET done 5 echoed
//! ```
//!
//! The ICMP echo (ping) is smolnetd's own.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The line prefix the host test reads.
pub const PREFIX: &str = "REDOX-NET";
/// Where netstack takes `eth0`'s address (base 9dd6901d, `netstack/src/scheme/netcfg`).
pub const ADDR_SET: &str = "/scheme/netcfg/ifaces/eth0/addr/set";

/// What the net mode was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPlan {
    /// `A.B.C.D/LEN`, as netcfg takes it.
    pub cidr: String,
    pub port: u16,
    pub duration: Duration,
}

/// Parses `ADDR/LEN PORT SECONDS` (after the `net` word).
pub fn parse(args: &[String]) -> Result<NetPlan, String> {
    let [cidr, port, secs] = args else {
        return Err(format!(
            "usage: ptp-redox-check net ADDR/LEN PORT SECONDS (got {args:?})"
        ));
    };
    let (addr, len) = cidr
        .split_once('/')
        .ok_or_else(|| format!("bad ADDR/LEN {cidr:?}"))?;
    addr.parse::<std::net::Ipv4Addr>()
        .map_err(|e| format!("bad address {addr:?}: {e}"))?;
    match len.parse::<u8>() {
        Ok(1..=32) => {}
        _ => return Err(format!("bad prefix length {len:?}")),
    }
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("bad PORT {port:?}"))?;
    let secs = secs
        .parse::<u64>()
        .ok()
        .filter(|s| (1..=3600).contains(s))
        .ok_or_else(|| format!("bad SECONDS {secs:?} (1..=3600)"))?;
    Ok(NetPlan {
        cidr: cidr.clone(),
        port,
        duration: Duration::from_secs(secs),
    })
}

/// Echoes every datagram on `sock` back to its sender until `until`; calls `seen` for each
/// with its number, length and sender. Returns how many were echoed.
pub fn echo_until(
    sock: &UdpSocket,
    until: Instant,
    mut seen: impl FnMut(u64, usize, SocketAddr),
) -> std::io::Result<u64> {
    let mut buf = [0u8; 2048];
    let mut n = 0;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(n);
        }
        sock.set_read_timeout(Some(left.min(Duration::from_millis(500))))?;
        match sock.recv_from(&mut buf) {
            Ok((len, from)) => {
                sock.send_to(&buf[..len], from)?;
                n += 1;
                seen(n, len, from);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

/// The whole net mode, its lines through `say`. Ok when the address was set and the socket
/// served for the whole duration.
pub fn run(plan: &NetPlan, say: impl Fn(&str)) -> Result<u64, String> {
    std::fs::write(ADDR_SET, format!("{}\n", plan.cidr)).map_err(|e| format!("{ADDR_SET}: {e}"))?;
    say(&format!("{PREFIX} addr {} set", plan.cidr));
    let sock = UdpSocket::bind(("0.0.0.0", plan.port)).map_err(|e| format!("UDP bind: {e}"))?;
    say(&format!(
        "{PREFIX} listening 0.0.0.0:{} for {} s",
        plan.port,
        plan.duration.as_secs()
    ));
    let n = echo_until(&sock, Instant::now() + plan.duration, |n, len, from| {
        say(&format!("{PREFIX} echo {n} {len} B from {from}"))
    })
    .map_err(|e| format!("UDP echo: {e}"))?;
    say(&format!("{PREFIX} done {n} echoed"));
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn arguments_are_checked() {
        assert_eq!(
            parse(&words("10.213.0.2/24 7777 60")),
            Ok(NetPlan {
                cidr: "10.213.0.2/24".into(),
                port: 7777,
                duration: Duration::from_secs(60)
            })
        );
        for bad in [
            "10.213.0.2 7777 60",
            "10.213.0/24 7777 60",
            "10.213.0.2/33 7777 60",
            "10.213.0.2/24 0 60",
            "10.213.0.2/24 7777 0",
            "10.213.0.2/24 7777",
        ] {
            assert!(parse(&words(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn datagrams_come_back_to_their_sender_until_the_deadline() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = server.local_addr().unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let t = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let n = echo_until(
                &server,
                Instant::now() + Duration::from_millis(1500),
                |n, l, f| seen.push((n, l, f)),
            )
            .unwrap();
            (n, seen)
        });
        let mut buf = [0u8; 64];
        for i in 0..3u8 {
            client.send_to(&[i; 10], at).unwrap();
            let (len, from) = client.recv_from(&mut buf).unwrap();
            assert_eq!((len, from, &buf[..len]), (10, at, &[i; 10][..]));
        }
        let t0 = Instant::now();
        let (n, seen) = t.join().unwrap();
        assert_eq!(n, 3);
        assert_eq!(seen.len(), 3);
        assert!(
            seen.iter()
                .all(|(_, l, f)| *l == 10 && *f == client.local_addr().unwrap())
        );
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the deadline bounds the loop"
        );
    }
}
