//! One attached replica: its socket, taken off the worker's event loop
//! after PSYNC / SYNC, served by two threads of its own.
//!
//! Why threads and blocking I/O, not the workers' event loops: there are
//! few replicas (a handful, against thousands of clients), a replica's
//! output is one long stream, and the full sync's RDB transfer is a long
//! sequence of large writes; a thread per direction keeps the workers'
//! loops free of the sync's phases and of slow-replica back-pressure, and
//! costs two parked threads per replica.
//!
//! * The writer thread ([`Link::serve`]) sends, in order: the sync's
//!   first line (`+FULLRESYNC replid offset`, `+CONTINUE replid`, nothing
//!   for SYNC), the snapshot (`$<len>` and the file for a disk sync;
//!   `$EOF:<mark>`, the bytes and the mark for a diskless one), then the
//!   stream from its queue. After a diskless transfer the stream waits for
//!   the replica's first ACK, as Redis's `repl_start_cmd_stream_on_ack`:
//!   a replica finds the end of an EOF-marked transfer in the last bytes
//!   of a read, and stream bytes in the same read would hide it.
//! * The reader thread ([`Link::read_acks`]) reads what the replica
//!   sends: `REPLCONF ACK <offset>` (recorded: WAIT, INFO's lag,
//!   min-replicas), anything else is ignored; bytes that are not RESP end
//!   the link (the replica reconnects), as Redis's protocol errors do.
//!
//! A replica on the TLS port: both threads share the session (one
//! mutex); the socket stays non-blocking and each thread waits for it with
//! `poll` outside the lock, so a writer stalled by a slow replica never
//! holds the session while the reader waits for an ACK, or the reverse.
//!
//! Bounds: the stream queue is held to the `replica` class of
//! `client-output-buffer-limit` (hard limit, or soft limit for its
//! seconds): a replica that falls that far behind is disconnected and
//! will resync. Until a full sync's replica takes the stream (it is
//! receiving or loading the snapshot), the queue is on disk
//! ([`super::spill`]), still counted against that limit. The diskless RDB queue holds at most [`RDB_QUEUE_MAX`]
//! bytes: the snapshot's writer waits for the slowest replica (and the
//! shards for the writer).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use commands::repl::{ReplicaState, SyncRequest};
use commands::ServerShared;

use super::spill::Spill;
use crate::log;
use crate::server::tls::TlsStream;

/// Bytes of a diskless RDB queued for one replica before the snapshot's
/// writer waits.
pub const RDB_QUEUE_MAX: usize = 8 << 20;
/// Bytes per write of a disk sync's file.
const FILE_CHUNK: usize = 256 << 10;
/// Stream chunks per `writev` (Linux's UIO_MAXIOV is 1024).
const IOV_MAX: usize = 512;

/// Where the sync's snapshot comes from.
pub enum Bulk {
    /// Nothing yet (the snapshot has not ended / begun).
    Pending,
    /// Disk sync: the file, opened when the save ended.
    File(File),
    /// The save failed: the link ends (the replica retries).
    Failed,
}

/// What the writer thread waits for; guarded by [`Link::out`].
pub struct Out {
    /// The stream offset the replica's stream starts after (set by the
    /// stream's mark at the snapshot's instant, or at a partial resync).
    pub start: Option<u64>,
    /// The replication ID to announce with `+FULLRESYNC`.
    pub replid: String,
    pub bulk: Bulk,
    /// Diskless: the RDB's bytes not sent yet, and whether the last came.
    pub rdb: VecDeque<Vec<u8>>,
    pub rdb_bytes: usize,
    pub rdb_end: Option<bool>,
    /// Stream bytes not sent yet.
    pub stream: VecDeque<Arc<Vec<u8>>>,
    pub stream_bytes: usize,
    /// Since when the stream queue is over the soft limit.
    pub soft_since: Option<Instant>,
    /// Stream bytes taken off the queue and not written yet.
    pub sending: bool,
    pub closed: bool,
    /// The replica takes the stream (partial resync, or its full sync's
    /// snapshot is loaded). Before, and after until the file is drained,
    /// stream bytes go to `spill` while `stream` is empty (every byte in
    /// the file comes before every byte in the queue); then the queue is
    /// in memory.
    pub live: bool,
    pub spill: Option<Spill>,
    /// The file could not be made: the queue stays in memory.
    pub spill_failed: bool,
}

impl Out {
    /// Stream bytes not sent yet, on disk or queued.
    pub fn stream_pending(&self) -> bool {
        !self.stream.is_empty() || self.spill.as_ref().is_some_and(|s| s.pending() > 0)
    }
}

/// A replica's connection: a blocking socket (the writer thread writes
/// it, the reader reads a dup), or a TLS session over a non-blocking one.
pub enum Sock {
    Plain(File),
    Tls {
        session: Mutex<Box<TlsStream>>,
        fd: i32,
    },
}

/// One attached replica.
pub struct Link {
    pub id: u64,
    pub addr: String,
    sock: Sock,
    pub request: SyncRequest,
    pub capa_eof: bool,
    pub capa_psync2: bool,
    /// Its full sync is diskless (decided when the snapshot starts).
    pub diskless: AtomicBool,
    pub out: Mutex<Out>,
    pub cv: Condvar,
    /// ACKs received since the snapshot was sent, and the last offset.
    pub acks: AtomicU64,
    pub ack_offset: AtomicU64,
    /// For INFO's `total_net_repl_output_bytes`.
    server: Arc<ServerShared>,
}

impl Link {
    pub fn new(
        server: Arc<ServerShared>,
        id: u64,
        addr: String,
        sock: Sock,
        request: SyncRequest,
        capa: (bool, bool),
    ) -> Link {
        let (eof, psync2) = capa;
        Link {
            server,
            id,
            addr,
            sock,
            request,
            capa_eof: eof,
            capa_psync2: psync2,
            diskless: AtomicBool::new(false),
            out: Mutex::new(Out {
                start: None,
                replid: String::new(),
                bulk: Bulk::Pending,
                rdb: VecDeque::new(),
                rdb_bytes: 0,
                rdb_end: None,
                stream: VecDeque::new(),
                stream_bytes: 0,
                soft_since: None,
                sending: false,
                closed: false,
                live: false,
                spill: None,
                spill_failed: false,
            }),
            cv: Condvar::new(),
            acks: AtomicU64::new(0),
            ack_offset: AtomicU64::new(0),
        }
    }

    pub fn fd(&self) -> i32 {
        match &self.sock {
            Sock::Plain(f) => f.as_raw_fd(),
            Sock::Tls { fd, .. } => *fd,
        }
    }

    /// Waits (at most 200 ms) until the socket is ready for `events`.
    fn wait_ready(&self, events: libc::c_short) {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the fd lives as long as `self`.
        unsafe {
            libc::poll(&mut p, 1, 200);
        }
    }

    /// Writes all of `b` through the TLS session, waiting for the socket
    /// outside the lock (TlsStream's contract: a `WouldBlock` write is
    /// retried with the same bytes).
    fn tls_write_all(&self, session: &Mutex<Box<TlsStream>>, b: &[u8]) -> std::io::Result<()> {
        let mut off = 0;
        while off < b.len() {
            let r = session
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .write(&b[off..]);
            match r {
                Ok(n) => off += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if self.lock().closed {
                        return Err(std::io::ErrorKind::BrokenPipe.into());
                    }
                    self.wait_ready(libc::POLLOUT);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Out> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the link: both threads see it (the socket is shut down, so a
    /// blocked read or write returns).
    pub fn close(&self, why: &str) {
        let mut o = self.lock();
        // The file goes now (its disk space with it).
        o.spill = None;
        if !o.closed {
            o.closed = true;
            if !why.is_empty() {
                log::warning(format_args!(
                    "Connection with replica {} lost: {why}",
                    self.addr
                ));
            }
        }
        drop(o);
        // SAFETY: the fd is owned by `sock`, alive as long as `self`.
        unsafe {
            libc::shutdown(self.fd(), libc::SHUT_RDWR);
        }
        self.cv.notify_all();
    }

    /// Queues stream bytes; disconnects the replica past its output
    /// limits. Called by the stream writer, under the master's lock.
    pub fn push_stream(&self, b: &Arc<Vec<u8>>, limit: &config::ObufLimit) {
        let mut o = self.lock();
        if o.closed {
            return;
        }
        // Before the replica takes the stream, and after while the file
        // is not drained (what is on disk goes first, so new bytes follow
        // it there rather than pile up in memory behind it).
        if !o.spill_failed && o.stream.is_empty() && (!o.live || o.spill.is_some()) {
            self.spill_push(&mut o, b);
        } else {
            o.stream.push_back(b.clone());
        }
        o.stream_bytes += b.len();
        let bytes = o.stream_bytes as u64;
        let over = if limit.hard > 0 && bytes >= limit.hard {
            true
        } else if limit.soft > 0 && bytes >= limit.soft {
            let since = *o.soft_since.get_or_insert_with(Instant::now);
            since.elapsed() >= Duration::from_secs(limit.soft_seconds.max(0) as u64)
        } else {
            o.soft_since = None;
            false
        };
        drop(o);
        if over {
            log::warning(format_args!(
                "Client id={} addr={} flags=S scheduled to be closed ASAP for overcoming of output buffer limits.",
                self.id, self.addr
            ));
            self.close("");
        } else {
            self.cv.notify_all();
        }
    }

    /// Writes `b` to the replica's file (made on first use); on failure
    /// the queue in memory takes it and every byte after it.
    fn spill_push(&self, o: &mut Out, b: &Arc<Vec<u8>>) {
        if o.spill.is_none() {
            let dir = self.server.config().rdb_path();
            let dir = dir.parent().unwrap_or(std::path::Path::new("."));
            match Spill::create(dir, self.id) {
                Ok(s) => o.spill = Some(s),
                Err(e) => {
                    log::warning(format_args!(
                        "Can't create a file for the pending stream of replica {} in {}: {e}; it is kept in memory",
                        self.addr,
                        dir.display()
                    ));
                    o.spill_failed = true;
                    o.stream.push_back(b.clone());
                    return;
                }
            }
        }
        if let Some(Err(e)) = o.spill.as_mut().map(|s| s.append(b)) {
            log::warning(format_args!(
                "Can't write the pending stream of replica {} to its file: {e}; the rest is kept in memory",
                self.addr
            ));
            o.spill_failed = true;
            o.stream.push_back(b.clone());
        }
    }

    /// Queues a diskless RDB's bytes, waiting while the queue is full.
    /// False when the link is closed.
    pub fn push_rdb(&self, b: &[u8]) -> bool {
        let mut o = self.lock();
        while !o.closed && o.rdb_bytes >= RDB_QUEUE_MAX {
            o = self
                .cv
                .wait_timeout(o, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        if o.closed {
            return false;
        }
        o.rdb.push_back(b.to_vec());
        o.rdb_bytes += b.len();
        drop(o);
        self.cv.notify_all();
        true
    }

    /// Waits until `ready` holds on the queue state (or the link closed);
    /// returns the guard, or None when closed.
    fn wait_for(
        &self,
        mut ready: impl FnMut(&mut Out) -> bool,
    ) -> Option<std::sync::MutexGuard<'_, Out>> {
        let mut o = self.lock();
        loop {
            if o.closed {
                return None;
            }
            if ready(&mut o) {
                return Some(o);
            }
            o = self
                .cv
                .wait_timeout(o, Duration::from_millis(200))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    fn send(&self, b: &[u8]) -> bool {
        let r = match &self.sock {
            Sock::Plain(f) => (&*f).write_all(b),
            Sock::Tls { session, .. } => self.tls_write_all(session, b),
        };
        match r {
            Ok(()) => {
                self.server
                    .repl
                    .net_output_bytes
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                true
            }
            Err(e) => {
                self.close(&e.to_string());
                false
            }
        }
    }

    /// Sends the stream's queued chunks in order: on a plain socket with
    /// one `writev` for up to [`IOV_MAX`] of them (a replica that fell a
    /// little behind finds many small batches queued: one system call
    /// instead of one per batch); through TLS one by one.
    fn send_all(&self, chunks: &[Arc<Vec<u8>>]) -> bool {
        let Sock::Plain(f) = &self.sock else {
            return chunks.iter().all(|b| self.send(b));
        };
        for group in chunks.chunks(IOV_MAX) {
            let mut slices: Vec<IoSlice<'_>> = group.iter().map(|b| IoSlice::new(b)).collect();
            let total: usize = group.iter().map(|b| b.len()).sum();
            let mut left = &mut slices[..];
            while !left.is_empty() {
                match (&*f).write_vectored(left) {
                    Ok(0) => {
                        self.close("connection closed while writing");
                        return false;
                    }
                    Ok(n) => IoSlice::advance_slices(&mut left, n),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.close(&e.to_string());
                        return false;
                    }
                }
            }
            self.server
                .repl
                .net_output_bytes
                .fetch_add(total as u64, Ordering::Relaxed);
        }
        true
    }

    /// The writer thread: the sync's first line, the snapshot, then the
    /// stream until the link closes. `set_state` updates what INFO shows.
    pub fn serve(&self, partial: bool, set_state: &dyn Fn(ReplicaState)) {
        // A full sync's snapshot may begin seconds later
        // (`repl-diskless-sync-delay`, a snapshot in progress): the
        // replica waits for `+FULLRESYNC` meanwhile, its handshake timed
        // by `repl-timeout`.
        let Some(o) = self.wait_with_newlines(|o| o.start.is_some()) else {
            return;
        };
        let (start, replid) = (o.start.unwrap_or(0), o.replid.clone());
        drop(o);
        if partial {
            let line = if self.capa_psync2 {
                format!("+CONTINUE {replid}\r\n")
            } else {
                "+CONTINUE\r\n".to_string()
            };
            if !self.send(line.as_bytes()) {
                return;
            }
        } else {
            if let SyncRequest::Psync { .. } = self.request {
                if !self.send(format!("+FULLRESYNC {replid} {start}\r\n").as_bytes()) {
                    return;
                }
            }
            let ok = if self.diskless.load(Ordering::Acquire) {
                self.send_diskless()
            } else {
                set_state(ReplicaState::WaitBgsave);
                self.send_file(set_state)
            };
            if !ok {
                return;
            }
            log::notice(format_args!(
                "Synchronization with replica {} succeeded",
                self.addr
            ));
            if self.diskless.load(Ordering::Acquire) {
                // See the module docs: the stream starts after the
                // replica's first ACK.
                if self
                    .wait_for(|_| self.acks.load(Ordering::Acquire) > 0)
                    .is_none()
                {
                    return;
                }
            }
        }
        set_state(ReplicaState::Online);
        // From here on the queue is in memory; what waited on disk goes
        // first.
        self.lock().live = true;
        let mut batch: Vec<Arc<Vec<u8>>> = Vec::new();
        loop {
            {
                let Some(mut o) = self.wait_for(|o| {
                    // Drained: the file goes (its space with it), the
                    // queue is in memory from now on.
                    if o.spill.as_ref().is_some_and(|s| s.pending() == 0) {
                        o.spill = None;
                    }
                    o.stream_pending()
                }) else {
                    return;
                };
                if let Some(sp) = o.spill.as_mut().filter(|s| s.pending() > 0) {
                    let chunk = match sp.next_chunk() {
                        Ok(c) => c,
                        Err(e) => {
                            drop(o);
                            self.close(&format!("can't read its pending stream back: {e}"));
                            return;
                        }
                    };
                    o.stream_bytes = o.stream_bytes.saturating_sub(chunk.len());
                    o.sending = true;
                    drop(o);
                    if !self.send(&chunk) {
                        return;
                    }
                    self.lock().sending = false;
                    continue;
                }
                batch.extend(o.stream.drain(..));
                o.stream_bytes = 0;
                o.soft_since = None;
                o.sending = true;
            }
            if !self.send_all(&batch) {
                return;
            }
            batch.clear();
            self.lock().sending = false;
        }
    }

    /// [`Link::wait_for`], sending a newline a second meanwhile: it keeps
    /// the replica's `repl-timeout` from firing while its sync has not
    /// begun or its snapshot is written (Redis's replicationCron does the
    /// same for replicas "in pre-synchronization stage"; replicas skip
    /// newlines before the PSYNC reply and before the bulk).
    fn wait_with_newlines(
        &self,
        mut ready: impl FnMut(&mut Out) -> bool,
    ) -> Option<std::sync::MutexGuard<'_, Out>> {
        loop {
            let (since, mut now_ready) = (std::time::Instant::now(), false);
            let o = self.wait_for(|o| {
                now_ready = ready(o);
                now_ready || since.elapsed() >= Duration::from_secs(1)
            })?;
            if now_ready {
                return Some(o);
            }
            drop(o);
            if !self.send(b"\n") {
                return None;
            }
        }
    }

    fn send_file(&self, set_state: &dyn Fn(ReplicaState)) -> bool {
        let Some(mut o) = self.wait_with_newlines(|o| !matches!(o.bulk, Bulk::Pending)) else {
            return false;
        };
        let mut file = match std::mem::replace(&mut o.bulk, Bulk::Failed) {
            Bulk::File(f) => f,
            _ => {
                drop(o);
                self.close("the snapshot for its sync failed");
                return false;
            }
        };
        drop(o);
        set_state(ReplicaState::SendBulk);
        let len = file.metadata().map_or(0, |m| m.len());
        if !self.send(format!("${len}\r\n").as_bytes()) {
            return false;
        }
        let mut buf = vec![0u8; FILE_CHUNK];
        let mut left = len;
        while left > 0 {
            let n = match file.read(&mut buf) {
                Ok(0) | Err(_) => {
                    self.close("can't read the RDB file for its sync");
                    return false;
                }
                Ok(n) => n.min(left as usize),
            };
            if !self.send(&buf[..n]) {
                return false;
            }
            left -= n as u64;
        }
        true
    }

    fn send_diskless(&self) -> bool {
        let mark = commands::repl::new_replid();
        if !self.send(format!("$EOF:{mark}\r\n").as_bytes()) {
            return false;
        }
        loop {
            let Some(mut o) = self.wait_for(|o| !o.rdb.is_empty() || o.rdb_end.is_some()) else {
                return false;
            };
            if o.rdb.is_empty() {
                let ok = o.rdb_end == Some(true);
                drop(o);
                if !ok {
                    self.close("the snapshot for its sync failed");
                    return false;
                }
                return self.send(mark.as_bytes());
            }
            let parts: Vec<Vec<u8>> = o.rdb.drain(..).collect();
            o.rdb_bytes = 0;
            drop(o);
            self.cv.notify_all();
            for p in parts {
                if !self.send(&p) {
                    return false;
                }
            }
        }
    }

    /// The reader thread: records `REPLCONF ACK`s until the link ends.
    /// `on_ack` gets each acknowledged offset.
    pub fn read_acks(&self, on_ack: &dyn Fn(u64)) {
        let mut plain = match &self.sock {
            Sock::Plain(f) => match f.try_clone() {
                Ok(s) => Some(s),
                Err(e) => return self.close(&e.to_string()),
            },
            Sock::Tls { .. } => None,
        };
        let mut buf: Vec<u8> = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        loop {
            let r = match (&mut plain, &self.sock) {
                (Some(f), _) => f.read(&mut chunk),
                (None, Sock::Tls { session, .. }) => {
                    if self.lock().closed {
                        return;
                    }
                    self.wait_ready(libc::POLLIN);
                    let r = session
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .read(&mut chunk);
                    match r {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        // TlsStream: a short read is not an end; 0 with
                        // the peer gone is.
                        Ok(0) => Ok(0),
                        r => r,
                    }
                }
                (None, Sock::Plain(_)) => return,
            };
            let n = match r {
                Ok(0) => return self.close("connection closed"),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return self.close(&e.to_string()),
            };
            buf.extend_from_slice(&chunk[..n]);
            loop {
                match parse(&buf) {
                    Parse::Cmd(args, used) => {
                        if args.len() >= 3
                            && args[0].eq_ignore_ascii_case(b"replconf")
                            && args[1].eq_ignore_ascii_case(b"ack")
                        {
                            if let Some(off) = std::str::from_utf8(&args[2])
                                .ok()
                                .and_then(|s| s.parse().ok())
                            {
                                self.ack_offset.store(off, Ordering::Release);
                                self.acks.fetch_add(1, Ordering::AcqRel);
                                on_ack(off);
                                self.cv.notify_all();
                            }
                        }
                        buf.drain(..used);
                    }
                    Parse::Short if buf.len() <= QUERY_MAX => break,
                    Parse::Short | Parse::Bad => {
                        return self.close("protocol error from replica");
                    }
                }
            }
        }
    }
}

/// The longest request a replica may send (Redis's inline limit).
const QUERY_MAX: usize = 64 << 10;

enum Parse {
    Cmd(Vec<Vec<u8>>, usize),
    Short,
    Bad,
}

/// One request: a RESP array of bulk strings, or an inline line (a
/// replica's newline keep-alives while it loads are empty inline lines).
fn parse(b: &[u8]) -> Parse {
    fn line(b: &[u8], from: usize) -> Option<(&[u8], usize)> {
        let rel = b.get(from..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&b[from..from + rel], from + rel + 2))
    }
    fn num(l: &[u8]) -> Option<usize> {
        std::str::from_utf8(l).ok()?.parse().ok()
    }
    let Some(&first) = b.first() else {
        return Parse::Short;
    };
    if first != b'*' {
        let Some(nl) = b.iter().position(|&c| c == b'\n') else {
            return Parse::Short;
        };
        let text = String::from_utf8_lossy(&b[..nl]);
        let args = text
            .split_whitespace()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        return Parse::Cmd(args, nl + 1);
    }
    let Some((l, mut pos)) = line(b, 1) else {
        return Parse::Short;
    };
    let Some(argc) = num(l).filter(|&n| n <= 1024) else {
        return Parse::Bad;
    };
    let mut args = Vec::with_capacity(argc);
    for _ in 0..argc {
        match b.get(pos) {
            None => return Parse::Short,
            Some(b'$') => {}
            Some(_) => return Parse::Bad,
        }
        let Some((l, p)) = line(b, pos + 1) else {
            return Parse::Short;
        };
        let Some(len) = num(l).filter(|&n| n <= QUERY_MAX) else {
            return Parse::Bad;
        };
        if b.len() < p + len + 2 {
            return Parse::Short;
        }
        if &b[p + len..p + len + 2] != b"\r\n" {
            return Parse::Bad;
        }
        args.push(b[p..p + len].to_vec());
        pos = p + len + 2;
    }
    Parse::Cmd(args, pos)
}

/// The diskless snapshot's sink: every byte the RDB writer writes goes to
/// each replica of the sync (see [`Link::push_rdb`]); fails once none is
/// left.
pub struct Fanout {
    pub links: Vec<Arc<Link>>,
}

impl Write for Fanout {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let mut any = false;
        for l in &self.links {
            any |= l.push_rdb(b);
        }
        if any {
            Ok(b.len())
        } else {
            Err(std::io::Error::other("every replica of the sync is gone"))
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The server's view of a link, for the threads' callbacks.
pub fn server_ack(server: &ServerShared, id: u64, off: u64) {
    let mut r = server.repl.lock();
    if let Some(x) = r.master.replicas.iter_mut().find(|x| x.id == id) {
        x.ack_offset = off;
        x.ack_ms = engine::now_ms();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_as_a_replica_sends_them() {
        let ack = b"*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$2\r\n42\r\n";
        match parse(ack) {
            Parse::Cmd(a, n) => {
                assert_eq!(n, ack.len());
                assert_eq!(a[2], b"42");
            }
            _ => panic!("not parsed"),
        }
        for cut in 0..ack.len() {
            assert!(matches!(parse(&ack[..cut]), Parse::Short), "{cut}");
        }
        assert!(matches!(parse(b"\n"), Parse::Cmd(ref a, 1) if a.is_empty()));
        assert!(matches!(parse(b"*1\r\n+x\r\n"), Parse::Bad));
        assert!(matches!(parse(b"*99999\r\n"), Parse::Bad));
    }
}
