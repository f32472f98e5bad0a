//! The operator's commands: SLOWLOG, LATENCY, MONITOR, CLIENT PAUSE /
//! UNPAUSE, and the server-wide state behind them ([`Ops`], in
//! `ServerShared`), with the rest of the server's state that shard
//! handlers need (the long scripts, the script cache, the function
//! libraries: see the fields).
//!
//! Cost on the request path, per command: `exec::record` measures each
//! call's duration anyway; with it [`Ops::after_call`] bumps the command's
//! latency histogram (when `latency-tracking` is on, as Redis) and
//! compares the duration with the slowlog and latency-monitor thresholds
//! (relaxed loads of one read-mostly cache line). Dispatch adds one atomic
//! load for MONITOR (any monitor?) and one for CLIENT PAUSE (any pause?).
//! Everything else runs only for a slow command, while someone monitors
//! or while clients are paused.
//!
//! Shard handlers see no `ServerShared`: `ShardCall` and `ShardCtx` carry
//! a `&'static Ops` (one per server, leaked at start: a server lives as
//! long as its process, and tests build a few). Nothing here is shared
//! between two servers of one process: what is process state by nature
//! (the allocator's counters, the log) is kept where it is defined.

pub mod disk;
pub mod hist;
pub mod latency;
pub mod monitor;
pub mod pause;
pub mod slowlog;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use config::Config;

use crate::ctx::ThreadStats;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};

/// One server's state of the operator's commands, and what its shard
/// handlers reach of the rest (see the module documentation).
pub struct Ops {
    pub slowlog: slowlog::SlowLog,
    pub latency: latency::Latency,
    pub monitors: monitor::Monitors,
    pub pause: pause::Pause,
    /// `latency-tracking`: per-command histograms (INFO latencystats,
    /// LATENCY HISTOGRAM).
    tracking: AtomicBool,
    /// DEBUG SET-ACTIVE-EXPIRE: whether shards' crons delete expired keys
    /// (Redis's `active_expire_enabled`; tests turn it off to see keys
    /// that are logically expired but not deleted yet).
    pub active_expire: AtomicBool,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call commands flagged
    /// `noscript` (Redis's `script_disable_deny_script`, for tests that
    /// call DEBUG from a script).
    pub scripts_call_noscript: AtomicBool,
    /// The server's Pub/Sub registry, for a script's `redis.call('publish')`
    /// on a shard (set once by `ServerShared::new`).
    pub pubsub: std::sync::OnceLock<&'static crate::pubsub::PubSub>,
    /// The server's memory snapshot (set once by `ServerShared::new`), for
    /// a script running on gathered copies, whose scratch shard has no
    /// limit of its own: Redis refuses its writes when the *server* is
    /// over `maxmemory` (see `script::run::execute`).
    pub mem: std::sync::OnceLock<std::sync::Arc<engine::evict::MemShared>>,
    /// `min-replicas-to-write` is not met: writes get NOREPLICAS. Kept by
    /// the replication cron and refreshed at once by CONFIG SET of
    /// `min-replicas-*` (Redis's `refreshGoodSlavesCount`); read by
    /// admission and by scripts on their shard (one relaxed load).
    no_good_replicas: AtomicBool,
    /// A failed save or AOF write that refuses writes (see
    /// [`Ops::disk_error`]): set by the snapshot and AOF writers, and by
    /// [`Ops::configure`] (`stop-writes-on-bgsave-error`).
    pub disk: disk::DiskStatus,
    /// `replica-serve-stale-data` (kept by [`Ops::configure`]), for
    /// [`Ops::running_stale`].
    serve_stale_data: AtomicBool,
    /// The replication state's `replica` and `link_up` flags (set once by
    /// `ServerShared::new`), for [`Ops::running_stale`].
    pub repl_link: std::sync::OnceLock<(&'static AtomicBool, &'static AtomicBool)>,
    /// The server itself (set once where it is made shared:
    /// [`crate::ServerShared::share`]), for a script's `redis.call('info')`,
    /// which runs inside a shard handler. Weak: the server owns this.
    pub server: std::sync::OnceLock<std::sync::Weak<crate::ServerShared>>,
    /// Reaches any shard from a script holding every shard under locks
    /// (set once by the runtime; see `script::every`). Unset (in-process
    /// tests), such scripts are refused as before.
    pub reach: std::sync::OnceLock<Box<dyn crate::script::every::Reach>>,
    /// This server's long scripts (`busy-reply-threshold`, `-BUSY`,
    /// SCRIPT KILL; see `script::busy`): dispatch reads its count (one
    /// relaxed load) before every command, scripts on their shard reach it
    /// through `ShardCtx::ops`.
    pub busy: crate::script::busy::Registry,
    /// This server's script cache (SCRIPT LOAD, EVALSHA; see
    /// `script::cache`) and its VMs' memory: EVALSHA reads it on its shard
    /// through `ShardCtx::ops`, each thread's VMs hold the `Ops` they serve.
    pub scripts: crate::script::cache::ScriptCache,
    /// This server's function libraries (FUNCTION LOAD, FCALL; see
    /// `script::library`): FCALL reads it on its shard through
    /// `ShardCtx::ops`, the RDB writers through `Persist`.
    pub functions: crate::script::library::Registry,
    /// Clients blocked (BLPOP & co., WAIT, held by CLIENT PAUSE) on every
    /// thread of this server (INFO `blocked_clients`); kept by the runtime
    /// as it blocks and unblocks them.
    pub blocked_clients: AtomicUsize,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ops")
    }
}

impl Ops {
    /// A leaked instance configured from `cfg` (see the module docs).
    pub fn leak(cfg: &Config) -> &'static Ops {
        let ops = Box::leak(Box::new(Ops {
            slowlog: slowlog::SlowLog::new(0, 0),
            latency: latency::Latency::default(),
            monitors: monitor::Monitors::default(),
            pause: pause::Pause::default(),
            tracking: AtomicBool::new(true),
            active_expire: AtomicBool::new(true),
            scripts_call_noscript: AtomicBool::new(false),
            pubsub: std::sync::OnceLock::new(),
            mem: std::sync::OnceLock::new(),
            no_good_replicas: AtomicBool::new(false),
            disk: disk::DiskStatus::new(),
            serve_stale_data: AtomicBool::new(true),
            repl_link: std::sync::OnceLock::new(),
            server: std::sync::OnceLock::new(),
            reach: std::sync::OnceLock::new(),
            busy: crate::script::busy::Registry::new(),
            scripts: Default::default(),
            functions: Default::default(),
            blocked_clients: AtomicUsize::new(0),
        }));
        ops.configure(cfg);
        ops
    }

    /// Picks up the settings of `cfg` (at start and after CONFIG SET).
    pub fn configure(&self, cfg: &Config) {
        self.slowlog
            .threshold_us
            .store(cfg.slowlog_log_slower_than, Ordering::Relaxed);
        self.slowlog.max_len.store(
            usize::try_from(cfg.slowlog_max_len).unwrap_or(usize::MAX),
            Ordering::Relaxed,
        );
        self.latency
            .threshold_ms
            .store(cfg.latency_monitor_threshold, Ordering::Relaxed);
        self.tracking.store(cfg.latency_tracking, Ordering::Relaxed);
        self.disk
            .set_stop_on_save_error(cfg.stop_writes_on_bgsave_error && !cfg.save.is_empty());
        self.serve_stale_data
            .store(cfg.replica_serve_stale_data, Ordering::Relaxed);
        self.busy.set_threshold_ms(cfg.busy_reply_threshold_ms);
    }

    /// Redis's `running_stale` (scriptPrepareForRun) and
    /// `scriptVerifyAllowStale`: a replica whose link to its master is
    /// down while `replica-serve-stale-data` is off. Read by scripts
    /// wherever they run (their shard, in place, gathered copies): one
    /// relaxed load while serving stale data is allowed (the default).
    #[inline]
    pub fn running_stale(&self) -> bool {
        !self.serve_stale_data.load(Ordering::Relaxed)
            && self.repl_link.get().is_some_and(|(replica, link_up)| {
                replica.load(Ordering::Relaxed) && !link_up.load(Ordering::Relaxed)
            })
    }

    /// Whether writes are refused with MISCONF, and why (Redis's
    /// `writeCommandsDeniedByDiskError`): the last save failed, and
    /// `stop-writes-on-bgsave-error` is on with save rules set; else the
    /// AOF cannot be written or fsynced. Read by admission and by scripts
    /// wherever they run (their shard, gathered copies): one relaxed load.
    #[inline]
    pub fn disk_error(&self) -> Option<disk::DiskError> {
        self.disk.refusal()
    }

    /// Writes are refused for want of good replicas (one relaxed load).
    #[inline]
    pub fn refuses_writes(&self) -> bool {
        // Only a master refuses (Redis checks `masterhost == NULL`): a
        // replica with `min-replicas-to-write` set applies its master's
        // stream (before, it refused every write of it and lost them).
        self.no_good_replicas.load(Ordering::Relaxed)
            && !self
                .repl_link
                .get()
                .is_some_and(|(replica, _)| replica.load(Ordering::Relaxed))
    }

    /// Records the verdict of [`crate::repl::Repl::too_few_good_replicas`].
    pub fn set_refuse_writes(&self, on: bool) {
        self.no_good_replicas.store(on, Ordering::Relaxed);
    }

    /// Whether the server is out of memory for a write (over `maxmemory`
    /// and nothing may be evicted), from the per-tick snapshot: Redis's
    /// `pre_command_oom_state` where no real shard is at hand.
    pub fn out_of_memory(&self) -> bool {
        self.mem.get().is_some_and(|m| m.out_of_memory())
    }

    pub fn tracking(&self) -> bool {
        self.tracking.load(Ordering::Relaxed)
    }

    /// After a call of command `id` that took `us` microseconds: its
    /// histogram and the latency monitor; returns whether the slowlog
    /// wants it (the caller, who has the arguments, logs it).
    #[inline]
    pub fn after_call(&self, stats: &mut ThreadStats, id: usize, us: u64) -> bool {
        if self.tracking.load(Ordering::Relaxed) {
            stats.histogram(id).record(us.saturating_mul(1000));
        }
        let spec = || crate::table::registry().specs[id].1;
        if self.latency.wants(us / 1000) {
            let fast = spec().has(FAST);
            // A script's call, held while its run may be taken back.
            if !crate::script::traces::hold_latency(fast, us / 1000) {
                self.latency.command_sample(fast, us / 1000);
            }
        }
        self.slowlog.wants(us) && !spec().has(SKIP_SLOWLOG)
    }
}

/// SLOWLOG and LATENCY subcommands are admin commands Redis lets run
/// while loading and on a stale replica.
const ADMIN_FLAGS: u32 = ADMIN | LOADING | STALE;
const ADMIN_ACL: &[&str] = &["admin", "slow", "dangerous"];
const HELP_FLAGS: u32 = LOADING | STALE;

const fn conn(
    name: &'static str,
    arity: i32,
    flags: u32,
    h: crate::table::ConnHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, NO_KEYS, Exec::Conn(h), acl)
}

const fn coord(
    name: &'static str,
    arity: i32,
    flags: u32,
    h: crate::table::CoordBuilder,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, NO_KEYS, Exec::Coord(h), acl)
}

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::parent("slowlog", -2, 0, &["slow"], SLOWLOG_SUBS),
    CommandSpec::parent("latency", -2, 0, &["slow"], LATENCY_SUBS),
    conn(
        "monitor",
        1,
        ADMIN | NOSCRIPT | LOADING | STALE,
        monitor::monitor,
        ADMIN_ACL,
    ),
];

const SLOWLOG_SUBS: &[CommandSpec] = &[
    coord("get", -2, ADMIN_FLAGS, slowlog::slowlog_get, ADMIN_ACL),
    conn("len", 2, ADMIN_FLAGS, slowlog::slowlog_len, ADMIN_ACL),
    conn("reset", 2, ADMIN_FLAGS, slowlog::slowlog_reset, ADMIN_ACL),
    conn("help", 2, HELP_FLAGS, slowlog::slowlog_help, &["slow"]),
];

const LAT_FLAGS: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

const LATENCY_SUBS: &[CommandSpec] = &[
    conn("latest", 2, LAT_FLAGS, latency::latency_latest, ADMIN_ACL),
    conn("history", 3, LAT_FLAGS, latency::latency_history, ADMIN_ACL),
    conn("reset", -2, LAT_FLAGS, latency::latency_reset, ADMIN_ACL),
    conn("graph", 3, LAT_FLAGS, latency::latency_graph, ADMIN_ACL),
    conn("doctor", 2, LAT_FLAGS, latency::latency_doctor, ADMIN_ACL),
    coord(
        "histogram",
        -2,
        LAT_FLAGS,
        latency::latency_histogram,
        ADMIN_ACL,
    ),
    conn("help", 2, HELP_FLAGS, latency::latency_help, &["slow"]),
];

/// CLIENT PAUSE and CLIENT UNPAUSE, for the CLIENT table.
pub(crate) const CLIENT_PAUSE: CommandSpec = conn(
    "pause",
    -3,
    ADMIN | NOSCRIPT | LOADING | STALE,
    pause::client_pause,
    &["admin", "slow", "dangerous", "connection"],
);
pub(crate) const CLIENT_UNPAUSE: CommandSpec = conn(
    "unpause",
    2,
    ADMIN | NOSCRIPT | LOADING | STALE,
    pause::client_unpause,
    &["admin", "slow", "dangerous", "connection"],
);

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    #[test]
    fn latency_events_and_reports() {
        let mut t = TestServer::new(2);
        t.server.config.write().unwrap().enable_debug_command = config::ProtectedAction::Yes;
        assert_eq!(
            t.run(&["CONFIG", "SET", "latency-monitor-threshold", "5"]),
            "+OK\r\n"
        );
        // A 10 ms call of a slow command, as `after_call` samples it (DEBUG
        // SLEEP 0.01 in tests/debug_command: DEBUG runs as a coordinator,
        // which this driver does not count).
        t.server.ops.latency.command_sample(false, 10);
        let latest = t.run(&["LATENCY", "LATEST"]);
        assert!(
            latest.starts_with("*1\r\n*4\r\n$7\r\ncommand\r\n:"),
            "{latest}"
        );
        let hist = t.run(&["LATENCY", "HISTORY", "command"]);
        assert!(hist.starts_with("*1\r\n*2\r\n:"), "{hist}");
        let graph = t.run(&["LATENCY", "GRAPH", "command"]);
        assert!(graph.contains("command - high "), "{graph}");
        assert!(
            graph.contains(&format!("\n{}\n", "-".repeat(80))),
            "{graph}"
        );
        let doctor = t.run(&["LATENCY", "DOCTOR"]);
        assert!(
            doctor.contains("Dave, I have observed latency spikes"),
            "{doctor}"
        );
        assert!(doctor.contains("1. command: 1 latency spikes"), "{doctor}");
        assert_eq!(t.run(&["LATENCY", "RESET", "command", "x"]), ":1\r\n");
        assert_eq!(t.run(&["LATENCY", "LATEST"]), "*0\r\n");
    }

    #[test]
    fn info_latencystats_per_command() {
        let mut t = TestServer::new(2);
        t.run(&["SET", "a", "b"]);
        t.run(&["CLIENT", "ID"]);
        let info = t.run(&["INFO", "latencystats"]);
        assert!(info.contains("latency_percentiles_usec_set:p50="), "{info}");
        assert!(
            info.contains("latency_percentiles_usec_client|id:p50="),
            "{info}"
        );
        assert!(info.contains(",p99=") && info.contains(",p99.9="), "{info}");
        t.run(&[
            "CONFIG",
            "SET",
            "latency-tracking-info-percentiles",
            "0 100",
        ]);
        let info = t.run(&["INFO", "latencystats"]);
        assert!(info.contains(":p0=") && info.contains(",p100="), "{info}");
        t.run(&["CONFIG", "SET", "latency-tracking", "no"]);
        let info = t.run(&["INFO", "latencystats"]);
        assert!(!info.contains("latency_percentiles"), "{info}");
    }
}
