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

const fn sub(
    name: &'static str,
    arity: i32,
    flags: u32,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, NO_KEYS, Exec::Conn(disabled), acl)
}

/// Redis 7.0's CLUSTER subcommands, arities and flags (`COMMAND INFO cluster`).
const CLUSTER: &[CommandSpec] = &[
    sub("addslots", -3, ADMIN_FLAGS, ADMIN_ACL),
    sub("addslotsrange", -4, ADMIN_FLAGS, ADMIN_ACL),
    sub("bumpepoch", 2, ADMIN_FLAGS, ADMIN_ACL),
    sub("count-failure-reports", 3, ADMIN | STALE, ADMIN_ACL),
    sub("countkeysinslot", 3, STALE, SLOW_ACL),
    sub("delslots", -3, ADMIN_FLAGS, ADMIN_ACL),
    sub("delslotsrange", -4, ADMIN_FLAGS, ADMIN_ACL),
    sub("failover", -2, ADMIN_FLAGS, ADMIN_ACL),
    sub("flushslots", 2, ADMIN_FLAGS, ADMIN_ACL),
    sub("forget", 3, ADMIN_FLAGS, ADMIN_ACL),
    sub("getkeysinslot", 4, STALE, SLOW_ACL),
    sub("help", 2, LOADING | STALE, SLOW_ACL),
    sub("info", 2, STALE, SLOW_ACL),
    sub("keyslot", 3, STALE, SLOW_ACL),
    sub("links", 2, STALE, SLOW_ACL),
    sub("meet", -4, ADMIN_FLAGS, ADMIN_ACL),
    sub("myid", 2, STALE, SLOW_ACL),
    sub("nodes", 2, STALE, SLOW_ACL),
    sub("replicas", 3, ADMIN | STALE, ADMIN_ACL),
    sub("replicate", 3, ADMIN_FLAGS, ADMIN_ACL),
    sub("reset", -2, ADMIN | NOSCRIPT | STALE, ADMIN_ACL),
    sub("saveconfig", 2, ADMIN_FLAGS, ADMIN_ACL),
    sub("set-config-epoch", 3, ADMIN_FLAGS, ADMIN_ACL),
    sub("setslot", -4, ADMIN_FLAGS, ADMIN_ACL),
    sub("shards", 2, STALE, SLOW_ACL),
    sub("slaves", 3, ADMIN | STALE, ADMIN_ACL),
    sub("slots", 2, STALE, SLOW_ACL),
];

const CONN_ACL: &[&str] = &["fast", "connection"];

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::parent("cluster", -2, 0, SLOW_ACL, CLUSTER),
    CommandSpec::new(
        "readonly",
        1,
        LOADING | STALE | FAST,
        NO_KEYS,
        Exec::Conn(disabled),
        CONN_ACL,
    ),
    CommandSpec::new(
        "readwrite",
        1,
        LOADING | STALE | FAST,
        NO_KEYS,
        Exec::Conn(disabled),
        CONN_ACL,
    ),
    CommandSpec::new("asking", 1, FAST, NO_KEYS, Exec::Conn(disabled), CONN_ACL),
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

/// ROLE: a master (Tessera has no replication), replication offset 0, no
/// replicas.
fn role(c: &mut ConnCtx<'_>, _: Args<'_>) -> Result<(), CmdError> {
    c.out.array(3);
    c.out.bulk(b"master");
    c.out.int(0);
    c.out.array(0);
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
