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

pub mod cpulist;

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

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

/// Redis's `CONFIG_BINDADDR_MAX`.
const MAX_BIND_ADDRS: usize = 16;

/// `hz` is accepted in `0..=INT_MAX` and clamped into this range, like Redis's
/// `CONFIG_MIN_HZ`/`CONFIG_MAX_HZ`.
const HZ_MIN: i64 = 1;
const HZ_MAX: i64 = 500;

const I32_MAX: i64 = i32::MAX as i64;
const I32_MIN: i64 = i32::MIN as i64;
const MIB: u64 = 1024 * 1024;

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

fn parse_percentile(w: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(w).ok()?;
    let v: f64 = s.parse().ok()?;
    v.is_finite().then_some(v)
}

fn check_percentiles(words: &[Vec<u8>]) -> Result<(), String> {
    for w in words {
        let Some(v) = parse_percentile(w) else {
            return Err("Invalid latency-tracking-info-percentiles parameters".into());
        };
        if !(0.0..=100.0).contains(&v) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                    .into(),
            );
        }
    }
    Ok(())
}

impl Config {
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

/// Redis's `setConfigSaveOption` check: pairs of C `strtoll` numbers,
/// seconds at least 1, changes at least 0.
fn check_save(words: &[Vec<u8>]) -> Result<(), String> {
    let ok = words.len().is_multiple_of(2)
        && words
            .iter()
            .enumerate()
            .all(|(i, w)| strtoll(w).is_some_and(|n| n >= if i % 2 == 0 { 1 } else { 0 }));
    if ok {
        Ok(())
    } else {
        Err("Invalid save parameters".into())
    }
}

/// Stores the rules as Redis does: the parsed numbers (`" +05"` is `5`),
/// changes narrowed to a C `int`.
fn set_save(c: &mut Config, words: Vec<String>) {
    c.save = words
        .chunks_exact(2)
        .flat_map(|p| {
            let secs = strtoll(p[0].as_bytes()).unwrap_or(0);
            let changes = strtoll(p[1].as_bytes()).unwrap_or(0) as i32;
            [secs.to_string(), changes.to_string()]
        })
        .collect();
}

fn no_check(_: &[Vec<u8>]) -> Result<(), String> {
    Ok(())
}

/// C's `strtoll(s, &end, 10)` then the cast to `int` Redis makes (see [`strtoll`]),
/// truncated to 32 bits.
fn strtoll_int(s: &[u8]) -> Option<i32> {
    // The implementation-defined narrowing of a C cast: keep the low 32 bits.
    strtoll(s).map(|v| v as i32)
}

/// C's `strtoll(s, &end, 10)`: leading C spaces and a sign, saturating at the `long long`
/// bounds. `None` when `end` is not the end of `s` (no digits at all, unless `s` is empty or
/// blank, is such a case).
fn strtoll(s: &[u8]) -> Option<i64> {
    let mut i = s.iter().take_while(|&&b| is_c_space(b)).count();
    if i == s.len() {
        // No digits: strtoll leaves `end` at the start, which is the end only for "".
        return s.is_empty().then_some(0);
    }
    let neg = match s[i] {
        b'-' => {
            i += 1;
            true
        }
        b'+' => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = &s[i..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mag = digits.iter().fold(0u128, |acc, d| {
        (acc * 10 + u128::from(d - b'0')).min(1 << 64)
    });
    Some(if neg {
        (-(mag as i128)).max(i128::from(i64::MIN)) as i64
    } else {
        mag.min(i64::MAX as u128) as i64
    })
}

/// Redis's `updateClientOutputBufferLimit` check: groups of `class hard soft soft-seconds`,
/// each group checked in order (class first).
fn check_obuf(words: &[Vec<u8>]) -> Result<(), String> {
    if !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    for g in words.chunks_exact(4) {
        if ObufClass::by_name(&g[0]).is_none() {
            return Err("Invalid client class specified in buffer limit configuration.".into());
        }
        let ok = memtoull(&g[1]).is_some()
            && memtoull(&g[2]).is_some()
            && strtoll_int(&g[3]).is_some_and(|s| s >= 0);
        if !ok {
            return Err(
                "Error in hard, soft or soft_seconds setting in buffer limit configuration.".into(),
            );
        }
    }
    Ok(())
}

/// Stores groups that passed [`check_obuf`]; classes not named keep their limits.
fn set_obuf(c: &mut Config, words: Vec<String>) {
    for g in words.chunks_exact(4) {
        let (Some(class), Some(hard), Some(soft), Some(secs)) = (
            ObufClass::by_name(g[0].as_bytes()),
            memtoull(g[1].as_bytes()),
            memtoull(g[2].as_bytes()),
            strtoll_int(g[3].as_bytes()),
        ) else {
            continue;
        };
        c.client_output_buffer_limit[class as usize] = ObufLimit {
            hard,
            soft,
            soft_seconds: secs,
        };
    }
}

/// Redis's `getClientOutputBufferLimitOption` form: every class, `slave` for replicas.
fn get_obuf(c: &Config) -> Vec<String> {
    let mut v = Vec::with_capacity(12);
    for (name, l) in ObufClass::NAMES.iter().zip(&c.client_output_buffer_limit) {
        v.push(name.to_string());
        v.push(l.hard.to_string());
        v.push(l.soft.to_string());
        v.push(l.soft_seconds.to_string());
    }
    v
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
            maxmemory_policy: MaxmemoryPolicy::Noeviction,
            maxmemory_samples: 0,
            maxmemory_eviction_tenacity: 0,
            lfu_log_factor: 0,
            lfu_decay_time_min: 0,
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
    /// The defaults of the directive table (Redis's, except `bind 127.0.0.1`).
    fn default() -> Config {
        let mut cfg = Config::blank();
        for d in DIRECTIVES {
            d.kind.apply_default(&mut cfg);
        }
        cfg
    }
}

// ---------------------------------------------------------------------------------------------
// The table.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Runtime {
    /// `CONFIG SET` may change it.
    Mutable,
    /// Only the file and the command line may set it.
    Immutable,
    /// Tessera's own start-up setting (Redis has no such directive):
    /// immutable, but CONFIG SET to its current value succeeds, so that
    /// tools which write back everything CONFIG GET * lists (Redis's own
    /// "CONFIG sanity" test skips only Redis's immutable names) work.
    Fixed,
    /// Redis 7's protected configs (`dir`, `dbfilename`): CONFIG SET
    /// refuses them while `enable-protected-configs` is `no`, its default.
    Protected,
}

/// A directive's type, bounds, default and accessors. Setters are called only with values that
/// passed parsing and `min..=max`, so their narrowing casts are exact.
enum Kind {
    /// `yes`/`no`.
    Bool {
        default: bool,
        get: fn(&Config) -> bool,
        set: fn(&mut Config, bool),
    },
    /// Decimal integer (Redis `string2ll`).
    Int {
        min: i64,
        max: i64,
        default: i64,
        get: fn(&Config) -> i64,
        set: fn(&mut Config, i64),
    },
    /// Octal integer (Redis `OCTAL_CONFIG`); printed in octal.
    Octal {
        min: u64,
        max: u64,
        default: u64,
        get: fn(&Config) -> u64,
        set: fn(&mut Config, u64),
    },
    /// Bytes with optional unit (Redis `MEMORY_CONFIG`); printed as plain bytes.
    Memory {
        min: u64,
        max: u64,
        default: u64,
        get: fn(&Config) -> u64,
        set: fn(&mut Config, u64),
    },
    /// One of `names` (case-insensitive); get/set by index into `names`.
    Enum {
        names: &'static [&'static str],
        default: usize,
        get: fn(&Config) -> usize,
        set: fn(&mut Config, usize),
    },
    /// Any bytes; `""` is stored as "unset" where the field is an `Option`.
    Str {
        default: &'static [u8],
        get: fn(&Config) -> Vec<u8>,
        set: fn(&mut Config, Vec<u8>),
    },
    /// One word parsed by `set`, whose error is Redis's reason text.
    Parsed {
        default: &'static [u8],
        get: fn(&Config) -> Vec<u8>,
        set: fn(&mut Config, &[u8]) -> Result<(), String>,
    },
    /// Several words (Redis `MULTI_ARG_CONFIG`); printed space-separated.
    List {
        max_len: usize,
        default: &'static [&'static str],
        get: fn(&Config) -> Vec<String>,
        set: fn(&mut Config, Vec<String>),
        check: fn(&[Vec<u8>]) -> Result<(), String>,
    },
}

struct Directive {
    name: &'static str,
    alias: Option<&'static str>,
    runtime: Runtime,
    kind: Kind,
}

impl Directive {
    const fn alias(self, alias: &'static str) -> Directive {
        Directive {
            alias: Some(alias),
            ..self
        }
    }
}

const fn d(name: &'static str, runtime: Runtime, kind: Kind) -> Directive {
    Directive {
        name,
        alias: None,
        runtime,
        kind,
    }
}

use Kind::{Bool, Enum, Int, List, Memory, Octal, Parsed, Str};
use Runtime::{Fixed, Immutable, Mutable, Protected};

// Row builders: `int!(field: type, min, max, default)` reads and writes `Config::field`. The
// setters' `as` casts are exact because `Kind::set` checks `min..=max` first.
macro_rules! int {
    ($field:ident: $ty:ty, $min:expr, $max:expr, $default:expr) => {
        int!($field: $ty, $min, $max, $default, |v: i64| v)
    };
    ($field:ident: $ty:ty, $min:expr, $max:expr, $default:expr, $map:expr) => {
        Int {
            min: $min,
            max: $max,
            default: $default,
            get: |c| c.$field as i64,
            set: |c, v| c.$field = ($map)(v) as $ty,
        }
    };
}
macro_rules! octal {
    ($field:ident: $ty:ty, $min:expr, $max:expr, $default:expr) => {
        Octal {
            min: $min,
            max: $max,
            default: $default,
            get: |c| c.$field as u64,
            set: |c, v| c.$field = v as $ty,
        }
    };
}
macro_rules! memory {
    ($field:ident, $min:expr, $max:expr, $default:expr) => {
        Memory {
            min: $min,
            max: $max,
            default: $default,
            get: |c| c.$field,
            set: |c, v| c.$field = v,
        }
    };
}
macro_rules! yes_no {
    ($field:ident, $default:expr) => {
        Bool {
            default: $default,
            get: |c| c.$field,
            set: |c, v| c.$field = v,
        }
    };
}
macro_rules! one_of {
    ($field:ident: $ty:ident, $default:ident) => {
        Enum {
            names: $ty::NAMES,
            default: $ty::$default as usize,
            get: |c| c.$field as usize,
            set: |c, i| c.$field = $ty::ALL[i],
        }
    };
}
/// `Option<PathBuf>`; `""` is `None` (Redis's `EMPTY_STRING_IS_NULL`).
macro_rules! path {
    ($field:ident) => {
        Str {
            default: b"",
            get: |c| path_bytes(&c.$field),
            set: |c, v| c.$field = bytes_path(v),
        }
    };
}
/// `Option<Vec<u8>>`; `""` is `None`.
macro_rules! bytes {
    ($field:ident) => {
        Str {
            default: b"",
            get: |c| c.$field.clone().unwrap_or_default(),
            set: |c, v| c.$field = if v.is_empty() { None } else { Some(v) },
        }
    };
}
/// `Vec<u8>` with a default.
macro_rules! name {
    ($field:ident, $default:expr) => {
        Str {
            default: $default,
            get: |c| c.$field.clone(),
            set: |c, v| c.$field = v,
        }
    };
}
macro_rules! words {
    ($field:ident, $max_len:expr, $default:expr) => {
        List {
            max_len: $max_len,
            default: $default,
            get: |c| c.$field.clone(),
            set: |c, v| c.$field = v,
            check: no_check,
        }
    };
}

const GIB: u64 = 1024 * MIB;
type Policy = MaxmemoryPolicy;

fn clamp_hz(hz: i64) -> i64 {
    hz.clamp(HZ_MIN, HZ_MAX)
}
const I64_MAX: u64 = i64::MAX as u64;
const U32_MAX: i64 = u32::MAX as i64;

/// Every directive, in the order `CONFIG GET` replies and `--help` lists them. Bounds are
/// Redis 7.0's unless the module doc says otherwise.
#[rustfmt::skip]
static DIRECTIVES: &[Directive] = &[
    // name                       runtime    kind!(field: type, min, max, default)
    // CONFIG SET of these two rebinds (see commands::server's config_set).
    d("port",                     Mutable,   int!(port: u16, 0, 65535, 6379)),
    d("bind",                     Mutable,   words!(bind, MAX_BIND_ADDRS, &["127.0.0.1"])),
    d("unixsocket",               Immutable, path!(unixsocket)),
    d("unixsocketperm",           Immutable, octal!(unixsocketperm: u32, 0, 0o777, 0)),
    d("shards",                   Fixed,     int!(shards: usize, 0, MAX_SHARDS, 0))
        .alias("threads"),
    d("shard-consolidation",      Mutable,   yes_no!(shard_consolidation, true)),
    // Redis's name first (CONFIG GET * lists it so).
    d("server_cpulist",           Immutable, Parsed {
        default: b"",
        get: |c| c.server_cpulist.clone().into_bytes(),
        set: |c, v| {
            let text = std::str::from_utf8(v).map_err(|_| cpulist::INVALID.to_string())?;
            cpulist::parse(text)?;
            c.server_cpulist = text.to_string();
            Ok(())
        },
    })
        .alias("server-cpulist"),
    d("databases",                Immutable, int!(databases: usize, 1, MAX_DATABASES, 16)),
    d("maxclients",               Mutable,   int!(maxclients: u64, 1, U32_MAX, 10_000)),
    d("timeout",                  Mutable,   int!(timeout_s: u64, 0, I32_MAX, 0)),
    d("tcp-keepalive",            Mutable,   int!(tcp_keepalive_s: u64, 0, I32_MAX, 300)),
    d("protected-mode",           Mutable,   yes_no!(protected_mode, true)),
    d("loglevel",                 Mutable,   one_of!(loglevel: LogLevel, Notice)),
    d("logfile",                  Immutable, path!(logfile)),
    d("proto-max-bulk-len",       Mutable,   memory!(proto_max_bulk_len, MIB, I64_MAX, 512 * MIB)),
    d("client-query-buffer-limit", Mutable,  memory!(client_query_buffer_limit, MIB, I64_MAX, GIB)),
    // Merges: classes not named keep their limits (Redis's special config).
    d("client-output-buffer-limit", Mutable, List {
        max_len: usize::MAX,
        default: &["normal", "0", "0", "0", "slave", "268435456", "67108864", "60",
                   "pubsub", "33554432", "8388608", "60"],
        get: get_obuf,
        set: set_obuf,
        check: check_obuf,
    }),
    // Redis accepts 0..=INT_MAX and clamps into 1..=500 (updateHZ, initServer); so do we.
    d("hz",                       Mutable,   int!(hz: u32, 0, I32_MAX, 10, clamp_hz)),
    d("busy-reply-threshold",     Mutable,   int!(busy_reply_threshold_ms: u64, 0, i64::MAX, 5000))
        .alias("lua-time-limit"),
    d("notify-keyspace-events",   Mutable,   Parsed {
        default: b"",
        get: |c| ds::events::format(c.notify_keyspace_events).into_bytes(),
        set: |c, v| {
            c.notify_keyspace_events = ds::events::parse(v)
                .ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")?;
            Ok(())
        },
    }),
    // CONFIG GET shows the password, as Redis 7.0 does.
    d("requirepass",              Mutable,   bytes!(requirepass)),
    d("aclfile",                  Immutable, path!(aclfile)),
    d("acl-pubsub-default",       Mutable,   Enum {
        names: &["allchannels", "resetchannels"],
        default: 1,
        get: |c| if c.acl_pubsub_default_all { 0 } else { 1 },
        set: |c, i| c.acl_pubsub_default_all = i == 0,
    }),
    d("acllog-max-len",           Mutable,   int!(acllog_max_len: u64, 0, I64_MAX as i64, 128)),
    d("tracking-table-max-keys",  Mutable,   int!(tracking_table_max_keys: u64, 0, I64_MAX as i64, 1_000_000)),
    d("maxmemory",                Mutable,   memory!(maxmemory, 0, u64::MAX, 0)),
    d("maxmemory-policy",         Mutable,   one_of!(maxmemory_policy: Policy, Noeviction)),
    d("maxmemory-samples",        Mutable,   int!(maxmemory_samples: u32, 1, I32_MAX, 5)),
    d("maxmemory-eviction-tenacity", Mutable, int!(maxmemory_eviction_tenacity: u32, 0, 100, 10)),
    d("lfu-log-factor",           Mutable,   int!(lfu_log_factor: u32, 0, I32_MAX, 10)),
    d("lfu-decay-time",           Mutable,   int!(lfu_decay_time_min: u32, 0, I32_MAX, 1)),
    d("hash-max-listpack-entries", Mutable,  int!(hash_max_listpack_entries: u64, 0, I64_MAX as i64, 512))
        .alias("hash-max-ziplist-entries"),
    d("hash-max-listpack-value",  Mutable,   memory!(hash_max_listpack_value, 0, I64_MAX, 64))
        .alias("hash-max-ziplist-value"),
    d("set-max-intset-entries",   Mutable,   int!(set_max_intset_entries: u64, 0, I64_MAX as i64, 512)),
    d("set-max-listpack-entries", Mutable,   int!(set_max_listpack_entries: u64, 0, I64_MAX as i64, 128)),
    d("set-max-listpack-value",   Mutable,   int!(set_max_listpack_value: u64, 0, I64_MAX as i64, 64)),
    d("zset-max-listpack-entries", Mutable,  int!(zset_max_listpack_entries: u64, 0, I64_MAX as i64, 128))
        .alias("zset-max-ziplist-entries"),
    d("zset-max-listpack-value",  Mutable,   memory!(zset_max_listpack_value, 0, I64_MAX, 64))
        .alias("zset-max-ziplist-value"),
    d("list-max-listpack-size",   Mutable,   int!(list_max_listpack_size: i32, I32_MIN, I32_MAX, -2))
        .alias("list-max-ziplist-size"),
    d("list-compress-depth",      Mutable,   int!(list_compress_depth: u32, 0, I32_MAX, 0)),
    d("hll-sparse-max-bytes",     Mutable,   memory!(hll_sparse_max_bytes, 0, I64_MAX, 3000)),
    d("stream-node-max-bytes",    Mutable,   memory!(stream_node_max_bytes, 0, I64_MAX, 4096)),
    d("stream-node-max-entries",  Mutable,   int!(stream_node_max_entries: i64, 0, i64::MAX, 100)),
    // CONFIG GET dir: the absolute working directory, as Redis's getcwd().
    d("dir",                      Protected, Str {
        default: b"",
        get: |c| match &c.dir {
            Some(_) => path_bytes(&c.dir),
            None => std::env::current_dir()
                .map(|p| p.as_os_str().as_bytes().to_vec())
                .unwrap_or_default(),
        },
        set: |c, v| c.dir = bytes_path(v),
    }),
    d("dbfilename",               Protected, Str {
        default: b"dump.rdb",
        get: |c| c.dbfilename.clone(),
        set: |c, v| c.dbfilename = v,
    }),
    d("save",                     Mutable,   List {
        max_len: 128,
        default: &["3600", "1", "300", "100", "60", "10000"],
        get: |c| c.save.clone(),
        set: set_save,
        check: check_save,
    }),
    d("rdbcompression",           Mutable,   yes_no!(rdbcompression, true)),
    d("rdbchecksum",              Immutable, yes_no!(rdbchecksum, true)),
    d("stop-writes-on-bgsave-error", Mutable, yes_no!(stop_writes_on_bgsave_error, true)),
    d("appendonly",               Mutable,   yes_no!(appendonly, false)),
    d("appendfilename",           Immutable, name!(appendfilename, b"appendonly.aof")),
    d("appenddirname",            Immutable, name!(appenddirname, b"appendonlydir")),
    d("appendfsync",              Mutable,   one_of!(appendfsync: AppendFsync, Everysec)),
    d("aof-load-truncated",       Mutable,   yes_no!(aof_load_truncated, true)),
    d("aof-use-rdb-preamble",     Mutable,   yes_no!(aof_use_rdb_preamble, true)),
    d("auto-aof-rewrite-percentage", Mutable, int!(auto_aof_rewrite_percentage: u64, 0, I32_MAX, 100)),
    d("auto-aof-rewrite-min-size", Mutable,  memory!(auto_aof_rewrite_min_size, 0, I64_MAX, 64 * MIB)),
    // Replication, master side (issue 25).
    d("repl-backlog-size",        Mutable,   memory!(repl_backlog_size, 1, I64_MAX, MIB)),
    d("repl-backlog-ttl",         Mutable,   int!(repl_backlog_ttl_s: u64, 0, I32_MAX, 3600)),
    d("repl-diskless-sync",       Mutable,   yes_no!(repl_diskless_sync, true)),
    d("repl-diskless-sync-delay", Mutable,   int!(repl_diskless_sync_delay_s: u64, 0, I32_MAX, 5)),
    d("repl-diskless-sync-max-replicas", Mutable, int!(repl_diskless_sync_max_replicas: u64, 0, I32_MAX, 0)),
    d("repl-ping-replica-period", Mutable,   int!(repl_ping_replica_period_s: u64, 1, I32_MAX, 10))
        .alias("repl-ping-slave-period"),
    d("repl-timeout",             Mutable,   int!(repl_timeout_s: u64, 1, I32_MAX, 60)),
    d("min-replicas-to-write",    Mutable,   int!(min_replicas_to_write: u64, 0, I32_MAX, 0))
        .alias("min-slaves-to-write"),
    d("min-replicas-max-lag",     Mutable,   int!(min_replicas_max_lag_s: u64, 0, I32_MAX, 10))
        .alias("min-slaves-max-lag"),
    d("slowlog-log-slower-than",  Mutable,   int!(slowlog_log_slower_than: i64, -1, i64::MAX, 10_000)),
    d("slowlog-max-len",          Mutable,   int!(slowlog_max_len: u64, 0, i64::MAX, 128)),
    d("latency-monitor-threshold", Mutable,  int!(latency_monitor_threshold: u64, 0, i64::MAX, 0)),
    d("latency-tracking",         Mutable,   yes_no!(latency_tracking, true)),
    d("latency-tracking-info-percentiles", Mutable, List {
        max_len: usize::MAX,
        default: &["50", "99", "99.9"],
        get: |c| c.latency_tracking_info_percentiles.iter().map(|&p| format_percentile(p)).collect(),
        set: |c, v| {
            c.latency_tracking_info_percentiles =
                v.iter().filter_map(|w| parse_percentile(w.as_bytes())).collect();
        },
        check: check_percentiles,
    }),
    // TLS (Redis 7.0's names, bounds and defaults). CONFIG SET rebuilds
    // the TLS context (and rebinds tls-port); a context or port that fails
    // fails CONFIG SET.
    d("tls-port",                 Mutable,   int!(tls_port: u16, 0, 65535, 0)),
    d("tls-cert-file",            Mutable,   path!(tls_cert_file)),
    d("tls-key-file",             Mutable,   path!(tls_key_file)),
    d("tls-key-file-pass",        Mutable,   bytes!(tls_key_file_pass)),
    d("tls-client-cert-file",     Mutable,   path!(tls_client_cert_file)),
    d("tls-client-key-file",      Mutable,   path!(tls_client_key_file)),
    d("tls-client-key-file-pass", Mutable,   bytes!(tls_client_key_file_pass)),
    d("tls-dh-params-file",       Mutable,   path!(tls_dh_params_file)),
    d("tls-ca-cert-file",         Mutable,   path!(tls_ca_cert_file)),
    d("tls-ca-cert-dir",          Mutable,   path!(tls_ca_cert_dir)),
    d("tls-auth-clients",         Mutable,   one_of!(tls_auth_clients: TlsAuthClients, Yes)),
    d("tls-protocols",            Mutable,   bytes!(tls_protocols)),
    d("tls-ciphers",              Mutable,   bytes!(tls_ciphers)),
    d("tls-ciphersuites",         Mutable,   bytes!(tls_ciphersuites)),
    d("tls-prefer-server-ciphers", Mutable,  yes_no!(tls_prefer_server_ciphers, false)),
    d("tls-session-caching",      Mutable,   yes_no!(tls_session_caching, true)),
    d("tls-session-cache-size",   Mutable,   int!(tls_session_cache_size: u32, 0, I32_MAX, 20 * 1024)),
    d("tls-session-cache-timeout", Mutable,  int!(tls_session_cache_timeout_s: u32, 0, I32_MAX, 300)),
    d("tls-replication",          Mutable,   yes_no!(tls_replication, false)),
    d("tls-cluster",              Mutable,   yes_no!(tls_cluster, false)),
    d("replicaof",                Immutable, List {
        max_len: 2,
        default: &[],
        get: |c| c.replicaof.clone(),
        set: |c, v| c.replicaof = v,
        check: check_replicaof,
    }).alias("slaveof"),
    d("masterauth",               Mutable,   bytes!(masterauth)),
    d("masteruser",               Mutable,   bytes!(masteruser)),
    d("replica-read-only",        Mutable,   yes_no!(replica_read_only, true))
        .alias("slave-read-only"),
    d("replica-serve-stale-data", Mutable,   yes_no!(replica_serve_stale_data, true))
        .alias("slave-serve-stale-data"),
    d("replica-priority",         Mutable,   int!(replica_priority: u32, 0, I32_MAX, 100))
        .alias("slave-priority"),
    d("replica-announced",        Mutable,   yes_no!(replica_announced, true)),
];

/// `replicaof <host> <port>`: both or nothing, the port a number in 0..=65535.
fn check_replicaof(words: &[Vec<u8>]) -> Result<(), String> {
    match words {
        [] => Ok(()),
        [_, port] if strtoll(port).is_some_and(|p| (0..=65535).contains(&p)) => Ok(()),
        [_, _] => Err("Invalid master port".into()),
        _ => Err("wrong number of arguments".into()),
    }
}

fn path_bytes(p: &Option<PathBuf>) -> Vec<u8> {
    p.as_ref()
        .map(|p| p.as_os_str().as_bytes().to_vec())
        .unwrap_or_default()
}

/// Redis's `EMPTY_STRING_IS_NULL`: `""` means "none".
fn bytes_path(v: Vec<u8>) -> Option<PathBuf> {
    if v.is_empty() {
        None
    } else {
        Some(PathBuf::from(OsString::from_vec(v)))
    }
}

/// Finds a directive by name or alias, case-insensitively (Redis's `lookupConfig`).
fn lookup(name: &[u8]) -> Option<usize> {
    DIRECTIVES.iter().position(|d| {
        name.eq_ignore_ascii_case(d.name.as_bytes())
            || d.alias
                .is_some_and(|a| name.eq_ignore_ascii_case(a.as_bytes()))
    })
}

impl Kind {
    fn apply_default(&self, cfg: &mut Config) {
        match *self {
            Bool { default, set, .. } => set(cfg, default),
            Int { default, set, .. } => set(cfg, default),
            Octal { default, set, .. } => set(cfg, default),
            Memory { default, set, .. } => set(cfg, default),
            Enum { default, set, .. } => set(cfg, default),
            Str { default, set, .. } => set(cfg, default.to_vec()),
            // INVARIANT: every directive's default parses.
            Parsed { default, set, .. } => set(cfg, default).expect("a valid default"),
            List { default, set, .. } => set(cfg, default.iter().map(|s| s.to_string()).collect()),
        }
    }

    /// The value as `CONFIG GET` prints it (Redis's `interface.get`).
    fn get(&self, cfg: &Config) -> Vec<u8> {
        match *self {
            Bool { get, .. } => (if get(cfg) { "yes" } else { "no" }).into(),
            Int { get, .. } => get(cfg).to_string().into_bytes(),
            Octal { get, .. } => format!("{:o}", get(cfg)).into_bytes(),
            Memory { get, .. } => get(cfg).to_string().into_bytes(),
            Enum { names, get, .. } => names[get(cfg)].into(),
            Str { get, .. } | Parsed { get, .. } => get(cfg),
            List { get, .. } => get(cfg).join(" ").into_bytes(),
        }
    }

    fn is_multi_arg(&self) -> bool {
        matches!(self, List { .. })
    }

    /// Parses, checks and stores `args` (Redis's `interface.set`). Single-valued kinds are
    /// given exactly one argument by the callers. `Err` is Redis's reason text.
    fn set(&self, cfg: &mut Config, args: &[Vec<u8>]) -> Result<(), String> {
        let Some(arg) = args.first() else {
            // Only List is called without arguments (`bind` alone on a line).
            if let List { set, .. } = *self {
                set(cfg, Vec::new());
            }
            return Ok(());
        };
        match *self {
            Bool { set, .. } => {
                let v = if arg.eq_ignore_ascii_case(b"yes") {
                    true
                } else if arg.eq_ignore_ascii_case(b"no") {
                    false
                } else {
                    return Err("argument must be 'yes' or 'no'".into());
                };
                set(cfg, v);
            }
            Int { min, max, set, .. } => {
                let v = string2ll(arg).ok_or("argument couldn't be parsed into an integer")?;
                if v < min || v > max {
                    return Err(format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                set(cfg, v);
            }
            Octal { min, max, set, .. } => {
                let v =
                    strtoll_octal(arg).ok_or("argument couldn't be parsed as an octal number")?;
                // Redis checks unsigned configs after casting the parsed long long to unsigned.
                let v = v as u64;
                if v < min || v > max {
                    return Err(format!(
                        "argument must be between {min:o} and {max:o} inclusive"
                    ));
                }
                set(cfg, v);
            }
            Memory { min, max, set, .. } => {
                let v = memtoull(arg).ok_or("argument must be a memory value")?;
                if v < min || v > max {
                    return Err(format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                set(cfg, v);
            }
            Enum { names, set, .. } => {
                let Some(i) = names
                    .iter()
                    .position(|n| arg.eq_ignore_ascii_case(n.as_bytes()))
                else {
                    return Err(format!(
                        "argument(s) must be one of the following: {}",
                        names.join(", ")
                    ));
                };
                set(cfg, i);
            }
            Str { set, .. } => set(cfg, arg.clone()),
            Parsed { set, .. } => set(cfg, arg)?,
            List {
                max_len,
                set,
                check,
                ..
            } => {
                if args.len() > max_len {
                    return Err("Too many bind addresses specified.".into());
                }
                // Redis: "A single empty argument is treated as a zero bindaddr count".
                let words = if args.len() == 1 && arg.is_empty() {
                    &[][..]
                } else {
                    args
                };
                check(words)?;
                set(
                    cfg,
                    words
                        .iter()
                        .map(|w| String::from_utf8_lossy(w).into_owned())
                        .collect(),
                );
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Errors.
// ---------------------------------------------------------------------------------------------

/// A fatal configuration error. `Display` is the exact text `redis-server` prints to stderr
/// (without the final newline: print it with `eprintln!`), then the server exits with status 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line of the combined config text (file, stdin, then command line), if any.
    line_no: Option<usize>,
    /// The offending line, trimmed as Redis shows it.
    line: String,
    reason: String,
}

impl ConfigError {
    fn at_line(line_no: usize, line: &[u8], reason: impl Into<String>) -> ConfigError {
        ConfigError {
            line_no: Some(line_no),
            line: String::from_utf8_lossy(line).into_owned(),
            reason: reason.into(),
        }
    }

    fn fatal(reason: String) -> ConfigError {
        ConfigError {
            line_no: None,
            line: String::new(),
            reason,
        }
    }

    /// The 1-based line number for errors in the config text; `None` for I/O errors.
    pub fn line_no(&self) -> Option<usize> {
        self.line_no
    }

    /// Redis's reason text, e.g. `argument couldn't be parsed into an integer`.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line_no {
            Some(n) => write!(
                f,
                "\n*** FATAL CONFIG FILE ERROR (Tessera {VERSION}) ***\n\
                 Reading the configuration file, at line {n}\n>>> '{}'\n{}",
                self.line, self.reason
            ),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

// ---------------------------------------------------------------------------------------------
// Config text (redis.conf syntax).
// ---------------------------------------------------------------------------------------------

/// Applies redis.conf-syntax `text` on top of `cfg`, line by line; later lines override
/// earlier ones. Comments (`#`), blank lines, `"..."` (with `\n`, `\xHH`, … escapes) and
/// `'...'` quoting are Redis's. `include` is rejected.
///
/// Errors: the first bad line, as [`ConfigError`] with Redis's reason. On error `cfg` keeps the
/// lines applied before it (the server exits anyway). Complexity: O(text length × table size).
pub fn parse_config_text(text: &str, cfg: &mut Config) -> Result<(), ConfigError> {
    parse_config_bytes(text.as_bytes(), cfg)
}

/// Redis's `loadServerConfigFromString`, on bytes: values such as `requirepass` may be binary.
fn parse_config_bytes(text: &[u8], cfg: &mut Config) -> Result<(), ConfigError> {
    // Redis's setConfigSaveOption while reading a file: the first `save`
    // line replaces the defaults, later ones add their points (`save ""`
    // clears what came before it).
    let mut save_loaded = false;
    for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
        let line_no = i + 1;
        let line = trim(raw, b" \t\r\n");
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let Some(argv) = split_args(line) else {
            return Err(ConfigError::at_line(
                line_no,
                line,
                "Unbalanced quotes in configuration line",
            ));
        };
        let Some((name, args)) = argv.split_first() else {
            continue;
        };
        // Redis's `user` lines: kept for the ACL layer, which checks them at
        // start (and exits on a bad one, as Redis does).
        if name.eq_ignore_ascii_case(b"user") && !args.is_empty() {
            cfg.users.push(args.to_vec());
            continue;
        }
        if name.eq_ignore_ascii_case(b"rename-command") && args.len() == 2 {
            cfg.rename_commands.push(RenameCommand {
                from: args[0].clone(),
                to: args[1].clone(),
                line_no,
                line: String::from_utf8_lossy(line).into_owned(),
            });
            continue;
        }
        let Some(idx) = lookup(name) else {
            let reason = if name.eq_ignore_ascii_case(b"include") && args.len() == 1 {
                "include is not supported by Tessera: put every directive in one file"
            } else {
                "Bad directive or wrong number of arguments"
            };
            return Err(ConfigError::at_line(line_no, line, reason));
        };
        let kind = &DIRECTIVES[idx].kind;
        let kept_save = (DIRECTIVES[idx].name == "save" && save_loaded).then(|| cfg.save.clone());
        let result = if !kind.is_multi_arg() {
            if args.len() != 1 {
                return Err(ConfigError::at_line(
                    line_no,
                    line,
                    "wrong number of arguments",
                ));
            }
            kind.set(cfg, args)
        } else if args.len() == 1 && !args[0].is_empty() {
            // Redis splits a lone multi-arg value again, so `--bind "a b"` means `bind a b`.
            match split_args(&args[0]) {
                Some(words) => kind.set(cfg, &words),
                None => Err("Unbalanced quotes in configuration line".into()),
            }
        } else {
            kind.set(cfg, args)
        };
        result.map_err(|reason| ConfigError::at_line(line_no, line, reason))?;
        if DIRECTIVES[idx].name == "save" {
            save_loaded = true;
            let reset = args.len() == 1 && args[0].is_empty();
            if let (Some(mut kept), false) = (kept_save, reset) {
                kept.append(&mut cfg.save);
                cfg.save = kept;
            }
        }
    }
    Ok(())
}

fn trim<'a>(s: &'a [u8], set: &[u8]) -> &'a [u8] {
    let start = s.iter().position(|b| !set.contains(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !set.contains(b))
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// C `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Redis's `sdssplitargs`: words separated by blanks, `"..."` with escapes, `'...'` with `\'`.
/// `None` for unbalanced quotes or a closing quote not followed by a blank.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // sdssplitargs works on C strings: a NUL ends the line.
    let line = line.split(|&b| b == 0).next().unwrap_or_default();
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut words = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_c_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Some(words);
        }
        let (mut in_dq, mut in_sq) = (false, false);
        let mut cur = Vec::new();
        loop {
            let c = at(p);
            if in_dq {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && at(p + 2).is_ascii_hexdigit()
                    && at(p + 3).is_ascii_hexdigit()
                {
                    cur.push(hex_val(at(p + 2)) * 16 + hex_val(at(p + 3)));
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    cur.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    cur.push(c);
                }
            } else if in_sq {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    cur.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        p += 1;
                        break;
                    }
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    _ => cur.push(c),
                }
            }
            p += 1;
        }
        words.push(cur);
    }
}

fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

/// Redis's `sdscatrepr`: the quoted form `redis-server` gives command-line values.
fn cat_repr(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', c]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(c),
            _ => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

pub mod rewrite;

use ds::string2ll;

/// C `strtoll(s, &end, 8)` accepted only if `*end == '\0'` and there was no overflow, as
/// Redis's `OCTAL_CONFIG` parser does. Quirk kept: `""` parses as 0 (no digits, end == s).
fn strtoll_octal(s: &[u8]) -> Option<i64> {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let start = i;
    let mut mag: Option<u64> = Some(0);
    while i < s.len() && (b'0'..=b'7').contains(&s[i]) {
        mag = mag.and_then(|m| m.checked_mul(8)?.checked_add(u64::from(s[i] - b'0')));
        i += 1;
    }
    if i == start {
        return s.is_empty().then_some(0);
    }
    if i != s.len() {
        return None;
    }
    let mag = mag?;
    if negative {
        0i64.checked_sub_unsigned(mag)
    } else {
        i64::try_from(mag).ok()
    }
}

/// Redis's `memtoull`: digits then an optional unit, case-insensitive: `b`, `k` (1000),
/// `kb` (1024), `m`, `mb`, `g`, `gb`. Quirks kept: `""` and a bare unit are 0; digits that
/// overflow saturate (C `strtoull`). Difference: an overflowing multiplication is rejected.
fn memtoull(s: &[u8]) -> Option<u64> {
    if s.first() == Some(&b'-') {
        return None;
    }
    let split = s
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let mul: u64 = match unit.to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1000,
        b"kb" => 1024,
        b"m" => 1000 * 1000,
        b"mb" => 1024 * 1024,
        b"g" => 1000 * 1000 * 1000,
        b"gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    // Redis copies the digits into a 128-byte buffer first.
    if digits.len() >= 128 {
        return None;
    }
    let val = digits.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    val.checked_mul(mul)
}

// ---------------------------------------------------------------------------------------------
// Command line.
// ---------------------------------------------------------------------------------------------

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum CliAction {
    /// Start the server with this configuration.
    Run(Box<Config>),
    /// Print this usage text (to stderr, like redis-server) and exit 1.
    Help(String),
    /// Print this version line (to stdout) and exit 0.
    Version(String),
}

/// Parses `args` (without `argv[0]`) as `redis-server` does:
/// `[/path/to/tessera.conf] [--directive value ...] [-]`.
///
/// * `-v`/`--version` and `-h`/`--help` count only as the first argument.
/// * A first argument not starting with `-` is the config file (stored absolute in
///   `config_file`). A `-` first or last means "also read config text from stdin".
/// * Every `--name` starts a new config line `name "v1" "v2"…` (values quoted with Redis's
///   `sdscatrepr`); the lines are appended after the file and stdin, so they override them, and
///   errors report line numbers in that combined text, exactly as Redis does.
///
/// Errors: a file that cannot be read (Redis's "Fatal error, can't open config file" text), or
/// larger than [`MAX_CONFIG_BYTES`], or any config line error.
pub fn parse_cli(args: &[String]) -> Result<CliAction, ConfigError> {
    parse_cli_with(
        args,
        &|path: &Path| read_bounded(std::fs::File::open(path)?),
        &|| read_bounded(io::stdin().lock()),
    )
}

/// Reads at most `MAX_CONFIG_BYTES + 1` bytes: one more than allowed, so the caller can tell
/// "too large" from "exactly at the limit".
fn read_bounded(reader: impl Read) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    reader.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut buf)?;
    Ok(buf)
}

/// `strerror`-style text: Rust's io::Error appends " (os error N)", C's strerror does not.
fn io_reason(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) if e.raw_os_error().is_some() => s[..i].to_string(),
        _ => s,
    }
}

type ReadFile<'a> = &'a dyn Fn(&Path) -> io::Result<Vec<u8>>;
type ReadStdin<'a> = &'a dyn Fn() -> io::Result<Vec<u8>>;

/// [`parse_cli`] with its two inputs injected, so tests need neither files nor stdin.
fn parse_cli_with(
    args: &[String],
    read_file: ReadFile<'_>,
    read_stdin: ReadStdin<'_>,
) -> Result<CliAction, ConfigError> {
    match args.first().map(String::as_str) {
        Some("-v" | "--version") => return Ok(CliAction::Version(version_text())),
        Some("-h" | "--help") => return Ok(CliAction::Help(help_text())),
        _ => {}
    }
    let mut cfg = Config::default();
    let mut rest = args;
    if let Some(first) = args.first().filter(|a| !a.starts_with('-')) {
        let path = std::path::absolute(first).unwrap_or_else(|_| PathBuf::from(first));
        cfg.config_file = Some(path);
        rest = &args[1..];
    }

    // Redis's main(): turn the remaining arguments into config lines.
    let mut from_stdin = false;
    let mut options: Vec<u8> = Vec::new();
    let mut value_seen = true; // Redis's handled_last_config_arg
    for (j, arg) in rest.iter().enumerate() {
        let argv_index = j + args.len() - rest.len();
        if arg == "-" && (argv_index == 0 || argv_index == args.len() - 1) {
            from_stdin = true;
        } else if value_seen && arg.starts_with("--") {
            if !options.is_empty() {
                options.push(b'\n');
            }
            options.extend_from_slice(&arg.as_bytes()[2..]);
            options.push(b' ');
            // `--port` alone waits for its value; `"--port 6380"` carries it.
            value_seen = split_args(arg.as_bytes()).is_none_or(|w| w.len() != 1);
        } else {
            cat_repr(&mut options, arg.as_bytes());
            options.push(b' ');
            value_seen = true;
        }
    }

    // Redis's loadServerConfig(): file, then stdin, then "\n" and the options.
    let mut text = Vec::new();
    if let Some(path) = &cfg.config_file {
        text = read_file(path).map_err(|e| {
            ConfigError::fatal(format!(
                "Fatal error, can't open config file '{}': {}",
                path.display(),
                io_reason(&e)
            ))
        })?;
    }
    if from_stdin {
        let bytes = read_stdin().map_err(|e| {
            ConfigError::fatal(format!(
                "Fatal error, can't read config from stdin: {}",
                io_reason(&e)
            ))
        })?;
        text.extend_from_slice(&bytes);
    }
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::fatal(format!(
            "Fatal error, config text is larger than {MAX_CONFIG_BYTES} bytes"
        )));
    }
    text.push(b'\n');
    text.extend_from_slice(&options);
    parse_config_bytes(&text, &mut cfg)?;
    Ok(CliAction::Run(Box::new(cfg)))
}

/// Usage text, like `redis-server --help`, followed by every directive and its default.
pub fn help_text() -> String {
    let mut s = String::from(
        "Usage: ./tessera [/path/to/tessera.conf] [options] [-]\n\
         \x20      ./tessera - (read config from stdin)\n\
         \x20      ./tessera -v or --version\n\
         \x20      ./tessera -h or --help\n\
         \n\
         Examples:\n\
         \x20      ./tessera (run the server with default conf)\n\
         \x20      echo 'maxmemory 128mb' | ./tessera -\n\
         \x20      ./tessera /etc/tessera/6379.conf\n\
         \x20      ./tessera --port 7777\n\
         \x20      ./tessera /etc/mytessera.conf --loglevel verbose -\n\
         \x20      ./tessera /etc/mytessera.conf --loglevel verbose\n\
         \n\
         Directives and their defaults (* = can be changed with CONFIG SET):\n",
    );
    let defaults = Config::default();
    for d in DIRECTIVES {
        let value = String::from_utf8_lossy(&d.kind.get(&defaults)).into_owned();
        let value = if value.is_empty() {
            "\"\"".to_string()
        } else {
            value
        };
        let star = if d.runtime == Mutable { "*" } else { " " };
        let alias = d.alias.map(|a| format!(" (alias {a})")).unwrap_or_default();
        // A name of 29 characters or more still gets a space before its value.
        let gap = if d.name.len() >= 29 { " " } else { "" };
        s.push_str(&format!("     {star} {:<29}{gap}{value}{alias}\n", d.name));
    }
    s
}

/// One line like `redis-server --version`.
pub fn version_text() -> String {
    format!(
        "Tessera server v={VERSION} sha=00000000:0 malloc=libc bits={}",
        usize::BITS
    )
}

// ---------------------------------------------------------------------------------------------
// CONFIG GET / CONFIG SET.
// ---------------------------------------------------------------------------------------------

/// `CONFIG GET pattern [pattern ...]`: `(name, value)` for every directive matching any
/// pattern, each directive once, in table order.
///
/// A pattern without `*`, `?` or `[` is an exact, case-insensitive name or alias and is echoed
/// back as typed (Redis 7.0 replies `PORT` to `CONFIG GET PORT`). A glob pattern (Redis's
/// `stringmatchlen`, case-insensitive) is tried on the name, then the alias, and the name that
/// matched is returned. Values are bytes: `requirepass` and paths are binary-safe.
/// Complexity: O(patterns × table × pattern length).
pub fn config_get(cfg: &Config, patterns: &[&[u8]]) -> Vec<(String, Vec<u8>)> {
    // Per directive, the name and the alias: each is listed when a pattern
    // matches it (Redis's table holds aliases as entries of their own, so
    // `*of` gives both `replicaof` and `slaveof`), once. Tessera's own
    // aliases are found by name only: Redis has no such entries.
    let mut hits: Vec<[Option<String>; 2]> = vec![[None, None]; DIRECTIVES.len()];
    for pat in patterns {
        if !pat.iter().any(|b| matches!(b, b'*' | b'?' | b'[')) {
            if let Some(i) = lookup(pat) {
                let alias = DIRECTIVES[i]
                    .alias
                    .is_some_and(|a| a.as_bytes().eq_ignore_ascii_case(pat));
                // lookup() matched an ASCII name, so the pattern is ASCII.
                hits[i][usize::from(alias)]
                    .get_or_insert_with(|| String::from_utf8_lossy(pat).into_owned());
            }
            continue;
        }
        for (i, d) in DIRECTIVES.iter().enumerate() {
            let alias = d.alias.filter(|a| !TESSERA_ALIASES.contains(a));
            for (k, n) in std::iter::once(d.name).chain(alias).enumerate() {
                if hits[i][k].is_none() && glob_match(pat, n.as_bytes()) {
                    hits[i][k] = Some(n.to_string());
                }
            }
        }
    }
    hits.into_iter()
        .zip(DIRECTIVES)
        .flat_map(|(names, d)| {
            names
                .into_iter()
                .flatten()
                .map(move |n| (n, d.kind.get(cfg)))
        })
        .collect()
}

/// Aliases Redis does not have (its own aliases are Redis's old names).
const TESSERA_ALIASES: &[&str] = &["threads", "server-cpulist"];

/// `CONFIG SET name value [name value ...]`, atomically: all pairs are checked (unknown name,
/// immutable, duplicate — first failure wins — then each value in order) against a copy, and
/// `cfg` changes only if all succeed.
///
/// `Err` is Redis 7's exact error line without the leading `-`, e.g.
/// `ERR Unknown option or number of arguments for CONFIG SET - 'foo'` or
/// `ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed
/// into an integer`. As in Redis, lookup errors quote the name as typed and value errors quote
/// the name found, lowercase (the alias if one was typed). The caller enforces the command's
/// arity (an even, non-zero count).
pub fn config_set(cfg: &mut Config, pairs: &[(&[u8], &[u8])]) -> Result<(), String> {
    let failed = |name: &str, why: &str| {
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
    };
    let mut chosen: Vec<usize> = Vec::with_capacity(pairs.len());
    for &(name, value) in pairs {
        let typed = String::from_utf8_lossy(name);
        let Some(i) = lookup(name) else {
            return Err(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{typed}'"
            ));
        };
        let d = &DIRECTIVES[i];
        if d.runtime == Immutable || (d.runtime == Fixed && d.kind.get(cfg) != value) {
            return Err(failed(&typed, "can't set immutable config"));
        }
        if DIRECTIVES[i].runtime == Protected {
            return Err(failed(&typed, "can't set protected config"));
        }
        if chosen.contains(&i) {
            return Err(failed(&typed, "duplicate parameter"));
        }
        chosen.push(i);
    }
    let mut next = cfg.clone();
    for (&i, (typed, value)) in chosen.iter().zip(pairs) {
        let d = &DIRECTIVES[i];
        let kind = &d.kind;
        // Redis names the entry it found: the alias when one was typed.
        let shown = match d.alias {
            Some(a) if typed.eq_ignore_ascii_case(a.as_bytes()) => a,
            _ => d.name,
        };
        // Redis's performInterfaceSet splits multi-arg values on single spaces.
        let args: Vec<Vec<u8>> = if kind.is_multi_arg() {
            if value.is_empty() {
                Vec::new()
            } else {
                value.split(|&b| b == b' ').map(<[u8]>::to_vec).collect()
            }
        } else {
            vec![value.to_vec()]
        };
        kind.set(&mut next, &args)
            .map_err(|why| failed(shown, &why))?;
    }
    *cfg = next;
    Ok(())
}

/// Redis's `stringmatchlen(pattern, string, nocase = 1)`: `*`, `?`, `[abc]`, `[^a]`, `[a-z]`
/// and `\` escapes. Exponential blow-up is cut by Redis's `skipLongerMatches` and its nesting
/// limit, so it is O(pattern × string) here.
fn glob_match(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    glob_rec(pattern, string, &mut skip_longer, 0)
}

fn glob_rec(mut p: &[u8], mut s: &[u8], skip_longer: &mut bool, nesting: u32) -> bool {
    // Redis's limit on recursion (one level per `*`).
    if nesting > 1000 {
        return false;
    }
    let lower = |b: u8| b.to_ascii_lowercase();
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if glob_rec(&p[1..], s, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                p = &p[1..];
                let negate = p.first() == Some(&b'^');
                if negate {
                    p = &p[1..];
                }
                let mut matched = false;
                loop {
                    if p.len() >= 2 && p[0] == b'\\' {
                        p = &p[1..];
                        // Redis compares escaped class members case-sensitively.
                        if p[0] == s[0] {
                            matched = true;
                        }
                    } else if p.is_empty() {
                        // Unterminated class: Redis stops at the end of the pattern.
                        break;
                    } else if p[0] == b']' {
                        break;
                    } else if p.len() >= 3 && p[1] == b'-' {
                        let (mut lo, mut hi) = (p[0], p[2]);
                        if lo > hi {
                            std::mem::swap(&mut lo, &mut hi);
                        }
                        let c = lower(s[0]);
                        if c >= lower(lo) && c <= lower(hi) {
                            matched = true;
                        }
                        p = &p[2..];
                    } else if lower(p[0]) == lower(s[0]) {
                        matched = true;
                    }
                    p = &p[1..];
                }
                if matched == negate {
                    return false;
                }
                s = &s[1..];
            }
            c => {
                let c = if c == b'\\' && p.len() >= 2 {
                    p = &p[1..];
                    p[0]
                } else {
                    c
                };
                if lower(c) != lower(s[0]) {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = p.get(1..).unwrap_or_default();
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Several `save` lines in a file add up, as Redis 7.0 reads them (the
    /// first replaces the defaults; `save ""` clears what came before).
    #[test]
    fn save_lines_in_a_file_add_up() {
        let rules = |text: &str| {
            let mut c = Config::default();
            parse_config_text(text, &mut c).unwrap();
            c.save_rules()
        };
        assert_eq!(rules("save 900 1\nsave 300 10\n"), [(900, 1), (300, 10)]);
        assert_eq!(rules("save 900 1\nsave \"\"\n"), []);
        assert_eq!(rules("save \"\"\nsave 60 5\n"), [(60, 5)]);
        assert_eq!(rules("hz 10\n"), [(3600, 1), (300, 100), (60, 10000)]);
    }

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn no_file(_: &Path) -> io::Result<Vec<u8>> {
        Err(io::Error::from_raw_os_error(2))
    }

    fn no_stdin() -> io::Result<Vec<u8>> {
        panic!("stdin must not be read")
    }

    /// `parse_cli` without touching the disk: `file` is the content of any config file.
    fn cli_with_file(a: &[&str], file: &str) -> Result<CliAction, ConfigError> {
        let content = file.as_bytes().to_vec();
        parse_cli_with(&strings(a), &|_| Ok(content.clone()), &no_stdin)
    }

    fn cli(a: &[&str]) -> Result<Config, ConfigError> {
        match parse_cli_with(&strings(a), &no_file, &no_stdin)? {
            CliAction::Run(cfg) => Ok(*cfg),
            other => panic!("expected Run, got {other:?}"),
        }
    }

    fn cli_err(a: &[&str]) -> String {
        cli(a).expect_err("must fail").to_string()
    }

    fn file(text: &str) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
        parse_config_text(text, &mut cfg).map(|()| cfg)
    }

    fn file_err(text: &str) -> String {
        file(text).expect_err("must fail").to_string()
    }

    /// Redis's fatal block, as `redis-server` 7.0.15 prints it (with our name and version).
    fn fatal(line_no: usize, line: &str, reason: &str) -> String {
        format!(
            "\n*** FATAL CONFIG FILE ERROR (Tessera 0.1.0) ***\n\
             Reading the configuration file, at line {line_no}\n>>> '{line}'\n{reason}"
        )
    }

    fn get(cfg: &Config, patterns: &[&str]) -> Vec<(String, String)> {
        let patterns: Vec<&[u8]> = patterns.iter().map(|p| p.as_bytes()).collect();
        config_get(cfg, &patterns)
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v).unwrap()))
            .collect()
    }

    fn get_one(cfg: &Config, name: &str) -> String {
        let got = get(cfg, &[name]);
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        got[0].1.clone()
    }

    fn set(cfg: &mut Config, pairs: &[(&str, &str)]) -> Result<(), String> {
        let pairs: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
            .collect();
        config_set(cfg, &pairs)
    }

    // ----- the table -------------------------------------------------------------------------

    #[test]
    fn defaults_come_from_the_table() {
        let c = Config::default();
        assert_eq!(c.port, 6379);
        assert_eq!(c.bind, vec!["127.0.0.1".to_string()]);
        assert_eq!(c.unixsocket, None);
        assert_eq!(c.unixsocketperm, 0);
        assert_eq!(c.shards, 0);
        assert_eq!(c.databases, 16);
        assert_eq!(c.maxclients, 10_000);
        assert_eq!(c.timeout_s, 0);
        assert_eq!(c.tcp_keepalive_s, 300);
        assert!(c.protected_mode);
        assert_eq!(c.loglevel, LogLevel::Notice);
        assert_eq!(c.logfile, None);
        assert_eq!(c.proto_max_bulk_len, 512 * 1024 * 1024);
        assert_eq!(c.client_query_buffer_limit, 1024 * 1024 * 1024);
        assert_eq!(c.hz, 10);
        assert_eq!(c.requirepass, None);
        assert_eq!(c.maxmemory, 0);
        assert_eq!(c.maxmemory_policy, MaxmemoryPolicy::Noeviction);
        assert_eq!(c.lfu_log_factor, 10);
        assert_eq!(c.lfu_decay_time_min, 1);
        assert_eq!(c.config_file, None);
    }

    #[test]
    fn table_is_consistent() {
        for (i, d) in DIRECTIVES.iter().enumerate() {
            assert_eq!(d.name, d.name.to_ascii_lowercase());
            assert_eq!(lookup(d.name.as_bytes()), Some(i), "{} is unique", d.name);
            if let Some(a) = d.alias {
                assert_eq!(lookup(a.as_bytes()), Some(i));
            }
            // Every default is a value its own parser accepts and prints back the same way
            // (`dir` prints the working directory its default stands for).
            if d.name == "dir" {
                continue;
            }
            let printed = d.kind.get(&Config::default());
            let mut cfg = Config::default();
            let args = if d.kind.is_multi_arg() {
                split_args(&printed).unwrap()
            } else {
                vec![printed.clone()]
            };
            d.kind.set(&mut cfg, &args).unwrap();
            assert_eq!(cfg, Config::default(), "{}", d.name);
        }
        for (i, l) in LogLevel::ALL.iter().enumerate() {
            assert_eq!(*l as usize, i);
            assert_eq!(l.name(), LogLevel::NAMES[i]);
        }
        for (i, p) in MaxmemoryPolicy::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i);
            assert_eq!(p.name(), MaxmemoryPolicy::NAMES[i]);
        }
    }

    /// One sample per directive: (name used, value words, CONFIG GET name, CONFIG GET value).
    const SAMPLES: &[(&str, &str, &str, &str)] = &[
        ("port", "7000", "port", "7000"),
        ("bind", "10.0.0.1 ::1", "bind", "10.0.0.1 ::1"),
        ("unixsocket", "/tmp/t.sock", "unixsocket", "/tmp/t.sock"),
        ("unixsocketperm", "700", "unixsocketperm", "700"),
        ("shards", "4", "shards", "4"),
        ("threads", "3", "shards", "3"),
        ("databases", "32", "databases", "32"),
        ("maxclients", "50", "maxclients", "50"),
        ("timeout", "30", "timeout", "30"),
        ("tcp-keepalive", "60", "tcp-keepalive", "60"),
        ("shard-consolidation", "no", "shard-consolidation", "no"),
        ("server-cpulist", "0-3,8", "server-cpulist", "0-3,8"),
        ("server_cpulist", "0-7:2", "server-cpulist", "0-7:2"),
        ("protected-mode", "no", "protected-mode", "no"),
        ("loglevel", "warning", "loglevel", "warning"),
        ("logfile", "/var/log/t.log", "logfile", "/var/log/t.log"),
        ("proto-max-bulk-len", "2mb", "proto-max-bulk-len", "2097152"),
        (
            "client-query-buffer-limit",
            "2gb",
            "client-query-buffer-limit",
            "2147483648",
        ),
        ("hz", "100", "hz", "100"),
        ("busy-reply-threshold", "100", "busy-reply-threshold", "100"),
        (
            "notify-keyspace-events",
            "KEA",
            "notify-keyspace-events",
            "AKE",
        ),
        ("requirepass", "s3cret", "requirepass", "s3cret"),
        ("aclfile", "/tmp/users.acl", "aclfile", "/tmp/users.acl"),
        (
            "acl-pubsub-default",
            "ALLCHANNELS",
            "acl-pubsub-default",
            "allchannels",
        ),
        ("acllog-max-len", "5", "acllog-max-len", "5"),
        (
            "tracking-table-max-keys",
            "7",
            "tracking-table-max-keys",
            "7",
        ),
        ("maxmemory", "100m", "maxmemory", "100000000"),
        (
            "maxmemory-policy",
            "allkeys-lfu",
            "maxmemory-policy",
            "allkeys-lfu",
        ),
        ("maxmemory-samples", "10", "maxmemory-samples", "10"),
        (
            "maxmemory-eviction-tenacity",
            "50",
            "maxmemory-eviction-tenacity",
            "50",
        ),
        ("lfu-log-factor", "100", "lfu-log-factor", "100"),
        ("lfu-decay-time", "0", "lfu-decay-time", "0"),
        (
            "hash-max-listpack-entries",
            "7",
            "hash-max-listpack-entries",
            "7",
        ),
        (
            "hash-max-listpack-value",
            "9",
            "hash-max-listpack-value",
            "9",
        ),
        (
            "hash-max-ziplist-value",
            "10",
            "hash-max-listpack-value",
            "10",
        ),
        (
            "set-max-intset-entries",
            "11",
            "set-max-intset-entries",
            "11",
        ),
        (
            "set-max-listpack-entries",
            "12",
            "set-max-listpack-entries",
            "12",
        ),
        (
            "set-max-listpack-value",
            "13",
            "set-max-listpack-value",
            "13",
        ),
        (
            "zset-max-listpack-entries",
            "14",
            "zset-max-listpack-entries",
            "14",
        ),
        (
            "zset-max-ziplist-entries",
            "16",
            "zset-max-listpack-entries",
            "16",
        ),
        (
            "zset-max-listpack-value",
            "15",
            "zset-max-listpack-value",
            "15",
        ),
        (
            "list-max-listpack-size",
            "-3",
            "list-max-listpack-size",
            "-3",
        ),
        ("list-compress-depth", "2", "list-compress-depth", "2"),
        (
            "hll-sparse-max-bytes",
            "1kb",
            "hll-sparse-max-bytes",
            "1024",
        ),
        (
            "stream-node-max-bytes",
            "8kb",
            "stream-node-max-bytes",
            "8192",
        ),
        (
            "stream-node-max-entries",
            "7",
            "stream-node-max-entries",
            "7",
        ),
        ("dir", "/tmp", "dir", "/tmp"),
        ("dbfilename", "x.rdb", "dbfilename", "x.rdb"),
        ("save", "10 1 20 2", "save", "10 1 20 2"),
        ("rdbcompression", "no", "rdbcompression", "no"),
        ("rdbchecksum", "no", "rdbchecksum", "no"),
        (
            "stop-writes-on-bgsave-error",
            "no",
            "stop-writes-on-bgsave-error",
            "no",
        ),
        ("appendonly", "yes", "appendonly", "yes"),
        ("repl-backlog-size", "2mb", "repl-backlog-size", "2097152"),
        ("repl-backlog-ttl", "60", "repl-backlog-ttl", "60"),
        ("repl-diskless-sync", "no", "repl-diskless-sync", "no"),
        (
            "repl-diskless-sync-delay",
            "0",
            "repl-diskless-sync-delay",
            "0",
        ),
        (
            "repl-diskless-sync-max-replicas",
            "2",
            "repl-diskless-sync-max-replicas",
            "2",
        ),
        (
            "repl-ping-replica-period",
            "3",
            "repl-ping-replica-period",
            "3",
        ),
        ("repl-timeout", "30", "repl-timeout", "30"),
        ("min-replicas-to-write", "1", "min-replicas-to-write", "1"),
        ("min-replicas-max-lag", "5", "min-replicas-max-lag", "5"),
        ("appendfilename", "x.aof", "appendfilename", "x.aof"),
        ("appenddirname", "aofs", "appenddirname", "aofs"),
        ("appendfsync", "ALWAYS", "appendfsync", "always"),
        ("aof-load-truncated", "no", "aof-load-truncated", "no"),
        ("aof-use-rdb-preamble", "no", "aof-use-rdb-preamble", "no"),
        (
            "auto-aof-rewrite-percentage",
            "50",
            "auto-aof-rewrite-percentage",
            "50",
        ),
        (
            "auto-aof-rewrite-min-size",
            "1mb",
            "auto-aof-rewrite-min-size",
            "1048576",
        ),
        (
            "slowlog-log-slower-than",
            "-1",
            "slowlog-log-slower-than",
            "-1",
        ),
        ("slowlog-max-len", "5", "slowlog-max-len", "5"),
        (
            "latency-monitor-threshold",
            "100",
            "latency-monitor-threshold",
            "100",
        ),
        ("latency-tracking", "no", "latency-tracking", "no"),
        (
            "latency-tracking-info-percentiles",
            "50.0 99.990",
            "latency-tracking-info-percentiles",
            "50 99.99",
        ),
        ("replicaof", "10.0.0.9 6380", "replicaof", "10.0.0.9 6380"),
        ("slaveof", "h 1", "replicaof", "h 1"),
        ("masterauth", "pw", "masterauth", "pw"),
        ("masteruser", "u", "masteruser", "u"),
        ("replica-read-only", "no", "replica-read-only", "no"),
        ("slave-read-only", "no", "replica-read-only", "no"),
        (
            "replica-serve-stale-data",
            "no",
            "replica-serve-stale-data",
            "no",
        ),
        ("replica-priority", "7", "replica-priority", "7"),
        ("replica-announced", "no", "replica-announced", "no"),
        (
            "client-output-buffer-limit",
            "replica 1mb 2k 3 NORMAL 4 5 6",
            "client-output-buffer-limit",
            "normal 4 5 6 slave 1048576 2000 3 pubsub 33554432 8388608 60",
        ),
        ("tls-port", "6380", "tls-port", "6380"),
        ("tls-cert-file", "/c.crt", "tls-cert-file", "/c.crt"),
        ("tls-key-file", "/c.key", "tls-key-file", "/c.key"),
        ("tls-key-file-pass", "pw", "tls-key-file-pass", "pw"),
        (
            "tls-client-cert-file",
            "/cc.crt",
            "tls-client-cert-file",
            "/cc.crt",
        ),
        (
            "tls-client-key-file",
            "/cc.key",
            "tls-client-key-file",
            "/cc.key",
        ),
        (
            "tls-client-key-file-pass",
            "cpw",
            "tls-client-key-file-pass",
            "cpw",
        ),
        (
            "tls-dh-params-file",
            "/dh.pem",
            "tls-dh-params-file",
            "/dh.pem",
        ),
        ("tls-ca-cert-file", "/ca.crt", "tls-ca-cert-file", "/ca.crt"),
        ("tls-ca-cert-dir", "/cas", "tls-ca-cert-dir", "/cas"),
        (
            "tls-auth-clients",
            "OPTIONAL",
            "tls-auth-clients",
            "optional",
        ),
        ("tls-protocols", "TLSv1.3", "tls-protocols", "TLSv1.3"),
        ("tls-ciphers", "DEFAULT", "tls-ciphers", "DEFAULT"),
        (
            "tls-ciphersuites",
            "TLS_AES_128_GCM_SHA256",
            "tls-ciphersuites",
            "TLS_AES_128_GCM_SHA256",
        ),
        (
            "tls-prefer-server-ciphers",
            "yes",
            "tls-prefer-server-ciphers",
            "yes",
        ),
        ("tls-session-caching", "no", "tls-session-caching", "no"),
        (
            "tls-session-cache-size",
            "100",
            "tls-session-cache-size",
            "100",
        ),
        (
            "tls-session-cache-timeout",
            "60",
            "tls-session-cache-timeout",
            "60",
        ),
        ("tls-replication", "yes", "tls-replication", "yes"),
        ("tls-cluster", "yes", "tls-cluster", "yes"),
    ];

    fn check_sample(c: &Config, name: &str) {
        match name {
            "port" => assert_eq!(c.port, 7000),
            "bind" => assert_eq!(c.bind, strings(&["10.0.0.1", "::1"])),
            "unixsocket" => assert_eq!(c.unixsocket, Some(PathBuf::from("/tmp/t.sock"))),
            "unixsocketperm" => assert_eq!(c.unixsocketperm, 0o700),
            "shards" => assert_eq!(c.shards, 4),
            "threads" => assert_eq!(c.shards, 3),
            "databases" => assert_eq!(c.databases, 32),
            "maxclients" => assert_eq!(c.maxclients, 50),
            "timeout" => assert_eq!(c.timeout_s, 30),
            "tcp-keepalive" => assert_eq!(c.tcp_keepalive_s, 60),
            "shard-consolidation" => assert!(!c.shard_consolidation),
            "server-cpulist" => assert_eq!(c.server_cpulist, "0-3,8"),
            "server_cpulist" => assert_eq!(c.server_cpulist, "0-7:2"),
            "protected-mode" => assert!(!c.protected_mode),
            "loglevel" => assert_eq!(c.loglevel, LogLevel::Warning),
            "logfile" => assert_eq!(c.logfile, Some(PathBuf::from("/var/log/t.log"))),
            "proto-max-bulk-len" => assert_eq!(c.proto_max_bulk_len, 2 * 1024 * 1024),
            "client-query-buffer-limit" => assert_eq!(c.client_query_buffer_limit, 2 << 30),
            "hz" => assert_eq!(c.hz, 100),
            "busy-reply-threshold" => assert_eq!(c.busy_reply_threshold_ms, 100),
            "notify-keyspace-events" => assert_eq!(
                c.notify_keyspace_events,
                ds::events::ALL | ds::events::KEYSPACE | ds::events::KEYEVENT
            ),
            "requirepass" => assert_eq!(c.requirepass.as_deref(), Some(&b"s3cret"[..])),
            "aclfile" => assert_eq!(c.aclfile, Some(PathBuf::from("/tmp/users.acl"))),
            "acl-pubsub-default" => assert!(c.acl_pubsub_default_all),
            "acllog-max-len" => assert_eq!(c.acllog_max_len, 5),
            "tracking-table-max-keys" => assert_eq!(c.tracking_table_max_keys, 7),
            "maxmemory" => assert_eq!(c.maxmemory, 100_000_000),
            "maxmemory-policy" => assert_eq!(c.maxmemory_policy, MaxmemoryPolicy::AllkeysLfu),
            "maxmemory-samples" => assert_eq!(c.maxmemory_samples, 10),
            "maxmemory-eviction-tenacity" => assert_eq!(c.maxmemory_eviction_tenacity, 50),
            "lfu-log-factor" => assert_eq!(c.lfu_log_factor, 100),
            "lfu-decay-time" => assert_eq!(c.lfu_decay_time_min, 0),
            "hash-max-listpack-entries" => assert_eq!(c.hash_max_listpack_entries, 7),
            "hash-max-listpack-value" => assert_eq!(c.hash_max_listpack_value, 9),
            "hash-max-ziplist-value" => assert_eq!(c.hash_max_listpack_value, 10),
            "set-max-intset-entries" => assert_eq!(c.set_max_intset_entries, 11),
            "set-max-listpack-entries" => assert_eq!(c.set_max_listpack_entries, 12),
            "set-max-listpack-value" => assert_eq!(c.set_max_listpack_value, 13),
            "zset-max-listpack-entries" => assert_eq!(c.zset_max_listpack_entries, 14),
            "zset-max-ziplist-entries" => assert_eq!(c.zset_max_listpack_entries, 16),
            "zset-max-listpack-value" => assert_eq!(c.zset_max_listpack_value, 15),
            "list-max-listpack-size" => assert_eq!(c.list_max_listpack_size, -3),
            "list-compress-depth" => assert_eq!(c.list_compress_depth, 2),
            "hll-sparse-max-bytes" => assert_eq!(c.hll_sparse_max_bytes, 1024),
            "stream-node-max-bytes" => assert_eq!(c.stream_node_max_bytes, 8192),
            "stream-node-max-entries" => assert_eq!(c.stream_node_max_entries, 7),
            "dir" => assert_eq!(c.dir.as_deref(), Some(Path::new("/tmp"))),
            "dbfilename" => assert_eq!(c.dbfilename, b"x.rdb"),
            "save" => assert_eq!(c.save_rules(), [(10, 1), (20, 2)]),
            "rdbcompression" => assert!(!c.rdbcompression),
            "rdbchecksum" => assert!(!c.rdbchecksum),
            "stop-writes-on-bgsave-error" => assert!(!c.stop_writes_on_bgsave_error),
            "appendonly" => assert!(c.appendonly),
            "repl-backlog-size" => assert_eq!(c.repl_backlog_size, 2 << 20),
            "repl-backlog-ttl" => assert_eq!(c.repl_backlog_ttl_s, 60),
            "repl-diskless-sync" => assert!(!c.repl_diskless_sync),
            "repl-diskless-sync-delay" => assert_eq!(c.repl_diskless_sync_delay_s, 0),
            "repl-diskless-sync-max-replicas" => {
                assert_eq!(c.repl_diskless_sync_max_replicas, 2)
            }
            "repl-ping-replica-period" => assert_eq!(c.repl_ping_replica_period_s, 3),
            "repl-timeout" => assert_eq!(c.repl_timeout_s, 30),
            "min-replicas-to-write" => assert_eq!(c.min_replicas_to_write, 1),
            "min-replicas-max-lag" => assert_eq!(c.min_replicas_max_lag_s, 5),
            "appendfilename" => assert_eq!(c.appendfilename, b"x.aof"),
            "appenddirname" => assert_eq!(c.appenddirname, b"aofs"),
            "appendfsync" => assert_eq!(c.appendfsync, AppendFsync::Always),
            "aof-load-truncated" => assert!(!c.aof_load_truncated),
            "aof-use-rdb-preamble" => assert!(!c.aof_use_rdb_preamble),
            "auto-aof-rewrite-percentage" => assert_eq!(c.auto_aof_rewrite_percentage, 50),
            "auto-aof-rewrite-min-size" => assert_eq!(c.auto_aof_rewrite_min_size, 1 << 20),
            "slowlog-log-slower-than" => assert_eq!(c.slowlog_log_slower_than, -1),
            "slowlog-max-len" => assert_eq!(c.slowlog_max_len, 5),
            "latency-monitor-threshold" => assert_eq!(c.latency_monitor_threshold, 100),
            "latency-tracking" => assert!(!c.latency_tracking),
            "latency-tracking-info-percentiles" => {
                assert_eq!(c.latency_tracking_info_percentiles, [50.0, 99.99])
            }
            "replicaof" => assert_eq!(c.replicaof, strings(&["10.0.0.9", "6380"])),
            "slaveof" => assert_eq!(c.replicaof, strings(&["h", "1"])),
            "masterauth" => assert_eq!(c.masterauth.as_deref(), Some(&b"pw"[..])),
            "masteruser" => assert_eq!(c.masteruser.as_deref(), Some(&b"u"[..])),
            "replica-read-only" | "slave-read-only" => assert!(!c.replica_read_only),
            "replica-serve-stale-data" => assert!(!c.replica_serve_stale_data),
            "replica-priority" => assert_eq!(c.replica_priority, 7),
            "replica-announced" => assert!(!c.replica_announced),
            "client-output-buffer-limit" => assert_eq!(
                c.client_output_buffer_limit[ObufClass::Normal as usize],
                ObufLimit {
                    hard: 4,
                    soft: 5,
                    soft_seconds: 6
                }
            ),
            "tls-port" => assert_eq!(c.tls_port, 6380),
            "tls-cert-file" => assert_eq!(c.tls_cert_file, Some(PathBuf::from("/c.crt"))),
            "tls-key-file" => assert_eq!(c.tls_key_file, Some(PathBuf::from("/c.key"))),
            "tls-key-file-pass" => assert_eq!(c.tls_key_file_pass.as_deref(), Some(&b"pw"[..])),
            "tls-client-cert-file" => {
                assert_eq!(c.tls_client_cert_file, Some(PathBuf::from("/cc.crt")))
            }
            "tls-client-key-file" => {
                assert_eq!(c.tls_client_key_file, Some(PathBuf::from("/cc.key")))
            }
            "tls-client-key-file-pass" => {
                assert_eq!(c.tls_client_key_file_pass.as_deref(), Some(&b"cpw"[..]))
            }
            "tls-dh-params-file" => {
                assert_eq!(c.tls_dh_params_file, Some(PathBuf::from("/dh.pem")))
            }
            "tls-ca-cert-file" => assert_eq!(c.tls_ca_cert_file, Some(PathBuf::from("/ca.crt"))),
            "tls-ca-cert-dir" => assert_eq!(c.tls_ca_cert_dir, Some(PathBuf::from("/cas"))),
            "tls-auth-clients" => assert_eq!(c.tls_auth_clients, TlsAuthClients::Optional),
            "tls-protocols" => assert_eq!(c.tls_protocols.as_deref(), Some(&b"TLSv1.3"[..])),
            "tls-ciphers" => assert_eq!(c.tls_ciphers.as_deref(), Some(&b"DEFAULT"[..])),
            "tls-ciphersuites" => assert_eq!(
                c.tls_ciphersuites.as_deref(),
                Some(&b"TLS_AES_128_GCM_SHA256"[..])
            ),
            "tls-prefer-server-ciphers" => assert!(c.tls_prefer_server_ciphers),
            "tls-session-caching" => assert!(!c.tls_session_caching),
            "tls-session-cache-size" => assert_eq!(c.tls_session_cache_size, 100),
            "tls-session-cache-timeout" => assert_eq!(c.tls_session_cache_timeout_s, 60),
            "tls-replication" => assert!(c.tls_replication),
            "tls-cluster" => assert!(c.tls_cluster),
            other => panic!("no check for {other}"),
        }
    }

    #[test]
    fn samples_cover_every_directive() {
        for d in DIRECTIVES {
            assert!(
                SAMPLES.iter().any(|s| s.0 == d.name),
                "no sample for {}",
                d.name
            );
        }
    }

    #[test]
    fn every_directive_from_a_file() {
        for &(name, value, get_name, get_value) in SAMPLES {
            let cfg = file(&format!("# sample\n\n  {name} {value}  \r\n")).unwrap();
            check_sample(&cfg, name);
            assert_eq!(
                get(&cfg, &[get_name]),
                vec![(get_name.into(), get_value.into())]
            );
            // Directive names are case-insensitive.
            let upper = file(&format!("{} {value}", name.to_uppercase())).unwrap();
            assert_eq!(upper, cfg, "{name}");
        }
    }

    #[test]
    fn every_directive_from_the_command_line() {
        for &(name, value, get_name, get_value) in SAMPLES {
            // `--name v1 v2` as separate arguments...
            let mut a = vec![format!("--{name}")];
            a.extend(value.split(' ').map(String::from));
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            let cfg = cli(&a).unwrap();
            check_sample(&cfg, name);
            assert_eq!(get_one(&cfg, get_name), get_value);
            // ... and as one quoted argument.
            assert_eq!(cli(&[&format!("--{name}"), value]).unwrap(), cfg, "{name}");
            // ... and as `"--name value"` in one argument.
            assert_eq!(cli(&[&format!("--{name} {value}")]).unwrap(), cfg, "{name}");
        }
    }

    #[test]
    fn every_directive_through_config_get_and_set() {
        for &(name, value, get_name, get_value) in SAMPLES {
            let mut cfg = Config::default();
            let d = &DIRECTIVES[lookup(name.as_bytes()).unwrap()];
            let r = set(&mut cfg, &[(name, value)]);
            if d.runtime == Mutable {
                assert_eq!(r, Ok(()));
                check_sample(&cfg, name);
                assert_eq!(get_one(&cfg, get_name), get_value);
            } else {
                let why = if d.runtime == Protected {
                    "protected"
                } else {
                    "immutable"
                };
                assert_eq!(
                    r.unwrap_err(),
                    format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - \
                         can't set {why} config"
                    )
                );
                assert_eq!(cfg, Config::default());
            }
        }
    }

    #[test]
    fn tls_directives_as_redis() {
        let mut cfg = Config::default();
        // Redis 7.0.15's text.
        assert_eq!(
            set(&mut cfg, &[("tls-auth-clients", "maybe")]).unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'tls-auth-clients') - \
             argument(s) must be one of the following: no, yes, optional"
        );
        assert!(!cfg.tls_wanted());
        let before = cfg.clone();
        assert_eq!(set(&mut cfg, &[("tls-cert-file", "/x.crt")]), Ok(()));
        assert!(cfg.tls_context_differs(&before));
        assert!(!cfg.tls_wanted());
        assert_eq!(set(&mut cfg, &[("tls-replication", "yes")]), Ok(()));
        assert!(cfg.tls_wanted());
        assert_eq!(set(&mut cfg, &[("tls-cert-file", "")]), Ok(()));
        assert_eq!(cfg.tls_cert_file, None);
    }

    #[test]
    fn fixed_directives_accept_only_their_current_value() {
        let mut cfg = Config::default();
        assert_eq!(set(&mut cfg, &[("shards", "0")]), Ok(()));
        assert_eq!(set(&mut cfg, &[("threads", "0")]), Ok(()));
        assert_eq!(
            set(&mut cfg, &[("shards", "2")]).unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'shards') - \
             can't set immutable config"
        );
        assert_eq!(cfg, Config::default());
    }

    #[test]
    fn mutability_matches_the_spec() {
        let immutable: Vec<&str> = DIRECTIVES
            .iter()
            .filter(|d| d.runtime == Immutable)
            .map(|d| d.name)
            .collect();
        let fixed: Vec<&str> = DIRECTIVES
            .iter()
            .filter(|d| d.runtime == Fixed)
            .map(|d| d.name)
            .collect();
        assert_eq!(fixed, ["shards"]);
        assert_eq!(
            immutable,
            [
                "unixsocket",
                "unixsocketperm",
                "server_cpulist",
                "databases",
                "logfile",
                "aclfile",
                "rdbchecksum",
                "appendfilename",
                "appenddirname",
                "replicaof"
            ]
        );
    }

    // ----- config file syntax ----------------------------------------------------------------

    #[test]
    fn user_lines_are_kept_in_order() {
        let cfg = file("user alice on >a ~*\nuser bob \"(+get ~x)\"\nport 1").unwrap();
        assert_eq!(
            cfg.users,
            vec![
                vec![
                    b"alice".to_vec(),
                    b"on".to_vec(),
                    b">a".to_vec(),
                    b"~*".to_vec()
                ],
                vec![b"bob".to_vec(), b"(+get ~x)".to_vec()],
            ]
        );
        assert!(config_get(&cfg, &[b"user"]).is_empty());
    }

    #[test]
    fn file_syntax() {
        let cfg = file(
            "# comment\n\
             \n\
             \t  \n\
             port 7001 # not a comment: wrong number of arguments? no, see below\n",
        );
        // Redis only skips lines *starting* with '#'; a trailing "#" is more arguments.
        assert_eq!(
            cfg.unwrap_err().to_string(),
            fatal(
                4,
                "port 7001 # not a comment: wrong number of arguments? no, see below",
                "wrong number of arguments"
            )
        );
        let cfg =
            file("requirepass \"a b\\n\\x41\\\"\"\nlogfile 'it\\'s here'\nport 1\nport 2").unwrap();
        assert_eq!(cfg.requirepass.as_deref(), Some(&b"a b\nA\""[..]));
        assert_eq!(cfg.logfile, Some(PathBuf::from("it's here")));
        assert_eq!(cfg.port, 2, "later lines override earlier ones");
        // Binary-safe values.
        let cfg = file("requirepass \"\\xff\\x00z\"").unwrap();
        assert_eq!(cfg.requirepass.as_deref(), Some(&[0xff, 0, b'z'][..]));
        assert_eq!(
            config_get(&cfg, &[b"requirepass"]),
            vec![("requirepass".to_string(), vec![0xff, 0, b'z'])]
        );
        // Empty strings unset optional values.
        let cfg = file("requirepass x\nrequirepass \"\"\nunixsocket ''\nbind \"\"").unwrap();
        assert_eq!(
            (cfg.requirepass, cfg.unixsocket, cfg.bind.len()),
            (None, None, 0)
        );
        // `bind` with no argument at all also means "no TCP listener" (Redis quirk).
        assert!(file("bind").unwrap().bind.is_empty());
    }

    #[test]
    fn file_errors_are_redis_texts() {
        assert_eq!(
            file_err("port 0\nfoo bar\n"),
            fatal(2, "foo bar", "Bad directive or wrong number of arguments")
        );
        assert_eq!(
            file_err("port 0\n\n# comment\n   hz    \"x\"   \n"),
            fatal(
                4,
                "hz    \"x\"",
                "argument couldn't be parsed into an integer"
            )
        );
        assert_eq!(
            file_err("PORT 1x"),
            fatal(1, "PORT 1x", "argument couldn't be parsed into an integer")
        );
        assert_eq!(
            file_err("port abc"),
            fatal(1, "port abc", "argument couldn't be parsed into an integer")
        );
        assert_eq!(
            file_err("port 65536"),
            fatal(
                1,
                "port 65536",
                "argument must be between 0 and 65535 inclusive"
            )
        );
        assert_eq!(
            file_err("protected-mode maybe"),
            fatal(1, "protected-mode maybe", "argument must be 'yes' or 'no'")
        );
        assert_eq!(
            file_err("loglevel foo"),
            fatal(
                1,
                "loglevel foo",
                "argument(s) must be one of the following: \
                 debug, verbose, notice, warning, nothing"
            )
        );
        assert_eq!(
            file_err("maxmemory-policy lru"),
            fatal(
                1,
                "maxmemory-policy lru",
                "argument(s) must be one of the following: volatile-lru, volatile-lfu, \
                 volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, \
                 noeviction"
            )
        );
        assert_eq!(
            file_err("maxmemory 1x"),
            fatal(1, "maxmemory 1x", "argument must be a memory value")
        );
        assert_eq!(
            file_err("proto-max-bulk-len 100"),
            fatal(
                1,
                "proto-max-bulk-len 100",
                "argument must be between 1048576 and 9223372036854775807 inclusive"
            )
        );
        assert_eq!(
            file_err("unixsocketperm 8"),
            fatal(
                1,
                "unixsocketperm 8",
                "argument couldn't be parsed as an octal number"
            )
        );
        assert_eq!(
            file_err("unixsocketperm 1000"),
            fatal(
                1,
                "unixsocketperm 1000",
                "argument must be between 0 and 777 inclusive"
            )
        );
        assert_eq!(
            file_err("databases 0"),
            fatal(
                1,
                "databases 0",
                "argument must be between 1 and 1024 inclusive"
            )
        );
        assert_eq!(
            file_err("maxclients 0"),
            fatal(
                1,
                "maxclients 0",
                "argument must be between 1 and 4294967295 inclusive"
            )
        );
        assert_eq!(
            file_err("timeout -1"),
            fatal(
                1,
                "timeout -1",
                "argument must be between 0 and 2147483647 inclusive"
            )
        );
        assert_eq!(
            file_err("port 0\nport"),
            fatal(2, "port", "wrong number of arguments")
        );
        assert_eq!(
            file_err("port 1 2"),
            fatal(1, "port 1 2", "wrong number of arguments")
        );
        assert_eq!(
            file_err("requirepass \"abc"),
            fatal(
                1,
                "requirepass \"abc",
                "Unbalanced quotes in configuration line"
            )
        );
        assert_eq!(
            file_err("requirepass \"abc\"x"),
            fatal(
                1,
                "requirepass \"abc\"x",
                "Unbalanced quotes in configuration line"
            )
        );
        assert_eq!(
            file_err("bind 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17"),
            fatal(
                1,
                "bind 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17",
                "Too many bind addresses specified."
            )
        );
        assert_eq!(
            file_err("include /etc/other.conf"),
            fatal(
                1,
                "include /etc/other.conf",
                "include is not supported by Tessera: put every directive in one file"
            )
        );
        let e = file("\n\nhz x").unwrap_err();
        assert_eq!(e.line_no(), Some(3));
        assert_eq!(e.reason(), "argument couldn't be parsed into an integer");
    }

    #[test]
    fn hz_is_clamped_like_redis() {
        assert_eq!(file("hz 1000").unwrap().hz, 500);
        assert_eq!(file("hz 0").unwrap().hz, 1);
        assert_eq!(get_one(&file("hz 1000").unwrap(), "hz"), "500");
    }

    // ----- value parsers ---------------------------------------------------------------------

    #[test]
    fn memory_units_are_memtoull() {
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("123", Some(123)),
            ("123b", Some(123)),
            ("1k", Some(1000)),
            ("1K", Some(1000)),
            ("1kb", Some(1024)),
            ("1Kb", Some(1024)),
            ("1KB", Some(1024)),
            ("3m", Some(3_000_000)),
            ("3mb", Some(3 << 20)),
            ("2g", Some(2_000_000_000)),
            ("2GB", Some(2 << 30)),
            // Redis quirks: nothing, or a unit alone, is zero.
            ("", Some(0)),
            ("kb", Some(0)),
            // strtoull saturates and Redis 7.0 does not check.
            ("99999999999999999999", Some(u64::MAX)),
            ("18446744073709551615", Some(u64::MAX)),
            // Redis 7.0 wraps here; we refuse.
            ("99999999999gb", None),
            ("-1", None),
            ("1x", None),
            ("1 kb", None),
            (" 1", None),
            ("1.5gb", None),
            ("1tb", None),
            ("+1", None),
        ];
        for &(s, want) in cases {
            assert_eq!(memtoull(s.as_bytes()), want, "{s:?}");
        }
        assert_eq!(memtoull("1".repeat(128).as_bytes()), None);
        assert_eq!(file("maxmemory 1Kb").unwrap().maxmemory, 1024);
        assert_eq!(
            get_one(&file("maxmemory 1gb").unwrap(), "maxmemory"),
            "1073741824"
        );
    }

    #[test]
    fn integers_are_string2ll() {
        let cases: &[(&str, Option<i64>)] = &[
            ("0", Some(0)),
            ("7", Some(7)),
            ("-7", Some(-7)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("007", None),
            ("+7", None),
            (" 7", None),
            ("7 ", None),
            ("-0", None),
            ("-", None),
            ("", None),
            ("1e3", None),
        ];
        for &(s, want) in cases {
            assert_eq!(string2ll(s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn octal_is_strtoll_base_8() {
        let cases: &[(&str, Option<i64>)] = &[
            ("0", Some(0)),
            ("700", Some(0o700)),
            ("0700", Some(0o700)),
            ("+17", Some(0o17)),
            ("-1", Some(-1)),
            ("  755", Some(0o755)),
            ("", Some(0)),
            ("8", None),
            ("755 ", None),
            (" ", None),
            ("+", None),
            ("0x1", None),
            ("7777777777777777777777", None),
        ];
        for &(s, want) in cases {
            assert_eq!(strtoll_octal(s.as_bytes()), want, "{s:?}");
        }
        assert_eq!(file("unixsocketperm 0770").unwrap().unixsocketperm, 0o770);
        assert_eq!(
            file_err("unixsocketperm -1"),
            fatal(
                1,
                "unixsocketperm -1",
                "argument must be between 0 and 777 inclusive"
            )
        );
    }

    #[test]
    fn bools_and_enums_are_case_insensitive() {
        assert!(!file("protected-mode NO").unwrap().protected_mode);
        assert!(file("protected-mode Yes").unwrap().protected_mode);
        assert_eq!(file("loglevel DEBUG").unwrap().loglevel, LogLevel::Debug);
        assert_eq!(
            file("loglevel nothing").unwrap().loglevel,
            LogLevel::Nothing
        );
        assert_eq!(
            file("maxmemory-policy Volatile-TTL")
                .unwrap()
                .maxmemory_policy,
            MaxmemoryPolicy::VolatileTtl
        );
        assert_eq!(
            get_one(&file("loglevel VERBOSE").unwrap(), "loglevel"),
            "verbose"
        );
    }

    #[test]
    fn split_args_is_sdssplitargs() {
        let split = |s: &str| {
            split_args(s.as_bytes()).map(|v| {
                v.into_iter()
                    .map(|w| String::from_utf8(w).unwrap())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(split(""), Some(vec![]));
        assert_eq!(split("  a  b\tc "), Some(strings(&["a", "b", "c"])));
        assert_eq!(split("\"a b\" 'c d'"), Some(strings(&["a b", "c d"])));
        assert_eq!(split("ab\"cd\""), Some(strings(&["abcd"])));
        assert_eq!(
            split("\"\\t\\r\\n\\a\\b\\q\\\\\""),
            Some(strings(&["\t\r\n\x07\x08q\\"]))
        );
        assert_eq!(split("\"\\x4a\\x4B\\x4\""), Some(strings(&["JKx4"])));
        assert_eq!(split("'a\\'b\\n'"), Some(strings(&["a'b\\n"])));
        assert_eq!(split("\"\""), Some(strings(&[""])));
        assert_eq!(split("\"a"), None);
        assert_eq!(split("'a"), None);
        assert_eq!(split("\"a\"b"), None);
        assert_eq!(split("'a'b"), None);
        assert_eq!(split("a\0b c"), Some(strings(&["a"])));
    }

    #[test]
    fn repr_is_sdscatrepr() {
        let mut out = Vec::new();
        cat_repr(&mut out, "a\"b\\c\n\r\t\x07\x08\x01é~".as_bytes());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"a\\\"b\\\\c\\n\\r\\t\\a\\b\\x01\\xc3\\xa9~\""
        );
    }

    // ----- command line ----------------------------------------------------------------------

    #[test]
    fn cli_help_and_version() {
        for flag in ["-h", "--help"] {
            let r = parse_cli_with(&strings(&[flag, "ignored"]), &no_file, &no_stdin);
            assert_eq!(r, Ok(CliAction::Help(help_text())));
        }
        for flag in ["-v", "--version"] {
            let r = parse_cli_with(&strings(&[flag]), &no_file, &no_stdin);
            assert_eq!(r, Ok(CliAction::Version(version_text())));
        }
        assert_eq!(
            version_text(),
            "Tessera server v=0.1.0 sha=00000000:0 malloc=libc bits=64"
        );
        let help = help_text();
        assert!(help.starts_with("Usage: ./tessera [/path/to/tessera.conf] [options] [-]\n"));
        assert!(help.contains("\n       ./tessera -v or --version\n"));
        assert!(help.contains("\n       ./tessera --port 7777\n"));
        for d in DIRECTIVES {
            assert!(help.contains(&format!(" {} ", d.name)), "{}", d.name);
        }
        assert!(
            help.contains("   * hz                           10\n"),
            "{help}"
        );
        assert!(
            help.contains("     shards                       0 (alias threads)\n"),
            "{help}"
        );
        // Only as the first argument, as in redis-server.
        assert_eq!(
            cli_err(&["--port", "0", "--version"]),
            fatal(3, "version", "Bad directive or wrong number of arguments")
        );
    }

    #[test]
    fn cli_without_arguments_is_the_default() {
        assert_eq!(cli(&[]).unwrap(), Config::default());
    }

    /// Each case was run against `redis-server` 7.0.15: command-line arguments become config
    /// lines after an empty first line, so line numbers start at 2.
    #[test]
    fn cli_errors_are_redis_texts() {
        assert_eq!(
            cli_err(&["--port", "0", "--foo", "bar"]),
            fatal(
                3,
                "foo \"bar\"",
                "Bad directive or wrong number of arguments"
            )
        );
        assert_eq!(
            cli_err(&["--port", "abc"]),
            fatal(
                2,
                "port \"abc\"",
                "argument couldn't be parsed into an integer"
            )
        );
        assert_eq!(
            cli_err(&["--port", "0", "--hz", "x"]),
            fatal(3, "hz \"x\"", "argument couldn't be parsed into an integer")
        );
        assert_eq!(
            cli_err(&["--port", "0", "--protected-mode", "maybe"]),
            fatal(
                3,
                "protected-mode \"maybe\"",
                "argument must be 'yes' or 'no'"
            )
        );
        assert_eq!(
            cli_err(&["--port"]),
            fatal(2, "port", "wrong number of arguments")
        );
        assert_eq!(
            cli_err(&["--port", "0", "--hz"]),
            fatal(3, "hz", "wrong number of arguments")
        );
        // A name without value swallows the next `--x` as its value.
        assert_eq!(
            cli_err(&["--port", "--hz", "5"]),
            fatal(2, "port \"--hz\" \"5\"", "wrong number of arguments")
        );
        assert_eq!(
            cli_err(&["--port 0", "--hz", "x"]),
            fatal(3, "hz \"x\"", "argument couldn't be parsed into an integer")
        );
        assert_eq!(
            cli_err(&["--port", "0", "--requirepass", "a\"b", "--hz", "x"]),
            fatal(4, "hz \"x\"", "argument couldn't be parsed into an integer")
        );
        assert_eq!(
            cli_err(&["--port", "0", "--requirepass", "a\x01b\tc", "x"]),
            fatal(
                3,
                "requirepass \"a\\x01b\\tc\" \"x\"",
                "wrong number of arguments"
            )
        );
        assert_eq!(
            cli_err(&["--port", "0", "extra"]),
            fatal(2, "port \"0\" \"extra\"", "wrong number of arguments")
        );
        assert_eq!(
            cli_err(&["--port", "0", "--bind", "1.2.3.4", "5.6.7.8", "--", "--hz", "x"]),
            fatal(
                4,
                "\"--hz\" \"x\"",
                "Bad directive or wrong number of arguments"
            )
        );
        assert_eq!(
            cli_err(&["--port", "0", "--unixsocketperm", "8"]),
            fatal(
                3,
                "unixsocketperm \"8\"",
                "argument couldn't be parsed as an octal number"
            )
        );
        assert_eq!(
            cli_err(&["--port", "0", "--maxmemory", "1x"]),
            fatal(3, "maxmemory \"1x\"", "argument must be a memory value")
        );
        // A trailing `--` is an empty line.
        assert_eq!(cli(&["--port", "0", "--"]).unwrap().port, 0);
    }

    #[test]
    fn cli_values_keep_their_bytes() {
        let cfg = cli(&["--requirepass", "a \"b\"\\c\n"]).unwrap();
        assert_eq!(cfg.requirepass.as_deref(), Some(&b"a \"b\"\\c\n"[..]));
        let cfg = cli(&["--requirepass", ""]).unwrap();
        assert_eq!(cfg.requirepass, None);
    }

    #[test]
    fn cli_overrides_the_file_and_counts_its_lines() {
        let conf = "port 7000\nhz 20\n";
        let Ok(CliAction::Run(cfg)) = cli_with_file(&["/etc/t.conf", "--port", "7001"], conf)
        else {
            panic!()
        };
        assert_eq!((cfg.port, cfg.hz), (7001, 20));
        assert_eq!(cfg.config_file, Some(PathBuf::from("/etc/t.conf")));
        // File with a final newline: its 2 lines, the separator line, then the options.
        assert_eq!(
            cli_with_file(&["/etc/t.conf", "--hz", "x"], conf)
                .unwrap_err()
                .to_string(),
            fatal(4, "hz \"x\"", "argument couldn't be parsed into an integer")
        );
        // Without it, the separator ends the last line.
        assert_eq!(
            cli_with_file(&["/etc/t.conf", "--hz", "x"], "port 0\nhz 3")
                .unwrap_err()
                .to_string(),
            fatal(3, "hz \"x\"", "argument couldn't be parsed into an integer")
        );
        assert_eq!(
            cli_with_file(&["/etc/t.conf"], "port 0\n\n# c\n   hz    \"x\"   \n")
                .unwrap_err()
                .to_string(),
            fatal(
                4,
                "hz    \"x\"",
                "argument couldn't be parsed into an integer"
            )
        );
        // A relative path is made absolute, as Redis does.
        let Ok(CliAction::Run(cfg)) = cli_with_file(&["t.conf"], "") else {
            panic!()
        };
        let path = cfg.config_file.unwrap();
        assert!(path.is_absolute() && path.ends_with("t.conf"), "{path:?}");
    }

    #[test]
    fn cli_reads_stdin_for_dash() {
        let stdin = || Ok(b"hz 30\nport 7002".to_vec());
        let run =
            |a: &[&str]| match parse_cli_with(&strings(a), &|_| Ok(b"hz 20\n".to_vec()), &stdin) {
                Ok(CliAction::Run(cfg)) => (cfg.hz, cfg.port),
                other => panic!("{other:?}"),
            };
        assert_eq!(run(&["-"]), (30, 7002));
        assert_eq!(run(&["/etc/t.conf", "-"]), (30, 7002));
        assert_eq!(run(&["/etc/t.conf", "--port", "1", "-"]), (30, 1));
        assert_eq!(run(&["-", "--port", "1"]), (30, 1));
        assert_eq!(run(&["/etc/t.conf"]), (20, 6379));
        // In the middle, `-` is a value.
        let r = parse_cli_with(
            &strings(&["--hz", "5", "-", "--port", "1"]),
            &no_file,
            &no_stdin,
        );
        assert_eq!(
            r.unwrap_err().to_string(),
            fatal(2, "hz \"5\" \"-\"", "wrong number of arguments")
        );
    }

    #[test]
    fn cli_reports_unreadable_files_like_redis() {
        let dir = std::env::temp_dir().join(format!("tessera-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.conf");
        let e = parse_cli(&[missing.display().to_string()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "Fatal error, can't open config file '{}': No such file or directory",
                missing.display()
            )
        );
        assert_eq!(e.line_no(), None);
        let present = dir.join("present.conf");
        std::fs::write(&present, "port 7003\nmaxmemory 1mb\n").unwrap();
        let r = parse_cli(&[present.display().to_string(), "--hz".into(), "11".into()]);
        let Ok(CliAction::Run(cfg)) = r else {
            panic!("{r:?}")
        };
        assert_eq!((cfg.port, cfg.maxmemory, cfg.hz), (7003, 1 << 20, 11));
        std::fs::remove_dir_all(&dir).unwrap();

        let big = vec![b'#'; MAX_CONFIG_BYTES as usize + 1];
        let e = parse_cli_with(&strings(&["/big.conf"]), &|_| Ok(big.clone()), &no_stdin);
        assert_eq!(
            e.unwrap_err().to_string(),
            "Fatal error, config text is larger than 16777216 bytes"
        );
    }

    // ----- CONFIG GET ------------------------------------------------------------------------

    #[test]
    fn config_get_patterns() {
        let cfg = Config::default();
        let all = get(&cfg, &["*"]);
        let names: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
        let table: Vec<&str> = DIRECTIVES
            .iter()
            .flat_map(|d| {
                std::iter::once(d.name).chain(d.alias.filter(|a| !TESSERA_ALIASES.contains(a)))
            })
            .collect();
        assert_eq!(
            names, table,
            "every directive once, in table order, then Redis's alias"
        );
        assert!(names.contains(&"slaveof") && !names.contains(&"threads"));
        // Name and alias both, when both are asked for or matched.
        let both: Vec<String> = get(&cfg, &["replica-read-only", "slave-read-only", "*of"])
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            both,
            [
                "replicaof",
                "slaveof",
                "replica-read-only",
                "slave-read-only"
            ]
        );

        let max: Vec<String> = get(&cfg, &["*max*"]).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            max,
            [
                "maxclients",
                "proto-max-bulk-len",
                "acllog-max-len",
                "tracking-table-max-keys",
                "maxmemory",
                "maxmemory-policy",
                "maxmemory-samples",
                "maxmemory-eviction-tenacity",
                "hash-max-listpack-entries",
                "hash-max-ziplist-entries",
                "hash-max-listpack-value",
                "hash-max-ziplist-value",
                "set-max-intset-entries",
                "set-max-listpack-entries",
                "set-max-listpack-value",
                "zset-max-listpack-entries",
                "zset-max-ziplist-entries",
                "zset-max-listpack-value",
                "zset-max-ziplist-value",
                "list-max-listpack-size",
                "list-max-ziplist-size",
                "hll-sparse-max-bytes",
                "stream-node-max-bytes",
                "stream-node-max-entries",
                "repl-diskless-sync-max-replicas",
                "min-replicas-max-lag",
                "min-slaves-max-lag",
                "slowlog-max-len",
            ]
        );
        assert_eq!(get(&cfg, &["port"]), vec![("port".into(), "6379".into())]);
        // Exact names are echoed as typed (Redis 7.0 replies `PORT` to `CONFIG GET PORT`).
        assert_eq!(get(&cfg, &["PORT"]), vec![("PORT".into(), "6379".into())]);
        // Several patterns: union, each directive once, table order.
        assert_eq!(
            get(&cfg, &["timeout", "port", "por?", "P*", "nosuch"]),
            vec![
                ("port".into(), "6379".into()),
                ("timeout".into(), "0".into()),
                ("protected-mode".into(), "yes".into()),
                ("proto-max-bulk-len".into(), "536870912".into()),
            ]
        );
        // Tessera's own aliases: found by exact name only (Redis's table
        // has no such entry for a glob to list).
        assert_eq!(
            get(&cfg, &["threads"]),
            vec![("threads".into(), "0".into())]
        );
        assert_eq!(get(&cfg, &["thr*"]), vec![]);
        assert_eq!(
            get(&cfg, &["*ards", "*eads"]),
            vec![("shards".into(), "0".into())]
        );
        assert_eq!(get(&cfg, &["shards", "threads", "shards"]).len(), 2);
        assert!(get(&cfg, &["*[", "nosuch", "p\\ort"]).is_empty());
        assert_eq!(get(&cfg, &["p\\ort*"]).len(), 1);
        assert_eq!(get(&cfg, &["[^a-z]*"]), vec![]);
        assert_eq!(
            get(&cfg, &["b[h-j]nd"]),
            vec![("bind".into(), "127.0.0.1".into())]
        );
        assert!(get(&cfg, &[]).is_empty());
        assert_eq!(
            get(&cfg, &["unixsocket*"])[1],
            ("unixsocketperm".into(), "0".into())
        );
        assert_eq!(
            get(&cfg, &["unixsocket"]),
            vec![("unixsocket".into(), String::new())]
        );
    }

    #[test]
    fn glob_is_stringmatchlen_nocase() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes());
        assert!(m("*", "port"));
        assert!(m("**", "port"));
        assert!(m("p*t", "port"));
        assert!(m("P?RT", "port"));
        assert!(!m("p?t", "port"));
        assert!(m("[abp]ort", "port"));
        assert!(m("[^a]ort", "port"));
        assert!(!m("[^p]ort", "port"));
        assert!(m("[a-z]ort", "Port"));
        assert!(m("[z-a]ort", "port"), "reversed ranges are swapped");
        assert!(m("[A-Z]ort", "port"));
        assert!(m("\\port", "port"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("[\\]]", "]"));
        assert!(m("[\\^]x", "^x"));
        assert!(!m("[", "p"));
        assert!(m("p[o", "po"), "unterminated class ends the pattern");
        assert!(m("*max*", "maxmemory-policy"));
        assert!(!m("*max", "maxmemory-policy"));
        assert!(m("*-*-*", "client-query-buffer-limit"));
        assert!(!m("", "port"));
        assert!(!m("port", ""));
        // Pathological patterns stay cheap (skipLongerMatches).
        let long = "a".repeat(5000);
        assert!(!m(&"*a".repeat(2000).replace("*a*a", "*a*b"), &long));
        assert!(m(&"*".repeat(5000), &long));
    }

    // ----- CONFIG SET ------------------------------------------------------------------------

    #[test]
    fn config_set_values() {
        let mut cfg = Config::default();
        assert_eq!(
            set(
                &mut cfg,
                &[
                    ("HZ", "1000"),
                    ("maxmemory", "1Kb"),
                    ("loglevel", "WARNING")
                ]
            ),
            Ok(())
        );
        assert_eq!(
            (cfg.hz, cfg.maxmemory, cfg.loglevel),
            (500, 1024, LogLevel::Warning)
        );
        assert_eq!(set(&mut cfg, &[("hz", "0")]), Ok(()));
        assert_eq!(cfg.hz, 1);
        assert_eq!(set(&mut cfg, &[("maxmemory", "")]), Ok(()));
        assert_eq!(cfg.maxmemory, 0);
        assert_eq!(
            set(&mut cfg, &[("requirepass", "pw"), ("protected-mode", "No")]),
            Ok(())
        );
        assert_eq!(cfg.requirepass.as_deref(), Some(&b"pw"[..]));
        assert_eq!(get_one(&cfg, "requirepass"), "pw");
        assert_eq!(set(&mut cfg, &[("requirepass", "")]), Ok(()));
        assert_eq!(cfg.requirepass, None);
        assert_eq!(
            set(&mut cfg, &[("maxmemory-policy", "ALLKEYS-LRU")]).map(|()| cfg.maxmemory_policy),
            Ok(MaxmemoryPolicy::AllkeysLru)
        );
        assert_eq!(get_one(&cfg, "maxmemory-policy"), "allkeys-lru");
        assert_eq!(set(&mut cfg, &[("proto-max-bulk-len", "2gb")]), Ok(()));
        assert_eq!(get_one(&cfg, "proto-max-bulk-len"), "2147483648");
        assert_eq!(
            set(&mut cfg, &[("maxmemory", "99999999999999999999")]),
            Ok(())
        );
        assert_eq!(get_one(&cfg, "maxmemory"), "18446744073709551615");
    }

    /// `lfu-log-factor`/`lfu-decay-time`: Redis 7.0 `createIntConfig(.., 0, INT_MAX, ..)`,
    /// mutable; replies checked against redis-server 7.0.15.
    #[test]
    fn lfu_directives_match_redis() {
        let mut cfg = Config::default();
        assert_eq!(
            get(&cfg, &["lfu*"]),
            vec![
                ("lfu-log-factor".into(), "10".into()),
                ("lfu-decay-time".into(), "1".into()),
            ]
        );
        let failed = |name: &str, why: &str| {
            format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
        };
        let range = "argument must be between 0 and 2147483647 inclusive";
        assert_eq!(
            set(&mut cfg, &[("lfu-log-factor", "-1")]),
            Err(failed("lfu-log-factor", range))
        );
        assert_eq!(
            set(&mut cfg, &[("lfu-log-factor", "2147483648")]),
            Err(failed("lfu-log-factor", range))
        );
        assert_eq!(
            set(&mut cfg, &[("lfu-log-factor", "abc")]),
            Err(failed(
                "lfu-log-factor",
                "argument couldn't be parsed into an integer"
            ))
        );
        assert_eq!(
            set(&mut cfg, &[("lfu-decay-time", "-1")]),
            Err(failed("lfu-decay-time", range))
        );
        assert_eq!(cfg, Config::default());
        assert_eq!(
            set(
                &mut cfg,
                &[("lfu-log-factor", "2147483647"), ("LFU-DECAY-TIME", "0")]
            ),
            Ok(())
        );
        assert_eq!(
            (cfg.lfu_log_factor, cfg.lfu_decay_time_min),
            (i32::MAX as u32, 0)
        );
        assert_eq!(get_one(&cfg, "lfu-log-factor"), "2147483647");
        let f = file("lfu-log-factor 3\nlfu-decay-time 60").unwrap();
        assert_eq!((f.lfu_log_factor, f.lfu_decay_time_min), (3, 60));
    }

    /// Each text was produced by `redis-cli CONFIG SET` against redis-server 7.0.15.
    #[test]
    fn config_set_errors_are_redis_texts() {
        let failed = |name: &str, why: &str| {
            format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
        };
        let cases: &[(&[(&str, &str)], String)] = &[
            (
                &[("foo", "bar")],
                "ERR Unknown option or number of arguments for CONFIG SET - 'foo'".into(),
            ),
            (
                &[("ZZZ", "1")],
                "ERR Unknown option or number of arguments for CONFIG SET - 'ZZZ'".into(),
            ),
            (
                &[("hz", "x")],
                failed("hz", "argument couldn't be parsed into an integer"),
            ),
            (
                &[("HZ", "x")],
                failed("hz", "argument couldn't be parsed into an integer"),
            ),
            (
                &[("hz", "007")],
                failed("hz", "argument couldn't be parsed into an integer"),
            ),
            (
                &[("hz", "+7")],
                failed("hz", "argument couldn't be parsed into an integer"),
            ),
            (
                &[("hz", " 7")],
                failed("hz", "argument couldn't be parsed into an integer"),
            ),
            (
                &[("hz", "-1")],
                failed("hz", "argument must be between 0 and 2147483647 inclusive"),
            ),
            (
                &[("timeout", "-1")],
                failed(
                    "timeout",
                    "argument must be between 0 and 2147483647 inclusive",
                ),
            ),
            (
                &[("maxclients", "0")],
                failed(
                    "maxclients",
                    "argument must be between 1 and 4294967295 inclusive",
                ),
            ),
            (
                &[("protected-mode", "maybe")],
                failed("protected-mode", "argument must be 'yes' or 'no'"),
            ),
            (
                &[("loglevel", "foo")],
                failed(
                    "loglevel",
                    "argument(s) must be one of the following: \
                     debug, verbose, notice, warning, nothing",
                ),
            ),
            (
                &[("maxmemory-policy", "foo")],
                failed(
                    "maxmemory-policy",
                    "argument(s) must be one of the following: volatile-lru, volatile-lfu, \
                     volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, \
                     noeviction",
                ),
            ),
            (
                &[("maxmemory", "abc")],
                failed("maxmemory", "argument must be a memory value"),
            ),
            (
                &[("maxmemory", "-1")],
                failed("maxmemory", "argument must be a memory value"),
            ),
            (
                &[("proto-max-bulk-len", "100")],
                failed(
                    "proto-max-bulk-len",
                    "argument must be between 1048576 and 9223372036854775807 inclusive",
                ),
            ),
            (
                &[("client-query-buffer-limit", "5")],
                failed(
                    "client-query-buffer-limit",
                    "argument must be between 1048576 and 9223372036854775807 inclusive",
                ),
            ),
            (
                &[("databases", "3")],
                failed("databases", "can't set immutable config"),
            ),
            (
                &[("port", "abc")],
                failed("port", "argument couldn't be parsed into an integer"),
            ),
            (
                &[("Threads", "2")],
                failed("Threads", "can't set immutable config"),
            ),
            (
                &[("hz", "5"), ("hz", "6")],
                failed("hz", "duplicate parameter"),
            ),
            (
                &[("hz", "5"), ("HZ", "6")],
                failed("HZ", "duplicate parameter"),
            ),
            // Lookup errors (unknown, immutable, duplicate) come before value errors; the
            // first of each kind wins.
            (
                &[("hz", "5"), ("foo", "1"), ("databases", "2")],
                "ERR Unknown option or number of arguments for CONFIG SET - 'foo'".into(),
            ),
            (
                &[("databases", "2"), ("foo", "1")],
                failed("databases", "can't set immutable config"),
            ),
            (
                &[("hz", "x"), ("foo", "1")],
                "ERR Unknown option or number of arguments for CONFIG SET - 'foo'".into(),
            ),
            (
                &[("hz", "x"), ("maxclients", "y")],
                failed("hz", "argument couldn't be parsed into an integer"),
            ),
            (
                &[("hz", "7"), ("maxclients", "y")],
                failed("maxclients", "argument couldn't be parsed into an integer"),
            ),
        ];
        for (pairs, want) in cases {
            let mut cfg = Config::default();
            assert_eq!(set(&mut cfg, pairs).as_ref(), Err(want), "{pairs:?}");
            assert_eq!(cfg, Config::default(), "{pairs:?} must not change anything");
        }
    }

    #[test]
    fn config_set_is_atomic() {
        let mut cfg = Config::default();
        set(&mut cfg, &[("hz", "50"), ("maxmemory", "1mb")]).unwrap();
        let before = cfg.clone();
        let r = set(
            &mut cfg,
            &[("hz", "7"), ("maxmemory", "2mb"), ("maxclients", "y")],
        );
        assert!(r.is_err());
        assert_eq!(cfg, before);
        assert_eq!((cfg.hz, cfg.maxmemory), (50, 1 << 20));
        assert_eq!(set(&mut cfg, &[]), Ok(()));
        assert_eq!(cfg, before);
    }

    #[test]
    fn config_error_display() {
        let e = file("port x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\n*** FATAL CONFIG FILE ERROR (Tessera 0.1.0) ***\n\
             Reading the configuration file, at line 1\n\
             >>> 'port x'\n\
             argument couldn't be parsed into an integer"
        );
        let _: &dyn std::error::Error = &e;
    }

    /// CONFIG SET client-output-buffer-limit: every answer checked against redis-server 7.0.15.
    #[test]
    fn client_output_buffer_limit_set_and_get() {
        let name = "client-output-buffer-limit";
        let mut c = Config::default();
        assert_eq!(
            get_one(&c, name),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        let wrong = "Wrong number of arguments in buffer limit configuration.";
        let class = "Invalid client class specified in buffer limit configuration.";
        let value = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("normal 10mb 5mb 1", Ok("normal 10485760 5242880 1")),
            ("NORMAL 1K 1g 01", Ok("normal 1000 1000000000 1")),
            ("normal 1b 2B +3", Ok("normal 1 2 3")),
            ("normal 1 1 ", Ok("normal 1 1 0")),
            ("normal 1 1 4294967297", Ok("normal 1 1 1")),
            ("normal 1 1 -4294967296", Ok("normal 1 1 0")),
            (
                "normal 99999999999999999999999 0 0",
                Ok("normal 18446744073709551615 0 0"),
            ),
            ("normal 5 5 5 normal 6 6 6", Ok("normal 6 6 6")),
            ("", Ok("normal 6 6 6")),
            ("master 0 0 0", Err(class)),
            ("foo 0 0 0", Err(class)),
            ("normal 1 2", Err(wrong)),
            ("normal  1 1 1", Err(wrong)),
            (" normal 1 1 1", Err(wrong)),
            ("normal 1 1 1 ", Err(wrong)),
            ("normal -1 0 0", Err(value)),
            ("normal +5 0 0", Err(value)),
            ("normal 0x10 0 0", Err(value)),
            ("normal 1.5 1 1", Err(value)),
            ("normal 1kbb 1 1", Err(value)),
            ("normal 1 1 1mb", Err(value)),
            ("normal 1 1 -1", Err(value)),
            ("normal 1 1 1.0", Err(value)),
            ("normal 1 1 2147483648", Err(value)),
            ("normal 1 1 9223372036854775807", Err(value)),
            ("normal 1 1 99999999999999999999", Err(value)),
            // Checked group by group: the first group is fine, the second is not.
            ("normal 1 1 1 pubsub 1 1 x", Err(value)),
            ("normal 1 1 x foo 1 1 1", Err(value)),
            ("normal 1 1 1 foo 1 1 x", Err(class)),
        ];
        for &(v, want) in cases {
            let before = get_one(&c, name);
            let r = set(&mut c, &[(name, v)]);
            match want {
                Ok(normal) => {
                    assert_eq!(r, Ok(()), "{v:?}");
                    let got = get_one(&c, name);
                    assert!(got.starts_with(&format!("{normal} slave ")), "{v:?}: {got}");
                }
                Err(why) => {
                    assert_eq!(
                        r,
                        Err(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                        )),
                        "{v:?}"
                    );
                    assert_eq!(get_one(&c, name), before, "{v:?} changed the config");
                }
            }
        }
        // Classes not named keep their limits; `replica` is `slave`.
        set(&mut c, &[(name, "replica 1 2 3 pubsub 4 5 6")]).unwrap();
        assert_eq!(get_one(&c, name), "normal 6 6 6 slave 1 2 3 pubsub 4 5 6");
        // A file may give one class per line.
        let f = file("client-output-buffer-limit pubsub 1mb 1mb 0\nclient-output-buffer-limit normal 7 8 9\n")
            .unwrap();
        assert_eq!(
            get_one(&f, name),
            "normal 7 8 9 slave 268435456 67108864 60 pubsub 1048576 1048576 0"
        );
    }
}

#[cfg(test)]
mod rename_tests {
    use super::*;

    #[test]
    fn rename_command_lines_are_kept_in_order() {
        let mut c = Config::default();
        parse_config_text(
            "port 1\nrename-command SET myset\nrename-command DEBUG \"\"\n",
            &mut c,
        )
        .unwrap();
        assert_eq!(c.rename_commands.len(), 2);
        assert_eq!(c.rename_commands[0].from, b"SET");
        assert_eq!(c.rename_commands[0].to, b"myset");
        assert_eq!(c.rename_commands[0].line_no, 2);
        assert_eq!(c.rename_commands[1].to, b"");
        let e = parse_config_text("rename-command SET\n", &mut c).unwrap_err();
        assert_eq!(e.reason(), "Bad directive or wrong number of arguments");
        // Not a directive: CONFIG GET does not know it.
        assert!(config_get(&c, &[b"rename-command".as_slice()]).is_empty());
    }
}
