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
//!
//! # Module map
//!
//! This file holds the command table, the constants, the log sink, the
//! types the parts share (the save link, the AOF interface, the locked
//! state) and [`Persist`] itself (INFO figures, shutdown handling,
//! starting a writer, the `save` rules). The rest: [`shard`] (the shard
//! side: [`tick`] and the fragments' gate), [`writer`] (the writer
//! thread), [`flushall`] (FLUSHALL's abandoned save and the save of the
//! emptied data before its reply), [`commands`] (SAVE, BGSAVE,
//! BGREWRITEAOF and the coordinators for syncs, rewrites and the cron) and
//! [`startup`] (loading at start-up, the save at shutdown); their public
//! items are re-exported here.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crate::ctx::ServerShared;
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};

mod commands;
mod flushall;
mod reload;
mod shard;
mod startup;
mod writer;

pub use commands::{
    all_shards_then, bgsave_coordinator, cron_due, enable_rewrite, rewrite_coordinator,
    sync_coordinator,
};
use commands::{bgrewriteaof, bgsave, save};
pub(crate) use reload::{loadaof, reload};
use shard::Gate;
pub use shard::{tick, Tick};
pub use startup::{key_load_delay, load, load_aof_base, load_as, save_now, set_key_load_delay};
use writer::WriterJob;

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

/// A shard's link to the running save (see [`Persist::links`]).
pub struct SaveLink {
    /// The save it belongs to ([`Persist::save_gen`] when made).
    gen: u64,
    tx: SyncSender<SaveMsg>,
    gate: Arc<Gate>,
    abort: Arc<AtomicBool>,
    /// A fragment not sent yet, and whether it is open.
    pending: Option<(Vec<u8>, bool)>,
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
    /// Writes everything logged so far to the file, as Redis's
    /// `flushAppendOnlyFile(1)` (DEBUG LOADAOF); nothing while the AOF is
    /// off. `in_tx`: called inside EXEC, whose own records are written
    /// after it, as Redis's. `Err` says why it could not.
    fn flush(&self, in_tx: bool) -> Result<(), String>;
    /// Hands what the shards queued so far to the file and the replicas'
    /// stream now, from the calling thread, without waiting for the
    /// writer (whose next turn would do it) and for no open transaction.
    /// For INFO and ROLE: Redis propagates a write before it replies, so
    /// a client that read a write's reply reads a `master_repl_offset`
    /// that counts it (Redis's Tcl `wait_for_ofs_sync` relies on it, and
    /// so do tools comparing a replica's offset with its master's).
    fn feed_queued(&self) {}
    /// Reads the file set its manifest names into `nshards` fresh shards,
    /// replaying its commands with `cfg` (DEBUG LOADAOF); its function
    /// libraries come with it. `Ok(None)`: there is no manifest.
    fn load(&self, cfg: &config::Config, nshards: usize) -> Result<Option<LoadedAof>, String>;
    /// The runtime's own type, for its threads to find the writer.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// An AOF file set read into fresh shards (start-up, DEBUG LOADAOF).
pub struct LoadedAof {
    pub shards: Vec<engine::Shard>,
    /// Commands replayed.
    pub commands: u64,
    /// Keys loaded, and skipped as expired, from an RDB base (INFO's
    /// `rdb_last_load_keys_*`, which Redis sets when it loads one).
    pub rdb_keys: Option<(u64, u64)>,
    /// The function libraries it loaded (FUNCTION LOAD commands, its RDB
    /// base's), for the server's registry: the loader replays into a
    /// server of its own (see `script::library`).
    pub functions: crate::script::library::Libraries,
}

#[derive(Default)]
struct State {
    running: Option<Running>,
    /// BGSAVE refused because a rewrite ran (BGSAVE SCHEDULE), or the
    /// reverse: started by the cron when the other ends.
    bgsave_scheduled: bool,
    rewrite_scheduled: bool,
    /// The scheduled rewrite is one Redis would have started already
    /// (see [`Persist::request_aof_on`]): shown in progress until the
    /// cron tries to start it.
    rewrite_starting: bool,
    rewrite_ok: bool,
    /// CONFIG SET appendonly asked to turn the AOF off.
    aof_request: Option<bool>,
    /// [`Persist::rewrite_limited`]: the current delay and when it ends
    /// (unix seconds; 0: not waiting).
    limit_delay_min: u64,
    limit_until_s: u64,
    /// Why the running save or rewrite was abandoned on purpose (see
    /// `Persist::after_flushall`, [`Persist::kill_child`]), for its log
    /// line.
    kill_reason: &'static str,
    last_rewrite_time_s: Option<u64>,
    rewrites: u64,
    rewrite_failures: u64,
    last_ok: bool,
    last_bgsave_time_s: Option<u64>,
    last_try_s: u64,
    saves: u64,
    /// Background saves, rewrites and syncs started: where Redis forks
    /// (INFO `total_forks`; Tessera snapshots without a child process).
    forks: u64,
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
    /// Changes outside the shards: FUNCTION LOAD, DELETE, FLUSH and
    /// RESTORE (each adds one, as Redis's `server.dirty++`), and the
    /// figure when the last successful save began (its libraries were
    /// taken then: `WriterJob::functions`).
    functions_dirty: AtomicU64,
    functions_saved: AtomicU64,
    pub loading: AtomicBool,
    /// The last save failed (INFO `rdb_last_bgsave_status:err`): read on
    /// every write command, so kept apart from the locked state, in the
    /// server's disk status word (`Ops::disk`).
    disk: &'static crate::ops::disk::DiskStatus,
    /// The server's function libraries, which every RDB file carries
    /// (`Ops::functions`).
    functions: &'static crate::script::library::Registry,
    /// Unix seconds of the last successful save (LASTSAVE).
    lastsave_s: Arc<AtomicU64>,
    /// Per shard: its link to the running save. One link per shard,
    /// whoever steps it: the shard's loop ([`tick`], once per iteration)
    /// or, while a script holds the shard's thread, the script's hook
    /// (`script::run::snapshot_pass`), so a fragment kept back
    /// (`SaveLink::pending`) always goes before the shard's next one. The
    /// lock is taken only while the shard has a snapshot running, by one
    /// thread at a time (the one running the shard).
    links: Vec<Mutex<Option<SaveLink>>>,
    /// Bumped at every save's start: a link left from an earlier save
    /// (one that ended without its shard's loop seeing it) is dropped.
    save_gen: AtomicU64,
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
    pub forks: u64,
    pub loaded_keys: u64,
    pub expired_on_load: u64,
    pub loading: bool,
}

impl Persist {
    pub fn new(
        nshards: usize,
        lastsave_s: Arc<AtomicU64>,
        disk: &'static crate::ops::disk::DiskStatus,
        functions: &'static crate::script::library::Registry,
    ) -> Self {
        Persist {
            state: Mutex::new(State {
                last_ok: true,
                rewrite_ok: true,
                ..State::default()
            }),
            in_progress: AtomicBool::new(false),
            dirty: (0..nshards).map(|_| AtomicU64::new(0)).collect(),
            saved_dirty: (0..nshards).map(|_| AtomicU64::new(0)).collect(),
            functions_dirty: AtomicU64::new(0),
            functions_saved: AtomicU64::new(0),
            loading: AtomicBool::new(false),
            disk,
            functions,
            lastsave_s,
            links: (0..nshards).map(|_| Mutex::new(None)).collect(),
            save_gen: AtomicU64::new(0),
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
        let functions = self
            .functions_dirty
            .load(Ordering::Relaxed)
            .saturating_sub(self.functions_saved.load(Ordering::Relaxed));
        self.dirty
            .iter()
            .zip(&self.saved_dirty)
            .map(|(d, s)| {
                d.load(Ordering::Relaxed)
                    .saturating_sub(s.load(Ordering::Relaxed))
            })
            .sum::<u64>()
            + functions
    }

    /// A function library change (FUNCTION LOAD, DELETE, FLUSH,
    /// RESTORE): one more change for `rdb_changes_since_last_save` and
    /// the `save` rules, as Redis's `server.dirty++` in each.
    pub fn function_changed(&self) {
        self.functions_dirty.fetch_add(1, Ordering::Relaxed);
    }

    /// A save that wrote every change counted so far succeeded (the
    /// libraries' part; the shards' is theirs).
    fn functions_all_saved(&self) {
        let now = self.functions_dirty.load(Ordering::Relaxed);
        self.functions_saved.store(now, Ordering::Relaxed);
    }

    pub fn in_progress(&self) -> bool {
        self.in_progress.load(Ordering::Acquire)
    }

    /// LASTSAVE's answer: when the last successful save ended (unix s).
    pub fn lastsave_s(&self) -> u64 {
        self.lastsave_s.load(Ordering::Relaxed)
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
            rewrite_in_progress: running(Kind::Rewrite).is_some() || st.rewrite_starting,
            rewrite_scheduled: st.rewrite_scheduled && !st.rewrite_starting,
            rewrite_ok: st.rewrite_ok,
            last_rewrite_time_s: st.last_rewrite_time_s,
            current_rewrite_time_s: running(Kind::Rewrite)
                .map(|r| r.started.elapsed().as_secs())
                .or(st.rewrite_starting.then_some(0)),
            // Redis counts its rewrite (and the fork) when it starts.
            rewrites: st.rewrites + u64::from(st.rewrite_starting),
            rewrite_failures: st.rewrite_failures,
            changes: self.changes(),
            last_ok: st.last_ok,
            last_bgsave_time_s: st.last_bgsave_time_s,
            current_time_s: running(Kind::Bgsave).map(|r| r.started.elapsed().as_secs()),
            saves: st.saves,
            forks: st.forks + u64::from(st.rewrite_starting),
            loaded_keys: st.loaded_keys,
            expired_on_load: st.expired_on_load,
            loading: self.loading.load(Ordering::Relaxed),
        }
    }

    /// What runs in the background: a save (BGSAVE, a save rule) or an AOF
    /// rewrite.
    pub fn child(&self) -> Child {
        let st = self.lock();
        match st.running.as_ref().map(|r| r.kind) {
            // The rewrite CONFIG SET appendonly yes asked for, which Redis
            // would have forked in the command (see `request_aof_on`):
            // SHUTDOWN refuses to exit before it as before a running one.
            None if st.rewrite_starting => Child::Rewrite,
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
            // A rewrite about to start (see `child`) never will.
            st.rewrite_starting = false;
            st.rewrite_scheduled = false;
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
        let mut st = self.lock();
        st.aof_request = Some(false);
        st.rewrite_starting = false;
    }

    /// CONFIG SET appendonly yes, once the AOF's writer started on its
    /// temporary incr file ([`AofControl::enable`]), when the command
    /// cannot begin the rewrite itself ([`enable_rewrite`]): the rewrite
    /// that completes it is scheduled (the cron starts it when nothing
    /// else runs); a pending turn-off is cancelled. Redis's startAppendOnly
    /// forks that rewrite at once unless it runs inside EXEC (`in_exec`)
    /// or another background save runs, when it is only scheduled: INFO
    /// shows it in progress from here in the first case (Redis's Tcl
    /// tests wait for `aof_rewrite_in_progress` to drop back to 0 right
    /// after CONFIG SET), though the cron starts it at its next tick.
    pub fn request_aof_on(&self, in_exec: bool) {
        let mut st = self.lock();
        st.aof_request = None;
        st.rewrite_scheduled = true;
        st.rewrite_starting =
            !in_exec && st.running.as_ref().is_none_or(|r| r.kind == Kind::Rewrite);
    }

    /// CONFIG SET appendonly yes, outside EXEC, once the AOF's writer
    /// started: true when nothing else runs, so the rewrite begins in the
    /// command ([`enable_rewrite`]); a pending turn-off is cancelled.
    /// False (changing nothing): [`Persist::request_aof_on`] schedules it.
    fn take_aof_on(&self) -> bool {
        let mut st = self.lock();
        if st.running.is_some() {
            return false;
        }
        st.aof_request = None;
        true
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

    /// The last save failed (whether that refuses writes:
    /// `Ops::disk_error`).
    #[inline]
    pub fn save_failed(&self) -> bool {
        self.disk.save_failed()
    }

    /// The link a shard thread uses for the running save, if one runs.
    fn link(&self) -> Option<SaveLink> {
        let st = self.lock();
        let r = st.running.as_ref()?;
        Some(SaveLink {
            gen: self.save_gen.load(Ordering::Acquire),
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
        if kind == Kind::Rewrite {
            // Started now, or failing to: INFO shows what happened.
            st.rewrite_starting = false;
        }
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
            timestamp: cfg.aof_timestamp_enabled,
            on_done,
            checksum: cfg.rdbchecksum,
            shards: self.dirty.len(),
            parts: self.dirty.len(),
            rx,
            abort: abort.clone(),
            persist: self.clone(),
            begin_dirty: begin_dirty.clone(),
            background,
            done: done_tx,
            functions: self.functions.codes(),
            functions_dirty: self.functions_dirty.load(Ordering::Relaxed),
            compress: cfg.rdbcompression,
            sink: Mutex::new(sink),
            stream_db,
        };
        std::thread::Builder::new()
            .name("rdb-writer".into())
            .spawn(move || job.run())
            .map_err(|e| CmdError::err(format!("Can't save in background: {e}")))?;
        if background {
            st.forks += 1;
        }
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
        self.save_gen.fetch_add(1, Ordering::AcqRel);
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
