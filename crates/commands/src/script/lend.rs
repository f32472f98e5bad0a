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
//! shard each way, no copy, no diff, no write-back.
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
//! first busy pass, gives its lent shards back (`Lent::serve_pinned`):
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
//! and a wake-up each way), the take-back copies of a run in place. See
//! bench/README.md, "Lua scripts".

use std::cell::RefCell;

use engine::Shard;
use resp::{OwnedArgs, Reply};

use super::every::{Lease, Reach};
use crate::coord::{ClientRegistry as Clients, Coordinator, JobOut, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx, ThreadStats};
use crate::error::CmdError;
use crate::scratch::WidenSlot;
use crate::table::ShardHandler;
use crate::tx::{LockSet, Mode, TxCoord, TxId};

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
pub(crate) fn shards_of(home: usize, keys: &[Vec<u8>], nshards: usize) -> Vec<usize> {
    let mut shards = vec![home];
    for k in keys {
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
}

/// The shards a lend round's job holds besides its home one, shared by
/// the run ([`Lent`]) and its busy passes ([`LentLoops`]).
struct Leases {
    reach: &'static dyn Reach,
    home: usize,
    held: RefCell<Vec<Held>>,
}

impl Leases {
    /// Gives every lent shard back; later calls there are posted.
    fn give_back_all(&self) {
        for h in self.held.borrow_mut().iter_mut() {
            if h.lease.take().is_some() {
                self.reach.give_back(h.shard);
            }
        }
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        self.give_back_all();
    }
}

/// The run's view of the shards (see `in_place::Shards`).
struct Lent<'a> {
    leases: &'a Leases,
    /// Records calls made on other shards, for the home shard's outbox
    /// (none while records are off, which the job checks first).
    moved: Vec<engine::outbox::Chunk>,
    /// `None`: the home thread's statistics are lent to the script's VM.
    home_stats: Option<&'a ThreadStats>,
}

impl Lent<'_> {
    fn on(&mut self, s: usize, f: &mut dyn FnMut(&mut Shard, &ThreadStats, &dyn Clients)) {
        let lease = self
            .leases
            .held
            .borrow()
            .iter()
            .find(|h| h.shard == s)
            .and_then(|h| h.lease);
        match lease {
            Some(l) => {
                engine::alloc::enter_shard(s);
                l.with(|sh, st, cl| f(sh, st, cl));
                engine::alloc::enter_shard(self.leases.home);
            }
            None => self.leases.reach.call(self.leases.home, s, f),
        }
    }
}

impl crate::script::in_place::Shards for Lent<'_> {
    fn hold(&mut self, s: usize) -> bool {
        self.leases.held.borrow().iter().any(|h| h.shard == s)
    }

    fn with_shard(&mut self, s: usize, f: &mut dyn FnMut(&mut Shard)) {
        let mut moved = std::mem::take(&mut self.moved);
        self.on(s, &mut |sh, _, _| {
            let m = sh.outbox.records_on.then(|| sh.outbox.mark());
            f(sh);
            if let Some(c) = m.and_then(|m| sh.outbox.take_since(m)) {
                moved.push(c);
            }
        });
        self.moved = moved;
    }

    fn may_widen(&self) -> bool {
        true
    }

    fn settle(&mut self, home: &mut Shard) {
        for c in self.moved.drain(..) {
            home.outbox.append(c);
        }
    }

    fn with_stats(&mut self, s: usize, f: &mut dyn FnMut(&ThreadStats)) {
        self.on(s, &mut |_, st, _| f(st));
    }

    fn with_clients(&mut self, s: usize, f: &mut dyn FnMut(&dyn Clients)) {
        self.on(s, &mut |_, _, c| f(c));
    }

    fn home_stats(&self) -> Option<&ThreadStats> {
        self.home_stats
    }
}

/// The lent shards' loops, for the busy passes of a published run: the
/// first pass gives them back (see the module docs), so their own
/// threads serve them; none is pinned.
struct LentLoops<'a>(&'a Leases);

impl super::busy::PinnedLoops for LentLoops<'_> {
    fn pinned(&self, into: &mut Vec<usize>) {
        into.clear();
    }

    fn serve_pinned(&mut self) {
        self.0.give_back_all();
    }
}

/// What the home job hands back.
struct Ran {
    reply: Vec<u8>,
    failed: Option<CmdError>,
    /// Run again: over these keys too, or on copies (empty: declined, or
    /// taken back past the threshold).
    again: Option<Vec<Vec<u8>>>,
}

/// A lend round: the script's run on the home shard once its shards are
/// locked whole.
pub(crate) struct Run {
    pub(crate) home: usize,
    pub(crate) handler: ShardHandler,
    pub(crate) args: std::sync::Arc<OwnedArgs>,
    pub(crate) db: usize,
    pub(crate) no_touch: bool,
    pub(crate) databases: usize,
    pub(crate) max_bulk_len: u64,
    pub(crate) nshards: usize,
    pub(crate) client: u64,
    pub(crate) ops: &'static crate::ops::Ops,
    pub(crate) caller: Option<std::sync::Arc<crate::acl::Caller>>,
    /// The shards locked whole, ascending (the home one among them).
    pub(crate) shards: Vec<usize>,
    /// Where a run that asks to run again says so (`wide`).
    pub(crate) widen: WidenSlot,
    /// False when made (its first step asks for the job).
    pub(crate) started: bool,
}

impl Run {
    /// The round under whole-shard write locks on its shards, as
    /// transaction `tx`.
    pub(crate) fn wrap(self, tx: TxId) -> Box<dyn Coordinator> {
        let mut set = LockSet::default();
        for &s in &self.shards {
            set.whole_shard(s, Mode::Write);
        }
        let home = self.home;
        TxCoord::wrap_as(home, Box::new(self), set, tx)
    }
}

impl Coordinator for Run {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if !self.started {
            self.started = true;
            let Some(reach) = self.ops.reach.get() else {
                return Err(CmdError::err(super::run::EVERY_SHARD));
            };
            let reach: &'static dyn Reach = &**reach;
            let (handler, args, db, home) = (self.handler, self.args.clone(), self.db, self.home);
            let (no_touch, databases, max_bulk_len) =
                (self.no_touch, self.databases, self.max_bulk_len);
            let (nshards, id, ops, caller) =
                (self.nshards, self.client, self.ops, self.caller.clone());
            let shards = std::mem::take(&mut self.shards);
            let resp3 = client.resp3;
            plan.run(home, move |env| {
                if env.shard.outbox.records_on {
                    // Records: the copies' path (see the module docs).
                    return Ran {
                        reply: Vec::new(),
                        failed: None,
                        again: Some(Vec::new()),
                    };
                }
                let others: Vec<usize> = shards.iter().copied().filter(|&s| s != home).collect();
                let mut made = Vec::with_capacity(others.len());
                let all_lent = reach.lend(home, &others, &mut made);
                let held = others
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| Held {
                        shard: s,
                        lease: if all_lent { made.get(i).copied() } else { None },
                    })
                    .collect();
                let leases = Leases {
                    reach,
                    home,
                    held: RefCell::new(held),
                };
                let mut reply = Reply::new(resp3);
                // The script's `redis.call`s count straight into the home
                // thread's statistics, as a one-shard script's do
                // (`exec::run_shard_ready`): draining the VM's own after
                // each script cost ~56 k instructions a call (a 24 KiB
                // latency histogram zeroed per command it ran, a pass
                // over every command's slot).
                let stats_lent = super::vm::lend_stats(env.stats);
                let mut lent = Lent {
                    leases: &leases,
                    moved: Vec::new(),
                    home_stats: None,
                };
                let mut ctx = ShardCtx {
                    shard: &mut *env.shard,
                    db,
                    out: &mut reply,
                    no_touch,
                    databases,
                    max_bulk_len,
                    reply_cap_bytes: 0,
                    may_block: false,
                    // Its records join the transaction's (as a job's).
                    in_tx: true,
                    nshards,
                    client: id,
                    ops,
                    block: None,
                    ready: None,
                    caller,
                    tracker: None,
                    in_place: Some(&mut lent),
                    sender: None,
                };
                let mut loops = LentLoops(&leases);
                let res = crate::script::busy::under_locks(&mut *env.clients, &shards, || {
                    crate::script::busy::lend_pinned(&mut loops, || handler(&mut ctx, args.args()))
                });
                let block = ctx.block.take();
                drop(ctx);
                drop(lent);
                leases.give_back_all();
                if stats_lent {
                    super::vm::return_stats(env.stats);
                }
                // What ran while they were not lent (this thread's first
                // script).
                super::vm::drain_stats(env.stats);
                match (res, block) {
                    (Err(e), _) => Ran {
                        reply: Vec::new(),
                        failed: Some(e),
                        again: None,
                    },
                    // Taken back: nothing replied, nothing left changed.
                    (Ok(()), Some(b)) => Ran {
                        reply: Vec::new(),
                        failed: None,
                        again: Some(b.keys),
                    },
                    (Ok(()), None) => Ran {
                        reply: reply.as_bytes().to_vec(),
                        failed: None,
                        again: None,
                    },
                }
            });
            return Ok(());
        }
        let ran = results
            .into_iter()
            .next()
            .and_then(|r| r.downcast::<Ran>().ok());
        // INVARIANT: the one job's output.
        let Some(ran) = ran else {
            return Err(CmdError::err("script run lost"));
        };
        if let Some(keys) = ran.again {
            *self.widen.lock().unwrap_or_else(|e| e.into_inner()) = Some(keys);
            return Ok(());
        }
        if let Some(e) = ran.failed {
            return Err(e);
        }
        out.raw(&ran.reply);
        Ok(())
    }
}
