//! Scripts across shards run in place: on the real shards, when every
//! shard they need is co-hosted on the connection's thread and free.
//!
//! # Why
//!
//! A script whose declared keys span shards otherwise runs on copies
//! (`crate::scratch` under `wide`'s transaction): write locks on every
//! declared key, a gather of their entries, the script on the copies, a
//! write-back of what changed, and the locks released. For an 8-key INCR
//! script over 2 shards that was 2.2x Redis's instructions per call: the
//! copies, the gather and write-back jobs, and building and dropping the
//! coordinators (callgrind, bench/scripting_cg.sh). The parent module's
//! objection to running `redis.call` on the owning shard (a Lua call
//! cannot wait for another thread) does not hold when the owner runs on
//! this very thread: a co-hosted shard is reached by a call
//! (`server::worker::cohost`).
//!
//! # How, and why it is atomic
//!
//! The runtime (`server::worker::in_place`) takes this path only when:
//! the connection has nothing outstanding (every earlier request is back,
//! so nothing of it can be overtaken); the caller does not track keys and
//! no `maxmemory` is set; and the home shard and the shard of every
//! declared key are free: no lock held or asked for, nothing deferred
//! behind one, no AOF or replica stream (their records of a multi-shard
//! script go out as one MULTI/EXEC block, which the locked path
//! assembles), each co-hosted shard *pinned* ([`Shards::hold`]: a hub
//! keeps its seat until the script ends, so neither the hub nor the
//! watchdog runs it meanwhile). Then the script handler runs once, on the
//! home shard, and each `redis.call` runs on the shard of its keys, by a
//! call ([`Shards::with_shard`]). The thread runs nothing else until the
//! script returns, and no other thread can reach a pinned shard: the
//! script is atomic and isolated exactly as a one-shard script, as one
//! thread runs it in Redis, with no lock taken.
//!
//! Keys it did not declare: a key of a shard it holds (the home shard, a
//! declared key's shard, or one more co-hosted shard that `hold` can pin
//! and finds free: pinning a shard before its first use is two-phase
//! locking, so isolation holds) runs in place like any other. A call the
//! script cannot run here (a key of a shard it cannot hold, or keys of
//! two shards in one call, as `LMOVE a b` with `a` and `b` apart) abandons
//! the run exactly as a one-shard script abandons it (`wide`): its writes
//! are taken back on every shard it wrote (`run::Undo`, one per shard),
//! and it runs again from the start on copies under locks over its keys
//! and those found (or, for a keyspace command, INFO or another
//! database's key, under locks on every shard: `every`). Where that is
//! impossible (it already wrote what cannot be taken back, or a keyspace
//! call pinned every shard), keys of two shards it holds (or can pin
//! now) run on copies of them (`run::across`, nothing else runs on a
//! pinned shard); otherwise the call is refused with the error a
//! one-shard script gets.
//!
//! # Effects, identical to the copies' path
//!
//! * Keyspace events: each call's events on another shard move to the
//!   home shard's outbox right after the call, so one shard publishes the
//!   script's events in the order they happened, as `scratch` re-emits
//!   them from one shard.
//! * Tracking: each shard's changes are tagged with the script's
//!   connection after the script (the runtime's epilogue, as for a job);
//!   a caller that tracks keys takes the copies' path.
//! * WATCH and blocked clients: the writes go through the same `Db` calls
//!   on the real shards; clients blocked on a key the script filled are
//!   served after the script, on each shard.
//! * Records: none exist here (no AOF or replica on these shards).
//! * A script past `busy-reply-threshold` is taken back and run again on
//!   copies if it still can be (`busy::HookState::in_place`): there it
//!   holds its keys only, and the watchdog gives the other loops back to
//!   their threads, so their clients get `-BUSY` or are served, and can
//!   send SCRIPT KILL. One that cannot (it wrote what cannot be taken
//!   back, or published with no room to hold the message) stays, published with its caller's loop and every
//!   loop it pinned (`busy::lend_pinned`): the pinned loops' clients are
//!   served from its hook as its own loop's are (`-BUSY`, SCRIPT KILL,
//!   FUNCTION KILL, SHUTDOWN NOSAVE), and their shards' commands get
//!   `-BUSY` on every thread.
//!
//! Cost: a thread-local read and a seat `try_lock` per shard held, one
//! call per `redis.call` on another shard; no copy, no lock table, no
//! coordinator.

use engine::Shard;
use resp::{Args, Reply};

use crate::ctx::{BlockOn, ThreadStats};
use crate::exec::ShardCall;
use crate::table::{Resolved, ShardHandler};

/// The co-hosted shards a script run in place may reach (besides its home
/// shard, which it runs on), implemented by the runtime.
pub trait Shards {
    /// Whether the script holds shard `s` (pinning it now if it can and
    /// the shard is free: nothing else runs on it until the script ends).
    /// Never called with the home shard.
    fn hold(&mut self, s: usize) -> bool;
    /// Runs `f` on held shard `s`'s data.
    fn with_shard(&mut self, s: usize, f: &mut dyn FnMut(&mut Shard));
    /// Every shard held under the script's transaction's locks, reached
    /// on its own thread (`script::every`): the run is never taken back.
    fn every(&self) -> bool {
        false
    }
    /// Inside a transaction whose locks hold whole shards and whose run
    /// may still be taken back and run again over more keys
    /// (`script::lend`): a run that names a key of a shard it does not
    /// hold is abandoned as outside transactions.
    fn may_widen(&self) -> bool {
        false
    }
    /// After a call on another shard: what that shard owes the home one
    /// (its records, see `script::every`).
    fn settle(&mut self, _home: &mut Shard) {}
    /// Runs `f` with the statistics of the loop that runs held shard `s`
    /// (not the home one), for INFO's per-thread sections; not run where
    /// they cannot be reached.
    fn with_stats(&mut self, _s: usize, _f: &mut dyn FnMut(&ThreadStats)) {}
    /// Runs `f` with the connections of the loop that runs held shard `s`
    /// (not the home one), for a script's SLOWLOG GET and MEMORY STATS;
    /// not run where they cannot be reached.
    fn with_clients(&mut self, _s: usize, _f: &mut dyn FnMut(&dyn crate::coord::ClientRegistry)) {}
    /// The home loop's statistics, where the script's own are not them (a
    /// transaction's job: `script::every`).
    fn home_stats(&self) -> Option<&ThreadStats> {
        None
    }
}

/// Runs script command `handler` (EVAL family, FCALL) on `home` with its
/// calls reaching `shards` (see the module docs), its connection lent
/// (`sender`: out of its slot on this thread meanwhile, see
/// `ctx::Sender`); as `exec::run_shard` otherwise. A run that asks for
/// more keys (`BlockOn::widen`) replied nothing and left nothing changed:
/// the runtime runs it again on copies.
#[allow(clippy::too_many_arguments)]
pub fn run(
    r: Resolved,
    handler: ShardHandler,
    args: Args<'_>,
    home: &mut Shard,
    call: ShardCall,
    out: &mut Reply,
    stats: &mut ThreadStats,
    (shards, sender): (&mut dyn Shards, crate::ctx::Sender<'_>),
) -> Option<BlockOn> {
    let lent = (Some(shards), Some(sender));
    crate::exec::run_shard_with(r, handler, args, home, call, out, stats, None, lent)
}

/// Runs `f` on shard `s`: `ctx_shard` if it is that one, else through
/// `shards`.
///
/// INVARIANT: a shard other than the home one is reached only once
/// `hold` said yes, and a held shard lends until the script ends.
pub(crate) fn on_shard<R>(
    home: &mut Shard,
    shards: Option<&mut (dyn Shards + '_)>,
    s: usize,
    f: impl FnOnce(&mut Shard) -> R,
) -> R {
    if s == home.id {
        return f(home);
    }
    let shards = shards.expect("INVARIANT: in place, another shard");
    let (mut f, mut r) = (Some(f), None);
    // One clock for the whole script, as Redis freezes time for a script
    // (expiry judged at its start): the home shard's, which does not tick
    // while the script runs. The other shard's loop may have ticked since
    // (a call posted to its thread runs in its next turn): its own clock
    // is put back after the call.
    let now = home.now_ms;
    shards.with_shard(s, &mut |sh| {
        if let Some(f) = f.take() {
            let own = std::mem::replace(&mut sh.now_ms, now);
            r = Some(f(sh));
            sh.now_ms = own;
        }
    });
    r.expect("INVARIANT: a held shard lends")
}
