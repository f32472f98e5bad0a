//! BGREWRITEAOF for the multi-part AOF, on the snapshot layer
//! (`commands::persist`): the rewrite is a point-in-time snapshot written
//! as an RDB file (`<name>.<n>.base.rdb`, Redis 7's `aof-use-rdb-preamble`
//! form), begun at the instant logging moves to a new incr file.
//!
//! Manifest states, each written atomically, so a crash at any point
//! leaves a loadable file set:
//!
//! 1. before: `base n`, `incr m` (and older incrs if any);
//! 2. before the rewrite starts: the same plus `incr m+1` (empty until the
//!    switch), which receives every record from the snapshot instant on
//!    (the old files plus the new incr hold everything);
//! 3. after the base is written: `base n+1`, `incr m+1`; the old base and
//!    incrs are deleted.
//!
//! A failed rewrite stays in state 2, which is complete. The new incr is
//! created before the rewrite begins: if it cannot be, BGREWRITEAOF fails
//! at once (Redis's "Can't execute an AOF background rewriting").
//!
//! Turning the AOF on (`CONFIG SET appendonly yes`, Redis's
//! `AOF_WAIT_REWRITE`): the rewrite's instant is taken in the command
//! itself (under its whole-keyspace locks, as Redis forks there; inside
//! EXEC or beside another save the cron starts it later), so a script
//! that starts after the reply cannot hold it up (its hook steps the
//! snapshot of the shard it holds); records go to `temp-<name>.incr` from
//! the rewrite's instant; the manifest is not touched until the base is in
//! place, when the temporary incr is renamed into the manifest with it. A
//! failed rewrite deletes the temporary incr (the writer drops records
//! until the next rewrite's instant, whose snapshot holds them) and
//! another one is scheduled, retried by the cron (limited after three
//! consecutive failures, as Redis's aofRewriteLimited). Until one
//! succeeds the AOF on disk is whatever it was before (none, or a stale
//! set a restart with `appendonly yes` would load, as in Redis), and a
//! shutdown during the rewrite is refused without FORCE.

//!
//! The writer is also the replication stream's source (see `aof`): it
//! runs while `appendonly` is on *or* the stream is (replicas, or their
//! backlog); turning the AOF off with the stream on detaches the file and
//! keeps the writer, turning it on with the stream on attaches the file at
//! the rewrite's instant.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use commands::ops::disk::DiskStatus;
use commands::persist::AofControl;

use super::aof::{parse_manifest, write_manifest, Aof, ManifestFile, Paths};
use crate::log;

/// How long [`AofControl::flush`] waits for the queue to be written.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Rewriter {
    paths: Paths,
    /// The writer while `appendonly` is on (set at start, or by
    /// CONFIG SET appendonly) or the replication stream runs.
    aof: Mutex<Option<Arc<Aof>>>,
    /// `appendonly` is on (the writer has, or will have at the rewrite's
    /// instant, a file).
    appendonly: AtomicBool,
    /// The replication stream runs (see [`Rewriter::stream_writer`]).
    stream_on: AtomicBool,
    state: Mutex<State>,
    /// Where the writers it starts publish their write status.
    disk: &'static DiskStatus,
    /// How the writers it starts wake the server's threads.
    wakers: Arc<super::aof::Wakers>,
}

#[derive(Default)]
struct State {
    /// The manifest as last written.
    files: Vec<ManifestFile>,
    /// The rewrite in progress: its base and incr.
    next: Option<(ManifestFile, ManifestFile)>,
    /// The incr file the rewrite's switch moves the writer to, opened by
    /// `prepare`.
    next_file: Option<std::fs::File>,
    /// Size of the base when the last rewrite ended (or at start).
    base_size: u64,
    /// The AOF is being turned on (Redis's `AOF_WAIT_REWRITE`), from
    /// `CONFIG SET appendonly yes` until a rewrite succeeds: the manifest
    /// stays as it was (stale, or absent) and records go to a temporary
    /// incr file that the successful rewrite renames into the manifest;
    /// a failed one deletes it, and another rewrite is scheduled.
    enabling: bool,
}

impl Rewriter {
    pub fn new(
        paths: Paths,
        aof: Option<Arc<Aof>>,
        (disk, wakers): (&'static DiskStatus, &Arc<super::aof::Wakers>),
    ) -> Rewriter {
        let files = std::fs::read_to_string(paths.manifest())
            .ok()
            .and_then(|t| parse_manifest(&t).ok())
            .unwrap_or_default();
        let base_size = files
            .iter()
            .filter(|f| f.kind == 'b')
            .map(|f| file_len(&paths, f))
            .sum();
        Rewriter {
            paths,
            appendonly: AtomicBool::new(aof.is_some()),
            stream_on: AtomicBool::new(false),
            disk,
            wakers: wakers.clone(),
            aof: Mutex::new(aof),
            state: Mutex::new(State {
                files,
                base_size,
                ..State::default()
            }),
        }
    }

    /// The writer, when the AOF or the replication stream is on.
    pub fn current(&self) -> Option<Arc<Aof>> {
        self.aof.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The writer for the replication stream: the AOF's, or a new one
    /// with no file. The stream stays on until [`Rewriter::stream_stop`].
    pub fn stream_writer(&self) -> Arc<Aof> {
        let mut w = self.aof.lock().unwrap_or_else(|e| e.into_inner());
        self.stream_on.store(true, Ordering::SeqCst);
        let env = (self.disk, &self.wakers);
        w.get_or_insert_with(|| super::aof::start(None, config::AppendFsync::No, env))
            .clone()
    }

    /// The stream is off (every shard stopped recording for it): the
    /// writer goes unless the AOF needs it.
    pub fn stream_stop(&self) {
        let mut w = self.aof.lock().unwrap_or_else(|e| e.into_inner());
        self.stream_on.store(false, Ordering::SeqCst);
        if let Some(a) = w.as_ref() {
            a.set_feed(None);
        }
        if !self.appendonly.load(Ordering::SeqCst) {
            if let Some(a) = w.take() {
                a.stop();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Rewriter {
    /// Redis's temporary incr file while the AOF is turned on
    /// (`temp-<appendfilename>.incr`).
    fn temp_incr(&self) -> PathBuf {
        self.paths
            .dir
            .join(format!("temp-{}.incr", self.paths.name))
    }

    /// A fresh temporary incr file (a new inode: a writer still holding
    /// the old one cannot append to it).
    fn create_temp_incr(&self) -> Result<std::fs::File, String> {
        let path = self.temp_incr();
        let _ = std::fs::remove_file(&path);
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .map_err(|e| {
                format!(
                    "Can't open the append-only file temp-{}.incr: {e}",
                    self.paths.name
                )
            })
    }
}

fn file_len(p: &Paths, f: &ManifestFile) -> u64 {
    std::fs::metadata(p.dir.join(&f.name)).map_or(0, |m| m.len())
}

impl AofControl for Rewriter {
    fn enabled(&self) -> bool {
        self.appendonly.load(Ordering::SeqCst)
    }

    fn enable(&self) -> Result<(), String> {
        std::fs::create_dir_all(&self.paths.dir).map_err(|e| {
            format!(
                "Can't open or create append-only dir {}: {e}",
                self.paths.dir.display()
            )
        })?;
        // The rewrite that follows records into a fresh one from its
        // instant on; this one proves the file can be created.
        let file = self.create_temp_incr()?;
        self.lock().enabling = true;
        let mut w = self.aof.lock().unwrap_or_else(|e| e.into_inner());
        // A writer that feeds only the stream gets its file at the
        // rewrite's instant (the switch); until then the snapshot holds
        // what it writes.
        if w.is_none() {
            // The policy follows CONFIG SET appendfsync from the next refresh.
            *w = Some(super::aof::start(
                file,
                config::AppendFsync::Everysec,
                (self.disk, &self.wakers),
            ));
        }
        self.appendonly.store(true, Ordering::SeqCst);
        drop(w);
        log::notice(format_args!(
            "Background append only file rewriting for AOF enable"
        ));
        Ok(())
    }

    fn disable(&self) {
        self.appendonly.store(false, Ordering::SeqCst);
        let aof = {
            let mut w = self.aof.lock().unwrap_or_else(|e| e.into_inner());
            if self.stream_on.load(Ordering::SeqCst) {
                // The stream goes on without the file.
                if let Some(a) = w.as_ref() {
                    a.switch_file(None);
                }
                None
            } else {
                w.take()
            }
        };
        if let Some(a) = aof {
            a.stop();
        }
        log::notice(format_args!("Append only file turned off"));
        let mut st = self.lock();
        if st.enabling {
            // Never made it into the manifest.
            st.enabling = false;
            let _ = std::fs::remove_file(self.temp_incr());
        }
    }

    fn flush(&self, in_tx: bool) -> Result<(), String> {
        match self.current() {
            Some(a) if self.enabled() => a.flush_queued(FLUSH_WAIT, in_tx),
            _ => Ok(()),
        }
    }

    fn feed_queued(&self) {
        if let Some(a) = self.current() {
            a.commit_queued();
        }
    }

    fn load(
        &self,
        cfg: &config::Config,
        nshards: usize,
    ) -> Result<Option<commands::persist::LoadedAof>, String> {
        super::aof::load_from(&self.paths, cfg, nshards)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn prepare(&self, rdb: bool) -> Result<PathBuf, String> {
        std::fs::create_dir_all(&self.paths.dir).map_err(|e| {
            format!(
                "Can't open or create append-only dir {}: {e}",
                self.paths.dir.display()
            )
        })?;
        let mut st = self.lock();
        let seq = |k: char| super::aof_manifest::next_seq(&st.files, k);
        let base = ManifestFile {
            name: format!(
                "{}.{}.base.{}",
                self.paths.name,
                seq('b'),
                if rdb { "rdb" } else { "aof" }
            ),
            seq: seq('b'),
            kind: 'b',
        };
        let incr = ManifestFile {
            name: format!("{}.{}.incr.aof", self.paths.name, seq('i')),
            seq: seq('i'),
            kind: 'i',
        };
        // The new incr is created now: if it cannot be, the rewrite does
        // not start (Redis's openNewIncrAofForAppend).
        let file = if st.enabling {
            self.create_temp_incr()?
        } else {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(self.paths.dir.join(&incr.name))
                .map_err(|e| format!("Can't open the append-only file {}: {e}", incr.name))?
        };
        if !st.enabling {
            // Listed before any record reaches it (Redis persists the
            // manifest before its rewrite starts): were it listed only at
            // the switch and that write failed, the records after the
            // instant would sit in a file no manifest names. Empty until
            // the switch, after the old incr: complete as it stands.
            let mut files = st.files.clone();
            files.push(incr.clone());
            write_manifest(&self.paths, &files)
                .map_err(|e| format!("Can't persist the AOF manifest: {e}"))?;
            st.files = files;
        }
        let path = self.paths.dir.join(&base.name);
        st.next = Some((base, incr));
        st.next_file = Some(file);
        Ok(path)
    }

    fn switch(&self) {
        let Some(aof) = self.current() else { return };
        let mut st = self.lock();
        // The new incr is in the manifest already (see `prepare`), or,
        // while the AOF is being turned on, listed once the base is in
        // place (see `finish`).
        if let Some(file) = st.next_file.take() {
            aof.switch_incr(file);
        }
    }

    fn finish(&self, ok: bool) -> bool {
        let aof = self.current();
        let mut st = self.lock();
        // The switch runs at the snapshot's instant, once every shard has
        // begun, but the base can be complete before the coordinator gets
        // there (a small dataset, a busy machine). Switching only then
        // would come after the old incr is gone from the manifest and the
        // disk: the writer went on appending to the deleted file, and
        // every write since was lost at the next start. No write has run
        // since the instant (the rewrite's locks hold them until the
        // switch), so switching here splits the records at the same place.
        if let Some(file) = st.next_file.take() {
            if let (true, Some(a)) = (ok, &aof) {
                a.switch_incr(file);
            }
        }
        let Some((base, incr)) = st.next.take() else {
            return st.enabling;
        };
        if st.enabling {
            let done = ok
                && {
                    // The temporary incr becomes the manifest's incr (the
                    // writer keeps appending to the same file).
                    let to = self.paths.dir.join(&incr.name);
                    match std::fs::rename(self.temp_incr(), &to) {
                        Ok(()) => true,
                        Err(e) => {
                            log::warning(format_args!(
                            "Error trying to rename the temporary AOF incr file temp-{}.incr into {}: {e}",
                            self.paths.name, incr.name
                        ));
                            false
                        }
                    }
                };
            if !done {
                // As Redis: the temporary incr goes, nothing is listed,
                // and another rewrite is scheduled. Until it begins, the
                // writer drops what it gets (that rewrite's snapshot holds
                // it).
                log::notice(format_args!(
                    "Removing the temp incr aof file temp-{}.incr",
                    self.paths.name
                ));
                let _ = std::fs::remove_file(self.temp_incr());
                if let Some(a) = self.current() {
                    a.discard_until_switch();
                }
                return true;
            }
        } else if !ok {
            // Stay in state 2 (see the module doc): complete as it stands.
            return false;
        }
        let files = vec![base.clone(), incr];
        if let Err(e) = write_manifest(&self.paths, &files) {
            log::warning(format_args!("Can't write the AOF manifest: {e}"));
            if st.enabling {
                let _ = std::fs::remove_file(self.paths.dir.join(&files[1].name));
                if let Some(a) = self.current() {
                    a.discard_until_switch();
                }
                return true;
            }
            return false;
        }
        st.enabling = false;
        for old in st.files.iter().filter(|f| !files.contains(f)) {
            let _ = std::fs::remove_file(self.paths.dir.join(&old.name));
        }
        st.base_size = file_len(&self.paths, &base);
        st.files = files;
        false
    }

    fn write_ok(&self) -> bool {
        !self.enabled() || self.current().is_none_or(|a| a.last_write_ok())
    }

    fn waiting_rewrite(&self) -> bool {
        self.lock().enabling
    }

    fn sizes(&self) -> (u64, u64) {
        let st = self.lock();
        let total = st.files.iter().map(|f| file_len(&self.paths, f)).sum();
        (st.base_size, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::AppendFsync;

    /// The base of a small dataset can be complete before the coordinator
    /// reaches the snapshot's instant (where `switch` runs): the rewrite
    /// must still move the writer to the new incr before it drops the old
    /// one, or every write after it lands in a deleted file.
    #[test]
    fn a_rewrite_finished_before_its_instant_still_switches() {
        let dir = std::env::temp_dir().join(format!("tessera-rw-early-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let paths = Paths {
            dir: dir.join("appendonlydir"),
            name: "appendonly.aof".into(),
        };
        std::fs::create_dir_all(&paths.dir).unwrap();
        let old = ManifestFile {
            name: "appendonly.aof.1.incr.aof".into(),
            seq: 1,
            kind: 'i',
        };
        write_manifest(&paths, std::slice::from_ref(&old)).unwrap();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(paths.dir.join(&old.name))
            .unwrap();
        let disk = Box::leak(Box::default());
        let wakers = super::super::aof::Wakers::new(0);
        let aof = super::super::aof::start(file, AppendFsync::Always, (disk, &wakers));
        let r = Rewriter::new(
            Paths {
                dir: paths.dir.clone(),
                name: paths.name.clone(),
            },
            Some(aof.clone()),
            (disk, &wakers),
        );
        let base = r.prepare(true).unwrap();
        std::fs::write(&base, b"REDIS0010").unwrap();
        // The base is done; `switch` has not run.
        assert!(!r.finish(true));
        let manifest = std::fs::read_to_string(paths.manifest()).unwrap();
        assert_eq!(
            manifest,
            "file appendonly.aof.1.base.rdb seq 1 type b\n\
             file appendonly.aof.2.incr.aof seq 2 type i\n"
        );
        assert!(!paths.dir.join(&old.name).exists());
        // A write after the rewrite reaches the listed incr.
        let c = engine::outbox::chunk_of(0, &[b"SET", b"after", b"v"]);
        let target = aof.append(c, false);
        aof.wait_durable(target, "a write after the rewrite");
        let incr = std::fs::read(paths.dir.join("appendonly.aof.2.incr.aof")).unwrap();
        assert!(
            incr.windows(5).any(|w| w == b"after"),
            "the write after the rewrite is not in the listed incr"
        );
        // The instant's switch, arriving late, changes nothing.
        r.switch();
        aof.stop();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
