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
//! * **Big values in slices**: a non-compact collection (skiplist zset,
//!   hashtable hash or set, long list) is not written in one go when the
//!   scan meets it: it is stamped and queued, and steps write it a slice
//!   at a time (header, then element ranges; see `rdb::chunk`), one value
//!   at a time, so one huge key does not stall its shard. A fragment
//!   handed to the writer may then end inside the value: it is *open*
//!   ([`Shard::snapshot_take`]), and the writer's gate keeps other shards'
//!   fragments out of the file until this shard's next, closing one. A
//!   change to a queued or half-written key finishes it first
//!   (`visit_before_change`), so the stall only comes back when a client
//!   changes that very key mid-write; a read does not finish it, and
//!   queues a big value the scan has not reached (`Db::get_mut_read`).
//!   FLUSHDB moves the queue's entries with their table to the graveyard;
//!   SWAPDB finishes everything first, as before.
//!
//! The extra memory is the serialized bytes not yet handed to the writer,
//! bounded by the step budget plus what the commands of one loop iteration
//! change (copies of other entries made while a big value is half written
//! wait for its end). The cost when no snapshot runs is one predictable
//! branch per mutation.
//!
//! Stamps are a `u8` per entry (it sits in `Entry`'s padding). A snapshot
//! that ends early (write error, FLUSHALL) leaves stamps mixed; the next
//! begin then restamps every entry first, so a wrapped-around epoch can
//! never make an old stamp look current.

use std::collections::VecDeque;

use ds::{Dict, TinyBytes};

use ds::dict::RawDict;

use crate::db::{Db, Entry, KeyNode};
use crate::rdb::Progress;
use crate::Shard;

/// Per-database snapshot state.
#[derive(Debug)]
pub struct DbSnap {
    /// Serialized whole entries not yet collected by the runtime.
    out: Vec<u8>,
    /// The stream of big values written in slices (`pending`, in order)
    /// not yet collected: whole ones, then maybe the start of the front.
    partial: Vec<u8>,
    /// The last fragment collected ended inside the front of `pending`:
    /// the next one starts with its continuation (see
    /// [`Shard::snapshot_take`]).
    open: bool,
    /// Big values accounted for (stamped) but not yet completely written,
    /// in the order they are written; only the front can be started.
    /// Every mutation of one of these keys first finishes it.
    pending: VecDeque<Pending>,
    cursor: u64,
    /// The live table has been scanned to the end.
    live_scanned: bool,
    done: bool,
    cfg: Cfg,
    /// Entries written.
    keys: u64,
    /// Tables FLUSHDB / FLUSHALL emptied while they were being saved: kept
    /// (not copied) until their unwritten entries are written. Nothing else
    /// can reach them, so they need no hooks.
    graveyard: Vec<Grave>,
}

/// A retired table (see `DbSnap::graveyard`).
struct Grave {
    table: RawDict<KeyNode>,
    /// Its deadlines (the database's `volatile` as it was).
    volatile: Dict<TinyBytes, u64>,
    /// Scan cursor, and whether the scan is over.
    cursor: u64,
    scanned: bool,
}

#[derive(Clone, Copy, Debug)]
struct Cfg {
    compress: bool,
    /// Access data written with each entry, as Redis does under an LRU or
    /// LFU `maxmemory-policy` (IDLE / FREQ opcodes).
    meta: Meta,
    /// Write each key as the commands that rebuild it (an AOF base with
    /// `aof-use-rdb-preamble no`) instead of RDB.
    cmds: bool,
}

/// A big value written in slices (see `rdb::chunk`).
#[derive(Debug)]
struct Pending {
    key: Vec<u8>,
    /// Where the entry lives: the live table, or `graveyard[i]`.
    grave: Option<usize>,
    started: bool,
    progress: Progress,
    /// Deadline and access data as they were when the entry was accounted
    /// for (a change to the key finishes it first).
    expire_at_ms: u64,
    idle: Option<u64>,
    freq: Option<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Meta {
    None,
    /// Idle seconds relative to this instant (ms).
    Lru(u64),
    Lfu,
}

impl Cfg {
    fn meta_of(&self, e: &Entry) -> (Option<u64>, Option<u8>) {
        match self.meta {
            Meta::None => (None, None),
            Meta::Lru(now_ms) => (Some(e.idle_s(now_ms)), None),
            Meta::Lfu => (None, Some(e.lfu_counter)),
        }
    }

    fn write_whole(&self, out: &mut Vec<u8>, key: &[u8], e: &Entry, at: u64, compress: bool) {
        if self.cmds {
            crate::rdb::write_entry_cmds(out, key, e, at);
        } else {
            let (idle, freq) = self.meta_of(e);
            crate::rdb::write_entry_ext(out, key, e.value(), at, compress, idle, freq);
        }
    }
}

/// Writes more of the big value `p` (entry `e`) into `partial`, at least
/// one element, until it grew by `budget`; true once it is complete.
fn resume(
    cfg: Cfg,
    p: &mut Pending,
    e: &Entry,
    partial: &mut Vec<u8>,
    compress: bool,
    budget: usize,
) -> bool {
    let start = partial.len();
    if !p.started {
        p.started = true;
        if !cfg.cmds {
            crate::rdb::write_head(partial, &p.key, e, p.expire_at_ms, compress, p.idle, p.freq);
        }
    }
    let left = budget.saturating_sub(partial.len() - start).max(1);
    if cfg.cmds {
        crate::rdb::write_elems_cmds(partial, &p.key, e, p.expire_at_ms, &mut p.progress, left)
    } else {
        crate::rdb::write_elems(partial, e.value(), &mut p.progress, compress, left)
    }
}

/// Accounts for `e` if the running snapshot has not yet: a small value
/// is written at once, a big one queued to be written in slices. `grave`:
/// where the entry lives (see `Pending`).
#[inline]
fn visit(
    out: &mut Vec<u8>,
    pending: &mut VecDeque<Pending>,
    keys: &mut u64,
    cfg: Cfg,
    (e, volatile): (&mut Entry, &Dict<TinyBytes, u64>),
    epoch: u8,
    grave: Option<usize>,
) {
    if e.stamp() != epoch {
        e.set_stamp(epoch);
        *keys += 1;
        let e = &*e;
        let key = e.key();
        let at = crate::db::deadline(volatile, key, e);
        if crate::rdb::is_chunked(e.value()) {
            let (idle, freq) = cfg.meta_of(e);
            pending.push_back(Pending {
                key: key.to_vec(),
                grave,
                started: false,
                progress: Progress::default(),
                expire_at_ms: at,
                idle,
                freq,
            });
        } else {
            cfg.write_whole(out, key, e, at, cfg.compress);
        }
    }
}

impl DbSnap {
    /// A copy before change, on a command's path: the entry is written now
    /// if it has not been, or finished now if it is a big value half
    /// written or queued. Written uncompressed (LZF is the dearest part of
    /// writing an entry, and this cost lands on the command; the file
    /// stays valid RDB, a little larger).
    #[inline]
    pub(crate) fn visit_before_change(
        &mut self,
        key: &[u8],
        e: &mut Entry,
        volatile: &Dict<TinyBytes, u64>,
        epoch: u8,
    ) {
        if e.stamp() != epoch {
            let at = crate::db::deadline(volatile, key, e);
            self.cfg.write_whole(&mut self.out, key, e, at, false);
            e.set_stamp(epoch);
            self.keys += 1;
        } else if !self.pending.is_empty() {
            self.finish_pending(key, e);
        }
    }

    /// Before a read (which does not change the value): a big value being
    /// written in slices is left to its slices, and an unwritten one is
    /// queued for them (up to [`PENDING_READ_MAX`] queued); a small one is
    /// written as before a change.
    #[inline]
    pub(crate) fn visit_before_read(
        &mut self,
        key: &[u8],
        e: &mut Entry,
        volatile: &Dict<TinyBytes, u64>,
        epoch: u8,
    ) {
        if e.stamp() != epoch {
            if self.pending.len() < PENDING_READ_MAX && crate::rdb::is_chunked(e.value()) {
                let cfg = self.cfg;
                visit(
                    &mut self.out,
                    &mut self.pending,
                    &mut self.keys,
                    cfg,
                    (e, volatile),
                    epoch,
                    None,
                );
            } else {
                self.visit_before_change(key, e, volatile, epoch);
            }
        }
    }

    /// A big value is half written (its bytes so far are in `partial`).
    fn in_progress(&self) -> bool {
        self.pending.front().is_some_and(|p| p.started)
    }

    /// Appends SELECT `db` and this database's output (whole entries, then
    /// the value stream) to `chunk`.
    fn take_into(&mut self, chunk: &mut Vec<u8>, db: usize) {
        if self.out.is_empty() && self.partial.is_empty() {
            return;
        }
        if self.cfg.cmds {
            crate::rdb::write_select_cmd(chunk, db);
        } else {
            crate::rdb::write_select_db(chunk, db);
        }
        chunk.append(&mut self.out);
        chunk.append(&mut self.partial);
    }

    /// Finishes the live entry `key` if it is queued or half written.
    #[cold]
    fn finish_pending(&mut self, key: &[u8], e: &Entry) {
        let Some(i) = self
            .pending
            .iter()
            .position(|p| p.grave.is_none() && p.key == key)
        else {
            return;
        };
        let cfg = self.cfg;
        if i == 0 || !self.pending[i].started {
            // Only the front can be started: a queued one that is not the
            // front goes whole, in its own buffer, so the front's partial
            // bytes stay contiguous.
            let Some(mut p) = self.pending.remove(i) else {
                return;
            };
            if i == 0 {
                resume(cfg, &mut p, e, &mut self.partial, false, usize::MAX);
            } else {
                let mut buf = Vec::new();
                resume(cfg, &mut p, e, &mut buf, false, usize::MAX);
                self.out.append(&mut buf);
            }
        }
    }
}

impl std::fmt::Debug for Grave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grave")
            .field("keys", &self.table.len())
            .field("cursor", &self.cursor)
            .field("scanned", &self.scanned)
            .finish()
    }
}

/// Frees a retired table: on a background thread when it is large, as
/// FLUSHALL ASYNC does.
fn free_table(t: RawDict<KeyNode>) {
    if t.len() < 64 {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("lazyfree".into())
        .spawn(move || drop(t));
}

/// Big values a read may queue (see `DbSnap::visit_before_read`): every
/// change looks its key up in the queue.
const PENDING_READ_MAX: usize = 64;

/// How many table buckets one step may visit even if they write nothing
/// (a sparse or already-written table), so a step stays short.
const STEP_MAX_BUCKETS: usize = 4096;

impl Db {
    fn snapshot_begin(&mut self, compress: bool, meta: Meta, cmds: bool) {
        self.epoch = (self.epoch + 1) & crate::db::STAMP_MASK;
        self.saving = true;
        self.snap = Some(Box::new(DbSnap {
            out: Vec::new(),
            partial: Vec::new(),
            open: false,
            pending: VecDeque::new(),
            cursor: 0,
            live_scanned: false,
            done: false,
            cfg: Cfg {
                compress,
                meta,
                cmds,
            },
            keys: 0,
            graveyard: Vec::new(),
        }));
    }

    /// Writes about `budget` more bytes (at least one bucket's entries, or
    /// one element of a big value); true when every entry has been
    /// written.
    fn snapshot_step(&mut self, budget: usize) -> bool {
        let epoch = self.epoch;
        let Some(snap) = self.snap.as_deref_mut() else {
            return true;
        };
        if snap.done {
            return true;
        }
        let DbSnap {
            out,
            partial,
            pending,
            cursor,
            open: _,
            live_scanned,
            done,
            cfg,
            keys,
            graveyard,
        } = snap;
        let cfg = *cfg;
        let start = out.len() + partial.len();
        let mut buckets = 0;
        loop {
            // Big values first, one at a time, so at most one is half
            // written.
            while let Some(p) = pending.front_mut() {
                let table = match p.grave {
                    None => &self.table,
                    Some(i) => &graveyard[i].table,
                };
                let used = out.len() + partial.len() - start;
                let finished = match table.get(&p.key[..]).map(KeyNode::entry) {
                    Some(e) => resume(
                        cfg,
                        p,
                        e,
                        partial,
                        cfg.compress,
                        budget.saturating_sub(used),
                    ),
                    None => {
                        // Unreachable: a change to the key finishes it
                        // first, and retired tables do not change.
                        debug_assert!(!p.started, "a half-written snapshot entry vanished");
                        true
                    }
                };
                if finished {
                    pending.pop_front();
                } else {
                    return false;
                }
            }
            if out.len() + partial.len() - start >= budget || buckets >= STEP_MAX_BUCKETS {
                return false;
            }
            buckets += 1;
            if self.saving && !*live_scanned {
                let c = *cursor;
                let volatile = &self.volatile;
                *cursor = self.table.scan_mut(c, |n| {
                    visit(
                        out,
                        pending,
                        keys,
                        cfg,
                        (n.entry_mut(), volatile),
                        epoch,
                        None,
                    )
                });
                if *cursor == 0 {
                    *live_scanned = true;
                }
                continue;
            }
            // The live table is done and nothing of it is pending: no more
            // copies before change.
            self.saving = false;
            let n = graveyard.len();
            let Some(g) = graveyard.last_mut() else {
                *done = true;
                return true;
            };
            if g.scanned {
                if let Some(g) = graveyard.pop() {
                    free_table(g.table);
                }
                continue;
            }
            let (c, volatile) = (g.cursor, &g.volatile);
            g.cursor = g.table.scan_mut(c, |node| {
                visit(
                    out,
                    pending,
                    keys,
                    cfg,
                    (node.entry_mut(), volatile),
                    epoch,
                    Some(n - 1),
                )
            });
            if g.cursor == 0 {
                g.scanned = true;
            }
        }
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
        // Its big values being written in slices move with it.
        let at = snap.graveyard.len();
        for p in snap.pending.iter_mut().filter(|p| p.grave.is_none()) {
            p.grave = Some(at);
        }
        snap.graveyard.push(Grave {
            table: std::mem::take(&mut self.table),
            volatile: std::mem::take(&mut self.volatile),
            cursor: 0,
            scanned: snap.live_scanned,
        });
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
        self.table.for_each_mut(|n| n.entry_mut().set_stamp(epoch));
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
    #[inline]
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
    ///
    /// `open` (the second value) says the fragment ends inside a big value
    /// being written in slices: the next fragment of this shard continues
    /// it (and starts without a SELECTDB), so nothing of any other shard
    /// may come in between in the file. Bytes written meanwhile for other
    /// entries wait until the value is complete.
    pub fn snapshot_take(&mut self) -> (Vec<u8>, bool) {
        let mut chunk = Vec::new();
        // A fragment left open continues first.
        if let Some(s) = self
            .dbs
            .iter_mut()
            .filter_map(|d| d.snap.as_deref_mut())
            .find(|s| s.open)
        {
            chunk.append(&mut s.partial);
            if s.in_progress() {
                return (chunk, true);
            }
            s.open = false;
        }
        let mut open = None;
        for (i, d) in self.dbs.iter_mut().enumerate() {
            let Some(s) = d.snap.as_deref_mut() else {
                continue;
            };
            if s.in_progress() && !s.partial.is_empty() {
                // Steps go database by database: only the last one
                // stepped can be half way through a value. It goes last.
                open = Some(i);
                continue;
            }
            s.take_into(&mut chunk, i);
        }
        if let Some(i) = open {
            if let Some(s) = self.dbs[i].snap.as_deref_mut() {
                s.take_into(&mut chunk, i);
                s.open = true;
            }
        }
        (chunk, open.is_some())
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
                for g in s.graveyard.drain(..) {
                    free_table(g.table);
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
    /// sequence of fragments of about `chunk` bytes each, handed to `sink`
    /// with whether each is open (see [`Shard::snapshot_take`]).
    pub fn snapshot_all(
        &mut self,
        compress: bool,
        chunk: usize,
        mut sink: impl FnMut(Vec<u8>, bool),
    ) -> u64 {
        self.snapshot_begin(compress);
        loop {
            let done = self.snapshot_step(chunk);
            let (out, open) = self.snapshot_take();
            if !out.is_empty() {
                sink(out, open);
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

    use crate::OwnedEntry;

    use rand::{Rng, SeedableRng};

    use crate::rdb::{self, Reader};
    use crate::types::{Hash, List, Set, ZSet};
    use crate::{EncLimits, Shard, Str, Value};

    type Image = BTreeMap<(usize, Vec<u8>), (Value, u64)>;

    fn image(s: &Shard) -> Image {
        let mut m = BTreeMap::new();
        for (i, d) in s.dbs.iter().enumerate() {
            for (k, e) in d.iter() {
                m.insert(
                    (i, k.to_vec()),
                    (e.value().to_owned_value(), d.expire_at(k, e)),
                );
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
                s.dbs[db].insert(format!("k{i}").as_bytes(), OwnedEntry::new(val(i), 0), ttl);
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
                        0 => s.dbs[db].insert(k.as_bytes(), OwnedEntry::new(val(next), 0), 0),
                        1 => drop(s.dbs[db].remove(k.as_bytes())),
                        2 => drop(s.dbs[db].set_expire(k.as_bytes(), 5_000_000_000_000)),
                        3 => {
                            if let Some(e) = s.dbs[db].get_mut(k.as_bytes()) {
                                *e.value_mut() = val(next);
                            }
                        }
                        4 => {
                            let k = format!("new{next}");
                            s.dbs[db].insert(k.as_bytes(), OwnedEntry::new(val(next), 0), 0);
                        }
                        5 if round >= 4 && rng.gen_ratio(1, 50) => s.dbs[db].clear(),
                        _ if round >= 4 && rng.gen_ratio(1, 80) => drop(s.dbs[db].take()),
                        _ => {}
                    }
                    next += 1;
                }
                let done = s.snapshot_step(512);
                let (out, _) = s.snapshot_take();
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
            s.snapshot_all(false, 4096, |b, _| frags.push(b));
            assert_eq!(decode(&frags), now);
        }
    }

    fn big_value(kind: usize, n: usize, salt: u64) -> Value {
        let lim = EncLimits::default();
        match kind {
            0 => {
                let mut z = ZSet::default();
                for i in 0..n {
                    z.insert(
                        format!("m{i}:{salt}").as_bytes(),
                        (i % 97) as f64 * 0.5,
                        &lim,
                    );
                }
                Value::ZSet(Box::new(z))
            }
            1 => {
                let mut l = List::new(&lim);
                for i in 0..n * 8 {
                    // Integers, short and long strings.
                    let item = match i % 3 {
                        0 => format!("{i}"),
                        1 => format!("e{i}:{salt}"),
                        _ => format!("{:-<90}{i}", salt),
                    };
                    l.push_back(item.as_bytes());
                }
                Value::List(l)
            }
            2 => {
                let mut h = Hash::new();
                for i in 0..n {
                    h.set(
                        format!("f{i}").as_bytes(),
                        format!("v{i}:{salt}").as_bytes(),
                        &lim,
                    );
                }
                Value::Hash(h)
            }
            _ => {
                let mut st = Set::create(b"a", n, &lim);
                let mut i = 0;
                // Ends with the member dict half way through a round of splits.
                while i < n || !st.table_dict().is_some_and(|d| d.is_rehashing()) {
                    st.add(format!("s{i}:{salt}").as_bytes(), &lim);
                    i += 1;
                }
                Value::Set(Box::new(st))
            }
        }
    }

    /// Big values (skiplist zset, long list, hashtable hash and set, one
    /// of them with its dict rehashing) are written a slice at a time;
    /// the file still holds exactly the data as it was at the begin while
    /// the big keys themselves are read, changed, deleted, overwritten,
    /// given TTLs and flushed between steps (which finishes them first).
    #[test]
    fn big_values_written_in_slices_are_the_data_at_begin() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        for round in 0..12 {
            let mut s = Shard::new(0, 2);
            for i in 0..600u64 {
                s.dbs[(i % 2) as usize].insert(
                    format!("k{i}").as_bytes(),
                    OwnedEntry::new(val(i), 0),
                    0,
                );
            }
            for b in 0..8u64 {
                let ttl = if b % 3 == 0 { 4_000_000_000_000 + b } else { 0 };
                let v = big_value(b as usize % 4, 1500 + 100 * b as usize, b);
                s.dbs[(b / 4) as usize].insert(
                    format!("big{b}").as_bytes(),
                    OwnedEntry::new(v, 0),
                    ttl,
                );
            }
            let before = image(&s);
            s.snapshot_begin_as(round % 2 == 0, false);
            let mut frags = Vec::new();
            let mut next = 0u64;
            let mut slices = 0;
            loop {
                for _ in 0..3 {
                    let db = rng.gen_range(0..2);
                    let k = format!("big{}", rng.gen_range(0..8));
                    let k = k.as_bytes();
                    match rng.gen_range(0..40) {
                        // Reads leave a half-written value to its slices.
                        0..=19 => drop(s.dbs[db].get_mut_read(k)),
                        20 if round >= 2 => {
                            if let Some(e) = s.dbs[db].get_mut(k) {
                                let lim = EncLimits::default();
                                match e.value_mut() {
                                    Value::ZSet(z) => drop(z.insert(b"new", 1.0, &lim)),
                                    Value::List(l) => l.push_front(b"new"),
                                    Value::Hash(h) => drop(h.set(b"new", b"v", &lim)),
                                    Value::Set(st) => drop(st.add(b"new", &lim)),
                                    Value::Str(_) | Value::Stream(_) => {}
                                }
                            }
                        }
                        21 if round >= 2 => drop(s.dbs[db].remove(k)),
                        22 if round >= 2 => s.dbs[db].insert(
                            k,
                            OwnedEntry::new(big_value(next as usize % 4, 300, next), 0),
                            0,
                        ),
                        23 if round >= 2 => drop(s.dbs[db].set_expire(k, 5_000_000_000_000)),
                        24 if round >= 6 && rng.gen_ratio(1, 4) => s.dbs[db].clear(),
                        25 if round >= 6 && rng.gen_ratio(1, 4) => drop(s.dbs[db].take()),
                        26 if round >= 8 => {
                            let (a, b) = s.dbs.split_at_mut(1);
                            crate::db::Db::swap_contents(&mut a[0], &mut b[0]);
                        }
                        _ => {}
                    }
                    next += 1;
                }
                let done = s.snapshot_step(2048);
                if s.dbs
                    .iter()
                    .any(|d| d.snap.as_ref().is_some_and(|p| p.in_progress()))
                {
                    slices += 1;
                }
                let (out, _) = s.snapshot_take();
                if !out.is_empty() {
                    frags.push(out);
                }
                if done {
                    break;
                }
            }
            // (FLUSH and SWAPDB rounds finish values early.)
            assert!(
                round >= 6 || slices > 10,
                "round {round}: {slices} steps ended inside a value"
            );
            let keys = s.snapshot_end();
            assert_eq!(keys as usize, before.len());
            assert_eq!(decode(&frags), before, "round {round}");
            // And the command form (AOF base) writes the same in slices as
            // whole.
            let now = image(&s);
            let mut whole = Vec::new();
            for (i, d) in s.dbs.iter().enumerate() {
                let mut keys: Vec<_> = d.iter().collect();
                keys.sort_by(|a, b| a.0.cmp(b.0));
                for (k, e) in keys {
                    let mut b = Vec::new();
                    rdb::write_entry_cmds(&mut b, k, e, d.expire_at(k, e));
                    whole.push((i, b));
                }
            }
            whole.sort();
            s.snapshot_begin_as(false, true);
            let mut cmds = Vec::new();
            while !s.snapshot_step(700) {
                cmds.extend(s.snapshot_take().0);
            }
            cmds.extend(s.snapshot_take().0);
            s.snapshot_end();
            assert_eq!(split_cmds(&cmds), whole, "round {round}");
            assert_eq!(image(&s), now);
        }
    }

    /// Splits a command stream into each key's commands, by database (the
    /// SELECT commands), sorted.
    fn split_cmds(b: &[u8]) -> Vec<(usize, Vec<u8>)> {
        let mut db = 0;
        let mut per_key: BTreeMap<(usize, Vec<u8>), Vec<u8>> = BTreeMap::new();
        let mut i = 0;
        while i < b.len() {
            // *N\r\n then N bulks.
            let start = i;
            let line_end = |i: usize| i + b[i..].windows(2).position(|w| w == b"\r\n").unwrap();
            let e = line_end(i);
            let n: usize = std::str::from_utf8(&b[i + 1..e]).unwrap().parse().unwrap();
            i = e + 2;
            let mut args = Vec::new();
            for _ in 0..n {
                let e = line_end(i);
                let len: usize = std::str::from_utf8(&b[i + 1..e]).unwrap().parse().unwrap();
                args.push(b[e + 2..e + 2 + len].to_vec());
                i = e + 2 + len + 2;
            }
            if args[0] == b"SELECT" {
                db = std::str::from_utf8(&args[1]).unwrap().parse().unwrap();
                continue;
            }
            per_key
                .entry((db, args[1].clone()))
                .or_default()
                .extend_from_slice(&b[start..i]);
        }
        let mut v: Vec<_> = per_key.into_iter().map(|((db, _), c)| (db, c)).collect();
        v.sort();
        v
    }

    /// A read of the big value being written leaves it half written; a
    /// write finishes it at once.
    #[test]
    fn a_read_leaves_the_big_value_to_its_slices_a_write_finishes_it() {
        let mut s = Shard::new(0, 1);
        s.dbs[0].insert(b"z", OwnedEntry::new(big_value(0, 20_000, 1), 0), 0);
        let before = image(&s);
        s.snapshot_begin(false);
        assert!(!s.snapshot_step(4096));
        let half = |s: &Shard| s.dbs[0].snap.as_ref().unwrap().in_progress();
        assert!(half(&s));
        let (first, open) = s.snapshot_take();
        assert!(
            open && !first.is_empty(),
            "the fragment ends inside the value"
        );
        assert!(s.dbs[0].get_mut_read(b"z").is_some());
        assert!(half(&s));
        assert!(!s.snapshot_step(4096));
        let (second, open) = s.snapshot_take();
        assert!(open && !second.is_empty());
        let e = s.dbs[0].get_mut(b"z").unwrap();
        if let Value::ZSet(z) = e.value_mut() {
            z.remove(b"m0:1");
        }
        assert!(!half(&s));
        // A read of a big value the scan has not reached queues it, a
        // small one is written at once.
        let s2 = &mut Shard::new(0, 1);
        for i in 0..2000u64 {
            s2.dbs[0].insert(format!("k{i}").as_bytes(), OwnedEntry::new(val(i), 0), 0);
        }
        s2.dbs[0].insert(b"z", OwnedEntry::new(big_value(0, 20_000, 1), 0), 0);
        let before2 = image(s2);
        s2.snapshot_begin(false);
        let q = |s: &Shard| s.dbs[0].snap.as_ref().unwrap().pending.len();
        assert_eq!(q(s2), 0);
        assert!(s2.dbs[0].get_mut_read(b"z").is_some());
        assert_eq!(q(s2), 1);
        assert!(s2.dbs[0].get_mut_read(b"k5").is_some());
        assert!(!s2.dbs[0].snap.as_ref().unwrap().out.is_empty());
        let mut frags2 = Vec::new();
        s2.snapshot_step(1);
        loop {
            let done = s2.snapshot_step(4096);
            frags2.push(s2.snapshot_take().0);
            if done {
                break;
            }
        }
        s2.snapshot_end();
        assert_eq!(decode(&frags2), before2);
        let (third, open) = s.snapshot_take();
        assert!(!open);
        let frags = vec![first, second, third];
        assert!(s.snapshot_step(4096));
        s.snapshot_end();
        assert_eq!(decode(&frags), before);
    }

    /// Fragments of several shards interleave in the file; a shard whose
    /// fragment ended inside a value (open) goes on alone until it is
    /// closed (what the writer's gate enforces), and the file holds every
    /// shard's data at the begin.
    #[test]
    fn open_fragments_keep_other_shards_out_until_closed() {
        let mut shards: Vec<Shard> = (0..3).map(|i| Shard::new(i, 2)).collect();
        let mut want = Image::new();
        for (n, s) in shards.iter_mut().enumerate() {
            for b in 0..4u64 {
                let v = big_value(b as usize, 1000 + 300 * n, b + 10 * n as u64);
                s.dbs[(b % 2) as usize].insert(
                    format!("big{n}.{b}").as_bytes(),
                    OwnedEntry::new(v, 0),
                    0,
                );
            }
            for i in 0..300u64 {
                s.dbs[(i % 2) as usize].insert(
                    format!("k{n}.{i}").as_bytes(),
                    OwnedEntry::new(val(i), 0),
                    0,
                );
            }
            want.extend(image(s));
            s.snapshot_begin(n == 1);
        }
        let mut file = Vec::new();
        let mut owner: Option<usize> = None;
        let mut done = [false; 3];
        let mut opens = 0;
        while done.iter().any(|d| !d) {
            for (n, s) in shards.iter_mut().enumerate() {
                if done[n] || owner.is_some_and(|o| o != n) {
                    continue;
                }
                let d = s.snapshot_step(1500);
                // Other shards change their own small keys meanwhile.
                s.dbs[0].insert(b"k0.0", OwnedEntry::new(val(99), 0), 0);
                let (out, open) = s.snapshot_take();
                file.push(out);
                owner = open.then_some(n);
                opens += usize::from(open);
                if d {
                    assert!(!open);
                    s.snapshot_end();
                    done[n] = true;
                }
            }
        }
        assert!(opens > 10);
        assert_eq!(decode(&file), want);
    }

    /// The contract `lookup_read` states: a value read must not change.
    /// Debug builds catch a change to a value half written in slices.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a value changed while a snapshot was writing it")]
    fn changing_a_value_behind_a_read_is_caught_in_debug_builds() {
        let mut s = Shard::new(0, 1);
        s.dbs[0].insert(b"z", OwnedEntry::new(big_value(0, 20_000, 1), 0), 0);
        s.snapshot_begin(false);
        assert!(!s.snapshot_step(4096));
        if let Some(Value::ZSet(z)) = s.dbs[0].get_mut_read(b"z").map(|e| e.value_mut()) {
            z.insert(b"sneaky", 1.0, &EncLimits::default());
        }
        s.snapshot_step(4096);
    }

    /// A snapshot abandoned half way leaves mixed stamps; the next one
    /// still writes every key once.
    #[test]
    fn an_aborted_snapshot_does_not_hide_keys_from_the_next() {
        let mut s = Shard::new(0, 1);
        for i in 0..3000u64 {
            s.dbs[0].insert(format!("k{i}").as_bytes(), OwnedEntry::new(val(i), 0), 0);
        }
        for _ in 0..300 {
            s.snapshot_begin(false);
            assert!(!s.snapshot_step(64));
            s.snapshot_abort();
        }
        let mut frags = Vec::new();
        assert_eq!(s.snapshot_all(false, 1 << 16, |b, _| frags.push(b)), 3000);
        assert_eq!(decode(&frags), image(&s));
        assert!(!s.snapshot_running());
    }
}
