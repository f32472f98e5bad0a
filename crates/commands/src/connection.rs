//! Connection commands: state that belongs to one client (protocol,
//! selected database, name, reply mode). They run on the home thread and
//! touch no shard data.

use resp::Args;

use crate::ctx::ConnCtx;
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::parse_db_index;

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "ping",
        -1,
        FAST | SENTINEL,
        NO_KEYS,
        Exec::Conn(ping),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "echo",
        2,
        FAST,
        NO_KEYS,
        Exec::Conn(echo),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "select",
        2,
        LOADING | STALE | FAST,
        NO_KEYS,
        Exec::Conn(select),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "quit",
        -1,
        ALLOW_BUSY | NOSCRIPT | LOADING | STALE | FAST | NO_AUTH,
        NO_KEYS,
        Exec::Conn(quit),
        &["fast", "connection"],
    ),
];

/// PING [message]: PONG, or the message as a bulk string.
fn ping(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    match args.len() {
        1 => c.out.simple("PONG"),
        2 => c.out.bulk(args.get(1)),
        _ => return Err(CmdError::WrongArity("ping".into())),
    }
    Ok(())
}

fn echo(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    c.out.bulk(args.get(1));
    Ok(())
}

fn select(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    c.client.db = parse_db_index(args.get(1), c.server.databases())?;
    c.out.ok();
    Ok(())
}

/// QUIT: +OK, then the connection closes.
fn quit(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.ok();
    c.client.close_after_reply = true;
    Ok(())
}
