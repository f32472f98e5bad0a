//! Commands on sets (Redis's `t_set.c`). Request path.
//!
//! Handlers read as parse -> op -> reply and find every syntax error
//! before mutating, in Redis 7.0's order of checks. The representation and
//! its encodings live in `engine::types::set`; here are the commands'
//! semantics, reply shapes (RESP3 sets `~` exactly where Redis 7.0 sends
//! them: SMEMBERS, SINTER, SUNION, SDIFF, SPOP with a count; SRANDMEMBER
//! with a count stays an array) and Redis's algorithms where they decide
//! the stored encoding (SINTERSTORE's starting encoding and final intset
//! conversion, SDIFF's choice of algorithm, SPOP's two strategies).
//!
//! Multi-key commands (SMOVE, SINTER*, SUNION*, SDIFF*, SINTERCARD) are
//! plain shard handlers; when their keys span shards, dispatch runs them
//! through `crate::scratch` under the transaction layer's locks.
//!
//! Limits: SRANDMEMBER with a negative count replies `|count|` members as
//! Redis does (bounded only by the client's output buffer there).

use ds::events as ev;
use engine::lazyfree::Del;
use engine::types::set::{with_bytes, Member, OwnedMember, SetEncoding};
use engine::{Entry, Set, Shard, Value, ValueRef};
use rand::rngs::SmallRng;
use resp::{Args, Reply};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, ShardHandler, NO_KEYS};
use crate::util::{as_set, as_set_mut, eq_ic, parse_i64};

const W_SET_FAST: &[&str] = &["write", "set", "fast"];
const W_SET_SLOW: &[&str] = &["write", "set", "slow"];
const R_SET_FAST: &[&str] = &["read", "set", "fast"];
const R_SET_SLOW: &[&str] = &["read", "set", "slow"];

const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    k: crate::table::Keys,
    h: ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, k, Exec::Shard(h, None), acl)
}

pub(crate) const COMMANDS: &[CommandSpec] = &[
    cmd(
        "sadd",
        -3,
        WRITE | DENYOOM | FAST,
        keys(1, 1, 1),
        sadd,
        W_SET_FAST,
    ),
    cmd("srem", -3, WRITE | FAST, keys(1, 1, 1), srem, W_SET_FAST),
    cmd("smembers", 2, READONLY, keys(1, 1, 1), smembers, R_SET_SLOW),
    cmd(
        "sismember",
        3,
        READONLY | FAST,
        keys(1, 1, 1),
        sismember,
        R_SET_FAST,
    ),
    cmd(
        "smismember",
        -3,
        READONLY | FAST,
        keys(1, 1, 1),
        smismember,
        R_SET_FAST,
    ),
    cmd(
        "scard",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        scard,
        R_SET_FAST,
    ),
    cmd("spop", -2, WRITE | FAST, keys(1, 1, 1), spop, W_SET_FAST),
    cmd(
        "srandmember",
        -2,
        READONLY,
        keys(1, 1, 1),
        srandmember,
        R_SET_SLOW,
    ),
    cmd("smove", 4, WRITE | FAST, keys(1, 2, 1), smove, W_SET_FAST),
    cmd("sinter", -2, READONLY, keys(1, -1, 1), sinter, R_SET_SLOW),
    cmd("sunion", -2, READONLY, keys(1, -1, 1), sunion, R_SET_SLOW),
    cmd("sdiff", -2, READONLY, keys(1, -1, 1), sdiff, R_SET_SLOW),
    cmd(
        "sinterstore",
        -3,
        WRITE | DENYOOM,
        keys(1, -1, 1),
        sinterstore,
        W_SET_SLOW,
    ),
    cmd(
        "sunionstore",
        -3,
        WRITE | DENYOOM,
        keys(1, -1, 1),
        sunionstore,
        W_SET_SLOW,
    ),
    cmd(
        "sdiffstore",
        -3,
        WRITE | DENYOOM,
        keys(1, -1, 1),
        sdiffstore,
        W_SET_SLOW,
    ),
    cmd(
        "sintercard",
        -3,
        READONLY | MOVABLE_KEYS,
        NO_KEYS,
        sintercard,
        R_SET_SLOW,
    )
    .with_getkeys(sintercard_keys),
    cmd("sscan", -3, READONLY, keys(1, 1, 1), sscan, R_SET_SLOW),
];

/// Writes a member as a bulk string (integers without allocating).
#[inline]
fn reply_member(out: &mut Reply, m: Member<'_>) {
    match m {
        Member::Int(n) => out.bulk_int(n),
        Member::Str(b) => out.bulk(b),
    }
}

/// Writes a whole set as a RESP3 set (`~`) / RESP2 array.
fn reply_set(out: &mut Reply, s: &Set) {
    out.set(s.len());
    for m in s.iter() {
        reply_member(out, m);
    }
}

// ---------------------------------------------------------------------------
// Single-key commands

/// SADD key member [member ...]: the number of members added. A new key
/// starts in the encoding Redis 7.2 picks from the first member and the
/// argument count; an existing one converts first if the count cannot fit.
fn sadd(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    let lim = ctx.shard.enc;
    let hint = args.len() - 2;
    let mut added = 0;
    match ctx.shard.lookup_write(ctx.db, key) {
        Some(e) => {
            let s = as_set_mut(e)?;
            s.maybe_convert(hint, &lim);
            for m in args.iter().skip(2) {
                added += i64::from(s.add(m, &lim));
            }
            if added > 0 {
                ctx.shard.dbs[ctx.db].signal(key);
            }
        }
        None => {
            let mut s = Set::create(args.get(2), hint, &lim);
            for m in args.iter().skip(2) {
                added += i64::from(s.add(m, &lim));
            }
            ctx.shard.store(ctx.db, key, Value::Set(Box::new(s)), 0);
        }
    }
    if added > 0 {
        ctx.propagate_as_is(args);
        ctx.notify(ev::SET, "sadd", key);
    }
    ctx.out.int(added);
    Ok(())
}

/// SREM key member [member ...]: the number removed; the key goes when
/// the set empties. Nothing removed, nothing signalled.
fn srem(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    let Some(e) = ctx.shard.lookup_write(ctx.db, key) else {
        ctx.out.int(0);
        return Ok(());
    };
    let s = as_set_mut(e)?;
    let mut deleted = 0;
    let mut emptied = false;
    for m in args.iter().skip(2) {
        if s.remove(m) {
            deleted += 1;
            if s.is_empty() {
                emptied = true;
                break;
            }
        }
    }
    if deleted > 0 {
        ctx.propagate_as_is(args);
        ctx.notify(ev::SET, "srem", key);
    }
    if emptied {
        ctx.shard.remove(ctx.db, key);
        ctx.notify(ev::GENERIC, "del", key);
    } else if deleted > 0 {
        ctx.shard.dbs[ctx.db].signal(key);
    }
    ctx.out.int(deleted);
    Ok(())
}

/// SMEMBERS key: every member (a RESP3 set); empty for a missing key.
fn smembers(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => ctx.out.set(0),
        Some(e) => reply_set(ctx.out, as_set(e)?),
    }
    Ok(())
}

/// SISMEMBER key member: 1 or 0.
fn sismember(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let found = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => false,
        Some(e) => as_set(e)?.contains(args.get(2)),
    };
    ctx.out.int(i64::from(found));
    Ok(())
}

/// SMISMEMBER key member [member ...]: an array of 1/0, one per member (a
/// missing key is an empty set).
fn smismember(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let set = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => None,
        Some(e) => Some(as_set(e)?),
    };
    ctx.out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        let found = set.is_some_and(|s| s.contains(m));
        ctx.out.int(i64::from(found));
    }
    Ok(())
}

/// SCARD key: the number of members, 0 for a missing key.
fn scard(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let n = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => 0,
        Some(e) => as_set(e)?.len(),
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// The set at `key` for writing (expired first, access recorded) and the
/// shard's random generator, borrowed together.
fn write_with_rng<'a>(
    shard: &'a mut Shard,
    db: usize,
    key: &[u8],
) -> Option<(&'a mut Entry, &'a mut SmallRng)> {
    shard.lookup_write(db, key)?;
    let Shard { dbs, rng, .. } = shard;
    Some((dbs[db].get_mut(key)?, rng))
}

/// SPOP key [count]: without a count, a random member removed (null for a
/// missing key); with one, a RESP3 set of up to `count` removed members.
fn spop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if args.len() == 3 {
        return spop_count(ctx, args);
    }
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let key = args.get(1);
    let Some((e, rng)) = write_with_rng(ctx.shard, ctx.db, key) else {
        ctx.out.null();
        return Ok(());
    };
    let s = as_set_mut(e)?;
    let Some(m) = s.pop_random(rng) else {
        ctx.out.null();
        return Ok(());
    };
    let emptied = s.is_empty();
    reply_member(ctx.out, m.as_member());
    // Redis 7.0 propagates the member removed, not the random choice.
    let mut buf = itoa::Buffer::new();
    let member: &[u8] = match m.as_member() {
        Member::Str(b) => b,
        Member::Int(n) => buf.format(n).as_bytes(),
    };
    ctx.propagate(&[b"SREM", key, member]);
    ctx.notify(ev::SET, "spop", key);
    if emptied {
        ctx.shard.remove(ctx.db, key);
        ctx.notify(ev::GENERIC, "del", key);
    } else {
        ctx.shard.dbs[ctx.db].signal(key);
    }
    Ok(())
}

/// Members per SREM record of an SPOP with a count (Redis's `batchsize`).
const SPOP_BATCH: usize = 1024;

/// A member as a record's bulk string.
fn write_member(out: &mut Vec<u8>, m: Member<'_>) {
    match m {
        Member::Str(b) => engine::outbox::write_bulk(out, b),
        Member::Int(n) => engine::outbox::write_bulk(out, itoa::Buffer::new().format(n).as_bytes()),
    }
}

/// Redis's `getPositiveLongFromObjectOrReply` with its default message.
fn parse_positive(arg: &[u8]) -> Result<usize, CmdError> {
    match resp::string2ll(arg) {
        Some(n) if n >= 0 => Ok(n as usize),
        _ => Err(CmdError::err("value is out of range, must be positive")),
    }
}

/// SPOP key count: the count is checked before the key. Popping at least
/// the whole set replies it (in the order SUNION would) and deletes the
/// key; otherwise see `Set::pop_many`.
fn spop_count(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let count = parse_positive(args.get(2))?;
    let key = args.get(1);
    let lim = ctx.shard.enc;
    let Some((e, rng)) = write_with_rng(ctx.shard, ctx.db, key) else {
        ctx.out.set(0);
        return Ok(());
    };
    let s = as_set_mut(e)?;
    if count == 0 {
        ctx.out.set(0);
        return Ok(());
    }
    if count >= s.len() {
        // Redis replies through SUNION's code: the union of one set,
        // built from an intset.
        let mut u = Set::new_intset();
        for m in s.iter() {
            u.add_member(m, &lim);
        }
        reply_set(ctx.out, &u);
        ctx.shard.remove(ctx.db, key);
        ctx.propagate(&[b"DEL", key]);
        ctx.notify(ev::SET, "spop", key);
        ctx.notify(ev::GENERIC, "del", key);
        return Ok(());
    }
    let popped = s.pop_many(count, rng, &lim);
    ctx.out.set(popped.len());
    for m in &popped {
        reply_member(ctx.out, m.as_member());
    }
    ctx.shard.dbs[ctx.db].signal(key);
    // Redis 7.0: the members removed, as SREMs of up to 1024 members.
    for batch in popped.chunks(SPOP_BATCH) {
        ctx.propagate_with(2 + batch.len(), |out| {
            engine::outbox::write_bulk(out, b"SREM");
            engine::outbox::write_bulk(out, key);
            for m in batch {
                write_member(out, m.as_member());
            }
        });
    }
    ctx.notify(ev::SET, "spop", key);
    Ok(())
}

/// SRANDMEMBER key [count]: without a count, a random member or null; with
/// one, an array (also in RESP3): a positive count gives distinct members
/// (all of them when the count reaches the size), a negative one `|count|`
/// members drawn with repetition.
fn srandmember(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let with_count = args.len() == 3;
    let (count, uniq) = if with_count {
        let l = parse_i64(args.get(2))?;
        if l == i64::MIN {
            return Err(CmdError::err(
                "value is out of range, value must between -9223372036854775807 and \
                 9223372036854775807",
            ));
        }
        (l.unsigned_abs() as usize, l >= 0)
    } else {
        (1, true)
    };
    let key = args.get(1);
    let touch = ctx.touch();
    if ctx.shard.lookup_read(ctx.db, key, touch).is_none() {
        if with_count {
            ctx.out.array(0);
        } else {
            ctx.out.null();
        }
        return Ok(());
    }
    let cap = ctx.reply_cap();
    let Shard { dbs, rng, .. } = &mut *ctx.shard;
    let Some(e) = dbs[ctx.db].get(key) else {
        ctx.out.null();
        return Ok(());
    };
    let s = as_set(e)?;
    let out = &mut *ctx.out;
    if !with_count {
        match s.random(rng) {
            Some(m) => reply_member(out, m),
            None => out.null(),
        }
        return Ok(());
    }
    if count == 0 {
        out.array(0);
    } else if !uniq || count == 1 {
        out.array(count);
        // Stops past the output limit, as Redis's loop stops once the
        // client is to be closed (the reply is never sent).
        s.random_repeated(count, rng, |m| {
            reply_member(out, m);
            out.len() <= cap
        });
    } else if count >= s.len() {
        out.array(s.len());
        for m in s.iter() {
            reply_member(out, m);
        }
    } else {
        let picked = s.random_distinct(count, rng);
        out.array(picked.len());
        for m in picked {
            reply_member(out, m);
        }
    }
    Ok(())
}

/// SMOVE source destination member: 1 if moved (or already in `source`
/// when both are the same key), 0 if `source` is missing or lacks it.
/// A missing source answers 0 before any type check, as Redis.
fn smove(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (src, dst, member) = (args.get(1), args.get(2), args.get(3));
    let lim = ctx.shard.enc;
    let db = ctx.db;
    let src_is_set = ctx
        .shard
        .lookup_write(db, src)
        .map(|e| matches!(e.value(), ValueRef::Set(_)));
    let dst_is_set = ctx
        .shard
        .lookup_write(db, dst)
        .map(|e| matches!(e.value(), ValueRef::Set(_)));
    let Some(src_is_set) = src_is_set else {
        ctx.out.int(0);
        return Ok(());
    };
    if !src_is_set || dst_is_set == Some(false) {
        return Err(CmdError::WrongType);
    }
    let Some(e) = ctx.shard.dbs[db].get_mut(src) else {
        ctx.out.int(0);
        return Ok(());
    };
    let s = as_set_mut(e)?;
    if src == dst {
        let found = s.contains(member);
        ctx.out.int(i64::from(found));
        return Ok(());
    }
    if !s.remove(member) {
        ctx.out.int(0);
        return Ok(());
    }
    let emptied = s.is_empty();
    ctx.propagate_as_is(args);
    ctx.notify(ev::SET, "srem", src);
    if emptied {
        ctx.shard.remove(db, src);
        ctx.notify(ev::GENERIC, "del", src);
    } else {
        ctx.shard.dbs[db].signal(src);
    }
    match ctx.shard.dbs[db].get_mut(dst) {
        Some(e) => {
            if as_set_mut(e)?.add(member, &lim) {
                ctx.shard.dbs[db].signal(dst);
                ctx.notify(ev::SET, "sadd", dst);
            }
        }
        None => {
            let mut s = Set::create(member, 1, &lim);
            s.add(member, &lim);
            ctx.shard.store(db, dst, Value::Set(Box::new(s)), 0);
            ctx.notify(ev::SET, "sadd", dst);
        }
    }
    ctx.out.int(1);
    Ok(())
}

// ---------------------------------------------------------------------------
// Multi-key commands

/// Looks every key up for reading (expiring, counting hits and misses, as
/// Redis's `lookupKeyRead` per key) and fails with WRONGTYPE at the first
/// non-set; then the sets, `None` for missing keys, borrowed together.
fn gather<'a>(
    shard: &'a mut Shard,
    db: usize,
    touch: bool,
    keys: &[&[u8]],
) -> Result<Vec<Option<&'a Set>>, CmdError> {
    for k in keys {
        if let Some(e) = shard.lookup_read(db, k, touch) {
            as_set(e)?;
        }
    }
    let d = &shard.dbs[db];
    keys.iter()
        .map(|k| d.get(k).map(as_set).transpose())
        .collect()
}

/// Stores the result of the *STORE command `cmd` (its destination is its
/// first key; replacing any value and TTL) and replies its size, emitting
/// `event`; an empty result deletes the destination (a `del` event if
/// there was one) and replies 0. Propagated as received when it changed
/// the destination.
fn store_result(ctx: &mut ShardCtx<'_>, cmd: Args<'_>, s: Set, event: &'static str) {
    let (n, dst) = (s.len(), cmd.get(1));
    if n > 0 {
        ctx.shard.store(ctx.db, dst, Value::Set(Box::new(s)), 0);
        ctx.propagate_as_is(cmd);
        ctx.notify(ev::SET, event, dst);
    } else if ctx.shard.delete(ctx.db, dst, Del::Server) {
        ctx.propagate_as_is(cmd);
        ctx.notify(ev::GENERIC, "del", dst);
    }
    ctx.out.int(n as i64);
}

/// What SINTER's generic code produces.
enum InterOut {
    Reply,
    Store,
    Card(usize),
}

/// Redis's `sinterGenericCommand`: SINTER, SINTERSTORE (`dst`), SINTERCARD
/// (`Card(limit)`, 0 = no limit).
fn sinter_generic(
    ctx: &mut ShardCtx<'_>,
    keys: &[&[u8]],
    dst: Option<Args<'_>>,
    mode: InterOut,
) -> Result<(), CmdError> {
    let lim = ctx.shard.enc;
    let touch = ctx.touch();
    let sets = gather(ctx.shard, ctx.db, touch, keys)?;
    let Some(mut sets) = sets.into_iter().collect::<Option<Vec<&Set>>>() else {
        // A missing key is an empty set: so is the intersection.
        match (dst, mode) {
            (Some(d), _) => store_result(ctx, d, Set::new_intset(), "sinterstore"),
            (None, InterOut::Card(_)) => ctx.out.int(0),
            _ => ctx.out.set(0),
        }
        return Ok(());
    };
    // Smallest first (a stable sort, as glibc's qsort is in practice).
    sets.sort_by_key(|s| s.len());
    let first = sets[0];
    let in_all = |m: Member<'_>| {
        sets[1..]
            .iter()
            .all(|s| std::ptr::eq(*s, first) || s.contains_member(m))
    };
    match mode {
        InterOut::Card(limit) => {
            let mut n = 0;
            for m in first.iter() {
                if in_all(m) {
                    n += 1;
                    if limit != 0 && n >= limit {
                        break;
                    }
                }
            }
            ctx.out.int(n as i64);
        }
        InterOut::Reply => {
            let found: Vec<Member<'_>> = first.iter().filter(|&m| in_all(m)).collect();
            let out = &mut *ctx.out;
            out.set(found.len());
            for m in found {
                reply_member(out, m);
            }
        }
        InterOut::Store => {
            // Redis starts from an intset when the smallest set is one and
            // from a listpack otherwise, adds integers as integers, and
            // turns an all-integer result back into an intset.
            let from_table = first.kind() == SetEncoding::Table;
            let mut result = if first.kind() == SetEncoding::IntSet {
                Set::new_intset()
            } else {
                Set::new_packed()
            };
            let mut only_integers = true;
            for m in first.iter().filter(|&m| in_all(m)) {
                if let Member::Str(b) = m {
                    if !(from_table && resp::string2ll(b).is_some()) {
                        only_integers = false;
                    }
                }
                result.add_member(m, &lim);
            }
            if only_integers {
                result.maybe_to_intset(&lim);
            }
            // INVARIANT: mode Store is only used with a destination.
            let dst = dst.expect("SINTERSTORE has a destination");
            store_result(ctx, dst, result, "sinterstore");
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Diff,
}

/// Redis's `sunionDiffGenericCommand`: SUNION, SDIFF and their STORE
/// forms. The result is built from an empty intset, so its encoding
/// follows the ordinary conversions; SDIFF picks Redis's algorithm (which
/// decides that encoding too).
fn sunion_diff_generic(
    ctx: &mut ShardCtx<'_>,
    keys: &[&[u8]],
    dst: Option<Args<'_>>,
    op: SetOp,
) -> Result<(), CmdError> {
    let lim = ctx.shard.enc;
    let touch = ctx.touch();
    let mut sets = gather(ctx.shard, ctx.db, touch, keys)?;
    let same = |a: Option<&Set>, b: Option<&Set>| matches!((a, b), (Some(a), Some(b)) if std::ptr::eq(a, b));
    let sameset = sets[1..].iter().any(|s| same(sets[0], *s));
    let mut result = Set::new_intset();
    match op {
        SetOp::Union => {
            for s in sets.iter().flatten() {
                for m in s.iter() {
                    result.add_member(m, &lim);
                }
            }
        }
        SetOp::Diff if sameset => {}
        SetOp::Diff => {
            if let Some(first) = sets[0] {
                // Algorithm 1 (test each member of the first set against
                // the others) unless 2 (add the first, remove the others)
                // is clearly cheaper, weighed as Redis does.
                let live = sets.iter().flatten().count();
                let one = (first.len() * live) / 2;
                let two: usize = sets.iter().flatten().map(|s| s.len()).sum();
                if one <= two {
                    // Largest first: a member is excluded sooner.
                    sets[1..].sort_by_key(|s| std::cmp::Reverse(s.map_or(0, |s| s.len())));
                    for m in first.iter() {
                        if !sets[1..].iter().flatten().any(|s| s.contains_member(m)) {
                            result.add_member(m, &lim);
                        }
                    }
                } else {
                    for m in first.iter() {
                        result.add_member(m, &lim);
                    }
                    for s in sets[1..].iter().flatten() {
                        if result.is_empty() {
                            break;
                        }
                        for m in s.iter() {
                            result.remove_member(m);
                        }
                    }
                }
            }
        }
    }
    match dst {
        Some(d) => {
            let event = match op {
                SetOp::Union => "sunionstore",
                SetOp::Diff => "sdiffstore",
            };
            store_result(ctx, d, result, event)
        }
        None => reply_set(ctx.out, &result),
    }
    Ok(())
}

fn all_keys<'a>(args: &Args<'a>, from: usize) -> Vec<&'a [u8]> {
    (from..args.len()).map(|i| args.get(i)).collect()
}

/// SINTER key [key ...]: the intersection (a RESP3 set).
fn sinter(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    sinter_generic(ctx, &all_keys(&args, 1), None, InterOut::Reply)
}

/// SINTERSTORE destination key [key ...]: the size of the stored result.
fn sinterstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    sinter_generic(ctx, &all_keys(&args, 2), Some(args), InterOut::Store)
}

/// SUNION key [key ...]: the union (a RESP3 set).
fn sunion(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    sunion_diff_generic(ctx, &all_keys(&args, 1), None, SetOp::Union)
}

/// SUNIONSTORE destination key [key ...]: the size of the stored result.
fn sunionstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    sunion_diff_generic(ctx, &all_keys(&args, 2), Some(args), SetOp::Union)
}

/// SDIFF key [key ...]: members of the first set in none of the others.
fn sdiff(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    sunion_diff_generic(ctx, &all_keys(&args, 1), None, SetOp::Diff)
}

/// SDIFFSTORE destination key [key ...]: the size of the stored result.
fn sdiffstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    sunion_diff_generic(ctx, &all_keys(&args, 2), Some(args), SetOp::Diff)
}

/// SINTERCARD's numkeys (Redis: `getRangeLongFromObjectOrReply(1,
/// LONG_MAX)` with its own message, for non-integers too).
fn parse_numkeys(arg: &[u8]) -> Result<usize, CmdError> {
    match resp::string2ll(arg) {
        Some(n) if n >= 1 => Ok(n as usize),
        _ => Err(CmdError::err("numkeys should be greater than 0")),
    }
}

/// Key positions of SINTERCARD: `numkeys` keys from argument 2; none when
/// numkeys is invalid (the handler then replies the error).
fn sintercard_keys(args: Args<'_>) -> Vec<usize> {
    match parse_numkeys(args.get(1)) {
        Ok(n) if n <= args.len() - 2 => (2..2 + n).collect(),
        _ => Vec::new(),
    }
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]: the intersection's
/// size, counting stopped at `limit` (0 = no limit).
fn sintercard(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let numkeys = parse_numkeys(args.get(1))?;
    if numkeys > args.len() - 2 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let mut limit = 0;
    let mut j = 2 + numkeys;
    while j < args.len() {
        let more = j + 1 < args.len();
        if eq_ic(args.get(j), "limit") && more {
            j += 1;
            limit = match resp::string2ll(args.get(j)) {
                Some(n) if n >= 0 => n as usize,
                _ => return Err(CmdError::err("LIMIT can't be negative")),
            };
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let keys: Vec<&[u8]> = (2..2 + numkeys).map(|i| args.get(i)).collect();
    sinter_generic(ctx, &keys, None, InterOut::Card(limit))
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]: the next cursor and a
/// page of members. Redis's order of checks: the cursor, then the key
/// (missing: an empty page, options unchecked), then the options. A
/// hashtable is walked with the dict's cursor until COUNT members or `10 *
/// COUNT` buckets; the compact encodings return everything with cursor 0.
fn sscan(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let cursor = crate::keys::parse_scan_cursor(args.get(2))?;
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        crate::keys::reply_empty_scan(ctx.out);
        return Ok(());
    };
    let s = as_set(e)?;
    let crate::keys::ScanOpts { count, pattern, .. } =
        crate::keys::parse_scan_opts(args, 3, false)?;
    let mut page: Vec<OwnedMember> = Vec::new();
    let mut next = cursor;
    let mut budget = count.saturating_mul(10);
    loop {
        next = s.scan(next, |m| page.push(m.into()));
        if next == 0 || budget == 0 || page.len() >= count {
            break;
        }
        budget -= 1;
    }
    if let Some(p) = pattern {
        page.retain(|m| with_bytes(m.as_member(), |b| ds::glob_match(p, b, false)));
    }
    let out = &mut *ctx.out;
    out.array(2);
    out.bulk(itoa::Buffer::new().format(next).as_bytes());
    out.array(page.len());
    for m in &page {
        reply_member(out, m.as_member());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! In-process tests (no sockets) on 1 and 3 shards; the byte-exact
    //! comparison with Redis is `tests/diff/set.txt`.

    use crate::table::shard_of;
    use crate::testutil::TestServer;

    /// A key named `{p}{n}` on shard `want` of `nshards`.
    fn key_on(p: &str, want: usize, nshards: usize) -> String {
        (0..10_000)
            .map(|n| format!("{p}{n}"))
            .find(|k| shard_of(k.as_bytes(), nshards) == want)
            .expect("a key on every shard")
    }

    #[test]
    fn single_and_multi_shard_agree() {
        for n in [1, 3] {
            let mut t = TestServer::new(n);
            let (a, b, d) = (
                key_on("a", 0, n),
                key_on("b", 1 % n, n),
                key_on("d", 2 % n, n),
            );
            assert_eq!(t.run(&["SADD", &a, "3", "1", "2", "x"]), ":4\r\n");
            assert_eq!(t.run(&["SADD", &b, "2", "3", "4"]), ":3\r\n");
            assert_eq!(t.run(&["SINTER", &a, &b]), "*2\r\n$1\r\n2\r\n$1\r\n3\r\n");
            assert_eq!(t.run(&["SINTERCARD", "2", &a, &b, "LIMIT", "1"]), ":1\r\n");
            assert_eq!(t.run(&["SINTERSTORE", &d, &a, &b]), ":2\r\n");
            assert_eq!(t.run(&["OBJECT", "ENCODING", &d]), "$6\r\nintset\r\n");
            assert_eq!(t.run(&["SMOVE", &a, &b, "x"]), ":1\r\n");
            assert_eq!(t.run(&["SISMEMBER", &b, "x"]), ":1\r\n");
            assert_eq!(t.run(&["OBJECT", "ENCODING", &b]), "$8\r\nlistpack\r\n");
            assert_eq!(t.run(&["SDIFFSTORE", &d, &a, &b]), ":1\r\n");
            assert_eq!(t.run(&["SMEMBERS", &d]), "*1\r\n$1\r\n1\r\n");
            assert_eq!(t.run(&["SDIFFSTORE", &d, &a, &a]), ":0\r\n");
            assert_eq!(t.run(&["EXISTS", &d]), ":0\r\n");
            assert_eq!(
                t.run(&["SPOP", &a, "10"]),
                "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
            );
            assert_eq!(t.run(&["EXISTS", &a]), ":0\r\n");
        }
    }

    #[test]
    fn sintercard_keys_and_errors() {
        let reg = crate::table::registry();
        let (_, spec) = reg.top(b"sintercard").expect("registered");
        let argv = |v: &[&str]| {
            resp::OwnedArgs::from_slices(&v.iter().map(|s| s.as_bytes()).collect::<Vec<_>>())
        };
        let mut pos = Vec::new();
        let a = argv(&["SINTERCARD", "2", "a", "b", "LIMIT", "1"]);
        spec.key_positions(a.args(), &mut pos);
        assert_eq!(pos, [2, 3]);
        for bad in [
            &["SINTERCARD", "3", "a", "b"][..],
            &["SINTERCARD", "x", "a"],
            &["SINTERCARD", "0", "a"],
        ] {
            let a = argv(bad);
            spec.key_positions(a.args(), &mut pos);
            assert!(pos.is_empty());
        }
        let mut t = TestServer::new(3);
        assert_eq!(
            t.run(&["SINTERCARD", "3", "a", "b"]),
            "-ERR Number of keys can't be greater than number of args\r\n"
        );
        assert_eq!(
            t.run(&["SINTERCARD", "0", "a"]),
            "-ERR numkeys should be greater than 0\r\n"
        );
        assert_eq!(
            t.run(&["SINTERCARD", "1", "a", "LIMIT", "-1"]),
            "-ERR LIMIT can't be negative\r\n"
        );
    }

    #[test]
    fn sscan_walks_a_hashtable() {
        let mut t = TestServer::new(1);
        let members: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
        let mut argv = vec!["SADD", "s"];
        argv.extend(members.iter().map(|s| s.as_str()));
        assert_eq!(t.run(&argv), ":300\r\n");
        let mut cursor = "0".to_string();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            let r = t.run(&["SSCAN", "s", &cursor, "COUNT", "7"]);
            let lines: Vec<&str> = r.split("\r\n").collect();
            cursor = lines[2].to_string();
            seen.extend(
                lines[4..]
                    .iter()
                    .filter(|l| l.starts_with('m'))
                    .map(|s| s.to_string()),
            );
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(cursor, "0");
        assert_eq!(seen.len(), 300);
    }
}
