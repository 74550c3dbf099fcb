//! Who may drive the NIC over the driver channel, on every platform: root, igcd's own uid, and
//! the uid and group the options name (`--allow-uid`, `--allow-gid`). Anyone else is refused at
//! connect (Linux: SO_PEERCRED and SO_PEERGROUPS) or at open (Redox: the scheme caller's ids),
//! so a user who starts a ptpd of their own cannot reach the hardware clock.

use super::Options;

/// The driver channel's access rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelAccess {
    own_uid: u32,
    allow_uid: Option<u32>,
    allow_gid: Option<u32>,
}

impl ChannelAccess {
    /// The rule for a daemon running as `own_uid` with `opts`.
    pub fn new<Fam>(own_uid: u32, opts: &Options<Fam>) -> Self {
        Self {
            own_uid,
            allow_uid: opts.allow_uid,
            allow_gid: opts.allow_gid,
        }
    }

    /// The rule for this process (its effective uid).
    pub fn for_this_process<Fam>(opts: &Options<Fam>) -> Self {
        // Safety: geteuid has no preconditions and touches no memory.
        Self::new(unsafe { libc::geteuid() }, opts)
    }

    /// Whether a peer with `uid` and groups `gids` (primary and supplementary) may connect.
    pub fn permits(&self, uid: u32, gids: &[u32]) -> bool {
        uid == 0
            || uid == self.own_uid
            || self.allow_uid == Some(uid)
            || self.allow_gid.is_some_and(|g| gids.contains(&g))
    }

    /// The socket file that lets exactly these peers in by its mode: owner the allowed uid (or
    /// igcd's), group the allowed gid with mode 0660, else mode 0600. Root passes either way.
    #[cfg(target_os = "linux")]
    pub fn socket_access(&self) -> ptp_ipc::transport::SocketAccess {
        ptp_ipc::transport::SocketAccess {
            mode: if self.allow_gid.is_some() {
                0o660
            } else {
                0o600
            },
            owner: self.allow_uid,
            group: self.allow_gid,
        }
    }
}

impl std::fmt::Display for ChannelAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "root")?;
        if self.own_uid != 0 {
            write!(f, ", uid {} (igcd's own)", self.own_uid)?;
        }
        if let Some(u) = self.allow_uid {
            write!(f, ", uid {u}")?;
        }
        if let Some(g) = self.allow_gid {
            write!(f, ", group {g}")?;
        }
        write!(f, " only")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(allow_uid: Option<u32>, allow_gid: Option<u32>) -> ChannelAccess {
        ChannelAccess {
            own_uid: 1000,
            allow_uid,
            allow_gid,
        }
    }

    #[test]
    fn root_and_own_uid_always_others_never_by_default() {
        let r = rule(None, None);
        assert!(r.permits(0, &[0]));
        assert!(r.permits(1000, &[1000]));
        assert!(!r.permits(65534, &[65534]));
        assert!(
            !r.permits(1001, &[0, 1000]),
            "groups count only with --allow-gid"
        );
    }

    #[test]
    fn configured_uid_and_group() {
        let r = rule(Some(4242), Some(77));
        assert!(r.permits(4242, &[4242]));
        assert!(
            r.permits(65534, &[65534, 77]),
            "a supplementary group counts"
        );
        assert!(r.permits(65534, &[77]));
        assert!(!r.permits(65534, &[65534, 78]));
        assert!(!r.permits(4243, &[]));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn socket_mode_follows_the_rule() {
        let a = rule(None, None).socket_access();
        assert_eq!((a.mode, a.owner, a.group), (0o600, None, None));
        let a = rule(Some(4242), Some(77)).socket_access();
        assert_eq!((a.mode, a.owner, a.group), (0o660, Some(4242), Some(77)));
    }
}
