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

use std::collections::HashMap;

use ds::events as ev;
use engine::lazyfree::Del;
use engine::{EncLimits, Value, ValueRef, ZSet};
use rand::Rng;
use resp::{Args, Reply};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, ShardHandler, NO_KEYS};
use crate::util::{as_zset, as_zset_mut, eq_ic, parse_i64, parse_timeout};

mod lex;
use lex::LexRange;

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
// Parsing

/// C's `strtod` on `s`: the value and the length of the longest prefix it
/// accepts (0 if none), and whether the result over- or underflowed
/// (`ERANGE`). Accepts leading whitespace, a sign, decimal and hex forms,
/// `inf`/`infinity` and `nan` in any case.
pub(crate) fn strtod(s: &[u8]) -> (f64, usize, bool) {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let neg = i < s.len() && s[i] == b'-';
    if i < s.len() && (s[i] == b'-' || s[i] == b'+') {
        i += 1;
    }
    let sign = if neg { -1.0 } else { 1.0 };
    let rest = &s[i..];
    let starts =
        |w: &str| rest.len() >= w.len() && rest[..w.len()].eq_ignore_ascii_case(w.as_bytes());
    if starts("infinity") {
        return (sign * f64::INFINITY, i + 8, false);
    }
    if starts("inf") {
        return (sign * f64::INFINITY, i + 3, false);
    }
    if starts("nan") {
        let mut j = i + 3;
        if j < s.len() && s[j] == b'(' {
            let mut k = j + 1;
            while k < s.len() && (s[k].is_ascii_alphanumeric() || s[k] == b'_') {
                k += 1;
            }
            if k < s.len() && s[k] == b')' {
                j = k + 1;
            }
        }
        return (f64::NAN, j, false);
    }
    if rest.len() >= 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x' {
        if let Some((v, n)) = hex_float(&rest[2..]) {
            return (sign * v, i + 2 + n, v.is_infinite());
        }
        // "0x" alone: strtod takes the "0".
        return (0.0, i + 1, false);
    }
    let mut j = i;
    let mut digits = 0;
    let mut nonzero = false;
    while j < s.len() && s[j].is_ascii_digit() {
        nonzero |= s[j] != b'0';
        j += 1;
        digits += 1;
    }
    if j < s.len() && s[j] == b'.' {
        j += 1;
        while j < s.len() && s[j].is_ascii_digit() {
            nonzero |= s[j] != b'0';
            j += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return (0.0, 0, false);
    }
    if j < s.len() && (s[j] | 0x20) == b'e' {
        let mut k = j + 1;
        if k < s.len() && (s[k] == b'-' || s[k] == b'+') {
            k += 1;
        }
        let ds = k;
        while k < s.len() && s[k].is_ascii_digit() {
            k += 1;
        }
        if k > ds {
            j = k;
        }
    }
    // INVARIANT: s[i..j] is ASCII digits, '.', 'e' and signs only.
    let text = std::str::from_utf8(&s[i..j]).unwrap_or("0");
    let v: f64 = text.parse().unwrap_or(0.0);
    let erange = v.is_infinite() || (v == 0.0 && nonzero);
    (sign * v, j, erange)
}

/// The hex digits `[h*][.h*][p[+-]d+]` after "0x": value and length.
fn hex_float(s: &[u8]) -> Option<(f64, usize)> {
    let mut v = 0.0f64;
    let mut j = 0;
    let mut digits = 0;
    let mut scale = 0i32;
    while j < s.len() && s[j].is_ascii_hexdigit() {
        v = v * 16.0 + f64::from((s[j] as char).to_digit(16)?);
        j += 1;
        digits += 1;
    }
    if j < s.len() && s[j] == b'.' {
        j += 1;
        while j < s.len() && s[j].is_ascii_hexdigit() {
            v = v * 16.0 + f64::from((s[j] as char).to_digit(16)?);
            scale -= 4;
            j += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    if j < s.len() && (s[j] | 0x20) == b'p' {
        let mut k = j + 1;
        let neg = k < s.len() && s[k] == b'-';
        if k < s.len() && (s[k] == b'-' || s[k] == b'+') {
            k += 1;
        }
        let ds = k;
        let mut e: i32 = 0;
        while k < s.len() && s[k].is_ascii_digit() {
            e = e.saturating_mul(10).saturating_add(i32::from(s[k] - b'0'));
            k += 1;
        }
        if k > ds {
            scale = scale.saturating_add(if neg { -e } else { e });
            j = k;
        }
    }
    Some((v * 2f64.powi(scale), j))
}

/// A score or weight as Redis's `getDoubleFromObject`: the whole argument
/// is a strtod number, not empty, no leading space, no overflow or
/// underflow to zero, not NaN.
fn parse_double(arg: &[u8]) -> Option<f64> {
    if arg.is_empty() || arg[0].is_ascii_whitespace() || arg[0] == 0x0b {
        return None;
    }
    let (v, n, erange) = strtod(arg);
    if n != arg.len() || v.is_nan() || (erange && (v.is_infinite() || v == 0.0)) {
        return None;
    }
    Some(v)
}

fn parse_score(arg: &[u8]) -> Result<f64, CmdError> {
    parse_double(arg).ok_or(CmdError::NotFloat)
}

/// One bound of a score range (`zslParseRange`): `(` makes it exclusive;
/// strtod must consume everything (an empty string is 0); NaN is refused.
fn parse_score_bound(arg: &[u8]) -> Option<(f64, bool)> {
    let (ex, body) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    // Redis reads the argument as a C string: it ends at a NUL.
    let body = &body[..body.iter().position(|&c| c == 0).unwrap_or(body.len())];
    let (v, n, _) = strtod(body);
    if n != body.len() || v.is_nan() {
        return None;
    }
    Some((v, ex))
}

#[derive(Clone, Copy, Debug)]
struct ScoreRange {
    min: f64,
    max: f64,
    minex: bool,
    maxex: bool,
}

impl ScoreRange {
    fn parse(min: &[u8], max: &[u8]) -> Result<Self, CmdError> {
        let bad = || CmdError::err("min or max is not a float");
        let (min, minex) = parse_score_bound(min).ok_or_else(bad)?;
        let (max, maxex) = parse_score_bound(max).ok_or_else(bad)?;
        Ok(ScoreRange {
            min,
            max,
            minex,
            maxex,
        })
    }
    fn gte_min(&self, v: f64) -> bool {
        if self.minex {
            v > self.min
        } else {
            v >= self.min
        }
    }
    fn lte_max(&self, v: f64) -> bool {
        if self.maxex {
            v < self.max
        } else {
            v <= self.max
        }
    }
    /// Ascending ranks `[start, end)` of the members in range.
    fn ranks(&self, z: &ZSet) -> (usize, usize) {
        let start = z.partition_point(|_, s| !self.gte_min(s));
        let end = z.partition_point(|_, s| self.lte_max(s));
        (start, end.max(start))
    }
}

/// Redis's `getRangeLongFromObjectOrReply` with a message used for both a
/// non-integer and an out-of-range value.
fn parse_range_i64(arg: &[u8], min: i64, max: i64, msg: &str) -> Result<i64, CmdError> {
    match resp::string2ll(arg) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(CmdError::err(msg)),
    }
}

/// `getPositiveLongFromObjectOrReply` without a message.
fn parse_positive(arg: &[u8]) -> Result<i64, CmdError> {
    parse_range_i64(arg, 0, i64::MAX, "value is out of range, must be positive")
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
// ZRANGE and friends

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

/// ZRANGE key min max [BYSCORE|BYLEX] [REV] [WITHSCORES] [LIMIT offset count]
fn zrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Auto, None)
}

/// ZREVRANGE key start stop [WITHSCORES]
fn zrevrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Rank, Some(true))
}

/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
fn zrangebyscore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Score, Some(false))
}

/// ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]
fn zrevrangebyscore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Score, Some(true))
}

/// ZRANGEBYLEX key min max [LIMIT offset count]
fn zrangebylex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Lex, Some(false))
}

/// ZREVRANGEBYLEX key max min [LIMIT offset count]
fn zrevrangebylex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Lex, Some(true))
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]:
/// the number of members stored (0 deletes `dst`).
fn zrangestore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 2, true, RangeType::Auto, None)
}

enum Bounds<'a> {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange<'a>),
}

/// The `(first rank, count, 0)` of a score range's ascending ranks
/// `[a, b)` after LIMIT `offset count`, walking up or (`rev`) down.
fn window((a, b): (usize, usize), offset: i64, limit: i64, rev: bool) -> (usize, usize, usize) {
    let avail = (b - a) as i64;
    // Redis 7.0 walks `offset` steps with `while (ln && offset--)`: a
    // negative offset walks off the end, so the result is empty.
    if offset < 0 || offset >= avail {
        return (0, 0, 0);
    }
    let left = (avail - offset) as usize;
    let n = if limit < 0 {
        left
    } else {
        left.min(limit as usize)
    };
    let first = if rev {
        b - 1 - offset as usize
    } else {
        a + offset as usize
    };
    (first, n, 0)
}

/// Redis's `zrangeGenericCommand`: options, conflicts, range, key.
fn zrange_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    src: usize,
    store: bool,
    mut rtype: RangeType,
    mut rev: Option<bool>,
) -> Result<(), CmdError> {
    let mut withscores = false;
    let mut offset: i64 = 0;
    let mut limit: i64 = -1;
    let mut j = src + 3;
    while j < args.len() {
        let a = args.get(j);
        let left = args.len() - j - 1;
        if !store && eq_ic(a, "withscores") {
            withscores = true;
        } else if eq_ic(a, "limit") && left >= 2 {
            offset = parse_i64(args.get(j + 1))?;
            limit = parse_i64(args.get(j + 2))?;
            j += 2;
        } else if rev.is_none() && eq_ic(a, "rev") {
            rev = Some(true);
        } else if rtype == RangeType::Auto && eq_ic(a, "bylex") {
            rtype = RangeType::Lex;
        } else if rtype == RangeType::Auto && eq_ic(a, "byscore") {
            rtype = RangeType::Score;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if rtype == RangeType::Auto {
        rtype = RangeType::Rank;
    }
    if limit != -1 && rtype == RangeType::Rank {
        return Err(CmdError::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && rtype == RangeType::Lex {
        return Err(CmdError::err(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    let (mut lo, mut hi) = (args.get(src + 1), args.get(src + 2));
    if rev && rtype != RangeType::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let bounds = match rtype {
        RangeType::Score => Bounds::Score(ScoreRange::parse(lo, hi)?),
        RangeType::Lex => Bounds::Lex(LexRange::parse(lo, hi)?),
        _ => Bounds::Rank(parse_i64(lo)?, parse_i64(hi)?),
    };
    let key = args.get(src);
    let touch = ctx.touch();
    let lim = ctx.shard.enc;
    let Some(e) = ctx.shard.lookup_read(ctx.db, key, touch) else {
        if store {
            store_result(ctx, args, ZSet::default(), "zrangestore");
        } else {
            ctx.out.array(0);
        }
        return Ok(());
    };
    let z = as_zset(e)?;
    // (first ascending rank emitted, count, size hint for a stored result)
    let (first, n, hint) = match bounds {
        Bounds::Rank(start, end) => {
            let len = z.len() as i64;
            let (mut s, mut e) = (start, end);
            if s < 0 {
                s += len;
            }
            if e < 0 {
                e += len;
            }
            s = s.max(0);
            if s > e || s >= len {
                (0, 0, 0)
            } else {
                e = e.min(len - 1);
                let n = (e - s + 1) as usize;
                let first = if rev {
                    (len - 1 - s) as usize
                } else {
                    s as usize
                };
                (first, n, n)
            }
        }
        Bounds::Score(r) => window(r.ranks(z), offset, limit, rev),
        Bounds::Lex(r) => {
            let (first, n) = r.window(z, offset, limit, rev);
            (first, n, 0)
        }
    };
    if store {
        let mut out = ZSet::with_hint(hint, 0, &lim);
        for (m, s) in z.iter_from(first, rev).take(n) {
            out.insert(m, s, &lim);
        }
        store_result(ctx, args, out, "zrangestore");
    } else {
        emit_ranks(ctx.out, z, first, n, rev, withscores);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ZREMRANGEBY*

/// ZREMRANGEBYRANK key start stop: the number of members removed.
fn zremrangebyrank(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bounds = Bounds::Rank(parse_i64(args.get(2))?, parse_i64(args.get(3))?);
    zremrange_generic(ctx, args, bounds)
}

/// ZREMRANGEBYSCORE key min max: the number of members removed.
fn zremrangebyscore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bounds = Bounds::Score(ScoreRange::parse(args.get(2), args.get(3))?);
    zremrange_generic(ctx, args, bounds)
}

/// ZREMRANGEBYLEX key min max: the number of members removed.
fn zremrangebylex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bounds = Bounds::Lex(LexRange::parse(args.get(2), args.get(3))?);
    zremrange_generic(ctx, args, bounds)
}

fn zremrange_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    bounds: Bounds<'_>,
) -> Result<(), CmdError> {
    let key = args.get(1);
    let event = match bounds {
        Bounds::Rank(..) => "zremrangebyrank",
        Bounds::Score(_) => "zremrangebyscore",
        Bounds::Lex(_) => "zremrangebylex",
    };
    let Some(e) = ctx.shard.lookup_write(ctx.db, key) else {
        ctx.out.int(0);
        return Ok(());
    };
    let z = as_zset_mut(e)?;
    let (a, b) = match bounds {
        Bounds::Rank(start, end) => {
            let len = z.len() as i64;
            let (mut s, mut e) = (start, end);
            if s < 0 {
                s += len;
            }
            if e < 0 {
                e += len;
            }
            s = s.max(0);
            if s > e || s >= len {
                (0, 0)
            } else {
                (s as usize, e.min(len - 1) as usize + 1)
            }
        }
        Bounds::Score(r) => r.ranks(z),
        Bounds::Lex(r) => r.doomed(z),
    };
    let deleted = b - a;
    if deleted > 0 {
        z.remove_ranks(a, b);
        let empty = z.is_empty();
        ctx.propagate_as_is(args);
        after_removal(ctx, key, event, empty);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

// ---------------------------------------------------------------------------
// Pops

/// Removes up to `count` members from the low (`max == false`) or high end
/// of the set at `key` (which exists), deleting the key if it empties.
fn pop_members(ctx: &mut ShardCtx<'_>, key: &[u8], max: bool, count: usize) -> Vec<(Vec<u8>, f64)> {
    let Some(e) = ctx.shard.lookup_write(ctx.db, key) else {
        return Vec::new();
    };
    let Value::ZSet(z) = e.value_mut() else {
        return Vec::new();
    };
    let len = z.len();
    let n = count.min(len);
    let first = if max { len.wrapping_sub(1) } else { 0 };
    let popped: Vec<(Vec<u8>, f64)> = z
        .iter_from(first, max)
        .take(n)
        .map(|(m, s)| (m.to_vec(), s))
        .collect();
    if max {
        z.remove_ranks(len - n, len);
    } else {
        z.remove_ranks(0, n);
    }
    let empty = z.is_empty();
    if n > 0 {
        after_removal(ctx, key, if max { "zpopmax" } else { "zpopmin" }, empty);
    }
    popped
}

/// ZPOPMIN key [count]
fn zpopmin(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zpop_generic(ctx, args, false)
}

/// ZPOPMAX key [count]
fn zpopmax(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zpop_generic(ctx, args, true)
}

/// Without a count: a flat `[member, score]` (empty if missing); with one:
/// RESP2 a flat array, RESP3 an array of pairs.
fn zpop_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, max: bool) -> Result<(), CmdError> {
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let count = if args.len() == 3 {
        Some(parse_positive(args.get(2))? as usize)
    } else {
        None
    };
    let key = args.get(1);
    match ctx.shard.lookup_write(ctx.db, key) {
        None => {
            ctx.out.array(0);
            return Ok(());
        }
        Some(e) => {
            as_zset(e)?;
        }
    }
    if count == Some(0) {
        ctx.out.array(0);
        return Ok(());
    }
    let nested = ctx.out.resp3() && count.is_some();
    let popped = pop_members(ctx, key, max, count.unwrap_or(1));
    if !popped.is_empty() {
        ctx.propagate_as_is(args);
    }
    if nested {
        ctx.out.array(popped.len());
    } else {
        ctx.out.array(popped.len() * 2);
    }
    for (m, s) in &popped {
        if nested {
            ctx.out.array(2);
        }
        ctx.out.bulk(m);
        ctx.out.double(*s);
    }
    Ok(())
}

/// BZPOPMIN key [key ...] timeout
fn bzpopmin(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    bzpop_generic(ctx, args, false)
}

/// BZPOPMAX key [key ...] timeout
fn bzpopmax(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    bzpop_generic(ctx, args, true)
}

/// The first key (in argument order) holding a non-empty sorted set;
/// WRONGTYPE if an existing key before it holds another type.
fn first_nonempty<'a>(
    ctx: &mut ShardCtx<'_>,
    keys: &[&'a [u8]],
) -> Result<Option<&'a [u8]>, CmdError> {
    for &k in keys {
        if !ctx.may_serve(k) {
            continue;
        }
        if let Some(e) = ctx.shard.lookup_write(ctx.db, k) {
            if !as_zset(e)?.is_empty() {
                return Ok(Some(k));
            }
        }
    }
    Ok(None)
}

/// Blocks on `keys` if allowed, else replies the timeout's null array
/// (Redis inside MULTI or scripts).
fn block_or_null(ctx: &mut ShardCtx<'_>, keys: Vec<Vec<u8>>, deadline_ms: u64) {
    if ctx.may_block {
        ctx.block_on(keys, deadline_ms);
    } else {
        ctx.out.null_array();
    }
}

/// The non-blocking pop a blocking or multi-key one is propagated as.
fn zpop_name(max: bool) -> &'static [u8] {
    if max {
        b"ZPOPMAX"
    } else {
        b"ZPOPMIN"
    }
}

/// `[key, member, score]` of the first non-empty set, or block.
/// Propagated as `ZPOPMIN key` / `ZPOPMAX key`.
fn bzpop_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, max: bool) -> Result<(), CmdError> {
    // From the clock now, as Redis (the loop's cached one may be old).
    let deadline = parse_timeout(args.get(args.len() - 1), engine::now_ms())?;
    let keys: Vec<&[u8]> = args.iter().skip(1).take(args.len() - 2).collect();
    match first_nonempty(ctx, &keys)? {
        Some(k) => {
            let popped = pop_members(ctx, k, max, 1);
            if !popped.is_empty() {
                ctx.propagate(&[zpop_name(max), k]);
            }
            ctx.out.array(1 + 2 * popped.len());
            ctx.out.bulk(k);
            for (m, s) in &popped {
                ctx.out.bulk(m);
                ctx.out.double(*s);
            }
        }
        None => block_or_null(ctx, keys.iter().map(|k| k.to_vec()).collect(), deadline),
    }
    Ok(())
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]
fn zmpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zmpop_generic(ctx, args, 1, false)
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]
fn bzmpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zmpop_generic(ctx, args, 2, true)
}

/// `[key, [[member, score] ...]]` from the first non-empty set; a null
/// array if none (ZMPOP), or block (BZMPOP). Propagated as `ZPOPMIN|ZPOPMAX
/// key count` with the number of members popped.
fn zmpop_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    at: usize,
    block: bool,
) -> Result<(), CmdError> {
    let numkeys = parse_range_i64(
        args.get(at),
        1,
        i64::MAX,
        "numkeys should be greater than 0",
    )?;
    let where_idx = (at as u64).saturating_add(numkeys as u64).saturating_add(1);
    if where_idx >= args.len() as u64 {
        return Err(CmdError::Syntax);
    }
    let where_idx = where_idx as usize;
    let max = if eq_ic(args.get(where_idx), "min") {
        false
    } else if eq_ic(args.get(where_idx), "max") {
        true
    } else {
        return Err(CmdError::Syntax);
    };
    let mut count: Option<i64> = None;
    let mut j = where_idx + 1;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if count.is_none() && eq_ic(args.get(j), "count") && more > 0 {
            j += 1;
            count = Some(parse_range_i64(
                args.get(j),
                1,
                i64::MAX,
                "count should be greater than 0",
            )?);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let count = count.unwrap_or(1) as usize;
    let deadline = if block {
        parse_timeout(args.get(1), engine::now_ms())?
    } else {
        0
    };
    let keys: Vec<&[u8]> = args.iter().skip(at + 1).take(numkeys as usize).collect();
    let found = if block {
        first_nonempty(ctx, &keys)?
    } else {
        // ZMPOP stops at the first existing key (never empty in Redis).
        let mut found = None;
        for &k in &keys {
            if let Some(e) = ctx.shard.lookup_write(ctx.db, k) {
                as_zset(e)?;
                found = Some(k);
                break;
            }
        }
        found
    };
    match found {
        Some(k) => {
            let popped = pop_members(ctx, k, max, count);
            if !popped.is_empty() {
                let mut n = itoa::Buffer::new();
                ctx.propagate(&[zpop_name(max), k, n.format(popped.len()).as_bytes()]);
            }
            ctx.out.array(2);
            ctx.out.bulk(k);
            ctx.out.array(popped.len());
            for (m, s) in &popped {
                ctx.out.array(2);
                ctx.out.bulk(m);
                ctx.out.double(*s);
            }
        }
        None if block => block_or_null(ctx, keys.iter().map(|k| k.to_vec()).collect(), deadline),
        None => ctx.out.null_array(),
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

// ---------------------------------------------------------------------------
// ZUNION / ZINTER / ZDIFF (+STORE), ZINTERCARD

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

fn aggregate(target: &mut f64, v: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += v;
            // inf + -inf: Redis stores 0 rather than NaN.
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if v < *target {
                *target = v;
            }
        }
        Aggregate::Max => {
            if v > *target {
                *target = v;
            }
        }
    }
}

/// ZUNION numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]
fn zunion(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, None, 1, SetOp::Union, false)
}

/// ZINTER numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]
fn zinter(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, None, 1, SetOp::Inter, false)
}

/// ZDIFF numkeys key [key ...] [WITHSCORES]
fn zdiff(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, None, 1, SetOp::Diff, false)
}

/// ZINTERCARD numkeys key [key ...] [LIMIT limit]
fn zintercard(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, None, 1, SetOp::Inter, true)
}

/// ZUNIONSTORE dst numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE ...]
fn zunionstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, Some(args.get(1)), 2, SetOp::Union, false)
}

/// ZINTERSTORE dst numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE ...]
fn zinterstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, Some(args.get(1)), 2, SetOp::Inter, false)
}

/// ZDIFFSTORE dst numkeys key [key ...]
fn zdiffstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, Some(args.get(1)), 2, SetOp::Diff, false)
}

/// Redis's `zunionInterDiffGenericCommand`.
fn setop_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    dst: Option<&[u8]>,
    at: usize,
    op: SetOp,
    card_only: bool,
) -> Result<(), CmdError> {
    let setnum = parse_i64(args.get(at))?;
    if setnum < 1 {
        let name = String::from_utf8_lossy(args.get(0)).to_ascii_lowercase();
        return Err(CmdError::err(format!(
            "at least 1 input key is needed for '{name}' command"
        )));
    }
    if setnum as u64 > (args.len() - (at + 1)) as u64 {
        return Err(CmdError::Syntax);
    }
    let setnum = setnum as usize;
    let keys: Vec<&[u8]> = args.iter().skip(at + 1).take(setnum).collect();
    // Type checks (and lazy expiry) first, as Redis's lookups.
    let touch = ctx.touch();
    for k in &keys {
        if let Some(e) = ctx.shard.lookup_read(ctx.db, k, touch) {
            if !matches!(e.value(), ValueRef::Set(_)) {
                as_zset(e)?;
            }
        }
    }
    let mut weights = vec![1.0f64; setnum];
    let mut how = Aggregate::Sum;
    let mut withscores = false;
    let mut limit: i64 = 0;
    let mut j = at + 1 + setnum;
    while j < args.len() {
        let remaining = args.len() - j;
        let a = args.get(j);
        if op != SetOp::Diff && !card_only && remaining > setnum && eq_ic(a, "weights") {
            j += 1;
            for w in weights.iter_mut() {
                *w = parse_double(args.get(j))
                    .ok_or_else(|| CmdError::err("weight value is not a float"))?;
                j += 1;
            }
        } else if op != SetOp::Diff && !card_only && remaining >= 2 && eq_ic(a, "aggregate") {
            let v = args.get(j + 1);
            how = if eq_ic(v, "sum") {
                Aggregate::Sum
            } else if eq_ic(v, "min") {
                Aggregate::Min
            } else if eq_ic(v, "max") {
                Aggregate::Max
            } else {
                return Err(CmdError::Syntax);
            };
            j += 2;
        } else if dst.is_none() && !card_only && eq_ic(a, "withscores") {
            withscores = true;
            j += 1;
        } else if card_only && remaining >= 2 && eq_ic(a, "limit") {
            limit = parse_range_i64(args.get(j + 1), 0, i64::MAX, "LIMIT can't be negative")?;
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }

    let db = &ctx.shard.dbs[ctx.db];
    // Set inputs as sorted sets of members scored 1 (Redis reads them
    // through the same iterator).
    let lim = ctx.shard.enc;
    let as_sets: Vec<Option<ZSet>> = keys
        .iter()
        .map(|k| match db.get(k).map(|e| e.value()) {
            Some(ValueRef::Set(s)) => {
                let mut z = ZSet::with_hint(s.len(), 0, &lim);
                for m in s.iter() {
                    engine::types::set::with_bytes(m, |b| z.insert(b, 1.0, &lim));
                }
                Some(z)
            }
            _ => None,
        })
        .collect();
    let mut srcs: Vec<(Option<&ZSet>, f64)> = keys
        .iter()
        .zip(&weights)
        .zip(&as_sets)
        .map(|((k, &w), set)| {
            let z = set.as_ref().or_else(|| {
                db.get(k).and_then(|e| match e.value() {
                    ValueRef::ZSet(z) => Some(z),
                    _ => None,
                })
            });
            (z, w)
        })
        .collect();
    let len_of = |s: &(Option<&ZSet>, f64)| s.0.map_or(0, ZSet::len);
    if op != SetOp::Diff {
        srcs.sort_by_key(len_of);
    }
    let mut rows: Vec<(Vec<u8>, f64)> = Vec::new();
    let mut cardinality: i64 = 0;
    match op {
        SetOp::Inter => {
            if let (Some(first), w0) = srcs[0] {
                // Redis iterates inputs from their tail.
                'members: for (m, s) in first.iter_from(first.len().saturating_sub(1), true) {
                    let mut score = w0 * s;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    for &(other, w) in &srcs[1..] {
                        match other.and_then(|o| o.score(m)) {
                            Some(v) => aggregate(&mut score, v * w, how),
                            None => continue 'members,
                        }
                    }
                    if card_only {
                        cardinality += 1;
                        if limit > 0 && cardinality >= limit {
                            break;
                        }
                    } else {
                        rows.push((m.to_vec(), score));
                    }
                }
            }
        }
        SetOp::Union => {
            let mut acc: HashMap<&[u8], f64> = HashMap::new();
            let mut order: Vec<&[u8]> = Vec::new();
            for &(z, w) in &srcs {
                let Some(z) = z else { continue };
                for (m, s) in z.iter() {
                    let mut score = w * s;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    match acc.get_mut(m) {
                        Some(t) => aggregate(t, score, how),
                        None => {
                            acc.insert(m, score);
                            order.push(m);
                        }
                    }
                }
            }
            rows = order.into_iter().map(|m| (m.to_vec(), acc[m])).collect();
        }
        SetOp::Diff => {
            if let (Some(first), _) = srcs[0] {
                for (m, s) in first.iter() {
                    let elsewhere = srcs[1..]
                        .iter()
                        .any(|&(o, _)| o.is_some_and(|o| o.score(m).is_some()));
                    if !elsewhere {
                        rows.push((m.to_vec(), s));
                    }
                }
            }
        }
    }
    if card_only {
        ctx.out.int(cardinality);
        return Ok(());
    }
    rows.sort_by(|a, b| ds::ranked::cmp_key(a.1, &a.0, b.1, &b.0));
    match dst {
        Some(dst) => {
            // Built as a skiplist, then compacted if small enough (Redis's
            // `zsetConvertToListpackIfNeeded`).
            let lim = ctx.shard.enc;
            let mut r = ds::ranked::Ranked::new();
            for (m, s) in &rows {
                r.insert(m, *s);
            }
            let mut z = ZSet::Skip(Box::new(r));
            z.compact_if_fits(&lim);
            let event = match op {
                SetOp::Union => "zunionstore",
                SetOp::Inter => "zinterstore",
                SetOp::Diff => "zdiffstore",
            };
            debug_assert_eq!(dst, args.get(1));
            store_result(ctx, args, z, event);
        }
        None => {
            results_header(ctx.out, rows.len(), withscores);
            for (m, s) in &rows {
                result(ctx.out, m, *s, withscores);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;

    fn run(t: &mut TestServer, argv: &[&str]) -> String {
        let v: Vec<&[u8]> = argv.iter().map(|s| s.as_bytes()).collect();
        String::from_utf8_lossy(&t.raw(&v)).into_owned()
    }

    #[test]
    fn strtod_like_c() {
        assert_eq!(strtod(b"1.5"), (1.5, 3, false));
        assert_eq!(strtod(b" -2e3x"), (-2000.0, 5, false));
        assert_eq!(strtod(b"0x10"), (16.0, 4, false));
        assert_eq!(strtod(b"0x1p-2"), (0.25, 6, false));
        assert_eq!(strtod(b"InFinity"), (f64::INFINITY, 8, false));
        assert_eq!(strtod(b"1e"), (1.0, 1, false));
        assert_eq!(strtod(b""), (0.0, 0, false));
        assert_eq!(strtod(b"."), (0.0, 0, false));
        assert!(strtod(b"1e400").2);
        assert!(strtod(b"1e-400").2);
        assert!(strtod(b"nan").0.is_nan());
        assert_eq!(parse_double(b"1e400"), None);
        assert_eq!(parse_double(b" 1"), None);
        assert_eq!(parse_double(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score_bound(b""), Some((0.0, false)));
        assert_eq!(parse_score_bound(b"(1e400"), Some((f64::INFINITY, true)));
        assert_eq!(parse_score_bound(b"nan"), None);
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
