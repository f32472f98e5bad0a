//! Scripts across shards that live on other threads, run on the real
//! shards with the other shards *lent* to the script's thread for the
//! call: no copies.
//!
//! # Why
//!
//! With the shards apart (`shard-consolidation no`) a script whose
//! declared keys span shards ran on copies (`wide`, `crate::scratch`):
//! locks on its keys, a gather of their entries to the home thread, the
//! script on a scratch shard, a diff and a write-back. For eight INCRs
//! over two shards that cost 118-128 k instructions per call against
//! Redis's 57-59 k (callgrind, bench/scripting_cg.sh): the script itself
//! ~52 k, the copies' machinery ~66 k (coordinator objects, a scratch
//! shard, every written key inserted twice, two round trips of jobs).
//! Co-hosted shards already run such a script in place (`in_place`,
//! 0.95-1.00x Redis); what kept the apart case off that path is that a
//! `redis.call` cannot wait for another thread's loop per call without a
//! wake-up each (`every` does that, for keyspace scripts only).
//!
//! # How
//!
//! The transaction layer write-locks *whole* the home shard and the shard
//! of every key of the round (declared and found so far), as `every`
//! locks every shard (one round, the layer's deadlock and starvation
//! arguments unchanged). Once held, one job on the home shard asks each
//! other locked shard's thread to lend it ([`Reach::lend`]): that thread
//! stops at the top of its next turn, publishes its shard (the pointer,
//! its loop's statistics and connections) and waits; the job runs the
//! script in place on the real shards as a co-hosted run does (each
//! `redis.call` on a lent shard a plain call on this thread), then gives
//! every shard back ([`Reach::give_back`]). One handshake per other
//! shard each way, no copy, no diff, no write-back. The coordinator and
//! its job are `real`'s (`Strategy::Lend`), shared with `every`'s runs;
//! this module makes the lends ([`run_lent`]) and holds them.
//!
//! Lends are all or none: where one cannot be made (a shard co-hosted
//! with the home one or stopped at the shutdown gate, or one not made
//! within a bound, see below) none is kept, and every call on another
//! shard goes through [`Reach::call`] as `every`'s do, under the same
//! locks.
//!
//! # Why it is atomic and isolated
//!
//! Nothing else runs on a locked shard: other clients' commands and
//! transactions wait behind the whole-shard write locks, the active
//! expiry cycle skips a locked shard while a script runs under locks
//! (`busy::scripts_under_locks`), and a lent shard's own thread waits
//! without touching it. Time is frozen for the script (`in_place::
//! on_shard`: the home shard's clock).
//!
//! # Why it cannot deadlock
//!
//! Taken only with `shard-consolidation no` (each shard's loop on its own
//! thread for good; see the rejected alternatives). The job waits only
//! for a lend of a shard `s` its transaction holds whole; `s`'s thread
//! runs `s` alone, so it is either turning its loop (it reaches the top of
//! a turn), inside a command that ends by itself (a connection command
//! such as DEBUG SLEEP), or inside a job or a lend: a job or lend on `s`
//! needs `s`'s whole lock, which this transaction holds, and a one-shard
//! script on `s` holds back the lock grant until it ends (`busy`). A lent
//! thread waits only for its borrower, which waits for nothing once every
//! lend is made. With consolidation a hub runs several shards' loops: a
//! hub blocked lending one of its loops could not lend another, nor run
//! a call posted for it, to a job that holds the first lend; `every`
//! escapes such waits through the watchdog and per-call posts, a lend
//! that blocks a hub cannot. `shard-consolidation` turned on while a
//! script is on its way can still put two locked shards on one hub: the
//! job then withdraws its lends after `worker::reach`'s bound (100 ms),
//! gives back those made, and reaches the shards by calls.
//!
//! # Released at the give-back, lent at the grant
//!
//! Each other shard's thread ran three turns per script: the lock's
//! grant, the lend (asked for by the job), the release (a message after
//! the job), and the home thread waited for that release before it
//! replied. Two changes make it one or two, and the reply goes in the
//! turn that ran the job:
//!
//! - The job gives a shard back at the script's end with `done`
//!   ([`Reach::give_back`]): its thread then releases the transaction's
//!   locks there itself, and the job says so (`real::Ran::released`,
//!   `Coordinator::released`): the transaction sends that shard no
//!   release. Isolation holds: nothing more of the transaction runs
//!   there, and the home shard's lock goes after, with the job (strict
//!   two-phase locking as before). Given back at a busy pass (the script
//!   goes on, its calls there posted) or withdrawn, a lend releases
//!   nothing, and the release goes as usual.
//! - A round over its home shard and a higher one asks for the other
//!   shard's lock last, in order (waiting, as the layer allows), marked
//!   `tx::LockReq::lend` (`tx`, "Lent at the grant"). Granted at once,
//!   the other shard's thread lends the shard there and then
//!   ([`Reach::lend_at_grant`]), sends the grant at once and waits
//!   ([`Reach::hold_lent`]); the job, once its thread hears of the
//!   grant, finds the lend made and takes it ([`Reach::lend`]) instead of
//!   asking and waiting for that thread's next turn. Queued (granted
//!   later) or with the home shard the higher, the grant answers plainly
//!   and the job asks as before. (A nowait request, so that a higher home
//!   could be lent at the grant too, was refused so often under four
//!   clients that it cost more than it saved: bench/README.md, branch
//!   `lend24`.)
//!
//! Why the lend at the grant cannot deadlock: the request is the
//! transaction's last (its home lock is held), so the lend is made with
//! every lock of the transaction held, as a lend the job asks for is. The
//! one new wait, the lending thread's wait for the job to take the lend,
//! is bounded (`worker::reach`'s 100 ms): not taken by then (the job's
//! thread slow to turn, a connection gone before its transaction ran, a
//! layout changed under it), the lend is withdrawn and the thread goes
//! on, and the job, if it comes, asks for a lend as if none had been
//! made. Once taken, the lending thread waits for the give-back as for
//! any lend, which the argument above bounds. A job that declines the
//! real shards (records on) gives it back untaken ([`Reach::decline`]).
//! A request run by a call (co-hosted with its home, which a lend would
//! stop) is granted without a lend.

//! # Keys it did not declare
//!
//! A key of a shard the round did not lock abandons the run exactly as a
//! run in place abandons it (`run::Undo` takes its writes back on every
//! shard it wrote), and `wide` runs it again over more keys: another lend
//! round over their shards (or every shard, for a keyspace command).
//! Where it cannot be taken back (it wrote what no take-back undoes, or
//! published with no room to hold the message), the call is refused with
//! the error a one-shard script gets, as in place on co-hosted shards.
//!
//! # Past `busy-reply-threshold`
//!
//! A run that can still be taken back is (as a run in place), and runs
//! again on copies (`wide`'s next round), where it is published holding
//! its keys only: exactly the copies' path's long script of before. One
//! that cannot is published under its locks (`busy::under_locks`: every
//! command of a locked shard gets `-BUSY`, on any thread) and, at its
//! first busy pass, gives its lent shards back (`LentLoops::serve_pinned`):
//! their threads answer their clients (`-BUSY` for the locked shards,
//! SCRIPT KILL, SHUTDOWN NOSAVE) as under `every`, and its later calls
//! there are posted ([`Reach::call`]), as `every`'s are: the locks still
//! keep everything else off those shards.
//!
//! # What it declines
//!
//! The copies' path runs as before when: consolidation is on (above); the
//! caller tracks keys (its invalidations are tagged with the script's
//! connection on the copies' path); it is a master's link; `maxmemory` is
//! set (the copies' path decides eviction); or the shards keep records
//! (AOF, replicas: a run taken back would have to drop records moved
//! between outboxes), found by the job, which then hands the script to a
//! copies' round.
//!
//! # Cost
//!
//! Per script: a lock round over its shards (whole-shard locks: the
//! lent shards' other clients wait for the script, as behind any lock of
//! their keys), one job, one lend handshake per other shard (a doorbell
//! and a wake-up each way, none when lent at the grant; the release
//! rides on the give-back), the take-back copies of a run in place. See
//! bench/README.md, "Lua scripts".

use std::cell::RefCell;

use super::every::{Lease, Reach};
use super::real::{Job, Ran};
use crate::ctx::{ConnCtx, ThreadStats};

/// Whether a script of `ctx`'s client across shards may run lent shards
/// (see the module docs: what it declines).
pub(crate) fn allowed(ctx: &ConnCtx<'_>) -> bool {
    if ctx.client.master || ctx.client.tracking.is_some() || ctx.nshards() < 2 {
        return false;
    }
    if !super::every::available(ctx.server.ops) {
        return false;
    }
    let c = ctx.server.config.read().unwrap_or_else(|e| e.into_inner());
    !c.shard_consolidation && c.maxmemory == 0
}

/// The shards a lend round over `keys` locks whole, ascending: the home
/// shard and each key's.
pub(crate) fn shards_of<'a>(
    home: usize,
    keys: impl Iterator<Item = &'a [u8]>,
    nshards: usize,
) -> Vec<usize> {
    let mut shards = vec![home];
    for k in keys {
        // Every shard in already (the common case with 2 shards): the
        // other keys need no CRC16 (~150 instructions a key).
        if shards.len() == nshards {
            break;
        }
        let s = crate::table::shard_of(k, nshards);
        if !shards.contains(&s) {
            shards.push(s);
        }
    }
    shards.sort_unstable();
    shards
}

/// A shard the job holds besides its home one: lent to it, or reached by
/// calls (`Reach::call`: the lends were not all made, or given back at
/// the first busy pass).
struct Held {
    shard: usize,
    lease: Option<Lease>,
    /// Given back at the script's end to a thread that then released the
    /// transaction's locks there itself ([`Reach::give_back`]).
    released: bool,
}

/// The shards a lend round's job holds besides its home one, shared by
/// the run (`real::Real`) and its busy passes ([`LentLoops`]).
pub(crate) struct Leases {
    reach: &'static dyn Reach,
    held: RefCell<Vec<Held>>,
}

impl Leases {
    /// Whether the round holds shard `s` (not the home one).
    pub(crate) fn holds(&self, s: usize) -> bool {
        self.held.borrow().iter().any(|h| h.shard == s)
    }

    /// Shard `s`'s lease, while it is lent.
    pub(crate) fn lease_of(&self, s: usize) -> Option<Lease> {
        self.held
            .borrow()
            .iter()
            .find(|h| h.shard == s)
            .and_then(|h| h.lease)
    }

    /// Gives every lent shard back; later calls there are posted. `done`:
    /// the script ended (see [`Reach::give_back`]).
    pub(crate) fn give_back_all(&self, done: bool) {
        for h in self.held.borrow_mut().iter_mut() {
            if h.lease.take().is_some() && self.reach.give_back(h.shard, done) {
                h.released = true;
            }
        }
    }

    /// The shards whose threads released the transaction's locks at the
    /// give-back at the script's end: its transaction sends them none.
    fn released(&self) -> Vec<usize> {
        let held = self.held.borrow();
        held.iter()
            .filter(|h| h.released)
            .map(|h| h.shard)
            .collect()
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        // (Not `done`: a release not reported in `Ran::released` would
        // be sent again by the transaction.)
        self.give_back_all(false);
    }
}

/// The lent shards' loops, for the busy passes of a published run: the
/// first pass gives them back (see the module docs), so their own
/// threads serve them; none is pinned.
pub(crate) struct LentLoops<'a>(pub(crate) &'a Leases);

impl super::busy::PinnedLoops for LentLoops<'_> {
    fn pinned(&self, into: &mut Vec<usize>) {
        into.clear();
    }

    fn serve_pinned(&mut self) {
        // The script goes on: its calls there are posted from now on.
        self.0.give_back_all(false);
    }
}

/// A lend round's job (`real::Strategy::Lend`): asks for the other
/// locked shards' lends, all or none, then runs the script (`Job::run`),
/// which gives them back.
pub(crate) fn run_lent(job: Job<'_>, home_stats: Option<&ThreadStats>) -> Ran {
    let (reach, home, tx) = (job.reach, job.home, job.tx);
    let others: Vec<usize> = job.shards.iter().copied().filter(|&s| s != home).collect();
    let mut made = Vec::with_capacity(others.len());
    let all_lent = reach.lend(home, tx, &others, &mut made);
    let held = others
        .iter()
        .enumerate()
        .map(|(i, &s)| Held {
            shard: s,
            lease: if all_lent { made.get(i).copied() } else { None },
            released: false,
        })
        .collect();
    let leases = Leases {
        reach,
        held: RefCell::new(held),
    };
    let mut ran = job.run(Some(&leases), home_stats);
    ran.released = leases.released();
    ran
}
