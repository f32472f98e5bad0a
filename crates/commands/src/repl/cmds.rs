//! The commands of the master side of replication: REPLCONF, PSYNC and
//! SYNC (what a replica sends), and WAIT.
//!
//! They record what was asked on the client and leave the acting to the
//! runtime, which owns sockets and the stream: PSYNC / SYNC write no
//! reply and mark the connection (`ClientState::replica`'s `sync`); the
//! runtime takes its socket off the event loop once its earlier replies
//! are out, and answers `+FULLRESYNC` / `+CONTINUE` from the replication
//! thread. WAIT writes no reply when it must block (`repl_wait`); the
//! runtime pauses the connection and answers when enough replicas
//! acknowledged, or at the timeout.

use std::sync::Arc;

use resp::{Args, Reply};

use super::{Role, SyncRequest, WaitRequest};
use crate::coord::{Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx};
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

const ADMIN_ACL: &[&str] = &["admin", "slow", "dangerous"];

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "replconf",
        -1,
        ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY,
        NO_KEYS,
        Exec::Conn(replconf),
        ADMIN_ACL,
    ),
    CommandSpec::new(
        "psync",
        -3,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI,
        NO_KEYS,
        Exec::Coord(psync),
        ADMIN_ACL,
    )
    .with_locks(psync_locks),
    CommandSpec::new(
        "sync",
        1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI,
        NO_KEYS,
        Exec::Conn(sync),
        ADMIN_ACL,
    ),
    CommandSpec::new(
        "wait",
        3,
        NOSCRIPT,
        NO_KEYS,
        Exec::Conn(wait),
        &["slow", "connection"],
    ),
];

/// Redis's NET_HOST_STR_LEN: the longest `ip-address` accepted.
const HOST_STR_MAX: usize = 256;

/// REPLCONF option value [option value ...]: `+OK`, except `ACK` and
/// `GETACK`, which get no reply (a replica's ACKs arrive on its link,
/// read by the runtime; a GETACK is a master's question to its replica).
/// Redis's errors: an odd number of arguments is a syntax error; an
/// unknown option "Unrecognized REPLCONF option: <name>".
fn replconf(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let mut hello = c.client.replica.take().unwrap_or_default();
    let res = (|| {
        let mut i = 1;
        while i < args.len() {
            let (opt, val) = (args.get(i), args.get(i + 1));
            if eq_ic(opt, "listening-port") {
                let p = parse_i64(val)?;
                hello.listening_port = u16::try_from(p).unwrap_or(0);
            } else if eq_ic(opt, "ip-address") {
                if val.len() >= HOST_STR_MAX {
                    return Err(CmdError::err(format!(
                        "REPLCONF ip-address provided by replica instance is too long: {} bytes",
                        val.len()
                    )));
                }
                hello.ip_address = Some(String::from_utf8_lossy(val).into_owned());
            } else if eq_ic(opt, "capa") {
                // Unknown capabilities are ignored (Redis: forward
                // compatibility).
                if eq_ic(val, "eof") {
                    hello.capa_eof = true;
                } else if eq_ic(val, "psync2") {
                    hello.capa_psync2 = true;
                }
            } else if eq_ic(opt, "ack") || eq_ic(opt, "getack") {
                return Ok(false);
            } else if eq_ic(opt, "rdb-only") || eq_ic(opt, "rdb-filter-only") {
                // Accepted (redis-cli --rdb); nothing to remember.
            } else {
                return Err(CmdError::err(format!(
                    "Unrecognized REPLCONF option: {}",
                    String::from_utf8_lossy(opt)
                )));
            }
            i += 2;
        }
        Ok(true)
    })();
    c.client.replica = Some(hello);
    if res? {
        c.out.ok();
    }
    Ok(())
}

/// A replica may sync only from a master, or from a replica whose own
/// link is up (Redis's NOMASTERLINK).
fn may_sync(c: &ConnCtx<'_>) -> Result<(), CmdError> {
    let g = c.server.repl.lock();
    if g.failover.state != super::failover::State::None {
        return Err(CmdError::Raw(
            "NOMASTERLINK Can't SYNC while failing over".into(),
        ));
    }
    match &g.role {
        Role::Replica { link, .. } if *link != super::LinkState::Connected => Err(CmdError::Raw(
            "NOMASTERLINK Can't SYNC while not connected with my master".into(),
        )),
        _ => Ok(()),
    }
}

/// `PSYNC replid offset FAILOVER`: the master asks this replica to take
/// over (a coordinated failover, see `failover`).
fn takes_over(args: Args<'_>) -> bool {
    args.len() > 3 && eq_ic(args.get(3), "failover")
}

/// PSYNC FAILOVER promotes this replica: whole-keyspace Write locks, as
/// REPLICAOF NO ONE. A plain PSYNC touches no data.
fn psync_locks(
    args: Args<'_>,
    _db: usize,
    nshards: usize,
    _: &crate::ServerShared,
) -> Option<crate::tx::LockSet> {
    let mut set = crate::tx::LockSet::default();
    if takes_over(args) {
        set.whole(nshards, crate::tx::Mode::Write);
    }
    Some(set)
}

/// PSYNC replicationid offset [FAILOVER]: no reply here; the runtime
/// takes the connection over (see the module docs). With FAILOVER (Redis
/// 6.2's coordinated failover), a replica whose replication ID is
/// `replicationid` first becomes a master, so that its old master
/// continues from it (`+CONTINUE` with the new ID); a master refuses it,
/// and a replica another ID, with Redis's errors.
fn psync(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let nothing = |_: Vec<()>, _: &mut Reply, _: &mut ClientState| Ok(());
    if c.client.replica.as_ref().is_some_and(|h| h.sync.is_some()) {
        return Ok(OneStep::boxed(Plan::default(), nothing));
    }
    let server = c.server.clone();
    let takeover = takes_over(args);
    if takeover {
        if !server.repl.is_replica() {
            return Err(CmdError::err("PSYNC FAILOVER can't be sent to a master."));
        }
        if !eq_ic(args.get(1), &server.repl.ids().replid) {
            return Err(CmdError::err("PSYNC FAILOVER replid must match my replid."));
        }
    } else {
        may_sync(c)?;
    }
    let offset = parse_i64(args.get(2))?;
    let replid = String::from_utf8_lossy(args.get(1)).into_owned();
    if !takeover {
        mark_sync(c, SyncRequest::Psync { replid, offset });
        return Ok(OneStep::boxed(Plan::default(), nothing));
    }
    crate::persist::log(
        false,
        &format!("Failover request received for replid {replid}."),
    );
    let who = format!("id={} addr={}", c.client.id, c.client.addr);
    mark_sync(c, SyncRequest::Psync { replid, offset });
    let plan = crate::replica::promotion_plan(&server);
    Ok(OneStep::boxed(
        plan,
        move |_: Vec<()>, _: &mut Reply, _: &mut ClientState| {
            crate::replica::promote(&server, &format!("failover request from '{who}'"));
            Ok(())
        },
    ))
}

/// Records the sync `req` on the connection, which closes (the runtime
/// takes its socket) once its earlier replies are out.
fn mark_sync(c: &mut ConnCtx<'_>, req: SyncRequest) {
    let hello = c.client.replica.get_or_insert_with(Default::default);
    hello.sync = Some(req);
    c.client.close_after_reply = true;
}

/// SYNC: the old protocol, a full sync without the `+FULLRESYNC` line.
fn sync(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    if c.client.replica.as_ref().is_some_and(|h| h.sync.is_some()) {
        return Ok(());
    }
    may_sync(c)?;
    mark_sync(c, SyncRequest::Sync);
    Ok(())
}

/// WAIT numreplicas timeout: the number of replicas that acknowledged
/// this client's writes, once `numreplicas` did or at the timeout
/// (milliseconds, 0: forever). Replies at once for `numreplicas <= 0`;
/// inside MULTI (see `multi`), at once with the count. (Redis also
/// replies at once when the replicas acknowledged the client's last
/// write offset; here that offset is known only once the stream writer
/// reaches the client's records, a few milliseconds later.)
fn wait(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if c.server.repl.is_replica() {
        return Err(CmdError::err(
            "WAIT cannot be used with replica instances. Please also note that since Redis 4.0 \
             if a replica is configured to be writable (which is not the default) writes to \
             replicas are just local and are not propagated.",
        ));
    }
    let numreplicas = parse_i64(args.get(1))?;
    let timeout_ms = parse_i64(args.get(2))
        .map_err(|_| CmdError::err("timeout is not an integer or out of range"))?;
    if timeout_ms < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    if numreplicas <= 0 {
        c.out
            .int(c.server.repl.acked(c.server.repl.offset()) as i64);
        return Ok(());
    }
    // Even when every replica acknowledged the stream's current offset,
    // this client's last writes may not be in it yet (their records are
    // still on their way to the stream writer): the runtime fixes the
    // target offset behind them, then answers.

    let deadline_ms = if timeout_ms == 0 {
        0
    } else {
        engine::now_ms().saturating_add(timeout_ms as u64)
    };
    c.client.repl_wait = Some(Box::new(WaitRequest {
        numreplicas: numreplicas as u64,
        deadline_ms,
        target: None::<Arc<std::sync::atomic::AtomicU64>>,
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    #[test]
    fn replconf_answers_as_redis() {
        let mut t = TestServer::new(1);
        assert_eq!(t.run(&["REPLCONF"]), "+OK\r\n");
        assert_eq!(
            t.run(&["REPLCONF", "listening-port"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(t.run(&["REPLCONF", "listening-port", "6380"]), "+OK\r\n");
        assert_eq!(
            t.run(&["REPLCONF", "listening-port", "x"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(
            t.run(&["REPLCONF", "capa", "eof", "capa", "psync2"]),
            "+OK\r\n"
        );
        assert_eq!(t.run(&["REPLCONF", "ack", "10"]), "");
        assert_eq!(t.run(&["REPLCONF", "getack", "*"]), "");
        assert_eq!(
            t.run(&["REPLCONF", "foo", "bar"]),
            "-ERR Unrecognized REPLCONF option: foo\r\n"
        );
        let h = t.client.replica.clone().unwrap();
        assert_eq!(h.listening_port, 6380);
        assert!(h.capa_eof && h.capa_psync2);
    }

    #[test]
    fn psync_marks_the_connection_and_replies_nothing() {
        let mut t = TestServer::new(1);
        assert_eq!(
            t.run(&["PSYNC", "?", "x"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert!(!t.client.close_after_reply);
        assert_eq!(t.run(&["PSYNC", "?", "-1"]), "");
        assert!(t.client.close_after_reply);
        assert_eq!(
            t.client.replica.as_ref().unwrap().sync,
            Some(super::SyncRequest::Psync {
                replid: "?".into(),
                offset: -1
            })
        );
    }

    #[test]
    fn wait_errors_and_immediate_answers() {
        let mut t = TestServer::new(1);
        assert_eq!(t.run(&["WAIT", "0", "0"]), ":0\r\n");
        assert_eq!(t.run(&["WAIT", "-1", "0"]), ":0\r\n");
        assert_eq!(
            t.run(&["WAIT", "x", "0"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(
            t.run(&["WAIT", "1", "x"]),
            "-ERR timeout is not an integer or out of range\r\n"
        );
        assert_eq!(t.run(&["WAIT", "1", "-1"]), "-ERR timeout is negative\r\n");
        assert_eq!(t.run(&["WAIT", "1", "100"]), "");
        assert_eq!(t.client.repl_wait.as_ref().unwrap().numreplicas, 1);
        t.client.repl_wait = None;
        // Inside MULTI: at once, with the count.
        t.run(&["MULTI"]);
        t.run(&["WAIT", "1", "0"]);
        assert_eq!(t.run(&["EXEC"]), "*1\r\n:0\r\n");
        assert!(t.client.repl_wait.is_none());
    }
}
