//! Server commands: INFO, CONFIG, COMMAND (in `docs`), TIME, LASTSAVE,
//! DEBUG, SHUTDOWN.
//!
//! INFO and CONFIG RESETSTAT need every thread's counters (per-command
//! statistics live in each thread's `ThreadStats`, keyspace figures in each
//! shard), so they are coordinators that fan out one job per thread and sum
//! the answers on the home thread. Everything else here reads or writes
//! `ServerShared` only.
//!
//! Memory figures come from `memory::MemFigures`: `used_memory` is the
//! counting allocator's total (`engine::alloc`), `used_memory_rss` the
//! resident set size, `allocator_*` glibc's `mallinfo2` and the resident
//! anonymous memory (see `MemFigures`). CPU figures come from `getrusage`.
//!
//! Control path: allocation and locks (the config lock) are fine here.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use engine::ShardStats;
use resp::{Args, Reply};

use crate::coord::{fan_out, Coordinator};
use crate::ctx::{
    ClientState, ConnCtx, ServerShared, ThreadStats, SHUTDOWN_DEFAULT, SHUTDOWN_FORCE,
    SHUTDOWN_NOSAVE, SHUTDOWN_SAVE,
};
use crate::docs::reply_help;
use crate::error::CmdError;
use crate::table::{flags::*, registry, CommandSpec, Exec, NO_KEYS};
use crate::util::eq_ic;

/// The Redis version Tessera answers as (HELLO, INFO).
pub const REDIS_VERSION: &str = "7.0.15";
/// Tessera's own version (INFO `tessera_version`).
pub const TESSERA_VERSION: &str = env!("CARGO_PKG_VERSION");

const ADMIN_ACL: &[&str] = &["admin", "slow", "dangerous"];
const CONFIG_FLAGS: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "shutdown",
        -1,
        ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | SENTINEL | ALLOW_BUSY,
        NO_KEYS,
        Exec::Conn(shutdown),
        ADMIN_ACL,
    ),
    CommandSpec::new(
        "info",
        -1,
        LOADING | STALE | SENTINEL,
        NO_KEYS,
        Exec::Coord(info),
        &["slow", "dangerous"],
    ),
    CommandSpec::new(
        "time",
        1,
        LOADING | STALE | FAST,
        NO_KEYS,
        Exec::Conn(time),
        &["fast"],
    ),
    CommandSpec::new(
        "lastsave",
        1,
        LOADING | STALE | FAST,
        NO_KEYS,
        Exec::Conn(lastsave),
        &["admin", "fast", "dangerous"],
    ),
    CommandSpec::new(
        "debug",
        -2,
        ADMIN | NOSCRIPT | LOADING | STALE | PROTECTED,
        NO_KEYS,
        Exec::Conn(debug),
        ADMIN_ACL,
    ),
    CommandSpec::parent("config", -2, 0, &["slow"], CONFIG_SUBCOMMANDS),
    crate::docs::COMMAND_SPEC,
];

const CONFIG_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "get",
        -3,
        CONFIG_FLAGS,
        NO_KEYS,
        Exec::Conn(config_get),
        ADMIN_ACL,
    ),
    CommandSpec::new(
        "set",
        -4,
        CONFIG_FLAGS,
        NO_KEYS,
        Exec::Conn(config_set),
        ADMIN_ACL,
    ),
    CommandSpec::new(
        "resetstat",
        2,
        CONFIG_FLAGS,
        NO_KEYS,
        Exec::Coord(config_resetstat),
        ADMIN_ACL,
    ),
    CommandSpec::new(
        "rewrite",
        2,
        CONFIG_FLAGS,
        NO_KEYS,
        Exec::Conn(config_rewrite),
        ADMIN_ACL,
    ),
    CommandSpec::new(
        "help",
        2,
        LOADING | STALE,
        NO_KEYS,
        Exec::Conn(config_help),
        &["slow"],
    ),
];

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: stops the server. The
/// client gets no reply when the server exits (the connection closes), as
/// in Redis; when the shutdown is refused (the final save failed, without
/// FORCE) the runtime replies "-ERR Errors trying to SHUTDOWN. Check
/// logs." and the connection carries on. Until then it executes nothing
/// more (`shutdown_wait`). ABORT: no shutdown is ever in progress when a
/// command can run (Tessera has no replicas to wait for). NOW skips that
/// wait in Redis: nothing to do here.
fn shutdown(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (mut nosave, mut save, mut now, mut force, mut abort) = (false, false, false, false, false);
    for a in args.iter().skip(1) {
        if eq_ic(a, "nosave") {
            nosave = true;
        } else if eq_ic(a, "save") {
            save = true;
        } else if eq_ic(a, "now") {
            now = true;
        } else if eq_ic(a, "force") {
            force = true;
        } else if eq_ic(a, "abort") {
            abort = true;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if (abort && (nosave || save || now || force)) || (nosave && save) {
        return Err(CmdError::Syntax);
    }
    if abort {
        return Err(CmdError::err("No shutdown in progress."));
    }
    // A busy script: only NOSAVE may stop the server (it stops the
    // script, whose effects are not persisted).
    if nosave {
        crate::script::busy::stop_for_shutdown();
    } else {
        crate::script::busy::refuse_shutdown()?;
    }
    let mut mode = if nosave {
        SHUTDOWN_NOSAVE
    } else if save {
        SHUTDOWN_SAVE
    } else {
        SHUTDOWN_DEFAULT
    };
    if force {
        mode |= SHUTDOWN_FORCE;
    }
    c.server.shutdown_mode.store(mode, Ordering::SeqCst);
    c.server.request_shutdown();
    c.client.shutdown_wait = true;
    Ok(())
}

/// TIME: [unix seconds, microseconds] as bulk strings.
fn time(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    c.out.array(2);
    c.out.bulk_int(d.as_secs() as i64);
    c.out.bulk_int(i64::from(d.subsec_micros()));
    Ok(())
}

/// LASTSAVE: unix time of the last successful save (start time if none).
fn lastsave(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out
        .int(c.server.lastsave_s.load(Ordering::Relaxed) as i64);
    Ok(())
}

/// C's `atof`: the longest numeric prefix after leading whitespace, 0 if
/// none (DEBUG SLEEP accepts anything, as Redis's `strtod(.., NULL)`).
fn atof(arg: &[u8]) -> f64 {
    let s = String::from_utf8_lossy(arg);
    let s = s.trim_start();
    (1..=s.len())
        .rev()
        .filter(|&i| s.is_char_boundary(i))
        .find_map(|i| s[..i].parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// DEBUG SLEEP seconds | DEBUG HELP. SLEEP blocks the executing thread,
/// as it blocks Redis's only thread.
fn debug(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let sub = args.get(1);
    if eq_ic(sub, "help") && args.len() == 2 {
        reply_help(c.out, "DEBUG", DEBUG_HELP);
    } else if eq_ic(sub, "sleep") && args.len() == 3 {
        let secs = atof(args.get(2));
        if let Ok(d) = Duration::try_from_secs_f64(secs) {
            std::thread::sleep(d);
        }
        c.out.ok();
    } else {
        return Err(CmdError::err_echo(
            "unknown subcommand or wrong number of arguments for '",
            sub,
            "'. Try DEBUG HELP.",
        ));
    }
    Ok(())
}

/// CONFIG GET pattern [pattern ...]: a map name -> value.
fn config_get(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let pats: Vec<&[u8]> = args.iter().skip(2).collect();
    let pairs = {
        let cfg = c.server.config.read().unwrap_or_else(|e| e.into_inner());
        config::config_get(&cfg, &pats)
    };
    c.out.map(pairs.len());
    for (k, v) in pairs {
        c.out.bulk(k.as_bytes());
        c.out.bulk(&v);
    }
    Ok(())
}

/// CONFIG SET name value [name value ...]: all or nothing; threads pick up
/// the change through `config_gen`.
fn config_set(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if !args.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let pairs: Vec<(&[u8], &[u8])> = (2..args.len())
        .step_by(2)
        .map(|i| (args.get(i), args.get(i + 1)))
        .collect();
    let (appendonly, saved) = {
        let mut cfg = c.server.config.write().unwrap_or_else(|e| e.into_inner());
        let saved = cfg.clone();
        config::config_set(&mut cfg, &pairs).map_err(CmdError::Raw)?;
        // Redis's updatePort / applyTlsCfg / applyTLSPort: a changed port
        // or tls-port rebinds, a changed tls-* setting rebuilds the TLS
        // context (when TLS is in use); one that fails restores everything.
        let listen_changed = cfg.port != saved.port
            || cfg.bind != saved.bind
            || cfg.tls_port != saved.tls_port
            || (cfg.tls_context_differs(&saved) && cfg.tls_wanted());
        if let Some(apply) = c.server.listen_apply.get().filter(|_| listen_changed) {
            if let Err(why) = apply(&saved, &cfg) {
                *cfg = saved;
                let name = pairs
                    .iter()
                    .map(|(n, _)| String::from_utf8_lossy(n).to_ascii_lowercase())
                    .find(|n| n == "port" || n == "bind" || n.starts_with("tls-"))
                    .unwrap_or_default();
                return Err(CmdError::Raw(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                )));
            }
        }
        crate::script::busy::set_threshold_ms(cfg.busy_reply_threshold_ms);
        crate::persist::set_key_load_delay(cfg.key_load_delay);
        // Redis's updateRequirePass: the default user's only password.
        if saved.requirepass != cfg.requirepass {
            c.server.acl.set_requirepass(cfg.requirepass.as_deref());
        }
        c.server.ops.configure(&cfg);
        // Redis's updateGoodSlaves: the verdict at once, so that a write
        // right after CONFIG SET min-replicas-* sees it.
        if (saved.min_replicas_to_write, saved.min_replicas_max_lag_s)
            != (cfg.min_replicas_to_write, cfg.min_replicas_max_lag_s)
        {
            let refuse = c
                .server
                .repl
                .lock()
                .master
                .too_few_good_replicas(&cfg, engine::now_ms());
            c.server.ops.set_refuse_writes(refuse);
        }
        (
            (saved.appendonly != cfg.appendonly).then_some(cfg.appendonly),
            saved,
        )
    };
    match (appendonly, c.server.aof.get()) {
        (Some(true), Some(aof)) => {
            // Redis's startAppendOnly: the AOF's files are created now (a
            // failure fails CONFIG SET and restores the setting), and a
            // rewrite writes the base of the current data.
            if !aof.enabled() {
                if let Err(e) = aof.enable() {
                    crate::persist::log_warning(&e);
                    crate::persist::log_warning(
                        "Redis needs to enable the AOF but can't trigger a background AOF \
                         rewrite operation. Check the above logs for more info about the error.",
                    );
                    crate::persist::log_warning(
                        "Failed applying new configuration. Possibly related to new appendonly \
                         setting. Restoring previous settings.",
                    );
                    c.server.ops.configure(&saved);
                    *c.server.config.write().unwrap_or_else(|e| e.into_inner()) = saved;
                    c.server.persist.rewrite_start_failed();
                    return Err(CmdError::err(
                        "CONFIG SET failed (possibly related to argument 'appendonly') - Unable \
                         to turn on AOF. Check server logs.",
                    ));
                }
            }
            c.server.persist.request_aof_on();
        }
        (Some(false), _) => c.server.persist.request_aof_off(),
        _ => {}
    }
    c.server.config_gen.fetch_add(1, Ordering::SeqCst);
    if let Some(w) = c.server.wake_all.get() {
        w();
    }
    c.out.ok();
    Ok(())
}

/// CONFIG REWRITE: the config file rewritten with the running
/// configuration (`config::rewrite`), with ACL's users as `user` lines
/// unless they live in an `aclfile`.
fn config_rewrite(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let cfg = c.server.config();
    let users: Vec<Vec<u8>> = if cfg.aclfile.is_some() {
        Vec::new()
    } else {
        c.server
            .acl
            .all()
            .iter()
            .map(|u| {
                let mut line = b"user ".to_vec();
                line.extend_from_slice(&u.name);
                line.push(b' ');
                line.extend_from_slice(&u.rules().describe());
                line
            })
            .collect()
    };
    match config::rewrite::rewrite(&cfg, &users) {
        Ok(()) => {
            crate::persist::log(false, "CONFIG REWRITE executed with success.");
            c.out.ok();
            Ok(())
        }
        Err(e) => {
            crate::persist::log(true, &format!("CONFIG REWRITE failed: {e}"));
            Err(CmdError::Raw(e))
        }
    }
}

/// CONFIG RESETSTAT: zeroes every thread's command/error statistics and
/// every shard's keyspace statistics, and the server-wide counters.
fn config_resetstat(
    c: &mut ConnCtx<'_>,
    _args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    c.server.total_connections.store(0, Ordering::Relaxed);
    c.server.rejected_connections.store(0, Ordering::Relaxed);
    c.server.client_mem.evicted.store(0, Ordering::Relaxed);
    engine::lazyfree::reset_stats();
    Ok(fan_out(
        c.nshards(),
        |env| {
            *env.stats = ThreadStats::default();
            env.shard.stats = ShardStats::default();
        },
        |_: Vec<()>, out, _| {
            out.ok();
            Ok(())
        },
    ))
}

fn config_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    reply_help(
        c.out,
        "CONFIG",
        &[
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
        ],
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// INFO
// ---------------------------------------------------------------------------

/// INFO's sections in output order; `true` when in "default".
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("modules", true),
    ("commandstats", false),
    ("errorstats", true),
    ("latencystats", false),
    ("cluster", true),
    ("keyspace", true),
];

/// What one thread contributes to INFO.
struct ShardInfo {
    stats: ShardStats,
    /// Per database: (keys, keys with a TTL, mean TTL in ms).
    dbs: Vec<(usize, usize, u64)>,
    /// Bytes of the key tables and TTL sets themselves.
    table_overhead: u64,
    thread: Option<ThreadStats>,
    /// Heap bytes of this thread's client connections (CLIENT LIST's
    /// `tot-mem` summed).
    clients_mem: u64,
    /// This thread's clients' largest (input, output) buffers lately.
    recent_buffers: (usize, usize),
    /// Tracked keys and (key, client) items of client-side caching.
    tracked: (usize, usize),
}

/// INFO [section ...]: Redis's sections and field names (verbatim string in
/// RESP3, bulk string in RESP2). Unknown sections are ignored.
fn info(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let want = wanted(args);
    let snap = Snapshot::take(c.server);
    Ok(fan_out(
        c.nshards(),
        move |env| ShardInfo {
            clients_mem: {
                let mut sum = 0u64;
                env.clients.for_each(&mut |_, io| sum += io.tot_mem as u64);
                sum
            },
            recent_buffers: env.clients.recent_max_buffers(),
            thread: Some(env.stats.clone()),
            ..ShardInfo::of(env.shard)
        },
        move |parts: Vec<ShardInfo>, out: &mut Reply, _: &mut ClientState| {
            let text = render(&want, &snap, &parts);
            out.verbatim("txt", text.as_bytes());
            Ok(())
        },
    ))
}

/// INFO's arguments: which sections to render.
fn wanted(args: Args<'_>) -> [bool; SECTIONS.len()] {
    let mut want = [false; SECTIONS.len()];
    if args.len() == 1 {
        for (w, (_, d)) in want.iter_mut().zip(SECTIONS) {
            *w = *d;
        }
    }
    for a in args.iter().skip(1) {
        let a = String::from_utf8_lossy(a).to_ascii_lowercase();
        for (w, (name, d)) in want.iter_mut().zip(SECTIONS) {
            match a.as_str() {
                "all" | "everything" => *w = true,
                "default" => *w |= *d,
                s if s == *name => *w = true,
                _ => {}
            }
        }
    }
    want
}

impl ShardInfo {
    /// What `shard` holds, with nothing of its thread.
    fn of(shard: &engine::Shard) -> Self {
        ShardInfo {
            stats: shard.stats,
            dbs: shard
                .dbs
                .iter()
                .map(|d| {
                    let (e, ttl) = d.expires_info(shard.now_ms);
                    (d.len(), e, ttl)
                })
                .collect(),
            table_overhead: shard
                .dbs
                .iter()
                .map(|d| {
                    let (m, e) = d.overhead_bytes();
                    (m + e) as u64
                })
                .sum(),
            tracked: (shard.tracked.keys.len(), shard.tracked.items),
            thread: None,
            clients_mem: 0,
            recent_buffers: (0, 0),
        }
    }
}

/// Calls its argument with each shard a script's INFO reports.
pub(crate) type Visit<'a> = dyn FnMut(&mut dyn FnMut(&engine::Shard)) + 'a;

/// INFO called from a script (`redis.call('info', ...)`), which runs
/// inside a shard handler: the server-wide figures as a client's INFO,
/// and of the per-shard and per-thread ones those of the shards `visit`
/// reaches (every shard when the script holds them all, run in place;
/// else its own, or none on gathered copies) and `stats` (what its thread
/// counts). Other shards' figures cannot be read without holding them
/// (their threads own them and run on meanwhile): then the keyspace and
/// per-thread sums cover the shards visited only. `None` when the server
/// is gone (a test's bare shard).
pub(crate) fn info_from_script(
    ops: &crate::ops::Ops,
    visit: &mut Visit<'_>,
    stats: &ThreadStats,
    args: Args<'_>,
    out: &mut Reply,
) -> Option<()> {
    let server = ops.server.get()?.upgrade()?;
    let snap = Snapshot::take(&server);
    let mut parts: Vec<ShardInfo> = Vec::new();
    visit(&mut |sh| parts.push(ShardInfo::of(sh)));
    match parts.first_mut() {
        Some(p) => p.thread = Some(stats.clone()),
        None => parts.push(ShardInfo {
            stats: ShardStats::default(),
            dbs: Vec::new(),
            table_overhead: 0,
            tracked: (0, 0),
            thread: Some(stats.clone()),
            clients_mem: 0,
            recent_buffers: (0, 0),
        }),
    }
    let text = render(&wanted(args), &snap, &parts);
    out.verbatim("txt", text.as_bytes());
    Some(())
}

/// Server-wide figures read on the home thread when INFO starts.
struct Snapshot {
    config: config::Config,
    nshards: usize,
    shard_threads_active: usize,
    uptime_s: u64,
    run_id: String,
    executable: String,
    tcp_port: u64,
    connected_clients: usize,
    total_connections: u64,
    rejected_connections: u64,
    evicted_clients: u64,
    lastsave_s: u64,
    persist: crate::persist::PersistInfo,
    /// When `appendonly` is on.
    aof: Option<AofInfo>,
    ops_per_sec: u64,
    input_kbps: f64,
    output_kbps: f64,
    mem: crate::memory::MemFigures,
    /// Channels, patterns and shard channels with subscribers.
    pubsub: (usize, usize, usize),
    /// Clients with tracking on, BCAST prefixes.
    tracking: (usize, usize),
    /// INFO replication's lines after `role`, and INFO stats'
    /// `sync_full`, `sync_partial_ok`, `sync_partial_err`.
    repl_lines: String,
    sync_stats: [u64; 3],
    repl_output_bytes: u64,
    /// The replication backlog's bytes (INFO memory).
    repl_backlog_bytes: u64,
    /// A replica's lines between `role` and `connected_slaves` (see
    /// `replica::info_fields`); `None` on a master.
    replica_info: Option<String>,
}

struct AofInfo {
    base_size: u64,
    size: u64,
    write_ok: bool,
}

impl Snapshot {
    fn take(s: &ServerShared) -> Self {
        Snapshot {
            config: s.config(),
            nshards: s.nshards,
            shard_threads_active: s.shard_threads_active.load(Ordering::Relaxed),
            pubsub: s.pubsub.sizes(),
            tracking: s.tracking.counts(),
            uptime_s: s.start.elapsed().as_secs(),
            run_id: s.run_id.clone(),
            repl_lines: {
                let r = s.repl.lock();
                let mut o = String::new();
                crate::repl::info_master(&r, engine::now_ms(), &mut o);
                crate::repl::info_ids(&r, s.config().repl_backlog_size, &mut o);
                o
            },
            repl_output_bytes: s.repl.net_output_bytes.load(Ordering::Relaxed),
            repl_backlog_bytes: {
                // A block: the guard must go before the next field locks.
                let r = s.repl.lock();
                r.master.backlog.as_ref().map_or(0, |b| b.size() as u64)
            },
            sync_stats: {
                let r = s.repl.lock();
                [
                    r.master.sync_full,
                    r.master.sync_partial_ok,
                    r.master.sync_partial_err,
                ]
            },
            replica_info: crate::replica::info_fields(s),
            executable: s.executable.clone(),
            tcp_port: s.tcp_port.load(Ordering::Relaxed),
            connected_clients: s.connected_clients.load(Ordering::Relaxed),
            total_connections: s.total_connections.load(Ordering::Relaxed),
            rejected_connections: s.rejected_connections.load(Ordering::Relaxed),
            evicted_clients: s.client_mem.evicted.load(Ordering::Relaxed),
            lastsave_s: s.lastsave_s.load(Ordering::Relaxed),
            persist: s.persist.info(),
            aof: s.aof.get().filter(|a| a.enabled()).map(|a| {
                let (base_size, size) = a.sizes();
                AofInfo {
                    base_size,
                    size,
                    write_ok: a.write_ok(),
                }
            }),
            ops_per_sec: s.ops_per_sec.load(Ordering::Relaxed),
            input_kbps: f64::from_bits(s.input_kbps_bits.load(Ordering::Relaxed)),
            output_kbps: f64::from_bits(s.output_kbps_bits.load(Ordering::Relaxed)),
            mem: crate::memory::MemFigures::read(s),
        }
    }
}

/// Redis's `bytesToHuman`.
fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    let mut d = n as f64;
    if d < 1024.0 {
        return format!("{n}B");
    }
    for u in UNITS {
        d /= 1024.0;
        if d < 1024.0 || u == "P" {
            return format!("{d:.2}{u}");
        }
    }
    unreachable!("the loop returns at P")
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn total_system_memory() -> u64 {
    read_trim("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// (system, user) CPU seconds of `who` (`RUSAGE_SELF`, `_CHILDREN`,
/// `_THREAD`).
fn rusage(who: libc::c_int) -> (f64, f64) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes into the struct we own.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_stime), t(ru.ru_utime))
}

/// Writes `key:value\r\n`.
fn kv(o: &mut String, k: &str, v: impl std::fmt::Display) {
    let _ = write!(o, "{k}:{v}\r\n");
}

fn zeros(o: &mut String, keys: &[&str]) {
    for k in keys {
        kv(o, k, 0);
    }
}

fn render(want: &[bool], s: &Snapshot, parts: &[ShardInfo]) -> String {
    let mut sections: Vec<String> = Vec::new();
    for (i, (name, _)) in SECTIONS.iter().enumerate() {
        if want[i] {
            let mut o = String::new();
            section(&mut o, name, s, parts);
            sections.push(o);
        }
    }
    sections.join("\r\n")
}

fn section(o: &mut String, name: &str, s: &Snapshot, parts: &[ShardInfo]) {
    let threads: Vec<&ThreadStats> = parts.iter().filter_map(|p| p.thread.as_ref()).collect();
    let sum = |f: fn(&ThreadStats) -> u64| threads.iter().map(|t| f(t)).sum::<u64>();
    let shard_sum = |f: fn(&ShardStats) -> u64| parts.iter().map(|p| f(&p.stats)).sum::<u64>();
    match name {
        "server" => {
            o.push_str("# Server\r\n");
            kv(o, "redis_version", REDIS_VERSION);
            kv(o, "redis_git_sha1", "00000000");
            kv(o, "redis_git_dirty", 0);
            kv(o, "redis_build_id", "0");
            kv(o, "redis_mode", "standalone");
            kv(o, "tessera_version", TESSERA_VERSION);
            kv(o, "tessera_shards", s.nshards);
            let os = format!(
                "{} {} {}",
                read_trim("/proc/sys/kernel/ostype"),
                read_trim("/proc/sys/kernel/osrelease"),
                std::env::consts::ARCH
            );
            kv(o, "os", os);
            kv(o, "arch_bits", usize::BITS);
            kv(o, "monotonic_clock", "POSIX clock_gettime");
            kv(o, "multiplexing_api", "epoll");
            kv(o, "atomicvar_api", "c11-builtin");
            kv(o, "gcc_version", "0.0.0");
            kv(o, "process_id", std::process::id());
            kv(o, "process_supervised", "no");
            kv(o, "run_id", &s.run_id);
            kv(o, "tcp_port", s.tcp_port);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            kv(o, "server_time_usec", now.as_micros());
            kv(o, "uptime_in_seconds", s.uptime_s);
            kv(o, "uptime_in_days", s.uptime_s / 86400);
            kv(o, "hz", s.config.hz);
            kv(o, "configured_hz", s.config.hz);
            // Redis's LRU clock: seconds, 24 bits.
            kv(o, "lru_clock", now.as_secs() & ((1 << 24) - 1));
            kv(o, "executable", &s.executable);
            let file = s.config.config_file.as_ref();
            kv(
                o,
                "config_file",
                file.map(|p| p.display().to_string()).unwrap_or_default(),
            );
            kv(o, "io_threads_active", 0);
            kv(o, "shards", s.nshards);
            kv(o, "shard_threads_active", s.shard_threads_active);
        }
        "clients" => {
            o.push_str("# Clients\r\n");
            kv(o, "connected_clients", s.connected_clients);
            kv(o, "cluster_connections", 0);
            kv(o, "maxclients", s.config.maxclients);
            let recent = |f: fn(&(usize, usize)) -> usize| {
                parts
                    .iter()
                    .map(|p| f(&p.recent_buffers))
                    .max()
                    .unwrap_or(0)
            };
            kv(o, "client_recent_max_input_buffer", recent(|r| r.0));
            kv(o, "client_recent_max_output_buffer", recent(|r| r.1));
            kv(
                o,
                "blocked_clients",
                crate::ctx::BLOCKED_CLIENTS.load(Ordering::Relaxed),
            );
            kv(o, "tracking_clients", s.tracking.0);
            zeros(o, &["clients_in_timeout_table"]);
        }
        "memory" => {
            let f = &s.mem;
            let total = total_system_memory();
            let tables: u64 = parts.iter().map(|p| p.table_overhead).sum();
            let clients: u64 = parts.iter().map(|p| p.clients_mem).sum();
            let overhead = (f.startup + tables + clients).min(f.used);
            let dataset = f.used - overhead;
            let net = f.used.saturating_sub(f.startup).max(1);
            o.push_str("# Memory\r\n");
            kv(o, "used_memory", f.used);
            kv(o, "used_memory_human", human(f.used));
            kv(o, "used_memory_rss", f.rss);
            kv(o, "used_memory_rss_human", human(f.rss));
            kv(o, "used_memory_peak", f.peak);
            kv(o, "used_memory_peak_human", human(f.peak));
            let perc = f.used as f64 * 100.0 / f.peak.max(1) as f64;
            kv(o, "used_memory_peak_perc", format!("{perc:.2}%"));
            kv(o, "used_memory_overhead", overhead);
            kv(o, "used_memory_startup", f.startup);
            kv(o, "used_memory_dataset", dataset);
            let dperc = dataset as f64 * 100.0 / net as f64;
            kv(o, "used_memory_dataset_perc", format!("{dperc:.2}%"));
            kv(o, "allocator_allocated", f.allocator_allocated);
            kv(o, "allocator_active", f.allocator_active);
            kv(o, "allocator_resident", f.allocator_resident);
            kv(o, "total_system_memory", total);
            kv(o, "total_system_memory_human", human(total));
            use crate::script::vm::VmKind;
            let lua = crate::script::cache::vm_bytes(VmKind::Eval);
            let lua_functions = crate::script::cache::vm_bytes(VmKind::Functions);
            let scripts = crate::script::cache::cache();
            let bodies = scripts.body_bytes();
            kv(o, "used_memory_lua", lua);
            kv(o, "used_memory_vm_eval", lua);
            kv(o, "used_memory_lua_human", human(lua));
            kv(o, "used_memory_scripts_eval", bodies);
            kv(o, "number_of_cached_scripts", scripts.len());
            let (nfuncs, nlibs, lib_bytes) = {
                let reg = crate::script::library::registry().read();
                let bytes: usize = reg.libs.values().map(|l| l.code.len()).sum();
                (reg.function_count(), reg.libs.len(), bytes as u64)
            };
            kv(o, "number_of_functions", nfuncs);
            kv(o, "number_of_libraries", nlibs);
            kv(o, "used_memory_vm_functions", lua_functions);
            kv(o, "used_memory_vm_total", lua + lua_functions);
            kv(o, "used_memory_vm_total_human", human(lua + lua_functions));
            kv(o, "used_memory_functions", lib_bytes);
            kv(o, "used_memory_scripts", bodies + lib_bytes);
            kv(o, "used_memory_scripts_human", human(bodies + lib_bytes));
            kv(o, "maxmemory", s.config.maxmemory);
            kv(o, "maxmemory_human", human(s.config.maxmemory));
            kv(o, "maxmemory_policy", s.config.maxmemory_policy.name());
            let r2 = |r: f64| format!("{r:.2}");
            kv(o, "allocator_frag_ratio", r2(f.alloc_frag()));
            kv(o, "allocator_frag_bytes", f.alloc_frag_bytes());
            kv(o, "allocator_rss_ratio", r2(f.alloc_rss()));
            kv(o, "allocator_rss_bytes", f.alloc_rss_bytes());
            kv(o, "rss_overhead_ratio", r2(f.rss_overhead()));
            kv(o, "rss_overhead_bytes", f.rss_overhead_bytes());
            kv(o, "mem_fragmentation_ratio", r2(f.frag()));
            kv(o, "mem_fragmentation_bytes", f.frag_bytes());
            zeros(o, &["mem_not_counted_for_evict"]);
            kv(o, "mem_replication_backlog", s.repl_backlog_bytes);
            zeros(o, &["mem_total_replication_buffers", "mem_clients_slaves"]);
            kv(o, "mem_clients_normal", clients);
            zeros(o, &["mem_cluster_links", "mem_aof_buffer"]);
            kv(o, "mem_allocator", "libc");
            zeros(o, &["active_defrag_running"]);
            kv(o, "lazyfree_pending_objects", engine::lazyfree::pending());
            kv(
                o,
                "lazyfreed_objects",
                engine::lazyfree::freed_in_background(),
            );
        }
        "persistence" => {
            o.push_str("# Persistence\r\n");
            let p = &s.persist;
            kv(o, "loading", u8::from(p.loading));
            zeros(
                o,
                &[
                    "async_loading",
                    "current_cow_peak",
                    "current_cow_size",
                    "current_cow_size_age",
                ],
            );
            kv(o, "current_fork_perc", "0.00");
            zeros(
                o,
                &["current_save_keys_processed", "current_save_keys_total"],
            );
            kv(o, "rdb_changes_since_last_save", p.changes);
            kv(o, "rdb_bgsave_in_progress", u8::from(p.in_progress));
            kv(o, "rdb_last_save_time", s.lastsave_s);
            kv(
                o,
                "rdb_last_bgsave_status",
                if p.last_ok { "ok" } else { "err" },
            );
            let secs = |v: Option<u64>| v.map_or(-1, |v| v as i64);
            kv(o, "rdb_last_bgsave_time_sec", secs(p.last_bgsave_time_s));
            kv(o, "rdb_current_bgsave_time_sec", secs(p.current_time_s));
            kv(o, "rdb_saves", p.saves);
            kv(o, "rdb_last_cow_size", 0);
            kv(o, "rdb_last_load_keys_expired", p.expired_on_load);
            kv(o, "rdb_last_load_keys_loaded", p.loaded_keys);
            let ok = |b: bool| if b { "ok" } else { "err" };
            kv(o, "aof_enabled", u8::from(s.aof.is_some()));
            kv(
                o,
                "aof_rewrite_in_progress",
                u8::from(p.rewrite_in_progress),
            );
            kv(o, "aof_rewrite_scheduled", u8::from(p.rewrite_scheduled));
            kv(o, "aof_last_rewrite_time_sec", secs(p.last_rewrite_time_s));
            kv(
                o,
                "aof_current_rewrite_time_sec",
                secs(p.current_rewrite_time_s),
            );
            kv(o, "aof_last_bgrewrite_status", ok(p.rewrite_ok));
            kv(o, "aof_rewrites", p.rewrites);
            kv(o, "aof_rewrites_consecutive_failures", p.rewrite_failures);
            kv(
                o,
                "aof_last_write_status",
                ok(s.aof.as_ref().is_none_or(|a| a.write_ok)),
            );
            zeros(
                o,
                &[
                    "aof_last_cow_size",
                    "module_fork_in_progress",
                    "module_fork_last_cow_size",
                ],
            );
            if let Some(a) = &s.aof {
                kv(o, "aof_current_size", a.size);
                kv(o, "aof_base_size", a.base_size);
                zeros(
                    o,
                    &[
                        "aof_pending_rewrite",
                        "aof_buffer_length",
                        "aof_pending_bio_fsync",
                        "aof_delayed_fsync",
                    ],
                );
            }
        }
        "stats" => {
            o.push_str("# Stats\r\n");
            kv(o, "total_connections_received", s.total_connections);
            kv(o, "total_commands_processed", sum(|t| t.total_commands));
            kv(o, "instantaneous_ops_per_sec", s.ops_per_sec);
            kv(o, "total_net_input_bytes", sum(|t| t.net_input_bytes));
            kv(o, "total_net_output_bytes", sum(|t| t.net_output_bytes));
            kv(o, "total_net_repl_input_bytes", 0);
            kv(o, "total_net_repl_output_bytes", s.repl_output_bytes);
            kv(
                o,
                "instantaneous_input_kbps",
                format!("{:.2}", s.input_kbps),
            );
            kv(
                o,
                "instantaneous_output_kbps",
                format!("{:.2}", s.output_kbps),
            );
            kv(o, "instantaneous_input_repl_kbps", "0.00");
            kv(o, "instantaneous_output_repl_kbps", "0.00");
            kv(o, "rejected_connections", s.rejected_connections);
            kv(o, "sync_full", s.sync_stats[0]);
            kv(o, "sync_partial_ok", s.sync_stats[1]);
            kv(o, "sync_partial_err", s.sync_stats[2]);
            kv(o, "expired_keys", shard_sum(|x| x.expired_keys));
            let stale = parts
                .iter()
                .map(|p| p.stats.expired_stale_perc)
                .sum::<f64>()
                / parts.len().max(1) as f64;
            kv(o, "expired_stale_perc", format!("{stale:.2}"));
            kv(
                o,
                "expired_time_cap_reached_count",
                shard_sum(|x| x.expired_time_cap_reached_count),
            );
            zeros(o, &["expire_cycle_cpu_milliseconds"]);
            kv(o, "evicted_keys", shard_sum(|x| x.evicted_keys));
            kv(o, "evicted_clients", s.evicted_clients);
            zeros(
                o,
                &[
                    "total_eviction_exceeded_time",
                    "current_eviction_exceeded_time",
                ],
            );
            kv(o, "keyspace_hits", shard_sum(|x| x.keyspace_hits));
            kv(o, "keyspace_misses", shard_sum(|x| x.keyspace_misses));
            let (chans, pats, shard_chans) = s.pubsub;
            kv(o, "pubsub_channels", chans);
            kv(o, "pubsub_patterns", pats);
            kv(o, "pubsubshard_channels", shard_chans);
            zeros(o, &["latest_fork_usec", "total_forks"]);
            kv(
                o,
                "migrate_cached_sockets",
                crate::migrate::cached_sockets(),
            );
            zeros(
                o,
                &[
                    "slave_expires_tracked_keys",
                    "active_defrag_hits",
                    "active_defrag_misses",
                    "active_defrag_key_hits",
                    "active_defrag_key_misses",
                    "total_active_defrag_time",
                    "current_active_defrag_time",
                ],
            );
            let tracked = parts
                .iter()
                .fold((0, 0), |a, p| (a.0 + p.tracked.0, a.1 + p.tracked.1));
            kv(o, "tracking_total_keys", tracked.0);
            kv(o, "tracking_total_items", tracked.1);
            kv(o, "tracking_total_prefixes", s.tracking.1);
            kv(
                o,
                "unexpected_error_replies",
                sum(|t| t.unexpected_error_replies),
            );
            kv(o, "total_error_replies", sum(|t| t.total_error_replies));
            zeros(
                o,
                &[
                    "dump_payload_sanitizations",
                    "total_reads_processed",
                    "total_writes_processed",
                    "io_threaded_reads_processed",
                    "io_threaded_writes_processed",
                    "reply_buffer_shrinks",
                    "reply_buffer_expands",
                ],
            );
        }
        "replication" => {
            o.push_str("# Replication\r\n");
            match &s.replica_info {
                Some(lines) => {
                    kv(o, "role", "slave");
                    o.push_str(lines);
                }
                None => kv(o, "role", "master"),
            }
            o.push_str(&s.repl_lines);
        }
        "cpu" => {
            o.push_str("# CPU\r\n");
            for (suffix, who) in [
                ("", libc::RUSAGE_SELF),
                ("_children", libc::RUSAGE_CHILDREN),
            ] {
                let (sys, user) = rusage(who);
                kv(o, &format!("used_cpu_sys{suffix}"), format!("{sys:.6}"));
                kv(o, &format!("used_cpu_user{suffix}"), format!("{user:.6}"));
            }
            // The home thread of the INFO caller stands in for Redis's main
            // thread.
            let (sys, user) = rusage(libc::RUSAGE_THREAD);
            kv(o, "used_cpu_sys_main_thread", format!("{sys:.6}"));
            kv(o, "used_cpu_user_main_thread", format!("{user:.6}"));
        }
        "modules" => o.push_str("# Modules\r\n"),
        "commandstats" => {
            o.push_str("# Commandstats\r\n");
            for (id, (name, _, _)) in registry().specs.iter().enumerate() {
                let (mut calls, mut usec, mut rej, mut failed) = (0u64, 0u64, 0u64, 0u64);
                for c in threads.iter().filter_map(|t| t.cmd.get(id)) {
                    calls += c.calls;
                    usec += c.usec;
                    rej += c.rejected_calls;
                    failed += c.failed_calls;
                }
                if calls == 0 && rej == 0 && failed == 0 {
                    continue;
                }
                let per = if calls == 0 {
                    0.0
                } else {
                    usec as f64 / calls as f64
                };
                let _ = write!(
                    o,
                    "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per:.2},\
                     rejected_calls={rej},failed_calls={failed}\r\n"
                );
            }
        }
        "errorstats" => {
            o.push_str("# Errorstats\r\n");
            let mut errs: Vec<(&str, u64)> = Vec::new();
            for (code, n) in threads.iter().flat_map(|t| t.errors.iter()) {
                match errs.iter_mut().find(|(c, _)| c == code) {
                    Some((_, m)) => *m += n,
                    None => errs.push((code, *n)),
                }
            }
            // Redis keeps them in a radix tree: byte order.
            errs.sort();
            for (code, n) in errs {
                let _ = write!(o, "errorstat_{code}:count={n}\r\n");
            }
        }
        "latencystats" => {
            o.push_str("# Latencystats\r\n");
            if s.config.latency_tracking {
                let hists = threads.iter().map(|t| t.histograms(None)).collect();
                crate::ops::latency::info_lines(
                    o,
                    hists,
                    &s.config.latency_tracking_info_percentiles,
                );
            }
        }
        "cluster" => {
            o.push_str("# Cluster\r\n");
            kv(o, "cluster_enabled", 0);
        }
        "keyspace" => {
            o.push_str("# Keyspace\r\n");
            let ndb = parts.iter().map(|p| p.dbs.len()).max().unwrap_or(0);
            for db in 0..ndb {
                let (mut keys, mut expires, mut ttl_weighted) = (0usize, 0usize, 0u128);
                for &(k, e, t) in parts.iter().filter_map(|p| p.dbs.get(db)) {
                    keys += k;
                    expires += e;
                    ttl_weighted += e as u128 * u128::from(t);
                }
                if keys == 0 {
                    continue;
                }
                // Each shard's mean weighted by its number of volatile keys.
                let avg = ttl_weighted.checked_div(expires as u128).unwrap_or(0);
                let _ = write!(o, "db{db}:keys={keys},expires={expires},avg_ttl={avg}\r\n");
            }
        }
        _ => {}
    }
}

const DEBUG_HELP: &[&str] = &[
    "AOF-FLUSH-SLEEP <microsec>",
    "    Server will sleep before flushing the AOF, this is used for testing.",
    "ASSERT",
    "    Crash by assertion failed.",
    "CHANGE-REPL-ID",
    "    Change the replication IDs of the instance.",
    "    Dangerous: should be used only for testing the replication subsystem.",
    "CONFIG-REWRITE-FORCE-ALL",
    "    Like CONFIG REWRITE but writes all configuration options, including",
    "    keywords not listed in original configuration file or default values.",
    "CRASH-AND-RECOVER [<milliseconds>]",
    "    Hard crash and restart after a <milliseconds> delay (default 0).",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "ERROR <string>",
    "    Return a Redis protocol error with <string> as message. Useful for clients",
    "    unit tests to simulate Redis errors.",
    "LEAK <string>",
    "    Create a memory leak of the input string.",
    "LOG <message>",
    "    Write <message> to the server log.",
    "HTSTATS <dbid>",
    "    Return hash table statistics of the specified Redis database.",
    "HTSTATS-KEY <key>",
    "    Like HTSTATS but for the hash table stored at <key>'s value.",
    "LOADAOF",
    "    Flush the AOF buffers on disk and reload the AOF in memory.",
    "REPLICATE <string>",
    "    Replicates the provided string to replicas, allowing data divergence.",
    "MALLCTL <key> [<val>]",
    "    Get or set a malloc tuning integer.",
    "MALLCTL-STR <key> [<val>]",
    "    Get or set a malloc tuning string.",
    "OBJECT <key>",
    "    Show low level info about `key` and associated value.",
    "DROP-CLUSTER-PACKET-FILTER <packet-type>",
    "    Drop all packets that match the filtered type. Set to -1 allow all packets.",
    "OOM",
    "    Crash the server simulating an out-of-memory error.",
    "PANIC",
    "    Crash the server simulating a panic.",
    "POPULATE <count> [<prefix>] [<size>]",
    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
    "    it is used instead of the 'key' prefix. These are not propagated to",
    "    replicas. Cluster slots are not respected so keys not belonging to the",
    "    current node can be created in cluster mode.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "RELOAD [option ...]",
    "    Save the RDB on disk and reload it back to memory. Valid <option> values:",
    "    * MERGE: conflicting keys will be loaded from RDB.",
    "    * NOFLUSH: the existing database will not be removed before load, but",
    "      conflicting keys will generate an exception and kill the server.",
    "    * NOSAVE: the database will be loaded from an existing RDB file.",
    "    Examples:",
    "    * DEBUG RELOAD: verify that the server is able to persist, flush and reload",
    "      the database.",
    "    * DEBUG RELOAD NOSAVE: replace the current database with the contents of an",
    "      existing RDB file.",
    "    * DEBUG RELOAD NOSAVE NOFLUSH MERGE: add the contents of an existing RDB",
    "      file to the database.",
    "RESTART [<milliseconds>]",
    "    Graceful restart: save config, db, restart after a <milliseconds> delay (default 0).",
    "SDSLEN <key>",
    "    Show low level SDS string info representing `key` and value.",
    "SEGFAULT",
    "    Crash the server with sigsegv.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "QUICKLIST-PACKED-THRESHOLD <size>",
    "    Sets the threshold for elements to be inserted as plain vs packed nodes",
    "    Default value is 1GB, allows values up to 4GB. Setting to 0 restores to default.",
    "SET-SKIP-CHECKSUM-VALIDATION <0|1>",
    "    Enables or disables checksum checks for RDB files and RESTORE's payload.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "STRINGMATCH-TEST",
    "    Run a fuzz tester against the stringmatchlen() function.",
    "STRUCTSIZE",
    "    Return the size of different Redis core C structures.",
    "LISTPACK <key>",
    "    Show low level info about the listpack encoding of <key>.",
    "QUICKLIST <key> [<0|1>]",
    "    Show low level info about the quicklist encoding of <key>.",
    "    The optional argument (0 by default) sets the level of detail",
    "CLIENT-EVICTION",
    "    Show low level client eviction pools info (maxmemory-clients).",
    "PAUSE-CRON <0|1>",
    "    Stop periodic cron job processing.",
    "REPLYBUFFER PEAK-RESET-TIME <NEVER||RESET|time>",
    "    Sets the time (in milliseconds) to wait between client reply buffer peak resets.",
    "    In case NEVER is provided the last observed peak will never be reset",
    "    In case RESET is provided the peak reset time will be restored to the default value",
    "REPLYBUFFER RESIZING <0|1>",
    "    Enable or disable the reply buffer resize cron job",
    "CLUSTERLINK KILL <to|from|all> <node-id>",
    "    Kills the link based on the direction to/from (both) with the provided node.",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;

    /// The payload of a RESP2 bulk reply.
    fn bulk_body(r: &str) -> &str {
        let (hdr, rest) = r.split_once("\r\n").unwrap();
        let n: usize = hdr[1..].parse().unwrap();
        assert_eq!(rest.len(), n + 2, "{r}");
        &rest[..n]
    }

    #[test]
    fn info_sections() {
        let mut t = TestServer::new(2);
        assert_eq!(t.run(&["INFO", "foo"]), "$0\r\n\r\n");
        let all = t.run(&["INFO"]);
        let heads: Vec<&str> = bulk_body(&all)
            .lines()
            .filter(|l| l.starts_with('#'))
            .collect();
        assert_eq!(
            heads,
            [
                "# Server",
                "# Clients",
                "# Memory",
                "# Persistence",
                "# Stats",
                "# Replication",
                "# CPU",
                "# Modules",
                "# Errorstats",
                "# Cluster",
                "# Keyspace"
            ]
        );
        assert!(all.contains("\r\nredis_version:7.0.15\r\n"));
        assert!(all.contains(&format!("\r\ntessera_version:{TESSERA_VERSION}\r\n")));
        assert!(all.contains("\r\nmaxmemory_policy:noeviction\r\n"));
        assert!(all.contains("\r\nused_cpu_user:"));
        for sec in ["all", "everything"] {
            let r = t.run(&["INFO", sec]);
            assert!(r.contains("# Commandstats\r\n") && r.contains("# Latencystats\r\n"));
        }
        // Order is Redis's, whatever the arguments' order; names any case.
        assert_eq!(
            t.run(&["INFO", "Cluster", "modules"]),
            "$43\r\n# Modules\r\n\r\n# Cluster\r\ncluster_enabled:0\r\n\r\n"
        );
        let d = t.run(&["INFO", "default", "commandstats"]);
        assert!(d.contains("# Server\r\n") && d.contains("# Commandstats\r\n"));
        t.client.resp3 = true;
        assert_eq!(
            t.run(&["INFO", "cluster"]),
            "=34\r\ntxt:# Cluster\r\ncluster_enabled:0\r\n\r\n"
        );
    }

    #[test]
    fn info_keyspace_sums_shards() {
        for n in [1, 2, 4] {
            let mut t = TestServer::new(n);
            assert_eq!(t.run(&["INFO", "keyspace"]), "$12\r\n# Keyspace\r\n\r\n");
            for k in ["a", "b", "c", "d"] {
                t.run(&["SET", k, "1"]);
            }
            t.run(&["SET", "e", "1", "EX", "100"]);
            t.run(&["SELECT", "3"]);
            t.run(&["SET", "x", "1"]);
            let r = t.run(&["INFO", "keyspace"]);
            let body = bulk_body(&r);
            let lines: Vec<&str> = body.split("\r\n").collect();
            assert_eq!(lines[0], "# Keyspace");
            assert!(
                lines[1].starts_with("db0:keys=5,expires=1,avg_ttl="),
                "{body}"
            );
            let ttl: u64 = lines[1].rsplit('=').next().unwrap().parse().unwrap();
            assert!((99_000..=100_000).contains(&ttl), "{ttl}");
            assert_eq!(lines[2], "db3:keys=1,expires=0,avg_ttl=0");
        }
    }

    #[test]
    fn info_stats_and_resetstat() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "a", "1"]);
        t.run(&["GET", "a"]);
        t.run(&["GET", "nope"]);
        t.run(&["GET"]);
        t.run(&["SELECT", "x"]);
        let r = t.run(&["INFO", "commandstats", "errorstats", "stats"]);
        assert!(
            r.contains("\r\nkeyspace_hits:1\r\nkeyspace_misses:1\r\n"),
            "{r}"
        );
        assert!(r.contains("\r\ntotal_error_replies:2\r\n"), "{r}");
        assert!(r.contains(
            "\r\ncmdstat_get:calls=2,usec=" // usec varies
        ));
        assert!(r.contains(",rejected_calls=1,failed_calls=0\r\n"), "{r}");
        assert!(r.contains("\r\ncmdstat_select:calls=1,"), "{r}");
        assert!(
            r.contains("# Errorstats\r\nerrorstat_ERR:count=2\r\n"),
            "{r}"
        );
        assert_eq!(t.run(&["CONFIG", "RESETSTAT"]), "+OK\r\n");
        let r = t.run(&["INFO", "commandstats", "errorstats"]);
        assert_eq!(
            bulk_body(&r),
            "# Commandstats\r\n\r\n# Errorstats\r\n",
            "the test driver records no coordinator calls"
        );
        let r = t.run(&["INFO", "stats"]);
        assert!(
            r.contains("\r\nkeyspace_hits:0\r\nkeyspace_misses:0\r\n"),
            "{r}"
        );
        assert_eq!(
            t.run(&["CONFIG", "RESETSTAT", "x"]),
            "-ERR wrong number of arguments for 'config|resetstat' command\r\n"
        );
    }

    #[test]
    fn config_get_set() {
        let mut t = TestServer::new(2);
        assert_eq!(
            t.run(&["CONFIG", "GET", "maxmemory"]),
            "*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"
        );
        t.client.resp3 = true;
        assert_eq!(
            t.run(&["CONFIG", "GET", "maxmemory"]),
            "%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"
        );
        assert_eq!(t.run(&["CONFIG", "GET", "nope"]), "%0\r\n");
        t.client.resp3 = false;
        let gen = t.server.config_gen.load(Ordering::SeqCst);
        assert_eq!(t.run(&["CONFIG", "SET", "hz", "20"]), "+OK\r\n");
        assert_eq!(t.server.config_gen.load(Ordering::SeqCst), gen + 1);
        assert_eq!(
            t.run(&["CONFIG", "GET", "hz"]),
            "*2\r\n$2\r\nhz\r\n$2\r\n20\r\n"
        );
        assert_eq!(
            t.run(&["CONFIG", "SET", "hz", "500x"]),
            "-ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't \
             be parsed into an integer\r\n"
        );
        assert_eq!(
            t.run(&["CONFIG", "SET", "foo", "1"]),
            "-ERR Unknown option or number of arguments for CONFIG SET - 'foo'\r\n"
        );
        assert_eq!(
            t.run(&["CONFIG", "SET", "hz", "20", "hz", "30"]),
            "-ERR CONFIG SET failed (possibly related to argument 'hz') - duplicate \
             parameter\r\n"
        );
        assert_eq!(
            t.run(&["CONFIG", "SET", "hz", "10", "hz"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(t.server.config_gen.load(Ordering::SeqCst), gen + 1);
        assert_eq!(
            t.run(&["CONFIG", "GET"]),
            "-ERR wrong number of arguments for 'config|get' command\r\n"
        );
        assert_eq!(
            t.run(&["CONFIG", "SET", "a"]),
            "-ERR wrong number of arguments for 'config|set' command\r\n"
        );
        assert_eq!(
            t.run(&["CONFIG", "FOO"]),
            "-ERR unknown subcommand 'FOO'. Try CONFIG HELP.\r\n"
        );
        assert_eq!(
            t.run(&["CONFIG", "REWRITE"]),
            "-ERR The server is running without a config file\r\n"
        );
        assert_eq!(
            t.run(&["CONFIG", "HELP"]),
            "*11\r\n+CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n\
             +GET <pattern>\r\n\
             +    Return parameters matching the glob-like <pattern> and their values.\r\n\
             +SET <directive> <value>\r\n\
             +    Set the configuration <directive> to <value>.\r\n\
             +RESETSTAT\r\n+    Reset statistics reported by the INFO command.\r\n\
             +REWRITE\r\n+    Rewrite the configuration file.\r\n\
             +HELP\r\n+    Prints this help.\r\n"
        );
    }

    #[test]
    fn time_and_lastsave() {
        let mut t = TestServer::new(1);
        let r = t.run(&["TIME"]);
        let parts: Vec<&str> = r.split("\r\n").collect();
        assert_eq!(parts[0], "*2");
        let secs: u64 = parts[2].parse().unwrap();
        let us: u64 = parts[4].parse().unwrap();
        assert!(secs > 1_600_000_000 && us < 1_000_000, "{r}");
        assert_eq!(
            t.run(&["TIME", "x"]),
            "-ERR wrong number of arguments for 'time' command\r\n"
        );
        t.server.lastsave_s.store(1234, Ordering::Relaxed);
        assert_eq!(t.run(&["LASTSAVE"]), ":1234\r\n");
    }

    #[test]
    fn debug() {
        let mut t = TestServer::new(1);
        assert_eq!(t.run(&["DEBUG", "SLEEP", "0"]), "+OK\r\n");
        assert_eq!(t.run(&["DEBUG", "sleep", "x"]), "+OK\r\n");
        assert_eq!(t.run(&["DEBUG", "SLEEP", "-1"]), "+OK\r\n");
        let start = std::time::Instant::now();
        assert_eq!(t.run(&["DEBUG", "SLEEP", "0.05"]), "+OK\r\n");
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(
            t.run(&["DEBUG", "SLEEP"]),
            "-ERR unknown subcommand or wrong number of arguments for 'SLEEP'. Try DEBUG \
             HELP.\r\n"
        );
        assert_eq!(
            t.run(&["DEBUG", "FOO"]),
            "-ERR unknown subcommand or wrong number of arguments for 'FOO'. Try DEBUG HELP.\r\n"
        );
        assert_eq!(
            t.run(&["DEBUG"]),
            "-ERR wrong number of arguments for 'debug' command\r\n"
        );
        let help = t.run(&["DEBUG", "HELP"]);
        assert!(help.starts_with(
            "*106\r\n+DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n\
             +AOF-FLUSH-SLEEP <microsec>\r\n"
        ));
        assert!(help.ends_with("+HELP\r\n+    Prints this help.\r\n"));
        assert_eq!(atof(b" 1.5xyz"), 1.5);
        assert_eq!(atof(b"abc"), 0.0);
    }

    #[test]
    fn shutdown() {
        let mut t = TestServer::new(1);
        assert_eq!(
            t.run(&["SHUTDOWN", "ABORT"]),
            "-ERR No shutdown in progress.\r\n"
        );
        assert_eq!(t.run(&["SHUTDOWN", "FOO"]), "-ERR syntax error\r\n");
        assert_eq!(
            t.run(&["SHUTDOWN", "NOSAVE", "SAVE"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            t.run(&["SHUTDOWN", "ABORT", "NOW"]),
            "-ERR syntax error\r\n"
        );
        assert!(!t.server.shutdown.load(Ordering::SeqCst));
        assert_eq!(t.run(&["SHUTDOWN", "nosave", "now", "force"]), "");
        assert!(t.server.shutdown.load(Ordering::SeqCst));
        assert_eq!(
            t.server.shutdown_mode.load(Ordering::SeqCst),
            SHUTDOWN_NOSAVE | SHUTDOWN_FORCE
        );
        assert!(t.client.shutdown_wait);
        assert!(!t.client.close_after_reply);
        t.run(&["SHUTDOWN", "SAVE", "NOW"]);
        assert_eq!(t.server.shutdown_mode.load(Ordering::SeqCst), SHUTDOWN_SAVE);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(1024), "1.00K");
        assert_eq!(human(1163744), "1.11M");
        assert_eq!(human(25276502016), "23.54G");
    }
}
