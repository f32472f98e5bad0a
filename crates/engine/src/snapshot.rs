//! Point-in-time snapshots of a shard, written between commands, without
//! `fork()` and without copying the dataset.
//!
//! Redis forks and lets the kernel's copy-on-write keep the parent's pages
//! as they were; memory can double under writes. Here each shard writes its
//! own keys, a bounded piece at a time between batches of commands, and
//! copies on write at the level of entries:
//!
//! * **Begin** ([`Shard::snapshot_begin`]) bumps every database's *epoch*.
//!   An entry whose stamp (`Entry::snap`) differs from its database's
//!   epoch has not been accounted for yet. The runtime begins all shards
//!   at one instant (under a whole-keyspace lock), so the snapshot is
//!   point-in-time consistent across shards.
//! * **Step** ([`Shard::snapshot_step`]) walks the key table with the
//!   resize-safe SCAN cursor (every entry present throughout is visited at
//!   least once, however the table rehashes) and writes each unstamped
//!   entry, stamping it: written exactly once, however often visited.
//! * **Copy before change**: while a database is being saved, every path
//!   that can change or drop an entry (`Db::get_mut`, `insert`, `remove`,
//!   `set_expire`) first writes the entry if it is unstamped; entries
//!   created after the begin are stamped at birth and never written.
//!   FLUSHDB and FLUSHALL hand the whole table to the snapshot, which
//!   writes what it had not written yet and then frees it (O(1) for the
//!   command, as a fork would keep the old pages); SWAPDB finishes both
//!   databases first.
//!
//! The extra memory is the serialized bytes not yet handed to the writer,
//! bounded by the step budget plus what the commands of one loop iteration
//! change. The cost when no snapshot runs is one predictable branch per
//! mutation.
//!
//! Stamps are a `u8` per entry (it sits in `Entry`'s padding). A snapshot
//! that ends early (write error, FLUSHALL) leaves stamps mixed; the next
//! begin then restamps every entry first, so a wrapped-around epoch can
//! never make an old stamp look current.

use ds::{Dict, TinyBytes};

use crate::db::{Db, Entry};
use crate::Shard;

/// Per-database snapshot state.
#[derive(Debug)]
pub struct DbSnap {
    /// Serialized entries not yet collected by the runtime.
    out: Vec<u8>,
    cursor: u64,
    done: bool,
    compress: bool,
    /// Access data written with each entry, as Redis does under an LRU or
    /// LFU `maxmemory-policy` (IDLE / FREQ opcodes).
    meta: Meta,
    /// Write each key as the commands that rebuild it (an AOF base with
    /// `aof-use-rdb-preamble no`) instead of RDB.
    cmds: bool,
    /// Entries written.
    keys: u64,
    /// Tables FLUSHDB / FLUSHALL emptied while they were being saved: kept
    /// (not copied) until their unwritten entries are written, with their
    /// scan cursors. Nothing else can reach them, so they need no hooks.
    graveyard: Vec<(Dict<TinyBytes, Entry>, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Meta {
    None,
    /// Idle seconds relative to this instant (ms).
    Lru(u64),
    Lfu,
}

impl DbSnap {
    /// Writes `e` if the running snapshot has not accounted for it yet.
    #[inline]
    pub(crate) fn visit(&mut self, key: &[u8], e: &mut Entry, epoch: u8) {
        self.visit_with(key, e, epoch, self.compress);
    }

    /// A copy before change, on a command's path: written uncompressed
    /// (LZF is the dearest part of writing an entry, and this cost lands on
    /// the command; the file stays valid RDB, a little larger).
    #[inline]
    pub(crate) fn visit_before_change(&mut self, key: &[u8], e: &mut Entry, epoch: u8) {
        self.visit_with(key, e, epoch, false);
    }

    #[inline]
    fn visit_with(&mut self, key: &[u8], e: &mut Entry, epoch: u8, compress: bool) {
        if e.snap != epoch {
            if self.cmds {
                crate::rdb::write_entry_cmds(&mut self.out, key, e);
            } else {
                let (idle, freq) = self.meta_of(e);
                crate::rdb::write_entry_ext(&mut self.out, key, e, compress, idle, freq);
            }
            e.snap = epoch;
            self.keys += 1;
        }
    }
}

impl DbSnap {
    fn meta_of(&self, e: &Entry) -> (Option<u64>, Option<u8>) {
        match self.meta {
            Meta::None => (None, None),
            Meta::Lru(now_ms) => (Some(e.idle_s(now_ms)), None),
            Meta::Lfu => (None, Some(e.lfu_counter)),
        }
    }
}

/// Frees a retired table: on a background thread when it is large, as
/// FLUSHALL ASYNC does.
fn free_table(t: Dict<TinyBytes, Entry>) {
    if t.len() < 64 {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("lazyfree".into())
        .spawn(move || drop(t));
}

/// How many table buckets one step may visit even if they write nothing
/// (a sparse or already-written table), so a step stays short.
const STEP_MAX_BUCKETS: usize = 4096;

impl Db {
    fn snapshot_begin(&mut self, compress: bool, meta: Meta, cmds: bool) {
        self.epoch = self.epoch.wrapping_add(1);
        self.saving = true;
        self.snap = Some(Box::new(DbSnap {
            out: Vec::new(),
            cursor: 0,
            done: false,
            compress,
            meta,
            cmds,
            keys: 0,
            graveyard: Vec::new(),
        }));
    }

    /// Writes about `budget` more bytes (at least one bucket's entries);
    /// true when every entry has been written.
    fn snapshot_step(&mut self, budget: usize) -> bool {
        let epoch = self.epoch;
        let Some(snap) = self.snap.as_deref_mut() else {
            return true;
        };
        if snap.done {
            return true;
        }
        let start = snap.out.len();
        let mut buckets = 0;
        while self.saving {
            let cursor = snap.cursor;
            snap.cursor = self.table.scan_mut(cursor, |k, e| snap.visit(k, e, epoch));
            buckets += 1;
            if snap.cursor == 0 {
                // The live table is done: no more copies before change.
                self.saving = false;
            } else if snap.out.len() - start >= budget || buckets >= STEP_MAX_BUCKETS {
                return false;
            }
        }
        let mut graveyard = std::mem::take(&mut snap.graveyard);
        while let Some((table, cursor)) = graveyard.last_mut() {
            let c = *cursor;
            *cursor = table.scan_mut(c, |k, e| snap.visit(k, e, epoch));
            buckets += 1;
            if *cursor == 0 {
                if let Some((t, _)) = graveyard.pop() {
                    free_table(t);
                }
            } else if snap.out.len() - start >= budget || buckets >= STEP_MAX_BUCKETS {
                snap.graveyard = graveyard;
                return false;
            }
        }
        snap.done = true;
        true
    }

    /// FLUSHDB / FLUSHALL while this database is being saved: its table
    /// moves, unwritten entries and all, to the snapshot (O(1), no copy),
    /// leaving an empty one. False if no save runs here.
    pub(crate) fn snapshot_retire(&mut self) -> bool {
        if !self.saving {
            return false;
        }
        let Some(snap) = self.snap.as_deref_mut() else {
            return false;
        };
        snap.graveyard.push((std::mem::take(&mut self.table), 0));
        true
    }

    /// Writes every entry not written yet (before FLUSHDB, SWAPDB).
    pub(crate) fn snapshot_finish(&mut self) {
        if self.saving {
            while !self.snapshot_step(usize::MAX) {}
        }
    }

    fn restamp(&mut self) {
        let epoch = self.epoch;
        for (_, e) in self.table.iter_mut() {
            e.snap = epoch;
        }
        self.stamps_mixed = false;
    }
}

impl Shard {
    /// Starts a snapshot of every database of this shard at this instant.
    /// `compress`: LZF-compress long strings (`rdbcompression`).
    pub fn snapshot_begin(&mut self, compress: bool) {
        self.snapshot_begin_as(compress, false);
    }

    /// [`Shard::snapshot_begin`], writing commands instead of RDB when
    /// `cmds` (see `rdb::write_entry_cmds`).
    pub fn snapshot_begin_as(&mut self, compress: bool, cmds: bool) {
        if self.dbs.iter().any(|d| d.stamps_mixed) {
            for d in &mut self.dbs {
                d.restamp();
            }
        }
        use crate::evict::Policy;
        let meta = match self.evict.policy {
            Policy::AllkeysLru | Policy::VolatileLru => Meta::Lru(self.now_ms),
            Policy::AllkeysLfu | Policy::VolatileLfu => Meta::Lfu,
            _ => Meta::None,
        };
        for d in &mut self.dbs {
            d.snapshot_begin(compress, meta, cmds);
        }
    }

    /// Whether a snapshot is running or its output not yet collected.
    pub fn snapshot_running(&self) -> bool {
        self.dbs.first().is_some_and(|d| d.snap.is_some())
    }

    /// Writes about `budget` more bytes of the snapshot; true when every
    /// database is done.
    pub fn snapshot_step(&mut self, budget: usize) -> bool {
        for d in &mut self.dbs {
            if !d.snapshot_step(budget) {
                return false;
            }
        }
        true
    }

    /// Collects what was written since the last call (by steps, and by
    /// copies before change) as one RDB fragment: per database with
    /// output, a SELECTDB opcode and its entries. Empty if nothing new.
    pub fn snapshot_take(&mut self) -> Vec<u8> {
        let mut chunk = Vec::new();
        for (i, d) in self.dbs.iter_mut().enumerate() {
            if let Some(s) = d.snap.as_deref_mut() {
                if !s.out.is_empty() {
                    if s.cmds {
                        crate::rdb::write_select_cmd(&mut chunk, i);
                    } else {
                        crate::rdb::write_select_db(&mut chunk, i);
                    }
                    chunk.extend_from_slice(&s.out);
                    s.out.clear();
                }
            }
        }
        chunk
    }

    /// Ends the snapshot (after [`Shard::snapshot_step`] returned true and
    /// the output was taken): returns the number of keys written.
    pub fn snapshot_end(&mut self) -> u64 {
        let mut keys = 0;
        for d in &mut self.dbs {
            if let Some(mut s) = d.snap.take() {
                keys += s.keys;
                if !s.done {
                    d.stamps_mixed = true;
                }
                for (t, _) in s.graveyard.drain(..) {
                    free_table(t);
                }
            }
            d.saving = false;
        }
        keys
    }

    /// Abandons a running snapshot (write error, shutdown): its output is
    /// dropped and the next snapshot starts afresh.
    pub fn snapshot_abort(&mut self) {
        self.snapshot_end();
    }

    /// Writes this shard's whole data in one go (SAVE, shutdown) as a
    /// sequence of fragments of about `chunk` bytes each, handed to `sink`.
    pub fn snapshot_all(
        &mut self,
        compress: bool,
        chunk: usize,
        mut sink: impl FnMut(Vec<u8>),
    ) -> u64 {
        self.snapshot_begin(compress);
        loop {
            let done = self.snapshot_step(chunk);
            let out = self.snapshot_take();
            if !out.is_empty() {
                sink(out);
            }
            if done {
                return self.snapshot_end();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::{Rng, SeedableRng};

    use crate::rdb::{self, Reader};
    use crate::{EncLimits, Entry, Shard, Str, Value};

    type Image = BTreeMap<(usize, Vec<u8>), (Value, u64)>;

    fn image(s: &Shard) -> Image {
        let mut m = BTreeMap::new();
        for (i, d) in s.dbs.iter().enumerate() {
            for (k, e) in d.iter() {
                m.insert((i, k.to_vec()), (e.value.clone(), e.expire_at_ms()));
            }
        }
        m
    }

    fn decode(fragments: &[Vec<u8>]) -> Image {
        let mut file = Vec::new();
        rdb::write_header(&mut file, 0, 0, false);
        for f in fragments {
            file.extend_from_slice(f);
        }
        rdb::write_eof(&mut file);
        let crc = rdb::crc64(0, &file);
        file.extend_from_slice(&crc.to_le_bytes());
        let mut r = Reader::new(&file[..], EncLimits::default()).unwrap();
        let mut m = BTreeMap::new();
        while let Some(l) = r.next().unwrap() {
            let dup = m.insert((l.db, l.key), (l.value, l.expire_at_ms));
            assert!(dup.is_none(), "a key was written twice");
        }
        m
    }

    fn val(n: u64) -> Value {
        Value::Str(Str::from_bytes(format!("v{n}").as_bytes()))
    }

    /// The file holds exactly the data as it was when the snapshot began,
    /// however the keys are overwritten, deleted, created, given TTLs,
    /// changed in place or flushed while the shard writes it step by step
    /// (and the table grows and rehashes meanwhile).
    #[test]
    fn snapshot_is_the_data_at_begin_under_concurrent_changes() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for round in 0..8 {
            let mut s = Shard::new(0, 3);
            for i in 0..2000u64 {
                let db = (i % 3) as usize;
                let ttl = if i % 5 == 0 { 4_000_000_000_000 + i } else { 0 };
                s.dbs[db].insert(format!("k{i}").as_bytes(), Entry::new(val(i), ttl, 0));
            }
            let before = image(&s);
            s.snapshot_begin(round % 2 == 0);
            let mut frags = Vec::new();
            let mut next = 10_000u64;
            loop {
                // A burst of changes between steps.
                for _ in 0..40 {
                    let db = rng.gen_range(0..3);
                    let k = format!("k{}", rng.gen_range(0..2500u64));
                    match rng.gen_range(0..7) {
                        0 => s.dbs[db].insert(k.as_bytes(), Entry::new(val(next), 0, 0)),
                        1 => drop(s.dbs[db].remove(k.as_bytes())),
                        2 => drop(s.dbs[db].set_expire(k.as_bytes(), 5_000_000_000_000)),
                        3 => {
                            if let Some(e) = s.dbs[db].get_mut(k.as_bytes()) {
                                e.value = val(next);
                            }
                        }
                        4 => {
                            let k = format!("new{next}");
                            s.dbs[db].insert(k.as_bytes(), Entry::new(val(next), 0, 0));
                        }
                        5 if round >= 4 && rng.gen_ratio(1, 50) => s.dbs[db].clear(),
                        _ if round >= 4 && rng.gen_ratio(1, 80) => drop(s.dbs[db].take()),
                        _ => {}
                    }
                    next += 1;
                }
                let done = s.snapshot_step(512);
                let out = s.snapshot_take();
                if !out.is_empty() {
                    frags.push(out);
                }
                if done {
                    break;
                }
            }
            let keys = s.snapshot_end();
            assert_eq!(keys as usize, before.len());
            assert_eq!(decode(&frags), before, "round {round}");
            // The next snapshot sees the data as it is now.
            let now = image(&s);
            let mut frags = Vec::new();
            s.snapshot_all(false, 4096, |b| frags.push(b));
            assert_eq!(decode(&frags), now);
        }
    }

    /// A snapshot abandoned half way leaves mixed stamps; the next one
    /// still writes every key once.
    #[test]
    fn an_aborted_snapshot_does_not_hide_keys_from_the_next() {
        let mut s = Shard::new(0, 1);
        for i in 0..3000u64 {
            s.dbs[0].insert(format!("k{i}").as_bytes(), Entry::new(val(i), 0, 0));
        }
        for _ in 0..300 {
            s.snapshot_begin(false);
            assert!(!s.snapshot_step(64));
            s.snapshot_abort();
        }
        let mut frags = Vec::new();
        assert_eq!(s.snapshot_all(false, 1 << 16, |b| frags.push(b)), 3000);
        assert_eq!(decode(&frags), image(&s));
        assert!(!s.snapshot_running());
    }
}
