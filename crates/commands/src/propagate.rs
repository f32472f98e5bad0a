//! What a command that changed the data is propagated as (the append-only
//! file today, replicas next): Redis 7.0's propagation rules, and where
//! each is implemented. Every handler emits its own records through
//! `ShardCtx::propagate` / `propagate_as_is` at the point where it changed
//! the data (Redis's `alsoPropagate` / `rewriteClientCommandVector`); a
//! handler that changed nothing emits nothing. Nothing decides what to
//! log from a command's name or its reply, and debug builds check that a
//! handler which moved the dirty counter said what it did
//! (`exec::check_said_so`). The rules, with the handler that applies each:
//!
//! * relative expiries become absolute: `EXPIRE`, `PEXPIRE`, `EXPIREAT`,
//!   `GETEX EX|PX|EXAT|PXAT` → `PEXPIREAT key ms`; `SET ... EX|PX|EXAT`,
//!   `SETEX`, `PSETEX` → `SET key value PXAT ms` (keys: `expire_generic`,
//!   strings: `set_generic`, `getex`); an expiry in the past (the key is
//!   gone) → `DEL key` (`UNLINK` under `lazyfree-lazy-expire`, not
//!   modelled); `GETEX PERSIST` → `PERSIST key`;
//! * `GETDEL` → `DEL key`; `GETSET` → `SET key value`; `SET ... GET`
//!   loses its `GET`;
//! * `GEOADD` → the `zadd key [options] score member ...` it runs as
//!   (geo: `geoadd`);
//! * random or computed effects are logged as their result: `SPOP` →
//!   `SREM key members` (`DEL key` when the set is gone; set: `spop`),
//!   `INCRBYFLOAT` → `SET key value KEEPTTL`, `HINCRBYFLOAT` → `HSET key
//!   field value`;
//! * pops that may block log their non-blocking form: `BLPOP`/`BRPOP` →
//!   `LPOP`/`RPOP key`, `BLMOVE` → `LMOVE`, `BRPOPLPUSH` → `RPOPLPUSH`,
//!   `BLMPOP`/`LMPOP` → `LPOP`/`RPOP key count`, `BZPOPMIN`/`BZPOPMAX` →
//!   `ZPOPMIN`/`ZPOPMAX key`, `BZMPOP`/`ZMPOP` → `ZPOPMIN`/`ZPOPMAX key
//!   count` (list, zset);
//! * `RESTORE key ttl ...` with a relative ttl gets the absolute one and
//!   `ABSTTL` (dump: `restore`);
//! * streams: `XADD *` → the explicit ID, `XREADGROUP` / `XCLAIM` /
//!   `XAUTOCLAIM` → `XCLAIM ... JUSTID` per entry and `XGROUP SETID`
//!   (stream);
//! * a script logs the commands it ran, in `MULTI`/`EXEC` when more than
//!   one (script: `eval`), never `EVAL` itself;
//! * a command whose keys span shards and that has a coordinator of its
//!   own logs itself as received once it finished ([`as_received`]); run
//!   on scratch copies (`scratch`), its handler's records are those it
//!   makes on the copies.
//!
//! Keys deleted by expiry or eviction are logged by the engine (`DEL key`,
//! before the command that found them).

use resp::Args;

/// A coordinated command that writes (MSET, DEL, RENAME, FLUSHALL, SWAPDB
/// ... across shards), wrapped by its builder: logged as received, once,
/// when it finished without an error; its shards' jobs record nothing of
/// their own but keys they found expired. Unlike Redis, such a command is
/// logged also when it changed nothing (a DEL of missing keys, an MSETNX,
/// RENAMENX or COPY that found its destination): its replay changes
/// nothing either. On one shard, the handler logs exactly what Redis does.
pub fn as_received(
    inner: Box<dyn crate::coord::Coordinator>,
    args: Args<'_>,
    db: usize,
) -> Box<dyn crate::coord::Coordinator> {
    Box::new(Logged {
        inner,
        args: args.to_owned(),
        db,
        issued: false,
        finished: false,
    })
}

/// See [`as_received`].
struct Logged {
    inner: Box<dyn crate::coord::Coordinator>,
    args: resp::OwnedArgs,
    db: usize,
    /// It issued jobs (they may have changed data).
    issued: bool,
    /// Its last step ran without an error and its record is not taken
    /// yet: made only when taken (`Coordinator::take_records`), which the
    /// runtime does only when something reads records (an AOF or a
    /// replica: an MSET of 10 keys spent ~2,300 instructions encoding a
    /// record nobody read).
    finished: bool,
}

impl crate::coord::Coordinator for Logged {
    fn step(
        &mut self,
        results: Vec<crate::coord::JobOut>,
        plan: &mut crate::coord::Plan,
        out: &mut resp::Reply,
        client: &mut crate::ctx::ClientState,
    ) -> Result<(), crate::error::CmdError> {
        // An error ends the command unlogged (`?`): every coordinator
        // wrapped here returns its errors rather than writing them.
        self.inner.step(results, plan, out, client)?;
        self.issued |= !plan.is_empty();
        self.finished = plan.is_empty();
        Ok(())
    }

    fn take_records(&mut self) -> Vec<engine::outbox::Chunk> {
        let mut v = self.inner.take_records();
        if std::mem::take(&mut self.finished) {
            let argv: Vec<&[u8]> = self.args.args().iter().collect();
            v.push(engine::outbox::chunk_of(self.db, &argv));
        }
        v
    }

    fn received_args(&self) -> Option<Args<'_>> {
        Some(self.args.args())
    }

    /// Kept to its end: a slowlog entry reads them here (no copy of its
    /// own at dispatch).
    fn kept_args(&self) -> Option<Args<'_>> {
        Some(self.args.args())
    }

    fn abort(&mut self, plan: &mut crate::coord::Plan) {
        self.inner.abort(plan)
    }

    /// Once it issued jobs, its record (written at the last step) must
    /// not be lost with its connection.
    fn must_finish(&self) -> bool {
        self.issued || self.inner.must_finish()
    }

    fn first_step_needs_locks(&self) -> bool {
        self.inner.first_step_needs_locks()
    }

    fn parked(&mut self) -> Option<crate::coord::Parked> {
        self.inner.parked()
    }

    fn tx_id(&self) -> Option<crate::tx::TxId> {
        self.inner.tx_id()
    }
}

#[cfg(test)]
#[path = "propagate_tests.rs"]
mod tests;
