//! Server commands: INFO, CONFIG, SHUTDOWN, TIME, DEBUG, and the
//! whole-keyspace commands that fan out to every shard.

use resp::Args;

use crate::ctx::ConnCtx;
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};

pub(crate) const COMMANDS: &[CommandSpec] = &[CommandSpec::new(
    "shutdown",
    -1,
    ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | SENTINEL | ALLOW_BUSY,
    NO_KEYS,
    Exec::Conn(shutdown),
    &["admin", "slow", "dangerous"],
)];

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: stops the server; the
/// client sees the connection close (no reply), as in Redis.
fn shutdown(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.server.request_shutdown();
    c.client.close_after_reply = true;
    Ok(())
}
