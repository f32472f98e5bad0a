//! The home side's completions: what comes back to a connection's own
//! thread from the shards: a batch with its replies (`exec_done`), a
//! blocked command served (`unblocked`) or woken to run again (`wake`),
//! and coordinator jobs' outputs (`job_done`), which step the connection's
//! coordinator ([`advance`]) until it replies. Also coordinators without a
//! connection: orphans (their connection closed, they must finish) and
//! the server's own (a save the `save` rules started, [`SYS_SLOT`]).
//!
//! Nothing here runs on a shard's data: a coordinator's work goes out as
//! jobs ([`send_plan`]); this thread's own shard gets them through
//! `Core::local`, like any other shard's.
//!
//! Per thread: state per connection with a coordinator, none per thread
//! of the server.

use std::time::Instant;

use commands::coord::{JobOut, Plan};
use commands::exec::{self, dispatch, Step};
use commands::ConnCtx;
use resp::{Args, Reply};

use super::super::blocking::{self, BlockPhase, BlockTicket};
use super::super::conn::{ActiveCoord, Conn};
use super::super::mailbox::{Batch, ConnRef, Gather, Msg};
use super::busy::{inbox_of, lend_caller_inbox};
use super::cohost;
use super::request::paused;
use super::{Core, SysCoord, Worker, SYS_SLOT};

impl Worker {
    /// A batch of this thread's connection back from its shard, with its
    /// replies (some of them already written, by a direct reply).
    pub(super) fn exec_done(&mut self, conn: ConnRef, batch: Box<Batch>) {
        let slot = conn.slot as usize;
        let mut batch = batch;
        let mut newly_blocked = false;
        if batch.direct.is_some() {
            match self.conns.get(conn) {
                Some(c) => c.direct = false,
                None => self.conns.zombies.retain(|(z, _)| *z != conn),
            }
        }
        if let Some(c) = self.conns.get(conn) {
            // Bytes the shard wrote to the socket itself.
            let mut start = batch.direct_written;
            let blocked_seq = batch.block.as_ref().map(|t| t.seq);
            let widen_seq = batch.widen.as_ref().map(|w| w.seq);
            let mut held = false;
            for (i, (cmd, &end)) in batch.cmds.iter().zip(&batch.ends).enumerate() {
                if Some(cmd.seq) != blocked_seq && Some(cmd.seq) != widen_seq {
                    let hold = if self.core.aof_always && i >= batch.aof_from {
                        held = true;
                        batch.aof_hold
                    } else {
                        0
                    };
                    c.complete_held(cmd.seq, &batch.reply[start.min(end)..end], hold);
                }
                start = start.max(end);
            }
            if held {
                self.core.note_held(c, slot);
            }
            match batch.block.take() {
                Some(t) => {
                    c.block = BlockPhase::Blocked(t);
                    blocking::set_blocked(self.core.server.ops, &mut c.client, true);
                    newly_blocked = !super::demote::answer_if_before_new_master(&mut self.core, c);
                }
                None => {
                    if matches!(c.block, BlockPhase::Awaiting(_)) {
                        c.block = BlockPhase::None;
                    }
                }
            }
            // Its script is back (the last command of this batch; another
            // shard's batch may come back before it).
            if batch
                .cmds
                .last()
                .is_some_and(|b| b.resolved.spec.has(commands::table::flags::SCRIPT))
            {
                c.script_wait = false;
            }
            if let Some(w) = batch.widen.take() {
                widen(&mut self.core, c, slot, *w);
            }
            let resume = !paused(c);
            self.conns.mark_dirty(slot);
            if resume {
                self.conns.resume.push(slot);
            }
        }
        if newly_blocked {
            self.core.blocked_conns.push((slot, conn.gen));
        }
        self.core.recycle(batch);
    }

    /// A waiter of this thread's connection woken on a shard: its
    /// command runs again here (see `park_across`).
    pub(super) fn wake(&mut self, conn: ConnRef, seq: u64) {
        let slot = conn.slot as usize;
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if c.gen != conn.gen {
            return;
        }
        let BlockPhase::Blocked(t) = &c.block else {
            return;
        };
        if t.seq != seq {
            return;
        }
        let Some(args) = t.redo.clone() else {
            return;
        };
        c.keep_deadline_ms = Some(t.deadline_ms);
        c.block = BlockPhase::None;
        blocking::set_blocked(self.core.server.ops, &mut c.client, false);
        rerun(&mut self.core, c, slot, seq, &args);
        let resume = !paused(c);
        self.conns.mark_dirty(slot);
        if resume {
            self.conns.resume.push(slot);
        }
    }

    /// A blocked command of this thread's connection served on a shard,
    /// with its reply.
    pub(super) fn unblocked(&mut self, conn: ConnRef, seq: u64, reply: Vec<u8>, aof: u64) {
        let slot = conn.slot as usize;
        let hold = if self.core.aof_always { aof } else { 0 };
        let Worker { core, conns, .. } = self;
        if let Some(c) = conns.get(conn) {
            let ours = match &c.block {
                BlockPhase::Blocked(t) => t.seq == seq,
                BlockPhase::Awaiting(_) => true,
                BlockPhase::None => false,
            };
            if ours {
                c.complete_held(seq, &reply, hold);
                if hold != 0 {
                    core.note_held(c, slot);
                }
                c.block = BlockPhase::None;
                blocking::set_blocked(core.server.ops, &mut c.client, false);
                let resume = !paused(c);
                conns.mark_dirty(slot);
                if resume {
                    conns.resume.push(slot);
                }
            }
        }
    }

    pub(super) fn job_done(&mut self, conn: ConnRef, idx: u32, out: JobOut, aof: u64) {
        if conn.slot == super::DESK_SLOT {
            // A release a busy shard kept for after its script, its
            // coordinator answered already (`busy::released_now`).
            return;
        }
        if conn.slot == SYS_SLOT {
            self.sys_job_done(idx, out);
            return;
        }
        if !self.conns.orphans.is_empty() {
            if let Some(i) = self.conns.orphans.iter().position(|o| o.conn == conn) {
                return self.orphan_job_done(i, idx, out);
            }
        }
        let slot = conn.slot as usize;
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if c.gen != conn.gen {
            return;
        }
        let Some(ac) = c.coord.as_mut() else { return };
        ac.aof_hold = ac.aof_hold.max(aof);
        if let Some(r) = ac.results.get_mut(idx as usize) {
            *r = Some(out);
            ac.remaining -= 1;
        }
        if ac.remaining == 0 {
            self.outputs_in(slot);
        }
    }

    /// Every output of the step of slot `slot`'s coordinator is in: step
    /// it.
    fn outputs_in(&mut self, slot: usize) {
        // Out of its slot while it steps: a script across shards runs in
        // this step, and may serve the rest of the loop.
        let Some(mut c) = self.conns.slots[slot].take() else {
            return;
        };
        self.lend(&mut c, slot, advance);
        let done = c.coord.is_none();
        self.conns.slots[slot] = Some(c);
        self.after_desk();
        if done {
            self.conns.resume.push(slot);
        }
        self.conns.mark_dirty(slot);
    }

    /// An output for an orphaned coordinator: once its step is complete,
    /// step it as [`advance`] would, without a connection to reply to.
    #[cold]
    pub(super) fn orphan_job_done(&mut self, i: usize, idx: u32, out: JobOut) {
        let o = &mut self.conns.orphans[i];
        if let Some(r) = o.ac.results.get_mut(idx as usize) {
            *r = Some(out);
            o.ac.remaining -= 1;
        }
        if o.ac.remaining > 0 {
            return;
        }
        let results: Vec<JobOut> = o.ac.results.drain(..).flatten().collect();
        let mut plan = Plan::default();
        let res =
            o.ac.coord
                .step(results, &mut plan, &mut o.ac.out, &mut o.client);
        // As in `advance`: a script run in the step counts here and now.
        commands::script::vm::drain_stats(&mut self.core.stats);
        let done = res.is_err() || plan.is_empty();
        // Nobody waits for the records to be durable.
        log_coord_step(&self.core, &mut *o.ac.coord, done);
        if done {
            self.conns.orphans.swap_remove(i);
            return;
        }
        let conn = o.conn;
        o.ac.remaining = plan.jobs.len();
        o.ac.results.resize_with(plan.jobs.len(), || None);
        send_plan(&mut self.core, conn, plan);
    }

    /// Starts a coordinator on behalf of the server itself.
    pub(super) fn start_sys(&mut self, coord: Box<dyn commands::coord::Coordinator>) {
        self.core.sys = Some(SysCoord {
            coord,
            results: Vec::new(),
            remaining: 0,
            out: Reply::new(false),
            client: commands::ClientState::default(),
        });
        self.advance_sys();
    }

    pub(super) fn sys_job_done(&mut self, idx: u32, out: JobOut) {
        let Some(sc) = self.core.sys.as_mut() else {
            return;
        };
        if let Some(r) = sc.results.get_mut(idx as usize) {
            *r = Some(out);
            sc.remaining -= 1;
        }
        if sc.remaining == 0 {
            self.advance_sys();
        }
    }

    /// [`advance`] for the server's own coordinator.
    pub(super) fn advance_sys(&mut self) {
        let Some(sc) = self.core.sys.as_mut() else {
            return;
        };
        let results: Vec<JobOut> = sc.results.drain(..).flatten().collect();
        let mut plan = Plan::default();
        let res = sc
            .coord
            .step(results, &mut plan, &mut sc.out, &mut sc.client);
        if res.is_err() || plan.is_empty() {
            self.core.sys = None;
            return;
        }
        sc.remaining = plan.jobs.len();
        sc.results = (0..plan.jobs.len()).map(|_| None).collect();
        let conn = ConnRef {
            thread: self.core.id as u16,
            slot: SYS_SLOT,
            gen: 0,
        };
        send_plan(&mut self.core, conn, plan);
    }
}

/// Steps a connection's coordinator until it issues jobs to wait for, or
/// finishes (its reply then fills the coordinator's slot).
///
/// Jobs for shards co-hosted on this thread run at once (see `cohost`):
/// when every output of a step is in after sending it, the coordinator
/// steps again here.
///
/// A transaction that can run to its end at once, on shards nothing else
/// touches meanwhile, runs without locks ([`run_unlocked`]).
pub(super) fn advance(core: &mut Core, c: &mut Conn, slot: usize) {
    let unlocked = run_unlocked(core, c);
    // A plan of the request's keys is for its first step only.
    core.key_pf.clear();
    while step_coord(core, c, slot, unlocked) {}
    if unlocked {
        unpin_unlocked(core);
    }
}

/// Lets go of the workers an unlocked transaction pinned: their
/// addresses first, then their seats.
fn unpin_unlocked(core: &mut Core) {
    core.unlocked.clear();
    cohost::unpin_all();
}

/// Whether the connection's coordinator, a transaction that has not
/// started, runs without locks: as one thread runs a command in Redis,
/// which is what this thread does then. Only when
/// - it is a keyed command (not EXEC, a script or a blocking command):
///   its jobs run on the shards of its keys, the ones it would lock, and
///   never look at clients (the home shard's run with [`NoClients`]);
/// - every earlier request of the connection is back (nothing of it
///   waits in a ring or on a shard);
/// - every shard it would lock is this worker's or lent to it (`cohost`)
///   and pinned until it ends, so every job of every step runs by a call,
///   now; and none holds a lock, has a request waiting for one, or holds
///   work back for one (nothing it could conflict with or overtake), nor
///   has an AOF or replica stream (whose records of a transaction the
///   locked path assembles into one block).
///
/// [`NoClients`]: cohost::NoClients
fn run_unlocked(core: &mut Core, c: &mut Conn) -> bool {
    use commands::table::flags::{BLOCKING, SCRIPT};
    let Some(ac) = c.coord.as_mut() else {
        return false;
    };
    let spec = ac.resolved.spec;
    if spec.keys.first <= 0
        || spec.has(SCRIPT)
        || spec.has(BLOCKING)
        || c.pending.front().is_none_or(|s| s.seq != ac.seq)
    {
        return false;
    }
    let mut shards = std::mem::take(&mut core.unlocked_shards);
    shards.clear();
    let home = core.id;
    let db = c.client.db;
    let locked = ac.coord.lock_shards(&mut shards);
    // The request's keys by shard (`prefetch_plan`), for a command over
    // enough shards (on one or two, its jobs prefetch their own keys).
    let mut pf = std::mem::take(&mut core.key_pf);
    if shards.len() < PREFETCH_MIN_SHARDS {
        pf.clear();
    }
    let keys = std::mem::take(&mut core.key_buf);
    let mut pinned = std::mem::take(&mut core.unlocked);
    // Every co-hosted shard is pinned (one call to the lender), then each
    // is looked at in one visit: its address is kept for the
    // transaction's jobs (`run_plan_unlocked`); its keys' buckets are
    // asked for meanwhile. `shards` ascends, as `pf` does: one cursor
    // walks `pf` along.
    let ok = locked
        && cohost::pin_workers(&shards, home, &mut pinned)
        && cohost::visit(home, || {
            let mut at = 0;
            each_core(core, &shards, &pinned, |s, c| {
                prefetch_on(&c.shard, db, &keys, &mut pf, &mut at, s, 0);
                c.idle_for_unlocked()
            })
        });
    if ok && !pf.is_empty() {
        // The buckets are in by now (a visit per shard since): their
        // entries next, so that the jobs find both in cache.
        cohost::visit(home, || {
            let mut at = 0;
            each_core(core, &shards, &pinned, |s, c| {
                prefetch_on(&c.shard, db, &keys, &mut pf, &mut at, s, 1);
                true
            })
        });
    }
    core.unlocked = pinned;
    core.key_pf = pf;
    core.key_buf = keys;
    core.unlocked_shards = shards;
    if !ok {
        unpin_unlocked(core);
        return false;
    }
    ac.coord.run_unlocked();
    true
}

/// Runs `f` on the `Core` of each shard of `shards` (ascending) while it
/// is true: the home worker's own (`core`) or a pinned one's (`pinned`:
/// `shards` but the home shard, in the same order). Only inside
/// `cohost::visit`.
#[inline(always)]
fn each_core(
    core: &mut Core,
    shards: &[usize],
    pinned: &[(usize, cohost::Pinned)],
    mut f: impl FnMut(usize, &mut Core) -> bool,
) -> bool {
    let home = core.id;
    let mut next = pinned.iter();
    shards.iter().all(|&s| {
        if s == home {
            return f(s, core);
        }
        let Some((p_s, p)) = next.next() else {
            return false;
        };
        debug_assert_eq!(*p_s, s, "pinned out of order");
        // SAFETY: inside `visit` (the caller's), pinned until
        // `unpin_unlocked`, and no other reference to it lives.
        f(s, &mut unsafe { p.worker() }.core)
    })
}

/// Commands over fewer shards than this prefetch no keys across shards:
/// a shard's part of them is several keys, which its job prefetches
/// together (`commands::multikey::prefetch_keys_and_values`).
const PREFETCH_MIN_SHARDS: usize = 3;

/// Copies the keys of request `args` (a command of `spec`) for the
/// prefetch of its first step if it runs without locks (see
/// [`prefetch_on`]): each key's shard and its bytes' range in
/// `Core::key_buf`, sorted by shard. Only for three keys or more (they
/// may span [`PREFETCH_MIN_SHARDS`]); [`advance`] drops the plan after
/// that step. The key positions and shards are dispatch's when it
/// computed them (`Core::scratch`, see `commands::exec::KeyScratch`):
/// each key is found and hashed to its shard once per request.
pub(super) fn prefetch_plan(core: &mut Core, spec: &commands::table::CommandSpec, args: Args<'_>) {
    core.key_pf.clear();
    core.key_buf.clear();
    // Alone on its thread no shard is lent: nothing runs unlocked.
    if core.server.nshards < PREFETCH_MIN_SHARDS || !cohost::lending_here() {
        return;
    }
    let n = core.server.nshards;
    let (key_buf, key_pf) = (&mut core.key_buf, &mut core.key_pf);
    let mut add = |k: &[u8], shard: u32| {
        let start = key_buf.len() as u32;
        key_buf.extend_from_slice(k);
        key_pf.push(KeyPf {
            shard,
            start,
            end: key_buf.len() as u32,
            hash: 0,
        });
    };
    if let Some((pos, shards)) = core.scratch.key_shards() {
        if pos.len() < PREFETCH_MIN_SHARDS {
            return;
        }
        for (&p, &s) in pos.iter().zip(shards) {
            add(args.get(p), u32::from(s));
        }
    } else {
        let mut pos = std::mem::take(&mut core.key_pos);
        spec.key_positions(args, &mut pos);
        if pos.len() >= PREFETCH_MIN_SHARDS {
            for &p in &pos {
                let k = args.get(p);
                add(k, commands::table::shard_of(k, n) as u32);
            }
        }
        core.key_pos = pos;
    }
    // By shard: the visits, in ascending shard order, walk it with a
    // cursor.
    core.key_pf.sort_unstable_by_key(|k| k.shard);
}

/// A key of the request whose coordinator starts (`Core::key_pf`): its
/// shard, its bytes in `Core::key_buf`, and its hash in its shard's
/// table once the first prefetch stage computed it.
#[derive(Clone, Copy)]
pub(super) struct KeyPf {
    shard: u32,
    start: u32,
    end: u32,
    hash: u64,
}

/// Prefetch stage `stage` (`engine::Db::prefetch`: 0 the bucket, 1 its
/// entry) of the keys of `pf` on shard `s`, in database `db` of `shard`.
/// A shard's part of an MSET or MGET of 10 keys over 32 shards is one
/// key, too few for its job's own prefetch: its bucket, entry and value
/// then missed one after the other, shard after shard, where on 2
/// shards a job's five keys' misses overlap (bench/README.md, "Which
/// layout the benchmark runs"). Asked for here, during the visits that
/// precede the jobs, they arrive together.
/// `at`: a cursor into `pf` (sorted by shard), left past shard `s`'s
/// keys; calls with ascending `s` walk `pf` once.
#[inline(always)]
fn prefetch_on(
    shard: &engine::Shard,
    db: usize,
    keys: &[u8],
    pf: &mut [KeyPf],
    at: &mut usize,
    s: usize,
    stage: u8,
) {
    let s = s as u32;
    let Some(d) = shard.dbs.get(db) else {
        return;
    };
    // One pass: keys of shards before `s` (none, for a keyed command's
    // shards) skipped, `s`'s prefetched, stopping at the next shard's.
    while let Some(k) = pf.get_mut(*at) {
        if k.shard > s {
            break;
        }
        *at += 1;
        if k.shard < s {
            continue;
        }
        if stage == 0 {
            k.hash = d.hash_of(&keys[k.start as usize..k.end as usize]);
        }
        d.prefetch_hashed(k.hash, stage);
    }
}

/// [`Core::idle_for_unlocked`] for the home shard.
pub(super) fn home_idle(core: &mut Core) -> bool {
    core.idle_for_unlocked()
}

/// One step of [`advance`]; true if its outputs are all in already.
fn step_coord(core: &mut Core, c: &mut Conn, slot: usize, unlocked: bool) -> bool {
    let Some(ac) = c.coord.as_mut() else {
        return false;
    };
    // Sized at once: collected from a flattening iterator it grew (and
    // moved) twice for the ten outputs of an MSET over 32 shards.
    let mut results: Vec<JobOut> = Vec::with_capacity(ac.results.len());
    results.extend(ac.results.drain(..).flatten());
    let mut plan = Plan::default();
    // A script's step may run it (on gathered copies): its commands count
    // straight into this thread's statistics, lent to the VM as for a
    // one-shard script (`exec::run_shard_ready`), and the shard side's
    // inbox is lent to it (see `busy`).
    let script = ac.resolved.spec.has(commands::table::flags::SCRIPT);
    let res = if script {
        core.lending_inbox(|_, stats| {
            let lent = commands::script::vm::lend_stats(stats);
            let res = ac
                .coord
                .step(results, &mut plan, &mut ac.out, &mut c.client);
            if lent {
                commands::script::vm::return_stats(stats);
            }
            res
        })
    } else {
        ac.coord
            .step(results, &mut plan, &mut ac.out, &mut c.client)
    };
    // What a script run in the step counted in this thread's VM while the
    // statistics were not lent (the VM's first script, or EXEC running a
    // script on copies): drained now, on the thread that ran it; the
    // connection's loop may be on another thread at its next step
    // (consolidation), and a thread's VM is drained only by its own
    // scripts' commands. Nothing to do (two compares) otherwise.
    commands::script::vm::drain_stats(&mut core.stats);
    // WATCHes of this shard answered while a script of the step ran on
    // gathered copies (it stopped this loop without holding the shard):
    // registered now, before the step's jobs write anything back here
    // (`commands::script::busy::watch_stopped`). One load otherwise.
    commands::script::busy::register_parked(&mut core.shard);
    let failed = res.is_err();
    // Refused before it ran (a script's up-front OOM, NOREPLICAS or
    // READONLY on its gathered copies): a rejected call, not a call, as a
    // one-shard script's (`exec::run_shard_with`).
    let rejected = matches!(res, Err(commands::CmdError::Rejected(_)));
    let hold = log_coord_step(core, &mut *ac.coord, failed || plan.is_empty());
    ac.aof_hold = ac.aof_hold.max(hold);
    if let Err(e) = res {
        exec::reply_error(&mut ac.out, &mut core.stats, &e);
    }
    if failed || plan.is_empty() {
        let Some(mut ac) = c.coord.take() else {
            return false;
        };
        if !failed {
            if let Some(p) = ac.coord.parked() {
                park_across(core, c, slot, ac.resolved, ac.seq, p);
                return false;
            }
        }
        // PSYNC (its FAILOVER form is coordinated) answers from the
        // replication thread once the connection is handed over.
        let syncing = c.client.close_after_reply
            && c.client.replica.as_ref().is_some_and(|h| h.sync.is_some());
        if ac.out.as_bytes().is_empty() && !syncing {
            // Every command replies: a coordinator that ended without a
            // reply would leave its client waiting forever (and the
            // replies after it answering the wrong requests).
            debug_assert!(false, "coordinator ended without a reply");
            crate::log::warning(format_args!("a coordinator ended without a reply"));
            exec::reply_error(
                &mut ac.out,
                &mut core.stats,
                &commands::CmdError::err("internal error: the command produced no reply"),
            );
        }
        c.keep_deadline_ms = None;
        let ops = core.server.ops;
        // EXEC's commands run on this thread.
        ac.coord.drain_stats(&mut core.stats);
        if rejected {
            exec::count_rejected(&mut core.stats, Some(ac.resolved.id));
        } else if let Some(us) = {
            // A script that replied errors below its reply's top failed
            // (see `script::vm::count_nested_errors`).
            let failed = failed || (script && commands::script::vm::take_nested_failed());
            exec::record(&mut core.stats, ops, ac.resolved.id, ac.started, failed)
        } {
            let kept = || {
                ops.slowlog
                    .enabled()
                    .then(|| ac.coord.kept_args())
                    .flatten()
            };
            if let Some(a) = ac.slow_args.as_ref().map(|a| a.args()).or_else(kept) {
                let label = commands::ops::slowlog::label_of(&c.client);
                exec::slowlog(ops, ac.resolved, a, us, c.client.id, Some(label));
            }
        }
        let seq = ac.seq;
        let hold = if core.aof_always { ac.aof_hold } else { 0 };
        c.complete_held(seq, if ac.suppress { &[] } else { ac.out.as_bytes() }, hold);
        if hold != 0 {
            core.note_held(c, slot);
        }
        // A coordinator (CLIENT KILL of this very client) may end the
        // connection: nothing after it in the pipeline runs.
        if c.client.close_after_reply {
            c.closing = true;
        }
        if c.out.resp3() != c.client.resp3 {
            c.out.set_resp3(c.client.resp3);
        }
        return false;
    }
    let conn = ConnRef {
        thread: core.id as u16,
        slot: slot as u32,
        gen: c.gen,
    };
    ac.remaining = plan.jobs.len();
    // Reuses the vector the outputs were drained from.
    ac.results.resize_with(plan.jobs.len(), || None);
    // Lent only while every earlier request of the connection is back:
    // a job must not overtake a batch it sent that shard before.
    if c.pending.front().is_some_and(|s| s.seq == ac.seq) {
        send_plan_lent(core, conn, plan, ac, unlocked);
        ac.remaining == 0
    } else {
        send_plan(core, conn, plan);
        false
    }
}

/// [`send_plan`] for a connection's coordinator, with the jobs for
/// co-hosted shards run at once (see `cohost`): their outputs go straight
/// into `ac`.
/// `unlocked`: its transaction runs without locks ([`run_unlocked`]), so
/// every job must run now, the home shard's too.
fn send_plan_lent(
    core: &mut Core,
    conn: ConnRef,
    mut plan: Plan,
    ac: &mut ActiveCoord,
    unlocked: bool,
) {
    if unlocked {
        plan = run_plan_unlocked(core, conn, plan, ac);
    }
    // Jobs that may run a script: an EXEC's (keyless) and a script's.
    let spec = ac.resolved.spec;
    let scripts = !unlocked && (spec.keys.first <= 0 || spec.has(commands::table::flags::SCRIPT));
    for (idx, (shard, work)) in plan.jobs.into_iter().enumerate() {
        let idx = idx as u32;
        if shard == core.id && unlocked {
            // A keyed command's jobs never look at clients.
            // The home worker's own messages go at the end of its turn.
            let (out, _) = cohost::run_job_now(core, &mut cohost::NoClients, conn, work.job);
            ac.results[idx as usize] = Some(out);
            ac.remaining -= 1;
            continue;
        }
        if shard == core.id {
            core.local.push_back(Msg::Job {
                conn,
                idx,
                work,
                gather: None,
            });
            continue;
        }
        let mut work = Some(work);
        let now_ms = core.shard.now_ms;
        let run = |w: &mut Worker| {
            // INVARIANT: taken once, by this call.
            let work = work.take().expect("the job");
            if unlocked {
                Some((w.run_unlocked_job(shard, conn, work, now_ms), 0))
            } else {
                w.run_lent_job(conn, idx, work, now_ms)
            }
        };
        let ran = if scripts {
            // A script the job runs stops this loop until it ends: its
            // busy passes serve this loop's mailbox and a hub's idle own
            // loop (see `busy::JobDesk`).
            let id = core.id;
            let ran = lend_caller_inbox(&mut inbox_of!(core), || {
                cohost::with_worker_for_scripts(shard, id, run)
            });
            core.refused.settle(&mut core.stats);
            ran
        } else {
            cohost::with_worker(shard, core.id, run)
        };
        let ran = ran.flatten();
        // A script the job ran may have stalled this loop (`busy::JobDesk`):
        // the WATCHes parked for it, before anything else runs here.
        commands::script::busy::register_parked(&mut core.shard);
        // INVARIANT (`run_unlocked`): its shards are pinned and hold no
        // lock, so every job runs now.
        if unlocked && ran.is_none() {
            debug_assert!(false, "an unlocked job did not run at once");
            crate::log::warning(format_args!(
                "an unlocked transaction's job for shard {shard} did not run at once"
            ));
        }
        match work {
            Some(work) => core.remote_works.push((shard, idx, work)),
            None => {
                if let Some((out, aof)) = ran {
                    ac.aof_hold = ac.aof_hold.max(aof);
                    ac.results[idx as usize] = Some(out);
                    ac.remaining -= 1;
                }
            }
        }
    }
    send_remote(core, conn);
}

/// The jobs of an unlocked transaction's step, run now, in one visit to
/// the workers it pinned (`run_unlocked`): each by a direct call on its
/// shard, the home shard's too, outputs straight into `ac`. Returns what
/// it did not run: nothing, or, if a job is for a shard not pinned (none
/// is, for a keyed command), the whole plan, for the lent path.
fn run_plan_unlocked(core: &mut Core, conn: ConnRef, plan: Plan, ac: &mut ActiveCoord) -> Plan {
    let home = core.id;
    let pinned = std::mem::take(&mut core.unlocked);
    // Each job's worker by a cursor over the pins (see `pinned_at`):
    // once to see that every job can run, once to run them.
    let mut at = 0;
    let all_pinned = plan
        .jobs
        .iter()
        .all(|(s, _)| *s == home || pinned_at(&pinned, &mut at, *s).is_some());
    if !all_pinned {
        core.unlocked = pinned;
        // INVARIANT (`run_unlocked`): a keyed command's jobs run on the
        // shards it locks, all pinned.
        debug_assert!(false, "an unlocked job for a shard not pinned");
        return plan;
    }
    let now_ms = core.shard.now_ms;
    let mut at = 0;
    cohost::visit(home, || {
        for (idx, (shard, work)) in plan.jobs.into_iter().enumerate() {
            let out = if shard == home {
                engine::alloc::enter_shard(home);
                // A keyed command's jobs never look at clients.
                // Its own messages go at the end of its turn.
                cohost::run_job_now(core, &mut cohost::NoClients, conn, work.job).0
            } else {
                // INVARIANT: checked above.
                let i = pinned_at(&pinned, &mut at, shard).expect("pinned");
                let (_, p) = &pinned[i];
                // SAFETY: inside `visit`, pinned until `unpin_unlocked`,
                // and no other reference to it lives.
                unsafe { p.worker() }.run_unlocked_job(shard, conn, work, now_ms)
            };
            ac.results[idx] = Some(out);
            ac.remaining -= 1;
        }
    });
    core.unlocked = pinned;
    Plan::default()
}

/// The index in `pinned` (ascending by shard, see `run_unlocked`) of
/// shard `s`'s worker. `at`: a cursor, left past it: calls for ascending
/// shards (a keyed command's plan: one job per shard, in shard order)
/// find each at the cursor; any other order falls back to a search.
fn pinned_at(pinned: &[(usize, cohost::Pinned)], at: &mut usize, s: usize) -> Option<usize> {
    let i = match pinned.get(*at) {
        Some((p, _)) if *p == s => *at,
        _ => pinned.iter().position(|(p, _)| *p == s)?,
    };
    *at = i + 1;
    Some(i)
}

/// After a coordinator's step: appends its own records (home thread) and,
/// at its end (`done`), completes its transaction's slot. Returns the
/// durability target they need (0: none).
pub(super) fn log_coord_step(
    core: &Core,
    coord: &mut dyn commands::coord::Coordinator,
    done: bool,
) -> u64 {
    // Not taken without an AOF handle (nobody reads them then): a
    // coordinator that makes its record when taken makes none.
    let Some(a) = &core.aof else { return 0 };
    let records = coord.take_records();
    let home: Vec<(u64, engine::outbox::Chunk)> =
        records.into_iter().map(|c| (a.stamp(), c)).collect();
    let mut hold = 0;
    match coord.tx_id() {
        Some(tx) => {
            a.tx_parts(tx, home);
            if done {
                hold = a.tx_finish(tx, core.aof_led);
                core.count_led(u64::from(hold != 0));
            }
        }
        None => {
            for (_, ch) in home {
                let n = ch.records;
                hold = hold.max(a.append(ch, core.aof_led));
                core.count_led(n);
            }
        }
    }
    hold
}

/// Sends a plan's works to their shards (this thread's own go through the
/// local queue).
pub(super) fn send_plan(core: &mut Core, conn: ConnRef, plan: Plan) {
    for (idx, (shard, work)) in plan.jobs.into_iter().enumerate() {
        let idx = idx as u32;
        if shard == core.id {
            core.local.push_back(Msg::Job {
                conn,
                idx,
                work,
                gather: None,
            });
        } else {
            core.remote_works.push((shard, idx, work));
        }
    }
    send_remote(core, conn);
}

/// Sends the works of one step bound for other threads
/// (`Core::remote_works`): two or more share a gather, so their outputs
/// come home in one message (see `mailbox::Gather`); one goes alone.
fn send_remote(core: &mut Core, conn: ConnRef) {
    let n = core.remote_works.len();
    let gather = (n >= 2).then(|| {
        let mut g = core.gather();
        let slots = core.remote_works.iter().map(|w| w.1 as usize + 1).max();
        let slots = slots.unwrap_or(0);
        match std::sync::Arc::get_mut(&mut g) {
            Some(mine) => mine.arm(slots, n),
            None => {
                // INVARIANT: `Core::gather` hands out unshared gathers.
                let mut fresh = Gather::default();
                fresh.arm(slots, n);
                g = std::sync::Arc::new(fresh);
            }
        }
        g
    });
    let mut works = std::mem::take(&mut core.remote_works);
    for (shard, idx, work) in works.drain(..) {
        let msg = Msg::Job {
            conn,
            idx,
            work,
            gather: gather.clone(),
        };
        core.mailbox.send(shard, msg);
    }
    core.remote_works = works;
    if let Some(g) = gather {
        if core.gathers.len() < super::GATHERS_KEEP {
            core.gathers.push_back(g);
        }
    }
}

impl Core {
    /// A gather not in use: the oldest kept one once every shard let go of
    /// it (only this thread's reference left), or a new one.
    fn gather(&mut self) -> std::sync::Arc<Gather> {
        if let Some(g) = self.gathers.pop_front() {
            if std::sync::Arc::strong_count(&g) == 1 {
                return g;
            }
            // Still out: it goes to the back, behind newer ones.
            self.gathers.push_back(g);
        }
        std::sync::Arc::new(Gather::default())
    }
}

impl Worker {
    /// The outputs of a step's works that shared a gather, the last of
    /// them just in: each as its own `JobDone` would be.
    pub(super) fn jobs_done(&mut self, conn: ConnRef, gather: std::sync::Arc<Gather>) {
        let slot = conn.slot as usize;
        let plain = conn.slot != SYS_SLOT
            && conn.slot != super::DESK_SLOT
            && !self.conns.orphans.iter().any(|o| o.conn == conn);
        if !plain {
            for (idx, out, aof) in gather.outputs() {
                self.job_done(conn, idx, out, aof);
            }
            return;
        }
        // A connection's coordinator: the outputs go in together, and it
        // steps once (as after the last of them one by one).
        let c = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut());
        let ac = c
            .filter(|c| c.gen == conn.gen)
            .and_then(|c| c.coord.as_mut());
        let mut step = false;
        if let Some(ac) = ac {
            for (idx, out, aof) in gather.outputs() {
                ac.aof_hold = ac.aof_hold.max(aof);
                if let Some(r) = ac.results.get_mut(idx as usize) {
                    *r = Some(out);
                    ac.remaining -= 1;
                }
            }
            step = ac.remaining == 0;
        }
        // Dropped before stepping: the step's next works may reuse it.
        drop(gather);
        if step {
            self.outputs_in(slot);
        }
    }
}

/// Blocks a connection whose multi-shard command blocked: parks it on the
/// shard of every key it waits for, all sharing one claim.
pub(super) fn park_across(
    core: &mut Core,
    c: &mut Conn,
    slot: usize,
    resolved: commands::Resolved,
    seq: u64,
    p: commands::coord::Parked,
) {
    let claim = blocking::ClaimFlag::at(core.server.repl.masters_set());
    c.block = BlockPhase::Blocked(BlockTicket {
        seq,
        claim: claim.clone(),
        deadline_ms: c.keep_deadline_ms.take().unwrap_or(p.on.deadline_ms),
        cmd_id: resolved.id,
        redo: p.wake_home.then(|| p.args.clone()),
    });
    blocking::set_blocked(core.server.ops, &mut c.client, true);
    core.blocked_conns.push((slot, c.gen));
    let conn = ConnRef {
        thread: core.id as u16,
        slot: slot as u32,
        gen: c.gen,
    };
    let n = core.server.nshards;
    let mut by_shard: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for k in p.on.keys {
        let s = commands::table::shard_of(&k, n);
        match by_shard.iter_mut().find(|(x, _)| *x == s) {
            Some((_, v)) => v.push(k),
            None => by_shard.push((s, vec![k])),
        }
    }
    for (s, keys) in by_shard {
        let msg = Msg::Park {
            conn,
            seq,
            cmd: Box::new(blocking::ParkReq {
                claim: claim.clone(),
                resolved,
                handler: p.handler,
                args: p.args.clone(),
                call: p.call.clone(),
                resp3: c.client.resp3,
                keys,
                wake_home: p.wake_home,
            }),
        };
        if s == core.id {
            core.local.push_back(msg);
        } else {
            core.mailbox.send(s, msg);
        }
    }
}

/// Runs a script that touched keys of other shards again, over more keys,
/// in its reply slot (see `commands::script::wide`).
fn widen(core: &mut Core, c: &mut Conn, slot: usize, w: crate::server::mailbox::Widen) {
    super::request::strayed(core, w.args.args(), &w.keys);
    let mut out = Reply::new(c.client.resp3);
    let coord = {
        let mut ctx = ConnCtx {
            client: &mut c.client,
            out: &mut out,
            server: &core.server,
            home: core.id,
            key_shards: &[],
        };
        commands::script::wide::coordinator(
            w.resolved.spec,
            w.handler,
            &mut ctx,
            w.args.args(),
            w.keys,
        )
    };
    c.coord = Some(ActiveCoord {
        resolved: w.resolved,
        coord,
        results: Vec::new(),
        remaining: 0,
        seq: w.seq,
        started: Instant::now(),
        suppress: false,
        out: Reply::new(c.client.resp3),
        aof_hold: 0,
        slow_args: core.server.ops.slowlog.enabled().then(|| w.args.clone()),
    });
    advance(core, c, slot);
}

/// Runs a woken multi-shard blocking command again in its reply slot
/// `seq` (it blocks again, or replies).
pub(super) fn rerun(core: &mut Core, c: &mut Conn, slot: usize, seq: u64, args: &resp::OwnedArgs) {
    let mut out = Reply::new(c.client.resp3);
    let step = {
        let mut ctx = ConnCtx {
            client: &mut c.client,
            out: &mut out,
            server: &core.server,
            home: core.id,
            key_shards: &[],
        };
        // Dispatched before: MONITOR and CLIENT PAUSE saw it then.
        ctx.client.reprocessing = true;
        let step = dispatch(args.args(), &mut ctx, &mut core.stats, &mut core.scratch);
        ctx.client.reprocessing = false;
        step
    };
    match step {
        Step::Coord { resolved, coord } => {
            c.coord = Some(ActiveCoord {
                resolved,
                coord,
                results: Vec::new(),
                remaining: 0,
                seq,
                started: Instant::now(),
                suppress: false,
                out: Reply::new(c.client.resp3),
                aof_hold: 0,
                slow_args: core.server.ops.slowlog.enabled().then(|| args.clone()),
            });
            advance(core, c, slot);
        }
        // Same arguments, same routing: only an error reply lands here.
        _ => {
            c.keep_deadline_ms = None;
            c.complete(seq, out.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard's visit prefetches its own keys of the request, hashed
    /// once by the first stage for the second, and no other shard's.
    #[test]
    fn a_visit_prefetches_its_shards_keys_only() {
        let shard = engine::Shard::new(1, 2);
        let keys = b"aaabbbbcc".to_vec();
        let key = |shard: u32, start: u32, end: u32| KeyPf {
            shard,
            start,
            end,
            hash: 0,
        };
        // Sorted by shard, as `prefetch_plan` leaves them.
        let mut pf = vec![key(0, 0, 3), key(1, 3, 7), key(1, 7, 9), key(2, 0, 3)];
        let mut at = 0;
        prefetch_on(&shard, 1, &keys, &mut pf, &mut at, 1, 0);
        let d = &shard.dbs[1];
        assert_eq!(pf[1].hash, d.hash_of(b"bbbb"));
        assert_eq!(pf[2].hash, d.hash_of(b"cc"));
        assert_eq!((pf[0].hash, pf[3].hash), (0, 0), "other shards' keys");
        // The cursor is left past shard 1's keys: a later shard's visit
        // starts there, and a shard without keys moves it past nothing.
        assert_eq!(at, 3);
        prefetch_on(&shard, 1, &keys, &mut pf, &mut at, 2, 0);
        assert_eq!(at, 4);
        prefetch_on(&shard, 1, &keys, &mut pf, &mut at, 3, 0);
        assert_eq!(at, 4);
        // The second stage reuses the hashes; a database the shard lacks
        // is skipped.
        prefetch_on(&shard, 1, &keys, &mut pf, &mut 0, 1, 1);
        assert_eq!(pf[1].hash, d.hash_of(b"bbbb"));
        let mut other = vec![key(1, 3, 7)];
        prefetch_on(&shard, 5, &keys, &mut other, &mut 0, 1, 0);
        assert_eq!(other[0].hash, 0);
    }
}
