//! Issue 21: liveness and correctness of transactions and blocking commands
//! mixed with every family's commands, single- and multi-shard, on several
//! connections at once, at 2, 4 and 32 shards, with shard consolidation on
//! and off.
//!
//! Two tests, each run on every configuration:
//!
//! * **Differential** ([`tx_differential`]): [`CONNS`] connections to
//!   Tessera and as many to a real `redis-server` get the same seeded random
//!   stream, one command at a time (the connection chosen at random), so
//!   the outcome is deterministic and the raw replies must be identical.
//!   The stream mixes WATCH, UNWATCH, MULTI, EXEC, DISCARD and RESET with
//!   strings, keys, hashes, lists, sets and sorted sets, and with blocking
//!   commands (timeout 0: they block until a push, CLIENT UNBLOCK or CLIENT
//!   KILL from another connection ends them). Whether a blocking command
//!   blocked is read from `CLIENT LIST ID` (flag `b`) on a control
//!   connection of each server; after every command, each blocked
//!   connection that Redis served must get the same reply from Tessera.
//! * **Liveness** ([`tx_liveness`]): [`THREADS`] threads hammer Tessera
//!   alone with the same kinds of commands at once (blocking ones with short
//!   timeouts), killing and unblocking each other now and then.
//!
//! Every reply has a deadline ([`REPLY_DEADLINE`]): a reply that does not
//! come fails the test with the history of commands that led to it. Work is
//! bounded by a step count, never by time.
//!
//! Environment: `RANDOM_TX_SEEDS=1,2` (default [`DEFAULT_SEEDS`]),
//! `RANDOM_TX_STEPS=N` (default [`DEFAULT_STEPS`]), `RANDOM_TX_SHOW=1`
//! (print every command with Redis's reply, with `-- --nocapture`).
//! Validate the differential test itself (Redis on both sides):
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test random_tx`.

mod common;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{encode_command, escape, testing_real_redis, RawConn, Rng, Server};

const DEFAULT_SEEDS: &[u64] = &[1, 0x21_21];
const DEFAULT_STEPS: usize = 700;
/// Connections per server in the differential test.
const CONNS: usize = 4;
/// Threads (each with one connection) in the liveness test.
const THREADS: usize = 6;
/// Commands per thread in the liveness test.
const LIVENESS_STEPS: usize = 400;
/// How long any reply may take before the test fails (a hang).
const REPLY_DEADLINE: Duration = Duration::from_secs(10);
/// Commands kept for a failure report.
const HISTORY_MAX: usize = 80;
/// Commands between two FLUSHALLs in the differential test.
const CHECKPOINT_EVERY: usize = 150;

/// Keys: plain ones spread over the shards, `{t}` ones share a slot. Each
/// family mostly uses its own three (so its commands build on each other
/// and blocked pops get woken); keyspace commands use them all.
const KEYS: &[&str] = &[
    "s1", "s2", "{t}s", "h1", "h2", "{t}h", "l1", "l2", "{t}l", "S1", "S2", "{t}S", "z1", "z2",
    "{t}z",
];
/// The families' key groups in [`KEYS`].
#[derive(Clone, Copy)]
enum Fam {
    Str = 0,
    Hash = 3,
    List = 6,
    Set = 9,
    Zset = 12,
}
const VALUES: &[&str] = &["1", "2", "x", "10", "-3", "hello", ""];
const MEMBERS: &[&str] = &["m1", "m2", "m3", "7", "z"];

// ---------------------------------------------------------------- commands

/// One argument of a generated command: literal bytes, or the client id of
/// a connection (which differs between the servers).
#[derive(Clone, Debug)]
enum Arg {
    Lit(String),
    Id(usize),
}

/// How replies are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    Exact,
    /// A flat array whose order is the hash table's (SMEMBERS).
    Sorted,
}

/// What a command does to the driver's model of its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Plain,
    /// May block (outside MULTI).
    Blocking,
    Multi,
    /// EXEC, DISCARD: ends a MULTI.
    EndMulti,
    Reset,
    /// CLIENT KILL ID of connection n: it is gone afterwards.
    Kill(usize),
}

#[derive(Clone, Debug)]
struct Cmd {
    args: Vec<Arg>,
    cmp: Cmp,
    kind: Kind,
}

impl Cmd {
    fn render(&self, ids: &[u64]) -> Vec<u8> {
        let args: Vec<Vec<u8>> = self
            .args
            .iter()
            .map(|a| match a {
                Arg::Lit(s) => s.as_bytes().to_vec(),
                Arg::Id(n) => ids[*n].to_string().into_bytes(),
            })
            .collect();
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        encode_command(&refs)
    }

    fn line(&self) -> String {
        let mut s = String::new();
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            match a {
                Arg::Lit(l) if l.is_empty() => s.push_str("\"\""),
                Arg::Lit(l) => s.push_str(l),
                Arg::Id(n) => {
                    let _ = write!(s, "<id of conn {n}>");
                }
            }
        }
        s
    }
}

fn lit(words: &[&str]) -> Vec<Arg> {
    words.iter().map(|w| Arg::Lit(w.to_string())).collect()
}

/// The generator: families of commands over a small key space.
struct Gen {
    rng: Rng,
}

impl Gen {
    fn key(&mut self) -> &'static str {
        let v: &&'static str = self.rng.pick(KEYS);
        v
    }
    /// A key of family `f` (now and then any key: WRONGTYPE paths).
    fn fkey(&mut self, f: Fam) -> &'static str {
        if self.rng.pct(8) {
            return self.key();
        }
        KEYS[f as usize + self.rng.below(3) as usize]
    }
    fn keys(&mut self, max: u64) -> Vec<&'static str> {
        let n = 1 + self.rng.below(max);
        (0..n).map(|_| self.key()).collect()
    }
    fn fkeys(&mut self, f: Fam, max: u64) -> Vec<&'static str> {
        let n = 1 + self.rng.below(max);
        (0..n).map(|_| self.fkey(f)).collect()
    }
    fn val(&mut self) -> &'static str {
        let v: &&'static str = self.rng.pick(VALUES);
        v
    }
    fn member(&mut self) -> &'static str {
        let v: &&'static str = self.rng.pick(MEMBERS);
        v
    }

    /// A command for connection `me` (in MULTI or not) with `conns`
    /// connections; `may_block`: a blocking command may really block
    /// (another connection stays free to wake it).
    fn command(&mut self, me: usize, conns: usize, in_multi: bool, may_block: bool) -> Cmd {
        let plain = |args: Vec<Arg>| Cmd {
            args,
            cmp: Cmp::Exact,
            kind: Kind::Plain,
        };
        let r = self.rng.below(100);
        let fam = match r {
            22..=29 | 69..=79 => Some(Fam::List),
            34..=47 => Some(Fam::Str),
            63..=68 => Some(Fam::Hash),
            80..=87 => Some(Fam::Set),
            88..=97 => Some(Fam::Zset),
            _ => None,
        };
        let (k1, k2) = match fam {
            Some(f) => (self.fkey(f), self.fkey(f)),
            None => (self.key(), self.key()),
        };
        let (v, m) = (self.val(), self.member());
        match r {
            // Transactions.
            0..=5 => {
                let mut a = lit(&["WATCH"]);
                a.extend(self.keys(3).iter().map(|k| Arg::Lit(k.to_string())));
                plain(a)
            }
            6..=7 => plain(lit(&["UNWATCH"])),
            8..=12 => Cmd {
                args: lit(&["MULTI"]),
                cmp: Cmp::Exact,
                kind: Kind::Multi,
            },
            13..=17 if in_multi => Cmd {
                args: lit(&["EXEC"]),
                cmp: Cmp::Exact,
                kind: Kind::EndMulti,
            },
            18 if in_multi => Cmd {
                args: lit(&["DISCARD"]),
                cmp: Cmp::Exact,
                kind: Kind::EndMulti,
            },
            19 => Cmd {
                args: lit(&["RESET"]),
                cmp: Cmp::Exact,
                kind: Kind::Reset,
            },
            20 if in_multi => plain(lit(&["NOSUCHCOMMAND", k1])),
            21 if in_multi => plain(lit(&["GET"])),
            // Blocking commands (non-blocking inside MULTI).
            22..=29 if in_multi || may_block => {
                // KNOWN: Redis serves blocked clients in the order their
                // keys became ready. Tessera serves each shard's ready keys
                // on that shard, so when one command readies keys on
                // several shards (EXEC, or a BLMOVE into another shard
                // served by its home thread running it again), a client
                // waiting on keys of several shards may be served from
                // another key than in Redis. Outside MULTI a blocking
                // command here waits on one key (repeated or not) and
                // moves within it; the liveness test and
                // `tests/blocking.rs` cover keys across shards.
                let k2 = if in_multi { k2 } else { k1 };
                let one_key = !in_multi;
                let mut a = match self.rng.below(5) {
                    0 => lit(&["BLPOP"]),
                    1 => lit(&["BRPOP"]),
                    2 => {
                        let mut a = lit(&["BZPOPMIN"]);
                        let keys = self.fkeys(Fam::Zset, 3);
                        let keys = if one_key {
                            vec![keys[0]; keys.len()]
                        } else {
                            keys
                        };
                        a.extend(keys.iter().map(|k| Arg::Lit(k.to_string())));
                        a.push(Arg::Lit("0".into()));
                        return Cmd {
                            args: a,
                            cmp: Cmp::Exact,
                            kind: if in_multi {
                                Kind::Plain
                            } else {
                                Kind::Blocking
                            },
                        };
                    }
                    3 => {
                        return Cmd {
                            args: lit(&["BLMOVE", k1, k2, "LEFT", "RIGHT", "0"]),
                            cmp: Cmp::Exact,
                            kind: if in_multi {
                                Kind::Plain
                            } else {
                                Kind::Blocking
                            },
                        }
                    }
                    _ => {
                        return Cmd {
                            args: lit(&["BRPOPLPUSH", k1, k2, "0"]),
                            cmp: Cmp::Exact,
                            kind: if in_multi {
                                Kind::Plain
                            } else {
                                Kind::Blocking
                            },
                        }
                    }
                };
                let keys = self.fkeys(Fam::List, 3);
                let keys = if one_key {
                    vec![keys[0]; keys.len()]
                } else {
                    keys
                };
                a.extend(keys.iter().map(|k| Arg::Lit(k.to_string())));
                a.push(Arg::Lit("0".into()));
                Cmd {
                    args: a,
                    cmp: Cmp::Exact,
                    kind: if in_multi {
                        Kind::Plain
                    } else {
                        Kind::Blocking
                    },
                }
            }
            // Other connections: unblock and kill.
            30..=32 if conns > 1 => {
                let other = (me + 1 + self.rng.below(conns as u64 - 1) as usize) % conns;
                let mut a = lit(&["CLIENT", "UNBLOCK"]);
                a.push(Arg::Id(other));
                if self.rng.pct(50) {
                    a.push(Arg::Lit("ERROR".into()));
                }
                plain(a)
            }
            33 if conns > 1 && !in_multi => {
                let other = (me + 1 + self.rng.below(conns as u64 - 1) as usize) % conns;
                let mut a = lit(&["CLIENT", "KILL", "ID"]);
                a.push(Arg::Id(other));
                Cmd {
                    args: a,
                    cmp: Cmp::Exact,
                    kind: Kind::Kill(other),
                }
            }
            // Strings.
            34..=37 => plain(lit(&["SET", k1, v])),
            38..=39 => plain(lit(&["GET", k1])),
            40 => plain(lit(&["INCR", k1])),
            41 => plain(lit(&["APPEND", k1, v])),
            42..=43 => {
                let mut a = lit(&["MSET"]);
                for k in self.fkeys(Fam::Str, 3) {
                    a.push(Arg::Lit(k.into()));
                    a.push(Arg::Lit(self.val().into()));
                }
                plain(a)
            }
            44..=45 => {
                let mut a = lit(&["MGET"]);
                a.extend(
                    self.fkeys(Fam::Str, 4)
                        .iter()
                        .map(|k| Arg::Lit(k.to_string())),
                );
                plain(a)
            }
            46 => plain(lit(&["GETDEL", k1])),
            47 => {
                let mut a = lit(&["MSETNX"]);
                for k in self.fkeys(Fam::Str, 2) {
                    a.push(Arg::Lit(k.into()));
                    a.push(Arg::Lit(self.val().into()));
                }
                plain(a)
            }
            // Keys.
            48..=50 => {
                let mut a = lit(&[if self.rng.pct(50) { "DEL" } else { "UNLINK" }]);
                a.extend(self.keys(3).iter().map(|k| Arg::Lit(k.to_string())));
                plain(a)
            }
            51..=52 => {
                let mut a = lit(&["EXISTS"]);
                a.extend(self.keys(4).iter().map(|k| Arg::Lit(k.to_string())));
                plain(a)
            }
            53 => plain(lit(&["TYPE", k1])),
            54 => plain(lit(&["RENAME", k1, k2])),
            55 => plain(lit(&["COPY", k1, k2, "REPLACE"])),
            56 => plain(lit(&["EXPIRE", k1, "1000"])),
            57 => plain(lit(&["PEXPIRE", k1, "-1"])),
            58 => plain(lit(&["PERSIST", k1])),
            59 => plain(lit(&["SELECT", if self.rng.pct(70) { "0" } else { "1" }])),
            60 if self.rng.pct(30) => plain(lit(&["SWAPDB", "0", "1"])),
            61 if self.rng.pct(30) => plain(lit(&["FLUSHDB"])),
            62 => plain(lit(&["DBSIZE"])),
            // Hashes.
            63..=64 => plain(lit(&["HSET", k1, m, v])),
            65 => plain(lit(&["HGET", k1, m])),
            66 => plain(lit(&["HDEL", k1, m])),
            67 => plain(lit(&["HGETALL", k1])),
            68 => plain(lit(&["HINCRBY", k1, m, "2"])),
            // Lists.
            69..=72 => {
                let mut a = lit(&[if self.rng.pct(50) { "LPUSH" } else { "RPUSH" }, k1]);
                for _ in 0..=self.rng.below(2) {
                    a.push(Arg::Lit(self.member().into()));
                }
                plain(a)
            }
            73 => plain(lit(&["LPOP", k1])),
            74 => plain(lit(&["RPOP", k1])),
            75..=76 => plain(lit(&["LRANGE", k1, "0", "-1"])),
            77 => plain(lit(&["RPOPLPUSH", k1, k2])),
            78 => plain(lit(&["LMOVE", k1, k2, "RIGHT", "LEFT"])),
            79 => plain(lit(&["LLEN", k1])),
            // Sets.
            80..=81 => plain(lit(&["SADD", k1, m, self.member()])),
            82 => plain(lit(&["SREM", k1, m])),
            83 => plain(lit(&["SCARD", k1])),
            84 if !in_multi => Cmd {
                args: lit(&["SMEMBERS", k1]),
                cmp: Cmp::Sorted,
                kind: Kind::Plain,
            },
            85 => plain(lit(&["SMOVE", k1, k2, m])),
            86 => plain(lit(&["SINTERCARD", "2", k1, k2])),
            87 => plain(lit(&["SUNIONSTORE", k1, k2, self.fkey(Fam::Set)])),
            // Sorted sets.
            88..=90 => plain(lit(&["ZADD", k1, v_score(v), m])),
            91 => plain(lit(&["ZINCRBY", k1, "1.5", m])),
            92..=93 => plain(lit(&["ZRANGE", k1, "0", "-1", "WITHSCORES"])),
            94 => plain(lit(&["ZREM", k1, m])),
            95 => plain(lit(&["ZPOPMIN", k1])),
            96 => plain(lit(&["ZUNIONSTORE", k1, "2", k2, self.fkey(Fam::Zset)])),
            97 => plain(lit(&["ZCARD", k1])),
            // Connection.
            98 => plain(lit(&["PING"])),
            _ => plain(lit(&["ECHO", v])),
        }
    }
}

/// A score for ZADD from a value (some are not numbers: an error reply).
fn v_score(v: &'static str) -> &'static str {
    match v {
        "" => "1",
        "hello" => "2.5",
        other => other,
    }
}

// ---------------------------------------------------------------- one side

/// One server's connections.
struct Side {
    addr: String,
    conns: Vec<RawConn>,
    ids: Vec<u64>,
    /// Asks CLIENT LIST ID for the blocked flag.
    ctl: RawConn,
}

fn connect(addr: &str) -> (RawConn, u64) {
    let mut c = RawConn::connect(addr);
    c.set_reply_timeout(REPLY_DEADLINE);
    let id = int_reply(&c.cmd_str(&["CLIENT", "ID"]));
    (c, id)
}

fn int_reply(reply: &[u8]) -> u64 {
    let s = String::from_utf8_lossy(reply);
    s.trim_start_matches(':')
        .trim_end()
        .parse()
        .unwrap_or_else(|_| panic!("an integer reply, got {s:?}"))
}

impl Side {
    fn new(srv: &Server) -> Side {
        let addr = srv.addr();
        let (mut conns, mut ids) = (Vec::new(), Vec::new());
        for _ in 0..CONNS {
            let (c, id) = connect(&addr);
            conns.push(c);
            ids.push(id);
        }
        let (ctl, _) = connect(&addr);
        Side {
            addr,
            conns,
            ids,
            ctl,
        }
    }

    fn reconnect(&mut self, n: usize) {
        let (c, id) = connect(&self.addr);
        self.conns[n] = c;
        self.ids[n] = id;
    }

    /// Whether connection `n` is blocked (CLIENT LIST ID's flag `b`), and
    /// the command it last ran.
    fn blocked(&mut self, n: usize) -> Result<(bool, String), String> {
        let id = self.ids[n].to_string();
        let reply = self
            .ctl
            .try_read_reply_after(&["CLIENT", "LIST", "ID", &id])
            .map_err(|e| format!("CLIENT LIST ID {id}: {e}"))?;
        let line = String::from_utf8_lossy(&reply).into_owned();
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or("")
                .to_string()
        };
        Ok((field("flags=").contains('b'), field("cmd=")))
    }

    /// After a blocking command went to connection `n`: its reply, or None
    /// once the server says it blocked.
    fn settle(&mut self, n: usize, cmd: &str) -> Result<Option<Vec<u8>>, String> {
        let deadline = Instant::now() + REPLY_DEADLINE;
        loop {
            if let Some(r) = self.try_reply(n)? {
                return Ok(Some(r));
            }
            let (blocked, last) = self.blocked(n)?;
            if blocked && last == cmd {
                // The reply may have come meanwhile (served at once).
                return self.try_reply(n);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "conn {n}: neither a reply nor blocked within {REPLY_DEADLINE:?}"
                ));
            }
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// A complete reply on connection `n` if one has arrived.
    fn try_reply(&mut self, n: usize) -> Result<Option<Vec<u8>>, String> {
        let c = &mut self.conns[n];
        match c.poll_bytes(Duration::ZERO) {
            None => Ok(None),
            // A reply has started: the rest follows within the deadline.
            Some(_) => c.try_read_reply().map(Some).map_err(|e| e.to_string()),
        }
    }
}

trait CmdAfter {
    fn try_read_reply_after(&mut self, args: &[&str]) -> std::io::Result<Vec<u8>>;
}

impl CmdAfter for RawConn {
    fn try_read_reply_after(&mut self, args: &[&str]) -> std::io::Result<Vec<u8>> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.try_send(&encode_command(&args))?;
        self.try_read_reply()
    }
}

// ---------------------------------------------------------------- the run

/// The driver's model of one connection (the same on both servers).
#[derive(Clone, Copy, Default)]
struct ConnModel {
    multi: bool,
    blocked: bool,
}

struct Run {
    t: Side,
    r: Side,
    model: Vec<ConnModel>,
    history: VecDeque<String>,
    label: String,
    show: bool,
}

impl Run {
    fn note(&mut self, line: String) {
        if self.show {
            println!("{line}");
        }
        if self.history.len() == HISTORY_MAX {
            self.history.pop_front();
        }
        self.history.push_back(line);
    }

    fn fail(&self, step: usize, why: &str) -> ! {
        let mut s = format!(
            "{}: step {step}: {why}\nhistory (oldest first):\n",
            self.label
        );
        for h in &self.history {
            let _ = writeln!(s, "  {h}");
        }
        panic!("{s}");
    }

    fn compare(&self, step: usize, what: &str, cmp: Cmp, t: &[u8], r: &[u8]) {
        let (tt, rr) = match cmp {
            Cmp::Exact => (t.to_vec(), r.to_vec()),
            Cmp::Sorted => (sorted(t), sorted(r)),
        };
        if tt != rr {
            self.fail(
                step,
                &format!(
                    "{what}: replies differ\n  tessera: {}\n  redis:   {}",
                    escape(t, 400),
                    escape(r, 400)
                ),
            );
        }
    }

    fn step(&mut self, step: usize, gen: &mut Gen) {
        let free: Vec<usize> = (0..CONNS).filter(|&n| !self.model[n].blocked).collect();
        let me = *gen.rng.pick(&free);
        let may_block = free.len() >= 2;
        let cmd = gen.command(me, CONNS, self.model[me].multi, may_block);
        let line = cmd.line();
        let (tb, rb) = (cmd.render(&self.t.ids), cmd.render(&self.r.ids));
        if let Err(e) = self.r.conns[me].try_send(&rb) {
            self.fail(step, &format!("redis send: {e}"));
        }
        if let Err(e) = self.t.conns[me].try_send(&tb) {
            self.fail(step, &format!("tessera send: {e}"));
        }
        if cmd.kind == Kind::Blocking {
            let name = blocking_name(&cmd);
            let r = self.r.settle(me, &name);
            let r = r.unwrap_or_else(|e| self.fail(step, &format!("redis: {e}")));
            let t = self.t.settle(me, &name);
            let t = t.unwrap_or_else(|e| self.fail(step, &format!("tessera: {e}")));
            match (&t, &r) {
                (Some(t), Some(r)) => {
                    self.note(format!("[{me}] {line} -> {}", escape(r, 200)));
                    self.compare(step, &line, cmd.cmp, t, r);
                }
                (None, None) => {
                    self.note(format!("[{me}] {line} -> (blocked)"));
                    self.model[me].blocked = true;
                }
                _ => self.fail(
                    step,
                    &format!(
                        "[{me}] {line}: blocked on one side only\n  tessera: {}\n  redis:   {}",
                        t.as_deref().map_or("(blocked)".into(), |b| escape(b, 200)),
                        r.as_deref().map_or("(blocked)".into(), |b| escape(b, 200)),
                    ),
                ),
            }
            return;
        }
        let r = self.r.conns[me].try_read_reply();
        let r = r.unwrap_or_else(|e| self.fail(step, &format!("[{me}] {line}: redis: {e}")));
        self.note(format!("[{me}] {line} -> {}", escape(&r, 200)));
        let t = self.t.conns[me].try_read_reply();
        let t = t.unwrap_or_else(|e| self.fail(step, &format!("[{me}] {line}: tessera: {e}")));
        self.compare(step, &line, cmd.cmp, &t, &r);
        match cmd.kind {
            Kind::Multi if r == b"+OK\r\n" => self.model[me].multi = true,
            Kind::EndMulti | Kind::Reset => self.model[me].multi = false,
            Kind::Kill(n) => {
                // Both closed it: reconnect with a fresh model.
                for side in [&mut self.t, &mut self.r] {
                    let _ = side.conns[n].wait_closed(REPLY_DEADLINE);
                    side.reconnect(n);
                }
                self.model[n] = ConnModel::default();
                self.note(format!("[{n}] reconnected"));
            }
            _ => {}
        }
        self.served(step);
    }

    /// After a command: every blocked connection Redis served must get the
    /// same reply from Tessera; the others must still be waiting.
    fn served(&mut self, step: usize) {
        for n in 0..CONNS {
            if !self.model[n].blocked {
                continue;
            }
            let (still, _) = self
                .r
                .blocked(n)
                .unwrap_or_else(|e| self.fail(step, &format!("redis: {e}")));
            if still {
                if let Some(bytes) = self.t.conns[n].poll_bytes(Duration::ZERO) {
                    self.fail(
                        step,
                        &format!(
                            "[{n}] still blocked in redis, tessera replied {}",
                            escape(&bytes, 200)
                        ),
                    );
                }
                continue;
            }
            let r = self.r.conns[n].try_read_reply();
            let r = r.unwrap_or_else(|e| self.fail(step, &format!("[{n}] redis: {e}")));
            self.note(format!("[{n}] (woken) -> {}", escape(&r, 200)));
            let t = self.t.conns[n].try_read_reply();
            let t = t.unwrap_or_else(|e| {
                self.fail(step, &format!("[{n}] woken in redis; tessera: {e}"))
            });
            self.compare(step, &format!("[{n}] woken"), Cmp::Exact, &t, &r);
            self.model[n].blocked = false;
        }
    }

    /// Ends every blocked command and empties both servers.
    fn checkpoint(&mut self, step: usize) {
        for n in 0..CONNS {
            if self.model[n].blocked {
                for side in [&mut self.t, &mut self.r] {
                    let id = side.ids[n].to_string();
                    let _ = side.ctl.try_read_reply_after(&["CLIENT", "UNBLOCK", &id]);
                }
                self.served(step);
            }
        }
        for side in [&mut self.t, &mut self.r] {
            for c in side.conns.iter_mut() {
                let _ = c.try_read_reply_after(&["RESET"]);
            }
            let _ = side.ctl.try_read_reply_after(&["FLUSHALL"]);
        }
        for m in &mut self.model {
            *m = ConnModel::default();
        }
        self.note("-- checkpoint: RESET every connection, FLUSHALL".into());
    }
}

/// The command name as CLIENT LIST's `cmd=` shows it.
fn blocking_name(cmd: &Cmd) -> String {
    match &cmd.args[0] {
        Arg::Lit(s) => s.to_ascii_lowercase(),
        Arg::Id(_) => String::new(),
    }
}

/// A flat array reply with its elements sorted.
fn sorted(reply: &[u8]) -> Vec<u8> {
    match common::split_aggregate(reply) {
        Some((kind, mut items)) => {
            items.sort();
            let mut out = format!("{}{}\r\n", kind as char, items.len()).into_bytes();
            for i in items {
                out.extend_from_slice(&i);
            }
            out
        }
        None => reply.to_vec(),
    }
}

fn env_list(name: &str) -> Option<Vec<u64>> {
    let v = std::env::var(name).ok()?;
    Some(
        v.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse().expect("a seed"))
            .collect(),
    )
}

fn tessera(shards: usize, consolidation: bool) -> Server {
    if testing_real_redis() {
        return Server::tessera(&[]);
    }
    let n = shards.to_string();
    let cons = if consolidation { "yes" } else { "no" };
    Server::tessera(&["--shards", &n, "--shard-consolidation", cons])
}

fn differential(shards: usize, consolidation: bool) {
    if !common::redis_available() {
        eprintln!("SKIPPED random_tx differential: redis-server is not on PATH");
        return;
    }
    let seeds = env_list("RANDOM_TX_SEEDS").unwrap_or_else(|| DEFAULT_SEEDS.to_vec());
    let steps = std::env::var("RANDOM_TX_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_STEPS);
    let show = std::env::var("RANDOM_TX_SHOW").is_ok();
    let ts = tessera(shards, consolidation);
    let rs = Server::redis(&[]);
    for &seed in &seeds {
        let mut run = Run {
            t: Side::new(&ts),
            r: Side::new(&rs),
            model: vec![ConnModel::default(); CONNS],
            history: VecDeque::new(),
            label: format!(
                "random_tx: {shards} shards, consolidation {consolidation}, seed {seed} \
                 (RANDOM_TX_SEEDS={seed})"
            ),
            show,
        };
        run.checkpoint(0);
        let mut gen = Gen {
            rng: Rng::new(seed),
        };
        for step in 1..=steps {
            run.step(step, &mut gen);
            if step % CHECKPOINT_EVERY == 0 {
                run.checkpoint(step);
            }
        }
        run.checkpoint(steps);
    }
}

/// One thread's part of the liveness test: `steps` commands on its own
/// connection, each reply within the deadline. Returns an error with the
/// thread's history on a stuck or broken reply.
fn liveness_worker(
    addr: &str,
    me: usize,
    ids: &[AtomicU64],
    seed: u64,
    steps: usize,
) -> Result<(), String> {
    let mut gen = Gen {
        rng: Rng::new(seed),
    };
    let (mut c, id) = connect(addr);
    ids[me].store(id, Ordering::Relaxed);
    let mut multi = false;
    let mut history: VecDeque<String> = VecDeque::new();
    for step in 0..steps {
        let mut cmd = gen.command(me, ids.len(), multi, true);
        // Blocking commands wait briefly here: nobody is sure to wake them.
        if cmd.kind == Kind::Blocking {
            let timeout = ["0.01", "0.05", "0.2"][gen.rng.below(3) as usize];
            *cmd.args.last_mut().expect("a timeout") = Arg::Lit(timeout.into());
        }
        let now: Vec<u64> = ids.iter().map(|i| i.load(Ordering::Relaxed)).collect();
        let line = cmd.line();
        if history.len() == HISTORY_MAX {
            history.pop_front();
        }
        history.push_back(line.clone());
        let sent = c.try_send(&cmd.render(&now));
        let reply = sent.and_then(|()| c.try_read_reply());
        let report = |why: String| {
            let mut s = format!("thread {me}, step {step}: {line}: {why}\nhistory:\n");
            for h in &history {
                let _ = writeln!(s, "  {h}");
            }
            s
        };
        match reply {
            Ok(r) => {
                if r.starts_with(b"-ERR internal") {
                    return Err(report(format!("got {}", escape(&r, 200))));
                }
                match cmd.kind {
                    Kind::Multi if r == b"+OK\r\n" => multi = true,
                    Kind::EndMulti | Kind::Reset => multi = false,
                    _ => {}
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(report(format!("no reply within {REPLY_DEADLINE:?}: {e}")));
            }
            Err(_) => {
                // Killed by another thread (CLIENT KILL): start over.
                let (nc, id) = connect(addr);
                c = nc;
                ids[me].store(id, Ordering::Relaxed);
                multi = false;
                history.push_back("(killed: reconnected)".into());
            }
        }
    }
    Ok(())
}

fn liveness(shards: usize, consolidation: bool) {
    let srv = tessera(shards, consolidation);
    let addr = srv.addr();
    let steps = std::env::var("RANDOM_TX_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(LIVENESS_STEPS, |s: usize| s.min(LIVENESS_STEPS * 4));
    let ids: Arc<Vec<AtomicU64>> = Arc::new((0..THREADS).map(|_| AtomicU64::new(0)).collect());
    let handles: Vec<_> = (0..THREADS)
        .map(|me| {
            let (addr, ids) = (addr.clone(), ids.clone());
            let seed = 1000 + me as u64 + shards as u64 * 100;
            thread::spawn(move || liveness_worker(&addr, me, &ids, seed, steps))
        })
        .collect();
    let mut failures = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("a worker panicked".into()),
        }
    }
    assert!(
        failures.is_empty(),
        "{shards} shards, consolidation {consolidation}:\n{}",
        failures.join("\n")
    );
    // The server still serves everyone.
    let mut c = srv.raw();
    assert_eq!(c.cmd_str(&["PING"]), b"+PONG\r\n");
}

macro_rules! per_config {
    ($f:ident: $($name:ident = ($shards:expr, $cons:expr)),* $(,)?) => {
        $( #[test] fn $name() { $f($shards, $cons) } )*
    };
}

per_config!(differential:
    tx_differential_2_shards = (2, true),
    tx_differential_2_shards_apart = (2, false),
    tx_differential_4_shards = (4, true),
    tx_differential_4_shards_apart = (4, false),
    tx_differential_32_shards = (32, true),
    tx_differential_32_shards_apart = (32, false),
);

per_config!(liveness:
    tx_liveness_2_shards = (2, true),
    tx_liveness_2_shards_apart = (2, false),
    tx_liveness_4_shards = (4, true),
    tx_liveness_4_shards_apart = (4, false),
    tx_liveness_32_shards = (32, true),
    tx_liveness_32_shards_apart = (32, false),
);

/// Issue 21's shapes: a second WATCH after a multi-shard command on a
/// watched key (and WATCH of keys all watched already) answers at once.
fn second_watch(shards: usize, consolidation: bool) {
    let srv = tessera(shards, consolidation);
    let mut c = srv.raw();
    c.set_reply_timeout(REPLY_DEADLINE);
    let shapes: &[&[&str]] = &[
        &["MSET", "a", "1", "b", "2"],
        &["MGET", "k6", "k3", "a"],
        &["RPOPLPUSH", "k6", "a"],
        &["GET", "a"],
    ];
    for shape in shapes {
        assert_eq!(c.cmd_str(&["WATCH", "a"]), b"+OK\r\n");
        c.cmd_str(shape);
        assert_eq!(c.cmd_str(&["WATCH", "a"]), b"+OK\r\n", "after {shape:?}");
        assert_eq!(c.cmd_str(&["WATCH", "a", "b", "k6"]), b"+OK\r\n");
        assert_eq!(c.cmd_str(&["WATCH", "k6", "a"]), b"+OK\r\n");
        assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
        c.cmd_str(&["GET", "a"]);
        c.cmd_str(&["EXEC"]);
    }
    assert_eq!(c.cmd_str(&["PING"]), b"+PONG\r\n");
}

per_config!(second_watch:
    second_watch_answers_2_shards = (2, true),
    second_watch_answers_2_shards_apart = (2, false),
    second_watch_answers_32_shards = (32, true),
    second_watch_answers_32_shards_apart = (32, false),
);
