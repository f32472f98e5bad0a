//! One coordinator for a script run again on the *real* shards, from one
//! job on its home shard, under whole-shard write locks: the runs of
//! `every` and `lend`, which differ only in how a `redis.call` reaches
//! another shard.
//!
//! - [`Strategy::Post`] (`every`): every shard locked whole; each call on
//!   another thread's shard is posted to that thread and waited for
//!   (`Reach::call`). Never taken back.
//! - [`Strategy::Lend`] (`lend`): the home shard and its keys' shards
//!   locked whole; the other shards lent to the home thread for the call
//!   (`Reach::lend`), each call on them a plain call; taken back and run
//!   again wider (`wide`) for a key of a shard not locked.
//!
//! Both run the script's handler as a job on the home shard, with the
//! home thread's statistics lent to the script's VM (`vm::lend_stats`),
//! as a one-shard script runs: with the VM's own, each `redis.call`
//! allocated and zeroed a 24 KiB latency histogram for its command (the
//! VM's are drained into the thread's after the step, which frees them)
//! and the drain passed over every command's slot: ~56 k instructions
//! per call for the 8-key script of bench/scripting_cg.sh (`lend`'s first
//! build), the same per distinct command for `every`'s (see
//! bench/README.md, branch `lend23`).
//!
//! [`Call`] is what a script's runs are made from: what its connection
//! gave at dispatch. `wide` keeps one per script and makes each round from
//! it: a run here, or a run on copies (`scratch::for_script`) only when a
//! round declines the real shards.

use std::sync::Arc;

use engine::Shard;
use resp::{Args, OwnedArgs, Reply};

use super::every::Reach;
use crate::coord::{ClientRegistry as Clients, Coordinator, JobOut, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx, ThreadStats};
use crate::error::CmdError;
use crate::scratch::WidenSlot;
use crate::table::{CommandSpec, ShardHandler};
use crate::tx::{LockSet, Mode, TxCoord, TxId};

/// A script command as its connection gave it at dispatch: what each of
/// its runs across shards is made from.
#[derive(Clone)]
pub(crate) struct Call {
    pub(crate) handler: ShardHandler,
    /// Shared by the script's rounds (one copy of the arguments per
    /// script, made at dispatch).
    pub(crate) args: Arc<OwnedArgs>,
    pub(crate) db: usize,
    pub(crate) no_touch: bool,
    pub(crate) databases: usize,
    pub(crate) max_bulk_len: u64,
    pub(crate) nshards: usize,
    pub(crate) client: u64,
    /// Run for a replica's master (see `ShardCall::master`).
    pub(crate) master: bool,
    /// The command writes nothing (a run on copies releases its locks
    /// with the gather).
    pub(crate) read_only: bool,
    pub(crate) ops: &'static crate::ops::Ops,
    /// A restricted user's rules (`acl::caller`).
    pub(crate) caller: Option<Arc<crate::acl::Caller>>,
}

impl Call {
    /// Script command `spec` (`handler`) of `ctx`'s client on `args`.
    pub(crate) fn of(
        spec: &CommandSpec,
        handler: ShardHandler,
        ctx: &mut ConnCtx<'_>,
        args: Args<'_>,
    ) -> Call {
        let (databases, max_bulk_len) = {
            let c = ctx.server.config.read().unwrap_or_else(|e| e.into_inner());
            (c.databases, c.proto_max_bulk_len)
        };
        Call {
            handler,
            args: Arc::new(args.to_owned()),
            db: ctx.client.db,
            no_touch: ctx.client.no_touch,
            databases,
            max_bulk_len,
            nshards: ctx.nshards(),
            client: ctx.client.id,
            master: ctx.client.master,
            read_only: !spec.may_write(),
            ops: ctx.server.ops,
            caller: crate::acl::caller(ctx.server, ctx.client),
        }
    }
}

/// How a run reaches the shards besides its home one.
pub(crate) enum Strategy {
    /// Every shard locked whole; calls posted to the other threads
    /// (`every`).
    Post,
    /// `shards` (ascending, the home one among them) locked whole and lent
    /// to the home thread (`lend`); a run that asks to run again (wider,
    /// or on copies) says so in `widen`.
    Lend {
        shards: Vec<usize>,
        widen: WidenSlot,
    },
}

/// The script's run on the home shard once its shards are locked whole.
pub(crate) struct Run {
    home: usize,
    /// Taken by the first step, which asks for the job.
    call: Option<Call>,
    strategy: Strategy,
    /// Its transaction (the lends name it: see `Reach::lend`).
    tx: TxId,
    /// What the job's shards released themselves (`Ran::released`), set
    /// by the job, read by its transaction ([`Coordinator::released`])
    /// before it sends the releases: those of a fused last work go out
    /// before this run's next step.
    released: ReleasedSlot,
}

/// Where a run's job leaves the shards that released its transaction's
/// locks themselves (see [`Run`]).
type ReleasedSlot = Arc<std::sync::Mutex<Vec<usize>>>;

/// What the home job hands back.
pub(crate) struct Ran {
    pub(crate) reply: Vec<u8>,
    pub(crate) failed: Option<CmdError>,
    /// Run again: over these keys too, or on copies (empty: declined, or
    /// taken back past the threshold). `Lend` only.
    pub(crate) again: Option<Vec<Vec<u8>>>,
    /// Shards whose threads released the transaction's locks when the
    /// job gave them back at the script's end (see `lend`): the
    /// transaction sends them no release. `Lend` only.
    pub(crate) released: Vec<usize>,
}

impl Run {
    pub(crate) fn new(home: usize, call: Call, strategy: Strategy) -> Run {
        Run {
            home,
            call: Some(call),
            strategy,
            tx: 0,
            released: ReleasedSlot::default(),
        }
    }

    /// The run under whole-shard write locks on its shards (every shard
    /// for [`Strategy::Post`]), as transaction `tx`.
    pub(crate) fn wrap(mut self, tx: TxId) -> Box<dyn Coordinator> {
        self.tx = tx;
        let mut set = LockSet::default();
        match &self.strategy {
            Strategy::Post => {
                let n = self.call.as_ref().map_or(0, |c| c.nshards);
                set.whole(n, Mode::Write);
            }
            Strategy::Lend { shards, .. } => {
                for &s in shards {
                    set.whole_shard(s, Mode::Write);
                }
                // One other shard, if higher: lent at its grant (`lend`,
                // "Released at the give-back, lent at the grant").
                set.lend_at_grant = shards.len() == 2;
            }
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
        if let Some(call) = self.call.take() {
            let Some(reach) = call.ops.reach.get() else {
                return Err(CmdError::err(super::run::EVERY_SHARD));
            };
            let reach: &'static dyn Reach = &**reach;
            let (home, resp3, tx) = (self.home, client.resp3, self.tx);
            let released = self.released.clone();
            let (shards, lend): (Vec<usize>, bool) = match &mut self.strategy {
                Strategy::Post => ((0..call.nshards).collect(), false),
                Strategy::Lend { shards, .. } => (std::mem::take(shards), true),
            };
            plan.run(home, move |env| {
                let (shard, stats): (&mut Shard, &mut ThreadStats) =
                    (&mut *env.shard, &mut *env.stats);
                let clients: &mut dyn Clients = &mut *env.clients;
                if lend && shard.outbox.records_on {
                    // Records: the copies' path (see `lend`); a lend made
                    // at a grant goes back untaken.
                    for &s in shards.iter().filter(|&&s| s != home) {
                        reach.decline(s);
                    }
                    return Ran {
                        reply: Vec::new(),
                        failed: None,
                        again: Some(Vec::new()),
                        released: Vec::new(),
                    };
                }
                let job = Job {
                    shard,
                    clients,
                    reach,
                    home,
                    tx,
                    shards: &shards,
                    call,
                    resp3,
                };
                // The script's `redis.call`s count straight into the home
                // thread's statistics (see the module docs).
                let stats_lent = super::vm::lend_stats(stats);
                let home_stats = (!stats_lent).then_some(&*stats);
                let mut ran = if lend {
                    super::lend::run_lent(job, home_stats)
                } else {
                    job.run(None, home_stats)
                };
                if !ran.released.is_empty() {
                    *released.lock().unwrap_or_else(|e| e.into_inner()) =
                        std::mem::take(&mut ran.released);
                }
                if stats_lent {
                    super::vm::return_stats(stats);
                }
                // What the VM counted where they could not be lent (this
                // thread's first script).
                super::vm::drain_stats(stats);
                ran
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
            let Strategy::Lend { widen, .. } = &self.strategy else {
                // INVARIANT: a run posting its calls is never taken back
                // (`Real::every`): keys of two shards in one call are
                // refused in `run`.
                return Err(CmdError::err(super::run::NOT_HELD));
            };
            *widen.lock().unwrap_or_else(|e| e.into_inner()) = Some(keys);
            return Ok(());
        }
        if let Some(e) = ran.failed {
            return Err(e);
        }
        out.raw(&ran.reply);
        Ok(())
    }

    fn released(&self, shard: usize) -> bool {
        let r = self.released.lock().unwrap_or_else(|e| e.into_inner());
        r.contains(&shard)
    }
}

/// A run's job on its home shard: the call, the home shard's data and
/// loop, and the shards locked whole (ascending, the home one among them).
pub(crate) struct Job<'a> {
    pub(crate) shard: &'a mut Shard,
    pub(crate) clients: &'a mut dyn Clients,
    pub(crate) reach: &'static dyn Reach,
    pub(crate) home: usize,
    /// Its transaction.
    pub(crate) tx: TxId,
    pub(crate) shards: &'a [usize],
    pub(crate) call: Call,
    pub(crate) resp3: bool,
}

impl Job<'_> {
    /// Runs the script on the home shard, every other shard reached
    /// through `leases` where lent, else by calls posted to its thread
    /// (`Reach::call`); under its locks (published with them past the
    /// threshold), and with the lent shards' loops given back at its first
    /// busy pass. `home_stats`: the home loop's statistics where the
    /// script's VM counts in its own.
    pub(crate) fn run(
        self,
        leases: Option<&super::lend::Leases>,
        home_stats: Option<&ThreadStats>,
    ) -> Ran {
        let Job {
            shard,
            clients,
            reach,
            home,
            shards,
            call,
            resp3,
            ..
        } = self;
        let mut real = Real {
            reach,
            home,
            leases,
            moved: Vec::new(),
            home_stats,
        };
        let mut reply = Reply::new(resp3);
        let Call {
            handler,
            args,
            db,
            no_touch,
            databases,
            max_bulk_len,
            nshards,
            client,
            ops,
            caller,
            ..
        } = call;
        let mut ctx = ShardCtx {
            shard,
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
            client,
            ops,
            block: None,
            ready: None,
            caller,
            tracker: None,
            in_place: Some(&mut real),
            sender: None,
        };
        let res = crate::script::busy::under_locks(&ops.busy, clients, shards, || match leases {
            Some(l) => {
                let mut loops = super::lend::LentLoops(l);
                crate::script::busy::lend_pinned(&mut loops, || handler(&mut ctx, args.args()))
            }
            None => handler(&mut ctx, args.args()),
        });
        let block = ctx.block.take();
        drop(ctx);
        drop(real);
        if let Some(l) = leases {
            l.give_back_all(true);
        }
        let released = Vec::new();
        match (res, block) {
            (Err(e), _) => Ran {
                reply: Vec::new(),
                failed: Some(e),
                again: None,
                released,
            },
            // Taken back: nothing replied, nothing left changed.
            (Ok(()), Some(b)) => Ran {
                reply: Vec::new(),
                failed: None,
                again: Some(b.keys),
                released,
            },
            (Ok(()), None) => Ran {
                reply: reply.into_bytes(),
                failed: None,
                again: None,
                released,
            },
        }
    }
}

/// The shards a script on the home shard reaches besides its home one
/// (`in_place::Shards`), under its transaction's whole-shard locks: each
/// through its lease where lent (`lend`), else by a call on its thread
/// (`Reach::call`: posted, or a call where co-hosted).
pub(crate) struct Real<'a> {
    reach: &'static dyn Reach,
    home: usize,
    /// The shards a lend round holds (`None`: every shard, `every`).
    leases: Option<&'a super::lend::Leases>,
    /// Records of calls made on other shards, for the home shard's outbox.
    moved: Vec<engine::outbox::Chunk>,
    /// The home loop's statistics, where the script's own are not them
    /// (the VM's first script; an EXEC lends its loop's).
    home_stats: Option<&'a ThreadStats>,
}

impl<'a> Real<'a> {
    /// Every shard but `home`, reached by calls, for a script on `home`
    /// whose transaction write-locks every shard whole (an EXEC's, see
    /// `multi`).
    pub(crate) fn every(reach: &'static dyn Reach, home: usize) -> Real<'a> {
        Real {
            reach,
            home,
            leases: None,
            moved: Vec::new(),
            home_stats: None,
        }
    }

    fn on(&mut self, s: usize, f: &mut dyn FnMut(&mut Shard, &ThreadStats, &dyn Clients)) {
        match self.leases.and_then(|l| l.lease_of(s)) {
            Some(l) => {
                engine::alloc::enter_shard(s);
                l.with(|sh, st, cl| f(sh, st, cl));
                engine::alloc::enter_shard(self.home);
            }
            None => self.reach.call(self.home, s, f),
        }
    }
}

impl crate::script::in_place::Shards for Real<'_> {
    fn hold(&mut self, s: usize) -> bool {
        // Without leases every shard is write-locked by the transaction.
        self.leases.is_none_or(|l| l.holds(s))
    }

    fn with_shard(&mut self, s: usize, f: &mut dyn FnMut(&mut Shard)) {
        let mut moved = std::mem::take(&mut self.moved);
        self.on(s, &mut |sh, _, _| {
            // Its records go to the home shard (`settle`), in order with
            // the script's others: one block (MULTI/EXEC) in the AOF.
            let m = sh.outbox.records_on.then(|| sh.outbox.mark());
            f(sh);
            if let Some(c) = m.and_then(|m| sh.outbox.take_since(m)) {
                moved.push(c);
            }
        });
        self.moved = moved;
    }

    fn every(&self) -> bool {
        self.leases.is_none()
    }

    fn may_widen(&self) -> bool {
        self.leases.is_some()
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
