//! String commands (Redis's `t_string.c`). Request path.
//!
//! Handlers read as parse → op → reply, and find every syntax error before
//! mutating anything. Multi-key commands (MGET, MSET, MSETNX) run as one
//! shard handler when their keys share a shard and as a coordinator when
//! they do not.

use engine::{Str, Value};
use resp::{Args, Reply};

use crate::coord::{group_by_shard, Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec};
use crate::util::{as_str, eq_ic, parse_i64};

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "get",
        2,
        READONLY | FAST,
        keys(1, 1, 1),
        Exec::Shard(get, None),
        &["read", "string", "fast"],
    ),
    CommandSpec::new(
        "set",
        -3,
        WRITE | DENYOOM,
        keys(1, 1, 1),
        Exec::Shard(set, None),
        &["write", "string", "slow"],
    ),
    CommandSpec::new(
        "mget",
        -2,
        READONLY | FAST,
        keys(1, -1, 1),
        Exec::Shard(mget, Some(mget_multi)),
        &["read", "string", "fast"],
    ),
    CommandSpec::new(
        "mset",
        -3,
        WRITE | DENYOOM,
        keys(1, -1, 2),
        Exec::Shard(mset, Some(mset_multi)),
        &["write", "string", "slow"],
    ),
];

/// GET key: the value, or null; WRONGTYPE for other types.
fn get(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        None => ctx.out.null(),
        Some(e) => reply_str(ctx.out, as_str(e)?),
    }
    Ok(())
}

/// Writes a string value as a bulk reply without allocating.
#[inline]
pub(crate) fn reply_str(out: &mut Reply, s: &Str) {
    match s {
        Str::Int(n) => out.bulk_int(*n),
        Str::Emb(b) => out.bulk(b),
        Str::Raw(v) => out.bulk(v),
    }
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

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]
fn set(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (mut nx, mut xx, mut get) = (false, false, false);
    let mut exp: Option<(&[u8], bool, bool)> = None;
    let mut keepttl = false;
    let mut i = 3;
    while i < args.len() {
        let a = args.get(i);
        let has_next = i + 1 < args.len();
        if eq_ic(a, "nx") && !xx {
            nx = true;
        } else if eq_ic(a, "xx") && !nx {
            xx = true;
        } else if eq_ic(a, "get") {
            get = true;
        } else if eq_ic(a, "keepttl") && exp.is_none() {
            keepttl = true;
        } else if exp.is_none() && !keepttl && has_next {
            let (seconds, relative) = if eq_ic(a, "ex") {
                (true, true)
            } else if eq_ic(a, "px") {
                (false, true)
            } else if eq_ic(a, "exat") {
                (true, false)
            } else if eq_ic(a, "pxat") {
                (false, false)
            } else {
                return Err(CmdError::Syntax);
            };
            i += 1;
            exp = Some((args.get(i), seconds, relative));
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let now = ctx.shard.now_ms;
    let expire = match exp {
        Some((v, seconds, relative)) => ExpireOpt::At(expire_ms(v, seconds, relative, now, "set")?),
        None if keepttl => ExpireOpt::KeepTtl,
        None => ExpireOpt::None,
    };
    let (db, key) = (ctx.db, args.get(1));
    let existing = ctx.shard.lookup_write(db, key);
    let found = existing.is_some();
    if get {
        match existing {
            None => ctx.out.null(),
            Some(e) => reply_str(ctx.out, as_str(e)?),
        }
    }
    if (nx && found) || (xx && !found) {
        if !get {
            ctx.out.null();
        }
        return Ok(());
    }
    set_value(ctx, key, Str::from_bytes(args.get(2)), expire);
    if !get {
        ctx.out.ok();
    }
    Ok(())
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

/// MGET key [key ...]: one reply per key, null for missing keys and for
/// keys of other types.
fn mget(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ctx.out.array(args.len() - 1);
    let touch = ctx.touch();
    for k in args.iter().skip(1) {
        match ctx.shard.lookup_read(ctx.db, k, touch) {
            Some(e) => match &e.value {
                Value::Str(s) => reply_str(ctx.out, s),
            },
            None => ctx.out.null(),
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
                .map(|k| match env.shard.lookup_read(db, k, touch) {
                    Some(e) => match &e.value {
                        Value::Str(s) => Some(s.clone()),
                    },
                    None => None,
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

/// MSET key value [key value ...]
fn mset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if args.len() % 2 == 0 {
        return Err(CmdError::WrongArity("mset".into()));
    }
    let mut i = 1;
    while i < args.len() {
        set_value(
            ctx,
            args.get(i),
            Str::from_bytes(args.get(i + 1)),
            ExpireOpt::None,
        );
        i += 2;
    }
    ctx.out.ok();
    Ok(())
}

fn mset_multi(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    if args.len() % 2 == 0 {
        return Err(CmdError::WrongArity("mset".into()));
    }
    let n = c.nshards();
    let positions: Vec<usize> = (1..args.len()).step_by(2).collect();
    let db = c.client.db;
    let mut plan = Plan::default();
    for (shard, pos) in group_by_shard(args, &positions, n) {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = pos
            .iter()
            .map(|&p| (args.get(p).to_vec(), args.get(p + 1).to_vec()))
            .collect();
        plan.run(shard, move |env| {
            for (k, v) in &pairs {
                env.shard.store(db, k, Value::Str(Str::from_bytes(v)), 0);
            }
        });
    }
    Ok(OneStep::new(
        plan,
        |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
            out.ok();
            Ok(())
        },
    ))
}
