//! The per-thread event loop: a [`Worker`] owns one shard, the
//! connections its thread accepted, and the listeners it accepts on. It has
//! two sides that meet only through the mailbox and the worker's lists:
//!
//! * the **home side**, a connection's own thread: accepting, reading,
//!   parsing, executing inline what is on this shard and sending the rest
//!   as batches or coordinator jobs, collecting what comes back, and
//!   writing replies;
//! * the **shard side**: running the batches and jobs that threads (this
//!   one included) sent to this shard, deferring what a transaction's lock
//!   holds back, and serving blocked commands whose keys became ready.
//!
//! One iteration (`sched`):
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
//!    client: `request::mark_direct`); then, with `maxmemory-clients`
//!    set, disconnect clients over it (`client_evict`);
//! 4. write every connection with new output (one `write` per connection
//!    per iteration, however many replies it holds), publish this shard's
//!    memory figure if it moved (maxmemory, see `engine::evict`), then mark
//!    this thread ready at, and ring the doorbell of, each thread that got
//!    messages;
//! 5. run the cron when due (active expiry, client timeouts, config, idle
//!    rings let go), and send what it queued at once.
//!
//! # Modules
//!
//! This file holds the worker's types (their fields are shared by the
//! submodules, which are its stages); each submodule owns one job:
//!
//! | module      | side  | owns |
//! |-------------|-------|------|
//! | `sched`     | both  | the iteration, the host's interface, message dispatch |
//! | `nap`       | -     | when a lone thread naps before epoll |
//! | `accept`    | home  | listeners, admitting connections |
//! | `conns`     | home  | the connection table, CLIENT registry, closing |
//! | `request`   | home  | read, parse, execute, batches out, direct replies |
//! | `home`      | home  | completions back from shards, coordinators |
//! | `output`    | home  | writing replies, replies held for the AOF |
//! | `shard`     | shard | batches and jobs run here, locks, deferral, AOF records |
//! | `cohost`    | both  | jobs for a worker on the same thread delivered by a call |
//! | `in_place`  | both  | a script across co-hosted shards run on them, by calls |
//! | `waiters`   | shard | blocked commands parked and served on this shard |
//! | `cron`      | both  | timed work, config refresh, deadlines, rates |
//! | `busy`      | both  | the desk a long script gets: its loop's connections and mailbox |
//! | `pause`, `repl_wait`, `replica`, `memory`, `client_evict` | home | one feature each |
//! | `pubsub`, `tracking` | both | events and invalidations: made on the shard, sent from home |
//! | `testing`, `tests` | -  | real workers in process, driven in rounds as a hub drives them |
//!
//! The seam between the sides: a shard never touches a socket. What the
//! shard side sends a client goes home in the batch or the job's output;
//! the one shortcut, a lone hop's direct reply, is a write-only right the
//! connection's stream grants the batch (`conn::DirectReply`), which a TLS
//! stream declines. (A long script's hook serves this loop's other
//! connections while the shard runs it: that is the home side's code,
//! lent to the script through `Worker::with_desk`, see `busy`.)
//!
//! One scheduler: a worker is only ever run through `sched`'s interface,
//! by its own thread (`step_solo`), by a hub (`due_in`, `park_flag` and `unpark_flag`,
//! `step_shared` for each worker it holds), or by the in-process tests,
//! which make the hub's calls in the hub's order, one round at a time.
//! A thread running several workers also lends them to each other for the
//! round (`cohost`): a coordinator's job for a co-hosted shard goes in by
//! a call to that worker's `job_arrived`, the same entry a message takes.
//!
//! # Cost with the number of threads N
//!
//! Per thread, everything here grows with this thread's own connections
//! and the work held on its shard, except `Core::batches` (one pointer per
//! shard: N per thread, N² in all, of which only the shards in `batch_to`
//! are visited) and the mailbox's rings (made on first use and let go when
//! idle, see `mailbox`). Draining visits only the threads that sent
//! something; nothing in an iteration walks all N (the cron's ring trim
//! visits every peer, once per tick).
//!
//! A multi-shard command over `k` shards costs about `2k` works (the lock
//! round, then run and release: `commands::tx`) whatever N is. Each is a
//! message to a shard on another thread, whose outputs come back in one
//! message per step (`mailbox::Gather`; a step with one remote work gets
//! its reply alone), and a call to a shard on the same hub (`cohost`); a
//! command whose shards are all on its hub and free of locks takes none
//! (`home::run_unlocked`): `k` calls. Unconsolidated, an MSET of 10 keys
//! over 8 threads (about 5.9 shards, 5.2 of them remote) sends about 12
//! messages (24 before the gathers), and costs 1.29 times its 2-shard
//! figure in instructions under callgrind (62.2k against 48.3k; it was
//! 71.0k against 49.8k, 1.43, before the gathers and the trims of the
//! lock-only and release works).
//! With every shard on one hub, an MSET of 10 keys (instructions, under
//! callgrind) went from 50.3k to 42.3k at 2 shards and from 84.6k to
//! 54.6k at 32 (38 messages per MSET to none); what grows with `k` is
//! each shard's job and its bookkeeping (lock set, coordinator layout).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::coord::{JobFn, JobOut, Work};
use commands::tx::{LockTable, TxId};
use commands::{ClientState, ServerShared, ThreadStats};
use engine::Shard;
use mio::net::{TcpListener, UnixListener};
use mio::{Poll, Token};
pub use reach::Calls;
use resp::Reply;

use super::blocking::Waiters;
use super::conn::{ActiveCoord, Conn, RecentPeaks, Stream};
use super::mailbox::{Batch, ConnRef, Gather, Mailbox, Msg};

mod accept;
mod budget;
mod busy;
mod client_evict;
mod clock;
mod cohost;
mod conns;
mod cron;
mod demote;
mod evict;
mod home;
mod hub_set;
mod in_place;
mod memory;
mod nap;
mod output;
mod pause;
mod pubsub;
mod reach;
mod repl_wait;
mod replica;
mod request;
mod sched;
mod shard;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
mod tracking;
mod waiters;

pub use busy::lending_own;
pub use clock::{wall_us, EpochWall, TURN_BUDGET};
pub use cohost::{lending, Lender, Pinned};
pub use hub_set::{tag as hub_tag, untag as hub_untag};
pub use sched::LoopProbe;

const WAKER: Token = Token(usize::MAX);
const UNIX: Token = Token(usize::MAX - 1);
const TCP_BASE: usize = usize::MAX - 64;
/// Tokens of the TLS listeners (`tls-port`), below the plain ones.
const TLS_BASE: usize = usize::MAX - 128;

/// Settings read from the shared config, refreshed when it changes.
#[derive(Clone, Debug)]
struct Cached {
    max_bulk_len: u64,
    qbuf_limit: usize,
    timeout_s: u64,
    hz: u32,
    maxclients: usize,
    databases: usize,
    tcp_keepalive_s: u64,
    loglevel: config::LogLevel,
    obuf: [config::ObufLimit; 3],
    shard_consolidation: bool,
    /// `tracking-table-max-keys`, for the tables of every shard together
    /// (see `tracking::limit_tracked`); 0 = no limit.
    tracking_max_keys: usize,
    replica_read_only: bool,
    /// `maxmemory-clients` in bytes (see `client_evict`); 0 = no limit.
    client_evict_limit: u64,
}

impl Cached {
    /// Whether a client running commands (normal, or pubsub for a RESP3
    /// subscriber) has an output buffer limit: its big replies are then
    /// checked on its home thread before they are written (see
    /// `shard::run_batch`'s direct replies).
    fn obuf_limited(&self) -> bool {
        [config::ObufClass::Normal, config::ObufClass::Pubsub]
            .iter()
            .any(|&c| self.obuf[c as usize].hard != 0 || self.obuf[c as usize].soft != 0)
    }

    fn read(server: &ServerShared) -> Self {
        let c = server.config.read().unwrap_or_else(|e| e.into_inner());
        Cached {
            max_bulk_len: c.proto_max_bulk_len,
            qbuf_limit: c.client_query_buffer_limit as usize,
            timeout_s: c.timeout_s,
            hz: c.hz.clamp(1, 500),
            maxclients: c.maxclients as usize,
            databases: c.databases,
            tcp_keepalive_s: c.tcp_keepalive_s,
            loglevel: c.loglevel,
            obuf: c.client_output_buffer_limit,
            shard_consolidation: c.shard_consolidation,
            tracking_max_keys: c.tracking_table_max_keys.min(usize::MAX as u64) as usize,
            replica_read_only: c.replica_read_only,
            client_evict_limit: c.client_eviction_limit(),
        }
    }
}

/// Everything of a worker except its connections (so both can be borrowed
/// at once).
///
/// Laid out in declaration order (`repr(C)`), what a visit from another
/// worker on the same hub reads first (`cohost`: the idle check of an
/// unlocked transaction, then its job's prologue and epilogue) at the
/// front, next to the shard (whose own such fields come first too): with
/// 32 shards on one hub a worker's state is cold at each visit, and every
/// cache line it reads is a miss. Measured with callgrind's cache
/// simulation (MSET of 10 keys over 32 co-hosted shards, about 8.7 shards
/// each): the fields a visit reads were spread over about a dozen lines
/// of the worker's 2.4 KB. `tests::a_visit_reads_the_front_of_a_worker`
/// keeps them at the front. What a hub's round reads of every loop it
/// holds (`Worker::due_in`: the lists that make a loop due, the
/// mailbox's inbound check) ends it, next to the `Worker` fields the
/// round reads (see `Worker`).
#[repr(C)]
struct Core {
    id: usize,
    server: Arc<ServerShared>,
    cfg_gen: u64,
    /// The append-only file, when `appendonly` is on.
    aof: Option<Arc<super::aof::Aof>>,
    /// Some client tracks keys: the databases list their changes (see
    /// `tracking`).
    track_on: bool,
    /// False only while this shard is known free for an unlocked
    /// transaction ([`Core::idle_for_unlocked`]): no lock held or asked
    /// for, nothing held back, no AOF or replica stream. Set (at once,
    /// on this line) by whatever may end that: a job by the normal path
    /// (`Worker::start_job`: locks, and the jobs that turn the outbox's
    /// records on), anything deferred or lock-blocked, the AOF toggled;
    /// cleared only by the full check finding all of it empty. So a
    /// visit from another worker on its hub reads this line, not the
    /// four or five lines of the lists themselves (with 32 shards on one
    /// hub each visit finds the worker cold: every line is a miss).
    maybe_busy: bool,
    /// Some client may wait on this shard's keys: set when one blocks
    /// (`waiters::block`), cleared by a job's epilogue that finds
    /// `waiters` empty ([`Core::may_have_waiters`]); the epilogue reads
    /// this line instead of the waiters' own.
    may_wait: bool,
    /// This thread's connections whose next request waits for a release:
    /// `(slot, gen)`.
    lock_blocked: Vec<(usize, u32)>,
    /// Remote batches waiting for a release, and jobs of their connections
    /// behind them, in arrival order.
    deferred: VecDeque<Deferred>,
    /// This shard's transaction locks (see `commands::tx`).
    locks: LockTable<Waiter>,
    /// Commands blocked on this shard's keys (see `blocking`).
    waiters: Waiters,
    shard: Shard,
    stats: ThreadStats,
    cfg: Cached,
    scratch: commands::exec::KeyScratch,
    /// What a busy script's desk refused from the mailbox (see `busy`),
    /// added to `stats` when the script ends.
    refused: busy::Tally,
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
    /// `retry_deferred` is running / was asked for another pass meanwhile.
    retrying: bool,
    retry_again: bool,
    /// This thread's connections whose next request waits for other shards
    /// to evict (`memory::evict_elsewhere`), and the answers still due.
    evict_blocked: Vec<(usize, u32)>,
    evict_due: usize,
    /// When this thread last started a round while no shard reported
    /// evictable keys (`evict::needed`).
    evict_blind_ms: u64,
    pause_gen: u64,
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
    /// buffer ([`HOLD_LOCAL`](super::conn::HOLD_LOCAL)): `(slot, gen)`.
    local_holds: Vec<(usize, u32)>,
    /// Connections with a direct hop in flight: `(slot, gen)`.
    direct_conns: Vec<(usize, u32)>,
    /// The writer whose targets the held replies wait for (the writer
    /// changes with `CONFIG SET appendonly`; targets of another are
    /// meaningless, and a stopped writer has flushed everything).
    held_aof: Option<usize>,
    /// Changed keys and the connection that changed them, this iteration.
    /// Keys changed this iteration: who changed them (NOLOOP) and the
    /// change's sequence number (see `engine::Tracked::take_changed`).
    touched: Vec<(engine::SmallBytes, Option<commands::ctx::Home>, u64)>,
    /// A coordinator the server runs for itself (a save the `save` rules
    /// started), with no connection: its jobs report to [`SYS_SLOT`].
    sys: Option<SysCoord>,
    /// The job a co-hosted worker is delivering by a call (see `cohost`),
    /// and its output once it ran, for that caller.
    lent_job: Option<(ConnRef, u32)>,
    lent_out: Option<(JobOut, u64)>,
    /// Scratch: the shards of a transaction run without locks (see
    /// `home::run_unlocked`).
    unlocked_shards: Vec<usize>,
    /// The co-hosted workers pinned for the transaction running without
    /// locks, by shard (empty otherwise; see `home::run_unlocked`).
    unlocked: Vec<(usize, cohost::Pinned)>,
    /// The keys of the request whose coordinator starts, for a prefetch
    /// across shards if it runs without locks (`home::prefetch_plan`):
    /// each key's shard and its bytes' range in `key_buf`; `key_pos`:
    /// scratch.
    key_pos: Vec<usize>,
    key_pf: Vec<home::KeyPf>,
    key_buf: Vec<u8>,
    /// Scratch: a coordinator step's works bound for other threads
    /// (`home::send_remote`).
    remote_works: Vec<(usize, u32, Work)>,
    /// Gathers this thread made (`mailbox::Gather`), oldest first: one
    /// is reused once no shard holds it; at most [`GATHERS_KEEP`] kept.
    /// Bounded by the coordinator steps in flight from here.
    gathers: VecDeque<Arc<Gather>>,
    /// Scripts across shards this worker ran in place (`in_place`);
    /// read by the in-process tests.
    #[cfg_attr(not(test), allow(dead_code))]
    scripts_in_place: u64,
    /// First runs of scripts this worker saw abandoned for an undeclared
    /// key of another shard (`commands::script::wide`), to run again
    /// wider; read by the in-process tests.
    #[cfg_attr(not(test), allow(dead_code))]
    scripts_strayed: u64,
    /// Connections with held replies: `(slot, gen)`.
    held: Vec<(usize, u32)>,
    /// Jobs this thread's coordinators addressed to its own shard.
    local: VecDeque<Msg>,
    /// Messages a busy script's desk took from the mailbox and could not
    /// handle then (see `busy`): handled before anything still in the
    /// mailbox, in arrival order.
    kept: VecDeque<Msg>,
    /// This thread's connections blocked with a deadline: `(slot, gen)`.
    blocked_conns: Vec<(usize, u32)>,
    /// The server's `masters_set` this loop last answered its blocked
    /// clients for (see `demote`).
    masters_seen: u64,
    /// This thread's connections whose next request CLIENT PAUSE holds:
    /// `(slot, gen)`, and the pause generation they were held under (see
    /// `pause`).
    pause_held: Vec<(usize, u32)>,
    /// This thread's connections blocked in WAIT: `(slot, gen)`.
    repl_waits: Vec<(usize, u32)>,
    mailbox: Mailbox,
}

/// Gathers a thread keeps to reuse (each about 100 bytes and its output
/// vector's room).
const GATHERS_KEEP: usize = 64;

/// The connection slot that stands for the server itself.
const SYS_SLOT: u32 = u32::MAX;

/// The connection slot of the releases a busy shard keeps for after its
/// script once their coordinators were answered (`busy::released_now`),
/// whose outputs go nowhere.
const DESK_SLOT: u32 = u32::MAX - 1;

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
    /// Where its output goes if not alone home (see `mailbox::Gather`).
    gather: Option<Arc<Gather>>,
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
        gather: Option<Arc<Gather>>,
    },
}

/// A worker's connections. Laid out in declaration order (`repr(C)`):
/// `resume`, which a hub's round reads of every loop, first (see
/// `Worker`).
#[repr(C)]
struct Conns {
    /// The server's (its count of blocked clients: CLIENT UNBLOCK here).
    ops: &'static commands::ops::Ops,
    /// Connections to execute again (a coordinator finished, output
    /// drained, or a read was cut short).
    resume: Vec<usize>,
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
    /// While a hub runs this worker with others: its set, where the
    /// connections are registered (see `hub_set`).
    hub: Option<hub_set::HubSet>,
}

/// A coordinator whose connection went away while it could not be
/// aborted.
struct Orphan {
    conn: ConnRef,
    ac: ActiveCoord,
    client: ClientState,
}

/// Laid out in declaration order (`repr(C)`): what a hub reads of each
/// loop it holds every round (`Worker::due_in`: its timers, the lists
/// that make it due, its mailbox's inbound check) is the end of `Core`,
/// these fields right after it, and the first of `Conns`, a few cache
/// lines together, not one line each (see `Core`).
#[repr(C)]
pub struct Worker {
    core: Core,
    /// Raised while a script holding every shard waits for a call on this
    /// shard (`reach`); `None` where no runtime reach is set (in-process
    /// tests).
    reach_posted: Option<&'static std::sync::atomic::AtomicBool>,
    next_cron: Instant,
    /// Messages still spilled after the last iteration's flush.
    spilled: bool,
    /// When the running snapshot wants its next step.
    save_wait: Option<Duration>,
    conns: Conns,
    poll: Poll,
    tcp: Vec<TcpListener>,
    /// Listeners on `tls-port`: their connections speak TLS.
    tls: Vec<TcpListener>,
    unix: Option<UnixListener>,
    unix_rr: usize,
    /// This thread's counters as last added to the shared samples.
    reported: (u64, u64, u64),
    /// Thread 0: the shared totals at the previous rate sample.
    rate_base: Option<(Instant, u64, u64, u64)>,
    nap: nap::Nap,
    /// The wall clock's reading of the last cron, from which an iteration
    /// on the loop's own thread derives its time (see `clock`).
    wall: clock::WallAnchor,
    /// What the desk lent to long scripts keeps (see `busy`).
    desk: busy::DeskState,
    /// Times a hub's round polled this worker's own epoll set (a set
    /// ready in the hub's wait: its doorbell or a listener); read by the
    /// tests of `server::host`.
    own_polls: u64,
    /// Turns of a thread running several workers (`step_shared`), read
    /// by the tests of `server::host`.
    turns: u64,
    /// Times its parked flag was raised (read by the tests of
    /// `server::host`).
    parks: u64,
    /// Times a hub asked it when it next has work (`due_in`; read by
    /// the tests of `server::host`).
    asks: u64,
    /// This turn's budget, and the reads it deferred (see `budget`).
    turn: budget::Turn,
    /// The shared state, for the desk (`core` is lent to the handler).
    shared: Arc<ServerShared>,
    /// Thread 0 of a replica: the connection from its master `(slot, gen)`.
    master_conn: Option<(usize, u32)>,
    /// Held, never read: [`COLORS`] workers' state at different cache
    /// sets. Each worker is built on its own thread, whose allocations
    /// (in a malloc arena of their own, aligned to 64 MB) follow the same
    /// sequence: every worker's `Core` sat at the same address modulo
    /// 4 KiB (measured: 8 of 32 at one offset, most others at three), so
    /// the lines a hub's visits and rounds read of 32 co-hosted workers
    /// fell into a few of the L1 cache's 64 sets and evicted each other
    /// (a 12-way set holds 12 lines). This block, allocated first on the
    /// thread, `id % COLORS` lines long, shifts what the worker allocates
    /// after it (the worker itself, boxed by its host, its lists) by that
    /// many lines.
    color: Box<[u8]>,
}

/// The number of cache-line offsets workers' state is spread over (see
/// `Worker::color`): the sets of a 4 KiB way.
const COLORS: usize = 64;
const COLOR_LINE: usize = 64;
