//! The event loop itself: one iteration of a worker, in the order the
//! module docs of `worker` give, and the interface its host thread drives
//! (`server::host`): [`Worker::step_solo`] (the thread is the worker's
//! own), or, for a hub running several workers in turn,
//! [`Worker::step_shared`] for each with work in a round, each followed
//! by [`Worker::due_in`] (when it next has work of its own) and
//! [`Worker::park_eager`], and between turns a look at its
//! [`LoopProbe`] (mail, parked flags) without the worker (the in-process
//! tests, `testing`, ask every worker `due_in` and `park_flag` each
//! round instead); [`Worker::has_pending_work`] and [`Worker::lead_aof`]. Both kinds
//! of step end in the same `serve`, so a worker behaves the same whichever
//! thread runs it.
//!
//! It owns the order of the stages and nothing of their content: reading
//! and executing is `request`, inbound messages are dispatched by
//! [`Worker::handle`] to the shard side (`shard`, `waiters`) or the home
//! side (`home`), writing is `output`, the cron is `cron`. A stage never
//! calls back into an earlier one except through the lists it fills
//! (`Conns::resume`, `Conns::dirty`, `Core::local`), which the next stage
//! walks; every such walk is bounded (`DRAIN_BUDGET`, four resume passes),
//! and a hub's turn reads sockets for at most `TURN_BUDGET` (`budget`).
//!
//! Per thread, independent of the number of threads N: the loop's own
//! state is a few words and three short lists; what grows with N lives in
//! `Core::batches` (one pointer per shard) and the mailbox (see there).
//!
//! A turn's fixed cost: what an iteration costs besides its socket events
//! is paid once per turn, and with many loops on one hub turns multiply
//! (50 clients at pipeline 1: 2 loops serve a round in about 2 turns, 32
//! loops in 21-28, one or two connections each). So each stage with
//! nothing to do costs a look or two, inlined at the call: no message,
//! local job, kept batch or waiter (`drain`), no resumed connection, no
//! event, tracked key, delivery, spill, save or client eviction; the
//! clock is read once per turn by whoever runs it (`clock`); and
//! `wakes_at`, which a hub asks after every turn, answers the cron's time
//! in a few loads while nothing else is timed. (One flag for "anything
//! besides socket events" would need every producer of each kind of work,
//! on this thread and others, to raise it; each look is a load of state
//! the stage reads anyway.)

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::tx::LockTable;
use commands::{ServerShared, ThreadStats};
use engine::Shard;
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token};
use resp::Reply;

use super::super::blocking::Waiters;
use super::super::conn::RecentPeaks;
use super::super::mailbox::{Mailbox, Msg};
use super::clock::{TurnTime, WallAnchor};
use super::hub_set::ConnEvent;
use super::nap::Nap;
use super::request::paused;
use super::waiters::serve_ready;
use super::{busy, repl_wait, Cached, Conns, Core, Worker, TCP_BASE, TLS_BASE, UNIX, WAKER};
use crate::log;

/// Inbound messages one [`Worker::drain`] handles before the iteration
/// goes on: the most this thread's sockets (its clients' replies, their
/// next requests) wait for the mailbox while other threads keep it full.
/// It was 64 Ki: under `bench/stall_repro` (debug build) one drain took
/// about 2,400 messages and 1.1-1.8 s (wall time, on a loaded machine),
/// with no end while the senders kept up; a drain of 1,024 messages and
/// the 618 local jobs they made cost 90 ms of CPU there. Messages left
/// over keep the next iteration from sleeping (`Mailbox::has_inbound`);
/// what an iteration adds to them (a poll, the writes it makes anyway) is
/// spread over a thousand messages.
const DRAIN_BUDGET: usize = 1024;

/// A worker's inbound side as a thread that runs it among others (a
/// hub) sees it between its turns, without its seat's lock: messages
/// marked for it and pub/sub deliveries waiting, the two things
/// [`Worker::due_in`] reads that other threads change. Everything else
/// in `due_in` changes only in the worker's own iterations or in jobs
/// lent to it, after which the hub asks `due_in` again.
pub struct LoopProbe {
    mail: super::super::mailbox::Probe,
    server: Arc<ServerShared>,
    id: usize,
}

impl LoopProbe {
    /// Messages or pub/sub deliveries wait (a relaxed look: one made
    /// after it is seen by the next look, or by the fenced
    /// [`Worker::park_flag`] before the hub sleeps).
    pub fn has_mail(&self) -> bool {
        self.mail.marked() || self.server.pubsub.has_pending(self.id)
    }

    /// [`Worker::park_flag`] without the worker, for one whose last
    /// `due_in` found nothing waiting (then it has no source taken and
    /// not drained): `eager` is its [`Worker::park_eager`] of then. True
    /// if messages or deliveries wait (the thread must not sleep).
    pub fn park(&self, eager: bool) -> bool {
        self.mail.park(eager) || self.server.pubsub.has_pending(self.id)
    }

    /// Lowers the worker's parked flag ([`Worker::unpark_flag`]).
    pub fn unpark(&self) {
        self.mail.unpark();
    }
}

impl Worker {
    pub fn new(
        id: usize,
        poll: Poll,
        mailbox: Mailbox,
        server: Arc<ServerShared>,
        (tcp, tls): (Vec<TcpListener>, Vec<TcpListener>),
        unix: Option<UnixListener>,
        (shard, aof): (Option<Shard>, Option<Arc<crate::server::aof::Aof>>),
    ) -> io::Result<Self> {
        // This thread's allocations count as this shard's (maxmemory).
        engine::alloc::enter_shard(id);
        // Naps are tens of microseconds: the default timer slack (50 us)
        // would more than double them.
        // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer argument
        // and changes only this thread's timer slack.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
        }
        // First on this thread: see `Worker::color`.
        let color = vec![0u8; super::COLOR_LINE * (id % super::COLORS)].into_boxed_slice();
        let cfg = Cached::read(&server);
        let nthreads = mailbox.threads();
        let server_for_desk = server.clone();
        let mut w = Worker {
            core: Core {
                id,
                shard: shard.unwrap_or_else(|| Shard::new(id, cfg.databases)),
                stats: ThreadStats::default(),
                mailbox,
                cfg_gen: server.config_gen.load(Ordering::Acquire),
                server,
                cfg,
                scratch: Default::default(),
                local: VecDeque::new(),
                kept: VecDeque::new(),
                refused: busy::Tally::default(),
                batches: Vec::new(),
                batch_to: Vec::new(),
                batch_conn: None,
                pool: Vec::new(),
                pool_bytes: 0,
                side: Reply::new(false),
                locks: LockTable::default(),
                deferred: VecDeque::new(),
                retrying: false,
                retry_again: false,
                lock_blocked: Vec::new(),
                evict_blocked: Vec::new(),
                evict_due: 0,
                evict_blind_ms: 0,
                pause_held: Vec::new(),
                pause_gen: 0,
                waiters: Waiters::default(),
                blocked_conns: Vec::new(),
                // Brought up to date by the first `refresh_role`.
                masters_seen: 0,
                sys: None,
                repl_waits: Vec::new(),
                lent_job: None,
                lent_out: None,
                unlocked_shards: Vec::new(),
                key_pos: Vec::new(),
                key_pf: Vec::new(),
                key_buf: Vec::new(),
                unlocked: Vec::new(),
                remote_works: Vec::new(),
                gathers: VecDeque::new(),
                scripts_in_place: 0,
                scripts_strayed: 0,
                aof,
                aof_tx: Vec::new(),
                aof_last: 0,
                aof_always: false,
                aof_led: false,
                aof_due: std::cell::Cell::new(0),
                local_holds: Vec::new(),
                held: Vec::new(),
                direct_conns: Vec::new(),
                held_aof: None,
                track_on: false,
                maybe_busy: true,
                may_wait: true,
                touched: Vec::new(),
            },
            conns: Conns {
                ops: server_for_desk.ops,
                slots: Vec::new(),
                gens: Vec::new(),
                free: Vec::new(),
                dirty: Vec::new(),
                spare: Vec::new(),
                resume: Vec::new(),
                killed: Vec::new(),
                peaks: RecentPeaks::default(),
                zombies: Vec::new(),
                orphans: Vec::new(),
                hub: None,
            },
            poll,
            tcp,
            tls,
            unix,
            unix_rr: 0,
            next_cron: Instant::now(),
            wall: WallAnchor::now(),
            reported: (0, 0, 0),
            rate_base: None,
            nap: Nap::new(),
            spilled: false,
            save_wait: None,
            desk: busy::DeskState::default(),
            own_polls: 0,
            turns: 0,
            parks: 0,
            asks: 0,
            turn: super::budget::Turn::default(),
            shared: server_for_desk,
            master_conn: None,
            color,
            reach_posted: None,
        };
        let ops = w.core.server.ops;
        w.reach_posted = ops.reach.get().map(|r| r.posted(id));
        w.core.batches = (0..nthreads).map(|_| None).collect();
        w.core.shard.outbox.records_on = w.core.aof.is_some();
        w.core.shard.lfu = commands::keys::lfu_params(&w.core.server);
        w.core.shard.enc = commands::ctx::enc_limits(&w.core.server);
        w.core.shard.rdb_compression = w.core.server.config().rdbcompression;
        let notify = w.core.server.config().notify_keyspace_events;
        w.core.shard.set_notify(notify);
        w.core.shard.event_listeners = Some(w.core.server.pubsub.keyspace_gate());
        w.core.shard.tracked.total = Some(w.core.server.tracking.table_keys.clone());
        commands::memory::configure_shard(&mut w.core.shard, &w.core.server);
        // A role set before this generation (`replicaof` at start).
        w.refresh_role();
        for (i, l) in w.tcp.iter_mut().enumerate() {
            w.poll
                .registry()
                .register(l, Token(TCP_BASE + i), Interest::READABLE)?;
        }
        for (i, l) in w.tls.iter_mut().enumerate() {
            w.poll
                .registry()
                .register(l, Token(TLS_BASE + i), Interest::READABLE)?;
        }
        if let Some(u) = w.unix.as_mut() {
            w.poll.registry().register(u, UNIX, Interest::READABLE)?;
        }
        Ok(w)
    }

    pub fn id(&self) -> usize {
        self.core.id
    }

    /// The descriptor of this worker's epoll set (a host thread running
    /// several workers waits on all of them at once).
    pub fn epoll_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.poll.as_raw_fd()
    }

    /// A shutdown was requested: the host hands this worker to the gate
    /// ([`Worker::park`]).
    pub fn shutdown_requested(&self) -> bool {
        self.core.server.shutdown.load(Ordering::Acquire)
    }

    /// Whether shard consolidation is on (`shard-consolidation`).
    pub fn consolidation(&self) -> bool {
        self.core.cfg.shard_consolidation
    }

    /// Times a hub's round polled this worker's own epoll set.
    #[cfg(test)]
    pub fn own_polls(&self) -> u64 {
        self.own_polls
    }

    /// Turns a thread running several workers gave this one.
    #[cfg(test)]
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// Times this worker's parked flag was raised.
    #[cfg(test)]
    pub fn parks(&self) -> u64 {
        self.parks
    }

    /// Times a hub asked this worker's `due_in`.
    #[cfg(test)]
    pub fn asks(&self) -> u64 {
        self.asks
    }

    /// Commands this worker has run so far (its share of INFO's
    /// total_commands_processed; CONFIG RESETSTAT starts it over).
    pub fn commands(&self) -> u64 {
        self.core.stats.total_commands
    }

    /// How long this worker may sleep before its next iteration: until
    /// its cron, a blocked client's timeout, a save step; zero when work
    /// is waiting.
    pub fn timeout(&mut self, now: Instant) -> Duration {
        self.wakes_at(now).saturating_duration_since(now)
    }

    /// When this worker next has work of its own ([`Worker::timeout`] as
    /// an instant: `now` when work is waiting, the cron's time, which may
    /// have passed, when nothing comes sooner). The common case reads the
    /// cron's time and does no clock arithmetic: a hub asks this of each
    /// loop after each of its turns.
    fn wakes_at(&mut self, now: Instant) -> Instant {
        // Nearly always (a hub asks after every turn): no blocked client,
        // spill, save, pause, WAIT or held reply to time, so the cron's
        // time unless work is queued. The same answer as below, in a few
        // loads (`want_durable` is false, and asks nothing, with no held
        // reply).
        if self.core.blocked_conns.is_empty()
            && !self.spilled
            && self.save_wait.is_none()
            && self.core.pause_held.is_empty()
            && self.core.repl_waits.is_empty()
            && self.core.held.is_empty()
        {
            let queued = !self.conns.resume.is_empty()
                || !self.core.local.is_empty()
                || !self.core.kept.is_empty();
            return if queued { now } else { self.next_cron };
        }
        engine::alloc::enter_shard(self.core.id);
        let mut sooner: Option<Duration> = None;
        let mut within = |d: Duration| sooner = Some(sooner.map_or(d, |s| s.min(d)));
        if let Some(ms) = self.expire_blocked() {
            within(Duration::from_millis(ms));
        }
        if self.spilled {
            within(Duration::from_millis(1));
        }
        if let Some(w) = self.save_wait {
            within(w);
        }
        if let Some(w) = self.pause_wait() {
            within(w);
        }
        if !self.core.repl_waits.is_empty() {
            within(repl_wait::POLL);
        }
        // `want_durable` first: it also asks the AOF writer for a wake-up.
        if self.want_durable()
            || !self.conns.resume.is_empty()
            || !self.core.local.is_empty()
            || !self.core.kept.is_empty()
        {
            return now;
        }
        match sooner.and_then(|d| now.checked_add(d)) {
            Some(at) => at.min(self.next_cron),
            None => self.next_cron,
        }
    }

    /// For a thread that runs several workers (a hub, see `server::host`;
    /// the in-process tests, see `testing`), each round: how long this worker
    /// may sleep ([`Worker::timeout`]), zero if messages wait, without
    /// raising its parked flag. The hub raises every worker's flag
    /// ([`Worker::park_flag`], which looks for messages again after its
    /// fence) only for a wait that may sleep: while some worker has work
    /// the hub does not sleep, so nobody needs to ring.
    pub fn due_in(&mut self, now: Instant) -> Duration {
        self.due_at(now).saturating_duration_since(now)
    }

    /// [`Worker::due_in`] as an instant (see [`Worker::wakes_at`]): what a
    /// hub keeps of each adopted loop between its turns.
    pub fn due_at(&mut self, now: Instant) -> Instant {
        self.asks += 1;
        let at = self.wakes_at(now);
        if self.core.mailbox.has_inbound() || self.core.server.pubsub.has_pending(self.core.id) {
            now
        } else {
            at
        }
    }

    /// One iteration of a worker that has its thread to itself: sleeps in
    /// its own epoll (or naps) until there is something to do, then
    /// serves it.
    /// `led`: this thread runs every shard (see `Core::aof_led`).
    pub fn step_solo(&mut self, now: Instant, events: &mut Events, led: bool) {
        let mut timeout = self.timeout(now);
        self.nap.tick(now);
        if !timeout.is_zero() && self.nap.wanted() {
            self.core.mailbox.nap(self.nap.dur);
        }
        if self.park_flag() {
            timeout = Duration::ZERO;
        }
        if let Err(e) = self.poll.poll(events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                log::warning(format_args!("epoll_wait failed: {e}"));
            }
        }
        // The iteration's one clock read (see `clock`).
        let at = self.wall.turn(Instant::now());
        self.serve(events, &[], led, at);
    }

    /// Raises this worker's parked flag before its thread sleeps (see
    /// `mailbox`); true if messages wait, so the thread must not sleep.
    pub fn park_flag(&mut self) -> bool {
        engine::alloc::enter_shard(self.core.id);
        self.parks += 1;
        let eager = self.direct_eager();
        // After the parked flag and its fence: a publisher that queued
        // before it is seen here, one after it rings the doorbell.
        self.core.mailbox.park(eager) || self.core.server.pubsub.has_pending(self.core.id)
    }

    /// Lowers the parked flag once the thread is awake.
    pub fn unpark_flag(&self) {
        self.core.mailbox.unpark();
    }

    /// What a hub reads of this worker, with no lock, in the rounds it
    /// takes no turn (see [`LoopProbe`]).
    pub fn probe(&self) -> LoopProbe {
        LoopProbe {
            mail: self.core.mailbox.probe(),
            server: self.core.server.clone(),
            id: self.core.id,
        }
    }

    /// Whether lazily sent messages must wake this worker's thread if it
    /// slept now (see [`Worker::park_flag`]); it changes only in the
    /// worker's iterations and jobs lent to it.
    pub fn park_eager(&mut self) -> bool {
        self.direct_eager()
    }

    /// Whether this worker's last iteration ran under `appendfsync
    /// always` with its thread leading the AOF (`Core::aof_led`): only
    /// then can it count records towards a lead (`Worker::aof_due`),
    /// in a turn or in a job lent to it, until its next iteration.
    pub fn aof_led(&self) -> bool {
        self.core.aof_led
    }

    /// One iteration of a worker that shares its thread with others (the
    /// thread waited on one set for all of them): serves the socket events
    /// the thread's wait found for its connections (`conn_events`, raw
    /// events tagged by [`hub_tag`](super::hub_tag), see `hub_set`), and
    /// those of its own epoll set, collected without waiting.
    /// `poll`: false when the thread's wait showed this worker's own set
    /// (doorbell, listeners) holds nothing. `at`: the turn's start, which
    /// the thread read (see `clock`).
    pub fn step_shared(
        &mut self,
        events: &mut Events,
        poll: bool,
        conn_events: &[libc::epoll_event],
        led: bool,
        at: TurnTime,
    ) {
        engine::alloc::enter_shard(self.core.id);
        self.turns += 1;
        if !poll {
            events.clear();
        } else {
            self.own_polls += 1;
            if let Err(e) = self.poll.poll(events, Some(Duration::ZERO)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::warning(format_args!("epoll_wait failed: {e}"));
                }
            }
        }
        self.serve(events, conn_events, led, at);
    }

    /// Messages, local work or resumed connections wait: the next loop
    /// iteration has work without polling.
    pub fn has_pending_work(&self) -> bool {
        self.core.mailbox.has_inbound()
            || !self.core.local.is_empty()
            || !self.core.kept.is_empty()
            || !self.conns.resume.is_empty()
            || self.core.server.pubsub.has_pending(self.core.id)
    }

    /// Everything an iteration does after its wait: the parked flag comes
    /// down, then messages, sockets, writes, AOF, saves, cron. `at`: the
    /// iteration's time, read once by whoever runs it (see `clock`).
    pub(super) fn serve(
        &mut self,
        events: &Events,
        conn_events: &[libc::epoll_event],
        led: bool,
        at: TurnTime,
    ) {
        self.core.mailbox.unpark();
        self.begin_turn(at.until);
        // What a busy script of this thread parked for this loop, which it
        // stalled (a hub's own loop), before anything of this turn.
        self.register_parked();
        self.core.shard.set_now_ms(at.wall_ms);
        self.refresh_config();
        // A script holding every shard waits for a call on this one (see
        // `reach`): before anything else of this turn.
        if self
            .reach_posted
            .is_some_and(|p| p.load(std::sync::atomic::Ordering::Relaxed))
        {
            if let Some(r) = self.core.server.ops.reach.get() {
                let core = &mut self.core;
                if let Some(tx) = r.serve(core.id, &mut core.shard, &core.stats, &self.conns) {
                    // Lent, and given back at its script's end: its
                    // transaction's locks here go now (`script::lend`).
                    self.release_here(None, tx);
                }
            }
        }
        self.release_paused();
        self.core.aof_always = self
            .core
            .aof
            .as_ref()
            .is_some_and(|a| a.policy() == config::AppendFsync::Always);
        self.core.aof_led = led && self.core.aof_always;
        if !self.core.repl_waits.is_empty() {
            self.check_repl_waits();
        }
        if self.core.mailbox.has_inbound() || !self.core.kept.is_empty() {
            // Batches back from direct hops settle their connections'
            // slots before those read again: the next request then
            // finds nothing outstanding (its reply goes straight to
            // `out`, and it may hop directly in turn).
            self.drain();
        }
        // Reads the last turn's budget deferred come before this turn's
        // socket events (see `budget`).
        if self.take_carried() {
            self.run_resumes();
        }
        self.nap.events = 0;
        let cmds_before = self.core.stats.total_commands;
        for ev in events.iter() {
            match ev.token() {
                WAKER => {}
                UNIX => self.accept_unix(),
                Token(t) if t >= TCP_BASE => self.accept_tcp(t - TCP_BASE, false),
                Token(t) if t >= TLS_BASE => self.accept_tcp(t - TLS_BASE, true),
                Token(_) => self.conn_event(ConnEvent::of_mio(ev)),
            }
        }
        for ev in conn_events {
            if let Some((_, slot)) = super::hub_untag(ev.u64) {
                self.conn_event(ConnEvent::of_raw(slot, ev.events));
            }
        }
        self.drain();
        if self.core.maybe_busy && self.core.server.ops.busy.locked_busy(self.core.id) {
            self.refuse_behind_busy();
        }
        self.evict_clients();
        self.run_resumes();
        self.publish_events();
        self.invalidate_touched();
        self.deliver_pubsub();
        // CONFIG RESETSTAT may have zeroed the count meanwhile.
        self.nap.cmds = self.core.stats.total_commands.saturating_sub(cmds_before);
        // maxmemory: this shard's counter for the others' checks, when it
        // moved past the bound (see engine::evict's "Snapshot"); before the
        // replies go out, so a client's next command sees what its last
        // one took (see `evict`).
        self.core.shard.publish_memory();
        self.flush_conns();
        self.core.aof_flush();
        self.save_wait = self.save_step(!events.is_empty() || !conn_events.is_empty());
        self.spilled = self.core.mailbox.flush();
        // The turn's start: a cron that came due during the turn runs at
        // the next one, which is then due at once (`wakes_at`).
        if at.at >= self.next_cron {
            self.cron();
            // Expired and evicted keys' events, without waiting for the
            // next wake-up.
            self.publish_events();
            self.invalidate_touched();
            self.deliver_pubsub();
            // What the cron sent (unix clients handed over, woken
            // waiters): its destinations learn of it now, not after this
            // thread's next wake-up.
            self.spilled = self.core.mailbox.flush();
        }
        self.end_turn();
    }

    /// A socket event of connection `ev.slot`.
    fn conn_event(&mut self, ev: ConnEvent) {
        self.nap.events += 1;
        if ev.gone {
            if let Some(c) = self.conns.slots.get_mut(ev.slot).and_then(|c| c.as_mut()) {
                c.gone = true;
            }
        }
        if ev.readable || ev.hup {
            self.read_conn(ev.slot, ev.hup);
        }
        if ev.writable {
            self.conns.mark_dirty(ev.slot);
        }
    }

    /// At a shutdown request: hands this thread's AOF records to the
    /// writer and the shard to the main thread, and waits for its verdict.
    /// True to exit; otherwise the shard is back, and the clients that
    /// sent SHUTDOWN get Redis's error and go on.
    pub fn park(&mut self, gate: &crate::server::shutdown::Gate) -> bool {
        self.core.aof_flush();
        let id = self.core.id;
        let placeholder = Shard::new(id, 0);
        let shard = std::mem::replace(&mut self.core.shard, placeholder);
        let (verdict, back) = gate.park(id, shard);
        if let Some(s) = back {
            self.core.shard = s;
        }
        if verdict == crate::server::shutdown::Verdict::Exit {
            // No new connection once any client sees its own closed (as
            // Redis, which exits in one go): every thread's listeners
            // close before any thread closes a connection.
            for mut l in self.tcp.drain(..).chain(self.tls.drain(..)) {
                let _ = self.poll.registry().deregister(&mut l);
            }
            if let Some(mut u) = self.unix.take() {
                let _ = self.poll.registry().deregister(&mut u);
            }
            gate.listeners_closed();
            return true;
        }
        for slot in 0..self.conns.slots.len() {
            let Some(c) = self.conns.slots[slot].as_mut() else {
                continue;
            };
            if !c.client.shutdown_wait {
                continue;
            }
            c.client.shutdown_wait = false;
            let mut r = Reply::new(c.client.resp3);
            r.error("ERR Errors trying to SHUTDOWN. Check logs.");
            c.push_ready(r.as_bytes());
            self.conns.mark_dirty(slot);
            self.conns.resume.push(slot);
        }
        false
    }

    /// Runs the connections queued on `Conns::resume` (nothing, in one
    /// look, when none is).
    #[inline]
    pub(super) fn run_resumes(&mut self) {
        if !self.conns.resume.is_empty() {
            self.resume_passes();
        }
    }

    fn resume_passes(&mut self) {
        // Bounded: each pass only handles what earlier steps queued.
        for _ in 0..4 {
            if self.conns.resume.is_empty() {
                return;
            }
            let spare = self.conns.spare.pop().unwrap_or_default();
            let mut list = std::mem::replace(&mut self.conns.resume, spare);
            for &slot in &list {
                let Some(mut c) = self.conns.slots.get_mut(slot).and_then(Option::take) else {
                    continue;
                };
                self.process_lent(&mut c, slot);
                let unread = c.unread && !paused(&c);
                self.conns.slots[slot] = Some(c);
                self.after_desk();
                self.conns.mark_dirty(slot);
                if unread {
                    self.read_conn(slot, false);
                }
            }
            list.clear();
            self.conns.spare.push(list);
            self.drain();
        }
    }

    /// Handles inbound messages in passes: each pass visits the threads
    /// that sent some (the mailbox's ready set) once, taking what each had
    /// queued when its visit began (`Mailbox::recv`), then runs this
    /// thread's local jobs and serves blocked clients (also after the
    /// pass `DRAIN_BUDGET` cut short). It stops when a pass finds nothing
    /// or the budget is spent. What a pass sent goes out
    /// (`Mailbox::flush`) before the next pass that has messages, or else
    /// at the end of the iteration, as before.
    ///
    /// Why passes: draining a source until it was empty, and the local
    /// jobs only once the whole mailbox was, let threads that kept sending
    /// (under `bench/stall_repro`, the lock requests and releases of 1,200
    /// dropped clients' MSETs) hold back this thread's own shard's jobs,
    /// and the outputs it had sent (published at the end of the
    /// iteration only), for the whole drain: a reader's lock request for
    /// this thread's shard sat in `Core::local` behind 2,300-2,500 other
    /// messages of such a drain (0.7-1.7 s, debug build, traced), while no
    /// lock request of that load ever waited in a lock queue. Now it waits
    /// one pass at most. (The reader's MGET still waits for most of that
    /// load's work, which the shards take first come, first served: see
    /// `bench/README.md`.)
    #[inline]
    pub(super) fn drain(&mut self) {
        // Nearly every turn of a loop serving its clients at pipeline 1:
        // nothing came, nothing was queued (one look at each list, where
        // a pass cost ~100 instructions: see "A turn's fixed cost" above).
        if self.core.local.is_empty()
            && self.core.kept.is_empty()
            && self.conns.killed.is_empty()
            && self.core.waiters.is_empty()
            && !self.core.mailbox.has_inbound()
        {
            return;
        }
        self.drain_passes();
    }

    /// [`Worker::drain`] with something to do.
    fn drain_passes(&mut self) {
        let mut budget = DRAIN_BUDGET;
        let mut passes = 0u32;
        loop {
            let mut got = false;
            self.core.mailbox.collect();
            if passes > 0 && self.core.mailbox.has_inbound() {
                // Another pass with messages (nearly always, a drain's
                // second pass finds none, and the end of the iteration
                // flushes): what the last pass sent goes out first, so
                // its destinations need not wait for this one.
                self.spilled |= self.core.mailbox.flush();
            }
            passes += 1;
            // What a busy script's desk kept is older than anything still
            // in the mailbox (and a script run from here may keep more).
            while let Some(m) = self
                .core
                .kept
                .pop_front()
                .or_else(|| self.core.mailbox.recv())
            {
                got = true;
                self.nap.note(&m);
                self.handle(m);
                budget -= 1;
                // A hub's turn past its budget leaves the rest for the
                // next (see `budget`): the loop stays due.
                if budget == 0 || self.drain_spent(DRAIN_BUDGET - budget) {
                    budget = 0;
                    break;
                }
            }
            while let Some(m) = self.core.local.pop_front() {
                got = true;
                self.handle(m);
            }
            // Keys are marked ready only while a client of this shard
            // waits on them: with none waiting (nearly always), one load
            // instead of a look at every database (16 cache lines per
            // pass, per loop a hub runs: the most D1 misses per SET of
            // any function with 32 loops on one hub). Marks left by a
            // waiter that has gone are dropped by the next `serve_ready`,
            // as `cohost::run_job_now` leaves them.
            if !self.core.waiters.is_empty() && self.core.shard.dbs.iter().any(|d| d.has_ready()) {
                serve_ready(&mut self.core);
                got = true;
            }
            if !got || budget == 0 {
                break;
            }
        }
        for (slot, gen) in std::mem::take(&mut self.conns.killed) {
            let same = self.conns.slots.get(slot).and_then(|c| c.as_ref());
            if same.is_some_and(|c| c.gen == gen) {
                self.close_conn(slot);
            }
        }
    }

    /// One inbound message: the shard side's work (a batch, a job, a
    /// parked command, keys to track) or the home side's completions.
    pub(super) fn handle(&mut self, m: Msg) {
        match m {
            Msg::Exec { conn, batch } => self.exec_arrived(conn, batch),
            Msg::Job {
                conn,
                idx,
                work,
                gather,
            } => self.job_arrived_with(conn, idx, work, gather),
            Msg::Park { conn, seq, cmd } => self.park_arrived(conn, seq, cmd),
            Msg::Track { who, keys } => self.track_keys(who, keys),
            Msg::EvictNow { from } => self.evict_now(usize::from(from)),
            Msg::EvictDone => self.evict_done(),
            Msg::ExecDone { conn, batch } => self.exec_done(conn, batch),
            Msg::Wake { conn, seq } => self.wake(conn, seq),
            Msg::Unblocked {
                conn,
                seq,
                reply,
                aof,
            } => self.unblocked(conn, seq, reply, aof),
            Msg::JobDone {
                conn,
                idx,
                out,
                aof,
            } => self.job_done(conn, idx, out, aof),
            Msg::JobsDone { conn, gather } => self.jobs_done(conn, gather),
            Msg::Adopt(stream) => self.adopt_unix(stream),
        }
    }

    pub fn shutdown(&mut self) {
        self.core.aof_flush();
        for slot in 0..self.conns.slots.len() {
            if let Some(c) = self.conns.slots[slot].as_mut() {
                let _ = c.flush();
            }
            self.close_conn(slot);
        }
        // Sockets another shard may still write a direct reply to until it
        // stops: never closed, so their descriptors cannot be reused under
        // that write meanwhile (the process is ending).
        for (_, s) in self.conns.zombies.drain(..) {
            std::mem::forget(s);
        }
    }
}
