//! ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD: set operations
//! over sorted sets and plain sets (every member of a plain set scored 1),
//! with WEIGHTS and AGGREGATE as Redis.

use std::collections::HashMap;

use engine::{ValueRef, ZSet};
use resp::Args;

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::util::{as_zset, eq_ic, parse_i64};

use super::parse::{parse_double, parse_range_i64};
use super::{result, results_header, store_result};

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
pub(super) fn zunion(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, None, 1, SetOp::Union, false)
}

/// ZINTER numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]
pub(super) fn zinter(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, None, 1, SetOp::Inter, false)
}

/// ZDIFF numkeys key [key ...] [WITHSCORES]
pub(super) fn zdiff(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, None, 1, SetOp::Diff, false)
}

/// ZINTERCARD numkeys key [key ...] [LIMIT limit]
pub(super) fn zintercard(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, None, 1, SetOp::Inter, true)
}

/// ZUNIONSTORE dst numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE ...]
pub(super) fn zunionstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, Some(args.get(1)), 2, SetOp::Union, false)
}

/// ZINTERSTORE dst numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE ...]
pub(super) fn zinterstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    setop_generic(ctx, args, Some(args.get(1)), 2, SetOp::Inter, false)
}

/// ZDIFFSTORE dst numkeys key [key ...]
pub(super) fn zdiffstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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
