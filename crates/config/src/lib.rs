//! Server configuration: one declarative table of directives, read by everything.
//!
//! # What this module owns
//!
//! [`Config`] (the typed settings the server reads) and `DIRECTIVES`, a static table in the
//! spirit of Redis's `static_configs[]` in `config.c`. Each row gives a directive's name, its
//! alias, whether `CONFIG SET` may change it, and its kind (bool, integer, octal, memory, enum,
//! string, list) with bounds, default and typed accessors into [`Config`]. That one table drives:
//!
//! * the defaults ([`Config::default`] applies every row's default),
//! * config-file parsing ([`parse_config_text`], redis.conf syntax),
//! * command-line parsing ([`parse_cli`]: `--name value` arguments become config lines, appended
//!   after the file, exactly as `redis-server` does, so they override it),
//! * `CONFIG GET` ([`config_get`], glob patterns) and `CONFIG SET` ([`config_set`]),
//! * the directive list in [`help_text`].
//!
//! Adding a directive is adding a field to [`Config`] and a row to the table; nothing else.
//!
//! # Invariants
//!
//! * Every value stored in a [`Config`] has passed its row's validation: setters run only after
//!   the parser and the bounds check, so a setter's narrowing `as` cast cannot truncate.
//! * [`config_set`] is atomic: every pair is looked up, parsed and bounds-checked on a copy
//!   before the live config is touched; on error nothing changes (Redis 7 semantics).
//! * Every client- or file-visible error is the exact text Redis 7.0 prints, checked in tests
//!   against `redis-server` 7.0.15. Deliberate differences are listed below.
//!
//! # What it must never do
//!
//! Panic on any input (file, argv or `CONFIG SET`), print, exit, or touch sockets: it returns
//! values and errors; the binary decides what to do with them. The only I/O is [`parse_cli`]
//! reading the config file (and stdin for `-`), bounded by [`MAX_CONFIG_BYTES`].
//!
//! # Why it is built this way
//!
//! Rejected: a hand-written `match` per entry point (file, argv, GET, SET). Four copies drift apart
//! in names, bounds and formats; Redis had exactly that (separate code in the file loader, `CONFIG
//! SET` and `CONFIG GET`) until 6.0 replaced it with the table. Rejected too: a derive macro or
//! serde: no outside dependencies here, and the redis.conf grammar (quoting, `\xHH`, units, `yes`/`no`) is
//! Redis's own anyway. Typed fields in [`Config`] (rather than a string map) keep the hot path free
//! of parsing: the server reads `cfg.hz`, never `get("hz")`.
//!
//! The parsing helpers are ports of Redis's own (`sdssplitargs`, `sdscatrepr`, `string2ll` (shared
//! with the whole server through `ds`), `memtoull`, `strtoll(…, 8)`, `stringmatchlen`), because "accepts the same input" is the
//! contract: the same file must load in both servers with the same result.
//!
//! # Deliberate differences from Redis 7.0.15
//!
//! * `include` is rejected (fatal config error) instead of loading another file.
//! * `memtoull`: a value whose digits overflow saturates to `u64::MAX` as in Redis, but a unit
//!   multiplication that overflows (`99999999999gb`) is rejected instead of silently wrapping.
//! * `loglevel` also accepts `nothing` (Redis 7.2), so its error lists five names.
//! * `CONFIG GET` replies in table order and returns each directive once even when asked by
//!   both name and alias (Redis 7.0 can return an alias and its target twice).
//! * `shards`/`databases` have small upper bounds (see [`MAX_SHARDS`], [`MAX_DATABASES`]).
//! * `lazyfree-lazy-eviction`, `-expire`, `-server-del`, `-user-del`, `-user-flush` and
//!   `replica-lazy-flush` default to `yes` (Redis 7.0: `no`): Tessera frees big values off the
//!   shard's thread unless told otherwise, for low tail latency, as Valkey 8 chose too.
//!
//! # Module map
//!
//! This file holds the types ([`Config`], its enums, [`ObufLimit`], [`RenameCommand`]) and the
//! crate's limits; each job that reads or writes them has its own module:
//!
//! * `directives`: the table (`DIRECTIVES`, `Kind`, `Runtime`, `lookup`) and the check/set/get
//!   helpers of the directives with structured values.
//! * `parse`: redis.conf text ([`parse_config_text`], [`ConfigError`]) and the ports of Redis's
//!   value parsers ([`split_args`], `memtoull`, `strtoll`, `sdscatrepr`).
//! * `cli`: the command line ([`parse_cli`], [`CliAction`], [`help_text`], [`version_text`]).
//! * `get_set`: [`config_get`] (with its glob matcher) and [`config_set`].
//! * [`rewrite`]: `CONFIG REWRITE`. [`cpulist`]: the `server-cpulist` grammar.
//!
//! The public items of the private modules are re-exported here, so every path is `config::…`.
//! Unit tests sit beside the module they test (`<module>/tests.rs`), sharing `testutil`.

mod cli;
pub mod cpulist;
mod directives;
mod get_set;
mod parse;
pub mod rewrite;
#[cfg(test)]
mod testutil;

pub use cli::{help_text, parse_cli, version_text, CliAction};
pub use get_set::{config_get, config_set};
pub use parse::{parse_config_text, split_args, ConfigError};

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use directives::DIRECTIVES;

/// The server's version, as printed by `--version` and in fatal config errors.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Upper bound on `shards` (alias `threads`). One shard per core; more than this many cores
/// sharing one process is beyond what the mailbox fan-out is designed for.
pub const MAX_SHARDS: i64 = 1024;

/// Upper bound on `databases`. Every shard preallocates one table header per database, so the
/// bound keeps that array small (Redis allows `INT_MAX`, which nobody can use).
pub const MAX_DATABASES: i64 = 1024;

/// Upper bound on the bytes read from a config file plus stdin. redis.conf with every comment
/// is ~110 KB; the bound only stops `tessera /dev/zero` from eating memory.
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// Server verbosity (`loglevel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum LogLevel {
    Debug,
    Verbose,
    Notice,
    Warning,
    /// Log nothing (Redis 7.2).
    Nothing,
}

impl LogLevel {
    /// All levels in declaration order; `ALL[i] as usize == i` and `NAMES[i]` is its name.
    pub const ALL: [LogLevel; 5] = [
        Self::Debug,
        Self::Verbose,
        Self::Notice,
        Self::Warning,
        Self::Nothing,
    ];
    const NAMES: &'static [&'static str] = &["debug", "verbose", "notice", "warning", "nothing"];

    /// The name used in config files and `CONFIG GET`.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// Who may use a protected action (`enable-debug-command`): nobody, every
/// client, or local clients (loopback and unix sockets) only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ProtectedAction {
    No,
    Yes,
    Local,
}

impl ProtectedAction {
    /// In declaration order; `ALL[i] as usize == i` and `NAMES[i]` is its name.
    pub const ALL: [ProtectedAction; 3] = [Self::No, Self::Yes, Self::Local];
    const NAMES: &'static [&'static str] = &["no", "yes", "local"];

    /// Whether a client (`local`: on a loopback address or a unix socket)
    /// may use the action (Redis's `allowProtectedAction`).
    pub fn allows(self, local: bool) -> bool {
        self == Self::Yes || (self == Self::Local && local)
    }
}

/// What to do when `maxmemory` is reached (`maxmemory-policy`). Order is Redis's, so the
/// "must be one of" error lists the names as Redis does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MaxmemoryPolicy {
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
    AllkeysLru,
    AllkeysLfu,
    AllkeysRandom,
    Noeviction,
}

impl MaxmemoryPolicy {
    /// All policies in declaration order; `ALL[i] as usize == i` and `NAMES[i]` is its name.
    pub const ALL: [MaxmemoryPolicy; 8] = [
        Self::VolatileLru,
        Self::VolatileLfu,
        Self::VolatileRandom,
        Self::VolatileTtl,
        Self::AllkeysLru,
        Self::AllkeysLfu,
        Self::AllkeysRandom,
        Self::Noeviction,
    ];
    const NAMES: &'static [&'static str] = &[
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "noeviction",
    ];

    /// The name used in config files and `CONFIG GET`.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// When the append-only file is fsynced (`appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AppendFsync {
    /// Once a second, in the background.
    Everysec,
    /// Before a write is acknowledged (group commit).
    Always,
    /// When the OS decides.
    No,
}

impl AppendFsync {
    /// All values in declaration order, Redis's (its CONFIG SET error
    /// lists them so); `ALL[i] as usize == i` and `NAMES[i]` is its name.
    pub const ALL: [AppendFsync; 3] = [Self::Everysec, Self::Always, Self::No];
    const NAMES: &'static [&'static str] = &["everysec", "always", "no"];

    /// The name used in config files and `CONFIG GET`.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// Client classes of `client-output-buffer-limit`, in Redis's order (`CLIENT_TYPE_NORMAL`,
/// `_SLAVE`, `_PUBSUB`): the index into [`Config::client_output_buffer_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ObufClass {
    Normal,
    Replica,
    Pubsub,
}

impl ObufClass {
    /// The names `CONFIG GET` prints (Redis's `getClientTypeName`).
    const NAMES: [&'static str; 3] = ["normal", "slave", "pubsub"];

    /// Redis's `getClientTypeByName` without `master` (which has no limits).
    fn by_name(name: &[u8]) -> Option<ObufClass> {
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if is("normal") {
            Some(Self::Normal)
        } else if is("slave") || is("replica") {
            Some(Self::Replica)
        } else if is("pubsub") {
            Some(Self::Pubsub)
        } else {
            None
        }
    }
}

/// `shutdown-on-sigint` / `shutdown-on-sigterm` flags, Redis's values
/// (`SHUTDOWN_SAVE`, `_NOSAVE`, `_NOW`, `_FORCE`); none is `default`.
pub const SHUTDOWN_SIG_SAVE: u8 = 1;
pub const SHUTDOWN_SIG_NOSAVE: u8 = 2;
pub const SHUTDOWN_SIG_NOW: u8 = 4;
pub const SHUTDOWN_SIG_FORCE: u8 = 8;

/// One class's output buffer limits: a client is closed when its pending output reaches
/// `hard` bytes, or stays at `soft` bytes or more for more than `soft_seconds`. 0 disables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObufLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: i32,
}

/// The server's settings. Build with [`Config::default`], [`parse_cli`] or
/// [`parse_config_text`]; change at runtime only through [`config_set`].
// Not `Eq`: `latency_tracking_info_percentiles` holds floats.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `port`: TCP port; 0 disables TCP.
    pub port: u16,
    /// `bind`: addresses to listen on; empty means no TCP listener.
    pub bind: Vec<String>,
    /// `unixsocket`: path of the Unix socket, if any.
    pub unixsocket: Option<PathBuf>,
    /// `unixsocketperm`: permission bits of the Unix socket (0 = leave umask's).
    pub unixsocketperm: u32,
    /// `shards` (alias `threads`): number of shard threads; 0 = one per CPU.
    pub shards: usize,
    /// `shard-consolidation`: while the load fits in fewer threads, one
    /// thread runs several shards' event loops, and the others sleep.
    pub shard_consolidation: bool,
    /// `server-cpulist` (alias `server_cpulist`): the list as written
    /// (`""`: threads not pinned); see [`cpulist`].
    pub server_cpulist: String,
    /// `databases`: number of logical databases (`SELECT 0..databases-1`).
    pub databases: usize,
    /// `maxclients`: connections accepted at once.
    pub maxclients: u64,
    /// `timeout`: idle seconds before a client is closed; 0 = never.
    pub timeout_s: u64,
    /// `tcp-keepalive`: `SO_KEEPALIVE` interval in seconds; 0 = off.
    pub tcp_keepalive_s: u64,
    /// `protected-mode`: refuse non-loopback clients while the default user is `nopass`
    /// (Redis 7.0 no longer looks at `bind` for this, whatever its comment says).
    pub protected_mode: bool,
    /// `loglevel`.
    pub loglevel: LogLevel,
    /// `enable-debug-command`: who may run DEBUG (Redis 7's default `no`).
    pub enable_debug_command: ProtectedAction,
    /// `enable-module-command`: who may run MODULE LOAD, LOADEX and UNLOAD
    /// (Redis 7's default `no`; Tessera loads no module either way).
    pub enable_module_command: ProtectedAction,
    /// `logfile`: `None` = stdout.
    pub logfile: Option<PathBuf>,
    /// `proto-max-bulk-len`: largest bulk string accepted from a client.
    pub proto_max_bulk_len: u64,
    /// `client-query-buffer-limit`: largest query buffer per client.
    pub client_query_buffer_limit: u64,
    /// `client-output-buffer-limit`: per [`ObufClass`] (index `class as usize`).
    pub client_output_buffer_limit: [ObufLimit; 3],
    /// `hz`: background task frequency, always in `1..=500`.
    pub hz: u32,
    /// `notify-keyspace-events`: the classes of `ds::events` to publish.
    pub notify_keyspace_events: u32,
    /// `requirepass`: `None` = no password.
    pub requirepass: Option<Vec<u8>>,
    /// `aclfile`: where ACL SAVE / LOAD keep the users; `None` = no file.
    pub aclfile: Option<PathBuf>,
    /// `acl-pubsub-default`: new users get `allchannels` (true) or
    /// `resetchannels` (false, Redis 7's default).
    pub acl_pubsub_default_all: bool,
    /// `acllog-max-len`: entries ACL LOG keeps.
    pub acllog_max_len: u64,
    /// `tracking-table-max-keys`: keys remembered for client-side caching
    /// before the oldest are invalidated to make room; 0 = no limit.
    pub tracking_table_max_keys: u64,
    /// `user <name> <rules ...>` lines, in order (each vector: the name,
    /// then the rules as written); applied and checked at start by the
    /// ACL layer, not shown by CONFIG GET.
    pub users: Vec<Vec<Vec<u8>>>,
    /// `maxmemory`: 0 = no limit.
    pub maxmemory: u64,
    /// `maxmemory-clients` as Redis stores it: bytes when positive, a
    /// percentage of `maxmemory` when negative (`10%` is -10), 0 = no
    /// limit. Read through [`Config::client_eviction_limit`].
    pub maxmemory_clients: i64,
    /// `daemonize`: fork into the background at start (immutable).
    pub daemonize: bool,
    /// `key-load-delay` (hidden, a Redis test hook): microseconds to sleep
    /// per key loaded; negative = a loop of that many iterations in Redis.
    pub key_load_delay: i32,
    /// `maxmemory-policy`.
    pub maxmemory_policy: MaxmemoryPolicy,
    /// `maxmemory-samples`: keys sampled per database to pick an eviction candidate
    /// (Redis accepts up to INT_MAX; values above the pool size only cost time).
    pub maxmemory_samples: u32,
    /// `maxmemory-eviction-tenacity`: how long one eviction pass may run (0..=100).
    pub maxmemory_eviction_tenacity: u32,
    /// `lfu-log-factor`: how fast the LFU counter saturates (higher = slower).
    pub lfu_log_factor: u32,
    /// `lfu-decay-time`: minutes per LFU counter decrement of an idle key; 0 = never decay.
    pub lfu_decay_time_min: u32,
    /// `lazyfree-lazy-eviction`: eviction frees big values in the background.
    pub lazyfree_lazy_eviction: bool,
    /// `lazyfree-lazy-expire`: expiry frees big values in the background.
    pub lazyfree_lazy_expire: bool,
    /// `lazyfree-lazy-server-del`: implicit deletes (an overwrite, RENAME's target, RESTORE
    /// REPLACE ...) free big values in the background.
    pub lazyfree_lazy_server_del: bool,
    /// `lazyfree-lazy-user-del`: DEL frees big values in the background, as UNLINK always does.
    pub lazyfree_lazy_user_del: bool,
    /// `lazyfree-lazy-user-flush`: FLUSHALL / FLUSHDB without ASYNC or SYNC are ASYNC.
    pub lazyfree_lazy_user_flush: bool,
    /// `replica-lazy-flush` (alias `slave-lazy-flush`): a replica's full sync frees its old
    /// data in the background.
    pub replica_lazy_flush: bool,
    /// `hash-max-listpack-entries`/`-value`: a hash stays compact while it
    /// has at most this many fields and no field or value longer than this.
    pub hash_max_listpack_entries: u64,
    pub hash_max_listpack_value: u64,
    /// `set-max-intset-entries`: an all-integer set stays an intset up to this size.
    pub set_max_intset_entries: u64,
    /// `set-max-listpack-entries`/`-value` (Redis 7.2): small non-integer sets stay compact.
    pub set_max_listpack_entries: u64,
    pub set_max_listpack_value: u64,
    /// `zset-max-listpack-entries`/`-value`: a sorted set stays compact within these.
    pub zset_max_listpack_entries: u64,
    pub zset_max_listpack_value: u64,
    /// `list-max-listpack-size`: positive = entries per list node, negative =
    /// node size class (-1 = 4 KiB ... -5 = 64 KiB).
    pub list_max_listpack_size: i32,
    /// `list-compress-depth`: uncompressed nodes kept at each end; 0 = none compressed.
    pub list_compress_depth: u32,
    /// `hll-sparse-max-bytes`: a sparse HyperLogLog longer than this
    /// (header included) is promoted to the dense encoding.
    pub hll_sparse_max_bytes: u64,
    /// `stream-node-max-bytes`: a stream's tail node (one listpack) takes
    /// no new entry that would bring it to this size; 0 = no limit (but
    /// never past 1 GiB).
    pub stream_node_max_bytes: u64,
    /// `stream-node-max-entries`: entries (deleted ones included) after
    /// which a stream starts a new node; 0 = no limit.
    pub stream_node_max_entries: i64,
    /// `dir`: where snapshots and the append-only file live; `None` = the
    /// working directory at start-up.
    pub dir: Option<PathBuf>,
    /// `dbfilename`: the snapshot's file name inside `dir`.
    pub dbfilename: Vec<u8>,
    /// `save`: snapshot rules, as `seconds changes` pairs (validated).
    pub save: Vec<String>,
    /// `shutdown-on-sigint` / `shutdown-on-sigterm`: the shutdown a signal
    /// asks for, as [`SHUTDOWN_SIG_SAVE`] ... bits (0: `default`).
    pub shutdown_on_sigint: u8,
    pub shutdown_on_sigterm: u8,
    /// `rdbcompression`: LZF-compress long strings in snapshots.
    pub rdbcompression: bool,
    /// `busy-reply-threshold` (alias `lua-time-limit`): a script running
    /// longer is busy (other clients get `-BUSY`, SCRIPT KILL works).
    pub busy_reply_threshold_ms: u64,
    /// `rdbchecksum`: end snapshots with a CRC64 (0 when off).
    pub rdbchecksum: bool,
    /// `stop-writes-on-bgsave-error`: refuse writes (MISCONF) after a
    /// failed background save while save rules are set.
    pub stop_writes_on_bgsave_error: bool,
    /// `appendonly`: log every write to the append-only file.
    pub appendonly: bool,
    /// `repl-backlog-size`: bytes of the replication stream kept for
    /// partial resyncs.
    pub repl_backlog_size: u64,
    /// `repl-backlog-ttl`: seconds without replicas after which the
    /// backlog is freed (0: never).
    pub repl_backlog_ttl_s: u64,
    /// `repl-diskless-sync`: full syncs stream the snapshot to the
    /// replica's socket instead of writing it to disk first.
    pub repl_diskless_sync: bool,
    /// `repl-diskless-sync-delay`: seconds a diskless sync waits for more
    /// replicas to share it.
    pub repl_diskless_sync_delay_s: u64,
    /// `repl-diskless-sync-max-replicas`: start a waiting diskless sync
    /// as soon as this many replicas wait (0: no limit).
    pub repl_diskless_sync_max_replicas: u64,
    /// `repl-ping-replica-period`: seconds between PINGs in the stream.
    pub repl_ping_replica_period_s: u64,
    /// `repl-timeout`: seconds without an ACK before a replica is dropped.
    pub repl_timeout_s: u64,
    /// `min-replicas-to-write`: writes are refused (NOREPLICAS) with
    /// fewer good replicas (0: off).
    pub min_replicas_to_write: u64,
    /// `min-replicas-max-lag`: seconds since its last ACK under which a
    /// replica is good.
    pub min_replicas_max_lag_s: u64,
    /// `appendfilename`: base name of the AOF files.
    pub appendfilename: Vec<u8>,
    /// `appenddirname`: directory (under `dir`) holding the AOF files.
    pub appenddirname: Vec<u8>,
    /// `appendfsync`.
    pub appendfsync: AppendFsync,
    /// `aof-load-truncated`: start from an AOF whose last record is torn.
    pub aof_load_truncated: bool,
    /// `aof-use-rdb-preamble`: rewrites write the base as an RDB file.
    pub aof_use_rdb_preamble: bool,
    /// `aof-timestamp-enabled`: `#TS:<unix seconds>` annotation lines in
    /// the AOF (before a record in a new second; at the start of a base
    /// of commands).
    pub aof_timestamp_enabled: bool,
    /// `auto-aof-rewrite-percentage`: rewrite when the AOF grew this much
    /// over its base (0 = never).
    pub auto_aof_rewrite_percentage: u64,
    /// `auto-aof-rewrite-min-size`: ... and is at least this big.
    pub auto_aof_rewrite_min_size: u64,
    /// `slowlog-log-slower-than`: µs a command must take to be logged; negative = off.
    pub slowlog_log_slower_than: i64,
    /// `slowlog-max-len`: entries the slowlog keeps.
    pub slowlog_max_len: u64,
    /// `latency-monitor-threshold`: ms a command must take to be a latency event; 0 = off.
    pub latency_monitor_threshold: u64,
    /// `latency-tracking`: per-command latency histograms.
    pub latency_tracking: bool,
    /// `latency-tracking-info-percentiles`: the percentiles INFO latencystats shows.
    pub latency_tracking_info_percentiles: Vec<f64>,
    /// `replicaof host port` (alias `slaveof`): empty, or the master's host and port.
    pub replicaof: Vec<String>,
    /// `masterauth`: the password a replica sends its master (`None`: no AUTH).
    pub masterauth: Option<Vec<u8>>,
    /// `masteruser`: the ACL user of that AUTH (`None`: the password alone).
    pub masteruser: Option<Vec<u8>>,
    /// `replica-read-only`: a replica refuses normal clients' writes.
    pub replica_read_only: bool,
    /// `replica-serve-stale-data`: a replica whose link is down still serves its data.
    pub replica_serve_stale_data: bool,
    /// `replica-ignore-disk-write-errors`: a replica whose disk fails
    /// applies its master's writes anyway (else it ends the process).
    pub replica_ignore_disk_write_errors: bool,
    /// `replica-priority`: shown in INFO for Sentinel's choice.
    pub replica_priority: u32,
    /// `replica-announced`: shown in INFO for Sentinel.
    pub replica_announced: bool,
    /// `rename-command old new` lines of the config file, in order (`new` empty: the
    /// command is removed). Not a directive: CONFIG GET does not show them.
    pub rename_commands: Vec<RenameCommand>,
    /// Absolute path of the config file given on the command line, if any. Not a directive.
    pub config_file: Option<PathBuf>,
    /// `tls-port`: TCP port for TLS clients; 0 = none.
    pub tls_port: u16,
    /// `tls-cert-file`, `tls-key-file` (and its `tls-key-file-pass`): the
    /// server's certificate chain and private key (PEM).
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub tls_key_file_pass: Option<Vec<u8>>,
    /// `tls-client-cert-file`, `tls-client-key-file`, `tls-client-key-file-pass`:
    /// what the server presents when it connects out (replication).
    pub tls_client_cert_file: Option<PathBuf>,
    pub tls_client_key_file: Option<PathBuf>,
    pub tls_client_key_file_pass: Option<Vec<u8>>,
    /// `tls-dh-params-file`: accepted and kept (rustls uses ECDHE only).
    pub tls_dh_params_file: Option<PathBuf>,
    /// `tls-ca-cert-file` / `tls-ca-cert-dir`: the CAs client certificates
    /// (and a master's) must chain to.
    pub tls_ca_cert_file: Option<PathBuf>,
    pub tls_ca_cert_dir: Option<PathBuf>,
    /// `tls-auth-clients`.
    pub tls_auth_clients: TlsAuthClients,
    /// `tls-protocols` (e.g. `TLSv1.2 TLSv1.3`), `tls-ciphers` (TLS 1.2,
    /// OpenSSL's list syntax), `tls-ciphersuites` (TLS 1.3); `None` = defaults.
    pub tls_protocols: Option<Vec<u8>>,
    pub tls_ciphers: Option<Vec<u8>>,
    pub tls_ciphersuites: Option<Vec<u8>>,
    /// `tls-prefer-server-ciphers`: the server's suite order wins.
    pub tls_prefer_server_ciphers: bool,
    /// `tls-session-caching`, `-cache-size`, `-cache-timeout`.
    pub tls_session_caching: bool,
    pub tls_session_cache_size: u32,
    pub tls_session_cache_timeout_s: u32,
    /// `tls-replication`, `tls-cluster`: links to a master (cluster bus) use TLS.
    pub tls_replication: bool,
    pub tls_cluster: bool,
}

/// `tls-auth-clients`: whether TLS clients must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsAuthClients {
    No,
    Yes,
    Optional,
}

impl TlsAuthClients {
    pub const ALL: [TlsAuthClients; 3] = [Self::No, Self::Yes, Self::Optional];
    const NAMES: &'static [&'static str] = &["no", "yes", "optional"];
}

impl Config {
    /// Redis's rule for building the TLS context at all (`tlsConfigure` is
    /// called, at start and on CONFIG SET of a `tls-*` directive, only
    /// then).
    pub fn tls_wanted(&self) -> bool {
        self.tls_port != 0 || self.tls_replication || self.tls_cluster
    }

    /// Whether a setting the TLS context is built from differs.
    pub fn tls_context_differs(&self, o: &Config) -> bool {
        let files = |c: &Config| {
            [
                c.tls_cert_file.clone(),
                c.tls_key_file.clone(),
                c.tls_client_cert_file.clone(),
                c.tls_client_key_file.clone(),
                c.tls_dh_params_file.clone(),
                c.tls_ca_cert_file.clone(),
                c.tls_ca_cert_dir.clone(),
            ]
        };
        let words = |c: &Config| {
            [
                c.tls_key_file_pass.clone(),
                c.tls_client_key_file_pass.clone(),
                c.tls_protocols.clone(),
                c.tls_ciphers.clone(),
                c.tls_ciphersuites.clone(),
            ]
        };
        let flags = |c: &Config| {
            (
                c.tls_auth_clients,
                c.tls_prefer_server_ciphers,
                c.tls_session_caching,
                c.tls_session_cache_size,
                c.tls_session_cache_timeout_s,
                c.tls_replication,
                c.tls_cluster,
            )
        };
        files(self) != files(o) || words(self) != words(o) || flags(self) != flags(o)
    }
}

/// One `rename-command` line, with where it was (for the start-up error when the command
/// does not exist, which only the command table can tell).
#[derive(Clone, Debug, PartialEq)]
pub struct RenameCommand {
    pub from: Vec<u8>,
    pub to: Vec<u8>,
    pub line_no: usize,
    pub line: String,
}

/// A percentile as Redis prints it (`%f` without trailing zeros): `50`, `99.9`.
pub fn format_percentile(p: f64) -> String {
    let s = format!("{p:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl Config {
    /// The byte limit on all normal and pub/sub clients' memory together,
    /// 0 = none (Redis's `getClientEvictionLimit`): a percentage applies
    /// only while `maxmemory` is set, and any limit is at least 128 KiB so
    /// that a bad setting cannot cut every client off.
    pub fn client_eviction_limit(&self) -> u64 {
        let limit = if self.maxmemory_clients < 0 && self.maxmemory > 0 {
            (self.maxmemory as f64 * -(self.maxmemory_clients as f64) / 100.0) as u64
        } else if self.maxmemory_clients > 0 {
            self.maxmemory_clients as u64
        } else {
            return 0;
        };
        limit.max(128 * 1024)
    }

    /// The `save` rules as `(seconds, changes)` pairs.
    pub fn save_rules(&self) -> Vec<(u64, u64)> {
        self.save
            .chunks_exact(2)
            .filter_map(|p| Some((p[0].parse().ok()?, p[1].parse().ok()?)))
            .collect()
    }

    /// The snapshot file: `dir/dbfilename`.
    pub fn rdb_path(&self) -> PathBuf {
        let name = OsString::from_vec(self.dbfilename.clone());
        match &self.dir {
            Some(d) => d.join(name),
            None => PathBuf::from(name),
        }
    }
}

impl Config {
    /// Every field zero/empty: the canvas on which the table's defaults are painted.
    fn blank() -> Config {
        Config {
            port: 0,
            bind: Vec::new(),
            unixsocket: None,
            unixsocketperm: 0,
            shards: 0,
            shard_consolidation: false,
            server_cpulist: String::new(),
            databases: 0,
            maxclients: 0,
            timeout_s: 0,
            tcp_keepalive_s: 0,
            protected_mode: false,
            loglevel: LogLevel::Debug,
            enable_debug_command: ProtectedAction::No,
            enable_module_command: ProtectedAction::No,
            logfile: None,
            proto_max_bulk_len: 0,
            client_query_buffer_limit: 0,
            client_output_buffer_limit: [ObufLimit::default(); 3],
            hz: 0,
            notify_keyspace_events: 0,
            requirepass: None,
            aclfile: None,
            acl_pubsub_default_all: false,
            acllog_max_len: 0,
            tracking_table_max_keys: 0,
            users: Vec::new(),
            maxmemory: 0,
            maxmemory_clients: 0,
            daemonize: false,
            key_load_delay: 0,
            maxmemory_policy: MaxmemoryPolicy::Noeviction,
            maxmemory_samples: 0,
            maxmemory_eviction_tenacity: 0,
            lfu_log_factor: 0,
            lfu_decay_time_min: 0,
            lazyfree_lazy_eviction: false,
            lazyfree_lazy_expire: false,
            lazyfree_lazy_server_del: false,
            lazyfree_lazy_user_del: false,
            lazyfree_lazy_user_flush: false,
            replica_lazy_flush: false,
            hash_max_listpack_entries: 0,
            hash_max_listpack_value: 0,
            set_max_intset_entries: 0,
            set_max_listpack_entries: 0,
            set_max_listpack_value: 0,
            zset_max_listpack_entries: 0,
            zset_max_listpack_value: 0,
            list_max_listpack_size: 0,
            list_compress_depth: 0,
            hll_sparse_max_bytes: 0,
            stream_node_max_bytes: 0,
            stream_node_max_entries: 0,
            dir: None,
            dbfilename: Vec::new(),
            save: Vec::new(),
            shutdown_on_sigint: 0,
            shutdown_on_sigterm: 0,
            rdbcompression: false,
            busy_reply_threshold_ms: 0,
            rdbchecksum: false,
            stop_writes_on_bgsave_error: false,
            appendonly: false,
            repl_backlog_size: 0,
            repl_backlog_ttl_s: 0,
            repl_diskless_sync: false,
            repl_diskless_sync_delay_s: 0,
            repl_diskless_sync_max_replicas: 0,
            repl_ping_replica_period_s: 0,
            repl_timeout_s: 0,
            min_replicas_to_write: 0,
            min_replicas_max_lag_s: 0,
            appendfilename: Vec::new(),
            appenddirname: Vec::new(),
            appendfsync: AppendFsync::Everysec,
            aof_load_truncated: false,
            aof_use_rdb_preamble: false,
            aof_timestamp_enabled: false,
            auto_aof_rewrite_percentage: 0,
            auto_aof_rewrite_min_size: 0,
            slowlog_log_slower_than: 0,
            slowlog_max_len: 0,
            latency_monitor_threshold: 0,
            latency_tracking: false,
            latency_tracking_info_percentiles: Vec::new(),
            replicaof: Vec::new(),
            masterauth: None,
            masteruser: None,
            replica_read_only: false,
            replica_serve_stale_data: false,
            replica_ignore_disk_write_errors: false,
            replica_priority: 0,
            replica_announced: false,
            rename_commands: Vec::new(),
            config_file: None,
            tls_port: 0,
            tls_cert_file: None,
            tls_key_file: None,
            tls_key_file_pass: None,
            tls_client_cert_file: None,
            tls_client_key_file: None,
            tls_client_key_file_pass: None,
            tls_dh_params_file: None,
            tls_ca_cert_file: None,
            tls_ca_cert_dir: None,
            tls_auth_clients: TlsAuthClients::Yes,
            tls_protocols: None,
            tls_ciphers: None,
            tls_ciphersuites: None,
            tls_prefer_server_ciphers: false,
            tls_session_caching: false,
            tls_session_cache_size: 0,
            tls_session_cache_timeout_s: 0,
            tls_replication: false,
            tls_cluster: false,
        }
    }
}

impl Default for Config {
    /// The defaults of the directive table (Redis's, except the `lazyfree-*` directives:
    /// see the module doc).
    fn default() -> Config {
        let mut cfg = Config::blank();
        for d in DIRECTIVES {
            d.kind.apply_default(&mut cfg);
        }
        cfg
    }
}
