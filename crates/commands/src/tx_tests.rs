//! Tests of the transaction layer: the protocol stepped by hand over
//! in-process shards, and the hops whole commands cost.

use super::*;
use crate::table::shard_of;

/// Keys hashed for lock entries while `t` runs `argv` once, with or
/// without locks (`t.unlocked`: as the runtime runs a transaction whose
/// shards its thread all holds, nothing else running there); checks the
/// reply.
fn hashes_running(
    t: &mut crate::testutil::TestServer,
    argv: &[&str],
    unlocked: bool,
    want: &str,
) -> u64 {
    t.unlocked = unlocked;
    let before = locks::tests::hashes();
    let got = t.run(argv);
    assert_eq!(got, want, "{argv:?}");
    locks::tests::hashes() - before
}

/// `n` keys over 8 shards, and the MSET that sets each to `v`.
fn keys_set(t: &mut crate::testutil::TestServer, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("key:{i}")).collect();
    let mut argv = vec!["MSET"];
    for k in &keys {
        argv.push(k);
        argv.push("v");
    }
    t.unlocked = true;
    assert_eq!(t.run(&argv), "+OK\r\n");
    keys
}

/// `cmd` then `keys`.
fn with_keys<'a>(cmd: &'a str, keys: &'a [String]) -> Vec<&'a str> {
    let mut argv = vec![cmd];
    argv.extend(keys.iter().map(String::as_str));
    argv
}

/// An MSET across shards run without locks (every shard it touches held
/// by its thread, nothing else running there) hashes none of its keys
/// for locks; run with locks it hashes each once. With more pairs than a
/// deferred set holds inline (20) too.
#[test]
fn a_run_without_locks_hashes_no_key_of_an_mset() {
    let mut t = crate::testutil::TestServer::new(8);
    for n in [10, 20] {
        let keys: Vec<String> = (0..n).map(|i| format!("key:{i}")).collect();
        let mut argv = vec!["MSET"];
        for k in &keys {
            argv.push(k);
            argv.push("v");
        }
        let n = n as u64;
        assert_eq!(
            hashes_running(&mut t, &argv, true, "+OK\r\n"),
            0,
            "unlocked: no key hashed"
        );
        assert_eq!(
            hashes_running(&mut t, &argv, false, "+OK\r\n"),
            n,
            "locked: each key once"
        );
    }
}

/// A DEL of 20 keys (more than a deferred set holds inline) hashes none
/// of them without locks, each once with locks.
#[test]
fn a_run_without_locks_hashes_no_key_of_a_del_of_20() {
    let mut t = crate::testutil::TestServer::new(8);
    let keys = keys_set(&mut t, 20);
    let del = with_keys("DEL", &keys);
    assert_eq!(hashes_running(&mut t, &del, true, ":20\r\n"), 0);
    keys_set(&mut t, 20);
    assert_eq!(hashes_running(&mut t, &del, false, ":20\r\n"), 20);
}

/// An MGET across shards run without locks hashes none of its keys for
/// locks (its coordinator keeps them by shard until it runs:
/// `coord::KeyedStep`); run with locks it hashes each once; with 20 keys
/// as with 10.
#[test]
fn a_run_without_locks_hashes_no_key_of_an_mget() {
    let mut t = crate::testutil::TestServer::new(8);
    for n in [10, 20] {
        let keys = keys_set(&mut t, n);
        let mget = with_keys("MGET", &keys);
        let want = format!("*{n}\r\n{}", "$1\r\nv\r\n".repeat(n));
        assert_eq!(hashes_running(&mut t, &mget, true, &want), 0, "unlocked");
        assert_eq!(
            hashes_running(&mut t, &mget, false, &want),
            n as u64,
            "locked"
        );
    }
}

/// The same for EXISTS (a missing key and a key given twice included:
/// each counts as Redis counts it).
#[test]
fn a_run_without_locks_hashes_no_key_of_an_exists() {
    let mut t = crate::testutil::TestServer::new(8);
    let mut keys = keys_set(&mut t, 10);
    keys.push("missing".into());
    keys.push("key:1".into());
    let exists = with_keys("EXISTS", &keys);
    assert_eq!(
        hashes_running(&mut t, &exists, true, ":11\r\n"),
        0,
        "unlocked"
    );
    assert_eq!(
        hashes_running(&mut t, &exists, false, ":11\r\n"),
        12,
        "locked"
    );
}

/// The same for TOUCH.
#[test]
fn a_run_without_locks_hashes_no_key_of_a_touch() {
    let mut t = crate::testutil::TestServer::new(8);
    let mut keys = keys_set(&mut t, 10);
    keys.push("missing".into());
    let touch = with_keys("TOUCH", &keys);
    assert_eq!(
        hashes_running(&mut t, &touch, true, ":10\r\n"),
        0,
        "unlocked"
    );
    assert_eq!(
        hashes_running(&mut t, &touch, false, ":10\r\n"),
        11,
        "locked"
    );
}

/// The same for a command run on copies of its keys (SMOVE between two
/// shards: `scratch`), whose coordinator keeps the arguments.
#[test]
fn a_run_without_locks_hashes_no_key_of_a_command_run_on_copies() {
    let mut t = crate::testutil::TestServer::new(8);
    let a = "set:0";
    let b = (1..)
        .map(|i| format!("set:{i}"))
        .find(|k| shard_of(k.as_bytes(), 8) != shard_of(a.as_bytes(), 8))
        .expect("a key on another shard");
    assert_eq!(t.run(&["SADD", a, "x", "y"]), ":2\r\n");
    let there = ["SMOVE", a, &b, "x"];
    let back = ["SMOVE", &b, a, "x"];
    assert_eq!(
        hashes_running(&mut t, &there, true, ":1\r\n"),
        0,
        "unlocked"
    );
    assert_eq!(hashes_running(&mut t, &back, false, ":1\r\n"), 2, "locked");
    assert_eq!(hashes_running(&mut t, &back, false, ":0\r\n"), 2, "locked");
    assert_eq!(t.run(&["SCARD", a]), ":2\r\n");
}

/// The same for LCS over two shards, whose outputs keep the keys' order
/// (LCS of a b differs from LCS of b a only in IDX's ranges).
#[test]
fn a_run_without_locks_hashes_no_key_of_an_lcs() {
    let mut t = crate::testutil::TestServer::new(8);
    let a = "key:0";
    let b = (1..)
        .map(|i| format!("key:{i}"))
        .find(|k| shard_of(k.as_bytes(), 8) != shard_of(a.as_bytes(), 8))
        .expect("a key on another shard");
    assert_eq!(t.run(&["SET", a, "ohmytext"]), "+OK\r\n");
    assert_eq!(t.run(&["SET", &b, "mynewtext"]), "+OK\r\n");
    let ab = ["LCS", a, &b, "IDX"];
    let want_ab = "*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n*2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6\r\n";
    let want_ba = "*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:5\r\n:8\r\n*2\r\n:4\r\n:7\r\n*2\r\n*2\r\n:0\r\n:1\r\n*2\r\n:2\r\n:3\r\n$3\r\nlen\r\n:6\r\n";
    let ba = ["LCS", &b, a, "IDX"];
    for (argv, want) in [(ab, want_ab), (ba, want_ba)] {
        assert_eq!(hashes_running(&mut t, &argv, true, want), 0, "unlocked");
        assert_eq!(hashes_running(&mut t, &argv, false, want), 2, "locked");
    }
}

mod protocol {
    use super::super::*;
    use crate::ctx::ThreadStats;
    use crate::table::shard_of;
    use crate::testutil::NoClients;
    use engine::Shard;

    /// Reads one key per shard: one plan (its last), then the shard
    /// ids its jobs ran on, as a reply of integers.
    struct ReadEach(Vec<usize>);
    impl Coordinator for ReadEach {
        fn step(
            &mut self,
            results: Vec<JobOut>,
            plan: &mut Plan,
            out: &mut Reply,
            _client: &mut ClientState,
        ) -> Result<(), CmdError> {
            if results.is_empty() {
                for &s in &self.0 {
                    plan.run(s, |env| env.shard.id);
                }
                plan.last = true;
                return Ok(());
            }
            out.array(results.len());
            for r in results {
                out.int(*r.downcast::<usize>().unwrap() as i64);
            }
            Ok(())
        }
    }

    /// Shards (two unless said), their lock tables, and works queued
    /// behind locks.
    struct Rt {
        shards: Vec<Shard>,
        locks: Vec<LockTable<(u32, JobFn, Option<TxId>)>>,
        done: Vec<(u32, JobOut)>,
    }

    impl Rt {
        fn new() -> Self {
            Self::with(2)
        }
        fn with(n: usize) -> Self {
            Rt {
                shards: (0..n).map(|i| Shard::new(i, 16)).collect(),
                locks: (0..n).map(|_| LockTable::default()).collect(),
                done: Vec::new(),
            }
        }
        fn run(&mut self, s: usize, (idx, job, release): (u32, JobFn, Option<TxId>)) {
            let mut stats = ThreadStats::default();
            let mut env = ShardEnv {
                shard: &mut self.shards[s],
                stats: &mut stats,
                clients: &mut NoClients,
            };
            self.done.push((idx, job.call(&mut env)));
            if let Some(tx) = release {
                self.release(s, tx);
            }
        }
        /// Releases `tx`'s locks on shard `s` and runs what they held up.
        fn release(&mut self, s: usize, tx: TxId) {
            for w in self.locks[s].release(tx) {
                self.run(s, w);
            }
        }
        /// Delivers a plan as the worker does.
        fn deliver(&mut self, plan: Plan) {
            self.deliver_as(0, plan);
        }
        /// Delivers the plan of coordinator `tag` (outputs for
        /// [`Rt::outputs_of`]).
        fn deliver_as(&mut self, tag: u32, plan: Plan) {
            for (i, (s, w)) in plan.jobs.into_iter().enumerate() {
                let entry = (tag * 1000 + i as u32, w.job, w.release.map(|t| t.get()));
                match w.lock {
                    Some(req) if req.nowait => match self.locks[s].try_acquire(req) {
                        Ok(()) => self.run(s, entry),
                        Err(req) => {
                            let out = Box::new(LockConflict { req, job: entry.1 });
                            self.done.push((entry.0, out));
                        }
                    },
                    Some(req) => {
                        if let Some(e) = self.locks[s].acquire(req, entry) {
                            self.run(s, e);
                        }
                    }
                    None => self.run(s, entry),
                }
            }
        }
        fn outputs(&mut self) -> Vec<JobOut> {
            self.done.sort_by_key(|(i, _)| *i);
            self.done.drain(..).map(|(_, o)| o).collect()
        }
        /// The outputs of coordinator `tag`'s last plan, once all of
        /// them are in (`n` of them); `None` while some still wait.
        fn outputs_of(&mut self, tag: u32, n: usize) -> Option<Vec<JobOut>> {
            let mine = |i: &u32| *i / 1000 == tag;
            if self.done.iter().filter(|(i, _)| mine(i)).count() < n {
                return None;
            }
            self.done.sort_by_key(|(i, _)| *i);
            let (m, rest): (Vec<_>, Vec<_>) = self.done.drain(..).partition(|(i, _)| mine(i));
            self.done = rest;
            Some(m.into_iter().map(|(_, o)| o).collect())
        }
    }

    fn tx_on(home: usize) -> (Box<dyn Coordinator>, LockSet) {
        let mut set = LockSet::default();
        set.key(2, 0, b"a", Mode::Read);
        set.key(2, 0, b"b", Mode::Read);
        let shards: Vec<usize> = set.clone().requests(0).iter().map(|(s, _)| *s).collect();
        assert_eq!(shards.len(), 2, "keys on both shards");
        let inner = Box::new(ReadEach(vec![0, 1]));
        (TxCoord::wrap(home, inner, set.clone()), set)
    }

    fn step(c: &mut Box<dyn Coordinator>, rt: &mut Rt, out: &mut Reply) -> Plan {
        let mut plan = Plan::default();
        let results = rt.outputs();
        c.step(results, &mut plan, out, &mut ClientState::default())
            .unwrap();
        plan
    }

    fn shape(p: &Plan) -> Vec<(usize, bool, bool, bool)> {
        p.jobs
            .iter()
            .map(|(s, w)| {
                let l = w.lock.as_ref();
                (
                    *s,
                    l.is_some(),
                    l.is_some_and(|r| r.nowait),
                    w.release.is_some(),
                )
            })
            .collect()
    }

    #[test]
    fn a_read_from_the_higher_shard_takes_one_round_trip() {
        let (mut c, _) = tx_on(1);
        let (mut rt, mut out) = (Rt::new(), Reply::new(false));
        // Its own shard first (may wait), ...
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(1, true, false, false)]);
        rt.deliver(p);
        // ... then the lower one: lock (nowait), run and release in one.
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(0, true, true, true)]);
        rt.deliver(p);
        // Its own part, released.
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(1, false, false, true)]);
        rt.deliver(p);
        assert!(step(&mut c, &mut rt, &mut out).is_empty());
        assert_eq!(out.as_bytes(), b"*2\r\n:0\r\n:1\r\n");
        assert!(!rt.locks[0].any_held() && !rt.locks[1].any_held());
    }

    #[test]
    fn home_on_the_lowest_shard_or_whole_shard_locks_keep_shard_order() {
        let (mut c, _) = tx_on(0);
        let (mut rt, mut out) = (Rt::new(), Reply::new(false));
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(0, true, false, false)]);
        assert!(!c.must_finish());

        let mut set = LockSet::default();
        set.whole(2, Mode::Read);
        let mut c = TxCoord::wrap(1, Box::new(ReadEach(vec![0, 1])), set);
        let p = step(&mut c, &mut Rt::new(), &mut out);
        assert_eq!(shape(&p), vec![(0, true, false, false)]);
    }

    /// A lend round (`script::lend`) over shards 0 and 1 from `home`.
    fn lend_round(home: usize) -> Box<dyn Coordinator> {
        let mut set = LockSet::default();
        set.whole_shard(0, Mode::Write);
        set.whole_shard(1, Mode::Write);
        set.lend_at_grant = true;
        TxCoord::wrap(home, Box::new(ReadEach(vec![home])), set)
    }

    /// The lock requests of `p`: (shard, nowait, lend).
    fn requests(p: &Plan) -> Vec<(usize, bool, bool)> {
        let reqs = p
            .jobs
            .iter()
            .filter_map(|(s, w)| w.lock.as_ref().map(|r| (*s, r)));
        reqs.map(|(s, r)| (s, r.nowait, r.lend)).collect()
    }

    /// A lend round over its home shard and a higher one locks them in
    /// order, the other's request last, waiting (in order, it may) and
    /// marked to be lent at its grant; then its job runs on the home
    /// shard. From the higher shard, nothing is lent at a grant (the
    /// other's request is not its last): see "Lent at the grant".
    #[test]
    fn a_lend_round_lends_the_higher_shard_at_its_grant() {
        for home in [0, 1] {
            let mut c = lend_round(home);
            let (mut rt, mut out) = (Rt::new(), Reply::new(false));
            let mut asked = Vec::new();
            for _ in 0..6 {
                let p = step(&mut c, &mut rt, &mut out);
                if p.is_empty() {
                    break;
                }
                asked.extend(requests(&p));
                rt.deliver(p);
            }
            let want = if home == 0 {
                vec![(0, false, false), (1, false, true)]
            } else {
                vec![(0, false, false), (1, false, false)]
            };
            assert_eq!(asked, want, "home {home}");
            assert_eq!(out.as_bytes(), format!("*1\r\n:{home}\r\n").as_bytes());
            assert!(!rt.locks[0].any_held() && !rt.locks[1].any_held());
        }
    }

    /// Runs one job on its home shard (its last plan if `last`), whose
    /// shard `other` released the transaction's locks itself (as a lent
    /// shard's thread does at the give-back, see `script::lend`).
    struct ReleasedBy {
        home: usize,
        other: usize,
        last: bool,
        ran: bool,
    }
    impl Coordinator for ReleasedBy {
        fn step(
            &mut self,
            results: Vec<JobOut>,
            plan: &mut Plan,
            out: &mut Reply,
            _client: &mut ClientState,
        ) -> Result<(), CmdError> {
            if !self.ran {
                self.ran = true;
                plan.run(self.home, |env| env.shard.id);
                plan.last = self.last;
                return Ok(());
            }
            out.int(*results[0].downcast_ref::<usize>().unwrap() as i64);
            Ok(())
        }
        fn released(&self, shard: usize) -> bool {
            self.ran && shard == self.other
        }
    }

    /// A shard whose locks the inner's job released (`Coordinator::
    /// released`) gets no release, whether the job's plan was its last
    /// (fused on the home shard, the higher: the others' releases follow
    /// it) or not (the releases go after it): only the home shard's goes
    /// out.
    #[test]
    fn a_shard_released_by_the_job_gets_no_release() {
        for last in [false, true] {
            let mut set = LockSet::default();
            set.whole_shard(0, Mode::Write);
            set.whole_shard(1, Mode::Write);
            set.lend_at_grant = true;
            let inner = ReleasedBy {
                home: 1,
                other: 0,
                last,
                ran: false,
            };
            let mut c = TxCoord::wrap(1, Box::new(inner), set);
            let tx = c.tx_id().unwrap();
            let (mut rt, mut out) = (Rt::new(), Reply::new(false));
            let mut works = Vec::new();
            for _ in 0..6 {
                let p = step(&mut c, &mut rt, &mut out);
                if p.is_empty() {
                    break;
                }
                works.extend(shape(&p));
                let job_ran = p
                    .jobs
                    .iter()
                    .any(|(_, w)| w.lock.is_none() || !w.job.is_noop());
                rt.deliver(p);
                if job_ran && rt.locks[0].any_held() {
                    // What the lent shard's thread does at the give-back.
                    rt.locks[0].unlock(tx);
                }
            }
            assert!(
                works
                    .iter()
                    .all(|&(s, lock, _, release)| s == 1 || !release || lock),
                "no release for shard 0 (last {last}): {works:?}"
            );
            assert_eq!(out.as_bytes(), b":1\r\n", "last {last}");
            assert!(!rt.locks[0].any_held() && !rt.locks[1].any_held());
        }
    }

    #[test]
    fn a_write_goes_out_of_order_and_must_finish_while_undecided() {
        let mut set = LockSet::default();
        set.key(2, 0, b"a", Mode::Write);
        set.key(2, 0, b"b", Mode::Write);
        let mut c = TxCoord::wrap(1, Box::new(ReadEach(vec![0, 1])), set);
        let (mut rt, mut out) = (Rt::new(), Reply::new(false));
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(1, true, false, false)]);
        assert!(!c.must_finish(), "nothing ran: abort releases");
        rt.deliver(p);
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(0, true, true, true)]);
        assert!(c.must_finish(), "shard 0 decides whether shard 1 runs");
        rt.deliver(p);
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(1, false, false, true)]);
        assert!(c.must_finish(), "released, but its last step is to come");
        rt.deliver(p);
        assert!(step(&mut c, &mut rt, &mut out).is_empty());
    }

    /// A request waiting behind a busy script's locks is withdrawn: the
    /// transaction releases what it holds (none of its jobs ran), and
    /// answers the busy error, or keeps waiting if it said so.
    #[test]
    fn a_withdrawn_request_releases_everything_and_fails() {
        // Home 1 first (it waits there), then shard 0: two locks held by
        // another transaction (a busy script's) on shard 1.
        let mut set = LockSet::default();
        set.key(2, 0, b"a", Mode::Write);
        set.key(2, 0, b"b", Mode::Write);
        let mut c = TxCoord::wrap(1, Box::new(ReadEach(vec![0, 1])), set);
        let (mut rt, mut out) = (Rt::new(), Reply::new(false));
        let mut busy = LockReq {
            tx: 99,
            ..Default::default()
        };
        busy.add_whole(Mode::Write);
        assert!(rt.locks[1]
            .acquire(busy, (0, TxCoord::noop(), None))
            .is_some());
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(1, true, false, false)]);
        assert!(p.jobs[0].1.lock.as_ref().is_some_and(|r| !r.keep_when_busy));
        rt.deliver(p);
        assert!(rt.done.is_empty(), "it waits behind the script");
        for (r, (idx, _, _)) in rt.locks[1].withdraw_for_busy(|_| true) {
            assert_ne!(r.tx, 99);
            let line = "BUSY Redis is busy running a script.".to_string();
            rt.done.push((idx, Box::new(BusyWithdrawn { line })));
        }
        // It held nothing (its one request withdrawn): no release, the
        // error at once.
        let mut plan = Plan::default();
        let results = rt.outputs();
        let e = c
            .step(results, &mut plan, &mut out, &mut ClientState::default())
            .unwrap_err();
        assert!(
            matches!(&e, CmdError::Rejected(l) if l.starts_with("BUSY ")),
            "{e:?}"
        );
        assert!(plan.is_empty());
        assert_eq!(rt.locks[1].waiting_len(), 0);
        assert!(!rt.locks[0].any_held());

        // Home 0 (ascending): shard 0 granted, shard 1 waits and is
        // withdrawn: shard 0 alone is released, then the error.
        let mut set = LockSet::default();
        set.key(2, 0, b"a", Mode::Write);
        set.key(2, 0, b"b", Mode::Write);
        let mut c = TxCoord::wrap(0, Box::new(ReadEach(vec![0, 1])), set);
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(0, true, false, false)]);
        rt.deliver(p);
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p)[0].0, 1);
        rt.deliver(p);
        assert!(rt.locks[0].any_held() && rt.done.is_empty());
        for (_, (idx, _, _)) in rt.locks[1].withdraw_for_busy(|_| true) {
            let line = "BUSY Redis is busy running a script.".to_string();
            rt.done.push((idx, Box::new(BusyWithdrawn { line })));
        }
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(0, false, false, true)]);
        rt.deliver(p);
        let mut plan = Plan::default();
        let e = c
            .step(
                rt.outputs(),
                &mut plan,
                &mut out,
                &mut ClientState::default(),
            )
            .unwrap_err();
        assert!(matches!(&e, CmdError::Rejected(_)), "{e:?}");
        assert!(plan.is_empty());
        assert!(!rt.locks[0].any_held());

        // An allow-busy command's requests are kept.
        let mut set = LockSet::default();
        set.key(2, 0, b"a", Mode::Read);
        set.key(2, 0, b"b", Mode::Read);
        set.keep_when_busy = true;
        let mut c = TxCoord::wrap(1, Box::new(ReadEach(vec![0, 1])), set);
        let p = step(&mut c, &mut rt, &mut out);
        assert!(p.jobs[0].1.lock.as_ref().is_some_and(|r| r.keep_when_busy));
        rt.deliver(p);
        assert!(rt.locks[1].withdraw_for_busy(|_| true).is_empty());
        rt.release(1, 99);
        let p = step(&mut c, &mut rt, &mut out);
        rt.deliver(p);
        let p = step(&mut c, &mut rt, &mut out);
        rt.deliver(p);
        assert!(step(&mut c, &mut rt, &mut out).is_empty());
        assert_eq!(out.as_bytes(), b"*2\r\n:0\r\n:1\r\n");
    }

    /// Four shards, every request in one round; shard `b` refuses (another
    /// transaction writes its key). The locks below `b` stay held, those
    /// above are released; `b` is asked again with a request that waits,
    /// then the shards above it together, and the transaction completes.
    #[test]
    fn a_refusal_in_the_round_goes_on_in_order_from_the_refused_shard() {
        let key_on = |want: usize| {
            (0..1000)
                .map(|i| format!("k{i}"))
                .find(|k| shard_of(k.as_bytes(), 4) == want)
                .expect("a key on every shard")
        };
        let keys: Vec<String> = (0..4).map(key_on).collect();
        for b in 0..4 {
            let mut set = LockSet::default();
            for k in &keys {
                set.key(4, 0, k.as_bytes(), Mode::Read);
            }
            let mut c = TxCoord::wrap(3, Box::new(ReadEach(vec![0, 1, 2, 3])), set);
            let (mut rt, mut out) = (Rt::with(4), Reply::new(false));
            let mut blocker = LockReq {
                tx: 999,
                ..Default::default()
            };
            blocker.add(0, keys[b].as_bytes(), Mode::Write);
            assert!(rt.locks[b].try_acquire(blocker).is_ok());

            let p = step(&mut c, &mut rt, &mut out);
            let all: Vec<_> = (0..4).map(|s| (s, true, true, false)).collect();
            assert_eq!(shape(&p), all, "one round, all nowait");
            rt.deliver(p);
            // Refused on b: release above b, ask b again (waits).
            let p = step(&mut c, &mut rt, &mut out);
            let mut want: Vec<_> = (b + 1..4).map(|s| (s, false, false, true)).collect();
            want.push((b, true, false, false));
            assert_eq!(shape(&p), want, "refused on {b}");
            assert!(!c.must_finish());
            rt.deliver(p);
            assert!((0..b).all(|s| rt.locks[s].any_held()), "kept below {b}");
            assert!(
                (b + 1..4).all(|s| !rt.locks[s].any_held()),
                "released above"
            );
            assert_eq!(rt.locks[b].waiting_len(), 1);
            rt.release(b, 999);
            let mut p = step(&mut c, &mut rt, &mut out);
            match 3 - b {
                // Two or more above: together, nowait.
                2.. => {
                    let rest: Vec<_> = (b + 1..4).map(|s| (s, true, true, false)).collect();
                    assert_eq!(shape(&p), rest);
                    rt.deliver(p);
                    p = step(&mut c, &mut rt, &mut out);
                }
                // One: it waits, fused with its job (all others held).
                1 => {
                    assert_eq!(shape(&p), vec![(3, true, false, true)]);
                    rt.deliver(p);
                    p = step(&mut c, &mut rt, &mut out);
                }
                _ => {}
            }
            // Every lock held: the jobs run and release.
            let mut sh = shape(&p);
            sh.sort();
            assert!(sh.iter().all(|&(_, lock, _, rel)| !lock && rel), "{sh:?}");
            rt.deliver(p);
            assert!(step(&mut c, &mut rt, &mut out).is_empty());
            assert_eq!(out.as_bytes(), b"*4\r\n:0\r\n:1\r\n:2\r\n:3\r\n");
            assert!(rt.locks.iter().all(|t| !t.any_held()));
        }
    }

    /// Transactions over the same keys on four shards, homes
    /// everywhere, stepped round-robin from each starting point: each
    /// one-round request is granted or refused at once, refused ones
    /// start over in order, and all of them finish with every lock
    /// released (no deadlock, no lost waiter). With the round's
    /// requests waiting instead of nowait, they deadlock.
    #[test]
    fn one_round_transactions_that_meet_all_finish() {
        let key_on = |want: usize| {
            (0..1000)
                .map(|i| format!("k{i}"))
                .find(|k| shard_of(k.as_bytes(), 4) == want)
                .expect("a key on every shard")
        };
        let keys: Vec<String> = (0..4).map(key_on).collect();
        for start in 0..4 {
            let mut rt = Rt::with(4);
            let mut refused = 0;
            let mut cs: Vec<(Box<dyn Coordinator>, Reply, usize, bool)> = (0..4)
                .map(|home| {
                    // Each writes the keys of three shards, one of them
                    // its home.
                    let on: Vec<usize> = (0..4).filter(|s| *s != (home + 2) % 4).collect();
                    let mut set = LockSet::default();
                    for &s in &on {
                        set.key(4, 0, keys[s].as_bytes(), Mode::Write);
                    }
                    let c = TxCoord::wrap(home, Box::new(ReadEach(on)), set);
                    (c, Reply::new(false), 0, false)
                })
                .collect();
            let mut first = [true; 4];
            let mut rounds = 0;
            while cs.iter().any(|c| !c.3) {
                rounds += 1;
                assert!(rounds < 1000, "no progress: a deadlock");
                for t in (0..4).map(|i| (i + start) % 4) {
                    let (c, out, want, done) = &mut cs[t];
                    if *done {
                        continue;
                    }
                    let results = if first[t] {
                        first[t] = false;
                        Vec::new()
                    } else {
                        match rt.outputs_of(t as u32, *want) {
                            Some(r) => r,
                            None => continue,
                        }
                    };
                    refused += results.iter().filter(|r| r.is::<LockConflict>()).count();
                    let mut plan = Plan::default();
                    c.step(results, &mut plan, out, &mut ClientState::default())
                        .unwrap();
                    if plan.is_empty() {
                        *done = true;
                        continue;
                    }
                    *want = plan.jobs.len();
                    rt.deliver_as(t as u32, plan);
                }
            }
            assert!(refused > 0, "the transactions met");
            for (_, out, _, _) in &cs {
                assert_eq!(out.as_bytes().first(), Some(&b'*'));
            }
            assert!(rt
                .locks
                .iter()
                .all(|t| !t.any_held() && t.waiting_len() == 0));
        }
    }

    #[test]
    fn a_refused_nowait_request_starts_over_in_order() {
        let (mut c, set) = tx_on(1);
        let (mut rt, mut out) = (Rt::new(), Reply::new(false));
        // Another transaction writes the key on shard 0.
        let (_, mut blocker) = set.requests(0).into_iter().find(|(s, _)| *s == 0).unwrap();
        blocker.tx = 999;
        blocker.keys.iter_mut().for_each(|k| k.2 = Mode::Write);
        assert!(rt.locks[0].try_acquire(blocker).is_ok());

        let p = step(&mut c, &mut rt, &mut out);
        rt.deliver(p);
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(0, true, true, true)]);
        rt.deliver(p);
        assert_eq!(rt.locks[0].waiting_len(), 0, "nowait: not queued");
        // Refused: release its own shard, request shard 0 in order.
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(
            shape(&p),
            vec![(1, false, false, true), (0, true, false, false)]
        );
        rt.deliver(p);
        assert!(!rt.locks[1].any_held());
        assert_eq!(rt.locks[0].waiting_len(), 1, "waits in order now");
        // The writer finishes; the request is granted and its (no-op)
        // work runs.
        rt.release(0, 999);
        let p = step(&mut c, &mut rt, &mut out);
        assert_eq!(shape(&p), vec![(1, true, false, false)]);
        rt.deliver(p);
        // Every lock held: the kept jobs run and release.
        let p = step(&mut c, &mut rt, &mut out);
        let mut sh = shape(&p);
        sh.sort();
        assert_eq!(sh, vec![(0, false, false, true), (1, false, false, true)]);
        rt.deliver(p);
        assert!(step(&mut c, &mut rt, &mut out).is_empty());
        assert_eq!(out.as_bytes(), b"*2\r\n:0\r\n:1\r\n");
        assert!(!rt.locks[0].any_held() && !rt.locks[1].any_held());
    }
}

/// Round trips and messages of whole commands, as the runtime would
/// send them (`TestServer` counts every step that reaches a shard
/// other than the home, shard 0).
mod hops {
    use crate::testutil::TestServer;

    /// `n` keys on `n` different shards, none of them the home.
    fn keys(n: usize, nshards: usize) -> Vec<String> {
        let mut used = vec![0];
        let mut keys = Vec::new();
        for i in 0.. {
            let k = format!("key:{i}");
            let s = crate::table::shard_of(k.as_bytes(), nshards);
            if !used.contains(&s) {
                used.push(s);
                keys.push(k);
                if keys.len() == n {
                    break;
                }
            }
        }
        keys
    }

    /// Round trips and messages of one command; asserts that it asked
    /// for its remote locks in one round at most.
    fn cost(t: &mut TestServer, argv: &[&str]) -> (usize, usize) {
        let (r, m, l) = (t.rounds, t.messages, t.lock_rounds);
        t.run(argv);
        assert!(
            t.lock_rounds - l <= 1,
            "{}: locks in {} rounds",
            argv[0],
            t.lock_rounds - l
        );
        (t.rounds - r, t.messages - m)
    }

    /// The locks of a multi-shard command are asked for in one round,
    /// then the jobs run and release in another: two round trips
    /// whatever the number of shards (it was one per shard).
    #[test]
    fn a_multi_shard_command_takes_two_round_trips() {
        let mut t = TestServer::new(32);
        let k = keys(10, 32);
        let mut argv = vec!["MSET"];
        for key in &k {
            argv.push(key);
            argv.push("v");
        }
        let (rounds, messages) = cost(&mut t, &argv);
        eprintln!("MSET of 10 keys on 10 of 32 shards: {rounds} rounds, {messages} messages");
        assert!(rounds <= 2, "{rounds} round trips");

        // Two shards, neither the home: both locks at once (three round
        // trips in order: lock one, lock and run the other, run the first).
        let k = keys(2, 32);
        let (rounds, messages) = cost(&mut t, &["MSET", &k[0], "v", &k[1], "v"]);
        eprintln!("MSET of 2 keys on 2 of 32 shards: {rounds} rounds, {messages} messages");
        assert!(rounds <= 2, "{rounds} round trips");

        let mut t = TestServer::new(64);
        let k = keys(20, 64);
        let mut argv = vec!["MGET"];
        argv.extend(k.iter().map(String::as_str));
        let (rounds, messages) = cost(&mut t, &argv);
        eprintln!("MGET of 20 keys on 20 of 64 shards: {rounds} rounds, {messages} messages");
        assert!(rounds <= 2, "{rounds} round trips");
    }

    /// DBSIZE, KEYS and RANDOMKEY lock every shard in one round, then
    /// read and release in another (they took a whole-shard lock on
    /// each of the 32 shards, one after another); SCAN reads its
    /// shards without a lock.
    #[test]
    fn keyspace_reads_take_one_lock_round_and_scan_none() {
        let mut t = TestServer::new(32);
        for k in keys(10, 32) {
            t.run(&["SET", &k, "v"]);
        }
        for argv in [&["DBSIZE"][..], &["KEYS", "*"], &["RANDOMKEY"]] {
            let (rounds, messages) = cost(&mut t, argv);
            eprintln!("{}: {rounds} rounds, {messages} messages", argv[0]);
            assert!(rounds <= 2, "{argv:?}: {rounds} round trips");
        }
        // SCAN walks on from an empty shard (the home has no key): one
        // job per round, no lock messages.
        let (rounds, messages) = cost(&mut t, &["SCAN", "0", "COUNT", "1"]);
        eprintln!("SCAN: {rounds} rounds, {messages} messages");
        assert_eq!(rounds, messages);
        assert_eq!(t.run(&["DBSIZE"]), ":10\r\n");
        let owned = resp::OwnedArgs::from_slices(&[&b"scan"[..], b"0"]);
        let r = crate::table::registry()
            .resolve(owned.args())
            .expect("SCAN");
        let plan = r.spec.locks.and_then(|f| f(owned.args(), 0, 32, &t.server));
        assert!(plan.is_some_and(|set| set.is_empty()), "SCAN locks nothing");
    }
}
