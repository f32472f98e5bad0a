//! One shard's data: its logical databases, values and their encodings,
//! expiry. A [`Shard`] is owned by exactly one thread and is never shared:
//! there are no locks here, and nothing here touches a socket or builds a
//! reply. Command handlers call these operations and turn their typed
//! results into replies.
//!
//! Time: every operation uses [`Shard::now_ms`], a clock the owning thread
//! sets once per batch of commands (like Redis's cached `mstime()` per
//! command), so one command sees one instant and a pipelined batch pays for
//! one clock read.

pub mod alloc;
pub mod db;
pub mod evict;
pub mod lazyfree;
pub mod lfu;
pub mod node;
pub mod outbox;
pub mod rdb;
pub mod snapshot;
pub mod types;
pub mod value;

pub use db::{Db, Entry, Meta, OwnedEntry, WatchFlag};
pub use ds::SmallBytes;
pub use lfu::LfuParams;
pub use types::{EncLimits, Hash, List, Set, Stream, ZSet};
pub use value::{Str, StrRef, StrView, Value, ValueRef};

use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Counters a shard keeps for INFO stats; summed over shards by INFO.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShardStats {
    pub expired_keys: u64,
    pub expired_stale_perc: f64,
    pub expired_time_cap_reached_count: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    /// Keys evicted under `maxmemory` (INFO `evicted_keys`).
    pub evicted_keys: u64,
}

/// A writable replica's own keys with a deadline (see
/// [`Shard::expire_replica_keys`]): a queue in the order they are looked
/// at, and the set of those in it.
#[derive(Default)]
struct ReplicaKeys {
    queue: std::collections::VecDeque<(usize, SmallBytes)>,
    known: std::collections::HashSet<(usize, SmallBytes)>,
}

/// Remembered replica keys one cron tick looks at, at most.
pub const REPLICA_KEYS_PER_TICK: usize = 1024;

/// Everything one thread owns of the keyspace.
///
/// Laid out in declaration order (`repr(C)`), what every command and job
/// reads (its databases, the clock, the LFU switch, the notification
/// flags, tracking, the outbox's switch and events) at the front: a
/// runtime that runs many shards on one thread (a hub's co-hosted
/// shards) visits each cold, and each line read is a cache miss.
#[repr(C)]
pub struct Shard {
    pub id: usize,
    pub dbs: Vec<Db>,
    /// Milliseconds since the Unix epoch, set by the owning loop.
    pub now_ms: u64,
    /// `Some` when `maxmemory-policy` is an LFU policy: touches then update
    /// the LFU counter (with these settings) instead of the access clock.
    /// Set by the owning loop from the configuration.
    pub lfu: Option<LfuParams>,
    /// The keyspace event classes to publish (`ds::events`, already
    /// `effective`: 0 when notifications are off); set by the owning loop.
    pub notify_flags: u32,
    /// Some client tracks: changes are collected as invalidations (see
    /// [`Shard::set_tracking`]).
    tracking: bool,
    /// The effects of this shard's commands for their consumers (the
    /// append-only file ...), see [`outbox`].
    pub outbox: outbox::Outbox,
    pub stats: ShardStats,
    pub rng: SmallRng,
    /// Where the active expiry cycle resumes (database index).
    expire_cursor_db: usize,
    /// Collection encoding thresholds (`hash-max-listpack-entries` ...),
    /// set by the owning loop from the configuration.
    pub enc: EncLimits,
    /// `rdbcompression`: DUMP payloads LZF-compress long strings (set by
    /// the owning loop from the configuration).
    pub rdb_compression: bool,
    /// `maxmemory` settings and the eviction pool (see [`evict`]).
    pub evict: evict::Evictor,
    /// How many subscriptions could receive keyspace events (kept by the
    /// pub/sub registry; set by the owning loop): with none, configured
    /// notifications build no events, so `notify-keyspace-events` costs
    /// one atomic load per event while nobody listens. `None` (tests,
    /// scratch copies): always build them.
    pub event_listeners: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    /// Client-side caching: the keys of this shard that clients read, and
    /// who (CLIENT TRACKING's default mode); kept by the owning loop.
    pub tracked: Tracked,
    /// What happens to keys past their deadline (see [`Expiry`]); set by
    /// the owning loop (the role) and per command (who runs it).
    pub expiry: Expiry,
    /// A read-only replica (`replica-read-only`): a normal client's
    /// script may not write (set by the owning loop).
    pub read_only_replica: bool,
    /// Keys a normal client gave a deadline on a writable replica (Redis's
    /// `slaveKeysWithExpire`): a replica keeps its master's keys past
    /// their deadline until the master's DEL, but these are its own, and
    /// only it deletes them ([`Shard::expire_replica_keys`]). Emptied when
    /// the shard becomes a master's (its active expiry takes over).
    replica_keys: ReplicaKeys,
    /// Which deletions free big values in the background (the
    /// `lazyfree-*` directives); set through [`Shard::set_lazy`].
    lazy: lazyfree::Lazy,
}

/// How a shard treats keys past their deadline. A master deletes them
/// (lazily and in the active cycle). A replica never deletes them: it
/// waits for its master's DEL, so that its data stays its master's
/// (Redis 7.0's `expireIfNeeded` with `masterhost` set); to its master's
/// commands they are still there, to everybody else's reads they are
/// missing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expiry {
    #[default]
    Delete,
    /// A replica, between commands and for its master's commands: keys
    /// past their deadline are kept and seen.
    Keep,
    /// A replica running a normal client's command: kept, read as missing.
    Hide,
}

/// A client that may cache a key: its id and where it lives (thread,
/// connection slot, the slot's generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tracker {
    pub id: u64,
    pub thread: u16,
    pub slot: u32,
    pub gen: u32,
}

/// Key name (any database, as Redis's tracking table) -> its trackers,
/// each with the shard's effect sequence number when it was remembered
/// (see [`Tracked::take_changed`]).
#[derive(Default)]
pub struct Tracked {
    pub keys: std::collections::HashMap<SmallBytes, Vec<(Tracker, u64)>>,
    /// Trackers across all keys (INFO `tracking_total_items`).
    pub items: usize,
    /// Keys remembered on every shard together (`tracking-table-max-keys`
    /// is one limit for the whole table, as Redis's): kept up to date by
    /// each shard as keys enter and leave its table. `None` in tests.
    pub total: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
}

impl Tracked {
    /// Remembers that `t` may cache `key`, from effect `since` on (the
    /// shard's next sequence number: changes numbered before it were made
    /// before the read). A tracker already there keeps its older number.
    pub fn remember(&mut self, key: &[u8], t: Tracker, since: u64) {
        let v = match self.keys.entry(SmallBytes::from(key)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                if let Some(n) = &self.total {
                    n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                e.insert(Vec::new())
            }
        };
        if !v.iter().any(|x| x.0.id == t.id) {
            v.push((t, since));
            self.items += 1;
        }
    }

    /// The change numbered `seq` of `key`: forgets and returns the
    /// trackers remembered before it. One remembered after it (a read
    /// that ran between the change and its invalidation, in the same loop
    /// iteration) read the new value and stays.
    pub fn take_changed(&mut self, key: &[u8], seq: u64) -> Vec<Tracker> {
        let Some(v) = self.keys.get_mut(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        v.retain(|&(t, since)| {
            let before = since <= seq;
            if before {
                out.push(t);
            }
            !before
        });
        if v.is_empty() {
            self.forget(key);
        }
        self.items -= out.len();
        out
    }

    /// Drops `key`'s entry (counted out of the shared total).
    fn forget(&mut self, key: &[u8]) {
        if self.keys.remove(key).is_some() {
            if let Some(n) = &self.total {
                n.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// `tracking-table-max-keys`: while the keys of every shard together
    /// are more than `max`, takes up to that excess out of this table
    /// (claimed from the shared total first, so shards that do this at
    /// once never take more than the excess between them) and returns
    /// them with their trackers, to be invalidated. Redis picks the keys by
    /// a random walk of its table; here the table's own (hash) order.
    pub fn evict_over(&mut self, max: usize) -> Vec<(SmallBytes, Vec<Tracker>)> {
        let Some(total) = self.total.clone() else {
            return Vec::new();
        };
        let mine = self.keys.len();
        let claimed = total.fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |t| (t > max && mine > 0).then(|| t - (t - max).min(mine)),
        );
        let Ok(before) = claimed else {
            return Vec::new();
        };
        let n = (before - max).min(mine);
        let keys: Vec<SmallBytes> = self.keys.keys().take(n).cloned().collect();
        keys.into_iter()
            .map(|k| {
                let v = self.keys.remove(&k[..]).unwrap_or_default();
                self.items -= v.len();
                (k, v.into_iter().map(|(t, _)| t).collect())
            })
            .collect()
    }

    /// The change numbered `seq` of `key`, for tracker `who` alone:
    /// forgets it if it was remembered before the change (true), leaving
    /// the key's other trackers to [`Tracked::take_changed`].
    pub fn take_changed_for(&mut self, key: &[u8], who: &Tracker, seq: u64) -> bool {
        let Some(v) = self.keys.get_mut(key) else {
            return false;
        };
        let Some(i) = v.iter().position(|(t, since)| t == who && *since <= seq) else {
            return false;
        };
        v.swap_remove(i);
        if v.is_empty() {
            self.forget(key);
        }
        self.items -= 1;
        true
    }

    pub fn clear(&mut self) {
        if let Some(n) = &self.total {
            n.fetch_sub(self.keys.len(), std::sync::atomic::Ordering::Relaxed);
        }
        self.keys.clear();
        self.items = 0;
    }
}

pub use outbox::{Invalidation, KeyEvent};

impl Shard {
    pub fn new(id: usize, databases: usize) -> Self {
        let dirty = db::Dirty::default();
        Shard {
            id,
            dbs: (0..databases)
                .map(|_| {
                    let mut d = Db::new();
                    d.dirty = dirty.share();
                    d
                })
                .collect(),
            stats: ShardStats::default(),
            now_ms: now_ms(),
            rng: SmallRng::from_entropy(),
            expire_cursor_db: 0,
            lfu: None,
            enc: EncLimits::default(),
            rdb_compression: true,
            outbox: outbox::Outbox::default(),
            evict: evict::Evictor::default(),
            notify_flags: 0,
            event_listeners: None,
            tracked: Tracked::default(),
            tracking: false,
            expiry: Expiry::Delete,
            read_only_replica: false,
            replica_keys: ReplicaKeys::default(),
            lazy: lazyfree::Lazy::default(),
        }
    }

    /// Applies the `lazyfree-*` directives (by the owning loop, at start
    /// and after every CONFIG SET).
    pub fn set_lazy(&mut self, lazy: lazyfree::Lazy) {
        self.lazy = lazy;
        for d in &mut self.dbs {
            d.lazy_server_del = lazy.server_del;
        }
    }

    /// The `lazyfree-*` directives this shard follows.
    #[inline]
    pub fn lazy(&self) -> lazyfree::Lazy {
        self.lazy
    }

    /// Emits keyspace event `event` of class `class` (a bit of
    /// `ds::events`) for `key` of `db`, if that class is published: one
    /// branch when notifications are off. Keys created before it (the
    /// `new` class) are emitted first, as Redis's `dbAdd` notifies before
    /// the command does.
    #[inline]
    pub fn notify(&mut self, db: usize, class: u32, event: &'static str, key: &[u8]) {
        if self.notify_flags & class != 0 {
            self.push_event(db, class, event, key);
        }
    }

    #[cold]
    fn push_event(&mut self, db: usize, class: u32, event: &'static str, key: &[u8]) {
        if !self.events_listened() {
            return;
        }
        self.flush_created();
        self.outbox.event(KeyEvent {
            db,
            class,
            event,
            key: SmallBytes::from(key),
            seq: 0,
        });
    }

    /// Whether a subscription could receive keyspace events (see
    /// `event_listeners`). Acquire: a subscription acknowledged before a
    /// command started is seen by it.
    #[inline]
    fn events_listened(&self) -> bool {
        self.event_listeners
            .as_ref()
            .is_none_or(|n| n.load(std::sync::atomic::Ordering::Acquire) != 0)
    }

    /// Moves the keys created so far into `events` as `new` events (or
    /// drops them while nobody listens).
    fn flush_created(&mut self) {
        if !self.events_listened() {
            for d in &mut self.dbs {
                d.created.clear();
            }
            return;
        }
        for (i, d) in self.dbs.iter_mut().enumerate() {
            for k in d.created.drain(..) {
                self.outbox.event(KeyEvent {
                    db: i,
                    class: ds::events::NEW,
                    event: "new",
                    key: k,
                    seq: 0,
                });
            }
        }
    }

    /// Emits events recorded on another shard (a scratch copy that ran a
    /// multi-shard command, see `commands::scratch`), in order, as far as
    /// this shard publishes their classes; keys this shard created before
    /// them come first, as in [`Shard::notify`].
    pub fn emit_events(&mut self, events: Vec<KeyEvent>) {
        if !self.events_listened() {
            return;
        }
        for e in events {
            if self.notify_flags & e.class != 0 {
                self.flush_created();
                self.outbox.event(e);
            }
        }
    }

    /// The events waiting to be published, oldest first.
    pub fn take_events(&mut self) -> Vec<KeyEvent> {
        if self.notify_flags & ds::events::NEW != 0 {
            self.flush_created();
        }
        self.outbox.take_events()
    }

    /// Turns the databases' change lists on while some client tracks
    /// (set by the owning loop); off, the pending invalidations go.
    pub fn set_tracking(&mut self, on: bool) {
        self.tracking = on;
        for d in &mut self.dbs {
            d.track = on;
            d.touched.clear();
        }
        if !on {
            self.outbox.clear_invalidations();
        }
    }

    /// Moves the keys changed since the last call (`Db::touched`) into
    /// the outbox as numbered invalidations, database by database. One
    /// branch while nobody tracks.
    #[inline]
    pub fn collect_touched(&mut self) {
        if self.tracking {
            self.collect_touched_slow();
        }
    }

    fn collect_touched_slow(&mut self) {
        for d in &mut self.dbs {
            for k in d.touched.drain(..) {
                self.outbox.invalidate(k);
            }
        }
    }

    /// Sets the published classes (`notify-keyspace-events`, raw flags).
    pub fn set_notify(&mut self, flags: u32) {
        self.notify_flags = ds::events::effective(flags);
        let track_new = self.notify_flags & ds::events::NEW != 0;
        for d in &mut self.dbs {
            d.track_new = track_new;
            if !track_new {
                d.created.clear();
            }
        }
    }

    /// Changes made to this shard's data so far (see [`Db::dirty`]).
    #[inline]
    pub fn dirty(&self) -> u64 {
        // Every database adds to the shard's one counter (`db::Dirty`).
        self.dbs.first().map_or(0, |d| d.dirty.get())
    }

    /// Refreshes the cached clock; the loop calls this before each batch.
    pub fn tick(&mut self) {
        self.now_ms = now_ms();
    }

    /// [`Shard::tick`] to a time the caller read (a loop reads the clock
    /// once per iteration for everything it times).
    #[inline]
    pub fn set_now_ms(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// Looks a key up for reading: an expired key is deleted (and counted),
    /// hits and misses are counted for INFO, and the access recorded (access
    /// time, or LFU counter under an LFU policy) unless `touch` is false
    /// (CLIENT NO-TOUCH, OBJECT IDLETIME). The caller must not change the
    /// value (a command that does looks the key up with `lookup_write`):
    /// a snapshot writing a big value in slices relies on it.
    /// A miss emits a `keymiss` event.
    pub fn lookup_read(&mut self, db: usize, key: &[u8], touch: bool) -> Option<&mut Entry> {
        self.lookup_read_with(db, key, touch, true)
    }

    /// [`Shard::lookup_read`], with the `keymiss` event only if
    /// `notify_miss` (OBJECT looks keys up without it: Redis's
    /// `LOOKUP_NONOTIFY`).
    #[inline]
    pub fn lookup_read_with(
        &mut self,
        db: usize,
        key: &[u8],
        touch: bool,
        notify_miss: bool,
    ) -> Option<&mut Entry> {
        if self.expire_if_due(db, key) && self.expiry == Expiry::Hide {
            // A replica's logically expired key: a miss, still stored.
            self.stats.keyspace_misses += 1;
            if notify_miss && self.notify_flags & ds::events::KEY_MISS != 0 {
                self.notify(db, ds::events::KEY_MISS, "keymiss", key);
            }
            return None;
        }
        // Redis's `lookupKey` emits `keymiss` where it counts a miss. Found
        // first with a second lookup, only when that class is on: the
        // borrow of the entry below cannot be released on a miss.
        if notify_miss
            && self.notify_flags & ds::events::KEY_MISS != 0
            && self.events_listened()
            && !self.dbs[db].contains(key)
        {
            self.stats.keyspace_misses += 1;
            self.notify(db, ds::events::KEY_MISS, "keymiss", key);
            return None;
        }
        let now = self.now_ms;
        let d = &mut self.dbs[db];
        // A read: the value is not changed (see `Db::get_mut_read`).
        match d.get_mut_read(key) {
            Some(e) => {
                self.stats.keyspace_hits += 1;
                if touch {
                    record_access(e, now, self.lfu, &mut self.rng);
                }
                Some(e)
            }
            None => {
                self.stats.keyspace_misses += 1;
                None
            }
        }
    }

    /// Looks a key up for writing: expires it if due, records the access
    /// (as `lookup_read`), counts no hit or miss (as Redis's
    /// `lookupKeyWrite`).
    pub fn lookup_write(&mut self, db: usize, key: &[u8]) -> Option<&mut Entry> {
        if self.expire_if_due(db, key) && self.expiry == Expiry::Hide {
            return None;
        }
        let now = self.now_ms;
        let d = &mut self.dbs[db];
        let e = d.get_mut(key)?;
        record_access(e, now, self.lfu, &mut self.rng);
        Some(e)
    }

    /// Deletes `key` if its deadline has passed, counting it and
    /// propagating the deletion (Redis's `expireIfNeeded`); true if it did.
    fn expire_if_due(&mut self, db: usize, key: &[u8]) -> bool {
        if self.expiry != Expiry::Delete {
            return self.expiry == Expiry::Hide && self.dbs[db].expired(key, self.now_ms);
        }
        if !self.dbs[db].expire_if_needed(key, self.now_ms, self.lazy.expire) {
            return false;
        }
        self.stats.expired_keys += 1;
        self.outbox.implicit_del(db, key);
        self.notify(db, ds::events::EXPIRED, "expired", key);
        true
    }

    /// A normal client's write on a writable replica left `key` of `db`
    /// with a deadline: remembered, to be deleted when due (see
    /// `replica_keys`). A key remembered already is not again.
    pub fn remember_replica_key(&mut self, db: usize, key: &[u8]) {
        let k = (db, SmallBytes::from(key));
        if self.replica_keys.known.insert(k.clone()) {
            self.replica_keys.queue.push_back(k);
        }
    }

    /// A replica's active expiry of its own keys (Redis's
    /// `expireSlaveKeys`, each cron tick): up to [`REPLICA_KEYS_PER_TICK`]
    /// remembered keys are looked at, oldest look first; those past their
    /// deadline are deleted as a master deletes them, and those gone or
    /// without a deadline now (deleted, overwritten by the master,
    /// PERSISTed) forgotten. Returns the number deleted.
    pub fn expire_replica_keys(&mut self) -> u64 {
        if self.replica_keys.queue.is_empty() {
            return 0;
        }
        let (now, mode) = (self.now_ms, self.expiry);
        self.expiry = Expiry::Delete;
        let mut deleted = 0;
        let n = self.replica_keys.queue.len().min(REPLICA_KEYS_PER_TICK);
        for _ in 0..n {
            let Some((db, k)) = self.replica_keys.queue.pop_front() else {
                break;
            };
            match self.dbs[db].get_with_ttl(&k) {
                Some((_, at)) if at != 0 && now <= at => {
                    self.replica_keys.queue.push_back((db, k));
                    continue;
                }
                Some((_, at)) if at != 0 => deleted += u64::from(self.expire_if_due(db, &k)),
                _ => {}
            }
            self.replica_keys.known.remove(&(db, k));
        }
        self.expiry = mode;
        deleted
    }

    /// The shard became a master's: its active expiry covers the keys a
    /// replica remembered.
    pub fn forget_replica_keys(&mut self) {
        if !self.replica_keys.queue.is_empty() {
            self.replica_keys = ReplicaKeys::default();
        }
    }

    /// Redis's `checkAlreadyExpired`: whether a deadline a command gives
    /// (`at_ms`, Unix ms) is already past, so that the command deletes the
    /// key at once. Never on a replica or while an AOF loads (the expiry
    /// anything but [`Expiry::Delete`]): there the deadline is set, and
    /// the key goes with its master's DEL, or once the load is done.
    pub fn already_expired(&self, at_ms: i64) -> bool {
        at_ms <= self.now_ms as i64 && self.expiry == Expiry::Delete
    }

    /// Whether a live key exists, without touching it or counting a hit.
    pub fn exists(&mut self, db: usize, key: &[u8]) -> bool {
        if self.expire_if_due(db, key) {
            return false;
        }
        self.dbs[db].contains(key)
    }

    /// Removes a live key; `None` if absent or already expired.
    pub fn remove(&mut self, db: usize, key: &[u8]) -> Option<OwnedEntry> {
        if self.expire_if_due(db, key) {
            return None;
        }
        self.dbs[db].remove(key)
    }

    /// Deletes a live key, freeing a large value in the background if the
    /// directive of `why` allows (see [`lazyfree::Del`]); false if absent
    /// or already expired.
    pub fn delete(&mut self, db: usize, key: &[u8], why: lazyfree::Del) -> bool {
        if self.expire_if_due(db, key) {
            return false;
        }
        let lazy = self.lazy.allows(why);
        self.dbs[db].delete(key, lazy)
    }

    /// Stores `value` under `key` with the given expiry (`0` = none),
    /// replacing whatever was there. Under an LFU policy a replaced live
    /// key passes its LFU counter on (Redis's `dbOverwrite`), at the cost
    /// of one more lookup only in that mode.
    pub fn store(&mut self, db: usize, key: &[u8], value: Value, expire_at_ms: u64) {
        let now = self.now_ms;
        let mut entry = OwnedEntry::new(value, now);
        self.inherit_lfu(db, key, &mut entry.meta);
        self.dbs[db].insert(key, entry, expire_at_ms);
    }

    /// [`Shard::store`] of a string given as bytes: as storing
    /// `Str::from_bytes(bytes)`, without building the `Str` when it is
    /// stored with its key (see [`node`]).
    pub fn store_bytes(&mut self, db: usize, key: &[u8], bytes: &[u8], expire_at_ms: u64) {
        if let Some(n) = value::int_form(bytes) {
            return self.store(db, key, Value::Str(Str::Int(n)), expire_at_ms);
        }
        let mut meta = Meta::new(self.now_ms);
        self.inherit_lfu(db, key, &mut meta);
        self.dbs[db].insert_str(key, bytes, meta, expire_at_ms);
    }

    /// [`Shard::store`] of a new `raw` string built by a command (Redis's
    /// `createObject(OBJ_STRING, sds)`, e.g. PFADD's new sketch), which
    /// will not be changed again until looked up with `Db::str_mut`. Longer
    /// than `embstr`'s limit and at most [`node::BYTES_MAX`] bytes it is
    /// stored with its key (reported `raw` by its length, one allocation
    /// and no growth slack); otherwise a growable `raw` string trimmed to
    /// its length. Never an integer, whatever the bytes.
    pub fn store_raw(&mut self, db: usize, key: &[u8], mut v: Vec<u8>, expire_at_ms: u64) {
        if v.len() > value::EMBSTR_MAX && v.len() <= node::BYTES_MAX {
            let mut meta = Meta::new(self.now_ms);
            self.inherit_lfu(db, key, &mut meta);
            self.dbs[db].insert_str(key, &v, meta, expire_at_ms);
        } else {
            v.shrink_to_fit();
            self.store(db, key, Value::Str(Str::from_vec_raw(v)), expire_at_ms);
        }
    }

    /// Under an LFU policy, a live key being replaced passes its counter
    /// on to `meta`.
    #[inline]
    fn inherit_lfu(&self, db: usize, key: &[u8], meta: &mut Meta) {
        if self.lfu.is_some() {
            let now = self.now_ms;
            let d = &self.dbs[db];
            if let Some(old) = d.get(key).filter(|o| !d.is_expired(key, o, now)) {
                meta.lfu_counter = old.lfu_counter;
                meta.lfu_ldt_min = old.lfu_ldt_min;
            }
        }
    }

    /// A random live key of `db` (expired candidates are deleted on the
    /// way, a bounded number of times, as Redis's `dbRandomKey`).
    pub fn random_key(&mut self, db: usize) -> Option<SmallBytes> {
        let now = self.now_ms;
        for _ in 0..100 {
            let key = {
                let d = &self.dbs[db];
                let (k, e) = d.random_entry(&mut self.rng)?;
                if !d.is_expired(k, e, now) {
                    return Some(SmallBytes::from(k));
                }
                SmallBytes::from(k)
            };
            match self.expiry {
                // A replica's master sees it.
                Expiry::Keep => return Some(key),
                Expiry::Hide => {}
                Expiry::Delete => {
                    self.expire_if_due(db, &key);
                }
            }
        }
        None
    }

    /// Whether `key` of `db` is past its deadline and must be treated as
    /// gone by the caller; deletes it on a master (Redis's
    /// `expireIfNeeded`), only reports it on a replica running a normal
    /// client's command, and says no for a replica's master.
    pub fn expire_or_hide(&mut self, db: usize, key: &[u8]) -> bool {
        self.expire_if_due(db, key)
    }

    /// One run of the adaptive active expiry cycle over every database,
    /// bounded by `budget_us` of wall time. Like Redis's slow cycle: sample
    /// up to 20 keys with a TTL, delete the expired ones, and repeat while
    /// more than 10 % of a sample was expired and time remains.
    /// Returns the number of keys deleted.
    pub fn active_expire_cycle(&mut self, budget_us: u64) -> u64 {
        // A replica's keys expire by its master's DELs only.
        if self.expiry != Expiry::Delete {
            return 0;
        }
        const SAMPLE: usize = 20;
        const ACCEPTABLE_STALE_PERC: u64 = 10;
        let start = std::time::Instant::now();
        let now = self.now_ms;
        let ndb = self.dbs.len();
        let mut total = 0u64;
        let (mut sampled_all, mut expired_all) = (0u64, 0u64);
        let mut keys: Vec<SmallBytes> = Vec::with_capacity(SAMPLE);
        for _ in 0..ndb {
            let db = self.expire_cursor_db % ndb;
            self.expire_cursor_db = (self.expire_cursor_db + 1) % ndb;
            let mut iterations = 0u32;
            loop {
                if self.dbs[db].volatile_len() == 0 {
                    break;
                }
                keys.clear();
                self.dbs[db].sample_volatile(&mut self.rng, SAMPLE, &mut keys);
                let sampled = keys.len() as u64;
                let mut expired = 0u64;
                let lazy = self.lazy.expire;
                for k in &keys {
                    if self.dbs[db].expire_if_needed(k, now, lazy) {
                        expired += 1;
                        self.outbox.implicit_del(db, k);
                        self.notify(db, ds::events::EXPIRED, "expired", k);
                    }
                }
                total += expired;
                sampled_all += sampled;
                expired_all += expired;
                iterations += 1;
                if iterations.is_multiple_of(16) && start.elapsed().as_micros() as u64 > budget_us {
                    self.stats.expired_time_cap_reached_count += 1;
                    break;
                }
                if sampled == 0 || expired * 100 <= sampled * ACCEPTABLE_STALE_PERC {
                    break;
                }
            }
        }
        self.stats.expired_keys += total;
        if sampled_all > 0 {
            let perc = expired_all as f64 / sampled_all as f64;
            self.stats.expired_stale_perc = perc * 0.05 + self.stats.expired_stale_perc * 0.95;
        }
        total
    }

    /// Does shrink work tables still owe, for at most `budget_us`.
    pub fn rehash_cron(&mut self, budget_us: u64) {
        let start = std::time::Instant::now();
        for db in &mut self.dbs {
            while db.rehash_step(100) {
                if start.elapsed().as_micros() as u64 >= budget_us {
                    return;
                }
            }
        }
    }

    /// Total keys over all databases (expired but not yet deleted included,
    /// as Redis's DBSIZE).
    pub fn key_count(&self) -> usize {
        self.dbs.iter().map(|d| d.len()).sum()
    }
}

/// One access to `e`: Redis's `lookupKey` stores either the LRU clock or,
/// under an LFU policy, the updated LFU counter, never both.
#[inline]
fn record_access(e: &mut Entry, now_ms: u64, lfu: Option<LfuParams>, rng: &mut SmallRng) {
    match lfu {
        None => e.touch(now_ms),
        Some(p) => e.touch_lfu(now_ms, p, rng),
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every command and job reads of its shard stays at the front,
    /// on two cache lines (see `Shard`): a field added above them, or the
    /// `repr(C)` dropped, fails here.
    #[test]
    fn hot_fields_lead_the_shard() {
        use std::mem::offset_of;
        for end in [
            offset_of!(Shard, dbs) + 24,
            offset_of!(Shard, now_ms) + 8,
            offset_of!(Shard, lfu) + std::mem::size_of::<Option<LfuParams>>(),
            offset_of!(Shard, notify_flags) + 4,
            offset_of!(Shard, tracking) + 1,
        ] {
            assert!(end <= 64, "{end}");
        }
        // The outbox's switch and events lead the next line.
        let outbox = offset_of!(Shard, outbox);
        assert!(outbox <= 64);
        assert!(outbox + offset_of!(outbox::Outbox, records_on) < 128);
    }

    fn s(v: &str) -> Value {
        Value::Str(Str::from_bytes(v.as_bytes()))
    }

    /// The shard's change count is the sum over its databases, kept as one
    /// counter they all add to: through stores, a FLUSHDB's take (the old
    /// tables leave with a counter of their own), a swap, a reset.
    #[test]
    fn every_database_adds_to_the_shards_one_change_count() {
        let mut sh = Shard::new(0, 16);
        assert_eq!(sh.dirty(), 0);
        sh.store(0, b"a", s("1"), 0);
        sh.store(7, b"b", s("2"), 0);
        sh.store(15, b"c", s("3"), 0);
        assert_eq!(sh.dirty(), 3);
        let mut old = sh.dbs[7].take();
        assert_eq!(sh.dirty(), 4, "FLUSHDB counts the key it dropped");
        old.dirty += 10;
        assert_eq!(sh.dirty(), 4, "the old tables count on their own");
        sh.store(7, b"d", s("4"), 0);
        assert_eq!(sh.dirty(), 5, "the emptied database still counts");
        let (a, b) = sh.dbs.split_at_mut(9);
        Db::swap_contents(&mut a[0], &mut b[6]);
        assert_eq!(sh.dirty(), 7, "SWAPDB: one each");
        sh.dbs[3].dirty.reset();
        assert_eq!(sh.dirty(), 0);
    }

    #[test]
    fn lazy_expiry_deletes_and_counts() {
        let mut sh = Shard::new(0, 2);
        sh.store(0, b"a", s("1"), sh.now_ms + 10);
        sh.store(0, b"b", s("2"), 0);
        assert!(sh.lookup_read(0, b"a", true).is_some());
        sh.now_ms += 11;
        assert!(sh.lookup_read(0, b"a", true).is_none());
        assert_eq!(sh.stats.expired_keys, 1);
        assert_eq!(sh.dbs[0].len(), 1);
        assert_eq!(sh.dbs[0].volatile_len(), 0);
        assert_eq!(sh.stats.keyspace_hits, 1);
        assert_eq!(sh.stats.keyspace_misses, 1);
        assert!(sh.lookup_read(1, b"b", true).is_none());
    }

    fn big_set() -> Value {
        let lim = EncLimits::default();
        let mut s = crate::types::Set::create(b"m0", 1000, &lim);
        for i in 0..1000 {
            s.add(format!("m{i}").as_bytes(), &lim);
        }
        Value::Set(Box::new(s))
    }

    /// Each deletion path asks its own directive; with `no` nothing
    /// reaches the lazyfree thread (the value is freed inline).
    #[test]
    fn every_deletion_path_follows_its_lazyfree_directive() {
        let _serial = crate::lazyfree::tests::SERIAL.lock();
        let sent = lazyfree::sent;
        let no = lazyfree::Lazy {
            eviction: false,
            expire: false,
            server_del: false,
            user_del: false,
            user_flush: false,
            replica_flush: false,
        };
        for lazy in [no, lazyfree::Lazy::default()] {
            let mut sh = Shard::new(0, 2);
            sh.set_lazy(lazy);
            let one = u64::from(lazy.user_del);
            // DEL.
            sh.store(0, b"k", big_set(), 0);
            let before = sent();
            assert!(sh.delete(0, b"k", lazyfree::Del::User));
            assert_eq!(sent(), before + one);
            // UNLINK: always.
            sh.store(0, b"k", big_set(), 0);
            let before = sent();
            assert!(sh.delete(0, b"k", lazyfree::Del::Unlink));
            assert_eq!(sent(), before + 1);
            // An overwrite, in every database (set_lazy reached them all).
            for db in 0..2 {
                sh.store(db, b"k", big_set(), 0);
                let before = sent();
                sh.store(db, b"k", Value::Str(Str::from_bytes(b"x")), 0);
                assert_eq!(sent(), before + one);
            }
            // ... and after FLUSHDB ASYNC took the tables out.
            drop(sh.dbs[1].take());
            sh.store(1, b"k", big_set(), 0);
            let before = sent();
            sh.store(1, b"k", Value::Str(Str::from_bytes(b"x")), 0);
            assert_eq!(sent(), before + one);
            // Expiry: on access and in the active cycle.
            sh.store(0, b"e1", big_set(), 1);
            sh.store(0, b"e2", big_set(), 1);
            let before = sent();
            assert!(!sh.exists(0, b"e1"));
            assert_eq!(sh.active_expire_cycle(1_000_000), 1);
            assert_eq!(sent(), before + 2 * one);
        }
    }

    #[test]
    fn store_raw_keeps_no_slack_and_stays_raw() {
        let mut sh = Shard::new(0, 1);
        let mut big = Vec::with_capacity(200);
        big.extend_from_slice(&[b'x'; 48]);
        sh.store_raw(0, b"big", big, 0);
        let mut small = Vec::with_capacity(200);
        small.extend_from_slice(b"12");
        sh.store_raw(0, b"small", small, 0);
        // 45..=4096 bytes: with the key, no buffer of its own.
        let e = sh.lookup_write(0, b"big").unwrap();
        match e.value() {
            ValueRef::Str(r @ StrRef::Bytes(b)) => {
                assert_eq!(b, &[b'x'; 48][..]);
                assert_eq!(r.encoding(), "raw");
            }
            v => panic!("stored as {v:?}"),
        }
        assert!(e.str_in_place().is_none(), "bytes move before a change");
        // A change of the same length leaves them with the key.
        sh.dbs[0].str_bytes_mut(b"big").unwrap()[0] = b'z';
        match sh.lookup_write(0, b"big").unwrap().value() {
            ValueRef::Str(StrRef::Bytes(b)) => assert_eq!(&b[..2], b"zx"),
            v => panic!("moved: {v:?}"),
        }
        // An embstr stored with its key moves (and becomes raw).
        sh.store_bytes(0, b"emb", &[b'e'; 30], 0);
        sh.dbs[0].str_bytes_mut(b"emb").unwrap()[0] = b'f';
        let e = sh.lookup_write(0, b"emb").unwrap();
        assert_eq!(e.str_in_place().unwrap().encoding(), "raw");
        let s = sh.dbs[0].str_mut(b"big").unwrap();
        assert_eq!(s.encoding(), "raw");
        s.make_raw().push(b'y');
        assert!(sh.lookup_write(0, b"big").unwrap().str_in_place().is_some());
        // Short: growable, trimmed, and raw even when it reads as a number.
        let e = sh.lookup_write(0, b"small").unwrap();
        let s = e.str_in_place().unwrap();
        assert_eq!(s.encoding(), "raw");
        assert_eq!(s.make_raw().capacity(), 2);
    }

    #[test]
    fn expired_exactly_after_deadline() {
        // Redis: a key is expired when now > when.
        let mut sh = Shard::new(0, 1);
        let t = sh.now_ms;
        sh.store(0, b"a", s("1"), t + 5);
        sh.now_ms = t + 5;
        assert!(sh.exists(0, b"a"));
        sh.now_ms = t + 6;
        assert!(!sh.exists(0, b"a"));
    }

    #[test]
    fn active_cycle_removes_expired_keys() {
        let mut sh = Shard::new(0, 1);
        let t = sh.now_ms;
        for i in 0..1000 {
            sh.store(0, format!("k{i}").as_bytes(), s("v"), t + 1);
        }
        for i in 0..10 {
            sh.store(0, format!("p{i}").as_bytes(), s("v"), 0);
        }
        sh.now_ms = t + 100;
        let mut n = 0;
        for _ in 0..200 {
            n += sh.active_expire_cycle(1_000_000);
            if sh.dbs[0].len() == 10 {
                break;
            }
        }
        assert_eq!(n, 1000);
        assert_eq!(sh.dbs[0].len(), 10);
        assert_eq!(sh.stats.expired_keys, 1000);
    }

    #[test]
    fn random_key_skips_expired() {
        let mut sh = Shard::new(0, 1);
        assert!(sh.random_key(0).is_none());
        let t = sh.now_ms;
        sh.store(0, b"gone", s("v"), t + 1);
        sh.store(0, b"live", s("v"), 0);
        sh.now_ms = t + 10;
        for _ in 0..20 {
            assert_eq!(sh.random_key(0).as_deref(), Some(&b"live"[..]));
        }
    }

    #[test]
    fn touches_update_lfu_only_under_an_lfu_policy() {
        let mut sh = Shard::new(0, 1);
        sh.rng = SmallRng::seed_from_u64(3);
        sh.now_ms = 1_000 * 60_000;
        sh.store(0, b"k", s("v"), 0);
        let fresh = (sh.dbs[0].get(b"k").unwrap().lfu_counter, sh.now_ms / 1000);
        assert_eq!(fresh.0, lfu::LFU_INIT_VAL);
        // LRU mode: the access clock moves, the LFU pair does not.
        sh.now_ms += 5_000;
        let e = sh.lookup_read(0, b"k", true).unwrap();
        assert_eq!(e.lfu_counter, lfu::LFU_INIT_VAL);
        assert_eq!(u64::from(e.access_s), fresh.1 + 5);
        // LFU mode: the first access always increments (counter ≤ init).
        let p = LfuParams::default();
        sh.lfu = Some(p);
        sh.now_ms += 5_000;
        let e = sh.lookup_read(0, b"k", true).unwrap();
        assert_eq!(e.lfu_counter, lfu::LFU_INIT_VAL + 1);
        assert_eq!(u64::from(e.access_s), fresh.1 + 5, "clock left alone");
        // No-touch lookups leave it.
        for _ in 0..100 {
            sh.lookup_read(0, b"k", false);
        }
        let now = sh.now_ms;
        assert_eq!(sh.dbs[0].get(b"k").unwrap().lfu_freq(now, p), 6);
        // Writes touch too.
        for _ in 0..1000 {
            sh.lookup_write(0, b"k");
        }
        let c = sh.dbs[0].get(b"k").unwrap().lfu_counter;
        assert!((12..=26).contains(&c), "{c}");
        // Overwriting a live key keeps its counter (Redis's dbOverwrite)...
        sh.store(0, b"k", s("w"), 0);
        assert_eq!(sh.dbs[0].get(b"k").unwrap().lfu_counter, c);
        // ... an expired one does not.
        sh.store(0, b"k", s("w"), now + 1);
        sh.now_ms = now + 2;
        sh.store(0, b"k", s("x"), 0);
        assert_eq!(sh.dbs[0].get(b"k").unwrap().lfu_counter, lfu::LFU_INIT_VAL);
    }

    #[test]
    fn lfu_touch_decays_before_incrementing() {
        let mut sh = Shard::new(0, 1);
        sh.rng = SmallRng::seed_from_u64(9);
        let p = LfuParams::default();
        sh.lfu = Some(p);
        // Start 2 minutes before the 16-bit minute clock wraps.
        let t = 65534 * 60_000;
        sh.now_ms = t;
        sh.store(0, b"k", s("v"), 0);
        sh.dbs[0].get_mut(b"k").unwrap().lfu_counter = 40;
        // 3 minutes later the clock reads 1; Redis counts 65535-65534+1 = 2.
        sh.now_ms = t + 3 * 60_000;
        assert_eq!(sh.dbs[0].get(b"k").unwrap().lfu_freq(sh.now_ms, p), 38);
        let e = sh.lookup_read(0, b"k", true).unwrap();
        // Decayed to 38, then incremented with p = 1/331 at most once.
        assert!(e.lfu_counter == 38 || e.lfu_counter == 39);
        assert_eq!(e.lfu_ldt_min, 1);
        // Decay-time 0 never decays.
        sh.lfu = Some(LfuParams {
            decay_time_min: 0,
            ..p
        });
        let before = sh.dbs[0].get(b"k").unwrap().lfu_counter;
        sh.now_ms += 500 * 60_000;
        let (now, q) = (sh.now_ms, sh.lfu.unwrap());
        let e = sh.lookup_read(0, b"k", false).unwrap();
        assert_eq!(e.lfu_freq(now, q), before);
    }
}

#[cfg(test)]
mod tracked_tests {
    use super::{Tracked, Tracker};

    fn t(id: u64) -> Tracker {
        Tracker {
            id,
            thread: 0,
            slot: 0,
            gen: 0,
        }
    }

    /// A change invalidates the trackers remembered before it; one
    /// remembered after it (a read later in the same loop iteration) stays.
    #[test]
    fn a_change_takes_only_the_trackers_remembered_before_it() {
        let mut tr = Tracked::default();
        tr.remember(b"k", t(1), 5);
        tr.remember(b"k", t(2), 9);
        tr.remember(b"k", t(1), 20); // already there: keeps 5
        assert_eq!(tr.items, 2);
        assert_eq!(tr.take_changed(b"k", 7), vec![t(1)]);
        assert_eq!(tr.items, 1);
        assert_eq!(tr.take_changed(b"k", 8), vec![]);
        assert_eq!(tr.take_changed(b"k", 9), vec![t(2)]);
        assert!(tr.keys.is_empty() && tr.items == 0);
        assert_eq!(tr.take_changed(b"none", 1), vec![]);
    }
}
