//! MEMORY (Redis's `object.c` memoryCommand): USAGE, PURGE, HELP.
//!
//! USAGE reports what `engine::Db::memory_usage` computes: the key's table
//! node as the allocator rounds it, its bucket slot, and the heap bytes of
//! the key and the value. The collection types keep their heap bytes up to
//! date (O(1)), so there is nothing to sample: SAMPLES is parsed and
//! checked as Redis does, and the figure is exact for any count.
//!
//! STATS, DOCTOR and INFO memory share [`MemFigures`]: the counting
//! allocator's total (`engine::alloc`), its peak, RSS from
//! `/proc/self/statm`, and glibc's own view from `mallinfo2` (in-use and
//! heap bytes: Redis's `allocator_allocated` / `allocator_active`).
//! MALLOC-STATS answers glibc's `malloc_info` report (XML), the libc
//! counterpart of jemalloc's text Redis prints.
//!
//! Also here: [`configure_shard`], which the event loop calls after every
//! configuration change to hand `maxmemory` and its policy (and the
//! `lazyfree-*` directives, [`lazy_of`]) to a shard, and
//! [`reclaim`], which gives freed memory back to the system (MEMORY PURGE,
//! and automatically from the workers' crons).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use engine::evict::Policy;
use engine::Shard;
use resp::Args;

use crate::ctx::ServerShared;

use crate::coord::{fan_out, Coordinator};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, NO_KEYS};
use crate::util::{eq_ic, parse_i64};

pub mod reclaim;

const SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "usage",
        -3,
        READONLY,
        keys(2, 2, 1),
        Exec::Shard(usage, None),
        &["read", "slow"],
    ),
    CommandSpec::new("purge", 2, 0, NO_KEYS, Exec::Conn(purge), &["slow"]),
    CommandSpec::new("stats", 2, 0, NO_KEYS, Exec::Coord(stats), &["slow"]),
    CommandSpec::new("doctor", 2, 0, NO_KEYS, Exec::Coord(doctor), &["slow"]),
    CommandSpec::new(
        "malloc-stats",
        2,
        0,
        NO_KEYS,
        Exec::Conn(malloc_stats),
        &["slow"],
    ),
    CommandSpec::new(
        "help",
        2,
        LOADING | STALE,
        NO_KEYS,
        Exec::Conn(help),
        &["slow"],
    ),
];

pub(crate) const COMMANDS: &[CommandSpec] =
    &[CommandSpec::parent("memory", -2, 0, &["slow"], SUBCOMMANDS)];

/// MEMORY USAGE key [SAMPLES count]: bytes used by the key and its value,
/// or null if it does not exist. The lookup does not touch the key.
fn usage(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut j = 3;
    while j < args.len() {
        if eq_ic(args.get(j), "samples") && j + 1 < args.len() {
            if parse_i64(args.get(j + 1))? < 0 {
                return Err(CmdError::Syntax);
            }
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key = args.get(2);
    if !ctx.shard.exists(ctx.db, key) {
        ctx.out.null();
        return Ok(());
    }
    match ctx.shard.dbs[ctx.db].memory_usage(key) {
        Some(n) => ctx.out.int(n as i64),
        None => ctx.out.null(),
    }
    Ok(())
}

/// MEMORY PURGE: gives every free page of every arena back to the system
/// now (one `malloc_trim` covers all threads' arenas), as Redis's purges
/// jemalloc's dirty pages synchronously. `+OK` whatever it returned.
fn purge(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    reclaim::trim(c.nshards());
    c.out.ok();
    Ok(())
}

/// The engine's policy for a configured one (same order).
pub fn policy_of(p: config::MaxmemoryPolicy) -> Policy {
    use config::MaxmemoryPolicy as M;
    match p {
        M::VolatileLru => Policy::VolatileLru,
        M::VolatileLfu => Policy::VolatileLfu,
        M::VolatileRandom => Policy::VolatileRandom,
        M::VolatileTtl => Policy::VolatileTtl,
        M::AllkeysLru => Policy::AllkeysLru,
        M::AllkeysLfu => Policy::AllkeysLfu,
        M::AllkeysRandom => Policy::AllkeysRandom,
        M::Noeviction => Policy::NoEviction,
    }
}

/// Hands the `maxmemory` settings and the `lazyfree-*` directives to
/// `shard` (at start and after every CONFIG SET, on the shard's thread)
/// and publishes the former for the checks made without a shard. Lowering
/// `maxmemory` below the current usage starts evicting at once, as Redis's
/// CONFIG SET does.
pub fn configure_shard(shard: &mut Shard, server: &Arc<ServerShared>) {
    let (max, policy, samples, tenacity, lazy) = {
        let c = server.config.read().unwrap_or_else(|e| e.into_inner());
        (
            c.maxmemory,
            policy_of(c.maxmemory_policy),
            c.maxmemory_samples as usize,
            c.maxmemory_eviction_tenacity,
            lazy_of(&c),
        )
    };
    shard.set_lazy(lazy);
    shard.evict.configure(max, policy, samples, tenacity);
    shard.evict.shared = Some(server.mem.clone());
    server.mem.set_limit(max, policy);
    if shard.dirty() == 0 {
        // Nothing stored yet: what is allocated is the server's own
        // (each shard's loop calls this once when built).
        server.startup_memory.fetch_max(
            engine::alloc::used_total(server.nshards),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    shard.evict_cron(25_000);
}

/// Which deletions free big values in the background under `c` (the
/// `lazyfree-lazy-*` and `replica-lazy-flush` directives).
pub fn lazy_of(c: &config::Config) -> engine::lazyfree::Lazy {
    engine::lazyfree::Lazy {
        eviction: c.lazyfree_lazy_eviction,
        expire: c.lazyfree_lazy_expire,
        server_del: c.lazyfree_lazy_server_del,
        user_del: c.lazyfree_lazy_user_del,
        user_flush: c.lazyfree_lazy_user_flush,
        replica_flush: c.replica_lazy_flush,
    }
}

/// Memory figures of the whole process (INFO memory, MEMORY STATS and
/// DOCTOR), in jemalloc's terms as Redis reports them:
///
/// * `allocator_allocated`: bytes glibc has handed out and not got back
///   (`mallinfo2`: in-use chunks plus `mmap`ped ones);
/// * `allocator_resident`: resident anonymous memory ([`reclaim::resident`]),
///   the pages the allocator holds, live or free (plus thread stacks);
/// * `allocator_active`: the pages holding live data: allocated plus what
///   the last trim could not return ([`reclaim::floor`]), at most resident.
///
/// So `allocator_rss_*` is the free memory held that a trim (MEMORY PURGE,
/// or the automatic one) would give back, `allocator_frag_*` the part it
/// cannot (free bytes sharing pages with live ones), and `rss_overhead_*`
/// the process's own non-heap pages (code, libraries).
pub(crate) struct MemFigures {
    /// The allocator count (`used_memory`); RSS when the counting
    /// allocator is not installed (in-process tests).
    pub used: u64,
    pub peak: u64,
    pub startup: u64,
    pub rss: u64,
    pub allocator_allocated: u64,
    pub allocator_active: u64,
    pub allocator_resident: u64,
}

impl MemFigures {
    pub fn read(server: &ServerShared) -> Self {
        let (rss, anon) = reclaim::resident();
        let used = if engine::alloc::installed() {
            engine::alloc::used_total(server.nshards)
        } else {
            rss
        };
        // SAFETY: mallinfo2 only reads the allocator's own statistics.
        let mi = unsafe { libc::mallinfo2() };
        let allocated = (mi.uordblks + mi.hblkhd) as u64;
        let active = allocated
            .saturating_add(reclaim::floor())
            .min(anon)
            .max(allocated);
        MemFigures {
            used,
            peak: engine::alloc::update_peak(used),
            startup: server
                .startup_memory
                .load(std::sync::atomic::Ordering::Relaxed)
                .min(used),
            rss,
            allocator_allocated: allocated,
            allocator_active: active,
            allocator_resident: anon,
        }
    }
    pub fn ratio(a: u64, b: u64) -> f64 {
        if b == 0 {
            0.0
        } else {
            a as f64 / b as f64
        }
    }
    pub fn frag(&self) -> f64 {
        Self::ratio(self.rss, self.used)
    }
    pub fn frag_bytes(&self) -> i64 {
        self.rss as i64 - self.used as i64
    }
    pub fn alloc_frag(&self) -> f64 {
        Self::ratio(self.allocator_active, self.allocator_allocated)
    }
    pub fn alloc_frag_bytes(&self) -> i64 {
        self.allocator_active as i64 - self.allocator_allocated as i64
    }
    pub fn alloc_rss(&self) -> f64 {
        Self::ratio(self.allocator_resident, self.allocator_active)
    }
    pub fn alloc_rss_bytes(&self) -> i64 {
        self.allocator_resident as i64 - self.allocator_active as i64
    }
    /// Redis's `rss_extra`: the process's resident pages beyond the
    /// allocator's.
    pub fn rss_overhead(&self) -> f64 {
        Self::ratio(self.rss, self.allocator_resident)
    }
    pub fn rss_overhead_bytes(&self) -> i64 {
        self.rss as i64 - self.allocator_resident as i64
    }
}

/// Per-shard figures MEMORY STATS and DOCTOR sum.
#[derive(Default)]
struct ShardMem {
    /// Per database: (keys, main table overhead, TTL set overhead).
    dbs: Vec<(usize, usize, usize)>,
    /// Heap bytes of the thread's client connections (`clients.normal`).
    clients: u64,
    /// How many connections the thread has.
    nclients: u64,
}

fn shard_mem(shard: &Shard, clients: &dyn crate::coord::ClientRegistry) -> ShardMem {
    let (mut sum, mut n) = (0u64, 0u64);
    clients.for_each(&mut |_, io| {
        sum += io.tot_mem as u64;
        n += 1;
    });
    ShardMem {
        clients: sum,
        nclients: n,
        dbs: shard
            .dbs
            .iter()
            .map(|d| {
                let (m, e) = d.overhead_bytes();
                (d.len(), m, e)
            })
            .collect(),
    }
}

/// Each shard's key figures per database, published by its loop's cron
/// (the [`ShardMem`] figures of its databases), for a script's MEMORY STATS
/// that cannot read every shard: a script may not wait for another thread
/// (one may wait for the script's shard), so the shards its run does not
/// reach count as of their last cron, up to one tick (1/hz) old, as Redis's
/// `clients.normal` is its clients cron's. Cost: three relaxed stores per
/// database per tick; memory: 24 bytes per database per shard.
pub struct KeyFigures {
    /// Per shard, per database: keys, main table and TTL set overhead.
    shards: Box<[Box<[[AtomicU64; 3]]>]>,
}

impl KeyFigures {
    pub fn new(nshards: usize, databases: usize) -> Self {
        let db = || (0..databases).map(|_| Default::default()).collect();
        KeyFigures {
            shards: (0..nshards).map(|_| db()).collect(),
        }
    }

    /// `shard`'s cron: its figures now.
    pub fn publish(&self, shard: &Shard) {
        let Some(dbs) = self.shards.get(shard.id) else {
            return;
        };
        for (slot, d) in dbs.iter().zip(shard.dbs.iter()) {
            let (m, e) = d.overhead_bytes();
            for (a, v) in slot.iter().zip([d.len(), m, e]) {
                a.store(v as u64, Ordering::Relaxed);
            }
        }
    }

    /// What shard `id` published last, as [`shard_mem`] reads a shard
    /// (without clients).
    fn read(&self, id: usize) -> ShardMem {
        let dbs = self.shards.get(id).map_or(Vec::new(), |dbs| {
            dbs.iter()
                .map(|[k, m, e]| {
                    let v = |a: &AtomicU64| a.load(Ordering::Relaxed) as usize;
                    (v(k), v(m), v(e))
                })
                .collect()
        });
        ShardMem {
            dbs,
            ..ShardMem::default()
        }
    }
}

/// Redis's `getMemoryOverheadData`, from our figures.
struct Overhead {
    fig: MemFigures,
    /// `(db, main, expires)` for databases with keys.
    dbs: Vec<(usize, u64, u64)>,
    overhead: u64,
    keys: u64,
    dataset: u64,
    clients: u64,
    nclients: u64,
}

fn overhead(fig: MemFigures, parts: &[ShardMem]) -> Overhead {
    let ndb = parts.iter().map(|p| p.dbs.len()).max().unwrap_or(0);
    let mut dbs = Vec::new();
    let mut keys = 0u64;
    let mut tables = 0u64;
    for db in 0..ndb {
        let (mut k, mut m, mut e) = (0u64, 0u64, 0u64);
        for p in parts {
            if let Some(&(pk, pm, pe)) = p.dbs.get(db) {
                k += pk as u64;
                m += pm as u64;
                e += pe as u64;
            }
        }
        if k > 0 {
            dbs.push((db, m, e));
            tables += m + e;
            keys += k;
        }
    }
    let clients: u64 = parts.iter().map(|p| p.clients).sum();
    let overhead = (fig.startup + tables + clients).min(fig.used);
    Overhead {
        clients,
        nclients: parts.iter().map(|p| p.nclients).sum(),
        dataset: fig.used - overhead,
        fig,
        dbs,
        overhead,
        keys,
    }
}

/// MEMORY STATS: Redis 7.0's fields, in its order.
fn stats(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let server = c.server.clone();
    Ok(fan_out(
        c.nshards(),
        |env| shard_mem(env.shard, env.clients),
        move |parts: Vec<ShardMem>, out: &mut resp::Reply, _: &mut ClientState| {
            write_stats(&overhead(MemFigures::read(&server), &parts), out);
            Ok(())
        },
    ))
}

/// MEMORY STATS's reply, from the figures of every shard.
fn write_stats(o: &Overhead, out: &mut resp::Reply) {
    let f = &o.fig;
    let net = f.used.saturating_sub(f.startup);
    // Redis computes these percentages in single precision.
    let pct = |a: u64, b: u64| f64::from((a as f32) * 100.0 / (b.max(1) as f32));
    let ratio = |r: f64| f64::from(r as f32);
    out.map(27 + o.dbs.len());
    let int = |out: &mut resp::Reply, k: &str, v: i64| {
        out.bulk(k.as_bytes());
        out.int(v);
    };
    int(out, "peak.allocated", f.peak as i64);
    int(out, "total.allocated", f.used as i64);
    int(out, "startup.allocated", f.startup as i64);
    int(out, "replication.backlog", 0);
    int(out, "clients.slaves", 0);
    int(out, "clients.normal", o.clients as i64);
    for k in [
        "cluster.links",
        "aof.buffer",
        "lua.caches",
        "functions.caches",
    ] {
        int(out, k, 0);
    }
    for &(db, m, e) in &o.dbs {
        out.bulk(format!("db.{db}").as_bytes());
        out.map(2);
        int(out, "overhead.hashtable.main", m as i64);
        int(out, "overhead.hashtable.expires", e as i64);
    }
    int(out, "overhead.total", o.overhead as i64);
    int(out, "keys.count", o.keys as i64);
    int(
        out,
        "keys.bytes-per-key",
        net.checked_div(o.keys).unwrap_or(0) as i64,
    );
    int(out, "dataset.bytes", o.dataset as i64);
    out.bulk(b"dataset.percentage");
    out.double(pct(o.dataset, net));
    out.bulk(b"peak.percentage");
    out.double(pct(f.used, f.peak));
    int(out, "allocator.allocated", f.allocator_allocated as i64);
    int(out, "allocator.active", f.allocator_active as i64);
    int(out, "allocator.resident", f.allocator_resident as i64);
    out.bulk(b"allocator-fragmentation.ratio");
    out.double(ratio(f.alloc_frag()));
    int(out, "allocator-fragmentation.bytes", f.alloc_frag_bytes());
    out.bulk(b"allocator-rss.ratio");
    out.double(ratio(f.alloc_rss()));
    int(out, "allocator-rss.bytes", f.alloc_rss_bytes());
    out.bulk(b"rss-overhead.ratio");
    out.double(ratio(f.rss_overhead()));
    int(out, "rss-overhead.bytes", f.rss_overhead_bytes());
    out.bulk(b"fragmentation");
    out.double(ratio(f.frag()));
    int(out, "fragmentation.bytes", f.frag_bytes());
}

/// MEMORY STATS or MEMORY DOCTOR (`full`) called from a script: the
/// figures of the shards `visit` reaches (every shard when the script
/// holds them all: see `server::info_from_script`), read now, and those
/// every other shard published at its last cron ([`KeyFigures`]), so its
/// keys, dataset and per-database overheads cover the whole server as
/// Redis's do. `buffers`: the heap
/// bytes and number of the connections the script's run reached on their
/// loops (`Run::for_each_client`: every loop's when it holds every
/// shard), for `clients.normal`. `None` when the server is gone (a test's
/// bare shard).
pub(crate) fn from_script(
    ops: &crate::ops::Ops,
    visit: &mut crate::server::Visit<'_>,
    buffers: (u64, u64),
    full: &str,
    out: &mut resp::Reply,
) -> Option<()> {
    let server = ops.server.get()?.upgrade()?;
    let mut parts = vec![ShardMem {
        clients: buffers.0,
        nclients: buffers.1,
        dbs: Vec::new(),
    }];
    // The shards the run reaches, read now; the others as of their cron
    // (see `KeyFigures`).
    let mut reached = vec![false; server.nshards];
    visit(&mut |sh, _| {
        if let Some(r) = reached.get_mut(sh.id) {
            *r = true;
        }
        parts.push(shard_mem(sh, &NoClients))
    });
    for (id, _) in reached.iter().enumerate().filter(|(_, r)| !**r) {
        parts.push(server.key_figures.read(id));
    }
    let o = overhead(MemFigures::read(&server), &parts);
    if full == "memory|doctor" {
        out.verbatim("txt", doctor_report(&o).as_bytes());
    } else {
        write_stats(&o, out);
    }
    Some(())
}

/// The clients [`shard_mem`] sees for a script's MEMORY call: none, they
/// come apart (see [`from_script`]).
struct NoClients;

impl crate::coord::ClientRegistry for NoClients {
    fn for_each(&self, _: &mut dyn FnMut(&ClientState, &crate::coord::ClientIo)) {}
    fn kill(&mut self, _: u64) -> bool {
        false
    }
}

const DOCTOR_EMPTY: &str = "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n";
const DOCTOR_OK: &str = "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n";

/// MEMORY DOCTOR: Redis's report and texts, for the conditions we can
/// measure (peak, RSS, allocator fragmentation and RSS overhead, client
/// buffers). No replicas exist here, and the script cache is not
/// counted, so those findings never show.
fn doctor(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let server = c.server.clone();
    Ok(fan_out(
        c.nshards(),
        |env| shard_mem(env.shard, env.clients),
        move |parts: Vec<ShardMem>, out: &mut resp::Reply, _: &mut ClientState| {
            let o = overhead(MemFigures::read(&server), &parts);
            out.verbatim("txt", doctor_report(&o).as_bytes());
            Ok(())
        },
    ))
}

fn doctor_report(o: &Overhead) -> String {
    const TEN_MB: i64 = 10 << 20;
    let f = &o.fig;
    if f.used < 5 << 20 {
        return DOCTOR_EMPTY.to_string();
    }
    let big_peak = f.peak as f64 / f.used as f64 > 1.5;
    let high_frag = f.frag() > 1.4 && f.frag_bytes() > TEN_MB;
    let high_alloc_frag = f.alloc_frag() > 1.1 && f.alloc_frag_bytes() > TEN_MB;
    let high_alloc_rss = f.alloc_rss() > 1.1 && f.alloc_rss_bytes() > TEN_MB;
    let high_proc_rss = f.rss_overhead() > 1.1 && f.rss_overhead_bytes() > TEN_MB;
    // Redis divides by the number of clients unguarded; the caller is one.
    let big_client_buf = o.clients / o.nclients.max(1) > 200 << 10;
    if !(big_peak
        || high_frag
        || high_alloc_frag
        || high_alloc_rss
        || high_proc_rss
        || big_client_buf)
    {
        return DOCTOR_OK.to_string();
    }
    let mut s =
        String::from("Sam, I detected a few issues in this Redis instance memory implants:\n\n");
    if big_peak {
        s.push_str(" * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n");
    }
    if high_frag {
        s.push_str(" * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator is \"libc\".\n\n");
    }
    if high_alloc_frag {
        s.push_str(" * High allocator fragmentation: This instance has an allocator external fragmentation greater than 1.1. This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. You can try enabling 'activedefrag' config option.\n\n");
    }
    if high_alloc_rss {
        s.push_str(" * High allocator RSS overhead: This instance has an RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the allocator is much larger than the sum what the allocator actually holds). This problem is usually due to a large peak memory (check if there is a peak memory entry above in the report), you can try the MEMORY PURGE command to reclaim it.\n\n");
    }
    if high_proc_rss {
        s.push_str(" * High process RSS overhead: This instance has non-allocator RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the Redis process is much larger than the RSS the allocator holds). This problem may be due to Lua scripts or Modules.\n\n");
    }
    if big_client_buf {
        s.push_str(" * Big client buffers: The clients output buffers in this instance are greater than 200K per client (on average). This may result from different causes, like Pub/Sub clients subscribed to channels bot not receiving data fast enough, so that data piles on the Redis instance output buffer, or clients sending commands with large replies or very large sequences of commands in the same pipeline. Please use the CLIENT LIST command in order to investigate the issue if it causes problems in your instance, or to understand better why certain clients are using a big amount of memory.\n\n");
    }
    s.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
    s
}

/// MEMORY MALLOC-STATS: glibc's `malloc_info` report.
fn malloc_stats(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let mut buf: *mut libc::c_char = std::ptr::null_mut();
    let mut len: libc::size_t = 0;
    // SAFETY: open_memstream allocates the buffer and updates `buf`/`len`
    // on fclose; we read `len` bytes of it and free it with libc's free.
    let text = unsafe {
        let f = libc::open_memstream(&mut buf, &mut len);
        if f.is_null() {
            return Err(CmdError::err("Error reading the allocator statistics"));
        }
        libc::malloc_info(0, f);
        libc::fclose(f);
        let t = std::slice::from_raw_parts(buf as *const u8, len).to_vec();
        libc::free(buf.cast());
        t
    };
    c.out.verbatim("txt", &text);
    Ok(())
}

const HELP: &[&str] = &[
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
];

fn help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    crate::docs::reply_help(c.out, "MEMORY", HELP);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{doctor_report, MemFigures, Overhead, DOCTOR_OK};
    use crate::testutil::TestServer;

    fn figures(used: u64, rss: u64, allocated: u64, active: u64, resident: u64) -> MemFigures {
        MemFigures {
            used,
            peak: used,
            startup: 0,
            rss,
            allocator_allocated: allocated,
            allocator_active: active,
            allocator_resident: resident,
        }
    }

    fn report(fig: MemFigures, clients: u64, nclients: u64) -> String {
        doctor_report(&Overhead {
            fig,
            dbs: Vec::new(),
            overhead: 0,
            keys: 0,
            dataset: 0,
            clients,
            nclients,
        })
    }

    #[test]
    fn doctor_tells_held_memory_from_fragmentation_and_the_process_own() {
        let mb = 1 << 20;
        assert_eq!(
            report(
                figures(100 * mb, 105 * mb, 100 * mb, 101 * mb, 102 * mb),
                0,
                1
            ),
            DOCTOR_OK
        );
        // Freed pages still resident: MEMORY PURGE is the advice.
        let r = report(
            figures(100 * mb, 300 * mb, 100 * mb, 101 * mb, 298 * mb),
            0,
            1,
        );
        assert!(r.contains("High allocator RSS overhead"), "{r}");
        assert!(!r.contains("High allocator fragmentation"), "{r}");
        // What a trim cannot return is fragmentation.
        let r = report(
            figures(100 * mb, 300 * mb, 100 * mb, 297 * mb, 298 * mb),
            0,
            1,
        );
        assert!(r.contains("High allocator fragmentation"), "{r}");
        assert!(!r.contains("High allocator RSS overhead"), "{r}");
        // Resident pages outside the allocator.
        let r = report(
            figures(100 * mb, 130 * mb, 100 * mb, 101 * mb, 102 * mb),
            0,
            1,
        );
        assert!(r.contains("High process RSS overhead"), "{r}");
        // Clients above 200 KB each on average.
        let fig = || figures(100 * mb, 105 * mb, 100 * mb, 101 * mb, 102 * mb);
        assert!(report(fig(), 10 * mb, 10).contains("Big client buffers"));
        assert_eq!(report(fig(), 10 * mb, 100), DOCTOR_OK);
    }

    fn usage(t: &mut TestServer, key: &str) -> i64 {
        t.run(&["MEMORY", "USAGE", key])[1..]
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn a_string_stored_with_its_key_is_not_kept_twice_once_changed_nor_touched_by_failures() {
        let mut t = TestServer::new(1);
        for cmd in [
            &["INCR", "k"][..],
            &["INCRBY", "k", "x"],
            &["SORT", "k"],
            &["SETRANGE", "k", "0", ""],
            &["LPUSH", "k", "x"],
        ] {
            t.run(&["SET", "k", &"x".repeat(100)]);
            let before = usage(&mut t, "k");
            t.run(cmd);
            assert_eq!(usage(&mut t, "k"), before, "{cmd:?}");
        }
        // A change moves the bytes out of the node into a growable
        // buffer; the node's copy goes (before: node 4032 + buffer 8000).
        t.run(&["SET", "k", &"x".repeat(4000)]);
        let before = usage(&mut t, "k");
        assert_eq!(t.run(&["APPEND", "k", "y"]), ":4001\r\n");
        let after = usage(&mut t, "k");
        assert!(after <= 2 * before + 256, "{before} -> {after}");
        assert_eq!(t.run(&["STRLEN", "k"]), ":4001\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "k"]), "$3\r\nraw\r\n");
    }

    #[test]
    fn usage_grows_with_the_value_and_checks_samples() {
        let mut t = TestServer::new(2);
        assert_eq!(t.run(&["MEMORY", "USAGE", "nokey"]), "$-1\r\n");
        t.run(&["SET", "k", "v"]);
        let small: i64 = t.run(&["MEMORY", "USAGE", "k"])[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(small >= 64, "{small}");
        t.run(&["SET", "k", &"x".repeat(1000)]);
        let big: i64 = t.run(&["MEMORY", "USAGE", "k", "SAMPLES", "0"])[1..]
            .trim()
            .parse()
            .unwrap();
        // The 1000 bytes count; the small value's 24-byte handle is not
        // there any more (a long string is stored in the key's node).
        assert!(big >= small + 1000 - 24, "{big} {small}");
        for i in 0..500 {
            t.run(&["SADD", "s", &format!("member-{i}")]);
        }
        let set: i64 = t.run(&["MEMORY", "USAGE", "s"])[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(set >= 500 * 8, "{set}");
        assert_eq!(
            t.run(&["MEMORY", "USAGE", "k", "SAMPLES", "-1"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            t.run(&["MEMORY", "USAGE", "k", "SAMPLES"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            t.run(&["MEMORY", "USAGE", "nokey", "SAMPLES", "x"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(t.run(&["MEMORY", "PURGE"]), "+OK\r\n");
    }
}
