//! MULTI / EXEC / DISCARD / WATCH / UNWATCH.
//!
//! Queueing happens in `dispatch` (see `admit`): while a connection is in MULTI,
//! every command but EXEC, DISCARD, MULTI, WATCH, QUIT and RESET is
//! checked (name, arity, then every admission check) and queued with `+QUEUED`; a rejected
//! one dooms the transaction (EXECABORT).
//!
//! EXEC runs the queue as one transaction ([`crate::tx`]): it locks every
//! key the queued commands name (Write for writing commands, Read for the
//! others and for WATCHed keys; the whole shard for keyspace-wide commands
//! such as FLUSHALL or DBSIZE), checks the WATCH flag, and then runs the
//! commands in order. Consecutive commands that each stay on one shard run
//! as one job per shard; a multi-shard command inside the block runs its
//! own coordinator's steps (unwrapped: the block holds its locks already);
//! connection commands (SELECT, PING ...) run on the home thread in
//! order. A block whose keys all sit on one shard is a single message to
//! that shard: lock, check WATCH, run, release.
//!
//! A script runs in a segment of its own shard's commands only: the
//! commands of other shards before it run first, those after it once it
//! ended. Redis answers WATCH while a script is busy, and counts the
//! block's later writes as after that WATCH; run beside the script, a
//! later command on another shard (whose loop is free) could write before
//! a WATCH answered meanwhile, and the watcher's EXEC would miss it.
//! Cost: a round trip more for a block with a script and commands of
//! another shard next to it (none when they all stay on one shard).
//!
//! WATCH registers the keys with their shards (`engine::Db::watch`); any
//! change to a watched key (a write from any connection, expiry, FLUSHDB,
//! FLUSHALL, SWAPDB) sets the connection's flag, and EXEC then replies
//! with a null array without running anything. Keys of one shard a long
//! script holds are handed to that script instead, whose thread registers
//! them before the script's next command (`script::busy::Registry::watch_while_busy`):
//! WATCH is answered at once while busy, as in Redis. So are keys of the
//! home shard of a long script on gathered copies (which holds no
//! shard): parked with the script, watched on its copies from its next
//! command, and registered on that shard after it (those it writes back,
//! right after the write-back), so only a write the script makes after
//! the WATCH dooms the transaction, as in Redis
//! (`script::busy::Registry::watch_stopped`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use resp::{Args, OwnedArgs, Reply};

use crate::coord::{outputs, Coordinator, JobOut, Plan, ShardEnv};
use crate::ctx::{ClientState, ConnCtx, MultiState, ServerShared, WatchState};
use crate::error::CmdError;
use crate::exec::ShardCall;
use crate::table::{
    flags::*, keys, registry, shard_of, target, CommandSpec, Exec, Target, NO_KEYS,
};
use crate::tx::{LockSet, Mode, TxCoord};
use crate::util::parse_db_index;

const TX_FLAGS: u32 = NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY;

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "multi",
        1,
        TX_FLAGS,
        NO_KEYS,
        Exec::Conn(multi),
        &["fast", "transaction"],
    ),
    CommandSpec::new(
        "exec",
        1,
        NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG,
        NO_KEYS,
        Exec::Coord(exec),
        &["slow", "transaction"],
    ),
    CommandSpec::new(
        "discard",
        1,
        TX_FLAGS,
        NO_KEYS,
        Exec::Conn(discard),
        &["fast", "transaction"],
    ),
    CommandSpec::new(
        "watch",
        -2,
        TX_FLAGS,
        keys(1, -1, 1),
        Exec::Coord(watch),
        &["fast", "transaction"],
    )
    .with_locks(watch_locks),
    CommandSpec::new(
        "unwatch",
        1,
        TX_FLAGS,
        NO_KEYS,
        Exec::Conn(unwatch),
        &["fast", "transaction"],
    ),
];

/// Commands that run at once inside MULTI instead of being queued.
pub fn runs_in_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

/// Queues a command of a connection in MULTI: `+QUEUED`.
pub fn queue(client: &mut ClientState, args: Args<'_>, out: &mut Reply) {
    if let Some(m) = client.multi.as_mut() {
        m.queued.push(args.iter().map(|a| a.to_vec()).collect());
        client.multi_count = Some(m.queued.len());
    }
    out.simple("QUEUED");
}

/// A command was rejected while queueing: EXEC will fail.
pub fn flag_abort(client: &mut ClientState) {
    if let Some(m) = client.multi.as_mut() {
        m.aborted = true;
    }
}

/// EXEC itself was rejected (arity): the transaction ends with
/// `EXECABORT Transaction discarded because of: <reason>`.
pub fn exec_abort(
    client: &mut ClientState,
    out: &mut Reply,
    stats: &mut crate::ThreadStats,
    e: &CmdError,
) {
    client.multi = None;
    client.multi_count = None;
    client.watch = None;
    let line = e.line();
    let reason = line.strip_prefix(b"ERR ").unwrap_or(&line);
    let mut msg = b"EXECABORT Transaction discarded because of: ".to_vec();
    msg.extend_from_slice(reason);
    crate::exec::reply_error(out, stats, &CmdError::Bytes(msg));
}

fn multi(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    if c.client.multi.is_some() {
        return Err(CmdError::err("MULTI calls can not be nested"));
    }
    c.client.multi = Some(MultiState::default());
    c.client.multi_count = Some(0);
    c.out.ok();
    Ok(())
}

fn discard(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    if c.client.multi.take().is_none() {
        return Err(CmdError::err("DISCARD without MULTI"));
    }
    c.client.multi_count = None;
    c.client.watch = None;
    c.out.ok();
    Ok(())
}

fn unwatch(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.client.watch = None;
    c.out.ok();
    Ok(())
}

/// WATCH's locks: dispatch's default (its keys, when they span shards:
/// every key is registered under the transaction's locks, at one instant)
/// unless a long script holds one of their shards, whose lock would wait
/// for the script's end. Then none: the script takes that shard's keys
/// (see [`watch`]) and the other shards' jobs run at once, so each key is
/// watched from its own instant on, before the reply. A write between
/// those instants to a key watched first may doom the transaction where
/// Redis's one-instant WATCH would not; none after the reply is missed.
///
/// So too when a published script's transaction locks one of their shards
/// (a script inside MULTI/EXEC, or on every shard: `busy::Registry::locked_busy`):
/// their loops are free, so each shard's job runs at once there, and WATCH
/// is answered while busy as in Redis, instead of waiting for the script's
/// end behind its transaction's locks.
///
/// And when a published script stops one of their shards' loops: the
/// home of a script on gathered copies takes no job until the script
/// ends (its keys are parked with it, see [`watch`]); a loop it stalls
/// refuses the WATCH `-BUSY` before any lock.
fn watch_locks(
    args: Args<'_>,
    _db: usize,
    nshards: usize,
    server: &crate::ServerShared,
) -> Option<LockSet> {
    let b = &server.ops.busy;
    let busy = b.any()
        && args.iter().skip(1).any(|k| {
            let s = shard_of(k, nshards);
            b.holds_shard(s) || b.locked_busy(s) || b.stops_loop(s)
        });
    busy.then(LockSet::default)
}

/// WATCH key...: registers the keys on their shards.
fn watch(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    if c.client.multi.is_some() {
        return Err(CmdError::err("WATCH inside MULTI is not allowed"));
    }
    let nshards = c.nshards();
    let db = c.client.db;
    // The keys not watched yet, by shard (nothing is recorded before the
    // busy checks below: a refused WATCH watches nothing).
    let watched = c.client.watch.as_ref().map_or(&[][..], |w| &w.keys[..]);
    let mut per_shard: Vec<Vec<Vec<u8>>> = vec![Vec::new(); nshards];
    let mut new_keys: Vec<(usize, Vec<u8>)> = Vec::new();
    for k in args.iter().skip(1) {
        let seen = |w: &[(usize, Vec<u8>)]| w.iter().any(|(d, key)| *d == db && key == k);
        if !seen(watched) && !seen(&new_keys) {
            new_keys.push((db, k.to_vec()));
            per_shard[shard_of(k, nshards)].push(k.to_vec());
        }
    }
    let flag = c
        .client
        .watch
        .as_ref()
        .map_or_else(engine::WatchFlag::default, |w| w.flag.clone());
    let busy = &c.server.ops.busy;
    if busy.any() {
        // Keys of the home shard of a long script that holds no shard
        // (it runs on gathered copies): parked with it, registered there
        // right after it; a stalled loop's: `-BUSY`, nothing watched
        // (`script::busy::Registry::watch_stopped`).
        busy.watch_stopped(&mut per_shard, db, &flag)?;
        // Keys of a shard a long script holds: its thread watches them
        // before the script's next command (see `script::busy`), and
        // WATCH is answered without waiting for the script, as Redis
        // answers it while busy (see `watch_locks`).
        for (s, keys) in per_shard.iter_mut().enumerate() {
            if !keys.is_empty() && busy.watch_while_busy(s, db, keys, &flag) {
                keys.clear();
            }
        }
    }
    let w = c.client.watch.get_or_insert_with(|| WatchState {
        flag: flag.clone(),
        keys: Vec::new(),
    });
    w.keys.extend(new_keys);
    let mut plan = Plan::default();
    for (s, keys) in per_shard.into_iter().enumerate() {
        if keys.is_empty() {
            continue;
        }
        let flag = flag.clone();
        plan.run(s, move |env: &mut ShardEnv<'_>| {
            // Redis's WATCH does not expire keys; a key that is already
            // logically expired does not doom the transaction when it is
            // deleted later, but does when it is written again.
            let now = env.shard.now_ms;
            let d = &mut env.shard.dbs[db];
            for k in &keys {
                d.watch_key(k, &flag, now);
            }
        });
    }
    Ok(crate::coord::OneStep::boxed(plan, |_: Vec<()>, out, _| {
        out.ok();
        Ok(())
    }))
}

/// The locks of a transaction's queued commands (run from `db`): their
/// keys, whole-keyspace locks for the keyless commands that read or
/// write everything (and for REPLICAOF NO ONE, as outside MULTI: the
/// stream changes hands with no write running; `replica::promotes`), an
/// empty request on every shard for the other keyless ones.
#[cfg(test)]
fn queued_locks(queued: &[Vec<Vec<u8>>], db: usize, nshards: usize, databases: usize) -> LockSet {
    let ops = crate::ops::Ops::leak(&config::Config::default());
    queued_locks_every(queued, db, nshards, databases, ops).0
}

/// [`queued_locks`], and whether they are whole-shard write locks on every
/// shard that its scripts may use (`script::every`): a block that queues
/// a script and a keyspace-wide command (KEYS, FLUSHALL ...), or a script
/// that may call one (`script::needs_every`: one did, or its code does not
/// prove it never does; inside a block it could not run again under
/// wider locks), takes whole-shard write locks, so that its scripts'
/// calls on any shard (KEYS from a script) are isolated as the script's
/// own shard's.
fn queued_locks_every(
    queued: &[Vec<Vec<u8>>],
    mut db: usize,
    nshards: usize,
    databases: usize,
    ops: &crate::ops::Ops,
) -> (LockSet, bool) {
    let reg = registry();
    let mut set = LockSet::default();
    let mut scratch = Vec::new();
    let (mut script, mut whole) = (false, false);
    for argv in queued {
        let owned = OwnedArgs::from_slices(argv);
        let args = owned.args();
        let Ok(r) = reg.resolve(args) else { continue };
        script |= r.spec.has(SCRIPT);
        // A script that may call KEYS & co. (`script::needs_every`).
        whole |=
            r.spec.has(SCRIPT) && nshards > 1 && crate::script::needs_every(r.spec.name, args, ops);
        whole |= matches!(r.spec.exec, Exec::Coord(_))
            && (r.spec.has(WRITE)
                || r.spec.has(READONLY)
                || crate::persist::is_snapshot_command(r.spec.name)
                || crate::replica::promotes(r.spec, args));
        match r.spec.exec {
            Exec::Shard(..) => set.command(r.spec, args, db, nshards, &mut scratch),
            Exec::Coord(_) if r.spec.has(WRITE) => set.whole(nshards, Mode::Write),
            Exec::Coord(_) if r.spec.has(READONLY) => set.whole(nshards, Mode::Read),
            Exec::Coord(_) if crate::persist::is_snapshot_command(r.spec.name) => {
                set.whole(nshards, Mode::Read)
            }
            Exec::Coord(_) if crate::replica::promotes(r.spec, args) => {
                set.whole(nshards, Mode::Write)
            }
            // Jobs on any shard (INFO, CLIENT LIST, MEMORY STATS ...): an
            // empty lock on each, so the transaction reaches every shard
            // it will send jobs to while locking, in order (a job could
            // otherwise wait behind the connection's held-back batch there
            // while the transaction holds its locks: a deadlock).
            Exec::Coord(_) => set.touch_all(nshards),
            Exec::Conn(_) if reg.full_name(r.id) == "select" => {
                if let Ok(n) = parse_db_index(args.get(1), databases) {
                    db = n;
                }
            }
            _ => {}
        }
    }
    let every = script && whole && nshards > 1;
    if every {
        set.whole(nshards, Mode::Write);
    }
    (set, every)
}

/// EXEC: runs the queued commands as one transaction.
fn exec(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let Some(m) = c.client.multi.take() else {
        return Err(CmdError::err("EXEC without MULTI"));
    };
    c.client.multi_count = None;
    let watch = c.client.watch.take();
    if m.aborted {
        return Err(CmdError::Raw(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    if watch.as_ref().is_some_and(WatchState::dirty) {
        return Ok(Box::new(Finished));
    }
    let nshards = c.nshards();
    let (mut set, every) = queued_locks_every(
        &m.queued,
        c.client.db,
        nshards,
        c.server.databases(),
        c.server.ops,
    );
    let every = every && crate::script::every::available(c.server.ops);
    if let Some(w) = &watch {
        for (d, k) in &w.keys {
            set.key(nshards, *d, k, Mode::Read);
        }
    }
    let fused = set.one_shard();
    let mut locked = Vec::new();
    set.shards_into(&mut locked);
    let cfg = c.server.config();
    let coord = ExecCoord {
        server: c.server.clone(),
        home: c.home,
        databases: cfg.databases,
        max_bulk_len: cfg.proto_max_bulk_len,
        reply_cap_bytes: crate::ctx::reply_cap_bytes(&cfg.client_output_buffer_limit, c.client),
        cmds: m.queued,
        pos: 0,
        replies: Vec::new(),
        inflight: Vec::new(),
        sub: None,
        counted: Vec::new(),
        records: Vec::new(),
        watch: watch.map(|w| w.flag),
        fused,
        checked: false,
        every,
        locked: locked.into(),
    };
    Ok(TxCoord::wrap(c.home, Box::new(coord), set))
}

/// EXEC whose WATCH failed before anything was locked: a null array.
struct Finished;

impl Coordinator for Finished {
    fn step(
        &mut self,
        _results: Vec<JobOut>,
        _plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        out.null_array();
        Ok(())
    }
}

/// One queued command sent to a shard as part of a segment.
struct SegCmd {
    /// A script that reaches every shard (see `ExecCoord::every`).
    every: bool,
    idx: usize,
    resolved: crate::Resolved,
    handler: crate::table::ShardHandler,
    args: OwnedArgs,
    call: ShardCall,
    resp3: bool,
}

/// What a segment job returns: each command's reply, or `None` when the
/// WATCH flag was found set (fused blocks check it on the shard).
type SegOut = Option<Vec<(usize, Vec<u8>)>>;

struct ExecCoord {
    server: Arc<ServerShared>,
    home: usize,
    databases: usize,
    max_bulk_len: u64,
    /// The client's output hard limit (see `ShardCall::reply_cap_bytes`).
    reply_cap_bytes: u64,
    cmds: Vec<Vec<Vec<u8>>>,
    /// Next command to look at.
    pos: usize,
    replies: Vec<Option<Vec<u8>>>,
    /// Whether a segment is in flight (its jobs' outputs come next).
    inflight: Vec<()>,
    /// A multi-shard command in progress.
    sub: Option<Sub>,
    /// The commands run here so far, for INFO commandstats and errorstats
    /// (see `Coordinator::drain_stats`): shard commands count where they
    /// run.
    counted: Vec<Counted>,
    /// Records the multi-shard commands made on the home thread so far
    /// (see `Coordinator::take_records`).
    records: Vec<engine::outbox::Chunk>,
    watch: Option<engine::WatchFlag>,
    /// All locks on one shard: the WATCH check happens in the job.
    fused: bool,
    checked: bool,
    /// Its locks are whole-shard write locks on every shard: its scripts
    /// reach every shard (`script::every`), each alone in its segment (no
    /// other job of the block runs meanwhile, on any shard).
    every: bool,
    /// The shards its locks cover: a script of the block published busy
    /// holds them (`script::busy::under_locks`).
    locked: Arc<[usize]>,
}

/// A multi-shard command in progress: its index, coordinator, reply,
/// command id and start.
type Sub = (usize, Box<dyn Coordinator>, Reply, usize, Instant);

/// One command EXEC ran on the home thread: its id, duration, and error
/// line if it failed (with whether the line counts in errorstats).
struct Counted {
    id: usize,
    took: Duration,
    error: Option<(Vec<u8>, bool)>,
}

impl ExecCoord {
    /// Notes command `id`, started at `started`, ending with `res`.
    fn count(&mut self, id: usize, started: Instant, res: Result<(), &CmdError>) {
        self.counted.push(Counted {
            id,
            took: started.elapsed(),
            error: res
                .err()
                .map(|e| (e.line(), !matches!(e, CmdError::Counted(_)))),
        });
    }

    fn reply_of(e: &CmdError, resp3: bool) -> Vec<u8> {
        let mut r = Reply::new(resp3);
        r.error_bytes(&e.line());
        r.into_bytes()
    }

    fn finish(&mut self, out: &mut Reply) {
        out.array(self.cmds.len());
        for r in self.replies.iter().flatten() {
            out.raw(r);
        }
    }
}

impl Coordinator for ExecCoord {
    /// The WATCH check must see every write that came before the locks:
    /// on one shard the job checks it; across shards, the first step,
    /// once every lock is held (the keys are Read-locked: nobody else can
    /// change them from then on).
    fn first_step_needs_locks(&self) -> bool {
        self.watch.is_some() && !self.fused
    }

    fn take_records(&mut self) -> Vec<engine::outbox::Chunk> {
        std::mem::take(&mut self.records)
    }

    /// Until its first step ran a command on the home thread (a SELECT
    /// before the first lock is granted: see `TxCoord`), nothing of the
    /// block is seen.
    fn refusable_when_busy(&self) -> bool {
        self.counted.is_empty() && self.records.is_empty()
    }

    /// Redis's execCommandAbort for an EXEC refused while busy.
    fn busy_error(&self, e: CmdError) -> CmdError {
        let line = e.line();
        let mut msg = b"EXECABORT Transaction discarded because of: ".to_vec();
        msg.extend_from_slice(&line);
        CmdError::Rejected(String::from_utf8_lossy(&msg).into_owned())
    }

    fn drain_stats(&mut self, stats: &mut crate::ctx::ThreadStats) {
        for c in self.counted.drain(..) {
            if let Some((line, true)) = &c.error {
                stats.count_error(line);
            }
            // `record` measures from a start: one as long ago as it took.
            let started = Instant::now()
                .checked_sub(c.took)
                .unwrap_or_else(Instant::now);
            let _ = crate::exec::record(stats, self.server.ops, c.id, started, c.error.is_some());
        }
    }

    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if !self.checked {
            self.checked = true;
            self.replies = (0..self.cmds.len()).map(|_| None).collect();
            if !self.fused
                && self
                    .watch
                    .as_ref()
                    .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire))
            {
                out.null_array();
                return Ok(());
            }
        }
        // Outputs of what was in flight.
        if let Some((idx, mut sub, mut sout, id, started)) = self.sub.take() {
            let mut p = Plan::default();
            let stepped = sub.step(results, &mut p, &mut sout, client);
            if let Err(e) = &stepped {
                sout.error_bytes(&e.line());
                p = Plan::default();
            }
            self.records.extend(sub.take_records());
            if !p.jobs.is_empty() {
                plan.jobs = p.jobs;
                self.sub = Some((idx, sub, sout, id, started));
                return Ok(());
            }
            self.count(id, started, stepped.as_ref().map(|_| ()));
            self.replies[idx] = Some(sout.into_bytes());
            self.pos = idx + 1;
        } else if !self.inflight.is_empty() {
            self.inflight.clear();
            for seg in outputs::<SegOut>(results) {
                let Some(replies) = seg else {
                    // WATCH failed (fused check on the shard).
                    out.null_array();
                    return Ok(());
                };
                for (i, r) in replies {
                    self.replies[i] = Some(r);
                }
            }
        }
        // Walk on: conn commands now, shard commands into a segment, stop
        // at a multi-shard command.
        let reg = registry();
        let nshards = self.server.nshards;
        let mut segment: Vec<(usize, Vec<SegCmd>)> = Vec::new();
        // The shard of the segment's script, if it has one.
        let mut script_on: Option<usize> = None;
        let mut scratch = Vec::new();
        while self.pos < self.cmds.len() {
            let i = self.pos;
            let owned = OwnedArgs::from_slices(&self.cmds[i]);
            let args = owned.args();
            let r = match reg.resolve(args) {
                Ok(r) => r,
                Err(e) => {
                    self.replies[i] = Some(Self::reply_of(&e, client.resp3));
                    self.pos += 1;
                    continue;
                }
            };
            // The rules may have changed since the command was queued.
            if let Err(e) = crate::acl::check_queued(&self.server, client, r, args) {
                self.replies[i] = Some(Self::reply_of(&e, client.resp3));
                self.pos += 1;
                continue;
            }
            let build = match r.spec.exec {
                Exec::Conn(h) => {
                    let mut o = Reply::new(client.resp3);
                    let mut ctx = ConnCtx {
                        client: &mut *client,
                        out: &mut o,
                        server: &self.server,
                        home: self.home,
                        key_shards: &[],
                    };
                    let started = Instant::now();
                    ctx.client.in_exec = true;
                    let res = h(&mut ctx, args);
                    ctx.client.in_exec = false;
                    if let Err(e) = &res {
                        o.error_bytes(&e.line());
                    }
                    self.count(r.id, started, res.as_ref().map(|_| ()));
                    // WAIT in a transaction answers at once (Redis's
                    // CLIENT_DENY_BLOCKING).
                    if client.repl_wait.take().is_some() {
                        let acked = self.server.repl.acked(self.server.repl.offset());
                        o.int(acked as i64);
                    }
                    self.replies[i] = Some(o.into_bytes());
                    self.pos += 1;
                    continue;
                }
                Exec::Shard(handler, multi) => {
                    let every = self.every && r.spec.has(crate::table::flags::SCRIPT);
                    let shard = match target(r.spec, args, nshards, &mut scratch) {
                        Target::NoKeys => Some(self.home),
                        Target::One(s) => Some(s),
                        // Every shard reached from one (`script::every`):
                        // on the real shards, not copies of its keys.
                        Target::Many if every => Some(self.home),
                        Target::Many => None,
                    };
                    if every && !segment.is_empty() {
                        // Alone in its segment: the earlier commands first.
                        break;
                    }
                    // A script runs in a segment of its own shard's
                    // commands only (see the module documentation).
                    let script = r.spec.has(crate::table::flags::SCRIPT);
                    if let Some(s) = shard {
                        let beside = if script {
                            segment.iter().any(|(gs, _)| *gs != s)
                        } else {
                            script_on.is_some_and(|on| on != s)
                        };
                        if beside {
                            break;
                        }
                    }
                    match (shard, multi) {
                        (Some(s), _) => {
                            let cmd = SegCmd {
                                every,
                                idx: i,
                                resolved: r,
                                handler,
                                args: owned.clone(),
                                call: ShardCall {
                                    db: client.db,
                                    no_touch: client.no_touch,
                                    databases: self.databases,
                                    max_bulk_len: self.max_bulk_len,
                                    reply_cap_bytes: self.reply_cap_bytes,
                                    // Inside EXEC blocking commands answer
                                    // at once, as on timeout.
                                    may_block: false,
                                    in_tx: true,
                                    nshards,
                                    caller: if r.spec.has(crate::table::flags::SCRIPT) {
                                        crate::acl::caller(&self.server, client)
                                    } else {
                                        None
                                    },
                                    // Queued scripts' keys are remembered
                                    // before EXEC (`tracking::keys_read`).
                                    tracker: None,
                                    evicting_for: None,
                                    client: client.id,
                                    ops: self.server.ops,
                                    master: client.master,
                                },
                                resp3: client.resp3,
                            };
                            match segment.iter_mut().find(|(gs, _)| *gs == s) {
                                Some((_, v)) => v.push(cmd),
                                None => segment.push((s, vec![cmd])),
                            }
                            self.pos += 1;
                            if script {
                                script_on = Some(s);
                            }
                            if every {
                                // ... and the later ones after it.
                                break;
                            }
                            continue;
                        }
                        (None, Some(b)) => Build::Coord(b),
                        // No coordinator of its own: the handler runs on
                        // copies of its keys (see `scratch`).
                        (None, None) => Build::Scratch(handler),
                    }
                }
                Exec::Coord(b) => Build::Coord(b),
                Exec::Parent => {
                    self.replies[i] = Some(Self::reply_of(&CmdError::Syntax, client.resp3));
                    self.pos += 1;
                    continue;
                }
            };
            if !segment.is_empty() {
                break;
            }
            // A multi-shard command: run its coordinator's steps.
            let mut sout = Reply::new(client.resp3);
            let started = Instant::now();
            let built = {
                let mut ctx = ConnCtx {
                    client: &mut *client,
                    out: &mut sout,
                    server: &self.server,
                    home: self.home,
                    key_shards: &[],
                };
                match build {
                    Build::Coord(b) => {
                        ctx.client.in_exec = true;
                        let built = b(&mut ctx, args);
                        ctx.client.in_exec = false;
                        built
                    }
                    Build::Scratch(h) => Ok(crate::scratch::coordinator(
                        r.spec, h, &mut ctx, args, false,
                    )),
                }
            };
            match built {
                Err(e) => {
                    sout.error_bytes(&e.line());
                    self.count(r.id, started, Err(&e));
                }
                Ok(mut sub) => {
                    let mut p = Plan::default();
                    let stepped = sub.step(Vec::new(), &mut p, &mut sout, client);
                    self.records.extend(sub.take_records());
                    if let Err(e) = &stepped {
                        sout.error_bytes(&e.line());
                    } else if !p.jobs.is_empty() {
                        plan.jobs = p.jobs;
                        self.sub = Some((i, sub, sout, r.id, started));
                        return Ok(());
                    }
                    self.count(r.id, started, stepped.as_ref().map(|_| ()));
                }
            }
            self.replies[i] = Some(sout.into_bytes());
            self.pos += 1;
        }
        if segment.is_empty() {
            self.finish(out);
            return Ok(());
        }
        plan.last = self.pos == self.cmds.len();
        let check = if self.fused { self.watch.clone() } else { None };
        for (s, cmds) in segment {
            let check = check.clone();
            let locked = self.locked.clone();
            plan.run(s, move |env: &mut ShardEnv<'_>| -> SegOut {
                if check.is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire)) {
                    return None;
                }
                let mut res = Vec::with_capacity(cmds.len());
                for c in cmds {
                    let mut o = Reply::new(c.resp3);
                    let mut apart = c
                        .every
                        .then(|| crate::script::every::apart(c.call.ops, env.shard.id))
                        .flatten();
                    let call = c.call;
                    let busy: &'static crate::script::busy::Registry = &call.ops.busy;
                    let run = || {
                        crate::exec::run_shard_with(
                            c.resolved,
                            c.handler,
                            c.args.args(),
                            &mut *env.shard,
                            call,
                            &mut o,
                            &mut *env.stats,
                            None,
                            (
                                apart
                                    .as_mut()
                                    .map(|a| a as &mut dyn crate::script::in_place::Shards),
                                None,
                            ),
                        )
                    };
                    if c.resolved.spec.has(SCRIPT) {
                        // Published busy, it holds the block's locks.
                        crate::script::busy::under_locks(busy, &mut *env.clients, &locked, run);
                    } else {
                        run();
                    }
                    res.push((c.idx, o.into_bytes()));
                }
                Some(res)
            });
            self.inflight.push(());
        }
        Ok(())
    }
}

/// Keyspace-wide commands outside MULTI: whole-shard write locks on every
/// shard for FLUSHALL / FLUSHDB / SWAPDB, read locks for the keyspace
/// reads (DBSIZE, KEYS, RANDOMKEY; SCAN plans its own, none, with
/// `keys::scan_locks`). The transaction layer asks for them in one round.
///
/// The reads stay exact, as in Redis: a DBSIZE during an MSET of two new
/// keys on two shards counts both or neither, and a RANDOMKEY while a
/// RENAME moves the only key between shards finds it. Per-shard reads
/// without locks, in one round, would see some shards before a command
/// and others after it (even single-shard commands in sequence: `SET y`
/// then `DEL x` could be counted as no key at all); only locks held on
/// every shard at once give one instant to read at.
pub fn keyspace_locks(spec: &CommandSpec, nshards: usize) -> LockSet {
    let mut set = LockSet::default();
    if spec.has(WRITE) {
        set.whole(nshards, Mode::Write);
    } else if spec.has(READONLY) || crate::persist::is_snapshot_command(spec.name) {
        // DBSIZE, KEYS, RANDOMKEY read every shard: a shared lock on each
        // makes them see a multi-shard command whole or not at all.
        // SAVE and BGSAVE begin a snapshot on every shard at one instant.
        set.whole(nshards, Mode::Read);
    }
    set
}

/// How a multi-shard command inside EXEC gets its coordinator.
enum Build {
    Coord(crate::table::CoordBuilder),
    Scratch(crate::table::ShardHandler),
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    fn argv(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    /// REPLICAOF NO ONE in a transaction locks the whole keyspace for
    /// writing, as outside MULTI (the stream changes hands with no write
    /// running); REPLICAOF host port locks nothing whole.
    #[test]
    fn a_promotion_in_a_transaction_locks_the_whole_keyspace() {
        use crate::tx::Mode;
        for cmd in ["REPLICAOF", "slaveof"] {
            let set = super::queued_locks(&[argv(&[cmd, "no", "one"])], 0, 3, 16);
            let reqs = set.requests(0);
            assert_eq!(reqs.len(), 3, "{cmd}");
            for (_, req) in &reqs {
                assert_eq!(req.whole, Some(Mode::Write), "{cmd}");
            }
        }
        let set = super::queued_locks(&[argv(&["REPLICAOF", "h", "1"])], 0, 3, 16);
        assert!(set.keys_only());
    }

    #[test]
    fn queued_commands_run_in_order_across_shards() {
        let mut t = TestServer::new(3);
        assert_eq!(t.run(&["MULTI"]), "+OK\r\n");
        assert_eq!(t.run(&["SET", "a", "1"]), "+QUEUED\r\n");
        assert_eq!(
            t.run(&["MSET", "b", "2", "c", "3", "d", "4"]),
            "+QUEUED\r\n"
        );
        assert_eq!(t.run(&["INCR", "a"]), "+QUEUED\r\n");
        assert_eq!(t.run(&["MGET", "a", "b", "c", "d"]), "+QUEUED\r\n");
        assert_eq!(t.run(&["SELECT", "1"]), "+QUEUED\r\n");
        assert_eq!(t.run(&["GET", "a"]), "+QUEUED\r\n");
        assert_eq!(
            t.run(&["EXEC"]),
            "*6\r\n+OK\r\n+OK\r\n:2\r\n*4\r\n$1\r\n2\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n+OK\r\n$-1\r\n"
        );
        assert_eq!(t.client.db, 1);
        assert_eq!(t.client.multi_count, None);
    }

    #[test]
    fn no_multi_command_dooms_the_transaction() {
        let mut t = TestServer::new(2);
        t.run(&["MULTI"]);
        t.run(&["SET", "a", "1"]);
        assert_eq!(
            t.run(&["SHUTDOWN"]),
            "-ERR Command not allowed inside a transaction\r\n"
        );
        assert_eq!(
            t.run(&["EXEC"]),
            "-EXECABORT Transaction discarded because of previous errors.\r\n"
        );
        assert_eq!(t.run(&["GET", "a"]), "$-1\r\n");
    }

    #[test]
    fn watch_fails_exec_after_a_change_and_not_otherwise() {
        let mut t = TestServer::new(2);
        t.run(&["SET", "k", "1"]);
        t.run(&["WATCH", "k", "other"]);
        t.run(&["MULTI"]);
        t.run(&["SET", "k", "2"]);
        assert_eq!(t.run(&["EXEC"]), "*1\r\n+OK\r\n");
        // EXEC unwatched: a change now does not matter.
        t.run(&["SET", "k", "3"]);
        t.run(&["WATCH", "k"]);
        t.run(&["APPEND", "k", "x"]);
        t.run(&["MULTI"]);
        t.run(&["GET", "k"]);
        assert_eq!(t.run(&["EXEC"]), "*-1\r\n");
        // A failed SET NX changes nothing, as in Redis.
        t.run(&["WATCH", "k"]);
        t.run(&["SET", "k", "9", "NX"]);
        t.run(&["MULTI"]);
        t.run(&["GET", "k"]);
        assert_eq!(t.run(&["EXEC"]), "*1\r\n$2\r\n3x\r\n");
    }

    /// A WATCH whose keys are all watched already has no shard work: it
    /// still replies (it left its connection waiting forever, issue 21).
    #[test]
    fn watch_of_watched_keys_replies() {
        for n in [1, 2, 32] {
            let mut t = TestServer::new(n);
            assert_eq!(t.run(&["WATCH", "a"]), "+OK\r\n", "{n} shards");
            assert_eq!(t.run(&["MSET", "a", "1", "b", "2"]), "+OK\r\n");
            assert_eq!(t.run(&["WATCH", "a"]), "+OK\r\n", "{n} shards");
            assert_eq!(t.run(&["WATCH", "b", "a"]), "+OK\r\n", "{n} shards");
            assert_eq!(t.run(&["WATCH", "a", "b"]), "+OK\r\n", "{n} shards");
            t.run(&["MULTI"]);
            assert_eq!(t.run(&["EXEC"]), "*-1\r\n", "{n} shards");
        }
    }
}
