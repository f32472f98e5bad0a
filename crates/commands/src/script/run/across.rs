//! One call naming keys of several shards (LMOVE a b, SMOVE, RENAME,
//! ZUNIONSTORE ... with `a` and `b` apart) from a script that holds every
//! shard under its transaction's locks (`script::every`), or in place
//! with each of the call's shards pinned once the run is final (a
//! keyspace call pinned them all): it runs as such a command runs inside
//! MULTI/EXEC, on copies of its keys (`scratch`), each shard reached by a
//! call (`in_place::Shards`) rather than a job. Nothing else runs on
//! those shards between the gather and the write-back (write-locked by
//! the script, or pinned): the call is as atomic as on one shard.

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
    /// Whether a call of keys on several shards (`args` at `positions`)
    /// runs on copies here: the script holds every shard under locks
    /// (`every`), or it runs in place, can no longer be taken back (a
    /// keyspace call pinned every shard, or it wrote what no undo keeps),
    /// and holds (pins now) each shard of the call. A run that can still
    /// be taken back runs again on copies instead (`in_place`), where
    /// its writes so far are undone with it.
    pub(super) fn holds_across(&mut self, args: Args<'_>, positions: &[usize]) -> bool {
        let Some(shards) = self.ctx.in_place.as_deref_mut() else {
            return false;
        };
        if shards.every() {
            return true;
        }
        if self.widen_ok && !self.wrote && !self.pinned {
            return false;
        }
        let (n, home) = (self.ctx.nshards, self.ctx.shard.id);
        positions.iter().all(|&p| {
            let s = crate::table::shard_of(args.get(p), n);
            s == home || shards.hold(s)
        })
    }

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
        // The records stand for the write-back's changes, here as well as
        // on the other shards (the debug check of `exec::run_shard`).
        #[cfg(debug_assertions)]
        {
            home.outbox.emitted += a.emitted;
        }
    }
}
