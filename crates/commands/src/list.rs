//! List commands (Redis's `t_list.c`). Request path.
//!
//! Handlers read as parse → op → reply and find every argument error
//! before mutating, in Redis 7.0's order of checks: some commands parse
//! their numbers before looking the key up (LRANGE, LTRIM, LREM, LPOP's
//! count), others after (LINDEX, LSET), and clients see which error comes
//! first. A list that becomes empty is deleted; a list changed in place
//! signals its watchers exactly where Redis calls `signalModifiedKey`.
//!
//! Multi-key commands (LMOVE, RPOPLPUSH, LMPOP and the blocking forms) are
//! plain shard handlers: when their keys span shards, dispatch runs them
//! through `crate::scratch`.
//!
//! Blocking commands (BLPOP, BRPOP, BLMPOP, BLMOVE, BRPOPLPUSH) serve at
//! once when a key holds elements, in Redis's key order; otherwise they
//! block on their keys when `ctx.may_block`, and else (inside MULTI) reply
//! at once: a null array, or a null bulk for the move forms. (A blocked
//! move form that times out gets a null array, as in Redis 7.0.)

use ds::events as ev;
use engine::{List, Value};
use resp::{Args, Reply};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, Keys, ShardHandler, NO_KEYS};
use crate::util::{as_list, as_list_mut, eq_ic, parse_i64, parse_timeout};

const W_FAST: &[&str] = &["write", "list", "fast"];
const W_SLOW: &[&str] = &["write", "list", "slow"];
const R_FAST: &[&str] = &["read", "list", "fast"];
const R_SLOW: &[&str] = &["read", "list", "slow"];
const W_BLOCK: &[&str] = &["write", "list", "slow", "blocking"];

const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    k: Keys,
    h: ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, k, Exec::Shard(h, None), acl)
}

const ONE: Keys = keys(1, 1, 1);
const TWO: Keys = keys(1, 2, 1);

pub(crate) const COMMANDS: &[CommandSpec] = &[
    cmd("lpush", -3, WRITE | DENYOOM | FAST, ONE, lpush, W_FAST),
    cmd("rpush", -3, WRITE | DENYOOM | FAST, ONE, rpush, W_FAST),
    cmd("lpushx", -3, WRITE | DENYOOM | FAST, ONE, lpushx, W_FAST),
    cmd("rpushx", -3, WRITE | DENYOOM | FAST, ONE, rpushx, W_FAST),
    cmd("lpop", -2, WRITE | FAST, ONE, lpop, W_FAST),
    cmd("rpop", -2, WRITE | FAST, ONE, rpop, W_FAST),
    cmd("llen", 2, READONLY | FAST, ONE, llen, R_FAST),
    cmd("lrange", 4, READONLY, ONE, lrange, R_SLOW),
    cmd("lindex", 3, READONLY, ONE, lindex, R_SLOW),
    cmd("lset", 4, WRITE | DENYOOM, ONE, lset, W_SLOW),
    cmd("linsert", 5, WRITE | DENYOOM, ONE, linsert, W_SLOW),
    cmd("lrem", 4, WRITE, ONE, lrem, W_SLOW),
    cmd("ltrim", 4, WRITE, ONE, ltrim, W_SLOW),
    cmd("lpos", -3, READONLY, ONE, lpos, R_SLOW),
    cmd("lmove", 5, WRITE | DENYOOM, TWO, lmove, W_SLOW),
    cmd("rpoplpush", 3, WRITE | DENYOOM, TWO, rpoplpush, W_SLOW),
    cmd("lmpop", -4, WRITE | MOVABLE_KEYS, NO_KEYS, lmpop, W_SLOW).with_getkeys(lmpop_keys),
    cmd(
        "blpop",
        -3,
        WRITE | NOSCRIPT | BLOCKING,
        keys(1, -2, 1),
        blpop,
        W_BLOCK,
    ),
    cmd(
        "brpop",
        -3,
        WRITE | NOSCRIPT | BLOCKING,
        keys(1, -2, 1),
        brpop,
        W_BLOCK,
    ),
    cmd(
        "blmove",
        6,
        WRITE | DENYOOM | NOSCRIPT | BLOCKING,
        TWO,
        blmove,
        W_BLOCK,
    ),
    cmd(
        "brpoplpush",
        4,
        WRITE | DENYOOM | NOSCRIPT | BLOCKING,
        TWO,
        brpoplpush,
        W_BLOCK,
    ),
    cmd(
        "blmpop",
        -5,
        WRITE | BLOCKING | MOVABLE_KEYS,
        NO_KEYS,
        blmpop,
        W_BLOCK,
    )
    .with_getkeys(blmpop_keys),
];

/// An end of a list: Redis's `LIST_HEAD` (LEFT) / `LIST_TAIL` (RIGHT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Left,
    Right,
}

/// LEFT or RIGHT, else a syntax error (Redis's
/// `getListPositionFromObjectOrReply`).
fn parse_end(arg: &[u8]) -> Result<End, CmdError> {
    if eq_ic(arg, "left") {
        Ok(End::Left)
    } else if eq_ic(arg, "right") {
        Ok(End::Right)
    } else {
        Err(CmdError::Syntax)
    }
}

/// A `long` in `[min, i64::MAX]`, every failure (not a number included)
/// replying `msg`, as Redis's `getRangeLongFromObjectOrReply` with a
/// message.
fn parse_at_least(arg: &[u8], min: i64, msg: &str) -> Result<i64, CmdError> {
    match parse_i64(arg) {
        Ok(n) if n >= min => Ok(n),
        _ => Err(CmdError::err(msg)),
    }
}

/// After elements were removed from the list under `key`: emits the
/// command's keyspace event, then deletes the list if it became empty
/// (which signals watchers; Redis's `del` event follows), else signals
/// them.
fn after_removal(ctx: &mut ShardCtx<'_>, key: &[u8], event: &'static str, now_empty: bool) {
    ctx.notify(ev::LIST, event, key);
    if now_empty {
        ctx.shard.remove(ctx.db, key);
        ctx.notify(ev::GENERIC, "del", key);
    } else {
        ctx.shard.dbs[ctx.db].signal(key);
    }
}

/// The keyspace event of a push onto / pop from `end`.
fn push_event(end: End) -> &'static str {
    match end {
        End::Left => "lpush",
        End::Right => "rpush",
    }
}

fn pop_event(end: End) -> &'static str {
    match end {
        End::Left => "lpop",
        End::Right => "rpop",
    }
}

#[inline]
fn push(l: &mut List, end: End, v: &[u8]) {
    match end {
        End::Left => l.push_front(v),
        End::Right => l.push_back(v),
    }
}

// ---------------------------------------------------------------------------
// Push

/// Redis's `pushGenericCommand`: pushes every element in argument order;
/// replies the new length. `xx` (LPUSHX/RPUSHX): a missing key is left
/// missing and the reply is 0.
fn push_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    end: End,
    xx: bool,
) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            let l = as_list_mut(e)?;
            for v in args.iter().skip(2) {
                push(l, end, v);
            }
            let n = l.len();
            ctx.shard.dbs[db].signal(key);
            ctx.propagate_as_is(args);
            ctx.notify(ev::LIST, push_event(end), key);
            ctx.out.int(n as i64);
        }
        None if xx => ctx.out.int(0),
        None => {
            let mut l = List::new(&ctx.shard.enc);
            for v in args.iter().skip(2) {
                push(&mut l, end, v);
            }
            let n = l.len();
            ctx.shard.store(db, key, Value::List(l), 0);
            ctx.propagate_as_is(args);
            ctx.notify(ev::LIST, push_event(end), key);
            ctx.out.int(n as i64);
        }
    }
    Ok(())
}

/// LPUSH key element [element ...]: the length after the pushes.
fn lpush(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    push_generic(ctx, args, End::Left, false)
}
/// RPUSH key element [element ...]: the length after the pushes.
fn rpush(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    push_generic(ctx, args, End::Right, false)
}
/// LPUSHX key element [element ...]: as LPUSH on an existing list, else 0.
fn lpushx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    push_generic(ctx, args, End::Left, true)
}
/// RPUSHX key element [element ...]: as RPUSH on an existing list, else 0.
fn rpushx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    push_generic(ctx, args, End::Right, true)
}

// ---------------------------------------------------------------------------
// Pop

/// Writes the first `n` elements from `end` (in pop order) as an array
/// and removes them. Returns whether the list is now empty.
fn pop_range_reply(out: &mut Reply, l: &mut List, end: End, n: usize) -> bool {
    let n = n.min(l.len());
    out.array(n);
    match end {
        End::Left => {
            let mut it = l.iter();
            for _ in 0..n {
                out.optional_bulk(it.next());
            }
            l.remove_range(0, n);
        }
        End::Right => {
            let mut it = l.iter_rev();
            for _ in 0..n {
                out.optional_bulk(it.next());
            }
            let len = l.len();
            l.remove_range(len - n, n);
        }
    }
    l.is_empty()
}

/// Writes the element at `end` as a bulk and removes it. Returns whether
/// the list is now empty. The list must not be empty.
fn pop_one_reply(out: &mut Reply, l: &mut List, end: End) -> bool {
    match end {
        End::Left => {
            out.optional_bulk(l.front());
            l.pop_front();
        }
        End::Right => {
            out.optional_bulk(l.back());
            l.pop_back();
        }
    }
    l.is_empty()
}

/// Redis's `popGenericCommand`. Without a count: the element or a null
/// bulk. With a count (checked first: "must be positive"): an array of up
/// to count elements, a null *array* for a missing key, an empty array
/// for count 0 on an existing list.
fn pop_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, end: End) -> Result<(), CmdError> {
    let name = if end == End::Left { "lpop" } else { "rpop" };
    if args.len() > 3 {
        return Err(CmdError::WrongArity(name.into()));
    }
    let count = if args.len() == 3 {
        Some(parse_at_least(
            args.get(2),
            0,
            "value is out of range, must be positive",
        )?)
    } else {
        None
    };
    let (db, key) = (ctx.db, args.get(1));
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        match count {
            Some(_) => ctx.out.null_array(),
            None => ctx.out.null(),
        }
        return Ok(());
    };
    let l = as_list_mut(e)?;
    let empty = match count {
        Some(0) => {
            ctx.out.array(0);
            return Ok(());
        }
        Some(n) => pop_range_reply(ctx.out, l, end, usize::try_from(n).unwrap_or(usize::MAX)),
        None => pop_one_reply(ctx.out, l, end),
    };
    ctx.propagate_as_is(args);
    after_removal(ctx, key, pop_event(end), empty);
    Ok(())
}

/// LPOP key [count]
fn lpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    pop_generic(ctx, args, End::Left)
}
/// RPOP key [count]
fn rpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    pop_generic(ctx, args, End::Right)
}

// ---------------------------------------------------------------------------
// Reads

/// LLEN key: the length, 0 for a missing key.
fn llen(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let n = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        Some(e) => as_list(e)?.len(),
        None => 0,
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// LRANGE key start stop: the elements in the inclusive range (negative
/// indexes count from the tail), an empty array for a missing key. The
/// indexes are parsed before the key is looked up, as in Redis.
fn lrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let start = parse_i64(args.get(2))?;
    let stop = parse_i64(args.get(3))?;
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.array(0);
        return Ok(());
    };
    let l = as_list(e)?;
    match clamp_range(l.len(), start, stop) {
        None => ctx.out.array(0),
        Some((s, n)) => {
            ctx.out.array(n);
            let mut it = l.iter_from(s);
            for _ in 0..n {
                ctx.out.optional_bulk(it.next());
            }
        }
    }
    Ok(())
}

/// Redis's range normalisation (LRANGE, LTRIM): `(first index, count)`,
/// `None` when empty.
fn clamp_range(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let llen = len as i64;
    let mut start = if start < 0 { start + llen } else { start };
    let mut stop = if stop < 0 { stop + llen } else { stop };
    if start < 0 {
        start = 0;
    }
    if start > stop || start >= llen {
        return None;
    }
    if stop >= llen {
        stop = llen - 1;
    }
    Some((start as usize, (stop - start + 1) as usize))
}

/// A possibly negative index into a list of `len`, if in range.
fn index_of(len: usize, i: i64) -> Option<usize> {
    let i = if i < 0 { i + len as i64 } else { i };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// LINDEX key index: the element, or null (missing key or out of range).
/// The key is looked up before the index is parsed, as in Redis.
fn lindex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.null();
        return Ok(());
    };
    let l = as_list(e)?;
    let i = parse_i64(args.get(2))?;
    ctx.out
        .optional_bulk(index_of(l.len(), i).and_then(|i| l.get(i)).as_deref());
    Ok(())
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]: the
/// index of the rank-th match (negative rank: from the tail), or with
/// COUNT an array of up to that many (0: all) matching indexes; MAXLEN
/// bounds the elements compared (0: all).
fn lpos(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let ele = args.get(2);
    let (mut rank, mut count, mut maxlen) = (1i64, None::<i64>, 0i64);
    let mut j = 3;
    while j < args.len() {
        let opt = args.get(j);
        let more = j + 1 < args.len();
        if eq_ic(opt, "rank") && more {
            j += 1;
            rank = parse_i64(args.get(j))?;
            if rank == 0 {
                return Err(CmdError::err(
                    "RANK can't be zero: use 1 to start from the first match, 2 from the \
                     second ... or use negative to start from the end of the list",
                ));
            }
        } else if eq_ic(opt, "count") && more {
            j += 1;
            count = Some(parse_at_least(args.get(j), 0, "COUNT can't be negative")?);
        } else if eq_ic(opt, "maxlen") && more {
            j += 1;
            maxlen = parse_at_least(args.get(j), 0, "MAXLEN can't be negative")?;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    // Redis 7.0 negates the rank in C: RANK -9223372036854775808 stays
    // negative, so every match qualifies and a COUNT never stops the scan
    // (`matches - rank + 1` wraps). Wrapping arithmetic reproduces it.
    let from_tail = rank < 0;
    if from_tail {
        rank = rank.wrapping_neg();
    }
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        match count {
            Some(_) => ctx.out.array(0),
            None => ctx.out.null(),
        }
        return Ok(());
    };
    let l = as_list(e)?;
    let len = l.len();
    let mut found: Vec<i64> = Vec::new();
    let mut matches = 0i64;
    let mut scan = |mut it: ds::quicklist::Iter<'_>| {
        let mut next_index = 0usize;
        while let Some(v) = it.next() {
            let index = next_index;
            next_index += 1;
            if maxlen != 0 && index as i64 >= maxlen {
                break;
            }
            if v != ele {
                continue;
            }
            matches += 1;
            if matches >= rank {
                found.push(if from_tail {
                    (len - index - 1) as i64
                } else {
                    index as i64
                });
                match count {
                    None => break,
                    Some(c) if c != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= c => break,
                    _ => {}
                }
            }
        }
    };
    if from_tail {
        scan(l.iter_rev());
    } else {
        scan(l.iter());
    }
    match count {
        Some(_) => {
            ctx.out.array(found.len());
            for i in found {
                ctx.out.int(i);
            }
        }
        None => match found.first() {
            Some(&i) => ctx.out.int(i),
            None => ctx.out.null(),
        },
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Writes in place

/// LSET key index element: OK; "no such key" for a missing key (checked
/// before the index is parsed), "index out of range" past either end.
fn lset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let e = ctx.shard.lookup_write(db, key).ok_or(CmdError::NoSuchKey)?;
    let l = as_list_mut(e)?;
    let i = parse_i64(args.get(2))?;
    let i = index_of(l.len(), i).ok_or_else(|| CmdError::err("index out of range"))?;
    l.set(i, args.get(3));
    ctx.shard.dbs[db].signal(key);
    ctx.propagate_as_is(args);
    ctx.notify(ev::LIST, "lset", key);
    ctx.out.ok();
    Ok(())
}

/// LINSERT key BEFORE|AFTER pivot element: the new length, -1 if the
/// pivot is not found, 0 for a missing key.
fn linsert(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let after = if eq_ic(args.get(2), "after") {
        true
    } else if eq_ic(args.get(2), "before") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    let (db, key) = (ctx.db, args.get(1));
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        ctx.out.int(0);
        return Ok(());
    };
    let l = as_list_mut(e)?;
    let pivot = args.get(3);
    let Some(at) = l.position(pivot) else {
        ctx.out.int(-1);
        return Ok(());
    };
    l.insert(at + usize::from(after), args.get(4));
    let n = l.len();
    ctx.shard.dbs[db].signal(key);
    ctx.propagate_as_is(args);
    ctx.notify(ev::LIST, "linsert", key);
    ctx.out.int(n as i64);
    Ok(())
}

/// LREM key count element: removes the first `count` matches (negative:
/// the last; 0: all); replies how many were removed.
fn lrem(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let count = parse_i64(args.get(2))?;
    let (db, key) = (ctx.db, args.get(1));
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        ctx.out.int(0);
        return Ok(());
    };
    let l = as_list_mut(e)?;
    let removed = l.remove_matching(args.get(3), count);
    let empty = l.is_empty();
    if removed > 0 {
        ctx.propagate_as_is(args);
        after_removal(ctx, key, "lrem", empty);
    }
    ctx.out.int(removed as i64);
    Ok(())
}

/// LTRIM key start stop: keeps the inclusive range (indexes parsed before
/// the key is looked up); an empty range deletes the key. Signals the key
/// even when nothing was trimmed, as Redis does.
fn ltrim(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let start = parse_i64(args.get(2))?;
    let stop = parse_i64(args.get(3))?;
    let (db, key) = (ctx.db, args.get(1));
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        ctx.out.ok();
        return Ok(());
    };
    let l = as_list_mut(e)?;
    let len = l.len();
    match clamp_range(len, start, stop) {
        None => l.remove_range(0, len),
        Some((s, n)) => {
            l.remove_range(s + n, len - s - n);
            l.remove_range(0, s);
        }
    }
    let empty = l.is_empty();
    // Redis counts (and so propagates) the elements trimmed only.
    if l.len() < len {
        ctx.propagate_as_is(args);
    } else {
        ctx.propagate_none();
    }
    after_removal(ctx, key, "ltrim", empty);
    ctx.out.ok();
    Ok(())
}

// ---------------------------------------------------------------------------
// Moves

/// Redis's `lmoveGenericCommand`: pops from `src`'s `from` end and pushes
/// onto `dst`'s `to` end, replying the element; a null bulk if `src` is
/// missing; WRONGTYPE (nothing moved) if either key is not a list. `src ==
/// dst` rotates the list. Propagated as `record` when it moved an element.
fn lmove_generic(
    ctx: &mut ShardCtx<'_>,
    (src, dst): (&[u8], &[u8]),
    (from, to): (End, End),
    record: &[&[u8]],
) -> Result<(), CmdError> {
    let db = ctx.db;
    let Some(e) = ctx.shard.lookup_write(db, src) else {
        ctx.out.null();
        return Ok(());
    };
    let l = as_list_mut(e)?;
    let v = match from {
        End::Left => l.front(),
        End::Right => l.back(),
    }
    .map(<[u8]>::to_vec);
    let Some(v) = v else {
        // Only an empty list loaded from an old dump could get here.
        ctx.out.null();
        return Ok(());
    };
    if src == dst {
        match from {
            End::Left => l.pop_front(),
            End::Right => l.pop_back(),
        };
        push(l, to, &v);
        ctx.shard.dbs[db].signal(src);
        ctx.propagate(record);
        ctx.notify(ev::LIST, push_event(to), dst);
        ctx.notify(ev::LIST, pop_event(from), src);
        ctx.out.bulk(&v);
        return Ok(());
    }
    if let Some(d) = ctx.shard.lookup_write(db, dst) {
        as_list(d)?;
    }
    // INVARIANT: src was found live just above and nothing ran since.
    let l = as_list_mut(ctx.shard.dbs[db].get_mut(src).expect("src vanished"))?;
    match from {
        End::Left => l.pop_front(),
        End::Right => l.pop_back(),
    };
    let src_empty = l.is_empty();
    match ctx.shard.dbs[db].get_mut(dst) {
        Some(d) => {
            push(as_list_mut(d)?, to, &v);
            ctx.shard.dbs[db].signal(dst);
        }
        None => {
            let mut nl = List::new(&ctx.shard.enc);
            push(&mut nl, to, &v);
            ctx.shard.store(db, dst, Value::List(nl), 0);
        }
    }
    ctx.propagate(record);
    // Redis's order: the push's event, then the pop's (and `del`).
    ctx.notify(ev::LIST, push_event(to), dst);
    after_removal(ctx, src, pop_event(from), src_empty);
    ctx.out.bulk(&v);
    Ok(())
}

/// LMOVE source destination LEFT|RIGHT LEFT|RIGHT: the moved element, or
/// null when the source is missing.
fn lmove(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let from = parse_end(args.get(3))?;
    let to = parse_end(args.get(4))?;
    let record: Vec<&[u8]> = args.iter().collect();
    lmove_generic(ctx, (args.get(1), args.get(2)), (from, to), &record)
}

/// RPOPLPUSH source destination: LMOVE source destination RIGHT LEFT.
fn rpoplpush(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let record = [args.get(0), args.get(1), args.get(2)];
    lmove_generic(
        ctx,
        (args.get(1), args.get(2)),
        (End::Right, End::Left),
        &record,
    )
}

// ---------------------------------------------------------------------------
// Multi-key pops

/// Redis's `genericGetKeys` for a numkeys-style command: the keys, or none
/// when numkeys is out of range (the command then fails its own parse).
fn numkeys_keys(args: Args<'_>, numkeys_at: usize) -> Vec<usize> {
    let first = numkeys_at + 1;
    let n = atoi(args.get(numkeys_at));
    if n < 1 || n > args.len().saturating_sub(first) as i64 {
        return Vec::new();
    }
    (first..first + n as usize).collect()
}

/// C's `atoi` as Redis's key extraction uses it: optional sign and
/// leading digits, 0 if none.
fn atoi(s: &[u8]) -> i64 {
    let s = s.trim_ascii_start();
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut n: i64 = 0;
    for &c in digits.iter().take_while(|c| c.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add((c - b'0') as i64);
    }
    if neg {
        -n
    } else {
        n
    }
}

fn lmpop_keys(args: Args<'_>) -> Vec<usize> {
    numkeys_keys(args, 1)
}
fn blmpop_keys(args: Args<'_>) -> Vec<usize> {
    numkeys_keys(args, 2)
}

/// Parsed `numkeys key... LEFT|RIGHT [COUNT n]` of LMPOP/BLMPOP.
struct MpopArgs {
    first_key: usize,
    numkeys: usize,
    end: End,
    count: i64,
}

/// Redis's `lmpopGenericCommand` parse, numkeys at `numkeys_at`.
fn parse_mpop(args: Args<'_>, numkeys_at: usize) -> Result<MpopArgs, CmdError> {
    let numkeys = parse_at_least(args.get(numkeys_at), 1, "numkeys should be greater than 0")?;
    let where_at = (numkeys as u64).saturating_add(numkeys_at as u64 + 1);
    if where_at >= args.len() as u64 {
        return Err(CmdError::Syntax);
    }
    let where_at = where_at as usize;
    let end = parse_end(args.get(where_at))?;
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if count.is_none() && eq_ic(args.get(j), "count") && j + 1 < args.len() {
            j += 1;
            count = Some(parse_at_least(
                args.get(j),
                1,
                "count should be greater than 0",
            )?);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(MpopArgs {
        first_key: numkeys_at + 1,
        numkeys: numkeys as usize,
        end,
        count: count.unwrap_or(1),
    })
}

/// Pops up to `count` elements from the first non-empty list of `keys`
/// (in order), replying `[key, [elements]]` (`with_count`) or `[key,
/// element]`. Returns false, having replied nothing, if every key is
/// missing; WRONGTYPE for a non-list key met before a list. Propagated
/// as Redis 7.0's non-blocking form: `LPOP key` / `RPOP key`, with the
/// number of elements popped when a count was given.
fn serve_first<'a>(
    ctx: &mut ShardCtx<'_>,
    keys: impl Iterator<Item = &'a [u8]>,
    end: End,
    count: Option<i64>,
) -> Result<bool, CmdError> {
    let db = ctx.db;
    for key in keys {
        if !ctx.may_serve(key) {
            continue;
        }
        let Some(e) = ctx.shard.lookup_write(db, key) else {
            continue;
        };
        let l = as_list_mut(e)?;
        if l.is_empty() {
            continue;
        }
        ctx.out.array(2);
        ctx.out.bulk(key);
        let len = l.len();
        let empty = match count {
            Some(n) => pop_range_reply(ctx.out, l, end, usize::try_from(n).unwrap_or(usize::MAX)),
            None => pop_one_reply(ctx.out, l, end),
        };
        let pop: &[u8] = if end == End::Left { b"LPOP" } else { b"RPOP" };
        match count {
            Some(n) => {
                let popped = len.min(usize::try_from(n).unwrap_or(usize::MAX));
                let mut buf = itoa::Buffer::new();
                ctx.propagate(&[pop, key, buf.format(popped).as_bytes()]);
            }
            None => ctx.propagate(&[pop, key]),
        }
        after_removal(ctx, key, pop_event(end), empty);
        return Ok(true);
    }
    Ok(false)
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]: `[key,
/// [elements]]` from the first non-empty list, or a null array.
fn lmpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let a = parse_mpop(args, 1)?;
    let keys = args.iter().skip(a.first_key).take(a.numkeys);
    if !serve_first(ctx, keys, a.end, Some(a.count))? {
        ctx.out.null_array();
    }
    Ok(())
}

/// The timeout reply of a blocking command that found nothing: block on
/// `keys` when allowed, else reply at once as on timeout.
fn block_or_timeout<'a>(
    ctx: &mut ShardCtx<'_>,
    keys: impl Iterator<Item = &'a [u8]>,
    deadline_ms: u64,
) {
    if ctx.may_block {
        let keys = keys.map(<[u8]>::to_vec).collect();
        ctx.block_on(keys, deadline_ms);
    } else {
        ctx.out.null_array();
    }
}

/// BLPOP/BRPOP key [key ...] timeout: `[key, element]` from the first
/// non-empty list; else blocks (or, unable to, a null array).
fn bpop_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, end: End) -> Result<(), CmdError> {
    let last = args.len() - 1;
    // From the clock now (Redis reads it here): the loop's cached one may
    // be milliseconds old, and the wait would end that much early.
    let deadline = parse_timeout(args.get(last), engine::now_ms())?;
    let keys = || args.iter().skip(1).take(last - 1);
    if !serve_first(ctx, keys(), end, None)? {
        block_or_timeout(ctx, keys(), deadline);
    }
    Ok(())
}

/// BLPOP key [key ...] timeout
fn blpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    bpop_generic(ctx, args, End::Left)
}
/// BRPOP key [key ...] timeout
fn brpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    bpop_generic(ctx, args, End::Right)
}

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]: as
/// LMPOP, blocking when every list is empty. The timeout is checked after
/// the other arguments, as in Redis.
fn blmpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let a = parse_mpop(args, 2)?;
    // From the clock now (Redis reads it here): the loop's cached one may
    // be milliseconds old, and the wait would end that much early.
    let deadline = parse_timeout(args.get(1), engine::now_ms())?;
    let keys = || args.iter().skip(a.first_key).take(a.numkeys);
    if !serve_first(ctx, keys(), a.end, Some(a.count))? {
        block_or_timeout(ctx, keys(), deadline);
    }
    Ok(())
}

/// Redis's `blmoveGenericCommand`: LMOVE if the source holds elements,
/// else block on the source (a null array on timeout) or, unable to block,
/// reply a null bulk at once. Only the source's type is checked before
/// blocking. Propagated as `record`, the non-blocking form.
fn blmove_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    (from, to): (End, End),
    deadline: u64,
    record: &[&[u8]],
) -> Result<(), CmdError> {
    let (src, dst) = (args.get(1), args.get(2));
    match ctx.shard.lookup_write(ctx.db, src) {
        Some(e) => {
            as_list(e)?;
            lmove_generic(ctx, (src, dst), (from, to), record)
        }
        None => {
            if ctx.may_block {
                // Redis 7.0 answers a *timed out* BLMOVE with a null array
                // (`replyToBlockedClientTimedOut` treats every list block
                // alike), but one that may not block with a null bulk.
                ctx.block_on(vec![src.to_vec()], deadline);
            } else {
                ctx.out.null();
            }
            Ok(())
        }
    }
}

/// BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout
fn blmove(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let from = parse_end(args.get(3))?;
    let to = parse_end(args.get(4))?;
    // From the clock now (Redis reads it here): the loop's cached one may
    // be milliseconds old, and the wait would end that much early.
    let deadline = parse_timeout(args.get(5), engine::now_ms())?;
    let record = [b"LMOVE", args.get(1), args.get(2), args.get(3), args.get(4)];
    blmove_generic(ctx, args, (from, to), deadline, &record)
}

/// BRPOPLPUSH source destination timeout
fn brpoplpush(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    // From the clock now (Redis reads it here): the loop's cached one may
    // be milliseconds old, and the wait would end that much early.
    let deadline = parse_timeout(args.get(3), engine::now_ms())?;
    let record = [b"RPOPLPUSH", args.get(1), args.get(2)];
    blmove_generic(ctx, args, (End::Right, End::Left), deadline, &record)
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    fn ts() -> TestServer {
        TestServer::new(1)
    }

    #[test]
    fn push_pop_shapes() {
        let mut t = ts();
        assert_eq!(t.run(&["RPUSH", "l", "a", "b", "c"]), ":3\r\n");
        assert_eq!(t.run(&["LPUSH", "l", "z"]), ":4\r\n");
        assert_eq!(t.run(&["LPOP", "l"]), "$1\r\nz\r\n");
        assert_eq!(t.run(&["RPOP", "l", "2"]), "*2\r\n$1\r\nc\r\n$1\r\nb\r\n");
        assert_eq!(t.run(&["LPOP", "l", "0"]), "*0\r\n");
        assert_eq!(t.run(&["LPOP", "nokey", "0"]), "*-1\r\n");
        assert_eq!(t.run(&["LPOP", "nokey"]), "$-1\r\n");
        assert_eq!(t.run(&["LPOP", "l", "5"]), "*1\r\n$1\r\na\r\n");
        assert_eq!(t.run(&["EXISTS", "l"]), ":0\r\n");
        assert_eq!(
            t.run(&["LPOP", "l", "-1"]),
            "-ERR value is out of range, must be positive\r\n"
        );
        assert_eq!(t.run(&["LPUSHX", "l", "a"]), ":0\r\n");
        assert_eq!(t.run(&["EXISTS", "l"]), ":0\r\n");
    }

    #[test]
    fn object_encoding_is_quicklist() {
        let mut t = ts();
        t.run(&["RPUSH", "l", "1"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "l"]), "$9\r\nquicklist\r\n");
        assert_eq!(t.run(&["TYPE", "l"]), "+list\r\n");
    }

    #[test]
    fn lmove_rotates_and_creates() {
        let mut t = ts();
        t.run(&["RPUSH", "l", "a", "b", "c"]);
        assert_eq!(t.run(&["LMOVE", "l", "l", "LEFT", "RIGHT"]), "$1\r\na\r\n");
        assert_eq!(
            t.run(&["LRANGE", "l", "0", "-1"]),
            "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n"
        );
        assert_eq!(t.run(&["RPOPLPUSH", "l", "m"]), "$1\r\na\r\n");
        assert_eq!(t.run(&["LRANGE", "m", "0", "-1"]), "*1\r\n$1\r\na\r\n");
        t.run(&["SET", "s", "x"]);
        assert!(t
            .run(&["LMOVE", "l", "s", "LEFT", "LEFT"])
            .starts_with("-WRONGTYPE"));
        assert_eq!(t.run(&["LLEN", "l"]), ":2\r\n");
    }

    #[test]
    fn blocking_forms_without_blocking() {
        let mut t = ts();
        assert_eq!(t.run(&["BLPOP", "a", "b", "0"]), "*-1\r\n");
        assert_eq!(t.run(&["BLMOVE", "a", "b", "LEFT", "LEFT", "0"]), "$-1\r\n");
        t.run(&["RPUSH", "b", "x", "y"]);
        assert_eq!(
            t.run(&["BRPOP", "a", "b", "1"]),
            "*2\r\n$1\r\nb\r\n$1\r\ny\r\n"
        );
        assert_eq!(
            t.run(&["BLMPOP", "0", "2", "a", "b", "LEFT", "COUNT", "5"]),
            "*2\r\n$1\r\nb\r\n*1\r\n$1\r\nx\r\n"
        );
        assert_eq!(t.run(&["BLPOP", "a", "-1"]), "-ERR timeout is negative\r\n");
    }

    /// Runs `argv` through `handler` with `may_block` set; returns the
    /// reply bytes and what the handler blocked on.
    fn run_blocking(
        shard: &mut engine::Shard,
        handler: crate::table::ShardHandler,
        argv: &[&str],
    ) -> (Vec<u8>, Option<crate::ctx::BlockOn>) {
        let owned = resp::OwnedArgs::from_slices(argv);
        let mut out = resp::Reply::new(false);
        let mut ctx = crate::ctx::ShardCtx {
            shard,
            db: 0,
            out: &mut out,
            no_touch: false,
            databases: 16,
            max_bulk_len: 512 << 20,
            reply_cap_bytes: 0,
            may_block: true,
            in_tx: false,
            nshards: 1,
            client: 1,
            ops: crate::ops::Ops::leak(&config::Config::default()),
            block: None,
            ready: None,
            caller: None,
            tracker: None,
            in_place: None,
            sender: None,
        };
        handler(&mut ctx, owned.args()).unwrap();
        let block = ctx.block.take();
        (out.into_bytes(), block)
    }

    #[test]
    fn blocking_forms_block_on_their_keys_when_allowed() {
        let mut sh = engine::Shard::new(0, 16);
        let before = engine::now_ms();
        let (out, b) = run_blocking(&mut sh, super::blpop, &["BLPOP", "a", "b", "1.5"]);
        assert!(out.is_empty());
        let b = b.expect("blocked");
        assert_eq!(b.keys, vec![b"a".to_vec(), b"b".to_vec()]);
        // 1.5 s from the clock when the command ran (not the loop's
        // cached one).
        assert!((before + 1_500..=engine::now_ms() + 1_500).contains(&b.deadline_ms));
        let argv = ["BLMPOP", "0", "2", "a", "b", "LEFT", "COUNT", "2"];
        let (out, b) = run_blocking(&mut sh, super::blmpop, &argv);
        assert!(out.is_empty());
        let b = b.expect("blocked");
        assert_eq!((b.keys.len(), b.deadline_ms), (2, 0));
        // The move forms wait on the source only; a timeout answers a null
        // array as in Redis 7.0.
        let argv = ["BLMOVE", "a", "d", "LEFT", "RIGHT", "0"];
        let (out, b) = run_blocking(&mut sh, super::blmove, &argv);
        assert!(out.is_empty());
        let b = b.expect("blocked");
        assert_eq!(b.keys, vec![b"a".to_vec()]);
        let (_, b) = run_blocking(&mut sh, super::brpoplpush, &["BRPOPLPUSH", "a", "d", "0"]);
        assert_eq!(b.expect("blocked").keys, vec![b"a".to_vec()]);
        // Something to serve: served at once, no block.
        let mut l = engine::List::new(&sh.enc);
        l.push_back(b"x");
        sh.store(0, b"b", engine::Value::List(l), 0);
        let (out, b) = run_blocking(&mut sh, super::brpop, &["BRPOP", "a", "b", "0"]);
        assert_eq!(out, b"*2\r\n$1\r\nb\r\n$1\r\nx\r\n");
        assert!(b.is_none());
        assert!(sh.lookup_write(0, b"b").is_none());
    }

    #[test]
    fn getkeys_of_numkeys_forms() {
        let mut t = ts();
        assert_eq!(
            t.run(&["COMMAND", "GETKEYS", "LMPOP", "2", "a", "b", "LEFT"]),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(
            t.run(&["COMMAND", "GETKEYS", "BLMPOP", "0", "1", "a", "LEFT"]),
            "*1\r\n$1\r\na\r\n"
        );
    }

    #[test]
    fn clamp_range_like_redis() {
        use super::clamp_range;
        assert_eq!(clamp_range(5, 0, -1), Some((0, 5)));
        assert_eq!(clamp_range(5, -100, 100), Some((0, 5)));
        assert_eq!(clamp_range(5, 3, 1), None);
        assert_eq!(clamp_range(5, 5, 10), None);
        assert_eq!(clamp_range(5, i64::MIN, i64::MAX), Some((0, 5)));
        assert_eq!(clamp_range(0, 0, -1), None);
    }
}
