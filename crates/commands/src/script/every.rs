//! Scripts that need every shard (KEYS, SCAN, DBSIZE, RANDOMKEY, FLUSHDB,
//! FLUSHALL, SWAPDB, a whole INFO) when the shards are apart: on other
//! threads, or co-hosted but not free.
//!
//! # Why
//!
//! A script that holds every shard runs in place (`in_place`): every
//! shard co-hosted on its thread and free, each `redis.call` reaching its
//! shard by a call. With `shard-consolidation no`, or the shards spread
//! under load, or one of them busy for a moment, that path declines, and
//! such a script was refused. Redis runs it, and real applications need
//! it: "delete by pattern" (KEYS, then DEL in the same script), queue
//! cleanup scripts that SCAN.
//!
//! # How
//!
//! The transaction layer write-locks *every shard whole*, as a client's
//! FLUSHALL is locked (`tx`, one round, ascending order after a refusal:
//! its deadlock and starvation arguments hold unchanged). Once all are
//! held, one job on the home shard runs the script on the real data
//! (not copies), with `in_place` reaching the other shards through
//! [`Reach`]: each call on shard `s` runs on the thread that runs `s`,
//! by a call when `s` is co-hosted and lendable, else posted to `s` and
//! run at the top of its next turn while the script's thread waits.
//! Nothing else runs on any shard meanwhile: plain commands and other
//! transactions are deferred behind the whole-shard write locks, the
//! active expiry cycle skips a shard that holds a lock while such a
//! script runs (`busy::scripts_under_locks`), each call judges expiry by
//! the home shard's clock, which does not tick meanwhile (the time is
//! frozen for the script, as in Redis: `in_place::on_shard`), and the home
//! shard's own thread is inside the job. So the script is atomic and
//! isolated as in Redis, without copying a value. The coordinator and its
//! job are `real`'s (`Strategy::Post`), shared with `lend`'s runs.
//!
//! The lock request goes up front: the first run (wherever its declared
//! keys put it) is abandoned at its first keyspace call if it could not
//! hold every shard, its writes taken back (`wide`), and the script runs
//! again here from the start. After a write that cannot be taken back it
//! is refused as before (`run::EVERY_SHARD`).
//!
//! Rejected: *borrowing* every shard's loop onto the script's thread (the
//! hub machinery, then the in-place path as it is). Consolidation hands
//! workers only to a lower thread with room (`MAX_LOOPS`), never to one
//! that is itself hosted, and a hub gives its adopted workers back before
//! its own can move: gathering every loop on an arbitrary thread would
//! need a second hand-off protocol beside the policy's, with its own
//! waits (a worker in a long turn elsewhere cannot be handed over), and
//! the in-place path still needs every shard free, which locks, queued
//! transactions or deferred commands keep them from being under load,
//! with nothing to queue behind. Locks queue fairly, and the transaction
//! layer already proves them free of deadlock; the calls across threads
//! cost a wake-up each, paid only by these scripts.
//!
//! # Why it cannot deadlock
//!
//! The script's thread waits, inside the job, only for a posted call to
//! run on shard `s`'s thread. That thread is in one of these states:
//! - running its loop (alone or as a hub's turn): a posted call sets a
//!   flag and rings `s`'s doorbell, so its next turn (a hub wakes on any
//!   of its loops' doorbells) runs the call before anything else;
//! - inside a long command on another shard's loop (a hub): no command
//!   that runs on a shard's data can be running, since every shard is
//!   write-locked by this script (a lock is granted only to a shard with
//!   no script running: a busy script's passes keep lock requests for its
//!   shard, see `busy`), and no other script can wait for a thread this
//!   way (it would need every shard's lock, which this one holds); what
//!   is left (a connection command such as DEBUG SLEEP) ends by itself;
//! - co-hosted with the script: `s` is reached by a call, never posted
//!   (the waiting loop tries the call again at every tick, so a seat the
//!   watchdog held for a moment is reached the next one);
//! - moving (consolidation): a worker given back goes to its own thread,
//!   which runs it at once; a worker handed to a hub runs there from the
//!   hub's next round. The one case that needs more: `s` handed to the
//!   very thread that waits (not adopted yet, so not lendable). A hub
//!   takes no hand-off once its turn has lasted `STUCK` (5 ms), and the
//!   watchdog gives back a worker left in a hub's inbox past
//!   `STUCK_ANYWAY` (100 ms); then its own thread runs it;
//! - stopped at the shutdown gate (a SHUTDOWN while the script runs: the
//!   other workers park, this one arrives only when the script ends): its
//!   shard waits there untouched, and the call runs on it from the
//!   script's thread (`Gate::with_parked`); SHUTDOWN NOSAVE stops the
//!   script at its next hook call, as any busy script.
//!
//! # Cost
//!
//! Scripts that never call these commands pay nothing (the first-run
//! check is the one `run` made before). Each worker's turn reads one flag
//! (`Reach::serve`). A script here pays a lock round over all `N` shards,
//! and per call on another thread's shard a doorbell and a wake-up (tens
//! of microseconds): KEYS over `N` shards is `N - 1` of those. They are
//! Redis's O(N) commands anyway.
//!
//! # Who runs here
//!
//! A run that does not hold every shard and calls a keyspace command,
//! INFO (its keyspace is every shard's), or a key of another database on
//! a shard it does not hold, is taken back and runs again here, if it can
//! (nothing written that cannot be taken back; what it published is held
//! until the run completes and dropped with it, `traces::hold_publish`),
//! unless the shards it needs are co-hosted and free (then in place, as
//! before). Inside MULTI/EXEC a script cannot run again: it reaches every
//! shard only when the block's locks cover them all, which `multi` takes
//! (whole-shard write locks, each script alone in its segment, run on
//! the home shard through [`apart`]) for a block that queues a keyspace
//! command or a script that may call one (`script::needs_every`: its
//! code does not prove that every command it calls is named by a literal
//! that is not keyspace-wide, `script::names`, or a run of it called one,
//! the `HopMark`'s every-shard bit).
//!
//! A call here naming keys of several shards (LMOVE a b, SMOVE, RENAME,
//! ZUNIONSTORE ..., `a` and `b` apart) runs as such a command runs inside
//! MULTI/EXEC, on copies of its keys gathered from their shards and
//! written back, each shard reached by a call (`run::across`,
//! `scratch::across`): every shard is write-locked by the script, so
//! nothing else runs in between.
//!
//! # What differs from Redis
//!
//! - Past `busy-reply-threshold` the script is published with every
//!   shard (`busy::under_locks`), not taken back: as in Redis every
//!   command gets `-BUSY` (what already waited behind the locks too) and
//!   SCRIPT KILL, FUNCTION KILL and SHUTDOWN NOSAVE reach it, from any
//!   thread, its own included (its job lends its loop to its hook, also
//!   served while it waits for a call posted to another shard). What
//!   its own loop's connections sent before it was published and that
//!   waits for a lock of its shard waits for its end.
//! - Inside MULTI/EXEC, a script whose code builds a command's name at
//!   run time (from ARGV, by string functions) makes EXEC lock every shard
//!   for its block even if it never calls a keyspace command (Redis stops
//!   everything for any script). Outside, a run that made a change that cannot be taken back
//!   (a value over the take-back bounds, MOVE, COPY ... DB) before its
//!   first keyspace call is refused, as is one that published with no
//!   room left to hold the message (`traces::HELD_MAX` traces held).
//! - A subscriber gets a script's messages in order and its keyspace
//!   events in order, but not interleaved as Redis interleaves them: the
//!   messages go during or right after the run (held while it may be
//!   taken back), the events when the runtime publishes them after it.
//!
//! # Effects
//!
//! - Records (AOF, replicas): those a call makes on another shard move to
//!   the home shard's outbox right after the call (`real::Real`'s `settle`), so
//!   the script's records are one block in the order they were made,
//!   which the transaction writes as one MULTI/EXEC (as Redis 7.0).
//! - A call naming keys of several shards runs on copies of them (see
//!   `run::across`); COPY ... DB n by a call on each of its two shards,
//!   SORT on copies of its keys and the keys its BY / GET patterns name.
//! - Keyspace events move to the home shard after each call, as in place
//!   (`run::Run::after_call`); a call on copies across shards leaves the
//!   gather's (expired keys) first, then its own (`run::across`).
//! - Blocked clients served, dirty counts and tracking tags: each shard's
//!   own turn handles them after the call (its drain serves keys made
//!   ready; invalidations go out untagged with the script's connection).

use engine::Shard;

use crate::coord::ClientRegistry as Clients;
use crate::ctx::ThreadStats;

/// Reaches any shard's data from a job on another (implemented by the
/// runtime, set once in `Ops::reach`).
pub trait Reach: Send + Sync {
    /// Runs `f` on shard `s`'s data, with the statistics of the loop that
    /// runs it, and returns once it ran; called by a job on shard `home`
    /// whose transaction holds every shard. `f` runs on whichever thread
    /// runs `s` (the caller waits meanwhile), so it may borrow the
    /// caller's stack.
    /// Its connections are given too (none where they cannot be reached:
    /// a shard parked at the shutdown gate).
    fn call(
        &self,
        home: usize,
        s: usize,
        f: &mut dyn FnMut(&mut Shard, &ThreadStats, &dyn Clients),
    );
    /// At the top of shard `s`'s turn: runs a call posted for it, or
    /// makes a lend asked for ([`Reach::lend`]) and waits until it is
    /// given back. Returns the transaction whose locks on `s` the thread
    /// must release now: the lend was given back at its script's end
    /// ([`Reach::give_back`]).
    fn serve(
        &self,
        s: usize,
        shard: &mut Shard,
        stats: &ThreadStats,
        clients: &dyn Clients,
    ) -> Option<u64>;
    /// Raised while a call waits for shard `s` (a worker reads it once per
    /// turn before calling [`Reach::serve`]).
    fn posted(&self, s: usize) -> &std::sync::atomic::AtomicBool;
    /// Shards `shards` (never `home`) lent whole to the thread of a job on
    /// shard `home` whose transaction write-locks them all whole
    /// (`script::lend`), for transaction `tx`: the thread running each
    /// stops at the top of its next turn and waits there until
    /// [`Reach::give_back`] (one lent at its lock's grant,
    /// [`Reach::lend_at_grant`], is taken as it is). All or none: `false`
    /// (nothing lent) where one cannot be made or is not needed
    /// (co-hosted with `home`, stopped at the shutdown gate, or not made
    /// within a bound: see `worker::reach`); then [`Reach::call`]
    /// reaches them. Else `leases[i]` is `shards[i]`'s.
    fn lend(&self, _home: usize, _tx: u64, _shards: &[usize], _leases: &mut Vec<Lease>) -> bool {
        false
    }
    /// Ends the lend of shard `s` ([`Reach::lend`]): its thread goes on
    /// with its turn. The lease must not be used after. `done`: the
    /// script ended (nothing more runs on `s` for its transaction
    /// `tx`, as [`Reach::lend`] named it). True if `s`'s thread then
    /// releases the transaction's locks on `s` itself (see
    /// `script::lend`): its transaction sends it no release.
    fn give_back(&self, _s: usize, _done: bool) -> bool {
        false
    }
    /// On shard `s`'s thread, granting a lend round's last request
    /// (`tx::LockReq::lend`), before the grant goes out: lends `s` to the
    /// job of transaction `tx` on its home thread, which takes it in
    /// [`Reach::lend`] without asking (see `script::lend`, "Lent at the
    /// grant"). True if made: the thread then sends the grant and waits in
    /// [`Reach::hold_lent`].
    fn lend_at_grant(
        &self,
        _s: usize,
        _tx: u64,
        _shard: &mut Shard,
        _stats: &ThreadStats,
        _clients: &dyn Clients,
    ) -> bool {
        false
    }
    /// After [`Reach::lend_at_grant`]: waits until the job gives `s` back,
    /// or withdraws the lend if the job does not take it within a bound
    /// (it then asks for a lend as if none had been made). True if given
    /// back done ([`Reach::give_back`]): the thread releases the
    /// transaction's locks on `s` now.
    fn hold_lent(&self, _s: usize) -> bool {
        false
    }
    /// Gives back a lend of `s` made at a grant that the job will not take
    /// (it declined the real shards); nothing if none is waiting.
    fn decline(&self, _s: usize) {}
}

/// A shard lent whole to another thread ([`Reach::lend`]): its data, the
/// statistics and connections of the loop that runs it, valid until
/// [`Reach::give_back`] (its thread waits meanwhile, touching none of
/// them).
#[derive(Clone, Copy)]
pub struct Lease {
    shard: std::ptr::NonNull<Shard>,
    stats: std::ptr::NonNull<ThreadStats>,
    clients: std::ptr::NonNull<dyn Clients + 'static>,
}

impl Lease {
    /// # Safety
    /// The caller (the lending thread) must keep all three alive and
    /// untouched until the borrower gives the lease back, and the
    /// borrower must use them from one thread at a time.
    pub unsafe fn new(shard: &mut Shard, stats: &ThreadStats, clients: &dyn Clients) -> Lease {
        let clients: std::ptr::NonNull<dyn Clients + '_> = std::ptr::NonNull::from(clients);
        Lease {
            shard: std::ptr::NonNull::from(shard),
            stats: std::ptr::NonNull::from(stats),
            // SAFETY: only the lifetime bound is erased; see the contract.
            clients: unsafe {
                std::mem::transmute::<
                    std::ptr::NonNull<dyn Clients + '_>,
                    std::ptr::NonNull<dyn Clients + 'static>,
                >(clients)
            },
        }
    }

    /// Runs `f` on the lent shard.
    pub(crate) fn with(&self, f: impl FnOnce(&mut Shard, &ThreadStats, &dyn Clients)) {
        // SAFETY: valid until given back (`Lease::new`'s contract); the
        // borrower's job uses it from its own thread, one call at a time.
        unsafe {
            f(
                &mut *self.shard.as_ptr(),
                self.stats.as_ref(),
                self.clients.as_ref(),
            )
        }
    }
}

/// The marker of a key [`crate::script::run`] names to ask for every
/// shard ([`marker_keys`]).
pub(crate) const MARKER: &[u8] = b"\0tessera:every-shard:";

/// A key of each shard but `home`, each starting with [`MARKER`] (names
/// no client uses): what a run asks for to run again holding every shard.
pub(crate) fn marker_keys(nshards: usize, home: usize) -> Vec<Vec<u8>> {
    let mut keys: Vec<Option<Vec<u8>>> = vec![None; nshards];
    let mut left = nshards - 1;
    // Bounded: each shard gets a key within a few times `nshards` tries.
    for i in 0..nshards.saturating_mul(1000) {
        if left == 0 {
            break;
        }
        let mut k = MARKER.to_vec();
        k.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
        let s = crate::table::shard_of(&k, nshards);
        if s != home && keys[s].is_none() {
            keys[s] = Some(k);
            left -= 1;
        }
    }
    keys.into_iter().flatten().collect()
}

/// Whether keys a run asked for include the every-shard marker.
pub fn asks_every(found: &[Vec<u8>]) -> bool {
    found.iter().any(|k| k.starts_with(MARKER))
}

/// Whether the runtime can run such a script (its [`Reach`] is set).
pub(crate) fn available(ops: &crate::ops::Ops) -> bool {
    ops.reach.get().is_some()
}

/// Every shard but `home`, reached through [`Reach`] by a script on
/// `home` whose transaction write-locks every shard whole (an EXEC's, see
/// `multi`); `None` where the runtime cannot reach them.
pub(crate) fn apart(
    ops: &'static crate::ops::Ops,
    home: usize,
) -> Option<super::real::Real<'static>> {
    let reach: &'static dyn Reach = &**ops.reach.get()?;
    Some(super::real::Real::every(reach, home))
}
