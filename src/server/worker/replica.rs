//! Worker 0's share of the replica side (see `repl::replica`): adopts the
//! link the link thread hands over as the master connection, starts its
//! load coordinator, and once per cron tick sends `REPLCONF ACK`, drops a
//! link that an REPLICAOF made stale or that `repl-timeout` ran out on.
//! The request path only counts the master's bytes and answers GETACK
//! (see `process_requests`).

use std::sync::atomic::Ordering;

use commands::ReplyMode;
use mio::net::TcpStream;

use super::home::advance;
use super::{ActiveCoord, Conn, Core, Stream, Worker};
use crate::log;
use crate::server::repl::replica::{self as link, Handoff, MasterLink};

impl Worker {
    /// Thread 0, each cron tick.
    pub(super) fn replica_cron(&mut self) {
        if self.core.id != 0 {
            return;
        }
        // Not while a sync's snapshot begins: its offset is the one the
        // link had when it started (see `repl::master`).
        if self.core.sys.is_none() {
            if let Some(h) = link::take_handoff(&self.core.server) {
                self.adopt_master(h);
            }
        }
        let Some((slot, gen)) = self.master_conn else {
            return;
        };
        let server = self.core.server.clone();
        let now = engine::now_ms();
        let timeout_ms = server.config().repl_timeout_s * 1000;
        let Some(c) = self.conns.slots.get_mut(slot).and_then(|c| c.as_mut()) else {
            self.master_conn = None;
            return;
        };
        if c.gen != gen || c.master.is_none() {
            self.master_conn = None;
            return;
        }
        let Some(m) = c.master.as_mut() else { return };
        if link::stale(&server, m) {
            self.close_conn(slot);
            return;
        }
        if link::still_loading(&server, m) {
            return;
        }
        if m.aof_rewrite_due && self.core.sys.is_none() {
            // Retried each tick while another rewrite runs.
            if let Ok(coord) = commands::persist::rewrite_coordinator(&server) {
                m.aof_rewrite_due = false;
                let mut set = commands::tx::LockSet::default();
                set.whole(server.nshards, commands::tx::Mode::Read);
                let coord = commands::tx::TxCoord::wrap(self.core.id, coord, set);
                self.start_sys(coord);
                return;
            }
        }
        let last_io = server.repl.last_io_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last_io) > timeout_ms {
            log::warning(format_args!("MASTER timeout: no data nor PING received..."));
            self.close_conn(slot);
            return;
        }
        if c.pending.is_empty() && c.coord.is_none() {
            link::publish(&server, m);
            // Our replicas' full sync, between two of the master's
            // commands (see `repl::master`).
            if c.client.multi.is_none() {
                let db = c.client.db;
                if let Some(coord) =
                    crate::server::repl::master::sync_due_on_master_conn(&server, db)
                {
                    let mut set = commands::tx::LockSet::default();
                    set.whole(server.nshards, commands::tx::Mode::Read);
                    let coord = commands::tx::TxCoord::wrap(self.core.id, coord, set);
                    start_load(&mut self.core, c, slot, coord, b"sync");
                    self.conns.mark_dirty(slot);
                    return;
                }
            }
        }
        if m.last_ack_ms == 0 || now.saturating_sub(m.last_ack_ms) >= link::ACK_PERIOD_MS {
            m.last_ack_ms = now;
            let ack = link::ack_bytes(m.published);
            if c.inline_reply_target() {
                c.out.raw(&ack);
            } else {
                c.push_ready(&ack);
            }
            self.conns.mark_dirty(slot);
        }
    }

    /// Makes the handed-over link a connection of this thread with the
    /// master flag, and starts loading a full sync's data.
    fn adopt_master(&mut self, h: Handoff) {
        let server = self.core.server.clone();
        if server.repl.lock().gen != h.gen {
            return;
        }
        if let Some((slot, gen)) = self.master_conn.take() {
            if self.conns.slots[slot]
                .as_ref()
                .is_some_and(|c| c.gen == gen)
            {
                self.close_conn(slot);
            }
        }
        let peer = h
            .stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let local = h
            .stream
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        if h.stream.set_nonblocking(true).is_err() {
            link::adopt_failed(&server, h.gen);
            return;
        }
        let _ = h.stream.set_read_timeout(None);
        let tcp = TcpStream::from_std(h.stream);
        let stream = match h.tls {
            Some(tls) => Stream::Tls(Box::new(crate::server::tls::TlsStream::from_client(
                tcp, tls,
            ))),
            None => Stream::Tcp(tcp),
        };
        let Some(slot) = self.add_master_conn(stream, peer, local) else {
            link::adopt_failed(&server, h.gen);
            return;
        };
        let loading = h.load.is_some();
        let Some(c) = self.conns.slots[slot].as_mut() else {
            return;
        };
        let gen = c.gen;
        self.master_conn = Some((slot, gen));
        server
            .repl
            .master_conn_gen
            .store(u64::from(gen), Ordering::Release);
        server
            .repl
            .master_conn_at
            .store((self.core.id as u64) << 32 | slot as u64, Ordering::Release);
        c.client.master = true;
        c.client.authenticated = true;
        c.client.reply_mode = ReplyMode::Off;
        c.client.db = h.db;
        c.master = Some(Box::new(MasterLink::new(&server, h.gen, h.offset, loading)));
        server
            .repl
            .last_io_ms
            .store(engine::now_ms(), Ordering::Relaxed);
        if !h.leftover.is_empty() {
            c.preload(&h.leftover);
        }
        match h.load {
            Some(fresh) => {
                let (gen_, replid, offset) = (h.gen, h.replid, h.offset);
                let s2 = server.clone();
                let at_instant = Box::new(move || link::loaded(&s2, gen_, &replid, offset));
                let coord =
                    commands::replica::load_coordinator(&server, self.core.id, fresh, at_instant);
                start_load(&mut self.core, c, slot, coord, b"flushall");
            }
            None => {
                super::request::process(&mut self.core, c, slot);
            }
        }
        self.conns.mark_dirty(slot);
    }
}

/// Runs a coordinator as the master connection's next command (the load
/// of a full sync: nothing of the stream runs before every shard has the
/// new data; our replicas' sync: nothing runs until its instant).
fn start_load(
    core: &mut Core,
    c: &mut Conn,
    slot: usize,
    coord: Box<dyn commands::coord::Coordinator>,
    counted_as: &[u8],
) {
    let reg = commands::registry();
    // Counted as the command it mostly is (INFO commandstats): the load
    // as FLUSHALL, our replicas' snapshot as SYNC.
    let name = vec![std::ops::Range {
        start: 0,
        end: counted_as.len(),
    }];
    let Ok(resolved) = reg.resolve(resp::Args::new(counted_as, &name)) else {
        return;
    };
    let seq = c.open_slot(true);
    c.coord = Some(ActiveCoord {
        resolved,
        coord,
        results: Vec::new(),
        remaining: 0,
        seq,
        started: std::time::Instant::now(),
        suppress: true,
        out: resp::Reply::new(false),
        aof_hold: 0,
        slow_args: None,
    });
    advance(core, c, slot);
}
