//! SAVE, BGSAVE and BGREWRITEAOF, and the coordinators other layers start:
//! a replication sync's snapshot, an AOF rewrite, and the cron's save
//! rules and automatic rewrites. Each begins with a job on every shard at
//! one instant (under whole-keyspace Read locks).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use engine::Shard;
use resp::{Args, Reply};

use crate::coord::{Coordinator, OneStep, Plan, ShardEnv};
use crate::ctx::{ClientState, ConnCtx, ServerShared};
use crate::error::CmdError;
use crate::util::eq_ic;

use super::{log, Kind, OnDone, SaveMsg, SyncTarget, RETRY_DELAY_S, STEP_BYTES};

/// The job that begins a snapshot on one shard.
fn begin_job(
    compress: bool,
    begin_dirty: Arc<Vec<AtomicU64>>,
) -> impl Fn(&mut ShardEnv<'_>) + Send + Clone + 'static {
    begin_job_as(compress, false, begin_dirty)
}

/// [`begin_job`], writing commands instead of RDB when `cmds`.
fn begin_job_as(
    compress: bool,
    cmds: bool,
    begin_dirty: Arc<Vec<AtomicU64>>,
) -> impl Fn(&mut ShardEnv<'_>) + Send + Clone + 'static {
    move |env: &mut ShardEnv<'_>| {
        begin_dirty[env.shard.id].store(env.shard.dirty(), Ordering::Relaxed);
        env.shard.snapshot_begin_as(compress, cmds);
    }
}

/// The coordinator that begins a background save on every shard (BGSAVE,
/// and the `save` rules through the runtime). Its caller wraps it in the
/// whole-keyspace Read lock.
pub fn bgsave_coordinator(server: &Arc<ServerShared>) -> Result<Box<dyn Coordinator>, CmdError> {
    let (begin_dirty, _done) = server.persist.start(server, Kind::Bgsave)?;
    let compress = server.config().rdbcompression;
    let mut plan = Plan::default();
    plan.run_all(server.nshards, begin_job(compress, begin_dirty));
    Ok(OneStep::boxed(
        plan,
        |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
            out.simple("Background saving started");
            Ok(())
        },
    ))
}

/// The coordinator of a replication full sync (run by the runtime under
/// the whole-keyspace Read locks): begins a snapshot on every shard,
/// turning each shard's records on (the replication stream needs them from
/// the instant on), then, still under every lock, runs `at_instant` (the
/// runtime marks the stream there: the replicas' stream starts at that
/// offset). The RDB goes to `dbfilename` (a BGSAVE, as Redis's disk-based
/// sync) or to `target`'s sink; `on_done` gets the outcome once the file
/// is in place or the last byte was written.
pub fn sync_coordinator(
    server: &Arc<ServerShared>,
    target: SyncTarget,
    at_instant: Box<dyn FnOnce() + Send>,
    on_done: OnDone,
    stream_db: Option<usize>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let (kind, sink) = match target {
        SyncTarget::Disk => (Kind::Bgsave, None),
        SyncTarget::Socket(w) => (Kind::Sync, Some(w)),
    };
    if kind == Kind::Bgsave {
        log(false, "Starting BGSAVE for SYNC with target: disk");
    }
    let (begin_dirty, _done) =
        server
            .persist
            .start_with(server, kind, Some(on_done), sink, stream_db)?;
    let compress = server.config().rdbcompression;
    let begin = begin_job(compress, begin_dirty);
    let mut plan = Plan::default();
    plan.run_all(server.nshards, move |env: &mut ShardEnv<'_>| {
        env.shard.outbox.records_on = true;
        begin(env)
    });
    Ok(Box::new(AtInstant {
        begin: Some(plan),
        at_instant: Some(at_instant),
        reply: "OK",
    }))
}

/// A coordinator (run under the whole-keyspace lock) that runs `job` on
/// every shard, then `at_instant` while every lock is still held (the
/// replication stream's end: shards stop recording, then the writer lets
/// it go).
pub fn all_shards_then(
    server: &Arc<ServerShared>,
    job: impl Fn(&mut Shard) + Send + Clone + 'static,
    at_instant: Box<dyn FnOnce() + Send>,
) -> Box<dyn Coordinator> {
    let mut plan = Plan::default();
    plan.run_all(server.nshards, move |env: &mut ShardEnv<'_>| job(env.shard));
    Box::new(AtInstant {
        begin: Some(plan),
        at_instant: Some(at_instant),
        reply: "OK",
    })
}

/// A coordinator that only replies (a scheduled save or rewrite).
fn reply_only(line: &'static str) -> Box<dyn Coordinator> {
    Box::new(AtInstant {
        begin: None,
        at_instant: None,
        reply: line,
    })
}

/// BGSAVE [SCHEDULE]
pub(super) fn bgsave(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let schedule = match args.len() {
        1 => false,
        2 if eq_ic(args.get(1), "schedule") => true,
        _ => return Err(CmdError::Syntax),
    };
    let p = &c.server.persist;
    {
        let mut st = p.lock();
        match st.running.as_ref().map(|r| r.kind) {
            Some(Kind::Save | Kind::Bgsave) => {
                return Err(CmdError::err("Background save already in progress"))
            }
            // Inside EXEC, Redis never forks: the save waits for the cron.
            Some(Kind::Rewrite) if schedule || c.client.in_exec => {
                st.bgsave_scheduled = true;
                return Ok(reply_only("Background saving scheduled"));
            }
            None if c.client.in_exec => {
                st.bgsave_scheduled = true;
                return Ok(reply_only("Background saving scheduled"));
            }
            _ => {}
        }
    }
    bgsave_coordinator(c.server)
}

/// BGREWRITEAOF: a snapshot written as the AOF's new base, begun at the
/// instant logging moves to a new incr file (see [`AofControl`]).
pub(super) fn bgrewriteaof(
    c: &mut ConnCtx<'_>,
    _args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    {
        let mut st = c.server.persist.lock();
        match st.running.as_ref().map(|r| r.kind) {
            Some(Kind::Rewrite) => {
                return Err(CmdError::err(
                    "Background append only file rewriting already in progress",
                ))
            }
            Some(_) => {
                st.rewrite_scheduled = true;
                return Ok(reply_only(
                    "Background append only file rewriting scheduled",
                ));
            }
            // Inside EXEC, Redis never forks: the rewrite waits for the
            // cron.
            None if c.client.in_exec => {
                st.rewrite_scheduled = true;
                return Ok(reply_only(
                    "Background append only file rewriting scheduled",
                ));
            }
            None => {}
        }
    }
    rewrite_coordinator(c.server)
}

/// The two-step coordinator of a rewrite: begin the snapshot on every
/// shard, then (still under every lock) switch the AOF to its new incr
/// file; the locks go with the empty last step.
pub fn rewrite_coordinator(server: &Arc<ServerShared>) -> Result<Box<dyn Coordinator>, CmdError> {
    // While the AOF is being turned on, a rewrite is the one that
    // completes it (shards log from its instant on).
    let waiting = server.aof.get().is_some_and(|a| a.waiting_rewrite());
    rewrite_with(
        server,
        waiting,
        "Background append only file rewriting started",
    )
}

/// `CONFIG SET appendonly yes`, once the AOF's writer started on its
/// temporary incr file (`AofControl::enable`): the rewrite that completes
/// it, begun by the command itself (run under its whole-keyspace Read
/// locks: every shard's snapshot and logging begin at one instant before
/// its `+OK`), as Redis's startAppendOnly forks it at once. `None`: it is
/// scheduled for the cron instead (inside EXEC, or while another save or
/// rewrite runs, as in Redis; or if it could not begin now), and
/// `Persist::request_aof_on` says so.
pub fn enable_rewrite(server: &Arc<ServerShared>, in_exec: bool) -> Option<Box<dyn Coordinator>> {
    let p = &server.persist;
    if in_exec || !p.take_aof_on() {
        p.request_aof_on(in_exec);
        return None;
    }
    match rewrite_with(server, true, "OK") {
        Ok(coord) => Some(coord),
        Err(_) => {
            // Logged by `Persist::start_with`; the cron tries again.
            p.request_aof_on(false);
            None
        }
    }
}

/// A rewrite; with `enable` (CONFIG SET appendonly yes) every shard also
/// starts logging at the snapshot instant. `reply`: the command's, once
/// every shard began.
fn rewrite_with(
    server: &Arc<ServerShared>,
    enable: bool,
    reply: &'static str,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let (begin_dirty, _done) = server.persist.start(server, Kind::Rewrite)?;
    let cfg = server.config();
    let mut plan = Plan::default();
    let begin = begin_job_as(cfg.rdbcompression, !cfg.aof_use_rdb_preamble, begin_dirty);
    plan.run_all(server.nshards, move |env: &mut ShardEnv<'_>| {
        if enable {
            env.shard.outbox.records_on = true;
        }
        begin(env)
    });
    let aof = server.aof.get().cloned();
    Ok(Box::new(AtInstant {
        begin: Some(plan),
        at_instant: Some(Box::new(move || {
            if let Some(a) = aof {
                a.switch();
            }
        })),
        reply,
    }))
}

struct AtInstant {
    begin: Option<Plan>,
    at_instant: Option<Box<dyn FnOnce() + Send>>,
    reply: &'static str,
}

impl Coordinator for AtInstant {
    fn step(
        &mut self,
        _results: Vec<crate::coord::JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if let Some(p) = self.begin.take() {
            *plan = p;
            return Ok(());
        }
        if let Some(f) = self.at_instant.take() {
            f();
        }
        out.simple(self.reply);
        Ok(())
    }
}

/// Thread 0's cron: a save or rewrite scheduled while the other ran, or
/// an automatic rewrite (`auto-aof-rewrite-percentage` and `-min-size`,
/// as Redis's serverCron), when nothing runs. Returns the coordinator to
/// start (under whole-keyspace Read locks).
pub fn cron_due(server: &Arc<ServerShared>) -> Option<Box<dyn Coordinator>> {
    let p = &server.persist;
    let (bgsave, rewrite, aof_request) = {
        let mut st = p.lock();
        if st.running.is_some() {
            return None;
        }
        (
            st.bgsave_scheduled,
            st.rewrite_scheduled,
            st.aof_request.take(),
        )
    };
    if let (Some(false), Some(aof)) = (aof_request, server.aof.get()) {
        if aof.enabled() {
            // Redis's stopAppendOnly: a rewrite for the AOF being turned
            // on is no longer wanted.
            p.lock().rewrite_scheduled = false;
            let mut plan = Plan::default();
            // The replication stream keeps the shards recording.
            let keep = server.repl.streaming();
            plan.run_all(server.nshards, move |env: &mut ShardEnv<'_>| {
                env.shard.outbox.records_on = keep;
            });
            let aof = aof.clone();
            return Some(Box::new(AtInstant {
                begin: Some(plan),
                at_instant: Some(Box::new(move || {
                    aof.disable();
                })),
                reply: "OK",
            }));
        }
    }
    let waiting = server.aof.get().is_some_and(|a| a.waiting_rewrite());
    if (rewrite || (!waiting && auto_rewrite_due(server))) && !p.rewrite_limited() {
        return rewrite_coordinator(server).ok();
    }
    if let Some((changes, secs)) = p.rules_due(server) {
        log(
            false,
            &format!("{changes} changes in {secs} seconds. Saving..."),
        );
        return bgsave_coordinator(server).ok();
    }
    if bgsave {
        return bgsave_coordinator(server).ok();
    }
    None
}

fn auto_rewrite_due(server: &ServerShared) -> bool {
    let Some(aof) = server.aof.get() else {
        return false;
    };
    if !aof.enabled() {
        return false;
    }
    let cfg = server.config();
    if cfg.auto_aof_rewrite_percentage == 0 {
        return false;
    }
    let (base, size) = aof.sizes();
    let st = server.persist.lock();
    if !st.rewrite_ok && st.last_try_s + RETRY_DELAY_S > engine::now_ms() / 1000 {
        return false;
    }
    size > cfg.auto_aof_rewrite_min_size
        && size.saturating_sub(base) * 100 / base.max(1) >= cfg.auto_aof_rewrite_percentage
}

/// SAVE: every shard writes its whole part inside its job; the reply
/// waits for the file to be renamed into place.
pub(super) fn save(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let (plan, done) = save_plan(c.server, true)?;
    Ok(OneStep::boxed(
        plan,
        move |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
            match done.recv() {
                Ok(Ok(())) => out.ok(),
                _ => out.error_bytes(b"ERR"),
            }
            Ok(())
        },
    ))
}

/// The jobs of a synchronous save to `dbfilename` (SAVE, DEBUG RELOAD),
/// each writing its shard's whole part, and where the outcome arrives
/// once the file is in place. `counted`: INFO `rdb_saves` counts it
/// (Redis counts SAVE's in `saveCommand`; DEBUG RELOAD's `rdbSave` is
/// not counted). `Err` when a save or rewrite runs already.
pub(super) fn save_plan(
    server: &Arc<crate::ctx::ServerShared>,
    counted: bool,
) -> Result<(Plan, std::sync::mpsc::Receiver<Result<(), String>>), CmdError> {
    let (begin_dirty, done) = server.persist.start(server, Kind::Save)?;
    if !counted {
        let mut st = server.persist.lock();
        st.saves = st.saves.saturating_sub(1);
    }
    let compress = server.config().rdbcompression;
    let link = server.persist.link();
    let Some(link) = link else {
        return Err(CmdError::err("Background save already in progress"));
    };
    let (tx, gate, abort) = (link.tx, link.gate, link.abort);
    let mut plan = Plan::default();
    plan.run_all(server.nshards, move |env: &mut ShardEnv<'_>| {
        begin_dirty[env.shard.id].store(env.shard.dirty(), Ordering::Relaxed);
        let mut ok = true;
        let me = env.shard.id;
        let keys = env.shard.snapshot_all(compress, STEP_BYTES, |b, open| {
            ok = ok && gate.send(&tx, me, b, open, &abort);
        });
        if ok {
            let _ = tx.send(SaveMsg::Done { keys });
        }
    });
    Ok((plan, done))
}
