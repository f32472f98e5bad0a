//! MEMORY (Redis's `object.c` memoryCommand): USAGE, PURGE, HELP.
//!
//! USAGE reports what `engine::Db::memory_usage` computes: the key's table
//! node as the allocator rounds it, its bucket slot, and the heap bytes of
//! the key and the value. The collection types keep their heap bytes up to
//! date (O(1)), so there is nothing to sample: SAMPLES is parsed and
//! checked as Redis does, and the figure is exact for any count.
//!
//! Not yet: STATS, DOCTOR and MALLOC-STATS (issue 5) answer as unknown
//! subcommands.

use resp::Args;

use crate::coord::{fan_out, Coordinator};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

const SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "usage",
        -3,
        READONLY,
        keys(2, 2, 1),
        Exec::Shard(usage, None),
        &["read", "slow"],
    ),
    CommandSpec::new("purge", 2, 0, NO_KEYS, Exec::Coord(purge), &["slow"]),
    CommandSpec::new(
        "help",
        2,
        LOADING | STALE,
        NO_KEYS,
        Exec::Conn(help),
        &["slow"],
    ),
];

pub(crate) const COMMANDS: &[CommandSpec] =
    &[CommandSpec::parent("memory", -2, 0, &["slow"], SUBCOMMANDS)];

/// MEMORY USAGE key [SAMPLES count]: bytes used by the key and its value,
/// or null if it does not exist. The lookup does not touch the key.
fn usage(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut j = 3;
    while j < args.len() {
        if eq_ic(args.get(j), "samples") && j + 1 < args.len() {
            if parse_i64(args.get(j + 1))? < 0 {
                return Err(CmdError::Syntax);
            }
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key = args.get(2);
    if !ctx.shard.exists(ctx.db, key) {
        ctx.out.null();
        return Ok(());
    }
    match ctx.shard.dbs[ctx.db].memory_usage(key) {
        Some(n) => ctx.out.int(n as i64),
        None => ctx.out.null(),
    }
    Ok(())
}

/// MEMORY PURGE: gives free memory back to the system on every thread
/// (glibc's `malloc_trim`).
fn purge(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    Ok(fan_out(
        c.nshards(),
        |_env| {
            // SAFETY: malloc_trim only walks the allocator's own free
            // lists; it has no preconditions.
            unsafe {
                libc::malloc_trim(0);
            }
        },
        |_: Vec<()>, out: &mut resp::Reply, _: &mut ClientState| {
            out.ok();
            Ok(())
        },
    ))
}

const HELP: &[&str] = &[
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
];

fn help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    crate::docs::reply_help(c.out, "MEMORY", HELP);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    #[test]
    fn usage_grows_with_the_value_and_checks_samples() {
        let mut t = TestServer::new(2);
        assert_eq!(t.run(&["MEMORY", "USAGE", "nokey"]), "$-1\r\n");
        t.run(&["SET", "k", "v"]);
        let small: i64 = t.run(&["MEMORY", "USAGE", "k"])[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(small >= 64, "{small}");
        t.run(&["SET", "k", &"x".repeat(1000)]);
        let big: i64 = t.run(&["MEMORY", "USAGE", "k", "SAMPLES", "0"])[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(big >= small + 1000, "{big}");
        for i in 0..500 {
            t.run(&["SADD", "s", &format!("member-{i}")]);
        }
        let set: i64 = t.run(&["MEMORY", "USAGE", "s"])[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(set >= 500 * 8, "{set}");
        assert_eq!(
            t.run(&["MEMORY", "USAGE", "k", "SAMPLES", "-1"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            t.run(&["MEMORY", "USAGE", "k", "SAMPLES"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            t.run(&["MEMORY", "USAGE", "nokey", "SAMPLES", "x"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(t.run(&["MEMORY", "PURGE"]), "+OK\r\n");
    }
}
