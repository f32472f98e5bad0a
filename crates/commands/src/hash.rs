//! Hash commands (Redis's `t_hash.c`). Request path.
//!
//! Handlers read as parse → op → reply, in Redis's order of checks (an
//! argument error before the key's type where Redis parses first: HINCRBY's
//! increment, HRANDFIELD's count, HSCAN's cursor; after it where Redis looks
//! the key up first: HSCAN's options). Every access to a stored value goes
//! through `util::as_hash`, so other types answer WRONGTYPE.
//!
//! The representation and its encodings (listpack / hashtable, converted
//! at `hash-max-listpack-entries` / `-value` as Redis does) live in
//! `engine::types::hash`; the live thresholds are `ctx.shard.enc`. Values
//! come back as `LpEntry` (a string, or an integer for its decimal form)
//! and are replied without allocating.
//!
//! WATCH: every change signals the key where Redis calls
//! `signalModifiedKey`: HSET/HMSET always (even when nothing changed),
//! HSETNX/HDEL only when they changed something, HINCRBY/HINCRBYFLOAT on
//! success; creating or deleting the key signals through `store`/`remove`.

use ds::events as ev;
use ds::{LpEntry, SmallBytes};
use engine::{Hash, Value};
use resp::{Args, Reply};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::strings::longdouble;
use crate::table::{flags::*, keys, CommandSpec, Exec};
use crate::util::{as_hash, as_hash_mut, eq_ic, parse_i64};

const W_FAST: &[&str] = &["write", "hash", "fast"];
const R_FAST: &[&str] = &["read", "hash", "fast"];
const R_SLOW: &[&str] = &["read", "hash", "slow"];

const fn one(
    name: &'static str,
    arity: i32,
    flags: u32,
    h: crate::table::ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, keys(1, 1, 1), Exec::Shard(h, None), acl)
}

pub(crate) const COMMANDS: &[CommandSpec] = &[
    one("hset", -4, WRITE | DENYOOM | FAST, hset, W_FAST),
    one("hsetnx", 4, WRITE | DENYOOM | FAST, hsetnx, W_FAST),
    one("hget", 3, READONLY | FAST, hget, R_FAST),
    one("hmset", -4, WRITE | DENYOOM | FAST, hmset, W_FAST),
    one("hmget", -3, READONLY | FAST, hmget, R_FAST),
    one("hincrby", 4, WRITE | DENYOOM | FAST, hincrby, W_FAST),
    one(
        "hincrbyfloat",
        4,
        WRITE | DENYOOM | FAST,
        hincrbyfloat,
        W_FAST,
    ),
    one("hdel", -3, WRITE | FAST, hdel, W_FAST),
    one("hlen", 2, READONLY | FAST, hlen, R_FAST),
    one("hstrlen", 3, READONLY | FAST, hstrlen, R_FAST),
    one("hkeys", 2, READONLY, hkeys, R_SLOW),
    one("hvals", 2, READONLY, hvals, R_SLOW),
    one("hgetall", 2, READONLY, hgetall, R_SLOW),
    one("hexists", 3, READONLY | FAST, hexists, R_FAST),
    one("hrandfield", -2, READONLY, hrandfield, R_SLOW),
    one("hscan", -3, READONLY, hscan, R_SLOW),
];

/// Writes a field or value as a bulk string.
#[inline]
fn reply_entry(out: &mut Reply, e: LpEntry<'_>) {
    match e {
        LpEntry::Str(s) => out.bulk(s),
        LpEntry::Int(n) => out.bulk_int(n),
    }
}

/// The hash at `key` for reading: `None` if missing, WRONGTYPE for other
/// types.
fn read<'s>(
    shard: &'s mut engine::Shard,
    db: usize,
    touch: bool,
    key: &[u8],
) -> Result<Option<&'s Hash>, CmdError> {
    match shard.lookup_read(db, key, touch) {
        None => Ok(None),
        Some(e) => as_hash(e).map(Some),
    }
}

/// Redis's `hashTypeLookupWriteOrCreate` followed by a change: applies `f`
/// to the hash at `key` (WRONGTYPE for another type; a new empty hash if
/// missing, stored only if `f` leaves it non-empty) and signals watchers
/// if `f` says it changed something. `looked_up`: the caller already did
/// the write lookup (which expires and records the access), so this one
/// must not count the access again.
fn write_hash<R>(
    ctx: &mut ShardCtx<'_>,
    key: &[u8],
    looked_up: bool,
    f: impl FnOnce(&mut Hash, &engine::EncLimits) -> (R, bool),
) -> Result<R, CmdError> {
    let lim = ctx.shard.enc;
    let db = ctx.db;
    let found = if looked_up {
        ctx.shard.dbs[db].get_mut(key)
    } else {
        ctx.shard.lookup_write(db, key)
    };
    if let Some(e) = found {
        let (r, changed) = f(as_hash_mut(e)?, &lim);
        if changed {
            ctx.shard.dbs[db].signal(key);
        }
        return Ok(r);
    }
    let mut h = Hash::new();
    let (r, _) = f(&mut h, &lim);
    if !h.is_empty() {
        ctx.shard.store(db, key, Value::Hash(h), 0);
    }
    Ok(r)
}

// ---------------------------------------------------------------------------
// Writes

/// Redis's `hsetCommand` for HSET and HMSET: the number of fields created
/// (HSET) or OK (HMSET). An odd number of field/value arguments is an
/// arity error.
fn hset_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, hmset: bool) -> Result<(), CmdError> {
    if args.len() % 2 == 1 {
        return Err(CmdError::WrongArity(
            if hmset { "hmset" } else { "hset" }.to_string(),
        ));
    }
    let key = args.get(1);
    let created = write_hash(ctx, key, false, |h, lim| {
        h.prepare_for((2..args.len()).map(|i| args.get(i)), lim);
        let mut created = 0;
        for i in (2..args.len()).step_by(2) {
            created += i64::from(h.set(args.get(i), args.get(i + 1), lim));
        }
        (created, true)
    })?;
    ctx.propagate_as_is(args);
    ctx.notify(ev::HASH, "hset", key);
    if hmset {
        ctx.out.ok();
    } else {
        ctx.out.int(created);
    }
    Ok(())
}

/// HSET key field value [field value ...]: fields created.
fn hset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    hset_generic(ctx, args, false)
}

/// HMSET key field value [field value ...]: OK.
fn hmset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    hset_generic(ctx, args, true)
}

/// HSETNX key field value: 1 if set, 0 if the field existed.
fn hsetnx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (key, field, value) = (args.get(1), args.get(2), args.get(3));
    let set = write_hash(ctx, key, false, |h, lim| {
        if h.contains(field) {
            return (false, false);
        }
        h.prepare_for([field, value], lim);
        h.set(field, value, lim);
        (true, true)
    })?;
    if set {
        ctx.propagate_as_is(args);
        ctx.notify(ev::HASH, "hset", key);
    }
    ctx.out.int(i64::from(set));
    Ok(())
}

/// HDEL key field [field ...]: fields removed; the key goes with its last
/// field.
fn hdel(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        ctx.out.int(0);
        return Ok(());
    };
    let h = as_hash_mut(e)?;
    let mut deleted = 0;
    for i in 2..args.len() {
        if h.remove(args.get(i)) {
            deleted += 1;
            if h.is_empty() {
                break;
            }
        }
    }
    let empty = h.is_empty();
    if deleted > 0 {
        ctx.propagate_as_is(args);
        ctx.notify(ev::HASH, "hdel", key);
    }
    if empty {
        ctx.shard.remove(db, key);
        if deleted > 0 {
            ctx.notify(ev::GENERIC, "del", key);
        }
    } else if deleted > 0 {
        ctx.shard.dbs[db].signal(key);
    }
    ctx.out.int(deleted);
    Ok(())
}

/// HINCRBY key field increment: the new value. Errors: a non-integer
/// increment (before the key's type), a stored value that is not an
/// integer, overflow.
fn hincrby(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (key, field) = (args.get(1), args.get(2));
    let incr = parse_i64(args.get(3))?;
    let cur = match ctx.shard.lookup_write(ctx.db, key) {
        None => 0,
        Some(e) => match as_hash(e)?.get(field) {
            None => 0,
            Some(LpEntry::Int(n)) => n,
            Some(LpEntry::Str(s)) => {
                ds::string2ll(s).ok_or_else(|| CmdError::err("hash value is not an integer"))?
            }
        },
    };
    let new = cur.checked_add(incr).ok_or(CmdError::Overflow)?;
    let mut buf = itoa::Buffer::new();
    let text = buf.format(new).as_bytes();
    write_hash(ctx, key, true, |h, lim| (h.set(field, text, lim), true))?;
    ctx.propagate_as_is(args);
    ctx.notify(ev::HASH, "hincrby", key);
    ctx.out.int(new);
    Ok(())
}

/// HINCRBYFLOAT key field increment: the new value, computed in `long
/// double` and formatted as INCRBYFLOAT. Errors: a non-float or infinite
/// increment (before the key's type), a stored value that is not a float,
/// a result that is not finite. Propagated as `HSET key field value`.
fn hincrbyfloat(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (key, field) = (args.get(1), args.get(2));
    let incr = longdouble::parse(args.get(3)).ok_or(CmdError::NotFloat)?;
    if !incr.is_finite() {
        return Err(CmdError::err("value is NaN or Infinity"));
    }
    let cur = match ctx.shard.lookup_write(ctx.db, key) {
        None => longdouble::Ld::from_i64(0),
        Some(e) => match as_hash(e)?.get(field) {
            None => longdouble::Ld::from_i64(0),
            Some(LpEntry::Int(n)) => longdouble::Ld::from_i64(n),
            Some(LpEntry::Str(s)) => {
                longdouble::parse(s).ok_or_else(|| CmdError::err("hash value is not a float"))?
            }
        },
    };
    let sum = cur.add(incr);
    if !sum.is_finite() {
        return Err(CmdError::err("increment would produce NaN or Infinity"));
    }
    let text = sum.format_human();
    write_hash(ctx, key, true, |h, lim| {
        (h.set(field, text.as_bytes(), lim), true)
    })?;
    ctx.propagate(&[b"HSET", key, field, text.as_bytes()]);
    ctx.notify(ev::HASH, "hincrbyfloat", key);
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

// ---------------------------------------------------------------------------
// Reads

/// HGET key field: the value, or null.
fn hget(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let field = args.get(2);
    match read(ctx.shard, ctx.db, !ctx.no_touch, args.get(1))?.and_then(|h| h.get(field)) {
        Some(v) => reply_entry(ctx.out, v),
        None => ctx.out.null(),
    }
    Ok(())
}

/// HMGET key field [field ...]: one value or null per field (all null for
/// a missing key).
fn hmget(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let h = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => None,
        Some(e) => Some(as_hash(e)?),
    };
    ctx.out.array(args.len() - 2);
    for i in 2..args.len() {
        match h.and_then(|h| h.get(args.get(i))) {
            Some(v) => reply_entry(ctx.out, v),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// HLEN key: number of fields (0 for a missing key).
fn hlen(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let n = read(ctx.shard, ctx.db, !ctx.no_touch, args.get(1))?.map_or(0, Hash::len);
    ctx.out.int(n as i64);
    Ok(())
}

/// HSTRLEN key field: the value's length (0 if missing).
fn hstrlen(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let field = args.get(2);
    let n = read(ctx.shard, ctx.db, !ctx.no_touch, args.get(1))?
        .and_then(|h| h.get(field))
        .map_or(0, |v| v.str_len());
    ctx.out.int(n as i64);
    Ok(())
}

/// HEXISTS key field: 1 or 0.
fn hexists(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let field = args.get(2);
    let yes =
        read(ctx.shard, ctx.db, !ctx.no_touch, args.get(1))?.is_some_and(|h| h.contains(field));
    ctx.out.int(i64::from(yes));
    Ok(())
}

/// What HGETALL, HKEYS and HVALS reply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Keys,
    Vals,
    Both,
}

/// Redis's `genericHgetallCommand`: HGETALL is a map (empty map when
/// missing), HKEYS/HVALS arrays; listpack hashes in insertion order.
fn hgetall_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, part: Part) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let out = &mut *ctx.out;
    let h = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => {
            match part {
                Part::Both => out.map(0),
                _ => out.array(0),
            }
            return Ok(());
        }
        Some(e) => as_hash(e)?,
    };
    match part {
        Part::Both => out.map(h.len()),
        _ => out.array(h.len()),
    }
    for (f, v) in h.iter() {
        if part != Part::Vals {
            reply_entry(out, f);
        }
        if part != Part::Keys {
            reply_entry(out, v);
        }
    }
    Ok(())
}

/// HGETALL key: every field and value (a map in RESP3).
fn hgetall(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    hgetall_generic(ctx, args, Part::Both)
}

/// HKEYS key: every field.
fn hkeys(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    hgetall_generic(ctx, args, Part::Keys)
}

/// HVALS key: every value.
fn hvals(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    hgetall_generic(ctx, args, Part::Vals)
}

// ---------------------------------------------------------------------------
// HRANDFIELD

/// Redis's `LONG_MAX / 2`: the largest |count| with WITHVALUES.
const RANDFIELD_WITHVALUES_MAX: i64 = i64::MAX / 2;

/// HRANDFIELD key [count [WITHVALUES]].
///
/// * no count: one random field, or null for a missing key;
/// * count 0 or missing key: empty array;
/// * negative count: |count| independent picks (repeats possible), in
///   random order;
/// * count >= size: the whole hash in its order;
/// * otherwise `count` distinct fields.
///
/// WITHVALUES: RESP2 flattens field, value; RESP3 nests `[field, value]`
/// pairs. Errors, in Redis's order: count not an integer or `i64::MIN`
/// (out of `-LONG_MAX..=LONG_MAX`), syntax, |count| > LONG_MAX/2 with
/// WITHVALUES; then the key's type.
fn hrandfield(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let rng_copy = ctx.shard.rng.clone();
    if args.len() == 2 {
        let touch = ctx.touch();
        let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
            ctx.out.null();
            return Ok(());
        };
        let h = as_hash(e)?;
        // The entry borrows the shard: draw from a copy of its generator
        // and store the advanced state back below.
        let mut rng = rng_copy.clone();
        let rng = &mut rng;
        let pick = match h.random_table_pair(rng) {
            Some((f, _)) => Some(f),
            None => {
                let n = h.len();
                h.iter()
                    .nth(rand::Rng::gen_range(rng, 0..n))
                    .map(|(f, _)| f)
            }
        };
        // INVARIANT: stored hashes are never empty.
        reply_entry(ctx.out, pick.expect("stored hash is not empty"));
        ctx.shard.rng = rng.clone();
        return Ok(());
    }
    let l = parse_i64(args.get(2))?;
    if l == i64::MIN {
        return Err(CmdError::err(
            "value is out of range, value must between -9223372036854775807 and \
             9223372036854775807",
        ));
    }
    let withvalues = match args.len() {
        3 => false,
        4 if eq_ic(args.get(3), "withvalues") => true,
        _ => return Err(CmdError::Syntax),
    };
    if withvalues && !(-RANDFIELD_WITHVALUES_MAX..=RANDFIELD_WITHVALUES_MAX).contains(&l) {
        return Err(CmdError::err("value is out of range"));
    }
    let touch = ctx.touch();
    let cap = ctx.reply_cap();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.array(0);
        return Ok(());
    };
    let h = as_hash(e)?;
    let mut rng = rng_copy;
    let r = randfield_reply(h, ctx.out, &mut rng, l, withvalues, cap);
    ctx.shard.rng = rng;
    r
}

/// HRANDFIELD's reply with a count, once the arguments are checked. Picks
/// with repetition stop once the reply is longer than `cap` bytes: the
/// client is closed then and the reply never sent (Redis's loop checks
/// `CLIENT_CLOSE_ASAP`).
fn randfield_reply(
    h: &Hash,
    out: &mut Reply,
    rng: &mut rand::rngs::SmallRng,
    l: i64,
    withvalues: bool,
    cap: usize,
) -> Result<(), CmdError> {
    let count = l.unsigned_abs();
    if count == 0 {
        out.array(0);
        return Ok(());
    }
    let resp3 = out.resp3();
    let emit = |out: &mut Reply, f: LpEntry<'_>, v: LpEntry<'_>| {
        if withvalues && resp3 {
            out.array(2);
        }
        reply_entry(out, f);
        if withvalues {
            reply_entry(out, v);
        }
    };
    let header = |out: &mut Reply, n: u64| {
        let n = if withvalues && !resp3 { n * 2 } else { n };
        // INVARIANT: n <= 2 * (LONG_MAX / 2) with WITHVALUES, else <= LONG_MAX.
        out.array(n as usize);
    };
    let size = h.len() as u64;

    // Redis's CASE 1: independent picks.
    if l < 0 || count == 1 {
        header(out, count);
        if h.is_listpack() {
            let pairs: Vec<_> = h.iter().collect();
            for _ in 0..count {
                let (f, v) = pairs[rand::Rng::gen_range(rng, 0..pairs.len())];
                emit(out, f, v);
                if out.len() > cap {
                    break;
                }
            }
        } else {
            for _ in 0..count {
                // INVARIANT: stored hashes are never empty.
                let (f, v) = h.random_table_pair(rng).expect("stored hash is not empty");
                emit(out, f, v);
                if out.len() > cap {
                    break;
                }
            }
        }
        return Ok(());
    }
    header(out, count.min(size));
    // CASE 2: the whole hash, in its order.
    if count >= size {
        for (f, v) in h.iter() {
            emit(out, f, v);
        }
        return Ok(());
    }
    let count = count as usize;
    if h.is_listpack() {
        // Selection sampling (Knuth's algorithm S): `count` distinct pairs
        // in listpack order, as Redis's `lpRandomPairsUnique`.
        let mut need = count;
        let mut left = size as usize;
        for (f, v) in h.iter() {
            if rand::Rng::gen_range(rng, 0..left) < need {
                emit(out, f, v);
                need -= 1;
                if need == 0 {
                    break;
                }
            }
            left -= 1;
        }
        return Ok(());
    }
    if count * 3 > size as usize {
        // CASE 3: drop random pairs from a copy of the index until `count`
        // are left.
        let mut pairs: Vec<_> = h.iter().collect();
        while pairs.len() > count {
            let i = rand::Rng::gen_range(rng, 0..pairs.len());
            pairs.swap_remove(i);
        }
        for (f, v) in pairs {
            emit(out, f, v);
        }
        return Ok(());
    }
    // CASE 4: random picks until `count` distinct ones (the hash is at
    // least three times larger, so few picks repeat).
    let mut seen = std::collections::HashSet::with_capacity(count);
    while seen.len() < count {
        // INVARIANT: stored hashes are never empty.
        let (f, v) = h.random_table_pair(rng).expect("stored hash is not empty");
        let LpEntry::Str(fb) = f else {
            unreachable!("hashtable fields are strings")
        };
        if seen.insert(fb.as_ptr()) {
            emit(out, f, v);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// HSCAN

/// HSCAN key cursor [MATCH pattern] [COUNT count]: `[next cursor, [field,
/// value, ...]]`. A listpack answers everything at once with cursor 0; a
/// hashtable walks the dict's reverse-binary cursor until about `COUNT`
/// fields and values (Redis counts both) are gathered or `10 * COUNT`
/// buckets were visited. MATCH filters fields after gathering. Errors:
/// invalid cursor, then the key's type (a missing key is an empty scan),
/// then the options.
fn hscan(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let cursor = crate::keys::parse_scan_cursor(args.get(2))?;
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        crate::keys::reply_empty_scan(ctx.out);
        return Ok(());
    };
    let h = as_hash(e)?;
    let crate::keys::ScanOpts { count, pattern, .. } =
        crate::keys::parse_scan_opts(args, 3, false)?;
    // Copies (inline up to 22 bytes): the dict's scan lends entries only
    // for the callback.
    let mut items: Vec<(SmallBytes, SmallBytes)> = Vec::new();
    let copy = |e: LpEntry<'_>| e.with_bytes(|b| SmallBytes::from(b));
    let mut next = cursor;
    // Redis's `maxiterations`: the first call plus 10 * COUNT more.
    let mut budget = count.saturating_mul(10);
    loop {
        next = h.scan(next, |f, v| items.push((copy(f), copy(v))));
        if next == 0 || budget == 0 || items.len() * 2 >= count {
            break;
        }
        budget -= 1;
    }
    if let Some(p) = pattern {
        items.retain(|(f, _)| ds::glob_match(p, f, false));
    }
    let out = &mut *ctx.out;
    out.array(2);
    out.bulk(itoa::Buffer::new().format(next).as_bytes());
    out.array(items.len() * 2);
    for (f, v) in &items {
        out.bulk(f);
        out.bulk(v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    fn check(t: &mut TestServer, cmd: &[&str], want: &str) {
        assert_eq!(t.run(cmd), want, "{cmd:?}");
    }

    #[test]
    fn basic_replies() {
        for n in [1, 3] {
            let t = &mut TestServer::new(n);
            check(t, &["HSET", "h", "a", "1", "b", "x"], ":2\r\n");
            check(t, &["HSET", "h", "a", "2", "c", "y"], ":1\r\n");
            check(t, &["HGET", "h", "a"], "$1\r\n2\r\n");
            check(t, &["HGET", "h", "zz"], "$-1\r\n");
            check(
                t,
                &["HMGET", "h", "a", "zz", "c"],
                "*3\r\n$1\r\n2\r\n$-1\r\n$1\r\ny\r\n",
            );
            check(t, &["HMGET", "nokey", "a"], "*1\r\n$-1\r\n");
            check(
                t,
                &["HGETALL", "h"],
                "*6\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$1\r\nx\r\n$1\r\nc\r\n$1\r\ny\r\n",
            );
            check(
                t,
                &["HKEYS", "h"],
                "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
            );
            check(
                t,
                &["HVALS", "h"],
                "*3\r\n$1\r\n2\r\n$1\r\nx\r\n$1\r\ny\r\n",
            );
            check(t, &["HLEN", "h"], ":3\r\n");
            check(t, &["HSTRLEN", "h", "a"], ":1\r\n");
            check(t, &["HEXISTS", "h", "b"], ":1\r\n");
            check(t, &["HINCRBY", "h", "a", "40"], ":42\r\n");
            check(
                t,
                &["HINCRBY", "h", "b", "1"],
                "-ERR hash value is not an integer\r\n",
            );
            check(t, &["HINCRBYFLOAT", "h", "a", "0.5"], "$4\r\n42.5\r\n");
            check(t, &["HDEL", "h", "a", "b", "zz"], ":2\r\n");
            check(t, &["HDEL", "h", "c"], ":1\r\n");
            check(t, &["EXISTS", "h"], ":0\r\n");
            check(t, &["HGETALL", "h"], "*0\r\n");
            check(t, &["SET", "s", "v"], "+OK\r\n");
            for cmd in [
                &["HGET", "s", "a"][..],
                &["HSET", "s", "a", "b"],
                &["HGETALL", "s"],
                &["HRANDFIELD", "s", "1"],
                &["HSCAN", "s", "0"],
            ] {
                check(
                    t,
                    cmd,
                    "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
                );
            }
        }
    }

    #[test]
    fn hrandfield_shapes() {
        let t = &mut TestServer::new(1);
        check(t, &["HSET", "h", "a", "1", "b", "2"], ":2\r\n");
        check(
            t,
            &["HRANDFIELD", "h", "5", "WITHVALUES"],
            "*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n",
        );
        let r = t.run(&["HRANDFIELD", "h", "-5"]);
        assert!(r.starts_with("*5\r\n"), "{r}");
        let r = t.run(&["HRANDFIELD", "h", "1"]);
        assert!(r == "*1\r\n$1\r\na\r\n" || r == "*1\r\n$1\r\nb\r\n", "{r}");
        t.client.resp3 = true;
        check(
            t,
            &["HRANDFIELD", "h", "2", "WITHVALUES"],
            "*2\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n",
        );
        check(
            t,
            &["HGETALL", "h"],
            "%2\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n",
        );
    }

    #[test]
    fn hrandfield_unique_picks_are_distinct() {
        let t = &mut TestServer::new(1);
        // 300 fields: a hashtable (under a lowered limit); counts exercise
        // both unique strategies, and a listpack (the default limit, 512)
        // the ordered one.
        for enc in ["hashtable", "listpack"] {
            t.run(&["DEL", "h"]);
            let limit = if enc == "listpack" { "512" } else { "128" };
            t.run(&["CONFIG", "SET", "hash-max-listpack-entries", limit]);
            for i in 0..300 {
                let f = format!("f{i}");
                t.run(&["HSET", "h", &f, "v"]);
            }
            check(
                t,
                &["OBJECT", "ENCODING", "h"],
                &format!("${}\r\n{enc}\r\n", enc.len()),
            );
            for count in [5, 150, 299] {
                let r = t.run(&["HRANDFIELD", "h", &count.to_string()]);
                let fields: std::collections::HashSet<&str> =
                    r.split("\r\n").filter(|s| s.starts_with('f')).collect();
                assert_eq!(fields.len(), count, "{enc} {count}");
            }
        }
    }
}
