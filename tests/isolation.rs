//! Issue 27: isolation of multi-shard commands under real concurrency.
//!
//! Each scenario runs several client threads against one server at once and
//! checks an invariant that holds in Redis because every command (and every
//! MULTI/EXEC) runs alone:
//!
//! * **MSET/MGET** ([`mset_mget`]): writers set ten keys on ten different
//!   shards to one generation value (MSET, or SETs inside MULTI/EXEC);
//!   readers (MGET, or GETs inside MULTI/EXEC) must never see two
//!   generations in one reply.
//! * **All or none** ([`all_or_none`]): MGET, EXISTS and TOUCH of ten
//!   keys on different shards (and MGET with EXISTS in one MULTI/EXEC)
//!   while writers MSET them to one generation or DEL them all: each read
//!   sees every key or none, of one generation (2 and 16 shards,
//!   consolidation on and off).
//! * **Bank** ([`bank`]): transfers between accounts on different shards
//!   (plain MULTI DECRBY/INCRBY EXEC, and WATCH + check + MULTI); every
//!   MGET of all the accounts, and the end state, sum to the same total, and
//!   no WATCHed transfer overdraws.
//! * **Moves** ([`moves`]): RENAME, RENAMENX, SMOVE and LMOVE between keys
//!   on different shards; every snapshot (MGET or EXISTS of all, SCARDs /
//!   LLENs in one MULTI, SUNION) counts every element exactly once.
//! * **Keyspace counts** ([`keyspace_counts`]): DBSIZE, KEYS and RANDOMKEY
//!   (alone, and DBSIZE/KEYS next to EXISTS inside MULTI/EXEC) while
//!   RENAMENX moves a fixed number of keys between shards: every read sees
//!   that number (Redis runs each of them alone; a count taken shard by
//!   shard without isolation could see a moving key twice or not at all).
//! * **Blocking pops** ([`blocking_moves`]): items pushed onto lists travel
//!   through two stages of BLMOVE (source and destination on different
//!   shards) to BLPOP consumers; every item arrives exactly once.
//! * **Bursts** ([`bursts`]): MSET/MGET generations and bank transfers in
//!   bursts after quiet spells, with shard consolidation on (16 and 2
//!   shards): each burst starts with shards gathered on few threads and
//!   spreads them while transactions are in flight.
//! * **Expiry and FLUSHALL** ([`expiry_flush`]): writes with short TTLs,
//!   multi-key reads and scans, FLUSHALL / FLUSHDB (sync and async) in the
//!   middle; no reply is an error, MGETs of keys written together by MSET
//!   are all one generation or all gone, and the server is alive and empty
//!   after the last FLUSHALL.
//!
//! Layouts (bursts aside): 32 shards, each on its own thread (`--shard-consolidation no`),
//! which on a 2-core machine makes the threads interleave at every step;
//! 16 shards, consolidated, starting with every shard on one hub (where
//! multi-shard jobs run by a call, `worker::cohost`, until a burst gives
//! shards back); and 2 shards, consolidated (the default).
//!
//! Every reply has a deadline ([`REPLY_DEADLINE`]); a missing reply fails
//! the test with the thread's recent commands. Work is bounded by counts,
//! never by time; the only clock is hang detection.

mod common;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{
    encode_command, escape, keys_across_shards, reply_payload, split_aggregate, Layout, RawConn,
    Rng, Server,
};

/// How long any reply may take before the test fails (a hang).
const REPLY_DEADLINE: Duration = Duration::from_secs(20);
/// How long the blocking scenario may take to deliver every item.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(120);
/// Commands kept for a failure report.
const HISTORY_MAX: usize = 40;

type Outcome = Result<(), String>;

// ---------------------------------------------------------------- clients

/// One connection with a name and its recent commands, for reports.
struct Client {
    c: RawConn,
    who: String,
    history: VecDeque<String>,
}

impl Client {
    fn new(srv: &Server, who: impl Into<String>) -> Client {
        let mut c = srv.raw();
        c.set_reply_timeout(REPLY_DEADLINE);
        Client {
            c,
            who: who.into(),
            history: VecDeque::new(),
        }
    }

    /// Sends one command and reads its reply; a timeout or a closed
    /// connection is an error naming the command and the history.
    fn call(&mut self, args: &[&str]) -> Result<Vec<u8>, String> {
        if self.history.len() == HISTORY_MAX {
            self.history.pop_front();
        }
        self.history.push_back(args.join(" "));
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        let reply = self
            .c
            .try_send(&encode_command(&a))
            .and_then(|()| self.c.try_read_reply());
        reply.map_err(|e| self.fail(&format!("no reply: {e}")))
    }

    /// Like [`Client::call`], but an error reply is a failure too.
    fn ok(&mut self, args: &[&str]) -> Result<Vec<u8>, String> {
        let r = self.call(args)?;
        if r.first() == Some(&b'-') {
            return Err(self.fail(&format!("error reply {}", escape(&r, 200))));
        }
        Ok(r)
    }

    /// Sends several commands at once and reads their replies (a MULTI
    /// block); any error reply is a failure.
    fn pipeline(&mut self, cmds: &[Vec<String>]) -> Result<Vec<Vec<u8>>, String> {
        let mut out = Vec::new();
        for cmd in cmds {
            if self.history.len() == HISTORY_MAX {
                self.history.pop_front();
            }
            self.history.push_back(cmd.join(" "));
            let a: Vec<&[u8]> = cmd.iter().map(|s| s.as_bytes()).collect();
            out.extend_from_slice(&encode_command(&a));
        }
        self.c
            .try_send(&out)
            .map_err(|e| self.fail(&format!("send: {e}")))?;
        let mut replies = Vec::new();
        for _ in cmds {
            let r = self
                .c
                .try_read_reply()
                .map_err(|e| self.fail(&format!("no reply: {e}")))?;
            if r.first() == Some(&b'-') {
                return Err(self.fail(&format!("error reply {}", escape(&r, 200))));
            }
            replies.push(r);
        }
        Ok(replies)
    }

    /// A failure message: who, what, and the recent commands.
    fn fail(&self, why: &str) -> String {
        let mut s = format!("{}: {why}\n  recent commands:", self.who);
        for h in &self.history {
            s.push_str("\n    ");
            s.push_str(h);
        }
        s
    }
}

/// The elements of an array reply as optional payloads (None for nil).
fn items(reply: &[u8]) -> Vec<Option<Vec<u8>>> {
    let (_, elems) = split_aggregate(reply)
        .unwrap_or_else(|| panic!("not an array reply: {}", escape(reply, 200)));
    elems.iter().map(|e| reply_payload(e)).collect()
}

fn int(reply: &[u8]) -> i64 {
    reply_payload(reply)
        .and_then(|p| String::from_utf8(p).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an integer reply: {}", escape(reply, 200)))
}

fn text(b: &Option<Vec<u8>>) -> String {
    match b {
        Some(v) => String::from_utf8_lossy(v).into_owned(),
        None => "(nil)".into(),
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A command as owned strings.
fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// Runs every worker on its own thread, joins them all, and fails the test
/// with every failure (a worker's `Err`, or its panic).
fn run_all(label: &str, workers: Vec<Box<dyn FnOnce() -> Outcome + Send>>) {
    let handles: Vec<_> = workers.into_iter().map(thread::spawn).collect();
    let mut failures = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(p) => failures.push(format!(
                "a worker panicked: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        }
    }
    assert!(failures.is_empty(), "{label}:\n{}", failures.join("\n\n"));
}

/// Keys of one scenario, one per shard in turn, so any run of `shards`
/// consecutive keys spans every shard.
fn keys(prefix: &str, n: usize, layout: Layout) -> Vec<String> {
    keys_across_shards(prefix, n, layout.shards)
}

// ---------------------------------------------------------------- MSET/MGET

const GEN_KEYS: usize = 10;
const GEN_WRITERS: usize = 3;
const GEN_READERS: usize = 3;
const GEN_WRITES: usize = 300;
const GEN_READS: usize = 400;

/// Checks that one read of the generation keys saw a single generation
/// (or none of the keys at all).
fn one_generation(got: &[Option<Vec<u8>>], keys: &[String]) -> Result<(), String> {
    let first = &got[0];
    if got.iter().all(|v| v == first) {
        return Ok(());
    }
    let seen: Vec<String> = keys
        .iter()
        .zip(got)
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    Err(format!("mixed generations in one read: {}", seen.join(" ")))
}

type Work = Box<dyn FnOnce() -> Outcome + Send>;

/// Writers that set `keys` to one generation per call (`writes` each, the
/// generation tagged with `round`) and readers that check `reads` reads
/// each.
fn generation_workers(
    srv: &Server,
    keys: &Arc<Vec<String>>,
    round: usize,
    writes: usize,
    reads: usize,
) -> Vec<Work> {
    let mut workers: Vec<Work> = Vec::new();
    for w in 0..GEN_WRITERS {
        let mut c = Client::new(srv, format!("writer {w}"));
        let keys = keys.clone();
        workers.push(Box::new(move || {
            for i in 0..writes {
                let gen = format!("r{round}-w{w}-{i}");
                if i % 3 == 2 {
                    // The same generation through MULTI/EXEC.
                    let mut block = vec![cmd(&["MULTI"])];
                    block.extend(keys.iter().map(|k| cmd(&["SET", k, &gen])));
                    block.push(cmd(&["EXEC"]));
                    c.pipeline(&block)?;
                } else {
                    let mut args = vec!["MSET"];
                    for k in keys.iter() {
                        args.extend([k.as_str(), gen.as_str()]);
                    }
                    c.ok(&args)?;
                }
            }
            Ok(())
        }));
    }
    for r in 0..GEN_READERS {
        let mut c = Client::new(srv, format!("reader {r}"));
        let keys = keys.clone();
        workers.push(Box::new(move || {
            for i in 0..reads {
                let got = if (i + r) % 3 == 0 {
                    let mut block = vec![cmd(&["MULTI"])];
                    block.extend(keys.iter().map(|k| cmd(&["GET", k])));
                    block.push(cmd(&["EXEC"]));
                    let replies = c.pipeline(&block)?;
                    items(replies.last().expect("EXEC's reply"))
                } else {
                    let mut args = vec!["MGET"];
                    args.extend(strs(&keys));
                    items(&c.ok(&args)?)
                };
                one_generation(&got, &keys).map_err(|e| c.fail(&e))?;
            }
            Ok(())
        }));
    }
    workers
}

fn mset_mget(layout: Layout) {
    let srv = start(layout, &[]);
    let keys = Arc::new(keys("gen:", GEN_KEYS, layout));
    let workers = generation_workers(&srv, &keys, 0, GEN_WRITES, GEN_READS);
    run_all(&format!("MSET/MGET isolation, {layout}"), workers);
    // Every key ends on the same generation.
    let mut c = Client::new(&srv, "final check");
    let mut args = vec!["MGET"];
    args.extend(strs(&keys));
    let got = items(&c.ok(&args).unwrap());
    one_generation(&got, &keys).unwrap();
    assert!(got[0].is_some(), "the keys were written");
}

// ---------------------------------------------------------------- MGET/EXISTS/TOUCH

/// Readers whose keys' lock entries are made only when they take locks
/// (MGET, EXISTS and TOUCH across shards; MGET and EXISTS in one
/// MULTI/EXEC) beside writers that set every key to one generation (MSET)
/// or delete them all (DEL). Every read sees all the keys or none, of one
/// generation; EXISTS and TOUCH count none or all; in one EXEC, MGET and
/// EXISTS agree; a DEL removes none or all. Run at 2 and 16 shards,
/// consolidation on (on one hub they run without locks) and off (with).
fn all_or_none(layout: Layout) {
    let srv = start(layout, &[]);
    let keys = Arc::new(keys("aon:", GEN_KEYS, layout));
    let n = keys.len() as i64;
    let mut workers: Vec<Work> = Vec::new();
    for w in 0..GEN_WRITERS {
        let mut c = Client::new(&srv, format!("writer {w}"));
        let keys = keys.clone();
        workers.push(Box::new(move || {
            for i in 0..GEN_WRITES {
                if i % 4 == 3 {
                    let mut args = vec!["DEL"];
                    args.extend(strs(&keys));
                    let removed = int(&c.ok(&args)?);
                    if removed != 0 && removed != n {
                        return Err(c.fail(&format!("DEL removed {removed} of {n}")));
                    }
                } else {
                    let gen = format!("w{w}-{i}");
                    let mut args = vec!["MSET"];
                    for k in keys.iter() {
                        args.extend([k.as_str(), gen.as_str()]);
                    }
                    c.ok(&args)?;
                }
            }
            Ok(())
        }));
    }
    for r in 0..GEN_READERS {
        let mut c = Client::new(&srv, format!("reader {r}"));
        let keys = keys.clone();
        workers.push(Box::new(move || {
            let count = |c: &mut Client, name: &str| -> Outcome {
                let mut args = vec![name];
                args.extend(strs(&keys));
                let got = int(&c.ok(&args)?);
                if got != 0 && got != n {
                    return Err(c.fail(&format!("{name} counted {got} of {n}")));
                }
                Ok(())
            };
            for i in 0..GEN_READS {
                match (i + r) % 4 {
                    0 => {
                        let mut args = vec!["MGET"];
                        args.extend(strs(&keys));
                        let got = items(&c.ok(&args)?);
                        one_generation(&got, &keys).map_err(|e| c.fail(&e))?;
                    }
                    1 => count(&mut c, "EXISTS")?,
                    2 => count(&mut c, "TOUCH")?,
                    _ => {
                        let mut mget = vec!["MGET".to_string()];
                        mget.extend(keys.iter().cloned());
                        let mut exists = vec!["EXISTS".to_string()];
                        exists.extend(keys.iter().cloned());
                        let block = [cmd(&["MULTI"]), mget, exists, cmd(&["EXEC"])];
                        let replies = c.pipeline(&block)?;
                        let exec = replies.last().expect("EXEC's reply");
                        let (_, parts) = split_aggregate(exec)
                            .ok_or_else(|| c.fail(&format!("EXEC: {}", escape(exec, 200))))?;
                        let got = items(&parts[0]);
                        one_generation(&got, &keys).map_err(|e| c.fail(&e))?;
                        let want = if got[0].is_some() { n } else { 0 };
                        let counted = int(&parts[1]);
                        if counted != want {
                            let e = format!("in one EXEC, MGET saw {want} keys, EXISTS {counted}");
                            return Err(c.fail(&e));
                        }
                    }
                }
            }
            Ok(())
        }));
    }
    run_all(&format!("MGET/EXISTS/TOUCH all or none, {layout}"), workers);
}

mod all_or_none {
    use super::{all_or_none, Layout};
    #[test]
    fn s2() {
        all_or_none(Layout::new(2, true))
    }
    #[test]
    fn s2_apart() {
        all_or_none(Layout::new(2, false))
    }
    #[test]
    fn s16() {
        all_or_none(Layout::new(16, true))
    }
    #[test]
    fn s16_apart() {
        all_or_none(Layout::new(16, false))
    }
}

// ---------------------------------------------------------------- bank

const ACCOUNTS: usize = 16;
const OPENING: i64 = 1000;
const TELLERS: usize = 4;
const TRANSFERS: usize = 250;
const AUDITORS: usize = 2;
const AUDITS: usize = 300;
/// Bound on aborted EXECs of one WATCHed transfer (only a livelock gets
/// near it).
const CAS_ATTEMPTS_MAX: usize = 10_000;

/// One transfer with WATCH: read both balances, give up if `from` cannot
/// pay, else MULTI DECRBY/INCRBY EXEC; retried while EXEC aborts (a watched
/// key changed). Returns the number of aborted attempts.
fn watched_transfer(c: &mut Client, from: &str, to: &str, amount: i64) -> Result<usize, String> {
    let mut aborted = 0;
    loop {
        c.ok(&["WATCH", from, to])?;
        let balances = items(&c.ok(&["MGET", from, to])?);
        let have: i64 = text(&balances[0])
            .parse()
            .map_err(|_| c.fail(&format!("balance of {from} is {}", text(&balances[0]))))?;
        if have < amount {
            c.ok(&["UNWATCH"])?;
            return Ok(aborted);
        }
        let a = amount.to_string();
        let replies = c.pipeline(&[
            cmd(&["MULTI"]),
            cmd(&["DECRBY", from, &a]),
            cmd(&["INCRBY", to, &a]),
            cmd(&["EXEC"]),
        ])?;
        let exec = replies.last().expect("EXEC's reply");
        if exec.as_slice() == b"*-1\r\n" {
            aborted += 1;
            if aborted == CAS_ATTEMPTS_MAX {
                return Err(c.fail(&format!("{aborted} EXECs in a row aborted")));
            }
            continue;
        }
        let results = items(exec);
        let left = text(&results[0]).parse::<i64>().unwrap_or(-1);
        if left < 0 {
            return Err(c.fail(&format!(
                "a WATCHed transfer of {amount} overdrew {from}: EXEC replied {}",
                escape(exec, 200)
            )));
        }
        return Ok(aborted);
    }
}

/// The sum of the balances in an MGET (or EXEC of GETs) reply.
fn sum_of(c: &Client, reply: &[u8]) -> Result<i64, String> {
    items(reply)
        .iter()
        .map(|v| text(v).parse::<i64>())
        .sum::<Result<i64, _>>()
        .map_err(|_| {
            c.fail(&format!(
                "a balance is not a number: {}",
                escape(reply, 300)
            ))
        })
}

/// Opens the accounts with [`OPENING`] each; returns the total.
fn open_accounts(srv: &Server, accounts: &[String]) -> i64 {
    let mut setup = Client::new(srv, "setup");
    let mut args = vec!["MSET".to_string()];
    for a in accounts {
        args.extend([a.clone(), OPENING.to_string()]);
    }
    setup.ok(&strs(&args)).unwrap();
    OPENING * accounts.len() as i64
}

/// Tellers that make `transfers` transfers each (seeded with `round`) and
/// auditors that check `audits` snapshots each against `total`.
fn bank_workers(
    srv: &Server,
    accounts: &Arc<Vec<String>>,
    total: i64,
    round: usize,
    transfers: usize,
    audits: usize,
) -> Vec<Work> {
    let mut workers: Vec<Work> = Vec::new();
    for t in 0..TELLERS {
        let mut c = Client::new(srv, format!("teller {t}"));
        let accounts = accounts.clone();
        workers.push(Box::new(move || {
            let mut rng = Rng::new(27_000 + (round * TELLERS + t) as u64);
            for i in 0..transfers {
                let from = rng.below(ACCOUNTS as u64) as usize;
                let to = (from + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
                let amount = rng.range(1, 50);
                let (from, to) = (&accounts[from], &accounts[to]);
                if t % 2 == 0 && i % 2 == 0 {
                    watched_transfer(&mut c, from, to, amount)?;
                } else {
                    // Overdrafts allowed: only the total is invariant.
                    let a = amount.to_string();
                    c.pipeline(&[
                        cmd(&["MULTI"]),
                        cmd(&["DECRBY", from, &a]),
                        cmd(&["INCRBY", to, &a]),
                        cmd(&["EXEC"]),
                    ])?;
                }
            }
            Ok(())
        }));
    }
    for a in 0..AUDITORS {
        let mut c = Client::new(srv, format!("auditor {a}"));
        let accounts = accounts.clone();
        workers.push(Box::new(move || {
            let mut mget = vec!["MGET"];
            mget.extend(strs(&accounts));
            for i in 0..audits {
                let reply = if (i + a) % 4 == 0 {
                    let mut block = vec![cmd(&["MULTI"])];
                    block.extend(accounts.iter().map(|k| cmd(&["GET", k])));
                    block.push(cmd(&["EXEC"]));
                    c.pipeline(&block)?.pop().expect("EXEC's reply")
                } else {
                    c.ok(&mget)?
                };
                let sum = sum_of(&c, &reply)?;
                if sum != total {
                    return Err(c.fail(&format!(
                        "audit {i}: the accounts sum to {sum}, not {total}: {}",
                        escape(&reply, 400)
                    )));
                }
            }
            Ok(())
        }));
    }
    workers
}

fn bank(layout: Layout) {
    let srv = start(layout, &[]);
    let accounts = Arc::new(keys("acct:", ACCOUNTS, layout));
    let total = open_accounts(&srv, &accounts);
    let workers = bank_workers(&srv, &accounts, total, 0, TRANSFERS, AUDITS);
    run_all(&format!("bank transfers, {layout}"), workers);
    let setup = &mut Client::new(&srv, "final check");
    let mut mget = vec!["MGET"];
    mget.extend(strs(&accounts));
    let reply = setup.ok(&mget).unwrap();
    assert_eq!(
        sum_of(setup, &reply).unwrap(),
        total,
        "{layout}: final balances {}",
        escape(&reply, 400)
    );
}

// ---------------------------------------------------------------- moves

const MOVE_KEYS: usize = 12;
const TOKENS: usize = 3;
const ELEMENTS: usize = 60;
const MOVERS: usize = 3;
const MOVES: usize = 300;
const MOVE_CHECKS: usize = 300;

fn moves(layout: Layout) {
    let srv = start(layout, &[]);
    // One key of each kind per shard in turn.
    let strings = Arc::new(keys("mvs:", MOVE_KEYS, layout));
    let sets = Arc::new(keys("mvset:", MOVE_KEYS, layout));
    let lists = Arc::new(keys("mvlist:", MOVE_KEYS, layout));
    // One token moved by RENAME (which overwrites: with one token, it can
    // only ever overwrite nothing).
    let renamed = Arc::new(keys("mvr:", MOVE_KEYS, layout));
    let mut setup = Client::new(&srv, "setup");
    setup.ok(&["SET", &renamed[0], "the-one"]).unwrap();
    for t in 0..TOKENS {
        setup
            .ok(&["SET", &strings[t], &format!("token{t}")])
            .unwrap();
    }
    let elems: Vec<String> = (0..ELEMENTS).map(|e| format!("e{e}")).collect();
    let mut sadd = vec!["SADD", &sets[0]];
    sadd.extend(strs(&elems));
    setup.ok(&sadd).unwrap();
    let mut rpush = vec!["RPUSH", &lists[0]];
    rpush.extend(strs(&elems));
    setup.ok(&rpush).unwrap();

    let mut workers: Vec<Box<dyn FnOnce() -> Outcome + Send>> = Vec::new();
    for m in 0..MOVERS {
        let mut c = Client::new(&srv, format!("mover {m}"));
        let (strings, sets, lists, renamed) = (
            strings.clone(),
            sets.clone(),
            lists.clone(),
            renamed.clone(),
        );
        workers.push(Box::new(move || {
            let mut rng = Rng::new(2700 + m as u64);
            for _ in 0..MOVES {
                let src = rng.below(MOVE_KEYS as u64) as usize;
                let dst = rng.below(MOVE_KEYS as u64) as usize;
                match rng.below(4) {
                    3 => {
                        // OK, or "no such key" (the token is elsewhere).
                        let r = c.call(&["RENAME", &renamed[src], &renamed[dst]])?;
                        if r != b"+OK\r\n" && !r.starts_with(b"-ERR no such key") {
                            return Err(c.fail(&format!("RENAME: {}", escape(&r, 200))));
                        }
                    }
                    0 => {
                        // 1, 0 (destination taken) or "no such key": all fine.
                        let r = c.call(&["RENAMENX", &strings[src], &strings[dst]])?;
                        if r.first() == Some(&b'-') && !r.starts_with(b"-ERR no such key") {
                            return Err(c.fail(&format!("RENAMENX: {}", escape(&r, 200))));
                        }
                    }
                    1 => {
                        let e = format!("e{}", rng.below(ELEMENTS as u64));
                        c.ok(&["SMOVE", &sets[src], &sets[dst], &e])?;
                    }
                    _ => {
                        let (from, to) = if rng.pct(50) {
                            ("LEFT", "RIGHT")
                        } else {
                            ("RIGHT", "LEFT")
                        };
                        c.ok(&["LMOVE", &lists[src], &lists[dst], from, to])?;
                    }
                }
            }
            Ok(())
        }));
    }
    {
        let mut c = Client::new(&srv, "checker");
        let (strings, sets, lists, renamed) = (
            strings.clone(),
            sets.clone(),
            lists.clone(),
            renamed.clone(),
        );
        workers.push(Box::new(move || {
            let mut exists = vec!["EXISTS"];
            exists.extend(strs(&strings));
            let mut mget_renamed = vec!["MGET"];
            mget_renamed.extend(strs(&renamed));
            let mut sunion = vec!["SUNION"];
            sunion.extend(strs(&sets));
            let mut counts = vec![cmd(&["MULTI"])];
            counts.extend(sets.iter().map(|k| cmd(&["SCARD", k])));
            counts.extend(lists.iter().map(|k| cmd(&["LLEN", k])));
            counts.push(cmd(&["EXEC"]));
            for i in 0..MOVE_CHECKS {
                let n = int(&c.ok(&exists)?);
                if n != TOKENS as i64 {
                    return Err(c.fail(&format!("check {i}: EXISTS counts {n} tokens")));
                }
                let held: Vec<String> = items(&c.ok(&mget_renamed)?)
                    .iter()
                    .filter(|v| v.is_some())
                    .map(text)
                    .collect();
                if held != ["the-one"] {
                    return Err(c.fail(&format!(
                        "check {i}: MGET of the RENAME chain holds {held:?}"
                    )));
                }
                let union = items(&c.ok(&sunion)?).len();
                if union != ELEMENTS {
                    return Err(c.fail(&format!("check {i}: SUNION has {union} elements")));
                }
                let exec = c.pipeline(&counts)?.pop().expect("EXEC's reply");
                let (_, parts) = split_aggregate(&exec).expect("EXEC's array");
                let n: Vec<i64> = parts.iter().map(|p| int(p)).collect();
                let (in_sets, in_lists) = n.split_at(MOVE_KEYS);
                let (s, l): (i64, i64) = (in_sets.iter().sum(), in_lists.iter().sum());
                if s != ELEMENTS as i64 || l != ELEMENTS as i64 {
                    return Err(c.fail(&format!(
                        "check {i}: SCARDs sum to {s} and LLENs to {l}, not {ELEMENTS}: \
                         {in_sets:?} {in_lists:?}"
                    )));
                }
            }
            Ok(())
        }));
    }
    run_all(
        &format!("RENAME/RENAMENX/SMOVE/LMOVE chains, {layout}"),
        workers,
    );

    // The end state: the tokens, the set elements and the list elements,
    // each exactly once.
    let mut mget = vec!["MGET"];
    mget.extend(strs(&strings));
    let mut tokens: Vec<String> = items(&setup.ok(&mget).unwrap())
        .iter()
        .filter(|v| v.is_some())
        .map(text)
        .collect();
    tokens.sort();
    let want: Vec<String> = (0..TOKENS).map(|t| format!("token{t}")).collect();
    assert_eq!(tokens, want, "{layout}: tokens after the renames");
    let mut in_sets = Vec::new();
    let mut in_lists = Vec::new();
    for (s, l) in sets.iter().zip(lists.iter()) {
        in_sets.extend(items(&setup.ok(&["SMEMBERS", s]).unwrap()).iter().map(text));
        in_lists.extend(
            items(&setup.ok(&["LRANGE", l, "0", "-1"]).unwrap())
                .iter()
                .map(text),
        );
    }
    let mut want = elems.clone();
    want.sort();
    in_sets.sort();
    in_lists.sort();
    assert_eq!(in_sets, want, "{layout}: set elements after SMOVEs");
    assert_eq!(in_lists, want, "{layout}: list elements after LMOVEs");
}

// ---------------------------------------------------------------- keyspace counts

const COUNT_KEYS: usize = 32;
const COUNT_CHECKS: usize = 250;

/// Whole-keyspace reads (DBSIZE, KEYS, RANDOMKEY, and DBSIZE inside
/// MULTI/EXEC next to EXISTS) while RENAMENX moves a fixed number of keys
/// between shards: the count never changes, so every read must see it.
fn keyspace_counts(layout: Layout) {
    let srv = start(layout, &[]);
    let names = Arc::new(keys("kc:", COUNT_KEYS, layout));
    let mut setup = Client::new(&srv, "setup");
    for t in 0..TOKENS {
        setup.ok(&["SET", &names[t], &format!("token{t}")]).unwrap();
    }
    let mut workers: Vec<Box<dyn FnOnce() -> Outcome + Send>> = Vec::new();
    for m in 0..MOVERS {
        let mut c = Client::new(&srv, format!("renamer {m}"));
        let names = names.clone();
        workers.push(Box::new(move || {
            let mut rng = Rng::new(2727 + m as u64);
            for _ in 0..MOVES {
                let src = rng.pick(&names[..]);
                let dst = rng.pick(&names[..]);
                let r = c.call(&["RENAMENX", src, dst])?;
                if r.first() == Some(&b'-') && !r.starts_with(b"-ERR no such key") {
                    return Err(c.fail(&format!("RENAMENX: {}", escape(&r, 200))));
                }
            }
            Ok(())
        }));
    }
    {
        let mut c = Client::new(&srv, "counter");
        let names = names.clone();
        workers.push(Box::new(move || {
            let want = TOKENS as i64;
            let mut block = vec![cmd(&["MULTI"]), cmd(&["DBSIZE"])];
            let mut exists = cmd(&["EXISTS"]);
            exists.extend(names.iter().cloned());
            block.push(exists);
            block.push(cmd(&["KEYS", "*"]));
            block.push(cmd(&["EXEC"]));
            for i in 0..COUNT_CHECKS {
                let exec = c.pipeline(&block)?.pop().expect("EXEC's reply");
                let (_, parts) = split_aggregate(&exec).expect("EXEC's array");
                let (dbsize, present, listed) = (
                    int(&parts[0]),
                    int(&parts[1]),
                    items(&parts[2]).len() as i64,
                );
                if (dbsize, present, listed) != (want, want, want) {
                    return Err(c.fail(&format!(
                        "check {i}: inside MULTI, DBSIZE {dbsize}, EXISTS {present}, \
                         KEYS * {listed}; {want} keys exist"
                    )));
                }
                let dbsize = int(&c.ok(&["DBSIZE"])?);
                if dbsize != want {
                    return Err(c.fail(&format!("check {i}: DBSIZE {dbsize}, not {want}")));
                }
                let listed = items(&c.ok(&["KEYS", "kc:*"])?).len() as i64;
                if listed != want {
                    return Err(c.fail(&format!("check {i}: KEYS lists {listed}, not {want}")));
                }
                let random = c.ok(&["RANDOMKEY"])?;
                if reply_payload(&random).is_none() {
                    return Err(c.fail(&format!(
                        "check {i}: RANDOMKEY replied {} with {want} keys in the db",
                        escape(&random, 100)
                    )));
                }
            }
            Ok(())
        }));
    }
    run_all(
        &format!("keyspace counts under RENAMENX, {layout}"),
        workers,
    );
    assert_eq!(
        setup.ok(&["DBSIZE"]).unwrap(),
        format!(":{TOKENS}\r\n").into_bytes()
    );
}

// ---------------------------------------------------------------- blocking

const PRODUCERS: usize = 2;
const ITEMS_EACH: usize = 150;
const MOVERS_PER_STAGE: usize = 2;
const CONSUMERS: usize = 2;
/// Lists per stage.
const STAGE_WIDTH: usize = 3;

/// Items flow: producers RPUSH onto stage 0; movers BLMOVE from stage s to
/// stage s + 1 (a list on another shard); consumers BLPOP stage 2.
fn blocking_moves(layout: Layout) {
    let srv = start(layout, &[]);
    // 9 lists, one per shard in turn: consecutive ones are on different
    // shards (with 2 shards, a move from list i to list i + 1 crosses).
    let all = keys("q:", STAGE_WIDTH * 3, layout);
    let stages: Arc<Vec<Vec<String>>> =
        Arc::new(all.chunks(STAGE_WIDTH).map(|c| c.to_vec()).collect());
    let total = PRODUCERS * ITEMS_EACH;
    let received = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<BTreeMap<String, usize>>> = Arc::new(Mutex::new(BTreeMap::new()));
    let started = Instant::now();

    let mut workers: Vec<Box<dyn FnOnce() -> Outcome + Send>> = Vec::new();
    for p in 0..PRODUCERS {
        let mut c = Client::new(&srv, format!("producer {p}"));
        let (stages, done) = (stages.clone(), done.clone());
        workers.push(Box::new(move || {
            for i in 0..ITEMS_EACH {
                let list = &stages[0][(i + p) % STAGE_WIDTH];
                if let Err(e) = c.ok(&["RPUSH", list, &format!("p{p}-{i}")]) {
                    done.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
            Ok(())
        }));
    }
    for stage in 0..2 {
        for m in 0..MOVERS_PER_STAGE {
            let mut c = Client::new(&srv, format!("mover {m} of stage {stage}"));
            let (stages, done) = (stages.clone(), done.clone());
            workers.push(Box::new(move || {
                let mut rng = Rng::new(270 + (stage * 10 + m) as u64);
                while !done.load(Ordering::Relaxed) {
                    if started.elapsed() > DELIVERY_DEADLINE {
                        return Err(c.fail("gave up: items still undelivered"));
                    }
                    let src = &stages[stage][rng.below(STAGE_WIDTH as u64) as usize];
                    let dst = &stages[stage + 1][rng.below(STAGE_WIDTH as u64) as usize];
                    let (from, to) = if rng.pct(50) {
                        ("LEFT", "RIGHT")
                    } else {
                        ("RIGHT", "LEFT")
                    };
                    if let Err(e) = c.ok(&["BLMOVE", src, dst, from, to, "0.05"]) {
                        done.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
                Ok(())
            }));
        }
    }
    for n in 0..CONSUMERS {
        let mut c = Client::new(&srv, format!("consumer {n}"));
        let (stages, done, received, seen) =
            (stages.clone(), done.clone(), received.clone(), seen.clone());
        workers.push(Box::new(move || {
            let mut args = vec!["BLPOP"];
            args.extend(strs(&stages[2]));
            args.push("0.05");
            while !done.load(Ordering::Relaxed) {
                if started.elapsed() > DELIVERY_DEADLINE {
                    done.store(true, Ordering::Relaxed);
                    return Err(c.fail(&format!(
                        "only {} of {total} items arrived within {DELIVERY_DEADLINE:?}",
                        received.load(Ordering::Relaxed)
                    )));
                }
                let r = match c.ok(&args) {
                    Ok(r) => r,
                    Err(e) => {
                        // The others stop too (a failed run ends at once).
                        done.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                };
                if r.as_slice() == b"*-1\r\n" {
                    continue;
                }
                let got = items(&r);
                let item = text(&got[1]);
                *seen.lock().unwrap().entry(item).or_insert(0) += 1;
                if received.fetch_add(1, Ordering::Relaxed) + 1 >= total {
                    done.store(true, Ordering::Relaxed);
                }
            }
            Ok(())
        }));
    }
    run_all(&format!("BLMOVE stages, {layout}"), workers);

    let seen = seen.lock().unwrap();
    let dup: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert!(dup.is_empty(), "{layout}: items delivered twice: {dup:?}");
    let want: HashSet<String> = (0..PRODUCERS)
        .flat_map(|p| (0..ITEMS_EACH).map(move |i| format!("p{p}-{i}")))
        .collect();
    let got: HashSet<String> = seen.keys().cloned().collect();
    assert_eq!(got, want, "{layout}: the items delivered");
    // Nothing left behind in any list.
    let mut c = Client::new(&srv, "final check");
    for list in stages.iter().flatten() {
        assert_eq!(
            c.ok(&["LLEN", list]).unwrap(),
            b":0\r\n",
            "{layout}: {list}"
        );
    }
}

// ---------------------------------------------------------------- expiry, FLUSHALL

const CHURNERS: usize = 3;
const CHURN_STEPS: usize = 400;
const FLUSHES: usize = 40;
const FLUSH_GEN_KEYS: usize = 8;

fn expiry_flush(layout: Layout) {
    let srv = start(layout, &["--hz", "100"]);
    let gen_keys = Arc::new(keys("fgen:", FLUSH_GEN_KEYS, layout));
    let plain = Arc::new(keys("fk:", 16, layout));
    let churning = Arc::new(AtomicUsize::new(CHURNERS));

    let mut workers: Vec<Box<dyn FnOnce() -> Outcome + Send>> = Vec::new();
    for w in 0..CHURNERS {
        let mut c = Client::new(&srv, format!("churner {w}"));
        let (gen_keys, plain, churning) = (gen_keys.clone(), plain.clone(), churning.clone());
        workers.push(Box::new(move || {
            let mut rng = Rng::new(27_270 + w as u64);
            let result = (|| {
                for i in 0..CHURN_STEPS {
                    let k = rng.pick(&plain[..]).clone();
                    let k2 = rng.pick(&plain[..]).clone();
                    let ttl = rng.range(1, 40).to_string();
                    match rng.below(10) {
                        0 | 1 => {
                            let gen = format!("w{w}-{i}");
                            let mut args = vec!["MSET"];
                            for g in gen_keys.iter() {
                                args.extend([g.as_str(), gen.as_str()]);
                            }
                            c.ok(&args)?;
                        }
                        2 => {
                            let mut args = vec!["MGET"];
                            args.extend(strs(&gen_keys));
                            let got = items(&c.ok(&args)?);
                            one_generation(&got, &gen_keys).map_err(|e| c.fail(&e))?;
                        }
                        3 => {
                            c.ok(&["SET", &k, "v", "PX", &ttl])?;
                        }
                        4 => {
                            c.ok(&["SET", &k, "v"])?;
                            c.ok(&["PEXPIRE", &k, &ttl])?;
                        }
                        5 => {
                            let mut args = vec!["MGET"];
                            args.extend(strs(&plain));
                            c.ok(&args)?;
                            let mut args = vec!["EXISTS"];
                            args.extend(strs(&plain));
                            c.ok(&args)?;
                        }
                        6 => {
                            c.ok(&["SCAN", "0", "COUNT", "50"])?;
                            c.ok(&["DBSIZE"])?;
                        }
                        7 => {
                            c.ok(&["KEYS", "f*"])?;
                            c.ok(&["RANDOMKEY"])?;
                        }
                        8 => {
                            c.ok(&["SADD", &format!("{k}:set"), "a", "b"])?;
                            c.ok(&["PEXPIRE", &format!("{k}:set"), &ttl])?;
                            c.ok(&["RPUSH", &format!("{k2}:list"), "x"])?;
                            c.ok(&["DEL", &k, &k2, &format!("{k}:set")])?;
                        }
                        _ => {
                            c.pipeline(&[
                                cmd(&["MULTI"]),
                                cmd(&["SET", &k, "1", "PX", &ttl]),
                                cmd(&["INCR", &k2]),
                                cmd(&["MGET", &k, &k2]),
                                cmd(&["EXEC"]),
                            ])?;
                        }
                    }
                }
                Ok(())
            })();
            churning.fetch_sub(1, Ordering::Relaxed);
            result
        }));
    }
    {
        let mut c = Client::new(&srv, "flusher");
        let churning = churning.clone();
        workers.push(Box::new(move || {
            let flushes = [
                &["FLUSHALL"][..],
                &["FLUSHALL", "ASYNC"],
                &["FLUSHDB"],
                &["FLUSHDB", "ASYNC"],
                &["FLUSHALL", "SYNC"],
            ];
            let mut i = 0;
            // At least FLUSHES flushes, and on until the churners are done
            // (each of their replies has a deadline, so they finish).
            while i < FLUSHES || churning.load(Ordering::Relaxed) > 0 {
                c.ok(flushes[i % flushes.len()])?;
                c.ok(&["DBSIZE"])?;
                i += 1;
            }
            Ok(())
        }));
    }
    run_all(
        &format!("expiry and FLUSHALL under load, {layout}"),
        workers,
    );

    let mut c = Client::new(&srv, "final check");
    assert_eq!(c.ok(&["PING"]).unwrap(), b"+PONG\r\n");
    c.ok(&["FLUSHALL"]).unwrap();
    assert_eq!(c.ok(&["DBSIZE"]).unwrap(), b":0\r\n", "{layout}");
    assert_eq!(c.ok(&["KEYS", "*"]).unwrap(), b"*0\r\n", "{layout}");
    assert_eq!(
        c.ok(&["SCAN", "0", "COUNT", "1000"]).unwrap(),
        b"*2\r\n$1\r\n0\r\n*0\r\n",
        "{layout}"
    );
}

// ---------------------------------------------------------------- bursts

const BURSTS: usize = 4;
/// Quiet time before each burst: long enough for shard consolidation to
/// adopt idle shards onto fewer threads (one per 200 ms today), so each
/// burst starts from a consolidated state and spreads shards out while its
/// transactions run. A pause, not a threshold: nothing is timed.
const QUIET_BEFORE_BURST: Duration = Duration::from_millis(700);

/// `INFO server`'s `shard_threads_active`, or "?" (a real Redis).
fn shard_threads(c: &mut Client) -> String {
    let info = c.ok(&["INFO", "server"]).unwrap_or_default();
    let info = String::from_utf8_lossy(&info).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("shard_threads_active:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}

/// Bursts of MSET/MGET generations and bank transfers after quiet spells,
/// with consolidation on: shards move between threads while transactions
/// and multi-key commands are in flight.
fn bursts(layout: Layout) {
    let srv = layout.tessera(&[]);
    let gen_keys = Arc::new(keys("bgen:", GEN_KEYS, layout));
    let accounts = Arc::new(keys("bacct:", ACCOUNTS, layout));
    let total = open_accounts(&srv, &accounts);
    let mut c = Client::new(&srv, "observer");
    let mut threads = Vec::new();
    for round in 0..BURSTS {
        thread::sleep(QUIET_BEFORE_BURST);
        let before = shard_threads(&mut c);
        let mut workers = generation_workers(&srv, &gen_keys, round, 100, 130);
        workers.extend(bank_workers(&srv, &accounts, total, round, 80, 100));
        run_all(
            &format!("burst {round} (from {before} shard threads), {layout}"),
            workers,
        );
        threads.push(format!("{before} -> {}", shard_threads(&mut c)));
    }
    let mut mget = vec!["MGET"];
    mget.extend(strs(&accounts));
    let reply = c.ok(&mget).unwrap();
    assert_eq!(
        sum_of(&c, &reply).unwrap(),
        total,
        "{layout}: final balances"
    );
    let mut mget = vec!["MGET"];
    mget.extend(strs(&gen_keys));
    one_generation(&items(&c.ok(&mget).unwrap()), &gen_keys).unwrap();
    eprintln!("{layout}: shard threads around each burst: {threads:?}");
}

mod bursts {
    use super::Layout;
    /// 16 shards, consolidated: adoption and spreading with many shards.
    #[test]
    fn s16() {
        super::bursts(Layout::new(16, true))
    }
    #[test]
    fn s2() {
        super::bursts(Layout::new(2, true))
    }
}

// ---------------------------------------------------------------- layouts

/// 32 shards, each on its own thread.
const APART_32: Layout = Layout::new(32, false);
/// 2 shards, consolidated (the default on a 2-core machine).
const CONSOLIDATED_2: Layout = Layout::new(2, true);
/// 16 shards, consolidated: the load starts with every shard on one hub,
/// where coordinators' jobs for the other shards run by a call instead of
/// a message (`worker::cohost`), next to those the hub gave back.
const CONSOLIDATED_16: Layout = Layout::new(16, true);

/// Starts a scenario's server; a consolidated one with more than two
/// shards once every shard is on one thread (idle, they gather on thread
/// 0 within a few load windows).
fn start(layout: Layout, extra: &[&str]) -> Server {
    let srv = layout.tessera(extra);
    if layout.consolidated && layout.shards > 2 && !common::testing_real_redis() {
        common::wait_shard_threads(&srv, 1);
    }
    srv
}

macro_rules! in_layouts {
    ($($f:ident),* $(,)?) => {
        $(
            mod $f {
                use super::{APART_32, CONSOLIDATED_16, CONSOLIDATED_2};
                #[test]
                fn s32_apart() {
                    super::$f(APART_32)
                }
                #[test]
                fn s16() {
                    super::$f(CONSOLIDATED_16)
                }
                #[test]
                fn s2() {
                    super::$f(CONSOLIDATED_2)
                }
            }
        )*
    };
}

in_layouts!(
    mset_mget,
    bank,
    moves,
    keyspace_counts,
    blocking_moves,
    expiry_flush
);
