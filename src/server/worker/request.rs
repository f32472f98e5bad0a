//! The home side's request path: reading a connection's socket, parsing
//! its requests and executing each one: inline when its keys are on this
//! thread's shard, or on another shard whose worker this thread also runs
//! (by a call, `cohost`, when nothing of the connection is outstanding),
//! otherwise as a command in a batch for another shard (a hop) or as a
//! coordinator (see `home`). Request path: no locks, no
//! allocation per request on the inline path beyond the reply bytes,
//! logging only on connection events.
//!
//! A connection is taken out of its slot while it executes (`lend`), and
//! the rest of the table is lent to a script it may run (see `busy`). The
//! batches a pass over a pipeline fills (`Core::batches`, one per
//! destination shard) are sent when the pass ends or before a coordinator
//! starts, so a multi-shard command sees the effects of the commands
//! before it. A lone hop of an idle connection may be answered by the
//! shard that runs it ([`mark_direct`]).
//!
//! Back-pressure: a connection stops executing while it owes too much
//! output or too many replies ([`paused`]).
//!
//! Per thread: `Core::batches` holds one pointer per shard (N of them,
//! only `batch_to`'s visited); the pool of batches is bounded in count and
//! bytes whatever N is.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use commands::exec::{dispatch, run_shard, ShardCall, Step};
use commands::{ConnCtx, ReplyMode, ServerShared};
use resp::{parse_request, Args, Limits, Parsed, Reply};

use super::super::blocking::{self, BlockPhase};
use super::super::conn::{ActiveCoord, Conn, HOLD_LOCAL};
use super::super::mailbox::{Batch, BatchCmd, ConnRef, Msg};
use super::busy::inbox_of;
use super::home::{advance, prefetch_plan};
use super::shard::lock_blocked;
use super::waiters::{park_waiter, serve_ready};
use super::{evict, in_place, pause, repl_wait, tracking, Core, Worker};
use crate::log;

/// Stop executing a connection's requests while this much output is
/// unwritten (the client is not reading); resume once it drains. This
/// back-pressure is Tessera's own and bounds memory even with Redis's
/// default `client-output-buffer-limit normal 0 0 0`; the configured limits
/// are checked first (after each command, at each flush, and in the cron),
/// so a lower hard limit closes the client before it pauses, and a soft
/// limit with seconds still closes a paused client. A hard limit above this
/// is reached only by one reply bigger than the rest of it.
const OUT_SOFT_LIMIT: usize = 64 << 20;
/// At most this many replies queued per connection (in flight on other
/// shards, or done and waiting behind those). With the byte bound above,
/// a client that never reads holds at most about OUT_SOFT_LIMIT plus
/// MAX_PENDING replies of server memory. Far deeper than any pipeline needs
/// to keep both threads busy.
const MAX_PENDING: usize = 256;
/// Batches kept for reuse per thread.
const BATCH_POOL_MAX: usize = 256;
/// Bytes of buffers the pooled batches of one thread may keep: a bulk load
/// through a pipe grows batches to tens of KiB, and 256 of them kept ~11 MB
/// after the load was over.
const BATCH_POOL_BYTES: usize = 2 << 20;

impl Core {
    pub(super) fn send_batches(&mut self) {
        let Some(conn) = self.batch_conn.take() else {
            return;
        };
        self.aof_flush();
        for to in self.batch_to.drain(..) {
            if let Some(batch) = self.batches[to].take() {
                self.mailbox.send(to, Msg::Exec { conn, batch });
            }
        }
    }

    pub(super) fn recycle(&mut self, mut batch: Box<Batch>) {
        let Some(bytes) = batch.recycle() else {
            return;
        };
        if self.pool.len() < BATCH_POOL_MAX && self.pool_bytes + bytes <= BATCH_POOL_BYTES {
            self.pool_bytes += bytes;
            self.pool.push(batch);
        }
    }

    /// A batch from the pool, or a new one.
    pub(super) fn take_batch(&mut self) -> Box<Batch> {
        match self.pool.pop() {
            Some(b) => {
                self.pool_bytes -= b.capacity_bytes();
                b
            }
            None => Box::default(),
        }
    }
}

impl Worker {
    /// Reads and executes. `hup`: the peer shut its side, so read to EOF
    /// (the short-read shortcut would miss a FIN that came with data).
    pub(super) fn read_conn(&mut self, slot: usize, hup: bool) {
        // Out of its slot while it executes (see `process_lent`); back
        // before anything else looks at the table.
        let Some(mut c) = self.conns.slots.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let broken = self.read_lent(&mut c, slot, hup);
        self.conns.slots[slot] = Some(c);
        if broken {
            self.close_conn(slot);
        } else {
            self.conns.mark_dirty(slot);
        }
        self.after_desk();
    }

    /// `read_conn`'s body, with the connection out of its slot; true if it
    /// must be closed.
    pub(super) fn read_lent(&mut self, c: &mut Conn, slot: usize, hup: bool) -> bool {
        // Once the peer hung up, read to EOF whenever reading resumes: the
        // event that announced it will not come again.
        c.hup |= hup;
        let hup = c.hup;
        if c.read_window != self.nap.window {
            c.read_window = self.nap.window;
            self.nap.active += 1;
        }
        let mut broken = false;
        loop {
            if c.closing || c.peer_eof {
                break;
            }
            if paused(c) {
                if (hup && !c.block.is_none()) || c.gone {
                    // A blocked client that hangs up is gone (Redis frees
                    // it): nothing must be served to it any more. So is a
                    // client whose socket was reset, whatever it waits
                    // for: no reply can reach it, and a transaction it is
                    // locking for gives its place in the lock queues up
                    // now (`close_conn` aborts it; one whose jobs ran
                    // finishes as an orphan). Left open, a dropped client's
                    // MSET kept its place until the write of an earlier
                    // reply failed, and every live client's transaction on
                    // the same keys waited behind it: seconds with a few
                    // hundred of them.
                    broken = true;
                } else {
                    c.unread = true;
                }
                break;
            }
            // A hub's turn past its budget reads no more (see `budget`).
            if self.turn_spent() {
                self.defer_read(c, slot);
                break;
            }
            c.unread = false;
            c.make_read_room();
            let end = c.rbuf_end();
            let room = c.rbuf.len() - end;
            match c.stream.read(&mut c.rbuf[end..]) {
                Ok(0) => {
                    // The peer shut its side: replies to what it sent are
                    // still owed (Redis writes them before it sees the EOF).
                    c.peer_eof = true;
                    c.unread = false;
                    break;
                }
                Ok(n) => {
                    c.set_rbuf_end(end + n);
                    self.core.stats.net_input_bytes += n as u64;
                    c.client.last_interaction_ms = self.core.shard.now_ms;
                    if c.master.is_some() {
                        let repl = &self.core.server.repl;
                        repl.last_io_ms
                            .store(self.core.shard.now_ms, Ordering::Relaxed);
                    }
                    self.process_lent(c, slot);
                    if c.qbuf_len() > self.core.cfg.qbuf_limit {
                        log::warning(format_args!(
                            "Closing client that reached max query buffer length: id={} addr={} qbuf={}",
                            c.client.id,
                            c.client.addr,
                            c.qbuf_len()
                        ));
                        broken = true;
                        break;
                    }
                    // A short read drained the socket: with edge-triggered
                    // epoll the next byte brings a new event, so skip the
                    // read that would only say EAGAIN.
                    if n < room && !hup {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        broken
    }

    /// After a release: executes again this thread's connections whose
    /// next request waited for a transaction's lock (see `execute`).
    pub(super) fn resume_lock_blocked(&mut self) {
        for (slot, gen) in std::mem::take(&mut self.core.lock_blocked) {
            let Some(mut c) = self.conns.slots.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            if c.gen == gen {
                c.lock_wait = false;
                self.process_lent(&mut c, slot);
            }
            self.conns.slots[slot] = Some(c);
            self.after_desk();
            self.conns.mark_dirty(slot);
        }
    }

    /// [`process`] for a connection taken out of its slot, with this
    /// loop's other connections lent to a script it may run (served if it
    /// runs long, see `busy`).
    pub(super) fn process_lent(&mut self, c: &mut Conn, slot: usize) {
        self.lend(c, slot, process);
    }

    /// Runs `step` ([`process`] or [`advance`]) for a connection taken out
    /// of its slot, with this loop's other connections lent to a script it
    /// may run.
    pub(super) fn lend(
        &mut self,
        c: &mut Conn,
        slot: usize,
        step: fn(&mut Core, &mut Conn, usize),
    ) {
        self.with_desk(|core| step(core, c, slot));
    }
}

/// Whether the read buffer holds a request that can be parsed now.
pub(super) fn has_work(c: &Conn) -> bool {
    let q = c.qbuf_len();
    q > 0 && q >= c.need
}

/// Whether a connection must not execute more requests now.
pub(super) fn paused(c: &Conn) -> bool {
    c.client.shutdown_wait
        || c.client.repl_wait.is_some()
        || c.coord.is_some()
        || c.lock_wait
        || c.script_wait
        || !c.block.is_none()
        || c.unwritten() + c.staged_bytes() > OUT_SOFT_LIMIT
        || c.pending.len() >= MAX_PENDING
}

/// Executes every complete request in the connection's read buffer, until
/// it runs out, pauses, or closes.
pub(super) fn process(core: &mut Core, c: &mut Conn, slot: usize) {
    process_requests(core, c, slot);
    if let Some(m) = c.master.as_mut() {
        // A replica's master connection hands on what it applied so far,
        // even with requests in flight (a pipelined stream is never idle).
        let front = c.pending.front().map(|s| s.seq);
        crate::server::repl::replica::publish_applied(&core.server, m, front);
    }
    mark_direct(core, c, slot);
    core.send_batches();
}

/// The pipeline-1 hop: when a connection's only outstanding request is one
/// command for another shard and nothing else waits to be written, the
/// batch carries the connection stream's `conn::DirectReply` (if the stream
/// grants one: TLS does not): that shard writes the reply to the client
/// itself and sends the batch home
/// without waking this thread (`Mailbox::send_lazy`). Without it, a hop
/// costs the home thread a second wake-up (doorbell, `epoll_wait`, context
/// switch) just to write one reply.
///
/// Safe because, until the batch is back, this thread writes nothing to
/// the socket (every later reply queues behind the hop's slot, and `out`
/// is empty now) and keeps the socket open (`Conns::zombies`).
pub(super) fn mark_direct(core: &mut Core, c: &mut Conn, slot: usize) {
    // A stream that declines (TLS) gets its replies home the usual way.
    let Some(direct) = c.stream.direct_reply() else {
        return;
    };
    if core.batch_conn.is_none()
        || c.direct
        || c.closing
        || c.pending.len() != 1
        || !c.out.is_empty()
        || c.pending.front().is_some_and(|s| s.suppress)
    {
        return;
    }
    let [to] = core.batch_to[..] else { return };
    let Some(b) = core.batches[to].as_mut() else {
        return;
    };
    if b.cmds.len() != 1 || b.cmds[0].claim.is_some() {
        return;
    }
    // A script holds back the requests behind it (`Conn::script_wait`)
    // until its batch is back: with more of them read, the batch must
    // come back with a wake-up.
    if c.script_wait && c.qbuf_len() != 0 {
        return;
    }
    b.direct = Some(direct);
    c.direct = true;
    if !c.direct_listed {
        c.direct_listed = true;
        core.direct_conns.push((slot, c.gen));
    }
}

/// The restricted user of a script command, for its `redis.call` checks.
pub(super) fn script_caller(
    server: &Arc<ServerShared>,
    client: &mut commands::ClientState,
    r: commands::Resolved,
) -> Option<Arc<commands::acl::Caller>> {
    if r.spec.has(commands::table::flags::SCRIPT) {
        commands::acl::caller(server, client)
    } else {
        None
    }
}

/// The `ShardCall` of a command of `client` run on a shard as a batch
/// runs it (inline, by a call, or after a hop); `may_block`: a blocking
/// command may block there (not by a call: its reply goes out in full).
/// (The core's settings and shared state, not the core: the output the
/// command writes may be the core's side buffer.)
#[inline]
pub(super) fn shard_call(
    (server, cfg): (&Arc<ServerShared>, &super::Cached),
    client: &mut commands::ClientState,
    resolved: commands::Resolved,
    may_block: bool,
) -> ShardCall {
    ShardCall {
        db: client.db,
        no_touch: client.no_touch,
        databases: cfg.databases,
        max_bulk_len: cfg.max_bulk_len,
        reply_cap_bytes: commands::ctx::reply_cap_bytes(&cfg.obuf, client),
        may_block,
        in_tx: false,
        nshards: server.nshards,
        caller: script_caller(server, client, resolved),
        tracker: commands::tracking::script_tracker(client, resolved),
        evicting_for: commands::tracking::evicting_for(client),
        client: client.id,
        ops: server.ops,
        master: client.master,
    }
}

pub(super) fn process_requests(core: &mut Core, c: &mut Conn, slot: usize) {
    loop {
        if c.client.close_after_reply {
            c.closing = true;
        }
        if c.closing || paused(c) {
            return;
        }
        let avail = c.qbuf_len();
        if avail == 0 || avail < c.need {
            return;
        }
        let limits = Limits {
            max_bulk_len: core.cfg.max_bulk_len,
            auth_required: !c.client.authenticated,
        };
        let (rpos, end) = (c.rpos, c.rbuf_end());
        match parse_request(&mut c.rbuf[rpos..end], &limits, &mut c.args) {
            Parsed::Complete(n) => {
                c.need = 0;
                if let Some(m) = c.master.as_ref() {
                    // REPLICAOF moved on: nothing more of this master runs.
                    if m.gen != core.server.repl.gen.load(Ordering::Acquire) {
                        c.closing = true;
                        return;
                    }
                    if master_request(core, c, n) {
                        continue;
                    }
                }
                // A master connection's request that leaves a reply slot
                // open is in flight (`MasterLink::applied`).
                let seq0 = c.next_seq;
                if !c.args.is_empty() {
                    let args = std::mem::take(&mut c.args);
                    let ran = execute(core, c, slot, &args);
                    c.args = args;
                    if !ran {
                        // Held back by a lock: parsed again after a release.
                        return;
                    }
                    if c.client
                        .repl_wait
                        .as_ref()
                        .is_some_and(|w| w.target.is_none())
                    {
                        repl_wait::start(core, c, slot);
                    }
                    if c.client.close_after_reply {
                        c.closing = true;
                    }
                }
                c.rpos += n;
                if let Some(m) = c.master.as_mut() {
                    let before = m.offset;
                    m.consumed(&core.server, &c.rbuf[c.rpos - n..c.rpos]);
                    if c.pending.back().is_some_and(|s| s.seq >= seq0) {
                        m.opened(seq0, before);
                    }
                }
                if c.check_obuf(&core.cfg.obuf, core.shard.now_ms) {
                    return;
                }
            }
            Parsed::Incomplete(need) => {
                c.need = need;
                return;
            }
            Parsed::Error(e) => {
                log::verbose(format_args!(
                    "Protocol error ({}) from client: id={} addr={}",
                    e.message(),
                    c.client.id,
                    c.client.addr
                ));
                // Under CLIENT REPLY OFF / SKIP the error is not sent
                // either (Redis); the connection closes all the same.
                if c.client.reply_mode == ReplyMode::On {
                    let mut r = Reply::new(c.client.resp3);
                    r.error(&e.message());
                    if c.inline_reply_target() {
                        c.out.raw(r.as_bytes());
                    } else {
                        c.push_ready(r.as_bytes());
                    }
                }
                c.closing = true;
                c.rpos = c.rbuf_end();
                return;
            }
        }
    }
}

/// A request from a replica's master that the master connection handles
/// itself: `REPLCONF GETACK` gets `REPLCONF ACK <offset>` (the offset of
/// what came before it), the one reply a master reads. True if handled
/// (consumed and counted).
pub(super) fn master_request(core: &Core, c: &mut Conn, n: usize) -> bool {
    let rpos = c.rpos;
    if !crate::server::repl::replica::is_getack(&c.rbuf[rpos..], &c.args) {
        return false;
    }
    let Some(m) = c.master.as_mut() else {
        return false;
    };
    let ack = crate::server::repl::replica::ack_bytes(m.offset);
    m.consumed(&core.server, &c.rbuf[rpos..rpos + n]);
    c.rpos += n;
    if c.inline_reply_target() {
        c.out.raw(&ack);
    } else {
        c.push_ready(&ack);
    }
    true
}

/// A script that needs several shards: its declared keys span shards, or
/// (`found` not empty) its run on one shard was taken back when it
/// touched these keys of others. Run in place when they are co-hosted and
/// free and nothing of the connection is outstanding (`direct`: its reply
/// goes to `out`, the connection's output), else on copies under locks
/// (`commands::script::wide`) over its keys and those found. `mem_bytes`:
/// the connection's buffers' bytes (`Conn::mem_total`, before the run
/// borrows its output), lent to a run in place with the client
/// (`commands::Sender`).
fn script_across(
    core: &mut Core,
    (client, mem_bytes): (&mut commands::ClientState, usize),
    out: &mut Reply,
    direct: bool,
    (resolved, handler): (commands::Resolved, commands::table::ShardHandler),
    args: Args<'_>,
    mut found: Vec<Vec<u8>>,
) -> Step {
    if direct {
        let every = commands::script::every::asks_every(&found);
        let sender = (&mut *client, mem_bytes);
        match in_place::run(core, sender, out, (resolved, handler), args, every) {
            in_place::Ran::Done => return Step::Done,
            in_place::Ran::Declined => {}
            in_place::Ran::Widen(keys) => found.extend(keys),
        }
    }
    // Nothing replied, and building writes nothing.
    let mut none = Reply::new(false);
    let mut ctx = ConnCtx {
        client,
        out: &mut none,
        server: &core.server,
        home: core.id,
        key_shards: &[],
    };
    let coord = commands::script::wide::coordinator(resolved.spec, handler, &mut ctx, args, found);
    Step::Coord { resolved, coord }
}

/// A script's first run (where its declared keys are, here or on another
/// thread's shard, or in place) was abandoned at `keys` of other shards: counted, and remembered so that its later
/// calls start in place (`in_place::STRAYS`). An empty list is a run
/// taken back for another reason (past `busy-reply-threshold`).
pub(super) fn strayed(core: &mut Core, args: Args<'_>, keys: &[Vec<u8>]) {
    if !keys.is_empty() {
        core.scripts_strayed += 1;
        in_place::remember_stray(core.server.ops, args);
    }
}

/// Runs one request; false if a transaction's lock holds it back (then
/// nothing happened and the connection waits for a release).
pub(super) fn execute(
    core: &mut Core,
    c: &mut Conn,
    slot: usize,
    ranges: &[std::ops::Range<usize>],
) -> bool {
    let base = c.rpos;
    let end = c.rbuf_end();
    let args = Args::new(&c.rbuf[base..end], ranges);
    // CLIENT REPLY SKIP applies to the next command only: arm it now, so a
    // SKIP issued by this very command re-arms it for the following one.
    if c.client.reply_mode == ReplyMode::Skip {
        c.client.reply_mode = ReplyMode::Skipping;
    }
    let mode_before = c.client.reply_mode;
    let direct = c.inline_reply_target();
    let mut blocked_on = None;
    // The command's shard, when it must first wait for other shards to
    // evict (see `evict`).
    let mut evict_wait = None;
    // Whether the command wrote AOF records (its reply then waits for them
    // under appendfsync always).
    let mut recorded = false;
    core.side.clear();
    core.side.set_resp3(c.client.resp3);
    tracking::track_check(core);
    if c.client.tracking.is_some() {
        tracking::remember(core, c, args);
    }
    let (step, mark) = {
        let out = if direct { &mut c.out } else { &mut core.side };
        let mark = out.len();
        let mut ctx = ConnCtx {
            client: &mut c.client,
            out,
            server: &core.server,
            home: core.id,
            key_shards: &[],
        };
        let step = dispatch(args, &mut ctx, &mut core.stats, &mut core.scratch);
        let step = match step {
            // A script this thread saw stray before (`in_place::STRAYS`),
            // from a connection with nothing outstanding: in place from
            // the start, if its shards are co-hosted and free, rather than
            // a first run where its declared keys are that would be
            // abandoned at the stray key. Declined: it runs as any other.
            Step::Shard {
                shard,
                resolved,
                handler,
            } if direct
                && resolved.spec.has(commands::table::flags::SCRIPT)
                && in_place::known_to_stray(core.server.ops, args) =>
            {
                let mem = c.mem_total();
                let h = (resolved, handler);
                let sender = (&mut c.client, mem);
                match in_place::run(core, sender, &mut c.out, h, args, false) {
                    in_place::Ran::Done => Step::Done,
                    in_place::Ran::Declined => Step::Shard {
                        shard,
                        resolved,
                        handler,
                    },
                    in_place::Ran::Widen(keys) => {
                        strayed(core, args, &keys);
                        let sender = (&mut c.client, mem);
                        script_across(core, sender, &mut c.out, direct, h, args, keys)
                    }
                }
            }
            step => step,
        };
        // (Again: the arm above may have used the connection's output.)
        let out = if direct { &mut c.out } else { &mut core.side };
        match step {
            Step::Shard { shard, .. }
                if core.shard.evict.maxmemory != 0
                    && !c.evict_asked
                    && evict::needed(
                        &core.server.mem,
                        shard,
                        core.shard.now_ms,
                        core.evict_blind_ms,
                    ) =>
            {
                evict_wait = Some(shard);
                (Step::Blocked, mark)
            }
            Step::Shard {
                shard, resolved, ..
            } if shard == core.id
                && core.locks.any_held()
                && lock_blocked(
                    &core.locks,
                    resolved,
                    args,
                    c.client.db,
                    &mut core.scratch.positions,
                ) =>
            {
                (Step::Blocked, mark)
            }
            Step::Shard {
                shard,
                resolved,
                handler,
            } if shard == core.id => {
                let call = shard_call((&core.server, &core.cfg), &mut c.client, resolved, true);
                let prop0 = core.shard.outbox.len();
                let mut found = None;
                let ran = if resolved.spec.has(commands::table::flags::SCRIPT) {
                    // The shard side's inbox is lent to it too (see `busy`),
                    // and its connection, out of its slot (`Sender`); `out`
                    // may be the core's side buffer.
                    let mem_bytes = c.mem_total();
                    let out = if direct { &mut c.out } else { &mut core.side };
                    let sender = commands::Sender {
                        client: &c.client,
                        mem_bytes,
                    };
                    let call = call.clone();
                    inbox_of!(core).lend(&mut core.stats, |stats| {
                        let shard = &mut core.shard;
                        commands::exec::run_shard_sent(
                            resolved, handler, args, shard, call, out, stats, sender,
                        )
                    })
                } else {
                    run_shard(
                        resolved,
                        handler,
                        args,
                        &mut core.shard,
                        call.clone(),
                        out,
                        &mut core.stats,
                    )
                };
                if let Some(on) = ran {
                    if on.widen {
                        found = Some(on.keys);
                    } else {
                        blocked_on = Some((on, resolved, handler, call));
                    }
                }
                recorded = core.shard.outbox.len() != prop0;
                tracking::tag_touched(core, Some(c.client.home));
                match found {
                    // A script that touched keys of other shards: run it
                    // again over more keys (`commands::script::wide`).
                    Some(keys) => {
                        strayed(core, args, &keys);
                        let mem = c.mem_total();
                        let h = (resolved, handler);
                        let sender = (&mut c.client, mem);
                        let step = script_across(core, sender, &mut c.out, direct, h, args, keys);
                        (step, mark)
                    }
                    None => (Step::Done, mark),
                }
            }
            // A one-shard script for a co-hosted shard, from a connection
            // with nothing outstanding: run there by a call, with what a
            // long script needs (`in_place::by_call`), not a hop (~6,000
            // instructions more under callgrind: EVALSHA of INCR + EXPIRE,
            // 2 shards on one hub). The same exclusions as a plain command's
            // below but for blocking (a script does not block), and a script
            // known to hop (one that publishes: see `in_place`).
            Step::Shard {
                shard,
                resolved,
                handler,
            } if shard != core.id
                && direct
                && resolved.spec.has(commands::table::flags::SCRIPT)
                && core.shard.evict.maxmemory == 0
                && c.client.tracking.is_none()
                && c.master.is_none()
                && !in_place::known_to_hop(core.server.ops, args) =>
            {
                let call = shard_call((&core.server, &core.cfg), &mut c.client, resolved, true);
                let conn = ConnRef {
                    thread: core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                let h = (resolved, handler);
                let mem = c.mem_total();
                let sender = commands::Sender {
                    client: &c.client,
                    mem_bytes: mem,
                };
                // (`out` is the connection's: `direct`.)
                match in_place::by_call(core, conn, shard, h, args, (call, sender), &mut c.out) {
                    in_place::Ran::Done => (Step::Done, mark),
                    in_place::Ran::Declined => (
                        Step::Shard {
                            shard,
                            resolved,
                            handler,
                        },
                        mark,
                    ),
                    // It touched keys of other shards: run it again over
                    // more keys (`commands::script::wide`).
                    in_place::Ran::Widen(keys) => {
                        strayed(core, args, &keys);
                        let sender = (&mut c.client, mem);
                        let step = script_across(core, sender, &mut c.out, direct, h, args, keys);
                        (step, mark)
                    }
                }
            }
            // A command for a shard whose worker this thread also runs (a
            // hub holding both), from a connection with nothing outstanding:
            // run there now by a call (`cohost`), its reply straight into
            // `out`, as Redis runs every command; a batch and its reply
            // cost ~1,200 instructions more per command under callgrind
            // (pipelined SETBIT over 2 shards on one hub). Declined (then
            // it hops) where the hop does more than run it: a command that
            // may block or runs a script, a client that tracks keys, a
            // master's stream, a memory limit, or a shard that is not free
            // (see `Worker::run_lent_command`). Scripts: the arm above.
            Step::Shard {
                shard,
                resolved,
                handler,
            } if shard != core.id
                && direct
                && core.shard.evict.maxmemory == 0
                && c.client.tracking.is_none()
                && c.master.is_none()
                && !resolved.spec.has(commands::table::flags::BLOCKING)
                && !resolved.spec.has(commands::table::flags::SCRIPT) =>
            {
                let call = shard_call((&core.server, &core.cfg), &mut c.client, resolved, false);
                let conn = ConnRef {
                    thread: core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                let now_ms = core.shard.now_ms;
                let ran = super::cohost::with_worker(shard, core.id, |w| {
                    w.run_lent_command(conn, (resolved, handler), args, call, out, now_ms)
                });
                if ran == Some(true) {
                    (Step::Done, mark)
                } else {
                    (
                        Step::Shard {
                            shard,
                            resolved,
                            handler,
                        },
                        mark,
                    )
                }
            }
            // A script across shards: in place when they are co-hosted and
            // free (`in_place`), else on copies under locks.
            Step::Script { resolved, handler } => {
                let mem = c.mem_total();
                let sender = (&mut c.client, mem);
                let h = (resolved, handler);
                let step = script_across(core, sender, &mut c.out, direct, h, args, Vec::new());
                (step, mark)
            }
            step => (step, mark),
        }
    };
    if matches!(step, Step::Blocked | Step::Paused) {
        c.client.reply_mode = mode_before;
        if mode_before == ReplyMode::Skipping {
            c.client.reply_mode = ReplyMode::Skip;
        }
        if let Some(shard) = evict_wait {
            if !evict::wait_for_others(core, c, slot, shard) {
                // Only this thread's shard had keys to give: evicted
                // already, so the request runs now.
                return execute(core, c, slot, ranges);
            }
            c.lock_wait = true;
            return false;
        }
        c.lock_wait = true;
        if matches!(step, Step::Paused) {
            pause::hold(core, c, slot);
        } else {
            core.maybe_busy = true;
            core.lock_blocked.push((slot, c.gen));
        }
        return false;
    }
    c.evict_asked = false;
    if c.client.tracking.is_some() {
        commands::tracking::after_command(&mut c.client);
    }
    let mode_after = c.client.reply_mode;
    // Pub/sub confirmations go out even under REPLY OFF/SKIP, as Redis's.
    let pushed = std::mem::take(&mut c.client.push_reply);
    // CLIENT REPLY ON run while skipping is answered (Redis drops a reply
    // by the flags in force when it is written).
    let suppress = !pushed
        && ((mode_before == ReplyMode::Skipping && mode_after != ReplyMode::On)
            || (mode_before == ReplyMode::Off && mode_after == ReplyMode::Off));
    if mode_after == ReplyMode::Skipping {
        c.client.reply_mode = ReplyMode::On;
    }
    match step {
        // (Turned into `Done` or `Coord` above.)
        Step::Blocked | Step::Paused | Step::Script { .. } => {}
        Step::Done => {
            // The arguments borrow the read buffer: copy a blocked
            // command's before the connection is touched.
            let blocked_args = blocked_on
                .as_mut()
                .map(|(on, ..)| on.args.take().unwrap_or_else(|| args.to_owned()));
            if suppress {
                if direct {
                    c.out.truncate(mark);
                } else {
                    core.side.clear();
                }
            }
            if recorded && core.aof_always {
                // Held until the records this thread appends next are
                // durable (`settle_holds` gives the target).
                if direct {
                    c.hold_tail(mark, HOLD_LOCAL);
                } else {
                    c.push_held(core.side.as_bytes(), HOLD_LOCAL);
                }
                if !c.local_listed {
                    c.local_listed = true;
                    core.local_holds.push((slot, c.gen));
                }
                core.note_held(c, slot);
            } else if !direct && !core.side.is_empty() {
                c.push_ready(core.side.as_bytes());
            }
            // One huge reply must not keep its buffer for the thread's life.
            if core.side.capacity() > 1 << 20 {
                core.side = Reply::new(false);
            }
            if let Some((on, resolved, handler, call)) = blocked_on {
                let seq = c.open_slot(suppress);
                let conn = ConnRef {
                    thread: core.id as u16,
                    slot: slot as u32,
                    gen: c.gen,
                };
                let t = park_waiter(
                    core,
                    conn,
                    seq,
                    (resolved, handler, call, c.client.resp3, false),
                    blocked_args.unwrap_or_default(),
                    blocking::ClaimFlag::at(core.server.repl.masters_set()),
                    on,
                );
                c.block = BlockPhase::Blocked(t);
                blocking::set_blocked(core.server.ops, &mut c.client, true);
                core.blocked_conns.push((slot, c.gen));
            } else if core.shard.dbs[c.client.db].has_ready() {
                serve_ready(core);
            }
        }
        Step::Shard {
            shard,
            resolved,
            handler,
        } => {
            // The slot is taken after the arguments are copied (they borrow
            // the read buffer); its number is known now.
            let seq = c.next_seq;
            let call = shard_call((&core.server, &core.cfg), &mut c.client, resolved, true);
            let conn = ConnRef {
                thread: core.id as u16,
                slot: slot as u32,
                gen: c.gen,
            };
            debug_assert!(core.batch_conn.is_none_or(|b| b == conn));
            core.batch_conn = Some(conn);
            let b = match core.batches[shard].as_mut() {
                Some(b) => b,
                None => {
                    let b = core.take_batch();
                    core.batch_to.push(shard);
                    core.batches[shard].insert(b)
                }
            };
            let claim = resolved
                .spec
                .has(commands::table::flags::BLOCKING)
                .then(|| blocking::ClaimFlag::at(core.server.repl.masters_set()));
            // A script may come back to run again here over more keys
            // (`Batch::widen`): no later command of this connection runs
            // before the batch is back.
            if resolved.spec.has(commands::table::flags::SCRIPT) {
                c.script_wait = true;
            }
            if let Some(cl) = &claim {
                // Paused until the batch tells whether it blocked.
                c.block = BlockPhase::Awaiting(cl.clone());
            }
            b.cmds.push(BatchCmd {
                seq,
                resolved,
                handler,
                call,
                resp3: c.client.resp3,
                nargs: args.len() as u32,
                claim,
            });
            b.args.extend(args);
            let opened = c.open_slot(suppress);
            debug_assert_eq!(opened, seq);
        }
        Step::Coord { resolved, coord } => {
            // Requests already batched for other shards go first: the
            // coordinator's jobs must see their effects.
            core.send_batches();
            // (Not for a coordinator that keeps them: `kept_args`.)
            let slow_args = (core.server.ops.slowlog.enabled() && coord.kept_args().is_none())
                .then(|| args.to_owned());
            prefetch_plan(core, resolved.spec, args);
            let seq = c.open_slot(suppress);
            c.coord = Some(ActiveCoord {
                resolved,
                coord,
                results: Vec::new(),
                remaining: 0,
                seq,
                started: Instant::now(),
                suppress,
                out: Reply::new(c.client.resp3),
                aof_hold: 0,
                slow_args,
            });
            advance(core, c, slot);
        }
    }
    if c.out.resp3() != c.client.resp3 {
        c.out.set_resp3(c.client.resp3);
    }
    true
}
