//! FLUSHALL's side of persistence, as Redis 7.0's `flushAllDataAndResetRDB`:
//! a background save in progress is abandoned (the data it writes is gone)
//! and, with `save` rules set, the emptied data is saved at once, before
//! the client's reply (Redis calls `rdbSave` inside the command), so the
//! dump on disk is empty when FLUSHALL returns, LASTSAVE moves and
//! `rdb_changes_since_last_save` is 0 (Redis's unit/other, "FLUSHALL should
//! reset the dirty counter to 0 if we enable save").
//!
//! The save needs no shard: what it stands for is no keys, as at the
//! flush's instant; each shard's change counter right after its flush is
//! what the save covers (writes that came between the flush and the save
//! are changes since it). It runs on the calling thread, as Redis's does,
//! holding the persistence lock so that no save or rewrite starts
//! meanwhile (a save would share its temp file); a save being abandoned,
//! or a SAVE's writer finishing, is waited for first (a writer sees the
//! abort within 100 ms), bounded by [`WRITER_WAIT`]: past it the emptied
//! data is left to the next background save.
//!
//! Rejected: a background save scheduled from the cron (what Tessera did):
//! the dump still held the flushed keys when FLUSHALL returned, so a crash
//! right after brought them back, and INFO's counters said so.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{log, Kind, Persist, WriterJob};
use crate::ctx::ServerShared;

/// How long FLUSHALL waits for another save's writer to end.
const WRITER_WAIT: Duration = Duration::from_secs(10);

impl Persist {
    /// FLUSHALL, once every shard emptied its databases: abandons a running
    /// background save and, with `save` rules set, saves the emptied data
    /// before returning. `flushed_dirty`: each shard's change counter right
    /// after its flush, by shard id.
    pub fn after_flushall(self: &Arc<Self>, server: &ServerShared, flushed_dirty: &[u64]) {
        self.abandon_bgsave();
        if server.config().save.is_empty() {
            return;
        }
        let deadline = Instant::now() + WRITER_WAIT;
        let mut st = loop {
            let st = self.lock();
            // A writer of dump.rdb's temp file (a rewrite or a diskless
            // sync writes elsewhere).
            let writing = st
                .running
                .as_ref()
                .is_some_and(|r| matches!(r.kind, Kind::Bgsave | Kind::Save));
            if !writing {
                break st;
            }
            drop(st);
            if Instant::now() >= deadline {
                log(
                    true,
                    "FLUSHALL: the running save did not end in time; the emptied data will be \
                     saved in the background",
                );
                self.lock().bgsave_scheduled = true;
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // Redis's rdbSave: on success the change counter restarts, LASTSAVE
        // moves and the last save's status is ok; a failure changes neither.
        match WriterJob::empty(self, server).write() {
            Ok(_) => {
                log(false, "DB saved on disk");
                self.lastsave_s
                    .store(engine::now_ms() / 1000, Ordering::Relaxed);
                for (s, &d) in self.saved_dirty.iter().zip(flushed_dirty) {
                    s.store(d, Ordering::Relaxed);
                }
                self.functions_all_saved();
                st.last_ok = true;
                self.disk.set_save_failed(false);
            }
            Err(e) => log(true, &format!("Error saving DB on disk: {e}")),
        }
    }

    /// A replica replaced its data with its master's (see
    /// `replica::load_coordinator`): a background save in progress is
    /// abandoned, as by FLUSHALL, and with `save` rules set the new data
    /// is saved in the background next (from the cron).
    pub fn after_replica_load(&self, server: &ServerShared) {
        self.abandon_bgsave();
        if !server.config().save.is_empty() {
            self.lock().bgsave_scheduled = true;
        }
    }

    /// Abandons a running background save (Redis's killRDBChild): not a
    /// failure, its log line names FLUSHALL.
    fn abandon_bgsave(&self) {
        let mut st = self.lock();
        if let Some(r) = st.running.as_ref().filter(|r| r.kind == Kind::Bgsave) {
            r.abort.store(true, Ordering::Release);
            st.kill_reason = "FLUSHALL";
        }
    }
}
