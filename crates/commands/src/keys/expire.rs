//! EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST, TTL, PTTL, EXPIRETIME and
//! PEXPIRETIME (Redis's `expire.c` commands): setting, clearing and reading
//! a key's deadline, with Redis's option checks (NX XX GT LT), overflow
//! errors and propagation (a relative expiry goes to the AOF and replicas
//! as PEXPIREAT; a deadline in the past deletes the key and propagates DEL).

use ds::events as ev;
use resp::Args;

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::util::{eq_ic, parse_i64};

/// EXPIRE key seconds [NX|XX|GT|LT]: 1 if the deadline was set (or the key
/// deleted because it is already past), 0 if the key is missing or the
/// condition failed.
pub(super) fn expire(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let now = ctx.shard.now_ms as i64;
    expire_generic(ctx, args, now, true, "expire")
}

/// PEXPIRE key milliseconds [NX|XX|GT|LT]
pub(super) fn pexpire(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let now = ctx.shard.now_ms as i64;
    expire_generic(ctx, args, now, false, "pexpire")
}

/// EXPIREAT key unix-seconds [NX|XX|GT|LT]
pub(super) fn expireat(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    expire_generic(ctx, args, 0, true, "expireat")
}

/// PEXPIREAT key unix-milliseconds [NX|XX|GT|LT]
pub(super) fn pexpireat(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    expire_generic(ctx, args, 0, false, "pexpireat")
}

/// Redis's `expireGenericCommand`. Order of checks (each visible to
/// clients): options, then the integer, then overflow of the unit
/// conversion and of `base_ms` addition, then the key, then NX/XX/GT/LT.
/// A deadline at or before now deletes the key and replies 1.
fn expire_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    base_ms: i64,
    seconds: bool,
    cmd: &str,
) -> Result<(), CmdError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in args.iter().skip(3) {
        if eq_ic(opt, "nx") {
            nx = true;
        } else if eq_ic(opt, "xx") {
            xx = true;
        } else if eq_ic(opt, "gt") {
            gt = true;
        } else if eq_ic(opt, "lt") {
            lt = true;
        } else {
            // Redis prints the option with %s: it stops at a NUL byte.
            return Err(CmdError::err_echo("Unsupported option ", opt, ""));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CmdError::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(CmdError::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let mut when = parse_i64(args.get(2))?;
    let bad = || CmdError::InvalidExpire(cmd.to_string());
    if seconds {
        when = when.checked_mul(1000).ok_or_else(bad)?;
    }
    // Redis rejects only `when > LLONG_MAX - basetime`; base is >= 0 so a
    // negative `when` cannot underflow.
    when = when.checked_add(base_ms).ok_or_else(bad)?;

    let (db, key) = (ctx.db, args.get(1));
    if ctx.shard.lookup_write(db, key).is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    // -1 stands for "no deadline" in the comparisons below, as in Redis.
    let current = match ctx.shard.dbs[db].expire_of(key) {
        0 => -1,
        at => at as i64,
    };
    let refused = (nx && current != -1)
        || (xx && current == -1)
        || (gt && (current == -1 || when <= current))
        || (lt && current != -1 && when >= current);
    if refused {
        ctx.out.int(0);
        return Ok(());
    }
    // A replica, or an AOF being loaded, sets a past deadline (see
    // `Shard::already_expired`).
    if ctx.shard.already_expired(when) {
        // Redis's expireGenericCommand: `lazyfree-lazy-expire` decides.
        let lazy = ctx.shard.lazy().expire;
        ctx.shard.dbs[db].delete(key, lazy);
        ctx.propagate(&[b"DEL", key]);
        ctx.notify(ev::GENERIC, "del", key);
    } else {
        // Past (or negative) only where kept: 1 ms stands for it, as 0
        // means no deadline.
        ctx.shard.dbs[db].set_expire(key, when.max(1) as u64);
        propagate_pexpireat(ctx, args, when, base_ms == 0 && !seconds);
        ctx.notify(ev::GENERIC, "expire", key);
    }
    ctx.out.int(1);
    Ok(())
}

/// The record of an EXPIRE-family command that set a deadline, as Redis
/// 7.0's `expireGenericCommand` rewrites it: `PEXPIREAT key when [options]`
/// (PEXPIREAT itself, `absolute_ms`, goes as received).
fn propagate_pexpireat(ctx: &mut ShardCtx<'_>, args: Args<'_>, when: i64, absolute_ms: bool) {
    if absolute_ms {
        return ctx.propagate_as_is(args);
    }
    let mut at = itoa::Buffer::new();
    let at = at.format(when).as_bytes();
    ctx.propagate_with(args.len(), |out| {
        engine::outbox::write_bulk(out, b"PEXPIREAT");
        engine::outbox::write_bulk(out, args.get(1));
        engine::outbox::write_bulk(out, at);
        for opt in args.iter().skip(3) {
            engine::outbox::write_bulk(out, opt);
        }
    });
}

/// PERSIST key: 1 if a deadline was removed, 0 if none or no key.
pub(super) fn persist(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let had = ctx.shard.lookup_write(db, key).is_some_and(|e| e.has_ttl());
    if had {
        ctx.shard.dbs[db].set_expire(key, 0);
        ctx.propagate_as_is(args);
        ctx.notify(ev::GENERIC, "persist", key);
    }
    ctx.out.int(had as i64);
    Ok(())
}

/// TTL key: seconds left (rounded to nearest), -1 without a deadline, -2
/// for a missing key.
pub(super) fn ttl(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ttl_generic(ctx, args, false, false)
}

/// PTTL key: milliseconds left, -1, or -2.
pub(super) fn pttl(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ttl_generic(ctx, args, true, false)
}

/// EXPIRETIME key: the deadline in Unix seconds (rounded), -1, or -2.
pub(super) fn expiretime(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ttl_generic(ctx, args, false, true)
}

/// PEXPIRETIME key: the deadline in Unix milliseconds, -1, or -2.
pub(super) fn pexpiretime(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    ttl_generic(ctx, args, true, true)
}

/// Redis's `ttlGenericCommand`: the key is looked up without touching it.
fn ttl_generic(
    ctx: &mut ShardCtx<'_>,
    args: Args<'_>,
    ms: bool,
    absolute: bool,
) -> Result<(), CmdError> {
    let now = ctx.shard.now_ms;
    let at = match ctx.shard.lookup_read(ctx.db, args.get(1), false) {
        None => {
            ctx.out.int(-2);
            return Ok(());
        }
        Some(_) => ctx.shard.dbs[ctx.db].expire_of(args.get(1)),
    };
    if at == 0 {
        ctx.out.int(-1);
        return Ok(());
    }
    // i128: Redis rounds `(ttl + 500) / 1000`, which must not overflow for
    // a deadline near i64::MAX (PEXPIREAT k 9223372036854775807).
    let t = if absolute {
        at as i128
    } else {
        (at as i128 - now as i128).max(0)
    };
    let v = if ms { t } else { (t + 500) / 1000 };
    ctx.out.int(v as i64);
    Ok(())
}

#[cfg(test)]
mod tests {

    use crate::keys::tests::*;
    use crate::testutil::TestServer;

    #[test]
    fn expire_option_errors() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        let both = "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n";
        for opts in [["nx", "xx"], ["NX", "gt"], ["lt", "nx"]] {
            assert_eq!(t.run(&["EXPIRE", "k", "100", opts[0], opts[1]]), both);
        }
        assert_eq!(
            t.run(&["PEXPIRE", "k", "100", "gt", "LT"]),
            "-ERR GT and LT options at the same time are not compatible\r\n"
        );
        assert_eq!(
            t.run(&["EXPIRE", "k", "100", "foo"]),
            "-ERR Unsupported option foo\r\n"
        );
        // Options are checked before the number, and without the key.
        assert_eq!(
            t.run(&["EXPIRE", "nokey", "abc", "foo"]),
            "-ERR Unsupported option foo\r\n"
        );
        assert_eq!(
            t.run(&["EXPIRE", "k", "abc"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(t.run(&["EXPIRE", "nokey", "10"]), ":0\r\n");
        assert_eq!(
            t.run(&["EXPIRE", "k"]),
            "-ERR wrong number of arguments for 'expire' command\r\n"
        );
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
    }

    #[test]
    fn expire_overflow_errors() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        let cases: &[(&str, &str, &str)] = &[
            ("EXPIRE", "9223372036854775807", "expire"),
            ("EXPIRE", "9223372036854776", "expire"),
            ("EXPIRE", "-9223372036854776", "expire"),
            // Fits the unit conversion but not the addition of now.
            ("EXPIRE", "9223372036854775", "expire"),
            ("PEXPIRE", "9223372036854775807", "pexpire"),
            ("EXPIREAT", "9223372036854776", "expireat"),
        ];
        for (cmd, v, name) in cases {
            assert_eq!(
                t.run(&[cmd, "k", v]),
                format!("-ERR invalid expire time in '{name}' command\r\n"),
                "{cmd} {v}"
            );
        }
        // The extremes that do fit.
        assert_eq!(t.run(&["PEXPIREAT", "k", "9223372036854775807"]), ":1\r\n");
        assert_eq!(t.run(&["PEXPIRETIME", "k"]), ":9223372036854775807\r\n");
        assert_eq!(t.run(&["EXPIRETIME", "k"]), ":9223372036854776\r\n");
        assert_eq!(t.run(&["EXPIREAT", "k", "9223372036854775"]), ":1\r\n");
        assert_eq!(t.run(&["PEXPIRETIME", "k"]), ":9223372036854775000\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":1\r\n");
        // A negative deadline is in the past: the key is deleted.
        assert_eq!(t.run(&["EXPIREAT", "k", "-9223372036854775"]), ":1\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["PEXPIRE", "k", "-9223372036854775808"]), ":1\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
    }

    #[test]
    fn expire_in_the_past_deletes() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            for (cmd, v) in [
                ("EXPIRE", "0"),
                ("EXPIRE", "-1"),
                ("PEXPIRE", "-5"),
                ("EXPIREAT", "1"),
                ("PEXPIREAT", "0"),
            ] {
                t.run(&["SET", "k", "v"]);
                assert_eq!(t.run(&[cmd, "k", v]), ":1\r\n", "{cmd} {v}");
                assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
                assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            }
        }
    }

    /// Redis's checkAlreadyExpired is false while an AOF loads and on a
    /// replica (the shards' expiry `Keep`, the AOF client a master's): a
    /// past deadline is set, the key stays for the commands after it; the
    /// deadline is PEXPIREAT's (GETEX's, RESTORE's) as given, 1 ms for
    /// one at or before the epoch.
    #[test]
    fn a_past_deadline_is_set_where_keys_are_kept() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.client.master = true;
            for sh in &mut t.shards {
                sh.expiry = engine::Expiry::Keep;
            }
            for (cmd, v, at) in [
                ("EXPIRE", "-1", None),
                ("PEXPIRE", "-5", None),
                ("EXPIREAT", "1", Some(1000)),
                ("PEXPIREAT", "0", Some(1)),
                ("PEXPIREAT", "-7", Some(1)),
            ] {
                t.run(&["SET", "k", "v"]);
                assert_eq!(t.run(&[cmd, "k", v]), ":1\r\n", "{cmd} {v}");
                assert_eq!(t.run(&["EXISTS", "k"]), ":1\r\n", "{cmd} {v}");
                if let Some(at) = at {
                    assert_eq!(t.run(&["PEXPIRETIME", "k"]), format!(":{at}\r\n"));
                }
            }
            t.run(&["SET", "g", "v"]);
            assert_eq!(t.run(&["GETEX", "g", "PXAT", "5"]), "$1\r\nv\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", "g"]), ":5\r\n");
            let dump = t.raw(&[b"DUMP", b"g"]);
            let payload = &dump[dump.iter().position(|&c| c == b'\n').unwrap() + 1..dump.len() - 2];
            assert_eq!(
                t.raw(&[b"RESTORE", b"r", b"9", payload, b"ABSTTL"]),
                b"+OK\r\n"
            );
            assert_eq!(t.run(&["PEXPIRETIME", "r"]), ":9\r\n");
            // Where keys are deleted, the same commands delete.
            for sh in &mut t.shards {
                sh.expiry = engine::Expiry::Delete;
            }
            t.client.master = false;
            assert_eq!(t.run(&["GETEX", "k", "PXAT", "5"]), "$-1\r\n");
            t.run(&["SET", "g", "v"]);
            assert_eq!(t.run(&["GETEX", "g", "PXAT", "5"]), "$1\r\nv\r\n");
            assert_eq!(t.run(&["EXISTS", "g"]), ":0\r\n");
            assert_eq!(
                t.raw(&[b"RESTORE", b"r2", b"9", payload, b"ABSTTL"]),
                b"+OK\r\n"
            );
            assert_eq!(t.run(&["EXISTS", "r2"]), ":0\r\n");
        }
    }

    #[test]
    fn expire_conditions() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        // No deadline: GT never applies, LT always does; XX refuses.
        assert_eq!(t.run(&["EXPIRE", "k", "100", "gt"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "xx"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "nx"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "nx"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "50", "gt"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "200", "gt"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":200\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "300", "lt"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "50", "LT"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":50\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "60", "xx", "gt"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":60\r\n");
        assert_eq!(t.run(&["PERSIST", "k"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "11", "lt"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":11\r\n");
        // LT with a past deadline deletes.
        assert_eq!(t.run(&["EXPIRE", "k", "-5", "lt"]), ":1\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
        // An expired key counts as missing.
        t.run(&["SET", "k", "v"]);
        expire_now(&mut t, 0, "k");
        assert_eq!(t.run(&["EXPIRE", "k", "100"]), ":0\r\n");
        assert_eq!(t.run(&["PERSIST", "k"]), ":0\r\n");
    }

    #[test]
    fn ttl_family() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["SET", "k", "v"]);
            for cmd in ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"] {
                assert_eq!(t.run(&[cmd, "k"]), ":-1\r\n");
                assert_eq!(t.run(&[cmd, "nokey"]), ":-2\r\n");
            }
            let at = now_ms() + 100_000;
            let at_s = at.to_string();
            assert_eq!(t.run(&["PEXPIREAT", "k", &at_s]), ":1\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", "k"]), format!(":{at}\r\n"));
            assert_eq!(
                t.run(&["EXPIRETIME", "k"]),
                format!(":{}\r\n", (at + 500) / 1000)
            );
            assert_eq!(t.run(&["TTL", "k"]), ":100\r\n");
            let pttl: u64 = t.run(&["PTTL", "k"])[1..].trim().parse().unwrap();
            assert!((99_000..=100_000).contains(&pttl), "{pttl}");
            // Seconds round to nearest: 1499 ms is 1 s, 1500 ms is 2 s.
            let now = now_ms();
            t.run(&["PEXPIREAT", "k", &(now + 100_000_000).to_string()]);
            assert_eq!(t.run(&["EXPIRE", "k", "1"]), ":1\r\n");
            assert_eq!(t.run(&["TTL", "k"]), ":1\r\n");
            assert_eq!(t.run(&["PERSIST", "k"]), ":1\r\n");
            assert_eq!(t.run(&["PERSIST", "k"]), ":0\r\n");
            assert_eq!(t.run(&["PERSIST", "nokey"]), ":0\r\n");
            assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
            expire_now(&mut t, 0, "k");
            for cmd in ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"] {
                assert_eq!(t.run(&[cmd, "k"]), ":-2\r\n");
            }
            assert_eq!(
                t.run(&["TTL", "a", "b"]),
                "-ERR wrong number of arguments for 'ttl' command\r\n"
            );
        }
    }

    #[test]
    fn set_expiry_survives_as_volatile() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v"]);
        t.run(&["EXPIRE", "k", "100"]);
        assert_eq!(t.shards[0].dbs[0].volatile_len(), 1);
        t.run(&["PERSIST", "k"]);
        assert_eq!(t.shards[0].dbs[0].volatile_len(), 0);
    }
}
