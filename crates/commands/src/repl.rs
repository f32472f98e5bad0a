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
//!
//! Master side (this module's [`MasterSide`] and [`backlog`]; the
//! runtime's `server/repl` drives them): the backlog, the attached
//! replicas as INFO, ROLE and CLIENT LIST show them, the sync counters,
//! and the NOREPLICAS verdict ([`MasterSide::too_few_good_replicas`],
//! kept in `ops::Ops` for the command path's one relaxed load). The commands a replica sends (REPLCONF, PSYNC, SYNC) and WAIT
//! live in [`cmds`]: they record what was asked on the client
//! ([`ReplicaHello`], [`WaitRequest`]) and the runtime acts on it (it
//! takes the socket of a PSYNC, it blocks a WAIT).

pub mod backlog;
pub mod cmds;
pub mod failover;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

pub use backlog::Backlog;

/// What the runtime's master side does when the role changes (the
/// commands crate cannot name its types; it registers itself at start).
///
/// A replica proxies its master's stream to its own backlog and replicas
/// (Redis's `replicationFeedStreamFromMasterStream`); a master streams its
/// own writes. The switch must fall between two writes, so a promotion
/// runs under the whole-keyspace lock (REPLICAOF NO ONE is coordinated):
/// [`ReplRuntime::prepare_promotion`] before, the shards start recording
/// under the lock, [`ReplRuntime::promoted`] at the instant.
pub trait ReplRuntime: Send + Sync {
    /// Before a promotion's locks: readies the stream writer if the
    /// stream will go on (a backlog exists); true if the shards must
    /// record from the promotion's instant on.
    fn prepare_promotion(&self) -> bool;
    /// At the promotion's instant (every lock held, the role just
    /// changed): this server's writes continue the stream from its offset.
    fn promoted(&self);
    /// REPLICAOF host port: the stream becomes the new master's, proxied;
    /// the replicas reconnect (Redis's disconnectSlaves).
    fn demoted(&self);
    /// FAILOVER started, under whole-keyspace locks: once every record
    /// queued so far reached the stream, `failover::flushed`.
    fn failover_started(&self);
    /// Itself, for the runtime to find its own type again (the server's
    /// master side is its `runtime`).
    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

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
    /// Connected: PING, AUTH, REPLCONF, PSYNC sent and its reply awaited
    /// (ROLE: `handshake`, as Redis's states from RECEIVE_PING_REPLY to
    /// RECEIVE_PSYNC_REPLY; a master delays `+FULLRESYNC` until the sync
    /// begins, `repl-diskless-sync-delay`).
    Handshake,
    /// `+FULLRESYNC` received: receiving and loading the RDB (ROLE:
    /// `sync`, Redis's TRANSFER).
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
            LinkState::Handshake => "handshake",
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
    pub master: MasterSide,
    /// A coordinated failover (FAILOVER), if one runs.
    pub failover: failover::Failover,
}

/// What a master knows of its replicas and its stream (Redis's
/// `server.slaves`, `repl_backlog`, `stat_sync_*`).
#[derive(Debug, Default)]
pub struct MasterSide {
    /// Created when the first replica attaches; freed `repl-backlog-ttl`
    /// after the last one left.
    pub backlog: Option<Backlog>,
    /// Attached replicas, in attach order (INFO's `slaveN`).
    pub replicas: Vec<ReplicaInfo>,
    pub sync_full: u64,
    pub sync_partial_ok: u64,
    pub sync_partial_err: u64,
    /// Unix ms since when no replica is attached (0: some are, or the
    /// backlog was never created).
    pub no_replicas_since_ms: u64,
}

impl MasterSide {
    /// Whether `min-replicas-to-write` is not met at `now_ms`: fewer online
    /// replicas acknowledged within `min-replicas-max-lag` than it asks
    /// (Redis's `refreshGoodSlavesCount` and `checkGoodReplicasStatus`).
    pub fn too_few_good_replicas(&self, cfg: &config::Config, now_ms: u64) -> bool {
        if cfg.min_replicas_to_write == 0 || cfg.min_replicas_max_lag_s == 0 {
            return false;
        }
        let max_lag_ms = cfg.min_replicas_max_lag_s.saturating_mul(1000);
        let good = self
            .replicas
            .iter()
            .filter(|x| {
                x.state == ReplicaState::Online && now_ms.saturating_sub(x.ack_ms) <= max_lag_ms
            })
            .count() as u64;
        good < cfg.min_replicas_to_write
    }
}

/// Redis's `replstate` of an attached replica, as INFO names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaState {
    /// Waiting for its snapshot to begin or end.
    WaitBgsave,
    /// Receiving the snapshot.
    SendBulk,
    /// Streaming.
    Online,
}

impl ReplicaState {
    pub fn name(self) -> &'static str {
        match self {
            ReplicaState::WaitBgsave => "wait_bgsave",
            ReplicaState::SendBulk => "send_bulk",
            ReplicaState::Online => "online",
        }
    }
}

/// One attached replica.
#[derive(Clone, Debug)]
pub struct ReplicaInfo {
    /// Its client id (CLIENT LIST / KILL ID).
    pub id: u64,
    /// The connection's peer and local addresses (`ip:port`).
    pub addr: String,
    pub laddr: String,
    /// The address INFO shows: REPLCONF ip-address, else the peer's IP.
    pub ip: String,
    /// REPLCONF listening-port (0 if never sent).
    pub port: u16,
    pub state: ReplicaState,
    /// The last offset it acknowledged.
    pub ack_offset: u64,
    /// Unix ms of its last ACK (or of the attach).
    pub ack_ms: u64,
    pub created_ms: u64,
    /// Its socket: CLIENT KILL shuts it down (the runtime closes it after
    /// removing the entry, under this state's lock, so it never names
    /// another connection).
    pub fd: i32,
    pub name: Option<Vec<u8>>,
    pub user: String,
}

/// What a connection told about itself as a replica (REPLCONF), and the
/// sync it asked for (PSYNC / SYNC): the runtime takes the connection
/// over once the request's reply-less turn is done.
#[derive(Clone, Debug, Default)]
pub struct ReplicaHello {
    pub listening_port: u16,
    pub ip_address: Option<String>,
    /// `capa eof`: it can load a diskless (EOF-marked) transfer.
    pub capa_eof: bool,
    pub capa_psync2: bool,
    pub sync: Option<SyncRequest>,
}

/// PSYNC replid offset, or the old SYNC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncRequest {
    Psync { replid: String, offset: i64 },
    Sync,
}

/// A blocked WAIT: how many replicas must acknowledge, until when (unix
/// ms, 0: forever), and the stream offset they must reach, once the
/// runtime knows it (`u64::MAX` until then).
#[derive(Clone, Debug)]
pub struct WaitRequest {
    pub numreplicas: u64,
    pub deadline_ms: u64,
    pub target: Option<Arc<AtomicU64>>,
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

/// The server's replication state (`ServerShared::repl`).
#[derive(Debug)]
pub struct Repl {
    inner: Mutex<ReplInner>,
    /// The stream has consumers other than the AOF (replicas or their
    /// backlog): shards keep recording when the AOF is turned off.
    streaming: AtomicBool,
    /// Bytes ever fed to the stream, readable without the lock (WAIT).
    offset: AtomicU64,
    /// Bytes written to replicas' sockets (INFO's
    /// `total_net_repl_output_bytes`).
    pub net_output_bytes: AtomicU64,
    /// Signalled when the role changes or a link drops (the replica's
    /// link thread waits on it).
    pub wake: Condvar,
    /// A replica (one relaxed load on the write path: READONLY, expiry).
    /// Leaked, as `link_up`: scripts read both on their shard through
    /// `Ops::running_stale`, which sees no `ServerShared`.
    pub replica: &'static AtomicBool,
    /// A replica whose link is up (streaming).
    pub link_up: &'static AtomicBool,
    /// Unix ms of the last bytes from the master (INFO's
    /// `master_last_io_seconds_ago`).
    pub last_io_ms: AtomicU64,
    /// `ReplInner::gen`, readable without the lock (the master connection
    /// checks it before each command it runs).
    pub gen: AtomicU64,
    /// Times a master was set (REPLICAOF host port, a failover's
    /// demotion: Redis's `replicationSetMaster`), readable without the
    /// lock: a client blocked before the latest (its claim's epoch, in
    /// the runtime's `blocking`) is unblocked with an error and closed,
    /// as Redis's `disconnectAllBlockedClients`, lest the new master's
    /// stream serve it a write only this replica would see.
    pub masters_set: AtomicU64,
    /// Where the master connection is, in the runtime's terms (its thread
    /// and slot, `thread << 32 | slot`, and its slot's generation; `u64::MAX`
    /// before the first): a coordinated command's job run for it sees
    /// keys past their deadline, every other client's reads them as
    /// missing (the runtime's `worker::shard::hide_expired`). Never
    /// cleared: a later connection in that slot has another generation.
    pub master_conn_at: AtomicU64,
    pub master_conn_gen: AtomicU64,
    /// The runtime's side of role changes, once registered.
    pub runtime: OnceLock<Arc<dyn ReplRuntime>>,
    /// A replica's master connection exists (worker 0 serves it): a sync
    /// for this server's own replicas then runs as one of its commands.
    pub master_conn: AtomicBool,
    /// Bytes of the master's stream read by the master connection (INFO's
    /// `slave_read_repl_offset`; `master_repl_offset` counts those
    /// applied).
    pub read_offset: AtomicU64,
    /// The database the master's stream is in where the last master
    /// connection stopped: a partial resync goes on there, and a sync of
    /// this replica's replicas without a master connection says so
    /// (`repl-stream-db`).
    pub master_db: AtomicU64,
    /// The replica link thread's hand-over to worker 0 (the connection
    /// made and synced, the runtime's type: opaque here).
    pub link_handoff: Handover,
}

/// A value one thread leaves for another, one at a time, found with one
/// relaxed load while none waits (worker 0's cron looks every tick). The
/// server's (in its [`Repl`]): two servers in one process (tests) never
/// take each other's.
#[derive(Default)]
pub struct Handover {
    ready: AtomicBool,
    slot: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handover")
    }
}

impl Handover {
    /// Leaves `v` (replacing one not taken yet).
    pub fn put(&self, v: Box<dyn std::any::Any + Send>) {
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        self.ready.store(true, Ordering::Release);
    }

    /// What was left, if anything (one relaxed load when nothing was).
    pub fn take(&self) -> Option<Box<dyn std::any::Any + Send>> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        self.ready.store(false, Ordering::Release);
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl std::fmt::Debug for dyn ReplRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplRuntime")
    }
}

/// Redis's `shared.noreplicaserr`.
pub const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

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
                master: MasterSide::default(),
                gen: 0,
                link: LinkInfo::default(),
                failover: failover::Failover::default(),
            }),
            wake: Condvar::new(),
            // Two leaked bytes per server (a server lives as long as its
            // process; tests build a few).
            replica: Box::leak(Box::new(AtomicBool::new(false))),
            link_up: Box::leak(Box::new(AtomicBool::new(false))),
            last_io_ms: AtomicU64::new(0),
            gen: AtomicU64::new(0),
            masters_set: AtomicU64::new(0),
            master_conn_at: AtomicU64::new(u64::MAX),
            master_conn_gen: AtomicU64::new(0),
            runtime: OnceLock::new(),
            master_conn: AtomicBool::new(false),
            read_offset: AtomicU64::new(0),
            master_db: AtomicU64::new(0),
            link_handoff: Handover::default(),
            streaming: AtomicBool::new(false),
            offset: AtomicU64::new(0),
            net_output_bytes: AtomicU64::new(0),
        }
    }

    /// Whether the replication stream is on (see `streaming`).
    pub fn streaming(&self) -> bool {
        self.streaming.load(Ordering::Acquire)
    }

    pub fn set_streaming(&self, on: bool) {
        self.streaming.store(on, Ordering::Release);
    }

    /// `master_repl_offset` without the lock.
    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Acquire)
    }

    /// Appends stream bytes: the offset grows by their length and the
    /// backlog keeps them. Called by the stream writer, once per batch.
    pub fn feed(&self, b: &[u8]) {
        let mut r = self.lock();
        r.ids.master_repl_offset += b.len() as u64;
        if let Some(bl) = &mut r.master.backlog {
            bl.append(b);
        }
        self.offset
            .store(r.ids.master_repl_offset, Ordering::Release);
    }

    /// [`Repl::feed`] if the role's generation is still `gen` (a
    /// replica's proxied stream); false, and nothing fed, otherwise.
    pub fn feed_if(&self, gen: u64, b: &[u8]) -> bool {
        let mut r = self.lock();
        if r.gen != gen {
            return false;
        }
        r.ids.master_repl_offset += b.len() as u64;
        if let Some(bl) = &mut r.master.backlog {
            bl.append(b);
        }
        self.offset
            .store(r.ids.master_repl_offset, Ordering::Release);
        true
    }

    /// Sets `master_repl_offset` (the replica side, after a sync).
    pub fn set_offset(r: &mut ReplInner, off: u64, this: &Repl) {
        r.ids.master_repl_offset = off;
        this.offset.store(off, Ordering::Release);
    }

    /// Replicas whose last ACK is at least `offset`.
    pub fn acked(&self, offset: u64) -> u64 {
        let r = self.lock();
        r.master
            .replicas
            .iter()
            .filter(|x| x.state == ReplicaState::Online && x.ack_offset >= offset)
            .count() as u64
    }

    /// Whether this server is a replica (a relaxed load: for hot paths).
    #[inline]
    pub fn replica_fast(&self) -> bool {
        self.replica.load(Ordering::Relaxed)
    }

    /// Sets the role (REPLICAOF): a new generation, the fast flags, and a
    /// wake-up for the link thread. Returns the new generation. Called
    /// through [`crate::ServerShared::set_role`], which has the loops
    /// pick the role up.
    pub(crate) fn set_role(&self, g: &mut ReplInner, role: Role) -> u64 {
        let replica = matches!(role, Role::Replica { .. });
        g.role = role;
        g.gen += 1;
        self.gen.store(g.gen, Ordering::Release);
        self.replica.store(replica, Ordering::Relaxed);
        if replica {
            self.masters_set.fetch_add(1, Ordering::AcqRel);
        }
        self.link_up.store(false, Ordering::Relaxed);
        self.wake.notify_all();
        g.gen
    }

    /// [`Repl::masters_set`] now.
    #[inline]
    pub fn masters_set(&self) -> u64 {
        self.masters_set.load(Ordering::Acquire)
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

/// Before `master_repl_offset` is read for a client (INFO, ROLE): the
/// records of every write already answered are fed to the stream, so the
/// offset counts them, as Redis's does (see `AofControl::feed_queued`).
/// Nothing to do while no stream is on.
pub fn feed_answered(s: &crate::ServerShared) {
    if s.repl.streaming() {
        if let Some(a) = s.aof.get() {
            a.feed_queued();
        }
    }
}

/// A new random replication ID (40 hex characters), as Redis's
/// `changeReplicationId`.
pub fn new_replid() -> String {
    crate::ctx::random_hex(40)
}

/// INFO replication's master fields after `role` (Redis 7.0's order):
/// `connected_slaves`, one `slaveN` line per replica, then the IDs,
/// offsets and backlog.
pub fn info_master(r: &ReplInner, now_ms: u64, o: &mut String) {
    use std::fmt::Write;
    let _ = write!(o, "connected_slaves:{}\r\n", r.master.replicas.len());
    for (i, x) in r.master.replicas.iter().enumerate() {
        let _ = write!(
            o,
            "slave{i}:ip={},port={},state={},offset={},lag={}\r\n",
            x.ip,
            x.port,
            x.state.name(),
            x.ack_offset,
            now_ms.saturating_sub(x.ack_ms) / 1000
        );
    }
}

/// INFO replication's lines from `master_failover_state` on
/// (`backlog_size`: `repl-backlog-size`, shown while there is none).
pub fn info_ids(r: &ReplInner, backlog_size: u64, o: &mut String) {
    use std::fmt::Write;
    let ids = &r.ids;
    let _ = write!(
        o,
        "master_failover_state:{}\r\nmaster_replid:{}\r\nmaster_replid2:{}\r\n\
         master_repl_offset:{}\r\nsecond_repl_offset:{}\r\n",
        r.failover.state.name(),
        ids.replid,
        ids.replid2,
        ids.master_repl_offset,
        ids.second_repl_offset
    );
    let (active, size, first, hist) = match &r.master.backlog {
        Some(b) => (1, b.size() as u64, b.first(), b.histlen() as u64),
        None => (0, backlog_size, 0, 0),
    };
    let _ = write!(
        o,
        "repl_backlog_active:{active}\r\nrepl_backlog_size:{size}\r\n\
         repl_backlog_first_byte_offset:{first}\r\nrepl_backlog_histlen:{hist}\r\n"
    );
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
