//! KEYS, SCAN and RANDOMKEY: iterating the keyspace over every shard. KEYS
//! and RANDOMKEY fan out in one round; SCAN visits one shard per call, its
//! cursor naming the shard ([`ScanCursor`]). Also the SCAN argument parsing
//! the collection scans (HSCAN, SSCAN, ZSCAN) share.

use engine::{Shard, SmallBytes};
use rand::Rng;
use resp::{Args, Reply};

use crate::coord::{fan_out, outputs, Coordinator, JobOut, Plan};
use crate::ctx::{ClientState, ConnCtx};
use crate::error::CmdError;
use crate::util::{eq_ic, parse_i64};

use super::expire_if_needed;

/// KEYS pattern: every live key matching the glob, shard by shard. Expired
/// keys are skipped but not deleted (Redis's `keyIsExpired`).
pub(super) fn keys_(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    let pattern = args.get(1).to_vec();
    Ok(fan_out(
        c.nshards(),
        move |env| {
            let all = pattern == b"*";
            let now = env.shard.now_ms;
            let d = &env.shard.dbs[db];
            d.iter()
                .filter(|(k, e)| {
                    (all || ds::glob_match(&pattern, k, false)) && !d.is_expired(k, e, now)
                })
                .map(|(k, _)| SmallBytes::from(k))
                .collect::<Vec<SmallBytes>>()
        },
        |res, out, _| {
            out.array(res.iter().map(Vec::len).sum());
            for k in res.iter().flatten() {
                out.bulk(k);
            }
            Ok(())
        },
    ))
}

/// The SCAN cursor over several shards.
///
/// The cursor is the shard's `Dict::scan` cursor with the shard index in
/// bits [`ScanCursor::SHIFT`] and up: `cursor = shard << 40 | dict_cursor`.
/// A call starts on the shard the cursor names; when that shard's dict
/// cursor comes back 0 the iteration moves to the start of the next shard
/// (0 after the last one). Each shard is scanned with Redis's
/// reverse-binary cursor from 0 to 0, so SCAN keeps Redis's guarantee: a
/// key present for the whole iteration is returned at least once.
///
/// A call that finishes a shard before its page is full (fewer than COUNT
/// keys gathered, iteration budget left) goes on to the next shard, one
/// job per shard in sequence, rather than replying a short page: so an
/// empty or small database answers `SCAN 0` with cursor 0 in one call, as
/// Redis does, instead of one empty page per shard. Each job still talks
/// to one shard, and a call visits at most every shard once.
///
/// Why bit 40: a dict cursor never exceeds its table's mask, and 2^40
/// buckets is far beyond any shard; keeping the shard below bit 53 keeps
/// cursors exact in clients that parse them as doubles (JavaScript) for up
/// to 8192 shards. With one shard the cursor is exactly Redis's, and any
/// value (however large) is passed to the dict as Redis does. With several
/// shards a cursor naming a shard that does not exist ends the iteration
/// (reply cursor 0, no keys): Redis gives no error for unknown cursors
/// either.
pub(super) struct ScanCursor;

impl ScanCursor {
    const SHIFT: u32 = 40;
    const DICT_MASK: u64 = (1 << Self::SHIFT) - 1;

    /// `(shard, dict cursor)` of a client's cursor; `None` if it names no
    /// shard.
    pub(super) fn split(cursor: u64, nshards: usize) -> Option<(usize, u64)> {
        if nshards == 1 {
            return Some((0, cursor));
        }
        let shard = (cursor >> Self::SHIFT) as usize;
        (shard < nshards).then_some((shard, cursor & Self::DICT_MASK))
    }

    /// The reply cursor after scanning `shard` up to `next` (0 = done).
    pub(super) fn join(shard: usize, next: u64, nshards: usize) -> u64 {
        if next != 0 {
            debug_assert!(nshards == 1 || next <= Self::DICT_MASK);
            return ((shard as u64) << Self::SHIFT) | next;
        }
        if shard + 1 < nshards {
            ((shard + 1) as u64) << Self::SHIFT
        } else {
            0
        }
    }
}

/// Redis's `parseScanCursorOrReply`: `strtoul` in base 10, so an optional
/// sign (a negative value wraps), digits, and nothing after; leading space
/// and overflow are errors, and an empty string is cursor 0. The argument
/// is a C string to Redis: it ends at the first NUL.
pub(crate) fn parse_scan_cursor(arg: &[u8]) -> Result<u64, CmdError> {
    let bad = || CmdError::err("invalid cursor");
    let s = arg.split(|&b| b == 0).next().unwrap_or_default();
    if s.is_empty() {
        return Ok(0);
    }
    // C's isspace(): space, \t, \n, \v, \f, \r.
    if matches!(s[0], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        return Err(bad());
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or_else(bad)?;
    }
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// The options of SCAN and its per-key forms (HSCAN, SSCAN, ZSCAN).
pub(crate) struct ScanOpts<'a> {
    /// COUNT, default 10, at least 1.
    pub count: usize,
    /// MATCH, `None` for no pattern or `*`.
    pub pattern: Option<&'a [u8]>,
    /// TYPE (SCAN only).
    pub type_name: Option<&'a [u8]>,
}

/// Parses `[MATCH pattern] [COUNT count]` (and `[TYPE type]` when
/// `allow_type`) from argument `start` on, with Redis's errors: COUNT not
/// an integer, COUNT < 1, or anything else is a syntax error.
pub(crate) fn parse_scan_opts(
    args: Args<'_>,
    start: usize,
    allow_type: bool,
) -> Result<ScanOpts<'_>, CmdError> {
    let mut o = ScanOpts {
        count: 10,
        pattern: None,
        type_name: None,
    };
    let mut i = start;
    while i < args.len() {
        let a = args.get(i);
        let has_value = i + 1 < args.len();
        if eq_ic(a, "count") && has_value {
            let n = parse_i64(args.get(i + 1))?;
            if n < 1 {
                return Err(CmdError::Syntax);
            }
            o.count = n as usize;
        } else if eq_ic(a, "match") && has_value {
            let p = args.get(i + 1);
            o.pattern = (p != b"*").then_some(p);
        } else if allow_type && eq_ic(a, "type") && has_value {
            o.type_name = Some(args.get(i + 1));
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    Ok(o)
}

/// The reply of a per-key SCAN on a missing key: cursor 0, no elements.
pub(crate) fn reply_empty_scan(out: &mut Reply) {
    out.array(2);
    out.bulk(b"0");
    out.array(0);
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: the next cursor
/// (a bulk string) and a page of keys. COUNT is a hint (default 10): the
/// shard's dict is walked until that many keys were collected, the shard's
/// cursor ends, or `10 * count` buckets were visited, as in Redis; then
/// MATCH, TYPE and expiry filter the page (expired keys are deleted).
pub(super) fn scan(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let cursor = parse_scan_cursor(args.get(1))?;
    let o = parse_scan_opts(args, 2, true)?;
    let (count, pattern, type_name) = (
        o.count,
        o.pattern.map(<[u8]>::to_vec),
        o.type_name.map(<[u8]>::to_vec),
    );
    let n = c.nshards();
    let start = ScanCursor::split(cursor, n);
    Ok(Box::new(ScanCoord {
        db: c.client.db,
        nshards: n,
        at: start,
        count,
        budget: count.saturating_mul(10),
        gathered: 0,
        pattern,
        type_name,
        keys: Vec::new(),
    }))
}

/// SCAN's locks outside MULTI/EXEC: none. Each call's job on a shard is
/// atomic there, and Redis promises no more of SCAN across its calls: an
/// element present for the whole iteration is returned, one added or
/// removed meanwhile may or may not be. The pages of one call that walks on
/// to the following shards may see a multi-shard command on one shard and
/// not yet on the next, which a SCAN in two calls could see anyway. (It
/// took a whole-shard Read lock on every shard, one after another, to read
/// one of them.) Inside MULTI, EXEC locks every shard (see `multi`).
pub(super) fn scan_locks(
    _args: Args<'_>,
    _db: usize,
    _nshards: usize,
    _: &crate::ServerShared,
) -> Option<crate::tx::LockSet> {
    Some(crate::tx::LockSet::default())
}

/// One SCAN call: a job on the cursor's shard, then on the following
/// shards while the page is not full (see [`ScanCursor`]).
struct ScanCoord {
    db: usize,
    nshards: usize,
    /// The shard and dict cursor the next job scans from; `None` once the
    /// client's cursor named no shard.
    at: Option<(usize, u64)>,
    count: usize,
    /// Dict scan calls left in this SCAN call (Redis's `maxiterations`).
    budget: usize,
    /// Keys gathered before filtering: Redis's page size counts these.
    gathered: usize,
    pattern: Option<Vec<u8>>,
    type_name: Option<Vec<u8>>,
    keys: Vec<SmallBytes>,
}

/// What one shard's SCAN job reports.
pub(super) struct ScanPart {
    pub(super) next: u64,
    pub(super) gathered: usize,
    pub(super) calls: usize,
    pub(super) keys: Vec<SmallBytes>,
}

impl ScanCoord {
    fn issue(&self, plan: &mut Plan, shard: usize, cursor: u64) {
        let (db, want, budget) = (self.db, self.count - self.gathered, self.budget);
        let (pattern, type_name) = (self.pattern.clone(), self.type_name.clone());
        plan.run(shard, move |env| {
            let mut part = scan_collect(&env.shard.dbs[db], cursor, want, budget);
            part.keys
                .retain(|k| scan_keep(env.shard, db, k, pattern.as_deref(), type_name.as_deref()));
            part
        });
    }
}

impl Coordinator for ScanCoord {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        let Some((shard, cursor)) = self.at else {
            scan_reply(out, 0, &[]);
            return Ok(());
        };
        let Some(part) = outputs::<ScanPart>(results).pop() else {
            self.issue(plan, shard, cursor);
            return Ok(());
        };
        self.gathered += part.gathered;
        self.budget = self.budget.saturating_sub(part.calls);
        self.keys.extend(part.keys);
        let more = part.next == 0
            && shard + 1 < self.nshards
            && self.gathered < self.count
            && self.budget > 0;
        if more {
            self.at = Some((shard + 1, 0));
            self.issue(plan, shard + 1, 0);
            return Ok(());
        }
        let next = ScanCursor::join(shard, part.next, self.nshards);
        scan_reply(out, next, &self.keys);
        Ok(())
    }
}

/// Redis's SCAN loop on one shard: call the dict's scan until `want`
/// keys were gathered, the cursor returns to 0, or the call budget (Redis's
/// `maxiterations`, `10 * COUNT` per SCAN call) is spent.
pub(super) fn scan_collect(
    db: &engine::Db,
    mut cursor: u64,
    want: usize,
    mut budget: usize,
) -> ScanPart {
    let mut keys = Vec::new();
    let mut calls = 0;
    loop {
        cursor = db.scan(cursor, |k, _| keys.push(SmallBytes::from(k)));
        calls += 1;
        if cursor == 0 || budget == 0 || keys.len() >= want {
            break;
        }
        budget -= 1;
    }
    ScanPart {
        next: cursor,
        gathered: keys.len(),
        calls,
        keys,
    }
}

/// Whether a scanned key stays in the page: MATCH, then TYPE (looked up
/// without touching, so an expired key is deleted and typed `none`, as in
/// Redis 7.0), then expiry.
pub(super) fn scan_keep(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    pattern: Option<&[u8]>,
    type_name: Option<&[u8]>,
) -> bool {
    if pattern.is_some_and(|p| !ds::glob_match(p, key, false)) {
        return false;
    }
    if let Some(t) = type_name {
        let actual = shard
            .lookup_read(db, key, false)
            .map_or("none", |e| e.value().type_name());
        if !t.eq_ignore_ascii_case(actual.as_bytes()) {
            return false;
        }
    }
    !expire_if_needed(shard, db, key)
}

pub(super) fn scan_reply(out: &mut Reply, cursor: u64, keys: &[SmallBytes]) {
    out.array(2);
    out.bulk(itoa::Buffer::new().format(cursor).as_bytes());
    out.array(keys.len());
    for k in keys {
        out.bulk(k);
    }
}

/// RANDOMKEY: a random live key, or null when the database is empty.
///
/// One step: every shard answers its size and one random key of its own;
/// the home thread picks among the shards that found a key, weighted by
/// size, so each key is about equally likely wherever it lives. (Asking
/// sizes first and then one shard would cost a second round trip.)
pub(super) fn randomkey(
    c: &mut ConnCtx<'_>,
    _args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(fan_out(
        c.nshards(),
        move |env| {
            let key = env.shard.random_key(db);
            (env.shard.dbs[db].len(), key)
        },
        |res: Vec<(usize, Option<SmallBytes>)>, out, _| {
            let total: usize = res
                .iter()
                .filter(|(_, k)| k.is_some())
                .map(|(n, _)| n)
                .sum();
            if total == 0 {
                out.null();
                return Ok(());
            }
            let mut r = rand::thread_rng().gen_range(0..total);
            for (n, k) in &res {
                let Some(k) = k else { continue };
                if r < *n {
                    out.bulk(k);
                    return Ok(());
                }
                r -= n;
            }
            out.null();
            Ok(())
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::keys::tests::*;
    use crate::testutil::TestServer;

    #[test]
    fn keys_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            assert_eq!(t.run(&["KEYS", "*"]), "*0\r\n");
            let names: Vec<String> = (0..50).map(|i| format!("key:{i}")).collect();
            for k in &names {
                t.run(&["SET", k, "v"]);
            }
            t.run(&["SET", "other", "v"]);
            t.run(&["SET", "gone", "v"]);
            expire_now(&mut t, 0, "gone");
            let got = |t: &mut TestServer, p: &str| -> Vec<String> {
                let mut v: Vec<String> = t
                    .run(&["KEYS", p])
                    .split("\r\n")
                    .skip(1)
                    .filter(|l| !l.starts_with('$') && !l.is_empty())
                    .map(String::from)
                    .collect();
                v.sort();
                v
            };
            let mut all = names.clone();
            all.push("other".into());
            all.sort();
            assert_eq!(got(&mut t, "*"), all);
            assert_eq!(got(&mut t, "key:*").len(), 50);
            assert_eq!(
                got(&mut t, "key:1?"),
                (10..20).map(|i| format!("key:{i}")).collect::<Vec<_>>()
            );
            assert_eq!(got(&mut t, "o[st]her"), vec!["other".to_string()]);
            assert_eq!(got(&mut t, "KEY:*").len(), 0);
            // KEYS skips the expired key but leaves it for expiry to delete.
            assert_eq!(t.run(&["DBSIZE"]), ":52\r\n");
            assert_eq!(
                t.run(&["KEYS"]),
                "-ERR wrong number of arguments for 'keys' command\r\n"
            );
        }
    }

    #[test]
    fn keys_reply_bytes() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "c", "1"]);
        assert_eq!(t.run(&["KEYS", "c*"]), "*1\r\n$1\r\nc\r\n");
    }

    #[test]
    fn scan_cursor_parsing() {
        let ok = |s: &[u8]| parse_scan_cursor(s);
        assert_eq!(ok(b"0"), Ok(0));
        assert_eq!(ok(b""), Ok(0));
        assert_eq!(ok(b"+0"), Ok(0));
        assert_eq!(ok(b"-0"), Ok(0));
        assert_eq!(ok(b"-1"), Ok(u64::MAX));
        assert_eq!(ok(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(ok(b"12\0junk"), Ok(12));
        let bad = Err(CmdError::err("invalid cursor"));
        for s in [
            &b"18446744073709551616"[..],
            b" 0",
            b"0x",
            b"x",
            b"+",
            b"-",
            b"1 ",
        ] {
            assert_eq!(ok(s), bad, "{s:?}");
        }
    }

    #[test]
    fn scan_errors_and_shapes() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let inv = "-ERR invalid cursor\r\n";
            assert_eq!(t.run(&["SCAN", "x"]), inv);
            assert_eq!(t.run(&["SCAN", " 0"]), inv);
            assert_eq!(t.run(&["SCAN", "x", "foo"]), inv);
            assert_eq!(t.run(&["SCAN", "18446744073709551616"]), inv);
            let syn = "-ERR syntax error\r\n";
            assert_eq!(t.run(&["SCAN", "0", "count", "0"]), syn);
            assert_eq!(t.run(&["SCAN", "0", "count", "-1"]), syn);
            assert_eq!(t.run(&["SCAN", "0", "count"]), syn);
            assert_eq!(t.run(&["SCAN", "0", "match"]), syn);
            assert_eq!(t.run(&["SCAN", "0", "foo"]), syn);
            assert_eq!(
                t.run(&["SCAN", "0", "count", "abc"]),
                "-ERR value is not an integer or out of range\r\n"
            );
            assert_eq!(
                t.run(&["SCAN"]),
                "-ERR wrong number of arguments for 'scan' command\r\n"
            );
        }
        // One key, one shard: exactly Redis's bytes.
        let mut t = TestServer::new(1);
        t.run(&["SET", "c", "1"]);
        let one = "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nc\r\n";
        for c in ["0", "", "+0", "-0"] {
            assert_eq!(t.run(&["SCAN", c]), one, "{c}");
        }
        // The dict sees these cursors as Redis does: one bucket, then 0.
        for c in ["-1", "18446744073709551615"] {
            assert!(t.run(&["SCAN", c]).starts_with("*2\r\n$1\r\n0\r\n*"), "{c}");
        }
        assert_eq!(t.run(&["SCAN", "0", "type", "string"]), one);
        assert_eq!(t.run(&["SCAN", "0", "type", "STRING"]), one);
        assert_eq!(
            t.run(&["SCAN", "0", "type", "nosuch"]),
            "*2\r\n$1\r\n0\r\n*0\r\n"
        );
        assert_eq!(
            t.run(&["SCAN", "0", "match", "*", "count", "5", "type", "string"]),
            one
        );
        assert_eq!(
            t.run(&["SCAN", "0", "match", "d*"]),
            "*2\r\n$1\r\n0\r\n*0\r\n"
        );
        t.client.resp3 = true;
        assert_eq!(t.run(&["SCAN", "0"]), one);
    }

    /// Runs a whole SCAN iteration; `between` runs after every call.
    fn scan_all(
        t: &mut TestServer,
        extra: &[&str],
        mut between: impl FnMut(&mut TestServer, usize),
    ) -> (Vec<String>, usize) {
        let mut cursor = "0".to_string();
        let mut seen = Vec::new();
        let mut calls = 0;
        loop {
            let mut argv = vec!["SCAN", cursor.as_str()];
            argv.extend_from_slice(extra);
            let reply = t.run(&argv);
            let lines: Vec<&str> = reply.split("\r\n").collect();
            assert_eq!(lines[0], "*2");
            let next = lines[2].to_string();
            let count: usize = lines[3][1..].parse().unwrap();
            for i in 0..count {
                seen.push(lines[5 + 2 * i].to_string());
            }
            calls += 1;
            assert!(calls < 100_000, "SCAN does not terminate");
            between(t, calls);
            if next == "0" {
                return (seen, calls);
            }
            cursor = next;
        }
    }

    #[test]
    fn scan_covers_every_key() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (seen, calls) = scan_all(&mut t, &[], |_, _| {});
            assert!(seen.is_empty());
            assert_eq!(calls, 1, "an empty database is one call");
            assert_eq!(t.run(&["SCAN", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
            for i in 0..1000 {
                t.run(&["SET", &format!("k{i}"), "v"]);
            }
            let (seen, calls) = scan_all(&mut t, &[], |_, _| {});
            let set: HashSet<String> = seen.iter().cloned().collect();
            assert_eq!(set.len(), 1000);
            // No rehash happened, so no duplicates either.
            assert_eq!(seen.len(), 1000);
            assert!(calls >= 1000 / 10 / 2, "COUNT 10 pages: {calls}");
            let (seen, _) = scan_all(&mut t, &["COUNT", "100000"], |_, _| {});
            assert_eq!(seen.len(), 1000);
            let (seen, _) = scan_all(&mut t, &["MATCH", "k1*"], |_, _| {});
            assert_eq!(seen.len(), 111);
            let (seen, _) = scan_all(&mut t, &["TYPE", "hash"], |_, _| {});
            assert!(seen.is_empty());
        }
    }

    #[test]
    fn scan_guarantee_while_keys_are_added_and_removed() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            for i in 0..500 {
                t.run(&["SET", &format!("stay{i}"), "v"]);
                t.run(&["SET", &format!("temp{i}"), "v"]);
            }
            // Between calls: grow the tables a lot (forcing rehashes), and
            // delete the temporary keys, shrinking them later.
            let mut added = 0;
            let (seen, _) = scan_all(&mut t, &["COUNT", "7"], |t, call| {
                for _ in 0..40 {
                    t.run(&["SET", &format!("new{added}"), "v"]);
                    added += 1;
                }
                if call % 3 == 0 {
                    for i in (call * 10)..(call * 10 + 10).min(500) {
                        t.run(&["DEL", &format!("temp{i}")]);
                    }
                }
            });
            let set: HashSet<String> = seen.into_iter().collect();
            for i in 0..500 {
                assert!(set.contains(&format!("stay{i}")), "n={n} stay{i} missed");
            }
            assert!(added > 1000);
        }
    }

    #[test]
    fn scan_cursor_names_the_shard() {
        let n = 4;
        let mut t = TestServer::new(n);
        // Keys on shards 1 and 3 only.
        let k1 = key_on("a", 1, n);
        let k3 = key_on("b", 3, n);
        t.run(&["SET", &k1, "v"]);
        t.run(&["SET", &k3, "v"]);
        let pair = |k1: &str, k3: &str| {
            format!(
                "*2\r\n$1\r\n0\r\n*2\r\n${}\r\n{k1}\r\n${}\r\n{k3}\r\n",
                k1.len(),
                k3.len()
            )
        };
        // A page that is not full goes on to the next shards.
        assert_eq!(t.run(&["SCAN", "0"]), pair(&k1, &k3));
        // Starting at shard 3, only its key.
        assert_eq!(
            t.run(&["SCAN", &(3u64 << 40).to_string()]),
            format!("*2\r\n$1\r\n0\r\n*1\r\n${}\r\n{k3}\r\n", k3.len())
        );
        // Shard 2 is empty: the call moves on to shard 3.
        assert_eq!(
            t.run(&["SCAN", &(2u64 << 40).to_string()]),
            format!("*2\r\n$1\r\n0\r\n*1\r\n${}\r\n{k3}\r\n", k3.len())
        );
        // COUNT 1: the first page stops in shard 1 or at the start of shard
        // 2 or 3; the cursor's shard never goes backwards.
        let mut cursor = 0u64;
        let mut seen = Vec::new();
        let mut last_shard = 0;
        loop {
            let r = t.run(&["SCAN", &cursor.to_string(), "COUNT", "1"]);
            let lines: Vec<&str> = r.split("\r\n").collect();
            cursor = lines[2].parse().unwrap();
            let nkeys: usize = lines[3][1..].parse().unwrap();
            seen.extend((0..nkeys).map(|i| lines[5 + 2 * i].to_string()));
            if cursor == 0 {
                break;
            }
            let shard = (cursor >> 40) as usize;
            assert!(shard >= last_shard && shard < n, "{cursor}");
            last_shard = shard;
        }
        assert_eq!(seen, vec![k1.clone(), k3.clone()]);
        // A cursor naming no shard ends the iteration.
        assert_eq!(
            t.run(&["SCAN", &(9u64 << 40).to_string()]),
            "*2\r\n$1\r\n0\r\n*0\r\n"
        );
        assert_eq!(t.run(&["SCAN", "-1"]), "*2\r\n$1\r\n0\r\n*0\r\n");
        assert_eq!(ScanCursor::split(5, 1), Some((0, 5)));
        assert_eq!(ScanCursor::split(u64::MAX, 1), Some((0, u64::MAX)));
        assert_eq!(ScanCursor::split((2 << 40) | 6, 4), Some((2, 6)));
        assert_eq!(ScanCursor::join(0, 0, 1), 0);
        assert_eq!(ScanCursor::join(0, 12, 1), 12);
        assert_eq!(ScanCursor::join(1, 12, 4), (1 << 40) | 12);
        assert_eq!(ScanCursor::join(3, 0, 4), 0);
    }

    #[test]
    fn scan_skips_and_deletes_expired_keys() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            for i in 0..20 {
                t.run(&["SET", &format!("k{i}"), "v"]);
            }
            for i in 0..5 {
                expire_now(&mut t, 0, &format!("k{i}"));
            }
            let (seen, _) = scan_all(&mut t, &["COUNT", "1000"], |_, _| {});
            assert_eq!(seen.len(), 15);
            assert_eq!(t.run(&["DBSIZE"]), ":15\r\n");
            for i in 5..10 {
                expire_now(&mut t, 0, &format!("k{i}"));
            }
            let (seen, _) = scan_all(&mut t, &["TYPE", "string"], |_, _| {});
            assert_eq!(seen.len(), 10);
            assert_eq!(t.run(&["DBSIZE"]), ":10\r\n");
        }
    }

    #[test]
    fn scan_uses_the_selected_db() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            t.run(&["SET", "a", "1"]);
            t.run(&["SELECT", "3"]);
            t.run(&["SET", "b", "1"]);
            let (seen, _) = scan_all(&mut t, &[], |_, _| {});
            assert_eq!(seen, vec!["b".to_string()]);
        }
    }

    #[test]
    fn randomkey_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            assert_eq!(t.run(&["RANDOMKEY"]), "$-1\r\n");
            t.client.resp3 = true;
            assert_eq!(t.run(&["RANDOMKEY"]), "_\r\n");
            t.client.resp3 = false;
            t.run(&["SET", "only", "v"]);
            assert_eq!(t.run(&["RANDOMKEY"]), "$4\r\nonly\r\n");
            let names: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
            for k in &names {
                t.run(&["SET", k, "v"]);
            }
            let mut seen = HashSet::new();
            for _ in 0..2000 {
                let r = t.run(&["RANDOMKEY"]);
                seen.insert(r.split("\r\n").nth(1).unwrap().to_string());
                if seen.len() == 9 {
                    break;
                }
            }
            assert_eq!(seen.len(), 9, "every key is eventually returned");
            // Only expired keys left: null, and they get deleted.
            t.run(&["FLUSHALL"]);
            t.run(&["SET", "gone", "v"]);
            expire_now(&mut t, 0, "gone");
            assert_eq!(t.run(&["RANDOMKEY"]), "$-1\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            assert_eq!(
                t.run(&["RANDOMKEY", "x"]),
                "-ERR wrong number of arguments for 'randomkey' command\r\n"
            );
        }
    }
}
