//! Tessera as a replication master (Redis 7.0's protocol): PSYNC and
//! SYNC, full and partial resyncs, the stream to every replica, WAIT's
//! acknowledgements, and the replication cron.
//!
//! The stream. The AOF writer (`aof`) is where every shard's records meet
//! in order; replication attaches to it as a [`StreamFeed`]: each batch's
//! bytes advance `master_repl_offset`, go into the backlog and are queued
//! to every streaming replica, all under [`Master`]'s lock, so a replica
//! joining (a partial resync reads the backlog, a full sync's mark fixes
//! its starting offset) sees every byte once. With the AOF off, the
//! writer runs with no file ([`Rewriter::stream_writer`]) and the shards
//! record from the first full sync's snapshot instant on.
//!
//! A full sync is a fork-less snapshot (`commands::persist`) begun on
//! every shard under the whole-keyspace lock by thread 0's cron (as the
//! `save` rules are): at its instant the coordinator queues a mark into
//! the stream, after every record that the snapshot holds and before
//! every one it does not; the writer runs the mark in stream order, and
//! the offset there is the replicas' `+FULLRESYNC` offset and the start of
//! their stream (Redis also forces a `SELECT` there). Everything written
//! during the transfer waits in each replica's queue (bounded by the
//! `replica` output limits). Replicas asking while a snapshot runs wait
//! for the next one; a diskless sync waits `repl-diskless-sync-delay`
//! for more replicas to share it, as Redis's.
//!
//! A replica's replicas (chained replication). A replica does not stream
//! its own records: it proxies its master's stream, byte for byte, with
//! the master's replication ID and offsets, as Redis's
//! `replicationFeedStreamFromMasterStream`. Its master connection (worker
//! 0) hands over the bytes of every command once applied ([`proxy`]):
//! they extend `master_repl_offset` and the backlog (which a replica keeps
//! whether or not it has replicas, so that once promoted its old master's
//! other replicas continue with `+CONTINUE`), and go to each streaming
//! replica. The writer's output is then dropped ([`Master`]'s
//! `proxying`), so the AOF of a replica still gets its records. A full
//! sync of a replica's replica runs as a command of the master connection
//! while nothing of the master's stream is in flight: the snapshot holds
//! exactly the bytes applied up to the offset its replicas start from
//! (with no master connection, nothing changes the data, and thread 0's
//! cron runs it as a master's). REPLICAOF NO ONE switches the stream back
//! to the writer at one instant (see `commands::repl::ReplRuntime`): a
//! mark in the writer's queue ends the proxying after every record of the
//! old role and before every one of the new; the offsets go on from where
//! the master's stream left them.
//!
//! FAILOVER (`commands::repl::failover`): the cron checks the failover
//! each tick (the target's acknowledged offset, the timeout) and demotes
//! this server when it is due, and sends no PING while it runs (the
//! offsets must meet); its start queues a mark into the stream
//! ([`ReplRuntime::failover_started`]); thread 0's cron runs the abort of a
//! refused takeover ([`cron_due`]).
//!
//! One [`Master`] per process, reached through [`get`]: the workers'
//! connection code hands it sockets and WAITs, and the commands crate
//! cannot name runtime types (an `Arc` in `ServerShared` would have to be
//! a trait object for one implementation).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commands::coord::Coordinator;
use commands::repl::{failover, Backlog, ReplRuntime, ReplicaInfo, ReplicaState, SyncRequest};
use commands::{ClientState, ServerShared};

use super::link::{server_ack, Bulk, Fanout, Link, Sock};
use crate::log;
use crate::server::aof::StreamFeed;
use crate::server::aof_rewrite::Rewriter;
use crate::server::conn::Stream;

/// The master side of `server`, once [`init`] ran for it: its
/// `repl.runtime` (the server's, not the process's: two servers in one
/// process, as tests build, each have their own).
fn get(server: &ServerShared) -> Option<Arc<Master>> {
    let runtime = server.repl.runtime.get()?.clone();
    runtime.into_any().downcast::<Master>().ok()
}

pub struct Master {
    server: Arc<ServerShared>,
    inner: Mutex<Inner>,
    /// The writer's output is dropped: this server is a replica and
    /// proxies its master's stream instead. Switched in stream order (a
    /// mark in the writer's queue) when the writer is attached.
    proxying: AtomicBool,
}

#[derive(Default)]
struct Inner {
    /// Replicas receiving the stream (their start offset is set).
    streaming: Vec<Arc<Link>>,
    /// Replicas waiting for a full sync's snapshot to begin.
    waiting: Vec<Arc<Link>>,
    waiting_since: Option<Instant>,
    /// A sync's snapshot runs.
    syncing: bool,
    /// The feed is attached to the writer.
    fed: bool,
    /// The `replica` class of `client-output-buffer-limit` (refreshed by
    /// the cron: the feed runs per batch and must not clone the config).
    limit: config::ObufLimit,
    /// The backlog outlived `repl-backlog-ttl`, or this server became a
    /// replica: thread 0 stops the stream (the shards' records).
    stop_stream: bool,
    /// The role as this side last learned it (promotion and demotion
    /// hooks): a replica proxies, and its syncs run on the master
    /// connection.
    replica: bool,
    /// Bytes of the stream's own commands (`PING`, `REPLCONF GETACK *`)
    /// fed since its last data: a WAIT's target stops before them, as
    /// Redis's client `woff` is its last write's offset, not the stream's
    /// (a replica's ACK to a GETACK counts the bytes before the GETACK).
    raw_tail: u64,
    /// Where the last `REPLCONF GETACK *` went into the stream (the
    /// offset before it): a WAIT whose target is at or before it has an
    /// ACK on its way and asks for none.
    getack_at: Option<u64>,
}

/// Starts the master side and its cron thread.
pub fn init(server: &Arc<ServerShared>) {
    let m = Arc::new(Master {
        server: server.clone(),
        inner: Mutex::new(Inner {
            limit: server.config().client_output_buffer_limit[1],
            replica: server.repl.is_replica(),
            ..Inner::default()
        }),
        proxying: AtomicBool::new(server.repl.is_replica()),
    });
    let runtime = m.clone() as Arc<dyn commands::repl::ReplRuntime>;
    if server.repl.runtime.set(runtime).is_err() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("repl-cron".into())
        .spawn(move || m.cron_loop());
}

fn rewriter(server: &ServerShared) -> Option<&Rewriter> {
    server.aof.get()?.as_any().downcast_ref::<Rewriter>()
}

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const GETACK: &[u8] = b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n";

impl StreamFeed for Master {
    fn feed(&self, b: Vec<u8>) {
        if self.proxying.load(Ordering::Acquire) {
            return;
        }
        let mut inner = self.lock();
        if !b.is_empty() {
            inner.raw_tail = 0;
        }
        Self::feed_locked(&self.server, &inner, b);
    }
}

impl Master {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stream bytes into the offset, the backlog and every streaming
    /// replica's queue (under `inner`: see the module docs).
    fn feed_locked(server: &ServerShared, inner: &Inner, b: Vec<u8>) {
        server.repl.feed(&b);
        if inner.streaming.is_empty() {
            return;
        }
        let chunk = Arc::new(b);
        for l in &inner.streaming {
            l.push_stream(&chunk, &inner.limit);
        }
    }

    /// The stream's own command `b` (`PING`, `GETACK`), fed by a mark in
    /// the writer's queue (so in stream order) and not counted as data
    /// (see `raw_tail`).
    fn feed_raw(&self, b: &[u8]) {
        if self.proxying.load(Ordering::Acquire) {
            return;
        }
        let mut inner = self.lock();
        inner.raw_tail += b.len() as u64;
        Self::feed_locked(&self.server, &inner, b.to_vec());
    }

    /// A WAIT's mark ran: its target is the stream's data up to here
    /// (every write of the client is before the mark). When fewer than
    /// `need` replicas acknowledged it, a `REPLCONF GETACK *` follows,
    /// unless one is already on its way after the target (one per target
    /// for every WAIT, as Redis's once per event loop).
    fn wait_mark(&self, need: u64) -> u64 {
        let mut inner = self.lock();
        let off = self.server.repl.offset();
        let target = off.saturating_sub(inner.raw_tail);
        if self.proxying.load(Ordering::Acquire) || self.server.repl.acked(target) >= need {
            return target;
        }
        if inner.getack_at.is_some_and(|at| at >= target) {
            return target;
        }
        inner.getack_at = Some(off);
        inner.raw_tail += GETACK.len() as u64;
        Self::feed_locked(&self.server, &inner, GETACK.to_vec());
        target
    }

    /// The stream is on: the writer runs (with no file if the AOF is
    /// off) and feeds this master. Not under `inner` (the writer calls the
    /// feed with its sink held; attaching takes the sink).
    fn ensure_stream(self: &Arc<Self>) -> bool {
        let Some(rw) = rewriter(&self.server) else {
            return false;
        };
        if self.lock().fed {
            return true;
        }
        let w = rw.stream_writer();
        self.server.repl.set_streaming(true);
        w.set_feed(Some(self.clone() as Arc<dyn StreamFeed>));
        self.lock().fed = true;
        true
    }

    /// A connection that sent PSYNC / SYNC becomes a replica.
    fn attach(self: &Arc<Self>, link: Arc<Link>, ip: String, port: u16, client: &ClientState) {
        let server = &self.server;
        log::notice(format_args!("Replica {ip}:{port} asks for synchronization"));
        // A replica proxies its master's stream: no writer of its own.
        if !self.lock().replica && !self.ensure_stream() {
            link.close("no stream writer");
            return;
        }
        let now = engine::now_ms();
        let mut inner = self.lock();
        // Read before the state's lock (CONFIG SET takes the config's,
        // then the state's).
        let cfg = server.config();
        let cfg_size = cfg.repl_backlog_size as usize;
        let mut r = server.repl.lock();
        let partial = match &link.request {
            SyncRequest::Psync { replid, offset } => {
                let ids = &r.ids;
                let id_ok = *replid == ids.replid
                    || (*replid == ids.replid2 && *offset <= ids.second_repl_offset);
                let data = (*offset >= 0)
                    .then(|| r.master.backlog.as_ref()?.read_from(*offset as u64))
                    .flatten();
                match (id_ok, data) {
                    (true, Some(d)) => Some((d, *offset as u64)),
                    (id_ok, _) => {
                        if replid != "?" {
                            if !id_ok {
                                log::notice(format_args!(
                                    "Partial resynchronization not accepted: Replication ID mismatch (Replica asked for '{replid}', my replication IDs are '{}' and '{}')",
                                    ids.replid, ids.replid2
                                ));
                            } else {
                                log::notice(format_args!(
                                    "Unable to partial resync with replica {ip}:{port} for lack of backlog (Replica request was: {offset})."
                                ));
                            }
                            r.master.sync_partial_err += 1;
                        } else {
                            log::notice(format_args!(
                                "Full resync requested by replica {ip}:{port}"
                            ));
                        }
                        None
                    }
                }
            }
            SyncRequest::Sync => None,
        };
        if partial.is_none() && r.master.backlog.is_none() {
            // The first replica: a new history begins (Redis's
            // syncCommand changes the ID when it creates the backlog; a
            // replica keeps its master's).
            if r.master.replicas.is_empty() && !inner.replica {
                r.ids.replid = commands::repl::new_replid();
                r.ids.replid2 = "0".repeat(40);
                r.ids.second_repl_offset = -1;
            }
            let next = r.ids.master_repl_offset + 1;
            r.master.backlog = Some(Backlog::new(cfg_size, next));
        }
        r.master.no_replicas_since_ms = 0;
        inner.stop_stream = false;
        let state = if partial.is_some() {
            r.master.sync_partial_ok += 1;
            ReplicaState::Online
        } else {
            r.master.sync_full += 1;
            ReplicaState::WaitBgsave
        };
        r.master.replicas.push(ReplicaInfo {
            id: link.id,
            addr: client.addr.clone(),
            laddr: client.laddr.clone(),
            ip,
            port,
            state,
            ack_offset: 0,
            ack_ms: now,
            created_ms: client.created_ms,
            fd: link.fd(),
            name: client.name.clone(),
            user: String::from_utf8_lossy(client.acl.name()).into_owned(),
        });
        let replid = r.ids.replid.clone();
        if partial.is_some() {
            // Online at once (see `set_state`).
            refresh_good_replicas(server, &cfg, &r);
        }
        drop(r);
        let is_partial = partial.is_some();
        if let Some((data, from)) = partial {
            log::notice(format_args!(
                "Partial resynchronization request from {} accepted. Sending {} bytes of backlog starting from offset {from}.",
                link.addr,
                data.len()
            ));
            let mut o = link.lock();
            o.start = Some(from - 1);
            o.replid = replid;
            // The replica takes the stream at once: no file.
            o.live = true;
            if !data.is_empty() {
                o.stream_bytes += data.len();
                o.stream.push_back(Arc::new(data));
            }
            drop(o);
            inner.streaming.push(link.clone());
        } else {
            inner.waiting.push(link.clone());
            inner.waiting_since.get_or_insert_with(Instant::now);
        }
        drop(inner);
        self.spawn(link, is_partial);
    }

    fn spawn(self: &Arc<Self>, link: Arc<Link>, partial: bool) {
        let (m, l) = (self.clone(), link.clone());
        let out = std::thread::Builder::new()
            .name(format!("repl-out-{}", link.id))
            .spawn(move || {
                let server = m.server.clone();
                let id = l.id;
                l.serve(partial, &|st| set_state(&server, id, st));
                m.detach(&l);
            });
        let (m, l) = (self.clone(), link.clone());
        let inp = std::thread::Builder::new()
            .name(format!("repl-in-{}", link.id))
            .spawn(move || {
                let server = m.server.clone();
                let id = l.id;
                l.read_acks(&|off| server_ack(&server, id, off));
            });
        if out.is_err() || inp.is_err() {
            link.close("can't start its threads");
            self.detach(&link);
        }
    }

    /// A link ended: it leaves every list (its entry in the shared state
    /// first, so CLIENT KILL never names its socket after it is closed).
    fn detach(&self, link: &Arc<Link>) {
        link.close("");
        let cfg = self.server.config();
        let mut inner = self.lock();
        inner.streaming.retain(|l| !Arc::ptr_eq(l, link));
        inner.waiting.retain(|l| !Arc::ptr_eq(l, link));
        let mut r = self.server.repl.lock();
        r.master.replicas.retain(|x| x.id != link.id);
        if r.master.replicas.is_empty() {
            r.master.no_replicas_since_ms = engine::now_ms();
        }
        refresh_good_replicas(&self.server, &cfg, &r);
    }

    /// The stream's mark of a full sync (see the module docs): the
    /// replicas' stream starts here.
    fn start_streams(&self, batch: &[Arc<Link>]) {
        let mut inner = self.lock();
        let off = self.server.repl.offset();
        let replid = self.server.repl.ids().replid;
        for l in batch {
            let mut o = l.lock();
            o.start = Some(off);
            o.replid = replid.clone();
            let closed = o.closed;
            drop(o);
            l.cv.notify_all();
            if !closed {
                inner.streaming.push(l.clone());
            }
        }
    }

    /// A sync's snapshot ended (`ok`) or failed.
    fn sync_done(&self, batch: &[Arc<Link>], ok: bool, diskless: bool) {
        let rdb = self.server.config().rdb_path();
        for l in batch {
            let mut o = l.lock();
            if diskless {
                o.rdb_end = Some(ok);
            } else {
                o.bulk = match (ok, File::open(&rdb)) {
                    (true, Ok(f)) => Bulk::File(f),
                    _ => Bulk::Failed,
                };
            }
            drop(o);
            l.cv.notify_all();
        }
        self.lock().syncing = false;
    }

    /// The sync thread 0 must start now, if any (see [`cron_due`]);
    /// `conn_db`: asked by a replica's idle master connection, whose
    /// stream is in that database.
    fn sync_due(self: &Arc<Self>, conn_db: Option<usize>) -> Option<Box<dyn Coordinator>> {
        let on_master_conn = conn_db.is_some();
        let cfg = self.server.config();
        let mut inner = self.lock();
        if inner.stop_stream && !inner.syncing && inner.waiting.is_empty() && !on_master_conn {
            inner.stop_stream = false;
            drop(inner);
            return Some(self.stop_stream_coordinator());
        }
        // A replica's sync runs on its master connection when there is
        // one (see the module docs), as a master's otherwise.
        let conn = self.server.repl.master_conn.load(Ordering::Acquire);
        if inner.replica && conn != on_master_conn {
            return None;
        }
        inner.waiting.retain(|l| !l.lock().closed);
        if inner.syncing || inner.waiting.is_empty() {
            return None;
        }
        let diskless = cfg.repl_diskless_sync && inner.waiting.iter().all(|l| l.capa_eof);
        if diskless {
            let waited_s = inner.waiting_since.map_or(0, |t| t.elapsed().as_secs());
            let max = cfg.repl_diskless_sync_max_replicas;
            let enough = max > 0 && inner.waiting.len() as u64 >= max;
            if waited_s < cfg.repl_diskless_sync_delay_s && !enough {
                return None;
            }
        }
        let replica = inner.replica;
        let writer = if replica {
            None
        } else {
            Some(rewriter(&self.server)?.current()?)
        };
        let batch = std::mem::take(&mut inner.waiting);
        inner.waiting_since = None;
        inner.syncing = true;
        drop(inner);
        for l in &batch {
            l.diskless.store(diskless, Ordering::Release);
        }
        let target = if diskless {
            commands::persist::SyncTarget::Socket(Box::new(Fanout {
                links: batch.clone(),
            }))
        } else {
            commands::persist::SyncTarget::Disk
        };
        let (m, b) = (self.clone(), batch.clone());
        let at_instant: Box<dyn FnOnce() + Send> = match writer {
            Some(w) => Box::new(move || {
                w.stream_mark(true, Box::new(move || m.start_streams(&b)));
            }),
            // A replica: nothing of its master's stream is in flight (see
            // the module docs), the offset is the snapshot's.
            None => Box::new(move || m.start_streams(&b)),
        };
        let (m, b) = (self.clone(), batch.clone());
        let on_done = Box::new(move |ok: bool| {
            m.sync_done(&b, ok, diskless);
            false
        });
        // A replica's replicas start mid-stream: the payload says which
        // database it is in (a master's stream begins with a SELECT).
        let stream_db = replica.then(|| {
            conn_db.unwrap_or(self.server.repl.master_db.load(Ordering::Acquire) as usize)
        });
        match commands::persist::sync_coordinator(
            &self.server,
            target,
            at_instant,
            on_done,
            stream_db,
        ) {
            Ok(c) => Some(c),
            Err(e) => {
                // A save runs: the replicas wait for the next snapshot.
                log::verbose(format_args!(
                    "Sync deferred: {}",
                    String::from_utf8_lossy(&e.line())
                ));
                let mut inner = self.lock();
                inner.syncing = false;
                let mut batch = batch;
                batch.append(&mut inner.waiting);
                inner.waiting = batch;
                inner.waiting_since.get_or_insert_with(Instant::now);
                None
            }
        }
    }

    /// Ends the stream once its backlog expired: every shard stops
    /// recording (unless the AOF reads), then the writer drops the feed.
    fn stop_stream_coordinator(self: &Arc<Self>) -> Box<dyn Coordinator> {
        let server = self.server.clone();
        let keep = server.aof.get().is_some_and(|a| a.enabled());
        let (m, m2) = (self.clone(), self.clone());
        commands::persist::all_shards_then(
            &server,
            move |shard| {
                // A promotion (under Write locks: never between two of
                // these jobs) may have put the stream back meanwhile.
                if !m2.stream_wanted() {
                    shard.outbox.records_on = keep;
                }
            },
            Box::new(move || {
                let mut inner = m.lock();
                if m.stream_wanted_locked(&inner) {
                    // A replica came meanwhile, or a promotion put the
                    // stream back: it stays (a sync's snapshot turns the
                    // shards' records back on).
                    return;
                }
                inner.fed = false;
                drop(inner);
                m.server.repl.set_streaming(false);
                if let Some(rw) = rewriter(&m.server) {
                    rw.stream_stop();
                }
            }),
        )
    }

    /// Whether this server's own writes must go on feeding the stream: a
    /// master with replicas or a backlog.
    fn stream_wanted(&self) -> bool {
        self.stream_wanted_locked(&self.lock())
    }

    fn stream_wanted_locked(&self, inner: &Inner) -> bool {
        !inner.replica
            && (!inner.waiting.is_empty()
                || !inner.streaming.is_empty()
                || self.server.repl.lock().master.backlog.is_some())
    }

    fn cron_loop(self: Arc<Self>) {
        let mut last_ping = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            if self.server.shutdown.load(Ordering::Acquire) {
                continue;
            }
            self.cron(&mut last_ping);
        }
    }

    /// Redis's replicationCron, the master's part: the stream's PING, the
    /// good-replicas count (min-replicas-to-write), replicas past
    /// `repl-timeout`, the backlog's size and time to live.
    fn cron(&self, last_ping: &mut Instant) {
        let cfg = self.server.config();
        let now = engine::now_ms();
        let streaming = {
            let mut inner = self.lock();
            inner.limit = cfg.client_output_buffer_limit[1];
            !inner.streaming.is_empty()
        };
        let mut expired = false;
        let mut timed_out = Vec::new();
        let (refuse, replicas) = {
            let mut r = self.server.repl.lock();
            // Redis's replicationCron: an online replica silent for
            // `repl-timeout` is dropped (it reconnects and resyncs).
            let timeout_ms = cfg.repl_timeout_s * 1000;
            timed_out.extend(
                r.master
                    .replicas
                    .iter()
                    .filter(|x| {
                        x.state == ReplicaState::Online && now.saturating_sub(x.ack_ms) > timeout_ms
                    })
                    .map(|x| x.id),
            );
            if let Some(b) = &mut r.master.backlog {
                b.resize(cfg.repl_backlog_size as usize);
            }
            let refuse = r.master.too_few_good_replicas(&cfg, now);
            let since = r.master.no_replicas_since_ms;
            // A replica keeps its backlog (Redis: only a top master frees
            // it), to continue its master's replicas once promoted.
            if !matches!(r.role, commands::repl::Role::Replica { .. })
                && r.master.replicas.is_empty()
                && r.master.backlog.is_some()
                && cfg.repl_backlog_ttl_s > 0
                && since != 0
                && now.saturating_sub(since) >= cfg.repl_backlog_ttl_s * 1000
            {
                // Redis's replicationCron: a new history once the backlog
                // is gone (no replica could continue from it anyway).
                r.master.backlog = None;
                r.ids.replid = commands::repl::new_replid();
                r.ids.replid2 = "0".repeat(40);
                r.ids.second_repl_offset = -1;
                log::notice(format_args!(
                    "Replication backlog freed after {} seconds without connected replicas.",
                    cfg.repl_backlog_ttl_s
                ));
                expired = true;
            }
            (refuse, r.master.replicas.len())
        };
        // Not under the state's lock: the feed takes `inner`, then it.
        if expired {
            self.lock().stop_stream = true;
        }
        if !timed_out.is_empty() {
            let links: Vec<Arc<Link>> = self
                .lock()
                .streaming
                .iter()
                .filter(|l| timed_out.contains(&l.id))
                .cloned()
                .collect();
            for l in links {
                log::warning(format_args!(
                    "Disconnecting timedout replica (streaming sync): {}",
                    l.addr
                ));
                l.close("");
            }
        }
        self.server.ops.set_refuse_writes(refuse);
        if let failover::Due::Demote(host, port) = failover::update(&self.server, now) {
            failover::demote(&self.server, &host, port);
        }
        // Redis sends no PING while a failover pauses writes: the target's
        // acknowledged offset must meet the master's.
        let failing_over = self.server.repl.lock().failover.state != failover::State::None;
        if replicas > 0
            && streaming
            && !failing_over
            && !self.lock().replica
            && last_ping.elapsed() >= Duration::from_secs(cfg.repl_ping_replica_period_s)
        {
            *last_ping = Instant::now();
            let me = get(&self.server);
            if let (Some(w), Some(me)) = (rewriter(&self.server).and_then(|r| r.current()), me) {
                w.stream_mark(false, Box::new(move || me.feed_raw(PING)));
            }
        }
    }
}

/// INFO's state of replica `id`. Online, it counts as a good replica at
/// once (its ACK time is now), as Redis's `replicaPutOnline` refreshes
/// the count: a write right after it came online is not refused
/// NOREPLICAS while the cron has not looked yet.
fn set_state(server: &ServerShared, id: u64, st: ReplicaState) {
    let cfg = server.config();
    let mut r = server.repl.lock();
    if let Some(x) = r.master.replicas.iter_mut().find(|x| x.id == id) {
        x.state = st;
        if st == ReplicaState::Online {
            x.ack_ms = engine::now_ms();
            refresh_good_replicas(server, &cfg, &r);
        }
    }
}

/// The `min-replicas-to-write` verdict from the replicas' list now
/// (Redis's `refreshGoodSlavesCount`), where the list changes: a replica
/// online or gone. The replication cron keeps it for lag.
fn refresh_good_replicas(
    server: &ServerShared,
    cfg: &config::Config,
    r: &commands::repl::ReplInner,
) {
    let refuse = r.master.too_few_good_replicas(cfg, engine::now_ms());
    server.ops.set_refuse_writes(refuse);
}

/// A connection's socket for its replication link: a plain one turned
/// blocking, as a file; a TLS one keeps its session (and stays
/// non-blocking: see `link`).
fn into_sock(stream: Stream) -> Sock {
    let fd = match stream {
        Stream::Tcp(s) => s.into_raw_fd(),
        Stream::Unix(s) => s.into_raw_fd(),
        Stream::Tls(t) => {
            let fd = t.tcp.as_raw_fd();
            return Sock::Tls {
                session: Mutex::new(t),
                fd,
            };
        }
    };
    // SAFETY: `fd` was just released by its owner; the File owns it now.
    // Clearing O_NONBLOCK on an fd we own is sound.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
        Sock::Plain(File::from_raw_fd(fd))
    }
}

/// The worker closing a connection that sent PSYNC / SYNC hands its
/// socket here instead; true if taken.
pub fn adopt(server: &ServerShared, stream: Stream, client: &mut ClientState) -> bool {
    let Some(m) = get(server) else { return false };
    let Some(hello) = client.replica.take() else {
        return false;
    };
    let Some(req) = hello.sync.clone() else {
        return false;
    };
    let ip = hello.ip_address.clone().unwrap_or_else(|| {
        client
            .addr
            .rsplit_once(':')
            .map_or(client.addr.clone(), |(ip, _)| ip.to_string())
    });
    let sock = into_sock(stream);
    let link = Arc::new(Link::new(
        m.server.clone(),
        client.id,
        client.addr.clone(),
        sock,
        req,
        (hello.capa_eof, hello.capa_psync2),
    ));
    m.attach(link, ip, hello.listening_port, client);
    true
}

/// At exit, after the stream writer stopped: waits (at most `limit`) for
/// the streaming replicas' queues to reach their sockets, as Redis
/// flushes its replicas' output before it exits.
pub fn drain(server: &ServerShared, limit: Duration) {
    let Some(m) = get(server) else { return };
    let t0 = Instant::now();
    let links: Vec<Arc<Link>> = m.lock().streaming.clone();
    for l in links {
        while t0.elapsed() < limit {
            let o = l.lock();
            if o.closed || (!o.stream_pending() && !o.sending) {
                break;
            }
            drop(o);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Thread 0's cron: the full sync (or the stream's end) to start now.
pub fn cron_due(server: &Arc<ServerShared>) -> Option<Box<dyn Coordinator>> {
    if let Some(c) = commands::repl::failover::abort_coordinator(server) {
        return Some(c);
    }
    get(server)?.sync_due(None)
}

/// A replica's master connection, idle (nothing of the master's stream in
/// flight, every byte applied was proxied): the full sync of this
/// server's own replicas to run now as its next command, if any.
pub fn sync_due_on_master_conn(server: &ServerShared, db: usize) -> Option<Box<dyn Coordinator>> {
    get(server)?.sync_due(Some(db))
}

/// A replica's master connection applied `bytes` of its master's stream
/// (role generation `gen`): they extend the offset and the backlog and go
/// to this server's streaming replicas, byte for byte. False if the role
/// moved on (nothing was fed).
pub fn proxy(server: &ServerShared, gen: u64, bytes: &[u8]) -> bool {
    let Some(m) = get(server) else {
        return server.repl.feed_if(gen, bytes);
    };
    // Under `inner`, as the writer's feed: a replica joining sees every
    // byte once (in its backlog read, or queued to it).
    let mut inner = m.lock();
    if !server.repl.feed_if(gen, bytes) {
        return false;
    }
    if !bytes.is_empty() {
        inner.raw_tail = 0;
    }
    if !inner.streaming.is_empty() && !bytes.is_empty() {
        let chunk = Arc::new(bytes.to_vec());
        for l in &inner.streaming {
            l.push_stream(&chunk, &inner.limit);
        }
    }
    true
}

/// Redis's `disconnectSlaves`: every replica's link ends (they reconnect
/// and resync, learning a new replication ID or data).
pub fn disconnect_replicas(server: &ServerShared) {
    let Some(m) = get(server) else { return };
    let links: Vec<Arc<Link>> = {
        let inner = m.lock();
        inner
            .streaming
            .iter()
            .chain(&inner.waiting)
            .cloned()
            .collect()
    };
    for l in links {
        l.close("");
    }
}

impl ReplRuntime for Master {
    fn prepare_promotion(&self) -> bool {
        if self.server.repl.lock().master.backlog.is_none() {
            return false;
        }
        // INVARIANT: `self` is the server's master side, its runtime.
        let Some(me) = get(&self.server) else {
            return false;
        };
        me.ensure_stream()
    }

    fn promoted(&self) {
        {
            // Redis's replicationUnsetMaster: the backlog's time to live
            // counts from the promotion while no replica is attached.
            let mut r = self.server.repl.lock();
            if r.master.replicas.is_empty() {
                r.master.no_replicas_since_ms = engine::now_ms();
            }
        }
        self.switch_role(false);
    }

    fn demoted(&self) {
        self.switch_role(true);
    }

    fn failover_started(&self) {
        let server = self.server.clone();
        let writer = server
            .repl
            .streaming()
            .then(|| rewriter(&server).and_then(|r| r.current()))
            .flatten();
        match writer {
            Some(w) => w.stream_mark(
                false,
                Box::new(move || commands::repl::failover::flushed(&server)),
            ),
            None => commands::repl::failover::flushed(&server),
        }
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl Master {
    /// The stream's side of a role change: a replica (`replica`) stops
    /// feeding its own stream and proxies its master's; a promoted one
    /// feeds its own again. When this side fed the stream, the change
    /// waits for the writer to reach the switch point (a promoted master
    /// then forces a SELECT on its first write, as Redis); replicas are
    /// disconnected either way.
    fn switch_role(&self, replica: bool) {
        let fed = {
            let mut inner = self.lock();
            inner.replica = replica;
            inner.stop_stream = replica && inner.fed;
            inner.raw_tail = 0;
            inner.getack_at = None;
            inner.fed
        };
        let writer = fed
            .then(|| rewriter(&self.server).and_then(|r| r.current()))
            .flatten();
        match (writer, get(&self.server)) {
            (Some(w), Some(me)) => {
                w.stream_mark(
                    !replica,
                    Box::new(move || me.proxying.store(replica, Ordering::Release)),
                );
            }
            _ => self.proxying.store(replica, Ordering::Release),
        }
        disconnect_replicas(&self.server);
    }
}

/// WAIT for `need` replicas: the stream offset that covers everything
/// queued so far (the caller flushed its shard's records first), known
/// once the writer gets there (`u64::MAX` until then); the replicas are
/// asked for an ACK there only if too few acknowledged it already.
pub fn wait_ticket(server: &ServerShared, need: u64) -> Arc<AtomicU64> {
    let t = Arc::new(AtomicU64::new(u64::MAX));
    let writer = server
        .repl
        .streaming()
        .then(|| rewriter(server).and_then(|r| r.current()))
        .flatten();
    match (writer, get(server)) {
        (Some(w), Some(m)) => {
            let t2 = t.clone();
            w.stream_mark(
                false,
                Box::new(move || t2.store(m.wait_mark(need), Ordering::Release)),
            );
        }
        _ => t.store(server.repl.offset(), Ordering::Release),
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The master side is the server's (its `repl.runtime`), not the
    /// process's: of two servers in one process (tests build several),
    /// each gets its own, made for it, and finds it (WAIT, PSYNC, the
    /// stream's proxy and role changes all go through [`get`]).
    #[test]
    fn each_server_has_a_master_side_of_its_own() {
        let server = || ServerShared::new(config::Config::default(), 1).share();
        let (a, b) = (server(), server());
        init(&a);
        init(&b);
        let ma = get(&a).expect("A's master side");
        let mb = get(&b).expect("B's master side");
        assert!(Arc::ptr_eq(&ma.server, &a), "A found another's");
        assert!(Arc::ptr_eq(&mb.server, &b), "B found another's");
        // Their crons go on idling (a stopping server's cron does nothing).
        for s in [&a, &b] {
            s.shutdown.store(true, Ordering::Release);
        }
    }
}
