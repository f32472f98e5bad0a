//! The append-only file (Redis 7's multi-part AOF): one file set for the
//! whole server, written by one writer thread that every shard thread
//! feeds (or, under `always`, by the one thread running every shard; see
//! "Leading").
//!
//! Files: `dir/appenddirname/` holds a base (`<appendfilename>.1.base.rdb`,
//! or `.base.aof` without `aof-use-rdb-preamble`), the incremental file
//! `<appendfilename>.1.incr.aof`, and the manifest
//! `<appendfilename>.manifest` naming them with Redis's line format
//! (`file <name> seq <n> type b|i`). The file set itself (opening,
//! loading at start-up) is `aof_files`, its manifest `aof_manifest`.
//!
//! Ordering. A shard appends its records ([`engine::outbox::Chunk`], taken
//! from its effects outbox) to the
//! shared queue before it sends any message that lets another thread see
//! its writes, and before running a transaction's job. A transaction's
//! records (from each shard's jobs, and from its coordinator on the home
//! thread, `Coordinator::take_records`) collect in a slot of the queue,
//! created when the first of them
//! arrives: after every lock was granted (each shard flushed its earlier
//! records before granting) and no later than the first release (anything
//! that conflicts with it comes after a release, so after the slot). The
//! home thread completes the slot when the coordinator finishes; the writer
//! writes the queue in order and stops at an incomplete slot. A slot is
//! written as one `MULTI ... EXEC` block, its parts in stamp order (a
//! slot of one record goes bare, as Redis 7.0 propagates a transaction
//! with one write).
//!
//! Durability targets. Every item of the queue (a shard's chunk, or a
//! transaction's slot) has an index over the queue's whole life; "target
//! `t`" means "items `< t` are on disk", so a record in item `i` is
//! durable once [`Aof::durable`] `>= i + 1`. [`Aof::append`] and
//! [`Aof::tx_finish`] return that target; 0 stands for "nothing to wait
//! for". A transaction's slot gets its index when created, but the writer
//! never passes an incomplete slot, so a target behind a running
//! transaction is reached only once it completed and was written.
//!
//! fsync: under `always` nobody waits for the writer. The shard threads
//! keep reading and executing; a reply whose command wrote records is held
//! on its connection (see `conn`) until [`Aof::durable`] reaches its
//! target. The writer writes everything queued, `fdatasync`s once, publishes
//! the new durable target, and wakes the threads that asked for it
//! ([`Aof::want`]); whatever arrived during the fsync forms the next batch
//! (group commit). Under concurrency the writer then waits, up to
//! `GATHER_MAX` after the fsync, until as many records are queued as the
//! last batch held (the released clients' next writes), and shards do not
//! wake it for fewer: the clients stay one cohort, as in Redis's loop,
//! instead of splitting into several, each paying its own fsync. SET at
//! pipeline 1, 50 clients: 50 SETs per fdatasync instead of 27-38, 20x
//! fewer futex calls (bench/aof.sh; `perf stat`). `everysec` syncs at most
//! once a second from the writer; `no` never syncs; neither holds replies.
//!
//! Write errors (Redis's flushAppendOnlyFile). Under `everysec` and `no`
//! a write that fails keeps its bytes in the buffer, ahead of the next
//! batch's, and is retried every [`RETRY`] (a short write is undone with
//! `ftruncate`; if that fails the written part leaves the buffer). Until
//! one succeeds, writes are refused with `MISCONF Errors writing to the
//! AOF file: <errno>` (published in `commands::ops::disk`, one relaxed
//! load for admission) and nothing is published as written. At a switch
//! to a new incr file the old file's unwritten bytes are set apart and
//! retried first: the new file gets nothing before the old one has
//! everything (a file set with a gap would load), while the stream keeps
//! flowing. A failed fsync refuses writes the same way until one
//! succeeds. Records were fed to the stream when taken off the queue:
//! a retry writes only the file, so replicas get each record once. Under
//! `always` replies wait for the records: the process exits instead, as
//! Redis's. Turning the file off or stopping gives up what could not be
//! written after one last try (Redis's stopAppendOnly and shutdown).
//!
//! Leading. When one thread runs every shard (shard consolidation, or one
//! shard), that thread commits small batches itself at the end of its loop
//! iteration ([`Aof::lead`]), as Redis does before it sleeps, and sends
//! the replies at once: no wake-up of the writer and none back per batch.
//! Big batches, or a round after which requests already wait, still go to
//! the writer, so the thread serves during the fsync. Whoever writes holds
//! the sink ([`Aof::sink`]) from taking items off the queue to publishing
//! their target, so batches reach the file and are published in order.

//! The replication stream (issue 25). The writer is the one place where
//! every shard's records meet in order, so it is also the replication
//! stream's source: with a [`StreamFeed`] attached (replicas, or their
//! backlog, exist), each batch is emitted a second time with the stream's
//! own `SELECT` state into the feed, byte for byte what the file gets
//! (the file's `SELECT` state restarts with each incr file, the stream's
//! with each full sync). The file itself is optional: with `appendonly
//! no` and replicas attached the writer runs with no file (the shards
//! record because a consumer reads, whichever it is). One kind of item
//! exists only for the stream: marks, callbacks run in stream order once
//! everything queued before them was fed (a full sync's starting offset,
//! a WAIT's target; the feed's own commands, `PING` and `REPLCONF GETACK
//! *`, which Redis writes into the stream and not into the AOF, are fed
//! by marks), which can reset the stream's `SELECT` state (Redis forces
//! a `SELECT` after a full sync begins).
//!
//! Rewrite hook (BGREWRITEAOF, `CONFIG SET appendonly yes`): a rewrite is
//! "at one instant, switch to a new incr file, snapshot as the new base,
//! swap the manifest". [`Aof::switch_incr`] does the first part under the
//! queue lock (every record before the switch goes to the old file, every
//! one after to the new), [`write_manifest`] the last.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use commands::ops::disk::{strerror, DiskStatus};
use config::AppendFsync;
use engine::outbox::{write_array, Chunk, Target};

use crate::log;

pub use super::aof_files::{load, load_from, open_files, Paths};
pub use super::aof_manifest::{parse_manifest, write_manifest, ManifestFile};

type TxId = u64;

enum Item {
    Chunk(Chunk),
    Tx {
        parts: Vec<(u64, Chunk)>,
        done: bool,
    },
    /// Runs in stream order; `reset_db`: the stream's next record gets a
    /// `SELECT`.
    Mark {
        run: Box<dyn FnOnce() + Send>,
        reset_db: bool,
    },
}

/// Where the replication stream goes (the runtime's replication master):
/// every batch's bytes, in order, from whichever thread writes. The batch
/// is handed over (the replicas' queues share it; no copy per replica).
pub trait StreamFeed: Send + Sync {
    fn feed(&self, bytes: Vec<u8>);
}

/// Hands the stream's batch to `f`, leaving `rbuf` empty with room for
/// a batch like it.
fn hand_over(f: &dyn StreamFeed, rbuf: &mut Vec<u8>) {
    let room = rbuf.len().min(1 << 20);
    f.feed(std::mem::replace(rbuf, Vec::with_capacity(room)));
}

fn ready(item: Option<&Item>) -> bool {
    match item {
        Some(Item::Tx { done, .. }) => *done,
        Some(_) => true,
        None => false,
    }
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    /// Index (over the queue's whole life) of `items[0]`.
    base: u64,
    /// Open transaction slots: absolute item index.
    txs: HashMap<TxId, u64>,
    stop: bool,
    /// Set by [`Aof::switch_file`], oldest first: the writer moves to
    /// this file (none: stops writing one) after writing everything
    /// queued before the switch (the item index). More than one waits
    /// only while the old file cannot be written (see [`Aof::commit`]).
    switches: VecDeque<(u64, Option<File>)>,
    /// Transactions finished by an abort (see [`Aof::tx_abort`]).
    aborted: VecDeque<TxId>,
    /// Records queued (in chunks and transaction slots).
    records: u64,
    /// `always`: the writer gathers a batch until this many records are
    /// queued (0: not gathering); see `writer`.
    gather_for: u64,
}

impl Queue {
    /// Whether a new record should wake the writer now: not while it
    /// gathers a batch that is not complete yet.
    fn batch_ready(&self) -> bool {
        self.gather_for == 0 || self.records >= self.gather_for
    }
    fn next(&self) -> u64 {
        self.base + self.items.len() as u64
    }
    /// The next switch is due and turns the file off.
    fn switching_off(&self) -> bool {
        matches!(self.switches.front(), Some((at, None)) if *at <= self.base)
    }
    /// A switch is due (everything before it was taken).
    fn switch_due(&self) -> bool {
        self.switches
            .front()
            .is_some_and(|(at, _)| *at <= self.base)
    }
    fn slot(&mut self, tx: TxId) -> &mut Vec<(u64, Chunk)> {
        let idx = match self.txs.get(&tx) {
            Some(&i) => i,
            None => {
                let i = self.next();
                self.items.push_back(Item::Tx {
                    parts: Vec::new(),
                    done: false,
                });
                self.txs.insert(tx, i);
                i
            }
        };
        match &mut self.items[(idx - self.base) as usize] {
            Item::Tx { parts, .. } => parts,
            _ => unreachable!("INVARIANT: txs index Tx items"),
        }
    }
}

/// The shared writer state.
pub struct Aof {
    q: Mutex<Queue>,
    /// The file and what writing it needs: held by whoever writes, the
    /// writer thread or a leading shard thread (see [`Aof::lead`]), from
    /// taking items off the queue until their durable target is published,
    /// so that batches reach the file and are published in queue order.
    sink: Mutex<Sink>,
    /// The writer waits here for work.
    work: Condvar,
    /// Items `< synced` are written (and fsynced under `always`).
    synced: AtomicU64,
    fsync: AtomicU8,
    /// `aof-timestamp-enabled`: a `#TS:` line before records of a new
    /// second (Redis's feedAppendOnlyFile).
    timestamps: AtomicBool,
    /// The last write to the file failed (INFO `aof_last_write_status`;
    /// see [`Aof::write_file`]).
    write_failed: AtomicBool,
    /// The last fsync of the file failed (also INFO's `err`).
    fsync_failed: AtomicBool,
    /// Where a failed write or fsync is published for admission (writes
    /// refused with MISCONF: `commands::ops::disk`).
    disk: &'static DiskStatus,
    /// The server's thread wake-ups (see [`Aof::want`]).
    wakers: Arc<Wakers>,
    /// Bytes written to the current incr file (INFO `aof_current_size`
    /// minus the base).
    written: AtomicU64,
    /// Records are dropped instead of written, until the next switch: the
    /// AOF being turned on whose first rewrite failed (its temporary incr
    /// file is gone; the next rewrite's snapshot holds everything).
    discard: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The writer sleeps for long (nothing written lately) and must be
    /// notified of new records; see [`Aof::kick`].
    asleep: AtomicBool,
    /// The order stamps of a transaction's parts (see [`Aof::stamp`]).
    stamps: AtomicU64,
    /// A file is attached (else the writer only feeds the stream and
    /// syncs nothing: its policy is `no`).
    has_file: AtomicBool,
}

/// One server's shard-thread wake-ups: thread `i` asks to be woken once
/// the durable target reaches `want[i]` (0: it waits for nothing). Made at
/// start-up and shared by every writer the server starts (at start, for
/// the replication stream, by `CONFIG SET appendonly yes`: the
/// `Rewriter` hands it on), so a writer started at runtime wakes them
/// too; how to wake a thread is set once the threads exist
/// ([`Wakers::set`]). The server's, not the process's: two servers in one
/// process (tests) each wake their own threads.
pub struct Wakers {
    want: Vec<AtomicU64>,
    wake: OnceLock<Box<dyn Fn(usize) + Send + Sync>>,
}

impl Wakers {
    /// Wake-ups of `n` shard threads, none installed yet.
    pub fn new(n: usize) -> Arc<Wakers> {
        Arc::new(Wakers {
            want: (0..n).map(|_| AtomicU64::new(0)).collect(),
            wake: OnceLock::new(),
        })
    }

    /// Installs how to wake shard thread `i` (once; later calls change
    /// nothing).
    pub fn set(&self, wake: impl Fn(usize) + Send + Sync + 'static) {
        let _ = self.wake.set(Box::new(wake));
    }
}

fn fsync_code(f: AppendFsync) -> u8 {
    f as u8
}

impl Aof {
    pub fn policy(&self) -> AppendFsync {
        if !self.has_file.load(Ordering::Relaxed) {
            return AppendFsync::No;
        }
        AppendFsync::ALL[self.fsync.load(Ordering::Relaxed) as usize]
    }

    /// Attaches (or detaches) the replication stream's consumer. Batches
    /// written from now on are fed to it.
    pub fn set_feed(&self, feed: Option<Arc<dyn StreamFeed>>) {
        let mut s = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        s.repl_db = None;
        s.feed = feed;
    }

    /// Queues `run`, to be called by the writer once everything queued
    /// before it was fed to the stream (see the module docs).
    pub fn stream_mark(&self, reset_db: bool, run: Box<dyn FnOnce() + Send>) {
        self.lock().items.push_back(Item::Mark { run, reset_db });
        self.kick(true);
    }

    /// The last write to the file, and its last fsync, succeeded.
    pub fn last_write_ok(&self) -> bool {
        !self.write_failed.load(Ordering::Relaxed) && !self.fsync_failed.load(Ordering::Relaxed)
    }

    /// An order stamp for a part of a transaction recorded on some thread:
    /// the writer puts a slot's parts in stamp order. Each step of a
    /// transaction starts after the previous step's parts were stamped
    /// (the coordinator waits for them), so stamp order follows execution
    /// order; parts of one step touch disjoint keys.
    pub fn stamp(&self) -> u64 {
        self.stamps.fetch_add(1, Ordering::Relaxed)
    }

    pub fn set_policy(&self, f: AppendFsync) {
        self.fsync.store(fsync_code(f), Ordering::Relaxed);
    }

    /// `aof-timestamp-enabled`, as the configuration says.
    pub fn set_timestamps(&self, on: bool) {
        self.timestamps.store(on, Ordering::Relaxed);
    }

    /// Tells the writer records are queued. Under `always` at once (a
    /// reply waits for them) when `ready` (see [`Queue::batch_ready`]).
    /// Otherwise only if it sleeps for long: while records keep coming it
    /// polls every [`POLL`] instead, so a shard pays no futex wake-up (and
    /// the writer no context switch) per loop iteration; records reach the
    /// kernel within `POLL`, well inside `everysec`'s second.
    fn kick(&self, ready: bool) {
        let always = self.policy() == AppendFsync::Always;
        if (always && ready)
            || (!always
                && self.asleep.load(Ordering::SeqCst)
                && self.asleep.swap(false, Ordering::SeqCst))
        {
            self.work.notify_one();
        }
    }

    /// Appends a shard's records (outside any transaction); returns their
    /// durability target. `led`: the calling thread calls [`Aof::lead`]
    /// at the end of its loop iteration, so the writer is not told unless
    /// the batch grows past [`LEAD_MAX_RECORDS`] (then the writer takes it).
    pub fn append(&self, c: Chunk, led: bool) -> u64 {
        let mut q = self.lock();
        q.records += c.records;
        q.items.push_back(Item::Chunk(c));
        let target = q.next();
        let ready = q.batch_ready();
        let tell = !led || q.records > LEAD_MAX_RECORDS;
        drop(q);
        if tell {
            self.kick(ready);
        }
        target
    }

    /// A shard's records of transaction `tx`, each stamped.
    pub fn tx_parts(&self, tx: TxId, parts: Vec<(u64, Chunk)>) {
        if parts.is_empty() {
            return;
        }
        let mut q = self.lock();
        q.records += parts.iter().map(|(_, c)| c.records).sum::<u64>();
        if q.aborted.contains(&tx) && !q.txs.contains_key(&tx) {
            q.items.push_back(Item::Tx { parts, done: true });
            drop(q);
            self.kick(true);
            return;
        }
        q.slot(tx).extend(parts);
    }

    /// The coordinator of `tx` went away mid-way (its connection closed):
    /// its slot is written as it stands; parts that still arrive (jobs
    /// that must run to completion) form a block of their own.
    pub fn tx_abort(&self, tx: TxId) {
        let mut q = self.lock();
        q.aborted.push_back(tx);
        if q.aborted.len() > 1024 {
            q.aborted.pop_front();
        }
        drop(q);
        self.tx_finish(tx, false);
    }

    /// The coordinator of `tx` finished: its slot can be written. Returns
    /// the slot's durability target (0 if the transaction recorded
    /// nothing). `led` as for [`Aof::append`].
    pub fn tx_finish(&self, tx: TxId, led: bool) -> u64 {
        let mut q = self.lock();
        let Some(idx) = q.txs.remove(&tx) else {
            return 0;
        };
        let base = q.base;
        if let Item::Tx { done, .. } = &mut q.items[(idx - base) as usize] {
            *done = true;
        }
        drop(q);
        if !led {
            self.kick(true);
        }
        idx + 1
    }

    /// Records appended with `led` go to the writer thread after all.
    pub fn hand_off(&self) {
        let ready = self.lock().batch_ready();
        self.kick(ready);
    }

    /// Under `always`, the calling thread writes and fsyncs everything
    /// queued itself (group commit in the thread that runs every shard,
    /// as Redis's loop does before it sleeps), instead of handing it to
    /// the writer thread: no wake-up of the writer, and none back, per
    /// batch. Threads other than `mine` waiting for what it made durable
    /// are woken. Returns whether it did. It does not when the writer
    /// thread is busy writing (the thread would wait for that fsync, then
    /// make its own, serving nobody in between: the writer takes these
    /// records next instead), or under another policy (changed since the
    /// records were appended); the writer is told then.
    pub fn lead(&self, mine: &[usize]) -> bool {
        let sink = match self.sink.try_lock() {
            Ok(s) => Some(s),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        match sink {
            Some(mut s) if self.policy() == AppendFsync::Always => {
                self.commit(&mut s, mine);
                true
            }
            _ => {
                self.kick(true);
                false
            }
        }
    }

    /// Takes every ready item off the queue (up to a pending switch),
    /// writes it, fsyncs as the policy says, switches files if the switch
    /// is reached, and publishes the new durable target, waking the
    /// threads waiting for it other than `mine`. The caller holds the
    /// sink. Returns whether the writer should end (stop requested and
    /// the queue empty).
    ///
    /// A write that fails keeps its bytes in the buffer, ahead of the
    /// next batch's (see [`Aof::write_file`]): nothing is published as
    /// written until the buffer is empty again. A switch reached then
    /// sets the old file and its bytes apart ([`Retiring`]), written
    /// before anything goes to the new file. The stream got every item
    /// once, when it was taken off the queue.
    fn commit(&self, s: &mut Sink, mine: &[usize]) -> bool {
        let (base0, end, stopping, done, due, popped) = {
            let mut q = self.lock();
            let base0 = q.base;
            let limit = q.switches.front().map_or(u64::MAX, |(at, _)| *at);
            let mut popped = 0u64;
            let (to_file, to_stream) = (s.file.is_some(), s.feed.is_some());
            let stamp_ts = to_file && self.timestamps.load(Ordering::Relaxed);
            let Sink {
                buf,
                cur_db,
                rbuf,
                repl_db,
                feed,
                cur_ts,
                ..
            } = &mut *s;
            while q.base < limit {
                if !ready(q.items.front()) {
                    break;
                }
                let item = q.items.pop_front();
                if stamp_ts && matches!(item, Some(Item::Chunk(_) | Item::Tx { .. })) {
                    timestamp(buf, cur_ts);
                }
                match item {
                    Some(Item::Chunk(c)) => {
                        popped += c.records;
                        if to_file {
                            emit(buf, cur_db, &c, Target::Aof);
                        }
                        if to_stream {
                            emit(rbuf, repl_db, &c, Target::Replicas);
                        }
                    }
                    Some(Item::Tx { mut parts, .. }) => {
                        let records = parts.iter().map(|(_, c)| c.records).sum::<u64>();
                        popped += records;
                        parts.sort_by_key(|(s, _)| *s);
                        if to_file {
                            emit_tx(buf, cur_db, &parts, records, Target::Aof);
                        }
                        if to_stream {
                            emit_tx(rbuf, repl_db, &parts, records, Target::Replicas);
                        }
                    }
                    Some(Item::Mark { run, reset_db }) => {
                        // Everything before the mark is fed first: its
                        // callback sees the stream's offset up to it.
                        if let Some(f) = feed.as_ref().filter(|_| !rbuf.is_empty()) {
                            hand_over(f.as_ref(), rbuf);
                        }
                        if reset_db {
                            *repl_db = None;
                        }
                        run();
                    }
                    None => break,
                }
                q.base += 1;
            }
            q.records = q.records.saturating_sub(popped);
            // The switch reached (taken below once the old file has
            // everything before it), and whether the writer is done then.
            let due = q.switch_due();
            let done = q.stop && q.items.is_empty() && q.switches.len() <= usize::from(due);
            (base0, q.base, q.stop, done, due, popped)
        };
        if end > base0 {
            s.batch_records = popped;
        }
        if !s.rbuf.is_empty() {
            // The stream counts as written: a busy writer polls instead
            // of being woken by every shard's append (a fileless writer,
            // the replicas' only, never wrote a file and so was woken per
            // append: 24k wake-ups per million SETs, and as many shard
            // preemptions).
            s.last_write = Instant::now();
            match &s.feed {
                Some(f) => hand_over(f.as_ref(), &mut s.rbuf),
                None => s.rbuf.clear(),
            }
        }
        if !s.buf.is_empty() && self.discard.load(Ordering::SeqCst) {
            s.buf.clear();
        }
        // Shutdown, or `appendonly no` (Redis's stopAppendOnly drops its
        // buffer too): after a last try, what cannot be written goes.
        let give_up = || stopping || (due && self.lock().switching_off());
        if s.retiring.is_some() {
            // The old file first: the new one gets nothing before it has
            // everything (a file set with a gap would load).
            let mut written = self.write_file(s, true);
            if !written && give_up() {
                drop_unwritten(s.retiring.as_ref().map_or(0, |r| r.buf.len()));
                written = true;
            }
            if !written {
                return false;
            }
            if let Some(r) = s.retiring.take() {
                let _ = r.file.sync_data();
            }
        }
        let written = s.buf.is_empty() || self.write_file(s, false);
        if !written && give_up() {
            drop_unwritten(s.buf.len());
            s.buf.clear();
        } else if !written && due {
            // A switch waits for nothing: the old file keeps its bytes
            // (retried first), records from the switch on go to the new
            // file's buffer, and the stream flows meanwhile.
            let old = s.file.take().map(|file| Retiring {
                file,
                buf: std::mem::take(&mut s.buf),
            });
            s.retiring = old;
            self.take_switch(s);
            return false;
        }
        if !s.buf.is_empty() {
            // Nothing more until the retry (see `writer`).
            return false;
        }
        let sync_now = written
            && s.dirty
            && match self.policy() {
                AppendFsync::Always => true,
                AppendFsync::Everysec => {
                    s.last_sync.elapsed() >= Duration::from_secs(1) || stopping
                }
                AppendFsync::No => false,
            };
        if let (true, Some(file)) = (sync_now, s.file.as_ref()) {
            let res = file.sync_data();
            self.fsynced(&res);
            if let Err(e) = res {
                if self.policy() == AppendFsync::Always {
                    log::warning(format_args!("Error fsyncing the AOF file: {e}"));
                    always_failed(
                        "Can't persist AOF for fsync error when the AOF fsync policy is 'always'. Exiting...",
                    );
                }
            } else {
                s.dirty = false;
            }
            s.last_sync = Instant::now();
        }
        if due {
            self.take_switch(s);
        }
        self.synced.store(end, Ordering::SeqCst);
        self.wake_waiters(end, mine);
        if let (true, Some(file)) = (stopping, s.file.as_ref()) {
            let _ = file.sync_data();
        }
        done
    }

    /// Moves to the file of the switch found due (switches are only ever
    /// added at the back: it is still the front).
    fn take_switch(&self, s: &mut Sink) {
        let Some((_, f)) = self.lock().switches.pop_front() else {
            return;
        };
        if let Some(old) = &s.file {
            let _ = old.sync_data();
        }
        if f.is_none() {
            // The AOF is off: its errors refuse nothing any more.
            self.write_failed.store(false, Ordering::Relaxed);
            self.fsync_failed.store(false, Ordering::Relaxed);
            self.disk.clear_aof();
        }
        self.has_file.store(f.is_some(), Ordering::SeqCst);
        s.file = f;
        s.cur_db = None;
        s.dirty = false;
        self.written.store(0, Ordering::Relaxed);
        self.discard.store(false, Ordering::SeqCst);
    }

    /// Writes the buffer to the file (Redis's flushAppendOnlyFile, its
    /// write half). Returns whether all of it was written. On a failure
    /// the unwritten bytes stay in the buffer for the next try, writes
    /// are refused with the errno Redis shows (MISCONF) until a write
    /// succeeds, and the log says so at most every
    /// [`WRITE_ERROR_LOG_RATE`] (the errno is recorded only then, as
    /// Redis's). A short write is undone with `ftruncate` (the whole
    /// buffer is retried); if that fails, the written part leaves the
    /// buffer (it is in the file). A short write's errno is `ENOSPC`, as
    /// Redis's. Under `always` a failure ends the process instead:
    /// replies wait for these records and must not go out as if durable.
    fn write_file(&self, s: &mut Sink, old: bool) -> bool {
        let (file, buf) = match (old, s.retiring.as_mut(), s.file.as_mut()) {
            (true, Some(r), _) => (&mut r.file, &mut r.buf),
            (false, _, Some(f)) => (f, &mut s.buf),
            _ => {
                s.buf.clear();
                return true;
            }
        };
        let len = buf.len();
        // DEBUG AOF-FLUSH-SLEEP (Redis's flushAppendOnlyFile: before each
        // write of a non-empty buffer).
        let sleep_us = self.disk.aof_flush_sleep_us.load(Ordering::Relaxed);
        if sleep_us > 0 && len > 0 {
            std::thread::sleep(std::time::Duration::from_micros(sleep_us));
        }
        let mut done = 0;
        let mut failure = None;
        while done < len {
            match file.write(&buf[done..]) {
                Ok(0) => {
                    failure = Some(std::io::Error::from(std::io::ErrorKind::WriteZero));
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let Some(e) = failure else {
            s.last_write = Instant::now();
            buf.clear();
            if !old {
                self.written.fetch_add(len as u64, Ordering::Relaxed);
                s.dirty = true;
            }
            if self.write_failed.swap(false, Ordering::Relaxed) {
                log::warning(format_args!(
                    "AOF write error looks solved, Redis can write again."
                ));
                self.disk.set_aof_write(true, None);
            }
            return true;
        };
        let can_log = s
            .last_error_log
            .is_none_or(|t| t.elapsed() > WRITE_ERROR_LOG_RATE);
        if can_log {
            s.last_error_log = Some(Instant::now());
        }
        let errno = if done == 0 {
            if can_log {
                log::warning(format_args!(
                    "Error writing to the AOF file: {}",
                    e.raw_os_error().map_or_else(|| e.to_string(), strerror)
                ));
            }
            can_log.then(|| e.raw_os_error().unwrap_or(libc::EIO))
        } else {
            if can_log {
                log::warning(format_args!(
                    "Short write while writing to the AOF file: (nwritten={done}, expected={len})"
                ));
            }
            // The file's length before this write: undo the part written.
            let undone = file
                .metadata()
                .and_then(|m| file.set_len(m.len().saturating_sub(done as u64)));
            match undone {
                Ok(()) => done = 0,
                Err(e) if can_log => log::warning(format_args!(
                    "Could not remove short write from the append-only file.  Redis may refuse to load the AOF the next time it starts.  ftruncate: {}",
                    e.raw_os_error().map_or_else(|| e.to_string(), strerror)
                )),
                Err(_) => {}
            }
            Some(libc::ENOSPC)
        };
        if self.policy() == AppendFsync::Always {
            always_failed(
                "Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting...",
            );
        }
        self.write_failed.store(true, Ordering::Relaxed);
        self.disk.set_aof_write(false, errno);
        if done > 0 {
            buf.drain(..done);
            if !old {
                self.written.fetch_add(done as u64, Ordering::Relaxed);
                s.dirty = true;
            }
        }
        false
    }

    /// Records an fsync's outcome (Redis's background fsync: a failure
    /// refuses writes with its errno until an fsync succeeds; logged when
    /// it starts).
    fn fsynced(&self, res: &std::io::Result<()>) {
        match res {
            Ok(()) => {
                if self.fsync_failed.swap(false, Ordering::Relaxed) {
                    self.disk.set_aof_fsync(true, None);
                }
            }
            Err(e) => {
                if !self.fsync_failed.swap(true, Ordering::Relaxed) {
                    log::warning(format_args!(
                        "Fail to fsync the AOF file: {}",
                        e.raw_os_error().map_or_else(|| e.to_string(), strerror)
                    ));
                }
                self.disk.set_aof_fsync(false, e.raw_os_error());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The durable target: every item below it is written (and, under
    /// `always`, fsynced).
    pub fn durable(&self) -> u64 {
        self.synced.load(Ordering::SeqCst)
    }

    /// Writes (and feeds to the stream) what is queued and ready now,
    /// from the calling thread (see `AofControl::feed_queued`); fsyncs
    /// as the writer's own turn would.
    pub fn commit_queued(&self) {
        let mut s = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        self.commit(&mut s, &[]);
    }

    /// Writes everything queued now to the file from the calling thread,
    /// as Redis's `flushAppendOnlyFile(1)` (DEBUG LOADAOF, before reading
    /// the file back), fsynced as the policy says. `in_tx`: the caller
    /// runs inside a transaction (EXEC) holding every lock, whose own slot
    /// is the last one open, if it recorded anything yet: the flush stops
    /// there, as Redis writes a transaction's commands after its EXEC.
    /// `Err` if a write fails (what was not written stays queued for the
    /// writer's retries), or if the queue is not written by `within`: an
    /// open slot ahead of the rest is a transaction whose coordinator has
    /// not finished (see the module docs), completed by its home thread,
    /// which this call does not block unless it is that thread.
    pub fn flush_queued(&self, within: Duration, in_tx: bool) -> Result<(), String> {
        let target = {
            let q = self.lock();
            let open = |i: &Item| matches!(i, Item::Tx { done: false, .. });
            match q.items.iter().rposition(open) {
                Some(at) if in_tx => q.base + at as u64,
                _ => q.next(),
            }
        };
        let deadline = Instant::now() + within;
        loop {
            {
                let mut s = self.sink.lock().unwrap_or_else(|e| e.into_inner());
                self.commit(&mut s, &[]);
            }
            if self.durable() >= target {
                return Ok(());
            }
            if self.write_failed.load(Ordering::Relaxed) {
                return Err("Errors writing to the AOF file".into());
            }
            if Instant::now() >= deadline {
                return Err("the AOF's queue was not written in time".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Tests: waits until `target` is durable; panics naming `what` after
    /// 30 s.
    #[cfg(test)]
    pub fn wait_durable(&self, target: u64, what: &str) {
        let t0 = Instant::now();
        while self.durable() < target {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{what} never durable"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Thread `i` asks to be woken once the durable target reaches
    /// `target` (0: cancels). Returns the durable target as it stands
    /// after the request (if it already reached `target`, no wake-up
    /// comes: the caller must not sleep).
    pub fn want(&self, i: usize, target: u64) -> u64 {
        if let Some(slot) = self.wakers.want.get(i) {
            // SeqCst with the writer's store of `synced` and load of
            // `want`: one of the two sides sees the other.
            slot.store(target, Ordering::SeqCst);
        }
        self.durable()
    }

    /// `synced` was published: wakes the threads waiting for it, other
    /// than `mine` (the caller's own, which see it without a wake-up).
    fn wake_waiters(&self, synced: u64, mine: &[usize]) {
        let w = &self.wakers;
        let Some(wake) = w.wake.get() else {
            return;
        };
        for (i, slot) in w.want.iter().enumerate() {
            let t = slot.load(Ordering::SeqCst);
            if t != 0
                && t <= synced
                && slot
                    .compare_exchange(t, 0, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                && !mine.contains(&i)
            {
                wake(i);
            }
        }
    }

    /// Starts a new incr file: records queued after this call go to
    /// `file` (opened by the caller, so that a file that cannot be created
    /// stops the rewrite before it starts). (The rewrite hook; see the
    /// module docs.)
    pub fn switch_incr(&self, file: File) {
        self.switch_file(Some(file));
    }

    /// [`Aof::switch_incr`] to `file`, or to none: the writer stops
    /// writing a file but goes on feeding the stream (`appendonly no`
    /// with replicas attached).
    pub fn switch_file(&self, file: Option<File>) {
        let mut q = self.lock();
        let at = q.next();
        q.switches.push_back((at, file));
        drop(q);
        self.work.notify_one();
    }

    /// Drops records instead of writing them until the next
    /// [`Aof::switch_incr`] (see `discard`).
    pub fn discard_until_switch(&self) {
        self.discard.store(true, Ordering::SeqCst);
    }

    /// Writes and syncs what is queued, then ends the writer (shutdown).
    pub fn stop(&self) {
        {
            let mut q = self.lock();
            q.stop = true;
            // Transactions that never finished are written as they stand.
            for item in q.items.iter_mut() {
                if let Item::Tx { done, .. } = item {
                    *done = true;
                }
            }
            q.txs.clear();
        }
        self.work.notify_all();
        let h = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

/// Starts the writer thread on `file` (none: a writer that only feeds
/// the replication stream), publishing its write status to `disk` and
/// waking the server's threads through `wakers`.
pub fn start(
    file: impl Into<Option<File>>,
    policy: AppendFsync,
    (disk, wakers): (&'static DiskStatus, &Arc<Wakers>),
) -> Arc<Aof> {
    let file: Option<File> = file.into();
    let now = Instant::now();
    let len = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len());
    let has_file = file.is_some();
    let aof = Arc::new(Aof {
        q: Mutex::new(Queue::default()),
        sink: Mutex::new(Sink {
            file,
            retiring: None,
            cur_db: None,
            buf: Vec::new(),
            dirty: false,
            last_sync: now,
            last_write: now,
            last_error_log: None,
            batch_records: 0,
            cur_ts: 0,
            rbuf: Vec::new(),
            repl_db: None,
            feed: None,
        }),
        work: Condvar::new(),
        synced: AtomicU64::new(0),
        fsync: AtomicU8::new(fsync_code(policy)),
        timestamps: AtomicBool::new(false),
        write_failed: AtomicBool::new(false),
        fsync_failed: AtomicBool::new(false),
        disk,
        wakers: wakers.clone(),
        written: AtomicU64::new(len),
        discard: AtomicBool::new(false),
        thread: Mutex::new(None),
        asleep: AtomicBool::new(false),
        stamps: AtomicU64::new(1),
        has_file: AtomicBool::new(has_file),
    });
    let a = aof.clone();
    let h = std::thread::Builder::new()
        .name("aof".into())
        .spawn(move || writer(a))
        .expect("spawn the AOF writer");
    *aof.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
    aof
}

/// Redis's genAofTimestampAnnotationIfNeeded: `#TS:<unix seconds>` when
/// the second changed since the last one written.
fn timestamp(buf: &mut Vec<u8>, cur: &mut u64) {
    let now = engine::now_ms() / 1000;
    if now > *cur {
        *cur = now;
        buf.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
    }
}

fn select(buf: &mut Vec<u8>, cur: &mut Option<usize>, db: usize) {
    if *cur != Some(db) {
        let d = db.to_string();
        write_array(buf, &[b"SELECT", d.as_bytes()]);
    }
}

/// Chunk `c` as `to` (the file or the stream) reads it (see
/// [`Chunk::write_to`]).
fn emit(buf: &mut Vec<u8>, cur: &mut Option<usize>, c: &Chunk, to: Target) {
    select(buf, cur, c.first_db);
    c.write_to(buf, to);
    *cur = Some(c.last_db);
}

/// A transaction's parts (in stamp order) as one block.
fn emit_tx(
    buf: &mut Vec<u8>,
    cur: &mut Option<usize>,
    parts: &[(u64, Chunk)],
    records: u64,
    to: Target,
) {
    if parts.is_empty() {
        return;
    }
    // Redis 7.0's propagatePendingCommands: one record is atomic by
    // itself and goes bare.
    let wrap = records > 1;
    if wrap {
        // Redis writes the first record's SELECT before the MULTI.
        let db = parts[0].1.first_db;
        select(buf, cur, db);
        *cur = Some(db);
        write_array(buf, &[b"MULTI"]);
    }
    for (_, c) in parts {
        emit(buf, cur, c, to);
    }
    if wrap {
        write_array(buf, &[b"EXEC"]);
    }
}

/// `appendfsync always` with every shard on one thread: a round that
/// appended up to this many records, with no request waiting, fsyncs in
/// the thread itself (see `Host::lead_aof`); otherwise the writer thread
/// does, told as soon as the queue holds more (see [`Aof::append`]): it
/// fsyncs while this thread reads and runs the next requests.
/// SET, 50 clients (bench/aof.sh, two runs of 3 and 4 rounds, ratio to
/// Redis in the same run; 0 = always the writer thread):
///
/// | limit | P1 | P16 |
/// |---:|---:|---:|
/// | 0 | 1.00 / 0.98 | 1.63 / 1.86 |
/// | 20 | 1.19 / 1.21 | 1.64 / 1.83 |
/// | 32 | — / 1.13 | — / 1.77 |
/// | 64 | 1.24 / 1.05 | 1.52 / 1.67 |
pub const LEAD_MAX_RECORDS: u64 = 20;
/// `always`: how long after an fsync the writer may wait for the records
/// of the clients that fsync released (see `writer`).
const GATHER_MAX: Duration = Duration::from_millis(1);
/// How often a writer that wrote within [`BUSY`] looks for records
/// without being told (policies other than `always`; see [`Aof::kick`]).
const POLL: Duration = Duration::from_millis(2);
const BUSY: Duration = Duration::from_millis(100);
/// How often a buffer whose write failed is retried (see `writer`).
const RETRY: Duration = Duration::from_millis(100);
/// A failed write is logged (and its errno recorded) at most this often:
/// Redis's AOF_WRITE_LOG_ERROR_RATE.
const WRITE_ERROR_LOG_RATE: Duration = Duration::from_secs(30);

/// Under `always`, a record that cannot be written or fsynced would
/// release replies as if it were durable: the process ends instead, before
/// publishing anything, as Redis's flushAppendOnlyFile does.
fn always_failed(msg: &str) -> ! {
    log::warning(format_args!("{msg}"));
    std::process::exit(1);
}

/// A file left at a switch with bytes its writes failed to take: they go
/// to it before anything goes to the new file (see [`Aof::commit`]).
struct Retiring {
    file: File,
    buf: Vec<u8>,
}

fn drop_unwritten(bytes: usize) {
    log::warning(format_args!(
        "Dropping {bytes} bytes of the AOF buffer that could not be written"
    ));
}

/// The file and its writing state; see [`Aof::sink`].
struct Sink {
    /// None: the writer feeds only the stream.
    file: Option<File>,
    /// The file before the last switch, while it still owes bytes.
    retiring: Option<Retiring>,
    /// The database the file's last record selected.
    cur_db: Option<usize>,
    buf: Vec<u8>,
    /// Written since the last fsync.
    dirty: bool,
    last_sync: Instant,
    /// The last successful write (or feed of the stream).
    last_write: Instant,
    /// When a failed write was last logged (see [`Aof::write_file`]).
    last_error_log: Option<Instant>,
    /// `always`: records in the last batch (see `writer`).
    batch_records: u64,
    /// The second of the last `#TS:` line written (Redis's
    /// `aof_cur_timestamp`).
    cur_ts: u64,
    /// The stream's batch, its `SELECT` state, and its consumer.
    rbuf: Vec<u8>,
    repl_db: Option<usize>,
    feed: Option<Arc<dyn StreamFeed>>,
}

fn writer(aof: Arc<Aof>) {
    loop {
        let (batch_records, dirty, last_sync, last_write, stuck) = {
            let s = aof.sink.lock().unwrap_or_else(|e| e.into_inner());
            let stuck = !s.buf.is_empty() || s.retiring.is_some();
            (s.batch_records, s.dirty, s.last_sync, s.last_write, stuck)
        };
        if stuck {
            // A write failed: its bytes are retried after RETRY (Redis
            // retries at each turn of its loop, and every second from its
            // cron), with whatever was queued since, up to the next
            // switch; nothing else happens until then but a stop.
            let q = aof.lock();
            if !q.stop {
                let _ = aof.work.wait_timeout(q, RETRY);
            }
            let mut s = aof.sink.lock().unwrap_or_else(|e| e.into_inner());
            if aof.commit(&mut s, &[]) {
                break;
            }
            continue;
        }
        if batch_records > 1 && aof.policy() == AppendFsync::Always {
            // Group commit under concurrency: the clients whose replies the
            // last fsync released answer within a round trip, and send
            // about as many records again. Starting the next fsync at once
            // would leave them for the one after: the clients split into
            // cohorts, each fsync covering a few, and every fsync costs
            // CPU. So the writer waits (up to GATHER_MAX after the last
            // fsync) until as many records as the last batch held are
            // queued; shards do not wake it for fewer (`batch_ready`).
            // One client (one record per batch) never waits.
            let deadline = last_sync + GATHER_MAX;
            let mut q = aof.lock();
            q.gather_for = batch_records;
            while q.records < batch_records && !q.stop && q.switches.is_empty() {
                let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                    break;
                };
                q = aof
                    .work
                    .wait_timeout(q, left)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            q.gather_for = 0;
        }
        {
            let mut q = aof.lock();
            loop {
                if ready(q.items.front()) || q.stop || q.switch_due() {
                    break;
                }
                let mut wait = if dirty {
                    Duration::from_millis(200)
                } else {
                    Duration::from_secs(1)
                };
                if aof.policy() != AppendFsync::Always {
                    if last_write.elapsed() < BUSY {
                        wait = POLL;
                    } else {
                        // Set under the queue lock: an append after this
                        // sees it and notifies.
                        aof.asleep.store(true, Ordering::SeqCst);
                    }
                }
                q = aof
                    .work
                    .wait_timeout(q, wait)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
                aof.asleep.store(false, Ordering::SeqCst);
                if dirty && last_sync.elapsed() >= Duration::from_secs(1) {
                    break;
                }
            }
        }
        let mut s = aof.sink.lock().unwrap_or_else(|e| e.into_inner());
        if aof.commit(&mut s, &[]) {
            break;
        }
    }
    // The writer is gone (shutdown, or the AOF turned off): its errors
    // refuse nothing any more.
    aof.disk.clear_aof();
}

#[cfg(test)]
mod tests;
