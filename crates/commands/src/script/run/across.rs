//! One call naming keys of several shards (LMOVE a b, SMOVE, RENAME,
//! ZUNIONSTORE ... with `a` and `b` apart) from a script that holds every
//! shard under its transaction's locks (`script::every`): it runs as
//! such a command runs inside MULTI/EXEC, on copies of its keys
//! (`scratch`), each shard reached by a call (`in_place::Shards`) rather
//! than a job. Every shard is write-locked by the script, so nothing else
//! runs between the gather and the write-back: the call is as atomic as
//! on one shard.

use engine::Shard;
use resp::Args;

use super::Run;
use crate::ctx::ShardCtx;
use crate::table::Resolved;

/// Whether a call of keys on several shards can run on copies here: a
/// shard command whose keys are all of the script's database (COPY ... DB
/// writes another one, which the copies do not hold).
pub(super) fn can_run(r: Resolved, args: Args<'_>) -> bool {
    matches!(r.spec.exec, crate::table::Exec::Shard(..))
        && !(r.spec.name == "copy" && args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"db")))
}

/// Runs `call` (the command, on a shard) on copies of the keys of `args`
/// at `positions` (database `db`), gathered from their shards and written
/// back; returns what the copies left for the home shard
/// ([`Run::after_across`]).
pub(super) fn run(
    ctx: &mut ShardCtx<'_>,
    db: usize,
    args: Args<'_>,
    positions: &[usize],
    call: impl FnOnce(&mut Shard),
) -> crate::scratch::Across {
    let keys: Vec<&[u8]> = positions.iter().map(|&p| args.get(p)).collect();
    let nshards = ctx.nshards;
    let mut call = Some(call);
    crate::scratch::across(
        &keys,
        db,
        nshards,
        &mut |s, f| super::on_shard(ctx.shard, ctx.in_place.as_deref_mut(), s, |sh| f(sh)),
        &mut |sh| {
            if let Some(c) = call.take() {
                c(sh)
            }
        },
    )
}

impl Run<'_, '_> {
    /// After [`run`]: what the gather left on each shard (expired keys'
    /// events and records) joins the home shard's, then the call's own
    /// events and records, in that order; the copies' keyspace hits and
    /// misses count on the home shard.
    pub(super) fn after_across(&mut self, a: crate::scratch::Across) {
        for &s in &a.shards {
            self.after_call(s);
        }
        let home = &mut *self.ctx.shard;
        home.stats.keyspace_hits += a.hits;
        home.stats.keyspace_misses += a.misses;
        if !a.events.is_empty() {
            home.emit_events(a.events);
        }
        if let Some(c) = a.records {
            home.outbox.append(c);
        }
    }
}
