//! Snapshots to disk: SAVE, BGSAVE, the `save` rules, INFO persistence,
//! the writer thread, and loading a snapshot at start-up.
//!
//! A snapshot begins on every shard at one instant: a job on each shard,
//! run under a shared lock on the whole keyspace (the transaction layer's
//! whole-shard Read locks), calls `Shard::snapshot_begin`. No multi-shard
//! command can straddle that instant, so the file is point-in-time
//! consistent across shards. Each shard then writes its own entries
//! between batches of commands (see `engine::snapshot`: no fork, entries
//! copied before they change) and hands RDB fragments, each starting with a
//! SELECTDB, to one writer thread through a bounded channel. The writer
//! puts the header first, appends fragments in arrival order with a running
//! CRC64, and once every shard reported done writes the EOF opcode and the
//! checksum to `temp-<pid>.rdb`, fsyncs it, renames it over `dir/dbfilename`
//! and fsyncs the directory: a crash mid-save never leaves a broken dump.
//!
//! SAVE runs the same protocol with each shard writing everything inside
//! its job (the shards work in parallel; the client waits for the rename).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use engine::Shard;
use resp::{Args, Reply};

use crate::coord::{Coordinator, OneStep, Plan, ShardEnv};
use crate::ctx::{ClientState, ConnCtx, ServerShared};
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::eq_ic;

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "save",
        1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI,
        NO_KEYS,
        Exec::Coord(save),
        &["admin", "slow", "dangerous"],
    ),
    CommandSpec::new(
        "bgrewriteaof",
        1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING,
        NO_KEYS,
        Exec::Coord(bgrewriteaof),
        &["admin", "slow", "dangerous"],
    ),
    CommandSpec::new(
        "bgsave",
        -1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING,
        NO_KEYS,
        Exec::Coord(bgsave),
        &["admin", "slow", "dangerous"],
    ),
];

/// Whether `name` begins a snapshot: it runs under whole-keyspace Read
/// locks (see `multi::keyspace_locks`).
pub fn is_snapshot_command(name: &str) -> bool {
    matches!(name, "save" | "bgsave" | "bgrewriteaof")
}

/// Redis's `shared.bgsaveerr`.
pub const MISCONF: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently \
    unable to persist to disk. Commands that may modify the data set are disabled, because this \
    instance is configured to report errors during writes if RDB snapshotting fails \
    (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB \
    error.";

/// Bytes a shard writes per step between batches of commands: a small
/// slice when clients are being served, so their latency and throughput
/// barely move while a save runs; a large one when the loop is idle.
pub const STEP_BYTES: usize = 256 * 1024;
pub const STEP_BYTES_BUSY: usize = 16 * 1024;
/// Fragments in flight to the writer before shards wait.
const CHANNEL_DEPTH: usize = 32;
/// Redis's CONFIG_BGSAVE_RETRY_DELAY: after a failed save, the rules wait
/// this long before trying again.
const RETRY_DELAY_S: u64 = 5;

/// Log sink set by the binary (the commands crate does not own logging).
static LOGGER: OnceLock<fn(bool, &str)> = OnceLock::new();

/// Installs the log function: `(warning, line)`.
pub fn set_logger(f: fn(bool, &str)) {
    let _ = LOGGER.set(f);
}

/// A warning line in the server log.
pub(crate) fn log_warning(line: &str) {
    log(true, line);
}

pub(crate) fn log(warning: bool, line: &str) {
    if let Some(f) = LOGGER.get() {
        f(warning, line);
    }
}

/// Called with a save's outcome once its file is in place; true asks for
/// another rewrite (see [`AofControl::finish`]).
type OnDone = Box<dyn FnOnce(bool) -> bool + Send>;

/// Per shard counters shared by a save's jobs and its writer.
type Counters = Arc<Vec<AtomicU64>>;

/// To the writer thread.
enum SaveMsg {
    Fragment(Vec<u8>),
    Done { keys: u64 },
}

/// What a shard thread keeps while its part of a save runs.
pub struct SaveLink {
    tx: SyncSender<SaveMsg>,
    gate: Arc<Gate>,
    abort: Arc<AtomicBool>,
    /// A fragment not sent yet, and whether it is open.
    pending: Option<(Vec<u8>, bool)>,
}

/// The fragments of every shard share one channel into the file. A
/// fragment that ends inside a big value (open, see
/// `Shard::snapshot_take`) must be followed in the file by the same
/// shard's next one: the shard that sends an open fragment holds the gate
/// until it sends a closed one, and meanwhile the others keep their
/// fragments (throttled, as when the channel is full).
#[derive(Default)]
struct Gate {
    /// The shard holding the gate.
    owner: Mutex<Option<usize>>,
    freed: Condvar,
}

enum GateErr {
    /// Another shard holds the gate, or the channel is full: try later.
    Wait(Vec<u8>),
    /// The writer is gone.
    Gone,
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<usize>> {
        self.owner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a fragment of shard `me` if the gate lets it, without waiting.
    fn try_send(
        &self,
        tx: &SyncSender<SaveMsg>,
        me: usize,
        b: Vec<u8>,
        open: bool,
    ) -> Result<(), GateErr> {
        let mut owner = self.lock();
        if owner.is_some_and(|o| o != me) {
            return Err(GateErr::Wait(b));
        }
        match tx.try_send(SaveMsg::Fragment(b)) {
            Ok(()) => {
                *owner = open.then_some(me);
                Ok(())
            }
            Err(TrySendError::Full(SaveMsg::Fragment(b))) => Err(GateErr::Wait(b)),
            Err(_) => {
                *owner = None;
                self.freed.notify_all();
                Err(GateErr::Gone)
            }
        }
    }

    /// Sends a fragment of shard `me`, waiting for the gate and for room;
    /// false if the writer is gone or the save was aborted.
    fn send(
        &self,
        tx: &SyncSender<SaveMsg>,
        me: usize,
        b: Vec<u8>,
        open: bool,
        abort: &AtomicBool,
    ) -> bool {
        let mut owner = self.lock();
        while owner.is_some_and(|o| o != me) {
            if abort.load(Ordering::Acquire) {
                return false;
            }
            owner = self
                .freed
                .wait_timeout(owner, std::time::Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let ok = tx.send(SaveMsg::Fragment(b)).is_ok();
        *owner = (ok && open).then_some(me);
        if owner.is_none() {
            self.freed.notify_all();
        }
        ok
    }
}

struct Running {
    tx: SyncSender<SaveMsg>,
    gate: Arc<Gate>,
    abort: Arc<AtomicBool>,
    started: Instant,
    kind: Kind,
}

/// What a running snapshot is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// SAVE: the client waits.
    Save,
    /// BGSAVE or a save rule.
    Bgsave,
    /// BGREWRITEAOF: the snapshot is the AOF's new base.
    Rewrite,
    /// A diskless replication sync: the RDB goes to the replicas'
    /// sockets, not to a file (no LASTSAVE, no change counters).
    Sync,
}

/// Where a replication sync's snapshot goes (see [`sync_coordinator`]).
pub enum SyncTarget {
    /// Redis's disk-based sync: a BGSAVE to `dbfilename`.
    Disk,
    /// Diskless: the RDB's bytes, as written, to this sink.
    Socket(Box<dyn Write + Send>),
}

/// The append-only file as the snapshot layer drives it (implemented by
/// the runtime, which owns the AOF writer): a rewrite is a snapshot
/// written as the new base, begun at the instant logging moves to a new
/// incremental file.
pub trait AofControl: Send + Sync {
    /// Whether `appendonly` is on.
    fn enabled(&self) -> bool;
    /// Names the next base (`.base.rdb` when `rdb`, else `.base.aof`) and
    /// incr files; returns the base's path.
    fn prepare(&self, rdb: bool) -> Result<PathBuf, String>;
    /// At the snapshot instant (every shard locked): records from now on
    /// go to the new incr file.
    fn switch(&self);
    /// The new base is in place (`ok`) or not: the manifest moves on (old
    /// files deleted) or keeps listing the old ones. Returns true when
    /// another rewrite must follow: the AOF being turned on still has no
    /// base (see [`AofControl::waiting_rewrite`]).
    fn finish(&self, ok: bool) -> bool;
    /// (base size, whole AOF size) in bytes.
    fn sizes(&self) -> (u64, u64);
    /// The last write to the AOF succeeded (INFO `aof_last_write_status`).
    fn write_ok(&self) -> bool {
        true
    }
    /// The AOF is being turned on and its first base is not in place yet
    /// (Redis's `AOF_WAIT_REWRITE`): what it logs is not loadable on its
    /// own, so a shutdown during that rewrite is refused without FORCE.
    fn waiting_rewrite(&self) -> bool {
        false
    }
    /// `CONFIG SET appendonly yes`: creates the AOF directory and a
    /// temporary incr file and starts the writer on it (`Err`: the AOF
    /// stays off and CONFIG SET fails). The rewrite that follows (shards
    /// start logging at its instant) puts the files in the manifest.
    fn enable(&self) -> Result<(), String>;
    /// `CONFIG SET appendonly no`: after every shard stopped logging,
    /// flushes and closes the file.
    fn disable(&self);
    /// The runtime's own type, for its threads to find the writer.
    fn as_any(&self) -> &dyn std::any::Any;
}

#[derive(Default)]
struct State {
    running: Option<Running>,
    /// BGSAVE refused because a rewrite ran (BGSAVE SCHEDULE), or the
    /// reverse: started by the cron when the other ends.
    bgsave_scheduled: bool,
    rewrite_scheduled: bool,
    rewrite_ok: bool,
    /// CONFIG SET appendonly asked to turn the AOF off.
    aof_request: Option<bool>,
    /// [`Persist::rewrite_limited`]: the current delay and when it ends
    /// (unix seconds; 0: not waiting).
    limit_delay_min: u64,
    limit_until_s: u64,
    /// Why the running save or rewrite was abandoned on purpose (see
    /// [`Persist::after_flushall`], [`Persist::kill_child`]), for its log
    /// line.
    kill_reason: &'static str,
    last_rewrite_time_s: Option<u64>,
    rewrites: u64,
    rewrite_failures: u64,
    last_ok: bool,
    last_bgsave_time_s: Option<u64>,
    last_try_s: u64,
    saves: u64,
    loaded_keys: u64,
    expired_on_load: u64,
}

/// The server's persistence state (in [`ServerShared`]).
pub struct Persist {
    state: Mutex<State>,
    in_progress: AtomicBool,
    /// Per shard: its change counter, published by its thread.
    dirty: Vec<AtomicU64>,
    /// Per shard: its change counter when the last successful save began.
    saved_dirty: Vec<AtomicU64>,
    pub loading: AtomicBool,
    /// The last save failed (INFO `rdb_last_bgsave_status:err`): read on
    /// every write command, so kept apart from the locked state.
    failed: AtomicBool,
    /// Unix seconds of the last successful save (LASTSAVE).
    lastsave_s: Arc<AtomicU64>,
}

/// What runs in the background (see [`Persist::child`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Child {
    None,
    Bgsave,
    Rewrite,
}

/// INFO persistence figures.
pub struct PersistInfo {
    pub in_progress: bool,
    pub rewrite_in_progress: bool,
    pub rewrite_scheduled: bool,
    pub rewrite_ok: bool,
    pub last_rewrite_time_s: Option<u64>,
    pub current_rewrite_time_s: Option<u64>,
    pub rewrites: u64,
    pub rewrite_failures: u64,
    pub changes: u64,
    pub last_ok: bool,
    pub last_bgsave_time_s: Option<u64>,
    pub current_time_s: Option<u64>,
    pub saves: u64,
    pub loaded_keys: u64,
    pub expired_on_load: u64,
    pub loading: bool,
}

impl Persist {
    pub fn new(nshards: usize, lastsave_s: Arc<AtomicU64>) -> Self {
        Persist {
            state: Mutex::new(State {
                last_ok: true,
                rewrite_ok: true,
                ..State::default()
            }),
            in_progress: AtomicBool::new(false),
            dirty: (0..nshards).map(|_| AtomicU64::new(0)).collect(),
            saved_dirty: (0..nshards).map(|_| AtomicU64::new(0)).collect(),
            loading: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            lastsave_s,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A shard thread publishes its change counter (each loop iteration).
    #[inline]
    pub fn publish_dirty(&self, shard: usize, dirty: u64) {
        self.dirty[shard].store(dirty, Ordering::Relaxed);
    }

    /// Changes since the last successful save began.
    pub fn changes(&self) -> u64 {
        self.dirty
            .iter()
            .zip(&self.saved_dirty)
            .map(|(d, s)| {
                d.load(Ordering::Relaxed)
                    .saturating_sub(s.load(Ordering::Relaxed))
            })
            .sum()
    }

    pub fn in_progress(&self) -> bool {
        self.in_progress.load(Ordering::Acquire)
    }

    pub fn info(&self) -> PersistInfo {
        let st = self.lock();
        let running = |k: Kind| {
            st.running
                .as_ref()
                .filter(|r| (r.kind == Kind::Rewrite) == (k == Kind::Rewrite))
        };
        PersistInfo {
            in_progress: running(Kind::Bgsave).is_some(),
            rewrite_in_progress: running(Kind::Rewrite).is_some(),
            rewrite_scheduled: st.rewrite_scheduled,
            rewrite_ok: st.rewrite_ok,
            last_rewrite_time_s: st.last_rewrite_time_s,
            current_rewrite_time_s: running(Kind::Rewrite).map(|r| r.started.elapsed().as_secs()),
            rewrites: st.rewrites,
            rewrite_failures: st.rewrite_failures,
            changes: self.changes(),
            last_ok: st.last_ok,
            last_bgsave_time_s: st.last_bgsave_time_s,
            current_time_s: running(Kind::Bgsave).map(|r| r.started.elapsed().as_secs()),
            saves: st.saves,
            loaded_keys: st.loaded_keys,
            expired_on_load: st.expired_on_load,
            loading: self.loading.load(Ordering::Relaxed),
        }
    }

    /// FLUSHALL, as Redis's flushallCommand: a background save in
    /// progress is abandoned (its data is gone), and with save rules set a
    /// save of the emptied data follows at once (from the cron), so a
    /// restart does not bring the flushed keys back.
    pub fn after_flushall(&self, server: &ServerShared) {
        let mut st = self.lock();
        if let Some(r) = st.running.as_ref().filter(|r| r.kind == Kind::Bgsave) {
            r.abort.store(true, Ordering::Release);
            st.kill_reason = "FLUSHALL";
        }
        if !server.config().save.is_empty() {
            st.bgsave_scheduled = true;
        }
    }

    /// What runs in the background: a save (BGSAVE, a save rule) or an AOF
    /// rewrite.
    pub fn child(&self) -> Child {
        match self.lock().running.as_ref().map(|r| r.kind) {
            None => Child::None,
            Some(Kind::Rewrite) => Child::Rewrite,
            Some(_) => Child::Bgsave,
        }
    }

    /// Shutdown, as Redis's killRDBChild / killAppendOnlyChild: abandons
    /// the running background save or rewrite (not a failure: statuses
    /// stay as they are; a rewrite leaves the manifest complete as it
    /// stands), and waits for its writer to be gone, so its temp file is
    /// removed before the final save writes its own. Call with every shard
    /// stopped. Returns false if the writer did not end in time.
    pub fn kill_child(&self) -> bool {
        {
            let mut st = self.lock();
            let Some(r) = st.running.as_ref() else {
                return true;
            };
            r.abort.store(true, Ordering::Release);
            st.kill_reason = "shutdown";
        }
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while self.in_progress() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }

    /// CONFIG SET appendonly yes could not create the AOF's files: as
    /// Redis, the rewrite status turns to err.
    pub fn rewrite_start_failed(&self) {
        self.lock().rewrite_ok = false;
    }

    /// CONFIG SET appendonly no: the cron turns the AOF off.
    pub fn request_aof_off(&self) {
        self.lock().aof_request = Some(false);
    }

    /// CONFIG SET appendonly yes, once the AOF's writer started on its
    /// temporary incr file ([`AofControl::enable`]): the rewrite that
    /// completes it is scheduled (the cron starts it when nothing else
    /// runs); a pending turn-off is cancelled.
    pub fn request_aof_on(&self) {
        let mut st = self.lock();
        st.aof_request = None;
        st.rewrite_scheduled = true;
    }

    /// Redis's aofRewriteLimited: after three consecutive failed rewrites,
    /// the cron's next attempt waits 1 minute, then 2, 4 ... up to an hour.
    fn rewrite_limited(&self) -> bool {
        const THRESHOLD: u64 = 3;
        const MAX_MINUTES: u64 = 60;
        let mut st = self.lock();
        if st.rewrite_failures < THRESHOLD {
            st.limit_delay_min = 0;
            st.limit_until_s = 0;
            return false;
        }
        let now_s = engine::now_ms() / 1000;
        if st.limit_until_s != 0 {
            if now_s < st.limit_until_s {
                return true;
            }
            st.limit_until_s = 0;
            return false;
        }
        st.limit_delay_min = match st.limit_delay_min {
            0 => 1,
            m => (m * 2).min(MAX_MINUTES),
        };
        st.limit_until_s = now_s + st.limit_delay_min * 60;
        let m = st.limit_delay_min;
        drop(st);
        log(
            true,
            &format!(
                "Background AOF rewrite has repeatedly failed and triggered the limit, will retry in {m} minutes"
            ),
        );
        true
    }

    /// Records what start-up loading found (INFO `rdb_last_load_keys_*`).
    pub fn loaded(&self, keys: u64, expired: u64) {
        let mut st = self.lock();
        st.loaded_keys = keys;
        st.expired_on_load = expired;
    }

    /// Whether writes are refused with MISCONF (Redis's
    /// `writeCommandsDeniedByDiskError`): the last save failed, and
    /// `stop-writes-on-bgsave-error` is on with save rules set. One relaxed
    /// load while saves succeed.
    #[inline]
    pub fn refuses_writes(&self, server: &ServerShared) -> bool {
        self.failed.load(Ordering::Relaxed) && {
            let cfg = server.config();
            cfg.stop_writes_on_bgsave_error && !cfg.save.is_empty()
        }
    }

    /// The link a shard thread uses for the running save, if one runs.
    fn link(&self) -> Option<SaveLink> {
        let st = self.lock();
        let r = st.running.as_ref()?;
        Some(SaveLink {
            tx: r.tx.clone(),
            gate: r.gate.clone(),
            abort: r.abort.clone(),
            pending: None,
        })
    }

    /// Starts the writer thread for a save of `server`'s data; `Err` if one
    /// runs already. `done` receives the outcome (SAVE waits on it).
    fn start(
        self: &Arc<Self>,
        server: &ServerShared,
        kind: Kind,
    ) -> Result<(Counters, Receiver<Result<(), String>>), CmdError> {
        self.start_with(server, kind, None, None, None)
    }

    /// [`Persist::start`] with a callback for the outcome (a sync's
    /// replicas wait for it) and, for [`Kind::Sync`], the sink the RDB
    /// goes to.
    fn start_with(
        self: &Arc<Self>,
        server: &ServerShared,
        kind: Kind,
        done_hook: Option<OnDone>,
        sink: Option<Box<dyn Write + Send>>,
        stream_db: Option<usize>,
    ) -> Result<(Counters, Receiver<Result<(), String>>), CmdError> {
        let mut st = self.lock();
        match st.running.as_ref().map(|r| r.kind) {
            None => {}
            Some(Kind::Rewrite) if kind == Kind::Rewrite => {
                return Err(CmdError::err(
                    "Background append only file rewriting already in progress",
                ))
            }
            Some(Kind::Rewrite) => {
                return Err(CmdError::err(
                    "An AOF log rewriting in progress: can't BGSAVE right now. Use BGSAVE \
                     SCHEDULE in order to schedule a BGSAVE whenever possible.",
                ))
            }
            Some(_) => return Err(CmdError::err("Background save already in progress")),
        }
        let cfg = server.config();
        let (path, on_done): (PathBuf, Option<OnDone>) = if kind == Kind::Rewrite {
            let Some(aof) = server.aof.get().cloned() else {
                return Err(CmdError::err("Background append only file rewriting error"));
            };
            let path = match aof.prepare(cfg.aof_use_rdb_preamble) {
                Ok(p) => p,
                Err(e) => {
                    // Redis's rewriteAppendOnlyFileBackground when the new
                    // incr cannot be opened: the status turns to err.
                    log(true, &e);
                    st.rewrite_ok = false;
                    return Err(CmdError::err(
                        "Can't execute an AOF background rewriting. Please check the server \
                         logs for more information.",
                    ));
                }
            };
            (path, Some(Box::new(move |ok| aof.finish(ok))))
        } else {
            (cfg.rdb_path(), done_hook)
        };
        let background = kind != Kind::Save;
        let (tx, rx) = sync_channel(CHANNEL_DEPTH);
        let (done_tx, done_rx) = sync_channel(1);
        let abort = Arc::new(AtomicBool::new(false));
        let begin_dirty: Arc<Vec<AtomicU64>> =
            Arc::new((0..self.dirty.len()).map(|_| AtomicU64::new(0)).collect());
        let job = WriterJob {
            path,
            kind,
            rdb: kind != Kind::Rewrite || cfg.aof_use_rdb_preamble,
            on_done,
            checksum: cfg.rdbchecksum,
            shards: self.dirty.len(),
            rx,
            abort: abort.clone(),
            persist: self.clone(),
            begin_dirty: begin_dirty.clone(),
            background,
            done: done_tx,
            functions: crate::script::library::registry().codes(),
            compress: cfg.rdbcompression,
            sink: Mutex::new(sink),
            stream_db,
        };
        std::thread::Builder::new()
            .name("rdb-writer".into())
            .spawn(move || job.run())
            .map_err(|e| CmdError::err(format!("Can't save in background: {e}")))?;
        if kind == Kind::Rewrite {
            log(false, "Background append only file rewriting started");
            st.rewrite_scheduled = false;
            // Counted when started, as Redis's stat_aof_rewrites.
            st.rewrites += 1;
        } else if kind == Kind::Sync {
            log(
                false,
                "Starting BGSAVE for SYNC with target: replicas sockets",
            );
        } else {
            if background {
                log(false, "Background saving started");
            }
            st.saves += 1;
            st.last_try_s = engine::now_ms() / 1000;
            st.bgsave_scheduled = false;
        }
        st.kill_reason = "";
        st.running = Some(Running {
            tx,
            gate: Arc::default(),
            abort,
            started: Instant::now(),
            kind,
        });
        self.in_progress.store(true, Ordering::Release);
        Ok((begin_dirty, done_rx))
    }

    /// Whether the `save` rules call for a background save now (Redis's
    /// serverCron check): some rule's seconds have passed since the last
    /// save and its number of changes was reached, and a failed save is
    /// retried only after a delay. Returns the rule that fired (changes,
    /// seconds), for Redis's log line.
    pub fn rules_due(&self, server: &ServerShared) -> Option<(u64, u64)> {
        if self.in_progress() {
            return None;
        }
        let rules = server.config().save_rules();
        if rules.is_empty() {
            return None;
        }
        let now_s = engine::now_ms() / 1000;
        let last = self.lastsave_s.load(Ordering::Relaxed);
        let changes = self.changes();
        let st = self.lock();
        let retry_ok = st.last_ok || now_s.saturating_sub(st.last_try_s) > RETRY_DELAY_S;
        if !retry_ok {
            return None;
        }
        rules
            .iter()
            .find(|&&(secs, n)| changes >= n && now_s.saturating_sub(last) >= secs)
            .map(|&(secs, n)| (n, secs))
    }
}

/// The writer thread's work.
struct WriterJob {
    path: PathBuf,
    kind: Kind,
    /// An RDB file (header, EOF, checksum); otherwise commands only (an
    /// AOF base without the RDB preamble).
    rdb: bool,
    /// Called with the outcome once the file is in place (rewrites).
    on_done: Option<OnDone>,
    checksum: bool,
    shards: usize,
    rx: Receiver<SaveMsg>,
    abort: Arc<AtomicBool>,
    persist: Arc<Persist>,
    begin_dirty: Arc<Vec<AtomicU64>>,
    background: bool,
    done: SyncSender<Result<(), String>>,
    /// The function libraries when the snapshot began, written before the
    /// data (RDB `FUNCTION2` opcodes, or FUNCTION LOAD commands in an AOF
    /// base without the RDB preamble, as Redis's `rewriteFunctions`).
    functions: Vec<Arc<crate::script::library::Library>>,
    compress: bool,
    /// [`Kind::Sync`]: where the RDB goes instead of a file.
    sink: Mutex<Option<Box<dyn Write + Send>>>,
    /// A replica's sync: the database its master's stream is in (the
    /// `repl-stream-db` AUX field).
    stream_db: Option<usize>,
}

impl WriterJob {
    fn run(mut self) {
        let started = Instant::now();
        let res = self.write();
        // Abandoned on purpose (FLUSHALL), as Redis's child killed with
        // SIGUSR1: not a failure (no MISCONF, status unchanged).
        let killed = res.is_err() && self.abort.load(Ordering::Acquire);
        if res.is_err() {
            // Shards stop writing; their next check drops their state.
            self.abort.store(true, Ordering::Release);
        }
        let again = self.on_done.take().is_some_and(|f| f(res.is_ok()));
        if self.kind == Kind::Rewrite {
            let mut st = self.persist.lock();
            st.running = None;
            if again {
                // The AOF being turned on still has no base: retried from
                // the cron (Redis's aof_rewrite_scheduled).
                st.rewrite_scheduled = true;
            }
            st.last_rewrite_time_s = Some(started.elapsed().as_secs());
            // Killed on purpose (shutdown) is no failure, as Redis's
            // SIGUSR1-killed child.
            if !killed {
                st.rewrite_ok = res.is_ok();
                if res.is_ok() {
                    st.rewrite_failures = 0;
                } else {
                    st.rewrite_failures += 1;
                }
            }
            let reason = st.kill_reason;
            self.persist.in_progress.store(false, Ordering::Release);
            drop(st);
            match &res {
                Ok(_) => log(false, "Background AOF rewrite terminated with success"),
                Err(_) if killed => log(
                    true,
                    &format!("Background AOF rewrite terminated by {reason}"),
                ),
                Err(e) => log(true, &format!("Background AOF rewrite error: {e}")),
            }
            let _ = self.done.try_send(res.map(|_| ()));
            return;
        }
        if self.kind == Kind::Sync {
            {
                let mut st = self.persist.lock();
                st.running = None;
                self.persist.in_progress.store(false, Ordering::Release);
            }
            match &res {
                Ok(_) => log(false, "Diskless sync: the RDB was sent to the replicas"),
                Err(e) => log(true, &format!("Diskless sync failed: {e}")),
            }
            let _ = self.done.try_send(res.map(|_| ()));
            return;
        }
        let now_s = engine::now_ms() / 1000;
        let keys = res.as_ref().copied().unwrap_or(0);
        let reason;
        {
            let mut st = self.persist.lock();
            reason = st.kill_reason;
            st.running = None;
            if !killed {
                st.last_ok = res.is_ok();
                self.persist.failed.store(res.is_err(), Ordering::Relaxed);
            }
            if self.background {
                st.last_bgsave_time_s = Some(started.elapsed().as_secs());
            }
            if res.is_ok() {
                self.persist.lastsave_s.store(now_s, Ordering::Relaxed);
                for (s, b) in self.persist.saved_dirty.iter().zip(self.begin_dirty.iter()) {
                    s.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
            self.persist.in_progress.store(false, Ordering::Release);
        }
        match &res {
            Ok(_) if self.background => {
                log(
                    false,
                    &format!("Background saving terminated with success ({keys} keys)"),
                );
            }
            Ok(_) => log(false, "DB saved on disk"),
            Err(_) if killed => log(false, &format!("Background saving terminated by {reason}")),
            Err(e) if self.background => log(true, &format!("Background saving error: {e}")),
            Err(e) => log(true, &format!("Error saving DB on disk: {e}")),
        }
        let _ = self.done.try_send(res.map(|_| ()));
    }

    /// Writes the file; returns the number of keys written.
    fn write(&self) -> Result<u64, String> {
        if self.kind == Kind::Sync {
            let sink = self.sink.lock().unwrap_or_else(|e| e.into_inner()).take();
            let Some(mut sink) = sink else {
                return Err("no replica to send the RDB to".into());
            };
            let keys = self.write_rdb(&mut sink)?;
            sink.flush().map_err(|e| e.to_string())?;
            return Ok(keys);
        }
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = match self.kind {
            Kind::Rewrite => dir.join(format!("temp-rewriteaof-bg-{}.aof", std::process::id())),
            _ => dir.join(format!("temp-{}.rdb", std::process::id())),
        };
        let res = self.write_to(&tmp);
        if let Err(e) = &res {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!(
                "Failed writing the RDB file {}: {e}",
                tmp.display()
            ));
        }
        std::fs::rename(&tmp, &self.path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!(
                "Error moving temp DB file {} on the final destination {}: {e}",
                tmp.display(),
                self.path.display()
            )
        })?;
        // The rename itself must survive a crash.
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        res
    }

    fn write_to(&self, tmp: &Path) -> Result<u64, String> {
        let f = File::create(tmp).map_err(|e| e.to_string())?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        let keys = self.write_rdb(&mut w)?;
        let f = w.into_inner().map_err(|e| e.to_string())?;
        f.sync_all().map_err(|e| e.to_string())?;
        Ok(keys)
    }

    /// Writes the snapshot (header, fragments, EOF and checksum) to `w`;
    /// returns the number of keys written.
    fn write_rdb<W: Write + ?Sized>(&self, w: &mut W) -> Result<u64, String> {
        let mut crc = 0u64;
        let mut put = |w: &mut W, b: &[u8]| -> Result<(), String> {
            crc = engine::rdb::crc64(crc, b);
            w.write_all(b).map_err(|e| e.to_string())
        };
        let mut head = Vec::new();
        if self.rdb {
            engine::rdb::write_header(
                &mut head,
                engine::now_ms() / 1000,
                engine::alloc::used_total(self.shards),
                self.kind == Kind::Rewrite,
            );
            if let Some(db) = self.stream_db {
                engine::rdb::write_repl_stream_db(&mut head, db);
            }
            for l in &self.functions {
                engine::rdb::write_function(&mut head, &l.code, self.compress);
            }
        } else {
            for l in &self.functions {
                engine::outbox::write_array(&mut head, &[b"FUNCTION".as_slice(), b"LOAD", &l.code]);
            }
        }
        put(w, &head)?;
        let (mut left, mut keys) = (self.shards, 0u64);
        while left > 0 {
            use std::sync::mpsc::RecvTimeoutError;
            match self.rx.recv_timeout(std::time::Duration::from_millis(100)) {
                Ok(SaveMsg::Fragment(b)) => put(w, &b)?,
                Ok(SaveMsg::Done { keys: k }) => {
                    keys += k;
                    left -= 1;
                }
                Err(RecvTimeoutError::Timeout) if self.abort.load(Ordering::Acquire) => {
                    return Err("the save was aborted (FLUSHALL)".into());
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err("a shard stopped before finishing its part".into())
                }
            }
        }
        if self.rdb {
            let mut tail = Vec::new();
            engine::rdb::write_eof(&mut tail);
            put(w, &tail)?;
            let sum = if self.checksum { crc } else { 0 };
            w.write_all(&sum.to_le_bytes()).map_err(|e| e.to_string())?;
        }
        Ok(keys)
    }
}

// ---------------------------------------------------------------------------
// The shard side
// ---------------------------------------------------------------------------

/// What [`tick`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Tick {
    /// No save runs on this shard.
    Idle,
    /// Work remains: poll without waiting.
    Busy,
    /// The writer is behind: wait a little before the next step.
    Throttled,
}

/// One step of this shard's part of a running background save; the
/// worker calls it once per loop iteration. Also hands over what the
/// iteration's commands copied before changing.
pub fn tick(p: &Persist, shard: &mut Shard, link: &mut Option<SaveLink>, busy: bool) -> Tick {
    if !shard.snapshot_running() {
        *link = None;
        return Tick::Idle;
    }
    if link.is_none() {
        *link = p.link();
    }
    let Some(l) = link.as_mut() else {
        // The save ended (failed) before this shard saw it.
        shard.snapshot_abort();
        return Tick::Idle;
    };
    if l.abort.load(Ordering::Acquire) {
        shard.snapshot_abort();
        *link = None;
        return Tick::Idle;
    }
    if let Some((b, open)) = l.pending.take() {
        match l.gate.try_send(&l.tx, shard.id, b, open) {
            Ok(()) => {}
            Err(GateErr::Wait(b)) => {
                l.pending = Some((b, open));
                return Tick::Throttled;
            }
            Err(GateErr::Gone) => {
                shard.snapshot_abort();
                *link = None;
                return Tick::Idle;
            }
        }
    }
    let done = shard.snapshot_step(if busy { STEP_BYTES_BUSY } else { STEP_BYTES });
    let (out, open) = shard.snapshot_take();
    if !out.is_empty() {
        match l.gate.try_send(&l.tx, shard.id, out, open) {
            Ok(()) => {}
            Err(GateErr::Wait(b)) => {
                l.pending = Some((b, open));
                return Tick::Throttled;
            }
            Err(GateErr::Gone) => {
                shard.snapshot_abort();
                *link = None;
                return Tick::Idle;
            }
        }
    }
    if !done {
        return Tick::Busy;
    }
    let keys = shard.snapshot_end();
    // The last message: waiting for room here is brief and bounded.
    let _ = l.tx.send(SaveMsg::Done { keys });
    *link = None;
    Tick::Idle
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

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
fn bgsave(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let schedule = match args.len() {
        1 => false,
        2 if eq_ic(args.get(1), "schedule") => true,
        _ => return Err(CmdError::Syntax),
    };
    let p = &c.server.persist;
    {
        let mut st = p.lock();
        match st.running.as_ref().map(|r| r.kind) {
            Some(Kind::Rewrite) if schedule => {
                st.bgsave_scheduled = true;
                return Ok(reply_only("Background saving scheduled"));
            }
            Some(Kind::Save | Kind::Bgsave) => {
                return Err(CmdError::err("Background save already in progress"))
            }
            _ => {}
        }
    }
    bgsave_coordinator(c.server)
}

/// BGREWRITEAOF: a snapshot written as the AOF's new base, begun at the
/// instant logging moves to a new incr file (see [`AofControl`]).
fn bgrewriteaof(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
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
    rewrite_with(server, waiting)
}

/// A rewrite; with `enable` (CONFIG SET appendonly yes) every shard also
/// starts logging at the snapshot instant.
fn rewrite_with(
    server: &Arc<ServerShared>,
    enable: bool,
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
        reply: "Background append only file rewriting started",
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
fn save(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let server = c.server.clone();
    let (begin_dirty, done) = server.persist.start(&server, Kind::Save)?;
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

// ---------------------------------------------------------------------------
// Start-up and shutdown
// ---------------------------------------------------------------------------

/// `key-load-delay` (a Redis test hook, set at start and by CONFIG SET):
/// read by every loader, which calls [`key_load_delay`] after each key or
/// AOF command.
static KEY_LOAD_DELAY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static KEY_LOAD_COUNT: AtomicU64 = AtomicU64::new(0);

/// Sets `key-load-delay`.
pub fn set_key_load_delay(v: i32) {
    KEY_LOAD_DELAY.store(v, Ordering::Relaxed);
}

/// Redis's `debugDelay(key_load_delay)` after a key is loaded: a positive
/// value sleeps that many microseconds; a negative `-n` sleeps 1 µs once
/// every `n` keys (Redis: with probability 1/n); 0 does nothing.
pub fn key_load_delay() {
    let v = KEY_LOAD_DELAY.load(Ordering::Relaxed);
    let us = match v {
        0 => return,
        v if v > 0 => v.unsigned_abs(),
        v => u32::from(
            KEY_LOAD_COUNT
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(u64::from(v.unsigned_abs())),
        ),
    };
    if us > 0 {
        std::thread::sleep(std::time::Duration::from_micros(u64::from(us)));
    }
}

/// Loads `path` into `shards` (each key to the shard its hash picks).
/// `Ok(None)` if there is no file. Keys already expired are skipped, as a
/// Redis primary does.
pub fn load(
    path: &Path,
    shards: &mut [Shard],
    limits: engine::EncLimits,
) -> Result<Option<(u64, u64)>, String> {
    Ok(load_as(path, shards, limits, false)?.map(|(k, e, _)| (k, e)))
}

/// [`load`]; `keep_expired` keeps keys already expired, as a Redis replica
/// does when it loads its master's payload (the master's DEL removes them).
/// Returns the keys loaded, those skipped as expired, and the payload's
/// `repl-stream-db`.
pub fn load_as(
    path: &Path,
    shards: &mut [Shard],
    limits: engine::EncLimits,
    keep_expired: bool,
) -> Result<Option<(u64, u64, Option<usize>)>, String> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("Fatal error loading the DB: {e}. Exiting.")),
    };
    let started = Instant::now();
    let r = std::io::BufReader::with_capacity(1 << 20, f);
    let mut reader = engine::rdb::Reader::new(r, limits)
        .map_err(|e| format!("Fatal error loading the DB {}: {e}", path.display()))?;
    let now = engine::now_ms();
    let n = shards.len();
    let (mut keys, mut expired) = (0u64, 0u64);
    let mut last_log = Instant::now();
    loop {
        let item = reader
            .next()
            .map_err(|e| format!("Fatal error loading the DB {}: {e}", path.display()))?;
        let Some(l) = item else { break };
        if !keep_expired && l.expire_at_ms != 0 && l.expire_at_ms < now {
            expired += 1;
            continue;
        }
        let s = &mut shards[crate::table::shard_of(&l.key, n)];
        if l.db >= s.dbs.len() {
            return Err(format!(
                "Fatal error loading the DB {}: database {} out of range (databases {})",
                path.display(),
                l.db,
                s.dbs.len()
            ));
        }
        let mut e = engine::OwnedEntry::new(l.value, now);
        if let Some(idle) = l.idle_s {
            e.access_s = ((now / 1000).saturating_sub(idle)) as u32;
        }
        if let Some(f) = l.freq {
            e.lfu_counter = f;
        }
        s.dbs[l.db].insert(&l.key, e, l.expire_at_ms);
        keys += 1;
        key_load_delay();
        if last_log.elapsed().as_secs() >= 2 {
            log(false, &format!("Loading RDB: {keys} keys loaded so far..."));
            last_log = Instant::now();
        }
    }
    crate::script::function::load_from_rdb(&reader.take_functions())
        .map_err(|e| format!("Fatal error loading the DB {}: {e}", path.display()))?;
    log(
        false,
        &format!("Done loading RDB, keys loaded: {keys}, keys expired: {expired}."),
    );
    log(
        false,
        &format!(
            "DB loaded from disk: {:.3} seconds",
            started.elapsed().as_secs_f64()
        ),
    );
    Ok(Some((keys, expired, reader.repl_stream_db())))
}

/// Writes `shards` to `path` at once, from one thread (the final save at
/// shutdown, after the workers stopped).
pub fn save_now(
    path: &Path,
    shards: &mut [Shard],
    compress: bool,
    checksum: bool,
) -> Result<u64, String> {
    let persist = Arc::new(Persist::new(shards.len(), Arc::new(AtomicU64::new(0))));
    let (tx, rx) = sync_channel(CHANNEL_DEPTH);
    let (done_tx, done_rx) = sync_channel(1);
    let job = WriterJob {
        path: path.to_path_buf(),
        kind: Kind::Save,
        rdb: true,
        on_done: None,
        checksum,
        shards: shards.len(),
        rx,
        abort: Arc::new(AtomicBool::new(false)),
        persist,
        begin_dirty: Arc::new(Vec::new()),
        background: false,
        done: done_tx,
        functions: crate::script::library::registry().codes(),
        compress,
        sink: Mutex::new(None),
        stream_db: None,
    };
    let writer = std::thread::spawn(move || job.run());
    let mut total = 0;
    // One shard after another: a shard's open fragments are followed by
    // its own next ones.
    for s in shards.iter_mut() {
        s.snapshot_abort();
        let keys = s.snapshot_all(compress, STEP_BYTES, |b, _| {
            let _ = tx.send(SaveMsg::Fragment(b));
        });
        total += keys;
        let _ = tx.send(SaveMsg::Done { keys });
    }
    drop(tx);
    let _ = writer.join();
    match done_rx.recv() {
        Ok(Ok(())) => Ok(total),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("the writer thread died".into()),
    }
}
