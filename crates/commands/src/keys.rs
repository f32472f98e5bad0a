//! Keyspace commands (Redis's `db.c`, `expire.c` and `object.c`):
//! existence, deletion, expiry, renaming and copying, iteration, whole-
//! database operations and OBJECT introspection. Request path.
//!
//! # Lazy expiry
//!
//! Every command here sees a key whose deadline has passed as missing: the
//! engine's lookups (`lookup_read`, `lookup_write`, `exists`, `remove`)
//! delete it first. So EXISTS/TYPE/TTL/OBJECT on an expired key answer as
//! for a missing key, EXPIRE/PERSIST/RENAME/MOVE/COPY treat it as absent,
//! and KEYS and SCAN skip it (SCAN deletes it on the way, as Redis's
//! `expireIfNeeded` does; KEYS only skips it, as Redis's `keyIsExpired`).
//!
//! # Commands across shards
//!
//! * Multi-key counts (DEL, UNLINK, EXISTS, TOUCH) group their keys by
//!   shard and sum one job per shard.
//! * RENAME, RENAMENX and COPY run as one shard handler when both keys share
//!   a shard and as a step-by-step [`Coordinator`] when they do not: take
//!   (or read) the source entry on its shard, then store it on the
//!   destination's shard. The entry moves whole, so the TTL (an absolute
//!   deadline) and, for RENAME, the access time travel with it.
//! * KEYS, DBSIZE, RANDOMKEY, FLUSHDB, FLUSHALL and SWAPDB fan out to every
//!   shard, in one round (one job per shard).
//! * SCAN talks to one shard per call; see [`ScanCursor`] for how its
//!   cursor names the shard.
//! * SCAN takes no lock outside MULTI/EXEC ([`scan_locks`]); KEYS, DBSIZE
//!   and RANDOMKEY take a whole-shard Read lock on every shard (asked for
//!   in one round, see `tx`), FLUSHDB, FLUSHALL and SWAPDB a Write lock.
//!
//! OBJECT FREQ, IDLETIME and REFCOUNT depend on the eviction policy, which
//! lives in the server configuration a shard handler does not see, so they
//! run as coordinators that read the policy on the home thread and send one
//! job to the key's shard. The shard itself learns whether to keep LFU
//! counters from [`lfu_params`], which the owning loop applies to
//! `Shard::lfu` whenever the configuration changes.

use ds::events as ev;
use engine::lazyfree::Del;
use engine::{Entry, LfuParams, OwnedEntry, Shard, SmallBytes, StrView, Value, ValueRef};
use rand::Rng;
use resp::{Args, Reply};

use crate::coord::{fan_out, outputs, Coordinator, JobOut, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ServerShared, ShardCtx};
use crate::error::CmdError;
use crate::multikey::{prefetch_keys, split_by_shard};
use crate::propagate::as_received;
use crate::table::{flags::*, keys, shard_of, CommandSpec, Exec, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

const KEYSPACE_READ_FAST: &[&str] = &["keyspace", "read", "fast"];
const KEYSPACE_WRITE_FAST: &[&str] = &["keyspace", "write", "fast"];
const KEYSPACE_READ_SLOW: &[&str] = &["keyspace", "read", "slow"];

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "del",
        -2,
        WRITE,
        keys(1, -1, 1),
        Exec::Shard(del, Some(del_multi)),
        &["keyspace", "write", "slow"],
    ),
    CommandSpec::new(
        "unlink",
        -2,
        WRITE | FAST,
        keys(1, -1, 1),
        Exec::Shard(unlink, Some(unlink_multi)),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "exists",
        -2,
        READONLY | FAST,
        keys(1, -1, 1),
        Exec::Shard(exists, Some(exists_multi)),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "touch",
        -2,
        READONLY | FAST,
        keys(1, -1, 1),
        Exec::Shard(touch, Some(touch_multi)),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "dbsize",
        1,
        READONLY | FAST,
        NO_KEYS,
        Exec::Coord(dbsize),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "type",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(type_, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "expire",
        -3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(expire, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "pexpire",
        -3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(pexpire, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "expireat",
        -3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(expireat, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "pexpireat",
        -3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(pexpireat, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "ttl",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(ttl, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "pttl",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(pttl, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "expiretime",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(expiretime, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "pexpiretime",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(pexpiretime, None),
        KEYSPACE_READ_FAST,
    ),
    CommandSpec::new(
        "persist",
        2,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(persist, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "rename",
        3,
        WRITE,
        keys(1, 2, 1),
        Exec::Shard(rename, Some(rename_multi)),
        &["keyspace", "write", "slow"],
    ),
    CommandSpec::new(
        "renamenx",
        3,
        WRITE | FAST,
        keys(1, 2, 1),
        Exec::Shard(renamenx, Some(renamenx_multi)),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "copy",
        -3,
        WRITE | DENYOOM,
        keys(1, 2, 1),
        Exec::Shard(copy, Some(copy_multi)),
        &["keyspace", "write", "slow"],
    ),
    CommandSpec::new(
        "move",
        3,
        WRITE | FAST,
        keys(1, 1, 1),
        Exec::Shard(move_, None),
        KEYSPACE_WRITE_FAST,
    ),
    CommandSpec::new(
        "keys",
        2,
        READONLY,
        NO_KEYS,
        Exec::Coord(keys_),
        &["keyspace", "read", "slow", "dangerous"],
    ),
    CommandSpec::new(
        "scan",
        -2,
        READONLY,
        NO_KEYS,
        Exec::Coord(scan),
        KEYSPACE_READ_SLOW,
    )
    .with_locks(scan_locks),
    CommandSpec::new(
        "randomkey",
        1,
        READONLY,
        NO_KEYS,
        Exec::Coord(randomkey),
        KEYSPACE_READ_SLOW,
    ),
    CommandSpec::new(
        "flushdb",
        -1,
        WRITE,
        NO_KEYS,
        Exec::Coord(flushdb),
        &["keyspace", "write", "slow", "dangerous"],
    ),
    CommandSpec::new(
        "flushall",
        -1,
        WRITE,
        NO_KEYS,
        Exec::Coord(flushall),
        &["keyspace", "write", "slow", "dangerous"],
    ),
    CommandSpec::new(
        "swapdb",
        3,
        WRITE | FAST,
        NO_KEYS,
        Exec::Coord(swapdb),
        &["keyspace", "write", "fast", "dangerous"],
    ),
    CommandSpec::parent("object", -2, 0, &["slow"], OBJECT_SUBCOMMANDS),
];

const OBJECT_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "encoding",
        3,
        READONLY,
        keys(2, 2, 1),
        Exec::Shard(object_encoding, None),
        KEYSPACE_READ_SLOW,
    ),
    CommandSpec::new(
        "freq",
        3,
        READONLY,
        keys(2, 2, 1),
        Exec::Coord(object_freq),
        KEYSPACE_READ_SLOW,
    ),
    CommandSpec::new(
        "idletime",
        3,
        READONLY,
        keys(2, 2, 1),
        Exec::Coord(object_idletime),
        KEYSPACE_READ_SLOW,
    ),
    CommandSpec::new(
        "refcount",
        3,
        READONLY,
        keys(2, 2, 1),
        Exec::Coord(object_refcount),
        KEYSPACE_READ_SLOW,
    ),
    CommandSpec::new(
        "help",
        2,
        LOADING | STALE,
        NO_KEYS,
        Exec::Conn(object_help),
        &["keyspace", "slow"],
    ),
];

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// Redis's `getIntFromObjectOrReply`: an integer that must fit a C `int`.
fn parse_i32(arg: &[u8]) -> Result<i32, CmdError> {
    let n = parse_i64(arg)?;
    i32::try_from(n).map_err(|_| {
        CmdError::err("value is out of range, value must between -2147483648 and 2147483647")
    })
}

/// A database index as MOVE and COPY check it (`selectDb`'s range).
fn parse_db(arg: &[u8], databases: usize) -> Result<usize, CmdError> {
    let n = parse_i32(arg)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n < databases)
        .ok_or(CmdError::DbIndexOutOfRange)
}

/// Deletes `key` if its deadline has passed, counting it as Redis's
/// `expireIfNeeded` does; true if it was deleted.
fn expire_if_needed(shard: &mut Shard, db: usize, key: &[u8]) -> bool {
    // On a replica: nothing is deleted (see `engine::Expiry`).
    shard.expire_or_hide(db, key)
}

/// Sums a per-shard count over the shards holding the keys.
fn count_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
    op: fn(&mut Shard, usize, &[u8]) -> bool,
) -> Box<dyn Coordinator> {
    let db = c.client.db;
    let (groups, _) = split_by_shard(args, 1, c.nshards(), c.key_shards);
    let mut plan = Plan::default();
    plan.jobs.reserve(groups.len());
    for (shard, keys) in groups {
        plan.run(shard, move |env| {
            count(env.shard, db, keys.args(), op) as i64
        });
    }
    OneStep::boxed(
        plan,
        |res: Vec<i64>, out: &mut Reply, _: &mut ClientState| {
            out.int(res.iter().sum());
            Ok(())
        },
    )
}

/// Counts the keys of `args[1..]` for which `op` holds, on one shard.
fn count_local(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    op: fn(&mut Shard, usize, &[u8]) -> bool,
) -> Result<(), CmdError> {
    let n = count(ctx.shard, ctx.db, args.skip(1), op);
    ctx.out.int(n as i64);
    Ok(())
}

/// How many of `keys` (all on `shard`) `op` holds for. Their table slots
/// are prefetched first, so the lookups' cache misses overlap.
fn count(
    shard: &mut Shard,
    db: usize,
    keys: Args<'_>,
    op: fn(&mut Shard, usize, &[u8]) -> bool,
) -> usize {
    prefetch_keys(shard, db, keys, 1);
    keys.iter().filter(|k| op(shard, db, k)).count()
}

/// DEL's deletion of one key (`lazyfree-lazy-user-del`).
fn op_del(s: &mut Shard, db: usize, k: &[u8]) -> bool {
    op_remove(s, db, k, Del::User)
}

/// UNLINK's deletion of one key (always lazy).
fn op_unlink(s: &mut Shard, db: usize, k: &[u8]) -> bool {
    op_remove(s, db, k, Del::Unlink)
}

#[inline]
fn op_remove(s: &mut Shard, db: usize, k: &[u8], why: Del) -> bool {
    let deleted = s.delete(db, k, why);
    if deleted {
        s.notify(db, ev::GENERIC, "del", k);
    }
    deleted
}

/// EXISTS looks keys up without touching them but counts hits and misses
/// (Redis's `lookupKeyReadWithFlags(LOOKUP_NOTOUCH)`).
fn op_exists(s: &mut Shard, db: usize, k: &[u8]) -> bool {
    s.lookup_read(db, k, false).is_some()
}

/// TOUCH always updates the access time (Redis's `lookupKeyRead`).
fn op_touch(s: &mut Shard, db: usize, k: &[u8]) -> bool {
    s.lookup_read(db, k, true).is_some()
}

// ---------------------------------------------------------------------------
// DEL UNLINK EXISTS TOUCH DBSIZE TYPE
// ---------------------------------------------------------------------------

/// DEL key [key ...]: the number of keys removed. A large value is freed
/// in the background under `lazyfree-lazy-user-del` (`engine::lazyfree`).
///
/// Propagated as received when it deleted a key.
fn del(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    del_local(ctx, args, op_del)
}

fn del_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(as_received(count_multi(c, args, op_del), args, db))
}

/// UNLINK key [key ...]: DEL that always frees a large value in the
/// background.
fn unlink(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    del_local(ctx, args, op_unlink)
}

fn unlink_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(as_received(count_multi(c, args, op_unlink), args, db))
}

fn del_local(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    op: fn(&mut Shard, usize, &[u8]) -> bool,
) -> Result<(), CmdError> {
    let n = count(ctx.shard, ctx.db, args.skip(1), op);
    if n > 0 {
        ctx.propagate_as_is(args);
    }
    ctx.out.int(n as i64);
    Ok(())
}

/// EXISTS key [key ...]: how many of the keys exist (repeats count again).
fn exists(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    count_local(ctx, args, op_exists)
}

fn exists_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    Ok(count_multi(c, args, op_exists))
}

/// TOUCH key [key ...]: updates the access time of each key; replies how
/// many exist (repeats count again).
fn touch(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    count_local(ctx, args, op_touch)
}

fn touch_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    Ok(count_multi(c, args, op_touch))
}

/// DBSIZE: keys in the selected database, over all shards (keys expired
/// but not yet deleted included, as in Redis).
fn dbsize(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(fan_out(
        c.nshards(),
        move |env| env.shard.dbs[db].len() as i64,
        |res, out, _| {
            out.int(res.iter().sum());
            Ok(())
        },
    ))
}

/// TYPE key: `+string` etc., `+none` for a missing key.
fn type_(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let name = ctx
        .shard
        .lookup_read(ctx.db, args.get(1), false)
        .map_or("none", |e| e.value().type_name());
    ctx.out.simple(name);
    Ok(())
}

// ---------------------------------------------------------------------------
// EXPIRE PEXPIRE EXPIREAT PEXPIREAT PERSIST TTL PTTL EXPIRETIME PEXPIRETIME
// ---------------------------------------------------------------------------

/// EXPIRE key seconds [NX|XX|GT|LT]: 1 if the deadline was set (or the key
/// deleted because it is already past), 0 if the key is missing or the
/// condition failed.
fn expire(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let now = ctx.shard.now_ms as i64;
    expire_generic(ctx, args, now, true, "expire")
}

/// PEXPIRE key milliseconds [NX|XX|GT|LT]
fn pexpire(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let now = ctx.shard.now_ms as i64;
    expire_generic(ctx, args, now, false, "pexpire")
}

/// EXPIREAT key unix-seconds [NX|XX|GT|LT]
fn expireat(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    expire_generic(ctx, args, 0, true, "expireat")
}

/// PEXPIREAT key unix-milliseconds [NX|XX|GT|LT]
fn pexpireat(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    expire_generic(ctx, args, 0, false, "pexpireat")
}

/// Redis's `expireGenericCommand`. Order of checks (each visible to
/// clients): options, then the integer, then overflow of the unit
/// conversion and of `base_ms` addition, then the key, then NX/XX/GT/LT.
/// A deadline at or before now deletes the key and replies 1.
fn expire_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    base_ms: i64,
    seconds: bool,
    cmd: &str,
) -> Result<(), CmdError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in args.iter().skip(3) {
        if eq_ic(opt, "nx") {
            nx = true;
        } else if eq_ic(opt, "xx") {
            xx = true;
        } else if eq_ic(opt, "gt") {
            gt = true;
        } else if eq_ic(opt, "lt") {
            lt = true;
        } else {
            // Redis prints the option with %s: it stops at a NUL byte.
            return Err(CmdError::err_echo("Unsupported option ", opt, ""));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CmdError::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(CmdError::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let mut when = parse_i64(args.get(2))?;
    let bad = || CmdError::InvalidExpire(cmd.to_string());
    if seconds {
        when = when.checked_mul(1000).ok_or_else(bad)?;
    }
    // Redis rejects only `when > LLONG_MAX - basetime`; base is >= 0 so a
    // negative `when` cannot underflow.
    when = when.checked_add(base_ms).ok_or_else(bad)?;

    let (db, key) = (ctx.db, args.get(1));
    let now = ctx.shard.now_ms as i64;
    if ctx.shard.lookup_write(db, key).is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    // -1 stands for "no deadline" in the comparisons below, as in Redis.
    let current = match ctx.shard.dbs[db].expire_of(key) {
        0 => -1,
        at => at as i64,
    };
    let refused = (nx && current != -1)
        || (xx && current == -1)
        || (gt && (current == -1 || when <= current))
        || (lt && current != -1 && when >= current);
    if refused {
        ctx.out.int(0);
        return Ok(());
    }
    if when <= now {
        // Redis's expireGenericCommand: `lazyfree-lazy-expire` decides.
        let lazy = ctx.shard.lazy().expire;
        ctx.shard.dbs[db].delete(key, lazy);
        ctx.propagate(&[b"DEL", key]);
        ctx.notify(ev::GENERIC, "del", key);
    } else {
        // `when > now >= 0`, so it is a valid non-zero deadline.
        ctx.shard.dbs[db].set_expire(key, when as u64);
        propagate_pexpireat(ctx, args, when, base_ms == 0 && !seconds);
        ctx.notify(ev::GENERIC, "expire", key);
    }
    ctx.out.int(1);
    Ok(())
}

/// The record of an EXPIRE-family command that set a deadline, as Redis
/// 7.0's `expireGenericCommand` rewrites it: `PEXPIREAT key when [options]`
/// (PEXPIREAT itself, `absolute_ms`, goes as received).
fn propagate_pexpireat(ctx: &mut ShardCtx<'_>, args: Args<'_>, when: i64, absolute_ms: bool) {
    if absolute_ms {
        return ctx.propagate_as_is(args);
    }
    let mut at = itoa::Buffer::new();
    let at = at.format(when).as_bytes();
    ctx.propagate_with(args.len(), |out| {
        engine::outbox::write_bulk(out, b"PEXPIREAT");
        engine::outbox::write_bulk(out, args.get(1));
        engine::outbox::write_bulk(out, at);
        for opt in args.iter().skip(3) {
            engine::outbox::write_bulk(out, opt);
        }
    });
}

/// PERSIST key: 1 if a deadline was removed, 0 if none or no key.
fn persist(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let had = ctx.shard.lookup_write(db, key).is_some_and(|e| e.has_ttl());
    if had {
        ctx.shard.dbs[db].set_expire(key, 0);
        ctx.propagate_as_is(args);
        ctx.notify(ev::GENERIC, "persist", key);
    }
    ctx.out.int(had as i64);
    Ok(())
}

/// TTL key: seconds left (rounded to nearest), -1 without a deadline, -2
/// for a missing key.
fn ttl(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ttl_generic(ctx, args, false, false)
}

/// PTTL key: milliseconds left, -1, or -2.
fn pttl(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ttl_generic(ctx, args, true, false)
}

/// EXPIRETIME key: the deadline in Unix seconds (rounded), -1, or -2.
fn expiretime(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ttl_generic(ctx, args, false, true)
}

/// PEXPIRETIME key: the deadline in Unix milliseconds, -1, or -2.
fn pexpiretime(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ttl_generic(ctx, args, true, true)
}

/// Redis's `ttlGenericCommand`: the key is looked up without touching it.
fn ttl_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    ms: bool,
    absolute: bool,
) -> Result<(), CmdError> {
    let now = ctx.shard.now_ms;
    let at = match ctx.shard.lookup_read(ctx.db, args.get(1), false) {
        None => {
            ctx.out.int(-2);
            return Ok(());
        }
        Some(_) => ctx.shard.dbs[ctx.db].expire_of(args.get(1)),
    };
    if at == 0 {
        ctx.out.int(-1);
        return Ok(());
    }
    // i128: Redis rounds `(ttl + 500) / 1000`, which must not overflow for
    // a deadline near i64::MAX (PEXPIREAT k 9223372036854775807).
    let t = if absolute {
        at as i128
    } else {
        (at as i128 - now as i128).max(0)
    };
    let v = if ms { t } else { (t + 500) / 1000 };
    ctx.out.int(v as i64);
    Ok(())
}

// ---------------------------------------------------------------------------
// RENAME RENAMENX
// ---------------------------------------------------------------------------

/// RENAME key newkey: +OK; `ERR no such key` when the source is missing
/// (also for RENAME a a). The destination is overwritten; the source's
/// deadline moves with it.
fn rename(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    rename_local(ctx, args, false)
}

/// RENAMENX key newkey: 1 if renamed, 0 if the destination exists (or is
/// the source itself); `ERR no such key` when the source is missing.
fn renamenx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    rename_local(ctx, args, true)
}

/// Redis's `renameGenericCommand`, both keys on this shard.
fn rename_local(ctx: &mut ShardCtx<'_>, args: Args<'_>, nx: bool) -> Result<(), CmdError> {
    let (db, src, dst) = (ctx.db, args.get(1), args.get(2));
    if ctx.shard.lookup_write(db, src).is_none() {
        return Err(CmdError::NoSuchKey);
    }
    if src == dst {
        // Redis: RENAME a a is +OK, RENAMENX a a is 0.
        rename_reply(ctx.out, nx, false);
        return Ok(());
    }
    if nx && ctx.shard.lookup_write(db, dst).is_some() {
        rename_reply(ctx.out, nx, false);
        return Ok(());
    }
    // INVARIANT: looked up (and not expired) just above.
    let (entry, at) = ctx.shard.dbs[db]
        .remove_with_ttl(src)
        .expect("INVARIANT: source present");
    ctx.shard.delete(db, dst, Del::Server);
    ctx.shard.dbs[db].insert(dst, entry, at);
    ctx.propagate_as_is(args);
    ctx.notify(ev::GENERIC, "rename_from", src);
    ctx.notify(ev::GENERIC, "rename_to", dst);
    rename_reply(ctx.out, nx, true);
    Ok(())
}

/// RENAME replies +OK; RENAMENX replies 1 if it renamed, 0 if not (and 0
/// for RENAMENX a a).
fn rename_reply(out: &mut Reply, nx: bool, renamed: bool) {
    match (nx, renamed) {
        (false, _) => out.ok(),
        (true, renamed) => out.int(renamed as i64),
    }
}

fn rename_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(as_received(RenameCoord::boxed(c, args, false), args, db))
}

fn renamenx_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(as_received(RenameCoord::boxed(c, args, true), args, db))
}

/// RENAME/RENAMENX with the keys on different shards.
///
/// Steps (RENAME skips the first):
/// 1. RENAMENX only: does the destination exist on its shard?
/// 2. On the source's shard: take the source entry out (value, deadline,
///    access time). If the destination exists (RENAMENX), only check that
///    the source exists, to choose between `ERR no such key` and 0.
/// 3. On the destination's shard: store the entry (RENAME replaces what is
///    there). RENAMENX stores only if the destination is still absent and
///    otherwise hands the entry back, because another client may have
///    created it between steps 1 and 3 (no isolation in this layer yet).
/// 4. RENAMENX lost that race only: put the entry back at the source.
struct RenameCoord {
    nx: bool,
    db: usize,
    src: Vec<u8>,
    dst: Vec<u8>,
    src_shard: usize,
    dst_shard: usize,
    stage: RenameStage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RenameStage {
    Start,
    CheckedDst,
    TookSrc,
    Stored,
    Restored,
}

impl RenameCoord {
    fn boxed(c: &mut ConnCtx<'_>, args: Args<'_>, nx: bool) -> Box<dyn Coordinator> {
        let n = c.nshards();
        Box::new(RenameCoord {
            nx,
            db: c.client.db,
            src: args.get(1).to_vec(),
            dst: args.get(2).to_vec(),
            src_shard: shard_of(args.get(1), n),
            dst_shard: shard_of(args.get(2), n),
            stage: RenameStage::Start,
        })
    }

    /// Step 2's job: take the source out (`Some`), or report whether it
    /// exists when the destination is already taken.
    fn take_src(&self, plan: &mut Plan, dst_exists: bool) {
        let (db, src) = (self.db, self.src.clone());
        plan.run(
            self.src_shard,
            move |env| -> Result<(OwnedEntry, u64), bool> {
                if env.shard.lookup_write(db, &src).is_none() {
                    return Err(false);
                }
                if dst_exists {
                    return Err(true);
                }
                // INVARIANT: looked up (and not expired) just above.
                let taken = env.shard.dbs[db]
                    .remove_with_ttl(&src)
                    .expect("INVARIANT: source present");
                // Each half of a cross-shard rename is emitted by the
                // shard that owns its key: `rename_from` here, `rename_to`
                // with the store (their relative order is not kept).
                env.shard.notify(db, ev::GENERIC, "rename_from", &src);
                Ok(taken)
            },
        );
    }
}

impl Coordinator for RenameCoord {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        let db = self.db;
        match self.stage {
            RenameStage::Start if self.nx => {
                let dst = self.dst.clone();
                plan.run(self.dst_shard, move |env| env.shard.exists(db, &dst));
                self.stage = RenameStage::CheckedDst;
            }
            RenameStage::Start => {
                self.take_src(plan, false);
                self.stage = RenameStage::TookSrc;
            }
            RenameStage::CheckedDst => {
                let dst_exists = outputs::<bool>(results).pop().unwrap_or(false);
                self.take_src(plan, dst_exists);
                self.stage = RenameStage::TookSrc;
            }
            RenameStage::TookSrc => {
                let taken = outputs::<Result<(OwnedEntry, u64), bool>>(results).pop();
                let entry = match taken {
                    Some(Ok(e)) => e,
                    Some(Err(true)) => {
                        out.int(0);
                        return Ok(());
                    }
                    _ => return Err(CmdError::NoSuchKey),
                };
                let (dst, nx) = (self.dst.clone(), self.nx);
                plan.run(self.dst_shard, move |env| -> Option<(OwnedEntry, u64)> {
                    if nx {
                        if env.shard.exists(db, &dst) {
                            return Some(entry);
                        }
                    } else {
                        env.shard.delete(db, &dst, Del::Server);
                    }
                    let (e, at) = entry;
                    env.shard.dbs[db].insert(&dst, e, at);
                    env.shard.notify(db, ev::GENERIC, "rename_to", &dst);
                    None
                });
                // RENAME's store cannot bounce: locks release with it.
                plan.last = !nx;
                self.stage = RenameStage::Stored;
            }
            RenameStage::Stored => match outputs::<Option<(OwnedEntry, u64)>>(results)
                .pop()
                .flatten()
            {
                None => rename_reply(out, self.nx, true),
                Some((entry, at)) => {
                    let src = self.src.clone();
                    plan.run(self.src_shard, move |env| {
                        if !env.shard.exists(db, &src) {
                            env.shard.dbs[db].insert(&src, entry, at);
                        }
                    });
                    self.stage = RenameStage::Restored;
                }
            },
            RenameStage::Restored => out.int(0),
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// COPY MOVE
// ---------------------------------------------------------------------------

/// Parsed COPY options.
struct CopyOpts {
    dst_db: usize,
    replace: bool,
}

/// COPY source destination [DB destination-db] [REPLACE]: syntax, as
/// Redis's `copyCommand` checks it (a bad DB index is reported as soon as
/// it is read), then the same-object check.
fn parse_copy(args: Args<'_>, db: usize, databases: usize) -> Result<CopyOpts, CmdError> {
    let mut o = CopyOpts {
        dst_db: db,
        replace: false,
    };
    let mut j = 3;
    while j < args.len() {
        let a = args.get(j);
        if eq_ic(a, "replace") {
            o.replace = true;
        } else if eq_ic(a, "db") && j + 1 < args.len() {
            o.dst_db = parse_db(args.get(j + 1), databases)?;
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if o.dst_db == db && args.get(1) == args.get(2) {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    Ok(o)
}

/// COPY: 1 if copied, 0 if the source is missing or the destination exists
/// without REPLACE. The copy keeps the source's deadline.
fn copy(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_copy(args, ctx.db, ctx.databases)?;
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.int(0);
        return Ok(());
    };
    let value = e.value().to_owned_value();
    let at = ctx.shard.dbs[ctx.db].expire_of(args.get(1));
    let copied = copy_store(ctx.shard, o.dst_db, args.get(2), value, at, o.replace);
    if copied {
        ctx.propagate_as_is(args);
    }
    ctx.out.int(copied as i64);
    Ok(())
}

/// Stores a copy unless the destination exists and `replace` is false.
/// The copy is a new key: Redis deletes a replaced destination before
/// adding the copy, so it starts a fresh LFU counter rather than inheriting
/// the destination's (as an overwrite by `store` would).
fn copy_store(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    value: Value,
    at: u64,
    replace: bool,
) -> bool {
    if !replace && shard.exists(db, key) {
        return false;
    }
    if replace {
        shard.delete(db, key, Del::Server);
    }
    shard.store(db, key, value, at);
    shard.notify(db, ev::GENERIC, "copy_to", key);
    true
}

/// COPY with the keys on different shards: read the source (value and
/// deadline) on its shard, then store a copy on the destination's shard.
fn copy_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    let o = parse_copy(args, db, c.server.databases())?;
    let n = c.nshards();
    let touch = !c.client.no_touch;
    let src = args.get(1).to_vec();
    let mut first = Plan::default();
    first.run(shard_of(&src, n), move |env| {
        let value = env
            .shard
            .lookup_read(db, &src, touch)?
            .value()
            .to_owned_value();
        Some((value, env.shard.dbs[db].expire_of(&src)))
    });
    let coord = Box::new(CopyCoord {
        first: Some(first),
        dst: args.get(2).to_vec(),
        dst_shard: shard_of(args.get(2), n),
        opts: o,
        stored: false,
    });
    Ok(as_received(coord, args, db))
}

/// Steps of a cross-shard COPY: the source's read (issued at build time),
/// then the store on the destination's shard, then the reply.
struct CopyCoord {
    first: Option<Plan>,
    dst: Vec<u8>,
    dst_shard: usize,
    opts: CopyOpts,
    stored: bool,
}

impl Coordinator for CopyCoord {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if let Some(p) = self.first.take() {
            *plan = p;
            return Ok(());
        }
        if self.stored {
            let copied = outputs::<bool>(results).pop().unwrap_or(false);
            out.int(copied as i64);
            return Ok(());
        }
        let Some((value, at)) = outputs::<Option<(Value, u64)>>(results).pop().flatten() else {
            out.int(0);
            return Ok(());
        };
        let (dst, db, replace) = (self.dst.clone(), self.opts.dst_db, self.opts.replace);
        plan.run(self.dst_shard, move |env| {
            copy_store(env.shard, db, &dst, value, at, replace)
        });
        plan.last = true;
        self.stored = true;
        Ok(())
    }
}

/// MOVE key db: 1 if moved, 0 if the key is missing here or exists there.
fn move_(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let dst_db = parse_db(args.get(2), ctx.databases)?;
    let (db, key) = (ctx.db, args.get(1));
    if dst_db == db {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    if ctx.shard.lookup_write(db, key).is_none() || ctx.shard.lookup_write(dst_db, key).is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    // INVARIANT: looked up (and not expired) just above.
    let (entry, at) = ctx.shard.dbs[db]
        .remove_with_ttl(key)
        .expect("INVARIANT: key present");
    ctx.shard.dbs[dst_db].insert(key, entry, at);
    ctx.propagate_as_is(args);
    ctx.shard.notify(db, ev::GENERIC, "move_from", key);
    ctx.shard.notify(dst_db, ev::GENERIC, "move_to", key);
    ctx.out.int(1);
    Ok(())
}

// ---------------------------------------------------------------------------
// KEYS SCAN RANDOMKEY
// ---------------------------------------------------------------------------

/// KEYS pattern: every live key matching the glob, shard by shard. Expired
/// keys are skipped but not deleted (Redis's `keyIsExpired`).
fn keys_(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    let pattern = args.get(1).to_vec();
    Ok(fan_out(
        c.nshards(),
        move |env| {
            let all = pattern == b"*";
            let now = env.shard.now_ms;
            let d = &env.shard.dbs[db];
            d.iter()
                .filter(|(k, e)| {
                    (all || ds::glob_match(&pattern, k, false)) && !d.is_expired(k, e, now)
                })
                .map(|(k, _)| SmallBytes::from(k))
                .collect::<Vec<SmallBytes>>()
        },
        |res, out, _| {
            out.array(res.iter().map(Vec::len).sum());
            for k in res.iter().flatten() {
                out.bulk(k);
            }
            Ok(())
        },
    ))
}

/// The SCAN cursor over several shards.
///
/// The cursor is the shard's `Dict::scan` cursor with the shard index in
/// bits [`ScanCursor::SHIFT`] and up: `cursor = shard << 40 | dict_cursor`.
/// A call starts on the shard the cursor names; when that shard's dict
/// cursor comes back 0 the iteration moves to the start of the next shard
/// (0 after the last one). Each shard is scanned with Redis's
/// reverse-binary cursor from 0 to 0, so SCAN keeps Redis's guarantee: a
/// key present for the whole iteration is returned at least once.
///
/// A call that finishes a shard before its page is full (fewer than COUNT
/// keys gathered, iteration budget left) goes on to the next shard, one
/// job per shard in sequence, rather than replying a short page: so an
/// empty or small database answers `SCAN 0` with cursor 0 in one call, as
/// Redis does, instead of one empty page per shard. Each job still talks
/// to one shard, and a call visits at most every shard once.
///
/// Why bit 40: a dict cursor never exceeds its table's mask, and 2^40
/// buckets is far beyond any shard; keeping the shard below bit 53 keeps
/// cursors exact in clients that parse them as doubles (JavaScript) for up
/// to 8192 shards. With one shard the cursor is exactly Redis's, and any
/// value (however large) is passed to the dict as Redis does. With several
/// shards a cursor naming a shard that does not exist ends the iteration
/// (reply cursor 0, no keys): Redis gives no error for unknown cursors
/// either.
struct ScanCursor;

impl ScanCursor {
    const SHIFT: u32 = 40;
    const DICT_MASK: u64 = (1 << Self::SHIFT) - 1;

    /// `(shard, dict cursor)` of a client's cursor; `None` if it names no
    /// shard.
    fn split(cursor: u64, nshards: usize) -> Option<(usize, u64)> {
        if nshards == 1 {
            return Some((0, cursor));
        }
        let shard = (cursor >> Self::SHIFT) as usize;
        (shard < nshards).then_some((shard, cursor & Self::DICT_MASK))
    }

    /// The reply cursor after scanning `shard` up to `next` (0 = done).
    fn join(shard: usize, next: u64, nshards: usize) -> u64 {
        if next != 0 {
            debug_assert!(nshards == 1 || next <= Self::DICT_MASK);
            return ((shard as u64) << Self::SHIFT) | next;
        }
        if shard + 1 < nshards {
            ((shard + 1) as u64) << Self::SHIFT
        } else {
            0
        }
    }
}

/// Redis's `parseScanCursorOrReply`: `strtoul` in base 10, so an optional
/// sign (a negative value wraps), digits, and nothing after; leading space
/// and overflow are errors, and an empty string is cursor 0. The argument
/// is a C string to Redis: it ends at the first NUL.
pub(crate) fn parse_scan_cursor(arg: &[u8]) -> Result<u64, CmdError> {
    let bad = || CmdError::err("invalid cursor");
    let s = arg.split(|&b| b == 0).next().unwrap_or_default();
    if s.is_empty() {
        return Ok(0);
    }
    // C's isspace(): space, \t, \n, \v, \f, \r.
    if matches!(s[0], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        return Err(bad());
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or_else(bad)?;
    }
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// The options of SCAN and its per-key forms (HSCAN, SSCAN, ZSCAN).
pub(crate) struct ScanOpts<'a> {
    /// COUNT, default 10, at least 1.
    pub count: usize,
    /// MATCH, `None` for no pattern or `*`.
    pub pattern: Option<&'a [u8]>,
    /// TYPE (SCAN only).
    pub type_name: Option<&'a [u8]>,
}

/// Parses `[MATCH pattern] [COUNT count]` (and `[TYPE type]` when
/// `allow_type`) from argument `start` on, with Redis's errors: COUNT not
/// an integer, COUNT < 1, or anything else is a syntax error.
pub(crate) fn parse_scan_opts(
    args: Args<'_>,
    start: usize,
    allow_type: bool,
) -> Result<ScanOpts<'_>, CmdError> {
    let mut o = ScanOpts {
        count: 10,
        pattern: None,
        type_name: None,
    };
    let mut i = start;
    while i < args.len() {
        let a = args.get(i);
        let has_value = i + 1 < args.len();
        if eq_ic(a, "count") && has_value {
            let n = parse_i64(args.get(i + 1))?;
            if n < 1 {
                return Err(CmdError::Syntax);
            }
            o.count = n as usize;
        } else if eq_ic(a, "match") && has_value {
            let p = args.get(i + 1);
            o.pattern = (p != b"*").then_some(p);
        } else if allow_type && eq_ic(a, "type") && has_value {
            o.type_name = Some(args.get(i + 1));
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    Ok(o)
}

/// The reply of a per-key SCAN on a missing key: cursor 0, no elements.
pub(crate) fn reply_empty_scan(out: &mut Reply) {
    out.array(2);
    out.bulk(b"0");
    out.array(0);
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: the next cursor
/// (a bulk string) and a page of keys. COUNT is a hint (default 10): the
/// shard's dict is walked until that many keys were collected, the shard's
/// cursor ends, or `10 * count` buckets were visited, as in Redis; then
/// MATCH, TYPE and expiry filter the page (expired keys are deleted).
fn scan(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let cursor = parse_scan_cursor(args.get(1))?;
    let o = parse_scan_opts(args, 2, true)?;
    let (count, pattern, type_name) = (
        o.count,
        o.pattern.map(<[u8]>::to_vec),
        o.type_name.map(<[u8]>::to_vec),
    );
    let n = c.nshards();
    let start = ScanCursor::split(cursor, n);
    Ok(Box::new(ScanCoord {
        db: c.client.db,
        nshards: n,
        at: start,
        count,
        budget: count.saturating_mul(10),
        gathered: 0,
        pattern,
        type_name,
        keys: Vec::new(),
    }))
}

/// SCAN's locks outside MULTI/EXEC: none. Each call's job on a shard is
/// atomic there, and Redis promises no more of SCAN across its calls: an
/// element present for the whole iteration is returned, one added or
/// removed meanwhile may or may not be. The pages of one call that walks on
/// to the following shards may see a multi-shard command on one shard and
/// not yet on the next, which a SCAN in two calls could see anyway. (It
/// took a whole-shard Read lock on every shard, one after another, to read
/// one of them.) Inside MULTI, EXEC locks every shard (see `multi`).
fn scan_locks(_args: Args<'_>, _db: usize, _nshards: usize) -> Option<crate::tx::LockSet> {
    Some(crate::tx::LockSet::default())
}

/// One SCAN call: a job on the cursor's shard, then on the following
/// shards while the page is not full (see [`ScanCursor`]).
struct ScanCoord {
    db: usize,
    nshards: usize,
    /// The shard and dict cursor the next job scans from; `None` once the
    /// client's cursor named no shard.
    at: Option<(usize, u64)>,
    count: usize,
    /// Dict scan calls left in this SCAN call (Redis's `maxiterations`).
    budget: usize,
    /// Keys gathered before filtering: Redis's page size counts these.
    gathered: usize,
    pattern: Option<Vec<u8>>,
    type_name: Option<Vec<u8>>,
    keys: Vec<SmallBytes>,
}

/// What one shard's SCAN job reports.
struct ScanPart {
    next: u64,
    gathered: usize,
    calls: usize,
    keys: Vec<SmallBytes>,
}

impl ScanCoord {
    fn issue(&self, plan: &mut Plan, shard: usize, cursor: u64) {
        let (db, want, budget) = (self.db, self.count - self.gathered, self.budget);
        let (pattern, type_name) = (self.pattern.clone(), self.type_name.clone());
        plan.run(shard, move |env| {
            let mut part = scan_collect(&env.shard.dbs[db], cursor, want, budget);
            part.keys
                .retain(|k| scan_keep(env.shard, db, k, pattern.as_deref(), type_name.as_deref()));
            part
        });
    }
}

impl Coordinator for ScanCoord {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        let Some((shard, cursor)) = self.at else {
            scan_reply(out, 0, &[]);
            return Ok(());
        };
        let Some(part) = outputs::<ScanPart>(results).pop() else {
            self.issue(plan, shard, cursor);
            return Ok(());
        };
        self.gathered += part.gathered;
        self.budget = self.budget.saturating_sub(part.calls);
        self.keys.extend(part.keys);
        let more = part.next == 0
            && shard + 1 < self.nshards
            && self.gathered < self.count
            && self.budget > 0;
        if more {
            self.at = Some((shard + 1, 0));
            self.issue(plan, shard + 1, 0);
            return Ok(());
        }
        let next = ScanCursor::join(shard, part.next, self.nshards);
        scan_reply(out, next, &self.keys);
        Ok(())
    }
}

/// Redis's SCAN loop on one shard: call the dict's scan until `want`
/// keys were gathered, the cursor returns to 0, or the call budget (Redis's
/// `maxiterations`, `10 * COUNT` per SCAN call) is spent.
fn scan_collect(db: &engine::Db, mut cursor: u64, want: usize, mut budget: usize) -> ScanPart {
    let mut keys = Vec::new();
    let mut calls = 0;
    loop {
        cursor = db.scan(cursor, |k, _| keys.push(SmallBytes::from(k)));
        calls += 1;
        if cursor == 0 || budget == 0 || keys.len() >= want {
            break;
        }
        budget -= 1;
    }
    ScanPart {
        next: cursor,
        gathered: keys.len(),
        calls,
        keys,
    }
}

/// Whether a scanned key stays in the page: MATCH, then TYPE (looked up
/// without touching, so an expired key is deleted and typed `none`, as in
/// Redis 7.0), then expiry.
fn scan_keep(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    pattern: Option<&[u8]>,
    type_name: Option<&[u8]>,
) -> bool {
    if pattern.is_some_and(|p| !ds::glob_match(p, key, false)) {
        return false;
    }
    if let Some(t) = type_name {
        let actual = shard
            .lookup_read(db, key, false)
            .map_or("none", |e| e.value().type_name());
        if !t.eq_ignore_ascii_case(actual.as_bytes()) {
            return false;
        }
    }
    !expire_if_needed(shard, db, key)
}

fn scan_reply(out: &mut Reply, cursor: u64, keys: &[SmallBytes]) {
    out.array(2);
    out.bulk(itoa::Buffer::new().format(cursor).as_bytes());
    out.array(keys.len());
    for k in keys {
        out.bulk(k);
    }
}

/// RANDOMKEY: a random live key, or null when the database is empty.
///
/// One step: every shard answers its size and one random key of its own;
/// the home thread picks among the shards that found a key, weighted by
/// size, so each key is about equally likely wherever it lives. (Asking
/// sizes first and then one shard would cost a second round trip.)
fn randomkey(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(fan_out(
        c.nshards(),
        move |env| {
            let key = env.shard.random_key(db);
            (env.shard.dbs[db].len(), key)
        },
        |res: Vec<(usize, Option<SmallBytes>)>, out, _| {
            let total: usize = res
                .iter()
                .filter(|(_, k)| k.is_some())
                .map(|(n, _)| n)
                .sum();
            if total == 0 {
                out.null();
                return Ok(());
            }
            let mut r = rand::thread_rng().gen_range(0..total);
            for (n, k) in &res {
                let Some(k) = k else { continue };
                if r < *n {
                    out.bulk(k);
                    return Ok(());
                }
                r -= n;
            }
            out.null();
            Ok(())
        },
    ))
}

// ---------------------------------------------------------------------------
// FLUSHDB FLUSHALL SWAPDB
// ---------------------------------------------------------------------------

/// Redis's `LAZYFREE_THRESHOLD`-like cut-off: fewer keys than this over a
/// shard's flushed databases are freed inline, since a thread costs more.
const LAZYFREE_MIN_KEYS: usize = 64;

/// Redis's `getFlushCommandFlags`: `[ASYNC|SYNC]`; `Some(true)` for
/// ASYNC, `None` without an option (`lazyfree-lazy-user-flush` decides,
/// see `engine::lazyfree::Lazy::flush_async`).
fn parse_flush(args: Args<'_>) -> Result<Option<bool>, CmdError> {
    match args.len() {
        1 => Ok(None),
        2 if eq_ic(args.get(1), "sync") => Ok(Some(false)),
        2 if eq_ic(args.get(1), "async") => Ok(Some(true)),
        _ => Err(CmdError::Syntax),
    }
}

/// Empties databases `dbs` of one shard. ASYNC (`mode`, or
/// `lazyfree-lazy-user-flush` without one) swaps the tables out and frees
/// them on a background thread, so the shard never stalls on a large free.
fn flush(shard: &mut Shard, dbs: std::ops::Range<usize>, mode: Option<bool>) {
    // Redis forgets every tracked key on any flush (its table spans the
    // databases); the clients get a null invalidation.
    shard.tracked.clear();
    if !shard.lazy().flush_async(mode) {
        for db in dbs {
            shard.dbs[db].clear();
        }
        return;
    }
    let old: Vec<engine::Db> = dbs.map(|db| shard.dbs[db].take()).collect();
    let keys = old.iter().map(engine::Db::len).sum::<usize>();
    if keys < LAZYFREE_MIN_KEYS {
        return;
    }
    engine::lazyfree::free_in_thread(old, keys as u64);
}

/// FLUSHDB [ASYNC|SYNC]: empties the selected database on every shard.
fn flushdb(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let mode = parse_flush(args)?;
    let db = c.client.db;
    let server = c.server.clone();
    let coord = fan_out(
        c.nshards(),
        move |env| flush(env.shard, db..db + 1, mode),
        move |_: Vec<()>, out, _| {
            invalidate_all(&server);
            out.ok();
            Ok(())
        },
    );
    Ok(as_received(coord, args, db))
}

/// After a flush: every tracking client gets a null invalidation (all its
/// keys), and every shard forgot its tracked keys (in `flush`), as
/// Redis's `trackingInvalidateKeysOnFlush`.
pub(crate) fn invalidate_all(server: &crate::ServerShared) {
    for (id, to) in server.tracking.tracking_clients() {
        server.pubsub.send_one(crate::pubsub::Delivery::Invalidate {
            to,
            id,
            keys: None,
            bcast: false,
        });
    }
}

/// FLUSHALL [ASYNC|SYNC]: empties every database on every shard.
fn flushall(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let mode = parse_flush(args)?;
    let server = c.server.clone();
    let coord = fan_out(
        c.nshards(),
        move |env| {
            let n = env.shard.dbs.len();
            flush(env.shard, 0..n, mode)
        },
        move |_: Vec<()>, out, _| {
            // A save in progress is abandoned; with save rules, the
            // emptied data is saved next (Redis's flushallCommand).
            server.persist.after_flushall(&server);
            invalidate_all(&server);
            out.ok();
            Ok(())
        },
    );
    Ok(as_received(coord, args, c.client.db))
}

/// SWAPDB index1 index2: swaps two databases on every shard.
fn swapdb(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let id = |i: usize, what: &str| {
        let n = parse_i64(args.get(i)).map_err(|_| CmdError::err(what))?;
        i32::try_from(n).map_err(|_| CmdError::err(what))
    };
    let a = id(1, "invalid first DB index")?;
    let b = id(2, "invalid second DB index")?;
    let databases = c.server.databases();
    let check = |x: i32| {
        usize::try_from(x)
            .ok()
            .filter(|&x| x < databases)
            .ok_or(CmdError::DbIndexOutOfRange)
    };
    let (a, b) = (check(a)?, check(b)?);
    let coord = fan_out(
        c.nshards(),
        move |env| {
            if a != b {
                let (lo, hi) = (a.min(b), a.max(b));
                let (x, y) = env.shard.dbs.split_at_mut(hi);
                engine::Db::swap_contents(&mut x[lo], &mut y[0]);
            }
        },
        |_: Vec<()>, out, _| {
            out.ok();
            Ok(())
        },
    );
    Ok(as_received(coord, args, c.client.db))
}

// ---------------------------------------------------------------------------
// OBJECT
// ---------------------------------------------------------------------------

/// Redis's `OBJ_SHARED_INTEGERS`: integers below it are shared objects.
const SHARED_INTEGERS: i64 = 10_000;
/// Redis's `OBJ_SHARED_REFCOUNT` (`INT_MAX`).
const SHARED_REFCOUNT: i64 = 2_147_483_647;

/// OBJECT ENCODING key: the encoding's name, or null.
fn object_encoding(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    match ctx
        .shard
        .lookup_read_with(ctx.db, args.get(2), false, false)
    {
        None => ctx.out.null(),
        Some(e) => ctx.out.bulk(e.value().encoding().as_bytes()),
    }
    Ok(())
}

/// The LFU settings a shard must apply under `cfg`: `Some` only when
/// `maxmemory-policy` is `allkeys-lfu` or `volatile-lfu` (Redis's
/// `MAXMEMORY_FLAG_LFU`), whatever `maxmemory` is.
pub fn lfu_params_of(cfg: &config::Config) -> Option<LfuParams> {
    use config::MaxmemoryPolicy as P;
    matches!(cfg.maxmemory_policy, P::VolatileLfu | P::AllkeysLfu).then_some(LfuParams {
        log_factor: cfg.lfu_log_factor,
        decay_time_min: cfg.lfu_decay_time_min,
    })
}

/// [`lfu_params_of`] the live configuration; the event loop stores it in
/// `Shard::lfu` at start and after every CONFIG SET.
pub fn lfu_params(server: &ServerShared) -> Option<LfuParams> {
    lfu_params_of(&server.config.read().unwrap_or_else(|e| e.into_inner()))
}

/// What OBJECT FREQ/IDLETIME/REFCOUNT need from the configuration.
#[derive(Clone, Copy)]
struct Policy {
    lfu: Option<LfuParams>,
    /// maxmemory is set with an LRU or LFU policy: Redis then stops sharing
    /// small integers (`MAXMEMORY_FLAG_NO_SHARED_INTEGERS`).
    no_shared_integers: bool,
}

fn policy(c: &ConnCtx<'_>) -> Policy {
    use config::MaxmemoryPolicy as P;
    let cfg = c.server.config.read().unwrap_or_else(|e| e.into_inner());
    let lfu = lfu_params_of(&cfg);
    let lru = matches!(cfg.maxmemory_policy, P::VolatileLru | P::AllkeysLru);
    Policy {
        lfu,
        no_shared_integers: cfg.maxmemory != 0 && (lfu.is_some() || lru),
    }
}

/// What an OBJECT subcommand replies once its key is found.
type ObjectReply = Result<i64, CmdError>;

/// OBJECT FREQ/IDLETIME/REFCOUNT: one job on the key's shard (looked up
/// without touching it; missing → null), its answer computed by `f`.
fn object_generic(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
    f: fn(&Entry, u64, Policy) -> ObjectReply,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let pol = policy(c);
    let db = c.client.db;
    let key = args.get(2).to_vec();
    let mut plan = Plan::default();
    plan.run(shard_of(&key, c.nshards()), move |env| {
        let now = env.shard.now_ms;
        env.shard
            .lookup_read_with(db, &key, false, false)
            .map(|e| f(e, now, pol))
    });
    Ok(OneStep::boxed(
        plan,
        |mut res: Vec<Option<ObjectReply>>, out: &mut Reply, _: &mut ClientState| {
            match res.pop().flatten() {
                None => out.null(),
                Some(r) => out.int(r?),
            }
            Ok(())
        },
    ))
}

/// OBJECT FREQ key: the key's LFU counter decayed to now, not stored
/// (Redis's `LFUDecrAndReturn`); a missing key is null, and an existing one
/// an error unless an LFU policy is set.
fn object_freq(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    object_generic(c, args, |e, now, pol| {
        let Some(p) = pol.lfu else {
            return Err(CmdError::err(
                "An LFU maxmemory policy is not selected, access frequency not tracked. \
                 Please note that when switching between policies at runtime LRU and LFU \
                 data will take some time to adjust.",
            ));
        };
        Ok(i64::from(e.lfu_freq(now, p)))
    })
}

/// OBJECT IDLETIME key: seconds since the last access; an error under an
/// LFU policy. The lookup does not update the access time.
fn object_idletime(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    object_generic(c, args, |e, now, pol| {
        if pol.lfu.is_some() {
            return Err(CmdError::err(
                "An LFU maxmemory policy is selected, idle time not tracked. \
                 Please note that when switching between policies at runtime LRU and LFU \
                 data will take some time to adjust.",
            ));
        }
        Ok(e.idle_s(now) as i64)
    })
}

/// OBJECT REFCOUNT key: Redis shares the integers 0..9999 (refcount
/// `INT_MAX`) unless maxmemory is set with an LRU/LFU policy; every other
/// value has one reference.
fn object_refcount(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    object_generic(c, args, |e, _, pol| {
        let shared = match e.value() {
            ValueRef::Str(s) => match s.view() {
                StrView::Int(n) => !pol.no_shared_integers && (0..SHARED_INTEGERS).contains(&n),
                StrView::Bytes(_) => false,
            },
            _ => false,
        };
        Ok(if shared { SHARED_REFCOUNT } else { 1 })
    })
}

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

/// OBJECT HELP: the help lines as status replies.
fn object_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.array(OBJECT_HELP.len());
    for line in OBJECT_HELP {
        c.out.simple(line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::testutil::TestServer;

    const SHARD_COUNTS: [usize; 3] = [1, 2, 4];

    /// A key starting with `prefix` that lives on `shard` of `n`.
    fn key_on(prefix: &str, shard: usize, n: usize) -> String {
        (0..10_000)
            .map(|i| format!("{prefix}{i}"))
            .find(|k| shard_of(k.as_bytes(), n) == shard)
            .expect("some key lands on every shard")
    }

    /// Two keys on different shards when `n > 1` (the same shard otherwise).
    fn apart(n: usize) -> (String, String) {
        (key_on("src", 0, n), key_on("dst", n - 1, n))
    }

    /// Makes `key` (in `db`) expired without deleting it, as if its
    /// deadline had just passed.
    fn expire_now(t: &mut TestServer, db: usize, key: &str) {
        let n = t.shards.len();
        let s = shard_of(key.as_bytes(), n);
        assert!(t.shards[s].dbs[db].set_expire(key.as_bytes(), 1));
    }

    fn now_ms() -> u64 {
        engine::now_ms()
    }

    #[test]
    fn del_unlink_exists_touch() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["MSET", "a", "1", "b", "2", "c", "3", "d", "4"]);
            assert_eq!(t.run(&["EXISTS", "a", "b", "a", "zz"]), ":3\r\n");
            assert_eq!(t.run(&["TOUCH", "a", "zz", "c", "c"]), ":3\r\n");
            assert_eq!(t.run(&["UNLINK", "a", "zz", "a"]), ":1\r\n");
            assert_eq!(t.run(&["DEL", "b", "c", "zz"]), ":2\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":1\r\n");
            expire_now(&mut t, 0, "d");
            assert_eq!(t.run(&["EXISTS", "d"]), ":0\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            assert_eq!(
                t.run(&["UNLINK"]),
                "-ERR wrong number of arguments for 'unlink' command\r\n"
            );
            assert_eq!(
                t.run(&["TOUCH"]),
                "-ERR wrong number of arguments for 'touch' command\r\n"
            );
        }
    }

    #[test]
    fn touch_updates_access_time_and_exists_does_not() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        t.shards[0].dbs[0].get_mut(b"k").unwrap().access_s -= 100;
        t.run(&["EXISTS", "k"]);
        t.run(&["TYPE", "k"]);
        t.run(&["TTL", "k"]);
        let idle = t.run(&["OBJECT", "IDLETIME", "k"]);
        assert!(idle == ":100\r\n" || idle == ":101\r\n", "{idle}");
        assert_eq!(t.run(&["TOUCH", "k"]), ":1\r\n");
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "k"]), ":0\r\n");
    }

    #[test]
    fn type_of_keys() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["SET", "s", "v"]);
            assert_eq!(t.run(&["TYPE", "s"]), "+string\r\n");
            assert_eq!(t.run(&["TYPE", "nokey"]), "+none\r\n");
            expire_now(&mut t, 0, "s");
            assert_eq!(t.run(&["TYPE", "s"]), "+none\r\n");
            assert_eq!(
                t.run(&["TYPE"]),
                "-ERR wrong number of arguments for 'type' command\r\n"
            );
        }
    }

    #[test]
    fn expire_option_errors() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        let both = "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n";
        for opts in [["nx", "xx"], ["NX", "gt"], ["lt", "nx"]] {
            assert_eq!(t.run(&["EXPIRE", "k", "100", opts[0], opts[1]]), both);
        }
        assert_eq!(
            t.run(&["PEXPIRE", "k", "100", "gt", "LT"]),
            "-ERR GT and LT options at the same time are not compatible\r\n"
        );
        assert_eq!(
            t.run(&["EXPIRE", "k", "100", "foo"]),
            "-ERR Unsupported option foo\r\n"
        );
        // Options are checked before the number, and without the key.
        assert_eq!(
            t.run(&["EXPIRE", "nokey", "abc", "foo"]),
            "-ERR Unsupported option foo\r\n"
        );
        assert_eq!(
            t.run(&["EXPIRE", "k", "abc"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(t.run(&["EXPIRE", "nokey", "10"]), ":0\r\n");
        assert_eq!(
            t.run(&["EXPIRE", "k"]),
            "-ERR wrong number of arguments for 'expire' command\r\n"
        );
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
    }

    #[test]
    fn expire_overflow_errors() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        let cases: &[(&str, &str, &str)] = &[
            ("EXPIRE", "9223372036854775807", "expire"),
            ("EXPIRE", "9223372036854776", "expire"),
            ("EXPIRE", "-9223372036854776", "expire"),
            // Fits the unit conversion but not the addition of now.
            ("EXPIRE", "9223372036854775", "expire"),
            ("PEXPIRE", "9223372036854775807", "pexpire"),
            ("EXPIREAT", "9223372036854776", "expireat"),
        ];
        for (cmd, v, name) in cases {
            assert_eq!(
                t.run(&[cmd, "k", v]),
                format!("-ERR invalid expire time in '{name}' command\r\n"),
                "{cmd} {v}"
            );
        }
        // The extremes that do fit.
        assert_eq!(t.run(&["PEXPIREAT", "k", "9223372036854775807"]), ":1\r\n");
        assert_eq!(t.run(&["PEXPIRETIME", "k"]), ":9223372036854775807\r\n");
        assert_eq!(t.run(&["EXPIRETIME", "k"]), ":9223372036854776\r\n");
        assert_eq!(t.run(&["EXPIREAT", "k", "9223372036854775"]), ":1\r\n");
        assert_eq!(t.run(&["PEXPIRETIME", "k"]), ":9223372036854775000\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":1\r\n");
        // A negative deadline is in the past: the key is deleted.
        assert_eq!(t.run(&["EXPIREAT", "k", "-9223372036854775"]), ":1\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["PEXPIRE", "k", "-9223372036854775808"]), ":1\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
    }

    #[test]
    fn expire_in_the_past_deletes() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            for (cmd, v) in [
                ("EXPIRE", "0"),
                ("EXPIRE", "-1"),
                ("PEXPIRE", "-5"),
                ("EXPIREAT", "1"),
                ("PEXPIREAT", "0"),
            ] {
                t.run(&["SET", "k", "v"]);
                assert_eq!(t.run(&[cmd, "k", v]), ":1\r\n", "{cmd} {v}");
                assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
                assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            }
        }
    }

    #[test]
    fn expire_conditions() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        // No deadline: GT never applies, LT always does; XX refuses.
        assert_eq!(t.run(&["EXPIRE", "k", "100", "gt"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "xx"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "nx"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "nx"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "50", "gt"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "200", "gt"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":200\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "300", "lt"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "50", "LT"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":50\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "60", "xx", "gt"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":60\r\n");
        assert_eq!(t.run(&["PERSIST", "k"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "11", "lt"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":11\r\n");
        // LT with a past deadline deletes.
        assert_eq!(t.run(&["EXPIRE", "k", "-5", "lt"]), ":1\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
        // An expired key counts as missing.
        t.run(&["SET", "k", "v"]);
        expire_now(&mut t, 0, "k");
        assert_eq!(t.run(&["EXPIRE", "k", "100"]), ":0\r\n");
        assert_eq!(t.run(&["PERSIST", "k"]), ":0\r\n");
    }

    #[test]
    fn ttl_family() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["SET", "k", "v"]);
            for cmd in ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"] {
                assert_eq!(t.run(&[cmd, "k"]), ":-1\r\n");
                assert_eq!(t.run(&[cmd, "nokey"]), ":-2\r\n");
            }
            let at = now_ms() + 100_000;
            let at_s = at.to_string();
            assert_eq!(t.run(&["PEXPIREAT", "k", &at_s]), ":1\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", "k"]), format!(":{at}\r\n"));
            assert_eq!(
                t.run(&["EXPIRETIME", "k"]),
                format!(":{}\r\n", (at + 500) / 1000)
            );
            assert_eq!(t.run(&["TTL", "k"]), ":100\r\n");
            let pttl: u64 = t.run(&["PTTL", "k"])[1..].trim().parse().unwrap();
            assert!((99_000..=100_000).contains(&pttl), "{pttl}");
            // Seconds round to nearest: 1499 ms is 1 s, 1500 ms is 2 s.
            let now = now_ms();
            t.run(&["PEXPIREAT", "k", &(now + 100_000_000).to_string()]);
            assert_eq!(t.run(&["EXPIRE", "k", "1"]), ":1\r\n");
            assert_eq!(t.run(&["TTL", "k"]), ":1\r\n");
            assert_eq!(t.run(&["PERSIST", "k"]), ":1\r\n");
            assert_eq!(t.run(&["PERSIST", "k"]), ":0\r\n");
            assert_eq!(t.run(&["PERSIST", "nokey"]), ":0\r\n");
            assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
            expire_now(&mut t, 0, "k");
            for cmd in ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"] {
                assert_eq!(t.run(&[cmd, "k"]), ":-2\r\n");
            }
            assert_eq!(
                t.run(&["TTL", "a", "b"]),
                "-ERR wrong number of arguments for 'ttl' command\r\n"
            );
        }
    }

    #[test]
    fn set_expiry_survives_as_volatile() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        t.run(&["EXPIRE", "k", "100"]);
        assert_eq!(t.shards[0].dbs[0].volatile_len(), 1);
        t.run(&["PERSIST", "k"]);
        assert_eq!(t.shards[0].dbs[0].volatile_len(), 0);
    }

    #[test]
    fn rename_and_renamenx() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (a, b) = apart(n);
            let (a, b) = (a.as_str(), b.as_str());
            assert_eq!(t.run(&["RENAME", a, b]), "-ERR no such key\r\n");
            assert_eq!(t.run(&["RENAMENX", a, b]), "-ERR no such key\r\n");
            assert_eq!(t.run(&["RENAME", a, a]), "-ERR no such key\r\n");
            assert_eq!(t.run(&["RENAMENX", a, a]), "-ERR no such key\r\n");
            t.run(&["SET", a, "1"]);
            assert_eq!(t.run(&["RENAME", a, a]), "+OK\r\n");
            assert_eq!(t.run(&["RENAMENX", a, a]), ":0\r\n");
            assert_eq!(t.run(&["GET", a]), "$1\r\n1\r\n");
            // Source missing is an error even when the destination exists.
            t.run(&["SET", b, "2"]);
            assert_eq!(t.run(&["RENAMENX", "nope", b]), "-ERR no such key\r\n");
            assert_eq!(t.run(&["RENAMENX", a, b]), ":0\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n2\r\n");
            assert_eq!(t.run(&["GET", a]), "$1\r\n1\r\n");
            // The deadline moves with the value; the old one is replaced.
            let at = (now_ms() + 100_000).to_string();
            t.run(&["PEXPIREAT", a, &at]);
            assert_eq!(t.run(&["RENAME", a, b]), "+OK\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n1\r\n");
            assert_eq!(t.run(&["EXISTS", a]), ":0\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", b]), format!(":{at}\r\n"));
            assert_eq!(t.run(&["RENAMENX", b, a]), ":1\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", a]), format!(":{at}\r\n"));
            assert_eq!(t.run(&["EXISTS", b]), ":0\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":1\r\n");
            // A destination without TTL replaced by a source without TTL.
            t.run(&["PERSIST", a]);
            t.run(&["SET", b, "x"]);
            t.run(&["EXPIRE", b, "100"]);
            assert_eq!(t.run(&["RENAME", a, b]), "+OK\r\n");
            assert_eq!(t.run(&["TTL", b]), ":-1\r\n");
            // An expired source does not exist.
            t.run(&["SET", a, "v"]);
            expire_now(&mut t, 0, a);
            assert_eq!(t.run(&["RENAME", a, b]), "-ERR no such key\r\n");
            // An expired destination does not block RENAMENX.
            t.run(&["SET", a, "v"]);
            expire_now(&mut t, 0, b);
            assert_eq!(t.run(&["RENAMENX", a, b]), ":1\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\nv\r\n");
            // Other databases are untouched.
            t.run(&["SELECT", "1"]);
            assert_eq!(t.run(&["RENAME", b, a]), "-ERR no such key\r\n");
            t.run(&["SELECT", "0"]);
            assert_eq!(
                t.run(&["RENAME", a]),
                "-ERR wrong number of arguments for 'rename' command\r\n"
            );
        }
    }

    #[test]
    fn rename_keeps_encoding_and_access_time() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (a, b) = apart(n);
            t.run(&["SET", &a, "12345"]);
            let s = shard_of(a.as_bytes(), n);
            t.shards[s].dbs[0].get_mut(a.as_bytes()).unwrap().access_s -= 1000;
            t.run(&["RENAME", &a, &b]);
            assert_eq!(t.run(&["OBJECT", "ENCODING", &b]), "$3\r\nint\r\n");
            // RENAME looks the source up for writing, which touches it.
            assert_eq!(t.run(&["OBJECT", "IDLETIME", &b]), ":0\r\n");
        }
    }

    #[test]
    fn copy_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (a, b) = apart(n);
            let (a, b) = (a.as_str(), b.as_str());
            assert_eq!(t.run(&["COPY", a, b]), ":0\r\n");
            t.run(&["SET", a, "1"]);
            let at = (now_ms() + 100_000).to_string();
            t.run(&["PEXPIREAT", a, &at]);
            assert_eq!(t.run(&["COPY", a, b]), ":1\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n1\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", b]), format!(":{at}\r\n"));
            assert_eq!(t.run(&["PEXPIRETIME", a]), format!(":{at}\r\n"));
            t.run(&["SET", a, "2"]);
            assert_eq!(t.run(&["COPY", a, b]), ":0\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n1\r\n");
            assert_eq!(t.run(&["COPY", a, b, "REPLACE"]), ":1\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n2\r\n");
            assert_eq!(t.run(&["TTL", b]), ":-1\r\n");
            // Into another database, same name allowed there.
            assert_eq!(t.run(&["COPY", a, a, "DB", "1"]), ":1\r\n");
            assert_eq!(t.run(&["COPY", a, b, "db", "1"]), ":1\r\n");
            assert_eq!(t.run(&["COPY", a, b, "db", "1"]), ":0\r\n");
            assert_eq!(
                t.run(&["COPY", a, b, "replace", "replace", "db", "2", "db", "1"]),
                ":1\r\n"
            );
            t.run(&["SELECT", "1"]);
            assert_eq!(t.run(&["MGET", a, b]), "*2\r\n$1\r\n2\r\n$1\r\n2\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":2\r\n");
            t.run(&["SELECT", "2"]);
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            t.run(&["SELECT", "0"]);
            // An expired source is missing; an expired destination is free.
            expire_now(&mut t, 0, b);
            assert_eq!(t.run(&["COPY", a, b]), ":1\r\n");
            expire_now(&mut t, 0, a);
            assert_eq!(t.run(&["COPY", a, b, "REPLACE"]), ":0\r\n");
        }
    }

    #[test]
    fn copy_errors() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (a, b) = apart(n);
            let (a, b) = (a.as_str(), b.as_str());
            t.run(&["SET", a, "1"]);
            let same = "-ERR source and destination objects are the same\r\n";
            assert_eq!(t.run(&["COPY", a, a]), same);
            assert_eq!(t.run(&["COPY", a, a, "db", "0"]), same);
            let range = "-ERR DB index is out of range\r\n";
            assert_eq!(t.run(&["COPY", a, b, "db", "16"]), range);
            assert_eq!(t.run(&["COPY", a, b, "db", "-1"]), range);
            assert_eq!(t.run(&["COPY", "nokey", b, "db", "16"]), range);
            // The bad index is reported before a later syntax error.
            assert_eq!(t.run(&["COPY", a, b, "db", "16", "foo"]), range);
            assert_eq!(
                t.run(&["COPY", a, b, "db", "99999999999"]),
                "-ERR value is out of range, value must between -2147483648 and 2147483647\r\n"
            );
            assert_eq!(
                t.run(&["COPY", a, b, "db", "1.5"]),
                "-ERR value is not an integer or out of range\r\n"
            );
            assert_eq!(t.run(&["COPY", a, b, "db"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["COPY", a, b, "foo"]), "-ERR syntax error\r\n");
            assert_eq!(
                t.run(&["COPY", a]),
                "-ERR wrong number of arguments for 'copy' command\r\n"
            );
            assert_eq!(t.run(&["DBSIZE"]), ":1\r\n");
        }
    }

    #[test]
    fn move_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let same = "-ERR source and destination objects are the same\r\n";
            assert_eq!(t.run(&["MOVE", "k", "0"]), same);
            assert_eq!(
                t.run(&["MOVE", "k", "16"]),
                "-ERR DB index is out of range\r\n"
            );
            assert_eq!(
                t.run(&["MOVE", "k", "-1"]),
                "-ERR DB index is out of range\r\n"
            );
            assert_eq!(
                t.run(&["MOVE", "k", "abc"]),
                "-ERR value is not an integer or out of range\r\n"
            );
            assert_eq!(
                t.run(&["MOVE", "k", "99999999999"]),
                "-ERR value is out of range, value must between -2147483648 and 2147483647\r\n"
            );
            assert_eq!(t.run(&["MOVE", "k", "1"]), ":0\r\n");
            t.run(&["SET", "k", "v"]);
            let at = (now_ms() + 100_000).to_string();
            t.run(&["PEXPIREAT", "k", &at]);
            assert_eq!(t.run(&["MOVE", "k", "1"]), ":1\r\n");
            assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
            t.run(&["SELECT", "1"]);
            assert_eq!(t.run(&["GET", "k"]), "$1\r\nv\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", "k"]), format!(":{at}\r\n"));
            t.run(&["SELECT", "0"]);
            t.run(&["SET", "k", "other"]);
            assert_eq!(t.run(&["MOVE", "k", "1"]), ":0\r\n");
            assert_eq!(t.run(&["GET", "k"]), "$5\r\nother\r\n");
            // An expired key in the target database does not block.
            expire_now(&mut t, 1, "k");
            assert_eq!(t.run(&["MOVE", "k", "1"]), ":1\r\n");
            t.run(&["SELECT", "1"]);
            assert_eq!(t.run(&["GET", "k"]), "$5\r\nother\r\n");
        }
    }

    #[test]
    fn keys_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            assert_eq!(t.run(&["KEYS", "*"]), "*0\r\n");
            let names: Vec<String> = (0..50).map(|i| format!("key:{i}")).collect();
            for k in &names {
                t.run(&["SET", k, "v"]);
            }
            t.run(&["SET", "other", "v"]);
            t.run(&["SET", "gone", "v"]);
            expire_now(&mut t, 0, "gone");
            let got = |t: &mut TestServer, p: &str| -> Vec<String> {
                let mut v: Vec<String> = t
                    .run(&["KEYS", p])
                    .split("\r\n")
                    .skip(1)
                    .filter(|l| !l.starts_with('$') && !l.is_empty())
                    .map(String::from)
                    .collect();
                v.sort();
                v
            };
            let mut all = names.clone();
            all.push("other".into());
            all.sort();
            assert_eq!(got(&mut t, "*"), all);
            assert_eq!(got(&mut t, "key:*").len(), 50);
            assert_eq!(
                got(&mut t, "key:1?"),
                (10..20).map(|i| format!("key:{i}")).collect::<Vec<_>>()
            );
            assert_eq!(got(&mut t, "o[st]her"), vec!["other".to_string()]);
            assert_eq!(got(&mut t, "KEY:*").len(), 0);
            // KEYS skips the expired key but leaves it for expiry to delete.
            assert_eq!(t.run(&["DBSIZE"]), ":52\r\n");
            assert_eq!(
                t.run(&["KEYS"]),
                "-ERR wrong number of arguments for 'keys' command\r\n"
            );
        }
    }

    #[test]
    fn keys_reply_bytes() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "c", "1"]);
        assert_eq!(t.run(&["KEYS", "c*"]), "*1\r\n$1\r\nc\r\n");
    }

    #[test]
    fn scan_cursor_parsing() {
        let ok = |s: &[u8]| parse_scan_cursor(s);
        assert_eq!(ok(b"0"), Ok(0));
        assert_eq!(ok(b""), Ok(0));
        assert_eq!(ok(b"+0"), Ok(0));
        assert_eq!(ok(b"-0"), Ok(0));
        assert_eq!(ok(b"-1"), Ok(u64::MAX));
        assert_eq!(ok(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(ok(b"12\0junk"), Ok(12));
        let bad = Err(CmdError::err("invalid cursor"));
        for s in [
            &b"18446744073709551616"[..],
            b" 0",
            b"0x",
            b"x",
            b"+",
            b"-",
            b"1 ",
        ] {
            assert_eq!(ok(s), bad, "{s:?}");
        }
    }

    #[test]
    fn scan_errors_and_shapes() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let inv = "-ERR invalid cursor\r\n";
            assert_eq!(t.run(&["SCAN", "x"]), inv);
            assert_eq!(t.run(&["SCAN", " 0"]), inv);
            assert_eq!(t.run(&["SCAN", "x", "foo"]), inv);
            assert_eq!(t.run(&["SCAN", "18446744073709551616"]), inv);
            let syn = "-ERR syntax error\r\n";
            assert_eq!(t.run(&["SCAN", "0", "count", "0"]), syn);
            assert_eq!(t.run(&["SCAN", "0", "count", "-1"]), syn);
            assert_eq!(t.run(&["SCAN", "0", "count"]), syn);
            assert_eq!(t.run(&["SCAN", "0", "match"]), syn);
            assert_eq!(t.run(&["SCAN", "0", "foo"]), syn);
            assert_eq!(
                t.run(&["SCAN", "0", "count", "abc"]),
                "-ERR value is not an integer or out of range\r\n"
            );
            assert_eq!(
                t.run(&["SCAN"]),
                "-ERR wrong number of arguments for 'scan' command\r\n"
            );
        }
        // One key, one shard: exactly Redis's bytes.
        let mut t = TestServer::new(1);
        t.run(&["SET", "c", "1"]);
        let one = "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nc\r\n";
        for c in ["0", "", "+0", "-0"] {
            assert_eq!(t.run(&["SCAN", c]), one, "{c}");
        }
        // The dict sees these cursors as Redis does: one bucket, then 0.
        for c in ["-1", "18446744073709551615"] {
            assert!(t.run(&["SCAN", c]).starts_with("*2\r\n$1\r\n0\r\n*"), "{c}");
        }
        assert_eq!(t.run(&["SCAN", "0", "type", "string"]), one);
        assert_eq!(t.run(&["SCAN", "0", "type", "STRING"]), one);
        assert_eq!(
            t.run(&["SCAN", "0", "type", "nosuch"]),
            "*2\r\n$1\r\n0\r\n*0\r\n"
        );
        assert_eq!(
            t.run(&["SCAN", "0", "match", "*", "count", "5", "type", "string"]),
            one
        );
        assert_eq!(
            t.run(&["SCAN", "0", "match", "d*"]),
            "*2\r\n$1\r\n0\r\n*0\r\n"
        );
        t.client.resp3 = true;
        assert_eq!(t.run(&["SCAN", "0"]), one);
    }

    /// Runs a whole SCAN iteration; `between` runs after every call.
    fn scan_all(
        t: &mut TestServer,
        extra: &[&str],
        mut between: impl FnMut(&mut TestServer, usize),
    ) -> (Vec<String>, usize) {
        let mut cursor = "0".to_string();
        let mut seen = Vec::new();
        let mut calls = 0;
        loop {
            let mut argv = vec!["SCAN", cursor.as_str()];
            argv.extend_from_slice(extra);
            let reply = t.run(&argv);
            let lines: Vec<&str> = reply.split("\r\n").collect();
            assert_eq!(lines[0], "*2");
            let next = lines[2].to_string();
            let count: usize = lines[3][1..].parse().unwrap();
            for i in 0..count {
                seen.push(lines[5 + 2 * i].to_string());
            }
            calls += 1;
            assert!(calls < 100_000, "SCAN does not terminate");
            between(t, calls);
            if next == "0" {
                return (seen, calls);
            }
            cursor = next;
        }
    }

    #[test]
    fn scan_covers_every_key() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (seen, calls) = scan_all(&mut t, &[], |_, _| {});
            assert!(seen.is_empty());
            assert_eq!(calls, 1, "an empty database is one call");
            assert_eq!(t.run(&["SCAN", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
            for i in 0..1000 {
                t.run(&["SET", &format!("k{i}"), "v"]);
            }
            let (seen, calls) = scan_all(&mut t, &[], |_, _| {});
            let set: HashSet<String> = seen.iter().cloned().collect();
            assert_eq!(set.len(), 1000);
            // No rehash happened, so no duplicates either.
            assert_eq!(seen.len(), 1000);
            assert!(calls >= 1000 / 10 / 2, "COUNT 10 pages: {calls}");
            let (seen, _) = scan_all(&mut t, &["COUNT", "100000"], |_, _| {});
            assert_eq!(seen.len(), 1000);
            let (seen, _) = scan_all(&mut t, &["MATCH", "k1*"], |_, _| {});
            assert_eq!(seen.len(), 111);
            let (seen, _) = scan_all(&mut t, &["TYPE", "hash"], |_, _| {});
            assert!(seen.is_empty());
        }
    }

    #[test]
    fn scan_guarantee_while_keys_are_added_and_removed() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            for i in 0..500 {
                t.run(&["SET", &format!("stay{i}"), "v"]);
                t.run(&["SET", &format!("temp{i}"), "v"]);
            }
            // Between calls: grow the tables a lot (forcing rehashes), and
            // delete the temporary keys, shrinking them later.
            let mut added = 0;
            let (seen, _) = scan_all(&mut t, &["COUNT", "7"], |t, call| {
                for _ in 0..40 {
                    t.run(&["SET", &format!("new{added}"), "v"]);
                    added += 1;
                }
                if call % 3 == 0 {
                    for i in (call * 10)..(call * 10 + 10).min(500) {
                        t.run(&["DEL", &format!("temp{i}")]);
                    }
                }
            });
            let set: HashSet<String> = seen.into_iter().collect();
            for i in 0..500 {
                assert!(set.contains(&format!("stay{i}")), "n={n} stay{i} missed");
            }
            assert!(added > 1000);
        }
    }

    #[test]
    fn scan_cursor_names_the_shard() {
        let n = 4;
        let mut t = TestServer::new(n);
        // Keys on shards 1 and 3 only.
        let k1 = key_on("a", 1, n);
        let k3 = key_on("b", 3, n);
        t.run(&["SET", &k1, "v"]);
        t.run(&["SET", &k3, "v"]);
        let pair = |k1: &str, k3: &str| {
            format!(
                "*2\r\n$1\r\n0\r\n*2\r\n${}\r\n{k1}\r\n${}\r\n{k3}\r\n",
                k1.len(),
                k3.len()
            )
        };
        // A page that is not full goes on to the next shards.
        assert_eq!(t.run(&["SCAN", "0"]), pair(&k1, &k3));
        // Starting at shard 3, only its key.
        assert_eq!(
            t.run(&["SCAN", &(3u64 << 40).to_string()]),
            format!("*2\r\n$1\r\n0\r\n*1\r\n${}\r\n{k3}\r\n", k3.len())
        );
        // Shard 2 is empty: the call moves on to shard 3.
        assert_eq!(
            t.run(&["SCAN", &(2u64 << 40).to_string()]),
            format!("*2\r\n$1\r\n0\r\n*1\r\n${}\r\n{k3}\r\n", k3.len())
        );
        // COUNT 1: the first page stops in shard 1 or at the start of shard
        // 2 or 3; the cursor's shard never goes backwards.
        let mut cursor = 0u64;
        let mut seen = Vec::new();
        let mut last_shard = 0;
        loop {
            let r = t.run(&["SCAN", &cursor.to_string(), "COUNT", "1"]);
            let lines: Vec<&str> = r.split("\r\n").collect();
            cursor = lines[2].parse().unwrap();
            let nkeys: usize = lines[3][1..].parse().unwrap();
            seen.extend((0..nkeys).map(|i| lines[5 + 2 * i].to_string()));
            if cursor == 0 {
                break;
            }
            let shard = (cursor >> 40) as usize;
            assert!(shard >= last_shard && shard < n, "{cursor}");
            last_shard = shard;
        }
        assert_eq!(seen, vec![k1.clone(), k3.clone()]);
        // A cursor naming no shard ends the iteration.
        assert_eq!(
            t.run(&["SCAN", &(9u64 << 40).to_string()]),
            "*2\r\n$1\r\n0\r\n*0\r\n"
        );
        assert_eq!(t.run(&["SCAN", "-1"]), "*2\r\n$1\r\n0\r\n*0\r\n");
        assert_eq!(ScanCursor::split(5, 1), Some((0, 5)));
        assert_eq!(ScanCursor::split(u64::MAX, 1), Some((0, u64::MAX)));
        assert_eq!(ScanCursor::split((2 << 40) | 6, 4), Some((2, 6)));
        assert_eq!(ScanCursor::join(0, 0, 1), 0);
        assert_eq!(ScanCursor::join(0, 12, 1), 12);
        assert_eq!(ScanCursor::join(1, 12, 4), (1 << 40) | 12);
        assert_eq!(ScanCursor::join(3, 0, 4), 0);
    }

    #[test]
    fn scan_skips_and_deletes_expired_keys() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            for i in 0..20 {
                t.run(&["SET", &format!("k{i}"), "v"]);
            }
            for i in 0..5 {
                expire_now(&mut t, 0, &format!("k{i}"));
            }
            let (seen, _) = scan_all(&mut t, &["COUNT", "1000"], |_, _| {});
            assert_eq!(seen.len(), 15);
            assert_eq!(t.run(&["DBSIZE"]), ":15\r\n");
            for i in 5..10 {
                expire_now(&mut t, 0, &format!("k{i}"));
            }
            let (seen, _) = scan_all(&mut t, &["TYPE", "string"], |_, _| {});
            assert_eq!(seen.len(), 10);
            assert_eq!(t.run(&["DBSIZE"]), ":10\r\n");
        }
    }

    #[test]
    fn scan_uses_the_selected_db() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["SET", "a", "1"]);
            t.run(&["SELECT", "3"]);
            t.run(&["SET", "b", "1"]);
            let (seen, _) = scan_all(&mut t, &[], |_, _| {});
            assert_eq!(seen, vec!["b".to_string()]);
        }
    }

    #[test]
    fn randomkey_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            assert_eq!(t.run(&["RANDOMKEY"]), "$-1\r\n");
            t.client.resp3 = true;
            assert_eq!(t.run(&["RANDOMKEY"]), "_\r\n");
            t.client.resp3 = false;
            t.run(&["SET", "only", "v"]);
            assert_eq!(t.run(&["RANDOMKEY"]), "$4\r\nonly\r\n");
            let names: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
            for k in &names {
                t.run(&["SET", k, "v"]);
            }
            let mut seen = HashSet::new();
            for _ in 0..2000 {
                let r = t.run(&["RANDOMKEY"]);
                seen.insert(r.split("\r\n").nth(1).unwrap().to_string());
                if seen.len() == 9 {
                    break;
                }
            }
            assert_eq!(seen.len(), 9, "every key is eventually returned");
            // Only expired keys left: null, and they get deleted.
            t.run(&["FLUSHALL"]);
            t.run(&["SET", "gone", "v"]);
            expire_now(&mut t, 0, "gone");
            assert_eq!(t.run(&["RANDOMKEY"]), "$-1\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            assert_eq!(
                t.run(&["RANDOMKEY", "x"]),
                "-ERR wrong number of arguments for 'randomkey' command\r\n"
            );
        }
    }

    #[test]
    fn flushdb_flushall() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let fill = |t: &mut TestServer, db: &str, count: usize| {
                t.run(&["SELECT", db]);
                for i in 0..count {
                    t.run(&["SET", &format!("k{i}"), "v"]);
                }
                t.run(&["SELECT", "0"]);
            };
            let size = |t: &mut TestServer, db: &str| {
                t.run(&["SELECT", db]);
                let r = t.run(&["DBSIZE"]);
                t.run(&["SELECT", "0"]);
                r
            };
            assert_eq!(t.run(&["FLUSHDB", "foo"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["FLUSHALL", "async", "x"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["FLUSHALL", "foo"]), "-ERR syntax error\r\n");
            for opt in [None, Some("SYNC"), Some("async"), Some("ASYNC")] {
                // Above and below the inline-free threshold.
                for count in [10, 300] {
                    fill(&mut t, "0", count);
                    fill(&mut t, "5", 3);
                    let mut argv = vec!["FLUSHDB"];
                    argv.extend(opt);
                    assert_eq!(t.run(&argv), "+OK\r\n");
                    assert_eq!(size(&mut t, "0"), ":0\r\n");
                    assert_eq!(size(&mut t, "5"), ":3\r\n");
                    argv[0] = "FLUSHALL";
                    fill(&mut t, "0", count);
                    assert_eq!(t.run(&argv), "+OK\r\n");
                    assert_eq!(size(&mut t, "0"), ":0\r\n");
                    assert_eq!(size(&mut t, "5"), ":0\r\n");
                    assert_eq!(t.run(&["SET", "k1", "after"]), "+OK\r\n");
                    assert_eq!(t.run(&["GET", "k1"]), "$5\r\nafter\r\n");
                    t.run(&["FLUSHALL"]);
                }
            }
        }
    }

    #[test]
    fn swapdb_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            assert_eq!(
                t.run(&["SWAPDB", "0", "x"]),
                "-ERR invalid second DB index\r\n"
            );
            assert_eq!(
                t.run(&["SWAPDB", "x", "0"]),
                "-ERR invalid first DB index\r\n"
            );
            assert_eq!(
                t.run(&["SWAPDB", "16", "x"]),
                "-ERR invalid second DB index\r\n"
            );
            assert_eq!(
                t.run(&["SWAPDB", "99999999999", "0"]),
                "-ERR invalid first DB index\r\n"
            );
            assert_eq!(
                t.run(&["SWAPDB", "0", "99999999999"]),
                "-ERR invalid second DB index\r\n"
            );
            let range = "-ERR DB index is out of range\r\n";
            assert_eq!(t.run(&["SWAPDB", "0", "16"]), range);
            assert_eq!(t.run(&["SWAPDB", "-1", "0"]), range);
            assert_eq!(t.run(&["SWAPDB", "1", "-5"]), range);
            assert_eq!(t.run(&["SWAPDB", "0", "0"]), "+OK\r\n");
            t.run(&["MSET", "a", "1", "b", "2", "c", "3"]);
            assert_eq!(t.run(&["SWAPDB", "0", "7"]), "+OK\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            t.run(&["SELECT", "7"]);
            assert_eq!(
                t.run(&["MGET", "a", "b", "c"]),
                "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
            );
            assert_eq!(t.run(&["SWAPDB", "7", "0"]), "+OK\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        }
    }

    #[test]
    fn object_subcommands() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            for sub in ["ENCODING", "FREQ", "IDLETIME", "REFCOUNT"] {
                assert_eq!(t.run(&["OBJECT", sub, "nokey"]), "$-1\r\n", "{sub}");
            }
            t.client.resp3 = true;
            assert_eq!(t.run(&["OBJECT", "ENCODING", "nokey"]), "_\r\n");
            assert_eq!(t.run(&["OBJECT", "REFCOUNT", "nokey"]), "_\r\n");
            t.client.resp3 = false;
            let enc = |t: &mut TestServer, v: &str| {
                t.run(&["SET", "k", v]);
                t.run(&["OBJECT", "encoding", "k"])
            };
            assert_eq!(enc(&mut t, "123"), "$3\r\nint\r\n");
            assert_eq!(enc(&mut t, "abc"), "$6\r\nembstr\r\n");
            assert_eq!(enc(&mut t, &"x".repeat(45)), "$3\r\nraw\r\n");
            let rc = |t: &mut TestServer, v: &str| {
                t.run(&["SET", "k", v]);
                t.run(&["OBJECT", "REFCOUNT", "k"])
            };
            assert_eq!(rc(&mut t, "0"), ":2147483647\r\n");
            assert_eq!(rc(&mut t, "123"), ":2147483647\r\n");
            assert_eq!(rc(&mut t, "9999"), ":2147483647\r\n");
            assert_eq!(rc(&mut t, "10000"), ":1\r\n");
            assert_eq!(rc(&mut t, "-1"), ":1\r\n");
            assert_eq!(rc(&mut t, "abc"), ":1\r\n");
            assert_eq!(rc(&mut t, "0123"), ":1\r\n");
            assert_eq!(
                t.run(&["OBJECT", "FREQ", "k"]),
                "-ERR An LFU maxmemory policy is not selected, access frequency not tracked. \
                 Please note that when switching between policies at runtime LRU and LFU data \
                 will take some time to adjust.\r\n"
            );
            assert_eq!(t.run(&["OBJECT", "IDLETIME", "k"]), ":0\r\n");
            expire_now(&mut t, 0, "k");
            for sub in ["ENCODING", "FREQ", "IDLETIME", "REFCOUNT"] {
                assert_eq!(t.run(&["OBJECT", sub, "k"]), "$-1\r\n", "{sub}");
            }
        }
    }

    #[test]
    fn object_under_lfu_and_lru_policies() {
        use config::MaxmemoryPolicy as P;
        let mut t = TestServer::new(2);
        t.run(&["SET", "k", "5"]);
        t.server.config.write().unwrap().maxmemory_policy = P::AllkeysLfu;
        assert_eq!(t.run(&["OBJECT", "FREQ", "k"]), ":5\r\n");
        assert_eq!(
            t.run(&["OBJECT", "IDLETIME", "k"]),
            "-ERR An LFU maxmemory policy is selected, idle time not tracked. Please note \
             that when switching between policies at runtime LRU and LFU data will take some \
             time to adjust.\r\n"
        );
        assert_eq!(t.run(&["OBJECT", "FREQ", "nokey"]), "$-1\r\n");
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "nokey"]), "$-1\r\n");
        // Without maxmemory, integers stay shared whatever the policy.
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "k"]), ":2147483647\r\n");
        t.server.config.write().unwrap().maxmemory = 1 << 30;
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "k"]), ":1\r\n");
        t.server.config.write().unwrap().maxmemory_policy = P::VolatileLru;
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "k"]), ":1\r\n");
        t.server.config.write().unwrap().maxmemory_policy = P::AllkeysRandom;
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "k"]), ":2147483647\r\n");
    }

    /// Seeds every shard's RNG so LFU increments are reproducible.
    fn seeded(n: usize) -> TestServer {
        use rand::{rngs::SmallRng, SeedableRng};
        let mut t = TestServer::new(n);
        for (i, sh) in t.shards.iter_mut().enumerate() {
            sh.rng = SmallRng::seed_from_u64(0x1f + i as u64);
        }
        t
    }

    fn freq(t: &mut TestServer, key: &str) -> u64 {
        let r = t.run(&["OBJECT", "FREQ", key]);
        r.strip_prefix(':')
            .and_then(|r| r.strip_suffix("\r\n"))
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("OBJECT FREQ {key}: {r:?}"))
    }

    /// Sequences checked against redis-server 7.0.15 started with
    /// `--maxmemory-policy allkeys-lfu` (non-integer values: Redis shares
    /// small integer objects, and their counter, between keys when
    /// maxmemory is 0; we never share).
    #[test]
    fn object_freq_follows_redis_lfu() {
        for n in SHARD_COUNTS {
            let mut t = seeded(n);
            let ok = "+OK\r\n";
            assert_eq!(
                t.run(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]),
                ok
            );
            t.run(&["SET", "k", "v"]);
            // A new key starts at LFU_INIT_VAL; these commands do not touch.
            for cmd in [
                &["EXISTS", "k"][..],
                &["TYPE", "k"],
                &["TTL", "k"],
                &["PTTL", "k"],
                &["OBJECT", "ENCODING", "k"],
                &["OBJECT", "FREQ", "k"],
            ] {
                t.run(cmd);
            }
            assert_eq!(freq(&mut t, "k"), 5);
            // At or below LFU_INIT_VAL an access always increments.
            t.run(&["GET", "k"]);
            assert_eq!(freq(&mut t, "k"), 6);
            // lfu-log-factor 0: every touching access increments, reads
            // and writes alike; an overwrite keeps the counter.
            assert_eq!(t.run(&["CONFIG", "SET", "lfu-log-factor", "0"]), ok);
            t.run(&["STRLEN", "k"]);
            t.run(&["TOUCH", "k"]);
            for _ in 0..10 {
                t.run(&["GET", "k"]);
            }
            assert_eq!(freq(&mut t, "k"), 18);
            t.run(&["SET", "k", "w"]);
            t.run(&["EXPIRE", "k", "100"]);
            t.run(&["GETRANGE", "k", "0", "1"]);
            assert_eq!(freq(&mut t, "k"), 21);
            // RENAME touches the source and moves its counter; COPY
            // touches the source and makes a fresh key (REPLACE too).
            assert_eq!(t.run(&["RENAME", "k", "k2"]), ok);
            assert_eq!(freq(&mut t, "k2"), 22);
            assert_eq!(t.run(&["COPY", "k2", "k3"]), ":1\r\n");
            assert_eq!(freq(&mut t, "k3"), 5);
            for _ in 0..4 {
                t.run(&["GET", "k3"]);
            }
            assert_eq!(t.run(&["COPY", "k2", "k3", "REPLACE"]), ":1\r\n");
            assert_eq!(freq(&mut t, "k3"), 5);
            assert_eq!(freq(&mut t, "k2"), 24);
            // CLIENT NO-TOUCH: no access is recorded.
            t.client.no_touch = true;
            t.run(&["GET", "k2"]);
            assert_eq!(freq(&mut t, "k2"), 24);
            t.client.no_touch = false;
            // Another policy: the counter is kept but neither reported nor
            // updated; volatile-lfu is an LFU policy too.
            assert_eq!(
                t.run(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]),
                ok
            );
            t.run(&["GET", "k2"]);
            assert!(t.run(&["OBJECT", "FREQ", "k2"]).starts_with("-ERR An LFU"));
            assert_eq!(
                t.run(&["CONFIG", "SET", "maxmemory-policy", "volatile-lfu"]),
                ok
            );
            assert_eq!(freq(&mut t, "k2"), 24);
            assert_eq!(t.run(&["OBJECT", "FREQ", "nokey"]), "$-1\r\n");
        }
    }

    #[test]
    fn object_freq_decays_by_lfu_decay_time() {
        for n in SHARD_COUNTS {
            let mut t = seeded(n);
            t.run(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
            t.run(&["CONFIG", "SET", "lfu-log-factor", "0"]);
            t.run(&["SET", "k", "v"]);
            for _ in 0..15 {
                t.run(&["GET", "k"]);
            }
            assert_eq!(freq(&mut t, "k"), 20);
            // Pretend the last access was 6 minutes ago (the test clock is
            // real time). Skipped in the few minutes after the 16-bit
            // minute clock wraps, where Redis's arithmetic is off by one.
            let s = shard_of(b"k", n);
            let now_min = engine::lfu::minutes(engine::now_ms());
            if !(10..=65530).contains(&now_min) {
                continue;
            }
            t.shards[s].dbs[0].get_mut(b"k").unwrap().lfu_ldt_min = now_min - 6;
            // 6 (or 7, if a minute turns meanwhile) minutes / 2 = 3 periods.
            t.run(&["CONFIG", "SET", "lfu-decay-time", "2"]);
            assert_eq!(freq(&mut t, "k"), 17);
            t.run(&["CONFIG", "SET", "lfu-decay-time", "0"]);
            assert_eq!(freq(&mut t, "k"), 20);
            t.run(&["CONFIG", "SET", "lfu-decay-time", "1"]);
            let f = freq(&mut t, "k");
            assert!(f == 14 || f == 13, "{f}");
            // An access stores the decayed counter (+1) and the minute.
            t.run(&["GET", "k"]);
            assert_eq!(freq(&mut t, "k"), f + 1);
            t.run(&["CONFIG", "SET", "lfu-decay-time", "0"]);
            assert_eq!(freq(&mut t, "k"), f + 1);
        }
    }

    /// The counter's growth under the default lfu-log-factor 10, against
    /// redis-server 7.0.15 (`SET k v`, n × `GET k`, `OBJECT FREQ k`, per
    /// fresh key): 400 keys × 100 GETs gave 7..=14, mean 9.81; 150 keys ×
    /// 1000 GETs gave 16..=25, mean 19.58. The exact distribution (a Markov
    /// chain) has means 9.72 and 19.38.
    #[test]
    fn object_freq_grows_like_redis() {
        for n in [1, 4] {
            let mut t = seeded(n);
            t.run(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
            for (gets, keys, lo, hi, mean_lo, mean_hi) in
                [(100, 40, 7, 14, 9.0, 10.5), (1000, 8, 14, 27, 17.5, 21.5)]
            {
                let mut sum = 0;
                for i in 0..keys {
                    let k = format!("g{gets}:{i}");
                    t.run(&["SET", &k, "v"]);
                    for _ in 0..gets {
                        t.run(&["GET", &k]);
                    }
                    let f = freq(&mut t, &k);
                    assert!((lo..=hi).contains(&f), "{gets} GETs: {f}");
                    sum += f;
                }
                let mean = sum as f64 / keys as f64;
                assert!(mean > mean_lo && mean < mean_hi, "{gets} GETs: mean {mean}");
            }
        }
    }

    #[test]
    fn object_idletime_does_not_touch() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["SET", "k", "v"]);
            let s = shard_of(b"k", n);
            t.shards[s].dbs[0].get_mut(b"k").unwrap().access_s -= 500;
            for _ in 0..3 {
                let idle = t.run(&["OBJECT", "IDLETIME", "k"]);
                assert!(idle == ":500\r\n" || idle == ":501\r\n", "{idle}");
                t.run(&["OBJECT", "ENCODING", "k"]);
                t.run(&["OBJECT", "REFCOUNT", "k"]);
            }
            t.run(&["GET", "k"]);
            assert_eq!(t.run(&["OBJECT", "IDLETIME", "k"]), ":0\r\n");
        }
    }

    #[test]
    fn object_help_and_errors() {
        let mut t = TestServer::new(1);
        let help = t.run(&["OBJECT", "HELP"]);
        assert!(help.starts_with(
            "*15\r\n+OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n\
             +ENCODING <key>\r\n"
        ));
        assert!(help.ends_with("+HELP\r\n+    Prints this help.\r\n"));
        assert_eq!(
            t.run(&["OBJECT", "foo"]),
            "-ERR unknown subcommand 'foo'. Try OBJECT HELP.\r\n"
        );
        assert_eq!(
            t.run(&["OBJECT"]),
            "-ERR wrong number of arguments for 'object' command\r\n"
        );
        assert_eq!(
            t.run(&["OBJECT", "ENCODING"]),
            "-ERR wrong number of arguments for 'object|encoding' command\r\n"
        );
        assert_eq!(
            t.run(&["OBJECT", "HELP", "x"]),
            "-ERR wrong number of arguments for 'object|help' command\r\n"
        );
    }

    #[test]
    fn lookups_count_hits_and_misses() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        let before = t.shards[0].stats;
        t.run(&["EXISTS", "k", "nokey"]);
        t.run(&["TYPE", "k"]);
        t.run(&["TTL", "nokey"]);
        let after = t.shards[0].stats;
        assert_eq!(after.keyspace_hits - before.keyspace_hits, 2);
        assert_eq!(after.keyspace_misses - before.keyspace_misses, 2);
    }
}
