//! Commands on sorted sets (Redis's `t_zset.c`). Request path.
//!
//! Handlers follow Redis's order of checks (argument errors before the
//! key's type where Redis does so, and the reverse where it does not),
//! since clients see which error comes first. The representation and its
//! two encodings live in `engine::types::zset`; everything here is parsing,
//! range arithmetic on ranks, and replies.
//!
//! Ranges: every score range is turned into a span of ascending ranks
//! `[start, end)` by two O(log n) descents (`partition_point`), then
//! emitted by walking from a rank; nothing is materialised but the reply.
//! Lex ranges follow Redis's walks step by step, since on members whose
//! scores differ they are not spans of ranks: see [`lex`].
//!
//! Scores: parsed as Redis's `getDoubleFromObject` (strtod, no leading
//! space, overflow and underflow-to-zero rejected, NaN rejected) and range
//! bounds as `zslParseRange` (strtod with its leniency: leading space, an
//! empty string is 0); replies use `Reply::double` (`%.17g`, RESP3 `,`).
//!
//! Multi-key commands (ZUNIONSTORE, ZRANGESTORE, ZMPOP ...) are plain
//! shard handlers: across shards, dispatch runs them on gathered copies
//! (`crate::scratch`). Plain sets are inputs of ZUNION & co. with every
//! member scored 1, as in Redis.
//!
//! # Module map
//!
//! This file holds the command table, the reply and store helpers the
//! families share, ZADD / ZINCRBY, ZREM and the one-key readers (ZSCORE,
//! ZCARD, ZCOUNT, ZRANK ...), ZSCAN and ZRANDMEMBER. The rest: [`parse`]
//! (scores, score ranges, integer arguments), [`range`] (ZRANGE's family
//! and ZREMRANGEBY*), [`lex`] (lex ranges), [`pop`] (ZPOPMIN ... BZMPOP)
//! and [`setop`] (ZUNION, ZINTER, ZDIFF, their STORE forms, ZINTERCARD).

use ds::events as ev;
use engine::lazyfree::Del;
use engine::{EncLimits, Value, ValueRef, ZSet};
use rand::Rng;
use resp::{Args, Reply};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, ShardHandler, NO_KEYS};
use crate::util::{as_zset, as_zset_mut, eq_ic};

mod lex;
mod parse;
mod pop;
mod range;
mod setop;

use lex::LexRange;
pub(crate) use parse::strtod;
use parse::{parse_score, ScoreRange};
use pop::{bzmpop, bzpopmax, bzpopmin, zmpop, zpopmax, zpopmin};
use range::{
    zrange, zrangebylex, zrangebyscore, zrangestore, zremrangebylex, zremrangebyrank,
    zremrangebyscore, zrevrange, zrevrangebylex, zrevrangebyscore,
};
use setop::{zdiff, zdiffstore, zinter, zintercard, zinterstore, zunion, zunionstore};

const R_FAST: &[&str] = &["read", "sortedset", "fast"];
const R_SLOW: &[&str] = &["read", "sortedset", "slow"];
const W_FAST: &[&str] = &["write", "sortedset", "fast"];
const W_SLOW: &[&str] = &["write", "sortedset", "slow"];
const W_FAST_BLOCK: &[&str] = &["write", "sortedset", "fast", "blocking"];
const W_SLOW_BLOCK: &[&str] = &["write", "sortedset", "slow", "blocking"];

const fn one(
    name: &'static str,
    arity: i32,
    flags: u32,
    h: ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, keys(1, 1, 1), Exec::Shard(h, None), acl)
}

pub(crate) const COMMANDS: &[CommandSpec] = &[
    one("zadd", -4, WRITE | DENYOOM | FAST, zadd, W_FAST),
    one("zincrby", 4, WRITE | DENYOOM | FAST, zincrby, W_FAST),
    one("zrem", -3, WRITE | FAST, zrem, W_FAST),
    one("zscore", 3, READONLY | FAST, zscore, R_FAST),
    one("zmscore", -3, READONLY | FAST, zmscore, R_FAST),
    one("zcard", 2, READONLY | FAST, zcard, R_FAST),
    one("zcount", 4, READONLY | FAST, zcount, R_FAST),
    one("zlexcount", 4, READONLY | FAST, zlexcount, R_FAST),
    // Redis 7.2's arity: ZRANK key member [WITHSCORE].
    one("zrank", -3, READONLY | FAST, zrank, R_FAST),
    one("zrevrank", -3, READONLY | FAST, zrevrank, R_FAST),
    one("zrange", -4, READONLY, zrange, R_SLOW),
    one("zrevrange", -4, READONLY, zrevrange, R_SLOW),
    one("zrangebyscore", -4, READONLY, zrangebyscore, R_SLOW),
    one("zrevrangebyscore", -4, READONLY, zrevrangebyscore, R_SLOW),
    one("zrangebylex", -4, READONLY, zrangebylex, R_SLOW),
    one("zrevrangebylex", -4, READONLY, zrevrangebylex, R_SLOW),
    CommandSpec::new(
        "zrangestore",
        -5,
        WRITE | DENYOOM,
        keys(1, 2, 1),
        Exec::Shard(zrangestore, None),
        W_SLOW,
    ),
    one("zremrangebyrank", 4, WRITE, zremrangebyrank, W_SLOW),
    one("zremrangebyscore", 4, WRITE, zremrangebyscore, W_SLOW),
    one("zremrangebylex", 4, WRITE, zremrangebylex, W_SLOW),
    one("zpopmin", -2, WRITE | FAST, zpopmin, W_FAST),
    one("zpopmax", -2, WRITE | FAST, zpopmax, W_FAST),
    one("zscan", -3, READONLY, zscan, R_SLOW),
    one("zrandmember", -2, READONLY, zrandmember, R_SLOW),
    CommandSpec::new(
        "zunion",
        -3,
        READONLY | MOVABLE_KEYS,
        NO_KEYS,
        Exec::Shard(zunion, None),
        R_SLOW,
    )
    .with_getkeys(keys_numkeys_at_1),
    CommandSpec::new(
        "zinter",
        -3,
        READONLY | MOVABLE_KEYS,
        NO_KEYS,
        Exec::Shard(zinter, None),
        R_SLOW,
    )
    .with_getkeys(keys_numkeys_at_1),
    CommandSpec::new(
        "zdiff",
        -3,
        READONLY | MOVABLE_KEYS,
        NO_KEYS,
        Exec::Shard(zdiff, None),
        R_SLOW,
    )
    .with_getkeys(keys_numkeys_at_1),
    CommandSpec::new(
        "zintercard",
        -3,
        READONLY | MOVABLE_KEYS,
        NO_KEYS,
        Exec::Shard(zintercard, None),
        R_SLOW,
    )
    .with_getkeys(keys_numkeys_at_1),
    CommandSpec::new(
        "zunionstore",
        -4,
        WRITE | DENYOOM | MOVABLE_KEYS,
        keys(1, 1, 1),
        Exec::Shard(zunionstore, None),
        W_SLOW,
    )
    .with_getkeys(keys_store),
    CommandSpec::new(
        "zinterstore",
        -4,
        WRITE | DENYOOM | MOVABLE_KEYS,
        keys(1, 1, 1),
        Exec::Shard(zinterstore, None),
        W_SLOW,
    )
    .with_getkeys(keys_store),
    CommandSpec::new(
        "zdiffstore",
        -4,
        WRITE | DENYOOM | MOVABLE_KEYS,
        keys(1, 1, 1),
        Exec::Shard(zdiffstore, None),
        W_SLOW,
    )
    .with_getkeys(keys_store),
    CommandSpec::new(
        "zmpop",
        -4,
        WRITE | MOVABLE_KEYS,
        NO_KEYS,
        Exec::Shard(zmpop, None),
        W_SLOW,
    )
    .with_getkeys(keys_numkeys_at_1),
    CommandSpec::new(
        "bzpopmin",
        -3,
        WRITE | NOSCRIPT | BLOCKING | FAST,
        keys(1, -2, 1),
        Exec::Shard(bzpopmin, None),
        W_FAST_BLOCK,
    ),
    CommandSpec::new(
        "bzpopmax",
        -3,
        WRITE | NOSCRIPT | BLOCKING | FAST,
        keys(1, -2, 1),
        Exec::Shard(bzpopmax, None),
        W_FAST_BLOCK,
    ),
    CommandSpec::new(
        "bzmpop",
        -5,
        WRITE | BLOCKING | MOVABLE_KEYS,
        NO_KEYS,
        Exec::Shard(bzmpop, None),
        W_SLOW_BLOCK,
    )
    .with_getkeys(keys_bzmpop),
];

// ---------------------------------------------------------------------------
// Key positions of the numkeys-style commands

/// Positions `first..first + numkeys` where `numkeys` is at `at`; none if
/// `numkeys` is not a valid count for this invocation (the handler then
/// replies the error, wherever it runs).
fn numkeys_keys(args: Args<'_>, at: usize, out: &mut Vec<usize>) {
    let Some(n) = (at < args.len())
        .then(|| resp::string2ll(args.get(at)))
        .flatten()
    else {
        return;
    };
    let first = at + 1;
    if n < 1 || n as u64 > (args.len() - first) as u64 {
        return;
    }
    out.extend(first..first + n as usize);
}

/// ZUNION, ZINTER, ZDIFF, ZINTERCARD, ZMPOP: `numkeys key...` at 1.
fn keys_numkeys_at_1(args: Args<'_>) -> Vec<usize> {
    let mut v = Vec::new();
    numkeys_keys(args, 1, &mut v);
    v
}

/// Z*STORE: the destination, then `numkeys key...` at 2; none at all (as
/// Redis's `zunionInterDiffStoreGetKeys`) if `numkeys` is not valid.
fn keys_store(args: Args<'_>) -> Vec<usize> {
    let mut v = vec![1];
    numkeys_keys(args, 2, &mut v);
    if v.len() == 1 {
        v.clear();
    }
    v
}

/// BZMPOP: `timeout numkeys key...`.
fn keys_bzmpop(args: Args<'_>) -> Vec<usize> {
    let mut v = Vec::new();
    numkeys_keys(args, 2, &mut v);
    v
}

// ---------------------------------------------------------------------------
// Replies

/// The array header of `n` results: RESP2 WITHSCORES is one flat array of
/// members and scores, RESP3 an array of `[member, score]` pairs.
fn results_header(out: &mut Reply, n: usize, withscores: bool) {
    if withscores && !out.resp3() {
        out.array(2 * n);
    } else {
        out.array(n);
    }
}

#[inline]
fn result(out: &mut Reply, member: &[u8], score: f64, withscores: bool) {
    if withscores && out.resp3() {
        out.array(2);
    }
    out.bulk(member);
    if withscores {
        out.double(score);
    }
}

/// Emits `n` members from ascending rank `first`, upwards or downwards.
fn emit_ranks(out: &mut Reply, z: &ZSet, first: usize, n: usize, rev: bool, withscores: bool) {
    results_header(out, n, withscores);
    for (m, s) in z.iter_from(first, rev).take(n) {
        result(out, m, s, withscores);
    }
}

/// Stores `z` at `key` if it has members (emitting `event`), else
/// deletes `key` (a `del` event if it existed); replies the member count
/// (Redis's store epilogue of ZRANGESTORE/ZUNIONSTORE ...).
///
/// `cmd` is the storing command (its destination is its first key),
/// propagated as received when it changed the destination.
fn store_result(ctx: &mut ShardCtx<'_>, cmd: Args<'_>, z: ZSet, event: &'static str) {
    let (n, key) = (z.len(), cmd.get(1));
    if n > 0 {
        ctx.shard.store(ctx.db, key, Value::ZSet(Box::new(z)), 0);
        ctx.propagate_as_is(cmd);
        ctx.notify(ev::ZSET, event, key);
    } else if ctx.shard.delete(ctx.db, key, Del::Server) {
        ctx.propagate_as_is(cmd);
        ctx.notify(ev::GENERIC, "del", key);
    }
    ctx.out.int(n as i64);
}

/// After removing members from the set at `key` in place: emits the
/// command's `event`, then deletes the key if it became empty (and emits
/// `del`), else signals watchers.
fn after_removal(ctx: &mut ShardCtx<'_>, key: &[u8], event: &'static str, now_empty: bool) {
    ctx.notify(ev::ZSET, event, key);
    if now_empty {
        ctx.shard.remove(ctx.db, key);
        ctx.notify(ev::GENERIC, "del", key);
    } else {
        ctx.shard.dbs[ctx.db].signal(key);
    }
}

// ---------------------------------------------------------------------------
// ZADD / ZINCRBY

#[derive(Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    incr: bool,
}

/// Outcome of Redis's `zsetAdd` for one member.
enum AddOut {
    Added(f64),
    Updated(f64),
    /// Present, score unchanged (reported as processed).
    Same(f64),
    Nop,
    Nan,
}

fn zset_add(z: &mut ZSet, member: &[u8], score: f64, f: AddFlags, lim: &EncLimits) -> AddOut {
    match z.score(member) {
        Some(cur) => {
            if f.nx {
                return AddOut::Nop;
            }
            let mut score = score;
            if f.incr {
                score += cur;
                if score.is_nan() {
                    return AddOut::Nan;
                }
            }
            if (f.lt && score >= cur) || (f.gt && score <= cur) {
                return AddOut::Nop;
            }
            if score != cur {
                z.insert(member, score, lim);
                AddOut::Updated(score)
            } else {
                AddOut::Same(score)
            }
        }
        None if !f.xx => {
            z.insert(member, score, lim);
            AddOut::Added(score)
        }
        None => AddOut::Nop,
    }
}

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]:
/// the number of members added (with CH: added or updated); with INCR the
/// new score, or null when NX/XX/GT/LT prevented the update.
pub(crate) fn zadd(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zadd_generic(ctx, args, AddFlags::default())
}

/// ZINCRBY key increment member: the new score.
fn zincrby(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zadd_generic(
        ctx,
        args,
        AddFlags {
            incr: true,
            ..AddFlags::default()
        },
    )
}

fn zadd_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, mut f: AddFlags) -> Result<(), CmdError> {
    let key = args.get(1);
    let mut ch = false;
    let mut idx = 2;
    while idx < args.len() {
        let a = args.get(idx);
        if eq_ic(a, "nx") {
            f.nx = true;
        } else if eq_ic(a, "xx") {
            f.xx = true;
        } else if eq_ic(a, "ch") {
            ch = true;
        } else if eq_ic(a, "incr") {
            f.incr = true;
        } else if eq_ic(a, "gt") {
            f.gt = true;
        } else if eq_ic(a, "lt") {
            f.lt = true;
        } else {
            break;
        }
        idx += 1;
    }
    let rest = args.len() - idx;
    if rest % 2 == 1 || rest == 0 {
        return Err(CmdError::Syntax);
    }
    let elements = rest / 2;
    if f.nx && f.xx {
        return Err(CmdError::err(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if ((f.gt || f.lt) && f.nx) || (f.gt && f.lt) {
        return Err(CmdError::err(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if f.incr && elements > 1 {
        return Err(CmdError::err(
            "INCR option supports a single increment-element pair",
        ));
    }
    let mut scores = Vec::with_capacity(elements);
    for j in 0..elements {
        scores.push(parse_score(args.get(idx + 2 * j))?);
    }
    let lim = ctx.shard.enc;
    let (mut added, mut updated, mut processed) = (0i64, 0i64, 0i64);
    let mut last = 0.0;
    let mut nan = false;
    let mut apply = |z: &mut ZSet| {
        for (j, &score) in scores.iter().enumerate() {
            let member = args.get(idx + 1 + 2 * j);
            match zset_add(z, member, score, f, &lim) {
                AddOut::Added(s) => {
                    added += 1;
                    processed += 1;
                    last = s;
                }
                AddOut::Updated(s) => {
                    updated += 1;
                    processed += 1;
                    last = s;
                }
                AddOut::Same(s) => {
                    processed += 1;
                    last = s;
                }
                AddOut::Nop => {}
                AddOut::Nan => {
                    nan = true;
                    return;
                }
            }
        }
    };
    match ctx.shard.lookup_write(ctx.db, key) {
        Some(e) => apply(as_zset_mut(e)?),
        None => {
            if !f.xx {
                // Redis 7.0 picks the encoding from the first member alone.
                let mut z = ZSet::with_hint(1, args.get(idx + 1).len(), &lim);
                apply(&mut z);
                // Every member of a new set is added, so it is never empty.
                ctx.shard.store(ctx.db, key, Value::ZSet(Box::new(z)), 0);
            }
        }
    }
    if added + updated > 0 {
        ctx.shard.dbs[ctx.db].signal(key);
        ctx.propagate_as_is(args);
        ctx.notify(ev::ZSET, if f.incr { "zincr" } else { "zadd" }, key);
    }
    if nan {
        return Err(CmdError::err("resulting score is not a number (NaN)"));
    }
    if f.incr {
        if processed > 0 {
            ctx.out.double(last);
        } else {
            ctx.out.null();
        }
    } else {
        ctx.out.int(if ch { added + updated } else { added });
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ZREM and the simple readers

/// ZREM key member [member ...]: the number of members removed.
fn zrem(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    let Some(e) = ctx.shard.lookup_write(ctx.db, key) else {
        ctx.out.int(0);
        return Ok(());
    };
    let z = as_zset_mut(e)?;
    let mut deleted = 0;
    for m in args.iter().skip(2) {
        if z.remove(m).is_some() {
            deleted += 1;
        }
        if z.is_empty() {
            break;
        }
    }
    let empty = z.is_empty();
    if deleted > 0 {
        ctx.propagate_as_is(args);
        after_removal(ctx, key, "zrem", empty);
    }
    ctx.out.int(deleted);
    Ok(())
}

/// ZSCORE key member: the score, or null.
fn zscore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => ctx.out.null(),
        Some(e) => match as_zset(e)?.score(args.get(2)) {
            Some(s) => ctx.out.double(s),
            None => ctx.out.null(),
        },
    }
    Ok(())
}

/// ZMSCORE key member [member ...]: an array of scores or nulls.
fn zmscore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let z = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => None,
        Some(e) => Some(as_zset(e)?),
    };
    ctx.out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            Some(s) => ctx.out.double(s),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// ZCARD key: the number of members (0 for a missing key).
fn zcard(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let n = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => 0,
        Some(e) => as_zset(e)?.len(),
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// ZCOUNT key min max: members with scores in the range.
fn zcount(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let range = ScoreRange::parse(args.get(2), args.get(3))?;
    let touch = ctx.touch();
    let n = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => 0,
        Some(e) => {
            let (a, b) = range.ranks(as_zset(e)?);
            b - a
        }
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// ZLEXCOUNT key min max: members in the lex range.
fn zlexcount(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let range = LexRange::parse(args.get(2), args.get(3))?;
    let touch = ctx.touch();
    let n = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => 0,
        Some(e) => range.count(as_zset(e)?),
    };
    ctx.out.int(n);
    Ok(())
}

/// ZRANK key member [WITHSCORE]: the 0-based rank, or null; with
/// WITHSCORE (Redis 7.2) `[rank, score]`, or a null array.
fn zrank(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrank_generic(ctx, args, false)
}

/// ZREVRANK key member [WITHSCORE]: as ZRANK, counting from the highest.
fn zrevrank(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrank_generic(ctx, args, true)
}

fn zrank_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, rev: bool) -> Result<(), CmdError> {
    if args.len() > 4 {
        let name = if rev { "zrevrank" } else { "zrank" };
        return Err(CmdError::WrongArity(name.into()));
    }
    let withscore = if args.len() == 4 {
        if !eq_ic(args.get(3), "withscore") {
            return Err(CmdError::Syntax);
        }
        true
    } else {
        false
    };
    let touch = ctx.touch();
    let found = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => None,
        Some(e) => {
            let z = as_zset(e)?;
            z.rank(args.get(2))
                .map(|(r, s)| (if rev { z.len() - 1 - r } else { r }, s))
        }
    };
    match (found, withscore) {
        (Some((r, s)), true) => {
            ctx.out.array(2);
            ctx.out.int(r as i64);
            ctx.out.double(s);
        }
        (Some((r, _)), false) => ctx.out.int(r as i64),
        (None, true) => ctx.out.null_array(),
        (None, false) => ctx.out.null(),
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ZSCAN, ZRANDMEMBER

/// ZSCAN key cursor [MATCH pattern] [COUNT count]: `[cursor, [member,
/// score, ...]]`, scores as bulk strings in both protocols.
fn zscan(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let cursor = crate::keys::parse_scan_cursor(args.get(2))?;
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        crate::keys::reply_empty_scan(ctx.out);
        return Ok(());
    };
    let z = as_zset(e)?;
    let crate::keys::ScanOpts { count, pattern, .. } =
        crate::keys::parse_scan_opts(args, 3, false)?;
    let mut found: Vec<(Vec<u8>, f64)> = Vec::new();
    let mut next = cursor;
    let mut budget = count.saturating_mul(10);
    loop {
        next = z.scan(next, |m, s| found.push((m.to_vec(), s)));
        budget = budget.saturating_sub(1);
        // Redis counts members and scores alike against COUNT.
        if next == 0 || budget == 0 || found.len() * 2 >= count {
            break;
        }
    }
    if let Some(p) = pattern {
        found.retain(|(m, _)| ds::glob_match(p, m, false));
    }
    ctx.out.array(2);
    ctx.out.bulk(itoa::Buffer::new().format(next).as_bytes());
    ctx.out.array(found.len() * 2);
    for (m, s) in &found {
        ctx.out.bulk(m);
        ctx.out.bulk(resp::format_double(*s).as_bytes());
    }
    Ok(())
}

/// ZRANDMEMBER key [count [WITHSCORES]]: one random member (or null);
/// with a count, that many distinct members (negative: with repeats).
fn zrandmember(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let cap = ctx.reply_cap();
    let key = args.get(1);
    let mut count: Option<(i64, bool)> = None;
    if args.len() >= 3 {
        let l = match resp::string2ll(args.get(2)) {
            None => return Err(CmdError::NotInteger),
            Some(i64::MIN) => {
                return Err(CmdError::err(
                    "value is out of range, value must between -9223372036854775807 and \
                     9223372036854775807",
                ))
            }
            Some(l) => l,
        };
        if args.len() > 4 || (args.len() == 4 && !eq_ic(args.get(3), "withscores")) {
            return Err(CmdError::Syntax);
        }
        let withscores = args.len() == 4;
        if withscores && !(-i64::MAX / 2..=i64::MAX / 2).contains(&l) {
            return Err(CmdError::err("value is out of range"));
        }
        count = Some((l, withscores));
    }
    match ctx.shard.lookup_read(ctx.db, key, touch) {
        None => {
            match count {
                None => ctx.out.null(),
                Some(_) => ctx.out.array(0),
            }
            return Ok(());
        }
        Some(e) => {
            as_zset(e)?;
        }
    }
    // Disjoint borrows of the shard: the set (read) and the generator.
    let shard = &mut *ctx.shard;
    let Some(ValueRef::ZSet(z)) = shard.dbs[ctx.db].get(key).map(|e| e.value()) else {
        return Err(CmdError::WrongType);
    };
    let rng = &mut shard.rng;
    let out = &mut *ctx.out;
    let size = z.len();
    let Some((l, withscores)) = count else {
        let (m, _) = z.get(rng.gen_range(0..size.max(1))).unwrap_or((b"", 0.0));
        out.bulk(m);
        return Ok(());
    };
    let count = l.unsigned_abs() as usize;
    if count == 0 {
        out.array(0);
        return Ok(());
    }
    if l < 0 || count == 1 {
        results_header(out, count, withscores);
        for _ in 0..count {
            let (m, s) = z.get(rng.gen_range(0..size)).unwrap_or((b"", 0.0));
            result(out, m, s, withscores);
            // Past the output limit the client is closed: stop, as Redis.
            if out.len() > cap {
                break;
            }
        }
        return Ok(());
    }
    if count >= size {
        // The whole set, in Redis's iteration order: from the highest.
        emit_ranks(out, z, size - 1, size, true, withscores);
        return Ok(());
    }
    let picks = rand::seq::index::sample(rng, size, count);
    results_header(out, count, withscores);
    for r in picks.iter() {
        let (m, s) = z.get(r).unwrap_or((b"", 0.0));
        result(out, m, s, withscores);
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    use crate::testutil::TestServer;

    fn run(t: &mut TestServer, argv: &[&str]) -> String {
        let v: Vec<&[u8]> = argv.iter().map(|s| s.as_bytes()).collect();
        String::from_utf8_lossy(&t.raw(&v)).into_owned()
    }

    #[test]
    fn add_range_rank_pop() {
        let mut t = TestServer::new(1);
        assert_eq!(
            run(&mut t, &["ZADD", "z", "1", "a", "2", "b", "3", "c"]),
            ":3\r\n"
        );
        assert_eq!(
            run(&mut t, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]),
            "*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n"
        );
        assert_eq!(run(&mut t, &["ZREVRANK", "z", "a"]), ":2\r\n");
        assert_eq!(
            run(&mut t, &["ZRANK", "z", "b", "WITHSCORE"]),
            "*2\r\n:1\r\n$1\r\n2\r\n"
        );
        assert_eq!(
            run(
                &mut t,
                &["ZRANGE", "z", "+inf", "(1", "BYSCORE", "REV", "LIMIT", "0", "1"]
            ),
            "*1\r\n$1\r\nc\r\n"
        );
        assert_eq!(
            run(&mut t, &["ZPOPMIN", "z", "5"]),
            "*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n"
        );
        assert_eq!(run(&mut t, &["EXISTS", "z"]), ":0\r\n");
    }
}
