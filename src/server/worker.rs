//! The per-thread event loop. Request path: no locks, no allocation per
//! request on the inline path beyond the reply bytes, logging only on
//! connection events.
//!
//! One iteration:
//! 1. park (raise the flag, check the ready set), `epoll_wait` until an
//!    event, a doorbell, or the next cron tick; unpark; refresh the shard
//!    clock;
//! 2. drain batches that came back without a doorbell (see `mailbox`);
//!    accept on this thread's listeners; read every readable connection
//!    and execute every complete request it holds: inline when the keys are
//!    on this thread's shard, as a hop or a coordinator otherwise;
//! 3. drain the inbound rings of the threads that sent something (the
//!    mailbox's ready set, not all N): run hops and jobs from other
//!    threads on this shard, and collect replies for this thread's
//!    connections (a lone request of a connection with nothing else
//!    outstanding is answered by the shard that runs it, straight to the
//!    socket: `mark_direct`);
//! 4. write every connection with new output (one `write` per connection
//!    per iteration, however many replies it holds), publish this shard's
//!    memory figure if it moved (maxmemory, see `engine::evict`), then mark
//!    this thread ready at, and ring the doorbell of, each thread that got
//!    messages;
//! 5. run the cron when due (active expiry, client timeouts, config, idle
//!    rings let go), and send what it queued at once.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::coord::{ClientIo, ClientRegistry, JobFn, JobOut, Plan, ShardEnv, Work};
use commands::exec::{self, dispatch, run_shard, ShardCall, Step};
use commands::tx::{LockTable, TxId};
use commands::{ClientState, ConnCtx, ReplyMode, ServerShared, ThreadStats};
use engine::Shard;
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token};
use resp::{parse_request, Args, Limits, Parsed, Reply};

use super::blocking::{self, BlockPhase, BlockTicket, BlockedCmd, Waiters};
use super::conn::{ActiveCoord, Conn, RecentPeaks, Stream, HOLD_LOCAL, READ_CHUNK};
use super::mailbox::{Batch, BatchCmd, ConnRef, Mailbox, Msg};
use crate::log;

mod busy;
mod memory;
mod pause;
mod pubsub;
mod repl_wait;
mod replica;
mod tracking;

const WAKER: Token = Token(usize::MAX);
const UNIX: Token = Token(usize::MAX - 1);
const TCP_BASE: usize = usize::MAX - 64;
/// Tokens of the TLS listeners (`tls-port`), below the plain ones.
const TLS_BASE: usize = usize::MAX - 128;

/// Stop executing a connection's requests while this much output is
/// unwritten (the client is not reading); resume once it drains. This
/// back-pressure is Tessera's own and bounds memory even with Redis's
/// default `client-output-buffer-limit normal 0 0 0`; the configured limits
/// are checked first (after each command, at each flush, and in the cron),
/// so a lower hard limit closes the client before it pauses, and a soft
/// limit with seconds still closes a paused client. A hard limit above this
/// is reached only by one reply bigger than the rest of it.
const OUT_SOFT_LIMIT: usize = 64 << 20;
/// At most this many replies queued per connection (in flight on other
/// shards, or done and waiting behind those). With the byte bound above,
/// a client that never reads holds at most about OUT_SOFT_LIMIT plus
/// MAX_PENDING replies of server memory. Far deeper than any pipeline needs
/// to keep both threads busy.
const MAX_PENDING: usize = 256;
/// Unwritten output a connection may hold back while a pipelined
/// multi-shard command of it is still running (see `flush_one`).
const FLUSH_DEFER_MAX: usize = 64 << 10;
/// Inbound messages handled per iteration before serving sockets again.
const DRAIN_BUDGET: usize = 64 * 1024;

/// Settings read from the shared config, refreshed when it changes.
#[derive(Clone, Debug)]
struct Cached {
    max_bulk_len: u64,
    qbuf_limit: usize,
    timeout_s: u64,
    hz: u32,
    maxclients: usize,
    databases: usize,
    protected_mode: bool,
    tcp_keepalive_s: u64,
    loglevel: config::LogLevel,
    obuf: [config::ObufLimit; 3],
    shard_consolidation: bool,
    /// `tracking-table-max-keys` split over the shards (each shard's
    /// table holds at most its share, rounded up); 0 = no limit.
    tracking_max_keys: usize,
    replica_read_only: bool,
}

impl Cached {
    fn read(server: &ServerShared) -> Self {
        let c = server.config.read().unwrap_or_else(|e| e.into_inner());
        Cached {
            max_bulk_len: c.proto_max_bulk_len,
            qbuf_limit: c.client_query_buffer_limit as usize,
            timeout_s: c.timeout_s,
            hz: c.hz.clamp(1, 500),
            maxclients: c.maxclients as usize,
            databases: c.databases,
            protected_mode: c.protected_mode,
            tcp_keepalive_s: c.tcp_keepalive_s,
            loglevel: c.loglevel,
            obuf: c.client_output_buffer_limit,
            shard_consolidation: c.shard_consolidation,
            tracking_max_keys: c
                .tracking_table_max_keys
                .div_ceil(server.nshards.max(1) as u64)
                .min(usize::MAX as u64) as usize,
            replica_read_only: c.replica_read_only,
        }
    }
}

/// Everything of a worker except its connections (so both can be borrowed
/// at once).
struct Core {
    id: usize,
    shard: Shard,
    stats: ThreadStats,
    mailbox: Mailbox,
    server: Arc<ServerShared>,
    cfg: Cached,
    cfg_gen: u64,
    scratch: Vec<usize>,
    /// Jobs this thread's coordinators addressed to its own shard.
    local: VecDeque<Msg>,
    /// Remote requests of the connection being processed, per shard; sent
    /// when the pass over its pipeline ends (or before a coordinator starts).
    /// N pointers per thread; only `batch_to`'s entries are visited.
    batches: Vec<Option<Box<Batch>>>,
    /// The shards with a batch in `batches`, so sending visits only those
    /// (not all N).
    batch_to: Vec<usize>,
    batch_conn: Option<ConnRef>,
    /// Batches back from their trip, for reuse. Boxed because messages
    /// carry them boxed (a small `Msg`); pooling the boxes reuses those
    /// allocations too.
    #[allow(clippy::vec_box)]
    pool: Vec<Box<Batch>>,
    /// `capacity_bytes` of the pooled batches.
    pool_bytes: usize,
    /// Scratch reply for inline replies queued behind pending ones.
    side: Reply,
    /// This shard's transaction locks (see `commands::tx`).
    locks: LockTable<Waiter>,
    /// Remote batches waiting for a release, and jobs of their connections
    /// behind them, in arrival order.
    deferred: VecDeque<Deferred>,
    /// `retry_deferred` is running / was asked for another pass meanwhile.
    retrying: bool,
    retry_again: bool,
    /// This thread's connections whose next request waits for a release:
    /// `(slot, gen)`.
    lock_blocked: Vec<(usize, u32)>,
    /// This thread's connections whose next request CLIENT PAUSE holds:
    /// `(slot, gen)`, and the pause generation they were held under (see
    /// `pause`).
    pause_held: Vec<(usize, u32)>,
    pause_gen: u64,
    /// Commands blocked on this shard's keys (see `blocking`).
    waiters: Waiters,
    /// This thread's connections blocked with a deadline: `(slot, gen)`.
    blocked_conns: Vec<(usize, u32)>,
    /// The append-only file, when `appendonly` is on.
    aof: Option<Arc<super::aof::Aof>>,
    /// Transactions holding locks here: their records on this shard wait
    /// for the release (see `aof`).
    aof_tx: Vec<(ConnRef, TxId, TxParts)>,
    /// Durability target of this thread's last append to the AOF.
    aof_last: u64,
    /// `appendfsync always` (refreshed each loop iteration): replies of
    /// writes are held until their records are durable (see `conn`).
    aof_always: bool,
    /// `always`, and this thread runs every shard: it writes and fsyncs
    /// the AOF itself at the end of each loop iteration
    /// ([`super::aof::Aof::lead`]), so appends do not wake the writer.
    aof_led: bool,
    /// Records appended under `aof_led` since the last lead.
    aof_due: std::cell::Cell<u64>,
    /// Connections with replies held on records still in this shard's
    /// buffer ([`HOLD_LOCAL`]): `(slot, gen)`.
    local_holds: Vec<(usize, u32)>,
    /// Connections with held replies: `(slot, gen)`.
    held: Vec<(usize, u32)>,
    /// Connections with a direct hop in flight: `(slot, gen)`.
    direct_conns: Vec<(usize, u32)>,
    /// The writer whose targets the held replies wait for (the writer
    /// changes with `CONFIG SET appendonly`; targets of another are
    /// meaningless, and a stopped writer has flushed everything).
    held_aof: Option<usize>,
    /// Some client tracks keys: the databases list their changes (see
    /// `tracking`).
    track_on: bool,
    /// Changed keys and the connection that changed them, this iteration.
    /// Keys changed this iteration: who changed them (NOLOOP) and the
    /// change's sequence number (see `engine::Tracked::take_changed`).
    touched: Vec<(engine::SmallBytes, Option<commands::ctx::Home>, u64)>,
    /// This shard's link to a running background save.
    save_link: Option<commands::persist::SaveLink>,
    /// A coordinator the server runs for itself (a save the `save` rules
    /// started), with no connection: its jobs report to [`SYS_SLOT`].
    sys: Option<SysCoord>,
    /// This thread's connections blocked in WAIT: `(slot, gen)`.
    repl_waits: Vec<(usize, u32)>,
}

/// The connection slot that stands for the server itself.
const SYS_SLOT: u32 = u32::MAX;

struct SysCoord {
    coord: Box<dyn commands::coord::Coordinator>,
    results: Vec<Option<JobOut>>,
    remaining: usize,
    out: Reply,
    client: commands::ClientState,
}

/// A transaction's stamped records made on this shard so far.
type TxParts = Vec<(u64, engine::outbox::Chunk)>;

/// A transaction's work waiting for its locks on this shard.
struct Waiter {
    conn: ConnRef,
    idx: u32,
    job: JobFn,
    release: Option<TxId>,
}

/// A connection's work held back on this shard, in arrival order: a remote
/// batch stopped by a transaction's lock (it resumes at command `next`,
/// whose arguments start at `arg`), or a coordinator job of a connection
/// that has such a batch here. The job waits behind the batch: a pipeline's
/// multi-shard command must see the effects of the commands before it
/// (a read lock compatible with the lock that stopped the batch, e.g. a
/// BGSAVE's, would otherwise let an MGET read before an earlier APPEND).
struct Deferred {
    conn: ConnRef,
    what: Held,
}

enum Held {
    Batch {
        batch: Box<Batch>,
        next: usize,
        arg: usize,
    },
    Job {
        idx: u32,
        work: Work,
    },
}

/// Batches kept for reuse per thread.
const BATCH_POOL_MAX: usize = 256;
/// Bytes of buffers the pooled batches of one thread may keep: a bulk load
/// through a pipe grows batches to tens of KiB, and 256 of them kept ~11 MB
/// after the load was over.
const BATCH_POOL_BYTES: usize = 2 << 20;

impl Core {
    /// Publishes this shard's change count (INFO's
    /// `rdb_changes_since_last_save`, save rules).
    #[inline]
    fn publish_dirty(&self) {
        self.server
            .persist
            .publish_dirty(self.id, self.shard.dirty());
    }

    /// Under `aof_led`, counts `records` just appended towards the next
    /// lead (a finished transaction's slot counts as one).
    #[inline]
    fn count_led(&self, records: u64) {
        if self.aof_led {
            self.aof_due.set(self.aof_due.get() + records);
        }
    }

    /// Hands this shard's records to the AOF writer: before any message or
    /// reply lets another thread or a client see the writes.
    #[inline]
    fn aof_flush(&mut self) {
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
    fn aof_toggled(&mut self) {
        if self.shard.outbox.records_on {
            self.aof = self
                .server
                .aof
                .get()
                .and_then(|c| c.as_any().downcast_ref::<super::aof_rewrite::Rewriter>())
                .and_then(|r| r.current());
            match &self.aof {
                Some(a) => a.set_policy(self.server.config().appendfsync),
                None => self.shard.outbox.records_on = false,
            }
        } else if let Some(a) = self.aof.take() {
            if let Some(c) = self.shard.outbox.take() {
                self.aof_last = a.append(c, false);
            }
        }
    }

    /// Puts a connection that got a held reply on the held list.
    fn note_held(&mut self, c: &mut Conn, slot: usize) {
        self.held_aof = self.aof.as_ref().map(|a| Arc::as_ptr(a) as usize);
        if !c.held_listed {
            c.held_listed = true;
            self.held.push((slot, c.gen));
        }
    }

    fn send_batches(&mut self) {
        let Some(conn) = self.batch_conn.take() else {
            return;
        };
        self.aof_flush();
        for to in self.batch_to.drain(..) {
            if let Some(batch) = self.batches[to].take() {
                self.mailbox.send(to, Msg::Exec { conn, batch });
            }
        }
    }

    fn recycle(&mut self, mut batch: Box<Batch>) {
        let Some(bytes) = batch.recycle() else {
            return;
        };
        if self.pool.len() < BATCH_POOL_MAX && self.pool_bytes + bytes <= BATCH_POOL_BYTES {
            self.pool_bytes += bytes;
            self.pool.push(batch);
        }
    }

    /// A batch from the pool, or a new one.
    fn take_batch(&mut self) -> Box<Batch> {
        match self.pool.pop() {
            Some(b) => {
                self.pool_bytes -= b.capacity_bytes();
                b
            }
            None => Box::default(),
        }
    }
}

struct Conns {
    /// Boxed: a connection is taken out of its slot while it executes
    /// (see `process_lent`), a pointer move.
    slots: Vec<Option<Box<Conn>>>,
    gens: Vec<u32>,
    free: Vec<usize>,
    /// Connections with output to write this iteration.
    dirty: Vec<usize>,
    /// Emptied lists kept for their capacity: swapped with `dirty` and
    /// `resume` to walk them, so no iteration allocates a new list.
    spare: Vec<Vec<usize>>,
    /// Connections to execute again (a coordinator finished, output
    /// drained, or a read was cut short).
    resume: Vec<usize>,
    /// Killed by CLIENT KILL: closed at the end of the drain, if the slot
    /// still holds the same connection.
    killed: Vec<(usize, u32)>,
    /// INFO's client_recent_max_*_buffer for this thread's clients.
    peaks: RecentPeaks,
    /// Sockets of connections closed while a direct hop of theirs was in
    /// flight: kept open until the batch is back, so the other shard never
    /// writes to a descriptor number reused by a newer socket.
    zombies: Vec<(ConnRef, Stream)>,
    /// Coordinators of closed connections that must run to their end
    /// (`Coordinator::must_finish`): their jobs' outputs still come back
    /// to the connection's old `ConnRef`; the reply is dropped.
    orphans: Vec<Orphan>,
}

/// A coordinator whose connection went away while it could not be
/// aborted.
struct Orphan {
    conn: ConnRef,
    ac: ActiveCoord,
    client: ClientState,
}

impl Conns {
    /// The connection `r` names, if it is still there.
    fn get(&mut self, r: ConnRef) -> Option<&mut Conn> {
        self.slots
            .get_mut(r.slot as usize)?
            .as_deref_mut()
            .filter(|c| c.gen == r.gen)
    }

    fn mark_dirty(&mut self, slot: usize) {
        if let Some(c) = self.slots[slot].as_mut() {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(slot);
            }
        }
    }
}

impl ClientRegistry for Conns {
    fn unblock(&mut self, id: u64, error: bool) -> bool {
        let Some(slot) = self
            .slots
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.client.id == id))
        else {
            return false;
        };
        let Some(c) = self.slots[slot].as_mut() else {
            return false;
        };
        let BlockPhase::Blocked(t) = &c.block else {
            return false;
        };
        if !blocking::claim(&t.claim) {
            return false;
        }
        let seq = t.seq;
        let mut r = Reply::new(c.client.resp3);
        if error {
            r.error("UNBLOCKED client unblocked via CLIENT UNBLOCK");
        } else {
            // As on timeout.
            r.null_array();
        }
        c.complete(seq, r.as_bytes());
        c.block = BlockPhase::None;
        blocking::set_blocked(&mut c.client, false);
        self.mark_dirty(slot);
        self.resume.push(slot);
        true
    }

    fn for_each(&self, f: &mut dyn FnMut(&ClientState, &ClientIo)) {
        for c in self.slots.iter().flatten() {
            f(&c.client, &c.io());
        }
    }
    fn recent_max_buffers(&self) -> (usize, usize) {
        self.peaks.max()
    }
    fn kill(&mut self, id: u64) -> bool {
        let found = self
            .slots
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.client.id == id));
        match found {
            Some(slot) => {
                if let Some(c) = self.slots[slot].as_mut() {
                    if c.coord.is_some() {
                        // The killer itself (SKIPME no): reply, then close.
                        c.client.close_after_reply = true;
                    } else {
                        c.closing = true;
                        self.killed.push((slot, c.gen));
                    }
                }
                true
            }
            None => false,
        }
    }
}

pub struct Worker {
    core: Core,
    conns: Conns,
    poll: Poll,
    tcp: Vec<TcpListener>,
    /// Listeners on `tls-port`: their connections speak TLS.
    tls: Vec<TcpListener>,
    unix: Option<UnixListener>,
    unix_rr: usize,
    next_cron: Instant,
    /// This thread's counters as last added to the shared samples.
    reported: (u64, u64, u64),
    /// Thread 0: the shared totals at the previous rate sample.
    rate_base: Option<(Instant, u64, u64, u64)>,
    nap: Nap,
    /// Messages still spilled after the last iteration's flush.
    spilled: bool,
    /// When the running snapshot wants its next step.
    save_wait: Option<Duration>,
    /// What the desk lent to long scripts keeps (see `busy`).
    desk: busy::DeskState,
    /// The shared state, for the desk (`core` is lent to the handler).
    shared: Arc<ServerShared>,
    /// Thread 0 of a replica: the connection from its master `(slot, gen)`.
    master_conn: Option<(usize, u32)>,
}

/// When to nap instead of sleeping in epoll (see [`Worker::step_solo`]).
///
/// At pipeline 1 with many clients, a thread that blocks in epoll as soon
/// as it has answered what was ready is woken again for each request or
/// two: two threads each woke about once per 2 requests (SET, 50 clients,
/// 0.46 context switches per request against Redis's 0.13, whose single
/// thread sees all 50 clients), and the switches were 15-20 % of the
/// server's CPU. When many connections are active and the iteration found
/// few events, the thread naps a few microseconds first, so that the next
/// poll collects several requests. A message from another thread ends the
/// nap at once (its doorbell unparks the thread), so cross-shard hops do
/// not wait for it; a lone client never causes a nap.
struct Nap {
    epoch: Instant,
    /// Current 1 ms window (since `epoch`), connections that read in it,
    /// and in the window before.
    window: u32,
    active: u32,
    active_prev: u32,
    /// Messages of multi-shard coordination (a hop whose sender waits for
    /// the reply, and that reply) in the current and the previous window.
    coord: u32,
    coord_prev: u32,
    /// Socket events of the last iteration, and commands it ran.
    events: usize,
    cmds: u64,
    dur: Duration,
}

/// Active connections (read in the previous 1 ms window) a thread needs
/// before it naps: 16 with 50 clients on 2 threads; with 20 clients on 2
/// threads, naps raised redis-benchmark's p50 without a throughput gain.
const NAP_MIN_ACTIVE: u32 = 16;

/// An iteration with at most this many socket events, and twice as many
/// commands, did little work: worth napping after (at pipeline 16 one
/// event brings 16 commands, and batches are big already).
const NAP_MAX_EVENTS: usize = 2;

/// Nap length in microseconds unless `TESSERA_NAP_US` says otherwise (0
/// turns naps off, for side-by-side benchmarks). 20 and 40 us measured
/// alike on multi-key commands; 40 gave SET at pipeline 1 more.
const NAP_US: u64 = 40;

impl Nap {
    fn new() -> Self {
        let us = std::env::var("TESSERA_NAP_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(NAP_US);
        Nap {
            epoch: Instant::now(),
            window: 0,
            active: 0,
            active_prev: 0,
            coord: 0,
            coord_prev: 0,
            events: 0,
            cmds: 0,
            dur: Duration::from_micros(us),
        }
    }

    /// Starts a new window if `now` is past the current one.
    fn tick(&mut self, now: Instant) {
        let w = now.saturating_duration_since(self.epoch).as_millis() as u32;
        if w != self.window {
            let next = w == self.window.wrapping_add(1);
            self.active_prev = if next { self.active } else { 0 };
            self.coord_prev = if next { self.coord } else { 0 };
            self.active = 0;
            self.coord = 0;
            self.window = w;
        }
    }

    fn wanted(&self) -> bool {
        !self.dur.is_zero()
            && self.events > 0
            && self.events <= NAP_MAX_EVENTS
            && self.cmds <= 2 * NAP_MAX_EVENTS as u64
            && self.active_prev >= NAP_MIN_ACTIVE
            && self.coord_prev.saturating_mul(4) < self.active_prev
    }

    /// Counts `m` if it is multi-shard coordination: naps would delay
    /// such work at both ends.
    fn note(&mut self, m: &Msg) {
        let coord = match m {
            Msg::Exec { batch, .. } => batch.direct_fd < 0,
            Msg::ExecDone { batch, .. } => batch.direct_written < batch.reply.len(),
            Msg::Job { .. } | Msg::JobDone { .. } => true,
            _ => false,
        };
        self.coord += u32::from(coord);
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
        (shard, aof): (Option<Shard>, Option<Arc<super::aof::Aof>>),
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
                scratch: Vec::new(),
                local: VecDeque::new(),
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
                pause_held: Vec::new(),
                pause_gen: 0,
                waiters: Waiters::default(),
                blocked_conns: Vec::new(),
                save_link: None,
                sys: None,
                repl_waits: Vec::new(),
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
                touched: Vec::new(),
            },
            conns: Conns {
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
            },
            poll,
            tcp,
            tls,
            unix,
            unix_rr: 0,
            next_cron: Instant::now(),
            reported: (0, 0, 0),
            rate_base: None,
            nap: Nap::new(),
            spilled: false,
            save_wait: None,
            desk: busy::DeskState::default(),
            shared: server_for_desk,
            master_conn: None,
        };
        w.core.batches = (0..nthreads).map(|_| None).collect();
        w.core.shard.outbox.records_on = w.core.aof.is_some();
        w.core.shard.lfu = commands::keys::lfu_params(&w.core.server);
        w.core.shard.enc = commands::ctx::enc_limits(&w.core.server);
        w.core.shard.rdb_compression = w.core.server.config().rdbcompression;
        let notify = w.core.server.config().notify_keyspace_events;
        w.core.shard.set_notify(notify);
        commands::memory::configure_shard(&mut w.core.shard, &w.core.server);
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

    /// How long this worker may sleep before its next iteration: until
    /// its cron, a blocked client's timeout, a save step; zero when work
    /// is waiting.
    pub fn timeout(&mut self, now: Instant) -> Duration {
        engine::alloc::enter_shard(self.core.id);
        let mut timeout = self.next_cron.saturating_duration_since(now);
        if let Some(ms) = self.expire_blocked() {
            timeout = timeout.min(Duration::from_millis(ms));
        }
        if self.spilled {
            timeout = timeout.min(Duration::from_millis(1));
        }
        if let Some(w) = self.save_wait {
            timeout = timeout.min(w);
        }
        if let Some(w) = self.pause_wait() {
            timeout = timeout.min(w);
        }
        if !self.core.repl_waits.is_empty() {
            timeout = timeout.min(repl_wait::POLL);
        }
        if !self.conns.resume.is_empty() || !self.core.local.is_empty() {
            timeout = Duration::ZERO;
        }
        if self.want_durable() {
            timeout = Duration::ZERO;
        }
        timeout
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
        self.serve(events, led);
    }

    /// Raises this worker's parked flag before its thread sleeps (see
    /// `mailbox`); true if messages wait, so the thread must not sleep.
    pub fn park_flag(&mut self) -> bool {
        engine::alloc::enter_shard(self.core.id);
        let eager = self.direct_eager();
        // After the parked flag and its fence: a publisher that queued
        // before it is seen here, one after it rings the doorbell.
        self.core.mailbox.park(eager) || self.core.server.pubsub.has_pending(self.core.id)
    }

    /// Lowers the parked flag once the thread is awake.
    pub fn unpark_flag(&self) {
        self.core.mailbox.unpark();
    }

    /// One iteration of a worker that shares its thread with others (the
    /// thread waited on all their epoll sets together): collects its
    /// events without waiting, and serves them.
    /// `poll`: false when the thread's wait showed this worker's epoll set
    /// holds nothing.
    pub fn step_shared(&mut self, events: &mut Events, poll: bool, led: bool) {
        engine::alloc::enter_shard(self.core.id);
        if !poll {
            events.clear();
        } else if let Err(e) = self.poll.poll(events, Some(Duration::ZERO)) {
            if e.kind() != io::ErrorKind::Interrupted {
                log::warning(format_args!("epoll_wait failed: {e}"));
            }
        }
        self.serve(events, led);
    }

    /// Messages, local work or resumed connections wait: the next loop
    /// iteration has work without polling.
    pub fn has_pending_work(&self) -> bool {
        self.core.mailbox.has_inbound()
            || !self.core.local.is_empty()
            || !self.conns.resume.is_empty()
            || self.core.server.pubsub.has_pending(self.core.id)
    }

    /// Under `always` with `led`: writes and fsyncs the AOF records this
    /// worker appended since the last call (and everything queued before
    /// them), waking the threads other than the shards in `mine` that wait
    /// for them, then sends the replies that waited for them (as Redis
    /// writes its replies right after its fsync, before it sleeps).
    /// `inline` false: the batch goes to the writer thread instead, and
    /// this thread serves the next requests while the writer fsyncs.
    pub fn lead_aof(&mut self, mine: &[usize], inline: bool) {
        if self.core.aof_due.replace(0) == 0 {
            return;
        }
        engine::alloc::enter_shard(self.core.id);
        let Some(a) = &self.core.aof else { return };
        if !inline {
            a.hand_off();
            return;
        }
        if a.lead(mine) {
            self.flush_conns();
        }
    }

    /// Records appended under `always` since the last lead.
    pub fn aof_due(&self) -> u64 {
        self.core.aof_due.get()
    }

    /// Everything an iteration does after its wait: the parked flag comes
    /// down, then messages, sockets, writes, AOF, saves, cron.
    fn serve(&mut self, events: &Events, led: bool) {
        self.core.mailbox.unpark();
        self.core.shard.tick();
        self.refresh_config();
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
        if self.core.mailbox.has_inbound() {
            // Batches back from direct hops settle their connections'
            // slots before those read again: the next request then
            // finds nothing outstanding (its reply goes straight to
            // `out`, and it may hop directly in turn).
            self.drain();
        }
        self.nap.events = 0;
        let cmds_before = self.core.stats.total_commands;
        for ev in events.iter() {
            match ev.token() {
                WAKER => {}
                UNIX => self.accept_unix(),
                Token(t) if t >= TCP_BASE => self.accept_tcp(t - TCP_BASE, false),
                Token(t) if t >= TLS_BASE => self.accept_tcp(t - TLS_BASE, true),
                Token(slot) => {
                    self.nap.events += 1;
                    if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                        let hup = ev.is_read_closed() || ev.is_error();
                        self.read_conn(slot, hup);
                    }
                    if ev.is_writable() {
                        self.conns.mark_dirty(slot);
                    }
                }
            }
        }
        self.drain();
        self.run_resumes();
        self.publish_events();
        self.invalidate_touched();
        self.deliver_pubsub();
        // CONFIG RESETSTAT may have zeroed the count meanwhile.
        self.nap.cmds = self.core.stats.total_commands.saturating_sub(cmds_before);
        self.flush_conns();
        self.core.aof_flush();
        self.save_wait = self.save_step(!events.is_empty());
        // maxmemory: this shard's counter for the others' checks, when it
        // moved past the bound (see engine::evict's "Snapshot").
        self.core.shard.publish_memory();
        self.spilled = self.core.mailbox.flush();
        if Instant::now() >= self.next_cron {
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
    }

    /// At a shutdown request: hands this thread's AOF records to the
    /// writer and the shard to the main thread, and waits for its verdict.
    /// True to exit; otherwise the shard is back, and the clients that
    /// sent SHUTDOWN get Redis's error and go on.
    pub fn park(&mut self, gate: &super::shutdown::Gate) -> bool {
        self.core.aof_flush();
        let id = self.core.id;
        let placeholder = Shard::new(id, 0);
        let shard = std::mem::replace(&mut self.core.shard, placeholder);
        let (verdict, back) = gate.park(id, shard);
        if let Some(s) = back {
            self.core.shard = s;
        }
        if verdict == super::shutdown::Verdict::Exit {
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

    // ------------------------------------------------------------ accept

    /// Accepts on plain listener `i`, or on TLS listener `i` (`tls`).
    fn accept_tcp(&mut self, i: usize, tls: bool) {
        let Worker {
            core,
            conns,
            poll,
            tcp,
            tls: tls_listeners,
            ..
        } = self;
        // An event of a listener CONFIG SET tls-port closed in this very
        // poll round names an index that is gone: nothing to accept.
        let Some(l) = (if tls {
            tls_listeners.get(i)
        } else {
            tcp.get(i)
        }) else {
            return;
        };
        Door::of(core, conns, poll).accept_tcp(l, tls);
    }

    fn accept_unix(&mut self) {
        loop {
            let stream = match self.unix.as_ref().map(|u| u.accept()) {
                Some(Ok((s, _))) => s,
                Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                _ => return,
            };
            // Spread unix clients over threads round-robin (a unix socket
            // cannot be shared with SO_REUSEPORT).
            let n = self.core.mailbox.threads();
            let to = self.unix_rr % n;
            self.unix_rr = self.unix_rr.wrapping_add(1);
            if to == self.core.id {
                self.adopt_unix(stream);
            } else {
                self.core.mailbox.send(to, Msg::Adopt(stream));
            }
        }
    }

    fn adopt_unix(&mut self, stream: mio::net::UnixStream) {
        let path = self
            .core
            .server
            .config
            .read()
            .map(|c| {
                c.unixsocket
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        // Redis prints both ends of a unix connection as `path:0`.
        let addr = format!("{path}:0");
        self.add_conn(Stream::Unix(stream), addr.clone(), addr, true, true);
    }

    fn add_conn(&mut self, stream: Stream, addr: String, laddr: String, unix: bool, local: bool) {
        let Worker {
            core, conns, poll, ..
        } = self;
        Door::of(core, conns, poll).add_conn(stream, addr, laddr, unix, local);
    }

    /// A replica's link to its master as a connection of this thread
    /// (no client limits apply to it); its slot.
    fn add_master_conn(&mut self, stream: Stream, addr: String, laddr: String) -> Option<usize> {
        let server = self.core.server.clone();
        server.total_connections.fetch_add(1, Ordering::Relaxed);
        server.connected_clients.fetch_add(1, Ordering::AcqRel);
        let Worker {
            core, conns, poll, ..
        } = self;
        let slot = Door::of(core, conns, poll).insert_conn(stream, addr, laddr, false);
        if slot.is_none() {
            server.connected_clients.fetch_sub(1, Ordering::AcqRel);
        }
        slot
    }

    fn close_conn(&mut self, slot: usize) {
        if let Some(mut c) = self.conns.slots[slot].take() {
            // A replica's master: what it sent runs to its end (the next
            // PSYNC continues after it), as a coordinator that cannot be
            // aborted does.
            let master = c.master.take();
            if let Some(m) = &master {
                crate::server::repl::replica::link_lost(&self.core.server, m);
            }
            // Kept running to its end instead (see `Orphan`).
            let orphan = c
                .coord
                .take_if(|ac| master.is_some() || ac.coord.must_finish())
                .map(|ac| (ac, c.client.clone()));
            if let Some(mut ac) = c.coord.take() {
                // A transaction in flight releases its locks; outputs come
                // back to a slot whose generation has moved on.
                let mut plan = Plan::default();
                ac.coord.abort(&mut plan);
                let conn = ConnRef {
                    thread: self.core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                send_plan(&mut self.core, conn, plan);
                if let (Some(a), Some(tx)) = (&self.core.aof, ac.coord.tx_id()) {
                    a.tx_abort(tx);
                }
            }
            blocking::set_blocked(&mut c.client, false);
            commands::pubsub::unsubscribe_all(&self.core.server, &mut c.client);
            commands::ops::monitor::stop(&self.core.server, &mut c.client);
            self.core.server.ops.slowlog.forget_client(&c.client);
            self.core.server.tracking.disconnected(&mut c.client);
            if let Some(claim) = c.block.claim() {
                // Whoever claims first decides: a shard that has not served
                // this client yet now never will.
                claim.store(true, Ordering::Release);
            }
            let _ = self.poll.registry().deregister(c.stream.source());
            self.conns.gens[slot] = self.conns.gens[slot].wrapping_add(1);
            self.conns.free.push(slot);
            self.core
                .server
                .connected_clients
                .fetch_sub(1, Ordering::AcqRel);
            log::verbose(format_args!(
                "Client closed connection id={} addr={}",
                c.client.id, c.client.addr
            ));
            let syncing = c.client.replica.as_ref().is_some_and(|h| h.sync.is_some());
            if c.direct {
                let conn = ConnRef {
                    thread: self.core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                self.conns.zombies.push((conn, c.stream));
            } else if syncing {
                // PSYNC / SYNC: the socket becomes a replica's link.
                super::repl::adopt(c.stream, &mut c.client);
            }
            if let Some((ac, client)) = orphan {
                let conn = ConnRef {
                    thread: self.core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                self.conns.orphans.push(Orphan { conn, ac, client });
            }
        }
    }

    /// Before sleeping: prunes the list of connections with a direct hop
    /// in flight, and tells whether one of them needs its batch back as
    /// soon as it comes (replies queued behind it, or a close waiting for
    /// it): then lazily sent batches must wake this thread.
    fn direct_eager(&mut self) -> bool {
        let Worker { core, conns, .. } = self;
        if core.direct_conns.is_empty() {
            return false;
        }
        let mut eager = false;
        core.direct_conns.retain(|&(slot, gen)| {
            let c = conns.slots.get_mut(slot).and_then(|c| c.as_mut());
            let Some(c) = c.filter(|c| c.gen == gen) else {
                return false;
            };
            if !c.direct {
                c.direct_listed = false;
                return false;
            }
            eager |=
                c.pending.len() > 1 || c.closing || c.peer_eof || c.hup || c.unread || has_work(c);
            true
        });
        eager
    }

    // ------------------------------------------------------------ read + execute

    /// Reads and executes. `hup`: the peer shut its side, so read to EOF
    /// (the short-read shortcut would miss a FIN that came with data).
    fn read_conn(&mut self, slot: usize, hup: bool) {
        // Out of its slot while it executes (see `process_lent`); back
        // before anything else looks at the table.
        let Some(mut c) = self.conns.slots.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let broken = self.read_lent(&mut c, slot, hup);
        self.conns.slots[slot] = Some(c);
        if broken {
            self.close_conn(slot);
        } else {
            self.conns.mark_dirty(slot);
        }
        self.after_desk();
    }

    /// `read_conn`'s body, with the connection out of its slot; true if it
    /// must be closed.
    fn read_lent(&mut self, c: &mut Conn, slot: usize, hup: bool) -> bool {
        // Once the peer hung up, read to EOF whenever reading resumes: the
        // event that announced it will not come again.
        c.hup |= hup;
        let hup = c.hup;
        if c.read_window != self.nap.window {
            c.read_window = self.nap.window;
            self.nap.active += 1;
        }
        let mut broken = false;
        loop {
            if c.closing || c.peer_eof {
                break;
            }
            if paused(c) {
                if hup && !c.block.is_none() {
                    // A blocked client that hangs up is gone (Redis frees
                    // it): nothing must be served to it any more.
                    broken = true;
                } else {
                    c.unread = true;
                }
                break;
            }
            c.unread = false;
            // Keep READ_CHUNK of initialised room at the end.
            if c.rpos == c.rbuf_end() {
                c.rpos = 0;
                c.set_rbuf_end(0);
            }
            if c.rbuf.len() - c.rbuf_end() < READ_CHUNK / 2 {
                if c.rpos > 0 {
                    let (s, e) = (c.rpos, c.rbuf_end());
                    c.rbuf.copy_within(s..e, 0);
                    c.set_rbuf_end(e - s);
                    c.rpos = 0;
                }
                if c.rbuf.len() - c.rbuf_end() < READ_CHUNK / 2 {
                    let want = (c.rbuf.len() * 2).max(READ_CHUNK);
                    c.rbuf.resize(want, 0);
                }
            }
            let end = c.rbuf_end();
            let room = c.rbuf.len() - end;
            match c.stream.read(&mut c.rbuf[end..]) {
                Ok(0) => {
                    // The peer shut its side: replies to what it sent are
                    // still owed (Redis writes them before it sees the EOF).
                    c.peer_eof = true;
                    c.unread = false;
                    break;
                }
                Ok(n) => {
                    c.set_rbuf_end(end + n);
                    self.core.stats.net_input_bytes += n as u64;
                    c.client.last_interaction_ms = self.core.shard.now_ms;
                    if c.master.is_some() {
                        let repl = &self.core.server.repl;
                        repl.last_io_ms
                            .store(self.core.shard.now_ms, Ordering::Relaxed);
                    }
                    self.process_lent(c, slot);
                    if c.qbuf_len() > self.core.cfg.qbuf_limit {
                        log::warning(format_args!(
                            "Closing client that reached max query buffer length: id={} addr={} qbuf={}",
                            c.client.id,
                            c.client.addr,
                            c.qbuf_len()
                        ));
                        broken = true;
                        break;
                    }
                    // A short read drained the socket: with edge-triggered
                    // epoll the next byte brings a new event, so skip the
                    // read that would only say EAGAIN.
                    if n < room && !hup {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        broken
    }

    /// [`process`] for a connection taken out of its slot, with this
    /// loop's other connections lent to a script it may run (served if it
    /// runs long, see `busy`).
    fn process_lent(&mut self, c: &mut Conn, slot: usize) {
        self.lend(c, slot, process);
    }

    /// Runs `step` ([`process`] or [`advance`]) for a connection taken out
    /// of its slot, with this loop's other connections lent to a script it
    /// may run.
    fn lend(&mut self, c: &mut Conn, slot: usize, step: fn(&mut Core, &mut Conn, usize)) {
        let Worker {
            core,
            conns,
            poll,
            desk,
            tcp,
            shared,
            ..
        } = self;
        let mut lent = busy::Desk {
            conns,
            poll,
            server: shared,
            id: core.id,
            limits: busy::DeskLimits {
                max_bulk_len: core.cfg.max_bulk_len,
                qbuf_limit: core.cfg.qbuf_limit,
                maxclients: core.cfg.maxclients,
                protected_mode: core.cfg.protected_mode,
                tcp_keepalive_s: core.cfg.tcp_keepalive_s,
            },
            tcp,
            state: desk,
            first: true,
        };
        commands::script::busy::lend_desk(&mut lent, core.id, || step(core, c, slot));
    }

    /// After a lend: accepts what a busy script's desk left waiting on the
    /// listeners (their events were taken).
    fn after_desk(&mut self) {
        if std::mem::take(&mut self.desk.missed_listener) {
            for i in 0..self.tcp.len() {
                self.accept_tcp(i, false);
            }
            for i in 0..self.tls.len() {
                self.accept_tcp(i, true);
            }
            self.accept_unix();
        }
    }

    fn run_resumes(&mut self) {
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

    // ------------------------------------------------------------ mailbox

    /// Handles inbound messages, visiting only the threads that sent some
    /// (the mailbox's ready set), then local jobs and served blocked
    /// clients, until none is left or `DRAIN_BUDGET` messages were handled.
    fn drain(&mut self) {
        let mut budget = DRAIN_BUDGET;
        loop {
            let mut got = false;
            self.core.mailbox.collect();
            while let Some(m) = self.core.mailbox.recv() {
                got = true;
                self.nap.note(&m);
                self.handle(m);
                budget -= 1;
                if budget == 0 {
                    return;
                }
            }
            while let Some(m) = self.core.local.pop_front() {
                got = true;
                self.handle(m);
            }
            if self.core.shard.dbs.iter().any(|d| d.has_ready()) {
                serve_ready(&mut self.core);
                got = true;
            }
            if !got {
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

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Exec { conn, batch } => {
                // Behind a deferred batch of the same connection: keep its
                // order.
                if self.core.deferred.iter().any(|d| d.conn == conn) {
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
            Msg::Job { conn, idx, work } => {
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
                        release,
                    };
                    // INVARIANT: checked just above.
                    self.refuse(w, lock.expect("a nowait request"));
                } else if behind {
                    self.core.deferred.push_back(Deferred {
                        conn,
                        what: Held::Job { idx, work },
                    });
                } else {
                    self.start_job(conn, idx, work);
                }
            }
            Msg::ExecDone { conn, batch } => {
                let slot = conn.slot as usize;
                let mut batch = batch;
                let mut newly_blocked = false;
                if batch.direct_fd >= 0 {
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
                            blocking::set_blocked(&mut c.client, true);
                            newly_blocked = true;
                        }
                        None => {
                            if matches!(c.block, BlockPhase::Awaiting(_)) {
                                c.block = BlockPhase::None;
                            }
                        }
                    }
                    // Its script is back (the last command of this batch;
                    // another shard's batch may come back before it).
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
            Msg::Park { conn, seq, cmd } => {
                let blocking::ParkReq {
                    claim,
                    resolved,
                    handler,
                    args,
                    call,
                    resp3,
                    keys,
                    wake_home,
                } = *cmd;
                if claim.load(Ordering::Acquire) {
                    return;
                }
                let on = commands::BlockOn {
                    keys: keys.clone(),
                    deadline_ms: 0,
                    args: None,
                    widen: false,
                };
                park_waiter(
                    &mut self.core,
                    conn,
                    seq,
                    (resolved, handler, call.clone(), resp3, wake_home),
                    args,
                    claim,
                    on,
                );
                // A key filled between the command's look and now would
                // never be reported: serve it now.
                for k in &keys {
                    if self.core.shard.dbs[call.db].contains(k) {
                        serve_key(&mut self.core, call.db, k);
                    }
                }
            }
            Msg::Track { who, keys } => self.track_keys(who, keys),
            Msg::Wake { conn, seq } => {
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
                blocking::set_blocked(&mut c.client, false);
                rerun(&mut self.core, c, slot, seq, &args);
                let resume = !paused(c);
                self.conns.mark_dirty(slot);
                if resume {
                    self.conns.resume.push(slot);
                }
            }
            Msg::Unblocked {
                conn,
                seq,
                reply,
                aof,
            } => {
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
                        blocking::set_blocked(&mut c.client, false);
                        let resume = !paused(c);
                        conns.mark_dirty(slot);
                        if resume {
                            conns.resume.push(slot);
                        }
                    }
                }
            }
            Msg::JobDone {
                conn,
                idx,
                out,
                aof,
            } => self.job_done(conn, idx, out, aof),
            Msg::Adopt(stream) => self.adopt_unix(stream),
        }
    }

    /// Runs a remote batch from command `next` on; stops and defers the
    /// rest at a command a transaction's lock holds back.
    fn run_batch(&mut self, conn: ConnRef, mut batch: Box<Batch>, next: usize, arg: usize) {
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
                    &mut self.core.scratch,
                )
            {
                b.reply = out.into_bytes();
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
            let block = if cmd.resolved.spec.has(commands::table::flags::SCRIPT) {
                // This loop's connections are lent to the script (see
                // `busy`; the caller's lives on another thread).
                let Worker {
                    core,
                    conns,
                    poll,
                    desk,
                    tcp,
                    shared,
                    ..
                } = &mut *self;
                let mut lent = busy::Desk {
                    conns,
                    poll,
                    server: shared,
                    id: core.id,
                    limits: busy::DeskLimits {
                        max_bulk_len: core.cfg.max_bulk_len,
                        qbuf_limit: core.cfg.qbuf_limit,
                        maxclients: core.cfg.maxclients,
                        protected_mode: core.cfg.protected_mode,
                        tcp_keepalive_s: core.cfg.tcp_keepalive_s,
                    },
                    tcp,
                    state: desk,
                    first: true,
                };
                commands::script::busy::lend_desk(&mut lent, core.id, || {
                    run_shard(
                        cmd.resolved,
                        cmd.handler,
                        args,
                        &mut core.shard,
                        cmd.call.clone(),
                        &mut out,
                        &mut core.stats,
                    )
                })
            } else {
                run_shard(
                    cmd.resolved,
                    cmd.handler,
                    args,
                    &mut self.core.shard,
                    cmd.call.clone(),
                    &mut out,
                    &mut self.core.stats,
                )
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
        // goes home the usual way.
        let direct = b.direct_fd >= 0
            && b.block.is_none()
            && b.widen.is_none()
            && !(self.core.aof_always && b.aof_from != usize::MAX);
        if direct {
            let n = write_direct(b.direct_fd, &b.reply);
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
    fn start_job(&mut self, conn: ConnRef, idx: u32, work: Work) {
        let Work { lock, job, release } = work;
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
        if let Some(w) = ready {
            self.run_work(w);
        }
    }

    /// A nowait lock request was refused: its job goes back unrun.
    #[cold]
    fn refuse(&mut self, w: Waiter, req: commands::tx::LockReq) {
        // The transaction holds nothing here: it has no records to collect.
        self.core
            .aof_tx
            .retain(|(c, tx, parts)| !(*c == w.conn && *tx == req.tx && parts.is_empty()));
        let out: JobOut = Box::new(commands::tx::LockConflict { req, job: w.job });
        if w.conn.thread as usize == self.core.id {
            self.job_done(w.conn, w.idx, out, 0);
        } else {
            self.core.mailbox.send(
                w.conn.thread as usize,
                Msg::JobDone {
                    conn: w.conn,
                    idx: w.idx,
                    out,
                    aof: 0,
                },
            );
        }
    }

    fn run_work(&mut self, w: Waiter) {
        tracking::track_check(&mut self.core);
        let mut queue = VecDeque::from([w]);
        while let Some(Waiter {
            conn,
            idx,
            job,
            release,
        }) = queue.pop_front()
        {
            // Records made before the job are not the transaction's.
            self.core.aof_flush();
            let out = {
                let mut env = ShardEnv {
                    shard: &mut self.core.shard,
                    stats: &mut self.core.stats,
                    clients: &mut self.conns,
                };
                job(&mut env)
            };
            tracking::tag_touched(&mut self.core, Some(tracking::home_of(conn)));
            let aof = match self.core.aof {
                Some(_) => self.aof_job_done(conn, release),
                None => 0,
            };
            self.core.publish_dirty();
            // The job's keyspace events go out before its completion can
            // reach the client (see the batch's epilogue).
            self.publish_events();
            if conn.thread as usize == self.core.id {
                self.job_done(conn, idx, out, aof);
            } else {
                self.core.mailbox.send(
                    conn.thread as usize,
                    Msg::JobDone {
                        conn,
                        idx,
                        out,
                        aof,
                    },
                );
            }
            if self.core.shard.dbs.iter().any(|d| d.has_ready()) {
                serve_ready(&mut self.core);
            }
            if let Some(tx) = release {
                self.core.locks.unlock(tx);
                retry_later(&mut self.core);
                // Plain commands first, so transactions cannot starve them.
                self.retry_deferred();
                queue.extend(self.core.locks.grant_waiting());
            }
        }
    }

    /// A job of `conn` ran: its records join its transaction's (if it holds
    /// locks here), which go to the writer's slot at the release. Returns
    /// the durability target of records appended on their own (0: none;
    /// a transaction's reach the coordinator through its slot).
    fn aof_job_done(&mut self, conn: ConnRef, release: Option<TxId>) -> u64 {
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
    fn retry_deferred(&mut self) {
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
                    self.core.deferred.push_back(d);
                    continue;
                }
                match d.what {
                    Held::Batch { batch, next, arg } => self.run_batch(d.conn, batch, next, arg),
                    Held::Job { idx, work } => self.start_job(d.conn, idx, work),
                }
            }
            if !self.core.retry_again {
                break;
            }
        }
        self.core.retrying = false;
        for (slot, gen) in std::mem::take(&mut self.core.lock_blocked) {
            let Some(mut c) = self.conns.slots.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            if c.gen == gen {
                c.lock_wait = false;
                self.process_lent(&mut c, slot);
            }
            self.conns.slots[slot] = Some(c);
            self.after_desk();
            self.conns.mark_dirty(slot);
        }
    }

    fn job_done(&mut self, conn: ConnRef, idx: u32, out: JobOut, aof: u64) {
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
            // Out of its slot while it steps: a script across shards runs
            // in this step, and may serve the rest of the loop.
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
    }

    /// An output for an orphaned coordinator: once its step is complete,
    /// step it as [`advance`] would, without a connection to reply to.
    #[cold]
    fn orphan_job_done(&mut self, i: usize, idx: u32, out: JobOut) {
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
    fn start_sys(&mut self, coord: Box<dyn commands::coord::Coordinator>) {
        self.core.sys = Some(SysCoord {
            coord,
            results: Vec::new(),
            remaining: 0,
            out: Reply::new(false),
            client: commands::ClientState::default(),
        });
        self.advance_sys();
    }

    fn sys_job_done(&mut self, idx: u32, out: JobOut) {
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
    fn advance_sys(&mut self) {
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

    /// This shard's share of a running background save, once per loop
    /// iteration; returns how long the next poll may wait.
    fn save_step(&mut self, busy: bool) -> Option<Duration> {
        let c = &mut self.core;
        c.publish_dirty();
        match commands::persist::tick(&c.server.persist, &mut c.shard, &mut c.save_link, busy) {
            commands::persist::Tick::Idle => None,
            commands::persist::Tick::Busy => Some(Duration::ZERO),
            commands::persist::Tick::Throttled => Some(Duration::from_millis(1)),
        }
    }

    /// Thread 0, each cron tick: starts a background save when a `save`
    /// rule is due, as Redis's serverCron does; also a scheduled save or
    /// AOF rewrite, and an automatic rewrite.
    fn save_rules_cron(&mut self) {
        if self.core.id != 0 || self.core.sys.is_some() {
            return;
        }
        let server = self.core.server.clone();
        if let Some(coord) =
            commands::persist::cron_due(&server).or_else(|| super::repl::cron_due(&server))
        {
            let mut set = commands::tx::LockSet::default();
            set.whole(server.nshards, commands::tx::Mode::Read);
            let coord = commands::tx::TxCoord::wrap(self.core.id, coord, set);
            self.start_sys(coord);
        }
    }

    // ------------------------------------------------------------ write

    /// Writes every connection with new output; then closes those that are
    /// done, and re-runs those that can execute more. Repeats (bounded)
    /// while re-running produced new output.
    fn flush_conns(&mut self) {
        for _ in 0..4 {
            self.settle_holds();
            if self.conns.dirty.is_empty() {
                return;
            }
            let spare = self.conns.spare.pop().unwrap_or_default();
            let mut list = std::mem::replace(&mut self.conns.dirty, spare);
            for &slot in &list {
                self.flush_one(slot);
            }
            list.clear();
            self.conns.spare.push(list);
            if self.conns.resume.is_empty() {
                return;
            }
            self.run_resumes();
        }
    }

    /// `appendfsync always`: gives replies held on this shard's buffered
    /// records their target (appending the records), then releases every
    /// held reply whose records are durable. With another policy (changed
    /// at runtime) every held reply goes.
    fn settle_holds(&mut self) {
        let Worker { core, conns, .. } = self;
        // Every policy: records reach the writer before the replies that
        // follow them are written.
        core.aof_flush();
        if core.local_holds.is_empty() && core.held.is_empty() {
            return;
        }
        let durable = match (&core.aof, core.aof_always) {
            (Some(a), true) if core.held_aof == Some(Arc::as_ptr(a) as usize) => a.durable(),
            _ => u64::MAX,
        };
        if !core.local_holds.is_empty() {
            let target = core.aof_last;
            for (slot, gen) in std::mem::take(&mut core.local_holds) {
                let c = conns.slots.get_mut(slot).and_then(|c| c.as_mut());
                if let Some(c) = c.filter(|c| c.gen == gen) {
                    c.local_listed = false;
                    c.resolve_local(target);
                }
            }
        }
        let mut list = std::mem::take(&mut core.held);
        list.retain(|&(slot, gen)| {
            let c = conns.slots.get_mut(slot).and_then(|c| c.as_mut());
            let Some(c) = c.filter(|c| c.gen == gen) else {
                return false;
            };
            let moved = c.release(durable);
            let keep = c.has_held();
            c.held_listed = keep;
            if moved {
                conns.mark_dirty(slot);
            }
            keep
        });
        core.held = list;
    }

    /// Before sleeping: asks the AOF writer to wake this thread once the
    /// oldest held reply can go. True if one can go already (then the
    /// thread must not sleep).
    fn want_durable(&mut self) -> bool {
        let core = &self.core;
        if core.held.is_empty() {
            return false;
        }
        let Some(a) = core.aof.as_ref().filter(|_| core.aof_always) else {
            return true;
        };
        if !core.local_holds.is_empty() {
            return true;
        }
        let min = core
            .held
            .iter()
            .filter_map(|&(slot, gen)| {
                let c = self.conns.slots.get(slot)?.as_ref()?;
                Some(c.front_hold()).filter(|&h| h != 0 && c.gen == gen)
            })
            .min();
        match min {
            Some(t) => a.want(core.id, t) >= t,
            // Held replies wait behind replies still in flight.
            None => false,
        }
    }

    fn flush_one(&mut self, slot: usize) {
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        c.dirty = false;
        if c.check_obuf(&self.core.cfg.obuf, self.core.shard.now_ms) {
            return self.close_conn(slot);
        }
        // Replies ahead of a pipelined command still running elsewhere (a
        // coordinator, or a hop to another shard) go out with its reply:
        // one write for the pipeline instead of one per multi-shard command
        // or hop (finishing marks the connection dirty). Bounded by
        // FLUSH_DEFER_MAX.
        // A blocked command may wait forever: what precedes it goes now.
        // (A reply held for the AOF is not in flight: what precedes it goes.)
        let in_flight = (c.coord.is_some() || c.front_in_flight()) && c.block.is_none();
        let defer = in_flight && !c.closing && c.unwritten() < FLUSH_DEFER_MAX;
        if !defer {
            match c.flush() {
                Ok(n) => self.core.stats.net_output_bytes += n as u64,
                Err(_) => return self.close_conn(slot),
            }
        }
        if let Some(m) = c.master.as_mut() {
            if c.pending.is_empty() && c.coord.is_none() {
                crate::server::repl::replica::publish(&self.core.server, m);
            }
        }
        let idle = c.unwritten() == 0 && c.pending.is_empty() && c.coord.is_none();
        if idle && (c.closing || (c.peer_eof && !has_work(c))) {
            // QUIT, a protocol error, CLIENT KILL of itself, or a peer that
            // shut its side: every reply owed has been written.
            self.close_conn(slot);
        } else if !c.closing && !paused(c) && (has_work(c) || (c.unread && !c.peer_eof)) {
            self.conns.resume.push(slot);
        }
    }

    // ------------------------------------------------------------ cron

    /// CONFIG SET tls-port: this thread's TLS listeners, replaced (the old
    /// ones close; their accepted connections go on).
    fn swap_tls_listeners(&mut self, ls: Vec<TcpListener>) {
        for mut l in std::mem::replace(&mut self.tls, ls) {
            let _ = self.poll.registry().deregister(&mut l);
        }
        for (i, l) in self.tls.iter_mut().enumerate() {
            if let Err(e) =
                self.poll
                    .registry()
                    .register(l, Token(TLS_BASE + i), Interest::READABLE)
            {
                log::warning(format_args!("Registering the TLS listener: {e}"));
            }
        }
    }

    /// Picks up CONFIG SET from any thread: one atomic load per iteration.
    fn refresh_config(&mut self) {
        let gen = self.core.server.config_gen.load(Ordering::Acquire);
        if gen != self.core.cfg_gen {
            self.core.cfg_gen = gen;
            self.core.cfg = Cached::read(&self.core.server);
            log::set_level(self.core.cfg.loglevel);
            if let Some(ls) = super::tls::take_listeners(self.core.id) {
                self.swap_tls_listeners(ls);
            }
            self.core.shard.lfu = commands::keys::lfu_params(&self.core.server);
            self.core.shard.enc = commands::ctx::enc_limits(&self.core.server);
            self.core.shard.rdb_compression = self.core.server.config().rdbcompression;
            let notify = self.core.server.config().notify_keyspace_events;
            self.core.shard.set_notify(notify);
            if let Some(a) = &self.core.aof {
                let p = self
                    .core
                    .server
                    .config
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .appendfsync;
                a.set_policy(p);
            }
            commands::memory::configure_shard(&mut self.core.shard, &self.core.server);
        }
    }

    /// Times out this thread's blocked connections whose deadline passed;
    /// returns the milliseconds until the next deadline, if any.
    fn expire_blocked(&mut self) -> Option<u64> {
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
            if !blocking::claim(&t.claim) {
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
            blocking::set_blocked(&mut c.client, false);
            let ops = self.core.server.ops;
            let _ = exec::record(&mut self.core.stats, ops, id, Instant::now(), false);
            self.conns.mark_dirty(slot);
            self.conns.resume.push(slot);
        }
        next
    }

    fn cron(&mut self) {
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
        self.next_cron = Instant::now() + period;
        // Redis's slow cycle: at most 25 % of the cron period.
        let budget_us = 250_000 / u64::from(hz);
        self.core.shard.tick();
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
        // A replica's shards keep keys past their deadline (see
        // `engine::Expiry`); the role may have changed since the last tick.
        let replica = self.core.server.repl.replica_fast();
        if replica != (self.core.shard.expiry != engine::Expiry::Delete) {
            self.core.shard.expiry = if replica {
                engine::Expiry::Keep
            } else {
                engine::Expiry::Delete
            };
        }
        self.core.shard.read_only_replica = replica && self.core.cfg.replica_read_only;
        self.core.shard.active_expire_cycle(budget_us);
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
        // Freed memory back to the system, and idle connections' buffers
        // shrunk (Redis's clientsCronResizeQueryBuffer/OutputBuffer).
        let now_ms = self.core.shard.now_ms;
        memory::reclaim_cron(now_ms, self.core.server.nshards);
        let now_s = now_ms / 1000;
        self.conns.peaks.sample(now_s, 0, 0);
        let mut over = Vec::new();
        for (slot, c) in self.conns.slots.iter_mut().enumerate() {
            let Some(c) = c.as_mut() else { continue };
            memory::resize_buffers(c, now_ms);
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
        for slot in over {
            self.close_conn(slot);
        }
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
    fn sample_rates(&mut self) {
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

/// Overlaps the key-lookup cache misses of a whole batch: two passes of
/// prefetches (bucket slots, then first nodes) before any command runs.
fn prefetch_batch(shard: &Shard, b: &Batch) {
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

/// What accepting a connection touches: the table, the poll set and a few
/// settings, apart from the rest of the worker (a busy script's desk
/// accepts while `core` is lent to the handler, see `busy`).
struct Door<'a> {
    conns: &'a mut Conns,
    poll: &'a Poll,
    server: &'a ServerShared,
    id: usize,
    maxclients: usize,
    protected_mode: bool,
    tcp_keepalive_s: u64,
}

impl<'a> Door<'a> {
    fn of(core: &'a Core, conns: &'a mut Conns, poll: &'a Poll) -> Self {
        Door {
            conns,
            poll,
            server: &core.server,
            id: core.id,
            maxclients: core.cfg.maxclients,
            protected_mode: core.cfg.protected_mode,
            tcp_keepalive_s: core.cfg.tcp_keepalive_s,
        }
    }

    fn accept_tcp(&mut self, listener: &TcpListener, tls: bool) {
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warning(format_args!("Accepting client connection: {e}"));
                    return;
                }
            };
            let _ = stream.set_nodelay(true);
            if self.tcp_keepalive_s > 0 {
                let s = socket2::SockRef::from(&stream);
                let ka = socket2::TcpKeepalive::new()
                    .with_time(Duration::from_secs(self.tcp_keepalive_s));
                let _ = s.set_tcp_keepalive(&ka);
            }
            let local = stream
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let is_local = peer.ip().is_loopback();
            let stream = if tls {
                // The context of the moment (CONFIG SET may replace it);
                // connections keep the one they started with.
                let made = super::tls::current()
                    .ok_or_else(|| io::Error::other("no TLS context"))
                    .and_then(|ctx| super::tls::TlsStream::new(stream, ctx));
                match made {
                    Ok(t) => Stream::Tls(Box::new(t)),
                    Err(e) => {
                        log::warning(format_args!("Accepting TLS client connection: {e}"));
                        continue;
                    }
                }
            } else {
                Stream::Tcp(stream)
            };
            self.add_conn(stream, peer.to_string(), local, false, is_local);
        }
    }

    fn add_conn(
        &mut self,
        mut stream: Stream,
        addr: String,
        laddr: String,
        unix: bool,
        local: bool,
    ) {
        let server = self.server;
        server.total_connections.fetch_add(1, Ordering::Relaxed);
        let connected = server.connected_clients.fetch_add(1, Ordering::AcqRel);
        if connected >= self.maxclients {
            let _ = stream.write(b"-ERR max number of clients reached\r\n");
            server.connected_clients.fetch_sub(1, Ordering::AcqRel);
            server.rejected_connections.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Redis's protected mode: no password on the default user.
        if self.protected_mode && !local && server.acl.default_user().rules().nopass() {
            server.rejected_connections.fetch_add(1, Ordering::Relaxed);
            if let Stream::Tls(t) = &mut stream {
                // Redis refuses once the handshake is done, over TLS.
                t.refuse_after_handshake(DENIED);
            } else {
                let _ = stream.write(DENIED);
                server.connected_clients.fetch_sub(1, Ordering::AcqRel);
                return;
            }
        }
        if self.insert_conn(stream, addr, laddr, unix).is_none() {
            server.connected_clients.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Registers a connection admitted by the caller; its slot.
    fn insert_conn(
        &mut self,
        mut stream: Stream,
        addr: String,
        laddr: String,
        unix: bool,
    ) -> Option<usize> {
        let server = self.server;
        let slot = match self.conns.free.pop() {
            Some(s) => s,
            None => {
                self.conns.slots.push(None);
                self.conns.gens.push(0);
                self.conns.slots.len() - 1
            }
        };
        if let Err(e) = self.poll.registry().register(
            stream.source(),
            Token(slot),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            log::warning(format_args!(
                "Error registering fd event for the new client: {e}"
            ));
            self.conns.free.push(slot);
            return None;
        }
        let fd = stream.raw_fd();
        let now = engine::now_ms();
        let client = ClientState {
            id: server.next_client_id.fetch_add(1, Ordering::Relaxed),
            authenticated: server.acl.default_open(),
            acl: commands::acl::ClientAcl::of(server.acl.default_user()),
            addr,
            laddr,
            unix,
            fd,
            created_ms: now,
            last_interaction_ms: now,
            last_cmd: "NULL".into(),
            home: commands::ctx::Home {
                thread: self.id as u16,
                slot: slot as u32,
                gen: self.conns.gens[slot],
            },
            ..Default::default()
        };
        log::verbose(format_args!("Accepted {}", client.addr));
        server.tracking.connected(client.id, client.home);
        self.conns.slots[slot] = Some(Box::new(Conn::new(stream, self.conns.gens[slot], client)));
        Some(slot)
    }
}

/// Whether the read buffer holds a request that can be parsed now.
fn has_work(c: &Conn) -> bool {
    let q = c.qbuf_len();
    q > 0 && q >= c.need
}

/// Whether a connection must not execute more requests now.
fn paused(c: &Conn) -> bool {
    c.client.shutdown_wait
        || c.client.repl_wait.is_some()
        || c.coord.is_some()
        || c.lock_wait
        || c.script_wait
        || !c.block.is_none()
        || c.unwritten() + c.staged_bytes() > OUT_SOFT_LIMIT
        || c.pending.len() >= MAX_PENDING
}

/// Executes every complete request in the connection's read buffer, until
/// it runs out, pauses, or closes.
fn process(core: &mut Core, c: &mut Conn, slot: usize) {
    process_requests(core, c, slot);
    mark_direct(core, c, slot);
    core.send_batches();
}

/// The pipeline-1 hop: when a connection's only outstanding request is one
/// command for another shard and nothing else waits to be written, that
/// shard writes the reply to the socket itself and sends the batch home
/// without waking this thread (`Mailbox::send_lazy`). Without it, a hop
/// costs the home thread a second wake-up (doorbell, `epoll_wait`, context
/// switch) just to write one reply.
///
/// Safe because, until the batch is back, this thread writes nothing to
/// the socket (every later reply queues behind the hop's slot, and `out`
/// is empty now) and keeps the socket open (`Conns::zombies`).
fn mark_direct(core: &mut Core, c: &mut Conn, slot: usize) {
    // A stream that declines (TLS) gets its replies home the usual way.
    let Some(fd) = c.stream.direct_fd() else {
        return;
    };
    if core.batch_conn.is_none()
        || c.direct
        || c.closing
        || c.pending.len() != 1
        || !c.out.is_empty()
        || c.pending.front().is_some_and(|s| s.suppress)
    {
        return;
    }
    let [to] = core.batch_to[..] else { return };
    let Some(b) = core.batches[to].as_mut() else {
        return;
    };
    if b.cmds.len() != 1 || b.cmds[0].claim.is_some() {
        return;
    }
    // A script holds back the requests behind it (`Conn::script_wait`)
    // until its batch is back: with more of them read, the batch must
    // come back with a wake-up.
    if c.script_wait && c.qbuf_len() != 0 {
        return;
    }
    b.direct_fd = fd;
    c.direct = true;
    if !c.direct_listed {
        c.direct_listed = true;
        core.direct_conns.push((slot, c.gen));
    }
}

/// Writes a direct reply to a home thread's socket; returns the bytes
/// written (what is left goes home with the batch, as do all the bytes
/// after an error, where the home thread finds the socket broken).
fn write_direct(fd: i32, buf: &[u8]) -> usize {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        // SAFETY: `fd` is the home connection's socket, kept open until
        // this batch is back (`Conns::zombies`); `rest` is valid for reads
        // of its length. MSG_NOSIGNAL: a closed peer is an error, not a
        // SIGPIPE.
        let r = unsafe {
            libc::send(
                fd,
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if r > 0 {
            done += r as usize;
        } else if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        } else {
            break;
        }
    }
    done
}

/// The restricted user of a script command, for its `redis.call` checks.
fn script_caller(
    server: &Arc<ServerShared>,
    client: &mut commands::ClientState,
    r: commands::Resolved,
) -> Option<Arc<commands::acl::Caller>> {
    if r.spec.has(commands::table::flags::SCRIPT) {
        commands::acl::caller(server, client)
    } else {
        None
    }
}

fn process_requests(core: &mut Core, c: &mut Conn, slot: usize) {
    loop {
        if c.client.close_after_reply {
            c.closing = true;
        }
        if c.closing || paused(c) {
            return;
        }
        let avail = c.qbuf_len();
        if avail == 0 || avail < c.need {
            return;
        }
        let limits = Limits {
            max_bulk_len: core.cfg.max_bulk_len,
            auth_required: !c.client.authenticated,
        };
        let (rpos, end) = (c.rpos, c.rbuf_end());
        match parse_request(&mut c.rbuf[rpos..end], &limits, &mut c.args) {
            Parsed::Complete(n) => {
                c.need = 0;
                if let Some(m) = c.master.as_ref() {
                    // REPLICAOF moved on: nothing more of this master runs.
                    if m.gen != core.server.repl.gen.load(Ordering::Acquire) {
                        c.closing = true;
                        return;
                    }
                    if master_request(c, n) {
                        continue;
                    }
                }
                if !c.args.is_empty() {
                    let args = std::mem::take(&mut c.args);
                    let ran = execute(core, c, slot, &args);
                    c.args = args;
                    if !ran {
                        // Held back by a lock: parsed again after a release.
                        return;
                    }
                    if c.client
                        .repl_wait
                        .as_ref()
                        .is_some_and(|w| w.target.is_none())
                    {
                        repl_wait::start(core, c, slot);
                    }
                    if c.client.close_after_reply {
                        c.closing = true;
                    }
                }
                c.rpos += n;
                if let Some(m) = c.master.as_mut() {
                    m.offset += n as u64;
                }
                if c.check_obuf(&core.cfg.obuf, core.shard.now_ms) {
                    return;
                }
            }
            Parsed::Incomplete(need) => {
                c.need = need;
                return;
            }
            Parsed::Error(e) => {
                log::verbose(format_args!(
                    "Protocol error ({}) from client: id={} addr={}",
                    e.message(),
                    c.client.id,
                    c.client.addr
                ));
                // Under CLIENT REPLY OFF / SKIP the error is not sent
                // either (Redis); the connection closes all the same.
                if c.client.reply_mode == ReplyMode::On {
                    let mut r = Reply::new(c.client.resp3);
                    r.error(&e.message());
                    if c.inline_reply_target() {
                        c.out.raw(r.as_bytes());
                    } else {
                        c.push_ready(r.as_bytes());
                    }
                }
                c.closing = true;
                c.rpos = c.rbuf_end();
                return;
            }
        }
    }
}

/// A request from a replica's master that the master connection handles
/// itself: `REPLCONF GETACK` gets `REPLCONF ACK <offset>` (the offset of
/// what came before it), the one reply a master reads. True if handled
/// (consumed and counted).
fn master_request(c: &mut Conn, n: usize) -> bool {
    let rpos = c.rpos;
    if !crate::server::repl::replica::is_getack(&c.rbuf[rpos..], &c.args) {
        return false;
    }
    let Some(m) = c.master.as_mut() else {
        return false;
    };
    let ack = crate::server::repl::replica::ack_bytes(m.offset);
    m.offset += n as u64;
    c.rpos += n;
    if c.inline_reply_target() {
        c.out.raw(&ack);
    } else {
        c.push_ready(&ack);
    }
    true
}

/// Runs one request; false if a transaction's lock holds it back (then
/// nothing happened and the connection waits for a release).
fn execute(core: &mut Core, c: &mut Conn, slot: usize, ranges: &[std::ops::Range<usize>]) -> bool {
    let base = c.rpos;
    let end = c.rbuf_end();
    let args = Args::new(&c.rbuf[base..end], ranges);
    // CLIENT REPLY SKIP applies to the next command only: arm it now, so a
    // SKIP issued by this very command re-arms it for the following one.
    if c.client.reply_mode == ReplyMode::Skip {
        c.client.reply_mode = ReplyMode::Skipping;
    }
    let mode_before = c.client.reply_mode;
    let direct = c.inline_reply_target();
    let mut blocked_on = None;
    // Whether the command wrote AOF records (its reply then waits for them
    // under appendfsync always).
    let mut recorded = false;
    core.side.clear();
    core.side.set_resp3(c.client.resp3);
    tracking::track_check(core);
    if c.client.tracking.is_some() {
        tracking::remember(core, c, args);
    }
    let (step, mark) = {
        let out = if direct { &mut c.out } else { &mut core.side };
        let mark = out.len();
        let mut ctx = ConnCtx {
            client: &mut c.client,
            out,
            server: &core.server,
            home: core.id,
            key_shards: &[],
        };
        let step = dispatch(args, &mut ctx, &mut core.stats, &mut core.scratch);
        match step {
            Step::Shard {
                shard, resolved, ..
            } if shard == core.id
                && core.locks.any_held()
                && lock_blocked(&core.locks, resolved, args, c.client.db, &mut core.scratch) =>
            {
                (Step::Blocked, mark)
            }
            Step::Shard {
                shard,
                resolved,
                handler,
            } if shard == core.id => {
                let call = ShardCall {
                    db: c.client.db,
                    no_touch: c.client.no_touch,
                    databases: core.cfg.databases,
                    max_bulk_len: core.cfg.max_bulk_len,
                    may_block: true,
                    in_tx: false,
                    nshards: core.server.nshards,
                    caller: script_caller(&core.server, &mut c.client, resolved),
                    tracker: commands::tracking::script_tracker(&c.client, resolved),
                    client: c.client.id,
                    ops: core.server.ops,
                    master: c.client.master,
                };
                let prop0 = core.shard.outbox.len();
                let mut found = None;
                if let Some(on) = run_shard(
                    resolved,
                    handler,
                    args,
                    &mut core.shard,
                    call.clone(),
                    out,
                    &mut core.stats,
                ) {
                    if on.widen {
                        found = Some(on.keys);
                    } else {
                        blocked_on = Some((on, resolved, handler, call));
                    }
                }
                recorded = core.shard.outbox.len() != prop0;
                tracking::tag_touched(core, Some(c.client.home));
                match found {
                    // A script that touched keys of other shards: run it
                    // again over more keys (`commands::script::wide`).
                    Some(keys) => {
                        // It replied nothing, and building writes nothing.
                        let mut none = Reply::new(false);
                        let mut ctx = ConnCtx {
                            client: &mut c.client,
                            out: &mut none,
                            server: &core.server,
                            home: core.id,
                            key_shards: &[],
                        };
                        let coord = commands::script::wide::coordinator(
                            resolved.spec,
                            handler,
                            &mut ctx,
                            args,
                            keys,
                        );
                        (Step::Coord { resolved, coord }, mark)
                    }
                    None => (Step::Done, mark),
                }
            }
            step => (step, mark),
        }
    };
    if matches!(step, Step::Blocked | Step::Paused) {
        c.client.reply_mode = mode_before;
        if mode_before == ReplyMode::Skipping {
            c.client.reply_mode = ReplyMode::Skip;
        }
        c.lock_wait = true;
        if matches!(step, Step::Paused) {
            pause::hold(core, c, slot);
        } else {
            core.lock_blocked.push((slot, c.gen));
        }
        return false;
    }
    if c.client.tracking.is_some() {
        commands::tracking::after_command(&mut c.client);
    }
    let mode_after = c.client.reply_mode;
    // Pub/sub confirmations go out even under REPLY OFF/SKIP, as Redis's.
    let pushed = std::mem::take(&mut c.client.push_reply);
    let suppress = !pushed
        && (mode_before == ReplyMode::Skipping
            || (mode_before == ReplyMode::Off && mode_after == ReplyMode::Off));
    if mode_after == ReplyMode::Skipping {
        c.client.reply_mode = ReplyMode::On;
    }
    match step {
        Step::Blocked | Step::Paused => {}
        Step::Done => {
            // The arguments borrow the read buffer: copy a blocked
            // command's before the connection is touched.
            let blocked_args = blocked_on
                .as_mut()
                .map(|(on, ..)| on.args.take().unwrap_or_else(|| args.to_owned()));
            if suppress {
                if direct {
                    c.out.truncate(mark);
                } else {
                    core.side.clear();
                }
            }
            if recorded && core.aof_always {
                // Held until the records this thread appends next are
                // durable (`settle_holds` gives the target).
                if direct {
                    c.hold_tail(mark, HOLD_LOCAL);
                } else {
                    c.push_held(core.side.as_bytes(), HOLD_LOCAL);
                }
                if !c.local_listed {
                    c.local_listed = true;
                    core.local_holds.push((slot, c.gen));
                }
                core.note_held(c, slot);
            } else if !direct && !core.side.is_empty() {
                c.push_ready(core.side.as_bytes());
            }
            // One huge reply must not keep its buffer for the thread's life.
            if core.side.capacity() > 1 << 20 {
                core.side = Reply::new(false);
            }
            if let Some((on, resolved, handler, call)) = blocked_on {
                let seq = c.open_slot(suppress);
                let conn = ConnRef {
                    thread: core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                let t = park_waiter(
                    core,
                    conn,
                    seq,
                    (resolved, handler, call, c.client.resp3, false),
                    blocked_args.unwrap_or_default(),
                    Default::default(),
                    on,
                );
                c.block = BlockPhase::Blocked(t);
                blocking::set_blocked(&mut c.client, true);
                core.blocked_conns.push((slot, c.gen));
            } else if core.shard.dbs[c.client.db].has_ready() {
                serve_ready(core);
            }
        }
        Step::Shard {
            shard,
            resolved,
            handler,
        } => {
            // The slot is taken after the arguments are copied (they borrow
            // the read buffer); its number is known now.
            let seq = c.next_seq;
            let call = ShardCall {
                db: c.client.db,
                no_touch: c.client.no_touch,
                databases: core.cfg.databases,
                max_bulk_len: core.cfg.max_bulk_len,
                may_block: true,
                in_tx: false,
                nshards: core.server.nshards,
                caller: script_caller(&core.server, &mut c.client, resolved),
                tracker: commands::tracking::script_tracker(&c.client, resolved),
                client: c.client.id,
                ops: core.server.ops,
                master: c.client.master,
            };
            let conn = ConnRef {
                thread: core.id as u16,
                slot: slot as u32,
                gen: c.gen,
            };
            debug_assert!(core.batch_conn.is_none_or(|b| b == conn));
            core.batch_conn = Some(conn);
            let b = match core.batches[shard].as_mut() {
                Some(b) => b,
                None => {
                    let b = core.take_batch();
                    core.batch_to.push(shard);
                    core.batches[shard].insert(b)
                }
            };
            let claim = resolved
                .spec
                .has(commands::table::flags::BLOCKING)
                .then(blocking::Claim::default);
            // A script may come back to run again here over more keys
            // (`Batch::widen`): no later command of this connection runs
            // before the batch is back.
            if resolved.spec.has(commands::table::flags::SCRIPT) {
                c.script_wait = true;
            }
            if let Some(cl) = &claim {
                // Paused until the batch tells whether it blocked.
                c.block = BlockPhase::Awaiting(cl.clone());
            }
            b.cmds.push(BatchCmd {
                seq,
                resolved,
                handler,
                call,
                resp3: c.client.resp3,
                nargs: args.len() as u32,
                claim,
            });
            b.args.extend(args);
            let opened = c.open_slot(suppress);
            debug_assert_eq!(opened, seq);
        }
        Step::Coord { resolved, coord } => {
            // Requests already batched for other shards go first: the
            // coordinator's jobs must see their effects.
            core.send_batches();
            let slow_args = core.server.ops.slowlog.enabled().then(|| args.to_owned());
            let seq = c.open_slot(suppress);
            c.coord = Some(ActiveCoord {
                resolved,
                coord,
                results: Vec::new(),
                remaining: 0,
                seq,
                started: Instant::now(),
                suppress,
                out: Reply::new(c.client.resp3),
                aof_hold: 0,
                slow_args,
            });
            advance(core, c, slot);
        }
    }
    if c.out.resp3() != c.client.resp3 {
        c.out.set_resp3(c.client.resp3);
    }
    true
}

/// Steps a connection's coordinator until it issues jobs to wait for, or
/// finishes (its reply then fills the coordinator's slot).
fn advance(core: &mut Core, c: &mut Conn, slot: usize) {
    let Some(ac) = c.coord.as_mut() else { return };
    let results: Vec<JobOut> = ac.results.drain(..).flatten().collect();
    let mut plan = Plan::default();
    let res = ac
        .coord
        .step(results, &mut plan, &mut ac.out, &mut c.client);
    let failed = res.is_err();
    let hold = log_coord_step(core, &mut *ac.coord, failed || plan.is_empty());
    ac.aof_hold = ac.aof_hold.max(hold);
    if let Err(e) = res {
        exec::reply_error(&mut ac.out, &mut core.stats, &e);
    }
    if failed || plan.is_empty() {
        let Some(mut ac) = c.coord.take() else { return };
        if !failed {
            if let Some(p) = ac.coord.parked() {
                park_across(core, c, slot, ac.resolved, ac.seq, p);
                return;
            }
        }
        if ac.out.as_bytes().is_empty() {
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
        if let Some(us) = exec::record(&mut core.stats, ops, ac.resolved.id, ac.started, failed) {
            if let Some(a) = &ac.slow_args {
                let label = commands::ops::slowlog::label_of(&c.client);
                exec::slowlog(ops, ac.resolved, a.args(), us, c.client.id, Some(label));
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
        return;
    }
    let conn = ConnRef {
        thread: core.id as u16,
        slot: slot as u32,
        gen: c.gen,
    };
    ac.remaining = plan.jobs.len();
    // Reuses the vector the outputs were drained from.
    ac.results.resize_with(plan.jobs.len(), || None);
    send_plan(core, conn, plan);
}

/// After a coordinator's step: appends its own records (home thread) and,
/// at its end (`done`), completes its transaction's slot. Returns the
/// durability target they need (0: none).
fn log_coord_step(core: &Core, coord: &mut dyn commands::coord::Coordinator, done: bool) -> u64 {
    // Taken even without an AOF handle (nobody reads them then).
    let records = coord.take_records();
    let Some(a) = &core.aof else { return 0 };
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
fn send_plan(core: &mut Core, conn: ConnRef, plan: Plan) {
    for (idx, (shard, work)) in plan.jobs.into_iter().enumerate() {
        let msg = Msg::Job {
            conn,
            idx: idx as u32,
            work,
        };
        if shard == core.id {
            core.local.push_back(msg);
        } else {
            core.mailbox.send(shard, msg);
        }
    }
}

/// Queues a command that blocked on this shard (see `blocking`); returns
/// what its home thread keeps.
fn park_waiter(
    core: &mut Core,
    conn: ConnRef,
    seq: u64,
    (resolved, handler, call, resp3, wake_home): (
        commands::Resolved,
        commands::table::ShardHandler,
        ShardCall,
        bool,
        bool,
    ),
    args: resp::OwnedArgs,
    claim: blocking::Claim,
    on: commands::BlockOn,
) -> BlockTicket {
    let ticket = BlockTicket {
        seq,
        claim: claim.clone(),
        deadline_ms: on.deadline_ms,
        cmd_id: resolved.id,
        redo: None,
    };
    let db = call.db;
    let keys = core.waiters.add(BlockedCmd {
        conn,
        seq,
        claim,
        resolved,
        handler,
        args,
        call,
        resp3,
        keys: on.keys,
        wants: blocking::wanted_type(resolved),
        wake_home,
    });
    for k in keys {
        core.shard.dbs[db].add_blocking(&k);
    }
    ticket
}

/// Blocks a connection whose multi-shard command blocked: parks it on the
/// shard of every key it waits for, all sharing one claim.
fn park_across(
    core: &mut Core,
    c: &mut Conn,
    slot: usize,
    resolved: commands::Resolved,
    seq: u64,
    p: commands::coord::Parked,
) {
    let claim = blocking::Claim::default();
    c.block = BlockPhase::Blocked(BlockTicket {
        seq,
        claim: claim.clone(),
        deadline_ms: c.keep_deadline_ms.take().unwrap_or(p.on.deadline_ms),
        cmd_id: resolved.id,
        redo: p.wake_home.then(|| p.args.clone()),
    });
    blocking::set_blocked(&mut c.client, true);
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
fn rerun(core: &mut Core, c: &mut Conn, slot: usize, seq: u64, args: &resp::OwnedArgs) {
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

/// Serves the clients blocked on keys that became ready, until no key is
/// ready (serving one may make another ready: BLMOVE into a waited key).
fn serve_ready(core: &mut Core) {
    if core.waiters.is_empty() {
        for d in core.shard.dbs.iter_mut() {
            if d.has_ready() {
                d.take_ready();
            }
        }
        return;
    }
    // Bounded: each round serves at least one client or ends.
    for _ in 0..SERVE_ROUNDS_MAX {
        let mut keys: Vec<(usize, engine::SmallBytes)> = Vec::new();
        for (i, d) in core.shard.dbs.iter_mut().enumerate() {
            if d.has_ready() {
                keys.extend(d.take_ready().into_iter().map(|k| (i, k)));
            }
        }
        if keys.is_empty() {
            return;
        }
        for (db, key) in keys {
            serve_key(core, db, &key);
        }
    }
}

/// Rounds of [`serve_ready`] per call; what is left waits for the next.
const SERVE_ROUNDS_MAX: usize = 1024;

/// Serves `key`'s blocked clients, oldest first, while it can serve.
fn serve_key(core: &mut Core, db: usize, key: &[u8]) {
    // A transaction's lock holds the key's waiters back until a release.
    fn later(core: &mut Core, db: usize, key: &[u8]) {
        if core.waiters.later.is_empty() {
            core.waiters.later_since_ms = core.shard.now_ms;
        }
        if !core.waiters.later.iter().any(|(d, k)| *d == db && k == key) {
            core.waiters.later.push((db, key.to_vec()));
        }
    }
    // Held back already (a lock, or a waiter woken home that has not run
    // yet): the release that retries it comes.
    if core.waiters.later.iter().any(|(d, k)| *d == db && k == key) {
        return;
    }
    if core.locks.any_held() && core.locks.blocks(db, std::iter::once(key), true) {
        return later(core, db, key);
    }
    let mut dropped = Vec::new();
    while let Some(w) = core.waiters.front(db, key, &mut dropped) {
        let now = core.shard.now_ms;
        let d = &core.shard.dbs[db];
        // A stream reader runs whatever the key holds now: XREADGROUP
        // fails when its key or group went away, XREAD blocks again.
        let servable = w.wants == "stream"
            || d.get(key)
                .is_some_and(|e| !d.is_expired(key, e, now) && e.value().type_name() == w.wants);
        if !servable {
            break;
        }
        if core.locks.any_held() {
            // Its other keys (BLMOVE's destination) may be held too.
            let mut scratch = std::mem::take(&mut core.scratch);
            let args = w.args.args();
            let held = lock_blocked(&core.locks, w.resolved, args, w.call.db, &mut scratch);
            core.scratch = scratch;
            if held {
                later(core, db, key);
                break;
            }
        }
        if !blocking::claim(&w.claim) {
            // Timed out or gone meanwhile: `front` drops it next.
            continue;
        }
        if w.wake_home {
            // Its home runs the whole command again (it writes keys of
            // other shards); the claim keeps others from serving it.
            for (d, k) in core.waiters.remove(&w) {
                core.shard.dbs[d].remove_blocking(&k);
            }
            let msg = Msg::Wake {
                conn: w.conn,
                seq: w.seq,
            };
            if w.conn.thread as usize == core.id {
                core.local.push_back(msg);
            } else {
                core.mailbox.send(w.conn.thread as usize, msg);
            }
            // Redis serves the oldest waiter first: the ones behind wait
            // until its home has run it again (its locks on this shard
            // hold them back, and their release retries the key), or the
            // cron gives up on it (its connection went away meanwhile).
            later(core, db, key);
            break;
        }
        let mut out = Reply::new(w.resp3);
        let recorded = core.shard.outbox.len();
        let again = exec::run_shard_ready(
            w.resolved,
            w.handler,
            w.args.args(),
            &mut core.shard,
            w.call.clone(),
            &mut out,
            &mut core.stats,
            Some(key),
        );
        if again.is_some() {
            w.claim.store(false, Ordering::Release);
            break;
        }
        for (d, k) in core.waiters.remove(&w) {
            core.shard.dbs[d].remove_blocking(&k);
        }
        let recorded = core.shard.outbox.len() != recorded;
        core.aof_flush();
        let msg = Msg::Unblocked {
            conn: w.conn,
            seq: w.seq,
            reply: out.into_bytes(),
            aof: if recorded { core.aof_last } else { 0 },
        };
        if w.conn.thread as usize == core.id {
            core.local.push_back(msg);
        } else {
            core.mailbox.send(w.conn.thread as usize, msg);
        }
    }
    for (d, k) in dropped {
        core.shard.dbs[d].remove_blocking(&k);
    }
}

/// After a release: serves the ready keys the lock held back.
fn retry_later(core: &mut Core) {
    if core.waiters.later.is_empty() {
        return;
    }
    for (db, key) in std::mem::take(&mut core.waiters.later) {
        serve_key(core, db, &key);
    }
    serve_ready(core);
}

/// Whether a transaction's lock holds back a plain command.
fn lock_blocked(
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

const DENIED: &[u8] = b"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

#[allow(dead_code)]
fn _assert_addr(_: SocketAddr) {}

#[cfg(test)]
mod nap_tests {
    use super::*;

    fn busy(n: &mut Nap, t0: Instant, ms: u64, active: u32, coord: u32) {
        n.tick(t0 + Duration::from_millis(ms));
        n.active = active;
        n.coord = coord;
    }

    #[test]
    fn naps_only_after_a_light_iteration_among_many_active_clients() {
        let mut n = Nap::new();
        n.dur = Duration::from_micros(NAP_US);
        let t0 = n.epoch;
        n.events = 1;
        n.cmds = 1;
        // Window 0: many clients read; from window 1 on it counts.
        busy(&mut n, t0, 0, 25, 0);
        assert!(!n.wanted(), "nothing known of the previous window");
        busy(&mut n, t0, 1, 25, 0);
        assert!(n.wanted());
        // A lone client (or a few) never causes a nap.
        busy(&mut n, t0, 2, 1, 0);
        busy(&mut n, t0, 3, 1, 0);
        assert!(!n.wanted());
        // An idle gap forgets the old window's activity.
        busy(&mut n, t0, 4, 25, 0);
        n.tick(t0 + Duration::from_millis(9));
        assert!(!n.wanted());
        // Multi-shard coordination in flight: no nap.
        busy(&mut n, t0, 10, 25, 20);
        busy(&mut n, t0, 11, 25, 20);
        assert!(!n.wanted());
        // A heavy iteration (pipelined batch) or none at all: no nap.
        busy(&mut n, t0, 12, 25, 0);
        busy(&mut n, t0, 13, 25, 0);
        assert!(n.wanted());
        n.cmds = 16;
        assert!(!n.wanted());
        n.cmds = 1;
        n.events = 0;
        assert!(!n.wanted());
        n.events = 1;
        n.dur = Duration::ZERO;
        assert!(!n.wanted(), "TESSERA_NAP_US=0 turns naps off");
    }
}
