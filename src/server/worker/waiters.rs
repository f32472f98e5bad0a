//! The shard side of blocking commands (BLPOP, BLMOVE, XREAD ..., see
//! `server::blocking` for the design): parking a blocked command on this
//! shard's keys, and serving the waiters of keys that became ready,
//! oldest first, as Redis does after each command. A waiter is served
//! once: whoever claims its ticket first (a shard that serves it, its
//! timeout, CLIENT UNBLOCK) decides. A transaction's lock on a ready key
//! holds its waiters back (`Waiters::later`) until the release.
//!
//! Per thread: the waiters of this shard's keys; nothing per thread of the
//! server.

use commands::exec::{self, ShardCall};

use super::super::blocking::{self, BlockTicket, BlockedCmd};
use super::super::mailbox::{ConnRef, Msg};
use super::shard::lock_blocked;
use super::{Core, Worker};
use resp::Reply;

impl Worker {
    /// A multi-shard blocking command parks on this shard's keys.
    pub(super) fn park_arrived(&mut self, conn: ConnRef, seq: u64, cmd: Box<blocking::ParkReq>) {
        let blocking::ParkReq {
            claim,
            resolved,
            handler,
            args,
            call,
            resp3,
            keys,
            wake_home,
        } = *cmd;
        // Only a decided claim is gone: one on trial on another shard
        // (its key filled meanwhile) may block again, and then waits for
        // this shard's keys too.
        if claim.is_taken() {
            return;
        }
        let on = commands::BlockOn {
            keys: keys.clone(),
            deadline_ms: 0,
            args: None,
            widen: false,
        };
        park_waiter(
            &mut self.core,
            conn,
            seq,
            (resolved, handler, call.clone(), resp3, wake_home),
            args,
            claim,
            on,
        );
        // A key filled between the command's look and now would
        // never be reported: serve it now.
        for k in &keys {
            if self.core.shard.dbs[call.db].contains(k) {
                serve_key(&mut self.core, call.db, k);
            }
        }
    }
}

/// Queues a command that blocked on this shard (see `blocking`); returns
/// what its home thread keeps.
pub(super) fn park_waiter(
    core: &mut Core,
    conn: ConnRef,
    seq: u64,
    (resolved, handler, call, resp3, wake_home): (
        commands::Resolved,
        commands::table::ShardHandler,
        ShardCall,
        bool,
        bool,
    ),
    args: resp::OwnedArgs,
    claim: blocking::Claim,
    on: commands::BlockOn,
) -> BlockTicket {
    let ticket = BlockTicket {
        seq,
        claim: claim.clone(),
        deadline_ms: on.deadline_ms,
        cmd_id: resolved.id,
        redo: None,
    };
    let db = call.db;
    core.may_wait = true;
    let keys = core.waiters.add(BlockedCmd {
        conn,
        seq,
        claim,
        resolved,
        handler,
        args,
        call,
        resp3,
        keys: on.keys,
        wants: blocking::wanted_type(resolved),
        wake_home,
    });
    for k in keys {
        core.shard.dbs[db].add_blocking(&k);
    }
    ticket
}

/// Serves the clients blocked on keys that became ready, until no key is
/// ready (serving one may make another ready: BLMOVE into a waited key).
pub(super) fn serve_ready(core: &mut Core) {
    if core.waiters.is_empty() {
        for d in core.shard.dbs.iter_mut() {
            if d.has_ready() {
                d.take_ready();
            }
        }
        return;
    }
    // Bounded: each round serves at least one client or ends.
    for _ in 0..SERVE_ROUNDS_MAX {
        let mut keys: Vec<(usize, engine::SmallBytes)> = Vec::new();
        for (i, d) in core.shard.dbs.iter_mut().enumerate() {
            if d.has_ready() {
                keys.extend(d.take_ready().into_iter().map(|k| (i, k)));
            }
        }
        if keys.is_empty() {
            return;
        }
        for (db, key) in keys {
            serve_key(core, db, &key);
        }
    }
}

/// Rounds of [`serve_ready`] per call; what is left waits for the next.
pub(super) const SERVE_ROUNDS_MAX: usize = 1024;

/// Serves `key`'s blocked clients, oldest first, while it can serve.
pub(super) fn serve_key(core: &mut Core, db: usize, key: &[u8]) {
    // A transaction's lock holds the key's waiters back until a release.
    fn later(core: &mut Core, db: usize, key: &[u8]) {
        if core.waiters.later.is_empty() {
            core.waiters.later_since_ms = core.shard.now_ms;
        }
        if !core.waiters.later.iter().any(|(d, k)| *d == db && k == key) {
            core.waiters.later.push((db, key.to_vec()));
        }
    }
    // Held back already (a lock, or a waiter woken home that has not run
    // yet): the release that retries it comes.
    if core.waiters.later.iter().any(|(d, k)| *d == db && k == key) {
        return;
    }
    if core.locks.any_held() && core.locks.blocks(db, std::iter::once(key), true) {
        return later(core, db, key);
    }
    let mut dropped = Vec::new();
    while let Some(w) = core.waiters.front(db, key, &mut dropped) {
        let now = core.shard.now_ms;
        let d = &core.shard.dbs[db];
        // A stream reader runs whatever the key holds now: XREADGROUP
        // fails when its key or group went away, XREAD blocks again.
        let servable = w.wants == "stream"
            || d.get(key)
                .is_some_and(|e| !d.is_expired(key, e, now) && e.value().type_name() == w.wants);
        if !servable {
            break;
        }
        if core.locks.any_held() {
            // Its other keys (BLMOVE's destination) may be held too.
            let mut scratch = std::mem::take(&mut core.scratch.positions);
            let args = w.args.args();
            let held = lock_blocked(&core.locks, w.resolved, args, w.call.db, &mut scratch);
            core.scratch.positions = scratch;
            if held {
                later(core, db, key);
                break;
            }
        }
        if w.claim.before_new_master(core.server.repl.masters_set()) {
            // Blocked before a master was set: its home answers it with an
            // error (`demote`), and it is served nothing meanwhile; the key
            // waits as for a lock, lest a later waiter pass it.
            later(core, db, key);
            break;
        }
        if !w.claim.try_trial() {
            // Timed out, gone or served elsewhere meanwhile: `front` drops
            // it next.
            continue;
        }
        if w.wake_home {
            // Its home runs the whole command again (it writes keys of
            // other shards); the claim keeps others from serving it.
            w.claim.decide();
            for (d, k) in core.waiters.remove(&w) {
                core.shard.dbs[d].remove_blocking(&k);
            }
            let msg = Msg::Wake {
                conn: w.conn,
                seq: w.seq,
            };
            if w.conn.thread as usize == core.id {
                core.local.push_back(msg);
            } else {
                core.mailbox.send(w.conn.thread as usize, msg);
            }
            // Redis serves the oldest waiter first: the ones behind wait
            // until its home has run it again (its locks on this shard
            // hold them back, and their release retries the key), or the
            // cron gives up on it (its connection went away meanwhile).
            later(core, db, key);
            break;
        }
        let mut out = Reply::new(w.resp3);
        let recorded = core.shard.outbox.len();
        let again = exec::run_shard_ready(
            w.resolved,
            w.handler,
            w.args.args(),
            &mut core.shard,
            w.call.clone(),
            &mut out,
            &mut core.stats,
            Some(key),
        );
        if again.is_some() {
            w.claim.release();
            break;
        }
        w.claim.decide();
        for (d, k) in core.waiters.remove(&w) {
            core.shard.dbs[d].remove_blocking(&k);
        }
        let recorded = core.shard.outbox.len() != recorded;
        core.aof_flush();
        let msg = Msg::Unblocked {
            conn: w.conn,
            seq: w.seq,
            reply: out.into_bytes(),
            aof: if recorded { core.aof_last } else { 0 },
        };
        if w.conn.thread as usize == core.id {
            core.local.push_back(msg);
        } else {
            core.mailbox.send(w.conn.thread as usize, msg);
        }
    }
    for (d, k) in dropped {
        core.shard.dbs[d].remove_blocking(&k);
    }
}

/// After a release: serves the ready keys the lock held back.
pub(super) fn retry_later(core: &mut Core) {
    if core.waiters.later.is_empty() {
        return;
    }
    for (db, key) in std::mem::take(&mut core.waiters.later) {
        serve_key(core, db, &key);
    }
    serve_ready(core);
}
