//! Randomized differential test of the collection types: a seeded random
//! stream of hash, list, set, sorted-set and GEO commands (with TYPE, OBJECT
//! ENCODING, DEL, EXISTS, RENAME, COPY, SORT, the blocking commands and
//! MULTI/EXEC groups around them) goes to Tessera (`--shards 3`, and 32 shards each on its own thread) and to a
//! real `redis-server`, and the raw reply bytes must agree. The same design
//! as `tests/random_differential.rs` (strings and keyspace):
//!
//! * per seed a RESP2 pass and a RESP3 pass (after `HELLO 3`) on fresh
//!   connections; `FLUSHALL` every [`CHECKPOINT_EVERY`] commands so a
//!   failure report (seed, pass, step, the commands since the checkpoint in
//!   `tests/diff/*.txt` syntax, both replies) is short;
//! * about 8% of the time a pipeline of several commands in one write;
//! * the key space is 9 keys over the 3 shards (`b f {w}1 {w}2` on shard
//!   0, `c g` on 1, `a {t}1 {t}2` on 2), so multi-key commands (SMOVE,
//!   LMOVE, *STORE, ZUNION, SORT .. STORE, RENAME, COPY) cross shards or
//!   stay on one (SORT's BY/GET patterns `*` name the keys `a b c f g` by
//!   sorted-set members, so they read keys on any shard); at every checkpoint each type gets two of them as its
//!   "own" keys, and other keys are picked now and then (WRONGTYPE paths);
//! * the encoding thresholds are set low on both servers
//!   (`hash-max-listpack-entries 4` ...), and values are sometimes longer
//!   than `*-max-listpack-value`, so conversions happen all the time.
//!
//! Comparison: replies whose order Redis leaves to its hash tables
//! (HGETALL, HKEYS, HVALS, SMEMBERS, SINTER/SUNION/SDIFF, SPOP/SRANDMEMBER/
//! HRANDFIELD/ZRANDMEMBER with a count covering the whole collection) are
//! compared sorted (by field-value pair where the reply has pairs); all
//! else byte for byte.
//!
//! Left out by design:
//! * random replies: SPOP/SRANDMEMBER/HRANDFIELD/ZRANDMEMBER only with a
//!   count larger than any collection here (then the reply is the whole
//!   collection);
//! * `OBJECT ENCODING` of sets: Tessera uses Redis 7.2's listpack for small
//!   non-integer sets where 7.0 says hashtable (sent only after `TYPE`
//!   said the key is not a set);
//! * `ZRANK/ZREVRANK .. WITHSCORE` (7.2 only);
//! * lex ranges (ZRANGEBYLEX, ZLEXCOUNT, ZRANGE BYLEX, ZREMRANGEBYLEX,
//!   ZRANGESTORE BYLEX) on a skiplist-encoded zset whose scores are not
//!   all equal: Redis's reply then depends on its skiplist's random levels
//!   (see `crates/commands/src/zset/lex.rs`). They are sent only after
//!   `OBJECT ENCODING k` said `listpack` (where Redis's walk is
//!   deterministic, mixed scores or not) or `ZCARD k` and `ZCOUNT k 0 0`
//!   agreed (all scores are 0);
//! * blocking: BLPOP & co. have a 0.01 s timeout and are sent only when
//!   `EXISTS` says all their keys exist (so they never block: served or
//!   WRONGTYPE), or inside MULTI (where they never block).
//!
//! Environment (as in `tests/random_differential.rs`):
//! * `RANDOM_TYPES_SEEDS=1,2,77` — seeds (default [`DEFAULT_SEEDS`]);
//! * `RANDOM_TYPES_STEPS=N` — commands per pass (default [`DEFAULT_STEPS`]);
//! * `RANDOM_TYPES_SHOW=1` — print every command with Redis's reply (with
//!   `-- --nocapture`).
//!
//! Validate the test itself (Redis on both sides must always agree):
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test random_types`.
//!
//! Skipped (with a message) if `redis-server` is not on PATH, unless
//! `TESSERA_REQUIRE_REDIS=1`. Cases known to differ are kept out of the
//! generator with a `KNOWN:` comment giving the reproduction.
//!
//! This file runs the passes and compares; the generator (what is sent,
//! how its replies compare, when a command may be sent) is
//! `tests/random_types/gen.rs`.

mod common;

use common::{escape, split_aggregate, Layout, RawConn, Server};
use std::fmt::Write as _;

const DEFAULT_SEEDS: &[u64] = &[1, 0x7e55e7a, 20240601];
const DEFAULT_STEPS: usize = 2000;
/// Commands between two `FLUSHALL` checkpoints.
const CHECKPOINT_EVERY: usize = 250;
/// Bytes of a reply shown in a report.
const SHOW_BYTES_MAX: usize = 2000;

/// Low encoding thresholds, set on both servers before the first pass.
const CONFIG: &[(&str, &str)] = &[
    ("hash-max-listpack-entries", "4"),
    ("hash-max-listpack-value", "16"),
    ("set-max-intset-entries", "6"),
    ("zset-max-listpack-entries", "4"),
    ("zset-max-listpack-value", "16"),
    ("list-max-listpack-size", "4"),
];

#[path = "random_types/gen.rs"]
mod gen;

use gen::{b, step, Gen, Guard, Mode, Step};

// ---------------------------------------------------------------- running

/// A history line as it would appear in a `tests/diff/*.txt` script.
fn script_line(args: &[Vec<u8>], mode: Mode) -> String {
    let mut line = String::new();
    if mode != Mode::Exact {
        line.push_str("@sorted ");
    }
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            line.push(' ');
        }
        let plain = !a.is_empty()
            && a.iter()
                .all(|&c| c.is_ascii_graphic() && c != b'"' && c != b'\'' && c != b'\\');
        if plain {
            line.push_str(std::str::from_utf8(a).expect("ascii"));
        } else {
            line.push('"');
            for &c in a {
                match c {
                    b'"' => line.push_str("\\\""),
                    b'\\' => line.push_str("\\\\"),
                    0x20..=0x7e => line.push(c as char),
                    _ => {
                        let _ = write!(line, "\\x{c:02x}");
                    }
                }
            }
            line.push('"');
        }
    }
    line
}

/// `reply` with the elements of its top-level aggregate sorted (`pairs`:
/// sorted as consecutive pairs, unless the elements are aggregates
/// themselves, as in RESP3's `[[field, value], ...]`).
fn sorted_reply(reply: &[u8], pairs: bool) -> Vec<u8> {
    let Some((kind, items)) = split_aggregate(reply) else {
        return reply.to_vec();
    };
    let nested = items
        .first()
        .is_some_and(|i| matches!(i.first(), Some(b'*' | b'%' | b'~')));
    let mut chunks: Vec<Vec<u8>> = if (pairs || kind == b'%') && !nested {
        items.chunks(2).map(|c| c.concat()).collect()
    } else {
        items
    };
    chunks.sort();
    let header_end = reply.iter().position(|&c| c == b'\n').expect("header") + 1;
    let mut out = reply[..header_end].to_vec();
    for c in chunks {
        out.extend_from_slice(&c);
    }
    out
}

fn agree(mode: Mode, t: &[u8], r: &[u8]) -> bool {
    match mode {
        Mode::Exact => t == r,
        Mode::Sorted => sorted_reply(t, false) == sorted_reply(r, false),
        Mode::SortedPairs => sorted_reply(t, true) == sorted_reply(r, true),
    }
}

struct Run<'a> {
    seed: u64,
    pass: &'static str,
    tessera: RawConn,
    redis: RawConn,
    /// Script lines since the last checkpoint.
    history: Vec<String>,
    /// Prefix lines of every history (e.g. `@resp3`).
    preamble: Vec<String>,
    /// The three previous replies from Redis, oldest first (for guards).
    recent: [Vec<u8>; 3],
    /// Steps skipped by their guard, steps sent.
    skipped: usize,
    sent: usize,
    /// RANDOM_TYPES_SHOW=1: print every line with Redis's reply.
    show: bool,
    _servers: &'a (Server, Server),
}

impl Run<'_> {
    fn guard_holds(&self, guard: Guard) -> bool {
        match guard {
            Guard::Always => true,
            Guard::AllExist(n) => self.recent[2] == format!(":{n}\r\n").into_bytes(),
            Guard::NotSet => self.recent[2] != b"+set\r\n",
            Guard::LexDeterministic => {
                self.recent[0] == b"$8\r\nlistpack\r\n" || self.recent[1] == self.recent[2]
            }
        }
    }

    /// Sends `steps` in one write to each server (a pipeline when there are
    /// several), then reads and compares the replies in order.
    fn send_batch(&mut self, steps: &[Step], step_no: usize) {
        let mut request = Vec::new();
        for s in steps {
            let refs: Vec<&[u8]> = s.args.iter().map(|a| a.as_slice()).collect();
            request.extend_from_slice(&common::encode_command(&refs));
        }
        if steps.len() > 1 {
            self.history
                .push(format!("# the next {} lines were pipelined", steps.len()));
        }
        let first_line = self.history.len();
        for s in steps {
            self.history.push(script_line(&s.args, s.mode));
        }
        self.sent += steps.len();
        let mut replies = Vec::new();
        for conn in [&mut self.tessera, &mut self.redis] {
            replies.push(conn.try_send(&request).and_then(|()| {
                (0..steps.len())
                    .map(|_| conn.try_read_reply())
                    .collect::<std::io::Result<Vec<_>>>()
            }));
        }
        let r_all = replies.pop().expect("redis");
        let t_all = replies.pop().expect("tessera");
        let (t_all, r_all) = match (t_all, r_all) {
            (Ok(t), Ok(r)) => (t, r),
            (t, r) => self.fail(
                step_no,
                &format!(
                    "transport failure\n  tessera: {:?}\n  redis:   {:?}",
                    t.err(),
                    r.err()
                ),
            ),
        };
        for (i, (s, (t, r))) in steps.iter().zip(t_all.iter().zip(r_all)).enumerate() {
            if !agree(s.mode, t, &r) {
                self.history.truncate(first_line + i + 1);
                let detail = format!(
                    "replies differ{}\n  tessera: {}\n  redis:   {}",
                    if s.mode == Mode::Exact {
                        ""
                    } else {
                        " (compared sorted)"
                    },
                    escape(t, SHOW_BYTES_MAX),
                    escape(&r, SHOW_BYTES_MAX)
                );
                self.fail(step_no, &detail);
            }
            if self.show {
                println!(
                    "{}\n    -> {}",
                    self.history[first_line + i],
                    escape(&r, 200)
                );
            }
            self.recent.rotate_left(1);
            self.recent[2] = r;
        }
    }

    fn send(&mut self, s: Step, step_no: usize) {
        if !self.guard_holds(s.guard) {
            self.skipped += 1;
            return;
        }
        self.send_batch(&[s], step_no);
    }

    fn checkpoint(&mut self, step_no: usize) {
        self.history.clear();
        self.send(step(vec![b("FLUSHALL")], Mode::Exact), step_no);
        self.history.clear();
    }

    fn fail(&self, step_no: usize, detail: &str) -> ! {
        let mut report = format!(
            "random types differential mismatch: seed {} ({}), step {step_no}\n\
             reproduce: RANDOM_TYPES_SEEDS={} cargo test --test random_types\n\
             --- commands since the last FLUSHALL (script format) ---\n",
            self.seed, self.pass, self.seed
        );
        for l in self.preamble.iter().chain(self.history.iter()) {
            let _ = writeln!(report, "{l}");
        }
        let _ = writeln!(report, "--- the last line's replies ---\n{detail}");
        panic!("{report}");
    }
}

fn run_pass(servers: &(Server, Server), seed: u64, resp3: bool, steps: usize) -> (usize, usize) {
    let mut run = Run {
        seed,
        pass: if resp3 { "RESP3" } else { "RESP2" },
        tessera: servers.0.raw(),
        redis: servers.1.raw(),
        history: Vec::new(),
        preamble: CONFIG
            .iter()
            .map(|(name, value)| format!("CONFIG SET {name} {value}"))
            .collect(),
        recent: [Vec::new(), Vec::new(), Vec::new()],
        skipped: 0,
        sent: 0,
        show: std::env::var("RANDOM_TYPES_SHOW").is_ok_and(|v| v == "1"),
        _servers: servers,
    };
    if resp3 {
        // The HELLO reply differs (server name, version, id); only check
        // that neither side refused.
        for conn in [&mut run.tessera, &mut run.redis] {
            conn.try_send(&common::encode_command(&[b"HELLO", b"3"]))
                .expect("HELLO 3");
            let reply = conn.try_read_reply().expect("HELLO 3");
            assert!(
                reply.first() == Some(&b'%'),
                "HELLO 3 replied {}",
                escape(&reply, 200)
            );
        }
        run.preamble.push("@resp3".into());
    }
    let mut gen = Gen::new(seed ^ if resp3 { 0x5eed_0003 } else { 0x5eed_0002 });
    for step_no in 0..steps {
        if step_no % CHECKPOINT_EVERY == 0 {
            run.checkpoint(step_no);
            gen.refocus();
        }
        // Now and then a pipeline: several commands in one write, replies
        // read afterwards (a sharded server must still answer in order).
        if gen.rng.pct(8) {
            let mut batch = Vec::new();
            for _ in 0..2 + gen.rng.below(12) {
                batch.extend(gen.next());
            }
            // Guards need the previous reply before sending: not in a
            // pipeline.
            batch.retain(|s| s.guard == Guard::Always);
            run.send_batch(&batch, step_no);
            continue;
        }
        for s in gen.next() {
            run.send(s, step_no);
        }
    }
    (run.sent, run.skipped)
}

fn env_list(name: &str) -> Option<Vec<u64>> {
    let v = std::env::var(name).ok()?;
    let list = v
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: {s:?} is not a number"))
        })
        .collect();
    Some(list)
}

/// 3 shards, consolidated (the layout these seeds were first run in).
#[test]
fn random_types_differential() {
    random_types_in(Layout::new(3, true));
}

/// 32 shards on their own threads (issue 27): on 2 cores every multi-shard
/// command and MULTI/EXEC crosses threads that interleave.
#[test]
fn random_types_differential_32_shards_apart() {
    random_types_in(Layout::new(32, false));
}

fn random_types_in(layout: Layout) {
    if !common::redis_available() {
        eprintln!(
            "SKIPPED random types differential test: redis-server is not on PATH \
             (install redis-server; CI sets TESSERA_REQUIRE_REDIS=1 to make this fatal)"
        );
        return;
    }
    let seeds = env_list("RANDOM_TYPES_SEEDS").unwrap_or_else(|| DEFAULT_SEEDS.to_vec());
    let steps = env_list("RANDOM_TYPES_STEPS")
        .and_then(|v| v.first().copied())
        .map_or(DEFAULT_STEPS, |n| n as usize);
    // `TESSERA_TEST_BIN=/usr/bin/redis-server` validates the test itself
    // (Redis against Redis must always agree); Redis has no `--shards`.
    let servers = (layout.tessera(&[]), Server::redis(&[]));
    for server in [&servers.0, &servers.1] {
        let mut conn = server.raw();
        for (name, value) in CONFIG {
            let reply = conn.cmd_str(&["CONFIG", "SET", name, value]);
            assert_eq!(reply, b"+OK\r\n", "CONFIG SET {name} {value}");
        }
    }
    let started = std::time::Instant::now();
    let (mut sent, mut skipped) = (0, 0);
    for &seed in &seeds {
        for resp3 in [false, true] {
            let (s, k) = run_pass(&servers, seed, resp3, steps);
            sent += s;
            skipped += k;
        }
    }
    eprintln!(
        "random types differential ({layout}): {} seed(s) x 2 protocols x {steps} steps agree \
         ({sent} commands sent, {skipped} skipped by their guard, {:?})",
        seeds.len(),
        started.elapsed()
    );
}

#[test]
fn sorted_pairs_keep_pairs_together() {
    let flat = b"*4\r\n$1\r\nb\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\n2\r\n";
    let want = b"*4\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$1\r\n1\r\n";
    assert_eq!(sorted_reply(flat, true), want.to_vec());
    // Sorted element by element, the values would part from their fields.
    assert_ne!(sorted_reply(flat, false), want.to_vec());
    let map = b"%2\r\n$1\r\nb\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\n2\r\n";
    let want = b"%2\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$1\r\n1\r\n";
    assert_eq!(sorted_reply(map, false), want.to_vec());
}
