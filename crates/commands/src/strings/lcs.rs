//! LCS: its options, fetching both values (on one shard, or each on its
//! own shard and computed on the home thread) and the LCS table with its
//! transient-memory limit, LEN and IDX replies.

use resp::{Args, OwnedArgs, Reply};

use crate::coord::{Coordinator, KeyedStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::shard_of;
use crate::util::{as_str, eq_ic, parse_i64};

use super::PROTO_MAX_BULK_LEN;

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
pub(super) fn lcs(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let a = lcs_fetch(ctx.shard, ctx.db, args.get(1), touch);
    let b = lcs_fetch(ctx.shard, ctx.db, args.get(2), touch);
    let (Ok(a), Ok(b)) = (a, b) else {
        return Err(lcs_wrongtype());
    };
    lcs_reply(ctx.out, &a, &b, parse_lcs(args)?)
}

/// LCS with its keys on two shards: fetch both values, compute here.
pub(super) fn lcs_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let opts = parse_lcs(args);
    let (db, touch, n) = (c.client.db, !c.client.no_touch, c.nshards());
    // In key order (the outputs come back in this order), each key's shard
    // as dispatch found it if it did.
    let known = c.key_shards;
    let groups: Vec<(usize, OwnedArgs)> = [1, 2]
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let key = args.get(p);
            let shard = if known.len() == 2 {
                usize::from(known[i])
            } else {
                shard_of(key, n)
            };
            let mut one = OwnedArgs::with_capacity(1, key.len());
            one.push(key);
            (shard, one)
        })
        .collect();
    let job = move |plan: &mut Plan, shard: usize, key: OwnedArgs| {
        plan.run(shard, move |env| {
            lcs_fetch(env.shard, db, key.args().get(0), touch)
        });
    };
    Ok(KeyedStep::boxed(
        groups,
        job,
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
    use crate::strings::tests::run_all;
    use crate::testutil::TestServer;

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
}
