//! HyperLogLog commands (Redis's `hyperloglog.c`): PFADD, PFCOUNT,
//! PFMERGE, PFSELFTEST, PFDEBUG. Request path.
//!
//! A HyperLogLog is a string value holding a sketch in Redis's exact byte
//! layout (see `ds::hll`, which owns the format and knows nothing of
//! replies). Here are the commands' semantics in Redis 7.0's order of
//! checks, and what each one changes:
//!
//! * a write changes the string in place (`Db::str_mut`, as SETRANGE
//!   does), which also makes it `raw` as Redis's `dbUnshareStringValue`:
//!   PFCOUNT of one key and every PFDEBUG do that even when they change
//!   nothing else;
//! * a new sketch (PFADD, PFMERGE of a missing key) is stored as built,
//!   `raw`, without growth slack (`Shard::store_raw`: a sparse one of
//!   45..=4096 bytes lives in its key's node, as a created `raw` string
//!   does), which keeps a small sparse sketch under Redis's bytes per key;
//!   PFCOUNT's cached cardinality is written there in place, the first
//!   PFADD makes it growable again;
//! * PFCOUNT of one key stores the cardinality it computed in the header
//!   when the cache was stale: the key is modified (WATCH sees it) and the
//!   command is propagated as it is, as Redis 7.0 does (it counts as
//!   dirty). PFCOUNT of several keys changes nothing;
//! * PFDEBUG GETREG/TODENSE count a conversion to dense as dirty without
//!   signalling the key, as Redis (propagated, WATCH untouched).
//!
//! The dirty counter moves as Redis's `server.dirty` (PFADD adds one per
//! changed register, one more for a new key), so INFO's changes since the
//! last save match.
//!
//! Keys on several shards: PFCOUNT and PFMERGE are plain shard handlers;
//! dispatch runs them on copies of their keys (`crate::scratch`) under the
//! transaction layer's locks, and writes back the destination only (a
//! PFMERGE across shards is logged as received, its one record bare as
//! Redis logs it).
//!
//! PFDEBUG has arity 3 in Redis 7.0, so its subcommands' own arity errors
//! cannot happen; the key is checked before the subcommand is.
//!
//! Limits: every sketch is bounded by the string it lives in (a dense one
//! is exactly 12304 bytes; a sparse one is promoted before it outgrows
//! `hll-sparse-max-bytes`, but a string written by SET may be any size up
//! to `proto-max-bulk-len` and is walked once per command). PFSELFTEST
//! runs a fixed amount of work (Redis's 10 million additions) and holds
//! its connection's thread meanwhile, as Redis holds its only one.

use engine::{Entry, Shard, StrView};
use resp::Args;

use ds::hll;

use crate::ctx::{ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, ShardHandler, NO_KEYS};
use crate::util::{as_str, eq_ic};

const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    k: crate::table::Keys,
    h: ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, k, Exec::Shard(h, None), acl)
}

#[rustfmt::skip]
pub(crate) const COMMANDS: &[CommandSpec] = &[
    cmd("pfadd",   -2, WRITE | DENYOOM | FAST, keys(1, 1, 1),  pfadd,   &["write", "hyperloglog", "fast"]),
    cmd("pfcount", -2, READONLY | MAY_REPLICATE, keys(1, -1, 1), pfcount, &["read", "hyperloglog", "slow"]),
    cmd("pfmerge", -2, WRITE | DENYOOM,       keys(1, -1, 1), pfmerge, &["write", "hyperloglog", "slow"]),
    CommandSpec::new("pfselftest", 1, ADMIN, NO_KEYS, Exec::Conn(pfselftest),
                     &["hyperloglog", "admin", "slow", "dangerous"]),
    cmd("pfdebug",  3, WRITE | DENYOOM | ADMIN, keys(2, 2, 1), pfdebug,
        &["write", "hyperloglog", "admin", "slow", "dangerous"]),
];

/// The entry's bytes if it holds a valid HyperLogLog (Redis's
/// `isHLLObjectOrReply`): WRONGTYPE for another type, `NotHll` for a
/// string that is not a sketch (an integer never is).
fn sketch(e: &Entry) -> Result<&[u8], CmdError> {
    match as_str(e)?.view() {
        StrView::Bytes(b) if hll::is_valid(b) => Ok(b),
        _ => Err(CmdError::NotHll),
    }
}

/// The sketch at `key` (looked up and checked just before), to change in
/// place; it becomes `raw`.
fn sketch_mut<'a>(shard: &'a mut Shard, db: usize, key: &[u8]) -> &'a mut Vec<u8> {
    shard.dbs[db]
        .str_mut(key)
        .expect("INVARIANT: a string, looked up just before")
        .make_raw()
}

fn corrupt(_: hll::Corrupt) -> CmdError {
    CmdError::CorruptHll
}

/// PFADD key [element ...]: 1 if a register changed or the key was
/// created, else 0. A corrupted sparse sketch fails with INVALIDOBJ, the
/// registers set before the bad one staying set (as in Redis).
fn pfadd(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, key) = (ctx.db, args.get(1));
    let max_bytes = ctx.shard.enc.hll_sparse_max_bytes;
    let mut updated = 0u64;
    let Some(e) = ctx.shard.lookup_write(db, key) else {
        let mut v = hll::new_sparse();
        for ele in args.iter().skip(2) {
            updated += u64::from(hll::add(&mut v, ele, max_bytes).map_err(corrupt)?);
        }
        // Created counts as updated: the cache is stale even when no
        // element was given (Redis).
        hll::invalidate(&mut v);
        // Storing counts the creation; Redis's dirty is one more than the
        // registers changed.
        ctx.shard.store_raw(db, key, v, 0);
        ctx.shard.dbs[db].dirty += updated;
        ctx.propagate_as_is(args);
        ctx.notify(ds::events::STRING, "pfadd", key);
        ctx.out.int(1);
        return Ok(());
    };
    sketch(e)?;
    // One lookup when the sketch is already a growable string.
    let v = match e.str_in_place() {
        Some(s) => s.make_raw(),
        None => sketch_mut(ctx.shard, db, key),
    };
    for ele in args.iter().skip(2) {
        updated += u64::from(hll::add(v, ele, max_bytes).map_err(corrupt)?);
    }
    if updated > 0 {
        hll::invalidate(v);
        let d = &mut ctx.shard.dbs[db];
        d.signal(key);
        d.dirty += updated - 1;
        ctx.propagate_as_is(args);
        ctx.notify(ds::events::STRING, "pfadd", key);
    }
    ctx.out.int(i64::from(updated > 0));
    Ok(())
}

/// PFCOUNT key [key ...]: the estimated cardinality. One key: its cached
/// value, or one computed and cached (the key is modified then); 0 for a
/// missing key. Several keys: the cardinality of their union, nothing
/// cached; missing keys count as empty sketches.
fn pfcount(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, touch) = (ctx.db, ctx.touch());
    if args.len() > 2 {
        let mut max = Box::new([0u8; hll::REGISTERS]);
        for key in args.iter().skip(1) {
            let Some(e) = ctx.shard.lookup_read(db, key, touch) else {
                continue;
            };
            hll::merge_into(&mut max, sketch(e)?).map_err(corrupt)?;
        }
        // Redis replies the unsigned estimate as a long long.
        ctx.out.int(hll::estimate(&hll::histogram_raw(&max)) as i64);
        return Ok(());
    }
    let key = args.get(1);
    let Some(e) = ctx.shard.lookup_read(db, key, touch) else {
        ctx.out.int(0);
        return Ok(());
    };
    let b = sketch(e)?;
    let raw = as_str(e)?.encoding() == "raw";
    if let Some(card) = hll::cached(b) {
        // dbUnshareStringValue: an embstr sketch becomes raw.
        if !raw {
            sketch_mut(ctx.shard, db, key);
        }
        ctx.out.int(card as i64);
        return Ok(());
    }
    let card = hll::count(b);
    // Same length: a sketch stored with its key stays there.
    let v = ctx.shard.dbs[db]
        .str_bytes_mut(key)
        .expect("INVARIANT: a string, looked up just before");
    let card = card.map_err(corrupt)?;
    hll::set_cached(v, card);
    ctx.shard.dbs[db].signal(key);
    ctx.propagate_as_is(args);
    ctx.out.int(card as i64);
    Ok(())
}

/// PFMERGE destkey [sourcekey ...]: +OK. The destination holds the union
/// of itself and the sources, created (sparse) if missing, dense if any
/// input was dense; it is always signalled as modified.
fn pfmerge(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, touch) = (ctx.db, ctx.touch());
    let max_bytes = ctx.shard.enc.hll_sparse_max_bytes;
    let mut max = Box::new([0u8; hll::REGISTERS]);
    let mut use_dense = false;
    for key in args.iter().skip(1) {
        let Some(e) = ctx.shard.lookup_read(db, key, touch) else {
            continue;
        };
        let b = sketch(e)?;
        use_dense |= hll::encoding(b) == hll::DENSE;
        hll::merge_into(&mut max, b).map_err(corrupt)?;
    }
    let dest = args.get(1);
    let apply = |v: &mut Vec<u8>| -> Result<(), CmdError> {
        if use_dense {
            hll::to_dense(v).map_err(corrupt)?;
        }
        for (i, &m) in max.iter().enumerate() {
            if m != 0 {
                // The destination was checked with the sources: Redis
                // ignores the result here.
                let _ = hll::set_register(v, i, m, max_bytes);
            }
        }
        hll::invalidate(v);
        Ok(())
    };
    if ctx.shard.lookup_write(db, dest).is_none() {
        let mut v = hll::new_sparse();
        apply(&mut v)?;
        ctx.shard.store_raw(db, dest, v, 0);
    } else {
        apply(sketch_mut(ctx.shard, db, dest))?;
        ctx.shard.dbs[db].signal(dest);
    }
    ctx.propagate_as_is(args);
    ctx.notify(ds::events::STRING, "pfadd", dest);
    ctx.out.simple("OK");
    Ok(())
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key: the key must exist and be
/// a sketch before the subcommand is even looked at (Redis's order).
/// GETREG: every register (converting to dense first); DECODE: the sparse
/// opcodes as text; ENCODING: `dense` or `sparse`; TODENSE: 1 if it
/// converted, else 0.
fn pfdebug(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (db, sub, key) = (ctx.db, args.get(1), args.get(2));
    match ctx.shard.lookup_write(db, key) {
        None => return Err(CmdError::err("The specified key does not exist")),
        Some(e) => sketch(e)?,
    };
    let v = sketch_mut(ctx.shard, db, key);
    let sparse = hll::encoding(v) == hll::SPARSE;
    let out = &mut *ctx.out;
    let converted = if eq_ic(sub, "getreg") {
        if sparse {
            hll::to_dense(v).map_err(corrupt)?;
        }
        out.array(hll::REGISTERS);
        let regs = &v[hll::HDR_SIZE..];
        for i in 0..hll::REGISTERS {
            out.int(hll::dense_get(regs, i).into());
        }
        sparse
    } else if eq_ic(sub, "decode") {
        if !sparse {
            return Err(CmdError::err("HLL encoding is not sparse"));
        }
        out.bulk(hll::decode_sparse(v).as_bytes());
        false
    } else if eq_ic(sub, "encoding") {
        out.simple(if sparse { "sparse" } else { "dense" });
        false
    } else if eq_ic(sub, "todense") {
        if sparse {
            hll::to_dense(v).map_err(corrupt)?;
        }
        out.int(sparse.into());
        sparse
    } else {
        return Err(CmdError::err_echo("Unknown PFDEBUG subcommand '", sub, "'"));
    };
    if converted {
        // Dirty (so propagated) but not signalled, as Redis.
        ctx.shard.dbs[db].dirty += 1;
        ctx.propagate_as_is(args);
    }
    Ok(())
}

/// Redis's `HLL_TEST_CYCLES`.
const SELFTEST_CYCLES: usize = 1000;
/// Elements added by the approximation test.
const SELFTEST_ELEMENTS: u64 = 10_000_000;

/// PFSELFTEST: Redis's self-test of the register access and the estimate
/// (a dense and a sparse sketch fed the same 10 million elements must
/// agree, stay sparse while small, and err within six standard errors);
/// +OK or a `TESTFAILED` error.
fn pfselftest(ctx: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let max_bytes = usize::try_from(ctx.server.config().hll_sparse_max_bytes).unwrap_or(usize::MAX);
    let mut rng = rand::random::<u64>() | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Test 1: registers keep their values and do not disturb neighbours.
    let mut regs = vec![0u8; hll::DENSE_SIZE - hll::HDR_SIZE];
    let mut model = vec![0u8; hll::REGISTERS];
    for _ in 0..SELFTEST_CYCLES {
        for (i, m) in model.iter_mut().enumerate() {
            let r = (next() & 63) as u8;
            *m = r;
            hll::dense_set(&mut regs, i, r);
        }
        for (i, &m) in model.iter().enumerate() {
            let got = hll::dense_get(&regs, i);
            if got != m {
                return Err(CmdError::Raw(format!(
                    "TESTFAILED Register {i} should be {m} but is {got}"
                )));
            }
        }
    }
    // Test 2: the approximation error, dense and sparse side by side.
    let mut dense = hll::new_sparse();
    // INVARIANT: a new sketch is a valid sparse one.
    hll::to_dense(&mut dense).expect("empty sketch");
    let mut sparse = hll::new_sparse();
    let relerr = 1.04 / (hll::REGISTERS as f64).sqrt();
    let seed = next();
    let mut checkpoint = 1u64;
    for j in 1..=SELFTEST_ELEMENTS {
        let ele = (j ^ seed).to_ne_bytes();
        let _ = hll::add(&mut dense, &ele, max_bytes);
        let _ = hll::add(&mut sparse, &ele, max_bytes);
        if j != checkpoint {
            continue;
        }
        if j < (max_bytes / 2) as u64 && hll::encoding(&sparse) != hll::SPARSE {
            return Err(CmdError::Raw("TESTFAILED sparse encoding not used".into()));
        }
        let card = hll::count(&dense).unwrap_or(0);
        if card != hll::count(&sparse).unwrap_or(0) {
            return Err(CmdError::Raw("TESTFAILED dense/sparse disagree".into()));
        }
        let abserr = checkpoint.abs_diff(card);
        // Cardinality 10 may collide: Redis allows an error of 1 there.
        let maxerr = if j == 10 {
            1
        } else {
            (relerr * 6.0 * checkpoint as f64).ceil() as u64
        };
        if abserr > maxerr {
            return Err(CmdError::Raw(format!(
                "TESTFAILED Too big error. card:{checkpoint} abserr:{abserr}"
            )));
        }
        checkpoint *= 10;
    }
    ctx.out.simple("OK");
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    fn run(t: &mut TestServer, cmd: &[&str]) -> String {
        t.run(cmd)
    }

    #[test]
    fn add_count_and_cache() {
        let mut t = TestServer::new(1);
        assert_eq!(run(&mut t, &["PFADD", "h"]), ":1\r\n");
        assert_eq!(run(&mut t, &["PFADD", "h"]), ":0\r\n");
        assert_eq!(run(&mut t, &["PFADD", "h", "a", "b", "c"]), ":1\r\n");
        assert_eq!(run(&mut t, &["PFADD", "h", "a"]), ":0\r\n");
        // Stale cache: the header's MSB.
        assert_eq!(t.raw(&[b"GETRANGE", b"h", b"15", b"15"]), b"$1\r\n\x80\r\n");
        assert_eq!(run(&mut t, &["PFCOUNT", "h"]), ":3\r\n");
        assert_eq!(
            run(&mut t, &["GETRANGE", "h", "8", "15"]),
            "$8\r\n\x03\0\0\0\0\0\0\0\r\n"
        );
        assert_eq!(run(&mut t, &["PFCOUNT", "h", "nosuch"]), ":3\r\n");
        assert_eq!(run(&mut t, &["PFCOUNT", "nosuch"]), ":0\r\n");
        assert_eq!(run(&mut t, &["OBJECT", "ENCODING", "h"]), "$3\r\nraw\r\n");
    }

    #[test]
    fn errors() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "s", "hello world, not a sketch"]);
        t.run(&["SET", "n", "12345"]);
        t.run(&["LPUSH", "l", "x"]);
        let not_hll = "-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n";
        for cmd in [
            &["PFADD", "s", "a"][..],
            &["PFADD", "n"],
            &["PFCOUNT", "s"],
            &["PFCOUNT", "nosuch", "s"],
            &["PFMERGE", "d", "s"],
            &["PFDEBUG", "encoding", "s"],
        ] {
            assert_eq!(run(&mut t, cmd), not_hll, "{cmd:?}");
        }
        assert!(run(&mut t, &["PFADD", "l", "a"]).starts_with("-WRONGTYPE Operation"));
        assert_eq!(
            run(&mut t, &["PFDEBUG", "nosuch", "k"]),
            "-ERR The specified key does not exist\r\n"
        );
        t.run(&["PFADD", "h", "a"]);
        assert_eq!(
            run(&mut t, &["PFDEBUG", "nosuch", "h"]),
            "-ERR Unknown PFDEBUG subcommand 'nosuch'\r\n"
        );
        assert_eq!(
            run(&mut t, &["PFDEBUG", "getreg", "h", "x"]),
            "-ERR wrong number of arguments for 'pfdebug' command\r\n"
        );
        // A sparse body one register short.
        t.raw(&[b"SETRANGE", b"h", b"16", b"\x7f\xfe"]);
        let bad = "-INVALIDOBJ Corrupted HLL object detected\r\n";
        assert_eq!(run(&mut t, &["PFCOUNT", "h"]), bad);
        assert_eq!(run(&mut t, &["PFCOUNT", "h", "h"]), bad);
        assert_eq!(run(&mut t, &["PFMERGE", "d", "h"]), bad);
        assert_eq!(run(&mut t, &["PFDEBUG", "todense", "h"]), bad);
        assert_eq!(run(&mut t, &["EXISTS", "d"]), ":0\r\n");
    }

    #[test]
    fn merge_and_debug() {
        let mut t = TestServer::new(1);
        t.run(&["PFADD", "a", "1", "2", "3"]);
        t.run(&["PFADD", "b", "3", "4"]);
        assert_eq!(run(&mut t, &["PFMERGE", "d", "a", "b"]), "+OK\r\n");
        assert_eq!(run(&mut t, &["PFCOUNT", "d"]), ":4\r\n");
        assert_eq!(run(&mut t, &["PFMERGE", "only"]), "+OK\r\n");
        assert_eq!(run(&mut t, &["PFCOUNT", "only"]), ":0\r\n");
        assert_eq!(run(&mut t, &["PFDEBUG", "encoding", "d"]), "+sparse\r\n");
        assert_eq!(run(&mut t, &["PFDEBUG", "todense", "d"]), ":1\r\n");
        assert_eq!(run(&mut t, &["PFDEBUG", "todense", "d"]), ":0\r\n");
        assert_eq!(run(&mut t, &["PFDEBUG", "ENCODING", "d"]), "+dense\r\n");
        assert_eq!(run(&mut t, &["STRLEN", "d"]), ":12304\r\n");
        assert_eq!(
            run(&mut t, &["PFDEBUG", "decode", "d"]),
            "-ERR HLL encoding is not sparse\r\n"
        );
        // A dense input makes the destination dense.
        assert_eq!(run(&mut t, &["PFMERGE", "e", "a", "d"]), "+OK\r\n");
        assert_eq!(run(&mut t, &["PFDEBUG", "encoding", "e"]), "+dense\r\n");
        assert_eq!(run(&mut t, &["PFCOUNT", "e", "a"]), ":4\r\n");
        let regs = run(&mut t, &["PFDEBUG", "getreg", "a"]);
        assert!(regs.starts_with("*16384\r\n"));
        assert_eq!(regs.matches(":0\r\n").count(), 16384 - 3);
    }

    #[test]
    fn promotion_follows_the_config() {
        let mut t = TestServer::new(1);
        assert_eq!(
            run(&mut t, &["CONFIG", "SET", "hll-sparse-max-bytes", "30"]),
            "+OK\r\n"
        );
        t.run(&["PFADD", "h", "a", "b", "c"]);
        assert_eq!(run(&mut t, &["PFDEBUG", "encoding", "h"]), "+sparse\r\n");
        t.run(&["PFADD", "h", "d", "e", "f", "g"]);
        assert_eq!(run(&mut t, &["PFDEBUG", "encoding", "h"]), "+dense\r\n");
        assert_eq!(run(&mut t, &["PFCOUNT", "h"]), ":7\r\n");
    }

    #[test]
    fn across_shards() {
        let mut t = TestServer::new(3);
        let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            let els: Vec<String> = (0..100).map(|j| format!("{}", i * 50 + j)).collect();
            let mut cmd = vec!["PFADD", k.as_str()];
            cmd.extend(els.iter().map(String::as_str));
            t.run(&cmd);
        }
        let mut cmd = vec!["PFCOUNT"];
        cmd.extend(keys.iter().map(String::as_str));
        // 350 distinct elements; Redis 7.0.15 estimates 352.
        let count = run(&mut t, &cmd);
        let mut merge = vec!["PFMERGE", "dest"];
        merge.extend(keys.iter().map(String::as_str));
        assert_eq!(run(&mut t, &merge), "+OK\r\n");
        assert_eq!(run(&mut t, &["PFCOUNT", "dest"]), count);
        assert_eq!(count, ":352\r\n");
    }
}
