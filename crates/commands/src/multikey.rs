//! Helpers of multi-key commands: splitting keys by shard, and prefetching
//! a shard's keys before looking them up one by one.

use engine::{Str, StrRef, StrView, ValueRef};
use resp::{Args, OwnedArgs};

use crate::table::shard_of;

/// The keys (`stride` 1) or key-value pairs (`stride` 2) of a multi-key
/// command from argument 1 on, split by shard: one buffer per shard
/// (ascending shard order) holding that shard's arguments in command
/// order, and for each key the index of its group. Every key's shard is
/// computed once, and a group costs two allocations however many keys it
/// holds.
/// `known`: the keys' shards if dispatch computed them
/// ([`ConnCtx::key_shards`]).
pub(crate) fn split_by_shard(
    args: Args<'_>,
    stride: usize,
    nshards: usize,
    known: &[u16],
) -> (Vec<(usize, OwnedArgs)>, Vec<u16>) {
    let nkeys = (args.len() - 1) / stride;
    let mut shard_of_key: Vec<u16> = if known.len() == nkeys {
        known.to_vec()
    } else {
        (0..nkeys)
            .map(|i| shard_of(args.get(1 + i * stride), nshards) as u16)
            .collect()
    };
    // (shard, arguments, bytes) of each shard involved, then in shard order.
    let mut sizes: Vec<(usize, usize, usize)> = Vec::with_capacity(nshards.min(nkeys));
    for (i, &ks) in shard_of_key.iter().enumerate() {
        let bytes: usize = (0..stride)
            .map(|j| args.get(1 + i * stride + j).len())
            .sum();
        match sizes.iter_mut().find(|g| g.0 == ks as usize) {
            Some(g) => {
                g.1 += stride;
                g.2 += bytes;
            }
            None => sizes.push((ks as usize, stride, bytes)),
        }
    }
    sizes.sort_unstable_by_key(|g| g.0);
    let mut groups: Vec<(usize, OwnedArgs)> = sizes
        .into_iter()
        .map(|(s, n, bytes)| (s, OwnedArgs::with_capacity(n, bytes)))
        .collect();
    for (i, ks) in shard_of_key.iter_mut().enumerate() {
        // INVARIANT: every key's shard has a group.
        let g = groups
            .iter()
            .position(|(s, _)| *s == *ks as usize)
            .expect("group");
        for j in 0..stride {
            groups[g].1.push(args.get(1 + i * stride + j));
        }
        *ks = g as u16;
    }
    (groups, shard_of_key)
}

/// Prefetches the table slots of every `stride`-th argument of `args`
/// (the keys) in two stages (`Db::prefetch`), so a shard's part of a
/// multi-key command pays its keys' cache misses together rather than one
/// after another: the dictionary walk was about 30% of server cycles for
/// MGET of 10 random keys across shards.
pub(crate) fn prefetch_keys(shard: &engine::Shard, db: usize, args: Args<'_>, stride: usize) {
    let Some(d) = shard.dbs.get(db) else { return };
    if args.len() < 2 * stride {
        return;
    }
    for stage in 0..2 {
        for i in (0..args.len()).step_by(stride) {
            d.prefetch(args.get(i), stage);
        }
    }
}

/// A third stage, with the slots on their way: finds the entry of every
/// `stride`-th argument (a side-effect-free look; the real lookups follow)
/// and prefetches its string's bytes and the allocator's header in front
/// of them. MGET copies those bytes into its reply, and MSET frees them
/// when it overwrites the key: both read cold memory, which once the
/// slots were prefetched was the largest remaining cost (MGET's copy
/// about 20% of cycles, MSET's free 15%).
pub(crate) fn prefetch_values(shard: &engine::Shard, db: usize, args: Args<'_>, stride: usize) {
    let Some(d) = shard.dbs.get(db) else { return };
    if args.len() < 2 * stride {
        return;
    }
    for i in (0..args.len()).step_by(stride) {
        let bytes: &[u8] = match d.get(args.get(i)).map(|e| e.value()) {
            Some(ValueRef::Str(StrRef::Str(Str::Inline(_)))) => continue,
            Some(ValueRef::Str(s)) => match s.view() {
                StrView::Bytes(b) => b,
                StrView::Int(_) => continue,
            },
            _ => continue,
        };
        let p = bytes.as_ptr();
        ds::prefetch_ptr(p.wrapping_sub(8));
        ds::prefetch_ptr(p);
    }
}

/// [`prefetch_keys`] then [`prefetch_values`] for the keys `keys` yields
/// (a shard's share of a command's keys, picked out of arguments that all
/// shards' jobs share), when it yields two or more.
pub(crate) fn prefetch_keys_and_values<'a, I>(shard: &engine::Shard, db: usize, keys: I)
where
    I: Iterator<Item = &'a [u8]> + Clone,
{
    let Some(d) = shard.dbs.get(db) else { return };
    if keys.clone().nth(1).is_none() {
        return;
    }
    for stage in 0..2 {
        for k in keys.clone() {
            d.prefetch(k, stage);
        }
    }
    for k in keys {
        let bytes: &[u8] = match d.get(k).map(|e| e.value()) {
            Some(ValueRef::Str(StrRef::Str(Str::Inline(_)))) => continue,
            Some(ValueRef::Str(s)) => match s.view() {
                StrView::Bytes(b) => b,
                StrView::Int(_) => continue,
            },
            _ => continue,
        };
        let p = bytes.as_ptr();
        ds::prefetch_ptr(p.wrapping_sub(8));
        ds::prefetch_ptr(p);
    }
}
