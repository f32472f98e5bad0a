//! Fuzz harnesses for the `fuzz/` crate (cargo-fuzz, nightly): each takes
//! arbitrary bytes, stores them as a value through RESTORE on an
//! in-process [`TestServer`], and runs the commands of that type over it.
//!
//! What they check, besides "no panic" (the point):
//! * RESTORE of a payload with a right footer answers OK or Bad data format;
//! * a value RESTORE accepted DUMPs, and that DUMP RESTOREs to the same
//!   bytes (what the loader lets in, the writer and the loader agree on);
//! * after the commands ran over it, the value still round-trips (the
//!   commands keep a value they accepted consistent).
//!
//! They live here rather than in `fuzz/` so that a plain unit test replays
//! the seed corpora and every input that once crashed (`fuzz/seeds/`,
//! `fuzz/regressions/`) on stable Rust in CI. Sizes are bounded so one
//! input runs in milliseconds: bit offsets stay under 2^20, counts under
//! 256; the payload itself is bounded by libFuzzer's `-max_len`.

use crate::testutil::TestServer;

pub mod bounded;
mod parse;
mod rules;

pub use parse::parse_request;
pub use rules::{acl_rules, config_text};

/// The DUMP footer: RDB version 10 and the CRC64 of everything before.
pub fn with_footer(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&engine::rdb::RDB_VERSION.to_le_bytes());
    let crc = engine::rdb::crc64(0, &p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

/// A string value's payload (type 0), LZF-compressed when `compress` and
/// long enough, as DUMP writes it.
fn string_payload(v: &[u8], compress: bool) -> Vec<u8> {
    let mut body = vec![0u8];
    engine::rdb::write_string(&mut body, v, compress);
    with_footer(&body)
}

fn run(t: &mut TestServer, argv: &[&[u8]]) -> Vec<u8> {
    t.raw(argv)
}

/// Runs a command given as owned parts.
fn runv(t: &mut TestServer, argv: &[Vec<u8>]) -> Vec<u8> {
    let v: Vec<&[u8]> = argv.iter().map(|a| a.as_slice()).collect();
    t.raw(&v)
}

/// The body of a bulk reply (`$n\r\n...\r\n`), `None` for anything else.
fn bulk(r: &[u8]) -> Option<Vec<u8>> {
    if r.first() != Some(&b'$') || r.starts_with(b"$-1") {
        return None;
    }
    let nl = r.iter().position(|&c| c == b'\n')?;
    Some(r[nl + 1..r.len() - 2].to_vec())
}

/// RESTOREs `payload` under `key`: true if stored. Anything but OK must be
/// the payload error.
fn restore(t: &mut TestServer, key: &[u8], payload: &[u8]) -> bool {
    let r = run(t, &[b"RESTORE", key, b"0", payload, b"REPLACE"]);
    if r == b"+OK\r\n" {
        return true;
    }
    assert_eq!(
        r, b"-ERR Bad data format\r\n",
        "RESTORE of a payload with a right footer"
    );
    false
}

/// DUMP `key` (if it exists), RESTORE it elsewhere, DUMP that: the same
/// bytes.
fn assert_round_trip(t: &mut TestServer, key: &[u8]) {
    let Some(d) = bulk(&run(t, &[b"DUMP", key])) else {
        return;
    };
    let r = run(t, &[b"RESTORE", b"__copy", b"0", &d, b"REPLACE"]);
    if r != b"+OK\r\n" {
        let why = engine::rdb::decode_dump_payload(&d, engine::EncLimits::default()).err();
        panic!(
            "a DUMP of {} must RESTORE: {:?} ({why:?})",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(&d)
        );
    }
    let again = bulk(&run(t, &[b"DUMP", b"__copy"])).expect("restored copy");
    assert_eq!(again, d, "DUMP -> RESTORE -> DUMP changed the payload");
    run(t, &[b"DEL", b"__copy"]);
}

fn s(v: impl ToString) -> Vec<u8> {
    v.to_string().into_bytes()
}

// ------------------------------------------------------------ streams

/// True if the value was stored (RESTORE accepted it).
///
/// `data` is a stream payload without its footer: a type byte (15, 19 or
/// 21; any other is mapped onto one of them) and the body.
pub fn restore_stream(data: &[u8]) -> bool {
    let Some((&t0, rest)) = data.split_first() else {
        return false;
    };
    let ty = match t0 {
        15 | 19 | 21 => t0,
        b => [15, 19, 21][usize::from(b) % 3],
    };
    let mut body = Vec::with_capacity(data.len());
    body.push(ty);
    body.extend_from_slice(rest);
    let payload = with_footer(&body);
    let mut t = TestServer::new(1);
    if !restore(&mut t, b"s", &payload) {
        return false;
    }
    assert_round_trip(&mut t, b"s");
    // Names and IDs to aim the commands at, from the value itself.
    let value = engine::rdb::decode_dump_payload(&payload, engine::EncLimits::default())
        .expect("RESTORE accepted it");
    let engine::Value::Stream(st) = value else {
        panic!("a stream type byte restored as another type");
    };
    let mut ids = Vec::new();
    st.range(
        engine::types::stream::StreamId::MIN,
        engine::types::stream::StreamId::MAX,
        false,
        |id, _| {
            ids.push(id);
            ids.len() < 8
        },
    );
    let ids: Vec<Vec<u8>> = ids.iter().map(s).collect();
    let mid = ids.get(ids.len() / 2).cloned().unwrap_or_else(|| s("0-1"));
    let mut groups = Vec::new();
    for (name, g) in st.groups.iter().take(3) {
        let consumers: Vec<Vec<u8>> = g.consumers.keys().take(2).cloned().collect();
        let pending: Vec<Vec<u8>> = g.pel.keys().take(3).map(s).collect();
        groups.push((name.clone(), consumers, pending));
    }
    let k = b"s".to_vec();
    let reads: &[&[&[u8]]] = &[
        &[b"XLEN", b"s"],
        &[b"XRANGE", b"s", b"-", b"+"],
        &[b"XREVRANGE", b"s", b"+", b"-", b"COUNT", b"3"],
        &[b"XINFO", b"STREAM", b"s"],
        &[b"XINFO", b"STREAM", b"s", b"FULL"],
        &[b"XINFO", b"STREAM", b"s", b"FULL", b"COUNT", b"1"],
        &[b"XINFO", b"GROUPS", b"s"],
        &[b"XREAD", b"COUNT", b"5", b"STREAMS", b"s", b"0"],
        &[b"MEMORY", b"USAGE", b"s"],
        &[b"OBJECT", b"ENCODING", b"s"],
    ];
    for argv in reads {
        run(&mut t, argv);
    }
    runv(
        &mut t,
        &[
            s("XRANGE"),
            k.clone(),
            [b"(".to_vec(), mid.clone()].concat(),
            s("+"),
        ],
    );
    runv(
        &mut t,
        &[
            s("XREVRANGE"),
            k.clone(),
            mid.clone(),
            s("-"),
            s("COUNT"),
            s("2"),
        ],
    );
    for (g, consumers, pending) in &groups {
        let c = consumers.first().cloned().unwrap_or_else(|| s("fuzzc"));
        runv(&mut t, &[s("XINFO"), s("CONSUMERS"), k.clone(), g.clone()]);
        runv(&mut t, &[s("XPENDING"), k.clone(), g.clone()]);
        runv(
            &mut t,
            &[s("XPENDING"), k.clone(), g.clone(), s("-"), s("+"), s("10")],
        );
        runv(
            &mut t,
            &[
                s("XPENDING"),
                k.clone(),
                g.clone(),
                s("IDLE"),
                s("0"),
                s("-"),
                s("+"),
                s("10"),
                c.clone(),
            ],
        );
        runv(
            &mut t,
            &[
                s("XREADGROUP"),
                s("GROUP"),
                g.clone(),
                c.clone(),
                s("STREAMS"),
                k.clone(),
                s("0"),
            ],
        );
        runv(
            &mut t,
            &[
                s("XREADGROUP"),
                s("GROUP"),
                g.clone(),
                c.clone(),
                s("COUNT"),
                s("2"),
                s("STREAMS"),
                k.clone(),
                s(">"),
            ],
        );
        let mut claim = vec![s("XCLAIM"), k.clone(), g.clone(), s("other"), s("0")];
        claim.extend(pending.iter().cloned());
        claim.push(mid.clone());
        runv(&mut t, &claim);
        claim.extend([s("FORCE"), s("RETRYCOUNT"), s("7"), s("JUSTID")]);
        runv(&mut t, &claim);
        runv(
            &mut t,
            &[
                s("XAUTOCLAIM"),
                k.clone(),
                g.clone(),
                c.clone(),
                s("0"),
                s("0-0"),
                s("COUNT"),
                s("5"),
            ],
        );
        if let Some(p) = pending.first() {
            runv(&mut t, &[s("XACK"), k.clone(), g.clone(), p.clone()]);
        }
        if let Some(c2) = consumers.get(1) {
            runv(
                &mut t,
                &[
                    s("XGROUP"),
                    s("DELCONSUMER"),
                    k.clone(),
                    g.clone(),
                    c2.clone(),
                ],
            );
        }
        runv(
            &mut t,
            &[
                s("XGROUP"),
                s("SETID"),
                k.clone(),
                g.clone(),
                mid.clone(),
                s("ENTRIESREAD"),
                s("3"),
            ],
        );
        runv(&mut t, &[s("XINFO"), s("STREAM"), k.clone(), s("FULL")]);
        assert_round_trip(&mut t, b"s");
    }
    // Writes: append (a new node, or into the last one), delete, trim.
    run(&mut t, &[b"XADD", b"s", b"*", b"f", b"v"]);
    run(
        &mut t,
        &[
            b"XADD", b"s", b"MAXLEN", b"~", b"3", b"*", b"f", b"v", b"g", b"w",
        ],
    );
    for id in ids.iter().take(3) {
        runv(&mut t, &[s("XDEL"), k.clone(), id.clone()]);
    }
    assert_round_trip(&mut t, b"s");
    runv(&mut t, &[s("XTRIM"), k.clone(), s("MINID"), mid]);
    run(&mut t, &[b"XTRIM", b"s", b"MAXLEN", b"1"]);
    run(&mut t, &[b"XINFO", b"STREAM", b"s", b"FULL"]);
    run(
        &mut t,
        &[
            b"XSETID",
            b"s",
            b"18446744073709551615-18446744073709551615",
        ],
    );
    run(&mut t, &[b"XADD", b"s", b"*", b"f", b"v"]);
    assert_round_trip(&mut t, b"s");
    true
}

// ------------------------------------------------------------ HyperLogLog

/// `data` is a string value, stored as RESTORE stores a DUMP of it (LZF
/// compressed past 20 bytes), then used as a HyperLogLog: a corrupt one
/// must be refused (INVALIDOBJ, or WRONGTYPE when it is no sketch at all).
pub fn restore_hll(data: &[u8]) -> bool {
    let mut t = TestServer::new(1);
    let p = string_payload(data, true);
    assert!(
        restore(&mut t, b"h", &p),
        "a string payload is always valid"
    );
    assert_eq!(bulk(&run(&mut t, &[b"GET", b"h"])), Some(data.to_vec()));
    run(&mut t, &[b"PFADD", b"ok", b"x", b"y", b"z"]);
    let errs: [&[u8]; 2] = [
        b"-INVALIDOBJ Corrupted HLL object detected\r\n",
        b"-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n",
    ];
    let check = |r: Vec<u8>| {
        assert!(
            r.first() != Some(&b'-') || errs.contains(&r.as_slice()),
            "unexpected error {:?}",
            String::from_utf8_lossy(&r)
        );
    };
    check(run(&mut t, &[b"PFCOUNT", b"h"]));
    check(run(&mut t, &[b"PFCOUNT", b"h", b"ok"]));
    check(run(&mut t, &[b"PFMERGE", b"dst", b"ok", b"h"]));
    check(run(&mut t, &[b"PFCOUNT", b"dst"]));
    // Writes into it: a few registers, then enough to go dense.
    run(&mut t, &[b"COPY", b"h", b"h2"]);
    check(run(&mut t, &[b"PFADD", b"h", b"a", b"b", b"c"]));
    check(run(&mut t, &[b"PFCOUNT", b"h"]));
    let many: Vec<Vec<u8>> = (0..400).map(|i| s(format!("e{i}"))).collect();
    let mut argv = vec![s("PFADD"), s("h2")];
    argv.extend(many);
    check(runv(&mut t, &argv));
    check(run(&mut t, &[b"PFCOUNT", b"h2", b"h"]));
    check(run(&mut t, &[b"PFMERGE", b"h", b"ok", b"h2"]));
    check(run(&mut t, &[b"PFCOUNT", b"h"]));
    for sub in [&b"GETREG"[..], b"DECODE", b"ENCODING", b"TODENSE"] {
        run(&mut t, &[b"PFDEBUG", sub, b"h2"]);
        run(&mut t, &[b"PFDEBUG", sub, b"h"]);
    }
    check(run(&mut t, &[b"PFCOUNT", b"h2"]));
    assert_round_trip(&mut t, b"h");
    true
}

// ------------------------------------------------------------ bits and geo

/// Longitudes, latitudes and radii at and past Redis's limits.
const EDGE: [&str; 12] = [
    "0",
    "180",
    "-180",
    "85.05112878",
    "-85.05112878",
    "180.0000001",
    "1e300",
    "-0",
    "nan",
    "inf",
    "0.0000001",
    "40000000",
];

fn coord(b: u8, scale: f64) -> Vec<u8> {
    if b >= 240 {
        s(EDGE[usize::from(b - 240) % EDGE.len()])
    } else {
        s((f64::from(b) - 120.0) * scale)
    }
}

fn member(b: u8) -> Vec<u8> {
    s(format!("m{}", b % 210))
}

const UNITS: [&str; 4] = ["m", "km", "mi", "ft"];

/// Bitfield types: i1..i64, u1..u63, and a few invalid ones.
fn bf_type(b: u8) -> Vec<u8> {
    match b % 130 {
        n @ 0..=63 => s(format!("i{}", n + 1)),
        n @ 64..=126 => s(format!("u{}", n - 63)),
        127 => s("u64"),
        128 => s("i0"),
        _ => s("x8"),
    }
}

/// `data`: a selector byte, an op count, 4 bytes per op, then the value:
/// selector bit 0 clear, a string (bit 1: LZF-compressed in the payload);
/// set, a payload without footer (a zset, for the GEO commands, in the
/// seeds). Each op runs one bit or GEO command on it, its arguments drawn
/// from the op's bytes.
pub fn bitgeo(data: &[u8]) -> bool {
    let [sel, nops, rest @ ..] = data else {
        return false;
    };
    let ops_len = usize::from(*nops) * 4;
    if rest.len() < ops_len {
        return false;
    }
    let (ops, value) = rest.split_at(ops_len);
    let mut t = TestServer::new(1);
    let stored = if sel & 1 == 0 {
        restore(&mut t, b"k", &string_payload(value, sel & 2 != 0))
    } else {
        restore(&mut t, b"k", &with_footer(value))
    };
    if !stored {
        return false;
    }
    assert_round_trip(&mut t, b"k");
    run(&mut t, &[b"SET", b"o", b"foobar\x00\xff"]);
    let k = s("k");
    for op in ops.chunks_exact(4) {
        let (code, a, b, c) = (op[0], op[1], op[2], op[3]);
        // Bit offsets below 2^20 (a 128 KiB string at most).
        let off = s(((u32::from(a) << 12) | (u32::from(b) << 4) | u32::from(c >> 4)) % (1 << 20));
        let i8s = |v: u8| s(v as i8);
        let mode = [&b""[..], b"BYTE", b"BIT"][usize::from(c) % 3];
        let argv: Vec<Vec<u8>> = match code % 20 {
            0 => vec![s("SETBIT"), k.clone(), off, s(c & 1)],
            1 => vec![s("GETBIT"), k.clone(), off],
            2 => {
                let mut v = vec![s("BITCOUNT"), k.clone(), i8s(a), i8s(b)];
                if !mode.is_empty() {
                    v.push(mode.to_vec());
                }
                v
            }
            3 => {
                let mut v = vec![s("BITPOS"), k.clone(), s(c & 1), i8s(a), i8s(b)];
                if !mode.is_empty() {
                    v.push(mode.to_vec());
                }
                v
            }
            4 => {
                let at = if c & 1 == 0 { s(format!("#{b}")) } else { off };
                vec![s("BITFIELD"), k.clone(), s("GET"), bf_type(a), at]
            }
            5 => {
                let ovf = ["WRAP", "SAT", "FAIL"][usize::from(c) % 3];
                let val = [s(i64::MIN), s(i64::MAX), s(-1), s(b)][usize::from(c >> 2) % 4].clone();
                vec![
                    s("BITFIELD"),
                    k.clone(),
                    s("OVERFLOW"),
                    s(ovf),
                    s("SET"),
                    bf_type(a),
                    off.clone(),
                    val.clone(),
                    s("INCRBY"),
                    bf_type(a.wrapping_add(b)),
                    off,
                    val,
                ]
            }
            6 => vec![
                s("BITFIELD_RO"),
                k.clone(),
                s("GET"),
                bf_type(a),
                s(format!("#{b}")),
            ],
            7 => {
                let op = ["AND", "OR", "XOR", "NOT"][usize::from(a) % 4];
                let dst = if b & 1 == 0 { s("d") } else { k.clone() };
                if op == "NOT" {
                    vec![s("BITOP"), s(op), dst, k.clone()]
                } else {
                    vec![s("BITOP"), s(op), dst, k.clone(), s("o")]
                }
            }
            8 => vec![
                s("SETRANGE"),
                k.clone(),
                s(u32::from(a) * 16),
                vec![b; usize::from(c % 8)],
            ],
            9 => vec![s("GETRANGE"), k.clone(), i8s(a), i8s(b)],
            10 | 11 => {
                let mut v = vec![s("GEOSEARCH"), k.clone()];
                if code % 20 == 10 {
                    v.extend([s("FROMLONLAT"), coord(a, 1.5), coord(b, 0.7)]);
                } else {
                    v.extend([s("FROMMEMBER"), member(a)]);
                }
                if c & 1 == 0 {
                    v.extend([s("BYRADIUS"), coord(c, 100.0)]);
                } else {
                    v.extend([s("BYBOX"), coord(c, 100.0), coord(b, 50.0)]);
                }
                v.push(s(UNITS[usize::from(c >> 1) % 4]));
                if c & 8 != 0 {
                    v.extend([s(["ASC", "DESC"][usize::from(a) & 1]), s("COUNT"), s(c % 9)]);
                    if c & 16 != 0 {
                        v.push(s("ANY"));
                    }
                }
                if c & 32 != 0 {
                    v.extend([s("WITHCOORD"), s("WITHDIST"), s("WITHHASH")]);
                }
                v
            }
            12 => vec![
                s("GEORADIUS"),
                k.clone(),
                coord(a, 1.5),
                coord(b, 0.7),
                coord(c, 50.0),
                s(UNITS[usize::from(c) % 4]),
                s("WITHDIST"),
                s("WITHHASH"),
                s("COUNT"),
                s(1 + c % 5),
            ],
            13 => vec![
                s("GEORADIUSBYMEMBER_RO"),
                k.clone(),
                member(a),
                coord(b, 50.0),
                s("km"),
                s(["ASC", "DESC"][usize::from(c) & 1]),
                s("WITHCOORD"),
            ],
            14 => {
                let mut v = vec![
                    s("GEOSEARCHSTORE"),
                    s(if c & 1 == 0 { "d" } else { "k" }),
                    k.clone(),
                    s("FROMLONLAT"),
                    coord(a, 1.5),
                    coord(b, 0.7),
                    s("BYRADIUS"),
                    coord(c, 80.0),
                    s("km"),
                ];
                if c & 2 != 0 {
                    v.push(s("STOREDIST"));
                }
                v
            }
            15 => vec![
                s("GEORADIUS"),
                k.clone(),
                coord(a, 1.5),
                coord(b, 0.7),
                coord(c, 50.0),
                s("km"),
                s(if c & 1 == 0 { "STORE" } else { "STOREDIST" }),
                s("d"),
            ],
            16 => vec![s("GEOPOS"), k.clone(), member(a), member(b), s("nope")],
            17 => vec![
                s("GEODIST"),
                k.clone(),
                member(a),
                member(b),
                s(UNITS[usize::from(c) % 4]),
            ],
            18 => vec![s("GEOHASH"), k.clone(), member(a), member(b), member(c)],
            _ => {
                let flag = ["NX", "XX", "CH", "GT"][usize::from(c) % 4];
                vec![
                    s("GEOADD"),
                    k.clone(),
                    s(flag),
                    coord(a, 1.5),
                    coord(b, 0.7),
                    member(c),
                ]
            }
        };
        runv(&mut t, &argv);
    }
    run(&mut t, &[b"ZRANGE", b"k", b"0", b"-1", b"WITHSCORES"]);
    assert_round_trip(&mut t, b"k");
    assert_round_trip(&mut t, b"d");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `fuzz/<dir>/<target>/`.
    fn inputs(dir: &str, target: &str) -> Vec<(String, Vec<u8>)> {
        let root = bounded::fuzz_dir();
        let Ok(rd) = std::fs::read_dir(root.join(dir).join(target)) else {
            return Vec::new();
        };
        let mut v: Vec<_> = rd
            .filter_map(|e| e.ok())
            .map(|e| {
                let p = e.path();
                (p.display().to_string(), std::fs::read(&p).unwrap())
            })
            .collect();
        v.sort();
        v
    }

    /// Runs every seed (each must be accepted: they are real Redis
    /// payloads) and every regression input (no panic is the test).
    fn replay(target: &str, f: fn(&[u8]) -> bool) {
        let mut n = 0;
        for dir in ["seeds", "regressions"] {
            for (name, data) in inputs(dir, target) {
                eprintln!("{name}");
                let stored = f(&data);
                assert!(stored || dir == "regressions", "{name} was refused");
                n += 1;
            }
        }
        assert!(n > 0, "no seeds for {target}");
    }

    #[test]
    fn replay_restore_stream() {
        replay("restore_stream", restore_stream);
    }

    #[test]
    fn replay_restore_hll() {
        replay("restore_hll", restore_hll);
    }

    #[test]
    fn replay_bitgeo() {
        replay("bitgeo", bitgeo);
    }
}
