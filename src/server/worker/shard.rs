//! The shard side: running work other threads (or this one) sent to this
//! thread's shard. A batch of plain commands ([`Worker::run_batch`]) runs
//! in order and answers its home thread (or writes a direct reply, see
//! `request::mark_direct`); a coordinator's job takes its transaction
//! locks first ([`Worker::start_job`], `commands::tx`). Work that a
//! transaction's lock holds back is deferred (`Core::deferred`), in
//! arrival order per connection, and retried at each release
//! ([`Worker::retry_deferred`]). The shard's AOF records go to the writer
//! before anything lets another thread or a client see the writes
//! (`Core::aof_flush`).
//!
//! A shard never touches a socket: nothing here reads one, parses a
//! request, or knows a descriptor. The replies go home in the batch or
//! the job's output; the one exception, a direct reply, goes through the
//! write-only right the connection's stream granted the batch
//! (`conn::DirectReply`), never through the socket itself.
//!
//! Per thread: the lock table, the deferred queue and the open
//! transactions' records grow with the work held here, not with the number
//! of threads.

use std::collections::VecDeque;
use std::sync::Arc;

use commands::coord::{JobOut, ShardEnv, Work};
use commands::exec::run_shard;
use commands::tx::{LockTable, TxId};
use engine::Shard;
use resp::{Args, Reply};

use super::super::mailbox::{Batch, ConnRef, Gather, Msg};
use super::waiters::{park_waiter, retry_later, serve_ready};
use super::{tracking, Core, Deferred, Held, Waiter, Worker};

impl Core {
    /// Publishes this shard's change count (INFO's
    /// `rdb_changes_since_last_save`, save rules).
    #[inline]
    pub(super) fn publish_dirty(&self) {
        self.server
            .persist
            .publish_dirty(self.id, self.shard.dirty());
    }

    /// Under `aof_led`, counts `records` just appended towards the next
    /// lead (a finished transaction's slot counts as one).
    #[inline]
    pub(super) fn count_led(&self, records: u64) {
        if self.aof_led {
            self.aof_due.set(self.aof_due.get() + records);
        }
    }

    /// Hands this shard's records to the AOF writer: before any message or
    /// reply lets another thread or a client see the writes.
    #[inline]
    pub(super) fn aof_flush(&mut self) {
        if self.aof.is_some() != self.shard.outbox.records_on {
            self.aof_toggled();
        }
        if let Some(a) = &self.aof {
            if let Some(c) = self.shard.outbox.take() {
                let n = c.records;
                self.aof_last = a.append(c, self.aof_led);
                self.count_led(n);
            }
        }
    }

    /// CONFIG SET appendonly turned logging on or off on this shard (a job
    /// at the rewrite's instant, or at the stop): pick the writer up, or
    /// hand it what is left and let it go.
    #[cold]
    pub(super) fn aof_toggled(&mut self) {
        self.maybe_busy = true;
        if self.shard.outbox.records_on {
            self.aof = self
                .server
                .aof
                .get()
                .and_then(|c| {
                    c.as_any()
                        .downcast_ref::<crate::server::aof_rewrite::Rewriter>()
                })
                .and_then(|r| r.current());
            match &self.aof {
                Some(a) => {
                    let cfg = self.server.config();
                    a.set_policy(cfg.appendfsync);
                    a.set_timestamps(cfg.aof_timestamp_enabled);
                }
                None => self.shard.outbox.records_on = false,
            }
        } else if let Some(a) = self.aof.take() {
            if let Some(c) = self.shard.outbox.take() {
                self.aof_last = a.append(c, false);
            }
        }
    }
}

impl Worker {
    /// A batch of plain commands from a connection of another thread (or
    /// this one) to run on this shard.
    pub(super) fn exec_arrived(&mut self, conn: ConnRef, batch: Box<Batch>) {
        // Behind a deferred batch of the same connection: keep its
        // order.
        if self.core.deferred.iter().any(|d| d.conn == conn) {
            self.core.maybe_busy = true;
            self.core.deferred.push_back(Deferred {
                conn,
                what: Held::Batch {
                    batch,
                    next: 0,
                    arg: 0,
                },
            });
        } else {
            prefetch_batch(&self.core.shard, &batch);
            self.run_batch(conn, batch, 0, 0);
        }
    }

    /// A coordinator's job for this shard, its output going home alone.
    pub(super) fn job_arrived(&mut self, conn: ConnRef, idx: u32, work: Work) {
        self.job_arrived_with(conn, idx, work, None);
    }

    /// A coordinator's job for this shard, its output going into `gather`
    /// if there is one (see `mailbox::Gather`).
    pub(super) fn job_arrived_with(
        &mut self,
        conn: ConnRef,
        idx: u32,
        work: Work,
        gather: Option<Arc<Gather>>,
    ) {
        let behind = self.core.deferred.iter().any(|d| d.conn == conn);
        if behind && work.lock.as_ref().is_some_and(|r| r.nowait) {
            // Waiting behind the batch would be waiting for a lock
            // out of shard order (its transaction holds a higher
            // shard): a deadlock if the lock's holder waits for
            // that shard. Refused instead: it starts over in order.
            let Work { lock, job, release } = work;
            let w = Waiter {
                conn,
                idx,
                job,
                release: release.map(|t| t.get()),
                gather,
            };
            // INVARIANT: checked just above.
            self.refuse(w, lock.expect("a nowait request"));
        } else if behind {
            self.core.maybe_busy = true;
            self.core.deferred.push_back(Deferred {
                conn,
                what: Held::Job { idx, work, gather },
            });
        } else {
            self.start_job(conn, idx, work, gather);
        }
    }

    /// A job's output sent without running it (a withdrawn lock request,
    /// see `busy`), as [`Worker::refuse`] sends a refused one's.
    pub(super) fn job_out_of(
        &mut self,
        conn: ConnRef,
        idx: u32,
        gather: Option<Arc<Gather>>,
        out: JobOut,
    ) {
        self.job_out(conn, idx, gather, out, 0);
    }

    /// Sends a job's output where it goes: into its gather (the last one
    /// in sends the gather home), or alone (`send_job_out`).
    fn job_out(
        &mut self,
        conn: ConnRef,
        idx: u32,
        gather: Option<Arc<Gather>>,
        out: JobOut,
        aof: u64,
    ) {
        match gather {
            None => self.send_job_out(conn, idx, out, aof),
            Some(g) => {
                if g.add(idx, out, aof) {
                    let home = conn.thread as usize;
                    debug_assert_ne!(home, self.core.id, "a gather crosses threads");
                    self.core
                        .mailbox
                        .send(home, Msg::JobsDone { conn, gather: g });
                }
            }
        }
    }

    /// Runs a remote batch from command `next` on; stops and defers the
    /// rest at a command a transaction's lock holds back.
    pub(super) fn run_batch(
        &mut self,
        conn: ConnRef,
        mut batch: Box<Batch>,
        next: usize,
        arg: usize,
    ) {
        tracking::track_check(&mut self.core);
        let b = &mut *batch;
        let mut out = Reply::from_vec(std::mem::take(&mut b.reply), false);
        let mut first = arg;
        for i in next..b.cmds.len() {
            let cmd = &b.cmds[i];
            let args = b.args.sub(first, cmd.nargs as usize);
            if self.core.locks.any_held()
                && lock_blocked(
                    &self.core.locks,
                    cmd.resolved,
                    args,
                    cmd.call.db,
                    &mut self.core.scratch.positions,
                )
            {
                let busy = &self.core.server.ops.busy;
                if let Some(line) = busy_behind(busy, self.core.id, &b.cmds[i..]) {
                    // Behind a busy script's locks: `-BUSY` for the rest,
                    // as Redis answers every command then (see `busy`).
                    for cmd in &b.cmds[i..] {
                        out.set_resp3(cmd.resp3);
                        out.error_bytes(&line);
                        b.ends.push(out.len());
                        commands::exec::count_rejected(&mut self.core.stats, Some(cmd.resolved.id));
                        self.core.stats.count_error(&line);
                    }
                    break;
                }
                b.reply = out.into_bytes();
                self.core.maybe_busy = true;
                self.core.deferred.push_back(Deferred {
                    conn,
                    what: Held::Batch {
                        batch,
                        next: i,
                        arg: first,
                    },
                });
                return;
            }
            first += cmd.nargs as usize;
            out.set_resp3(cmd.resp3);
            let recorded = self.core.shard.outbox.len();
            let mut run = |shard: &mut engine::Shard, stats: &mut commands::ThreadStats| {
                run_shard(
                    cmd.resolved,
                    cmd.handler,
                    args,
                    shard,
                    cmd.call.clone(),
                    &mut out,
                    stats,
                )
            };
            let block = if cmd.resolved.spec.has(commands::table::flags::SCRIPT) {
                // This loop's connections are lent to the script (see
                // `busy`; the caller's lives on another thread).
                self.with_desk(|core| core.lending_inbox(run))
            } else {
                run(&mut self.core.shard, &mut self.core.stats)
            };
            self.after_desk();
            if let Some(on) = block.as_ref().filter(|on| on.widen) {
                // Not a block: the home runs the script again over more
                // keys (it is the batch's last command: see `execute`).
                b.widen = Some(Box::new(crate::server::mailbox::Widen {
                    seq: cmd.seq,
                    resolved: cmd.resolved,
                    handler: cmd.handler,
                    args: args.to_owned(),
                    keys: on.keys.clone(),
                }));
            } else if let Some(mut on) = block {
                let claim = cmd.claim.clone().unwrap_or_default();
                let (seq, resolved, handler, call, resp3) = (
                    cmd.seq,
                    cmd.resolved,
                    cmd.handler,
                    cmd.call.clone(),
                    cmd.resp3,
                );
                // Run again with the arguments it asked for (XREAD's `$`
                // resolved), else those received.
                let again = on.args.take().unwrap_or_else(|| args.to_owned());
                b.block = Some(park_waiter(
                    &mut self.core,
                    conn,
                    seq,
                    (resolved, handler, call, resp3, false),
                    again,
                    claim,
                    on,
                ));
            }
            if b.aof_from == usize::MAX && self.core.shard.outbox.len() != recorded {
                b.aof_from = i;
            }
            b.ends.push(out.len());
            if self.core.shard.dbs[cmd.call.db].has_ready() {
                // Serve blocked clients before the next command, as Redis
                // does after each command.
                b.reply = out.into_bytes();
                serve_ready(&mut self.core);
                out = Reply::from_vec(std::mem::take(&mut b.reply), false);
            }
        }
        b.reply = out.into_bytes();
        tracking::tag_touched(&mut self.core, Some(tracking::home_of(conn)));
        self.core.aof_flush();
        // Before the reply can reach the client (a direct reply goes out
        // just below): a later INFO on another thread counts these changes,
        // and the batch's keyspace events reach subscribers ahead of
        // anything the client sends once it has the reply (as in Redis).
        self.core.publish_dirty();
        self.publish_events();
        // maxmemory: the memory this batch took is seen by the command the
        // client sends next (see `evict`).
        self.core.shard.publish_memory();
        if b.aof_from != usize::MAX {
            // Every record of the batch went out with this append or an
            // earlier one of this thread.
            b.aof_hold = self.core.aof_last;
        }
        if conn.thread as usize == self.core.id {
            self.handle(Msg::ExecDone { conn, batch });
            return;
        }
        // A reply held for the AOF, or a blocked command's missing one,
        // goes home the usual way; so does one that may pass an output
        // buffer limit: the home thread checks it before a byte is written
        // and closes the client instead, as Redis (a direct write sent a
        // reply past the hard limit whole when the socket took it).
        let direct = b.direct.filter(|_| {
            b.block.is_none()
                && b.widen.is_none()
                && !(self.core.aof_always && b.aof_from != usize::MAX)
                && (b.reply.len() <= crate::server::conn::REPLY_CHUNK
                    || !self.core.cfg.obuf_limited())
        });
        if let Some(direct) = direct {
            let n = direct.write(&b.reply);
            b.direct_written = n;
            self.core.stats.net_output_bytes += n as u64;
            if n == b.reply.len() {
                self.core
                    .mailbox
                    .send_lazy(conn.thread as usize, Msg::ExecDone { conn, batch });
                return;
            }
        }
        self.core
            .mailbox
            .send(conn.thread as usize, Msg::ExecDone { conn, batch });
    }

    /// Runs a transaction's work whose locks are held, then its release
    /// and whatever the release lets go on.
    /// Takes a coordinator job's locks and runs it once they are granted.
    pub(super) fn start_job(
        &mut self,
        conn: ConnRef,
        idx: u32,
        work: Work,
        gather: Option<Arc<Gather>>,
    ) {
        // Locks, and the jobs that turn the outbox's records on: the
        // shard is no longer known free (see `Core::maybe_busy`).
        self.core.maybe_busy = true;
        let Work { lock, job, release } = work;
        let release = release.map(|t| t.get());
        let alone = lock.as_ref().is_some_and(|r| r.alone);
        // A lend round's last request (`commands::tx`, "Lent at the
        // grant"): lent at its grant, unless run by a call (from its
        // home's own thread, which a lend would stop).
        let lend = lock
            .as_ref()
            .filter(|r| r.lend && alone)
            .map(|r| r.tx)
            .filter(|_| self.core.lent_job.is_none() && conn.thread as usize != self.core.id);
        if let (Some(_), Some(req)) = (&self.core.aof, &lock) {
            if !self.core.aof_tx.iter().any(|(c, _, _)| *c == conn) {
                self.core.aof_tx.push((conn, req.tx, Vec::new()));
            }
        }
        let w = Waiter {
            conn,
            idx,
            job,
            release,
            gather,
        };
        let ready = match lock {
            Some(req) if req.nowait => match self.core.locks.try_acquire(req) {
                Ok(()) => Some(w),
                Err(req) => {
                    self.refuse(w, req);
                    None
                }
            },
            Some(req) => self.core.locks.acquire(req, w),
            None => Some(w),
        };
        match ready {
            // A lock request alone, granted: nothing ran, so nothing for
            // the job's epilogue to publish, hand to the AOF or retry (a
            // grant releases nothing); its transaction's records start
            // with its next work here, whose `run_work` flushes what came
            // before.
            Some(w) if alone && w.release.is_none() => match lend {
                Some(tx) => self.grant_lent(w, tx),
                None => self.job_out(w.conn, w.idx, w.gather, Box::new(()), 0),
            },
            Some(w) => self.run_work(w),
            None => {}
        }
    }

    /// A lend round's last request, granted at once (see
    /// `commands::script::lend`, "Released at the give-back, lent at the
    /// grant"): the shard is lent to the transaction's home
    /// thread, the grant sent at once, and this thread waits until the
    /// script's job gives the shard back (or withdraws the lend if the job
    /// does not take it within a bound). Given back at the script's end,
    /// the transaction's locks here go at once ([`Worker::release_here`]):
    /// its coordinator sends no release here.
    fn grant_lent(&mut self, w: Waiter, tx: TxId) {
        let reach = self.core.server.ops.reach.get();
        let lent = reach.is_some_and(|r| {
            let core = &mut self.core;
            r.lend_at_grant(core.id, tx, &mut core.shard, &core.stats, &self.conns)
        });
        let conn = w.conn;
        self.job_out(w.conn, w.idx, w.gather, Box::new(()), 0);
        let Some(r) = reach.filter(|_| lent) else {
            return;
        };
        // The grant goes out now, not at the end of the turn: the job
        // runs once its thread hears of it.
        self.spilled |= self.core.mailbox.flush();
        if r.hold_lent(self.core.id) {
            self.release_here(Some(conn), tx);
        }
    }

    /// Releases transaction `tx`'s locks here without a work (its shard
    /// lent to its script's job and given back at the script's end, see
    /// `commands::script::lend`): the epilogue and release a release-only
    /// work gets from [`Worker::run_work`], without its output. `conn`:
    /// the script's connection, where known (the lend made at the grant);
    /// its changes here are tagged with it for tracking (a caller that
    /// tracks keys never lends, so untagged is the same).
    pub(super) fn release_here(&mut self, conn: Option<ConnRef>, tx: TxId) {
        tracking::track_check(&mut self.core);
        tracking::tag_touched(&mut self.core, conn.map(tracking::home_of));
        let conn = conn.or_else(|| {
            let held = self.core.aof_tx.iter().find(|(_, t, _)| *t == tx);
            held.map(|(c, _, _)| *c)
        });
        if let (Some(_), Some(conn)) = (&self.core.aof, conn) {
            self.aof_job_done(conn, Some(tx));
        }
        self.core.publish_dirty();
        self.publish_events();
        if self.core.shard.dbs.iter().any(|d| d.has_ready()) {
            serve_ready(&mut self.core);
        }
        let mut queue = VecDeque::new();
        self.release_tx(tx, &mut queue);
        if let Some(w) = queue.pop_front() {
            self.run_queue(w, queue);
        }
    }

    /// A nowait lock request was refused: its job goes back unrun.
    #[cold]
    pub(super) fn refuse(&mut self, w: Waiter, req: commands::tx::LockReq) {
        // The transaction holds nothing here: it has no records to collect.
        self.core
            .aof_tx
            .retain(|(c, tx, parts)| !(*c == w.conn && *tx == req.tx && parts.is_empty()));
        let out: JobOut = Box::new(commands::tx::LockConflict { req, job: w.job });
        self.job_out(w.conn, w.idx, w.gather, out, 0);
    }

    pub(super) fn run_work(&mut self, w: Waiter) {
        // A queue (and its allocation) only once a release grants waiters.
        self.run_queue(w, VecDeque::new());
    }

    /// Runs `w`, then `queue` and what their releases grant, in order.
    fn run_queue(&mut self, w: Waiter, mut queue: VecDeque<Waiter>) {
        tracking::track_check(&mut self.core);
        let mut first = Some(w);
        while let Some(Waiter {
            conn,
            idx,
            job,
            release,
            gather,
        }) = first.take().or_else(|| queue.pop_front())
        {
            // Records made before the job are not the transaction's.
            self.core.aof_flush();
            let (out, lent) = {
                // The rest of the loop, for a script the job may run under
                // its locks (`busy::JobDesk`).
                let (core, desk) = self.split_desk(true);
                let mut clients = super::busy::JobDesk::new(desk, super::busy::inbox_of!(core));
                let restore = hide_expired(&core.server, &mut core.shard, conn);
                let mut env = ShardEnv {
                    shard: &mut core.shard,
                    stats: &mut core.stats,
                    clients: &mut clients,
                };
                let out = job.call(&mut env);
                if let Some(mode) = restore {
                    core.shard.expiry = mode;
                }
                (out, clients.lent())
            };
            if lent {
                self.settle_desk();
                self.after_desk();
            }
            tracking::tag_touched(&mut self.core, Some(tracking::home_of(conn)));
            let aof = match self.core.aof {
                Some(_) => self.aof_job_done(conn, release),
                None => 0,
            };
            self.core.publish_dirty();
            // The job's keyspace events go out before its completion can
            // reach the client (see the batch's epilogue).
            self.publish_events();
            self.job_out(conn, idx, gather, out, aof);
            if self.core.shard.dbs.iter().any(|d| d.has_ready()) {
                serve_ready(&mut self.core);
            }
            if let Some(tx) = release {
                self.release_tx(tx, &mut queue);
            }
        }
    }

    /// Releases `tx`'s locks here: retries what they held back, and
    /// queues the waiting requests they let go.
    fn release_tx(&mut self, tx: TxId, queue: &mut VecDeque<Waiter>) {
        self.core.locks.unlock(tx);
        retry_later(&mut self.core);
        // Plain commands first, so transactions cannot starve them
        // (nothing to do, the common case, unless a retry pass is
        // running: it must hear of this release).
        if self.core.retrying
            || !self.core.deferred.is_empty()
            || !self.core.lock_blocked.is_empty()
        {
            self.retry_deferred();
        }
        if self.core.locks.waiting_len() > 0 {
            queue.extend(self.core.locks.grant_waiting());
        }
    }

    /// A job of `conn` ran: its records join its transaction's (if it holds
    /// locks here), which go to the writer's slot at the release. Returns
    /// the durability target of records appended on their own (0: none;
    /// a transaction's reach the coordinator through its slot).
    pub(super) fn aof_job_done(&mut self, conn: ConnRef, release: Option<TxId>) -> u64 {
        let Some(a) = self.core.aof.clone() else {
            return 0;
        };
        let i = self.core.aof_tx.iter().position(|(c, _, _)| *c == conn);
        let Some(i) = i else {
            // The buffer was emptied before the job ran.
            let recorded = !self.core.shard.outbox.is_empty();
            self.core.aof_flush();
            return if recorded { self.core.aof_last } else { 0 };
        };
        if let Some(c) = self.core.shard.outbox.take() {
            self.core.aof_tx[i].2.push((a.stamp(), c));
        }
        if release.is_some() {
            let (_, tx, parts) = self.core.aof_tx.swap_remove(i);
            a.tx_parts(tx, parts);
        }
        0
    }

    /// After a release: re-runs held-back batches (in arrival order, each
    /// connection's behind its earlier ones) and this thread's connections
    /// waiting for a lock.
    pub(super) fn retry_deferred(&mut self) {
        // A job run from here may release locks and call this again; the
        // nested call only asks for another pass, so no entry overtakes an
        // earlier one of its connection still in `list`.
        if self.core.retrying {
            self.core.retry_again = true;
            return;
        }
        self.core.retrying = true;
        loop {
            self.core.retry_again = false;
            let list = std::mem::take(&mut self.core.deferred);
            for d in list {
                if self.core.deferred.iter().any(|e| e.conn == d.conn) {
                    self.core.maybe_busy = true;
                    self.core.deferred.push_back(d);
                    continue;
                }
                match d.what {
                    Held::Batch { batch, next, arg } => self.run_batch(d.conn, batch, next, arg),
                    Held::Job { idx, work, gather } => self.start_job(d.conn, idx, work, gather),
                }
            }
            if !self.core.retry_again {
                break;
            }
        }
        self.core.retrying = false;
        // Then the home side's connections that waited for the release.
        self.resume_lock_blocked();
    }
}

/// The `-BUSY` line for the commands `cmds` of a remote batch that wait
/// behind a lock of this shard (`id`) while a published script's
/// transaction holds it (`script::busy::Registry::locked_busy`); `None` when none
/// does, or one of them may run while busy (the batch waits then, keeping
/// its order).
fn busy_behind(
    busy: &commands::script::busy::Registry,
    id: usize,
    cmds: &[super::super::mailbox::BatchCmd],
) -> Option<Vec<u8>> {
    if !busy.locked_busy(id)
        || cmds
            .iter()
            .any(|c| c.resolved.spec.has(commands::table::flags::ALLOW_BUSY))
    {
        return None;
    }
    busy.refuse_if_busy(Some(&[id])).map(|e| e.line())
}

/// Overlaps the key-lookup cache misses of a whole batch: two passes of
/// prefetches (bucket slots, then first nodes) before any command runs.
pub(super) fn prefetch_batch(shard: &Shard, b: &Batch) {
    if b.cmds.len() < 2 {
        return;
    }
    for stage in 0..2 {
        let mut first = 0;
        for cmd in &b.cmds {
            let n = cmd.nargs as usize;
            let k = cmd.resolved.spec.keys.first;
            if k > 0 && (k as usize) < n {
                if let Some(db) = shard.dbs.get(cmd.call.db) {
                    db.prefetch(b.args.sub(first, n).get(k as usize), stage);
                }
            }
            first += n;
        }
    }
}

/// Whether a transaction's lock holds back a plain command.
pub(super) fn lock_blocked(
    locks: &LockTable<Waiter>,
    r: commands::Resolved,
    args: Args<'_>,
    db: usize,
    scratch: &mut Vec<usize>,
) -> bool {
    // A script may touch keys it did not declare (as on a standalone
    // Redis): any lock held on its shard holds it back.
    if r.spec.has(commands::table::flags::SCRIPT) {
        return true;
    }
    r.spec.key_positions(args, scratch);
    let write = r.spec.has(commands::table::flags::WRITE);
    locks.blocks(db, scratch.iter().map(|&p| args.get(p)), write)
}

/// Before a coordinated command's job for connection `conn` runs here: on
/// a replica, or while clients are paused, a normal client's job reads
/// keys past their deadline as missing without deleting them, as its
/// commands run on one shard do (`commands::exec`'s `Expiry::Hide`); the
/// master connection's sees them (its DEL of them is to come). Returns
/// the mode to put back after the job. Costs a compare on a master whose
/// clients are not paused.
#[inline]
pub(super) fn hide_expired(
    server: &commands::ServerShared,
    shard: &mut engine::Shard,
    conn: ConnRef,
) -> Option<engine::Expiry> {
    let mode = shard.expiry;
    if mode == engine::Expiry::Delete && !server.ops.pause.paused() {
        return None;
    }
    let repl = &server.repl;
    let at = (conn.thread as u64) << 32 | conn.slot as u64;
    let master = repl
        .master_conn_at
        .load(std::sync::atomic::Ordering::Acquire)
        == at
        && repl
            .master_conn_gen
            .load(std::sync::atomic::Ordering::Acquire)
            == u64::from(conn.gen);
    if master {
        return None;
    }
    shard.expiry = engine::Expiry::Hide;
    Some(mode)
}
