//! FAILOVER (Redis 6.2+'s coordinated failover): a master hands its role
//! to one of its replicas without losing a write. This module owns the
//! command, the failover's state (`ReplInner::failover`, INFO's
//! `master_failover_state`) and its transitions; the runtime drives it
//! (`server/repl`: the cron checks the replicas' acknowledgements and the
//! timeout, the link sends `PSYNC ... FAILOVER`).
//!
//! The process, as Redis's `failoverCommand` / `updateFailoverStatus`:
//!
//! 1. FAILOVER pauses writes (as CLIENT PAUSE WRITE, its own purpose:
//!    `ops::pause`) and enters `waiting-for-sync`. It runs under
//!    whole-keyspace Write locks, so every write admitted before the pause
//!    finished first; at its instant the runtime queues a mark into the
//!    stream behind their records ([`super::ReplRuntime::failover_started`]):
//!    once the mark ran (`flushed`), `master_repl_offset` holds every
//!    write. (Redis is single-threaded: its offset always does.)
//! 2. The cron waits until the target (TO host port, else the first
//!    replica) acknowledged exactly that offset, then demotes this server
//!    to a replica of the target ([`demote`]: `failover-in-progress`). At
//!    TIMEOUT the failover aborts, unless FORCE, which demotes anyway.
//! 3. The link to the target sends `PSYNC <replid> <offset> FAILOVER`; the
//!    target, still a replica of this server with the same ID, promotes
//!    itself (`cmds::psync`) and answers `+CONTINUE <its new ID>`. On that
//!    answer (or `+FULLRESYNC`) the failover ends and writes resume (the
//!    held ones then get READONLY); on any other the failover aborts and
//!    this server becomes a master again ([`abort_coordinator`]).
//!
//! FAILOVER ABORT ends it at any stage (a demoted server is promoted back
//! under the command's locks). While a failover runs, REPLICAOF and syncs
//! of other replicas are refused, as Redis.
//!
//! Known difference: a write admitted on another thread in the instant
//! before the pause, whose shard grants FAILOVER's locks before the
//! write's, runs after the mark; the cron compares with the live offset,
//! so such a write counts once its record reached the stream (within the
//! writer's poll), but a check in between would miss it. Not done: Redis
//! sends no `REPLCONF GETACK` while clients are paused; here a WAIT during
//! a failover still adds one to the stream (the target then acknowledges
//! it too, so the failover only waits for that ACK).

use std::sync::Arc;

use resp::{Args, Reply};

use super::{ReplicaState, Role};
use crate::coord::{Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ServerShared};
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

pub(crate) const COMMANDS: &[CommandSpec] = &[CommandSpec::new(
    "failover",
    -1,
    ADMIN | NOSCRIPT | STALE,
    NO_KEYS,
    Exec::Coord(failover),
    &["admin", "slow", "dangerous"],
)
.with_locks(whole_write)];

/// Redis's `failover_state`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum State {
    #[default]
    None,
    /// Writes paused, waiting for the target to acknowledge the offset.
    WaitForSync,
    /// Demoted; the link to the target asks it to take over.
    InProgress,
}

impl State {
    /// INFO's `master_failover_state`.
    pub fn name(self) -> &'static str {
        match self {
            State::None => "no-failover",
            State::WaitForSync => "waiting-for-sync",
            State::InProgress => "failover-in-progress",
        }
    }
}

/// The failover's state (Redis's `failover_*` and `target_replica_*`).
#[derive(Clone, Debug, Default)]
pub struct Failover {
    pub state: State,
    /// The target (TO, or the first replica found in sync).
    pub target: Option<(String, u16)>,
    /// Unix ms of TIMEOUT's end (0: none).
    pub end_ms: u64,
    pub force: bool,
    /// Every write admitted before the pause is in the stream (see the
    /// module docs, step 1).
    pub flushed: bool,
    /// The role generation of the demotion (`InProgress`): the link made
    /// under it sends FAILOVER.
    pub gen: u64,
    /// The target refused: thread 0's cron promotes this server back
    /// ([`abort_coordinator`]) and logs this reason.
    pub abort_pending: Option<&'static str>,
}

/// FAILOVER (and ABORT) takes whole-keyspace Write locks: the writes
/// admitted before its pause finish first (see the module docs); an ABORT
/// of a demoted server promotes it back.
fn whole_write(
    _args: Args<'_>,
    _db: usize,
    nshards: usize,
    _: &crate::ServerShared,
) -> Option<crate::tx::LockSet> {
    let mut set = crate::tx::LockSet::default();
    set.whole(nshards, crate::tx::Mode::Write);
    Some(set)
}

/// What FAILOVER asks for, parsed as Redis's `failoverCommand`.
struct Request {
    timeout_ms: i64,
    force: bool,
    to: Option<(String, i64)>,
}

fn parse(args: Args<'_>) -> Result<Request, CmdError> {
    let mut req = Request {
        timeout_ms: 0,
        force: false,
        to: None,
    };
    let mut j = 1;
    while j < args.len() {
        let a = args.get(j);
        if eq_ic(a, "timeout") && j + 1 < args.len() && req.timeout_ms == 0 {
            req.timeout_ms = parse_i64(args.get(j + 1))?;
            if req.timeout_ms <= 0 {
                return Err(CmdError::err("FAILOVER timeout must be greater than 0"));
            }
            j += 1;
        } else if eq_ic(a, "to") && j + 2 < args.len() && req.to.is_none() {
            let port = parse_i64(args.get(j + 2))?;
            req.to = Some((String::from_utf8_lossy(args.get(j + 1)).into_owned(), port));
            j += 2;
        } else if eq_ic(a, "force") && !req.force {
            req.force = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(req)
}

/// FAILOVER [TO host port [FORCE]] [TIMEOUT ms] | FAILOVER ABORT: `+OK`
/// once the failover started (or aborted); Redis's errors, in its order:
/// syntax and integers, a failover already running, a replica, no
/// replicas, FORCE without TO and TIMEOUT, a target that is not an
/// (online) replica. ABORT: `No failover in progress.`
fn failover(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let server = c.server.clone();
    if args.len() == 2 && eq_ic(args.get(1), "abort") {
        let state = server.repl.lock().failover.state;
        if state == State::None {
            return Err(CmdError::err("No failover in progress."));
        }
        let plan = if state == State::InProgress {
            crate::replica::promotion_plan(&server)
        } else {
            Plan::default()
        };
        return Ok(OneStep::boxed(
            plan,
            move |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
                abort(&server, "Failover manually aborted");
                out.ok();
                Ok(())
            },
        ));
    }
    let req = parse(args)?;
    start(&server, &req)?;
    Ok(OneStep::boxed(
        Plan::default(),
        move |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
            // Under the locks: every earlier write finished.
            match server.repl.runtime.get() {
                Some(rt) => rt.failover_started(),
                None => flushed(&server),
            }
            out.ok();
            Ok(())
        },
    ))
}

/// Checks `req` against the state and starts the failover (writes
/// paused, `waiting-for-sync`).
fn start(server: &ServerShared, req: &Request) -> Result<(), CmdError> {
    let mut g = server.repl.lock();
    if g.failover.state != State::None {
        return Err(CmdError::err("FAILOVER already in progress."));
    }
    if matches!(g.role, Role::Replica { .. }) {
        return Err(CmdError::err(
            "FAILOVER is not valid when server is a replica.",
        ));
    }
    if g.master.replicas.is_empty() {
        return Err(CmdError::err("FAILOVER requires connected replicas."));
    }
    if req.force && (req.timeout_ms == 0 || req.to.is_none()) {
        return Err(CmdError::err(
            "FAILOVER with force option requires both a timeout and target HOST and IP.",
        ));
    }
    let mut target = None;
    // Redis's findReplica: the address (REPLCONF ip-address, else the
    // peer's) compared without case, and the listening port.
    if let Some((host, port)) = &req.to {
        let Some(x) = g
            .master
            .replicas
            .iter()
            .find(|x| x.ip.eq_ignore_ascii_case(host) && i64::from(x.port) == *port)
        else {
            return Err(CmdError::err(
                "FAILOVER target HOST and PORT is not a replica.",
            ));
        };
        if x.state != ReplicaState::Online {
            return Err(CmdError::err("FAILOVER target replica is not online."));
        }
        crate::persist::log(false, &format!("FAILOVER requested to {host}:{port}."));
        target = Some((host.clone(), x.port));
    } else {
        crate::persist::log(false, "FAILOVER requested to any replica.");
    }
    g.failover = Failover {
        state: State::WaitForSync,
        target,
        end_ms: if req.timeout_ms > 0 {
            engine::now_ms().saturating_add(req.timeout_ms as u64)
        } else {
            0
        },
        force: req.force,
        ..Failover::default()
    };
    drop(g);
    server.ops.pause.set_failover(true);
    wake(server);
    Ok(())
}

fn wake(server: &ServerShared) {
    if let Some(w) = server.wake_all.get() {
        w();
    }
}

/// The stream holds every write admitted before the pause (the runtime's
/// mark ran): the cron may compare offsets.
pub fn flushed(server: &ServerShared) {
    let mut g = server.repl.lock();
    if g.failover.state == State::WaitForSync {
        g.failover.flushed = true;
    }
}

/// Redis's `clearFailoverState`: no failover, writes resume.
fn clear(server: &ServerShared, g: &mut super::ReplInner) {
    let was = g.failover.state != State::None;
    g.failover = Failover::default();
    if was {
        server.ops.pause.set_failover(false);
        wake(server);
    }
}

/// Redis's `abortFailover`: logged with `why`; a demoted server becomes a
/// master again (the caller holds the promotion's locks: see
/// [`crate::replica::promotion_plan`]).
pub fn abort(server: &ServerShared, why: &str) {
    let mut g = server.repl.lock();
    let f = g.failover.clone();
    if f.state == State::None {
        return;
    }
    match &f.target {
        Some((h, p)) => crate::persist::log(false, &format!("FAILOVER to {h}:{p} aborted: {why}")),
        None => crate::persist::log(false, &format!("FAILOVER to any replica aborted: {why}")),
    }
    if f.state == State::InProgress {
        drop(g);
        crate::replica::promote(server, "failover aborted");
        g = server.repl.lock();
    }
    clear(server, &mut g);
}

/// The target took over (it answered the link's `PSYNC ... FAILOVER`
/// made under role generation `gen`): the failover ends, writes resume.
pub fn completed(server: &ServerShared, gen: u64) {
    let mut g = server.repl.lock();
    if g.failover.state == State::InProgress && g.failover.gen == gen {
        clear(server, &mut g);
    }
}

/// The target refused the link's `PSYNC ... FAILOVER` (generation `gen`):
/// thread 0's cron aborts ([`abort_coordinator`]).
pub fn rejected(server: &ServerShared, gen: u64, why: &'static str) {
    let mut g = server.repl.lock();
    if g.failover.state == State::InProgress && g.failover.gen == gen {
        g.failover.abort_pending = Some(why);
    }
}

/// Whether the link made under generation `gen` must send `PSYNC ...
/// FAILOVER`.
pub fn asks_takeover(server: &ServerShared, gen: u64) -> bool {
    let g = server.repl.lock();
    g.failover.state == State::InProgress && g.failover.gen == gen
}

/// Thread 0's cron: the abort of a refused failover (the promotion back),
/// if one is pending. The cron runs it under whole-keyspace Read locks,
/// which exclude every write; its other coordinators (a sync, the
/// stream's end) run one at a time with it, and REPLICAOF NO ONE is
/// refused during a failover.
pub fn abort_coordinator(server: &Arc<ServerShared>) -> Option<Box<dyn Coordinator>> {
    let why = server.repl.lock().failover.abort_pending.take()?;
    let plan = crate::replica::promotion_plan(server);
    let s = server.clone();
    Some(OneStep::boxed(
        plan,
        move |_: Vec<()>, _: &mut Reply, _: &mut ClientState| {
            abort(&s, why);
            Ok(())
        },
    ))
}

/// What the cron must do for a failover waiting for its target.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    Nothing,
    /// Demote to this target (in sync, or FORCE at the timeout).
    Demote(String, u16),
}

/// Redis's `updateFailoverStatus`, at `now_ms`: the timeout (an abort, or
/// with FORCE the demotion), else the target (or the first replica) that
/// acknowledged the whole stream. An abort happens here; a demotion is
/// the caller's ([`demote`]: it touches the runtime).
pub fn update(server: &ServerShared, now_ms: u64) -> Due {
    let mut g = server.repl.lock();
    if g.failover.state != State::WaitForSync {
        return Due::Nothing;
    }
    if g.failover.end_ms != 0 && g.failover.end_ms <= now_ms {
        if g.failover.force {
            if let Some((h, p)) = g.failover.target.clone() {
                crate::persist::log(
                    false,
                    &format!("FAILOVER to {h}:{p} time out exceeded, failing over."),
                );
                return Due::Demote(h, p);
            }
        }
        drop(g);
        abort(server, "Replica never caught up before timeout");
        return Due::Nothing;
    }
    if !g.failover.flushed {
        return Due::Nothing;
    }
    let offset = g.ids.master_repl_offset;
    let synced = |x: &super::ReplicaInfo| x.ack_offset == offset;
    let found = match &g.failover.target {
        Some((h, p)) => g
            .master
            .replicas
            .iter()
            .find(|x| x.ip.eq_ignore_ascii_case(h) && x.port == *p)
            .filter(|x| synced(x))
            .map(|_| (h.clone(), *p)),
        None => g
            .master
            .replicas
            .iter()
            .find(|x| synced(x))
            .map(|x| (x.ip.clone(), x.port)),
    };
    let Some((h, p)) = found else {
        return Due::Nothing;
    };
    g.failover.target = Some((h.clone(), p));
    crate::persist::log(
        false,
        &format!("Failover target {h}:{p} is synced, failing over."),
    );
    Due::Demote(h, p)
}

/// Redis's `replicationSetMaster` for a failover: this server becomes a
/// replica of the target (`failover-in-progress`), its link asking the
/// target to take over. Nothing if the failover ended meanwhile.
pub fn demote(server: &ServerShared, host: &str, port: u16) {
    let repl = &server.repl;
    let mut g = repl.lock();
    if g.failover.state != State::WaitForSync {
        return;
    }
    g.failover.state = State::InProgress;
    let gen = server.set_role(
        &mut g,
        Role::Replica {
            host: host.to_owned(),
            port,
            link: super::LinkState::Connect,
        },
    );
    g.failover.gen = gen;
    drop(g);
    if let Some(r) = repl.runtime.get() {
        r.demoted();
    }
    crate::replica::show_master(server, vec![host.to_owned(), port.to_string()]);
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    #[test]
    fn errors_as_redis_without_replicas() {
        let mut t = TestServer::new(2);
        let cases: &[(&[&str], &str)] = &[
            (
                &["FAILOVER"],
                "-ERR FAILOVER requires connected replicas.\r\n",
            ),
            (&["FAILOVER", "abort"], "-ERR No failover in progress.\r\n"),
            (&["FAILOVER", "ABORT", "x"], "-ERR syntax error\r\n"),
            (&["FAILOVER", "timeout"], "-ERR syntax error\r\n"),
            (
                &["FAILOVER", "timeout", "0"],
                "-ERR FAILOVER timeout must be greater than 0\r\n",
            ),
            (
                &["FAILOVER", "timeout", "x"],
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                &["FAILOVER", "timeout", "1", "timeout", "2"],
                "-ERR syntax error\r\n",
            ),
            (&["FAILOVER", "to", "h"], "-ERR syntax error\r\n"),
            (
                &["FAILOVER", "to", "h", "p"],
                "-ERR value is not an integer or out of range\r\n",
            ),
            (&["FAILOVER", "force", "force"], "-ERR syntax error\r\n"),
            (
                &["FAILOVER", "force"],
                "-ERR FAILOVER requires connected replicas.\r\n",
            ),
            (
                &["FAILOVER", "timeout", "5", "abort"],
                "-ERR syntax error\r\n",
            ),
        ];
        for (cmd, want) in cases {
            assert_eq!(t.run(cmd), *want, "{cmd:?}");
        }
        assert_eq!(t.run(&["REPLICAOF", "127.0.0.1", "1"]), "+OK\r\n");
        assert_eq!(
            t.run(&["FAILOVER"]),
            "-ERR FAILOVER is not valid when server is a replica.\r\n"
        );
    }

    #[test]
    fn a_failover_pauses_writes_until_aborted() {
        let mut t = TestServer::new(2);
        t.server
            .repl
            .lock()
            .master
            .replicas
            .push(super::super::ReplicaInfo {
                id: 99,
                addr: "127.0.0.1:5".into(),
                laddr: "127.0.0.1:6".into(),
                ip: "127.0.0.1".into(),
                port: 7000,
                state: super::ReplicaState::Online,
                ack_offset: 0,
                ack_ms: 0,
                created_ms: 0,
                fd: -1,
                name: None,
                user: "default".into(),
            });
        assert_eq!(
            t.run(&["FAILOVER", "to", "127.0.0.1", "7001"]),
            "-ERR FAILOVER target HOST and PORT is not a replica.\r\n"
        );
        assert_eq!(
            t.run(&["FAILOVER", "to", "127.0.0.1", "7000", "force"]),
            "-ERR FAILOVER with force option requires both a timeout and target HOST and IP.\r\n"
        );
        assert_eq!(
            t.run(&["FAILOVER", "to", "127.0.0.1", "7000", "timeout", "60000"]),
            "+OK\r\n"
        );
        assert!(t.server.ops.pause.paused());
        assert_eq!(
            t.run(&["FAILOVER"]),
            "-ERR FAILOVER already in progress.\r\n"
        );
        assert_eq!(
            t.run(&["REPLICAOF", "no", "one"]),
            "-ERR REPLICAOF not allowed while failing over.\r\n"
        );
        // CLIENT UNPAUSE leaves the failover's pause.
        assert_eq!(t.run(&["CLIENT", "UNPAUSE"]), "+OK\r\n");
        assert!(t.server.ops.pause.paused());
        // The target has not acknowledged the offset yet; then it has.
        t.server.repl.lock().ids.master_repl_offset = 5;
        assert_eq!(
            super::update(&t.server, engine::now_ms()),
            super::Due::Nothing
        );
        t.server.repl.lock().master.replicas[0].ack_offset = 5;
        assert_eq!(
            super::update(&t.server, engine::now_ms()),
            super::Due::Demote("127.0.0.1".into(), 7000)
        );
        assert_eq!(
            t.server.repl.lock().failover.state,
            super::State::WaitForSync
        );
        assert_eq!(t.run(&["FAILOVER", "ABORT"]), "+OK\r\n");
        assert!(!t.server.ops.pause.paused());
        assert_eq!(
            t.run(&["FAILOVER", "ABORT"]),
            "-ERR No failover in progress.\r\n"
        );
    }
}
