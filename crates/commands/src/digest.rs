//! DEBUG DIGEST and DEBUG DIGEST-VALUE: a hex signature of the dataset,
//! or of single values, equal to Redis 7.0's for the same data (its Tcl
//! suite compares a master's and a replica's, or the same server's before
//! and after DEBUG RELOAD; ours must agree with a Redis beside it).
//!
//! Redis's algorithm (`debug.c`), in two operations on a 20-byte state:
//! * *xor* `data`: the state ^= SHA1(data) (order does not matter: sets,
//!   hashes, zsets, and keys of a database);
//! * *mix* `data`: xor, then the state = SHA1(state) (order matters:
//!   lists, streams, and a key's parts).
//!
//! A key's digest is mix(key), mix(type code as 4 big-endian bytes), the
//! value by type, then xor("!!expire!!") when it has a deadline (even one
//! that has passed: the digest reads keys as stored, expired or not). The
//! dataset's is, for each non-empty database in order, mix(its index as 4
//! big-endian bytes), then xor(each key's digest); 40 zeros when
//! every database is empty. DIGEST-VALUE is a key's digest without the
//! key: 40 zeros for a missing key.
//!
//! Across shards: each shard sends, per database, whether it holds keys
//! and xor(each key's digest); the xor is order-free, so the home
//! thread combines them database by database and mixes the indexes in as
//! Redis does. The job walks the shard's whole table, as Redis's command
//! blocks its only thread: a debugging command, not on any hot path.
//!
//! Values by type (element strings in their string form: integers of a
//! listpack or intset as their decimal text, as Redis decodes them):
//! strings mix their bytes; lists mix each element from the head; sets
//! xor each member; zsets and hashes xor, per pair, a digest of its own
//! made by mixing member then score (`%.17g`), or field then value;
//! streams mix each live entry's ID (`ms.seq`) then its fields and values
//! in order. Redis 7.0 mixes nothing of a stream's consumer groups.

use std::sync::Arc;

use engine::types::stream::{Elem, StreamId};
use engine::{Db, Entry, StrView, ValueRef};
use resp::{Args, Reply};

use crate::coord::{fan_out, Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx};
use crate::error::CmdError;
use crate::script::sha1;
use crate::table::shard_of;

/// A digest state (Redis's `unsigned char digest[20]`).
pub type Digest = [u8; 20];

/// Redis's `xorDigest`: `d ^= SHA1(data)`.
pub fn xor(d: &mut Digest, data: &[u8]) {
    for (a, b) in d.iter_mut().zip(sha1::digest(data)) {
        *a ^= b;
    }
}

/// Redis's `mixDigest`: [`xor`], then `d = SHA1(d)`.
pub fn mix(d: &mut Digest, data: &[u8]) {
    xor(d, data);
    *d = sha1::digest(d);
}

/// 40 lower-case hex digits.
pub fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Redis's object type codes (`OBJ_STRING` ...), which the digest mixes.
fn type_code(v: ValueRef<'_>) -> u32 {
    match v {
        ValueRef::Str(_) => 0,
        ValueRef::List(_) => 1,
        ValueRef::Set(_) => 2,
        ValueRef::ZSet(_) => 3,
        ValueRef::Hash(_) => 4,
        ValueRef::Stream(_) => 6,
    }
}

/// Calls `f` with an integer's decimal text.
fn with_int<R>(n: i64, f: impl FnOnce(&[u8]) -> R) -> R {
    f(itoa::Buffer::new().format(n).as_bytes())
}

/// Redis's `xorObjectDigest`: mixes the value of `key` (entry `e` of `db`)
/// into `d`, with its deadline's marker.
pub fn mix_value(d: &mut Digest, db: &Db, key: &[u8], e: &Entry) {
    let v = e.value();
    mix(d, &type_code(v).to_be_bytes());
    match v {
        ValueRef::Str(s) => match s.view() {
            StrView::Int(n) => with_int(n, |b| mix(d, b)),
            StrView::Bytes(b) => mix(d, b),
        },
        ValueRef::List(l) => {
            let mut it = l.iter();
            while let Some(el) = it.next() {
                mix(d, el);
            }
        }
        ValueRef::Set(s) => {
            for m in s.iter() {
                match m {
                    engine::types::set::Member::Int(n) => with_int(n, |b| xor(d, b)),
                    engine::types::set::Member::Str(b) => xor(d, b),
                }
            }
        }
        ValueRef::ZSet(z) => {
            for (member, score) in z.iter() {
                let mut el = [0u8; 20];
                mix(&mut el, member);
                mix(&mut el, ds::num::format_double(score).as_bytes());
                xor(d, &el);
            }
        }
        ValueRef::Hash(h) => {
            for (f, v) in h.iter() {
                let mut el = [0u8; 20];
                f.with_bytes(|b| mix(&mut el, b));
                v.with_bytes(|b| mix(&mut el, b));
                xor(d, &el);
            }
        }
        ValueRef::Stream(s) => {
            s.range(StreamId::MIN, StreamId::MAX, false, |id, fields| {
                mix(d, format!("{}.{}", id.ms, id.seq).as_bytes());
                for (f, v) in fields {
                    mix_elem(d, *f);
                    mix_elem(d, *v);
                }
                true
            });
        }
    }
    if db.expire_at(key, e) != 0 {
        xor(d, b"!!expire!!");
    }
}

fn mix_elem(d: &mut Digest, e: Elem<'_>) {
    match e {
        Elem::Str(b) => mix(d, b),
        Elem::Int(n) => with_int(n, |b| mix(d, b)),
    }
}

/// One key's part of the dataset digest (Redis's per-entry digest in
/// `computeDatasetDigest`).
pub fn key_digest(db: &Db, key: &[u8], e: &Entry) -> Digest {
    let mut d = [0u8; 20];
    mix(&mut d, key);
    mix_value(&mut d, db, key, e);
    d
}

/// One shard's part of DEBUG DIGEST: per database, [`xor`] of each of its
/// keys' digests, `None` where it holds no key.
pub fn shard_part(dbs: &[Db]) -> Vec<Option<Digest>> {
    dbs.iter()
        .map(|db| {
            if db.is_empty() {
                return None;
            }
            let mut acc = [0u8; 20];
            for (k, e) in db.iter() {
                xor(&mut acc, &key_digest(db, k, e));
            }
            Some(acc)
        })
        .collect()
}

/// Combines the shards' parts (Redis's `computeDatasetDigest`): per
/// database held by some shard, in index order, the index mixed in, then
/// every shard's part (xors of SHA1s: combined by a plain xor).
pub fn combine(parts: &[Vec<Option<Digest>>]) -> Digest {
    let mut fin = [0u8; 20];
    let dbs = parts.iter().map(Vec::len).max().unwrap_or(0);
    for j in 0..dbs {
        let held: Vec<&Digest> = parts.iter().filter_map(|p| p.get(j)?.as_ref()).collect();
        if held.is_empty() {
            continue;
        }
        mix(&mut fin, &(j as u32).to_be_bytes());
        for x in held {
            for (a, b) in fin.iter_mut().zip(x) {
                *a ^= b;
            }
        }
    }
    fin
}

/// DEBUG DIGEST: every shard's part, combined; a status reply of 40 hex
/// digits. Dispatch runs it under whole-keyspace Read locks
/// (`server::debug_locks`), so no multi-shard write is half seen.
pub(crate) fn debug_digest(c: &ConnCtx<'_>) -> Box<dyn Coordinator> {
    fan_out(
        c.nshards(),
        |env| shard_part(&env.shard.dbs),
        |parts: Vec<Vec<Option<Digest>>>, out: &mut Reply, _: &mut ClientState| {
            out.simple(&hex(&combine(&parts)));
            Ok(())
        },
    )
}

/// DEBUG DIGEST-VALUE key [key ...]: an array with each key's value
/// digest in the client's database (40 zeros for a missing key), read as
/// stored: an expired key is not deleted first, as Redis's `dictFind`.
pub(crate) fn debug_digest_value(
    c: &ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    let n = c.nshards();
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(args.iter().skip(2).map(<[u8]>::to_vec).collect());
    let mut shards: Vec<usize> = keys.iter().map(|k| shard_of(k, n)).collect();
    shards.sort_unstable();
    shards.dedup();
    let mut plan = Plan::default();
    for s in shards {
        let keys = keys.clone();
        plan.run(s, move |env| {
            let Some(d) = env.shard.dbs.get(db) else {
                return Vec::new();
            };
            keys.iter()
                .enumerate()
                .filter(|(_, k)| shard_of(k, n) == s)
                .map(|(i, k)| {
                    let mut out = [0u8; 20];
                    if let Some(e) = d.get(k) {
                        mix_value(&mut out, d, k, e);
                    }
                    (i, out)
                })
                .collect::<Vec<(usize, Digest)>>()
        });
    }
    let count = keys.len();
    Ok(OneStep::boxed(
        plan,
        move |parts: Vec<Vec<(usize, Digest)>>, out: &mut Reply, _: &mut ClientState| {
            let mut all = vec![[0u8; 20]; count];
            for (i, d) in parts.into_iter().flatten() {
                all[i] = d;
            }
            out.array(count);
            for d in &all {
                out.simple(&hex(d));
            }
            Ok(())
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;

    fn server(shards: usize) -> TestServer {
        let cfg = config::Config {
            enable_debug_command: config::ProtectedAction::Yes,
            ..config::Config::default()
        };
        TestServer::with_config(cfg, shards)
    }

    /// Status replies of redis-server 7.0.15 for the same commands.
    #[test]
    fn digests_equal_redis_7_0s() {
        for shards in [1, 2, 16] {
            let mut t = server(shards);
            let zero = "0000000000000000000000000000000000000000";
            let status = |s: &str| format!("+{s}\r\n");
            assert_eq!(t.run(&["DEBUG", "DIGEST"]), status(zero));
            t.run(&["SET", "a", "1"]);
            assert_eq!(
                t.run(&["DEBUG", "DIGEST"]),
                status("943d800368fb9c0e951138f1bc0e313ac769d91f")
            );
            for c in [
                &["SET", "s", "hello"][..],
                &["SET", "n", "-123"],
                &["RPUSH", "l", "a", "b", "3", "c"],
                &["SADD", "si", "1", "2", "3"],
                &["SADD", "ss", "x", "y", "z"],
                &["ZADD", "z", "1", "a", "2.5", "b", "-3", "c"],
                &["HSET", "h", "f1", "v1", "f2", "2"],
                &["XADD", "x", "1-1", "f", "v", "n", "1"],
                &["XADD", "x", "2-1", "g", "w"],
                &["SET", "e", "v", "EX", "1000"],
                &["PFADD", "hll", "a", "b", "c"],
            ] {
                t.run(c);
            }
            assert_eq!(
                t.run(&["DEBUG", "DIGEST"]),
                status("6b94745b544d7f333e888c80b0807dc7e9b45d68")
            );
            let keys = [
                "a", "s", "n", "l", "si", "ss", "z", "h", "x", "e", "hll", "missing",
            ];
            let mut argv = vec!["DEBUG", "DIGEST-VALUE"];
            argv.extend(keys);
            let redis = [
                "b4fc66738120fba0b5aa500ab5c2bf89cea1c5da",
                "36b23a1456b2dce2c3ed252c456761301dba8060",
                "e5a1931bf1607b9a0eab41d693dd6051cb4dc591",
                "226c2112f4bc5d6412d156490c291101b43ddc83",
                "2a462a3f51a1db89738ebbeef0c47ce1bbc85246",
                "0fd9977d57e46b1b9b87439f5ac5b338416ccc24",
                "2dd2ef669bd842b340aed0cb20be587954151e2b",
                "fc076e867f7dbf566ea58172a151d82d78b8f845",
                "463dbe2a3eb44275a2dfe75790954aff5aa949f1",
                "311b17018163335616e089f6b951c82c477335ac",
                "f579608d33b88f5e9f7172d6fb480ecf5d13ddf5",
                zero,
            ];
            let want = format!("*12\r\n{}", redis.map(status).concat());
            assert_eq!(t.run(&argv), want);
            assert_eq!(t.run(&["DEBUG", "DIGEST-VALUE"]), "*0\r\n");
            t.run(&["SET", "in3", "x"]);
            assert_eq!(
                t.run(&["DEBUG", "DIGEST"]),
                status("62b4ceb53e6a89d27b006d18634f8ec6af9e6c68")
            );
        }
    }

    /// The dataset's digest does not depend on how keys fall on shards,
    /// and databases are told apart by index.
    #[test]
    fn the_combination_is_order_free_over_shards_and_mixes_db_indexes() {
        let one = [1u8; 20];
        let two = [2u8; 20];
        let three = [3u8; 20];
        let a = combine(&[vec![Some(one), None], vec![Some(two), Some(three)]]);
        let b = combine(&[vec![Some(two), Some(three)], vec![Some(one), None]]);
        assert_eq!(a, b);
        let moved = combine(&[vec![None, Some(one)], vec![Some(two), Some(three)]]);
        assert_ne!(a, moved);
        assert_eq!(combine(&[vec![None, None], vec![]]), [0u8; 20]);
    }
}
