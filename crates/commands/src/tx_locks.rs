//! Locks of the transaction layer (`tx`): what a transaction asks for
//! ([`LockSet`], made flat at dispatch, then one [`LockReq`] per shard),
//! and what each shard holds and queues ([`LockTable`]). The protocol that
//! takes and releases them is `tx`'s ([`super::TxCoord`]); this module
//! only says what conflicts with what, and who waits for whom.
//!
//! # Cost as the number of shards `N` (and threads) grows
//!
//! Nothing here is shared between threads: a [`LockTable`] belongs to one
//! shard and is only touched by the thread running that shard's loop, and
//! a [`LockSet`] or [`LockReq`] to one transaction. So no structure costs
//! a cache line another thread writes, whatever `N`.
//!
//! * [`LockTable`] (one per shard, so `N` in the process): O(keys locked
//!   there + requests waiting there) memory, nothing per other shard; an
//!   empty table is a few words and a boxed, empty queue summary
//!   (`queue::Summaries`). A request costs O(its keys) against the held
//!   locks and the queue's summary; a release's grant pass O(the queued
//!   requests' keys). A plain command pays one branch
//!   ([`LockTable::any_held`]) while nothing is held on its shard, and
//!   O(its keys) ([`LockTable::blocks`]) otherwise. None of it grows
//!   with `N`.
//! * [`LockReq`] (one per shard a transaction locks, `k <= min(keys, N)`
//!   of them): O(its keys on that shard). Only a keyspace-wide command
//!   (FLUSHALL, DBSIZE, KEYS ...) makes `N` of them, each without keys.
//! * [`LockSet`] (one per transaction): one flat list, an entry per key
//!   and per whole-shard request, so O(keys) for a keyed command and O(N)
//!   only for a keyspace-wide one; [`LockSet::shards_into`] and
//!   [`LockSet::requests`] sort it, O(entries log entries), and make one
//!   request per shard covered. A run without locks
//!   (`Coordinator::run_unlocked`) asks only which shards it covers.
//! * `Deferred` (a set whose keys are not hashed yet): the shards of its
//!   keys (or key groups), inline up to 16, else two bytes each on the
//!   heap; nothing grows with `N`. Its keys are hashed into entries only
//!   when locks are taken.
//! * The queue summary (`queue`): one entry per distinct (database, key)
//!   queued on the shard; nothing when no request waits.

use std::collections::{HashMap, VecDeque};

use resp::{Args, OwnedArgs};

use super::TxId;
use crate::coord::Coordinator;
use crate::table::{shard_of, CommandSpec};

/// The hash locks use for a key.
#[inline]
fn key_hash(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    #[cfg(test)]
    tests::count_hash();
    foldhash::fast::FixedState::with_seed(0x7e55e7a).hash_one(key)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

impl Mode {
    #[cfg(test)]
    fn conflicts(self, other: Mode) -> bool {
        self == Mode::Write || other == Mode::Write
    }
}

/// What one transaction locks on one shard.
#[derive(Clone, Debug, Default)]
pub struct LockReq {
    pub tx: TxId,
    /// `(db, key hash, mode)`; once settled (see [`LockReq::settle`]),
    /// sorted and each key once (Write wins). Locks name keys
    /// by a 64-bit hash: a collision only makes two keys share a lock.
    pub keys: Vec<(usize, u64, Mode)>,
    /// The whole shard (keyspace-wide commands).
    pub whole: Option<Mode>,
    /// Granted at once or refused, never queued: a request made out of
    /// shard order (see `tx`'s module docs). A refused request's work
    /// does not run; its job's output is a [`super::LockConflict`].
    pub nowait: bool,
    /// The request goes alone: its work's job does nothing and answers
    /// `()`, so a shard that grants it at once may answer without running
    /// the job and the epilogue a job that touched the shard needs.
    pub alone: bool,
    /// Never withdrawn for a busy script ([`LockTable::withdraw_for_busy`]):
    /// a command that may run while a script is busy (Redis's allow-busy,
    /// WATCH), or a transaction whose coordinator already did what a
    /// `-BUSY` reply cannot take back (`Coordinator::refusable_when_busy`).
    pub keep_when_busy: bool,
    /// A lend round's last request (alone): the shard's thread, granting
    /// it at once, lends the shard to the transaction's home thread
    /// before it answers (`script::lend`, "Released at the give-back,
    /// lent at the grant"). Granted later (queued), or by a runtime that
    /// cannot lend it (a request run by a call, on its home's own
    /// thread), it is just granted: the job then asks for the lend.
    pub lend: bool,
}

impl LockReq {
    /// Adds a key. Keys are deduplicated by [`LockReq::settle`], which the
    /// lock table runs on every request: a linear search here made a
    /// command of n distinct keys (DEL, MGET, MSET ...) cost O(n²), 1.2 s
    /// at 100k keys with every client of the shard waiting.
    pub fn add(&mut self, db: usize, key: &[u8], mode: Mode) {
        let key = key_hash(key);
        match self.keys.last_mut() {
            // The same key again (`DEL k k k`): no entry per copy.
            Some(e) if e.0 == db && e.1 == key => {
                if mode == Mode::Write {
                    e.2 = Mode::Write;
                }
            }
            _ => self.keys.push((db, key, mode)),
        }
    }

    /// Sorts the keys by `(db, hash)` and merges duplicates (Write wins).
    /// Idempotent; O(n) on a settled request.
    pub fn settle(&mut self) {
        let ordered = |a: &(usize, u64, Mode), b: &(usize, u64, Mode)| (a.0, a.1) < (b.0, b.1);
        if self.keys.windows(2).all(|w| ordered(&w[0], &w[1])) {
            return;
        }
        self.keys
            .sort_unstable_by_key(|&(d, k, m)| (d, k, m != Mode::Write));
        // Write sorts first among equal keys, so the kept entry has it.
        self.keys.dedup_by_key(|e| (e.0, e.1));
    }

    pub fn add_whole(&mut self, mode: Mode) {
        self.whole = Some(match (self.whole, mode) {
            (Some(Mode::Write), _) | (_, Mode::Write) => Mode::Write,
            _ => Mode::Read,
        });
    }

    /// Both requests settled: one merge walk over their keys. The
    /// definition of a conflict, which the lock queue's summary
    /// (`tx_queue`) answers for a whole set of requests at once; the
    /// tests hold the two to agree.
    #[cfg(test)]
    fn conflicts(&self, other: &LockReq) -> bool {
        tests::count_check();
        match (self.whole, other.whole) {
            (Some(a), Some(b)) if a.conflicts(b) => return true,
            (Some(Mode::Write), _) if !other.keys.is_empty() => return true,
            (_, Some(Mode::Write)) if !self.keys.is_empty() => return true,
            (Some(Mode::Read), _) if other.keys.iter().any(|k| k.2 == Mode::Write) => return true,
            (_, Some(Mode::Read)) if self.keys.iter().any(|k| k.2 == Mode::Write) => return true,
            _ => {}
        }
        let (mut a, mut b) = (self.keys.iter().peekable(), other.keys.iter().peekable());
        while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
            match (x.0, x.1).cmp(&(y.0, y.1)) {
                std::cmp::Ordering::Less => {
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if x.2.conflicts(y.2) {
                        return true;
                    }
                    a.next();
                    b.next();
                }
            }
        }
        false
    }
}

#[derive(Default, Debug)]
struct Held {
    readers: u32,
    writer: bool,
}

/// One shard's locks: what granted transactions hold, and the FIFO queue
/// of requests waiting. `W` is what the runtime needs to resume a waiter.
pub struct LockTable<W> {
    /// Per database: key → holders.
    keys: Vec<HashMap<u64, Held, foldhash::fast::FixedState>>,
    whole_readers: u32,
    whole_writer: bool,
    /// Keyed by transaction id with a fixed fast hash: ids are ours, not
    /// a client's (SipHash here cost more than the lock's own work).
    granted: HashMap<TxId, LockReq, foldhash::fast::FixedState>,
    waiting: VecDeque<(LockReq, W)>,
    /// What `waiting` asks for, and a grant pass's scratch (see
    /// `queue::Summaries`). Boxed: a table leads its worker's hot lines
    /// (`server::worker::Core`), and the summaries are read only when
    /// requests queue.
    sums: Box<queue::Summaries>,
}

impl<W> Default for LockTable<W> {
    fn default() -> Self {
        LockTable {
            keys: Vec::new(),
            whole_readers: 0,
            whole_writer: false,
            granted: HashMap::default(),
            waiting: VecDeque::new(),
            sums: Box::default(),
        }
    }
}

impl<W> LockTable<W> {
    /// True if any transaction holds a lock here (the plain-command fast
    /// path checks only this).
    #[inline]
    pub fn any_held(&self) -> bool {
        !self.granted.is_empty()
    }

    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    fn held_conflicts(&self, req: &LockReq) -> bool {
        if self.whole_writer {
            return true;
        }
        match req.whole {
            Some(Mode::Write) => return self.any_held(),
            Some(Mode::Read) => {
                let writers = self.keys.iter().any(|m| m.values().any(|h| h.writer));
                if writers {
                    return true;
                }
            }
            None => {}
        }
        req.keys.iter().any(|(db, k, m)| {
            if *m == Mode::Write && self.whole_readers > 0 {
                return true;
            }
            match self.keys.get(*db).and_then(|t| t.get(k)) {
                Some(h) => h.writer || (*m == Mode::Write && h.readers > 0),
                None => false,
            }
        })
    }

    fn grant(&mut self, req: LockReq) {
        match req.whole {
            Some(Mode::Write) => self.whole_writer = true,
            Some(Mode::Read) => self.whole_readers += 1,
            None => {}
        }
        for (db, k, m) in &req.keys {
            if self.keys.len() <= *db {
                self.keys.resize_with(db + 1, HashMap::default);
            }
            let h = self.keys[*db].entry(*k).or_default();
            match m {
                Mode::Write => h.writer = true,
                Mode::Read => h.readers += 1,
            }
        }
        self.granted.insert(req.tx, req);
    }

    /// O(`req`'s keys): the held locks, then the queue's summary.
    fn passes(&self, req: &LockReq) -> bool {
        !self.held_conflicts(req) && !self.sums.queued.conflicts(req)
    }

    /// Grants `req` if it conflicts with nothing held or queued; otherwise
    /// hands it back, queueing nothing (a [`LockReq::nowait`] request).
    pub fn try_acquire(&mut self, mut req: LockReq) -> Result<(), LockReq> {
        req.settle();
        if self.passes(&req) {
            self.grant(req);
            Ok(())
        } else {
            Err(req)
        }
    }

    /// Requests `req`. Returns `Some(w)` if granted now, `None` if it waits
    /// (then `w` comes back from a later [`LockTable::release`]).
    pub fn acquire(&mut self, mut req: LockReq, w: W) -> Option<W> {
        req.settle();
        if self.passes(&req) {
            self.grant(req);
            Some(w)
        } else {
            self.sums.queued.add(&req);
            self.waiting.push_back((req, w));
            None
        }
    }

    /// Releases everything `tx` holds here and drops its waiting request if
    /// any; returns the waiters granted as a result, in queue order.
    pub fn release(&mut self, tx: TxId) -> Vec<W> {
        self.unlock(tx);
        self.grant_waiting()
    }

    /// The first half of [`LockTable::release`]: drops `tx`'s locks and
    /// its waiting request, grants nothing yet.
    pub fn unlock(&mut self, tx: TxId) {
        if let Some(req) = self.granted.remove(&tx) {
            match req.whole {
                Some(Mode::Write) => self.whole_writer = false,
                Some(Mode::Read) => self.whole_readers -= 1,
                None => {}
            }
            for (db, k, m) in req.keys {
                let t = &mut self.keys[db];
                if let Some(h) = t.get_mut(&k) {
                    match m {
                        Mode::Write => h.writer = false,
                        Mode::Read => h.readers -= 1,
                    }
                    if !h.writer && h.readers == 0 {
                        t.remove(&k);
                    }
                }
            }
        }
        if !self.waiting.is_empty() {
            let queued = &mut self.sums.queued;
            self.waiting.retain(|(q, _)| {
                let keep = q.tx != tx;
                if !keep {
                    queued.remove(q);
                }
                keep
            });
        }
    }

    /// The second half of [`LockTable::release`]: grants every waiting
    /// request that conflicts with nothing held or queued before it.
    ///
    /// One pass, O(the queued requests' keys): each request is checked
    /// against the held locks and a summary of the requests that stay
    /// queued ahead of it, which it then joins if it stays too.
    pub fn grant_waiting(&mut self) -> Vec<W> {
        let mut granted = Vec::new();
        if self.waiting.is_empty() {
            return granted;
        }
        let mut ahead = std::mem::take(&mut self.sums.ahead);
        ahead.clear();
        // Each request once, front to back; those that stay go round to
        // the back, in order.
        for _ in 0..self.waiting.len() {
            // INVARIANT: the loop pops at most the queue's length.
            let (req, w) = self.waiting.pop_front().expect("a queued request");
            if self.held_conflicts(&req) || ahead.conflicts(&req) {
                ahead.add(&req);
                self.waiting.push_back((req, w));
            } else {
                self.sums.queued.remove(&req);
                self.grant(req);
                granted.push(w);
            }
        }
        ahead.clear();
        self.sums.ahead = ahead;
        granted
    }

    /// Whether a plain command must wait: it writes (`write`) or reads the
    /// keys `keys` of `db` (none: a keyless command, which only a whole-shard
    /// lock blocks).
    pub fn blocks<'k>(&self, db: usize, keys: impl Iterator<Item = &'k [u8]>, write: bool) -> bool {
        if self.whole_writer || (write && self.whole_readers > 0) {
            return true;
        }
        let Some(t) = self.keys.get(db) else {
            return false;
        };
        if t.is_empty() {
            return false;
        }
        for k in keys {
            if let Some(h) = t.get(&key_hash(k)) {
                if h.writer || (write && h.readers > 0) {
                    return true;
                }
            }
        }
        false
    }
}

/// The lock requests of a transaction, gathered flat: one entry per key
/// and per whole-shard request, in one allocation whatever the number of
/// shards. They become one [`LockReq`] per shard ([`LockSet::requests`])
/// only when the transaction takes its locks: one run without locks
/// ([`Coordinator::run_unlocked`]) only asks which shards it covers
/// ([`LockSet::shards_into`]), so it never builds (nor frees) a request
/// per shard. Measured with callgrind on a 32-shard hub (MSET of 10 keys,
/// about 9 shards): building, sorting and freeing the requests it never
/// used cost about 6.0k instructions per MSET, the flat set 1.9k.
///
/// A keyed command whose coordinator keeps its keys until its first step
/// does not even hash them at dispatch: the set keeps only their shards,
/// already known there, and the keys are read from the coordinator when
/// the transaction takes its locks ([`LockSet::undefer`]). Those are the
/// coordinators that keep the command's arguments
/// ([`Coordinator::received_args`]: those wrapped by
/// `propagate::as_received`, MSET, MSETNX, DEL, UNLINK, RENAME, COPY
/// ..., and a handler run on copies of its keys, `scratch::Scratch`:
/// SMOVE, LMOVE, SUNIONSTORE ...; [`LockSet::deferred`]) and those that keep its keys split by
/// shard ([`Coordinator::key_groups`], `coord::KeyedStep`: MGET, EXISTS,
/// TOUCH, LCS; [`LockSet::deferred_groups`]). Hashing the ten keys of an
/// MSET, with the allocation of their entries, cost about 1.2k
/// instructions per MSET that a run without locks never used.
#[derive(Default, Debug, Clone)]
pub struct LockSet {
    /// `(shard, db, key hash, mode)` per key, in the order added.
    keys: Vec<(usize, usize, u64, Mode)>,
    /// Keys not hashed yet (see the type's docs).
    deferred: Option<Deferred>,
    /// Its requests are never withdrawn for a busy script (see
    /// [`LockReq::keep_when_busy`]).
    pub keep_when_busy: bool,
    /// `(shard, mode)` per whole-shard request; `None`: an empty request
    /// (conflicting with nothing, see [`LockSet::touch_all`]).
    shards: Vec<(usize, Option<Mode>)>,
    /// A lend round's locks (`script::lend`): over its home shard and a
    /// higher one, the other's request (its last) lends that shard at its
    /// grant ([`LockReq::lend`]).
    pub lend_at_grant: bool,
}

/// [`LockSet::shards_into`] sorts no entries while every shard is below
/// this: one bit each in two words.
const MASK_SHARDS: usize = 128;

/// Shards a [`Deferred`] set holds without an allocation: an MSET of 16
/// pairs, an MGET of 16 keys.
const DEFER_INLINE: usize = 16;

/// The keys of one command whose lock entries are made only when its
/// transaction takes locks: its spec and database, where its keys are
/// read from, and the shards they are on (the keys themselves stay with
/// the coordinator).
#[derive(Clone)]
struct Deferred {
    spec: &'static CommandSpec,
    db: usize,
    from: KeysIn,
    shards: DeferredShards,
}

/// Where a [`Deferred`] set's keys are read from, and what its shards are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeysIn {
    /// The command's arguments as received
    /// ([`Coordinator::received_args`]); the shards are each key's, in
    /// key order.
    Args,
    /// The coordinator's keys split by shard ([`Coordinator::key_groups`]);
    /// the shards are the groups', in their order.
    Groups,
}

/// A [`Deferred`] set's shards: inline up to [`DEFER_INLINE`] (no
/// allocation), else on the heap (one allocation of two bytes a shard,
/// where the entries made at once cost 32 bytes and a hash a key).
#[derive(Clone)]
enum DeferredShards {
    Inline {
        len: u8,
        shards: [u16; DEFER_INLINE],
    },
    Heap(Box<[u16]>),
}

impl DeferredShards {
    fn of(shards: impl ExactSizeIterator<Item = u16>) -> Self {
        let len = shards.len();
        if len > DEFER_INLINE {
            return DeferredShards::Heap(shards.collect());
        }
        let mut inline = [0; DEFER_INLINE];
        for (d, s) in inline.iter_mut().zip(shards) {
            *d = s;
        }
        DeferredShards::Inline {
            len: len as u8,
            shards: inline,
        }
    }

    fn get(&self) -> &[u16] {
        match self {
            DeferredShards::Inline { len, shards } => &shards[..usize::from(*len)],
            DeferredShards::Heap(s) => s,
        }
    }
}

impl Deferred {
    fn shards(&self) -> &[u16] {
        self.shards.get()
    }
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("db", &self.db)
            .field("from", &self.from)
            .field("shards", &self.shards())
            .finish()
    }
}

impl LockSet {
    /// The keys of one invocation of `spec` in `db`, the `i`th on the
    /// `i`th of `shards` (in key order), hashed only if the transaction
    /// takes its locks: then [`LockSet::undefer`] reads them from the
    /// command's arguments ([`Coordinator::received_args`]). `None` for
    /// no key.
    pub fn deferred(
        spec: &'static CommandSpec,
        db: usize,
        shards: impl ExactSizeIterator<Item = u16>,
    ) -> Option<LockSet> {
        Self::deferred_from(spec, db, KeysIn::Args, shards)
    }

    /// The keys of one invocation of `spec` in `db`, split by shard as
    /// `groups` (`(shard, keys)`, a coordinator's
    /// [`Coordinator::key_groups`]), hashed only if the transaction takes
    /// its locks: then [`LockSet::undefer`] reads them from the
    /// coordinator's groups. `None` for no group.
    pub fn deferred_groups(
        spec: &'static CommandSpec,
        db: usize,
        groups: &[(usize, OwnedArgs)],
    ) -> Option<LockSet> {
        let shards = groups.iter().map(|(s, _)| *s as u16);
        Self::deferred_from(spec, db, KeysIn::Groups, shards)
    }

    fn deferred_from(
        spec: &'static CommandSpec,
        db: usize,
        from: KeysIn,
        shards: impl ExactSizeIterator<Item = u16>,
    ) -> Option<LockSet> {
        if shards.len() == 0 {
            return None;
        }
        Some(LockSet {
            deferred: Some(Deferred {
                spec,
                db,
                from,
                shards: DeferredShards::of(shards),
            }),
            ..LockSet::default()
        })
    }

    /// Whether its keys wait to be read from the command's coordinator
    /// ([`LockSet::deferred`], [`LockSet::deferred_groups`]).
    pub fn is_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// Makes the entries of the deferred keys from `coord`, the command's
    /// coordinator, not stepped yet (see the type's docs).
    pub fn undefer(&mut self, coord: &dyn Coordinator) {
        let Some(from) = self.deferred.as_ref().map(|d| d.from) else {
            return;
        };
        // INVARIANT: dispatch defers the keys of a coordinator that keeps
        // them only, and its transaction reads them before its first step.
        match from {
            KeysIn::Args => self.undefer_args(
                coord
                    .received_args()
                    .expect("deferred lock keys without the command's arguments"),
            ),
            KeysIn::Groups => self.undefer_groups(
                coord
                    .key_groups()
                    .expect("deferred lock keys without the command's keys"),
            ),
        }
    }

    /// [`LockSet::undefer`] of a set made by [`LockSet::deferred`], from
    /// `args`, the command's arguments as received.
    pub(crate) fn undefer_args(&mut self, args: Args<'_>) {
        let Some(d) = self.deferred.take() else {
            return;
        };
        debug_assert_eq!(d.from, KeysIn::Args);
        let mut positions = Vec::with_capacity(d.shards().len());
        d.spec.key_positions(args, &mut positions);
        // INVARIANT: the same arguments gave the shards at dispatch.
        assert_eq!(
            positions.len(),
            d.shards().len(),
            "deferred lock keys: the command's arguments changed"
        );
        self.command_on(d.spec, args, d.db, &positions, d.shards());
    }

    /// [`LockSet::undefer`] of a set made by [`LockSet::deferred_groups`],
    /// from `groups`, the coordinator's keys split by shard.
    pub(crate) fn undefer_groups(&mut self, groups: &[(usize, OwnedArgs)]) {
        let Some(d) = self.deferred.take() else {
            return;
        };
        debug_assert_eq!(d.from, KeysIn::Groups);
        // INVARIANT: the same groups gave the shards at dispatch.
        assert!(
            groups
                .iter()
                .map(|g| g.0)
                .eq(d.shards().iter().map(|&s| usize::from(s))),
            "deferred lock keys: the command's keys changed"
        );
        let mode = Self::mode_of(d.spec);
        self.keys
            .reserve(groups.iter().map(|(_, k)| k.args().len()).sum());
        for (shard, keys) in groups {
            for key in keys.args().iter() {
                self.keys.push((*shard, d.db, key_hash(key), mode));
            }
        }
    }

    pub fn key(&mut self, nshards: usize, db: usize, key: &[u8], mode: Mode) {
        self.keys
            .push((shard_of(key, nshards), db, key_hash(key), mode));
    }
    /// [`LockSet::key`] with the key's shard already known.
    pub fn key_on(&mut self, shard: usize, db: usize, key: &[u8], mode: Mode) {
        self.keys.push((shard, db, key_hash(key), mode));
    }
    pub fn whole(&mut self, nshards: usize, mode: Mode) {
        self.shards.extend((0..nshards).map(|s| (s, Some(mode))));
    }
    /// Shard `s` whole (a script's lend round, `script::lend`).
    pub fn whole_shard(&mut self, s: usize, mode: Mode) {
        self.shards.push((s, Some(mode)));
    }
    /// The keys of one invocation of `spec` in `db`: Write if the command
    /// writes, Read otherwise.
    pub fn command(
        &mut self,
        spec: &CommandSpec,
        args: Args<'_>,
        db: usize,
        nshards: usize,
        scratch: &mut Vec<usize>,
    ) {
        spec.key_positions(args, scratch);
        self.keys_at(spec, args, db, scratch, |k| shard_of(k, nshards));
    }

    /// [`LockSet::command`] with the key positions and the shard of each
    /// key (`shards[i]` for `positions[i]`) already known.
    pub fn command_on(
        &mut self,
        spec: &CommandSpec,
        args: Args<'_>,
        db: usize,
        positions: &[usize],
        shards: &[u16],
    ) {
        debug_assert_eq!(positions.len(), shards.len());
        let mut next = shards.iter();
        self.keys_at(spec, args, db, positions, |_| {
            // INVARIANT: one shard per position.
            *next.next().expect("a shard per key") as usize
        });
    }

    fn keys_at(
        &mut self,
        spec: &CommandSpec,
        args: Args<'_>,
        db: usize,
        positions: &[usize],
        mut shard: impl FnMut(&[u8]) -> usize,
    ) {
        let mode = Self::mode_of(spec);
        self.keys.reserve(positions.len());
        for &p in positions {
            let key = args.get(p);
            self.keys.push((shard(key), db, key_hash(key), mode));
        }
    }
    /// Write if the command writes, Read otherwise.
    fn mode_of(spec: &CommandSpec) -> Mode {
        if spec.may_write() {
            Mode::Write
        } else {
            Mode::Read
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.shards.is_empty() && self.deferred.is_none()
    }
    /// An empty request (conflicting with nothing) on every shard.
    pub fn touch_all(&mut self, nshards: usize) {
        self.shards.extend((0..nshards).map(|s| (s, None)));
    }
    /// Locks on keys only (no whole-shard lock).
    pub fn keys_only(&self) -> bool {
        self.shards.iter().all(|(_, m)| m.is_none())
    }

    /// Every request on one shard (and at least one request).
    pub fn one_shard(&self) -> bool {
        let deferred = self.deferred.as_ref().map_or(&[][..], Deferred::shards);
        let mut all = self
            .keys
            .iter()
            .map(|k| k.0)
            .chain(self.shards.iter().map(|s| s.0))
            .chain(deferred.iter().map(|&s| usize::from(s)));
        match all.next() {
            Some(first) => all.all(|s| s == first),
            None => false,
        }
    }

    /// Pushes the shards it covers into `out`, ascending, each once.
    /// While they are all below [`MASK_SHARDS`] (every server of up to
    /// 128 shards), a bit per shard and a pass over the bits set:
    /// O(entries + shards covered); past it, a sort: O(entries log
    /// entries). Nothing allocated beyond `out`. (The sort of an MSET's
    /// ten entries cost about 450 instructions, the bits about 100.)
    pub fn shards_into(&self, out: &mut Vec<usize>) {
        // Two words, not a `u128`: a shift of a word by a variable is one
        // instruction, of a `u128` several and a branch.
        let mut mask = [0u64; MASK_SHARDS / 64];
        let mut wide = false;
        let mut add = |s: usize| match mask.get_mut(s / 64) {
            Some(w) => *w |= 1 << (s % 64),
            None => wide = true,
        };
        for k in &self.keys {
            add(k.0);
        }
        for s in &self.shards {
            add(s.0);
        }
        if let Some(d) = &self.deferred {
            for &s in d.shards() {
                add(usize::from(s));
            }
        }
        if !wide {
            for (i, mut w) in mask.into_iter().enumerate() {
                while w != 0 {
                    out.push(64 * i + w.trailing_zeros() as usize);
                    w &= w - 1;
                }
            }
            return;
        }
        let from = out.len();
        out.extend(self.keys.iter().map(|k| k.0));
        out.extend(self.shards.iter().map(|s| s.0));
        if let Some(d) = &self.deferred {
            out.extend(d.shards().iter().map(|&s| usize::from(s)));
        }
        out[from..].sort_unstable();
        let mut kept = from;
        for i in from..out.len() {
            if i == from || out[i] != out[kept - 1] {
                out[kept] = out[i];
                kept += 1;
            }
        }
        out.truncate(kept);
    }

    /// One request per shard, ascending by shard, each settled (see
    /// [`LockReq::settle`]), for transaction `tx`: one sort of the keys
    /// by (shard, db, hash), then one walk, each request's keys allocated
    /// once at their size.
    pub(crate) fn requests(mut self, tx: TxId) -> Vec<(usize, LockReq)> {
        debug_assert!(self.deferred.is_none(), "requests of keys not read yet");
        // Write sorts first among equal keys, so the kept entry has it.
        self.keys
            .sort_unstable_by_key(|&(s, d, h, m)| (s, d, h, m != Mode::Write));
        self.shards.sort_unstable_by_key(|&(s, _)| s);
        let mut reqs: Vec<(usize, LockReq)> = Vec::new();
        let (mut keys, mut whole) = (&self.keys[..], &self.shards[..]);
        loop {
            let shard = match (keys.first(), whole.first()) {
                (Some(k), Some(w)) => k.0.min(w.0),
                (Some(k), None) => k.0,
                (None, Some(w)) => w.0,
                (None, None) => break,
            };
            let nk = keys.iter().take_while(|k| k.0 == shard).count();
            let mut req = LockReq {
                tx,
                keys: Vec::with_capacity(nk),
                ..LockReq::default()
            };
            for &(_, db, hash, mode) in &keys[..nk] {
                if req.keys.last().is_none_or(|e| (e.0, e.1) != (db, hash)) {
                    req.keys.push((db, hash, mode));
                }
            }
            keys = &keys[nk..];
            let nw = whole.iter().take_while(|w| w.0 == shard).count();
            for &(_, mode) in &whole[..nw] {
                if let Some(m) = mode {
                    req.add_whole(m);
                }
            }
            whole = &whole[nw..];
            debug_assert!(req
                .keys
                .windows(2)
                .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
            reqs.push((shard, req));
        }
        reqs
    }
}

#[path = "tx_busy.rs"]
mod busy;
#[path = "tx_queue.rs"]
mod queue;

#[cfg(test)]
#[path = "tx_locks_tests.rs"]
pub(super) mod tests;
