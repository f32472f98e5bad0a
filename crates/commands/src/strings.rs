//! String commands (Redis's `t_string.c`). Request path.
//!
//! Handlers read as parse → op → reply, and find every syntax error before
//! mutating anything; where Redis checks the key's type before an argument
//! (GETEX's expiry value, INCRBYFLOAT, LCS's options) the same order is
//! kept, since clients see which error comes first. Every access to a
//! stored value goes through `util::as_str`, so the other types answer
//! WRONGTYPE as soon as they exist.
//!
//! Encodings follow Redis's `OBJECT ENCODING`: values written whole (SET,
//! MSET, GETSET, APPEND on a missing key) are `int` when canonical
//! integers, else `embstr`/`raw` by length; values modified in place
//! (APPEND, SETRANGE) become `raw`; INCR-family results are `int`;
//! INCRBYFLOAT results are `embstr`/`raw` by length, never `int`.
//!
//! Multi-key commands (MGET, MSET, MSETNX, LCS) run as one shard handler
//! when their keys share a shard and as a coordinator when they do not:
//! MGET/MSET in one step, MSETNX in two (check every shard, then set on
//! every shard only if no key exists), LCS by fetching both values and
//! computing on the home thread. Across shards, each shard's part gets its
//! keys (and MSET's values) in one buffer, prefetches their table slots
//! and values before the lookups, and MGET's part encodes its replies
//! there, so no value is cloned to the home thread, which only splices
//! the parts in key order.
//!
//! Limits: APPEND and SETRANGE refuse strings longer than
//! `proto-max-bulk-len` (the shard handler's `max_bulk_len`); LCS refuses a
//! transient table larger than Redis's default 512 MB.

pub(crate) mod longdouble;

use std::sync::Arc;

use ds::events as ev;
use engine::{Str, StrRef, StrView, Value};
use resp::{Args, OwnedArgs, Reply};

use crate::coord::{outputs, Coordinator, JobOut, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::multikey::{prefetch_keys, prefetch_keys_and_values, prefetch_values, split_by_shard};
use crate::table::{flags::*, keys, shard_of, CommandSpec, Exec};
use crate::util::{as_str, eq_ic, parse_i64};

/// Redis's default `proto-max-bulk-len`: the largest transient table LCS
/// may allocate.
const PROTO_MAX_BULK_LEN: u64 = 512 * 1024 * 1024;

const W_STR_FAST: &[&str] = &["write", "string", "fast"];
const W_STR_SLOW: &[&str] = &["write", "string", "slow"];
const R_STR_FAST: &[&str] = &["read", "string", "fast"];
const R_STR_SLOW: &[&str] = &["read", "string", "slow"];

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
    one("get", 2, READONLY | FAST, get, R_STR_FAST),
    one("set", -3, WRITE | DENYOOM, set, W_STR_SLOW),
    one("setnx", 3, WRITE | DENYOOM | FAST, setnx, W_STR_FAST),
    one("setex", 4, WRITE | DENYOOM, setex, W_STR_SLOW),
    one("psetex", 4, WRITE | DENYOOM, psetex, W_STR_SLOW),
    one("getset", 3, WRITE | DENYOOM | FAST, getset, W_STR_FAST),
    one("getdel", 2, WRITE | FAST, getdel, W_STR_FAST),
    one("getex", -2, WRITE | FAST, getex, W_STR_FAST),
    CommandSpec::new(
        "mget",
        -2,
        READONLY | FAST,
        keys(1, -1, 1),
        Exec::Shard(mget, Some(mget_multi)),
        R_STR_FAST,
    ),
    CommandSpec::new(
        "mset",
        -3,
        WRITE | DENYOOM,
        keys(1, -1, 2),
        Exec::Shard(mset, Some(mset_multi)),
        W_STR_SLOW,
    ),
    CommandSpec::new(
        "msetnx",
        -3,
        WRITE | DENYOOM,
        keys(1, -1, 2),
        Exec::Shard(msetnx, Some(msetnx_multi)),
        W_STR_SLOW,
    ),
    one("append", 3, WRITE | DENYOOM | FAST, append, W_STR_FAST),
    one("strlen", 2, READONLY | FAST, strlen, R_STR_FAST),
    one("getrange", 4, READONLY, getrange, R_STR_SLOW),
    one("substr", 4, READONLY, getrange, R_STR_SLOW),
    one("setrange", 4, WRITE | DENYOOM, setrange, W_STR_SLOW),
    one("incr", 2, WRITE | DENYOOM | FAST, incr, W_STR_FAST),
    one("decr", 2, WRITE | DENYOOM | FAST, decr, W_STR_FAST),
    one("incrby", 3, WRITE | DENYOOM | FAST, incrby, W_STR_FAST),
    one("decrby", 3, WRITE | DENYOOM | FAST, decrby, W_STR_FAST),
    one(
        "incrbyfloat",
        3,
        WRITE | DENYOOM | FAST,
        incrbyfloat,
        W_STR_FAST,
    ),
    CommandSpec::new(
        "lcs",
        -3,
        READONLY,
        keys(1, 2, 1),
        Exec::Shard(lcs, Some(lcs_multi)),
        R_STR_SLOW,
    ),
];

// ---------------------------------------------------------------------------
// GET / SET family

/// The string at `key` (looked up and type-checked just before), to change
/// in place: see `Db::str_mut`.
fn str_mut<'a>(ctx: &'a mut ShardCtx<'_>, key: &[u8]) -> &'a mut Str {
    ctx.shard.dbs[ctx.db]
        .str_mut(key)
        .expect("INVARIANT: a string, looked up just before")
}

/// Writes a string value as a bulk reply without allocating.
#[inline]
pub(crate) fn reply_str(out: &mut Reply, s: StrRef<'_>) {
    match s.view() {
        StrView::Int(n) => out.bulk_int(n),
        StrView::Bytes(b) => out.bulk(b),
    }
}

/// Redis's `getGenericCommand`: replies the value or null; WRONGTYPE (with
/// nothing replied) for other types. Counts a keyspace hit or miss.
fn get_generic(ctx: &mut ShardCtx<'_>, key: &[u8]) -> Result<(), CmdError> {
    let touch = ctx.touch();
    match ctx.shard.lookup_read(ctx.db, key, touch) {
        None => ctx.out.null(),
        Some(e) => reply_str(ctx.out, as_str(e)?),
    }
    Ok(())
}

/// GET key: the value, or null; WRONGTYPE for other types.
fn get(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    get_generic(ctx, args.get(1))
}

/// When a SET-family command's expiry option says the key expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExpireOpt {
    None,
    KeepTtl,
    /// Absolute Unix milliseconds.
    At(u64),
}

/// Parses an expiry value as Redis's `getExpireMillisecondsOrReply`:
/// `relative` for EX/PX, `seconds` for EX/EXAT. Errors name `cmd`.
pub(crate) fn expire_ms(
    arg: &[u8],
    seconds: bool,
    relative: bool,
    now_ms: u64,
    cmd: &str,
) -> Result<u64, CmdError> {
    let mut v = parse_i64(arg)?;
    let bad = || CmdError::InvalidExpire(cmd.to_string());
    if v <= 0 || (seconds && v > i64::MAX / 1000) {
        return Err(bad());
    }
    if seconds {
        v *= 1000;
    }
    if relative {
        v = v.checked_add(now_ms as i64).ok_or_else(bad)?;
    }
    if v <= 0 {
        return Err(bad());
    }
    Ok(v as u64)
}

/// The expiry options of SET and GETEX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExpKind {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl ExpKind {
    fn seconds(self) -> bool {
        matches!(self, ExpKind::Ex | ExpKind::ExAt)
    }
    fn relative(self) -> bool {
        matches!(self, ExpKind::Ex | ExpKind::Px)
    }
}

/// Parsed options of SET (`[NX|XX] [GET] [EX|PX|EXAT|PXAT t|KEEPTTL]`) and
/// GETEX (`[EX|PX|EXAT|PXAT t|PERSIST]`).
#[derive(Default)]
struct ExtOpts<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    exp: Option<(ExpKind, &'a [u8])>,
}

/// Redis's `parseExtendedStringArgumentsOrReply`. As there, an option may
/// repeat (`EX 1 EX 2` keeps the last) but never combine with a
/// conflicting one (`EX 1 PX 2`, `NX XX`, `KEEPTTL EX 1`).
fn parse_ext<'a>(args: Args<'a>, start: usize, set: bool) -> Result<ExtOpts<'a>, CmdError> {
    let mut o = ExtOpts::default();
    let mut i = start;
    while i < args.len() {
        let a = args.get(i);
        let has_next = i + 1 < args.len();
        let kind = if eq_ic(a, "ex") {
            Some(ExpKind::Ex)
        } else if eq_ic(a, "px") {
            Some(ExpKind::Px)
        } else if eq_ic(a, "exat") {
            Some(ExpKind::ExAt)
        } else if eq_ic(a, "pxat") {
            Some(ExpKind::PxAt)
        } else {
            None
        };
        let other_exp = |k: ExpKind| o.exp.is_some_and(|(e, _)| e != k);
        if set && eq_ic(a, "nx") && !o.xx {
            o.nx = true;
        } else if set && eq_ic(a, "xx") && !o.nx {
            o.xx = true;
        } else if set && eq_ic(a, "get") {
            o.get = true;
        } else if set && eq_ic(a, "keepttl") && o.exp.is_none() {
            o.keepttl = true;
        } else if !set && eq_ic(a, "persist") && o.exp.is_none() {
            o.persist = true;
        } else if let Some(k) = kind.filter(|&k| !o.keepttl && !o.persist && !other_exp(k)) {
            if !has_next {
                return Err(CmdError::Syntax);
            }
            i += 1;
            o.exp = Some((k, args.get(i)));
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

/// What SET-family commands reply on success and when NX/XX abort.
#[derive(Clone, Copy)]
enum SetReply {
    /// `+OK` / null (SET, SETEX, PSETEX).
    OkNull,
    /// `:1` / `:0` (SETNX).
    OneZero,
}

/// Redis's `setGenericCommand`: expiry value errors first, then GET's
/// reply (or WRONGTYPE), then the NX/XX condition, then the write.
///
/// Propagated as Redis 7.0's: with any expiry option `SET key value PXAT
/// ms` (other options dropped: the condition held); with GET, the command
/// without its GETs; else as received.
fn set_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    (key, val): (&[u8], &[u8]),
    o: &ExtOpts<'_>,
    cmd: &str,
    replies: SetReply,
) -> Result<(), CmdError> {
    let now = ctx.shard.now_ms;
    let expire = match o.exp {
        Some((k, v)) => ExpireOpt::At(expire_ms(v, k.seconds(), k.relative(), now, cmd)?),
        None if o.keepttl => ExpireOpt::KeepTtl,
        None => ExpireOpt::None,
    };
    if o.get {
        get_generic(ctx, key)?;
    }
    let found = ctx.shard.lookup_write(ctx.db, key).is_some();
    if (o.nx && found) || (o.xx && !found) {
        if !o.get {
            match replies {
                SetReply::OkNull => ctx.out.null(),
                SetReply::OneZero => ctx.out.int(0),
            }
        }
        return Ok(());
    }
    set_bytes(ctx, key, val, expire);
    match expire {
        ExpireOpt::At(ms) => {
            let mut at = itoa::Buffer::new();
            ctx.propagate(&[b"SET", key, val, b"PXAT", at.format(ms).as_bytes()]);
        }
        _ if o.get => propagate_without_get(ctx, args),
        _ => ctx.propagate_as_is(args),
    }
    ctx.notify(ev::STRING, "set", key);
    if matches!(expire, ExpireOpt::At(_)) {
        ctx.notify(ev::GENERIC, "expire", key);
    }
    if !o.get {
        match replies {
            SetReply::OkNull => ctx.out.ok(),
            SetReply::OneZero => ctx.out.int(1),
        }
    }
    Ok(())
}

/// SET without its GET options (each may repeat), as Redis 7.0 propagates
/// `SET ... GET` without an expiry.
fn propagate_without_get(ctx: &mut ShardCtx<'_>, args: Args<'_>) {
    let kept = |(j, a): &(usize, &[u8])| *j < 3 || !eq_ic(a, "get");
    let argc = args.iter().enumerate().filter(kept).count();
    ctx.propagate_with(argc, |out| {
        for (_, a) in args.iter().enumerate().filter(kept) {
            engine::outbox::write_bulk(out, a);
        }
    });
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]
fn set(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_ext(args, 3, true)?;
    let kv = (args.get(1), args.get(2));
    set_generic(ctx, args, kv, &o, "set", SetReply::OkNull)
}

/// SETNX key value: `:1` if set, `:0` if the key existed.
fn setnx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        nx: true,
        ..Default::default()
    };
    let kv = (args.get(1), args.get(2));
    set_generic(ctx, args, kv, &o, "setnx", SetReply::OneZero)
}

/// SETEX key seconds value
fn setex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        exp: Some((ExpKind::Ex, args.get(2))),
        ..Default::default()
    };
    let kv = (args.get(1), args.get(3));
    set_generic(ctx, args, kv, &o, "setex", SetReply::OkNull)
}

/// PSETEX key milliseconds value
fn psetex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        exp: Some((ExpKind::Px, args.get(2))),
        ..Default::default()
    };
    let kv = (args.get(1), args.get(3));
    set_generic(ctx, args, kv, &o, "psetex", SetReply::OkNull)
}

/// Stores a client's bytes as a string, encoded as `Str::from_bytes` would
/// (see `Shard::store_bytes`), applying the expiry option (KEEPTTL keeps a
/// live key's deadline).
pub(crate) fn set_bytes(ctx: &mut ShardCtx<'_>, key: &[u8], value: &[u8], expire: ExpireOpt) {
    let at = deadline_of(ctx, key, expire);
    ctx.shard.store_bytes(ctx.db, key, value, at);
}

/// The deadline a SET-family expiry option gives `key` (0 = none).
fn deadline_of(ctx: &ShardCtx<'_>, key: &[u8], expire: ExpireOpt) -> u64 {
    match expire {
        ExpireOpt::None => 0,
        ExpireOpt::At(ms) => ms,
        ExpireOpt::KeepTtl => ctx.shard.dbs[ctx.db].expire_of(key),
    }
}

/// GETSET key value: the old value (or null), then SET without options
/// (the TTL is dropped); propagated as `SET key value`.
fn getset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    get_generic(ctx, key)?;
    set_bytes(ctx, key, args.get(2), ExpireOpt::None);
    // Redis 7.0 propagates GETSET as the SET it is.
    ctx.propagate(&[b"SET", key, args.get(2)]);
    ctx.notify(ev::STRING, "set", key);
    Ok(())
}

/// GETDEL key: the value (or null), and the key deleted (propagated as
/// `DEL key`).
fn getdel(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    get_generic(ctx, key)?;
    if ctx.shard.remove(ctx.db, key).is_some() {
        ctx.propagate(&[b"DEL", key]);
        ctx.notify(ev::GENERIC, "del", key);
    }
    Ok(())
}

/// GETEX key [EX s|PX ms|EXAT ts|PXAT ms-ts|PERSIST]: the value, and the
/// TTL changed. As in Redis, a missing key replies null before the expiry
/// value is checked, and an EXAT/PXAT in the past deletes the key.
/// Propagated as `DEL key`, `PEXPIREAT key ms` or `PERSIST key`.
fn getex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_ext(args, 2, false)?;
    let (db, key) = (ctx.db, args.get(1));
    let touch = ctx.touch();
    let now = ctx.shard.now_ms;
    let Some(e) = ctx.shard.lookup_read(db, key, touch) else {
        ctx.out.null();
        return Ok(());
    };
    let had_ttl = e.has_ttl();
    let s = as_str(e)?;
    let at = match o.exp {
        Some((k, v)) => Some((k, expire_ms(v, k.seconds(), k.relative(), now, "getex")?)),
        None => None,
    };
    reply_str(ctx.out, s);
    match at {
        Some((k, ms)) if !k.relative() && ms <= now => {
            ctx.shard.remove(db, key);
            ctx.propagate(&[b"DEL", key]);
            ctx.notify(ev::GENERIC, "del", key);
        }
        Some((_, ms)) => {
            ctx.shard.dbs[db].set_expire(key, ms);
            let mut at = itoa::Buffer::new();
            ctx.propagate(&[b"PEXPIREAT", key, at.format(ms).as_bytes()]);
            ctx.notify(ev::GENERIC, "expire", key);
        }
        // As Redis: a key without a TTL is not modified (no WATCH fails,
        // nothing is propagated).
        None if o.persist && had_ttl => {
            ctx.shard.dbs[db].set_expire(key, 0);
            ctx.propagate(&[b"PERSIST", key]);
            ctx.notify(ev::GENERIC, "persist", key);
        }
        None => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Multi-key: MGET, MSET, MSETNX

/// MGET key [key ...]: one reply per key, null for missing keys and for
/// keys of other types.
fn mget(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ctx.out.array(args.len() - 1);
    let touch = ctx.touch();
    // Keys on one shard (one shard, or a hash tag): the same prefetching
    // as a multi-shard MGET's parts.
    let keys = args.skip(1);
    prefetch_keys(ctx.shard, ctx.db, keys, 1);
    prefetch_values(ctx.shard, ctx.db, keys, 1);
    for k in args.iter().skip(1) {
        match ctx.shard.lookup_read(ctx.db, k, touch).map(|e| as_str(e)) {
            Some(Ok(s)) => reply_str(ctx.out, s),
            _ => ctx.out.null(),
        }
    }
    Ok(())
}

/// One shard's part of a multi-shard MGET: its keys' replies back to back
/// (RESP, already encoded on the shard, so no value is copied twice nor
/// freed on another thread), reply `i` ending at `ends[i]`.
struct MgetPart {
    buf: Vec<u8>,
    ends: Vec<u32>,
}

fn mget_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let (groups, group_of_key) = split_by_shard(args, 1, c.nshards(), c.key_shards);
    let db = c.client.db;
    let touch = !c.client.no_touch;
    let resp3 = c.client.resp3;
    let mut plan = Plan::default();
    plan.jobs.reserve(groups.len());
    for (shard, keys) in groups {
        plan.run(shard, move |env| {
            let keys = keys.args();
            prefetch_keys(env.shard, db, keys, 1);
            prefetch_values(env.shard, db, keys, 1);
            let mut out = Reply::with_capacity(resp3, keys.len() * 80);
            let mut ends = Vec::with_capacity(keys.len());
            for k in keys.iter() {
                match env.shard.lookup_read(db, k, touch).map(|e| as_str(e)) {
                    Some(Ok(s)) => reply_str(&mut out, s),
                    _ => out.null(),
                }
                ends.push(out.len() as u32);
            }
            MgetPart {
                buf: out.into_bytes(),
                ends,
            }
        });
    }
    Ok(OneStep::boxed(
        plan,
        move |parts: Vec<MgetPart>, out: &mut Reply, _: &mut ClientState| {
            let bytes: usize = parts.iter().map(|p| p.buf.len()).sum();
            out.buf_mut().reserve(bytes + 16);
            out.array(group_of_key.len());
            // The next reply of each part.
            let mut next = vec![0usize; parts.len()];
            for &g in &group_of_key {
                let g = g as usize;
                let i = &mut next[g];
                let p = &parts[g];
                let start = if *i == 0 { 0 } else { p.ends[*i - 1] as usize };
                out.raw(&p.buf[start..p.ends[*i] as usize]);
                *i += 1;
            }
            Ok(())
        },
    ))
}

/// Checks MSET/MSETNX's pairing (Redis answers with the arity error).
fn check_pairs(args: Args<'_>, cmd: &str) -> Result<(), CmdError> {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::WrongArity(cmd.into()));
    }
    Ok(())
}

/// MSET key value [key value ...]
fn mset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    check_pairs(args, "mset")?;
    mset_all(ctx, args);
    ctx.out.ok();
    Ok(())
}

fn mset_all(ctx: &mut ShardCtx<'_>, args: Args<'_>) {
    let pairs = args.skip(1);
    prefetch_keys(ctx.shard, ctx.db, pairs, 2);
    prefetch_values(ctx.shard, ctx.db, pairs, 2);
    for i in (1..args.len()).step_by(2) {
        touch_for_lfu(ctx.shard, ctx.db, args.get(i));
        set_bytes(ctx, args.get(i), args.get(i + 1), ExpireOpt::None);
        ctx.notify(ev::STRING, "set", args.get(i));
    }
    ctx.propagate_as_is(args);
}

/// MSET/MSETNX's key-value pairs of one shard, back to back.
type Pairs = OwnedArgs;

/// The (key, value) pairs of MSET/MSETNX grouped by shard.
fn pairs_by_shard(args: Args<'_>, nshards: usize, known: &[u16]) -> Vec<(usize, Pairs)> {
    split_by_shard(args, 2, nshards, known).0
}

/// A job storing `pairs` on its shard, dropping any TTL (as SET does).
/// MSET's writes count as accesses (Redis's setKey looks the key up for
/// writing first); only the LFU counter can tell, so only then pay for it.
fn touch_for_lfu(shard: &mut engine::Shard, db: usize, key: &[u8]) {
    if shard.lfu.is_some() {
        shard.lookup_write(db, key);
    }
}

fn store_pairs(plan: &mut Plan, shard: usize, db: usize, pairs: Pairs) {
    plan.run(shard, move |env| {
        let a = pairs.args();
        prefetch_keys(env.shard, db, a, 2);
        prefetch_values(env.shard, db, a, 2);
        for i in (0..a.len()).step_by(2) {
            let (k, v) = (a.get(i), a.get(i + 1));
            touch_for_lfu(env.shard, db, k);
            env.shard.store_bytes(db, k, v, 0);
            env.shard.notify(db, ev::STRING, "set", k);
        }
    });
}

/// MSET's pairs across shards, shared by its shards' jobs: one copy of
/// the arguments and each pair's shard, where a buffer per shard cost two
/// allocations each (an MSET of 10 keys over 32 shards touches about 9).
struct SharedPairs {
    /// key, value, key, value ...
    args: OwnedArgs,
    shard_of_pair: Vec<u16>,
}

/// A job storing, on `shard`, the pairs of `pairs` that live there, in
/// command order (see [`store_pairs`]).
fn store_shared_pairs(plan: &mut Plan, shard: usize, db: usize, pairs: Arc<SharedPairs>) {
    plan.run(shard, move |env| {
        let a = pairs.args.args();
        let mine = || {
            pairs
                .shard_of_pair
                .iter()
                .enumerate()
                .filter(|&(_, &s)| usize::from(s) == shard)
                .map(|(i, _)| 2 * i)
        };
        prefetch_keys_and_values(env.shard, db, mine().map(|i| a.get(i)));
        for i in mine() {
            let (k, v) = (a.get(i), a.get(i + 1));
            touch_for_lfu(env.shard, db, k);
            env.shard.store_bytes(db, k, v, 0);
            env.shard.notify(db, ev::STRING, "set", k);
        }
    });
}

fn mset_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    check_pairs(args, "mset")?;
    let db = c.client.db;
    let npairs = (args.len() - 1) / 2;
    let shard_of_pair: Vec<u16> = if c.key_shards.len() == npairs {
        c.key_shards.to_vec()
    } else {
        let n = c.nshards();
        (0..npairs)
            .map(|i| shard_of(args.get(1 + 2 * i), n) as u16)
            .collect()
    };
    let mut shards = shard_of_pair.clone();
    shards.sort_unstable();
    shards.dedup();
    let pairs = Arc::new(SharedPairs {
        args: args.skip(1).to_owned(),
        shard_of_pair,
    });
    let mut plan = Plan::default();
    plan.jobs.reserve(shards.len());
    for s in shards {
        store_shared_pairs(&mut plan, usize::from(s), db, pairs.clone());
    }
    let coord = OneStep::boxed(plan, |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
        out.ok();
        Ok(())
    });
    Ok(crate::propagate::as_received(coord, args, db))
}

/// MSETNX key value [key value ...]: sets every pair and replies `:1` if
/// none of the keys exists; otherwise sets nothing and replies `:0`.
fn msetnx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    check_pairs(args, "msetnx")?;
    for i in (1..args.len()).step_by(2) {
        if ctx.shard.lookup_write(ctx.db, args.get(i)).is_some() {
            ctx.out.int(0);
            return Ok(());
        }
    }
    mset_all(ctx, args);
    ctx.out.int(1);
    Ok(())
}

/// MSETNX across shards: step 1 asks every shard whether any of its keys
/// exists; step 2, only if none does, stores the pairs on every shard.
struct MsetNx {
    db: usize,
    groups: Vec<(usize, Pairs)>,
    stage: u8,
}

impl Coordinator for MsetNx {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _: &mut ClientState,
    ) -> Result<(), CmdError> {
        let db = self.db;
        match self.stage {
            0 => {
                for (shard, pairs) in &self.groups {
                    let mut keys = OwnedArgs::with_capacity(pairs.count() / 2, 0);
                    let a = pairs.args();
                    for i in (0..a.len()).step_by(2) {
                        keys.push(a.get(i));
                    }
                    plan.run(*shard, move |env| {
                        keys.args()
                            .iter()
                            .any(|k| env.shard.lookup_write(db, k).is_some())
                    });
                }
                self.stage = 1;
            }
            1 => {
                if outputs::<bool>(results).into_iter().any(|found| found) {
                    out.int(0);
                    self.stage = 3;
                    return Ok(());
                }
                for (shard, pairs) in std::mem::take(&mut self.groups) {
                    store_pairs(plan, shard, db, pairs);
                }
                // The stores are the last jobs: locks go with them.
                plan.last = true;
                self.stage = 2;
            }
            2 => {
                out.int(1);
                self.stage = 3;
            }
            _ => {}
        }
        Ok(())
    }
}

fn msetnx_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    check_pairs(args, "msetnx")?;
    let coord = Box::new(MsetNx {
        db: c.client.db,
        groups: pairs_by_shard(args, c.nshards(), c.key_shards),
        stage: 0,
    });
    Ok(crate::propagate::as_received(coord, args, c.client.db))
}

// ---------------------------------------------------------------------------
// APPEND, STRLEN, GETRANGE, SETRANGE

/// Redis's `checkStringLength`: a string of `size + append` bytes must fit
/// `proto-max-bulk-len`.
fn check_string_length(size: u64, append: u64, max: u64) -> Result<(), CmdError> {
    match size.checked_add(append) {
        Some(total) if total <= max => Ok(()),
        _ => Err(CmdError::err(
            "string exceeds maximum allowed size (proto-max-bulk-len)",
        )),
    }
}

/// APPEND key value: the new length. A new key is stored as SET would
/// store it (so `int` for integers); an existing value becomes `raw`.
fn append(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key, val, max) = (ctx.db, args.get(1), args.get(2), ctx.max_bulk_len);
    let len = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            // Checked before anything changes (an error leaves the value
            // as it was stored).
            check_string_length(as_str(e)?.len() as u64, val.len() as u64, max)?;
            let v = str_mut(ctx, key).make_raw();
            v.extend_from_slice(val);
            let n = v.len();
            ctx.shard.dbs[db].signal(key);
            n
        }
        None => {
            ctx.shard.store_bytes(db, key, val, 0);
            val.len()
        }
    };
    ctx.propagate_as_is(args);
    ctx.notify(ev::STRING, "append", key);
    ctx.out.int(len as i64);
    Ok(())
}

/// STRLEN key: the value's length, 0 for a missing key.
fn strlen(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let n = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        Some(e) => as_str(e)?.len(),
        None => 0,
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// GETRANGE key start end (and SUBSTR): the inclusive byte range, negative
/// offsets counting from the end; an empty string when out of range or
/// for a missing key.
fn getrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut start = parse_i64(args.get(2))?;
    let mut end = parse_i64(args.get(3))?;
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.bulk(b"");
        return Ok(());
    };
    let out = &mut *ctx.out;
    as_str(e)?.with_bytes(|s| {
        let len = s.len() as i64;
        if start < 0 && end < 0 && start > end {
            out.bulk(b"");
            return;
        }
        if start < 0 {
            start += len;
        }
        if end < 0 {
            end += len;
        }
        start = start.max(0);
        end = end.max(0);
        if end >= len {
            end = len - 1;
        }
        if start > end || len == 0 {
            out.bulk(b"");
        } else {
            out.bulk(&s[start as usize..=end as usize]);
        }
    });
    Ok(())
}

/// SETRANGE key offset value: overwrites from `offset`, zero-padding as
/// needed; the new length. The result is always `raw`.
fn setrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let offset = parse_i64(args.get(2))?;
    if offset < 0 {
        return Err(CmdError::err("offset is out of range"));
    }
    let offset = offset as u64;
    let (db, key, val, max) = (ctx.db, args.get(1), args.get(3), ctx.max_bulk_len);
    let len = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            let s = as_str(e)?;
            if val.is_empty() {
                ctx.out.int(s.len() as i64);
                return Ok(());
            }
            check_string_length(offset, val.len() as u64, max)?;
            let v = str_mut(ctx, key).make_raw();
            write_at(v, offset as usize, val);
            let n = v.len();
            ctx.shard.dbs[db].signal(key);
            n
        }
        None => {
            if val.is_empty() {
                ctx.out.int(0);
                return Ok(());
            }
            check_string_length(offset, val.len() as u64, max)?;
            let mut v = Vec::new();
            write_at(&mut v, offset as usize, val);
            let n = v.len();
            ctx.shard
                .store(db, key, Value::Str(Str::from_vec_raw(v)), 0);
            n
        }
    };
    ctx.propagate_as_is(args);
    ctx.notify(ev::STRING, "setrange", key);
    ctx.out.int(len as i64);
    Ok(())
}

fn write_at(v: &mut Vec<u8>, offset: usize, val: &[u8]) {
    let end = offset + val.len();
    if v.len() < end {
        v.resize(end, 0);
    }
    v[offset..end].copy_from_slice(val);
}

// ---------------------------------------------------------------------------
// INCR family

/// Adds `incr` to the integer at `key` (0 if missing), keeping its TTL.
fn incr_generic(ctx: &mut ShardCtx<'_>, args: Args<'_>, incr: i64) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let n = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            let cur = as_str(e)?.as_i64().ok_or(CmdError::NotInteger)?;
            let n = cur.checked_add(incr).ok_or(CmdError::Overflow)?;
            // An integer is never stored as bytes in its node (at most 20
            // bytes): replacing the value in place converts nothing.
            *e.value_mut() = Value::Str(Str::Int(n));
            ctx.shard.dbs[db].signal(key);
            n
        }
        None => {
            ctx.shard.store(db, key, Value::Str(Str::Int(incr)), 0);
            incr
        }
    };
    ctx.propagate_as_is(args);
    ctx.notify(ev::STRING, "incrby", key);
    ctx.out.int(n);
    Ok(())
}

fn incr(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    incr_generic(ctx, args, 1)
}

fn decr(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    incr_generic(ctx, args, -1)
}

fn incrby(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let by = parse_i64(args.get(2))?;
    incr_generic(ctx, args, by)
}

fn decrby(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let by = parse_i64(args.get(2))?;
    if by == i64::MIN {
        // Redis 7: negating LLONG_MIN would overflow.
        return Err(CmdError::err("decrement would overflow"));
    }
    incr_generic(ctx, args, -by)
}

/// INCRBYFLOAT key increment: the new value as Redis prints a `long
/// double` (`%.17Lf`, trailing zeros trimmed), stored as a string (never
/// `int`), keeping the TTL. See `longdouble` for why not `f64`.
/// Propagated as `SET key value KEEPTTL`: replicas and the AOF must not
/// redo the float arithmetic.
fn incrbyfloat(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let cur = match ctx.shard.lookup_write(db, key) {
        Some(e) => Some(match as_str(e)?.view() {
            StrView::Int(n) => longdouble::Ld::from_i64(n),
            StrView::Bytes(b) => longdouble::parse(b).ok_or(CmdError::NotFloat)?,
        }),
        None => None,
    };
    let by = longdouble::parse(args.get(2)).ok_or(CmdError::NotFloat)?;
    let sum = match cur {
        Some(v) => v.add(by),
        None => longdouble::Ld::from_i64(0).add(by),
    };
    if !sum.is_finite() {
        return Err(CmdError::err("increment would produce NaN or Infinity"));
    }
    let text = sum.format_human();
    let value = Str::from_bytes_no_int(text.as_bytes());
    // The lookup above already counted the access (and expired the key if
    // due): write back without a second one, as Redis does.
    match ctx.shard.dbs[db].str_mut(key) {
        Some(s) => {
            *s = value;
            ctx.shard.dbs[db].signal(key);
        }
        None => ctx.shard.store(db, key, Value::Str(value), 0),
    }
    ctx.propagate(&[b"SET", key, text.as_bytes(), b"KEEPTTL"]);
    ctx.notify(ev::STRING, "incrbyfloat", key);
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

// ---------------------------------------------------------------------------
// LCS

/// LCS's options.
#[derive(Clone, Copy, Debug)]
struct LcsOpts {
    len: bool,
    idx: bool,
    withmatchlen: bool,
    minmatchlen: i64,
}

/// Parses LCS's options; Redis checks them after the keys' types.
fn parse_lcs(args: Args<'_>) -> Result<LcsOpts, CmdError> {
    let mut o = LcsOpts {
        len: false,
        idx: false,
        withmatchlen: false,
        minmatchlen: 0,
    };
    let mut i = 3;
    while i < args.len() {
        let a = args.get(i);
        let more = i + 1 < args.len();
        if eq_ic(a, "idx") {
            o.idx = true;
        } else if eq_ic(a, "len") {
            o.len = true;
        } else if eq_ic(a, "withmatchlen") {
            o.withmatchlen = true;
        } else if eq_ic(a, "minmatchlen") && more {
            o.minmatchlen = parse_i64(args.get(i + 1))?.max(0);
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if o.idx && o.len {
        return Err(CmdError::err(
            "If you want both the length and indexes, please just use IDX.",
        ));
    }
    Ok(o)
}

fn lcs_wrongtype() -> CmdError {
    CmdError::err("The specified keys must contain string values")
}

/// A value for LCS: its bytes (empty for a missing key), `Err` for a
/// non-string.
fn lcs_fetch(shard: &mut engine::Shard, db: usize, key: &[u8], touch: bool) -> Result<Vec<u8>, ()> {
    match shard.lookup_read(db, key, touch) {
        None => Ok(Vec::new()),
        Some(e) => as_str(e).map(|s| s.as_bytes().into_owned()).map_err(|_| ()),
    }
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]
fn lcs(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let a = lcs_fetch(ctx.shard, ctx.db, args.get(1), touch);
    let b = lcs_fetch(ctx.shard, ctx.db, args.get(2), touch);
    let (Ok(a), Ok(b)) = (a, b) else {
        return Err(lcs_wrongtype());
    };
    lcs_reply(ctx.out, &a, &b, parse_lcs(args)?)
}

/// LCS with its keys on two shards: fetch both values, compute here.
fn lcs_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let opts = parse_lcs(args);
    let (db, touch, n) = (c.client.db, !c.client.no_touch, c.nshards());
    let mut plan = Plan::default();
    for p in [1, 2] {
        let key = args.get(p).to_vec();
        plan.run(shard_of(&key, n), move |env| {
            lcs_fetch(env.shard, db, &key, touch)
        });
    }
    Ok(OneStep::boxed(
        plan,
        move |res: Vec<Result<Vec<u8>, ()>>, out: &mut Reply, _: &mut ClientState| {
            let mut it = res.into_iter();
            let (Some(Ok(a)), Some(Ok(b))) = (it.next(), it.next()) else {
                return Err(lcs_wrongtype());
            };
            lcs_reply(out, &a, &b, opts?)
        },
    ))
}

/// Computes the LCS of `a` and `b` with Redis's dynamic programming table
/// and backtracking, so that IDX reports the same ranges in the same order
/// (from the end of the strings backwards).
fn lcs_reply(out: &mut Reply, a: &[u8], b: &[u8], o: LcsOpts) -> Result<(), CmdError> {
    if a.len() as u64 >= u64::from(u32::MAX - 1) || b.len() as u64 >= u64::from(u32::MAX - 1) {
        return Err(CmdError::err("String too long for LCS"));
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells * 4 > PROTO_MAX_BULK_LEN {
        return Err(CmdError::err(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let mut dp: Vec<u32> = Vec::new();
    if dp.try_reserve_exact(cells as usize).is_err() {
        return Err(CmdError::err(
            "Insufficient memory, failed allocating transient memory for LCS",
        ));
    }
    dp.resize(cells as usize, 0);
    let w = blen + 1;
    for i in 1..=alen {
        for j in 1..=blen {
            dp[i * w + j] = if a[i - 1] == b[j - 1] {
                dp[(i - 1) * w + j - 1] + 1
            } else {
                dp[(i - 1) * w + j].max(dp[i * w + j - 1])
            };
        }
    }
    let total = dp[alen * w + blen];
    if o.len && !o.idx {
        out.int(i64::from(total));
        return Ok(());
    }
    // Backtrack, as Redis does, collecting the LCS and the match ranges.
    let mut result = vec![0u8; total as usize];
    let mut idx = total as usize;
    let mut ranges: Vec<[u32; 5]> = Vec::new();
    let unset = alen as u32;
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (unset, 0u32, 0u32, 0u32);
    let (mut i, mut j) = (alen, blen);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == unset {
                a_start = (i - 1) as u32;
                a_end = (i - 1) as u32;
                b_start = (j - 1) as u32;
                b_end = (j - 1) as u32;
            } else if a_start == i as u32 && b_start == j as u32 {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if dp[(i - 1) * w + j] > dp[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != unset {
                emit = true;
            }
        }
        if emit {
            let match_len = a_end.wrapping_sub(a_start).wrapping_add(1);
            if o.minmatchlen == 0 || i64::from(match_len) >= o.minmatchlen {
                ranges.push([a_start, a_end, b_start, b_end, match_len]);
            }
            a_start = unset;
        }
    }
    if !o.idx {
        out.bulk(&result);
        return Ok(());
    }
    out.map(2);
    out.bulk(b"matches");
    out.array(ranges.len());
    for [as_, ae, bs, be, ml] in ranges {
        out.array(if o.withmatchlen { 3 } else { 2 });
        out.array(2);
        out.int(i64::from(as_));
        out.int(i64::from(ae));
        out.array(2);
        out.int(i64::from(bs));
        out.int(i64::from(be));
        if o.withmatchlen {
            out.int(i64::from(ml));
        }
    }
    out.bulk(b"len");
    out.int(i64::from(total));
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Command scripts whose expected replies are Redis 7.0.15's bytes. A
    //! script line is `ARGS => REPLY`: arguments split on spaces (`""` is
    //! an empty argument, `\xHH`, `\r`, `\n`, `\s` (a space) escapes),
    //! the reply without its final CRLF. `OBJECT ENCODING k` and `TTL k`
    //! are answered from the shard's data here (those commands belong to
    //! another family); `@resp3` switches the client to RESP3 (`HELLO 3`).
    //! The scripts run against 1, 2 and 4 shards; the keys are chosen so
    //! that multi-key commands span shards (see `keys_span_shards`).

    use super::*;
    use crate::testutil::TestServer;

    fn unescape(s: &str) -> Vec<u8> {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 1 < b.len() {
                match b[i + 1] {
                    b'r' => out.push(b'\r'),
                    b'n' => out.push(b'\n'),
                    b's' => out.push(b' '),
                    b'\\' => out.push(b'\\'),
                    b'x' => {
                        let h = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                        out.push(u8::from_str_radix(h, 16).unwrap());
                        i += 2;
                    }
                    c => panic!("bad escape \\{}", c as char),
                }
                i += 2;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        out
    }

    /// The shard holding `key` and its entry, for the intercepted commands.
    fn entry<'a>(t: &'a mut TestServer, key: &[u8]) -> Option<&'a engine::Entry> {
        let s = shard_of(key, t.shards.len());
        let db = t.client.db;
        let sh = &mut t.shards[s];
        sh.lookup_read(db, key, false).map(|e| &*e)
    }

    fn exec(t: &mut TestServer, argv: &[Vec<u8>]) -> Vec<u8> {
        let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
        if name == "object" && argv.len() == 3 {
            let mut r = Reply::new(t.client.resp3);
            match entry(t, &argv[2]) {
                Some(e) => r.bulk(e.value().encoding().as_bytes()),
                None => r.null(),
            }
            return r.into_bytes();
        }
        if name == "ttl" {
            let now = t.shards[shard_of(&argv[1], t.shards.len())].now_ms;
            let db = t.client.db;
            let at = t.shards[shard_of(&argv[1], t.shards.len())].dbs[db].expire_of(&argv[1]);
            let ttl = match entry(t, &argv[1]) {
                None => -2,
                Some(_) if at == 0 => -1,
                Some(_) => ((at as i64 - now as i64) + 500) / 1000,
            };
            return format!(":{ttl}\r\n").into_bytes();
        }
        let v: Vec<&[u8]> = argv.iter().map(|a| a.as_slice()).collect();
        t.raw(&v)
    }

    fn run_script(nshards: usize, script: &str) {
        let mut t = TestServer::new(nshards);
        for (no, line) in script.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line == "@resp3" {
                t.client.resp3 = true;
                continue;
            }
            let (cmd, want) = line
                .split_once(" => ")
                .unwrap_or_else(|| panic!("bad script line {line}"));
            let argv: Vec<Vec<u8>> = cmd
                .split_whitespace()
                .map(|a| if a == "\"\"" { Vec::new() } else { unescape(a) })
                .collect();
            let got = exec(&mut t, &argv);
            let mut want = unescape(want);
            want.extend_from_slice(b"\r\n");
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{nshards} shard(s), script line {}: {cmd}",
                no + 1
            );
        }
    }

    fn run_all(script: &str) {
        for n in [1, 2, 4] {
            run_script(n, script);
        }
    }

    #[test]
    fn keys_span_shards() {
        for n in [2, 4] {
            for (a, b) in [("key1", "key2"), ("a", "b"), ("n1", "n2"), ("m1", "m2")] {
                assert_ne!(shard_of(a.as_bytes(), n), shard_of(b.as_bytes(), n));
            }
            let s: Vec<usize> = ["m1", "m2", "m3", "m4"]
                .iter()
                .map(|k| shard_of(k.as_bytes(), 4))
                .collect();
            assert_eq!(s, [1, 2, 3, 0]);
        }
    }

    const SET_SCRIPT: &str = r#"
        SET k v ex 10 ex 20 => +OK
        TTL k => :20
        SET k v px 100 ex 20 => -ERR syntax error
        SET k v nx nx => $-1
        SET k v nx xx => -ERR syntax error
        SET k v xx nx => -ERR syntax error
        SET k v keepttl ex 10 => -ERR syntax error
        SET k v ex 10 keepttl => -ERR syntax error
        SET k v exat 10 pxat 10 => -ERR syntax error
        SET k v ex => -ERR syntax error
        SET k v persist => -ERR syntax error
        SET k v foo => -ERR syntax error
        SET k v ex 0 => -ERR invalid expire time in 'set' command
        SET k v ex -1 => -ERR invalid expire time in 'set' command
        SET k v exat -1 => -ERR invalid expire time in 'set' command
        SET k v ex abc => -ERR value is not an integer or out of range
        SET k v ex 9223372036854775 => -ERR invalid expire time in 'set' command
        SET k v px 9223372036854775807 => -ERR invalid expire time in 'set' command
        SET k v get get => $1\r\nv
        SET k v2 keepttl get => $1\r\nv
        TTL k => :-1
        SET k v ex 20 => +OK
        SET k v2 keepttl get => $1\r\nv
        TTL k => :20
        SET k v3 => +OK
        TTL k => :-1
        SET k v exat 9223372036854775 => +OK
        SET k v pxat 9223372036854775807 => +OK
        SET k v ex 9223372036854 => +OK
        SET k v exat 1 => +OK
        GET k => $-1
        SET k v EX 10 GET => $-1
        SET k w nx get => $1\r\nv
        GET k => $1\r\nv
        SET k w xx get => $1\r\nv
        SET nk v xx get => $-1
        SET nk v xx => $-1
        EXISTS nk => :0
        SET nk v nx => +OK
        SET nk v nx => $-1
        SET n 12345 => +OK
        OBJECT ENCODING n => $3\r\nint
        SET n 012 => +OK
        OBJECT ENCODING n => $6\r\nembstr
        SET n aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa => +OK
        OBJECT ENCODING n => $6\r\nembstr
        SET n aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa => +OK
        OBJECT ENCODING n => $3\r\nraw
        SETNX k v => :0
        SETNX k2 v => :1
        SETEX k 0 v => -ERR invalid expire time in 'setex' command
        SETEX k abc v => -ERR value is not an integer or out of range
        SETEX k 100 v => +OK
        TTL k => :100
        PSETEX k 0 v => -ERR invalid expire time in 'psetex' command
        PSETEX k -5 v => -ERR invalid expire time in 'psetex' command
        PSETEX k 10000 5 => +OK
        TTL k => :10
        OBJECT ENCODING k => $3\r\nint
        SETEX k => -ERR wrong number of arguments for 'setex' command
        SETNX k => -ERR wrong number of arguments for 'setnx' command
        GETSET k x => $1\r\n5
        TTL k => :-1
        GETSET nokey 1 => $-1
        OBJECT ENCODING nokey => $3\r\nint
        GETDEL k => $1\r\nx
        GETDEL k => $-1
        EXISTS k => :0
        @resp3
        GET k => _
        GETDEL k => _
        SET k v nx get => _
        SETNX k v => :0
    "#;

    #[test]
    fn set_family() {
        run_all(SET_SCRIPT);
    }

    const GETEX_SCRIPT: &str = r#"
        GETEX k => $-1
        SET k 10 ex 100 => +OK
        GETEX k => $2\r\n10
        TTL k => :100
        GETEX k persist => $2\r\n10
        TTL k => :-1
        GETEX k ex 50 => $2\r\n10
        TTL k => :50
        GETEX k px 5000 => $2\r\n10
        TTL k => :5
        GETEX k exat 9999999999 => $2\r\n10
        GETEX k pxat 9999999999000 => $2\r\n10
        GETEX k ex 10 persist => -ERR syntax error
        GETEX k persist ex 10 => -ERR syntax error
        GETEX k persist persist => $2\r\n10
        TTL k => :-1
        GETEX k ex 10 ex 20 => $2\r\n10
        TTL k => :20
        GETEX k ex 10 px 20 => -ERR syntax error
        GETEX k keepttl => -ERR syntax error
        GETEX k nx => -ERR syntax error
        GETEX k get => -ERR syntax error
        GETEX k ex => -ERR syntax error
        GETEX k ex 0 => -ERR invalid expire time in 'getex' command
        GETEX k pxat -3 => -ERR invalid expire time in 'getex' command
        GETEX k ex abc => -ERR value is not an integer or out of range
        GETEX nokey ex abc => $-1
        GETEX nokey foo => -ERR syntax error
        GETEX k exat 1 => $2\r\n10
        EXISTS k => :0
        SET k 10 => +OK
        GETEX k pxat 1 => $2\r\n10
        EXISTS k => :0
        GETEX => -ERR wrong number of arguments for 'getex' command
    "#;

    #[test]
    fn getex() {
        run_all(GETEX_SCRIPT);
    }

    const MULTI_SCRIPT: &str = r#"
        MSET m1 1 m2 2 m3 3 m4 4 => +OK
        MGET m1 m2 m3 m4 nokey m1 => *6\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n$-1\r\n$1\r\n1
        MSET a 1 b => -ERR wrong number of arguments for 'mset' command
        MSET a 1 a 2 b 3 => +OK
        MGET a b => *2\r\n$1\r\n2\r\n$1\r\n3
        SETEX a 100 x => +OK
        MSET a 1 b 2 => +OK
        TTL a => :-1
        MSETNX key1 1 key2 2 => :1
        MSETNX key1 1 c 2 => :0
        EXISTS c => :0
        MSETNX c 1 key2 x => :0
        MGET key1 key2 c => *3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1
        MSETNX c 1 c 2 => :1
        GET c => $1\r\n2
        MSETNX n1 x n2 y n1 z => :1
        MGET n1 n2 => *2\r\n$1\r\nz\r\n$1\r\ny
        MSETNX m1 1 => :0
        MSETNX a => -ERR wrong number of arguments for 'msetnx' command
        MSETNX a 1 b => -ERR wrong number of arguments for 'msetnx' command
        MSETNX x 1 y => -ERR wrong number of arguments for 'msetnx' command
        SET e 1 exat 1 => +OK
        MSETNX e 5 f 6 => :1
        MGET e f => *2\r\n$1\r\n5\r\n$1\r\n6
        OBJECT ENCODING e => $3\r\nint
        @resp3
        MGET m1 nokey => *2\r\n$1\r\n1\r\n_
        MSETNX m1 1 m2 2 => :0
    "#;

    #[test]
    fn multi_key() {
        run_all(MULTI_SCRIPT);
    }

    const RANGE_SCRIPT: &str = r#"
        APPEND x abc => :3
        OBJECT ENCODING x => $6\r\nembstr
        APPEND x def => :6
        OBJECT ENCODING x => $3\r\nraw
        GET x => $6\r\nabcdef
        APPEND y 123 => :3
        OBJECT ENCODING y => $3\r\nint
        APPEND y "" => :3
        OBJECT ENCODING y => $3\r\nraw
        APPEND y 4 => :4
        GET y => $4\r\n1234
        STRLEN y => :4
        STRLEN nokey => :0
        SETEX t 100 a => +OK
        APPEND t b => :2
        TTL t => :100
        SET i 12345 => +OK
        STRLEN i => :5
        GETRANGE i 0 -1 => $5\r\n12345
        GETRANGE i 1 2 => $2\r\n23
        GETRANGE i -3 -1 => $3\r\n345
        GETRANGE i -1 -3 => $0\r\n
        GETRANGE i 3 1 => $0\r\n
        GETRANGE i 100 200 => $0\r\n
        GETRANGE i -100 2 => $3\r\n123
        GETRANGE i 0 100 => $5\r\n12345
        GETRANGE nokey 0 1 => $0\r\n
        GETRANGE nokey a 1 => -ERR value is not an integer or out of range
        GETRANGE i a 1 => -ERR value is not an integer or out of range
        GETRANGE i 0 b => -ERR value is not an integer or out of range
        GETRANGE i 0 9223372036854775807 => $5\r\n12345
        GETRANGE i -9223372036854775808 -9223372036854775808 => $1\r\n1
        GETRANGE i 9223372036854775808 1 => -ERR value is not an integer or out of range
        SUBSTR i 1 3 => $3\r\n234
        SUBSTR i 1 => -ERR wrong number of arguments for 'substr' command
        OBJECT ENCODING i => $3\r\nint
        SET e "" => +OK
        GETRANGE e 0 -1 => $0\r\n
        GETRANGE e 0 0 => $0\r\n
        GETRANGE e -1 -1 => $0\r\n
        SETRANGE k 0 "" => :0
        EXISTS k => :0
        SETRANGE k 5 "" => :0
        SETRANGE k -1 x => -ERR offset is out of range
        SETRANGE k abc x => -ERR value is not an integer or out of range
        SETRANGE k 3 abc => :6
        GET k => $6\r\n\x00\x00\x00abc
        OBJECT ENCODING k => $3\r\nraw
        SETRANGE k 1 Z => :6
        GET k => $6\r\n\x00Z\x00abc
        SET s hello => +OK
        SETRANGE s 1 "" => :5
        OBJECT ENCODING s => $6\r\nembstr
        SETRANGE s 1 EL => :5
        GET s => $5\r\nhELlo
        OBJECT ENCODING s => $3\r\nraw
        SETRANGE s 7 ! => :8
        GET s => $8\r\nhELlo\x00\x00!
        SET n 12345 => +OK
        SETRANGE n 0 9 => :5
        OBJECT ENCODING n => $3\r\nraw
        GET n => $5\r\n92345
        SET n 12345 => +OK
        SETRANGE n 0 "" => :5
        OBJECT ENCODING n => $3\r\nint
        SETRANGE big 536870912 x => -ERR string exceeds maximum allowed size (proto-max-bulk-len)
        SETRANGE big 536870911 xx => -ERR string exceeds maximum allowed size (proto-max-bulk-len)
        SETRANGE k 9223372036854775807 x => -ERR string exceeds maximum allowed size (proto-max-bulk-len)
        SETRANGE k 9223372036854775808 x => -ERR value is not an integer or out of range
        EXISTS big => :0
        SETEX t 100 abc => +OK
        SETRANGE t 1 X => :3
        TTL t => :100
    "#;

    #[test]
    fn append_strlen_ranges() {
        run_all(RANGE_SCRIPT);
    }

    const INCR_SCRIPT: &str = r#"
        INCR c => :1
        OBJECT ENCODING c => $3\r\nint
        DECR c => :0
        DECR c => :-1
        INCRBY c 10 => :9
        DECRBY c 10 => :-1
        INCRBY c abc => -ERR value is not an integer or out of range
        INCRBY c -0 => -ERR value is not an integer or out of range
        INCRBY c +1 => -ERR value is not an integer or out of range
        INCRBY c 01 => -ERR value is not an integer or out of range
        DECRBY c -9223372036854775808 => -ERR decrement would overflow
        DECRBY c 9223372036854775808 => -ERR value is not an integer or out of range
        DECRBY c -9223372036854775807 => :9223372036854775806
        SET c 9223372036854775807 => +OK
        INCR c => -ERR increment or decrement would overflow
        INCRBY c 0 => :9223372036854775807
        SET c -9223372036854775808 => +OK
        DECR c => -ERR increment or decrement would overflow
        INCRBY c -1 => -ERR increment or decrement would overflow
        SET c \s1 => +OK
        INCR c => -ERR value is not an integer or out of range
        SET c 01 => +OK
        INCR c => -ERR value is not an integer or out of range
        SET c abc => +OK
        INCR c => -ERR value is not an integer or out of range
        SET c 1.5 => +OK
        INCR c => -ERR value is not an integer or out of range
        SET c 100 ex 100 => +OK
        INCR c => :101
        TTL c => :100
        OBJECT ENCODING c => $3\r\nint
        SET c 5 => +OK
        APPEND c 1 => :2
        OBJECT ENCODING c => $3\r\nraw
        INCR c => :52
        OBJECT ENCODING c => $3\r\nint
        INCRBY d 5 => :5
        DECRBY e 5 => :-5
        INCR => -ERR wrong number of arguments for 'incr' command
        INCRBY c => -ERR wrong number of arguments for 'incrby' command
    "#;

    #[test]
    fn incr_family() {
        run_all(INCR_SCRIPT);
    }

    const INCRBYFLOAT_SCRIPT: &str = r#"
        INCRBYFLOAT f 10.5 => $4\r\n10.5
        OBJECT ENCODING f => $6\r\nembstr
        INCRBYFLOAT f 0.1 => $4\r\n10.6
        INCRBYFLOAT f -5.6 => $1\r\n5
        OBJECT ENCODING f => $6\r\nembstr
        INCR f => :6
        INCRBYFLOAT f 1 => $1\r\n7
        OBJECT ENCODING f => $6\r\nembstr
        SET f 1.1 => +OK
        INCRBYFLOAT f 2.2 => $3\r\n3.3
        SET f 3.0e3 => +OK
        INCRBYFLOAT f 0 => $4\r\n3000
        INCRBYFLOAT f 3.0e3 => $4\r\n6000
        SET f 0 => +OK
        INCRBYFLOAT f 1e-17 => $19\r\n0.00000000000000001
        INCRBYFLOAT f 1e-18 => $19\r\n0.00000000000000001
        SET f 0 => +OK
        INCRBYFLOAT f 5e-18 => $1\r\n0
        INCRBYFLOAT f 1e4933 => -ERR value is not a valid float
        INCRBYFLOAT f 1e-4952 => -ERR value is not a valid float
        INCRBYFLOAT f inf => -ERR increment would produce NaN or Infinity
        INCRBYFLOAT f -inf => -ERR increment would produce NaN or Infinity
        INCRBYFLOAT f nan => -ERR value is not a valid float
        INCRBYFLOAT f 0x => -ERR value is not a valid float
        INCRBYFLOAT f 1e => -ERR value is not a valid float
        INCRBYFLOAT f \s1 => -ERR value is not a valid float
        INCRBYFLOAT f 1\s => -ERR value is not a valid float
        INCRBYFLOAT f "" => -ERR value is not a valid float
        INCRBYFLOAT f abc => -ERR value is not a valid float
        INCRBYFLOAT f 0x1.8p1 => $1\r\n3
        INCRBYFLOAT f .5 => $3\r\n3.5
        INCRBYFLOAT f 5. => $3\r\n8.5
        INCRBYFLOAT f +1 => $3\r\n9.5
        INCRBYFLOAT f -0 => $3\r\n9.5
        INCRBYFLOAT f 1e+2 => $5\r\n109.5
        INCRBYFLOAT f -109.5 => $1\r\n0
        INCRBYFLOAT f -1e-2 => $5\r\n-0.01
        SET f abc => +OK
        INCRBYFLOAT f 1 => -ERR value is not a valid float
        INCRBYFLOAT f abc => -ERR value is not a valid float
        SET f inf => +OK
        INCRBYFLOAT f 1 => -ERR increment would produce NaN or Infinity
        GET f => $3\r\ninf
        SET f 9223372036854775807 => +OK
        INCRBYFLOAT f 1 => $19\r\n9223372036854775808
        SET f 123456789012345678901234567890 => +OK
        INCRBYFLOAT f 1 => $30\r\n123456789012345678899921813504
        SET f -0.00000000000000000001 => +OK
        INCRBYFLOAT f 0 => $1\r\n0
        SET f 0.1 => +OK
        INCRBYFLOAT f 0.2 => $3\r\n0.3
        SET f 100 ex 100 => +OK
        INCRBYFLOAT f 1.5 => $5\r\n101.5
        TTL f => :100
        INCRBYFLOAT g 123456789.123456789 => $27\r\n123456789.12345678899873747
        INCRBYFLOAT h 1e30 => $31\r\n1000000000000000000024696061952
        INCRBYFLOAT h 1e14 => $31\r\n1000000000000000100011534712832
        OBJECT ENCODING h => $6\r\nembstr
        INCRBYFLOAT i 12345678901234567890123456789.5 => $29\r\n12345678901234567890421678080
        INCRBYFLOAT j 1e40 => $40\r\n9999999999999999999783686092270256259072
        OBJECT ENCODING j => $6\r\nembstr
        INCRBYFLOAT j2 1e50 => $51\r\n100000000000000000003583830118858923890798487404544
        OBJECT ENCODING j2 => $3\r\nraw
        SET z 1\x00junk => +OK
        INCRBYFLOAT z 1 => -ERR value is not a valid float
        SET z 1 => +OK
        INCRBYFLOAT z 1\x00junk => -ERR value is not a valid float
        INCRBYFLOAT z \x00 => -ERR value is not a valid float
        INCRBYFLOAT => -ERR wrong number of arguments for 'incrbyfloat' command
    "#;

    #[test]
    fn incrbyfloat() {
        run_all(INCRBYFLOAT_SCRIPT);
    }

    const LCS_SCRIPT: &str = r#"
        MSET key1 ohmytext key2 mynewtext => +OK
        LCS key1 key2 => $6\r\nmytext
        LCS key1 key2 len => :6
        LCS key1 key2 LEN withmatchlen => :6
        LCS key1 key2 idx => *4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n*2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6
        LCS key1 key2 idx minmatchlen 4 => *4\r\n$7\r\nmatches\r\n*1\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n$3\r\nlen\r\n:6
        LCS key1 key2 idx minmatchlen 4 withmatchlen => *4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n$3\r\nlen\r\n:6
        LCS key1 key2 IDX WITHMATCHLEN => *4\r\n$7\r\nmatches\r\n*2\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n*3\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n:2\r\n$3\r\nlen\r\n:6
        LCS key1 key2 minmatchlen -5 idx => *4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n*2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6
        LCS key1 key2 len idx => -ERR If you want both the length and indexes, please just use IDX.
        LCS key1 key2 minmatchlen => -ERR syntax error
        LCS key1 key2 minmatchlen abc => -ERR value is not an integer or out of range
        LCS key1 key2 foo => -ERR syntax error
        LCS key1 key2 withmatchlen => $6\r\nmytext
        LCS key1 key2 minmatchlen 3 => $6\r\nmytext
        LCS key1 nokey => $0\r\n
        LCS nokey key2 len => :0
        LCS nokey nokey2 idx => *4\r\n$7\r\nmatches\r\n*0\r\n$3\r\nlen\r\n:0
        LCS key1 => -ERR wrong number of arguments for 'lcs' command
        SET n1 12345 => +OK
        SET n2 2345 => +OK
        LCS n1 n2 idx withmatchlen => *4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:1\r\n:4\r\n*2\r\n:0\r\n:3\r\n:4\r\n$3\r\nlen\r\n:4
        MSET a abcabc b cbacba => +OK
        LCS a b idx withmatchlen => *4\r\n$7\r\nmatches\r\n*3\r\n*3\r\n*2\r\n:5\r\n:5\r\n*2\r\n:3\r\n:3\r\n:1\r\n*3\r\n*2\r\n:4\r\n:4\r\n*2\r\n:1\r\n:1\r\n:1\r\n*3\r\n*2\r\n:2\r\n:2\r\n*2\r\n:0\r\n:0\r\n:1\r\n$3\r\nlen\r\n:3
        LCS a b => $3\r\ncbc
        @resp3
        LCS key1 key2 idx withmatchlen => %2\r\n$7\r\nmatches\r\n*2\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n*3\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n:2\r\n$3\r\nlen\r\n:6
    "#;

    #[test]
    fn lcs() {
        run_all(LCS_SCRIPT);
    }

    #[test]
    fn lcs_transient_memory_limit() {
        for n in [1, 2] {
            let mut t = TestServer::new(n);
            let a = vec![b'a'; 16384];
            let b = vec![b'b'; 8192];
            t.raw(&[b"SET", b"key1", &a]);
            t.raw(&[b"SET", b"key2", &b]);
            // (16385 * 8193 * 4) bytes exceed the default 512 MB.
            assert_eq!(
                t.run(&["LCS", "key1", "key2", "LEN"]),
                "-ERR Insufficient memory, transient memory for LCS exceeds \
                 proto-max-bulk-len\r\n"
            );
        }
    }

    #[test]
    fn expired_keys_read_as_missing() {
        for n in [1, 2] {
            let mut t = TestServer::new(n);
            assert_eq!(t.run(&["SET", "k", "12", "PX", "50"]), "+OK\r\n");
            assert_eq!(t.run(&["SETEX", "key1", "1", "abc"]), "+OK\r\n");
            for sh in &mut t.shards {
                sh.now_ms += 2000;
            }
            // The test driver re-reads the clock before each command; move
            // the deadlines instead so they are in the past.
            for key in ["k", "key1"] {
                let s = shard_of(key.as_bytes(), n);
                t.shards[s].dbs[0].set_expire(key.as_bytes(), 1);
            }
            assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
            assert_eq!(t.run(&["INCR", "k"]), ":1\r\n");
            assert_eq!(t.run(&["APPEND", "key1", "x"]), ":1\r\n");
            assert_eq!(t.run(&["MSETNX", "key1", "y", "key2", "z"]), ":0\r\n");
        }
    }

    #[test]
    fn writes_count_as_one_lfu_access_as_in_redis() {
        // Expected values from redis-server 7.0.15 with allkeys-lfu and
        // lfu-log-factor 0 (every access adds one).
        for n in [1, 2, 4] {
            let mut t = crate::testutil::TestServer::new(n);
            t.run(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
            t.run(&["CONFIG", "SET", "lfu-log-factor", "0"]);
            t.run(&["SET", "k", "v"]);
            assert_eq!(t.run(&["OBJECT", "FREQ", "k"]), ":5\r\n");
            t.run(&["MSET", "k", "v2", "other", "x"]);
            assert_eq!(t.run(&["OBJECT", "FREQ", "k"]), ":6\r\n", "{n} shards");
            t.run(&["SET", "f", "1.5"]);
            t.run(&["INCRBYFLOAT", "f", "1"]);
            assert_eq!(t.run(&["OBJECT", "FREQ", "f"]), ":6\r\n", "{n} shards");
        }
    }
}
