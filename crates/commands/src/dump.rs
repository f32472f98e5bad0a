//! DUMP and RESTORE (Redis's `cluster.c`): a value serialised as an RDB
//! payload (`engine::rdb`, the same encoder as snapshots) and back.
//! Request path.
//!
//! RESTORE checks in Redis 7.0's order, since clients see which error
//! comes first: options (syntax, IDLETIME, FREQ values), then BUSYKEY, then
//! the TTL, then the payload's version and checksum, then its contents.
//! Only then is anything changed. A TTL already in the past answers OK and
//! leaves no key (deleting the old one under REPLACE), as Redis does.
//! IDLETIME applies under an LRU policy and FREQ under an LFU one (Redis's
//! `objectSetLRUOrLFU`); each is accepted but ignored under the other.

use engine::lazyfree::Del;
use engine::rdb;
use resp::Args;

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec};
use crate::util::{eq_ic, parse_i64};

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "dump",
        2,
        READONLY,
        keys(1, 1, 1),
        Exec::Shard(dump, None),
        &["keyspace", "read", "slow"],
    ),
    CommandSpec::new(
        "restore",
        -4,
        WRITE | DENYOOM,
        keys(1, 1, 1),
        Exec::Shard(restore, None),
        &["keyspace", "write", "slow", "dangerous"],
    ),
    // What MIGRATE sends a cluster node importing the slot; standalone, as
    // in Redis, RESTORE itself.
    CommandSpec::new(
        "restore-asking",
        -4,
        WRITE | DENYOOM | ASKING,
        keys(1, 1, 1),
        Exec::Shard(restore, None),
        &["keyspace", "write", "slow", "dangerous"],
    ),
];

/// DUMP key: the serialised value (type, body, RDB version, CRC64), or
/// null if the key does not exist.
fn dump(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let compress = ctx.shard.rdb_compression;
    match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        Some(e) => {
            let p = rdb::dump_payload_with(e.value(), compress);
            ctx.out.bulk(&p);
        }
        None => ctx.out.null(),
    }
    Ok(())
}

/// RESTORE's options.
struct RestoreOpts {
    replace: bool,
    absttl: bool,
    idle_s: Option<i64>,
    freq: Option<i64>,
}

fn parse_restore_opts(args: Args<'_>) -> Result<RestoreOpts, CmdError> {
    let mut o = RestoreOpts {
        replace: false,
        absttl: false,
        idle_s: None,
        freq: None,
    };
    let mut j = 4;
    while j < args.len() {
        let a = args.get(j);
        let more = args.len() - j - 1;
        if eq_ic(a, "replace") {
            o.replace = true;
        } else if eq_ic(a, "absttl") {
            o.absttl = true;
        } else if eq_ic(a, "idletime") && more >= 1 && o.freq.is_none() {
            let v = parse_i64(args.get(j + 1))?;
            if v < 0 {
                return Err(CmdError::err("Invalid IDLETIME value, must be >= 0"));
            }
            o.idle_s = Some(v);
            j += 1;
        } else if eq_ic(a, "freq") && more >= 1 && o.idle_s.is_none() {
            let v = parse_i64(args.get(j + 1))?;
            if !(0..=255).contains(&v) {
                return Err(CmdError::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            o.freq = Some(v);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]:
/// OK, or an error (see the module docs for the order of checks).
fn restore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_restore_opts(args)?;
    let key = args.get(1);
    if !o.replace && ctx.shard.exists(ctx.db, key) {
        return Err(CmdError::Raw(
            "BUSYKEY Target key name already exists.".into(),
        ));
    }
    let ttl = parse_i64(args.get(2))?;
    if ttl < 0 {
        return Err(CmdError::err("Invalid TTL value, must be >= 0"));
    }
    let payload = args.get(3);
    if rdb::verify_dump_payload(payload).is_err() {
        return Err(CmdError::err("DUMP payload version or checksum are wrong"));
    }
    let value = rdb::decode_dump_payload(payload, ctx.shard.enc)
        .map_err(|_| CmdError::err("Bad data format"))?;
    let now = ctx.shard.now_ms;
    let deleted = o.replace && ctx.shard.delete(ctx.db, key, Del::Server);
    // Redis adds the relative TTL to the clock in a `long long`: past
    // its end the sum wraps negative, so the key counts as expired.
    let at = match ttl {
        0 => 0,
        t if o.absttl => t,
        t => t.wrapping_add(now as i64),
    };
    if at != 0 && ctx.shard.already_expired(at) {
        // Already expired: nothing is created (the old key, if replaced,
        // is gone and its deletion signalled by `delete`).
        if deleted {
            ctx.propagate(&[b"DEL", key]);
            ctx.notify(ds::events::GENERIC, "del", key);
        }
        ctx.out.ok();
        return Ok(());
    }
    // A past (or negative) deadline only where it is kept (a replica, an
    // AOF loading): 1 ms stands for it, as 0 means none.
    ctx.shard.store(
        ctx.db,
        key,
        value,
        if at == 0 { 0 } else { at.max(1) as u64 },
    );
    if at != 0 && !o.absttl {
        // Redis 7.0 propagates the deadline absolute: the command with
        // its ttl replaced and ABSTTL appended.
        let mut abs = itoa::Buffer::new();
        let abs = abs.format(at).as_bytes();
        ctx.propagate_with(args.len() + 1, |out| {
            for (i, a) in args.iter().enumerate() {
                engine::outbox::write_bulk(out, if i == 2 { abs } else { a });
            }
            engine::outbox::write_bulk(out, b"ABSTTL");
        });
    } else {
        ctx.propagate_as_is(args);
    }
    let lfu = ctx.shard.lfu.is_some();
    if let Some(e) = ctx.shard.dbs[ctx.db].get_mut(key) {
        match (lfu, o.freq, o.idle_s) {
            (true, Some(f), _) => {
                e.lfu_counter = f as u8;
                e.lfu_ldt_min = engine::lfu::minutes(now);
            }
            (false, _, Some(idle)) => {
                let now_s = now / 1000;
                e.access_s = now_s.saturating_sub(idle as u64) as u32;
            }
            _ => {}
        }
    }
    ctx.notify(ds::events::GENERIC, "restore", key);
    ctx.out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    fn run(s: &mut TestServer, argv: &[&[u8]]) -> Vec<u8> {
        s.raw(argv)
    }

    #[test]
    fn dump_restore_round_trip_and_errors() {
        let mut s = TestServer::new(1);
        assert_eq!(run(&mut s, &[b"DUMP", b"nokey"]), b"$-1\r\n");
        s.run(&["RPUSH", "l", "a", "b", "1"]);
        let r = run(&mut s, &[b"DUMP", b"l"]);
        let nl = r.iter().position(|&c| c == b'\n').unwrap();
        let p = r[nl + 1..r.len() - 2].to_vec();
        let p = &p[..];
        let busy = b"-BUSYKEY Target key name already exists.\r\n";
        assert_eq!(run(&mut s, &[b"RESTORE", b"l", b"0", p]), busy);
        assert_eq!(run(&mut s, &[b"RESTORE", b"l2", b"0", p]), b"+OK\r\n");
        assert_eq!(
            s.run(&["LRANGE", "l2", "0", "-1"]),
            "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\n1\r\n"
        );
        assert_eq!(
            run(&mut s, &[b"RESTORE", b"l", b"0", p, b"REPLACE"]),
            b"+OK\r\n"
        );
        let cases: &[(&[&[u8]], &[u8])] = &[
            (
                &[b"RESTORE", b"x", b"-1", p],
                b"-ERR Invalid TTL value, must be >= 0\r\n",
            ),
            (
                &[b"RESTORE", b"x", b"a", p],
                b"-ERR value is not an integer or out of range\r\n",
            ),
            (
                &[b"RESTORE", b"x", b"0", b"garbage"],
                b"-ERR DUMP payload version or checksum are wrong\r\n",
            ),
            (
                &[b"RESTORE", b"x", b"0", p, b"FOO"],
                b"-ERR syntax error\r\n",
            ),
            (
                &[b"RESTORE", b"x", b"0", p, b"IDLETIME"],
                b"-ERR syntax error\r\n",
            ),
            (
                &[b"RESTORE", b"x", b"0", p, b"IDLETIME", b"-1"],
                b"-ERR Invalid IDLETIME value, must be >= 0\r\n",
            ),
            (
                &[b"RESTORE", b"x", b"0", p, b"FREQ", b"256"],
                b"-ERR Invalid FREQ value, must be >= 0 and <= 255\r\n",
            ),
            (
                &[b"RESTORE", b"x", b"0", p, b"FREQ", b"1", b"IDLETIME", b"1"],
                b"-ERR syntax error\r\n",
            ),
            // Options are checked before BUSYKEY, BUSYKEY before the TTL.
            (
                &[b"RESTORE", b"l", b"0", p, b"FOO"],
                b"-ERR syntax error\r\n",
            ),
            (&[b"RESTORE", b"l", b"-1", p], busy),
        ];
        for (argv, want) in cases {
            assert_eq!(run(&mut s, argv), *want, "{argv:?}");
        }
        // A corrupt body with a valid footer.
        let mut bad = Vec::new();
        bad.extend_from_slice(&[2, 2, 1, b'a', 1, b'a']); // set with a duplicate
        bad.extend_from_slice(&engine::rdb::RDB_VERSION.to_le_bytes());
        let c = engine::rdb::crc64(0, &bad);
        bad.extend_from_slice(&c.to_le_bytes());
        assert_eq!(
            run(&mut s, &[b"RESTORE", b"x", b"0", &bad]),
            b"-ERR Bad data format\r\n"
        );
        // TTL already in the past with REPLACE: the old key goes, nothing
        // is created.
        assert_eq!(
            run(&mut s, &[b"RESTORE", b"l", b"1", p, b"REPLACE", b"ABSTTL"]),
            b"+OK\r\n"
        );
        assert_eq!(s.run(&["EXISTS", "l"]), ":0\r\n");
        assert_eq!(run(&mut s, &[b"RESTORE", b"t", b"100000", p]), b"+OK\r\n");
        assert_eq!(s.run(&["TTL", "t"]), ":100\r\n");
        assert_eq!(
            run(&mut s, &[b"RESTORE", b"i", b"0", p, b"IDLETIME", b"1000"]),
            b"+OK\r\n"
        );
        assert_eq!(s.run(&["OBJECT", "IDLETIME", "i"]), ":1000\r\n");
    }
}
