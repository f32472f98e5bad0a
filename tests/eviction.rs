//! `maxmemory` and the eviction policies, with the real binary on several
//! shards: fill past the limit (or lower the limit under the data with
//! CONFIG SET, which must start evicting by itself), then check what was
//! evicted. Waits are bounded polls on INFO, never timing thresholds.

mod common;

use std::time::{Duration, Instant};

use common::{info_field, Layout, Server};
use redis::Connection;

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
const VALUE: usize = 1000;

fn used(c: &mut Connection) -> u64 {
    info_field(c, "memory", "used_memory").parse().unwrap()
}

/// Writes `n` keys `prefix{i}` of VALUE bytes, pipelined, with an
/// optional TTL in seconds.
fn fill(c: &mut Connection, prefix: &str, n: usize, ttl: Option<u64>) {
    let v = "x".repeat(VALUE);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut p = redis::pipe();
        for i in chunk {
            let k = format!("{prefix}{i}");
            match ttl {
                Some(t) => p.cmd("SET").arg(k).arg(&v).arg("EX").arg(t).ignore(),
                None => p.cmd("SET").arg(k).arg(&v).ignore(),
            };
        }
        p.query::<()>(c).unwrap();
    }
}

/// How many of `prefix{i}`, i in `range`, exist.
fn surviving(c: &mut Connection, prefix: &str, range: std::ops::Range<usize>) -> usize {
    let mut p = redis::pipe();
    for i in range {
        p.cmd("EXISTS").arg(format!("{prefix}{i}"));
    }
    let r: Vec<i64> = p.query(c).unwrap();
    r.iter().filter(|&&x| x == 1).count()
}

/// Sets maxmemory to `limit` and waits (bounded) until used memory is
/// under it. Only INFO is sent meanwhile: the shards evict on their own.
/// Then checks that eviction stopped near the limit, not far below it.
/// redis-server stops within a key of it (99.9 % here). Tessera's shards
/// each free a share of the excess from figures up to a tick old: quiet
/// runs stop at 0.94 and above, but with the suite's own parallel tests
/// and two busy loops beside it shrinks stopped at 0.83-0.84 (volatile and
/// random policies, 2 of 3 runs of the file), and a clean-clone CI run of
/// session 25 (the whole suite on 2 busy cores) stopped once at 0.742, so
/// the bound is two thirds: it catches a shard evicting far past its share
/// (the bug the LFU and LRU tests catch by hot keys lost), not the lag,
/// which is an open problem.
fn shrink_to(c: &mut Connection, limit: u64) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query::<()>(c)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut u = used(c);
    while u > limit {
        assert!(Instant::now() < deadline, "never got under {limit}");
        std::thread::sleep(Duration::from_millis(20));
        u = used(c);
    }
    assert!(
        u >= limit / 3 * 2,
        "evicted far past the limit: {u} used under a limit of {limit}"
    );
}

/// Lifts the limit once eviction got under it, so the checks that follow
/// (which allocate replies and buffers) do not evict more while they read.
fn lift_limit(c: &mut Connection) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query::<()>(c)
        .unwrap();
}

fn server(policy: &str, shards: &str) -> (Server, Connection) {
    let s = Server::tessera(&["--shards", shards, "--maxmemory-policy", policy]);
    let c = s.conn();
    (s, c)
}

fn dbsize(c: &mut Connection) -> usize {
    redis::cmd("DBSIZE").query(c).unwrap()
}

fn allkeys_lru_keeps_recently_read_keys_and_config_set_triggers_eviction(layout: Layout) {
    let s = layout.tessera(&["--maxmemory-policy", "allkeys-lru"]);
    let mut c = s.conn();
    fill(&mut c, "k", 20_000, None);
    // The LRU clock has Redis's 1 s resolution.
    std::thread::sleep(Duration::from_millis(2100));
    let mut p = redis::pipe();
    for i in 0..2_000 {
        p.cmd("GET").arg(format!("k{i}")).ignore();
    }
    p.query::<()>(&mut c).unwrap();
    let u = used(&mut c);
    shrink_to(&mut c, u / 2);
    lift_limit(&mut c);
    let left = dbsize(&mut c);
    assert!(left < 15_000, "{left} keys left");
    let hot = surviving(&mut c, "k", 0..2_000);
    assert!(hot >= 1_900, "only {hot} of 2000 recently read keys kept");
    // Every key gone was evicted and counted. Evictions may go on while
    // this reads (the GETs above allocate), so bracket DBSIZE between two
    // reads of the counter, which only grows.
    let evicted =
        |c: &mut Connection| -> usize { info_field(c, "stats", "evicted_keys").parse().unwrap() };
    let before = evicted(&mut c);
    let gone = 20_000 - dbsize(&mut c);
    let after = evicted(&mut c);
    assert!(
        before <= gone && gone <= after,
        "{before} <= {gone} <= {after}"
    );
}

fn allkeys_lfu_keeps_frequently_read_keys(layout: Layout) {
    let s = layout.tessera(&["--maxmemory-policy", "allkeys-lfu", "--lfu-decay-time", "0"]);
    let mut c = s.conn();
    fill(&mut c, "k", 20_000, None);
    let mut p = redis::pipe();
    for _ in 0..10 {
        for i in 0..2_000 {
            p.cmd("GET").arg(format!("k{i}")).ignore();
        }
    }
    p.query::<()>(&mut c).unwrap();
    let u = used(&mut c);
    shrink_to(&mut c, u / 2);
    lift_limit(&mut c);
    assert!(dbsize(&mut c) < 15_000);
    let hot = surviving(&mut c, "k", 0..2_000);
    // Evicting about half the keys at random would keep about 1,000 of
    // them; redis-server keeps all 2,000, and so did Tessera in 35 runs
    // over 2, 3 and 16 shards, consolidated or not, 25 of them beside
    // three busy loops on the 2 cores; a loaded CI run of the clean
    // clone kept 1,977 at 16 shards apart. Before each shard's share of
    // the excess followed its count of keys (it followed the allocator's
    // per-shard counters), one shard of 16 lost all its keys, hot ones
    // too: 1,692 kept, and 1,623 of 3 shards on a loaded CI run.
    assert!(hot >= 1_900, "only {hot} of 2000 frequently read keys kept");
}

/// A cache at its limit: new keys keep coming (40 batches of 1,000, each
/// about a tenth of the limit) while 1,000 keys are read between batches.
/// Every batch evicts, so every shard's round of evictions starts and ends
/// again and again. redis-server keeps all 1,000 read keys, and so did
/// Tessera in every layout; before the shares followed key counts and a
/// round ended for every shard at once (`engine::evict`), 16 shards kept
/// 823 to 930 of them.
fn allkeys_lfu_at_its_limit_under_writes_keeps_frequently_read_keys(layout: Layout) {
    let s = layout.tessera(&["--maxmemory-policy", "allkeys-lfu", "--lfu-decay-time", "0"]);
    let mut c = s.conn();
    let limit = used(&mut c) + 12_000_000;
    fill(&mut c, "h", 1_000, None);
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query::<()>(&mut c)
        .unwrap();
    for batch in 0..40 {
        let mut p = redis::pipe();
        for _ in 0..3 {
            for i in 0..1_000 {
                p.cmd("GET").arg(format!("h{i}")).ignore();
            }
        }
        p.query::<()>(&mut c).unwrap();
        fill(&mut c, &format!("c{batch}."), 1_000, None);
    }
    lift_limit(&mut c);
    assert!(dbsize(&mut c) < 20_000, "nothing evicted");
    let hot = surviving(&mut c, "h", 0..1_000);
    // (Bound below what loaded runs keep, above the 823-930 of the bug.)
    assert!(hot >= 950, "only {hot} of 1000 frequently read keys kept");
}

per_layout!(
    allkeys_lru_keeps_recently_read_keys_and_config_set_triggers_eviction,
    allkeys_lfu_keeps_frequently_read_keys,
    allkeys_lfu_at_its_limit_under_writes_keeps_frequently_read_keys,
);

#[test]
fn volatile_policies_never_evict_keys_without_ttl_then_refuse_writes() {
    for policy in [
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ] {
        let (_s, mut c) = server(policy, "2");
        fill(&mut c, "p", 5_000, None);
        fill(&mut c, "t", 10_000, Some(3600));
        let u = used(&mut c);
        shrink_to(&mut c, u * 6 / 10);
        assert_eq!(surviving(&mut c, "p", 0..5_000), 5_000, "{policy}");
        assert!(surviving(&mut c, "t", 0..10_000) < 10_000, "{policy}");
        // A limit only the persistent keys could meet: every TTL key goes,
        // then writes are refused.
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(u / 10)
            .query::<()>(&mut c)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let err = loop {
            match redis::cmd("SET").arg("new").arg("v").query::<()>(&mut c) {
                Err(e) => break e,
                Ok(()) => {
                    assert!(Instant::now() < deadline, "{policy}: writes never refused");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        assert_eq!(err.code(), Some("OOM"), "{policy}: {err}");
        assert!(err.to_string().contains(&OOM[4..]), "{err}");
        assert_eq!(surviving(&mut c, "t", 0..10_000), 0, "{policy}");
        assert_eq!(surviving(&mut c, "p", 0..5_000), 5_000, "{policy}");
        // Reads and DEL still work.
        let v: String = redis::cmd("GET").arg("p1").query(&mut c).unwrap();
        assert_eq!(v.len(), VALUE);
        let n: i64 = redis::cmd("DEL").arg("p1").query(&mut c).unwrap();
        assert_eq!(n, 1);
    }
}

#[test]
fn volatile_ttl_evicts_the_soonest_expiring_first() {
    let (_s, mut c) = server("volatile-ttl", "2");
    fill(&mut c, "soon", 6_000, Some(1_000));
    fill(&mut c, "late", 6_000, Some(1_000_000));
    let u = used(&mut c);
    shrink_to(&mut c, u * 7 / 10);
    let soon = surviving(&mut c, "soon", 0..6_000);
    let late = surviving(&mut c, "late", 0..6_000);
    assert!(soon < 6_000, "nothing evicted");
    assert!(late >= 5_700, "{late} late keys left, {soon} soon ones");
}

#[test]
fn allkeys_random_evicts_something_of_everything() {
    let (_s, mut c) = server("allkeys-random", "3");
    fill(&mut c, "p", 5_000, None);
    fill(&mut c, "t", 5_000, Some(3600));
    let u = used(&mut c);
    shrink_to(&mut c, u / 2);
    assert!(surviving(&mut c, "p", 0..5_000) < 5_000);
    assert!(surviving(&mut c, "t", 0..5_000) < 5_000);
    let evicted: u64 = info_field(&mut c, "stats", "evicted_keys").parse().unwrap();
    assert!(evicted > 0);
}

#[test]
fn noeviction_refuses_writes_and_serves_reads_and_del() {
    let (s, mut c) = server("noeviction", "2");
    fill(&mut c, "k", 100, None);
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query::<()>(&mut c)
        .unwrap();
    let mut raw = s.raw();
    let oom = format!("-{OOM}\r\n").into_bytes();
    assert_eq!(raw.cmd_str(&["SET", "a", "b"]), oom);
    assert_eq!(raw.cmd_str(&["LPUSH", "l", "x"]), oom);
    // Multi-shard write (keys on different shards) too.
    assert_eq!(raw.cmd_str(&["MSET", "a", "1", "b", "2", "c", "3"]), oom);
    assert_eq!(raw.cmd_str(&["GET", "nokey"]), b"$-1\r\n");
    assert_eq!(raw.cmd_str(&["DEL", "k1"]), b":1\r\n");
    assert_eq!(raw.cmd_str(&["EXPIRE", "k2", "100"]), b":1\r\n");
    assert_eq!(raw.cmd_str(&["STRLEN", "k3"]), b":1000\r\n");
    // In MULTI every queued command is refused, and EXEC discards.
    assert_eq!(raw.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(raw.cmd_str(&["GET", "k3"]), oom);
    assert_eq!(
        raw.cmd_str(&["EXEC"]),
        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // A transaction queued before the limit is discarded at EXEC when it
    // holds a denyoom command.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(raw.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(raw.cmd_str(&["SET", "a", "b"]), b"+QUEUED\r\n");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query::<()>(&mut c)
        .unwrap();
    let mut abort = b"-EXECABORT Transaction discarded because of: ".to_vec();
    abort.extend_from_slice(OOM.as_bytes());
    abort.extend_from_slice(b"\r\n");
    assert_eq!(raw.cmd_str(&["EXEC"]), abort);
    let rejected = info_field(&mut c, "errorstats", "errorstat_OOM");
    assert!(rejected.starts_with("count="), "{rejected}");
    assert_eq!(info_field(&mut c, "memory", "maxmemory"), "1");
    assert_eq!(info_field(&mut c, "stats", "evicted_keys"), "0");
}

fn vm_rss(pid: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kb * 1024
}

/// Under a sustained write load four times larger than maxmemory, the
/// process's RSS stays within 10 % of maxmemory, plus what the process
/// held before any data (binary, thread stacks, buffers: measured first).
#[test]
fn rss_stays_near_maxmemory_under_sustained_writes() {
    const MAX: u64 = 50 << 20;
    let s = Server::tessera(&[
        "--shards",
        "2",
        "--maxmemory",
        "50mb",
        "--maxmemory-policy",
        "allkeys-lru",
    ]);
    let mut c = s.conn();
    let pid = info_field(&mut c, "server", "process_id");
    let baseline = vm_rss(&pid);
    fill(&mut c, "k", 200_000, None); // 200 MB of values
    let rss = vm_rss(&pid);
    let u = used(&mut c);
    assert!(dbsize(&mut c) < 100_000);
    assert!(u <= MAX + MAX / 100, "used_memory {u}");
    assert!(
        rss <= MAX + MAX / 10 + baseline,
        "RSS {rss} over 110% of {MAX} + baseline {baseline} (used_memory {u})"
    );
}
