//! Blocked clients (BLPOP, BLMOVE, BZPOPMIN ...): the runtime side.
//!
//! A blocking command is an ordinary shard handler. When it finds nothing
//! to serve and may block, it replies nothing and names the keys it waits
//! for (`ShardCtx::block_on`). The runtime then:
//!
//! * on the key's shard, queues a [`BlockedCmd`] under each of those keys
//!   (FIFO per key, as Redis serves blocked clients) and tells the
//!   database (`Db::add_blocking`), whose `insert` then reports the key as
//!   ready when it is created — the only way an empty key becomes
//!   servable, since a list or sorted set never exists empty;
//! * on the client's home thread, keeps the connection paused behind the
//!   command's reply slot, with its deadline.
//!
//! After every command, batch or job that made a key ready, the shard runs
//! the waiters of that key again, oldest first, with the same handler and
//! arguments, until the key runs dry or nobody waits (a re-run that blocks
//! again leaves that client waiting and stops the walk). A served client's
//! reply travels home in a [`super::mailbox::Msg::Unblocked`]. Serving
//! waits while a transaction holds a lock on the key, and resumes on its
//! release, so a transaction never sees a pop it did not make.
//!
//! Exactly-once: each blocked command has a claim ([`ClaimFlag`]) shared
//! by its home thread and every shard it waits on. Whoever takes it first
//! decides the outcome: a shard (served), or the home thread (timeout,
//! disconnect, CLIENT UNBLOCK). A taken waiter left in a queue is dropped
//! when met, and by the cron sweep.
//!
//! A shard cannot know whether a re-run serves before it runs it, and the
//! run may pop (BLPOP): it holds the claim *on trial* meanwhile, and gives
//! it back if the command blocks again. A claim on trial is neither free
//! nor taken: the others wait for the trial's outcome (a bounded handler
//! run on another thread, which waits for nobody) instead of reading it
//! as taken. Read as taken, a trial on one shard made another shard drop
//! the command it was parking (or serving), and the home thread give up
//! its timeout: a client that then stayed blocked forever.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use commands::exec::ShardCall;
use commands::table::ShardHandler;
use commands::Resolved;
use resp::OwnedArgs;

use super::mailbox::ConnRef;

/// The claim of one blocked command (see the module documentation).
pub type Claim = Arc<ClaimFlag>;

/// A blocked command's claim: free, on trial on one shard, or taken; and
/// the server's `masters_set` when it blocked (its epoch).
#[derive(Debug, Default)]
pub struct ClaimFlag {
    state: AtomicU8,
    epoch: u64,
}

/// Nobody decided yet.
const FREE: u8 = 0;
/// A shard runs the command again; it serves (taken) or blocks (free).
const TRIAL: u8 = 1;
/// Decided: served, woken home, timed out, unblocked or disconnected.
const TAKEN: u8 = 2;

impl ClaimFlag {
    /// The claim of a command blocking now, on a server whose
    /// `masters_set` (`commands::repl::Repl::masters_set`) is `epoch`.
    pub fn at(epoch: u64) -> Claim {
        Arc::new(ClaimFlag {
            state: AtomicU8::new(FREE),
            epoch,
        })
    }

    /// Whether a master was set since it blocked: then it is not served
    /// but unblocked with [`NEW_MASTER_ERROR`] (see `worker::demote`).
    #[inline]
    pub fn before_new_master(&self, masters_set: u64) -> bool {
        self.epoch != masters_set
    }

    /// Whether the outcome is decided (the waiter is dead to its shards).
    /// A claim on trial is not: its command may block again.
    #[inline]
    pub fn is_taken(&self) -> bool {
        self.state.load(Ordering::Acquire) == TAKEN
    }

    /// Takes the claim for good (the home thread: timeout, CLIENT
    /// UNBLOCK); true if nobody had. Waits out another shard's trial.
    pub fn take(&self) -> bool {
        self.settle(TAKEN)
    }

    /// Puts the claim on trial before a shard runs the command again;
    /// false if it is taken. Waits out another shard's trial. The caller
    /// ends the trial with [`ClaimFlag::decide`] or [`ClaimFlag::release`]
    /// before it does anything else.
    pub fn try_trial(&self) -> bool {
        self.settle(TRIAL)
    }

    /// From free to `to`, after any trial in progress ends: the trial is
    /// one handler run on another thread, which waits for nobody (a
    /// thread ends its own trial before anything else), so the wait is
    /// short and bounded. False if the claim is taken.
    fn settle(&self, to: u8) -> bool {
        loop {
            match self
                .state
                .compare_exchange(FREE, to, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(TAKEN) => return false,
                Err(_) => std::thread::yield_now(),
            }
        }
    }

    /// Ends a trial that served the command (or woke its home): taken.
    pub fn decide(&self) {
        let was = self.state.swap(TAKEN, Ordering::AcqRel);
        debug_assert_ne!(was, FREE, "decided a claim not on trial");
    }

    /// Ends a trial whose command blocked again: free, unless its client
    /// went away meanwhile ([`ClaimFlag::abandon`]), which stays decided.
    pub fn release(&self) {
        let r = self
            .state
            .compare_exchange(TRIAL, FREE, Ordering::AcqRel, Ordering::Acquire);
        debug_assert!(
            r.is_ok() || r == Err(TAKEN),
            "released a claim not on trial"
        );
    }

    /// The client went away: taken for good, at once. A trial in progress
    /// still ends (its reply finds no connection) but cannot free it.
    pub fn abandon(&self) {
        self.state.store(TAKEN, Ordering::Release);
    }
}

/// What a client blocked before a master was set gets (Redis's
/// `disconnectAllBlockedClients`), before its connection closes.
pub const NEW_MASTER_ERROR: &str =
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

/// Marks a client blocked or not, keeping INFO's `blocked_clients` of its
/// server (`ops`).
pub fn set_blocked(ops: &commands::ops::Ops, c: &mut commands::ClientState, on: bool) {
    if c.blocked != on {
        c.blocked = on;
        if on {
            ops.blocked_clients.fetch_add(1, Ordering::Relaxed);
        } else {
            ops.blocked_clients.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What the home thread knows about its blocked connection.
#[derive(Clone, Debug)]
pub struct BlockTicket {
    pub seq: u64,
    pub claim: Claim,
    /// Absolute Unix milliseconds; 0 = forever.
    pub deadline_ms: u64,
    /// The command's id, for its statistics on timeout.
    pub cmd_id: usize,
    /// For a command parked to wake its home: its arguments, to run again.
    pub redo: Option<OwnedArgs>,
}

/// A connection's blocking state on its home thread.
#[derive(Clone, Debug, Default)]
pub enum BlockPhase {
    #[default]
    None,
    /// A blocking command went to another shard; whether it blocked comes
    /// back with its batch.
    Awaiting(Claim),
    Blocked(BlockTicket),
}

impl BlockPhase {
    pub fn is_none(&self) -> bool {
        matches!(self, BlockPhase::None)
    }
    pub fn claim(&self) -> Option<&Claim> {
        match self {
            BlockPhase::None => None,
            BlockPhase::Awaiting(c) => Some(c),
            BlockPhase::Blocked(t) => Some(&t.claim),
        }
    }
}

/// A blocked command waiting on this shard.
pub struct BlockedCmd {
    pub conn: ConnRef,
    pub seq: u64,
    pub claim: Claim,
    pub resolved: Resolved,
    pub handler: ShardHandler,
    pub args: OwnedArgs,
    pub call: ShardCall,
    pub resp3: bool,
    pub keys: Vec<Vec<u8>>,
    /// The type whose creation can serve it (`list`, `zset`).
    pub wants: &'static str,
    /// Wake the home thread instead of re-running here.
    pub wake_home: bool,
}

/// A blocked multi-shard command sent to one of its shards.
pub struct ParkReq {
    pub claim: Claim,
    pub resolved: Resolved,
    pub handler: ShardHandler,
    pub args: OwnedArgs,
    pub call: ShardCall,
    pub resp3: bool,
    /// The waited keys on that shard.
    pub keys: Vec<Vec<u8>>,
    /// Wake the home thread instead of re-running here.
    pub wake_home: bool,
}

/// The type a blocking command pops from, by its ACL category.
pub fn wanted_type(r: Resolved) -> &'static str {
    if r.spec.acl.contains(&"sortedset") {
        "zset"
    } else if r.spec.acl.contains(&"stream") {
        "stream"
    } else {
        "list"
    }
}

/// This shard's blocked commands, per (db, key), oldest first.
#[derive(Default)]
pub struct Waiters {
    queues: HashMap<(usize, Vec<u8>), VecDeque<Arc<BlockedCmd>>>,
    /// Ready keys held back, retried on the next lock release: a
    /// transaction's lock held them, or their oldest waiter was woken home
    /// to run again (the ones behind it wait for that run).
    pub later: Vec<(usize, Vec<u8>)>,
    /// When `later` last became non-empty (Unix ms): the cron retries it
    /// after [`LATER_RETRY_MS`] with no lock held.
    pub later_since_ms: u64,
}

/// How long keys held back for a waiter woken home wait for its run (or a
/// lock release) before the cron serves them anyway: only a waiter whose
/// connection went away before it ran again gets near it.
pub const LATER_RETRY_MS: u64 = 1000;

impl Waiters {
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Queues `cmd` under each of its keys; returns the keys newly waited
    /// on in `db` (for `Db::add_blocking`).
    pub fn add(&mut self, cmd: BlockedCmd) -> Vec<Vec<u8>> {
        let db = cmd.call.db;
        let mut keys = cmd.keys.clone();
        keys.sort();
        keys.dedup();
        let cmd = Arc::new(cmd);
        for k in &keys {
            self.queues
                .entry((db, k.clone()))
                .or_default()
                .push_back(cmd.clone());
        }
        keys
    }

    /// The oldest live waiter of `key`; claimed ones met on the way are
    /// dropped and their key counts returned through `dropped`.
    pub fn front(
        &mut self,
        db: usize,
        key: &[u8],
        dropped: &mut Vec<(usize, Vec<u8>)>,
    ) -> Option<Arc<BlockedCmd>> {
        let k = (db, key.to_vec());
        let q = self.queues.get_mut(&k)?;
        while let Some(w) = q.front() {
            if !w.claim.is_taken() {
                return Some(w.clone());
            }
            q.pop_front();
            dropped.push(k.clone());
        }
        self.queues.remove(&k);
        None
    }

    /// Removes a served command from every queue it is in; returns the
    /// (db, key) pairs it left.
    pub fn remove(&mut self, cmd: &Arc<BlockedCmd>) -> Vec<(usize, Vec<u8>)> {
        let mut left = Vec::new();
        let mut keys = cmd.keys.clone();
        keys.sort();
        keys.dedup();
        for k in keys {
            let key = (cmd.call.db, k);
            if let Some(q) = self.queues.get_mut(&key) {
                q.retain(|w| !Arc::ptr_eq(w, cmd));
                if q.is_empty() {
                    self.queues.remove(&key);
                }
                left.push(key);
            }
        }
        left
    }

    /// Drops every claimed waiter (timed out, disconnected, unblocked);
    /// returns the (db, key) pairs they left, one per waiter and key.
    pub fn sweep(&mut self) -> Vec<(usize, Vec<u8>)> {
        let mut left = Vec::new();
        self.queues.retain(|k, q| {
            q.retain(|w| {
                let dead = w.claim.is_taken();
                if dead {
                    left.push(k.clone());
                }
                !dead
            });
            !q.is_empty()
        });
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_that_blocks_again_leaves_the_claim_free() {
        let c = Claim::default();
        assert!(c.try_trial());
        assert!(!c.is_taken(), "on trial: still a live waiter");
        c.release();
        assert!(c.try_trial());
        c.decide();
        assert!(c.is_taken());
        assert!(!c.try_trial() && !c.take(), "decided once");
    }

    #[test]
    fn a_client_gone_during_a_trial_stays_gone() {
        let c = Claim::default();
        assert!(c.try_trial());
        c.abandon();
        // The trial blocked again: it may not bring the waiter back.
        c.release();
        assert!(c.is_taken());
        assert!(!c.try_trial());
    }

    /// The home thread's timeout (or CLIENT UNBLOCK) meeting a trial on a
    /// shard waits for its outcome instead of reading it as served.
    #[test]
    fn take_waits_for_a_trials_outcome() {
        for served in [false, true] {
            let c = Claim::default();
            assert!(c.try_trial());
            let home = {
                let c = c.clone();
                std::thread::spawn(move || c.take())
            };
            if served {
                c.decide();
            } else {
                c.release();
            }
            let took = home.join().expect("home thread");
            assert_eq!(took, !served, "served={served}");
            assert!(c.is_taken());
        }
    }
}
