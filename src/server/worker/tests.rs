//! The runtime's scheduling, tested in process: real workers driven in
//! rounds exactly as a hub drives them (see `testing`), so cross-shard
//! paths are checked step by step, with no threads and no timing.

use super::testing::Cluster;

/// A key that lives on `shard` of `n`.
fn key_on(shard: usize, n: usize, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}{i}"))
        .find(|k| commands::table::shard_of(k.as_bytes(), n) == shard)
        .expect("some key hashes to every shard")
}

#[test]
fn a_lone_hop_is_answered_by_the_shard_that_ran_it() {
    let mut t = Cluster::new(2);
    // Workers on different threads: lent, the commands below would run by
    // a call (see `commands_for_a_lent_shard_run_by_a_call`).
    t.lend = false;
    let c = t.connect(0);
    let k = key_on(1, 2, "k");
    // Worker 0 sends the hop and worker 1 runs it in the same round; the
    // reply reaches the client without worker 0 taking another turn.
    t.send(c, &["SET", &k, "v"]);
    assert_eq!(t.reply(c), ("+OK\r\n".into(), 1));
    t.send(c, &["GET", &k]);
    assert_eq!(t.reply(c), ("$1\r\nv\r\n".into(), 1));
    // Two requests in flight: not a lone hop, so the replies go home and
    // worker 0 writes them in its next turn.
    t.send(c, &["GET", &k]);
    t.send(c, &["GET", &k]);
    assert_eq!(t.reply(c), ("$1\r\nv\r\n".into(), 2));
    assert_eq!(t.reply(c), ("$1\r\nv\r\n".into(), 0));
    // A key of the home shard: answered in the turn that read it.
    let h = key_on(0, 2, "h");
    t.send(c, &["SET", &h, "w"]);
    assert_eq!(t.reply(c), ("+OK\r\n".into(), 1));
}

/// Messages the workers have sent.
fn sent(t: &Cluster) -> usize {
    t.workers.iter().map(|w| w.core.mailbox.sent).sum()
}

/// Single-shard commands for the shard of another worker on the same
/// thread run there by a call (`Worker::run_lent_command`): no batch, no
/// reply message, every reply of a pipeline written in the turn that read
/// it, and the commands counted on the shard that ran them.
#[test]
fn commands_for_a_lent_shard_run_by_a_call() {
    for lend in [true, false] {
        let mut t = Cluster::new(2);
        t.lend = lend;
        let c = t.connect(0);
        let (k, h) = (key_on(1, 2, "k"), key_on(0, 2, "h"));
        assert_eq!(t.call(c, &["SET", &h, "0"]), "+OK\r\n");
        let before = sent(&t);
        t.send(c, &["SET", &k, "v"]);
        t.send(c, &["INCR", &h]);
        t.send(c, &["APPEND", &k, "w"]);
        t.send(c, &["GET", &k]);
        let replies: Vec<(String, usize)> = (0..4).map(|_| t.reply(c)).collect();
        let texts: Vec<&str> = replies.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(texts, ["+OK\r\n", ":1\r\n", ":2\r\n", "$2\r\nvw\r\n"]);
        if lend {
            assert_eq!(sent(&t), before, "no message for a lent shard");
            assert_eq!(replies[0].1, 1, "answered in the turn that read it");
            assert!(replies[1..].iter().all(|&(_, r)| r == 0));
            let calls = |w: usize| t.workers[w].core.stats.total_commands;
            // SET, APPEND and GET ran on shard 1; SET and INCR at home.
            assert_eq!((calls(0), calls(1)), (2, 3));
        } else {
            assert!(sent(&t) > before, "workers apart: batches");
        }
    }
}

/// A lent command that makes a key ready serves the client blocked on
/// it, and one for a shard held by a transaction's lock waits for it
/// (it goes by the mailbox, and is deferred there).
#[test]
fn a_lent_push_serves_a_blocked_pop() {
    let mut t = Cluster::new(2);
    let k = key_on(1, 2, "q");
    let waiter = t.connect(1);
    let pusher = t.connect(0);
    t.send(waiter, &["BLPOP", &k, "0"]);
    for _ in 0..3 {
        t.round();
    }
    let before = sent(&t);
    assert_eq!(t.call(pusher, &["RPUSH", &k, "a", "b"]), ":2\r\n");
    assert_eq!(sent(&t), before, "the push ran by a call");
    let (r, _) = t.reply(waiter);
    assert_eq!(r, format!("*2\r\n${}\r\n{k}\r\n$1\r\na\r\n", k.len()));
    assert_eq!(t.call(pusher, &["LLEN", &k]), ":1\r\n");
}

/// Sends connection `tx` a MULTI that sets `keys` to `v` and its EXEC,
/// then runs rounds (bounded) until the transaction holds shard 1's lock.
fn exec_until_shard_1_locked(t: &mut Cluster, tx: usize, keys: [&str; 2], v: &str) {
    assert_eq!(t.call(tx, &["MULTI"]), "+OK\r\n");
    for k in keys {
        assert_eq!(t.call(tx, &["SET", k, v]), "+QUEUED\r\n");
    }
    t.send(tx, &["EXEC"]);
    let mut rounds = 0;
    while !t.workers[1].core.locks.any_held() {
        t.round();
        rounds += 1;
        assert!(rounds < 100, "the transaction never locked shard 1");
    }
}

/// A shard that holds a transaction's lock is not free: a command for it
/// is not run by a call but mailed, and waits there for the release (run
/// by a call, it would read the value from before the transaction).
#[test]
fn a_locked_shard_is_not_lent() {
    let mut t = Cluster::new(3);
    // Through the mailbox, so the transaction holds its locks across rounds.
    t.lend = false;
    let (a, b) = (key_on(1, 3, "x"), key_on(2, 3, "y"));
    let tx = t.connect(0);
    let rd = t.connect(0);
    assert_eq!(t.call(rd, &["MSET", &a, "old", &b, "old"]), "+OK\r\n");
    exec_until_shard_1_locked(&mut t, tx, [&a, &b], "new");
    assert_eq!(t.try_reply(tx), None, "locked, not yet run");
    t.lend = true;
    assert_eq!(t.call(rd, &["GET", &a]), "$3\r\nnew\r\n");
    assert_eq!(t.reply(tx).0, "*2\r\n+OK\r\n+OK\r\n");
}

#[test]
fn multi_shard_commands_see_every_shard() {
    let n = 3;
    let mut t = Cluster::new(n);
    let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "m")).collect();
    let c = t.connect(1);
    let d = t.connect(2);
    let mset = ["MSET", &keys[0], "a", &keys[1], "b", &keys[2], "c"];
    assert_eq!(t.call(c, &mset), "+OK\r\n");
    assert_eq!(
        t.call(d, &["MGET", &keys[2], &keys[0], "nope", &keys[1]]),
        "*4\r\n$1\r\nc\r\n$1\r\na\r\n$-1\r\n$1\r\nb\r\n"
    );
    assert_eq!(t.call(d, &["DBSIZE"]), ":3\r\n");
    assert_eq!(t.call(c, &["DEL", &keys[0], &keys[1], "nope"]), ":2\r\n");
    assert_eq!(
        t.call(c, &["EXISTS", &keys[0], &keys[1], &keys[2]]),
        ":1\r\n"
    );
}

#[test]
fn a_transaction_across_shards_applies_as_one() {
    let mut t = Cluster::new(2);
    let (a, b) = (key_on(0, 2, "t"), key_on(1, 2, "t"));
    let c = t.connect(0);
    assert_eq!(t.call(c, &["MULTI"]), "+OK\r\n");
    assert_eq!(t.call(c, &["SET", &a, "1"]), "+QUEUED\r\n");
    assert_eq!(t.call(c, &["INCR", &b]), "+QUEUED\r\n");
    assert_eq!(t.call(c, &["EXEC"]), "*2\r\n+OK\r\n:1\r\n");
    let d = t.connect(1);
    assert_eq!(t.call(d, &["MGET", &a, &b]), "*2\r\n$1\r\n1\r\n$1\r\n1\r\n");
}

#[test]
fn a_blocked_pop_is_served_by_a_push_from_another_worker() {
    let mut t = Cluster::new(2);
    let k = key_on(1, 2, "q");
    let waiter = t.connect(0);
    let pusher = t.connect(1);
    t.send(waiter, &["BLPOP", &k, "0"]);
    for _ in 0..10 {
        t.round();
    }
    assert_eq!(t.try_reply(waiter), None, "nothing to pop yet");
    assert_eq!(t.call(pusher, &["LPUSH", &k, "x"]), ":1\r\n");
    let (r, _) = t.reply(waiter);
    assert_eq!(r, format!("*2\r\n${}\r\n{k}\r\n$1\r\nx\r\n", k.len()));
    assert_eq!(t.call(pusher, &["EXISTS", &k]), ":0\r\n");
}

#[test]
fn a_blocked_multi_key_pop_parks_on_every_shard_and_is_served_once() {
    let mut t = Cluster::new(3);
    let (k0, k2) = (key_on(0, 3, "p"), key_on(2, 3, "p"));
    let waiter = t.connect(1);
    let pusher = t.connect(0);
    t.send(waiter, &["BLPOP", &k0, &k2, "0"]);
    for _ in 0..10 {
        t.round();
    }
    assert_eq!(t.try_reply(waiter), None);
    // Both keys filled in one command: one of them serves the waiter, the
    // other keeps its element.
    assert_eq!(t.call(pusher, &["MULTI"]), "+OK\r\n");
    assert_eq!(t.call(pusher, &["RPUSH", &k2, "b"]), "+QUEUED\r\n");
    assert_eq!(t.call(pusher, &["RPUSH", &k0, "a"]), "+QUEUED\r\n");
    assert_eq!(t.call(pusher, &["EXEC"]), "*2\r\n:1\r\n:1\r\n");
    let (r, _) = t.reply(waiter);
    assert!(
        r == format!("*2\r\n${}\r\n{k0}\r\n$1\r\na\r\n", k0.len())
            || r == format!("*2\r\n${}\r\n{k2}\r\n$1\r\nb\r\n", k2.len()),
        "{r:?}"
    );
    for _ in 0..10 {
        t.round();
    }
    assert_eq!(t.try_reply(waiter), None, "served once");
    assert_eq!(t.call(pusher, &["EXISTS", &k0, &k2]), ":1\r\n");
}

/// Runs rounds until `done` holds (bounded: a hang fails the test).
fn rounds_until(t: &mut Cluster, what: &str, mut done: impl FnMut(&Cluster) -> bool) {
    for _ in 0..super::testing::ROUNDS_MAX {
        if done(t) {
            return;
        }
        t.round();
    }
    panic!("{what}: not after {} rounds", super::testing::ROUNDS_MAX);
}

/// A client whose socket is gone (reset, or shut both ways) while its
/// MSET waits in a lock queue is closed at once and gives its place up:
/// its transaction is aborted, never applied, and the one queued behind
/// it goes next. Left open (it was: a waiting connection reads nothing,
/// and only a failed write closed it), every dropped client kept its
/// place, and live clients' MGETs of the same keys waited seconds behind
/// a few hundred of them. A client that only shut its sending side still
/// gets its reply.
#[test]
fn a_client_gone_while_its_transaction_waits_leaves_the_lock_queue() {
    use commands::tx::{LockReq, Mode};
    let mut t = Cluster::new(3);
    // Through the mailbox: the transactions wait across rounds.
    t.lend = false;
    let (a, b) = (key_on(1, 3, "a"), key_on(2, 3, "b"));
    // The test holds `a` on shard 1, as a transaction running long would
    // (an id no home makes: 0xfff is no shard).
    const HOLDER: u64 = (1 << 40) | 0xfff;
    let mut held = LockReq {
        tx: HOLDER,
        ..Default::default()
    };
    held.add(0, a.as_bytes(), Mode::Write);
    assert!(t.workers[1].core.locks.try_acquire(held).is_ok());
    let gone = t.connect(0);
    let half = t.connect(0);
    t.send(gone, &["MSET", &a, "gone", &b, "gone"]);
    t.send(half, &["MSET", &a, "half", &b, "half"]);
    rounds_until(&mut t, "both MSETs queued on shard 1", |t| {
        t.workers[1].core.locks.waiting_len() == 2
    });
    t.shut(gone, true);
    t.shut(half, false);
    rounds_until(&mut t, "the gone client's MSET left the queue", |t| {
        t.workers[1].core.locks.waiting_len() == 1
    });
    assert!(!t.workers[2].core.locks.any_held(), "nothing held for it");
    for w in t.workers[1].core.locks.release(HOLDER) {
        t.workers[1].run_work(w);
    }
    assert_eq!(t.reply(half).0, "+OK\r\n", "a half-closed client's reply");
    let rd = t.connect(2);
    assert_eq!(
        t.call(rd, &["MGET", &a, &b]),
        "*2\r\n$4\r\nhalf\r\n$4\r\nhalf\r\n"
    );
    assert!(t.workers.iter().all(|w| w.core.locks.waiting_len() == 0));
}

/// The same for the other transactions a client may be waiting with: an
/// EXEC, and a script across shards. Each waits in shard 1's queue behind
/// a held lock; the one whose client is gone leaves the queue at once,
/// holding nothing anywhere, and the other one goes next when the lock is
/// released, its writes whole.
#[test]
fn a_client_gone_while_its_exec_or_script_waits_leaves_the_lock_queue() {
    use commands::tx::{LockReq, Mode};
    const SCRIPT: &str =
        "redis.call('SET', KEYS[1], ARGV[1]) redis.call('SET', KEYS[2], ARGV[1]) return 1";
    // An id no home makes, as above.
    const HOLDER: u64 = (1 << 40) | 0xfff;
    for kind in ["EXEC", "EVAL"] {
        let mut t = Cluster::new(3);
        t.lend = false;
        let (a, b) = (key_on(1, 3, "a"), key_on(2, 3, "b"));
        let mut held = LockReq {
            tx: HOLDER,
            ..Default::default()
        };
        held.add(0, a.as_bytes(), Mode::Write);
        assert!(t.workers[1].core.locks.try_acquire(held).is_ok());
        let gone = t.connect(0);
        let live = t.connect(0);
        for (c, v) in [(gone, "gone"), (live, "live")] {
            if kind == "EXEC" {
                assert_eq!(t.call(c, &["MULTI"]), "+OK\r\n");
                assert_eq!(t.call(c, &["SET", &a, v]), "+QUEUED\r\n");
                assert_eq!(t.call(c, &["SET", &b, v]), "+QUEUED\r\n");
                t.send(c, &["EXEC"]);
            } else {
                t.send(c, &["EVAL", SCRIPT, "2", &a, &b, v]);
            }
        }
        rounds_until(&mut t, &format!("both {kind}s queued on shard 1"), |t| {
            t.workers[1].core.locks.waiting_len() == 2
        });
        t.shut(gone, true);
        rounds_until(&mut t, &format!("the gone client's {kind} left"), |t| {
            t.workers[1].core.locks.waiting_len() == 1
        });
        assert!(!t.workers[2].core.locks.any_held(), "{kind}: nothing held");
        for w in t.workers[1].core.locks.release(HOLDER) {
            t.workers[1].run_work(w);
        }
        let want = if kind == "EXEC" {
            "*2\r\n+OK\r\n+OK\r\n"
        } else {
            ":1\r\n"
        };
        assert_eq!(t.reply(live).0, want, "{kind}");
        let rd = t.connect(2);
        assert_eq!(
            t.call(rd, &["MGET", &a, &b]),
            "*2\r\n$4\r\nlive\r\n$4\r\nlive\r\n",
            "{kind}"
        );
        assert!(t.workers.iter().all(|w| w.core.locks.waiting_len() == 0));
        assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
    }
}

/// Whether some worker holds work back for a transaction's lock: a remote
/// batch or job deferred on its shard, or a connection of its own whose
/// next request waits for a release.
fn holding_back(t: &Cluster) -> bool {
    t.workers
        .iter()
        .any(|w| !w.core.deferred.is_empty() || !w.core.lock_blocked.is_empty())
}

#[test]
fn plain_commands_wait_for_a_transaction_across_shards() {
    let mut held_back = 0;
    // The reads start at every round of the transaction's life: each
    // offset is one interleaving, the same on every run.
    for offset in 0..8 {
        // A transaction over two shards, neither its home: it holds both
        // locks from its first round to its second.
        let mut t = Cluster::new(3);
        // Through the mailbox, so the transaction holds its locks across
        // rounds (lent, it runs in one call: see the test below).
        t.lend = false;
        let (a, b) = (key_on(1, 3, "x"), key_on(2, 3, "y"));
        let tx = t.connect(0);
        let rd = t.connect(2);
        assert_eq!(t.call(rd, &["MSET", &a, "old", &b, "old"]), "+OK\r\n");
        assert_eq!(t.call(tx, &["MULTI"]), "+OK\r\n");
        assert_eq!(t.call(tx, &["SET", &a, "new"]), "+QUEUED\r\n");
        assert_eq!(t.call(tx, &["SET", &b, "new"]), "+QUEUED\r\n");
        t.send(tx, &["EXEC"]);
        for _ in 0..offset {
            t.round();
            held_back += usize::from(holding_back(&t));
        }
        // A pipeline: a command on the reader's home shard, then a hop to
        // the transaction's other shard.
        t.send(rd, &["GET", &b]);
        t.send(rd, &["GET", &a]);
        let mut replies = Vec::new();
        let mut exec = None;
        for _ in 0..super::testing::ROUNDS_MAX {
            if replies.len() == 2 && exec.is_some() {
                break;
            }
            t.round();
            held_back += usize::from(holding_back(&t));
            while let Some(r) = t.try_reply(rd) {
                replies.push(r);
            }
            exec = exec.or_else(|| t.try_reply(tx));
        }
        assert_eq!(exec.as_deref(), Some("*2\r\n+OK\r\n+OK\r\n"));
        let new = "$3\r\nnew\r\n";
        let old = "$3\r\nold\r\n";
        assert_eq!(replies.len(), 2, "offset {offset}");
        // In order, and never half a transaction: a read after one that
        // saw its write sees its other write too.
        assert!(
            !(replies[0] == new && replies[1] == old),
            "offset {offset}: {replies:?}"
        );
    }
    assert!(held_back > 0, "no interleaving held a command back");
}

#[test]
fn a_transaction_over_lent_shards_answers_in_the_turn_that_read_it() {
    let n = 8;
    let mut t = Cluster::new(n);
    let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "l")).collect();
    let c = t.connect(3);
    let mut mset = vec!["MSET"];
    for k in &keys {
        mset.extend([k.as_str(), "v"]);
    }
    // Eight shards, two lock-and-run rounds, all through calls: the reply
    // is written in the round that read the request (its own shard's job
    // goes through the local queue, in the same turn).
    t.send(c, &mset);
    assert_eq!(t.reply(c), ("+OK\r\n".into(), 1));
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    t.send(c, &mget);
    let (r, rounds) = t.reply(c);
    assert_eq!(r, format!("*{n}\r\n{}", "$1\r\nv\r\n".repeat(n)));
    assert_eq!(rounds, 1);
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// An MSET over 4 shards on 4 threads (home on one of them): the lock
/// round and the run round each send one work per remote shard and get
/// their outputs back in one message (`mailbox::Gather`): 8 messages,
/// where one reply per work made 12.
#[test]
fn a_transaction_over_mailed_shards_gets_one_reply_per_round() {
    let n = 4;
    let mut t = Cluster::new(n);
    t.lend = false;
    let c = t.connect(0);
    let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "g")).collect();
    let mut mset = vec!["MSET"];
    for k in &keys {
        mset.extend([k.as_str(), "v"]);
    }
    let sent = |t: &Cluster| t.workers.iter().map(|w| w.core.mailbox.sent).sum::<usize>();
    let before = sent(&t);
    assert_eq!(t.call(c, &mset), "+OK\r\n");
    assert_eq!(sent(&t) - before, 2 * (n - 1) + 2);
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    assert_eq!(
        t.call(c, &mget),
        format!("*{n}\r\n{}", "$1\r\nv\r\n".repeat(n))
    );
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// Transactions lent and through the mailbox, meeting: related keys on
/// every shard are always written together, and every read of them sees
/// one write whole.
#[test]
fn lent_and_mailed_transactions_stay_isolated() {
    for n in [2, 3, 5] {
        let mut t = Cluster::new(n);
        let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "i")).collect();
        let clients: Vec<usize> = (0..2 * n).map(|i| t.connect(i % n)).collect();
        let mut expect = vec![0usize; clients.len()];
        for step in 0..60usize {
            for (i, &c) in clients.iter().enumerate() {
                let v = format!("{}", step * 100 + i);
                let mut mset = vec!["MSET"];
                for k in &keys {
                    mset.extend([k.as_str(), v.as_str()]);
                }
                // Every other step a plain command on another shard goes
                // first: the transaction then waits for it and goes by
                // the mailbox, holding its locks across rounds.
                if (step + i) % 2 == 0 {
                    t.send(c, &["GET", &keys[(i + 1) % n]]);
                    expect[i] += 1;
                }
                t.send(c, &mset);
                let mut mget = vec!["MGET"];
                mget.extend(keys.iter().map(String::as_str));
                t.send(c, &mget);
                expect[i] += 2;
            }
            // A few rounds: requests of many clients in flight at once.
            for _ in 0..(step % 3) {
                t.round();
            }
            if step % 3 != 2 {
                continue;
            }
            drain_whole(&mut t, &clients, &mut expect, n, "transaction");
        }
        assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
    }
}

/// A lent worker picks up a CONFIG SET before it runs a job, as its own
/// turn would have first (the store's encoding follows the new limit).
#[test]
fn a_lent_worker_runs_on_the_current_config() {
    let n = 3;
    let mut t = Cluster::new(n);
    let (src, dst) = (key_on(1, n, "src"), key_on(2, n, "dst"));
    let c = t.connect(0);
    assert_eq!(
        t.call(c, &["ZADD", &src, "1", "a", "2", "b", "3", "c", "4", "d"]),
        ":4\r\n"
    );
    // One write: the store runs in the same turn as the CONFIG SET,
    // before the other workers take a turn.
    t.send(c, &["CONFIG", "SET", "zset-max-listpack-entries", "3"]);
    t.send(c, &["ZUNIONSTORE", &dst, "1", &src]);
    assert_eq!(t.reply(c).0, "+OK\r\n");
    assert_eq!(t.reply(c).0, ":4\r\n");
    assert_eq!(
        t.call(c, &["OBJECT", "ENCODING", &dst]),
        "$8\r\nskiplist\r\n"
    );
}

/// An unlocked transaction (every shard lent, none locked) that feeds a
/// blocked client: the waiter is served once, on whichever worker the
/// pushed list lives, the home's included.
#[test]
fn an_unlocked_move_serves_a_blocked_pop() {
    let n = 3;
    for home in [0, 2] {
        let mut t = Cluster::new(n);
        let (src, dst) = (key_on(1, n, "s"), key_on(2, n, "d"));
        let waiter = t.connect(2);
        let mover = t.connect(home);
        t.send(waiter, &["BLPOP", &dst, "0"]);
        for _ in 0..5 {
            t.round();
        }
        assert_eq!(t.call(mover, &["RPUSH", &src, "a", "b"]), ":2\r\n");
        assert_eq!(
            t.call(mover, &["LMOVE", &src, &dst, "LEFT", "RIGHT"]),
            "$1\r\na\r\n"
        );
        let (r, _) = t.reply(waiter);
        assert_eq!(r, format!("*2\r\n${}\r\n{dst}\r\n$1\r\na\r\n", dst.len()));
        assert_eq!(
            t.call(mover, &["LRANGE", &src, "0", "-1"]),
            "*1\r\n$1\r\nb\r\n"
        );
        assert_eq!(t.call(mover, &["EXISTS", &dst]), ":0\r\n");
        assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
    }
}

/// The claim of the blocked command of a connection of worker `home`.
fn blocked_claim(t: &Cluster, home: usize) -> Option<crate::server::blocking::Claim> {
    t.workers[home]
        .conns
        .slots
        .iter()
        .flatten()
        .find_map(|c| match &c.block {
            crate::server::blocking::BlockPhase::Blocked(b) => Some(b.claim.clone()),
            _ => None,
        })
}

/// A shard re-running a multi-shard blocked command (its key there was
/// filled) holds its claim on trial while the parks to its other shards
/// are still on their way. A park that arrives then is still parked: the
/// trial may block again (XREAD's `$` saw nothing new), and the command
/// must then hear of this shard's key. Read as taken, the park was
/// dropped and the XADD below never served the reader.
#[test]
fn a_park_arriving_during_another_shards_trial_is_kept() {
    let n = 3;
    let mut t = Cluster::new(n);
    let (a, c) = (key_on(0, n, "x"), key_on(2, n, "x"));
    let reader = t.connect(1);
    let writer = t.connect(0);
    assert_eq!(
        t.call(writer, &["XADD", &a, "1-0", "f", "old"]),
        "$3\r\n1-0\r\n"
    );
    t.send(
        reader,
        &["XREAD", "BLOCK", "0", "STREAMS", &a, &c, "$", "$"],
    );
    // Worker 1 alone until it blocks the reader: its parks wait in the
    // mailboxes of workers 0 and 2 (the gather before it hops to them).
    let mut claim = None;
    for _ in 0..super::testing::ROUNDS_MAX {
        for w in 0..n {
            if claim.is_none() {
                t.turn(w);
                claim = blocked_claim(&t, 1);
            }
        }
        if claim.is_some() {
            break;
        }
    }
    let claim = claim.expect("the reader blocks");
    // As worker 0 would, running the reader again for its key `a`.
    assert!(claim.try_trial());
    t.turn(2);
    assert!(!claim.is_taken(), "a trial decides nothing");
    // The trial found nothing after `$`: blocked again.
    claim.release();
    assert_eq!(
        t.call(writer, &["XADD", &c, "5-0", "f", "new"]),
        "$3\r\n5-0\r\n"
    );
    let (r, _) = t.reply(reader);
    let want = format!(
        "*1\r\n*2\r\n${}\r\n{c}\r\n*1\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\nf\r\n$3\r\nnew\r\n",
        c.len()
    );
    assert_eq!(r, want);
}

/// The fields of a bulk INFO reply, `field:value` per line.
fn info_value(reply: &str, field: &str) -> String {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {reply:?}"))
        .to_string()
}

/// An unlocked transaction over many co-hosted shards (every key on its
/// own shard) counts every change: the dirty counter each lent shard
/// publishes after its job (INFO's rdb_changes_since_last_save), at once.
#[test]
fn an_unlocked_mset_over_many_shards_counts_every_change() {
    let n = 16;
    let mut t = Cluster::new(n);
    let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "d")).collect();
    let c = t.connect(5);
    let before = info_value(
        &t.call(c, &["INFO", "persistence"]),
        "rdb_changes_since_last_save",
    );
    let mut mset = vec!["MSET"];
    for k in &keys {
        mset.extend([k.as_str(), "v"]);
    }
    // The INFO goes in the same pipeline: it runs in the turn that ran the
    // MSET, before any lent shard takes a turn of its own.
    t.send(c, &mset);
    t.send(c, &["INFO", "persistence"]);
    assert_eq!(t.reply(c).0, "+OK\r\n");
    let after = info_value(&t.reply(c).0, "rdb_changes_since_last_save");
    let changed = after.parse::<u64>().unwrap() - before.parse::<u64>().unwrap();
    assert_eq!(changed, n as u64);
    assert_eq!(t.call(c, &["DBSIZE"]), format!(":{n}\r\n"));
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// An unlocked transaction visits each co-hosted shard once: one pin (a
/// hub's seat lock) per shard for its idle check and all its jobs, no lend
/// per call (it took a pin and two lends per shard: the idle check's and
/// the job's).
#[test]
fn an_unlocked_mset_pins_each_shard_once_and_lends_none() {
    let n = 8;
    let mut t = Cluster::new(n);
    let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "p")).collect();
    let c = t.connect(3);
    let mut mset = vec!["MSET"];
    for k in &keys {
        mset.extend([k.as_str(), "v"]);
    }
    let (lends, pins) = (t.lends, t.pins);
    assert_eq!(t.call(c, &mset), "+OK\r\n");
    assert_eq!(t.pins - pins, n - 1);
    assert_eq!(t.lends - lends, 0);
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(|k| k.as_str()));
    assert_eq!(
        t.call(c, &mget),
        format!("*{n}\r\n{}", "$1\r\nv\r\n".repeat(n))
    );
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// A client tracking keys on many shards is sent an invalidation for each
/// of them when an unlocked transaction (MSET over co-hosted shards)
/// writes them, and none for its own writes under NOLOOP: each lent
/// shard's job tags its changes with the writer.
#[test]
fn an_unlocked_mset_invalidates_tracked_keys_on_every_shard() {
    let n = 8;
    let mut t = Cluster::new(n);
    let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "t")).collect();
    let (sub, reader, writer) = (t.connect(1), t.connect(1), t.connect(6));
    let id = t.call(sub, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim_end();
    assert_eq!(
        t.call(sub, &["SUBSCRIBE", "__redis__:invalidate"]),
        "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n"
    );
    assert_eq!(
        t.call(
            reader,
            &["CLIENT", "TRACKING", "ON", "REDIRECT", id, "NOLOOP"]
        ),
        "+OK\r\n"
    );
    let mut mset = vec!["MSET"];
    for k in &keys {
        mset.extend([k.as_str(), "v"]);
    }
    // The reader's own MSET first (NOLOOP: no invalidation), then the
    // writer's.
    for by in [reader, writer] {
        for k in &keys {
            let r = t.call(reader, &["GET", k]);
            assert!(r == "$-1\r\n" || r == "$1\r\nv\r\n", "{r:?}");
        }
        assert_eq!(t.call(by, &mset), "+OK\r\n");
    }
    let mut invalidated = Vec::new();
    for _ in 0..n {
        let (r, _) = t.reply(sub);
        let prefix = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n";
        let body = r.strip_prefix(prefix).unwrap_or_else(|| panic!("{r:?}"));
        invalidated.push(body.split("\r\n").nth(1).unwrap().to_string());
    }
    invalidated.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(invalidated, want);
    for _ in 0..5 {
        t.round();
    }
    assert_eq!(t.try_reply(sub), None, "the reader's own MSET invalidated");
}

/// Clients blocked on lists of several co-hosted shards are served by
/// unlocked transactions whose jobs run on those shards from another
/// worker's coordinator (the waiters are the shard's, not the home's).
#[test]
fn unlocked_moves_serve_waiters_on_many_shards() {
    let n = 8;
    let mut t = Cluster::new(n);
    let src = key_on(0, n, "s");
    let dsts: Vec<String> = (1..n).map(|s| key_on(s, n, "w")).collect();
    let waiters: Vec<usize> = (1..n).map(|s| t.connect((s + 3) % n)).collect();
    let mover = t.connect(0);
    for (w, d) in waiters.iter().zip(&dsts) {
        t.send(*w, &["BLPOP", d, "0"]);
    }
    for _ in 0..5 {
        t.round();
    }
    let items: Vec<String> = (1..n).map(|i| format!("x{i}")).collect();
    let mut push = vec!["RPUSH", src.as_str()];
    push.extend(items.iter().map(String::as_str));
    assert_eq!(t.call(mover, &push), format!(":{}\r\n", n - 1));
    for (i, d) in dsts.iter().enumerate() {
        assert_eq!(
            t.call(mover, &["LMOVE", &src, d, "LEFT", "RIGHT"]),
            format!("$2\r\n{}\r\n", items[i])
        );
        // Served by the lent shard's job itself: its reply is out before
        // any round after the mover's (the shard's own next turn would
        // have served it a round later for some of the homes).
        let (r, rounds) = t.reply(waiters[i]);
        assert_eq!(rounds, 0, "waiter {i} served late");
        assert_eq!(
            r,
            format!("*2\r\n${}\r\n{d}\r\n$2\r\n{}\r\n", d.len(), items[i])
        );
        assert_eq!(t.call(mover, &["EXISTS", d]), ":0\r\n");
    }
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// Scripts run in place (`in_place`) so far, on every worker.
fn in_place_runs(t: &Cluster) -> u64 {
    t.workers.iter().map(|w| w.core.scripts_in_place).sum()
}

/// A script whose keys span lent shards runs in place: in the turn that
/// read it, no lock taken, its undeclared keys of other lent shards too;
/// a call whose keys span shards (LMOVE) is taken back and run again on
/// copies, with the same result.
#[test]
fn a_script_across_lent_shards_runs_in_place() {
    let n = 8;
    let mut t = Cluster::new(n);
    let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "e")).collect();
    let c = t.connect(3);
    let incr_all = "for i = 1, #KEYS do redis.call('INCR', KEYS[i]) end return #KEYS";
    let mut eval = vec!["EVAL", incr_all, "8"];
    eval.extend(keys.iter().map(String::as_str));
    t.send(c, &eval);
    assert_eq!(t.reply(c), (":8\r\n".into(), 1));
    assert_eq!(in_place_runs(&t), 1);
    // Two declared, eight touched (ARGV).
    let incr_argv = "for i = 1, #ARGV do redis.call('INCR', ARGV[i]) end return #ARGV";
    let mut eval = vec!["EVAL", incr_argv, "2", &keys[1], &keys[6]];
    eval.extend(keys.iter().map(String::as_str));
    t.send(c, &eval);
    assert_eq!(t.reply(c), (":8\r\n".into(), 1));
    assert_eq!(in_place_runs(&t), 2);
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    assert_eq!(
        t.call(c, &mget),
        format!("*{n}\r\n{}", "$1\r\n2\r\n".repeat(n))
    );
    // A first write, then a call over two shards: taken back, run on copies.
    let (l0, l1) = (key_on(0, n, "list"), key_on(5, n, "list"));
    assert_eq!(t.call(c, &["RPUSH", &l0, "a", "b"]), ":2\r\n");
    let mv =
        "redis.call('INCR', KEYS[3]) return redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')";
    assert_eq!(
        t.call(c, &["EVAL", mv, "3", &l0, &l1, &keys[2]]),
        "$1\r\na\r\n"
    );
    assert_eq!(in_place_runs(&t), 2);
    assert_eq!(t.call(c, &["GET", &keys[2]]), "$1\r\n3\r\n");
    assert_eq!(t.call(c, &["LRANGE", &l1, "0", "-1"]), "*1\r\n$1\r\na\r\n");
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// Scripts in place meeting transactions that hold locks across rounds
/// (mailed: their connection had a request out first): a script waits for
/// the locks (it runs on copies then), and every read of the keys, by
/// MGET or by a script, sees every write whole. Fails if a script ran in
/// place on a shard a transaction holds.
#[test]
fn scripts_in_place_and_locked_transactions_stay_isolated() {
    let set_all = "for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[1]) end return 1";
    let get_all = "local r = {} for i = 1, #KEYS do r[i] = redis.call('GET', KEYS[i]) end return r";
    for n in [2, 3, 5] {
        let mut t = Cluster::new(n);
        let keys: Vec<String> = (0..n).map(|s| key_on(s, n, "j")).collect();
        let clients: Vec<usize> = (0..2 * n).map(|i| t.connect(i % n)).collect();
        let nkeys = n.to_string();
        let mut expect = vec![0usize; clients.len()];
        for step in 0..60usize {
            for (i, &c) in clients.iter().enumerate() {
                let v = format!("{}", step * 100 + i);
                // Every other step a plain command on another shard goes
                // first: what follows waits for it, and a transaction then
                // goes by the mailbox, holding its locks across rounds.
                if (step + i) % 2 == 0 {
                    t.send(c, &["GET", &keys[(i + 1) % n]]);
                    expect[i] += 1;
                }
                if (step + i) % 3 == 0 {
                    let mut mset = vec!["MSET"];
                    for k in &keys {
                        mset.extend([k.as_str(), v.as_str()]);
                    }
                    t.send(c, &mset);
                } else {
                    let mut eval = vec!["EVAL", set_all, nkeys.as_str()];
                    eval.extend(keys.iter().map(String::as_str));
                    eval.push(&v);
                    t.send(c, &eval);
                }
                let mut read = if (step + i) % 2 == 0 {
                    vec!["MGET"]
                } else {
                    vec!["EVAL", get_all, nkeys.as_str()]
                };
                read.extend(keys.iter().map(String::as_str));
                t.send(c, &read);
                expect[i] += 2;
            }
            for _ in 0..(step % 3) {
                t.round();
            }
            if step % 3 != 2 {
                continue;
            }
            drain_whole(&mut t, &clients, &mut expect, n, "write");
        }
        assert!(in_place_runs(&t) > 0, "n {n}: no script ran in place");
        assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
    }
}

/// A script in place that pushes to a list a client blocks on, on a lent
/// shard or the home one: the waiter is served once, after the script.
#[test]
fn a_script_in_place_serves_a_blocked_pop() {
    let n = 3;
    for home in [0, 2] {
        let mut t = Cluster::new(n);
        let (src, dst) = (key_on(1, n, "s"), key_on(2, n, "d"));
        let waiter = t.connect(2);
        let mover = t.connect(home);
        t.send(waiter, &["BLPOP", &dst, "0"]);
        for _ in 0..5 {
            t.round();
        }
        let push = "redis.call('RPUSH', KEYS[2], 'a', 'b') redis.call('INCR', KEYS[1]) \
                    return redis.call('LLEN', KEYS[2])";
        assert_eq!(t.call(mover, &["EVAL", push, "2", &src, &dst]), ":2\r\n");
        assert_eq!(in_place_runs(&t), 1, "home {home}");
        let (r, _) = t.reply(waiter);
        assert_eq!(r, format!("*2\r\n${}\r\n{dst}\r\n$1\r\na\r\n", dst.len()));
        assert_eq!(
            t.call(mover, &["LRANGE", &dst, "0", "-1"]),
            "*1\r\n$1\r\nb\r\n"
        );
        assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
    }
}

/// A key a client tracks, written by a script in place on a lent shard:
/// the tracker's invalidation is sent, as for any write.
#[test]
fn a_script_in_place_invalidates_tracked_keys() {
    let n = 3;
    let mut t = Cluster::new(n);
    let (a, b) = (key_on(0, n, "ta"), key_on(1, n, "tb"));
    let sink = t.connect(2);
    let tracker = t.connect(2);
    let mover = t.connect(0);
    let id = t.call(sink, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim_end();
    assert_eq!(
        t.call(sink, &["SUBSCRIBE", "__redis__:invalidate"]),
        "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n"
    );
    assert_eq!(
        t.call(tracker, &["CLIENT", "TRACKING", "ON", "REDIRECT", id]),
        "+OK\r\n"
    );
    assert_eq!(t.call(tracker, &["GET", &b]), "$-1\r\n");
    let incr = "redis.call('INCR', KEYS[1]) return redis.call('INCR', KEYS[2])";
    assert_eq!(t.call(mover, &["EVAL", incr, "2", &a, &b]), ":1\r\n");
    assert_eq!(in_place_runs(&t), 1);
    let (r, _) = t.reply(sink);
    assert_eq!(
        r,
        format!(
            "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n${}\r\n{b}\r\n",
            b.len()
        )
    );
}

/// Reads every reply `expect` counts for each of `clients`: each array of
/// `n` values (an MGET, or a script reading the `n` keys) must hold one
/// value throughout, never half of a `what` seen.
fn drain_whole(t: &mut Cluster, clients: &[usize], expect: &mut [usize], n: usize, what: &str) {
    for (i, &c) in clients.iter().enumerate() {
        while expect[i] > 0 {
            let (r, _) = t.reply(c);
            expect[i] -= 1;
            if let Some(body) = r.strip_prefix(&format!("*{n}\r\n")) {
                let vals: Vec<&str> = body.split("\r\n").skip(1).step_by(2).collect();
                assert!(
                    vals.windows(2).all(|w| w[0] == w[1]),
                    "n {n}: half a {what} seen: {r:?}"
                );
            }
        }
    }
}

/// A one-shard script for a lent shard runs there by a call (see
/// `in_place::by_call`): its reply is out after the round that read it,
/// even when the key's worker took its turn before the caller's (a hop
/// would wait for that worker's next turn); one that touches a key of
/// another shard it did not declare is run again over both, in place,
/// still in that round, with every write in.
#[test]
fn a_one_shard_script_for_a_lent_shard_runs_by_a_call() {
    let n = 4;
    let mut t = Cluster::new(n);
    let c = t.connect(3);
    let k = key_on(1, n, "s");
    let incr = "redis.call('INCR', KEYS[1]) return redis.call('GET', KEYS[1])";
    t.send(c, &["EVAL", incr, "1", &k]);
    assert_eq!(t.reply(c), ("$1\r\n1\r\n".into(), 1));
    t.send(c, &["EVAL", incr, "1", &k]);
    assert_eq!(t.reply(c), ("$1\r\n2\r\n".into(), 1));
    assert_eq!(in_place_runs(&t), 0);
    // Undeclared: a key of shard 2, then one of the caller's own.
    let widen = "redis.call('SET', KEYS[1], 'w') return redis.call('INCR', ARGV[1])";
    for (i, shard) in [2, 3].into_iter().enumerate() {
        let u = key_on(shard, n, "u");
        t.send(c, &["EVAL", widen, "1", &k, &u]);
        assert_eq!(t.reply(c), (":1\r\n".into(), 1), "undeclared on {shard}");
        assert_eq!(in_place_runs(&t), i as u64 + 1);
        assert_eq!(t.call(c, &["GET", &u]), "$1\r\n1\r\n");
    }
    assert_eq!(t.call(c, &["GET", &k]), "$1\r\nw\r\n");
    // Not lent (workers on threads of their own): a hop, a round later.
    t.lend = false;
    t.send(c, &["EVAL", incr, "1", &key_on(1, n, "z")]);
    assert_eq!(t.reply(c), ("$1\r\n1\r\n".into(), 2));
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// First runs abandoned for undeclared keys so far, on every worker.
fn strayed_runs(t: &Cluster) -> u64 {
    t.workers.iter().map(|w| w.core.scripts_strayed).sum()
}

/// A script that strayed once starts in place at its later calls (on
/// lent shards): no first run abandoned at the stray key, the same
/// replies. A flush forgets it; shards not lent decline and the call runs
/// as before. Fails without `in_place::STRAYS` (every call strays).
#[test]
fn a_script_that_strayed_starts_in_place_next_time() {
    let n = 4;
    let mut t = Cluster::new(n);
    let c = t.connect(1);
    let body = "redis.call('INCR', KEYS[1]) return redis.call('INCR', ARGV[1])";
    let load = |t: &mut Cluster| {
        let r = t.call(c, &["SCRIPT", "LOAD", body]);
        r.split("\r\n").nth(1).unwrap().to_string()
    };
    let sha = load(&mut t);
    let (k, u) = (key_on(1, n, "sk"), key_on(3, n, "su"));
    for i in 1..=4 {
        t.send(c, &["EVALSHA", &sha, "1", &k, &u]);
        assert_eq!(t.reply(c).0, format!(":{i}\r\n"), "call {i}");
        assert_eq!(strayed_runs(&t), 1, "call {i}");
        assert_eq!(in_place_runs(&t), i);
    }
    // Another declared shard, the same script: in place too.
    let k2 = key_on(2, n, "sk");
    assert_eq!(t.call(c, &["EVALSHA", &sha, "1", &k2, &u]), ":5\r\n");
    assert_eq!((strayed_runs(&t), in_place_runs(&t)), (1, 5));
    // A flush forgets what the thread learned.
    assert_eq!(t.call(c, &["SCRIPT", "FLUSH"]), "+OK\r\n");
    let sha = load(&mut t);
    assert_eq!(t.call(c, &["EVALSHA", &sha, "1", &k, &u]), ":6\r\n");
    assert_eq!((strayed_runs(&t), in_place_runs(&t)), (2, 6));
    assert_eq!(t.call(c, &["EVALSHA", &sha, "1", &k, &u]), ":7\r\n");
    assert_eq!((strayed_runs(&t), in_place_runs(&t)), (2, 7));
    // Not lent: its first run strays (in place on the caller's shard, or,
    // declined there, where its keys are), and it runs again on copies.
    t.lend = false;
    t.send(c, &["EVALSHA", &sha, "1", &k, &u]);
    assert_eq!(t.reply(c).0, ":8\r\n");
    assert_eq!((strayed_runs(&t), in_place_runs(&t)), (3, 7));
    t.send(c, &["EVALSHA", &sha, "1", &k2, &u]);
    assert_eq!(t.reply(c).0, ":9\r\n");
    assert_eq!((strayed_runs(&t), in_place_runs(&t)), (4, 7));
    assert_eq!(
        t.call(c, &["MGET", &k, &k2, &u]),
        "*3\r\n$1\r\n7\r\n$1\r\n2\r\n$1\r\n9\r\n"
    );
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// `cmdstat_<name>`'s calls in INFO commandstats (0 if absent).
fn command_calls(t: &mut Cluster, c: usize, name: &str) -> u64 {
    let info = t.call(c, &["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{name}:calls=");
    info.split("\r\n")
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|l| l.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A one-shard script for a lent shard that publishes (no take-back
/// undoes that) is taken back just before, and runs as a hop (a round
/// later): it publishes once, and its INCR counts once in commandstats
/// (the taken-back run leaves no trace: `script::traces`). From then on
/// its calls from another loop hop at once, and once a visit found the
/// mark of an EVALSHA's script or a function, the thread remembers it (no
/// visit). Run on the key's own loop, it hops nowhere; a script that does
/// not publish still runs by a call.
#[test]
fn a_script_that_publishes_hops_rather_than_run_by_a_call() {
    let n = 4;
    let mut t = Cluster::new(n);
    let (sub, c, own) = (t.connect(0), t.connect(3), t.connect(1));
    assert_eq!(
        t.call(sub, &["SUBSCRIBE", "hops"]),
        "*3\r\n$9\r\nsubscribe\r\n$4\r\nhops\r\n:1\r\n"
    );
    let k = key_on(1, n, "p");
    // (A body of its own: the script cache is the process's.)
    let publish = "redis.call('INCR', KEYS[1]) redis.call('PUBLISH', 'hops', 'm') \
                   return redis.call('GET', KEYS[1]) -- hops";
    let message = "*3\r\n$7\r\nmessage\r\n$4\r\nhops\r\n$1\r\nm\r\n";
    let mut incrs = command_calls(&mut t, c, "incr");
    for (i, (by, rounds, ran)) in [(c, 2, 1), (c, 2, 1), (own, 1, 1), (c, 2, 1)]
        .into_iter()
        .enumerate()
    {
        t.send(by, &["EVAL", publish, "1", &k]);
        let want = format!("$1\r\n{}\r\n", i + 1);
        assert_eq!(t.reply(by), (want, rounds), "call {i}");
        assert_eq!(t.reply(sub).0, message, "call {i}");
        assert_eq!(t.try_reply(sub), None, "call {i} published twice");
        let now = command_calls(&mut t, c, "incr");
        assert_eq!(now - incrs, ran, "call {i}");
        incrs = now;
    }
    // By SHA-1: the visit that finds the mark (an EVAL's body is too long
    // to remember) makes the thread remember it; later calls hop without.
    let sha = t.call(c, &["SCRIPT", "LOAD", publish]);
    let sha = sha.split("\r\n").nth(1).unwrap().to_ascii_uppercase();
    let mut evalsha = resp::OwnedArgs::default();
    for a in ["EVALSHA", sha.as_str(), "1", k.as_str()] {
        evalsha.push(a.as_bytes());
    }
    let ops = t.workers[0].core.server.ops;
    assert!(!super::in_place::known_to_hop(ops, evalsha.args()));
    for i in 5..7 {
        t.send(c, &["EVALSHA", &sha, "1", &k]);
        assert_eq!(t.reply(c), (format!("$1\r\n{i}\r\n"), 2));
        assert_eq!(t.reply(sub).0, message);
        assert!(super::in_place::known_to_hop(ops, evalsha.args()));
        let now = command_calls(&mut t, c, "incr");
        assert_eq!(now - incrs, 1, "EVALSHA {i}");
        incrs = now;
    }
    // A FUNCTION change (as a SCRIPT FLUSH) forgets what was remembered:
    // the scripts and functions gone or replaced start unmarked.
    t.call(c, &["FUNCTION", "FLUSH"]);
    assert!(!super::in_place::known_to_hop(ops, evalsha.args()));
    t.send(c, &["EVALSHA", &sha, "1", &k]);
    assert_eq!(t.reply(c), ("$1\r\n7\r\n".into(), 2));
    assert_eq!(t.reply(sub).0, message);
    assert!(
        super::in_place::known_to_hop(ops, evalsha.args()),
        "found again"
    );
    incrs = command_calls(&mut t, c, "incr");
    // A function alike (its mark is the function's).
    let lib = "#!lua name=hopslib\nredis.register_function('hops_fn', function(keys) \
               redis.call('INCR', keys[1]) redis.call('PUBLISH', 'hops', 'm') \
               return redis.call('GET', keys[1]) end)";
    assert_eq!(t.call(c, &["FUNCTION", "LOAD", lib]), "$7\r\nhopslib\r\n");
    for (i, ran) in [(8, 1), (9, 1)] {
        t.send(c, &["FCALL", "hops_fn", "1", &k]);
        assert_eq!(t.reply(c), (format!("$1\r\n{i}\r\n"), 2));
        assert_eq!(t.reply(sub).0, message);
        assert_eq!(t.try_reply(sub), None);
        let now = command_calls(&mut t, c, "incr");
        assert_eq!(now - incrs, ran, "FCALL {i}");
        incrs = now;
    }
    let incr = "redis.call('INCR', KEYS[1]) return redis.call('GET', KEYS[1]) -- by a call";
    t.send(c, &["EVAL", incr, "1", &k]);
    assert_eq!(t.reply(c), ("$2\r\n10\r\n".into(), 1));
    assert!(t.workers.iter().all(|w| !w.core.locks.any_held()));
}

/// What a visit to a co-hosted worker reads (`cohost`: the idle check,
/// the job's prologue and epilogue) stays at the front of its `Core`,
/// next to its shard's own front (see `Core`): a field added above them,
/// or the `repr(C)` dropped, fails here.
#[test]
fn a_visit_reads_the_front_of_a_worker() {
    use std::mem::offset_of;
    let hot = [
        offset_of!(super::Core, id),
        offset_of!(super::Core, server),
        offset_of!(super::Core, cfg_gen),
        offset_of!(super::Core, aof),
        offset_of!(super::Core, track_on),
        offset_of!(super::Core, maybe_busy),
        offset_of!(super::Core, may_wait),
        offset_of!(super::Core, lock_blocked),
        offset_of!(super::Core, deferred),
        offset_of!(super::Core, locks),
        offset_of!(super::Core, waiters),
        offset_of!(super::Core, shard),
    ];
    assert!(hot.iter().all(|&o| o < 5 * 64), "{hot:?}");
    // A visit to a shard known free reads one line of it: the flags and
    // what its prologue reads (the config generation, tracking).
    let first = [
        offset_of!(super::Core, cfg_gen) + 8,
        offset_of!(super::Core, track_on) + 1,
        offset_of!(super::Core, maybe_busy) + 1,
        offset_of!(super::Core, may_wait) + 1,
    ];
    assert!(first.iter().all(|&e| e <= 64), "{first:?}");
}

/// A visit's idle check reads one line while `Core::maybe_busy` is clear
/// (see the field): whatever makes a shard busy for an unlocked
/// transaction sets it (a job by the normal path, its lock, a deferred
/// batch), and only a full look at the lists clears it, so a shard
/// holding a lock is never taken for free, and the next unlocked
/// transaction after the release finds it free again.
#[test]
fn a_shard_is_known_free_only_after_a_full_look() {
    let n = 3;
    let mut t = Cluster::new(n);
    let (a, b) = (key_on(1, n, "x"), key_on(2, n, "y"));
    let tx = t.connect(0);
    let rd = t.connect(0);
    let busy = |t: &Cluster| [1, 2].map(|s| t.workers[s].core.maybe_busy);
    // Unlocked (lent, every shard free): the full look clears the flags.
    assert_eq!(t.call(rd, &["MSET", &a, "1", &b, "1"]), "+OK\r\n");
    assert_eq!(busy(&t), [false, false]);
    assert_eq!(t.pins, 2, "both shards pinned: ran unlocked");
    // Through the mailbox: locked jobs (`start_job`) set them.
    t.lend = false;
    assert_eq!(t.call(rd, &["MSET", &a, "2", &b, "2"]), "+OK\r\n");
    assert_eq!(busy(&t), [true, true]);
    t.lend = true;
    assert_eq!(t.call(rd, &["MSET", &a, "3", &b, "3"]), "+OK\r\n");
    assert_eq!(busy(&t), [false, false]);
    // A transaction holding its locks across rounds: an MSET over the
    // same shards meanwhile is not run unlocked (it would run before the
    // transaction and be overwritten by it); it waits for the release.
    t.lend = false;
    exec_until_shard_1_locked(&mut t, tx, [&a, &b], "tx");
    assert!(t.workers[1].core.maybe_busy);
    t.lend = true;
    let pins = t.pins;
    t.send(rd, &["MSET", &a, "4", &b, "4"]);
    assert_eq!(t.reply(tx).0, "*2\r\n+OK\r\n+OK\r\n");
    assert_eq!(t.reply(rd).0, "+OK\r\n");
    assert_eq!(
        t.call(rd, &["MGET", &a, &b]),
        "*2\r\n$1\r\n4\r\n$1\r\n4\r\n"
    );
    assert!(t.pins > pins);
    assert_eq!(busy(&t), [false, false], "free again after the release");
}

/// Each worker starts its thread's allocations with a block of its own
/// number of cache lines (`Worker::color`), so that what it allocates
/// next (itself, its lists) is not at the same address modulo 4 KiB as
/// every other worker's, in the same few L1 sets.
#[test]
fn workers_are_spread_over_cache_sets() {
    let t = Cluster::new(3);
    let lines: Vec<usize> = t
        .workers
        .iter()
        .map(|w| w.color.len() / super::COLOR_LINE)
        .collect();
    assert_eq!(lines, [0, 1, 2]);
    assert_eq!(super::COLOR_LINE * super::COLORS, 4096);
}

/// What a hub's round reads of each loop it holds (`Worker::due_in`)
/// lies together (see `Worker`): the lists that make a loop due end
/// `Core` on three cache lines, just before the mailbox (whose inbound
/// check leads it), and the timers and `Conns::resume` follow `Core` on
/// about one more.
#[test]
fn a_round_reads_the_end_of_a_worker() {
    use std::mem::{offset_of, size_of};
    let held = offset_of!(super::Core, held);
    let mailbox = offset_of!(super::Core, mailbox);
    assert!(offset_of!(super::Core, repl_waits) + 24 <= mailbox);
    assert!(mailbox - held <= 3 * 64, "{held} {mailbox}");
    assert_eq!(offset_of!(super::Worker, core), 0);
    let after = size_of::<super::Core>();
    let ends = [
        offset_of!(super::Worker, next_cron) + 16,
        offset_of!(super::Worker, spilled) + 1,
        offset_of!(super::Worker, save_wait) + 16,
        offset_of!(super::Worker, conns) + offset_of!(super::Conns, resume) + 24,
    ];
    assert!(
        ends.iter().all(|&e| e > after && e - after <= 96),
        "{after} {ends:?}"
    );
}

/// The errors a script's calls count inside EXEC (the script runs on
/// gathered copies, in a step of EXEC's coordinator) reach INFO
/// errorstats even when the connection's loop is on another thread by the
/// coordinator's next step, as consolidation moves loops. They were
/// counted in the thread's Lua VM statistics and drained into the loop's
/// only when EXEC ended: on the new thread, whose VM had none of them, so
/// they were lost for good (`tests/script_stale.rs` saw errorstat_ERR one
/// short, 1 run in ~200 under load). Simulated here: between rounds the
/// VM's statistics are thrown away, as the statistics of a thread the
/// loop left.
#[test]
fn a_scripts_errors_in_exec_count_when_the_loop_changes_thread() {
    for lend in [true, false] {
        let mut t = Cluster::new(2);
        t.lend = lend;
        let c = t.connect(0);
        let (a, b) = (key_on(0, 2, "a"), key_on(1, 2, "b"));
        assert_eq!(t.call(c, &["SET", &a, "1"]), "+OK\r\n");
        assert_eq!(t.call(c, &["SET", &b, "x"]), "+OK\r\n");
        assert_eq!(t.call(c, &["CONFIG", "RESETSTAT"]), "+OK\r\n");
        assert_eq!(t.call(c, &["MULTI"]), "+OK\r\n");
        let script = "redis.pcall('incr', KEYS[2]); return redis.call('incr', KEYS[1])";
        assert_eq!(t.call(c, &["EVAL", script, "2", &a, &b]), "+QUEUED\r\n");
        assert_eq!(t.call(c, &["INCR", &a]), "+QUEUED\r\n");
        t.send(c, &["EXEC"]);
        let mut reply = None;
        for _ in 0..super::testing::ROUNDS_MAX {
            reply = t.try_reply(c);
            if reply.is_some() {
                break;
            }
            drop(commands::script::vm::take_stats());
            t.round();
        }
        assert_eq!(reply.as_deref(), Some("*2\r\n:2\r\n:3\r\n"), "lend {lend}");
        let info = t.call(c, &["INFO", "errorstats"]);
        assert_eq!(info_value(&info, "errorstat_ERR"), "count=1", "lend {lend}");
    }
}

/// A role change reaches every shard at its loop's next turn through the
/// configuration generation it bumps (`ServerShared::set_role`), which is
/// all a turn reads of it: a replica's shards keep keys past their
/// deadline and refuse scripts' writes (`replica-read-only`); back to
/// master, neither.
#[test]
fn a_role_change_reaches_every_shard_at_its_next_turn() {
    let mut t = Cluster::new(2);
    let server = t.workers[0].core.server.clone();
    let roles = |t: &Cluster| -> Vec<(engine::Expiry, bool)> {
        let shard = |w: &super::Worker| (w.core.shard.expiry, w.core.shard.read_only_replica);
        t.workers.iter().map(shard).collect()
    };
    assert_eq!(roles(&t), [(engine::Expiry::Delete, false); 2]);
    assert!(commands::replica::set_master(&server, "127.0.0.1", 1));
    t.round();
    assert_eq!(roles(&t), [(engine::Expiry::Keep, true); 2]);
    assert!(commands::replica::unset_master(&server));
    t.round();
    assert_eq!(roles(&t), [(engine::Expiry::Delete, false); 2]);
}

/// INFO `blocked_clients` of the server of client `c` of `t`.
fn blocked_clients(t: &mut Cluster, c: usize) -> String {
    let info = t.call(c, &["INFO", "clients"]);
    let line = info
        .split("\r\n")
        .find(|l| l.starts_with("blocked_clients:"));
    line.unwrap_or_else(|| panic!("no blocked_clients in {info}"))["blocked_clients:".len()..]
        .to_string()
}

/// A server counts its own blocked clients (`ops.blocked_clients`), not
/// the process's: another server in the process (tests build several)
/// with a client blocked in BLPOP still reports none.
#[test]
fn blocked_clients_are_counted_by_their_own_server() {
    let (mut a, mut b) = (Cluster::new(2), Cluster::new(2));
    let k = key_on(1, 2, "q");
    let (waiter, a_info) = (a.connect(1), a.connect(0));
    a.send(waiter, &["BLPOP", &k, "0"]);
    let mut rounds = 0;
    while blocked_clients(&mut a, a_info) != "1" {
        a.round();
        rounds += 1;
        assert!(rounds < 100, "the BLPOP did not block");
    }
    let b_info = b.connect(0);
    assert_eq!(blocked_clients(&mut b, b_info), "0");
    assert_eq!(a.call(a_info, &["RPUSH", &k, "x"]), ":1\r\n");
    let (r, _) = a.reply(waiter);
    assert_eq!(r, format!("*2\r\n${}\r\n{k}\r\n$1\r\nx\r\n", k.len()));
    assert_eq!(blocked_clients(&mut a, a_info), "0");
}
