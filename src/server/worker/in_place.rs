//! Scripts across co-hosted shards, run in place (the runtime side of
//! `commands::script::in_place`, which explains the design): when every
//! shard a script's declared keys live on is this worker's or lent to it
//! (`cohost`) and free, the script runs at once on the real shards, its
//! `redis.call`s reaching the other shards by a call, instead of through
//! a transaction on copies (`commands::script::wide`).
//!
//! Taken only when: the connection has nothing outstanding (its reply
//! goes straight to its output, and no earlier request of it waits on
//! any shard: nothing of it is overtaken), the caller tracks no keys (its
//! declared keys are remembered up front on the copies' path), it is not
//! a master's link, no `maxmemory` is set (the copies' path decides
//! eviction there), and the home shard and every declared key's shard are
//! free (`Worker::idle_for_unlocked`: no lock held or asked for, nothing
//! deferred, no AOF or replica stream). Each co-hosted shard is pinned
//! ([`cohost::pin`]) before the script starts, or, for an undeclared key,
//! before its first use; all are let go when it ends.
//!
//! A shard joining ([`Worker::enter_in_place`]) picks up what its own
//! turn would have first (a CONFIG SET, the caller's clock, the tracking
//! switch), as a lent job does; after the script each one leaving
//! ([`Worker::leave_in_place`]) gets a job's epilogue: its changes tagged
//! with the script's connection for tracking, its dirty count and events
//! published, clients blocked on keys it filled served, its messages
//! flushed.
//!
//! # Past `busy-reply-threshold`
//!
//! A run that can still be taken back is, and runs again on copies (see
//! `commands::script::in_place`). One that cannot stays, and the loops it
//! pinned cannot run until it ends: so each is lent to the script's hook
//! as the caller's own loop is ([`PinnedDesks`], through
//! `commands::script::busy::lend_pinned`, next to the own loop's
//! `with_desk` and `busy::Inbox::lend`). Each busy pass serves every pinned
//! loop once ([`Worker::serve_pinned`]): its mailbox as the own loop's
//! inbox is served, then its connections as the own loop's desk serves
//! them, with the same refusals, the same counting (its desk's tally and
//! `Core::refused`, added to its statistics when it leaves, before
//! anything else runs on it) and the same rules for what waits (kept
//! messages, deferred connections, the resume list: handled by the loop's
//! next turn, which its non-empty lists make due at once). The script is
//! published with those shards (`Running::pinned`, brought up to date at
//! each pass before anything is served), so every dispatch, the pinned
//! desks' own included, refuses their commands with `-BUSY`, and a SCRIPT
//! KILL, FUNCTION KILL or SHUTDOWN NOSAVE read on any pinned loop acts on
//! the script as one read on its own loop does. A WATCH of keys of the
//! shards it holds (its home and those pinned) is answered at once, on
//! any loop: the script takes the keys and registers each on its shard
//! before its next command (`commands::script::busy::watch_while_busy`).
//!
//! Why this aliases nothing. The run holds no reference to a pinned
//! worker: [`Held`] keeps shard ids only ([`Pinned`], a list each side
//! borrows for a moment) and reaches a shard's data through
//! [`cohost::with_worker`] for the length of one `redis.call`'s command.
//! The hook, and so every desk pass, runs between Lua instructions, never
//! inside such a call (a command run for a script runs no Lua); and
//! `with_worker` takes the thread's lender out for its call, so even a
//! pass started inside one would find no worker to lend, never a second
//! `&mut` to one. A pass borrows the pinned worker whole but touches only
//! its connection side (connections, poll set, listeners, desk state,
//! mailbox, kept messages; `Core::deferred` read only), exactly what the
//! own loop's desk reaches of its worker: never `Core::shard`, so the
//! data the script reads and writes on that shard between two hook calls
//! is the data it left there. Dispatch from a desk runs nothing on a
//! shard (`busy`): what would is refused, kept or deferred.
//!
//! Cost: on a thread alone with its worker (no lender) the first declared
//! key of another shard fails `pin` at once (one thread-local read) and
//! the copies' path runs as before.
//!
//! # One shard by a call
//!
//! A script whose declared keys are all on one co-hosted shard other than
//! its caller's ([`by_call`], from `request::execute`, on the terms a
//! plain command runs by a call there: nothing of the connection
//! outstanding, no tracking, no master, no memory limit, the shard free)
//! runs on that shard's worker by a call, exactly as its batch would run
//! there after a hop (`Worker::run_batch`): that worker's desk and inbox
//! are lent to it, so it is published with that shard held and its
//! loop's clients served from its hook; the batch's epilogue follows. A
//! hop cost ~6,000 instructions more per call (callgrind, EVALSHA of
//! INCR + EXPIRE, 2 shards on one hub: a batch, a turn of the other loop,
//! a reply).
//!
//! What the hop did not stop, the call does: the caller's loop, whose
//! turn runs the script. So its desk and mailbox are lent too, as an
//! idle loop (`commands::script::busy::lend_caller`, the hub's own loop's
//! way, see `busy::lending_own`): once published, the script stalls it
//! (its shard's commands `-BUSY` everywhere, as Redis answers every
//! client) and serves it at each pass. A hub's own loop idle meanwhile is
//! reached by a call as before: `cohost::with_worker_open` keeps the
//! other workers lendable while the script's worker is.
//!
//! Past `busy-reply-threshold`, a run that can still be taken back (it
//! published nothing and wrote nothing too large for an undo) is, rather
//! than published (`commands::script::busy::by_call`), and runs again as
//! a hop, where the caller's loop is free, as it always was: in that case
//! a long script is seen exactly as before. And a run is taken back
//! before it could no longer be (`commands::script::run`'s
//! `Run::hop_instead`: before a PUBLISH, MOVE or COPY, or a write over a
//! value no undo keeps), to run again as a hop, where it does that once;
//! its script is marked (`commands::script::cache::HopMark`) so that its
//! later calls from another loop hop at once (as one that was taken back
//! at the threshold). So a run by a call can always be taken back, and
//! never holds its caller's loop past the threshold, whose shard it does
//! not hold (issue 23 point 5: a running script freezes only the shards
//! it holds). The caller's loop is still lent to the hook as an idle one
//! (above): a run the hook could not take back (none is known) would be
//! published with it stalled, never leave it unserved. Cost: a script
//! that publishes pays a hop per call from another loop (as before the
//! call); the thread remembers its SHA-1 (or function name) once a visit
//! found its mark ([`known_to_hop`]), so later calls skip the visit.
//!
//! A script that touches a key of another shard it did not declare is
//! taken back as on its own shard and runs again over more keys, from the
//! caller (`request::script_across`: in place if it can).

use std::cell::RefCell;

use commands::ctx::Home;
use commands::{ClientState, Resolved};
use resp::{Args, Reply};

use super::super::mailbox::ConnRef;
use super::busy::inbox_of;
use super::{cohost, home, pubsub, tracking, waiters, Core, Worker};

/// The co-hosted shards a script run in place pinned, shared by the run
/// ([`Held`], which adds to it) and its busy passes ([`PinnedDesks`],
/// which serve their loops): each borrows the list only for the moment.
struct Pinned {
    /// The worker running the script.
    home: usize,
    /// Pinned and entered, in the order taken.
    entered: RefCell<Vec<usize>>,
    /// Those a busy pass served already (the first pass of a loop visits
    /// every connection, see `busy`).
    served: RefCell<Vec<usize>>,
}

/// The co-hosted shards a script run in place holds.
struct Held<'a> {
    pinned: &'a Pinned,
    now_ms: u64,
}

impl commands::script::in_place::Shards for Held<'_> {
    fn hold(&mut self, s: usize) -> bool {
        if self.pinned.entered.borrow().contains(&s) {
            return true;
        }
        let (now_ms, home) = (self.now_ms, self.pinned.home);
        let ok = cohost::pin(s)
            && cohost::with_worker(s, home, |w| w.enter_in_place(now_ms)) == Some(true);
        if ok {
            self.pinned.entered.borrow_mut().push(s);
        }
        ok
    }

    fn with_shard(&mut self, s: usize, f: &mut dyn FnMut(&mut engine::Shard)) {
        debug_assert!(self.pinned.entered.borrow().contains(&s));
        cohost::with_worker(s, self.pinned.home, |w| {
            engine::alloc::enter_shard(w.core.id);
            f(&mut w.core.shard)
        });
    }

    fn with_stats(&mut self, s: usize, f: &mut dyn FnMut(&commands::ThreadStats)) {
        cohost::with_worker(s, self.pinned.home, |w| f(&w.core.stats));
    }

    fn with_clients(&mut self, s: usize, f: &mut dyn FnMut(&dyn commands::coord::ClientRegistry)) {
        // Its connection table only, read between two hook calls (see the
        // module docs: a busy pass never runs inside a call).
        cohost::with_worker(s, self.pinned.home, |w| f(&w.conns));
    }
}

/// The loops of the shards a run in place pinned, lent to its busy passes
/// (see the module docs): each pass serves each one's connections and
/// mailbox, never its shard.
struct PinnedDesks<'a>(&'a Pinned);

impl commands::script::busy::PinnedLoops for PinnedDesks<'_> {
    fn pinned(&self, into: &mut Vec<usize>) {
        into.clone_from(&self.0.entered.borrow());
    }

    fn serve_pinned(&mut self) {
        let p = self.0;
        // By index: nothing pins a shard during a pass (no Lua, no
        // command on a shard runs here), but no borrow is held across
        // the calls either.
        let mut i = 0;
        while let Some(s) = p.entered.borrow().get(i).copied() {
            i += 1;
            let first = !p.served.borrow().contains(&s);
            // `None` (not lent): only if called from inside another lent
            // worker, which the hook never is (see the module docs).
            if cohost::with_worker(s, p.home, |w| w.serve_pinned(first)).is_some() && first {
                p.served.borrow_mut().push(s);
            }
        }
    }
}

/// What [`run`] did.
pub(super) enum Ran {
    /// Its shards are not all co-hosted and free: nothing happened.
    Declined,
    /// Ran; its reply is in `out`.
    Done,
    /// Ran until it touched keys it cannot reach here, and was taken back
    /// (no reply): run it again on copies over these keys too.
    Widen(Vec<Vec<u8>>),
}

/// Runs script command `resolved` of `client` in place if it can (see the
/// module docs), the client lent to it (`commands::Sender`: `mem_bytes`,
/// its buffers' bytes); `out` is the connection's output (nothing of it is
/// outstanding). `every`: it asked for every shard (a keyspace command:
/// `commands::script::every`), so every shard is pinned up front, or it
/// declines at once (a run that would be taken back again, its calls
/// counted twice).
pub(super) fn run(
    core: &mut Core,
    (client, mem_bytes): (&mut ClientState, usize),
    out: &mut Reply,
    (resolved, handler): (Resolved, commands::table::ShardHandler),
    args: Args<'_>,
    every: bool,
) -> Ran {
    if client.tracking.is_some()
        || client.master
        || core.shard.evict.maxmemory != 0
        || !home::home_idle(core)
    {
        return Ran::Declined;
    }
    let Ok(nkeys) = commands::script::run::numkeys(args) else {
        return Ran::Declined;
    };
    let n = core.server.nshards;
    let pinned = Pinned {
        home: core.id,
        entered: RefCell::new(Vec::new()),
        served: RefCell::new(Vec::new()),
    };
    let mut held = Held {
        pinned: &pinned,
        now_ms: core.shard.now_ms,
    };
    if every {
        for s in (0..n).filter(|&s| s != core.id) {
            if !commands::script::in_place::Shards::hold(&mut held, s) {
                core.refused.settle(&mut core.stats);
                leave(core.id, &pinned.entered.borrow(), client.home);
                return Ran::Declined;
            }
        }
    }
    for i in 3..3 + nkeys {
        // Every shard held already (the common case with 2 shards): the
        // other keys' shards need no CRC16 (~150 instructions a key).
        if pinned.entered.borrow().len() + 1 >= n {
            break;
        }
        let s = commands::table::shard_of(args.get(i), n);
        if s != core.id && !commands::script::in_place::Shards::hold(&mut held, s) {
            core.refused.settle(&mut core.stats);
            leave(core.id, &pinned.entered.borrow(), client.home);
            return Ran::Declined;
        }
    }
    // (No tracker, no eviction, no master: declined above.)
    let call = super::request::shard_call((&core.server, &core.cfg), client, resolved, true);
    // Its connection, out of its slot here (`commands::Sender`).
    let sender = commands::Sender {
        client: &*client,
        mem_bytes,
    };
    // The shard side's inbox is lent to it, as to any script (see `busy`),
    // and the pinned loops, to be served as this one (see the module docs).
    let mut desks = PinnedDesks(&pinned);
    let on = inbox_of!(core).lend(&mut core.stats, |stats| {
        commands::script::busy::lend_pinned(&mut desks, || {
            commands::script::in_place::run(
                resolved,
                handler,
                args,
                &mut core.shard,
                call,
                out,
                stats,
                (&mut held, sender),
            )
        })
    });
    leave(core.id, &pinned.entered.borrow(), client.home);
    tracking::tag_touched(core, Some(client.home));
    match on {
        Some(on) if on.widen => Ran::Widen(on.keys),
        _ => {
            core.scripts_in_place += 1;
            Ran::Done
        }
    }
}

/// Runs script command `resolved` of a connection with nothing
/// outstanding (`out`, its output), whose declared keys are all on
/// co-hosted shard `shard` (not this loop's), on that shard by a call
/// (`cohost`), as its batch would run there after a hop (see the module
/// docs, "One shard by a call"). `Ran::Declined` if that worker is not
/// lent or not free (nothing ran), or if the run was taken back past
/// `busy-reply-threshold` (nothing of it is left): then it hops.
#[allow(clippy::too_many_arguments)]
pub(super) fn by_call(
    core: &mut Core,
    conn: ConnRef,
    shard: usize,
    (resolved, handler): (Resolved, commands::table::ShardHandler),
    args: Args<'_>,
    (call, sender): (commands::exec::ShardCall, commands::Sender<'_>),
    out: &mut Reply,
) -> Ran {
    let (id, now_ms) = (core.id, core.shard.now_ms);
    let mut inbox = inbox_of!(core);
    // What this loop sent before (a lone hop's completion sent lazily)
    // goes now, not after the script (as `busy::Inbox::lend` does).
    inbox.mailbox.flush();
    let ran = commands::script::busy::lend_caller(id, &mut || inbox.serve(), || {
        cohost::with_worker_open(shard, id, |w| {
            w.run_lent_script(conn, (resolved, handler), args, (call, sender), out, now_ms)
        })
    });
    core.refused.settle(&mut core.stats);
    // The caller's loop, stalled should the script have been published,
    // runs on from here: the WATCHes parked for it first.
    commands::script::busy::register_parked(&mut core.shard);
    if commands::script::busy::take_marked() {
        remember_hop(core.server.ops, args);
    }
    match ran.flatten() {
        None => Ran::Declined,
        // Taken back past `busy-reply-threshold` (see the module docs):
        // it runs again as a hop.
        Some(Some(on)) if on.widen && on.keys.is_empty() => Ran::Declined,
        Some(Some(on)) if on.widen => Ran::Widen(on.keys),
        Some(on) => {
            debug_assert!(on.is_none(), "a script blocked");
            Ran::Done
        }
    }
}

/// Script commands a thread remembers, at most per list (the oldest goes).
const REMEMBERED_MAX: usize = 32;
/// Longer keys are not remembered (a SHA-1 has 40 bytes).
const REMEMBERED_KEY_MAX: usize = 64;

/// Script commands a thread learned something of, by their argument 1
/// (EVALSHA's SHA-1, FCALL's function name; an EVAL's body when short),
/// under the [`script_generations`] they were learned in: a flush or a
/// library change since forgets them (the scripts and functions gone or
/// replaced start unknown). A key that names something else (an EVAL's
/// body, a script loaded again) only picks a path that may cost more:
/// each list's use below is right for any script.
struct Remembered {
    keys: Vec<Box<[u8]>>,
    gen: (u64, u64),
}

impl Remembered {
    const fn new() -> Remembered {
        Remembered {
            keys: Vec::new(),
            gen: (0, 0),
        }
    }

    /// Whether `args` is remembered: nothing but a length test while the
    /// list is empty, two atomic loads more while it is not.
    fn contains(&mut self, ops: &commands::ops::Ops, args: Args<'_>) -> bool {
        if self.keys.is_empty() {
            return false;
        }
        if self.gen != script_generations(ops) {
            self.keys.clear();
            return false;
        }
        let k = args.get(1);
        self.keys.iter().any(|x| x.eq_ignore_ascii_case(k))
    }

    fn add(&mut self, ops: &commands::ops::Ops, args: Args<'_>) {
        let k = args.get(1);
        if k.len() > REMEMBERED_KEY_MAX {
            return;
        }
        let now = script_generations(ops);
        if std::mem::replace(&mut self.gen, now) != now {
            self.keys.clear();
        }
        if self.keys.iter().any(|x| x.eq_ignore_ascii_case(k)) {
            return;
        }
        if self.keys.len() == REMEMBERED_MAX {
            self.keys.remove(0);
        }
        self.keys.push(k.into());
    }
}

thread_local! {
    /// The script commands whose runs by a call this thread saw taken
    /// back for their script's mark (`commands::script::cache::HopMark`,
    /// see the module docs): their calls hop without the visit that finds
    /// the mark (~2,000 instructions, callgrind). A hop is always right.
    static HOPS: RefCell<Remembered> = const { RefCell::new(Remembered::new()) };

    /// The script commands whose first run this thread saw abandoned for
    /// an undeclared key of another shard (`commands::script::wide`):
    /// their later calls start in place ([`run`], see
    /// `request::execute`), where such a key of a co-hosted shard is
    /// pinned and reached as any other, instead of running where their
    /// declared keys are until the stray key and again from the start
    /// (a script with two such keys cost 63.6 k instructions against
    /// 29.3 k declared, callgrind). Running in place is right for any
    /// script; where it declines, the call runs as it would have.
    static STRAYS: RefCell<Remembered> = const { RefCell::new(Remembered::new()) };
}

/// The generations of the script cache and of the function libraries of
/// the server of `ops` (`SCRIPT FLUSH`, `FUNCTION LOAD / DELETE / FLUSH /
/// RESTORE` bump them): what [`Remembered`] lists were learned under.
fn script_generations(ops: &commands::ops::Ops) -> (u64, u64) {
    (ops.scripts.generation(), ops.functions.generation())
}

/// Whether script command `args` is remembered to hop (see `HOPS`).
pub(super) fn known_to_hop(ops: &commands::ops::Ops, args: Args<'_>) -> bool {
    HOPS.with(|h| h.borrow_mut().contains(ops, args))
}

/// Remembers script command `args` as a hop (see `HOPS`).
fn remember_hop(ops: &commands::ops::Ops, args: Args<'_>) {
    HOPS.with(|h| h.borrow_mut().add(ops, args))
}

/// Whether script command `args` is remembered to stray (see `STRAYS`).
pub(super) fn known_to_stray(ops: &commands::ops::Ops, args: Args<'_>) -> bool {
    STRAYS.with(|h| h.borrow_mut().contains(ops, args))
}

/// Remembers script command `args` as one that strays (see `STRAYS`).
pub(super) fn remember_stray(ops: &commands::ops::Ops, args: Args<'_>) {
    STRAYS.with(|h| h.borrow_mut().add(ops, args))
}

/// Every shard entered leaves (in order), then all are unpinned.
fn leave(home: usize, entered: &[usize], writer: Home) {
    for &s in entered {
        cohost::with_worker(s, home, |w| w.leave_in_place(writer));
    }
    cohost::unpin_all();
}

impl Worker {
    /// [`by_call`]'s side on the script's shard: `None` (nothing run)
    /// unless this shard is free as for a lent command
    /// (`Worker::run_lent_command`: no lock, nothing held back, no AOF or
    /// replica stream, no memory limit); else what the script asks for
    /// (more keys), after a batch's epilogue. The script runs as in a
    /// batch (`Worker::run_batch`): this loop's desk and inbox lent to
    /// it.
    fn run_lent_script(
        &mut self,
        conn: ConnRef,
        (resolved, handler): (Resolved, commands::table::ShardHandler),
        args: Args<'_>,
        (call, sender): (commands::exec::ShardCall, commands::Sender<'_>),
        out: &mut Reply,
        now_ms: u64,
    ) -> Option<Option<commands::BlockOn>> {
        engine::alloc::enter_shard(self.core.id);
        // What its turn would have picked up first (see `run_lent_job`).
        self.refresh_config();
        if !self.idle_for_unlocked() || self.core.shard.evict.maxmemory != 0 {
            return None;
        }
        self.core.shard.now_ms = self.core.shard.now_ms.max(now_ms);
        tracking::track_check(&mut self.core);
        let db = call.db;
        let on = commands::script::busy::by_call(|| {
            self.with_desk(|core| {
                core.lending_inbox(|shard, stats| {
                    let h = (resolved, handler);
                    commands::exec::run_shard_sent(h.0, h.1, args, shard, call, out, stats, sender)
                })
            })
        });
        self.after_desk();
        if self.core.shard.dbs[db].has_ready() {
            waiters::serve_ready(&mut self.core);
        }
        tracking::tag_touched(&mut self.core, Some(tracking::home_of(conn)));
        self.core.publish_dirty();
        self.publish_events();
        self.core.shard.publish_memory();
        // This worker may sit this round out: what it sent goes now.
        self.spilled |= self.core.mailbox.flush();
        Some(on)
    }

    /// Joins a script run in place (pinned already): false if this shard
    /// is not free for it; else what its turn would have picked up first.
    fn enter_in_place(&mut self, now_ms: u64) -> bool {
        if !self.idle_for_unlocked() {
            return false;
        }
        engine::alloc::enter_shard(self.core.id);
        self.refresh_config();
        self.core.shard.now_ms = self.core.shard.now_ms.max(now_ms);
        tracking::track_check(&mut self.core);
        true
    }

    /// Leaves a script run in place: a job's epilogue (see the module
    /// docs); `writer` made the changes.
    fn leave_in_place(&mut self, writer: Home) {
        engine::alloc::enter_shard(self.core.id);
        // What its desk answered and refused while pinned (see `busy`),
        // counted before anything else runs here; a listener event it
        // took is replayed.
        self.settle_desk();
        self.after_desk();
        tracking::tag_touched(&mut self.core, Some(writer));
        self.core.publish_dirty();
        pubsub::publish_events(&mut self.core);
        if self.core.shard.dbs.iter().any(|d| d.has_ready()) {
            waiters::serve_ready(&mut self.core);
        }
        // This worker may sit this round out: what it sent goes now.
        self.spilled |= self.core.mailbox.flush();
    }
}
