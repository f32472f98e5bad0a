//! BGREWRITEAOF for the multi-part AOF, on the snapshot layer
//! (`commands::persist`): the rewrite is a point-in-time snapshot written
//! as an RDB file (`<name>.<n>.base.rdb`, Redis 7's `aof-use-rdb-preamble`
//! form), begun at the instant logging moves to a new incr file.
//!
//! Manifest states, each written atomically, so a crash at any point
//! leaves a loadable file set:
//!
//! 1. before: `base n`, `incr m` (and older incrs if any);
//! 2. at the switch: the same plus `incr m+1`, which receives every record
//!    from the snapshot instant on (the old files plus the new incr hold
//!    everything);
//! 3. after the base is written: `base n+1`, `incr m+1`; the old base and
//!    incrs are deleted.
//!
//! A failed rewrite stays in state 2, which is complete.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use commands::persist::AofControl;

use super::aof::{parse_manifest, write_manifest, Aof, ManifestFile, Paths};
use crate::log;

pub struct Rewriter {
    paths: Paths,
    /// The writer while `appendonly` is on (set at start, or by
    /// CONFIG SET appendonly).
    aof: Mutex<Option<Arc<Aof>>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The manifest as last written.
    files: Vec<ManifestFile>,
    /// The rewrite in progress: its base and incr.
    next: Option<(ManifestFile, ManifestFile)>,
    /// Size of the base when the last rewrite ended (or at start).
    base_size: u64,
    /// The AOF is being turned on: the manifest's files are stale until
    /// the rewrite's base is in place, so the switch does not list them.
    enabling: bool,
}

impl Rewriter {
    pub fn new(paths: Paths, aof: Option<Arc<Aof>>) -> Rewriter {
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
            aof: Mutex::new(aof),
            state: Mutex::new(State {
                files,
                next: None,
                base_size,
                enabling: false,
            }),
        }
    }

    /// The writer, when the AOF is on.
    pub fn current(&self) -> Option<Arc<Aof>> {
        self.aof.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn file_len(p: &Paths, f: &ManifestFile) -> u64 {
    std::fs::metadata(p.dir.join(&f.name)).map_or(0, |m| m.len())
}

impl AofControl for Rewriter {
    fn enabled(&self) -> bool {
        self.current().is_some()
    }

    fn enable(&self) -> Result<(), String> {
        // Named again by the rewrite that follows.
        self.prepare(true)?;
        let incr = {
            let mut st = self.lock();
            st.enabling = true;
            st.next.clone().map(|(_, i)| i)
        };
        let Some(incr) = incr else {
            return Err("no incr file named".into());
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.paths.dir.join(&incr.name))
            .map_err(|e| format!("Can't open the append-only file {}: {e}", incr.name))?;
        // The policy follows CONFIG SET appendfsync from the next refresh.
        let aof = super::aof::start(file, config::AppendFsync::Everysec);
        *self.aof.lock().unwrap_or_else(|e| e.into_inner()) = Some(aof);
        log::notice(format_args!(
            "Background append only file rewriting for AOF enable"
        ));
        Ok(())
    }

    fn disable(&self) {
        let aof = self.aof.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(a) = aof {
            a.stop();
            log::notice(format_args!("Append only file turned off"));
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn prepare(&self, rdb: bool) -> Result<PathBuf, String> {
        std::fs::create_dir_all(&self.paths.dir)
            .map_err(|e| format!("Can't create the append-only dir: {e}"))?;
        let mut st = self.lock();
        let seq = |k: char| {
            st.files
                .iter()
                .filter(|f| f.kind == k)
                .map(|f| f.seq)
                .max()
                .unwrap_or(0)
                + 1
        };
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
        let path = self.paths.dir.join(&base.name);
        st.next = Some((base, incr));
        Ok(path)
    }

    fn switch(&self) {
        let Some(aof) = self.current() else { return };
        let mut st = self.lock();
        let Some((_, incr)) = st.next.clone() else {
            return;
        };
        if st.enabling {
            // The writer already appends to the new incr file.
            return;
        }
        aof.switch_incr(self.paths.dir.join(&incr.name));
        let mut files = st.files.clone();
        files.push(incr);
        match write_manifest(&self.paths, &files) {
            Ok(()) => st.files = files,
            Err(e) => log::warning(format_args!("Can't write the AOF manifest: {e}")),
        }
    }

    fn finish(&self, ok: bool) {
        let mut st = self.lock();
        let Some((base, incr)) = st.next.take() else {
            return;
        };
        st.enabling = false;
        if !ok {
            // Stay in state 2 (see the module doc): complete as it stands.
            return;
        }
        let files = vec![base.clone(), incr];
        if let Err(e) = write_manifest(&self.paths, &files) {
            log::warning(format_args!("Can't write the AOF manifest: {e}"));
            return;
        }
        for old in st.files.iter().filter(|f| !files.contains(f)) {
            let _ = std::fs::remove_file(self.paths.dir.join(&old.name));
        }
        st.base_size = file_len(&self.paths, &base);
        st.files = files;
    }

    fn write_ok(&self) -> bool {
        self.current().is_none_or(|a| a.last_write_ok())
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
