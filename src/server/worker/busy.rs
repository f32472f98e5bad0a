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
//! * It drains the loop's mailbox ([`serve_inbox`]), when the code that
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
//!     ([`withdraw_waiting`]; nothing is granted here);
//!   - a work that only releases a transaction's locks here (one
//!     withdrawn at another shard the script's transaction locks, which
//!     held a lock here since before the script ran) has its coordinator
//!     answered at once ([`release_now`]), so its `-BUSY` does not wait
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
//!   are answered `-BUSY` as those arriving now ([`refuse_deferred`]), and
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
//! (`script::busy::watch_while_busy`), whose thread registers them on the
//! shard before the script's next command and when it ends, so a write
//! the script makes after `+OK` dooms the transaction exactly as in Redis
//! (none is missed; one made before the WATCH does not doom it). Keys of
//! the loop's shard while its script runs on gathered copies of several
//! shards (which holds no one shard) are answered at once too: parked
//! with the script, watched on its copies before its next command, and
//! registered on this shard right after the step that ran it
//! (`script::busy::watch_stopped`; `home::step_coord`,
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
//! [`Worker::serve_pinned`] exactly as this desk and [`serve_inbox`]
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

use std::cell::Cell;
use std::collections::VecDeque;
use std::ptr::NonNull;

use mio::{Events, Poll, Token};
use resp::{parse_request, Args, Limits, Parsed, Reply};

use commands::exec::{dispatch, Step};
use commands::{ConnCtx, ReplyMode, ServerShared, ThreadStats};

use super::super::mailbox::{Batch, ConnRef, Mailbox, Msg};
use super::accept::Door;
use super::request::paused;
use super::{Conns, Core, Deferred, Worker, TCP_BASE, TLS_BASE, UNIX, WAKER};

mod watch;

use watch::{watch_now, Watched};

/// Events one pass takes from epoll at most (the rest wait for the next
/// pass, about a millisecond later).
const EVENTS_MAX: usize = 256;

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
    /// run): its mailbox as [`serve_inbox`] serves the script's own loop's
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

/// What a transaction's job sees of its loop's connections
/// (`ShardEnv::clients`): the connection table, with the rest of the loop
/// beside it, lent to a script the job runs under the transaction's locks
/// (`commands::script::busy::under_locks`: a script on every shard, one
/// inside MULTI/EXEC) exactly as the request path lends it
/// ([`Worker::with_desk`], [`Core::lending_inbox`]): past the threshold
/// its hook serves this loop's other connections (`-BUSY`, SCRIPT KILL,
/// SHUTDOWN NOSAVE) and its mailbox. Cost per job: a few words copied.
pub(super) struct JobDesk<'a> {
    desk: Desk<'a>,
    inbox: Inbox<'a>,
    /// A script was lent the loop: the worker settles its desk after the
    /// job ([`Worker::settle_desk`], `after_desk`).
    lent: bool,
}

impl<'a> JobDesk<'a> {
    pub(super) fn new(desk: Desk<'a>, inbox: Inbox<'a>) -> Self {
        JobDesk {
            desk,
            inbox,
            lent: false,
        }
    }

    pub(super) fn lent(&self) -> bool {
        self.lent
    }
}

impl commands::coord::ClientRegistry for JobDesk<'_> {
    fn for_each(&self, f: &mut dyn FnMut(&commands::ClientState, &commands::coord::ClientIo)) {
        self.desk.conns.for_each(f)
    }
    fn kill(&mut self, id: u64) -> bool {
        self.desk.conns.kill(id)
    }
    fn unblock(&mut self, id: u64, error: bool) -> Option<usize> {
        self.desk.conns.unblock(id, error)
    }
    fn recent_max_buffers(&self) -> (usize, usize) {
        self.desk.conns.recent_max_buffers()
    }
    fn lend_desk(&mut self, f: &mut dyn FnMut()) {
        self.lent = true;
        self.desk.first = true;
        let JobDesk { desk, inbox, .. } = self;
        let id = desk.id;
        let run = || lend_inbox(inbox, || commands::script::busy::lend_desk(desk, id, f));
        match commands::script::busy::desk_home() {
            // A job lent by a call from another loop's turn, whose desk is
            // lent (`cohost`: an EXEC's script on a co-hosted shard): that
            // loop cannot run until the script ends. It is lent as the
            // caller's loop of a script by a call is (`in_place::by_call`):
            // stalled by the script if it is published (its shard's
            // commands `-BUSY`, a WATCH of its keys parked, registered by
            // its coordinator right after the call, `home::advance`), its
            // mailbox (lent by the caller's step, [`lend_caller_inbox`])
            // and connections served at each pass.
            Some(caller) if caller != id => {
                commands::script::busy::lend_caller(caller, &mut || serve_caller_inbox(caller), run)
            }
            _ => run(),
        }
    }
}

impl Worker {
    /// While a published script's transaction holds this shard under locks
    /// (`commands::script::busy::locked_busy`), once per turn: what waits
    /// here behind them is tried again as at a release, so that the
    /// remote batches get `-BUSY` (`run_batch`) and this loop's
    /// connections' requests too (dispatch refuses them), as Redis answers
    /// every command while busy, rather than wait for the script's end.
    /// Jobs of other transactions keep waiting for their locks.
    ///
    /// Other transactions' lock requests waiting here are withdrawn
    /// (`LockTable::withdraw_for_busy`) and answered `-BUSY`
    /// (`tx::BusyWithdrawn`: their coordinators release what they hold on
    /// other shards and reply), except an allow-busy command's (WATCH)
    /// and one whose EXEC already ran a command; what the withdrawals let
    /// pass is granted. A request waiting on the script's own shard is
    /// not (that loop is inside the script): it waits for the end.
    #[cold]
    pub(super) fn refuse_behind_busy(&mut self) {
        if !self.core.deferred.is_empty() || !self.core.lock_blocked.is_empty() {
            self.retry_deferred();
        }
        if self.core.locks.waiting_len() > 0 {
            self.withdraw_for_busy();
        }
    }

    #[cold]
    fn withdraw_for_busy(&mut self) {
        let busy = &self.core.server.ops.busy;
        let Some(e) = busy.refuse_if_busy(Some(&[self.core.id])) else {
            return;
        };
        let gone = self.core.locks.withdraw_for_busy(|_| true);
        if gone.is_empty() {
            return;
        }
        let line = String::from_utf8_lossy(&e.line()).into_owned();
        for (req, w) in gone {
            // It holds nothing here: no records to collect (as `refuse`).
            self.core
                .aof_tx
                .retain(|(c, tx, parts)| !(*c == w.conn && *tx == req.tx && parts.is_empty()));
            let out: commands::coord::JobOut =
                Box::new(commands::tx::BusyWithdrawn { line: line.clone() });
            self.job_out_of(w.conn, w.idx, w.gather, out);
        }
        for w in self.core.locks.grant_waiting() {
            self.run_work(w);
        }
    }
}

/// A hub's own loop, lent to the busy passes of the scripts its adopted
/// loops run (see `commands::script::busy::IdleLoops`): its turn in the
/// round is over, so it is idle, but it lives on the hub's stack, where
/// the watchdog cannot take it back to another thread. Each pass serves
/// it as a pinned loop is served ([`Worker::serve_pinned`]: its mailbox,
/// then its connections; never its shard), through the round's lender.
struct OwnIdle {
    hub: usize,
    /// A pass served it (its counts wait in its desk's tally).
    served: bool,
    /// Lent to the thread of the loop running the script (see
    /// `host::loan`): served there for real, neither stalled nor served
    /// here.
    loaned: Cell<bool>,
}

impl commands::script::busy::IdleLoops for OwnIdle {
    fn idle(&self, into: &mut Vec<usize>) {
        // Asked at each busy pass before the loops are served: the first
        // lends the worker away, so its shard is never published stalled;
        // the later ones lend it again if it came back meanwhile (a
        // borrower's long command ended while the hub served its loops
        // without it: `host::round`).
        let slot = engine::alloc::current_slot();
        self.loaned.set(super::cohost::loan_own());
        engine::alloc::set_slot(slot);
        if !self.loaned.get() {
            into.push(self.hub);
        }
    }

    fn serve_idle(&mut self, first: bool) {
        if self.loaned.get() {
            return;
        }
        // `with_worker` charges the caller's shard afterwards: the
        // script's, whichever it is, is put back as it was.
        let slot = engine::alloc::current_slot();
        // `None` (not lent): before the hub's own turn is over, or inside
        // a lent worker's call that keeps it from the passes (a script by
        // a call and a transaction's job that may run one keep it
        // reachable: `cohost::with_worker_open`, `with_worker_for_scripts`).
        let served = super::cohost::with_idle_worker(self.hub, self.hub, |w| w.serve_pinned(first));
        self.served |= served.is_some();
        engine::alloc::set_slot(slot);
    }
}

/// Runs `f` (the turns of the loops hub `hub` adopted, after its own
/// turn: its own loop is lent by the round's lender) with the hub's own
/// loop lent to the busy passes of the scripts they run. True if a pass
/// served it: then the caller settles it ([`Worker::settle_idle`]) before
/// it runs anything else.
pub fn lending_own<R>(hub: usize, f: impl FnOnce() -> R) -> (R, bool) {
    let mut own = OwnIdle {
        hub,
        served: false,
        loaned: Cell::new(false),
    };
    let r = commands::script::busy::lend_idle(&mut own, f);
    (r, own.served)
}

impl Worker {
    /// Before anything runs on this loop's shard from this thread (a
    /// turn, a job or pin a hub lends it): the WATCHes parked for it by
    /// busy scripts of this thread that ended (it stopped or stalled this
    /// loop) are registered first (`commands::script::busy::
    /// register_parked`). One thread-local load when none waits.
    #[inline]
    pub fn register_parked(&mut self) {
        if commands::script::busy::any_parked() {
            // Charged to this shard, whoever's turn it is.
            let slot = engine::alloc::current_slot();
            engine::alloc::enter_shard(self.core.id);
            commands::script::busy::register_parked(&mut self.core.shard);
            engine::alloc::set_slot(slot);
        }
    }

    /// This loop, stalled by this thread's busy script, is lent to
    /// another thread before the script ends (`host::loan`): the WATCHes
    /// parked for it are registered now, and no more are parked
    /// (`commands::script::busy::release_stalled`).
    pub fn release_stalled(&mut self) {
        engine::alloc::enter_shard(self.core.id);
        commands::script::busy::release_stalled(&mut self.core.shard);
    }

    /// After busy passes served this loop as a hub's idle own loop
    /// ([`lending_own`]): what they counted goes to its statistics, and a
    /// listener's event they took is replayed. Its kept messages and the
    /// connections left on its resume list make its next turn due at once.
    pub fn settle_idle(&mut self) {
        self.settle_desk();
        self.after_desk();
    }
}

impl commands::script::busy::BusyServe for Desk<'_> {
    fn for_each_client(
        &self,
        f: &mut dyn FnMut(&commands::ClientState, &commands::coord::ClientIo),
    ) {
        commands::coord::ClientRegistry::for_each(&*self.conns, f);
    }

    fn serve_busy(&mut self) {
        if self.first {
            // A new lend: the connections an earlier one deferred went to
            // the loop's resume list when it ended (a deferred request
            // still unparsed is deferred again when read).
            self.state.deferred.clear();
            self.watch_prune();
            // A script holding shards under locks: every loop looks now
            // at what waits behind them (`Worker::refuse_behind_busy`).
            if commands::script::busy::published_under_locks() {
                if let Some(wake) = self.server.wake_all.get() {
                    wake();
                }
            }
        }
        serve_inbox(self.id);
        self.watch_outputs();
        for (slot, gen) in take_lock_blocked(self.id) {
            self.serve_held(slot, gen);
        }
        let mut events = self
            .state
            .events
            .take()
            .unwrap_or_else(|| Events::with_capacity(EVENTS_MAX));
        if self
            .poll
            .poll(&mut events, Some(std::time::Duration::ZERO))
            .is_err()
        {
            events.clear();
        }
        for ev in events.iter() {
            match ev.token() {
                WAKER => {}
                UNIX => self.state.missed_listener = true,
                // TLS listeners: accepted once the script ends (the
                // handshake would run inside the hook).
                Token(t) if (TLS_BASE..TCP_BASE).contains(&t) => self.state.missed_listener = true,
                Token(t) if t >= TCP_BASE => {
                    // Accepted now (Redis accepts while busy too): an
                    // operator's new connection can send SCRIPT KILL.
                    if let Some(l) = self.tcp.get(t - TCP_BASE) {
                        let mut door = Door {
                            conns: &mut *self.conns,
                            poll: &*self.poll,
                            server: self.server,
                            id: self.id,
                            maxclients: self.limits.maxclients,
                            tcp_keepalive_s: self.limits.tcp_keepalive_s,
                        };
                        door.accept_tcp(l, false);
                    }
                }
                Token(slot) => {
                    if ev.is_writable() {
                        self.conns.mark_dirty(slot);
                    }
                    let hup = ev.is_read_closed() || ev.is_error();
                    if ev.is_readable() || hup {
                        self.serve_conn(slot, hup);
                    }
                }
            }
        }
        self.state.events = Some(events);
        // Held by a hub, the connections' events go to the hub's set (see
        // `hub_set`): every pass visits them all.
        if std::mem::take(&mut self.first) || self.conns.in_hub_set() {
            for slot in 0..self.conns.slots.len() {
                self.serve_conn(slot, false);
            }
        }
    }
}

impl Desk<'_> {
    /// A connection whose request waited for a lock of this loop's shard,
    /// which a published script holds now (it took the lock before it
    /// ran): its buffered requests are answered now, as a read's would be
    /// (dispatch refuses them: `-BUSY`); the loop reads it again once the
    /// script ends.
    fn serve_held(&mut self, slot: usize, gen: u32) {
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if c.gen != gen {
            return;
        }
        c.lock_wait = false;
        self.answer_buffered(slot);
    }

    /// Answers connection `slot`'s buffered requests as a read would
    /// (dispatch refuses what waits for the script: `-BUSY`), writes its
    /// output, and has the loop read it again once the script ends.
    pub(super) fn answer_buffered(&mut self, slot: usize) {
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        let gen = c.gen;
        let defer = !(c.closing
            || c.peer_eof
            || answer(self.server, self.id, self.limits, self.state, c, slot));
        let broken = match c.flush() {
            Ok(n) => {
                self.state.tally.get().net_output_bytes += n as u64;
                false
            }
            Err(_) => true,
        };
        let unwritten = c.unwritten() > 0;
        c.unread = true;
        self.conns.resume.push(slot);
        if defer {
            self.state.deferred.push((slot, gen));
        }
        if broken {
            self.conns.killed.push((slot, gen));
        } else if unwritten {
            self.conns.mark_dirty(slot);
        }
    }

    /// Reads and answers one connection (see the module documentation).
    fn serve_conn(&mut self, slot: usize, hup: bool) {
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        c.hup |= hup;
        let gen = c.gen;
        let deferred = self.state.deferred.contains(&(slot, gen));
        if deferred || c.closing || c.peer_eof || paused(c) {
            // The loop reads it after the script.
            c.unread = true;
            self.conns.resume.push(slot);
            return;
        }
        let mut broken = false;
        let mut defer = false;
        let mut got = false;
        loop {
            c.make_read_room();
            let end = c.rbuf_end();
            match c.stream.read(&mut c.rbuf[end..]) {
                Ok(0) => {
                    c.peer_eof = true;
                    got = true;
                    break;
                }
                Ok(n) => {
                    got = true;
                    c.set_rbuf_end(end + n);
                    self.state.tally.get().net_input_bytes += n as u64;
                    if !answer(self.server, self.id, self.limits, self.state, c, slot) {
                        defer = true;
                        break;
                    }
                    if c.qbuf_len() > self.limits.qbuf_limit || c.closing || paused(c) {
                        // Over the limit: the loop closes it.
                        broken = c.qbuf_len() > self.limits.qbuf_limit;
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        match c.flush() {
            Ok(n) => self.state.tally.get().net_output_bytes += n as u64,
            Err(_) => broken = true,
        }
        if defer {
            self.state.deferred.push((slot, gen));
        }
        if broken {
            self.conns.killed.push((slot, gen));
            return;
        }
        let unwritten = c.unwritten() > 0;
        if got {
            // Whatever is left (a deferred request, an EOF, a read cut
            // short) the loop finishes after the script.
            c.unread = true;
            self.conns.resume.push(slot);
        }
        if unwritten {
            self.conns.mark_dirty(slot);
        }
    }
}

/// Answers the complete requests in `c`'s buffer; false at one that
/// needs a shard (left unparsed: the connection waits for the script).
fn answer(
    server: &std::sync::Arc<ServerShared>,
    id: usize,
    limits: DeskLimits,
    st: &mut DeskState,
    c: &mut super::Conn,
    slot: usize,
) -> bool {
    loop {
        if c.client.close_after_reply {
            c.closing = true;
        }
        if c.closing || paused(c) {
            return true;
        }
        let avail = c.qbuf_len();
        if avail == 0 || avail < c.need {
            return true;
        }
        let parse_limits = Limits {
            max_bulk_len: limits.max_bulk_len,
            auth_required: !c.client.authenticated,
        };
        let (rpos, end) = (c.rpos, c.rbuf_end());
        match parse_request(&mut c.rbuf[rpos..end], &parse_limits, &mut st.args) {
            Parsed::Complete(n) => {
                c.need = 0;
                if !st.args.is_empty() && !run_one(server, id, st, c, slot) {
                    return false;
                }
                c.rpos += n;
            }
            Parsed::Incomplete(need) => {
                c.need = need;
                return true;
            }
            // The loop replies and closes, as it always does.
            Parsed::Error(_) => return true,
        }
    }
}

/// Runs one parsed request through dispatch; false if it needs a shard
/// (nothing was replied; the request stays in the buffer).
fn run_one(
    server: &std::sync::Arc<ServerShared>,
    id: usize,
    st: &mut DeskState,
    c: &mut super::Conn,
    slot: usize,
) -> bool {
    let args = Args::new(&c.rbuf[c.rpos..c.rbuf_end()], &st.args);
    let mode_before = c.client.reply_mode;
    if mode_before == ReplyMode::Skip {
        c.client.reply_mode = ReplyMode::Skipping;
    }
    let skipping = c.client.reply_mode;
    let direct = c.inline_reply_target();
    let side = st.side.get_or_insert_with(|| Reply::new(false));
    side.clear();
    side.set_resp3(c.client.resp3);
    let out = if direct { &mut c.out } else { &mut *side };
    let mark = out.len();
    // A WATCH left for later is dispatched again then: what its builder
    // added to the client's list is taken back (it would find those keys
    // watched already and register nothing).
    let watched = c.client.watch.as_ref().map(|w| w.keys.len());
    let started = std::time::Instant::now();
    let mut ctx = ConnCtx {
        client: &mut c.client,
        out: &mut *out,
        server,
        home: id,
        key_shards: &[],
    };
    let step = dispatch(args, &mut ctx, st.tally.get(), &mut st.scratch);
    let mut jobs = None;
    let done = match step {
        Step::Done => true,
        Step::Coord { resolved, coord } if resolved.spec.name == "watch" => {
            let stats = st.tally.get();
            match watch_now(
                server,
                id,
                resolved,
                coord,
                args,
                out,
                &mut c.client,
                stats,
                started,
            ) {
                Watched::Done => true,
                Watched::Jobs(coord, plan) => {
                    jobs = Some((resolved, coord, plan));
                    true
                }
                Watched::Later => false,
            }
        }
        _ => false,
    };
    if !done {
        // Nothing ran and nothing was written (dispatch replies only when
        // it is done); the coordinator or hop is dropped unstarted.
        c.client.reply_mode = mode_before;
        match watched {
            None => c.client.watch = None,
            Some(n) => {
                if let Some(w) = c.client.watch.as_mut() {
                    w.keys.truncate(n);
                }
            }
        }
        return false;
    }
    if let Some((resolved, coord, plan)) = jobs {
        // Replied once its jobs are back (`watch::start`): in the
        // connection's order, by the flags in force now (WATCH changes
        // none).
        let suppress = skipping == ReplyMode::Skipping || skipping == ReplyMode::Off;
        if skipping == ReplyMode::Skipping {
            c.client.reply_mode = ReplyMode::On;
        }
        let slow_args = server.ops.slowlog.enabled().then(|| args.to_owned());
        watch::start(
            id, slot, c, resolved, coord, plan, started, suppress, slow_args,
        );
        return true;
    }
    let mode_after = c.client.reply_mode;
    let pushed = std::mem::take(&mut c.client.push_reply);
    // CLIENT REPLY ON run while skipping is answered (Redis drops a reply
    // by the flags in force when it is written).
    let suppress = !pushed
        && ((skipping == ReplyMode::Skipping && mode_after != ReplyMode::On)
            || (skipping == ReplyMode::Off && mode_after == ReplyMode::Off));
    if mode_after == ReplyMode::Skipping {
        c.client.reply_mode = ReplyMode::On;
    }
    if direct {
        if suppress {
            c.out.truncate(mark);
        }
    } else if !suppress && !side.is_empty() {
        c.push_ready(side.as_bytes());
    }
    if c.out.resp3() != c.client.resp3 {
        c.out.set_resp3(c.client.resp3);
    }
    true
}

/// The statistics of what a desk served (the commands it answered, the
/// requests it refused) while the loop's own are lent to the running
/// script: added to the loop's when the script ends ([`Tally::settle`]),
/// before the loop handles anything else, so INFO counts them as Redis
/// does (commandstats `calls` and `rejected_calls`, errorstats,
/// `total_error_replies`, the network bytes). Allocated on a desk's first
/// count.
#[derive(Default)]
pub(crate) struct Tally(Option<Box<ThreadStats>>);

impl Tally {
    fn get(&mut self) -> &mut ThreadStats {
        self.0.get_or_insert_with(Default::default)
    }

    /// Moves everything counted here into `into`: a flag test when
    /// nothing was (every refusal replies an error, every answer is a
    /// call).
    /// (Inline: every lend settles, nearly always with nothing counted.)
    #[inline]
    pub(super) fn settle(&mut self, into: &mut ThreadStats) {
        if let Some(t) = self.0.as_deref_mut() {
            Self::settle_counted(t, into);
        }
    }

    #[cold]
    fn settle_counted(t: &mut ThreadStats, into: &mut ThreadStats) {
        into.net_input_bytes += std::mem::take(&mut t.net_input_bytes);
        into.net_output_bytes += std::mem::take(&mut t.net_output_bytes);
        if t.total_commands == 0 && t.total_error_replies == 0 {
            return;
        }
        for (a, b) in into.cmd.iter_mut().zip(t.cmd.iter_mut()) {
            a.calls += b.calls;
            a.usec += b.usec;
            a.rejected_calls += b.rejected_calls;
            a.failed_calls += b.failed_calls;
            *b = Default::default();
        }
        for (id, h) in t.hist.iter().enumerate() {
            if let Some(h) = h {
                into.histogram(id).merge(h);
            }
        }
        t.hist.clear();
        for (code, n) in t.errors.drain(..) {
            if let Some((_, m)) = into.errors.iter_mut().find(|(c, _)| *c == code) {
                *m += n;
            } else if into.errors.len() < 128 {
                // The same bound as `ThreadStats::count_error`'s.
                into.errors.push((code, n));
            }
        }
        into.total_commands += std::mem::take(&mut t.total_commands);
        into.total_error_replies += std::mem::take(&mut t.total_error_replies);
        into.unexpected_error_replies += std::mem::take(&mut t.unexpected_error_replies);
    }
}

/// Messages one pass takes from the mailbox at most (the rest wait for
/// the next pass, about a millisecond of Lua later).
const INBOX_MAX: usize = 4096;

/// The shard side of a loop whose script runs: its mailbox, the messages
/// the desk keeps for after the script (`Core::kept`, handled by the loop
/// before anything newer), and the work its shard holds back
/// (`Core::deferred`). Lent by [`Inbox::lend`] where a script may run with
/// those fields free (the shard itself is the script's).
pub(super) struct Inbox<'a> {
    pub id: usize,
    pub mailbox: &'a mut Mailbox,
    pub kept: &'a mut VecDeque<Msg>,
    pub deferred: &'a mut VecDeque<Deferred>,
    /// This loop's connections whose request waits for a lock of its
    /// shard (`Core::lock_blocked`): answered by the desk once the shard
    /// is busy ([`take_lock_blocked`]).
    pub lock_blocked: &'a mut Vec<(usize, u32)>,
    /// The requests it refused (`Core::refused`).
    pub tally: &'a mut Tally,
    /// The shard's lock table: other transactions' requests waiting there
    /// are withdrawn once the script is busy ([`withdraw_waiting`]).
    pub locks: &'a mut commands::tx::LockTable<super::Waiter>,
    /// The open transactions' records (`Core::aof_tx`): a withdrawn
    /// request's empty entry goes with it.
    pub aof_tx: &'a mut Vec<(ConnRef, commands::tx::TxId, super::TxParts)>,
    /// The server's long scripts (whether they hold this shard).
    pub busy: &'a commands::script::busy::Registry,
}

/// The [`Inbox`] of a `Core` (a macro, not a method: it borrows only the
/// fields an inbox needs, so the script's shard, statistics and output
/// stay free for the code the inbox is lent to).
macro_rules! inbox_of {
    ($core:expr) => {
        $crate::server::worker::busy::Inbox {
            id: $core.id,
            mailbox: &mut $core.mailbox,
            kept: &mut $core.kept,
            deferred: &mut $core.deferred,
            lock_blocked: &mut $core.lock_blocked,
            tally: &mut $core.refused,
            locks: &mut $core.locks,
            aof_tx: &mut $core.aof_tx,
            busy: &$core.server.ops.busy,
        }
    };
}
pub(super) use inbox_of;

impl Inbox<'_> {
    /// Lends this inbox to the busy passes of the script `f` may run
    /// ([`lend_inbox`]), then adds what they refused to `stats`, the
    /// loop's counters (lent to `f` meanwhile).
    pub(super) fn lend<R>(
        mut self,
        stats: &mut ThreadStats,
        f: impl FnOnce(&mut ThreadStats) -> R,
    ) -> R {
        let r = lend_inbox(&mut self, || f(stats));
        self.tally.settle(stats);
        r
    }

    /// One busy pass over this inbox, now (see [`serve_inbox`]), where it
    /// is not lent (its desk's WATCHes send nothing through it, so none
    /// of their outputs comes here).
    pub(super) fn serve(&mut self) {
        take_messages(self, false);
        self.mailbox.flush();
    }
}

thread_local! {
    /// The inbox lent by [`lend_inbox`], for [`serve_inbox`].
    static INBOX: Cell<Option<NonNull<Inbox<'static>>>> = const { Cell::new(None) };
}

/// Lends `inbox` to the busy passes of the script `f` may run (see the
/// module documentation). The caller runs scripts only: any other command
/// never calls the hook.
fn lend_inbox<R>(inbox: &mut Inbox<'_>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<NonNull<Inbox<'static>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            INBOX.with(|i| i.set(self.0));
        }
    }
    // Only the lifetime changes: the pointer is dereferenced by
    // `serve_inbox` alone, on this thread, while `f` runs (`Restore` puts
    // the previous value back before this returns or unwinds).
    // What the loop sent before the script (a lone hop's completion sent
    // lazily earlier in this very drain, which its connection's next
    // replies queue behind) goes now, not at the end of the iteration
    // after the script: cheap when nothing was sent.
    inbox.mailbox.flush();
    let ptr = NonNull::from(inbox).cast::<Inbox<'static>>();
    let _restore = Restore(INBOX.with(|i| i.replace(Some(ptr))));
    f()
}

thread_local! {
    /// The inbox lent by [`lend_caller_inbox`], for [`serve_caller_inbox`].
    static CALLER_INBOX: Cell<Option<NonNull<Inbox<'static>>>> = const { Cell::new(None) };
}

/// Lends `inbox`, the mailbox side of the loop whose turn runs `f` (a
/// coordinator's step delivering a job that may run a script to another
/// co-hosted worker by a call, `home::send_plan_lent`), to the busy
/// passes of that script: the loop cannot run until the call returns, so
/// what other threads sent it is answered there as the script's own
/// loop's inbox is ([`Inbox::serve`]), where it waited for the script's
/// end before. The job's worker lends its own inbox as usual
/// ([`JobDesk`]); this one is served with the caller's loop
/// (`commands::script::busy::lend_caller`).
pub(super) fn lend_caller_inbox<R>(inbox: &mut Inbox<'_>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<NonNull<Inbox<'static>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALLER_INBOX.with(|i| i.set(self.0));
        }
    }
    // Only the lifetime changes: the pointer is dereferenced by
    // `serve_caller_inbox` alone, on this thread, while `f` runs
    // (`Restore` puts the previous value back before this returns or
    // unwinds).
    let ptr = NonNull::from(inbox).cast::<Inbox<'static>>();
    let _restore = Restore(CALLER_INBOX.with(|i| i.replace(Some(ptr))));
    f()
}

/// One busy pass over the inbox of loop `id` lent by
/// [`lend_caller_inbox`], if that is the one lent.
fn serve_caller_inbox(id: usize) {
    // Taken out while it serves: a nested call finds nothing.
    let Some(mut ptr) = CALLER_INBOX.with(|i| i.take()) else {
        return;
    };
    // SAFETY: set by `lend_caller_inbox`, whose borrow is alive (the hook
    // runs inside its `f`); the only reference made from it meanwhile, as
    // the slot is empty.
    let inbox = unsafe { ptr.as_mut() };
    if inbox.id == id {
        inbox.serve();
    }
    CALLER_INBOX.with(|i| i.set(Some(ptr)));
}

impl Core {
    /// Runs `f` (a script command, on this loop's shard and statistics)
    /// with this loop's inbox lent to its busy passes ([`Inbox::lend`]).
    pub(super) fn lending_inbox<R>(
        &mut self,
        f: impl FnOnce(&mut engine::Shard, &mut ThreadStats) -> R,
    ) -> R {
        let r = inbox_of!(self).lend(&mut self.stats, |stats| f(&mut self.shard, stats));
        // WATCHes parked while it ran, if it stopped this loop without
        // holding the shard (`commands::script::busy::watch_stopped`).
        commands::script::busy::register_parked(&mut self.shard);
        r
    }
}

/// One busy pass over the lent inbox of loop `id`, if any: remote
/// batches for the busy shard are answered `-BUSY` (unless they must wait
/// behind work of their connection held here, or hold an allow-busy
/// command); every other message is kept, in arrival order. Then the
/// mailbox is flushed: the replies, and whatever the loop sent before the
/// script began (a direct hop's completion sent lazily, a job), reach
/// their threads now rather than after the script.
fn serve_inbox(id: usize) {
    // Taken out while it serves: a nested call finds nothing.
    let Some(mut ptr) = INBOX.with(|i| i.take()) else {
        return;
    };
    // SAFETY: set by `lend_inbox`, whose borrow is alive (the hook runs
    // inside its `f`); the only reference made from it meanwhile, as the
    // slot is empty.
    let inbox = unsafe { ptr.as_mut() };
    // A nested loop's lend (another worker of a hub) is not this desk's.
    if inbox.id == id {
        // The outputs of its desk's WATCHes go to that desk, which
        // looks at them right after this (`watch`).
        take_messages(inbox, true);
        inbox.mailbox.flush();
    }
    INBOX.with(|i| i.set(Some(ptr)));
}

/// The lent inbox's connections waiting for a lock of loop `id`'s shard
/// (taken: the desk answers them, [`Desk::serve_held`]), once a busy
/// script holds that shard, so that dispatch refuses their requests; none
/// otherwise, or when loop `id` lent no inbox.
fn take_lock_blocked(id: usize) -> Vec<(usize, u32)> {
    // Taken out while it is looked at, as in `serve_inbox`.
    let Some(mut ptr) = INBOX.with(|i| i.take()) else {
        return Vec::new();
    };
    // SAFETY: as in `serve_inbox`.
    let inbox = unsafe { ptr.as_mut() };
    let taken = if inbox.id == id
        && !inbox.lock_blocked.is_empty()
        && inbox.busy.refuse_if_busy(Some(&[id])).is_some()
    {
        std::mem::take(inbox.lock_blocked)
    } else {
        Vec::new()
    };
    INBOX.with(|i| i.set(Some(ptr)));
    taken
}

/// `watches`: the outputs of the WATCHes the desk of this lent inbox
/// started (`watch::started`) are kept for it.
fn take_messages(ib: &mut Inbox<'_>, watches: bool) {
    refuse_deferred(ib);
    withdraw_waiting(ib);
    ib.mailbox.collect();
    for _ in 0..INBOX_MAX {
        let Some(m) = ib.mailbox.recv() else { return };
        match m {
            Msg::Exec { conn, batch } if refusable(ib, conn, &batch) => {
                match ib.busy.refuse_if_busy(Some(&[ib.id])) {
                    Some(e) => refuse_batch(ib, conn, batch, &e.line()),
                    None => ib.kept.push_back(Msg::Exec { conn, batch }),
                }
            }
            Msg::Job {
                conn,
                idx,
                work,
                gather,
            } if lock_refusable(ib, conn, work.lock.as_ref()) => {
                match ib.busy.refuse_if_busy(Some(&[ib.id])) {
                    Some(e) => withdrawn(ib, conn, idx, gather, &e),
                    None => ib.kept.push_back(Msg::Job {
                        conn,
                        idx,
                        work,
                        gather,
                    }),
                }
            }
            Msg::Job {
                conn,
                idx,
                work,
                gather,
            } if release_now(ib, conn, &work) => released_now(ib, conn, idx, gather, work),
            Msg::JobDone { conn, idx, out, .. } if watches && watch::started(conn) => {
                watch::arrived(conn, idx, out)
            }
            m => ib.kept.push_back(m),
        }
    }
}

/// Whether a work that only releases its transaction's locks here (a
/// release-only work: no lock, [`commands::coord::JobFn::noop`]) may be
/// answered now on this busy shard, its release done after the script
/// ([`released_now`]): typically a transaction withdrawn (`-BUSY`) at
/// another shard the script's transaction locks, which held a lock here
/// since before the script ran. Kept as it came, its coordinator's reply
/// would wait for the script's end. Under [`lock_refusable`]'s other
/// conditions (its home is another loop, no earlier work of its
/// connection held here), and only if its transaction wrote nothing here
/// (no records of it to hand the append-only file at the release).
fn release_now(ib: &Inbox<'_>, conn: ConnRef, work: &commands::coord::Work) -> bool {
    let Some(tx) = work.release else {
        return false;
    };
    work.lock.is_none()
        && work.job.is_noop()
        && conn.thread as usize != ib.id
        && !ib.deferred.iter().any(|d| d.conn == conn)
        && !ib.kept.iter().any(|m| kept_conn(m) == Some(conn))
        && !ib
            .aof_tx
            .iter()
            .any(|(c, t, parts)| *c == conn && *t == tx.get() && !parts.is_empty())
        && ib.busy.refuse_if_busy(Some(&[ib.id])).is_some()
}

/// Answers a release-only work's coordinator now ([`release_now`]), as
/// its job would (`()`), and keeps the work for after the script (before
/// anything newer, as every kept message): nothing runs on this shard
/// meanwhile, and the release then grants what it lets pass. Kept for a
/// connection of no one (`worker::DESK_SLOT` of this loop: its output is
/// dropped), so that its connection's next commands are not held behind
/// it; its transaction's empty records entry goes now.
fn released_now(
    ib: &mut Inbox<'_>,
    conn: ConnRef,
    idx: u32,
    gather: Option<std::sync::Arc<super::super::mailbox::Gather>>,
    work: commands::coord::Work,
) {
    if let Some(tx) = work.release.map(|t| t.get()) {
        ib.aof_tx.retain(|(c, t, _)| !(*c == conn && *t == tx));
    }
    job_out_home(ib, conn, idx, gather, Box::new(()));
    let nobody = ConnRef {
        thread: ib.id as u16,
        slot: super::DESK_SLOT,
        gen: 0,
    };
    ib.kept.push_back(Msg::Job {
        conn: nobody,
        idx: 0,
        work,
        gather: None,
    });
}

/// Whether a transaction's lock request for this busy shard (a work
/// carrying `lock`) may be answered `-BUSY` instead of waiting for the
/// script's end: its transaction did not say to keep it
/// (`LockReq::keep_when_busy`), its home is another loop (this one's
/// coordinators wait for the script anyway), and no earlier work of its
/// connection is held here.
fn lock_refusable(ib: &Inbox<'_>, conn: ConnRef, lock: Option<&commands::tx::LockReq>) -> bool {
    lock.is_some_and(|r| !r.keep_when_busy)
        && conn.thread as usize != ib.id
        && !ib.deferred.iter().any(|d| d.conn == conn)
        && !ib.kept.iter().any(|m| kept_conn(m) == Some(conn))
}

/// Answers a withdrawn lock request's coordinator (`tx::BusyWithdrawn`):
/// it releases what it holds elsewhere and replies `e`.
fn withdrawn(
    ib: &mut Inbox<'_>,
    conn: ConnRef,
    idx: u32,
    gather: Option<std::sync::Arc<super::super::mailbox::Gather>>,
    e: &commands::CmdError,
) {
    let line = String::from_utf8_lossy(&e.line()).into_owned();
    let out: commands::coord::JobOut = Box::new(commands::tx::BusyWithdrawn { line });
    job_out_home(ib, conn, idx, gather, out);
}

/// Sends a job's output to its coordinator's loop: into its gather when
/// its round went to several threads (the last output in sends them
/// home), as the shard side's `job_out` does.
fn job_out_home(
    ib: &mut Inbox<'_>,
    conn: ConnRef,
    idx: u32,
    gather: Option<std::sync::Arc<super::super::mailbox::Gather>>,
    out: commands::coord::JobOut,
) {
    let home = conn.thread as usize;
    match gather {
        None => ib.mailbox.send(
            home,
            Msg::JobDone {
                conn,
                idx,
                out,
                aof: 0,
            },
        ),
        Some(g) => {
            if g.add(idx, out, 0) {
                ib.mailbox.send(home, Msg::JobsDone { conn, gather: g });
            }
        }
    }
}

/// Lock requests of other transactions that waited in this busy shard's
/// table since before its script ran (it took the shard first) are
/// withdrawn and answered `-BUSY`, under [`lock_refusable`]'s conditions.
/// Nothing is granted here (the shard
/// is the script's): what the withdrawals let pass is granted at the
/// script's release.
fn withdraw_waiting(ib: &mut Inbox<'_>) {
    if ib.locks.waiting_len() == 0 {
        return;
    }
    let Some(e) = ib.busy.refuse_if_busy(Some(&[ib.id])) else {
        return;
    };
    let id = ib.id;
    let gone = ib.locks.withdraw_for_busy(|w| w.conn.thread as usize != id);
    for (req, w) in gone {
        ib.aof_tx
            .retain(|(c, tx, parts)| !(*c == w.conn && *tx == req.tx && parts.is_empty()));
        withdrawn(ib, w.conn, w.idx, w.gather, &e);
    }
}

/// Remote batches this shard held back behind a lock before its script
/// was published (a script under its transaction's locks, which took the
/// shard before it ran: `commands::script::busy::under_locks`) are
/// answered `-BUSY` as those arriving now are, under the same conditions
/// ([`refusable`]: none of their connection's work held before them),
/// if none of their commands ran yet.
fn refuse_deferred(ib: &mut Inbox<'_>) {
    if ib.deferred.is_empty() {
        return;
    }
    let Some(e) = ib.busy.refuse_if_busy(Some(&[ib.id])) else {
        return;
    };
    let line = e.line();
    let mut i = 0;
    while i < ib.deferred.len() {
        let d = &ib.deferred[i];
        let conn = d.conn;
        let whole = match &d.what {
            super::Held::Batch { batch, next: 0, .. } => batch.ends.is_empty(),
            _ => false,
        };
        let first = !ib.deferred.iter().take(i).any(|e| e.conn == conn);
        if !(whole && first) {
            i += 1;
            continue;
        }
        // Taken out first: `refusable` looks at what is held besides it.
        let Some(d) = ib.deferred.remove(i) else {
            return;
        };
        match d.what {
            super::Held::Batch { batch, .. } if refusable(ib, conn, &batch) => {
                refuse_batch(ib, conn, batch, &line);
            }
            what => {
                ib.deferred.insert(i, Deferred { conn, what });
                i += 1;
            }
        }
    }
}

/// Whether a remote batch may be answered `-BUSY` now: no earlier work of
/// its connection is held on this shard (its replies and effects keep
/// their order) and none of its commands may run while busy.
fn refusable(ib: &Inbox<'_>, conn: ConnRef, batch: &Batch) -> bool {
    conn.thread as usize != ib.id
        && !batch
            .cmds
            .iter()
            .any(|c| c.resolved.spec.has(commands::table::flags::ALLOW_BUSY))
        && !ib.deferred.iter().any(|d| d.conn == conn)
        && !ib.kept.iter().any(|m| kept_conn(m) == Some(conn))
}

/// The connection a kept message is work of, on this shard.
fn kept_conn(m: &Msg) -> Option<ConnRef> {
    match m {
        Msg::Exec { conn, .. } | Msg::Job { conn, .. } | Msg::Park { conn, .. } => Some(*conn),
        _ => None,
    }
}

/// Answers every command of `batch` with `line` and sends it home as the
/// shard side would (a direct reply written to the client first).
/// Each is counted as Redis's `rejectCommand` counts it (the command's
/// `rejected_calls`, the error's code, `total_error_replies`).
fn refuse_batch(ib: &mut Inbox<'_>, conn: ConnRef, mut batch: Box<Batch>, line: &[u8]) {
    let b = &mut *batch;
    let mut out = Reply::from_vec(std::mem::take(&mut b.reply), false);
    let stats = ib.tally.get();
    for cmd in &b.cmds[b.ends.len()..] {
        out.set_resp3(cmd.resp3);
        out.error_bytes(line);
        b.ends.push(out.len());
        commands::exec::count_rejected(stats, Some(cmd.resolved.id));
        stats.count_error(line);
    }
    b.reply = out.into_bytes();
    let home = conn.thread as usize;
    if let Some(direct) = b.direct {
        let n = direct.write(&b.reply);
        b.direct_written = n;
        ib.tally.get().net_output_bytes += n as u64;
        if n == b.reply.len() {
            ib.mailbox.send_lazy(home, Msg::ExecDone { conn, batch });
            return;
        }
    }
    ib.mailbox.send(home, Msg::ExecDone { conn, batch });
}

#[cfg(test)]
mod tally_tests {
    use super::*;

    /// Everything a desk counted reaches the loop's statistics once, and
    /// the tally is empty afterwards.
    #[test]
    fn a_tally_moves_every_count_into_the_loop_statistics() {
        let reg = commands::registry();
        let (get, _) = reg.top(b"get").unwrap();
        let (watch, _) = reg.top(b"watch").unwrap();
        let mut into = ThreadStats::default();
        into.count_error(b"ERR x");
        let mut t = Tally::default();
        t.settle(&mut into);
        assert!(t.0.is_none(), "nothing allocated before a count");

        let s = t.get();
        commands::exec::count_rejected(s, Some(get));
        s.count_error(b"BUSY Redis is busy");
        s.count_error(b"ERR unknown command");
        s.cmd[watch].calls += 1;
        s.cmd[watch].usec += 5;
        s.total_commands += 1;
        s.net_input_bytes += 40;
        s.net_output_bytes += 90;
        for _ in 0..2 {
            t.settle(&mut into);
        }
        assert_eq!(into.cmd[get].rejected_calls, 1);
        assert_eq!((into.cmd[watch].calls, into.cmd[watch].usec), (1, 5));
        assert_eq!(into.total_commands, 1);
        assert_eq!(into.total_error_replies, 3);
        let mut errors = into.errors.clone();
        errors.sort();
        assert_eq!(errors, vec![("BUSY".into(), 1), ("ERR".into(), 2)]);
        assert_eq!((into.net_input_bytes, into.net_output_bytes), (40, 90));
    }
}
