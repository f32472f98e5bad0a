//! The connection and server commands a script may call that run on no
//! shard (SELECT, PING, ECHO, PUBLISH, LASTSAVE, COMMAND, TIME): answered
//! by the script's run itself, as Redis's lua client answers them.

use mlua::{Lua, Value};
use resp::{Args, Reply};

use super::{Run, NOT_SUPPORTED};
use crate::table::registry;

impl Run<'_, '_> {
    /// A connection command called from a script, written to `out`;
    /// `Some` for a call refused (its error table).
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
            // The script's own client subscribes to nothing: every
            // receiver is another client (Redis's lua client).
            "publish" | "spublish" => match self.ctx.ops.pubsub.get() {
                Some(ps) => {
                    let shard = r.spec.name == "spublish";
                    let (n, _) = ps.publish(args.get(1), args.get(2), shard, 0);
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
            _ => return self.reject(lua, r, NOT_SUPPORTED).map(Some),
        }
        Ok(None)
    }
}
