//! The replica side of replication (issue 25): the link to a master, as a
//! Redis 7.0 replica runs it, so that a Redis (or Tessera) master can feed
//! Tessera.
//!
//! Two halves:
//!
//! * **The link thread** (one per process, blocking I/O): waits until the
//!   server is a replica whose link must connect, then connects (retrying
//!   every second, logged as Redis logs it), runs the handshake (PING,
//!   AUTH with `masterauth`/`masteruser`, REPLCONF listening-port and capa,
//!   PSYNC with the cached replication ID and offset), and on
//!   `+FULLRESYNC` receives the payload to a temporary file (Redis's
//!   disk-based load: both the `$<len>` and the diskless `$EOF:<mark>`
//!   forms) and parses it into detached shards. A payload that does not
//!   parse leaves the live data alone; the link retries. The socket, the
//!   bytes read past the payload and the parsed data are then handed to
//!   worker 0 ([`Handoff`]).
//! * **The master connection** on worker 0: an ordinary connection with
//!   `ClientState::master` set (Redis's `CLIENT_MASTER`), so the master's
//!   commands run through the normal dispatch across the shards (a
//!   master's MULTI/EXEC is atomic through the transaction layer). Its
//!   reply mode is OFF; only `REPLCONF GETACK` is answered. It first runs
//!   the load coordinator (every shard swaps in its new data at one
//!   instant, `commands::replica`), then the stream. [`MasterLink`] counts
//!   the stream's bytes; the offset published to `repl` (INFO, ROLE, ACKs,
//!   the next PSYNC) is that count up to the oldest request still in
//!   flight (its reply slot is the connection's oldest outstanding one:
//!   [`MasterLink::applied`]), so it never claims a command not yet
//!   applied, and a master connection that is never idle (a pipelined
//!   stream) still publishes as it goes.
//!
//! Why a thread for the handshake and the payload, and the event loop for
//! the stream: the handshake is a strictly sequential exchange that a
//! blocking thread writes as straight-line code, and a payload of
//! gigabytes must not be read on a shard's loop; the stream, in contrast,
//! must run through the same dispatch, locks and reply machinery as any
//! client, which only a worker has.
//!
//! The stream's bytes, once applied, are handed to the master side
//! ([`publish`], `master::proxy`): they extend this replica's offset and
//! its backlog, and reach its own replicas byte for byte (Redis's
//! proxying of its master's stream). A master that does not know PSYNC
//! (it answers with an error) is asked with SYNC, as Redis falls back.
//! A master demoted by FAILOVER sends `PSYNC ... FAILOVER` to its target
//! (`commands::repl::failover`): a sync's answer completes the failover,
//! any other aborts it (no SYNC fallback then).
//!
//! Never: touch the data outside the load coordinator.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use commands::repl::{failover, LinkState, Role};
use commands::ServerShared;

use crate::log;

/// Redis's replication cron period: a failed link is retried this often.
const RETRY: Duration = Duration::from_secs(1);
/// Longest handshake reply line accepted (a `+FULLRESYNC` is ~70 bytes).
const MAX_LINE: usize = 64 * 1024;
/// Bytes per read of the payload.
const CHUNK: usize = 64 * 1024;
/// Seconds between `REPLCONF ACK`s (Redis sends one per replication cron).
pub const ACK_PERIOD_MS: u64 = 1000;

/// What the link thread hands worker 0: the socket after the handshake
/// (and the payload), ready to stream.
pub struct Handoff {
    pub stream: TcpStream,
    /// The TLS session over it (`tls-replication`).
    pub tls: Option<rustls::ClientConnection>,
    /// Stream bytes read past the payload.
    pub leftover: Vec<u8>,
    /// A full sync's data, one detached shard per real shard; `None` for a
    /// partial resync.
    pub load: Option<Vec<engine::Shard>>,
    /// The master's replication ID and the stream offset the first
    /// leftover byte follows.
    pub replid: String,
    pub offset: u64,
    /// The database the stream is in there (a payload's
    /// `repl-stream-db`, or where the last link left it).
    pub db: usize,
    /// The role generation the link was made under.
    pub gen: u64,
}

/// Worker 0's cron: the link of `server` waiting for a connection, if any
/// (one relaxed load when none). Left in the server's `repl` (not the
/// process's: two servers in one process never take each other's).
pub fn take_handoff(server: &ServerShared) -> Option<Handoff> {
    let h = server.repl.link_handoff.take()?;
    // INVARIANT: only `run` leaves anything there, a `Handoff`.
    h.downcast::<Handoff>().ok().map(|h| *h)
}

/// The master connection's replication state (on its `Conn`).
#[derive(Debug)]
pub struct MasterLink {
    pub gen: u64,
    /// Offset of the stream up to the last byte consumed (applied or in
    /// flight).
    pub offset: u64,
    /// Offset last published to `repl`.
    pub published: u64,
    /// The bytes consumed since (`offset - published` of them), to be
    /// proxied once applied. Bounded by what the connection has in flight
    /// (`MAX_PENDING` requests, or one transaction) and what it consumed
    /// since its last publish.
    pub proxy: Vec<u8>,
    /// Requests consumed with reply slots still open: the seq of the
    /// first slot each opened and the stream offset before it (ascending).
    pub in_flight: VecDeque<(u64, u64)>,
    /// Unix ms of the last `REPLCONF ACK`.
    pub last_ack_ms: u64,
    /// The load coordinator has not finished: publish nothing yet.
    pub loading: bool,
    /// A full sync replaced the data under the append-only file: it must
    /// be rewritten (Redis's restartAOFAfterSYNC).
    pub aof_rewrite_due: bool,
}

impl MasterLink {
    /// The master connection's state; `server` learns that it exists.
    pub fn new(server: &ServerShared, gen: u64, offset: u64, loading: bool) -> MasterLink {
        server.repl.master_conn.store(true, Ordering::Release);
        server.repl.read_offset.store(offset, Ordering::Relaxed);
        MasterLink {
            gen,
            offset,
            published: offset,
            proxy: Vec::new(),
            in_flight: VecDeque::new(),
            last_ack_ms: 0,
            loading,
            aof_rewrite_due: false,
        }
    }

    /// The master connection consumed `bytes` of the stream (one request,
    /// run or in flight).
    #[inline]
    pub fn consumed(&mut self, server: &ServerShared, bytes: &[u8]) {
        self.offset += bytes.len() as u64;
        self.proxy.extend_from_slice(bytes);
        server
            .repl
            .read_offset
            .store(self.offset, Ordering::Relaxed);
    }

    /// The request just consumed opened reply slots from `seq` on (it is
    /// in flight); the stream before it began at `before`.
    pub fn opened(&mut self, seq: u64, before: u64) {
        self.in_flight.push_back((seq, before));
    }

    /// The stream offset applied so far, given the connection's oldest
    /// outstanding reply slot (`front`; None: nothing outstanding):
    /// everything consumed before the request that slot belongs to (or,
    /// for a slot no request opened, an ACK queued behind them, before the
    /// first request still listed). Requests with no slot ran inline.
    pub fn applied(&mut self, front: Option<u64>) -> u64 {
        let Some(f) = front else {
            self.in_flight.clear();
            return self.offset;
        };
        // A request whose next one opened its slots at or before the
        // front is done (slots are numbered in order).
        while self.in_flight.len() >= 2 && self.in_flight[1].0 <= f {
            self.in_flight.pop_front();
        }
        self.in_flight
            .front()
            .map_or(self.offset, |&(_, before)| before)
    }
}

/// `REPLCONF ACK <offset>` as a command array, as Redis's replica sends.
pub fn ack_bytes(offset: u64) -> Vec<u8> {
    let o = offset.to_string();
    format!(
        "*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n${}\r\n{o}\r\n",
        o.len()
    )
    .into_bytes()
}

/// Whether the request in `buf` (argument `ranges`) is `REPLCONF GETACK`.
pub fn is_getack(buf: &[u8], ranges: &[std::ops::Range<usize>]) -> bool {
    ranges.len() >= 2
        && buf[ranges[0].clone()].eq_ignore_ascii_case(b"replconf")
        && buf[ranges[1].clone()].eq_ignore_ascii_case(b"getack")
}

/// Ends the master connection's loading phase once the load coordinator
/// raised `link_up` (its instant passed); true while still loading.
pub fn still_loading(server: &ServerShared, m: &mut MasterLink) -> bool {
    if !m.loading {
        return false;
    }
    if !server.repl.link_up.load(Ordering::Relaxed) {
        return true;
    }
    m.loading = false;
    // The first ACK goes at the next tick: a diskless Redis master starts
    // the stream only when it comes.
    m.last_ack_ms = 0;
    m.aof_rewrite_due = server.config().appendonly;
    false
}

/// Publishes the master connection's offset (nothing of it in flight):
/// the bytes applied since the last time are proxied (they extend
/// `master_repl_offset`, the backlog, and this server's replicas' streams).
pub fn publish(server: &ServerShared, m: &mut MasterLink) {
    publish_applied(server, m, None);
}

/// [`publish`] up to what is applied while requests may be in flight
/// (`front`: the connection's oldest outstanding reply slot).
pub fn publish_applied(server: &ServerShared, m: &mut MasterLink, front: Option<u64>) {
    if still_loading(server, m) || m.proxy.is_empty() {
        return;
    }
    let upto = m.applied(front).max(m.published);
    let n = ((upto - m.published) as usize).min(m.proxy.len());
    if n == 0 {
        return;
    }
    if super::master::proxy(server, m.gen, &m.proxy[..n]) {
        m.published += n as u64;
        m.proxy.drain(..n);
    }
}

/// Whether the master connection belongs to an older REPLICAOF.
pub fn stale(server: &ServerShared, m: &MasterLink) -> bool {
    server.repl.lock().gen != m.gen
}

/// The master connection closed in database `db`: the offset it reached
/// is cached for the next PSYNC (and the database for the stream that
/// continues), and the link thread reconnects.
pub fn link_lost(server: &ServerShared, m: &MasterLink, db: usize) {
    let repl = &server.repl;
    let mut g = repl.lock();
    repl.master_conn.store(false, Ordering::Release);
    if g.gen == m.gen {
        repl.master_db.store(db as u64, Ordering::Release);
    }
    if g.gen != m.gen {
        return;
    }
    if !m.loading && !m.proxy.is_empty() {
        // What it consumed runs to its end (see the worker's close): the
        // next PSYNC continues after it, and so must the backlog.
        drop(g);
        super::master::proxy(server, m.gen, &m.proxy);
        g = repl.lock();
        if g.gen != m.gen {
            return;
        }
    }
    if let Role::Replica { link, .. } = &mut g.role {
        *link = LinkState::Connect;
    }
    g.link.down_since_ms = engine::now_ms();
    repl.link_up.store(false, Ordering::Relaxed);
    repl.wake.notify_all();
    drop(g);
    log::notice(format_args!("Connection with master lost."));
    log::notice(format_args!("* Caching the disconnected master state."));
}

/// Worker 0 could not take the link over (no descriptor left, epoll
/// refused it): the link thread starts again.
pub fn adopt_failed(server: &ServerShared, gen: u64) {
    log::warning(format_args!(
        "Could not serve the link to the MASTER: retrying the sync"
    ));
    if set_state(server, gen, LinkState::Connect) {
        let g = server.repl.lock();
        server.repl.link_up.store(false, Ordering::Relaxed);
        server.repl.wake.notify_all();
        drop(g);
    }
}

/// The load coordinator's last step, at the instant the new data is in
/// place: the master's IDs become ours (Redis's readSyncBulkPayload: the
/// new history starts here, `replid2` cleared) and the link is up.
pub fn loaded(server: &ServerShared, gen: u64, replid: &str, offset: u64) {
    let repl = &server.repl;
    let mut g = repl.lock();
    if g.gen != gen {
        return;
    }
    g.ids.replid = replid.to_owned();
    commands::repl::Repl::set_offset(&mut g, offset, repl);
    g.ids.replid2 = "0".repeat(40);
    g.ids.second_repl_offset = -1;
    g.link.sync_in_progress = false;
    // Redis's readSyncBulkPayload: a replica keeps a backlog of its
    // master's stream whether or not it has replicas, to continue them
    // after a promotion; the old one described other data.
    let size = server.config().repl_backlog_size as usize;
    g.master.backlog = Some(commands::repl::Backlog::new(size, offset + 1));
    // The link may have dropped while the data was being swapped in: the
    // IDs above describe the data either way, but the link is not up.
    if let Role::Replica {
        link: link @ LinkState::Sync,
        ..
    } = &mut g.role
    {
        *link = LinkState::Connected;
        repl.link_up.store(true, Ordering::Relaxed);
    }
    drop(g);
    // Replicas that attached during the load got the old data.
    super::master::disconnect_replicas(server);
    log::notice(format_args!(
        "MASTER <-> REPLICA sync: Finished with success"
    ));
}

/// Starts the link thread (it idles while the server is a master).
pub fn start(server: Arc<ServerShared>) -> Result<(), String> {
    std::thread::Builder::new()
        .name("repl-link".into())
        .spawn(move || run(&server))
        .map(|_| ())
        .map_err(|e| format!("spawn: {e}"))
}

/// Waits until the link must connect; returns the master and generation.
fn wait_for_work(server: &ServerShared) -> (String, u16, u64) {
    let repl = &server.repl;
    let mut g = repl.lock();
    loop {
        if let Role::Replica {
            host,
            port,
            link: LinkState::Connect,
        } = &g.role
        {
            return (host.clone(), *port, g.gen);
        }
        g = repl
            .wake
            .wait_timeout(g, Duration::from_secs(1))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Sets the link state if the generation is still `gen`; false if the
/// role moved on meanwhile.
fn set_state(server: &ServerShared, gen: u64, state: LinkState) -> bool {
    let mut g = server.repl.lock();
    if g.gen != gen {
        return false;
    }
    if let Role::Replica { link, .. } = &mut g.role {
        *link = state;
    }
    true
}

fn run(server: &ServerShared) {
    loop {
        let (host, port, gen) = wait_for_work(server);
        match sync(server, &host, port, gen) {
            Ok(h) => {
                server.repl.link_handoff.put(Box::new(h));
                if let Some(w) = server.wake_all.get() {
                    w();
                }
            }
            Err(why) => {
                server.repl.lock().link.sync_in_progress = false;
                if matches!(why, Failure::Retry) && set_state(server, gen, LinkState::Connect) {
                    std::thread::sleep(RETRY);
                }
            }
        }
    }
}

/// Why a sync attempt ended without a link.
enum Failure {
    /// The role changed meanwhile: start over with the new one.
    Stale,
    /// Logged; try again after [`RETRY`].
    Retry,
}

/// The handshake and, for a full sync, the payload.
fn sync(server: &ServerShared, host: &str, port: u16, gen: u64) -> Result<Handoff, Failure> {
    if !set_state(server, gen, LinkState::Connecting) {
        return Err(Failure::Stale);
    }
    log::notice(format_args!("Connecting to MASTER {host}:{port}"));
    let cfg = server.config();
    let timeout = Duration::from_secs(cfg.repl_timeout_s.max(1));
    let stream = connect(host, port, timeout).map_err(|e| {
        if timed_out(&e) {
            log::warning(format_args!("{HANDSHAKE_TIMEOUT}"));
        } else {
            log::warning(format_args!(
                "Error condition on socket for SYNC: {}",
                strerror(&e)
            ));
        }
        Failure::Retry
    })?;
    log::notice(format_args!("MASTER <-> REPLICA sync started"));
    if !set_state(server, gen, LinkState::Handshake) {
        return Err(Failure::Stale);
    }
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let _ = stream.set_nodelay(true);
    let transport = if cfg.tls_replication {
        // `tls-replication yes`: the handshake happens on the first
        // exchange (PING), as Redis's connTLSConnect before it.
        let ctx = crate::server::tls::client_config(&cfg).map_err(|e| {
            log::warning(format_args!(
                "Unable to configure TLS for the MASTER link: {e}"
            ));
            Failure::Retry
        })?;
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
            log::warning(format_args!("Bad MASTER host name for TLS: {e}"));
            Failure::Retry
        })?;
        let conn = rustls::ClientConnection::new(ctx, name).map_err(|e| {
            log::warning(format_args!("Unable to start TLS with MASTER: {e}"));
            Failure::Retry
        })?;
        Transport::Tls(Box::new(rustls::StreamOwned::new(conn, stream)))
    } else {
        Transport::Plain(stream)
    };
    let mut link = Link::new(transport);
    // PING: an error other than an authentication one ends the attempt.
    let reply = link.call(&[b"PING"])?;
    if reply.starts_with('-')
        && !reply.starts_with("-NOAUTH")
        && !reply.starts_with("-NOPERM")
        && !reply.starts_with("-ERR operation not permitted")
    {
        log::warning(format_args!("Error reply to PING from master: '{reply}'"));
        return Err(Failure::Retry);
    }
    log::notice(format_args!(
        "Master replied to PING, replication can continue..."
    ));
    if let Some(pass) = &cfg.masterauth {
        let reply = match &cfg.masteruser {
            Some(user) => link.call(&[b"AUTH", user, pass])?,
            None => link.call(&[b"AUTH", pass])?,
        };
        if reply.starts_with('-') {
            log::warning(format_args!("Unable to AUTH to MASTER: {reply}"));
            return Err(Failure::Retry);
        }
    }
    let port_s = cfg.port.to_string();
    let reply = link.call(&[b"REPLCONF", b"listening-port", port_s.as_bytes()])?;
    if reply.starts_with('-') {
        log::notice(format_args!(
            "(Non critical) Master does not understand REPLCONF listening-port: {reply}"
        ));
    }
    let reply = link.call(&[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])?;
    if reply.starts_with('-') {
        log::notice(format_args!(
            "(Non critical) Master does not understand REPLCONF capa: {reply}"
        ));
    }
    // PSYNC with what this replica has (its own history when it was a
    // master: Redis's replicationCacheMasterUsingMyself).
    let ids = server.repl.ids();
    let want = (ids.master_repl_offset + 1).to_string();
    log::notice(format_args!(
        "Trying a partial resynchronization (request {}:{}).",
        ids.replid, want
    ));
    // A master failing over to its replica asks it to take over (Redis's
    // PSYNC ... FAILOVER); any answer but a sync's aborts the failover.
    let takeover = failover::asks_takeover(server, gen);
    let reply = psync_reply(&mut link, &ids.replid, &want, takeover);
    if takeover {
        match &reply {
            Ok(r) if r.starts_with("+FULLRESYNC") || r.starts_with("+CONTINUE") => {
                failover::completed(server, gen)
            }
            Err(_) => {
                failover::rejected(server, gen, "Write error to failover target");
                return Err(Failure::Retry);
            }
            Ok(r) => {
                log::warning(format_args!("Failover target refused PSYNC: {r}"));
                failover::rejected(server, gen, "Failover target rejected psync request");
                // No fallback to SYNC: thread 0 promotes this server back.
                return Err(Failure::Retry);
            }
        }
    }
    let reply = reply?;
    if let Some(rest) = reply.strip_prefix("+FULLRESYNC") {
        let mut it = rest.split_whitespace();
        let (Some(replid), Some(Ok(offset))) = (it.next(), it.next().map(str::parse::<u64>)) else {
            log::warning(format_args!(
                "Master replied with wrong +FULLRESYNC syntax."
            ));
            return Err(Failure::Retry);
        };
        log::notice(format_args!("Full resync from master: {replid}:{offset}"));
        begin_transfer(server, gen, &mut link)?;
        // Redis's replicationAttachToNewMaster: our replicas must resync
        // with the new data.
        super::master::disconnect_replicas(server);
        let (fresh, db) = receive_payload(server, gen, &mut link)?;
        let (stream, tls, leftover) = link.into_parts();
        return Ok(Handoff {
            stream,
            tls,
            leftover,
            load: Some(fresh),
            replid: replid.to_owned(),
            offset,
            db,
            gen,
        });
    }
    if let Some(rest) = reply.strip_prefix("+CONTINUE") {
        log::notice(format_args!(
            "Successful partial resynchronization with master."
        ));
        let new_id = rest.trim();
        let offset = {
            let repl = &server.repl;
            let mut g = repl.lock();
            if g.gen != gen {
                return Err(Failure::Stale);
            }
            let changed = new_id.len() == 40 && new_id != g.ids.replid;
            if changed {
                // Redis: the master's ID changed (it was promoted); the old
                // one stays valid up to here for our own replicas.
                g.ids.replid2 = std::mem::replace(&mut g.ids.replid, new_id.to_owned());
                g.ids.second_repl_offset = g.ids.master_repl_offset as i64 + 1;
                log::notice(format_args!("Master replication ID changed to {new_id}"));
            }
            if g.master.backlog.is_none() {
                let next = g.ids.master_repl_offset + 1;
                let size = server.config().repl_backlog_size as usize;
                g.master.backlog = Some(commands::repl::Backlog::new(size, next));
            }
            if let Role::Replica { link, .. } = &mut g.role {
                *link = LinkState::Connected;
            }
            repl.link_up.store(true, Ordering::Relaxed);
            (g.ids.master_repl_offset, changed)
        };
        let (offset, changed) = offset;
        if changed {
            // Redis: our replicas reconnect to learn the new ID.
            super::master::disconnect_replicas(server);
        }
        log::notice(format_args!(
            "MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization."
        ));
        let (stream, tls, leftover) = link.into_parts();
        let replid = server.repl.ids().replid;
        return Ok(Handoff {
            stream,
            tls,
            leftover,
            load: None,
            replid,
            offset,
            // The master does not repeat its SELECT: the stream goes on in
            // the database the last link left it in (Redis keeps its
            // cached master client's).
            db: server.repl.master_db.load(Ordering::Acquire) as usize,
            gen,
        });
    }
    if reply.starts_with("-NOMASTERLINK") || reply.starts_with("-LOADING") {
        log::notice(format_args!(
            "Master is currently unable to PSYNC but should be in the future: {reply}"
        ));
        return Err(Failure::Retry);
    }
    // Redis's PSYNC_NOT_SUPPORTED: an old master (or one in an error
    // state) is asked with SYNC; the payload follows with no ID or offset.
    if reply.starts_with("-ERR") {
        log::notice(format_args!(
            "Master does not support PSYNC or is in error state (reply: {reply})"
        ));
    } else {
        log::warning(format_args!(
            "Unexpected reply to PSYNC from master: {reply}"
        ));
    }
    log::notice(format_args!("Retrying with SYNC..."));
    link.r.get_mut().write_all(b"SYNC\r\n").map_err(|e| {
        log::warning(format_args!(
            "I/O error writing to MASTER: {}",
            strerror(&e)
        ));
        Failure::Retry
    })?;
    super::master::disconnect_replicas(server);
    begin_transfer(server, gen, &mut link)?;
    let (fresh, db) = receive_payload(server, gen, &mut link)?;
    let (stream, tls, leftover) = link.into_parts();
    // No history to continue from: a new ID of our own, counted from 0
    // (the next PSYNC gets an error again and falls back here).
    Ok(Handoff {
        stream,
        tls,
        leftover,
        load: Some(fresh),
        replid: commands::repl::new_replid(),
        offset: 0,
        db,
        gen,
    })
}

/// The handshake is over and a full sync's payload comes next (Redis's
/// TRANSFER state: ROLE `sync`, and its timeout's message).
fn begin_transfer(server: &ServerShared, gen: u64, link: &mut Link) -> Result<(), Failure> {
    if !set_state(server, gen, LinkState::Sync) {
        return Err(Failure::Stale);
    }
    link.transfer = true;
    Ok(())
}

/// Sends PSYNC (with FAILOVER when `takeover`) and reads its answer,
/// past the newlines a master may send to keep the link alive first.
fn psync_reply(
    link: &mut Link,
    replid: &str,
    want: &str,
    takeover: bool,
) -> Result<String, Failure> {
    let (id, off) = (replid.as_bytes(), want.as_bytes());
    if takeover {
        link.send(&[b"PSYNC", id, off, b"FAILOVER"])?;
    } else {
        link.send(&[b"PSYNC", id, off])?;
    }
    loop {
        let l = link.line()?;
        if !l.is_empty() {
            return Ok(l);
        }
    }
}

/// An I/O error as C's `strerror` words it (Redis's logs), without Rust's
/// " (os error N)" suffix.
fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

fn connect(host: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address");
    for a in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The link's byte stream: the socket, or a TLS session over it
/// (`tls-replication`).
enum Transport {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Transport {
    fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.sock,
        }
    }
}

impl Read for Transport {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(b),
            Transport::Tls(t) => t.read(b),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(b),
            Transport::Tls(t) => t.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(t) => t.flush(),
        }
    }
}

/// The handshake's link: a buffered reader over the transport (writes go
/// to the transport directly).
struct Link {
    r: BufReader<Transport>,
    /// `+FULLRESYNC` received: a read timeout is the transfer's, not the
    /// handshake's (Redis's two messages).
    transfer: bool,
}

/// Redis's replicationCron, for a master silent for `repl-timeout` while
/// connecting or in the handshake (a master sends a newline a second
/// while its sync has not begun, so only a master that stopped answering
/// meets it).
const HANDSHAKE_TIMEOUT: &str = "Timeout connecting to the MASTER...";
/// The same, while the RDB is transferred.
const TRANSFER_TIMEOUT: &str = "Timeout receiving bulk data from MASTER... If the problem persists try to set the 'repl-timeout' parameter in redis.conf to a larger value.";

/// A read or connect that ran out of `repl-timeout`.
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

impl Link {
    fn new(t: Transport) -> Link {
        Link {
            r: BufReader::with_capacity(CHUNK, t),
            transfer: false,
        }
    }

    fn tcp(&self) -> &TcpStream {
        self.r.get_ref().tcp()
    }

    /// The socket, the TLS session if any, and the stream bytes already
    /// read past the handshake (buffered here, or decrypted by the
    /// session and not read yet).
    fn into_parts(self) -> (TcpStream, Option<rustls::ClientConnection>, Vec<u8>) {
        let mut leftover = self.r.buffer().to_vec();
        match self.r.into_inner() {
            Transport::Plain(s) => (s, None, leftover),
            Transport::Tls(t) => {
                let rustls::StreamOwned { mut conn, sock } = *t;
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.reader().read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    leftover.extend_from_slice(&buf[..n]);
                }
                (sock, Some(conn), leftover)
            }
        }
    }

    fn send(&mut self, argv: &[&[u8]]) -> Result<(), Failure> {
        let mut b = format!("*{}\r\n", argv.len()).into_bytes();
        for a in argv {
            b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            b.extend_from_slice(a);
            b.extend_from_slice(b"\r\n");
        }
        self.r.get_mut().write_all(&b).map_err(|e| {
            log::warning(format_args!(
                "Error condition on socket for SYNC: {}",
                strerror(&e)
            ));
            Failure::Retry
        })
    }

    /// One reply line without its CRLF.
    fn line(&mut self) -> Result<String, Failure> {
        let mut buf = Vec::new();
        let r = (&mut self.r)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf);
        match r {
            Ok(0) => {
                log::warning(format_args!(
                    "Error condition on socket for SYNC: Connection closed by the master"
                ));
                Err(Failure::Retry)
            }
            Ok(_) if buf.last() == Some(&b'\n') => {
                buf.pop();
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
                Ok(String::from_utf8_lossy(&buf).into_owned())
            }
            Ok(_) => {
                log::warning(format_args!(
                    "Error condition on socket for SYNC: reply line too long"
                ));
                Err(Failure::Retry)
            }
            Err(e) if timed_out(&e) => {
                let why = if self.transfer {
                    TRANSFER_TIMEOUT
                } else {
                    HANDSHAKE_TIMEOUT
                };
                log::warning(format_args!("{why}"));
                Err(Failure::Retry)
            }
            Err(e) => {
                log::warning(format_args!(
                    "Error condition on socket for SYNC: {}",
                    strerror(&e)
                ));
                Err(Failure::Retry)
            }
        }
    }

    fn call(&mut self, argv: &[&[u8]]) -> Result<String, Failure> {
        self.send(argv)?;
        self.line()
    }
}

/// Receives the payload to a temporary file and parses it. The file is
/// removed either way.
fn receive_payload(
    server: &ServerShared,
    gen: u64,
    link: &mut Link,
) -> Result<(Vec<engine::Shard>, usize), Failure> {
    let header = loop {
        let l = link.line()?;
        if !l.is_empty() {
            break l;
        }
    };
    if header.starts_with('-') {
        log::warning(format_args!(
            "MASTER aborted replication with an error: {header}"
        ));
        return Err(Failure::Retry);
    }
    let Some(spec) = header.strip_prefix('$') else {
        log::warning(format_args!(
            "Bad protocol from MASTER, the first byte is not '$' (we received '{header}'), are you sure the host and port are right?"
        ));
        return Err(Failure::Retry);
    };
    let (eof_mark, size) = match spec.strip_prefix("EOF:") {
        Some(mark) if mark.len() == 40 => {
            log::notice(format_args!(
                "MASTER <-> REPLICA sync: receiving streamed RDB from master with EOF to disk"
            ));
            (Some(mark.as_bytes().to_vec()), None)
        }
        Some(_) => {
            log::warning(format_args!("Bad EOF mark from MASTER: '{header}'"));
            return Err(Failure::Retry);
        }
        None => match spec.parse::<u64>() {
            Ok(n) => {
                log::notice(format_args!(
                    "MASTER <-> REPLICA sync: receiving {n} bytes from master to disk"
                ));
                (None, Some(n))
            }
            Err(_) => {
                log::warning(format_args!("Bad payload length from MASTER: '{header}'"));
                return Err(Failure::Retry);
            }
        },
    };
    {
        let mut g = server.repl.lock();
        g.link.sync_in_progress = true;
        g.link.sync_total_bytes = size.map_or(-1, |n| n as i64);
        g.link.sync_read_bytes = 0;
        g.link.sync_last_io_ms = engine::now_ms();
    }
    let cfg = server.config();
    let dir = cfg
        .rdb_path()
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let tmp = dir.join(format!(
        "temp-{}.{}.rdb",
        engine::now_ms() / 1000,
        std::process::id()
    ));
    let r = download(server, gen, link, &tmp, eof_mark.as_deref(), size);
    let parsed = r.and_then(|()| {
        if server.repl.lock().gen != gen {
            return Err(Failure::Stale);
        }
        log::notice(format_args!(
            "MASTER <-> REPLICA sync: Loading DB in memory"
        ));
        commands::replica::parse_payload(server, &tmp).map_err(|e| {
            log::warning(format_args!("{e}"));
            log::warning(format_args!(
                "Failed trying to load the MASTER synchronization DB from disk, check server logs."
            ));
            Failure::Retry
        })
    });
    let _ = std::fs::remove_file(&tmp);
    let (shards, db) = parsed?;
    log::notice(format_args!("MASTER <-> REPLICA sync: Flushing old data"));
    Ok((shards, db))
}

/// Copies the payload from the link to `tmp`: `size` bytes, or up to the
/// 40-byte `eof_mark` (which is not written).
fn download(
    server: &ServerShared,
    gen: u64,
    link: &mut Link,
    tmp: &std::path::Path,
    eof_mark: Option<&[u8]>,
    size: Option<u64>,
) -> Result<(), Failure> {
    let io_err = |e: std::io::Error| {
        log::warning(format_args!(
            "I/O error trying to sync with MASTER: {}",
            strerror(&e)
        ));
        Failure::Retry
    };
    let mut f = std::io::BufWriter::with_capacity(
        CHUNK,
        std::fs::File::create(tmp).map_err(|e| {
            log::warning(format_args!(
                "Opening the temp file needed for MASTER <-> REPLICA synchronization: {}",
                strerror(&e)
            ));
            Failure::Retry
        })?,
    );
    let mut read = 0u64;
    let timeout = link.tcp().read_timeout().ok().flatten().unwrap_or(RETRY);
    let _ = link.tcp().set_read_timeout(Some(RETRY));
    let mut last_io = std::time::Instant::now();
    // EOF form: the last 40 bytes seen are held back until more come.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let want = match size {
            Some(n) if read >= n => break,
            Some(n) => (n - read).min(CHUNK as u64) as usize,
            None => CHUNK,
        };
        // Reads wake every second: a REPLICAOF meanwhile ends the
        // transfer at once, and `repl-timeout` is counted here.
        if server.repl.gen.load(Ordering::Acquire) != gen {
            return Err(Failure::Stale);
        }
        let buf = match link.r.fill_buf() {
            Ok(b) => b,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                if last_io.elapsed() > timeout {
                    log::warning(format_args!("{TRANSFER_TIMEOUT}"));
                    return Err(Failure::Retry);
                }
                continue;
            }
            Err(e) => return Err(io_err(e)),
        };
        last_io = std::time::Instant::now();
        if buf.is_empty() {
            log::warning(format_args!(
                "I/O error trying to sync with MASTER: connection lost"
            ));
            return Err(Failure::Retry);
        }
        let take = buf.len().min(want);
        match eof_mark {
            None => {
                f.write_all(&buf[..take]).map_err(io_err)?;
                link.r.consume(take);
            }
            Some(mark) => {
                // The mark may straddle reads: search the held-back tail
                // and this read together, and consume no byte past it
                // (the stream follows).
                let held = tail.len();
                tail.extend_from_slice(&buf[..take]);
                if let Some(p) = tail.windows(mark.len()).position(|w| w == mark) {
                    f.write_all(&tail[..p]).map_err(io_err)?;
                    link.r.consume(p + mark.len() - held);
                    break;
                }
                link.r.consume(take);
                let keep = tail.len().saturating_sub(mark.len() - 1);
                f.write_all(&tail[..keep]).map_err(io_err)?;
                tail.drain(..keep);
            }
        }
        read += take as u64;
        {
            let mut g = server.repl.lock();
            g.link.sync_read_bytes = read;
            g.link.sync_last_io_ms = engine::now_ms();
        }
        server
            .repl
            .last_io_ms
            .store(engine::now_ms(), Ordering::Relaxed);
    }
    f.flush().map_err(io_err)?;
    f.get_ref().sync_all().map_err(io_err)?;
    Ok(())
}

#[cfg(test)]
mod applied_tests {
    use super::*;

    fn link(offset: u64) -> MasterLink {
        MasterLink {
            gen: 0,
            offset,
            published: offset,
            proxy: Vec::new(),
            in_flight: VecDeque::new(),
            last_ack_ms: 0,
            loading: false,
            aof_rewrite_due: false,
        }
    }

    /// Requests at 100 (inline), 110 (slot 5), 120 (inline), 130 (slots 6
    /// and 7), 150 (slot 8); consumed up to 160.
    #[test]
    fn the_applied_prefix_stops_at_the_oldest_request_in_flight() {
        let mut m = link(160);
        m.opened(5, 110);
        m.opened(6, 130);
        m.opened(8, 150);
        assert_eq!(m.applied(Some(5)), 110, "the first slotted request runs");
        assert_eq!(m.applied(Some(6)), 130, "it is done; the next runs");
        assert_eq!(m.applied(Some(7)), 130, "its second slot is open");
        assert_eq!(m.applied(Some(8)), 150);
        assert_eq!(m.applied(None), 160, "nothing outstanding");
        assert!(m.in_flight.is_empty());
        // A slot no request opened (an ACK queued behind the others) at
        // the front: everything before the first listed request.
        m.opened(10, 170);
        assert_eq!(m.applied(Some(9)), 170);
        // None listed: every slot is such a one.
        let mut m = link(40);
        assert_eq!(m.applied(Some(3)), 40);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The link's hand-over is the server's (its `repl`), not the
    /// process's: of two servers in one process (tests build several),
    /// one's worker 0 never takes the connection the other's link made.
    #[test]
    fn a_link_is_handed_to_its_own_server_only() {
        let (a, b) = (
            ServerShared::new(config::Config::default(), 1),
            ServerShared::new(config::Config::default(), 1),
        );
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        a.repl.link_handoff.put(Box::new(Handoff {
            stream,
            tls: None,
            leftover: b"+PING".to_vec(),
            load: None,
            replid: "a".repeat(40),
            offset: 7,
            db: 0,
            gen: 1,
        }));
        assert!(take_handoff(&b).is_none(), "B took A's link");
        let h = take_handoff(&a).expect("A's link");
        assert_eq!((h.offset, &h.leftover[..]), (7, &b"+PING"[..]));
        assert!(take_handoff(&a).is_none(), "taken once");
    }

    /// The EOF-marked form: the mark split across reads is found, nothing
    /// past it is consumed (the stream that follows stays buffered).
    #[test]
    fn an_eof_mark_split_across_reads_ends_the_payload_exactly() {
        let server = ServerShared::new(config::Config::default(), 1);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mark = b"0123456789abcdef0123456789abcdef01234567".to_vec();
        let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (b2, m2) = (body.clone(), mark.clone());
        let t = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&b2).unwrap();
            s.write_all(&m2[..17]).unwrap();
            s.flush().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(&m2[17..]).unwrap();
            s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(50));
        });
        let (sock, _) = l.accept().unwrap();
        let mut link = Link::new(Transport::Plain(sock));
        let dir = std::env::temp_dir().join(format!("tessera-eof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tmp = dir.join("payload.rdb");
        assert!(download(&server, 0, &mut link, &tmp, Some(&mark), None).is_ok());
        assert_eq!(std::fs::read(&tmp).unwrap(), body);
        t.join().unwrap();
        let mut rest = link.r.buffer().to_vec();
        if rest.is_empty() {
            link.r.read_to_end(&mut rest).unwrap();
        }
        assert!(rest.starts_with(b"*1\r\n$4\r\nPING\r\n"), "{rest:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn errors_read_as_strerror() {
        let e = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(strerror(&e), "Connection refused");
    }

    #[test]
    fn acks_are_command_arrays() {
        assert_eq!(
            ack_bytes(123),
            b"*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$3\r\n123\r\n".to_vec()
        );
    }

    #[test]
    fn getack_is_recognised_in_any_case() {
        let buf = b"replconfGETACK*";
        assert!(is_getack(buf, &[0..8, 8..14, 14..15]));
        assert!(!is_getack(buf, &[std::ops::Range { start: 0, end: 8 }]));
        assert!(!is_getack(b"REPLCONFACK", &[0..8, 8..11]));
    }
}
