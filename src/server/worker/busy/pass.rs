//! One busy pass over the lent loop's connections ([`Desk`]'s
//! `serve_busy`, see the module documentation of `busy`): its mailbox
//! first ([`serve_inbox`]), then epoll polled without waiting (every
//! connection visited at a lend's first pass, and at each pass while a
//! hub holds the loop), each readable connection read to `EAGAIN` and its
//! complete requests run through the ordinary `dispatch` (`-BUSY` for
//! what needs a shard; allow-busy commands answered, a WATCH started or
//! deferred), TCP connections accepted. Nothing runs on the loop's shard.

use mio::{Events, Token};
use resp::{parse_request, Args, Limits, Parsed, Reply};

use commands::exec::{dispatch, Step};
use commands::{ConnCtx, ReplyMode, ServerShared};

use super::super::accept::Door;
use super::super::request::paused;
use super::super::{TCP_BASE, TLS_BASE, UNIX, WAKER};
use super::inbox::{serve_inbox, take_lock_blocked};
use super::watch::{self, watch_now, Watched};
use super::{Desk, DeskLimits, DeskState};

/// Events one pass takes from epoll at most (the rest wait for the next
/// pass, about a millisecond later).
const EVENTS_MAX: usize = 256;

impl commands::script::busy::BusyServe for Desk<'_> {
    fn for_each_client(
        &self,
        f: &mut dyn FnMut(&commands::ClientState, &commands::coord::ClientIo),
    ) {
        commands::coord::ClientRegistry::for_each(&*self.conns, f);
    }

    fn serve_busy(&mut self) {
        if self.first {
            // A new lend: the connections an earlier one deferred went to
            // the loop's resume list when it ended (a deferred request
            // still unparsed is deferred again when read).
            self.state.deferred.clear();
            self.watch_prune();
            // A script holding shards under locks: every loop looks now
            // at what waits behind them (`Worker::refuse_behind_busy`).
            if commands::script::busy::published_under_locks() {
                if let Some(wake) = self.server.wake_all.get() {
                    wake();
                }
            }
        }
        serve_inbox(self.id);
        self.watch_outputs();
        for (slot, gen) in take_lock_blocked(self.id) {
            self.serve_held(slot, gen);
        }
        let mut events = self
            .state
            .events
            .take()
            .unwrap_or_else(|| Events::with_capacity(EVENTS_MAX));
        if self
            .poll
            .poll(&mut events, Some(std::time::Duration::ZERO))
            .is_err()
        {
            events.clear();
        }
        for ev in events.iter() {
            match ev.token() {
                WAKER => {}
                UNIX => self.state.missed_listener = true,
                // TLS listeners: accepted once the script ends (the
                // handshake would run inside the hook).
                Token(t) if (TLS_BASE..TCP_BASE).contains(&t) => self.state.missed_listener = true,
                Token(t) if t >= TCP_BASE => {
                    // Accepted now (Redis accepts while busy too): an
                    // operator's new connection can send SCRIPT KILL.
                    if let Some(l) = self.tcp.get(t - TCP_BASE) {
                        let mut door = Door {
                            conns: &mut *self.conns,
                            poll: &*self.poll,
                            server: self.server,
                            id: self.id,
                            maxclients: self.limits.maxclients,
                            tcp_keepalive_s: self.limits.tcp_keepalive_s,
                        };
                        door.accept_tcp(l, false);
                    }
                }
                Token(slot) => {
                    if ev.is_writable() {
                        self.conns.mark_dirty(slot);
                    }
                    let hup = ev.is_read_closed() || ev.is_error();
                    if ev.is_readable() || hup {
                        self.serve_conn(slot, hup);
                    }
                }
            }
        }
        self.state.events = Some(events);
        // Held by a hub, the connections' events go to the hub's set (see
        // `hub_set`): every pass visits them all.
        if std::mem::take(&mut self.first) || self.conns.in_hub_set() {
            for slot in 0..self.conns.slots.len() {
                self.serve_conn(slot, false);
            }
        }
    }
}

impl Desk<'_> {
    /// A connection whose request waited for a lock of this loop's shard,
    /// which a published script holds now (it took the lock before it
    /// ran): its buffered requests are answered now, as a read's would be
    /// (dispatch refuses them: `-BUSY`); the loop reads it again once the
    /// script ends.
    fn serve_held(&mut self, slot: usize, gen: u32) {
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if c.gen != gen {
            return;
        }
        c.lock_wait = false;
        self.answer_buffered(slot);
    }

    /// Answers connection `slot`'s buffered requests as a read would
    /// (dispatch refuses what waits for the script: `-BUSY`), writes its
    /// output, and has the loop read it again once the script ends.
    pub(super) fn answer_buffered(&mut self, slot: usize) {
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        let gen = c.gen;
        let defer = !(c.closing
            || c.peer_eof
            || answer(self.server, self.id, self.limits, self.state, c, slot));
        let broken = match c.flush() {
            Ok(n) => {
                self.state.tally.get().net_output_bytes += n as u64;
                false
            }
            Err(_) => true,
        };
        let unwritten = c.unwritten() > 0;
        c.unread = true;
        self.conns.resume.push(slot);
        if defer {
            self.state.deferred.push((slot, gen));
        }
        if broken {
            self.conns.killed.push((slot, gen));
        } else if unwritten {
            self.conns.mark_dirty(slot);
        }
    }

    /// Reads and answers one connection (see the module documentation).
    fn serve_conn(&mut self, slot: usize, hup: bool) {
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        c.hup |= hup;
        let gen = c.gen;
        let deferred = self.state.deferred.contains(&(slot, gen));
        if deferred || c.closing || c.peer_eof || paused(c) {
            // The loop reads it after the script.
            c.unread = true;
            self.conns.resume.push(slot);
            return;
        }
        let mut broken = false;
        let mut defer = false;
        let mut got = false;
        loop {
            c.make_read_room();
            let end = c.rbuf_end();
            match c.stream.read(&mut c.rbuf[end..]) {
                Ok(0) => {
                    c.peer_eof = true;
                    got = true;
                    break;
                }
                Ok(n) => {
                    got = true;
                    c.set_rbuf_end(end + n);
                    self.state.tally.get().net_input_bytes += n as u64;
                    if !answer(self.server, self.id, self.limits, self.state, c, slot) {
                        defer = true;
                        break;
                    }
                    if c.qbuf_len() > self.limits.qbuf_limit || c.closing || paused(c) {
                        // Over the limit: the loop closes it.
                        broken = c.qbuf_len() > self.limits.qbuf_limit;
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        match c.flush() {
            Ok(n) => self.state.tally.get().net_output_bytes += n as u64,
            Err(_) => broken = true,
        }
        if defer {
            self.state.deferred.push((slot, gen));
        }
        if broken {
            self.conns.killed.push((slot, gen));
            return;
        }
        let unwritten = c.unwritten() > 0;
        if got {
            // Whatever is left (a deferred request, an EOF, a read cut
            // short) the loop finishes after the script.
            c.unread = true;
            self.conns.resume.push(slot);
        }
        if unwritten {
            self.conns.mark_dirty(slot);
        }
    }
}

/// Answers the complete requests in `c`'s buffer; false at one that
/// needs a shard (left unparsed: the connection waits for the script).
fn answer(
    server: &std::sync::Arc<ServerShared>,
    id: usize,
    limits: DeskLimits,
    st: &mut DeskState,
    c: &mut super::super::Conn,
    slot: usize,
) -> bool {
    loop {
        if c.client.close_after_reply {
            c.closing = true;
        }
        if c.closing || paused(c) {
            return true;
        }
        let avail = c.qbuf_len();
        if avail == 0 || avail < c.need {
            return true;
        }
        let parse_limits = Limits {
            max_bulk_len: limits.max_bulk_len,
            auth_required: !c.client.authenticated,
        };
        let (rpos, end) = (c.rpos, c.rbuf_end());
        match parse_request(&mut c.rbuf[rpos..end], &parse_limits, &mut st.args) {
            Parsed::Complete(n) => {
                c.need = 0;
                if !st.args.is_empty() && !run_one(server, id, st, c, slot) {
                    return false;
                }
                c.rpos += n;
            }
            Parsed::Incomplete(need) => {
                c.need = need;
                return true;
            }
            // The loop replies and closes, as it always does.
            Parsed::Error(_) => return true,
        }
    }
}

/// Runs one parsed request through dispatch; false if it needs a shard
/// (nothing was replied; the request stays in the buffer).
fn run_one(
    server: &std::sync::Arc<ServerShared>,
    id: usize,
    st: &mut DeskState,
    c: &mut super::super::Conn,
    slot: usize,
) -> bool {
    let args = Args::new(&c.rbuf[c.rpos..c.rbuf_end()], &st.args);
    let mode_before = c.client.reply_mode;
    if mode_before == ReplyMode::Skip {
        c.client.reply_mode = ReplyMode::Skipping;
    }
    let skipping = c.client.reply_mode;
    let direct = c.inline_reply_target();
    let side = st.side.get_or_insert_with(|| Reply::new(false));
    side.clear();
    side.set_resp3(c.client.resp3);
    let out = if direct { &mut c.out } else { &mut *side };
    let mark = out.len();
    // A WATCH left for later is dispatched again then: what its builder
    // added to the client's list is taken back (it would find those keys
    // watched already and register nothing).
    let watched = c.client.watch.as_ref().map(|w| w.keys.len());
    let started = std::time::Instant::now();
    let mut ctx = ConnCtx {
        client: &mut c.client,
        out: &mut *out,
        server,
        home: id,
        key_shards: &[],
    };
    let step = dispatch(args, &mut ctx, st.tally.get(), &mut st.scratch);
    let mut jobs = None;
    let done = match step {
        Step::Done => true,
        Step::Coord { resolved, coord } if resolved.spec.name == "watch" => {
            let stats = st.tally.get();
            match watch_now(
                server,
                id,
                resolved,
                coord,
                args,
                out,
                &mut c.client,
                stats,
                started,
            ) {
                Watched::Done => true,
                Watched::Jobs(coord, plan) => {
                    jobs = Some((resolved, coord, plan));
                    true
                }
                Watched::Later => false,
            }
        }
        _ => false,
    };
    if !done {
        // Nothing ran and nothing was written (dispatch replies only when
        // it is done); the coordinator or hop is dropped unstarted.
        c.client.reply_mode = mode_before;
        match watched {
            None => c.client.watch = None,
            Some(n) => {
                if let Some(w) = c.client.watch.as_mut() {
                    w.keys.truncate(n);
                }
            }
        }
        return false;
    }
    if let Some((resolved, coord, plan)) = jobs {
        // Replied once its jobs are back (`watch::start`): in the
        // connection's order, by the flags in force now (WATCH changes
        // none).
        let suppress = skipping == ReplyMode::Skipping || skipping == ReplyMode::Off;
        if skipping == ReplyMode::Skipping {
            c.client.reply_mode = ReplyMode::On;
        }
        let slow_args = server.ops.slowlog.enabled().then(|| args.to_owned());
        watch::start(
            id, slot, c, resolved, coord, plan, started, suppress, slow_args,
        );
        return true;
    }
    let mode_after = c.client.reply_mode;
    let pushed = std::mem::take(&mut c.client.push_reply);
    // CLIENT REPLY ON run while skipping is answered (Redis drops a reply
    // by the flags in force when it is written).
    let suppress = !pushed
        && ((skipping == ReplyMode::Skipping && mode_after != ReplyMode::On)
            || (skipping == ReplyMode::Off && mode_after == ReplyMode::Off));
    if mode_after == ReplyMode::Skipping {
        c.client.reply_mode = ReplyMode::On;
    }
    if direct {
        if suppress {
            c.out.truncate(mark);
        }
    } else if !suppress && !side.is_empty() {
        c.push_ready(side.as_bytes());
    }
    if c.out.resp3() != c.client.resp3 {
        c.out.set_resp3(c.client.resp3);
    }
    true
}
