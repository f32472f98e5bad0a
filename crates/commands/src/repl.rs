//! Replication state shared by both roles (issue 25): who this server is
//! (a master, or a replica of `host:port`), its replication IDs and
//! offsets. INFO replication, ROLE and HELLO read it; the runtime's master
//! side (PSYNC, the backlog, WAIT) and replica side (REPLICAOF, the link
//! to the master) change it.
//!
//! Redis's model, which Tessera follows so that PSYNC works both ways
//! with Redis: the replication stream is one byte stream; its *offset*
//! counts every byte ever sent into it (`master_repl_offset`). A replica
//! holds its master's replication ID and the offset it processed up to,
//! and asks `PSYNC <replid> <offset+1>`; the master continues from its
//! backlog if it has that ID (as `replid`, or as `replid2` up to
//! `second_repl_offset` after a promotion) and the offset is inside the
//! backlog. A replica's own `master_repl_offset` is its master's stream
//! offset it processed, so its replicas (and a promoted replica's
//! replicas) can continue with the same ID and offsets.
//!
//! One mutex guards it: it changes on role switches, syncs and (the
//! offset) once per batch the stream writer emits, never per command.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// The role and the link to a master, if any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Role {
    #[default]
    Master,
    /// A replica of `host:port` (REPLICAOF / `replicaof`).
    Replica {
        host: String,
        port: u16,
        link: LinkState,
    },
}

/// Redis's `repl_state` as a replica, as ROLE and INFO name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkState {
    /// Must connect (ROLE: `connect`).
    #[default]
    Connect,
    /// Connecting (ROLE: `connecting`).
    Connecting,
    /// Handshake, PSYNC sent, or receiving the RDB (ROLE: `sync`).
    Sync,
    /// Streaming (ROLE: `connected`).
    Connected,
}

impl LinkState {
    /// The state's name in ROLE's reply.
    pub fn role_name(self) -> &'static str {
        match self {
            LinkState::Connect => "connect",
            LinkState::Connecting => "connecting",
            LinkState::Sync => "sync",
            LinkState::Connected => "connected",
        }
    }
}

/// IDs and offsets (Redis's `server.replid`, `replid2`,
/// `master_repl_offset`, `second_replid_offset`).
#[derive(Clone, Debug)]
pub struct ReplIds {
    pub replid: String,
    /// The previous master's ID after a promotion, else 40 zeros.
    pub replid2: String,
    pub master_repl_offset: u64,
    /// Offset up to which `replid2` is valid (-1: none).
    pub second_repl_offset: i64,
}

#[derive(Debug)]
pub struct ReplInner {
    pub role: Role,
    pub ids: ReplIds,
    /// Bumped by every REPLICAOF that changes the master (or drops it):
    /// a link started under an older value ends.
    pub gen: u64,
    /// The replica side's link figures (INFO replication).
    pub link: LinkInfo,
}

/// What INFO shows of a replica's link to its master (Redis's
/// `repl_transfer_*`, `repl_down_since`).
#[derive(Clone, Debug, Default)]
pub struct LinkInfo {
    /// A full sync is being received.
    pub sync_in_progress: bool,
    /// The payload's size (-1: EOF-marked, size unknown).
    pub sync_total_bytes: i64,
    pub sync_read_bytes: u64,
    /// Unix ms of the last byte of the sync payload.
    pub sync_last_io_ms: u64,
    /// Unix ms since which the link is down (0: it never was up).
    pub down_since_ms: u64,
}

/// Process-wide replication state (`ServerShared::repl`).
#[derive(Debug)]
pub struct Repl {
    inner: Mutex<ReplInner>,
    /// Signalled when the role changes or a link drops (the replica's
    /// link thread waits on it).
    pub wake: Condvar,
    /// A replica (one relaxed load on the write path: READONLY, expiry).
    pub replica: AtomicBool,
    /// A replica whose link is up (streaming).
    pub link_up: AtomicBool,
    /// Unix ms of the last bytes from the master (INFO's
    /// `master_last_io_seconds_ago`).
    pub last_io_ms: AtomicU64,
    /// `ReplInner::gen`, readable without the lock (the master connection
    /// checks it before each command it runs).
    pub gen: AtomicU64,
}

impl Repl {
    pub fn new(replid: String) -> Repl {
        Repl {
            inner: Mutex::new(ReplInner {
                role: Role::Master,
                ids: ReplIds {
                    replid,
                    replid2: "0".repeat(40),
                    master_repl_offset: 0,
                    second_repl_offset: -1,
                },
                gen: 0,
                link: LinkInfo::default(),
            }),
            wake: Condvar::new(),
            replica: AtomicBool::new(false),
            link_up: AtomicBool::new(false),
            last_io_ms: AtomicU64::new(0),
            gen: AtomicU64::new(0),
        }
    }

    /// Whether this server is a replica (a relaxed load: for hot paths).
    #[inline]
    pub fn replica_fast(&self) -> bool {
        self.replica.load(Ordering::Relaxed)
    }

    /// Sets the role (REPLICAOF): a new generation, the fast flags, and a
    /// wake-up for the link thread. Returns the new generation.
    pub fn set_role(&self, g: &mut ReplInner, role: Role) -> u64 {
        let replica = matches!(role, Role::Replica { .. });
        g.role = role;
        g.gen += 1;
        self.gen.store(g.gen, Ordering::Release);
        self.replica.store(replica, Ordering::Relaxed);
        self.link_up.store(false, Ordering::Relaxed);
        self.wake.notify_all();
        g.gen
    }

    /// Redis's `shiftReplicationId`: a promoted replica takes a new ID and
    /// keeps its master's as `replid2`, valid up to the offset it reached,
    /// so its own replicas can continue with a partial resync.
    pub fn shift_replid(ids: &mut ReplIds) {
        ids.replid2 = std::mem::replace(&mut ids.replid, new_replid());
        ids.second_repl_offset = ids.master_repl_offset as i64 + 1;
    }

    /// The state, locked (held briefly: never across I/O).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, ReplInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn role(&self) -> Role {
        self.lock().role.clone()
    }

    pub fn ids(&self) -> ReplIds {
        self.lock().ids.clone()
    }

    pub fn is_replica(&self) -> bool {
        matches!(self.lock().role, Role::Replica { .. })
    }
}

/// A new random replication ID (40 hex characters), as Redis's
/// `changeReplicationId`.
pub fn new_replid() -> String {
    crate::ctx::random_hex(40)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_state_is_a_master_with_no_history() {
        let r = Repl::new("a".repeat(40));
        assert_eq!(r.role(), Role::Master);
        let ids = r.ids();
        assert_eq!(ids.replid2, "0".repeat(40));
        assert_eq!(ids.second_repl_offset, -1);
        assert_eq!(ids.master_repl_offset, 0);
        assert!(!r.is_replica());
        assert_eq!(new_replid().len(), 40);
    }

    #[test]
    fn a_promotion_shifts_the_ids() {
        let mut ids = Repl::new("a".repeat(40)).ids();
        ids.master_repl_offset = 99;
        Repl::shift_replid(&mut ids);
        assert_eq!(ids.replid2, "a".repeat(40));
        assert_eq!(ids.second_repl_offset, 100);
        assert_ne!(ids.replid, "a".repeat(40));
    }

    #[test]
    fn set_role_moves_the_generation_and_flags() {
        let r = Repl::new("a".repeat(40));
        let mut g = r.lock();
        let role = Role::Replica {
            host: "h".into(),
            port: 1,
            link: LinkState::Connect,
        };
        assert_eq!(r.set_role(&mut g, role), 1);
        assert!(r.replica_fast());
        assert_eq!(r.set_role(&mut g, Role::Master), 2);
        assert!(!r.replica_fast());
    }
}
