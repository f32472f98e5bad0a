//! The directive table: one row per directive, in the spirit of Redis's `static_configs[]`.
//!
//! # What this module owns
//!
//! `DIRECTIVES` (name, alias, [`Runtime`] mutability and [`Kind`] with bounds, default and typed
//! accessors into [`Config`]), the row-builder macros, [`lookup`] by name or alias, and
//! [`Kind`]'s default/get/set, which every entry point (file, command line, `CONFIG GET`/`SET`,
//! `CONFIG REWRITE`, `--help`) goes through. Also the check/set/get helpers of the directives
//! whose values need more than a bound check (`save`, `client-output-buffer-limit`,
//! `latency-tracking-info-percentiles`, `replicaof`).
//!
//! # Why it is a module of its own
//!
//! The table is the single source of truth for names, bounds, defaults and formats; keeping it
//! apart from the grammar of the places that read it ([`crate::parse`], [`crate::cli`],
//! [`crate::get_set`]) means adding a directive touches only [`Config`] and this file.
//! Setters run only after parsing and the `min..=max` check, so their narrowing casts are exact.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use ds::string2ll;

use crate::parse::{memtoull, strtoll, strtoll_int, strtoll_octal};
use crate::{
    cpulist, format_percentile, AppendFsync, Config, LogLevel, MaxmemoryPolicy, ObufClass,
    ObufLimit, ProtectedAction, TlsAuthClients, MAX_DATABASES, MAX_SHARDS,
};

/// Redis's `CONFIG_BINDADDR_MAX`.
const MAX_BIND_ADDRS: usize = 16;

/// `hz` is accepted in `0..=INT_MAX` and clamped into this range, like Redis's
/// `CONFIG_MIN_HZ`/`CONFIG_MAX_HZ`.
const HZ_MIN: i64 = 1;
const HZ_MAX: i64 = 500;

const I32_MAX: i64 = i32::MAX as i64;
const I32_MIN: i64 = i32::MIN as i64;
const MIB: u64 = 1024 * 1024;

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

/// Redis's `numericParseString` and `numericBoundaryCheck` for `maxmemory-clients` (a signed
/// `MEMORY_CONFIG | PERCENT_CONFIG` from -100 to `SSIZE_MAX`): a memory value first (its
/// unsigned result reinterpreted as signed, as Redis's `long long` does), then `N%` stored as -N.
fn set_maxmemory_clients(c: &mut Config, v: &[u8]) -> Result<(), String> {
    let value = match memtoull(v) {
        Some(n) => n as i64,
        None => match v.split_last() {
            Some((b'%', digits)) if !digits.is_empty() => match string2ll(digits) {
                Some(n) if n >= 0 => -n,
                _ => return Err(MEMORY_OR_PERCENT.into()),
            },
            _ => return Err(MEMORY_OR_PERCENT.into()),
        },
    };
    if value < -100 {
        return Err("percentage argument must be less or equal to 100".into());
    }
    c.maxmemory_clients = value;
    Ok(())
}

const MEMORY_OR_PERCENT: &str = "argument must be a memory or percent value";

fn get_maxmemory_clients(c: &Config) -> Vec<u8> {
    match c.maxmemory_clients {
        n if n < 0 => format!("{}%", n.unsigned_abs()).into_bytes(),
        n => n.to_string().into_bytes(),
    }
}

/// Redis's `shutdown_on_sig_enum`, in its order (CONFIG GET lists the
/// flags so).
const SHUTDOWN_SIG: [(&str, u8); 5] = [
    ("default", 0),
    ("save", crate::SHUTDOWN_SIG_SAVE),
    ("nosave", crate::SHUTDOWN_SIG_NOSAVE),
    ("now", crate::SHUTDOWN_SIG_NOW),
    ("force", crate::SHUTDOWN_SIG_FORCE),
];

/// The flags the words name (Redis's `configEnumGetValue` of a multi-arg
/// enum): `None` for no word or an unknown one.
fn shutdown_sig_value<W: AsRef<[u8]>>(words: &[W]) -> Option<u8> {
    if words.is_empty() {
        return None;
    }
    words.iter().try_fold(0, |acc, w| {
        SHUTDOWN_SIG
            .iter()
            .find(|(n, _)| w.as_ref().eq_ignore_ascii_case(n.as_bytes()))
            .map(|&(_, v)| acc | v)
    })
}

/// Redis's `isValidShutdownOnSigFlags` after the words are known.
fn check_shutdown_sig(words: &[Vec<u8>]) -> Result<(), String> {
    let Some(v) = shutdown_sig_value(words) else {
        let names: Vec<&str> = SHUTDOWN_SIG.iter().map(|&(n, _)| n).collect();
        return Err(format!(
            "argument(s) must be one of the following: {}",
            names.join(", ")
        ));
    };
    if v & crate::SHUTDOWN_SIG_SAVE != 0 && v & crate::SHUTDOWN_SIG_NOSAVE != 0 {
        return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".into());
    }
    Ok(())
}

/// CONFIG GET's words for the flags (Redis's `configEnumGetName`).
fn shutdown_sig_names(v: u8) -> Vec<String> {
    if v == 0 {
        return vec!["default".into()];
    }
    SHUTDOWN_SIG
        .iter()
        .filter(|&&(_, f)| f != 0 && v & f == f)
        .map(|&(n, _)| n.to_string())
        .collect()
}

fn no_check(_: &[Vec<u8>]) -> Result<(), String> {
    Ok(())
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

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
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
pub(crate) enum Kind {
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

pub(crate) struct Directive {
    pub(crate) name: &'static str,
    pub(crate) alias: Option<&'static str>,
    pub(crate) runtime: Runtime,
    pub(crate) kind: Kind,
    /// Redis's `HIDDEN_CONFIG`: `CONFIG GET` lists it only when asked by its exact name, never
    /// for a pattern, and `--help` leaves it out (test hooks, not settings).
    pub(crate) hidden: bool,
}

impl Directive {
    const fn alias(self, alias: &'static str) -> Directive {
        Directive {
            alias: Some(alias),
            ..self
        }
    }

    const fn hidden(self) -> Directive {
        Directive {
            hidden: true,
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
        hidden: false,
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
pub(crate) static DIRECTIVES: &[Directive] = &[
    // name                       runtime    kind!(field: type, min, max, default)
    // CONFIG SET of these two rebinds (see commands::server's config_set).
    d("port",                     Mutable,   int!(port: u16, 0, 65535, 6379)),
    d("bind",                     Mutable,   words!(bind, MAX_BIND_ADDRS, &["*", "-::*"])),
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
    d("daemonize",                Immutable, yes_no!(daemonize, false)),
    d("databases",                Immutable, int!(databases: usize, 1, MAX_DATABASES, 16)),
    d("maxclients",               Mutable,   int!(maxclients: u64, 1, U32_MAX, 10_000)),
    d("timeout",                  Mutable,   int!(timeout_s: u64, 0, I32_MAX, 0)),
    d("tcp-keepalive",            Mutable,   int!(tcp_keepalive_s: u64, 0, I32_MAX, 300)),
    d("protected-mode",           Mutable,   yes_no!(protected_mode, true)),
    d("enable-debug-command",     Immutable, one_of!(enable_debug_command: ProtectedAction, No)),
    d("enable-module-command",    Immutable, one_of!(enable_module_command: ProtectedAction, No)),
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
    // Bytes, or a percentage of maxmemory (stored negative, as Redis does).
    d("maxmemory-clients",        Mutable,   Parsed {
        default: b"0",
        get: get_maxmemory_clients,
        set: set_maxmemory_clients,
    }),
    d("lfu-log-factor",           Mutable,   int!(lfu_log_factor: u32, 0, I32_MAX, 10)),
    d("lfu-decay-time",           Mutable,   int!(lfu_decay_time_min: u32, 0, I32_MAX, 1)),
    // Which deletions free a big value on the background thread. Redis 7.0 defaults them to
    // `no`; Tessera to `yes` (low tail latency, as Valkey 8): see engine::lazyfree.
    d("lazyfree-lazy-eviction",   Mutable,   yes_no!(lazyfree_lazy_eviction, true)),
    d("lazyfree-lazy-expire",     Mutable,   yes_no!(lazyfree_lazy_expire, true)),
    d("lazyfree-lazy-server-del", Mutable,   yes_no!(lazyfree_lazy_server_del, true)),
    d("lazyfree-lazy-user-del",   Mutable,   yes_no!(lazyfree_lazy_user_del, true)),
    d("lazyfree-lazy-user-flush", Mutable,   yes_no!(lazyfree_lazy_user_flush, true)),
    d("replica-lazy-flush",       Mutable,   yes_no!(replica_lazy_flush, true))
        .alias("slave-lazy-flush"),
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
    // What SIGINT / SIGTERM do: a shutdown with these SHUTDOWN flags.
    d("shutdown-on-sigint",       Mutable,   List {
        max_len: usize::MAX,
        default: &["default"],
        get: |c| shutdown_sig_names(c.shutdown_on_sigint),
        set: |c, v| c.shutdown_on_sigint = shutdown_sig_value(&v).unwrap_or(0),
        check: check_shutdown_sig,
    }),
    d("shutdown-on-sigterm",      Mutable,   List {
        max_len: usize::MAX,
        default: &["default"],
        get: |c| shutdown_sig_names(c.shutdown_on_sigterm),
        set: |c, v| c.shutdown_on_sigterm = shutdown_sig_value(&v).unwrap_or(0),
        check: check_shutdown_sig,
    }),
    d("key-load-delay",           Mutable,   int!(key_load_delay: i32, I32_MIN, I32_MAX, 0)).hidden(),
    d("rdbchecksum",              Immutable, yes_no!(rdbchecksum, true)),
    d("stop-writes-on-bgsave-error", Mutable, yes_no!(stop_writes_on_bgsave_error, true)),
    d("appendonly",               Mutable,   yes_no!(appendonly, false)),
    d("appendfilename",           Immutable, name!(appendfilename, b"appendonly.aof")),
    d("appenddirname",            Immutable, name!(appenddirname, b"appendonlydir")),
    d("appendfsync",              Mutable,   one_of!(appendfsync: AppendFsync, Everysec)),
    d("aof-load-truncated",       Mutable,   yes_no!(aof_load_truncated, true)),
    d("aof-use-rdb-preamble",     Mutable,   yes_no!(aof_use_rdb_preamble, true)),
    d("aof-timestamp-enabled",    Mutable,   yes_no!(aof_timestamp_enabled, false)),
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
    d("replica-ignore-disk-write-errors", Mutable, yes_no!(replica_ignore_disk_write_errors, false)),
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
pub(crate) fn lookup(name: &[u8]) -> Option<usize> {
    DIRECTIVES.iter().position(|d| {
        name.eq_ignore_ascii_case(d.name.as_bytes())
            || d.alias
                .is_some_and(|a| name.eq_ignore_ascii_case(a.as_bytes()))
    })
}

impl Kind {
    pub(crate) fn apply_default(&self, cfg: &mut Config) {
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
    pub(crate) fn get(&self, cfg: &Config) -> Vec<u8> {
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

    pub(crate) fn is_multi_arg(&self) -> bool {
        matches!(self, List { .. })
    }

    /// Parses, checks and stores `args` (Redis's `interface.set`). Single-valued kinds are
    /// given exactly one argument by the callers. `Err` is Redis's reason text.
    pub(crate) fn set(&self, cfg: &mut Config, args: &[Vec<u8>]) -> Result<(), String> {
        let Some(arg) = args.first() else {
            // Only List is called without arguments (`bind` alone on a line);
            // its check decides (`shutdown-on-sigint` alone is an error).
            if let List { set, check, .. } = *self {
                check(&[])?;
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

#[cfg(test)]
mod tests;
