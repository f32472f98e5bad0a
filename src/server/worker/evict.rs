//! Eviction on other shards before a command, so that what Redis's
//! `performEvictions` does in `processCommand` (one keyspace) holds across
//! shards: a command whose own shard has nothing the policy may evict,
//! while the total is over `maxmemory` and other shards have such keys,
//! waits until those shards have evicted their share. Their invalidations
//! (CLIENT TRACKING) and `evicted` events are sent before they answer, so
//! a tracking client reads the invalidation of an evicted key before the
//! reply of the command that made room (Redis 7.0.15's unit/tracking,
//! "invalidation message of eviction keys should be before response").
//!
//! Normally each shard evicts its own share before its commands and from
//! its cron (see `engine::evict`); this round is only for a shard that
//! has nothing to give, so a cache at its limit with keys on every shard
//! never takes it. Cost: with `maxmemory` unset, one branch per command;
//! set, three relaxed loads per single-shard command, and while the round
//! runs one message to and from each shard that has evictable keys (at
//! most N). One round at a time per thread: connections that need one
//! while it runs wait for its end. A connection asks once per request
//! (`Conn::evict_asked`), so a round that freed too little cannot repeat.

use super::super::conn::Conn;
use super::super::mailbox::Msg;
use super::{pubsub, tracking, Core, Worker};

/// Home side, a single-shard command about to run on `shard` (with
/// `maxmemory` set, the connection not yet asked): whether other shards
/// must evict first (see the module documentation). The shards' counts of
/// evictable keys are published when they check memory and from their
/// cron, so a shard that just got its first key may still show none: while
/// no shard shows any, a round is tried at most once per [`BLIND_MS`].
pub(super) fn needed(
    mem: &engine::evict::MemShared,
    shard: usize,
    now_ms: u64,
    blind_at: u64,
) -> bool {
    mem.over_limit()
        && !mem.noeviction()
        && !mem.evictable_on(shard)
        && (mem.any_evictable() || now_ms >= blind_at.saturating_add(BLIND_MS))
}

/// How often a round is tried while no shard reports evictable keys.
const BLIND_MS: u64 = 100;

/// Starts (or joins) a round for connection `c` whose request [`needed`]
/// one: true if it waits (queued until the round ends); false if only
/// this thread's shard had keys to give and they are evicted already.
pub(super) fn wait_for_others(core: &mut Core, c: &mut Conn, slot: usize, shard: usize) -> bool {
    c.evict_asked = true;
    let mem = core.server.mem.clone();
    let blind = !mem.any_evictable();
    if blind {
        core.evict_blind_ms = core.shard.now_ms;
    }
    if core.evict_due == 0 {
        for s in (0..core.server.nshards).filter(|&s| s != shard && (blind || mem.evictable_on(s)))
        {
            if s == core.id {
                // This thread's own shard: at once, the connection's own
                // invalidations written ahead of its reply.
                evict_here_for(core, c);
            } else {
                core.mailbox.send(
                    s,
                    Msg::EvictNow {
                        from: core.id as u16,
                    },
                );
                core.evict_due += 1;
            }
        }
        if core.evict_due == 0 {
            // Only this thread's shard had keys: done already.
            return false;
        }
    }
    core.evict_blocked.push((slot, c.gen));
    true
}

/// This thread's shard evicts its share for `c`'s request: keys `c`
/// tracks are invalidated in its reply stream now (as on the command's
/// own shard, `commands::tracking::invalidate_evicted`), the rest as usual.
fn evict_here_for(core: &mut Core, c: &mut Conn) {
    let me = commands::tracking::evicting_for(&c.client);
    core.shard.collect_touched();
    let mark = core.shard.outbox.invalidations_len();
    core.shard.check_memory(false);
    if let Some(me) = me {
        let mut out = resp::Reply::new(true);
        commands::tracking::invalidate_evicted(&mut core.shard, &me, mark, &mut out);
        if !out.as_bytes().is_empty() {
            if c.inline_reply_target() {
                c.out.raw(out.as_bytes());
            } else {
                c.push_ready(out.as_bytes());
            }
        }
    }
    pubsub::publish_events(core);
    tracking::invalidate_touched(core);
}

/// This shard's share of the excess, evicted now, with its events and
/// invalidations sent.
fn evict_share(core: &mut Core) {
    core.shard.check_memory(false);
    pubsub::publish_events(core);
    tracking::invalidate_touched(core);
}

impl Worker {
    /// `Msg::EvictNow`: evict this shard's share, send what that changed,
    /// then answer.
    pub(super) fn evict_now(&mut self, from: usize) {
        evict_share(&mut self.core);
        self.core.mailbox.send(from, Msg::EvictDone);
    }

    /// `Msg::EvictDone`: once every shard asked has answered, the
    /// invalidations they sent are written, then the waiting connections
    /// run their requests.
    pub(super) fn evict_done(&mut self) {
        self.core.evict_due = self.core.evict_due.saturating_sub(1);
        if self.core.evict_due != 0 {
            return;
        }
        self.deliver_pubsub();
        let waiting = std::mem::take(&mut self.core.evict_blocked);
        self.core.maybe_busy = true;
        self.core.lock_blocked.extend(waiting);
        self.resume_lock_blocked();
    }
}
