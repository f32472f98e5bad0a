//! Workers in process, for tests: `n` real [`Worker`]s (real mailboxes,
//! real shards, clients on real unix socket pairs) on the test's own
//! thread, driven in rounds by the same calls a hub makes for the workers
//! it holds (`server::host`): every worker's [`Worker::due_in`] and
//! [`Worker::park_flag`] (the hub raises the flags before a wait that may
//! sleep; here every round may: a message always finds its flag up), then every
//! [`Worker::unpark_flag`], then every [`Worker::step_shared`], in id order.
//! So a test runs the runtime's scheduling exactly, one round at a time:
//! no threads, no sleeps, nothing that depends on timing. A hop is visible
//! as the rounds it takes: a message sent during a worker's turn is handled
//! in the same round by a worker with a higher id, in the next by one with
//! a lower id.
//!
//! What it leaves out of a hub's round: the wait on the outer epoll set
//! (every worker polls its own set, without waiting, each round), and
//! consolidation's bookkeeping. Listeners, the AOF and replication are not
//! set up.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Instant;

use commands::ServerShared;
use mio::{Events, Poll, Token, Waker};

use super::super::mailbox::{self, Doorbell};
use super::{lending, Lender, Worker};
use std::cell::Cell;

/// The waker's token, as the server sets it up.
const WAKER_TOKEN: Token = Token(usize::MAX);

/// Rounds a request may take before the test gives up on its reply.
pub(super) const ROUNDS_MAX: usize = 1_000;

pub(crate) struct Cluster {
    pub(crate) workers: Vec<Worker>,
    /// Coordinators' jobs for other workers run at once, as on a hub
    /// (`cohost`); on by default.
    pub(super) lend: bool,
    /// Calls of the lender so far: lends of one worker for one call, and
    /// pins (a hub's seat lock held for a transaction).
    pub(super) lends: usize,
    pub(super) pins: usize,
    events: Events,
    /// The test's ends of its connections, and bytes read but not yet
    /// returned as a reply.
    clients: Vec<(UnixStream, Vec<u8>)>,
}

impl Cluster {
    /// `n` workers of a server with the default configuration.
    pub(crate) fn new(n: usize) -> Self {
        Self::with_aof(n, None)
    }

    /// [`Cluster::new`], every shard appending its records to `aof`.
    pub(crate) fn with_aof(n: usize, aof: Option<Arc<crate::server::aof::Aof>>) -> Self {
        let cfg = config::Config {
            shards: n,
            ..config::Config::default()
        };
        let server = ServerShared::new(cfg, n).share();
        let mut polls = Vec::new();
        let mut bells = Vec::new();
        for _ in 0..n {
            let poll = Poll::new().expect("epoll");
            let waker = Waker::new(poll.registry(), WAKER_TOKEN).expect("eventfd");
            bells.push(Doorbell::new(waker, n));
            polls.push(poll);
        }
        let workers = polls
            .into_iter()
            .zip(mailbox::matrix(Arc::new(bells)))
            .enumerate()
            .map(|(id, (poll, mb))| {
                Worker::new(
                    id,
                    poll,
                    mb,
                    server.clone(),
                    (Vec::new(), Vec::new()),
                    None,
                    (None, aof.clone()),
                )
                .expect("worker")
            })
            .collect();
        Cluster {
            workers,
            lend: true,
            lends: 0,
            pins: 0,
            events: Events::with_capacity(1024),
            clients: Vec::new(),
        }
    }

    /// A new client whose connection lives on worker `home`; its index.
    pub(crate) fn connect(&mut self, home: usize) -> usize {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        ours.set_nonblocking(true).expect("nonblocking");
        theirs.set_nonblocking(true).expect("nonblocking");
        let theirs = mio::net::UnixStream::from_std(theirs);
        self.workers[home].adopt_unix(theirs);
        self.clients.push((ours, Vec::new()));
        self.clients.len() - 1
    }

    /// One round, as a hub runs the workers it holds (lending them to
    /// each other's coordinators unless `lend` is off).
    pub(super) fn round(&mut self) {
        let now = Instant::now();
        for w in &mut self.workers {
            let _ = w.due_in(now);
            let _ = w.park_flag();
        }
        for w in &self.workers {
            w.unpark_flag();
        }
        let n = self.workers.len();
        let lender = Lent {
            base: self.workers.as_mut_ptr(),
            n,
            running: Cell::new(usize::MAX),
            on: self.lend,
            lends: Cell::new(0),
            pins: Cell::new(0),
        };
        let events = &mut self.events;
        lending(&lender, || {
            for i in 0..n {
                lender.running.set(i);
                // SAFETY: `i < n`; every access to the workers during the
                // round goes through `base`, and the lender never lends
                // the one running.
                let w = unsafe { &mut *lender.base.add(i) };
                w.step_shared(events, true, &[], false, super::clock::TurnTime::now());
            }
        });
        self.lends += lender.lends.get();
        self.pins += lender.pins.get();
    }

    /// One turn of worker `i` alone (a round in which the others have
    /// nothing to do): lets a test act between two workers' turns.
    pub(super) fn turn(&mut self, i: usize) {
        let w = &mut self.workers[i];
        let _ = w.due_in(Instant::now());
        let _ = w.park_flag();
        w.unpark_flag();
        w.step_shared(
            &mut self.events,
            true,
            &[],
            false,
            super::clock::TurnTime::now(),
        );
    }

    /// Sends `args` as one request of client `c`.
    pub(crate) fn send(&mut self, c: usize, args: &[&str]) {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.clients[c].0.write_all(req.as_bytes()).expect("send");
    }

    /// Client `c` shuts its socket: both ways (`both`: the server's end
    /// then reports a hang-up, as after a reset), or only its sending
    /// side (it still reads its replies).
    pub(super) fn shut(&mut self, c: usize, both: bool) {
        let how = if both {
            std::net::Shutdown::Both
        } else {
            std::net::Shutdown::Write
        };
        self.clients[c].0.shutdown(how).expect("shutdown");
    }

    /// The next complete reply client `c` has received so far, if any.
    pub(crate) fn try_reply(&mut self, c: usize) -> Option<String> {
        let (sock, buf) = &mut self.clients[c];
        let mut chunk = [0u8; 4096];
        loop {
            match sock.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("client read: {e}"),
            }
        }
        let n = reply_len(buf)?;
        let r: Vec<u8> = buf.drain(..n).collect();
        Some(String::from_utf8_lossy(&r).into_owned())
    }

    /// Runs rounds until client `c` has a reply; the reply and the rounds
    /// it took.
    pub(super) fn reply(&mut self, c: usize) -> (String, usize) {
        for rounds in 0..ROUNDS_MAX {
            if let Some(r) = self.try_reply(c) {
                return (r, rounds);
            }
            self.round();
        }
        panic!("client {c}: no reply in {ROUNDS_MAX} rounds");
    }

    /// Sends a request and waits for its reply (see [`Cluster::reply`]).
    pub(super) fn call(&mut self, c: usize, args: &[&str]) -> String {
        self.send(c, args);
        self.reply(c).0
    }
}

/// The cluster's workers, lent to the one running (see `cohost`).
struct Lent {
    base: *mut Worker,
    n: usize,
    running: Cell<usize>,
    on: bool,
    lends: Cell<usize>,
    pins: Cell<usize>,
}

impl Lender for Lent {
    fn lend(&self, id: usize, f: &mut dyn FnMut(&mut Worker)) -> bool {
        if !self.on || id >= self.n || id == self.running.get() {
            return false;
        }
        self.lends.set(self.lends.get() + 1);
        // SAFETY: in bounds, not the worker running, and
        // `cohost::with_worker` lends one worker at a time.
        f(unsafe { &mut *self.base.add(id) });
        true
    }

    fn pin(&self, id: usize) -> Option<std::ptr::NonNull<Worker>> {
        if !self.on || id >= self.n || id == self.running.get() {
            return None;
        }
        self.pins.set(self.pins.get() + 1);
        // SAFETY: in bounds (see `lend`).
        std::ptr::NonNull::new(unsafe { self.base.add(id) })
    }

    fn unpin_all(&self) {}
}

/// The length of the first complete RESP2 reply in `b`, if there is one
/// (the replies these tests expect: simple, error, integer, bulk, array).
fn reply_len(b: &[u8]) -> Option<usize> {
    let line_end = |at: usize| {
        b.get(at..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| at + p)
    };
    let end = line_end(0)?;
    let num = || std::str::from_utf8(&b[1..end]).ok()?.parse::<i64>().ok();
    match *b.first()? {
        b'+' | b'-' | b':' => Some(end + 2),
        b'$' => {
            let n = num()?;
            if n < 0 {
                return Some(end + 2);
            }
            let total = end + 2 + n as usize + 2;
            (b.len() >= total).then_some(total)
        }
        b'*' => {
            let n = num()?;
            let mut at = end + 2;
            for _ in 0..n.max(0) {
                at += reply_len(&b[at..])?;
            }
            Some(at)
        }
        _ => panic!("unexpected reply bytes: {:?}", String::from_utf8_lossy(b)),
    }
}
