//! What a handler sees.
//!
//! * [`ShardCtx`]: one shard's data, the selected database and the reply
//!   buffer. Shard handlers run on the thread that owns the shard, either
//!   inline on the connection's home thread or after a hop; they never see
//!   the connection (but a script's server-wide calls, which read the
//!   sender's name and buffers: [`Sender`]).
//! * [`ConnCtx`]: the connection's state and server-wide shared state, on
//!   the home thread; no shard data.
//! * [`ServerShared`]: the server's state every thread may read (config,
//!   counters, the shutdown flag), with what its shard handlers reach in
//!   its `ops`. One per server, never shared by two servers of a process
//!   (unit tests build several): what is process state by nature (the
//!   allocator's counters, the log) is kept where it is defined. Only
//!   control-path commands take its config lock; the data path reads
//!   thread-local copies.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Instant;

use config::Config;
use engine::Shard;
use resp::{Args, Reply};

use crate::table::registry;

/// Handler context on a shard's thread.
pub struct ShardCtx<'a> {
    pub shard: &'a mut Shard,
    pub db: usize,
    pub out: &'a mut Reply,
    /// CLIENT NO-TOUCH: reads do not update the access time.
    pub no_touch: bool,
    /// Number of databases (for SELECT-like index checks in MOVE/COPY).
    pub databases: usize,
    /// `proto-max-bulk-len`: the largest string APPEND/SETRANGE may build.
    pub max_bulk_len: u64,
    /// See `ShardCall::reply_cap_bytes`.
    pub reply_cap_bytes: u64,
    /// A blocking command (BLPOP, BZPOPMIN ...) may block: false inside
    /// MULTI/EXEC and wherever blocking is impossible, where it must reply
    /// at once as on timeout.
    pub may_block: bool,
    /// Runs inside a transaction whose records the append-only file wraps
    /// in MULTI/EXEC already (a script wraps its own effects otherwise).
    pub in_tx: bool,
    /// Shards in the process (see `ShardCall::nshards`).
    pub nshards: usize,
    /// See `ShardCall::client` and `ShardCall::ops`.
    pub client: u64,
    pub ops: &'static crate::ops::Ops,
    /// Set by a blocking command that found nothing to serve while
    /// `may_block`: it wrote no reply, and waits on these keys.
    pub block: Option<BlockOn>,
    /// A blocked command served because this key became ready: it pops
    /// from this key only, whatever its other keys hold now, as Redis
    /// 7.0's `serveClientsBlockedOnKey` does (7.2 runs the whole command
    /// again, so a key of another type met first would be WRONGTYPE).
    pub ready: Option<&'a [u8]>,
    /// The restricted user who ran this command, for a script's
    /// `redis.call` checks (`None`: nothing to check).
    pub caller: Option<Arc<crate::acl::Caller>>,
    /// See `ShardCall::tracker`.
    pub tracker: Option<engine::Tracker>,
    /// A script run in place across co-hosted shards: the other shards it
    /// may reach (see `script::in_place`); `None` everywhere else.
    pub in_place: Option<&'a mut dyn crate::script::in_place::Shards>,
    /// The connection that sent a script command, where it is out of its
    /// slot on this thread while the script runs ([`Sender`]); `None`
    /// everywhere else.
    pub sender: Option<Sender<'a>>,
}

/// The connection that sent a script command, lent to the run where the
/// script runs on that connection's own thread while the connection is
/// out of its slot (inline, in place, by a call to a co-hosted shard: see
/// the runtime's `request` and `in_place`): no loop's connection table
/// holds it meanwhile, so a script's SLOWLOG GET (its entries' address
/// and name) and MEMORY STATS (`clients.normal`) read it here, as the
/// same command sent by that client reads it on its loop. Where the
/// connection sits in its slot while the script runs (a hop to another
/// thread, a transaction's job), its loop's table gives it and this is
/// `None`, so it is never seen twice.
#[derive(Clone, Copy, Debug)]
pub struct Sender<'a> {
    pub client: &'a ClientState,
    /// Its buffers' bytes (`coord::ClientIo::tot_mem`) when the command
    /// started: Redis's `clients.normal` counts a client's memory as of
    /// its last update (after a write to it, or in the clients cron), not
    /// as the running command grows it.
    pub mem_bytes: usize,
}

impl ShardCtx<'_> {
    /// Emits keyspace event `event` of class `class` (a bit of
    /// `ds::events`) for `key` of the selected database (Redis's
    /// `notifyKeyspaceEvent`); one branch when that class is off.
    #[inline]
    pub fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        self.shard.notify(self.db, class, event, key);
    }

    /// Emits record `args` for the selected database: what this command's
    /// change is propagated as (the append-only file; replicas next), at
    /// the point where it changed the data (Redis's `alsoPropagate`, or
    /// the rewritten argv of `rewriteClientCommandVector`). A handler
    /// that changed nothing emits nothing. One branch when no consumer
    /// reads records (see `engine::outbox`).
    #[inline]
    pub fn propagate(&mut self, args: &[&[u8]]) {
        self.shard.outbox.record(self.db, args);
    }

    /// [`ShardCtx::propagate`] of the command as received (Redis's
    /// propagation of a command that changed data and was not rewritten).
    #[inline]
    pub fn propagate_as_is(&mut self, args: Args<'_>) {
        self.shard.outbox.record_args(self.db, args.iter());
    }

    /// [`ShardCtx::propagate`] of a record written by `f` (each argument
    /// with `engine::outbox::write_bulk`) after its `argc` header; `f`
    /// runs only when records are on, so a record assembled from many
    /// parts (SREM of popped members) costs nothing without a consumer.
    #[inline]
    pub fn propagate_with(&mut self, argc: usize, f: impl FnOnce(&mut Vec<u8>)) {
        self.shard.outbox.record_with(self.db, argc, f);
    }

    /// Says that the change just made is, as in Redis, propagated by no
    /// record (an XREADGROUP of a consumer's history counts deliveries on
    /// this server only). Emits nothing; debug builds count it as said
    /// (see `exec::check_said_so`).
    #[inline]
    pub fn propagate_none(&mut self) {
        #[cfg(debug_assertions)]
        {
            self.shard.outbox.emitted += 1;
        }
    }

    /// Called by a script's `redis.call` (which runs under the Lua
    /// client's id).
    #[inline]
    pub fn from_script(&self) -> bool {
        self.client == crate::ops::slowlog::SCRIPT_CLIENT
    }

    /// The reply length past which a reply drawn with repetition
    /// (HRANDFIELD, SRANDMEMBER, ZRANDMEMBER with a negative count) stops
    /// growing: the client is closed then, as Redis's loops stop on
    /// `CLIENT_CLOSE_ASAP` (see `reply_cap_bytes`). Unbounded for a
    /// script's call, whose reply Redis never limits and the script reads
    /// whole.
    ///
    /// The cap is the limit plus [`REPLY_CAP_SLACK`]: the connection does not
    /// count its first 16 KiB of output against the limit (Redis's static
    /// reply buffer), and a reply cut short must always be one the
    /// connection closes on, never one it sends.
    #[inline]
    pub fn reply_cap(&self) -> usize {
        match self.reply_cap_bytes {
            0 => usize::MAX,
            _ if self.from_script() => usize::MAX,
            n => usize::try_from(n).map_or(usize::MAX, |n| n.saturating_add(REPLY_CAP_SLACK)),
        }
    }

    #[inline]
    pub fn touch(&self) -> bool {
        !self.no_touch
    }

    /// Whether a blocking command may serve from `key` now (see `ready`).
    #[inline]
    pub fn may_serve(&self, key: &[u8]) -> bool {
        self.ready.is_none_or(|r| r == key)
    }

    /// Blocks the client on `keys` (see [`BlockOn`]); the handler writes
    /// no reply. Only valid when `may_block`.
    pub fn block_on(&mut self, keys: Vec<Vec<u8>>, deadline_ms: u64) {
        debug_assert!(self.may_block);
        self.block = Some(BlockOn {
            keys,
            deadline_ms,
            args: None,
            widen: false,
        });
    }

    /// [`ShardCtx::block_on`], to be run again with `args` instead of the
    /// arguments received (XREAD's `$` resolved when it blocks).
    pub fn block_on_with(&mut self, keys: Vec<Vec<u8>>, deadline_ms: u64, args: resp::OwnedArgs) {
        debug_assert!(self.may_block);
        self.block = Some(BlockOn {
            keys,
            deadline_ms,
            args: Some(args),
            widen: false,
        });
    }
}

/// What a blocked command waits for. When one of `keys` is created (a push
/// into an empty list, ZADD into a missing sorted set ...), the command is
/// run again, with the same arguments, on the shard that holds the key,
/// in the order the clients blocked; if it blocks again it keeps waiting.
#[derive(Clone, Debug)]
pub struct BlockOn {
    pub keys: Vec<Vec<u8>>,
    /// Absolute Unix milliseconds; 0 = wait forever. On timeout the
    /// runtime answers a null array, as Redis 7.0 does for every blocked
    /// pop (BLMOVE included).
    pub deadline_ms: u64,
    /// The arguments to run again with, when not those received.
    pub args: Option<resp::OwnedArgs>,
    /// Not a block: a script touched `keys`, undeclared and not on its
    /// shard, before writing anything; the runtime runs it again on the
    /// home thread under wider locks (`script::wide::coordinator`). Only
    /// set outside transactions (`ShardCtx::in_tx` false).
    pub widen: bool,
}

/// CLIENT REPLY mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReplyMode {
    #[default]
    On,
    Off,
    /// Skip the reply of the next command only.
    Skip,
    /// Set while executing the command after CLIENT REPLY SKIP.
    Skipping,
}

/// Per-connection state visible to commands.
#[derive(Clone, Debug, Default)]
pub struct ClientState {
    pub id: u64,
    pub name: Option<Vec<u8>>,
    pub lib_name: Option<Vec<u8>>,
    pub lib_ver: Option<Vec<u8>>,
    pub db: usize,
    pub resp3: bool,
    pub authenticated: bool,
    /// The user this connection runs as (and its cached rules).
    pub acl: crate::acl::ClientAcl,
    pub reply_mode: ReplyMode,
    pub no_evict: bool,
    pub no_touch: bool,
    /// `ip:port` of the peer, or the socket path's form for unix clients.
    pub addr: String,
    pub laddr: String,
    pub unix: bool,
    pub fd: i32,
    pub created_ms: u64,
    pub last_interaction_ms: u64,
    /// Full name of the last command run (`client|list`), for CLIENT LIST.
    pub last_cmd: String,
    /// Close the connection once pending replies are written (QUIT, kill).
    pub close_after_reply: bool,
    /// Channel / pattern / shard-channel subscriptions (CLIENT LIST `sub`,
    /// `psub`, `ssub`; a client with any is of type `pubsub`). Kept by the
    /// pub/sub layer.
    pub sub_count: usize,
    pub psub_count: usize,
    pub ssub_count: usize,
    /// The subscriptions themselves (`None`: none); see `pubsub`.
    pub subs: Option<Box<crate::pubsub::Subscriptions>>,
    /// Where the runtime keeps this connection (pub/sub deliveries find
    /// it by this address); set by the runtime.
    pub home: Home,
    /// The command just run replied with pub/sub confirmations, which
    /// Redis sends even under CLIENT REPLY OFF/SKIP (its CLIENT_PUSHING);
    /// the runtime reads and clears it.
    pub push_reply: bool,
    /// CLIENT TRACKING state, `None` while tracking is off.
    pub tracking: Option<Box<crate::tracking::TrackState>>,
    /// Commands queued since MULTI, `None` outside a transaction (CLIENT
    /// LIST `multi=-1`). Kept by the transaction layer.
    pub multi_count: Option<usize>,
    /// MULTI state: the queued commands, `None` outside a transaction.
    pub multi: Option<MultiState>,
    /// A command of EXEC's block is being built or run here (Redis's
    /// `server.in_exec`: BGSAVE and BGREWRITEAOF are scheduled, not
    /// started, inside a transaction).
    pub in_exec: bool,
    /// WATCH state, `None` when nothing is watched.
    pub watch: Option<WatchState>,
    /// Blocked in BLPOP & co. (CLIENT LIST flag `b`).
    pub blocked: bool,
    /// Receives every command's line (MONITOR); see `ops::monitor`.
    pub monitor: bool,
    /// Set by the runtime while it dispatches again a command dispatched
    /// before (a woken blocking command): MONITOR showed it and CLIENT
    /// PAUSE let it through already.
    pub reprocessing: bool,
    /// Sent SHUTDOWN and waits for its outcome: the connection executes
    /// nothing more; it closes when the server exits, or gets Redis's
    /// "Errors trying to SHUTDOWN" when the shutdown is refused (a failed
    /// final save). Kept by the runtime.
    pub shutdown_wait: bool,
    /// What it said as a replica (REPLCONF) and the sync it asked for
    /// (PSYNC / SYNC): the runtime then takes its socket (see
    /// `repl::cmds`).
    pub replica: Option<Box<crate::repl::ReplicaHello>>,
    /// A WAIT the runtime blocks (see `repl::cmds`).
    pub repl_wait: Option<Box<crate::repl::WaitRequest>>,
    /// The link from this replica's master (Redis's `CLIENT_MASTER`): its
    /// commands bypass READONLY, ACL and maxmemory, and it gets no
    /// replies. Set by the runtime.
    pub master: bool,
}

/// A connection's address in the runtime: its home thread, its slot
/// there and the slot's generation (a reused slot has another).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Home {
    pub thread: u16,
    pub slot: u32,
    pub gen: u32,
}

/// Commands queued between MULTI and EXEC.
#[derive(Clone, Debug, Default)]
pub struct MultiState {
    /// Each command's arguments, as received.
    pub queued: Vec<Vec<Vec<u8>>>,
    /// A command was rejected while queueing: EXEC fails with EXECABORT.
    pub aborted: bool,
}

/// Keys this connection WATCHes and the flag their shards set when one
/// changes.
#[derive(Clone, Debug, Default)]
pub struct WatchState {
    pub flag: engine::WatchFlag,
    /// `(db, key)` in WATCH order.
    pub keys: Vec<(usize, Vec<u8>)>,
}

impl WatchState {
    pub fn dirty(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

/// See [`ServerShared::listen_apply`].
pub type ListenApply = Box<dyn Fn(&Config, &Config) -> Result<(), String> + Send + Sync>;

/// One server's shared state (see the module documentation).
pub struct ServerShared {
    pub config: RwLock<Config>,
    /// ACL users and the ACL log.
    pub acl: crate::acl::Acl,
    /// Pub/Sub subscriptions of every thread, and their inboxes.
    /// Leaked with `ops` (scripts on shards publish through `ops`).
    pub pubsub: &'static crate::pubsub::PubSub,
    /// Client-side caching: every client's address, tracking clients and
    /// BCAST prefixes.
    pub tracking: crate::tracking::Tracking,
    /// Bumped on every CONFIG SET and role change ([`ServerShared::set_role`]);
    /// threads refresh their cached copies, and what the role decides on
    /// their shards, when it changes (one atomic load per loop iteration).
    pub config_gen: AtomicU64,
    pub nshards: usize,
    pub start: Instant,
    pub start_unix_ms: u64,
    pub run_id: String,
    pub next_client_id: AtomicU64,
    pub connected_clients: AtomicUsize,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub shutdown: AtomicBool,
    /// Unix seconds of the last successful save (LASTSAVE); shared with
    /// the snapshot writer.
    pub lastsave_s: Arc<AtomicU64>,
    /// Snapshots: SAVE/BGSAVE state, save rules, INFO persistence.
    pub persist: Arc<crate::persist::Persist>,
    /// The append-only file, set by the runtime at start.
    pub aof: OnceLock<Arc<dyn crate::persist::AofControl>>,
    /// Bound TCP port (0 if none).
    pub tcp_port: AtomicU64,
    pub executable: String,
    /// Wakes every thread (set by the runtime at start).
    pub wake_all: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Applies a CONFIG SET of `port` or `tls-*` directives, given the old
    /// and the new configuration (set by the runtime at start): rebinds
    /// `port`, rebuilds the TLS context and rebinds `tls-port`. `Err`: the
    /// reason CONFIG SET gives (Redis's text; details are logged), and
    /// nothing changed.
    pub listen_apply: OnceLock<ListenApply>,
    /// How SHUTDOWN asked to stop: [`SHUTDOWN_DEFAULT`] (save if save
    /// points are configured), [`SHUTDOWN_NOSAVE`] or [`SHUTDOWN_SAVE`],
    /// either possibly with the [`SHUTDOWN_FORCE`] bit; read by whoever
    /// writes the final snapshot.
    pub shutdown_mode: AtomicU8,
    /// Commands per second over the last sampling window (INFO
    /// `instantaneous_ops_per_sec`), sampled by the runtime.
    pub ops_per_sec: AtomicU64,
    /// Running totals every thread adds its deltas to on each cron tick,
    /// from which thread 0 computes the instantaneous rates.
    pub sampled_commands: AtomicU64,
    pub sampled_net_in: AtomicU64,
    pub sampled_net_out: AtomicU64,
    /// Network input/output kbps over the last window (INFO
    /// `instantaneous_input_kbps`/`_output_kbps`), as `f64::to_bits`.
    pub input_kbps_bits: AtomicU64,
    pub output_kbps_bits: AtomicU64,
    /// `maxmemory` state shared by every shard (see `engine::evict`).
    pub mem: std::sync::Arc<engine::evict::MemShared>,
    /// Allocator total once the shards were built (INFO
    /// `used_memory_startup`); see `memory::configure_shard`.
    pub startup_memory: AtomicU64,
    /// Threads running shard event loops (INFO `shard_threads_active`):
    /// fewer than `nshards` while shards are consolidated.
    pub shard_threads_active: Arc<AtomicUsize>,
    /// SLOWLOG, LATENCY, MONITOR and CLIENT PAUSE state (see `ops`).
    pub ops: &'static crate::ops::Ops,
    /// Role, replication IDs and offsets (see `repl`).
    pub repl: crate::repl::Repl,
    /// `maxmemory-clients`: every thread's clients' memory, and INFO
    /// `evicted_clients`.
    pub client_mem: ClientMem,
    /// Each shard's keys and table overheads per database, as of its last
    /// cron: what a script's MEMORY STATS counts of the shards it cannot
    /// read (see `memory::KeyFigures`).
    pub key_figures: crate::memory::KeyFigures,
}

/// Client eviction's shared figures (Redis's `stat_clients_type_memory`
/// for normal and pub/sub clients, and `stat_evictedclients`): each thread
/// publishes the memory of its own clients and the size of its biggest
/// evictable one; the sum is what `maxmemory-clients` limits, and only the
/// thread holding the biggest evictable client evicts (Redis's order,
/// biggest first, across threads). A thread stores its total before its
/// biggest, so a reader never pairs an old total with a new biggest.
pub struct ClientMem {
    total: Box<[AtomicU64]>,
    biggest: Box<[AtomicU64]>,
    /// Clients disconnected by client eviction (INFO `evicted_clients`).
    pub evicted: AtomicU64,
    /// Per loop: its connections' bytes (CLIENT LIST's `tot-mem` summed)
    /// and how many, as of its last cron ([`ClientMem::publish_conns`]),
    /// whatever `maxmemory-clients`: what a script's MEMORY STATS counts
    /// of the loops its run cannot visit (Redis's `clients.normal` is
    /// its clients cron's figure too).
    conns: Box<[(AtomicU64, AtomicU64)]>,
    /// Per loop: its connections' CLIENT LIST lines, published at its
    /// cron while scripts list the clients (see `connection::Listing`).
    pub listing: crate::connection::Listing,
}

impl ClientMem {
    pub fn new(threads: usize) -> Self {
        let zeros = || (0..threads).map(|_| AtomicU64::new(0)).collect();
        ClientMem {
            total: zeros(),
            biggest: zeros(),
            evicted: AtomicU64::new(0),
            conns: (0..threads)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
            listing: crate::connection::Listing::new(threads),
        }
    }

    /// Loop `id`'s connections: their bytes and how many (at its cron).
    pub fn publish_conns(&self, id: usize, bytes: u64, n: u64) {
        if let Some((b, c)) = self.conns.get(id) {
            b.store(bytes, Ordering::Relaxed);
            c.store(n, Ordering::Relaxed);
        }
    }

    /// What loop `id` published last ([`ClientMem::publish_conns`]).
    pub fn conns_of(&self, id: usize) -> (u64, u64) {
        self.conns.get(id).map_or((0, 0), |(b, c)| {
            (b.load(Ordering::Relaxed), c.load(Ordering::Relaxed))
        })
    }

    /// Stores `thread`'s total and biggest evictable client; returns every
    /// thread's total summed, and whether `thread` holds the biggest
    /// evictable client of all (ties go to the lowest thread).
    /// Complexity: O(threads).
    pub fn publish(&self, thread: usize, total: u64, biggest: u64) -> (u64, bool) {
        if let (Some(t), Some(b)) = (self.total.get(thread), self.biggest.get(thread)) {
            t.store(total, Ordering::SeqCst);
            b.store(biggest, Ordering::SeqCst);
        }
        let sum = self
            .total
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .fold(0u64, u64::saturating_add);
        let first = biggest > 0
            && self.biggest.iter().enumerate().all(|(i, b)| {
                let b = b.load(Ordering::SeqCst);
                i == thread || b < biggest || (b == biggest && i > thread)
            });
        (sum, first)
    }
}

pub const SHUTDOWN_DEFAULT: u8 = 0;
pub const SHUTDOWN_NOSAVE: u8 = 1;
pub const SHUTDOWN_SAVE: u8 = 2;
/// A bit over the others: exit even when the final save (or the initial
/// AOF rewrite) fails, as SHUTDOWN ... FORCE.
pub const SHUTDOWN_FORCE: u8 = 4;

impl ServerShared {
    /// Sets the role (REPLICAOF, a failover's demotion: `Repl::set_role`)
    /// and bumps [`ServerShared::config_gen`]: every loop then refreshes
    /// what the role decides on its shard (a replica keeps keys past their
    /// deadline and, with `replica-read-only`, refuses its clients'
    /// scripts' writes) before it runs anything more, and reads the role
    /// at no other time. Returns the role's new generation.
    pub fn set_role(&self, g: &mut crate::repl::ReplInner, role: crate::repl::Role) -> u64 {
        let gen = self.repl.set_role(g, role);
        // After the role's flags: a loop that sees this generation
        // (`Acquire`) sees the new role.
        self.config_gen.fetch_add(1, Ordering::AcqRel);
        gen
    }

    /// The server behind the `Arc` its threads share, known to its
    /// `ops` from then on (a script's INFO reads it: `Ops::server`).
    pub fn share(self) -> Arc<Self> {
        let s = Arc::new(self);
        // INVARIANT: `ops` is this server's own, set only here.
        let _ = s.ops.server.set(Arc::downgrade(&s));
        s
    }

    pub fn new(config: Config, nshards: usize) -> Self {
        let ops = crate::ops::Ops::leak(&config);
        Self::with_ops(config, nshards, ops)
    }

    /// [`ServerShared::new`] around `ops`, made (`Ops::leak`) before the
    /// server for what start-up loads into it before the server exists
    /// (an RDB file's function libraries). Nothing may have set its
    /// once-set fields yet.
    pub fn with_ops(config: Config, nshards: usize, ops: &'static crate::ops::Ops) -> Self {
        let now = engine::now_ms();
        let lastsave = Arc::new(AtomicU64::new(now / 1000));
        let mem = engine::evict::MemShared::new(nshards);
        mem.set_limit(
            config.maxmemory,
            crate::memory::policy_of(config.maxmemory_policy),
        );
        let acl = crate::acl::Acl::new();
        acl.set_requirepass(config.requirepass.as_deref());
        let pubsub: &'static crate::pubsub::PubSub =
            Box::leak(Box::new(crate::pubsub::PubSub::new(nshards)));
        // INVARIANT: `ops` was just made, nothing set it.
        let _ = ops.pubsub.set(pubsub);
        let mem = Arc::new(mem);
        let _ = ops.mem.set(mem.clone());
        let persist = Arc::new(crate::persist::Persist::new(
            nshards,
            lastsave.clone(),
            &ops.disk,
            &ops.functions,
        ));
        let repl = crate::repl::Repl::new(crate::repl::new_replid());
        let databases = config.databases;
        let _ = ops.repl_link.set((repl.replica, repl.link_up));
        ServerShared {
            acl,
            ops,
            config: RwLock::new(config),
            config_gen: AtomicU64::new(0),
            nshards,
            start: Instant::now(),
            start_unix_ms: now,
            run_id: random_hex(40),
            repl,
            // Ids 1 and 2 are Redis's Lua clients' (scripts' and
            // functions', made at its start-up): connections start at 3
            // there, so here too (see `connection::listing`).
            next_client_id: AtomicU64::new(3),
            connected_clients: AtomicUsize::new(0),
            total_connections: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            lastsave_s: lastsave,
            persist,
            aof: OnceLock::new(),
            tcp_port: AtomicU64::new(0),
            executable: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            wake_all: OnceLock::new(),
            listen_apply: OnceLock::new(),
            shutdown_mode: AtomicU8::new(SHUTDOWN_DEFAULT),
            ops_per_sec: AtomicU64::new(0),
            sampled_commands: AtomicU64::new(0),
            sampled_net_in: AtomicU64::new(0),
            sampled_net_out: AtomicU64::new(0),
            input_kbps_bits: AtomicU64::new(0),
            output_kbps_bits: AtomicU64::new(0),
            mem,
            startup_memory: AtomicU64::new(0),
            shard_threads_active: Arc::new(AtomicUsize::new(nshards)),
            pubsub,
            tracking: crate::tracking::Tracking::default(),
            client_mem: ClientMem::new(nshards),
            key_figures: crate::memory::KeyFigures::new(nshards, databases),
        }
    }

    /// A copy of the current configuration.
    pub fn config(&self) -> Config {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Asks every thread to stop (SHUTDOWN, SIGTERM).
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        if let Some(w) = self.wake_all.get() {
            w();
        }
    }

    pub fn databases(&self) -> usize {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .databases
    }
}

pub(crate) fn random_hex(n: usize) -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..n)
        .map(|_| char::from(b"0123456789abcdef"[rng.gen_range(0..16)]))
        .collect()
}

/// Per-command counters (INFO commandstats).
#[derive(Clone, Copy, Debug, Default)]
pub struct CmdStat {
    pub calls: u64,
    pub usec: u64,
    pub rejected_calls: u64,
    pub failed_calls: u64,
}

/// Counters one thread keeps; INFO sums them over threads.
#[derive(Clone, Debug)]
pub struct ThreadStats {
    pub cmd: Vec<CmdStat>,
    pub total_commands: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    pub unexpected_error_replies: u64,
    pub total_error_replies: u64,
    /// Per-error-prefix counts (INFO errorstats): `ERR`, `WRONGTYPE` ...
    pub errors: Vec<(String, u64)>,
    /// Per-command latency histograms (INFO latencystats, LATENCY
    /// HISTOGRAM), by command id; allocated on a command's first call.
    pub hist: Vec<Option<Box<crate::ops::hist::Hist>>>,
}

impl Default for ThreadStats {
    fn default() -> Self {
        ThreadStats {
            cmd: vec![CmdStat::default(); registry().len()],
            total_commands: 0,
            net_input_bytes: 0,
            net_output_bytes: 0,
            unexpected_error_replies: 0,
            total_error_replies: 0,
            errors: Vec::new(),
            hist: Vec::new(),
        }
    }
}

impl ThreadStats {
    /// Adds `o`'s command counts, command total and latency histograms to
    /// these, and empties `o`.
    pub fn absorb(&mut self, o: &mut ThreadStats) {
        // Every call counts a command, and every rejection an error.
        if o.total_commands == 0 && o.total_error_replies == 0 {
            return;
        }
        for (a, b) in self.cmd.iter_mut().zip(&o.cmd) {
            a.calls += b.calls;
            a.usec += b.usec;
            a.rejected_calls += b.rejected_calls;
            a.failed_calls += b.failed_calls;
        }
        self.total_commands += o.total_commands;
        self.total_error_replies += o.total_error_replies;
        for (code, n) in o.errors.drain(..) {
            match self.errors.iter_mut().find(|(c, _)| *c == code) {
                Some((_, m)) => *m += n,
                None => {
                    if self.errors.len() < 128 {
                        self.errors.push((code, n));
                    }
                }
            }
        }
        o.total_error_replies = 0;
        for (id, h) in o.hist.iter().enumerate() {
            if let Some(h) = h {
                self.histogram(id).merge(h);
            }
        }
        o.cmd.iter_mut().for_each(|c| *c = CmdStat::default());
        o.total_commands = 0;
        o.hist.clear();
    }

    /// A stand-in that allocates nothing, for the moment the real one is
    /// lent out (a script's run holds its VM's: `script::run`). Not to be
    /// counted into: it has no command slots.
    pub(crate) fn lent() -> ThreadStats {
        ThreadStats {
            cmd: Vec::new(),
            total_commands: 0,
            net_input_bytes: 0,
            net_output_bytes: 0,
            unexpected_error_replies: 0,
            total_error_replies: 0,
            errors: Vec::new(),
            hist: Vec::new(),
        }
    }

    /// Command `id`'s histogram, created on first use.
    #[inline]
    pub fn histogram(&mut self, id: usize) -> &mut crate::ops::hist::Hist {
        if self.hist.len() <= id {
            self.hist.resize_with(registry().len(), || None);
        }
        self.hist[id].get_or_insert_with(Default::default)
    }

    /// Copies of the histograms of commands `ids` (all when `None`).
    pub fn histograms(&self, ids: Option<&[usize]>) -> Vec<(usize, crate::ops::hist::Hist)> {
        let has = |&i: &usize| self.hist.get(i).is_some_and(|h| h.is_some());
        let ids: Vec<usize> = match ids {
            Some(ids) => ids.iter().copied().filter(has).collect(),
            None => (0..self.hist.len()).filter(has).collect(),
        };
        ids.into_iter()
            .filter_map(|i| Some((i, (**self.hist[i].as_ref()?).clone())))
            .collect()
    }

    /// Counts an error reply under its code (the first word).
    pub fn count_error(&mut self, line: &[u8]) {
        self.total_error_replies += 1;
        let code = line.split(|&b| b == b' ').next().unwrap_or(b"ERR");
        let code = std::str::from_utf8(code).unwrap_or("ERR");
        match self.errors.iter_mut().find(|(c, _)| c == code) {
            Some((_, n)) => *n += 1,
            None => {
                if self.errors.len() < 128 {
                    self.errors.push((code.to_string(), 1));
                }
            }
        }
    }
}

/// Bytes past the output limit before a reply drawn with repetition stops
/// (see [`ShardCtx::reply_cap`]): four times the connection's uncounted
/// first chunk of output (`server::conn::REPLY_CHUNK`, 16 KiB).
pub const REPLY_CAP_SLACK: usize = 64 * 1024;

/// The `client-output-buffer-limit` hard limit of `client`'s class (pubsub
/// while subscribed, else normal), 0 for none: past it the client is
/// closed, so a reply drawn with repetition may stop there (see
/// [`ShardCtx::reply_cap`]).
pub fn reply_cap_bytes(limits: &[config::ObufLimit; 3], client: &ClientState) -> u64 {
    let class = if crate::pubsub::subscribed(client) {
        config::ObufClass::Pubsub
    } else {
        config::ObufClass::Normal
    };
    limits[class as usize].hard
}

/// The collection encoding thresholds of a configuration (and the
/// HyperLogLog promotion size); the event loop
/// stores them in `Shard::enc` at start and after every CONFIG SET.
pub fn enc_limits_of(c: &Config) -> engine::EncLimits {
    let sz = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    engine::EncLimits {
        hash_max_listpack_entries: sz(c.hash_max_listpack_entries),
        hash_max_listpack_value: sz(c.hash_max_listpack_value),
        set_max_intset_entries: sz(c.set_max_intset_entries),
        set_max_listpack_entries: sz(c.set_max_listpack_entries),
        set_max_listpack_value: sz(c.set_max_listpack_value),
        zset_max_listpack_entries: sz(c.zset_max_listpack_entries),
        zset_max_listpack_value: sz(c.zset_max_listpack_value),
        list_max_listpack_size: c.list_max_listpack_size,
        list_compress_depth: c.list_compress_depth,
        hll_sparse_max_bytes: sz(c.hll_sparse_max_bytes),
        stream_node: engine::types::stream::NodeLimits {
            max_bytes: sz(c.stream_node_max_bytes),
            max_entries: c.stream_node_max_entries,
        },
    }
}

/// [`enc_limits_of`] the live configuration.
pub fn enc_limits(server: &ServerShared) -> engine::EncLimits {
    enc_limits_of(&server.config.read().unwrap_or_else(|e| e.into_inner()))
}

/// Handler context on the home thread.
pub struct ConnCtx<'a> {
    pub client: &'a mut ClientState,
    pub out: &'a mut Reply,
    pub server: &'a std::sync::Arc<ServerShared>,
    /// The home thread's shard index.
    pub home: usize,
    /// When dispatch builds the coordinator of a command whose keys span
    /// shards: the shard of each of its keys, in key-position order, so
    /// the builder need not hash them again. Empty otherwise (then a
    /// builder computes what it needs itself).
    pub key_shards: &'a [u16],
}

impl ConnCtx<'_> {
    pub fn nshards(&self) -> usize {
        self.server.nshards
    }
}
