//! The replica side's commands and data steps (issue 25): REPLICAOF /
//! SLAVEOF, and the two things the runtime's link to a master needs from
//! the command layer: parsing a full sync's payload into detached shards
//! ([`parse_payload`]) and swapping them in on every shard at one instant
//! ([`load_coordinator`]).
//!
//! The link itself (sockets, the handshake, the master's stream) is the
//! runtime's (`src/server/repl/replica.rs`); this module only changes the
//! shared state (`repl`) and the data.
//!
//! Loading at one instant: the payload is parsed off the request path into
//! fresh shards (one per real shard, each key where its hash puts it), then
//! one job per shard, run under the transaction layer's whole-keyspace
//! Write locks, exchanges every database's contents with its fresh copy.
//! No client command can run between two shards' exchanges, so nobody sees
//! a dataset half old and half new; a payload that does not parse never
//! touches the live data (Redis's disk-based load keeps the old dataset
//! until the new one loaded).

use std::path::Path;
use std::sync::Arc;

use engine::Shard;
use resp::{Args, Reply};

use crate::coord::{Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ServerShared};
use crate::error::CmdError;
use crate::repl::{LinkState, Role};
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

const ACL: &[&str] = &["admin", "slow", "dangerous"];

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "replicaof",
        3,
        ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING,
        NO_KEYS,
        Exec::Coord(replicaof),
        ACL,
    )
    .with_locks(promotion_locks),
    CommandSpec::new(
        "slaveof",
        3,
        ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING,
        NO_KEYS,
        Exec::Coord(replicaof),
        ACL,
    )
    .with_locks(promotion_locks),
];

/// Redis's `shared.roslaveerr`.
pub const READONLY_ERR: &str = "READONLY You can't write against a read only replica.";
/// Redis's `shared.masterdownerr`.
pub const MASTERDOWN_ERR: &str = "MASTERDOWN Link with MASTER is down and \
     replica-serve-stale-data is set to 'no'.";

fn is_no_one(args: Args<'_>) -> bool {
    eq_ic(args.get(1), "no") && eq_ic(args.get(2), "one")
}

/// Whether `spec` with `args` is REPLICAOF / SLAVEOF NO ONE or FAILOVER
/// (a promotion, or a failover's start or abort: whole-keyspace Write
/// locks, in a transaction too).
pub(crate) fn promotes(spec: &CommandSpec, args: Args<'_>) -> bool {
    (matches!(spec.name, "replicaof" | "slaveof") && is_no_one(args))
        // Not CLUSTER FAILOVER (a subcommand of the same name).
        || (spec.name == "failover" && eq_ic(args.get(0), "failover"))
}

/// REPLICAOF NO ONE runs under whole-keyspace Write locks: no write runs
/// while the stream changes hands (see `repl::ReplRuntime`), nor does the
/// runtime's coordinator that ends the stream (Read locks). The other
/// form touches no data.
fn promotion_locks(
    args: Args<'_>,
    _db: usize,
    nshards: usize,
    _: &crate::ServerShared,
) -> Option<crate::tx::LockSet> {
    let mut set = crate::tx::LockSet::default();
    if is_no_one(args) {
        set.whole(nshards, crate::tx::Mode::Write);
    }
    Some(set)
}

/// REPLICAOF host port | NO ONE (and SLAVEOF): `+OK`, or `+OK Already
/// connected to specified master` when nothing changes; `-ERR Invalid
/// master port` for a port outside 0..=65535.
///
/// NO ONE on a replica is a promotion: when a backlog exists the shards
/// start recording (the stream goes on with this server's writes) and, at
/// the instant every lock is held, the role changes.
fn replicaof(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    if c.server.repl.lock().failover.state != crate::repl::failover::State::None {
        return Err(CmdError::err("REPLICAOF not allowed while failing over."));
    }
    if is_no_one(args) {
        let server = c.server.clone();
        let who = format!("id={} addr={}", c.client.id, c.client.addr);
        let plan = promotion_plan(&server);
        return Ok(OneStep::boxed(
            plan,
            move |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
                promote(&server, &format!("user request from '{who}'"));
                out.ok();
                Ok(())
            },
        ));
    }
    if c.client.master {
        return Err(CmdError::err(
            "Command is not valid when client is a replica.",
        ));
    }
    let port = parse_i64(args.get(2))
        .ok()
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| CmdError::err("Invalid master port"))?;
    let host = String::from_utf8_lossy(args.get(1)).into_owned();
    let server = c.server.clone();
    let who = format!("id={} addr={}", c.client.id, c.client.addr);
    Ok(OneStep::boxed(
        Plan::default(),
        move |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
            if !set_master(&server, &host, port) {
                crate::persist::log(
                    false,
                    "REPLICAOF would result into synchronization with the master we are \
                     already connected with. No operation performed.",
                );
                out.simple("OK Already connected to specified master");
                return Ok(());
            }
            crate::persist::log(
                false,
                &format!("REPLICAOF {host}:{port} enabled (user request from '{who}')"),
            );
            out.ok();
            Ok(())
        },
    ))
}

/// The jobs of a promotion (REPLICAOF NO ONE, a failover's end on either
/// side), to run under whole-keyspace Write locks: when a backlog exists
/// the shards start recording (the stream goes on with this server's
/// writes). [`promote`] then changes the role at the instant every lock
/// is held.
pub(crate) fn promotion_plan(server: &Arc<ServerShared>) -> Plan {
    let replica = server.repl.is_replica();
    let runtime = server.repl.runtime.get().cloned();
    let record = replica && runtime.as_ref().is_some_and(|r| r.prepare_promotion());
    let mut plan = Plan::default();
    if let Some(rt) = runtime.filter(|_| record) {
        // Readied again under the locks: a stream that ended between
        // the build and the grant comes back before the shards record.
        plan.run_all(server.nshards, move |env| {
            if rt.prepare_promotion() {
                env.shard.outbox.records_on = true;
            }
        });
    }
    plan
}

/// A replica becomes a master (see [`promotion_plan`]), logged as Redis's
/// "MASTER MODE enabled (<why>)"; nothing on a master. True if it was a
/// replica.
pub(crate) fn promote(server: &ServerShared, why: &str) -> bool {
    if !unset_master(server) {
        return false;
    }
    if let Some(r) = server.repl.runtime.get() {
        r.promoted();
    }
    crate::persist::log(false, &format!("MASTER MODE enabled ({why})"));
    true
}

/// Makes this server a replica of `host:port` (REPLICAOF, `replicaof`);
/// false if it already is one of that master. The link thread notices the
/// new generation, drops any older link and connects.
pub fn set_master(server: &ServerShared, host: &str, port: u16) -> bool {
    let repl = &server.repl;
    let mut g = repl.lock();
    if let Role::Replica {
        host: h, port: p, ..
    } = &g.role
    {
        if h.eq_ignore_ascii_case(host) && *p == port {
            return false;
        }
    }
    server.set_role(
        &mut g,
        Role::Replica {
            host: host.to_owned(),
            port,
            link: LinkState::Connect,
        },
    );
    drop(g);
    if let Some(r) = repl.runtime.get() {
        r.demoted();
    }
    // CONFIG GET replicaof (and CONFIG REWRITE) show the live master.
    show_master(server, vec![host.to_owned(), port.to_string()]);
    true
}

pub(crate) fn show_master(server: &ServerShared, words: Vec<String>) {
    let mut cfg = server.config.write().unwrap_or_else(|e| e.into_inner());
    cfg.replicaof = words;
}

/// REPLICAOF NO ONE: a replica becomes a master with a new replication ID
/// (the old one kept as `replid2`, Redis's `shiftReplicationId`). False if
/// it was a master already.
pub fn unset_master(server: &ServerShared) -> bool {
    let repl = &server.repl;
    let mut g = repl.lock();
    if !matches!(g.role, Role::Replica { .. }) {
        return false;
    }
    crate::repl::Repl::shift_replid(&mut g.ids);
    g.link = Default::default();
    server.set_role(&mut g, Role::Master);
    drop(g);
    show_master(server, Vec::new());
    true
}

/// Parses a full sync's payload at `path` into fresh shards, one per real
/// shard (each key on the shard its hash picks), keeping keys already
/// expired (the master deletes them). The live data is not touched.
/// Returns the shards and the database the master's stream is in
/// (`repl-stream-db`: a replica's payload; 0 when absent).
pub fn parse_payload(server: &ServerShared, path: &Path) -> Result<(Vec<Shard>, usize), String> {
    let cfg = server.config();
    let mut shards: Vec<Shard> = (0..server.nshards)
        .map(|id| Shard::new(id, cfg.databases))
        .collect();
    let limits = crate::ctx::enc_limits_of(&cfg);
    let db = match crate::persist::load_as(path, &mut shards, limits, true, server.ops)? {
        Some((_, _, db)) => db.unwrap_or(0),
        None => return Err(format!("{}: no such file", path.display())),
    };
    if db >= cfg.databases {
        return Err(format!("repl-stream-db {db} out of range"));
    }
    Ok((shards, db))
}

/// The coordinator that replaces every shard's data with `fresh` at one
/// instant (wrapped in whole-keyspace Write locks), then runs `at_instant`
/// (the runtime sets the replication IDs there) and replies `+OK` (the
/// master's connection drops it).
pub fn load_coordinator(
    server: &Arc<ServerShared>,
    home: usize,
    fresh: Vec<Shard>,
    at_instant: Box<dyn FnOnce() + Send>,
) -> Box<dyn Coordinator> {
    let mut plan = Plan::default();
    for (i, mut mine) in fresh.into_iter().enumerate() {
        plan.run(i, move |env| {
            env.shard.tracked.clear();
            for (db, new) in env.shard.dbs.iter_mut().zip(mine.dbs.iter_mut()) {
                engine::Db::swap_contents(db, new);
            }
            // The old data goes with `mine`: with `replica-lazy-flush`
            // freed on another thread, as FLUSHALL ASYNC does, so this
            // shard's loop does not stall; without it here (Redis's
            // emptyData without EMPTYDB_ASYNC).
            if env.shard.lazy().replica_flush {
                let keys = mine.key_count() as u64;
                engine::lazyfree::free_in_thread(mine, keys);
            } else {
                drop(mine);
            }
        });
    }
    let server2 = server.clone();
    let coord = OneStep::boxed(
        plan,
        move |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
            server2.persist.after_replica_load(&server2);
            crate::keys::invalidate_all(&server2);
            at_instant();
            out.ok();
            Ok(())
        },
    );
    let mut set = crate::tx::LockSet::default();
    set.whole(server.nshards, crate::tx::Mode::Write);
    crate::tx::TxCoord::wrap(home, coord, set)
}

/// Redis's read-only replica check in processCommand: `Some(error)` for a
/// normal client's write while `replica-read-only` is on. Called only on a
/// replica.
pub fn read_only_refusal(
    server: &ServerShared,
    client: &ClientState,
    flags: u32,
) -> Option<&'static str> {
    if client.master || flags & WRITE == 0 {
        return None;
    }
    let cfg = server.config.read().unwrap_or_else(|e| e.into_inner());
    cfg.replica_read_only.then_some(READONLY_ERR)
}

/// Redis's `replica-serve-stale-data no` check in processCommand (after
/// the pub/sub context check): `Some(error)` for a normal client's command
/// that `denies_stale` (it lacks the STALE flag: see admission) while the
/// link to the master is down. Called only on a replica; `denies_stale`
/// only while the replica is stale.
pub fn stale_refusal(
    server: &ServerShared,
    client: &ClientState,
    denies_stale: impl FnOnce() -> bool,
) -> Option<&'static str> {
    if client.master || !server.ops.running_stale() {
        return None;
    }
    denies_stale().then_some(MASTERDOWN_ERR)
}

/// INFO replication's replica lines after `role:slave`, up to
/// `connected_slaves` (Redis 7.0's order and names); `None` on a master.
pub fn info_fields(server: &ServerShared) -> Option<String> {
    use std::fmt::Write;
    let (host, port, link, ids, info) = {
        let g = server.repl.lock();
        match &g.role {
            Role::Master => return None,
            Role::Replica { host, port, link } => {
                (host.clone(), *port, *link, g.ids.clone(), g.link.clone())
            }
        }
    };
    let cfg = server.config();
    let now_ms = engine::now_ms();
    let secs_since = |ms: u64| (now_ms.saturating_sub(ms) / 1000) as i64;
    let up = link == LinkState::Connected;
    let last_io = server
        .repl
        .last_io_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut o = String::new();
    let _ = write!(o, "master_host:{host}\r\nmaster_port:{port}\r\n");
    let _ = write!(
        o,
        "master_link_status:{}\r\n",
        if up { "up" } else { "down" }
    );
    let _ = write!(
        o,
        "master_last_io_seconds_ago:{}\r\n",
        if up { secs_since(last_io) } else { -1 }
    );
    let _ = write!(
        o,
        "master_sync_in_progress:{}\r\n",
        u8::from(info.sync_in_progress)
    );
    // Redis shows 1 before any master connection was made.
    let offset = if up || info.down_since_ms != 0 {
        ids.master_repl_offset.max(1)
    } else {
        1
    };
    // Read: what the master connection consumed (run or in flight);
    // applied: what it finished (Redis's read_reploff and reploff).
    let read = if up {
        server
            .repl
            .read_offset
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(offset)
    } else {
        offset
    };
    let _ = write!(
        o,
        "slave_read_repl_offset:{read}\r\nslave_repl_offset:{offset}\r\n"
    );
    if info.sync_in_progress {
        let total = info.sync_total_bytes;
        let read = info.sync_read_bytes as i64;
        // Redis divides by the size even when it is -1 (EOF-marked).
        let perc = if total != 0 {
            read as f64 / total as f64 * 100.0
        } else {
            0.0
        };
        let _ = write!(
            o,
            "master_sync_total_bytes:{total}\r\nmaster_sync_read_bytes:{read}\r\n\
             master_sync_left_bytes:{}\r\nmaster_sync_perc:{perc:.2}\r\n\
             master_sync_last_io_seconds_ago:{}\r\n",
            total - read,
            secs_since(info.sync_last_io_ms)
        );
    }
    if !up {
        let down = if info.down_since_ms == 0 {
            -1
        } else {
            secs_since(info.down_since_ms)
        };
        let _ = write!(o, "master_link_down_since_seconds:{down}\r\n");
    }
    let _ = write!(
        o,
        "slave_priority:{}\r\nslave_read_only:{}\r\nreplica_announced:{}\r\n",
        cfg.replica_priority,
        u8::from(cfg.replica_read_only),
        u8::from(cfg.replica_announced)
    );
    Some(o)
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    #[test]
    fn replicaof_replies_and_errors() {
        let mut t = TestServer::new(2);
        assert_eq!(
            t.run(&["REPLICAOF", "127.0.0.1", "70000"]),
            "-ERR Invalid master port\r\n"
        );
        assert_eq!(
            t.run(&["REPLICAOF", "127.0.0.1", "x"]),
            "-ERR Invalid master port\r\n"
        );
        assert_eq!(t.run(&["REPLICAOF", "NO", "ONE"]), "+OK\r\n");
        assert_eq!(t.run(&["REPLICAOF", "127.0.0.1", "1"]), "+OK\r\n");
        assert_eq!(
            t.run(&["SLAVEOF", "127.0.0.1", "1"]),
            "+OK Already connected to specified master\r\n"
        );
        assert_eq!(
            t.run(&["SET", "k", "v"]),
            format!("-{}\r\n", super::READONLY_ERR)
        );
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
        let before = t.server.repl.ids();
        assert_eq!(t.run(&["REPLICAOF", "no", "one"]), "+OK\r\n");
        let after = t.server.repl.ids();
        assert_eq!(after.replid2, before.replid);
        assert_eq!(
            after.second_repl_offset,
            before.master_repl_offset as i64 + 1
        );
        assert_eq!(t.run(&["SET", "k", "v"]), "+OK\r\n");
        assert_eq!(
            t.run(&["REPLICAOF", "a"]),
            "-ERR wrong number of arguments for 'replicaof' command\r\n"
        );
    }
}
