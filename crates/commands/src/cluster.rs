//! Cluster and replication commands of a standalone server with cluster
//! support off, as Redis 7.0 answers them then: every CLUSTER subcommand,
//! READONLY, READWRITE and ASKING reply "This instance has cluster support
//! disabled" (after the usual arity and subcommand checks), and ROLE
//! reports a master with no replicas. Cluster-aware clients probe these
//! (`CLUSTER SLOTS`, `CLUSTER INFO`) and fall back to standalone mode on
//! that exact error; an unknown-command error makes some of them fail.

use resp::Args;

use crate::ctx::ConnCtx;
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};

const ADMIN_ACL: &[&str] = &["admin", "slow", "dangerous"];
const SLOW_ACL: &[&str] = &["slow"];
/// Redis's flags for the administrative subcommands.
const ADMIN_FLAGS: u32 = ADMIN | STALE | NO_ASYNC_LOADING;

/// A command (or CLUSTER subcommand) that replies the disabled error.
const fn off(
    name: &'static str,
    arity: i32,
    flags: u32,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, NO_KEYS, Exec::Conn(disabled), acl)
}

/// Redis 7.0's CLUSTER subcommands, arities and flags (`COMMAND INFO cluster`).
const CLUSTER: &[CommandSpec] = &[
    off("addslots", -3, ADMIN_FLAGS, ADMIN_ACL),
    off("addslotsrange", -4, ADMIN_FLAGS, ADMIN_ACL),
    off("bumpepoch", 2, ADMIN_FLAGS, ADMIN_ACL),
    off("count-failure-reports", 3, ADMIN | STALE, ADMIN_ACL),
    off("countkeysinslot", 3, STALE, SLOW_ACL),
    off("delslots", -3, ADMIN_FLAGS, ADMIN_ACL),
    off("delslotsrange", -4, ADMIN_FLAGS, ADMIN_ACL),
    off("failover", -2, ADMIN_FLAGS, ADMIN_ACL),
    off("flushslots", 2, ADMIN_FLAGS, ADMIN_ACL),
    off("forget", 3, ADMIN_FLAGS, ADMIN_ACL),
    off("getkeysinslot", 4, STALE, SLOW_ACL),
    off("help", 2, LOADING | STALE, SLOW_ACL),
    off("info", 2, STALE, SLOW_ACL),
    off("keyslot", 3, STALE, SLOW_ACL),
    off("links", 2, STALE, SLOW_ACL),
    off("meet", -4, ADMIN_FLAGS, ADMIN_ACL),
    off("myid", 2, STALE, SLOW_ACL),
    off("nodes", 2, STALE, SLOW_ACL),
    off("replicas", 3, ADMIN | STALE, ADMIN_ACL),
    off("replicate", 3, ADMIN_FLAGS, ADMIN_ACL),
    off("reset", -2, ADMIN | NOSCRIPT | STALE, ADMIN_ACL),
    off("saveconfig", 2, ADMIN_FLAGS, ADMIN_ACL),
    off("set-config-epoch", 3, ADMIN_FLAGS, ADMIN_ACL),
    off("setslot", -4, ADMIN_FLAGS, ADMIN_ACL),
    off("shards", 2, STALE, SLOW_ACL),
    off("slaves", 3, ADMIN | STALE, ADMIN_ACL),
    off("slots", 2, STALE, SLOW_ACL),
];

const CONN_ACL: &[&str] = &["fast", "connection"];

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::parent("cluster", -2, 0, SLOW_ACL, CLUSTER),
    off("readonly", 1, LOADING | STALE | FAST, CONN_ACL),
    off("readwrite", 1, LOADING | STALE | FAST, CONN_ACL),
    off("asking", 1, FAST, CONN_ACL),
    CommandSpec::new(
        "role",
        1,
        NOSCRIPT | LOADING | STALE | FAST,
        NO_KEYS,
        Exec::Conn(role),
        &["admin", "fast", "dangerous"],
    ),
];

fn disabled(_: &mut ConnCtx<'_>, _: Args<'_>) -> Result<(), CmdError> {
    Err(CmdError::err("This instance has cluster support disabled"))
}

/// ROLE, from the replication state (`repl`): a master with its offset
/// (its replicas' list is the master side's to fill), or a replica with
/// its master, link state and processed offset.
fn role(c: &mut ConnCtx<'_>, _: Args<'_>) -> Result<(), CmdError> {
    crate::repl::feed_answered(c.server);
    let (role, ids, replicas) = {
        let r = c.server.repl.lock();
        // Redis lists the online replicas.
        let replicas: Vec<(String, u16, u64)> = r
            .master
            .replicas
            .iter()
            .filter(|x| x.state == crate::repl::ReplicaState::Online)
            .map(|x| (x.ip.clone(), x.port, x.ack_offset))
            .collect();
        (r.role.clone(), r.ids.clone(), replicas)
    };
    match role {
        crate::repl::Role::Master => {
            c.out.array(3);
            c.out.bulk(b"master");
            c.out.int(ids.master_repl_offset as i64);
            c.out.array(replicas.len());
            for (ip, port, off) in replicas {
                c.out.array(3);
                c.out.bulk(ip.as_bytes());
                c.out.bulk(port.to_string().as_bytes());
                c.out.bulk(off.to_string().as_bytes());
            }
        }
        crate::repl::Role::Replica { host, port, link } => {
            c.out.array(5);
            c.out.bulk(b"slave");
            c.out.bulk(host.as_bytes());
            c.out.int(port as i64);
            c.out.bulk(link.role_name().as_bytes());
            let processed = if link == crate::repl::LinkState::Connected {
                ids.master_repl_offset as i64
            } else {
                -1
            };
            c.out.int(processed);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    #[test]
    fn cluster_support_is_disabled() {
        let mut t = TestServer::new(2);
        let off = "-ERR This instance has cluster support disabled\r\n";
        for cmd in [
            &["CLUSTER", "INFO"][..],
            &["CLUSTER", "slots"],
            &["CLUSTER", "KEYSLOT", "k"],
            &["READONLY"],
            &["READWRITE"],
            &["ASKING"],
        ] {
            assert_eq!(t.run(cmd), off, "{cmd:?}");
        }
        assert_eq!(
            t.run(&["CLUSTER", "INFO", "x"]),
            "-ERR wrong number of arguments for 'cluster|info' command\r\n"
        );
        assert_eq!(
            t.run(&["CLUSTER", "FOO"]),
            "-ERR unknown subcommand 'FOO'. Try CLUSTER HELP.\r\n"
        );
        assert_eq!(t.run(&["ROLE"]), "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    }
}
