//! DEBUG LOADAOF: the dataset and the function libraries replaced with
//! what the append-only file holds, as Redis 7.0's `debug.c` does.
//!
//! Redis: `flushAppendOnlyFile(1)` when the AOF is on; `emptyData` (every
//! database and the function libraries); the manifest read from disk
//! again and its files loaded (`loadAppendOnlyFiles`); a load that fails,
//! or that finds no AOF at all (`appendonly no` and never on, so no
//! manifest: `AOF_NOT_EXIST`), ends the process with `exit(1)`; then
//! `server.dirty = 0` (the command is not propagated, and
//! `rdb_changes_since_last_save` reads 0), the log line "Append Only File
//! loaded by DEBUG LOADAOF", `+OK`. With the AOF turned off after it was
//! on, the files left on disk are what is loaded: writes since are gone.
//!
//! Here, under whole-keyspace Write locks (no command runs on any shard
//! meanwhile, and each shard queued its AOF records before it granted its
//! lock), the first step, once every lock is held:
//! 1. writes the AOF's queue to the file ([`super::AofControl::flush`]);
//!    inside EXEC, up to the transaction's own records, which Redis
//!    writes after EXEC: the reload does not see the transaction's
//!    earlier writes, and the file gets them after it;
//! 2. empties the function registry and reads the files into fresh
//!    shards, replaying them through the normal handlers as at start-up,
//!    on a thread of its own (the replay's server, VMs and allocation
//!    slot are not the home thread's);
//! 3. sends each shard a job that exchanges its databases' contents with
//!    the fresh ones (`engine::Db::swap_contents`, as a replica's full
//!    sync: watched keys in either are signalled) and forgets its tracked
//!    keys.
//!
//! The second step resets the change counters to the swap's instant,
//! records what an RDB base held (INFO `rdb_last_load_keys_*`), sends
//! tracking clients a null invalidation (Redis's `signalFlushedDb`) and
//! replies. A flush that fails (a write error, or the queue not written
//! within the runtime's bound: a transaction that released its locks but
//! has not finished holds the queue up until its home thread finishes it)
//! fails the command before anything changed.
//!
//! Cost: the replay runs on a server state of its own, as at start-up;
//! its operator state (`Ops::leak`, with its Pub/Sub registry) is never
//! freed, a few kilobytes per reload of a debugging command.
//!
//! Differences left: Redis answers other clients `-LOADING` while it
//! loads; here their keyed commands wait behind the locks and keyless
//! ones run (FUNCTION LIST may see the registry being rebuilt). Clients
//! blocked on keys the load creates are not woken.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use engine::Shard;
use resp::Reply;

use crate::coord::{outputs, Coordinator, JobOut, Plan};
use crate::ctx::{ClientState, ServerShared};
use crate::error::CmdError;

/// The DEBUG LOADAOF coordinator; dispatch wraps it in whole-keyspace
/// Write locks (`server::debug_locks`).
pub(crate) fn loadaof(server: &Arc<ServerShared>) -> Box<dyn Coordinator> {
    Box::new(LoadAof {
        server: server.clone(),
        swapping: false,
        rdb_keys: None,
    })
}

struct LoadAof {
    server: Arc<ServerShared>,
    /// The fresh data went out to the shards (the second step is next).
    swapping: bool,
    rdb_keys: Option<(u64, u64)>,
}

impl LoadAof {
    /// Steps 1 and 2 of the module docs: the fresh shards. Ends the
    /// process when there is nothing to load or the load fails, as Redis.
    fn read(&mut self, in_exec: bool) -> Result<Vec<Shard>, CmdError> {
        let server = &self.server;
        let aof = server.aof.get().cloned();
        if let Some(a) = aof.as_ref().filter(|a| a.enabled()) {
            a.flush(in_exec).map_err(|e| {
                CmdError::err(format!("DEBUG LOADAOF: the AOF could not be flushed: {e}"))
            })?;
        }
        let cfg = server.config();
        let n = server.nshards;
        crate::script::function::flush();
        server.persist.loading.store(true, Ordering::Relaxed);
        let loaded = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("aof-load".into())
                .spawn_scoped(s, || match aof.as_ref() {
                    Some(a) => a.load(&cfg, n),
                    None => Ok(None),
                })
                .map_err(|e| format!("Can't start the AOF loading thread: {e}"))
                .and_then(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("the AOF loading thread panicked".into()))
                })
        });
        server.persist.loading.store(false, Ordering::Relaxed);
        match loaded {
            Ok(Some(l)) => {
                self.rdb_keys = l.rdb_keys;
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
}

fn exit(line: &str) -> ! {
    super::log_warning(line);
    std::process::exit(1)
}

impl Coordinator for LoadAof {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if !self.swapping {
            let fresh = self.read(client.in_exec)?;
            for (i, mut mine) in fresh.into_iter().enumerate() {
                plan.run(i, move |env| {
                    env.shard.tracked.clear();
                    for (db, new) in env.shard.dbs.iter_mut().zip(mine.dbs.iter_mut()) {
                        engine::Db::swap_contents(db, new);
                    }
                    // The old data goes with `mine`, freed here: Redis's
                    // emptyData without EMPTYDB_ASYNC.
                    drop(mine);
                    (env.shard.id, env.shard.dirty())
                });
            }
            plan.last = true;
            self.swapping = true;
            return Ok(());
        }
        let server = &self.server;
        let mut dirty = vec![0; server.nshards];
        for (id, d) in outputs::<(usize, u64)>(results) {
            dirty[id] = d;
        }
        server.persist.after_aof_load(&dirty, self.rdb_keys);
        crate::keys::invalidate_all(server);
        super::log_warning("Append Only File loaded by DEBUG LOADAOF");
        out.ok();
        Ok(())
    }

    /// The AOF is read at the instant every lock is held.
    fn first_step_needs_locks(&self) -> bool {
        true
    }

    fn refusable_when_busy(&self) -> bool {
        !self.swapping
    }

    fn must_finish(&self) -> bool {
        self.swapping
    }
}

impl super::Persist {
    /// DEBUG LOADAOF swapped the loaded data in: no changes since (Redis
    /// sets `server.dirty` to 0), counted from each shard's change
    /// counter right after its swap (`dirty`, by shard id); what an RDB
    /// base held is the last load's keys.
    fn after_aof_load(&self, dirty: &[u64], rdb_keys: Option<(u64, u64)>) {
        // A shard's published counter lags until its loop publishes it,
        // but never passes `d` before then: `changes` reads 0 at once.
        for (saved, &d) in self.saved_dirty.iter().zip(dirty) {
            saved.store(d, Ordering::Relaxed);
        }
        if let Some((keys, expired)) = rdb_keys {
            self.loaded(keys, expired);
        }
    }
}
