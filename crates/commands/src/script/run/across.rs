//! One call naming keys of several shards (LMOVE a b, SMOVE, RENAME,
//! ZUNIONSTORE ... with `a` and `b` apart) from a script that holds every
//! shard under its transaction's locks (`script::every`), or in place
//! with each of the call's shards pinned once the run is final (a
//! keyspace call pinned them all): it runs as such a command runs inside
//! MULTI/EXEC, on copies of its keys (`scratch`), each shard reached by a
//! call (`in_place::Shards`) rather than a job. Nothing else runs on
//! those shards between the gather and the write-back (write-locked by
//! the script, or pinned): the call is as atomic as on one shard.
//!
//! Two calls need more than one database's copies: COPY ... DB n (its
//! destination in another database) runs as a client's COPY across
//! shards does, its source read on its shard and the copy stored on the
//! destination's, each by a call ([`Run::copy_apart`]); SORT with BY or
//! GET keys of other shards runs on copies of its keys and the pattern
//! keys it names (`Run::call`'s SORT arm, [`run_keys`]). On gathered
//! copies (a run over more keys) a call of another database (COPY ... DB,
//! MOVE) runs again holding every shard ([`other_db`]).

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

/// Whether a call with keys on several shards runs apart from the copies'
/// path of [`can_run`] ([`Run::copy_apart`], SORT's pattern keys).
pub(super) fn runs_apart(r: Resolved, args: Args<'_>) -> bool {
    matches!(r.spec.name, "sort" | "sort_ro") || (r.spec.name == "copy" && !can_run(r, args))
}

/// Whether a call names a database other than `db` (COPY ... DB n, MOVE
/// key n), which gathered copies do not hold. A bad index is not: the
/// command's own error, wherever it runs.
pub(super) fn other_db(r: Resolved, args: Args<'_>, db: usize, databases: usize) -> bool {
    let other = |a: &[u8]| crate::util::parse_db_index(a, databases).is_ok_and(|n| n != db);
    match r.spec.name {
        "move" => args.len() == 3 && other(args.get(2)),
        "copy" => (3..args.len().saturating_sub(1))
            .any(|i| args.get(i).eq_ignore_ascii_case(b"db") && other(args.get(i + 1))),
        _ => false,
    }
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
    run_keys(ctx, db, &keys, call)
}

/// [`run`] over `keys`.
pub(super) fn run_keys(
    ctx: &mut ShardCtx<'_>,
    db: usize,
    keys: &[&[u8]],
    call: impl FnOnce(&mut Shard),
) -> crate::scratch::Across {
    let nshards = ctx.nshards;
    let mut call = Some(call);
    crate::scratch::across(
        keys,
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
        let keys: Vec<&[u8]> = positions.iter().map(|&p| args.get(p)).collect();
        self.holds_keys(&keys)
    }

    /// [`Run::holds_across`] for `keys`.
    pub(super) fn holds_keys(&mut self, keys: &[&[u8]]) -> bool {
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
        keys.iter().all(|k| {
            let s = crate::table::shard_of(k, n);
            s == home || shards.hold(s)
        })
    }

    /// COPY src dst DB n, `src` and `dst` on two shards the run holds
    /// ([`Run::holds_across`]): the reply or error in `out`, recorded as
    /// the command's call, and as received in the home shard's records.
    pub(super) fn copy_apart(&mut self, r: Resolved, args: Args<'_>, out: &mut resp::Reply) {
        let started = std::time::Instant::now();
        let (db, touch) = (self.db, !self.ctx.no_touch);
        let ctx = &mut *self.ctx;
        let (databases, nshards) = (ctx.databases, ctx.nshards);
        let res = crate::keys::copy_across(args, db, databases, touch, nshards, &mut |s, f| {
            super::on_shard(ctx.shard, ctx.in_place.as_deref_mut(), s, |sh| f(sh))
        });
        for s in 0..nshards {
            self.after_call(s);
        }
        self.dirty = true;
        let failed = match res {
            Ok(copied) => {
                out.int(copied as i64);
                if let Some(t) = super::repl_target(self.repl).filter(|_| copied) {
                    let argv: Vec<&[u8]> = args.iter().collect();
                    let outbox = &mut self.ctx.shard.outbox;
                    outbox.target = t;
                    outbox.record(db, &argv);
                    outbox.target = engine::outbox::Target::All;
                }
                false
            }
            Err(e) => {
                self.error_reply(out, &e);
                true
            }
        };
        self.record(r, args, started, failed);
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

    /// SORT / SORT_RO (`args`, `call`, its keys at `positions`) on copies of its
    /// keys and every key its patterns name, when the run holds them all
    /// (`across`: its keys are of several shards held); `missing`: the
    /// pattern keys its shard lacked. `None` (nothing ran) if it does not
    /// hold them: the caller runs again over them, or refuses it.
    pub(super) fn sort_across(
        &mut self,
        args: Args<'_>,
        call: crate::sort::ScriptCall,
        positions: &[usize],
        missing: &[Vec<u8>],
        across: bool,
        out: &mut resp::Reply,
    ) -> Option<crate::sort::FromScript> {
        let mut keys: Vec<&[u8]> = positions.iter().map(|&p| args.get(p)).collect();
        keys.extend(missing.iter().map(|k| k.as_slice()));
        if !across && !self.holds_keys(&keys) {
            return None;
        }
        let (db, touch) = (self.db, !self.ctx.no_touch);
        // Every key its patterns name (those of the source's shard too),
        // read on the source's shard.
        let src = crate::table::shard_of(args.get(1), self.ctx.nshards);
        let ctx = &mut *self.ctx;
        let named = super::on_shard(ctx.shard, ctx.in_place.as_deref_mut(), src, |sh| {
            crate::sort::pattern_keys(sh, db, args, call)
        });
        let named = named.unwrap_or_default();
        let mut keys: Vec<&[u8]> = positions.iter().map(|&p| args.get(p)).collect();
        keys.extend(named.iter().map(|k| k.as_slice()));
        let mut res = None;
        let a = run_keys(self.ctx, db, &keys, |sh| {
            res = Some(crate::sort::from_script(
                sh,
                db,
                touch,
                args,
                call,
                &|_| true,
                out,
            ));
        });
        self.after_across(a);
        // INVARIANT: `run_keys` runs its call once.
        Some(res.unwrap_or(Ok(Ok(()))))
    }
}
