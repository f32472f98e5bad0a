//! The door of a worker: accepting on its TCP, TLS and unix listeners,
//! admitting a connection (`maxclients`, protected mode), registering it
//! in the poll set and the connection table, and a replica's link to its
//! master as a connection. Also the TLS listeners CONFIG SET tls-port
//! swaps in.
//!
//! [`Door`] is what admitting touches (the table, the poll set, a few
//! settings), apart from the rest of the worker, because a busy script's
//! desk (`busy`) accepts while `Core` is lent to the running handler.
//!
//! Unix clients are spread over threads round-robin (one unix listener
//! serves all threads); TCP ones stay on the thread whose listener took
//! them. Per thread: its listeners, independent of the number of threads.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use commands::{ClientState, ServerShared};
use mio::net::TcpListener;
use mio::{Interest, Poll, Token};

use super::super::conn::{Conn, Stream};
use super::super::mailbox::Msg;
use super::{Conns, Core, Worker, TCP_BASE, TLS_BASE};
use crate::log;

impl Worker {
    /// Accepts on plain listener `i`, or on TLS listener `i` (`tls`).
    pub(super) fn accept_tcp(&mut self, i: usize, tls: bool) {
        let Worker {
            core,
            conns,
            poll,
            tcp,
            tls: tls_listeners,
            ..
        } = self;
        // An event of a listener CONFIG SET tls-port closed in this very
        // poll round names an index that is gone: nothing to accept.
        let Some(l) = (if tls {
            tls_listeners.get(i)
        } else {
            tcp.get(i)
        }) else {
            return;
        };
        Door::of(core, conns, poll).accept_tcp(l, tls);
    }

    pub(super) fn accept_unix(&mut self) {
        loop {
            let stream = match self.unix.as_ref().map(|u| u.accept()) {
                Some(Ok((s, _))) => s,
                Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                _ => return,
            };
            // Spread unix clients over threads round-robin (a unix socket
            // cannot be shared with SO_REUSEPORT).
            let n = self.core.mailbox.threads();
            let to = self.unix_rr % n;
            self.unix_rr = self.unix_rr.wrapping_add(1);
            if to == self.core.id {
                self.adopt_unix(stream);
            } else {
                self.core.mailbox.send(to, Msg::Adopt(stream));
            }
        }
    }

    pub(super) fn adopt_unix(&mut self, stream: mio::net::UnixStream) {
        let path = self
            .core
            .server
            .config
            .read()
            .map(|c| {
                c.unixsocket
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        // Redis prints both ends of a unix connection as `path:0`.
        let addr = format!("{path}:0");
        self.add_conn(Stream::Unix(stream), addr.clone(), addr, true, true);
    }

    pub(super) fn add_conn(
        &mut self,
        stream: Stream,
        addr: String,
        laddr: String,
        unix: bool,
        local: bool,
    ) {
        let Worker {
            core, conns, poll, ..
        } = self;
        Door::of(core, conns, poll).add_conn(stream, addr, laddr, unix, local);
    }

    /// A replica's link to its master as a connection of this thread
    /// (no client limits apply to it); its slot.
    pub(super) fn add_master_conn(
        &mut self,
        stream: Stream,
        addr: String,
        laddr: String,
    ) -> Option<usize> {
        let server = self.core.server.clone();
        server.total_connections.fetch_add(1, Ordering::Relaxed);
        server.connected_clients.fetch_add(1, Ordering::AcqRel);
        let Worker {
            core, conns, poll, ..
        } = self;
        let slot = Door::of(core, conns, poll).insert_conn(stream, addr, laddr, false);
        if slot.is_none() {
            server.connected_clients.fetch_sub(1, Ordering::AcqRel);
        }
        slot
    }

    /// After a lend: accepts what a busy script's desk left waiting on the
    /// listeners (their events were taken).
    pub(super) fn after_desk(&mut self) {
        if std::mem::take(&mut self.desk.missed_listener) {
            for i in 0..self.tcp.len() {
                self.accept_tcp(i, false);
            }
            for i in 0..self.tls.len() {
                self.accept_tcp(i, true);
            }
            self.accept_unix();
        }
    }

    /// CONFIG SET port, tls-port or bind (`tls`: the TLS listeners): this
    /// thread's listeners, replaced (the old ones close; their accepted
    /// connections go on). Connections the kernel queued on an old one
    /// are accepted before it closes, which would reset them: on the same
    /// port (a new `bind`), the old listener may have been the one
    /// connections went to (its address the more specific) until now.
    pub(super) fn swap_listeners(&mut self, ls: Vec<TcpListener>, tls: bool) {
        let old = if tls {
            std::mem::replace(&mut self.tls, ls)
        } else {
            std::mem::replace(&mut self.tcp, ls)
        };
        for mut l in old {
            Door::of(&self.core, &mut self.conns, &self.poll).accept_tcp(&l, tls);
            let _ = self.poll.registry().deregister(&mut l);
        }
        let (list, base) = if tls {
            (&mut self.tls, TLS_BASE)
        } else {
            (&mut self.tcp, TCP_BASE)
        };
        for (i, l) in list.iter_mut().enumerate() {
            if let Err(e) = self
                .poll
                .registry()
                .register(l, Token(base + i), Interest::READABLE)
            {
                log::warning(format_args!("Registering a listener: {e}"));
            }
        }
    }
}

/// What accepting a connection touches: the table, the poll set and a few
/// settings, apart from the rest of the worker (a busy script's desk
/// accepts while `core` is lent to the handler, see `busy`).
pub(super) struct Door<'a> {
    pub(super) conns: &'a mut Conns,
    pub(super) poll: &'a Poll,
    pub(super) server: &'a ServerShared,
    pub(super) id: usize,
    pub(super) maxclients: usize,
    pub(super) tcp_keepalive_s: u64,
}

impl<'a> Door<'a> {
    pub(super) fn of(core: &'a Core, conns: &'a mut Conns, poll: &'a Poll) -> Self {
        Door {
            conns,
            poll,
            server: &core.server,
            id: core.id,
            maxclients: core.cfg.maxclients,
            tcp_keepalive_s: core.cfg.tcp_keepalive_s,
        }
    }

    pub(super) fn accept_tcp(&mut self, listener: &TcpListener, tls: bool) {
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warning(format_args!("Accepting client connection: {e}"));
                    return;
                }
            };
            let _ = stream.set_nodelay(true);
            if self.tcp_keepalive_s > 0 {
                let s = socket2::SockRef::from(&stream);
                let ka = socket2::TcpKeepalive::new()
                    .with_time(Duration::from_secs(self.tcp_keepalive_s));
                let _ = s.set_tcp_keepalive(&ka);
            }
            let local = stream
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let is_local = peer.ip().is_loopback();
            let stream = if tls {
                // The context of the moment (CONFIG SET may replace it);
                // connections keep the one they started with.
                let made = crate::server::tls::current()
                    .ok_or_else(|| io::Error::other("no TLS context"))
                    .and_then(|ctx| crate::server::tls::TlsStream::new(stream, ctx));
                match made {
                    Ok(t) => Stream::Tls(Box::new(t)),
                    Err(e) => {
                        log::warning(format_args!("Accepting TLS client connection: {e}"));
                        continue;
                    }
                }
            } else {
                Stream::Tcp(stream)
            };
            self.add_conn(stream, peer.to_string(), local, false, is_local);
        }
    }

    pub(super) fn add_conn(
        &mut self,
        mut stream: Stream,
        addr: String,
        laddr: String,
        unix: bool,
        local: bool,
    ) {
        let server = self.server;
        server.total_connections.fetch_add(1, Ordering::Relaxed);
        let connected = server.connected_clients.fetch_add(1, Ordering::AcqRel);
        if connected >= self.maxclients {
            let _ = stream.write(b"-ERR max number of clients reached\r\n");
            server.connected_clients.fetch_sub(1, Ordering::AcqRel);
            server.rejected_connections.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Redis's protected mode: no password on the default user. Read
        // live, for outside connections only (rare): the loop's cached
        // settings are refreshed once per iteration, and an accept may
        // come in the iteration a CONFIG SET on another thread began in.
        if !local && server.acl.default_user().rules().nopass() && server.config().protected_mode {
            server.rejected_connections.fetch_add(1, Ordering::Relaxed);
            if let Stream::Tls(t) = &mut stream {
                // Redis refuses once the handshake is done, over TLS.
                t.refuse_after_handshake(DENIED);
            } else {
                let _ = stream.write(DENIED);
                server.connected_clients.fetch_sub(1, Ordering::AcqRel);
                return;
            }
        }
        if self.insert_conn(stream, addr, laddr, unix).is_none() {
            server.connected_clients.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Registers a connection admitted by the caller; its slot.
    pub(super) fn insert_conn(
        &mut self,
        mut stream: Stream,
        addr: String,
        laddr: String,
        unix: bool,
    ) -> Option<usize> {
        let server = self.server;
        let slot = match self.conns.free.pop() {
            Some(s) => s,
            None => {
                self.conns.slots.push(None);
                self.conns.gens.push(0);
                self.conns.slots.len() - 1
            }
        };
        if let Err(e) = self.conns.register(self.poll, &mut stream, slot) {
            log::warning(format_args!(
                "Error registering fd event for the new client: {e}"
            ));
            self.conns.free.push(slot);
            return None;
        }
        let fd = stream.raw_fd();
        let now = engine::now_ms();
        let client = ClientState {
            id: server.next_client_id.fetch_add(1, Ordering::Relaxed),
            authenticated: server.acl.default_open(),
            acl: commands::acl::ClientAcl::of(server.acl.default_user()),
            addr,
            laddr,
            unix,
            fd,
            created_ms: now,
            last_interaction_ms: now,
            last_cmd: "NULL".into(),
            home: commands::ctx::Home {
                thread: self.id as u16,
                slot: slot as u32,
                gen: self.conns.gens[slot],
            },
            ..Default::default()
        };
        log::verbose(format_args!("Accepted {}", client.addr));
        server.tracking.connected(client.id, client.home);
        server.ops.slowlog.connected(&client);
        self.conns.slots[slot] = Some(Box::new(Conn::new(stream, self.conns.gens[slot], client)));
        Some(slot)
    }
}

pub(super) const DENIED: &[u8] = b"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";
