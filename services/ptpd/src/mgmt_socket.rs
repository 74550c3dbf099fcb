//! Linux host: IEEE 1588 management over a local Unix datagram socket, the way ptp4l offers
//! `/var/run/ptp4l` to `pmc -u`. GETs are answered from the engine's latest
//! [`MgmtSnapshot`](crate::ptp::manage::MgmtSnapshot); SETs go to the engine thread, which
//! carries out what the configuration allows for a privileged peer: root or one of
//! `privileged_uids`, as the clock scheme decides, from the sender's credentials that the
//! kernel attaches to each datagram (SO_PASSCRED / SCM_CREDENTIALS: a datagram socket has no
//! connected peer for SO_PEERCRED).
//!
//! One thread serves everyone, so nothing one requester does may make it wait: a SET is handed
//! to the engine and its answer collected when it comes (GETs are answered meanwhile), and a
//! reply that does not fit in a requester's full socket is dropped, not waited for.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use ptp_ipc::transport::SocketAccess;
use ptp_ipc::transport::sockfile::{self, SocketFile};

pub use crate::mgmt_access::SetAccess;
use crate::mgmt_access::{ENGINE_TIMEOUT, submit_set};
use crate::ptp::PtpStatusBoard;
use crate::ptp::manage::Outcome;
use crate::ptp::mgmt::{self, Action, MgmtRequest};
use crate::scheme::FloodLimit;

/// How long the loop waits for a datagram before it looks at its stop flag.
const POLL: Duration = Duration::from_millis(200);
/// How often the engine's answers to SETs in flight are looked for.
const PENDING_POLL: Duration = Duration::from_millis(1);
/// Requests per second one uid is answered; what it sends beyond that, after a burst, is
/// dropped before it is decoded. Keyed by the uid the kernel vouches for, not by the sender's
/// address: a process can bind as many addresses as it likes (or none), never another uid.
/// Root has a budget of its own like every uid and no larger one: pmc sends a handful per run,
/// so 1000/s is ample for all of root's tools, and no uid, root's included, may keep the thread
/// busy for the others.
const SENDER_RATE_PER_S: u32 = 1_000;
const SENDER_BURST: u32 = 100;
/// Uids tracked at once (each costs a few words); see [`Senders::admit`] when more have sent.
const MAX_SENDERS: usize = 1_024;
/// SETs handed to the engine and not yet answered, in all and per uid: beyond them a SET is
/// dropped (the requester retries, as pmc does after its own timeout).
const MAX_PENDING_SETS: usize = 16;
const MAX_PENDING_SETS_PER_UID: usize = 4;
/// Requests one requester may queue behind its SET in flight (beyond them: dropped).
const MAX_LATER: usize = 8;

/// What the server has done, for tests and diagnostics.
#[derive(Debug, Default)]
pub struct MgmtCounters {
    pub answered: AtomicU64,
    /// Requests that did not decode (dropped).
    pub malformed: AtomicU64,
    /// Requests for another domain or clock, or before the instance started (dropped).
    pub ignored: AtomicU64,
    /// SETs the engine did not take or answer in time (dropped).
    pub engine_timeouts: AtomicU64,
    /// SETs beyond [`MAX_PENDING_SETS`] or the uid's share of them (dropped).
    pub sets_busy: AtomicU64,
    /// Requests beyond their uid's flood limit (dropped undecoded).
    pub flood_dropped: AtomicU64,
    /// Replies dropped because the requester's socket was full (it does not read).
    pub replies_dropped: AtomicU64,
}

/// Counts one more `what` and logs the total at powers of two (a flood cannot flood the log).
fn count(c: &AtomicU64, what: &str) {
    let n = c.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        log::info!("management socket: {n} {what} so far");
    }
}

/// The running server; dropping it stops the thread and removes the socket file (if it is
/// still the one this server created).
pub struct MgmtServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub counters: Arc<MgmtCounters>,
    /// Dropped after the thread has stopped.
    _file: SocketFile,
}

impl MgmtServer {
    /// Binds `path` (replacing a stale socket file) and serves requests from `board`; SETs
    /// through `set` (without it every SET gets NOT_SUPPORTED).
    pub fn start(
        path: &Path,
        board: PtpStatusBoard,
        set: Option<SetAccess>,
    ) -> Result<Self, String> {
        let err = |e: &dyn std::fmt::Display| format!("management socket {}: {e}", path.display());
        // A stale socket from an earlier run is replaced; a live one, or any other file, is
        // left alone and the start fails.
        sockfile::remove_stale(path, |p| {
            UnixDatagram::unbound().is_ok_and(|s| s.connect(p).is_ok())
        })
        .map_err(|e| err(&e))?;
        // Anyone may send GETs (SETs are checked on the sender's kernel credentials), so the
        // file is 0666 from the moment it exists, whatever the umask (issue 23: under 022 bind
        // left 0755 and no other user could send).
        // Bound at `path` itself, not through a private directory: pmc sends its next request
        // to the address our last reply came from, so that must be `path`.
        let (file, sock) =
            SocketFile::bind_in_place(path, SocketAccess::PUBLIC, |p| UnixDatagram::bind(p))
                .map_err(|e| err(&e))?;
        sock.set_nonblocking(true)
            .and_then(|()| pass_credentials(&sock))
            .map_err(|e| err(&e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(MgmtCounters::default());
        let (s, c) = (stop.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("mgmt".into())
            .spawn(move || Server::new(&sock, &board, set.as_ref(), &c).run(&s))
            .map_err(|e| format!("management thread: {e}"))?;
        log::info!("management (pmc -u) on {}", path.display());
        Ok(Self {
            stop,
            thread: Some(thread),
            counters,
            _file: file,
        })
    }
}

impl Drop for MgmtServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A SET the engine has not answered yet.
struct PendingSet {
    answer: Receiver<Outcome>,
    to: Option<PathBuf>,
    uid: Option<u32>,
    deadline: Instant,
    /// Requests from the same requester that came while this SET was in flight.
    later: Vec<MgmtRequest>,
}

/// The serving thread's state.
struct Server<'a> {
    sock: &'a UnixDatagram,
    board: &'a PtpStatusBoard,
    set: Option<&'a SetAccess>,
    c: &'a MgmtCounters,
    senders: Senders,
    pending: Vec<PendingSet>,
}

impl<'a> Server<'a> {
    fn new(
        sock: &'a UnixDatagram,
        board: &'a PtpStatusBoard,
        set: Option<&'a SetAccess>,
        c: &'a MgmtCounters,
    ) -> Self {
        Self {
            sock,
            board,
            set,
            c,
            senders: Senders::default(),
            pending: Vec::new(),
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        let mut buf = [0u8; 1500];
        while !stop.load(Ordering::Relaxed) {
            self.collect_answers();
            let wait = if self.pending.is_empty() {
                POLL
            } else {
                PENDING_POLL
            };
            let (n, peer, uid) = match wait_readable(self.sock, wait)
                .and_then(|()| recv_with_uid(self.sock, &mut buf))
            {
                Ok(r) => r,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    continue;
                }
                Err(e) => {
                    log::warn!("management socket: {e}");
                    std::thread::sleep(POLL);
                    continue;
                }
            };
            self.handle(&buf[..n], peer, uid);
        }
    }

    /// One datagram from `peer`, whose sender the kernel says is `uid`.
    fn handle(&mut self, d: &[u8], peer: Option<PathBuf>, uid: Option<u32>) {
        if !self.senders.admit(uid, Instant::now()) {
            count(&self.c.flood_dropped, "requests dropped by the flood limit");
            return;
        }
        match mgmt::parse(d) {
            Ok(req) => self.dispatch(req, peer, uid),
            Err(e) => {
                count(&self.c.malformed, "malformed requests dropped");
                log::debug!("management request dropped: {e}");
            }
        }
    }

    /// Answers a decoded request, or starts it if it is a SET. A requester's requests are
    /// answered in the order it sent them: those that come while its SET is in flight wait
    /// behind it (so a GET after a SET sees what the SET did, as pmc expects).
    fn dispatch(&mut self, req: MgmtRequest, peer: Option<PathBuf>, uid: Option<u32>) {
        if peer.is_some()
            && let Some(p) = self
                .pending
                .iter_mut()
                .find(|p| p.to == peer && p.uid == uid)
        {
            if p.later.len() < MAX_LATER {
                p.later.push(req);
            } else {
                count(
                    &self.c.sets_busy,
                    "requests dropped while SETs were in flight",
                );
            }
            return;
        }
        match self.set {
            Some(set) if req.action == Action::Set => self.start_set(req, peer, uid, set),
            _ => {
                let outcome = self
                    .board
                    .mgmt()
                    .map_or(Outcome::Ignore, |s| s.answer(&req));
                self.reply(outcome, peer);
            }
        }
    }

    /// Hands a SET to the engine; its answer is sent by [`Self::collect_answers`].
    fn start_set(
        &mut self,
        req: MgmtRequest,
        peer: Option<PathBuf>,
        uid: Option<u32>,
        set: &SetAccess,
    ) {
        let mine = self.pending.iter().filter(|p| p.uid == uid).count();
        if self.pending.len() >= MAX_PENDING_SETS || mine >= MAX_PENDING_SETS_PER_UID {
            count(
                &self.c.sets_busy,
                "requests dropped while SETs were in flight",
            );
            return;
        }
        match submit_set(req, uid, set) {
            Some(answer) => self.pending.push(PendingSet {
                answer,
                to: peer,
                uid,
                deadline: Instant::now() + ENGINE_TIMEOUT,
                later: Vec::new(),
            }),
            None => {
                self.c.engine_timeouts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends the answers the engine has given to SETs in flight, and drops those it has not
    /// answered within [`ENGINE_TIMEOUT`]; then the requests that waited behind each.
    fn collect_answers(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while let Some(p) = self.pending.get(i) {
            let outcome = match p.answer.try_recv() {
                Err(TryRecvError::Empty) if now < p.deadline => {
                    i += 1;
                    continue;
                }
                Ok(outcome) => Some(outcome),
                Err(_) => None,
            };
            let p = self.pending.swap_remove(i);
            match outcome {
                Some(o) => self.reply(o, p.to.clone()),
                None => drop(self.c.engine_timeouts.fetch_add(1, Ordering::Relaxed)),
            }
            for req in p.later {
                self.dispatch(req, p.to.clone(), p.uid);
            }
        }
    }

    fn reply(&self, outcome: Outcome, to: Option<PathBuf>) {
        let (Outcome::Reply(replies), Some(to)) = (outcome, to) else {
            self.c.ignored.fetch_add(1, Ordering::Relaxed);
            return;
        };
        for r in replies {
            // Non-blocking: a requester that does not drain its socket loses its replies
            // rather than make the thread wait for it.
            match self.sock.send_to(&r, &to) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    count(
                        &self.c.replies_dropped,
                        "replies dropped (requester not reading)",
                    );
                }
                Err(e) => log::debug!("management reply to {}: {e}", to.display()),
            }
        }
        self.c.answered.fetch_add(1, Ordering::Relaxed);
    }
}

/// Flood limits by sender uid (`None`: the kernel attached no credentials; those share one).
#[derive(Default)]
struct Senders(HashMap<Option<u32>, FloodLimit>);

impl Senders {
    /// Whether a request from `uid` at `now` is within its limit. When [`MAX_SENDERS`] uids are
    /// tracked, those whose budget has refilled are forgotten (they lose nothing); if every one
    /// is still busy, the table starts afresh (bounded memory; reaching it takes 1024 uids).
    fn admit(&mut self, uid: Option<u32>, now: Instant) -> bool {
        if self.0.len() >= MAX_SENDERS && !self.0.contains_key(&uid) {
            self.0.retain(|_, l| !l.refilled(now));
            if self.0.len() >= MAX_SENDERS {
                self.0.clear();
            }
        }
        self.0
            .entry(uid)
            .or_insert_with(|| FloodLimit::new(SENDER_RATE_PER_S, SENDER_BURST, now))
            .admit(now)
    }
}

/// Waits up to `timeout` for a datagram; `TimedOut` if none came.
fn wait_readable(sock: &UnixDatagram, timeout: Duration) -> std::io::Result<()> {
    use ptp_ipc::poll::{PollFlags, deadline_after, wait_fd};
    match wait_fd(sock, PollFlags::IN, deadline_after(timeout))? {
        Some(_) => Ok(()),
        None => Err(ErrorKind::TimedOut.into()),
    }
}

/// Asks the kernel to attach the sender's credentials to every datagram received.
fn pass_credentials(sock: &UnixDatagram) -> std::io::Result<()> {
    Ok(rustix::net::sockopt::set_socket_passcred(sock, true)?)
}

/// One datagram: its length, the sender's bound path (`None`: unnamed, cannot be answered)
/// and the sender's uid from SCM_CREDENTIALS (`None` if the kernel attached none).
fn recv_with_uid(
    sock: &UnixDatagram,
    buf: &mut [u8],
) -> std::io::Result<(usize, Option<PathBuf>, Option<u32>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketAddrUnix};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let iov = &mut [std::io::IoSliceMut::new(buf)];
    let m = rustix::net::recvmsg(sock, iov, &mut control, RecvFlags::empty())?;
    let uid = control.drain().find_map(|c| match c {
        RecvAncillaryMessage::ScmCredentials(cred) => Some(cred.uid.as_raw()),
        _ => None,
    });
    // Abstract and unnamed addresses have no path.
    let path = m
        .address
        .and_then(|a| SocketAddrUnix::try_from(a).ok())
        .and_then(|a| {
            a.path_bytes()
                .map(|b| PathBuf::from(std::ffi::OsStr::from_bytes(b)))
        });
    Ok((m.bytes, path, uid))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::ptp::engine::MgmtHandle;
    use crate::ptp::mgmt::id;

    #[test]
    fn a_flooding_uid_is_limited_and_the_table_stays_bounded() {
        let mut senders = Senders::default();
        let now = Instant::now();
        let admitted = (0..10 * SENDER_BURST)
            .filter(|_| senders.admit(Some(65534), now))
            .count();
        assert_eq!(admitted, SENDER_BURST as usize);
        // Root, another uid, and senders without credentials are not affected.
        for uid in [Some(0), Some(1000), None] {
            assert!(senders.admit(uid, now));
        }
        for uid in 0..3 * MAX_SENDERS as u32 {
            senders.admit(Some(10_000 + uid), now);
        }
        assert!(senders.0.len() <= MAX_SENDERS);
        // Once the table is full, senders whose budget refilled make room; the flooder's
        // spent budget is kept while it is still spent.
        let mut senders = Senders::default();
        for uid in 0..MAX_SENDERS as u32 - 1 {
            senders.admit(Some(10_000 + uid), now);
        }
        for _ in 0..SENDER_BURST {
            senders.admit(Some(65534), now);
        }
        let later = now + Duration::from_millis(50);
        assert!(senders.admit(Some(1), later));
        assert_eq!(senders.0.len(), 2, "idle uids forgotten");
        let budget = (0..10 * SENDER_BURST)
            .filter(|_| senders.admit(Some(65534), later))
            .count();
        assert!(
            (49..=50).contains(&budget),
            "50 ms at 1000/s refilled {budget}, not a fresh burst"
        );
    }

    #[test]
    fn replaces_a_stale_socket_but_never_another_file_or_a_live_one() {
        let dir = std::env::temp_dir().join(format!("ptpd-mgmt-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-a-socket");
        std::fs::write(&file, b"keep").unwrap();
        assert!(MgmtServer::start(&file, PtpStatusBoard::new(1), None).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        let stale = dir.join("ptp4l");
        drop(UnixDatagram::bind(&stale).unwrap());
        assert!(stale.exists());
        let server = MgmtServer::start(&stale, PtpStatusBoard::new(1), None).unwrap();
        // Issue 23: the mode came from the umask (0755 under 022: only root could send GETs).
        let mode = std::fs::metadata(&stale).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666, "anyone may send GETs");
        assert!(
            MgmtServer::start(&stale, PtpStatusBoard::new(1), None).is_err(),
            "a live server's socket is not taken over"
        );
        assert!(stale.exists(), "nor removed by the failed start");
        drop(server);
        assert!(!stale.exists());
        // Nothing else is left in the directory (the private bind directory went too).
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A request as pmc sends it, for the domain and clock of [`snap`].
    fn request(action: Action, mid: u16, data: Vec<u8>, seq: u16) -> Vec<u8> {
        crate::ptp::mgmt::test_request(action, mid, data, seq).encode()
    }

    struct Rig {
        dir: PathBuf,
        server: MgmtServer,
        path: PathBuf,
    }

    impl Rig {
        fn start(tag: &str, set: Option<SetAccess>) -> Self {
            let dir = std::env::temp_dir().join(format!("ptpd-mgmt-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let board = PtpStatusBoard::new(1);
            board.set_mgmt(crate::ptp::manage::tests::snap());
            let path = dir.join("ptp4l");
            let server = MgmtServer::start(&path, board, set).unwrap();
            Self { dir, server, path }
        }

        fn requester(&self, name: &str) -> UnixDatagram {
            let s = UnixDatagram::bind(self.dir.join(name)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        }

        /// A GET's round trip from `s`.
        fn get(&self, s: &UnixDatagram, seq: u16) -> Duration {
            let t = Instant::now();
            let req = request(Action::Get, id::CURRENT_DATA_SET, vec![], seq);
            s.send_to(&req, &self.path).unwrap();
            let mut buf = [0u8; 1500];
            loop {
                let (n, from) = s.recv_from(&mut buf).expect("a GET answered");
                // pmc sends its next request where the answer came from.
                assert_eq!(
                    from.as_pathname(),
                    Some(self.path.as_path()),
                    "reply source"
                );
                if mgmt::parse(&buf[..n]).unwrap().sequence_id == seq {
                    return t.elapsed();
                }
            }
        }

        /// How slow a GET may be while someone else misbehaves: 20 times the slowest of 20
        /// unloaded GETs measured now, at least 50 ms, at most half the engine timeout (the
        /// stall the old form imposed, which the bound must tell apart).
        fn bound(&self, s: &UnixDatagram) -> Duration {
            let quiet = (0..20).map(|i| self.get(s, 1000 + i)).max().unwrap();
            (20 * quiet).clamp(Duration::from_millis(50), ENGINE_TIMEOUT / 2)
        }
    }

    impl Drop for Rig {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(10), "never: {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Issue 23: the thread waited up to 500 ms for the engine's answer to a SET, answering
    /// nobody else meanwhile.
    #[test]
    fn a_set_in_flight_does_not_delay_a_get_from_another_requester() {
        let (engine, stalled) = MgmtHandle::stalled();
        let set = SetAccess {
            engine,
            privileged_uids: vec![],
        };
        let rig = Rig::start("set", Some(set));
        let (setter, getter) = (rig.requester("setter"), rig.requester("getter"));
        let bound = rig.bound(&getter);
        let set_req = |seq| request(Action::Set, id::PRIORITY1, vec![5, 0], seq);
        setter.send_to(&set_req(1), &rig.path).unwrap();
        // The setter's own GET waits behind its SET (it must see what the SET did).
        let get2 = request(Action::Get, id::CURRENT_DATA_SET, vec![], 2);
        setter.send_to(&get2, &rig.path).unwrap();
        let lat = rig.get(&getter, 1);
        assert!(
            lat <= bound,
            "a GET took {lat:?} behind a SET (bound {bound:?})"
        );
        // The engine answers later: the answer still reaches the setter, then its GET's.
        let answer = vec![0xAB; 60];
        assert!(stalled.answer_one(Duration::from_secs(5), Outcome::Reply(vec![answer.clone()])));
        let mut buf = [0u8; 1500];
        let n = setter.recv(&mut buf).expect("the SET's answer");
        assert_eq!(&buf[..n], answer, "the SET is answered first");
        let n = setter.recv(&mut buf).expect("the setter's GET answered");
        assert_eq!(mgmt::parse(&buf[..n]).unwrap().sequence_id, 2);
        // At most MAX_PENDING_SETS_PER_UID of one uid's SETs wait (here from as many
        // requesters); the rest are dropped at once, and those the engine never answers are
        // dropped after ENGINE_TIMEOUT.
        let c = &rig.server.counters;
        let setters: Vec<_> = (0..MAX_PENDING_SETS_PER_UID + 2)
            .map(|k| rig.requester(&format!("setter{k}")))
            .collect();
        for (seq, s) in setters.iter().enumerate() {
            s.send_to(&set_req(10 + seq as u16), &rig.path).unwrap();
        }
        wait_until("two SETs dropped", || {
            c.sets_busy.load(Ordering::Relaxed) == 2
        });
        let lat = rig.get(&getter, 2);
        assert!(
            lat <= bound,
            "a GET took {lat:?} behind SETs (bound {bound:?})"
        );
        wait_until("the unanswered SETs expire", || {
            c.engine_timeouts.load(Ordering::Relaxed) == MAX_PENDING_SETS_PER_UID as u64
        });
        drop(stalled);
    }

    /// Issue 23: each reply to a requester whose socket was full waited up to 100 ms.
    #[test]
    fn a_requester_that_never_reads_does_not_stall_the_others() {
        let rig = Rig::start("deaf", None);
        let (deaf, getter) = (rig.requester("deaf"), rig.requester("getter"));
        let bound = rig.bound(&getter);
        let path = rig.path.clone();
        // Within the flood limit's burst: every one is answered, into a socket nobody reads.
        let n = SENDER_BURST as u16 / 2;
        let flood = std::thread::spawn(move || {
            deaf.set_write_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            for seq in 0..n {
                let req = request(Action::Get, id::CURRENT_DATA_SET, vec![], seq);
                deaf.send_to(&req, &path).unwrap();
            }
            deaf
        });
        let c = &rig.server.counters;
        wait_until("replies to the deaf requester dropped", || {
            c.replies_dropped.load(Ordering::Relaxed) > 0
        });
        let lat = rig.get(&getter, 1);
        assert!(lat <= bound, "a GET took {lat:?} (bound {bound:?})");
        let _deaf = flood.join().unwrap();
    }
}
