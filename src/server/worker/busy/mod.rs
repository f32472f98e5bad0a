//! The desk a worker lends a long script (see `commands::script::busy`,
//! Redis's `processEventsWhileBlocked`): while a script on this loop runs
//! past `busy-reply-threshold`, its hook calls [`Desk::serve_busy`] about
//! every millisecond of Lua, which serves this loop's *other* connections
//! in Redis's restricted mode.
//!
//! What a pass does, and never does:
//! * It polls this worker's epoll set without waiting (the first pass of
//!   a lend visits every connection instead: events the loop had already
//!   taken before the script started would otherwise never come again;
//!   and so does every pass while a hub holds the worker, whose set then
//!   has the connections' events, see `hub_set`).
//! * A connection that can execute (not paused, closing, or deferred) is
//!   read to `EAGAIN` and its complete requests go through the ordinary
//!   `dispatch`: errors of unknown commands, arity, NOAUTH and ACL come
//!   first as in Redis, then the command is refused with `-BUSY` unless
//!   flagged allow-busy (dispatch refuses everything else of a connection
//!   whose home is the busy shard). Allow-busy commands that need no shard
//!   (`Step::Done`: SCRIPT KILL, FUNCTION KILL, SHUTDOWN NOSAVE, MULTI ...)
//!   are answered, and so is a WATCH whose coordinator plans no job (see
//!   below). A WATCH whose jobs are all for free loops (shards the
//!   script's transaction only locks, or that nothing holds: their loops
//!   may still be slow, one a hub holds until the watchdog hands it back,
//!   one in a long command) is started as the connection's coordinator,
//!   its jobs sent through the lent mailbox, and answered by a later pass
//!   once their outputs are in, or by the loop after the script (see
//!   [`watch`]): `+OK` once its keys are registered, while the script
//!   runs, with no deadline to guess. One that would need a loop the
//!   script stops (its own, one it pinned or stalls: the builder parks
//!   or refuses a key of such a shard the script does not hold, so only
//!   a race leaves one), or read where no inbox is lent, is left unparsed
//!   and its connection deferred until the script ends, so its pipeline
//!   stays in order; what dispatch added to the client's watch list is
//!   taken back (run again, it would find the keys watched and register
//!   nothing).
//!   Nothing ever runs on this loop's shard from here.
//! * Replies are written at once (what the socket does not take waits for
//!   the loop's next flush). Pipelined bytes after a refused request stay
//!   framed: each request is consumed whole, exactly as the loop would.
//! * It accepts TCP connections (as Redis does while busy: an operator's
//!   new `redis-cli` must reach SCRIPT KILL); a unix socket's event, which
//!   may hand the connection to another thread through the mailbox, is
//!   replayed by the loop once the script ends
//!   ([`DeskState::missed_listener`]). A connection it skipped or could
//!   not finish is put on the loop's resume list with `unread` set, so the
//!   loop reads it again afterwards (epoll is edge-triggered: the event
//!   this pass took will not come back).
//! * It drains the loop's mailbox ([`inbox::serve_inbox`]), when the code that
//!   runs the script lent it ([`lend_inbox`]: the inline request path, a
//!   remote batch's script, a script on gathered copies in a coordinator's
//!   step). Other threads' requests sent before the script was published
//!   (afterwards their own dispatch refuses them) would otherwise wait
//!   for its end, where Redis answers them `-BUSY`:
//!   - a remote batch (`Msg::Exec`, plain commands of a connection of
//!     another thread, GET, MSET on one shard, EVAL ...) is answered
//!     `-BUSY`, every command of it, through the normal reply path (a
//!     direct reply written to the client, or the batch home); nothing
//!     runs on the shard. Unless work of its connection is held on this
//!     shard (`Core::deferred`, or kept by the desk) or it holds an
//!     allow-busy command: then it is kept, so that connection's replies
//!     and effects keep their order;
//!   - a transaction's lock request (`Msg::Job` with a lock: a
//!     multi-shard command, an EXEC, of a connection of another thread)
//!     is answered `tx::BusyWithdrawn` (its coordinator releases what it
//!     holds and replies `-BUSY`, EXEC `-EXECABORT ... BUSY`), unless it
//!     is kept while busy (WATCH, an EXEC that ran a command) or work of
//!     its connection is held here; so are the requests that waited in
//!     the shard's lock table since before the script ran
//!     ([`refuse::withdraw_waiting`]; nothing is granted here);
//!   - a work that only releases a transaction's locks here (one
//!     withdrawn at another shard the script's transaction locks, which
//!     held a lock here since before the script ran) has its coordinator
//!     answered at once ([`refuse::release_now`]), so its `-BUSY` does not wait
//!     for the script; the release itself is kept for after it;
//!   - everything else is kept (`Core::kept`) in arrival order, and the
//!     loop handles it before anything newer once the script ends: a
//!     coordinator's job (`Msg::Job`: a transaction's work, a kept lock
//!     request; its coordinator waits, as a
//!     command that needs a locked shard waits), a blocked command parked
//!     here (`Park`), an eviction request (`EvictNow`, `EvictDone`),
//!     tracked keys (`Track`), completions for this loop's connections
//!     from other shards (`ExecDone`, `JobDone`, `Unblocked`, `Wake`: the
//!     connections wait, their loop being inside the script), and a unix
//!     connection handed over (`Adopt`).
//!
//!   Remote batches its shard held back behind a lock before the script
//!   was published (`Core::deferred`, whole, first of their connection)
//!   are answered `-BUSY` as those arriving now ([`refuse::refuse_deferred`]), and
//!   so are this loop's connections whose request waited for a lock of
//!   its shard (`Core::lock_blocked`, [`Desk::serve_held`]): a script
//!   under its transaction's locks took its shard's lock before it ran.
//!
//!   Then it flushes the mailbox, so the replies reach their threads now.
//!   (The lend flushes it before the script starts: what the loop sent
//!   before, such as a lone hop's completion sent lazily earlier in the
//!   same drain, which its connection's later replies queue behind, would
//!   otherwise wait for the end of the iteration, after the script.)
//!
//! WATCH of keys of a shard held by the busy script (run in place: its
//! home shard and every shard it pinned) is answered at once, as Redis
//! 7.0 answers it (allow-busy), here (when all its keys are of those
//! shards, or watched already) and on every other thread: its builder
//! hands those keys to the published script
//! (`script::busy::Registry::watch_while_busy`), whose thread registers them on the
//! shard before the script's next command and when it ends, so a write
//! the script makes after `+OK` dooms the transaction exactly as in Redis
//! (none is missed; one made before the WATCH does not doom it). Keys of
//! the loop's shard while its script runs on gathered copies of several
//! shards (which holds no one shard) are answered at once too: parked
//! with the script, watched on its copies before its next command, and
//! registered on this shard right after the step that ran it
//! (`script::busy::Registry::watch_stopped`; `home::step_coord`,
//! [`Core::lending_inbox`] and [`Worker::with_desk`] call
//! `register_parked`), those its transaction writes back right after
//! that write-back, so a write of the key the script makes after `+OK`
//! dooms the transaction and one made before does not, as in Redis
//! (see `script::busy::watch`). Keys of a
//! loop it stalls are parked too: registered before that loop runs
//! again, when the hub lends it away ([`Worker::release_stalled`]) or,
//! after the script, at its next turn, lend or pin
//! ([`Worker::register_parked`]). A WATCH deferred here
//! waits for the script's end: the client has no reply before, so its
//! WATCH takes effect at a later instant, which is just as linearizable.
//!
//! A hub's other loops (shard consolidation) are not served here: the
//! watchdog gives its adopted loops back to their threads while it is
//! stuck (see `host`), where they are served and their requests for this
//! shard answered as any thread's. Except the loops a script run in place
//! pinned (their seats stay locked): each is served by
//! [`Worker::serve_pinned`] exactly as this desk and [`inbox::serve_inbox`]
//! serve the script's own loop (see `in_place`). The hub's own loop,
//! when the script runs on an adopted one ([`lending_own`]; it cannot go
//! back to its thread, it lives on the hub's stack), is lent at the first
//! pass to the thread of the loop running the script (`host::loan`),
//! which serves it for real; only if it cannot be (a run in place pinned
//! it) is it served here, published as *stalled* by the script: its
//! shard's commands get `-BUSY` on every thread, as Redis answers every
//! command while busy, since that shard cannot run until the script ends
//! (nothing runs on it from the hook). A WATCH of its keys is not the
//! script's to take (it does not hold that shard): it is parked, and the
//! shard's other commands get `-BUSY`. A loop handed to a hub that was
//! running alone when the script started waits for the script (the
//! watchdog does not see that hub stuck): no deadlock, it is served when
//! the script ends. And so is
//! the caller's loop of a script run by a call on another co-hosted shard
//! (`in_place::by_call`), whose turn the script runs in: its desk and
//! mailbox are lent as an idle loop's (`commands::script::busy::
//! lend_caller`), stalled, served at each pass after the script's own
//! (should such a run be published: it is taken back first, and hops,
//! see `in_place`).
//!
//! A transaction's job lends the desk and the mailbox the same way
//! ([`JobDesk`], its `ShardEnv::clients`), for a script it runs under the
//! transaction's locks (a script on every shard, one inside MULTI/EXEC:
//! `commands::script::busy::under_locks`). A job lent by a call from
//! another loop's turn (`cohost`, that loop's desk lent) lends that loop
//! as the caller's loop of a script by a call: stalled, its mailbox
//! ([`lend_caller_inbox`]) and connections served at each pass, a WATCH
//! of its keys parked and registered by its coordinator right after the
//! call (`home::advance`); a hub's idle own loop is served too
//! (`cohost::with_worker_for_scripts`), as for a script by a call. The loops of the shards those
//! locks hold are free meanwhile: while such a script is busy, each turn
//! of theirs tries again what waits there behind a lock
//! ([`Worker::refuse_behind_busy`]), so that remote batches get `-BUSY`
//! (`run_batch` answers a command held back by a lock so then) and their
//! lock-blocked connections are refused by dispatch, as Redis answers
//! every command while busy.
//!
//! What the desk answers and refuses is counted as Redis counts it
//! (commandstats calls and `rejected_calls`, errorstats,
//! `total_error_replies`, network bytes): in a [`Tally`] of its own while
//! the loop's counters are lent to the running handler, added to them
//! when the script ends.
//!
//! # Files
//!
//! | file     | its job |
//! |----------|---------|
//! | `mod`    | the desk a loop lends ([`Desk`], [`Worker::with_desk`]), and a pinned loop's pass |
//! | `pass`   | one busy pass over the loop's connections: read, dispatch, refuse, accept |
//! | `inbox`  | the loop's mailbox lent to the passes ([`Inbox`]), and what a pass takes from it |
//! | `refuse` | what the inbox answers `-BUSY` now, and what it keeps for after the script |
//! | `locked` | a script under a transaction's locks: the job's desk ([`JobDesk`]), the locked loops |
//! | `idle`   | loops a script stops without holding them: a hub's own loop, WATCHes parked for them |
//! | `watch`  | a WATCH a pass reads, its jobs sent while the script runs |
//! | `tally`  | what the passes counted, added to the loop's statistics after the script |

use mio::{Events, Poll};
use resp::Reply;

use commands::ServerShared;

use super::{Conns, Core, Worker};

mod idle;
mod inbox;
mod locked;
mod pass;
mod refuse;
mod tally;
mod watch;

pub use idle::lending_own;
use inbox::lend_inbox;
pub(super) use inbox::{inbox_of, lend_caller_inbox, Inbox};
pub(super) use locked::JobDesk;
pub(crate) use tally::Tally;

/// What a worker keeps between lends (allocated on the first busy pass).
#[derive(Default)]
pub(crate) struct DeskState {
    events: Option<Events>,
    side: Option<Reply>,
    /// What its passes answered and refused on this loop's connections.
    tally: Tally,
    scratch: commands::exec::KeyScratch,
    args: Vec<std::ops::Range<usize>>,
    /// A pass took a listener's event: the loop accepts once the script
    /// ends.
    pub missed_listener: bool,
    /// Connections left alone until the script ends: `(slot, gen)`.
    deferred: Vec<(usize, u32)>,
}

/// Settings a pass needs (copied from the worker's cached config).
#[derive(Clone, Copy)]
pub(crate) struct DeskLimits {
    pub max_bulk_len: u64,
    pub qbuf_limit: usize,
    pub maxclients: usize,
    pub tcp_keepalive_s: u64,
}

/// What a worker lends a script; see the module documentation.
pub(crate) struct Desk<'a> {
    pub conns: &'a mut Conns,
    pub poll: &'a mut Poll,
    pub server: &'a std::sync::Arc<ServerShared>,
    pub id: usize,
    pub limits: DeskLimits,
    pub tcp: &'a [mio::net::TcpListener],
    pub state: &'a mut DeskState,
    /// No pass yet in this lend.
    pub first: bool,
}

impl Worker {
    /// Runs `f` on this loop's core with the rest of the loop (its other
    /// connections, poll set and listeners) lent to a script `f` may run,
    /// which serves them if it runs long. The request path lends for every
    /// connection it executes, the shard side for a script command of a
    /// batch (whose caller lives on another thread).
    pub(super) fn with_desk<R>(&mut self, f: impl FnOnce(&mut Core) -> R) -> R {
        let (core, mut lent) = self.split_desk(true);
        let r = commands::script::busy::lend_desk(&mut lent, core.id, || f(core));
        lent.state.tally.settle(&mut core.stats);
        // (Registered already by the step that ran the script, `home`;
        // here whatever no step registered, before the loop goes on.)
        commands::script::busy::register_parked(&mut core.shard);
        r
    }

    /// This worker split into its core and the rest of its loop, as a
    /// [`Desk`] (`first`: no busy pass yet in this lend).
    pub(super) fn split_desk(&mut self, first: bool) -> (&mut Core, Desk<'_>) {
        let Worker {
            core,
            conns,
            poll,
            desk,
            tcp,
            shared,
            ..
        } = self;
        let lent = Desk {
            conns,
            poll,
            server: shared,
            id: core.id,
            limits: DeskLimits {
                max_bulk_len: core.cfg.max_bulk_len,
                qbuf_limit: core.cfg.qbuf_limit,
                maxclients: core.cfg.maxclients,
                tcp_keepalive_s: core.cfg.tcp_keepalive_s,
            },
            tcp,
            state: desk,
            first,
        };
        (core, lent)
    }

    /// One busy pass over this loop while a script run in place on another
    /// co-hosted loop pins it (`in_place`; `first`: its first pass in that
    /// run): its mailbox as [`inbox::serve_inbox`] serves the script's own loop's
    /// ([`lend_inbox`]), then its connections as that loop's desk serves
    /// them ([`Worker::with_desk`]). Its shard is the script's: not
    /// touched. What it counts waits in the desk's tally and
    /// `Core::refused` until the script lets this loop go
    /// ([`Worker::settle_desk`]).
    pub(super) fn serve_pinned(&mut self, first: bool) {
        engine::alloc::enter_shard(self.core.id);
        let (core, mut lent) = self.split_desk(first);
        // Lent for the pass (its desk serves it first, `serve_inbox`):
        // a WATCH its desk reads sends its jobs through it (`watch`).
        let mut inbox = inbox_of!(core);
        lend_inbox(&mut inbox, || {
            commands::script::busy::BusyServe::serve_busy(&mut lent)
        });
        // Its share of a running snapshot, as its own loop would between
        // batches: no command runs on its shard during a pass, and a
        // long script must not hold up a snapshot begun before it (the
        // AOF rewrite of `CONFIG SET appendonly yes`).
        self.save_step(false);
    }

    /// Adds what this loop's desk and inbox counted while a script pinned
    /// it ([`Worker::serve_pinned`]) to its statistics.
    pub(super) fn settle_desk(&mut self) {
        self.desk.tally.settle(&mut self.core.stats);
        self.core.refused.settle(&mut self.core.stats);
    }
}
