//! MGET, MSET and MSETNX: one shard handler when the keys share a shard,
//! a coordinator when they do not (MGET and MSET in one step, each shard's
//! part prefetching its keys and, for MGET, encoding its replies there;
//! MSETNX in two: check every shard, then set on every shard only if no
//! key exists).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use ds::events as ev;
use resp::{Args, OwnedArgs, Reply};

use crate::coord::{outputs, Coordinator, JobOut, KeyedStep, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::multikey::{prefetch_keys, prefetch_keys_and_values, prefetch_values, split_by_shard};
use crate::table::shard_of;
use crate::util::as_str;

use super::{reply_str, set_bytes, ExpireOpt};

/// MGET key [key ...]: one reply per key, null for missing keys and for
/// keys of other types.
pub(super) fn mget(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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

pub(super) fn mget_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let (groups, group_of_key) = split_by_shard(args, 1, c.nshards(), c.key_shards);
    let db = c.client.db;
    let touch = !c.client.no_touch;
    let resp3 = c.client.resp3;
    let job = move |plan: &mut Plan, shard: usize, keys: OwnedArgs| {
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
    };
    Ok(KeyedStep::boxed(
        groups,
        job,
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
pub(super) fn mset(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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
/// the arguments and the pairs' order by shard, where a buffer per shard
/// cost two allocations each (an MSET of 10 keys over 32 shards touches
/// about 9). A job holds only this (one `Arc`: its closure is held inline
/// in its `JobFn`, no allocation per shard) and finds its pairs by its
/// shard's id.
struct SharedPairs {
    db: usize,
    /// key, value, key, value ...
    args: OwnedArgs,
    /// The pairs' indices, by shard, in command order within a shard.
    by_shard: Vec<u32>,
    /// The shard of each entry of `by_shard` (ascending).
    shards: Vec<u16>,
    /// Where the last job's pairs ended in `shards`: a hint for the next
    /// job's start (see [`SharedPairs::of_shard`]).
    next: AtomicU32,
}

impl SharedPairs {
    /// The indices of shard `shard`'s pairs, in command order.
    ///
    /// The jobs of a plan run in its order (ascending shards) when the
    /// transaction runs them in one go (every shard on one hub, most of
    /// all): each job's pairs then start where the previous job's ended
    /// (`next`), found in two compares, where a walk from the start cost
    /// about 66 instructions a job for an MSET of 10 keys over 32 shards
    /// (8.7 jobs). The hint is checked, so jobs run in any order, on any
    /// thread, still find their own pairs (by a walk or a search).
    fn of_shard(&self, shard: usize) -> &[u32] {
        let s = &self.shards;
        let at = |i: usize| usize::from(s[i]);
        let hint = self.next.load(Ordering::Relaxed) as usize;
        let lo = if hint < s.len() && at(hint) == shard && (hint == 0 || at(hint - 1) < shard) {
            hint
        } else if s.len() <= 16 {
            // A few pairs: one walk, cheaper than a binary search.
            let mut lo = 0;
            while lo < s.len() && at(lo) < shard {
                lo += 1;
            }
            lo
        } else {
            s.partition_point(|&x| usize::from(x) < shard)
        };
        let hi = if s.len() - lo <= 16 {
            let mut hi = lo;
            while hi < s.len() && at(hi) == shard {
                hi += 1;
            }
            hi
        } else {
            lo + s[lo..].partition_point(|&x| usize::from(x) <= shard)
        };
        self.next.store(hi as u32, Ordering::Relaxed);
        &self.by_shard[lo..hi]
    }
}

/// A job storing, on `shard`, that shard's pairs of `pairs`, in command
/// order (see [`store_pairs`]).
fn store_shared_pairs(plan: &mut Plan, shard: usize, pairs: Arc<SharedPairs>) {
    plan.run(shard, move |env| {
        let a = pairs.args.args();
        let db = pairs.db;
        let mine = pairs.of_shard(env.shard.id);
        // INVARIANT: a job runs on the shard it was issued for, which
        // holds at least one pair.
        debug_assert!(!mine.is_empty(), "an MSET job on a shard without pairs");
        let mine = || mine.iter().map(|&i| 2 * i as usize);
        prefetch_keys_and_values(env.shard, db, mine().map(|i| a.get(i)));
        for i in mine() {
            let (k, v) = (a.get(i), a.get(i + 1));
            touch_for_lfu(env.shard, db, k);
            env.shard.store_bytes(db, k, v, 0);
            env.shard.notify(db, ev::STRING, "set", k);
        }
    });
}

pub(super) fn mset_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    check_pairs(args, "mset")?;
    let db = c.client.db;
    let npairs = (args.len() - 1) / 2;
    let computed: Vec<u16>;
    let shard_of_pair: &[u16] = if c.key_shards.len() == npairs {
        c.key_shards
    } else {
        let n = c.nshards();
        computed = (0..npairs)
            .map(|i| shard_of(args.get(1 + 2 * i), n) as u16)
            .collect();
        &computed
    };
    let mut by_shard: Vec<u32> = (0..npairs as u32).collect();
    // Stable: a shard's pairs stay in command order (the last value of a
    // key given twice wins).
    by_shard.sort_by_key(|&i| shard_of_pair[i as usize]);
    let shards: Vec<u16> = by_shard
        .iter()
        .map(|&i| shard_of_pair[i as usize])
        .collect();
    let pairs = Arc::new(SharedPairs {
        db,
        args: args.skip(1).to_owned(),
        by_shard,
        shards,
        next: AtomicU32::new(0),
    });
    let mut plan = Plan::default();
    plan.jobs.reserve(npairs.min(c.nshards()));
    let mut start = 0;
    while start < npairs {
        let shard = pairs.shards[start];
        let len = pairs.shards[start..]
            .iter()
            .take_while(|&&s| s == shard)
            .count();
        store_shared_pairs(&mut plan, usize::from(shard), pairs.clone());
        start += len;
    }
    let coord = OneStep::boxed(plan, |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
        out.ok();
        Ok(())
    });
    Ok(crate::propagate::as_received(coord, args, db))
}

/// MSETNX key value [key value ...]: sets every pair and replies `:1` if
/// none of the keys exists; otherwise sets nothing and replies `:0`.
pub(super) fn msetnx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
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

pub(super) fn msetnx_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    check_pairs(args, "msetnx")?;
    let coord = Box::new(MsetNx {
        db: c.client.db,
        groups: pairs_by_shard(args, c.nshards(), c.key_shards),
        stage: 0,
    });
    Ok(crate::propagate::as_received(coord, args, c.client.db))
}

#[cfg(test)]
mod tests {
    use crate::strings::tests::run_all;

    /// A job's pairs by its shard, from the last job's end (jobs in
    /// ascending shard order), walked (few pairs) or searched (many):
    /// the same ranges whatever the order of the jobs, none for a shard
    /// without pairs.
    #[test]
    fn a_shards_pairs_are_found_in_any_order() {
        let ascending: Vec<usize> = (0..12).collect();
        let descending: Vec<usize> = (0..12).rev().collect();
        let mixed = vec![4, 0, 8, 1, 1, 11, 3, 2, 7, 5, 6, 10, 9];
        for n in [7usize, 40] {
            // Pair i on shard (i * 5) % 9, sorted as mset_multi sorts.
            let mut by_shard: Vec<u32> = (0..n as u32).collect();
            by_shard.sort_by_key(|&i| (i * 5) % 9);
            let shards: Vec<u16> = by_shard.iter().map(|&i| ((i * 5) % 9) as u16).collect();
            for order in [&ascending, &descending, &mixed] {
                let pairs = super::SharedPairs {
                    db: 0,
                    args: resp::OwnedArgs::from_slices(&[b"k", b"v"]),
                    by_shard: by_shard.clone(),
                    shards: shards.clone(),
                    next: Default::default(),
                };
                for &shard in order {
                    let want: Vec<u32> = by_shard
                        .iter()
                        .copied()
                        .filter(|&i| (i as usize * 5) % 9 == shard)
                        .collect();
                    assert_eq!(
                        pairs.of_shard(shard),
                        &want[..],
                        "{n} pairs, shard {shard}, order {order:?}"
                    );
                }
            }
        }
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
}
