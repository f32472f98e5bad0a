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
//! computing on the home thread.
//!
//! Limits: `proto-max-bulk-len` is taken as its default (512 MB) because a
//! shard handler does not see the configuration yet.

mod longdouble;

use engine::{Str, Value};
use resp::{Args, Reply};

use crate::coord::{group_by_shard, outputs, Coordinator, JobOut, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, shard_of, CommandSpec, Exec};
use crate::util::{as_str, as_str_mut, eq_ic, parse_i64};

/// Redis's default `proto-max-bulk-len`: the largest string APPEND and
/// SETRANGE may build, and the largest transient table LCS may allocate.
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

/// Writes a string value as a bulk reply without allocating.
#[inline]
pub(crate) fn reply_str(out: &mut Reply, s: &Str) {
    match s {
        Str::Int(n) => out.bulk_int(*n),
        Str::Emb(b) => out.bulk(b),
        Str::Raw(v) => out.bulk(v),
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
fn set_generic(
    ctx: &mut ShardCtx<'_>,
    key: &[u8],
    val: &[u8],
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
    set_value(ctx, key, Str::from_bytes(val), expire);
    if !o.get {
        match replies {
            SetReply::OkNull => ctx.out.ok(),
            SetReply::OneZero => ctx.out.int(1),
        }
    }
    Ok(())
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]
fn set(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_ext(args, 3, true)?;
    set_generic(ctx, args.get(1), args.get(2), &o, "set", SetReply::OkNull)
}

/// SETNX key value: `:1` if set, `:0` if the key existed.
fn setnx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        nx: true,
        ..Default::default()
    };
    set_generic(
        ctx,
        args.get(1),
        args.get(2),
        &o,
        "setnx",
        SetReply::OneZero,
    )
}

/// SETEX key seconds value
fn setex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        exp: Some((ExpKind::Ex, args.get(2))),
        ..Default::default()
    };
    set_generic(ctx, args.get(1), args.get(3), &o, "setex", SetReply::OkNull)
}

/// PSETEX key milliseconds value
fn psetex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = ExtOpts {
        exp: Some((ExpKind::Px, args.get(2))),
        ..Default::default()
    };
    set_generic(
        ctx,
        args.get(1),
        args.get(3),
        &o,
        "psetex",
        SetReply::OkNull,
    )
}

/// Stores a string, applying the expiry option (KEEPTTL keeps a live key's
/// deadline).
pub(crate) fn set_value(ctx: &mut ShardCtx<'_>, key: &[u8], value: Str, expire: ExpireOpt) {
    let db = ctx.db;
    let at = match expire {
        ExpireOpt::None => 0,
        ExpireOpt::At(ms) => ms,
        ExpireOpt::KeepTtl => ctx.shard.dbs[db].get(key).map_or(0, |e| e.expire_at_ms()),
    };
    ctx.shard.store(db, key, Value::Str(value), at);
}

/// GETSET key value: the old value (or null), then SET without options
/// (the TTL is dropped).
fn getset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    get_generic(ctx, key)?;
    set_value(ctx, key, Str::from_bytes(args.get(2)), ExpireOpt::None);
    Ok(())
}

/// GETDEL key: the value (or null), and the key deleted.
fn getdel(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let key = args.get(1);
    get_generic(ctx, key)?;
    ctx.shard.remove(ctx.db, key);
    Ok(())
}

/// GETEX key [EX s|PX ms|EXAT ts|PXAT ms-ts|PERSIST]: the value, and the
/// TTL changed. As in Redis, a missing key replies null before the expiry
/// value is checked, and an EXAT/PXAT in the past deletes the key.
fn getex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_ext(args, 2, false)?;
    let (db, key) = (ctx.db, args.get(1));
    let touch = ctx.touch();
    let now = ctx.shard.now_ms;
    let Some(e) = ctx.shard.lookup_read(db, key, touch) else {
        ctx.out.null();
        return Ok(());
    };
    let s = as_str(e)?;
    let at = match o.exp {
        Some((k, v)) => Some((k, expire_ms(v, k.seconds(), k.relative(), now, "getex")?)),
        None => None,
    };
    reply_str(ctx.out, s);
    match at {
        Some((k, ms)) if !k.relative() && ms <= now => {
            ctx.shard.remove(db, key);
        }
        Some((_, ms)) => {
            ctx.shard.dbs[db].set_expire(key, ms);
        }
        None if o.persist => {
            ctx.shard.dbs[db].set_expire(key, 0);
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
    for k in args.iter().skip(1) {
        match ctx.shard.lookup_read(ctx.db, k, touch).map(|e| as_str(e)) {
            Some(Ok(s)) => reply_str(ctx.out, s),
            _ => ctx.out.null(),
        }
    }
    Ok(())
}

fn mget_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let n = c.nshards();
    let positions: Vec<usize> = (1..args.len()).collect();
    let groups = group_by_shard(args, &positions, n);
    let db = c.client.db;
    let touch = !c.client.no_touch;
    let mut plan = Plan::default();
    let mut order = Vec::with_capacity(groups.len());
    for (shard, pos) in groups {
        let keys: Vec<Vec<u8>> = pos.iter().map(|&p| args.get(p).to_vec()).collect();
        order.push(pos);
        plan.run(shard, move |env| {
            keys.iter()
                .map(|k| {
                    let e = env.shard.lookup_read(db, k, touch)?;
                    as_str(e).ok().cloned()
                })
                .collect::<Vec<Option<Str>>>()
        });
    }
    let total = args.len() - 1;
    Ok(OneStep::new(
        plan,
        move |res: Vec<Vec<Option<Str>>>, out: &mut Reply, _: &mut ClientState| {
            let mut slots: Vec<Option<Str>> = vec![None; total];
            for (pos, vals) in order.into_iter().zip(res) {
                for (p, v) in pos.into_iter().zip(vals) {
                    slots[p - 1] = v;
                }
            }
            out.array(total);
            for v in &slots {
                match v {
                    Some(s) => reply_str(out, s),
                    None => out.null(),
                }
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
    for i in (1..args.len()).step_by(2) {
        set_value(
            ctx,
            args.get(i),
            Str::from_bytes(args.get(i + 1)),
            ExpireOpt::None,
        );
    }
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The (key, value) pairs of MSET/MSETNX grouped by shard.
fn pairs_by_shard(args: Args<'_>, nshards: usize) -> Vec<(usize, Pairs)> {
    let positions: Vec<usize> = (1..args.len()).step_by(2).collect();
    group_by_shard(args, &positions, nshards)
        .into_iter()
        .map(|(shard, pos)| {
            let pairs = pos
                .iter()
                .map(|&p| (args.get(p).to_vec(), args.get(p + 1).to_vec()))
                .collect();
            (shard, pairs)
        })
        .collect()
}

/// A job storing `pairs` on its shard, dropping any TTL (as SET does).
fn store_pairs(plan: &mut Plan, shard: usize, db: usize, pairs: Pairs) {
    plan.run(shard, move |env| {
        for (k, v) in &pairs {
            env.shard.store(db, k, Value::Str(Str::from_bytes(v)), 0);
        }
    });
}

fn mset_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    check_pairs(args, "mset")?;
    let db = c.client.db;
    let mut plan = Plan::default();
    for (shard, pairs) in pairs_by_shard(args, c.nshards()) {
        store_pairs(&mut plan, shard, db, pairs);
    }
    Ok(OneStep::new(
        plan,
        |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
            out.ok();
            Ok(())
        },
    ))
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
                    let keys: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| k.clone()).collect();
                    plan.run(*shard, move |env| {
                        keys.iter().any(|k| env.shard.lookup_write(db, k).is_some())
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
    Ok(Box::new(MsetNx {
        db: c.client.db,
        groups: pairs_by_shard(args, c.nshards()),
        stage: 0,
    }))
}

// ---------------------------------------------------------------------------
// APPEND, STRLEN, GETRANGE, SETRANGE

/// Redis's `checkStringLength`: a string of `size + append` bytes must fit
/// `proto-max-bulk-len`.
fn check_string_length(size: u64, append: u64) -> Result<(), CmdError> {
    match size.checked_add(append) {
        Some(total) if total <= PROTO_MAX_BULK_LEN => Ok(()),
        _ => Err(CmdError::err(
            "string exceeds maximum allowed size (proto-max-bulk-len)",
        )),
    }
}

/// APPEND key value: the new length. A new key is stored as SET would
/// store it (so `int` for integers); an existing value becomes `raw`.
fn append(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key, val) = (ctx.db, args.get(1), args.get(2));
    let len = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            let s = as_str_mut(e)?;
            check_string_length(s.len() as u64, val.len() as u64)?;
            let v = s.make_raw();
            v.extend_from_slice(val);
            v.len()
        }
        None => {
            ctx.shard
                .store(db, key, Value::Str(Str::from_bytes(val)), 0);
            val.len()
        }
    };
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
    let (db, key, val) = (ctx.db, args.get(1), args.get(3));
    let len = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            let s = as_str_mut(e)?;
            if val.is_empty() {
                ctx.out.int(s.len() as i64);
                return Ok(());
            }
            check_string_length(offset, val.len() as u64)?;
            let v = s.make_raw();
            write_at(v, offset as usize, val);
            v.len()
        }
        None => {
            if val.is_empty() {
                ctx.out.int(0);
                return Ok(());
            }
            check_string_length(offset, val.len() as u64)?;
            let mut v = Vec::new();
            write_at(&mut v, offset as usize, val);
            let n = v.len();
            ctx.shard.store(db, key, Value::Str(Str::Raw(v)), 0);
            n
        }
    };
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
fn incr_generic(ctx: &mut ShardCtx<'_>, key: &[u8], incr: i64) -> Result<(), CmdError> {
    let db = ctx.db;
    let n = match ctx.shard.lookup_write(db, key) {
        Some(e) => {
            let s = as_str_mut(e)?;
            let cur = s.as_i64().ok_or(CmdError::NotInteger)?;
            let n = cur.checked_add(incr).ok_or(CmdError::Overflow)?;
            *s = Str::Int(n);
            n
        }
        None => {
            ctx.shard.store(db, key, Value::Str(Str::Int(incr)), 0);
            incr
        }
    };
    ctx.out.int(n);
    Ok(())
}

fn incr(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    incr_generic(ctx, args.get(1), 1)
}

fn decr(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    incr_generic(ctx, args.get(1), -1)
}

fn incrby(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let by = parse_i64(args.get(2))?;
    incr_generic(ctx, args.get(1), by)
}

fn decrby(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let by = parse_i64(args.get(2))?;
    if by == i64::MIN {
        // Redis 7: negating LLONG_MIN would overflow.
        return Err(CmdError::err("decrement would overflow"));
    }
    incr_generic(ctx, args.get(1), -by)
}

/// INCRBYFLOAT key increment: the new value as Redis prints a `long
/// double` (`%.17Lf`, trailing zeros trimmed), stored as a string (never
/// `int`), keeping the TTL. See `longdouble` for why not `f64`.
fn incrbyfloat(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let cur = match ctx.shard.lookup_write(db, key) {
        Some(e) => Some(match as_str(e)? {
            Str::Int(n) => longdouble::Ld::from_i64(*n),
            s => s.with_bytes(longdouble::parse).ok_or(CmdError::NotFloat)?,
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
    match ctx.shard.lookup_write(db, key) {
        Some(e) => *as_str_mut(e)? = value,
        None => ctx.shard.store(db, key, Value::Str(value), 0),
    }
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
    Ok(OneStep::new(
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
