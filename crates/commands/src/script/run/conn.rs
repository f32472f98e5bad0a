//! The connection and server commands a script may call that run on no
//! shard (SELECT, PING, ECHO, PUBLISH, LASTSAVE, COMMAND, TIME): answered
//! by the script's run itself, as Redis's lua client answers them.
//!
//! A few more ([`ON_LUA_CLIENT`]: every HELP, SLOWLOG LEN and RESET, PUBSUB's
//! introspection, PFSELFTEST, MEMORY PURGE and MALLOC-STATS, LOLWUT, the cluster
//! commands that answer "cluster support disabled") depend on no
//! connection: their own handler runs on a client of the script's own,
//! fresh for the call and dropped after it, as Redis runs them on its lua
//! client. The rest of the connection commands change or read the
//! caller's connection (CLIENT, HELLO, MULTI ...) and are flagged
//! `noscript`, refused before this unless DEBUG SET-DISABLE-DENY-SCRIPTS
//! allows them: then CLIENT ID, GETNAME, SETNAME, INFO and LIST run on
//! Redis's Lua client (`connection::listing`), the rest stay refused.

use mlua::{Lua, Value};
use resp::{Args, Reply};

use super::{Run, NOT_SUPPORTED};
use crate::ctx::{ClientState, ConnCtx};
use crate::table::{registry, Exec};

/// The connection commands Redis 7.0.15 runs from a script whose handler
/// here reads no connection state (besides every `...|help`, matched by
/// its suffix). Full names, as the registry gives them.
const ON_LUA_CLIENT: &[&str] = &[
    "slowlog|len",
    "slowlog|reset",
    "pubsub|channels",
    "pubsub|numpat",
    "pubsub|numsub",
    "pubsub|shardchannels",
    "pubsub|shardnumsub",
    "pfselftest",
    "memory|purge",
    "memory|malloc-stats",
    "readonly",
    "readwrite",
    "asking",
    "lolwut",
];

/// Whether `full` runs on a script's own client ([`ON_LUA_CLIENT`]).
fn on_lua_client(full: &str) -> bool {
    full.ends_with("|help") || full.starts_with("cluster|") || ON_LUA_CLIENT.contains(&full)
}

impl Run<'_, '_> {
    /// A connection command called from a script, written to `out`;
    /// `Some` for a call refused (its error table).
    /// [`Self::conn_call`], counted as Redis's `call` counts it (its
    /// statistics, and a failure in errorstats).
    pub(super) fn conn_counted(
        &mut self,
        lua: &Lua,
        r: crate::Resolved,
        args: Args<'_>,
        out: &mut Reply,
    ) -> mlua::Result<Option<(Value, bool)>> {
        let started = std::time::Instant::now();
        if let Some(refused) = self.conn_call(lua, r, args, out)? {
            return Ok(Some(refused));
        }
        let failed = out.as_bytes().first() == Some(&b'-');
        if failed {
            let line = &out.as_bytes()[1..];
            let line = line.strip_suffix(b"\r\n").unwrap_or(line).to_vec();
            self.stats.count_error(&line);
        }
        self.record(r, args, started, failed);
        Ok(None)
    }

    pub(super) fn conn_call(
        &mut self,
        lua: &Lua,
        r: crate::Resolved,
        args: Args<'_>,
        out: &mut Reply,
    ) -> mlua::Result<Option<(Value, bool)>> {
        match registry().full_name(r.id) {
            "select" => match crate::util::parse_db_index(args.get(1), self.ctx.databases) {
                Ok(db) => {
                    self.db = db;
                    out.ok();
                }
                Err(e) => out.error_bytes(&e.line()),
            },
            "ping" => match args.len() {
                1 => out.simple("PONG"),
                _ => out.bulk(args.get(1)),
            },
            "echo" => out.bulk(args.get(1)),
            // (Only with DEBUG SET-DISABLE-DENY-SCRIPTS 1.) LOADAOF and
            // RELOAD replace the data under the script's feet: refused.
            "debug"
                if !crate::util::eq_ic(args.get(1), "loadaof")
                    && !crate::util::eq_ic(args.get(1), "reload") =>
            {
                if let Err(e) = crate::server::debug_now(self.ctx.ops, args, out) {
                    out.error_bytes(&e.line());
                }
            }
            // The script's own client subscribes to nothing: every
            // receiver is another client (Redis's lua client).
            "publish" | "spublish" => match self.ctx.ops.pubsub.get() {
                Some(ps) => {
                    let shard = r.spec.name == "spublish";
                    // Held while the run may be taken back (see
                    // `traces::hold_publish`): the count is the receivers'
                    // now, the messages go when the run completes.
                    let (n, held) = ps.prepare(args.get(1), args.get(2), shard, 0);
                    if let Some(now) = super::super::traces::hold_publish(held.per_thread) {
                        ps.deliver(now);
                    }
                    out.int(n as i64);
                }
                None => return self.reject(lua, r, NOT_SUPPORTED).map(Some),
            },
            "lastsave" => {
                let last = self
                    .ctx
                    .ops
                    .server
                    .get()
                    .and_then(std::sync::Weak::upgrade)
                    .map_or(0, |s| s.persist.lastsave_s());
                out.int(last as i64);
            }
            // COMMAND reads the table only.
            full if full == "command" || full.starts_with("command|") => {
                if let Some(Err(e)) = crate::docs::from_script(full, out, args) {
                    out.error_bytes(&e.line());
                }
            }
            "time" => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                out.array(2);
                out.bulk(now.as_secs().to_string().as_bytes());
                out.bulk(now.subsec_micros().to_string().as_bytes());
            }
            // (Only with DEBUG SET-DISABLE-DENY-SCRIPTS 1.)
            full if full.starts_with("client|") && !full.ends_with("|help") => {
                return self.client_call(lua, r, args, out)
            }
            full => match (r.spec.exec, on_lua_client(full)) {
                (Exec::Conn(handler), true) => self.on_lua_client(handler, args, out),
                _ => return self.reject(lua, r, NOT_SUPPORTED).map(Some),
            },
        }
        Ok(None)
    }

    /// CLIENT ID, GETNAME, SETNAME, INFO and LIST from the script, on
    /// Redis's Lua client (see `connection::listing`); other subcommands
    /// are refused. Live, it reads the connections SLOWLOG GET reads
    /// without holding every shard (its lent loop's and its sender); the
    /// others come from what their loops published.
    fn client_call(
        &mut self,
        lua: &Lua,
        r: crate::Resolved,
        args: Args<'_>,
        out: &mut Reply,
    ) -> mlua::Result<Option<(Value, bool)>> {
        let Some(server) = self.ctx.ops.server.get().and_then(std::sync::Weak::upgrade) else {
            return self.reject(lua, r, NOT_SUPPORTED).map(Some);
        };
        let c = crate::connection::LuaClient {
            id: self.lua_client,
            db: self.db,
            resp3: self.resp3,
            server: &server,
        };
        let (sender, scratch) = (self.ctx.sender, self.scratch);
        let mut live = |f: &mut dyn FnMut(&ClientState, &crate::coord::ClientIo)| {
            // (On gathered copies the lent loop is not the script's: as
            // for SLOWLOG GET, none is read live.)
            if scratch {
                return;
            }
            super::super::busy::for_each_home_client(f);
            if let Some(s) = sender {
                let io = crate::coord::ClientIo {
                    tot_mem: s.mem_bytes,
                    ..Default::default()
                };
                f(s.client, &io);
            }
        };
        let caller = (self.ctx.client, self.caller_cmd);
        match c.call(registry().full_name(r.id), args, &mut live, caller, out) {
            Ok(true) => {}
            Ok(false) => return self.reject(lua, r, NOT_SUPPORTED).map(Some),
            Err(e) => out.error_bytes(&e.line()),
        }
        Ok(None)
    }

    /// Runs a connection command's own handler on a fresh client of the
    /// script's (its database and protocol), its reply or error in `out`.
    fn on_lua_client(
        &mut self,
        handler: crate::table::ConnHandler,
        args: Args<'_>,
        out: &mut Reply,
    ) {
        let Some(server) = self.ctx.ops.server.get().and_then(std::sync::Weak::upgrade) else {
            out.error_bytes(format!("ERR {NOT_SUPPORTED}").as_bytes());
            return;
        };
        let mut client = ClientState {
            db: self.db,
            resp3: self.resp3,
            authenticated: true,
            ..ClientState::default()
        };
        let mut c = ConnCtx {
            client: &mut client,
            out,
            server: &server,
            home: self.ctx.shard.id,
            key_shards: &[],
        };
        if let Err(e) = handler(&mut c, args) {
            out.error_bytes(&e.line());
        }
    }
}
