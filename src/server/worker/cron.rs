//! A worker's timed work: the cron (`hz` times a second: blocked keys'
//! bookkeeping, expiry, eviction, rehash, idle rings let go, buffers and
//! memory given back, output limits, client timeouts, the replica link),
//! blocked clients' deadlines, picking up CONFIG SET and role changes
//! (one atomic load per iteration), INFO's rates, and this shard's share
//! of a running background save.
//!
//! Per thread: a few counters; each tick visits this thread's connections
//! once, never the other threads'.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use commands::exec;
use resp::Reply;

use super::super::blocking::{self, BlockPhase};
use super::clock::WallAnchor;
use super::waiters::retry_later;
use super::{memory, Cached, Worker};
use crate::log;

impl Worker {
    /// This shard's share of a running background save, once per loop
    /// iteration; returns how long the next poll may wait.
    pub(super) fn save_step(&mut self, busy: bool) -> Option<Duration> {
        let c = &mut self.core;
        c.publish_dirty();
        match commands::persist::tick(&c.server.persist, &mut c.shard, busy) {
            commands::persist::Tick::Idle => None,
            commands::persist::Tick::Busy => Some(Duration::ZERO),
            commands::persist::Tick::Throttled => Some(Duration::from_millis(1)),
        }
    }

    /// Thread 0, each cron tick: starts a background save when a `save`
    /// rule is due, as Redis's serverCron does; also a scheduled save or
    /// AOF rewrite, and an automatic rewrite.
    pub(super) fn save_rules_cron(&mut self) {
        if self.core.id != 0 || self.core.sys.is_some() {
            return;
        }
        let server = self.core.server.clone();
        if let Some(coord) =
            commands::persist::cron_due(&server).or_else(|| crate::server::repl::cron_due(&server))
        {
            let mut set = commands::tx::LockSet::default();
            set.whole(server.nshards, commands::tx::Mode::Read);
            let coord = commands::tx::TxCoord::wrap(self.core.id, coord, set);
            self.start_sys(coord);
        }
    }

    /// Picks up CONFIG SET and role changes (REPLICAOF, a failover) from
    /// any thread: one atomic load per iteration. A role change bumps the
    /// generation too (`ServerShared::set_role`), before REPLICAOF replies:
    /// a write script queued in MULTI while master meets READONLY at an
    /// EXEC after that reply on every shard, as in Redis (Tcl
    /// unit/scripting, "no-writes shebang flag on replica"), not from the
    /// shard's next cron tick on (up to 1/hz later: that test failed once
    /// in three with the shards apart).
    #[inline]
    pub(super) fn refresh_config(&mut self) {
        let gen = self.core.server.config_gen.load(Ordering::Acquire);
        if gen != self.core.cfg_gen {
            self.reload_config(gen);
        }
    }

    /// The shard as the role says (REPLICAOF, from any thread): a
    /// replica's keeps keys past their deadline (see `engine::Expiry`)
    /// and, with `replica-read-only`, refuses its normal clients' scripts'
    /// writes. At start and at each new configuration generation, which
    /// every role change makes ([`Worker::refresh_config`]).
    pub(super) fn refresh_role(&mut self) {
        let replica = self.core.server.repl.replica_fast();
        if !replica {
            self.core.shard.forget_replica_keys();
        }
        if replica != (self.core.shard.expiry != engine::Expiry::Delete) {
            self.core.shard.expiry = if replica {
                engine::Expiry::Keep
            } else {
                engine::Expiry::Delete
            };
        }
        let ro = replica && self.core.cfg.replica_read_only;
        if ro != self.core.shard.read_only_replica {
            self.core.shard.read_only_replica = ro;
        }
        self.unblock_for_new_master();
    }

    fn reload_config(&mut self, gen: u64) {
        self.core.cfg_gen = gen;
        self.core.cfg = Cached::read(&self.core.server);
        log::set_level(self.core.cfg.loglevel);
        if let Some(ls) = crate::server::tls::take_listeners(self.core.id) {
            self.swap_listeners(ls, true);
        }
        if let Some(ls) = crate::server::take_listeners(self.core.id) {
            self.swap_listeners(ls, false);
        }
        self.core.shard.lfu = commands::keys::lfu_params(&self.core.server);
        self.core.shard.enc = commands::ctx::enc_limits(&self.core.server);
        self.core.shard.rdb_compression = self.core.server.config().rdbcompression;
        let notify = self.core.server.config().notify_keyspace_events;
        self.core.shard.set_notify(notify);
        if let Some(a) = &self.core.aof {
            let (p, ts) = {
                let cfg = self
                    .core
                    .server
                    .config
                    .read()
                    .unwrap_or_else(|e| e.into_inner());
                (cfg.appendfsync, cfg.aof_timestamp_enabled)
            };
            a.set_policy(p);
            a.set_timestamps(ts);
        }
        commands::memory::configure_shard(&mut self.core.shard, &self.core.server);
        // After `cfg` (`replica-read-only`).
        self.refresh_role();
    }

    /// Times out this thread's blocked connections whose deadline passed;
    /// returns the milliseconds until the next deadline, if any.
    pub(super) fn expire_blocked(&mut self) -> Option<u64> {
        if self.core.blocked_conns.is_empty() {
            return None;
        }
        let now = engine::now_ms();
        let mut next: Option<u64> = None;
        for (slot, gen) in std::mem::take(&mut self.core.blocked_conns) {
            let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
                continue;
            };
            if c.gen != gen {
                continue;
            }
            let BlockPhase::Blocked(t) = &c.block else {
                continue;
            };
            if t.deadline_ms == 0 || t.deadline_ms > now {
                if t.deadline_ms != 0 {
                    let left = t.deadline_ms - now;
                    next = Some(next.map_or(left, |n| n.min(left)));
                }
                self.core.blocked_conns.push((slot, gen));
                continue;
            }
            if !t.claim.take() {
                // Served: the reply is on its way.
                continue;
            }
            let (seq, id) = (t.seq, t.cmd_id);
            // Redis 7.0 answers every timed-out list/zset pop with a null
            // array, BLMOVE included (`replyToBlockedClientTimedOut`).
            let mut r = Reply::new(c.client.resp3);
            r.null_array();
            c.complete(seq, r.as_bytes());
            c.block = BlockPhase::None;
            blocking::set_blocked(self.core.server.ops, &mut c.client, false);
            let ops = self.core.server.ops;
            let _ = exec::record(&mut self.core.stats, ops, id, Instant::now(), false);
            self.conns.mark_dirty(slot);
            self.conns.resume.push(slot);
        }
        next
    }

    pub(super) fn cron(&mut self) {
        let hz = self.core.cfg.hz;
        for (db, k) in self.core.waiters.sweep() {
            self.core.shard.dbs[db].remove_blocking(&k);
        }
        // Keys held back for a waiter woken home whose command never came
        // back (it disconnected): serve the others after a while.
        let w = &self.core.waiters;
        if !w.later.is_empty()
            && self.core.shard.now_ms.saturating_sub(w.later_since_ms) >= blocking::LATER_RETRY_MS
            && !self.core.locks.any_held()
        {
            retry_later(&mut self.core);
        }
        // Watchers that went away (UNWATCH, EXEC, disconnect) without
        // their keys changing: forget them, or a client that WATCHes
        // ever-new keys would grow the table without bound.
        for d in self.core.shard.dbs.iter_mut() {
            d.prune_watches();
        }
        let period = Duration::from_millis(1000 / u64::from(hz));
        // The wall clock read again (a step of it is seen from here on:
        // see `clock`), and the shard's time brought up to date.
        self.wall = WallAnchor::now();
        self.next_cron = self.wall.at() + period;
        // Redis's slow cycle: at most 25 % of the cron period.
        let budget_us = 250_000 / u64::from(hz);
        let now = self.wall.turn(self.wall.at());
        self.core.shard.set_now_ms(now.wall_ms);
        self.sample_rates();
        // Listeners are edge-triggered: after an accept error (EMFILE) the
        // backlog would wait for the next new connection. Retry each tick.
        for i in 0..self.tcp.len() {
            self.accept_tcp(i, false);
        }
        for i in 0..self.tls.len() {
            self.accept_tcp(i, true);
        }
        if self.unix.is_some() {
            self.accept_unix();
        }
        // No key expires while clients are paused (see `commands::ops::pause`)
        // or while DEBUG SET-ACTIVE-EXPIRE 0 holds, nor while a script
        // running under a transaction's locks may hold this shard (its
        // time is frozen at its start: see `commands::script::every`).
        let ops = self.core.server.ops;
        if !ops.pause.paused()
            && ops.active_expire.load(std::sync::atomic::Ordering::Relaxed)
            && !(self.core.locks.any_held() && ops.busy.scripts_under_locks())
        {
            let started = Instant::now();
            self.core.shard.active_expire_cycle(budget_us);
            self.core.shard.expire_replica_keys();
            (self.core.server.ops.latency).add_if_needed("expire-cycle", started);
        }
        self.save_rules_cron();
        self.replica_cron();
        // maxmemory: this shard's share of any excess, even without
        // commands (see engine::evict).
        self.core.shard.evict_cron(budget_us);
        // Redis's incrementallyRehash, at most 1 ms: shrink work a table
        // still owes (tables split and merge as they go, see ds::dict, so
        // this rarely finds any).
        self.core.shard.rehash_cron(1000);
        // Rings this thread no longer uses (see `mailbox`).
        self.core.mailbox.trim();
        // A scripts' VM SCRIPT FLUSH made stale goes now (see
        // `commands::script::vm`).
        commands::script::vm::cron();
        // Freed memory back to the system, and idle connections' buffers
        // shrunk (Redis's clientsCronResizeQueryBuffer/OutputBuffer).
        let now_ms = self.core.shard.now_ms;
        let commands = self.core.server.sampled_commands.load(Ordering::Relaxed);
        let tick_ms = 1000 / u64::from(hz);
        memory::reclaim_cron(now_ms, self.core.server.nshards, commands, tick_ms);
        let now_s = now_ms / 1000;
        self.conns.peaks.sample(now_s, 0, 0);
        let mut over = Vec::new();
        // This loop's connections' bytes, for the scripts that cannot
        // visit them (see `ClientMem::publish_conns`).
        let (mut conn_bytes, mut conns) = (0u64, 0u64);
        for (slot, c) in self.conns.slots.iter_mut().enumerate() {
            let Some(c) = c.as_mut() else { continue };
            memory::resize_buffers(c, now_ms);
            conn_bytes += c.mem_total() as u64;
            conns += 1;
            let out = c.obuf_bytes();
            self.conns
                .peaks
                .sample(now_s, c.mem_input(), c.obuf_counted());
            // Output limits also while no reply is added (a client paused
            // with output pending stays above the soft limit).
            if out > 0 && c.check_obuf(&self.core.cfg.obuf, now_ms) {
                over.push(slot);
            }
        }
        (self.core.server.client_mem).publish_conns(self.core.id, conn_bytes, conns);
        // This shard's keys, for the scripts that cannot read it.
        (self.core.server.key_figures).publish(&self.core.shard);
        // Their CLIENT LIST lines, only while scripts may list them.
        let wanted = (ops.scripts_call_noscript).load(Ordering::Relaxed);
        let listing = &self.core.server.client_mem.listing;
        listing.publish(self.core.id, now_ms, wanted, &self.conns);
        for slot in over {
            self.close_conn(slot);
        }
        self.evict_clients();
        if self.core.cfg.timeout_s > 0 {
            let now = self.core.shard.now_ms;
            let limit_ms = self.core.cfg.timeout_s * 1000;
            let idle: Vec<usize> = self
                .conns
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let c = c.as_ref()?;
                    let idle = now.saturating_sub(c.client.last_interaction_ms) > limit_ms;
                    // The master's link has `repl-timeout` instead.
                    (idle && c.pending.is_empty() && c.coord.is_none() && !c.client.master)
                        .then_some(i)
                })
                .collect();
            for slot in idle {
                log::verbose(format_args!("Closing idle client"));
                self.close_conn(slot);
            }
        }
    }

    /// INFO's instantaneous_ops_per_sec and kbps: every thread adds what
    /// it did since its last tick to shared totals; thread 0 turns the
    /// totals into rates about once a second.
    pub(super) fn sample_rates(&mut self) {
        let st = &self.core.stats;
        let now = (st.total_commands, st.net_input_bytes, st.net_output_bytes);
        let server = &self.core.server;
        // Counters reset by CONFIG RESETSTAT start from zero again.
        let delta = |a: u64, b: u64| a.saturating_sub(b);
        server
            .sampled_commands
            .fetch_add(delta(now.0, self.reported.0), Ordering::Relaxed);
        server
            .sampled_net_in
            .fetch_add(delta(now.1, self.reported.1), Ordering::Relaxed);
        server
            .sampled_net_out
            .fetch_add(delta(now.2, self.reported.2), Ordering::Relaxed);
        self.reported = now;
        if self.core.id != 0 {
            return;
        }
        let t = Instant::now();
        let totals = (
            server.sampled_commands.load(Ordering::Relaxed),
            server.sampled_net_in.load(Ordering::Relaxed),
            server.sampled_net_out.load(Ordering::Relaxed),
        );
        match self.rate_base {
            Some((t0, c0, i0, o0)) if t.duration_since(t0) >= Duration::from_secs(1) => {
                let secs = t.duration_since(t0).as_secs_f64();
                let ops = (totals.0 - c0) as f64 / secs;
                let kin = (totals.1 - i0) as f64 / secs / 1024.0;
                let kout = (totals.2 - o0) as f64 / secs / 1024.0;
                server
                    .ops_per_sec
                    .store(ops.round() as u64, Ordering::Relaxed);
                server
                    .input_kbps_bits
                    .store(kin.to_bits(), Ordering::Relaxed);
                server
                    .output_kbps_bits
                    .store(kout.to_bits(), Ordering::Relaxed);
                self.rate_base = Some((t, totals.0, totals.1, totals.2));
            }
            Some(_) => {}
            None => self.rate_base = Some((t, totals.0, totals.1, totals.2)),
        }
    }
}
