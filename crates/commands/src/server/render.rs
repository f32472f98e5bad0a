//! INFO's text: every section Redis 7.0 prints, rendered from the
//! server-wide [`Snapshot`] and the per-shard [`ShardInfo`] a client's INFO
//! (or a script's, see `info_from_script`) gathered. Split from `server`,
//! which gathers them.

use std::fmt::Write as _;

use super::*;

/// Redis's `bytesToHuman`.
pub(super) fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    let mut d = n as f64;
    if d < 1024.0 {
        return format!("{n}B");
    }
    for u in UNITS {
        d /= 1024.0;
        if d < 1024.0 || u == "P" {
            return format!("{d:.2}{u}");
        }
    }
    unreachable!("the loop returns at P")
}

pub(super) fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub(super) fn total_system_memory() -> u64 {
    read_trim("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// (system, user) CPU seconds of `who` (`RUSAGE_SELF`, `_CHILDREN`,
/// `_THREAD`).
pub(super) fn rusage(who: libc::c_int) -> (f64, f64) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes into the struct we own.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_stime), t(ru.ru_utime))
}

/// Writes `key:value\r\n`.
pub(super) fn kv(o: &mut String, k: &str, v: impl std::fmt::Display) {
    let _ = write!(o, "{k}:{v}\r\n");
}

pub(super) fn zeros(o: &mut String, keys: &[&str]) {
    for k in keys {
        kv(o, k, 0);
    }
}

pub(super) fn render(want: &[bool], s: &Snapshot, parts: &[ShardInfo]) -> String {
    let mut sections: Vec<String> = Vec::new();
    for (i, (name, _)) in SECTIONS.iter().enumerate() {
        if want[i] {
            let mut o = String::new();
            section(&mut o, name, s, parts);
            sections.push(o);
        }
    }
    sections.join("\r\n")
}

pub(super) fn section(o: &mut String, name: &str, s: &Snapshot, parts: &[ShardInfo]) {
    let threads: Vec<&ThreadStats> = parts.iter().filter_map(|p| p.thread.as_ref()).collect();
    let sum = |f: fn(&ThreadStats) -> u64| threads.iter().map(|t| f(t)).sum::<u64>();
    let shard_sum = |f: fn(&ShardStats) -> u64| parts.iter().map(|p| f(&p.stats)).sum::<u64>();
    match name {
        "server" => {
            o.push_str("# Server\r\n");
            kv(o, "redis_version", REDIS_VERSION);
            kv(o, "redis_git_sha1", "00000000");
            kv(o, "redis_git_dirty", 0);
            kv(o, "redis_build_id", "0");
            kv(o, "redis_mode", "standalone");
            kv(o, "tessera_version", TESSERA_VERSION);
            kv(o, "tessera_shards", s.nshards);
            let os = format!(
                "{} {} {}",
                read_trim("/proc/sys/kernel/ostype"),
                read_trim("/proc/sys/kernel/osrelease"),
                std::env::consts::ARCH
            );
            kv(o, "os", os);
            kv(o, "arch_bits", usize::BITS);
            kv(o, "monotonic_clock", "POSIX clock_gettime");
            kv(o, "multiplexing_api", "epoll");
            kv(o, "atomicvar_api", "c11-builtin");
            kv(o, "gcc_version", "0.0.0");
            kv(o, "process_id", std::process::id());
            kv(o, "process_supervised", "no");
            kv(o, "run_id", &s.run_id);
            kv(o, "tcp_port", s.tcp_port);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            kv(o, "server_time_usec", now.as_micros());
            kv(o, "uptime_in_seconds", s.uptime_s);
            kv(o, "uptime_in_days", s.uptime_s / 86400);
            kv(o, "hz", s.config.hz);
            kv(o, "configured_hz", s.config.hz);
            // Redis's LRU clock: seconds, 24 bits.
            kv(o, "lru_clock", now.as_secs() & ((1 << 24) - 1));
            kv(o, "executable", &s.executable);
            let file = s.config.config_file.as_ref();
            kv(
                o,
                "config_file",
                file.map(|p| p.display().to_string()).unwrap_or_default(),
            );
            kv(o, "io_threads_active", 0);
            kv(o, "shards", s.nshards);
            kv(o, "shard_threads_active", s.shard_threads_active);
        }
        "clients" => {
            o.push_str("# Clients\r\n");
            kv(o, "connected_clients", s.connected_clients);
            kv(o, "cluster_connections", 0);
            kv(o, "maxclients", s.config.maxclients);
            let recent = |f: fn(&(usize, usize)) -> usize| {
                parts
                    .iter()
                    .map(|p| f(&p.recent_buffers))
                    .max()
                    .unwrap_or(0)
            };
            kv(o, "client_recent_max_input_buffer", recent(|r| r.0));
            kv(o, "client_recent_max_output_buffer", recent(|r| r.1));
            kv(
                o,
                "blocked_clients",
                s.ops.blocked_clients.load(Ordering::Relaxed),
            );
            kv(o, "tracking_clients", s.tracking.0);
            zeros(o, &["clients_in_timeout_table"]);
        }
        "memory" => {
            let f = &s.mem;
            let total = total_system_memory();
            let tables: u64 = parts.iter().map(|p| p.table_overhead).sum();
            let clients: u64 = parts.iter().map(|p| p.clients_mem).sum();
            let overhead = (f.startup + tables + clients).min(f.used);
            let dataset = f.used - overhead;
            let net = f.used.saturating_sub(f.startup).max(1);
            o.push_str("# Memory\r\n");
            kv(o, "used_memory", f.used);
            kv(o, "used_memory_human", human(f.used));
            kv(o, "used_memory_rss", f.rss);
            kv(o, "used_memory_rss_human", human(f.rss));
            kv(o, "used_memory_peak", f.peak);
            kv(o, "used_memory_peak_human", human(f.peak));
            let perc = f.used as f64 * 100.0 / f.peak.max(1) as f64;
            kv(o, "used_memory_peak_perc", format!("{perc:.2}%"));
            kv(o, "used_memory_overhead", overhead);
            kv(o, "used_memory_startup", f.startup);
            kv(o, "used_memory_dataset", dataset);
            let dperc = dataset as f64 * 100.0 / net as f64;
            kv(o, "used_memory_dataset_perc", format!("{dperc:.2}%"));
            kv(o, "allocator_allocated", f.allocator_allocated);
            kv(o, "allocator_active", f.allocator_active);
            kv(o, "allocator_resident", f.allocator_resident);
            kv(o, "total_system_memory", total);
            kv(o, "total_system_memory_human", human(total));
            use crate::script::vm::VmKind;
            let scripts = &s.ops.scripts;
            let lua = scripts.vm_bytes(VmKind::Eval);
            let lua_functions = scripts.vm_bytes(VmKind::Functions);
            let bodies = scripts.body_bytes();
            kv(o, "used_memory_lua", lua);
            kv(o, "used_memory_vm_eval", lua);
            kv(o, "used_memory_lua_human", human(lua));
            kv(o, "used_memory_scripts_eval", bodies);
            kv(o, "number_of_cached_scripts", scripts.len());
            let (nfuncs, nlibs, lib_bytes) = {
                let reg = s.ops.functions.read();
                let bytes: usize = reg.libs.values().map(|l| l.code.len()).sum();
                (reg.function_count(), reg.libs.len(), bytes as u64)
            };
            kv(o, "number_of_functions", nfuncs);
            kv(o, "number_of_libraries", nlibs);
            kv(o, "used_memory_vm_functions", lua_functions);
            kv(o, "used_memory_vm_total", lua + lua_functions);
            kv(o, "used_memory_vm_total_human", human(lua + lua_functions));
            kv(o, "used_memory_functions", lib_bytes);
            kv(o, "used_memory_scripts", bodies + lib_bytes);
            kv(o, "used_memory_scripts_human", human(bodies + lib_bytes));
            kv(o, "maxmemory", s.config.maxmemory);
            kv(o, "maxmemory_human", human(s.config.maxmemory));
            kv(o, "maxmemory_policy", s.config.maxmemory_policy.name());
            let r2 = |r: f64| format!("{r:.2}");
            kv(o, "allocator_frag_ratio", r2(f.alloc_frag()));
            kv(o, "allocator_frag_bytes", f.alloc_frag_bytes());
            kv(o, "allocator_rss_ratio", r2(f.alloc_rss()));
            kv(o, "allocator_rss_bytes", f.alloc_rss_bytes());
            kv(o, "rss_overhead_ratio", r2(f.rss_overhead()));
            kv(o, "rss_overhead_bytes", f.rss_overhead_bytes());
            kv(o, "mem_fragmentation_ratio", r2(f.frag()));
            kv(o, "mem_fragmentation_bytes", f.frag_bytes());
            zeros(o, &["mem_not_counted_for_evict"]);
            kv(o, "mem_replication_backlog", s.repl_backlog_bytes);
            zeros(o, &["mem_total_replication_buffers", "mem_clients_slaves"]);
            kv(o, "mem_clients_normal", clients);
            zeros(o, &["mem_cluster_links", "mem_aof_buffer"]);
            kv(o, "mem_allocator", "libc");
            zeros(o, &["active_defrag_running"]);
            kv(o, "lazyfree_pending_objects", engine::lazyfree::pending());
            kv(
                o,
                "lazyfreed_objects",
                engine::lazyfree::freed_in_background(),
            );
        }
        "persistence" => {
            o.push_str("# Persistence\r\n");
            let p = &s.persist;
            kv(o, "loading", u8::from(p.loading));
            zeros(
                o,
                &[
                    "async_loading",
                    "current_cow_peak",
                    "current_cow_size",
                    "current_cow_size_age",
                ],
            );
            kv(o, "current_fork_perc", "0.00");
            zeros(
                o,
                &["current_save_keys_processed", "current_save_keys_total"],
            );
            kv(o, "rdb_changes_since_last_save", p.changes);
            kv(o, "rdb_bgsave_in_progress", u8::from(p.in_progress));
            kv(o, "rdb_last_save_time", s.lastsave_s);
            kv(
                o,
                "rdb_last_bgsave_status",
                if p.last_ok { "ok" } else { "err" },
            );
            let secs = |v: Option<u64>| v.map_or(-1, |v| v as i64);
            kv(o, "rdb_last_bgsave_time_sec", secs(p.last_bgsave_time_s));
            kv(o, "rdb_current_bgsave_time_sec", secs(p.current_time_s));
            kv(o, "rdb_saves", p.saves);
            kv(o, "rdb_last_cow_size", 0);
            kv(o, "rdb_last_load_keys_expired", p.expired_on_load);
            kv(o, "rdb_last_load_keys_loaded", p.loaded_keys);
            let ok = |b: bool| if b { "ok" } else { "err" };
            kv(o, "aof_enabled", u8::from(s.aof.is_some()));
            kv(
                o,
                "aof_rewrite_in_progress",
                u8::from(p.rewrite_in_progress),
            );
            kv(o, "aof_rewrite_scheduled", u8::from(p.rewrite_scheduled));
            kv(o, "aof_last_rewrite_time_sec", secs(p.last_rewrite_time_s));
            kv(
                o,
                "aof_current_rewrite_time_sec",
                secs(p.current_rewrite_time_s),
            );
            kv(o, "aof_last_bgrewrite_status", ok(p.rewrite_ok));
            kv(o, "aof_rewrites", p.rewrites);
            kv(o, "aof_rewrites_consecutive_failures", p.rewrite_failures);
            kv(
                o,
                "aof_last_write_status",
                ok(s.aof.as_ref().is_none_or(|a| a.write_ok)),
            );
            zeros(
                o,
                &[
                    "aof_last_cow_size",
                    "module_fork_in_progress",
                    "module_fork_last_cow_size",
                ],
            );
            if let Some(a) = &s.aof {
                kv(o, "aof_current_size", a.size);
                kv(o, "aof_base_size", a.base_size);
                zeros(
                    o,
                    &[
                        "aof_pending_rewrite",
                        "aof_buffer_length",
                        "aof_pending_bio_fsync",
                        "aof_delayed_fsync",
                    ],
                );
            }
        }
        "stats" => {
            o.push_str("# Stats\r\n");
            kv(o, "total_connections_received", s.total_connections);
            kv(o, "total_commands_processed", sum(|t| t.total_commands));
            kv(o, "instantaneous_ops_per_sec", s.ops_per_sec);
            kv(o, "total_net_input_bytes", sum(|t| t.net_input_bytes));
            kv(o, "total_net_output_bytes", sum(|t| t.net_output_bytes));
            kv(o, "total_net_repl_input_bytes", 0);
            kv(o, "total_net_repl_output_bytes", s.repl_output_bytes);
            kv(
                o,
                "instantaneous_input_kbps",
                format!("{:.2}", s.input_kbps),
            );
            kv(
                o,
                "instantaneous_output_kbps",
                format!("{:.2}", s.output_kbps),
            );
            kv(o, "instantaneous_input_repl_kbps", "0.00");
            kv(o, "instantaneous_output_repl_kbps", "0.00");
            kv(o, "rejected_connections", s.rejected_connections);
            kv(o, "sync_full", s.sync_stats[0]);
            kv(o, "sync_partial_ok", s.sync_stats[1]);
            kv(o, "sync_partial_err", s.sync_stats[2]);
            kv(o, "expired_keys", shard_sum(|x| x.expired_keys));
            let stale = parts
                .iter()
                .map(|p| p.stats.expired_stale_perc)
                .sum::<f64>()
                / parts.len().max(1) as f64;
            kv(o, "expired_stale_perc", format!("{stale:.2}"));
            kv(
                o,
                "expired_time_cap_reached_count",
                shard_sum(|x| x.expired_time_cap_reached_count),
            );
            zeros(o, &["expire_cycle_cpu_milliseconds"]);
            kv(o, "evicted_keys", shard_sum(|x| x.evicted_keys));
            kv(o, "evicted_clients", s.evicted_clients);
            zeros(
                o,
                &[
                    "total_eviction_exceeded_time",
                    "current_eviction_exceeded_time",
                ],
            );
            kv(o, "keyspace_hits", shard_sum(|x| x.keyspace_hits));
            kv(o, "keyspace_misses", shard_sum(|x| x.keyspace_misses));
            let (chans, pats, shard_chans) = s.pubsub;
            kv(o, "pubsub_channels", chans);
            kv(o, "pubsub_patterns", pats);
            kv(o, "pubsubshard_channels", shard_chans);
            // No fork here: a snapshot's start is where Redis forks.
            kv(o, "latest_fork_usec", 0);
            kv(o, "total_forks", s.persist.forks);
            kv(
                o,
                "migrate_cached_sockets",
                crate::migrate::cached_sockets(),
            );
            zeros(
                o,
                &[
                    "slave_expires_tracked_keys",
                    "active_defrag_hits",
                    "active_defrag_misses",
                    "active_defrag_key_hits",
                    "active_defrag_key_misses",
                    "total_active_defrag_time",
                    "current_active_defrag_time",
                ],
            );
            let tracked = parts
                .iter()
                .fold((0, 0), |a, p| (a.0 + p.tracked.0, a.1 + p.tracked.1));
            kv(o, "tracking_total_keys", tracked.0);
            kv(o, "tracking_total_items", tracked.1);
            kv(o, "tracking_total_prefixes", s.tracking.1);
            kv(
                o,
                "unexpected_error_replies",
                sum(|t| t.unexpected_error_replies),
            );
            kv(o, "total_error_replies", sum(|t| t.total_error_replies));
            zeros(
                o,
                &[
                    "dump_payload_sanitizations",
                    "total_reads_processed",
                    "total_writes_processed",
                    "io_threaded_reads_processed",
                    "io_threaded_writes_processed",
                    "reply_buffer_shrinks",
                    "reply_buffer_expands",
                ],
            );
        }
        "replication" => {
            o.push_str("# Replication\r\n");
            match &s.replica_info {
                Some(lines) => {
                    kv(o, "role", "slave");
                    o.push_str(lines);
                }
                None => kv(o, "role", "master"),
            }
            o.push_str(&s.repl_lines);
        }
        "cpu" => {
            o.push_str("# CPU\r\n");
            for (suffix, who) in [
                ("", libc::RUSAGE_SELF),
                ("_children", libc::RUSAGE_CHILDREN),
            ] {
                let (sys, user) = rusage(who);
                kv(o, &format!("used_cpu_sys{suffix}"), format!("{sys:.6}"));
                kv(o, &format!("used_cpu_user{suffix}"), format!("{user:.6}"));
            }
            // The home thread of the INFO caller stands in for Redis's main
            // thread.
            let (sys, user) = rusage(libc::RUSAGE_THREAD);
            kv(o, "used_cpu_sys_main_thread", format!("{sys:.6}"));
            kv(o, "used_cpu_user_main_thread", format!("{user:.6}"));
        }
        "modules" => o.push_str("# Modules\r\n"),
        "commandstats" => {
            o.push_str("# Commandstats\r\n");
            for (id, (name, _, _)) in registry().specs.iter().enumerate() {
                let (mut calls, mut usec, mut rej, mut failed) = (0u64, 0u64, 0u64, 0u64);
                for c in threads.iter().filter_map(|t| t.cmd.get(id)) {
                    calls += c.calls;
                    usec += c.usec;
                    rej += c.rejected_calls;
                    failed += c.failed_calls;
                }
                if calls == 0 && rej == 0 && failed == 0 {
                    continue;
                }
                let per = if calls == 0 {
                    0.0
                } else {
                    usec as f64 / calls as f64
                };
                let _ = write!(
                    o,
                    "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per:.2},\
                     rejected_calls={rej},failed_calls={failed}\r\n"
                );
            }
        }
        "errorstats" => {
            o.push_str("# Errorstats\r\n");
            let mut errs: Vec<(&str, u64)> = Vec::new();
            for (code, n) in threads.iter().flat_map(|t| t.errors.iter()) {
                match errs.iter_mut().find(|(c, _)| c == code) {
                    Some((_, m)) => *m += n,
                    None => errs.push((code, *n)),
                }
            }
            // Redis keeps them in a radix tree: byte order.
            errs.sort();
            for (code, n) in errs {
                let _ = write!(o, "errorstat_{code}:count={n}\r\n");
            }
        }
        "latencystats" => {
            o.push_str("# Latencystats\r\n");
            if s.config.latency_tracking {
                let hists = threads.iter().map(|t| t.histograms(None)).collect();
                crate::ops::latency::info_lines(
                    o,
                    hists,
                    &s.config.latency_tracking_info_percentiles,
                );
            }
        }
        "cluster" => {
            o.push_str("# Cluster\r\n");
            kv(o, "cluster_enabled", 0);
        }
        "keyspace" => {
            o.push_str("# Keyspace\r\n");
            let ndb = parts.iter().map(|p| p.dbs.len()).max().unwrap_or(0);
            for db in 0..ndb {
                let (mut keys, mut expires, mut ttl_weighted) = (0usize, 0usize, 0u128);
                for &(k, e, t) in parts.iter().filter_map(|p| p.dbs.get(db)) {
                    keys += k;
                    expires += e;
                    ttl_weighted += e as u128 * u128::from(t);
                }
                if keys == 0 {
                    continue;
                }
                // Each shard's mean weighted by its number of volatile keys.
                let avg = ttl_weighted.checked_div(expires as u128).unwrap_or(0);
                let _ = write!(o, "db{db}:keys={keys},expires={expires},avg_ttl={avg}\r\n");
            }
        }
        _ => {}
    }
}
