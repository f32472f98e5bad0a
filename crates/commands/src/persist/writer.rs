//! The writer thread: puts the RDB header first, appends the shards'
//! fragments in arrival order with a running CRC64, writes EOF and the
//! checksum, then fsyncs and renames the temp file over its target (or
//! streams the bytes to a diskless sync's sink), and records the outcome.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{log, Kind, OnDone, Persist, SaveMsg};

/// The writer thread's work.
pub(super) struct WriterJob {
    pub(super) path: PathBuf,
    pub(super) kind: Kind,
    /// An RDB file (header, EOF, checksum); otherwise commands only (an
    /// AOF base without the RDB preamble).
    pub(super) rdb: bool,
    /// Commands only, starting with a `#TS:` line (`aof-timestamp-enabled`:
    /// Redis's rewriteAppendOnlyFileRio).
    pub(super) timestamp: bool,
    /// Called with the outcome once the file is in place (rewrites).
    pub(super) on_done: Option<OnDone>,
    pub(super) checksum: bool,
    /// The number of shards (whose memory the header reports).
    pub(super) shards: usize,
    /// The shards' parts to wait for (each ends with `SaveMsg::Done`):
    /// every shard's, or none for a save of no keys ([`WriterJob::empty`]).
    pub(super) parts: usize,
    pub(super) rx: Receiver<SaveMsg>,
    pub(super) abort: Arc<AtomicBool>,
    pub(super) persist: Arc<Persist>,
    pub(super) begin_dirty: Arc<Vec<AtomicU64>>,
    pub(super) background: bool,
    pub(super) done: SyncSender<Result<(), String>>,
    /// The function libraries when the snapshot began, written before the
    /// data (RDB `FUNCTION2` opcodes, or FUNCTION LOAD commands in an AOF
    /// base without the RDB preamble, as Redis's `rewriteFunctions`).
    pub(super) functions: Vec<Arc<crate::script::library::Library>>,
    /// `Persist::functions_dirty` when `functions` were taken.
    pub(super) functions_dirty: u64,
    pub(super) compress: bool,
    /// [`Kind::Sync`]: where the RDB goes instead of a file.
    pub(super) sink: Mutex<Option<Box<dyn Write + Send>>>,
    /// A replica's sync: the database its master's stream is in (the
    /// `repl-stream-db` AUX field).
    pub(super) stream_db: Option<usize>,
}

impl WriterJob {
    /// A save of no keys to `dbfilename` (FLUSHALL's, see `flushall`): the
    /// header and the function libraries, written on the caller's thread
    /// by [`WriterJob::write`]; the caller records the outcome.
    pub(super) fn empty(persist: &Arc<Persist>, server: &crate::ctx::ServerShared) -> WriterJob {
        let cfg = server.config();
        let (_, rx) = std::sync::mpsc::sync_channel(0);
        let (done, _) = std::sync::mpsc::sync_channel(1);
        WriterJob {
            path: cfg.rdb_path(),
            kind: Kind::Save,
            rdb: true,
            timestamp: false,
            on_done: None,
            checksum: cfg.rdbchecksum,
            shards: persist.dirty.len(),
            parts: 0,
            rx,
            abort: Arc::default(),
            persist: persist.clone(),
            begin_dirty: Arc::default(),
            background: false,
            done,
            functions: persist.functions.codes(),
            functions_dirty: persist.functions_dirty.load(Ordering::Relaxed),
            compress: cfg.rdbcompression,
            sink: Mutex::new(None),
            stream_db: None,
        }
    }

    pub(super) fn run(mut self) {
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
                self.persist.disk.set_save_failed(res.is_err());
            }
            if self.background {
                st.last_bgsave_time_s = Some(started.elapsed().as_secs());
            }
            if res.is_ok() {
                self.persist.lastsave_s.store(now_s, Ordering::Relaxed);
                for (s, b) in self.persist.saved_dirty.iter().zip(self.begin_dirty.iter()) {
                    s.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                self.persist
                    .functions_saved
                    .store(self.functions_dirty, Ordering::Relaxed);
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
    pub(super) fn write(&self) -> Result<u64, String> {
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
            if self.timestamp {
                let now = engine::now_ms() / 1000;
                head.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
            }
            for l in &self.functions {
                engine::outbox::write_array(&mut head, &[b"FUNCTION".as_slice(), b"LOAD", &l.code]);
            }
        }
        put(w, &head)?;
        let (mut left, mut keys) = (self.parts, 0u64);
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
