//! ZRANGE and its family (ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE,
//! ZRANGEBYLEX, ZREVRANGEBYLEX, ZRANGESTORE) and ZREMRANGEBYRANK / SCORE /
//! LEX: a range by rank, score or lex, turned into a span of ranks (or, for
//! lex, Redis's walk: see `lex`), with REV and LIMIT, then emitted, stored
//! or removed.

use engine::ZSet;
use resp::Args;

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::util::{as_zset, as_zset_mut, eq_ic, parse_i64};

use super::lex::LexRange;
use super::parse::ScoreRange;
use super::{after_removal, emit_ranks, store_result};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

/// ZRANGE key min max [BYSCORE|BYLEX] [REV] [WITHSCORES] [LIMIT offset count]
pub(super) fn zrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Auto, None)
}

/// ZREVRANGE key start stop [WITHSCORES]
pub(super) fn zrevrange(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Rank, Some(true))
}

/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
pub(super) fn zrangebyscore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Score, Some(false))
}

/// ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]
pub(super) fn zrevrangebyscore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Score, Some(true))
}

/// ZRANGEBYLEX key min max [LIMIT offset count]
pub(super) fn zrangebylex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Lex, Some(false))
}

/// ZREVRANGEBYLEX key max min [LIMIT offset count]
pub(super) fn zrevrangebylex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zrange_generic(ctx, args, 1, false, RangeType::Lex, Some(true))
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]:
/// the number of members stored (0 deletes `dst`).
pub(super) fn zrangestore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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
pub(super) fn zremrangebyrank(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bounds = Bounds::Rank(parse_i64(args.get(2))?, parse_i64(args.get(3))?);
    zremrange_generic(ctx, args, bounds)
}

/// ZREMRANGEBYSCORE key min max: the number of members removed.
pub(super) fn zremrangebyscore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bounds = Bounds::Score(ScoreRange::parse(args.get(2), args.get(3))?);
    zremrange_generic(ctx, args, bounds)
}

/// ZREMRANGEBYLEX key min max: the number of members removed.
pub(super) fn zremrangebylex(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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
