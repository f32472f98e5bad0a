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

pub mod db;
pub mod value;

pub use db::{Db, Entry};
pub use ds::SmallBytes;
pub use value::{Str, Value};

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
}

/// Everything one thread owns of the keyspace.
pub struct Shard {
    pub id: usize,
    pub dbs: Vec<Db>,
    pub stats: ShardStats,
    /// Milliseconds since the Unix epoch, set by the owning loop.
    pub now_ms: u64,
    pub rng: SmallRng,
    /// Where the active expiry cycle resumes (database index).
    expire_cursor_db: usize,
}

impl Shard {
    pub fn new(id: usize, databases: usize) -> Self {
        Shard {
            id,
            dbs: (0..databases).map(|_| Db::new()).collect(),
            stats: ShardStats::default(),
            now_ms: now_ms(),
            rng: SmallRng::from_entropy(),
            expire_cursor_db: 0,
        }
    }

    /// Refreshes the cached clock; the loop calls this before each batch.
    pub fn tick(&mut self) {
        self.now_ms = now_ms();
    }

    /// Looks a key up for reading: an expired key is deleted (and counted),
    /// hits and misses are counted for INFO, and the access time updated
    /// unless `touch` is false (CLIENT NO-TOUCH, OBJECT IDLETIME).
    pub fn lookup_read(&mut self, db: usize, key: &[u8], touch: bool) -> Option<&mut Entry> {
        let now = self.now_ms;
        let d = &mut self.dbs[db];
        if d.expire_if_needed(key, now) {
            self.stats.expired_keys += 1;
        }
        match d.get_mut(key) {
            Some(e) => {
                self.stats.keyspace_hits += 1;
                if touch {
                    e.touch(now);
                }
                Some(e)
            }
            None => {
                self.stats.keyspace_misses += 1;
                None
            }
        }
    }

    /// Looks a key up for writing: expires it if due, updates its access
    /// time, counts no hit or miss (as Redis's `lookupKeyWrite`).
    pub fn lookup_write(&mut self, db: usize, key: &[u8]) -> Option<&mut Entry> {
        let now = self.now_ms;
        let d = &mut self.dbs[db];
        if d.expire_if_needed(key, now) {
            self.stats.expired_keys += 1;
        }
        let e = d.get_mut(key)?;
        e.touch(now);
        Some(e)
    }

    /// Whether a live key exists, without touching it or counting a hit.
    pub fn exists(&mut self, db: usize, key: &[u8]) -> bool {
        let now = self.now_ms;
        let d = &mut self.dbs[db];
        if d.expire_if_needed(key, now) {
            self.stats.expired_keys += 1;
            return false;
        }
        d.contains(key)
    }

    /// Removes a live key; `None` if absent or already expired.
    pub fn remove(&mut self, db: usize, key: &[u8]) -> Option<Entry> {
        let now = self.now_ms;
        let d = &mut self.dbs[db];
        if d.expire_if_needed(key, now) {
            self.stats.expired_keys += 1;
            return None;
        }
        d.remove(key)
    }

    /// Stores `value` under `key` with the given expiry (`0` = none),
    /// replacing whatever was there.
    pub fn store(&mut self, db: usize, key: &[u8], value: Value, expire_at_ms: u64) {
        let now = self.now_ms;
        self.dbs[db].insert(key, Entry::new(value, expire_at_ms, now));
    }

    /// A random live key of `db` (expired candidates are deleted on the
    /// way, a bounded number of times, as Redis's `dbRandomKey`).
    pub fn random_key(&mut self, db: usize) -> Option<SmallBytes> {
        let now = self.now_ms;
        for _ in 0..100 {
            let key = {
                let d = &self.dbs[db];
                let (k, e) = d.random_entry(&mut self.rng)?;
                if !e.is_expired(now) {
                    return Some(k.clone());
                }
                k.clone()
            };
            if self.dbs[db].expire_if_needed(&key, now) {
                self.stats.expired_keys += 1;
            }
        }
        None
    }

    /// One run of the adaptive active expiry cycle over every database,
    /// bounded by `budget_us` of wall time. Like Redis's slow cycle: sample
    /// up to 20 keys with a TTL, delete the expired ones, and repeat while
    /// more than 10 % of a sample was expired and time remains.
    /// Returns the number of keys deleted.
    pub fn active_expire_cycle(&mut self, budget_us: u64) -> u64 {
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
                for k in &keys {
                    if self.dbs[db].expire_if_needed(k, now) {
                        expired += 1;
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

    /// Moves unfinished rehashes forward for at most `budget_us`.
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

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(Str::from_bytes(v.as_bytes()))
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
}
