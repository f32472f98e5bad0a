//! The command generator of `tests/random_types.rs`: a seeded stream of
//! hash, list, set, sorted-set and GEO commands (with the keyspace commands,
//! SORT, the blocking commands and MULTI/EXEC groups around them) over the
//! nine keys of three shards, each [`Step`] tagged with how its replies are
//! compared ([`Mode`]) and when it may be sent ([`Guard`]). What is left out
//! of the stream, and why, is in the parent's module doc.

use crate::common::Rng;

/// A count larger than any collection the generator can build (member
/// spaces are small), so SPOP/SRANDMEMBER/HRANDFIELD/ZRANDMEMBER with it
/// return the whole collection: deterministic up to order.
const WHOLE_COUNT: &str = "1000";

/// The key space: shard 0 `b f {w}1 {w}2`, shard 1 `c g`, shard 2
/// `a {t}1 {t}2` (CRC16 slot * 3 / 16384).
const KEYS: &[&[u8]] = &[
    b"a", b"b", b"c", b"f", b"g", b"{w}1", b"{w}2", b"{t}1", b"{t}2",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fam {
    Hash = 0,
    List = 1,
    Set = 2,
    ZSet = 3,
}

/// How a reply is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Exact,
    /// An aggregate whose order is unspecified: compare its elements sorted.
    Sorted,
    /// A flat field-value (or member-score) array or a RESP3 map whose
    /// pair order is unspecified: compare the pairs sorted. A RESP3 array
    /// of pair arrays is compared like [`Mode::Sorted`].
    SortedPairs,
}

/// When a step is sent at all, judged on Redis's previous replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Guard {
    Always,
    /// The previous reply is `:n` (an `EXISTS` of the step's keys: all
    /// exist, so a blocking command cannot block).
    AllExist(i64),
    /// The previous reply (a `TYPE`) is not `set`.
    NotSet,
    /// Of the three previous replies (`OBJECT ENCODING k`, `ZCARD k`,
    /// `ZCOUNT k 0 0`), the first is `listpack` or the other two are equal
    /// (all scores are 0): a lex range's reply does not depend on Redis's
    /// random skiplist levels.
    LexDeterministic,
}

pub(super) struct Step {
    pub(super) args: Vec<Vec<u8>>,
    pub(super) mode: Mode,
    pub(super) guard: Guard,
}

pub(super) fn step(args: Vec<Vec<u8>>, mode: Mode) -> Step {
    Step {
        args,
        mode,
        guard: Guard::Always,
    }
}

pub(super) fn b<S: AsRef<[u8]>>(s: S) -> Vec<u8> {
    s.as_ref().to_vec()
}

/// Longer than the `*-max-listpack-value` of [`CONFIG`] (16).
const LONG: &[&str] = &[
    "a-long-value-over-the-listpack-limit",
    "another-long-value-past-sixteen-bytes",
    "12345678901234567890123",
];

pub(super) struct Gen {
    pub(super) rng: Rng,
    /// Each type's own keys until the next checkpoint.
    own: [Vec<&'static [u8]>; 4],
    /// Inside a MULTI body: blocking commands go unguarded (they never
    /// block there), guarded and unordered steps are not generated.
    in_multi: bool,
}

impl Gen {
    pub(super) fn new(seed: u64) -> Gen {
        let mut g = Gen {
            rng: Rng::new(seed),
            own: Default::default(),
            in_multi: false,
        };
        g.refocus();
        g
    }

    /// Deals two keys to each type (the ninth is nobody's).
    pub(super) fn refocus(&mut self) {
        let mut all = KEYS.to_vec();
        self.rng.shuffle(&mut all);
        for (i, own) in self.own.iter_mut().enumerate() {
            *own = all[2 * i..2 * i + 2].to_vec();
        }
    }

    fn key(&mut self, fam: Fam) -> Vec<u8> {
        if self.rng.pct(88) {
            let own = self.own[fam as usize].clone();
            self.rng.pick(&own).to_vec()
        } else {
            self.rng.pick(KEYS).to_vec()
        }
    }

    fn keys(&mut self, fam: Fam, min: u64, max: u64) -> Vec<Vec<u8>> {
        let n = min + self.rng.below(max - min + 1);
        (0..n).map(|_| self.key(fam)).collect()
    }

    /// Random-case spelling of a command or option name, sometimes.
    fn word(&mut self, w: &str) -> Vec<u8> {
        if self.rng.pct(85) {
            return b(w);
        }
        w.bytes()
            .map(|c| {
                if self.rng.pct(50) {
                    c.to_ascii_lowercase()
                } else {
                    c
                }
            })
            .collect()
    }

    fn long(&mut self) -> Vec<u8> {
        b(self.rng.pick(LONG))
    }

    /// A hash field: few names, a long one now and then.
    fn field(&mut self) -> Vec<u8> {
        match self.rng.below(20) {
            0 => self.long(),
            1 => b(self.rng.pick(&["", "1", "-5", "f\x00"])),
            _ => format!("f{}", self.rng.below(6)).into_bytes(),
        }
    }

    fn int_like(&mut self) -> Vec<u8> {
        match self.rng.below(4) {
            0 | 1 => self.rng.range(-20, 20).to_string().into_bytes(),
            2 => self.rng.range(-100_000, 100_000).to_string().into_bytes(),
            _ => b(self.rng.pick(&[
                "9223372036854775807",
                "-9223372036854775808",
                "9223372036854775806",
                "9223372036854775808",
                "-0",
                "007",
                "+1",
                " 1",
                "1e3",
                "12345678901234567890",
                "4294967296",
            ])),
        }
    }

    fn float_like(&mut self) -> Vec<u8> {
        match self.rng.below(3) {
            0 => format!("{}.{}", self.rng.range(-100, 100), self.rng.below(1000)).into_bytes(),
            1 => format!("{}e{}", self.rng.range(-9, 9), self.rng.range(-5, 5)).into_bytes(),
            _ => b(self.rng.pick(&[
                "1.5",
                "-1.5",
                "inf",
                "-inf",
                "+inf",
                "nan",
                "0.1",
                "-0.0",
                ".5",
                "1.",
                "1e308",
                "1e309",
                "-1e400",
                "0x10",
                "abc",
                "",
                " 1.5",
                "1.7976931348623157e308",
                "0.30000000000000004",
                "9007199254740993",
            ])),
        }
    }

    /// A hash value / list element: integers, floats, short words, long.
    fn value(&mut self) -> Vec<u8> {
        match self.rng.below(10) {
            0..=2 => self.int_like(),
            3 => self.float_like(),
            4 | 5 => self.long(),
            6 => b(self.rng.pick(&["", "x", "y\x00z", "\r\n"])),
            _ => format!("v{}", self.rng.below(5)).into_bytes(),
        }
    }

    /// A list element: a small space, so LREM/LPOS/LINSERT find them.
    fn elem(&mut self) -> Vec<u8> {
        match self.rng.below(10) {
            0 => self.long(),
            1 | 2 => self.rng.range(-3, 3).to_string().into_bytes(),
            3 => b(self.rng.pick(&["", "x", "1.5", "9223372036854775807"])),
            _ => format!("e{}", self.rng.below(5)).into_bytes(),
        }
    }

    /// A set member: integers (intset), words, long ones; under 60 in all.
    fn member(&mut self) -> Vec<u8> {
        match self.rng.below(10) {
            0..=3 => self.rng.range(-3, 12).to_string().into_bytes(),
            4 => b(self.rng.pick(&[
                "9223372036854775807",
                "-9223372036854775808",
                "007",
                "-0",
                "1.0",
                "",
            ])),
            5 => self.long(),
            _ => format!("m{}", self.rng.below(6)).into_bytes(),
        }
    }

    /// A sorted-set member (lex ranges want short letters).
    fn zmember(&mut self) -> Vec<u8> {
        match self.rng.below(12) {
            0 => self.long(),
            // No NUL bytes in anything SORT sees: `SORT .. ALPHA` compares
            // with strcoll, which stops at a NUL, and ties then keep the
            // (per-process random) hash table order.
            1 => b(self.rng.pick(&["", "1", "-1", "aa", "b c"])),
            _ => vec![b"abcdefgh"[self.rng.below(8) as usize]],
        }
    }

    fn score(&mut self) -> Vec<u8> {
        match self.rng.below(20) {
            0..=5 => b("0"),
            6..=13 => self.rng.range(-5, 5).to_string().into_bytes(),
            14 | 15 => format!("{}.5", self.rng.range(-3, 3)).into_bytes(),
            16 => b(self.rng.pick(&["inf", "-inf", "+inf", "1e308", "-0"])),
            17 => b(self
                .rng
                .pick(&["0.1", "1e-5", "3.0", "1.7976931348623157e308"])),
            _ => b(self
                .rng
                .pick(&["nan", "abc", "", "(1", "1e400", " 1", "0x1"])),
        }
    }

    /// A ZRANGEBYSCORE-style bound.
    fn score_bound(&mut self) -> Vec<u8> {
        match self.rng.below(10) {
            0..=4 => self.rng.range(-5, 5).to_string().into_bytes(),
            5 | 6 => format!("({}", self.rng.range(-5, 5)).into_bytes(),
            7 => b(self.rng.pick(&["-inf", "+inf", "inf", "(-inf", "(+inf"])),
            8 => b(self.rng.pick(&["1.5", "(0.5", "-2.5", "0"])),
            _ => b(self.rng.pick(&["abc", "(", "", "((1", "nan", "(nan", "[1"])),
        }
    }

    fn lex_bound(&mut self) -> Vec<u8> {
        match self.rng.below(10) {
            0..=3 => format!("[{}", b"abcdefgh"[self.rng.below(8) as usize] as char).into_bytes(),
            4..=6 => format!("({}", b"abcdefgh"[self.rng.below(8) as usize] as char).into_bytes(),
            7 => b(self.rng.pick(&["-", "+"])),
            8 => b(self.rng.pick(&["[", "(", "[aa", "(a\x00"])),
            _ => b(self.rng.pick(&["a", "", "-a", "+b", "{a"])),
        }
    }

    /// An index, count or rank: small mostly, edge or invalid sometimes.
    fn int_arg(&mut self, lo: i64, hi: i64) -> Vec<u8> {
        if self.rng.pct(88) {
            self.rng.range(lo, hi).to_string().into_bytes()
        } else {
            b(self.rng.pick(&[
                "9223372036854775807",
                "-9223372036854775808",
                "9223372036854775808",
                "abc",
                "",
                "1.0",
                "-0",
                "+2",
                "02",
                "4294967296",
            ]))
        }
    }

    /// A positive count (COUNT of LPOP/ZMPOP/...): invalid sometimes.
    fn count(&mut self) -> Vec<u8> {
        if self.rng.pct(85) {
            self.rng.range(1, 5).to_string().into_bytes()
        } else {
            b(self
                .rng
                .pick(&["0", "-1", "abc", "", "9223372036854775807", "1.5"]))
        }
    }

    /// A numkeys argument followed by that many keys (sometimes a wrong
    /// numkeys).
    fn numkeys(&mut self, fam: Fam, max: u64) -> Vec<Vec<u8>> {
        let keys = self.keys(fam, 1, max);
        let n = if self.rng.pct(92) {
            keys.len().to_string().into_bytes()
        } else {
            b(self.rng.pick(&["0", "-1", "abc", "5", "2"]))
        };
        let mut out = vec![n];
        out.extend(keys);
        out
    }

    /// Timeout of a blocking command: 0.01 s mostly, invalid sometimes.
    fn timeout(&mut self) -> Vec<u8> {
        if self.rng.pct(90) {
            b("0.01")
        } else {
            b(self.rng.pick(&["-1", "abc", "", "inf", "-0.01"]))
        }
    }

    fn side(&mut self) -> Vec<u8> {
        let s = *self.rng.pick(&["LEFT", "RIGHT", "LEFT", "RIGHT", "UP"]);
        self.word(s)
    }

    /// A blocking command: inside MULTI as it is; outside only after an
    /// `EXISTS` of `keys` (pushed to `out`) said they all exist.
    fn blocking(&mut self, out: &mut Vec<Step>, args: Vec<Vec<u8>>, keys: &[Vec<u8>]) -> Step {
        if self.in_multi {
            return step(args, Mode::Exact);
        }
        let mut exists = vec![b("EXISTS")];
        exists.extend(keys.iter().cloned());
        out.push(step(exists, Mode::Exact));
        Step {
            args,
            mode: Mode::Exact,
            guard: Guard::AllExist(keys.len() as i64),
        }
    }

    /// A lex-range command on `key`: only where Redis's reply is
    /// deterministic ([`Guard::LexDeterministic`]).
    fn lex_guarded(&mut self, out: &mut Vec<Step>, args: Vec<Vec<u8>>, key: &[u8]) -> Step {
        // KNOWN (by design): set encodings follow Redis 7.2, so no OBJECT
        // ENCODING of a set. When TYPE says set it is skipped, and the
        // guard's window then holds TYPE, ZCARD, ZCOUNT (equal errors).
        out.push(step(vec![b("TYPE"), key.to_vec()], Mode::Exact));
        out.push(Step {
            args: vec![b("OBJECT"), b("ENCODING"), key.to_vec()],
            mode: Mode::Exact,
            guard: Guard::NotSet,
        });
        out.push(step(vec![b("ZCARD"), key.to_vec()], Mode::Exact));
        out.push(step(
            vec![b("ZCOUNT"), key.to_vec(), b("0"), b("0")],
            Mode::Exact,
        ));
        Step {
            args,
            mode: Mode::Exact,
            guard: Guard::LexDeterministic,
        }
    }

    /// The steps of one random command (usually one step).
    pub(super) fn next(&mut self) -> Vec<Step> {
        let mut out = Vec::new();
        let last = match self.rng.below(100) {
            0..=21 => self.hash(&mut out),
            22..=43 => self.list(&mut out),
            44..=63 => self.set(&mut out),
            64..=83 => self.zset(&mut out),
            84..=89 => self.geo(),
            _ => self.generic(&mut out),
        };
        let mut last = last;
        // Wrong arity now and then: drop trailing arguments or add one (not
        // to unordered replies: `SPOP k` without its count is random).
        if self.rng.pct(3) && last.guard == Guard::Always && last.mode == Mode::Exact {
            // KNOWN (by design): Tessera has Redis 7.2's arity for ZRANK and
            // ZREVRANK (`[WITHSCORE]`), so `ZRANK z m x` is `-ERR syntax
            // error` there and a wrong-arity error in 7.0: never an extra
            // argument to them.
            let rank = [&b"ZRANK"[..], b"ZREVRANK"]
                .iter()
                .any(|c| last.args[0].eq_ignore_ascii_case(c));
            if (rank || self.rng.pct(50)) && last.args.len() > 1 {
                let keep = 1 + self.rng.below(last.args.len() as u64 - 1) as usize;
                last.args.truncate(keep);
            } else {
                // KNOWN: found_by_random.txt #1 (non-UTF-8 bytes echoed in
                // errors): extra arguments are kept UTF-8.
                let mut extra = self.value();
                if std::str::from_utf8(&extra).is_err() {
                    extra = b("x");
                }
                last.args.push(extra);
            }
        }
        out.push(last);
        out
    }

    fn hash(&mut self, _out: &mut Vec<Step>) -> Step {
        let e = Mode::Exact;
        let k = self.key(Fam::Hash);
        let args = match self.rng.below(20) {
            0..=4 => {
                let cmd = if self.rng.pct(85) { "HSET" } else { "HMSET" };
                let mut a = vec![self.word(cmd), k];
                for _ in 0..1 + self.rng.below(3) {
                    a.push(self.field());
                    a.push(self.value());
                }
                a
            }
            5 => vec![self.word("HSETNX"), k, self.field(), self.value()],
            6 | 7 => {
                let mut a = vec![self.word("HDEL"), k];
                for _ in 0..1 + self.rng.below(3) {
                    a.push(self.field());
                }
                a
            }
            8 => vec![self.word("HGET"), k, self.field()],
            9 => {
                let mut a = vec![self.word("HMGET"), k];
                for _ in 0..1 + self.rng.below(4) {
                    a.push(self.field());
                }
                a
            }
            10 | 11 => {
                let by = if self.rng.pct(80) {
                    self.int_arg(-100, 100)
                } else {
                    self.int_like()
                };
                vec![self.word("HINCRBY"), k, self.field(), by]
            }
            12 | 13 => vec![
                self.word("HINCRBYFLOAT"),
                k,
                self.field(),
                self.float_like(),
            ],
            14 => vec![self.word("HLEN"), k],
            15 => {
                let cmd = *self.rng.pick(&["HGETALL", "HKEYS", "HVALS"]);
                let mode = if cmd == "HGETALL" {
                    Mode::SortedPairs
                } else {
                    Mode::Sorted
                };
                let a = vec![self.word(cmd), k];
                return self.unordered(a, mode);
            }
            16 => vec![self.word("HSTRLEN"), k, self.field()],
            17 => vec![self.word("HEXISTS"), k, self.field()],
            18 => {
                let mut a = vec![self.word("HRANDFIELD"), k, b(WHOLE_COUNT)];
                if self.rng.pct(50) {
                    a.push(self.word("WITHVALUES"));
                    return self.unordered(a, Mode::SortedPairs);
                }
                return self.unordered(a, Mode::Sorted);
            }
            _ => {
                // A fresh small hash, so values build up.
                let mut a = vec![b("HSET"), k];
                for i in 0..1 + self.rng.below(5) {
                    a.push(format!("f{i}").into_bytes());
                    a.push(self.int_like());
                }
                a
            }
        };
        step(args, e)
    }

    /// An unordered reply: not inside MULTI (the EXEC reply is compared as
    /// a whole), where a plain read stands in.
    fn unordered(&mut self, args: Vec<Vec<u8>>, mode: Mode) -> Step {
        if self.in_multi {
            return step(vec![b("EXISTS"), args[1].clone()], Mode::Exact);
        }
        step(args, mode)
    }

    fn list(&mut self, out: &mut Vec<Step>) -> Step {
        let e = Mode::Exact;
        let k = self.key(Fam::List);
        let args = match self.rng.below(24) {
            0..=4 => {
                let cmd = *self
                    .rng
                    .pick(&["LPUSH", "RPUSH", "LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]);
                let mut a = vec![self.word(cmd), k];
                for _ in 0..1 + self.rng.below(4) {
                    a.push(self.elem());
                }
                a
            }
            5 | 6 => {
                let cmd = *self.rng.pick(&["LPOP", "RPOP"]);
                let mut a = vec![self.word(cmd), k];
                if self.rng.pct(50) {
                    a.push(self.int_arg(-1, 5));
                }
                a
            }
            7 | 8 => vec![
                self.word("LRANGE"),
                k,
                self.int_arg(-8, 8),
                self.int_arg(-8, 8),
            ],
            9 => vec![self.word("LINDEX"), k, self.int_arg(-8, 8)],
            10 => vec![self.word("LSET"), k, self.int_arg(-6, 6), self.elem()],
            11 => {
                let w = *self
                    .rng
                    .pick(&["BEFORE", "AFTER", "BEFORE", "AFTER", "MIDDLE"]);
                vec![
                    self.word("LINSERT"),
                    k,
                    self.word(w),
                    self.elem(),
                    self.elem(),
                ]
            }
            12 => vec![self.word("LREM"), k, self.int_arg(-3, 3), self.elem()],
            13 => vec![
                self.word("LTRIM"),
                k,
                self.int_arg(-8, 8),
                self.int_arg(-8, 8),
            ],
            14 => {
                let mut a = vec![self.word("LPOS"), k, self.elem()];
                for _ in 0..self.rng.below(4) {
                    match self.rng.below(4) {
                        0 => a.extend([self.word("RANK"), self.int_arg(-3, 3)]),
                        1 => a.extend([self.word("COUNT"), self.int_arg(-1, 4)]),
                        2 => a.extend([self.word("MAXLEN"), self.int_arg(-1, 6)]),
                        _ => a.push(b(self.rng.pick(&["FOO", "RANK", "COUNT"]))),
                    }
                }
                a
            }
            15 | 16 => {
                let dst = self.key(Fam::List);
                vec![self.word("LMOVE"), k, dst, self.side(), self.side()]
            }
            17 => {
                let dst = self.key(Fam::List);
                vec![self.word("RPOPLPUSH"), k, dst]
            }
            18 => {
                let mut a = vec![self.word("LMPOP")];
                a.extend(self.numkeys(Fam::List, 3));
                a.push(self.side());
                if self.rng.pct(50) {
                    a.extend([self.word("COUNT"), self.count()]);
                }
                a
            }
            19 => vec![self.word("LLEN"), k],
            20 => {
                let cmd = *self.rng.pick(&["BLPOP", "BRPOP"]);
                let mut keys = vec![k];
                keys.extend(self.keys(Fam::List, 0, 2));
                let mut a = vec![self.word(cmd)];
                a.extend(keys.iter().cloned());
                a.push(self.timeout());
                return self.blocking(out, a, &keys);
            }
            21 => {
                let dst = self.key(Fam::List);
                let a = if self.rng.pct(50) {
                    vec![
                        self.word("BLMOVE"),
                        k.clone(),
                        dst,
                        self.side(),
                        self.side(),
                        self.timeout(),
                    ]
                } else {
                    vec![self.word("BRPOPLPUSH"), k.clone(), dst, self.timeout()]
                };
                return self.blocking(out, a, &[k]);
            }
            22 => {
                let keys = self.keys(Fam::List, 1, 3);
                let mut a = vec![self.word("BLMPOP"), self.timeout()];
                a.push(keys.len().to_string().into_bytes());
                a.extend(keys.iter().cloned());
                a.push(self.side());
                if self.rng.pct(50) {
                    a.extend([self.word("COUNT"), self.count()]);
                }
                return self.blocking(out, a, &keys);
            }
            _ => {
                let mut a = vec![b("RPUSH"), k];
                for _ in 0..2 + self.rng.below(6) {
                    a.push(self.elem());
                }
                a
            }
        };
        step(args, e)
    }

    fn set(&mut self, _out: &mut Vec<Step>) -> Step {
        let e = Mode::Exact;
        let k = self.key(Fam::Set);
        let args = match self.rng.below(20) {
            0..=4 => {
                let mut a = vec![self.word("SADD"), k];
                for _ in 0..1 + self.rng.below(4) {
                    a.push(self.member());
                }
                a
            }
            5 | 6 => {
                let mut a = vec![self.word("SREM"), k];
                for _ in 0..1 + self.rng.below(3) {
                    a.push(self.member());
                }
                a
            }
            7 => vec![self.word("SISMEMBER"), k, self.member()],
            8 => {
                let mut a = vec![self.word("SMISMEMBER"), k];
                for _ in 0..1 + self.rng.below(4) {
                    a.push(self.member());
                }
                a
            }
            9 => vec![self.word("SCARD"), k],
            10 => {
                let dst = self.key(Fam::Set);
                vec![self.word("SMOVE"), k, dst, self.member()]
            }
            11 | 12 => {
                let cmd = *self.rng.pick(&["SINTER", "SUNION", "SDIFF"]);
                let mut a = vec![self.word(cmd), k];
                a.extend(self.keys(Fam::Set, 0, 2));
                return self.unordered(a, Mode::Sorted);
            }
            13 | 14 => {
                let cmd = *self.rng.pick(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]);
                let dst = self.key(Fam::Set);
                let mut a = vec![self.word(cmd), dst, k];
                a.extend(self.keys(Fam::Set, 0, 2));
                a
            }
            15 => {
                let mut a = vec![self.word("SINTERCARD")];
                a.extend(self.numkeys(Fam::Set, 3));
                if self.rng.pct(40) {
                    a.extend([self.word("LIMIT"), self.int_arg(-1, 4)]);
                }
                a
            }
            16 => {
                let a = vec![self.word("SMEMBERS"), k];
                return self.unordered(a, Mode::Sorted);
            }
            17 => {
                // Whole-set counts only (see WHOLE_COUNT); 0 is
                // deterministic too.
                let cmd = *self.rng.pick(&["SPOP", "SRANDMEMBER"]);
                let n = if self.rng.pct(85) { WHOLE_COUNT } else { "0" };
                let a = vec![self.word(cmd), k, b(n)];
                return self.unordered(a, Mode::Sorted);
            }
            _ => {
                let mut a = vec![b("SADD"), k];
                let ints = self.rng.pct(50);
                for _ in 0..2 + self.rng.below(6) {
                    a.push(if ints {
                        self.rng.range(0, 15).to_string().into_bytes()
                    } else {
                        self.member()
                    });
                }
                a
            }
        };
        step(args, e)
    }

    fn zadd_flags(&mut self) -> Vec<Vec<u8>> {
        let mut flags = Vec::new();
        for _ in 0..self.rng.below(3) {
            let f = *self
                .rng
                .pick(&["NX", "XX", "GT", "LT", "CH", "INCR", "CH", "FOO"]);
            flags.push(self.word(f));
        }
        flags
    }

    /// WEIGHTS / AGGREGATE / WITHSCORES of ZUNION & co.
    fn zsetop_options(&mut self, nkeys: usize, withscores: bool) -> Vec<Vec<u8>> {
        let mut groups: Vec<Vec<Vec<u8>>> = Vec::new();
        if self.rng.pct(35) {
            let mut g = vec![self.word("WEIGHTS")];
            let n = if self.rng.pct(90) { nkeys } else { nkeys + 1 };
            for _ in 0..n {
                g.push(b(self
                    .rng
                    .pick(&["1", "2", "-1", "0", "0.5", "inf", "abc"])));
            }
            groups.push(g);
        }
        if self.rng.pct(35) {
            let a = *self.rng.pick(&["SUM", "MIN", "MAX", "AVG"]);
            groups.push(vec![self.word("AGGREGATE"), self.word(a)]);
        }
        if withscores && self.rng.pct(50) {
            groups.push(vec![self.word("WITHSCORES")]);
        }
        self.rng.shuffle(&mut groups);
        groups.concat()
    }

    /// The range part of ZRANGE / ZRANGESTORE after the key(s); true if it
    /// is a lex range.
    fn zrange_spec(&mut self, store: bool) -> (Vec<Vec<u8>>, bool) {
        let mut a = Vec::new();
        let kind = self.rng.below(3);
        match kind {
            0 => a.extend([self.int_arg(-6, 6), self.int_arg(-6, 6)]),
            1 => a.extend([self.score_bound(), self.score_bound(), self.word("BYSCORE")]),
            _ => a.extend([self.lex_bound(), self.lex_bound(), self.word("BYLEX")]),
        }
        if self.rng.pct(30) {
            a.push(self.word("REV"));
        }
        if self.rng.pct(25) {
            a.extend([self.word("LIMIT"), self.int_arg(-1, 3), self.int_arg(-1, 4)]);
        }
        if !store && self.rng.pct(40) {
            a.push(self.word("WITHSCORES"));
        }
        if self.rng.pct(20) {
            // Options in another order now and then.
            let n = a.len();
            if n > 3 {
                let tail = &mut a[2..];
                self.rng.shuffle(tail);
            }
        }
        let lex = kind == 2;
        (a, lex)
    }

    fn zset(&mut self, out: &mut Vec<Step>) -> Step {
        let e = Mode::Exact;
        let k = self.key(Fam::ZSet);
        let args = match self.rng.below(34) {
            0..=5 => {
                let mut a = vec![self.word("ZADD"), k];
                a.extend(self.zadd_flags());
                for _ in 0..1 + self.rng.below(3) {
                    a.push(self.score());
                    a.push(self.zmember());
                }
                a
            }
            6 | 7 => {
                let mut a = vec![self.word("ZREM"), k];
                for _ in 0..1 + self.rng.below(3) {
                    a.push(self.zmember());
                }
                a
            }
            8 => vec![self.word("ZSCORE"), k, self.zmember()],
            9 => {
                let mut a = vec![self.word("ZMSCORE"), k];
                for _ in 0..1 + self.rng.below(3) {
                    a.push(self.zmember());
                }
                a
            }
            10 => vec![self.word("ZINCRBY"), k, self.score(), self.zmember()],
            11 => vec![self.word("ZCARD"), k],
            12 => vec![
                self.word("ZCOUNT"),
                k,
                self.score_bound(),
                self.score_bound(),
            ],
            13 => {
                let a = vec![
                    self.word("ZLEXCOUNT"),
                    k.clone(),
                    self.lex_bound(),
                    self.lex_bound(),
                ];
                if self.in_multi {
                    return step(vec![b("ZCARD"), k], e);
                }
                return self.lex_guarded(out, a, &k);
            }
            14 => {
                // KNOWN (by design): no WITHSCORE (Redis 7.2 only).
                let cmd = *self.rng.pick(&["ZRANK", "ZREVRANK"]);
                vec![self.word(cmd), k, self.zmember()]
            }
            15..=17 => {
                let mut a = vec![self.word("ZRANGE"), k.clone()];
                let (spec, lex) = self.zrange_spec(false);
                a.extend(spec);
                if lex {
                    if self.in_multi {
                        return step(vec![b("ZCARD"), k], e);
                    }
                    return self.lex_guarded(out, a, &k);
                }
                a
            }
            18 => {
                let cmd = *self
                    .rng
                    .pick(&["ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZREVRANGE"]);
                let mut a = vec![self.word(cmd), k];
                if cmd == "ZREVRANGE" {
                    a.extend([self.int_arg(-6, 6), self.int_arg(-6, 6)]);
                } else {
                    a.extend([self.score_bound(), self.score_bound()]);
                }
                if self.rng.pct(40) {
                    a.push(self.word("WITHSCORES"));
                }
                if cmd != "ZREVRANGE" && self.rng.pct(30) {
                    a.extend([self.word("LIMIT"), self.int_arg(-1, 3), self.int_arg(-1, 4)]);
                }
                a
            }
            19 => {
                let cmd = *self.rng.pick(&["ZRANGEBYLEX", "ZREVRANGEBYLEX"]);
                let mut a = vec![
                    self.word(cmd),
                    k.clone(),
                    self.lex_bound(),
                    self.lex_bound(),
                ];
                if self.rng.pct(30) {
                    a.extend([self.word("LIMIT"), self.int_arg(-1, 3), self.int_arg(-1, 4)]);
                }
                if self.in_multi {
                    return step(vec![b("ZCARD"), k], e);
                }
                return self.lex_guarded(out, a, &k);
            }
            20 => {
                let dst = self.key(Fam::ZSet);
                let mut a = vec![self.word("ZRANGESTORE"), dst, k.clone()];
                let (spec, lex) = self.zrange_spec(true);
                a.extend(spec);
                if lex {
                    if self.in_multi {
                        return step(vec![b("ZCARD"), k], e);
                    }
                    return self.lex_guarded(out, a, &k);
                }
                a
            }
            21 | 22 => match self.rng.below(3) {
                0 => vec![
                    self.word("ZREMRANGEBYRANK"),
                    k,
                    self.int_arg(-5, 5),
                    self.int_arg(-5, 5),
                ],
                1 => vec![
                    self.word("ZREMRANGEBYSCORE"),
                    k,
                    self.score_bound(),
                    self.score_bound(),
                ],
                _ => {
                    let a = vec![
                        self.word("ZREMRANGEBYLEX"),
                        k.clone(),
                        self.lex_bound(),
                        self.lex_bound(),
                    ];
                    if self.in_multi {
                        return step(vec![b("ZCARD"), k], e);
                    }
                    return self.lex_guarded(out, a, &k);
                }
            },
            23 | 24 => {
                let cmd = *self.rng.pick(&["ZPOPMIN", "ZPOPMAX"]);
                let mut a = vec![self.word(cmd), k];
                if self.rng.pct(50) {
                    a.push(self.int_arg(-1, 4));
                }
                a
            }
            25 | 26 => {
                let cmd = *self.rng.pick(&["ZUNION", "ZINTER", "ZDIFF"]);
                let mut a = vec![self.word(cmd)];
                let nk = self.numkeys(Fam::ZSet, 3);
                let n = nk.len() - 1;
                a.extend(nk);
                if cmd == "ZDIFF" {
                    if self.rng.pct(50) {
                        a.push(self.word("WITHSCORES"));
                    }
                } else {
                    a.extend(self.zsetop_options(n, true));
                }
                a
            }
            27 | 28 => {
                let cmd = *self.rng.pick(&["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]);
                let mut a = vec![self.word(cmd), self.key(Fam::ZSet)];
                let nk = self.numkeys(Fam::ZSet, 3);
                let n = nk.len() - 1;
                a.extend(nk);
                if cmd != "ZDIFFSTORE" {
                    a.extend(self.zsetop_options(n, false));
                }
                a
            }
            29 => {
                let mut a = vec![self.word("ZINTERCARD")];
                a.extend(self.numkeys(Fam::ZSet, 3));
                if self.rng.pct(40) {
                    a.extend([self.word("LIMIT"), self.int_arg(-1, 4)]);
                }
                a
            }
            30 => {
                let mut a = vec![self.word("ZMPOP")];
                a.extend(self.numkeys(Fam::ZSet, 3));
                let w = *self.rng.pick(&["MIN", "MAX", "MIN", "MAX", "MID"]);
                a.push(self.word(w));
                if self.rng.pct(50) {
                    a.extend([self.word("COUNT"), self.count()]);
                }
                a
            }
            31 => match self.rng.below(3) {
                0 | 1 => {
                    let cmd = *self.rng.pick(&["BZPOPMIN", "BZPOPMAX"]);
                    let mut keys = vec![k];
                    keys.extend(self.keys(Fam::ZSet, 0, 2));
                    let mut a = vec![self.word(cmd)];
                    a.extend(keys.iter().cloned());
                    a.push(self.timeout());
                    return self.blocking(out, a, &keys);
                }
                _ => {
                    let keys = self.keys(Fam::ZSet, 1, 3);
                    let mut a = vec![self.word("BZMPOP"), self.timeout()];
                    a.push(keys.len().to_string().into_bytes());
                    a.extend(keys.iter().cloned());
                    let w = *self.rng.pick(&["MIN", "MAX"]);
                    a.push(self.word(w));
                    if self.rng.pct(50) {
                        a.extend([self.word("COUNT"), self.count()]);
                    }
                    return self.blocking(out, a, &keys);
                }
            },
            32 => {
                let mut a = vec![self.word("ZRANDMEMBER"), k, b(WHOLE_COUNT)];
                if self.rng.pct(50) {
                    a.push(self.word("WITHSCORES"));
                    return self.unordered(a, Mode::SortedPairs);
                }
                return self.unordered(a, Mode::Sorted);
            }
            _ => {
                // A fresh zset: all scores 0 (lex ranges apply) or mixed.
                let zero = self.rng.pct(50);
                let mut a = vec![b("ZADD"), k];
                for _ in 0..2 + self.rng.below(5) {
                    a.push(if zero { b("0") } else { self.score() });
                    a.push(self.zmember());
                }
                a
            }
        };
        step(args, e)
    }

    /// A longitude and a latitude: near one of a few centres (Sicily, the
    /// origin, both sides of the antimeridian, the poles' limit, the cell
    /// where sorted-set scores around 0 decode), sometimes out of range or
    /// not a number.
    fn lon_lat(&mut self) -> [Vec<u8>; 2] {
        const CENTRES: &[(f64, f64)] = &[
            (13.36, 38.11),
            (0.0, 0.0),
            (179.9, 0.0),
            (-179.9, 0.0),
            (0.0, 84.9),
            (0.0, -84.9),
            (-179.99, -85.0),
        ];
        if self.rng.pct(4) {
            let bad = ["181", "-180.5", "0", "86", "nan", "x", "inf", "-1e300"];
            return [b(self.rng.pick(&bad)), b(self.rng.pick(&bad))];
        }
        let (x, y) = *self.rng.pick(CENTRES);
        let jitter = |g: &mut Gen| g.rng.range(-500, 500) as f64 / 1000.0;
        let lon = (x + jitter(self)).clamp(-180.0, 180.0);
        let lat = (y + jitter(self)).clamp(-85.05112878, 85.05112878);
        [format!("{lon}").into_bytes(), format!("{lat}").into_bytes()]
    }

    /// `radius unit` (or a box's `width height unit`), sometimes wrong.
    fn geo_size(&mut self, box_: bool) -> Vec<Vec<u8>> {
        let sizes = ["0", "1", "50", "800", "5000", "20000", "1e9", "-1", "x"];
        let units = ["m", "km", "ft", "mi", "KM", "yd"];
        let mut v = vec![b(self.rng.pick(&sizes))];
        if box_ {
            v.push(b(self.rng.pick(&sizes)));
        }
        v.push(b(self.rng.pick(&units)));
        v
    }

    /// Search options in random order: WITH*, ASC/DESC, COUNT [ANY], and
    /// for GEORADIUS[BYMEMBER] a STORE/STOREDIST destination.
    fn geo_options(&mut self, store: bool) -> Vec<Vec<u8>> {
        let mut groups: Vec<Vec<Vec<u8>>> = Vec::new();
        for w in ["WITHDIST", "WITHCOORD", "WITHHASH", "ASC", "DESC", "ANY"] {
            if self.rng.pct(20) {
                groups.push(vec![self.word(w)]);
            }
        }
        if self.rng.pct(40) {
            let n = self.rng.pick(&["1", "2", "3", "5", "0", "x"]);
            groups.push(vec![self.word("COUNT"), b(n)]);
        }
        if store && self.rng.pct(30) {
            let w = if self.rng.pct(50) {
                "STORE"
            } else {
                "STOREDIST"
            };
            groups.push(vec![self.word(w), self.key(Fam::ZSet)]);
        }
        self.rng.shuffle(&mut groups);
        groups.concat()
    }

    /// The GEO commands, on the sorted-set keys (a geo set is a sorted
    /// set; other sorted sets give odd scores to decode).
    fn geo(&mut self) -> Step {
        let k = self.key(Fam::ZSet);
        let args = match self.rng.below(12) {
            0..=3 => {
                let mut a = vec![self.word("GEOADD"), k];
                for w in ["NX", "XX", "CH"] {
                    if self.rng.pct(10) {
                        a.push(self.word(w));
                    }
                }
                for _ in 0..1 + self.rng.below(3) {
                    a.extend(self.lon_lat());
                    a.push(self.zmember());
                }
                a
            }
            4 | 5 => {
                let cmd = if self.rng.pct(50) {
                    "GEOPOS"
                } else {
                    "GEOHASH"
                };
                let mut a = vec![self.word(cmd), k];
                for _ in 0..self.rng.below(4) {
                    a.push(self.zmember());
                }
                a
            }
            6 => {
                let mut a = vec![self.word("GEODIST"), k, self.zmember(), self.zmember()];
                if self.rng.pct(60) {
                    a.push(b(self.rng.pick(&["m", "km", "ft", "mi", "yd"])));
                }
                a
            }
            7 => {
                let cmd = if self.rng.pct(70) {
                    "GEORADIUS"
                } else {
                    "GEORADIUS_RO"
                };
                let mut a = vec![self.word(cmd), k];
                a.extend(self.lon_lat());
                a.extend(self.geo_size(false));
                a.extend(self.geo_options(true));
                a
            }
            8 => {
                let cmd = if self.rng.pct(70) {
                    "GEORADIUSBYMEMBER"
                } else {
                    "GEORADIUSBYMEMBER_RO"
                };
                let mut a = vec![self.word(cmd), k, self.zmember()];
                a.extend(self.geo_size(false));
                a.extend(self.geo_options(true));
                a
            }
            _ => {
                let store = self.rng.pct(40);
                let mut a = if store {
                    vec![self.word("GEOSEARCHSTORE"), self.key(Fam::ZSet), k]
                } else {
                    vec![self.word("GEOSEARCH"), k]
                };
                let mut groups: Vec<Vec<Vec<u8>>> = Vec::new();
                if self.rng.pct(50) {
                    groups.push(vec![self.word("FROMMEMBER"), self.zmember()]);
                } else {
                    let mut g = vec![self.word("FROMLONLAT")];
                    g.extend(self.lon_lat());
                    groups.push(g);
                }
                let box_ = self.rng.pct(50);
                let mut g = vec![self.word(if box_ { "BYBOX" } else { "BYRADIUS" })];
                g.extend(self.geo_size(box_));
                groups.push(g);
                if self.rng.pct(10) {
                    groups.pop();
                }
                groups.push(self.geo_options(false));
                if store && self.rng.pct(30) {
                    groups.push(vec![self.word("STOREDIST")]);
                }
                self.rng.shuffle(&mut groups);
                a.extend(groups.concat());
                a
            }
        };
        step(args, Mode::Exact)
    }

    fn generic(&mut self, out: &mut Vec<Step>) -> Step {
        let e = Mode::Exact;
        let any = self.rng.pick(KEYS).to_vec();
        let args = match self.rng.below(20) {
            0 | 1 => vec![self.word("TYPE"), any],
            2 | 3 => {
                let a = vec![b("OBJECT"), self.word("ENCODING"), any.clone()];
                if self.in_multi {
                    return step(vec![b("TYPE"), any], e);
                }
                // KNOWN (by design): set encodings follow Redis 7.2.
                out.push(step(vec![b("TYPE"), any], e));
                return Step {
                    args: a,
                    mode: e,
                    guard: Guard::NotSet,
                };
            }
            4 => {
                let cmd = *self.rng.pick(&["DEL", "EXISTS"]);
                let mut a = vec![self.word(cmd), any];
                if self.rng.pct(40) {
                    a.push(self.rng.pick(KEYS).to_vec());
                }
                a
            }
            5 | 6 => {
                let cmd = if self.rng.pct(75) {
                    "RENAME"
                } else {
                    "RENAMENX"
                };
                vec![self.word(cmd), any, self.rng.pick(KEYS).to_vec()]
            }
            7 | 8 => {
                let mut a = vec![self.word("COPY"), any, self.rng.pick(KEYS).to_vec()];
                if self.rng.pct(50) {
                    a.push(self.word("REPLACE"));
                }
                a
            }
            9..=13 => {
                let cmd = if self.rng.pct(80) { "SORT" } else { "SORT_RO" };
                let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
                if self.rng.pct(30) {
                    opts.push(vec![
                        self.word("LIMIT"),
                        self.int_arg(-1, 3),
                        self.int_arg(-1, 5),
                    ]);
                }
                if self.rng.pct(40) {
                    let d = *self.rng.pick(&["ASC", "DESC"]);
                    opts.push(vec![self.word(d)]);
                }
                // BY/GET patterns: `*` names the keys a, b, c, f, g by the
                // letters of sorted-set members (any type, any shard), `{w}*`
                // and `{t}*` the tagged keys by the numbers 1 and 2.
                let by = self.rng.pct(30);
                if by {
                    let p = *self.rng.pick(&["*", "*->f1", "{w}*", "{t}*->f0"]);
                    opts.push(vec![self.word("BY"), b(p)]);
                }
                if self.rng.pct(35) {
                    for _ in 0..1 + self.rng.below(3) {
                        let p = *self
                            .rng
                            .pick(&["#", "*", "*->f0", "*->f2", "{w}*", "{t}*", "nostar"]);
                        opts.push(vec![self.word("GET"), b(p)]);
                    }
                }
                // ALPHA BY compares values that may tie, and Redis's qsort
                // then leaves the order unspecified: numeric BY only (ties
                // broken by the element).
                if !by && self.rng.pct(50) {
                    opts.push(vec![self.word("ALPHA")]);
                }
                if cmd == "SORT" && self.rng.pct(35) {
                    opts.push(vec![self.word("STORE"), self.rng.pick(KEYS).to_vec()]);
                }
                if self.rng.pct(5) {
                    opts.push(vec![b(self.rng.pick(&["FOO", "LIMIT", "STORE"]))]);
                }
                self.rng.shuffle(&mut opts);
                let mut a = vec![self.word(cmd), any];
                a.extend(opts.concat());
                return step(a, e);
            }
            14 => vec![self.word("SET"), any, self.value()],
            15 => vec![self.word("GET"), any],
            16..=18 => {
                // A MULTI/EXEC (or DISCARD) group; never nested.
                if self.in_multi {
                    return step(vec![b("EXISTS"), any], e);
                }
                out.push(step(vec![b("MULTI")], e));
                self.in_multi = true;
                for _ in 0..1 + self.rng.below(5) {
                    let steps = self.next();
                    out.extend(steps);
                }
                self.in_multi = false;
                let end = if self.rng.pct(90) { "EXEC" } else { "DISCARD" };
                return step(vec![self.word(end)], e);
            }
            _ => {
                let mut a = vec![b("EXISTS")];
                a.extend(KEYS.iter().map(|k| k.to_vec()));
                a
            }
        };
        step(args, e)
    }
}
