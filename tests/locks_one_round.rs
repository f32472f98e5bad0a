//! Transactions that ask for their locks in one round (`commands::tx`,
//! "One round"), under real concurrency: 32 shards, each on its own thread
//! (`--shard-consolidation no`), on however few cores the machine has, so
//! one-round requests, refusals and the fallback to ordered locking all
//! happen while other transactions hold and queue locks on the same keys.
//!
//! What must hold, as in Redis: a multi-shard command or a MULTI/EXEC is
//! seen whole or not at all (MGET of keys an MSET writes together is
//! uniform; a bank's total never changes; DBSIZE and KEYS, alone or
//! inside MULTI, count a batch of keys whole), and nothing deadlocks (every workload
//! finishes within [`DEADLINE`]).
//!
//! Validate the tests against Redis (they must pass there too):
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test locks_one_round`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use common::{keys_across_shards, testing_real_redis, Server};

const SHARDS: usize = 32;
/// Bound on a whole workload; only a deadlock gets near it.
const DEADLINE: Duration = Duration::from_secs(120);

fn start() -> Server {
    if testing_real_redis() {
        return Server::tessera(&[]);
    }
    let n = SHARDS.to_string();
    Server::tessera(&["--shards", &n, "--shard-consolidation", "no"])
}

/// Runs each worker on its own thread; panics with the first failure, or
/// if they are not all done within [`DEADLINE`].
fn run(workers: Vec<Box<dyn FnOnce() + Send>>) {
    let (tx, rx) = mpsc::channel();
    let n = workers.len();
    for (i, f) in workers.into_iter().enumerate() {
        let tx = tx.clone();
        thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send((
                i,
                r.err().map(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                }),
            ));
        });
    }
    for _ in 0..n {
        match rx.recv_timeout(DEADLINE) {
            Ok((_, None)) => {}
            Ok((i, Some(msg))) => panic!("worker {i} failed: {msg}"),
            Err(_) => panic!("workload not done within {DEADLINE:?}: a deadlock?"),
        }
    }
}

/// Counts running writers down when dropped (also on a panic).
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A small deterministic PRNG (xorshift64*), one per worker.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

/// Writers MSET 20 keys on 20 shards to one token per call; readers MGET
/// random subsets of them (three keys or more: the one-round path) in
/// random order while the writers run: every reply is uniform.
#[test]
fn mset_mget_of_related_keys() {
    const WRITERS: usize = 3;
    const READERS: usize = 3;
    const ITERATIONS: usize = 300;
    let srv = start();
    let keys = Arc::new(keys_across_shards("rel:", 20, SHARDS));
    let running = Arc::new(AtomicUsize::new(WRITERS));
    let mut workers: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for w in 0..WRITERS {
        let (keys, mut con, guard) = (keys.clone(), srv.conn(), Running(running.clone()));
        workers.push(Box::new(move || {
            let _guard = guard;
            for i in 0..ITERATIONS {
                let mut cmd = redis::cmd("MSET");
                // Each writer lists the keys from another start.
                for j in 0..keys.len() {
                    cmd.arg(&keys[(j + w * 7) % keys.len()])
                        .arg(format!("w{w}-{i}"));
                }
                let ok: String = cmd.query(&mut con).expect("MSET");
                assert_eq!(ok, "OK");
            }
        }));
    }
    for r in 0..READERS {
        let (keys, mut con, running) = (keys.clone(), srv.conn(), running.clone());
        workers.push(Box::new(move || {
            let mut rng = Rng(0x9E37_79B9 + r as u64);
            loop {
                let last = running.load(Ordering::SeqCst) == 0;
                let n = 3 + rng.below(keys.len() - 2);
                let subset: Vec<&String> = (0..n).map(|_| &keys[rng.below(keys.len())]).collect();
                let vals: Vec<Option<String>> = redis::cmd("MGET")
                    .arg(&subset)
                    .query(&mut con)
                    .expect("MGET");
                assert!(
                    vals.iter().all(|v| *v == vals[0]),
                    "MGET saw part of an MSET: {vals:?}"
                );
                if last {
                    break;
                }
            }
        }));
    }
    run(workers);
}

/// Transfers between accounts on 16 shards, each a MULTI/EXEC over three
/// of them (DECRBY one by 2, INCRBY two others by 1); auditors read every
/// account with MGET and inside MULTI: the total never changes.
#[test]
fn bank_transfers_keep_the_total() {
    const ACCOUNTS: usize = 16;
    const START: i64 = 1000;
    const TELLERS: usize = 3;
    const TRANSFERS: usize = 300;
    let srv = start();
    let accounts = Arc::new(keys_across_shards("acct:", ACCOUNTS, SHARDS));
    let mut con = srv.conn();
    for a in accounts.iter() {
        let _: () = redis::cmd("SET")
            .arg(a)
            .arg(START)
            .query(&mut con)
            .expect("SET");
    }
    let total = START * ACCOUNTS as i64;
    let running = Arc::new(AtomicUsize::new(TELLERS));
    let mut workers: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for t in 0..TELLERS {
        let (accts, mut con, guard) = (accounts.clone(), srv.conn(), Running(running.clone()));
        workers.push(Box::new(move || {
            let _guard = guard;
            let mut rng = Rng(77 + t as u64);
            for _ in 0..TRANSFERS {
                let from = rng.below(ACCOUNTS);
                let a = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                let mut b = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                if b == a {
                    b = (a + 1) % ACCOUNTS;
                    if b == from {
                        b = (b + 1) % ACCOUNTS;
                    }
                }
                let (): () = redis::pipe()
                    .atomic()
                    .cmd("DECRBY")
                    .arg(&accts[from])
                    .arg(2)
                    .ignore()
                    .cmd("INCRBY")
                    .arg(&accts[a])
                    .arg(1)
                    .ignore()
                    .cmd("INCRBY")
                    .arg(&accts[b])
                    .arg(1)
                    .ignore()
                    .query(&mut con)
                    .expect("transfer");
            }
        }));
    }
    for r in 0..2 {
        let (accts, mut con, running) = (accounts.clone(), srv.conn(), running.clone());
        workers.push(Box::new(move || loop {
            let last = running.load(Ordering::SeqCst) == 0;
            let vals: Vec<i64> = if r == 0 {
                redis::cmd("MGET")
                    .arg(&accts[..])
                    .query(&mut con)
                    .expect("MGET")
            } else {
                let (v,): (Vec<i64>,) = redis::pipe()
                    .atomic()
                    .cmd("MGET")
                    .arg(&accts[..])
                    .query(&mut con)
                    .expect("MULTI MGET");
                v
            };
            assert_eq!(vals.iter().sum::<i64>(), total, "a transfer seen half-done");
            if last {
                break;
            }
        }));
    }
    run(workers);
}

/// Writers create ten keys on ten shards with one MSET and delete them
/// with one DEL, over and over; DBSIZE and KEYS, alone and inside MULTI,
/// see each writer's ten keys all or none.
#[test]
fn dbsize_and_keys_are_exact() {
    const WRITERS: usize = 2;
    const ITERATIONS: usize = 200;
    let srv = start();
    let running = Arc::new(AtomicUsize::new(WRITERS));
    let mut workers: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for w in 0..WRITERS {
        let keys = keys_across_shards(&format!("batch{w}:"), 10, SHARDS);
        let (mut con, guard) = (srv.conn(), Running(running.clone()));
        workers.push(Box::new(move || {
            let _guard = guard;
            for _ in 0..ITERATIONS {
                let mut cmd = redis::cmd("MSET");
                for k in &keys {
                    cmd.arg(k).arg(1);
                }
                let _: () = cmd.query(&mut con).expect("MSET");
                let n: usize = redis::cmd("DEL").arg(&keys).query(&mut con).expect("DEL");
                assert_eq!(n, 10);
            }
        }));
    }
    let (mut con, running2) = (srv.conn(), running.clone());
    workers.push(Box::new(move || loop {
        let last = running2.load(Ordering::SeqCst) == 0;
        let (n, keys): (usize, Vec<String>) = redis::pipe()
            .atomic()
            .cmd("DBSIZE")
            .cmd("KEYS")
            .arg("batch*")
            .query(&mut con)
            .expect("MULTI DBSIZE KEYS");
        assert_eq!(n % 10, 0, "DBSIZE in MULTI saw part of a batch: {n}");
        assert_eq!(keys.len(), n, "KEYS and DBSIZE in one MULTI: {keys:?}");
        let n: usize = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
        assert_eq!(n % 10, 0, "DBSIZE saw part of a batch: {n}");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("batch*")
            .query(&mut con)
            .expect("KEYS");
        assert_eq!(keys.len() % 10, 0, "KEYS saw part of a batch: {keys:?}");
        if last {
            break;
        }
    }));
    run(workers);
    // SCAN (no locks) finds nothing left either.
    let mut con = srv.conn();
    let n: usize = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).expect("KEYS");
    assert_eq!((n, keys.len()), (0, 0));
    let (cursor, page): (String, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(1000)
        .query(&mut con)
        .expect("SCAN");
    assert!(page.is_empty(), "SCAN found {page:?} (cursor {cursor})");
}
