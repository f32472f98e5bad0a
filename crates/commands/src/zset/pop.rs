//! The pops: ZPOPMIN, ZPOPMAX, ZMPOP and their blocking forms BZPOPMIN,
//! BZPOPMAX and BZMPOP (which block on the first non-empty key or, with
//! none, hand the client to the runtime with their deadline).

use engine::Value;
use resp::Args;

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::util::{as_zset, eq_ic, parse_timeout};

use super::after_removal;
use super::parse::{parse_positive, parse_range_i64};

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
pub(super) fn zpopmin(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zpop_generic(ctx, args, false)
}

/// ZPOPMAX key [count]
pub(super) fn zpopmax(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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
pub(super) fn bzpopmin(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    bzpop_generic(ctx, args, false)
}

/// BZPOPMAX key [key ...] timeout
pub(super) fn bzpopmax(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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
pub(super) fn zmpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    zmpop_generic(ctx, args, 1, false)
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]
pub(super) fn bzmpop(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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
