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

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use engine::ShardStats;
use resp::{Args, Reply};

use crate::coord::{fan_out, Coordinator, OneStep, Plan};
use crate::ctx::{
    ClientState, ConnCtx, ServerShared, ThreadStats, SHUTDOWN_DEFAULT, SHUTDOWN_FORCE,
    SHUTDOWN_NOSAVE, SHUTDOWN_SAVE,
};
use crate::docs::reply_help;
use crate::error::CmdError;
use crate::table::{flags::*, registry, CommandSpec, Exec, NO_KEYS};
use crate::util::eq_ic;

mod render;
use render::render;

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
        Exec::Coord(debug),
        ADMIN_ACL,
    )
    .with_locks(debug_locks),
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
        Exec::Coord(config_set),
        ADMIN_ACL,
    )
    .with_locks(config_set_locks),
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
        c.server.ops.busy.stop_for_shutdown();
    } else {
        c.server.ops.busy.refuse_shutdown()?;
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

/// DEBUG LOADAOF and RELOAD run under whole-keyspace Write locks (see
/// `persist::loadaof`, `persist::reload`); DIGEST under Read locks (one
/// instant across shards), DIGEST-VALUE under its keys' Read locks; the
/// other subcommands lock nothing.
fn debug_locks(
    args: Args<'_>,
    db: usize,
    nshards: usize,
    _: &crate::ServerShared,
) -> Option<crate::tx::LockSet> {
    let sub = args.get(1);
    let mut set = crate::tx::LockSet::default();
    if eq_ic(sub, "loadaof") || eq_ic(sub, "reload") {
        set.whole(nshards, crate::tx::Mode::Write);
    } else if eq_ic(sub, "digest") && args.len() == 2 {
        set.whole(nshards, crate::tx::Mode::Read);
    } else if eq_ic(sub, "digest-value") && args.len() > 2 {
        for k in args.iter().skip(2) {
            set.key(nshards, db, k, crate::tx::Mode::Read);
        }
    } else {
        return None;
    }
    Some(set)
}

/// DEBUG: LOADAOF, RELOAD, OBJECT, DIGEST and DIGEST-VALUE run as their
/// coordinators; the other subcommands ([`debug_now`]) reply at once.
fn debug(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let sub = args.get(1);
    if eq_ic(sub, "loadaof") {
        return Ok(crate::persist::loadaof(c.server));
    }
    if eq_ic(sub, "reload") {
        return crate::persist::reload(c.server, args);
    }
    if eq_ic(sub, "object") && args.len() == 3 {
        return Ok(crate::keys::object::debug_object(c, args.get(2)));
    }
    if eq_ic(sub, "digest") && args.len() == 2 {
        return Ok(crate::digest::debug_digest(c));
    }
    // Redis: `c->argc >= 2`, so no key at all is an empty array.
    if eq_ic(sub, "digest-value") {
        return crate::digest::debug_digest_value(c, args);
    }
    // Run in the coordinator's step, which is timed as the command
    // (commandstats, the latency monitor's `command` event for SLEEP).
    let ops = c.server.ops;
    let mut argv = resp::OwnedArgs::with_capacity(args.len(), 0);
    argv.extend(args);
    Ok(OneStep::boxed(
        Plan::default(),
        move |_: Vec<()>, out: &mut Reply, _| debug_now(ops, argv.args(), out),
    ))
}

/// DEBUG's subcommands other than LOADAOF (LOADAOF, as Redis, takes any
/// number of arguments after it), from a client or a script (with DEBUG
/// SET-DISABLE-DENY-SCRIPTS 1): HELP; PROTOCOL type (a reply of each RESP
/// type, Redis's test values); SLEEP seconds (blocks the executing
/// thread, as it blocks Redis's only thread); SET-ACTIVE-EXPIRE 0|1;
/// SET-DISABLE-DENY-SCRIPTS 0|1; AOF-FLUSH-SLEEP microseconds (the AOF writer
/// sleeps that long before each write: Redis's test hook).
pub(crate) fn debug_now(
    ops: &crate::ops::Ops,
    args: Args<'_>,
    out: &mut Reply,
) -> Result<(), CmdError> {
    let sub = args.get(1);
    // Redis's atoi: anything but a number starting with a non-zero digit
    // is 0.
    let atoi_nonzero = |a: &[u8]| {
        resp::string2ll(a).is_some_and(|n| n != 0)
            || a.first().is_some_and(|b| (b'1'..=b'9').contains(b))
    };
    if eq_ic(sub, "help") && args.len() == 2 {
        reply_help(out, "DEBUG", DEBUG_HELP);
    } else if eq_ic(sub, "protocol") && args.len() == 3 {
        debug_protocol(args.get(2), out)?;
    } else if eq_ic(sub, "sleep") && args.len() == 3 {
        let secs = atof(args.get(2));
        if let Ok(d) = Duration::try_from_secs_f64(secs) {
            std::thread::sleep(d);
        }
        out.ok();
    } else if eq_ic(sub, "set-active-expire") && args.len() == 3 {
        ops.active_expire
            .store(atoi_nonzero(args.get(2)), Ordering::Relaxed);
        out.ok();
    } else if eq_ic(sub, "aof-flush-sleep") && args.len() == 3 {
        // Redis's atoi: the leading number, 0 without one (negative: none).
        let us = atof(args.get(2)).max(0.0) as u64;
        ops.disk.aof_flush_sleep_us.store(us, Ordering::Relaxed);
        out.ok();
    } else if eq_ic(sub, "set-disable-deny-scripts") && args.len() == 3 {
        ops.scripts_call_noscript
            .store(atoi_nonzero(args.get(2)), Ordering::Relaxed);
        out.ok();
    } else {
        return Err(CmdError::err_echo(
            "unknown subcommand or wrong number of arguments for '",
            sub,
            "'. Try DEBUG HELP.",
        ));
    }
    Ok(())
}

/// DEBUG PROTOCOL type: Redis's test reply of each RESP type, in the
/// caller's protocol (RESP2 forms where RESP3 has its own).
fn debug_protocol(name: &[u8], out: &mut Reply) -> Result<(), CmdError> {
    if eq_ic(name, "string") {
        out.bulk(b"Hello World");
    } else if eq_ic(name, "integer") {
        out.int(12345);
    } else if eq_ic(name, "double") {
        // Redis's test value, not pi.
        #[allow(clippy::approx_constant)]
        out.double(3.141);
    } else if eq_ic(name, "bignum") {
        let n = b"1234567999999999999999999999999999999";
        if out.resp3() {
            out.raw(b"(");
            out.raw(n);
            out.raw(b"\r\n");
        } else {
            out.bulk(n);
        }
    } else if eq_ic(name, "null") {
        out.null();
    } else if eq_ic(name, "array") || eq_ic(name, "set") {
        if eq_ic(name, "set") {
            out.set(3);
        } else {
            out.array(3);
        }
        for j in 0..3 {
            out.int(j);
        }
    } else if eq_ic(name, "map") {
        out.map(3);
        for j in 0..3 {
            out.int(j);
            out.boolean(j == 1);
        }
    } else if eq_ic(name, "attrib") {
        if out.resp3() {
            out.raw(b"|1\r\n");
            out.bulk(b"key-popularity");
            out.array(2);
            out.bulk(b"key:123");
            out.int(90);
        }
        // Attributes are not replies: a real one follows.
        out.bulk(b"Some real reply following the attribute");
    } else if eq_ic(name, "push") {
        if !out.resp3() {
            return Err(CmdError::err("RESP2 is not supported by this command"));
        }
        out.push(2);
        out.bulk(b"server-cpu-usage");
        out.int(42);
        // A push is not the command's reply: a real one follows.
        out.bulk(b"Some real reply following the push reply");
    } else if eq_ic(name, "true") {
        out.boolean(true);
    } else if eq_ic(name, "false") {
        out.boolean(false);
    } else if eq_ic(name, "verbatim") {
        out.verbatim("txt", b"This is a verbatim\nstring");
    } else {
        return Err(CmdError::err(
            "Wrong protocol type name. Please use one of the following: \
             string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
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

/// CONFIG SET's locks: none, unless it may turn the AOF on, when it
/// takes a shared lock on the whole keyspace, as BGREWRITEAOF does: the
/// rewrite that writes the AOF's first base begins in the command, on
/// every shard at one instant between transactions and scripts (see
/// [`config_set`]).
fn config_set_locks(
    args: Args<'_>,
    _db: usize,
    nshards: usize,
    _: &crate::ServerShared,
) -> Option<crate::tx::LockSet> {
    let on = (2..args.len())
        .step_by(2)
        .any(|i| eq_ic(args.get(i), "appendonly") && eq_ic(args.get(i + 1), "yes"));
    on.then(|| {
        let mut set = crate::tx::LockSet::default();
        set.whole(nshards, crate::tx::Mode::Read);
        set
    })
}

/// CONFIG SET name value [name value ...]: all or nothing; threads pick up
/// the change through `config_gen`. Turning `appendonly` on begins the
/// rewrite of the AOF's first base here, under the command's locks (see
/// [`config_set_locks`]), as Redis's startAppendOnly forks it in the
/// command: a script or transaction that starts after the reply cannot
/// hold it up (its snapshot is taken already, and a script's hook steps
/// the shard it holds: `script::run::snapshot_pass`). Inside EXEC, or
/// while a background save runs, it is scheduled for the cron instead, as
/// in Redis.
fn config_set(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let rewrite = config_set_apply(c, args)?;
    Ok(rewrite.unwrap_or_else(|| {
        OneStep::boxed(
            Plan::default(),
            |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
                out.ok();
                Ok(())
            },
        )
    }))
}

/// Applies CONFIG SET; returns the coordinator of the AOF rewrite it
/// begins, if it turned the AOF on (it replies `+OK` once every shard
/// began).
fn config_set_apply(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Option<Box<dyn Coordinator>>, CmdError> {
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
    let mut rewrite = None;
    match (appendonly, c.server.aof.get()) {
        (Some(true), Some(aof)) => {
            // Redis's startAppendOnly: the AOF's files are created now (a
            // failure fails CONFIG SET and restores the setting), and a
            // rewrite writes the base of the current data.
            let enabled_now = !aof.enabled();
            if enabled_now {
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
            if c.client.in_exec {
                crate::persist::log_warning(
                    "AOF was enabled during a transaction. An AOF background was scheduled to \
                     start when possible.",
                );
            }
            if enabled_now {
                rewrite = crate::persist::enable_rewrite(c.server, c.client.in_exec);
            } else {
                // A turn-off the cron has not done yet, cancelled: the
                // rewrite it would have been is scheduled, as before.
                c.server.persist.request_aof_on(c.client.in_exec);
            }
        }
        (Some(false), _) => c.server.persist.request_aof_off(),
        _ => {}
    }
    c.server.config_gen.fetch_add(1, Ordering::SeqCst);
    if let Some(w) = c.server.wake_all.get() {
        w();
    }
    Ok(rewrite)
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

/// Calls its argument with each shard a script's INFO reports, and the
/// statistics of the loop that runs it when they are known and are not
/// the script's (see `info_from_script`).
pub(crate) type Visit<'a> = dyn FnMut(&mut dyn FnMut(&engine::Shard, Option<&ThreadStats>)) + 'a;

/// INFO called from a script (`redis.call('info', ...)`), which runs
/// inside a shard handler: the server-wide figures as a client's INFO,
/// and of the per-shard and per-thread ones those of the shards `visit`
/// reaches (every shard when the script holds them all, in place or
/// under locks; else its own, or none on gathered copies) with their
/// loops' statistics, and `stats` (what the script's loop counts, or its
/// VM). Other shards' figures cannot be read without holding them
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
    visit(&mut |sh, th| {
        parts.push(ShardInfo {
            thread: th.cloned(),
            ..ShardInfo::of(sh)
        })
    });
    // The script's own statistics (its loop's, lent, or its VM's own) go
    // with the shard visited without any (its home shard's).
    match parts.iter_mut().find(|p| p.thread.is_none()) {
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
    /// The server's state its scripts share (INFO memory's script cache,
    /// functions and VMs).
    ops: &'static crate::ops::Ops,
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
                crate::repl::feed_answered(s);
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
            ops: s.ops,
        }
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
    use super::render::human;
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

    /// DEBUG only where `enable-debug-command` allows it (Redis 7's
    /// default `no`; `local`: unix sockets and loopback peers).
    #[test]
    fn debug_is_refused_unless_enabled() {
        use config::ProtectedAction;
        let refused = "-ERR DEBUG command not allowed. If the enable-debug-command option is set \
             to \"local\", you can run it from a local connection, otherwise you need to set this \
             option in the configuration file, and then restart the server.\r\n";
        let mut t = TestServer::new(1);
        assert_eq!(t.run(&["DEBUG", "SLEEP", "0"]), refused);
        t.server.config.write().unwrap().enable_debug_command = ProtectedAction::Local;
        t.client.addr = "10.0.0.1:5000".into();
        assert_eq!(t.run(&["DEBUG", "SLEEP", "0"]), refused);
        for local in ["127.0.0.1:5000", "[::1]:5000"] {
            t.client.addr = local.into();
            assert_eq!(t.run(&["DEBUG", "SLEEP", "0"]), "+OK\r\n");
        }
        t.client.addr = "10.0.0.1:5000".into();
        t.client.unix = true;
        assert_eq!(t.run(&["DEBUG", "SLEEP", "0"]), "+OK\r\n");
    }

    #[test]
    fn debug() {
        let mut t = TestServer::new(1);
        t.server.config.write().unwrap().enable_debug_command = config::ProtectedAction::Yes;
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
