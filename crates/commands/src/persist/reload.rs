//! DEBUG LOADAOF and DEBUG RELOAD: the dataset and the function
//! libraries replaced with (or, RELOAD NOFLUSH, merged with) what a file
//! on disk holds, as Redis 7.0's `debug.c` does. One coordinator serves
//! both; they differ in what is read and in how it meets the live data.
//!
//! Redis's LOADAOF: `flushAppendOnlyFile(1)` when the AOF is on;
//! `emptyData` (every database and the function libraries); the manifest
//! read from disk again and its files loaded (`loadAppendOnlyFiles`); a
//! load that fails, or that finds no AOF at all (`appendonly no` and never
//! on, so no manifest: `AOF_NOT_EXIST`), ends the process with `exit(1)`;
//! then `server.dirty = 0` (the command is not propagated, and
//! `rdb_changes_since_last_save` reads 0), the log line "Append Only File
//! loaded by DEBUG LOADAOF", `+OK`. With the AOF turned off after it was
//! on, the files left on disk are what is loaded: writes since are gone.
//!
//! Redis's RELOAD [MERGE] [NOFLUSH] [NOSAVE]: `rdbSave` to `dbfilename`
//! unless NOSAVE (a failure replies Redis's bare `-ERR`; the save sets
//! the change counter to 0 and LASTSAVE, but is not counted in
//! `rdb_saves`); `emptyData` unless NOFLUSH; `rdbLoad`, where MERGE
//! (`RDBFLAGS_ALLOW_DUP`) lets a key or library of the file replace the
//! live one. A load that fails replies "Error trying to load the RDB dump"
//! and leaves what it did (the data emptied, what was read before the
//! fault loaded; a missing file is such a failure); a library already
//! there without MERGE fails it before any key (the file holds libraries
//! first); a key already there without MERGE is Redis's `serverPanic`
//! "Duplicated key found in RDB file": the process ends. Then the log line
//! "DB reloaded by DEBUG RELOAD" and `+OK`. The change counter is left as
//! the save (or, NOSAVE, the commands before) left it.
//!
//! Here, under whole-keyspace Write locks (no command runs on any shard
//! meanwhile, and each shard queued its AOF records before it granted its
//! lock), once every lock is held:
//! 1. LOADAOF writes the AOF's queue to the file
//!    ([`super::AofControl::flush`]); inside EXEC, up to the transaction's
//!    own records, which Redis writes after EXEC: the reload does not see
//!    the transaction's earlier writes, and the file gets them after it.
//!    RELOAD saves with SAVE's jobs (`commands::save_plan`), a step of
//!    its own, and reads the outcome in the next.
//! 2. The file is read into fresh shards on a thread of its own (the
//!    replay's server, VMs and allocation slot are not the home thread's;
//!    INFO says `loading:1` meanwhile): LOADAOF replays it through the
//!    normal handlers as at start-up, RELOAD reads the RDB as at start-up
//!    (`startup::read_rdb`). The function registry is emptied first
//!    (unless NOFLUSH); the file's libraries are installed before the
//!    data moves.
//! 3. Each shard is sent a job that exchanges its databases' contents
//!    with the fresh ones (`engine::Db::swap_contents`, as a replica's
//!    full sync: watched keys in either are signalled) and forgets its
//!    tracked keys; RELOAD NOFLUSH instead moves the fresh keys into the
//!    live databases (each insert signals the key's watchers).
//!
//! The last step sets the change counters from each shard's counter right
//! after its job, records what was loaded (INFO `rdb_last_load_keys_*`),
//! sends tracking clients a null invalidation when the data was emptied
//! (Redis's `signalFlushedDb`), logs and replies. A flush that fails (a
//! write error, or the queue not written within the runtime's bound: a
//! transaction that released its locks but has not finished holds the
//! queue up until its home thread finishes it) fails LOADAOF before
//! anything changed.
//!
//! Cost: LOADAOF's replay runs on a server state of its own, as at
//! start-up; its operator state (`Ops::leak`, with its Pub/Sub registry)
//! is never freed, a few kilobytes per reload of a debugging command.
//!
//! Differences left: Redis answers other clients `-LOADING` while it
//! loads; here their keyed commands wait behind the locks and keyless
//! ones run (FUNCTION LIST may see the registry being rebuilt). Clients
//! blocked on keys the load creates are not woken. RELOAD while a
//! background save or rewrite runs fails its save (`-ERR`), where Redis's
//! forked child does not stop the parent's own `rdbSave`. A library that
//! fails RELOAD's load leaves none of the file's libraries installed
//! (Redis installs those before it).

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use engine::Shard;
use resp::{Args, Reply};

use crate::coord::{outputs, Coordinator, JobOut, Plan};
use crate::ctx::{ClientState, ServerShared};
use crate::error::CmdError;
use crate::util::eq_ic;

/// The DEBUG LOADAOF coordinator; dispatch wraps it in whole-keyspace
/// Write locks (`server::debug_locks`).
pub(crate) fn loadaof(server: &Arc<ServerShared>) -> Box<dyn Coordinator> {
    Box::new(Reload::new(server, Source::Aof))
}

/// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE] (options in any case, any
/// number of times); the coordinator runs under whole-keyspace Write
/// locks as LOADAOF's.
pub(crate) fn reload(
    server: &Arc<ServerShared>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let mut o = RdbOptions {
        save: true,
        flush: true,
        merge: false,
    };
    for opt in args.iter().skip(2) {
        if eq_ic(opt, "merge") {
            o.merge = true;
        } else if eq_ic(opt, "noflush") {
            o.flush = false;
        } else if eq_ic(opt, "nosave") {
            o.save = false;
        } else {
            return Err(CmdError::err(
                "DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.",
            ));
        }
    }
    Ok(Box::new(Reload::new(server, Source::Rdb(o))))
}

#[derive(Clone, Copy)]
struct RdbOptions {
    save: bool,
    flush: bool,
    merge: bool,
}

/// What is loaded.
#[derive(Clone, Copy)]
enum Source {
    /// DEBUG LOADAOF: the AOF's file set.
    Aof,
    /// DEBUG RELOAD: `dbfilename`.
    Rdb(RdbOptions),
}

impl Source {
    /// The live data is emptied first (and tracking clients told).
    fn flushes(self) -> bool {
        match self {
            Source::Aof => true,
            Source::Rdb(o) => o.flush,
        }
    }
}

enum Stage {
    /// Nothing done yet: the first step runs once every lock is held.
    Start,
    /// RELOAD's save runs on the shards; its outcome comes here.
    Saving(Receiver<Result<(), String>>),
    /// The fresh data went out to the shards (the last step is next).
    Moving,
}

struct Reload {
    server: Arc<ServerShared>,
    source: Source,
    stage: Stage,
    /// Keys loaded and skipped as expired from an RDB (INFO
    /// `rdb_last_load_keys_*`).
    rdb_keys: Option<(u64, u64)>,
    /// Why RELOAD's load failed (after its data moved in).
    failed: bool,
}

/// A shard's counters around its job: (shard, before, after).
type Dirty = (usize, u64, u64);

impl Reload {
    fn new(server: &Arc<ServerShared>, source: Source) -> Reload {
        Reload {
            server: server.clone(),
            source,
            stage: Stage::Start,
            rdb_keys: None,
            failed: false,
        }
    }

    /// LOADAOF's step 1 and 2 (see the module docs): the fresh shards.
    /// Ends the process when there is nothing to load or the load fails,
    /// as Redis.
    fn read_aof(&mut self, in_exec: bool) -> Result<Vec<Shard>, CmdError> {
        let server = &self.server;
        let aof = server.aof.get().cloned();
        if let Some(a) = aof.as_ref().filter(|a| a.enabled()) {
            a.flush(in_exec).map_err(|e| {
                CmdError::err(format!("DEBUG LOADAOF: the AOF could not be flushed: {e}"))
            })?;
        }
        let cfg = server.config();
        let n = server.nshards;
        crate::script::function::flush(&server.ops.functions);
        let loaded = on_loader_thread(server, "aof-load", || match aof.as_ref() {
            Some(a) => a.load(&cfg, n),
            None => Ok(None),
        });
        match loaded {
            Ok(Some(l)) => {
                self.rdb_keys = l.rdb_keys;
                // Flushed above: the file's libraries are all there is.
                server.ops.functions.update(|libs| *libs = l.functions);
                Ok(l.shards)
            }
            // Redis: AOF_NOT_EXIST or a failed load, `exit(1)`.
            Ok(None) => exit("DEBUG LOADAOF: there is no append only file to load. Exiting."),
            Err(e) => {
                super::log_warning(&e);
                exit("DEBUG LOADAOF: the append only file could not be loaded. Exiting.")
            }
        }
    }

    /// RELOAD's step 2: `dbfilename` read into fresh shards, its libraries
    /// installed. `None`: nothing is to move in (a library already there
    /// failed the load before any key). Sets `failed` as Redis's `rdbLoad`
    /// would return C_ERR.
    fn read_rdb(&mut self, o: RdbOptions) -> Option<Vec<Shard>> {
        let server = &self.server;
        let cfg = server.config();
        if o.flush {
            crate::script::function::flush(&server.ops.functions);
        }
        let limits = crate::ctx::enc_limits_of(&cfg);
        // A master skips keys already expired; a replica keeps them for
        // its master's DEL (Redis's `iAmMaster()` in `rdbLoadRio`).
        let keep_expired = server.repl.is_replica();
        let path = cfg.rdb_path();
        let mut fresh: Vec<Shard> = (0..server.nshards)
            .map(|id| Shard::new(id, cfg.databases))
            .collect();
        let read = on_loader_thread(server, "rdb-load", || {
            super::startup::read_rdb(&path, &mut fresh, limits, keep_expired)
        });
        let r = match read {
            Ok(Some(r)) => r,
            // No file, or none Redis's `fopen` could open: nothing read.
            Ok(None) => {
                self.failed = true;
                return Some(fresh);
            }
            Err(e) => {
                super::log_warning(&e);
                self.failed = true;
                return Some(fresh);
            }
        };
        self.rdb_keys = Some((r.keys, r.expired));
        if let Err(e) = crate::script::function::load_from_rdb(server.ops, &r.functions, o.merge) {
            super::log_warning(&format!("Failed loading library, {e}"));
            super::log_warning("Short read or OOM loading DB. Unrecoverable error, aborting now.");
            self.failed = true;
            // The file's libraries come before its keys: none was read.
            self.rdb_keys = Some((0, 0));
            return None;
        }
        match r.failed {
            Some(e) => {
                super::log_warning(&e);
                self.failed = true;
            }
            None => r.log_done(),
        }
        Some(fresh)
    }

    /// Step 3: each shard's job takes its fresh data in.
    fn move_in(&mut self, fresh: Vec<Shard>, plan: &mut Plan) {
        let merge = match self.source {
            Source::Rdb(o) if !o.flush => Some(o.merge),
            _ => None,
        };
        for (i, mut mine) in fresh.into_iter().enumerate() {
            plan.run(i, move |env| {
                let before = env.shard.dirty();
                let dup = match merge {
                    None => {
                        env.shard.tracked.clear();
                        for (db, new) in env.shard.dbs.iter_mut().zip(mine.dbs.iter_mut()) {
                            engine::Db::swap_contents(db, new);
                        }
                        None
                    }
                    Some(replace) => merge_into(env.shard, &mut mine, replace),
                };
                // The old data goes with `mine`, freed here: Redis's
                // emptyData without EMPTYDB_ASYNC.
                drop(mine);
                ((env.shard.id, before, env.shard.dirty()), dup)
            });
        }
        plan.last = true;
        self.stage = Stage::Moving;
    }

    /// The last step: counters, statistics, log line and reply.
    fn finish(&mut self, results: Vec<JobOut>, out: &mut Reply) {
        let server = &self.server;
        let mut dirty = Vec::with_capacity(server.nshards);
        for (d, dup) in outputs::<(Dirty, Option<(Vec<u8>, usize)>)>(results) {
            if let Some((key, db)) = dup {
                // Redis's serverPanic in `rdbLoadRio`: the process ends.
                super::log_warning(&format!(
                    "RDB has duplicated key '{}' in DB {db}",
                    String::from_utf8_lossy(&key)
                ));
                exit("Duplicated key found in RDB file");
            }
            dirty.push(d);
        }
        // LOADAOF, and RELOAD's save: no change since (Redis's
        // `server.dirty = 0`); RELOAD NOSAVE: the counter as it was.
        let rebase = match self.source {
            Source::Aof => true,
            Source::Rdb(o) => o.save,
        };
        server.persist.after_reload(&dirty, rebase);
        if let Some((keys, expired)) = self.rdb_keys {
            server.persist.loaded(keys, expired);
        }
        if self.source.flushes() {
            crate::keys::invalidate_all(server);
        }
        match self.source {
            Source::Aof => {
                super::log_warning("Append Only File loaded by DEBUG LOADAOF");
                out.ok();
            }
            Source::Rdb(_) if self.failed => {
                out.error_bytes(b"ERR Error trying to load the RDB dump");
            }
            Source::Rdb(_) => {
                super::log_warning("DB reloaded by DEBUG RELOAD");
                out.ok();
            }
        }
    }
}

/// RELOAD NOFLUSH: `fresh`'s keys into `live`, database by database. A
/// key in both replaces the live one when `replace` (MERGE); otherwise
/// nothing moves and the first such key (and its database) is returned:
/// Redis ends the process on it.
fn merge_into(live: &mut Shard, fresh: &mut Shard, replace: bool) -> Option<(Vec<u8>, usize)> {
    if !replace {
        for (i, (l, f)) in live.dbs.iter().zip(&fresh.dbs).enumerate() {
            if let Some((k, _)) = f.iter().find(|(k, _)| l.contains(k)) {
                return Some((k.to_vec(), i));
            }
        }
    }
    for (l, f) in live.dbs.iter_mut().zip(fresh.dbs.iter_mut()) {
        let keys: Vec<Vec<u8>> = f.iter().map(|(k, _)| k.to_vec()).collect();
        for k in keys {
            if let Some((e, at)) = f.remove_with_ttl(&k) {
                l.insert(&k, e, at);
            }
        }
    }
    None
}

/// Runs `load` on a thread of its own (named `name`), with INFO
/// `loading:1` meanwhile.
fn on_loader_thread<T: Send>(
    server: &ServerShared,
    name: &str,
    load: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    server.persist.loading.store(true, Ordering::Relaxed);
    let r = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, load)
            .map_err(|e| format!("Can't start the loading thread: {e}"))
            .and_then(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the loading thread panicked".into()))
            })
    });
    server.persist.loading.store(false, Ordering::Relaxed);
    r
}

fn exit(line: &str) -> ! {
    super::log_warning(line);
    std::process::exit(1)
}

impl Coordinator for Reload {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError> {
        match std::mem::replace(&mut self.stage, Stage::Moving) {
            Stage::Moving => {
                self.finish(results, out);
                Ok(())
            }
            Stage::Start => match self.source {
                Source::Aof => {
                    let fresh = self.read_aof(client.in_exec)?;
                    self.move_in(fresh, plan);
                    Ok(())
                }
                Source::Rdb(o) if o.save => {
                    match super::commands::save_plan(&self.server, false) {
                        Ok((p, done)) => {
                            *plan = p;
                            self.stage = Stage::Saving(done);
                        }
                        // Redis: `addReplyErrorObject(c,shared.err)`.
                        Err(_) => out.error_bytes(b"ERR"),
                    }
                    Ok(())
                }
                Source::Rdb(o) => {
                    self.load_rdb(o, plan, out);
                    Ok(())
                }
            },
            Stage::Saving(done) => {
                let Source::Rdb(o) = self.source else {
                    unreachable!("INVARIANT: only RELOAD saves");
                };
                match done.recv() {
                    Ok(Ok(())) => self.load_rdb(o, plan, out),
                    _ => out.error_bytes(b"ERR"),
                }
                Ok(())
            }
        }
    }

    /// The file is read (LOADAOF: the AOF flushed) at the instant every
    /// lock is held.
    fn first_step_needs_locks(&self) -> bool {
        true
    }

    fn refusable_when_busy(&self) -> bool {
        matches!(self.stage, Stage::Start)
    }

    fn must_finish(&self) -> bool {
        !matches!(self.stage, Stage::Start)
    }
}

impl Reload {
    /// RELOAD after its save: read, then move in (or, when nothing is to
    /// move, the reply at once).
    fn load_rdb(&mut self, o: RdbOptions, plan: &mut Plan, out: &mut Reply) {
        match self.read_rdb(o) {
            Some(fresh) => self.move_in(fresh, plan),
            None => self.finish(Vec::new(), out),
        }
    }
}

impl super::Persist {
    /// DEBUG LOADAOF or RELOAD moved the loaded data in: `dirty` holds
    /// each shard's change counter (shard, before its job, after it).
    /// `rebase`: no changes since (Redis sets `server.dirty` to 0);
    /// otherwise the job's own changes are not counted.
    fn after_reload(&self, dirty: &[Dirty], rebase: bool) {
        if rebase {
            self.functions_all_saved();
        }
        for &(id, before, after) in dirty {
            if rebase {
                self.saved_dirty[id].store(after, Ordering::Relaxed);
            } else {
                self.saved_dirty[id].fetch_add(after.saturating_sub(before), Ordering::Relaxed);
            }
            // Published at once: `changes` reads the new figure now, not
            // a loop iteration later.
            self.publish_dirty(id, after);
        }
    }
}

#[cfg(test)]
mod tests {
    use engine::{OwnedEntry, Shard, Str, Value};

    use super::merge_into;

    fn put(s: &mut Shard, db: usize, key: &str, val: &str, at: u64) {
        let e = OwnedEntry::new(Value::Str(Str::from_bytes(val.as_bytes())), 0);
        s.dbs[db].insert(key.as_bytes(), e, at);
    }

    fn get(s: &Shard, db: usize, key: &str) -> Option<(Vec<u8>, u64)> {
        let d = &s.dbs[db];
        let e = d.get(key.as_bytes())?;
        let v = match e.value() {
            engine::ValueRef::Str(v) => match v.view() {
                engine::StrView::Bytes(b) => b.to_vec(),
                engine::StrView::Int(n) => n.to_string().into_bytes(),
            },
            _ => unreachable!("strings only here"),
        };
        Some((v, d.expire_at(key.as_bytes(), e)))
    }

    /// NOFLUSH MERGE: the file's keys replace the live ones (value and
    /// deadline), the others stay; without MERGE a key in both moves
    /// nothing and is named with its database.
    #[test]
    fn a_merge_replaces_and_a_plain_noflush_names_the_duplicate() {
        let far = engine::now_ms() + 1_000_000;
        let mut live = Shard::new(0, 4);
        put(&mut live, 0, "both", "live", far);
        put(&mut live, 0, "mine", "live", 0);
        put(&mut live, 2, "two", "live", 0);
        let mut fresh = Shard::new(0, 4);
        put(&mut fresh, 0, "both", "file", 0);
        put(&mut fresh, 0, "theirs", "file", far);
        put(&mut fresh, 2, "two", "file", 0);

        let dup = merge_into(&mut live, &mut fresh, false);
        assert_eq!(dup, Some((b"both".to_vec(), 0)));
        assert_eq!(get(&live, 0, "both"), Some((b"live".to_vec(), far)));
        assert_eq!(get(&live, 0, "theirs"), None);

        assert_eq!(merge_into(&mut live, &mut fresh, true), None);
        assert_eq!(get(&live, 0, "both"), Some((b"file".to_vec(), 0)));
        assert_eq!(get(&live, 0, "mine"), Some((b"live".to_vec(), 0)));
        assert_eq!(get(&live, 0, "theirs"), Some((b"file".to_vec(), far)));
        assert_eq!(get(&live, 2, "two"), Some((b"file".to_vec(), 0)));
        assert!(fresh.dbs.iter().all(|d| d.is_empty()));
    }
}
