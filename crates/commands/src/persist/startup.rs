//! Start-up and shutdown: loading a snapshot (with the `key-load-delay`
//! test hook) and the synchronous save at shutdown.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use engine::Shard;

use super::{log, Kind, Persist, SaveMsg, WriterJob, CHANNEL_DEPTH, STEP_BYTES};

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

/// Loads `path` into `shards` (each key to the shard its hash picks), its
/// function libraries into the server of `ops`. `Ok(None)` if there is no
/// file. Keys already expired are skipped, as a Redis primary does.
pub fn load(
    path: &Path,
    shards: &mut [Shard],
    limits: engine::EncLimits,
    ops: &'static crate::ops::Ops,
) -> Result<Option<(u64, u64)>, String> {
    Ok(load_as(path, shards, limits, false, ops)?.map(|(k, e, _)| (k, e)))
}

/// [`load`]; `keep_expired` keeps keys already expired, as a Redis replica
/// does when it loads its master's payload (the master's DEL removes them).
/// Returns the keys loaded, those skipped as expired, and the payload's
/// `repl-stream-db`. Function libraries go to the registry of the server
/// of `ops`; one already there fails the load.
pub fn load_as(
    path: &Path,
    shards: &mut [Shard],
    limits: engine::EncLimits,
    keep_expired: bool,
    ops: &'static crate::ops::Ops,
) -> Result<Option<(u64, u64, Option<usize>)>, String> {
    let started = Instant::now();
    let Some(r) = read_rdb(path, shards, limits, keep_expired)? else {
        return Ok(None);
    };
    if let Some(e) = r.failed {
        return Err(e);
    }
    crate::script::function::load_from_rdb(ops, &r.functions, false)
        .map_err(|e| format!("Fatal error loading the DB {}: {e}", path.display()))?;
    r.log_done();
    log(
        false,
        &format!(
            "DB loaded from disk: {:.3} seconds",
            started.elapsed().as_secs_f64()
        ),
    );
    Ok(Some((r.keys, r.expired, r.repl_stream_db)))
}

/// Loads the RDB part of an append-only file at `path` (a `.base.rdb`, or
/// an old-style AOF's preamble) into `shards`. Keys already expired are
/// kept, as Redis's `rdbLoad` with `RDBFLAGS_AOF_PREAMBLE` keeps them (they
/// expire once loaded). Returns the keys loaded and the offset where the
/// RDB ends (an old-style AOF's command tail starts there).
pub fn load_aof_base(
    path: &Path,
    shards: &mut [Shard],
    limits: engine::EncLimits,
    ops: &'static crate::ops::Ops,
) -> Result<(u64, u64), String> {
    let Some(r) = read_rdb(path, shards, limits, true)? else {
        return Err(format!(
            "Fatal error loading the DB {}: No such file or directory",
            path.display()
        ));
    };
    if let Some(e) = r.failed {
        return Err(e);
    }
    crate::script::function::load_from_rdb(ops, &r.functions, false)
        .map_err(|e| format!("Fatal error loading the DB {}: {e}", path.display()))?;
    r.log_done();
    Ok((r.keys, r.end))
}

/// What [`read_rdb`] read.
pub(crate) struct RdbRead {
    /// Keys loaded, and skipped as expired (INFO `rdb_last_load_keys_*`:
    /// Redis counts them as it goes, so they stand after a failure too).
    pub keys: u64,
    pub expired: u64,
    pub repl_stream_db: Option<usize>,
    /// The function libraries' codes, in file order (not installed).
    pub functions: Vec<Vec<u8>>,
    /// Why the file could not be read to its end: the keys before the
    /// fault are in the shards, as Redis's `rdbLoad` leaves them.
    pub failed: Option<String>,
    /// Bytes of the file the RDB took (header to checksum).
    pub end: u64,
}

/// Reads the RDB file at `path` into `shards` (each key to the shard its
/// hash picks; keys already expired skipped unless `keep_expired`).
/// `Ok(None)`: there is no file. `Err`: it could not be opened, or its
/// header is not an RDB's (nothing was read).
pub(crate) fn read_rdb(
    path: &Path,
    shards: &mut [Shard],
    limits: engine::EncLimits,
    keep_expired: bool,
) -> Result<Option<RdbRead>, String> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("Fatal error loading the DB: {e}. Exiting.")),
    };
    let r = std::io::BufReader::with_capacity(1 << 20, f);
    let mut reader = engine::rdb::Reader::new(r, limits)
        .map_err(|e| format!("Fatal error loading the DB {}: {e}", path.display()))?;
    let now = engine::now_ms();
    let n = shards.len();
    let mut out = RdbRead {
        keys: 0,
        expired: 0,
        repl_stream_db: None,
        functions: Vec::new(),
        failed: None,
        end: 0,
    };
    let mut last_log = Instant::now();
    loop {
        let l = match reader.next() {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => {
                out.failed = Some(format!(
                    "Fatal error loading the DB {}: {e}",
                    path.display()
                ));
                break;
            }
        };
        if !keep_expired && l.expire_at_ms != 0 && l.expire_at_ms < now {
            out.expired += 1;
            continue;
        }
        let s = &mut shards[crate::table::shard_of(&l.key, n)];
        if l.db >= s.dbs.len() {
            out.failed = Some(format!(
                "Fatal error loading the DB {}: database {} out of range (databases {})",
                path.display(),
                l.db,
                s.dbs.len()
            ));
            break;
        }
        let mut e = engine::OwnedEntry::new(l.value, now);
        if let Some(idle) = l.idle_s {
            e.access_s = ((now / 1000).saturating_sub(idle)) as u32;
        }
        if let Some(f) = l.freq {
            e.lfu_counter = f;
        }
        s.dbs[l.db].insert(&l.key, e, l.expire_at_ms);
        out.keys += 1;
        key_load_delay();
        if last_log.elapsed().as_secs() >= 2 {
            log(
                false,
                &format!("Loading RDB: {} keys loaded so far...", out.keys),
            );
            last_log = Instant::now();
        }
    }
    out.functions = reader.take_functions();
    out.repl_stream_db = reader.repl_stream_db();
    out.end = reader.offset();
    Ok(Some(out))
}

impl RdbRead {
    /// Redis's log line once a load succeeded (libraries installed too).
    pub(crate) fn log_done(&self) {
        log(
            false,
            &format!(
                "Done loading RDB, keys loaded: {}, keys expired: {}.",
                self.keys, self.expired
            ),
        );
    }
}

/// Writes `shards` and the libraries of `functions` to `path` at once,
/// from one thread (the final save at shutdown, after the workers
/// stopped).
pub fn save_now(
    path: &Path,
    shards: &mut [Shard],
    (compress, checksum): (bool, bool),
    functions: &'static crate::script::library::Registry,
) -> Result<u64, String> {
    // The outcome goes nowhere: the process is exiting (the caller gets
    // it as the result).
    static UNREAD: crate::ops::disk::DiskStatus = crate::ops::disk::DiskStatus::new();
    let persist = Arc::new(Persist::new(
        shards.len(),
        Arc::new(AtomicU64::new(0)),
        &UNREAD,
        functions,
    ));
    let (tx, rx) = sync_channel(CHANNEL_DEPTH);
    let (done_tx, done_rx) = sync_channel(1);
    let job = WriterJob {
        path: path.to_path_buf(),
        kind: Kind::Save,
        rdb: true,
        timestamp: false,
        on_done: None,
        checksum,
        shards: shards.len(),
        parts: shards.len(),
        rx,
        abort: Arc::new(AtomicBool::new(false)),
        persist,
        begin_dirty: Arc::new(Vec::new()),
        background: false,
        done: done_tx,
        functions: functions.codes(),
        functions_dirty: 0,
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
