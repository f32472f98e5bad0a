//! MONITOR: every command any client runs, as a line to every monitoring
//! client: `+1700000000.123456 [0 127.0.0.1:1234] "set" "k" "v"`.
//!
//! Monitors are clients on any thread. The registry ([`Monitors`]) lists
//! them; the thread that dispatches a command formats its line once and
//! hands it to each monitor's home thread through the pub/sub inboxes
//! (`pubsub::Delivery::Monitor`), where it is written after the replies
//! the monitor already owes. Lines from one thread reach a monitor in the
//! order that thread dispatched them (inboxes are FIFO); commands of
//! different threads interleave as they happen.
//!
//! Which commands, as Redis 7.0: those that pass dispatch's checks (not an
//! unknown command, a wrong arity or a refused one), except those flagged
//! `admin` or `skip_monitor`; a transaction shows its commands, then
//! `exec`; a script shows its EVAL first, then each `redis.call` as
//! `[db lua]`. Passwords are `(redacted)` (see `slowlog::redacted`).
//! The line is fed when the command is dispatched, before it runs (Redis
//! feeds after the call: the same line, earlier).
//!
//! Cost without monitors: one atomic load per command.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock, Weak};

use resp::Args;

use crate::ctx::{ConnCtx, Home, ServerShared};
use crate::error::CmdError;
use crate::pubsub::Delivery;
use crate::table::{flags::*, registry, Resolved};

/// The monitoring clients of every thread.
#[derive(Default)]
pub struct Monitors {
    count: AtomicUsize,
    list: RwLock<Vec<(u64, Home)>>,
    /// The server whose inboxes carry the lines, for the senders that
    /// have no `ServerShared` at hand (a script's commands, on a shard);
    /// set by the first MONITOR.
    server: OnceLock<Weak<ServerShared>>,
}

impl Monitors {
    /// Whether anyone monitors (one atomic load).
    #[inline]
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    pub fn add(&self, id: u64, home: Home) {
        let mut l = self.list.write().unwrap_or_else(|e| e.into_inner());
        if !l.iter().any(|(i, _)| *i == id) {
            l.push((id, home));
            self.count.store(l.len(), Ordering::Release);
        }
    }

    pub fn remove(&self, id: u64) {
        let mut l = self.list.write().unwrap_or_else(|e| e.into_inner());
        l.retain(|(i, _)| *i != id);
        self.count.store(l.len(), Ordering::Release);
    }

    /// Sends `line` to every monitor.
    fn send(&self, ps: &crate::pubsub::PubSub, line: Vec<u8>) {
        let line: Arc<[u8]> = line.into();
        let l = self.list.read().unwrap_or_else(|e| e.into_inner());
        for &(id, to) in l.iter() {
            ps.send_one(Delivery::Monitor {
                to,
                id,
                line: line.clone(),
            });
        }
    }
}

/// Appends Redis's `sdscatrepr` of `a`: quoted, with C escapes.
fn repr(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'"');
    for &b in a {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

/// The line for `args` run by `who` (an address, `lua`, `unix:<path>`)
/// on database `db`, as a RESP simple string.
pub fn line(db: usize, who: &str, name: &str, args: Args<'_>) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut out =
        format!("+{}.{:06} [{db} {who}]", now.as_secs(), now.subsec_micros()).into_bytes();
    let hidden = super::slowlog::redacted(name, args);
    for (j, a) in args.iter().enumerate() {
        out.push(b' ');
        if hidden.contains(&j) {
            out.extend_from_slice(b"\"(redacted)\"");
        } else {
            repr(&mut out, a);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Whether command `r` is shown when it runs on its own.
fn shown(r: Resolved) -> bool {
    !r.spec.has(ADMIN) && !r.spec.has(SKIP_MONITOR)
}

/// How a client appears in a line: its address, or `unix:<path>`.
fn who(c: &crate::ctx::ClientState) -> std::borrow::Cow<'_, str> {
    if c.unix {
        let path = c.addr.strip_suffix(":0").unwrap_or(&c.addr);
        format!("unix:{path}").into()
    } else {
        c.addr.as_str().into()
    }
}

/// The database a line shows: the one selected after the command (Redis
/// feeds the monitors after the call), so SELECT and RESET show the
/// database they select.
fn db_after(name: &str, args: Args<'_>, db: usize, databases: usize) -> usize {
    match name {
        "select" => crate::util::parse_db_index(args.get(1), databases).unwrap_or(db),
        "reset" => 0,
        _ => db,
    }
}

/// Dispatch accepted command `r` from this connection: feeds its line
/// (for EXEC, its queued commands' lines first). Called only while
/// someone monitors.
#[cold]
pub fn dispatched(r: Resolved, args: Args<'_>, ctx: &ConnCtx<'_>) {
    let reg = registry();
    let name = reg.full_name(r.id);
    let ops = ctx.server.ops;
    let databases = ctx.server.databases();
    let mut db = ctx.client.db;
    let me = who(ctx.client);
    if name == "exec" {
        if let Some(m) = &ctx.client.multi {
            let watch_failed = ctx.client.watch.as_ref().is_some_and(|w| w.dirty());
            if !m.aborted && !watch_failed {
                for q in &m.queued {
                    let owned = resp::OwnedArgs::from_slices(q);
                    if let Ok(qr) = reg.resolve(owned.args()) {
                        let qname = reg.full_name(qr.id);
                        db = db_after(qname, owned.args(), db, databases);
                        if shown(qr) || qr.spec.has(SCRIPT) {
                            let l = line(db, &me, qname, owned.args());
                            ops.monitors.send(ctx.server.pubsub, l);
                        }
                    }
                }
            }
        }
    }
    // Scripts are shown before they run, their commands after them
    // (Redis's evalCommand feeds the monitors itself).
    if shown(r) || r.spec.has(SCRIPT) {
        let db = db_after(name, args, db, databases);
        ops.monitors
            .send(ctx.server.pubsub, line(db, &me, name, args));
    }
}

/// A script's `redis.call` of `r` on database `db` (shown as `lua`).
/// Called only while someone monitors.
#[cold]
pub fn from_script(ops: &super::Ops, r: Resolved, db: usize, args: Args<'_>) {
    let server = ops.monitors.server.get().and_then(Weak::upgrade);
    if let (true, Some(server)) = (shown(r), server) {
        let name = registry().full_name(r.id);
        // Held while the run may be taken back (`script::traces`).
        if let Some(l) = crate::script::traces::hold_monitor(line(db, "lua", name, args)) {
            ops.monitors.send(server.pubsub, l);
        }
    }
}

/// Sends a script call's line that `script::traces` held.
pub(crate) fn send_line(ops: &super::Ops, l: Vec<u8>) {
    if let Some(server) = ops.monitors.server.get().and_then(Weak::upgrade) {
        ops.monitors.send(server.pubsub, l);
    }
}

/// MONITOR: this connection receives every command's line from now on
/// (+OK; nothing when it already monitors, as Redis).
pub(crate) fn monitor(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    if c.client.monitor {
        return Ok(());
    }
    c.client.monitor = true;
    let m = &c.server.ops.monitors;
    m.server.get_or_init(|| Arc::downgrade(c.server));
    m.add(c.client.id, c.client.home);
    c.out.ok();
    Ok(())
}

/// The connection stops monitoring (RESET, disconnect).
pub fn stop(server: &crate::ctx::ServerShared, c: &mut crate::ctx::ClientState) {
    if c.monitor {
        c.monitor = false;
        server.ops.monitors.remove(c.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format_as_redis() {
        let a = resp::OwnedArgs::from_slices(&[
            b"set".as_slice(),
            b"k y",
            b"a\"b\\\n\r\t\x07\x08\x01\xff",
        ]);
        let l = String::from_utf8(line(3, "127.0.0.1:5", "set", a.args())).unwrap();
        let (ts, rest) = l.split_once(' ').unwrap();
        assert!(ts.starts_with('+') && ts.len() == 1 + 10 + 1 + 6, "{ts}");
        assert_eq!(
            rest,
            "[3 127.0.0.1:5] \"set\" \"k y\" \"a\\\"b\\\\\\n\\r\\t\\a\\b\\x01\\xff\"\r\n"
        );
        let a = resp::OwnedArgs::from_slices(&[b"auth".as_slice(), b"pw"]);
        assert!(String::from_utf8(line(0, "lua", "auth", a.args()))
            .unwrap()
            .ends_with("[0 lua] \"auth\" \"(redacted)\"\r\n"));
    }
}
