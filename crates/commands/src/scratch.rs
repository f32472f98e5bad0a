//! Any single-shard handler, run across shards.
//!
//! Multi-key commands of the collection types (SMOVE, LMOVE, SINTERSTORE,
//! ZUNIONSTORE, SORT ... STORE and the rest) are written once, as ordinary
//! shard handlers. When their keys span shards, dispatch runs them here
//! instead of asking each for a coordinator of its own:
//!
//! 1. *gather*: every shard involved sends copies of the command's live
//!    entries (expired ones are deleted there, as a lookup would);
//! 2. *run*: the home thread loads the copies into a scratch [`Shard`] and
//!    runs the unmodified handler on it, which writes the reply;
//! 3. *write back*: every key whose entry changed (value, expiry, presence)
//!    or that the handler marked modified (a store of an identical value)
//!    is stored or deleted on its shard, through the same `Db` calls a
//!    handler would use, so WATCH and blocked clients see the change.
//!
//! Isolation comes from the transaction layer around it: dispatch wraps
//! this coordinator in [`crate::tx::TxCoord`], which holds the keys from
//! before the gather until the write-back, so the three steps are one
//! atomic command to every other client. A read-only command releases its
//! locks with the gather.
//!
//! Blocking commands (BLPOP a b, BZMPOP ...) whose keys span shards and
//! find nothing block here like anywhere else: the handler names the keys
//! it waits for, and the runtime parks the command on each of their shards
//! ([`Coordinator::parked`]), where a push re-runs the same handler. That
//! is only right when every key of the command is a waited key (a re-run
//! on one shard sees the other shards' keys as missing, which for a pop is
//! the truth: they were empty). A command that also writes elsewhere
//! (BLMOVE into another shard's key) is parked to wake its home thread
//! instead, which runs the whole command again through this coordinator.
//!
//! Keyspace events: the scratch shard publishes the same classes as the
//! real ones (their `notify_flags`, sent with the gather), so the handler
//! records its events (`new` ones included) exactly as it would on a real
//! shard. They are re-emitted with the write-back, all of them, in order,
//! by the shard that owns the first event's key; the write-back itself
//! records no `new` events (the scratch shard did). One shard rather than
//! each key's owner: a subscriber then sees one command's events in
//! Redis's order (SMOVE's `srem` on one shard before its `sadd` on
//! another), which per-owner emission from concurrent jobs would not keep.
//! A subscriber does not care which thread published. `expired` events
//! of the scratch copy are dropped: the real shard emits its own when the
//! key really goes (the gather already expired what was due).
//!
//! Records (the append-only file): the handler emits them on the scratch
//! shard exactly as on a real one (its shards' `records_on` travels with
//! the gather); the coordinator hands them to the runtime
//! (`Coordinator::take_records`), which puts them in the transaction's
//! slot with the write-back. The write-back itself records nothing.
//!
//! Cost: the values are copied twice (to the home thread and, if changed,
//! back), O(size of the values involved), where a dedicated coordinator
//! could move only the result. That is the price of writing each command
//! once; a command that proves hot across shards can get its own.

use std::sync::atomic::Ordering;

use engine::{Entry, KeyEvent, OwnedEntry, Shard, ValueRef, WatchFlag};
use resp::{Args, OwnedArgs, Reply};

use crate::coord::{outputs, Coordinator, JobOut, Parked, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{shard_of, CommandSpec, ShardHandler};

/// What one shard sends in the gather step.
struct Gathered {
    /// Each key's entry and deadline (0 = none).
    entries: Vec<Option<(OwnedEntry, u64)>>,
    enc: engine::EncLimits,
    now_ms: u64,
    /// The shard's published event classes (`Shard::notify_flags`).
    notify_flags: u32,
    /// Whether the shard's records have a consumer (`Outbox::records_on`).
    records_on: bool,
    /// A replica's shard: the copies keep its expiry rules and read-only
    /// scripts (`Shard::expiry`, `Shard::read_only_replica`).
    replica: bool,
    read_only_replica: bool,
    /// The `lazyfree-*` directives (the copies free as the shards would).
    lazy: engine::lazyfree::Lazy,
}

/// A shard's changed keys, each by its index in its group's keys: the
/// new entry and deadline, or `None` to delete.
type Writes = Vec<(usize, Option<(OwnedEntry, u64)>)>;

/// Distinct keys of one shard, shared by the gather job, the run and the
/// write-back job (one allocation per shard, not a copy of each key per
/// step).
type Keys = std::sync::Arc<[Vec<u8>]>;

/// One shard's keys: `(shard, keys)`.
type Group = (usize, Keys);

/// What the run step hands the write-back: each shard's writes, and the
/// handler's keyspace events with the shard that re-emits them.
struct RunOut {
    writes: Vec<(usize, Keys, Writes)>,
    events: Vec<KeyEvent>,
    events_shard: usize,
}

enum Phase {
    Gather(Plan),
    Run,
    Done,
}

/// The coordinator; see the module documentation.
pub struct Scratch {
    handler: ShardHandler,
    /// Shared with a script's template and its rounds (`script::real::Call`).
    args: std::sync::Arc<OwnedArgs>,
    db: usize,
    no_touch: bool,
    databases: usize,
    max_bulk_len: u64,
    client: u64,
    /// Run for a replica's master (see `ShardCall::master`).
    master: bool,
    ops: &'static crate::ops::Ops,
    /// Distinct keys by shard, ascending shard order, as gathered.
    groups: Vec<Group>,
    phase: Phase,
    /// A blocking command may block (false inside MULTI).
    may_block: bool,
    /// Set when the handler blocked; true if only the home may re-run it.
    parked: Option<(crate::ctx::BlockOn, bool)>,
    nshards: usize,
    /// A script's restricted user (`acl::caller`).
    caller: Option<std::sync::Arc<crate::acl::Caller>>,
    /// The handler's records, made on the scratch shard (see
    /// `Coordinator::take_records`).
    records: Vec<engine::outbox::Chunk>,
    /// A script's: where it asks to run again over more keys.
    widen: Option<WidenSlot>,
    /// The handler's error, replied once its writes are back.
    failed: Option<CmdError>,
    /// The keyspace hits and misses of the run that stands, counted on a
    /// real shard with the write-back (INFO sums every shard's; Redis
    /// counts a script's or a command's reads wherever its keys live).
    counts: (u64, u64),
    /// The gather was the last round (a read-only command: its locks go
    /// with it, and no job may follow).
    gather_last: bool,
}

/// Where a script run on the copies leaves the keys it found missing
/// instead of replying (see `script::wide`, which runs it again).
pub type WidenSlot = std::sync::Arc<std::sync::Mutex<Option<Vec<Vec<u8>>>>>;

/// Builds the coordinator for `spec`'s `handler` on `args`.
pub fn coordinator(
    spec: &CommandSpec,
    handler: ShardHandler,
    ctx: &mut ConnCtx<'_>,
    args: Args<'_>,
    may_block: bool,
) -> Box<dyn Coordinator> {
    let mut pos = Vec::new();
    spec.key_positions(args, &mut pos);
    let keys: Vec<&[u8]> = pos.iter().map(|&p| args.get(p)).collect();
    Box::new(build(spec, handler, ctx, args, may_block, &keys))
}

/// A script's run on copies of `keys` (a round of `script::wide`, made
/// from the script's `call` only when a round runs on copies), whose
/// handler may ask for more keys through `widen`.
pub(crate) fn for_script(
    call: &crate::script::real::Call,
    keys: &[Vec<u8>],
    widen: WidenSlot,
) -> Scratch {
    let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let groups = groups_of(&keys, call.nshards);
    let plan = gather_plan(&groups, call.db, call.read_only);
    Scratch {
        caller: call.caller.clone(),
        handler: call.handler,
        args: call.args.clone(),
        db: call.db,
        no_touch: call.no_touch,
        client: call.client,
        master: call.master,
        ops: call.ops,
        databases: call.databases,
        max_bulk_len: call.max_bulk_len,
        groups,
        phase: Phase::Gather(plan),
        may_block: true,
        parked: None,
        nshards: call.nshards,
        records: Vec::new(),
        widen: Some(widen),
        failed: None,
        counts: (0, 0),
        gather_last: false,
    }
}

/// Distinct keys by shard, ascending shard order.
fn groups_of(keys: &[&[u8]], n: usize) -> Vec<Group> {
    let mut groups: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for &k in keys {
        let s = shard_of(k, n);
        let g = match groups.iter_mut().find(|(gs, _)| *gs == s) {
            Some(g) => g,
            None => {
                groups.push((s, Vec::new()));
                // INVARIANT: pushed just above.
                groups.last_mut().expect("group")
            }
        };
        if !g.1.iter().any(|x| x == k) {
            g.1.push(k.to_vec());
        }
    }
    groups.sort_by_key(|(s, _)| *s);
    groups.into_iter().map(|(s, ks)| (s, ks.into())).collect()
}

/// The gather step: each shard's live entries of its keys.
fn gather_plan(groups: &[Group], db: usize, read_only: bool) -> Plan {
    let mut plan = Plan::default();
    for (s, keys) in groups {
        let keys = keys.clone();
        plan.run(*s, move |env| gather_on(env.shard, db, &keys));
    }
    // A read-only command changes nothing: its locks go with the gather.
    plan.last = read_only;
    plan
}

/// A shard's live entries of `keys` (database `db`), as the gather sends
/// them (expired ones deleted there, as a lookup would).
fn gather_on(shard: &mut Shard, db: usize, keys: &[Vec<u8>]) -> Gathered {
    let now = shard.now_ms;
    let entries = keys
        .iter()
        .map(|k| {
            if shard.expire_or_hide(db, k) && shard.expiry == engine::Expiry::Hide {
                return None;
            }
            shard.dbs[db]
                .get_with_ttl(k)
                .map(|(e, at)| (e.to_owned_entry(), at))
        })
        .collect();
    Gathered {
        entries,
        enc: shard.enc,
        now_ms: now,
        notify_flags: shard.notify_flags,
        records_on: shard.outbox.records_on,
        replica: shard.expiry != engine::Expiry::Delete,
        read_only_replica: shard.read_only_replica,
        lazy: shard.lazy(),
    }
}

fn build(
    spec: &CommandSpec,
    handler: ShardHandler,
    ctx: &mut ConnCtx<'_>,
    args: Args<'_>,
    may_block: bool,
    keys: &[&[u8]],
) -> Scratch {
    let n = ctx.nshards();
    let groups = groups_of(keys, n);
    let db = ctx.client.db;
    let plan = gather_plan(&groups, db, !spec.may_write());
    let (databases, max_bulk_len) = {
        let c = ctx.server.config.read().unwrap_or_else(|e| e.into_inner());
        (c.databases, c.proto_max_bulk_len)
    };
    let caller = if spec.has(crate::table::flags::SCRIPT) {
        crate::acl::caller(ctx.server, ctx.client)
    } else {
        None
    };
    Scratch {
        caller,
        handler,
        args: std::sync::Arc::new(args.to_owned()),
        db,
        no_touch: ctx.client.no_touch,
        client: ctx.client.id,
        master: ctx.client.master,
        ops: ctx.server.ops,
        databases,
        max_bulk_len,
        groups,
        phase: Phase::Gather(plan),
        may_block,
        parked: None,
        nshards: n,
        records: Vec::new(),
        widen: None,
        failed: None,
        counts: (0, 0),
        gather_last: false,
    }
}

impl Scratch {
    /// Its keys by shard (distinct, ascending shard order), for the locks
    /// of a script's round (`script::wide`: each key's shard known, not
    /// hashed again).
    pub(crate) fn key_groups(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.groups
            .iter()
            .flat_map(|(s, ks)| ks.iter().map(move |k| (*s, &k[..])))
    }
}

fn same(a: &Option<(OwnedEntry, u64)>, b: Option<(&Entry, u64)>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some((a, a_at)), Some((b, b_at))) => {
            *a_at == b_at && ValueRef::from(&a.value) == b.value()
        }
        _ => false,
    }
}

impl Scratch {
    /// Runs the handler on the gathered copies; returns the changed keys
    /// by shard and the events to re-emit.
    fn run(&mut self, got: Vec<Gathered>, out: &mut Reply) -> Result<RunOut, CmdError> {
        let Loaded {
            mut shard,
            before,
            signalled,
        } = load(&self.groups, got, self.db, self.master);
        #[cfg(debug_assertions)]
        let said0 = crate::exec::said_so_mark(&shard);
        let mut ctx = ShardCtx {
            shard: &mut shard,
            db: self.db,
            out,
            no_touch: self.no_touch,
            databases: self.databases,
            max_bulk_len: self.max_bulk_len,
            reply_cap_bytes: 0,
            may_block: self.may_block,
            in_tx: true,
            nshards: self.nshards,
            client: self.client,
            ops: self.ops,
            block: None,
            ready: None,
            caller: self.caller.clone(),
            tracker: None,
            in_place: None,
            sender: None,
        };
        // A script that fails after writing keeps its writes (as in Redis):
        // they are written back and the error replied after (`failed`).
        // Other handlers fail before changing anything.
        let res = (self.handler)(&mut ctx, self.args.args());
        let block = ctx.block.take();
        if let Err(e) = res {
            self.failed = Some(e);
        }
        if let (Some(on), Some(slot)) = (&block, &self.widen) {
            if on.widen {
                // The copies, their records and events are dropped: the
                // script runs again, from the start, over more keys.
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(on.keys.clone());
                return Ok(RunOut {
                    writes: Vec::new(),
                    events: Vec::new(),
                    events_shard: 0,
                });
            }
        }
        if block.is_none() {
            #[cfg(debug_assertions)]
            if let (Ok(r), None) = (
                crate::table::registry().resolve(self.args.args()),
                &self.failed,
            ) {
                crate::exec::check_said_so(r, &shard, said0);
            }
            self.records.extend(shard.outbox.take());
        }
        if let Some(on) = block {
            let every_key_waited = self
                .groups
                .iter()
                .flat_map(|(_, ks)| ks.iter())
                .all(|k| on.keys.contains(k));
            self.parked = Some((on, !every_key_waited));
            return Ok(RunOut {
                writes: Vec::new(),
                events: Vec::new(),
                events_shard: 0,
            });
        }
        self.counts = (shard.stats.keyspace_hits, shard.stats.keyspace_misses);
        Ok(diff(&self.groups, &mut shard, self.db, before, &signalled))
    }
}

/// The copies on a scratch shard: the shard, each group's entries as
/// gathered, and a watch flag per key present (see [`load`]).
struct Loaded {
    shard: Shard,
    before: Vec<Vec<Option<(OwnedEntry, u64)>>>,
    signalled: Vec<Option<WatchFlag>>,
}

/// Loads what `groups`' shards sent (`got`, in order) on a scratch shard
/// of database `db`, set up as they are (`master`: run for a replica's
/// master, see `ShardCall::master`).
fn load(groups: &[Group], got: Vec<Gathered>, db: usize, master: bool) -> Loaded {
    let mut shard = Shard::new(0, db + 1);
    let mut notify_flags = 0;
    if let Some(g) = got.first() {
        shard.enc = g.enc;
        shard.set_lazy(g.lazy);
        notify_flags = g.notify_flags;
        // The handler's own records (made as on a real shard) go with
        // the write-back, in the transaction (`take_records`).
        shard.outbox.records_on = g.records_on;
        // On a replica, as `exec::run_shard` sets it per command.
        if g.replica {
            shard.expiry = if master {
                engine::Expiry::Keep
            } else {
                engine::Expiry::Hide
            };
            shard.read_only_replica = g.read_only_replica;
        }
    }
    shard.now_ms = got.iter().map(|g| g.now_ms).max().unwrap_or(shard.now_ms);
    let d = &mut shard.dbs[db];
    let mut before = Vec::with_capacity(got.len());
    for ((_, keys), g) in groups.iter().zip(got) {
        for (k, e) in keys.iter().zip(&g.entries) {
            if let Some((e, at)) = e {
                d.insert(k, e.clone(), *at);
            }
        }
        before.push(g.entries);
    }
    // Which keys the handler marked modified: one of them is written
    // back even when its entry compares equal (a store of an identical
    // value), so that WATCH on its shard fires as it would have had
    // the command run there (Redis's `setKey` signals regardless).
    // Only keys that exist need it: a missing key that the handler
    // stores differs anyway, and one it creates and deletes again
    // leaves nothing to write back (a delete of a missing key signals
    // nothing on its shard either). A watch costs a flag and an entry
    // in the watch table per key, and every write a lookup in it.
    let present = before.iter().flatten().filter(|e| e.is_some()).count();
    d.reserve_watches(present);
    let signalled: Vec<Option<WatchFlag>> = groups
        .iter()
        .zip(&before)
        .flat_map(|((_, ks), b)| ks.iter().zip(b))
        .map(|(k, e)| {
            e.as_ref().map(|_| {
                let f = WatchFlag::default();
                d.watch(k, &f);
                f
            })
        })
        .collect();
    // After loading the copies: those are not keys created.
    shard.set_notify(notify_flags);
    Loaded {
        shard,
        before,
        signalled,
    }
}

/// After the run on the copies: each shard's changed keys (by `before`,
/// and the keys whose watch flag the run raised) and the events to
/// re-emit, with the shard that re-emits them.
fn diff(
    groups: &[Group],
    shard: &mut Shard,
    db: usize,
    before: Vec<Vec<Option<(OwnedEntry, u64)>>>,
    signalled: &[Option<WatchFlag>],
) -> RunOut {
    let mut events = shard.take_events();
    events.retain(|e| e.class != ds::events::EXPIRED);
    let events_shard = events
        .first()
        .and_then(|e| {
            groups
                .iter()
                .find(|(_, ks)| ks.iter().any(|k| k[..] == e.key[..]))
        })
        .or(groups.first())
        .map_or(0, |(s, _)| *s);
    let d = &mut shard.dbs[db];
    // The copies are taken out below, which signals their watchers: the
    // run's own flags are read first, key by key (`marked`), and the
    // clients' WATCHes a script on the copies carried (`script::busy`:
    // parked with it) must not hear it, so no watcher is left.
    d.forget_watches();
    let mut writes = Vec::new();
    let mut signalled = signalled.iter();
    for ((s, keys), before) in groups.iter().zip(before) {
        let mut w = Vec::new();
        for (i, (k, b)) in keys.iter().zip(before).enumerate() {
            // (Read before the removal below signals the key's watch.)
            let marked = signalled
                .next()
                .is_some_and(|f| f.as_ref().is_some_and(|f| f.load(Ordering::Acquire)));
            // Lazy expiry must not count as a change: an entry the
            // handler saw expire was already gone when gathered. Each
            // copy is taken out, changed or not (the scratch shard is
            // dropped next): one lookup per key.
            if let Some(after) = d.take_if(k, |after| marked || !same(&b, after)) {
                w.push((i, after));
            }
        }
        if !w.is_empty() || (*s == events_shard && !events.is_empty()) {
            writes.push((*s, keys.clone(), w));
        }
    }
    RunOut {
        writes,
        events,
        events_shard,
    }
}

/// Writes a run's changed keys (`w`, by their index in `keys`) back on
/// their shard.
fn write_back(shard: &mut Shard, db: usize, keys: &[Vec<u8>], w: Writes) {
    // A key the command deleted (an emptied source, a STORE's empty
    // result) goes as Redis's dbDelete: `lazyfree-lazy-server-del` decides.
    let lazy = shard.lazy().server_del;
    let d = &mut shard.dbs[db];
    // The scratch shard listed the keys it created.
    let track_new = std::mem::replace(&mut d.track_new, false);
    for (i, e) in w {
        let k = &keys[i];
        match e {
            Some((e, at)) => d.insert(k, e, at),
            None => {
                d.delete(k, lazy);
            }
        }
    }
    d.track_new = track_new;
}

/// What [`across`] leaves for its caller's home shard: the events and
/// records the command made on the copies, in order, the shards it
/// reached, and the copies' keyspace hits and misses.
pub(crate) struct Across {
    pub events: Vec<KeyEvent>,
    pub records: Option<engine::outbox::Chunk>,
    pub shards: Vec<usize>,
    pub hits: u64,
    pub misses: u64,
    /// The records the call emitted on the copies (recorded or not), for
    /// the caller's debug check that a change said so (`exec`).
    #[cfg(debug_assertions)]
    pub emitted: u64,
}

/// Runs its second argument on the shard its first names.
pub(crate) type OnShard<'a> = dyn FnMut(usize, &mut dyn FnMut(&mut Shard)) + 'a;

/// One command over keys of several shards, run at once by a caller that
/// holds every one of them and reaches each by `on` (a script holding
/// every shard, `script::every`): the same three steps as the
/// coordinator (gather, run on copies, write back), each shard reached
/// by a call instead of a job. `run` runs the command on the scratch
/// shard of database `db`.
pub(crate) fn across(
    keys: &[&[u8]],
    db: usize,
    nshards: usize,
    on: &mut OnShard<'_>,
    run: &mut dyn FnMut(&mut Shard),
) -> Across {
    let groups = groups_of(keys, nshards);
    let mut got = Vec::with_capacity(groups.len());
    for (s, ks) in &groups {
        on(*s, &mut |sh| got.push(gather_on(sh, db, ks)));
    }
    let Loaded {
        mut shard,
        before,
        signalled,
    } = load(&groups, got, db, false);
    run(&mut shard);
    let records = shard.outbox.take();
    let RunOut { writes, events, .. } = diff(&groups, &mut shard, db, before, &signalled);
    for (s, keys, w) in writes {
        let mut w = Some(w);
        on(s, &mut |sh| {
            if let Some(w) = w.take() {
                write_back(sh, db, &keys, w);
            }
        });
    }
    Across {
        events,
        records,
        shards: groups.iter().map(|(s, _)| *s).collect(),
        hits: shard.stats.keyspace_hits,
        misses: shard.stats.keyspace_misses,
        #[cfg(debug_assertions)]
        emitted: shard.outbox.emitted,
    }
}

impl Coordinator for Scratch {
    fn take_records(&mut self) -> Vec<engine::outbox::Chunk> {
        std::mem::take(&mut self.records)
    }

    /// Its copy of the command's arguments, which the handler runs on: its
    /// transaction reads the keys from it for lock requests, and only if
    /// it takes locks (`dispatch::across_shards`).
    fn received_args(&self) -> Option<Args<'_>> {
        Some(self.args.args())
    }

    fn parked(&mut self) -> Option<Parked> {
        let (mut on, wake_home) = self.parked.take()?;
        let args = on.args.take().unwrap_or_else(|| {
            let args = std::mem::take(&mut self.args);
            std::sync::Arc::try_unwrap(args).unwrap_or_else(|a| (*a).clone())
        });
        Some(Parked {
            on,
            wake_home,
            handler: self.handler,
            args,
            call: crate::exec::ShardCall {
                db: self.db,
                no_touch: self.no_touch,
                databases: self.databases,
                max_bulk_len: self.max_bulk_len,
                reply_cap_bytes: 0,
                may_block: true,
                in_tx: false,
                nshards: self.nshards,
                caller: self.caller.clone(),
                tracker: None,
                evicting_for: None,
                client: self.client,
                ops: self.ops,
                master: false,
            },
        })
    }

    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Gather(p) => {
                self.gather_last = p.last;
                *plan = p;
                self.phase = Phase::Run;
                Ok(())
            }
            Phase::Run => {
                let run = self.run(outputs::<Gathered>(results), out)?;
                let db = self.db;
                let mut events = Some(run.events);
                // The copies' reads count on a real shard: the first job
                // of the write-back, or one of their own. (Not for a
                // read-only command, whose gather was its last round:
                // SUNION, PFCOUNT across shards still count none.)
                let counts = std::mem::take(&mut self.counts);
                let mut counts = (counts != (0, 0)).then_some(counts);
                if run.writes.is_empty() && !self.gather_last {
                    if let (Some((hits, misses)), Some(&(s, _))) =
                        (counts.take(), self.groups.first())
                    {
                        plan.run(s, move |env| {
                            env.shard.stats.keyspace_hits += hits;
                            env.shard.stats.keyspace_misses += misses;
                        });
                    }
                }
                for (s, keys, w) in run.writes {
                    let counts = counts.take();
                    let events = if s == run.events_shard {
                        events.take()
                    } else {
                        None
                    };
                    // WATCHes of these keys made while a script ran here
                    // (parked with it): registered after its writes, which
                    // doomed them on the copies only if made after the
                    // WATCH (`script::busy::take_written_back`).
                    let watches = crate::script::busy::take_written_back(
                        s,
                        db,
                        &mut w.iter().map(|(i, _)| &keys[*i][..]),
                    );
                    plan.run(s, move |env| {
                        if let Some((hits, misses)) = counts {
                            env.shard.stats.keyspace_hits += hits;
                            env.shard.stats.keyspace_misses += misses;
                        }
                        write_back(env.shard, db, &keys, w);
                        if let Some(ev) = events {
                            env.shard.emit_events(ev);
                        }
                        crate::script::busy::register_now(env.shard, watches);
                    });
                }
                plan.last = true;
                if plan.is_empty() {
                    if let Some(e) = self.failed.take() {
                        return Err(e);
                    }
                }
                Ok(())
            }
            Phase::Done => {
                drop(results);
                match self.failed.take() {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use engine::{Str, Value};

    use super::*;
    use crate::table::{flags::WRITE, keys, Exec};
    use crate::testutil::TestServer;
    use crate::util::as_str;

    /// `MOVEAPPEND src dst`: appends src's string to dst (creating it) and
    /// deletes src; replies dst's new length.
    fn move_append(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
        let (src, dst) = (args.get(1), args.get(2));
        let Some(e) = ctx.shard.lookup_write(ctx.db, src) else {
            ctx.out.int(-1);
            return Ok(());
        };
        let v = as_str(e)?.as_bytes().into_owned();
        ctx.shard.delete(ctx.db, src, engine::lazyfree::Del::Server);
        ctx.notify(ds::events::GENERIC, "del", src);
        let mut cur = match ctx.shard.lookup_write(ctx.db, dst) {
            Some(e) => as_str(e)?.as_bytes().into_owned(),
            None => Vec::new(),
        };
        cur.extend_from_slice(&v);
        ctx.out.int(cur.len() as i64);
        let at = ctx.shard.dbs[ctx.db].expire_of(dst);
        ctx.shard
            .store(ctx.db, dst, Value::Str(Str::from_bytes(&cur)), at);
        ctx.notify(ds::events::STRING, "append", dst);
        Ok(())
    }

    static SPEC: CommandSpec = CommandSpec::new(
        "moveappend",
        3,
        WRITE,
        keys(1, 2, 1),
        Exec::Shard(move_append, None),
        &[],
    );

    fn run(t: &mut TestServer, a: &str, b: &str) -> String {
        let owned = OwnedArgs::from_slices(&[&b"moveappend"[..], a.as_bytes(), b.as_bytes()]);
        let mut out = Reply::new(false);
        let c = {
            let mut ctx = ConnCtx {
                client: &mut t.client,
                out: &mut out,
                server: &t.server.clone(),
                home: 0,
                key_shards: &[],
            };
            coordinator(&SPEC, move_append, &mut ctx, owned.args(), true)
        };
        t.drive(c, &mut out);
        String::from_utf8_lossy(&out.into_bytes()).into_owned()
    }

    #[test]
    fn runs_a_handler_across_shards_and_writes_back_changes() {
        let mut t = TestServer::new(2);
        // "a" and "b" live on different shards of two.
        assert_ne!(shard_of(b"a", 2), shard_of(b"b", 2));
        t.run(&["SET", "a", "xy"]);
        t.run(&["SET", "b", "123"]);
        t.run(&["PEXPIRE", "b", "100000"]);
        assert_eq!(run(&mut t, "a", "b"), ":5\r\n");
        assert_eq!(t.run(&["EXISTS", "a"]), ":0\r\n");
        assert_eq!(t.run(&["GET", "b"]), "$5\r\n123xy\r\n");
        // The handler kept b's TTL; the write-back carried it.
        assert_eq!(t.run(&["TTL", "b"]), ":100\r\n");
        // Nothing to move: nothing written.
        assert_eq!(run(&mut t, "a", "b"), ":-1\r\n");
        assert_eq!(t.run(&["GET", "b"]), "$5\r\n123xy\r\n");
    }

    /// `RESTORESAME a b`: stores b's value back unchanged (as a BITOP or
    /// SUNIONSTORE whose result equals the destination); replies 1.
    fn restore_same(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
        let dst = args.get(2);
        let v = match ctx.shard.lookup_write(ctx.db, dst) {
            Some(e) => e.value().to_owned_value(),
            None => return Err(CmdError::NoSuchKey),
        };
        ctx.shard.store(ctx.db, dst, v, 0);
        ctx.out.int(1);
        Ok(())
    }

    static SAME: CommandSpec = CommandSpec::new(
        "restoresame",
        3,
        WRITE,
        keys(1, 2, 1),
        Exec::Shard(restore_same, None),
        &[],
    );

    #[test]
    fn an_identical_store_still_fires_watch_on_its_shard() {
        let mut t = TestServer::new(2);
        t.run(&["SET", "a", "x"]);
        t.run(&["SET", "b", "y"]);
        let sb = shard_of(b"b", 2);
        let flag = engine::WatchFlag::default();
        t.shards[sb].dbs[0].watch(b"b", &flag);
        let owned = OwnedArgs::from_slices(&[&b"restoresame"[..], b"a", b"b"]);
        let mut out = Reply::new(false);
        let c = {
            let mut ctx = ConnCtx {
                client: &mut t.client,
                out: &mut out,
                server: &t.server.clone(),
                home: 0,
                key_shards: &[],
            };
            coordinator(&SAME, restore_same, &mut ctx, owned.args(), true)
        };
        t.drive(c, &mut out);
        assert_eq!(out.into_bytes(), b":1\r\n");
        assert!(
            flag.load(Ordering::Acquire),
            "b was stored: its watchers fail"
        );
        assert_eq!(t.run(&["GET", "b"]), "$1\r\ny\r\n");
    }

    #[test]
    fn events_are_re_emitted_in_order_by_one_shard() {
        let mut t = TestServer::new(2);
        let flags = ds::events::parse(b"KEAn").unwrap();
        for s in &mut t.shards {
            s.set_notify(flags);
        }
        t.run(&["SET", "a", "xy"]);
        for s in &mut t.shards {
            s.take_events();
        }
        // "b" is on the other shard, and missing: the handler creates it.
        assert_ne!(shard_of(b"a", 2), shard_of(b"b", 2));
        assert_eq!(run(&mut t, "a", "b"), ":2\r\n");
        let ev = |e: &KeyEvent| (e.event, String::from_utf8_lossy(&e.key).into_owned());
        let on_a: Vec<_> = t.shards[shard_of(b"a", 2)]
            .take_events()
            .iter()
            .map(ev)
            .collect();
        // The handler's order (Redis's), "new" from the scratch shard only.
        assert_eq!(
            on_a,
            [
                ("del", "a".into()),
                ("new", "b".into()),
                ("append", "b".into())
            ]
        );
        assert!(t.shards[shard_of(b"b", 2)].take_events().is_empty());
        // Off: nothing recorded anywhere.
        for s in &mut t.shards {
            s.set_notify(0);
        }
        assert_eq!(run(&mut t, "b", "a"), ":2\r\n");
        assert!(t.shards.iter_mut().all(|s| s.take_events().is_empty()));
    }

    #[test]
    fn missing_source_and_repeated_keys() {
        let mut t = TestServer::new(2);
        t.run(&["SET", "a", "xy"]);
        // The reply is the handler's and both keys are untouched.
        assert_eq!(run(&mut t, "zz", "b"), ":-1\r\n");
        assert_eq!(t.run(&["EXISTS", "a", "b"]), ":1\r\n");
        // Same-key arguments are gathered once.
        assert_eq!(run(&mut t, "a", "a"), ":2\r\n");
        assert_eq!(t.run(&["GET", "a"]), "$2\r\nxy\r\n");
    }
}
